/* SPDX-License-Identifier: Apache-2.0 */
/* Which Events reach the API server: series and the spam filter
 * (driver/k8s/eventcache.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/k8s/eventcache.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/text.h"
#include "nrm/base/xalloc.h"

#define NAME_MAX_LEN 253 /* an Event's name, a DNS subdomain */
#define HEX_LEN 16

struct nrm_event_cache
{
  json_t *entries; /* key -> {event, count, sent, last, written} */
  json_t *buckets; /* spam key -> {tokens, at} */
};

void
nrm_event_micro_time (int64_t us, char buf[32])
{
  time_t s = (time_t) (us / 1000000);
  struct tm tm;
  gmtime_r (&s, &tm);
  size_t n = strftime (buf, 32, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf (buf + n, 32 - n, ".%06lldZ", (long long) (us % 1000000));
}

static const char *
str (const char *s)
{
  return s ? s : "";
}

json_t *
nrm_event_new (const struct nrm_event_spec *s, int64_t now_us)
{
  /* Two Events of one object in one microsecond still get two names. */
  static unsigned seq;
  unsigned n = __atomic_fetch_add (&seq, 1, __ATOMIC_RELAXED) % 1000;
  const struct nrm_event_ref *r = &s->regarding;
  size_t keep = strlen (str (r->name));
  if (keep > NAME_MAX_LEN - 1 - HEX_LEN)
    keep = NAME_MAX_LEN - 1 - HEX_LEN;
  /* A cut name still ends with a letter or digit, as a subdomain must. */
  while (keep > 0 && (r->name[keep - 1] == '-' || r->name[keep - 1] == '.'))
    keep--;
  cleanup_free char *name
      = xasprintf ("%.*s.%llx", (int) keep, str (r->name), (unsigned long long) now_us * 1000ULL + n);
  cleanup_free char *note = nrm_text_bound (str (s->note), NRM_EVENT_NOTE_MAX);
  char when[32];
  nrm_event_micro_time (now_us, when);
  json_t *reg
      = json_pack ("{s:s, s:s, s:s}", "apiVersion", str (r->api_version), "kind", str (r->kind), "name", str (r->name));
  if (r->ns)
    json_object_set_new (reg, "namespace", json_string (r->ns));
  if (r->uid)
    json_object_set_new (reg, "uid", json_string (r->uid));
  return json_pack ("{s:s, s:s, s:{s:s, s:s}, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:o}", "apiVersion",
                    "events.k8s.io/v1", "kind", "Event", "metadata", "name", name, "namespace",
                    r->ns ? r->ns : "default", "eventTime", when, "reportingController", str (s->controller),
                    "reportingInstance", str (s->instance), "action", str (s->action), "reason", str (s->reason),
                    "type", s->warning ? "Warning" : "Normal", "note", note, "regarding", reg);
}

struct nrm_event_cache *
nrm_event_cache_new (void)
{
  struct nrm_event_cache *c = xcalloc (1, sizeof (*c));
  c->entries = json_object ();
  c->buckets = json_object ();
  return c;
}

void
nrm_event_cache_free (struct nrm_event_cache *c)
{
  if (c == NULL)
    return;
  json_decref (c->entries);
  json_decref (c->buckets);
  free (c);
}

size_t
nrm_event_cache_size (struct nrm_event_cache *c)
{
  return json_object_size (c->entries);
}

static const char *
get (json_t *o, const char *k)
{
  return str (json_string_value (json_object_get (o, k)));
}

/* The reporter and the regarding object; with what and why, the Event. */
static char *
key_of (json_t *ev, bool spam)
{
  json_t *r = json_object_get (ev, "regarding");
  cleanup_json json_t *k
      = json_pack ("[s, s, s, s, s, s, s]", get (ev, "reportingController"), get (ev, "reportingInstance"),
                   get (r, "apiVersion"), get (r, "kind"), get (r, "namespace"), get (r, "name"), get (r, "uid"));
  cleanup_json json_t *what
      = spam ? NULL
             : json_pack ("[s, s, s, s]", get (ev, "action"), get (ev, "reason"), get (ev, "type"), get (ev, "note"));
  if (what)
    json_array_extend (k, what);
  return json_dumps (k, JSON_COMPACT);
}

static int64_t
int_of (json_t *o, const char *k)
{
  return (int64_t) json_integer_value (json_object_get (o, k));
}

static void
set_int (json_t *o, const char *k, int64_t v)
{
  json_object_set_new (o, k, json_integer ((json_int_t) v));
}

/* A bucket's tokens at now, refilled one every NRM_EVENT_REFILL_US. */
static double
tokens_at (json_t *b, int64_t now_us)
{
  double t = json_real_value (json_object_get (b, "tokens"));
  int64_t since = now_us - int_of (b, "at");
  if (since > 0)
    t += (double) since / (double) NRM_EVENT_REFILL_US;
  return t > NRM_EVENT_BURST ? NRM_EVENT_BURST : t;
}

/* Room for one more key in o: a full bucket is as good as none, so those
 * go first; then the one least recently used (field at). */
static void
make_room (json_t *o, const char *at, int64_t now_us, bool buckets)
{
  if (json_object_size (o) < NRM_EVENT_CACHE_MAX)
    return;
  const char *k;
  json_t *v;
  void *tmp;
  if (buckets)
    json_object_foreach_safe (o, tmp, k, v)
    {
      if (tokens_at (v, now_us) >= NRM_EVENT_BURST)
        json_object_del (o, k);
    }
  if (json_object_size (o) < NRM_EVENT_CACHE_MAX)
    return;
  const char *oldest = NULL;
  int64_t t = 0;
  json_object_foreach (o, k, v)
  {
    if (oldest == NULL || int_of (v, at) < t)
      {
        oldest = k;
        t = int_of (v, at);
      }
  }
  cleanup_free char *victim = xstrdup (oldest);
  json_object_del (o, victim);
}

static bool
take_token (struct nrm_event_cache *c, json_t *ev, int64_t now_us)
{
  cleanup_free char *key = key_of (ev, true);
  json_t *b = json_object_get (c->buckets, key);
  if (b == NULL)
    {
      make_room (c->buckets, "at", now_us, true);
      b = json_pack ("{s:f, s:I}", "tokens", (double) NRM_EVENT_BURST, "at", (json_int_t) now_us);
      json_object_set_new (c->buckets, key, b);
    }
  double t = tokens_at (b, now_us);
  bool ok = t >= 1.0;
  json_object_set_new (b, "tokens", json_real (ok ? t - 1.0 : t));
  set_int (b, "at", now_us);
  return ok;
}

/* The Event with its series as counted (new reference), marked written. */
static json_t *
series_of (json_t *entry, int64_t now_us)
{
  char when[32];
  nrm_event_micro_time (int_of (entry, "last"), when);
  json_t *ev = json_deep_copy (json_object_get (entry, "event"));
  json_object_set_new (
      ev, "series", json_pack ("{s:I, s:s}", "count", (json_int_t) int_of (entry, "count"), "lastObservedTime", when));
  set_int (entry, "sent", int_of (entry, "count"));
  set_int (entry, "written", now_us);
  return ev;
}

enum nrm_event_verdict
nrm_event_cache_observe (struct nrm_event_cache *c, json_t *event, int64_t now_us, json_t **write)
{
  cleanup_free char *key = key_of (event, false);
  json_t *e = json_object_get (c->entries, key);
  *write = NULL;
  if (e && now_us - int_of (e, "last") <= NRM_EVENT_SERIES_US)
    {
      set_int (e, "count", int_of (e, "count") + 1);
      set_int (e, "last", now_us);
      if (int_of (e, "count") > 2)
        return NRM_EVENT_COUNTED;
      *write = series_of (e, now_us);
      return NRM_EVENT_PATCH;
    }
  if (e)
    json_object_del (c->entries, key); /* its series ended */
  if (!take_token (c, event, now_us))
    return NRM_EVENT_SPAM;
  make_room (c->entries, "last", now_us, false);
  json_object_set_new (c->entries, key,
                       json_pack ("{s:O, s:i, s:i, s:I, s:I}", "event", event, "count", 1, "sent", 1, "last",
                                  (json_int_t) now_us, "written", (json_int_t) now_us));
  *write = json_deep_copy (event);
  return NRM_EVENT_CREATE;
}

void
nrm_event_cache_update (struct nrm_event_cache *c, json_t *write, int64_t now_us)
{
  if (json_object_get (write, "series") == NULL)
    return;
  cleanup_json json_t *bare = json_deep_copy (write);
  json_object_del (bare, "series");
  cleanup_free char *key = key_of (bare, false);
  json_t *e = json_object_get (c->entries, key);
  if (e == NULL
      || !json_equal (json_object_get (json_object_get (e, "event"), "metadata"), json_object_get (write, "metadata")))
    return;
  cleanup_json json_t *now = series_of (e, now_us);
  json_object_set (write, "series", json_object_get (now, "series"));
}

void
nrm_event_cache_tick (struct nrm_event_cache *c, int64_t now_us, json_t *out)
{
  const char *k;
  json_t *e;
  void *tmp;
  json_object_foreach_safe (c->entries, tmp, k, e)
  {
    bool ended = now_us - int_of (e, "last") > NRM_EVENT_SERIES_US;
    if (int_of (e, "count") != int_of (e, "sent") && (ended || now_us - int_of (e, "written") >= NRM_EVENT_REFRESH_US))
      json_array_append_new (out, series_of (e, now_us));
    if (ended)
      json_object_del (c->entries, k);
  }
}
