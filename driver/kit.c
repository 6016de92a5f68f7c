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
  if (!json_is_string (v) || nrm_quantity_parse (json_string_value (v), ret, err) < 0)
    return nrm_error_set (err, EINVAL, "device %s: consumedCapacity `%s` is not a quantity", r->device, key);
  if (*ret <= 0)
    return nrm_error_set (err, EINVAL, "device %s: consumedCapacity `%s` must be positive", r->device, key);
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
