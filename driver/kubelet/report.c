/* SPDX-License-Identifier: Apache-2.0 */
/* The Events the kubelet plugin records (driver/k8s/events.h): a refused
 * prepare on its claim, a device's health turning on the Node. */
#include "config.h"

#include "driver/k8s/events.h"
#include "driver/kubelet/plugin-internal.h"
#include "nrm/base/cleanup.h"

/* The rule that refused, from the kind of the error (as /metrics counts
 * them). */
static const char *
prepare_reason (int status)
{
  switch (nrm_error_kind_of (status))
    {
    case NRM_ERRKIND_INVALID:
      return "InvalidClaim";
    case NRM_ERRKIND_NOT_FOUND:
      return "NotFound";
    case NRM_ERRKIND_REPLACED:
      return "ClaimReplaced";
    case NRM_ERRKIND_NO_CAPACITY:
      return "InsufficientCapacity";
    case NRM_ERRKIND_API:
      return "APIUnavailable";
    default:
      return "PrepareFailed";
    }
}

void
nrm_plugin_report_prepare_failed (struct nrm_plugin *p, const char *ns, const char *name, const char *uid, int status,
                                  const char *message)
{
  if (p->cfg.events == NULL || ns == NULL || name == NULL)
    return;
  struct nrm_event_ref claim
      = { .api_version = "resource.k8s.io/v1", .kind = "ResourceClaim", .ns = ns, .name = name, .uid = uid };
  nrm_events_record (p->cfg.events, p->driver, &claim, true, prepare_reason (status), "PrepareResources", "%s",
                     message);
}

void
nrm_plugin_report_health (struct nrm_plugin *p, const struct nrm_health_report *r)
{
  if (p->cfg.events == NULL)
    return;
  struct nrm_event_ref node = nrm_event_node_ref (p->node_name);
  pthread_mutex_lock (&p->hlock);
  if (p->health_seen == NULL)
    p->health_seen = json_object ();
  for (size_t i = 0; i < r->n; i++)
    {
      const struct nrm_device_health *h = &r->devices[i];
      json_int_t was = json_integer_value (json_object_get (p->health_seen, h->device));
      /* Unknown says nothing new; a device first seen healthy neither. */
      if (h->device == NULL || h->health == NRM_HEALTH_UNKNOWN || (json_int_t) h->health == was
          || (was == 0 && h->health == NRM_HEALTH_HEALTHY))
        {
          if (h->device && h->health != NRM_HEALTH_UNKNOWN)
            json_object_set_new (p->health_seen, h->device, json_integer (h->health));
          continue;
        }
      json_object_set_new (p->health_seen, h->device, json_integer (h->health));
      const char *effect = nrm_taint_effect_name (h->effect);
      cleanup_free char *taint
          = h->taint && effect ? xasprintf ("; tainted %s/%s:%s", p->driver, h->taint, effect) : xstrdup ("");
      if (h->health == NRM_HEALTH_UNHEALTHY)
        nrm_events_record (p->cfg.events, p->driver, &node, true, "DeviceUnhealthy", "CheckHealth",
                           "%s: device %s is unhealthy%s%s%s", p->driver, h->device, h->message ? ": " : "",
                           h->message ? h->message : "", taint);
      else
        nrm_events_record (p->cfg.events, p->driver, &node, false, "DeviceHealthy", "CheckHealth",
                           "%s: device %s is healthy again", p->driver, h->device);
    }
  pthread_mutex_unlock (&p->hlock);
}
