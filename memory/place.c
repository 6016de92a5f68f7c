/* SPDX-License-Identifier: Apache-2.0 */
/* A run's memory node by kind and tier, nearest to its CPUs. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "memory/place.h"

int
nrm_memory_pick (const struct nrm_topology *t, size_t near, const char *kind, int tier, uint64_t bytes,
                 const uint64_t *room, size_t *ret, nrm_error_t *err)
{
  size_t best = SIZE_MAX, near_match = SIZE_MAX;
  uint64_t best_d = 0, best_room = 0, near_d = 0;
  for (size_t i = 0; i < t->n_numa; i++)
    {
      const struct nrm_numa_node *n = &t->numa[i];
      if (!n->allowed || (kind && strcasecmp (n->kind, kind) != 0) || (tier >= 0 && n->tier != tier))
        continue;
      uint64_t d = nrm_topology_distance (t, near, i);
      uint64_t r = room ? room[i] : nrm_topology_node_allocatable_memory (t, i);
      if (near_match == SIZE_MAX || d < near_d)
        {
          near_match = i;
          near_d = d;
        }
      if (r < bytes)
        continue;
      if (best == SIZE_MAX || d < best_d || (d == best_d && r > best_room))
        {
          best = i;
          best_d = d;
          best_room = r;
        }
    }
  char what[64];
  if (kind && tier >= 0)
    snprintf (what, sizeof (what), "%.24s memory of tier %d", kind, tier);
  else if (kind)
    snprintf (what, sizeof (what), "%.24s memory", kind);
  else if (tier >= 0)
    snprintf (what, sizeof (what), "memory of tier %d", tier);
  else
    snprintf (what, sizeof (what), "memory");
  if (near_match == SIZE_MAX)
    return nrm_error_set (err, ENODEV, "this machine has no NUMA node with %s", what);
  if (best == SIZE_MAX)
    {
      uint64_t r = room ? room[near_match] : nrm_topology_node_allocatable_memory (t, near_match);
      return nrm_error_set (err, ENOSPC,
                            "no NUMA node with %s has room for %" PRIu64 " bytes; the nearest, node %u, has %" PRIu64,
                            what, bytes, t->numa[near_match].os_index, r);
    }
  *ret = best;
  return 0;
}
