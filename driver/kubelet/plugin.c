/* SPDX-License-Identifier: Apache-2.0 */
/* The kubelet plugin: its lifecycle and sockets, recovery at start, and the
 * gRPC handlers of the DRA and registration services. Its other parts are
 * listed in driver/kubelet/plugin-internal.h. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "driver/claimview.h"
#include "driver/kubelet/checkpoint.h"
#include "driver/kubelet/grpc.h"
#include "driver/kubelet/metadata.h"
#include "driver/kubelet/plugin-internal.h"
#include "driver/names.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/fs.h"
#include "nrm/base/text.h"
#include "proto/dra_v1.pb-c.h"
#include "proto/pluginregistration.pb-c.h"

#define MAX_CLAIMS_PER_CALL 4096
#define MAX_UID 128
#define QUOTE_MAX 64 /* bytes of a bad input quoted in a message */
/* Bytes of an error in a reply: the kubelet puts all of it in the pod's
 * FailedPrepareDynamicResources Event, which has no limit of its own. */
#define MAX_REPLY_ERROR 4096

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest PrepareRequest;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse PrepareResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse__ClaimsEntry PrepareEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse PrepareClaimResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device Device;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest UnprepareRequest;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse UnprepareResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry UnprepareEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourceResponse UnprepareClaimResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim Claim;

/* --- recovery ---------------------------------------------------------------- */

/* The files of claims the checkpoint does not have (specs and metadata),
 * and what interrupted writes left: checkpoint, specs, metadata, records. */
static void
remove_orphans (struct nrm_plugin *p)
{
  nrm_plugin_cdi_remove_orphans (p);
  nrm_metadata_remove_orphans (p->plugin_dir, p->cdi_dir, p->driver, json_object_get (p->cp, "claims"), p->cfg.log,
                               p->cfg.log_ctx);
  const char *dirs[] = { p->state_dir, p->cdi_dir, p->plugin_dir };
  for (size_t i = 0; i < sizeof (dirs) / sizeof (dirs[0]); i++)
    {
      unsigned removed = 0;
      nrm_error_t err = NULL;
      if (nrm_remove_stale_temps (dirs[i], 3, &removed, &err) < 0)
        {
          LOG (p, NRM_LOG_WARNING, "%s", nrm_error_msg (err));
          nrm_error_release (&err);
        }
      if (removed)
        LOG (p, NRM_LOG_INFO, "removed %u temporary files of interrupted writes in %s", removed, dirs[i]);
    }
}

/* Claims left half-prepared by a crash are rolled back: the driver never
 * recorded state for them, so only their CDI spec may be left over. */
static int
recover (struct nrm_plugin *p, nrm_error_t *err)
{
  const char *uid;
  json_t *c;
  void *tmp;
  size_t rolled = 0;

  if (nrm_plugin_lock_state (p, false, err) < 0)
    return -1;
  json_object_foreach_safe (json_object_get (p->cp, "claims"), tmp, uid, c)
  {
    if (!nrm_checkpoint_completed (c))
      {
        LOG (p, NRM_LOG_WARNING, "claim %s was interrupted during prepare; rolling it back", uid);
        nrm_plugin_cdi_remove (p, uid);
        nrm_metadata_remove_entry (p->plugin_dir, p->cdi_dir, p->driver, uid, c, true, p->cfg.log, p->cfg.log_ctx);
        json_object_del (json_object_get (p->cp, "claims"), uid);
        rolled++;
      }
    else
      {
        cleanup_json json_t *edits = nrm_cdi_entry_edits (c);
        if (nrm_plugin_cdi_write (p, uid, edits, err) < 0)
          {
            nrm_plugin_unlock_state (p);
            return -1;
          }
        /* The metadata specs live beside the claim's spec (a tmpfs); a
         * claim prepared with metadata keeps it, whatever the flag is now:
         * its recorded answer names the spec. */
        if (!p->cfg.local && json_array_size (json_object_get (c, "metadata")) > 0)
          nrm_metadata_write_claim (
              p->plugin_dir, p->cdi_dir, p->driver, json_string_value (json_object_get (c, "namespace")) ?: "",
              json_string_value (json_object_get (c, "name")) ?: "", uid, json_object_get (c, "metadata"),
              json_object_get (c, "devices"), p->cfg.log, p->cfg.log_ctx);
      }
  }
  remove_orphans (p);
  int r = rolled ? nrm_plugin_write_state (p, err) : 0;
  nrm_plugin_unlock_state (p);
  return r;
}

/* --- prepare ----------------------------------------------------------------- */

/* The devices of a claim prepared earlier (new reference), or NULL. An
 * entry left in PrepareStarted can only come from an instance that died
 * mid-prepare (prepare holds the lock throughout): it is rolled back here. */
static json_t *
prepared_devices (struct nrm_plugin *p, const char *uid, nrm_error_t *err)
{
  json_t *devs = NULL;
  if (nrm_plugin_lock_state (p, false, err) < 0)
    return NULL;
  json_t *claims = json_object_get (p->cp, "claims");
  json_t *entry = json_object_get (claims, uid);
  if (entry != NULL && nrm_checkpoint_completed (entry))
    devs = json_incref (json_object_get (entry, "devices"));
  else if (entry != NULL)
    {
      LOG (p, NRM_LOG_WARNING, "claim %s was left half-prepared by another instance; rolling it back", uid);
      nrm_plugin_cdi_remove (p, uid);
      json_object_del (claims, uid);
      if (nrm_plugin_write_state (p, err) < 0)
        {
          nrm_plugin_unlock_state (p);
          return NULL;
        }
    }
  nrm_plugin_unlock_state (p);
  return devs;
}

/* A Kubernetes UID as nrm accepts it: it becomes part of file names. */
static bool
is_uid (const ProtobufCBinaryData *b)
{
  if (b->len == 0 || b->len > MAX_UID)
    return false;
  for (size_t i = 0; i < b->len; i++)
    if (!((b->data[i] >= 'a' && b->data[i] <= 'z') || (b->data[i] >= '0' && b->data[i] <= '9') || b->data[i] == '-'))
      return false;
  return true;
}

/* Prepares one claim; returns its devices (new reference) or an error. */
static json_t *
prepare_claim (struct nrm_plugin *p, const char *ns, const char *name, const char *uid, nrm_error_t *err)
{
  ProtobufCBinaryData ub = { strlen (uid), (uint8_t *) uid };
  if (!nrm_is_dns_label (ns) || !nrm_is_dns_subdomain (name, 253) || !is_uid (&ub))
    {
      cleanup_free char *qn = nrm_quote (ns, strlen (ns), QUOTE_MAX), *qm = nrm_quote (name, strlen (name), QUOTE_MAX),
                        *qu = nrm_quote (uid, strlen (uid), QUOTE_MAX);
      nrm_error_set (err, EINVAL, "invalid claim reference `%s`/`%s` (uid `%s`)", qn, qm, qu);
      return NULL;
    }
  /* Prepared already: the same answer, even if the claim is gone from its
   * source by now. Most often known without the lock, which a batch may
   * hold for a disk sync. */
  json_t *done = NULL;
  int known = nrm_plugin_known_answer (p, uid, &done);
  if (known == 1)
    return done;
  if (known < 0)
    {
      done = prepared_devices (p, uid, err);
      if (done != NULL || (err && *err))
        return done;
    }
  struct nrm_plugin_op o = { .ns = ns, .name = name, .uid = uid };
  /* The claim is read outside the lock, as the kubelet's own helper does. */
  if (p->cfg.claims.get (p->cfg.claims.self, ns, name, &o.claim, err) < 0)
    {
      /* A batch may have completed it meanwhile: the lock says. */
      nrm_error_t again = NULL;
      if (known == 0 && (done = prepared_devices (p, uid, &again)) != NULL)
        {
          nrm_error_release (err);
          return done;
        }
      nrm_error_release (&again);
      return NULL;
    }
  if (nrm_claim_allocation (p->driver, p->node_name, o.claim, uid, &o.a, err) < 0)
    {
      nrm_allocation_done (&o.a);
      json_decref (o.claim);
      return NULL;
    }
  nrm_plugin_submit (p, &o);
  nrm_prepared_done (&o.prep);
  nrm_allocation_done (&o.a);
  json_decref (o.claim);
  json_decref (o.edits);
  if (o.err)
    {
      json_decref (o.devs);
      *err = o.err;
      return NULL;
    }
  if (p->cfg.on_change)
    p->cfg.on_change (p->cfg.on_change_ctx);
  if (p->cfg.on_claim)
    p->cfg.on_claim (p->cfg.on_claim_ctx, p->driver, uid, ns, name);
  return o.devs;
}

static int
unprepare_claim (struct nrm_plugin *p, const char *uid, nrm_error_t *err)
{
  struct nrm_plugin_op o = { .unprepare = true, .uid = uid };
  nrm_plugin_submit (p, &o);
  bool removed = o.saved != NULL;
  cleanup_json json_t *saved = o.saved;
  if (o.err)
    {
      *err = o.err;
      return -1;
    }
  if (removed && p->cfg.on_change)
    p->cfg.on_change (p->cfg.on_change_ctx);
  if (removed && p->cfg.on_claim)
    p->cfg.on_claim (p->cfg.on_claim_ctx, p->driver, uid, json_string_value (json_object_get (saved, "namespace")),
                     json_string_value (json_object_get (saved, "name")));
  return 0;
}

/* --- gRPC handlers ------------------------------------------------------------ */

static grpc_status_code
pack_reply (const ProtobufCMessage *m, uint8_t **resp, size_t *len)
{
  *len = protobuf_c_message_get_packed_size (m);
  *resp = xmalloc (*len);
  protobuf_c_message_pack (m, *resp);
  return GRPC_STATUS_OK;
}

/* A claim reference from the wire, checked: the UID as a C string, and the
 * namespace and name, or the reason they cannot be used. */
struct claim_ref
{
  char *ns, *name, *uid;
  char *bad; /* why this claim is refused, or NULL */
};

/* A namespace or name as a C string when it is one, NULL otherwise: no
 * NUL inside (a C string would end there), a DNS label or subdomain (which
 * are ASCII, so bytes that are not UTF-8 fail too). */
static char *
ref_string (const ProtobufCBinaryData *b, bool label)
{
  const char *s = (const char *) b->data;
  if (b->len == 0 || b->len > 253 || memchr (s, '\0', b->len))
    return NULL;
  cleanup_free char *c = xstrndup (s, b->len);
  if (label ? !nrm_is_dns_label (c) : !nrm_is_dns_subdomain (c, 253))
    return NULL;
  return TAKE_PTR (c);
}

static void
refs_free (struct claim_ref *refs, size_t n)
{
  for (size_t i = 0; refs && i < n; i++)
    {
      free (refs[i].ns);
      free (refs[i].name);
      free (refs[i].uid);
      free (refs[i].bad);
    }
  free (refs);
}

/* Checks every claim reference of a request before anything is done. A
 * UID that is not one refuses the whole request: the reply is keyed by
 * UID, so there is no entry to answer it under. A bad namespace or name
 * refuses only its claim. */
static int
check_claims (Claim **claims, size_t n, struct claim_ref **ret, char **details)
{
  if (n > MAX_CLAIMS_PER_CALL)
    {
      *details = xasprintf ("too many claims in one request (%zu; at most %d)", n, MAX_CLAIMS_PER_CALL);
      return -1;
    }
  struct claim_ref *refs = xcalloc (n + 1, sizeof (*refs));
  for (size_t i = 0; i < n; i++)
    {
      Claim *c = claims[i];
      if (c == NULL || c->uid.len == 0)
        {
          *details = xasprintf ("claim %zu of the request has no uid", i);
          refs_free (refs, n);
          return -1;
        }
      if (!is_uid (&c->uid))
        {
          cleanup_free char *q = nrm_quote ((const char *) c->uid.data, c->uid.len, QUOTE_MAX);
          *details = xasprintf ("claim %zu of the request: uid `%s` (%zu bytes) is not a Kubernetes UID (at most %d "
                                "lowercase letters, digits and '-')",
                                i, q, c->uid.len, MAX_UID);
          refs_free (refs, n);
          return -1;
        }
      refs[i].uid = xstrndup ((const char *) c->uid.data, c->uid.len);
      refs[i].ns = ref_string (&c->namespace_, true);
      refs[i].name = ref_string (&c->name, false);
      if (refs[i].ns == NULL || refs[i].name == NULL)
        {
          cleanup_free char *qn = nrm_quote ((const char *) c->namespace_.data, c->namespace_.len, QUOTE_MAX);
          cleanup_free char *qm = nrm_quote ((const char *) c->name.data, c->name.len, QUOTE_MAX);
          refs[i].bad = xasprintf ("invalid claim reference `%s`/`%s` (%zu and %zu bytes): the %s is not a valid "
                                   "Kubernetes %s",
                                   qn, qm, c->namespace_.len, c->name.len, refs[i].ns ? "name" : "namespace",
                                   refs[i].ns ? "object name" : "namespace name");
        }
    }
  *ret = refs;
  return 0;
}

/* Whether refs[i]'s UID came earlier in the request: the reply has one
 * entry per UID. */
static bool
repeated (const struct claim_ref *refs, size_t i)
{
  for (size_t j = 0; j < i; j++)
    if (strcmp (refs[j].uid, refs[i].uid) == 0)
      return true;
  return false;
}

/* Serves v1 and v1beta1: their messages differ only in Device.share_id. */
static grpc_status_code
prepare_common (struct nrm_plugin *p, const uint8_t *req, size_t len, uint8_t **resp, size_t *resp_len, char **details,
                bool beta)
{
  PrepareRequest *in = k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__unpack (NULL, len, req);
  if (in == NULL)
    return nrm_plugin_bad_request (details, "NodePrepareResourcesRequest cannot be decoded");
  struct claim_ref *refs = NULL;
  if (check_claims (in->claims, in->n_claims, &refs, details) < 0)
    {
      k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__free_unpacked (in, NULL);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }

  size_t n = in->n_claims;
  PrepareResponse out = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_RESPONSE__INIT;
  PrepareEntry *entries = xcalloc (n + 1, sizeof (*entries));
  PrepareEntry **eptrs = xcalloc (n + 1, sizeof (*eptrs));
  PrepareClaimResponse *cr = xcalloc (n + 1, sizeof (*cr));
  json_t **keep = xcalloc (n + 1, sizeof (json_t *));
  char **errors = xcalloc (n + 1, sizeof (char *));
  size_t n_out = 0;

  for (size_t i = 0; i < n; i++)
    {
      const struct claim_ref *c = &refs[i];
      if (repeated (refs, i))
        continue; /* one entry per UID */
      nrm_error_t err = NULL;
      PrepareEntry *e = &entries[n_out];
      PrepareClaimResponse *r = &cr[n_out];
      k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__claims_entry__init (e);
      k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resource_response__init (r);
      e->key = c->uid;
      e->value = r;
      eptrs[n_out] = e;
      struct timespec t0;
      clock_gettime (CLOCK_MONOTONIC, &t0);
      json_t *devs = NULL;
      if (c->bad)
        nrm_error_set (&err, EINVAL, "%s", c->bad);
      else
        devs = prepare_claim (p, c->ns, c->name, c->uid, &err);
      nrm_plugin_record (p, &p->metrics.prepare, &t0, err);
      if (devs == NULL)
        {
          cleanup_free char *msg
              = c->bad ? xasprintf ("%s: claim %s: %s", p->driver, c->uid, nrm_error_msg (err))
                       : xasprintf ("%s: claim %s/%s: %s", p->driver, c->ns, c->name, nrm_error_msg (err));
          errors[n_out] = nrm_text_bound (msg, MAX_REPLY_ERROR);
          r->error = errors[n_out];
          LOG (p, NRM_LOG_WARNING, "prepare: %s", r->error);
          if (!c->bad)
            nrm_plugin_report_prepare_failed (p, c->ns, c->name, c->uid, err ? err->status : 0, r->error);
          nrm_error_release (&err);
        }
      else
        {
          keep[n_out] = devs;
          r->n_devices = json_array_size (devs);
          r->devices = xcalloc (r->n_devices + 1, sizeof (Device *));
          size_t k;
          json_t *d;
          json_array_foreach (devs, k, d)
          {
            Device *dv = xcalloc (1, sizeof (*dv));
            k8s__io__kubelet__pkg__apis__dra__v1__device__init (dv);
            json_t *rn = json_object_get (d, "requestNames"), *ids = json_object_get (d, "cdiDeviceIDs");
            dv->n_request_names = json_array_size (rn);
            dv->request_names = xcalloc (dv->n_request_names + 1, sizeof (char *));
            for (size_t x = 0; x < dv->n_request_names; x++)
              dv->request_names[x] = (char *) json_string_value (json_array_get (rn, x));
            dv->n_cdi_device_ids = json_array_size (ids);
            dv->cdi_device_ids = xcalloc (dv->n_cdi_device_ids + 1, sizeof (char *));
            for (size_t x = 0; x < dv->n_cdi_device_ids; x++)
              dv->cdi_device_ids[x] = (char *) json_string_value (json_array_get (ids, x));
            dv->pool_name = (char *) json_string_value (json_object_get (d, "pool"));
            dv->device_name = (char *) json_string_value (json_object_get (d, "device"));
            if (!beta && json_object_get (d, "shareID"))
              dv->share_id = (char *) json_string_value (json_object_get (d, "shareID"));
            r->devices[k] = dv;
          }
        }
      n_out++;
    }
  out.n_claims = n_out;
  out.claims = eptrs;
  grpc_status_code code = pack_reply (&out.base, resp, resp_len);

  for (size_t i = 0; i < n_out; i++)
    {
      for (size_t k = 0; k < cr[i].n_devices; k++)
        {
          free (cr[i].devices[k]->request_names);
          free (cr[i].devices[k]->cdi_device_ids);
          free (cr[i].devices[k]);
        }
      free (cr[i].devices);
      free (errors[i]);
      json_decref (keep[i]);
    }
  free (entries);
  free (eptrs);
  free (cr);
  free (keep);
  free (errors);
  refs_free (refs, n);
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__free_unpacked (in, NULL);
  return code;
}

static grpc_status_code
h_prepare (void *ctx, const uint8_t *req, size_t len, uint8_t **resp, size_t *resp_len, char **details)
{
  return prepare_common (ctx, req, len, resp, resp_len, details, false);
}

static grpc_status_code
h_prepare_beta (void *ctx, const uint8_t *req, size_t len, uint8_t **resp, size_t *resp_len, char **details)
{
  return prepare_common (ctx, req, len, resp, resp_len, details, true);
}

static grpc_status_code
h_unprepare (void *ctx, const uint8_t *req, size_t len, uint8_t **resp, size_t *resp_len, char **details)
{
  struct nrm_plugin *p = ctx;
  UnprepareRequest *in
      = k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__unpack (NULL, len, req);
  if (in == NULL)
    return nrm_plugin_bad_request (details, "NodeUnprepareResourcesRequest cannot be decoded");
  struct claim_ref *refs = NULL;
  if (check_claims (in->claims, in->n_claims, &refs, details) < 0)
    {
      k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__free_unpacked (in, NULL);
      return GRPC_STATUS_INVALID_ARGUMENT;
    }
  size_t n = in->n_claims, n_out = 0;
  UnprepareResponse out = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_RESPONSE__INIT;
  UnprepareEntry *entries = xcalloc (n + 1, sizeof (*entries));
  UnprepareEntry **eptrs = xcalloc (n + 1, sizeof (*eptrs));
  UnprepareClaimResponse *cr = xcalloc (n + 1, sizeof (*cr));
  char **errors = xcalloc (n + 1, sizeof (char *));
  for (size_t i = 0; i < n; i++)
    {
      if (repeated (refs, i))
        continue;
      nrm_error_t err = NULL;
      k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__claims_entry__init (&entries[n_out]);
      k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resource_response__init (&cr[n_out]);
      entries[n_out].key = refs[i].uid;
      entries[n_out].value = &cr[n_out];
      eptrs[n_out] = &entries[n_out];
      struct timespec t0;
      clock_gettime (CLOCK_MONOTONIC, &t0);
      /* The namespace and name are not needed to unprepare, but a reference
       * that prepare would refuse is refused here too. */
      int ur = refs[i].bad ? nrm_error_set (&err, EINVAL, "%s", refs[i].bad) : unprepare_claim (p, refs[i].uid, &err);
      nrm_plugin_record (p, &p->metrics.unprepare, &t0, err);
      if (ur < 0)
        {
          cleanup_free char *msg = xasprintf ("%s: claim %s: %s", p->driver, refs[i].uid, nrm_error_msg (err));
          errors[n_out] = nrm_text_bound (msg, MAX_REPLY_ERROR);
          cr[n_out].error = errors[n_out];
          LOG (p, NRM_LOG_WARNING, "unprepare: %s", cr[n_out].error);
          nrm_error_release (&err);
        }
      n_out++;
    }
  out.n_claims = n_out;
  out.claims = eptrs;
  grpc_status_code code = pack_reply (&out.base, resp, resp_len);
  for (size_t i = 0; i < n_out; i++)
    free (errors[i]);
  free (errors);
  free (entries);
  free (eptrs);
  free (cr);
  refs_free (refs, n);
  k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__free_unpacked (in, NULL);
  /* A released claim's memory goes back to the system, not only to malloc
   * (docs/plugin.md, memory). */
  malloc_trim (0);
  return code;
}

static grpc_status_code
h_get_info (void *ctx, const uint8_t *req, size_t len, uint8_t **resp, size_t *resp_len, char **details)
{
  struct nrm_plugin *p = ctx;
  static char *versions[] = { "v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth" };
  Pluginregistration__InfoRequest *in = pluginregistration__info_request__unpack (NULL, len, req);
  if (in == NULL)
    return nrm_plugin_bad_request (details, "InfoRequest cannot be decoded");
  pluginregistration__info_request__free_unpacked (in, NULL);
  Pluginregistration__PluginInfo info = PLUGINREGISTRATION__PLUGIN_INFO__INIT;
  info.type = "DRAPlugin";
  info.name = p->driver;
  info.endpoint = p->dra_sock;
  info.n_supported_versions = 3;
  info.supported_versions = versions;
  return pack_reply (&info.base, resp, resp_len);
}

static grpc_status_code
h_notify (void *ctx, const uint8_t *req, size_t len, uint8_t **resp, size_t *resp_len, char **details)
{
  struct nrm_plugin *p = ctx;
  Pluginregistration__RegistrationStatus *in = pluginregistration__registration_status__unpack (NULL, len, req);
  if (in == NULL)
    return nrm_plugin_bad_request (details, "RegistrationStatus cannot be decoded");
  __atomic_store_n (&p->registered, in->plugin_registered ? 1 : 0, __ATOMIC_SEQ_CST);
  if (in->plugin_registered)
    LOG (p, NRM_LOG_INFO, "%s: registered with the kubelet", p->driver);
  else
    LOG (p, NRM_LOG_ERROR, "%s: the kubelet refused the registration: %s", p->driver,
         in->error && *in->error ? in->error : "(no reason given)");
  pluginregistration__registration_status__free_unpacked (in, NULL);
  Pluginregistration__RegistrationStatusResponse out = PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;
  return pack_reply (&out.base, resp, resp_len);
}

/* --- lifecycle ------------------------------------------------------------------- */

/* Sockets that instances with other UIDs left when they died (killed, or
 * the node went down): a pod UID never comes back, so nothing else would
 * remove them, and the kubelet would try to register them again and again.
 * An instance lock that can be taken proves that its instance is gone; it
 * is removed last, while held. */
static void
remove_dead_twins (struct nrm_plugin *p, const char *reg_dir)
{
  DIR *d = opendir (p->state_dir);
  if (d == NULL)
    return;
  static const char suffix[] = ".instance.lock";
  const char *own = strrchr (p->instance_lock, '/') + 1;
  size_t pl = strlen (p->driver), sl = sizeof (suffix) - 1;
  struct dirent *e;
  while ((e = readdir (d)) != NULL)
    {
      size_t n = strlen (e->d_name);
      if (n <= pl + 1 + sl || strncmp (e->d_name, p->driver, pl) != 0 || e->d_name[pl] != '-'
          || strcmp (e->d_name + n - sl, suffix) != 0 || strcmp (e->d_name, own) == 0)
        continue;
      cleanup_free char *uid = xstrndup (e->d_name + pl + 1, n - pl - 1 - sl);
      if (!nrm_is_dns_label (uid))
        continue;
      cleanup_free char *path = xasprintf ("%s/%s", p->state_dir, e->d_name);
      cleanup_close int fd = open (path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0 || flock (fd, LOCK_EX | LOCK_NB) < 0)
        continue;
      cleanup_free char *dra = xasprintf ("%s/dra-%s.sock", p->plugin_dir, uid);
      cleanup_free char *reg = xasprintf ("%s/%s-%s-reg.sock", reg_dir, p->driver, uid);
      bool left = unlink (dra) == 0;
      left |= unlink (reg) == 0;
      unlink (path);
      if (left)
        LOG (p, NRM_LOG_INFO, "%s: removed the sockets of instance %s, which is gone", p->driver, uid);
    }
  closedir (d);
}

static void
plugin_free (struct nrm_plugin *p)
{
  free (p->driver);
  free (p->node_name);
  free (p->cdi_dir);
  free (p->state_dir);
  free (p->plugin_dir);
  free (p->dra_sock);
  free (p->reg_sock);
  free (p->checkpoint);
  free (p->serialize_lock);
  free (p->instance_lock);
  json_decref (p->cp);
  json_decref (p->devices);
  json_decref (p->health_seen);
  free (p->streams);
  if (p->instance_fd >= 0)
    close (p->instance_fd);
  if (p->serialize_fd >= 0)
    close (p->serialize_fd);
  if (p->estop >= 0)
    close (p->estop);
  pthread_mutex_destroy (&p->lock);
  pthread_mutex_destroy (&p->queue_lock);
  pthread_mutex_destroy (&p->answers_lock);
  json_decref (p->answers);
  pthread_cond_destroy (&p->queue_cond);
  pthread_cond_destroy (&p->turn);
  pthread_mutex_destroy (&p->hlock);
  pthread_mutex_destroy (&p->mlock);
  pthread_cond_destroy (&p->hcond);
  free (p);
}

int
nrm_plugin_start (const struct nrm_plugin_config *cfg, const struct nrm_driver_ops *ops, void *self,
                  struct nrm_plugin **ret, nrm_error_t *err)
{
  struct nrm_plugin *p = xcalloc (1, sizeof (*p));
  cleanup_free char *plugin_dir = NULL, *reg_dir = NULL;
  const char *uid = cfg->instance_uid;

  p->cfg = *cfg;
  p->ops = ops;
  p->self = self;
  p->instance_fd = p->serialize_fd = p->estop = -1;
  p->registered = -1;
  pthread_mutex_init (&p->lock, NULL);
  pthread_mutex_init (&p->queue_lock, NULL);
  pthread_mutex_init (&p->answers_lock, NULL);
  pthread_cond_init (&p->queue_cond, NULL);
  pthread_cond_init (&p->turn, NULL);
  p->queue_tail = &p->queue;
  pthread_mutex_init (&p->hlock, NULL);
  pthread_mutex_init (&p->mlock, NULL);
  pthread_cond_init (&p->hcond, NULL);
  if (!nrm_is_dns_subdomain (cfg->driver, 63))
    {
      plugin_free (p);
      return nrm_error_set (err, EINVAL, "driver name `%s` is not a DNS subdomain", cfg->driver ? cfg->driver : "");
    }
  if (uid && !nrm_is_dns_label (uid))
    {
      plugin_free (p);
      return nrm_error_set (err, EINVAL, "instance UID `%s` is not a DNS label", uid);
    }
  struct nrm_pool pool = { 0 };
  if (ops->pool (self, NULL, &pool, err) < 0)
    {
      plugin_free (p);
      return nrm_error_wrap (err, "%s", cfg->driver);
    }
  p->devices = json_array ();
  size_t di;
  json_t *dev;
  json_array_foreach (pool.devices, di, dev) { json_array_append (p->devices, json_object_get (dev, "name")); }
  nrm_pool_done (&pool);
  p->driver = xstrdup (cfg->driver);
  p->node_name = xstrdup (cfg->node_name);
  p->cdi_dir = xstrdup (cfg->cdi_dir);
  p->state_dir = xstrdup (cfg->state_dir);
  plugin_dir = xasprintf ("%s/plugins/%s", cfg->kubelet_dir, cfg->driver);
  p->plugin_dir = xstrdup (plugin_dir);
  reg_dir = xasprintf ("%s/plugins_registry", cfg->kubelet_dir);
  p->dra_sock = xasprintf ("%s/dra%s%s.sock", plugin_dir, uid ? "-" : "", uid ? uid : "");
  p->reg_sock = xasprintf ("%s/%s%s%s-reg.sock", reg_dir, cfg->driver, uid ? "-" : "", uid ? uid : "");
  p->checkpoint = nrm_checkpoint_path (cfg->state_dir, cfg->driver);
  p->serialize_lock = xasprintf ("%s/%s.serialize.lock", cfg->state_dir, cfg->driver);
  p->instance_lock = xasprintf ("%s/%s%s%s.instance.lock", cfg->state_dir, cfg->driver, uid ? "-" : "", uid ? uid : "");
  if (cfg->local)
    {
      /* Only the shared state: another instance may be serving. */
      if (nrm_mkdir_p (cfg->state_dir, 0700, err) < 0 || nrm_plugin_locks_open (p, err) < 0)
        {
          plugin_free (p);
          return -1;
        }
      *ret = p;
      return 0;
    }
  if (nrm_mkdir_p (plugin_dir, 0750, err) < 0 || nrm_mkdir_p (reg_dir, 0750, err) < 0
      || nrm_mkdir_p (cfg->state_dir, 0700, err) < 0 || nrm_mkdir_p (cfg->cdi_dir, 0755, err) < 0)
    {
      plugin_free (p);
      return -1;
    }
  if (nrm_plugin_locks_open (p, err) < 0 || recover (p, err) < 0)
    {
      plugin_free (p);
      return -1;
    }

  const struct nrm_grpc_method dra[] = {
    { "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources", h_prepare, NULL, p },
    { "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources", h_unprepare, NULL, p },
    { "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources", h_prepare_beta, NULL, p },
    { "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources", h_unprepare, NULL, p },
    { "/v1alpha1.DRAResourceHealth/NodeWatchResources", NULL, nrm_plugin_health_watch, p },
  };
  const struct nrm_grpc_method reg[] = {
    { "/pluginregistration.Registration/GetInfo", h_get_info, NULL, p },
    { "/pluginregistration.Registration/NotifyRegistrationStatus", h_notify, NULL, p },
  };
  /* Our own stale sockets (a crash) are replaced; the instance lock proves
   * nobody else serves them. */
  unlink (p->dra_sock);
  unlink (p->reg_sock);
  remove_dead_twins (p, reg_dir);
  if (nrm_grpc_server_start (p->dra_sock, dra, sizeof (dra) / sizeof (dra[0]), cfg->threads, &p->dra, err) < 0)
    {
      plugin_free (p);
      return -1;
    }
  nrm_plugin_health_start (p);
  if (nrm_grpc_server_start (p->reg_sock, reg, sizeof (reg) / sizeof (reg[0]), 1, &p->reg, err) < 0)
    {
      p->reg = NULL;
      nrm_plugin_stop (p);
      return -1;
    }
  *ret = p;
  return 0;
}

json_t *
nrm_plugin_prepare (struct nrm_plugin *p, const char *ns, const char *name, const char *uid, nrm_error_t *err)
{
  return prepare_claim (p, ns, name, uid, err);
}

int
nrm_plugin_prepare_local (struct nrm_plugin *p, const char *ns, const char *name, const char *uid,
                          nrm_plugin_choose_fn choose, void *ctx, struct nrm_plugin_prepared *out, nrm_error_t *err)
{
  struct nrm_plugin_op o = { .ns = ns, .name = name, .uid = uid, .choose = choose, .choose_ctx = ctx };
  memset (out, 0, sizeof (*out));
  nrm_plugin_submit (p, &o);
  if (o.err == NULL && o.prep.state == NULL)
    nrm_error_set (&o.err, EEXIST, "claim %s was prepared already", uid);
  if (o.err == NULL)
    {
      out->devices = TAKE_PTR (o.devs);
      out->state = json_incref (o.prep.state);
      out->edits = TAKE_PTR (o.edits);
      out->limits = o.prep.edits.limits;
    }
  nrm_prepared_done (&o.prep);
  nrm_allocation_done (&o.a);
  json_decref (o.claim);
  json_decref (o.edits);
  json_decref (o.devs);
  if (o.err)
    {
      *err = o.err;
      return -1;
    }
  if (p->cfg.on_change)
    p->cfg.on_change (p->cfg.on_change_ctx);
  return 0;
}

void
nrm_plugin_prepared_done (struct nrm_plugin_prepared *out)
{
  json_decref (out->devices);
  json_decref (out->state);
  json_decref (out->edits);
  memset (out, 0, sizeof (*out));
}

int
nrm_plugin_unprepare (struct nrm_plugin *p, const char *uid, nrm_error_t *err)
{
  return unprepare_claim (p, uid, err);
}

void
nrm_plugin_stop (struct nrm_plugin *p)
{
  if (p == NULL)
    return;
  /* Deregister first: the kubelet stops calling once the socket is gone. */
  if (p->reg)
    {
      unlink (p->reg_sock);
      nrm_grpc_server_stop (p->reg);
    }
  nrm_plugin_health_stop (p);
  if (p->dra)
    {
      nrm_grpc_server_stop (p->dra);
      unlink (p->dra_sock);
    }
  plugin_free (p);
}

int
nrm_plugin_registered (struct nrm_plugin *p)
{
  return __atomic_load_n (&p->registered, __ATOMIC_SEQ_CST);
}

const char *
nrm_plugin_dra_socket (struct nrm_plugin *p)
{
  return p->dra_sock;
}

const char *
nrm_plugin_instance_lock (struct nrm_plugin *p)
{
  return p->instance_lock;
}

const char *
nrm_plugin_registration_socket (struct nrm_plugin *p)
{
  return p->reg_sock;
}
