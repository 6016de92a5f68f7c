/* SPDX-License-Identifier: Apache-2.0 */
/* nrm status: what nrm has handed out on this node, from the checkpoints
 * the plugin and nrm run share (read-only: each is replaced atomically). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/placement.h"
#include "driver/cpu/cpu.h"
#include "driver/devices.h"
#include "driver/pci/pci.h"
#include "driver/kubelet/plugin.h"
#include "nrm/base/quantity.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/fs.h"
#include "nrm/reconcile.h"
#include "nrm/settings.h"
#include "nrm/status.h"
#include "cpuset/partition.h"

/* One pool: devices with their capacity and what claims hold of them. */
static nrm_quantity_t
counter_value (json_t *counter)
{
  nrm_quantity_t q = 0;
  nrm_error_t e = NULL;
  if (nrm_quantity_parse (json_string_value (json_object_get (counter, "value")), &q, &e) < 0)
    q = 0;
  nrm_error_release (&e);
  return q;
}

/* "set/counter" -> what held devices leave of it (nano-units; a double is
 * exact enough for counts of CPUs), or NULL for a pool without counters. */
static json_t *
counters_left (json_t *sets, json_t *held)
{
  if (json_array_size (sets) == 0)
    return NULL;
  json_t *left = json_object ();
  size_t i, k;
  json_t *set, *dev, *use;
  const char *name;
  json_t *c;
  json_array_foreach (sets, i, set)
  {
    json_object_foreach (json_object_get (set, "counters"), name, c)
    {
      char key[256];
      snprintf (key, sizeof (key), "%s/%s", json_string_value (json_object_get (set, "name")), name);
      json_object_set_new (left, key, json_real ((double) counter_value (c)));
    }
  }
  json_array_foreach (held, i, dev)
  {
    json_array_foreach (json_object_get (dev, "consumesCounters"), k, use)
    {
      json_object_foreach (json_object_get (use, "counters"), name, c)
      {
        char key[256];
        snprintf (key, sizeof (key), "%s/%s", json_string_value (json_object_get (use, "counterSet")), name);
        json_t *v = json_object_get (left, key);
        if (v)
          json_real_set (v, json_real_value (v) - (double) counter_value (c));
      }
    }
  }
  return left;
}

static bool
fits_counters (json_t *dev, json_t *left)
{
  size_t k;
  json_t *use, *c;
  const char *name;
  json_array_foreach (json_object_get (dev, "consumesCounters"), k, use)
  {
    json_object_foreach (json_object_get (use, "counters"), name, c)
    {
      char key[256];
      snprintf (key, sizeof (key), "%s/%s", json_string_value (json_object_get (use, "counterSet")), name);
      json_t *v = json_object_get (left, key);
      if (v && (double) counter_value (c) > json_real_value (v))
        return false;
    }
  }
  return true;
}

/* Whether a capacity is counted in bytes (binary suffixes) rather than in
 * units: its published value carries a suffix. */
static bool
binary_capacity (json_t *value)
{
  const char *v = json_string_value (value);
  return v && v[strspn (v, "0123456789")] != '\0';
}

/* The function of the machine with this bus id, or NULL; ids ("10de",
 * "2330"; NULL: any) pick among functions that share a bus id (some
 * recorded machines have two). */
static const struct nrm_pci_device *
find_pci (const struct nrm_topology *t, const char *bus_id, const char *vendor, const char *device)
{
  const struct nrm_pci_device *any = NULL;
  for (size_t i = 0; bus_id && i < t->n_pci; i++)
    {
      const struct nrm_pci_device *p = &t->pci[i];
      if (strcmp (p->bus_id, bus_id) != 0)
        continue;
      if ((vendor == NULL || strtoul (vendor, NULL, 16) == p->vendor_id)
          && (device == NULL || strtoul (device, NULL, 16) == p->device_id))
        return p;
      any = any ? any : p;
    }
  return any;
}

/* A PCI function as status shows it: from the device's attributes (any
 * driver that publishes the standard pciBusID), with hwloc's vendor and
 * device names; NULL for a device that is no PCI function. */
static json_t *
pci_view (const struct nrm_topology *t, json_t *attrs)
{
  const char *bus
      = json_string_value (json_object_get (json_object_get (attrs, "resource.kubernetes.io/pciBusID"), "string"));
  if (bus == NULL)
    return NULL;
  json_t *v = json_pack ("{s:s}", "busID", bus);
  static const char *const keys[] = { "class", "vendorID", "deviceID", "driver" };
  for (size_t i = 0; i < sizeof (keys) / sizeof (keys[0]); i++)
    {
      json_t *a = json_object_get (json_object_get (attrs, keys[i]), "string");
      if (json_is_string (a))
        json_object_set (v, keys[i], a);
    }
  json_t *numa = json_object_get (attrs, NRM_STD_NUMA_ATTR);
  if (json_object_get (numa, "int"))
    json_object_set (v, "numaNode", json_object_get (numa, "int"));
  else if (json_object_get (numa, "ints"))
    json_object_set (v, "numaNode", json_object_get (numa, "ints"));
  const struct nrm_pci_device *p = find_pci (t, bus, json_string_value (json_object_get (v, "vendorID")),
                                             json_string_value (json_object_get (v, "deviceID")));
  if (p && p->vendor_name)
    json_object_set_new (v, "vendorName", json_string (p->vendor_name));
  if (p && p->device_name)
    json_object_set_new (v, "deviceName", json_string (p->device_name));
  return v;
}

/* What a PCI driver leaves to others: [{busID, servedBy, and what the
 * machine's model knows of the function}], sorted by bus id. */
static json_t *
left_out_view (const struct nrm_topology *t, json_t *left)
{
  json_t *out = json_array ();
  const char *bus;
  json_t *who;
  json_object_foreach (left, bus, who)
  {
    json_t *e = json_pack ("{s:s, s:O}", "busID", bus, "servedBy", who);
    const struct nrm_pci_device *p = find_pci (t, bus, NULL, NULL);
    if (p)
      {
        const char *class = nrm_pci_class_name ((uint32_t) p->class_id << 8, p->vendor_id);
        if (class)
          json_object_set_new (e, "class", json_string (class));
        if (p->numa >= 0)
          json_object_set_new (e, "numaNode", json_integer (t->numa[p->numa].os_index));
        if (p->vendor_name)
          json_object_set_new (e, "vendorName", json_string (p->vendor_name));
        if (p->device_name)
          json_object_set_new (e, "deviceName", json_string (p->device_name));
      }
    size_t at = json_array_size (out);
    while (at > 0 && strcmp (json_string_value (json_object_get (json_array_get (out, at - 1), "busID")), bus) > 0)
      at--;
    json_array_insert_new (out, at, e);
  }
  return out;
}

/* A device of the CPU driver: its CPUs and those claims hold of it
 * (describe's deviceCPUs). */
static void
cpu_lists (const struct nrm_topology *t, json_t *view, const char *name, json_t *holders, json_t *descs)
{
  cleanup_bitmap hwloc_bitmap_t own = nrm_cpu_device_cpus (t, name);
  cleanup_bitmap hwloc_bitmap_t held = xbitmap_alloc ();
  size_t i;
  json_t *u;
  json_array_foreach (holders, i, u)
  {
    const char *list = json_string_value (
        json_object_get (json_object_get (json_object_get (descs, json_string_value (u)), "deviceCPUs"), name));
    hwloc_bitmap_t set = NULL;
    nrm_error_t e = NULL;
    if (list && nrm_cpulist_parse (list, &set, &e) == 0)
      hwloc_bitmap_or (held, held, set);
    nrm_error_release (&e);
    hwloc_bitmap_free (set);
  }
  cleanup_free char *o = nrm_cpulist_format (own), *h = nrm_cpulist_format (held);
  json_object_set_new (view, "cpus", json_string (o));
  json_object_set_new (view, "heldCPUs", json_string (h));
}

/* descs: uid -> what the driver says the claim holds (describe); cpu: the
 * pool is the CPU driver's. */
static json_t *
pool_status (const struct nrm_topology *t, const struct nrm_pool *p, json_t *claims, json_t *descs, const char *node,
             bool cpu)
{
  json_t *devices = json_array ();
  cleanup_json json_t *held = json_array ();
  size_t total = 0, allocated = 0, unavailable = 0;
  size_t i;
  json_t *dev;
  json_array_foreach (p->devices, i, dev)
  {
    const char *name = json_string_value (json_object_get (dev, "name"));
    const char *key, *first = NULL;
    json_t *cap;
    json_t *capacity = json_object ();
    json_object_foreach (json_object_get (dev, "capacity"), key, cap)
    {
      json_object_set (capacity, key, json_object_get (cap, "value"));
      if (first == NULL)
        first = key;
    }
    /* Claims that hold this device, and how much of its (first) capacity. */
    json_t *holders = json_array ();
    uint64_t used = 0;
    const char *uid;
    json_t *c;
    json_object_foreach (claims, uid, c)
    {
      size_t k;
      json_t *d;
      if (!nrm_checkpoint_completed (c))
        continue;
      json_array_foreach (json_object_get (c, "devices"), k, d)
      {
        if (strcmp (json_string_value (json_object_get (d, "device")) ?: "", name) != 0)
          continue;
        /* A claim may hold a shareable device several times: count it once,
         * with what it holds there. */
        json_array_append_new (holders, json_string (uid));
        json_t *amount = json_object_get (
            json_object_get (json_object_get (json_object_get (descs, uid), "devices"), name), first ? first : "");
        if (json_is_integer (amount) && json_integer_value (amount) > 0)
          used += (uint64_t) json_integer_value (amount);
        break;
      }
    }
    total++;
    allocated += json_array_size (holders) > 0;
    if (json_array_size (holders) > 0)
      json_array_append (held, dev);
    char buf[32];
    json_t *view = json_pack (
        "{s:s, s:o, s:s, s:o}", "name", name, "capacity", capacity, "consumed",
        nrm_quantity_format (used, binary_capacity (json_object_get (capacity, first ? first : "")), buf, sizeof (buf)),
        "claims", holders);
    json_t *pci = pci_view (t, json_object_get (dev, "attributes"));
    if (pci)
      json_object_set_new (view, "pci", pci);
    if (cpu)
      cpu_lists (t, view, name, holders, descs);
    json_array_append_new (devices, view);
  }
  /* Partitionable devices: what held devices consume of the shared
   * counters is gone; a free device that needs more than what is left
   * cannot be allocated. */
  cleanup_json json_t *left = counters_left (p->counter_sets, held);
  json_array_foreach (p->devices, i, dev)
  {
    json_t *st = json_array_get (devices, i);
    bool is_held = json_array_size (json_object_get (st, "claims")) > 0;
    bool fits = is_held || left == NULL || fits_counters (dev, left);
    json_object_set_new (st, "available", json_boolean (!is_held && fits));
    unavailable += !is_held && !fits;
  }
  /* A device a claim holds that the pool does not have now (a PCI
   * function that went away): listed and counted as allocated, never
   * "free". */
  const char *uid;
  json_t *c;
  json_object_foreach (claims, uid, c)
  {
    size_t k;
    json_t *d;
    if (!nrm_checkpoint_completed (c))
      continue;
    json_array_foreach (json_object_get (c, "devices"), k, d)
    {
      const char *name = json_string_value (json_object_get (d, "device"));
      json_t *st = NULL;
      size_t j;
      json_t *v;
      json_array_foreach (devices, j, v)
      {
        if (strcmp (json_string_value (json_object_get (v, "name")), name ? name : "") == 0)
          st = v;
      }
      if (name == NULL)
        continue;
      if (st == NULL)
        {
          st = json_pack ("{s:s, s:{}, s:s, s:[], s:b, s:b}", "name", name, "capacity", "consumed", "-", "claims",
                          "available", 0, "published", 0);
          json_array_append_new (devices, st);
          total++;
          allocated++;
        }
      if (json_is_false (json_object_get (st, "published")))
        {
          json_t *h = json_object_get (st, "claims");
          bool seen = false;
          json_array_foreach (h, j, v) { seen |= strcmp (json_string_value (v), uid) == 0; }
          if (!seen)
            json_array_append_new (h, json_string (uid));
        }
    }
  }
  /* The counts a ResourcePoolStatus (KEP-5677) reports: a device shared by
   * consumable capacity counts as allocated once anything holds it. */
  return json_pack ("{s:s, s:s, s:I, s:I, s:I, s:I, s:o}", "driver", p->driver, "pool", node, "totalDevices",
                    (json_int_t) total, "allocatedDevices", (json_int_t) allocated, "availableDevices",
                    (json_int_t) (total - allocated - unavailable), "unavailableDevices", (json_int_t) unavailable,
                    "devices", devices);
}

/* ", gpu, NUMA node 1, NVIDIA Corporation GH100 [H100 SXM5 80GB]" after a
 * bus id; the bus id first when the view has a device name before it. */
static void
print_pci (FILE *out, json_t *v)
{
  if (json_object_get (v, "servedBy") == NULL)
    fprintf (out, " %s", json_string_value (json_object_get (v, "busID")));
  fprintf (out, ", %s, NUMA node ", json_string_value (json_object_get (v, "class")) ?: "?");
  json_t *numa = json_object_get (v, "numaNode");
  if (json_is_integer (numa))
    fprintf (out, "%" JSON_INTEGER_FORMAT, json_integer_value (numa));
  else if (json_is_array (numa))
    {
      size_t i;
      json_t *n;
      json_array_foreach (numa, i, n)
      {
        fprintf (out, "%s%" JSON_INTEGER_FORMAT, i ? "," : "", json_integer_value (n));
      }
    }
  else
    fputs ("unknown", out);
  const char *vendor = json_string_value (json_object_get (v, "vendorName"));
  const char *device = json_string_value (json_object_get (v, "deviceName"));
  if (vendor || device)
    fprintf (out, ", %s%s%s", vendor ? vendor : "", vendor && device ? " " : "", device ? device : "");
}

static const char *
dash (const char *s)
{
  return s && *s ? s : "-";
}

/* ", held by NS/NAME (UID)" or ", free", and the end of the line. */
static void
print_holders (FILE *out, json_t *holders, json_t *claims)
{
  size_t i;
  json_t *u;
  if (json_array_size (holders) == 0)
    fputs (", free", out);
  json_array_foreach (holders, i, u)
  {
    json_t *cl = json_object_get (claims, json_string_value (u));
    fprintf (out, "%s %s/%s (%s)", i ? "," : ", held by", json_string_value (json_object_get (cl, "namespace")) ?: "?",
             json_string_value (json_object_get (cl, "name")) ?: "?", json_string_value (u));
  }
  fputc ('\n', out);
}

/* The settings a node may have of its own, as they are now, and where each
 * came from (top level, nodes[i], a flag, the kubelet). */
static json_t *
settings_view (const struct nrm_config *c, const struct nrm_topology *t, const struct nrm_drivers *d)
{
  static const struct
  {
    const char *key, *rec;
  } keys[] = {
    { "reservedCPUs", "reservedCPUs" },
    { "isolatedCPUs", "isolatedCPUs" },
    { "reservedMemory", "reservedMemory" },
    { "cpu.mode", "cpuMode" },
    { "cpu.options", "cpuOptions" },
    { "cpu.minSharedCPUs", NULL },
    { "cpu.partition", NULL },
    { "cpu.sharedPoolCgroups", NULL },
    { "memory.granularity", "memoryGranularity" },
    { "pci", NULL },
  };
  cleanup_json json_t *rec = nrm_settings_record (c, t, d);
  json_t *values = json_object ();
  for (size_t i = 0; i < sizeof (keys) / sizeof (keys[0]); i++)
    {
      cleanup_free char *v = NULL;
      if (keys[i].rec)
        v = xstrdup (json_string_value (json_object_get (rec, keys[i].rec)));
      else if (strcmp (keys[i].key, "pci") == 0)
        {
          json_t *pci = json_object_get (c->driver_settings, "pci");
          v = pci ? json_dumps (pci, JSON_COMPACT | JSON_SORT_KEYS) : xstrdup ("");
        }
      else if (strcmp (keys[i].key, "cpu.partition") == 0)
        v = xstrdup (nrm_partition_mode_name ((enum nrm_partition_mode) c->cpu.partition));
      else if (strcmp (keys[i].key, "cpu.sharedPoolCgroups") == 0)
        {
          v = xstrdup ("");
          size_t k;
          json_t *x;
          json_array_foreach (c->shared_pool_cgroups, k, x)
          {
            char *w = xasprintf ("%s%s%s", v, k ? "," : "", json_string_value (x));
            free (v);
            v = w;
          }
        }
      else
        v = xasprintf ("%ld", c->cpu.min_shared_cpus);
      json_object_set_new (values, keys[i].key,
                           json_pack ("{s:s, s:s}", "value", v, "from", nrm_config_source (c, keys[i].key)));
    }
  json_t *entry = c->node_entry >= 0 ? json_sprintf ("nodes[%ld]", c->node_entry) : json_null ();
  return json_pack ("{s:o, s:o}", "nodeEntry", entry, "values", values);
}

/* One driver's pool in doc's pools, and its claims in all_claims (their
 * CPUs in exclusive). */
static int
add_driver (const struct nrm_config *c, const struct nrm_topology *t, const struct nrm_driver_slot *s, json_t *jp,
            json_t *all_claims, hwloc_bitmap_t exclusive, nrm_error_t *err)
{
  struct nrm_pool pool = { 0 };
  cleanup_json json_t *claims = nrm_checkpoint_claims (c->state_dir, s->name, err);
  cleanup_json json_t *descs = json_object ();
  if (claims == NULL || s->ops->pool (s->self, NULL, &pool, err) < 0)
    return -1;
  const char *uid;
  json_t *cl;
  json_object_foreach (claims, uid, cl)
  {
    if (s->ops->describe && nrm_checkpoint_completed (cl))
      json_object_set_new (descs, uid, s->ops->describe (s->self, uid, json_object_get (cl, "state")));
  }
  json_t *ps = pool_status (t, &pool, claims, descs, c->node_name, strcmp (s->ops->id, "cpu") == 0);
  nrm_pool_done (&pool);
  /* A PCI driver, generic or vendor (its pool is the PCI driver's):
   * the functions it leaves to another driver, as of this pool. */
  if (s->ops->pool == nrm_pci_driver_pool)
    {
      cleanup_json json_t *left = nrm_pci_driver_left_out (s->self);
      json_object_set_new (ps, "leftOut", left_out_view (t, left));
    }
  json_array_append_new (jp, ps);
  json_object_foreach (claims, uid, cl)
  {
    json_t *entry = json_object_get (all_claims, uid);
    if (entry == NULL)
      {
        entry
            = json_pack ("{s:s?, s:s?, s:s?, s:{}}", "namespace", json_string_value (json_object_get (cl, "namespace")),
                         "name", json_string_value (json_object_get (cl, "name")), "phase",
                         json_string_value (json_object_get (cl, "phase")), "drivers");
        if (json_is_string (json_object_get (cl, "podGroup")))
          json_object_set (entry, "podGroup", json_object_get (cl, "podGroup"));
        json_object_set_new (all_claims, uid, entry);
      }
    json_t *desc = json_object_get (descs, uid);
    json_t *d = json_object ();
    size_t k;
    json_t *dev;
    json_t *names = json_array ();
    json_array_foreach (json_object_get (cl, "devices"), k, dev)
    {
      json_array_append (names, json_object_get (dev, "device"));
    }
    json_object_set_new (d, "devices", names);
    static const char *const keys[] = { "cpus", "cpuNodes", "memoryNodes", "partition" };
    for (size_t x = 0; x < sizeof (keys) / sizeof (keys[0]); x++)
      if (json_is_string (json_object_get (desc, keys[x])))
        json_object_set (d, keys[x], json_object_get (desc, keys[x]));
    if (json_object_get (d, "cpus"))
      {
        hwloc_bitmap_t set = NULL;
        nrm_error_t e = NULL;
        if (nrm_cpulist_parse (json_string_value (json_object_get (d, "cpus")), &set, &e) == 0)
          {
            hwloc_bitmap_or (exclusive, exclusive, set);
            /* How they lie on the machine, as nrm run --dry-run and
             * the claim's metadata say it. */
            json_object_set_new (d, "placement", nrm_cpus_layout (t, set, NULL));
          }
        nrm_error_release (&e);
        hwloc_bitmap_free (set);
      }
    json_object_set_new (json_object_get (entry, "drivers"), s->name, d);
  }
  return 0;
}

/* The CPU sets, the shared pool's memory nodes, each NUMA node's free
 * CPUs, the settings and the partitions, into doc. */
static void
add_sets (struct nrm_config *c, const struct nrm_fsroot *root, const struct nrm_topology *t,
          const struct nrm_drivers *drivers, json_t *doc, hwloc_const_bitmap_t exclusive)
{
  cleanup_bitmap hwloc_bitmap_t shared = NULL;
  cleanup_free char *ex = NULL, *sh = NULL, *res = NULL, *iso = NULL;
  shared = nrm_shared_pool_cpus (c, t, exclusive);
  ex = nrm_cpulist_format (exclusive);
  sh = nrm_cpulist_format (shared);
  res = nrm_cpulist_format (t->reserved);
  iso = nrm_cpulist_format (t->isolated);
  json_object_set_new (
      doc, "cpus", json_pack ("{s:s, s:s, s:s, s:s}", "exclusive", ex, "shared", sh, "reserved", res, "isolated", iso));
  /* The shared pool's memory nodes, as the reconciler writes them. */
  bool starved = false;
  cleanup_bitmap hwloc_bitmap_t full = nrm_shared_pool_full_nodes (c->state_dir, t, drivers);
  cleanup_bitmap hwloc_bitmap_t smems = nrm_shared_pool_mems (t, full, &starved);
  cleanup_free char *full_list = nrm_cpulist_format (full), *smem_list = nrm_cpulist_format (smems);
  json_object_set_new (
      doc, "memoryNodes",
      json_pack ("{s:s, s:s, s:b}", "shared", smem_list, "claimedInFull", full_list, "starved", starved));
  /* Per NUMA node, what no claim holds of its allocatable CPUs (the
   * isolated ones apart). */
  json_t *nodes = json_array ();
  json_object_set_new (doc, "numaNodes", nodes);
  for (size_t n = 0; n < t->n_numa; n++)
    {
      cleanup_bitmap hwloc_bitmap_t alloc = nrm_topology_node_allocatable (t, n);
      cleanup_bitmap hwloc_bitmap_t isol = xbitmap_dup (alloc);
      hwloc_bitmap_and (isol, isol, t->isolated);
      hwloc_bitmap_andnot (alloc, alloc, t->isolated);
      cleanup_bitmap hwloc_bitmap_t fr = xbitmap_dup (alloc), fi = xbitmap_dup (isol);
      hwloc_bitmap_andnot (fr, fr, exclusive);
      hwloc_bitmap_andnot (fi, fi, exclusive);
      cleanup_free char *a = nrm_cpulist_format (alloc), *f = nrm_cpulist_format (fr);
      cleanup_free char *fis = nrm_cpulist_format (fi);
      json_array_append_new (nodes, json_pack ("{s:I, s:s, s:s, s:I, s:s, s:I}", "id", (json_int_t) t->numa[n].os_index,
                                               "allocatableCPUs", a, "freeCPUs", f, "freeCount",
                                               (json_int_t) hwloc_bitmap_weight (fr), "freeIsolatedCPUs", fis,
                                               "allocatableCount", (json_int_t) hwloc_bitmap_weight (alloc)));
    }

  json_object_set_new (doc, "settings", settings_view (c, t, drivers));
  /* Whether exclusive containers can be cpuset partitions here. */
  cleanup_free char *pwhy = NULL;
  {
    nrm_partition_available (root, &pwhy);
    json_object_set_new (doc, "partition",
                         json_pack ("{s:s, s:b, s:s?}", "setting",
                                    nrm_partition_mode_name ((enum nrm_partition_mode) c->cpu.partition), "available",
                                    pwhy == NULL, "unavailable", pwhy));
  }
}

static void
print_pools (FILE *out, json_t *doc, json_t *all_claims)
{
  size_t i;
  json_t *p;
  json_array_foreach (json_object_get (doc, "pools"), i, p)
  {
    fprintf (out,
             "%s pool %s: %" JSON_INTEGER_FORMAT " devices, %" JSON_INTEGER_FORMAT " allocated, %" JSON_INTEGER_FORMAT
             " available, %" JSON_INTEGER_FORMAT " unavailable\n",
             json_string_value (json_object_get (p, "driver")), json_string_value (json_object_get (p, "pool")),
             json_integer_value (json_object_get (p, "totalDevices")),
             json_integer_value (json_object_get (p, "allocatedDevices")),
             json_integer_value (json_object_get (p, "availableDevices")),
             json_integer_value (json_object_get (p, "unavailableDevices")));
    size_t k;
    json_t *d;
    json_array_foreach (json_object_get (p, "devices"), k, d)
    {
      const char *key;
      json_t *v;
      fprintf (out, "  %-24s", json_string_value (json_object_get (d, "name")));
      if (json_object_get (d, "pci"))
        {
          print_pci (out, json_object_get (d, "pci"));
          print_holders (out, json_object_get (d, "claims"), all_claims);
          continue;
        }
      if (json_is_false (json_object_get (d, "published")))
        {
          fputs (" not in the pool now", out);
          print_holders (out, json_object_get (d, "claims"), all_claims);
          continue;
        }
      json_object_foreach (json_object_get (d, "capacity"), key, v)
      {
        fprintf (out, " %s %s", key, json_string_value (v));
      }
      fprintf (out, ", consumed %s, %zu claim%s", json_string_value (json_object_get (d, "consumed")),
               json_array_size (json_object_get (d, "claims")),
               json_array_size (json_object_get (d, "claims")) == 1 ? "" : "s");
      if (json_object_get (d, "cpus"))
        {
          const char *own = json_string_value (json_object_get (d, "cpus"));
          const char *held = json_string_value (json_object_get (d, "heldCPUs"));
          fprintf (out, "; CPUs %s, held %s", *own ? own : "-", *held ? held : "-");
        }
      fputc ('\n', out);
    }
    json_array_foreach (json_object_get (p, "leftOut"), k, d)
    {
      fprintf (out, "  left out: %s", json_string_value (json_object_get (d, "busID")));
      if (json_object_get (d, "class"))
        print_pci (out, d);
      fprintf (out, ": served by %s\n", json_string_value (json_object_get (d, "servedBy")));
    }
  }
}

static void
print_claims (FILE *out, json_t *all_claims)
{
  fprintf (out, "claims: %zu\n", json_object_size (all_claims));
  const char *uid;
  json_t *cl;
  json_object_foreach (all_claims, uid, cl)
  {
    fprintf (out, "  %s/%s (%s)%s", json_string_value (json_object_get (cl, "namespace")) ?: "?",
             json_string_value (json_object_get (cl, "name")) ?: "?", uid,
             strcmp (json_string_value (json_object_get (cl, "phase")) ?: "", "PrepareCompleted") ? " being prepared"
                                                                                                  : "");
    if (json_object_get (cl, "podGroup"))
      fprintf (out, " for PodGroup %s", json_string_value (json_object_get (cl, "podGroup")));
    const char *drv;
    json_t *d;
    json_object_foreach (json_object_get (cl, "drivers"), drv, d)
    {
      /* A driver of whole devices (PCI) says which. */
      if (!json_object_get (d, "cpus") && !json_object_get (d, "cpuNodes") && !json_object_get (d, "memoryNodes"))
        {
          size_t k;
          json_t *n;
          fprintf (out, " %s", drv);
          json_array_foreach (json_object_get (d, "devices"), k, n)
          {
            fprintf (out, "%s%s", k ? "," : " ", json_string_value (n) ?: "?");
          }
        }
      if (json_object_get (d, "cpus"))
        fprintf (out, " CPUs %s", json_string_value (json_object_get (d, "cpus")));
      if (json_object_get (d, "cpuNodes"))
        fprintf (out, " CPU nodes %s", json_string_value (json_object_get (d, "cpuNodes")));
      if (json_object_get (d, "memoryNodes"))
        fprintf (out, " memory nodes %s", json_string_value (json_object_get (d, "memoryNodes")));
      if (json_object_get (d, "partition"))
        fprintf (out, " partition %s", json_string_value (json_object_get (d, "partition")));
    }
    fputc ('\n', out);
    json_object_foreach (json_object_get (cl, "drivers"), drv, d)
    {
      json_t *pl = json_object_get (d, "placement");
      if (pl == NULL)
        continue;
      /* Cores by their first CPU; a partial core shares an SMT sibling
       * with another claim or the shared pool. */
      fprintf (out, "    whole cores %s; partial cores %s; L3 groups %s; packages %s; NUMA nodes %s\n",
               dash (json_string_value (json_object_get (pl, "wholeCores"))),
               dash (json_string_value (json_object_get (pl, "partialCores"))),
               dash (json_string_value (json_object_get (pl, "l3Groups"))),
               dash (json_string_value (json_object_get (pl, "packages"))),
               dash (json_string_value (json_object_get (pl, "numaNodes"))));
    }
  }
}

static const char *
dash_key (json_t *o, const char *key)
{
  return dash (json_string_value (json_object_get (o, key)));
}

/* The CPU sets, memory nodes, NUMA nodes, partitions and settings. */
static void
print_summary (FILE *out, json_t *doc)
{
  json_t *cpus = json_object_get (doc, "cpus"), *mem = json_object_get (doc, "memoryNodes");
  json_t *part = json_object_get (doc, "partition");
  const char *pwhy = json_string_value (json_object_get (part, "unavailable"));
  size_t i;
  json_t *p;
  fprintf (out, "CPUs: exclusive %s; shared %s; reserved %s; isolated %s\n", dash_key (cpus, "exclusive"),
           dash_key (cpus, "shared"), dash_key (cpus, "reserved"), dash_key (cpus, "isolated"));
  fprintf (out, "Memory nodes: shared %s; claimed in full %s%s\n", dash_key (mem, "shared"),
           dash_key (mem, "claimedInFull"),
           json_is_true (json_object_get (mem, "starved")) ? " (every node: shared containers keep all of them)" : "");
  json_array_foreach (json_object_get (doc, "numaNodes"), i, p)
  {
    const char *f = json_string_value (json_object_get (p, "freeCPUs"));
    const char *fi = json_string_value (json_object_get (p, "freeIsolatedCPUs"));
    fprintf (out,
             "  NUMA node %" JSON_INTEGER_FORMAT ": free CPUs %s (%" JSON_INTEGER_FORMAT " of %" JSON_INTEGER_FORMAT
             " allocatable)",
             json_integer_value (json_object_get (p, "id")), *f ? f : "-",
             json_integer_value (json_object_get (p, "freeCount")),
             json_integer_value (json_object_get (p, "allocatableCount")));
    if (*fi)
      fprintf (out, "; isolated free %s", fi);
    fputc ('\n', out);
  }
  fprintf (out, "CPU partitions: %s; %s%s%s\n", json_string_value (json_object_get (part, "setting")),
           pwhy ? "unavailable (" : "the kernel has remote partitions (cpuset.cpus.exclusive)", pwhy ? pwhy : "",
           pwhy ? ")" : "");
  {
    json_t *st = json_object_get (doc, "settings");
    const char *key;
    json_t *v;
    fprintf (out, "settings (%s):\n",
             json_is_string (json_object_get (st, "nodeEntry")) ? json_string_value (json_object_get (st, "nodeEntry"))
                                                                : "no nodes[] entry applies");
    json_object_foreach (json_object_get (st, "values"), key, v)
    {
      const char *val = json_string_value (json_object_get (v, "value"));
      fprintf (out, "  %-22s %s (%s)\n", key, *val ? val : "-", json_string_value (json_object_get (v, "from")));
    }
  }
}

int
nrm_status (struct nrm_config *c, const struct nrm_fsroot *root, const struct nrm_topology *t,
            const struct nrm_drivers *drivers, bool as_json, FILE *out, nrm_error_t *err)
{
  cleanup_json json_t *doc = json_object (), *all_claims = json_object ();
  cleanup_bitmap hwloc_bitmap_t exclusive = xbitmap_alloc ();

  json_t *jp = json_array ();
  json_object_set_new (doc, "pools", jp);
  for (size_t i = 0; i < drivers->n; i++)
    if (add_driver (c, t, &drivers->slots[i], jp, all_claims, exclusive, err) < 0)
      return -1;
  json_object_set (doc, "claims", all_claims);
  /* CPUs that are not on this machine at all: the plugin serves another
   * machine (or other settings), and nothing below would be true. */
  {
    cleanup_bitmap hwloc_bitmap_t gone = xbitmap_dup (exclusive);
    hwloc_bitmap_andnot (gone, gone, t->online);
    hwloc_bitmap_andnot (gone, gone, t->offline);
    if (!hwloc_bitmap_iszero (gone))
      {
        cleanup_free char *g = nrm_cpulist_format (gone);
        return nrm_error_set (err, EINVAL,
                              "status: claims in `%s` hold CPUs %s, which this machine (%s) does not have: give status "
                              "the plugin's settings (--topology, the same -c file)",
                              c->state_dir, g, t->source);
      }
  }
  add_sets (c, root, t, drivers, doc, exclusive);
  if (as_json)
    {
      if (json_dumpf (doc, out, JSON_INDENT (2)) < 0)
        return nrm_error_set (err, EIO, "cannot write the status");
      fputc ('\n', out);
      return 0;
    }
  print_pools (out, doc, all_claims);
  print_claims (out, all_claims);
  print_summary (out, doc);
  return ferror (out) ? nrm_error_set (err, EIO, "cannot write the status") : 0;
}
