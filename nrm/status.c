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
#include "driver/devices.h"
#include "driver/plugin.h"
#include "nrm/base/quantity.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/fs.h"
#include "nrm/status.h"

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

/* descs: uid -> what the driver says the claim holds (describe). */
static json_t *
pool_status (const struct nrm_pool *p, json_t *claims, json_t *descs, const char *node)
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
    json_array_append_new (
        devices, json_pack ("{s:s, s:o, s:s, s:o}", "name", name, "capacity", capacity, "consumed",
                            nrm_quantity_format (used, binary_capacity (json_object_get (capacity, first ? first : "")),
                                                 buf, sizeof (buf)),
                            "claims", holders));
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
  /* The counts a ResourcePoolStatus (KEP-5677) reports: a device shared by
   * consumable capacity counts as allocated once anything holds it. */
  return json_pack ("{s:s, s:s, s:I, s:I, s:I, s:I, s:o}", "driver", p->driver, "pool", node, "totalDevices",
                    (json_int_t) total, "allocatedDevices", (json_int_t) allocated, "availableDevices",
                    (json_int_t) (total - allocated - unavailable), "unavailableDevices", (json_int_t) unavailable,
                    "devices", devices);
}

hwloc_bitmap_t
nrm_status_claimed_cpus (const struct nrm_config *c, const struct nrm_drivers *d)
{
  hwloc_bitmap_t all = xbitmap_alloc ();
  for (size_t i = 0; i < d->n; i++)
    {
      const struct nrm_driver_slot *s = &d->slots[i];
      nrm_error_t err = NULL;
      if (s->ops->describe == NULL)
        continue;
      cleanup_json json_t *claims = nrm_checkpoint_claims (c->state_dir, s->name, &err);
      nrm_error_release (&err);
      const char *uid;
      json_t *cl;
      json_object_foreach (claims, uid, cl)
      {
        if (!nrm_checkpoint_completed (cl))
          continue;
        cleanup_json json_t *desc = s->ops->describe (s->self, uid, json_object_get (cl, "state"));
        hwloc_bitmap_t set = NULL;
        const char *list = json_string_value (json_object_get (desc, "cpus"));
        if (list && nrm_cpulist_parse (list, &set, &err) == 0)
          hwloc_bitmap_or (all, all, set);
        nrm_error_release (&err);
        hwloc_bitmap_free (set);
      }
    }
  return all;
}

hwloc_bitmap_t
nrm_status_shared_cpus (const struct nrm_config *c, const struct nrm_topology *t, hwloc_const_bitmap_t claimed)
{
  hwloc_bitmap_t shared = xbitmap_dup (t->online);
  hwloc_bitmap_andnot (shared, shared, t->disallowed);
  hwloc_bitmap_andnot (shared, shared, t->isolated);
  hwloc_bitmap_andnot (shared, shared, claimed);
  if (c->cpu_options & NRM_OPT_STRICT_CPU_RESERVATION)
    hwloc_bitmap_andnot (shared, shared, t->reserved);
  return shared;
}

int
nrm_status (struct nrm_config *c, const struct nrm_topology *t, const struct nrm_drivers *drivers, bool as_json,
            FILE *out, nrm_error_t *err)
{
  cleanup_json json_t *doc = json_object (), *all_claims = json_object ();
  cleanup_bitmap hwloc_bitmap_t exclusive = xbitmap_alloc ();
  cleanup_bitmap hwloc_bitmap_t shared = NULL;
  cleanup_free char *ex = NULL, *sh = NULL, *res = NULL, *iso = NULL;
  int r = -1;

  json_t *jp = json_array ();
  json_object_set_new (doc, "pools", jp);
  for (size_t i = 0; i < drivers->n; i++)
    {
      const struct nrm_driver_slot *s = &drivers->slots[i];
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
      json_array_append_new (jp, pool_status (&pool, claims, descs, c->node_name));
      nrm_pool_done (&pool);
      json_object_foreach (claims, uid, cl)
      {
        json_t *entry = json_object_get (all_claims, uid);
        if (entry == NULL)
          {
            entry = json_pack ("{s:s?, s:s?, s:s?, s:{}}", "namespace",
                               json_string_value (json_object_get (cl, "namespace")), "name",
                               json_string_value (json_object_get (cl, "name")), "phase",
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
        static const char *const keys[] = { "cpus", "cpuNodes", "memoryNodes" };
        for (size_t x = 0; x < 3; x++)
          if (json_is_string (json_object_get (desc, keys[x])))
            json_object_set (d, keys[x], json_object_get (desc, keys[x]));
        if (json_object_get (d, "cpus"))
          {
            hwloc_bitmap_t set = NULL;
            nrm_error_t e = NULL;
            if (nrm_cpulist_parse (json_string_value (json_object_get (d, "cpus")), &set, &e) == 0)
              hwloc_bitmap_or (exclusive, exclusive, set);
            nrm_error_release (&e);
            hwloc_bitmap_free (set);
          }
        json_object_set_new (json_object_get (entry, "drivers"), s->name, d);
      }
    }
  json_object_set (doc, "claims", all_claims);
  shared = nrm_status_shared_cpus (c, t, exclusive);
  ex = nrm_cpulist_format (exclusive);
  sh = nrm_cpulist_format (shared);
  res = nrm_cpulist_format (t->reserved);
  iso = nrm_cpulist_format (t->isolated);
  json_object_set_new (
      doc, "cpus", json_pack ("{s:s, s:s, s:s, s:s}", "exclusive", ex, "shared", sh, "reserved", res, "isolated", iso));

  if (as_json)
    {
      if (json_dumpf (doc, out, JSON_INDENT (2)) < 0)
        goto out;
      fputc ('\n', out);
      r = 0;
      goto out;
    }
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
      json_object_foreach (json_object_get (d, "capacity"), key, v)
      {
        fprintf (out, " %s %s", key, json_string_value (v));
      }
      fprintf (out, ", consumed %s, %zu claim%s\n", json_string_value (json_object_get (d, "consumed")),
               json_array_size (json_object_get (d, "claims")),
               json_array_size (json_object_get (d, "claims")) == 1 ? "" : "s");
    }
  }
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
      if (json_object_get (d, "cpus"))
        fprintf (out, " CPUs %s", json_string_value (json_object_get (d, "cpus")));
      if (json_object_get (d, "cpuNodes"))
        fprintf (out, " CPU nodes %s", json_string_value (json_object_get (d, "cpuNodes")));
      if (json_object_get (d, "memoryNodes"))
        fprintf (out, " memory nodes %s", json_string_value (json_object_get (d, "memoryNodes")));
    }
    fputc ('\n', out);
  }
  fprintf (out, "CPUs: exclusive %s; shared %s; reserved %s; isolated %s\n", ex && *ex ? ex : "-", sh && *sh ? sh : "-",
           res && *res ? res : "-", iso && *iso ? iso : "-");
  r = ferror (out) ? nrm_error_set (err, EIO, "cannot write the status") : 0;
out:
  return r;
}
