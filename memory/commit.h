/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_MEMORY_COMMIT_H
#define NRM_MEMORY_COMMIT_H

#include <stddef.h>

/* The memory commit: what a memory binding writes into a container's
 * cgroup v2 (cpuset.mems, memory.min, memory.max, hugetlb.<size>.max and
 * .rsvd.max). The cgroup commit (cpuset/cgroup.c) writes these beside the
 * CPUs, all or nothing. */

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
  } hugetlb[4];
};

/* One control file and the value written to it. */
struct nrm_cgroup_file
{
  const char *file, *value;
};

#define NRM_MEMORY_FILES_MAX (3 + 2 * 4)

/* The files of a binding in the order they are written (out has room for
 * NRM_MEMORY_FILES_MAX; huge page file names are made in names). */
size_t nrm_memory_files (const struct nrm_memory_binding *m, struct nrm_cgroup_file *out, char names[2 * 4][32]);

#endif
