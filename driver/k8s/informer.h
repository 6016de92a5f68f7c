/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_INFORMER_H
#define NRM_INFORMER_H

#include <jansson.h>
#include <stdbool.h>

#include "driver/k8s/kube.h"
#include "nrm/base/error.h"
#include "nrm/base/log.h"

/* Follows a collection of the API as client-go's informers do: a list
 * (pages of 500), then a watch from its resourceVersion with bookmarks; an
 * expired or broken watch lists again; errors back off 0.5 s to 30 s with
 * jitter. Runs in a thread of its own and hands every object to event:
 * "SYNC" for each object of a list, "ADDED", "MODIFIED", "DELETED" for the
 * watch's events; every resync_s every object is handed out again
 * ("SYNC") from what the list and the watch last said, without a request,
 * so that what failed is tried again. */
struct nrm_informer_config
{
  struct nrm_kube *kube;
  const char *path;  /* the collection, "/apis/resource.k8s.io/v1/resourceclaims" */
  const char *query; /* more of the query ("labelSelector=..."), escaped, or NULL */
  const char *what;  /* for messages: "ResourceClaims" */
  void (*event) (void *ctx, const char *type, json_t *object);
  int resync_s; /* hand every object out again this often (0: never) */
  void *ctx;
  nrm_log_fn log;
  void *log_ctx;
};

struct nrm_informer;

int nrm_informer_start (const struct nrm_informer_config *cfg, struct nrm_informer **ret, nrm_error_t *err);
/* Whether a list has completed since the start. */
bool nrm_informer_synced (struct nrm_informer *i);
/* Tells the thread to end (before the client is cancelled, so that the
 * calls that then fail are not reported); nrm_informer_stop() waits. */
void nrm_informer_stopping (struct nrm_informer *i);
void nrm_informer_stop (struct nrm_informer *i);

#endif
