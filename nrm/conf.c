/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "cpuset/host.h"
#include "cpuset/partition.h"
#include "cpuset/placement.h"
#include "driver/names.h"
#include "nrm/base/quantity.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "driver/memory/memory.h"
#include "driver/registry.h"
#include "nrm/conf.h"
#include "nrm/base/fs.h"
#include "nrm/base/text.h"
#include "nrm/base/yaml.h"

void
nrm_config_init (struct nrm_config *c)
{
  memset (c, 0, sizeof (*c));
  nrm_publish_options_init (&c->publish);
  nrm_cpu_settings_init (&c->cpu);
  c->memory_granularity = NRM_MEMORY_GRANULARITY;
  c->reconcile_interval = 5;
  c->api_qps = 20;
  c->api_burst = 100;
  c->driver_names = json_object ();
  c->driver_settings = json_object ();
  c->sources = json_object ();
  c->shared_pool_cgroups = json_array ();
  c->node_entry = -1;
}

void
nrm_config_clear_reserved_memory (struct nrm_config *c)
{
  for (size_t i = 0; i < c->node.n_reserved_memory; i++)
    free (c->node.reserved_memory[i].resource);
  free (c->node.reserved_memory);
  c->node.reserved_memory = NULL;
  c->node.n_reserved_memory = 0;
}

void
nrm_config_done (struct nrm_config *c)
{
  free (c->node_name);
  free (c->topology);
  free (c->fsroot);
  free (c->drivers);
  free (c->driver_dir);
  json_decref (c->driver_names);
  json_decref (c->driver_settings);
  json_decref (c->run_settings);
  json_decref (c->nodes);
  json_decref (c->sources);
  json_decref (c->shared_pool_cgroups);
  free (c->kubelet_config);
  free (c->kubelet_dir);
  free (c->cdi_dir);
  free (c->state_dir);
  free (c->claims_dir);
  free (c->instance_uid);
  free (c->log_level);
  free (c->log_format);
  free (c->hook_path);
  free (c->kubeconfig);
  free (c->http_address);
  free (c->lease_namespace);
  hwloc_bitmap_free (c->node.reserved_cpus);
  hwloc_bitmap_free (c->node.isolated_cpus);
  nrm_config_clear_reserved_memory (c);
  memset (c, 0, sizeof (*c));
}

int
nrm_config_set_string (char **field, const char *value, nrm_error_t *err)
{
  char *s = xstrdup (value);
  free (*field);
  *field = s;
  return 0;
}

static int
set_cpus (hwloc_bitmap_t *field, const char *list, const char *what, nrm_error_t *err)
{
  hwloc_bitmap_t set = NULL;
  if (nrm_cpulist_parse (list, &set, err) < 0)
    return nrm_error_wrap (err, "%s", what);
  hwloc_bitmap_free (*field);
  *field = set;
  return 0;
}

int
nrm_config_set_reserved_cpus (struct nrm_config *c, const char *list, nrm_error_t *err)
{
  return set_cpus (&c->node.reserved_cpus, list, "reserved CPUs", err);
}

int
nrm_config_set_isolated_cpus (struct nrm_config *c, const char *list, nrm_error_t *err)
{
  return set_cpus (&c->node.isolated_cpus, list, "isolated CPUs", err);
}

static bool
memory_resource_ok (const char *r)
{
  return strcmp (r, "memory") == 0 || (strncmp (r, "hugepages-", 10) == 0 && r[10] != '\0');
}

static int
add_reserved (struct nrm_config *c, unsigned node, const char *resource, const char *amount, nrm_error_t *err)
{
  uint64_t bytes;
  if (!memory_resource_ok (resource))
    return nrm_error_set (err, EINVAL, "reserved memory: unknown resource `%s` (memory or hugepages-<size>)", resource);
  if (nrm_quantity_parse_bytes (amount, &bytes, err) < 0)
    return nrm_error_wrap (err, "reserved memory: %s on NUMA node %u", resource, node);
  struct nrm_reserved_memory *r = xrealloc (c->node.reserved_memory, (c->node.n_reserved_memory + 1) * sizeof (*r));
  c->node.reserved_memory = r;
  r = &r[c->node.n_reserved_memory];
  r->numa_node = node;
  r->bytes = bytes;
  r->resource = xstrdup (resource);
  c->node.n_reserved_memory++;
  return 0;
}

static int
parse_node (const char *text, size_t len, unsigned *ret, nrm_error_t *err)
{
  char buf[16];
  char *end = NULL;
  if (len == 0 || len >= sizeof (buf))
    return nrm_error_set (err, EINVAL, "reserved memory: invalid NUMA node `%.*s`", (int) len, text);
  memcpy (buf, text, len);
  buf[len] = '\0';
  errno = 0;
  unsigned long v = strtoul (buf, &end, 10);
  if (errno || *end || !isdigit ((unsigned char) buf[0]) || v > 65535)
    return nrm_error_set (err, EINVAL, "reserved memory: invalid NUMA node `%s`", buf);
  *ret = (unsigned) v;
  return 0;
}

int
nrm_config_add_reserved_memory (struct nrm_config *c, const char *spec, nrm_error_t *err)
{
  const char *colon = strchr (spec, ':');
  unsigned node = 0;
  if (colon == NULL)
    return nrm_error_set (err, EINVAL, "reserved memory `%s`: expected <node>:<resource>=<amount>[,...]", spec);
  if (parse_node (spec, (size_t) (colon - spec), &node, err) < 0)
    return -1;
  cleanup_free char *rest = xstrdup (colon + 1);
  char *save = NULL;
  size_t n = 0;
  for (char *tok = strtok_r (rest, ",", &save); tok; tok = strtok_r (NULL, ",", &save), n++)
    {
      char *eq = strchr (tok, '=');
      if (eq == NULL)
        return nrm_error_set (err, EINVAL, "reserved memory `%s`: `%s` is not <resource>=<amount>", spec, tok);
      *eq = '\0';
      if (add_reserved (c, node, tok, eq + 1, err) < 0)
        return -1;
    }
  if (n == 0)
    return nrm_error_set (err, EINVAL, "reserved memory `%s`: no amounts given", spec);
  return 0;
}

static int
set_gate (struct nrm_config *c, const char *name, bool value, nrm_error_t *err)
{
  if (strcmp (name, "DRAListTypeAttributes") == 0)
    c->publish.list_attributes = value;
  else if (strcmp (name, "DRANodeAllocatableResources") == 0)
    c->publish.node_allocatable = value;
  else
    return nrm_error_set (
        err, EINVAL, "unknown feature gate `%s` (known: DRAListTypeAttributes, DRANodeAllocatableResources)", name);
  return 0;
}

int
nrm_config_set_kubernetes_version (struct nrm_config *c, const char *version, nrm_error_t *err)
{
  unsigned minor = 0;
  int end = 0;
  if (sscanf (version, "1.%u%n", &minor, &end) != 1 || version[end] != '\0' || minor < 36 || minor > 99)
    return nrm_error_set (err, EINVAL,
                          "Kubernetes version `%s`: give the API server's release, 1.36 or later, as "
                          "`1.<minor>`",
                          version);
  c->publish.api_minor = minor;
  c->api_minor_set = true;
  return 0;
}

int
nrm_config_set_feature_gates (struct nrm_config *c, const char *spec, nrm_error_t *err)
{
  cleanup_free char *copy = xstrdup (spec);
  char *save = NULL;
  for (char *tok = strtok_r (copy, ",", &save); tok; tok = strtok_r (NULL, ",", &save))
    {
      char *eq = strchr (tok, '=');
      if (eq == NULL || (strcmp (eq + 1, "true") && strcmp (eq + 1, "false")))
        return nrm_error_set (err, EINVAL, "feature gates `%s`: expected <Gate>=true|false", spec);
      *eq = '\0';
      if (set_gate (c, tok, strcmp (eq + 1, "true") == 0, err) < 0)
        return -1;
    }
  return 0;
}

int
nrm_config_set_cpu_mode (struct nrm_config *c, const char *mode, nrm_error_t *err)
{
  return nrm_cpu_mode_parse (mode, &c->cpu.mode, err);
}

int
nrm_config_set_cpu_options (struct nrm_config *c, const char *list, nrm_error_t *err)
{
  cleanup_free char *copy = xstrdup (list);
  unsigned opts = 0;
  char *save = NULL;
  for (char *tok = strtok_r (copy, ",", &save); tok; tok = strtok_r (NULL, ",", &save))
    if (nrm_cpu_option_parse (tok, &opts, err) < 0)
      return -1;
  if (nrm_cpu_options_check (opts, err) < 0)
    return -1;
  c->cpu.options = opts;
  return 0;
}

/* --- config file --------------------------------------------------------- */

static int
load_reserved_memory (struct nrm_config *c, json_t *v, nrm_error_t *err)
{
  size_t i;
  json_t *e;
  NRM_JSON_WANT (v, json_is_array, "reservedMemory", "a list");
  nrm_config_clear_reserved_memory (c);
  json_array_foreach (v, i, e)
  {
    const char *key;
    json_t *x;
    char where[64];
    snprintf (where, sizeof (where), "reservedMemory[%zu]", i);
    NRM_JSON_WANT (e, json_is_object, where, "an object");
    json_t *node = json_object_get (e, "numaNode"), *limits = json_object_get (e, "limits");
    json_object_foreach (e, key, x)
    {
      if (strcmp (key, "numaNode") && strcmp (key, "limits"))
        return nrm_error_set (err, EINVAL, "unknown key `%s.%s`", where, key);
    }
    if (!json_is_integer (node) || json_integer_value (node) < 0 || json_integer_value (node) > 65535)
      return nrm_error_set (err, EINVAL, "key `%s.numaNode` must be a NUMA node number", where);
    if (!json_is_object (limits))
      return nrm_error_set (err, EINVAL, "key `%s.limits` must be an object of resource amounts", where);
    json_object_foreach (limits, key, x)
    {
      if (!json_is_string (x))
        return nrm_error_set (err, EINVAL, "key `%s.limits.%s` must be a quantity string, not %s", where, key,
                              nrm_json_type_name (x));
      if (add_reserved (c, (unsigned) json_integer_value (node), key, json_string_value (x), err) < 0)
        return nrm_error_wrap (err, "key `%s`", where);
    }
  }
  return 0;
}

/* Keys whose value is a plain string. */
static char **
string_key (struct nrm_config *c, const char *key)
{
  const struct
  {
    const char *key;
    char **field;
  } keys[] = {
    { "nodeName", &c->node_name },       { "topology", &c->topology },        { "fsroot", &c->fsroot },
    { "kubeletDir", &c->kubelet_dir },   { "cdiDir", &c->cdi_dir },           { "stateDir", &c->state_dir },
    { "claimsDir", &c->claims_dir },     { "instanceUID", &c->instance_uid }, { "logLevel", &c->log_level },
    { "logFormat", &c->log_format },     { "hookPath", &c->hook_path },       { "kubeconfig", &c->kubeconfig },
    { "httpAddress", &c->http_address }, { "driverDir", &c->driver_dir },     { "kubeletConfig", &c->kubelet_config }
  };
  for (size_t i = 0; i < sizeof (keys) / sizeof (keys[0]); i++)
    if (strcmp (keys[i].key, key) == 0)
      return keys[i].field;
  return NULL;
}

static int load_nodes (struct nrm_config *c, json_t *v, nrm_error_t *err);

/* Subtrees of the host kept on the shared pool: each one checked, none
 * inside another (one pass would undo the other's writes). */
static int
shared_pool_cgroups_set (struct nrm_config *c, json_t *list, const char *what, nrm_error_t *err)
{
  size_t i, j;
  json_t *v, *w;
  if (!json_is_array (list))
    return nrm_error_set (err, EINVAL, "%s must be a list of cgroup paths", what);
  json_array_foreach (list, i, v)
  {
    if (!json_is_string (v))
      return nrm_error_set (err, EINVAL, "%s: item %zu is not a string", what, i);
    if (nrm_host_subtree_check (json_string_value (v), err) < 0)
      return nrm_error_wrap (err, "%s", what);
    const char *a = json_string_value (v) + (json_string_value (v)[0] == '/');
    json_array_foreach (list, j, w)
    {
      const char *b = json_string_value (w);
      if (j >= i || !b)
        continue;
      b += b[0] == '/';
      size_t na = strlen (a), nb = strlen (b);
      if ((na <= nb && strncmp (a, b, na) == 0 && (b[na] == '/' || b[na] == '\0'))
          || (nb < na && strncmp (a, b, nb) == 0 && a[nb] == '/'))
        return nrm_error_set (err, EINVAL, "%s: `%s` and `%s` overlap: name each subtree once", what,
                              json_string_value (w), json_string_value (v));
    }
  }
  json_decref (c->shared_pool_cgroups);
  c->shared_pool_cgroups = json_array ();
  json_array_foreach (list, i, v)
  {
    json_array_append_new (c->shared_pool_cgroups,
                           json_string (json_string_value (v) + (json_string_value (v)[0] == '/')));
  }
  return 0;
}

int
nrm_config_set_shared_pool_cgroups (struct nrm_config *c, const char *list, nrm_error_t *err)
{
  cleanup_json json_t *a = json_array ();
  cleanup_free char *copy = xstrdup (list);
  char *save = NULL;
  for (char *tok = strtok_r (copy, ",", &save); tok; tok = strtok_r (NULL, ",", &save))
    {
      if (nrm_host_subtree_check (tok, err) < 0)
        return nrm_error_wrap (err, "--shared-pool-cgroups");
      json_array_append_new (a, json_string (tok));
    }
  if (shared_pool_cgroups_set (c, a, "--shared-pool-cgroups", err) < 0)
    return -1;
  nrm_config_set_source (c, "cpu.sharedPoolCgroups", "flag");
  return 0;
}

/* pci, and driverSettings.<id>: the drivers check their own settings
 * when they start (their errors name the key); only driverName is the
 * framework's. */
static int
load_driver_sections (struct nrm_config *c, const char *key, json_t *v, nrm_error_t *err)
{
  const char *id;
  json_t *section;
  NRM_JSON_WANT (v, json_is_object, key, "an object");
  json_t *all = key[0] == 'p' ? json_pack ("{s:O}", "pci", v) : json_incref (v);
  json_object_foreach (all, id, section)
  {
    if (!json_is_object (section))
      {
        json_decref (all);
        return nrm_error_set (err, EINVAL, "key `%s%s` must be an object", key[0] == 'p' ? "" : "driverSettings.", id);
      }
    json_t *copy = json_deep_copy (section), *name = json_object_get (copy, "driverName");
    if (name && key[0] == 'p')
      {
        if (!json_is_string (name))
          {
            json_decref (copy);
            json_decref (all);
            return nrm_error_set (err, EINVAL, "key `pci.driverName` must be a string");
          }
        json_object_set (c->driver_names, "pci", name);
        json_object_del (copy, "driverName");
      }
    json_object_set_new (c->driver_settings, id, copy);
  }
  json_decref (all);
  return 0;
}

/* drivers: a list of driver ids, as --drivers takes them. */
static int
load_drivers (struct nrm_config *c, const char *key, json_t *v, nrm_error_t *err)
{
  size_t k;
  json_t *o;
  cleanup_free char *list = NULL;
  NRM_JSON_WANT (v, json_is_array, key, "a list of driver ids");
  json_array_foreach (v, k, o)
  {
    char *next = NULL;
    NRM_JSON_WANT (o, json_is_string, "drivers[]", "a string");
    if (strchr (json_string_value (o), ',') != NULL)
      return nrm_error_set (err, EINVAL, "key `drivers`: `%s` is not a driver id", json_string_value (o));
    next = xasprintf ("%s%s%s", list ? list : "", list ? "," : "", json_string_value (o));
    free (list);
    list = next;
  }
  return nrm_config_set_string (&c->drivers, list ? list : "", err);
}

static int
load_key (struct nrm_config *c, const char *key, json_t *v, nrm_error_t *err)
{
  {
    if (string_key (c, key) != NULL)
      {
        NRM_JSON_WANT (v, json_is_string, key, "a string");
        if (nrm_config_set_string (string_key (c, key), json_string_value (v), err) < 0)
          return -1;
      }
    else if (strcmp (key, "reservedCPUs") == 0)
      {
        NRM_JSON_WANT (v, json_is_string, key, "a CPU list string");
        if (nrm_config_set_reserved_cpus (c, json_string_value (v), err) < 0)
          return nrm_error_wrap (err, "key `%s`", key);
      }
    else if (strcmp (key, "isolatedCPUs") == 0)
      {
        NRM_JSON_WANT (v, json_is_string, key, "a CPU list string");
        if (nrm_config_set_isolated_cpus (c, json_string_value (v), err) < 0)
          return nrm_error_wrap (err, "key `%s`", key);
      }
    else if (strcmp (key, "reservedMemory") == 0)
      {
        if (load_reserved_memory (c, v, err) < 0)
          return -1;
      }
    else if (strcmp (key, "cpu") == 0)
      {
        /* driverName is the framework's, sharedPoolCgroups the
         * reconciler's; the CPU driver reads the rest. */
        NRM_JSON_WANT (v, json_is_object, key, "an object");
        json_t *spc = json_object_get (v, "sharedPoolCgroups"), *name = json_object_get (v, "driverName");
        cleanup_json json_t *own = json_copy (v);
        json_object_del (own, "sharedPoolCgroups");
        json_object_del (own, "driverName");
        if (spc && shared_pool_cgroups_set (c, spc, "key `cpu.sharedPoolCgroups`", err) < 0)
          return -1;
        if (nrm_cpu_settings_read (own, &c->cpu, err) < 0)
          return -1;
        if (name)
          {
            NRM_JSON_WANT (name, json_is_string, "cpu.driverName", "a string");
            json_object_set (c->driver_names, "cpu", name);
          }
      }
    else if (strcmp (key, "memory") == 0)
      {
        /* driverName is the framework's; the memory driver reads the rest
         * (and checks it here, so that a bad key fails at once), its keys
         * added to those an earlier section set. */
        NRM_JSON_WANT (v, json_is_object, key, "an object");
        json_t *name = json_object_get (v, "driverName");
        cleanup_json json_t *own = json_copy (v);
        json_object_del (own, "driverName");
        if (nrm_memory_settings_read (own, &c->memory_granularity, err) < 0)
          return -1;
        json_t *mine = json_object_get (c->driver_settings, "memory");
        if (mine == NULL)
          json_object_set_new (c->driver_settings, "memory", mine = json_object ());
        json_object_update (mine, own);
        if (name)
          {
            NRM_JSON_WANT (name, json_is_string, "memory.driverName", "a string");
            json_object_set (c->driver_names, "memory", name);
          }
      }
    else if (strcmp (key, "pci") == 0 || strcmp (key, "driverSettings") == 0)
      {
        if (load_driver_sections (c, key, v, err) < 0)
          return -1;
      }
    else if (strcmp (key, "drivers") == 0)
      {
        if (load_drivers (c, key, v, err) < 0)
          return -1;
      }
    else if (strcmp (key, "deviceMetadata") == 0)
      {
        NRM_JSON_WANT (v, json_is_boolean, key, "a boolean");
        c->device_metadata = json_is_true (v);
      }
    else if (strcmp (key, "createStateDir") == 0 || strcmp (key, "allowNoCpuset") == 0)
      {
        NRM_JSON_WANT (v, json_is_boolean, key, "a boolean");
        *(key[0] == 'c' ? &c->create_state_dir : &c->allow_no_cpuset) = json_is_true (v);
      }
    else if (strcmp (key, "publishSlices") == 0)
      {
        NRM_JSON_WANT (v, json_is_boolean, key, "a boolean");
        c->no_publish = !json_is_true (v);
      }
    else if (strcmp (key, "apiQPS") == 0)
      {
        if (!json_is_number (v) || json_number_value (v) < 0 || json_number_value (v) > 10000)
          return nrm_error_set (err, EINVAL, "key `apiQPS` must be a number from 0 (no limit) to 10000");
        c->api_qps = json_number_value (v);
      }
    else if (strcmp (key, "apiBurst") == 0)
      {
        if (!json_is_integer (v) || json_integer_value (v) < 1 || json_integer_value (v) > 10000)
          return nrm_error_set (err, EINVAL, "key `apiBurst` must be an integer from 1 to 10000");
        c->api_burst = (long) json_integer_value (v);
      }
    else if (strcmp (key, "reconcileIntervalSeconds") == 0)
      {
        if (!json_is_integer (v) || json_integer_value (v) < 0 || json_integer_value (v) > 86400)
          return nrm_error_set (err, EINVAL, "key `reconcileIntervalSeconds` must be an integer from 0 to 86400");
        c->reconcile_interval = (long) json_integer_value (v);
      }
    else if (strcmp (key, "kubernetesVersion") == 0)
      {
        NRM_JSON_WANT (v, json_is_string, key, "a string");
        if (nrm_config_set_kubernetes_version (c, json_string_value (v), err) < 0)
          return nrm_error_wrap (err, "key `kubernetesVersion`");
      }
    else if (strcmp (key, "featureGates") == 0)
      {
        const char *gate;
        json_t *g;
        NRM_JSON_WANT (v, json_is_object, key, "an object");
        json_object_foreach (v, gate, g)
        {
          char where[96];
          snprintf (where, sizeof (where), "featureGates.%s", gate);
          NRM_JSON_WANT (g, json_is_boolean, where, "a boolean");
          if (set_gate (c, gate, json_is_true (g), err) < 0)
            return nrm_error_wrap (err, "key `featureGates`");
        }
      }
    else if (strcmp (key, "nodes") == 0)
      {
        if (load_nodes (c, v, err) < 0)
          return -1;
      }
    else
      return nrm_error_set (err, EINVAL, "unknown key `%s`", key);
  }
  return 0;
}

/* The settings a nodes[] entry may set: those that differ between nodes.
 * Driver names stay cluster-wide (device classes select by them). */
static const char *const node_keys[]
    = { "reservedCPUs", "isolatedCPUs", "reservedMemory", "cpu", "memory", "pci", NULL };

static bool
is_node_key (const char *key)
{
  for (const char *const *k = node_keys; *k; k++)
    if (strcmp (*k, key) == 0)
      return true;
  return false;
}

bool
nrm_config_is_node_key (const char *key)
{
  char top[32];
  snprintf (top, sizeof (top), "%.*s", (int) strcspn (key, "."), key);
  return is_node_key (top);
}

/* The source keys one setting stands for: cpu.mode, cpu.options... for a
 * section, the key itself otherwise. */
static void
note_sources (struct nrm_config *c, const char *key, json_t *v, const char *source)
{
  if (!is_node_key (key))
    return;
  if ((strcmp (key, "cpu") == 0 || strcmp (key, "memory") == 0) && json_is_object (v))
    {
      const char *sub;
      json_t *x;
      json_object_foreach (v, sub, x)
      {
        cleanup_free char *k = xasprintf ("%s.%s", key, sub);
        nrm_config_set_source (c, k, source);
      }
    }
  else
    nrm_config_set_source (c, key, source);
}

static int
load_root (struct nrm_config *c, json_t *root, nrm_error_t *err)
{
  const char *key;
  json_t *v;

  if (!json_is_object (root))
    return nrm_error_set (err, EINVAL, "the top level must be an object, not %s", nrm_json_type_name (root));
  json_object_foreach (root, key, v)
  {
    if (load_key (c, key, v, err) < 0)
      return -1;
    note_sources (c, key, v, "top level");
  }
  return 0;
}

/* The settings of nodes[i] onto c; where is "nodes[i].settings". */
static int
load_node_settings (struct nrm_config *c, json_t *settings, const char *where, nrm_error_t *err)
{
  const char *key;
  json_t *v;
  NRM_JSON_WANT (settings, json_is_object, where, "an object");
  json_object_foreach (settings, key, v)
  {
    if (!is_node_key (key))
      return nrm_error_set (err, EINVAL,
                            "unknown key `%s.%s` (a node's settings are reservedCPUs, isolatedCPUs, "
                            "reservedMemory, cpu, memory and pci)",
                            where, key);
    if (json_is_object (v) && json_object_get (v, "driverName"))
      return nrm_error_set (err, EINVAL, "key `%s.%s.driverName`: driver names are the same on every node", where, key);
    if (load_key (c, key, v, err) < 0)
      return nrm_error_wrap (err, "%s", where);
  }
  return 0;
}

static int
load_nodes (struct nrm_config *c, json_t *v, nrm_error_t *err)
{
  size_t i;
  json_t *e;
  NRM_JSON_WANT (v, json_is_array, "nodes", "a list");
  json_array_foreach (v, i, e)
  {
    char where[64];
    const char *key;
    json_t *x;
    snprintf (where, sizeof (where), "nodes[%zu]", i);
    NRM_JSON_WANT (e, json_is_object, where, "an object");
    json_object_foreach (e, key, x)
    {
      if (strcmp (key, "names") && strcmp (key, "selector") && strcmp (key, "settings"))
        return nrm_error_set (err, EINVAL, "unknown key `%s.%s` (names or selector, and settings)", where, key);
    }
    json_t *names = json_object_get (e, "names"), *sel = json_object_get (e, "selector");
    json_t *settings = json_object_get (e, "settings");
    if ((names == NULL) == (sel == NULL))
      return nrm_error_set (err, EINVAL, "key `%s` needs one of `names` and `selector`", where);
    if (settings == NULL)
      return nrm_error_set (err, EINVAL, "key `%s` has no `settings`", where);
    if (names)
      {
        size_t k;
        json_t *n;
        if (!json_is_array (names) || json_array_size (names) == 0)
          return nrm_error_set (err, EINVAL, "key `%s.names` must be a non-empty list of node names", where);
        json_array_foreach (names, k, n)
        {
          if (!json_is_string (n) || !nrm_is_dns_subdomain (json_string_value (n), 253))
            return nrm_error_set (err, EINVAL, "key `%s.names[%zu]` must be a node name (a DNS subdomain)", where, k);
        }
      }
    else
      {
        json_t *ml = json_object_get (sel, "matchLabels");
        if (!json_is_object (sel) || json_object_size (sel) != 1 || !json_is_object (ml))
          return nrm_error_set (err, EINVAL, "key `%s.selector` must be {matchLabels: {LABEL: VALUE, ...}}", where);
        json_object_foreach (ml, key, x)
        {
          if (!json_is_string (x))
            return nrm_error_set (err, EINVAL, "key `%s.selector.matchLabels.%s` must be a string, not %s", where, key,
                                  nrm_json_type_name (x));
        }
      }
    /* Checked now, on a scratch config: a bad entry fails on every node,
     * not only on those it matches. */
    struct nrm_config scratch;
    cleanup_free char *sw = xasprintf ("%s.settings", where);
    nrm_config_init (&scratch);
    int r = load_node_settings (&scratch, settings, sw, err);
    nrm_config_done (&scratch);
    if (r < 0)
      return -1;
  }
  json_decref (c->nodes);
  c->nodes = json_deep_copy (v);
  return 0;
}

void
nrm_config_set_source (struct nrm_config *c, const char *key, const char *source)
{
  json_object_set_new (c->sources, key, json_string (source));
}

const char *
nrm_config_source (const struct nrm_config *c, const char *key)
{
  const char *s = json_string_value (json_object_get (c->sources, key));
  return s ? s : "default";
}

bool
nrm_config_nodes_need_labels (const struct nrm_config *c)
{
  size_t i;
  json_t *e;
  json_array_foreach (c->nodes, i, e)
  {
    if (json_object_get (e, "selector"))
      return true;
  }
  return false;
}

static bool
entry_matches (const struct nrm_config *c, json_t *e, json_t *labels)
{
  size_t k;
  json_t *n;
  const char *key;
  json_array_foreach (json_object_get (e, "names"), k, n)
  {
    if (strcmp (json_string_value (n), c->node_name) == 0)
      return true;
  }
  json_t *ml = json_object_get (json_object_get (e, "selector"), "matchLabels");
  if (ml == NULL || labels == NULL)
    return false;
  json_object_foreach (ml, key, n)
  {
    if (!json_equal (json_object_get (labels, key), n))
      return false;
  }
  return true;
}

/* The CPU driver's settings, as it reads them (nrm_driver_host.settings). */
static void
hand_on (struct nrm_config *c)
{
  json_object_set_new (c->driver_settings, "cpu", nrm_cpu_settings_json (&c->cpu));
}

int
nrm_config_apply_node_entry (struct nrm_config *c, size_t index, nrm_error_t *err)
{
  json_t *settings = json_object_get (json_array_get (c->nodes, index), "settings");
  cleanup_json json_t *mine = json_object ();
  const char *key;
  json_t *v;
  char where[64];
  if (settings == NULL)
    return nrm_error_set (err, EINVAL, "the config has no nodes[%zu]", index);
  /* The flags keep their values. */
  json_object_foreach (settings, key, v)
  {
    if (json_is_object (v) && (strcmp (key, "cpu") == 0 || strcmp (key, "memory") == 0))
      {
        const char *sub;
        json_t *x, *kept = json_object ();
        json_object_foreach (v, sub, x)
        {
          cleanup_free char *k = xasprintf ("%s.%s", key, sub);
          if (strcmp (nrm_config_source (c, k), "flag") != 0)
            json_object_set (kept, sub, x);
        }
        json_object_set_new (mine, key, kept);
      }
    else if (strcmp (nrm_config_source (c, key), "flag") != 0)
      json_object_set (mine, key, v);
  }
  snprintf (where, sizeof (where), "nodes[%zu]", index);
  cleanup_free char *sw = xasprintf ("%s.settings", where);
  if (load_node_settings (c, mine, sw, err) < 0)
    return -1;
  json_object_foreach (mine, key, v) { note_sources (c, key, v, where); }
  c->node_entry = (long) index;
  hand_on (c);
  return 0;
}

int
nrm_config_resolve_node (struct nrm_config *c, json_t *labels, nrm_error_t *err)
{
  size_t i;
  json_t *e;
  json_array_foreach (c->nodes, i, e)
  {
    if (entry_matches (c, e, labels))
      return nrm_config_apply_node_entry (c, i, err);
  }
  return 0;
}

int
nrm_config_load_file (struct nrm_config *c, const char *path, nrm_error_t *err)
{
  cleanup_free char *text = NULL;
  cleanup_json json_t *root = NULL;
  size_t len = 0, i = 0;
  if (nrm_read_file (path, 1 << 20, &text, &len, err) < 0)
    return nrm_error_wrap (err, "config");
  while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
    i++;
  if (i < len && text[i] == '{')
    {
      /* JSON: jansson's errors give line and column. */
      json_error_t jerr;
      root = json_loadb (text, len, JSON_REJECT_DUPLICATES, &jerr);
      if (root == NULL)
        return nrm_error_set (err, EINVAL, "config `%s`: line %d, column %d: %s", path, jerr.line, jerr.column,
                              jerr.text);
    }
  else
    {
      cleanup_free char *what = xasprintf ("config `%s`", path);
      if (nrm_yaml_load (text, len, what, &root, err) < 0)
        return -1;
    }
  if (load_root (c, root, err) < 0)
    return nrm_error_wrap (err, "config `%s`", path);
  return 0;
}

/* --- the kubelet's config file ----------------------------------------- */

/* A scalar the kubelet's YAML may leave unquoted (reservedSystemCPUs: 0),
 * as text (malloc'd), or NULL. */
static char *
scalar_text (json_t *v)
{
  if (json_is_string (v))
    return xstrdup (json_string_value (v));
  if (json_is_integer (v))
    return xasprintf ("%" JSON_INTEGER_FORMAT, json_integer_value (v));
  return NULL;
}

/* Reserved memory as "node:resource=bytes,..." summed and sorted, for
 * comparing two lists written differently. */
static char *
memory_key (const struct nrm_node_settings *n)
{
  cleanup_json json_t *sum = json_object ();
  for (size_t i = 0; i < n->n_reserved_memory; i++)
    {
      cleanup_free char *k = xasprintf ("%u:%s", n->reserved_memory[i].numa_node, n->reserved_memory[i].resource);
      json_t *have = json_object_get (sum, k);
      json_object_set_new (sum, k, json_integer (json_integer_value (have) + (json_int_t) n->reserved_memory[i].bytes));
    }
  cleanup_free const char **keys = xcalloc (json_object_size (sum) + 1, sizeof (*keys));
  size_t nk = 0;
  const char *k;
  json_t *v;
  json_object_foreach (sum, k, v) { keys[nk++] = k; }
  for (size_t i = 1; i < nk; i++)
    for (size_t j = i; j > 0 && strcmp (keys[j - 1], keys[j]) > 0; j--)
      {
        const char *t = keys[j];
        keys[j] = keys[j - 1];
        keys[j - 1] = t;
      }
  char *out = xstrdup ("");
  for (size_t i = 0; i < nk; i++)
    {
      char *next = xasprintf ("%s%s%s=%" JSON_INTEGER_FORMAT, out, i ? "," : "", keys[i],
                              json_integer_value (json_object_get (sum, keys[i])));
      free (out);
      out = next;
    }
  return out;
}

int
nrm_config_import_kubelet (struct nrm_config *c, json_t **kubelet, json_t *notes, nrm_error_t *err)
{
  cleanup_free char *dflt = xasprintf ("%s/config.yaml", c->kubelet_dir ? c->kubelet_dir : "/var/lib/kubelet");
  const char *path = c->kubelet_config ? c->kubelet_config : dflt;
  cleanup_json json_t *kc = NULL;
  nrm_error_t rerr = NULL;
  *kubelet = NULL;
  if (c->kubelet_config && c->kubelet_config[0] == '\0')
    return 0;
  if (nrm_yaml_load_file (path, 4 << 20, &kc, &rerr) < 0)
    {
      /* The default file is kubeadm's; other setups keep it elsewhere. */
      if (c->kubelet_config == NULL && rerr->status == ENOENT)
        {
          nrm_error_release (&rerr);
          json_array_append_new (notes, json_sprintf ("kubelet config: no `%s`: nothing to compare with "
                                                      "(set kubeletConfig to the kubelet's --config file)",
                                                      path));
          return 0;
        }
      *err = rerr;
      return nrm_error_wrap (err, "the kubelet's config (kubeletConfig)");
    }
  if (!json_is_object (kc))
    return nrm_error_set (err, EINVAL, "the kubelet's config `%s` is not a KubeletConfiguration object", path);
  cleanup_free char *src = xasprintf ("kubelet `%s`", path);

  /* reservedSystemCPUs: adopted when nrm sets none, else the same. */
  json_t *rs = json_object_get (kc, "reservedSystemCPUs");
  cleanup_free char *theirs = scalar_text (rs);
  if (rs && !json_is_null (rs) && theirs == NULL)
    return nrm_error_set (err, EINVAL, "the kubelet's config `%s`: reservedSystemCPUs must be a CPU list", path);
  if (theirs && *theirs)
    {
      cleanup_bitmap hwloc_bitmap_t set = NULL;
      if (nrm_cpulist_parse (theirs, &set, err) < 0)
        return nrm_error_wrap (err, "the kubelet's config `%s`: reservedSystemCPUs", path);
      if (strcmp (nrm_config_source (c, "reservedCPUs"), "default") == 0)
        {
          hwloc_bitmap_free (c->node.reserved_cpus);
          c->node.reserved_cpus = TAKE_PTR (set);
          nrm_config_set_source (c, "reservedCPUs", src);
          json_array_append_new (notes, json_sprintf ("kubelet config `%s`: reserved CPUs %s adopted "
                                                      "(reservedSystemCPUs; nrm's config sets none)",
                                                      path, theirs));
        }
      else if (c->node.reserved_cpus == NULL || !hwloc_bitmap_isequal (set, c->node.reserved_cpus))
        {
          cleanup_free char *ours = nrm_cpulist_format (c->node.reserved_cpus);
          return nrm_error_set (err, EINVAL,
                                "the kubelet reserves CPUs %s (reservedSystemCPUs in `%s`) but nrm reserves %s (%s): "
                                "give nrm the kubelet's, or leave reservedCPUs unset to adopt them",
                                theirs, path, *ours ? ours : "none", nrm_config_source (c, "reservedCPUs"));
        }
    }
  /* reservedMemory: the same format as nrm's. */
  json_t *rm = json_object_get (kc, "reservedMemory");
  if (rm && !json_is_null (rm) && json_array_size (rm) > 0)
    {
      struct nrm_config k;
      nrm_config_init (&k);
      /* Quantities the YAML left unquoted are numbers of bytes. */
      cleanup_json json_t *copy = json_deep_copy (rm);
      size_t i;
      json_t *e;
      json_array_foreach (copy, i, e)
      {
        const char *res;
        json_t *q;
        json_object_foreach (json_object_get (e, "limits"), res, q)
        {
          if (json_is_integer (q))
            json_object_set_new (json_object_get (e, "limits"), res,
                                 json_sprintf ("%" JSON_INTEGER_FORMAT, json_integer_value (q)));
        }
      }
      if (load_reserved_memory (&k, copy, err) < 0)
        {
          nrm_config_done (&k);
          return nrm_error_wrap (err, "the kubelet's config `%s`", path);
        }
      cleanup_free char *tk = memory_key (&k.node), *ok = memory_key (&c->node);
      if (strcmp (nrm_config_source (c, "reservedMemory"), "default") == 0)
        {
          nrm_config_clear_reserved_memory (c);
          c->node.reserved_memory = k.node.reserved_memory;
          c->node.n_reserved_memory = k.node.n_reserved_memory;
          k.node.reserved_memory = NULL;
          k.node.n_reserved_memory = 0;
          nrm_config_set_source (c, "reservedMemory", src);
          json_array_append_new (notes, json_sprintf ("kubelet config `%s`: reserved memory %s adopted "
                                                      "(reservedMemory; nrm's config sets none)",
                                                      path, tk));
        }
      nrm_config_done (&k);
      if (strcmp (nrm_config_source (c, "reservedMemory"), src) != 0 && strcmp (tk, ok) != 0)
        return nrm_error_set (err, EINVAL,
                              "the kubelet reserves memory %s (reservedMemory in `%s`) but nrm reserves %s (%s): "
                              "give nrm the kubelet's, or leave reservedMemory unset to adopt it",
                              tk, path, *ok ? ok : "none", nrm_config_source (c, "reservedMemory"));
    }
  /* Capacity, not CPUs: said, never adopted. */
  static const char *const capacity[] = { "kubeReserved", "systemReserved" };
  for (size_t i = 0; i < 2; i++)
    {
      cleanup_free char *cpu = scalar_text (json_object_get (json_object_get (kc, capacity[i]), "cpu"));
      if (cpu)
        json_array_append_new (notes, json_sprintf ("kubelet config `%s`: %s cpu %s takes CPU capacity off the "
                                                    "node's allocatable, not CPUs: nrm reserves only "
                                                    "reservedSystemCPUs (or its own reservedCPUs)",
                                                    path, capacity[i], cpu));
    }
  const char *tm = json_string_value (json_object_get (kc, "topologyManagerPolicy"));
  if (tm)
    json_array_append_new (notes, json_sprintf ("kubelet config `%s`: topologyManagerPolicy %s", path, tm));
  *kubelet = json_pack ("{s:s, s:O}", "path", path, "config", kc);
  return 0;
}

void
nrm_config_plugin (const struct nrm_config *c, const char *driver, struct nrm_plugin_config *pc)
{
  memset (pc, 0, sizeof (*pc));
  pc->driver = driver;
  pc->node_name = c->node_name;
  pc->kubelet_dir = c->kubelet_dir;
  pc->cdi_dir = c->cdi_dir;
  pc->state_dir = c->state_dir;
  pc->instance_uid = c->instance_uid;
  pc->device_metadata = c->device_metadata;
  pc->health_interval_s = 10;
  pc->threads = 8;
}

int
nrm_config_finish (struct nrm_config *c, nrm_error_t *err)
{
  if (c->node_name == NULL)
    {
      const char *env = getenv ("NODE_NAME");
      struct utsname u;
      if (env && *env)
        {
          if (nrm_config_set_string (&c->node_name, env, err) < 0)
            return -1;
        }
      else if (uname (&u) == 0)
        {
          /* Kubernetes lower-cases host names for node names. */
          for (char *p = u.nodename; *p; p++)
            *p = (char) tolower ((unsigned char) *p);
          if (nrm_config_set_string (&c->node_name, u.nodename, err) < 0)
            return -1;
        }
      else
        return nrm_error_errno (err, errno, "cannot read the host name; set --node-name");
    }
  if (!nrm_is_dns_subdomain (c->node_name, 253))
    return nrm_error_set (err, EINVAL, "node name `%s` is not a valid Kubernetes node name (a DNS subdomain)",
                          c->node_name);
  /* Driver names are checked where the drivers are made, against every
   * enabled driver (nrm_drivers_open). */
  const char *id;
  json_t *name;
  json_object_foreach (c->driver_names, id, name)
  {
    if (!nrm_is_dns_subdomain (json_string_value (name), 63))
      return nrm_error_set (err, EINVAL, "%s driver name `%s` is not a DNS subdomain of at most 63 characters", id,
                            json_string_value (name));
  }
  if (c->drivers)
    {
      cleanup_json json_t *ids = nrm_driver_ids_parse (c->drivers, err);
      if (ids == NULL)
        return -1;
    }
  if (c->driver_dir && c->driver_dir[0] != '/')
    return nrm_error_set (err, EINVAL, "the driver directory `%s` must be an absolute path", c->driver_dir);
  c->publish.node_name = c->node_name;
  hand_on (c);
  const struct
  {
    char **field;
    const char *dflt;
  } defaults[] = { { &c->kubelet_dir, "/var/lib/kubelet" },
                   { &c->cdi_dir, "/var/run/cdi" },
                   { &c->state_dir, NRM_DEFAULT_STATE_DIR },
                   { &c->log_level, "info" },
                   { &c->log_format, "plain" } };
  for (size_t i = 0; i < sizeof (defaults) / sizeof (defaults[0]); i++)
    if (*defaults[i].field == NULL && nrm_config_set_string (defaults[i].field, defaults[i].dflt, err) < 0)
      return -1;
  const struct
  {
    const char *name, *value;
  } dirs[] = { { "kubelet directory", c->kubelet_dir },
               { "CDI directory", c->cdi_dir },
               { "state directory", c->state_dir },
               { "claims directory", c->claims_dir } };
  for (size_t i = 0; i < sizeof (dirs) / sizeof (dirs[0]); i++)
    if (dirs[i].value && dirs[i].value[0] != '/')
      return nrm_error_set (err, EINVAL, "the %s `%s` must be an absolute path", dirs[i].name, dirs[i].value);
  if (c->hook_path == NULL)
    {
      /* The CDI hook runs nrm-hook from beside this executable. */
      char self[4096];
      ssize_t n = readlink ("/proc/self/exe", self, sizeof (self) - 1);
      self[n > 0 ? n : 0] = '\0';
      char *slash = strrchr (self, '/');
      cleanup_free char *hook = NULL;
      if (slash)
        *slash = '\0';
      hook = xasprintf ("%s/nrm-hook", slash ? self : "/usr/local/bin");
      if (nrm_config_set_string (&c->hook_path, hook, err) < 0)
        return -1;
    }
  if (c->hook_path[0] != '\0' && c->hook_path[0] != '/')
    return nrm_error_set (err, EINVAL, "hook path `%s` must be absolute (or empty for no hook)", c->hook_path);
  if (strcmp (c->log_format, "plain") && strcmp (c->log_format, "json"))
    return nrm_error_set (err, EINVAL, "log format `%s` is neither plain nor json", c->log_format);
  if (strcmp (c->log_level, "error") && strcmp (c->log_level, "warning") && strcmp (c->log_level, "info")
      && strcmp (c->log_level, "debug"))
    return nrm_error_set (err, EINVAL, "log level `%s` is not one of error, warning, info, debug", c->log_level);
  if (c->fsroot == NULL
      && nrm_config_set_string (&c->fsroot, getenv ("NRM_FSROOT") ? getenv ("NRM_FSROOT") : "/", err) < 0)
    return -1;
  return 0;
}

void
nrm_config_drivers (const struct nrm_config *c, struct nrm_driver_selection *sel)
{
  sel->ids = c->drivers;
  sel->names = c->driver_names;
  sel->settings = c->driver_settings;
}

json_t *
nrm_config_run_settings (struct nrm_config *c)
{
  struct nrm_cpu_settings numa = c->cpu;
  numa.mode = NRM_CPU_MODE_NUMA;
  json_decref (c->run_settings);
  c->run_settings = json_copy (c->driver_settings);
  json_object_set_new (c->run_settings, "cpu", nrm_cpu_settings_json (&numa));
  return c->run_settings;
}
