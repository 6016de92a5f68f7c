/* SPDX-License-Identifier: Apache-2.0 */
/* The config file and the flag parsers: every mistake is named. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "nrm/base/cleanup.h"
#include "tests/unit/util.h"
#include "cpuset/partition.h"
#include "cpuset/placement.h"
#include "nrm/conf.h"

static void
expect_load_error (const char *text, const char *needle)
{
  struct nrm_config c;
  nrm_error_t err = NULL;
  cleanup_free char *path = write_tmp (text);
  nrm_config_init (&c);
  assert_int_equal (nrm_config_load_file (&c, path, &err), -1);
  if (strstr (nrm_error_msg (err), needle) == NULL || strstr (nrm_error_msg (err), path) == NULL)
    fail_msg ("error `%s` should name `%s` and the file", nrm_error_msg (err), needle);
  nrm_error_release (&err);
  nrm_config_done (&c);
  unlink (path);
}

static void
test_good_file (void **state)
{
  struct nrm_config c;
  nrm_error_t err = NULL;
  cleanup_free char *path = write_tmp (
      "{\"nodeName\": \"worker-1\", \"reservedCPUs\": \"0-1\", \"isolatedCPUs\": \"6-7\","
      " \"reservedMemory\": [{\"numaNode\": 0, \"limits\": {\"memory\": \"1Gi\", \"hugepages-2Mi\": \"4Mi\"}}],"
      " \"cpu\": {\"mode\": \"partitioned\", \"driverName\": \"cpu.example.com\", \"partition\": \"isolated\","
      " \"sharedPoolCgroups\": [\"system.slice\", \"/machine.slice\"]},"
      " \"memory\": {\"granularity\": \"4Mi\", \"hugepagesOnDemand\": {\"2Mi\": \"64Mi\"}, \"health\": "
      "{\"pollSeconds\": 7}},"
      " \"featureGates\": {\"DRAListTypeAttributes\": true}}");
  (void) state;
  nrm_config_init (&c);
  assert_int_equal (nrm_config_load_file (&c, path, &err), 0);
  assert_int_equal (nrm_config_finish (&c, &err), 0);
  assert_string_equal (c.node_name, "worker-1");
  assert_string_equal (c.publish.node_name, "worker-1");
  assert_string_equal (json_string_value (json_object_get (c.driver_names, "cpu")), "cpu.example.com");
  assert_int_equal (c.cpu.mode, NRM_CPU_MODE_PARTITIONED);
  assert_int_equal (c.cpu.partition, NRM_PARTITION_ISOLATED);
  /* Kept without the leading '/', as the reconciler compares them. */
  assert_int_equal (json_array_size (c.shared_pool_cgroups), 2);
  assert_string_equal (json_string_value (json_array_get (c.shared_pool_cgroups, 1)), "machine.slice");
  assert_int_equal (c.memory_granularity, 4 << 20);
  /* The memory driver's own setting reaches it (it checks it). */
  assert_string_equal (
      json_string_value (json_object_get (
          json_object_get (json_object_get (c.driver_settings, "memory"), "hugepagesOnDemand"), "2Mi")),
      "64Mi");
  /* The memory driver checks its health settings itself. */
  json_t *health = json_object_get (json_object_get (c.driver_settings, "memory"), "health");
  assert_int_equal (json_integer_value (json_object_get (health, "pollSeconds")), 7);
  assert_true (c.publish.list_attributes);
  assert_false (c.publish.node_allocatable);
  assert_int_equal (hwloc_bitmap_weight (c.node.reserved_cpus), 2);
  assert_int_equal (hwloc_bitmap_first (c.node.isolated_cpus), 6);
  assert_int_equal (c.node.n_reserved_memory, 2);
  assert_int_equal (c.node.reserved_memory[0].bytes, 1 << 30);
  assert_string_equal (c.node.reserved_memory[1].resource, "hugepages-2Mi");
  nrm_config_done (&c);
  unlink (path);
}

static void
test_bad_files (void **state)
{
  (void) state;
  expect_load_error ("{\"nodename\": \"x\"}", "unknown key `nodename`");
  expect_load_error ("{\"reservedCPUs\": 3}", "key `reservedCPUs` must be a CPU list string, not an integer");
  expect_load_error ("{\"reservedCPUs\": \"0-\"}", "reservedCPUs");
  expect_load_error ("{\"cpu\": {\"mode\": \"fast\"}}", "unknown CPU device mode `fast`");
  expect_load_error ("{\"cpu\": {\"colour\": 1}}", "unknown key `cpu.colour`");
  expect_load_error ("{\"cpu\": {\"partition\": \"yes\"}}",
                     "key `cpu.partition` must be off, root or isolated, not `yes`");
  expect_load_error ("{\"cpu\": {\"partition\": true}}", "key `cpu.partition` must be off, root or isolated");
  expect_load_error ("{\"cpu\": {\"sharedPoolCgroups\": \"system.slice\"}}",
                     "key `cpu.sharedPoolCgroups` must be a list of cgroup paths");
  expect_load_error ("{\"cpu\": {\"sharedPoolCgroups\": [\"kubepods.slice/x\"]}}", "`kubepods.slice/x` is nrm's own");
  expect_load_error ("{\"cpu\": {\"sharedPoolCgroups\": [\"nrm.slice\"]}}", "nrm run");
  expect_load_error ("{\"cpu\": {\"sharedPoolCgroups\": [\"/\"]}}", "not a cgroup path below the root");
  expect_load_error ("{\"cpu\": {\"sharedPoolCgroups\": [\"a/../b\"]}}", "not a cgroup path");
  expect_load_error ("{\"cpu\": {\"sharedPoolCgroups\": [\"system.slice\", \"system.slice/x.service\"]}}",
                     "`system.slice` and `system.slice/x.service` overlap");
  expect_load_error ("{\"cpu\": {\"sharedPoolCgroups\": [\"user.slice\", \"/user.slice\"]}}", "overlap");
  expect_load_error ("{\"cpu\": {\"sharedPoolCgroups\": [3]}}", "item 0 is not a string");
  expect_load_error ("{\"memory\": {\"granularity\": \"0\"}}", "must be positive");
  expect_load_error ("{\"featureGates\": {\"DRAListTypeAttributes\": \"yes\"}}", "must be a boolean");
  expect_load_error ("{\"featureGates\": {\"Nope\": true}}", "unknown feature gate `Nope`");
  expect_load_error ("{\"reservedMemory\": [{\"numaNode\": -1, \"limits\": {}}]}", "numaNode");
  expect_load_error ("{\"reservedMemory\": [{\"numaNode\": 0, \"limits\": {\"cpu\": \"1\"}}]}",
                     "unknown resource `cpu`");
  expect_load_error ("{\"reservedMemory\": [{\"numaNode\": 0, \"limits\": {\"memory\": \"lots\"}}]}", "lots");
  expect_load_error ("{\"nodeName\": \"a\", \"nodeName\": \"b\"}", "duplicate");
  expect_load_error ("{\"nodeName\": ", "line 1");
  expect_load_error ("[1]", "top level must be an object");

  struct nrm_config c;
  nrm_error_t err = NULL;
  nrm_config_init (&c);
  assert_int_equal (nrm_config_load_file (&c, "/nonexistent/nrm.json", &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "/nonexistent/nrm.json"));
  nrm_error_release (&err);
  nrm_config_done (&c);
}

static void
test_flags (void **state)
{
  struct nrm_config c;
  nrm_error_t err = NULL;
  (void) state;
  nrm_config_init (&c);
  assert_int_equal (nrm_config_add_reserved_memory (&c, "1:memory=512Mi,hugepages-1Gi=2Gi", &err), 0);
  assert_int_equal (c.node.n_reserved_memory, 2);
  assert_int_equal (c.node.reserved_memory[0].numa_node, 1);
  assert_int_equal (c.node.reserved_memory[1].bytes, 2ULL << 30);
  static const char *const bad_mem[] = { "memory=1Gi", "x:memory=1Gi", "0:", "0:memory", "0:memory=1Q", "0:cpu=1" };
  for (size_t i = 0; i < sizeof (bad_mem) / sizeof (bad_mem[0]); i++)
    {
      assert_int_equal (nrm_config_add_reserved_memory (&c, bad_mem[i], &err), -1);
      nrm_error_release (&err);
    }
  assert_int_equal (nrm_config_set_feature_gates (&c, "DRANodeAllocatableResources=true", &err), 0);
  assert_true (c.publish.node_allocatable);
  assert_int_equal (nrm_config_set_feature_gates (&c, "DRANodeAllocatableResources", &err), -1);
  nrm_error_release (&err);
  assert_int_equal (nrm_config_set_string (&c.node_name, "Not_A_Node", &err), 0);
  assert_int_equal (nrm_config_finish (&c, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "Not_A_Node"));
  nrm_error_release (&err);
  nrm_config_done (&c);
}

static const char nodes_file[]
    = "{\"reservedCPUs\": \"0\", \"cpu\": {\"mode\": \"numa\", \"minSharedCPUs\": 2},"
      " \"nodes\": ["
      "  {\"selector\": {\"matchLabels\": {\"pool\": \"big\"}},"
      "   \"settings\": {\"reservedCPUs\": \"0-3\", \"memory\": {\"granularity\": \"2Mi\"}}},"
      "  {\"names\": [\"w1\", \"w2\"], \"settings\": {\"reservedCPUs\": \"0-1\","
      "   \"cpu\": {\"mode\": \"partitioned\"},"
      "   \"reservedMemory\": [{\"numaNode\": 1, \"limits\": {\"memory\": \"1Gi\"}}]}}]}";

/* Loads nodes_file for node name, resolves it with labels (a JSON text, or
 * NULL), and returns the reserved CPUs as a list. */
static char *
resolve (struct nrm_config *c, const char *name, const char *labels)
{
  nrm_error_t err = NULL;
  cleanup_free char *path = write_tmp (nodes_file);
  cleanup_json json_t *l = labels ? json_loads (labels, 0, NULL) : NULL;
  nrm_config_init (c);
  assert_int_equal (nrm_config_load_file (c, path, &err), 0);
  assert_int_equal (nrm_config_set_string (&c->node_name, name, &err), 0);
  assert_int_equal (nrm_config_finish (c, &err), 0);
  assert_int_equal (nrm_config_resolve_node (c, l, &err), 0);
  unlink (path);
  return nrm_cpulist_format (c->node.reserved_cpus);
}

static void
test_nodes (void **state)
{
  struct nrm_config c;
  (void) state;
  /* By name: the entry's keys override the top level, the others stay. */
  cleanup_free char *w2 = resolve (&c, "w2", NULL);
  assert_string_equal (w2, "0-1");
  assert_int_equal (c.node_entry, 1);
  assert_int_equal (c.cpu.mode, NRM_CPU_MODE_PARTITIONED);
  assert_int_equal (c.cpu.min_shared_cpus, 2);
  assert_int_equal (c.node.n_reserved_memory, 1);
  assert_string_equal (nrm_config_source (&c, "reservedCPUs"), "nodes[1]");
  assert_string_equal (nrm_config_source (&c, "cpu.mode"), "nodes[1]");
  assert_string_equal (nrm_config_source (&c, "cpu.minSharedCPUs"), "top level");
  assert_string_equal (nrm_config_source (&c, "isolatedCPUs"), "default");
  nrm_config_done (&c);
  /* The first match wins: w2's labels match nodes[0] too. */
  cleanup_free char *w2l = resolve (&c, "w2", "{\"pool\": \"big\", \"zone\": \"a\"}");
  assert_string_equal (w2l, "0-3");
  assert_int_equal (c.node_entry, 0);
  assert_int_equal (c.memory_granularity, 2 << 20);
  assert_int_equal (c.cpu.mode, NRM_CPU_MODE_NUMA);
  nrm_config_done (&c);
  /* Labels that differ, and no labels at all: only names match. */
  cleanup_free char *other = resolve (&c, "w3", "{\"pool\": \"small\"}");
  assert_string_equal (other, "0");
  assert_int_equal (c.node_entry, -1);
  assert_string_equal (nrm_config_source (&c, "reservedCPUs"), "top level");
  nrm_config_done (&c);
  cleanup_free char *nolabels = resolve (&c, "w3", NULL);
  assert_string_equal (nolabels, "0");
  assert_true (nrm_config_nodes_need_labels (&c));
  nrm_config_done (&c);
}

static void
test_nodes_flags_win (void **state)
{
  struct nrm_config c;
  nrm_error_t err = NULL;
  cleanup_free char *path = write_tmp (nodes_file);
  (void) state;
  nrm_config_init (&c);
  assert_int_equal (nrm_config_load_file (&c, path, &err), 0);
  assert_int_equal (nrm_config_set_reserved_cpus (&c, "7", &err), 0);
  nrm_config_set_source (&c, "reservedCPUs", "flag");
  assert_int_equal (nrm_config_set_string (&c.node_name, "w1", &err), 0);
  assert_int_equal (nrm_config_finish (&c, &err), 0);
  assert_int_equal (nrm_config_resolve_node (&c, NULL, &err), 0);
  cleanup_free char *cpus = nrm_cpulist_format (c.node.reserved_cpus);
  assert_string_equal (cpus, "7");
  assert_string_equal (nrm_config_source (&c, "reservedCPUs"), "flag");
  assert_int_equal (c.cpu.mode, NRM_CPU_MODE_PARTITIONED);
  nrm_config_done (&c);
  unlink (path);
}

static void
test_nodes_bad (void **state)
{
  (void) state;
  expect_load_error ("{\"nodes\": {}}", "key `nodes` must be a list");
  expect_load_error ("{\"nodes\": [3]}", "key `nodes[0]` must be an object");
  expect_load_error ("{\"nodes\": [{\"settings\": {}}]}", "key `nodes[0]` needs one of `names` and `selector`");
  expect_load_error ("{\"nodes\": [{\"names\": [\"a\"], \"selector\": {\"matchLabels\": {}}, \"settings\": {}}]}",
                     "key `nodes[0]` needs one of");
  expect_load_error ("{\"nodes\": [{\"names\": [\"a\"]}]}", "key `nodes[0]` has no `settings`");
  expect_load_error ("{\"nodes\": [{\"names\": [], \"settings\": {}}]}", "key `nodes[0].names` must be");
  expect_load_error (
      "{\"nodes\": [{\"names\": [\"a\"], \"settings\": {}}, {\"names\": [\"Bad_Name\"], \"settings\": {}}]}",
      "key `nodes[1].names[0]` must be a node name");
  expect_load_error ("{\"nodes\": [{\"selector\": {\"matchExpressions\": []}, \"settings\": {}}]}",
                     "key `nodes[0].selector` must be {matchLabels");
  expect_load_error ("{\"nodes\": [{\"selector\": {\"matchLabels\": {\"a\": 1}}, \"settings\": {}}]}",
                     "key `nodes[0].selector.matchLabels.a` must be a string");
  expect_load_error ("{\"nodes\": [{\"names\": [\"a\"], \"labels\": {}, \"settings\": {}}]}",
                     "unknown key `nodes[0].labels`");
  expect_load_error ("{\"nodes\": [{\"names\": [\"a\"], \"settings\": {\"nodeName\": \"b\"}}]}",
                     "unknown key `nodes[0].settings.nodeName`");
  expect_load_error ("{\"nodes\": [{\"names\": [\"a\"], \"settings\": {\"cpu\": {\"driverName\": \"x.io\"}}}]}",
                     "key `nodes[0].settings.cpu.driverName`: driver names are the same on every node");
  /* Checked on every node, not only where the entry matches. */
  expect_load_error ("{\"nodes\": [{\"names\": [\"a\"], \"settings\": {\"cpu\": {\"mode\": \"fast\"}}}]}",
                     "nodes[0].settings: key `cpu.mode`: unknown CPU device mode `fast`");
  expect_load_error ("{\"nodes\": [{\"names\": [\"a\"], \"settings\": {\"reservedCPUs\": \"3-1\"}}]}",
                     "nodes[0].settings: key `reservedCPUs`");
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_good_file), cmocka_unit_test (test_bad_files),       cmocka_unit_test (test_flags),
    cmocka_unit_test (test_nodes),     cmocka_unit_test (test_nodes_flags_win), cmocka_unit_test (test_nodes_bad),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
