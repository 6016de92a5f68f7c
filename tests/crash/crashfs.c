/* SPDX-License-Identifier: Apache-2.0 */
/* A power cut for one process, as an LD_PRELOAD library: it counts the
 * file system calls that change files under NRM_CRASH_DIR, and at the
 * NRM_CRASH_AT-th one it stops the process with SIGKILL before the call.
 * With NRM_CRASH_LOSE=1 it first takes away what a machine that loses its
 * power would lose: data written since the file's last fsync (the file is
 * cut to its size at that fsync, 0 if never), and renames and unlinks that
 * no fsync of their directory followed (undone, newest first: the new name
 * goes back to the old one, a replaced or unlinked file comes back). That
 * is the worst the kernel may do to a program that relies on ordered
 * metadata without fsync; a program that syncs as nrm_write_atomic() does
 * loses nothing it reported as done.
 * With NRM_CRASH_EIO_AT=k instead, nothing stops: the k-th fsync under
 * the root fails with EIO (a disk's write error), once. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_FILES 4096
#define MAX_PENDING 4096

struct file
{
  dev_t dev;
  ino_t ino;
  char path[PATH_MAX];
  off_t synced; /* size at the last fsync */
  bool dirty;
};

struct pending
{
  char dir[PATH_MAX];
  char name[PATH_MAX];   /* the path as the program sees it now */
  char from[PATH_MAX];   /* rename: where it came from; unlink: "" */
  char backup[PATH_MAX]; /* what name held before, or "" */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct file files[MAX_FILES];
static struct pending pend[MAX_PENDING];
static size_t n_files, n_pend;
static long ops, crash_at = -1, syncs, eio_at = -1;
static bool lose, ready, verbose;
static char root[PATH_MAX];
static unsigned backups;
static long long start_ns; /* when init() ran: part of the backups' names */

static ssize_t (*real_write) (int, const void *, size_t);
static int (*real_fsync) (int);
static int (*real_fdatasync) (int);
static int (*real_rename) (const char *, const char *);
static int (*real_unlink) (const char *);
static int (*real_unlinkat) (int, const char *, int);

static void
init (void)
{
  if (ready)
    return;
  real_write = dlsym (RTLD_NEXT, "write");
  real_fsync = dlsym (RTLD_NEXT, "fsync");
  real_fdatasync = dlsym (RTLD_NEXT, "fdatasync");
  real_rename = dlsym (RTLD_NEXT, "rename");
  real_unlink = dlsym (RTLD_NEXT, "unlink");
  real_unlinkat = dlsym (RTLD_NEXT, "unlinkat");
  const char *d = getenv ("NRM_CRASH_DIR"), *at = getenv ("NRM_CRASH_AT"), *l = getenv ("NRM_CRASH_LOSE"),
             *eio = getenv ("NRM_CRASH_EIO_AT");
  if (d && realpath (d, root) == NULL)
    root[0] = '\0';
  if (at)
    crash_at = atol (at);
  if (eio)
    eio_at = atol (eio);
  lose = l && strcmp (l, "1") == 0;
  verbose = getenv ("NRM_CRASH_VERBOSE") != NULL;
  struct timespec t;
  clock_gettime (CLOCK_REALTIME, &t);
  start_ns = (long long) t.tv_sec * 1000000000LL + t.tv_nsec;
  ready = true;
}

static void
pcopy (char *dst, const char *src)
{
  size_t n = strnlen (src, PATH_MAX - 1);
  memcpy (dst, src, n);
  dst[n] = '\0';
}

static bool
under_root (const char *path)
{
  size_t n = strlen (root);
  return n > 0 && strncmp (path, root, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* An absolute path: relative ones are taken from the working directory. */
static bool
absolute (const char *path, char *out)
{
  if (path[0] == '/')
    return snprintf (out, PATH_MAX, "%s", path) < PATH_MAX;
  char cwd[PATH_MAX];
  return getcwd (cwd, sizeof (cwd)) && snprintf (out, PATH_MAX, "%s/%s", cwd, path) < PATH_MAX;
}

static bool
fd_path (int fd, char *out)
{
  char link[64];
  snprintf (link, sizeof (link), "/proc/self/fd/%d", fd);
  ssize_t n = readlink (link, out, PATH_MAX - 1);
  if (n < 0)
    return false;
  out[n] = '\0';
  return true;
}

static void
parent_of (const char *path, char *out)
{
  pcopy (out, path);
  char *slash = strrchr (out, '/');
  if (slash && slash != out)
    *slash = '\0';
}

static struct file *
file_of (dev_t dev, ino_t ino, bool add)
{
  for (size_t i = 0; i < n_files; i++)
    if (files[i].dev == dev && files[i].ino == ino)
      return &files[i];
  if (!add || n_files == MAX_FILES)
    return NULL;
  struct file *f = &files[n_files++];
  memset (f, 0, sizeof (*f));
  f->dev = dev;
  f->ino = ino;
  return f;
}

static void
power_cut (void)
{
  if (verbose)
    fprintf (stderr, "crashfs: %s before call %ld\n", lose ? "power cut" : "kill -9", ops);
  if (lose)
    {
      for (size_t i = 0; i < n_files; i++)
        if (files[i].dirty)
          {
            if (verbose)
              fprintf (stderr, "crashfs: %s loses what was written after byte %ld\n", files[i].path,
                       (long) files[i].synced);
            truncate (files[i].path, files[i].synced);
          }
      for (size_t i = n_pend; i-- > 0;)
        {
          struct pending *p = &pend[i];
          if (verbose)
            fprintf (stderr, "crashfs: undoing %s of %s (from %s, restoring %s)\n",
                     p->from[0] ? "the rename" : "the unlink", p->name, p->from[0] ? p->from : "-",
                     p->backup[0] ? p->backup : "nothing");
          if (p->from[0])
            real_rename (p->name, p->from);
          if (p->backup[0])
            real_rename (p->backup, p->name);
        }
    }
  else
    for (size_t i = 0; i < n_pend; i++)
      if (pend[i].backup[0])
        real_unlink (pend[i].backup);
  kill (getpid (), SIGKILL);
  _exit (137);
}

/* Counts a call that changes something under the root; the crash comes
 * before the call. Called with the lock held. */
static void
count (const char *what, const char *path)
{
  ++ops;
  if (verbose)
    {
      /* Wall-clock time, as the plugin's log and the test's trace have it. */
      struct timespec t;
      clock_gettime (CLOCK_REALTIME, &t);
      fprintf (stderr, "crashfs: %lld.%06ld thread %d call %ld: %s %s\n", (long long) t.tv_sec, t.tv_nsec / 1000,
               (int) gettid (), ops, what, path);
    }
  if (ops == crash_at)
    power_cut ();
}

static void
track_path_change (const char *from, const char *to)
{
  for (size_t i = 0; i < n_files; i++)
    if (strcmp (files[i].path, from) == 0)
      pcopy (files[i].path, to);
}

/* Keeps what path holds now under a hidden name, so that a power cut can
 * bring it back; "" when path holds nothing. */
static void
keep (const char *path, char *backup)
{
  struct stat st;
  backup[0] = '\0';
  if (lstat (path, &st) < 0)
    return;
  /* Named by pid and start time: a process that was stopped without a
   * crash (SIGTERM, or SIGKILL from outside) leaves its backups, and a
   * later process with the same pid must not find its names taken (link
   * would fail, and a power cut would then remove what it should restore). */
  if (snprintf (backup, PATH_MAX, "%s/.crashfs-%d-%lld-%u", root, (int) getpid (), start_ns, backups++) >= PATH_MAX
      || link (path, backup) < 0)
    backup[0] = '\0';
}

ssize_t
write (int fd, const void *buf, size_t n)
{
  init ();
  char path[PATH_MAX];
  struct stat st;
  if (root[0] && fstat (fd, &st) == 0 && S_ISREG (st.st_mode) && fd_path (fd, path) && under_root (path))
    {
      pthread_mutex_lock (&lock);
      count ("write", path);
      struct file *f = file_of (st.st_dev, st.st_ino, true);
      if (f)
        {
          pcopy (f->path, path);
          f->dirty = true;
        }
      pthread_mutex_unlock (&lock);
    }
  return real_write (fd, buf, n);
}

static int
sync_common (int fd, int (*real) (int))
{
  init ();
  char path[PATH_MAX];
  struct stat st;
  if (!root[0] || fstat (fd, &st) < 0 || !fd_path (fd, path) || !under_root (path))
    return real (fd);
  pthread_mutex_lock (&lock);
  count ("fsync", path);
  if (++syncs == eio_at)
    {
      if (verbose)
        fprintf (stderr, "crashfs: fsync %ld of %s fails\n", syncs, path);
      pthread_mutex_unlock (&lock);
      errno = EIO;
      return -1;
    }
  int r = real (fd);
  if (r == 0 && S_ISDIR (st.st_mode))
    {
      /* The directory's entries are durable now. */
      size_t k = 0;
      for (size_t i = 0; i < n_pend; i++)
        if (strcmp (pend[i].dir, path) == 0)
          {
            if (pend[i].backup[0])
              real_unlink (pend[i].backup);
          }
        else
          pend[k++] = pend[i];
      if (verbose)
        fprintf (stderr, "crashfs: thread %d synced %s: %zu changes durable\n", (int) gettid (), path, n_pend - k);
      n_pend = k;
    }
  else if (r == 0)
    {
      struct file *f = file_of (st.st_dev, st.st_ino, false);
      if (f)
        {
          f->dirty = false;
          f->synced = st.st_size;
        }
    }
  pthread_mutex_unlock (&lock);
  return r;
}

int
fsync (int fd)
{
  return sync_common (fd, real_fsync ? real_fsync : (init (), real_fsync));
}

int
fdatasync (int fd)
{
  return sync_common (fd, real_fdatasync ? real_fdatasync : (init (), real_fdatasync));
}

/* A rename (from is its source) or unlink of name, kept pending until its
 * directory is synced. */
static int
change_entry (const char *name, const char *from, int (*doit) (void *), void *ctx)
{
  pthread_mutex_lock (&lock);
  count (from ? "rename" : "unlink", name);
  struct pending p = { 0 };
  parent_of (name, p.dir);
  pcopy (p.name, name);
  if (from)
    pcopy (p.from, from);
  keep (name, p.backup);
  int r = doit (ctx);
  if (r == 0 && from)
    track_path_change (from, name);
  if (r == 0 && n_pend < MAX_PENDING)
    pend[n_pend++] = p;
  else if (p.backup[0])
    real_unlink (p.backup);
  pthread_mutex_unlock (&lock);
  return r;
}

struct rename_args
{
  const char *from, *to;
};

static int
do_rename (void *ctx)
{
  struct rename_args *a = ctx;
  return real_rename (a->from, a->to);
}

int
rename (const char *from, const char *to)
{
  init ();
  char af[PATH_MAX], at[PATH_MAX];
  if (!root[0] || !absolute (from, af) || !absolute (to, at) || !under_root (at))
    return real_rename (from, to);
  struct rename_args a = { from, to };
  return change_entry (at, af, do_rename, &a);
}

static int
do_unlink (void *ctx)
{
  return real_unlink (ctx);
}

int
unlink (const char *path)
{
  init ();
  char ap[PATH_MAX];
  if (!root[0] || !absolute (path, ap) || !under_root (ap))
    return real_unlink (path);
  return change_entry (ap, NULL, do_unlink, (void *) path);
}

struct unlinkat_args
{
  int dfd, flags;
  const char *path;
};

static int
do_unlinkat (void *ctx)
{
  struct unlinkat_args *a = ctx;
  return real_unlinkat (a->dfd, a->path, a->flags);
}

int
unlinkat (int dfd, const char *path, int flags)
{
  init ();
  char dir[PATH_MAX], ap[PATH_MAX];
  if (!root[0] || (flags & AT_REMOVEDIR))
    return real_unlinkat (dfd, path, flags);
  if (path[0] == '/')
    snprintf (ap, sizeof (ap), "%s", path);
  else if (dfd == AT_FDCWD ? !absolute (path, ap)
                           : !fd_path (dfd, dir) || snprintf (ap, sizeof (ap), "%s/%s", dir, path) >= PATH_MAX)
    return real_unlinkat (dfd, path, flags);
  if (!under_root (ap))
    return real_unlinkat (dfd, path, flags);
  struct unlinkat_args a = { dfd, flags, path };
  return change_entry (ap, NULL, do_unlinkat, &a);
}
