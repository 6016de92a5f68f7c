/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_MEMORY_HEALTH_H
#define NRM_MEMORY_HEALTH_H

/* What the kernel says of the health of memory, read below a root (this
 * machine or a tree standing for it): the EDAC error counters of each memory
 * controller and the state of the memory blocks of each NUMA node. */

#include <stdint.h>
#include <stddef.h>

#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"

struct nrm_edac_mc
{
  char name[16]; /* mc0 */
  /* The socket the controller's name gives (skx_edac, i10nm_edac:
   * "... Socket#1 IMC#0"; sb_edac: "... SrcID#1_Ha#0"), or -1: the kernel
   * links no controller to a NUMA node. */
  int socket;
  int64_t ce, ue; /* ce_count and ue_count: since boot or reset_counters */
};

/* Every controller of /sys/devices/system/edac/mc, in index order; none
 * (*n = 0) when EDAC is not loaded. A counter that is not a number is an
 * error naming its file. */
int nrm_edac_read (const struct nrm_fsroot *root, struct nrm_edac_mc **ret, size_t *n, nrm_error_t *err);

/* Bytes of the memory blocks of NUMA node `node` (its memoryN links under
 * /sys/devices/system/node/nodeN) that are online and offline. Returns 1,
 * with nothing counted, when the kernel has no memory blocks (no
 * /sys/devices/system/memory/block_size_bytes or no node folder), 0 when
 * counted, -1 on a block whose state or size cannot be read. */
int nrm_memory_blocks_read (const struct nrm_fsroot *root, unsigned node, uint64_t *online, uint64_t *offline,
                            nrm_error_t *err);

/* A zone of a NUMA node whose free pages are below its low watermark: the
 * kernel's kswapd reclaims there (below min, allocations reclaim
 * themselves). From /proc/zoneinfo, the only per-node pressure the kernel
 * reports: PSI (/proc/pressure/memory) is system-wide or per cgroup. */
struct nrm_zone_low
{
  char zone[16];
  uint64_t free, min, low; /* pages */
};

/* The zones of node `node` below their low watermark, at most max into
 * ret; returns how many (0 when none or no /proc/zoneinfo), -1 on a line
 * that names the node's zone but no number. */
int nrm_zones_low_read (const struct nrm_fsroot *root, unsigned node, struct nrm_zone_low *ret, size_t max,
                        nrm_error_t *err);

#endif
