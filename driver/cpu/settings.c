/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU driver's settings: the config file's `cpu` section (its own keys)
 * and the flags that set them, read in one place for the driver and for nrm. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "cpuset/partition.h"
#include "cpuset/placement.h"
#include "driver/cpu/cpu.h"
#include "nrm/base/text.h"

static const char *const mode_names[] = { "numa", "partitioned" };

void
nrm_cpu_settings_init (struct nrm_cpu_settings *s)
{
  memset (s, 0, sizeof (*s));
  s->mode = NRM_CPU_MODE_NUMA;
  s->min_shared_cpus = 1;
  s->partition = NRM_PARTITION_OFF;
}

int
nrm_cpu_mode_parse (const char *name, enum nrm_cpu_mode *ret, nrm_error_t *err)
{
  for (size_t i = 0; i < sizeof (mode_names) / sizeof (mode_names[0]); i++)
    if (name && strcmp (name, mode_names[i]) == 0)
      {
        *ret = (enum nrm_cpu_mode) i;
        return 0;
      }
  return nrm_error_set (err, EINVAL, "unknown CPU device mode `%s` (numa or partitioned)", name ? name : "");
}

const char *
nrm_cpu_mode_name (enum nrm_cpu_mode m)
{
  return mode_names[m == NRM_CPU_MODE_PARTITIONED];
}

static int
read_options (json_t *options, unsigned *ret, nrm_error_t *err)
{
  size_t k;
  json_t *o;
  unsigned opts = 0;
  NRM_JSON_WANT (options, json_is_array, "cpu.options", "a list of option names");
  json_array_foreach (options, k, o)
  {
    NRM_JSON_WANT (o, json_is_string, "cpu.options[]", "a string");
    if (nrm_cpu_option_parse (json_string_value (o), &opts, err) < 0)
      return nrm_error_wrap (err, "key `cpu.options`");
  }
  if (nrm_cpu_options_check (opts, err) < 0)
    return nrm_error_wrap (err, "key `cpu.options`");
  *ret = opts;
  return 0;
}

int
nrm_cpu_settings_read (json_t *section, struct nrm_cpu_settings *s, nrm_error_t *err)
{
  const char *key;
  json_t *v;
  struct nrm_cpu_settings n = *s;
  if (section == NULL)
    return 0;
  NRM_JSON_WANT (section, json_is_object, "cpu", "an object");
  json_object_foreach (section, key, v)
  {
    if (strcmp (key, "mode") == 0)
      {
        NRM_JSON_WANT (v, json_is_string, "cpu.mode", "a string");
        if (nrm_cpu_mode_parse (json_string_value (v), &n.mode, err) < 0)
          return nrm_error_wrap (err, "key `cpu.mode`");
      }
    else if (strcmp (key, "options") == 0)
      {
        if (read_options (v, &n.options, err) < 0)
          return -1;
      }
    else if (strcmp (key, "minSharedCPUs") == 0)
      {
        if (!json_is_integer (v) || json_integer_value (v) < 0 || json_integer_value (v) > 100000)
          return nrm_error_set (err, EINVAL, "key `cpu.minSharedCPUs` must be a non-negative integer");
        n.min_shared_cpus = (long) json_integer_value (v);
      }
    else if (strcmp (key, "partition") == 0)
      {
        enum nrm_partition_mode m;
        if (nrm_partition_mode_parse (json_string_value (v), "key `cpu.partition`", &m, err) < 0)
          return -1;
        n.partition = m;
      }
    else
      return nrm_error_set (err, EINVAL,
                            "unknown key `cpu.%.64s` (known: mode, options, minSharedCPUs, partition, "
                            "sharedPoolCgroups, driverName)",
                            key);
  }
  *s = n;
  return 0;
}

json_t *
nrm_cpu_settings_json (const struct nrm_cpu_settings *s)
{
  json_t *options = json_array ();
  for (unsigned bit = 0; bit < 8 * sizeof (s->options); bit++)
    if (s->options & (1u << bit))
      json_array_append_new (options, json_string (nrm_cpu_option_name (1u << bit)));
  return json_pack ("{s:s, s:o, s:I, s:s}", "mode", nrm_cpu_mode_name (s->mode), "options", options, "minSharedCPUs",
                    (json_int_t) s->min_shared_cpus, "partition",
                    nrm_partition_mode_name ((enum nrm_partition_mode) s->partition));
}
