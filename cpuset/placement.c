/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/placement.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"

/* The engine works on cores: how many usable CPUs each core still has, and
 * how many it has in all. A unit of the topology (package, NUMA node, or a
 * node's share of one L3 group, a "cell") is the set of cores that match it. */

enum level
{
  LEVEL_PACKAGE,
  LEVEL_NODE,
  LEVEL_CELL,
};

struct unit
{
  enum level level;
  int package, node, l3; /* -1: any; l3 == -2: cores without an L3 */
};

struct ctx
{
  const struct nrm_topology *t;
  const struct nrm_cpu_request *req;
  hwloc_bitmap_t cand; /* usable CPUs not yet taken */
  hwloc_bitmap_t out;
  size_t *avail; /* per core: usable CPUs left */
  size_t *size;  /* per core: online CPUs */
  bool *close;   /* per core: it has CPUs of req->near */
  bool any_close;
};

static size_t
weight (hwloc_const_bitmap_t s)
{
  int w = hwloc_bitmap_weight (s);
  return w > 0 ? (size_t) w : 0;
}

static bool
matches (const struct ctx *c, const struct unit *u, size_t k)
{
  const struct nrm_core *core = &c->t->cores[k];
  if (u->package >= 0 && core->package != u->package)
    return false;
  if (u->node >= 0 && core->numa != u->node)
    return false;
  if (u->l3 == -2 && core->l3 >= 0)
    return false;
  if (u->l3 >= 0 && core->l3 != u->l3)
    return false;
  return true;
}

static size_t
unit_avail (const struct ctx *c, const struct unit *u)
{
  size_t sum = 0;
  for (size_t k = 0; k < c->t->n_cores; k++)
    if (c->avail[k] && matches (c, u, k))
      sum += c->avail[k];
  return sum;
}

/* The unit's usable CPUs in cores that are wholly free: what a claim that
 * spans several units takes from one without splitting a core. */
static size_t
unit_whole (const struct ctx *c, const struct unit *u)
{
  if (c->req->options & (NRM_OPT_DISTRIBUTE_ACROSS_CORES | NRM_OPT_FULL_PCPUS_ONLY))
    return unit_avail (c, u);
  size_t sum = 0;
  for (size_t k = 0; k < c->t->n_cores; k++)
    if (c->avail[k] && c->avail[k] == c->size[k] && matches (c, u, k))
      sum += c->avail[k];
  return sum;
}

/* What taking n CPUs from the unit costs in split cores, as fill_cores
 * takes them: whole free cores cost nothing; each CPU beyond them costs 1,
 * whether it pairs up with a half-used core or splits a free one. Units
 * that cost less are chosen first, so a claim takes whole cores where some
 * unit has them. Pairing is not preferred across units: measured on the
 * recorded machines (bench-placement, DRA set-up), sending the odd thread
 * to a half-used core of another L3 group or node kept fewer claims in one
 * L3 group and left more claims sharing a core over their lives than the
 * kubelet; inside the chosen unit fill_cores still pairs first. */
static size_t
unit_cost (const struct ctx *c, const struct unit *u, size_t n)
{
  if (c->req->options & (NRM_OPT_DISTRIBUTE_ACROSS_CORES | NRM_OPT_FULL_PCPUS_ONLY))
    return 0;
  for (size_t k = 0; k < c->t->n_cores; k++)
    if (c->avail[k] && c->avail[k] == c->size[k] && c->size[k] <= n && matches (c, u, k))
      n -= c->size[k];
  return n;
}

/* One pass over a unit's cores: what fill() compares units by. */
struct usum
{
  size_t avail, whole, size; /* size: of every core, when uniform */
  size_t near;               /* usable CPUs in cores near the claim's devices */
  bool uniform;
};

/* How many of n CPUs taken from a unit with `near` usable CPUs near the
 * claim's devices lie elsewhere: what the near preference minimises. */
static size_t
miss (size_t near, size_t n)
{
  return n > near ? n - near : 0;
}

/* Counts core k (with usable CPUs) into s. */
static void
summary_add (const struct ctx *c, struct usum *s, size_t k)
{
  s->avail += c->avail[k];
  if (c->close[k])
    s->near += c->avail[k];
  if (c->avail[k] == c->size[k])
    s->whole += c->avail[k];
  if (s->size == 0)
    s->size = c->size[k];
  else if (s->size != c->size[k])
    s->uniform = false;
}

static void
summarize (const struct ctx *c, const struct unit *u, struct usum *s)
{
  memset (s, 0, sizeof (*s));
  s->uniform = true;
  for (size_t k = 0; k < c->t->n_cores; k++)
    if (c->avail[k] && matches (c, u, k))
      summary_add (c, s, k);
}

/* unit_cost() from the summary when all cores have one size. */
static size_t
summary_cost (const struct ctx *c, const struct unit *u, const struct usum *s, size_t n)
{
  if (!s->uniform || s->size == 0)
    return unit_cost (c, u, n);
  if (c->req->options & (NRM_OPT_DISTRIBUTE_ACROSS_CORES | NRM_OPT_FULL_PCPUS_ONLY))
    return 0;
  size_t fit = n / s->size * s->size, taken = s->whole < fit ? s->whole : fit;
  return n - taken;
}

static void
take_cpu (struct ctx *c, unsigned cpu)
{
  int pi = nrm_topology_pu_index (c->t, cpu);
  hwloc_bitmap_set (c->out, cpu);
  hwloc_bitmap_clr (c->cand, cpu);
  if (pi >= 0 && c->t->pus[pi].core >= 0)
    c->avail[c->t->pus[pi].core]--;
}

/* Takes up to n usable CPUs of core k, in CPU order. */
static size_t
take_core (struct ctx *c, size_t k, size_t n)
{
  size_t got = 0;
  int cpu;
  hwloc_bitmap_foreach_begin (cpu, c->t->cores[k].cpus)
  {
    if (got == n)
      break;
    if (hwloc_bitmap_isset (c->cand, (unsigned) cpu))
      {
        take_cpu (c, (unsigned) cpu);
        got++;
      }
  }
  hwloc_bitmap_foreach_end ();
  return got;
}

/* Takes n CPUs from the cores of a unit: whole free cores first, then the
 * free threads of cores that are split already, and only then part of a
 * free core. */
static int
fill_cores (struct ctx *c, const struct unit *u, size_t n)
{
  const struct nrm_topology *t = c->t;
  if (unit_avail (c, u) < n)
    return -1;

  /* Each step goes over the cores near the claim's devices first (pass
   * 0), then over all of them. */
  int first = c->any_close ? 0 : 1;
  if (c->req->options & NRM_OPT_DISTRIBUTE_ACROSS_CORES)
    {
      /* Round r gives one more thread to every core holding r of ours. */
      for (size_t round = 0; n > 0 && round < 16; round++)
        for (int pass = first; pass < 2; pass++)
          for (size_t k = 0; k < t->n_cores && n > 0; k++)
            if (c->avail[k] && (pass || c->close[k]) && matches (c, u, k))
              {
                cleanup_bitmap hwloc_bitmap_t mine = xbitmap_dup (t->cores[k].cpus);
                hwloc_bitmap_and (mine, mine, c->out);
                if (weight (mine) == round)
                  n -= take_core (c, k, 1);
              }
      return n == 0 ? 0 : -1;
    }

  for (int pass = first; pass < 2; pass++)
    for (size_t k = 0; k < t->n_cores && n > 0; k++)
      if (c->avail[k] == c->size[k] && c->size[k] && c->size[k] <= n && (pass || c->close[k]) && matches (c, u, k))
        n -= take_core (c, k, c->size[k]);
  if (n == 0)
    return 0;
  if (c->req->options & NRM_OPT_FULL_PCPUS_ONLY)
    return -1;
  /* Cores split already, fewest free threads first: pairing up half-used
   * cores leaves the fewest of them. */
  for (size_t want = 1; want < 16 && n > 0; want++)
    for (int pass = first; pass < 2; pass++)
      for (size_t k = 0; k < t->n_cores && n > 0; k++)
        if (c->avail[k] == want && c->avail[k] < c->size[k] && (pass || c->close[k]) && matches (c, u, k))
          n -= take_core (c, k, n);
  /* Last: split the smallest free core that covers the rest (a near one
   * among equals). */
  while (n > 0)
    {
      int best = -1;
      for (size_t k = 0; k < t->n_cores; k++)
        {
          if (c->avail[k] == 0 || !matches (c, u, k))
            continue;
          size_t w = c->avail[k], bw = best < 0 ? 0 : c->avail[best];
          if (best < 0 || (w >= n && (bw < n || w < bw)) || (bw < n && w > bw)
              || (w == bw && c->close[k] && !c->close[best]))
            best = (int) k;
        }
      if (best < 0)
        return -1;
      n -= take_core (c, (size_t) best, n);
    }
  return 0;
}

/* The units one level down from `parent` that still have usable CPUs. */
static size_t
children (const struct ctx *c, const struct unit *parent, enum level lv, struct unit *out, size_t max)
{
  const struct nrm_topology *t = c->t;
  size_t n = 0;
  if (lv == LEVEL_PACKAGE)
    for (size_t p = 0; p < t->n_packages && n < max; p++)
      out[n++] = (struct unit){ LEVEL_PACKAGE, (int) p, -1, -1 };
  else if (lv == LEVEL_NODE)
    for (size_t i = 0; i < t->n_numa && n < max; i++)
      {
        if (parent->node >= 0 && parent->node != (int) i)
          continue;
        out[n++] = (struct unit){ LEVEL_NODE, parent->package, (int) i, -1 };
      }
  else
    for (int l = -2; l < (int) t->n_l3 && n < max; l++)
      if (l != -1)
        out[n++] = (struct unit){ LEVEL_CELL, parent->package, parent->node, l };
  /* Keep those with usable CPUs: one pass over the parent's cores. */
  size_t slots = (lv == LEVEL_PACKAGE ? t->n_packages : lv == LEVEL_NODE ? t->n_numa : t->n_l3 + 1) + 1;
  bool *has = xcalloc (slots, sizeof (bool));
  for (size_t k = 0; k < t->n_cores; k++)
    {
      const struct nrm_core *core = &t->cores[k];
      if (c->avail[k] == 0 || !matches (c, parent, k))
        continue;
      int key = lv == LEVEL_PACKAGE ? core->package : lv == LEVEL_NODE ? core->numa : core->l3 >= 0 ? core->l3 + 1 : 0;
      if (key >= 0 && (size_t) key < slots)
        has[key] = true;
    }
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    {
      int key = lv == LEVEL_PACKAGE ? out[i].package
                : lv == LEVEL_NODE  ? out[i].node
                : out[i].l3 >= 0    ? out[i].l3 + 1
                                    : 0;
      if (key >= 0 && (size_t) key < slots && has[key])
        out[k++] = out[i];
    }
  free (has);
  return k;
}

/* The unit that holds n without splitting another core if one can, then
 * with the most of them near the claim's devices, then with the fewest
 * usable CPUs (best fit), then in topology order; -1 if none holds n. */
static int
best_fit (const struct ctx *c, const struct unit *u, const struct usum *sum, size_t nu, size_t n)
{
  int best = -1;
  size_t best_cost = 0, best_miss = 0, best_free = 0;
  for (size_t i = 0; i < nu; i++)
    {
      size_t f = sum[i].avail;
      if (f < n)
        continue;
      size_t cost = summary_cost (c, &u[i], &sum[i], n), m = miss (sum[i].near, n);
      if (best < 0 || cost < best_cost || (cost == best_cost && (m < best_miss || (m == best_miss && f < best_free))))
        {
          best = (int) i;
          best_cost = cost;
          best_miss = m;
          best_free = f;
        }
    }
  return best;
}

/* Among NUMA nodes that hold n: the one that splits the fewest cores, then
 * the one with an L3 group that holds n by itself, as cheaply, as near the
 * claim's devices and then as tightly as any (best fit over the groups of
 * all nodes, not over nodes: the fullest node may have no group with room
 * while another has one that fits exactly), then the one with more near
 * CPUs, then the fullest node. -1 if none holds n. */
static int
best_node (const struct ctx *c, const struct unit *u, const struct usum *sum, size_t nu, size_t n)
{
  const struct nrm_topology *t = c->t;
  size_t ng = t->n_l3 + 1; /* slot 0: cores without an L3 */
  struct usum *cs = xcalloc (t->n_numa * ng + 1, sizeof (*cs));
  int best = -1;
  size_t best_key[6] = { 0 };
  if (nu == 0)
    goto out;
  /* Every cell of every node in one pass over the cores (as summarize()). */
  for (size_t i = 0; i < t->n_numa * ng; i++)
    cs[i].uniform = true;
  for (size_t k = 0; k < t->n_cores; k++)
    {
      const struct nrm_core *core = &t->cores[k];
      if (c->avail[k] == 0 || core->numa < 0 || (u[0].package >= 0 && core->package != u[0].package))
        continue;
      summary_add (c, &cs[(size_t) core->numa * ng + (core->l3 >= 0 ? (size_t) core->l3 + 1 : 0)], k);
    }
  for (size_t i = 0; i < nu; i++)
    {
      if (sum[i].avail < n || u[i].node < 0)
        continue;
      size_t cell_cost = SIZE_MAX, cell_miss = SIZE_MAX, cell_free = SIZE_MAX;
      for (size_t g = 0; g < ng; g++)
        {
          const struct usum *x = &cs[(size_t) u[i].node * ng + g];
          if (x->avail < n)
            continue;
          struct unit cu = { LEVEL_CELL, u[i].package, u[i].node, g ? (int) g - 1 : -2 };
          size_t cost = summary_cost (c, &cu, x, n), m = miss (x->near, n);
          if (cost < cell_cost || (cost == cell_cost && (m < cell_miss || (m == cell_miss && x->avail < cell_free))))
            {
              cell_cost = cost;
              cell_miss = m;
              cell_free = x->avail;
            }
        }
      size_t key[6] = {
        summary_cost (c, &u[i], &sum[i], n), cell_cost, cell_miss, miss (sum[i].near, n), cell_free, sum[i].avail
      };
      size_t k = 0;
      while (k < 5 && key[k] == best_key[k])
        k++;
      if (best < 0 || key[k] < best_key[k])
        {
          best = (int) i;
          memcpy (best_key, key, sizeof (key));
        }
    }
out:
  free (cs);
  return best;
}

static int fill (struct ctx *c, const struct unit *scope, enum level lv, size_t n);

static int
descend (struct ctx *c, const struct unit *u, size_t n)
{
  if (u->level == LEVEL_CELL)
    return fill_cores (c, u, n);
  return fill (c, u, (enum level) (u->level + 1), n);
}

/* Fills n CPUs from the units of level lv inside scope: the best unit that
 * holds them all; else whole units, largest first, and the rest into the
 * best unit that holds it. */
static int
fill (struct ctx *c, const struct unit *scope, enum level lv, size_t n)
{
  size_t max = c->t->n_numa + c->t->n_l3 + c->t->n_packages + 2;
  struct unit *u = xcalloc (max, sizeof (*u));
  size_t nu = children (c, scope, lv, u, max);
  struct usum *sum = xcalloc (max, sizeof (*sum));
  int r = -1;
  for (size_t i = 0; i < nu; i++)
    summarize (c, &u[i], &sum[i]);
  int b = lv == LEVEL_NODE ? best_node (c, u, sum, nu, n) : best_fit (c, u, sum, nu, n);
  /* Two units that hold it together, a's whole cores first (a is taken
   * whole when it has none): the pair that splits the fewest cores, then
   * the one with the least room left over, so that larger free units stay
   * whole for later claims. */
  int pa = -1, pb = -1;
  size_t take_a = 0, pcost = 0, pmiss = 0, psum = 0;
  for (size_t i = 0; i < nu; i++)
    for (size_t j = 0; j < nu; j++)
      {
        if (i == j)
          continue;
        size_t fi = sum[i].avail, fj = sum[j].avail, wi = sum[i].whole;
        if (c->req->options & (NRM_OPT_DISTRIBUTE_ACROSS_CORES | NRM_OPT_FULL_PCPUS_ONLY))
          wi = fi;
        /* a's share: its whole cores, all of it, or the whole-core part of the claim (the odd
         * thread then pairs up in b rather than split a core of a) */
        size_t opts[3], no = 0;
        opts[no++] = wi > 0 && wi < n && fj >= n - wi ? wi : fi;
        if (sum[i].uniform && sum[i].size > 1)
          {
            size_t part = n / sum[i].size * sum[i].size;
            if (part > 0 && part < n && part <= wi)
              opts[no++] = part;
          }
        for (size_t o = 0; o < no; o++)
          {
            size_t ta = opts[o];
            if (ta >= n || fj < n - ta)
              continue;
            size_t cost = summary_cost (c, &u[i], &sum[i], ta) + summary_cost (c, &u[j], &sum[j], n - ta),
                   m = miss (sum[i].near, ta) + miss (sum[j].near, n - ta), total = fi + fj;
            if (pa < 0 || cost < pcost || (cost == pcost && (m < pmiss || (m == pmiss && total < psum))))
              {
                pa = (int) i;
                pb = (int) j;
                take_a = ta;
                pcost = cost;
                pmiss = m;
                psum = total;
              }
          }
      }
  /* One unit holds it: taken unless, among L3 groups, it would split more
   * cores than two groups together (whole cores come before whole L3
   * groups; prefer-align-cpus-by-uncorecache keeps one group). */
  if (b >= 0
      && (pa < 0 || lv != LEVEL_CELL || (c->req->options & NRM_OPT_PREFER_ALIGN_UNCORECACHE)
          || summary_cost (c, &u[b], &sum[b], n) <= pcost))
    {
      r = descend (c, &u[b], n);
      goto out;
    }
  if (pa >= 0)
    {
      r = descend (c, &u[pa], take_a) < 0 ? -1 : descend (c, &u[pb], n - take_a);
      goto out;
    }
  /* Several units: whole cores first, from the units with the most of
   * them (the fewest units), until one unit holds the rest; then free
   * threads the same way. */
  for (int pass = 0; pass < 2 && n > 0; pass++)
    for (;;)
      {
        int pick = -1, fit = -1;
        size_t pf = 0, pnear = 0, fit_cost = 0, fit_miss = 0, fit_free = 0;
        for (size_t i = 0; i < nu; i++)
          {
            struct usum su;
            summarize (c, &u[i], &su);
            size_t w = pass == 1 || (c->req->options & (NRM_OPT_DISTRIBUTE_ACROSS_CORES | NRM_OPT_FULL_PCPUS_ONLY))
                           ? su.avail
                           : su.whole;
            if (w >= n)
              {
                size_t cost = summary_cost (c, &u[i], &su, n), m = miss (su.near, n);
                if (fit < 0 || cost < fit_cost
                    || (cost == fit_cost && (m < fit_miss || (m == fit_miss && su.avail < fit_free))))
                  {
                    fit = (int) i;
                    fit_cost = cost;
                    fit_miss = m;
                    fit_free = su.avail;
                  }
              }
            else if (w > pf || (w == pf && w > 0 && su.near > pnear))
              {
                pick = (int) i;
                pf = w;
                pnear = su.near;
              }
          }
        if (fit >= 0)
          {
            r = descend (c, &u[fit], n);
            goto out;
          }
        if (pick < 0)
          break;
        if (descend (c, &u[pick], pf) < 0)
          goto out;
        n -= pf;
      }
  if (n > 0)
    goto out;
  r = 0;
out:
  free (u);
  free (sum);
  return r;
}

/* The nodes in the order a claim anchored at `anchor` takes them: the
 * anchor, then the nearest (same package first with align-by-socket; more
 * room first among equals). Returns how many there are. */
static size_t
node_order (const struct ctx *c, const size_t *free_of, size_t anchor, size_t *order)
{
  const struct nrm_topology *t = c->t;
  size_t nn = t->n_numa, count = 0;
  bool *done = xcalloc (nn + 1, sizeof (bool));
  order[count++] = anchor;
  done[anchor] = true;
  int apkg = t->numa[anchor].package;
  for (;;)
    {
      int pick = -1;
      for (size_t i = 0; i < nn; i++)
        {
          if (done[i] || free_of[i] == 0)
            continue;
          if (pick < 0)
            {
              pick = (int) i;
              continue;
            }
          bool si = t->numa[i].package == apkg, sp = t->numa[pick].package == apkg;
          uint64_t di = nrm_topology_distance (t, anchor, i), dp = nrm_topology_distance (t, anchor, (size_t) pick);
          if ((c->req->options & NRM_OPT_ALIGN_BY_SOCKET) && si != sp)
            {
              if (si)
                pick = (int) i;
              continue;
            }
          if (di < dp || (di == dp && free_of[i] > free_of[pick]))
            pick = (int) i;
        }
      if (pick < 0)
        break;
      order[count++] = (size_t) pick;
      done[pick] = true;
    }
  free (done);
  return count;
}

/* Across NUMA nodes: the anchor whose nearest nodes hold the claim in the
 * fewest nodes, then with the least room to spare (the emptiest nodes stay
 * whole for later claims), then the nearest ones. With
 * distribute-cpus-across-numa, even shares. */
static int
spill (struct ctx *c, size_t n)
{
  const struct nrm_topology *t = c->t;
  size_t nn = t->n_numa, *free_of = xcalloc (nn + 1, sizeof (size_t)), *order = xcalloc (nn + 1, sizeof (size_t));
  size_t *cand = xcalloc (nn + 1, sizeof (size_t));
  size_t count = 0, best_need = 0, best_sum = 0;
  uint64_t best_dist = 0;
  int r = -1;
  for (size_t i = 0; i < nn; i++)
    {
      struct unit u = { LEVEL_NODE, -1, (int) i, -1 };
      free_of[i] = unit_avail (c, &u);
    }
  for (size_t anchor = 0; anchor < nn; anchor++)
    {
      if (free_of[anchor] == 0)
        continue;
      size_t k = node_order (c, free_of, anchor, cand), need = 0, sum = 0;
      uint64_t dist = 0;
      while (need < k && sum < n)
        {
          dist += nrm_topology_distance (t, anchor, cand[need]);
          sum += free_of[cand[need++]];
        }
      if (sum < n)
        continue;
      if (count == 0 || need < best_need
          || (need == best_need && (sum < best_sum || (sum == best_sum && dist < best_dist))))
        {
          memcpy (order, cand, k * sizeof (size_t));
          count = k;
          best_need = need;
          best_sum = sum;
          best_dist = dist;
        }
    }
  if (count == 0)
    goto out;
  size_t need = 0, sum = 0;
  while (need < count && sum < n)
    sum += free_of[order[need++]];
  if (sum < n)
    goto out;
  size_t *share = xcalloc (need + 1, sizeof (size_t)), left = n;
  if (c->req->options & NRM_OPT_DISTRIBUTE_ACROSS_NUMA)
    /* Even shares, filled like water: a node that cannot take its share
     * leaves the rest to the others. */
    while (left > 0)
      {
        size_t open = 0;
        for (size_t k = 0; k < need; k++)
          open += share[k] < free_of[order[k]];
        size_t inc = left / open > 0 ? left / open : 1;
        for (size_t k = 0; k < need && left > 0; k++)
          {
            size_t room = free_of[order[k]] - share[k];
            size_t add = room < inc ? room : inc;
            add = add < left ? add : left;
            share[k] += add;
            left -= add;
          }
      }
  else
    {
      /* Whole cores of each node first, then the rest where there is room:
       * the claim splits as few cores as it can. */
      for (int pass = 0; pass < 2; pass++)
        for (size_t k = 0; k < need && left > 0; k++)
          {
            struct unit u = { LEVEL_NODE, -1, (int) order[k], -1 };
            size_t room = pass == 0 ? unit_whole (c, &u) : free_of[order[k]] - share[k];
            size_t add = room < left ? room : left;
            share[k] += add;
            left -= add;
          }
    }
  r = 0;
  for (size_t k = 0; k < need && r == 0; k++)
    if (share[k] > 0)
      {
        struct unit u = { LEVEL_NODE, -1, (int) order[k], -1 };
        r = fill (c, &u, LEVEL_CELL, share[k]);
      }
  free (share);
out:
  free (free_of);
  free (order);
  free (cand);
  return r;
}

int
nrm_place_cpus (const struct nrm_topology *t, hwloc_const_bitmap_t free_set, const struct nrm_cpu_request *req,
                hwloc_bitmap_t out, nrm_error_t *err)
{
  hwloc_bitmap_zero (out);
  if (nrm_cpu_options_check (req->options, err) < 0)
    return -1;
  struct ctx c = { t,
                   req,
                   xbitmap_dup (free_set),
                   out,
                   xcalloc (t->n_cores + 1, sizeof (size_t)),
                   xcalloc (t->n_cores + 1, sizeof (size_t)),
                   xcalloc (t->n_cores + 1, sizeof (bool)),
                   false };
  if (req->within)
    hwloc_bitmap_and (c.cand, c.cand, req->within);
  hwloc_bitmap_and (c.cand, c.cand, t->online);
  hwloc_bitmap_andnot (c.cand, c.cand, t->reserved);
  hwloc_bitmap_andnot (c.cand, c.cand, t->disallowed);
  if (req->isolated)
    hwloc_bitmap_and (c.cand, c.cand, t->isolated);
  else
    hwloc_bitmap_andnot (c.cand, c.cand, t->isolated);
  if (req->cpu_kind)
    {
      cleanup_bitmap hwloc_bitmap_t kind = xbitmap_alloc ();
      for (size_t k = 0; k < t->n_kinds; k++)
        if (strcmp (t->kinds[k].name, req->cpu_kind) == 0)
          hwloc_bitmap_or (kind, kind, t->kinds[k].cpus);
      /* A machine without kinds has only performance cores. */
      if (t->n_kinds == 0 && strcmp (req->cpu_kind, "performance") == 0)
        hwloc_bitmap_copy (kind, t->online);
      hwloc_bitmap_and (c.cand, c.cand, kind);
    }
  for (size_t k = 0; k < t->n_cores; k++)
    {
      c.size[k] = weight (t->cores[k].cpus);
      c.close[k] = req->near && hwloc_bitmap_intersects (t->cores[k].cpus, req->near);
      c.any_close |= c.close[k];
      /* full-pcpus-only: only cores whose every thread is usable. */
      if ((req->options & NRM_OPT_FULL_PCPUS_ONLY) && !hwloc_bitmap_isincluded (t->cores[k].cpus, c.cand))
        hwloc_bitmap_andnot (c.cand, c.cand, t->cores[k].cpus);
    }
  /* Usable CPUs per core, in one pass over the candidates. */
  int cpu;
  hwloc_bitmap_foreach_begin (cpu, c.cand)
  {
    int pi = nrm_topology_pu_index (t, (unsigned) cpu);
    if (pi >= 0 && t->pus[pi].core >= 0 && (size_t) t->pus[pi].core < t->n_cores)
      c.avail[t->pus[pi].core]++;
  }
  hwloc_bitmap_foreach_end ();

  size_t avail = weight (c.cand);
  int r;
  struct unit all = { LEVEL_PACKAGE, -1, -1, -1 };
  if (req->count == 0)
    r = 0;
  else if (avail < req->count)
    r = -2;
  else
    {
      /* One NUMA node when one holds it all (its best cells inside); else
       * whole packages with align-by-socket, or nodes by distance. */
      struct unit *u = xcalloc (t->n_numa + 1, sizeof (*u));
      size_t nu = children (&c, &all, LEVEL_NODE, u, t->n_numa);
      bool one_node = false;
      for (size_t i = 0; i < nu && !one_node; i++)
        one_node = unit_avail (&c, &u[i]) >= req->count;
      free (u);
      if (one_node)
        r = fill (&c, &all, LEVEL_NODE, req->count);
      else if (!(req->options & NRM_OPT_DISTRIBUTE_ACROSS_NUMA) && (req->options & NRM_OPT_ALIGN_BY_SOCKET))
        r = fill (&c, &all, LEVEL_PACKAGE, req->count);
      else
        r = spill (&c, req->count);
    }
  hwloc_bitmap_free (c.cand);
  free (c.avail);
  free (c.size);
  free (c.close);
  if (r == 0)
    return 0;
  hwloc_bitmap_zero (out);
  if (r == -2)
    return nrm_error_set (err, ENOSPC, "%zu CPU%s asked, %zu usable%s%s%s", req->count, req->count == 1 ? "" : "s",
                          avail, req->options & NRM_OPT_FULL_PCPUS_ONLY ? " in whole free cores" : "",
                          req->isolated ? " among isolated CPUs" : "", req->cpu_kind ? " of the requested kind" : "");
  return nrm_error_set (err, ENOSPC, "%zu CPU%s cannot be placed%s", req->count, req->count == 1 ? "" : "s",
                        req->options & NRM_OPT_FULL_PCPUS_ONLY ? " as whole cores" : "");
}

int
nrm_cpu_options_check (unsigned options, nrm_error_t *err)
{
  if ((options & NRM_OPT_FULL_PCPUS_ONLY) && (options & NRM_OPT_DISTRIBUTE_ACROSS_CORES))
    return nrm_error_set (err, EINVAL, "full-pcpus-only and distribute-cpus-across-cores exclude each other");
  return 0;
}

static const struct
{
  const char *name;
  unsigned flag;
} known_options[] = { { "full-pcpus-only", NRM_OPT_FULL_PCPUS_ONLY },
                      { "distribute-cpus-across-cores", NRM_OPT_DISTRIBUTE_ACROSS_CORES },
                      { "strict-cpu-reservation", NRM_OPT_STRICT_CPU_RESERVATION },
                      { "prefer-align-cpus-by-uncorecache", NRM_OPT_PREFER_ALIGN_UNCORECACHE },
                      /* The engine's own: their names are refused (below). */
                      { "distribute-cpus-across-numa", NRM_OPT_DISTRIBUTE_ACROSS_NUMA },
                      { "align-by-socket", NRM_OPT_ALIGN_BY_SOCKET } };
#define N_ACCEPTED 4

const char *
nrm_cpu_option_name (unsigned flag)
{
  for (size_t i = 0; i < sizeof (known_options) / sizeof (known_options[0]); i++)
    if (known_options[i].flag == flag)
      return known_options[i].name;
  return NULL;
}

int
nrm_cpu_option_parse (const char *name, unsigned *ret, nrm_error_t *err)
{
  /* The kubelet's options that choose between NUMA nodes or sockets: every
   * request takes its CPUs from one numa<N> device, so they could never act;
   * refused rather than accepted and ignored. */
  static const struct
  {
    const char *name, *instead;
  } refused[] = { { "distribute-cpus-across-numa", "one request per NUMA node, with the same count in each" },
                  { "align-by-socket", "a matchAttribute constraint on cpu.nrm.io/socket" } };
  for (size_t i = 0; i < N_ACCEPTED; i++)
    if (strcmp (known_options[i].name, name) == 0)
      {
        *ret |= known_options[i].flag;
        return 0;
      }
  for (size_t i = 0; i < sizeof (refused) / sizeof (refused[0]); i++)
    if (strcmp (refused[i].name, name) == 0)
      return nrm_error_set (err, EINVAL,
                            "CPU option `%s` is not supported: each request takes its CPUs from one numa<N> device, "
                            "which lies on one NUMA node; use %s",
                            name, refused[i].instead);
  return nrm_error_set (
      err, EINVAL,
      "unknown CPU option `%s` (full-pcpus-only, distribute-cpus-across-cores, strict-cpu-reservation, "
      "prefer-align-cpus-by-uncorecache)",
      name);
}

json_t *
nrm_cpus_layout (const struct nrm_topology *t, hwloc_const_bitmap_t cpus, hwloc_bitmap_t cores)
{
  cleanup_bitmap hwloc_bitmap_t whole = xbitmap_alloc (), partial = xbitmap_alloc ();
  cleanup_bitmap hwloc_bitmap_t l3 = xbitmap_alloc (), pkgs = xbitmap_alloc (), nodes = xbitmap_alloc ();
  if (cores)
    hwloc_bitmap_zero (cores);
  for (size_t k = 0; k < t->n_cores; k++)
    if (hwloc_bitmap_intersects (t->cores[k].cpus, cpus))
      {
        unsigned first = (unsigned) hwloc_bitmap_first (t->cores[k].cpus);
        hwloc_bitmap_set (hwloc_bitmap_isincluded (t->cores[k].cpus, cpus) ? whole : partial, first);
        if (cores)
          hwloc_bitmap_set (cores, first);
      }
  for (size_t k = 0; k < t->n_l3; k++)
    if (t->l3[k].cpus && hwloc_bitmap_intersects (t->l3[k].cpus, cpus))
      hwloc_bitmap_set (l3, t->l3[k].os_index);
  for (size_t k = 0; k < t->n_packages; k++)
    if (t->packages[k].cpus && hwloc_bitmap_intersects (t->packages[k].cpus, cpus))
      hwloc_bitmap_set (pkgs, t->packages[k].os_index);
  for (size_t k = 0; k < t->n_numa; k++)
    if (t->numa[k].cpus && hwloc_bitmap_intersects (t->numa[k].cpus, cpus))
      hwloc_bitmap_set (nodes, t->numa[k].os_index);
  cleanup_free char *w = nrm_cpulist_format (whole), *pa = nrm_cpulist_format (partial);
  cleanup_free char *l = nrm_cpulist_format (l3), *pk = nrm_cpulist_format (pkgs), *nd = nrm_cpulist_format (nodes);
  return json_pack ("{s:s, s:s, s:s, s:s, s:s}", "wholeCores", w, "partialCores", pa, "l3Groups", l, "packages", pk,
                    "numaNodes", nd);
}
