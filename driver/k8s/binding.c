/* SPDX-License-Identifier: Apache-2.0 */
/* The node's side of binding conditions: claims labelled for this node,
 * their drivers' bind operation, the status write. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "driver/k8s/binding.h"
#include "driver/k8s/devstatus.h"
#include "driver/claimview.h"
#include "driver/k8s/informer.h"
#include "driver/names.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"

#define MAX_CONDITIONS 8
#define MAX_DATA 10240

struct nrm_binder
{
  struct nrm_binder_config cfg;
  struct nrm_informer *informer;
};

#define LOG(b, lvl, ...) NRM_LOG_TO ((b)->cfg.log, (b)->cfg.log_ctx, lvl, __VA_ARGS__)

const char *
nrm_allocation_node (json_t *claim)
{
  json_t *sel = json_object_get (json_object_get (json_object_get (claim, "status"), "allocation"), "nodeSelector");
  json_t *terms = json_object_get (sel, "nodeSelectorTerms");
  json_t *term = json_array_get (terms, 0);
  json_t *fields = json_object_get (term, "matchFields");
  json_t *f = json_array_get (fields, 0);
  json_t *values = json_object_get (f, "values");
  const char *key = json_string_value (json_object_get (f, "key"));
  const char *op = json_string_value (json_object_get (f, "operator"));
  if (json_array_size (terms) != 1 || json_array_size (fields) != 1 || json_array_size (values) != 1
      || json_array_size (json_object_get (term, "matchExpressions")) != 0 || key == NULL || op == NULL
      || strcmp (key, "metadata.name") != 0 || strcmp (op, "In") != 0)
    return NULL;
  return json_string_value (json_array_get (values, 0));
}

static bool
condition_true (json_t *status, const char *type)
{
  const char *s = json_string_value (json_object_get (nrm_devstatus_condition (status, type), "status"));
  return s && strcmp (s, "True") == 0;
}

bool
nrm_binding_settled (json_t *claim, json_t *result)
{
  json_t *st = nrm_devstatus_entry (claim, result);
  size_t i;
  json_t *c;
  json_array_foreach (json_object_get (result, "bindingFailureConditions"), i, c)
  {
    if (json_is_string (c) && condition_true (st, json_string_value (c)))
      return true;
  }
  json_array_foreach (json_object_get (result, "bindingConditions"), i, c)
  {
    if (!json_is_string (c) || !condition_true (st, json_string_value (c)))
      return false;
  }
  return true;
}

/* The driver's results that wait for their binding conditions. */
static size_t
waiting (json_t *claim, const char *driver, const char *node)
{
  size_t i, n = 0;
  json_t *r;
  json_array_foreach (
      json_object_get (json_object_get (json_object_get (json_object_get (claim, "status"), "allocation"), "devices"),
                       "results"),
      i, r)
  {
    const char *d = json_string_value (json_object_get (r, "driver"));
    const char *p = json_string_value (json_object_get (r, "pool"));
    if (d && p && strcmp (d, driver) == 0 && strcmp (p, node) == 0
        && json_array_size (json_object_get (r, "bindingConditions")) > 0 && !nrm_binding_settled (claim, r))
      n++;
  }
  return n;
}

/* The driver's entries, checked: its own devices of this claim only, the
 * API's limits, and a lastTransitionTime on every condition. */
static int
check_entries (const struct nrm_claim_view *v, const char *driver, json_t *devs, nrm_error_t *err)
{
  size_t i, k;
  json_t *d, *c;
  char now[32];
  nrm_devstatus_now (now, sizeof (now));
  if (!json_is_array (devs))
    return nrm_error_set (err, EINVAL, "driver %s: bind returned no list of device statuses", driver);
  json_array_foreach (devs, i, d)
  {
    const char *name = json_string_value (json_object_get (d, "device"));
    bool mine = false;
    for (size_t r = 0; name && r < v->n_results; r++)
      mine |= strcmp (v->results[r].device, name) == 0;
    const char *dd = json_string_value (json_object_get (d, "driver"));
    if (!mine || dd == NULL || strcmp (dd, driver) != 0)
      return nrm_error_set (err, EINVAL, "driver %s: bind returned a status for device `%s`, not one of its own here",
                            driver, name ? name : "?");
    if (json_array_size (json_object_get (d, "conditions")) > MAX_CONDITIONS)
      return nrm_error_set (err, EINVAL, "driver %s: device %s: more than %d conditions", driver, name, MAX_CONDITIONS);
    cleanup_free char *data
        = json_object_get (d, "data") ? json_dumps (json_object_get (d, "data"), JSON_COMPACT) : NULL;
    if (data && strlen (data) > MAX_DATA)
      return nrm_error_set (err, EINVAL, "driver %s: device %s: data over %d bytes", driver, name, MAX_DATA);
    /* As meta.SetStatusCondition: a condition whose status stays keeps
     * the time it last changed, so that writing it again changes nothing. */
    json_t *was = nrm_devstatus_entry (v->claim, d);
    json_array_foreach (json_object_get (d, "conditions"), k, c)
    {
      json_t *old = nrm_devstatus_condition (was, json_string_value (json_object_get (c, "type")));
      if (json_object_get (c, "lastTransitionTime") != NULL)
        continue;
      if (old && nrm_devstatus_same (old, c, "status") && json_is_string (json_object_get (old, "lastTransitionTime")))
        json_object_set (c, "lastTransitionTime", json_object_get (old, "lastTransitionTime"));
      else
        json_object_set_new (c, "lastTransitionTime", json_string (now));
    }
  }
  return 0;
}

/* One claim for one driver: bind, then apply the statuses. */
static void
bind_claim (struct nrm_binder *b, const struct nrm_driver_slot *s, json_t *claim)
{
  json_t *meta = json_object_get (claim, "metadata");
  const char *ns = json_string_value (json_object_get (meta, "namespace"));
  const char *name = json_string_value (json_object_get (meta, "name"));
  const char *uid = json_string_value (json_object_get (meta, "uid"));
  struct nrm_allocation a;
  cleanup_json json_t *devs = NULL, *body = NULL, *answer = NULL;
  cleanup_free char *path = NULL, *manager = NULL;
  nrm_error_t err = NULL;
  memset (&a, 0, sizeof (a));
  /* They become part of a URL path: as the API server names objects. */
  if (ns == NULL || name == NULL || uid == NULL || !nrm_is_dns_label (ns) || !nrm_is_dns_subdomain (name, 253))
    return;
  if (nrm_claim_allocation (s->name, b->cfg.node_name, claim, uid, &a, &err) < 0)
    goto fail;
  a.view.ns = ns;
  a.view.name = name;
  if (s->ops->bind (s->self, &a.view, &devs, &err) < 0 || check_entries (&a.view, s->name, devs, &err) < 0)
    goto fail;
  /* Nothing new (a bind that keeps reporting the same state): no write,
   * so that the claim's next event does not call bind again at once. */
  bool news = false;
  size_t i;
  json_t *d;
  json_array_foreach (devs, i, d)
  {
    json_t *was = nrm_devstatus_entry (claim, d);
    news |= was == NULL || !json_equal (json_object_get (was, "conditions"), json_object_get (d, "conditions"))
            || !json_equal (json_object_get (was, "data"), json_object_get (d, "data"));
  }
  if (!news)
    {
      nrm_allocation_done (&a);
      return;
    }
  /* Server-side apply: this driver's entries, whoever else writes there. */
  body = json_pack ("{s:s, s:s, s:{s:s, s:s}, s:{s:O}}", "apiVersion", "resource.k8s.io/v1", "kind", "ResourceClaim",
                    "metadata", "name", name, "namespace", ns, "status", "devices", devs);
  manager = nrm_kube_escape (s->name);
  if (manager == NULL)
    {
      nrm_error_set (&err, ENOMEM, "libcurl cannot escape the field manager `%s`", s->name);
      goto fail;
    }
  path = xasprintf ("/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s/status?fieldManager=%s&force=true", ns,
                    name, manager);
  int code = nrm_kube_patch (b->cfg.kube, path, "application/apply-patch+yaml", body, &answer, &err);
  if (code < 0)
    goto fail;
  if (code != 200 && code != 201)
    {
      nrm_error_set (&err, code == 403 ? EACCES : EIO, "writing its status: HTTP %d: %s", code,
                     nrm_kube_status_message (answer, code));
      goto fail;
    }
  LOG (b, NRM_LOG_INFO, "%s: claim %s/%s: binding conditions of %zu device%s written", s->name, ns, name,
       json_array_size (devs), json_array_size (devs) == 1 ? "" : "s");
  nrm_allocation_done (&a);
  return;
fail:
  /* The next event of the claim tries again. */
  LOG (b, NRM_LOG_WARNING, "%s: claim %s/%s: binding: %s", s->name, ns, name, nrm_error_msg (err));
  nrm_error_release (&err);
  nrm_allocation_done (&a);
}

static void
on_claim (void *ctx, const char *type, json_t *claim)
{
  struct nrm_binder *b = ctx;
  if (strcmp (type, "DELETED") == 0)
    return;
  const char *node = nrm_allocation_node (claim);
  /* The label says this node; the allocation must say it too. */
  if (node == NULL || strcmp (node, b->cfg.node_name) != 0)
    return;
  for (size_t i = 0; i < b->cfg.drivers->n; i++)
    {
      const struct nrm_driver_slot *s = &b->cfg.drivers->slots[i];
      if (s->ops->bind && waiting (claim, s->name, b->cfg.node_name) > 0)
        bind_claim (b, s, claim);
    }
}

char *
nrm_node_label_value (const char *node)
{
  enum
  {
    LABEL_MAX = 63,
    HEX = 16
  };
  size_t len = strlen (node);
  if (len <= LABEL_MAX)
    return xstrdup (node);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  if (EVP_Digest (node, len, md, &md_len, EVP_sha256 (), NULL) != 1 || md_len < HEX / 2)
    abort (); /* SHA-256 of a string in memory cannot fail */
  char hex[HEX + 1];
  for (int i = 0; i < HEX / 2; i++)
    snprintf (hex + 2 * i, 3, "%02x", md[i]);
  /* A node name's characters are a label value's; the hex digits end it
   * with one, as a label value must. */
  return xasprintf ("%.*s-%s", LABEL_MAX - 1 - HEX, node, hex);
}

int
nrm_binder_start (const struct nrm_binder_config *cfg, struct nrm_binder **ret, nrm_error_t *err)
{
  bool any = false;
  *ret = NULL;
  for (size_t i = 0; i < cfg->drivers->n; i++)
    any |= cfg->drivers->slots[i].ops->bind != NULL;
  if (!any)
    return 0;
  cleanup_free char *value = nrm_node_label_value (cfg->node_name);
  cleanup_free char *sel = xasprintf (NRM_NODE_LABEL "=%s", value), *label = nrm_kube_escape (sel);
  if (label == NULL)
    return nrm_error_set (err, ENOMEM, "libcurl cannot escape the label selector `%s`", sel);
  cleanup_free char *query = xasprintf ("labelSelector=%s", label);
  struct nrm_binder *b = xcalloc (1, sizeof (*b));
  b->cfg = *cfg;
  struct nrm_informer_config ic = { .kube = cfg->kube,
                                    .path = "/apis/resource.k8s.io/v1/resourceclaims",
                                    .query = query,
                                    .what = "ResourceClaims of this node",
                                    /* A failed write is tried again at the claim's next event, or here. */
                                    .resync_s = 60,
                                    .event = on_claim,
                                    .ctx = b,
                                    .log = cfg->log,
                                    .log_ctx = cfg->log_ctx };
  if (nrm_informer_start (&ic, &b->informer, err) < 0)
    {
      free (b);
      return -1;
    }
  *ret = b;
  return 0;
}

void
nrm_binder_stopping (struct nrm_binder *b)
{
  if (b)
    nrm_informer_stopping (b->informer);
}

void
nrm_binder_stop (struct nrm_binder *b)
{
  if (b == NULL)
    return;
  nrm_informer_stop (b->informer);
  free (b);
}
