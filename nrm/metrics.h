/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_METRICS_H
#define NRM_METRICS_H

#include <stdbool.h>

#include "driver/kubelet/plugin.h"
#include "driver/k8s/publish.h"
#include "driver/registry.h"
#include "nrm/conf.h"
#include "topology/topology.h"

/* What /metrics, /healthz and /readyz of nrm plugin report on. */
struct nrm_metrics_sources
{
  struct nrm_config *cfg;
  const struct nrm_fsroot *root;
  const struct nrm_topology *t;
  const struct nrm_drivers *drivers; /* drivers->n of each below */
  const char **names;
  struct nrm_plugin **plugins;
  struct nrm_publisher **publishers; /* or NULL without the API */
};

/* Prometheus text format (version 0.0.4). */
char *nrm_metrics_render (struct nrm_metrics_sources *s);

/* Liveness: every plugin serves. Readiness: every one registered with the
 * kubelet and, with the API, their slices published. *why says what is
 * missing (malloc'd). */
bool nrm_metrics_live (struct nrm_metrics_sources *s, char **why);
bool nrm_metrics_ready (struct nrm_metrics_sources *s, char **why);

#endif
