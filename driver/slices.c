/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/devices.h"
#include "driver/jsonattr.h"
#include "driver/names.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"

#define MAX_DEVICES 128
#define MAX_DEVICES_ADVANCED 64
#define MAX_COUNTER_SETS 8

void
nrm_publish_options_init (struct nrm_publish_options *o)
{
  memset (o, 0, sizeof (*o));
  o->api_minor = 36;
}

void
nrm_pool_done (struct nrm_pool *p)
{
  free (p->driver);
  json_decref (p->devices);
  json_decref (p->counter_sets);
  memset (p, 0, sizeof (*p));
}

/* Accelerators (network, display, processing-accelerator, co-processor and
 * InfiniBand classes) make a node the place for workloads that use them: general CPU
 * and memory requests are steered elsewhere first. */
static bool
is_accelerator (const struct nrm_pci_device *d)
{
  unsigned base = d->class_id >> 8;
  return base == 0x02 || base == 0x03 || base == 0x12 || d->class_id == 0x0b40 || d->class_id == 0x0c06;
}

struct pref
{
  size_t index;
  unsigned reserved, accelerators, os_index;
  uint64_t free;
};

static int
cmp_pref (const void *a, const void *b)
{
  const struct pref *x = a, *y = b;
  if (x->reserved != y->reserved)
    return x->reserved < y->reserved ? -1 : 1;
  if (x->accelerators != y->accelerators)
    return x->accelerators < y->accelerators ? -1 : 1;
  if (x->free != y->free)
    return x->free < y->free ? -1 : 1;
  return (x->os_index > y->os_index) - (x->os_index < y->os_index);
}

/* Values the attributes but "skip" hold, as the API server counts them. */
static size_t
attribute_values (json_t *attrs, const char *skip)
{
  static const char *const lists[] = { "ints", "bools", "strings", "versions" };
  const char *key;
  json_t *v;
  size_t n = 0;
  json_object_foreach (attrs, key, v)
  {
    size_t k = 0;
    if (strcmp (key, skip) == 0)
      continue;
    for (; k < 4; k++)
      if (json_is_array (json_object_get (v, lists[k])))
        break;
    n += k < 4 ? json_array_size (json_object_get (v, lists[k])) : 1;
  }
  return n;
}

void
nrm_device_allocatable_mapping (const struct nrm_publish_options *o, json_t *dev, const char *resource,
                                const char *capacity_key, const char *multiplier)
{
  bool v137 = o->api_minor >= 37;
  const char *field = v137 ? "nodeAllocatableResources" : "nodeAllocatableResourceMappings";
  json_t *maps = json_object_get (dev, field);
  if (maps == NULL)
    {
      maps = json_object ();
      json_object_set_new (dev, field, maps);
    }
  const char *by = capacity_key ? (v137 ? "capacityMultiplier" : "allocationMultiplier")
                                : (v137 ? "deviceMultiplier" : "allocationMultiplier");
  json_t *m = json_pack ("{s:s}", by, multiplier ? multiplier : "1");
  if (capacity_key)
    json_object_set_new (m, "capacityKey", json_string (capacity_key));
  json_object_set_new (maps, resource, v137 ? json_pack ("{s:o}", "mapping", m) : m);
}

void
nrm_device_numa_attribute (const struct nrm_topology *t, const struct nrm_publish_options *o, json_t *attrs,
                           const size_t *nodes, size_t n_nodes)
{
  /* Setting a key again keeps its place: a maker may reserve it early. */
  if (!o->list_attributes)
    {
      jattr_int (attrs, NRM_STD_NUMA_ATTR, t->numa[nodes[0]].os_index);
      return;
    }
  size_t used = attribute_values (attrs, NRM_STD_NUMA_ATTR);
  size_t room = used < NRM_MAX_ATTR_VALUES ? NRM_MAX_ATTR_VALUES - used : 0;
  if (room == 0)
    {
      json_object_del (attrs, NRM_STD_NUMA_ATTR);
      return;
    }
  cleanup_free int64_t *near = xcalloc (t->n_numa, sizeof (int64_t));
  size_t n = nrm_topology_near_nodes (t, nodes[0], near, t->n_numa);
  /* An L3 group split over two nodes: its CPUs are local to both. */
  for (size_t k = 1; k < n_nodes; k++)
    {
      bool dup = false;
      for (size_t j = 0; j < n; j++)
        dup |= near[j] == t->numa[nodes[k]].os_index;
      if (!dup && n < t->n_numa)
        near[n++] = t->numa[nodes[k]].os_index;
    }
  jattr_ints (attrs, NRM_STD_NUMA_ATTR, near, n < room ? n : room);
}

size_t *
nrm_numa_preference (const struct nrm_topology *t)
{
  return nrm_numa_preference_by_room (t, NULL, NULL);
}

int
nrm_numa_device_index (const struct nrm_topology *t, const char *name, bool *isolated)
{
  unsigned os;
  enum nrm_numa_name_kind kind;
  if (!nrm_numa_name_parse (name, &os, &kind) || kind == NRM_NUMA_NAME_HUGEPAGES)
    return -1;
  bool iso = kind == NRM_NUMA_NAME_ISOLATED;
  if (iso && isolated == NULL)
    return -1;
  if (isolated)
    *isolated = iso;
  return nrm_topology_numa_index (t, os);
}

void
nrm_numa_room (const struct nrm_topology *t, hwloc_const_bitmap_t free_set, uint64_t *free_cpus, uint64_t *free_cell)
{
  size_t ng = t->n_l3 + 1; /* slot 0: CPUs without an L3 */
  cleanup_free uint64_t *cells = xcalloc (t->n_numa * ng + 1, sizeof (uint64_t));
  memset (free_cpus, 0, t->n_numa * sizeof (uint64_t));
  memset (free_cell, 0, t->n_numa * sizeof (uint64_t));
  for (size_t i = 0; i < t->n_numa; i++)
    {
      cleanup_bitmap hwloc_bitmap_t a = nrm_topology_node_allocatable (t, i);
      int cpu;
      hwloc_bitmap_and (a, a, free_set);
      hwloc_bitmap_foreach_begin (cpu, a)
      {
        int pi = nrm_topology_pu_index (t, (unsigned) cpu);
        int l3 = pi >= 0 ? t->pus[pi].l3 : -1;
        size_t g = i * ng + (l3 >= 0 && (size_t) l3 < t->n_l3 ? (size_t) l3 + 1 : 0);
        free_cpus[i]++;
        /* Without L3 groups the node is one cell. */
        if (++cells[t->n_l3 ? g : i * ng] > free_cell[i])
          free_cell[i] = cells[t->n_l3 ? g : i * ng];
      }
      hwloc_bitmap_foreach_end ();
    }
}

size_t *
nrm_numa_preference_by_room (const struct nrm_topology *t, const uint64_t *free_cpus, const uint64_t *free_cell)
{
  cleanup_free struct pref *p = xcalloc (t->n_numa, sizeof (*p));
  size_t *order = xcalloc (t->n_numa, sizeof (size_t));
  for (size_t i = 0; i < t->n_numa; i++)
    {
      p[i].index = i;
      p[i].os_index = t->numa[i].os_index;
      p[i].reserved = hwloc_bitmap_intersects (t->numa[i].cpus, t->reserved) ? 1 : 0;
      p[i].free = free_cpus ? free_cpus[i] : 0;
      for (size_t d = 0; d < t->n_pci; d++)
        if (t->pci[d].numa == (int) i && is_accelerator (&t->pci[d]))
          p[i].accelerators++;
    }
  qsort (p, t->n_numa, sizeof (*p), cmp_pref);
  /* The scheduler takes the first node with room for the claim. A node
   * whose free CPUs lie in several L3 groups may come before another only
   * if that one has no larger free group: else a claim the other holds in
   * one group would land where no group holds it. Among the nodes that may
   * come next, the first in the order above (classes, then the fullest). */
  for (size_t k = 0; free_cpus && free_cell && k + 1 < t->n_numa; k++)
    {
      uint64_t most = 0;
      for (size_t j = k; j < t->n_numa; j++)
        if (free_cell[p[j].index] > most)
          most = free_cell[p[j].index];
      size_t j = k;
      while (free_cell[p[j].index] < most && free_cell[p[j].index] < free_cpus[p[j].index])
        j++;
      struct pref x = p[j];
      memmove (&p[k + 1], &p[k], (j - k) * sizeof (*p));
      p[k] = x;
    }
  for (size_t i = 0; i < t->n_numa; i++)
    order[i] = p[i].index;
  return order;
}

/* Taints, counter consumption and list-typed attributes lower the slice
 * limit to 64 devices. */
bool
nrm_device_is_advanced (json_t *dev)
{
  const char *key;
  json_t *v;
  if (json_array_size (json_object_get (dev, "taints")) || json_array_size (json_object_get (dev, "consumesCounters")))
    return true;
  json_object_foreach (json_object_get (dev, "attributes"), key, v)
  {
    if (json_object_get (v, "ints") || json_object_get (v, "bools") || json_object_get (v, "strings")
        || json_object_get (v, "versions"))
      return true;
  }
  return false;
}

static json_t *
new_slice (const struct nrm_pool *p, const struct nrm_publish_options *o)
{
  return json_pack ("{s:s, s:s, s:{}, s:{s:s, s:{s:s, s:i, s:i}, s:s}}", "apiVersion", "resource.k8s.io/v1", "kind",
                    "ResourceSlice", "metadata", "spec", "driver", p->driver, "pool", "name", o->node_name,
                    "generation", 1, "resourceSliceCount", 0, "nodeName", o->node_name);
}

int
nrm_slices_build (const struct nrm_pool *pools, size_t n_pools, const struct nrm_publish_options *o, json_t **ret,
                  nrm_error_t *err)
{
  cleanup_json json_t *items = json_array ();

  for (size_t pi = 0; pi < n_pools; pi++)
    {
      const struct nrm_pool *p = &pools[pi];
      cleanup_json json_t *slices = json_array ();
      json_t *cur = NULL, *devs = NULL;
      bool adv = false;
      size_t i;
      json_t *dev;

      /* Devices in preference order: a new slice when the next device would
       * break the limit of the current one. */
      json_array_foreach (p->devices, i, dev)
      {
        bool a = nrm_device_is_advanced (dev);
        size_t limit = (adv || a) ? MAX_DEVICES_ADVANCED : MAX_DEVICES;
        if (cur == NULL || json_array_size (devs) + 1 > limit)
          {
            cur = new_slice (p, o);
            devs = json_array ();
            json_object_set_new (json_object_get (cur, "spec"), "devices", devs);
            json_array_append_new (slices, cur);
            adv = false;
          }
        adv |= a;
        json_array_append (devs, dev);
      }
      /* Counter sets go in slices of their own (1.36: devices or counters). */
      json_array_foreach (p->counter_sets, i, dev)
      {
        if (i % MAX_COUNTER_SETS == 0)
          {
            cur = new_slice (p, o);
            devs = json_array ();
            json_object_set_new (json_object_get (cur, "spec"), "sharedCounters", devs);
            json_array_append_new (slices, cur);
          }
        json_array_append (devs, dev);
      }
      /* An empty pool is still published, as one slice without devices. */
      if (json_array_size (slices) == 0)
        json_array_append_new (slices, new_slice (p, o));

      json_array_foreach (slices, i, cur)
      {
        char name[300];
        /* The index prefix keeps the preference order in lexicographic slice
         * order; a long node name is cut to keep within 253 characters. */
        snprintf (name, sizeof (name), "%05zx-%s-%s", i, p->driver, o->node_name);
        size_t len = strlen (name);
        if (len > 253)
          len = 253;
        while (len > 0 && (name[len - 1] == '-' || name[len - 1] == '.'))
          len--;
        name[len] = '\0';
        json_object_set_new (json_object_get (cur, "metadata"), "name", json_string (name));
        json_object_set_new (json_object_get (json_object_get (cur, "spec"), "pool"), "resourceSliceCount",
                             json_integer ((json_int_t) json_array_size (slices)));
        json_array_append (items, cur);
      }
    }
  *ret = json_pack ("{s:s, s:s, s:O}", "apiVersion", "v1", "kind", "List", "items", items);
  return 0;
}

void
nrm_pool_taint (struct nrm_pool *p, json_t *taints)
{
  size_t i;
  json_t *dev;
  json_array_foreach (p->devices, i, dev)
  {
    json_t *tn = json_object_get (taints, json_string_value (json_object_get (dev, "name")));
    if (json_array_size (tn) > 0)
      json_object_set_new (dev, "taints", json_deep_copy (tn));
  }
}
