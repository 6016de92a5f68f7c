/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memory/mcevent.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/text.h"
#include "nrm/base/xalloc.h"

/* An unsigned number at *p in base 10 or 16, at most max; digits only
 * (strtoull alone would take spaces and signs). */
static bool
unsigned_at (const char **p, int base, uint64_t max, uint64_t *v)
{
  const char *s = *p;
  bool digit = base == 16 ? strchr ("0123456789abcdefABCDEF", *s) != NULL : (*s >= '0' && *s <= '9');
  if (*s == '\0' || !digit)
    return false;
  char *end = NULL;
  errno = 0;
  unsigned long long x = strtoull (s, &end, base);
  if (errno || end == s || x > max)
    return false;
  *p = end;
  *v = x;
  return true;
}

static bool
signed_at (const char **p, int64_t lo, int64_t hi, int64_t *v)
{
  bool neg = **p == '-';
  const char *s = *p + neg;
  uint64_t u;
  if (!unsigned_at (&s, 10, neg ? (uint64_t) - (lo + 1) + 1 : (uint64_t) hi, &u))
    return false;
  *v = neg ? -(int64_t) (u - 1) - 1 : (int64_t) u;
  *p = s;
  return true;
}

static bool
lit (const char **p, const char *word)
{
  size_t n = strlen (word);
  if (strncmp (*p, word, n))
    return false;
  *p += n;
  return true;
}

/* "(mc:%d location:%d:%d:%d address:0x%08lx grain:%d syndrome:0x%08lx"
 * then the driver's detail and ")" ending the line. */
static bool
tail (const char *p, struct nrm_mc_event *ev)
{
  uint64_t mc, address, syndrome;
  int64_t layer, grain;
  if (!lit (&p, "(mc:") || !unsigned_at (&p, 10, 255, &mc) || !lit (&p, " location:"))
    return false;
  for (int i = 0; i < 3; i++)
    if ((i && !lit (&p, ":")) || !signed_at (&p, -128, 127, &layer))
      return false;
  if (!lit (&p, " address:0x") || !unsigned_at (&p, 16, UINT64_MAX, &address) || !lit (&p, " grain:")
      || !signed_at (&p, INT32_MIN, INT32_MAX, &grain) || !lit (&p, " syndrome:0x")
      || !unsigned_at (&p, 16, UINT64_MAX, &syndrome))
    return false;
  size_t n = strlen (p);
  while (n && (p[n - 1] == '\r' || p[n - 1] == ' '))
    n--;
  if (n == 0 || p[n - 1] != ')' || (n > 1 && p[0] != ' '))
    return false;
  ev->mc = (unsigned) mc;
  ev->address = address;
  return true;
}

/* "%d %s error%s:%s%s on %s (mc:...": count, type, then the first "(mc:"
 * from which the rest parses (msg and label are the driver's text, and
 * may hold one). */
static bool
body (const char *p, struct nrm_mc_event *ev)
{
  uint64_t count;
  size_t n;
  if (!unsigned_at (&p, 10, UINT16_MAX, &count) || !lit (&p, " "))
    return false;
  n = strspn (p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
  if (n == 0 || n >= sizeof (ev->type))
    return false;
  memcpy (ev->type, p, n);
  ev->type[n] = '\0';
  p += n;
  if (!lit (&p, " error"))
    return false;
  lit (&p, "s");
  if (!lit (&p, ":"))
    return false;
  for (const char *m = strstr (p, " (mc:"); m; m = strstr (m + 1, " (mc:"))
    if (tail (m + 1, ev))
      {
        ev->count = (unsigned) count;
        ev->corrected = strcmp (ev->type, "Corrected") == 0;
        return true;
      }
  return false;
}

int
nrm_mc_event_parse (const char *line, struct nrm_mc_event *ev, uint64_t *lost, nrm_error_t *err)
{
  static const char mark[] = ": mc_event: ";
  const char *p = line;
  uint64_t cpu, dropped;
  memset (ev, 0, sizeof (*ev));
  /* trace.c, print_trace_line(): "CPU:%d [LOST %lu EVENTS]". */
  if (lit (&p, "CPU:") && unsigned_at (&p, 10, UINT32_MAX, &cpu) && lit (&p, " [LOST ")
      && unsigned_at (&p, 10, UINT64_MAX, &dropped) && lit (&p, " EVENTS]"))
    {
      *lost = dropped > UINT64_MAX - *lost ? UINT64_MAX : *lost + dropped;
      return 0;
    }
  /* The task's name comes first ("comm-pid [cpu] flags time: "): a name
   * holding the mark is passed over by trying each mark in turn. */
  bool seen = false;
  for (const char *m = strstr (line, mark); m; m = strstr (m + 1, mark))
    {
      seen = true;
      if (body (m + strlen (mark), ev))
        return 1;
    }
  if (!seen)
    return 0;
  cleanup_free char *q = nrm_quote (line, strlen (line), 160);
  memset (ev, 0, sizeof (*ev));
  return nrm_error_set (err, EINVAL, "mc_event line `%s` is not in the kernel's format", q);
}

struct nrm_mc_trace
{
  int fd;
  char *path;
  size_t have;
  bool skipping; /* within a line longer than the buffer: dropped */
  char buf[8192];
};

/* Writes a setting of the instance (events/ras/mc_event/enable, ...). */
static int
put (const char *dir, const char *file, const char *value, nrm_error_t *err)
{
  cleanup_free char *path = xasprintf ("%s/%s", dir, file);
  int fd = open (path, O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0)
    return nrm_error_errno (err, errno, "cannot open `%s`", path);
  ssize_t w = write (fd, value, strlen (value));
  int e = errno;
  close (fd);
  if (w != (ssize_t) strlen (value))
    return nrm_error_errno (err, w < 0 ? e : EIO, "cannot write `%s` to `%s`", value, path);
  return 0;
}

int
nrm_mc_trace_open (const struct nrm_fsroot *root, struct nrm_mc_trace **ret, nrm_error_t *err)
{
  /* tracefs is mounted at /sys/kernel/tracing (Linux 4.1 on), and seen
   * through debugfs at /sys/kernel/debug/tracing; the top level's events/
   * lists what the kernel can trace. */
  static const char *const mounts[] = { "/sys/kernel/tracing", "/sys/kernel/debug/tracing" };
  cleanup_free char *top = NULL;
  *ret = NULL;
  for (size_t i = 0; i < 2 && top == NULL; i++)
    {
      cleanup_free char *event = nrm_fsroot_path (root, "%s/events/ras/mc_event", mounts[i]);
      if (access (event, F_OK) == 0)
        top = nrm_fsroot_path (root, "%s", mounts[i]);
    }
  if (top == NULL)
    return 1;
  cleanup_free char *dir = xasprintf ("%s/instances/%s", top, NRM_MC_TRACE_INSTANCE);
  bool made = mkdir (dir, 0750) == 0;
  if (!made && errno != EEXIST)
    return nrm_error_errno (err, errno, "cannot make the trace instance `%s`", dir);
  /* A new instance gets the default buffer per CPU (trace_buf_size,
   * 1.4 MiB); memory errors are rare and small. */
  nrm_error_t ignore = NULL;
  if (made && put (dir, "buffer_size_kb", "64", &ignore) < 0)
    nrm_error_release (&ignore);
  /* Wake a poller at the first event, not at half a buffer (trace.c,
   * trace_poll(): ring_buffer_poll_wait() with tr->buffer_percent). */
  cleanup_free char *percent = xasprintf ("%s/buffer_percent", dir);
  if (access (percent, F_OK) == 0 && put (dir, "buffer_percent", "0", &ignore) < 0)
    nrm_error_release (&ignore);
  if (put (dir, "events/ras/mc_event/enable", "1", err) < 0)
    return -1;
  struct nrm_mc_trace *t = xcalloc (1, sizeof (*t));
  t->path = xasprintf ("%s/trace_pipe", dir);
  t->fd = open (t->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (t->fd < 0)
    {
      int e = errno;
      nrm_error_errno (err, e, "cannot open `%s`", t->path);
      free (t->path);
      free (t);
      return -1;
    }
  *ret = t;
  return 0;
}

void
nrm_mc_trace_close (struct nrm_mc_trace *t)
{
  if (t == NULL)
    return;
  /* The instance stays, its event enabled: what happens while nrm is down
   * waits in its buffer for the next start. */
  close (t->fd);
  free (t->path);
  free (t);
}

int
nrm_mc_trace_fd (const struct nrm_mc_trace *t)
{
  return t ? t->fd : -1;
}

int
nrm_mc_trace_read (struct nrm_mc_trace *t, nrm_mc_line_fn fn, void *ctx, nrm_error_t *err)
{
  for (;;)
    {
      ssize_t r = read (t->fd, t->buf + t->have, sizeof (t->buf) - 1 - t->have);
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
      if (r < 0)
        return nrm_error_errno (err, errno, "cannot read `%s`", t->path);
      if (r == 0)
        return 0; /* a file standing for trace_pipe: its end */
      t->have += (size_t) r;
      t->buf[t->have] = '\0';
      char *start = t->buf, *nl;
      while ((nl = memchr (start, '\n', t->have - (size_t) (start - t->buf))) != NULL)
        {
          *nl = '\0';
          if (!t->skipping)
            fn (ctx, start);
          t->skipping = false;
          start = nl + 1;
        }
      t->have -= (size_t) (start - t->buf);
      memmove (t->buf, start, t->have);
      if (t->have == sizeof (t->buf) - 1)
        {
          t->skipping = true;
          t->have = 0;
        }
    }
}
