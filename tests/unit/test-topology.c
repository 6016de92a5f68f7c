/* SPDX-License-Identifier: Apache-2.0 */
/* The scan of every recorded machine agrees with hwloc's own counts, and the
 * model keeps its invariants. */
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
#include "tests/unit/corpus.h"
#include "topology/topology.h"

static struct nrm_topology *
load (const char *file)
{
  nrm_error_t err = NULL;
  struct nrm_topology *t = NULL;
  if (nrm_topology_load (file, &t, &err) < 0)
    fail_msg ("%s: %s", file, nrm_error_msg (err));
  return t;
}

static void
test_machine (void **state)
{
  const struct corpus_entry *c = *state;
  struct nrm_topology *t = load (c->file);
  size_t allowed_pus = 0, cores = 0, nodes = 0;
  uint64_t memory = 0;
  cleanup_bitmap hwloc_bitmap_t seen = hwloc_bitmap_alloc ();

  for (size_t i = 0; i < t->n_pus; i++)
    {
      allowed_pus += t->pus[i].allowed;
      assert_true (t->pus[i].core >= 0);
      assert_true (t->pus[i].numa >= 0);
      assert_true (hwloc_bitmap_isset (t->cores[t->pus[i].core].cpus, t->pus[i].os_index));
      if (i > 0)
        assert_true (t->pus[i - 1].os_index < t->pus[i].os_index);
    }
  for (size_t i = 0; i < t->n_cores; i++)
    if (hwloc_bitmap_intersects (t->cores[i].cpus, t->online)
        && !hwloc_bitmap_isincluded (t->cores[i].cpus, t->disallowed))
      cores++;
  for (size_t i = 0; i < t->n_numa; i++)
    {
      nodes += t->numa[i].allowed;
      memory += t->numa[i].memory;
      /* Home nodes partition the online CPUs. */
      assert_false (hwloc_bitmap_intersects (seen, t->numa[i].cpus));
      hwloc_bitmap_or (seen, seen, t->numa[i].cpus);
      if (i > 0)
        assert_true (t->numa[i - 1].os_index < t->numa[i].os_index);
      assert_true (t->numa[i].tier >= 0);
    }
  assert_true (hwloc_bitmap_isequal (seen, t->online));

  assert_int_equal (t->n_packages, c->packages);
  assert_int_equal (nodes, c->numa_nodes);
  assert_int_equal (cores, c->cores);
  assert_int_equal (allowed_pus, c->pus);
  assert_int_equal (t->n_l3, c->l3);
  assert_int_equal (memory, c->memory);
  assert_false (hwloc_bitmap_intersects (t->offline, t->online));

  /* The JSON model is complete and stable. */
  cleanup_json json_t *a = nrm_topology_to_json (t);
  cleanup_json json_t *b = nrm_topology_to_json (t);
  cleanup_free char *sa = json_dumps (a, JSON_COMPACT);
  cleanup_free char *sb = json_dumps (b, JSON_COMPACT);
  assert_non_null (sa);
  assert_string_equal (sa, sb);
  assert_int_equal (json_array_size (json_object_get (a, "numaNodes")), t->n_numa);
  assert_int_equal (json_array_size (json_object_get (a, "cores")), t->n_cores);
  nrm_topology_free (t);
}

/* Reserving the first CPU of every node takes exactly those CPUs out. */
static void
test_reserved (void **state)
{
  const struct corpus_entry *c = *state;
  struct nrm_topology *t = load (c->file);
  struct nrm_node_settings s = { 0 };
  nrm_error_t err = NULL;
  size_t before = 0, after = 0;

  s.reserved_cpus = hwloc_bitmap_alloc ();
  for (size_t i = 0; i < t->n_numa; i++)
    {
      cleanup_bitmap hwloc_bitmap_t a = nrm_topology_node_allocatable (t, i);
      before += (size_t) hwloc_bitmap_weight (a);
      if (!hwloc_bitmap_iszero (t->numa[i].cpus))
        hwloc_bitmap_set (s.reserved_cpus, (unsigned) hwloc_bitmap_first (t->numa[i].cpus));
    }
  assert_int_equal (nrm_topology_apply_settings (t, &s, NULL, &err), 0);
  for (size_t i = 0; i < t->n_numa; i++)
    {
      cleanup_bitmap hwloc_bitmap_t a = nrm_topology_node_allocatable (t, i);
      after += (size_t) hwloc_bitmap_weight (a);
      assert_false (hwloc_bitmap_intersects (a, s.reserved_cpus));
    }
  assert_int_equal (before - after, (size_t) hwloc_bitmap_weight (s.reserved_cpus));

  /* A CPU that does not exist: an error naming it, and nothing changes. */
  hwloc_bitmap_set (s.reserved_cpus, 60000);
  assert_int_equal (nrm_topology_apply_settings (t, &s, NULL, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "60000"));
  nrm_error_release (&err);
  hwloc_bitmap_clr (s.reserved_cpus, 60000);
  assert_true (hwloc_bitmap_isequal (t->reserved, s.reserved_cpus));

  hwloc_bitmap_free (s.reserved_cpus);
  nrm_topology_free (t);
}

/* resource.kubernetes.io/numaNode lists (KEP-6072) on every machine match
 * the rule written in the test from the distance matrix; a short buffer
 * gets the start of the list. */
static void
test_near_nodes (void **state)
{
  const struct corpus_entry *c = *state;
  struct nrm_topology *t = load (c->file);
  cleanup_free int64_t *want = calloc (t->n_numa, sizeof (int64_t));
  cleanup_free int64_t *got = calloc (t->n_numa, sizeof (int64_t));

  for (size_t i = 0; i < t->n_numa; i++)
    {
      size_t nw = corpus_near_nodes (t, i, want);
      size_t ng = nrm_topology_near_nodes (t, i, got, t->n_numa);
      char ws[4096] = "", gs[4096] = "";
      for (size_t k = 0; k < nw; k++)
        snprintf (ws + strlen (ws), sizeof (ws) - strlen (ws), " %lld", (long long) want[k]);
      for (size_t k = 0; k < ng; k++)
        snprintf (gs + strlen (gs), sizeof (gs) - strlen (gs), " %lld", (long long) got[k]);
      if (strcmp (ws, gs) != 0)
        fail_msg ("%s node %u: [%s ] instead of [%s ]", c->name, t->numa[i].os_index, gs, ws);
      if (nw > 1)
        {
          assert_int_equal (nrm_topology_near_nodes (t, i, got, nw - 1), nw - 1);
          assert_memory_equal (got, want, (nw - 1) * sizeof (int64_t));
        }
      assert_int_equal (nrm_topology_near_nodes (t, i, got, 0), 0);
    }
  nrm_topology_free (t);
}

static void
expect_near (const char *file, unsigned node, const char *want)
{
  char path[4096], got[4096] = "";
  int64_t out[64];
  snprintf (path, sizeof (path), "%s/%s", getenv ("NRM_TOPOLOGIES"), file);
  struct nrm_topology *t = load (path);
  int i = nrm_topology_numa_index (t, node);
  assert_true (i >= 0);
  size_t n = nrm_topology_near_nodes (t, (size_t) i, out, 64);
  for (size_t k = 0; k < n; k++)
    snprintf (got + strlen (got), sizeof (got) - strlen (got), "%s%lld", k ? "," : "", (long long) out[k]);
  if (strcmp (got, want) != 0)
    fail_msg ("%s node %u: [%s] instead of [%s]", file, node, got, want);
  nrm_topology_free (t);
}

/* Lists checked by hand against the recorded distance rows. */
static void
test_near_nodes_by_hand (void **state)
{
  (void) state;
  /* SGI Altix: node 16 is CPU-less memory at distance 14 from every node,
   * the other nodes are 17 apart within a group of 4. A node with CPUs gets
   * the CPU-less node (its socket is unknown, so it is kept); the CPU-less
   * node, whose own socket is unknown, gets every node at 14. */
  expect_near ("128ia64-17n4s2c.xml", 0, "0,16");
  expect_near ("128ia64-17n4s2c.xml", 13, "13,16");
  expect_near ("128ia64-17n4s2c.xml", 16, "16,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15");
  /* QEMU memory tiers: one package, every distance 20; CPU-less HBM node 4
   * and NVM nodes 6, 8, 9 are kept, the HBM node's list holds all. */
  expect_near ("fakeheteromemtiers.xml", 4, "4,0,1,2,6,8,9");
  expect_near ("fakeheteromemtiers.xml", 0, "0,1,2,4,6,8,9");
  /* Sparse numbering: node 2 is 16 from 0, 33, 34, 45, 72, 73; only 33
   * shares its package. */
  expect_near ("48amd64-4d2n6c-sparse.xml", 2, "2,33");
  expect_near ("48amd64-4d2n6c-sparse.xml", 73, "73,72");
  /* Nearest nodes on other sockets only. */
  expect_near ("16amd64-8n2c.xml", 0, "0");
  /* SNC2 Optane: the two nodes of a package are 11 apart. */
  expect_near ("memorysidecaches.xml", 1, "1,3");
  /* A CPUID dump records no distances: the node alone. */
  expect_near ("AMD-17h-Zen-2xEpyc-7451.xml", 0, "0");
}

static void
test_special_machines (void **state)
{
  const char *dir = getenv ("NRM_TOPOLOGIES");
  char path[4096];
  struct nrm_topology *t;
  (void) state;

  /* Offline CPUs are known but never part of a node. */
  snprintf (path, sizeof (path), "%s/offline-cpu0-node0.xml", dir);
  t = load (path);
  assert_int_equal (hwloc_bitmap_weight (t->offline), 7);
  assert_false (hwloc_bitmap_isset (t->online, 0));
  nrm_topology_free (t);

  /* A hybrid CPU: two kinds, P cores are "performance". */
  snprintf (path, sizeof (path), "%s/20em64t-hybrid-1p6c2t+2ca4co1t.xml", dir);
  t = load (path);
  assert_int_equal (t->n_kinds, 2);
  size_t perf = 0, eff = 0;
  for (size_t i = 0; i < t->n_pus; i++)
    {
      if (strcmp (t->kinds[t->pus[i].kind].name, "performance") == 0)
        perf++;
      else
        eff++;
    }
  assert_int_equal (perf, 12);
  assert_int_equal (eff, 8);
  nrm_topology_free (t);

  /* Memory tiers: HBM is faster than DRAM, NVM slower; CPU-less nodes. */
  snprintf (path, sizeof (path), "%s/fakeheteromemtiers.xml", dir);
  t = load (path);
  size_t cpuless = 0;
  for (size_t i = 0; i < t->n_numa; i++)
    {
      const char *k = t->numa[i].kind;
      int want = strcmp (k, "HBM") == 0 ? 0 : strcmp (k, "DRAM") == 0 ? 1 : 2;
      assert_int_equal (t->numa[i].tier, want);
      cpuless += hwloc_bitmap_iszero (t->numa[i].cpus);
    }
  assert_int_equal (cpuless, 4);
  nrm_topology_free (t);

  /* PCI devices carry their NUMA node and PCIe root. */
  snprintf (path, sizeof (path), "%s/power8gpudistances.xml", dir);
  t = load (path);
  size_t gpus = 0;
  for (size_t i = 0; i < t->n_pci; i++)
    if (t->pci[i].os_kind && strcmp (t->pci[i].os_kind, "gpu") == 0)
      {
        gpus++;
        assert_true (t->pci[i].numa >= 0);
        assert_true (strncmp (t->pci[i].pcie_root, "pci", 3) == 0);
      }
  assert_true (gpus >= 4);
  assert_non_null (t->distances);
  nrm_topology_free (t);
}

static const struct nrm_pci_device *
pci_by_id (const struct nrm_topology *t, const char *bus_id)
{
  for (size_t i = 0; i < t->n_pci; i++)
    if (strcmp (t->pci[i].bus_id, bus_id) == 0)
      return &t->pci[i];
  fail_msg ("%s: no PCI device %s", t->source, bus_id);
  return NULL;
}

static json_t *
pci_json (json_t *model, const char *bus_id)
{
  size_t i;
  json_t *d;
  json_array_foreach (json_object_get (model, "pciDevices"), i, d)
  {
    if (strcmp (json_string_value (json_object_get (d, "busID")), bus_id) == 0)
      return d;
  }
  fail_msg ("no PCI device %s in the JSON model", bus_id);
  return NULL;
}

/* pci.ids names as recorded: both, the vendor alone, or none. */
static void
test_pci_names (void **state)
{
  char path[4096];
  (void) state;
  snprintf (path, sizeof (path), "%s/24em64t-2n6c2t-pci.xml", getenv ("NRM_TOPOLOGIES"));
  struct nrm_topology *t = load (path);
  const struct nrm_pci_device *nic = pci_by_id (t, "0000:04:00.0");
  assert_string_equal (nic->vendor_name, "Intel Corporation");
  assert_string_equal (nic->device_name, "82576 Gigabit Network Connection");
  const struct nrm_pci_device *gpu = pci_by_id (t, "0000:06:00.0");
  assert_string_equal (gpu->vendor_name, "nVidia Corporation");
  assert_null (gpu->device_name);
  cleanup_json json_t *m = nrm_topology_to_json (t);
  assert_string_equal (json_string_value (json_object_get (pci_json (m, "0000:04:00.0"), "deviceName")),
                       "82576 Gigabit Network Connection");
  assert_true (json_is_null (json_object_get (pci_json (m, "0000:06:00.0"), "deviceName")));
  nrm_topology_free (t);

  /* Recorded without names. */
  snprintf (path, sizeof (path), "%s/power8gpudistances.xml", getenv ("NRM_TOPOLOGIES"));
  t = load (path);
  assert_true (t->n_pci > 0);
  cleanup_json json_t *m2 = nrm_topology_to_json (t);
  for (size_t i = 0; i < t->n_pci; i++)
    {
      assert_null (t->pci[i].vendor_name);
      assert_null (t->pci[i].device_name);
      json_t *d = pci_json (m2, t->pci[i].bus_id);
      assert_true (json_is_null (json_object_get (d, "vendorName")));
      assert_true (json_is_null (json_object_get (d, "deviceName")));
    }
  nrm_topology_free (t);
}

/* Recorded names with a control byte and a byte that is not UTF-8 come out
 * escaped, and the JSON model still holds them. */
static void
test_pci_names_hostile (void **state)
{
  char src[4096], tmpl[] = "/tmp/nrm-test-pci-XXXXXX";
  (void) state;
  snprintf (src, sizeof (src), "%s/24em64t-2n6c2t-pci.xml", getenv ("NRM_TOPOLOGIES"));
  FILE *in = fopen (src, "re");
  assert_non_null (in);
  int fd = mkstemp (tmpl);
  assert_true (fd >= 0);
  FILE *out = fdopen (fd, "w");
  char line[8192];
  bool done = false;
  while (fgets (line, sizeof (line), in))
    {
      const char *needle = "value=\"Intel Corporation\"";
      char *at = strstr (line, needle);
      if (at)
        {
          fprintf (out, "%.*svalue=\"Intel\x01\xff Corporation\"%s", (int) (at - line), line, at + strlen (needle));
          done = true;
        }
      else
        fputs (line, out);
    }
  fclose (in);
  fclose (out);
  assert_true (done);
  struct nrm_topology *t = load (tmpl);
  unlink (tmpl);
  size_t escaped = 0;
  for (size_t i = 0; i < t->n_pci; i++)
    if (t->pci[i].vendor_name && strcmp (t->pci[i].vendor_name, "Intel\\x01\\xff Corporation") == 0)
      escaped++;
    else if (t->pci[i].vendor_name)
      assert_string_not_equal (t->pci[i].vendor_name, "Intel Corporation");
  assert_int_equal (escaped, 4);
  cleanup_json json_t *m = nrm_topology_to_json (t);
  cleanup_free char *dump = json_dumps (m, JSON_COMPACT);
  assert_non_null (dump);
  assert_non_null (strstr (dump, "Intel\\\\x01\\\\xff Corporation"));
  nrm_topology_free (t);
}

/* The live machine, where hwloc's pci plugin and the pci.ids database give
 * names: every name is printable and in the JSON model. */
static void
test_pci_names_live (void **state)
{
  nrm_error_t err = NULL;
  struct nrm_topology *t = NULL;
  size_t named = 0;
  (void) state;
  if (nrm_topology_load (NULL, &t, &err) < 0)
    {
      nrm_error_release (&err);
      skip ();
    }
  for (size_t i = 0; i < t->n_pci; i++)
    named += t->pci[i].vendor_name != NULL || t->pci[i].device_name != NULL;
  if (named == 0)
    {
      print_message ("SKIP: this host's PCI devices have no names (no hwloc pci plugin or no pci.ids)\n");
      nrm_topology_free (t);
      skip ();
    }
  cleanup_json json_t *m = nrm_topology_to_json (t);
  for (size_t i = 0; i < t->n_pci; i++)
    {
      json_t *d = pci_json (m, t->pci[i].bus_id);
      const char *names[2] = { t->pci[i].vendor_name, t->pci[i].device_name };
      const char *keys[2] = { "vendorName", "deviceName" };
      for (int k = 0; k < 2; k++)
        {
          if (names[k] == NULL)
            {
              assert_true (json_is_null (json_object_get (d, keys[k])));
              continue;
            }
          assert_true (names[k][0] != '\0');
          for (const char *c = names[k]; *c; c++)
            assert_true ((unsigned char) *c >= 0x20 && *c != 0x7f);
          assert_string_equal (json_string_value (json_object_get (d, keys[k])), names[k]);
        }
    }
  nrm_topology_free (t);
}

static void
test_bad_files (void **state)
{
  nrm_error_t err = NULL;
  struct nrm_topology *t = NULL;
  char tmpl[] = "/tmp/nrm-test-XXXXXX";
  (void) state;

  assert_int_equal (nrm_topology_load ("/nonexistent/machine.xml", &t, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "/nonexistent/machine.xml"));
  nrm_error_release (&err);

  int fd = mkstemp (tmpl);
  assert_true (fd >= 0);
  assert_int_equal (write (fd, "<topology><object type=", 23), 23);
  close (fd);
  assert_int_equal (nrm_topology_load (tmpl, &t, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), tmpl));
  nrm_error_release (&err);
  assert_null (t);
  unlink (tmpl);
}

int
main (void)
{
  const struct corpus_test per_machine[]
      = { { "scan", test_machine }, { "reserved", test_reserved }, { "near nodes", test_near_nodes } };
  const struct CMUnitTest others[] = {
    { .name = "special machines", .test_func = test_special_machines },
    { .name = "near nodes by hand", .test_func = test_near_nodes_by_hand },
    { .name = "PCI names", .test_func = test_pci_names },
    { .name = "PCI names escaped", .test_func = test_pci_names_hostile },
    { .name = "PCI names on the live machine", .test_func = test_pci_names_live },
    { .name = "bad files", .test_func = test_bad_files },
  };
  return corpus_run ("topology", per_machine, 3, others, sizeof (others) / sizeof (others[0]));
}
