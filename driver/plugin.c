/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "driver/checkpoint.h"
#include "driver/claimview.h"
#include "driver/grpc.h"
#include "driver/kit.h"
#include "driver/metadata.h"
#include "driver/names.h"
#include "driver/plugin.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/fs.h"
#include "nrm/base/text.h"
#include "proto/dra_health_v1alpha1.pb-c.h"
#include "proto/dra_v1.pb-c.h"
#include "proto/pluginregistration.pb-c.h"

#define CHECKPOINT_VERSION 1
#define MAX_CHECKPOINT NRM_CHECKPOINT_MAX
#define HEALTH_TIMEOUT_S 30
#define MAX_CLAIMS_PER_CALL 4096
#define MAX_UID 128
#define QUOTE_MAX 64         /* bytes of a bad input quoted in a message */
#define MAX_REPLY_ERROR 1024 /* bytes of an error in a reply */

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest PrepareRequest;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse PrepareResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse__ClaimsEntry PrepareEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse PrepareClaimResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device Device;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest UnprepareRequest;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse UnprepareResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry UnprepareEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourceResponse UnprepareClaimResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim Claim;

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
  /* Group commit: ops waiting for a batch (submit()). */
  pthread_mutex_t queue_lock;
  pthread_cond_t queue_cond;
  struct op *queue, **queue_tail;
  bool batch_running; /* a batch is taking its part under the lock */
  /* The commit pipeline (submit): batches that took their part and wait
   * for their checkpoint write, renamed in the order they took it. While
   * one is in flight the file lock stays held. Under lock, with turn. */
  pthread_cond_t turn;
  uint64_t next_seq, done_seq;
  unsigned inflight;
  bool poisoned;   /* a write failed: what was taken since is in no file */
  json_t *cp;      /* the checkpoint as last read or written */
  json_t *devices; /* the driver's device names, from its pool */
  json_int_t cp_generation;
  struct stat cp_stat; /* of the checkpoint file as last read or written */
  /* known_answer(): claim UID -> devices of the completed claims, as of
   * the checkpoint version in answers_stat. */
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
};

#define LOG(p, lvl, ...) NRM_LOG_TO ((p)->cfg.log, (p)->cfg.log_ctx, lvl, __VA_ARGS__)

/* --- metrics ---------------------------------------------------------------- */

const double nrm_latency_bounds[NRM_LATENCY_BUCKETS]
    = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5 };

const char *
nrm_error_kind_name (enum nrm_error_kind k)
{
  static const char *const names[] = { "invalid", "not_found", "claim_replaced", "no_capacity", "api", "internal" };
  return k < NRM_ERRKIND_COUNT ? names[k] : "internal";
}

enum nrm_error_kind
nrm_error_kind_of (int status)
{
  switch (status)
    {
    case EINVAL:
      return NRM_ERRKIND_INVALID;
    case ENOENT:
    case ENODEV:
      return NRM_ERRKIND_NOT_FOUND;
    case ESTALE:
      return NRM_ERRKIND_REPLACED;
    case ENOSPC:
    case EBUSY:
      return NRM_ERRKIND_NO_CAPACITY;
    case EIO:
    case ETIMEDOUT:
    case EPROTO:
    case ECANCELED:
      return NRM_ERRKIND_API;
    default:
      return NRM_ERRKIND_INTERNAL;
    }
}

static double
seconds_since (const struct timespec *t0)
{
  struct timespec t1;
  clock_gettime (CLOCK_MONOTONIC, &t1);
  return (double) (t1.tv_sec - t0->tv_sec) + (double) (t1.tv_nsec - t0->tv_nsec) / 1e9;
}

static void
record (struct nrm_plugin *p, struct nrm_op_metrics *m, const struct timespec *t0, nrm_error_t err)
{
  double s = seconds_since (t0);
  pthread_mutex_lock (&p->mlock);
  m->count++;
  m->sum_s += s;
  for (size_t i = 0; i < NRM_LATENCY_BUCKETS; i++)
    if (s <= nrm_latency_bounds[i])
      {
        m->buckets[i]++;
        break;
      }
  if (err)
    m->errors[nrm_error_kind_of (err->status)]++;
  pthread_mutex_unlock (&p->mlock);
}

void
nrm_plugin_metrics (struct nrm_plugin *p, struct nrm_plugin_metrics *out)
{
  pthread_mutex_lock (&p->mlock);
  *out = p->metrics;
  pthread_mutex_unlock (&p->mlock);
}

/* --- checkpoint ------------------------------------------------------------ */

static json_t *
empty_checkpoint (struct nrm_plugin *p)
{
  return json_pack ("{s:i, s:s, s:I, s:{}}", "version", CHECKPOINT_VERSION, "driver", p->driver, "generation",
                    (json_int_t) 0, "claims");
}

/* A missing file is an empty checkpoint; a corrupt one is an error that
 * names it, and the file is left as it is for the operator. */
static int
checkpoint_read (struct nrm_plugin *p, json_t **ret, nrm_error_t *err)
{
  cleanup_free char *text = NULL;
  json_error_t jerr;
  nrm_error_t rerr = NULL;

  if (nrm_read_file (p->checkpoint, MAX_CHECKPOINT, &text, NULL, &rerr) < 0)
    {
      if (rerr->status == ENOENT)
        {
          nrm_error_release (&rerr);
          *ret = empty_checkpoint (p);
          return 0;
        }
      *err = rerr;
      return -1;
    }
  json_t *cp = json_loads (text, 0, &jerr);
  const char *why = NULL;
  if (cp == NULL)
    why = jerr.text;
  else if (json_integer_value (json_object_get (cp, "version")) != CHECKPOINT_VERSION)
    why = "unsupported version";
  else if (!json_is_string (json_object_get (cp, "driver"))
           || strcmp (json_string_value (json_object_get (cp, "driver")), p->driver) != 0)
    why = "it belongs to another driver";
  else if (!json_is_object (json_object_get (cp, "claims")) || !json_is_integer (json_object_get (cp, "generation")))
    why = "claims or generation missing";
  if (why != NULL)
    {
      json_decref (cp);
      return nrm_error_set (err, EINVAL,
                            "checkpoint `%s` is corrupt (%s); it was left untouched: inspect it, move it away and "
                            "restart to begin with no prepared claims",
                            p->checkpoint, why);
    }
  *ret = cp;
  return 0;
}

/* cp as the next generation (*gen), in the file's form. */
static char *
checkpoint_text (json_t *cp, json_int_t *gen)
{
  *gen = json_integer_value (json_object_get (cp, "generation")) + 1;
  json_object_set_new (cp, "generation", json_integer (*gen));
  return json_dumps (cp, JSON_INDENT (1) | JSON_SORT_KEYS);
}

/* The file now holds generation gen, written by this process. */
static void
checkpoint_written (struct nrm_plugin *p, json_int_t gen)
{
  p->cp_generation = gen;
  if (stat (p->checkpoint, &p->cp_stat) < 0)
    memset (&p->cp_stat, 0, sizeof (p->cp_stat));
}

/* Every write is durable: one that replaced the file without a sync could
 * leave it empty after a power cut, and then the plugin could not start,
 * and the completed claims in it would be lost. */
static int
checkpoint_write (struct nrm_plugin *p, json_t *cp, nrm_error_t *err)
{
  json_int_t gen;
  cleanup_free char *text = checkpoint_text (cp, &gen);
  if (nrm_write_atomic (p->checkpoint, text, strlen (text), 0600, err) < 0)
    {
      json_object_set_new (cp, "generation", json_integer (gen - 1));
      return -1;
    }
  checkpoint_written (p, gen);
  return 0;
}

/* --- CDI --------------------------------------------------------------------- */

static char *
cdi_path (struct nrm_plugin *p, const char *uid)
{
  return xasprintf ("%s/%s-%s.json", p->cdi_dir, p->driver, uid);
}

static char *
cdi_id (struct nrm_plugin *p, const char *uid)
{
  return xasprintf ("%s/claim=%s", p->driver, uid);
}

/* A driver's container edits as the checkpoint keeps them (new reference). */
static json_t *
edits_json (const struct nrm_container_edits *e)
{
  json_t *o = json_object ();
  const struct
  {
    const char *key;
    json_t *v;
  } parts[] = { { "env", e->env }, { "deviceNodes", e->device_nodes }, { "mounts", e->mounts }, { "hooks", e->hooks } };
  for (size_t i = 0; i < sizeof (parts) / sizeof (parts[0]); i++)
    if (json_array_size (parts[i].v) > 0)
      json_object_set (o, parts[i].key, parts[i].v);
  if (e->commit_hook)
    json_object_set_new (o, "commitHook", json_true ());
  return o;
}

/* The edits of a checkpoint entry; an entry of an nrm that kept only the
 * environment ("env") was a CPU or memory claim, which the commit hook
 * binds (new reference). */
static json_t *
entry_edits (json_t *entry)
{
  json_t *e = json_object_get (entry, "edits");
  if (json_is_object (e))
    return json_incref (e);
  return json_pack ("{s:O, s:b}", "env", json_object_get (entry, "env") ?: json_array (), "commitHook", 1);
}

/* One spec per claim; 0.5.0 is the lowest version that allows a device name
 * starting with a digit, as claim UIDs may. Specs are not synced: every
 * start rewrites them from the checkpoint. */
static int
cdi_write (struct nrm_plugin *p, const char *uid, json_t *edits, nrm_error_t *err)
{
  if (p->cfg.local)
    return 0;
  cleanup_free char *path = cdi_path (p, uid), *kind = xasprintf ("%s/claim", p->driver);
  cleanup_json json_t *ce = json_object ();
  json_t *env = json_object_get (edits, "env");
  json_object_set_new (ce, "env", json_is_array (env) ? json_incref (env) : json_array ());
  static const char *const arrays[] = { "deviceNodes", "mounts" };
  for (size_t i = 0; i < 2; i++)
    if (json_array_size (json_object_get (edits, arrays[i])) > 0)
      json_object_set (ce, arrays[i], json_object_get (edits, arrays[i]));
  json_t *hooks = json_array ();
  size_t i;
  json_t *h;
  json_array_foreach (json_object_get (edits, "hooks"), i, h) { json_array_append (hooks, h); }
  /* The commit hook binds the container to its CPUs and memory before the
   * workload starts: only for the drivers that ask for it. */
  if (p->cfg.cdi_hook && json_is_true (json_object_get (edits, "commitHook")))
    json_array_append (hooks, p->cfg.cdi_hook);
  if (json_array_size (hooks) > 0)
    json_object_set_new (ce, "hooks", hooks);
  else
    json_decref (hooks);
  cleanup_json json_t *spec = json_pack ("{s:s, s:s, s:[{s:s, s:O}]}", "cdiVersion", "0.5.0", "kind", kind, "devices",
                                         "name", uid, "containerEdits", ce);
  cleanup_free char *text = json_dumps (spec, JSON_INDENT (2));
  /* Rebuilt from the checkpoint at every start (recover), before
   * the sockets exist: its own syncs would protect nothing. */
  return nrm_write_unsynced (path, text, strlen (text), 0644, err);
}

static void
cdi_remove (struct nrm_plugin *p, const char *uid)
{
  if (p->cfg.local)
    return;
  cleanup_free char *path = cdi_path (p, uid);
  if (unlink (path) < 0 && errno != ENOENT)
    LOG (p, NRM_LOG_WARNING, "cannot remove CDI spec %s: %s", path, strerror (errno));
}

/* --- locking and state ------------------------------------------------------- */

/* Whether two stats are of the same version of a file: a rename makes a
 * new inode, a rewrite in place a new size or time. */
static bool
same_file (const struct stat *a, const struct stat *b)
{
  return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size
         && a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* The devices of the checkpoint's completed claims, by UID (new
 * reference): what known_answer() answers from. */
static json_t *
completed_answers (json_t *cp)
{
  json_t *answers = json_object (), *c;
  const char *uid;
  json_object_foreach (json_object_get (cp, "claims"), uid, c)
  {
    if (nrm_checkpoint_completed (c))
      json_object_set (answers, uid, json_object_get (c, "devices"));
  }
  return answers;
}

/* Takes answers; they are of the checkpoint version in cp_stat. */
static void
publish_answers (struct nrm_plugin *p, json_t *answers)
{
  pthread_mutex_lock (&p->answers_lock);
  json_decref (p->answers);
  p->answers = answers;
  p->answers_stat = p->cp_stat;
  pthread_mutex_unlock (&p->answers_lock);
}

/* Takes the in-process mutex and the cross-process file lock (a
 * rolling-update twin shares the state directory), and brings the driver's
 * picture up to date with the checkpoint on disk. A batch goes on top of
 * the batches still writing (batch_commit): the file lock is held since
 * the first of them, so nobody else wrote. Anyone else waits until all of
 * them are on disk, and so does everyone after a failed write, which the
 * picture is then read back from the file to undo. */
static int
lock_state_as (struct nrm_plugin *p, bool batch, nrm_error_t *err)
{
  json_t *cp = NULL;
  pthread_mutex_lock (&p->lock);
  while (p->inflight > 0 && (!batch || p->poisoned))
    pthread_cond_wait (&p->turn, &p->lock);
  if (p->inflight > 0)
    return 0;
  if (p->poisoned)
    {
      p->poisoned = false;
      p->cp_generation = -1;
      memset (&p->cp_stat, 0, sizeof (p->cp_stat));
    }
  while (flock (p->serialize_fd, LOCK_EX) < 0)
    if (errno != EINTR)
      {
        int e = errno;
        pthread_mutex_unlock (&p->lock);
        return nrm_error_errno (err, e, "cannot lock `%s`", p->serialize_lock);
      }
  /* Unchanged since we last read or wrote it (a rename makes a new inode):
   * the picture in memory is current. */
  struct stat st;
  bool exists = stat (p->checkpoint, &st) == 0;
  if (p->cp != NULL && exists && same_file (&st, &p->cp_stat))
    return 0;
  if (checkpoint_read (p, &cp, err) < 0)
    goto fail;
  /* The version stat saw, not one after the read: a write in between then
   * shows as a change at the next look, and the file is read again. */
  if (exists)
    p->cp_stat = st;
  else
    memset (&p->cp_stat, 0, sizeof (p->cp_stat));
  if (json_integer_value (json_object_get (cp, "generation")) != p->cp_generation || p->cp == NULL)
    {
      /* Someone else wrote it: rebuild from the file. */
      const char *uid;
      json_t *c;
      p->ops->reset (p->self);
      json_object_foreach (json_object_get (cp, "claims"), uid, c)
      {
        if (nrm_checkpoint_completed (c) && p->ops->restore (p->self, uid, json_object_get (c, "state"), err) < 0)
          {
            nrm_error_wrap (err, "checkpoint `%s`: claim %s", p->checkpoint, uid);
            goto fail;
          }
      }
      p->cp_generation = json_integer_value (json_object_get (cp, "generation"));
    }
  json_decref (p->cp);
  p->cp = cp;
  /* What a batch may now build on is what known_answer() answers from. */
  publish_answers (p, completed_answers (p->cp));
  return 0;
fail:
  json_decref (cp);
  flock (p->serialize_fd, LOCK_UN);
  pthread_mutex_unlock (&p->lock);
  return -1;
}

static int
lock_state (struct nrm_plugin *p, nrm_error_t *err)
{
  return lock_state_as (p, false, err);
}

static void
unlock_state (struct nrm_plugin *p)
{
  /* The answers of the completed claims, for prepares that find their
   * claim prepared without waiting for the lock (known_answer). */
  if (p->cp && (p->answers == NULL || !same_file (&p->answers_stat, &p->cp_stat)))
    publish_answers (p, completed_answers (p->cp));
  flock (p->serialize_fd, LOCK_UN);
  pthread_mutex_unlock (&p->lock);
}

/* The recorded answer of a completed claim, from the copy made of the
 * checkpoint as last read or written, while the file is still that one or
 * batches of ours are in flight (they hold the file lock: the file changes
 * only by them, and the copy is of the newest of them on disk): 1 prepared
 * (*ret a new reference), 0 not prepared, -1 unknown (the file changed:
 * another process wrote it), when only the lock can say. */
static int
known_answer (struct nrm_plugin *p, const char *uid, json_t **ret)
{
  struct stat st;
  int r = -1;
  if (stat (p->checkpoint, &st) < 0)
    memset (&st, 0, sizeof (st));
  pthread_mutex_lock (&p->answers_lock);
  if (p->answers && (same_file (&st, &p->answers_stat) || __atomic_load_n (&p->inflight, __ATOMIC_ACQUIRE) > 0))
    {
      *ret = json_incref (json_object_get (p->answers, uid));
      r = *ret != NULL;
    }
  pthread_mutex_unlock (&p->answers_lock);
  return r;
}

static bool
same_str (json_t *v, const char *s)
{
  return json_is_string (v) && strcmp (json_string_value (v), s) == 0;
}

/* --- device metadata (KEP-5304) ---------------------------------------------------- */

static char *
base_request (const char *request)
{
  const char *slash = strchr (request, '/');
  return slash ? xstrndup (request, (size_t) (slash - request)) : xstrdup (request);
}

/* What the metadata files of a claim hold: one entry per base request,
 * {request (as allocated), podClaimName?, devices: [{driver, pool, name,
 * attributes?}]}, with the attributes the driver gave (new reference). */
static json_t *
metadata_entries (struct nrm_plugin *p, const struct nrm_claim_view *v, json_t *attrs)
{
  json_t *out = json_array ();
  const char *pcn = nrm_metadata_pod_claim_name (v->claim);
  for (size_t i = 0; i < v->n_results; i++)
    {
      const struct nrm_alloc_result *r = &v->results[i];
      cleanup_free char *base = base_request (r->request);
      json_t *entry = NULL, *e;
      size_t k;
      json_array_foreach (out, k, e)
      {
        cleanup_free char *b = base_request (json_string_value (json_object_get (e, "request")));
        if (strcmp (b, base) == 0)
          entry = e;
      }
      if (entry == NULL)
        {
          entry = json_pack ("{s:s, s:[]}", "request", r->request, "devices");
          if (pcn)
            json_object_set_new (entry, "podClaimName", json_string (pcn));
          json_array_append_new (out, entry);
        }
      json_t *dev = json_pack ("{s:s, s:s, s:s}", "driver", p->driver, "pool", r->pool, "name", r->device);
      json_t *a = json_object_get (attrs, r->device);
      if (json_object_size (a) > 0)
        json_object_set (dev, "attributes", a);
      json_array_append_new (json_object_get (entry, "devices"), dev);
    }
  return out;
}

/* Writes a claim's metadata files and specs and adds each one's CDI id to
 * the first device of its request in devs (the kubelet's reply). As
 * upstream, a failure is logged and the claim is prepared without it. */
static void
metadata_write (struct nrm_plugin *p, const char *ns, const char *name, const char *uid, json_t *entries, json_t *devs)
{
  size_t i, k;
  json_t *e, *d;
  json_array_foreach (entries, i, e)
  {
    cleanup_free char *id = NULL;
    const char *request = json_string_value (json_object_get (e, "request"));
    nrm_error_t err = NULL;
    if (nrm_metadata_write (p->plugin_dir, p->cdi_dir, p->driver, ns, name, uid,
                            json_string_value (json_object_get (e, "podClaimName")), request,
                            json_object_get (e, "devices"), &id, &err)
        < 0)
      {
        LOG (p, NRM_LOG_WARNING, "%s: claim %s/%s: device metadata: %s", p->driver, ns, name, nrm_error_msg (err));
        nrm_error_release (&err);
        continue;
      }
    cleanup_free char *base = base_request (request);
    json_array_foreach (devs, k, d)
    {
      json_t *names = json_object_get (d, "requestNames");
      if (strcmp (json_string_value (json_array_get (names, 0)) ?: "", base) == 0)
        {
          json_t *ids = json_object_get (d, "cdiDeviceIDs");
          size_t x;
          json_t *have;
          bool dup = false;
          json_array_foreach (ids, x, have) { dup |= strcmp (json_string_value (have) ?: "", id) == 0; }
          if (!dup)
            json_array_append_new (ids, json_string (id));
          break;
        }
    }
  }
}

/* A completed entry says whether metadata was written ("metadata"): one
 * without it costs no scan of the CDI directory. An entry of an
 * interrupted prepare may have left files either way (all = true). */
static void
metadata_remove_of (struct nrm_plugin *p, json_t *entry, const char *uid, bool all)
{
  const char *ns = json_string_value (json_object_get (entry, "namespace"));
  const char *name = json_string_value (json_object_get (entry, "name"));
  nrm_error_t err = NULL;
  if (p->cfg.local || ns == NULL || name == NULL || (!all && json_object_get (entry, "metadata") == NULL))
    return;
  if (nrm_metadata_remove (p->plugin_dir, p->cdi_dir, p->driver, ns, name, uid, &err) < 0)
    {
      LOG (p, NRM_LOG_WARNING, "%s: claim %s: removing device metadata: %s", p->driver, uid, nrm_error_msg (err));
      nrm_error_release (&err);
    }
}

static void
metadata_remove (struct nrm_plugin *p, json_t *entry, const char *uid)
{
  metadata_remove_of (p, entry, uid, true);
}

/* Device metadata of claims the checkpoint no longer has (a crash between
 * unprepare's checkpoint write and the removal): their metadata specs
 * <driver>_metadata_<uid>_<request>.json and their folders <ns>_<name>
 * (claim UIDs, namespaces and names have no '_'). */
static void
remove_orphan_metadata (struct nrm_plugin *p)
{
  json_t *claims = json_object_get (p->cp, "claims");
  if (p->cfg.local)
    return;
  cleanup_free char *prefix = xasprintf ("%s_metadata_", p->driver);
  cleanup_free char *dir = xasprintf ("%s/dra-device-metadata", p->plugin_dir);
  size_t plen = strlen (prefix);
  DIR *d = opendir (p->cdi_dir);
  struct dirent *de;
  while (d && (de = readdir (d)) != NULL)
    {
      const char *rest = de->d_name + plen;
      if (strncmp (de->d_name, prefix, plen) != 0 || strchr (rest, '_') == NULL)
        continue;
      cleanup_free char *uid = xstrndup (rest, strcspn (rest, "_"));
      if (json_object_get (claims, uid) == NULL && unlinkat (dirfd (d), de->d_name, 0) == 0)
        LOG (p, NRM_LOG_INFO, "removed the metadata spec %s of unknown claim %s", de->d_name, uid);
    }
  if (d)
    closedir (d);
  d = opendir (dir);
  while (d && (de = readdir (d)) != NULL)
    {
      const char *sep = strchr (de->d_name, '_');
      if (de->d_name[0] == '.' || sep == NULL)
        continue;
      cleanup_free char *ns = xstrndup (de->d_name, (size_t) (sep - de->d_name));
      bool known = false;
      const char *uid;
      json_t *c;
      json_object_foreach (claims, uid, c)
      {
        known |= same_str (json_object_get (c, "namespace"), ns) && same_str (json_object_get (c, "name"), sep + 1);
      }
      nrm_error_t err = NULL;
      /* No UID matches "-": only the folder goes here. */
      if (!known && nrm_metadata_remove (p->plugin_dir, p->cdi_dir, p->driver, ns, sep + 1, "-", &err) == 0)
        LOG (p, NRM_LOG_INFO, "removed the device metadata of unknown claim %s/%s", ns, sep + 1);
      nrm_error_release (&err);
    }
  if (d)
    closedir (d);
}

/* Removes this driver's CDI specs that belong to no prepared claim. */
static void
remove_orphan_specs (struct nrm_plugin *p)
{
  DIR *d = opendir (p->cdi_dir);
  struct dirent *de;
  size_t plen = strlen (p->driver);
  if (d == NULL)
    return;
  while ((de = readdir (d)) != NULL)
    {
      size_t n = strlen (de->d_name);
      if (n <= plen + 6 || strncmp (de->d_name, p->driver, plen) != 0 || de->d_name[plen] != '-'
          || strcmp (de->d_name + n - 5, ".json") != 0)
        continue;
      cleanup_free char *uid = xstrndup (de->d_name + plen + 1, n - plen - 6);
      if (json_object_get (json_object_get (p->cp, "claims"), uid) == NULL)
        {
          LOG (p, NRM_LOG_INFO, "removing CDI spec of unknown claim %s", uid);
          cdi_remove (p, uid);
        }
    }
  closedir (d);
  remove_orphan_metadata (p);
  /* What interrupted writes left: checkpoint, specs, metadata, records. */
  const char *dirs[] = { p->state_dir, p->cdi_dir, p->plugin_dir };
  for (size_t i = 0; i < sizeof (dirs) / sizeof (dirs[0]); i++)
    {
      unsigned removed = 0;
      nrm_error_t err = NULL;
      if (nrm_remove_stale_temps (dirs[i], 3, &removed, &err) < 0)
        {
          LOG (p, NRM_LOG_WARNING, "%s", nrm_error_msg (err));
          nrm_error_release (&err);
        }
      if (removed)
        LOG (p, NRM_LOG_INFO, "removed %u temporary files of interrupted writes in %s", removed, dirs[i]);
    }
}

/* Claims left half-prepared by a crash are rolled back: the driver never
 * recorded state for them, so only their CDI spec may be left over. */
static int
recover (struct nrm_plugin *p, nrm_error_t *err)
{
  const char *uid;
  json_t *c;
  void *tmp;
  size_t rolled = 0;

  if (lock_state (p, err) < 0)
    return -1;
  json_object_foreach_safe (json_object_get (p->cp, "claims"), tmp, uid, c)
  {
    if (!nrm_checkpoint_completed (c))
      {
        LOG (p, NRM_LOG_WARNING, "claim %s was interrupted during prepare; rolling it back", uid);
        cdi_remove (p, uid);
        metadata_remove (p, c, uid);
        json_object_del (json_object_get (p->cp, "claims"), uid);
        rolled++;
      }
    else
      {
        cleanup_json json_t *edits = entry_edits (c);
        if (cdi_write (p, uid, edits, err) < 0)
          {
            unlock_state (p);
            return -1;
          }
        /* The metadata specs live beside the claim's spec (a tmpfs); a
         * claim prepared with metadata keeps it, whatever the flag is now:
         * its recorded answer names the spec. */
        if (!p->cfg.local && json_array_size (json_object_get (c, "metadata")) > 0)
          metadata_write (p, json_string_value (json_object_get (c, "namespace")) ?: "",
                          json_string_value (json_object_get (c, "name")) ?: "", uid, json_object_get (c, "metadata"),
                          json_object_get (c, "devices"));
      }
  }
  remove_orphan_specs (p);
  int r = rolled ? checkpoint_write (p, p->cp, err) : 0;
  unlock_state (p);
  return r;
}

/* --- prepare ----------------------------------------------------------------- */

static char *
strip_subrequest (const char *request)
{
  const char *slash = strchr (request, '/');
  return slash ? xstrndup (request, (size_t) (slash - request)) : xstrdup (request);
}

/* The devices of a prepared claim as the kubelet wants them. */
static json_t *
response_devices (struct nrm_plugin *p, const char *uid, const struct nrm_alloc_result *r, size_t n)
{
  cleanup_free char *id = cdi_id (p, uid);
  json_t *devs = json_array ();
  for (size_t i = 0; i < n; i++)
    {
      cleanup_free char *req = strip_subrequest (r[i].request);
      json_t *d = json_pack ("{s:[s], s:s, s:s, s:[s]}", "requestNames", req, "pool", r[i].pool, "device", r[i].device,
                             "cdiDeviceIDs", id);
      if (r[i].share_id)
        json_object_set_new (d, "shareID", json_string (r[i].share_id));
      json_array_append_new (devs, d);
    }
  return devs;
}

/* The devices of a claim prepared earlier (new reference), or NULL. An
 * entry left in PrepareStarted can only come from an instance that died
 * mid-prepare (prepare holds the lock throughout): it is rolled back here. */
static json_t *
prepared_devices (struct nrm_plugin *p, const char *uid, nrm_error_t *err)
{
  json_t *devs = NULL;
  if (lock_state (p, err) < 0)
    return NULL;
  json_t *claims = json_object_get (p->cp, "claims");
  json_t *entry = json_object_get (claims, uid);
  if (entry != NULL && nrm_checkpoint_completed (entry))
    devs = json_incref (json_object_get (entry, "devices"));
  else if (entry != NULL)
    {
      LOG (p, NRM_LOG_WARNING, "claim %s was left half-prepared by another instance; rolling it back", uid);
      cdi_remove (p, uid);
      json_object_del (claims, uid);
      if (checkpoint_write (p, p->cp, err) < 0)
        {
          unlock_state (p);
          return NULL;
        }
    }
  unlock_state (p);
  return devs;
}

/* A Kubernetes UID as nrm accepts it: it becomes part of file names. */
static bool
is_uid (const ProtobufCBinaryData *b)
{
  if (b->len == 0 || b->len > MAX_UID)
    return false;
  for (size_t i = 0; i < b->len; i++)
    if (!((b->data[i] >= 'a' && b->data[i] <= 'z') || (b->data[i] >= '0' && b->data[i] <= '9') || b->data[i] == '-'))
      return false;
  return true;
}

/* One prepare or unprepare waiting for the batch that does it. */
struct op
{
  bool unprepare;
  const char *ns, *name, *uid;
  json_t *claim;           /* prepare: the claim as read */
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
  struct op *next;
};

static void
op_fail (struct op *o, const char *msg)
{
  nrm_error_set (&o->err, EIO, "%s", msg);
  o->stage = OP_DONE;
}

/* The driver's part of one prepare in a batch, under the state lock; the
 * batch's checkpoint write records it. */
static void
op_prepare (struct nrm_plugin *p, struct op *o)
{
  json_t *claims = json_object_get (p->cp, "claims");
  if (p->ops->prepare (p->self, &o->a.view, &o->prep, &o->err) < 0)
    {
      json_object_del (claims, o->uid);
      o->stage = OP_DONE;
      return;
    }
  o->edits = edits_json (&o->prep.edits);
  if (cdi_write (p, o->uid, o->edits, &o->err) < 0)
    {
      p->ops->unprepare (p->self, o->uid, o->prep.state);
      json_object_del (claims, o->uid);
      o->stage = OP_DONE;
      return;
    }
  json_t *entry = json_object_get (claims, o->uid);
  if (!p->cfg.local && p->cfg.device_metadata)
    {
      cleanup_json json_t *meta = metadata_entries (p, &o->a.view, o->prep.metadata);
      metadata_write (p, o->ns, o->name, o->uid, meta, o->devs);
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

/* One batch of submit(): its ops, its place in the pipeline (0: none,
 * its ops failed before they took anything), and what it writes. */
struct batch
{
  struct op *ops;
  uint64_t seq;
  json_int_t gen;
  char *text;      /* the checkpoint to write, or NULL: nothing changed */
  json_t *answers; /* completed_answers() of that checkpoint */
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
  if (lock_state_as (p, true, &err) < 0)
    {
      for (struct op *o = b->ops; o; o = o->next)
        op_fail (o, nrm_error_msg (err));
      nrm_error_release (&err);
      return;
    }
  json_t *claims = json_object_get (p->cp, "claims");
  for (struct op *o = b->ops; o; o = o->next)
    {
      json_t *entry = json_object_get (claims, o->uid);
      /* A later op of the same claim in this batch waits for the next. */
      bool twin = false;
      for (struct op *q = b->ops; q != o && !twin; q = q->next)
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
  for (struct op *o = b->ops; o; o = o->next)
    if (!o->unprepare && o->stage == OP_STARTED)
      op_prepare (p, o);
  if (changed)
    {
      b->text = checkpoint_text (p->cp, &b->gen);
      b->answers = completed_answers (p->cp);
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
 * in lock_state_as) and the picture is read back from the file before the
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
   * failed: known_answer() answers from what it holds. */
  if ((wrote || w.renamed) && b->text)
    {
      checkpoint_written (p, b->gen);
      publish_answers (p, TAKE_PTR (b->answers));
      /* Which version answered what: a crash test's failure reads it. */
      LOG (p, NRM_LOG_DEBUG, "%s: checkpoint generation %lld on disk (batch %llu)", p->driver, (long long) b->gen,
           (unsigned long long) b->seq);
    }
  if (!wrote)
    {
      if (!poisoned)
        LOG (p, NRM_LOG_ERROR, "%s: %s", p->driver, nrm_error_msg (err));
      p->poisoned = true;
    }
  const char *why = poisoned ? "an earlier checkpoint write failed" : nrm_error_msg (err);
  for (struct op *o = b->ops; o; o = o->next)
    {
      /* The files follow the checkpoint file: written, or renamed where
       * only the directory's sync failed, the unprepared claims' files go
       * (unless a batch since prepared the claim again); not written, the
       * prepared claims' files go. */
      if ((wrote || w.renamed) && o->unprepare && o->stage == OP_STARTED && json_object_get (claims, o->uid) == NULL)
        {
          cdi_remove (p, o->uid);
          metadata_remove_of (p, o->saved, o->uid, false);
        }
      if (!wrote && !w.renamed && !o->unprepare && o->stage == OP_PREPARED)
        {
          cdi_remove (p, o->uid);
          metadata_remove_of (p, json_object_get (claims, o->uid), o->uid, false);
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

/* Queues an op and waits until a batch has done it: a waiter whose op is
 * queued while no batch is taking its part leads the batch of everything
 * queued; who arrives meanwhile goes into the next batch, which starts
 * while this one writes. */
static void
submit (struct nrm_plugin *p, struct op *o)
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
      for (struct op *x = p->queue; x; x = x->next)
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
      struct op *again = NULL, **tail = &again;
      for (struct op *x = b.ops, *next; x; x = next)
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

/* Prepares one claim; returns its devices (new reference) or an error. */
static json_t *
prepare_claim (struct nrm_plugin *p, const char *ns, const char *name, const char *uid, nrm_error_t *err)
{
  ProtobufCBinaryData ub = { strlen (uid), (uint8_t *) uid };
  if (!nrm_is_dns_label (ns) || !nrm_is_dns_subdomain (name, 253) || !is_uid (&ub))
    {
      cleanup_free char *qn = nrm_quote (ns, strlen (ns), QUOTE_MAX), *qm = nrm_quote (name, strlen (name), QUOTE_MAX),
                        *qu = nrm_quote (uid, strlen (uid), QUOTE_MAX);
      nrm_error_set (err, EINVAL, "invalid claim reference `%s`/`%s` (uid `%s`)", qn, qm, qu);
      return NULL;
    }
  /* Prepared already: the same answer, even if the claim is gone from its
   * source by now. Most often known without the lock, which a batch may
   * hold for a disk sync. */
  json_t *done = NULL;
  int known = known_answer (p, uid, &done);
  if (known == 1)
    return done;
  if (known < 0)
    {
      done = prepared_devices (p, uid, err);
      if (done != NULL || (err && *err))
        return done;
    }
  struct op o = { .ns = ns, .name = name, .uid = uid };
  /* The claim is read outside the lock, as the kubelet's own helper does. */
  if (p->cfg.claims.get (p->cfg.claims.self, ns, name, &o.claim, err) < 0)
    {
      /* A batch may have completed it meanwhile: the lock says. */
      nrm_error_t again = NULL;
      if (known == 0 && (done = prepared_devices (p, uid, &again)) != NULL)
        {
          nrm_error_release (err);
          return done;
        }
      nrm_error_release (&again);
      return NULL;
    }
  if (nrm_claim_allocation (p->driver, p->node_name, o.claim, uid, &o.a, err) < 0)
    {
      nrm_allocation_done (&o.a);
      json_decref (o.claim);
      return NULL;
    }
  submit (p, &o);
  nrm_prepared_done (&o.prep);
  nrm_allocation_done (&o.a);
  json_decref (o.claim);
  json_decref (o.edits);
  if (o.err)
    {
      json_decref (o.devs);
      *err = o.err;
      return NULL;
    }
  if (p->cfg.on_change)
    p->cfg.on_change (p->cfg.on_change_ctx);
  return o.devs;
}

static int
unprepare_claim (struct nrm_plugin *p, const char *uid, nrm_error_t *err)
{
  struct op o = { .unprepare = true, .uid = uid };
  submit (p, &o);
  bool removed = o.saved != NULL;
  json_decref (o.saved);
  if (o.err)
    {
      *err = o.err;
      return -1;
    }
  if (removed && p->cfg.on_change)
    p->cfg.on_change (p->cfg.on_change_ctx);
  return 0;
}

/* --- gRPC handlers ------------------------------------------------------------ */

static grpc_status_code
bad_request (char **details, const char *what)
{
  *details = xstrdup (what);
  return GRPC_STATUS_INVALID_ARGUMENT;
}

static grpc_status_code
pack_reply (const ProtobufCMessage *m, uint8_t **resp, size_t *len)
{
  *len = protobuf_c_message_get_packed_size (m);
  *resp = xmalloc (*len);
  protobuf_c_message_pack (m, *resp);
  return GRPC_STATUS_OK;
}

/* A claim reference from the wire, checked: the UID as a C string, and the
 * namespace and name, or the reason they cannot be used. */
struct claim_ref
{
  char *ns, *name, *uid;
  char *bad; /* why this claim is refused, or NULL */
};

/* A namespace or name as a C string when it is one, NULL otherwise: no
 * NUL inside (a C string would end there), a DNS label or subdomain (which
 * are ASCII, so bytes that are not UTF-8 fail too). */
static char *
ref_string (const ProtobufCBinaryData *b, bool label)
{
  const char *s = (const char *) b->data;
  if (b->len == 0 || b->len > 253 || memchr (s, '\0', b->len))
    return NULL;
  cleanup_free char *c = xstrndup (s, b->len);
  if (label ? !nrm_is_dns_label (c) : !nrm_is_dns_subdomain (c, 253))
    return NULL;
  return TAKE_PTR (c);
}

static void
refs_free (struct claim_ref *refs, size_t n)
{
  for (size_t i = 0; refs && i < n; i++)
    {
      free (refs[i].ns);
      free (refs[i].name);
      free (refs[i].uid);
      free (refs[i].bad);
    }
  free (refs);
}

/* Checks every claim reference of a request before anything is done. A
 * UID that is not one refuses the whole request: the reply is keyed by
 * UID, so there is no entry to answer it under. A bad namespace or name
 * refuses only its claim. */
static int
check_claims (Claim **claims, size_t n, struct claim_ref **ret, char **details)
{
  if (n > MAX_CLAIMS_PER_CALL)
    {
      *details = xasprintf ("too many claims in one request (%zu; at most %d)", n, MAX_CLAIMS_PER_CALL);
      return -1;
    }
  struct claim_ref *refs = xcalloc (n + 1, sizeof (*refs));
  for (size_t i = 0; i < n; i++)
    {
      Claim *c = claims[i];
      if (c == NULL || c->uid.len == 0)
        {
          *details = xasprintf ("claim %zu of the request has no uid", i);
          refs_free (refs, n);
          return -1;
        }
      if (!is_uid (&c->uid))
        {
          cleanup_free char *q = nrm_quote ((const char *) c->uid.data, c->uid.len, QUOTE_MAX);
          *details = xasprintf ("claim %zu of the request: uid `%s` (%zu bytes) is not a Kubernetes UID (at most %d "
                                "lowercase letters, digits and '-')",
                                i, q, c->uid.len, MAX_UID);
          refs_free (refs, n);
          return -1;
        }
      refs[i].uid = xstrndup ((const char *) c->uid.data, c->uid.len);
      refs[i].ns = ref_string (&c->namespace_, true);
      refs[i].name = ref_string (&c->name, false);
      if (refs[i].ns == NULL || refs[i].name == NULL)
        {
          cleanup_free char *qn = nrm_quote ((const char *) c->namespace_.data, c->namespace_.len, QUOTE_MAX);
          cleanup_free char *qm = nrm_quote ((const char *) c->name.data, c->name.len, QUOTE_MAX);
          refs[i].bad = xasprintf ("invalid claim reference `%s`/`%s` (%zu and %zu bytes): the %s is not a valid "
                                   "Kubernetes %s",
                                   qn, qm, c->namespace_.len, c->name.len, refs[i].ns ? "name" : "namespace",
                                   refs[i].ns ? "object name" : "namespace name");
        }
    }
  *ret = refs;
  return 0;
}

/* Whether refs[i]'s UID came earlier in the request: the reply has one
 * entry per UID. */
static bool
repeated (const struct claim_ref *refs, size_t i)
{
  for (size_t j = 0; j < i; j++)
    if (strcmp (refs[j].uid, refs[i].uid) == 0)
      return true;
  return false;
}

/* Serves v1 and v1beta1: their messages differ only in Device.share_id. */
static grpc_status_code
prepare_common (struct nrm_plugin *p, const uint8_t *req, size_t len, uint8_t **resp, size_t *resp_len, char **details,
                bool beta)
{
  PrepareRequest *in = k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__unpack (NULL, len, req);
  if (in == NULL)
    return bad_request (details, "NodePrepareResourcesRequest cannot be decoded");
  struct claim_ref *refs = NULL;
  if (check_claims (in->claims, in->n_claims, &refs, details) < 0)
    {
      k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__free_unpacked (in, NULL);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }

  size_t n = in->n_claims;
  PrepareResponse out = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_RESPONSE__INIT;
  PrepareEntry *entries = xcalloc (n + 1, sizeof (*entries));
  PrepareEntry **eptrs = xcalloc (n + 1, sizeof (*eptrs));
  PrepareClaimResponse *cr = xcalloc (n + 1, sizeof (*cr));
  json_t **keep = xcalloc (n + 1, sizeof (json_t *));
  char **errors = xcalloc (n + 1, sizeof (char *));
  size_t n_out = 0;

  for (size_t i = 0; i < n; i++)
    {
      const struct claim_ref *c = &refs[i];
      if (repeated (refs, i))
        continue; /* one entry per UID */
      nrm_error_t err = NULL;
      PrepareEntry *e = &entries[n_out];
      PrepareClaimResponse *r = &cr[n_out];
      k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__claims_entry__init (e);
      k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resource_response__init (r);
      e->key = c->uid;
      e->value = r;
      eptrs[n_out] = e;
      struct timespec t0;
      clock_gettime (CLOCK_MONOTONIC, &t0);
      json_t *devs = NULL;
      if (c->bad)
        nrm_error_set (&err, EINVAL, "%s", c->bad);
      else
        devs = prepare_claim (p, c->ns, c->name, c->uid, &err);
      record (p, &p->metrics.prepare, &t0, err);
      if (devs == NULL)
        {
          cleanup_free char *msg
              = c->bad ? xasprintf ("%s: claim %s: %s", p->driver, c->uid, nrm_error_msg (err))
                       : xasprintf ("%s: claim %s/%s: %s", p->driver, c->ns, c->name, nrm_error_msg (err));
          errors[n_out] = nrm_text_bound (msg, MAX_REPLY_ERROR);
          r->error = errors[n_out];
          LOG (p, NRM_LOG_WARNING, "prepare: %s", r->error);
          nrm_error_release (&err);
        }
      else
        {
          keep[n_out] = devs;
          r->n_devices = json_array_size (devs);
          r->devices = xcalloc (r->n_devices + 1, sizeof (Device *));
          size_t k;
          json_t *d;
          json_array_foreach (devs, k, d)
          {
            Device *dv = xcalloc (1, sizeof (*dv));
            k8s__io__kubelet__pkg__apis__dra__v1__device__init (dv);
            json_t *rn = json_object_get (d, "requestNames"), *ids = json_object_get (d, "cdiDeviceIDs");
            dv->n_request_names = json_array_size (rn);
            dv->request_names = xcalloc (dv->n_request_names + 1, sizeof (char *));
            for (size_t x = 0; x < dv->n_request_names; x++)
              dv->request_names[x] = (char *) json_string_value (json_array_get (rn, x));
            dv->n_cdi_device_ids = json_array_size (ids);
            dv->cdi_device_ids = xcalloc (dv->n_cdi_device_ids + 1, sizeof (char *));
            for (size_t x = 0; x < dv->n_cdi_device_ids; x++)
              dv->cdi_device_ids[x] = (char *) json_string_value (json_array_get (ids, x));
            dv->pool_name = (char *) json_string_value (json_object_get (d, "pool"));
            dv->device_name = (char *) json_string_value (json_object_get (d, "device"));
            if (!beta && json_object_get (d, "shareID"))
              dv->share_id = (char *) json_string_value (json_object_get (d, "shareID"));
            r->devices[k] = dv;
          }
        }
      n_out++;
    }
  out.n_claims = n_out;
  out.claims = eptrs;
  grpc_status_code code = pack_reply (&out.base, resp, resp_len);

  for (size_t i = 0; i < n_out; i++)
    {
      for (size_t k = 0; k < cr[i].n_devices; k++)
        {
          free (cr[i].devices[k]->request_names);
          free (cr[i].devices[k]->cdi_device_ids);
          free (cr[i].devices[k]);
        }
      free (cr[i].devices);
      free (errors[i]);
      json_decref (keep[i]);
    }
  free (entries);
  free (eptrs);
  free (cr);
  free (keep);
  free (errors);
  refs_free (refs, n);
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__free_unpacked (in, NULL);
  return code;
}

static grpc_status_code
h_prepare (void *ctx, const uint8_t *req, size_t len, uint8_t **resp, size_t *resp_len, char **details)
{
  return prepare_common (ctx, req, len, resp, resp_len, details, false);
}

static grpc_status_code
h_prepare_beta (void *ctx, const uint8_t *req, size_t len, uint8_t **resp, size_t *resp_len, char **details)
{
  return prepare_common (ctx, req, len, resp, resp_len, details, true);
}

static grpc_status_code
h_unprepare (void *ctx, const uint8_t *req, size_t len, uint8_t **resp, size_t *resp_len, char **details)
{
  struct nrm_plugin *p = ctx;
  UnprepareRequest *in
      = k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__unpack (NULL, len, req);
  if (in == NULL)
    return bad_request (details, "NodeUnprepareResourcesRequest cannot be decoded");
  struct claim_ref *refs = NULL;
  if (check_claims (in->claims, in->n_claims, &refs, details) < 0)
    {
      k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__free_unpacked (in, NULL);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }
  size_t n = in->n_claims, n_out = 0;
  UnprepareResponse out = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_RESPONSE__INIT;
  UnprepareEntry *entries = xcalloc (n + 1, sizeof (*entries));
  UnprepareEntry **eptrs = xcalloc (n + 1, sizeof (*eptrs));
  UnprepareClaimResponse *cr = xcalloc (n + 1, sizeof (*cr));
  char **errors = xcalloc (n + 1, sizeof (char *));
  for (size_t i = 0; i < n; i++)
    {
      if (repeated (refs, i))
        continue;
      nrm_error_t err = NULL;
      k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__claims_entry__init (&entries[n_out]);
      k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resource_response__init (&cr[n_out]);
      entries[n_out].key = refs[i].uid;
      entries[n_out].value = &cr[n_out];
      eptrs[n_out] = &entries[n_out];
      struct timespec t0;
      clock_gettime (CLOCK_MONOTONIC, &t0);
      /* The namespace and name are not needed to unprepare, but a reference
       * that prepare would refuse is refused here too. */
      int ur = refs[i].bad ? nrm_error_set (&err, EINVAL, "%s", refs[i].bad) : unprepare_claim (p, refs[i].uid, &err);
      record (p, &p->metrics.unprepare, &t0, err);
      if (ur < 0)
        {
          cleanup_free char *msg = xasprintf ("%s: claim %s: %s", p->driver, refs[i].uid, nrm_error_msg (err));
          errors[n_out] = nrm_text_bound (msg, MAX_REPLY_ERROR);
          cr[n_out].error = errors[n_out];
          LOG (p, NRM_LOG_WARNING, "unprepare: %s", cr[n_out].error);
          nrm_error_release (&err);
        }
      n_out++;
    }
  out.n_claims = n_out;
  out.claims = eptrs;
  grpc_status_code code = pack_reply (&out.base, resp, resp_len);
  for (size_t i = 0; i < n_out; i++)
    free (errors[i]);
  free (errors);
  free (entries);
  free (eptrs);
  free (cr);
  refs_free (refs, n);
  k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__free_unpacked (in, NULL);
  /* A released claim's memory goes back to the system, not only to malloc
   * (docs/plugin.md, memory). */
  malloc_trim (0);
  return code;
}

static grpc_status_code
h_get_info (void *ctx, const uint8_t *req, size_t len, uint8_t **resp, size_t *resp_len, char **details)
{
  struct nrm_plugin *p = ctx;
  static char *versions[] = { "v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth" };
  Pluginregistration__InfoRequest *in = pluginregistration__info_request__unpack (NULL, len, req);
  if (in == NULL)
    return bad_request (details, "InfoRequest cannot be decoded");
  pluginregistration__info_request__free_unpacked (in, NULL);
  Pluginregistration__PluginInfo info = PLUGINREGISTRATION__PLUGIN_INFO__INIT;
  info.type = "DRAPlugin";
  info.name = p->driver;
  info.endpoint = p->dra_sock;
  info.n_supported_versions = 3;
  info.supported_versions = versions;
  return pack_reply (&info.base, resp, resp_len);
}

static grpc_status_code
h_notify (void *ctx, const uint8_t *req, size_t len, uint8_t **resp, size_t *resp_len, char **details)
{
  struct nrm_plugin *p = ctx;
  Pluginregistration__RegistrationStatus *in = pluginregistration__registration_status__unpack (NULL, len, req);
  if (in == NULL)
    return bad_request (details, "RegistrationStatus cannot be decoded");
  __atomic_store_n (&p->registered, in->plugin_registered ? 1 : 0, __ATOMIC_SEQ_CST);
  if (in->plugin_registered)
    LOG (p, NRM_LOG_INFO, "%s: registered with the kubelet", p->driver);
  else
    LOG (p, NRM_LOG_ERROR, "%s: the kubelet refused the registration: %s", p->driver,
         in->error && *in->error ? in->error : "(no reason given)");
  pluginregistration__registration_status__free_unpacked (in, NULL);
  Pluginregistration__RegistrationStatusResponse out = PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;
  return pack_reply (&out.base, resp, resp_len);
}

/* --- health ------------------------------------------------------------------- */

/* Every device's health in one report: the driver's, or all healthy for a
 * driver without a health check. */
static int
health_report (struct nrm_plugin *p, struct nrm_health_report *r, nrm_error_t *err)
{
  if (p->ops->health)
    return p->ops->health (p->self, r, err);
  size_t n = json_array_size (p->devices);
  r->devices = xcalloc (n + 1, sizeof (*r->devices));
  r->n = 0;
  for (size_t i = 0; i < n; i++)
    {
      r->devices[r->n].device = xstrdup (json_string_value (json_array_get (p->devices, i)));
      r->devices[r->n++].health = NRM_HEALTH_HEALTHY;
    }
  return 0;
}

static uint8_t *
health_message (struct nrm_plugin *p, size_t *len)
{
  struct nrm_health_report rep = { 0 };
  nrm_error_t err = NULL;
  if (health_report (p, &rep, &err) < 0)
    {
      /* Nothing known: the kubelet turns the devices Unknown at its timeout. */
      LOG (p, NRM_LOG_WARNING, "%s: health: %s", p->driver, nrm_error_msg (err));
      nrm_error_release (&err);
    }
  size_t n = rep.n;
  V1alpha1__NodeWatchResourcesResponse out = V1ALPHA1__NODE_WATCH_RESOURCES_RESPONSE__INIT;
  V1alpha1__DeviceHealth *dh = xcalloc (n + 1, sizeof (*dh));
  V1alpha1__DeviceHealth **ptrs = xcalloc (n + 1, sizeof (*ptrs));
  V1alpha1__DeviceIdentifier *ids = xcalloc (n + 1, sizeof (*ids));
  uint8_t *buf = NULL;
  time_t now = time (NULL);
  for (size_t i = 0; i < n; i++)
    {
      struct nrm_device_health *h = &rep.devices[i];
      v1alpha1__device_health__init (&dh[i]);
      v1alpha1__device_identifier__init (&ids[i]);
      ids[i].pool_name = p->node_name;
      ids[i].device_name = h->device ? h->device : (char *) "";
      dh[i].device = &ids[i];
      dh[i].health = h->health == NRM_HEALTH_HEALTHY     ? V1ALPHA1__HEALTH_STATUS__HEALTHY
                     : h->health == NRM_HEALTH_UNHEALTHY ? V1ALPHA1__HEALTH_STATUS__UNHEALTHY
                                                         : V1ALPHA1__HEALTH_STATUS__UNKNOWN;
      dh[i].last_updated_time = now;
      dh[i].health_check_timeout_seconds = HEALTH_TIMEOUT_S;
      /* The kubelet keeps at most 1024 characters. */
      if (h->message && strlen (h->message) > 1024)
        strcpy (h->message + 1021, "...");
      dh[i].message = h->message ? h->message : (char *) "";
      ptrs[i] = &dh[i];
    }
  out.n_devices = n;
  out.devices = ptrs;
  *len = protobuf_c_message_get_packed_size (&out.base);
  buf = xmalloc (*len);
  protobuf_c_message_pack (&out.base, buf);
  nrm_health_report_done (&rep);
  free (dh);
  free (ptrs);
  free (ids);
  return buf;
}

static void
health_broadcast (struct nrm_plugin *p)
{
  size_t len = 0;
  cleanup_free uint8_t *msg = health_message (p, &len);
  pthread_mutex_lock (&p->hlock);
  for (size_t i = 0; i < p->n_streams;)
    {
      if (nrm_grpc_stream_send (p->streams[i], msg, len) < 0)
        {
          nrm_grpc_stream_unref (p->streams[i]);
          p->streams[i] = p->streams[--p->n_streams];
          continue;
        }
      i++;
    }
  pthread_mutex_unlock (&p->hlock);
}

static void *
health_thread (void *arg)
{
  struct nrm_plugin *p = arg;
  pthread_mutex_lock (&p->hlock);
  while (!p->hstop)
    {
      struct timespec until;
      clock_gettime (CLOCK_REALTIME, &until);
      until.tv_sec += p->cfg.health_interval_s > 0 ? p->cfg.health_interval_s : 10;
      while (!p->hstop && !p->hchanged)
        if (pthread_cond_timedwait (&p->hcond, &p->hlock, &until) == ETIMEDOUT)
          break;
      if (p->hstop)
        break;
      p->hchanged = false;
      pthread_mutex_unlock (&p->hlock);
      health_broadcast (p);
      pthread_mutex_lock (&p->hlock);
    }
  pthread_mutex_unlock (&p->hlock);
  return NULL;
}

/* A driver's health events (its health_fd): each wakes the streams and
 * the caller's on_health, at once instead of at the next period. */
static void *
event_thread (void *arg)
{
  struct nrm_plugin *p = arg;
  int fd = p->ops->health_fd (p->self);
  for (;;)
    {
      struct pollfd fds[2] = { { p->estop, POLLIN, 0 }, { fd, POLLIN, 0 } };
      if (poll (fds, 2, -1) < 0)
        {
          if (errno == EINTR)
            continue;
          break;
        }
      if (fds[0].revents)
        break;
      if (fds[1].revents & (POLLERR | POLLNVAL))
        break;
      if (p->ops->health_event)
        p->ops->health_event (p->self);
      nrm_plugin_health_changed (p);
      if (p->cfg.on_health)
        p->cfg.on_health (p->cfg.on_health_ctx);
    }
  return NULL;
}

static grpc_status_code
h_watch (void *ctx, const uint8_t *req, size_t len, struct nrm_grpc_stream *st, char **details)
{
  struct nrm_plugin *p = ctx;
  V1alpha1__NodeWatchResourcesRequest *in = v1alpha1__node_watch_resources_request__unpack (NULL, len, req);
  if (in == NULL)
    return bad_request (details, "NodeWatchResourcesRequest cannot be decoded");
  v1alpha1__node_watch_resources_request__free_unpacked (in, NULL);
  pthread_mutex_lock (&p->hlock);
  p->streams = xrealloc (p->streams, (p->n_streams + 1) * sizeof (*p->streams));
  p->streams[p->n_streams++] = nrm_grpc_stream_ref (st);
  pthread_mutex_unlock (&p->hlock);
  /* The complete list right away, then on change and periodically. */
  size_t mlen = 0;
  cleanup_free uint8_t *msg = health_message (p, &mlen);
  nrm_grpc_stream_send (st, msg, mlen);
  return GRPC_STATUS_OK;
}

void
nrm_plugin_health_changed (struct nrm_plugin *p)
{
  pthread_mutex_lock (&p->hlock);
  p->hchanged = true;
  pthread_cond_broadcast (&p->hcond);
  pthread_mutex_unlock (&p->hlock);
}

/* --- lifecycle ------------------------------------------------------------------- */

static int
lock_file (const char *path, int how, int *ret, nrm_error_t *err)
{
  for (;;)
    {
      int fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (fd < 0)
        return nrm_error_errno (err, errno, "cannot open lock file `%s`", path);
      if (how && flock (fd, how) < 0)
        {
          int e = errno;
          close (fd);
          if (e == EWOULDBLOCK)
            return nrm_error_set (err, EBUSY, "another nrm instance holds `%s`", path);
          return nrm_error_errno (err, e, "cannot lock `%s`", path);
        }
      /* An instance lock that a newer instance removed meanwhile (its
       * instance was gone: remove_dead_twins) locks nothing: again. */
      struct stat a, b;
      if ((how & LOCK_EX)
          && (fstat (fd, &a) < 0 || stat (path, &b) < 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev))
        {
          close (fd);
          continue;
        }
      *ret = fd;
      return 0;
    }
}

/* Sockets that instances with other UIDs left when they died (killed, or
 * the node went down): a pod UID never comes back, so nothing else would
 * remove them, and the kubelet would try to register them again and again.
 * An instance lock that can be taken proves that its instance is gone; it
 * is removed last, while held. */
static void
remove_dead_twins (struct nrm_plugin *p, const char *reg_dir)
{
  DIR *d = opendir (p->state_dir);
  if (d == NULL)
    return;
  static const char suffix[] = ".instance.lock";
  const char *own = strrchr (p->instance_lock, '/') + 1;
  size_t pl = strlen (p->driver), sl = sizeof (suffix) - 1;
  struct dirent *e;
  while ((e = readdir (d)) != NULL)
    {
      size_t n = strlen (e->d_name);
      if (n <= pl + 1 + sl || strncmp (e->d_name, p->driver, pl) != 0 || e->d_name[pl] != '-'
          || strcmp (e->d_name + n - sl, suffix) != 0 || strcmp (e->d_name, own) == 0)
        continue;
      cleanup_free char *uid = xstrndup (e->d_name + pl + 1, n - pl - 1 - sl);
      if (!nrm_is_dns_label (uid))
        continue;
      cleanup_free char *path = xasprintf ("%s/%s", p->state_dir, e->d_name);
      cleanup_close int fd = open (path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0 || flock (fd, LOCK_EX | LOCK_NB) < 0)
        continue;
      cleanup_free char *dra = xasprintf ("%s/dra-%s.sock", p->plugin_dir, uid);
      cleanup_free char *reg = xasprintf ("%s/%s-%s-reg.sock", reg_dir, p->driver, uid);
      bool left = unlink (dra) == 0;
      left |= unlink (reg) == 0;
      unlink (path);
      if (left)
        LOG (p, NRM_LOG_INFO, "%s: removed the sockets of instance %s, which is gone", p->driver, uid);
    }
  closedir (d);
}

static void
plugin_free (struct nrm_plugin *p)
{
  free (p->driver);
  free (p->node_name);
  free (p->cdi_dir);
  free (p->state_dir);
  free (p->plugin_dir);
  free (p->dra_sock);
  free (p->reg_sock);
  free (p->checkpoint);
  free (p->serialize_lock);
  free (p->instance_lock);
  json_decref (p->cp);
  json_decref (p->devices);
  free (p->streams);
  if (p->instance_fd >= 0)
    close (p->instance_fd);
  if (p->serialize_fd >= 0)
    close (p->serialize_fd);
  if (p->estop >= 0)
    close (p->estop);
  pthread_mutex_destroy (&p->lock);
  pthread_mutex_destroy (&p->queue_lock);
  pthread_mutex_destroy (&p->answers_lock);
  json_decref (p->answers);
  pthread_cond_destroy (&p->queue_cond);
  pthread_cond_destroy (&p->turn);
  pthread_mutex_destroy (&p->hlock);
  pthread_mutex_destroy (&p->mlock);
  pthread_cond_destroy (&p->hcond);
  free (p);
}

int
nrm_plugin_start (const struct nrm_plugin_config *cfg, const struct nrm_driver_ops *ops, void *self,
                  struct nrm_plugin **ret, nrm_error_t *err)
{
  struct nrm_plugin *p = xcalloc (1, sizeof (*p));
  cleanup_free char *plugin_dir = NULL, *reg_dir = NULL;
  const char *uid = cfg->instance_uid;

  p->cfg = *cfg;
  p->ops = ops;
  p->self = self;
  p->instance_fd = p->serialize_fd = p->estop = -1;
  p->registered = -1;
  pthread_mutex_init (&p->lock, NULL);
  pthread_mutex_init (&p->queue_lock, NULL);
  pthread_mutex_init (&p->answers_lock, NULL);
  pthread_cond_init (&p->queue_cond, NULL);
  pthread_cond_init (&p->turn, NULL);
  p->queue_tail = &p->queue;
  pthread_mutex_init (&p->hlock, NULL);
  pthread_mutex_init (&p->mlock, NULL);
  pthread_cond_init (&p->hcond, NULL);
  if (!nrm_is_dns_subdomain (cfg->driver, 63))
    {
      plugin_free (p);
      return nrm_error_set (err, EINVAL, "driver name `%s` is not a DNS subdomain", cfg->driver ? cfg->driver : "");
    }
  if (uid && !nrm_is_dns_label (uid))
    {
      plugin_free (p);
      return nrm_error_set (err, EINVAL, "instance UID `%s` is not a DNS label", uid);
    }
  struct nrm_pool pool = { 0 };
  if (ops->pool (self, NULL, &pool, err) < 0)
    {
      plugin_free (p);
      return nrm_error_wrap (err, "%s", cfg->driver);
    }
  p->devices = json_array ();
  size_t di;
  json_t *dev;
  json_array_foreach (pool.devices, di, dev) { json_array_append (p->devices, json_object_get (dev, "name")); }
  nrm_pool_done (&pool);
  p->driver = xstrdup (cfg->driver);
  p->node_name = xstrdup (cfg->node_name);
  p->cdi_dir = xstrdup (cfg->cdi_dir);
  p->state_dir = xstrdup (cfg->state_dir);
  plugin_dir = xasprintf ("%s/plugins/%s", cfg->kubelet_dir, cfg->driver);
  p->plugin_dir = xstrdup (plugin_dir);
  reg_dir = xasprintf ("%s/plugins_registry", cfg->kubelet_dir);
  p->dra_sock = xasprintf ("%s/dra%s%s.sock", plugin_dir, uid ? "-" : "", uid ? uid : "");
  p->reg_sock = xasprintf ("%s/%s%s%s-reg.sock", reg_dir, cfg->driver, uid ? "-" : "", uid ? uid : "");
  p->checkpoint = xasprintf ("%s/%s.checkpoint.json", cfg->state_dir, cfg->driver);
  p->serialize_lock = xasprintf ("%s/%s.serialize.lock", cfg->state_dir, cfg->driver);
  p->instance_lock = xasprintf ("%s/%s%s%s.instance.lock", cfg->state_dir, cfg->driver, uid ? "-" : "", uid ? uid : "");
  if (cfg->local)
    {
      /* Only the shared state: another instance may be serving. */
      if (nrm_mkdir_p (cfg->state_dir, 0700, err) < 0 || lock_file (p->serialize_lock, 0, &p->serialize_fd, err) < 0)
        {
          plugin_free (p);
          return -1;
        }
      *ret = p;
      return 0;
    }
  if (nrm_mkdir_p (plugin_dir, 0750, err) < 0 || nrm_mkdir_p (reg_dir, 0750, err) < 0
      || nrm_mkdir_p (cfg->state_dir, 0700, err) < 0 || nrm_mkdir_p (cfg->cdi_dir, 0755, err) < 0)
    {
      plugin_free (p);
      return -1;
    }
  /* One instance per driver (per pod UID in rolling-update mode): binding
   * would silently steal a running instance's socket. */
  if (lock_file (p->instance_lock, LOCK_EX | LOCK_NB, &p->instance_fd, err) < 0)
    {
      plugin_free (p);
      return nrm_error_wrap (err, "%s: refusing to start a second instance%s", cfg->driver,
                             uid ? "" : " (set an instance UID for rolling updates)");
    }
  if (lock_file (p->serialize_lock, 0, &p->serialize_fd, err) < 0 || recover (p, err) < 0)
    {
      plugin_free (p);
      return -1;
    }

  const struct nrm_grpc_method dra[] = {
    { "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources", h_prepare, NULL, p },
    { "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources", h_unprepare, NULL, p },
    { "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources", h_prepare_beta, NULL, p },
    { "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources", h_unprepare, NULL, p },
    { "/v1alpha1.DRAResourceHealth/NodeWatchResources", NULL, h_watch, p },
  };
  const struct nrm_grpc_method reg[] = {
    { "/pluginregistration.Registration/GetInfo", h_get_info, NULL, p },
    { "/pluginregistration.Registration/NotifyRegistrationStatus", h_notify, NULL, p },
  };
  /* Our own stale sockets (a crash) are replaced; the instance lock proves
   * nobody else serves them. */
  unlink (p->dra_sock);
  unlink (p->reg_sock);
  remove_dead_twins (p, reg_dir);
  if (nrm_grpc_server_start (p->dra_sock, dra, sizeof (dra) / sizeof (dra[0]), cfg->threads, &p->dra, err) < 0)
    {
      plugin_free (p);
      return -1;
    }
  p->hrunning = pthread_create (&p->hthread, NULL, health_thread, p) == 0;
  if (ops->health_fd && ops->health_fd (self) >= 0 && (p->estop = eventfd (0, EFD_CLOEXEC)) >= 0)
    p->erunning = pthread_create (&p->ethread, NULL, event_thread, p) == 0;
  if (nrm_grpc_server_start (p->reg_sock, reg, sizeof (reg) / sizeof (reg[0]), 1, &p->reg, err) < 0)
    {
      p->reg = NULL;
      nrm_plugin_stop (p);
      return -1;
    }
  *ret = p;
  return 0;
}

json_t *
nrm_plugin_prepare (struct nrm_plugin *p, const char *ns, const char *name, const char *uid, nrm_error_t *err)
{
  return prepare_claim (p, ns, name, uid, err);
}

int
nrm_plugin_unprepare (struct nrm_plugin *p, const char *uid, nrm_error_t *err)
{
  return unprepare_claim (p, uid, err);
}

json_t *
nrm_plugin_claims (struct nrm_plugin *p, nrm_error_t *err)
{
  if (lock_state (p, err) < 0)
    return NULL;
  json_t *c = json_deep_copy (json_object_get (p->cp, "claims"));
  unlock_state (p);
  return c;
}

void
nrm_plugin_stop (struct nrm_plugin *p)
{
  if (p == NULL)
    return;
  /* Deregister first: the kubelet stops calling once the socket is gone. */
  if (p->reg)
    {
      unlink (p->reg_sock);
      nrm_grpc_server_stop (p->reg);
    }
  if (p->erunning)
    {
      uint64_t one = 1;
      if (write (p->estop, &one, sizeof (one)) == sizeof (one))
        pthread_join (p->ethread, NULL);
      else
        pthread_detach (p->ethread);
      p->erunning = false;
    }
  if (p->hrunning)
    {
      pthread_mutex_lock (&p->hlock);
      p->hstop = true;
      pthread_cond_broadcast (&p->hcond);
      pthread_mutex_unlock (&p->hlock);
      pthread_join (p->hthread, NULL);
    }
  pthread_mutex_lock (&p->hlock);
  for (size_t i = 0; i < p->n_streams; i++)
    nrm_grpc_stream_unref (p->streams[i]);
  p->n_streams = 0;
  pthread_mutex_unlock (&p->hlock);
  if (p->dra)
    {
      nrm_grpc_server_stop (p->dra);
      unlink (p->dra_sock);
    }
  plugin_free (p);
}

int
nrm_plugin_registered (struct nrm_plugin *p)
{
  return __atomic_load_n (&p->registered, __ATOMIC_SEQ_CST);
}

const char *
nrm_plugin_dra_socket (struct nrm_plugin *p)
{
  return p->dra_sock;
}

const char *
nrm_plugin_instance_lock (struct nrm_plugin *p)
{
  return p->instance_lock;
}

const char *
nrm_plugin_registration_socket (struct nrm_plugin *p)
{
  return p->reg_sock;
}
