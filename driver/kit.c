/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the drivers' prepare paths. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "driver/kit.h"

bool
nrm_kit_names_request (json_t *requests, const char *request)
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

int
nrm_kit_consumed (const struct nrm_alloc_result *r, const char *key, nrm_quantity_t dflt, nrm_quantity_t *ret,
                  nrm_error_t *err)
{
  json_t *v = json_object_get (r->consumed, key);
  if (v == NULL)
    {
      *ret = dflt;
      return 0;
    }
  if (!json_is_string (v))
    return nrm_error_set (err, EINVAL, "device %s: consumedCapacity `%s` is not a quantity", r->device, key);
  if (nrm_quantity_parse (json_string_value (v), ret, err) < 0)
    return nrm_error_wrap (err, "device %s: consumedCapacity `%s` is not a quantity", r->device, key);
  if (*ret <= 0)
    return nrm_error_set (err, EINVAL, "device %s: consumedCapacity `%s` must be positive", r->device, key);
  return 0;
}

/* The quantity obj.field of a device's capacity `key`; an optional field
 * that is missing leaves *ret as it is. */
static int
policy_quantity (json_t *obj, const char *field, bool optional, const char *device, const char *key,
                 nrm_quantity_t *ret, nrm_error_t *err)
{
  nrm_error_t e = NULL;
  if (optional && json_object_get (obj, field) == NULL)
    return 0;
  if (nrm_quantity_parse (json_string_value (json_object_get (obj, field)), ret, &e) < 0)
    {
      nrm_error_release (&e);
      return nrm_error_set (err, EINVAL, "device %s: capacity `%s` has no valid %s", device, key, field);
    }
  return 0;
}

int
nrm_kit_consumed_checked (const struct nrm_alloc_result *r, json_t *device, const char *key, nrm_quantity_t *ret,
                          nrm_error_t *err)
{
  json_t *cap = json_object_get (json_object_get (device, "capacity"), key);
  json_t *policy = json_object_get (cap, "requestPolicy");
  json_t *range = json_object_get (policy, "validRange"), *values = json_object_get (policy, "validValues");
  nrm_quantity_t value, dflt, q;
  char a[64], b[64];
  if (cap == NULL)
    return nrm_error_set (err, EINVAL, "device %s has no capacity `%s`", r->device, key);
  if (policy_quantity (cap, "value", false, r->device, key, &value, err) < 0)
    return -1;
  dflt = value;
  if (policy_quantity (policy, "default", true, r->device, key, &dflt, err) < 0)
    return -1;
  if (nrm_kit_consumed (r, key, dflt, &q, err) < 0)
    return -1;
  nrm_quantity_text (q, a, sizeof (a));
  if (q > value)
    return nrm_error_set (err, ERANGE, "device %s: consumedCapacity `%s` of %s is more than the device's %s", r->device,
                          key, a, nrm_quantity_text (value, b, sizeof (b)));
  if (json_is_array (values))
    {
      size_t i;
      json_t *v;
      json_array_foreach (values, i, v)
      {
        nrm_quantity_t x;
        nrm_error_t e = NULL;
        if (nrm_quantity_parse (json_string_value (v), &x, &e) == 0 && x == q)
          return *ret = q, 0;
        nrm_error_release (&e);
      }
      return nrm_error_set (err, EINVAL, "device %s: consumedCapacity `%s` of %s is none of the device's valid values",
                            r->device, key, a);
    }
  if (range)
    {
      nrm_quantity_t min = 0, max = value, step = 0;
      if (policy_quantity (range, "min", true, r->device, key, &min, err) < 0
          || policy_quantity (range, "max", true, r->device, key, &max, err) < 0
          || policy_quantity (range, "step", true, r->device, key, &step, err) < 0)
        return -1;
      if (q < min)
        return nrm_error_set (err, ERANGE, "device %s: consumedCapacity `%s` of %s is below the device's minimum %s",
                              r->device, key, a, nrm_quantity_text (min, b, sizeof (b)));
      if (q > max)
        return nrm_error_set (err, ERANGE, "device %s: consumedCapacity `%s` of %s is above the device's maximum %s",
                              r->device, key, a, nrm_quantity_text (max, b, sizeof (b)));
      if (step > 0 && (q - min) % step != 0)
        return nrm_error_set (err, EINVAL,
                              "device %s: consumedCapacity `%s` of %s is not the minimum plus whole steps of %s",
                              r->device, key, a, nrm_quantity_text (step, b, sizeof (b)));
    }
  *ret = q;
  return 0;
}

int
nrm_kit_opaque_params (json_t *entry, size_t i, const char *api_version, const char *kind, json_t **ret,
                       nrm_error_t *err)
{
  json_t *params = json_object_get (json_object_get (entry, "opaque"), "parameters");
  const char *api = json_string_value (json_object_get (params, "apiVersion"));
  const char *k = json_string_value (json_object_get (params, "kind"));
  if (!json_is_object (params))
    return nrm_error_set (err, EINVAL, "opaque configuration %zu: parameters must be an object", i);
  if (api == NULL || strcmp (api, api_version) != 0 || k == NULL || strcmp (k, kind) != 0)
    return nrm_error_set (err, EINVAL, "opaque configuration %zu: expected apiVersion %s, kind %s", i, api_version,
                          kind);
  *ret = params;
  return 0;
}

int
nrm_kit_index_pool (const struct nrm_pool *p, json_t **ret_by_name, json_t **ret_names, nrm_error_t *err)
{
  json_t *by_name = json_object (), *names = json_array ();
  size_t i;
  json_t *dev;
  json_array_foreach (p->devices, i, dev)
  {
    /* A device without a name, or with one that is not UTF-8. */
    const char *name = json_string_value (json_object_get (dev, "name"));
    if (name == NULL || json_object_set (by_name, name, dev) < 0
        || json_array_append_new (names, json_string (name)) < 0)
      {
        json_decref (by_name);
        json_decref (names);
        return nrm_error_set (err, EINVAL, "device %zu of pool `%s` has no valid name", i, p->driver);
      }
  }
  *ret_by_name = by_name;
  *ret_names = names;
  return 0;
}

const char *
nrm_kit_pod_group (json_t *claim)
{
  size_t i;
  json_t *r;
  json_array_foreach (json_object_get (json_object_get (claim, "status"), "reservedFor"), i, r)
  {
    const char *group = json_string_value (json_object_get (r, "apiGroup"));
    const char *resource = json_string_value (json_object_get (r, "resource"));
    if (group && resource && strcmp (group, "scheduling.k8s.io") == 0 && strcmp (resource, "podgroups") == 0)
      return json_string_value (json_object_get (r, "name"));
  }
  return NULL;
}
