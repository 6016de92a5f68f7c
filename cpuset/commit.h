/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_COMMIT_H
#define NRM_COMMIT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "cpuset/cgroup.h"
#include "nrm/base/error.h"

/* Turning prepared claims into kernel state: the OCI hook that binds a new
 * container before its workload starts, and the reconciler that keeps every
 * other container on the shared pool. */

/* The binding a claim's environment asks for ("NAME=value" strings, as the
 * CDI specs give them): NRM_CPUS, NRM_MEMS, NRM_CPU_NODES, NRM_SHARED_CPUS,
 * NRM_MEMORY_MAX/MIN and NRM_HUGETLB_<size>; the per-claim copies
 * (NAME_<UID>) are skipped. Values point into env; byte counts are checked;
 * CPU and node lists are left to the caller. */
struct nrm_env_binding
{
  const char *cpus, *mems, *cpu_nodes, *memory_max, *memory_min;
  bool shared_cpus;
  size_t n_hugetlb;
  struct
  {
    char size[12]; /* "2MB": the kernel's name */
    const char *max;
  } hugetlb[4];
};

/* what names the environment's owner in errors. */
int nrm_env_binding_parse (json_t *env, const char *what, struct nrm_env_binding *eb, nrm_error_t *err);

/* The memory limits of eb (memory.max, memory.min, hugetlb) into b; the
 * strings stay eb's. */
void nrm_env_binding_memory (const struct nrm_env_binding *eb, struct nrm_binding *b);

/* The createRuntime hook. state is the OCI state JSON from stdin; the
 * binding comes from the container's environment in <bundle>/config.json
 * (NRM_CPUS, NRM_MEMS or else NRM_CPU_NODES), as the CDI specs set it. The
 * container is recorded under <state_dir>/containers/ so the reconciler
 * leaves it alone. *ret_summary (may be NULL) says what was done. */
int nrm_hook_run (const char *fsroot, const char *state, size_t len, const char *state_dir, char **ret_summary,
                  nrm_error_t *err);

struct nrm_reconcile_stats
{
  size_t containers, exclusive, updated, failed, forgotten;
};

/* One pass over the pod cgroups: containers recorded by the hook keep their
 * CPUs, every other one gets the shared pool; drift written by anyone else
 * is repaired; records of containers that are gone are removed. A failure
 * on one container is counted and the pass goes on; *ret_first_error
 * (may be NULL) keeps the first message. */
int nrm_reconcile (struct nrm_cgroupfs *fs, const char *state_dir, const char *shared_cpus,
                   struct nrm_reconcile_stats *st, char **ret_first_error, nrm_error_t *err);

#endif
