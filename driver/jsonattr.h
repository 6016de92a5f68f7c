/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_JSONATTR_H
#define NRM_JSONATTR_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Setters for resource.k8s.io/v1 DeviceAttribute values in an attribute map. */
static inline void
jattr_int (json_t *attrs, const char *name, int64_t v)
{
  json_object_set_new (attrs, name, json_pack ("{s:I}", "int", (json_int_t) v));
}

static inline void
jattr_bool (json_t *attrs, const char *name, bool v)
{
  json_object_set_new (attrs, name, json_pack ("{s:b}", "bool", v));
}

static inline void
jattr_str (json_t *attrs, const char *name, const char *v)
{
  json_object_set_new (attrs, name, json_pack ("{s:s}", "string", v));
}

static inline void
jattr_ints (json_t *attrs, const char *name, const int64_t *v, size_t n)
{
  json_t *a = json_array ();
  for (size_t i = 0; i < n; i++)
    json_array_append_new (a, json_integer ((json_int_t) v[i]));
  json_object_set_new (attrs, name, json_pack ("{s:o}", "ints", a));
}

static inline void
jattr_strs (json_t *attrs, const char *name, const char *const *v, size_t n)
{
  json_t *a = json_array ();
  for (size_t i = 0; i < n; i++)
    json_array_append_new (a, json_string (v[i]));
  json_object_set_new (attrs, name, json_pack ("{s:o}", "strings", a));
}

#endif
