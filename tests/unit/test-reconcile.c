/* SPDX-License-Identifier: Apache-2.0 */
/* The shared pool's accounting (nrm/reconcile.h): a NUMA node's memory is
 * what the driver's pool offers now, not the start-time allocatable. On a
 * recorded machine with two nodes, whose memory blocks are a fake sysfs
 * tree, with the memory driver and a claim in its checkpoint. */
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

#include "driver/memory/memory.h"
#include "driver/registry.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/quantity.h"
#include "nrm/base/xalloc.h"
#include "nrm/reconcile.h"
#include "tests/unit/fakefs.h"
#include "topology/topology.h"

#define TOPO_2N "24em64t-2n6c2t-pci.xml"
#define BLOCK (128ull << 20)

static char root[64];

/* Memory block b of node n, in the given state, linked from the node. */
static void
block (unsigned b, unsigned n, const char *state)
{
  char rel[128], target[64];
  fake_put (root, "sys/devices/system/memory/block_size_bytes", "8000000\n");
  snprintf (rel, sizeof (rel), "sys/devices/system/memory/memory%u/state", b);
  fake_put (root, rel, state);
  snprintf (rel, sizeof (rel), "sys/devices/system/node/node%u/memory%u", n, b);
  snprintf (target, sizeof (target), "../../memory/memory%u", b);
  fake_link (root, rel, target);
}

/* The bytes of numa<node>'s capacity in the driver's pool now. */
static uint64_t
capacity (const struct nrm_driver_slot *s, unsigned node)
{
  struct nrm_pool p = { 0 };
  nrm_error_t err = NULL;
  uint64_t bytes = 0;
  char name[16];
  size_t i;
  json_t *dev;
  snprintf (name, sizeof (name), "numa%u", node);
  if (s->ops->pool (s->self, NULL, &p, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  json_array_foreach (p.devices, i, dev)
  {
    const char *v
        = json_string_value (json_object_get (json_object_get (json_object_get (dev, "capacity"), "memory"), "value"));
    if (strcmp (json_string_value (json_object_get (dev, "name")), name) == 0)
      assert_int_equal (nrm_quantity_parse_bytes (v, &bytes, &err), 0);
  }
  nrm_pool_done (&p);
  return bytes;
}

/* A checkpoint of the memory driver with one completed claim of bytes of
 * numa0, as prepare records it. */
static void
hold (const char *state_dir, uint64_t bytes)
{
  cleanup_json json_t *cp
      = json_pack ("{s:i, s:s, s:i, s:{s:{s:s, s:s, s:s, s:[{s:s, s:s, s:[s]}], s:{s:{s:I}, s:s, s:s}}}}", "version", 1,
                   "driver", "memory.nrm.io", "generation", 1, "claims", "c1", "namespace", "default", "name", "c1",
                   "phase", "PrepareCompleted", "devices", "device", "numa0", "pool", "n", "requestNames", "mem",
                   "state", "devices", "numa0", (json_int_t) bytes, "mems", "0", "policy", "bind");
  cleanup_free char *path = xasprintf ("%s/memory.nrm.io.checkpoint.json", state_dir);
  assert_int_equal (json_dump_file (cp, path, 0), 0);
}

static char *
format (hwloc_const_bitmap_t set)
{
  return nrm_cpulist_format (set);
}

/* Memory offlined since the start: a claim of what the pool offers now
 * holds node 0 in full, though it holds less than the node's allocatable
 * at the start (what status and the reconciler counted before). */
static void
test_offlined_memory (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  struct nrm_topology *t = NULL;
  struct nrm_registry *reg = NULL;
  struct nrm_drivers d = { 0 };
  struct nrm_publish_options o;
  snprintf (root, sizeof (root), "/tmp/nrm-reconcile-XXXXXX");
  assert_non_null (mkdtemp (root));
  for (unsigned b = 0; b < 8; b++)
    block (b, b / 4, "online\n");
  cleanup_free char *state_dir = xasprintf ("%s/state", root);
  assert_int_equal (nrm_mkdir_p (state_dir, 0700, &err), 0);
  const char *dir = getenv ("NRM_TOPOLOGIES");
  cleanup_free char *path = xasprintf ("%s/%s", dir ? dir : "tests/topologies", TOPO_2N);
  if (nrm_topology_load (path, &t, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  nrm_publish_options_init (&o);
  struct nrm_driver_selection sel = { .ids = "memory" };
  struct nrm_driver_host h = { .topo = t, .node = &o, .fsroot = fake_root (root), .state_dir = state_dir };
  assert_int_equal (nrm_registry_new (&reg, &err), 0);
  if (nrm_drivers_open (reg, &sel, &h, &d, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_int_equal (d.n, 1);

  uint64_t start = capacity (&d.slots[0], 0);
  uint64_t allocatable = nrm_topology_node_allocatable_memory (t, 0);
  allocatable -= allocatable % NRM_MEMORY_GRANULARITY;
  assert_int_equal (start, allocatable);
  /* Two blocks of node 0 go offline: the pool offers less. */
  block (1, 0, "offline\n");
  block (2, 0, "offline\n");
  uint64_t now = capacity (&d.slots[0], 0);
  assert_int_equal (now, start - 2 * BLOCK);

  /* A claim of all the pool offers now. */
  hold (state_dir, now);
  cleanup_bitmap hwloc_bitmap_t full = nrm_shared_pool_full_nodes (state_dir, t, &d);
  cleanup_free char *fl = format (full);
  assert_string_equal (fl, "0");
  assert_true (now < allocatable);
  bool starved = true;
  cleanup_bitmap hwloc_bitmap_t mems = nrm_shared_pool_mems (t, full, &starved);
  cleanup_free char *ml = format (mems);
  assert_string_equal (ml, "1");
  assert_false (starved);

  /* Online again: the same claim no longer holds the node in full. */
  block (1, 0, "online\n");
  block (2, 0, "online\n");
  cleanup_bitmap hwloc_bitmap_t again = nrm_shared_pool_full_nodes (state_dir, t, &d);
  assert_true (hwloc_bitmap_iszero (again));

  nrm_drivers_close (&d);
  nrm_registry_free (reg);
  nrm_topology_free (t);
  cleanup_free char *cmd = xasprintf ("rm -rf '%s'", root);
  assert_int_equal (system (cmd), 0);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_offlined_memory),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
