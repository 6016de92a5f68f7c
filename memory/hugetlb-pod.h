/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_HUGETLB_POD_H
#define NRM_HUGETLB_POD_H

#include <stddef.h>

#include <jansson.h>

#include "nrm/base/cgroupfs.h"
#include "nrm/base/error.h"

/* Huge-page claims inside a kubelet pod. The kubelet sets the pod cgroup's
 * hugetlb.<size>.max (and .rsvd.max) to the pod spec's hugepages-<size>
 * requests and to 0 for every other size, and kubepods' to the node's
 * allocatable at its start. A claim's pages are in neither, so the hook
 * raises each limited level from the pod up to kubepods by the bytes of
 * the claims under it, and the reconciler puts the original values back
 * when the last container using a claim is gone.
 *
 * One journal, <state_dir>/hugetlb-pods.json, written durably before any
 * raise, holds what each level had before nrm touched it and the claims
 * (per pod, with the containers that use them). Every value nrm writes is
 * a function of the journal (original + bytes of the live claims below),
 * so a crash anywhere converges at the next hook or reconciler pass. */

/* What a successful raise changed, for nrm_hugetlb_pod_undo() when a later
 * step of the container's commit fails. */
struct nrm_hugetlb_pod_undo;

/* Raises the levels above container_cgroup for its claims: the per-claim
 * variables NRM_HUGETLB_<size>_<UID>=bytes of env (the container's
 * "NAME=value" array), or when it has none the plain NRM_HUGETLB_<size>
 * as one claim. Nothing happens for a cgroup outside the kubelet's
 * layouts, or an env without huge pages. All or nothing: on failure the
 * cgroups and the journal are as they were. *ret_undo (may be NULL) is
 * NULL when nothing was changed. */
int nrm_hugetlb_pod_raise (struct nrm_cgroupfs *fs, const char *state_dir, const char *container_cgroup, json_t *env,
                           struct nrm_hugetlb_pod_undo **ret_undo, nrm_error_t *err);

/* Puts back what the raise wrote (cgroup values and journal) and frees u. */
void nrm_hugetlb_pod_undo (struct nrm_cgroupfs *fs, struct nrm_hugetlb_pod_undo *u);
/* Frees u, keeping what the raise did. */
void nrm_hugetlb_pod_keep (struct nrm_hugetlb_pod_undo *u);

struct nrm_hugetlb_pod_stats
{
  size_t claims;   /* claims still in use */
  size_t raised;   /* values written up again (the kubelet had put them back) */
  size_t restored; /* values put back to the original */
  size_t released; /* claims whose containers are all gone */
};

/* The reconciler's part: claims whose containers are all gone are dropped
 * and the levels above them put back (only where the value is still the
 * one nrm wrote: another writer's value is left); the levels of the live
 * claims are raised again where someone lowered them (the kubelet writes
 * 0 on an in-place resize). */
int nrm_hugetlb_pod_sweep (struct nrm_cgroupfs *fs, const char *state_dir, struct nrm_hugetlb_pod_stats *st,
                           nrm_error_t *err);

#endif
