/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_MEMORY_HUGEPAGES_H
#define NRM_MEMORY_HUGEPAGES_H

/* The kernel's huge page pool of one NUMA node and page size, below the root:
 * /sys/devices/system/node/node<N>/hugepages/hugepages-<kB>kB/nr_hugepages. */

#include <stdbool.h>
#include <stdint.h>

#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"

/* The pool's file; the caller frees. */
char *nrm_hugepages_path (const struct nrm_fsroot *root, unsigned node, uint64_t page_size);

/* The pages the pool holds now. */
int nrm_hugepages_read (const struct nrm_fsroot *root, unsigned node, uint64_t page_size, uint64_t *count,
                        nrm_error_t *err);

/* Asks the kernel for count pages and reads back in *got what it gave: a
 * kernel that cannot find free contiguous memory gives fewer (no error). */
int nrm_hugepages_write (const struct nrm_fsroot *root, unsigned node, uint64_t page_size, uint64_t count,
                         uint64_t *got, nrm_error_t *err);

/* The node's free memory (MemFree of its meminfo) in bytes; 0 with *known
 * false when the file or the line is missing. */
int nrm_node_mem_free (const struct nrm_fsroot *root, unsigned node, uint64_t *bytes, bool *known, nrm_error_t *err);

#endif
