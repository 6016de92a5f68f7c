/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_RUN_INTERNAL_H
#define NRM_RUN_INTERNAL_H

/* What the parts of nrm run offer one another; nothing outside nrm run
 * includes it:
 *   run.c         the phases and nrm_cmd_run
 *   run-place.c   the CPUs placed under the CPU driver's serialize lock
 *   run-cgroup.c  the run's transient cgroup and its cpuset partition
 *   run-record.c  the run records and the release of stale runs
 *   run-scratch.c a dry run's scratch copy of the state directory
 *   run-explain.c why these CPUs and memory: the dry run's report, the log */

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "cpuset/env.h"
#include "cpuset/partition.h"
#include "driver/kubelet/plugin.h"
#include "driver/registry.h"
#include "memory/policy.h"
#include "nrm/attach.h"
#include "nrm/base/error.h"
#include "nrm/conf.h"
#include "nrm/run.h"

struct nrm_cgroupfs;

/* The namespace of every run's claims. */
#define RUN_NAMESPACE "nrm-run"

/* One NUMA node's share of the run's CPUs. */
struct part
{
  size_t ni;          /* NUMA node index */
  unsigned os;        /* its Linux number */
  unsigned count;     /* CPUs taken there */
  hwloc_bitmap_t pin; /* exactly these (-C), or NULL */
};

/* One run from its checks to its release: what its phases share. */
struct run
{
  struct nrm_config *c;
  const struct nrm_fsroot *root; /* c->fsroot opened */
  struct nrm_topology *t;
  const struct nrm_run_request *rq;
  pid_t self;
  unsigned long long st;
  char *uid, *name, *cgname, *scratch;
  const char *state; /* c->state_dir, or a dry run's scratch copy */
  struct nrm_attach att;
  struct nrm_publish_options po;
  struct nrm_registry *reg;
  struct nrm_drivers drivers;
  struct nrm_driver_slot *drv[2]; /* the CPU and memory drivers */
  struct nrm_plugin *pl[2];
  bool prepared[2], recorded, released;
  json_t *config;      /* the CPU claim's opaque configuration (--option) */
  json_t *cpu_devices; /* the CPU driver's devices by name, as it publishes them */
  unsigned options;    /* the CPU options placement uses */
  /* Placement, under the CPU driver's serialize lock. */
  struct part *parts;
  size_t n_parts;
  json_t *tried, *cpu_claims; /* the CPU claims as placement saw them */
  bool placement_failed;      /* the error is placement's, not the prepare's */
  /* What the drivers prepared, handed back by the prepares. */
  struct nrm_plugin_prepared cpu, mem;
  char *cpus, *mems;
  hwloc_bitmap_t got;
  int node;                   /* the node memory is taken from */
  char limit_text[2 + 4][24]; /* the memory limits written out for the commit */
  struct nrm_cgroupfs *fs;
  bool cgroup;
};

/* A run's policy in the words a claim's MemoryConfig uses. */
static inline const char *
nrm_run_policy_name (enum nrm_run_mempolicy p)
{
  static const enum nrm_mempolicy words[] = { NRM_MEMPOLICY_BIND, NRM_MEMPOLICY_BIND, NRM_MEMPOLICY_INTERLEAVE,
                                              NRM_MEMPOLICY_PREFERRED, NRM_MEMPOLICY_LOCAL };
  return nrm_mempolicy_name[words[p]];
}

/* run.c */

/* A ResourceClaim of the run as the scheduler would have allocated it:
 * results is an array of allocation results (stolen); a new reference. */
json_t *nrm_run_claim (const char *uid, const char *name, json_t *results, json_t *config);

/* run-place.c */

/* The CPU claim, chosen under the CPU driver's serialize lock from the
 * claims held then (an nrm_plugin_choose_fn; ctx the struct run): the
 * parts placed, the claim naming their CPUs. */
int nrm_run_choose_cpus (void *ctx, json_t *claims, json_t **ret, nrm_error_t *err);

/* The parts placed let go. */
void nrm_run_drop_parts (struct run *r);

/* --cpus N found no room: why, from the last node's answer (stolen). */
int nrm_run_no_room (struct run *r, nrm_error_t last, nrm_error_t *err);

/* run-cgroup.c */

/* The transient cgroup nrm.slice/<name> under fs's root, with cpuset (and
 * memory and hugetlb where they can be had) enabled on the way down. */
int nrm_run_cgroup_make (struct nrm_cgroupfs *fs, const char *name, nrm_error_t *err);

/* The cgroup nrm.slice/<cgname> no longer a partition, removed where it is
 * empty, and the exclusive CPUs it left in nrm.slice given back. */
int nrm_run_cgroup_remove (struct nrm_cgroupfs *fs, const char *cgname, nrm_error_t *err);

/* The run's partition mode: --partition's, else the node's cpu.partition. */
enum nrm_partition_mode nrm_run_partition_mode (const struct nrm_config *c, const struct nrm_run_request *rq);

/* The cgroup rel made a cpuset partition m (asked: by --partition, whose
 * failure fails the run; else logged and left). */
int nrm_run_partition_make (struct nrm_cgroupfs *fs, const char *rel, const char *name, const char *cpus,
                            enum nrm_partition_mode m, bool asked, nrm_error_t *err);

/* The partition m as a dry run reports it (a new reference). */
json_t *nrm_run_partition_view (const struct nrm_config *c, const struct nrm_fsroot *root, enum nrm_partition_mode m,
                                bool asked);

/* run-record.c */

/* A process's start time (clock ticks since boot), to tell a pid reused;
 * 0 when it is gone. */
unsigned long long nrm_run_start_time (pid_t pid);

/* The folder of the run records under state_dir. */
char *nrm_run_record_dir (const char *state_dir);

/* The run's own record, written before its claims exist; att: the process
 * it is attached to (--pid), or NULL. */
int nrm_run_record_write (const char *state_dir, const char *uid, const char *name, pid_t pid, unsigned long long st,
                          const struct nrm_attach *att, nrm_error_t *err);

/* The run's record gone, once every claim of it is released. */
void nrm_run_record_remove (const char *state_dir, const char *uid);

/* run-scratch.c */

/* A scratch state directory for a dry run: a copy of the checkpoints of
 * the drivers names[2] and of the run records of from (NULL: nothing
 * held); a path to free, or NULL. */
char *nrm_run_scratch_make (const char *from, const char *const names[2], nrm_error_t *err);

/* The scratch directory and what it holds removed. */
void nrm_run_scratch_remove (const char *dir);

/* run-explain.c */

/* Why these CPUs and this memory: printed to out for a dry run (JSON with
 * --json), one line in the log for a real one. */
void nrm_run_explain (struct run *r, FILE *out);

#endif
