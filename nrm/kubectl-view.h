/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_KUBECTL_VIEW_H
#define NRM_KUBECTL_VIEW_H

/* What `kubectl nrm` shows, computed from API objects only (no API call
 * here): ResourceSlices, ResourceClaims and Pods as the API server returns
 * them, in JSON arrays. The results are JSON documents, printed as columns,
 * JSON or YAML by nrm/kubectl.c. */

#include <jansson.h>

/* Per node, NUMA node and resource (cpus, memory, hugepages-<size>,
 * isolated-cpus, devices), as the scheduler sees them: published is the
 * slices' capacity (shared counters for devices that consume them),
 * allocated the claims' allocation results (consumedCapacity on a shared
 * device, the whole capacity of an exclusive one), prepared those whose
 * status.devices entry has Ready True, free = published - allocated.
 * node: only this node, or NULL. Sizes are whole units (CPUs, bytes). */
json_t *nrm_kview_nodes (json_t *slices, json_t *claims, const char *node);

/* One claim: its allocation (node, results), its status.devices entries
 * with their data (the known placement keys first, then the others, as
 * they came) and conditions, and whom it is reserved for. */
json_t *nrm_kview_claim (json_t *claim);

/* The pods' claims and their placement: per pod and claim, the CPUs, NUMA
 * nodes, bytes and PCI functions of its status.devices data. Pods without
 * claims are left out. */
json_t *nrm_kview_pods (json_t *pods, json_t *claims);

/* The placement data keys nrm's drivers write, in the order shown. */
extern const char *const nrm_kview_known_keys[];

#endif
