/* SPDX-License-Identifier: Apache-2.0 */
/* Memory policies: their names, and what a container can be given. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "memory/policy.h"

const char *const nrm_mempolicy_name[NRM_MEMPOLICY_COUNT] = {
  [NRM_MEMPOLICY_BIND] = "bind",
  [NRM_MEMPOLICY_LOCAL] = "local",
  [NRM_MEMPOLICY_INTERLEAVE] = "interleave",
  [NRM_MEMPOLICY_PREFERRED] = "preferred",
};

int
nrm_mempolicy_parse (const char *word, enum nrm_mempolicy *ret, nrm_error_t *err)
{
  static const struct
  {
    const char *word;
    enum nrm_mempolicy p;
  } words[] = {
    { "bind", NRM_MEMPOLICY_BIND },
    { "membind", NRM_MEMPOLICY_BIND },
    { "local", NRM_MEMPOLICY_LOCAL },
    { "localalloc", NRM_MEMPOLICY_LOCAL },
    { "interleave", NRM_MEMPOLICY_INTERLEAVE },
    { "preferred", NRM_MEMPOLICY_PREFERRED },
  };
  for (size_t i = 0; word && i < sizeof (words) / sizeof (words[0]); i++)
    if (strcmp (word, words[i].word) == 0)
      {
        *ret = words[i].p;
        return 0;
      }
  return nrm_error_set (err, EINVAL, "unknown memory policy `%.32s` (bind, local, interleave or preferred)",
                        word ? word : "");
}

int
nrm_mempolicy_container (enum nrm_mempolicy p, size_t n_nodes, enum nrm_mempolicy_enforcer *ret, nrm_error_t *err)
{
  switch (p)
    {
    case NRM_MEMPOLICY_BIND:
      *ret = NRM_MEMPOLICY_BY_KERNEL;
      return 0;
    case NRM_MEMPOLICY_LOCAL:
      /* The kernel's default policy is local allocation, and cpuset.mems
       * bounds the fallback to the claim's nodes: that is MPOL_LOCAL within
       * them. */
      *ret = NRM_MEMPOLICY_BY_KERNEL;
      return 0;
    case NRM_MEMPOLICY_INTERLEAVE:
      if (n_nodes < 2)
        return nrm_error_set (err, EINVAL,
                              "memory policy interleave needs memory on two or more NUMA nodes; the claim has "
                              "%zu: ask for a memory device on each node to interleave over",
                              n_nodes);
      /* Page-by-page placement is set_mempolicy's alone: cpuset.mems keeps
       * the pages on the claim's nodes, the workload spreads them. */
      *ret = NRM_MEMPOLICY_BY_WORKLOAD;
      return 0;
    case NRM_MEMPOLICY_PREFERRED:
    default:
      return nrm_error_set (err, EINVAL,
                            "memory policy preferred cannot be given to a container: cgroup v2 has no memory "
                            "policy, and cpuset.mems binds the container to the claim's nodes, so there is no "
                            "other node to fall back to; use bind, or local over memory on two nodes");
    }
}
