/* SPDX-License-Identifier: Apache-2.0 */
/* Memory health over fake sysfs trees: EDAC counters that change between
 * passes, memory blocks going offline and online (the published capacity
 * follows), no EDAC at all, and bad files named, on a recorded machine
 * with two sockets and two NUMA nodes. Each EDAC driver's controllers
 * placed on the nodes of recorded AMD, Hygon and Arm machines; a
 * firmware-first machine's errors placed by the addresses of ras:mc_event
 * lines written as trace_pipe prints them, in a fake tracefs. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/driver.h"
#include "driver/memory/health.h"
#include "memory/health.h"
#include "memory/mcevent.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/quantity.h"
#include "nrm/base/xalloc.h"
#include "tests/unit/fakefs.h"
#include "topology/topology.h"

extern const struct nrm_driver_ops nrm_memory_driver;

#define TOPO_2N "24em64t-2n6c2t-pci.xml"
#define BLOCK (128ull << 20)

static char root[64];

static struct nrm_topology *
load (const char *file)
{
  struct nrm_topology *t = NULL;
  nrm_error_t err = NULL;
  const char *dir = getenv ("NRM_TOPOLOGIES");
  cleanup_free char *path = xasprintf ("%s/%s", dir ? dir : "tests/topologies", file);
  if (nrm_topology_load (path, &t, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  return t;
}

static struct nrm_topology *
load_2n (void)
{
  return load (TOPO_2N);
}

static void
make_root (void)
{
  snprintf (root, sizeof (root), "/tmp/nrm-memhealth-XXXXXX");
  assert_non_null (mkdtemp (root));
}

static void
remove_tree (void)
{
  cleanup_free char *cmd = xasprintf ("rm -rf '%s'", root);
  assert_int_equal (system (cmd), 0);
}

static void
mc (unsigned i, const char *name, const char *ce, const char *ue)
{
  char rel[128];
  snprintf (rel, sizeof (rel), "sys/devices/system/edac/mc/mc%u/mc_name", i);
  if (name)
    fake_put (root, rel, name);
  snprintf (rel, sizeof (rel), "sys/devices/system/edac/mc/mc%u/ce_count", i);
  fake_put (root, rel, ce);
  snprintf (rel, sizeof (rel), "sys/devices/system/edac/mc/mc%u/ue_count", i);
  fake_put (root, rel, ue);
}

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

struct fixture
{
  struct nrm_topology *t;
  struct nrm_publish_options o;
  void *d;
};

/* The driver on the machine recorded in topo, over the tree at root. */
static void
start_on (struct fixture *f, const char *topo, json_t *settings, const char *state_dir)
{
  nrm_error_t err = NULL;
  f->t = load (topo);
  nrm_publish_options_init (&f->o);
  struct nrm_driver_host h = { .topo = f->t,
                               .node = &f->o,
                               .name = "memory.nrm.io",
                               .fsroot = fake_root (root),
                               .settings = settings,
                               .state_dir = state_dir };
  if (nrm_memory_driver.new(&h, &f->d, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
}

static void
start (struct fixture *f, json_t *settings)
{
  start_on (f, TOPO_2N, settings, NULL);
}

static void
stop (struct fixture *f)
{
  nrm_memory_driver.free (f->d);
  nrm_topology_free (f->t);
}

static const struct nrm_device_health *
find (const struct nrm_health_report *r, const char *device)
{
  for (size_t i = 0; i < r->n; i++)
    if (strcmp (r->devices[i].device, device) == 0)
      return &r->devices[i];
  fail_msg ("no health for %s", device);
  return NULL;
}

static void
health (struct fixture *f, struct nrm_health_report *r)
{
  nrm_error_t err = NULL;
  nrm_health_report_done (r);
  memset (r, 0, sizeof (*r));
  if (nrm_memory_driver.health (f->d, r, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
}

static void
expect (const struct nrm_health_report *r, const char *device, const char *taint, enum nrm_taint_effect effect,
        const char *says)
{
  const struct nrm_device_health *h = find (r, device);
  if (taint == NULL)
    {
      assert_null (h->taint);
      assert_int_equal (h->health, NRM_HEALTH_HEALTHY);
      return;
    }
  assert_non_null (h->taint);
  assert_string_equal (h->taint, taint);
  assert_int_equal (h->effect, effect);
  assert_int_equal (h->health, effect == NRM_TAINT_NO_EXECUTE ? NRM_HEALTH_UNHEALTHY : NRM_HEALTH_HEALTHY);
  if (says && (h->message == NULL || strstr (h->message, says) == NULL))
    fail_msg ("%s: message `%s` lacks `%s`", device, h->message ? h->message : "(none)", says);
}

static void
test_edac_counters (void **state)
{
  (void) state;
  struct fixture f;
  struct nrm_health_report r = { 0 };
  make_root ();
  mc (0, "Skylake Socket#0 IMC#0\n", "0\n", "0\n");
  mc (1, "Skylake Socket#1 IMC#0\n", "0\n", "0\n");
  cleanup_json json_t *settings = json_pack ("{s:{s:i}}", "health", "correctedErrorThreshold", 10);
  start (&f, settings);
  assert_true (nrm_memory_driver.health_fd (f.d) >= 0);

  health (&f, &r);
  assert_int_equal (r.n, 2);
  expect (&r, "numa0", NULL, 0, NULL);
  expect (&r, "numa1", NULL, 0, NULL);

  /* Corrected errors at the threshold: a note on socket 0's node only. */
  mc (0, NULL, "10\n", "0\n");
  health (&f, &r);
  expect (&r, "numa0", "memory-corrected", NRM_TAINT_NONE, "mc0: 10 corrected memory errors (threshold 10)");
  expect (&r, "numa1", NULL, 0, NULL);

  /* Above it: no new pods there. */
  mc (0, NULL, "11\n", "0\n");
  health (&f, &r);
  expect (&r, "numa0", "memory-corrected", NRM_TAINT_NO_SCHEDULE, "11 corrected");

  /* An uncorrected error on socket 1: its pods leave. */
  mc (1, NULL, "0\n", "1\n");
  health (&f, &r);
  expect (&r, "numa1", "memory-uncorrected", NRM_TAINT_NO_EXECUTE, "mc1: 1 uncorrected memory errors");
  expect (&r, "numa0", "memory-corrected", NRM_TAINT_NO_SCHEDULE, NULL);

  /* Counters reset (reset_counters): healthy again. */
  mc (0, NULL, "0\n", "0\n");
  mc (1, NULL, "0\n", "0\n");
  health (&f, &r);
  expect (&r, "numa0", NULL, 0, NULL);
  expect (&r, "numa1", NULL, 0, NULL);

  /* A controller whose name gives no socket: a note on every node. */
  mc (2, "ghes_edac\n", "3\n", "1\n");
  health (&f, &r);
  expect (&r, "numa0", "memory-errors-unmapped", NRM_TAINT_NONE,
          "mc2 (NUMA node not known): 3 corrected, 1 uncorrected");
  expect (&r, "numa1", "memory-errors-unmapped", NRM_TAINT_NONE, NULL);

  /* Huge-page devices of a node share its errors. */
  mc (0, NULL, "0\n", "2\n");
  struct nrm_memory_health *mh = NULL;
  nrm_error_t err = NULL;
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  struct nrm_driver_host h = { .topo = f.t, .node = &o, .name = "memory.nrm.io", .fsroot = fake_root (root) };
  assert_int_equal (nrm_memory_health_new (&h, &mh, &err), 0);
  cleanup_json json_t *names = json_pack ("[s, s, s]", "numa0-hugepages-2mi", "numa1-hugepages-1gi", "numa7");
  struct nrm_health_report hr = { 0 };
  assert_int_equal (nrm_memory_health_report (mh, names, &hr, &err), 0);
  assert_int_equal (hr.n, 2); /* no node 7 on this machine */
  expect (&hr, "numa0-hugepages-2mi", "memory-uncorrected", NRM_TAINT_NO_EXECUTE, "mc0: 2 uncorrected");
  expect (&hr, "numa1-hugepages-1gi", "memory-errors-unmapped", NRM_TAINT_NONE, NULL);
  nrm_health_report_done (&hr);
  nrm_memory_health_free (mh);

  nrm_health_report_done (&r);
  stop (&f);
  remove_tree ();
}

static uint64_t
capacity (struct fixture *f, const char *device)
{
  struct nrm_pool p = { 0 };
  nrm_error_t err = NULL;
  uint64_t bytes = 0;
  size_t i;
  json_t *dev;
  if (nrm_memory_driver.pool (f->d, NULL, &p, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  json_array_foreach (p.devices, i, dev)
  {
    if (strcmp (json_string_value (json_object_get (dev, "name")), device))
      continue;
    const char *v
        = json_string_value (json_object_get (json_object_get (json_object_get (dev, "capacity"), "memory"), "value"));
    assert_int_equal (nrm_quantity_parse_bytes (v, &bytes, &err), 0);
  }
  nrm_pool_done (&p);
  return bytes;
}

/* Prepares a claim of bytes of a memory device: 0, or the errno. */
static int
prepare (struct fixture *f, const char *uid, const char *device, uint64_t bytes)
{
  char q[32];
  snprintf (q, sizeof (q), "%llu", (unsigned long long) bytes);
  cleanup_json json_t *consumed = json_pack ("{s:s}", "memory", q);
  cleanup_json json_t *config = json_array ();
  struct nrm_alloc_result res
      = { .driver = "memory.nrm.io", .request = "mem", .pool = "n", .device = device, .consumed = consumed };
  struct nrm_claim_view c = {
    .uid = uid, .ns = "default", .name = uid, .results = &res, .n_results = 1, .all = &res, .n_all = 1, .config = config
  };
  struct nrm_prepared out = { 0 };
  nrm_error_t err = NULL;
  int r = nrm_memory_driver.prepare (f->d, &c, &out, &err);
  if (r < 0)
    {
      r = strstr (nrm_error_msg (err), "free") ? 28 /* ENOSPC */ : -1;
      if (r < 0)
        fail_msg ("%s", nrm_error_msg (err));
      nrm_error_release (&err);
      return r;
    }
  nrm_prepared_done (&out);
  return 0;
}

static void
test_blocks (void **state)
{
  (void) state;
  struct fixture f;
  struct nrm_health_report r = { 0 };
  make_root ();
  for (unsigned b = 0; b < 8; b++)
    block (b, b / 4, "online\n");
  start (&f, NULL);
  uint64_t n0 = capacity (&f, "numa0"), n1 = capacity (&f, "numa1");
  assert_true (n0 > 2 * BLOCK);
  health (&f, &r);
  expect (&r, "numa0", NULL, 0, NULL);

  /* Two blocks of node 0 go offline: its capacity shrinks by them. */
  block (1, 0, "offline\n");
  block (2, 0, "going-offline\n");
  assert_int_equal (capacity (&f, "numa0"), n0 - 2 * BLOCK);
  assert_int_equal (capacity (&f, "numa1"), n1);
  /* Prepare checks against the smaller capacity; a claim holding more
   * than what is left keeps it. */
  assert_int_equal (prepare (&f, "a", "numa0", n0 - 3 * BLOCK), 0);
  assert_int_equal (prepare (&f, "b", "numa0", 2 * BLOCK), 28);
  assert_int_equal (prepare (&f, "b", "numa0", BLOCK), 0);
  block (3, 0, "offline\n");
  assert_int_equal (capacity (&f, "numa0"), n0 - 3 * BLOCK);
  health (&f, &r);
  char says[160];
  snprintf (says, sizeof (says), "claims hold %llu bytes, more than the %llu published: they keep them",
            (unsigned long long) (n0 - 2 * BLOCK), (unsigned long long) (n0 - 3 * BLOCK));
  expect (&r, "numa0", "memory-offline", NRM_TAINT_NONE, says);
  assert_int_equal (prepare (&f, "d", "numa0", 1 << 20), 28);
  block (3, 0, "online\n");
  nrm_memory_driver.unprepare (f.d, "a", NULL);
  nrm_memory_driver.unprepare (f.d, "b", NULL);
  health (&f, &r);
  expect (&r, "numa0", "memory-offline", NRM_TAINT_NONE, "256Mi of memory blocks offline, 256Mi less online");
  expect (&r, "numa1", NULL, 0, NULL);

  /* Online again; a block added to node 1: it grows. */
  block (1, 0, "online\n");
  block (2, 0, "online\n");
  block (8, 1, "online\n");
  assert_int_equal (capacity (&f, "numa0"), n0);
  assert_int_equal (capacity (&f, "numa1"), n1 + BLOCK);
  /* The added block can be claimed. */
  assert_int_equal (prepare (&f, "c", "numa1", n1 + BLOCK), 0);
  health (&f, &r);
  expect (&r, "numa0", NULL, 0, NULL);
  expect (&r, "numa1", NULL, 0, NULL);

  /* A block whose state is garbage: an error naming it; the capacity
   * keeps the last good reading. */
  block (8, 1, "sideways\n");
  nrm_error_t err = NULL;
  nrm_health_report_done (&r);
  memset (&r, 0, sizeof (r));
  assert_int_equal (nrm_memory_driver.health (f.d, &r, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "memory8/state"));
  assert_non_null (strstr (nrm_error_msg (err), "sideways"));
  nrm_error_release (&err);
  assert_int_equal (capacity (&f, "numa1"), n1 + BLOCK);

  nrm_health_report_done (&r);
  stop (&f);
  remove_tree ();
}

/* More memory offline than the node had at the start by the topology's
 * count: the device leaves the pool instead of wrapping around. */
static void
test_node_offline (void **state)
{
  (void) state;
  struct fixture f;
  struct nrm_health_report r = { 0 };
  make_root ();
  for (unsigned b = 0; b < 4; b++)
    block (b, b / 3, "online\n");
  fake_put (root, "sys/devices/system/memory/block_size_bytes", "200000000\n"); /* 8Gi */
  start (&f, NULL);
  assert_true (capacity (&f, "numa0") > 0);
  for (unsigned b = 0; b < 3; b++)
    {
      char rel[64];
      snprintf (rel, sizeof (rel), "sys/devices/system/memory/memory%u/state", b);
      fake_put (root, rel, "offline\n");
    }
  assert_int_equal (capacity (&f, "numa0"), 0);
  assert_true (capacity (&f, "numa1") > 0);
  health (&f, &r);
  expect (&r, "numa0", "memory-offline", NRM_TAINT_NONE, "24Gi of memory blocks offline, 24Gi less online");
  nrm_health_report_done (&r);
  stop (&f);
  remove_tree ();
}

/* /proc/zoneinfo as the kernel writes it (mm/vmstat.c), shortened. */
static void
zoneinfo (const char *normal0_free)
{
  cleanup_free char *text = xasprintf ("Node 0, zone      DMA\n"
                                       "  per-node stats\n"
                                       "      nr_inactive_anon 4242\n"
                                       "  pages free     3840\n"
                                       "        boost    0\n"
                                       "        min      8\n"
                                       "        low      11\n"
                                       "        high     14\n"
                                       "        managed  3840\n"
                                       "        protection: (0, 1800, 15000, 15000, 15000)\n"
                                       "Node 0, zone   Normal\n"
                                       "  pages free     %s\n"
                                       "        boost    0\n"
                                       "        min      100\n"
                                       "        low      150\n"
                                       "        high     200\n"
                                       "  pagesets\n"
                                       "    cpu: 0\n"
                                       "              count: 12\n"
                                       "Node 0, zone  Movable\n"
                                       "  pages free     0\n"
                                       "        min      0\n"
                                       "        low      0\n"
                                       "Node 1, zone   Normal\n"
                                       "  pages free     90\n"
                                       "        min      100\n"
                                       "        low      150\n",
                                       normal0_free);
  fake_put (root, "proc/zoneinfo", text);
}

static void
test_pressure (void **state)
{
  (void) state;
  struct fixture f;
  struct nrm_health_report r = { 0 };
  make_root ();
  zoneinfo ("5000");
  start (&f, NULL);
  health (&f, &r);
  expect (&r, "numa0", NULL, 0, NULL);
  expect (&r, "numa1", "memory-pressure", NRM_TAINT_NONE,
          "zone Normal: 90 pages free, below the low watermark 150 and min: allocations reclaim");

  /* Node 0's Normal zone under its low watermark: kswapd's work. */
  zoneinfo ("120");
  health (&f, &r);
  expect (&r, "numa0", "memory-pressure", NRM_TAINT_NONE,
          "zone Normal: 120 pages free, below the low watermark 150: the kernel reclaims");
  zoneinfo ("150");
  health (&f, &r);
  expect (&r, "numa0", NULL, 0, NULL);

  /* A line of the node's zone without its number: named. */
  zoneinfo ("lots");
  nrm_error_t err = NULL;
  nrm_health_report_done (&r);
  memset (&r, 0, sizeof (r));
  assert_int_equal (nrm_memory_driver.health (f.d, &r, &err), -1);
  if (strstr (nrm_error_msg (err), "proc/zoneinfo` line 12: `lots") == NULL)
    fail_msg ("%s", nrm_error_msg (err));
  nrm_error_release (&err);
  const char *bad[] = { "12x", "-5", "99999999999999999999999" };
  for (size_t i = 0; i < sizeof (bad) / sizeof (bad[0]); i++)
    {
      zoneinfo (bad[i]);
      assert_int_equal (nrm_memory_driver.health (f.d, &r, &err), -1);
      assert_non_null (strstr (nrm_error_msg (err), "is not a number"));
      nrm_error_release (&err);
    }

  nrm_health_report_done (&r);
  stop (&f);
  remove_tree ();
}

static void
test_no_edac (void **state)
{
  (void) state;
  struct fixture f;
  struct nrm_health_report r = { 0 };
  make_root ();
  start (&f, NULL);
  uint64_t n0 = capacity (&f, "numa0");
  health (&f, &r);
  assert_int_equal (r.n, 2);
  expect (&r, "numa0", NULL, 0, NULL);
  expect (&r, "numa1", NULL, 0, NULL);
  assert_null (find (&r, "numa0")->message);
  assert_int_equal (capacity (&f, "numa0"), n0);
  nrm_health_report_done (&r);
  stop (&f);

  /* A recorded machine without a fake tree reads nothing, polls nothing. */
  struct nrm_topology *t = load_2n ();
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  struct nrm_driver_host h = { .topo = t, .node = &o, .name = "memory.nrm.io" };
  void *d = NULL;
  nrm_error_t err = NULL;
  assert_int_equal (nrm_memory_driver.new(&h, &d, &err), 0);
  assert_int_equal (nrm_memory_driver.health_fd (d), -1);
  nrm_memory_driver.free (d);
  nrm_topology_free (t);
  remove_tree ();
}

static void
test_bad_input (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  struct nrm_edac_mc *mcs = NULL;
  size_t n = 0;
  make_root ();
  mc (0, NULL, "12abc\n", "0\n");
  assert_int_equal (nrm_edac_read (fake_root (root), &mcs, &n, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "mc0/ce_count"));
  assert_non_null (strstr (nrm_error_msg (err), "not a number"));
  nrm_error_release (&err);
  mc (0, NULL, "-1\n", "0\n");
  assert_int_equal (nrm_edac_read (fake_root (root), &mcs, &n, &err), -1);
  nrm_error_release (&err);
  mc (0, "Intel_10nm Socket#3 IMC#1\n", "7\n", "0\n");
  mc (10, "Ivy Bridge SrcID#1_Ha#0\n", "0\n", "2\n");
  mc (2, "F19h\n", "0\n", "0\n");
  assert_int_equal (nrm_edac_read (fake_root (root), &mcs, &n, &err), 0);
  assert_int_equal (n, 3);
  assert_string_equal (mcs[0].name, "mc0");
  assert_int_equal (mcs[0].socket, 3);
  assert_int_equal (mcs[0].ce, 7);
  assert_string_equal (mcs[1].name, "mc2");
  assert_int_equal (mcs[1].map, NRM_EDAC_SOCKET); /* amd64_edac: AMD node 2 is socket 2 */
  assert_int_equal (mcs[1].socket, 2);
  assert_string_equal (mcs[2].name, "mc10");
  assert_int_equal (mcs[2].socket, 1);
  assert_int_equal (mcs[2].ue, 2);
  free (mcs);

  /* Settings: each bad one names its key; nothing starts. */
  struct nrm_topology *t = load_2n ();
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  const char *bad[] = { "{\"health\": {\"correctedErrorThreshold\": -1}}", "{\"health\": {\"pollSeconds\": 0}}",
                        "{\"health\": {\"pollSecond\": 5}}", "{\"health\": 5}", "{\"healthy\": {}}" };
  const char *says[] = { "memory.health.correctedErrorThreshold", "memory.health.pollSeconds",
                         "unknown key `memory.health.pollSecond`", "`memory.health` must be an object",
                         "unknown key `memory.healthy`" };
  for (size_t i = 0; i < sizeof (bad) / sizeof (bad[0]); i++)
    {
      cleanup_json json_t *s = json_loads (bad[i], 0, NULL);
      struct nrm_driver_host h
          = { .topo = t, .node = &o, .name = "memory.nrm.io", .fsroot = fake_root (root), .settings = s };
      void *d = NULL;
      assert_int_equal (nrm_memory_driver.new(&h, &d, &err), -1);
      if (strstr (nrm_error_msg (err), says[i]) == NULL)
        fail_msg ("`%s`: `%s` lacks `%s`", bad[i], nrm_error_msg (err), says[i]);
      nrm_error_release (&err);
    }
  nrm_topology_free (t);
  remove_tree ();
}

/* Every numaN of the report: NoExecute for memory-uncorrected where
 * `bad` has N (a bit each), no taint elsewhere. */
static void
expect_uncorrected_on (const struct nrm_health_report *r, uint64_t bad, const char *says)
{
  assert_true (r->n > 0);
  for (size_t i = 0; i < r->n; i++)
    {
      unsigned node;
      if (sscanf (r->devices[i].device, "numa%u", &node) != 1 || strchr (r->devices[i].device, '-'))
        continue;
      if (bad & (1ull << node))
        expect (r, r->devices[i].device, "memory-uncorrected", NRM_TAINT_NO_EXECUTE, says);
      else
        expect (r, r->devices[i].device, NULL, 0, NULL);
    }
}

/* The health of every NUMA node of the machine recorded in topo, by
 * the health part alone: recorded AMD machines carry no memory sizes, so
 * the driver would publish no device to ask about. */
struct bare
{
  struct nrm_topology *t;
  struct nrm_memory_health *mh;
};

static void
bare_start (struct bare *b, const char *topo)
{
  nrm_error_t err = NULL;
  static struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  b->t = load (topo);
  struct nrm_driver_host h = { .topo = b->t, .node = &o, .name = "memory.nrm.io", .fsroot = fake_root (root) };
  if (nrm_memory_health_new (&h, &b->mh, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
}

static void
bare_health (struct bare *b, struct nrm_health_report *r)
{
  nrm_error_t err = NULL;
  cleanup_json json_t *names = json_array ();
  for (size_t i = 0; i < b->t->n_numa; i++)
    json_array_append_new (names, json_sprintf ("numa%u", b->t->numa[i].os_index));
  nrm_health_report_done (r);
  memset (r, 0, sizeof (*r));
  if (nrm_memory_health_report (b->mh, names, r, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_int_equal (r->n, b->t->n_numa);
}

static void
bare_stop (struct bare *b)
{
  nrm_memory_health_free (b->mh);
  nrm_topology_free (b->t);
}

/* amd64_edac, from Rome on: one controller per socket, mcN is socket N
 * (amd64_edac.c: probe_one_instance(nid), edac_mc_alloc(pvt->mc_node_id)). */
static void
test_amd_sockets (void **state)
{
  (void) state;
  struct bare f;
  struct nrm_health_report r = { 0 };
  make_root ();
  mc (0, "F19h_M10h\n", "0\n", "0\n");
  mc (1, "F19h_M10h\n", "0\n", "0\n");
  bare_start (&f, "AMD-19h-Zen4-2xEpyc-9654.xml");
  bare_health (&f, &r);
  expect_uncorrected_on (&r, 0, NULL);
  mc (1, NULL, "0\n", "1\n");
  bare_health (&f, &r);
  expect_uncorrected_on (&r, 1u << 1, "mc1: 1 uncorrected memory errors");
  mc (0, NULL, "0\n", "2\n");
  mc (1, NULL, "0\n", "0\n");
  bare_health (&f, &r);
  expect_uncorrected_on (&r, 1u << 0, "mc0: 2 uncorrected memory errors");
  nrm_health_report_done (&r);
  bare_stop (&f);
  remove_tree ();

  /* Four NUMA nodes per socket (NPS4): socket 1's controller serves
   * nodes 4 to 7. */
  make_root ();
  mc (0, "F19h_M10h\n", "0\n", "0\n");
  mc (1, "F19h_M10h\n", "0\n", "1\n");
  bare_start (&f, "AMD-17h-Zen-2xEpyc-7451.xml");
  bare_health (&f, &r);
  expect_uncorrected_on (&r, 0xf0, "mc1: 1 uncorrected memory errors");
  nrm_health_report_done (&r);
  bare_stop (&f);
  remove_tree ();
}

/* amd64_edac on Naples and Hygon Dhyana: one controller per die, mcN is
 * AMD node N, a NUMA node each; dies whose memory is interleaved (fewer
 * NUMA nodes than dies) cannot be placed. */
static void
test_amd_dies (void **state)
{
  (void) state;
  struct bare f;
  struct nrm_health_report r = { 0 };
  make_root ();
  for (unsigned i = 0; i < 8; i++)
    mc (i, "F17h\n", "0\n", i == 5 ? "1\n" : "0\n");
  bare_start (&f, "AMD-17h-Zen-2xEpyc-7451.xml");
  bare_health (&f, &r);
  expect_uncorrected_on (&r, 1u << 5, "mc5: 1 uncorrected memory errors");
  nrm_health_report_done (&r);
  bare_stop (&f);
  remove_tree ();

  make_root ();
  for (unsigned i = 0; i < 4; i++)
    mc (i, "F18h\n", "0\n", i == 2 ? "3\n" : "0\n");
  bare_start (&f, "Hygon-Dhyana-32cores.xml");
  bare_health (&f, &r);
  expect_uncorrected_on (&r, 1u << 2, "mc2: 3 uncorrected memory errors");
  nrm_health_report_done (&r);
  bare_stop (&f);
  remove_tree ();

  /* Eight dies, two NUMA nodes: interleaved, and mc1 is die 1 of socket
   * 0, not node 1: a note on every node. */
  make_root ();
  for (unsigned i = 0; i < 8; i++)
    mc (i, "F17h\n", "0\n", i == 1 ? "1\n" : "0\n");
  bare_start (&f, "AMD-19h-Zen4-2xEpyc-9654.xml");
  bare_health (&f, &r);
  expect (&r, "numa0", "memory-errors-unmapped", NRM_TAINT_NONE, "(NUMA node not known): 0 corrected, 1 uncorrected");
  expect (&r, "numa1", "memory-errors-unmapped", NRM_TAINT_NONE, "(NUMA node not known): 0 corrected, 1 uncorrected");
  nrm_health_report_done (&r);
  bare_stop (&f);
  remove_tree ();
}

/* thunderx_edac: mcN with N = LMC function + NUMA node * 8
 * (thunderx_edac.c, pci_dev_to_mc_idx()); single-node Arm SoCs
 * (bluefield_edac, xgene_edac, dmc520_edac) have one node to serve. */
static void
test_arm (void **state)
{
  (void) state;
  struct bare f;
  struct nrm_health_report r = { 0 };
  make_root ();
  const unsigned lmcs[] = { 0, 1, 2, 3, 8, 9, 10, 11, 16, 24 };
  for (size_t i = 0; i < sizeof (lmcs) / sizeof (lmcs[0]); i++)
    mc (lmcs[i], "thunderx-lmc\n", "0\n", lmcs[i] == 9 ? "1\n" : "0\n");
  bare_start (&f, "128arm-2pa2n8cluster4co.xml");
  bare_health (&f, &r);
  expect_uncorrected_on (&r, 1u << 1, "mc8,mc9,mc10,mc11: 1 uncorrected memory errors");
  mc (9, NULL, "0\n", "0\n");
  mc (24, NULL, "0\n", "1\n");
  bare_health (&f, &r);
  expect_uncorrected_on (&r, 1u << 3, "mc24: 1 uncorrected memory errors");
  nrm_health_report_done (&r);
  bare_stop (&f);
  remove_tree ();

  make_root ();
  mc (0, "BlueField_Memory_Controller\n", "0\n", "1\n");
  bare_start (&f, "2arm-2c.xml");
  bare_health (&f, &r);
  expect_uncorrected_on (&r, 1u << 0, "mc0: 1 uncorrected memory errors");
  nrm_health_report_done (&r);
  bare_stop (&f);
  remove_tree ();
}

#define TRACE "sys/kernel/tracing"
#define PIPE TRACE "/instances/nrm/trace_pipe"

/* A tracefs as the kernel shows it to nrm: the event at the top level and
 * in the instance (which exists already: the tree cannot run mkdir's
 * kernel side), trace_pipe a file that lines are added to. */
static void
fake_tracefs (void)
{
  fake_put (root, TRACE "/events/ras/mc_event/enable", "0\n");
  fake_put (root, TRACE "/instances/nrm/events/ras/mc_event/enable", "0\n");
  fake_put (root, TRACE "/instances/nrm/buffer_percent", "50\n");
  fake_put (root, PIPE, "");
}

static void
trace_line (const char *line)
{
  cleanup_free char *path = xasprintf ("%s/%s", root, PIPE);
  FILE *f = fopen (path, "a");
  assert_non_null (f);
  fputs (line, f);
  fclose (f);
}

/* As ghes_edac reports them (ghes_edac.c, ghes_edac_report_mem_error())
 * and trace_pipe prints them (ras_event.h, TRACE_EVENT(mc_event)). Blocks
 * of 128 MiB: 0-3 on node 0, 4-7 on node 1; the addresses lie in the
 * blocks either side of the nodes' border (3 and 4). */
#define UE_NODE1                                                                                                       \
  "          <idle>-0       [003] d.h1.  7713.146563: mc_event: 1 Uncorrected error: Multi-bit ECC on CPU1_DIMM_B1 "   \
  "(mc:0 location:5:-1:-1 address:0x20001040 grain:64 syndrome:0x00000000 APEI location: node:1 card:1 module:0 "      \
  "rank:0 bank:3 row:9842 col:472 DIMM location:CPU1 DIMM_B1 status(0x0000000000000400): Storage error in DRAM "       \
  "memory)\n"
#define CE_NODE0                                                                                                       \
  "     kworker/0:2-311     [000] .....  7720.008812: mc_event: 1 Corrected error: Single-bit ECC on CPU0_DIMM_A1 "    \
  "(mc:0 location:0:-1:-1 address:0x1ffff080 grain:64 syndrome:0x00000000 APEI location: node:0 card:0 module:0 "      \
  "rank:1 bank:0 row:512 col:88 DIMM location:CPU0 DIMM_A1 status(0x0000000000000400): Storage error in DRAM "         \
  "memory)\n"
#define UE_NOWHERE                                                                                                     \
  "          <idle>-0       [001] d.h1.  7731.400127: mc_event: 1 Uncorrected error: Multi-bit ECC on unknown memory " \
  "(mc:0 location:-1:-1:-1 address:0x00000000 grain:1 syndrome:0x00000000 APEI location: node:0 "                      \
  "status(0x0000000000000400): Storage error in DRAM memory)\n"

/* ghes_edac: one controller for the machine; each error placed by the
 * memory block of its address. */
static void
test_firmware_first (void **state)
{
  (void) state;
  struct fixture f;
  struct nrm_health_report r = { 0 };
  make_root ();
  for (unsigned b = 0; b < 8; b++)
    block (b, b / 4, "online\n");
  mc (0, "ghes_edac\n", "0\n", "0\n");
  fake_tracefs ();
  cleanup_free char *state_dir = xasprintf ("%s/var/lib/nrm", root);
  fake_put (root, "var/lib/nrm/.keep", "");
  start_on (&f, TOPO_2N, NULL, state_dir);
  /* Only the process that watches health opens the trace. */
  cleanup_free char *before = fake_get (root, TRACE "/instances/nrm/events/ras/mc_event/enable");
  assert_string_equal (before, "0");
  assert_true (nrm_memory_driver.health_fd (f.d) >= 0);
  cleanup_free char *enable = fake_get (root, TRACE "/instances/nrm/events/ras/mc_event/enable");
  cleanup_free char *percent = fake_get (root, TRACE "/instances/nrm/buffer_percent");
  assert_string_equal (enable, "1");
  assert_string_equal (percent, "0");
  health (&f, &r);
  expect_uncorrected_on (&r, 0, NULL);

  /* An uncorrected error at an address of node 1: node 1 only. */
  trace_line (UE_NODE1);
  mc (0, NULL, "0\n", "1\n");
  nrm_memory_driver.health_event (f.d);
  health (&f, &r);
  expect_uncorrected_on (&r, 1u << 1, "mc0 (by error address): 1 uncorrected memory errors");

  /* A corrected one on node 0: a note there. */
  trace_line (CE_NODE0);
  mc (0, NULL, "1\n", "1\n");
  health (&f, &r);
  expect (&r, "numa0", "memory-corrected", NRM_TAINT_NONE, "mc0 (by error address): 1 corrected memory errors");
  expect (&r, "numa1", "memory-uncorrected", NRM_TAINT_NO_EXECUTE, NULL);
  assert_null (strstr (find (&r, "numa1")->message, "corrected memory errors (threshold"));

  /* Restarted: the tallies come back from the state folder (the kernel's
   * trace_pipe gives each line once: the file is emptied). */
  nrm_memory_driver.free (f.d);
  nrm_topology_free (f.t);
  fake_put (root, PIPE, "");
  start_on (&f, TOPO_2N, NULL, state_dir);
  assert_true (nrm_memory_driver.health_fd (f.d) >= 0);
  health (&f, &r);
  expect (&r, "numa1", "memory-uncorrected", NRM_TAINT_NO_EXECUTE, "mc0 (by error address): 1 uncorrected");
  expect (&r, "numa0", "memory-corrected", NRM_TAINT_NONE, NULL);

  /* nrm slices and status beside the plugin: they show its tallies, read
   * no line and write nothing. */
  {
    struct nrm_publish_options o;
    nrm_publish_options_init (&o);
    struct nrm_driver_host h
        = { .topo = f.t, .node = &o, .name = "memory.nrm.io", .fsroot = fake_root (root), .state_dir = state_dir };
    struct nrm_memory_health *viewer = NULL;
    nrm_error_t err = NULL;
    cleanup_free char *kept = fake_get (root, "var/lib/nrm/memory.nrm.io.mc-events.json");
    assert_non_null (kept);
    assert_int_equal (nrm_memory_health_new (&h, &viewer, &err), 0);
    trace_line (CE_NODE0);
    cleanup_json json_t *names = json_pack ("[s, s]", "numa0", "numa1");
    struct nrm_health_report hr = { 0 };
    assert_int_equal (nrm_memory_health_report (viewer, names, &hr, &err), 0);
    expect (&hr, "numa1", "memory-uncorrected", NRM_TAINT_NO_EXECUTE, "mc0 (by error address): 1 uncorrected");
    expect (&hr, "numa0", "memory-corrected", NRM_TAINT_NONE, "mc0 (by error address): 1 corrected");
    nrm_health_report_done (&hr);
    nrm_memory_health_free (viewer);
    cleanup_free char *after = fake_get (root, "var/lib/nrm/memory.nrm.io.mc-events.json");
    assert_string_equal (after, kept);
    fake_put (root, PIPE, "");
  }

  /* One without an address, and events the buffer dropped: what the
   * lines do not place is a note on every node. */
  trace_line (UE_NOWHERE);
  trace_line ("CPU:2 [LOST 1 EVENTS]\n");
  mc (0, NULL, "1\n", "3\n");
  health (&f, &r);
  expect (&r, "numa1", "memory-uncorrected", NRM_TAINT_NO_EXECUTE,
          "mc0 (NUMA node not known): 0 corrected, 2 uncorrected");
  expect (&r, "numa0", "memory-corrected", NRM_TAINT_NONE, "mc0 (NUMA node not known): 0 corrected, 2 uncorrected");

  /* reset_counters: the tallies go with the counters. */
  mc (0, NULL, "0\n", "0\n");
  health (&f, &r);
  expect_uncorrected_on (&r, 0, NULL);
  assert_null (find (&r, "numa0")->message);
  trace_line (UE_NODE1);
  mc (0, NULL, "0\n", "1\n");
  health (&f, &r);
  expect_uncorrected_on (&r, 1u << 1, "mc0 (by error address): 1 uncorrected");

  nrm_health_report_done (&r);
  stop (&f);
  remove_tree ();

  /* No tracefs: the old picture, a note on every node. */
  make_root ();
  mc (0, "ghes_edac\n", "0\n", "1\n");
  start (&f, NULL);
  health (&f, &r);
  expect (&r, "numa0", "memory-errors-unmapped", NRM_TAINT_NONE,
          "mc0 (NUMA node not known): 0 corrected, 1 uncorrected");
  expect (&r, "numa1", "memory-errors-unmapped", NRM_TAINT_NONE, NULL);
  nrm_health_report_done (&r);
  stop (&f);
  remove_tree ();
}

/* trace_pipe as a pipe, as the kernel's is to poll: health_fd wakes when
 * a line waits, long before the timer (5 s), and a line read in two parts
 * counts once. */
static void
test_trace_wakes (void **state)
{
  (void) state;
  struct fixture f;
  struct nrm_health_report r = { 0 };
  make_root ();
  for (unsigned b = 0; b < 8; b++)
    block (b, b / 4, "online\n");
  mc (0, "ghes_edac\n", "0\n", "1\n");
  fake_tracefs ();
  cleanup_free char *pipe = xasprintf ("%s/%s", root, PIPE);
  assert_int_equal (unlink (pipe), 0);
  assert_int_equal (mkfifo (pipe, 0600), 0);
  start (&f, NULL);
  int fd = nrm_memory_driver.health_fd (f.d);
  assert_true (fd >= 0);
  int w = open (pipe, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  assert_true (w >= 0);
  struct pollfd p = { .fd = fd, .events = POLLIN };
  assert_int_equal (poll (&p, 1, 200), 0);
  size_t half = strlen (UE_NODE1) / 2;
  assert_int_equal (write (w, UE_NODE1, half), (ssize_t) half);
  assert_int_equal (poll (&p, 1, 2000), 1);
  nrm_memory_driver.health_event (f.d);
  assert_int_equal (poll (&p, 1, 0), 0);
  assert_int_equal (write (w, UE_NODE1 + half, strlen (UE_NODE1) - half), (ssize_t) (strlen (UE_NODE1) - half));
  assert_int_equal (poll (&p, 1, 2000), 1);
  nrm_memory_driver.health_event (f.d);
  health (&f, &r);
  expect_uncorrected_on (&r, 1u << 1, "mc0 (by error address): 1 uncorrected memory errors");
  close (w);
  nrm_health_report_done (&r);
  stop (&f);
  remove_tree ();
}

/* The parser of trace_pipe lines, on the kernel's format and on lines
 * that only look like it. */
static void
test_mc_event_parse (void **state)
{
  (void) state;
  struct nrm_mc_event ev;
  uint64_t lost = 0;
  nrm_error_t err = NULL;
  char line[1024];
  snprintf (line, sizeof (line), "%.*s", (int) strcspn (UE_NODE1, "\n"), UE_NODE1);
  assert_int_equal (nrm_mc_event_parse (line, &ev, &lost, &err), 1);
  assert_int_equal (ev.count, 1);
  assert_false (ev.corrected);
  assert_string_equal (ev.type, "Uncorrected");
  assert_int_equal (ev.mc, 0);
  assert_int_equal (ev.address, 0x20001040);
  /* amd64_edac's own: several errors, a 64-bit address, no detail. */
  assert_int_equal (nrm_mc_event_parse ("   kworker/u513:3-1042  [012] ..... 88.1: mc_event: 2 Deferred errors: on "
                                        "N0 (mc:1 location:0:3:-1 address:0x1fffff0000c0 grain:64 syndrome:0x0000c0de)",
                                        &ev, &lost, &err),
                    1);
  assert_int_equal (ev.count, 2);
  assert_false (ev.corrected);
  assert_int_equal (ev.mc, 1);
  assert_int_equal (ev.address, 0x1fffff0000c0ull);
  /* A label that holds "(mc:" itself. */
  assert_int_equal (nrm_mc_event_parse ("x-1 [0] ..... 1.0: mc_event: 1 Corrected error: on slot (mc:9 (mc:2 "
                                        "location:1:2:3 address:0x1000 grain:1 syndrome:0x0)",
                                        &ev, &lost, &err),
                    1);
  assert_true (ev.corrected);
  assert_int_equal (ev.mc, 2);
  /* A task named like the mark, then the real event. */
  assert_int_equal (nrm_mc_event_parse (": mc_event: -7 [001] ..... 5.5: mc_event: 1 Fatal error: on m (mc:3 "
                                        "location:-1:-1:-1 address:0x2000 grain:1 syndrome:0x0)",
                                        &ev, &lost, &err),
                    1);
  assert_int_equal (ev.mc, 3);
  /* Lost events add up; other lines are not events. */
  assert_int_equal (nrm_mc_event_parse ("CPU:3 [LOST 12 EVENTS]", &ev, &lost, &err), 0);
  assert_int_equal (nrm_mc_event_parse ("CPU:0 [LOST 3 EVENTS]", &ev, &lost, &err), 0);
  assert_int_equal (lost, 15);
  assert_int_equal (nrm_mc_event_parse ("# tracer: nop", &ev, &lost, &err), 0);
  assert_int_equal (nrm_mc_event_parse ("", &ev, &lost, &err), 0);
  /* Broken mc_event lines are named. */
  const char *bad[] = {
    "a-1 [0] .... 1.0: mc_event: 1 Uncorrected error: on m (mc:256 location:0:0:0 address:0x1 grain:1 syndrome:0x0)",
    "a-1 [0] .... 1.0: mc_event: 1 Uncorrected error: on m (mc:0 location:0:0:0 address:0x1 grain:1 syndrome:0x0",
    "a-1 [0] .... 1.0: mc_event: 1 Uncorrected error: on m (mc:0 location:0:0 address:0x1 grain:1 syndrome:0x0)",
    "a-1 [0] .... 1.0: mc_event: 70000 Uncorrected errors: on m (mc:0 location:0:0:0 address:0x1 grain:1 syndrome:0x0)",
    "a-1 [0] .... 1.0: mc_event: 1 Uncorrected error: on m (mc:0 location:0:0:0 address:0x1ffffffffffffffff grain:1 "
    "syndrome:0x0)",
    "a-1 [0] .... 1.0: mc_event: 1 Uncorrected error: on m (mc:-1 location:0:0:0 address:0x1 grain:1 syndrome:0x0)",
    "a-1 [0] .... 1.0: mc_event: one Uncorrected error: on m (mc:0 location:0:0:0 address:0x1 grain:1 syndrome:0x0)",
    "a-1 [0] .... 1.0: mc_event: \x01\xff",
  };
  for (size_t i = 0; i < sizeof (bad) / sizeof (bad[0]); i++)
    {
      if (nrm_mc_event_parse (bad[i], &ev, &lost, &err) != -1)
        fail_msg ("took `%s`", bad[i]);
      assert_non_null (strstr (nrm_error_msg (err), "is not in the kernel's format"));
      nrm_error_release (&err);
    }
}

/* Addresses to nodes through the memory blocks. */
static void
test_block_node (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  unsigned node = 99;
  make_root ();
  assert_int_equal (nrm_memory_block_node (fake_root (root), 0x1000, &node, &err), 1);
  for (unsigned b = 0; b < 8; b++)
    block (b, b / 4, "online\n");
  block (12, 0, "online\n");
  assert_int_equal (nrm_memory_block_node (fake_root (root), 0x0, &node, &err), 0);
  assert_int_equal (node, 0);
  assert_int_equal (nrm_memory_block_node (fake_root (root), 0x1fffffff, &node, &err), 0);
  assert_int_equal (node, 0);
  assert_int_equal (nrm_memory_block_node (fake_root (root), 0x20000000, &node, &err), 0);
  assert_int_equal (node, 1);
  assert_int_equal (nrm_memory_block_node (fake_root (root), 0x3fffffff, &node, &err), 0);
  assert_int_equal (node, 1);
  assert_int_equal (nrm_memory_block_node (fake_root (root), 0x60000010, &node, &err), 0);
  assert_int_equal (node, 0);
  /* A hole between blocks 7 and 12. */
  assert_int_equal (nrm_memory_block_node (fake_root (root), 0x40000000, &node, &err), 1);
  fake_put (root, "sys/devices/system/memory/block_size_bytes", "zz\n");
  assert_int_equal (nrm_memory_block_node (fake_root (root), 0x40000000, &node, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "block_size_bytes"));
  nrm_error_release (&err);
  remove_tree ();
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_edac_counters),  cmocka_unit_test (test_blocks),      cmocka_unit_test (test_node_offline),
    cmocka_unit_test (test_pressure),       cmocka_unit_test (test_no_edac),     cmocka_unit_test (test_bad_input),
    cmocka_unit_test (test_amd_sockets),    cmocka_unit_test (test_amd_dies),    cmocka_unit_test (test_arm),
    cmocka_unit_test (test_firmware_first), cmocka_unit_test (test_trace_wakes), cmocka_unit_test (test_mc_event_parse),
    cmocka_unit_test (test_block_node),
  };
  return cmocka_run_group_tests_name ("memhealth", tests, NULL, NULL);
}
