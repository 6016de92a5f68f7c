/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "driver/k8s/publish.h"
#include "nrm/base/quantity.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/clock.h"
#include "nrm/base/xalloc.h"

#define SLICES_PATH "/apis/resource.k8s.io/v1/resourceslices"
/* generateName: the API server cuts it to 58 characters and appends 5
 * (its SimpleNameGenerator keeps generated names within 63). */
#define GENERATE_PREFIX_MAX 58
#define SUFFIX_LEN 5
#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 60000

struct nrm_publisher
{
  struct nrm_kube *kube;
  char *driver, *node;
  int resync_s;
  nrm_log_fn log;
  void *log_ctx;
  bool (*may_write) (void *ctx);
  void *may_write_ctx;
  pthread_t thread;
  int wake; /* eventfd: new desired slices, or stop */

  pthread_mutex_t lock; /* the fields below, shared with other threads */
  json_t *desired;      /* array of slices; replaced by update */
  bool desired_changed, stop;
  struct nrm_publisher_status st;

  /* Thread-private. */
  char *node_uid;
  json_t *cache;    /* name -> slice, as list and watch report them */
  json_t *work;     /* the desired slices being reconciled */
  json_t *accepted; /* per slot: the spec the server kept when it dropped fields */
  char *rv;         /* resourceVersion to watch from */
  bool need_list, dirty;
  int backoff_ms;
  unsigned refused; /* watches turned away with 429 in a row */
};

#define LOG(p, level, ...) NRM_LOG_TO ((p)->log, (p)->log_ctx, level, __VA_ARGS__)

static long long
now_ms (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void set_status (struct nrm_publisher *p, int synced, int connected, const char *fmt, ...)
    __attribute__ ((format (printf, 4, 5)));

static void
set_status (struct nrm_publisher *p, int synced, int connected, const char *fmt, ...)
{
  char *msg = NULL;
  if (fmt)
    {
      va_list ap;
      va_start (ap, fmt);
      msg = xvasprintf (fmt, ap);
      va_end (ap);
    }
  pthread_mutex_lock (&p->lock);
  if (synced >= 0)
    p->st.synced = synced;
  if (connected >= 0)
    p->st.connected = connected;
  if (fmt)
    p->st.errors++;
  if (fmt || synced == 1)
    {
      free (p->st.error);
      p->st.error = msg;
    }
  pthread_mutex_unlock (&p->lock);
  if (msg)
    LOG (p, NRM_LOG_ERROR, "%s", msg);
}

/* --- comparing --------------------------------------------------------- */

static bool
quantity_key (const char *key)
{
  static const char *const keys[] = { "value", "default", "min", "max", "step", "validValues", NULL };
  for (const char *const *k = keys; key && *k; k++)
    if (strcmp (key, *k) == 0)
      return true;
  return false;
}

static bool
equal (json_t *a, json_t *b, const char *key)
{
  if (json_is_string (a) && json_is_string (b) && quantity_key (key))
    {
      /* The server stores quantities in canonical form ("1024Mi" -> "1Gi"). */
      nrm_quantity_t x, y;
      nrm_error_t e1 = NULL, e2 = NULL;
      bool same = strcmp (json_string_value (a), json_string_value (b)) == 0
                  || (nrm_quantity_parse (json_string_value (a), &x, &e1) == 0
                      && nrm_quantity_parse (json_string_value (b), &y, &e2) == 0 && x == y);
      nrm_error_release (&e1);
      nrm_error_release (&e2);
      return same;
    }
  if (json_is_object (a) && json_is_object (b))
    {
      const char *k;
      json_t *v;
      size_t na = 0, nb = 0;
      json_object_foreach (a, k, v)
      {
        if (strcmp (k, "timeAdded") == 0) /* set by the server */
          continue;
        na++;
        if (!equal (v, json_object_get (b, k), k))
          return false;
      }
      json_object_foreach (b, k, v)
      {
        if (strcmp (k, "timeAdded") != 0)
          nb++;
      }
      return na == nb;
    }
  if (json_is_array (a) && json_is_array (b))
    {
      if (json_array_size (a) != json_array_size (b))
        return false;
      for (size_t i = 0; i < json_array_size (a); i++)
        if (!equal (json_array_get (a, i), json_array_get (b, i), key))
          return false;
      return true;
    }
  return json_equal (a, b);
}

bool
nrm_slice_spec_equal (json_t *a, json_t *b)
{
  return a && b && equal (a, b, NULL);
}

static const char *
gate_of (const char *key, json_t *value, const char *parent)
{
  static const struct
  {
    const char *key, *gate;
  } gates[] = {
    { "sharedCounters", "DRAPartitionableDevices" },
    { "perDeviceNodeSelection", "DRAPartitionableDevices" },
    { "consumesCounters", "DRAPartitionableDevices" },
    { "taints", "DRADeviceTaints" },
    { "bindsToNode", "DRADeviceBindingConditions" },
    { "bindingConditions", "DRADeviceBindingConditions" },
    { "bindingFailureConditions", "DRADeviceBindingConditions" },
    { "allowMultipleAllocations", "DRAConsumableCapacity" },
    { "requestPolicy", "DRAConsumableCapacity" },
    { "nodeAllocatableResourceMappings", "DRANodeAllocatableResources" },
    { "nodeAllocatableResources", "DRANodeAllocatableResources" },
  };
  for (size_t i = 0; i < sizeof (gates) / sizeof (gates[0]); i++)
    if (strcmp (key, gates[i].key) == 0)
      return gates[i].gate;
  if (parent && strcmp (parent, "attributes") == 0
      && (json_object_get (value, "ints") || json_object_get (value, "bools") || json_object_get (value, "strings")
          || json_object_get (value, "versions")))
    return "DRAListTypeAttributes";
  return NULL;
}

static char *
dropped (json_t *sent, json_t *stored, const char *path, const char *parent, const char **gate)
{
  char *r = NULL;
  if (json_is_object (sent))
    {
      const char *k;
      json_t *v;
      json_object_foreach (sent, k, v)
      {
        json_t *s = json_object_get (stored, k);
        cleanup_free char *sub = xasprintf ("%s.%s", path, k);
        if (s == NULL && !json_is_null (v))
          {
            *gate = gate_of (k, v, parent);
            return TAKE_PTR (sub);
          }
        if ((r = dropped (v, s, sub, k, gate)) != NULL)
          return r;
      }
    }
  else if (json_is_array (sent) && json_is_array (stored))
    {
      for (size_t i = 0; i < json_array_size (sent) && i < json_array_size (stored); i++)
        {
          cleanup_free char *sub = xasprintf ("%s[%zu]", path, i);
          if ((r = dropped (json_array_get (sent, i), json_array_get (stored, i), sub, parent, gate)) != NULL)
            return r;
        }
    }
  return NULL;
}

char *
nrm_slice_dropped_field (json_t *sent, json_t *stored, const char **gate)
{
  *gate = NULL;
  return dropped (sent, stored, "spec", NULL, gate);
}

/* --- API calls ----------------------------------------------------------- */

/* A request or watch that got no answer, or one that says the server
 * cannot or will not serve nrm (not a conflict or a missing object). */
static void
count_api_error (struct nrm_publisher *p, long code)
{
  if (code > 0 && code != 401 && code != 403 && code != 429 && code < 500)
    return;
  pthread_mutex_lock (&p->lock);
  p->st.api_errors++;
  pthread_mutex_unlock (&p->lock);
}

/* nrm_kube_call that keeps the connected flag and the error count of the
 * status. */
static int
call (struct nrm_publisher *p, const char *method, const char *path, json_t *body, json_t **ret, nrm_error_t *err)
{
  int code = nrm_kube_call (p->kube, method, path, body, ret, err);
  set_status (p, -1, code > 0 && code != 401 && code != 403, NULL);
  count_api_error (p, code);
  return code;
}

static const char *
slice_name (json_t *s)
{
  return json_string_value (json_object_get (json_object_get (s, "metadata"), "name"));
}

static long long
slice_generation (json_t *s)
{
  return json_integer_value (json_object_get (json_object_get (json_object_get (s, "spec"), "pool"), "generation"));
}

static int
get_node_uid (struct nrm_publisher *p, nrm_error_t *err)
{
  cleanup_free char *path = xasprintf ("/api/v1/nodes/%s", p->node);
  cleanup_json json_t *node = NULL;
  int code = call (p, "GET", path, NULL, &node, err);
  if (code < 0)
    return nrm_error_wrap (err, "Node %s", p->node);
  if (code != 200)
    return nrm_error_set (err, code == 404 ? ENOENT : EIO, "Node %s: HTTP %d: %s", p->node, code,
                          nrm_kube_status_message (node, code));
  const char *uid = json_string_value (json_object_get (json_object_get (node, "metadata"), "uid"));
  if (uid == NULL || *uid == '\0')
    return nrm_error_set (err, EPROTO, "Node %s has no metadata.uid", p->node);
  free (p->node_uid);
  p->node_uid = xstrdup (uid);
  return 0;
}

static char *
selector_query (struct nrm_publisher *p)
{
  /* Both values are DNS subdomains: nothing to escape. */
  return xasprintf ("fieldSelector=spec.nodeName%%3D%s%%2Cspec.driver%%3D%s", p->node, p->driver);
}

static bool
ours (struct nrm_publisher *p, json_t *s)
{
  json_t *spec = json_object_get (s, "spec");
  const char *d = json_string_value (json_object_get (spec, "driver"));
  const char *n = json_string_value (json_object_get (spec, "nodeName"));
  return slice_name (s) && d && n && strcmp (d, p->driver) == 0 && strcmp (n, p->node) == 0;
}

/* Replaces the cache with a fresh list (all pages). */
static int
list_slices (struct nrm_publisher *p, nrm_error_t *err)
{
  cleanup_free char *sel = selector_query (p);
  cleanup_json json_t *cache = json_object ();
  cleanup_free char *cont = NULL, *rv = NULL;
  do
    {
      cleanup_free char *path
          = xasprintf (SLICES_PATH "?%s&limit=500%s%s", sel, cont ? "&continue=" : "", cont ? cont : "");
      cleanup_json json_t *list = NULL;
      int code = call (p, "GET", path, NULL, &list, err);
      if (code < 0)
        return nrm_error_wrap (err, "listing ResourceSlices");
      if (code != 200)
        return nrm_error_set (err, EIO, "listing ResourceSlices: HTTP %d: %s", code,
                              nrm_kube_status_message (list, code));
      size_t i;
      json_t *s;
      json_array_foreach (json_object_get (list, "items"), i, s)
      {
        if (ours (p, s))
          json_object_set (cache, slice_name (s), s);
      }
      json_t *meta = json_object_get (list, "metadata");
      const char *c = json_string_value (json_object_get (meta, "continue"));
      const char *r = json_string_value (json_object_get (meta, "resourceVersion"));
      free (cont);
      cont = NULL;
      if (c && *c)
        {
          /* Continue tokens are base64: escape them for the query. */
          cont = nrm_kube_escape (c);
          if (cont == NULL)
            return nrm_error_set (err, ENOMEM, "listing ResourceSlices: libcurl cannot escape the continue token");
        }
      if (rv == NULL && r)
        rv = xstrdup (r);
    }
  while (cont);
  if (rv == NULL)
    return nrm_error_set (err, EPROTO, "listing ResourceSlices: the answer has no resourceVersion");
  json_decref (p->cache);
  p->cache = TAKE_PTR (cache);
  free (p->rv);
  p->rv = TAKE_PTR (rv);
  return 0;
}

/* --- reconciling ---------------------------------------------------------- */

/* The slice's name and "-", cut as the server cuts it, so that in_slot()
 * knows the names the server gives. The index and the driver lead the name:
 * two slots never share a cut prefix. */
static char *
generate_prefix (json_t *desired)
{
  const char *name = slice_name (desired);
  char *prefix = xasprintf ("%s-", name ? name : "");
  if (strlen (prefix) > GENERATE_PREFIX_MAX)
    prefix[GENERATE_PREFIX_MAX] = '\0';
  return prefix;
}

static bool
in_slot (const char *name, const char *prefix)
{
  size_t pl = strlen (prefix);
  return strncmp (name, prefix, pl) == 0 && strlen (name) == pl + SUFFIX_LEN;
}

static json_t *
desired_spec (json_t *d, long long generation)
{
  json_t *spec = json_deep_copy (json_object_get (d, "spec"));
  if (spec)
    json_object_set_new (json_object_get (spec, "pool"), "generation", json_integer (generation));
  return spec;
}

static int
write_slot (struct nrm_publisher *p, size_t slot, json_t *current, long long generation, bool *dropped_any,
            nrm_error_t *err)
{
  json_t *want = json_array_get (p->work, slot);
  cleanup_free char *prefix = generate_prefix (want), *path = NULL;
  cleanup_json json_t *body
      = json_pack ("{s:s, s:s, s:{s:[{s:s, s:s, s:s, s:s, s:b}]}, s:o}", "apiVersion", "resource.k8s.io/v1", "kind",
                   "ResourceSlice", "metadata", "ownerReferences", "apiVersion", "v1", "kind", "Node", "name", p->node,
                   "uid", p->node_uid, "controller", 1, "spec", desired_spec (want, generation));
  cleanup_json json_t *answer = NULL;
  json_t *meta = json_object_get (body, "metadata");
  const char *method = "POST";
  if (current)
    {
      method = "PUT";
      json_object_set (meta, "name", json_object_get (json_object_get (current, "metadata"), "name"));
      json_object_set (meta, "resourceVersion",
                       json_object_get (json_object_get (current, "metadata"), "resourceVersion"));
      path = xasprintf (SLICES_PATH "/%s", slice_name (current));
    }
  else
    {
      json_object_set_new (meta, "generateName", json_string (prefix));
      path = xstrdup (SLICES_PATH);
    }
  const char *what = current ? slice_name (current) : prefix;
  int code = call (p, method, path, body, &answer, err);
  if (code < 0)
    return nrm_error_wrap (err, "%s ResourceSlice %s", current ? "updating" : "creating", what);
  if (code == 409 || code == 404)
    {
      /* Someone else changed it: start again from a fresh list. */
      p->need_list = true;
      return nrm_error_set (err, EAGAIN, "ResourceSlice %s changed meanwhile (HTTP %d); listing again", what, code);
    }
  if (code != 200 && code != 201)
    return nrm_error_set (err, EIO, "%s ResourceSlice %s: HTTP %d: %s", current ? "updating" : "creating", what, code,
                          nrm_kube_status_message (answer, code));
  const char *name = slice_name (answer);
  if (name == NULL)
    return nrm_error_set (err, EPROTO, "ResourceSlice %s: the answer has no name", what);

  const char *gate = NULL;
  json_t *sent_spec = json_object_get (body, "spec"), *stored_spec = json_object_get (answer, "spec");
  cleanup_free char *field = nrm_slice_dropped_field (sent_spec, stored_spec, &gate);
  if (field)
    {
      /* Writing again would not help: remember what the server keeps. */
      json_array_set (p->accepted, slot, stored_spec);
      *dropped_any = true;
      set_status (p, 0, -1,
                  "ResourceSlice %s: the API server dropped %s; turn on its feature gate %s there, or leave the "
                  "feature out of nrm's configuration",
                  name, field, gate ? gate : "(unknown)");
    }
  json_object_set (p->cache, name, answer);
  pthread_mutex_lock (&p->lock);
  p->st.writes++;
  pthread_mutex_unlock (&p->lock);
  LOG (p, NRM_LOG_INFO, "%s ResourceSlice %s (pool %s generation %lld)", current ? "updated" : "created", name, p->node,
       generation);
  return 0;
}

static int
delete_slice (struct nrm_publisher *p, json_t *s, nrm_error_t *err)
{
  cleanup_json json_t *answer = NULL;
  cleanup_free char *name = xstrdup (slice_name (s));
  cleanup_free char *path = xasprintf (SLICES_PATH "/%s", name);
  json_t *meta = json_object_get (s, "metadata");
  cleanup_json json_t *opts
      = json_pack ("{s:s, s:s, s:{s:O, s:O}}", "apiVersion", "v1", "kind", "DeleteOptions", "preconditions", "uid",
                   json_object_get (meta, "uid"), "resourceVersion", json_object_get (meta, "resourceVersion"));
  /* The slice as the API server listed it: json_pack() refuses a missing field. */
  if (opts == NULL)
    return nrm_error_set (err, EPROTO, "ResourceSlice %s has no metadata.uid or metadata.resourceVersion", name);
  int code = call (p, "DELETE", path, opts, &answer, err);
  if (code < 0)
    return nrm_error_wrap (err, "deleting ResourceSlice %s", name);
  if (code == 409)
    {
      p->need_list = true;
      return nrm_error_set (err, EAGAIN, "ResourceSlice %s changed meanwhile (HTTP 409); listing again", name);
    }
  if (code != 200 && code != 202 && code != 404)
    return nrm_error_set (err, EIO, "deleting ResourceSlice %s: HTTP %d: %s", name, code,
                          nrm_kube_status_message (answer, code));
  json_object_del (p->cache, name);
  pthread_mutex_lock (&p->lock);
  p->st.writes++;
  pthread_mutex_unlock (&p->lock);
  LOG (p, NRM_LOG_INFO, "deleted obsolete ResourceSlice %s", name);
  return 0;
}

static int
reconcile (struct nrm_publisher *p, nrm_error_t *err)
{
  size_t n = json_array_size (p->work);
  cleanup_free json_t **chosen = xcalloc (n, sizeof (json_t *));
  cleanup_free char **prefixes = xcalloc (n, sizeof (char *));
  cleanup_json json_t *obsolete = json_array ();
  long long max_gen = 0;
  int r = -1;
  for (size_t i = 0; i < n; i++)
    prefixes[i] = generate_prefix (json_array_get (p->work, i));

  /* Each cached slice fills the slot of its index prefix (the newest
   * generation wins); the rest is obsolete. */
  const char *name;
  json_t *s;
  json_object_foreach (p->cache, name, s)
  {
    long long g = slice_generation (s);
    const char *pool
        = json_string_value (json_object_get (json_object_get (json_object_get (s, "spec"), "pool"), "name"));
    size_t slot = n;
    if (g > max_gen)
      max_gen = g;
    if (pool && strcmp (pool, p->node) == 0)
      for (slot = 0; slot < n && !in_slot (name, prefixes[slot]); slot++)
        ;
    if (slot == n)
      json_array_append (obsolete, s);
    else if (chosen[slot] == NULL || g > slice_generation (chosen[slot]))
      {
        if (chosen[slot])
          json_array_append (obsolete, chosen[slot]);
        chosen[slot] = s;
      }
    else
      json_array_append (obsolete, s);
  }

  long long g0 = n && chosen[0] ? slice_generation (chosen[0]) : 0;
  bool in_sync = true;
  for (size_t i = 0; i < n && in_sync; i++)
    {
      if (chosen[i] == NULL || slice_generation (chosen[i]) != g0)
        {
          in_sync = false;
          break;
        }
      cleanup_json json_t *want = desired_spec (json_array_get (p->work, i), g0);
      json_t *have = json_object_get (chosen[i], "spec");
      in_sync = nrm_slice_spec_equal (want, have) || nrm_slice_spec_equal (json_array_get (p->accepted, i), have);
    }

  /* Generations only grow, also when every slice was deleted meanwhile. */
  pthread_mutex_lock (&p->lock);
  if (p->st.generation > max_gen)
    max_gen = p->st.generation;
  pthread_mutex_unlock (&p->lock);
  long long target = in_sync ? g0 : max_gen + 1;
  bool dropped_any = false;
  if (!in_sync)
    {
      if (p->node_uid == NULL && get_node_uid (p, err) < 0)
        goto out;
      for (size_t i = 0; i < n; i++)
        {
          /* Hold a reference: the cache entry is replaced by the write. */
          cleanup_json json_t *cur = json_incref (chosen[i]);
          if (write_slot (p, i, cur, target, &dropped_any, err) < 0)
            goto out;
        }
    }
  else
    for (size_t i = 0; i < n; i++)
      dropped_any |= json_array_get (p->accepted, i) != NULL && !json_is_null (json_array_get (p->accepted, i));

  size_t i;
  json_array_foreach (obsolete, i, s)
  {
    if (delete_slice (p, s, err) < 0)
      goto out;
  }

  pthread_mutex_lock (&p->lock);
  p->st.generation = target;
  pthread_mutex_unlock (&p->lock);
  if (!dropped_any)
    set_status (p, 1, -1, NULL);
  if (!in_sync || json_array_size (obsolete))
    LOG (p, NRM_LOG_INFO, "ResourceSlices of %s pool %s %s at generation %lld (%zu slices)", p->driver, p->node,
         dropped_any ? "published without the fields the API server dropped" : "are in sync", target, n);
  r = 0;
out:
  for (size_t j = 0; j < n; j++)
    free (prefixes[j]);
  return r;
}

/* --- the thread ------------------------------------------------------------ */

static long long
rv_number (json_t *obj)
{
  const char *rv = json_string_value (json_object_get (json_object_get (obj, "metadata"), "resourceVersion"));
  return rv ? strtoll (rv, NULL, 10) : 0;
}

static int
on_event (void *ctx, const char *type, json_t *obj)
{
  struct nrm_publisher *p = ctx;
  const char *rv = json_string_value (json_object_get (json_object_get (obj, "metadata"), "resourceVersion"));
  if (strcmp (type, "ERROR") == 0)
    {
      /* 410 Expired: the history is gone; anything else: start over too. */
      long code = (long) json_integer_value (json_object_get (obj, "code"));
      LOG (p, code == 410 ? NRM_LOG_DEBUG : NRM_LOG_WARNING, "ResourceSlice watch of %s: %s; listing again", p->driver,
           nrm_kube_status_message (obj, (int) code));
      p->need_list = true;
      return -1;
    }
  if (rv && *rv)
    {
      free (p->rv);
      p->rv = xstrdup (rv);
    }
  if (strcmp (type, "BOOKMARK") == 0 || !ours (p, obj))
    return 0;
  const char *name = slice_name (obj);
  json_t *cached = json_object_get (p->cache, name);
  if (strcmp (type, "DELETED") == 0)
    json_object_del (p->cache, name);
  else if (cached == NULL || rv_number (obj) >= rv_number (cached))
    json_object_set (p->cache, name, obj); /* older news than a write's answer is ignored */
  p->dirty = true;
  return 0;
}

/* Waits for the wake fd at most ms; takes new desired slices. Returns
 * false when the publisher is stopping. */
static bool
wait_wake (struct nrm_publisher *p, int ms)
{
  struct pollfd pfd = { .fd = p->wake, .events = POLLIN };
  if (ms > 0)
    poll (&pfd, 1, ms);
  uint64_t v;
  if (read (p->wake, &v, sizeof (v)) < 0 && errno != EAGAIN)
    return false;
  pthread_mutex_lock (&p->lock);
  bool stop = p->stop;
  if (p->desired_changed)
    {
      json_decref (p->work);
      p->work = json_incref (p->desired);
      json_decref (p->accepted);
      p->accepted = json_array ();
      for (size_t i = 0; i < json_array_size (p->work); i++)
        json_array_append_new (p->accepted, json_null ());
      p->desired_changed = false;
      p->dirty = true;
    }
  pthread_mutex_unlock (&p->lock);
  return !stop;
}

static bool
stopping (struct nrm_publisher *p)
{
  pthread_mutex_lock (&p->lock);
  bool stop = p->stop;
  pthread_mutex_unlock (&p->lock);
  return stop;
}

static void
failed (struct nrm_publisher *p, nrm_error_t *err)
{
  /* Requests cut short by a stop are no error. */
  if (stopping (p))
    {
      nrm_error_release (err);
      return;
    }
  bool conflict = (*err)->status == EAGAIN;
  if (conflict)
    LOG (p, NRM_LOG_INFO, "%s", nrm_error_msg (*err));
  else
    set_status (p, 0, -1, "%s", nrm_error_msg (*err));
  nrm_error_release (err);
  /* A conflict is retried at once from a fresh list; errors back off with
   * jitter, doubling up to a minute. */
  int ms = conflict ? 50 : p->backoff_ms;
  if (!conflict)
    {
      ms = p->backoff_ms / 2 + (int) nrm_random_below ((unsigned) p->backoff_ms + 1);
      p->backoff_ms = p->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : p->backoff_ms * 2;
    }
  wait_wake (p, ms);
}

static void *
thread_main (void *arg)
{
  struct nrm_publisher *p = arg;
  struct nrm_kube_watch *w = NULL;
  long long next_list = 0;
  p->need_list = true;
  p->backoff_ms = BACKOFF_MIN_MS;

  while (wait_wake (p, 0))
    {
      nrm_error_t err = NULL;
      bool standby = p->may_write && !p->may_write (p->may_write_ctx);
      pthread_mutex_lock (&p->lock);
      p->st.standby = standby;
      if (standby)
        p->st.synced = false;
      pthread_mutex_unlock (&p->lock);
      if (standby)
        {
          /* Not even a watch: its events would only make work. The cache
           * is listed afresh when the role comes back. */
          nrm_kube_watch_close (w);
          w = NULL;
          p->need_list = true;
          wait_wake (p, 1000);
          continue;
        }
      if (now_ms () >= next_list)
        p->need_list = true;
      if (p->need_list)
        {
          nrm_kube_watch_close (w);
          w = NULL;
          if (list_slices (p, &err) < 0)
            {
              failed (p, &err);
              continue;
            }
          p->need_list = false;
          p->dirty = true;
          /* A Node deleted and created again has a new UID: slices owned by
           * the old one would be garbage-collected. Read it again. */
          free (p->node_uid);
          p->node_uid = NULL;
          next_list = now_ms () + p->resync_s * 1000LL;
        }
      if (p->dirty)
        {
          if (reconcile (p, &err) < 0)
            {
              failed (p, &err);
              continue;
            }
          p->dirty = false;
          p->backoff_ms = BACKOFF_MIN_MS;
        }
      if (w == NULL)
        {
          cleanup_free char *sel = selector_query (p), *path = NULL;
          /* The server ends the watch after timeoutSeconds; spread them. */
          path = xasprintf (SLICES_PATH "?%s&watch=true&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=%u",
                            sel, p->rv, 300 + nrm_random_below (NRM_KUBE_WATCH_TIMEOUT_MAX_S - 300 + 1));
          if (nrm_kube_watch_open (p->kube, path, on_event, p, &w, &err) < 0)
            {
              count_api_error (p, -1);
              failed (p, &err);
              continue;
            }
        }
      long status = 0;
      json_t *body = NULL;
      int r = nrm_kube_watch_poll (w, 1000, p->wake, &status, &body, &err);
      if (r == 1)
        {
          p->refused = 0;
          continue;
        }
      nrm_kube_watch_close (w);
      w = NULL;
      if (r < 0)
        {
          json_decref (body);
          if (err == NULL) /* stopped by an ERROR event: need_list is set */
            {
              wait_wake (p, (int) nrm_kube_relist_wait_ms ());
              continue;
            }
          set_status (p, -1, 0, NULL);
          count_api_error (p, -1);
          p->need_list = true;
          failed (p, &err);
          continue;
        }
      if (status == 410)
        {
          p->need_list = true;
          wait_wake (p, (int) nrm_kube_relist_wait_ms ());
        }
      else if (status == 429)
        {
          /* Turned away, not behind: the same watch again, later. */
          count_api_error (p, status);
          LOG (p, NRM_LOG_DEBUG, "ResourceSlice watch of %s: %s; watching again from resourceVersion %s", p->driver,
               nrm_kube_status_message (body, (int) status), p->rv ? p->rv : "(none)");
          long ms = nrm_kube_retry_after_ms (body, &p->refused);
          json_decref (body);
          wait_wake (p, (int) ms);
          continue;
        }
      else if (status != 200)
        {
          set_status (p, -1, status != 401 && status != 403, NULL);
          count_api_error (p, status);
          p->need_list = true;
          nrm_error_set (&err, EIO, "ResourceSlice watch: HTTP %ld: %s", status,
                         nrm_kube_status_message (body, (int) status));
          json_decref (body);
          failed (p, &err);
          continue;
        }
      json_decref (body);
      /* A watch that ended normally resumes from the last resourceVersion
       * (the server ends every watch after a while, and on its restart). */
      if (status == 200)
        LOG (p, NRM_LOG_DEBUG, "ResourceSlice watch of %s ended; watching again from resourceVersion %s", p->driver,
             p->rv ? p->rv : "(none)");
    }
  nrm_kube_watch_close (w);
  return NULL;
}

static int
check_desired (struct nrm_publisher *p, json_t *slices, nrm_error_t *err)
{
  size_t i;
  json_t *s;
  if (!json_is_array (slices))
    return nrm_error_set (err, EINVAL, "desired ResourceSlices are not a list");
  json_array_foreach (slices, i, s)
  {
    const char *d = json_string_value (json_object_get (json_object_get (s, "spec"), "driver"));
    if (slice_name (s) == NULL || d == NULL || strcmp (d, p->driver) != 0)
      return nrm_error_set (err, EINVAL, "desired ResourceSlice %zu is not one of driver %s", i, p->driver);
  }
  return 0;
}

int
nrm_publisher_update (struct nrm_publisher *p, json_t *slices, nrm_error_t *err)
{
  if (check_desired (p, slices, err) < 0)
    return -1;
  cleanup_json json_t *copy = json_deep_copy (slices);
  pthread_mutex_lock (&p->lock);
  json_decref (p->desired);
  p->desired = TAKE_PTR (copy);
  p->desired_changed = true;
  pthread_mutex_unlock (&p->lock);
  uint64_t one = 1;
  if (write (p->wake, &one, sizeof (one)) < 0)
    return nrm_error_errno (err, errno, "waking the publisher");
  return 0;
}

static void
publisher_free (struct nrm_publisher *p)
{
  if (p->wake >= 0)
    close (p->wake);
  pthread_mutex_destroy (&p->lock);
  json_decref (p->desired);
  json_decref (p->work);
  json_decref (p->accepted);
  json_decref (p->cache);
  free (p->st.error);
  free (p->driver);
  free (p->node);
  free (p->node_uid);
  free (p->rv);
  free (p);
}

int
nrm_publisher_start (const struct nrm_publisher_config *cfg, json_t *slices, struct nrm_publisher **ret,
                     nrm_error_t *err)
{
  struct nrm_publisher *p = xcalloc (1, sizeof (*p));
  pthread_mutex_init (&p->lock, NULL);
  p->kube = cfg->kube;
  p->resync_s = cfg->resync_s > 0 ? cfg->resync_s : 600;
  p->log = cfg->log;
  p->log_ctx = cfg->log_ctx;
  p->may_write = cfg->may_write;
  p->may_write_ctx = cfg->may_write_ctx;
  p->driver = xstrdup (cfg->driver);
  p->node = xstrdup (cfg->node_name);
  p->cache = json_object ();
  p->wake = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (p->wake < 0)
    {
      int e = errno;
      publisher_free (p);
      return nrm_error_errno (err, e, "eventfd");
    }
  if (nrm_publisher_update (p, slices, err) < 0)
    {
      publisher_free (p);
      return -1;
    }
  int e = pthread_create (&p->thread, NULL, thread_main, p);
  if (e != 0)
    {
      publisher_free (p);
      return nrm_error_errno (err, e, "starting the ResourceSlice publisher");
    }
  *ret = p;
  return 0;
}

void
nrm_publisher_status (struct nrm_publisher *p, struct nrm_publisher_status *st)
{
  pthread_mutex_lock (&p->lock);
  *st = p->st;
  st->error = p->st.error ? xstrdup (p->st.error) : NULL;
  pthread_mutex_unlock (&p->lock);
}

void
nrm_publisher_stop (struct nrm_publisher *p)
{
  if (p == NULL)
    return;
  pthread_mutex_lock (&p->lock);
  p->stop = true;
  pthread_mutex_unlock (&p->lock);
  uint64_t one = 1;
  if (write (p->wake, &one, sizeof (one)) < 0)
    {
      /* An eventfd write only fails at its maximum count: the flag is set. */
    }
  pthread_join (p->thread, NULL);
  publisher_free (p);
}
