/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_NODEVIEW_H
#define NRM_NODEVIEW_H

#include "driver/k8s/kube.h"
#include "driver/registry.h"

/* The devices other drivers publish on this node: a watch of the node's
 * ResourceSlices (fieldSelector spec.nodeName) that hands every enabled
 * driver with a node_devices operation the devices of every driver but
 * nrm's own ones, whenever they change, then calls changed (to publish
 * again: a driver may leave devices out because of them). */
struct nrm_nodeview_config
{
  struct nrm_kube *kube;
  const char *node_name;
  const struct nrm_drivers *drivers;
  void (*changed) (void *ctx);
  void *ctx;
  nrm_log_fn log;
  void *log_ctx;
};

struct nrm_nodeview;

/* Starts only when some enabled driver has node_devices (*ret stays NULL
 * otherwise). */
int nrm_nodeview_start (const struct nrm_nodeview_config *cfg, struct nrm_nodeview **ret, nrm_error_t *err);
void nrm_nodeview_stopping (struct nrm_nodeview *v);
void nrm_nodeview_stop (struct nrm_nodeview *v);

/* What the drivers get, from {slice name: ResourceSlice}: {driver name:
 * {device name: attributes}} of every driver not in own (a new reference). */
json_t *nrm_nodeview_devices (json_t *slices, const struct nrm_drivers *own);

#endif
