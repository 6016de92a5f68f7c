/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "driver/memory/health.h"
#include "driver/names.h"
#include "memory/health.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/quantity.h"
#include "nrm/base/xalloc.h"

struct nrm_memory_health
{
  const struct nrm_topology *t;
  const struct nrm_fsroot *fsroot;
  bool sysfs; /* this machine or a fake tree: a recorded one has none */
  int64_t threshold;
  int poll_s;
  int timer;
  uint64_t *start; /* bytes online per node at the start */
  bool *known;     /* start[i] read */
  pthread_mutex_t lock;
  int64_t *last; /* the last change read, kept when a pass fails */
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
  pthread_mutex_destroy (&mh->lock);
  free (mh->start);
  free (mh->known);
  free (mh->last);
  free (mh);
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
    }
  *ret = mh;
  return 0;
}

int
nrm_memory_health_fd (struct nrm_memory_health *mh)
{
  return mh ? mh->timer : -1;
}

void
nrm_memory_health_drain (struct nrm_memory_health *mh)
{
  uint64_t ticks;
  while (mh && mh->timer >= 0 && read (mh->timer, &ticks, sizeof (ticks)) == (ssize_t) sizeof (ticks))
    ;
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

/* The node at topology position i: the controllers that serve it. One
 * node takes every controller; otherwise a controller serves the nodes of
 * the socket its name gives. */
static bool
serves (const struct nrm_topology *t, size_t i, const struct nrm_edac_mc *m)
{
  if (t->n_numa == 1)
    return true;
  int pkg = t->numa[i].package;
  return m->socket >= 0 && pkg >= 0 && t->packages[pkg].os_index == (unsigned) m->socket;
}

static bool
mapped (const struct nrm_topology *t, const struct nrm_edac_mc *m)
{
  for (size_t i = 0; i < t->n_numa; i++)
    if (serves (t, i, m))
      return true;
  return false;
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
  /* Per node: its controllers' names and counts, and the unmapped ones. */
  char **lists = xcalloc (n + 1, sizeof (*lists));
  int64_t *ce = xcalloc (n + 1, sizeof (*ce)), *ue = xcalloc (n + 1, sizeof (*ue));
  for (size_t k = 0; k < nm; k++)
    {
      bool any = mapped (t, &mcs[k]);
      for (size_t i = 0; i <= n; i++)
        if (i < t->n_numa ? serves (t, i, &mcs[k]) : !any)
          {
            char *joined = xasprintf ("%s%s%s", lists[i] ? lists[i] : "", lists[i] ? "," : "", mcs[k].name);
            free (lists[i]);
            lists[i] = joined;
            ce[i] += mcs[k].ce;
            ue[i] += mcs[k].ue;
          }
    }
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
