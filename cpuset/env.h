/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_ENV_H
#define NRM_ENV_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "nrm/base/error.h"
#include "nrm/base/hugetlb.h"

/* The contract between the drivers that bind containers (they write these
 * variables into a claim's CDI edits) and the cgroup commit (the hook and
 * nrm run read them back): one list for producer and consumer. */
enum nrm_env_var
{
  NRM_ENV_CPUS,               /* exclusive CPUs: cpuset.cpus */
  NRM_ENV_CPU_NODES,          /* the NUMA nodes of those CPUs: cpuset.mems without a memory claim */
  NRM_ENV_SHARED_CPUS,        /* "true": the shared pool is added to the exclusive CPUs */
  NRM_ENV_MEMS,               /* memory nodes: cpuset.mems */
  NRM_ENV_MEMORY_MAX,         /* bytes: memory.max */
  NRM_ENV_MEMORY_MIN,         /* bytes: memory.min */
  NRM_ENV_HUGETLB,            /* a prefix: NRM_HUGETLB_<kernel size name>=bytes: hugetlb.<size>.max */
  NRM_ENV_MEMORY_POLICY,      /* the claim's memory policy, for the workload (the hook ignores it) */
  NRM_ENV_PARTITION,          /* "root" or "isolated": the container becomes a cpuset partition of NRM_CPUS */
  NRM_ENV_PARTITION_REQUIRED, /* "true": the claim asked for the partition, so no container without it */
  NRM_ENV_COUNT
};

extern const char *const nrm_env_name[NRM_ENV_COUNT];

/* Appends NAME=value and the per-claim copy NAME_<UID>=value (for
 * containers with several claims; upper case, '-' as '_'); size is the
 * huge page size for NRM_ENV_HUGETLB ("2MB"), else NULL. */
int nrm_env_add (json_t *env, enum nrm_env_var v, const char *size, const char *uid, const char *value,
                 nrm_error_t *err);

/* The binding a claim's environment asks for ("NAME=value" strings, as the
 * CDI specs give them); the per-claim copies are skipped. Values point into
 * env; byte counts are checked; CPU and node lists are left to the caller. */
struct nrm_env_binding
{
  const char *cpus, *mems, *cpu_nodes, *memory_max, *memory_min;
  const char *partition;
  bool shared_cpus, partition_required;
  size_t n_hugetlb;
  struct
  {
    char size[12]; /* "2MB": the kernel's name */
    const char *max;
  } hugetlb[NRM_HUGETLB_SIZES_MAX];
};

/* what names the environment's owner in errors. */
int nrm_env_binding_parse (json_t *env, const char *what, struct nrm_env_binding *eb, nrm_error_t *err);

#endif
