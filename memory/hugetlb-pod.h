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

/* The kubelet's "unbounded" (setHugePagesUnbounded: 1 << 62) and above,
 * and "max": a level that does not limit, left alone. A claim's bytes are
 * below it. */
#define NRM_HUGETLB_POD_UNBOUNDED (1ULL << 62)
/* The most claims one container may raise for. */
#define NRM_HUGETLB_POD_CLAIMS_MAX 16

/* Raises the limited levels of chain[0..n_chain) (the pod's cgroup first,
 * then its ancestors up to kubepods) for the claims of its container
 * cgroup `container`: claims maps each claim (its UID, or "-" for one
 * without) to the bytes of each huge page size ({"2MB": 67108864}, the
 * kernel's size names). Nothing happens without claims. All or nothing:
 * on failure the cgroups and the journal are as they were. *ret_undo (may
 * be NULL) is NULL when nothing was changed. */
int nrm_hugetlb_pod_raise (struct nrm_cgroupfs *fs, const char *state_dir, const char *container,
                           const char *const *chain, size_t n_chain, json_t *claims,
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
