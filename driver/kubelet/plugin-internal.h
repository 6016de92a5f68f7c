/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_PLUGIN_INTERNAL_H
#define NRM_PLUGIN_INTERNAL_H

/* The state the parts of the kubelet plugin share, and what each offers
 * the others; nothing outside the plugin includes it:
 *   plugin.c       lifecycle and sockets, the gRPC handlers, recovery
 *   state.c        the serialize and instance locks, the checkpoint's
 *                  picture in memory and the answers known without the lock
 *   groupcommit.c  the two-phase group commit of prepares and unprepares
 *   cdi.c          the CDI spec of every prepared claim
 *   health.c       the health streams and their threads
 *   metrics.c      call counters and latencies
 *   report.c       Events on refused claims and on the Node
 * The checkpoint's format is checkpoint.c's, the device metadata files
 * metadata.c's (both in this folder). */

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "driver/claimview.h"
#include "driver/kubelet/grpc.h"
#include "driver/kubelet/plugin.h"
#include "nrm/base/xalloc.h"

struct nrm_plugin_op;

struct nrm_plugin
{
  struct nrm_plugin_config cfg;
  const struct nrm_driver_ops *ops;
  void *self;
  char *driver, *node_name, *cdi_dir, *state_dir, *plugin_dir;
  char *dra_sock, *reg_sock, *checkpoint, *serialize_lock, *instance_lock;
  int instance_fd, serialize_fd;
  struct nrm_grpc_server *dra, *reg;

  pthread_mutex_t lock; /* serializes prepare/unprepare in this process */
  /* Group commit: ops waiting for a batch (nrm_plugin_submit()). */
  pthread_mutex_t queue_lock;
  pthread_cond_t queue_cond;
  struct nrm_plugin_op *queue, **queue_tail;
  bool batch_running; /* a batch is taking its part under the lock */
  /* The commit pipeline (nrm_plugin_submit): batches that took their part
   * and wait for their checkpoint write, renamed in the order they took
   * it. While one is in flight the file lock stays held. Under lock, with
   * turn. */
  pthread_cond_t turn;
  uint64_t next_seq, done_seq;
  unsigned inflight;
  bool poisoned;   /* a write failed: what was taken since is in no file */
  json_t *cp;      /* the checkpoint as last read or written */
  json_t *devices; /* the driver's device names, from its pool */
  json_int_t cp_generation;
  struct stat cp_stat; /* of the checkpoint file as last read or written */
  /* nrm_plugin_known_answer(): claim UID -> devices of the completed
   * claims, as of the checkpoint version in answers_stat. */
  pthread_mutex_t answers_lock;
  json_t *answers;
  struct stat answers_stat;
  int registered;
  pthread_mutex_t mlock;
  struct nrm_plugin_metrics metrics;

  /* Health streams and their thread. */
  pthread_mutex_t hlock;
  pthread_cond_t hcond;
  pthread_t hthread, ethread;
  bool hrunning, hstop, hchanged, erunning;
  int estop; /* eventfd that ends the health event thread */
  struct nrm_grpc_stream **streams;
  size_t n_streams;
  json_t *health_seen; /* device -> the last health known, for Events; under hlock */
};

#define LOG(p, lvl, ...) NRM_LOG_TO ((p)->cfg.log, (p)->cfg.log_ctx, lvl, __VA_ARGS__)

/* A request that cannot be decoded. */
static inline grpc_status_code
nrm_plugin_bad_request (char **details, const char *what)
{
  *details = xstrdup (what);
  return GRPC_STATUS_INVALID_ARGUMENT;
}

/* --- locks and state (state.c) ---------------------------------------------- */

/* Takes the instance lock (not in local mode: only the shared state, as
 * another instance may be serving) and opens the serialize lock. */
int nrm_plugin_locks_open (struct nrm_plugin *p, nrm_error_t *err);

/* Takes the in-process mutex and the cross-process file lock, and brings
 * the driver's picture (p->cp, the driver's own) up to date with the
 * checkpoint on disk. batch: for a batch of the group commit, which goes on
 * top of the batches still writing. */
int nrm_plugin_lock_state (struct nrm_plugin *p, bool batch, nrm_error_t *err);
void nrm_plugin_unlock_state (struct nrm_plugin *p);

/* The recorded answer of a completed claim without the lock: 1 prepared
 * (*ret a new reference), 0 not prepared, -1 unknown: only the lock can
 * say. */
int nrm_plugin_known_answer (struct nrm_plugin *p, const char *uid, json_t **ret);

/* Takes answers (nrm_checkpoint_answers()) of the checkpoint version in
 * p->cp_stat, for nrm_plugin_known_answer(). */
void nrm_plugin_publish_answers (struct nrm_plugin *p, json_t *answers);

/* Writes p->cp, under the lock; and after a write of the caller's own
 * (nrm_checkpoint_text()): the file now holds generation gen, written by
 * this process. */
int nrm_plugin_write_state (struct nrm_plugin *p, nrm_error_t *err);
void nrm_plugin_state_written (struct nrm_plugin *p, json_int_t gen);

/* --- group commit (groupcommit.c) ------------------------------------------- */

/* One prepare or unprepare waiting for the batch that does it. */
struct nrm_plugin_op
{
  bool unprepare;
  const char *ns, *name, *uid;
  json_t *claim; /* prepare: the claim as read */
  /* A local prepare: the claim is chosen under the lock (claim NULL until
   * then), from the claims held (nrm_plugin_prepare_local). */
  nrm_plugin_choose_fn choose;
  void *choose_ctx;
  struct nrm_allocation a; /* prepare: its allocation */
  json_t *devs;            /* prepare: the answer */
  json_t *saved;           /* unprepare: the entry it removed */
  struct nrm_prepared prep;
  json_t *edits;
  enum
  {
    OP_NEW,
    OP_STARTED,  /* in the picture as PrepareStarted, or removed (unprepare) */
    OP_PREPARED, /* taken and its spec written */
    OP_DONE
  } stage;
  nrm_error_t err;
  bool queued; /* in p->queue, for a batch to take */
  bool done;
  struct nrm_plugin_op *next;
};

/* Queues an op and waits until a batch has done it (o->err, o->devs). */
void nrm_plugin_submit (struct nrm_plugin *p, struct nrm_plugin_op *o);

/* --- CDI specs (cdi.c) ------------------------------------------------------ */

/* The CDI device id of a claim's spec (malloc'd). */
char *nrm_plugin_cdi_id (struct nrm_plugin *p, const char *uid);

/* The driver's typed limits added to its env as the NRM_* variables the
 * commit hook reads (after the driver's own, each with the claim's copy). */
int nrm_cdi_limits_env (struct nrm_container_edits *e, const char *uid, nrm_error_t *err);

/* A driver's container edits as the checkpoint keeps them, and the edits
 * of a checkpoint entry (new references). */
json_t *nrm_cdi_edits (const struct nrm_container_edits *e);
json_t *nrm_cdi_entry_edits (json_t *entry);

/* Writes and removes a claim's spec (nothing in local mode). */
int nrm_plugin_cdi_write (struct nrm_plugin *p, const char *uid, json_t *edits, nrm_error_t *err);
void nrm_plugin_cdi_remove (struct nrm_plugin *p, const char *uid);

/* Removes this driver's specs that belong to no claim of p->cp. */
void nrm_plugin_cdi_remove_orphans (struct nrm_plugin *p);

/* --- health (health.c) ------------------------------------------------------ */

/* The NodeWatchResources handler. */
grpc_status_code nrm_plugin_health_watch (void *ctx, const uint8_t *req, size_t len, struct nrm_grpc_stream *st,
                                          char **details);

/* Starts and stops the periodic health thread and the thread of the
 * driver's health events; stop also ends the open streams. */
void nrm_plugin_health_start (struct nrm_plugin *p);
void nrm_plugin_health_stop (struct nrm_plugin *p);

/* --- Events (report.c) ------------------------------------------------------ */

/* A refused prepare: an Event on its claim with the kubelet's message. */
void nrm_plugin_report_prepare_failed (struct nrm_plugin *p, const char *ns, const char *name, const char *uid,
                                       int status, const char *message);

/* A health report: an Event on the Node for each device whose health
 * turned (unhealthy, or healthy again); takes hlock. */
void nrm_plugin_report_health (struct nrm_plugin *p, const struct nrm_health_report *r);

/* --- metrics (metrics.c) ---------------------------------------------------- */

/* Counts one call that started at t0 (CLOCK_MONOTONIC) and ended with err. */
void nrm_plugin_record (struct nrm_plugin *p, struct nrm_op_metrics *m, const struct timespec *t0, nrm_error_t err);

/* Counts one checkpoint write that failed. */
void nrm_plugin_record_write_error (struct nrm_plugin *p);

#endif
