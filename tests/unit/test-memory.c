/* SPDX-License-Identifier: Apache-2.0 */
/* The memory engine on every recorded machine: a run's node by kind and
 * tier, nearest its CPUs, with room; and the policies a container can have. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "memory/place.h"
#include "memory/policy.h"
#include "nrm/base/xalloc.h"
#include "tests/unit/corpus.h"
#include "topology/topology.h"

static void
test_pick (void **state)
{
  const struct corpus_entry *c = *state;
  nrm_error_t err = NULL;
  struct nrm_topology *t = NULL;
  if (nrm_topology_load (c->file, &t, &err) < 0)
    fail_msg ("%s: %s", c->name, nrm_error_msg (err));
  uint64_t *room = xcalloc (t->n_numa, sizeof (uint64_t));
  for (size_t near = 0; near < t->n_numa; near++)
    for (size_t k = 0; k < t->n_numa; k++)
      {
        const char *kind = t->numa[k].kind;
        int tier = t->numa[k].tier;
        /* Room from the node's own memory, less on every other node. */
        for (size_t i = 0; i < t->n_numa; i++)
          room[i] = i == k ? 4096 : (i * 7 + near) % 3 == 0 ? 0 : 2048 + 1024 * (i % 2);
        for (int by_tier = 0; by_tier < 2; by_tier++)
          {
            size_t got = SIZE_MAX;
            const char *qk = by_tier ? NULL : kind;
            int qt = by_tier ? tier : -1;
            if (nrm_memory_pick (t, near, qk, qt, 2048, room, &got, &err) < 0)
              fail_msg ("%s: near %zu, %s %d: %s", c->name, near, kind, tier, nrm_error_msg (err));
            /* Of the asked kind or tier, allowed, with room, and no node
             * like it with room is nearer. */
            assert_true (got < t->n_numa);
            assert_true (t->numa[got].allowed);
            assert_true (by_tier ? t->numa[got].tier == tier : strcasecmp (t->numa[got].kind, kind) == 0);
            assert_true (room[got] >= 2048);
            for (size_t i = 0; i < t->n_numa; i++)
              if (t->numa[i].allowed && room[i] >= 2048
                  && (by_tier ? t->numa[i].tier == tier : strcasecmp (t->numa[i].kind, kind) == 0))
                assert_true (nrm_topology_distance (t, near, i) >= nrm_topology_distance (t, near, got));
          }
        /* More than any node of the kind has: refused, naming the room. */
        size_t got;
        assert_int_equal (nrm_memory_pick (t, near, kind, -1, 1 << 20, room, &got, &err), -1);
        assert_non_null (strstr (nrm_error_msg (err), "has room for 1048576 bytes"));
        nrm_error_release (&err);
      }
  /* A kind no node has. */
  size_t got;
  assert_int_equal (nrm_memory_pick (t, 0, "NOSUCH", -1, 0, NULL, &got, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "no NUMA node with NOSUCH memory"));
  nrm_error_release (&err);
  free (room);
  nrm_topology_free (t);
}

/* The recorded machines with memory tiers put HBM and NVM where hwloc
 * says, and the engine finds them from every node with CPUs. */
static void
test_tiers (void **state)
{
  (void) state;
  static const struct
  {
    const char *file, *kind;
    unsigned nodes; /* how many nodes of that kind */
  } machines[] = {
    { "fakeheteromemtiers.xml", "HBM", 2 },
    { "fakeheteromemtiers.xml", "NVM", 3 },
    { "memorysidecaches.xml", "DRAM", 4 },
  };
  for (size_t m = 0; m < sizeof (machines) / sizeof (machines[0]); m++)
    {
      char path[1024];
      nrm_error_t err = NULL;
      struct nrm_topology *t = NULL;
      snprintf (path, sizeof (path), "%s/%s", getenv ("NRM_TOPOLOGIES"), machines[m].file);
      if (nrm_topology_load (path, &t, &err) < 0)
        fail_msg ("%s: %s", path, nrm_error_msg (err));
      unsigned n = 0;
      for (size_t i = 0; i < t->n_numa; i++)
        n += strcmp (t->numa[i].kind, machines[m].kind) == 0;
      if (n != machines[m].nodes)
        fail_msg ("%s: %u %s nodes, not %u", machines[m].file, n, machines[m].kind, machines[m].nodes);
      for (size_t near = 0; near < t->n_numa; near++)
        {
          size_t got;
          if (hwloc_bitmap_iszero (t->numa[near].cpus))
            continue;
          /* Each node's own allocatable memory: a real amount on these. */
          if (nrm_memory_pick (t, near, machines[m].kind, -1, 1 << 20, NULL, &got, &err) < 0)
            fail_msg ("%s: %s", machines[m].file, nrm_error_msg (err));
          assert_string_equal (t->numa[got].kind, machines[m].kind);
        }
      nrm_topology_free (t);
    }
}

static void
test_policies (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  enum nrm_mempolicy p;
  enum nrm_mempolicy_enforcer by;
  static const struct
  {
    const char *word;
    enum nrm_mempolicy p;
  } words[] = { { "bind", NRM_MEMPOLICY_BIND },
                { "membind", NRM_MEMPOLICY_BIND },
                { "local", NRM_MEMPOLICY_LOCAL },
                { "localalloc", NRM_MEMPOLICY_LOCAL },
                { "interleave", NRM_MEMPOLICY_INTERLEAVE },
                { "preferred", NRM_MEMPOLICY_PREFERRED } };
  for (size_t i = 0; i < sizeof (words) / sizeof (words[0]); i++)
    {
      assert_int_equal (nrm_mempolicy_parse (words[i].word, &p, &err), 0);
      assert_int_equal (p, words[i].p);
    }
  assert_int_equal (nrm_mempolicy_parse ("Bind", &p, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "unknown memory policy `Bind`"));
  nrm_error_release (&err);
  assert_int_equal (nrm_mempolicy_parse (NULL, &p, &err), -1);
  nrm_error_release (&err);
  /* What a container can have. */
  assert_int_equal (nrm_mempolicy_container (NRM_MEMPOLICY_BIND, 1, &by, &err), 0);
  assert_int_equal (by, NRM_MEMPOLICY_BY_KERNEL);
  assert_int_equal (nrm_mempolicy_container (NRM_MEMPOLICY_LOCAL, 2, &by, &err), 0);
  assert_int_equal (by, NRM_MEMPOLICY_BY_KERNEL);
  assert_int_equal (nrm_mempolicy_container (NRM_MEMPOLICY_INTERLEAVE, 2, &by, &err), 0);
  assert_int_equal (by, NRM_MEMPOLICY_BY_WORKLOAD);
  assert_int_equal (nrm_mempolicy_container (NRM_MEMPOLICY_INTERLEAVE, 1, &by, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "two or more NUMA nodes"));
  nrm_error_release (&err);
  assert_int_equal (nrm_mempolicy_container (NRM_MEMPOLICY_PREFERRED, 2, &by, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "preferred cannot be given to a container"));
  nrm_error_release (&err);
}

int
main (void)
{
  const struct corpus_test per_machine[] = { { "pick", test_pick } };
  const struct CMUnitTest others[] = {
    { .name = "tiers of the recorded machines", .test_func = test_tiers },
    { .name = "policies", .test_func = test_policies },
  };
  return corpus_run ("memory", per_machine, 1, others, sizeof (others) / sizeof (others[0]));
}
