/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_BINDING_H
#define NRM_BINDING_H

#include "driver/k8s/kube.h"
#include "driver/registry.h"

/* Binding conditions (KEP-5007) on the node. The scheduler holds a pod in
 * PreBind until the bindingConditions of its claim's devices are True in
 * the claim's status.devices. A ResourceClaim has no node field to select
 * on, so a node does not watch every claim of the cluster: nrm's
 * controller (nrm controller, one leader) labels each claim allocated with
 * binding conditions on an nrm driver's device with the node it is
 * allocated to (NRM_NODE_LABEL), and each node watches only the claims
 * with its own label. For each such claim, every driver with a bind
 * operation makes its devices ready and the binder writes their
 * conditions with server-side apply (field manager: the driver's name), as
 * a node agent may: the resourceclaims/driver permission with verb
 * associated-node:patch, and a pod-bound service-account token. */

#define NRM_NODE_LABEL "nrm.io/node"

/* The value of NRM_NODE_LABEL for the node: its name where that fits a
 * label value (63 characters), else its first 46 characters, "-" and 16 hex
 * digits of the name's SHA-256 (a node name may have 253). */
char *nrm_node_label_value (const char *node);

struct nrm_binder_config
{
  struct nrm_kube *kube;
  const char *node_name;
  const struct nrm_drivers *drivers;
  nrm_log_fn log;
  void *log_ctx;
};

struct nrm_binder;

/* Starts only when some enabled driver has a bind operation (*ret stays
 * NULL otherwise). */
int nrm_binder_start (const struct nrm_binder_config *cfg, struct nrm_binder **ret, nrm_error_t *err);
/* As nrm_informer_stopping(): call before the client is cancelled. */
void nrm_binder_stopping (struct nrm_binder *b);
void nrm_binder_stop (struct nrm_binder *b);

/* The one node a claim's allocation is for (its nodeSelector is exactly one
 * term with one matchFields metadata.name In [node]), or NULL; borrowed. */
const char *nrm_allocation_node (json_t *claim);

/* Whether a device result's binding is settled in the claim's status: every
 * bindingCondition True, or a bindingFailureCondition True. */
bool nrm_binding_settled (json_t *claim, json_t *result);

#endif
