/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"

#define TEMP_INFIX ".tmp."
#define TEMP_SUFFIX "XXXXXX"

/* A new temporary file beside path, locked for as long as it is open: the
 * lock tells nrm_remove_stale_temps() that its writer is alive. A cleaner
 * may take an unlocked file in the instant between its creation and the
 * lock; then it is unlinked, and another is made. */
static int
create_temp (const char *path, char **tmp, nrm_error_t *err)
{
  for (int attempt = 0; attempt < 16; attempt++)
    {
      free (*tmp);
      *tmp = xasprintf ("%s" TEMP_INFIX TEMP_SUFFIX, path);
      int fd = mkostemp (*tmp, O_CLOEXEC);
      struct stat st;
      if (fd < 0)
        return nrm_error_errno (err, errno, "cannot create a temporary file beside `%s`", path);
      if (flock (fd, LOCK_EX) == 0 && fstat (fd, &st) == 0 && st.st_nlink > 0)
        return fd;
      close (fd);
    }
  return nrm_error_set (err, EAGAIN, "cannot keep a temporary file beside `%s`", path);
}

int
nrm_write_stage (const char *path, const void *data, size_t len, mode_t mode, bool durable, struct nrm_staged_write *w,
                 nrm_error_t *err)
{
  const char *p = data;
  const char *what = "write";

  *w = (struct nrm_staged_write){ .fd = -1 };
  w->fd = create_temp (path, &w->tmp, err);
  if (w->fd < 0)
    {
      free (w->tmp);
      w->tmp = NULL;
      return -1;
    }
  w->path = xstrdup (path);
  while (len > 0)
    {
      ssize_t n = write (w->fd, p, len);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        goto fail;
      p += n;
      len -= (size_t) n;
    }
  /* The data reaches the disk before the name does: after a crash the path
   * holds the old file or the new one, never an empty one. */
  what = "sync";
  if (fchmod (w->fd, mode) < 0 || (durable && fsync (w->fd) < 0))
    goto fail;
  return 0;
fail:;
  int e = errno;
  cleanup_free char *tmp = xstrdup (w->tmp);
  nrm_write_abort (w);
  return nrm_error_errno (err, e, "cannot %s `%s`", what, tmp);
}

int
nrm_write_commit (struct nrm_staged_write *w, bool durable, nrm_error_t *err)
{
  int r = 0;
  if (rename (w->tmp, w->path) < 0)
    {
      int e = errno;
      r = nrm_error_errno (err, e, "cannot rename `%s`", w->tmp);
      unlink (w->tmp);
    }
  else
    {
      w->renamed = true;
      cleanup_free char *dircopy = xstrdup (w->path);
      cleanup_close int dfd = durable ? open (dirname (dircopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
      if (durable && (dfd < 0 || fsync (dfd) < 0))
        r = nrm_error_errno (err, errno, "cannot sync the directory of `%s`", w->path);
    }
  close (w->fd);
  free (w->tmp);
  free (w->path);
  w->fd = -1;
  w->tmp = w->path = NULL;
  return r;
}

void
nrm_write_abort (struct nrm_staged_write *w)
{
  if (w->tmp)
    unlink (w->tmp);
  if (w->fd >= 0)
    close (w->fd);
  free (w->tmp);
  free (w->path);
  w->fd = -1;
  w->tmp = w->path = NULL;
}

static int
write_replace (const char *path, const void *data, size_t len, mode_t mode, bool durable, nrm_error_t *err)
{
  struct nrm_staged_write w;
  if (nrm_write_stage (path, data, len, mode, durable, &w, err) < 0)
    return -1;
  return nrm_write_commit (&w, durable, err);
}

int
nrm_write_atomic (const char *path, const void *data, size_t len, mode_t mode, nrm_error_t *err)
{
  return write_replace (path, data, len, mode, true, err);
}

int
nrm_write_unsynced (const char *path, const void *data, size_t len, mode_t mode, nrm_error_t *err)
{
  return write_replace (path, data, len, mode, false, err);
}

DIR *
nrm_opendir_at (int dfd)
{
  int copy = dup (dfd);
  DIR *d = copy >= 0 ? fdopendir (copy) : NULL;
  if (d == NULL && copy >= 0)
    {
      int e = errno;
      close (copy);
      errno = e;
    }
  return d;
}

/* Whether name is a temporary file of nrm_write_atomic(). */
static bool
is_temp (const char *name)
{
  size_t n = strlen (name), sl = strlen (TEMP_SUFFIX), il = strlen (TEMP_INFIX);
  return n > il + sl && strncmp (name + n - sl - il, TEMP_INFIX, il) == 0;
}

static int
remove_temps_at (int dfd, const char *dir, int depth, unsigned *removed, nrm_error_t *err)
{
  DIR *d = nrm_opendir_at (dfd);
  struct dirent *de;
  if (d == NULL)
    return nrm_error_errno (err, errno, "cannot read `%s`", dir);
  while ((de = readdir (d)) != NULL)
    {
      if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
        continue;
      cleanup_close int fd = openat (dfd, de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
      struct stat st;
      if (fd < 0 || fstat (fd, &st) < 0)
        continue;
      if (S_ISDIR (st.st_mode) && depth > 0)
        {
          cleanup_free char *sub = xasprintf ("%s/%s", dir, de->d_name);
          if (remove_temps_at (fd, sub, depth - 1, removed, err) < 0)
            {
              closedir (d);
              return -1;
            }
          continue;
        }
      /* Locked: its writer is still at work. */
      if (!S_ISREG (st.st_mode) || !is_temp (de->d_name) || flock (fd, LOCK_EX | LOCK_NB) < 0)
        continue;
      if (unlinkat (dfd, de->d_name, 0) == 0 && removed)
        (*removed)++;
    }
  closedir (d);
  return 0;
}

int
nrm_remove_stale_temps (const char *dir, int depth, unsigned *removed, nrm_error_t *err)
{
  cleanup_close int dfd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (dfd < 0)
    return errno == ENOENT ? 0 : nrm_error_errno (err, errno, "cannot open `%s`", dir);
  return remove_temps_at (dfd, dir, depth, removed, err);
}

int
nrm_read_fd (int fd, const char *path, size_t max, char **ret, size_t *len, nrm_error_t *err)
{
  cleanup_free char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;)
    {
      if (n + 4096 + 1 > cap)
        {
          cap = cap ? cap * 2 : 8192;
          buf = xrealloc (buf, cap);
        }
      ssize_t r = read (fd, buf + n, cap - n - 1);
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0)
        return nrm_error_errno (err, errno, "cannot read `%s`", path);
      if (r == 0)
        break;
      n += (size_t) r;
      if (n > max)
        return nrm_error_set (err, EFBIG, "`%s` is larger than %zu bytes", path, max);
    }
  if (buf == NULL)
    buf = xmalloc (1);
  buf[n] = '\0';
  if (len)
    *len = n;
  *ret = TAKE_PTR (buf);
  return 0;
}

int
nrm_read_file (const char *path, size_t max, char **ret, size_t *len, nrm_error_t *err)
{
  cleanup_close int fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return nrm_error_errno (err, errno, "cannot open `%s`", path);
  return nrm_read_fd (fd, path, max, ret, len, err);
}

int
nrm_read_regular_at (int dirfd, const char *name, size_t max, char **ret, size_t *len, nrm_error_t *err)
{
  /* Never a link, and never a wait: a FIFO or device opens at once and is
   * refused before anything reads it. */
  cleanup_close int fd = openat (dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  struct stat st;
  if (fd < 0)
    return nrm_error_errno (err, errno, "cannot open `%s`", name);
  if (fstat (fd, &st) < 0)
    return nrm_error_errno (err, errno, "cannot stat `%s`", name);
  if (!S_ISREG (st.st_mode))
    return nrm_error_set (err, EINVAL, "`%s` is not a regular file", name);
  if ((size_t) st.st_size > max)
    return nrm_error_set (err, EFBIG, "`%s` is larger than %zu bytes", name, max);
  return nrm_read_fd (fd, name, max, ret, len, err);
}

int
nrm_mkdir_p (const char *path, mode_t mode, nrm_error_t *err)
{
  cleanup_free char *copy = xstrdup (path);
  for (char *p = copy + 1;; p++)
    {
      if (*p == '/' || *p == '\0')
        {
          char c = *p;
          *p = '\0';
          if (mkdir (copy, mode) < 0 && errno != EEXIST)
            return nrm_error_errno (err, errno, "cannot create directory `%s`", copy);
          *p = c;
          if (c == '\0')
            break;
        }
    }
  struct stat st;
  if (stat (path, &st) < 0 || !S_ISDIR (st.st_mode))
    return nrm_error_set (err, ENOTDIR, "`%s` is not a directory", path);
  return 0;
}

int
nrm_lock_file (const char *path, nrm_error_t *err)
{
  int fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return nrm_error_errno (err, errno, "cannot open `%s`", path);
  while (flock (fd, LOCK_EX) < 0)
    if (errno != EINTR)
      {
        int e = errno;
        close (fd);
        return nrm_error_errno (err, e, "cannot lock `%s`", path);
      }
  return fd;
}
