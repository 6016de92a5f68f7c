/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_RECONCILE_H
#define NRM_RECONCILE_H

/* The shared pool: the CPUs and memory nodes of every container without a
 * claim of its own, as the claims of every enabled driver leave them
 * (what a claim holds from the driver's describe, what a NUMA node offers
 * from the driver's pool; no driver is named here), and the reconciler,
 * the thread of nrm plugin that keeps the containers there
 * (docs/commit.md). nrm status shows the same sets. */

#include <stdbool.h>

#include "driver/registry.h"
#include "nrm/conf.h"
#include "topology/topology.h"

/* The CPUs that prepared claims and runs hold exclusively (describe's
 * "cpus"), from the checkpoints in state_dir (a rolling-update twin's and
 * nrm run's count too). */
hwloc_bitmap_t nrm_shared_pool_claimed_cpus (const char *state_dir, const struct nrm_drivers *d);

/* The shared pool: online, allowed CPUs that are neither isolated nor
 * claimed (nor reserved, with strict-cpu-reservation). */
hwloc_bitmap_t nrm_shared_pool_cpus (const struct nrm_config *c, const struct nrm_topology *t,
                                     hwloc_const_bitmap_t claimed);

/* The NUMA nodes, by os index, whose memory the claims (prepared, and
 * being prepared) hold in full: a node's memory is what the devices of a
 * driver's pool with a consumable capacity `memory` on that node offer now
 * (the driver's own figure: memory offlined since the start, huge page
 * pools raised on demand), and claims hold of it what describe gives under
 * "devices" for the claims that bind memory nodes ("memoryNodes"). */
hwloc_bitmap_t nrm_shared_pool_full_nodes (const char *state_dir, const struct nrm_topology *t,
                                           const struct nrm_drivers *d);

/* The memory nodes of the shared pool: every allowed node but those held
 * in full; all of them (and *starved) when that leaves none. */
hwloc_bitmap_t nrm_shared_pool_mems (const struct nrm_topology *t, hwloc_const_bitmap_t full, bool *starved);

/* The reconciler. new() makes its wake-up, which kick() (a callback of the
 * plugins: any claim may change the exclusive CPUs) may be called on from
 * then until free(); start() starts the thread where there is a cgroup v2
 * to keep (it logs why not otherwise); stop() joins it. may_write says
 * whether this instance writes the node's cpusets (not while a newer one
 * of a rolling update does, driver/k8s/handover.h). */
struct nrm_reconciler;
struct nrm_reconciler *nrm_reconciler_new (void);
void nrm_reconciler_start (struct nrm_reconciler *r, struct nrm_config *c, const struct nrm_fsroot *root,
                           const struct nrm_topology *t, const struct nrm_drivers *d, bool (*may_write) (void *ctx),
                           void *ctx);
void nrm_reconciler_kick (void *reconciler);
/* Whether start() started the thread. */
bool nrm_reconciler_running (const struct nrm_reconciler *r);
void nrm_reconciler_stop (struct nrm_reconciler *r);
void nrm_reconciler_free (struct nrm_reconciler *r);

#endif
