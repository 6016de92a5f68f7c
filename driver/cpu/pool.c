/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/cpu/cpu.h"
#include "driver/devices.h"
#include "driver/jsonattr.h"
#include "driver/names.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"

/* A device carries at most 48 attribute values. The other attributes of a
 * CPU device take at most 14 scalars (numaNode, socket, l3CacheCount,
 * cpuKind, performanceCPUs, efficiencyCPUs, smt, threadsPerCore, fullCores,
 * isolatedCPUs, granularity, isolated, and coreID with l3CacheID on a core
 * device), 16 L3 ids and 8 PCIe roots: 38, which leaves the KEP-6072 list of
 * resource.kubernetes.io/numaNode at least 10 values. A longer list is cut
 * to what is left (nrm_device_numa_attribute), never the slice refused. */
#define MAX_LIST 16
#define MAX_ROOTS 8

struct cpu_stats
{
  size_t cpus, full_cores, threads, isolated, reserved;
  size_t perf, eff;
  size_t n_l3, n_l3_ids;
  int64_t l3[MAX_LIST];
  int package;
};

/* Summarises the CPUs "set" (a subset of the node's allocatable CPUs). */
static void
cpu_stats (const struct nrm_topology *t, hwloc_const_bitmap_t set, hwloc_const_bitmap_t node_cpus, struct cpu_stats *st)
{
  memset (st, 0, sizeof (*st));
  st->package = -1;
  st->cpus = (size_t) hwloc_bitmap_weight (set);
  for (size_t c = 0; c < t->n_cores; c++)
    {
      const struct nrm_core *core = &t->cores[c];
      if (!hwloc_bitmap_intersects (core->cpus, set))
        continue;
      size_t w = (size_t) hwloc_bitmap_weight (core->cpus);
      if (w > st->threads)
        st->threads = w;
      if (hwloc_bitmap_isincluded (core->cpus, set))
        st->full_cores++;
    }
  for (size_t l = 0; l < t->n_l3; l++)
    if (hwloc_bitmap_intersects (t->l3[l].cpus, set))
      {
        if (st->n_l3_ids < MAX_LIST)
          st->l3[st->n_l3_ids++] = t->l3[l].os_index;
        st->n_l3++;
      }
  int cpu;
  hwloc_bitmap_foreach_begin (cpu, set)
  {
    int pi = nrm_topology_pu_index (t, (unsigned) cpu);
    if (pi < 0)
      continue;
    const struct nrm_pu *pu = &t->pus[pi];
    if (pu->isolated)
      st->isolated++;
    if (st->package < 0 && pu->package >= 0)
      st->package = (int) t->packages[pu->package].os_index;
    if (pu->kind >= 0 && strcmp (t->kinds[pu->kind].name, "efficiency") == 0)
      st->eff++;
    else
      st->perf++;
  }
  hwloc_bitmap_foreach_end ();
  if (node_cpus != NULL)
    {
      hwloc_bitmap_foreach_begin (cpu, node_cpus)
      {
        if (hwloc_bitmap_isset (t->reserved, (unsigned) cpu))
          st->reserved++;
      }
      hwloc_bitmap_foreach_end ();
    }
}

static bool
hybrid (const struct nrm_topology *t)
{
  return t->n_kinds > 1;
}

/* Attributes every CPU device carries; resource.kubernetes.io/numaNode is
 * filled in by the device's maker after the others
 * (nrm_device_numa_attribute). nodes[] are the NUMA positions the device's
 * CPUs belong to (one, or two for an L3 group split by nodes). */
static void
cpu_attributes (const struct nrm_topology *t, const struct nrm_publish_options *o, json_t *attrs, const size_t *nodes,
                size_t n_nodes, const struct cpu_stats *st)
{
  jattr_int (attrs, "numaNode", t->numa[nodes[0]].os_index);
  /* Its place in the map; the value comes last. */
  jattr_int (attrs, NRM_STD_NUMA_ATTR, t->numa[nodes[0]].os_index);
  if (st->package >= 0)
    jattr_int (attrs, "socket", st->package);
  jattr_int (attrs, "l3CacheCount", (int64_t) st->n_l3);
  if (o->list_attributes && st->n_l3 > 0)
    jattr_ints (attrs, "l3CacheIDs", st->l3, st->n_l3_ids);
  if (!hybrid (t))
    jattr_str (attrs, "cpuKind", "performance");
  else
    {
      jattr_str (attrs, "cpuKind", st->eff == 0 ? "performance" : st->perf == 0 ? "efficiency" : "mixed");
      jattr_int (attrs, "performanceCPUs", (int64_t) st->perf);
      jattr_int (attrs, "efficiencyCPUs", (int64_t) st->eff);
    }
  jattr_bool (attrs, "smt", st->threads > 1);
  jattr_int (attrs, "threadsPerCore", (int64_t) st->threads);
  jattr_int (attrs, "fullCores", (int64_t) st->full_cores);
  jattr_int (attrs, "isolatedCPUs", (int64_t) st->isolated);
  if (o->list_attributes)
    {
      /* PCIe roots local to the node, so CPUs can match a GPU or NIC by root. */
      const char *roots[MAX_ROOTS];
      size_t n_roots = 0;
      for (size_t p = 0; p < t->n_pci && n_roots < MAX_ROOTS; p++)
        {
          const struct nrm_pci_device *d = &t->pci[p];
          bool local = false, dup = false;
          for (size_t k = 0; k < n_nodes; k++)
            local |= d->numa == (int) nodes[k];
          if (!local || d->pcie_root[0] == '\0')
            continue;
          for (size_t j = 0; j < n_roots; j++)
            dup |= strcmp (roots[j], d->pcie_root) == 0;
          if (!dup)
            roots[n_roots++] = d->pcie_root;
        }
      if (n_roots > 0)
        jattr_strs (attrs, NRM_STD_PCIE_ROOT_ATTR, roots, n_roots);
    }
}

static json_t *
cpu_count (size_t n)
{
  char buf[32];
  snprintf (buf, sizeof (buf), "%zu", n);
  return json_string (buf);
}

/* A consumable device over a set of CPUs, consumed by CPU count. */
static void
consumable_device (const struct nrm_topology *t, const struct nrm_publish_options *o, size_t i,
                   hwloc_const_bitmap_t set, const char *name, bool isolated, json_t *devices)
{
  struct cpu_stats st;
  cpu_stats (t, set, t->numa[i].cpus, &st);
  json_t *attrs = json_object ();
  cpu_attributes (t, o, attrs, &i, 1, &st);
  jattr_int (attrs, "reservedCPUs", (int64_t) st.reserved);
  jattr_bool (attrs, "isolated", isolated);
  nrm_device_numa_attribute (t, o, attrs, &i, 1);

  json_t *policy;
  if (st.cpus >= 2)
    policy = json_pack ("{s:s, s:{s:s, s:s}}", "default", "1", "validRange", "min", "1", "step", "1");
  else
    policy = json_pack ("{s:s, s:[s]}", "default", "1", "validValues", "1");
  json_t *dev = json_pack ("{s:s, s:o, s:{s:{s:o, s:o}}, s:b}", "name", name, "attributes", attrs, "capacity", "cpus",
                           "value", cpu_count (st.cpus), "requestPolicy", policy, "allowMultipleAllocations", 1);
  if (o->node_allocatable)
    nrm_device_allocatable_mapping (o, dev, "cpu", "cpus", NULL);
  json_array_append_new (devices, dev);
}

/* A consumable device over a node's allocatable CPUs, consumed by CPU
 * count: "numa<N>" (NRM_CPU_MODE_NUMA) without its isolated CPUs, or
 * "numa<N>-isolated" with only those. Isolated CPUs are a class of their
 * own beside the node's other devices, so that a claim gets isolated CPUs
 * only when it asks for that device, and the scheduler never counts them
 * as ordinary CPUs. */
static void
node_device (const struct nrm_topology *t, const struct nrm_publish_options *o, size_t i, bool isolated,
             json_t *devices)
{
  cleanup_bitmap hwloc_bitmap_t set = nrm_topology_node_allocatable (t, i);
  char name[48];
  if (isolated)
    hwloc_bitmap_and (set, set, t->isolated);
  else
    hwloc_bitmap_andnot (set, set, t->isolated);
  if (hwloc_bitmap_iszero (set))
    return;
  nrm_numa_name (name, sizeof (name), t->numa[i].os_index, isolated ? NRM_NUMA_NAME_ISOLATED : NRM_NUMA_NAME_NODE,
                 NULL);
  consumable_device (t, o, i, set, name, isolated, devices);
}

/* NRM_CPU_MODE_PARTITIONED. Every node gets a counter set "numa<N>" with one
 * counter per cell (the node's CPUs in one L3 group), so a whole-node, a
 * whole-L3 and a whole-core device can never hold the same CPUs twice. */
struct cell
{
  int l3;      /* position in t->l3, or -1 */
  size_t cpus; /* allocatable CPUs in the cell */
};

static void
cell_name (const struct nrm_topology *t, int l3, bool merged, char *buf, size_t len)
{
  if (merged || l3 < 0)
    snprintf (buf, len, "cpus");
  else
    snprintf (buf, len, "l3-%u", t->l3[l3].os_index);
}

static int
node_cells (const struct nrm_topology *t, hwloc_const_bitmap_t alloc, struct cell *cells, size_t *n_cells, size_t max)
{
  size_t n = 0;
  int cpu;
  hwloc_bitmap_foreach_begin (cpu, alloc)
  {
    int pi = nrm_topology_pu_index (t, (unsigned) cpu);
    int l3 = pi >= 0 ? t->pus[pi].l3 : -1;
    size_t k;
    for (k = 0; k < n; k++)
      if (cells[k].l3 == l3)
        break;
    if (k == n)
      {
        if (n == max)
          return -1;
        cells[n].l3 = l3;
        cells[n].cpus = 0;
        n++;
      }
    cells[k].cpus++;
  }
  hwloc_bitmap_foreach_end ();
  *n_cells = n;
  return 0;
}

static json_t *
partitioned_device (const struct nrm_topology *t, const size_t *nodes, size_t n_nodes, const char *name,
                    const char *granularity, json_t *attrs, size_t cpus, json_t *consumes,
                    const struct nrm_publish_options *o)
{
  jattr_str (attrs, "granularity", granularity);
  jattr_bool (attrs, "isolated", false);
  nrm_device_numa_attribute (t, o, attrs, nodes, n_nodes);
  json_t *dev = json_pack ("{s:s, s:o, s:{s:{s:o}}, s:o}", "name", name, "attributes", attrs, "capacity", "cpus",
                           "value", cpu_count (cpus), "consumesCounters", consumes);
  if (o->node_allocatable)
    {
      json_t *count = cpu_count (cpus);
      nrm_device_allocatable_mapping (o, dev, "cpu", NULL, json_string_value (count));
      json_decref (count);
    }
  return dev;
}

static json_t *
consumption (const char *set, const char *counter, size_t value)
{
  return json_pack ("{s:s, s:{s:{s:o}}}", "counterSet", set, "counters", counter, "value", cpu_count (value));
}

static void
partitioned_devices (const struct nrm_topology *t, const struct nrm_publish_options *o, const size_t *order,
                     json_t *devices, json_t *sets)
{
  const size_t max_cells = 32; /* counters per counter set */
  struct cell cells[32];
  bool *merged = xcalloc (t->n_numa, sizeof (bool));
  hwloc_bitmap_t *allocs = xcalloc (t->n_numa, sizeof (hwloc_bitmap_t));
  /* Devices go smallest first (cores, L3 groups, whole nodes), so that the
   * scheduler's first fit is a best fit, and a request for a core, the
   * commonest, stops at the first free one instead of evaluating its
   * selectors on every larger device of each node it filters. */
  cleanup_json json_t *l3s = json_array ();
  cleanup_json json_t *whole = json_array ();

  for (size_t i = 0; i < t->n_numa; i++)
    {
      allocs[i] = nrm_topology_node_allocatable (t, i);
      /* Isolated CPUs are published on their own devices. */
      hwloc_bitmap_andnot (allocs[i], allocs[i], t->isolated);
    }

  /* Counter sets and whole-node devices. */
  for (size_t oi = 0; oi < t->n_numa; oi++)
    {
      size_t i = order[oi], n_cells = 0;
      char setname[32], cname[32], name[32];
      struct cpu_stats st;
      if (hwloc_bitmap_iszero (allocs[i]))
        continue;
      /* More cells than counters: one counter for the node, no L3 devices. */
      if (node_cells (t, allocs[i], cells, &n_cells, max_cells) < 0)
        merged[i] = true;
      nrm_numa_name (setname, sizeof (setname), t->numa[i].os_index, NRM_NUMA_NAME_NODE, NULL);
      json_t *counters = json_object ();
      json_t *use = json_object ();
      if (merged[i])
        {
          size_t total = (size_t) hwloc_bitmap_weight (allocs[i]);
          json_object_set_new (counters, "cpus", json_pack ("{s:o}", "value", cpu_count (total)));
          json_object_set_new (use, "cpus", json_pack ("{s:o}", "value", cpu_count (total)));
        }
      else
        for (size_t k = 0; k < n_cells; k++)
          {
            cell_name (t, cells[k].l3, false, cname, sizeof (cname));
            json_object_set_new (counters, cname, json_pack ("{s:o}", "value", cpu_count (cells[k].cpus)));
            json_object_set_new (use, cname, json_pack ("{s:o}", "value", cpu_count (cells[k].cpus)));
          }
      json_array_append_new (sets, json_pack ("{s:s, s:o}", "name", setname, "counters", counters));

      cpu_stats (t, allocs[i], t->numa[i].cpus, &st);
      json_t *attrs = json_object ();
      cpu_attributes (t, o, attrs, &i, 1, &st);
      jattr_int (attrs, "reservedCPUs", (int64_t) st.reserved);
      nrm_numa_name (name, sizeof (name), t->numa[i].os_index, NRM_NUMA_NAME_NODE, NULL);
      json_array_append_new (
          whole, partitioned_device (t, &i, 1, name, "numa", attrs, st.cpus,
                                     json_pack ("[{s:s, s:o}]", "counterSet", setname, "counters", use), o));
    }

  /* Whole L3 groups, in the order of their first node; an L3 group split
   * over more than two nodes cannot be expressed (two consumptions at most). */
  for (size_t oi = 0; oi < t->n_numa; oi++)
    {
      size_t i = order[oi];
      for (size_t l = 0; l < t->n_l3; l++)
        {
          size_t nodes[2], n_nodes = 0;
          bool skip = false;
          cleanup_bitmap hwloc_bitmap_t set = xbitmap_alloc ();
          for (size_t oj = 0; oj < t->n_numa; oj++)
            {
              size_t j = order[oj];
              if (!hwloc_bitmap_intersects (t->l3[l].cpus, allocs[j]))
                continue;
              if (n_nodes == 2 || merged[j])
                skip = true;
              else
                nodes[n_nodes++] = j;
            }
          /* Emit once, with the node that comes first in preference order. */
          if (skip || n_nodes == 0 || nodes[0] != i)
            continue;
          json_t *consumes = json_array ();
          for (size_t k = 0; k < n_nodes; k++)
            {
              cleanup_bitmap hwloc_bitmap_t part = xbitmap_dup (t->l3[l].cpus);
              char setname[32], cname[32];
              hwloc_bitmap_and (part, part, allocs[nodes[k]]);
              hwloc_bitmap_or (set, set, part);
              nrm_numa_name (setname, sizeof (setname), t->numa[nodes[k]].os_index, NRM_NUMA_NAME_NODE, NULL);
              cell_name (t, (int) l, false, cname, sizeof (cname));
              json_array_append_new (consumes, consumption (setname, cname, (size_t) hwloc_bitmap_weight (part)));
            }
          struct cpu_stats st;
          char name[32];
          cpu_stats (t, set, NULL, &st);
          json_t *attrs = json_object ();
          cpu_attributes (t, o, attrs, nodes, n_nodes, &st);
          jattr_int (attrs, "l3CacheID", t->l3[l].os_index);
          snprintf (name, sizeof (name), "l3-%u", t->l3[l].os_index);
          json_array_append_new (l3s, partitioned_device (t, nodes, n_nodes, name, "l3", attrs, st.cpus, consumes, o));
        }
    }

  /* Whole cores whose every thread is allocatable. */
  for (size_t oi = 0; oi < t->n_numa; oi++)
    {
      size_t i = order[oi];
      for (size_t c = 0; c < t->n_cores; c++)
        {
          const struct nrm_core *core = &t->cores[c];
          char setname[32], cname[32], name[32];
          struct cpu_stats st;
          if (core->numa != (int) i || hwloc_bitmap_iszero (core->cpus)
              || !hwloc_bitmap_isincluded (core->cpus, allocs[i]))
            continue;
          cpu_stats (t, core->cpus, NULL, &st);
          json_t *attrs = json_object ();
          cpu_attributes (t, o, attrs, &i, 1, &st);
          jattr_int (attrs, "coreID", hwloc_bitmap_first (core->cpus));
          if (core->l3 >= 0)
            jattr_int (attrs, "l3CacheID", t->l3[core->l3].os_index);
          nrm_numa_name (setname, sizeof (setname), t->numa[i].os_index, NRM_NUMA_NAME_NODE, NULL);
          cell_name (t, core->l3, merged[i], cname, sizeof (cname));
          snprintf (name, sizeof (name), "core%d", hwloc_bitmap_first (core->cpus));
          json_array_append_new (devices,
                                 partitioned_device (t, &i, 1, name, "core", attrs, st.cpus,
                                                     json_pack ("[o]", consumption (setname, cname, st.cpus)), o));
        }
    }
  json_array_extend (devices, l3s);
  json_array_extend (devices, whole);
  for (size_t i = 0; i < t->n_numa; i++)
    hwloc_bitmap_free (allocs[i]);
  free (allocs);
  free (merged);
}

int
nrm_cpu_pool (const struct nrm_topology *t, const struct nrm_publish_options *o, enum nrm_cpu_mode mode,
              const char *driver, struct nrm_pool *ret, nrm_error_t *err)
{
  cleanup_free size_t *order = nrm_numa_preference (t);
  struct nrm_pool p = { .driver = xstrdup (driver), .devices = json_array (), .counter_sets = json_array () };

  if (mode == NRM_CPU_MODE_NUMA)
    for (size_t k = 0; k < t->n_numa; k++)
      node_device (t, o, order[k], false, p.devices);
  else
    partitioned_devices (t, o, order, p.devices, p.counter_sets);
  for (size_t k = 0; k < t->n_numa; k++)
    node_device (t, o, order[k], true, p.devices);
  *ret = p;
  return 0;
}
