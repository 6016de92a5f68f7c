/* SPDX-License-Identifier: Apache-2.0 */
/* The cgroup v2 files of a memory binding. */
#include "config.h"

#include <stdio.h>

#include "memory/commit.h"

size_t
nrm_memory_files (const struct nrm_memory_binding *m, struct nrm_cgroup_file *out, char names[2 * 4][32])
{
  size_t n = 0;
  if (m->mems)
    out[n++] = (struct nrm_cgroup_file){ "cpuset.mems", m->mems };
  /* The guarantee before the limit: a lower limit never meets a higher
   * guarantee half-way. */
  if (m->memory_min)
    out[n++] = (struct nrm_cgroup_file){ "memory.min", m->memory_min };
  if (m->memory_max)
    out[n++] = (struct nrm_cgroup_file){ "memory.max", m->memory_max };
  /* Reservations too (.rsvd): a mapping's pages are counted when reserved. */
  for (size_t i = 0; i < m->n_hugetlb && i < 4; i++)
    {
      snprintf (names[2 * i], 32, "hugetlb.%s.max", m->hugetlb[i].size);
      snprintf (names[2 * i + 1], 32, "hugetlb.%s.rsvd.max", m->hugetlb[i].size);
      out[n++] = (struct nrm_cgroup_file){ names[2 * i], m->hugetlb[i].max };
      out[n++] = (struct nrm_cgroup_file){ names[2 * i + 1], m->hugetlb[i].max };
    }
  return n;
}
