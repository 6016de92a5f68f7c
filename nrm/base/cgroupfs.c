/* SPDX-License-Identifier: Apache-2.0 */
/* cgroup v2 files under one root (nrm/base/cgroupfs.h). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nrm/base/cgroupfs.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"

struct nrm_cgroupfs
{
  int fd;
  char *root;
};

int
nrm_cgroupfs_open (const struct nrm_fsroot *root, struct nrm_cgroupfs **ret, nrm_error_t *err)
{
  struct nrm_cgroupfs *fs = xcalloc (1, sizeof (*fs));
  fs->root = nrm_fsroot_path (root, "/sys/fs/cgroup");
  fs->fd = nrm_fsroot_openat (root, "/sys/fs/cgroup", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fs->fd < 0)
    {
      int e = errno;
      free (fs->root);
      free (fs);
      return nrm_error_errno (err, e, "cannot open the cgroup root `%s`", nrm_fsroot_dir (root));
    }
  *ret = fs;
  return 0;
}

void
nrm_cgroupfs_close (struct nrm_cgroupfs *fs)
{
  if (fs == NULL)
    return;
  close (fs->fd);
  free (fs->root);
  free (fs);
}

const char *
nrm_cgroupfs_root (const struct nrm_cgroupfs *fs)
{
  return fs->root;
}

bool
nrm_cgroup_path_valid (const char *path)
{
  if (path == NULL || strlen (path) > 4000)
    return false;
  const char *p = path[0] == '/' ? path + 1 : path;
  if (*p == '\0')
    return true; /* the root itself */
  for (;;)
    {
      const char *slash = strchr (p, '/');
      size_t n = slash ? (size_t) (slash - p) : strlen (p);
      if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
        return false;
      for (size_t i = 0; i < n; i++)
        if (!isprint ((unsigned char) p[i]))
          return false;
      if (slash == NULL)
        return true;
      p = slash + 1;
    }
}

/* "<cgroup>/<file>" relative to the root, or NULL for a bad path. */
static char *
rel (const char *cgroup, const char *file)
{
  const char *c = cgroup[0] == '/' ? cgroup + 1 : cgroup;
  if (!nrm_cgroup_path_valid (cgroup) || strchr (file, '/') != NULL)
    return NULL;
  return xasprintf ("%s%s%s", c, *c ? "/" : "", file);
}

static int
open_at (struct nrm_cgroupfs *fs, const char *relpath, int flags)
{
  /* Component by component with O_NOFOLLOW: a link cannot lead out. */
  cleanup_free char *copy = xstrdup (relpath);
  int dir = dup (fs->fd);
  char *save = NULL, *part = strtok_r (copy, "/", &save);
  while (part != NULL)
    {
      char *nextpart = strtok_r (NULL, "/", &save);
      int fd = openat (dir, part, (nextpart ? O_RDONLY | O_DIRECTORY : flags) | O_CLOEXEC | O_NOFOLLOW);
      int e = errno;
      close (dir);
      if (fd < 0)
        {
          errno = e;
          return -1;
        }
      dir = fd;
      part = nextpart;
    }
  return dir;
}

enum nrm_cgroup_v2
nrm_cgroupfs_controller (struct nrm_cgroupfs *fs, const char *controller)
{
  char buf[1024];
  cleanup_close int fd = openat (fs->fd, "cgroup.controllers", O_RDONLY | O_CLOEXEC);
  ssize_t len = fd >= 0 ? read (fd, buf, sizeof (buf) - 1) : -1;
  if (fd < 0)
    return NRM_CGROUP_V2_NONE;
  buf[len > 0 ? len : 0] = '\0';
  char *save = NULL;
  for (char *tok = strtok_r (buf, " \n", &save); tok; tok = strtok_r (NULL, " \n", &save))
    if (strcmp (tok, controller) == 0)
      return NRM_CGROUP_V2_WITH;
  return NRM_CGROUP_V2_WITHOUT;
}

enum nrm_cgroup_v2
nrm_cgroup_v2_controller (const struct nrm_fsroot *root, const char *controller)
{
  struct nrm_cgroupfs *fs = NULL;
  nrm_error_t e = NULL;
  if (nrm_cgroupfs_open (root, &fs, &e) < 0)
    {
      nrm_error_release (&e);
      return NRM_CGROUP_V2_NONE;
    }
  enum nrm_cgroup_v2 r = nrm_cgroupfs_controller (fs, controller);
  nrm_cgroupfs_close (fs);
  return r;
}

/* A controller's file that is not there: on a host whose cgroup v2 lacks
 * the controller altogether (cgroup v1, or a hybrid host with cpuset on
 * v1) that, rather than a vanished cgroup, is what to say. */
static int
missing (struct nrm_cgroupfs *fs, const char *cgroup, const char *file, nrm_error_t *err)
{
  size_t n = strcspn (file, ".");
  char ctl[32];
  if (n > 0 && n < sizeof (ctl) && file[n] == '.' && strncmp (file, "cgroup", n) != 0)
    {
      memcpy (ctl, file, n);
      ctl[n] = '\0';
      switch (nrm_cgroupfs_controller (fs, ctl))
        {
        case NRM_CGROUP_V2_NONE:
          return nrm_error_set (err, ENOENT,
                                "cgroup `%s` has no `%s`: %s is not cgroup v2 (no cgroup.controllers; cgroup v1?), "
                                "and nrm binds containers through cgroup v2",
                                cgroup, file, fs->root);
        case NRM_CGROUP_V2_WITHOUT:
          return nrm_error_set (err, ENOENT,
                                "cgroup `%s` has no `%s`: cgroup v2 at %s has no %s controller (a cgroup v1 hybrid "
                                "host, with %s on v1?); nrm needs %s on cgroup v2",
                                cgroup, file, fs->root, ctl, ctl, ctl);
        case NRM_CGROUP_V2_WITH:
          break;
        }
    }
  return nrm_error_set (err, ENOENT, "cgroup `%s` has no `%s` (vanished, or the controller is off)", cgroup, file);
}

int
nrm_cgroup_read (struct nrm_cgroupfs *fs, const char *cgroup, const char *file, char **ret, nrm_error_t *err)
{
  cleanup_free char *path = rel (cgroup, file);
  if (path == NULL)
    return nrm_error_set (err, EINVAL, "invalid cgroup path `%s`", cgroup);
  cleanup_close int fd = open_at (fs, path, O_RDONLY);
  if (fd < 0)
    {
      if (errno == ENOENT)
        return missing (fs, cgroup, file, err);
      return nrm_error_errno (err, errno, "cannot read `%s` of cgroup `%s`", file, cgroup);
    }
  char buf[8192];
  ssize_t n;
  do
    n = read (fd, buf, sizeof (buf) - 1);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return nrm_error_errno (err, errno, "cannot read `%s` of cgroup `%s`", file, cgroup);
  buf[n] = '\0';
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
    buf[--n] = '\0';
  *ret = xstrdup (buf);
  return 0;
}

int
nrm_cgroup_write (struct nrm_cgroupfs *fs, const char *cgroup, const char *file, const char *value, nrm_error_t *err)
{
  cleanup_free char *path = rel (cgroup, file);
  if (path == NULL)
    return nrm_error_set (err, EINVAL, "invalid cgroup path `%s`", cgroup);
  /* O_TRUNC as a shell's `>`: cgroup files ignore it, plain files (a test
   * tree) need it when the new value is shorter. */
  cleanup_close int fd = open_at (fs, path, O_WRONLY | O_TRUNC);
  if (fd < 0)
    {
      if (errno == ENOENT)
        return missing (fs, cgroup, file, err);
      return nrm_error_errno (err, errno, "cannot open `%s` of cgroup `%s`", file, cgroup);
    }
  size_t len = strlen (value);
  ssize_t n;
  do
    n = write (fd, value, len);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    {
      int e = errno;
      const char *why = e == EINVAL   ? " (the kernel refused the value, e.g. outside the parent's effective set)"
                        : e == EBUSY  ? " (in use: a partition or a child holds it)"
                        : e == ENOSPC ? " (empty set for a cgroup with tasks)"
                                      : "";
      return nrm_error_set (err, e, "cannot write `%s` to `%s` of cgroup `%s`: %s%s", value, file, cgroup, strerror (e),
                            why);
    }
  if ((size_t) n != len)
    return nrm_error_set (err, EIO, "short write of `%s` to `%s` of cgroup `%s`", value, file, cgroup);
  return 0;
}

bool
nrm_cgroup_exists (struct nrm_cgroupfs *fs, const char *cgroup)
{
  cleanup_free char *path = rel (cgroup, "cgroup.procs");
  if (path == NULL)
    return false;
  cleanup_close int fd = open_at (fs, path, O_RDONLY);
  return fd >= 0;
}

/* The directory that holds cgroup's last component, opened from the root
 * as open_at() does; *leaf points into copy at that component. */
static int
open_parent (struct nrm_cgroupfs *fs, char *copy, const char **leaf)
{
  char *slash = strrchr (copy, '/');
  if (slash == NULL)
    {
      *leaf = copy;
      return dup (fs->fd);
    }
  *slash = '\0';
  *leaf = slash + 1;
  return open_at (fs, copy, O_RDONLY | O_DIRECTORY);
}

/* The parent directory of a cgroup to make or remove, opened, and its last
 * component in *leaf (inside *copy); -1 with err set for a bad path. */
static int
open_leaf_parent (struct nrm_cgroupfs *fs, const char *cgroup, char **copy, const char **leaf, nrm_error_t *err)
{
  const char *c = cgroup[0] == '/' ? cgroup + 1 : cgroup;
  if (!nrm_cgroup_path_valid (cgroup) || *c == '\0')
    return nrm_error_set (err, EINVAL, "invalid cgroup path `%s`", cgroup);
  *copy = xstrdup (c);
  return open_parent (fs, *copy, leaf);
}

int
nrm_cgroup_mkdir (struct nrm_cgroupfs *fs, const char *cgroup, nrm_error_t *err)
{
  const char *leaf = NULL;
  cleanup_free char *copy = NULL;
  cleanup_close int dir = open_leaf_parent (fs, cgroup, &copy, &leaf, err);
  if (copy == NULL)
    return -1;
  if (dir < 0 || (mkdirat (dir, leaf, 0755) < 0 && errno != EEXIST))
    return nrm_error_errno (err, errno, "cannot create cgroup `%s` under `%s`", cgroup + (cgroup[0] == '/'), fs->root);
  return 0;
}

int
nrm_cgroup_rmdir (struct nrm_cgroupfs *fs, const char *cgroup, nrm_error_t *err)
{
  const char *leaf = NULL;
  cleanup_free char *copy = NULL;
  cleanup_close int dir = open_leaf_parent (fs, cgroup, &copy, &leaf, err);
  if (copy == NULL)
    return -1;
  if (dir < 0 || unlinkat (dir, leaf, AT_REMOVEDIR) < 0)
    return nrm_error_errno (err, errno, "cannot remove cgroup `%s` under `%s`", cgroup + (cgroup[0] == '/'), fs->root);
  return 0;
}

bool
nrm_cgroup_value_bytes (const char *s, unsigned long long *v)
{
  if (s == NULL || *s < '0' || *s > '9' || strlen (s) > 19)
    return false;
  char *end;
  errno = 0;
  *v = strtoull (s, &end, 10);
  return errno == 0 && *end == '\0';
}

int
nrm_cgroup_of_pid (const struct nrm_fsroot *root, int pid, char **ret, nrm_error_t *err)
{
  cleanup_free char *path = NULL, *text = NULL;
  if (pid <= 0)
    return nrm_error_set (err, EINVAL, "invalid process id %d", pid);
  path = nrm_fsroot_path (root, "/proc/%d/cgroup", pid);
  if (nrm_read_file (path, 1 << 16, &text, NULL, err) < 0)
    return -1;
  /* cgroup v2 is the "0::<path>" line. */
  for (char *line = text; line && *line;)
    {
      char *nl = strchr (line, '\n');
      if (nl)
        *nl = '\0';
      if (strncmp (line, "0::", 3) == 0)
        {
          if (!nrm_cgroup_path_valid (line + 3))
            return nrm_error_set (err, EINVAL, "process %d is in an invalid cgroup `%s`", pid, line + 3);
          *ret = xstrdup (line + 3);
          return 0;
        }
      line = nl ? nl + 1 : NULL;
    }
  return nrm_error_set (err, ENOENT, "process %d has no cgroup v2 path in `%s` (is cgroup v2 mounted?)", pid, path);
}
