/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_TEST_CORPUS_H
#define NRM_TEST_CORPUS_H

#include <stddef.h>
#include <stdint.h>

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

#endif
