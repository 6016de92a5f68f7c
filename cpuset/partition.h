/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_PARTITION_H
#define NRM_PARTITION_H

#include <stdbool.h>

#include "nrm/base/cgroupfs.h"
#include "nrm/base/error.h"

/* Kernel-enforced exclusivity: an exclusive container's cgroup made a
 * cgroup v2 cpuset partition, so that no task outside it runs on its CPUs
 * even when it sets its own affinity ("isolated": and the scheduler does
 * not balance load onto them). A container under kubepods can only be a
 * remote partition (its parent is no partition root), which needs
 * cpuset.cpus.exclusive (Linux 6.7 and later). */

enum nrm_partition_mode
{
  NRM_PARTITION_OFF,
  NRM_PARTITION_ROOT,
  NRM_PARTITION_ISOLATED,
};

/* "off", "root", "isolated"; what names the input in the error. */
int nrm_partition_mode_parse (const char *text, const char *what, enum nrm_partition_mode *ret, nrm_error_t *err);
const char *nrm_partition_mode_name (enum nrm_partition_mode m);

/* Whether the kernel behind fs can make remote partitions, judged on the
 * first cpuset-enabled child of the root (kubepods first). false with
 * *ret_reason (the caller frees) saying why not. */
bool nrm_partition_supported (struct nrm_cgroupfs *fs, char **ret_reason);
/* The same for the cgroup v2 tree below the root, opened here; a tree that
 * cannot be opened is the reason. */
bool nrm_partition_available (const struct nrm_fsroot *root, char **ret_reason);

/* Makes cgroup (cpuset.cpus already cpus) a remote partition of cpus:
 * cpus added to cpuset.cpus.exclusive of every ancestor below the root,
 * set in the cgroup's own, then cpuset.cpus.partition written and read
 * back with cpuset.cpus.effective. All or nothing: on failure what was
 * written is put back and the error says why (ENOTSUP: the kernel has no
 * remote partitions). *ret_effective (may be NULL) is the read-back
 * cpuset.cpus.effective. */
int nrm_partition_make (struct nrm_cgroupfs *fs, const char *cgroup, const char *cpus, enum nrm_partition_mode mode,
                        char **ret_effective, nrm_error_t *err);

/* Gives back what partitions that are gone left in cpuset.cpus.exclusive
 * of the cgroups above them: below top (kubepods), every cgroup that is no
 * partition root gets the union of its children's, bottom up (a partition
 * root keeps its own). Nothing is read beyond top's file when that is
 * empty or absent. *ret_trimmed counts the files written. */
int nrm_partition_trim (struct nrm_cgroupfs *fs, const char *top, size_t *ret_trimmed, nrm_error_t *err);

/* Checks what the kernel reports of a partition: partition is
 * cpuset.cpus.partition as read ("root", "isolated", "member" or
 * "root invalid (reason)"), effective its cpuset.cpus.effective. */
int nrm_partition_check (const char *cgroup, enum nrm_partition_mode mode, const char *cpus, const char *partition,
                         const char *effective, nrm_error_t *err);

#endif
