/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/placement.h"
#include "nrm/cleanup.h"

/* A unit of the topology tree (package, NUMA node, L3 cell, core) as the
 * set of its CPUs that the request may use. */
struct unit
{
  hwloc_bitmap_t cpus;
  size_t free;
  size_t index;
};

struct ctx
{
  const struct nrm_topology *t;
  const struct nrm_cpu_request *req;
  hwloc_bitmap_t cand; /* usable CPUs not yet taken */
  hwloc_bitmap_t out;
};

static size_t
weight (hwloc_const_bitmap_t s)
{
  int w = hwloc_bitmap_weight (s);
  return w > 0 ? (size_t) w : 0;
}

static void
take (struct ctx *c, hwloc_const_bitmap_t set)
{
  hwloc_bitmap_or (c->out, c->out, set);
  hwloc_bitmap_andnot (c->cand, c->cand, set);
}

/* --- cores --------------------------------------------------------------- */

/* Takes n CPUs among the cores inside `scope`. Whole free cores first, then
 * the free threads of cores another claim already uses (no new core is
 * split), and only then part of a free core. */
static int
fill_cores (struct ctx *c, hwloc_const_bitmap_t scope, size_t n)
{
  const struct nrm_topology *t = c->t;
  cleanup_bitmap hwloc_bitmap_t avail = hwloc_bitmap_dup (scope);
  hwloc_bitmap_and (avail, avail, c->cand);
  if (weight (avail) < n)
    return -1;

  if (c->req->options & NRM_OPT_DISTRIBUTE_ACROSS_CORES)
    {
      /* Round r takes one more thread of every core that has r of this
       * claim's threads already: siblings only once every core has one. */
      for (size_t round = 0; n > 0 && round < 16; round++)
        for (size_t k = 0; k < t->n_cores && n > 0; k++)
          {
            cleanup_bitmap hwloc_bitmap_t mine = hwloc_bitmap_dup (t->cores[k].cpus);
            cleanup_bitmap hwloc_bitmap_t f = hwloc_bitmap_dup (t->cores[k].cpus);
            hwloc_bitmap_and (mine, mine, c->out);
            hwloc_bitmap_and (f, f, avail);
            int cpu = hwloc_bitmap_first (f);
            if (cpu < 0 || weight (mine) != round)
              continue;
            hwloc_bitmap_only (f, (unsigned) cpu);
            take (c, f);
            hwloc_bitmap_andnot (avail, avail, f);
            n--;
          }
      return n == 0 ? 0 : -1;
    }

  /* Whole free cores. */
  for (size_t k = 0; k < t->n_cores && n > 0; k++)
    {
      const struct nrm_core *core = &t->cores[k];
      size_t w = weight (core->cpus);
      if (w == 0 || w > n || !hwloc_bitmap_isincluded (core->cpus, avail))
        continue;
      take (c, core->cpus);
      hwloc_bitmap_andnot (avail, avail, core->cpus);
      n -= w;
    }
  if (n == 0)
    return 0;
  if (c->req->options & NRM_OPT_FULL_PCPUS_ONLY)
    return -1;

  /* Threads of cores that are split already: fewest free threads first. */
  for (size_t want_free = 1; want_free < 16 && n > 0; want_free++)
    for (size_t k = 0; k < t->n_cores && n > 0; k++)
      {
        cleanup_bitmap hwloc_bitmap_t f = hwloc_bitmap_dup (t->cores[k].cpus);
        hwloc_bitmap_and (f, f, avail);
        size_t w = weight (f);
        if (w != want_free || w == weight (t->cores[k].cpus))
          continue;
        int cpu;
        hwloc_bitmap_foreach_begin (cpu, f)
        {
          if (n == 0)
            break;
          hwloc_bitmap_t one = hwloc_bitmap_alloc ();
          hwloc_bitmap_only (one, (unsigned) cpu);
          take (c, one);
          hwloc_bitmap_andnot (avail, avail, one);
          hwloc_bitmap_free (one);
          n--;
        }
        hwloc_bitmap_foreach_end ();
      }
  /* Last: split the smallest free core that covers the rest. */
  while (n > 0)
    {
      int best = -1;
      size_t best_w = 0;
      for (size_t k = 0; k < t->n_cores; k++)
        {
          size_t w = weight (t->cores[k].cpus);
          if (w == 0 || !hwloc_bitmap_isincluded (t->cores[k].cpus, avail))
            continue;
          if (best < 0 || (w >= n && (best_w < n || w < best_w)) || (best_w < n && w > best_w))
            {
              best = (int) k;
              best_w = w;
            }
        }
      if (best < 0)
        return -1;
      int cpu;
      hwloc_bitmap_foreach_begin (cpu, t->cores[best].cpus)
      {
        if (n == 0)
          break;
        hwloc_bitmap_t one = hwloc_bitmap_alloc ();
        hwloc_bitmap_only (one, (unsigned) cpu);
        take (c, one);
        hwloc_bitmap_andnot (avail, avail, one);
        hwloc_bitmap_free (one);
        n--;
      }
      hwloc_bitmap_foreach_end ();
    }
  return 0;
}

/* --- units ---------------------------------------------------------------- */

enum level
{
  LEVEL_PACKAGE,
  LEVEL_NODE,
  LEVEL_CELL,
};

/* The units of a level inside `scope`, with their usable CPUs counted. */
static size_t
units (struct ctx *c, enum level lv, hwloc_const_bitmap_t scope, struct unit **ret)
{
  const struct nrm_topology *t = c->t;
  size_t cap = lv == LEVEL_PACKAGE ? t->n_packages : lv == LEVEL_NODE ? t->n_numa : t->n_numa * (t->n_l3 + 1);
  struct unit *u = calloc (cap + 1, sizeof (*u));
  size_t n = 0;
  for (size_t i = 0; i < cap; i++)
    {
      hwloc_bitmap_t s;
      if (lv == LEVEL_PACKAGE)
        s = hwloc_bitmap_dup (t->packages[i].cpus);
      else if (lv == LEVEL_NODE)
        s = hwloc_bitmap_dup (t->numa[i].cpus);
      else
        {
          /* A cell is a node's share of one L3 group; CPUs without L3 form
           * a cell of their own. */
          size_t node = i / (t->n_l3 + 1), l = i % (t->n_l3 + 1);
          s = hwloc_bitmap_dup (t->numa[node].cpus);
          if (l < t->n_l3)
            hwloc_bitmap_and (s, s, t->l3[l].cpus);
          else
            for (size_t k = 0; k < t->n_l3; k++)
              hwloc_bitmap_andnot (s, s, t->l3[k].cpus);
        }
      hwloc_bitmap_and (s, s, scope);
      hwloc_bitmap_and (s, s, c->cand);
      if (hwloc_bitmap_iszero (s))
        {
          hwloc_bitmap_free (s);
          continue;
        }
      u[n++] = (struct unit){ s, weight (s), i };
    }
  *ret = u;
  return n;
}

static void
units_free (struct unit *u, size_t n)
{
  for (size_t i = 0; i < n; i++)
    hwloc_bitmap_free (u[i].cpus);
  free (u);
}

/* The unit with the fewest usable CPUs that still holds n, or -1. */
static int
best_fit (const struct unit *u, size_t n_units, size_t n)
{
  int best = -1;
  for (size_t i = 0; i < n_units; i++)
    if (u[i].free >= n && (best < 0 || u[i].free < u[best].free))
      best = (int) i;
  return best;
}

static int fill (struct ctx *c, enum level lv, hwloc_const_bitmap_t scope, size_t n);

/* Fills n CPUs from the units of level lv inside scope: the smallest unit
 * that fits; else whole units, largest first, and the rest into the
 * smallest unit that fits it. */
static int
fill (struct ctx *c, enum level lv, hwloc_const_bitmap_t scope, size_t n)
{
  struct unit *u = NULL;
  size_t nu = units (c, lv, scope, &u);
  int r = -1;
  int b = best_fit (u, nu, n);
  if (b >= 0)
    {
      r = lv == LEVEL_CELL ? fill_cores (c, u[b].cpus, n) : fill (c, (enum level) (lv + 1), u[b].cpus, n);
      units_free (u, nu);
      return r;
    }
  /* Whole units, largest first (ties: topology order). */
  bool *used = calloc (nu + 1, sizeof (bool));
  for (;;)
    {
      int pick = -1;
      for (size_t i = 0; i < nu; i++)
        if (!used[i] && u[i].free <= n && (pick < 0 || u[i].free > u[pick].free))
          pick = (int) i;
      if (pick < 0)
        break;
      used[pick] = true;
      size_t got = u[pick].free;
      if ((lv == LEVEL_CELL ? fill_cores (c, u[pick].cpus, got) : fill (c, (enum level) (lv + 1), u[pick].cpus, got))
          < 0)
        goto out;
      n -= got;
      if (n == 0)
        break;
    }
  if (n > 0)
    {
      int rest = -1;
      for (size_t i = 0; i < nu; i++)
        if (!used[i] && u[i].free >= n && (rest < 0 || u[i].free < u[rest].free))
          rest = (int) i;
      if (rest < 0)
        goto out;
      if ((lv == LEVEL_CELL ? fill_cores (c, u[rest].cpus, n) : fill (c, (enum level) (lv + 1), u[rest].cpus, n))
          < 0)
        goto out;
    }
  r = 0;
out:
  free (used);
  units_free (u, nu);
  return r;
}

/* Across NUMA nodes: start from the node with the most usable CPUs, then
 * add the nearest nodes (same package first when aligning by socket). With
 * distribute-across-numa the count is split evenly over the nodes needed. */
static int
spill (struct ctx *c, size_t n)
{
  const struct nrm_topology *t = c->t;
  struct unit *u = NULL;
  size_t nu = units (c, LEVEL_NODE, c->cand, &u);
  int r = -1;
  if (nu == 0)
    {
      units_free (u, nu);
      return -1;
    }
  size_t anchor = 0;
  for (size_t i = 1; i < nu; i++)
    if (u[i].free > u[anchor].free)
      anchor = i;
  /* Order the nodes: anchor, then by distance (same package first with
   * align-by-socket), then by usable CPUs, then index. */
  size_t *order = calloc (nu, sizeof (size_t));
  bool *done = calloc (nu, sizeof (bool));
  order[0] = anchor;
  done[anchor] = true;
  int apkg = t->numa[u[anchor].index].package;
  for (size_t k = 1; k < nu; k++)
    {
      int pick = -1;
      for (size_t i = 0; i < nu; i++)
        {
          if (done[i])
            continue;
          if (pick < 0)
            {
              pick = (int) i;
              continue;
            }
          bool si = t->numa[u[i].index].package == apkg, sp = t->numa[u[pick].index].package == apkg;
          uint64_t di = nrm_topology_distance (t, u[anchor].index, u[i].index);
          uint64_t dp = nrm_topology_distance (t, u[anchor].index, u[pick].index);
          if ((c->req->options & NRM_OPT_ALIGN_BY_SOCKET) && si != sp)
            {
              if (si)
                pick = (int) i;
              continue;
            }
          if (di < dp || (di == dp && u[i].free > u[pick].free))
            pick = (int) i;
        }
      order[k] = (size_t) pick;
      done[pick] = true;
    }
  /* How many nodes are needed. */
  size_t need = 0, sum = 0;
  while (need < nu && sum < n)
    sum += u[order[need++]].free;
  if (sum < n)
    goto out;
  if (c->req->options & NRM_OPT_DISTRIBUTE_ACROSS_NUMA)
    {
      /* Even shares over the nodes needed, filled like water: a node that
       * cannot take its share leaves the rest to the others. */
      size_t *share = calloc (need, sizeof (size_t)), left = n;
      while (left > 0)
        {
          size_t open = 0;
          for (size_t k = 0; k < need; k++)
            open += share[k] < u[order[k]].free;
          size_t inc = left / open > 0 ? left / open : 1;
          for (size_t k = 0; k < need && left > 0; k++)
            {
              size_t room = u[order[k]].free - share[k];
              size_t add = room < inc ? room : inc;
              add = add < left ? add : left;
              share[k] += add;
              left -= add;
            }
        }
      r = 0;
      for (size_t k = 0; k < need && r == 0; k++)
        if (share[k] > 0 && fill (c, LEVEL_CELL, u[order[k]].cpus, share[k]) < 0)
          r = -1;
      free (share);
      goto out;
    }
  size_t left = n;
  for (size_t k = 0; k < need && left > 0; k++)
    {
      size_t share = u[order[k]].free < left ? u[order[k]].free : left;
      if (fill (c, LEVEL_CELL, u[order[k]].cpus, share) < 0)
        goto out;
      left -= share;
    }
  r = left == 0 ? 0 : -1;
out:
  free (order);
  free (done);
  units_free (u, nu);
  return r;
}

int
nrm_place_cpus (const struct nrm_topology *t, hwloc_const_bitmap_t free, const struct nrm_cpu_request *req,
                hwloc_bitmap_t out, nrm_error_t *err)
{
  hwloc_bitmap_zero (out);
  if ((req->options & NRM_OPT_FULL_PCPUS_ONLY) && (req->options & NRM_OPT_DISTRIBUTE_ACROSS_CORES))
    return nrm_error_set (err, EINVAL, "full-pcpus-only and distribute-cpus-across-cores exclude each other");
  struct ctx c = { t, req, hwloc_bitmap_dup (free), out };
  if (c.cand == NULL)
    return nrm_error_set (err, ENOMEM, "out of memory");
  if (req->within)
    hwloc_bitmap_and (c.cand, c.cand, req->within);
  hwloc_bitmap_andnot (c.cand, c.cand, t->reserved);
  hwloc_bitmap_andnot (c.cand, c.cand, t->disallowed);
  if (req->isolated)
    hwloc_bitmap_and (c.cand, c.cand, t->isolated);
  else
    hwloc_bitmap_andnot (c.cand, c.cand, t->isolated);
  if (req->cpu_kind)
    {
      cleanup_bitmap hwloc_bitmap_t kind = hwloc_bitmap_alloc ();
      for (size_t k = 0; k < t->n_kinds; k++)
        if (strcmp (t->kinds[k].name, req->cpu_kind) == 0)
          hwloc_bitmap_or (kind, kind, t->kinds[k].cpus);
      /* A machine without kinds has only performance cores. */
      if (t->n_kinds == 0 && strcmp (req->cpu_kind, "performance") == 0)
        hwloc_bitmap_copy (kind, t->online);
      hwloc_bitmap_and (c.cand, c.cand, kind);
    }
  if (req->options & NRM_OPT_FULL_PCPUS_ONLY)
    /* Only cores whose every thread is usable. */
    for (size_t k = 0; k < t->n_cores; k++)
      if (!hwloc_bitmap_isincluded (t->cores[k].cpus, c.cand))
        hwloc_bitmap_andnot (c.cand, c.cand, t->cores[k].cpus);

  size_t avail = weight (c.cand);
  int r;
  if (req->count == 0)
    r = 0;
  else if (avail < req->count)
    r = -2;
  else
    {
      /* One package at most when it fits (the levels below pick the best
       * node and cells inside it); else spill over nodes by distance. */
      struct unit *u = NULL;
      size_t nu = units (&c, LEVEL_NODE, c.cand, &u);
      bool one_node = best_fit (u, nu, req->count) >= 0;
      units_free (u, nu);
      if (one_node)
        r = fill (&c, LEVEL_NODE, c.cand, req->count);
      else if (!(req->options & NRM_OPT_DISTRIBUTE_ACROSS_NUMA) && (req->options & NRM_OPT_ALIGN_BY_SOCKET))
        r = fill (&c, LEVEL_PACKAGE, c.cand, req->count);
      else
        r = spill (&c, req->count);
    }
  hwloc_bitmap_free (c.cand);
  if (r == 0)
    return 0;
  hwloc_bitmap_zero (out);
  if (r == -2)
    return nrm_error_set (err, ENOSPC, "%zu CPUs asked, %zu usable%s%s%s", req->count, avail,
                          req->options & NRM_OPT_FULL_PCPUS_ONLY ? " in whole free cores" : "",
                          req->isolated ? " among isolated CPUs" : "", req->cpu_kind ? " of the requested kind" : "");
  return nrm_error_set (err, ENOSPC, "%zu CPUs cannot be placed%s", req->count,
                        req->options & NRM_OPT_FULL_PCPUS_ONLY ? " as whole cores" : "");
}

int
nrm_cpu_option_parse (const char *name, unsigned *ret, nrm_error_t *err)
{
  static const struct
  {
    const char *name;
    unsigned flag;
  } opts[] = { { "full-pcpus-only", NRM_OPT_FULL_PCPUS_ONLY },
               { "distribute-cpus-across-numa", NRM_OPT_DISTRIBUTE_ACROSS_NUMA },
               { "align-by-socket", NRM_OPT_ALIGN_BY_SOCKET },
               { "distribute-cpus-across-cores", NRM_OPT_DISTRIBUTE_ACROSS_CORES },
               { "strict-cpu-reservation", NRM_OPT_STRICT_CPU_RESERVATION },
               { "prefer-align-cpus-by-uncorecache", NRM_OPT_PREFER_ALIGN_UNCORECACHE } };
  for (size_t i = 0; i < sizeof (opts) / sizeof (opts[0]); i++)
    if (strcmp (opts[i].name, name) == 0)
      {
        *ret |= opts[i].flag;
        return 0;
      }
  return nrm_error_set (err, EINVAL,
                        "unknown CPU option `%s` (full-pcpus-only, distribute-cpus-across-numa, align-by-socket, "
                        "distribute-cpus-across-cores, strict-cpu-reservation, prefer-align-cpus-by-uncorecache)",
                        name);
}
