/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_TEST_CORPUS_H
#define NRM_TEST_CORPUS_H

#include <stddef.h>
#include <stdint.h>

struct CMUnitTest;
struct nrm_topology;

/* One row of the corpus MANIFEST.tsv: what hwloc's own tools count. */
struct corpus_entry
{
  char *file; /* absolute path */
  char *name;
  unsigned packages, numa_nodes, cores, pus, l3;
  uint64_t memory;
};

/* Reads $NRM_TOPOLOGIES/MANIFEST.tsv; exits 77 (skip) with a reason when
 * the corpus is not there, 99 when it is malformed. */
size_t corpus_load (struct corpus_entry **ret);
void corpus_free (struct corpus_entry *e, size_t n);

/* A test run on every recorded machine, named "<label> <machine>". */
struct corpus_test
{
  const char *label;
  void (*fn) (void **state); /* state: the struct corpus_entry */
};

/* Runs the cmocka group: each per-machine test on every machine of the
 * corpus (machine by machine), then the other tests; returns cmocka's
 * result. */
int corpus_run (const char *group, const struct corpus_test *per_machine, size_t n_per, const struct CMUnitTest *others,
                size_t n_others);

/* KEP-6072's list for the node at position numa, written here from the
 * distance matrix apart from nrm_topology_near_nodes: the socket of a node is
 * the package holding the first of its home CPUs, none for a CPU-less node;
 * out gets os indexes (room for t->n_numa); returns the count. */
size_t corpus_near_nodes (const struct nrm_topology *t, size_t numa, int64_t *out);

#endif
