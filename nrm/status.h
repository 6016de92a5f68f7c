/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_STATUS_H
#define NRM_STATUS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "driver/registry.h"
#include "nrm/conf.h"
#include "nrm/base/error.h"
#include "topology/topology.h"

/* Per driver and pool, the devices and what claims hold of them (the counts
 * of a KEP-5677 ResourcePoolStatus); every claim and run with its CPUs and
 * memory nodes; exclusive, shared, reserved and isolated CPUs. */
int nrm_status (struct nrm_config *c, const struct nrm_topology *t, const struct nrm_drivers *drivers, bool as_json,
                FILE *out, nrm_error_t *err);

/* The CPUs that prepared claims and runs hold exclusively, as their drivers
 * describe them, from the checkpoints in the state dir (a rolling-update
 * twin's and nrm run's count too). */
hwloc_bitmap_t nrm_status_claimed_cpus (const struct nrm_config *c, const struct nrm_drivers *d);

/* The shared pool: online, allowed CPUs that are neither isolated nor
 * claimed (nor reserved, with strict-cpu-reservation). */
hwloc_bitmap_t nrm_status_shared_cpus (const struct nrm_config *c, const struct nrm_topology *t,
                                       hwloc_const_bitmap_t claimed);

/* The NUMA nodes whose memory device the prepared claims (and runs) hold
 * in full, by os index. */
hwloc_bitmap_t nrm_status_full_memory_nodes (const struct nrm_config *c, const struct nrm_topology *t,
                                             const struct nrm_drivers *d);

/* The memory nodes of the shared pool: every allowed node but those held
 * in full; all of them (and *starved) when that leaves none. */
hwloc_bitmap_t nrm_status_shared_mems (const struct nrm_topology *t, hwloc_const_bitmap_t full, bool *starved);

#endif
