/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_PUBLISH_H
#define NRM_PUBLISH_H

#include <jansson.h>
#include <stdbool.h>

#include "driver/k8s/kube.h"
#include "nrm/base/error.h"
#include "nrm/base/log.h"

/* Keeps one driver's ResourceSlices on the API server equal to the desired
 * ones, as the upstream resourceslice controller does: slices owned by the
 * Node, found by the field selectors spec.nodeName and spec.driver, kept in
 * a cache by list and watch; created with the index-prefixed generateName,
 * updated in place, obsolete ones deleted; the pool generation bumped on any
 * change; conflicts answered from a fresh list, an expired watch by a
 * relist; fields the API server drops (a feature gate off there) reported
 * by name. Runs in a thread of its own. */

struct nrm_publisher_config
{
  struct nrm_kube *kube;
  const char *driver;
  const char *node_name;
  int resync_s; /* a full relist at least this often (600) */
  nrm_log_fn log;
  void *log_ctx;
  /* Asked before each pass that may write, and every second meanwhile:
   * false while another instance publishes (nrm_handover_active). May be
   * NULL: always. */
  bool (*may_write) (void *ctx);
  void *may_write_ctx;
};

struct nrm_publisher;

/* slices: the driver's desired ResourceSlice objects in preference order,
 * named as nrm_slices_build() names them (the name becomes the
 * generateName prefix); borrowed. */
int nrm_publisher_start (const struct nrm_publisher_config *cfg, json_t *slices, struct nrm_publisher **ret,
                         nrm_error_t *err);

/* New desired slices (the topology or the configuration changed). */
int nrm_publisher_update (struct nrm_publisher *p, json_t *slices, nrm_error_t *err);

struct nrm_publisher_status
{
  bool synced;          /* the API server holds the desired slices */
  bool connected;       /* the last request to the API server got an answer */
  bool standby;         /* another instance publishes (may_write said no) */
  long long generation; /* of the published pool, 0 before the first */
  long long writes;     /* creates, updates and deletes so far */
  long long errors;     /* problems logged so far (each a new error) */
  long long api_errors; /* requests and watches with no answer, or 401, 403, 429, 5xx */
  char *error;          /* the last problem, or NULL; malloc'd */
};

void nrm_publisher_status (struct nrm_publisher *p, struct nrm_publisher_status *st);

/* Stops the thread; the slices stay (the kubelet removes them when the
 * plugin stays away). */
void nrm_publisher_stop (struct nrm_publisher *p);

/* Compares two ResourceSlice specs as the API server stores them:
 * quantities by value, server-set fields ignored. */
bool nrm_slice_spec_equal (json_t *a, json_t *b);

/* The first field of sent that stored lacks ("spec.devices[0].taints"), or
 * NULL; with the feature gate that governs it in *gate. */
char *nrm_slice_dropped_field (json_t *sent, json_t *stored, const char **gate);

#endif
