/* SPDX-License-Identifier: Apache-2.0 */
/* Placement under seeded random churn over every recorded machine: no CPU in
 * two claims, reserved and isolated CPUs never handed out, whole cores with
 * full-pcpus-only, one L3 group / one NUMA node whenever that was possible,
 * deterministic answers, and releasing everything restores the start. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpuset/placement.h"
#include "nrm/base/cleanup.h"
#include "tests/unit/corpus.h"
#include "tests/rng.h"
#include "topology/topology.h"

#define STEPS 4000
#define MAX_CLAIMS 256

static uint64_t rng;

static uint32_t
next (void)
{
  return rng_next (&rng);
}

static bool
one_of (const struct nrm_topology *t, hwloc_const_bitmap_t set, bool l3)
{
  size_t n = l3 ? t->n_l3 : t->n_numa;
  for (size_t i = 0; i < n; i++)
    if (hwloc_bitmap_isincluded (set, l3 ? t->l3[i].cpus : t->numa[i].cpus))
      return true;
  return false;
}

/* Could count CPUs of `cand` fit inside one unit (L3 group or NUMA node)? */
static bool
fits_one (const struct nrm_topology *t, hwloc_const_bitmap_t cand, size_t count, bool l3)
{
  size_t n = l3 ? t->n_l3 : t->n_numa;
  for (size_t i = 0; i < n; i++)
    {
      cleanup_bitmap hwloc_bitmap_t s = hwloc_bitmap_dup (l3 ? t->l3[i].cpus : t->numa[i].cpus);
      hwloc_bitmap_and (s, s, cand);
      if ((size_t) hwloc_bitmap_weight (s) >= count)
        return true;
    }
  return false;
}

/* Could count CPUs of `cand` be whole cores of one L3 group (all of its
 * cores one size, count a multiple of it)? Then no core need be split. */
static bool
fits_one_l3_whole (const struct nrm_topology *t, hwloc_const_bitmap_t cand, size_t count)
{
  for (size_t i = 0; i < t->n_l3; i++)
    {
      size_t whole = 0, size = 0;
      bool uniform = true;
      for (size_t k = 0; k < t->n_cores; k++)
        {
          int w = hwloc_bitmap_weight (t->cores[k].cpus);
          if (w <= 0 || !hwloc_bitmap_isincluded (t->cores[k].cpus, t->l3[i].cpus))
            continue;
          if (size && size != (size_t) w)
            uniform = false;
          size = (size_t) w;
          if (hwloc_bitmap_isincluded (t->cores[k].cpus, cand))
            whole += (size_t) w;
        }
      if (uniform && size && count % size == 0 && whole >= count)
        return true;
    }
  return false;
}

static void
test_churn (void **state)
{
  const struct corpus_entry *c = *state;
  nrm_error_t err = NULL;
  struct nrm_topology *t = NULL;
  if (nrm_topology_load (c->file, &t, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));

  /* Reserve the first CPU of the machine, isolate the last online one. */
  struct nrm_node_settings s = { 0 };
  s.reserved_cpus = hwloc_bitmap_alloc ();
  s.isolated_cpus = hwloc_bitmap_alloc ();
  hwloc_bitmap_set (s.reserved_cpus, (unsigned) hwloc_bitmap_first (t->online));
  if (hwloc_bitmap_weight (t->online) > 2)
    hwloc_bitmap_set (s.isolated_cpus, (unsigned) hwloc_bitmap_last (t->online));
  assert_int_equal (nrm_topology_apply_settings (t, &s, NULL, &err), 0);

  cleanup_bitmap hwloc_bitmap_t all = hwloc_bitmap_dup (t->online);
  hwloc_bitmap_andnot (all, all, t->reserved);
  hwloc_bitmap_andnot (all, all, t->disallowed);
  cleanup_bitmap hwloc_bitmap_t free_set = hwloc_bitmap_dup (all);
  cleanup_bitmap hwloc_bitmap_t initial = hwloc_bitmap_dup (free_set);
  hwloc_bitmap_t claims[MAX_CLAIMS];
  size_t n_claims = 0, placed = 0;
  size_t total = (size_t) hwloc_bitmap_weight (all);
  rng = 0x9e3779b97f4a7c15ULL ^ total;

  for (int step = 0; step < STEPS; step++)
    {
      bool alloc = n_claims == 0 || (n_claims < MAX_CLAIMS && next () % 100 < 55);
      if (!alloc)
        {
          size_t k = next () % n_claims;
          assert_false (hwloc_bitmap_intersects (claims[k], free_set));
          hwloc_bitmap_or (free_set, free_set, claims[k]);
          hwloc_bitmap_free (claims[k]);
          claims[k] = claims[--n_claims];
          continue;
        }
      struct nrm_cpu_request req = { 0 };
      size_t max = total / 4 > 0 ? total / 4 : 1;
      req.count = 1 + next () % max;
      uint32_t o = next ();
      if (o % 5 == 0)
        req.options |= NRM_OPT_FULL_PCPUS_ONLY;
      if (o % 7 == 0 && !(req.options & NRM_OPT_FULL_PCPUS_ONLY))
        req.options |= NRM_OPT_DISTRIBUTE_ACROSS_CORES;
      if (o % 11 == 0)
        req.options |= NRM_OPT_DISTRIBUTE_ACROSS_NUMA;
      if (o % 13 == 0)
        req.options |= NRM_OPT_ALIGN_BY_SOCKET;
      req.isolated = o % 17 == 0;
      if (o % 19 == 0)
        req.options |= NRM_OPT_PREFER_ALIGN_UNCORECACHE;
      cleanup_bitmap hwloc_bitmap_t within = NULL;
      if (o % 3 == 0 && t->n_numa > 1)
        {
          /* A NUMA-node device, as the numa device mode allocates them. */
          within = hwloc_bitmap_dup (t->numa[next () % t->n_numa].cpus);
          req.within = within;
        }

      cleanup_bitmap hwloc_bitmap_t out = hwloc_bitmap_alloc ();
      cleanup_bitmap hwloc_bitmap_t again = hwloc_bitmap_alloc ();
      int r = nrm_place_cpus (t, free_set, &req, out, &err);
      int r2 = nrm_place_cpus (t, free_set, &req, again, &err);
      assert_int_equal (r, r2);
      assert_true (hwloc_bitmap_isequal (out, again));

      /* What the request could use at all. */
      cleanup_bitmap hwloc_bitmap_t cand = hwloc_bitmap_dup (free_set);
      if (within)
        hwloc_bitmap_and (cand, cand, within);
      if (req.isolated)
        hwloc_bitmap_and (cand, cand, t->isolated);
      else
        hwloc_bitmap_andnot (cand, cand, t->isolated);
      if (r < 0)
        {
          assert_true (hwloc_bitmap_iszero (out));
          /* Without full cores only, a request fails only when too few
           * CPUs are usable. */
          if (!(req.options & NRM_OPT_FULL_PCPUS_ONLY) && (size_t) hwloc_bitmap_weight (cand) >= req.count)
            {
              cleanup_free char *cs = nrm_cpulist_format (cand), *fs = nrm_cpulist_format (free_set);
              fail_msg ("%s: %zu CPUs with options %#x failed (%s) though %d usable: %s (free %s)", c->name, req.count,
                        req.options, nrm_error_msg (err), hwloc_bitmap_weight (cand), cs, fs);
            }
          nrm_error_release (&err);
          continue;
        }
      placed++;
      assert_int_equal (hwloc_bitmap_weight (out), req.count);
      assert_true (hwloc_bitmap_isincluded (out, cand));
      assert_false (hwloc_bitmap_intersects (out, t->reserved));
      if (req.options & NRM_OPT_FULL_PCPUS_ONLY)
        for (size_t k = 0; k < t->n_cores; k++)
          if (hwloc_bitmap_intersects (out, t->cores[k].cpus))
            assert_true (hwloc_bitmap_isincluded (t->cores[k].cpus, out));
      if (!(req.options & (NRM_OPT_DISTRIBUTE_ACROSS_NUMA | NRM_OPT_FULL_PCPUS_ONLY)))
        {
          if (fits_one (t, cand, req.count, false))
            assert_true (one_of (t, out, false));
          /* One L3 group whenever one holds the claim in whole cores; with
           * prefer-align-cpus-by-uncorecache whenever one holds it at all
           * (else whole cores come first: two groups may split fewer). */
          bool strict = req.options & NRM_OPT_PREFER_ALIGN_UNCORECACHE;
          if (t->n_l3 > 0 && !(req.options & NRM_OPT_DISTRIBUTE_ACROSS_CORES) && one_of (t, cand, false)
              && (strict ? fits_one (t, cand, req.count, true) : fits_one_l3_whole (t, cand, req.count)))
            assert_true (one_of (t, out, true));
        }
      for (size_t k = 0; k < n_claims; k++)
        assert_false (hwloc_bitmap_intersects (out, claims[k]));
      hwloc_bitmap_andnot (free_set, free_set, out);
      claims[n_claims++] = hwloc_bitmap_dup (out);
    }
  for (size_t k = 0; k < n_claims; k++)
    {
      hwloc_bitmap_or (free_set, free_set, claims[k]);
      hwloc_bitmap_free (claims[k]);
    }
  assert_true (hwloc_bitmap_isequal (free_set, initial));
  assert_true (placed > STEPS / 10);
  hwloc_bitmap_free (s.reserved_cpus);
  hwloc_bitmap_free (s.isolated_cpus);
  nrm_topology_free (t);
}

/* Hand-checked answers on a 2-socket, 2x6-core SMT2 machine (even CPUs on
 * node 0, odd on node 1; siblings n and n+12). */
static void
test_golden (void **state)
{
  (void) state;
  char path[4096];
  nrm_error_t err = NULL;
  struct nrm_topology *t = NULL;
  snprintf (path, sizeof (path), "%s/24em64t-2n6c2t-pci.xml", getenv ("NRM_TOPOLOGIES"));
  assert_int_equal (nrm_topology_load (path, &t, &err), 0);
  cleanup_bitmap hwloc_bitmap_t free_set = hwloc_bitmap_dup (t->online);
  cleanup_bitmap hwloc_bitmap_t out = hwloc_bitmap_alloc ();
  struct nrm_cpu_request req = { .count = 4 };
  cleanup_free char *s = NULL;

  /* 4 CPUs: two whole cores of one node. */
  assert_int_equal (nrm_place_cpus (t, free_set, &req, out, &err), 0);
  s = nrm_cpulist_format (out);
  assert_string_equal (s, "0,2,12,14");
  hwloc_bitmap_andnot (free_set, free_set, out);

  /* 3 CPUs: a whole core and a thread; the next claim's single CPU takes
   * the split core's sibling rather than splitting another core. */
  req.count = 3;
  assert_int_equal (nrm_place_cpus (t, free_set, &req, out, &err), 0);
  free (s);
  s = nrm_cpulist_format (out);
  assert_string_equal (s, "4,6,16");
  hwloc_bitmap_andnot (free_set, free_set, out);
  req.count = 1;
  assert_int_equal (nrm_place_cpus (t, free_set, &req, out, &err), 0);
  free (s);
  s = nrm_cpulist_format (out);
  assert_string_equal (s, "18");
  hwloc_bitmap_andnot (free_set, free_set, out);

  /* distribute-cpus-across-cores: no siblings while cores are left. */
  hwloc_bitmap_copy (free_set, t->online);
  req.count = 4;
  req.options = NRM_OPT_DISTRIBUTE_ACROSS_CORES;
  assert_int_equal (nrm_place_cpus (t, free_set, &req, out, &err), 0);
  for (size_t k = 0; k < t->n_cores; k++)
    {
      cleanup_bitmap hwloc_bitmap_t x = hwloc_bitmap_dup (t->cores[k].cpus);
      hwloc_bitmap_and (x, x, out);
      assert_true (hwloc_bitmap_weight (x) <= 1);
    }

  /* 16 CPUs cannot fit one node (12 each): spread evenly with
   * distribute-cpus-across-numa, 8 + 8. */
  hwloc_bitmap_copy (free_set, t->online);
  req.count = 16;
  req.options = NRM_OPT_DISTRIBUTE_ACROSS_NUMA;
  assert_int_equal (nrm_place_cpus (t, free_set, &req, out, &err), 0);
  cleanup_bitmap hwloc_bitmap_t n0 = hwloc_bitmap_dup (out);
  hwloc_bitmap_and (n0, n0, t->numa[0].cpus);
  assert_int_equal (hwloc_bitmap_weight (n0), 8);

  /* full-pcpus-only refuses an odd count. */
  req.count = 3;
  req.options = NRM_OPT_FULL_PCPUS_ONLY;
  assert_int_equal (nrm_place_cpus (t, free_set, &req, out, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "whole cores"));
  nrm_error_release (&err);

  /* Options by name. */
  unsigned opts = 0;
  assert_int_equal (nrm_cpu_option_parse ("full-pcpus-only", &opts, &err), 0);
  assert_int_equal (opts, NRM_OPT_FULL_PCPUS_ONLY);
  assert_int_equal (nrm_cpu_option_parse ("half-pcpus", &opts, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "half-pcpus"));
  nrm_error_release (&err);
  nrm_topology_free (t);
}

static struct nrm_topology *
load (const char *name)
{
  char path[4096];
  nrm_error_t err = NULL;
  struct nrm_topology *t = NULL;
  snprintf (path, sizeof (path), "%s/%s", getenv ("NRM_TOPOLOGIES"), name);
  assert_int_equal (nrm_topology_load (path, &t, &err), 0);
  return t;
}

/* A recorded machine, all its CPUs free, and an empty result. */
struct golden
{
  struct nrm_topology *t;
  hwloc_bitmap_t free_set, out;
};

static void
golden_start (struct golden *g, const char *name)
{
  g->t = load (name);
  g->free_set = hwloc_bitmap_dup (g->t->online);
  g->out = hwloc_bitmap_alloc ();
}

static void
golden_end (struct golden *g)
{
  hwloc_bitmap_free (g->free_set);
  hwloc_bitmap_free (g->out);
  nrm_topology_free (g->t);
}

/* Marks `threads` CPUs of core k as taken (0: the whole core). */
static void
take (const struct nrm_topology *t, hwloc_bitmap_t free_set, size_t k, int threads)
{
  int cpu, n = 0;
  hwloc_bitmap_foreach_begin (cpu, t->cores[k].cpus)
  {
    if (threads == 0 || n++ < threads)
      hwloc_bitmap_clr (free_set, (unsigned) cpu);
  }
  hwloc_bitmap_foreach_end ();
}

/* Is every core that the claim touches wholly the claim's? */
static bool
whole_cores_only (const struct nrm_topology *t, hwloc_const_bitmap_t out)
{
  for (size_t k = 0; k < t->n_cores; k++)
    if (hwloc_bitmap_intersects (t->cores[k].cpus, out) && !hwloc_bitmap_isincluded (t->cores[k].cpus, out))
      return false;
  return true;
}

/* Among NUMA nodes that hold a claim, the one with an L3 group that holds
 * it wins over a fuller node where it would span groups. */
static void
test_golden_node_by_l3 (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  struct golden g;
  golden_start (&g, "AMD-19h-Zen4-2xEpyc-9654.xml");
  /* Node 0: two whole free cores left in each of its L3 groups. */
  size_t *left = calloc (g.t->n_l3 + 1, sizeof (size_t));
  for (size_t k = 0; k < g.t->n_cores; k++)
    if (g.t->cores[k].numa == 0 && g.t->cores[k].l3 >= 0 && left[g.t->cores[k].l3]++ >= 2)
      take (g.t, g.free_set, k, 0);
  free (left);
  struct nrm_cpu_request req = { .count = 6 };
  assert_int_equal (nrm_place_cpus (g.t, g.free_set, &req, g.out, &err), 0);
  assert_true (hwloc_bitmap_isincluded (g.out, g.t->numa[1].cpus));
  assert_true (one_of (g.t, g.out, true));
  assert_true (whole_cores_only (g.t, g.out));
  golden_end (&g);
}

/* A claim larger than any L3 group takes whole cores from the groups
 * before the free threads of half-used cores. */
static void
test_golden_whole_cores_across_groups (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  struct golden g;
  golden_start (&g, "Intel-IvyBridge-12xXeon-E5-4620v2.xml");
  /* One thread of the first core of every group is taken: each group has
   * 7 whole cores and one half-used core (15 CPUs). */
  bool *seen = calloc (g.t->n_l3 + 1, sizeof (bool));
  for (size_t k = 0; k < g.t->n_cores; k++)
    if (g.t->cores[k].l3 >= 0 && !seen[g.t->cores[k].l3])
      {
        seen[g.t->cores[k].l3] = true;
        take (g.t, g.free_set, k, 1);
      }
  free (seen);
  struct nrm_cpu_request req = { .count = 40 };
  assert_int_equal (nrm_place_cpus (g.t, g.free_set, &req, g.out, &err), 0);
  assert_int_equal (hwloc_bitmap_weight (g.out), 40);
  assert_true (whole_cores_only (g.t, g.out));
  /* 14 + 14 + 12: three groups. */
  size_t groups = 0;
  for (size_t i = 0; i < g.t->n_l3; i++)
    groups += hwloc_bitmap_intersects (g.out, g.t->l3[i].cpus);
  assert_int_equal (groups, 3);
  golden_end (&g);
}

/* The odd thread of a claim stays in the claim's L3 group, splitting a
 * free core there, rather than pair up with a half-used core of another
 * group: over churn on the recorded machines that keeps more claims in one
 * group and leaves fewer claims sharing a core (bench-placement, DRA
 * set-up). */
static void
test_golden_odd_thread (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  struct golden g;
  golden_start (&g, "Intel-Skylake-2xXeon6140.xml");
  /* Group 1: everything taken but one thread of one core. */
  bool half = false;
  for (size_t k = 0; k < g.t->n_cores; k++)
    if (g.t->cores[k].l3 == 1)
      {
        take (g.t, g.free_set, k, half ? 0 : 1);
        half = true;
      }
  struct nrm_cpu_request req = { .count = 3 };
  assert_int_equal (nrm_place_cpus (g.t, g.free_set, &req, g.out, &err), 0);
  assert_true (hwloc_bitmap_isincluded (g.out, g.t->l3[0].cpus));
  /* One core split: the odd thread's, in group 0. */
  size_t split = 0;
  for (size_t k = 0; k < g.t->n_cores; k++)
    split
        += hwloc_bitmap_intersects (g.t->cores[k].cpus, g.out) && !hwloc_bitmap_isincluded (g.t->cores[k].cpus, g.out);
  assert_int_equal (split, 1);

  req.options = NRM_OPT_PREFER_ALIGN_UNCORECACHE;
  assert_int_equal (nrm_place_cpus (g.t, g.free_set, &req, g.out, &err), 0);
  assert_true (hwloc_bitmap_isincluded (g.out, g.t->l3[0].cpus));

  /* Group 1 with a whole core and a half-used one (3 CPUs) cannot hold 5:
   * all 5 come from group 0, one core split there, none from group 1. */
  hwloc_bitmap_copy (g.free_set, g.t->online);
  size_t seen = 0;
  for (size_t k = 0; k < g.t->n_cores; k++)
    if (g.t->cores[k].l3 == 1)
      {
        if (seen == 0)
          take (g.t, g.free_set, k, 1);
        else if (seen > 1)
          take (g.t, g.free_set, k, 0);
        seen++;
      }
  req.count = 5;
  req.options = 0;
  assert_int_equal (nrm_place_cpus (g.t, g.free_set, &req, g.out, &err), 0);
  assert_true (hwloc_bitmap_isincluded (g.out, g.t->l3[0].cpus));
  split = 0;
  for (size_t k = 0; k < g.t->n_cores; k++)
    split
        += hwloc_bitmap_intersects (g.t->cores[k].cpus, g.out) && !hwloc_bitmap_isincluded (g.t->cores[k].cpus, g.out);
  assert_int_equal (split, 1);
  golden_end (&g);
}

static const char *
layout_key (json_t *l, const char *key)
{
  return json_string_value (json_object_get (l, key));
}

/* How a CPU set lies on the machine: a core whole or split, by its first
 * CPU; the L3 groups, packages and nodes it meets. */
static void
test_layout (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  struct nrm_topology *t = load ("AMD-19h-Zen4-2xEpyc-9654.xml");
  /* Core 7 whole (7 and its sibling 199), one thread of core 8 (L3
   * group 1) and of core 96 (package and node 1, L3 group 12). */
  cleanup_bitmap hwloc_bitmap_t set = NULL, cores = hwloc_bitmap_alloc ();
  assert_int_equal (nrm_cpulist_parse ("7-8,96,199", &set, &err), 0);
  cleanup_json json_t *l = nrm_cpus_layout (t, set, cores);
  assert_string_equal (layout_key (l, "wholeCores"), "7");
  assert_string_equal (layout_key (l, "partialCores"), "8,96");
  assert_string_equal (layout_key (l, "l3Groups"), "0-1,12");
  assert_string_equal (layout_key (l, "packages"), "0-1");
  assert_string_equal (layout_key (l, "numaNodes"), "0-1");
  assert_int_equal (json_object_size (l), 5);
  cleanup_free char *c = nrm_cpulist_format (cores);
  assert_string_equal (c, "7-8,96");
  /* Nothing: every list empty, and no cores. */
  hwloc_bitmap_zero (set);
  cleanup_json json_t *none = nrm_cpus_layout (t, set, cores);
  assert_string_equal (layout_key (none, "wholeCores"), "");
  assert_string_equal (layout_key (none, "partialCores"), "");
  assert_string_equal (layout_key (none, "numaNodes"), "");
  assert_true (hwloc_bitmap_iszero (cores));
  nrm_topology_free (t);
}

int
main (void)
{
  const struct corpus_test per_machine[] = { { "churn", test_churn } };
  const struct CMUnitTest others[] = {
    { .name = "golden", .test_func = test_golden },
    { .name = "golden: node chosen by its L3 groups", .test_func = test_golden_node_by_l3 },
    { .name = "golden: whole cores across L3 groups", .test_func = test_golden_whole_cores_across_groups },
    { .name = "golden: odd thread stays in the claim's group", .test_func = test_golden_odd_thread },
    { .name = "layout of a CPU set", .test_func = test_layout },
  };
  return corpus_run ("placement", per_machine, 1, others, sizeof (others) / sizeof (others[0]));
}
