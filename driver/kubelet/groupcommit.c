/* SPDX-License-Identifier: Apache-2.0 */
/* The two-phase group commit: the prepares and unprepares that arrive
 * together make one batch, which takes its part under the state lock
 * (batch_apply) and then writes the checkpoint once for all of them
 * (batch_commit), while the next batch takes its part. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/file.h>

#include "driver/kit.h"
#include "driver/kubelet/checkpoint.h"
#include "driver/kubelet/metadata.h"
#include "driver/kubelet/plugin-internal.h"
#include "driver/names.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"

/* The metadata of a claim whose files follow the checkpoint write: only
 * where the entry records some (none in local mode). */
static void
remove_metadata (struct nrm_plugin *p, json_t *entry, const char *uid)
{
  if (!p->cfg.local)
    nrm_metadata_remove_entry (p->plugin_dir, p->cdi_dir, p->driver, uid, entry, false, p->cfg.log, p->cfg.log_ctx);
}

/* The devices of a prepared claim as the kubelet wants them. */
static json_t *
response_devices (struct nrm_plugin *p, const char *uid, const struct nrm_alloc_result *r, size_t n)
{
  cleanup_free char *id = nrm_plugin_cdi_id (p, uid);
  json_t *devs = json_array ();
  for (size_t i = 0; i < n; i++)
    {
      cleanup_free char *req = nrm_base_request (r[i].request);
      json_t *d = json_pack ("{s:[s], s:s, s:s, s:[s]}", "requestNames", req, "pool", r[i].pool, "device", r[i].device,
                             "cdiDeviceIDs", id);
      if (r[i].share_id)
        json_object_set_new (d, "shareID", json_string (r[i].share_id));
      json_array_append_new (devs, d);
    }
  return devs;
}

static void
op_fail (struct nrm_plugin_op *o, const char *msg)
{
  nrm_error_set (&o->err, EIO, "%s", msg);
  o->stage = OP_DONE;
}

/* The driver's part of one prepare in a batch, under the state lock; the
 * batch's checkpoint write records it. */
static void
op_prepare (struct nrm_plugin *p, struct nrm_plugin_op *o)
{
  json_t *claims = json_object_get (p->cp, "claims");
  if (p->ops->prepare (p->self, &o->a.view, &o->prep, &o->err) < 0)
    {
      json_object_del (claims, o->uid);
      o->stage = OP_DONE;
      return;
    }
  if (nrm_cdi_limits_env (&o->prep.edits, o->uid, &o->err) == 0)
    o->edits = nrm_cdi_edits (&o->prep.edits);
  if (o->edits == NULL || nrm_plugin_cdi_write (p, o->uid, o->edits, &o->err) < 0)
    {
      p->ops->unprepare (p->self, o->uid, o->prep.state);
      json_object_del (claims, o->uid);
      o->stage = OP_DONE;
      return;
    }
  json_t *entry = json_object_get (claims, o->uid);
  if (!p->cfg.local && p->cfg.device_metadata)
    {
      cleanup_json json_t *meta = nrm_metadata_entries (p->driver, &o->a.view, o->prep.metadata);
      nrm_metadata_write_claim (p->plugin_dir, p->cdi_dir, p->driver, o->ns, o->name, o->uid, meta, o->devs, p->cfg.log,
                                p->cfg.log_ctx);
      json_object_set (entry, "metadata", meta);
    }
  /* Prepared once for every pod of a group (KEP-5729): status shows it. */
  const char *group = nrm_kit_pod_group (o->claim);
  if (group)
    json_object_set_new (entry, "podGroup", json_string (group));
  json_object_set_new (entry, "phase", json_string ("PrepareCompleted"));
  json_object_set (entry, "state", o->prep.state);
  json_object_set (entry, "edits", o->edits);
  o->stage = OP_PREPARED;
}

/* A local prepare's claim, chosen under the lock from the claims held;
 * false when the op is done (its choice failed). */
static bool
op_choose (struct nrm_plugin *p, struct nrm_plugin_op *o, json_t *claims)
{
  if (o->claim == NULL
      && (o->choose (o->choose_ctx, claims, &o->claim, &o->err) < 0
          || nrm_claim_allocation (p->driver, p->node_name, o->claim, o->uid, &o->a, &o->err) < 0))
    {
      o->stage = OP_DONE;
      return false;
    }
  return true;
}

/* One batch of nrm_plugin_submit(): its ops, its place in the pipeline (0: none,
 * its ops failed before they took anything), and what it writes. */
struct batch
{
  struct nrm_plugin_op *ops;
  uint64_t seq;
  json_int_t gen;
  char *text;      /* the checkpoint to write, or NULL: nothing changed */
  json_t *answers; /* nrm_checkpoint_answers() of that checkpoint */
};

/* Group commit, step 1, under the state lock: the prepares and unprepares
 * that arrived together
 *   1. remove the unprepared claims' entries, and the drivers give back
 *      what they held;
 *   2. the drivers take what each prepare needs, and its CDI spec (and
 *      metadata) is written;
 *   3. the checkpoint with all of it is put into text, as the next
 *      generation; the batch takes the next place in the pipeline.
 * The lock is then free for the next batch, which goes on top of this
 * one, while this one writes (batch_commit). */
static void
batch_apply (struct nrm_plugin *p, struct batch *b)
{
  nrm_error_t err = NULL;
  bool changed = false;
  if (nrm_plugin_lock_state (p, true, &err) < 0)
    {
      for (struct nrm_plugin_op *o = b->ops; o; o = o->next)
        op_fail (o, nrm_error_msg (err));
      nrm_error_release (&err);
      return;
    }
  json_t *claims = json_object_get (p->cp, "claims");
  for (struct nrm_plugin_op *o = b->ops; o; o = o->next)
    {
      json_t *entry = json_object_get (claims, o->uid);
      /* A later op of the same claim in this batch waits for the next. */
      bool twin = false;
      for (struct nrm_plugin_op *q = b->ops; q != o && !twin; q = q->next)
        twin = strcmp (q->uid, o->uid) == 0 && q->stage != OP_DONE;
      if (twin)
        continue;
      if (o->unprepare)
        {
          if (entry == NULL)
            {
              o->stage = OP_DONE; /* unknown, or already unprepared */
              continue;
            }
          o->saved = json_incref (entry);
          json_object_del (claims, o->uid);
          if (nrm_checkpoint_completed (o->saved))
            p->ops->unprepare (p->self, o->uid, json_object_get (o->saved, "state"));
          o->stage = OP_STARTED;
          changed = true;
          continue;
        }
      if (o->choose && !op_choose (p, o, claims))
        continue;
      o->a.view.ns = o->ns;
      o->a.view.name = o->name;
      o->a.view.metadata = p->cfg.device_metadata && !p->cfg.local;
      if (entry != NULL && nrm_checkpoint_completed (entry))
        {
          /* A concurrent call prepared it meanwhile. */
          o->devs = json_incref (json_object_get (entry, "devices"));
          o->stage = OP_DONE;
          continue;
        }
      o->devs = response_devices (p, o->uid, o->a.mine, o->a.view.n_results);
      json_object_set_new (claims, o->uid,
                           json_pack ("{s:s, s:s, s:s, s:O}", "namespace", o->ns, "name", o->name, "phase",
                                      "PrepareStarted", "devices", o->devs));
      o->stage = OP_STARTED;
      changed = true;
    }
  for (struct nrm_plugin_op *o = b->ops; o; o = o->next)
    if (!o->unprepare && o->stage == OP_STARTED)
      op_prepare (p, o);
  if (changed)
    {
      b->text = nrm_checkpoint_text (p->cp, &b->gen);
      b->answers = nrm_checkpoint_answers (json_object_get (p->cp, "claims"));
    }
  /* Even a batch that changed nothing waits for those before it: what it
   * answers from (a claim prepared or unprepared by one of them) is not on
   * disk before they are. */
  b->seq = ++p->next_seq;
  __atomic_add_fetch (&p->inflight, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock (&p->lock);
}

/* Group commit, step 2: the checkpoint is written durably, the writes of
 * the batches in flight overlapping (the sync of one's file with the
 * rename and directory sync of the one before), the renames in their
 * order. The removals and the completed prepares of a batch reach the
 * disk together (one rename), so CPUs freed by an unprepare and taken by a
 * prepare are never held twice on disk. Nothing is answered before the
 * write. A crash before it leaves the checkpoint as it was; the specs it
 * left are removed at the next start as orphans. If a write fails, its
 * batch and the batch on top of it fail (PIPELINE_DEPTH: a later one waits
 * in nrm_plugin_lock_state) and the picture is read back from the file before the
 * next batch. */
static void
batch_commit (struct nrm_plugin *p, struct batch *b)
{
  nrm_error_t err = NULL;
  struct nrm_staged_write w = { .fd = -1 };
  int r = 0;
  if (b->seq == 0)
    return;
  if (b->text)
    r = nrm_write_stage (p->checkpoint, b->text, strlen (b->text), 0600, true, &w, &err);
  pthread_mutex_lock (&p->lock);
  while (p->done_seq != b->seq - 1)
    pthread_cond_wait (&p->turn, &p->lock);
  bool poisoned = p->poisoned;
  pthread_mutex_unlock (&p->lock);
  if (r == 0 && b->text && poisoned)
    nrm_write_abort (&w);
  else if (r == 0 && b->text)
    r = nrm_write_commit (&w, true, &err);

  pthread_mutex_lock (&p->lock);
  json_t *claims = json_object_get (p->cp, "claims");
  bool wrote = r == 0 && !poisoned;
  /* Renamed, the file is this batch's even where the directory's sync
   * failed: nrm_plugin_known_answer() answers from what it holds. */
  if ((wrote || w.renamed) && b->text)
    {
      nrm_plugin_state_written (p, b->gen);
      nrm_plugin_publish_answers (p, TAKE_PTR (b->answers));
      /* Which version answered what: a crash test's failure reads it. */
      LOG (p, NRM_LOG_DEBUG, "%s: checkpoint generation %lld on disk (batch %llu)", p->driver, (long long) b->gen,
           (unsigned long long) b->seq);
    }
  if (!wrote)
    {
      if (!poisoned)
        {
          LOG (p, NRM_LOG_ERROR, "%s: %s", p->driver, nrm_error_msg (err));
          nrm_plugin_record_write_error (p);
        }
      p->poisoned = true;
    }
  const char *why = poisoned ? "an earlier checkpoint write failed" : nrm_error_msg (err);
  for (struct nrm_plugin_op *o = b->ops; o; o = o->next)
    {
      /* The files follow the checkpoint file: written, or renamed where
       * only the directory's sync failed, the unprepared claims' files go
       * (unless a batch since prepared the claim again); not written, the
       * prepared claims' files go. */
      if ((wrote || w.renamed) && o->unprepare && o->stage == OP_STARTED && json_object_get (claims, o->uid) == NULL)
        {
          nrm_plugin_cdi_remove (p, o->uid);
          remove_metadata (p, o->saved, o->uid);
        }
      if (!wrote && !w.renamed && !o->unprepare && o->stage == OP_PREPARED)
        {
          nrm_plugin_cdi_remove (p, o->uid);
          remove_metadata (p, json_object_get (claims, o->uid), o->uid);
        }
      if (o->stage == OP_STARTED || o->stage == OP_PREPARED)
        LOG (p, NRM_LOG_DEBUG, "%s: batch %llu %s claim %s%s", p->driver, (unsigned long long) b->seq,
             o->unprepare ? "unprepares" : "prepares", o->uid, wrote ? "" : " (failed)");
      /* Not written: every call fails, also one that found its claim done
       * or gone, as what it saw is in no file either; the picture is read
       * back from the file before the next batch. */
      if (!wrote && o->err == NULL)
        op_fail (o, why);
      if (!wrote || o->stage == OP_STARTED || o->stage == OP_PREPARED)
        o->stage = OP_DONE;
    }
  nrm_error_release (&err);
  p->done_seq = b->seq;
  if (__atomic_sub_fetch (&p->inflight, 1, __ATOMIC_RELEASE) == 0)
    flock (p->serialize_fd, LOCK_UN);
  pthread_cond_broadcast (&p->turn);
  pthread_mutex_unlock (&p->lock);
  free (b->text);
  json_decref (b->answers);
}

/* Batches in flight at most: one writing its file while the one before
 * renames. Ops that come while both are busy make the next batch together,
 * as they would wait anyway. */
#define PIPELINE_DEPTH 2

/* A waiter whose op is queued while no batch is taking its part leads the
 * batch of everything queued; who arrives meanwhile goes into the next
 * batch, which starts while this one writes. */
void
nrm_plugin_submit (struct nrm_plugin *p, struct nrm_plugin_op *o)
{
  pthread_mutex_lock (&p->queue_lock);
  o->queued = true;
  *p->queue_tail = o;
  p->queue_tail = &o->next;
  while (!o->done)
    {
      if (p->batch_running || !o->queued || __atomic_load_n (&p->inflight, __ATOMIC_ACQUIRE) >= PIPELINE_DEPTH)
        {
          pthread_cond_wait (&p->queue_cond, &p->queue_lock);
          continue;
        }
      struct batch b = { .ops = p->queue };
      for (struct nrm_plugin_op *x = p->queue; x; x = x->next)
        x->queued = false;
      p->queue = NULL;
      p->queue_tail = &p->queue;
      p->batch_running = true;
      pthread_mutex_unlock (&p->queue_lock);
      batch_apply (p, &b);
      pthread_mutex_lock (&p->queue_lock);
      p->batch_running = false;
      pthread_cond_broadcast (&p->queue_cond);
      pthread_mutex_unlock (&p->queue_lock);
      batch_commit (p, &b);
      pthread_mutex_lock (&p->queue_lock);
      /* An op that waited for its twin in this batch runs in the next. */
      struct nrm_plugin_op *again = NULL, **tail = &again;
      for (struct nrm_plugin_op *x = b.ops, *next; x; x = next)
        {
          next = x->next;
          x->next = NULL;
          if (x->stage == OP_DONE)
            x->done = true;
          else
            {
              x->queued = true;
              *tail = x;
              tail = &x->next;
            }
        }
      if (again)
        {
          *tail = p->queue;
          if (p->queue == NULL)
            p->queue_tail = tail;
          p->queue = again;
        }
      pthread_cond_broadcast (&p->queue_cond);
    }
  pthread_mutex_unlock (&p->queue_lock);
}
