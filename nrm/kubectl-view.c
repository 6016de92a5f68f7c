/* SPDX-License-Identifier: Apache-2.0 */
/* The views of `kubectl nrm` from API objects (nrm/kubectl-view.h). */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nrm/base/cleanup.h"
#include "nrm/base/quantity.h"
#include "nrm/base/xalloc.h"
#include "nrm/kubectl-view.h"
#include "topology/topology.h"

const char *const nrm_kview_known_keys[] = {
  "request",     "cpus",      "numaNodes",  "bytes",        "pageSize", "busID",
  "deviceNodes", "partition", "wholeCores", "partialCores", "l3Groups", NULL,
};

/* A quantity in whole units (a fraction rounded up); -1 when it is not one. */
static json_int_t
units (json_t *q)
{
  nrm_quantity_t v = 0;
  nrm_error_t e = NULL;
  const char *s = json_string_value (q);
  if (s == NULL || nrm_quantity_parse (s, &v, &e) < 0 || v < 0)
    {
      nrm_error_release (&e);
      return -1;
    }
  return (json_int_t) ((v + NRM_QUANTITY_ONE - 1) / NRM_QUANTITY_ONE);
}

static json_int_t
int_attr (json_t *attrs, const char *driver, const char *name, json_int_t dflt)
{
  cleanup_free char *qualified = xasprintf ("%s/%s", driver, name);
  json_t *a = json_object_get (attrs, name);
  if (a == NULL)
    a = json_object_get (attrs, qualified);
  json_t *v = json_object_get (a, "int");
  return json_is_integer (v) ? json_integer_value (v) : dflt;
}

static const char *
string_attr (json_t *attrs, const char *name)
{
  return json_string_value (json_object_get (json_object_get (attrs, name), "string"));
}

static bool
bool_attr (json_t *attrs, const char *name)
{
  return json_is_true (json_object_get (json_object_get (attrs, name), "bool"));
}

/* The NUMA node of a device: the standard attribute, else the driver's. */
static json_int_t
numa_of (json_t *attrs, const char *driver)
{
  json_int_t n = int_attr (attrs, driver, "resource.kubernetes.io/numaNode", -1);
  return n >= 0 ? n : int_attr (attrs, driver, "numaNode", -1);
}

/* The row a capacity of a device counts in: huge pages by their size,
 * isolated CPUs apart from the others. */
static char *
resource_of (const char *key, json_t *attrs)
{
  const char *page = string_attr (attrs, "pageSize");
  if (strcmp (key, "hugepages") == 0 && page)
    return xasprintf ("hugepages-%s", page);
  if (bool_attr (attrs, "isolated"))
    return xasprintf ("isolated-%s", key);
  return xstrdup (key);
}

static char *
device_key (const char *driver, const char *pool, const char *device)
{
  return xasprintf ("%s/%s/%s", driver, pool, device);
}

/* The row of (node, numa, resource, driver), made on first use. */
static json_t *
row (json_t *rows, const char *node, json_int_t numa, const char *resource, const char *driver)
{
  cleanup_free char *key = xasprintf ("%s\037%lld\037%s\037%s", node, (long long) numa, resource, driver);
  json_t *r = json_object_get (rows, key);
  if (r == NULL)
    {
      r = json_pack ("{s:s, s:I, s:s, s:s, s:I, s:I, s:I}", "node", node, "numaNode", (json_int_t) numa, "resource",
                     resource, "driver", driver, "published", (json_int_t) 0, "allocated", (json_int_t) 0, "prepared",
                     (json_int_t) 0);
      json_object_set_new (rows, key, r);
    }
  return r;
}

static void
add (json_t *r, const char *field, json_int_t v)
{
  json_object_set_new (r, field, json_integer (json_integer_value (json_object_get (r, field)) + v));
}

/* Whether a condition list has type Ready with status True. */
static bool
ready (json_t *conditions)
{
  size_t i;
  json_t *c;
  json_array_foreach (conditions, i, c)
  {
    const char *t = json_string_value (json_object_get (c, "type"));
    const char *s = json_string_value (json_object_get (c, "status"));
    if (t && s && strcmp (t, "Ready") == 0 && strcmp (s, "True") == 0)
      return true;
  }
  return false;
}

static bool
str_eq (const char *a, const char *b)
{
  return (a == NULL && b == NULL) || (a && b && strcmp (a, b) == 0);
}

/* The status.devices entry of an allocation result, or NULL. */
static json_t *
entry_of (json_t *claim, json_t *result)
{
  size_t i;
  json_t *d;
  json_array_foreach (json_object_get (json_object_get (claim, "status"), "devices"), i, d)
  {
    const char *share = json_string_value (json_object_get (d, "shareID"));
    const char *rshare = json_string_value (json_object_get (result, "shareID"));
    if (str_eq (json_string_value (json_object_get (d, "driver")),
                json_string_value (json_object_get (result, "driver")))
        && str_eq (json_string_value (json_object_get (d, "pool")),
                   json_string_value (json_object_get (result, "pool")))
        && str_eq (json_string_value (json_object_get (d, "device")),
                   json_string_value (json_object_get (result, "device")))
        && (share == NULL || rshare == NULL || strcmp (share, rshare) == 0))
      return d;
  }
  return NULL;
}

static json_t *
results_of (json_t *claim)
{
  return json_object_get (
      json_object_get (json_object_get (json_object_get (claim, "status"), "allocation"), "devices"), "results");
}

/* The devices of the newest generation of every pool, by driver/pool/device:
 * {node, numa, shared, capacity: {resource: units}, counterSets: [..]}. The
 * shared counters, by driver/pool/set: their sum. */
static void
index_slices (json_t *slices, const char *only, json_t *devices, json_t *counters)
{
  cleanup_json json_t *newest = json_object ();
  size_t i, j;
  json_t *s, *d;
  json_array_foreach (slices, i, s)
  {
    json_t *spec = json_object_get (s, "spec");
    json_t *pool = json_object_get (spec, "pool");
    const char *driver = json_string_value (json_object_get (spec, "driver"));
    const char *pname = json_string_value (json_object_get (pool, "name"));
    /* As in the pass below: a slice without them is no pool's. */
    if (driver == NULL || pname == NULL)
      continue;
    cleanup_free char *key = xasprintf ("%s/%s", driver, pname);
    json_int_t g = json_integer_value (json_object_get (pool, "generation"));
    json_t *seen = json_object_get (newest, key);
    if (seen == NULL || json_integer_value (seen) < g)
      json_object_set_new (newest, key, json_integer (g));
  }
  json_array_foreach (slices, i, s)
  {
    json_t *spec = json_object_get (s, "spec");
    json_t *pool = json_object_get (spec, "pool");
    const char *driver = json_string_value (json_object_get (spec, "driver"));
    const char *pname = json_string_value (json_object_get (pool, "name"));
    const char *node = json_string_value (json_object_get (spec, "nodeName"));
    if (driver == NULL || pname == NULL)
      continue;
    cleanup_free char *pkey = xasprintf ("%s/%s", driver, pname);
    /* A pool being rewritten: only its newest slices count. */
    if (json_integer_value (json_object_get (pool, "generation"))
        != json_integer_value (json_object_get (newest, pkey)))
      continue;
    json_array_foreach (json_object_get (spec, "sharedCounters"), j, d)
    {
      const char *set = json_string_value (json_object_get (d, "name"));
      const char *cname;
      json_t *c;
      json_int_t sum = 0;
      json_object_foreach (json_object_get (d, "counters"), cname, c)
      {
        json_int_t v = units (json_object_get (c, "value"));
        sum += v > 0 ? v : 0;
      }
      if (set)
        {
          cleanup_free char *ckey = device_key (driver, pname, set);
          json_object_set_new (counters, ckey, json_integer (sum));
        }
    }
    /* Node-local devices only: the view is per node. */
    if (node == NULL || (only && strcmp (node, only) != 0))
      continue;
    json_array_foreach (json_object_get (spec, "devices"), j, d)
    {
      const char *name = json_string_value (json_object_get (d, "name"));
      json_t *attrs = json_object_get (d, "attributes");
      if (name == NULL)
        continue;
      json_t *cap = json_object ();
      const char *ckey;
      json_t *c;
      json_object_foreach (json_object_get (d, "capacity"), ckey, c)
      {
        cleanup_free char *res = resource_of (ckey, attrs);
        json_int_t v = units (json_object_get (c, "value"));
        if (v >= 0)
          json_object_set_new (cap, res, json_pack ("{s:s, s:I}", "key", ckey, "value", v));
      }
      if (json_object_size (cap) == 0)
        json_object_set_new (cap, "devices", json_pack ("{s:s, s:I}", "key", "", "value", (json_int_t) 1));
      json_t *sets = json_array ();
      size_t k;
      json_t *cc;
      json_array_foreach (json_object_get (d, "consumesCounters"), k, cc)
      {
        const char *set = json_string_value (json_object_get (cc, "counterSet"));
        if (set)
          json_array_append_new (sets, json_string (set));
      }
      cleanup_free char *dkey = device_key (driver, pname, name);
      json_object_set_new (devices, dkey,
                           json_pack ("{s:s, s:s, s:s, s:I, s:b, s:o, s:o}", "node", node, "driver", driver, "pool",
                                      pname, "numa", numa_of (attrs, driver), "shared",
                                      json_is_true (json_object_get (d, "allowMultipleAllocations")), "capacity", cap,
                                      "counterSets", sets));
    }
  }
}

static int
row_cmp (const void *a, const void *b)
{
  json_t *x = *(json_t *const *) a, *y = *(json_t *const *) b;
  int c = strcmp (json_string_value (json_object_get (x, "node")), json_string_value (json_object_get (y, "node")));
  if (c)
    return c;
  json_int_t nx = json_integer_value (json_object_get (x, "numaNode"));
  json_int_t ny = json_integer_value (json_object_get (y, "numaNode"));
  /* Devices of no NUMA node last. */
  if (nx != ny)
    return nx < 0 ? 1 : ny < 0 ? -1 : nx < ny ? -1 : 1;
  c = strcmp (json_string_value (json_object_get (x, "resource")), json_string_value (json_object_get (y, "resource")));
  return c ? c
           : strcmp (json_string_value (json_object_get (x, "driver")),
                     json_string_value (json_object_get (y, "driver")));
}

static int
name_cmp (const void *a, const void *b)
{
  return strcmp (*(const char *const *) a, *(const char *const *) b);
}

json_t *
nrm_kview_nodes (json_t *slices, json_t *claims, const char *node)
{
  cleanup_json json_t *devices = json_object (), *counters = json_object (), *rows = json_object ();
  cleanup_json json_t *sets_done = json_object (), *node_claims = json_object ();
  const char *key;
  json_t *d;
  size_t i, j;
  json_t *claim, *res;
  index_slices (slices, node, devices, counters);

  /* Published: a device's capacity, or the counter sets it draws on (once
   * each: the devices over them overlap). */
  json_object_foreach (devices, key, d)
  {
    const char *n = json_string_value (json_object_get (d, "node"));
    const char *driver = json_string_value (json_object_get (d, "driver"));
    const char *pool = json_string_value (json_object_get (d, "pool"));
    json_int_t numa = json_integer_value (json_object_get (d, "numa"));
    json_t *sets = json_object_get (d, "counterSets");
    const char *res_name;
    json_t *v;
    json_object_foreach (json_object_get (d, "capacity"), res_name, v)
    {
      json_t *r = row (rows, n, numa, res_name, driver);
      if (json_array_size (sets) == 0)
        {
          add (r, "published", json_integer_value (json_object_get (v, "value")));
          continue;
        }
      json_t *s;
      size_t k;
      json_array_foreach (sets, k, s)
      {
        cleanup_free char *ckey = device_key (driver, pool, json_string_value (s));
        cleanup_free char *done = xasprintf ("%s\037%s", ckey, res_name);
        if (json_object_get (sets_done, done))
          continue;
        json_object_set_new (sets_done, done, json_true ());
        add (r, "published", json_integer_value (json_object_get (counters, ckey)));
      }
    }
  }

  /* Allocated and prepared, from the claims' results on these devices. */
  json_array_foreach (claims, i, claim)
  {
    json_array_foreach (results_of (claim), j, res)
    {
      cleanup_free char *dkey = device_key (json_string_value (json_object_get (res, "driver")),
                                            json_string_value (json_object_get (res, "pool")),
                                            json_string_value (json_object_get (res, "device")));
      json_t *dev = json_object_get (devices, dkey);
      if (dev == NULL)
        continue;
      const char *n = json_string_value (json_object_get (dev, "node"));
      json_t *consumed = json_object_get (res, "consumedCapacity");
      json_t *entry = entry_of (claim, res);
      bool is_ready = entry && ready (json_object_get (entry, "conditions"));
      json_t *nc = json_object_get (node_claims, n);
      const char *uid = json_string_value (json_object_get (json_object_get (claim, "metadata"), "uid"));
      cleanup_free char *cid = xasprintf (
          "%s/%s/%s", json_string_value (json_object_get (json_object_get (claim, "metadata"), "namespace")),
          json_string_value (json_object_get (json_object_get (claim, "metadata"), "name")), uid ? uid : "");
      if (nc == NULL)
        json_object_set_new (node_claims, n, nc = json_object ());
      /* Prepared when every result of it on the node is. */
      json_t *was = json_object_get (nc, cid);
      json_object_set_new (nc, cid, json_boolean (is_ready && (was == NULL || json_is_true (was))));
      const char *res_name;
      json_t *v;
      json_object_foreach (json_object_get (dev, "capacity"), res_name, v)
      {
        json_t *r = row (rows, n, json_integer_value (json_object_get (dev, "numa")), res_name,
                         json_string_value (json_object_get (dev, "driver")));
        json_int_t amount = json_integer_value (json_object_get (v, "value"));
        /* A shared device gives what was consumed of it. */
        if (json_is_true (json_object_get (dev, "shared")))
          {
            json_int_t u = units (json_object_get (consumed, json_string_value (json_object_get (v, "key"))));
            amount = u > 0 ? u : 0;
          }
        add (r, "allocated", amount);
        if (is_ready)
          add (r, "prepared", amount);
      }
    }
  }

  /* Sorted rows, with free; nodes with their claim counts. */
  size_t n = json_object_size (rows), k = 0;
  json_t **sorted = xcalloc (n ? n : 1, sizeof (json_t *));
  json_object_foreach (rows, key, d)
  {
    json_object_set_new (d, "free",
                         json_integer (json_integer_value (json_object_get (d, "published"))
                                       - json_integer_value (json_object_get (d, "allocated"))));
    sorted[k++] = d;
  }
  qsort (sorted, n, sizeof (json_t *), row_cmp);
  json_t *out_rows = json_array ();
  for (k = 0; k < n; k++)
    json_array_append (out_rows, sorted[k]);
  free (sorted);
  json_t *nodes = json_array ();
  cleanup_json json_t *node_names = json_object ();
  json_object_foreach (devices, key, d)
  {
    json_object_set_new (node_names, json_string_value (json_object_get (d, "node")), json_true ());
  }
  const char **names = xcalloc (json_object_size (node_names) + 1, sizeof (char *));
  k = 0;
  json_object_foreach (node_names, key, d) { names[k++] = key; }
  qsort (names, k, sizeof (char *), name_cmp);
  for (size_t m = 0; m < k; m++)
    {
      json_t *nc = json_object_get (node_claims, names[m]);
      json_int_t prepared = 0;
      const char *cid;
      json_t *v;
      json_object_foreach (nc, cid, v) { prepared += json_is_true (v); }
      json_array_append_new (nodes, json_pack ("{s:s, s:I, s:I}", "name", names[m], "claims",
                                               (json_int_t) json_object_size (nc), "preparedClaims", prepared));
    }
  free (names);
  return json_pack ("{s:o, s:o}", "nodes", nodes, "resources", out_rows);
}

/* The node of an allocation: its nodeSelector's metadata.name field. */
static const char *
allocation_node (json_t *alloc)
{
  size_t i, j;
  json_t *term, *f;
  json_array_foreach (json_object_get (json_object_get (alloc, "nodeSelector"), "nodeSelectorTerms"), i, term)
  {
    json_array_foreach (json_object_get (term, "matchFields"), j, f)
    {
      const char *key = json_string_value (json_object_get (f, "key"));
      json_t *values = json_object_get (f, "values");
      if (key && strcmp (key, "metadata.name") == 0 && json_array_size (values) == 1)
        return json_string_value (json_array_get (values, 0));
    }
  }
  return NULL;
}

/* data with the known keys first, then the others as they came. */
static json_t *
ordered_data (json_t *data)
{
  json_t *out = json_object ();
  const char *key;
  json_t *v;
  if (!json_is_object (data))
    return out;
  for (const char *const *k = nrm_kview_known_keys; *k; k++)
    if ((v = json_object_get (data, *k)))
      json_object_set (out, *k, v);
  json_object_foreach (data, key, v)
  {
    if (json_object_get (out, key) == NULL)
      json_object_set (out, key, v);
  }
  return out;
}

json_t *
nrm_kview_claim (json_t *claim)
{
  json_t *meta = json_object_get (claim, "metadata");
  json_t *status = json_object_get (claim, "status");
  json_t *alloc = json_object_get (status, "allocation");
  const char *node = allocation_node (alloc);
  json_t *results = json_array (), *devices = json_array (), *reserved = json_array ();
  size_t i;
  json_t *r;
  json_array_foreach (results_of (claim), i, r)
  {
    json_t *o = json_pack ("{s:s?, s:s?, s:s?, s:s?}", "request", json_string_value (json_object_get (r, "request")),
                           "driver", json_string_value (json_object_get (r, "driver")), "pool",
                           json_string_value (json_object_get (r, "pool")), "device",
                           json_string_value (json_object_get (r, "device")));
    if (json_object_get (r, "shareID"))
      json_object_set (o, "shareID", json_object_get (r, "shareID"));
    if (json_object_get (r, "consumedCapacity"))
      json_object_set (o, "consumedCapacity", json_object_get (r, "consumedCapacity"));
    json_t *e = entry_of (claim, r);
    json_object_set_new (o, "prepared", json_boolean (e && ready (json_object_get (e, "conditions"))));
    json_array_append_new (results, o);
  }
  json_array_foreach (json_object_get (status, "devices"), i, r)
  {
    json_t *o = json_pack ("{s:s?, s:s?, s:s?}", "driver", json_string_value (json_object_get (r, "driver")), "pool",
                           json_string_value (json_object_get (r, "pool")), "device",
                           json_string_value (json_object_get (r, "device")));
    if (json_object_get (r, "shareID"))
      json_object_set (o, "shareID", json_object_get (r, "shareID"));
    json_object_set_new (o, "data", ordered_data (json_object_get (r, "data")));
    json_t *conds = json_array (), *c;
    size_t k;
    json_array_foreach (json_object_get (r, "conditions"), k, c)
    {
      json_array_append_new (conds, json_pack ("{s:s?, s:s?, s:s?, s:s?}", "type",
                                               json_string_value (json_object_get (c, "type")), "status",
                                               json_string_value (json_object_get (c, "status")), "reason",
                                               json_string_value (json_object_get (c, "reason")), "message",
                                               json_string_value (json_object_get (c, "message"))));
    }
    json_object_set_new (o, "conditions", conds);
    json_array_append_new (devices, o);
  }
  json_array_foreach (json_object_get (status, "reservedFor"), i, r)
  {
    json_array_append_new (reserved,
                           json_pack ("{s:s?, s:s?}", "resource", json_string_value (json_object_get (r, "resource")),
                                      "name", json_string_value (json_object_get (r, "name"))));
  }
  return json_pack ("{s:s?, s:s?, s:b, s:s?, s:o, s:o, s:o}", "namespace",
                    json_string_value (json_object_get (meta, "namespace")), "name",
                    json_string_value (json_object_get (meta, "name")), "allocated", alloc != NULL, "node", node,
                    "results", results, "devices", devices, "reservedFor", reserved);
}

/* A pod's claims: (name in the pod, claim name), from its status for
 * claims made from templates, from its spec for the others. */
static json_t *
pod_claims (json_t *pod)
{
  json_t *out = json_array (), *c;
  size_t i;
  json_array_foreach (json_object_get (json_object_get (pod, "status"), "resourceClaimStatuses"), i, c)
  {
    const char *name = json_string_value (json_object_get (c, "name"));
    const char *claim = json_string_value (json_object_get (c, "resourceClaimName"));
    if (name && claim)
      json_array_append_new (out, json_pack ("{s:s, s:s}", "name", name, "claim", claim));
  }
  json_array_foreach (json_object_get (json_object_get (pod, "spec"), "resourceClaims"), i, c)
  {
    const char *name = json_string_value (json_object_get (c, "name"));
    const char *claim = json_string_value (json_object_get (c, "resourceClaimName"));
    bool seen = false;
    size_t k;
    json_t *o;
    json_array_foreach (out, k, o)
    {
      seen |= name && strcmp (json_string_value (json_object_get (o, "name")), name) == 0;
    }
    if (name && !seen)
      json_array_append_new (out, json_pack ("{s:s, s:s?}", "name", name, "claim", claim));
  }
  return out;
}

static json_t *
find_claim (json_t *claims, const char *ns, const char *name)
{
  size_t i;
  json_t *c;
  json_array_foreach (claims, i, c)
  {
    json_t *m = json_object_get (c, "metadata");
    if (str_eq (json_string_value (json_object_get (m, "namespace")), ns)
        && str_eq (json_string_value (json_object_get (m, "name")), name))
      return c;
  }
  return NULL;
}

/* The placement of a claim, summed over its status.devices entries. */
static json_t *
placement (json_t *claim)
{
  cleanup_bitmap hwloc_bitmap_t cpus = xbitmap_alloc (), nodes = xbitmap_alloc ();
  json_int_t bytes = 0;
  json_t *bus = json_array ();
  size_t i, k;
  json_t *d, *v;
  bool prepared = json_array_size (json_object_get (json_object_get (claim, "status"), "devices")) > 0;
  json_array_foreach (json_object_get (json_object_get (claim, "status"), "devices"), i, d)
  {
    json_t *data = json_object_get (d, "data");
    const char *list = json_string_value (json_object_get (data, "cpus"));
    hwloc_bitmap_t set = NULL;
    nrm_error_t e = NULL;
    prepared &= ready (json_object_get (d, "conditions"));
    if (list && *list && nrm_cpulist_parse (list, &set, &e) == 0)
      hwloc_bitmap_or (cpus, cpus, set);
    nrm_error_release (&e);
    hwloc_bitmap_free (set);
    json_array_foreach (json_object_get (data, "numaNodes"), k, v)
    {
      if (json_is_integer (v) && json_integer_value (v) >= 0 && json_integer_value (v) < 65536)
        hwloc_bitmap_set (nodes, (unsigned) json_integer_value (v));
    }
    json_t *b = json_object_get (data, "bytes");
    if (json_is_integer (b))
      bytes += json_integer_value (b);
    else if (json_is_string (b) && units (b) > 0)
      bytes += units (b);
    if (json_is_string (json_object_get (data, "busID")))
      json_array_append (bus, json_object_get (data, "busID"));
  }
  cleanup_free char *c = nrm_cpulist_format (cpus), *n = nrm_cpulist_format (nodes);
  return json_pack ("{s:s, s:s, s:I, s:o, s:b}", "cpus", c, "numaNodes", n, "bytes", bytes, "busIDs", bus, "prepared",
                    prepared);
}

json_t *
nrm_kview_pods (json_t *pods, json_t *claims)
{
  json_t *out = json_array ();
  size_t i, k;
  json_t *pod, *pc;
  json_array_foreach (pods, i, pod)
  {
    json_t *meta = json_object_get (pod, "metadata");
    const char *ns = json_string_value (json_object_get (meta, "namespace"));
    cleanup_json json_t *pcs = pod_claims (pod);
    json_array_foreach (pcs, k, pc)
    {
      const char *cname = json_string_value (json_object_get (pc, "claim"));
      json_t *claim = cname ? find_claim (claims, ns, cname) : NULL;
      json_t *row
          = json_pack ("{s:s?, s:s?, s:s?, s:s?, s:s?, s:b}", "namespace", ns, "pod",
                       json_string_value (json_object_get (meta, "name")), "node",
                       json_string_value (json_object_get (json_object_get (pod, "spec"), "nodeName")), "podClaimName",
                       json_string_value (json_object_get (pc, "name")), "claim", cname, "found", claim != NULL);
      if (claim)
        {
          cleanup_json json_t *p = placement (claim);
          json_object_update (row, p);
        }
      json_array_append_new (out, row);
    }
  }
  return out;
}
