/* SPDX-License-Identifier: Apache-2.0 */
/* ResourceSlices of every recorded machine: within every API limit, the
 * capacities add up exactly, the output is byte-identical across runs; and
 * the validator refuses each kind of broken slice. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/k8s/binding.h"
#include "driver/cpu/cpu.h"
#include "driver/devices.h"
#include "driver/memory/memory.h"
#include "driver/registry.h"
#include "nrm/base/quantity.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "tests/unit/corpus.h"
#include "topology/topology.h"

#define CPU_DRIVER "cpu.nrm.io"
#define MEMORY_DRIVER "memory.nrm.io"

/* The drivers' settings: the CPU driver's device mode. */
static json_t *
settings_of (enum nrm_cpu_mode mode)
{
  return json_pack ("{s:{s:s}}", "cpu", "mode", nrm_cpu_mode_name (mode));
}

/* The node's slices with the CPU driver in this mode. */
static int
node_slices (const struct nrm_topology *t, const struct nrm_publish_options *o, enum nrm_cpu_mode mode, json_t **ret,
             nrm_error_t *err)
{
  cleanup_json json_t *settings = settings_of (mode);
  return nrm_node_slices (t, o, settings, ret, err);
}

/* The node's slices while one claim of the CPU driver holds cpus. */
static int
slices_held (const struct nrm_topology *t, const struct nrm_publish_options *o, enum nrm_cpu_mode mode,
             const char *cpus, json_t **ret, nrm_error_t *err)
{
  struct nrm_registry *reg = NULL;
  struct nrm_drivers d = { 0 };
  cleanup_json json_t *settings = settings_of (mode);
  struct nrm_driver_selection sel = { NULL, NULL, settings };
  struct nrm_driver_host h = { .topo = t, .node = o };
  cleanup_json json_t *held = json_pack ("{s:{s:{s:s}}}", CPU_DRIVER, "u1", "cpus", cpus);
  int r = -1;
  if (nrm_registry_new (&reg, err) == 0 && nrm_drivers_open (reg, &sel, &h, &d, err) == 0)
    r = nrm_drivers_slices (&d, o, held, NULL, ret, err);
  nrm_drivers_close (&d);
  nrm_registry_free (reg);
  return r;
}

#define MiB (1024ull * 1024)

static struct nrm_topology *
load_reserved (const char *file, bool reserve)
{
  nrm_error_t err = NULL;
  struct nrm_topology *t = NULL;
  struct nrm_node_settings s = { 0 };
  struct nrm_reserved_memory rm[64];
  char memory[] = "memory";

  if (nrm_topology_load (file, &t, &err) < 0)
    fail_msg ("%s: %s", file, nrm_error_msg (err));
  if (!reserve)
    return t;
  /* The first CPU of every node and 64 MiB (plus one odd KiB) of every node with memory. */
  s.reserved_cpus = hwloc_bitmap_alloc ();
  s.reserved_memory = rm;
  for (size_t i = 0; i < t->n_numa; i++)
    {
      if (!hwloc_bitmap_iszero (t->numa[i].cpus))
        hwloc_bitmap_set (s.reserved_cpus, (unsigned) hwloc_bitmap_first (t->numa[i].cpus));
      if (t->numa[i].memory >= 1024 * MiB && s.n_reserved_memory < 64)
        rm[s.n_reserved_memory++] = (struct nrm_reserved_memory){ .numa_node = t->numa[i].os_index,
                                                                  .resource = memory,
                                                                  .bytes = 64 * MiB + 1024 };
    }
  if (nrm_topology_apply_settings (t, &s, NULL, &err) < 0)
    fail_msg ("%s: %s", file, nrm_error_msg (err));
  hwloc_bitmap_free (s.reserved_cpus);
  return t;
}

static json_t *
slices (const struct nrm_topology *t, const struct nrm_publish_options *o, enum nrm_cpu_mode mode)
{
  nrm_error_t err = NULL;
  json_t *list = NULL;
  if (node_slices (t, o, mode, &list, &err) < 0)
    fail_msg ("%s: %s", t->source, nrm_error_msg (err));
  return list;
}

static uint64_t
qvalue (json_t *v)
{
  nrm_quantity_t q;
  nrm_error_t err = NULL;
  if (nrm_quantity_parse (json_string_value (v), &q, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  return (uint64_t) (q / NRM_QUANTITY_ONE);
}

/* Calls fn for every device of a driver. */
#define FOREACH_DEVICE(list, drv, dev, body)                                                                           \
  do                                                                                                                   \
    {                                                                                                                  \
      size_t _i, _j;                                                                                                   \
      json_t *_s;                                                                                                      \
      json_array_foreach (json_object_get (list, "items"), _i, _s)                                                     \
      {                                                                                                                \
        json_t *_spec = json_object_get (_s, "spec");                                                                  \
        if (strcmp (json_string_value (json_object_get (_spec, "driver")), drv) != 0)                                  \
          continue;                                                                                                    \
        json_array_foreach (json_object_get (_spec, "devices"), _j, dev) { body; }                                     \
      }                                                                                                                \
    }                                                                                                                  \
  while (0)

static void
check_numa_mode (const struct corpus_entry *c, bool reserve, bool gates)
{
  struct nrm_topology *t = load_reserved (c->file, reserve);
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  o.node_name = "node-1";
  o.list_attributes = gates;
  o.node_allocatable = gates;

  cleanup_json json_t *a = slices (t, &o, NRM_CPU_MODE_NUMA);
  cleanup_json json_t *b = slices (t, &o, NRM_CPU_MODE_NUMA);
  cleanup_free char *sa = json_dumps (a, JSON_INDENT (2));
  cleanup_free char *sb = json_dumps (b, JSON_INDENT (2));
  assert_string_equal (sa, sb);

  /* CPUs: allowed online PUs minus reserved, per node and in total. */
  uint64_t cpus = 0, want_cpus = 0;
  json_t *dev;
  FOREACH_DEVICE (a, CPU_DRIVER, dev, {
    json_t *cap = json_object_get (json_object_get (dev, "capacity"), "cpus");
    cpus += qvalue (json_object_get (cap, "value"));
    assert_true (json_is_true (json_object_get (dev, "allowMultipleAllocations")));
    assert_non_null (json_object_get (cap, "requestPolicy"));
    assert_int_equal (gates, json_object_get (dev, "nodeAllocatableResourceMappings") != NULL);
    /* Sent as the API server stores it (it defaults the multiplier to 1). */
    if (gates)
      assert_string_equal (json_string_value (json_object_get (
                               json_object_get (json_object_get (dev, "nodeAllocatableResourceMappings"), "cpu"),
                               "allocationMultiplier")),
                           "1");
  });
  for (size_t i = 0; i < t->n_pus; i++)
    want_cpus += t->pus[i].allowed && !t->pus[i].reserved;
  assert_int_equal (cpus, want_cpus);

  /* Memory: node memory minus reserved, down to the granularity. */
  uint64_t mem = 0, want_mem = 0;
  FOREACH_DEVICE (a, MEMORY_DRIVER, dev, {
    if (json_object_get (json_object_get (dev, "capacity"), "memory"))
      mem += qvalue (json_object_get (json_object_get (json_object_get (dev, "capacity"), "memory"), "value"));
  });
  for (size_t i = 0; i < t->n_numa; i++)
    {
      uint64_t huge = nrm_topology_node_hugepage_bytes (t, i);
      uint64_t m = t->numa[i].memory > huge + t->numa[i].reserved_memory
                       ? t->numa[i].memory - huge - t->numa[i].reserved_memory
                       : 0;
      m -= m % NRM_MEMORY_GRANULARITY;
      if (m >= NRM_MEMORY_GRANULARITY)
        want_mem += m;
    }
  assert_int_equal (mem, want_mem);
  nrm_topology_free (t);
}

static void
check_partitioned (const struct corpus_entry *c, bool reserve)
{
  struct nrm_topology *t = load_reserved (c->file, reserve);
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  o.node_name = "node-1";
  o.list_attributes = true;

  cleanup_json json_t *a = slices (t, &o, NRM_CPU_MODE_PARTITIONED);
  cleanup_json json_t *b = slices (t, &o, NRM_CPU_MODE_PARTITIONED);
  cleanup_free char *sa = json_dumps (a, JSON_COMPACT);
  cleanup_free char *sb = json_dumps (b, JSON_COMPACT);
  assert_string_equal (sa, sb);

  /* The counter sets hold exactly the allocatable CPUs of their node. */
  cleanup_json json_t *sets = json_object ();
  size_t i;
  json_t *s;
  json_array_foreach (json_object_get (a, "items"), i, s)
  {
    size_t k;
    json_t *cs;
    json_array_foreach (json_object_get (json_object_get (s, "spec"), "sharedCounters"), k, cs)
    {
      const char *key;
      json_t *v;
      uint64_t total = 0;
      json_object_foreach (json_object_get (cs, "counters"), key, v) { total += qvalue (json_object_get (v, "value")); }
      json_object_set_new (sets, json_string_value (json_object_get (cs, "name")), json_integer ((json_int_t) total));
    }
  }
  uint64_t all = 0, want = 0;
  for (size_t n = 0; n < t->n_numa; n++)
    {
      cleanup_bitmap hwloc_bitmap_t alloc = nrm_topology_node_allocatable (t, n);
      char name[32];
      snprintf (name, sizeof (name), "numa%u", t->numa[n].os_index);
      if (hwloc_bitmap_iszero (alloc))
        continue;
      assert_int_equal (json_integer_value (json_object_get (sets, name)), hwloc_bitmap_weight (alloc));
      want += (uint64_t) hwloc_bitmap_weight (alloc);
    }

  /* Whole-node devices consume their whole set; every device consumes
   * exactly its own CPU count; core devices never split a core; devices
   * go smallest first (cores, L3 groups, nodes), the scheduler's first fit
   * then being a best fit. */
  json_t *dev;
  int last_rank = 0;
  FOREACH_DEVICE (a, CPU_DRIVER, dev, {
    uint64_t value = qvalue (json_object_get (json_object_get (json_object_get (dev, "capacity"), "cpus"), "value"));
    uint64_t used = 0;
    size_t k;
    json_t *u;
    json_array_foreach (json_object_get (dev, "consumesCounters"), k, u)
    {
      const char *key;
      json_t *v;
      json_object_foreach (json_object_get (u, "counters"), key, v) { used += qvalue (json_object_get (v, "value")); }
    }
    assert_int_equal (used, value);
    const char *g = json_string_value (
        json_object_get (json_object_get (json_object_get (dev, "attributes"), "granularity"), "string"));
    assert_non_null (g);
    int rank = strcmp (g, "core") == 0 ? 0 : strcmp (g, "l3") == 0 ? 1 : 2;
    if (rank < last_rank)
      fail_msg ("%s: %s device %s after a larger one", t->source, g, json_string_value (json_object_get (dev, "name")));
    last_rank = rank;
    if (strcmp (g, "numa") == 0)
      {
        const char *set = json_string_value (
            json_object_get (json_array_get (json_object_get (dev, "consumesCounters"), 0), "counterSet"));
        assert_int_equal ((json_int_t) value, json_integer_value (json_object_get (sets, set)));
        all += value;
      }
    if (strcmp (g, "core") == 0)
      {
        json_int_t id = json_integer_value (
            json_object_get (json_object_get (json_object_get (dev, "attributes"), "coreID"), "int"));
        int pi = nrm_topology_pu_index (t, (unsigned) id);
        assert_true (pi >= 0);
        assert_int_equal (value, hwloc_bitmap_weight (t->cores[t->pus[pi].core].cpus));
      }
    assert_null (json_object_get (dev, "allowMultipleAllocations"));
  });
  assert_int_equal (all, want);
  nrm_topology_free (t);
}

/* With DRAListTypeAttributes every CPU and memory device carries the
 * KEP-6072 list of its node (corpus_near_nodes), whole: no recorded machine
 * needs more values than the device leaves. An L3 device over two nodes
 * adds the second one after the list when the list lacks it. */
static void
check_near_lists (const struct nrm_topology *t, json_t *list, const char *drv)
{
  cleanup_free int64_t *want = calloc (t->n_numa, sizeof (int64_t));
  json_t *dev;
  FOREACH_DEVICE (list, drv, dev, {
    json_t *attrs = json_object_get (dev, "attributes");
    json_t *got = json_object_get (json_object_get (attrs, "resource.kubernetes.io/numaNode"), "ints");
    int own = nrm_topology_numa_index (
        t, (unsigned) json_integer_value (json_object_get (json_object_get (attrs, "numaNode"), "int")));
    assert_true (own >= 0);
    assert_non_null (got);
    size_t nw = corpus_near_nodes (t, (size_t) own, want);
    const char *g = json_string_value (json_object_get (json_object_get (attrs, "granularity"), "string"));
    size_t extra = g && strcmp (g, "l3") == 0 ? 1 : 0;
    if (json_array_size (got) < nw || json_array_size (got) > nw + extra)
      fail_msg ("%s %s: %zu nodes in the list instead of %zu", t->source,
                json_string_value (json_object_get (dev, "name")), json_array_size (got), nw);
    for (size_t k = 0; k < nw; k++)
      if (json_integer_value (json_array_get (got, k)) != want[k])
        fail_msg ("%s %s: node %lld at %zu of the list instead of %lld", t->source,
                  json_string_value (json_object_get (dev, "name")),
                  (long long) json_integer_value (json_array_get (got, k)), k, (long long) want[k]);
  });
}

static void
check_lists (const struct corpus_entry *c, enum nrm_cpu_mode mode)
{
  struct nrm_topology *t = load_reserved (c->file, false);
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  o.node_name = "node-1";
  o.list_attributes = true;
  cleanup_json json_t *a = slices (t, &o, mode);
  check_near_lists (t, a, CPU_DRIVER);
  check_near_lists (t, a, MEMORY_DRIVER);
  nrm_topology_free (t);
}

static void
test_machine (void **state)
{
  const struct corpus_entry *c = *state;
  check_lists (c, NRM_CPU_MODE_NUMA);
  check_lists (c, NRM_CPU_MODE_PARTITIONED);
  check_numa_mode (c, false, false);
  check_numa_mode (c, true, false);
  check_numa_mode (c, true, true);
  check_partitioned (c, false);
  check_partitioned (c, true);
}

/* --- validator: every rule can fail ---------------------------------------- */

static json_t *
base_list (void)
{
  const char *doc = "{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":[{\"apiVersion\":\"resource.k8s.io/v1\","
                    "\"kind\":\"ResourceSlice\",\"metadata\":{\"name\":\"00000-cpu.nrm.io-n\"},\"spec\":{"
                    "\"driver\":\"cpu.nrm.io\",\"pool\":{\"name\":\"n\",\"generation\":1,\"resourceSliceCount\":1},"
                    "\"nodeName\":\"n\",\"devices\":[{\"name\":\"numa0\",\"attributes\":{\"numaNode\":{\"int\":0}},"
                    "\"capacity\":{\"cpus\":{\"value\":\"4\",\"requestPolicy\":{\"default\":\"1\",\"validRange\":{"
                    "\"min\":\"1\",\"step\":\"1\"}}}},\"allowMultipleAllocations\":true}]}}]}";
  json_error_t e;
  json_t *j = json_loads (doc, 0, &e);
  assert_non_null (j);
  return j;
}

static json_t *
spec0 (json_t *list)
{
  return json_object_get (json_array_get (json_object_get (list, "items"), 0), "spec");
}

static json_t *
dev0 (json_t *list)
{
  return json_array_get (json_object_get (spec0 (list), "devices"), 0);
}

static void
expect_invalid (json_t *list, const char *needle)
{
  nrm_error_t err = NULL;
  assert_int_equal (nrm_slices_validate (list, &err), -1);
  if (strstr (nrm_error_msg (err), needle) == NULL)
    fail_msg ("error `%s` does not mention `%s`", nrm_error_msg (err), needle);
  nrm_error_release (&err);
  json_decref (list);
}

static void
add_devices (json_t *list, size_t n, bool list_attr)
{
  json_t *devs = json_object_get (spec0 (list), "devices");
  for (size_t i = 1; i <= n; i++)
    {
      json_t *d = json_deep_copy (dev0 (list));
      char name[32];
      snprintf (name, sizeof (name), "dev%zu", i);
      json_object_set_new (d, "name", json_string (name));
      if (list_attr)
        json_object_set_new (json_object_get (d, "attributes"), "ids", json_pack ("{s:[i]}", "ints", 1));
      json_array_append_new (devs, d);
    }
}

static void
test_validator (void **state)
{
  nrm_error_t err = NULL;
  json_t *l;
  (void) state;

  l = base_list ();
  assert_int_equal (nrm_slices_validate (l, &err), 0);
  json_decref (l);

  l = base_list ();
  add_devices (l, 128, false);
  expect_invalid (l, "more than 128");

  l = base_list ();
  add_devices (l, 64, true);
  expect_invalid (l, "more than 64");

  l = base_list ();
  json_object_set_new (json_object_get (dev0 (l), "attributes"), "a23456789012345678901234567890123",
                       json_pack ("{s:i}", "int", 1));
  expect_invalid (l, "C identifier");

  l = base_list ();
  json_object_set_new (
      json_object_get (dev0 (l), "attributes"), "s",
      json_pack ("{s:s}", "string", "12345678901234567890123456789012345678901234567890123456789012345"));
  expect_invalid (l, "longer than 64");

  l = base_list ();
  {
    json_t *ints = json_array ();
    for (int i = 0; i < 48; i++)
      json_array_append_new (ints, json_integer (i));
    json_object_set_new (json_object_get (dev0 (l), "attributes"), "many", json_pack ("{s:o}", "ints", ints));
  }
  expect_invalid (l, "49 attribute values");

  l = base_list ();
  for (int i = 0; i < 32; i++)
    {
      char name[16];
      snprintf (name, sizeof (name), "a%d", i);
      json_object_set_new (json_object_get (dev0 (l), "attributes"), name, json_pack ("{s:i}", "int", i));
    }
  expect_invalid (l, "attributes and capacities");

  l = base_list ();
  json_object_set_new (json_object_get (dev0 (l), "attributes"), "two", json_pack ("{s:i, s:b}", "int", 1, "bool", 1));
  expect_invalid (l, "exactly one value");

  l = base_list ();
  json_object_del (dev0 (l), "allowMultipleAllocations");
  expect_invalid (l, "without allowMultipleAllocations");

  l = base_list ();
  json_object_set_new (json_object_get (json_object_get (dev0 (l), "capacity"), "cpus"), "value", json_string ("1"));
  expect_invalid (l, "min + step");

  l = base_list ();
  json_object_set_new (json_object_get (json_object_get (dev0 (l), "capacity"), "cpus"), "value",
                       json_string ("1.2.3"));
  expect_invalid (l, "1.2.3");

  l = base_list ();
  json_object_set_new (dev0 (l), "consumesCounters",
                       json_pack ("[{s:s, s:{s:{s:s}}}]", "counterSet", "numa9", "counters", "cpus", "value", "1"));
  expect_invalid (l, "does not define");

  l = base_list ();
  {
    json_t *sets = json_array ();
    for (int i = 0; i < 9; i++)
      json_array_append_new (
          sets, json_pack ("{s:s+, s:{s:{s:s}}}", "name", "set", i == 0 ? "a" : "b", "counters", "c", "value", "1"));
    json_object_set_new (spec0 (l), "sharedCounters", sets);
  }
  expect_invalid (l, "not both");

  l = base_list ();
  json_object_set_new (json_object_get (spec0 (l), "pool"), "resourceSliceCount", json_integer (2));
  expect_invalid (l, "resourceSliceCount");

  l = base_list ();
  json_object_set_new (dev0 (l), "name", json_string ("Numa0"));
  expect_invalid (l, "DNS label");

  l = base_list ();
  add_devices (l, 1, false);
  json_object_set_new (json_array_get (json_object_get (spec0 (l), "devices"), 1), "name", json_string ("numa0"));
  expect_invalid (l, "twice");

  l = base_list ();
  json_object_set_new (dev0 (l), "nodeAllocatableResourceMappings",
                       json_pack ("{s:{s:s}}", "example.com/gpu", "capacityKey", "cpus"));
  expect_invalid (l, "node-allocatable");

  l = base_list ();
  json_object_set_new (dev0 (l), "nodeAllocatableResourceMappings",
                       json_pack ("{s:{s:s}}", "cpu", "capacityKey", "cores"));
  expect_invalid (l, "does not have");

  /* 1.37's nodeAllocatableResources, as its API server validates it. */
  l = base_list ();
  json_object_set_new (
      dev0 (l), "nodeAllocatableResources",
      json_pack ("{s:{s:{s:s, s:s}}}", "cpu", "mapping", "capacityKey", "cpus", "capacityMultiplier", "1"));
  assert_int_equal (nrm_slices_validate (l, &err), 0);
  json_decref (l);

  l = base_list ();
  json_object_set_new (dev0 (l), "nodeAllocatableResources",
                       json_pack ("{s:{s:{s:s}}}", "cpu", "mapping", "capacityKey", "cpus"));
  expect_invalid (l, "go together");

  l = base_list ();
  json_object_set_new (dev0 (l), "nodeAllocatableResources", json_pack ("{s:{}}", "cpu"));
  expect_invalid (l, "needs a mapping");

  l = base_list ();
  json_object_set_new (dev0 (l), "nodeAllocatableResources",
                       json_pack ("{s:{s:{s:s, s:s, s:s}}}", "cpu", "mapping", "capacityKey", "cpus",
                                  "capacityMultiplier", "1", "deviceMultiplier", "2"));
  expect_invalid (l, "excludes");

  l = base_list ();
  json_object_set_new (spec0 (l), "allNodes", json_true ());
  expect_invalid (l, "exactly one of nodeName");

  l = base_list ();
  json_object_set_new (dev0 (l), "colour", json_string ("blue"));
  expect_invalid (l, "unknown field `colour`");
}

static void
test_counter_sets_split (void **state)
{
  /* 24 NUMA nodes: 24 counter sets need three slices of at most 8. */
  const char *dir = getenv ("NRM_TOPOLOGIES");
  char path[4096];
  (void) state;
  snprintf (path, sizeof (path), "%s/192em64t-24n8c2t.xml", dir);
  struct nrm_topology *t = load_reserved (path, false);
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  o.node_name = "n";
  cleanup_json json_t *l = slices (t, &o, NRM_CPU_MODE_PARTITIONED);
  size_t i, counter_slices = 0, device_slices = 0;
  json_int_t count = 0;
  json_t *s;
  json_array_foreach (json_object_get (l, "items"), i, s)
  {
    json_t *spec = json_object_get (s, "spec");
    if (strcmp (json_string_value (json_object_get (spec, "driver")), CPU_DRIVER))
      continue;
    if (json_object_get (spec, "sharedCounters"))
      {
        counter_slices++;
        assert_true (json_array_size (json_object_get (spec, "sharedCounters")) <= 8);
      }
    else
      {
        device_slices++;
        assert_true (json_array_size (json_object_get (spec, "devices")) <= 64);
      }
    count = json_integer_value (json_object_get (json_object_get (spec, "pool"), "resourceSliceCount"));
  }
  assert_int_equal (counter_slices, 3);
  assert_true (device_slices >= 1);
  assert_int_equal (count, (json_int_t) (counter_slices + device_slices));
  nrm_topology_free (t);
}

/* The names of the CPU pool's devices, comma-separated. */
static char *
cpu_device_names (json_t *list, const char *driver)
{
  char *out = NULL;
  size_t len = 0, i, k;
  FILE *f = open_memstream (&out, &len);
  json_t *sl, *dev;
  json_array_foreach (json_object_get (list, "items"), i, sl)
  {
    if (strcmp (json_string_value (json_object_get (json_object_get (sl, "spec"), "driver")), driver) != 0)
      continue;
    json_array_foreach (json_object_get (json_object_get (sl, "spec"), "devices"), k, dev)
    {
      fprintf (f, "%s%s", ftell (f) ? "," : "", json_string_value (json_object_get (dev, "name")));
    }
  }
  fclose (f);
  return out;
}

/* While the plugin runs, the numa<N> CPU devices are listed fullest first
 * (ties by node); an isolated device keeps its place. */
static void
test_order_by_room (void **state)
{
  (void) state;
  char path[4096];
  nrm_error_t err = NULL;
  struct nrm_topology *t = NULL;
  snprintf (path, sizeof (path), "%s/16amd64-8n2c.xml", getenv ("NRM_TOPOLOGIES"));
  assert_int_equal (nrm_topology_load (path, &t, &err), 0);
  struct nrm_node_settings s = { 0 };
  s.isolated_cpus = hwloc_bitmap_alloc ();
  hwloc_bitmap_set (s.isolated_cpus, 15);
  assert_int_equal (nrm_topology_apply_settings (t, &s, NULL, &err), 0);
  hwloc_bitmap_free (s.isolated_cpus);
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  o.node_name = "n";

  cleanup_json json_t *plain = NULL, *live = NULL, *part = NULL;
  assert_int_equal (node_slices (t, &o, NRM_CPU_MODE_NUMA, &plain, &err), 0);
  cleanup_free char *names = cpu_device_names (plain, CPU_DRIVER);
  assert_string_equal (names, "numa0,numa1,numa2,numa3,numa4,numa5,numa6,numa7,numa7-isolated");

  /* Free CPUs per node { 2, 1, 2, 0, 2, 2, 2, 1 }: CPU 15 is isolated. */
  assert_int_equal (slices_held (t, &o, NRM_CPU_MODE_NUMA, "2,6-7", &live, &err), 0);
  cleanup_free char *ordered = cpu_device_names (live, CPU_DRIVER);
  assert_string_equal (ordered, "numa3,numa1,numa7,numa0,numa2,numa4,numa5,numa6,numa7-isolated");

  /* Device names: numa<N> and, when asked for, numa<N>-isolated. */
  bool iso = false;
  assert_int_equal (nrm_numa_device_index (t, "numa3", &iso), 3);
  assert_false (iso);
  assert_int_equal (nrm_numa_device_index (t, "numa7-isolated", &iso), 7);
  assert_true (iso);
  assert_int_equal (nrm_numa_device_index (t, "numa7-isolated", NULL), -1);
  const char *bad[] = { "numa", "numa-1", "numa+1", "numa 1", "numa1x", "numa99", "numa0-hugepages-2mi", "l3-0", "" };
  for (size_t i = 0; i < sizeof (bad) / sizeof (bad[0]); i++)
    assert_int_equal (nrm_numa_device_index (t, bad[i], &iso), -1);
  assert_int_equal (nrm_numa_device_index (t, NULL, NULL), -1);

  /* Partitioned devices keep their order. */
  cleanup_json json_t *part0 = NULL;
  assert_int_equal (node_slices (t, &o, NRM_CPU_MODE_PARTITIONED, &part0, &err), 0);
  assert_int_equal (slices_held (t, &o, NRM_CPU_MODE_PARTITIONED, "2,6-7", &part, &err), 0);
  assert_true (json_equal (part, part0));
  nrm_topology_free (t);
}

/* A fuller node whose free CPUs lie in several L3 groups comes after the
 * nodes with a larger free group: the scheduler's first fit would
 * otherwise send a claim of 4-6 CPUs where no group holds it. */
static void
test_order_by_l3_room (void **state)
{
  (void) state;
  char path[4096];
  nrm_error_t err = NULL;
  struct nrm_topology *t = NULL;
  snprintf (path, sizeof (path), "%s/Hygon-Dhyana-32cores.xml", getenv ("NRM_TOPOLOGIES"));
  assert_int_equal (nrm_topology_load (path, &t, &err), 0);
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  o.node_name = "n";
  /* Node 0 (L3 groups 0-3,32-35 and 4-7,36-39): 3 free CPUs in each group,
   * 6 in all. Node 1: one group of 8 taken, the other free. */
  cleanup_json json_t *live = NULL;
  assert_int_equal (slices_held (t, &o, NRM_CPU_MODE_NUMA, "0-11,32,36,40-43", &live, &err), 0);
  cleanup_free char *ordered = cpu_device_names (live, CPU_DRIVER);
  assert_string_equal (ordered, "numa1,numa2,numa3,numa0");

  /* Free room by node and by the fullest L3 group of each. */
  cleanup_bitmap hwloc_bitmap_t free_set = hwloc_bitmap_dup (t->online);
  hwloc_bitmap_clr_range (free_set, 0, 11);
  uint64_t room[4], cell[4];
  nrm_numa_room (t, free_set, room, cell);
  assert_int_equal (room[0], 8);
  assert_int_equal (cell[0], 4);
  assert_int_equal (room[1], 12);
  assert_int_equal (cell[1], 8);
  nrm_topology_free (t);
}

/* Values of a device's attributes but one, as the API server counts them. */
static size_t
values_but (json_t *attrs, const char *skip)
{
  const char *key;
  json_t *v;
  size_t n = 0;
  json_object_foreach (attrs, key, v)
  {
    if (strcmp (key, skip) == 0)
      continue;
    json_t *l = json_object_get (v, "ints");
    n += l ? json_array_size (l) : 1;
  }
  return n;
}

/* 40 nodes of one package, all 20 apart: the KEP-6072 list holds 40 nodes.
 * A memory device has room for it; a CPU device gets what its other
 * attributes leave of 48, own node first, and the slice stays valid. */
static void
test_long_near_list (void **state)
{
  (void) state;
  char path[] = "/tmp/nrm-test-near-XXXXXX";
  hwloc_topology_t h;
  enum
  {
    N = 40
  };
  hwloc_obj_t objs[N];
  hwloc_uint64_t dist[N * N];
  int fd = mkstemp (path);
  assert_true (fd >= 0);
  close (fd);
  assert_int_equal (hwloc_topology_init (&h), 0);
  assert_int_equal (hwloc_topology_set_synthetic (h, "pack:1 node:40(memory=1073741824) core:1 pu:1"), 0);
  assert_int_equal (hwloc_topology_load (h), 0);
  for (unsigned i = 0; i < N; i++)
    objs[i] = hwloc_get_obj_by_type (h, HWLOC_OBJ_NUMANODE, i);
  for (unsigned i = 0; i < N * N; i++)
    dist[i] = i / N == i % N ? 10 : 20;
  hwloc_distances_add_handle_t dh
      = hwloc_distances_add_create (h, NULL, HWLOC_DISTANCES_KIND_FROM_OS | HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0);
  assert_non_null (dh);
  assert_int_equal (hwloc_distances_add_values (h, dh, N, objs, dist, 0), 0);
  assert_int_equal (hwloc_distances_add_commit (h, dh, 0), 0);
  assert_int_equal (hwloc_topology_export_xml (h, path, 0), 0);
  hwloc_topology_destroy (h);

  struct nrm_topology *t = load_reserved (path, false);
  unlink (path);
  assert_int_equal (t->n_numa, N);
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  o.node_name = "node-1";
  o.list_attributes = true;
  cleanup_json json_t *a = slices (t, &o, NRM_CPU_MODE_NUMA);
  size_t cpu_devs = 0, mem_devs = 0;
  json_t *dev;
  FOREACH_DEVICE (a, CPU_DRIVER, dev, {
    json_t *attrs = json_object_get (dev, "attributes");
    json_t *l = json_object_get (json_object_get (attrs, "resource.kubernetes.io/numaNode"), "ints");
    json_int_t own = json_integer_value (json_object_get (json_object_get (attrs, "numaNode"), "int"));
    size_t room = 48 - values_but (attrs, "resource.kubernetes.io/numaNode");
    assert_true (room < N);
    assert_int_equal (json_array_size (l), room);
    assert_int_equal (json_integer_value (json_array_get (l, 0)), own);
    for (size_t k = 1; k < room; k++)
      assert_int_equal (json_integer_value (json_array_get (l, k)), (json_int_t) (k - 1 + (k - 1 >= (size_t) own)));
    cpu_devs++;
  });
  FOREACH_DEVICE (a, MEMORY_DRIVER, dev, {
    json_t *attrs = json_object_get (dev, "attributes");
    json_t *l = json_object_get (json_object_get (attrs, "resource.kubernetes.io/numaNode"), "ints");
    assert_int_equal (json_array_size (l), N);
    mem_devs++;
  });
  assert_int_equal (cpu_devs, N);
  assert_int_equal (mem_devs, N);
  nrm_topology_free (t);
}

/* With the gate, the mappings take the API server's form: 1.36's
 * nodeAllocatableResourceMappings, 1.37's nodeAllocatableResources. */
static void
test_allocatable_forms (void **state)
{
  (void) state;
  cleanup_free char *path = NULL;
  const char *dir = getenv ("NRM_TOPOLOGIES");
  if (dir == NULL)
    skip ();
  path = xasprintf ("%s/24em64t-2n6c2t-pci.xml", dir);
  for (unsigned minor = 36; minor <= 37; minor++)
    for (int mode = 0; mode < 2; mode++)
      {
        struct nrm_topology *t = load_reserved (path, false);
        struct nrm_publish_options o;
        nrm_publish_options_init (&o);
        o.node_name = "node-1";
        o.node_allocatable = true;
        o.api_minor = minor;
        cleanup_json json_t *a = slices (t, &o, mode ? NRM_CPU_MODE_PARTITIONED : NRM_CPU_MODE_NUMA);
        cleanup_json json_t *want = json_pack ("{s:s, s:s}", "capacityKey", "cpus", "capacityMultiplier", "1");
        size_t n = 0;
        json_t *dev;
        FOREACH_DEVICE (a, CPU_DRIVER, dev, {
          json_t *old = json_object_get (dev, "nodeAllocatableResourceMappings");
          json_t *cpu = json_object_get (json_object_get (dev, "nodeAllocatableResources"), "cpu");
          json_t *m = json_object_get (cpu, "mapping");
          if (minor == 36)
            assert_true (old != NULL && cpu == NULL);
          else if (mode == 0)
            assert_true (old == NULL && json_equal (m, want));
          else
            assert_true (old == NULL && json_object_size (m) == 1 && json_object_get (m, "deviceMultiplier"));
          n++;
        });
        assert_true (n > 0);
        nrm_topology_free (t);
      }
}

/* A label value holds 63 characters, a node name 253. */
static void
test_node_label_value (void **state)
{
  (void) state;
  cleanup_free char *short_name = nrm_node_label_value ("ip-10-0-123-45.eu-west-1.compute.internal");
  assert_string_equal (short_name, "ip-10-0-123-45.eu-west-1.compute.internal");
  char a[254], b[254];
  memset (a, 'n', 253);
  a[253] = '\0';
  for (int i = 63; i < 253; i += 64)
    a[i] = '.';
  memcpy (b, a, sizeof (a));
  b[200] = 'm';
  cleanup_free char *va = nrm_node_label_value (a), *vb = nrm_node_label_value (b), *va2 = nrm_node_label_value (a);
  assert_int_equal (strlen (va), 63);
  assert_memory_equal (va, a, 46);
  assert_int_equal (va[46], '-');
  for (int i = 47; i < 63; i++)
    assert_non_null (strchr ("0123456789abcdef", va[i]));
  assert_string_equal (va, va2);
  assert_string_not_equal (va, vb);
}

int
main (void)
{
  const struct corpus_test per_machine[] = { { "slices", test_machine } };
  const struct CMUnitTest others[] = {
    { .name = "validator refuses broken slices", .test_func = test_validator },
    { .name = "counter sets split", .test_func = test_counter_sets_split },
    { .name = "CPU devices fullest first", .test_func = test_order_by_room },
    { .name = "CPU devices by free L3 groups", .test_func = test_order_by_l3_room },
    { .name = "long KEP-6072 list within 48 values", .test_func = test_long_near_list },
    { .name = "node label value within 63 characters", .test_func = test_node_label_value },
    { .name = "node-allocatable mappings in 1.36's and 1.37's forms", .test_func = test_allocatable_forms },
  };
  return corpus_run ("slices", per_machine, 1, others, sizeof (others) / sizeof (others[0]));
}
