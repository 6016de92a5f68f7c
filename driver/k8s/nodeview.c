/* SPDX-License-Identifier: Apache-2.0 */
/* Other drivers' devices on this node, from the API server. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "driver/k8s/informer.h"
#include "driver/k8s/nodeview.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"

struct nrm_nodeview
{
  struct nrm_nodeview_config cfg;
  struct nrm_informer *informer;
  pthread_mutex_t lock;
  json_t *slices; /* slice name -> ResourceSlice */
  json_t *last;   /* what the drivers were last given */
};

static bool
own_driver (const struct nrm_drivers *d, const char *name)
{
  for (size_t i = 0; i < d->n; i++)
    if (strcmp (d->slots[i].name, name) == 0)
      return true;
  return false;
}

json_t *
nrm_nodeview_devices (json_t *slices, const struct nrm_drivers *own)
{
  json_t *out = json_object (), *slice;
  const char *key;
  json_object_foreach (slices, key, slice)
  {
    json_t *spec = json_object_get (slice, "spec");
    const char *driver = json_string_value (json_object_get (spec, "driver"));
    if (driver == NULL || own_driver (own, driver))
      continue;
    json_t *mine = json_object_get (out, driver);
    if (mine == NULL)
      json_object_set_new (out, driver, mine = json_object ());
    size_t i;
    json_t *dev;
    json_array_foreach (json_object_get (spec, "devices"), i, dev)
    {
      const char *name = json_string_value (json_object_get (dev, "name"));
      json_t *attrs = json_object_get (dev, "attributes");
      if (name && json_is_object (attrs))
        json_object_set (mine, name, attrs);
    }
  }
  return out;
}

static void
on_slice (void *ctx, const char *type, json_t *obj)
{
  struct nrm_nodeview *v = ctx;
  const char *name = json_string_value (json_object_get (json_object_get (obj, "metadata"), "name"));
  if (name == NULL)
    return;
  pthread_mutex_lock (&v->lock);
  if (strcmp (type, "DELETED") == 0)
    json_object_del (v->slices, name);
  else
    json_object_set (v->slices, name, obj);
  cleanup_json json_t *now = nrm_nodeview_devices (v->slices, v->cfg.drivers);
  bool changed = !json_equal (now, v->last);
  if (changed)
    {
      json_decref (v->last);
      v->last = json_incref (now);
      for (size_t i = 0; i < v->cfg.drivers->n; i++)
        {
          const struct nrm_driver_slot *s = &v->cfg.drivers->slots[i];
          if (s->ops->node_devices)
            s->ops->node_devices (s->self, now);
        }
    }
  pthread_mutex_unlock (&v->lock);
  if (changed && v->cfg.changed)
    v->cfg.changed (v->cfg.ctx);
}

int
nrm_nodeview_start (const struct nrm_nodeview_config *cfg, struct nrm_nodeview **ret, nrm_error_t *err)
{
  bool any = false;
  *ret = NULL;
  for (size_t i = 0; i < cfg->drivers->n; i++)
    any |= cfg->drivers->slots[i].ops->node_devices != NULL;
  if (!any)
    return 0;
  cleanup_free char *sel = xasprintf ("spec.nodeName=%s", cfg->node_name), *field = nrm_kube_escape (sel);
  if (field == NULL)
    return nrm_error_set (err, ENOMEM, "libcurl cannot escape the field selector `%s`", sel);
  cleanup_free char *query = xasprintf ("fieldSelector=%s", field);
  struct nrm_nodeview *v = xcalloc (1, sizeof (*v));
  v->cfg = *cfg;
  v->slices = json_object ();
  v->last = json_object ();
  pthread_mutex_init (&v->lock, NULL);
  struct nrm_informer_config ic = { .kube = cfg->kube,
                                    .path = "/apis/resource.k8s.io/v1/resourceslices",
                                    .query = query,
                                    .what = "ResourceSlices of this node",
                                    .event = on_slice,
                                    .ctx = v,
                                    .log = cfg->log,
                                    .log_ctx = cfg->log_ctx };
  if (nrm_informer_start (&ic, &v->informer, err) < 0)
    {
      json_decref (v->slices);
      json_decref (v->last);
      pthread_mutex_destroy (&v->lock);
      free (v);
      return -1;
    }
  *ret = v;
  return 0;
}

void
nrm_nodeview_stopping (struct nrm_nodeview *v)
{
  if (v)
    nrm_informer_stopping (v->informer);
}

void
nrm_nodeview_stop (struct nrm_nodeview *v)
{
  if (v == NULL)
    return;
  nrm_informer_stop (v->informer);
  json_decref (v->slices);
  json_decref (v->last);
  pthread_mutex_destroy (&v->lock);
  free (v);
}
