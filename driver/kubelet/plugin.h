/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_PLUGIN_H
#define NRM_PLUGIN_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "driver/driver.h"
#include "driver/kubelet/checkpoint.h"
#include "driver/kubelet/claims.h"
#include "nrm/base/error.h"
#include "nrm/base/log.h"

struct nrm_events;

/* The kubelet plugin framework. A driver implements nrm_driver_ops
 * (driver/driver.h); the framework owns the sockets, registration, the DRA
 * and health services, serialization, checkpoints, CDI specs and claim
 * lookup. */

struct nrm_plugin_config
{
  const char *driver;       /* driver name */
  const char *node_name;    /* the pool name of node-local devices */
  const char *kubelet_dir;  /* /var/lib/kubelet */
  const char *cdi_dir;      /* /var/run/cdi */
  const char *state_dir;    /* checkpoints and locks */
  const char *instance_uid; /* rolling-update mode: the pod UID in socket names, or NULL */
  int health_interval_s;    /* complete device list at least this often (10) */
  int threads;              /* gRPC polling threads */
  struct nrm_claim_source claims;
  nrm_log_fn log;
  void *log_ctx;
  /* The cgroup commit hook ({hookName, path, args}), added to the CDI spec
   * of every claim whose driver asks for it (edits.commit_hook), or NULL. */
  json_t *cdi_hook;
  /* Called after a claim was prepared or unprepared, or NULL. */
  void (*on_change) (void *ctx);
  void *on_change_ctx;
  /* Called after a prepare or unprepare of one claim completed (its
   * checkpoint entry came or went), or NULL. */
  void (*on_claim) (void *ctx, const char *driver, const char *uid, const char *ns, const char *name);
  void *on_claim_ctx;
  /* Called when the driver's health_fd says health may have changed. */
  void (*on_health) (void *ctx);
  void *on_health_ctx;
  /* Device metadata in containers (KEP-5304): a metadata file and CDI
   * spec for every prepared request, the spec's id in the reply. */
  bool device_metadata;
  /* Events on the claims it refuses and on the Node when a device's
   * health turns (driver/k8s/events.h), or NULL. */
  struct nrm_events *events;
  /* Local use (nrm run): no sockets, no registration, no CDI specs, no
   * instance lock; only the shared state under the serialization lock. */
  bool local;
};

struct nrm_plugin;

/* Loads the checkpoint (completing or rolling back interrupted prepares),
 * starts the DRA service and then the registration service. */
int nrm_plugin_start (const struct nrm_plugin_config *cfg, const struct nrm_driver_ops *ops, void *self,
                      struct nrm_plugin **ret, nrm_error_t *err);

/* Prepares and unprepares as NodePrepareResources/NodeUnprepareResources do
 * for one claim (for local use); prepare returns the devices (new
 * reference) or NULL with an error. */
json_t *nrm_plugin_prepare (struct nrm_plugin *p, const char *ns, const char *name, const char *uid, nrm_error_t *err);
int nrm_plugin_unprepare (struct nrm_plugin *p, const char *uid, nrm_error_t *err);

/* Local use (nrm run): the claim is chosen under the serialize lock that
 * its prepare takes, and prepared in that same hold, once: what choose
 * saw held is what the driver sees. choose gets the checkpoint's claims as
 * they stand (uid -> entry with namespace, name, phase, state; borrowed)
 * and returns the ResourceClaim to prepare (a new reference) or -1 with an
 * error, which the prepare returns. The claim's uid must be uid. */
typedef int (*nrm_plugin_choose_fn) (void *ctx, json_t *claims, json_t **ret, nrm_error_t *err);

/* What a local prepare hands back to its caller (new references): the
 * devices, the driver's state and its container edits ({env, ...}, as a
 * CDI spec has them), so that nothing reads them back from the
 * checkpoint; and the limits of those edits as the driver typed them, so
 * that nothing parses them back from env either. */
struct nrm_plugin_prepared
{
  json_t *devices, *state, *edits;
  struct nrm_container_limits limits;
};

int nrm_plugin_prepare_local (struct nrm_plugin *p, const char *ns, const char *name, const char *uid,
                              nrm_plugin_choose_fn choose, void *ctx, struct nrm_plugin_prepared *out,
                              nrm_error_t *err);
void nrm_plugin_prepared_done (struct nrm_plugin_prepared *out);

/* Deregisters (removes the registration socket), finishes calls in flight,
 * removes this instance's own sockets. */
void nrm_plugin_stop (struct nrm_plugin *p);

/* Wakes the health streams: a device's health changed. */
void nrm_plugin_health_changed (struct nrm_plugin *p);

/* The last NotifyRegistrationStatus: 1 registered, 0 refused, -1 none yet. */
int nrm_plugin_registered (struct nrm_plugin *p);

/* Counters of prepare and unprepare calls, per claim, for /metrics. */
#define NRM_LATENCY_BUCKETS 12
extern const double nrm_latency_bounds[NRM_LATENCY_BUCKETS]; /* seconds, ascending */

enum nrm_error_kind
{
  NRM_ERRKIND_INVALID,     /* a malformed claim, request or configuration */
  NRM_ERRKIND_NOT_FOUND,   /* the claim or one of its devices is unknown */
  NRM_ERRKIND_REPLACED,    /* the claim's UID changed */
  NRM_ERRKIND_NO_CAPACITY, /* the node cannot fit it */
  NRM_ERRKIND_API,         /* the Kubernetes API did not answer */
  NRM_ERRKIND_INTERNAL,    /* anything else: files, cgroups, memory */
  NRM_ERRKIND_COUNT
};
const char *nrm_error_kind_name (enum nrm_error_kind k);
enum nrm_error_kind nrm_error_kind_of (int status);

struct nrm_op_metrics
{
  unsigned long long count, buckets[NRM_LATENCY_BUCKETS]; /* not cumulative */
  double sum_s;
  unsigned long long errors[NRM_ERRKIND_COUNT];
};

struct nrm_plugin_metrics
{
  struct nrm_op_metrics prepare, unprepare;
  unsigned long long checkpoint_write_errors; /* writes of the checkpoint that failed */
};

void nrm_plugin_metrics (struct nrm_plugin *p, struct nrm_plugin_metrics *out);

/* The driver's devices by the health of a report made now (what the health
 * stream would send), indexed by enum nrm_health; a report that fails
 * counts every device unknown. */
void nrm_plugin_health_counts (struct nrm_plugin *p, unsigned long long out[3]);

/* Paths the plugin serves on, for tests and logs. */
const char *nrm_plugin_dra_socket (struct nrm_plugin *p);

/* The instance lock file, held (flock) for the life of the plugin. */
const char *nrm_plugin_instance_lock (struct nrm_plugin *p);
const char *nrm_plugin_registration_socket (struct nrm_plugin *p);

#endif
