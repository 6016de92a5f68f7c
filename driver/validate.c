/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/devices.h"
#include "driver/names.h"
#include "nrm/base/quantity.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"

/* resource.k8s.io/v1 limits (Kubernetes 1.36). */
#define MAX_DEVICES 128
#define MAX_DEVICES_ADVANCED 64
#define MAX_ATTRS_AND_CAPS 32
#define MAX_ATTR_VALUES NRM_MAX_ATTR_VALUES
#define MAX_STRING 64
#define MAX_COUNTER_SETS 8
#define MAX_COUNTERS 32
#define MAX_CONSUMPTIONS 2
#define MAX_TAINTS 16
#define MAX_BINDING_CONDITIONS 4
#define MAX_VALID_VALUES 10

#define FAIL(...) return nrm_error_set (err, EINVAL, __VA_ARGS__)

static bool
only_keys (json_t *obj, const char *const *allowed, const char **bad)
{
  const char *key;
  json_t *v;
  json_object_foreach (obj, key, v)
  {
    bool ok = false;
    for (const char *const *a = allowed; *a; a++)
      ok |= strcmp (*a, key) == 0;
    if (!ok)
      {
        *bad = key;
        return false;
      }
  }
  return true;
}

static int
quantity (json_t *v, const char *what, nrm_quantity_t *ret, nrm_error_t *err)
{
  if (!json_is_string (v))
    FAIL ("%s: a quantity must be a string", what);
  if (nrm_quantity_parse (json_string_value (v), ret, err) < 0)
    return nrm_error_wrap (err, "%s", what);
  if (*ret < 0)
    FAIL ("%s: quantity `%s` is negative", what, json_string_value (v));
  return 0;
}

static int
check_attribute (const char *name, json_t *v, size_t *values, nrm_error_t *err)
{
  static const char *const scalar[] = { "int", "bool", "string", "version" };
  static const char *const lists[] = { "ints", "bools", "strings", "versions" };
  const char *key;
  json_t *x;
  size_t set = 0;

  if (!nrm_is_qualified_name (name))
    FAIL ("attribute name `%s` is not a C identifier of at most 32 characters with an optional domain", name);
  if (!json_is_object (v))
    FAIL ("attribute `%s` is not an object", name);
  json_object_foreach (v, key, x)
  {
    int type = -1;
    bool list = false;
    for (int k = 0; k < 4; k++)
      {
        if (strcmp (key, scalar[k]) == 0)
          type = k;
        if (strcmp (key, lists[k]) == 0)
          type = k, list = true;
      }
    if (type < 0)
      FAIL ("attribute `%s` has unknown field `%s`", name, key);
    set++;
    json_t *items = x;
    if (list)
      {
        if (!json_is_array (x) || json_array_size (x) == 0)
          FAIL ("attribute `%s`: `%s` must be a non-empty list", name, key);
        *values += json_array_size (x);
      }
    else
      {
        items = json_pack ("[O]", x);
        *values += 1;
      }
    size_t i;
    json_t *e;
    int r = 0;
    json_array_foreach (items, i, e)
    {
      if ((type == 0 && !json_is_integer (e)) || (type == 1 && !json_is_boolean (e))
          || (type >= 2 && !json_is_string (e)))
        r = -1;
      else if (type >= 2 && strlen (json_string_value (e)) > MAX_STRING)
        r = -2;
    }
    if (!list)
      json_decref (items);
    if (r == -1)
      FAIL ("attribute `%s`: `%s` has a value of the wrong type", name, key);
    if (r == -2)
      FAIL ("attribute `%s`: `%s` has a string longer than %d characters", name, key, MAX_STRING);
  }
  if (set != 1)
    FAIL ("attribute `%s` must set exactly one value field, not %zu", name, set);
  return 0;
}

static int
check_policy (const char *name, json_t *policy, nrm_quantity_t value, nrm_error_t *err)
{
  static const char *const keys[] = { "default", "validValues", "validRange", NULL };
  static const char *const rkeys[] = { "min", "max", "step", NULL };
  const char *bad = NULL;
  nrm_quantity_t def = 0, min = 0, max = value, step = 0;
  json_t *vv = json_object_get (policy, "validValues"), *vr = json_object_get (policy, "validRange");
  json_t *d = json_object_get (policy, "default");
  char what[128];

  if (!json_is_object (policy) || !only_keys (policy, keys, &bad))
    FAIL ("capacity `%s`: requestPolicy has unknown field `%s`", name, bad ? bad : "?");
  if (vv && vr)
    FAIL ("capacity `%s`: validValues and validRange are mutually exclusive", name);
  if ((vv || vr) && d == NULL)
    FAIL ("capacity `%s`: requestPolicy needs a default with validValues or validRange", name);
  snprintf (what, sizeof (what), "capacity `%s` default", name);
  if (d && quantity (d, what, &def, err) < 0)
    return -1;
  if (d && def > value)
    FAIL ("capacity `%s`: default exceeds the capacity", name);
  if (vv)
    {
      size_t i;
      json_t *e;
      nrm_quantity_t prev = -1, q;
      bool has_default = false;
      if (!json_is_array (vv) || json_array_size (vv) == 0 || json_array_size (vv) > MAX_VALID_VALUES)
        FAIL ("capacity `%s`: validValues must hold 1 to %d values", name, MAX_VALID_VALUES);
      json_array_foreach (vv, i, e)
      {
        snprintf (what, sizeof (what), "capacity `%s` validValues[%zu]", name, i);
        if (quantity (e, what, &q, err) < 0)
          return -1;
        if (q <= prev)
          FAIL ("capacity `%s`: validValues must be sorted ascending without duplicates", name);
        if (q > value)
          FAIL ("capacity `%s`: validValues[%zu] exceeds the capacity", name, i);
        has_default |= q == def;
        prev = q;
      }
      if (!has_default)
        FAIL ("capacity `%s`: the default is not one of validValues", name);
    }
  if (vr)
    {
      if (!json_is_object (vr) || !only_keys (vr, rkeys, &bad))
        FAIL ("capacity `%s`: validRange has unknown field `%s`", name, bad ? bad : "?");
      if (json_object_get (vr, "min") == NULL)
        FAIL ("capacity `%s`: validRange needs min", name);
      snprintf (what, sizeof (what), "capacity `%s` validRange.min", name);
      if (quantity (json_object_get (vr, "min"), what, &min, err) < 0)
        return -1;
      snprintf (what, sizeof (what), "capacity `%s` validRange.max", name);
      if (json_object_get (vr, "max") && quantity (json_object_get (vr, "max"), what, &max, err) < 0)
        return -1;
      snprintf (what, sizeof (what), "capacity `%s` validRange.step", name);
      if (json_object_get (vr, "step") && quantity (json_object_get (vr, "step"), what, &step, err) < 0)
        return -1;
      if (min > value || max > value || min > max)
        FAIL ("capacity `%s`: validRange must satisfy min <= max <= capacity", name);
      if (def < min || def > max)
        FAIL ("capacity `%s`: the default is outside validRange", name);
      if (json_object_get (vr, "step"))
        {
          if (step <= 0)
            FAIL ("capacity `%s`: validRange.step must be positive", name);
          if (min + step > value)
            FAIL ("capacity `%s`: validRange min + step exceeds the capacity", name);
          if (def % step != 0 || (json_object_get (vr, "max") && max % step != 0))
            FAIL ("capacity `%s`: default and max must be multiples of step", name);
        }
    }
  return 0;
}

static int
check_counters (const char *what, json_t *counters, json_t *into, nrm_error_t *err)
{
  const char *key;
  json_t *v;
  if (!json_is_object (counters) || json_object_size (counters) == 0)
    FAIL ("%s: counters must be a non-empty map", what);
  if (json_object_size (counters) > MAX_COUNTERS)
    FAIL ("%s: %zu counters, more than %d", what, json_object_size (counters), MAX_COUNTERS);
  json_object_foreach (counters, key, v)
  {
    nrm_quantity_t q;
    char w[160];
    if (!nrm_is_dns_label (key))
      FAIL ("%s: counter name `%s` is not a DNS label", what, key);
    snprintf (w, sizeof (w), "%s: counter `%s`", what, key);
    if (!json_is_object (v) || quantity (json_object_get (v, "value"), w, &q, err) < 0)
      {
        if (err && *err)
          return -1;
        FAIL ("%s: counter `%s` needs a value", what, key);
      }
    if (into)
      json_object_set_new (into, key, json_string (json_string_value (json_object_get (v, "value"))));
  }
  return 0;
}

static bool
node_resource_ok (const char *r)
{
  return strcmp (r, "cpu") == 0 || strcmp (r, "memory") == 0 || strcmp (r, "ephemeral-storage") == 0
         || (strncmp (r, "hugepages-", 10) == 0 && r[10] != '\0');
}

static int
check_device (json_t *dev, json_t *pool, nrm_error_t *err)
{
  static const char *const keys[] = { "name",
                                      "attributes",
                                      "capacity",
                                      "consumesCounters",
                                      "nodeName",
                                      "nodeSelector",
                                      "allNodes",
                                      "taints",
                                      "bindsToNode",
                                      "bindingConditions",
                                      "bindingFailureConditions",
                                      "allowMultipleAllocations",
                                      "nodeAllocatableResourceMappings",
                                      "nodeAllocatableResources",
                                      NULL };
  const char *bad = NULL, *key;
  json_t *v, *attrs = json_object_get (dev, "attributes"), *caps = json_object_get (dev, "capacity");
  size_t values = 0;
  bool multi = json_is_true (json_object_get (dev, "allowMultipleAllocations"));

  if (!json_is_object (dev))
    FAIL ("a device is not an object");
  const char *name = json_string_value (json_object_get (dev, "name"));
  if (!nrm_is_dns_label (name))
    FAIL ("device name `%s` is not a DNS label", name ? name : "(missing)");
  json_t *seen = json_object_get (pool, "devices");
  if (json_object_get (seen, name))
    FAIL ("device `%s` appears twice in the pool", name);
  json_object_set_new (seen, name, json_true ());
  if (!only_keys (dev, keys, &bad))
    FAIL ("device `%s`: unknown field `%s`", name, bad);
  if (attrs && !json_is_object (attrs))
    FAIL ("device `%s`: attributes must be a map", name);
  if (caps && !json_is_object (caps))
    FAIL ("device `%s`: capacity must be a map", name);
  if (json_object_size (attrs) + json_object_size (caps) > MAX_ATTRS_AND_CAPS)
    FAIL ("device `%s`: %zu attributes and capacities, more than %d", name,
          json_object_size (attrs) + json_object_size (caps), MAX_ATTRS_AND_CAPS);
  json_object_foreach (attrs, key, v)
  {
    if (check_attribute (key, v, &values, err) < 0)
      return nrm_error_wrap (err, "device `%s`", name);
    if (json_object_get (caps, key))
      FAIL ("device `%s`: `%s` is both an attribute and a capacity", name, key);
  }
  if (values > MAX_ATTR_VALUES)
    FAIL ("device `%s`: %zu attribute values, more than %d", name, values, MAX_ATTR_VALUES);
  json_object_foreach (caps, key, v)
  {
    static const char *const ckeys[] = { "value", "requestPolicy", NULL };
    nrm_quantity_t q;
    char what[128];
    if (!nrm_is_qualified_name (key))
      FAIL ("device `%s`: capacity name `%s` is not a qualified name", name, key);
    if (!json_is_object (v) || !only_keys (v, ckeys, &bad))
      FAIL ("device `%s`: capacity `%s` has unknown field `%s`", name, key, bad ? bad : "?");
    snprintf (what, sizeof (what), "device `%s`: capacity `%s`", name, key);
    if (quantity (json_object_get (v, "value"), what, &q, err) < 0)
      return -1;
    if (json_object_get (v, "requestPolicy"))
      {
        if (!multi)
          FAIL ("device `%s`: capacity `%s` has a requestPolicy without allowMultipleAllocations", name, key);
        if (check_policy (key, json_object_get (v, "requestPolicy"), q, err) < 0)
          return nrm_error_wrap (err, "device `%s`", name);
      }
  }

  json_t *cc = json_object_get (dev, "consumesCounters");
  if (cc)
    {
      size_t i;
      json_t *c;
      if (!json_is_array (cc) || json_array_size (cc) > MAX_CONSUMPTIONS)
        FAIL ("device `%s`: consumesCounters must be a list of at most %d entries", name, MAX_CONSUMPTIONS);
      json_array_foreach (cc, i, c)
      {
        const char *set = json_string_value (json_object_get (c, "counterSet"));
        char what[160];
        if (!nrm_is_dns_label (set))
          FAIL ("device `%s`: counterSet `%s` is not a DNS label", name, set ? set : "(missing)");
        for (size_t j = 0; j < i; j++)
          if (strcmp (set, json_string_value (json_object_get (json_array_get (cc, j), "counterSet"))) == 0)
            FAIL ("device `%s`: counter set `%s` is consumed twice", name, set);
        snprintf (what, sizeof (what), "device `%s`: consumesCounters `%s`", name, set);
        if (check_counters (what, json_object_get (c, "counters"), NULL, err) < 0)
          return -1;
        /* Checked against the pool's counter sets once all slices are read. */
        json_array_append_new (json_object_get (pool, "uses"), json_pack ("{s:s, s:s, s:O}", "device", name, "set", set,
                                                                          "counters", json_object_get (c, "counters")));
      }
    }
  json_t *taints = json_object_get (dev, "taints");
  if (taints)
    {
      size_t i;
      json_t *tn;
      if (!json_is_array (taints) || json_array_size (taints) > MAX_TAINTS)
        FAIL ("device `%s`: at most %d taints", name, MAX_TAINTS);
      json_array_foreach (taints, i, tn)
      {
        const char *effect = json_string_value (json_object_get (tn, "effect"));
        if (json_string_value (json_object_get (tn, "key")) == NULL || effect == NULL
            || (strcmp (effect, "None") && strcmp (effect, "NoSchedule") && strcmp (effect, "NoExecute")))
          FAIL ("device `%s`: taint %zu needs a key and an effect of None, NoSchedule or NoExecute", name, i);
      }
    }
  const char *conds[] = { "bindingConditions", "bindingFailureConditions" };
  for (int k = 0; k < 2; k++)
    {
      json_t *c = json_object_get (dev, conds[k]);
      if (c && (!json_is_array (c) || json_array_size (c) > MAX_BINDING_CONDITIONS))
        FAIL ("device `%s`: at most %d %s", name, MAX_BINDING_CONDITIONS, conds[k]);
    }
  json_t *maps = json_object_get (dev, "nodeAllocatableResourceMappings");
  json_object_foreach (maps, key, v)
  {
    static const char *const mkeys[] = { "capacityKey", "allocationMultiplier", NULL };
    nrm_quantity_t q;
    char what[160];
    if (!node_resource_ok (key))
      FAIL ("device `%s`: `%s` is not a node-allocatable resource", name, key);
    if (!json_is_object (v) || !only_keys (v, mkeys, &bad))
      FAIL ("device `%s`: mapping `%s` has unknown field `%s`", name, key, bad ? bad : "?");
    const char *ck = json_string_value (json_object_get (v, "capacityKey"));
    if (json_object_get (v, "capacityKey") && (ck == NULL || json_object_get (caps, ck) == NULL))
      FAIL ("device `%s`: mapping `%s` names capacity `%s`, which the device does not have", name, key, ck ? ck : "?");
    snprintf (what, sizeof (what), "device `%s`: mapping `%s` allocationMultiplier", name, key);
    if (json_object_get (v, "allocationMultiplier")
        && quantity (json_object_get (v, "allocationMultiplier"), what, &q, err) < 0)
      return -1;
  }
  /* 1.37's form: {<resource>: {mapping: {capacityKey, capacityMultiplier} or
   * {deviceMultiplier}}}, as its API server validates it. */
  json_object_foreach (json_object_get (dev, "nodeAllocatableResources"), key, v)
  {
    static const char *const rkeys[] = { "mapping", "overhead", NULL };
    static const char *const mkeys[] = { "capacityKey", "capacityMultiplier", "deviceMultiplier", NULL };
    static const char *const qkeys[] = { "capacityMultiplier", "deviceMultiplier" };
    nrm_quantity_t q;
    char what[160];
    json_t *m = json_object_get (v, "mapping");
    if (!node_resource_ok (key))
      FAIL ("device `%s`: `%s` is not a node-allocatable resource", name, key);
    if (!json_is_object (v) || !only_keys (v, rkeys, &bad) || (m && !only_keys (m, mkeys, &bad)))
      FAIL ("device `%s`: node-allocatable resource `%s` has unknown field `%s`", name, key, bad ? bad : "?");
    if (m == NULL && json_object_get (v, "overhead") == NULL)
      FAIL ("device `%s`: node-allocatable resource `%s` needs a mapping or an overhead", name, key);
    const char *ck = json_string_value (json_object_get (m, "capacityKey"));
    bool has_ck = json_object_get (m, "capacityKey") != NULL;
    if (has_ck && (ck == NULL || json_object_get (caps, ck) == NULL))
      FAIL ("device `%s`: mapping `%s` names capacity `%s`, which the device does not have", name, key, ck ? ck : "?");
    if (has_ck != (json_object_get (m, "capacityMultiplier") != NULL))
      FAIL ("device `%s`: mapping `%s`: capacityKey and capacityMultiplier go together", name, key);
    if (has_ck && json_object_get (m, "deviceMultiplier"))
      FAIL ("device `%s`: mapping `%s`: deviceMultiplier excludes capacityKey", name, key);
    for (size_t i = 0; i < sizeof (qkeys) / sizeof (qkeys[0]); i++)
      {
        snprintf (what, sizeof (what), "device `%s`: mapping `%s` %s", name, key, qkeys[i]);
        if (json_object_get (m, qkeys[i]) && quantity (json_object_get (m, qkeys[i]), what, &q, err) < 0)
          return -1;
      }
  }
  return 0;
}

static bool
pool_name_ok (const char *s)
{
  if (s == NULL || strlen (s) == 0 || strlen (s) > 253)
    return false;
  cleanup_free char *copy = xstrdup (s);
  char *save = NULL;
  size_t parts = 0;
  for (char *tok = strtok_r (copy, "/", &save); tok; tok = strtok_r (NULL, "/", &save), parts++)
    if (!nrm_is_dns_subdomain (tok, 253))
      return false;
  return parts > 0 && s[0] != '/' && s[strlen (s) - 1] != '/' && strstr (s, "//") == NULL;
}

static int
check_slice (json_t *s, json_t *pools, json_t *names, nrm_error_t *err)
{
  static const char *const spec_keys[]
      = { "driver",         "pool", "nodeName", "nodeSelector", "allNodes", "devices", "perDeviceNodeSelection",
          "sharedCounters", NULL };
  const char *bad = NULL;
  json_t *meta = json_object_get (s, "metadata"), *spec = json_object_get (s, "spec");
  const char *name = json_string_value (json_object_get (meta, "name"));

  if (!json_is_object (s))
    FAIL ("an item is not an object");
  if (!json_is_string (json_object_get (s, "apiVersion"))
      || strcmp (json_string_value (json_object_get (s, "apiVersion")), "resource.k8s.io/v1") != 0
      || !json_is_string (json_object_get (s, "kind"))
      || strcmp (json_string_value (json_object_get (s, "kind")), "ResourceSlice") != 0)
    FAIL ("an item is not a resource.k8s.io/v1 ResourceSlice");
  if (!nrm_is_dns_subdomain (name, 253))
    FAIL ("slice name `%s` is not a DNS subdomain", name ? name : "(missing)");
  if (json_object_get (names, name))
    FAIL ("slice name `%s` appears twice", name);
  json_object_set_new (names, name, json_true ());
  if (!json_is_object (spec) || !only_keys (spec, spec_keys, &bad))
    FAIL ("slice `%s`: spec has unknown field `%s`", name, bad ? bad : "?");

  const char *driver = json_string_value (json_object_get (spec, "driver"));
  if (!nrm_is_dns_subdomain (driver, 63))
    FAIL ("slice `%s`: driver `%s` is not a DNS subdomain of at most 63 characters", name, driver ? driver : "?");
  json_t *pool = json_object_get (spec, "pool");
  const char *pname = json_string_value (json_object_get (pool, "name"));
  if (!pool_name_ok (pname))
    FAIL ("slice `%s`: pool name `%s` is not DNS subdomains separated by '/'", name, pname ? pname : "?");
  json_t *gen = json_object_get (pool, "generation"), *count = json_object_get (pool, "resourceSliceCount");
  if (!json_is_integer (gen) || json_integer_value (gen) < 0)
    FAIL ("slice `%s`: pool generation must be a non-negative integer", name);
  if (!json_is_integer (count) || json_integer_value (count) <= 0)
    FAIL ("slice `%s`: pool resourceSliceCount must be positive", name);

  int selections = (json_object_get (spec, "nodeName") != NULL) + (json_object_get (spec, "nodeSelector") != NULL)
                   + json_is_true (json_object_get (spec, "allNodes"))
                   + json_is_true (json_object_get (spec, "perDeviceNodeSelection"));
  if (selections != 1)
    FAIL ("slice `%s`: exactly one of nodeName, nodeSelector, allNodes and perDeviceNodeSelection must be set", name);
  if (json_object_get (spec, "nodeName")
      && !nrm_is_dns_subdomain (json_string_value (json_object_get (spec, "nodeName")), 253))
    FAIL ("slice `%s`: nodeName is not a valid node name", name);

  json_t *devices = json_object_get (spec, "devices"), *sets = json_object_get (spec, "sharedCounters");
  if (json_array_size (devices) && json_array_size (sets))
    FAIL ("slice `%s`: a slice carries devices or sharedCounters, not both", name);

  char key[600];
  snprintf (key, sizeof (key), "%s\n%s", driver, pname);
  json_t *p = json_object_get (pools, key);
  if (p == NULL)
    {
      p = json_pack ("{s:I, s:I, s:i, s:{}, s:{}, s:[]}", "generation", json_integer_value (gen), "count",
                     json_integer_value (count), "seen", 0, "devices", "sets", "uses");
      json_object_set_new (pools, key, p);
    }
  if (json_integer_value (json_object_get (p, "generation")) != json_integer_value (gen)
      || json_integer_value (json_object_get (p, "count")) != json_integer_value (count))
    FAIL ("slice `%s`: generation and resourceSliceCount differ from other slices of pool `%s`", name, pname);
  json_object_set_new (p, "seen", json_integer (json_integer_value (json_object_get (p, "seen")) + 1));

  if (devices)
    {
      size_t i, adv = 0;
      json_t *d;
      if (!json_is_array (devices))
        FAIL ("slice `%s`: devices must be a list", name);
      json_array_foreach (devices, i, d)
      {
        if (check_device (d, p, err) < 0)
          return nrm_error_wrap (err, "slice `%s`", name);
        adv += nrm_device_is_advanced (d);
      }
      size_t limit = adv ? MAX_DEVICES_ADVANCED : MAX_DEVICES;
      if (json_array_size (devices) > limit)
        FAIL ("slice `%s`: %zu devices, more than %zu%s", name, json_array_size (devices), limit,
              adv ? " (taints, counters or list attributes are used)" : "");
    }
  if (sets)
    {
      size_t i;
      json_t *cs;
      if (!json_is_array (sets) || json_array_size (sets) > MAX_COUNTER_SETS)
        FAIL ("slice `%s`: sharedCounters must be a list of at most %d counter sets", name, MAX_COUNTER_SETS);
      json_array_foreach (sets, i, cs)
      {
        const char *set = json_string_value (json_object_get (cs, "name"));
        char what[160];
        if (!nrm_is_dns_label (set))
          FAIL ("slice `%s`: counter set name `%s` is not a DNS label", name, set ? set : "(missing)");
        if (json_object_get (json_object_get (p, "sets"), set))
          FAIL ("slice `%s`: counter set `%s` appears twice in the pool", name, set);
        json_t *into = json_object ();
        json_object_set_new (json_object_get (p, "sets"), set, into);
        snprintf (what, sizeof (what), "slice `%s`: counter set `%s`", name, set);
        if (check_counters (what, json_object_get (cs, "counters"), into, err) < 0)
          return -1;
      }
    }
  return 0;
}

int
nrm_slices_validate (json_t *list, nrm_error_t *err)
{
  cleanup_json json_t *pools = json_object ();
  cleanup_json json_t *names = json_object ();
  json_t *items = json_object_get (list, "items");
  size_t i;
  json_t *s;
  const char *key;

  if (!json_is_object (list) || !json_is_array (items))
    FAIL ("the document is not a List with items");
  json_array_foreach (items, i, s)
  {
    if (check_slice (s, pools, names, err) < 0)
      return -1;
  }
  json_object_foreach (pools, key, s)
  {
    json_t *u;
    const char *nl = strchr (key, '\n');
    if (json_integer_value (json_object_get (s, "seen")) != json_integer_value (json_object_get (s, "count")))
      FAIL ("pool `%s`: resourceSliceCount is %" JSON_INTEGER_FORMAT " but %" JSON_INTEGER_FORMAT " slices were found",
            nl ? nl + 1 : key, json_integer_value (json_object_get (s, "count")),
            json_integer_value (json_object_get (s, "seen")));
    /* Every consumption names an existing counter and fits in it. */
    json_array_foreach (json_object_get (s, "uses"), i, u)
    {
      const char *dev = json_string_value (json_object_get (u, "device"));
      const char *set = json_string_value (json_object_get (u, "set"));
      json_t *have = json_object_get (json_object_get (s, "sets"), set);
      const char *cname;
      json_t *c;
      if (have == NULL)
        FAIL ("device `%s` consumes counter set `%s`, which the pool does not define", dev, set);
      json_object_foreach (json_object_get (u, "counters"), cname, c)
      {
        nrm_quantity_t want, cap;
        if (json_object_get (have, cname) == NULL)
          FAIL ("device `%s` consumes counter `%s/%s`, which does not exist", dev, set, cname);
        if (nrm_quantity_parse (json_string_value (json_object_get (c, "value")), &want, err) < 0
            || nrm_quantity_parse (json_string_value (json_object_get (have, cname)), &cap, err) < 0)
          return -1;
        if (want > cap)
          FAIL ("device `%s` consumes more of counter `%s/%s` than it holds", dev, set, cname);
      }
    }
  }
  return 0;
}
