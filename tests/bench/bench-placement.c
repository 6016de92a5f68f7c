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
#include <math.h>
#include <string.h>
#include <time.h>

#include "cpuset/placement.h"
#include "driver/devices.h"
#include "nrm/base/cleanup.h"
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

/* prefer-align-cpus-by-uncorecache, as the static policy does it: whole
 * free L3 groups while the claim needs one, then, groups with the fewest
 * available CPUs first, the first group whose whole free cores give exactly
 * the rest (so on SMT machines only an even rest is aligned). */
static void
kubelet_uncore (const struct nrm_topology *t, hwloc_bitmap_t avail, size_t *n, hwloc_bitmap_t out)
{
  size_t ng = t->n_l3, *order = calloc (ng + 1, sizeof (size_t));
  for (size_t i = 0; i < ng; i++)
    order[i] = i;
  for (size_t i = 0; i < ng; i++)
    for (size_t j = i + 1; j < ng; j++)
      {
        size_t ai = avail_in (avail, t->l3[order[i]].cpus), aj = avail_in (avail, t->l3[order[j]].cpus);
        if (aj < ai || (aj == ai && order[j] < order[i]))
          {
            size_t tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
          }
      }
  for (size_t oi = 0; oi<ng && * n> 0; oi++)
    {
      cleanup_bitmap hwloc_bitmap_t s = hwloc_bitmap_dup (t->l3[order[oi]].cpus);
      hwloc_bitmap_and (s, s, t->online);
      hwloc_bitmap_andnot (s, s, t->reserved);
      size_t w = weight (s);
      if (w == 0 || w > *n || !hwloc_bitmap_isincluded (s, avail))
        continue;
      hwloc_bitmap_or (out, out, s);
      hwloc_bitmap_andnot (avail, avail, s);
      *n -= w;
    }
  for (size_t oi = 0; oi<ng && * n> 0; oi++)
    {
      size_t g = order[oi], size = 0, whole = 0;
      for (size_t k = 0; k < t->n_cores; k++)
        if (t->cores[k].l3 == (int) g && !hwloc_bitmap_iszero (t->cores[k].cpus))
          {
            size = size ? size : weight (t->cores[k].cpus);
            whole += hwloc_bitmap_isincluded (t->cores[k].cpus, avail);
          }
      if (size == 0 || *n % size != 0 || whole < *n / size)
        continue;
      for (size_t k = 0; k<t->n_cores && * n> 0; k++)
        if (t->cores[k].l3 == (int) g && !hwloc_bitmap_iszero (t->cores[k].cpus)
            && hwloc_bitmap_isincluded (t->cores[k].cpus, avail))
          {
            hwloc_bitmap_or (out, out, t->cores[k].cpus);
            hwloc_bitmap_andnot (avail, avail, t->cores[k].cpus);
            *n -= weight (t->cores[k].cpus);
          }
      break;
    }
  free (order);
}

/* sortAvailableCores(): cores with available CPUs, by the available CPUs
 * of their NUMA node, then of their socket (the other way round when a
 * socket holds several nodes: NumSockets < NumNUMANodes), then of the core,
 * fewest first, each tie by id. Returns every core index, in that order. */
struct core_key
{
  size_t k, first, first_id, second, second_id, core;
};

static int
cmp_core_key (const void *a, const void *b)
{
  const struct core_key *x = a, *y = b;
  size_t kx[] = { x->first, x->first_id, x->second, x->second_id, x->core, x->k };
  size_t ky[] = { y->first, y->first_id, y->second, y->second_id, y->core, y->k };
  for (size_t i = 0; i < sizeof (kx) / sizeof (kx[0]); i++)
    if (kx[i] != ky[i])
      return kx[i] < ky[i] ? -1 : 1;
  return 0;
}

static size_t *
kubelet_core_order (const struct nrm_topology *t, hwloc_const_bitmap_t avail)
{
  bool numa_first = t->n_packages >= t->n_numa;
  size_t *node_free = calloc (t->n_numa + 1, sizeof (size_t)), *pkg_free = calloc (t->n_packages + 1, sizeof (size_t));
  struct core_key *keys = calloc (t->n_cores + 1, sizeof (*keys));
  size_t *order = calloc (t->n_cores + 1, sizeof (size_t));
  for (size_t i = 0; i < t->n_numa; i++)
    node_free[i] = avail_in (avail, t->numa[i].cpus);
  for (size_t i = 0; i < t->n_packages; i++)
    pkg_free[i] = avail_in (avail, t->packages[i].cpus);
  for (size_t k = 0; k < t->n_cores; k++)
    {
      const struct nrm_core *c = &t->cores[k];
      size_t nf = c->numa >= 0 ? node_free[c->numa] : 0, pf = c->package >= 0 ? pkg_free[c->package] : 0;
      size_t ni = (size_t) (c->numa + 1), pi = (size_t) (c->package + 1);
      keys[k] = numa_first ? (struct core_key){ k, nf, ni, pf, pi, avail_in (avail, c->cpus) }
                           : (struct core_key){ k, pf, pi, nf, ni, avail_in (avail, c->cpus) };
    }
  qsort (keys, t->n_cores, sizeof (*keys), cmp_core_key);
  for (size_t k = 0; k < t->n_cores; k++)
    order[k] = keys[k].k;
  free (node_free);
  free (pkg_free);
  free (keys);
  return order;
}

static int
kubelet_take (const struct nrm_topology *t, hwloc_const_bitmap_t free_set, size_t n, bool uncore, hwloc_bitmap_t out)
{
  cleanup_bitmap hwloc_bitmap_t avail = hwloc_bitmap_dup (free_set);
  hwloc_bitmap_zero (out);
  if (weight (avail) < n)
    return -1;
  /* 1-2. whole NUMA nodes then whole sockets (whole sockets then nodes
   * when a socket holds several nodes), while the rest needs one. */
  bool numa_first = t->n_packages >= t->n_numa;
  for (int pass = 0; pass < 2; pass++)
    {
      bool sockets = (pass == 0) != numa_first;
      size_t count = sockets ? t->n_packages : t->n_numa;
      for (size_t i = 0; i < count && n > 0; i++)
        {
          hwloc_const_bitmap_t set = sockets ? t->packages[i].cpus : t->numa[i].cpus;
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
  if (uncore && t->n_l3 > 0)
    kubelet_uncore (t, avail, &n, out);
  /* 3. whole cores, 4. single threads, each in sortAvailableCores() order
   * taken once at the start of the step. */
  for (int step = 3; step <= 4 && n > 0; step++)
    {
      size_t *order = kubelet_core_order (t, avail);
      for (size_t oi = 0; oi < t->n_cores && n > 0; oi++)
        {
          const struct nrm_core *c = &t->cores[order[oi]];
          size_t w = weight (c->cpus);
          if (step == 3)
            {
              if (w == 0 || w > n || !hwloc_bitmap_isincluded (c->cpus, avail))
                continue;
              hwloc_bitmap_or (out, out, c->cpus);
              hwloc_bitmap_andnot (avail, avail, c->cpus);
              n -= w;
              continue;
            }
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
    }
  return n == 0 ? 0 : -1;
}

/* The kubelet static policy under the Topology Manager (best-effort,
 * restricted or single-numa-node, container scope), as operators run it for
 * alignment: the CPU manager's hints are the masks of NUMA nodes with enough
 * available CPUs; the merged hint is the narrowest, and among masks of one
 * width the numerically lowest (bitmask IsNarrowerThan), i.e. the lowest node
 * numbers; the static policy then takes the CPUs inside that mask. */
/* The sum of the k largest of v[0..hi). */
static size_t
top_sum (const size_t *v, size_t hi, size_t k)
{
  size_t sorted[64], sum = 0;
  memcpy (sorted, v, hi * sizeof (size_t));
  for (size_t i = 0; i < hi && i < k; i++)
    {
      size_t m = i;
      for (size_t j = i + 1; j < hi; j++)
        if (sorted[j] > sorted[m])
          m = j;
      size_t tmp = sorted[i];
      sorted[i] = sorted[m];
      sorted[m] = tmp;
      sum += sorted[i];
    }
  return sum;
}

static int
kubelet_tm_take (const struct nrm_topology *t, hwloc_const_bitmap_t free_set, size_t n, hwloc_bitmap_t out)
{
  size_t nn = t->n_numa, free_of[64];
  if (nn == 0 || nn > 64)
    return kubelet_take (t, free_set, n, true, out);
  for (size_t i = 0; i < nn; i++)
    free_of[i] = avail_in (free_set, t->numa[i].cpus);
  /* The narrowest width, then the lowest mask of that width: its highest
   * node as low as a mask of k nodes below it can still hold the rest. */
  size_t k = 1;
  while (k <= nn && top_sum (free_of, nn, k) < n)
    k++;
  if (k > nn)
    return -1;
  cleanup_bitmap hwloc_bitmap_t aligned = hwloc_bitmap_alloc ();
  size_t need = n, hi = nn;
  for (; k > 0; k--)
    {
      size_t h = k - 1;
      while (h < hi && free_of[h] + top_sum (free_of, h, k - 1) < need)
        h++;
      hwloc_bitmap_or (aligned, aligned, t->numa[h].cpus);
      need = free_of[h] >= need ? 0 : need - free_of[h];
      hi = h;
    }
  hwloc_bitmap_and (aligned, aligned, free_set);
  return kubelet_take (t, aligned, n, true, out);
}

/* --- churn -------------------------------------------------------------------- */

struct stats
{
  size_t placed, failed;
  size_t l3_possible, l3_ok, numa_possible, numa_ok;
  /* Sums over the states after each placement, averaged at the end. */
  double shared;        /* cores holding CPUs of two or more claims */
  double exposed;       /* claimed CPUs whose core is not wholly their claim's */
  double largest_block; /* whole free cores in one L3 group, in CPUs */
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

/* The numa<N> device the scheduler takes: the first with room in the
 * order nrm publishes them; NULL when none holds the claim. */
static hwloc_bitmap_t
scheduler_pick (const struct nrm_topology *t, hwloc_const_bitmap_t free_set, size_t count)
{
  hwloc_bitmap_t within = NULL;
  uint64_t *room = calloc (t->n_numa + 1, sizeof (uint64_t)), *cell = calloc (t->n_numa + 1, sizeof (uint64_t));
  nrm_numa_room (t, free_set, room, cell);
  size_t *order = nrm_numa_preference_by_room (t, room, cell);
  for (size_t k = 0; order && k < t->n_numa && within == NULL; k++)
    if (room[order[k]] >= count)
      within = hwloc_bitmap_dup (t->numa[order[k]].cpus);
  free (order);
  free (room);
  free (cell);
  return within;
}

/* One seeded churn; adds its sums to st. */
enum engine
{
  NRM,
  NRM_DRA,
  KUBELET,
  KUBELET_TM,
};

static void
churn (const struct nrm_topology *t, enum engine engine, uint64_t seed, struct stats *st)
{
  cleanup_bitmap hwloc_bitmap_t free_set = hwloc_bitmap_dup (t->online);
  hwloc_bitmap_andnot (free_set, free_set, t->reserved);
  hwloc_bitmap_t claims[MAX_CLAIMS];
  size_t n_claims = 0, total = weight (free_set);
  rng = (0x2545f4914f6cdd1dULL + seed * 0x9e3779b97f4a7c15ULL) ^ total;
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
      if (engine == KUBELET)
        r = kubelet_take (t, free_set, count, false, out);
      else if (engine == KUBELET_TM)
        r = kubelet_tm_take (t, free_set, count, out);
      else
        {
          /* Through DRA the scheduler picks the node's device: the first
           * numa<N> device with room in the order nrm publishes them
           * (nrm_numa_preference_by_room: the fullest first); nrm picks
           * the CPUs in it. A claim no node holds asks for several
           * devices; the engine then spreads it as it would. */
          cleanup_bitmap hwloc_bitmap_t within = engine == NRM_DRA ? scheduler_pick (t, free_set, count) : NULL;
          struct nrm_cpu_request req = { .count = count, .within = within };
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
      st->largest_block += (double) largest_block (t, free_set);
    }
  for (size_t k = 0; k < n_claims; k++)
    hwloc_bitmap_free (claims[k]);
}

static void
average (struct stats *st)
{
  double placed = st->placed ? (double) st->placed : 1;
  st->largest_block /= placed;
  st->shared /= placed;
  st->exposed /= placed;
  st->ns /= (double) (st->placed + st->failed ? st->placed + st->failed : 1);
}

static double
pct (size_t a, size_t b)
{
  return b ? 100.0 * (double) a / (double) b : 100.0;
}

#define FIGURES 5
#define MAX_SEEDS 100

static const struct
{
  const char *name;
  bool lower_better;
} figures[FIGURES]
    = { { "L3", false }, { "NUMA", false }, { "shared", true }, { "exposed", true }, { "block", false } };

static void
figures_of (const struct stats *st, double *f)
{
  f[0] = pct (st->l3_ok, st->l3_possible);
  f[1] = pct (st->numa_ok, st->numa_possible);
  f[2] = st->shared;
  f[3] = st->exposed;
  f[4] = st->largest_block;
}

/* Compares engine a with engine b figure by figure over the seeds: the
 * mean of the paired differences (the same seed gives both the same
 * churn) and its standard error. A figure counts as behind or ahead only
 * when the mean is more than two standard errors (and 0.05) away from 0,
 * so that one lucky or unlucky seed decides nothing. Appends the figures
 * to the buffers; returns how many are behind. */
static int
compare (double f[][MAX_SEEDS][FIGURES], int a, int b, unsigned seeds, char *behind, char *ahead, size_t len,
         int *n_ahead)
{
  int count = 0;
  behind[0] = ahead[0] = '\0';
  *n_ahead = 0;
  for (size_t k = 0; k < FIGURES; k++)
    {
      double mean = 0, var = 0, ma = 0, mb = 0;
      for (unsigned s = 0; s < seeds; s++)
        {
          mean += f[a][s][k] - f[b][s][k];
          ma += f[a][s][k];
          mb += f[b][s][k];
        }
      mean /= seeds;
      ma /= seeds;
      mb /= seeds;
      for (unsigned s = 0; s < seeds; s++)
        {
          double d = f[a][s][k] - f[b][s][k] - mean;
          var += d * d;
        }
      double se = seeds > 1 ? sqrt (var / (seeds - 1) / seeds) : 0, margin = 2 * se > 0.05 ? 2 * se : 0.05;
      double worse = figures[k].lower_better ? mean : -mean;
      char *buf = worse > margin ? behind : worse < -margin ? ahead : NULL;
      if (buf == NULL)
        continue;
      size_t used = strlen (buf);
      snprintf (buf + used, len - used, "%s%s %.1f vs %.1f (+-%.1f)", used ? ", " : "", figures[k].name, ma, mb,
                2 * se);
      if (buf == behind)
        count++;
      else
        (*n_ahead)++;
    }
  return count;
}

/* --- the DRA set-up of issue #13 ------------------------------------------------
 * A shorter churn of exclusive claims of 1-16 CPUs. nrm as the plugin runs:
 * the scheduler takes the first numa<N> device with room in the published
 * order, nrm picks the CPUs inside it. The kubelet references take CPUs
 * from the whole node (no Topology Manager), with and without
 * prefer-align-cpus-by-uncorecache. */

#define DRA_STEPS 600
#define DRA_MAX 16

enum dra_engine
{
  D_NRM,
  D_KUB,
  D_KUC,
  D_ENGINES,
};

struct dra_stats
{
  size_t placed, failed, l3_possible, l3_ok, smt_split;
};

static void
dra_churn (const struct nrm_topology *t, enum dra_engine engine, uint64_t seed, struct dra_stats *st)
{
  cleanup_bitmap hwloc_bitmap_t free_set = hwloc_bitmap_dup (t->online);
  hwloc_bitmap_andnot (free_set, free_set, t->reserved);
  hwloc_bitmap_t claims[MAX_CLAIMS];
  bool split[MAX_CLAIMS];
  size_t n_claims = 0;
  rng = 0x9e3779b97f4a7c15ULL * (seed + 1) ^ (uint64_t) weight (free_set);
  for (int step = 0; step < DRA_STEPS; step++)
    {
      bool alloc = n_claims == 0 || (n_claims < MAX_CLAIMS && next () % 100 < 55);
      if (!alloc)
        {
          size_t k = next () % n_claims;
          hwloc_bitmap_or (free_set, free_set, claims[k]);
          st->smt_split += split[k];
          hwloc_bitmap_free (claims[k]);
          claims[k] = claims[n_claims - 1];
          split[k] = split[--n_claims];
          continue;
        }
      size_t count = 1 + next () % DRA_MAX;
      bool l3 = t->n_l3 > 0 && fits_in (t, free_set, count, true);
      hwloc_bitmap_t out = hwloc_bitmap_alloc ();
      int r;
      if (engine == D_NRM)
        {
          cleanup_bitmap hwloc_bitmap_t within = scheduler_pick (t, free_set, count);
          struct nrm_cpu_request req = { .count = count, .within = within };
          nrm_error_t err = NULL;
          r = nrm_place_cpus (t, free_set, &req, out, &err);
          nrm_error_release (&err);
        }
      else
        r = kubelet_take (t, free_set, count, engine == D_KUC, out);
      if (r < 0)
        {
          st->failed++;
          hwloc_bitmap_free (out);
          continue;
        }
      st->placed++;
      st->l3_possible += l3;
      st->l3_ok += l3 && inside_one (t, out, true);
      /* A core shared with another claim splits its threads between the
       * two: both count, once each, over their whole life. */
      split[n_claims] = false;
      for (size_t k = 0; k < t->n_cores; k++)
        if (hwloc_bitmap_intersects (t->cores[k].cpus, out) && !hwloc_bitmap_isincluded (t->cores[k].cpus, out))
          for (size_t j = 0; j < n_claims; j++)
            if (hwloc_bitmap_intersects (t->cores[k].cpus, claims[j]))
              split[j] = split[n_claims] = true;
      hwloc_bitmap_andnot (free_set, free_set, out);
      claims[n_claims++] = out;
    }
  for (size_t k = 0; k < n_claims; k++)
    {
      st->smt_split += split[k];
      hwloc_bitmap_free (claims[k]);
    }
}

/* Paired over the seeds: the mean of a - b and twice its standard error. */
static void
paired (const double *a, const double *b, unsigned seeds, double *mean, double *margin)
{
  double m = 0, var = 0;
  for (unsigned s = 0; s < seeds; s++)
    m += a[s] - b[s];
  m /= seeds;
  for (unsigned s = 0; s < seeds; s++)
    var += (a[s] - b[s] - m) * (a[s] - b[s] - m);
  *mean = m;
  *margin = seeds > 1 ? 2 * sqrt (var / (seeds - 1) / seeds) : 0;
}

/* Prints one machine's line; returns whether the goal is met: nrm keeps
 * claims in one L3 group at least as often as kuc, and splits SMT siblings
 * no more often than kub or kuc (a shortfall within twice the standard
 * error of the paired differences counts as even). */
static bool
dra_machine (const struct nrm_topology *t, const char *label, unsigned seeds)
{
  static double l3[D_ENGINES][MAX_SEEDS], sp[D_ENGINES][MAX_SEEDS];
  double ml3[D_ENGINES] = { 0 }, msp[D_ENGINES] = { 0 };
  bool smt = false;
  for (size_t k = 0; k < t->n_cores; k++)
    smt |= weight (t->cores[k].cpus) > 1;
  for (int e = 0; e < D_ENGINES; e++)
    for (unsigned s = 0; s < seeds; s++)
      {
        struct dra_stats st = { 0 };
        dra_churn (t, (enum dra_engine) e, s, &st);
        l3[e][s] = pct (st.l3_ok, st.l3_possible);
        sp[e][s] = pct (st.smt_split, st.placed);
        ml3[e] += l3[e][s] / seeds;
        msp[e] += sp[e][s] / seeds;
      }
  double d, m;
  bool ok = true;
  char why[256] = "";
  if (t->n_l3 > 0)
    {
      paired (l3[D_NRM], l3[D_KUC], seeds, &d, &m);
      if (d < -m)
        {
          ok = false;
          snprintf (why + strlen (why), sizeof (why) - strlen (why), " L3 %.1f < kuc %.1f (+-%.1f)", ml3[D_NRM],
                    ml3[D_KUC], m);
        }
    }
  for (int e = D_KUB; smt && e <= D_KUC; e++)
    {
      paired (sp[D_NRM], sp[e], seeds, &d, &m);
      if (d > m)
        {
          ok = false;
          snprintf (why + strlen (why), sizeof (why) - strlen (why), " SMT split %.1f > %s %.1f (+-%.1f)", msp[D_NRM],
                    e == D_KUB ? "kub" : "kuc", msp[e], m);
        }
    }
  printf ("%-28s", label);
  for (int e = 0; e < D_ENGINES; e++)
    printf (t->n_l3 > 0 ? " %5.1f" : "     -", ml3[e]);
  printf ("  ");
  for (int e = 0; e < D_ENGINES; e++)
    printf (smt ? " %5.1f" : "     -", msp[e]);
  printf ("  %s%s\n", ok ? "met" : "NOT met:", why);
  return ok;
}

static int bench_all (int argc, char **argv, int first, unsigned seeds, int worse[2][2], int better[2][2]);
static int bench_dra (int argc, char **argv, int first, unsigned seeds);

int
main (int argc, char **argv)
{
  int worse[2][2] = { { 0 } }, better[2][2] = { { 0 } }, first = 1;
  unsigned seeds = 10;
  bool dra_only = false;
  for (;;)
    if (argc > first + 1 && strcmp (argv[first], "--seeds") == 0)
      {
        seeds = (unsigned) strtoul (argv[first + 1], NULL, 10);
        first += 2;
      }
    else if (argc > first && strcmp (argv[first], "--dra-only") == 0)
      {
        dra_only = true;
        first++;
      }
    else
      break;
  if (seeds == 0 || seeds > MAX_SEEDS || first >= argc)
    {
      fprintf (stderr, "usage: bench-placement [--seeds N (1-%d)] [--dra-only] TOPOLOGY.xml...\n", MAX_SEEDS);
      return 2;
    }
  if (!dra_only && bench_all (argc, argv, first, seeds, worse, better) < 0)
    return 1;
  return bench_dra (argc, argv, first, seeds);
}

/* The DRA set-up, per machine. */
static int
bench_dra (int argc, char **argv, int first, unsigned seeds)
{
  int met = 0;
  printf ("\nthe DRA set-up: %u seeds x %d steps of churn, exclusive claims of 1-%d CPUs; for each machine the\n"
          "share of claims in one L3 group (of those some L3 group had room for) and the share of claims that\n"
          "shared a core with another claim during their life (SMT siblings split between claims):\n"
          "  nrm   the scheduler takes the first numa<N> device with room in the published order, nrm picks\n"
          "        the CPUs inside it\n"
          "  kub   TakeByTopologyNUMAPacked on the whole node (no Topology Manager)\n"
          "  kuc   the same with prefer-align-cpus-by-uncorecache\n"
          "goal: nrm's L3 share >= kuc's, nrm's split share <= kub's and kuc's (differences within twice the\n"
          "standard error of the paired per-seed differences count as even)\n",
          seeds, DRA_STEPS, DRA_MAX);
  printf ("%-28s %-17s   %-17s\n", "", "in one L3 %", "split SMT %");
  printf ("%-28s   nrm   kub   kuc     nrm   kub   kuc  goal\n", "machine");
  for (int i = first; i < argc; i++)
    {
      nrm_error_t err = NULL;
      struct nrm_topology *t = NULL;
      if (nrm_topology_load (argv[i], &t, &err) < 0)
        {
          fprintf (stderr, "%s\n", nrm_error_msg (err));
          return 1;
        }
      const char *name = strrchr (argv[i], '/') ? strrchr (argv[i], '/') + 1 : argv[i];
      char label[29];
      size_t len = strlen (name);
      if (len > 4 && strcmp (name + len - 4, ".xml") == 0)
        len -= 4;
      snprintf (label, sizeof (label), "%.*s", (int) len, name);
      met += dra_machine (t, label, seeds);
      nrm_topology_free (t);
    }
  printf ("DRA set-up goal met on %d of %d machines\n", met, argc - first);
  return 0;
}

/* The four placements of the long churn, per machine. */
static int
bench_all (int argc, char **argv, int first, unsigned seeds, int worse[2][2], int better[2][2])
{
  printf ("placement quality: %u seeds x %d steps of churn per machine, figures averaged over the states after each\n"
          "placement. Per figure, four placements of the same churn:\n"
          "  nrm   nrm's engine on the whole machine (it picks the NUMA node too)\n"
          "  dra   nrm as the DRA plugin runs it: the scheduler takes the first numa<N> device with room in\n"
          "        the order nrm publishes them (fullest first), nrm picks the CPUs inside it\n"
          "  kub   the kubelet static policy (TakeByTopologyNUMAPacked)\n"
          "  kal   the static policy set up for alignment: Topology Manager (narrowest NUMA mask, lowest node\n"
          "        ids) and prefer-align-cpus-by-uncorecache\n"
          "behind/ahead: the mean of the per-seed differences is beyond twice its standard error (+-)\n",
          seeds, STEPS);
  printf ("%-28s %-23s %-23s %-23s %-23s %-23s %s\n", "", "in one L3 %", "in one NUMA %", "shared cores",
          "exposed CPUs", "largest free block", "us/alloc");
  printf ("%-28s", "machine");
  for (int k = 0; k < FIGURES; k++)
    printf ("   nrm   dra   kub   kal");
  printf ("   nrm   dra\n");
  static double f[4][MAX_SEEDS][FIGURES];
  for (int i = first; i < argc; i++)
    {
      nrm_error_t err = NULL;
      struct nrm_topology *t = NULL;
      if (nrm_topology_load (argv[i], &t, &err) < 0)
        {
          fprintf (stderr, "%s\n", nrm_error_msg (err));
          return -1;
        }
      double mean[4][FIGURES], ns[4];
      memset (mean, 0, sizeof (mean));
      for (int e = NRM; e <= KUBELET_TM; e++)
        {
          double nsum = 0, calls = 0;
          for (unsigned s = 0; s < seeds; s++)
            {
              struct stats st = { 0 };
              churn (t, (enum engine) e, s, &st);
              nsum += st.ns;
              calls += (double) (st.placed + st.failed);
              average (&st);
              figures_of (&st, f[e][s]);
              for (size_t k = 0; k < FIGURES; k++)
                mean[e][k] += f[e][s][k] / seeds;
            }
          ns[e] = calls > 0 ? nsum / calls : 0;
        }
      const char *name = strrchr (argv[i], '/') ? strrchr (argv[i], '/') + 1 : argv[i];
      char label[29];
      size_t len = strlen (name);
      if (len > 4 && strcmp (name + len - 4, ".xml") == 0)
        len -= 4;
      snprintf (label, sizeof (label), "%.*s", (int) len, name);
      printf ("%-28s", label);
      for (size_t k = 0; k < FIGURES; k++)
        for (int e = NRM; e <= KUBELET_TM; e++)
          printf (" %5.1f", mean[e][k]);
      printf (" %5.1f %5.1f\n", ns[NRM] / 1e3, ns[NRM_DRA] / 1e3);
      if (t->n_pus >= 384)
        printf ("  time per allocation on %zu CPUs: %.1f us (goal < 50 us: %s)\n", t->n_pus, ns[NRM] / 1e3,
                ns[NRM] < 50e3 ? "met" : "NOT met");
      for (int a = NRM; a <= NRM_DRA; a++)
        for (int e = KUBELET; e <= KUBELET_TM; e++)
          {
            char b[512], ah[512];
            int n_ahead;
            if (compare (f, a, e, seeds, b, ah, sizeof (b), &n_ahead) > 0)
              {
                printf ("  ^ %s behind %s: %s\n", a == NRM ? "nrm" : "dra", e == KUBELET ? "kub" : "kal", b);
                worse[a][e - KUBELET]++;
              }
            better[a][e - KUBELET] += n_ahead > 0;
          }
      nrm_topology_free (t);
    }
  int machines = argc - first;
  for (int a = NRM; a <= NRM_DRA; a++)
    printf ("%s: behind kub on a figure on %d of %d machines, behind kal on %d; ahead of kub on a figure on %d, of "
            "kal on %d\n",
            a == NRM ? "nrm" : "dra", worse[a][0], machines, worse[a][1], better[a][0], better[a][1]);
  return 0;
}
