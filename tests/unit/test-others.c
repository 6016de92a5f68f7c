/* SPDX-License-Identifier: Apache-2.0 */
/* Coexistence with other DRA drivers and device plugins, over fake kubelet
 * folders in a temporary directory: real sockets where the code wants
 * sockets, the kubelet's device-plugin checkpoint in its own format, rules
 * of the configuration, a malformed checkpoint that keeps the last good
 * state, and changes seen through the inotify descriptor. */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/pci/others.h"
#include "fakefs.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"

static char root[128], kubelet[256];

static int
setup (void **state)
{
  (void) state;
  snprintf (root, sizeof (root), "/tmp/nrm-others-XXXXXX");
  assert_non_null (mkdtemp (root));
  snprintf (kubelet, sizeof (kubelet), "%s/kubelet", root);
  return 0;
}

static int
teardown (void **state)
{
  (void) state;
  char cmd[256];
  snprintf (cmd, sizeof (cmd), "rm -rf '%s'", root);
  return system (cmd) == 0 ? 0 : -1;
}

static void mkdirs (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));
static void
mkdirs (const char *fmt, ...)
{
  char path[512];
  va_list ap;
  va_start (ap, fmt);
  vsnprintf (path, sizeof (path), fmt, ap);
  va_end (ap);
  nrm_error_t err = NULL;
  assert_int_equal (nrm_mkdir_p (path, 0755, &err), 0);
}

/* A real unix socket bound at <kubelet>/<rel>; the file stays after close. */
static void
make_socket (const char *rel)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  int n = snprintf (sa.sun_path, sizeof (sa.sun_path), "%s/%s", kubelet, rel);
  assert_true (n > 0 && (size_t) n < sizeof (sa.sun_path));
  int fd = socket (AF_UNIX, SOCK_STREAM, 0);
  assert_true (fd >= 0);
  assert_int_equal (bind (fd, (struct sockaddr *) &sa, sizeof (sa)), 0);
  close (fd);
}

static void
rm (const char *rel)
{
  char path[512];
  snprintf (path, sizeof (path), "%s/%s", kubelet, rel);
  assert_int_equal (unlink (path), 0);
}

static struct nrm_pci_others *
open_others (const char *const *skip)
{
  struct nrm_pci_others *o = NULL;
  nrm_error_t err = NULL;
  int rc = nrm_pci_others_new (kubelet, skip, &o, &err);
  if (rc < 0)
    fail_msg ("nrm_pci_others_new: %s", nrm_error_msg (err));
  return o;
}

static void
refresh (struct nrm_pci_others *o)
{
  nrm_error_t err = NULL;
  if (nrm_pci_others_refresh (o, &err) < 0)
    fail_msg ("refresh: %s", nrm_error_msg (err));
}

/* Whether the inotify descriptor became readable within a second. */
static bool
woke (struct nrm_pci_others *o)
{
  struct pollfd p = { .fd = nrm_pci_others_fd (o), .events = POLLIN };
  assert_true (p.fd >= 0);
  return poll (&p, 1, 1000) == 1;
}

static void
assert_owner (struct nrm_pci_others *o, uint16_t vendor, const char *cls, const char *bus, bool vf, const char *want)
{
  const char *who = nrm_pci_others_owner (o, vendor, cls, bus, vf);
  if (want == NULL && who != NULL)
    fail_msg ("%04x %s %s: owned by \"%s\", expected nobody", vendor, cls, bus, who);
  if (want != NULL && (who == NULL || strcmp (who, want) != 0))
    fail_msg ("%04x %s %s: owned by \"%s\", expected \"%s\"", vendor, cls, bus, who ? who : "(nobody)", want);
}

/* The describe() entry for who, or NULL. */
static const char *
described (struct nrm_pci_others *o, const char *who)
{
  static char what[256];
  cleanup_json json_t *a = nrm_pci_others_describe (o);
  assert_true (json_is_array (a));
  size_t i;
  json_t *e;
  json_array_foreach (a, i, e)
  {
    if (strcmp (json_string_value (json_object_get (e, "who")), who) == 0)
      {
        snprintf (what, sizeof (what), "%s", json_string_value (json_object_get (e, "what")));
        return what;
      }
  }
  return NULL;
}

static void
test_nothing_there (void **state)
{
  (void) state;
  /* No kubelet folder at all: no error, nobody owns anything. */
  struct nrm_pci_others *o = open_others (NULL);
  assert_owner (o, 0x10de, "gpu", "0000:3b:00.0", false, NULL);
  cleanup_json json_t *a = nrm_pci_others_describe (o);
  assert_int_equal (json_array_size (a), 0);
  refresh (o);
  nrm_pci_others_free (o);
}

static void
test_rules (void **state)
{
  (void) state;
  const char *const skip[] = { "vendor:10de",
                               "0000:3B:00.1",
                               "vendor:1002,class:accel",
                               "class:nic,vf",
                               "driver:gaudi.intel.com",
                               "resource:gpu.intel.com/xe",
                               NULL };
  struct nrm_pci_others *o = open_others (skip);
  assert_owner (o, 0x10de, "gpu", "0000:17:00.0", false, "configuration: vendor:10de");
  assert_owner (o, 0x15b3, "nic", "0000:3b:00.1", false, "configuration: 0000:3B:00.1");
  assert_owner (o, 0x15b3, "nic", "0000:3b:00.0", false, NULL);
  assert_owner (o, 0x1002, "accel", "0000:c1:00.0", false, "configuration: vendor:1002,class:accel");
  assert_owner (o, 0x1002, "gpu", "0000:c1:00.0", false, NULL);
  assert_owner (o, 0x8086, "nic", "0000:40:02.0", true, "configuration: class:nic,vf");
  assert_owner (o, 0x8086, "nic", "0000:40:00.0", false, NULL);
  assert_owner (o, 0x1da3, "accel", "0000:19:00.0", false, "configuration: driver:gaudi.intel.com");
  assert_owner (o, 0x8086, "gpu", "0000:00:02.0", false, "configuration: resource:gpu.intel.com/xe");
  assert_string_equal (described (o, "configuration: vendor:1002,class:accel"), "vendor 1002, accel");
  assert_string_equal (described (o, "configuration: 0000:3B:00.1"), "the function 0000:3b:00.1");
  assert_string_equal (described (o, "configuration: class:nic,vf"), "SR-IOV VFs, any vendor, nic");
  nrm_pci_others_free (o);
}

static void
test_bad_rules (void **state)
{
  (void) state;
  const char *bad[] = { "vendor:10d",
                        "vendor:10dex",
                        "class:tpu",
                        "driver:tpu.example.com",
                        "resource:a/b",
                        "own:",
                        "vendor:10de,vendor:8086",
                        "",
                        "vf,",
                        "0000:3b:00.8",
                        "10de",
                        "own:-x.io" };
  for (size_t i = 0; i < sizeof (bad) / sizeof (bad[0]); i++)
    {
      const char *const skip[] = { "vendor:10de", bad[i], NULL };
      struct nrm_pci_others *o = (void *) 1;
      nrm_error_t err = NULL;
      assert_int_equal (nrm_pci_others_new (kubelet, skip, &o, &err), -1);
      assert_null (o);
      char want[64];
      snprintf (want, sizeof (want), "\"%s\"", bad[i]);
      if (strstr (nrm_error_msg (err), want) == NULL)
        fail_msg ("rule %s: the error does not name it: %s", bad[i], nrm_error_msg (err));
      nrm_error_release (&err);
      nrm_error_t cerr = NULL;
      assert_int_equal (nrm_pci_others_check_rule (bad[i], &cerr), -1);
      nrm_error_release (&cerr);
    }
}

static void
test_registry (void **state)
{
  (void) state;
  mkdirs ("%s/plugins_registry", kubelet);
  make_socket ("plugins_registry/gpu.nvidia.com-reg.sock");
  make_socket ("plugins_registry/compute-domain.nvidia.com-reg.sock");
  /* Rolling update: the pod UID in the name. */
  make_socket ("plugins_registry/dra.net-0f1e2d3c-aaaa-bbbb-cccc-000000000001-reg.sock");
  make_socket ("plugins_registry/pci.nrm.io-reg.sock");
  make_socket ("plugins_registry/gpu.example.org-reg.sock");
  make_socket ("plugins_registry/ebs.csi.aws.com-reg.sock");
  make_socket ("plugins_registry/.gpu.amd.com-reg.sock");
  /* Not a socket: no registration. */
  fake_replace (kubelet, "plugins_registry/gpu.intel.com-reg.sock", "");
  const char *const skip[] = { "own:example.org", NULL };
  struct nrm_pci_others *o = open_others (skip);
  const char *nv = "gpu.nvidia.com (DRA driver registered with the kubelet)";
  assert_owner (o, 0x10de, "gpu", "0000:3b:00.0", false, nv);
  assert_owner (o, 0x10de, "accel", "0000:3b:00.0", false, NULL);
  assert_owner (o, 0x15b3, "nic", "0000:40:00.0", false, "dra.net (DRA driver registered with the kubelet)");
  assert_owner (o, 0x15b3, "ib", "0000:40:00.1", false, "dra.net (DRA driver registered with the kubelet)");
  assert_owner (o, 0x8086, "gpu", "0000:00:02.0", false, NULL);
  assert_owner (o, 0x1002, "gpu", "0000:c1:00.0", false, NULL);
  assert_string_equal (described (o, "compute-domain.nvidia.com (DRA driver registered with the kubelet)"),
                       "no PCI function");
  assert_string_equal (described (o, "pci.nrm.io (DRA driver registered with the kubelet)"), "nrm's own");
  assert_string_equal (described (o, "gpu.example.org (DRA driver registered with the kubelet)"), "nrm's own");
  assert_string_equal (described (o, "ebs.csi.aws.com (plugin registered with the kubelet)"), "not matched");
  assert_string_equal (described (o, nv), "vendor 10de, gpu");

  /* Removed: the next refresh forgets it. */
  rm ("plugins_registry/gpu.nvidia.com-reg.sock");
  assert_true (woke (o));
  refresh (o);
  assert_owner (o, 0x10de, "gpu", "0000:3b:00.0", false, NULL);
  assert_null (described (o, nv));
  nrm_pci_others_free (o);
}

static void
test_hashed_registration (void **state)
{
  (void) state;
  /* The shortest rolling-update form hides the name: the driver's own
   * plugin folder with its DRA socket tells. */
  mkdirs ("%s/plugins_registry", kubelet);
  mkdirs ("%s/plugins/gaudi.intel.com", kubelet);
  mkdirs ("%s/plugins/gpu.intel.com", kubelet); /* no socket: not running */
  make_socket ("plugins_registry/dra-AbCdEfGhIjKlMnOpQrSt_--reg.sock");
  make_socket ("plugins/gaudi.intel.com/dra-0f1e2d3c-aaaa-bbbb-cccc-000000000001.sock");
  struct nrm_pci_others *o = open_others (NULL);
  assert_owner (o, 0x1da3, "accel", "0000:19:00.0", false,
                "gaudi.intel.com (DRA driver registered with the kubelet under a hashed socket name)");
  assert_owner (o, 0x8086, "gpu", "0000:00:02.0", false, NULL);
  nrm_pci_others_free (o);
}

/* The checkpoint as the kubelet's device manager writes it (the checksum
 * is not recomputed, so any number does). */
static const char checkpoint[]
    = "{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"0f1e2d3c-aaaa-bbbb-cccc-000000000001\",\"ContainerName\":\"c\","
      "\"ResourceName\":\"nvidia.com/gpu\",\"DeviceIDs\":{\"0\":[\"GPU-5c1a6f2e-8e2b-4c1d-9f3a-2b7d8e9f0a1b\"]},"
      "\"AllocResp\":\"CgQKAggB\"}],"
      "\"RegisteredDevices\":{\"nvidia.com/gpu\":[\"GPU-5c1a6f2e-8e2b-4c1d-9f3a-2b7d8e9f0a1b\"],"
      "\"intel.com/intel_sriov_netdevice\":[\"0000:3b:02.0\",\"0000:3b:02.1\"],"
      "\"intel.com/intel_fec_5g\":[\"0000:f7:00.1\"],"
      "\"devices.kubevirt.io/tun\":[\"tun1\",\"tun2\"],"
      "\"example.com/passthrough\":[\"0000:41:00.0\"]}},"
      "\"Checksum\":3164429578}";

static void
test_checkpoint (void **state)
{
  (void) state;
  mkdirs ("%s/device-plugins", kubelet);
  mkdirs ("%s/plugins_registry", kubelet);
  make_socket ("device-plugins/kubelet.sock");
  fake_replace (kubelet, "device-plugins/kubelet_internal_checkpoint", checkpoint);
  /* The SR-IOV network device plugin's socket, in plugin-watcher mode. */
  make_socket ("plugins_registry/intel.com_intel_sriov_netdevice.sock");
  struct nrm_pci_others *o = open_others (NULL);
  assert_owner (o, 0x10de, "gpu", "0000:17:00.0", false, "nvidia.com/gpu (device plugin)");
  const char *sriov = "intel.com/intel_sriov_netdevice (SR-IOV network device plugin)";
  assert_owner (o, 0x8086, "nic", "0000:3b:02.1", true, sriov);
  assert_owner (o, 0x15b3, "ib", "0000:5e:00.3", true, sriov);
  assert_owner (o, 0x8086, "nic", "0000:3b:00.0", false, NULL);
  /* A resource of another plugin listed by PCI address: exactly those. */
  assert_owner (o, 0x8086, "accel", "0000:f7:00.1", true, "intel.com/intel_fec_5g (device plugin)");
  assert_owner (o, 0x8086, "accel", "0000:f7:00.2", true, NULL);
  assert_owner (o, 0x1af4, "nvme", "0000:41:00.0", false, "example.com/passthrough (device plugin)");
  assert_string_equal (described (o, "devices.kubevirt.io/tun (device plugin)"), "not matched");
  nrm_pci_others_free (o);
}

static void
test_device_plugin_sockets (void **state)
{
  (void) state;
  /* Plugins whose devices the checkpoint does not list yet. */
  mkdirs ("%s/device-plugins", kubelet);
  make_socket ("device-plugins/nvidia-mig-1g.10gb.sock");
  make_socket ("device-plugins/amd.com_gpu");
  make_socket ("device-plugins/qat.intel.com-generic.sock");
  make_socket ("device-plugins/mystery.sock");
  struct nrm_pci_others *o = open_others (NULL);
  assert_owner (o, 0x10de, "gpu", "0000:17:00.0", false, "nvidia.com/mig-1g.10gb (device plugin)");
  assert_owner (o, 0x1002, "accel", "0000:c1:00.0", false, "amd.com/gpu (device plugin)");
  assert_owner (o, 0x1002, "gpu", "0000:c2:00.0", false, "amd.com/gpu (device plugin)");
  assert_owner (o, 0x8086, "coproc", "0000:6b:00.0", false, "qat.intel.com/generic (device plugin)");
  assert_owner (o, 0x8086, "nic", "0000:6c:00.0", false, NULL);
  assert_string_equal (described (o, "mystery.sock (device-plugin socket)"), "not matched");
  nrm_pci_others_free (o);
}

static void
test_bad_checkpoint_keeps_state (void **state)
{
  (void) state;
  mkdirs ("%s/device-plugins", kubelet);
  fake_replace (kubelet, "device-plugins/kubelet_internal_checkpoint", checkpoint);
  struct nrm_pci_others *o = open_others (NULL);
  assert_owner (o, 0x10de, "gpu", "0000:17:00.0", false, "nvidia.com/gpu (device plugin)");
  const char *bad[] = {
    "{\"Data\":{\"RegisteredDevices\":{\"nvidia.com/gpu\":[\"GPU-1\"]}",
    "{\"Data\":{\"RegisteredDevices\":{\"nvidia.com/gpu\":[\"GPU-1\"]}}}",
    "{\"Data\":{\"RegisteredDevices\":{\"nvidia.com/gpu\":[7]}},\"Checksum\":1}",
    "{\"Data\":{\"RegisteredDevices\":{\"nvidia.com/gpu\":\"GPU-1\"}},\"Checksum\":1}",
    "{\"Data\":{\"RegisteredDevices\":{\"bad name\\n\":[]}},\"Checksum\":1}",
    "{\"Data\":{\"RegisteredDevices\":[]},\"Checksum\":1}",
    "[]",
  };
  for (size_t i = 0; i < sizeof (bad) / sizeof (bad[0]); i++)
    {
      fake_replace (kubelet, "device-plugins/kubelet_internal_checkpoint", bad[i]);
      nrm_error_t err = NULL;
      assert_int_equal (nrm_pci_others_refresh (o, &err), -1);
      if (strstr (nrm_error_msg (err), "device-plugins/kubelet_internal_checkpoint") == NULL)
        fail_msg ("checkpoint %zu: the error does not name the file: %s", i, nrm_error_msg (err));
      nrm_error_release (&err);
      assert_owner (o, 0x10de, "gpu", "0000:17:00.0", false, "nvidia.com/gpu (device plugin)");
      assert_int_equal (nrm_pci_others_check_checkpoint (bad[i], strlen (bad[i]), &err), -1);
      nrm_error_release (&err);
    }
  /* Good again: taken. An empty one (no plugin left) takes nothing. */
  fake_replace (kubelet, "device-plugins/kubelet_internal_checkpoint",
                "{\"Data\":{\"PodDeviceEntries\":null,\"RegisteredDevices\":{}},\"Checksum\":0}");
  refresh (o);
  assert_owner (o, 0x10de, "gpu", "0000:17:00.0", false, NULL);
  nrm_pci_others_free (o);

  /* A bad checkpoint at the start is an error too. */
  fake_replace (kubelet, "device-plugins/kubelet_internal_checkpoint", "not json");
  struct nrm_pci_others *p = NULL;
  nrm_error_t err = NULL;
  assert_int_equal (nrm_pci_others_new (kubelet, NULL, &p, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "kubelet_internal_checkpoint"));
  nrm_error_release (&err);
}

static void
test_late_kubelet (void **state)
{
  (void) state;
  /* nrm starts before the kubelet made its folders. */
  struct nrm_pci_others *o = open_others (NULL);
  assert_int_equal (mkdir (kubelet, 0755), 0);
  assert_true (woke (o));
  refresh (o);
  assert_false (woke (o)); /* drained */
  mkdirs ("%s/plugins_registry", kubelet);
  assert_true (woke (o));
  refresh (o);
  make_socket ("plugins_registry/gpu.amd.com-reg.sock");
  assert_true (woke (o));
  refresh (o);
  assert_owner (o, 0x1002, "gpu", "0000:c1:00.0", false, "gpu.amd.com (DRA driver registered with the kubelet)");
  /* The device-plugin folder arrives later still, and a checkpoint in it. */
  mkdirs ("%s/device-plugins", kubelet);
  assert_true (woke (o));
  refresh (o);
  fake_replace (kubelet, "device-plugins/kubelet_internal_checkpoint", checkpoint);
  assert_true (woke (o));
  refresh (o);
  assert_owner (o, 0x10de, "gpu", "0000:17:00.0", false, "nvidia.com/gpu (device plugin)");
  rm ("plugins_registry/gpu.amd.com-reg.sock");
  assert_true (woke (o));
  refresh (o);
  assert_owner (o, 0x1002, "gpu", "0000:c1:00.0", false, NULL);
  nrm_pci_others_free (o);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown (test_nothing_there, setup, teardown),
    cmocka_unit_test_setup_teardown (test_rules, setup, teardown),
    cmocka_unit_test_setup_teardown (test_bad_rules, setup, teardown),
    cmocka_unit_test_setup_teardown (test_registry, setup, teardown),
    cmocka_unit_test_setup_teardown (test_hashed_registration, setup, teardown),
    cmocka_unit_test_setup_teardown (test_checkpoint, setup, teardown),
    cmocka_unit_test_setup_teardown (test_device_plugin_sockets, setup, teardown),
    cmocka_unit_test_setup_teardown (test_bad_checkpoint_keeps_state, setup, teardown),
    cmocka_unit_test_setup_teardown (test_late_kubelet, setup, teardown),
  };
  return cmocka_run_group_tests_name ("others", tests, NULL, NULL);
}
