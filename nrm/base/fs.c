/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"

int
nrm_write_atomic (const char *path, const void *data, size_t len, mode_t mode, bool durable, nrm_error_t *err)
{
  cleanup_free char *dircopy = xstrdup (path), *tmp = xasprintf ("%s.tmp.%d", path, (int) getpid ());
  cleanup_close int fd = -1, dfd = -1;
  const char *p = data;

  fd = open (tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0)
    return nrm_error_errno (err, errno, "cannot create `%s`", tmp);
  while (len > 0)
    {
      ssize_t w = write (fd, p, len);
      if (w < 0 && errno == EINTR)
        continue;
      if (w < 0)
        {
          int e = errno;
          unlink (tmp);
          return nrm_error_errno (err, e, "cannot write `%s`", tmp);
        }
      p += w;
      len -= (size_t) w;
    }
  if (fchmod (fd, mode) < 0 || (durable && fsync (fd) < 0))
    {
      int e = errno;
      unlink (tmp);
      return nrm_error_errno (err, e, "cannot sync `%s`", tmp);
    }
  if (rename (tmp, path) < 0)
    {
      int e = errno;
      unlink (tmp);
      return nrm_error_errno (err, e, "cannot rename `%s` to `%s`", tmp, path);
    }
  if (!durable)
    return 0;
  dfd = open (dirname (dircopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || fsync (dfd) < 0)
    return nrm_error_errno (err, errno, "cannot sync the directory of `%s`", path);
  return 0;
}

static int
read_fd (int fd, const char *path, size_t max, char **ret, size_t *len, nrm_error_t *err)
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
  return read_fd (fd, path, max, ret, len, err);
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
  return read_fd (fd, name, max, ret, len, err);
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
