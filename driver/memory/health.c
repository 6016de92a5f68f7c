/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "driver/memory/health.h"
#include "driver/names.h"
#include "memory/health.h"
#include "memory/mcevent.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/quantity.h"
#include "nrm/base/xalloc.h"

/* Errors of one controller that its mc_event lines placed: on NUMA node
 * `node`, or nowhere (-1: no address, or no memory block holds it). */
struct tally
{
  unsigned mc;
  int node;
  int64_t ce, ue;
};

/* A controller's ce_count + ue_count at the last report: a smaller one
 * means reset_counters (or a reboot), which clears its tallies too. */
struct seen
{
  unsigned mc;
  int64_t total;
};

struct nrm_memory_health
{
  const struct nrm_topology *t;
  const struct nrm_fsroot *fsroot;
  bool sysfs; /* this machine or a fake tree: a recorded one has none */
  int64_t threshold;
  int poll_s;
  int timer;
  /* Under lock: */
  bool owner;                 /* reads the trace, writes the tallies */
  int epoll;                  /* the timer and trace_pipe, or -1 */
  struct nrm_mc_trace *trace; /* ras:mc_event, or NULL */
  nrm_log_fn log;
  void *log_ctx;
  const char *name;
  char *state;     /* <state_dir>/<name>.mc-events.json, or NULL */
  char *boot_id;   /* the tallies' boot */
  uint64_t *start; /* bytes online per node at the start */
  bool *known;     /* start[i] read */
  pthread_mutex_t lock;
  int64_t *last; /* the last change read, kept when a pass fails */
  /* Under lock: */
  struct tally *tallies;
  size_t n_tallies;
  struct seen *seen;
  size_t n_seen;
  uint64_t lost; /* events the trace buffer dropped */
};

static int
settings (struct nrm_memory_health *mh, json_t *s, nrm_error_t *err)
{
  const char *key;
  json_t *v;
  json_object_foreach (s, key, v)
  {
    /* The driver checks its other keys (check_settings). */
    if (strcmp (key, "health") != 0)
      continue;
    if (!json_is_object (v))
      return nrm_error_set (err, EINVAL, "key `memory.health` must be an object");
    const char *k;
    json_t *x;
    json_object_foreach (v, k, x)
    {
      bool thr = strcmp (k, "correctedErrorThreshold") == 0, poll = strcmp (k, "pollSeconds") == 0;
      if (!thr && !poll)
        return nrm_error_set (err, EINVAL,
                              "unknown key `memory.health.%s` (known: correctedErrorThreshold, pollSeconds)", k);
      json_int_t n = json_integer_value (x);
      if (!json_is_integer (x) || n < (poll ? 1 : 0) || n > (poll ? 86400 : INT32_MAX))
        return nrm_error_set (err, EINVAL, "key `memory.health.%s` must be an integer from %d to %" PRId32, k,
                              poll ? 1 : 0, poll ? 86400 : INT32_MAX);
      if (thr)
        mh->threshold = n;
      else
        mh->poll_s = (int) n;
    }
  }
  return 0;
}

void
nrm_memory_health_free (struct nrm_memory_health *mh)
{
  if (mh == NULL)
    return;
  if (mh->timer >= 0)
    close (mh->timer);
  if (mh->epoll >= 0)
    close (mh->epoll);
  nrm_mc_trace_close (mh->trace);
  free (mh->tallies);
  free (mh->seen);
  free (mh->state);
  free (mh->boot_id);
  pthread_mutex_destroy (&mh->lock);
  free (mh->start);
  free (mh->known);
  free (mh->last);
  free (mh);
}

static void
warn (struct nrm_memory_health *mh, const char *what, nrm_error_t *e)
{
  if (mh->log)
    mh->log (mh->log_ctx, NRM_LOG_WARNING, "%s: %s: %s", mh->name, what, nrm_error_msg (*e));
  nrm_error_release (e);
}

/* Counts are at most INT64_MAX each (a fake tree may say so): their sum
 * stops there. */
static int64_t
plus (int64_t a, int64_t b)
{
  return b > INT64_MAX - a ? INT64_MAX : a + b;
}

/* Under lock. */
static void
tally_add (struct nrm_memory_health *mh, unsigned mc, int node, int64_t ce, int64_t ue)
{
  size_t i = 0;
  while (i < mh->n_tallies && (mh->tallies[i].mc != mc || mh->tallies[i].node != node))
    i++;
  if (i == mh->n_tallies)
    {
      mh->tallies = xrealloc (mh->tallies, (mh->n_tallies + 1) * sizeof (*mh->tallies));
      mh->tallies[mh->n_tallies++] = (struct tally){ .mc = mc, .node = node };
    }
  mh->tallies[i].ce = plus (mh->tallies[i].ce, ce);
  mh->tallies[i].ue = plus (mh->tallies[i].ue, ue);
}

/* Under lock: drops the tallies of controller mc. */
static void
tally_clear (struct nrm_memory_health *mh, unsigned mc)
{
  size_t k = 0;
  for (size_t i = 0; i < mh->n_tallies; i++)
    if (mh->tallies[i].mc != mc)
      mh->tallies[k++] = mh->tallies[i];
  mh->n_tallies = k;
}

/* Under lock: the tallies survive a restart of nrm (the events they
 * counted were read from the trace once), not a reboot. */
static void
save (struct nrm_memory_health *mh)
{
  if (mh->state == NULL || !mh->owner)
    return;
  cleanup_json json_t *errors = json_array (), *seen = json_array ();
  for (size_t i = 0; i < mh->n_tallies; i++)
    json_array_append_new (errors,
                           json_pack ("{s:I, s:I, s:I, s:I}", "mc", (json_int_t) mh->tallies[i].mc, "node",
                                      (json_int_t) mh->tallies[i].node, "corrected", (json_int_t) mh->tallies[i].ce,
                                      "uncorrected", (json_int_t) mh->tallies[i].ue));
  for (size_t i = 0; i < mh->n_seen; i++)
    json_array_append_new (
        seen, json_pack ("{s:I, s:I}", "mc", (json_int_t) mh->seen[i].mc, "total", (json_int_t) mh->seen[i].total));
  cleanup_json json_t *doc
      = json_pack ("{s:s, s:O, s:O, s:I}", "bootId", mh->boot_id ? mh->boot_id : "", "errors", errors, "counters", seen,
                   "lost", (json_int_t) (mh->lost > INT64_MAX ? INT64_MAX : mh->lost));
  cleanup_free char *text = json_dumps (doc, JSON_COMPACT);
  nrm_error_t e = NULL;
  if (text == NULL || nrm_write_atomic (mh->state, text, strlen (text), 0600, &e) < 0)
    {
      if (e == NULL)
        nrm_error_set (&e, ENOMEM, "cannot write `%s`", mh->state);
      warn (mh, "memory error tallies", &e);
    }
}

static int
load (struct nrm_memory_health *mh, nrm_error_t *err)
{
  json_error_t je;
  cleanup_json json_t *doc = json_load_file (mh->state, 0, &je);
  if (doc == NULL)
    return access (mh->state, F_OK) == 0 ? nrm_error_set (err, EINVAL, "`%s`: %s", mh->state, je.text) : 0;
  const char *boot = json_string_value (json_object_get (doc, "bootId"));
  json_t *errors = json_object_get (doc, "errors"), *seen = json_object_get (doc, "counters");
  if (boot == NULL || !json_is_array (errors) || !json_is_array (seen))
    return nrm_error_set (err, EINVAL, "`%s`: not memory error tallies", mh->state);
  if (strcmp (boot, mh->boot_id ? mh->boot_id : ""))
    return 0; /* another boot: the kernel's counters started again */
  size_t i;
  json_t *v;
  json_array_foreach (errors, i, v)
  {
    json_int_t mc, node, ce, ue;
    if (json_unpack (v, "{s:I, s:I, s:I, s:I}", "mc", &mc, "node", &node, "corrected", &ce, "uncorrected", &ue) < 0
        || mc < 0 || mc > 255 || node < -1 || node > INT32_MAX || ce < 0 || ue < 0)
      return nrm_error_set (err, EINVAL, "`%s`: errors[%zu] is not a tally", mh->state, i);
    tally_add (mh, (unsigned) mc, (int) node, ce, ue);
  }
  json_array_foreach (seen, i, v)
  {
    json_int_t mc, total;
    if (json_unpack (v, "{s:I, s:I}", "mc", &mc, "total", &total) < 0 || mc < 0 || mc > 255 || total < 0)
      return nrm_error_set (err, EINVAL, "`%s`: counters[%zu] is not a count", mh->state, i);
    mh->seen = xrealloc (mh->seen, (mh->n_seen + 1) * sizeof (*mh->seen));
    mh->seen[mh->n_seen++] = (struct seen){ .mc = (unsigned) mc, .total = total };
  }
  json_int_t lost = json_integer_value (json_object_get (doc, "lost"));
  mh->lost = lost > 0 ? (uint64_t) lost : 0;
  return 0;
}

/* The errors placed before a restart, for every process that reads the
 * health (nrm slices and status too); a file that cannot be read is named
 * and nothing of it is kept. */
static void
take_back (struct nrm_memory_health *mh, const struct nrm_driver_host *h)
{
  nrm_error_t e = NULL;
  cleanup_free char *boot = NULL;
  size_t len;
  if (nrm_fsroot_read (mh->fsroot, "/proc/sys/kernel/random/boot_id", 64, &boot, &len, &e) == 0)
    mh->boot_id = xstrndup (boot, strcspn (boot, "\n"));
  nrm_error_release (&e);
  if (h->state_dir == NULL)
    return;
  mh->state = xasprintf ("%s/%s.mc-events.json", h->state_dir, h->name);
  if (load (mh, &e) < 0)
    {
      warn (mh, "memory error tallies (starting afresh)", &e);
      mh->n_tallies = mh->n_seen = 0;
      mh->lost = 0;
    }
}

/* Under lock: opens the trace and what listens, the timer and trace_pipe
 * in one epoll descriptor (the one health_fd the driver interface has).
 * Only the process that asks for health_fd, the plugin, reads the trace
 * (each line is read once) and writes the tallies. */
static void
listen_events (struct nrm_memory_health *mh)
{
  nrm_error_t e = NULL;
  mh->owner = true;
  if (nrm_mc_trace_open (mh->fsroot, &mh->trace, &e) < 0)
    warn (mh, "memory error events (errors of a machine-wide controller stay unplaced)", &e);
  struct epoll_event ev = { .events = EPOLLIN };
  mh->epoll = epoll_create1 (EPOLL_CLOEXEC);
  if (mh->epoll < 0 || epoll_ctl (mh->epoll, EPOLL_CTL_ADD, mh->timer, &ev) < 0)
    {
      nrm_error_errno (&e, errno, "cannot watch the timer and the trace together: the timer reads the trace");
      warn (mh, "memory error events", &e);
      if (mh->epoll >= 0)
        close (mh->epoll);
      mh->epoll = -1;
      return;
    }
  /* A regular file standing for trace_pipe cannot be watched (EPERM):
   * the timer reads it. */
  if (mh->trace && epoll_ctl (mh->epoll, EPOLL_CTL_ADD, nrm_mc_trace_fd (mh->trace), &ev) < 0 && errno != EPERM)
    {
      nrm_error_errno (&e, errno, "cannot watch `trace_pipe`: the timer reads it");
      warn (mh, "memory error events", &e);
    }
}

int
nrm_memory_health_new (const struct nrm_driver_host *h, struct nrm_memory_health **ret, nrm_error_t *err)
{
  struct nrm_memory_health *mh = xcalloc (1, sizeof (*mh));
  size_t n = h->topo->n_numa ? h->topo->n_numa : 1;
  mh->t = h->topo;
  mh->fsroot = h->fsroot;
  mh->sysfs = nrm_driver_host_sysfs (h);
  mh->threshold = NRM_MEMORY_HEALTH_THRESHOLD;
  mh->poll_s = NRM_MEMORY_HEALTH_POLL_S;
  mh->timer = -1;
  mh->epoll = -1;
  mh->log = h->log;
  mh->log_ctx = h->log_ctx;
  mh->name = h->name;
  mh->start = xcalloc (n, sizeof (*mh->start));
  mh->known = xcalloc (n, sizeof (*mh->known));
  mh->last = xcalloc (n, sizeof (*mh->last));
  pthread_mutex_init (&mh->lock, NULL);
  if (settings (mh, h->settings, err) < 0)
    {
      nrm_memory_health_free (mh);
      return -1;
    }
  for (size_t i = 0; mh->sysfs && i < mh->t->n_numa; i++)
    {
      uint64_t off;
      nrm_error_t e = NULL;
      int r = nrm_memory_blocks_read (mh->fsroot, mh->t->numa[i].os_index, &mh->start[i], &off, &e);
      mh->known[i] = r == 0;
      /* Unreadable at the start: the node's capacity stays the topology's. */
      if (r < 0 && h->log)
        h->log (h->log_ctx, NRM_LOG_WARNING, "%s: memory blocks of NUMA node %u: %s", h->name, mh->t->numa[i].os_index,
                nrm_error_msg (e));
      nrm_error_release (&e);
    }
  if (mh->sysfs)
    {
      /* sysfs raises no event when a counter grows: poll. */
      mh->timer = timerfd_create (CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
      struct itimerspec its = { .it_interval = { mh->poll_s, 0 }, .it_value = { mh->poll_s, 0 } };
      if (mh->timer < 0 || timerfd_settime (mh->timer, 0, &its, NULL) < 0)
        {
          int e = errno;
          nrm_memory_health_free (mh);
          return nrm_error_errno (err, e, "memory health: cannot start its timer");
        }
      take_back (mh, h);
    }
  *ret = mh;
  return 0;
}

int
nrm_memory_health_fd (struct nrm_memory_health *mh)
{
  if (mh == NULL || mh->timer < 0)
    return -1;
  pthread_mutex_lock (&mh->lock);
  if (!mh->owner)
    listen_events (mh);
  int fd = mh->epoll >= 0 ? mh->epoll : mh->timer;
  pthread_mutex_unlock (&mh->lock);
  return fd;
}

struct drain
{
  struct nrm_memory_health *mh;
  bool changed;
  unsigned bad; /* lines not in the kernel's format */
};

/* Under lock: one line of trace_pipe. */
static void
on_line (void *ctx, const char *line)
{
  struct drain *d = ctx;
  struct nrm_memory_health *mh = d->mh;
  struct nrm_mc_event ev;
  nrm_error_t e = NULL;
  uint64_t lost = mh->lost;
  int r = nrm_mc_event_parse (line, &ev, &mh->lost, &e);
  d->changed |= lost != mh->lost;
  if (r < 0 && d->bad++ == 0)
    warn (mh, "memory error events", &e);
  nrm_error_release (&e);
  if (r <= 0)
    return;
  unsigned node;
  int k = ev.address ? nrm_memory_block_node (mh->fsroot, ev.address, &node, &e) : 1;
  if (k < 0)
    warn (mh, "memory error events", &e);
  tally_add (mh, ev.mc, k == 0 ? (int) node : -1, ev.corrected ? ev.count : 0, ev.corrected ? 0 : ev.count);
  d->changed = true;
}

/* Reads the events waiting in the trace into the tallies. */
static void
drain_trace (struct nrm_memory_health *mh)
{
  struct drain d = { .mh = mh };
  nrm_error_t e = NULL;
  pthread_mutex_lock (&mh->lock);
  if (mh->trace && nrm_mc_trace_read (mh->trace, on_line, &d, &e) < 0)
    warn (mh, "memory error events", &e);
  if (d.changed)
    save (mh);
  pthread_mutex_unlock (&mh->lock);
}

void
nrm_memory_health_drain (struct nrm_memory_health *mh)
{
  uint64_t ticks;
  while (mh && mh->timer >= 0 && read (mh->timer, &ticks, sizeof (ticks)) == (ssize_t) sizeof (ticks))
    ;
  if (mh)
    drain_trace (mh);
}

/* Reads the blocks of every node: online change into change, offline
 * bytes into offline (either may be NULL); a node that fails keeps its
 * last change and names itself in *err. */
static int
read_blocks (struct nrm_memory_health *mh, int64_t *change, uint64_t *offline, nrm_error_t *err)
{
  int r = 0;
  for (size_t i = 0; i < mh->t->n_numa; i++)
    {
      uint64_t on = 0, off = 0;
      nrm_error_t e = NULL;
      int k
          = mh->sysfs && mh->known[i] ? nrm_memory_blocks_read (mh->fsroot, mh->t->numa[i].os_index, &on, &off, &e) : 1;
      pthread_mutex_lock (&mh->lock);
      if (k == 0)
        mh->last[i] = on >= mh->start[i] ? (int64_t) (on - mh->start[i]) : -(int64_t) (mh->start[i] - on);
      if (change)
        change[i] = mh->last[i];
      pthread_mutex_unlock (&mh->lock);
      if (offline)
        offline[i] = k == 0 ? off : 0;
      if (k < 0 && r == 0)
        {
          r = nrm_error_set (err, EIO, "NUMA node %u: %s", mh->t->numa[i].os_index, nrm_error_msg (e));
        }
      nrm_error_release (&e);
    }
  return r;
}

void
nrm_memory_health_online_change (struct nrm_memory_health *mh, int64_t *change)
{
  nrm_error_t e = NULL;
  read_blocks (mh, change, NULL, &e);
  nrm_error_release (&e);
}

/* Whether every controller of an AMD family with one node per die names
 * a NUMA node of this machine by its index: then each die is a NUMA node
 * (its memory not interleaved with its siblings'). */
static bool
dies_are_nodes (const struct nrm_topology *t, const struct nrm_edac_mc *mcs, size_t n)
{
  for (size_t k = 0; k < n; k++)
    {
      size_t i = 0;
      while (mcs[k].map == NRM_EDAC_DIE && i < t->n_numa && t->numa[i].os_index != (unsigned) mcs[k].node)
        i++;
      if (i == t->n_numa)
        return false;
    }
  return true;
}

/* The node at topology position i: the controllers that serve it. One
 * node takes every controller; otherwise a controller serves the nodes of
 * the socket it names, or the node its index gives. */
static bool
serves (const struct nrm_topology *t, size_t i, const struct nrm_edac_mc *m, bool dies)
{
  if (t->n_numa == 1)
    return true;
  int pkg = t->numa[i].package;
  switch (m->map)
    {
    case NRM_EDAC_SOCKET:
      return pkg >= 0 && t->packages[pkg].os_index == (unsigned) m->socket;
    case NRM_EDAC_DIE:
      return dies && t->numa[i].os_index == (unsigned) m->node;
    case NRM_EDAC_NODE:
      return t->numa[i].os_index == (unsigned) m->node;
    default:
      return false;
    }
}

static bool
mapped (const struct nrm_topology *t, const struct nrm_edac_mc *m, bool dies)
{
  for (size_t i = 0; i < t->n_numa; i++)
    if (serves (t, i, m, dies))
      return true;
  return false;
}

/* The topology position of NUMA node `node`, or n_numa. */
static size_t
position (const struct nrm_topology *t, int node)
{
  size_t i = 0;
  while (i < t->n_numa && (node < 0 || t->numa[i].os_index != (unsigned) node))
    i++;
  return i;
}

static void
append (char **msg, const char *line)
{
  char *joined = xasprintf ("%s%s%s", *msg ? *msg : "", *msg ? "; " : "", line);
  free (*msg);
  *msg = joined;
}

struct verdict
{
  char *msg;
  const char *taint;
  enum nrm_taint_effect effect;
};

static void
note (struct verdict *v, enum nrm_taint_effect effect, const char *taint, const char *line)
{
  append (&v->msg, line);
  if (effect > v->effect)
    {
      v->effect = effect;
      v->taint = taint;
    }
}

static void
errors_of (struct verdict *v, const char *list, int64_t ce, int64_t ue, int64_t threshold, bool unmapped)
{
  char line[256];
  if (unmapped)
    {
      /* Not known to be this node's: a note, never a reason to move. */
      if (ce || ue)
        {
          snprintf (line, sizeof (line),
                    "%s (NUMA node not known): %" PRId64 " corrected, %" PRId64 " uncorrected errors", list, ce, ue);
          note (v, NRM_TAINT_NONE, "memory-errors-unmapped", line);
        }
      return;
    }
  if (ue)
    {
      snprintf (line, sizeof (line), "%s: %" PRId64 " uncorrected memory errors", list, ue);
      note (v, NRM_TAINT_NO_EXECUTE, "memory-uncorrected", line);
    }
  if (ce)
    {
      snprintf (line, sizeof (line), "%s: %" PRId64 " corrected memory errors (threshold %" PRId64 ")", list, ce,
                threshold);
      note (v, ce > threshold ? NRM_TAINT_NO_SCHEDULE : NRM_TAINT_NONE, "memory-corrected", line);
    }
}

static void
name_into (char **list, const char *name, const char *how)
{
  char *joined = xasprintf ("%s%s%s%s", *list ? *list : "", *list ? "," : "", name, how);
  free (*list);
  *list = joined;
}

/* Under lock: a controller placed by sysfs needs no tallies; for one
 * placed by its events, notes its counters: smaller ones than last time
 * mean reset_counters, which clears its tallies too. Returns whether the
 * state changed. */
static bool
counted (struct nrm_memory_health *mh, const struct nrm_edac_mc *m, bool placed)
{
  size_t i = 0, before = mh->n_tallies;
  int64_t total = m->ce > INT64_MAX - m->ue ? INT64_MAX : m->ce + m->ue;
  if (placed)
    {
      tally_clear (mh, m->index);
      return before != mh->n_tallies;
    }
  while (i < mh->n_seen && mh->seen[i].mc != m->index)
    i++;
  if (i == mh->n_seen)
    {
      mh->seen = xrealloc (mh->seen, (mh->n_seen + 1) * sizeof (*mh->seen));
      mh->seen[mh->n_seen++] = (struct seen){ .mc = m->index, .total = -1 };
    }
  if (total < mh->seen[i].total)
    tally_clear (mh, m->index);
  bool changed = before != mh->n_tallies || mh->seen[i].total != total;
  mh->seen[i].total = total;
  return changed;
}

int
nrm_memory_health_report (struct nrm_memory_health *mh, json_t *names, struct nrm_health_report *ret, nrm_error_t *err)
{
  const struct nrm_topology *t = mh->t;
  size_t n = t->n_numa ? t->n_numa : 1, nm = 0, count = json_array_size (names);
  cleanup_free struct nrm_edac_mc *mcs = NULL;
  cleanup_free int64_t *change = xcalloc (n, sizeof (*change));
  cleanup_free uint64_t *offline = xcalloc (n, sizeof (*offline));
  if (mh->sysfs)
    {
      if (nrm_edac_read (mh->fsroot, &mcs, &nm, err) < 0)
        return nrm_error_wrap (err, "memory health");
      if (read_blocks (mh, change, offline, err) < 0)
        return nrm_error_wrap (err, "memory health");
    }
  struct
  {
    struct nrm_zone_low zones[4];
    size_t n;
  } *low = xcalloc (n, sizeof (*low));
  for (size_t i = 0; mh->sysfs && i < t->n_numa; i++)
    {
      int k = nrm_zones_low_read (mh->fsroot, t->numa[i].os_index, low[i].zones, 4, err);
      if (k < 0)
        {
          free (low);
          return nrm_error_wrap (err, "memory health");
        }
      low[i].n = (size_t) k;
    }
  /* Per node: its controllers' names and counts, and the unmapped ones.
   * A controller nrm cannot place by sysfs is placed error by error by the
   * addresses of its mc_event lines; what they leave (errors before the
   * trace, without an address, dropped by the buffer) stays unmapped. */
  char **lists = xcalloc (n + 1, sizeof (*lists));
  int64_t *ce = xcalloc (n + 1, sizeof (*ce)), *ue = xcalloc (n + 1, sizeof (*ue));
  bool dies = dies_are_nodes (t, mcs, nm);
  drain_trace (mh);
  pthread_mutex_lock (&mh->lock);
  bool changed = false;
  for (size_t k = 0; k < nm; k++)
    {
      bool any = mapped (t, &mcs[k], dies);
      int64_t rest_ce = mcs[k].ce, rest_ue = mcs[k].ue;
      changed |= counted (mh, &mcs[k], any);
      for (size_t j = 0; !any && j < mh->n_tallies; j++)
        {
          const struct tally *y = &mh->tallies[j];
          size_t i = position (t, y->node);
          if (y->mc != mcs[k].index || i == t->n_numa)
            continue;
          name_into (&lists[i], mcs[k].name, " (by error address)");
          ce[i] = plus (ce[i], y->ce);
          ue[i] = plus (ue[i], y->ue);
          rest_ce -= y->ce < rest_ce ? y->ce : rest_ce;
          rest_ue -= y->ue < rest_ue ? y->ue : rest_ue;
        }
      for (size_t i = 0; i < t->n_numa; i++)
        if (serves (t, i, &mcs[k], dies))
          {
            name_into (&lists[i], mcs[k].name, "");
            ce[i] = plus (ce[i], mcs[k].ce);
            ue[i] = plus (ue[i], mcs[k].ue);
          }
      if (!any)
        {
          name_into (&lists[n], mcs[k].name, "");
          ce[n] = plus (ce[n], rest_ce);
          ue[n] = plus (ue[n], rest_ue);
        }
    }
  if (changed)
    save (mh);
  pthread_mutex_unlock (&mh->lock);
  ret->devices = xcalloc (count + 1, sizeof (*ret->devices));
  ret->n = 0;
  for (size_t j = 0; j < count; j++)
    {
      const char *name = json_string_value (json_array_get (names, j));
      unsigned node;
      enum nrm_numa_name_kind kind;
      size_t i = 0;
      if (!nrm_numa_name_parse (name, &node, &kind))
        continue;
      while (i < t->n_numa && t->numa[i].os_index != node)
        i++;
      if (i == t->n_numa)
        continue;
      bool ordinary = kind == NRM_NUMA_NAME_NODE;
      struct verdict v = { 0 };
      errors_of (&v, lists[i], ce[i], ue[i], mh->threshold, false);
      errors_of (&v, lists[n], ce[n], ue[n], mh->threshold, true);
      /* Pressure comes and goes: a note, never a reason to move. */
      for (size_t z = 0; ordinary && z < low[i].n; z++)
        {
          char line[160];
          const struct nrm_zone_low *zl = &low[i].zones[z];
          snprintf (line, sizeof (line), "zone %s: %" PRIu64 " pages free, below the low watermark %" PRIu64 "%s",
                    zl->zone, zl->free, zl->low,
                    zl->free < zl->min ? " and min: allocations reclaim" : ": the kernel reclaims");
          note (&v, NRM_TAINT_NONE, "memory-pressure", line);
        }
      if (ordinary && (offline[i] || change[i] < 0))
        {
          char line[160], a[32], b[32];
          nrm_quantity_format (offline[i], 1, a, sizeof (a));
          nrm_quantity_format ((uint64_t) (change[i] < 0 ? -change[i] : 0), 1, b, sizeof (b));
          snprintf (line, sizeof (line), "%s of memory blocks offline, %s less online than at the start", a, b);
          note (&v, NRM_TAINT_NONE, "memory-offline", line);
        }
      struct nrm_device_health *h = &ret->devices[ret->n++];
      h->device = xstrdup (name);
      h->health = v.effect == NRM_TAINT_NO_EXECUTE ? NRM_HEALTH_UNHEALTHY : NRM_HEALTH_HEALTHY;
      h->message = v.msg;
      if (v.taint)
        {
          h->taint = xstrdup (v.taint);
          h->effect = v.effect;
        }
    }
  for (size_t i = 0; i <= n; i++)
    free (lists[i]);
  free (lists);
  free (low);
  free (ce);
  free (ue);
  return 0;
}
