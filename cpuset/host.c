/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/host.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"
#include "topology/topology.h"

#define HOST_FILE "host-cgroups.json"

static const char *
strip (const char *cgroup)
{
  return cgroup[0] == '/' ? cgroup + 1 : cgroup;
}

static bool
under (const char *path, const char *top)
{
  size_t n = strlen (top);
  return strncmp (path, top, n) == 0 && path[n] == '/';
}

int
nrm_host_subtree_check (const char *path, nrm_error_t *err)
{
  static const char *const own[] = { "kubepods.slice", "kubepods", "nrm.slice" };
  if (path == NULL || !nrm_cgroup_path_valid (path) || *strip (path) == '\0')
    return nrm_error_set (err, EINVAL, "`%s` is not a cgroup path below the root (e.g. system.slice)",
                          path ? path : "");
  const char *p = strip (path);
  for (size_t i = 0; i < sizeof (own) / sizeof (own[0]); i++)
    if (strcmp (p, own[i]) == 0 || under (p, own[i]))
      return nrm_error_set (err, EINVAL, "`%s` is nrm's own: %s", path,
                            i < 2 ? "pod containers are kept on the shared pool anyway"
                                  : "where nrm run's commands run");
  return 0;
}

/* --- the list of confined cgroups ------------------------------------------------- */

static json_t *
confined_load (const char *state_dir)
{
  cleanup_free char *path = xasprintf ("%s/%s", state_dir, HOST_FILE), *text = NULL;
  nrm_error_t e = NULL;
  json_t *doc = NULL;
  if (nrm_read_file (path, 1 << 20, &text, NULL, &e) == 0)
    doc = json_loads (text, 0, NULL);
  nrm_error_release (&e);
  json_t *c = json_object_get (doc, "confined");
  json_t *r = json_is_object (c) ? json_incref (c) : json_object ();
  json_decref (doc);
  return r;
}

static int
confined_save (const char *state_dir, json_t *confined, nrm_error_t *err)
{
  cleanup_free char *path = xasprintf ("%s/%s", state_dir, HOST_FILE);
  cleanup_json json_t *doc = json_pack ("{s:i, s:O}", "version", 1, "confined", confined);
  cleanup_free char *text = json_dumps (doc, JSON_SORT_KEYS | JSON_COMPACT);
  /* Synced: after a crash the list still says which values are nrm's. */
  return nrm_write_atomic (path, text, strlen (text), 0600, err);
}

/* --- sets ---------------------------------------------------------------------- */

/* What a cpuset file means: its own list, or the kernel's effective one
 * when it is empty (inherited). NULL with *err when it cannot be read. */
static char *
cpuset_value (struct nrm_cgroupfs *fs, const char *cgroup, const char *file, nrm_error_t *err)
{
  char *v = NULL;
  if (nrm_cgroup_read (fs, cgroup, file, &v, err) < 0)
    return NULL;
  if (*v == '\0')
    {
      cleanup_free char *eff = xasprintf ("%s.effective", file);
      free (v);
      v = NULL;
      if (nrm_cgroup_read (fs, cgroup, eff, &v, err) < 0)
        return NULL;
    }
  return v;
}

/* cpuset handed down by cgroup to its children: systemd turns it on for a
 * slice only when a unit below asks for CPUs, podman's runtime only for its
 * own container. A cgroup without the file (not cgroupfs) is left. */
static int
hand_down_cpuset (struct nrm_cgroupfs *fs, const char *cgroup, bool *written, nrm_error_t *err)
{
  nrm_error_t e = NULL;
  cleanup_free char *ctl = NULL;
  if (nrm_cgroup_read (fs, cgroup, "cgroup.subtree_control", &ctl, &e) < 0)
    {
      nrm_error_release (&e);
      return 0;
    }
  for (char *save = NULL, *tok = strtok_r (ctl, " ", &save); tok; tok = strtok_r (NULL, " ", &save))
    if (strcmp (tok, "cpuset") == 0)
      return 0;
  if (nrm_cgroup_write (fs, cgroup, "cgroup.subtree_control", "+cpuset", err) < 0)
    return -1;
  if (written)
    *written = true;
  return 0;
}

/* --- one pass ------------------------------------------------------------------ */

/* Shorter paths first: parents before their children. */
static int
by_length (const void *a, const void *b)
{
  size_t x = strlen (*(const char *const *) a), y = strlen (*(const char *const *) b);
  return x < y ? -1 : x > y;
}

struct pass
{
  struct nrm_cgroupfs *fs;
  const struct nrm_host_claims *claims;
  const char *cpus, *mems;
  json_t *old, *now; /* confined before this pass, and by it */
  struct nrm_host_stats *st;
  char **first_error;
};

static void
failed (struct pass *p, nrm_error_t *e)
{
  nrm_error_tally (e, &p->st->failed, p->first_error);
}

/* The cpuset files of cgroup, the parent made to hand them down where it
 * does not. */
static bool
cpuset_on (struct pass *p, const char *parent, const char *cgroup)
{
  nrm_error_t e = NULL;
  cleanup_free char *v = NULL;
  if (nrm_cgroup_read (p->fs, cgroup, "cpuset.cpus", &v, &e) == 0)
    return true;
  nrm_error_release (&e);
  if (!nrm_cgroup_exists (p->fs, cgroup))
    return false; /* gone meanwhile */
  bool written = false;
  if (hand_down_cpuset (p->fs, parent, &written, &e) < 0)
    {
      nrm_error_wrap (&e, "cgroup `%s` has no cpuset files", cgroup);
      failed (p, &e);
      return false;
    }
  if (written)
    p->st->updated++;
  return written;
}

static void
ensure (struct pass *p, const char *cgroup, const char *file, const char *want)
{
  nrm_error_t e = NULL;
  cleanup_free char *raw = NULL;
  if (nrm_cgroup_read (p->fs, cgroup, file, &raw, &e) < 0)
    {
      if (e->status == ENOENT && !nrm_cgroup_exists (p->fs, cgroup))
        nrm_error_release (&e); /* gone meanwhile */
      else
        failed (p, &e);
      return;
    }
  /* An inherited (empty) set is written even when it is the pool now: the
   * subtree must keep the pool when the parent's set changes. */
  if (*raw && nrm_cpulist_equal (raw, want))
    return;
  if (nrm_cgroup_write (p->fs, cgroup, file, want, &e) < 0)
    failed (p, &e);
  else
    p->st->updated++;
}

static char *
parent_of (const char *cgroup)
{
  const char *slash = strrchr (cgroup, '/');
  return slash ? xstrndup (cgroup, (size_t) (slash - cgroup)) : xstrdup ("");
}

/* A cgroup nrm held that now leads to claims, or whose subtree is no longer
 * named: it gets what its parent has, written out. It cannot go back to an
 * empty (inherited) set: Linux refuses to empty a populated cpuset
 * (ENOSPC, seen on 6.1). */
static void
release (struct pass *p, const char *cgroup)
{
  cleanup_free char *parent = parent_of (cgroup);
  for (int i = 0; i < (p->mems ? 2 : 1); i++)
    {
      const char *file = i ? "cpuset.mems" : "cpuset.cpus";
      cleanup_free char *eff = xasprintf ("%s.effective", file), *has = NULL;
      nrm_error_t e = NULL;
      if (nrm_cgroup_read (p->fs, parent, eff, &has, &e) < 0 || *has == '\0')
        {
          nrm_error_release (&e); /* gone, or no cpuset any more */
          continue;
        }
      ensure (p, cgroup, file, has);
    }
}

/* Holds cgroup on the pool, and keeps it listed. */
static void
hold (struct pass *p, const char *cgroup)
{
  ensure (p, cgroup, "cpuset.cpus", p->cpus);
  if (p->mems)
    ensure (p, cgroup, "cpuset.mems", p->mems);
  json_object_set_new (p->now, cgroup, json_object ());
}

static void
confine (struct pass *p, const char *parent, const char *cgroup, int depth)
{
  if (p->claims->is_claimed (cgroup, p->claims->arg))
    {
      p->st->kept++;
      p->claims->keep (cgroup, p->claims->arg);
      return;
    }
  if (!cpuset_on (p, parent, cgroup))
    return;
  if (!p->claims->holds_claims (cgroup, p->claims->arg) || depth > 32)
    {
      /* The whole subtree on the pool, through this one cgroup; and those
       * below it that nrm held before, which keep a set of their own. */
      hold (p, cgroup);
      p->st->confined++;
      const char *c;
      json_t *v;
      json_object_foreach (p->old, c, v)
      {
        if (under (c, cgroup) && nrm_cgroup_exists (p->fs, c))
          hold (p, c);
      }
      return;
    }
  /* Claims below: every other branch first, then this one takes its
   * parent's set again. */
  cleanup_free char *full = xasprintf ("%s/%s", nrm_cgroupfs_root (p->fs), cgroup);
  DIR *d = opendir (full);
  struct dirent *de;
  while (d && (de = readdir (d)) != NULL)
    {
      if (de->d_name[0] == '.' || de->d_type != DT_DIR)
        continue;
      cleanup_free char *child = xasprintf ("%s/%s", cgroup, de->d_name);
      confine (p, cgroup, child, depth + 1);
    }
  if (d)
    closedir (d);
  if (json_object_get (p->old, cgroup))
    release (p, cgroup);
}

int
nrm_host_reconcile (struct nrm_cgroupfs *fs, const char *state_dir, const char *const *subtrees, size_t n,
                    const struct nrm_host_claims *claims, const char *shared_cpus, const char *shared_mems,
                    struct nrm_host_stats *st, char **first_error, nrm_error_t *err)
{
  memset (st, 0, sizeof (*st));
  cleanup_json json_t *old = confined_load (state_dir);
  cleanup_json json_t *now = json_object ();
  struct pass p = { fs, claims, shared_cpus, shared_mems, old, now, st, first_error };
  for (size_t i = 0; i < n; i++)
    {
      const char *s = strip (subtrees[i]);
      if (!nrm_cgroup_exists (fs, s))
        continue; /* not on this host (no docker, say) */
      cleanup_free char *parent = parent_of (s);
      confine (&p, parent, s, 0);
    }
  /* Entries of subtrees no longer named, top down (each takes its
   * parent's set); those of cgroups that are gone are dropped. */
  size_t k = 0;
  cleanup_free const char **gone = xcalloc (json_object_size (old) + 1, sizeof (char *));
  const char *c;
  json_t *v;
  json_object_foreach (old, c, v)
  {
    bool named = false;
    for (size_t i = 0; i < n && !named; i++)
      named = strcmp (c, strip (subtrees[i])) == 0 || under (c, strip (subtrees[i]));
    if (!named && !json_object_get (now, c) && nrm_cgroup_exists (fs, c))
      gone[k++] = c;
  }
  qsort (gone, k, sizeof (*gone), by_length);
  for (size_t i = 0; i < k; i++)
    release (&p, gone[i]);
  if (json_equal (old, now))
    return 0;
  return confined_save (state_dir, now, err);
}

/* --- the hook's side ------------------------------------------------------------- */

/* The child of ancestor on the way to cgroup. */
static char *
next_on_path (const char *ancestor, const char *cgroup)
{
  const char *rest = cgroup + strlen (ancestor) + 1;
  const char *slash = strchr (rest, '/');
  return xstrndup (cgroup, (size_t) ((slash ? slash : rest + strlen (rest)) - cgroup));
}

/* raw ∩ have, or have where they do not meet: what a child's file
 * yields below a parent that has have (the kernel's rule). */
static char *
list_within (const char *raw, const char *have)
{
  char *r = *raw ? nrm_cpulist_combine (raw, have, NRM_CPULIST_INTERSECTION) : NULL;
  if (r && *r)
    return r;
  free (r);
  return xstrdup (have);
}

/* Pins the children of a (but next) to what they have below a now, so that
 * widening a gives them nothing: an inheriting one to a's set, one with a
 * set of its own to the part of it that a allows. */
static int
pin_siblings (struct nrm_cgroupfs *fs, const char *a, const char *next, const char *file, const char *have,
              json_t *confined, nrm_error_t *err)
{
  cleanup_free char *full = xasprintf ("%s/%s", nrm_cgroupfs_root (fs), a);
  DIR *d = opendir (full);
  struct dirent *de;
  int r = 0;
  while (r == 0 && d && (de = readdir (d)) != NULL)
    {
      if (de->d_name[0] == '.' || de->d_type != DT_DIR)
        continue;
      cleanup_free char *child = xasprintf ("%s/%s", a, de->d_name), *raw = NULL;
      nrm_error_t e = NULL;
      if (strcmp (child, next) == 0 || nrm_cgroup_read (fs, child, file, &raw, &e) < 0)
        {
          nrm_error_release (&e); /* no cpuset there: it has a's */
          continue;
        }
      cleanup_free char *keep = list_within (raw, have);
      if (*raw && strcmp (raw, keep) == 0)
        continue;
      if (nrm_cgroup_write (fs, child, file, keep, err) < 0)
        r = -1;
      else
        json_object_set_new (confined, child, json_object ());
    }
  if (d)
    closedir (d);
  return r;
}

int
nrm_host_make_room (struct nrm_cgroupfs *fs, const char *state_dir, const char *cgroup, const char *cpus,
                    const char *mems, nrm_error_t *err)
{
  cleanup_json json_t *confined = confined_load (state_dir);
  const char *cg = strip (cgroup);
  size_t n = 0;
  cleanup_free const char **above = xcalloc (json_object_size (confined) + 1, sizeof (char *));
  const char *c;
  json_t *v;
  json_object_foreach (confined, c, v)
  {
    if (under (cg, c))
      above[n++] = c;
  }
  if (n == 0)
    return 0;
  /* Top down: a cgroup can only take on what its parent has. */
  qsort (above, n, sizeof (*above), by_length);
  cleanup_json json_t *after = json_deep_copy (confined);
  int r = 0;
  for (size_t i = 0; i < n && r == 0; i++)
    {
      cleanup_free char *next = next_on_path (above[i], cg);
      const char *files[] = { "cpuset.cpus", "cpuset.mems" };
      const char *want[] = { cpus, mems };
      for (int k = 0; k < 2 && r == 0; k++)
        {
          if (want[k] == NULL)
            continue;
          cleanup_free char *have = cpuset_value (fs, above[i], files[k], err), *both = NULL;
          if (have == NULL)
            r = nrm_error_wrap (err, "making room for `%s`", cgroup);
          else if (nrm_cpulist_subset (want[k], have))
            continue;
          else if ((both = nrm_cpulist_combine (have, want[k], NRM_CPULIST_UNION)) == NULL)
            r = nrm_error_set (err, EINVAL, "`%s` of cgroup `%s` is not a list: `%s`", files[k], above[i], have);
          else if (hand_down_cpuset (fs, above[i], NULL, err) < 0
                   || pin_siblings (fs, above[i], next, files[k], have, after, err) < 0
                   || nrm_cgroup_write (fs, above[i], files[k], both, err) < 0)
            r = nrm_error_wrap (err, "making room for `%s` in cgroup `%s`, which nrm keeps on the shared pool", cgroup,
                                above[i]);
        }
    }
  /* The siblings pinned before a failure are nrm's too. */
  if (!json_equal (after, confined))
    {
      nrm_error_t e = NULL;
      if (confined_save (state_dir, after, r < 0 ? &e : err) < 0 && r == 0)
        r = -1;
      nrm_error_release (&e);
    }
  return r;
}
