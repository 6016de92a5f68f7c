/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/devices.h"
#include "driver/memory/memory.h"
#include "driver/memory/ondemand.h"
#include "driver/names.h"
#include "driver/jsonattr.h"
#include "nrm/base/quantity.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"

static json_t *
qbytes (uint64_t v)
{
  char buf[32];
  return json_string (nrm_quantity_format (v, 1, buf, sizeof (buf)));
}

/* Consumable in steps of "step" bytes; NULL when less than one step fits. */
static json_t *
consumable (uint64_t value, uint64_t step)
{
  if (value < step)
    return NULL;
  if (value < 2 * step)
    /* min + step must fit in the capacity: a single valid value instead. */
    return json_pack ("{s:o, s:{s:o, s:[o]}}", "value", qbytes (value), "requestPolicy", "default", qbytes (step),
                      "validValues", qbytes (step));
  return json_pack ("{s:o, s:{s:o, s:{s:o, s:o}}}", "value", qbytes (value), "requestPolicy", "default", qbytes (step),
                    "validRange", "min", qbytes (step), "step", qbytes (step));
}

/* The attributes of a memory device; resource.kubernetes.io/numaNode is
 * filled in after the others (nrm_device_numa_attribute). With pageSize and hugeTLB a memory device holds
 * 7 scalars, which leave the KEP-6072 list 41 values. */
static void
memory_attributes (const struct nrm_topology *t, size_t i, json_t *attrs)
{
  const struct nrm_numa_node *n = &t->numa[i];
  jattr_int (attrs, "numaNode", n->os_index);
  /* Its place in the map; the value comes last. */
  jattr_int (attrs, NRM_STD_NUMA_ATTR, n->os_index);
  if (n->package >= 0)
    jattr_int (attrs, "socket", t->packages[n->package].os_index);
  jattr_str (attrs, "memoryKind", n->kind);
  jattr_int (attrs, "memoryTier", n->tier);
  jattr_bool (attrs, "hasCPUs", !hwloc_bitmap_iszero (n->cpus));
}

static int
cmp_memory_order (const void *a, const void *b, void *arg)
{
  const struct nrm_topology *t = arg;
  const size_t *x = a, *y = b;
  const struct nrm_numa_node *nx = &t->numa[x[0]], *ny = &t->numa[y[0]];
  bool cx = hwloc_bitmap_iszero (nx->cpus), cy = hwloc_bitmap_iszero (ny->cpus);
  bool dx = strcmp (nx->kind, "DRAM") == 0, dy = strcmp (ny->kind, "DRAM") == 0;
  /* Ordinary DRAM first: scarce HBM and slow NVM only when asked for. */
  if (dx != dy)
    return dx ? -1 : 1;
  if (nx->tier != ny->tier)
    return nx->tier - ny->tier;
  if (cx != cy)
    return cx - cy;
  return (x[1] > y[1]) - (x[1] < y[1]);
}

/* The node's memory outside its huge page pools, less its reservation:
 * with pools raised on demand, what they hold now (the topology's counts
 * are those of the start). */
static uint64_t
allocatable (const struct nrm_topology *t, const struct nrm_ondemand *od, size_t i)
{
  const struct nrm_numa_node *n = &t->numa[i];
  uint64_t huge = 0, baseline, target, room;
  if (od == NULL)
    return nrm_topology_node_allocatable_memory (t, i);
  for (size_t k = 0; k < n->n_hugepages; k++)
    huge += (nrm_ondemand_slot (od, i, k, &baseline, &target, &room) ? target : n->hugepages[k].count)
            * n->hugepages[k].size;
  if (!n->allowed || huge + n->reserved_memory >= n->memory)
    return 0;
  return n->memory - huge - n->reserved_memory;
}

int
nrm_memory_pool (const struct nrm_topology *t, const struct nrm_publish_options *o, uint64_t granularity,
                 const char *driver, const struct nrm_ondemand *od, struct nrm_pool *ret, nrm_error_t *err)
{
  return nrm_memory_pool_online (t, o, granularity, driver, od, NULL, ret, err);
}

int
nrm_memory_pool_online (const struct nrm_topology *t, const struct nrm_publish_options *o, uint64_t granularity,
                        const char *driver, const struct nrm_ondemand *od, const int64_t *change, struct nrm_pool *ret,
                        nrm_error_t *err)
{
  cleanup_free size_t *pref = nrm_numa_preference (t);
  cleanup_free size_t *order = xcalloc (2 * (t->n_numa ? t->n_numa : 1), sizeof (size_t));
  struct nrm_pool p = { .driver = xstrdup (driver), .devices = json_array (), .counter_sets = json_array () };

  /* DRAM first, then the faster tiers, nodes with CPUs before CPU-less
   * ones, then the general node preference. */
  for (size_t k = 0; k < t->n_numa; k++)
    {
      order[2 * k] = pref[k];
      order[2 * k + 1] = k;
    }
  qsort_r (order, t->n_numa, 2 * sizeof (size_t), cmp_memory_order, (void *) t);

  for (size_t k = 0; k < t->n_numa; k++)
    {
      size_t i = order[2 * k];
      const struct nrm_numa_node *n = &t->numa[i];
      uint64_t avail = allocatable (t, od, i);
      /* Memory offlined or added since the start (driver/memory/health.c). */
      if (change && change[i] < 0)
        avail = (uint64_t) -change[i] < avail ? avail - (uint64_t) -change[i] : 0;
      else if (change)
        avail += (uint64_t) change[i];
      json_t *cap = consumable (avail - avail % granularity, granularity);
      char name[32];
      if (cap == NULL)
        continue;
      json_t *attrs = json_object ();
      memory_attributes (t, i, attrs);
      if (n->base_page)
        {
          cleanup_free char *ps = nrm_pagesize_name (n->base_page);
          jattr_str (attrs, "pageSize", ps);
        }
      jattr_bool (attrs, "hugeTLB", false);
      nrm_device_numa_attribute (t, o, attrs, &i, 1);
      nrm_numa_name (name, sizeof (name), n->os_index, NRM_NUMA_NAME_NODE, NULL);
      json_t *dev = json_pack ("{s:s, s:o, s:{s:o}, s:b}", "name", name, "attributes", attrs, "capacity", "memory", cap,
                               "allowMultipleAllocations", 1);
      if (o->node_allocatable)
        nrm_device_allocatable_mapping (o, dev, "memory", "memory", NULL);
      json_array_append_new (p.devices, dev);
    }

  for (size_t k = 0; k < t->n_numa; k++)
    {
      size_t i = order[2 * k];
      const struct nrm_numa_node *n = &t->numa[i];
      if (!n->allowed)
        continue;
      for (size_t h = 0; h < n->n_hugepages; h++)
        {
          uint64_t size = n->hugepages[h].size, total = n->hugepages[h].count * size, baseline, target, room = 0;
          /* On demand: the baseline and the room, whatever is raised now. */
          if (nrm_ondemand_slot (od, i, h, &baseline, &target, &room))
            {
              /* Never more than the node's memory can hold beside its
               * other pools and its reservation: the scheduler would place
               * claims that bind() can only refuse. */
              uint64_t other = n->reserved_memory, fit;
              for (size_t h2 = 0; h2 < n->n_hugepages; h2++)
                if (h2 != h)
                  other += n->hugepages[h2].count * n->hugepages[h2].size;
              fit = n->memory > other ? (n->memory - other) / size : 0;
              if (n->memory > 0 && baseline + room > fit)
                room = fit > baseline ? fit - baseline : 0;
              total = (baseline + room) * size;
            }
          json_t *cap = total > n->reserved_hugepages[h] ? consumable (total - n->reserved_hugepages[h], size) : NULL;
          cleanup_free char *ps = nrm_pagesize_name (size);
          char name[NRM_NUMA_NAME_MAX], resource[48];
          if (cap == NULL)
            continue;
          nrm_numa_name (name, sizeof (name), n->os_index, NRM_NUMA_NAME_HUGEPAGES, ps);
          snprintf (resource, sizeof (resource), "hugepages-%s", ps);
          json_t *attrs = json_object ();
          memory_attributes (t, i, attrs);
          jattr_str (attrs, "pageSize", ps);
          jattr_bool (attrs, "hugeTLB", true);
          nrm_device_numa_attribute (t, o, attrs, &i, 1);
          json_t *dev = json_pack ("{s:s, s:o, s:{s:o}, s:b}", "name", name, "attributes", attrs, "capacity",
                                   "hugepages", cap, "allowMultipleAllocations", 1);
          if (o->node_allocatable)
            nrm_device_allocatable_mapping (o, dev, resource, "hugepages", NULL);
          if (room > 0)
            {
              /* The pod binds once the pool holds its pages (bind()). */
              json_object_set_new (dev, "bindsToNode", json_true ());
              json_object_set_new (dev, "bindingConditions", json_pack ("[s]", nrm_ondemand_condition (od, false)));
              json_object_set_new (dev, "bindingFailureConditions",
                                   json_pack ("[s]", nrm_ondemand_condition (od, true)));
            }
          json_array_append_new (p.devices, dev);
        }
    }
  *ret = p;
  return 0;
}
