/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/partition.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "topology/topology.h"

static const char *const mode_names[] = { "off", "root", "isolated" };

int
nrm_partition_mode_parse (const char *text, const char *what, enum nrm_partition_mode *ret, nrm_error_t *err)
{
  for (size_t i = 0; i < sizeof (mode_names) / sizeof (mode_names[0]); i++)
    if (text && strcmp (text, mode_names[i]) == 0)
      {
        *ret = (enum nrm_partition_mode) i;
        return 0;
      }
  return nrm_error_set (err, EINVAL, "%s must be off, root or isolated, not `%s`", what, text ? text : "(none)");
}

const char *
nrm_partition_mode_name (enum nrm_partition_mode m)
{
  return (unsigned) m < sizeof (mode_names) / sizeof (mode_names[0]) ? mode_names[m] : "?";
}

static const char local_only[]
    = "this kernel has only local partitions (no cpuset.cpus.exclusive, which Linux 6.7 added): every ancestor of the "
      "cgroup (for a container kubepods, its QoS and pod cgroups; for a run nrm.slice) would have to be a partition "
      "root itself";

bool
nrm_partition_supported (struct nrm_cgroupfs *fs, char **ret_reason)
{
  static const char *const first[] = { "kubepods.slice", "kubepods" };
  cleanup_free char *probe = NULL;
  if (nrm_cgroupfs_controller (fs, "cpuset") == NRM_CGROUP_V2_NONE)
    {
      *ret_reason = xasprintf ("%s is not cgroup v2 (no cgroup.controllers)", nrm_cgroupfs_root (fs));
      return false;
    }
  for (size_t i = 0; i < 2 && probe == NULL; i++)
    {
      cleanup_free char *v = NULL;
      nrm_error_t e = NULL;
      if (nrm_cgroup_read (fs, first[i], "cpuset.cpus", &v, &e) == 0)
        probe = xstrdup (first[i]);
      nrm_error_release (&e);
    }
  DIR *d = probe ? NULL : opendir (nrm_cgroupfs_root (fs));
  struct dirent *de;
  while (d && probe == NULL && (de = readdir (d)) != NULL)
    {
      cleanup_free char *v = NULL;
      nrm_error_t e = NULL;
      if (de->d_name[0] != '.' && de->d_type == DT_DIR && nrm_cgroup_read (fs, de->d_name, "cpuset.cpus", &v, &e) == 0)
        probe = xstrdup (de->d_name);
      nrm_error_release (&e);
    }
  if (d)
    closedir (d);
  if (probe == NULL)
    {
      *ret_reason = xasprintf ("no cgroup below %s has the cpuset controller", nrm_cgroupfs_root (fs));
      return false;
    }
  cleanup_free char *part = NULL, *ex = NULL;
  nrm_error_t e = NULL;
  if (nrm_cgroup_read (fs, probe, "cpuset.cpus.partition", &part, &e) < 0)
    {
      nrm_error_release (&e);
      *ret_reason = xasprintf ("this kernel has no cpuset partitions (no cpuset.cpus.partition in %s)", probe);
      return false;
    }
  if (nrm_cgroup_read (fs, probe, "cpuset.cpus.exclusive", &ex, &e) < 0)
    {
      nrm_error_release (&e);
      *ret_reason = xstrdup (local_only);
      return false;
    }
  return true;
}

bool
nrm_partition_available (const struct nrm_fsroot *root, char **ret_reason)
{
  struct nrm_cgroupfs *fs = NULL;
  nrm_error_t e = NULL;
  if (nrm_cgroupfs_open (root, &fs, &e) < 0)
    {
      *ret_reason = xstrdup (nrm_error_msg (e));
      nrm_error_release (&e);
      return false;
    }
  bool r = nrm_partition_supported (fs, ret_reason);
  nrm_cgroupfs_close (fs);
  return r;
}

int
nrm_partition_check (const char *cgroup, enum nrm_partition_mode mode, const char *cpus, const char *partition,
                     const char *effective, nrm_error_t *err)
{
  if (strcmp (partition, nrm_partition_mode_name (mode)) != 0)
    return nrm_error_set (err, EINVAL,
                          "the kernel did not make cgroup `%s` a partition: cpuset.cpus.partition reads `%s`", cgroup,
                          partition);
  if (!nrm_cpulist_equal (cpus, effective))
    return nrm_error_set (
        err, EINVAL, "cgroup `%s` is a partition, but its cpuset.cpus.effective reads `%s`, not the claim's CPUs %s",
        cgroup, effective, cpus);
  return 0;
}

/* One written file, and what to put back. */
struct undo
{
  char *cgroup, *file, *old;
};

static void
undo_all (struct nrm_cgroupfs *fs, struct undo *u, size_t n)
{
  /* Newest first: the partition before the exclusive CPUs, a child's
   * exclusive CPUs before its parent's, as the kernel wants them given up. */
  while (n-- > 0)
    {
      nrm_error_t ignored = NULL;
      nrm_cgroup_write (fs, u[n].cgroup, u[n].file, *u[n].old ? u[n].old : "\n", &ignored);
      nrm_error_release (&ignored);
    }
}

int
nrm_partition_make (struct nrm_cgroupfs *fs, const char *cgroup, const char *cpus, enum nrm_partition_mode mode,
                    char **ret_effective, nrm_error_t *err)
{
  const char *c = cgroup && cgroup[0] == '/' ? cgroup + 1 : cgroup;
  if (mode == NRM_PARTITION_OFF)
    return 0;
  if (!nrm_cgroup_path_valid (cgroup) || *c == '\0')
    return nrm_error_set (err, EINVAL, "invalid cgroup path `%s` for a partition", cgroup ? cgroup : "(none)");
  cleanup_free char *part = NULL, *ex = NULL;
  if (nrm_cgroup_read (fs, c, "cpuset.cpus.partition", &part, err) < 0)
    {
      nrm_error_release (err);
      return nrm_error_set (err, ENOTSUP, "this kernel has no cpuset partitions (no cpuset.cpus.partition in `%s`)", c);
    }
  if (nrm_cgroup_read (fs, c, "cpuset.cpus.exclusive", &ex, err) < 0)
    {
      nrm_error_release (err);
      return nrm_error_set (err, ENOTSUP, "%s", local_only);
    }

  /* The ancestors below the root, top first, then the cgroup itself. */
  size_t len = strlen (c), depth = 1;
  for (size_t i = 0; i < len; i++)
    depth += c[i] == '/';
  struct undo *u = xcalloc (depth + 1, sizeof (*u));
  size_t n = 0;
  int r = -1;
  cleanup_free char *eff = NULL, *now = NULL;
  for (size_t i = 1; i <= len; i++)
    {
      if (i < len && c[i] != '/')
        continue;
      bool self = i == len;
      cleanup_free char *path = xstrndup (c, i);
      char *old = NULL;
      if (nrm_cgroup_read (fs, path, "cpuset.cpus.exclusive", &old, err) < 0)
        goto fail;
      cleanup_free char *want = self ? xstrdup (cpus) : nrm_cpulist_combine (old, cpus, NRM_CPULIST_UNION);
      if (want == NULL)
        {
          nrm_error_set (err, EINVAL, "cgroup `%s`: cpuset.cpus.exclusive reads `%s`, not a CPU list", path, old);
          free (old);
          goto fail;
        }
      if (strcmp (old, want) == 0)
        {
          free (old);
          continue;
        }
      u[n] = (struct undo){ xstrdup (path), xstrdup ("cpuset.cpus.exclusive"), old };
      n++;
      if (nrm_cgroup_write (fs, path, "cpuset.cpus.exclusive", want, err) < 0)
        {
          n--; /* nothing was written */
          free (u[n].cgroup);
          free (u[n].file);
          free (u[n].old);
          goto fail;
        }
    }
  u[n++] = (struct undo){ xstrdup (c), xstrdup ("cpuset.cpus.partition"), xstrdup ("member") };
  if (nrm_cgroup_write (fs, c, "cpuset.cpus.partition", nrm_partition_mode_name (mode), err) < 0)
    goto fail;
  /* The kernel takes the value and reports a refusal only on reading. */
  if (nrm_cgroup_read (fs, c, "cpuset.cpus.partition", &now, err) < 0
      || nrm_cgroup_read (fs, c, "cpuset.cpus.effective", &eff, err) < 0
      || nrm_partition_check (c, mode, cpus, now, eff, err) < 0)
    goto fail;
  if (ret_effective)
    *ret_effective = TAKE_PTR (eff);
  r = 0;
  goto out;
fail:
  undo_all (fs, u, n);
out:
  for (size_t i = 0; i < n; i++)
    {
      free (u[i].cgroup);
      free (u[i].file);
      free (u[i].old);
    }
  free (u);
  return r;
}

/* The exclusive CPUs cgroup needs (its own as a partition root, else its
 * children's), written when its file says more; into need. */
static int
trim (struct nrm_cgroupfs *fs, const char *cgroup, int depth, hwloc_bitmap_t need, size_t *n, nrm_error_t *err)
{
  cleanup_free char *ex = NULL, *part = NULL;
  nrm_error_t e = NULL;
  if (nrm_cgroup_read (fs, cgroup, "cpuset.cpus.exclusive", &ex, &e) < 0)
    {
      nrm_error_release (&e); /* vanished, or no cpuset here: needs nothing */
      return 0;
    }
  hwloc_bitmap_t have = NULL;
  if (nrm_cpulist_parse (ex, &have, err) < 0)
    return nrm_error_wrap (err, "cgroup `%s`: cpuset.cpus.exclusive", cgroup);
  if (nrm_cgroup_read (fs, cgroup, "cpuset.cpus.partition", &part, &e) == 0 && strncmp (part, "member", 6) != 0)
    {
      /* A partition root, valid or not: what it holds stays. */
      hwloc_bitmap_or (need, need, have);
      hwloc_bitmap_free (have);
      return 0;
    }
  nrm_error_release (&e);
  hwloc_bitmap_t mine = xbitmap_alloc ();
  int r = 0;
  if (depth < 5 && !hwloc_bitmap_iszero (have))
    {
      cleanup_free char *full = xasprintf ("%s/%s", nrm_cgroupfs_root (fs), cgroup);
      DIR *d = opendir (full);
      struct dirent *de;
      while (r == 0 && d && (de = readdir (d)) != NULL)
        {
          if (de->d_name[0] == '.' || de->d_type != DT_DIR)
            continue;
          cleanup_free char *child = xasprintf ("%s/%s", cgroup, de->d_name);
          r = trim (fs, child, depth + 1, mine, n, err);
        }
      if (d)
        closedir (d);
    }
  else
    hwloc_bitmap_copy (mine, have); /* too deep to look: left as it is */
  if (r == 0 && !hwloc_bitmap_isequal (mine, have))
    {
      cleanup_free char *text = nrm_cpulist_format (mine);
      if (nrm_cgroup_write (fs, cgroup, "cpuset.cpus.exclusive", *text ? text : "\n", err) < 0)
        r = -1;
      else
        ++*n;
    }
  if (r == 0)
    hwloc_bitmap_or (need, need, mine);
  hwloc_bitmap_free (mine);
  hwloc_bitmap_free (have);
  return r;
}

int
nrm_partition_trim (struct nrm_cgroupfs *fs, const char *top, size_t *ret_trimmed, nrm_error_t *err)
{
  hwloc_bitmap_t need = xbitmap_alloc ();
  *ret_trimmed = 0;
  int r = trim (fs, top, 0, need, ret_trimmed, err);
  hwloc_bitmap_free (need);
  return r;
}
