/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <string.h>
#include <time.h>

#include "driver/k8s/devstatus.h"

bool
nrm_devstatus_same (json_t *a, json_t *b, const char *key)
{
  const char *x = json_string_value (json_object_get (a, key)), *y = json_string_value (json_object_get (b, key));
  return (x == NULL && y == NULL) || (x && y && strcmp (x, y) == 0);
}

bool
nrm_devstatus_same_item (json_t *a, json_t *b)
{
  return nrm_devstatus_same (a, b, "driver") && nrm_devstatus_same (a, b, "pool") && nrm_devstatus_same (a, b, "device")
         && nrm_devstatus_same (a, b, "shareID");
}

json_t *
nrm_devstatus_entry (json_t *claim, json_t *item)
{
  size_t i;
  json_t *d;
  json_array_foreach (json_object_get (json_object_get (claim, "status"), "devices"), i, d)
  {
    if (nrm_devstatus_same_item (d, item))
      return d;
  }
  return NULL;
}

json_t *
nrm_devstatus_condition (json_t *entry, const char *type)
{
  size_t i;
  json_t *c;
  json_array_foreach (json_object_get (entry, "conditions"), i, c)
  {
    const char *t = json_string_value (json_object_get (c, "type"));
    if (t && type && strcmp (t, type) == 0)
      return c;
  }
  return NULL;
}

void
nrm_devstatus_now (char *buf, size_t len)
{
  time_t t = time (NULL);
  struct tm tm;
  gmtime_r (&t, &tm);
  strftime (buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}
