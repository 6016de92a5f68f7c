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
#include "nrm/base/cleanup.h"
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
  char *name;
  json_t *devices; /* name -> Device, as published; replaced under lock */
  json_t *names;   /* device names in pool order, at the start */
  pthread_mutex_t lock;
  struct nrm_memory_health *health;
  json_t *used; /* device -> bytes in use */
  struct claim_entry *claims;
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
  /* The health pass reads what is in use. */
  pthread_mutex_lock (&d->lock);
  json_object_foreach (bytes, name, v)
  {
    json_int_t cur = json_integer_value (json_object_get (d->used, name));
    json_object_set_new (d->used, name, json_integer (cur + sign * json_integer_value (v)));
  }
  pthread_mutex_unlock (&d->lock);
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
  pthread_mutex_lock (&d->lock);
  json_object_clear (d->used);
  pthread_mutex_unlock (&d->lock);
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
 * the container's memory.max (limit) and memory.min (guarantee). */
static int
memory_settings (const struct nrm_claim_view *c, bool *limit, bool *guarantee, nrm_error_t *err)
{
  size_t i;
  json_t *entry;
  *limit = *guarantee = false;
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

/* The devices as last published (a new reference). */
static json_t *
published (struct memory_driver *d)
{
  pthread_mutex_lock (&d->lock);
  json_t *devices = json_incref (d->devices);
  pthread_mutex_unlock (&d->lock);
  return devices;
}

static json_t *
attr (json_t *dev, const char *name, const char *type)
{
  return json_object_get (json_object_get (json_object_get (dev, "attributes"), name), type);
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
  bool limit, guarantee;
  if (find_claim (d, c->uid))
    return nrm_error_set (err, EEXIST, "claim %s is already prepared", c->uid);
  if (memory_settings (c, &limit, &guarantee, err) < 0)
    return -1;
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
  cleanup_json json_t *state = json_pack ("{s:O, s:s}", "devices", add, "mems", mems);
  if (nrm_env_add (env, NRM_ENV_MEMS, NULL, c->uid, mems, err) < 0)
    return -1;
  /* Limits the hook writes: huge pages always (a claim is what the
   * container may use), ordinary memory when the claim asks for it. */
  char num[32];
  snprintf (num, sizeof (num), "%" JSON_INTEGER_FORMAT, ordinary);
  if (limit && ordinary > 0 && nrm_env_add (env, NRM_ENV_MEMORY_MAX, NULL, c->uid, num, err) < 0)
    return -1;
  if (guarantee && ordinary > 0 && nrm_env_add (env, NRM_ENV_MEMORY_MIN, NULL, c->uid, num, err) < 0)
    return -1;
  const char *name;
  json_t *v;
  json_object_foreach (hugetlb, name, v)
  {
    snprintf (num, sizeof (num), "%" JSON_INTEGER_FORMAT, json_integer_value (v));
    if (nrm_env_add (env, NRM_ENV_HUGETLB, name, c->uid, num, err) < 0)
      return -1;
  }
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
  (void) state;
  drop_claim (self, uid);
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
  json_object_foreach (json_object_get (state, "devices"), name, v)
  {
    const char *key;
    nrm_quantity_t cap;
    json_t *dev = json_object_get (devices, name);
    if (dev && json_is_integer (v) && device_capacity (dev, &key, &cap) == 0)
      json_object_set_new (devs, name, json_pack ("{s:O}", key, v));
  }
  json_object_set_new (out, "devices", devs);
  return out;
}

/* Memory offlined or added since the start changes numaN's capacity:
 * prepare checks claims against the pool last published. A claim that
 * holds more than the smaller capacity keeps what it holds. */
static int
mem_pool (void *self, json_t *held, struct nrm_pool *ret, nrm_error_t *err)
{
  struct memory_driver *d = self;
  (void) held;
  cleanup_free int64_t *change = xcalloc (d->t->n_numa + 1, sizeof (*change));
  json_t *devices, *names;
  nrm_memory_health_online_change (d->health, change);
  if (nrm_memory_pool_online (d->t, &d->o, d->name, change, ret, err) < 0)
    return -1;
  if (nrm_kit_index_pool (ret, &devices, &names, err) < 0)
    {
      nrm_pool_done (ret);
      return -1;
    }
  json_decref (names);
  pthread_mutex_lock (&d->lock);
  json_decref (d->devices);
  d->devices = devices;
  pthread_mutex_unlock (&d->lock);
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
  pthread_mutex_lock (&d->lock);
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
  pthread_mutex_unlock (&d->lock);
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
  if (nrm_memory_health_new (h, &d->health, err) < 0)
    {
      mem_free (d);
      return -1;
    }
  if (nrm_memory_pool (d->t, &d->o, d->name, &pool, err) < 0
      || nrm_kit_index_pool (&pool, &d->devices, &d->names, err) < 0)
    {
      nrm_pool_done (&pool);
      mem_free (d);
      return -1;
    }
  nrm_pool_done (&pool);
  *ret = d;
  return 0;
}

const struct nrm_driver_ops nrm_memory_driver = {
  .abi = NRM_DRIVER_ABI,
  .id = "memory",
  .default_name = "memory." NRM_DEFAULT_DOMAIN,
  .summary = "memory and huge pages by NUMA node, bound through cpuset.mems, memory.* and hugetlb.*",
  .new = mem_new,
  .free = mem_free,
  .pool = mem_pool,
  .reset = mem_reset,
  .prepare = mem_prepare,
  .restore = mem_restore,
  .unprepare = mem_unprepare,
  .describe = mem_describe,
  .health = mem_health,
  .health_fd = mem_health_fd,
  .health_event = mem_health_event,
};
