/* SPDX-License-Identifier: Apache-2.0 */
/* The slice refresher of nrm plugin (nrm/refresh.h). */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "driver/kubelet/checkpoint.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/logging.h"
#include "nrm/refresh.h"

struct nrm_refresher
{
  const struct nrm_config *cfg;
  const struct nrm_drivers *drivers;
  struct nrm_publisher **pubs;
  int wake;
  bool stop, running;
  pthread_t thread;
  void (*after) (void *ctx);
  void *after_ctx;
};

json_t *
nrm_refresh_driver_slices (json_t *list, const char *driver)
{
  json_t *mine = json_array ();
  size_t k;
  json_t *s;
  json_array_foreach (json_object_get (list, "items"), k, s)
  {
    const char *d = json_string_value (json_object_get (json_object_get (s, "spec"), "driver"));
    if (d && strcmp (d, driver) == 0)
      json_array_append (mine, s);
  }
  return mine;
}

/* The prepared claims of every driver, {driver name: {uid: state}}, from
 * the checkpoints (a new reference); a driver whose checkpoint cannot be
 * read has none here. */
static json_t *
held_claims (const char *state_dir, const struct nrm_drivers *d)
{
  json_t *held = json_object ();
  for (size_t i = 0; held && i < d->n; i++)
    {
      nrm_error_t err = NULL;
      cleanup_json json_t *claims = nrm_checkpoint_claims (state_dir, d->slots[i].name, &err);
      nrm_error_release (&err);
      if (claims)
        json_object_set_new (held, d->slots[i].name, nrm_checkpoint_held (claims));
    }
  return held;
}

/* The changes of one driver's taints, logged. */
static void
log_taint_changes (const char *driver, const struct nrm_health_report *rep, json_t *was, json_t *now)
{
  for (size_t k = 0; now && k < rep->n; k++)
    {
      const struct nrm_device_health *h = &rep->devices[k];
      json_t *tn = h->device ? json_object_get (now, h->device) : NULL;
      if (tn && json_object_get (was, h->device) == NULL)
        nrm_log (NULL, NRM_LOG_WARNING, "%s: device %s: %s; tainted %s:%s", driver, h->device,
                 h->message ? h->message : "unhealthy",
                 json_string_value (json_object_get (json_array_get (tn, 0), "key")),
                 json_string_value (json_object_get (json_array_get (tn, 0), "effect")));
    }
  const char *dev;
  json_t *v;
  json_object_foreach (was, dev, v)
  {
    if (json_object_get (now, dev) == NULL)
      nrm_log (NULL, NRM_LOG_INFO, "%s: device %s is healthy again; taint removed", driver, dev);
  }
}

/* The taints of every driver from its health report, {name: {device:
 * [taint]}}; changes against last are logged. */
static json_t *
health_taints (const struct nrm_drivers *d, json_t *last)
{
  json_t *all = json_object ();
  for (size_t i = 0; all && i < d->n; i++)
    {
      const struct nrm_driver_slot *s = &d->slots[i];
      struct nrm_health_report rep = { 0 };
      nrm_error_t err = NULL;
      json_t *was = json_object_get (last, s->name), *now;
      if (s->ops->health == NULL)
        continue;
      if (s->ops->health (s->self, &rep, &err) < 0)
        {
          /* Unknown health: the taints stay as they were. */
          nrm_log (NULL, NRM_LOG_WARNING, "%s: health: %s", s->name, nrm_error_msg (err));
          nrm_error_release (&err);
          if (was)
            json_object_set (all, s->name, was);
          continue;
        }
      now = nrm_health_taints (s->name, &rep);
      log_taint_changes (s->name, &rep, was, now);
      nrm_health_report_done (&rep);
      if (now)
        json_object_set_new (all, s->name, now);
    }
  return all;
}

struct nrm_refresher *
nrm_refresher_new (void)
{
  struct nrm_refresher *rf = xcalloc (1, sizeof (*rf));
  rf->wake = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  return rf;
}

void
nrm_refresher_kick (void *arg)
{
  struct nrm_refresher *rf = arg;
  uint64_t one = 1;
  if (rf->wake >= 0 && write (rf->wake, &one, sizeof (one)) < 0)
    nrm_log (NULL, NRM_LOG_DEBUG, "cannot wake the slice refresher: %s", strerror (errno));
}

static void *
refresh_thread (void *arg)
{
  struct nrm_refresher *rf = arg;
  const struct nrm_drivers *d = rf->drivers;
  cleanup_json json_t *last = json_object (), *published = json_object (), *plain = NULL;
  /* What the publishers started with; unknown: the first pass publishes. */
  nrm_error_t e = NULL;
  if (nrm_drivers_slices (d, &rf->cfg->publish, NULL, NULL, &plain, &e) == 0)
    for (size_t i = 0; i < d->n; i++)
      json_object_set_new (published, d->slots[i].name, nrm_refresh_driver_slices (plain, d->slots[i].name));
  nrm_error_release (&e);
  while (!__atomic_load_n (&rf->stop, __ATOMIC_SEQ_CST))
    {
      cleanup_json json_t *taints = health_taints (d, last);
      cleanup_json json_t *held = held_claims (rf->cfg->state_dir, d);
      cleanup_json json_t *list = NULL;
      nrm_error_t err = NULL;
      json_decref (last);
      last = json_incref (taints);
      if (nrm_drivers_slices (d, &rf->cfg->publish, held, taints, &list, &err) == 0)
        for (size_t i = 0; i < d->n && err == NULL; i++)
          {
            const char *name = d->slots[i].name;
            cleanup_json json_t *mine = nrm_refresh_driver_slices (list, name);
            json_t *was = json_object_get (published, name);
            if ((was == NULL || !json_equal (mine, was)) && nrm_publisher_update (rf->pubs[i], mine, &err) == 0)
              json_object_set (published, name, mine);
          }
      if (err)
        {
          nrm_log (NULL, NRM_LOG_ERROR, "updating the slices: %s", nrm_error_msg (err));
          nrm_error_release (&err);
        }
      if (rf->after)
        rf->after (rf->after_ctx);
      struct pollfd pfd = { rf->wake, POLLIN, 0 };
      if (poll (&pfd, 1, NRM_REFRESH_PERIOD_S * 1000) > 0)
        {
          uint64_t x;
          if (read (rf->wake, &x, sizeof (x)) < 0)
            continue;
        }
    }
  return NULL;
}

void
nrm_refresher_after_pass (struct nrm_refresher *rf, void (*fn) (void *ctx), void *ctx)
{
  rf->after = fn;
  rf->after_ctx = ctx;
}

bool
nrm_refresher_start (struct nrm_refresher *rf, const struct nrm_config *c, const struct nrm_drivers *d,
                     struct nrm_publisher **pubs)
{
  rf->cfg = c;
  rf->drivers = d;
  rf->pubs = pubs;
  rf->running = rf->wake >= 0 && pthread_create (&rf->thread, NULL, refresh_thread, rf) == 0;
  return rf->running;
}

void
nrm_refresher_stop (struct nrm_refresher *rf)
{
  if (rf == NULL || !rf->running)
    return;
  __atomic_store_n (&rf->stop, true, __ATOMIC_SEQ_CST);
  nrm_refresher_kick (rf);
  pthread_join (rf->thread, NULL);
  rf->running = false;
}

void
nrm_refresher_free (struct nrm_refresher *rf)
{
  if (rf == NULL)
    return;
  nrm_refresher_stop (rf);
  if (rf->wake >= 0)
    close (rf->wake);
  free (rf);
}
