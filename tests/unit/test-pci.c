/* SPDX-License-Identifier: Apache-2.0 */
/* The PCI driver: on every recorded machine its devices are hwloc's PCI
 * functions of the served classes, with hwloc's bus id, PCIe root and NUMA
 * node; over a fake sysfs and /dev tree it reads kernel drivers, IOMMU
 * groups, SR-IOV, links, AER counters and device nodes, prepares device
 * nodes, and follows removal, hotplug and errors in its health. */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/jsonattr.h"
#include "driver/pci/pci.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"
#include "tests/unit/corpus.h"
#include "tests/unit/fakefs.h"
#include "topology/topology.h"

#define TOPO_2N "24em64t-2n6c2t-pci.xml"

static char *
topo_path (const char *name)
{
  const char *dir = getenv ("NRM_TOPOLOGIES");
  return xasprintf ("%s/%s", dir ? dir : "tests/topologies", name);
}

/* --- every recorded machine ------------------------------------------- */

/* The class from the PCI class and vendor, written out again here. */
static const char *
expected_class (unsigned class_id, unsigned vendor)
{
  unsigned base = class_id >> 8, sub = class_id & 0xff;
  if ((vendor == 0x10ee || vendor == 0x1172) && (base == 0x12 || base == 0x11 || base == 0x05 || base == 0xff))
    return "fpga";
  if (base == 0x03
      && (sub == 0x02
          || ((sub == 0 || sub == 0x80) && vendor != 0x1a03 && vendor != 0x102b && vendor != 0x1013
              && vendor != 0x1234)))
    return "gpu";
  if (base == 0x12)
    return "accel";
  if (base == 0x0b && sub == 0x40)
    return "coproc";
  if (base == 0x02 && sub == 0x07)
    return "ib";
  return NULL; /* NICs and NVMe are served only when configured */
}

static json_t *
pool_of (const struct nrm_topology *t, const struct nrm_publish_options *o, const char *fsroot, json_t *settings,
         bool live, void **self)
{
  struct nrm_driver_host h = {
    .topo = t, .node = o, .name = "pci.nrm.io", .fsroot = fake_root (fsroot), .live = live, .settings = settings
  };
  struct nrm_pool p = { 0 };
  nrm_error_t err = NULL;
  void *d = NULL;
  if (nrm_pci_driver_new (&h, NULL, &d, &err) < 0 || nrm_pci_driver_pool (d, NULL, &p, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  json_t *devs = json_incref (p.devices);
  nrm_pool_done (&p);
  if (self)
    *self = d;
  else
    nrm_pci_driver_free (d);
  return devs;
}

static const char *
sattr (json_t *dev, const char *name)
{
  return json_string_value (json_object_get (json_object_get (json_object_get (dev, "attributes"), name), "string"));
}

static json_t *
attr (json_t *dev, const char *name)
{
  return json_object_get (json_object_get (dev, "attributes"), name);
}

static json_t *
find_dev (json_t *devs, const char *name)
{
  size_t i;
  json_t *d;
  json_array_foreach (devs, i, d)
  {
    if (strcmp (json_string_value (json_object_get (d, "name")), name) == 0)
      return d;
  }
  return NULL;
}

static void
test_machine (void **state)
{
  const struct corpus_entry *c = *state;
  struct nrm_topology *t = NULL;
  nrm_error_t err = NULL;
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  if (nrm_topology_load (c->file, &t, &err) < 0)
    fail_msg ("%s: %s", c->file, nrm_error_msg (err));
  cleanup_json json_t *devs = pool_of (t, &o, "/", NULL, false, NULL);

  /* hwloc itself, read again: the functions, their roots and nodes. */
  hwloc_topology_t h;
  hwloc_topology_init (&h);
  hwloc_topology_set_io_types_filter (h, HWLOC_TYPE_FILTER_KEEP_ALL);
  assert_int_equal (hwloc_topology_set_xml (h, c->file), 0);
  assert_int_equal (hwloc_topology_load (h), 0);
  size_t k = 0;
  for (hwloc_obj_t p = hwloc_get_next_pcidev (h, NULL); p; p = hwloc_get_next_pcidev (h, p))
    {
      struct hwloc_pcidev_attr_s *a = &p->attr->pcidev;
      const char *class = expected_class (a->class_id, a->vendor_id);
      char bus[24], root[16] = "", name[48];
      /* A 5-digit (VMD) domain does not fit the standard attribute. */
      if (class == NULL
          || snprintf (bus, sizeof (bus), "%04x:%02x:%02x.%x", (unsigned) a->domain, a->bus, a->dev, a->func) != 12)
        continue;
      snprintf (name, sizeof (name), "%s-%04x-%02x-%02x-%x", class, a->domain, a->bus, a->dev, a->func);
      hwloc_obj_t up = p->parent;
      while (up && up->type == HWLOC_OBJ_BRIDGE && up->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_HOST)
        up = up->parent;
      if (up && up->type == HWLOC_OBJ_BRIDGE)
        snprintf (root, sizeof (root), "pci%04x:%02x", up->attr->bridge.downstream.pci.domain,
                  up->attr->bridge.downstream.pci.secondary_bus);
      hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj (h, p);
      int node = anc && hwloc_bitmap_weight (anc->nodeset) == 1 ? hwloc_bitmap_first (anc->nodeset) : -1;

      json_t *dev = find_dev (devs, name);
      k++;
      if (dev == NULL)
        fail_msg ("%s: %s (%s) is not published", c->name, bus, class);
      assert_string_equal (sattr (dev, "resource.kubernetes.io/pciBusID"), bus);
      assert_string_equal (sattr (dev, "class"), class);
      if (root[0])
        assert_string_equal (sattr (dev, NRM_STD_PCIE_ROOT_ATTR), root);
      else
        assert_null (attr (dev, NRM_STD_PCIE_ROOT_ATTR));
      json_t *numa = attr (dev, NRM_STD_NUMA_ATTR);
      if (node < 0)
        assert_null (numa);
      else
        assert_int_equal (json_integer_value (json_object_get (numa, "int")), node);
    }
  assert_int_equal (json_array_size (devs), k);
  hwloc_topology_destroy (h);
  nrm_topology_free (t);
}

/* --- a fake sysfs and /dev tree --------------------------------------- */

static char root[64];

static const char aer_zero[] = "Undefined 0\nDLP 0\nTOTAL_ERR_FATAL 0\n";

/* A function under host bridge pci<dom>:<bus> (sysfs path
 * devices/pciDDDD:BB/<port>/<bdf>) and its bus/pci/devices link. */
static void
function (const char *bdf, const char *hostbridge, const char *vendor, const char *device, const char *class, int numa,
          const char *driver)
{
  char dir[256], rel[320], target[320];
  snprintf (dir, sizeof (dir), "sys/devices/%s/0000:%s:01.0/%s", hostbridge, hostbridge + 8, bdf);
#define F(name, text)                                                                                                  \
  do                                                                                                                   \
    {                                                                                                                  \
      snprintf (rel, sizeof (rel), "%s/%s", dir, name);                                                                \
      fake_put (root, rel, text);                                                                                      \
    }                                                                                                                  \
  while (0)
  F ("vendor", vendor);
  F ("device", device);
  F ("class", class);
  char n[16];
  snprintf (n, sizeof (n), "%d\n", numa);
  F ("numa_node", n);
  F ("local_cpulist", numa == 1 ? "6-11,18-23\n" : "0-5,12-17\n");
  F ("current_link_speed", "16.0 GT/s PCIe\n");
  F ("max_link_speed", "16.0 GT/s PCIe\n");
  F ("current_link_width", "16\n");
  F ("max_link_width", "16\n");
  F ("aer_dev_fatal", aer_zero);
  F ("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL 0\n");
  F ("aer_dev_correctable", "RxErr 0\nTOTAL_ERR_COR 0\n");
#undef F
  snprintf (rel, sizeof (rel), "sys/bus/pci/devices/%s", bdf);
  snprintf (target, sizeof (target), "../../../../%s", dir);
  fake_link (root, rel, target);
  if (driver)
    {
      snprintf (rel, sizeof (rel), "%s/driver", dir);
      snprintf (target, sizeof (target), "../../../../bus/pci/drivers/%s", driver);
      fake_link (root, rel, target);
    }
}

static void
set_attr (const char *bdf, const char *name, const char *text)
{
  char rel[320];
  snprintf (rel, sizeof (rel), "sys/bus/pci/devices/%s/%s", bdf, name);
  fake_put (root, rel, text);
}

static void
build_tree (void)
{
  snprintf (root, sizeof (root), "/tmp/nrm-pci-XXXXXX");
  assert_non_null (mkdtemp (root));
  /* A GPU on node 1 with its DRM nodes and an IOMMU group. */
  function ("0000:41:00.0", "pci0000:40", "0x10de\n", "0x2330\n", "0x030200\n", 1, "nvidia");
  fake_link (root, "sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0/iommu_group",
             "../../../../kernel/iommu_groups/12");
  fake_put (root, "sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0/drm/card1/dev", "226:1\n");
  fake_put (root, "sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0/drm/renderD129/dev", "226:129\n");
  fake_put (root, "dev/dri/card1", "");
  fake_put (root, "dev/dri/renderD129", "");
  /* A virtio GPU on node 0: its drm folder is below virtio0. */
  function ("0000:00:02.0", "pci0000:00", "0x1af4\n", "0x1050\n", "0x030000\n", -1, "virtio-pci");
  fake_put (root, "sys/devices/pci0000:00/0000:00:01.0/0000:00:02.0/virtio0/drm/card0/dev", "226:0\n");
  fake_put (root, "dev/dri/card0", "");
  /* A BMC's VGA: not an accelerator. */
  function ("0000:00:03.0", "pci0000:00", "0x1a03\n", "0x2000\n", "0x030000\n", -1, "ast");
  /* An SR-IOV NIC on node 1 with two of four VFs enabled. */
  function ("0000:42:00.0", "pci0000:40", "0x8086\n", "0x1572\n", "0x020000\n", 1, "i40e");
  set_attr ("0000:42:00.0", "sriov_totalvfs", "4\n");
  set_attr ("0000:42:00.0", "sriov_numvfs", "2\n");
  fake_put (root, "sys/devices/pci0000:40/0000:40:01.0/0000:42:00.0/net/eth2/operstate", "down\n");
  for (int vf = 1; vf <= 2; vf++)
    {
      char bdf[16], rel[128];
      snprintf (bdf, sizeof (bdf), "0000:42:00.%d", vf);
      function (bdf, "pci0000:40", "0x8086\n", "0x154c\n", "0x020000\n", 1, "iavf");
      snprintf (rel, sizeof (rel), "sys/devices/pci0000:40/0000:40:01.0/%s/physfn", bdf);
      fake_link (root, rel, "../0000:42:00.0");
      snprintf (rel, sizeof (rel), "sys/devices/pci0000:40/0000:40:01.0/%s/net/eth%d/carrier", bdf, 2 + vf);
      fake_put (root, rel, vf == 1 ? "1\n" : "0\n");
    }
  /* An NVMe drive with one namespace, an InfiniBand HCA, and a function
   * given to vfio-pci. */
  function ("0000:43:00.0", "pci0000:40", "0x144d\n", "0xa80a\n", "0x010802\n", 1, "nvme");
  fake_put (root, "sys/devices/pci0000:40/0000:40:01.0/0000:43:00.0/nvme/nvme0/nvme0n1/dev", "259:0\n");
  fake_put (root, "dev/nvme0", "");
  fake_put (root, "dev/nvme0n1", "");
  function ("0000:44:00.0", "pci0000:40", "0x15b3\n", "0x101b\n", "0x020700\n", 1, "mlx5_core");
  fake_put (root, "sys/devices/pci0000:40/0000:40:01.0/0000:44:00.0/infiniband_verbs/uverbs0/dev", "231:192\n");
  fake_put (root, "dev/infiniband/uverbs0", "");
  fake_put (root, "dev/infiniband/rdma_cm", "");
  function ("0000:45:00.0", "pci0000:40", "0x10de\n", "0x20b5\n", "0x030200\n", 1, "vfio-pci");
  fake_link (root, "sys/devices/pci0000:40/0000:40:01.0/0000:45:00.0/iommu_group",
             "../../../../kernel/iommu_groups/30");
  fake_put (root, "dev/vfio/30", "");
  fake_put (root, "dev/vfio/vfio", "");
}

static void
remove_tree (void)
{
  cleanup_free char *cmd = xasprintf ("rm -rf '%s'", root);
  assert_int_equal (system (cmd), 0);
}

static void
test_facts (void **state)
{
  (void) state;
  struct nrm_pci_facts f;
  nrm_error_t err = NULL;
  build_tree ();
  assert_int_equal (nrm_pci_facts_read (fake_root (root), "0000:41:00.0", &f, &err), 0);
  assert_int_equal (f.vendor_id, 0x10de);
  assert_int_equal (f.class_code, 0x030200);
  assert_int_equal (f.numa_node, 1);
  assert_string_equal (f.pcie_root, "pci0000:40");
  assert_string_equal (f.driver, "nvidia");
  assert_int_equal (f.iommu_group, 12);
  assert_string_equal (f.link_speed, "16.0 GT/s PCIe");
  assert_int_equal (f.max_link_width, 16);
  assert_int_equal (f.aer_fatal, 0);
  assert_int_equal (f.n_nodes, 2);
  assert_string_equal (f.nodes[0], "/dev/dri/card1");
  assert_string_equal (f.nodes[1], "/dev/dri/renderD129");
  nrm_pci_facts_done (&f);

  assert_int_equal (nrm_pci_facts_read (fake_root (root), "0000:00:02.0", &f, &err), 0);
  assert_int_equal (f.numa_node, -1);
  assert_string_equal (f.pcie_root, "pci0000:00");
  assert_int_equal (f.n_nodes, 1); /* found below virtio0 */
  assert_string_equal (f.nodes[0], "/dev/dri/card0");
  nrm_pci_facts_done (&f);

  assert_int_equal (nrm_pci_facts_read (fake_root (root), "0000:42:00.0", &f, &err), 0);
  assert_int_equal (f.sriov_total, 4);
  assert_int_equal (f.sriov_enabled, 2);
  assert_int_equal (f.carrier, -1); /* eth2 is down: its carrier is unknown */
  assert_int_equal (f.n_netdevs, 1);
  assert_string_equal (f.netdevs[0], "eth2");
  nrm_pci_facts_done (&f);
  assert_int_equal (nrm_pci_facts_read (fake_root (root), "0000:42:00.2", &f, &err), 0);
  assert_string_equal (f.physfn, "0000:42:00.0");
  assert_int_equal (f.sriov_total, -1);
  assert_int_equal (f.carrier, 0);
  nrm_pci_facts_done (&f);

  assert_int_equal (nrm_pci_facts_read (fake_root (root), "0000:43:00.0", &f, &err), 0);
  assert_int_equal (f.n_nodes, 2);
  assert_string_equal (f.nodes[0], "/dev/nvme0");
  assert_string_equal (f.nodes[1], "/dev/nvme0n1");
  nrm_pci_facts_done (&f);
  assert_int_equal (nrm_pci_facts_read (fake_root (root), "0000:44:00.0", &f, &err), 0);
  assert_int_equal (f.n_nodes, 2);
  assert_string_equal (f.nodes[0], "/dev/infiniband/rdma_cm");
  assert_string_equal (f.nodes[1], "/dev/infiniband/uverbs0");
  nrm_pci_facts_done (&f);
  assert_int_equal (nrm_pci_facts_read (fake_root (root), "0000:45:00.0", &f, &err), 0);
  assert_int_equal (f.n_nodes, 2);
  assert_string_equal (f.nodes[0], "/dev/vfio/30");
  assert_string_equal (f.nodes[1], "/dev/vfio/vfio");
  nrm_pci_facts_done (&f);

  /* Refused: a bus id that is no bus id, and one that is not there. */
  assert_int_equal (nrm_pci_facts_read (fake_root (root), "0000:41:00.0/../x", &f, &err), -1);
  assert_int_equal (err->status, EINVAL);
  nrm_error_release (&err);
  assert_int_equal (nrm_pci_facts_read (fake_root (root), "0000:99:00.0", &f, &err), -1);
  assert_int_equal (err->status, ENOENT);
  assert_non_null (strstr (nrm_error_msg (err), "0000:99:00.0"));
  nrm_error_release (&err);
  remove_tree ();
}

static void
test_bus_ids (void **state)
{
  (void) state;
  assert_true (nrm_pci_bus_id_valid ("0000:3b:00.0"));
  assert_true (nrm_pci_bus_id_valid ("ffff:ff:1f.7"));
  const char *bad[] = { "0000:3B:00.0", "10000:3b:00.0", "0000:3b:20.0", "0000:3b:00.8", "0000-3b:00.0", "", "0" };
  for (size_t i = 0; i < sizeof (bad) / sizeof (bad[0]); i++)
    assert_false (nrm_pci_bus_id_valid (bad[i]));
  assert_false (nrm_pci_bus_id_valid (NULL));
}

static struct nrm_topology *
load_2n (void)
{
  struct nrm_topology *t = NULL;
  nrm_error_t err = NULL;
  cleanup_free char *path = topo_path (TOPO_2N);
  if (nrm_topology_load (path, &t, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  return t;
}

static void
count_log (void *ctx, enum nrm_log_level level, const char *fmt, ...)
{
  (void) level;
  if (strstr (fmt, "leaves"))
    (*(int *) ctx)++;
}

static void
test_pool (void **state)
{
  (void) state;
  struct nrm_topology *t = load_2n ();
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  build_tree ();

  /* By default: GPUs and InfiniBand, not the BMC's VGA, NICs or NVMe. */
  cleanup_json json_t *devs = pool_of (t, &o, root, NULL, false, NULL);
  const char *want[] = { "gpu-0000-00-02-0", "gpu-0000-41-00-0", "ib-0000-44-00-0", "gpu-0000-45-00-0" };
  assert_int_equal (json_array_size (devs), 4);
  for (size_t i = 0; i < 4; i++)
    assert_string_equal (json_string_value (json_object_get (json_array_get (devs, i), "name")), want[i]);
  json_t *gpu = find_dev (devs, "gpu-0000-41-00-0");
  assert_string_equal (sattr (gpu, NRM_STD_PCIE_ROOT_ATTR), "pci0000:40");
  assert_int_equal (json_integer_value (json_object_get (attr (gpu, NRM_STD_NUMA_ATTR), "int")), 1);
  assert_string_equal (sattr (gpu, "driver"), "nvidia");
  assert_string_equal (sattr (gpu, "vendorID"), "10de");
  assert_string_equal (sattr (gpu, "classID"), "0302");
  assert_int_equal (json_integer_value (json_object_get (attr (gpu, "iommuGroup"), "int")), 12);
  assert_string_equal (sattr (gpu, "linkSpeed"), "16.0 GT/s PCIe");
  /* Unknown NUMA node: the standard attribute is left out. */
  assert_null (attr (find_dev (devs, "gpu-0000-00-02-0"), NRM_STD_NUMA_ATTR));

  /* NICs configured: the VFs are the devices, not their PF. */
  cleanup_json json_t *s = json_pack ("{s:[s, s]}", "classes", "nic", "nvme");
  cleanup_json json_t *nics = pool_of (t, &o, root, s, false, NULL);
  assert_int_equal (json_array_size (nics), 3);
  assert_null (find_dev (nics, "nic-0000-42-00-0"));
  json_t *vf = find_dev (nics, "nic-0000-42-00-1");
  assert_non_null (vf);
  assert_string_equal (sattr (vf, "physfn"), "0000:42:00.0");
  assert_non_null (find_dev (nics, "nvme-0000-43-00-0"));

  /* The host's own: a mounted namespace, an interface that is up. */
  fake_put (root, "sys/block/nvme0n1/dev", "259:0\n");
  fake_put (root, "proc/self/mountinfo",
            "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n36 22 259:0 / /data rw - ext4 /dev/nvme0n1 rw\n");
  fake_put (root, "sys/devices/pci0000:40/0000:40:01.0/0000:42:00.1/net/eth3/operstate", "up\n");
  struct nrm_pool busy = { 0 };
  void *bd = NULL;
  nrm_error_t berr = NULL;
  struct nrm_driver_host bh
      = { .topo = t, .node = &o, .name = "pci.nrm.io", .fsroot = fake_root (root), .settings = s };
  int logged = 0;
  bh.log = count_log;
  bh.log_ctx = &logged;
  assert_int_equal (nrm_pci_driver_new (&bh, NULL, &bd, &berr), 0);
  assert_int_equal (nrm_pci_driver_pool (bd, NULL, &busy, &berr), 0);
  assert_null (find_dev (busy.devices, "nvme-0000-43-00-0"));
  assert_null (find_dev (busy.devices, "nic-0000-42-00-1"));
  assert_non_null (find_dev (busy.devices, "nic-0000-42-00-2"));
  assert_int_equal (logged, 2); /* one line for each function left to the host */
  nrm_pool_done (&busy);
  nrm_pci_driver_free (bd);

  /* The list form follows the gate. */
  o.list_attributes = true;
  cleanup_json json_t *listed = pool_of (t, &o, root, NULL, false, NULL);
  json_t *ints = json_object_get (attr (find_dev (listed, "gpu-0000-41-00-0"), NRM_STD_NUMA_ATTR), "ints");
  assert_true (json_array_size (ints) >= 1);
  assert_int_equal (json_integer_value (json_array_get (ints, 0)), 1);

  /* Bad settings name the key and the value. */
  struct nrm_driver_host h = { .topo = t, .node = &o, .name = "pci.nrm.io", .fsroot = fake_root (root) };
  const char *bad[] = { "{\"classes\": [\"tpu\"]}", "{\"classes\": \"gpu\"}", "{\"clases\": []}" };
  const char *says[] = { "`tpu` is not a class", "pci.classes", "unknown key `pci.clases`" };
  for (size_t i = 0; i < 3; i++)
    {
      nrm_error_t err = NULL;
      void *d = NULL;
      h.settings = json_loads (bad[i], 0, NULL);
      assert_int_equal (nrm_pci_driver_new (&h, NULL, &d, &err), -1);
      assert_non_null (strstr (nrm_error_msg (err), says[i]));
      nrm_error_release (&err);
      json_decref (h.settings);
    }
  remove_tree ();
  nrm_topology_free (t);
}

static int
prepare (void *d, const char *uid, const char *const *devices, size_t n, bool metadata, struct nrm_prepared *out,
         nrm_error_t *err)
{
  struct nrm_alloc_result r[8];
  for (size_t i = 0; i < n; i++)
    r[i] = (struct nrm_alloc_result){ .driver = "pci.nrm.io", .request = "gpu", .pool = "node", .device = devices[i] };
  struct nrm_claim_view c = {
    .uid = uid, .ns = "ns", .name = "c", .results = r, .n_results = n, .all = r, .n_all = n, .metadata = metadata
  };
  memset (out, 0, sizeof (*out));
  return nrm_pci_driver_prepare (d, &c, out, err);
}

static const struct nrm_device_health *
health_of (const struct nrm_health_report *r, const char *name)
{
  for (size_t i = 0; i < r->n; i++)
    if (strcmp (r->devices[i].device, name) == 0)
      return &r->devices[i];
  return NULL;
}

static void
test_prepare_and_health (void **state)
{
  (void) state;
  struct nrm_topology *t = load_2n ();
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  nrm_error_t err = NULL;
  void *d = NULL;
  build_tree ();
  cleanup_json json_t *devs = pool_of (t, &o, root, NULL, false, &d);

  const char *gpu[] = { "gpu-0000-41-00-0" };
  struct nrm_prepared p;
  assert_int_equal (prepare (d, "uid-1", gpu, 1, true, &p, &err), 0);
  json_t *nodes = p.edits.device_nodes;
  assert_int_equal (json_array_size (nodes), 2);
  assert_string_equal (json_string_value (json_object_get (json_array_get (nodes, 0), "path")), "/dev/dri/card1");
  cleanup_free char *host = xasprintf ("%s/dev/dri/card1", root);
  assert_string_equal (json_string_value (json_object_get (json_array_get (nodes, 0), "hostPath")), host);
  assert_string_equal (json_string_value (json_array_get (p.edits.env, 0)), "NRM_PCI_DEVICES=0000:41:00.0");
  json_t *meta = json_object_get (p.metadata, "gpu-0000-41-00-0");
  assert_string_equal (json_string_value (json_object_get (json_object_get (meta, "deviceNodes"), "string")),
                       "/dev/dri/card1,/dev/dri/renderD129");
  assert_string_equal (
      json_string_value (json_object_get (json_object_get (meta, "resource.kubernetes.io/pciBusID"), "string")),
      "0000:41:00.0");
  cleanup_json json_t *state_copy = json_incref (p.state);
  nrm_prepared_done (&p);
  /* What the claim's status tells of it, from the state alone. */
  cleanup_json json_t *desc = nrm_pci_driver_describe (d, "uid-1", state_copy);
  cleanup_json json_t *want = json_pack ("{s:{s:s, s:[s, s]}}", "gpu-0000-41-00-0", "busID", "0000:41:00.0",
                                         "deviceNodes", "/dev/dri/card1", "/dev/dri/renderD129");
  assert_true (json_equal (json_object_get (desc, "placement"), want));

  /* Held: another claim cannot have it; unknown names are errors. */
  assert_int_equal (prepare (d, "uid-2", gpu, 1, false, &p, &err), -1);
  assert_int_equal (err->status, EBUSY);
  assert_non_null (strstr (nrm_error_msg (err), "uid-1"));
  nrm_error_release (&err);
  const char *unknown[] = { "gpu-0000-99-00-0" };
  assert_int_equal (prepare (d, "uid-2", unknown, 1, false, &p, &err), -1);
  assert_int_equal (err->status, ENODEV);
  nrm_error_release (&err);

  /* Healthy; then a fatal AER error and a narrower link. */
  struct nrm_health_report r = { 0 };
  assert_int_equal (nrm_pci_driver_health (d, &r, &err), 0);
  assert_int_equal (health_of (&r, "gpu-0000-41-00-0")->health, NRM_HEALTH_HEALTHY);
  assert_int_equal (health_of (&r, "gpu-0000-41-00-0")->effect, NRM_TAINT_NONE_SET);
  nrm_health_report_done (&r);
  set_attr ("0000:41:00.0", "current_link_width", "8\n");
  assert_int_equal (nrm_pci_driver_health (d, &r, &err), 0);
  assert_int_equal (health_of (&r, "gpu-0000-41-00-0")->effect, NRM_TAINT_NO_SCHEDULE);
  assert_string_equal (health_of (&r, "gpu-0000-41-00-0")->taint, "link-degraded");
  nrm_health_report_done (&r);
  set_attr ("0000:41:00.0", "aer_dev_fatal", "Undefined 0\nDLP 1\nTOTAL_ERR_FATAL 1\n");
  assert_int_equal (nrm_pci_driver_health (d, &r, &err), 0);
  const struct nrm_device_health *h = health_of (&r, "gpu-0000-41-00-0");
  assert_int_equal (h->health, NRM_HEALTH_UNHEALTHY);
  assert_int_equal (h->effect, NRM_TAINT_NO_EXECUTE);
  assert_string_equal (h->taint, "aer-fatal");
  assert_non_null (strstr (h->message, "x8 of x16"));
  nrm_health_report_done (&r);

  /* Removed while held: still published, tainted NoExecute, not preparable. */
  cleanup_free char *gone = xasprintf ("rm -rf '%s/sys/bus/pci/devices/0000:41:00.0' "
                                       "'%s/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0'",
                                       root, root);
  assert_int_equal (system (gone), 0);
  struct nrm_pool pool = { 0 };
  assert_int_equal (nrm_pci_driver_pool (d, NULL, &pool, &err), 0);
  assert_non_null (find_dev (pool.devices, "gpu-0000-41-00-0"));
  nrm_pool_done (&pool);
  assert_int_equal (nrm_pci_driver_health (d, &r, &err), 0);
  h = health_of (&r, "gpu-0000-41-00-0");
  assert_int_equal (h->effect, NRM_TAINT_NO_EXECUTE);
  assert_string_equal (h->taint, "removed");
  nrm_health_report_done (&r);
  assert_int_equal (prepare (d, "uid-3", gpu, 1, false, &p, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "removed"));
  nrm_error_release (&err);

  /* After a restart the state alone keeps it published. */
  nrm_pci_driver_reset (d);
  assert_int_equal (nrm_pci_driver_restore (d, "uid-1", state_copy, &err), 0);
  assert_int_equal (nrm_pci_driver_pool (d, NULL, &pool, &err), 0);
  json_t *kept = find_dev (pool.devices, "gpu-0000-41-00-0");
  assert_non_null (kept);
  assert_string_equal (sattr (kept, NRM_STD_PCIE_ROOT_ATTR), "pci0000:40");
  nrm_pool_done (&pool);
  /* Released: gone from the pool. A new function appears (hotplug). */
  nrm_pci_driver_unprepare (d, "uid-1", state_copy);
  function ("0000:46:00.0", "pci0000:40", "0x1da3\n", "0x1020\n", "0x120000\n", 1, "habanalabs");
  fake_put (root, "sys/devices/pci0000:40/0000:40:01.0/0000:46:00.0/accel/accel0/dev", "511:0\n");
  fake_put (root, "dev/accel/accel0", "");
  assert_int_equal (nrm_pci_driver_pool (d, NULL, &pool, &err), 0);
  assert_null (find_dev (pool.devices, "gpu-0000-41-00-0"));
  assert_non_null (find_dev (pool.devices, "accel-0000-46-00-0"));
  nrm_pool_done (&pool);
  const char *accel[] = { "accel-0000-46-00-0" };
  assert_int_equal (prepare (d, "uid-4", accel, 1, false, &p, &err), 0);
  assert_string_equal (json_string_value (json_object_get (json_array_get (p.edits.device_nodes, 0), "path")),
                       "/dev/accel/accel0");
  nrm_prepared_done (&p);

  /* A state that names no bus id is refused whole. */
  cleanup_json json_t *bad = json_pack ("{s:[{s:s}]}", "devices", "name", "gpu-x");
  assert_int_equal (nrm_pci_driver_restore (d, "uid-5", bad, &err), -1);
  nrm_error_release (&err);

  nrm_pci_driver_free (d);
  remove_tree ();
  nrm_topology_free (t);
}

/* A NIC's carrier as the kernel shows it: readable (0 or 1) only while its
 * interface is up; an interface that is down (every NIC nrm publishes: one
 * that is up is the host's) has none to read and is not tainted no-carrier.
 * An interface that is up without a link reads 0 and is. */
static void
test_carrier (void **state)
{
  (void) state;
  struct nrm_topology *t = load_2n ();
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  nrm_error_t err = NULL;
  void *d = NULL;
  build_tree ();
  cleanup_json json_t *s = json_pack ("{s:[s]}", "classes", "nic");
  cleanup_json json_t *devs = pool_of (t, &o, root, s, false, &d);
  assert_non_null (find_dev (devs, "nic-0000-42-00-2"));
  struct nrm_health_report r = { 0 };
  /* Up without a link (operstate down, carrier 0). */
  fake_put (root, "sys/devices/pci0000:40/0000:40:01.0/0000:42:00.2/net/eth4/operstate", "down\n");
  assert_int_equal (nrm_pci_driver_health (d, &r, &err), 0);
  assert_string_equal (health_of (&r, "nic-0000-42-00-2")->taint, "no-carrier");
  assert_int_equal (health_of (&r, "nic-0000-42-00-2")->effect, NRM_TAINT_NO_SCHEDULE);
  nrm_health_report_done (&r);
  /* Down (ip link set eth4 down): the kernel refuses to read carrier. */
  cleanup_free char *rm = xasprintf ("rm '%s/sys/devices/pci0000:40/0000:40:01.0/0000:42:00.2/net/eth4/carrier'", root);
  assert_int_equal (system (rm), 0);
  assert_int_equal (nrm_pci_driver_health (d, &r, &err), 0);
  assert_null (health_of (&r, "nic-0000-42-00-2")->taint);
  assert_int_equal (health_of (&r, "nic-0000-42-00-2")->effect, NRM_TAINT_NONE_SET);
  assert_int_equal (health_of (&r, "nic-0000-42-00-2")->health, NRM_HEALTH_HEALTHY);
  nrm_health_report_done (&r);
  nrm_pci_driver_free (d);
  remove_tree ();
  nrm_topology_free (t);
}

/* A listening unix socket at rel, as a registered plugin leaves one. */
static int
plugin_socket (const char *rel)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  char dir[256];
  nrm_error_t err = NULL;
  assert_true ((size_t) snprintf (sa.sun_path, sizeof (sa.sun_path), "%s/%s", root, rel) < sizeof (sa.sun_path));
  snprintf (dir, sizeof (dir), "%s", sa.sun_path);
  *strrchr (dir, '/') = '\0';
  assert_int_equal (nrm_mkdir_p (dir, 0755, &err), 0);
  int fd = socket (AF_UNIX, SOCK_STREAM, 0);
  assert_true (fd >= 0);
  assert_int_equal (bind (fd, (struct sockaddr *) &sa, sizeof (sa)), 0);
  assert_int_equal (listen (fd, 1), 0);
  return fd;
}

static void
test_coexistence (void **state)
{
  (void) state;
  struct nrm_topology *t = load_2n ();
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  nrm_error_t err = NULL;
  build_tree ();
  cleanup_free char *kdir = xasprintf ("%s/var/lib/kubelet", root);
  struct nrm_driver_host h
      = { .topo = t, .node = &o, .name = "pci.nrm.io", .fsroot = fake_root (root), .kubelet_dir = kdir };

  /* NVIDIA's DRA driver registered: its GPUs are left out, also the
   * vfio-bound one; the virtio GPU and the HCA stay. */
  int s1 = plugin_socket ("var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock");
  cleanup_json json_t *devs = pool_of (t, &o, root, NULL, false, NULL);
  assert_null (find_dev (devs, "gpu-0000-41-00-0"));
  assert_null (find_dev (devs, "gpu-0000-45-00-0"));
  assert_non_null (find_dev (devs, "gpu-0000-00-02-0"));
  assert_non_null (find_dev (devs, "ib-0000-44-00-0"));
  close (s1);
  cleanup_free char *sock = xasprintf ("%s/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock", root);
  unlink (sock);

  /* Configuration rules; detection off; a bad rule names itself. */
  cleanup_json json_t *ex = json_pack ("{s:[s, s]}", "exclude", "0000:00:02.0", "class:ib");
  cleanup_json json_t *d2 = pool_of (t, &o, root, ex, false, NULL);
  assert_int_equal (json_array_size (d2), 2);
  assert_null (find_dev (d2, "gpu-0000-00-02-0"));
  assert_null (find_dev (d2, "ib-0000-44-00-0"));
  h.settings = json_pack ("{s:[s]}", "exclude", "vendor:xyz");
  void *d = NULL;
  assert_int_equal (nrm_pci_driver_new (&h, NULL, &d, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "vendor:xyz"));
  nrm_error_release (&err);
  json_decref (h.settings);

  /* A plugin that registers after nrm started: seen through the fd. */
  h.settings = NULL;
  assert_int_equal (nrm_pci_driver_new (&h, NULL, &d, &err), 0);
  struct nrm_pool p = { 0 };
  assert_int_equal (nrm_pci_driver_pool (d, NULL, &p, &err), 0);
  assert_non_null (find_dev (p.devices, "gpu-0000-41-00-0"));
  nrm_pool_done (&p);
  int s2 = plugin_socket ("var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock");
  struct pollfd pfd = { .fd = nrm_pci_driver_health_fd (d), .events = POLLIN };
  assert_true (pfd.fd >= 0);
  assert_int_equal (poll (&pfd, 1, 5000), 1);
  nrm_pci_driver_health_event (d);
  assert_int_equal (nrm_pci_driver_pool (d, NULL, &p, &err), 0);
  assert_null (find_dev (p.devices, "gpu-0000-41-00-0"));
  assert_non_null (find_dev (p.devices, "gpu-0000-00-02-0"));
  nrm_pool_done (&p);
  nrm_pci_driver_free (d);
  close (s2);

  /* Another driver publishes functions (its ResourceSlices, as the API
   * server has them): the standard attribute, and dranet's own one. */
  unlink (sock);
  assert_int_equal (nrm_pci_driver_new (&h, NULL, &d, &err), 0);
  cleanup_json json_t *theirs
      = json_pack ("{s:{s:{s:{s:s}}}, s:{s:{s:{s:s}}}}", "gpu.example.com", "gpu-0", "resource.kubernetes.io/pciBusID",
                   "string", "0000:41:00.0", "dra.net", "ib0", "pciAddress", "string", "0000:44:00.0");
  nrm_pci_driver_node_devices (d, theirs);
  assert_int_equal (nrm_pci_driver_pool (d, NULL, &p, &err), 0);
  assert_null (find_dev (p.devices, "gpu-0000-41-00-0"));
  assert_null (find_dev (p.devices, "ib-0000-44-00-0"));
  assert_non_null (find_dev (p.devices, "gpu-0000-00-02-0"));
  nrm_pool_done (&p);
  /* They stop publishing them: nrm serves them again. */
  cleanup_json json_t *none = json_object ();
  nrm_pci_driver_node_devices (d, none);
  assert_int_equal (nrm_pci_driver_pool (d, NULL, &p, &err), 0);
  assert_non_null (find_dev (p.devices, "gpu-0000-41-00-0"));
  nrm_pool_done (&p);
  nrm_pci_driver_free (d);
  remove_tree ();
  nrm_topology_free (t);
}

/* --- passthrough, against a stand-in for the kernel's PCI core -------- */

/* Watches the bind files as the kernel would: a write of a bus id to
 * drivers_probe binds the function to its driver_override, else to the
 * driver its ids match (the test's `native`); a write to a driver's
 * unbind drops the link. vfio-pci makes /dev/vfio/<group>. */
struct fake_kernel
{
  pthread_t thread;
  int fd;
  volatile bool stop, refuse_vfio;
  const char *native; /* the driver of 0000:41:00.0 */
};

static void
kernel_probe (struct fake_kernel *k, const char *bdf)
{
  char path[512], over[64] = "";
  snprintf (path, sizeof (path), "%s/sys/bus/pci/devices/%s/driver_override", root, bdf);
  FILE *f = fopen (path, "r");
  if (f)
    {
      if (fgets (over, sizeof (over), f) == NULL)
        over[0] = '\0';
      fclose (f);
    }
  over[strcspn (over, "\n")] = '\0';
  const char *drv = over[0] ? over : k->native;
  if (strcmp (drv, "vfio-pci") == 0 && k->refuse_vfio)
    return;
  snprintf (path, sizeof (path), "sys/devices/pci0000:40/0000:40:01.0/%s/driver", bdf);
  cleanup_free char *target = xasprintf ("../../../../bus/pci/drivers/%s", drv);
  fake_link (root, path, target);
  if (strcmp (drv, "vfio-pci") == 0)
    fake_put (root, "dev/vfio/12", "");
}

static void
kernel_unbind (const char *drv)
{
  char path[512], bdf[64] = "";
  snprintf (path, sizeof (path), "%s/sys/bus/pci/drivers/%s/unbind", root, drv);
  FILE *f = fopen (path, "r");
  if (f == NULL || fgets (bdf, sizeof (bdf), f) == NULL)
    {
      if (f)
        fclose (f);
      return;
    }
  fclose (f);
  bdf[strcspn (bdf, "\n")] = '\0';
  snprintf (path, sizeof (path), "%s/sys/devices/pci0000:40/0000:40:01.0/%s/driver", root, bdf);
  unlink (path);
}

static void *
kernel_loop (void *arg)
{
  struct fake_kernel *k = arg;
  char buf[4096] __attribute__ ((aligned (__alignof__(struct inotify_event))));
  while (!k->stop)
    {
      struct pollfd p = { .fd = k->fd, .events = POLLIN };
      if (poll (&p, 1, 20) <= 0)
        continue;
      ssize_t n = read (k->fd, buf, sizeof (buf));
      for (char *q = buf; n > 0 && q < buf + n;)
        {
          struct inotify_event *ev = (struct inotify_event *) q;
          q += sizeof (*ev) + ev->len;
          if (ev->len == 0)
            continue;
          if (strcmp (ev->name, "drivers_probe") == 0)
            {
              char path[512], bdf[64] = "";
              snprintf (path, sizeof (path), "%s/sys/bus/pci/drivers_probe", root);
              FILE *f = fopen (path, "r");
              if (f && fgets (bdf, sizeof (bdf), f))
                kernel_probe (k, bdf);
              if (f)
                fclose (f);
            }
          else if (strcmp (ev->name, "unbind") == 0)
            kernel_unbind (ev->wd == 2 ? "vfio-pci" : k->native);
        }
    }
  return NULL;
}

static void
kernel_start (struct fake_kernel *k)
{
  char path[512];
  k->fd = inotify_init1 (IN_CLOEXEC);
  assert_true (k->fd >= 0);
  const char *dirs[] = { "sys/bus/pci", "sys/bus/pci/drivers/vfio-pci", "sys/bus/pci/drivers/nvidia" };
  for (size_t i = 0; i < 3; i++)
    {
      snprintf (path, sizeof (path), "%s/%s", root, dirs[i]);
      assert_int_equal (inotify_add_watch (k->fd, path, IN_CLOSE_WRITE), (int) i + 1);
    }
  assert_int_equal (pthread_create (&k->thread, NULL, kernel_loop, k), 0);
}

static void
kernel_stop (struct fake_kernel *k)
{
  k->stop = true;
  pthread_join (k->thread, NULL);
  close (k->fd);
}

static char *
bound_to (const char *bdf)
{
  char path[512], target[512];
  snprintf (path, sizeof (path), "%s/sys/bus/pci/devices/%s/driver", root, bdf);
  ssize_t n = readlink (path, target, sizeof (target) - 1);
  if (n <= 0)
    return xstrdup ("");
  target[n] = '\0';
  return xstrdup (strrchr (target, '/') + 1);
}

static json_t *
bind_claim (void *d, const char *uid, const char *device)
{
  struct nrm_alloc_result r = { .driver = "pci.nrm.io", .request = "gpu", .pool = "node", .device = device };
  struct nrm_claim_view c
      = { .uid = uid, .ns = "ns", .name = "c", .results = &r, .n_results = 1, .all = &r, .n_all = 1 };
  json_t *out = NULL;
  nrm_error_t err = NULL;
  if (nrm_pci_driver_bind (d, &c, &out, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  return out;
}

static const char *
condition_of (json_t *status)
{
  return json_string_value (
      json_object_get (json_array_get (json_object_get (json_array_get (status, 0), "conditions"), 0), "type"));
}

static void
test_passthrough (void **state)
{
  (void) state;
  struct nrm_topology *t = load_2n ();
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  nrm_error_t err = NULL;
  build_tree ();
  /* The GPU alone in IOMMU group 12, vfio-pci loaded, the bind files. */
  fake_link (root, "sys/kernel/iommu_groups/12/devices/0000:41:00.0",
             "../../../../devices/pci0000:40/0000:40:01.0/0000:41:00.0");
  fake_put (root, "sys/bus/pci/drivers/vfio-pci/unbind", "");
  fake_put (root, "sys/bus/pci/drivers/nvidia/unbind", "");
  fake_put (root, "sys/bus/pci/drivers_probe", "");
  fake_put (root, "sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0/driver_override", "\n");
  cleanup_free char *statedir = xasprintf ("%s/state", root);
  struct fake_kernel k = { .native = "nvidia" };
  kernel_start (&k);

  cleanup_json json_t *s = json_pack ("{s:b}", "passthrough", true);
  struct nrm_driver_host h = {
    .topo = t, .node = &o, .name = "pci.nrm.io", .fsroot = fake_root (root), .settings = s, .state_dir = statedir
  };
  void *d = NULL;
  assert_int_equal (nrm_pci_driver_new (&h, NULL, &d, &err), 0);
  struct nrm_pool p = { 0 };
  assert_int_equal (nrm_pci_driver_pool (d, NULL, &p, &err), 0);
  /* A twin for the GPU alone in its group, none for the function without
   * a group nor for the one on vfio-pci already; both halves share a counter. */
  json_t *x = find_dev (p.devices, "gpu-0000-41-00-0"), *tw = find_dev (p.devices, "gpu-0000-41-00-0-vfio");
  assert_non_null (x);
  assert_non_null (tw);
  assert_null (find_dev (p.devices, "gpu-0000-00-02-0-vfio"));
  assert_null (find_dev (p.devices, "gpu-0000-45-00-0-vfio"));
  assert_true (json_is_true (json_object_get (attr (tw, "passthrough"), "bool")));
  assert_true (json_is_false (json_object_get (attr (x, "passthrough"), "bool")));
  assert_true (json_is_true (json_object_get (tw, "bindsToNode")));
  assert_string_equal (json_string_value (json_array_get (json_object_get (tw, "bindingConditions"), 0)),
                       "pci.nrm.io/vfio-ready");
  const char *set
      = json_string_value (json_object_get (json_array_get (json_object_get (x, "consumesCounters"), 0), "counterSet"));
  assert_string_equal (set, "fn-0000-41-00-0");
  assert_string_equal (
      json_string_value (json_object_get (json_array_get (json_object_get (tw, "consumesCounters"), 0), "counterSet")),
      set);
  assert_int_equal (json_array_size (p.counter_sets), 1);
  nrm_pool_done (&p);

  /* Binding: the scheduler waits for vfio-ready; the function is on
   * vfio-pci, journaled with the driver it had. */
  cleanup_json json_t *st = bind_claim (d, "uid-v", "gpu-0000-41-00-0-vfio");
  assert_string_equal (condition_of (st), "pci.nrm.io/vfio-ready");
  cleanup_free char *now = bound_to ("0000:41:00.0");
  assert_string_equal (now, "vfio-pci");
  cleanup_free char *journal = xasprintf ("%s/pci.nrm.io.vfio/0000:41:00.0.json", statedir);
  assert_int_equal (access (journal, F_OK), 0);

  /* Prepare gives the VFIO group; the function itself is held with it. */
  const char *twin[] = { "gpu-0000-41-00-0-vfio" }, *plain[] = { "gpu-0000-41-00-0" };
  struct nrm_prepared pr;
  assert_int_equal (prepare (d, "uid-v", twin, 1, false, &pr, &err), 0);
  assert_int_equal (json_array_size (pr.edits.device_nodes), 2);
  assert_string_equal (json_string_value (json_object_get (json_array_get (pr.edits.device_nodes, 0), "path")),
                       "/dev/vfio/12");
  cleanup_json json_t *vstate = json_incref (pr.state);
  nrm_prepared_done (&pr);
  assert_int_equal (prepare (d, "uid-other", plain, 1, false, &pr, &err), -1);
  assert_int_equal (err->status, EBUSY);
  nrm_error_release (&err);

  /* Unprepare: back to nvidia, journal gone. */
  nrm_pci_driver_unprepare (d, "uid-v", vstate);
  cleanup_free char *back = bound_to ("0000:41:00.0");
  assert_string_equal (back, "nvidia");
  assert_int_equal (access (journal, F_OK), -1);

  /* A bind nobody prepared (the pod went away; or nrm restarted):
   * given back once it is stale. */
  json_decref (bind_claim (d, "uid-gone", "gpu-0000-41-00-0-vfio"));
  nrm_pci_driver_free (d);
  assert_int_equal (nrm_pci_driver_new (&h, NULL, &d, &err), 0);
  assert_int_equal (nrm_pci_driver_pool (d, NULL, &p, &err), 0);
  nrm_pool_done (&p);
  cleanup_free char *kept = bound_to ("0000:41:00.0");
  assert_string_equal (kept, "vfio-pci"); /* not stale yet */
  fake_put (root, "state/pci.nrm.io.vfio/0000:41:00.0.json",
            "{\"busID\":\"0000:41:00.0\",\"claim\":\"uid-gone\",\"driver\":\"nvidia\",\"since\":1,\"step\":\"bound\"}");
  assert_int_equal (nrm_pci_driver_pool (d, NULL, &p, &err), 0);
  nrm_pool_done (&p);
  cleanup_free char *given = bound_to ("0000:41:00.0");
  assert_string_equal (given, "nvidia");
  assert_int_equal (access (journal, F_OK), -1);

  /* vfio-pci does not take it: the failure condition, and the function
   * is back on its driver. */
  k.refuse_vfio = true;
  cleanup_json json_t *bad = bind_claim (d, "uid-f", "gpu-0000-41-00-0-vfio");
  assert_string_equal (condition_of (bad), "pci.nrm.io/vfio-failed");
  cleanup_free char *after = bound_to ("0000:41:00.0");
  assert_string_equal (after, "nvidia");
  assert_int_equal (access (journal, F_OK), -1);

  nrm_pci_driver_free (d);
  kernel_stop (&k);
  remove_tree ();
  nrm_topology_free (t);
}

/* A kernel uevent as the netlink socket gives it. */
static void
uevent (void *d, const char *action, const char *subsystem, const char *wedged)
{
  char msg[512];
  const char *path = "/devices/pci0000:40/0000:40:01.0/0000:41:00.0/drm/card1";
  int n = snprintf (msg, sizeof (msg), "%s@%s%cACTION=%s%cDEVPATH=%s%cSUBSYSTEM=%s%c", action, path, 0, action, 0, path,
                    0, subsystem, 0);
  if (wedged)
    n += snprintf (msg + n, sizeof (msg) - (size_t) n, "WEDGED=%s%c", wedged, 0);
  nrm_pci_driver_uevent (d, msg, (size_t) n);
}

static void
test_wedged (void **state)
{
  (void) state;
  struct nrm_topology *t = load_2n ();
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  nrm_error_t err = NULL;
  void *d = NULL;
  build_tree ();
  cleanup_json json_t *devs = pool_of (t, &o, root, NULL, false, &d);
  struct nrm_health_report r = { 0 };

  /* Not wedged: telemetry only, another subsystem, a torn message. */
  uevent (d, "change", "drm", "none");
  uevent (d, "change", "block", "rebind");
  nrm_pci_driver_uevent (d, "change@/x\0ACTION=change\0SUBSYSTEM=drm\0WEDGED=rebind", 46);
  assert_int_equal (nrm_pci_driver_health (d, &r, &err), 0);
  assert_int_equal (health_of (&r, "gpu-0000-41-00-0")->effect, NRM_TAINT_NONE_SET);
  nrm_health_report_done (&r);

  /* Wedged: evicted until the card is added again. */
  uevent (d, "change", "drm", "rebind,bus-reset");
  assert_int_equal (nrm_pci_driver_health (d, &r, &err), 0);
  const struct nrm_device_health *h = health_of (&r, "gpu-0000-41-00-0");
  assert_int_equal (h->health, NRM_HEALTH_UNHEALTHY);
  assert_int_equal (h->effect, NRM_TAINT_NO_EXECUTE);
  assert_string_equal (h->taint, "wedged");
  assert_non_null (strstr (h->message, "rebind,bus-reset"));
  assert_int_equal (health_of (&r, "gpu-0000-00-02-0")->effect, NRM_TAINT_NONE_SET);
  nrm_health_report_done (&r);
  uevent (d, "add", "drm", NULL);
  assert_int_equal (nrm_pci_driver_health (d, &r, &err), 0);
  assert_int_equal (health_of (&r, "gpu-0000-41-00-0")->effect, NRM_TAINT_NONE_SET);
  nrm_health_report_done (&r);

  nrm_pci_driver_free (d);
  remove_tree ();
  nrm_topology_free (t);
}

/* --- a real kernel's sysfs (tests/fixtures/sysfs-vm-pci) --------------- */

static void
test_vm_snapshot (void **state)
{
  (void) state;
  const char *src = getenv ("NRM_SRCDIR");
  cleanup_free char *tarball = xasprintf ("%s/tests/fixtures/sysfs-vm-pci.tar.xz", src ? src : ".");
  if (access (tarball, R_OK) != 0)
    skip ();
  snprintf (root, sizeof (root), "/tmp/nrm-pci-XXXXXX");
  assert_non_null (mkdtemp (root));
  cleanup_free char *cmd = xasprintf ("tar -xJf '%s' -C '%s'", tarball, root);
  assert_int_equal (system (cmd), 0);
  cleanup_free char *tree = xasprintf ("%s/sysfs-vm-pci", root);

  /* What the VM held (sysfs-vm-pci.md). */
  const struct
  {
    const char *bdf;
    int numa;
    const char *root, *driver;
    int group;
    const char *node;
  } want[] = {
    { "0000:21:00.0", 0, "pci0000:20", "virtio-pci", 19, "/dev/dri/card1" },
    { "0000:22:00.0", 0, "pci0000:20", "e1000e", 20, NULL },
    { "0000:23:00.0", 0, "pci0000:20", "nvme", 21, "/dev/nvme2" },
    { "0000:41:00.0", 1, "pci0000:40", "virtio-pci", 12, "/dev/dri/card0" },
    { "0000:42:00.0", 1, "pci0000:40", "vfio-pci", 13, "/dev/vfio/13" },
    { "0000:43:00.0", 1, "pci0000:40", "nvme", 14, "/dev/nvme0" },
    { "0000:44:00.1", 1, "pci0000:40", NULL, 22, NULL },
  };
  for (size_t i = 0; i < sizeof (want) / sizeof (want[0]); i++)
    {
      struct nrm_pci_facts f;
      nrm_error_t err = NULL;
      if (nrm_pci_facts_read (fake_root (tree), want[i].bdf, &f, &err) < 0)
        fail_msg ("%s: %s", want[i].bdf, nrm_error_msg (err));
      assert_int_equal (f.numa_node, want[i].numa);
      assert_string_equal (f.pcie_root, want[i].root);
      if (want[i].driver)
        assert_string_equal (f.driver, want[i].driver);
      else
        assert_null (f.driver);
      assert_int_equal (f.iommu_group, want[i].group);
      bool found = want[i].node == NULL;
      for (size_t k = 0; k < f.n_nodes; k++)
        found |= want[i].node && strcmp (f.nodes[k], want[i].node) == 0;
      if (!found)
        fail_msg ("%s: no device node %s", want[i].bdf, want[i].node);
      nrm_pci_facts_done (&f);
    }
  struct nrm_pci_facts pf;
  nrm_error_t err = NULL;
  assert_int_equal (nrm_pci_facts_read (fake_root (tree), "0000:44:00.0", &pf, &err), 0);
  assert_int_equal (pf.sriov_total, 2);
  assert_int_equal (pf.sriov_enabled, 2);
  nrm_pci_facts_done (&pf);
  assert_int_equal (nrm_pci_facts_read (fake_root (tree), "0000:44:00.2", &pf, &err), 0);
  assert_string_equal (pf.physfn, "0000:44:00.0");
  nrm_pci_facts_done (&pf);

  /* The driver over it, every class: the GPUs, NICs, NVMe drives and VFs,
   * not the PF whose VFs are enabled, nor bridges, AHCI or virtio 9p. */
  struct nrm_topology *t = load_2n ();
  struct nrm_publish_options o;
  nrm_publish_options_init (&o);
  cleanup_json json_t *s = json_pack ("{s:[s, s, s]}", "classes", "gpu", "nic", "nvme");
  cleanup_json json_t *devs = pool_of (t, &o, tree, s, false, NULL);
  const char *names[] = { "gpu-0000-21-00-0", "nic-0000-22-00-0",  "nvme-0000-23-00-0", "gpu-0000-41-00-0",
                          "nic-0000-42-00-0", "nvme-0000-43-00-0", "nvme-0000-44-00-1", "nvme-0000-44-00-2" };
  assert_int_equal (json_array_size (devs), sizeof (names) / sizeof (names[0]));
  for (size_t i = 0; i < sizeof (names) / sizeof (names[0]); i++)
    assert_non_null (find_dev (devs, names[i]));
  assert_string_equal (sattr (find_dev (devs, "gpu-0000-41-00-0"), NRM_STD_PCIE_ROOT_ATTR), "pci0000:40");
  nrm_topology_free (t);
  cleanup_free char *rm = xasprintf ("rm -rf '%s'", root);
  assert_int_equal (system (rm), 0);
}

int
main (void)
{
  const struct corpus_test per_machine[] = { { "devices", test_machine } };
  const struct CMUnitTest others[] = {
    cmocka_unit_test (test_bus_ids),     cmocka_unit_test (test_facts),
    cmocka_unit_test (test_pool),        cmocka_unit_test (test_prepare_and_health),
    cmocka_unit_test (test_coexistence), cmocka_unit_test (test_passthrough),
    cmocka_unit_test (test_vm_snapshot), cmocka_unit_test (test_wedged),
    cmocka_unit_test (test_carrier),
  };
  return corpus_run ("pci", per_machine, 1, others, sizeof (others) / sizeof (others[0]));
}
