/* SPDX-License-Identifier: Apache-2.0 */
/* Passthrough through vfio-pci, journaled. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "driver/pci/vfio.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"

#define VFIO "vfio-pci"

bool
nrm_vfio_possible (const struct nrm_fsroot *fsroot, const struct nrm_pci_facts *f, const char **why)
{
  if (f->iommu_group < 0)
    {
      *why = "no IOMMU group (IOMMU off?)";
      return false;
    }
  if (!nrm_fsroot_exists (fsroot, "/sys/bus/pci/drivers/" VFIO))
    {
      *why = "vfio-pci is not loaded";
      return false;
    }
  cleanup_free char *group = nrm_fsroot_path (fsroot, "/sys/kernel/iommu_groups/%d/devices", f->iommu_group);
  DIR *d = opendir (group);
  size_t n = 0;
  for (struct dirent *e; d && (e = readdir (d));)
    n += e->d_name[0] != '.';
  if (d)
    closedir (d);
  /* A group is handed over whole: only a function alone in it. */
  if (n > 1)
    {
      *why = "its IOMMU group holds other functions";
      return false;
    }
  return true;
}

static char *
journal_path (const char *dir, const char *bus_id)
{
  return xasprintf ("%s/%s.json", dir, bus_id);
}

/* Writes text to a sysfs attribute. */
static int
sysfs_write (const char *path, const char *text, nrm_error_t *err)
{
  cleanup_close int fd = open (path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  size_t len = strlen (text);
  if (fd < 0)
    return nrm_error_errno (err, errno, "cannot open %s", path);
  ssize_t n = write (fd, text, len);
  if (n < 0)
    return nrm_error_errno (err, errno, "writing `%s` to %s", text[0] == '\n' ? "\\n" : text, path);
  return 0;
}

/* The function's bound driver, or NULL. */
static char *
bound_driver (const struct nrm_fsroot *fsroot, const char *bus_id)
{
  char target[PATH_MAX];
  cleanup_free char *link = nrm_fsroot_path (fsroot, "/sys/bus/pci/devices/%s/driver", bus_id);
  ssize_t n = readlink (link, target, sizeof (target) - 1);
  if (n <= 0)
    return NULL;
  target[n] = '\0';
  const char *slash = strrchr (target, '/');
  return xstrdup (slash ? slash + 1 : target);
}

static bool
driver_is (const struct nrm_fsroot *fsroot, const char *bus_id, const char *want)
{
  cleanup_free char *now = bound_driver (fsroot, bus_id);
  return want ? now && strcmp (now, want) == 0 : now == NULL;
}

/* Waits until test() holds, up to timeout_ms. */
static bool
wait_for (bool (*test) (const struct nrm_fsroot *, const char *, const char *), const struct nrm_fsroot *fsroot,
          const char *bus_id, const char *arg, int timeout_ms)
{
  for (int waited = 0;; waited += 10)
    {
      if (test (fsroot, bus_id, arg))
        return true;
      if (waited >= timeout_ms)
        return false;
      nanosleep (&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
    }
}

static bool
not_vfio (const struct nrm_fsroot *fsroot, const char *bus_id, const char *unused)
{
  (void) unused;
  return !driver_is (fsroot, bus_id, VFIO);
}

static bool
node_exists (const struct nrm_fsroot *fsroot, const char *bus_id, const char *node)
{
  (void) bus_id;
  return nrm_fsroot_exists (fsroot, node);
}

static bool
is_driver (const struct nrm_fsroot *fsroot, const char *bus_id, const char *want)
{
  return driver_is (fsroot, bus_id, want);
}

static int
write_journal (const char *dir, const char *bus_id, const char *orig, const char *uid, const char *step,
               nrm_error_t *err)
{
  cleanup_free char *path = journal_path (dir, bus_id);
  cleanup_json json_t *j
      = json_pack ("{s:s, s:o, s:s, s:I, s:s}", "busID", bus_id, "driver", orig ? json_string (orig) : json_null (),
                   "claim", uid, "since", (json_int_t) time (NULL), "step", step);
  cleanup_free char *text = json_dumps (j, JSON_SORT_KEYS);
  if (nrm_mkdir_p (dir, 0700, err) < 0)
    return -1;
  return nrm_write_atomic (path, text, strlen (text), 0600, err);
}

static json_t *
read_journal (const char *dir, const char *bus_id)
{
  cleanup_free char *path = journal_path (dir, bus_id);
  cleanup_free char *text = NULL;
  nrm_error_t e = NULL;
  if (nrm_read_file (path, 65536, &text, NULL, &e) < 0)
    {
      nrm_error_release (&e);
      return NULL;
    }
  json_t *j = json_loads (text, 0, NULL);
  if (!json_is_object (j))
    {
      json_decref (j);
      /* An unreadable entry (a torn write cannot happen: it is renamed
       * into place) still means the function may be ours. */
      return json_object ();
    }
  return j;
}

bool
nrm_vfio_journaled (const char *dir, const char *bus_id, char **uid, time_t *since)
{
  cleanup_json json_t *j = dir ? read_journal (dir, bus_id) : NULL;
  if (j == NULL)
    return false;
  if (uid)
    *uid = json_string_value (json_object_get (j, "claim")) ? xstrdup (json_string_value (json_object_get (j, "claim")))
                                                            : NULL;
  if (since)
    *since = (time_t) json_integer_value (json_object_get (j, "since"));
  return true;
}

int
nrm_vfio_bind (const struct nrm_fsroot *fsroot, const char *dir, const char *bus_id, const char *uid, int timeout_ms,
               nrm_error_t *err)
{
  if (!nrm_pci_bus_id_valid (bus_id))
    return nrm_error_set (err, EINVAL, "`%s` is not a PCI bus id", bus_id);
  cleanup_json json_t *old = read_journal (dir, bus_id);
  cleanup_free char *orig = bound_driver (fsroot, bus_id);
  struct nrm_pci_facts f;
  if (nrm_pci_facts_read (fsroot, bus_id, &f, err) < 0)
    return -1;
  char node[32];
  snprintf (node, sizeof (node), "/dev/vfio/%d", f.iommu_group);
  nrm_pci_facts_done (&f);
  if (orig && strcmp (orig, VFIO) == 0)
    {
      /* Bound already (a bind before a restart, or prepare after bind). */
      if (old == NULL)
        return nrm_error_set (err, EBUSY, "%s is bound to vfio-pci by someone else", bus_id);
      const char *was = json_string_value (json_object_get (old, "driver"));
      return write_journal (dir, bus_id, was, uid, "bound", err);
    }
  if (old != NULL)
    {
      /* A journal without the binding: an interrupted bind or release.
       * Its driver is the one the function had before nrm. */
      const char *was = json_string_value (json_object_get (old, "driver"));
      free (orig);
      orig = was ? xstrdup (was) : NULL;
    }
  /* The journal first: a crash after any later step leaves it. */
  if (write_journal (dir, bus_id, orig, uid, "binding", err) < 0)
    return nrm_error_wrap (err, "passthrough of %s", bus_id);

  cleanup_free char *override = nrm_fsroot_path (fsroot, "/sys/bus/pci/devices/%s/driver_override", bus_id);
  cleanup_free char *unbind = nrm_fsroot_path (fsroot, "/sys/bus/pci/devices/%s/driver/unbind", bus_id);
  cleanup_free char *probe = nrm_fsroot_path (fsroot, "/sys/bus/pci/drivers_probe");
  nrm_error_t e = NULL;
  const char *step = "setting driver_override";
  if (sysfs_write (override, VFIO, &e) < 0)
    goto undo;
  step = "unbinding its driver";
  if (orig && sysfs_write (unbind, bus_id, &e) < 0)
    goto undo;
  step = "probing vfio-pci";
  if (sysfs_write (probe, bus_id, &e) < 0)
    goto undo;
  step = "waiting for vfio-pci";
  if (!wait_for (is_driver, fsroot, bus_id, VFIO, timeout_ms))
    {
      nrm_error_set (&e, ETIMEDOUT, "vfio-pci did not take it within %d ms", timeout_ms);
      goto undo;
    }
  step = "waiting for its VFIO group node";
  if (!wait_for (node_exists, fsroot, bus_id, node, timeout_ms))
    {
      nrm_error_set (&e, ETIMEDOUT, "%s did not appear within %d ms", node, timeout_ms);
      goto undo;
    }
  return write_journal (dir, bus_id, orig, uid, "bound", err);

undo:
  nrm_error_set (err, e ? e->status : EIO, "passthrough of %s: %s: %s", bus_id, step, e ? nrm_error_msg (e) : "");
  nrm_error_release (&e);
  /* Back to where it was; the journal goes only when that worked. */
  if (nrm_vfio_release (fsroot, dir, bus_id, timeout_ms, &e) < 0)
    {
      nrm_error_wrap (err, "and giving it back failed too (%s)", nrm_error_msg (e));
      nrm_error_release (&e);
    }
  return -1;
}

int
nrm_vfio_release (const struct nrm_fsroot *fsroot, const char *dir, const char *bus_id, int timeout_ms,
                  nrm_error_t *err)
{
  cleanup_json json_t *j = read_journal (dir, bus_id);
  if (j == NULL)
    return 0;
  const char *orig = json_string_value (json_object_get (j, "driver"));
  cleanup_free char *override = nrm_fsroot_path (fsroot, "/sys/bus/pci/devices/%s/driver_override", bus_id);
  cleanup_free char *unbind = nrm_fsroot_path (fsroot, "/sys/bus/pci/drivers/" VFIO "/unbind");
  cleanup_free char *probe = nrm_fsroot_path (fsroot, "/sys/bus/pci/drivers_probe");
  cleanup_free char *devdir = nrm_fsroot_path (fsroot, "/sys/bus/pci/devices/%s", bus_id);
  struct stat st;
  if (stat (devdir, &st) == 0)
    {
      /* An empty override lets the kernel match drivers by id again. */
      if (sysfs_write (override, "\n", err) < 0)
        return nrm_error_wrap (err, "giving %s back", bus_id);
      if (driver_is (fsroot, bus_id, VFIO) && sysfs_write (unbind, bus_id, err) < 0)
        return nrm_error_wrap (err, "giving %s back", bus_id);
      if (orig && sysfs_write (probe, bus_id, err) < 0)
        return nrm_error_wrap (err, "giving %s back", bus_id);
      if (!wait_for (not_vfio, fsroot, bus_id, NULL, timeout_ms))
        return nrm_error_set (err, ETIMEDOUT, "giving %s back: vfio-pci still holds it after %d ms", bus_id,
                              timeout_ms);
    }
  /* Off vfio-pci (or gone from the machine): the journal entry goes. */
  cleanup_free char *path = journal_path (dir, bus_id);
  if (unlink (path) < 0 && errno != ENOENT)
    return nrm_error_errno (err, errno, "cannot remove %s", path);
  cleanup_close int dfd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0)
    fsync (dfd);
  if (orig && stat (devdir, &st) == 0 && !wait_for (is_driver, fsroot, bus_id, orig, timeout_ms))
    return nrm_error_set (err, ENODEV, "%s is off vfio-pci, but %s did not take it back", bus_id, orig);
  return 0;
}

static int
cmp_str (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

int
nrm_vfio_list (const char *dir, char ***ret, size_t *n, nrm_error_t *err)
{
  (void) err;
  *ret = NULL;
  *n = 0;
  DIR *d = dir ? opendir (dir) : NULL;
  if (d == NULL)
    return 0; /* no journal yet */
  for (struct dirent *e; (e = readdir (d));)
    {
      size_t len = strlen (e->d_name);
      if (len != 17 || strcmp (e->d_name + 12, ".json") != 0)
        continue;
      char id[NRM_PCI_BUS_ID_LEN];
      memcpy (id, e->d_name, 12);
      id[12] = '\0';
      if (!nrm_pci_bus_id_valid (id))
        continue;
      *ret = xrealloc (*ret, (*n + 1) * sizeof (**ret));
      (*ret)[(*n)++] = xstrdup (id);
    }
  closedir (d);
  if (*n)
    qsort (*ret, *n, sizeof (**ret), cmp_str);
  return 0;
}
