/* SPDX-License-Identifier: Apache-2.0 */
/* nrm controller: leader election and the node labels of claims that wait
 * for binding conditions. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/k8s/binding.h"
#include "driver/k8s/eventcache.h"
#include "driver/k8s/informer.h"
#include "driver/names.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/clock.h"
#include "nrm/base/xalloc.h"
#include "nrm/controller.h"
#include "nrm/logging.h"

/* client-go's defaults: a lease lasts 15 s, the leader renews it within
 * 10 s or steps down, candidates retry every 2 s. */
#define LEASE_NAME "nrm-controller"
#define LEASE_DURATION_S 15
#define RENEW_DEADLINE_S 10
#define RETRY_S 2

struct labeler
{
  struct nrm_kube *kube;
  json_t *drivers;
  unsigned long labelled, failed;
};

/* Now as a MicroTime (the Lease's renewTime), as an Event's eventTime. */
static void
micro_time (char buf[32])
{
  struct timespec t;
  clock_gettime (CLOCK_REALTIME, &t);
  nrm_event_micro_time ((int64_t) t.tv_sec * 1000000 + t.tv_nsec / 1000, buf);
}

static bool
ours (struct labeler *l, const char *driver)
{
  size_t i;
  json_t *d;
  json_array_foreach (l->drivers, i, d)
  {
    if (driver && strcmp (json_string_value (d), driver) == 0)
      return true;
  }
  return false;
}

/* A claim allocated to one node with an unsettled binding condition on one
 * of our devices gets that node's label, once. */
static void
on_claim (void *ctx, const char *type, json_t *claim)
{
  struct labeler *l = ctx;
  if (strcmp (type, "DELETED") == 0)
    return;
  const char *node = nrm_allocation_node (claim);
  json_t *meta = json_object_get (claim, "metadata");
  const char *have = json_string_value (json_object_get (json_object_get (meta, "labels"), NRM_NODE_LABEL));
  if (node == NULL)
    return;
  cleanup_free char *value = nrm_node_label_value (node);
  if (have && strcmp (have, value) == 0)
    return;
  bool waits = false;
  size_t i;
  json_t *r;
  json_array_foreach (
      json_object_get (json_object_get (json_object_get (json_object_get (claim, "status"), "allocation"), "devices"),
                       "results"),
      i, r)
  {
    waits |= ours (l, json_string_value (json_object_get (r, "driver")))
             && json_array_size (json_object_get (r, "bindingConditions")) > 0 && !nrm_binding_settled (claim, r);
  }
  if (!waits)
    return;
  const char *ns = json_string_value (json_object_get (meta, "namespace"));
  const char *name = json_string_value (json_object_get (meta, "name"));
  /* They become part of a URL path: as the API server names objects. */
  if (ns == NULL || name == NULL || !nrm_is_dns_label (ns) || !nrm_is_dns_subdomain (name, 253))
    return;
  cleanup_free char *path = xasprintf ("/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s", ns, name);
  cleanup_json json_t *answer = NULL;
  cleanup_json json_t *patch = json_pack ("{s:{s:{s:s}}}", "metadata", "labels", NRM_NODE_LABEL, value);
  nrm_error_t err = NULL;
  int code = nrm_kube_patch (l->kube, path, "application/merge-patch+json", patch, &answer, &err);
  if (code == 200)
    {
      l->labelled++;
      nrm_log (NULL, NRM_LOG_INFO, "claim %s/%s waits for binding conditions on node %s: labelled", ns, name, node);
      return;
    }
  l->failed++;
  nrm_log (NULL, NRM_LOG_WARNING, "claim %s/%s: cannot label it for node %s: %s", ns, name, node,
           code < 0 ? nrm_error_msg (err) : nrm_kube_status_message (answer, code));
  nrm_error_release (&err);
}

/* One round of the election: 1 when we hold the lease (created, renewed
 * or taken over), 0 when another does, -1 on an error. seen/seen_at: the
 * last record observed and when (our clock: no skew between nodes). */
static int
try_lease (struct nrm_kube *k, const char *ns, const char *id, char **seen, double *seen_at, nrm_error_t *err)
{
  cleanup_free char *coll = xasprintf ("/apis/coordination.k8s.io/v1/namespaces/%s/leases", ns);
  cleanup_free char *path = xasprintf ("%s/" LEASE_NAME, coll);
  cleanup_json json_t *lease = NULL, *answer = NULL;
  char now[32];
  micro_time (now);
  int code = nrm_kube_call (k, "GET", path, NULL, &lease, err);
  if (code < 0)
    return -1;
  if (code == 404)
    {
      cleanup_json json_t *obj = json_pack (
          "{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:i, s:s, s:s, s:i}}", "apiVersion", "coordination.k8s.io/v1", "kind",
          "Lease", "metadata", "name", LEASE_NAME, "namespace", ns, "spec", "holderIdentity", id,
          "leaseDurationSeconds", LEASE_DURATION_S, "acquireTime", now, "renewTime", now, "leaseTransitions", 0);
      code = nrm_kube_call (k, "POST", coll, obj, &answer, err);
      if (code < 0)
        return -1;
      return code == 201 || code == 200 ? 1
             : code == 409              ? 0
                                        : nrm_error_set (err, EIO, "creating the lease: HTTP %d: %s", code,
                                                         nrm_kube_status_message (answer, code));
    }
  if (code != 200)
    return nrm_error_set (err, EIO, "reading the lease: HTTP %d: %s", code, nrm_kube_status_message (lease, code));
  json_t *spec = json_object_get (lease, "spec");
  const char *holder = json_string_value (json_object_get (spec, "holderIdentity"));
  const char *renew = json_string_value (json_object_get (spec, "renewTime"));
  json_int_t duration = json_integer_value (json_object_get (spec, "leaseDurationSeconds"));
  cleanup_free char *record = xasprintf ("%s@%s", holder ? holder : "", renew ? renew : "");
  if (*seen == NULL || strcmp (*seen, record) != 0)
    {
      free (*seen);
      *seen = TAKE_PTR (record);
      *seen_at = nrm_mono_s ();
    }
  bool mine = holder && strcmp (holder, id) == 0;
  bool expired
      = holder == NULL || *holder == '\0' || nrm_mono_s () - *seen_at > (double) (duration > 0 ? duration : 15);
  if (!mine && !expired)
    return 0;
  if (spec == NULL)
    json_object_set_new (lease, "spec", spec = json_object ());
  if (!mine)
    {
      json_object_set_new (spec, "acquireTime", json_string (now));
      json_object_set_new (spec, "leaseTransitions",
                           json_integer (json_integer_value (json_object_get (spec, "leaseTransitions")) + 1));
    }
  json_object_set_new (spec, "holderIdentity", json_string (id));
  json_object_set_new (spec, "renewTime", json_string (now));
  json_object_set_new (spec, "leaseDurationSeconds", json_integer (LEASE_DURATION_S));
  code = nrm_kube_call (k, "PUT", path, lease, &answer, err);
  if (code < 0)
    return -1;
  if (code == 409)
    return 0;
  if (code != 200)
    return nrm_error_set (err, EIO, "renewing the lease: HTTP %d: %s", code, nrm_kube_status_message (answer, code));
  return 1;
}

/* Gives up the lease we hold (an empty holder, as client-go's
 * ReleaseOnCancel); a lease held by another is left alone. */
static void
release_lease (struct nrm_kube *k, const char *ns, const char *id)
{
  cleanup_free char *path = xasprintf ("/apis/coordination.k8s.io/v1/namespaces/%s/leases/" LEASE_NAME, ns);
  cleanup_json json_t *lease = NULL, *answer = NULL;
  nrm_error_t err = NULL;
  if (nrm_kube_call (k, "GET", path, NULL, &lease, &err) != 200
      || strcmp (json_string_value (json_object_get (json_object_get (lease, "spec"), "holderIdentity")) ?: "", id)
             != 0)
    {
      nrm_error_release (&err);
      return;
    }
  json_t *spec = json_object_get (lease, "spec");
  json_object_set_new (spec, "holderIdentity", json_string (""));
  json_object_set_new (spec, "leaseDurationSeconds", json_integer (1));
  if (nrm_kube_call (k, "PUT", path, lease, &answer, &err) == 200)
    nrm_log (NULL, NRM_LOG_INFO, "controller %s: lease released", id);
  nrm_error_release (&err);
}

int
nrm_cmd_controller (struct nrm_kube *kube, json_t *drivers, const char *ns, const char *id, const sigset_t *set,
                    nrm_error_t *err)
{
  struct labeler l = { .kube = kube, .drivers = drivers };
  struct nrm_informer *inf = NULL;
  cleanup_free char *seen = NULL;
  double seen_at = 0, renewed = 0;
  int r = -1;
  nrm_log (NULL, NRM_LOG_INFO, "controller %s: electing a leader with lease %s/" LEASE_NAME, id, ns);
  for (;;)
    {
      nrm_error_t e = NULL;
      int held = try_lease (kube, ns, id, &seen, &seen_at, &e);
      if (held < 0)
        {
          nrm_log (NULL, NRM_LOG_WARNING, "lease: %s", nrm_error_msg (e));
          nrm_error_release (&e);
        }
      if (held == 1)
        {
          renewed = nrm_mono_s ();
          if (inf == NULL)
            {
              struct nrm_informer_config ic = { .kube = kube,
                                                .path = "/apis/resource.k8s.io/v1/resourceclaims",
                                                .what = "ResourceClaims",
                                                .event = on_claim,
                                                .ctx = &l,
                                                .log = nrm_log };
              nrm_log (NULL, NRM_LOG_INFO, "controller %s: leading; watching ResourceClaims", id);
              if (nrm_informer_start (&ic, &inf, err) < 0)
                goto out;
            }
        }
      else if (inf && (held == 0 || nrm_mono_s () - renewed > RENEW_DEADLINE_S))
        {
          nrm_error_set (err, ENOLCK, "controller %s: lost the lease (%s); stepping down", id,
                         held == 0 ? "another holds it" : "not renewed in time");
          goto out;
        }
      struct timespec wait = { .tv_sec = RETRY_S };
      int sig = sigtimedwait (set, NULL, &wait);
      if (sig > 0)
        {
          nrm_log (NULL, NRM_LOG_INFO, "%s: stopping (%lu claims labelled, %lu failed)", strsignal (sig), l.labelled,
                   l.failed);
          r = 0;
          break;
        }
    }
out:
  /* Claims are labelled from the informer's thread: it ends first; then
   * the lease goes, so that a standby takes over at once, not after
   * LEASE_DURATION_S. */
  nrm_informer_stopping (inf);
  nrm_informer_stop (inf);
  if (inf && r == 0)
    release_lease (kube, ns, id);
  nrm_kube_cancel (kube);
  return r;
}
