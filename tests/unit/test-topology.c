/* SPDX-License-Identifier: Apache-2.0 */
/* The scan of every recorded machine agrees with hwloc's own counts, and the
 * model keeps its invariants. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
  const struct corpus_test per_machine[] = { { "scan", test_machine }, { "reserved", test_reserved } };
  const struct CMUnitTest others[] = {
    { .name = "special machines", .test_func = test_special_machines },
    { .name = "bad files", .test_func = test_bad_files },
  };
  return corpus_run ("topology", per_machine, 2, others, 2);
}
