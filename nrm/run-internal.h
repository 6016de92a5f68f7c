/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_RUN_INTERNAL_H
#define NRM_RUN_INTERNAL_H

/* What the parts of nrm run offer one another; nothing outside nrm run
 * includes it:
 *   run.c         the phases and nrm_cmd_run
 *   run-cgroup.c  the run's transient cgroup and its cpuset partition */

#include <jansson.h>
#include <stdbool.h>

#include "cpuset/partition.h"
#include "nrm/base/error.h"
#include "nrm/conf.h"
#include "nrm/run.h"

struct nrm_cgroupfs;

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
json_t *nrm_run_partition_view (const struct nrm_config *c, enum nrm_partition_mode m, bool asked);

#endif
