/* SPDX-License-Identifier: Apache-2.0 */
/* CPUs near the PCI functions of the same claim: the CPU driver takes
 * them among the CPUs of its device when the function's locality is
 * narrower than the device (a die, an L3 group, a cluster, or a sysfs
 * local_cpulist), keeps its other rules, and says which functions in the
 * metadata; without the function, or with one it cannot resolve, the pick
 * is the one it always was. */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/driver.h"
#include "driver/pci/pci.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"
#include "tests/unit/fakefs.h"
#include "topology/topology.h"

extern const struct nrm_driver_ops nrm_cpu_driver;

static char *
topo_path (const char *name)
{
  const char *dir = getenv ("NRM_TOPOLOGIES");
  return xasprintf ("%s/%s", dir ? dir : "tests/topologies", name);
}

/* A recorded machine with one GPU (0000:41:00.0) that hwloc finds below
 * the object whose opening tag starts with `anchor`: a locality narrower
 * than the NUMA node, which no recording of the corpus has (their PCI
 * trees hang below a package or a NUMA-node group). */
static struct nrm_topology *
with_gpu_below (const char *file, const char *anchor)
{
  cleanup_free char *path = topo_path (file);
  cleanup_free char *xml = NULL;
  nrm_error_t err = NULL;
  if (nrm_read_file (path, 64 << 20, &xml, NULL, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  char *at = strstr (xml, anchor);
  if (at == NULL)
    fail_msg ("%s: no `%s`", file, anchor);
  char *eol = strchr (at, '\n');
  assert_non_null (eol);
  /* After the object's own info lines: hwloc reads those before children. */
  while (strncmp (eol + 1 + strspn (eol + 1, " "), "<info ", 6) == 0)
    eol = strchr (eol + 1, '\n');
  static const char io[] = "<object type=\"Bridge\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[40-41]\">\n"
                           "<object type=\"PCIDev\" pci_busid=\"0000:41:00.0\" "
                           "pci_type=\"0302 [10de:2330] [10de:16c1] a1\" pci_link_speed=\"0.000000\"/>\n"
                           "</object>\n";
  cleanup_free char *out = xasprintf ("%.*s%s%s", (int) (eol + 1 - xml), xml, io, eol + 1);
  char tmp[] = "/tmp/nrm-align-XXXXXX";
  int fd = mkstemp (tmp);
  assert_true (fd >= 0);
  assert_int_equal (write (fd, out, strlen (out)), (ssize_t) strlen (out));
  close (fd);
  struct nrm_topology *t = NULL;
  if (nrm_topology_load (tmp, &t, &err) < 0)
    fail_msg ("%s: %s", file, nrm_error_msg (err));
  unlink (tmp);
  return t;
}

static void *
cpu_driver (const struct nrm_topology *t, const char *fsroot, struct nrm_publish_options *o)
{
  nrm_publish_options_init (o);
  struct nrm_driver_host h = { .topo = t, .node = o, .name = "cpu.nrm.io", .fsroot = fake_root (fsroot) };
  void *d = NULL;
  nrm_error_t err = NULL;
  if (nrm_cpu_driver.new(&h, &d, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  return d;
}

/* Prepares a claim of `cpus` CPUs of numa<node> and the other drivers'
 * devices (driver, device pairs); the CPU list it got, and in *near the
 * metadata's nearDevices (NULL when absent). */
static char *
prepare (void *d, const char *uid, unsigned node, const char *cpus, const char *const *others, size_t n_others,
         char **near)
{
  struct nrm_alloc_result all[8];
  char dev[16];
  snprintf (dev, sizeof (dev), "numa%u", node);
  cleanup_json json_t *consumed = json_pack ("{s:s}", "cpus", cpus);
  size_t n = 0;
  /* The GPU first: the CPU driver reads every result, in any order. */
  for (size_t i = 0; i < n_others; i++)
    all[n++] = (struct nrm_alloc_result){
      .driver = others[2 * i], .request = "gpu", .pool = "node", .device = others[2 * i + 1]
    };
  all[n] = (struct nrm_alloc_result){
    .driver = "cpu.nrm.io", .request = "cpus", .pool = "node", .device = dev, .consumed = consumed
  };
  struct nrm_claim_view c = { .uid = uid,
                              .ns = "ns",
                              .name = "c",
                              .results = &all[n],
                              .n_results = 1,
                              .all = all,
                              .n_all = n + 1,
                              .config = NULL,
                              .metadata = true };
  struct nrm_prepared p = { 0 };
  nrm_error_t err = NULL;
  if (nrm_cpu_driver.prepare (d, &c, &p, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  char *got = xstrdup (json_string_value (json_object_get (p.state, "cpus")));
  const char *nd = json_string_value (
      json_object_get (json_object_get (json_object_get (p.metadata, dev), "nearDevices"), "string"));
  *near = nd ? xstrdup (nd) : NULL;
  nrm_prepared_done (&p);
  return got;
}

static void
test_bus_id_of_device (void **state)
{
  (void) state;
  char b[NRM_PCI_BUS_ID_LEN];
  assert_true (nrm_pci_bus_id_of_device ("gpu-0000-3b-00-0", b));
  assert_string_equal (b, "0000:3b:00.0");
  assert_true (nrm_pci_bus_id_of_device ("coproc-000a-01-1f-7", b));
  assert_string_equal (b, "000a:01:1f.7");
  const char *bad[] = { "numa0",
                        "gpu-0",
                        "gpu-0000-3b-00",
                        "-0000-3b-00-0",
                        "gpu-0000-3b-00-8",
                        "gpu-0000-3b-20-0",
                        "gpu-0000-3B-00-0",
                        "gpu-0000:3b:00.0",
                        "gpu0000-3b-00-0",
                        "l3-0",
                        "core12",
                        "" };
  for (size_t i = 0; i < sizeof (bad) / sizeof (bad[0]); i++)
    {
      assert_false (nrm_pci_bus_id_of_device (bad[i], b));
      assert_string_equal (b, "");
    }
}

/* hwloc's locality of every function of the corpus: the cpuset of its first
 * non-I/O ancestor. */
static void
test_recorded_locality (void **state)
{
  (void) state;
  static const char *const files[]
      = { "24em64t-2n6c2t-pci.xml", "32em64t-2n8c2t-pci-normalio.xml", "96em64t-4n4d3ca2co-pci.xml",
          "power8gpudistances.xml", "16intel64-manyVFs.xml",           "192em64t-24n8c2t.xml" };
  for (size_t f = 0; f < sizeof (files) / sizeof (files[0]); f++)
    {
      cleanup_free char *path = topo_path (files[f]);
      struct nrm_topology *t = NULL;
      nrm_error_t err = NULL;
      if (nrm_topology_load (path, &t, &err) < 0)
        fail_msg ("%s", nrm_error_msg (err));
      hwloc_topology_t h;
      hwloc_topology_init (&h);
      hwloc_topology_set_io_types_filter (h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
      hwloc_topology_set_flags (h, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
      assert_int_equal (hwloc_topology_set_xml (h, path), 0);
      assert_int_equal (hwloc_topology_load (h), 0);
      size_t k = 0;
      assert_true (t->n_pci > 0);
      for (hwloc_obj_t o = hwloc_get_next_pcidev (h, NULL); o; o = hwloc_get_next_pcidev (h, o), k++)
        {
          hwloc_obj_t a = hwloc_get_non_io_ancestor_obj (h, o);
          assert_true (k < t->n_pci);
          assert_true (hwloc_bitmap_isequal (t->pci[k].cpus, a->cpuset));
        }
      assert_int_equal (k, t->n_pci);
      hwloc_topology_destroy (h);
      nrm_topology_free (t);
    }
}

static const char *const gpu[] = { "pci.nrm.io", "gpu-0000-41-00-0" };

/* Recorded machines whose GPU hangs below a die, an L3 group or a cluster:
 * a claim with it and 2 CPUs of node 0 gets 2 CPUs there; without it, the
 * first core of the node as before. */
static void
test_recorded_below_node (void **state)
{
  (void) state;
  static const struct
  {
    const char *file, *anchor, *locality, *near_pick, *old_pick, *sixteen;
  } cases[] = {
    /* Zen 4: one NUMA node per socket, the GPU on the second CCD. */
    { "AMD-19h-Zen4-2xEpyc-9654.xml", "<object type=\"Die\" os_index=\"4\" ", "8-15,200-207", "8,200", "0,192",
      "8-15,200-207" },
    /* Zen 1: two CCX L3 groups in each node, the GPU below the second. */
    { "AMD-17h-Zen-2xEpyc-7451.xml", "<object type=\"L3Cache\" cpuset=\"0x00380000,0x00000038\"", "3-5,51-53", "3,51",
      "0,48", NULL },
    /* Kunpeng-class ARM: 4-core clusters in one L3 per node. */
    { "128arm-2pa2n8cluster4co.xml", "<object type=\"Group\" os_index=\"1170\" ", "8-11", "8-9", "0-1", NULL },
  };
  for (size_t i = 0; i < sizeof (cases) / sizeof (cases[0]); i++)
    {
      struct nrm_topology *t = with_gpu_below (cases[i].file, cases[i].anchor);
      assert_int_equal (t->n_pci, 1);
      cleanup_free char *loc = nrm_cpulist_format (t->pci[0].cpus);
      assert_string_equal (loc, cases[i].locality);
      struct nrm_publish_options o;
      void *d = cpu_driver (t, "/", &o);
      char *near = NULL;
      cleanup_free char *with = prepare (d, "with", 0, "2", gpu, 1, &near);
      if (strcmp (with, cases[i].near_pick) != 0)
        fail_msg ("%s: with the GPU got %s, want %s (near %s)", cases[i].file, with, cases[i].near_pick, loc);
      assert_non_null (near);
      assert_string_equal (near, "0000:41:00.0");
      free (near);
      nrm_cpu_driver.reset (d);
      cleanup_free char *without = prepare (d, "without", 0, "2", NULL, 0, &near);
      assert_string_equal (without, cases[i].old_pick);
      assert_null (near);
      if (cases[i].sixteen)
        {
          /* A whole CCD's worth lands on the GPU's CCD. */
          nrm_cpu_driver.reset (d);
          cleanup_free char *big = prepare (d, "big", 0, "16", gpu, 1, &near);
          assert_string_equal (big, cases[i].sixteen);
          free (near);
          nrm_cpu_driver.reset (d);
          cleanup_free char *first = prepare (d, "first", 0, "16", NULL, 0, &near);
          assert_string_equal (first, "0-7,192-199");
        }
      nrm_cpu_driver.free (d);
      nrm_topology_free (t);
    }
}

/* --- a fake sysfs under a recorded machine --------------------------------- */

static char root[64];

/* 24em64t-2n6c2t-pci: node 0 is the even CPUs, core k holds 2k and 2k+12.
 * Its GPU 0000:06:00.0 says in sysfs it is near cores 4 and 5 (8, 10, 20,
 * 22) only; hwloc recorded all of package 0. GPU 0000:11:00.0 is on node
 * 1 in both. */
static void
test_fake_local_cpulist (void **state)
{
  (void) state;
  cleanup_free char *path = topo_path ("24em64t-2n6c2t-pci.xml");
  struct nrm_topology *t = NULL;
  nrm_error_t err = NULL;
  if (nrm_topology_load (path, &t, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  snprintf (root, sizeof (root), "/tmp/nrm-align-XXXXXX");
  assert_non_null (mkdtemp (root));
  fake_put (root, "sys/bus/pci/devices/0000:06:00.0/class", "0x030200\n");
  fake_put (root, "sys/bus/pci/devices/0000:06:00.0/numa_node", "0\n");
  fake_put (root, "sys/bus/pci/devices/0000:06:00.0/local_cpulist", "8,10,20,22\n");
  fake_put (root, "sys/devices/system/cpu/online", "0-23\n");

  struct nrm_publish_options o;
  void *d = cpu_driver (t, root, &o);
  char *near = NULL;
  const char *const local[] = { "pci.nrm.io", "gpu-0000-06-00-0" };
  const char *const vendor[] = { "nvidia.nrm.io", "gpu-0000-06-00-0" };
  const char *const foreign[] = { "gpu.nvidia.com", "gpu-0" };
  const char *const far[] = { "pci.nrm.io", "gpu-0000-11-00-0" };

  /* Without the GPU: the first core. */
  cleanup_free char *old = prepare (d, "old", 0, "2", NULL, 0, &near);
  assert_string_equal (old, "0,12");
  assert_null (near);
  nrm_cpu_driver.reset (d);

  /* With it, from the PCI driver or a vendor driver: a core it is near. */
  cleanup_free char *a = prepare (d, "a", 0, "2", local, 1, &near);
  assert_string_equal (a, "8,20");
  assert_string_equal (near, "0000:06:00.0");
  free (near);
  nrm_cpu_driver.reset (d);
  cleanup_free char *v = prepare (d, "v", 0, "2", vendor, 1, &near);
  assert_string_equal (v, "8,20");
  free (near);
  nrm_cpu_driver.reset (d);

  /* Whole cores come first: one CPU splits a near core (8), the next near
   * claim takes core 5 whole, and the one after a whole far core rather
   * than 20 and half of another core. */
  cleanup_free char *one = prepare (d, "one", 0, "1", local, 1, &near);
  assert_string_equal (one, "8");
  free (near);
  cleanup_free char *b = prepare (d, "b", 0, "2", local, 1, &near);
  assert_string_equal (b, "10,22");
  free (near);
  cleanup_free char *c = prepare (d, "c", 0, "2", local, 1, &near);
  assert_string_equal (c, "0,12");
  assert_null (near); /* none of its CPUs is near the GPU */
  nrm_cpu_driver.reset (d);

  /* A foreign driver's device: its bus id is in its ResourceSlice only, so
   * not near anything until the API server has told (node_devices)... */
  cleanup_free char *fo = prepare (d, "fo", 0, "2", foreign, 1, &near);
  assert_string_equal (fo, "0,12");
  assert_null (near);
  nrm_cpu_driver.reset (d);
  /* ...and then near it, like nrm's own. */
  cleanup_json json_t *theirs = json_pack ("{s:{s:{s:{s:s}}}}", "gpu.nvidia.com", "gpu-0",
                                           "resource.kubernetes.io/pciBusID", "string", "0000:06:00.0");
  nrm_cpu_driver.node_devices (d, theirs);
  cleanup_free char *fo2 = prepare (d, "fo2", 0, "2", foreign, 1, &near);
  assert_string_equal (fo2, "8,20");
  assert_string_equal (near, "0000:06:00.0");
  free (near);
  nrm_cpu_driver.reset (d);
  cleanup_json json_t *none = json_object ();
  nrm_cpu_driver.node_devices (d, none);
  /* A GPU on the other node. */
  cleanup_free char *fa = prepare (d, "fa", 0, "2", far, 1, &near);
  assert_string_equal (fa, "0,12");
  assert_null (near);
  nrm_cpu_driver.reset (d);

  /* A list sysfs cannot mean, then no function in the fake tree: hwloc's
   * record (package 0, the whole node), never an error. */
  fake_put (root, "sys/bus/pci/devices/0000:06:00.0/local_cpulist", "8-x\n");
  cleanup_free char *bad = prepare (d, "bad", 0, "2", local, 1, &near);
  assert_string_equal (bad, "0,12");
  assert_string_equal (near, "0000:06:00.0");
  free (near);
  nrm_cpu_driver.reset (d);
  cleanup_free char *gone = xasprintf ("%s/sys/bus/pci/devices/0000:06:00.0", root);
  cleanup_free char *cmd = xasprintf ("rm -rf '%s'", gone);
  assert_int_equal (system (cmd), 0);
  cleanup_free char *rec = prepare (d, "rec", 0, "2", local, 1, &near);
  assert_string_equal (rec, "0,12");
  assert_string_equal (near, "0000:06:00.0");
  free (near);

  nrm_cpu_driver.free (d);
  nrm_topology_free (t);
  cleanup_free char *rm = xasprintf ("rm -rf '%s'", root);
  assert_int_equal (system (rm), 0);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_bus_id_of_device),
    cmocka_unit_test (test_recorded_locality),
    cmocka_unit_test (test_recorded_below_node),
    cmocka_unit_test (test_fake_local_cpulist),
  };
  return cmocka_run_group_tests_name ("align", tests, NULL, NULL);
}
