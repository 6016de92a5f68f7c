/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/placement.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"
#include "nrm/settings.h"

#define SETTINGS_VERSION 1
#define SETTINGS_MAX (1 << 20)

/* Each compared key, and how a message names it. */
static const struct
{
  const char *key, *what;
} keys[] = {
  { "machine", "the machine (--topology)" },
  { "nodeName", "the node name (--node-name)" },
  { "cpuMode", "the CPU mode (--cpu-mode)" },
  { "cpuOptions", "the CPU options (--cpu-options)" },
  { "reservedCPUs", "the reserved CPUs (--reserved-cpus)" },
  { "isolatedCPUs", "the isolated CPUs (--isolated-cpus, or the kernel's)" },
  { "reservedMemory", "the reserved memory (--reserved-memory)" },
  { "memoryGranularity", "the memory granularity (memory.granularity)" },
};

static json_t *
jlist (hwloc_const_bitmap_t set)
{
  cleanup_free char *s = nrm_cpulist_format (set);
  return json_string (s);
}

json_t *
nrm_settings_record (const struct nrm_config *c, const struct nrm_topology *t, const struct nrm_drivers *d)
{
  char path[PATH_MAX];
  const char *machine = "live";
  if (c->topology)
    machine = realpath (c->topology, path) ? path : c->topology;
  cleanup_free char *options = xstrdup (""), *memory = xstrdup ("");
  for (unsigned bit = 0; bit < 8 * sizeof (c->cpu.options); bit++)
    if (c->cpu.options & (1u << bit))
      {
        char *o = xasprintf ("%s%s%s", options, *options ? "," : "", nrm_cpu_option_name (1u << bit));
        free (options);
        options = o;
      }
  for (size_t i = 0; i < t->n_numa; i++)
    {
      const struct nrm_numa_node *n = &t->numa[i];
      if (n->reserved_memory)
        {
          char *m = xasprintf ("%s%s%u:memory=%" PRIu64, memory, *memory ? "," : "", n->os_index, n->reserved_memory);
          free (memory);
          memory = m;
        }
      for (size_t h = 0; h < n->n_hugepages; h++)
        if (n->reserved_hugepages[h])
          {
            cleanup_free char *ps = nrm_pagesize_name (n->hugepages[h].size);
            char *m = xasprintf ("%s%s%u:hugepages-%s=%" PRIu64, memory, *memory ? "," : "", n->os_index, ps,
                                 n->reserved_hugepages[h]);
            free (memory);
            memory = m;
          }
    }
  json_t *drivers = json_object ();
  for (size_t i = 0; i < d->n; i++)
    json_object_set_new (drivers, d->slots[i].ops->id, json_string (d->slots[i].name));
  char gran[32];
  snprintf (gran, sizeof (gran), "%" PRIu64, c->memory_granularity);
  return json_pack ("{s:i, s:s, s:s, s:s, s:s, s:o, s:o, s:s, s:s, s:o, s:I, s:O}", "version", SETTINGS_VERSION,
                    "machine", machine, "nodeName", c->node_name ? c->node_name : "", "cpuMode",
                    nrm_cpu_mode_name (c->cpu.mode), "cpuOptions", options, "reservedCPUs", jlist (t->reserved),
                    "isolatedCPUs", jlist (t->isolated), "reservedMemory", memory, "memoryGranularity", gran, "drivers",
                    drivers, "nodeEntry", (json_int_t) c->node_entry, "sources", c->sources);
}

int
nrm_settings_write (const char *state_dir, json_t *record, nrm_error_t *err)
{
  cleanup_free char *path = xasprintf ("%s/%s", state_dir, NRM_SETTINGS_FILE);
  cleanup_free char *text = json_dumps (record, JSON_INDENT (1) | JSON_SORT_KEYS);
  size_t len = strlen (text);
  char *nl = xasprintf ("%s\n", text);
  int r = nrm_write_atomic (path, nl, len + 1, 0600, err);
  free (nl);
  return r;
}

static const char *
shown (const char *v)
{
  return *v ? v : "none";
}

int
nrm_settings_check (const char *state_dir, json_t *mine, const char *cmd, nrm_error_t *err)
{
  cleanup_free char *path = xasprintf ("%s/%s", state_dir, NRM_SETTINGS_FILE);
  cleanup_free char *text = NULL;
  nrm_error_t rerr = NULL;
  if (nrm_read_file (path, SETTINGS_MAX, &text, NULL, &rerr) < 0)
    {
      if (rerr->status == ENOENT)
        {
          nrm_error_release (&rerr);
          return 0;
        }
      *err = rerr;
      return -1;
    }
  json_error_t jerr;
  cleanup_json json_t *rec = json_loads (text, 0, &jerr);
  if (!json_is_object (rec) || json_integer_value (json_object_get (rec, "version")) != SETTINGS_VERSION)
    return nrm_error_set (err, EINVAL, "%s: the plugin's settings record `%s` is corrupt (%s)", cmd, path,
                          rec ? "unsupported version" : jerr.text);
  for (size_t i = 0; i < sizeof (keys) / sizeof (keys[0]); i++)
    {
      const char *theirs = json_string_value (json_object_get (rec, keys[i].key));
      const char *ours = json_string_value (json_object_get (mine, keys[i].key));
      if (theirs == NULL)
        return nrm_error_set (err, EINVAL, "%s: the plugin's settings record `%s` is corrupt (no `%s`)", cmd, path,
                              keys[i].key);
      if (ours && strcmp (theirs, ours) != 0)
        return nrm_error_set (err, EINVAL,
                              "%s: %s is `%s` here but `%s` in the plugin's record `%s`: give %s the plugin's "
                              "settings (the same -c file or flags)",
                              cmd, keys[i].what, shown (ours), shown (theirs), path, cmd);
    }
  const char *id;
  json_t *name;
  json_object_foreach (json_object_get (mine, "drivers"), id, name)
  {
    json_t *theirs = json_object_get (json_object_get (rec, "drivers"), id);
    if (json_is_string (theirs) && !json_equal (theirs, name))
      return nrm_error_set (err, EINVAL,
                            "%s: the name of driver `%s` is `%s` here but `%s` in the plugin's record `%s`: give %s "
                            "the plugin's settings (the same -c file or flags)",
                            cmd, id, json_string_value (name), json_string_value (theirs), path, cmd);
  }
  return 0;
}

long
nrm_settings_node_entry (const char *state_dir)
{
  cleanup_free char *path = xasprintf ("%s/%s", state_dir, NRM_SETTINGS_FILE);
  cleanup_free char *text = NULL;
  nrm_error_t rerr = NULL;
  if (nrm_read_file (path, SETTINGS_MAX, &text, NULL, &rerr) < 0)
    {
      nrm_error_release (&rerr);
      return -1;
    }
  cleanup_json json_t *rec = json_loads (text, 0, NULL);
  json_t *e = json_object_get (rec, "nodeEntry");
  return json_is_integer (e) && json_integer_value (e) >= 0 && json_integer_value (e) < 1000000
             ? (long) json_integer_value (e)
             : -1;
}
