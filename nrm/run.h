/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_RUN_H
#define NRM_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "nrm/conf.h"
#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"
#include "topology/topology.h"

/* Exit statuses of nrm run other than the command's own, those of
 * timeout(1) and env(1). */
#define NRM_RUN_EXIT_FAILED 125      /* nrm failed before the command started */
#define NRM_RUN_EXIT_CANNOT_EXEC 126 /* found but not executable */
#define NRM_RUN_EXIT_NOT_FOUND 127   /* not found */

/* The memory policy of the command (numactl's): by default it is bound to
 * the NUMA nodes of its CPUs. */
enum nrm_run_mempolicy
{
  NRM_RUN_MEM_DEFAULT,    /* bound to the CPUs' nodes */
  NRM_RUN_MEM_BIND,       /* --membind NODES */
  NRM_RUN_MEM_INTERLEAVE, /* --interleave NODES */
  NRM_RUN_MEM_PREFERRED,  /* --preferred NODE */
  NRM_RUN_MEM_LOCAL,      /* --localalloc */
};

struct nrm_run_request
{
  unsigned cpus;
  const char *memory;        /* quantity, or NULL: bound to the node and limited (memory.max) */
  const char *hugepages_2mi; /* bytes of 2 MiB huge pages on the node, or NULL */
  const char *hugepages_1gi; /* bytes of 1 GiB huge pages on the node, or NULL */
  hwloc_bitmap_t cpu_list;   /* -C: exactly these CPUs, or NULL */
  hwloc_bitmap_t cpu_nodes;  /* -N, --numa-node: the NUMA nodes (os indexes) the CPUs come from, or NULL: any */
  enum nrm_run_mempolicy policy;
  hwloc_bitmap_t mem_nodes;   /* the nodes of --membind, --interleave, --preferred */
  const char *memory_kind;    /* --memory-kind: memory from the nearest node of this kind, or NULL */
  int memory_tier;            /* --memory-tier: likewise by tier; -1 for any */
  bool dry_run;               /* print what would be taken and why; take nothing */
  bool json;                  /* the dry run as JSON */
  bool isolated;              /* isolated CPUs (numa<N>-isolated devices) */
  int partition;              /* --partition: enum nrm_partition_mode, required; -1: the node's cpu.partition */
  const char *const *options; /* CPU options, NULL-terminated, or NULL */
  char **argv;                /* the command (NULL: none, for a dry run) */
  int attach_pid;             /* --pid: attach this running process instead of a command (0: none) */
};

/* Allocates, runs the command pinned, waits for it and releases; *ret_status
 * is the command's exit status (128 + signal when killed). With attach_pid,
 * moves that process instead and holds until it exits (0) or nrm run gets
 * a signal (128 + N; the process is put back as it was). A request that
 * cannot be met fails before the command starts. A dry run prepares in a
 * scratch copy of the state directory, prints what it got and why to out,
 * and takes nothing. root is c->fsroot opened. */
int nrm_cmd_run (struct nrm_config *c, const struct nrm_fsroot *root, struct nrm_topology *t,
                 const struct nrm_run_request *rq, FILE *out, int *ret_status, nrm_error_t *err);

/* Releases the claims of runs whose nrm run process is gone (killed with
 * -9), in each of the n plugins: nrm run does it before it allocates, nrm
 * plugin at start and every minute. A run is known by its record in
 * state_dir/runs (its pid, start time, PID namespace and boot), never by a
 * claim's namespace or name; records of another PID namespace are left to
 * the processes of that namespace. Its transient cgroup below the root goes
 * too, and with it a cpuset partition that would keep its CPUs from
 * everyone else. */
struct nrm_plugin;
void nrm_run_release_stale (const struct nrm_fsroot *root, const char *state_dir, struct nrm_plugin *const *pl,
                            size_t n);

#endif
