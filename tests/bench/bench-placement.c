/* SPDX-License-Identifier: Apache-2.0 */
/* Placement quality and speed: nrm's engine beside the kubelet static
 * policy's published algorithm (TakeByTopologyNUMAPacked: whole sockets,
 * whole NUMA nodes, whole cores, then single threads, most-allocated first)
 * on the same seeded churn of claims and releases, for every recorded
 * machine. `make bench`. */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpuset/placement.h"
#include "nrm/cleanup.h"
#include "tests/rng.h"
#include "topology/topology.h"

#define STEPS 3000
#define MAX_CLAIMS 512

static uint64_t rng;

static uint32_t
next (void)
{
  return rng_next (&rng);
}

static size_t
weight (hwloc_const_bitmap_t s)
{
  int w = hwloc_bitmap_weight (s);
  return w > 0 ? (size_t) w : 0;
}

/* --- the kubelet static policy's algorithm --------------------------------- */

static size_t
avail_in (hwloc_const_bitmap_t avail, hwloc_const_bitmap_t set)
{
  cleanup_bitmap hwloc_bitmap_t x = hwloc_bitmap_dup (set);
  hwloc_bitmap_and (x, x, avail);
  return weight (x);
}

static int
kubelet_take (const struct nrm_topology *t, hwloc_const_bitmap_t free_set, size_t n, hwloc_bitmap_t out)
{
  cleanup_bitmap hwloc_bitmap_t avail = hwloc_bitmap_dup (free_set);
  hwloc_bitmap_zero (out);
  if (weight (avail) < n)
    return -1;
  /* 1. whole sockets, 2. whole NUMA nodes, while the rest needs one. */
  for (int pass = 0; pass < 2; pass++)
    {
      size_t count = pass == 0 ? t->n_packages : t->n_numa;
      for (size_t i = 0; i < count && n > 0; i++)
        {
          hwloc_const_bitmap_t set = pass == 0 ? t->packages[i].cpus : t->numa[i].cpus;
          cleanup_bitmap hwloc_bitmap_t s = hwloc_bitmap_dup (set);
          hwloc_bitmap_and (s, s, t->online);
          hwloc_bitmap_andnot (s, s, t->reserved);
          size_t w = weight (s);
          if (w == 0 || w > n || !hwloc_bitmap_isincluded (s, avail))
            continue;
          hwloc_bitmap_or (out, out, s);
          hwloc_bitmap_andnot (avail, avail, s);
          n -= w;
        }
    }
  /* NUMA nodes ordered by available CPUs, fewest first (packing), then id. */
  size_t *order = calloc (t->n_numa + 1, sizeof (size_t));
  for (size_t i = 0; i < t->n_numa; i++)
    order[i] = i;
  for (size_t i = 0; i < t->n_numa; i++)
    for (size_t j = i + 1; j < t->n_numa; j++)
      {
        size_t ai = avail_in (avail, t->numa[order[i]].cpus), aj = avail_in (avail, t->numa[order[j]].cpus);
        if (aj < ai || (aj == ai && order[j] < order[i]))
          {
            size_t tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
          }
      }
  /* 3. whole cores. */
  for (size_t oi = 0; oi < t->n_numa && n > 0; oi++)
    for (size_t k = 0; k < t->n_cores && n > 0; k++)
      {
        const struct nrm_core *c = &t->cores[k];
        size_t w = weight (c->cpus);
        if (c->numa != (int) order[oi] || w == 0 || w > n || !hwloc_bitmap_isincluded (c->cpus, avail))
          continue;
        hwloc_bitmap_or (out, out, c->cpus);
        hwloc_bitmap_andnot (avail, avail, c->cpus);
        n -= w;
      }
  /* 4. single threads: nodes with fewest available first, partly used cores first. */
  for (size_t oi = 0; oi < t->n_numa && n > 0; oi++)
    for (size_t want = 1; want <= 8 && n > 0; want++)
      for (size_t k = 0; k < t->n_cores && n > 0; k++)
        {
          const struct nrm_core *c = &t->cores[k];
          if (c->numa != (int) order[oi] || avail_in (avail, c->cpus) != want)
            continue;
          int cpu;
          hwloc_bitmap_foreach_begin (cpu, c->cpus)
          {
            if (n > 0 && hwloc_bitmap_isset (avail, (unsigned) cpu))
              {
                hwloc_bitmap_set (out, (unsigned) cpu);
                hwloc_bitmap_clr (avail, (unsigned) cpu);
                n--;
              }
          }
          hwloc_bitmap_foreach_end ();
        }
  free (order);
  return n == 0 ? 0 : -1;
}

/* --- churn -------------------------------------------------------------------- */

struct stats
{
  size_t placed, failed;
  size_t l3_possible, l3_ok, numa_possible, numa_ok;
  double shared;        /* cores holding CPUs of two or more claims, averaged */
  double exposed;       /* claimed CPUs whose core is not wholly their claim's, averaged */
  double largest_block; /* whole free cores in one L3 group, in CPUs, averaged */
  double ns;
};

static bool
fits_in (const struct nrm_topology *t, hwloc_const_bitmap_t free_set, size_t n, bool l3)
{
  size_t count = l3 ? t->n_l3 : t->n_numa;
  for (size_t i = 0; i < count; i++)
    if (avail_in (free_set, l3 ? t->l3[i].cpus : t->numa[i].cpus) >= n)
      return true;
  return false;
}

static bool
inside_one (const struct nrm_topology *t, hwloc_const_bitmap_t set, bool l3)
{
  size_t count = l3 ? t->n_l3 : t->n_numa;
  for (size_t i = 0; i < count; i++)
    if (hwloc_bitmap_isincluded (set, l3 ? t->l3[i].cpus : t->numa[i].cpus))
      return true;
  return false;
}

static size_t
largest_block (const struct nrm_topology *t, hwloc_const_bitmap_t free_set)
{
  size_t best = 0;
  size_t groups = t->n_l3 ? t->n_l3 : t->n_numa;
  for (size_t g = 0; g < groups; g++)
    {
      hwloc_const_bitmap_t set = t->n_l3 ? t->l3[g].cpus : t->numa[g].cpus;
      size_t sum = 0;
      for (size_t k = 0; k < t->n_cores; k++)
        if (hwloc_bitmap_isincluded (t->cores[k].cpus, set) && !hwloc_bitmap_iszero (t->cores[k].cpus)
            && hwloc_bitmap_isincluded (t->cores[k].cpus, free_set))
          sum += weight (t->cores[k].cpus);
      if (sum > best)
        best = sum;
    }
  return best;
}

static void
churn (const struct nrm_topology *t, bool kubelet, struct stats *st)
{
  cleanup_bitmap hwloc_bitmap_t free_set = hwloc_bitmap_dup (t->online);
  hwloc_bitmap_andnot (free_set, free_set, t->reserved);
  hwloc_bitmap_t claims[MAX_CLAIMS];
  size_t n_claims = 0, total = weight (free_set);
  double block_sum = 0;
  memset (st, 0, sizeof (*st));
  rng = 0x2545f4914f6cdd1dULL ^ total;
  for (int step = 0; step < STEPS; step++)
    {
      bool alloc = n_claims == 0 || (n_claims < MAX_CLAIMS && next () % 100 < 55);
      if (!alloc)
        {
          size_t k = next () % n_claims;
          hwloc_bitmap_or (free_set, free_set, claims[k]);
          hwloc_bitmap_free (claims[k]);
          claims[k] = claims[--n_claims];
          continue;
        }
      /* Mostly small claims, sometimes a node's worth. */
      size_t max = next () % 10 == 0 ? total / 3 + 1 : 8;
      size_t count = 1 + next () % max;
      bool l3 = t->n_l3 > 0 && fits_in (t, free_set, count, true);
      bool node = fits_in (t, free_set, count, false);
      hwloc_bitmap_t out = hwloc_bitmap_alloc ();
      struct timespec a, b;
      clock_gettime (CLOCK_MONOTONIC, &a);
      int r;
      if (kubelet)
        r = kubelet_take (t, free_set, count, out);
      else
        {
          struct nrm_cpu_request req = { .count = count };
          nrm_error_t err = NULL;
          r = nrm_place_cpus (t, free_set, &req, out, &err);
          nrm_error_release (&err);
        }
      clock_gettime (CLOCK_MONOTONIC, &b);
      st->ns += (double) (b.tv_sec - a.tv_sec) * 1e9 + (double) (b.tv_nsec - a.tv_nsec);
      if (r < 0)
        {
          st->failed++;
          hwloc_bitmap_free (out);
          continue;
        }
      st->placed++;
      st->l3_possible += l3;
      st->l3_ok += l3 && inside_one (t, out, true);
      st->numa_possible += node;
      st->numa_ok += node && inside_one (t, out, false);
      hwloc_bitmap_andnot (free_set, free_set, out);
      claims[n_claims++] = out;
      /* The state after this placement. */
      for (size_t k = 0; k < t->n_cores; k++)
        {
          size_t owners = 0;
          for (size_t j = 0; j < n_claims; j++)
            if (hwloc_bitmap_intersects (t->cores[k].cpus, claims[j]))
              {
                owners++;
                if (!hwloc_bitmap_isincluded (t->cores[k].cpus, claims[j]))
                  st->exposed += (double) avail_in (claims[j], t->cores[k].cpus);
              }
          st->shared += owners >= 2;
        }
      block_sum += (double) largest_block (t, free_set);
    }
  st->largest_block = st->placed ? block_sum / (double) st->placed : 0;
  st->shared = st->placed ? st->shared / (double) st->placed : 0;
  st->exposed = st->placed ? st->exposed / (double) st->placed : 0;
  st->ns /= (double) (st->placed + st->failed);
  for (size_t k = 0; k < n_claims; k++)
    hwloc_bitmap_free (claims[k]);
}

static double
pct (size_t a, size_t b)
{
  return b ? 100.0 * (double) a / (double) b : 100.0;
}

int
main (int argc, char **argv)
{
  int worse = 0;
  printf ("placement quality, %d steps of seeded churn per machine (nrm | kubelet static policy)\n", STEPS);
  printf ("%-40s %15s %15s %15s %15s %15s %17s\n", "machine", "in one L3 %", "in one NUMA %", "shared cores",
          "exposed CPUs", "largest block", "time/alloc us");
  for (int i = 1; i < argc; i++)
    {
      nrm_error_t err = NULL;
      struct nrm_topology *t = NULL;
      if (nrm_topology_load (argv[i], &t, &err) < 0)
        {
          fprintf (stderr, "%s\n", nrm_error_msg (err));
          return 1;
        }
      struct stats n, k;
      churn (t, false, &n);
      churn (t, true, &k);
      const char *name = strrchr (argv[i], '/') ? strrchr (argv[i], '/') + 1 : argv[i];
      const char *label = strlen (name) > 40 ? name + strlen (name) - 40 : name;
      printf ("%-40s %6.1f | %6.1f %6.1f | %6.1f %6.1f | %6.1f %6.1f | %6.1f %6.1f | %6.1f %7.2f | %7.2f\n", label,
              pct (n.l3_ok, n.l3_possible), pct (k.l3_ok, k.l3_possible), pct (n.numa_ok, n.numa_possible),
              pct (k.numa_ok, k.numa_possible), n.shared, k.shared, n.exposed, k.exposed, n.largest_block,
              k.largest_block, n.ns / 1e3, k.ns / 1e3);
      /* Behind on a figure: fewer aligned claims, more shared cores or exposed CPUs, smaller free blocks. */
      if (pct (n.l3_ok, n.l3_possible) + 0.05 < pct (k.l3_ok, k.l3_possible)
          || pct (n.numa_ok, n.numa_possible) + 0.05 < pct (k.numa_ok, k.numa_possible)
          || n.shared > k.shared + 0.05 || n.exposed > k.exposed + 0.05 || n.largest_block + 0.05 < k.largest_block)
        {
          printf ("  ^ nrm is behind the kubelet policy on this machine\n");
          worse++;
        }
      nrm_topology_free (t);
    }
  printf ("%d machine(s) where nrm is behind on a figure\n", worse);
  return 0;
}
