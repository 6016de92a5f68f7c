/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_COMMIT_H
#define NRM_COMMIT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "cpuset/env.h"
#include "memory/commit.h"
#include "nrm/base/cgroupfs.h"
#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"

/* Turning prepared claims into kernel state: the OCI hook that binds a new
 * container before its workload starts, and the reconciler that keeps every
 * other container on the shared pool. Above cpuset/ (CPUs, partitions, the
 * host's and the kubelet's cgroups) and memory/ (memory files, the pods'
 * huge page limits), which know nothing of each other: the one place
 * where a container's CPU and memory files are written together. */

/* What a container is bound to; NULL fields are left alone. */
struct nrm_binding
{
  const char *cpus; /* cpuset.cpus */
  struct nrm_memory_binding memory;
};

/* Applies a binding to a cgroup, all or nothing: the old values are read
 * first, and if a later write fails the earlier ones are put back, newest
 * first. The error names the cgroup, the file and the kernel's reason. */
int nrm_binding_apply (struct nrm_cgroupfs *fs, const char *cgroup, const struct nrm_binding *b, nrm_error_t *err);

/* The memory limits of eb (memory.max, memory.min, hugetlb) into m; the
 * strings stay eb's. */
void nrm_env_binding_memory (const struct nrm_env_binding *eb, struct nrm_memory_binding *m);

/* The OCI state a runtime writes on a hook's stdin (id, pid, bundle,
 * annotations) is at most this large: nrm_hook_stdin reads no more, and
 * nrm_hook_run refuses more from any caller. */
#define NRM_HOOK_STATE_MAX (1 << 20)

/* The createRuntime hook. state is the OCI state JSON from stdin; the
 * binding comes from the container's environment in <bundle>/config.json
 * (NRM_CPUS, NRM_MEMS or else NRM_CPU_NODES), as the CDI specs set it. The
 * container is recorded under <state_dir>/containers/ so the reconciler
 * leaves it alone. *ret_summary (may be NULL) says what was done. */
int nrm_hook_run (const struct nrm_fsroot *root, const char *state, size_t len, const char *state_dir,
                  char **ret_summary, nrm_error_t *err);

struct nrm_reconcile_stats
{
  size_t containers, exclusive, updated, failed, forgotten;
  size_t host_confined; /* host cgroups holding the pool for their subtree */
};

/* One pass over the pod cgroups: containers recorded by the hook keep their
 * CPUs and memory nodes, every other one gets the shared pool; drift
 * written by anyone else is repaired; records of containers that are gone
 * are removed. host[0..n_host) are the host's cgroup subtrees kept on the
 * shared pool as well (cpuset/host.h). shared_mems (or NULL to leave memory nodes alone) are the
 * memory nodes of containers without their own; all_mems, what an empty
 * cpuset.mems inherits, so that such a file is left as it is when
 * shared_mems is all of it. A failure on one container is counted and the
 * pass goes on; *ret_first_error (may be NULL) keeps the first message. */
int nrm_reconcile (struct nrm_cgroupfs *fs, const char *state_dir, const char *shared_cpus, const char *shared_mems,
                   const char *all_mems, const char *const *host, size_t n_host, struct nrm_reconcile_stats *st,
                   char **ret_first_error, nrm_error_t *err);

#endif
