/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU driver: turns allocated CPU devices into concrete CPUs (through
 * the placement engine), passes them to the container for the cgroup
 * commit, and reports CPUs that went offline. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/env.h"
#include "cpuset/partition.h"
#include "cpuset/placement.h"
#include "driver/cpu/cpu.h"
#include "driver/driver.h"
#include "driver/kit.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/fs.h"
#include "topology/pci.h"

struct claim_entry
{
  char *uid;
  hwloc_bitmap_t cpus;
  struct claim_entry *next;
};

struct cpu_driver
{
  const struct nrm_topology *t;
  struct nrm_publish_options o;
  struct nrm_cpu_settings s; /* its section of the configuration */
  char *name;
  json_t *devices; /* name -> Device, as published */
  json_t *names;   /* device names in pool order */
  hwloc_bitmap_t taken;
  struct claim_entry *claims;
  char *online_path; /* NULL: no health check */
  const struct nrm_fsroot *fsroot;
  nrm_log_fn log;
  void *log_ctx;
  bool sysfs; /* PCI localities from sysfs under fsroot (a live machine or a fake tree) */
  pthread_mutex_t foreign_lock;
  json_t *foreign; /* other drivers' devices on the node: driver -> {device -> bus id} */
};

/* A PCI function of the claim (any driver's device named
 * <class>-dddd-bb-dd-f) and the CPUs near it. */
struct near_device
{
  char bus_id[NRM_PCI_BUS_ID_LEN];
  hwloc_bitmap_t cpus;
};

struct near_set
{
  struct near_device *dev;
  size_t n;
  hwloc_bitmap_t all; /* the union, or NULL when no device has a known locality */
};

static void
near_set_done (struct near_set *ns)
{
  for (size_t i = 0; i < ns->n; i++)
    hwloc_bitmap_free (ns->dev[i].cpus);
  free (ns->dev);
  hwloc_bitmap_free (ns->all);
}

/* The CPUs near one function: its sysfs local_cpulist where nrm reads
 * sysfs, else (or when sysfs does not have it) the locality hwloc
 * recorded; NULL when neither knows, or when the answer is every CPU (the
 * firmware did not say). */
static hwloc_bitmap_t
locality_of (struct cpu_driver *d, const char *bus_id)
{
  hwloc_bitmap_t set = NULL;
  if (d->sysfs)
    {
      cleanup_free char *list = NULL;
      nrm_error_t e = NULL;
      /* Its local_cpulist alone: prepare reads nothing else of it. */
      if (nrm_pci_read_local_cpus (d->fsroot, bus_id, &list, &e) == 0 && list && nrm_cpulist_parse (list, &set, &e) < 0)
        set = NULL;
      nrm_error_release (&e);
    }
  for (size_t i = 0; set == NULL && i < d->t->n_pci; i++)
    if (strcmp (d->t->pci[i].bus_id, bus_id) == 0 && d->t->pci[i].cpus)
      set = xbitmap_dup (d->t->pci[i].cpus);
  if (set)
    hwloc_bitmap_and (set, set, d->t->online);
  if (set && (hwloc_bitmap_iszero (set) || hwloc_bitmap_isincluded (d->t->online, set)))
    {
      hwloc_bitmap_free (set);
      set = NULL;
    }
  return set;
}

/* The bus id of another driver's device: in its name (nrm's PCI drivers),
 * or in the attributes it publishes (node_devices, from the API server). */
static bool
bus_id_of (struct cpu_driver *d, const struct nrm_alloc_result *r, char *bus)
{
  if (nrm_pci_bus_id_of_device (r->device, bus))
    return true;
  pthread_mutex_lock (&d->foreign_lock);
  const char *v
      = json_string_value (json_object_get (json_object_get (d->foreign, r->driver ? r->driver : ""), r->device));
  if (v)
    snprintf (bus, NRM_PCI_BUS_ID_LEN, "%s", v);
  pthread_mutex_unlock (&d->foreign_lock);
  return v != NULL;
}

static void
cpu_node_devices (void *self, json_t *devices)
{
  struct cpu_driver *d = self;
  json_t *found = json_object (), *devs, *attrs;
  const char *driver, *name;
  json_object_foreach (devices, driver, devs)
  {
    json_t *mine = json_object ();
    json_object_foreach (devs, name, attrs)
    {
      char bus[NRM_PCI_BUS_ID_LEN];
      if (nrm_pci_bus_id_of_attributes (attrs, bus))
        json_object_set_new (mine, name, json_string (bus));
    }
    json_object_set_new (found, driver, mine);
  }
  pthread_mutex_lock (&d->foreign_lock);
  json_decref (d->foreign);
  d->foreign = found;
  pthread_mutex_unlock (&d->foreign_lock);
}

/* The claim's PCI functions whose locality is known: nrm's own, and those
 * of other drivers that publish their bus id (gpu.nvidia.com's gpu-0),
 * once the API server has told (node_devices). */
static void
near_devices (struct cpu_driver *d, const struct nrm_claim_view *c, struct near_set *ns)
{
  memset (ns, 0, sizeof (*ns));
  for (size_t i = 0; i < c->n_all; i++)
    {
      const struct nrm_alloc_result *r = &c->all[i];
      char bus[NRM_PCI_BUS_ID_LEN];
      if (r->device == NULL || (r->driver && strcmp (r->driver, d->name) == 0) || !bus_id_of (d, r, bus))
        continue;
      bool seen = false;
      for (size_t k = 0; k < ns->n && !seen; k++)
        seen = strcmp (ns->dev[k].bus_id, bus) == 0;
      hwloc_bitmap_t cpus = seen ? NULL : locality_of (d, bus);
      if (cpus == NULL)
        continue;
      ns->dev = xrealloc (ns->dev, (ns->n + 1) * sizeof (*ns->dev));
      snprintf (ns->dev[ns->n].bus_id, sizeof (ns->dev[ns->n].bus_id), "%s", bus);
      ns->dev[ns->n++].cpus = cpus;
      if (ns->all == NULL)
        ns->all = xbitmap_alloc ();
      hwloc_bitmap_or (ns->all, ns->all, cpus);
    }
}

/* The bus ids of the claim's functions near some of cpus ("0000:41:00.0,...";
 * NULL when none is). */
static char *
near_list (const struct near_set *ns, hwloc_const_bitmap_t cpus)
{
  char *out = NULL;
  for (size_t i = 0; i < ns->n; i++)
    if (hwloc_bitmap_intersects (ns->dev[i].cpus, cpus))
      {
        char *s = xasprintf ("%s%s%s", out ? out : "", out ? "," : "", ns->dev[i].bus_id);
        free (out);
        out = s;
      }
  return out;
}

static struct claim_entry *
find_claim (struct cpu_driver *d, const char *uid)
{
  for (struct claim_entry *c = d->claims; c; c = c->next)
    if (strcmp (c->uid, uid) == 0)
      return c;
  return NULL;
}

static int
add_claim (struct cpu_driver *d, const char *uid, hwloc_const_bitmap_t cpus, nrm_error_t *err)
{
  struct claim_entry *c = xcalloc (1, sizeof (*c));
  c->uid = xstrdup (uid);
  c->cpus = xbitmap_dup (cpus);
  c->next = d->claims;
  d->claims = c;
  hwloc_bitmap_or (d->taken, d->taken, cpus);
  return 0;
}

static void
drop_claim (struct cpu_driver *d, const char *uid)
{
  for (struct claim_entry **p = &d->claims; *p; p = &(*p)->next)
    if (strcmp ((*p)->uid, uid) == 0)
      {
        struct claim_entry *c = *p;
        *p = c->next;
        hwloc_bitmap_andnot (d->taken, d->taken, c->cpus);
        free (c->uid);
        hwloc_bitmap_free (c->cpus);
        free (c);
        return;
      }
}

static void
cpu_reset (void *self)
{
  struct cpu_driver *d = self;
  while (d->claims)
    drop_claim (d, d->claims->uid);
  hwloc_bitmap_zero (d->taken);
}

/* The allocatable CPUs of every node. */
static hwloc_bitmap_t
allocatable (const struct nrm_topology *t)
{
  hwloc_bitmap_t set = xbitmap_alloc ();
  for (size_t i = 0; i < t->n_numa; i++)
    {
      cleanup_bitmap hwloc_bitmap_t a = nrm_topology_node_allocatable (t, i);
      hwloc_bitmap_or (set, set, a);
    }
  return set;
}

/* The CPUs a device stands for: a NUMA node, an L3 group or a core. */
hwloc_bitmap_t
nrm_cpu_device_cpus (const struct nrm_topology *t, const char *name)
{
  unsigned id;
  char tail;
  hwloc_bitmap_t set = allocatable (t);
  bool isolated = false;
  int i = nrm_numa_device_index (t, name, &isolated);
  if (i >= 0)
    {
      cleanup_bitmap hwloc_bitmap_t a = nrm_topology_node_allocatable (t, (size_t) i);
      hwloc_bitmap_and (set, set, a);
    }
  else if (sscanf (name, "l3-%u%c", &id, &tail) == 1)
    {
      size_t l;
      for (l = 0; l < t->n_l3 && t->l3[l].os_index != id; l++)
        ;
      if (l < t->n_l3)
        hwloc_bitmap_and (set, set, t->l3[l].cpus);
      else
        hwloc_bitmap_zero (set);
    }
  else if (sscanf (name, "core%u%c", &id, &tail) == 1)
    {
      int pi = nrm_topology_pu_index (t, id);
      if (pi >= 0 && t->pus[pi].core >= 0)
        hwloc_bitmap_and (set, set, t->cores[t->pus[pi].core].cpus);
      else
        hwloc_bitmap_zero (set);
    }
  else
    hwloc_bitmap_zero (set);
  /* Isolated CPUs belong to the isolated devices only. */
  if (isolated)
    hwloc_bitmap_and (set, set, t->isolated);
  else
    hwloc_bitmap_andnot (set, set, t->isolated);
  return set;
}

static char *
mems_of (const struct nrm_topology *t, hwloc_const_bitmap_t cpus)
{
  cleanup_bitmap hwloc_bitmap_t nodes = xbitmap_alloc ();
  int cpu;
  hwloc_bitmap_foreach_begin (cpu, cpus)
  {
    int pi = nrm_topology_pu_index (t, (unsigned) cpu);
    if (pi >= 0 && t->pus[pi].numa >= 0)
      hwloc_bitmap_set (nodes, t->numa[t->pus[pi].numa].os_index);
  }
  hwloc_bitmap_foreach_end ();
  return nrm_cpulist_format (nodes);
}

/* Placement settings of one request: the node's options, then the claim's
 * opaque configuration for this driver (class first, claim last; a later
 * entry replaces what an earlier one set). */
struct cpu_settings
{
  unsigned options;
  char cpu_kind[16];
  bool shared;   /* sharedCPUs: the container runs on the shared pool too */
  int partition; /* partition: an enum nrm_partition_mode, or -1 when not set */
  char *cpus;    /* cpus: exactly these CPUs (a list), or NULL */
};

static int
cpu_settings (struct cpu_driver *d, json_t *config, const char *request, struct cpu_settings *cs, nrm_error_t *err)
{
  size_t i;
  json_t *entry;
  free (cs->cpus);
  memset (cs, 0, sizeof (*cs));
  cs->options = d->s.options;
  cs->partition = -1;
  json_array_foreach (config, i, entry)
  {
    json_t *params, *v;
    const char *key;
    if (!nrm_kit_names_request (json_object_get (entry, "requests"), request))
      continue;
    if (nrm_kit_opaque_params (entry, i, "cpu.nrm.io/v1alpha1", "CPUConfig", &params, err) < 0)
      return -1;
    json_object_foreach (params, key, v)
    {
      if (strcmp (key, "apiVersion") == 0 || strcmp (key, "kind") == 0)
        continue;
      if (strcmp (key, "options") == 0)
        {
          size_t k;
          json_t *o;
          if (!json_is_array (v))
            return nrm_error_set (err, EINVAL, "opaque configuration %zu: `options` must be a list of strings", i);
          cs->options = 0;
          json_array_foreach (v, k, o)
          {
            if (!json_is_string (o))
              return nrm_error_set (err, EINVAL, "opaque configuration %zu: `options` must be a list of strings", i);
            if (nrm_cpu_option_parse (json_string_value (o), &cs->options, err) < 0)
              return nrm_error_wrap (err, "opaque configuration %zu", i);
          }
        }
      else if (strcmp (key, "cpuKind") == 0)
        {
          const char *k = json_string_value (v);
          if (k == NULL || (strcmp (k, "performance") && strcmp (k, "efficiency")))
            return nrm_error_set (err, EINVAL, "opaque configuration %zu: `cpuKind` must be performance or efficiency",
                                  i);
          snprintf (cs->cpu_kind, sizeof (cs->cpu_kind), "%s", k);
        }
      else if (strcmp (key, "sharedCPUs") == 0)
        {
          if (!json_is_boolean (v))
            return nrm_error_set (err, EINVAL, "opaque configuration %zu: `sharedCPUs` must be a boolean", i);
          cs->shared = json_is_true (v);
        }
      else if (strcmp (key, "partition") == 0)
        {
          enum nrm_partition_mode m;
          if (nrm_partition_mode_parse (json_string_value (v), "`partition`", &m, err) < 0)
            return nrm_error_wrap (err, "opaque configuration %zu", i);
          cs->partition = (int) m;
        }
      else if (strcmp (key, "cpus") == 0)
        {
          cleanup_bitmap hwloc_bitmap_t set = NULL;
          if (!json_is_string (v) || nrm_cpulist_parse (json_string_value (v), &set, err) < 0)
            {
              nrm_error_release (err);
              return nrm_error_set (err, EINVAL, "opaque configuration %zu: `cpus` must be a CPU list such as 0-3,8",
                                    i);
            }
          free (cs->cpus);
          cs->cpus = xstrdup (json_string_value (v));
        }
      else
        return nrm_error_set (err, EINVAL, "opaque configuration %zu: unknown field `%s`", i, key);
    }
  }
  return 0;
}

/* The CPUs of one allocated device for this claim, added to claim. */
static int
take_device (struct cpu_driver *d, const struct nrm_alloc_result *r, json_t *config, hwloc_const_bitmap_t near,
             hwloc_bitmap_t claim, bool *shared, int *partition, bool *placed_near, nrm_error_t *err)
{
  json_t *dev = json_object_get (d->devices, r->device);
  struct cpu_settings cs = { 0 };
  cleanup_free char *pin_text = NULL;
  if (dev == NULL)
    return nrm_error_set (err, ENODEV, "unknown device `%s` in pool `%s`", r->device, r->pool);
  int sr = cpu_settings (d, config, r->request, &cs, err);
  pin_text = cs.cpus;
  if (sr < 0)
    return -1;
  *shared |= cs.shared;
  if (cs.partition >= 0)
    *partition = cs.partition;
  cleanup_bitmap hwloc_bitmap_t cpus = nrm_cpu_device_cpus (d->t, r->device);
  if (!json_is_true (json_object_get (dev, "allowMultipleAllocations")))
    {
      /* A whole device: all its CPUs, or none when some are in use. */
      if (hwloc_bitmap_intersects (cpus, d->taken) || hwloc_bitmap_intersects (cpus, claim))
        return nrm_error_set (err, EBUSY, "device %s: some of its CPUs are already in use", r->device);
      hwloc_bitmap_or (claim, claim, cpus);
      return 0;
    }
  size_t count;
  if (nrm_cpu_consumed (r, dev, &count, err) < 0)
    return -1;
  hwloc_const_bitmap_t near_here = near && hwloc_bitmap_intersects (near, cpus) ? near : NULL;
  *placed_near = near_here != NULL;
  cleanup_bitmap hwloc_bitmap_t free_set = xbitmap_dup (d->t->online);
  cleanup_bitmap hwloc_bitmap_t got = xbitmap_alloc ();
  hwloc_bitmap_andnot (free_set, free_set, d->taken);
  hwloc_bitmap_andnot (free_set, free_set, claim);
  if (pin_text)
    {
      /* Exactly the CPUs asked for (nrm run -C, or the CPUs nrm run
       * placed): all of the device, free, and as many as the capacity
       * consumed. */
      cleanup_bitmap hwloc_bitmap_t pin = NULL, bad = NULL;
      if (nrm_cpulist_parse (pin_text, &pin, err) < 0)
        return -1;
      bad = xbitmap_dup (pin);
      hwloc_bitmap_andnot (bad, bad, cpus);
      if (!hwloc_bitmap_iszero (bad))
        {
          cleanup_free char *list = nrm_cpulist_format (bad);
          return nrm_error_set (err, EINVAL, "device %s: CPUs %s are not its allocatable CPUs", r->device, list);
        }
      hwloc_bitmap_andnot (bad, pin, free_set);
      if (!hwloc_bitmap_iszero (bad))
        {
          cleanup_free char *list = nrm_cpulist_format (bad);
          return nrm_error_set (err, EBUSY, "device %s: CPUs %s are already in use", r->device, list);
        }
      if ((size_t) hwloc_bitmap_weight (pin) != count)
        return nrm_error_set (err, EINVAL, "device %s: `cpus` %s names %d CPUs, the claim consumes %zu", r->device,
                              pin_text, hwloc_bitmap_weight (pin), count);
      hwloc_bitmap_or (claim, claim, pin);
      return 0;
    }
  if (nrm_cpu_place_device (d->t, r->device, count, cs.options, cs.cpu_kind[0] ? cs.cpu_kind : NULL, near_here,
                            free_set, got, err)
      < 0)
    return -1;
  hwloc_bitmap_or (claim, claim, got);
  return 0;
}

int
nrm_cpu_consumed (const struct nrm_alloc_result *r, json_t *dev, size_t *count, nrm_error_t *err)
{
  nrm_quantity_t q;
  if (nrm_kit_consumed_checked (r, dev, "cpus", &q, err) < 0)
    return -1;
  if (q % NRM_QUANTITY_ONE != 0)
    return nrm_error_set (err, EINVAL, "device %s: a fraction of a CPU cannot be exclusive", r->device);
  *count = (size_t) (q / NRM_QUANTITY_ONE);
  return 0;
}

int
nrm_cpu_place_device (const struct nrm_topology *t, const char *device, size_t count, unsigned options,
                      const char *cpu_kind, hwloc_const_bitmap_t near, hwloc_const_bitmap_t free, hwloc_bitmap_t got,
                      nrm_error_t *err)
{
  cleanup_bitmap hwloc_bitmap_t cpus = nrm_cpu_device_cpus (t, device);
  struct nrm_cpu_request req = { .count = count,
                                 .within = cpus,
                                 .options = options,
                                 .cpu_kind = cpu_kind,
                                 .isolated = hwloc_bitmap_isincluded (cpus, t->isolated) && !hwloc_bitmap_iszero (cpus),
                                 .near = near };
  if (nrm_place_cpus (t, free, &req, got, err) < 0)
    return nrm_error_wrap (err, "device %s", device);
  return 0;
}

/* What a container reads of each device in its metadata file: the
 * device's published attributes and the CPUs, cores, L3 groups and NUMA
 * nodes the claim holds of it. */
static json_t *
cpu_metadata (struct cpu_driver *d, const struct nrm_claim_view *c, hwloc_const_bitmap_t claim,
              const struct near_set *ns, const bool *placed_near, const char *partition)
{
  json_t *out = json_object ();
  for (size_t i = 0; i < c->n_results; i++)
    {
      const char *name = c->results[i].device;
      cleanup_bitmap hwloc_bitmap_t on = nrm_cpu_device_cpus (d->t, name);
      if (json_object_get (out, name))
        continue;
      hwloc_bitmap_and (on, on, claim);
      json_t *attrs = json_deep_copy (json_object_get (json_object_get (d->devices, name), "attributes"));
      cleanup_free char *cpus = nrm_cpulist_format (on);
      /* Cores by their coreID, as the core devices name them (the first
       * CPU; Linux core ids repeat in every package); the whole and the
       * partial ones as nrm status and nrm run --dry-run tell them. */
      cleanup_bitmap hwloc_bitmap_t first = xbitmap_alloc ();
      cleanup_json json_t *layout = nrm_cpus_layout (d->t, on, first);
      cleanup_free char *cores = nrm_cpulist_format (first);
      if (attrs == NULL)
        attrs = json_object ();
      const char *keys[] = { "cpus", "cores", "wholeCores", "partialCores", "l3Groups", "numaNodes" };
      const char *vals[] = { cpus,
                             cores,
                             json_string_value (json_object_get (layout, "wholeCores")),
                             json_string_value (json_object_get (layout, "partialCores")),
                             json_string_value (json_object_get (layout, "l3Groups")),
                             json_string_value (json_object_get (layout, "numaNodes")) };
      for (size_t k = 0; k < sizeof (keys) / sizeof (keys[0]); k++)
        json_object_set_new (attrs, keys[k], json_pack ("{s:s}", "string", vals[k]));
      /* Where the claim's PCI functions chose among the device's CPUs. */
      cleanup_free char *near = placed_near[i] ? near_list (ns, on) : NULL;
      if (near)
        json_object_set_new (attrs, "nearDevices", json_pack ("{s:s}", "string", near));
      if (partition)
        json_object_set_new (attrs, "partition", json_pack ("{s:s}", "string", partition));
      json_object_set_new (out, name, attrs);
    }
  return out;
}

static int
cpu_prepare (void *self, const struct nrm_claim_view *c, struct nrm_prepared *out, nrm_error_t *err)
{
  struct cpu_driver *d = self;
  cleanup_bitmap hwloc_bitmap_t claim = xbitmap_alloc ();
  bool shared = false;
  int asked = -1;
  if (find_claim (d, c->uid))
    return nrm_error_set (err, EEXIST, "claim %s is already prepared", c->uid);
  /* The claim's PCI functions: its CPUs go near them where there is a
   * choice. */
  __attribute__ ((cleanup (near_set_done))) struct near_set ns;
  near_devices (d, c, &ns);
  cleanup_free bool *placed_near = xcalloc (c->n_results + 1, sizeof (bool));
  for (size_t i = 0; i < c->n_results; i++)
    if (take_device (d, &c->results[i], c->config, ns.all, claim, &shared, &asked, &placed_near[i], err) < 0)
      return -1;
  /* Never hand out the last shared CPUs: every other pod runs there. */
  if (d->s.min_shared_cpus > 0)
    {
      cleanup_bitmap hwloc_bitmap_t left = allocatable (d->t);
      hwloc_bitmap_andnot (left, left, d->t->isolated);
      hwloc_bitmap_andnot (left, left, d->taken);
      hwloc_bitmap_andnot (left, left, claim);
      int w = hwloc_bitmap_weight (left);
      if (w < d->s.min_shared_cpus)
        return nrm_error_set (err, ENOSPC, "this claim would leave %d shared CPU%s, fewer than the minimum of %ld", w,
                              w == 1 ? "" : "s", d->s.min_shared_cpus);
    }
  /* A cpuset partition: the claim's setting, else the node's. Asked for
   * by the claim, one that cannot be had refuses the claim; by the node,
   * the container runs without it and the claim's metadata says why. */
  enum nrm_partition_mode pm = asked >= 0 ? (enum nrm_partition_mode) asked : d->s.partition;
  cleanup_free char *pnote = NULL;
  if (pm != NRM_PARTITION_OFF)
    {
      cleanup_free char *why = NULL;
      if (shared)
        why = xstrdup ("a claim with sharedCPUs shares its CPUs");
      else
        nrm_partition_available (d->fsroot, &why);
      if (why && asked > 0)
        return nrm_error_set (err, ENOTSUP,
                              "the claim asks for a cpuset partition (%s), which this node cannot give: %s",
                              nrm_partition_mode_name (pm), why);
      pnote = why ? xasprintf ("unavailable (%s)", why) : xstrdup (nrm_partition_mode_name (pm));
      if (why)
        NRM_LOG_TO (d->log, d->log_ctx, NRM_LOG_WARNING,
                    "claim %s: partition: unavailable (%s); its containers keep other tasks off their CPUs through "
                    "cpuset.cpus only",
                    c->uid, why);
    }
  cleanup_free char *list = nrm_cpulist_format (claim), *mems = mems_of (d->t, claim);
  cleanup_json json_t *state = json_pack ("{s:s, s:s}", "cpus", list, "mems", mems);
  cleanup_json json_t *env = json_array ();
  if (shared)
    json_object_set_new (state, "sharedCPUs", json_true ());
  if (nrm_env_add (env, NRM_ENV_CPUS, NULL, c->uid, list, err) < 0
      || nrm_env_add (env, NRM_ENV_CPU_NODES, NULL, c->uid, mems, err) < 0)
    return -1;
  /* A mixed claim: the hook and the reconciler add the shared pool to the
   * container's cpuset; NRM_CPUS stays the exclusive part. */
  if (shared && nrm_env_add (env, NRM_ENV_SHARED_CPUS, NULL, c->uid, "true", err) < 0)
    return -1;
  /* The hook tries even where prepare found no way: it says per container. */
  if (pm != NRM_PARTITION_OFF
      && (nrm_env_add (env, NRM_ENV_PARTITION, NULL, c->uid, nrm_partition_mode_name (pm), err) < 0
          || (asked > 0 && nrm_env_add (env, NRM_ENV_PARTITION_REQUIRED, NULL, c->uid, "true", err) < 0)))
    return -1;
  if (pnote)
    json_object_set_new (state, "partition", json_string (pnote));
  if (add_claim (d, c->uid, claim, err) < 0)
    return -1;
  out->state = TAKE_PTR (state);
  out->edits.env = TAKE_PTR (env);
  out->edits.commit_hook = true;
  out->metadata = c->metadata ? cpu_metadata (d, c, claim, &ns, placed_near, pnote) : NULL;
  return 0;
}

static int
cpu_restore (void *self, const char *uid, json_t *state, nrm_error_t *err)
{
  struct cpu_driver *d = self;
  cleanup_bitmap hwloc_bitmap_t cpus = NULL;
  if (find_claim (d, uid))
    return 0;
  const char *list = json_string_value (json_object_get (state, "cpus"));
  if (list == NULL || nrm_cpulist_parse (list, &cpus, err) < 0)
    {
      nrm_error_release (err);
      return nrm_error_set (err, EINVAL, "state has no valid `cpus`");
    }
  if (hwloc_bitmap_intersects (cpus, d->taken))
    return nrm_error_set (err, EEXIST, "CPUs %s are held by another claim", list);
  return add_claim (d, uid, cpus, err);
}

static void
cpu_unprepare (void *self, const char *uid, json_t *state)
{
  (void) state;
  drop_claim (self, uid);
}

/* A device with an offline CPU is unhealthy, and tainted NoSchedule until
 * the CPU is back: the online list is read once per report. */
static int
cpu_health (void *self, struct nrm_health_report *ret, nrm_error_t *err)
{
  struct cpu_driver *d = self;
  size_t n = json_array_size (d->names);
  cleanup_free char *text = NULL, *why = NULL;
  cleanup_bitmap hwloc_bitmap_t online = NULL;
  enum nrm_health all = NRM_HEALTH_HEALTHY;
  nrm_error_t rerr = NULL;
  if (d->online_path
      && (nrm_read_file (d->online_path, 1 << 16, &text, NULL, &rerr) < 0
          || nrm_cpulist_parse (text, &online, &rerr) < 0))
    {
      all = NRM_HEALTH_UNKNOWN;
      why = xasprintf ("cannot read %s: %s", d->online_path, nrm_error_msg (rerr));
      nrm_error_release (&rerr);
    }
  ret->devices = xcalloc (n + 1, sizeof (*ret->devices));
  ret->n = 0;
  for (size_t i = 0; i < n; i++)
    {
      struct nrm_device_health *h = &ret->devices[ret->n++];
      const char *dev = json_string_value (json_array_get (d->names, i));
      h->device = xstrdup (dev);
      h->health = all;
      if (why)
        h->message = xstrdup (why);
      if (online == NULL)
        continue;
      cleanup_bitmap hwloc_bitmap_t gone = nrm_cpu_device_cpus (d->t, dev);
      hwloc_bitmap_andnot (gone, gone, online);
      if (hwloc_bitmap_iszero (gone))
        continue;
      cleanup_free char *list = nrm_cpulist_format (gone);
      h->health = NRM_HEALTH_UNHEALTHY;
      h->message = xasprintf ("CPUs %s went offline", list);
      h->taint = xstrdup ("cpus-offline");
      h->effect = NRM_TAINT_NO_SCHEDULE;
    }
  return 0;
}

/* The os indexes of a list ("0-1,3") as an array of integers. */
static json_t *
list_ints (const char *list)
{
  json_t *out = json_array ();
  cleanup_bitmap hwloc_bitmap_t set = NULL;
  nrm_error_t e = NULL;
  if (list == NULL || nrm_cpulist_parse (list, &set, &e) < 0)
    {
      nrm_error_release (&e);
      return out;
    }
  int i;
  hwloc_bitmap_foreach_begin (i, set) { json_array_append_new (out, json_integer (i)); }
  hwloc_bitmap_foreach_end ();
  return out;
}

/* What the claim holds of one device, for its status (describe's
 * "placement"): its CPUs there, and how they lie (cores by their first
 * CPU, as nrm status and the metadata file tell them). */
static json_t *
cpu_placement (struct cpu_driver *d, hwloc_const_bitmap_t on, json_t *state)
{
  cleanup_free char *cpus = nrm_cpulist_format (on);
  cleanup_json json_t *layout = nrm_cpus_layout (d->t, on, NULL);
  json_t *out = json_pack ("{s:s, s:O, s:O}", "cpus", cpus, "wholeCores", json_object_get (layout, "wholeCores"),
                           "partialCores", json_object_get (layout, "partialCores"));
  /* A machine without L3 caches in its topology has no groups to tell. */
  if (d->t->n_l3 > 0)
    json_object_set (out, "l3Groups", json_object_get (layout, "l3Groups"));
  json_object_set_new (out, "numaNodes", list_ints (json_string_value (json_object_get (layout, "numaNodes"))));
  if (json_is_string (json_object_get (state, "partition")))
    json_object_set (out, "partition", json_object_get (state, "partition"));
  return out;
}

static json_t *
cpu_describe (void *self, const char *uid, json_t *state)
{
  struct cpu_driver *d = self;
  (void) uid;
  cleanup_bitmap hwloc_bitmap_t held = NULL;
  const char *list = json_string_value (json_object_get (state, "cpus"));
  json_t *out = json_object ();
  nrm_error_t e = NULL;
  if (list)
    json_object_set (out, "cpus", json_object_get (state, "cpus"));
  if (json_object_get (state, "mems"))
    json_object_set (out, "cpuNodes", json_object_get (state, "mems"));
  if (json_object_get (state, "partition"))
    json_object_set (out, "partition", json_object_get (state, "partition"));
  if (list == NULL || nrm_cpulist_parse (list, &held, &e) < 0)
    {
      nrm_error_release (&e);
      return out;
    }
  /* The CPUs of the claim on each device that covers some of them. */
  json_t *devs = json_object (), *lists = json_object (), *placement = json_object ();
  size_t i;
  json_t *name;
  json_array_foreach (d->names, i, name)
  {
    cleanup_bitmap hwloc_bitmap_t on = nrm_cpu_device_cpus (d->t, json_string_value (name));
    hwloc_bitmap_and (on, on, held);
    if (!hwloc_bitmap_iszero (on))
      {
        cleanup_free char *on_list = nrm_cpulist_format (on);
        json_object_set_new (devs, json_string_value (name),
                             json_pack ("{s:I}", "cpus", (json_int_t) hwloc_bitmap_weight (on)));
        json_object_set_new (lists, json_string_value (name), json_string (on_list));
        json_object_set_new (placement, json_string_value (name), cpu_placement (d, on, state));
      }
  }
  json_object_set_new (out, "devices", devs);
  json_object_set_new (out, "deviceCPUs", lists);
  json_object_set_new (out, "placement", placement);
  return out;
}

/* The numa<N> CPU devices in the order of nrm_numa_preference_by_room(),
 * in the places they had in the pool (the isolated and other devices keep
 * theirs). */
static void
order_by_room (const struct nrm_topology *t, struct nrm_pool *p, const uint64_t *free_cpus, const uint64_t *free_cell)
{
  size_t count = json_array_size (p->devices), n = 0;
  cleanup_free size_t *order = nrm_numa_preference_by_room (t, free_cpus, free_cell);
  cleanup_free size_t *slot = xcalloc (count + 1, sizeof (size_t));
  cleanup_free int *node_of = xcalloc (count + 1, sizeof (int));
  cleanup_json json_t *devs = json_deep_copy (p->devices);
  for (size_t i = 0; i < count; i++)
    {
      int ni = nrm_numa_device_index (t, json_string_value (json_object_get (json_array_get (p->devices, i), "name")),
                                      NULL);
      if (ni >= 0)
        {
          node_of[n] = ni;
          slot[n++] = i;
        }
    }
  size_t next = 0;
  for (size_t k = 0; k < t->n_numa; k++)
    for (size_t j = 0; j < n; j++)
      if (node_of[j] == (int) order[k])
        json_array_set (p->devices, slot[next++], json_array_get (devs, slot[j]));
}

hwloc_bitmap_t
nrm_cpu_unheld (const struct nrm_topology *t, json_t *held)
{
  hwloc_bitmap_t held_set = xbitmap_alloc ();
  nrm_cpulist_union_members (held_set, held, "cpus");
  hwloc_bitmap_t free_set = xbitmap_alloc ();
  hwloc_bitmap_andnot (free_set, t->online, held_set);
  hwloc_bitmap_free (held_set);
  return free_set;
}

void
nrm_cpu_room (const struct nrm_topology *t, json_t *held, uint64_t **free_cpus, uint64_t **free_cell)
{
  cleanup_bitmap hwloc_bitmap_t free_set = nrm_cpu_unheld (t, held);
  hwloc_bitmap_andnot (free_set, free_set, t->isolated);
  *free_cpus = xcalloc (t->n_numa + 1, sizeof (uint64_t));
  *free_cell = xcalloc (t->n_numa + 1, sizeof (uint64_t));
  nrm_numa_room (t, free_set, *free_cpus, *free_cell);
}

/* The consumable devices go fullest first (numa mode), so that the
 * scheduler's first fit is a best fit, in one L3 group when some node has
 * room for that (nrm_numa_preference_by_room). */
static int
cpu_pool (void *self, json_t *held, struct nrm_pool *ret, nrm_error_t *err)
{
  struct cpu_driver *d = self;
  if (nrm_cpu_pool (d->t, &d->o, d->s.mode, d->name, ret, err) < 0)
    return -1;
  if (held == NULL || d->s.mode != NRM_CPU_MODE_NUMA)
    return 0;
  cleanup_free uint64_t *free_cpus = NULL, *free_cell = NULL;
  nrm_cpu_room (d->t, held, &free_cpus, &free_cell);
  order_by_room (d->t, ret, free_cpus, free_cell);
  return 0;
}

static void
cpu_free (void *self)
{
  struct cpu_driver *d = self;
  if (d == NULL)
    return;
  cpu_reset (d);
  json_decref (d->devices);
  json_decref (d->names);
  hwloc_bitmap_free (d->taken);
  json_decref (d->foreign);
  pthread_mutex_destroy (&d->foreign_lock);
  free (d->online_path);
  free (d->name);
  free (d);
}

static int
cpu_new (const struct nrm_driver_host *h, void **ret, nrm_error_t *err)
{
  struct nrm_pool pool = { 0 };
  struct cpu_driver *d = xcalloc (1, sizeof (*d));
  d->t = h->topo;
  d->o = *h->node;
  d->name = xstrdup (h->name);
  d->taken = xbitmap_alloc ();
  pthread_mutex_init (&d->foreign_lock, NULL);
  d->foreign = json_object ();
  /* Health follows the online CPUs of this machine, or of the tree under
   * the fsroot when a recorded machine is served. */
  d->sysfs = nrm_driver_host_sysfs (h);
  if (d->sysfs)
    d->online_path = nrm_fsroot_path (h->fsroot, "/sys/devices/system/cpu/online");
  d->fsroot = h->fsroot;
  d->log = h->log;
  d->log_ctx = h->log_ctx;
  nrm_cpu_settings_init (&d->s);
  if (nrm_cpu_settings_read (h->settings, &d->s, err) < 0
      || nrm_cpu_pool (d->t, &d->o, d->s.mode, d->name, &pool, err) < 0
      || nrm_kit_index_pool (&pool, &d->devices, &d->names, err) < 0)
    {
      nrm_pool_done (&pool);
      cpu_free (d);
      return -1;
    }
  nrm_pool_done (&pool);
  *ret = d;
  return 0;
}

const struct nrm_driver_ops nrm_cpu_driver = {
  .abi = NRM_DRIVER_ABI,
  .id = "cpu",
  .default_name = "cpu." NRM_DEFAULT_DOMAIN,
  .summary = "exclusive CPUs by NUMA node, L3 group and core, bound through the cgroup cpuset",
  .new = cpu_new,
  .free = cpu_free,
  .pool = cpu_pool,
  .reset = cpu_reset,
  .prepare = cpu_prepare,
  .restore = cpu_restore,
  .unprepare = cpu_unprepare,
  .health = cpu_health,
  .describe = cpu_describe,
  .node_devices = cpu_node_devices,
};
