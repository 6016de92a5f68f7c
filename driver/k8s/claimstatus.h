/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_CLAIMSTATUS_H
#define NRM_CLAIMSTATUS_H

#include <jansson.h>
#include <stdbool.h>

#include "driver/k8s/kube.h"
#include "driver/registry.h"

/* What nrm chose for each prepared claim, in the claim's status: one
 * status.devices entry per device of the claim that a driver of this node
 * prepared, with data saying what was chosen (describe's "placement", and
 * the request) and a Ready condition (docs/kubernetes-api.md, placement).
 * Written with server-side apply under a field manager of its own,
 * <driver>/placement, beside the binder's (the driver's name): each owns
 * its own conditions and neither apply removes the other's. A queue and a
 * thread: a prepare never waits on the API server; a failed write is
 * tried again with backoff. Each write compares with the claim as the
 * server has it first, so that a restart, which looks at every prepared
 * claim again, writes nothing that is already there. */

#define NRM_PLACEMENT_MANAGER_SUFFIX "/placement"
#define NRM_PLACEMENT_CONDITION "Ready"
#define NRM_PLACEMENT_REASON "Prepared"

/* The completed claims of a driver's checkpoint ({uid: entry with
 * namespace, name, devices, state}; a new reference, an empty object for
 * none), or NULL when the checkpoint cannot be read: then nothing is
 * written (an empty list would take the placement off prepared claims)
 * and the claim is tried again. */
typedef json_t *(*nrm_claimstatus_claims_fn) (void *ctx, const char *driver);

struct nrm_claimstatus_config
{
  struct nrm_kube *kube;
  const struct nrm_drivers *drivers;
  const char *node_name;
  nrm_claimstatus_claims_fn claims;
  void *claims_ctx;
  nrm_log_fn log;
  void *log_ctx;
};

struct nrm_claimstatus;

/* Starts the thread, which first looks at every claim the drivers'
 * checkpoints hold (a restart). */
int nrm_claimstatus_start (const struct nrm_claimstatus_config *cfg, struct nrm_claimstatus **ret, nrm_error_t *err);

/* A prepare or unprepare of the claim completed: its status follows the
 * checkpoint, soon. Never waits on the API server. */
void nrm_claimstatus_changed (struct nrm_claimstatus *w, const char *driver, const char *uid, const char *ns,
                              const char *name);

/* As nrm_informer_stopping(): call before the client is cancelled. */
void nrm_claimstatus_stopping (struct nrm_claimstatus *w);
void nrm_claimstatus_stop (struct nrm_claimstatus *w);

/* --- the parts, for tests ------------------------------------------------ */

/* The field manager of a driver's placement entries (malloc'd). */
char *nrm_placement_manager (const char *driver);

/* The status.devices entries of a driver's claim: for each device of its
 * checkpoint entry (NULL: none, unprepared), {driver, pool, device,
 * shareID?, data: {request, describe's placement of the device},
 * conditions: [Ready]}. described is describe's output (or NULL); claim
 * is the claim as the server has it: a Ready condition that stays True
 * keeps its lastTransitionTime, a new one gets now (RFC 3339). */
json_t *nrm_placement_entries (const char *driver, const char *node, json_t *entry, json_t *described, json_t *claim,
                               const char *now);

/* Whether the claim's status holds exactly these entries under manager:
 * the entries it owns are those, with the same data and condition. Then
 * there is nothing to write. */
bool nrm_placement_current (json_t *claim, const char *manager, json_t *entries);

/* The apply body for the claim's status subresource: these entries, or
 * with none, no status at all, which gives up every field the manager
 * held. uid guards against a claim replaced under the same name. */
json_t *nrm_placement_body (const char *ns, const char *name, const char *uid, json_t *entries);

#endif
