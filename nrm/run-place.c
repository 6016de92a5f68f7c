/* SPDX-License-Identifier: Apache-2.0 */
/* nrm run's CPUs placed under the CPU driver's serialize lock: the node
 * (the first in preference order with room, else several) or the CPUs of
 * -C checked free, each node's CPUs as the driver places them on its
 * device, and the CPU claim that names them. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/placement.h"
#include "driver/names.h"
#include "driver/cpu/cpu.h"
#include "driver/kit.h"
#include "driver/kubelet/checkpoint.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/run-internal.h"

/* The CPU claim of the parts: one result per node (request `run` when
 * there is one), a CPUConfig `cpus` entry for each pinned one. */
static json_t *
cpu_claim (const char *uid, const char *name, const char *driver, const char *pool, bool isolated,
           const struct part *parts, size_t n, json_t *config)
{
  json_t *results = json_array ();
  cleanup_json json_t *conf = json_deep_copy (config);
  for (size_t i = 0; i < n; i++)
    {
      char req[32], dev[48], count[16];
      if (n == 1)
        snprintf (req, sizeof (req), "run");
      else
        snprintf (req, sizeof (req), "run-%zu", i);
      nrm_numa_name (dev, sizeof (dev), parts[i].os, isolated ? NRM_NUMA_NAME_ISOLATED : NRM_NUMA_NAME_NODE, NULL);
      snprintf (count, sizeof (count), "%u", parts[i].count);
      json_array_append_new (results, json_pack ("{s:s, s:s, s:s, s:s, s:{s:s}}", "request", req, "driver", driver,
                                                 "pool", pool, "device", dev, "consumedCapacity", "cpus", count));
      if (parts[i].pin)
        {
          cleanup_free char *list = nrm_cpulist_format (parts[i].pin);
          json_array_append_new (conf, json_pack ("{s:[s], s:s, s:{s:s, s:{s:s, s:s, s:s}}}", "requests", req, "source",
                                                  "FromClaim", "opaque", "driver", driver, "parameters", "apiVersion",
                                                  "cpu.nrm.io/v1alpha1", "kind", "CPUConfig", "cpus", list));
        }
    }
  return nrm_run_claim (uid, name, results, conf);
}

/* The holder of a CPU among the checkpoint's claims, "namespace/name
 * (uid)", or NULL. */
static char *
holder_of (json_t *claims, unsigned cpu)
{
  const char *uid;
  json_t *e;
  json_object_foreach (claims, uid, e)
  {
    cleanup_bitmap hwloc_bitmap_t set = NULL;
    nrm_error_t perr = NULL;
    const char *list = json_string_value (json_object_get (json_object_get (e, "state"), "cpus"));
    if (!nrm_checkpoint_completed (e) || list == NULL || nrm_cpulist_parse (list, &set, &perr) < 0)
      {
        nrm_error_release (&perr);
        continue;
      }
    if (hwloc_bitmap_isset (set, cpu))
      return xasprintf (
          "%s %s/%s (%s)",
          strcmp (json_string_value (json_object_get (e, "namespace")) ?: "", RUN_NAMESPACE) == 0 ? "run" : "claim",
          json_string_value (json_object_get (e, "namespace")) ?: "?",
          json_string_value (json_object_get (e, "name")) ?: "?", uid);
  }
  return NULL;
}

/* Every CPU of -C: on this machine, allocatable, of the right kind and not
 * held; the error names the CPU and why, its holder when held. */
static int
check_pin (const struct nrm_topology *t, const struct nrm_run_request *rq, json_t *claims, nrm_error_t *err)
{
  int cpu;
  hwloc_bitmap_foreach_begin (cpu, rq->cpu_list)
  {
    int pi = nrm_topology_pu_index (t, (unsigned) cpu);
    cleanup_free char *who = NULL;
    if (pi < 0 || t->pus[pi].numa < 0)
      {
        cleanup_free char *all = nrm_cpulist_format (t->online);
        return nrm_error_set (err, EINVAL, "--physcpubind: CPU %d is not on this machine (its CPUs are %s)", cpu, all);
      }
    if (hwloc_bitmap_isset (t->reserved, (unsigned) cpu))
      return nrm_error_set (err, EINVAL, "--physcpubind: CPU %d is reserved (--reserved-cpus)", cpu);
    if (hwloc_bitmap_isset (t->disallowed, (unsigned) cpu))
      return nrm_error_set (err, EINVAL, "--physcpubind: CPU %d is outside the cgroup cpuset nrm runs in", cpu);
    bool iso = hwloc_bitmap_isset (t->isolated, (unsigned) cpu);
    if (iso != rq->isolated)
      return nrm_error_set (err, EINVAL, "--physcpubind: CPU %d is %s", cpu,
                            iso ? "isolated: give --isolated for isolated CPUs"
                                : "not isolated, and --isolated asks for isolated ones");
    if ((who = holder_of (claims, (unsigned) cpu)) != NULL)
      return nrm_error_set (err, EBUSY, "--physcpubind: CPU %d is held by %s", cpu, who);
  }
  hwloc_bitmap_foreach_end ();
  return 0;
}

static void
add_tried (json_t *tried, const struct part *parts, size_t n, const char *result)
{
  cleanup_bitmap hwloc_bitmap_t set = xbitmap_alloc ();
  for (size_t i = 0; i < n; i++)
    hwloc_bitmap_set (set, parts[i].os);
  cleanup_free char *list = nrm_cpulist_format (set);
  json_array_append_new (tried, json_pack ("{s:s, s:s}", "nodes", list, "result", result));
}

/* Several nodes when no one has room: from the node with the most free
 * CPUs, then the nearest ones (by distance, the freest first), each giving
 * what it has free. Returns the number of parts, 0 when all together have
 * too few. */
static size_t
spread (const struct nrm_topology *t, const bool *candidate, const uint64_t *free_cpus, unsigned want,
        struct part *parts)
{
  size_t n = 0, start = SIZE_MAX;
  unsigned left = want;
  for (size_t i = 0; i < t->n_numa; i++)
    if (candidate[i] && free_cpus[i] > 0 && (start == SIZE_MAX || free_cpus[i] > free_cpus[start]))
      start = i;
  cleanup_free bool *used = xcalloc (t->n_numa + 1, sizeof (bool));
  for (size_t next = start; next != SIZE_MAX && left > 0;)
    {
      unsigned take = free_cpus[next] < left ? (unsigned) free_cpus[next] : left;
      parts[n++] = (struct part){ next, t->numa[next].os_index, take, NULL };
      used[next] = true;
      left -= take;
      next = SIZE_MAX;
      for (size_t i = 0; i < t->n_numa; i++)
        if (candidate[i] && !used[i] && free_cpus[i] > 0
            && (next == SIZE_MAX || nrm_topology_distance (t, start, i) < nrm_topology_distance (t, start, next)
                || (nrm_topology_distance (t, start, i) == nrm_topology_distance (t, start, next)
                    && free_cpus[i] > free_cpus[next])))
          next = i;
    }
  return left == 0 ? n : 0;
}

/* A part's CPUs placed as the CPU driver places them on its device, from
 * free (which loses them). */
static int
place_part (struct run *r, struct part *pt, hwloc_bitmap_t free_set, nrm_error_t *err)
{
  char dev[48], count[16];
  size_t n;
  nrm_numa_name (dev, sizeof (dev), pt->os, r->rq->isolated ? NRM_NUMA_NAME_ISOLATED : NRM_NUMA_NAME_NODE, NULL);
  snprintf (count, sizeof (count), "%u", pt->count);
  json_t *d = json_object_get (r->cpu_devices, dev);
  if (d == NULL)
    return nrm_error_set (err, ENODEV, "NUMA node %u: the CPU driver publishes no device %s", pt->os, dev);
  cleanup_json json_t *consumed = json_pack ("{s:s}", "cpus", count);
  struct nrm_alloc_result res = { r->drv[0]->name, "run", r->c->node_name, dev, NULL, consumed };
  pt->pin = xbitmap_alloc ();
  if (nrm_cpu_consumed (&res, d, &n, err) < 0
      || nrm_cpu_place_device (r->t, dev, n, r->options, NULL, NULL, free_set, pt->pin, err) < 0)
    {
      hwloc_bitmap_free (pt->pin);
      pt->pin = NULL;
      return -1;
    }
  hwloc_bitmap_andnot (free_set, free_set, pt->pin);
  return 0;
}

void
nrm_run_drop_parts (struct run *r)
{
  for (size_t i = 0; i < r->n_parts; i++)
    hwloc_bitmap_free (r->parts[i].pin);
  r->n_parts = 0;
}

/* --cpus N found no room: why, from the last node's answer. */
int
nrm_run_no_room (struct run *r, nrm_error_t last, nrm_error_t *err)
{
  const struct nrm_run_request *rq = r->rq;
  if (last == NULL && rq->isolated)
    return nrm_error_set (err, ENOSPC,
                          "no NUMA node%s has isolated CPUs (--isolated-cpus, or isolcpus= on the kernel "
                          "command line)",
                          rq->cpu_nodes ? " asked for" : "");
  if (last == NULL)
    return nrm_error_set (err, EINVAL, "no NUMA node asked for has CPUs");
  *err = last;
  return nrm_error_wrap (err, "%u CPU%s%s", rq->cpus, rq->cpus == 1 ? "" : "s",
                         rq->cpu_nodes ? " on the NUMA nodes asked for" : " on any NUMA node");
}

/* --cpus N: one node, the first in preference order that has room, the
 * fullest first (a best fit, as the slices offer the nodes to the
 * scheduler); else several, asked for with -N LIST or needed without it. */
static int
place_count (struct run *r, json_t *claims, nrm_error_t *err)
{
  const struct nrm_topology *t = r->t;
  const struct nrm_run_request *rq = r->rq;
  cleanup_json json_t *held = nrm_checkpoint_held (claims);
  cleanup_free uint64_t *free_cpus = NULL, *free_cell = NULL;
  nrm_cpu_room (t, held, &free_cpus, &free_cell);
  cleanup_free size_t *order = nrm_numa_preference_by_room (t, free_cpus, free_cell);
  cleanup_bitmap hwloc_bitmap_t free_set = nrm_cpu_unheld (t, held);
  cleanup_free bool *candidate = xcalloc (t->n_numa + 1, sizeof (bool));
  size_t n_cand = 0;
  nrm_error_t last = NULL;
  for (size_t i = 0; i < t->n_numa; i++)
    {
      candidate[i] = !hwloc_bitmap_iszero (t->numa[i].cpus)
                     && (rq->cpu_nodes == NULL || hwloc_bitmap_isset (rq->cpu_nodes, t->numa[i].os_index))
                     && (!rq->isolated || hwloc_bitmap_intersects (t->numa[i].cpus, t->isolated));
      n_cand += candidate[i];
    }
  for (size_t k = 0; k < t->n_numa && r->n_parts == 0; k++)
    {
      size_t ni = order[k];
      struct part one = { ni, t->numa[ni].os_index, rq->cpus, NULL };
      if (!candidate[ni])
        continue;
      nrm_error_release (&last);
      if (place_part (r, &one, free_set, &last) == 0)
        {
          r->parts[r->n_parts++] = one;
          add_tried (r->tried, &one, 1, "fits (the first in preference order, the fullest first)");
        }
      else
        add_tried (r->tried, &one, 1, nrm_error_msg (last));
    }
  if (r->n_parts == 0 && last && n_cand > 1 && !rq->isolated
      && (r->n_parts = spread (t, candidate, free_cpus, rq->cpus, r->parts)) > 1)
    {
      nrm_error_release (&last);
      for (size_t i = 0; i < r->n_parts && last == NULL; i++)
        place_part (r, &r->parts[i], free_set, &last);
      if (last == NULL)
        add_tried (r->tried, r->parts, r->n_parts, "fits across these nodes (no one node had room), nearest first");
    }
  if (r->n_parts == 0 || last)
    {
      nrm_run_drop_parts (r);
      return nrm_run_no_room (r, last, err);
    }
  return 0;
}

/* -C: exactly these CPUs, from the nodes they are on; each checked free
 * under the lock, a held one refused naming its holder. */
static int
place_list (struct run *r, json_t *claims, nrm_error_t *err)
{
  const struct nrm_topology *t = r->t;
  if (check_pin (t, r->rq, claims, err) < 0)
    return -1;
  for (size_t i = 0; i < t->n_numa; i++)
    if (hwloc_bitmap_intersects (t->numa[i].cpus, r->rq->cpu_list))
      {
        hwloc_bitmap_t pin = xbitmap_dup (r->rq->cpu_list);
        hwloc_bitmap_and (pin, pin, t->numa[i].cpus);
        r->parts[r->n_parts++] = (struct part){ i, t->numa[i].os_index, (unsigned) hwloc_bitmap_weight (pin), pin };
      }
  add_tried (r->tried, r->parts, r->n_parts, "the CPUs asked for (--physcpubind)");
  return 0;
}

/* The CPU claim, chosen under the CPU driver's serialize lock from the
 * claims held then: placement picks the node and the CPUs, and the claim
 * names them (CPUConfig cpus), so the prepare in the same hold takes
 * exactly those. */
int
nrm_run_choose_cpus (void *ctx, json_t *claims, json_t **ret, nrm_error_t *err)
{
  struct run *r = ctx;
  r->cpu_claims = json_deep_copy (claims);
  if ((r->rq->cpu_list ? place_list (r, claims, err) : place_count (r, claims, err)) < 0)
    {
      r->placement_failed = true;
      return -1;
    }
  *ret
      = cpu_claim (r->uid, r->name, r->drv[0]->name, r->c->node_name, r->rq->isolated, r->parts, r->n_parts, r->config);
  return 0;
}
