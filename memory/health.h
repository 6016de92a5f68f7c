/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_MEMORY_HEALTH_H
#define NRM_MEMORY_HEALTH_H

/* What the kernel says of the health of memory, read below a root (this
 * machine or a tree standing for it): the EDAC error counters of each memory
 * controller with what places it on NUMA nodes, the state of the memory
 * blocks of each NUMA node and the node of a physical address. */

#include <stdint.h>
#include <stddef.h>

#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"

/* How a controller is placed on NUMA nodes. The kernel links no EDAC
 * controller to a node in sysfs (drivers/edac/edac_mc_sysfs.c,
 * edac_create_sysfs_mci_device(): mcN's parent is the EDAC bus, not the
 * device), so nrm reads it from what each driver puts in mc_name and in
 * the controller's index (edac_mc_alloc()'s mc_num). */
enum nrm_edac_map
{
  NRM_EDAC_UNMAPPED = 0,
  /* socket below: skx_edac, i10nm_edac ("Skylake Socket#1 IMC#0"),
   * sb_edac ("Ivy Bridge SrcID#1_Ha#0"); amd64_edac on families with one
   * data fabric per socket, whose index is the socket. */
  NRM_EDAC_SOCKET,
  /* amd64_edac on families with one node per die (F10h, F15h, F17h,
   * F18h): the index is the die's AMD node, a NUMA node each unless memory
   * is interleaved across dies. */
  NRM_EDAC_DIE,
  /* node below: thunderx_edac, whose index is the LMC's PCI function plus
   * its NUMA node times 8 (thunderx_edac.c, pci_dev_to_mc_idx()). */
  NRM_EDAC_NODE,
  /* ghes_edac: one controller for the whole machine (ghes_edac.c,
   * ghes_edac_register(): edac_mc_alloc(0, ...)); placed per error by the
   * physical address of its ras:mc_event (memory/mcevent.h). */
  NRM_EDAC_FIRMWARE,
};

struct nrm_edac_mc
{
  char name[16];  /* mc0 */
  char ctl[64];   /* mc_name, cut at a newline; "" when absent */
  unsigned index; /* N of mcN: edac_mc_alloc()'s mc_num */
  enum nrm_edac_map map;
  int socket;     /* NRM_EDAC_SOCKET: the package's OS index; else -1 */
  int node;       /* NRM_EDAC_DIE, NRM_EDAC_NODE: the NUMA node; else -1 */
  int64_t ce, ue; /* ce_count and ue_count: since boot or reset_counters */
};

/* Every controller of /sys/devices/system/edac/mc, in index order; none
 * (*n = 0) when EDAC is not loaded. A counter that is not a number is an
 * error naming its file. */
int nrm_edac_read (const struct nrm_fsroot *root, struct nrm_edac_mc **ret, size_t *n, nrm_error_t *err);

/* The NUMA node of the memory block holding physical address `address`
 * (block address / block_size_bytes; the node's memoryN link, made by
 * drivers/base/node.c, do_register_memory_block_under_node()). Returns 0
 * with *node set, 1 when no node links that block (no memory blocks, a
 * hole, an offline node), -1 when block_size_bytes cannot be read. */
int nrm_memory_block_node (const struct nrm_fsroot *root, uint64_t address, unsigned *node, nrm_error_t *err);

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
