/* SPDX-License-Identifier: Apache-2.0 */
/* The event recorder: a queue of Event writes and the thread that sends
 * them (driver/k8s/events.h). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/k8s/events.h"
#include "driver/names.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"

#define INSTANCE_MAX 128 /* reportingInstance, as the API server allows */

struct job
{
  json_t *ev;
  int tries;
  int64_t not_before;
  struct job *next;
};

struct nrm_events
{
  struct nrm_events_config cfg;
  char *instance;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  struct nrm_event_cache *cache;
  struct job *head, **tail;
  size_t queued;
  unsigned long full; /* writes dropped for a full queue */
  bool stop, running;
  pthread_t thread;
};

#define LOG(e, lvl, ...) NRM_LOG_TO ((e)->cfg.log, (e)->cfg.log_ctx, lvl, __VA_ARGS__)

static int64_t
now_us (void)
{
  struct timespec t;
  clock_gettime (CLOCK_REALTIME, &t);
  return (int64_t) t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

struct nrm_event_ref
nrm_event_node_ref (const char *node)
{
  return (struct nrm_event_ref){ .api_version = "v1", .kind = "Node", .name = node, .uid = node };
}

/* Under the lock. Takes ev. */
static void
enqueue (struct nrm_events *e, json_t *ev, int tries, int64_t not_before)
{
  if (e->queued >= NRM_EVENTS_QUEUE)
    {
      if (e->full++ % 100 == 0)
        LOG (e, NRM_LOG_WARNING, "%lu Event writes dropped so far: %d wait already", e->full, NRM_EVENTS_QUEUE);
      json_decref (ev);
      return;
    }
  struct job *j = xcalloc (1, sizeof (*j));
  j->ev = ev;
  j->tries = tries;
  j->not_before = not_before;
  *e->tail = j;
  e->tail = &j->next;
  e->queued++;
  pthread_cond_signal (&e->cond);
}

/* The first job due at now, taken off the queue, or NULL. Under the lock. */
static struct job *
take_due (struct nrm_events *e, int64_t now)
{
  for (struct job **p = &e->head; *p; p = &(*p)->next)
    if ((*p)->not_before <= now)
      {
        struct job *j = *p;
        *p = j->next;
        if (e->tail == &j->next)
          e->tail = p;
        e->queued--;
        j->next = NULL;
        return j;
      }
  return NULL;
}

static const char *
meta (json_t *ev, const char *k)
{
  return json_string_value (json_object_get (json_object_get (ev, "metadata"), k));
}

/* 0 written (or refused for good: logged), 1 to try again. */
static int
write_event (struct nrm_events *e, json_t *ev)
{
  const char *ns = meta (ev, "namespace"), *name = meta (ev, "name");
  json_t *series = json_object_get (ev, "series");
  cleanup_json json_t *answer = NULL;
  nrm_error_t err = NULL;
  int code = -1;
  if (series)
    {
      /* As client-go: the series by PATCH, the whole Event again when the
       * server no longer has it. */
      cleanup_free char *path = xasprintf ("/apis/events.k8s.io/v1/namespaces/%s/events/%s", ns, name);
      cleanup_json json_t *patch = json_pack ("{s:O}", "series", series);
      code = nrm_kube_patch (e->cfg.kube, path, "application/merge-patch+json", patch, &answer, &err);
      if (code == 200)
        return 0;
      json_decref (TAKE_PTR (answer));
      if (code == 404)
        nrm_error_release (&err);
    }
  if (!series || code == 404)
    {
      cleanup_free char *path = xasprintf ("/apis/events.k8s.io/v1/namespaces/%s/events", ns);
      code = nrm_kube_call (e->cfg.kube, "POST", path, ev, &answer, &err);
      if (code == 201 || code == 409) /* 409: written before, its answer lost */
        return 0;
    }
  const char *what = json_string_value (json_object_get (ev, "reason"));
  if (code < 0 || code == 429 || code >= 500)
    {
      LOG (e, NRM_LOG_DEBUG, "%s/%s (%s): %s", ns, name, what,
           code < 0 ? nrm_error_msg (err) : nrm_kube_status_message (answer, code));
      nrm_error_release (&err);
      return 1;
    }
  LOG (e, NRM_LOG_WARNING, "Event %s on %s %s dropped: HTTP %d: %s", what,
       json_string_value (json_object_get (json_object_get (ev, "regarding"), "kind")),
       json_string_value (json_object_get (json_object_get (ev, "regarding"), "name")), code,
       nrm_kube_status_message (answer, code));
  nrm_error_release (&err);
  return 0;
}

static void *
events_thread (void *arg)
{
  struct nrm_events *e = arg;
  pthread_mutex_lock (&e->lock);
  while (!e->stop)
    {
      int64_t now = now_us ();
      cleanup_json json_t *due = json_array ();
      nrm_event_cache_tick (e->cache, now, due);
      size_t i;
      json_t *ev;
      json_array_foreach (due, i, ev) { enqueue (e, json_incref (ev), 0, 0); }
      struct job *j = take_due (e, now);
      if (j == NULL)
        {
          /* Series are refreshed every 30 s: a second is fine enough. */
          struct timespec until;
          clock_gettime (CLOCK_REALTIME, &until);
          until.tv_sec += 1;
          pthread_cond_timedwait (&e->cond, &e->lock, &until);
          continue;
        }
      if (j->tries > 0)
        nrm_event_cache_update (e->cache, j->ev, now);
      pthread_mutex_unlock (&e->lock);
      int again = write_event (e, j->ev);
      pthread_mutex_lock (&e->lock);
      if (again && ++j->tries < NRM_EVENTS_TRIES)
        enqueue (e, TAKE_PTR (j->ev), j->tries, now_us () + NRM_EVENTS_RETRY_S * 1000000LL);
      else if (again)
        LOG (e, NRM_LOG_WARNING, "Event %s on %s %s dropped: no answer from the API server after %d tries",
             json_string_value (json_object_get (j->ev, "reason")),
             json_string_value (json_object_get (json_object_get (j->ev, "regarding"), "kind")),
             json_string_value (json_object_get (json_object_get (j->ev, "regarding"), "name")), NRM_EVENTS_TRIES);
      json_decref (j->ev);
      free (j);
    }
  pthread_mutex_unlock (&e->lock);
  return NULL;
}

int
nrm_events_start (const struct nrm_events_config *cfg, struct nrm_events **ret, nrm_error_t *err)
{
  struct nrm_events *e = xcalloc (1, sizeof (*e));
  e->cfg = *cfg;
  e->instance = xstrndup (cfg->instance ? cfg->instance : "", INSTANCE_MAX);
  e->cache = nrm_event_cache_new ();
  e->tail = &e->head;
  pthread_mutex_init (&e->lock, NULL);
  pthread_cond_init (&e->cond, NULL);
  int rc = pthread_create (&e->thread, NULL, events_thread, e);
  if (rc != 0)
    {
      e->running = false;
      nrm_events_stop (e);
      return nrm_error_errno (err, rc, "cannot start the thread");
    }
  e->running = true;
  *ret = e;
  return 0;
}

void
nrm_events_record (struct nrm_events *e, const char *controller, const struct nrm_event_ref *regarding, bool warning,
                   const char *reason, const char *action, const char *fmt, ...)
{
  if (e == NULL)
    return;
  /* The Event's name and namespace become part of a URL path. */
  if ((regarding->ns && !nrm_is_dns_label (regarding->ns)) || regarding->name == NULL
      || !nrm_is_dns_subdomain (regarding->name, 253))
    return;
  va_list ap;
  va_start (ap, fmt);
  cleanup_free char *note = xvasprintf (fmt, ap);
  va_end (ap);
  struct nrm_event_spec s = { .controller = controller,
                              .instance = e->instance,
                              .regarding = *regarding,
                              .warning = warning,
                              .reason = reason,
                              .action = action,
                              .note = note };
  int64_t now = now_us ();
  cleanup_json json_t *ev = nrm_event_new (&s, now);
  json_t *write = NULL;
  pthread_mutex_lock (&e->lock);
  enum nrm_event_verdict v = nrm_event_cache_observe (e->cache, ev, now, &write);
  if (write)
    enqueue (e, write, 0, 0);
  pthread_mutex_unlock (&e->lock);
  if (v == NRM_EVENT_SPAM)
    LOG (e, NRM_LOG_DEBUG, "too many Events on %s %s: %s not written", regarding->kind, regarding->name, reason);
}

void
nrm_events_stop (struct nrm_events *e)
{
  if (e == NULL)
    return;
  if (e->running)
    {
      pthread_mutex_lock (&e->lock);
      e->stop = true;
      pthread_cond_signal (&e->cond);
      pthread_mutex_unlock (&e->lock);
      pthread_join (e->thread, NULL);
    }
  while (e->head)
    {
      struct job *j = e->head;
      e->head = j->next;
      json_decref (j->ev);
      free (j);
    }
  nrm_event_cache_free (e->cache);
  pthread_mutex_destroy (&e->lock);
  pthread_cond_destroy (&e->cond);
  free (e->instance);
  free (e);
}
