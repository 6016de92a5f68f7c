/* SPDX-License-Identifier: Apache-2.0 */
/* List and watch of one API collection, in a thread. */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "driver/k8s/informer.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/clock.h"
#include "nrm/base/xalloc.h"

#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 30000

struct nrm_informer
{
  struct nrm_informer_config cfg;
  char *path, *query, *what;
  char *rv;
  bool need_list, synced, stop;
  double listed_at; /* the last list, or the last replay of the store */
  json_t *store;    /* "namespace/name" -> the object as the watch last had it */
  int wake;
  long backoff_ms;
  unsigned refused; /* watches turned away with 429 in a row */
  pthread_t thread;
};

#define LOG(i, lvl, ...) NRM_LOG_TO ((i)->cfg.log, (i)->cfg.log_ctx, lvl, __VA_ARGS__)

/* Waits ms (0: none) or until stopped; false once stopped. */
static bool
wait_wake (struct nrm_informer *i, long ms)
{
  if (ms > 0)
    {
      struct pollfd pfd = { i->wake, POLLIN, 0 };
      poll (&pfd, 1, (int) ms);
    }
  return !__atomic_load_n (&i->stop, __ATOMIC_SEQ_CST);
}

static void
failed (struct nrm_informer *i, nrm_error_t *err)
{
  /* Calls end with errors when the client is cancelled at stop. */
  if (__atomic_load_n (&i->stop, __ATOMIC_SEQ_CST))
    {
      nrm_error_release (err);
      return;
    }
  LOG (i, NRM_LOG_WARNING, "%s: %s; again in %.1f s", i->what, nrm_error_msg (*err), (double) i->backoff_ms / 1000);
  nrm_error_release (err);
  /* Jitter x0.5-1.5, as the API client's retries. */
  wait_wake (i, i->backoff_ms / 2 + nrm_random_below ((unsigned) i->backoff_ms));
  i->backoff_ms = i->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : i->backoff_ms * 2;
}

static void
set_rv (struct nrm_informer *i, const char *rv)
{
  free (i->rv);
  i->rv = xstrdup (rv);
}

/* The store follows what is handed out, so that a resync replays it
 * instead of listing again (client-go's resync, which sends no request). */
static void
store_update (json_t *store, const char *type, json_t *obj)
{
  json_t *meta = json_object_get (obj, "metadata");
  const char *ns = json_string_value (json_object_get (meta, "namespace"));
  const char *name = json_string_value (json_object_get (meta, "name"));
  if (name == NULL)
    return;
  cleanup_free char *key = xasprintf ("%s/%s", ns ? ns : "", name);
  if (strcmp (type, "DELETED") == 0)
    json_object_del (store, key);
  else
    json_object_set (store, key, obj);
}

static int
list (struct nrm_informer *i, nrm_error_t *err)
{
  cleanup_free char *cont = NULL, *rv = NULL;
  do
    {
      cleanup_free char *path = xasprintf ("%s?limit=500%s%s%s%s", i->path, i->query ? "&" : "",
                                           i->query ? i->query : "", cont ? "&continue=" : "", cont ? cont : "");
      cleanup_json json_t *l = NULL;
      int code = nrm_kube_call (i->cfg.kube, "GET", path, NULL, &l, err);
      if (code < 0)
        return nrm_error_wrap (err, "listing");
      if (code != 200)
        return nrm_error_set (err, EIO, "listing: HTTP %d: %s", code, nrm_kube_status_message (l, code));
      size_t k;
      json_t *o;
      if (cont == NULL)
        json_object_clear (i->store); /* a list from the start replaces it */
      json_array_foreach (json_object_get (l, "items"), k, o)
      {
        store_update (i->store, "SYNC", o);
        i->cfg.event (i->cfg.ctx, "SYNC", o);
      }
      json_t *meta = json_object_get (l, "metadata");
      const char *c = json_string_value (json_object_get (meta, "continue"));
      const char *r = json_string_value (json_object_get (meta, "resourceVersion"));
      free (cont);
      cont = NULL;
      if (c && *c && (cont = nrm_kube_escape (c)) == NULL)
        return nrm_error_set (err, ENOMEM, "listing: libcurl cannot escape the continue token");
      if (rv == NULL && r)
        rv = xstrdup (r);
    }
  while (cont);
  if (rv == NULL)
    return nrm_error_set (err, EPROTO, "listing: the answer has no resourceVersion");
  free (i->rv);
  i->rv = TAKE_PTR (rv);
  return 0;
}

static int
on_event (void *ctx, const char *type, json_t *obj)
{
  struct nrm_informer *i = ctx;
  const char *rv = json_string_value (json_object_get (json_object_get (obj, "metadata"), "resourceVersion"));
  if (strcmp (type, "ERROR") == 0)
    {
      /* 410 Expired: the history is gone; anything else: start over too. */
      long code = (long) json_integer_value (json_object_get (obj, "code"));
      LOG (i, code == 410 ? NRM_LOG_DEBUG : NRM_LOG_WARNING, "%s watch: %s; listing again", i->what,
           nrm_kube_status_message (obj, (int) code));
      i->need_list = true;
      return -1;
    }
  if (rv && *rv)
    set_rv (i, rv);
  if (strcmp (type, "BOOKMARK") != 0)
    {
      store_update (i->store, type, obj);
      i->cfg.event (i->cfg.ctx, type, obj);
    }
  return 0;
}

static void *
thread_main (void *arg)
{
  struct nrm_informer *i = arg;
  struct nrm_kube_watch *w = NULL;
  i->need_list = true;
  i->backoff_ms = BACKOFF_MIN_MS;
  while (wait_wake (i, 0))
    {
      nrm_error_t err = NULL;
      if (i->cfg.resync_s > 0 && !i->need_list && nrm_mono_s () - i->listed_at >= i->cfg.resync_s)
        {
          /* Every object again, from the store: no request. A copy, as
           * the handler may take its time. */
          cleanup_json json_t *all = json_copy (i->store);
          const char *key;
          json_t *o;
          json_object_foreach (all, key, o) { i->cfg.event (i->cfg.ctx, "SYNC", o); }
          i->listed_at = nrm_mono_s ();
        }
      if (i->need_list)
        {
          nrm_kube_watch_close (w);
          w = NULL;
          if (list (i, &err) < 0)
            {
              failed (i, &err);
              continue;
            }
          i->need_list = false;
          i->listed_at = nrm_mono_s ();
          __atomic_store_n (&i->synced, true, __ATOMIC_SEQ_CST);
        }
      if (w == NULL)
        {
          /* The server ends the watch after timeoutSeconds; spread them. */
          cleanup_free char *path
              = xasprintf ("%s?watch=true&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=%u%s%s", i->path,
                           i->rv, 300 + nrm_random_below (NRM_KUBE_WATCH_TIMEOUT_MAX_S - 300 + 1), i->query ? "&" : "",
                           i->query ? i->query : "");
          if (nrm_kube_watch_open (i->cfg.kube, path, on_event, i, &w, &err) < 0)
            {
              failed (i, &err);
              continue;
            }
        }
      long status = 0;
      json_t *body = NULL;
      int r = nrm_kube_watch_poll (w, 1000, i->wake, &status, &body, &err);
      if (r == 1)
        {
          i->backoff_ms = BACKOFF_MIN_MS;
          i->refused = 0;
          continue;
        }
      nrm_kube_watch_close (w);
      w = NULL;
      if (r < 0)
        {
          json_decref (body);
          if (err == NULL) /* stopped by an ERROR event: need_list is set */
            {
              wait_wake (i, nrm_kube_relist_wait_ms ());
              continue;
            }
          i->need_list = true;
          failed (i, &err);
          continue;
        }
      if (status == 410)
        {
          i->need_list = true;
          wait_wake (i, nrm_kube_relist_wait_ms ());
        }
      else if (status == 429)
        {
          /* Turned away, not behind: the same watch again, later. */
          LOG (i, NRM_LOG_DEBUG, "%s watch: %s; watching again from resourceVersion %s", i->what,
               nrm_kube_status_message (body, (int) status), i->rv ? i->rv : "(none)");
          long ms = nrm_kube_retry_after_ms (body, &i->refused);
          json_decref (body);
          wait_wake (i, ms);
          continue;
        }
      else if (status != 200)
        {
          i->need_list = true;
          nrm_error_set (&err, EIO, "watch: HTTP %ld: %s", status, nrm_kube_status_message (body, (int) status));
          json_decref (body);
          failed (i, &err);
          continue;
        }
      json_decref (body);
      /* A watch that ended normally resumes from the last resourceVersion
       * (the server ends every watch after a while, and on its restart). */
      if (status == 200)
        LOG (i, NRM_LOG_DEBUG, "%s watch ended; watching again from resourceVersion %s", i->what,
             i->rv ? i->rv : "(none)");
    }
  nrm_kube_watch_close (w);
  return NULL;
}

static void
informer_free (struct nrm_informer *i)
{
  if (i->wake >= 0)
    close (i->wake);
  free (i->path);
  free (i->query);
  free (i->what);
  free (i->rv);
  json_decref (i->store);
  free (i);
}

int
nrm_informer_start (const struct nrm_informer_config *cfg, struct nrm_informer **ret, nrm_error_t *err)
{
  struct nrm_informer *i = xcalloc (1, sizeof (*i));
  i->cfg = *cfg;
  i->path = xstrdup (cfg->path);
  i->query = cfg->query ? xstrdup (cfg->query) : NULL;
  i->what = xstrdup (cfg->what ? cfg->what : cfg->path);
  i->wake = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  i->store = json_object ();
  if (i->wake < 0)
    {
      int e = errno;
      informer_free (i);
      return nrm_error_errno (err, e, "eventfd");
    }
  if (pthread_create (&i->thread, NULL, thread_main, i) != 0)
    {
      informer_free (i);
      return nrm_error_set (err, EAGAIN, "cannot start a thread");
    }
  *ret = i;
  return 0;
}

bool
nrm_informer_synced (struct nrm_informer *i)
{
  return __atomic_load_n (&i->synced, __ATOMIC_SEQ_CST);
}

void
nrm_informer_stopping (struct nrm_informer *i)
{
  if (i == NULL)
    return;
  uint64_t one = 1;
  __atomic_store_n (&i->stop, true, __ATOMIC_SEQ_CST);
  if (write (i->wake, &one, sizeof (one)) < 0)
    LOG (i, NRM_LOG_DEBUG, "%s: cannot wake the informer", i->what);
}

void
nrm_informer_stop (struct nrm_informer *i)
{
  if (i == NULL)
    return;
  nrm_informer_stopping (i);
  pthread_join (i->thread, NULL);
  informer_free (i);
}
