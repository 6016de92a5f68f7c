/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_MEMORY_PLACE_H
#define NRM_MEMORY_PLACE_H

#include <stddef.h>
#include <stdint.h>

#include "nrm/base/error.h"
#include "topology/topology.h"

/* Which NUMA node a run's memory comes from when it asks for a kind
 * (memoryKind: DRAM, HBM, NVM, as hwloc names them) or a tier (memoryTier,
 * 0 the fastest): the node of that kind with room for bytes nearest to
 * near (a node index: the CPUs' node), then the one with more room, then
 * the lower os index. kind NULL and tier < 0 match every node. room[i] is
 * what node i has left (NULL: its allocatable memory). The error names
 * the kind or tier and, when nodes of it exist, the room of the nearest. */
int nrm_memory_pick (const struct nrm_topology *t, size_t near, const char *kind, int tier, uint64_t bytes,
                     const uint64_t *room, size_t *ret, nrm_error_t *err);

#endif
