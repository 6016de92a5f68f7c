/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "cpuset/watch.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"

/* kubepods root (0), QoS (1), pod (2): containers appear at levels 1-3. */
#define MAX_DEPTH 3

struct dirwatch
{
  int wd;
  int depth;
  char *path; /* absolute */
};

struct nrm_kubepods_watch
{
  int fd;
  char *root;
  struct dirwatch *dirs;
  size_t n, cap;
};

static void
add (struct nrm_kubepods_watch *w, const char *path, int depth)
{
  int wd = inotify_add_watch (w->fd, path, IN_CREATE | IN_MOVED_TO | IN_ONLYDIR);
  if (wd < 0)
    return;
  for (size_t i = 0; i < w->n; i++)
    if (w->dirs[i].wd == wd)
      return;
  if (w->n == w->cap)
    {
      size_t cap = w->cap ? w->cap * 2 : 64;
      w->dirs = xrealloc (w->dirs, cap * sizeof (*w->dirs));
      w->cap = cap;
    }
  w->dirs[w->n++] = (struct dirwatch){ wd, depth, xstrdup (path) };
  if (depth >= MAX_DEPTH)
    return;
  /* Directories that were there already. */
  DIR *d = opendir (path);
  struct dirent *de;
  while (d && (de = readdir (d)) != NULL)
    {
      if (de->d_name[0] == '.' || de->d_type != DT_DIR)
        continue;
      cleanup_free char *child = xasprintf ("%s/%s", path, de->d_name);
      add (w, child, depth + 1);
    }
  if (d)
    closedir (d);
}

int
nrm_kubepods_watch_open (struct nrm_cgroupfs *fs, struct nrm_kubepods_watch **ret, nrm_error_t *err)
{
  struct nrm_kubepods_watch *w = xcalloc (1, sizeof (*w));
  w->root = xstrdup (nrm_cgroupfs_root (fs));
  w->fd = inotify_init1 (IN_NONBLOCK | IN_CLOEXEC);
  if (w->fd < 0)
    {
      int e = errno;
      free (w->root);
      free (w);
      return nrm_error_errno (err, e, "inotify");
    }
  /* The root itself (depth -1) so that kubepods appearing later is seen. */
  int wd = inotify_add_watch (w->fd, w->root, IN_CREATE | IN_MOVED_TO | IN_ONLYDIR);
  if (wd < 0)
    {
      int e = errno;
      nrm_kubepods_watch_close (w);
      return nrm_error_errno (err, e, "cannot watch `%s`", nrm_cgroupfs_root (fs));
    }
  w->dirs = xcalloc (64, sizeof (*w->dirs));
  w->cap = 64;
  w->dirs[w->n++] = (struct dirwatch){ wd, -1, xstrdup (w->root) };
  const char *roots[] = { "kubepods.slice", "kubepods" };
  for (int i = 0; i < 2; i++)
    {
      cleanup_free char *p = xasprintf ("%s/%s", w->root, roots[i]);
      if (access (p, F_OK) == 0)
        add (w, p, 0);
    }
  *ret = w;
  return 0;
}

void
nrm_kubepods_watch_close (struct nrm_kubepods_watch *w)
{
  if (w == NULL)
    return;
  close (w->fd);
  for (size_t i = 0; i < w->n; i++)
    free (w->dirs[i].path);
  free (w->dirs);
  free (w->root);
  free (w);
}

int
nrm_kubepods_watch_fd (struct nrm_kubepods_watch *w)
{
  return w->fd;
}

int
nrm_kubepods_watch_drain (struct nrm_kubepods_watch *w)
{
  char buf[16 * (sizeof (struct inotify_event) + NAME_MAX + 1)] __attribute__ ((aligned (8)));
  int appeared = 0;
  for (;;)
    {
      ssize_t n = read (w->fd, buf, sizeof (buf));
      if (n <= 0)
        break;
      for (char *p = buf; p < buf + n;)
        {
          struct inotify_event *ev = (struct inotify_event *) p;
          p += sizeof (*ev) + ev->len;
          if (!(ev->mask & IN_ISDIR) || ev->len == 0)
            continue;
          for (size_t i = 0; i < w->n; i++)
            {
              if (w->dirs[i].wd != ev->wd)
                continue;
              int depth = w->dirs[i].depth;
              bool kube = depth >= 0 || strcmp (ev->name, "kubepods.slice") == 0 || strcmp (ev->name, "kubepods") == 0;
              if (!kube)
                break;
              appeared++;
              if (depth < MAX_DEPTH)
                {
                  cleanup_free char *child = xasprintf ("%s/%s", w->dirs[i].path, ev->name);
                  add (w, child, depth + 1);
                }
              break;
            }
        }
    }
  return appeared;
}
