/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_MEMORY_COMMIT_H
#define NRM_MEMORY_COMMIT_H

#include <stddef.h>

#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"
#include "nrm/base/hugetlb.h"

/* The memory commit: what a memory binding writes into a container's
 * cgroup v2 (cpuset.mems, memory.min, memory.max, hugetlb.<size>.max and
 * .rsvd.max). The commit above (nrm_binding_apply, nrm/commit.c) writes
 * these beside the CPUs, all or nothing. */

/* What a container's memory is bound to; NULL fields are left alone. */
struct nrm_memory_binding
{
  const char *mems;       /* cpuset.mems */
  const char *memory_max; /* memory.max */
  const char *memory_min; /* memory.min */
  size_t n_hugetlb;
  struct
  {
    const char *size; /* "2MB", "1GB": the kernel's names */
    const char *max;  /* bytes */
  } hugetlb[NRM_HUGETLB_SIZES_MAX];
};

/* One control file and the value written to it. */
struct nrm_cgroup_file
{
  const char *file, *value;
};

#define NRM_MEMORY_FILES_MAX (3 + 2 * 4)

/* The files of a binding in the order they are written (out has room for
 * NRM_MEMORY_FILES_MAX; huge page file names are made in names). */
size_t nrm_memory_files (const struct nrm_memory_binding *m, struct nrm_cgroup_file *out,
                         char names[2 * NRM_HUGETLB_SIZES_MAX][32]);

/* The least memory.max or memory.min a binding may set: below it a
 * container is killed at its first pages (nrm publishes memory in steps of
 * at least this much). */
#define NRM_MEMORY_LIMIT_MIN (1024 * 1024)

/* Checks a binding's amounts against the machine below the root before
 * anything is written: memory.max and memory.min from NRM_MEMORY_LIMIT_MIN
 * up to the memory of its nodes (MemTotal of each node's meminfo), huge
 * pages in whole pages and at most the pages of those nodes (nr_hugepages).
 * Its nodes are cpuset.mems, or every node without it. What the tree does
 * not say (no node folder, no meminfo) is not checked. The error names the
 * file, the amount and the limit. */
int nrm_memory_binding_check (const struct nrm_fsroot *root, const struct nrm_memory_binding *m, nrm_error_t *err);

#endif
