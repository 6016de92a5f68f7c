/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_KUBE_H
#define NRM_KUBE_H

#include <jansson.h>
#include <stdbool.h>

#include "nrm/base/error.h"

/* A Kubernetes API client on libcurl: kubeconfig or in-cluster settings,
 * TLS always verified, bearer tokens re-read when they rotate, client-side
 * rate limiting, retries with backoff and jitter. Safe to use from several
 * threads. Tokens never appear in errors. */

struct nrm_kube_options
{
  const char *kubeconfig; /* a kubeconfig file, or NULL for the in-cluster settings */
  bool kubeconfig_list;   /* kubeconfig is a list of files as $KUBECONFIG is */
  const char *context;    /* the kubeconfig's context to use (NULL: current-context) */
  double qps;             /* requests per second (20; 0 or less: no limit) */
  int burst;              /* requests allowed at once above qps (100) */
  int timeout_ms;         /* one request, transfer included (10000) */
  int max_tries;          /* of a request that failed with a transient error (5) */
  const char *user_agent;
};

void nrm_kube_options_init (struct nrm_kube_options *o);

/* How long a watcher waits before it lists again after its watch expired
 * (410, or an ERROR event): no error, but when the API server restarts or
 * falls behind every node's watches expire together, and a random
 * 0.25-0.75 s keeps a fleet from listing in step (client-go's reflector
 * waits 0.8-1.6 s). */
long nrm_kube_relist_wait_ms (void);

/* The longest timeoutSeconds a watcher asks for (each draws 300 to this,
 * so that a fleet's watches do not end together), and how long a watch may
 * send nothing before it is taken for dead: past that and a minute. */
#define NRM_KUBE_WATCH_TIMEOUT_MAX_S 599
#define NRM_KUBE_WATCH_SILENT_S (NRM_KUBE_WATCH_TIMEOUT_MAX_S + 60)

/* How long a watcher waits before it opens its watch again after the
 * server turned it away with 429 (its priority and fairness): the
 * Status's details.retryAfterSeconds (1 to 10, 1 where absent), times a
 * random 0.5-1.5, doubled for each refusal in a row, up to 32x. *refused
 * counts them: incremented here, reset by the watcher once a watch stays
 * open. The history is not gone, so the watch resumes from its
 * resourceVersion with no list (client-go's reflector does the same). */
long nrm_kube_retry_after_ms (json_t *status, unsigned *refused);

struct nrm_kube;

/* In-cluster settings come from $KUBERNETES_SERVICE_HOST and _PORT and the
 * service account directory (/var/run/secrets/kubernetes.io/serviceaccount,
 * or $NRM_SERVICE_ACCOUNT_DIR). */
int nrm_kube_new (const struct nrm_kube_options *o, struct nrm_kube **ret, nrm_error_t *err);
void nrm_kube_free (struct nrm_kube *k);

/* Ends calls in flight and makes new ones fail at once (shutdown). */
void nrm_kube_cancel (struct nrm_kube *k);

/* Whether in-cluster settings are present (a pod with a service account). */
bool nrm_kube_in_cluster (void);

const char *nrm_kube_server (struct nrm_kube *k);

/* The namespace of the kubeconfig's context, or NULL. */
const char *nrm_kube_namespace (struct nrm_kube *k);

/* One API call; path starts with "/" and carries its query. Returns the
 * HTTP status, with *ret the JSON body (NULL when there is none), or -1 when
 * no answer came (after the retries). Statuses of 400 and more are the
 * caller's to judge: nrm_kube_status_message() reads the Status body. */
int nrm_kube_call (struct nrm_kube *k, const char *method, const char *path, json_t *body, json_t **ret,
                   nrm_error_t *err);

/* A PATCH of content_type: application/merge-patch+json, or
 * application/apply-patch+yaml (server-side apply, with ?fieldManager= in
 * path; JSON is YAML). As nrm_kube_call() otherwise. */
int nrm_kube_patch (struct nrm_kube *k, const char *path, const char *content_type, json_t *body, json_t **ret,
                    nrm_error_t *err);

/* A query parameter value, percent-encoded (malloc'd), or NULL. */
char *nrm_kube_escape (const char *s);

/* "reason: message" of a Status body, or a generic text for the code. */
const char *nrm_kube_status_message (json_t *body, int code);

/* A watch stream. fn gets every event (type and object, borrowed); a
 * negative return ends the stream. */
typedef int (*nrm_kube_event_fn) (void *ctx, const char *type, json_t *object);
struct nrm_kube_watch;

int nrm_kube_watch_open (struct nrm_kube *k, const char *path, nrm_kube_event_fn fn, void *ctx,
                         struct nrm_kube_watch **ret, nrm_error_t *err);

/* Waits up to timeout_ms for events (or until wake_fd, when not -1, is
 * readable) and delivers them. Returns 1 while the stream is open, 0 when
 * it ended (*status: the HTTP status; a Status body is in *body, new
 * reference, or NULL), -1 when the transfer failed or fn stopped it. */
int nrm_kube_watch_poll (struct nrm_kube_watch *w, int timeout_ms, int wake_fd, long *status, json_t **body,
                         nrm_error_t *err);
void nrm_kube_watch_close (struct nrm_kube_watch *w);

#endif
