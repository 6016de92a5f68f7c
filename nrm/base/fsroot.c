/* SPDX-License-Identifier: Apache-2.0 */
/* The root handle: where the machine's /sys, /proc and /dev are. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/fsroot.h"
#include "nrm/base/xalloc.h"

struct nrm_fsroot
{
  char *dir;    /* "/" or the tree, absolute, no trailing '/' */
  char *prefix; /* "" or dir: what goes before a machine's path */
  int fd;
  bool live;
};

/* The live machine for the callers that pass NULL. */
static struct nrm_fsroot live_root = { .dir = (char *) "/", .prefix = (char *) "", .fd = AT_FDCWD, .live = true };

static const struct nrm_fsroot *
or_live (const struct nrm_fsroot *root)
{
  return root ? root : &live_root;
}

int
nrm_fsroot_open (const char *dir, struct nrm_fsroot **ret, nrm_error_t *err)
{
  cleanup_free char *abs = NULL;
  bool live = dir == NULL || dir[0] == '\0';
  if (!live)
    {
      if (dir[0] == '/')
        abs = xstrdup (dir);
      else
        {
          cleanup_free char *cwd = getcwd (NULL, 0);
          if (cwd == NULL)
            return nrm_error_errno (err, errno, "--fsroot `%s`: cannot resolve the current directory", dir);
          abs = xasprintf ("%s/%s", cwd, dir);
        }
      size_t n = strlen (abs);
      while (n > 1 && abs[n - 1] == '/')
        abs[--n] = '\0';
      live = strcmp (abs, "/") == 0;
    }
  int fd = open (live ? "/" : abs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return nrm_error_errno (err, errno, "--fsroot `%s` is not a directory that can be opened", dir);
  struct nrm_fsroot *r = xcalloc (1, sizeof (*r));
  r->live = live;
  r->dir = live ? xstrdup ("/") : xstrdup (abs);
  r->prefix = live ? xstrdup ("") : xstrdup (abs);
  r->fd = fd;
  *ret = r;
  return 0;
}

void
nrm_fsroot_free (struct nrm_fsroot *root)
{
  if (root == NULL || root == &live_root)
    return;
  close (root->fd);
  free (root->dir);
  free (root->prefix);
  free (root);
}

bool
nrm_fsroot_live (const struct nrm_fsroot *root)
{
  return or_live (root)->live;
}

const char *
nrm_fsroot_dir (const struct nrm_fsroot *root)
{
  return or_live (root)->dir;
}

int
nrm_fsroot_fd (const struct nrm_fsroot *root)
{
  root = or_live (root);
  return root == &live_root ? AT_FDCWD : root->fd;
}

char *
nrm_fsroot_path (const struct nrm_fsroot *root, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  cleanup_free char *path = xvasprintf (fmt, ap);
  va_end (ap);
  return xasprintf ("%s%s", or_live (root)->prefix, path);
}

int
nrm_fsroot_openat (const struct nrm_fsroot *root, const char *path, int flags)
{
  root = or_live (root);
  if (root == &live_root)
    return open (path, flags);
  while (*path == '/')
    path++;
  return openat (root->fd, *path ? path : ".", flags);
}

int
nrm_fsroot_read (const struct nrm_fsroot *root, const char *path, size_t max, char **ret, size_t *len, nrm_error_t *err)
{
  cleanup_free char *full = nrm_fsroot_path (root, "%s", path);
  return nrm_read_file (full, max, ret, len, err);
}

bool
nrm_fsroot_exists (const struct nrm_fsroot *root, const char *path)
{
  cleanup_free char *full = nrm_fsroot_path (root, "%s", path);
  return access (full, F_OK) == 0;
}

DIR *
nrm_fsroot_opendir (const struct nrm_fsroot *root, const char *path)
{
  cleanup_free char *full = nrm_fsroot_path (root, "%s", path);
  return opendir (full);
}
