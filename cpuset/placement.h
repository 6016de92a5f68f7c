/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_PLACEMENT_H
#define NRM_PLACEMENT_H

#include <hwloc.h>
#include <stdbool.h>
#include <stddef.h>

#include "nrm/base/error.h"
#include "topology/topology.h"

/* Topology-aware choice of exclusive CPUs. */

enum nrm_cpu_option
{
  /* Whole physical cores only (kubelet full-pcpus-only). */
  NRM_OPT_FULL_PCPUS_ONLY = 1 << 0,
  /* Spread over the fewest NUMA nodes evenly instead of packing one first
   * (kubelet distribute-cpus-across-numa). Engine only: a request through
   * a device lies on one node, so nrm_cpu_option_parse refuses the name. */
  NRM_OPT_DISTRIBUTE_ACROSS_NUMA = 1 << 1,
  /* Prefer whole sockets over whole NUMA nodes when spilling over (kubelet
   * align-by-socket). Engine only, as above. */
  NRM_OPT_ALIGN_BY_SOCKET = 1 << 2,
  /* One thread per core before any second thread (kubelet
   * distribute-cpus-across-cores). */
  NRM_OPT_DISTRIBUTE_ACROSS_CORES = 1 << 3,
  /* Reserved CPUs are kept out of the shared pool too (kubelet
   * strict-cpu-reservation); placement never uses them in any case. */
  NRM_OPT_STRICT_CPU_RESERVATION = 1 << 4,
  /* Fit the claim into the fewest L3 (uncore) caches (kubelet
   * prefer-align-cpus-by-uncorecache); nrm does this by default, the option
   * is accepted for compatibility. */
  NRM_OPT_PREFER_ALIGN_UNCORECACHE = 1 << 5,
};

struct nrm_cpu_request
{
  size_t count;
  hwloc_const_bitmap_t within; /* the CPUs of the allocated device(s) */
  unsigned options;            /* enum nrm_cpu_option */
  const char *cpu_kind;        /* "performance", "efficiency" or NULL for any */
  bool isolated;               /* only isolated CPUs (else never isolated ones) */
  /* CPUs near the claim's PCI devices, or NULL: among choices that the
   * rules above rank equal in split cores, those with more of these win
   * (before best fit and topology order). */
  hwloc_const_bitmap_t near;
};

/* Picks req->count CPUs from free ∩ req->within into out (cleared first).
 * Preference: whole cores (no SMT sibling shared with another claim), then
 * the fewest L3 groups, one NUMA node, one package, then the nearest nodes;
 * then the CPUs of req->near; the smallest hole that fits is used, so large
 * ones stay whole. The same
 * state and request always give the same answer. On error out is empty and
 * the message says why. */
int nrm_place_cpus (const struct nrm_topology *t, hwloc_const_bitmap_t free, const struct nrm_cpu_request *req,
                    hwloc_bitmap_t out, nrm_error_t *err);

/* Options that cannot go together are refused. */
int nrm_cpu_options_check (unsigned options, nrm_error_t *err);

/* Parses a kubelet CPU Manager option name ("full-pcpus-only", ...).
 * distribute-cpus-across-numa and align-by-socket are refused with the
 * reason: a request is placed inside one NUMA node's device. */
int nrm_cpu_option_parse (const char *name, unsigned *ret, nrm_error_t *err);
/* The kubelet's name of one option (a single flag), or NULL. */
const char *nrm_cpu_option_name (unsigned flag);

/* How a set of CPUs lies on the machine, as nrm run --dry-run, nrm status
 * and a claim's metadata tell it: {"wholeCores": cores all of whose CPUs
 * are in the set, "partialCores": cores that share a CPU with one outside
 * it (an SMT sibling left to another claim or the shared pool), both by
 * their first CPU; "l3Groups", "packages", "numaNodes": the os indexes of
 * those the set meets}, each a list "0-2,5" ("" for none). cores, when
 * not NULL, gets every core the set meets (by its first CPU). */
json_t *nrm_cpus_layout (const struct nrm_topology *t, hwloc_const_bitmap_t cpus, hwloc_bitmap_t cores);

#endif
