/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_HOST_H
#define NRM_HOST_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "nrm/base/cgroupfs.h"
#include "nrm/base/error.h"

/* The shared pool beyond kubepods: cgroup subtrees of the host (system and
 * user slices, podman's machine.slice, docker's containers) that the
 * reconciler keeps on the shared CPUs and memory nodes too.
 *
 * A subtree without claimed containers is held at its top, so that a
 * service or container started in it later inherits the pool at once. One
 * that holds claimed containers is descended into: its other branches are
 * held, the cgroups toward the claims get their parents' sets back. The
 * cgroups nrm holds, and nothing else, are listed in
 * <state_dir>/host-cgroups.json: the hook widens them when a claimed
 * container starts below one, and those below another held cgroup follow
 * the pool too (nrm never empties a cpuset file: Linux refuses that for a
 * populated cgroup). Callers hold the container records' lock. */

/* A subtree the setting may name: a valid cgroup path below the root, not
 * kubepods (the pods' own walk) or nrm.slice (nrm run) nor inside them. */
int nrm_host_subtree_check (const char *path, nrm_error_t *err);

struct nrm_host_stats
{
  size_t confined; /* cgroups that hold the pool for their whole subtree */
  size_t updated;  /* files written */
  size_t kept;     /* claimed containers found in the subtrees */
  size_t failed;
};

/* Calls keep(cgroup, arg) for a claimed container's cgroup: is_claimed
 * says which cgroups are (paths without a leading '/'). */
struct nrm_host_claims
{
  bool (*is_claimed) (const char *cgroup, void *arg);
  bool (*holds_claims) (const char *cgroup, void *arg); /* the cgroup or one below it */
  void (*keep) (const char *cgroup, void *arg);
  void *arg;
};

/* One pass over subtrees[0..n): shared_mems NULL leaves cpuset.mems alone.
 * A failure on one cgroup is counted and the pass goes on; the first
 * message goes to *first_error (may be NULL) when it is still NULL. */
int nrm_host_reconcile (struct nrm_cgroupfs *fs, const char *state_dir, const char *const *subtrees, size_t n,
                        const struct nrm_host_claims *claims, const char *shared_cpus, const char *shared_mems,
                        struct nrm_host_stats *st, char **first_error, nrm_error_t *err);

/* Before a claimed container's cgroup gets cpus and mems (either may be
 * NULL): every confined ancestor that lacks them takes them on, after its
 * other children that inherit are pinned to what it had, so that they gain
 * nothing. Nothing to do without confined cgroups. */
int nrm_host_make_room (struct nrm_cgroupfs *fs, const char *state_dir, const char *cgroup, const char *cpus,
                        const char *mems, nrm_error_t *err);

#endif
