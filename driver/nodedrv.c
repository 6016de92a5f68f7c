/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU and memory drivers: they turn allocated devices into concrete
 * CPUs (through the placement engine) and memory nodes. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/placement.h"
#include "driver/devices.h"
#include "driver/nodedrv.h"
#include "driver/quantity.h"
#include "nrm/base/cleanup.h"

struct claim_entry
{
  char *uid;
  hwloc_bitmap_t cpus; /* CPU driver */
  json_t *used;        /* memory driver: device -> bytes */
  struct claim_entry *next;
};

struct nrm_node_driver
{
  bool cpu; /* the CPU driver, else memory */
  const struct nrm_topology *t;
  struct nrm_publish_options o;
  json_t *devices; /* name -> Device, as published */
  json_t *names;   /* device names in order */
  hwloc_bitmap_t taken;
  json_t *used; /* memory: device -> bytes in use */
  struct claim_entry *claims;
  char *online_path;
  unsigned cpu_options; /* node-wide placement options */
  size_t min_shared;    /* allocatable CPUs that must stay shared */
};

static struct claim_entry *
find_claim (struct nrm_node_driver *d, const char *uid)
{
  for (struct claim_entry *c = d->claims; c; c = c->next)
    if (strcmp (c->uid, uid) == 0)
      return c;
  return NULL;
}

static void
drop_claim (struct nrm_node_driver *d, const char *uid)
{
  for (struct claim_entry **p = &d->claims; *p; p = &(*p)->next)
    if (strcmp ((*p)->uid, uid) == 0)
      {
        struct claim_entry *c = *p;
        *p = c->next;
        if (c->cpus)
          hwloc_bitmap_andnot (d->taken, d->taken, c->cpus);
        if (c->used)
          {
            const char *name;
            json_t *v;
            json_object_foreach (c->used, name, v)
            {
              json_int_t cur = json_integer_value (json_object_get (d->used, name));
              json_object_set_new (d->used, name, json_integer (cur - json_integer_value (v)));
            }
          }
        free (c->uid);
        hwloc_bitmap_free (c->cpus);
        json_decref (c->used);
        free (c);
        return;
      }
}

static void
nd_reset (void *self)
{
  struct nrm_node_driver *d = self;
  while (d->claims)
    drop_claim (d, d->claims->uid);
  hwloc_bitmap_zero (d->taken);
  json_object_clear (d->used);
}

static json_t *
nd_devices (void *self)
{
  struct nrm_node_driver *d = self;
  return json_incref (d->names);
}

/* --- CPU driver ------------------------------------------------------------- */

/* The CPUs a device stands for: a NUMA node, an L3 group or a core. */
static hwloc_bitmap_t
device_cpus (struct nrm_node_driver *d, const char *name)
{
  const struct nrm_topology *t = d->t;
  unsigned id;
  char tail;
  hwloc_bitmap_t set = hwloc_bitmap_alloc ();
  if (set == NULL)
    return NULL;
  for (size_t i = 0; i < t->n_numa; i++)
    {
      cleanup_bitmap hwloc_bitmap_t a = nrm_topology_node_allocatable (t, i);
      hwloc_bitmap_or (set, set, a);
    }
  bool isolated = false;
  int i = nrm_numa_device_index (t, name, &isolated);
  if (i >= 0)
    {
      cleanup_bitmap hwloc_bitmap_t a = nrm_topology_node_allocatable (t, (size_t) i);
      if (a)
        hwloc_bitmap_and (set, set, a);
      else
        hwloc_bitmap_zero (set);
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

static int
consumed_amount (const struct nrm_alloc_result *r, const char *key, nrm_quantity_t dflt, nrm_quantity_t *ret,
                 nrm_error_t *err)
{
  json_t *v = json_object_get (r->consumed, key);
  if (v == NULL)
    {
      *ret = dflt;
      return 0;
    }
  if (!json_is_string (v) || nrm_quantity_parse (json_string_value (v), ret, err) < 0)
    return nrm_error_set (err, EINVAL, "device %s: consumedCapacity `%s` is not a quantity", r->device, key);
  if (*ret <= 0)
    return nrm_error_set (err, EINVAL, "device %s: consumedCapacity `%s` must be positive", r->device, key);
  return 0;
}

static char *
mems_of (const struct nrm_topology *t, hwloc_const_bitmap_t cpus)
{
  cleanup_bitmap hwloc_bitmap_t nodes = hwloc_bitmap_alloc ();
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

static void
env_var (json_t *env, const char *name, const char *uid, const char *value)
{
  char *s = NULL;
  if (asprintf (&s, "%s=%s", name, value) >= 0)
    json_array_append_new (env, json_string (s));
  free (s);
  /* A per-claim name too, for containers with several claims. */
  char key[160];
  snprintf (key, sizeof (key), "%s_%s", name, uid);
  for (char *c = key; *c; c++)
    *c = *c == '-' ? '_' : (char) (*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
  if (asprintf (&s, "%s=%s", key, value) >= 0)
    json_array_append_new (env, json_string (s));
  free (s);
}

/* Placement settings of one request: the node's options, then the claim's
 * opaque configuration for this driver (class first, claim last; a later
 * entry replaces what an earlier one set). */
struct cpu_settings
{
  unsigned options;
  char cpu_kind[16];
  bool shared; /* sharedCPUs: the container runs on the shared pool too */
};

static bool
names_request (json_t *requests, const char *request)
{
  size_t i, len = strcspn (request, "/");
  json_t *r;
  if (json_array_size (requests) == 0)
    return true;
  json_array_foreach (requests, i, r)
  {
    const char *name = json_string_value (r);
    if (name && (strcmp (name, request) == 0 || (strlen (name) == len && strncmp (name, request, len) == 0)))
      return true;
  }
  return false;
}

static int
cpu_settings (struct nrm_node_driver *d, json_t *config, const char *request, struct cpu_settings *cs, nrm_error_t *err)
{
  size_t i;
  json_t *entry;
  memset (cs, 0, sizeof (*cs));
  cs->options = d->cpu_options;
  json_array_foreach (config, i, entry)
  {
    json_t *params = json_object_get (json_object_get (entry, "opaque"), "parameters");
    const char *key;
    json_t *v;
    if (!names_request (json_object_get (entry, "requests"), request))
      continue;
    if (!json_is_object (params))
      return nrm_error_set (err, EINVAL, "opaque configuration %zu: parameters must be an object", i);
    const char *api = json_string_value (json_object_get (params, "apiVersion"));
    const char *kind = json_string_value (json_object_get (params, "kind"));
    if (api == NULL || strcmp (api, "cpu.nrm.io/v1alpha1") != 0 || kind == NULL || strcmp (kind, "CPUConfig") != 0)
      return nrm_error_set (err, EINVAL,
                            "opaque configuration %zu: expected apiVersion cpu.nrm.io/v1alpha1, kind CPUConfig", i);
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
      else
        return nrm_error_set (err, EINVAL, "opaque configuration %zu: unknown field `%s`", i, key);
    }
  }
  return 0;
}

static int
cpu_prepare (struct nrm_node_driver *d, const char *uid, const struct nrm_alloc_result *r, size_t n, json_t *config,
             struct nrm_prepared *out, nrm_error_t *err)
{
  cleanup_bitmap hwloc_bitmap_t claim = hwloc_bitmap_alloc ();
  bool shared = false;
  for (size_t i = 0; i < n; i++)
    {
      json_t *dev = json_object_get (d->devices, r[i].device);
      if (dev == NULL)
        return nrm_error_set (err, ENODEV, "unknown device `%s` in pool `%s`", r[i].device, r[i].pool);
      struct cpu_settings rs;
      if (cpu_settings (d, config, r[i].request, &rs, err) < 0)
        return -1;
      shared |= rs.shared;
      cleanup_bitmap hwloc_bitmap_t cpus = device_cpus (d, r[i].device);
      if (json_is_true (json_object_get (dev, "allowMultipleAllocations")))
        {
          nrm_quantity_t q;
          if (consumed_amount (&r[i], "cpus", NRM_QUANTITY_ONE, &q, err) < 0)
            return -1;
          if (q % NRM_QUANTITY_ONE != 0)
            return nrm_error_set (err, EINVAL, "device %s: a fraction of a CPU cannot be exclusive", r[i].device);
          struct cpu_settings cs;
          if (cpu_settings (d, config, r[i].request, &cs, err) < 0)
            return -1;
          struct nrm_cpu_request req
              = { .count = (size_t) (q / NRM_QUANTITY_ONE),
                  .within = cpus,
                  .options = cs.options,
                  .cpu_kind = cs.cpu_kind[0] ? cs.cpu_kind : NULL,
                  .isolated = hwloc_bitmap_isincluded (cpus, d->t->isolated) && !hwloc_bitmap_iszero (cpus) };
          cleanup_bitmap hwloc_bitmap_t free_set = hwloc_bitmap_dup (d->t->online);
          cleanup_bitmap hwloc_bitmap_t got = hwloc_bitmap_alloc ();
          hwloc_bitmap_andnot (free_set, free_set, d->taken);
          hwloc_bitmap_andnot (free_set, free_set, claim);
          if (nrm_place_cpus (d->t, free_set, &req, got, err) < 0)
            return nrm_error_wrap (err, "device %s", r[i].device);
          hwloc_bitmap_or (claim, claim, got);
        }
      else
        {
          if (hwloc_bitmap_intersects (cpus, d->taken) || hwloc_bitmap_intersects (cpus, claim))
            return nrm_error_set (err, EBUSY, "device %s: some of its CPUs are already in use", r[i].device);
          hwloc_bitmap_or (claim, claim, cpus);
        }
    }
  /* Never hand out the last shared CPUs: every other pod runs there. */
  if (d->min_shared > 0)
    {
      cleanup_bitmap hwloc_bitmap_t left = hwloc_bitmap_alloc ();
      for (size_t i = 0; i < d->t->n_numa; i++)
        {
          cleanup_bitmap hwloc_bitmap_t a = nrm_topology_node_allocatable (d->t, i);
          hwloc_bitmap_or (left, left, a);
        }
      hwloc_bitmap_andnot (left, left, d->t->isolated);
      hwloc_bitmap_andnot (left, left, d->taken);
      hwloc_bitmap_andnot (left, left, claim);
      if ((size_t) hwloc_bitmap_weight (left) < d->min_shared)
        return nrm_error_set (err, ENOSPC, "this claim would leave %d shared CPU%s, fewer than the minimum of %zu",
                              hwloc_bitmap_weight (left), hwloc_bitmap_weight (left) == 1 ? "" : "s", d->min_shared);
    }
  cleanup_free char *list = nrm_cpulist_format (claim), *mems = mems_of (d->t, claim);
  struct claim_entry *c = calloc (1, sizeof (*c));
  if (c == NULL || list == NULL || mems == NULL)
    {
      free (c);
      return nrm_error_set (err, ENOMEM, "out of memory");
    }
  c->uid = strdup (uid);
  c->cpus = hwloc_bitmap_dup (claim);
  c->next = d->claims;
  d->claims = c;
  hwloc_bitmap_or (d->taken, d->taken, claim);
  out->state = json_pack ("{s:s, s:s}", "cpus", list, "mems", mems);
  if (shared)
    json_object_set_new (out->state, "sharedCPUs", json_true ());
  out->env = json_array ();
  env_var (out->env, "NRM_CPUS", uid, list);
  env_var (out->env, "NRM_CPU_NODES", uid, mems);
  /* A mixed claim: the hook and the reconciler add the shared pool to the
   * container's cpuset; NRM_CPUS stays the exclusive part. */
  if (shared)
    env_var (out->env, "NRM_SHARED_CPUS", uid, "true");
  return 0;
}

static int
cpu_restore (struct nrm_node_driver *d, const char *uid, json_t *state, nrm_error_t *err)
{
  hwloc_bitmap_t cpus = NULL;
  const char *list = json_string_value (json_object_get (state, "cpus"));
  if (list == NULL || nrm_cpulist_parse (list, &cpus, err) < 0)
    return nrm_error_set (err, EINVAL, "state has no valid `cpus`");
  if (hwloc_bitmap_intersects (cpus, d->taken))
    {
      hwloc_bitmap_free (cpus);
      return nrm_error_set (err, EEXIST, "CPUs %s are held by another claim", list);
    }
  struct claim_entry *c = calloc (1, sizeof (*c));
  c->uid = strdup (uid);
  c->cpus = cpus;
  c->next = d->claims;
  d->claims = c;
  hwloc_bitmap_or (d->taken, d->taken, cpus);
  return 0;
}

/* --- memory driver ------------------------------------------------------------ */

static int
device_capacity (json_t *dev, const char **key, nrm_quantity_t *cap)
{
  json_t *caps = json_object_get (dev, "capacity");
  *key = json_object_get (caps, "memory") ? "memory" : "hugepages";
  nrm_error_t e = NULL;
  int r = nrm_quantity_parse (json_string_value (json_object_get (json_object_get (caps, *key), "value")), cap, &e);
  nrm_error_release (&e);
  return r;
}

/* Records that a claim holds these bytes (device -> bytes) of memory devices. */
static void
hold_memory (struct nrm_node_driver *d, const char *uid, json_t *bytes)
{
  const char *name;
  json_t *v;
  json_object_foreach (bytes, name, v)
  {
    json_int_t cur = json_integer_value (json_object_get (d->used, name));
    json_object_set_new (d->used, name, json_integer (cur + json_integer_value (v)));
  }
  struct claim_entry *c = calloc (1, sizeof (*c));
  c->uid = strdup (uid);
  c->used = json_incref (bytes);
  c->next = d->claims;
  d->claims = c;
}

/* Opaque MemoryConfig: whether the claimed ordinary memory also becomes
 * the container's memory.max (limit) and memory.min (guarantee). */
static int
memory_settings (json_t *config, const struct nrm_alloc_result *r, size_t n, bool *limit, bool *guarantee,
                 nrm_error_t *err)
{
  size_t i;
  json_t *entry;
  *limit = *guarantee = false;
  json_array_foreach (config, i, entry)
  {
    /* An entry for named requests applies when one of ours is named. */
    bool ours = false;
    for (size_t k = 0; k < n; k++)
      ours |= names_request (json_object_get (entry, "requests"), r[k].request);
    if (!ours)
      continue;
    json_t *params = json_object_get (json_object_get (entry, "opaque"), "parameters");
    const char *key;
    json_t *v;
    const char *api = json_string_value (json_object_get (params, "apiVersion"));
    const char *kind = json_string_value (json_object_get (params, "kind"));
    if (!json_is_object (params) || api == NULL || strcmp (api, "memory.nrm.io/v1alpha1") != 0 || kind == NULL
        || strcmp (kind, "MemoryConfig") != 0)
      return nrm_error_set (
          err, EINVAL, "opaque configuration %zu: expected apiVersion memory.nrm.io/v1alpha1, kind MemoryConfig", i);
    json_object_foreach (params, key, v)
    {
      if (strcmp (key, "apiVersion") == 0 || strcmp (key, "kind") == 0)
        continue;
      if (strcmp (key, "limit") && strcmp (key, "guarantee"))
        return nrm_error_set (err, EINVAL, "opaque configuration %zu: unknown field `%s`", i, key);
      if (!json_is_boolean (v))
        return nrm_error_set (err, EINVAL, "opaque configuration %zu: `%s` must be a boolean", i, key);
      *(strcmp (key, "limit") == 0 ? limit : guarantee) = json_is_true (v);
    }
  }
  return 0;
}

/* The kernel's name of a huge page size in hugetlb files: 2MB, 1GB, 64KB. */
static void
hugetlb_name (const char *page_size, char *buf, size_t len)
{
  snprintf (buf, len, "%.*sB", (int) strcspn (page_size, "i"), page_size);
}

static int
mem_prepare (struct nrm_node_driver *d, const char *uid, const struct nrm_alloc_result *r, size_t n, json_t *config,
             struct nrm_prepared *out, nrm_error_t *err)
{
  cleanup_json json_t *add = json_object ();
  cleanup_json json_t *hugetlb = json_object (); /* kernel size name -> bytes */
  cleanup_bitmap hwloc_bitmap_t nodes = hwloc_bitmap_alloc ();
  json_int_t ordinary = 0;
  bool limit, guarantee;
  if (memory_settings (config, r, n, &limit, &guarantee, err) < 0)
    return -1;
  for (size_t i = 0; i < n; i++)
    {
      json_t *dev = json_object_get (d->devices, r[i].device);
      const char *key;
      nrm_quantity_t cap, q;
      if (dev == NULL)
        return nrm_error_set (err, ENODEV, "unknown device `%s` in pool `%s`", r[i].device, r[i].pool);
      if (device_capacity (dev, &key, &cap) < 0)
        return nrm_error_set (err, EINVAL, "device %s has no capacity", r[i].device);
      /* Without a consumed amount the request took the default, one step. */
      json_t *policy = json_object_get (json_object_get (json_object_get (dev, "capacity"), key), "requestPolicy");
      nrm_quantity_t dflt;
      nrm_error_t e = NULL;
      if (nrm_quantity_parse (json_string_value (json_object_get (policy, "default")), &dflt, &e) < 0)
        {
          nrm_error_release (&e);
          dflt = cap;
        }
      if (consumed_amount (&r[i], key, dflt, &q, err) < 0)
        return -1;
      json_int_t bytes = (json_int_t) (q / NRM_QUANTITY_ONE);
      json_int_t used = json_integer_value (json_object_get (d->used, r[i].device))
                        + json_integer_value (json_object_get (add, r[i].device));
      if ((nrm_quantity_t) (used + bytes) * NRM_QUANTITY_ONE > cap)
        return nrm_error_set (err, ENOSPC,
                              "device %s: %" JSON_INTEGER_FORMAT " bytes asked, %" JSON_INTEGER_FORMAT
                              " of %" JSON_INTEGER_FORMAT " free",
                              r[i].device, bytes, (json_int_t) (cap / NRM_QUANTITY_ONE) - used,
                              (json_int_t) (cap / NRM_QUANTITY_ONE));
      json_object_set_new (add, r[i].device,
                           json_integer (json_integer_value (json_object_get (add, r[i].device)) + bytes));
      json_int_t node = json_integer_value (
          json_object_get (json_object_get (json_object_get (dev, "attributes"), "numaNode"), "int"));
      hwloc_bitmap_set (nodes, (unsigned) node);
      if (strcmp (key, "hugepages") == 0)
        {
          char kname[16];
          const char *ps = json_string_value (
              json_object_get (json_object_get (json_object_get (dev, "attributes"), "pageSize"), "string"));
          hugetlb_name (ps ? ps : "?", kname, sizeof (kname));
          json_object_set_new (hugetlb, kname,
                               json_integer (json_integer_value (json_object_get (hugetlb, kname)) + bytes));
        }
      else
        ordinary += bytes;
    }
  const char *name;
  json_t *v;
  hold_memory (d, uid, add);
  cleanup_free char *mems = nrm_cpulist_format (nodes);
  out->state = json_pack ("{s:O, s:s}", "devices", add, "mems", mems);
  out->env = json_array ();
  env_var (out->env, "NRM_MEMS", uid, mems);
  /* Limits the hook writes: huge pages always (a claim is what the
   * container may use), ordinary memory when the claim asks for it. */
  char num[32];
  snprintf (num, sizeof (num), "%" JSON_INTEGER_FORMAT, ordinary);
  if (limit && ordinary > 0)
    env_var (out->env, "NRM_MEMORY_MAX", uid, num);
  if (guarantee && ordinary > 0)
    env_var (out->env, "NRM_MEMORY_MIN", uid, num);
  json_object_foreach (hugetlb, name, v)
  {
    char var[48];
    snprintf (var, sizeof (var), "NRM_HUGETLB_%s", name);
    snprintf (num, sizeof (num), "%" JSON_INTEGER_FORMAT, json_integer_value (v));
    env_var (out->env, var, uid, num);
  }
  return 0;
}

static int
mem_restore (struct nrm_node_driver *d, const char *uid, json_t *state, nrm_error_t *err)
{
  json_t *devs = json_object_get (state, "devices");
  if (!json_is_object (devs))
    return nrm_error_set (err, EINVAL, "state has no `devices`");
  hold_memory (d, uid, devs);
  return 0;
}

/* --- ops -------------------------------------------------------------------------- */

static int
nd_prepare (void *self, const char *uid, const struct nrm_alloc_result *r, size_t n, json_t *config,
            struct nrm_prepared *out, nrm_error_t *err)
{
  struct nrm_node_driver *d = self;
  if (find_claim (d, uid))
    return nrm_error_set (err, EEXIST, "claim %s is already prepared", uid);
  return d->cpu ? cpu_prepare (d, uid, r, n, config, out, err) : mem_prepare (d, uid, r, n, config, out, err);
}

static int
nd_restore (void *self, const char *uid, json_t *state, nrm_error_t *err)
{
  struct nrm_node_driver *d = self;
  if (find_claim (d, uid))
    return 0;
  return d->cpu ? cpu_restore (d, uid, state, err) : mem_restore (d, uid, state, err);
}

static void
nd_unprepare (void *self, const char *uid, json_t *state)
{
  (void) state;
  drop_claim (self, uid);
}

static enum nrm_health
nd_health (void *self, const char *device, char **message)
{
  struct nrm_node_driver *d = self;
  if (!d->cpu || d->online_path == NULL)
    return NRM_HEALTH_HEALTHY;
  char buf[4096];
  FILE *f = fopen (d->online_path, "re");
  if (f == NULL || fgets (buf, sizeof (buf), f) == NULL)
    {
      if (f)
        fclose (f);
      if (asprintf (message, "cannot read %s", d->online_path) < 0)
        *message = NULL;
      return NRM_HEALTH_UNKNOWN;
    }
  fclose (f);
  hwloc_bitmap_t online = NULL;
  nrm_error_t err = NULL;
  if (nrm_cpulist_parse (buf, &online, &err) < 0)
    {
      if (asprintf (message, "%s", nrm_error_msg (err)) < 0)
        *message = NULL;
      nrm_error_release (&err);
      return NRM_HEALTH_UNKNOWN;
    }
  cleanup_bitmap hwloc_bitmap_t cpus = device_cpus (d, device);
  hwloc_bitmap_andnot (cpus, cpus, online);
  hwloc_bitmap_free (online);
  if (hwloc_bitmap_iszero (cpus))
    return NRM_HEALTH_HEALTHY;
  cleanup_free char *gone = nrm_cpulist_format (cpus);
  if (asprintf (message, "CPUs %s went offline", gone ? gone : "?") < 0)
    *message = NULL;
  return NRM_HEALTH_UNHEALTHY;
}

void
nrm_node_driver_set_cpu_options (struct nrm_node_driver *d, unsigned options, size_t min_shared)
{
  d->cpu_options = options;
  d->min_shared = min_shared;
}

int
nrm_node_driver_watch_online (struct nrm_node_driver *d, const char *online_path, nrm_error_t *err)
{
  free (d->online_path);
  d->online_path = NULL;
  if (online_path && (d->online_path = strdup (online_path)) == NULL)
    return nrm_error_set (err, ENOMEM, "out of memory");
  return 0;
}

const struct nrm_driver_ops nrm_node_driver_ops = {
  .health = nd_health,
  .devices = nd_devices,
  .reset = nd_reset,
  .prepare = nd_prepare,
  .restore = nd_restore,
  .unprepare = nd_unprepare,
};

int
nrm_node_driver_new (const struct nrm_topology *t, const struct nrm_publish_options *o, bool cpu,
                     struct nrm_node_driver **ret, nrm_error_t *err)
{
  struct nrm_pool pool = { 0 };
  if ((cpu ? nrm_cpu_pool (t, o, &pool, err) : nrm_memory_pool (t, o, &pool, err)) < 0)
    return -1;
  struct nrm_node_driver *d = calloc (1, sizeof (*d));
  if (d == NULL)
    {
      nrm_pool_done (&pool);
      return nrm_error_set (err, ENOMEM, "out of memory");
    }
  d->cpu = cpu;
  d->t = t;
  d->o = *o;
  d->devices = json_object ();
  d->names = json_array ();
  d->taken = hwloc_bitmap_alloc ();
  d->used = json_object ();
  size_t i;
  json_t *dev;
  json_array_foreach (pool.devices, i, dev)
  {
    const char *name = json_string_value (json_object_get (dev, "name"));
    json_object_set (d->devices, name, dev);
    json_array_append_new (d->names, json_string (name));
  }
  nrm_pool_done (&pool);
  *ret = d;
  return 0;
}

void
nrm_node_driver_free (struct nrm_node_driver *d)
{
  if (d == NULL)
    return;
  nd_reset (d);
  json_decref (d->devices);
  json_decref (d->names);
  json_decref (d->used);
  hwloc_bitmap_free (d->taken);
  free (d->online_path);
  free (d);
}
