/* SPDX-License-Identifier: Apache-2.0 */
/* The shared pool and its reconciler (nrm/reconcile.h). */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "nrm/commit.h"
#include "cpuset/placement.h"
#include "cpuset/watch.h"
#include "driver/kubelet/checkpoint.h"
#include "driver/devices.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/quantity.h"
#include "nrm/base/xalloc.h"
#include "nrm/logging.h"
#include "nrm/reconcile.h"

/* --- what the claims hold ------------------------------------------------ */

/* Every claim of a driver's checkpoint with what describe says it holds
 * ({uid: description}, a new reference); completed claims only, or every
 * one. NULL for a driver without describe. */
static json_t *
descriptions (const char *state_dir, const struct nrm_driver_slot *s, bool completed_only)
{
  nrm_error_t err = NULL;
  if (s->ops->describe == NULL)
    return NULL;
  cleanup_json json_t *claims = nrm_checkpoint_claims (state_dir, s->name, &err);
  nrm_error_release (&err);
  json_t *out = json_object ();
  const char *uid;
  json_t *cl;
  json_object_foreach (claims, uid, cl)
  {
    if (!completed_only || nrm_checkpoint_completed (cl))
      json_object_set_new (out, uid, s->ops->describe (s->self, uid, json_object_get (cl, "state")));
  }
  return out;
}

hwloc_bitmap_t
nrm_shared_pool_claimed_cpus (const char *state_dir, const struct nrm_drivers *d)
{
  hwloc_bitmap_t all = xbitmap_alloc ();
  for (size_t i = 0; i < d->n; i++)
    {
      cleanup_json json_t *descs = descriptions (state_dir, &d->slots[i], true);
      nrm_cpulist_union_members (all, descs, "cpus");
    }
  return all;
}

hwloc_bitmap_t
nrm_shared_pool_cpus (const struct nrm_config *c, const struct nrm_topology *t, hwloc_const_bitmap_t claimed)
{
  hwloc_bitmap_t shared = xbitmap_dup (t->online);
  hwloc_bitmap_andnot (shared, shared, t->disallowed);
  hwloc_bitmap_andnot (shared, shared, t->isolated);
  hwloc_bitmap_andnot (shared, shared, claimed);
  if (c->cpu.options & NRM_OPT_STRICT_CPU_RESERVATION)
    hwloc_bitmap_andnot (shared, shared, t->reserved);
  return shared;
}

/* The bytes claims hold of each device ({device: bytes}, a new reference):
 * the amounts of capacity `memory` in describe's "devices" of the claims
 * that bind memory nodes; a claim being prepared counts, its memory is as
 * good as gone. */
static json_t *
memory_held (json_t *descs)
{
  json_t *held = json_object ();
  const char *uid, *dev;
  json_t *desc, *v;
  json_object_foreach (descs, uid, desc)
  {
    if (json_object_get (desc, "memoryNodes") == NULL)
      continue;
    json_object_foreach (json_object_get (desc, "devices"), dev, v)
    {
      json_t *bytes = json_object_get (v, "memory");
      if (json_is_integer (bytes) && json_integer_value (bytes) > 0)
        json_object_set_new (
            held, dev, json_integer (json_integer_value (json_object_get (held, dev)) + json_integer_value (bytes)));
    }
  }
  return held;
}

/* The NUMA node of a pool device, by position in t, from the standard
 * attribute (with list attributes, its first value is the device's own
 * node); -1 for none. */
static int
device_node (const struct nrm_topology *t, json_t *dev)
{
  json_t *a = json_object_get (json_object_get (dev, "attributes"), NRM_STD_NUMA_ATTR);
  json_t *v = json_object_get (a, "int");
  if (v == NULL)
    v = json_array_get (json_object_get (a, "ints"), 0);
  if (!json_is_integer (v) || json_integer_value (v) < 0 || json_integer_value (v) > 65535)
    return -1;
  return nrm_topology_numa_index (t, (unsigned) json_integer_value (v));
}

/* Adds what a driver's pool offers of each node's memory (offered) and
 * what held holds of it (taken), by position in t. */
static void
count_pool (const struct nrm_topology *t, const struct nrm_pool *p, json_t *held, uint64_t *offered, uint64_t *taken)
{
  size_t i;
  json_t *dev;
  json_array_foreach (p->devices, i, dev)
  {
    json_t *cap = json_object_get (json_object_get (json_object_get (dev, "capacity"), "memory"), "value");
    int n = device_node (t, dev);
    uint64_t q = 0;
    nrm_error_t e = NULL;
    if (cap == NULL || n < 0 || nrm_quantity_parse_bytes (json_string_value (cap), &q, &e) < 0 || q == 0)
      {
        nrm_error_release (&e);
        continue;
      }
    offered[n] += q;
    taken[n]
        += (uint64_t) json_integer_value (json_object_get (held, json_string_value (json_object_get (dev, "name"))));
  }
}

hwloc_bitmap_t
nrm_shared_pool_full_nodes (const char *state_dir, const struct nrm_topology *t, const struct nrm_drivers *d)
{
  hwloc_bitmap_t full = xbitmap_alloc ();
  cleanup_free uint64_t *offered = xcalloc (t->n_numa + 1, sizeof (uint64_t));
  cleanup_free uint64_t *taken = xcalloc (t->n_numa + 1, sizeof (uint64_t));
  for (size_t i = 0; i < d->n; i++)
    {
      const struct nrm_driver_slot *s = &d->slots[i];
      cleanup_json json_t *descs = descriptions (state_dir, s, false);
      cleanup_json json_t *held = memory_held (descs);
      struct nrm_pool pool = { 0 };
      nrm_error_t err = NULL;
      /* A driver whose claims hold no memory fills no node: its pool is
       * not asked for. */
      if (json_object_size (held) == 0)
        continue;
      if (s->ops->pool (s->self, NULL, &pool, &err) < 0)
        {
          nrm_log (NULL, NRM_LOG_WARNING, "shared pool: %s: %s", s->name, nrm_error_msg (err));
          nrm_error_release (&err);
          continue;
        }
      count_pool (t, &pool, held, offered, taken);
      nrm_pool_done (&pool);
    }
  for (size_t n = 0; n < t->n_numa; n++)
    if (offered[n] > 0 && taken[n] >= offered[n])
      hwloc_bitmap_set (full, t->numa[n].os_index);
  return full;
}

hwloc_bitmap_t
nrm_shared_pool_mems (const struct nrm_topology *t, hwloc_const_bitmap_t full, bool *starved)
{
  hwloc_bitmap_t all = xbitmap_alloc (), shared;
  for (size_t n = 0; n < t->n_numa; n++)
    if (t->numa[n].allowed)
      hwloc_bitmap_set (all, t->numa[n].os_index);
  shared = xbitmap_dup (all);
  hwloc_bitmap_andnot (shared, shared, full);
  *starved = hwloc_bitmap_iszero (shared) && !hwloc_bitmap_iszero (all);
  if (*starved)
    {
      /* Every node's memory is claimed: shared containers must still run
       * somewhere, so they keep every node (and the claims their memory
       * limits, memory.max and memory.min, where the claims asked). */
      hwloc_bitmap_free (shared);
      return all;
    }
  hwloc_bitmap_free (all);
  return shared;
}

/* --- the reconciler ------------------------------------------------------ */

/* Every container without an exclusive claim runs on the allocatable CPUs
 * no claim holds (reserved ones too, unless strict-cpu-reservation keeps
 * them out). */
struct nrm_reconciler
{
  struct nrm_config *cfg;
  const struct nrm_topology *t;
  const struct nrm_drivers *drivers;
  struct nrm_cgroupfs *fs; /* set while the thread runs */
  int wake;                /* eventfd: a claim changed, or stop */
  bool stop;
  bool starved; /* every node's memory was claimed at the last pass */
  bool (*may_write) (void *ctx);
  void *ctx;
  pthread_t thread;
};

static bool
writing (const struct nrm_reconciler *r)
{
  return r->may_write == NULL || r->may_write (r->ctx);
}

struct nrm_reconciler *
nrm_reconciler_new (void)
{
  struct nrm_reconciler *r = xcalloc (1, sizeof (*r));
  r->wake = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  return r;
}

void
nrm_reconciler_kick (void *arg)
{
  struct nrm_reconciler *r = arg;
  uint64_t one = 1;
  if (r->wake >= 0 && write (r->wake, &one, sizeof (one)) < 0)
    nrm_log (NULL, NRM_LOG_DEBUG, "shared pool: cannot wake the reconciler: %s", strerror (errno));
}

static void
reconcile_pass (struct nrm_reconciler *r)
{
  if (!writing (r))
    return;
  const char *state_dir = r->cfg->state_dir;
  cleanup_bitmap hwloc_bitmap_t taken = nrm_shared_pool_claimed_cpus (state_dir, r->drivers);
  cleanup_bitmap hwloc_bitmap_t shared = nrm_shared_pool_cpus (r->cfg, r->t, taken);
  cleanup_free char *list = nrm_cpulist_format (shared), *first = NULL;
  /* Shared containers stay off nodes whose memory claims hold in full. */
  bool starved = false;
  cleanup_bitmap hwloc_bitmap_t full = nrm_shared_pool_full_nodes (state_dir, r->t, r->drivers);
  cleanup_bitmap hwloc_bitmap_t mems = nrm_shared_pool_mems (r->t, full, &starved);
  cleanup_bitmap hwloc_bitmap_t none = xbitmap_alloc ();
  cleanup_bitmap hwloc_bitmap_t all = nrm_shared_pool_mems (r->t, none, &(bool){ false });
  cleanup_free char *mem_list = nrm_cpulist_format (mems), *all_list = nrm_cpulist_format (all);
  struct nrm_reconcile_stats st;
  nrm_error_t err = NULL;
  if (starved != r->starved)
    nrm_log (NULL, starved ? NRM_LOG_WARNING : NRM_LOG_INFO,
             starved ? "shared pool: claims hold the memory of every NUMA node; shared containers keep all of them"
                     : "shared pool: a NUMA node's memory is free again");
  r->starved = starved;
  size_t n_host = json_array_size (r->cfg->shared_pool_cgroups);
  cleanup_free const char **host = xcalloc (n_host + 1, sizeof (char *));
  for (size_t i = 0; i < n_host; i++)
    host[i] = json_string_value (json_array_get (r->cfg->shared_pool_cgroups, i));
  if (nrm_reconcile (r->fs, state_dir, list, *mem_list ? mem_list : NULL, all_list, host, n_host, &st, &first, &err)
      < 0)
    {
      nrm_log (NULL, NRM_LOG_ERROR, "shared pool: %s", nrm_error_msg (err));
      nrm_error_release (&err);
      return;
    }
  if (st.failed)
    nrm_log (NULL, NRM_LOG_WARNING, "shared pool %s: %zu of %zu containers could not be updated; first: %s", list,
             st.failed, st.containers, first ? first : "?");
  if (st.updated || st.forgotten)
    nrm_log (NULL, NRM_LOG_INFO,
             "shared pool %s, memory nodes %s: containers updated %zu, exclusive %zu, gone %zu; host cgroups "
             "holding it %zu",
             list, mem_list, st.updated, st.exclusive, st.forgotten, st.host_confined);
}

/* A checkpoint replaced by another process (an nrm run, a rolling-update
 * twin) changes the claimed CPUs too: an inotify descriptor on the state
 * dir, or -1. The publisher records too: a twin that stops removes its
 * own. */
static int
watch_state_dir (const char *state_dir)
{
  int fd = inotify_init1 (IN_NONBLOCK | IN_CLOEXEC);
  if (fd >= 0 && inotify_add_watch (fd, state_dir, IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE) < 0)
    {
      nrm_log (NULL, NRM_LOG_WARNING, "shared pool: cannot watch `%s` (%s); runs are seen at the periodic pass",
               state_dir, strerror (errno));
      close (fd);
      fd = -1;
    }
  return fd;
}

/* A pass at start, then whenever a claim changes, a pod cgroup appears
 * (inotify) or the interval has passed (drift written by others). */
static void *
reconcile_thread (void *arg)
{
  struct nrm_reconciler *r = arg;
  struct nrm_kubepods_watch *w = NULL;
  nrm_error_t err = NULL;
  if (nrm_kubepods_watch_open (r->fs, &w, &err) < 0)
    {
      nrm_log (NULL, NRM_LOG_WARNING, "shared pool: %s; new containers wait for the periodic pass",
               nrm_error_msg (err));
      nrm_error_release (&err);
    }
  cleanup_close int state_fd = watch_state_dir (r->cfg->state_dir);
  while (!__atomic_load_n (&r->stop, __ATOMIC_SEQ_CST))
    {
      reconcile_pass (r);
      struct pollfd fds[3]
          = { { r->wake, POLLIN, 0 }, { w ? nrm_kubepods_watch_fd (w) : -1, POLLIN, 0 }, { state_fd, POLLIN, 0 } };
      /* A standby looks every second for a twin that died. */
      int ms = writing (r) ? (int) r->cfg->reconcile_interval * 1000 : 1000;
      int n = poll (fds, 3, ms);
      if (n > 0 && (fds[2].revents & POLLIN))
        {
          char buf[4096];
          while (read (state_fd, buf, sizeof (buf)) > 0)
            ;
        }
      if (n > 0 && (fds[0].revents & POLLIN))
        {
          uint64_t v;
          if (read (r->wake, &v, sizeof (v)) < 0)
            continue;
        }
      if (n > 0 && w && (fds[1].revents & POLLIN))
        nrm_kubepods_watch_drain (w);
    }
  nrm_kubepods_watch_close (w);
  return NULL;
}

/* The shared pool is kept where cgroup v2 is mounted; never this host's
 * when a recorded machine is served without an --fsroot. */
void
nrm_reconciler_start (struct nrm_reconciler *r, struct nrm_config *c, const struct nrm_fsroot *root,
                      const struct nrm_topology *t, const struct nrm_drivers *d, bool (*may_write) (void *ctx),
                      void *ctx)
{
  if (c->reconcile_interval <= 0)
    return;
  if (c->topology && nrm_fsroot_live (root))
    {
      nrm_log (NULL, NRM_LOG_INFO, "serving a recorded machine: this host's container cgroups are left alone");
      return;
    }
  nrm_error_t cerr = NULL;
  if (nrm_cgroup_v2_controller (root, "cpuset") == NRM_CGROUP_V2_NONE || nrm_cgroupfs_open (root, &r->fs, &cerr) < 0)
    {
      cleanup_free char *cg = nrm_fsroot_path (root, "/sys/fs/cgroup");
      nrm_log (NULL, NRM_LOG_WARNING, "no cgroup v2 at %s: the shared pool is not managed%s%s", cg, cerr ? ": " : "",
               cerr ? nrm_error_msg (cerr) : "");
      nrm_error_release (&cerr);
      return;
    }
  r->cfg = c;
  r->t = t;
  r->drivers = d;
  r->may_write = may_write;
  r->ctx = ctx;
  if (pthread_create (&r->thread, NULL, reconcile_thread, r) != 0)
    {
      nrm_cgroupfs_close (r->fs);
      r->fs = NULL;
    }
}

bool
nrm_reconciler_running (const struct nrm_reconciler *r)
{
  return r && r->fs;
}

void
nrm_reconciler_stop (struct nrm_reconciler *r)
{
  if (r == NULL || r->fs == NULL)
    return;
  __atomic_store_n (&r->stop, true, __ATOMIC_SEQ_CST);
  nrm_reconciler_kick (r);
  pthread_join (r->thread, NULL);
  nrm_cgroupfs_close (r->fs);
  r->fs = NULL;
}

void
nrm_reconciler_free (struct nrm_reconciler *r)
{
  if (r == NULL)
    return;
  nrm_reconciler_stop (r);
  if (r->wake >= 0)
    close (r->wake);
  free (r);
}
