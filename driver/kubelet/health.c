/* SPDX-License-Identifier: Apache-2.0 */
/* The DRA health service (v1alpha1.DRAResourceHealth): NodeWatchResources
 * streams every device's health at once, then on change and periodically;
 * a thread wakes them, and another waits for the driver's health events. */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "driver/kubelet/plugin-internal.h"
#include "nrm/base/cleanup.h"
#include "proto/dra_health_v1alpha1.pb-c.h"

#define HEALTH_TIMEOUT_S 30

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
  else
    nrm_plugin_report_health (p, &rep);
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

grpc_status_code
nrm_plugin_health_watch (void *ctx, const uint8_t *req, size_t len, struct nrm_grpc_stream *st, char **details)
{
  struct nrm_plugin *p = ctx;
  V1alpha1__NodeWatchResourcesRequest *in = v1alpha1__node_watch_resources_request__unpack (NULL, len, req);
  if (in == NULL)
    return nrm_plugin_bad_request (details, "NodeWatchResourcesRequest cannot be decoded");
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

void
nrm_plugin_health_counts (struct nrm_plugin *p, unsigned long long out[3])
{
  struct nrm_health_report rep = { 0 };
  nrm_error_t err = NULL;
  out[NRM_HEALTH_UNKNOWN] = out[NRM_HEALTH_HEALTHY] = out[NRM_HEALTH_UNHEALTHY] = 0;
  if (health_report (p, &rep, &err) < 0)
    {
      nrm_error_release (&err);
      out[NRM_HEALTH_UNKNOWN] = json_array_size (p->devices);
      return;
    }
  for (size_t i = 0; i < rep.n; i++)
    out[rep.devices[i].health <= NRM_HEALTH_UNHEALTHY ? rep.devices[i].health : NRM_HEALTH_UNKNOWN]++;
  nrm_health_report_done (&rep);
}

void
nrm_plugin_health_start (struct nrm_plugin *p)
{
  p->hrunning = pthread_create (&p->hthread, NULL, health_thread, p) == 0;
  if (p->ops->health_fd && p->ops->health_fd (p->self) >= 0 && (p->estop = eventfd (0, EFD_CLOEXEC)) >= 0)
    p->erunning = pthread_create (&p->ethread, NULL, event_thread, p) == 0;
}

void
nrm_plugin_health_stop (struct nrm_plugin *p)
{
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
}
