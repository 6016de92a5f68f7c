/* SPDX-License-Identifier: Apache-2.0 */
/* A ResourceClaim's allocation as one driver sees it. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "driver/claimview.h"
#include "nrm/base/xalloc.h"

void
nrm_allocation_done (struct nrm_allocation *a)
{
  free (a->all);
  free (a->mine);
  json_decref (a->view.config);
}

/* Checks a claim object and extracts every result (each driver's), this
 * driver's, and this driver's opaque configuration. */
int
nrm_claim_allocation (const char *driver, const char *node, json_t *claim, const char *uid, struct nrm_allocation *a,
                      nrm_error_t *err)
{
  const char *cuid = json_string_value (json_object_get (json_object_get (claim, "metadata"), "uid"));
  json_t *alloc = json_object_get (json_object_get (claim, "status"), "allocation");
  json_t *results = json_object_get (json_object_get (alloc, "devices"), "results");
  size_t i, k = 0;
  json_t *r;

  if (cuid == NULL || strcmp (cuid, uid) != 0)
    return nrm_error_set (err, ESTALE, "claim UID is %s, not %s: the claim was replaced", cuid ? cuid : "(none)", uid);
  if (!json_is_object (alloc))
    return nrm_error_set (err, EINVAL, "claim is not allocated");
  if (!json_is_array (results))
    return nrm_error_set (err, EINVAL, "claim allocation has no device results");
  a->all = xcalloc (json_array_size (results) + 1, sizeof (*a->all));
  a->mine = xcalloc (json_array_size (results) + 1, sizeof (*a->mine));
  json_array_foreach (results, i, r)
  {
    struct nrm_alloc_result *o = &a->all[i];
    o->driver = json_string_value (json_object_get (r, "driver"));
    o->request = json_string_value (json_object_get (r, "request"));
    o->pool = json_string_value (json_object_get (r, "pool"));
    o->device = json_string_value (json_object_get (r, "device"));
    o->share_id = json_string_value (json_object_get (r, "shareID"));
    o->consumed = json_object_get (r, "consumedCapacity");
    if (o->driver == NULL || strcmp (o->driver, driver) != 0)
      continue;
    if (o->request == NULL || o->pool == NULL || o->device == NULL)
      return nrm_error_set (err, EINVAL, "allocation result %zu lacks request, pool or device", i);
    if (strcmp (o->pool, node) != 0)
      return nrm_error_set (err, EINVAL, "device %s/%s is not in this node's pool `%s`", o->pool, o->device, node);
    if (o->consumed && !json_is_object (o->consumed))
      return nrm_error_set (err, EINVAL, "consumedCapacity of device %s is not a map", o->device);
    a->mine[k++] = *o;
  }
  if (k == 0)
    return nrm_error_set (err, EINVAL, "no device of driver %s is allocated to this claim", driver);
  /* Opaque configuration meant for this driver. */
  a->view.config = json_array ();
  json_array_foreach (json_object_get (json_object_get (alloc, "devices"), "config"), i, r)
  {
    json_t *opaque = json_object_get (r, "opaque");
    const char *to = json_string_value (json_object_get (opaque, "driver"));
    if (to && strcmp (to, driver) == 0)
      json_array_append (a->view.config, r);
  }
  a->view.uid = uid;
  a->view.results = a->mine;
  a->view.n_results = k;
  a->view.all = a->all;
  a->view.n_all = json_array_size (results);
  a->view.claim = claim;
  return 0;
}
