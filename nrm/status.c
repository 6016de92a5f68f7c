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
#include "driver/quantity.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/status.h"

static json_t *
read_claims (const char *state_dir, const char *driver, nrm_error_t *err)
{
  cleanup_free char *path = NULL, *text = NULL;
  nrm_error_t rerr = NULL;
  json_error_t jerr;
  if (asprintf (&path, "%s/%s.checkpoint.json", state_dir, driver) < 0)
    {
      nrm_error_set (err, ENOMEM, "out of memory");
      return NULL;
    }
  if (nrm_read_file (path, 64 << 20, &text, NULL, &rerr) < 0)
    {
      if (rerr->status == ENOENT)
        {
          nrm_error_release (&rerr);
          return json_object ();
        }
      *err = rerr;
      return NULL;
    }
  json_t *cp = json_loads (text, 0, &jerr);
  if (!json_is_object (json_object_get (cp, "claims")))
    {
      json_decref (cp);
      nrm_error_set (err, EINVAL, "checkpoint `%s` is corrupt", path);
      return NULL;
    }
  json_t *claims = json_incref (json_object_get (cp, "claims"));
  json_decref (cp);
  return claims;
}

static bool
completed (json_t *c)
{
  const char *phase = json_string_value (json_object_get (c, "phase"));
  return phase && strcmp (phase, "PrepareCompleted") == 0;
}

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

/* The CPUs behind a consumable NUMA-node device ("numa<N>", "numa<N>-isolated"),
 * or NULL for other devices (whole L3 groups and cores: held whole). */
static hwloc_bitmap_t
device_cpus (const struct nrm_topology *t, const char *name)
{
  bool isolated = false;
  int ni = nrm_numa_device_index (t, name, &isolated);
  if (ni < 0)
    return NULL;
  hwloc_bitmap_t set = hwloc_bitmap_dup (t->numa[ni].cpus);
  if (set && isolated)
    hwloc_bitmap_and (set, set, t->isolated);
  else if (set)
    hwloc_bitmap_andnot (set, set, t->isolated);
  return set;
}

static json_t *
pool_status (const struct nrm_topology *t, const struct nrm_pool *p, json_t *claims, const char *node)
{
  json_t *devices = json_array ();
  cleanup_json json_t *held = json_array ();
  size_t total = 0, allocated = 0, unavailable = 0;
  size_t i;
  json_t *dev;
  json_array_foreach (p->devices, i, dev)
  {
    const char *name = json_string_value (json_object_get (dev, "name"));
    const char *key;
    json_t *cap;
    json_t *capacity = json_object ();
    json_object_foreach (json_object_get (dev, "capacity"), key, cap)
    {
      json_object_set (capacity, key, json_object_get (cap, "value"));
    }
    /* Claims that hold this device, and how much of a consumable one. */
    json_t *holders = json_array ();
    cleanup_bitmap hwloc_bitmap_t devcpus = device_cpus (t, name);
    nrm_quantity_t used = 0;
    const char *uid;
    json_t *c;
    json_object_foreach (claims, uid, c)
    {
      size_t k;
      json_t *d;
      if (!completed (c))
        continue;
      json_array_foreach (json_object_get (c, "devices"), k, d)
      {
        if (strcmp (json_string_value (json_object_get (d, "device")) ?: "", name) != 0)
          continue;
        /* A claim may hold a shareable device several times: count it once,
         * with the CPUs or bytes it holds there. */
        json_array_append_new (holders, json_string (uid));
        json_t *st = json_object_get (c, "state");
        const char *cpus = json_string_value (json_object_get (st, "cpus"));
        json_t *mem = json_object_get (json_object_get (st, "devices"), name);
        if (cpus)
          {
            hwloc_bitmap_t set = NULL;
            nrm_error_t e = NULL;
            if (nrm_cpulist_parse (cpus, &set, &e) == 0)
              {
                if (devcpus)
                  hwloc_bitmap_and (set, set, devcpus);
                used += (nrm_quantity_t) hwloc_bitmap_weight (set) * NRM_QUANTITY_ONE;
              }
            nrm_error_release (&e);
            hwloc_bitmap_free (set);
          }
        else if (json_is_integer (mem))
          used += (nrm_quantity_t) json_integer_value (mem) * NRM_QUANTITY_ONE;
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
                            nrm_quantity_format ((uint64_t) (used / NRM_QUANTITY_ONE),
                                                 json_object_get (capacity, "cpus") == NULL, buf, sizeof (buf)),
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

int
nrm_status (struct nrm_config *c, const struct nrm_topology *t, bool as_json, FILE *out, nrm_error_t *err)
{
  struct nrm_pool pools[2] = { { 0 } };
  cleanup_json json_t *doc = json_object (), *all_claims = json_object ();
  cleanup_bitmap hwloc_bitmap_t exclusive = hwloc_bitmap_alloc ();
  cleanup_bitmap hwloc_bitmap_t shared = NULL;
  cleanup_free char *ex = NULL, *sh = NULL, *res = NULL, *iso = NULL;
  int r = -1;

  if (nrm_cpu_pool (t, &c->publish, &pools[0], err) < 0 || nrm_memory_pool (t, &c->publish, &pools[1], err) < 0)
    goto out;
  json_t *jp = json_array ();
  json_object_set_new (doc, "pools", jp);
  for (int i = 0; i < 2; i++)
    {
      cleanup_json json_t *claims = read_claims (c->state_dir, pools[i].driver, err);
      if (claims == NULL)
        goto out;
      json_array_append_new (jp, pool_status (t, &pools[i], claims, c->node_name));
      const char *uid;
      json_t *cl;
      json_object_foreach (claims, uid, cl)
      {
        json_t *entry = json_object_get (all_claims, uid);
        if (entry == NULL)
          {
            entry = json_pack ("{s:s?, s:s?, s:s?, s:{}}", "namespace",
                               json_string_value (json_object_get (cl, "namespace")), "name",
                               json_string_value (json_object_get (cl, "name")), "phase",
                               json_string_value (json_object_get (cl, "phase")), "drivers");
            json_object_set_new (all_claims, uid, entry);
          }
        json_t *st = json_object_get (cl, "state");
        json_t *d = json_object ();
        size_t k;
        json_t *dev;
        json_t *names = json_array ();
        json_array_foreach (json_object_get (cl, "devices"), k, dev)
        {
          json_array_append (names, json_object_get (dev, "device"));
        }
        json_object_set_new (d, "devices", names);
        if (json_object_get (st, "cpus"))
          {
            json_object_set (d, "cpus", json_object_get (st, "cpus"));
            hwloc_bitmap_t set = NULL;
            nrm_error_t e = NULL;
            if (nrm_cpulist_parse (json_string_value (json_object_get (st, "cpus")), &set, &e) == 0)
              hwloc_bitmap_or (exclusive, exclusive, set);
            nrm_error_release (&e);
            hwloc_bitmap_free (set);
          }
        if (json_object_get (st, "mems"))
          json_object_set (d, "memoryNodes", json_object_get (st, "mems"));
        json_object_set_new (json_object_get (entry, "drivers"), pools[i].driver, d);
      }
    }
  json_object_set (doc, "claims", all_claims);
  shared = hwloc_bitmap_dup (t->online);
  hwloc_bitmap_andnot (shared, shared, t->disallowed);
  hwloc_bitmap_andnot (shared, shared, t->isolated);
  hwloc_bitmap_andnot (shared, shared, exclusive);
  if (c->cpu_options & NRM_OPT_STRICT_CPU_RESERVATION)
    hwloc_bitmap_andnot (shared, shared, t->reserved);
  ex = nrm_cpulist_format (exclusive);
  sh = nrm_cpulist_format (shared);
  res = nrm_cpulist_format (t->reserved);
  iso = nrm_cpulist_format (t->isolated);
  json_object_set_new (doc, "cpus",
                       json_pack ("{s:s, s:s, s:s, s:s}", "exclusive", ex ?: "", "shared", sh ?: "", "reserved",
                                  res ?: "", "isolated", iso ?: ""));

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
    const char *drv;
    json_t *d;
    json_object_foreach (json_object_get (cl, "drivers"), drv, d)
    {
      if (json_object_get (d, "cpus"))
        fprintf (out, " CPUs %s", json_string_value (json_object_get (d, "cpus")));
      if (json_object_get (d, "memoryNodes"))
        fprintf (out, " %s nodes %s", strncmp (drv, "cpu.", 4) == 0 ? "CPU" : "memory",
                 json_string_value (json_object_get (d, "memoryNodes")));
    }
    fputc ('\n', out);
  }
  fprintf (out, "CPUs: exclusive %s; shared %s; reserved %s; isolated %s\n", ex && *ex ? ex : "-", sh && *sh ? sh : "-",
           res && *res ? res : "-", iso && *iso ? iso : "-");
  r = ferror (out) ? nrm_error_set (err, EIO, "cannot write the status") : 0;
out:
  nrm_pool_done (&pools[0]);
  nrm_pool_done (&pools[1]);
  return r;
}

uint64_t *
nrm_status_cpus_free (struct nrm_config *c, const struct nrm_topology *t, nrm_error_t *err)
{
  struct nrm_publish_options po = c->publish;
  struct nrm_pool pool = { 0 };
  uint64_t *free_cpus = NULL;
  /* Consumable numa<N> devices whatever the mode: the claims of every mode
   * are CPU sets, counted on the nodes they fall in. */
  po.cpu_mode = NRM_CPU_MODE_NUMA;
  if (nrm_cpu_pool (t, &po, &pool, err) < 0)
    return NULL;
  cleanup_json json_t *claims = read_claims (c->state_dir, pool.driver, err);
  cleanup_json json_t *st = claims ? pool_status (t, &pool, claims, c->node_name) : NULL;
  free_cpus = claims && st ? calloc (t->n_numa + 1, sizeof (uint64_t)) : NULL;
  if (claims && st && free_cpus == NULL)
    nrm_error_set (err, ENOMEM, "out of memory");
  size_t i;
  json_t *dev;
  json_array_foreach (json_object_get (st, "devices"), i, dev)
  {
    int ni = nrm_numa_device_index (t, json_string_value (json_object_get (dev, "name")), NULL);
    nrm_quantity_t cap = 0, used = 0;
    nrm_error_t e = NULL;
    if (free_cpus == NULL || ni < 0
        || nrm_quantity_parse (json_string_value (json_object_get (json_object_get (dev, "capacity"), "cpus")), &cap,
                               &e)
               < 0
        || nrm_quantity_parse (json_string_value (json_object_get (dev, "consumed")), &used, &e) < 0)
      {
        nrm_error_release (&e);
        continue;
      }
    free_cpus[ni] = cap > used ? (uint64_t) ((cap - used) / NRM_QUANTITY_ONE) : 0;
  }
  nrm_pool_done (&pool);
  return free_cpus;
}
