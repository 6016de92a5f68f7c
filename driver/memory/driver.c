/* SPDX-License-Identifier: Apache-2.0 */
/* The memory driver: memory and huge pages of NUMA nodes, held by byte
 * count, passed to the container as memory nodes and limits. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/env.h"
#include "driver/driver.h"
#include "driver/kit.h"
#include "driver/memory/health.h"
#include "driver/memory/memory.h"
#include "memory/policy.h"
#include "driver/memory/ondemand.h"
#include "driver/names.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/quantity.h"
#include "nrm/base/text.h"
#include "nrm/base/xalloc.h"

struct claim_entry
{
  char *uid;
  json_t *used; /* device -> bytes */
  struct claim_entry *next;
};

struct memory_driver
{
  const struct nrm_topology *t;
  struct nrm_publish_options o;
  uint64_t granularity; /* bytes: the step of consumable memory (memory.granularity) */
  char *name;
  json_t *devices; /* name -> Device, as last published */
  json_t *names;   /* device names in pool order, at the start */
  struct nrm_memory_health *health;
  json_t *used; /* device -> bytes in use */
  struct claim_entry *claims;
  struct nrm_ondemand *od; /* huge pages raised on demand, or NULL */
  /* Every operation holds it: bind() and the health pass run beside the
   * kubelet's calls. */
  pthread_mutex_t lock;
};

static struct claim_entry *
find_claim (struct memory_driver *d, const char *uid)
{
  for (struct claim_entry *c = d->claims; c; c = c->next)
    if (strcmp (c->uid, uid) == 0)
      return c;
  return NULL;
}

/* Adds (sign 1) or removes (-1) a claim's bytes from what is in use. */
static void
count (struct memory_driver *d, json_t *bytes, json_int_t sign)
{
  const char *name;
  json_t *v;
  json_object_foreach (bytes, name, v)
  {
    json_int_t cur = json_integer_value (json_object_get (d->used, name));
    json_object_set_new (d->used, name, json_integer (cur + sign * json_integer_value (v)));
  }
}

/* Records that a claim holds these bytes (device -> bytes) of memory devices. */
static int
hold_memory (struct memory_driver *d, const char *uid, json_t *bytes, nrm_error_t *err)
{
  struct claim_entry *c = xcalloc (1, sizeof (*c));
  c->uid = xstrdup (uid);
  count (d, bytes, 1);
  c->used = json_incref (bytes);
  c->next = d->claims;
  d->claims = c;
  return 0;
}

static void
drop_claim (struct memory_driver *d, const char *uid)
{
  for (struct claim_entry **p = &d->claims; *p; p = &(*p)->next)
    if (strcmp ((*p)->uid, uid) == 0)
      {
        struct claim_entry *c = *p;
        *p = c->next;
        count (d, c->used, -1);
        free (c->uid);
        json_decref (c->used);
        free (c);
        return;
      }
}

static void
mem_reset (void *self)
{
  struct memory_driver *d = self;
  while (d->claims)
    drop_claim (d, d->claims->uid);
  json_object_clear (d->used);
}

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

/* Opaque MemoryConfig: whether the claimed ordinary memory also becomes
 * the container's memory.max (limit) and memory.min (guarantee), and the
 * memory policy over the claim's nodes. */
struct memory_config
{
  bool limit, guarantee;
  enum nrm_mempolicy policy;
};

static int
memory_settings (const struct nrm_claim_view *c, struct memory_config *mc, nrm_error_t *err)
{
  size_t i;
  json_t *entry;
  *mc = (struct memory_config){ .policy = NRM_MEMPOLICY_BIND };
  json_array_foreach (c->config, i, entry)
  {
    /* An entry for named requests applies when one of ours is named. */
    bool ours = false;
    for (size_t k = 0; k < c->n_results; k++)
      ours |= nrm_kit_names_request (json_object_get (entry, "requests"), c->results[k].request);
    if (!ours)
      continue;
    json_t *params = json_object_get (json_object_get (entry, "opaque"), "parameters"), *v;
    const char *key;
    if (!json_is_object (params))
      return nrm_error_set (
          err, EINVAL, "opaque configuration %zu: expected apiVersion memory.nrm.io/v1alpha1, kind MemoryConfig", i);
    if (nrm_kit_opaque_params (entry, i, "memory.nrm.io/v1alpha1", "MemoryConfig", &params, err) < 0)
      return -1;
    json_object_foreach (params, key, v)
    {
      if (strcmp (key, "apiVersion") == 0 || strcmp (key, "kind") == 0)
        continue;
      if (strcmp (key, "policy") == 0)
        {
          if (!json_is_string (v))
            return nrm_error_set (err, EINVAL, "opaque configuration %zu: `policy` must be a string", i);
          if (nrm_mempolicy_parse (json_string_value (v), &mc->policy, err) < 0)
            return nrm_error_wrap (err, "opaque configuration %zu", i);
          continue;
        }
      if (strcmp (key, "limit") && strcmp (key, "guarantee"))
        return nrm_error_set (err, EINVAL, "opaque configuration %zu: unknown field `%.64s`", i, key);
      if (!json_is_boolean (v))
        return nrm_error_set (err, EINVAL, "opaque configuration %zu: `%s` must be a boolean", i, key);
      *(strcmp (key, "limit") == 0 ? &mc->limit : &mc->guarantee) = json_is_true (v);
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

/* The devices as last published (a new reference). */
static json_t *
published (struct memory_driver *d)
{
  return json_incref (d->devices);
}

static json_t *
attr (json_t *dev, const char *name, const char *type)
{
  return json_object_get (json_object_get (json_object_get (dev, "attributes"), name), type);
}

/* The pool as it is now: memory offlined or added since the start
 * (health), and the pools raised on demand. */
static int
build_pool (struct memory_driver *d, struct nrm_pool *ret, nrm_error_t *err)
{
  cleanup_free int64_t *change = xcalloc (d->t->n_numa + 1, sizeof (*change));
  if (d->health)
    nrm_memory_health_online_change (d->health, change);
  return nrm_memory_pool_online (d->t, &d->o, d->granularity, d->name, d->od, change, ret, err);
}

/* The devices again, after a pool was raised or lowered: the memory left
 * outside the huge page pools changed. */
static void
reindex (struct memory_driver *d)
{
  struct nrm_pool pool = { 0 };
  json_t *devices = NULL, *names = NULL;
  nrm_error_t e = NULL;
  if (build_pool (d, &pool, &e) == 0 && nrm_kit_index_pool (&pool, &devices, &names, &e) == 0)
    {
      json_decref (d->devices);
      json_decref (names);
      d->devices = devices;
    }
  nrm_error_release (&e);
  nrm_pool_done (&pool);
}

/* Raises the pools the claim's on-demand huge pages (bytes: device ->
 * bytes) lack; a raise must fit in the memory of the node that no claim
 * holds. */
static int
take_ondemand (struct memory_driver *d, const char *uid, json_t *bytes, nrm_error_t *err)
{
  const char *name;
  json_t *v;
  bool any = false;
  json_object_foreach (bytes, name, v) any |= nrm_ondemand_device (d->od, name);
  if (!any)
    return 0;
  cleanup_free uint64_t *unclaimed = xcalloc (d->t->n_numa + 1, sizeof (uint64_t));
  for (size_t i = 0; i < d->t->n_numa; i++)
    {
      char dev[NRM_NUMA_NAME_MAX];
      const char *key;
      nrm_quantity_t cap;
      nrm_numa_name (dev, sizeof (dev), d->t->numa[i].os_index, NRM_NUMA_NAME_NODE, NULL);
      json_t *x = json_object_get (d->devices, dev);
      json_int_t used = json_integer_value (json_object_get (d->used, dev));
      if (x && device_capacity (x, &key, &cap) == 0 && (json_int_t) (cap / NRM_QUANTITY_ONE) > used)
        unclaimed[i] = (uint64_t) ((json_int_t) (cap / NRM_QUANTITY_ONE) - used);
    }
  int r = nrm_ondemand_take (d->od, uid, bytes, unclaimed, err);
  reindex (d);
  return r;
}

/* Binding conditions of the on-demand huge-page devices: True once their
 * pools hold the claim's pages, or the failure condition with why not. */
static int
mem_bind (void *self, const struct nrm_claim_view *c, json_t **ret, nrm_error_t *err)
{
  struct memory_driver *d = self;
  cleanup_json json_t *bytes = json_object ();
  nrm_error_t e = NULL;
  for (size_t i = 0; i < c->n_results; i++)
    {
      const struct nrm_alloc_result *r = &c->results[i];
      json_t *dev = json_object_get (d->devices, r->device);
      const char *key;
      nrm_quantity_t cap, q;
      if (!nrm_ondemand_device (d->od, r->device) || dev == NULL || device_capacity (dev, &key, &cap) < 0)
        continue;
      if (nrm_kit_consumed_checked (r, dev, key, &q, err) < 0)
        return -1;
      json_object_set_new (
          bytes, r->device,
          json_integer (json_integer_value (json_object_get (bytes, r->device)) + (json_int_t) (q / NRM_QUANTITY_ONE)));
    }
  /* Another process holds the journal for a moment: the binder tries again. */
  if (take_ondemand (d, c->uid, bytes, &e) < 0 && e->status == EBUSY)
    {
      *err = e;
      return -1;
    }
  json_t *out = json_array ();
  for (size_t i = 0; i < c->n_results; i++)
    {
      const struct nrm_alloc_result *r = &c->results[i];
      if (json_object_get (bytes, r->device) == NULL)
        continue;
      char msg[1024];
      snprintf (msg, sizeof (msg), "%s", e ? nrm_error_msg (e) : "the node's huge page pool holds the claim's pages");
      json_t *cond = json_pack ("{s:s, s:s, s:s, s:s}", "type", nrm_ondemand_condition (d->od, e != NULL), "status",
                                "True", "reason", e ? "NotEnoughHugePages" : "Ready", "message", msg);
      json_t *st = json_pack ("{s:s, s:s, s:s, s:[o]}", "driver", d->name, "pool", r->pool, "device", r->device,
                              "conditions", cond);
      if (r->share_id)
        json_object_set_new (st, "shareID", json_string (r->share_id));
      json_array_append_new (out, st);
    }
  nrm_error_release (&e);
  *ret = out;
  return 0;
}

int
nrm_memory_settings_read (json_t *section, uint64_t *granularity, nrm_error_t *err)
{
  const char *key;
  json_t *v;
  if (section && !json_is_object (section))
    return nrm_error_set (err, EINVAL, "key `memory` must be an object, not %s", nrm_json_type_name (section));
  json_object_foreach (section, key, v)
  {
    if (strcmp (key, "hugepagesOnDemand") != 0 && strcmp (key, "health") != 0 && strcmp (key, "granularity") != 0)
      return nrm_error_set (
          err, EINVAL, "unknown key `memory.%.64s` (known: granularity, driverName, hugepagesOnDemand, health)", key);
  }
  json_t *g = json_object_get (section, "granularity");
  uint64_t bytes;
  if (g == NULL)
    return 0;
  if (!json_is_string (g))
    return nrm_error_set (err, EINVAL, "key `memory.granularity` must be a quantity string, not %s",
                          nrm_json_type_name (g));
  if (nrm_quantity_parse_bytes (json_string_value (g), &bytes, err) < 0)
    return nrm_error_wrap (err, "key `memory.granularity`");
  if (bytes == 0)
    return nrm_error_set (err, EINVAL, "key `memory.granularity` must be positive");
  *granularity = bytes;
  return 0;
}

/* The memory driver's own settings; health.c reads memory.health. */
static int
check_settings (const struct nrm_driver_host *h, struct memory_driver *d, nrm_error_t *err)
{
  d->granularity = NRM_MEMORY_GRANULARITY;
  if (nrm_memory_settings_read (h->settings, &d->granularity, err) < 0)
    return -1;
  return nrm_ondemand_new (h, json_object_get (h->settings, "hugepagesOnDemand"), &d->od, err);
}

static int
mem_prepare (void *self, const struct nrm_claim_view *c, struct nrm_prepared *out, nrm_error_t *err)
{
  struct memory_driver *d = self;
  cleanup_json json_t *devices = published (d);
  cleanup_json json_t *add = json_object ();
  cleanup_json json_t *hugetlb = json_object (); /* kernel size name -> bytes */
  cleanup_json json_t *env = json_array ();
  cleanup_bitmap hwloc_bitmap_t nodes = xbitmap_alloc ();
  json_int_t ordinary = 0;
  struct memory_config mc;
  enum nrm_mempolicy_enforcer by;
  if (find_claim (d, c->uid))
    return nrm_error_set (err, EEXIST, "claim %s is already prepared", c->uid);
  if (memory_settings (c, &mc, err) < 0)
    return -1;
  bool limit = mc.limit, guarantee = mc.guarantee;
  /* One claim for the pods of a group: cgroup v2 has no parent shared by
   * those pods, and a limit or guarantee per container would multiply the
   * claim by the number of containers. */
  const char *group = nrm_kit_pod_group (c->claim);
  if (group && (limit || guarantee))
    return nrm_error_set (err, EINVAL,
                          "the claim is shared by the pods of PodGroup `%.63s`: a MemoryConfig %s would apply to "
                          "each of their containers, not to the claim; leave it out (the memory stays reserved "
                          "for the group and its nodes bind every container)",
                          group, limit ? "limit" : "guarantee");
  for (size_t i = 0; i < c->n_results; i++)
    {
      const struct nrm_alloc_result *r = &c->results[i];
      json_t *dev = json_object_get (devices, r->device);
      const char *key;
      nrm_quantity_t cap, q;
      if (dev == NULL)
        return nrm_error_set (err, ENODEV, "unknown device `%s` in pool `%s`", r->device, r->pool);
      if (device_capacity (dev, &key, &cap) < 0)
        return nrm_error_set (err, EINVAL, "device %s has no capacity", r->device);
      /* At most the device, within its steps: the count below cannot wrap. */
      if (nrm_kit_consumed_checked (r, dev, key, &q, err) < 0)
        return -1;
      if (q % NRM_QUANTITY_ONE != 0)
        return nrm_error_set (err, EINVAL, "device %s: a fraction of a byte cannot be claimed", r->device);
      json_int_t bytes = (json_int_t) (q / NRM_QUANTITY_ONE);
      json_int_t used = json_integer_value (json_object_get (d->used, r->device))
                        + json_integer_value (json_object_get (add, r->device));
      if ((nrm_quantity_t) (used + bytes) * NRM_QUANTITY_ONE > cap)
        return nrm_error_set (err, ENOSPC,
                              "device %s: %" JSON_INTEGER_FORMAT " bytes asked, %" JSON_INTEGER_FORMAT
                              " of %" JSON_INTEGER_FORMAT " free",
                              r->device, bytes, (json_int_t) (cap / NRM_QUANTITY_ONE) - used,
                              (json_int_t) (cap / NRM_QUANTITY_ONE));
      json_object_set_new (add, r->device,
                           json_integer (json_integer_value (json_object_get (add, r->device)) + bytes));
      hwloc_bitmap_set (nodes, (unsigned) json_integer_value (attr (dev, "numaNode", "int")));
      if (strcmp (key, "hugepages") == 0)
        {
          char kname[16];
          const char *ps = json_string_value (attr (dev, "pageSize", "string"));
          hugetlb_name (ps ? ps : "?", kname, sizeof (kname));
          json_object_set_new (hugetlb, kname,
                               json_integer (json_integer_value (json_object_get (hugetlb, kname)) + bytes));
        }
      else
        ordinary += bytes;
    }
  cleanup_free char *mems = nrm_cpulist_format (nodes);
  /* Refused before anything is held: a policy no container can have. */
  if (nrm_mempolicy_container (mc.policy, (size_t) hwloc_bitmap_weight (nodes), &by, err) < 0)
    return nrm_error_wrap (err, "claim %s (memory nodes %s)", c->uid, mems);
  const char *policy = nrm_mempolicy_name[mc.policy], *enforced = by == NRM_MEMPOLICY_BY_KERNEL ? "kernel" : "workload";
  cleanup_json json_t *state
      = json_pack ("{s:O, s:s, s:s, s:s}", "devices", add, "mems", mems, "policy", policy, "enforcedBy", enforced);
  if (nrm_env_add (env, NRM_ENV_MEMS, NULL, c->uid, mems, err) < 0)
    return -1;
  /* The workload reads what it must apply itself (numactl --interleave=all
   * inside the container's cpuset.mems). */
  if (nrm_env_add (env, NRM_ENV_MEMORY_POLICY, NULL, c->uid, policy, err) < 0)
    return -1;
  /* Limits the hook writes (the framework puts them in the environment):
   * huge pages always (a claim is what the container may use), ordinary
   * memory when the claim asks for it. */
  struct nrm_container_limits *lim = &out->edits.limits;
  lim->memory_max = limit ? (uint64_t) ordinary : 0;
  lim->memory_min = guarantee ? (uint64_t) ordinary : 0;
  const char *name;
  json_t *v;
  if (json_object_size (hugetlb) > NRM_HUGETLB_SIZES_MAX)
    return nrm_error_set (err, EINVAL, "claim %s: more than %d huge page sizes", c->uid, NRM_HUGETLB_SIZES_MAX);
  json_object_foreach (hugetlb, name, v)
  {
    snprintf (lim->hugetlb[lim->n_hugetlb].size, sizeof (lim->hugetlb[0].size), "%s", name);
    lim->hugetlb[lim->n_hugetlb++].max = (uint64_t) json_integer_value (v);
  }
  /* On demand: the pools hold the claim's pages before it does (bind()
   * raised them already, unless binding conditions were not used). */
  if (take_ondemand (d, c->uid, add, err) < 0)
    return -1;
  if (hold_memory (d, c->uid, add, err) < 0)
    return -1;
  /* A container reads each device's attributes (node, kind, page size)
   * and the bytes the claim holds of it in its metadata file. */
  json_t *meta = c->metadata ? json_object () : NULL;
  json_object_foreach (meta ? add : NULL, name, v)
  {
    json_t *attrs = json_deep_copy (json_object_get (json_object_get (devices, name), "attributes"));
    if (attrs == NULL)
      continue;
    json_object_set_new (attrs, "bytes", json_pack ("{s:O}", "int", v));
    json_object_set_new (attrs, "memoryPolicy", json_pack ("{s:s}", "string", policy));
    json_object_set_new (attrs, "memoryPolicyEnforcedBy", json_pack ("{s:s}", "string", enforced));
    json_object_set_new (meta, name, attrs);
  }
  out->state = TAKE_PTR (state);
  out->edits.env = TAKE_PTR (env);
  out->edits.commit_hook = true;
  out->metadata = meta;
  return 0;
}

static int
mem_restore (void *self, const char *uid, json_t *state, nrm_error_t *err)
{
  struct memory_driver *d = self;
  json_t *devs = json_object_get (state, "devices");
  if (find_claim (d, uid))
    return 0;
  if (!json_is_object (devs))
    return nrm_error_set (err, EINVAL, "state has no `devices`");
  return hold_memory (d, uid, devs, err);
}

static void
mem_unprepare (void *self, const char *uid, json_t *state)
{
  struct memory_driver *d = self;
  (void) state;
  drop_claim (d, uid);
  if (nrm_ondemand_has (d->od, uid))
    {
      nrm_ondemand_give (d->od, uid);
      reindex (d);
    }
}

/* The page size of a device ("4Ki", "2Mi"), from its name and the
 * machine (so that a restart tells the same), else from its published
 * attributes; NULL when neither says. */
static char *
page_size (struct memory_driver *d, const char *name, unsigned node, enum nrm_numa_name_kind kind)
{
  int i = nrm_topology_numa_index (d->t, node);
  const struct nrm_numa_node *n = i >= 0 ? &d->t->numa[i] : NULL;
  if (n && kind == NRM_NUMA_NAME_NODE && n->base_page)
    return nrm_pagesize_name (n->base_page);
  for (size_t h = 0; n && kind == NRM_NUMA_NAME_HUGEPAGES && h < n->n_hugepages; h++)
    {
      char want[NRM_NUMA_NAME_MAX];
      cleanup_free char *ps = nrm_pagesize_name (n->hugepages[h].size);
      nrm_numa_name (want, sizeof (want), node, kind, ps);
      if (strcmp (want, name) == 0)
        return TAKE_PTR (ps);
    }
  const char *ps = json_string_value (attr (json_object_get (d->devices, name), "pageSize", "string"));
  return ps ? xstrdup (ps) : NULL;
}

/* What the claim holds of each of its devices, for its status (describe's
 * "placement"): the node, the bytes, the page size. */
static json_t *
mem_placement (struct memory_driver *d, json_t *state)
{
  json_t *out = json_object ();
  const char *name;
  json_t *v;
  json_object_foreach (json_object_get (state, "devices"), name, v)
  {
    unsigned node;
    enum nrm_numa_name_kind kind;
    if (!json_is_integer (v))
      continue;
    json_t *p = json_pack ("{s:O}", "bytes", v);
    if (nrm_numa_name_parse (name, &node, &kind))
      {
        cleanup_free char *ps = page_size (d, name, node, kind);
        json_object_set_new (p, "numaNodes", json_pack ("[I]", (json_int_t) node));
        if (ps)
          json_object_set_new (p, "pageSize", json_string (ps));
      }
    json_object_set_new (out, name, p);
  }
  return out;
}

static json_t *
mem_describe (void *self, const char *uid, json_t *state)
{
  struct memory_driver *d = self;
  (void) uid;
  cleanup_json json_t *devices = published (d);
  json_t *out = json_object (), *devs = json_object ();
  const char *name;
  json_t *v;
  if (json_object_get (state, "mems"))
    json_object_set (out, "memoryNodes", json_object_get (state, "mems"));
  /* Claims prepared before policies were recorded are bound. */
  json_object_set_new (out, "memoryPolicy",
                       json_string (json_string_value (json_object_get (state, "policy")) ?: "bind"));
  json_object_foreach (json_object_get (state, "devices"), name, v)
  {
    const char *key;
    nrm_quantity_t cap;
    json_t *dev = json_object_get (devices, name);
    if (dev && json_is_integer (v) && device_capacity (dev, &key, &cap) == 0)
      json_object_set_new (devs, name, json_pack ("{s:O}", key, v));
  }
  json_object_set_new (out, "devices", devs);
  json_object_set_new (out, "placement", mem_placement (d, state));
  return out;
}

static bool
is_held (void *ctx, const char *uid)
{
  return find_claim (ctx, uid) != NULL;
}

/* Memory offlined or added since the start changes numaN's capacity:
 * prepare checks claims against the pool last published. A claim that
 * holds more than the smaller capacity keeps what it holds. */
static int
mem_pool (void *self, json_t *held, struct nrm_pool *ret, nrm_error_t *err)
{
  struct memory_driver *d = self;
  (void) held;
  if (d->od)
    nrm_ondemand_give_stale (d->od, time (NULL), is_held, d);
  if (build_pool (d, ret, err) < 0)
    return -1;
  json_t *devices, *names;
  if (nrm_kit_index_pool (ret, &devices, &names, err) < 0)
    {
      nrm_pool_done (ret);
      return -1;
    }
  json_decref (names);
  json_decref (d->devices);
  d->devices = devices;
  return 0;
}

/* The health report, with a note on each device whose claims hold more
 * than its capacity now (memory went offline under them). */
static int
mem_health (void *self, struct nrm_health_report *ret, nrm_error_t *err)
{
  struct memory_driver *d = self;
  if (nrm_memory_health_report (d->health, d->names, ret, err) < 0)
    return -1;
  for (size_t i = 0; i < ret->n; i++)
    {
      struct nrm_device_health *h = &ret->devices[i];
      json_int_t used = json_integer_value (json_object_get (d->used, h->device));
      json_t *dev = json_object_get (d->devices, h->device);
      const char *key;
      nrm_quantity_t cap = 0;
      if (used <= 0 || (dev && device_capacity (dev, &key, &cap) < 0))
        continue;
      json_int_t have = (json_int_t) (cap / NRM_QUANTITY_ONE);
      if (used <= have)
        continue;
      char *msg = xasprintf ("%s%sclaims hold %" JSON_INTEGER_FORMAT " bytes, more than the %" JSON_INTEGER_FORMAT
                             " published: they keep them",
                             h->message ? h->message : "", h->message ? "; " : "", used, have);
      free (h->message);
      h->message = msg;
    }
  return 0;
}

static int
mem_health_fd (void *self)
{
  return nrm_memory_health_fd (((struct memory_driver *) self)->health);
}

static void
mem_health_event (void *self)
{
  nrm_memory_health_drain (((struct memory_driver *) self)->health);
}

static void
mem_free (void *self)
{
  struct memory_driver *d = self;
  if (d == NULL)
    return;
  mem_reset (d);
  nrm_ondemand_free (d->od);
  nrm_memory_health_free (d->health);
  pthread_mutex_destroy (&d->lock);
  json_decref (d->devices);
  json_decref (d->names);
  json_decref (d->used);
  free (d->name);
  free (d);
}

static int
mem_new (const struct nrm_driver_host *h, void **ret, nrm_error_t *err)
{
  struct nrm_pool pool = { 0 };
  struct memory_driver *d = xcalloc (1, sizeof (*d));
  d->t = h->topo;
  d->o = *h->node;
  d->name = xstrdup (h->name);
  d->used = json_object ();
  pthread_mutex_init (&d->lock, NULL);
  if (check_settings (h, d, err) < 0 || nrm_memory_health_new (h, &d->health, err) < 0)
    {
      mem_free (d);
      return -1;
    }
  if (build_pool (d, &pool, err) < 0 || nrm_kit_index_pool (&pool, &d->devices, &d->names, err) < 0)
    {
      nrm_pool_done (&pool);
      mem_free (d);
      return -1;
    }
  nrm_pool_done (&pool);
  *ret = d;
  return 0;
}

/* Each operation under the driver's lock. */
static int
locked_health (void *self, struct nrm_health_report *ret, nrm_error_t *err)
{
  struct memory_driver *d = self;
  pthread_mutex_lock (&d->lock);
  int r = mem_health (self, ret, err);
  pthread_mutex_unlock (&d->lock);
  return r;
}

static void
locked_health_event (void *self)
{
  struct memory_driver *d = self;
  pthread_mutex_lock (&d->lock);
  mem_health_event (self);
  pthread_mutex_unlock (&d->lock);
}

static int
locked_pool (void *self, json_t *held, struct nrm_pool *ret, nrm_error_t *err)
{
  struct memory_driver *d = self;
  pthread_mutex_lock (&d->lock);
  int r = mem_pool (self, held, ret, err);
  pthread_mutex_unlock (&d->lock);
  return r;
}

static void
locked_reset (void *self)
{
  struct memory_driver *d = self;
  pthread_mutex_lock (&d->lock);
  mem_reset (self);
  pthread_mutex_unlock (&d->lock);
}

static int
locked_prepare (void *self, const struct nrm_claim_view *c, struct nrm_prepared *out, nrm_error_t *err)
{
  struct memory_driver *d = self;
  pthread_mutex_lock (&d->lock);
  int r = mem_prepare (self, c, out, err);
  pthread_mutex_unlock (&d->lock);
  return r;
}

static int
locked_restore (void *self, const char *uid, json_t *state, nrm_error_t *err)
{
  struct memory_driver *d = self;
  pthread_mutex_lock (&d->lock);
  int r = mem_restore (self, uid, state, err);
  pthread_mutex_unlock (&d->lock);
  return r;
}

static void
locked_unprepare (void *self, const char *uid, json_t *state)
{
  struct memory_driver *d = self;
  pthread_mutex_lock (&d->lock);
  mem_unprepare (self, uid, state);
  pthread_mutex_unlock (&d->lock);
}

static int
locked_bind (void *self, const struct nrm_claim_view *c, json_t **ret, nrm_error_t *err)
{
  struct memory_driver *d = self;
  pthread_mutex_lock (&d->lock);
  int r = mem_bind (self, c, ret, err);
  pthread_mutex_unlock (&d->lock);
  return r;
}

static json_t *
locked_describe (void *self, const char *uid, json_t *state)
{
  struct memory_driver *d = self;
  pthread_mutex_lock (&d->lock);
  json_t *r = mem_describe (self, uid, state);
  pthread_mutex_unlock (&d->lock);
  return r;
}

const struct nrm_driver_ops nrm_memory_driver = {
  .abi = NRM_DRIVER_ABI,
  .id = "memory",
  .default_name = "memory." NRM_DEFAULT_DOMAIN,
  .summary = "memory and huge pages by NUMA node, bound through cpuset.mems, memory.* and hugetlb.*",
  .new = mem_new,
  .free = mem_free,
  .pool = locked_pool,
  .reset = locked_reset,
  .prepare = locked_prepare,
  .restore = locked_restore,
  .unprepare = locked_unprepare,
  .bind = locked_bind,
  .describe = locked_describe,
  .health = locked_health,
  .health_fd = mem_health_fd,
  .health_event = locked_health_event,
};
