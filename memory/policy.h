/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_MEMORY_POLICY_H
#define NRM_MEMORY_POLICY_H

#include <stddef.h>

#include "nrm/base/error.h"

/* Memory policies in numactl's and set_mempolicy(2)'s words. A run applies
 * each with set_mempolicy in its own process; a container has no process
 * of nrm's, and cgroup v2 has no memory policy, so only what cpuset.mems
 * can say is enforced there (nrm_mempolicy_container). */
enum nrm_mempolicy
{
  NRM_MEMPOLICY_BIND,       /* MPOL_BIND: only these nodes */
  NRM_MEMPOLICY_LOCAL,      /* MPOL_LOCAL: the faulting CPU's node first, within these */
  NRM_MEMPOLICY_INTERLEAVE, /* MPOL_INTERLEAVE: page by page over these */
  NRM_MEMPOLICY_PREFERRED,  /* MPOL_PREFERRED: this node first, any other after */
  NRM_MEMPOLICY_COUNT,
};

extern const char *const nrm_mempolicy_name[NRM_MEMPOLICY_COUNT];

/* "bind", "local", "interleave", "preferred"; numactl's long option names
 * (membind, localalloc) too. The error names the word and the choices. */
int nrm_mempolicy_parse (const char *word, enum nrm_mempolicy *ret, nrm_error_t *err);

/* Who makes a container's memory follow p. */
enum nrm_mempolicy_enforcer
{
  NRM_MEMPOLICY_BY_KERNEL,   /* cpuset.mems alone gives it */
  NRM_MEMPOLICY_BY_WORKLOAD, /* cpuset.mems bounds it; the workload's own process applies it */
};

/* How a container bound to n_nodes memory nodes (its cpuset.mems) can have
 * policy p, or -1 with an error that says why not and what to ask for. */
int nrm_mempolicy_container (enum nrm_mempolicy p, size_t n_nodes, enum nrm_mempolicy_enforcer *ret, nrm_error_t *err);

#endif
