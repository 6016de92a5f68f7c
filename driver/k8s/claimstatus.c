/* SPDX-License-Identifier: Apache-2.0 */
/* The placement of each prepared claim in its status (claimstatus.h): the
 * entries, the comparison with the server's, the queue and its thread. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/k8s/claimstatus.h"
#include "driver/k8s/devstatus.h"
#include "driver/names.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"

#define MAX_DATA 10240 /* bytes of an entry's data (resource.k8s.io/v1 limit) */
#define BACKOFF_MIN_S 1
#define BACKOFF_MAX_S 60

#define LOG(w, lvl, ...) NRM_LOG_TO ((w)->cfg.log, (w)->cfg.log_ctx, lvl, __VA_ARGS__)

/* --- the entries ----------------------------------------------------------- */

char *
nrm_placement_manager (const char *driver)
{
  return xasprintf ("%s" NRM_PLACEMENT_MANAGER_SUFFIX, driver);
}

json_t *
nrm_placement_entries (const char *driver, const char *node, json_t *entry, json_t *described, json_t *claim,
                       const char *now)
{
  json_t *out = json_array ();
  json_t *placement = json_object_get (described, "placement");
  size_t i;
  json_t *d;
  json_array_foreach (json_object_get (entry, "devices"), i, d)
  {
    const char *pool = json_string_value (json_object_get (d, "pool"));
    const char *device = json_string_value (json_object_get (d, "device"));
    const char *request = json_string_value (json_array_get (json_object_get (d, "requestNames"), 0));
    if (pool == NULL || device == NULL || request == NULL)
      continue;
    json_t *e = json_pack ("{s:s, s:s, s:s}", "driver", driver, "pool", pool, "device", device);
    if (json_is_string (json_object_get (d, "shareID")))
      json_object_set (e, "shareID", json_object_get (d, "shareID"));
    json_t *data = json_object ();
    json_t *p = json_object_get (placement, device);
    if (json_is_object (p))
      json_object_update (data, p);
    json_object_set_new (data, "request", json_string (request));
    cleanup_free char *text = json_dumps (data, JSON_COMPACT);
    /* Never over the API's limit: the request alone then. */
    if (text == NULL || strlen (text) > MAX_DATA)
      {
        json_decref (data);
        data = json_pack ("{s:s}", "request", request);
      }
    json_object_set_new (e, "data", data);
    /* As meta.SetStatusCondition: a condition whose status stays keeps
     * the time it last changed, so that writing it again changes nothing. */
    json_t *old = nrm_devstatus_condition (nrm_devstatus_entry (claim, e), NRM_PLACEMENT_CONDITION);
    const char *since = json_string_value (json_object_get (old, "lastTransitionTime"));
    const char *was = json_string_value (json_object_get (old, "status"));
    cleanup_free char *msg = xasprintf ("prepared on node %s", node);
    json_t *c = json_pack ("{s:s, s:s, s:s, s:s, s:s}", "type", NRM_PLACEMENT_CONDITION, "status", "True", "reason",
                           NRM_PLACEMENT_REASON, "message", msg, "lastTransitionTime",
                           since && was && strcmp (was, "True") == 0 ? since : now);
    json_object_set_new (e, "conditions", json_pack ("[o]", c));
    json_array_append_new (out, e);
  }
  return out;
}

/* The list items (status.devices) manager owns in claim, as {driver,
 * device, pool, shareID?} objects (a new reference). */
static json_t *
owned_items (json_t *claim, const char *manager)
{
  json_t *out = json_array ();
  size_t i;
  json_t *mf;
  json_array_foreach (json_object_get (json_object_get (claim, "metadata"), "managedFields"), i, mf)
  {
    const char *m = json_string_value (json_object_get (mf, "manager"));
    const char *sub = json_string_value (json_object_get (mf, "subresource"));
    if (m == NULL || strcmp (m, manager) != 0 || sub == NULL || strcmp (sub, "status") != 0)
      continue;
    json_t *devs = json_object_get (json_object_get (json_object_get (mf, "fieldsV1"), "f:status"), "f:devices");
    const char *key;
    json_t *v;
    json_object_foreach (devs, key, v)
    {
      /* k:{"device":"numa0","driver":"cpu.nrm.io","pool":"node"} */
      if (strncmp (key, "k:", 2) != 0)
        continue;
      json_t *item = json_loads (key + 2, 0, NULL);
      if (json_is_object (item))
        json_array_append (out, item);
      json_decref (item);
    }
  }
  return out;
}

bool
nrm_placement_current (json_t *claim, const char *manager, json_t *entries)
{
  cleanup_json json_t *owned = owned_items (claim, manager);
  if (json_array_size (owned) != json_array_size (entries))
    return false;
  size_t i, k;
  json_t *e, *o;
  json_array_foreach (entries, i, e)
  {
    bool mine = false;
    json_array_foreach (owned, k, o) { mine |= nrm_devstatus_same_item (o, e); }
    json_t *have = nrm_devstatus_entry (claim, e);
    json_t *want = nrm_devstatus_condition (e, NRM_PLACEMENT_CONDITION),
           *got = nrm_devstatus_condition (have, NRM_PLACEMENT_CONDITION);
    if (!mine || have == NULL || !json_equal (json_object_get (have, "data"), json_object_get (e, "data"))
        || got == NULL || !nrm_devstatus_same (got, want, "status") || !nrm_devstatus_same (got, want, "reason")
        || !nrm_devstatus_same (got, want, "message") || !nrm_devstatus_same (got, want, "lastTransitionTime"))
      return false;
  }
  return true;
}

json_t *
nrm_placement_body (const char *ns, const char *name, const char *uid, json_t *entries)
{
  json_t *body = json_pack ("{s:s, s:s, s:{s:s, s:s, s:s}}", "apiVersion", "resource.k8s.io/v1", "kind",
                            "ResourceClaim", "metadata", "name", name, "namespace", ns, "uid", uid);
  if (json_array_size (entries) > 0)
    json_object_set_new (body, "status", json_pack ("{s:O}", "devices", entries));
  return body;
}

/* --- the queue and its thread ----------------------------------------------- */

/* One claim of one driver whose status is to follow its checkpoint. */
struct item
{
  char *driver, *uid, *ns, *name;
  time_t due;
  int tries;
  struct item *next;
};

struct nrm_claimstatus
{
  struct nrm_claimstatus_config cfg;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  struct item *items;
  bool stop;
  pthread_t thread;
};

static void
item_free (struct item *it)
{
  free (it->driver);
  free (it->uid);
  free (it->ns);
  free (it->name);
  free (it);
}

void
nrm_claimstatus_changed (struct nrm_claimstatus *w, const char *driver, const char *uid, const char *ns,
                         const char *name)
{
  if (w == NULL || driver == NULL || uid == NULL || ns == NULL || name == NULL)
    return;
  pthread_mutex_lock (&w->lock);
  struct item *it = w->items;
  while (it && !(strcmp (it->driver, driver) == 0 && strcmp (it->uid, uid) == 0))
    it = it->next;
  if (it == NULL)
    {
      it = xcalloc (1, sizeof (*it));
      it->driver = xstrdup (driver);
      it->uid = xstrdup (uid);
      it->next = w->items;
      w->items = it;
    }
  free (it->ns);
  free (it->name);
  it->ns = xstrdup (ns);
  it->name = xstrdup (name);
  it->due = 0;
  it->tries = 0;
  pthread_cond_signal (&w->cond);
  pthread_mutex_unlock (&w->lock);
}

static const struct nrm_driver_slot *
slot_of (struct nrm_claimstatus *w, const char *driver)
{
  for (size_t i = 0; i < w->cfg.drivers->n; i++)
    if (strcmp (w->cfg.drivers->slots[i].name, driver) == 0)
      return &w->cfg.drivers->slots[i];
  return NULL;
}

/* Brings one claim's status in line with the checkpoint: 0 done
 * (written, nothing to write, or nothing it can be written to), -1 to be
 * tried again. */
static int
sync_claim (struct nrm_claimstatus *w, const struct item *it, nrm_error_t *err)
{
  const struct nrm_driver_slot *s = slot_of (w, it->driver);
  if (s == NULL)
    return 0;
  cleanup_json json_t *claims = w->cfg.claims (w->cfg.claims_ctx, it->driver);
  if (claims == NULL)
    return nrm_error_set (err, EIO, "the driver's checkpoint cannot be read");
  json_t *entry = json_object_get (claims, it->uid);
  const char *ns = json_string_value (json_object_get (entry, "namespace")) ?: it->ns;
  const char *name = json_string_value (json_object_get (entry, "name")) ?: it->name;
  /* They become part of a URL path: as the API server names objects. */
  if (!nrm_is_dns_label (ns) || !nrm_is_dns_subdomain (name, 253))
    return 0;
  cleanup_free char *path = xasprintf ("/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s", ns, name);
  cleanup_json json_t *claim = NULL, *described = NULL, *entries = NULL, *body = NULL, *answer = NULL;
  int code = nrm_kube_call (w->cfg.kube, "GET", path, NULL, &claim, err);
  if (code < 0)
    return -1;
  if (code == 404)
    return 0; /* deleted: its status with it */
  if (code != 200)
    return nrm_error_set (err, code == 403 ? EACCES : EIO, "reading it: HTTP %d: %s", code,
                          nrm_kube_status_message (claim, code));
  const char *uid = json_string_value (json_object_get (json_object_get (claim, "metadata"), "uid"));
  if (uid == NULL || strcmp (uid, it->uid) != 0)
    return 0; /* replaced by another claim of that name */
  if (entry && s->ops->describe)
    described = s->ops->describe (s->self, it->uid, json_object_get (entry, "state"));
  char now[32];
  nrm_devstatus_now (now, sizeof (now));
  entries = nrm_placement_entries (it->driver, w->cfg.node_name, entry, described, claim, now);
  cleanup_free char *manager = nrm_placement_manager (it->driver);
  if (nrm_placement_current (claim, manager, entries))
    {
      LOG (w, NRM_LOG_DEBUG, "%s: claim %s/%s: its status holds the placement already", it->driver, ns, name);
      return 0;
    }
  body = nrm_placement_body (ns, name, it->uid, entries);
  cleanup_free char *escaped = nrm_kube_escape (manager);
  if (escaped == NULL)
    return nrm_error_set (err, ENOMEM, "libcurl cannot escape the field manager `%s`", manager);
  cleanup_free char *apply = xasprintf ("%s/status?fieldManager=%s&force=true", path, escaped);
  code = nrm_kube_patch (w->cfg.kube, apply, "application/apply-patch+yaml", body, &answer, err);
  if (code < 0)
    return -1;
  if (code == 404 || code == 409)
    return 0; /* deleted, or replaced (the uid): nothing of it to write */
  if (code != 200 && code != 201)
    return nrm_error_set (err, code == 403 ? EACCES : EIO, "writing its status: HTTP %d: %s", code,
                          nrm_kube_status_message (answer, code));
  LOG (w, NRM_LOG_INFO, "%s: claim %s/%s: placement of %zu device%s written to its status", it->driver, ns, name,
       json_array_size (entries), json_array_size (entries) == 1 ? "" : "s");
  return 0;
}

/* Every completed claim of every driver, as after a restart: those whose
 * status is as it should be cost one read, no write. */
static void
enqueue_all (struct nrm_claimstatus *w)
{
  for (size_t i = 0; i < w->cfg.drivers->n; i++)
    {
      const char *driver = w->cfg.drivers->slots[i].name;
      cleanup_json json_t *claims = w->cfg.claims (w->cfg.claims_ctx, driver);
      const char *uid;
      json_t *e;
      json_object_foreach (claims, uid, e)
      {
        nrm_claimstatus_changed (w, driver, uid, json_string_value (json_object_get (e, "namespace")),
                                 json_string_value (json_object_get (e, "name")));
      }
    }
}

static void *
run (void *arg)
{
  struct nrm_claimstatus *w = arg;
  enqueue_all (w);
  pthread_mutex_lock (&w->lock);
  while (!w->stop)
    {
      time_t now = time (NULL), next = 0;
      struct item **pp = &w->items, *it = NULL;
      for (struct item **p = &w->items; *p; p = &(*p)->next)
        {
          if ((*p)->due <= now)
            {
              pp = p;
              it = *p;
              break;
            }
          if (next == 0 || (*p)->due < next)
            next = (*p)->due;
        }
      if (it == NULL)
        {
          if (next == 0)
            pthread_cond_wait (&w->cond, &w->lock);
          else
            {
              struct timespec ts = { .tv_sec = next };
              pthread_cond_timedwait (&w->cond, &w->lock, &ts);
            }
          continue;
        }
      /* Out of the queue while it is written: a change meanwhile queues it
       * again, and it is looked at once more. */
      *pp = it->next;
      pthread_mutex_unlock (&w->lock);
      nrm_error_t err = NULL;
      int r = sync_claim (w, it, &err);
      pthread_mutex_lock (&w->lock);
      if (r < 0 && !w->stop)
        {
          int wait = BACKOFF_MIN_S << (it->tries < 6 ? it->tries : 6);
          wait = wait > BACKOFF_MAX_S ? BACKOFF_MAX_S : wait;
          LOG (w, NRM_LOG_WARNING, "%s: claim %s/%s: placement status: %s; again in %d s", it->driver, it->ns, it->name,
               nrm_error_msg (err), wait);
          bool queued = false;
          for (struct item *q = w->items; q; q = q->next)
            queued |= strcmp (q->driver, it->driver) == 0 && strcmp (q->uid, it->uid) == 0;
          if (!queued)
            {
              it->tries++;
              it->due = time (NULL) + wait;
              it->next = w->items;
              w->items = it;
              it = NULL;
            }
        }
      nrm_error_release (&err);
      if (it)
        item_free (it);
    }
  pthread_mutex_unlock (&w->lock);
  return NULL;
}

int
nrm_claimstatus_start (const struct nrm_claimstatus_config *cfg, struct nrm_claimstatus **ret, nrm_error_t *err)
{
  struct nrm_claimstatus *w = xcalloc (1, sizeof (*w));
  w->cfg = *cfg;
  pthread_mutex_init (&w->lock, NULL);
  pthread_cond_init (&w->cond, NULL); /* CLOCK_REALTIME, as time() */
  int e = pthread_create (&w->thread, NULL, run, w);
  if (e != 0)
    {
      pthread_cond_destroy (&w->cond);
      pthread_mutex_destroy (&w->lock);
      free (w);
      return nrm_error_set (err, e, "cannot start the claim status thread: %s", strerror (e));
    }
  *ret = w;
  return 0;
}

void
nrm_claimstatus_stopping (struct nrm_claimstatus *w)
{
  if (w == NULL)
    return;
  pthread_mutex_lock (&w->lock);
  w->stop = true;
  pthread_cond_signal (&w->cond);
  pthread_mutex_unlock (&w->lock);
}

void
nrm_claimstatus_stop (struct nrm_claimstatus *w)
{
  if (w == NULL)
    return;
  nrm_claimstatus_stopping (w);
  pthread_join (w->thread, NULL);
  while (w->items)
    {
      struct item *it = w->items;
      w->items = it->next;
      item_free (it);
    }
  pthread_cond_destroy (&w->cond);
  pthread_mutex_destroy (&w->lock);
  free (w);
}
