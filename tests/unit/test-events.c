/* SPDX-License-Identifier: Apache-2.0 */
/* Which Events reach the API server (driver/k8s/eventcache.h): series of
 * repeated Events, their refresh and end, the spam filter's token bucket,
 * and the Event's fields; the time is given, nothing sleeps. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "driver/k8s/eventcache.h"
#include "nrm/base/cleanup.h"

#define S 1000000LL /* a second in microseconds */
#define T0 (1796662800LL * S + 123456)

static json_t *
claim_event (const char *name, const char *reason, const char *note)
{
  struct nrm_event_spec s = { .controller = "cpu.nrm.io",
                              .instance = "node-a",
                              .regarding = { .api_version = "resource.k8s.io/v1",
                                             .kind = "ResourceClaim",
                                             .ns = "default",
                                             .name = name,
                                             .uid = "0b5e1c1e-1111-2222-3333-444455556666" },
                              .warning = true,
                              .reason = reason,
                              .action = "PrepareResources",
                              .note = note };
  return nrm_event_new (&s, T0);
}

static const char *
field (json_t *o, const char *a, const char *b)
{
  json_t *v = json_object_get (o, a);
  return json_string_value (b ? json_object_get (v, b) : v);
}

static json_int_t
series_count (json_t *ev)
{
  return json_integer_value (json_object_get (json_object_get (ev, "series"), "count"));
}

static void
test_fields (void **state)
{
  (void) state;
  cleanup_json json_t *ev = claim_event ("c1", "InsufficientCapacity", "cpu.nrm.io: claim default/c1: no room");
  assert_string_equal (field (ev, "apiVersion", NULL), "events.k8s.io/v1");
  assert_string_equal (field (ev, "kind", NULL), "Event");
  assert_string_equal (field (ev, "metadata", "namespace"), "default");
  assert_true (strncmp (field (ev, "metadata", "name"), "c1.", 3) == 0);
  assert_string_equal (field (ev, "eventTime", NULL), "2026-12-07T17:00:00.123456Z");
  assert_string_equal (field (ev, "reportingController", NULL), "cpu.nrm.io");
  assert_string_equal (field (ev, "reportingInstance", NULL), "node-a");
  assert_string_equal (field (ev, "type", NULL), "Warning");
  assert_string_equal (field (ev, "reason", NULL), "InsufficientCapacity");
  assert_string_equal (field (ev, "action", NULL), "PrepareResources");
  assert_string_equal (field (ev, "regarding", "kind"), "ResourceClaim");
  assert_string_equal (field (ev, "regarding", "apiVersion"), "resource.k8s.io/v1");
  assert_string_equal (field (ev, "regarding", "namespace"), "default");
  assert_string_equal (field (ev, "regarding", "uid"), "0b5e1c1e-1111-2222-3333-444455556666");
  assert_null (json_object_get (ev, "series"));

  /* A Node: cluster-scoped, its Events in `default`, no namespace in the
   * reference; Normal. */
  struct nrm_event_spec s = { .controller = "memory.nrm.io",
                              .instance = "node-a",
                              .regarding = { .api_version = "v1", .kind = "Node", .name = "node-a", .uid = "node-a" },
                              .reason = "DeviceHealthy",
                              .action = "CheckHealth",
                              .note = "ok" };
  cleanup_json json_t *node = nrm_event_new (&s, T0);
  assert_string_equal (field (node, "metadata", "namespace"), "default");
  assert_null (json_object_get (json_object_get (node, "regarding"), "namespace"));
  assert_string_equal (field (node, "type", NULL), "Normal");

  /* The note within the API server's 1024 bytes; a long name cut so that
   * the Event's name stays a subdomain of at most 253. */
  char big[4000], name[254];
  memset (big, 'x', sizeof (big) - 1);
  big[sizeof (big) - 1] = '\0';
  memset (name, 'a', sizeof (name) - 1);
  name[sizeof (name) - 1] = '\0';
  name[236] = '-';
  cleanup_json json_t *longer = claim_event (name, "X", big);
  assert_int_equal (strlen (field (longer, "note", NULL)), NRM_EVENT_NOTE_MAX);
  assert_true (strlen (field (longer, "metadata", "name")) <= 253);
  assert_true (strstr (field (longer, "metadata", "name"), "-.") == NULL);

  /* Two Events of one object in the same microsecond: two names. */
  cleanup_json json_t *again = claim_event ("c1", "InsufficientCapacity", "x");
  assert_string_not_equal (field (ev, "metadata", "name"), field (again, "metadata", "name"));
}

static void
test_series (void **state)
{
  (void) state;
  struct nrm_event_cache *c = nrm_event_cache_new ();
  cleanup_json json_t *ev = claim_event ("c1", "InsufficientCapacity", "no room");
  json_t *w = NULL;

  /* The first occurrence is created, the second patches a series of 2. */
  assert_int_equal (nrm_event_cache_observe (c, ev, T0, &w), NRM_EVENT_CREATE);
  assert_non_null (w);
  assert_null (json_object_get (w, "series"));
  json_decref (w);
  assert_int_equal (nrm_event_cache_observe (c, ev, T0 + 10 * S, &w), NRM_EVENT_PATCH);
  assert_int_equal (series_count (w), 2);
  assert_string_equal (field (w, "series", "lastObservedTime"), "2026-12-07T17:00:10.123456Z");
  assert_string_equal (field (w, "metadata", "name"), field (ev, "metadata", "name"));
  json_decref (w);

  /* Later ones only count, until the refresh 30 s after the last write. */
  for (int i = 0; i < 5; i++)
    {
      assert_int_equal (nrm_event_cache_observe (c, ev, T0 + (11 + i) * S, &w), NRM_EVENT_COUNTED);
      assert_null (w);
    }
  cleanup_json json_t *due = json_array ();
  nrm_event_cache_tick (c, T0 + 39 * S, due);
  assert_int_equal (json_array_size (due), 0);
  nrm_event_cache_tick (c, T0 + 40 * S, due);
  assert_int_equal (json_array_size (due), 1);
  assert_int_equal (series_count (json_array_get (due, 0)), 7);
  assert_string_equal (field (json_array_get (due, 0), "series", "lastObservedTime"), "2026-12-07T17:00:15.123456Z");
  /* A write tried again carries the count as it is by then, and takes it:
   * the next refresh has nothing to write. */
  cleanup_json json_t *retry = json_deep_copy (json_array_get (due, 0));
  assert_int_equal (nrm_event_cache_observe (c, ev, T0 + 41 * S, &w), NRM_EVENT_COUNTED);
  nrm_event_cache_update (c, retry, T0 + 45 * S);
  assert_int_equal (series_count (retry), 8);
  assert_string_equal (field (retry, "series", "lastObservedTime"), "2026-12-07T17:00:41.123456Z");
  json_array_clear (due);
  nrm_event_cache_tick (c, T0 + 200 * S, due);
  assert_int_equal (json_array_size (due), 0);

  /* Within 6 minutes of the last occurrence it is still the series. */
  assert_int_equal (nrm_event_cache_observe (c, ev, T0 + 15 * S + NRM_EVENT_SERIES_US, &w), NRM_EVENT_COUNTED);
  /* Once it ended, its count goes out once more and it leaves the cache. */
  int64_t end = T0 + 15 * S + 2 * NRM_EVENT_SERIES_US + S;
  nrm_event_cache_tick (c, end, due);
  assert_int_equal (json_array_size (due), 1);
  assert_int_equal (series_count (json_array_get (due, 0)), 9);
  assert_int_equal (nrm_event_cache_size (c), 0);
  /* The next occurrence is a new Event. */
  assert_int_equal (nrm_event_cache_observe (c, ev, end + S, &w), NRM_EVENT_CREATE);
  json_decref (w);
  nrm_event_cache_free (c);
}

static void
test_distinct (void **state)
{
  (void) state;
  struct nrm_event_cache *c = nrm_event_cache_new ();
  cleanup_json json_t *a = claim_event ("c1", "InsufficientCapacity", "no room");
  cleanup_json json_t *b = claim_event ("c1", "InvalidClaim", "no room");
  cleanup_json json_t *n = claim_event ("c1", "InsufficientCapacity", "another device");
  cleanup_json json_t *other = claim_event ("c2", "InsufficientCapacity", "no room");
  json_t *w = NULL;
  /* Another reason, another note, another object: other Events. */
  json_t *all[] = { a, b, n, other };
  for (size_t i = 0; i < 4; i++)
    {
      assert_int_equal (nrm_event_cache_observe (c, all[i], T0, &w), NRM_EVENT_CREATE);
      json_decref (w);
    }
  assert_int_equal (nrm_event_cache_size (c), 4);
  /* An ended Event that comes back before a tick is a new one too. */
  assert_int_equal (nrm_event_cache_observe (c, a, T0 + NRM_EVENT_SERIES_US + 1, &w), NRM_EVENT_CREATE);
  json_decref (w);
  nrm_event_cache_free (c);
}

static void
test_spam (void **state)
{
  (void) state;
  struct nrm_event_cache *c = nrm_event_cache_new ();
  json_t *w = NULL;
  char reason[32];
  /* 25 new Events about one object pass, the 26th does not. */
  for (int i = 0; i < NRM_EVENT_BURST; i++)
    {
      snprintf (reason, sizeof (reason), "Reason%d", i);
      cleanup_json json_t *ev = claim_event ("c1", reason, "x");
      assert_int_equal (nrm_event_cache_observe (c, ev, T0 + i, &w), NRM_EVENT_CREATE);
      json_decref (w);
    }
  cleanup_json json_t *late = claim_event ("c1", "Late", "x");
  assert_int_equal (nrm_event_cache_observe (c, late, T0 + S, &w), NRM_EVENT_SPAM);
  assert_null (w);
  /* Repetitions of an Event written already take no token. */
  cleanup_json json_t *first = claim_event ("c1", "Reason0", "x");
  assert_int_equal (nrm_event_cache_observe (c, first, T0 + 2 * S, &w), NRM_EVENT_PATCH);
  json_decref (w);
  assert_int_equal (nrm_event_cache_observe (c, first, T0 + 3 * S, &w), NRM_EVENT_COUNTED);
  /* Another object has a bucket of its own. */
  cleanup_json json_t *other = claim_event ("c2", "Late", "x");
  assert_int_equal (nrm_event_cache_observe (c, other, T0 + S, &w), NRM_EVENT_CREATE);
  json_decref (w);
  /* One token comes back every 5 minutes, one. */
  assert_int_equal (nrm_event_cache_observe (c, late, T0 + NRM_EVENT_REFILL_US - 2 * S, &w), NRM_EVENT_SPAM);
  assert_int_equal (nrm_event_cache_observe (c, late, T0 + NRM_EVENT_REFILL_US + S, &w), NRM_EVENT_CREATE);
  json_decref (w);
  cleanup_json json_t *later = claim_event ("c1", "Later", "x");
  assert_int_equal (nrm_event_cache_observe (c, later, T0 + NRM_EVENT_REFILL_US + 2 * S, &w), NRM_EVENT_SPAM);
  nrm_event_cache_free (c);
}

static void
test_bounded (void **state)
{
  (void) state;
  struct nrm_event_cache *c = nrm_event_cache_new ();
  json_t *w = NULL;
  char name[32];
  /* The cache holds at most NRM_EVENT_CACHE_MAX Events: the least recent
   * one leaves for a new one. */
  for (int i = 0; i <= NRM_EVENT_CACHE_MAX; i++)
    {
      snprintf (name, sizeof (name), "c%d", i);
      cleanup_json json_t *ev = claim_event (name, "X", "x");
      assert_int_equal (nrm_event_cache_observe (c, ev, T0 + i, &w), NRM_EVENT_CREATE);
      json_decref (w);
    }
  assert_int_equal (nrm_event_cache_size (c), NRM_EVENT_CACHE_MAX);
  cleanup_json json_t *first = claim_event ("c0", "X", "x");
  assert_int_equal (nrm_event_cache_observe (c, first, T0 + 2 * NRM_EVENT_CACHE_MAX, &w), NRM_EVENT_CREATE);
  json_decref (w);
  nrm_event_cache_free (c);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_fields), cmocka_unit_test (test_series),  cmocka_unit_test (test_distinct),
    cmocka_unit_test (test_spam),   cmocka_unit_test (test_bounded),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
