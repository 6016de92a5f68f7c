/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_EVENTCACHE_H
#define NRM_EVENTCACHE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* What nrm's Events (events.k8s.io/v1) say, and which of them reach the
 * API server, decided as client-go's event recorder decides (its
 * tools/events series and tools/record spam filter), with the time given
 * by the caller so that tests need no clock:
 *   - an Event repeated within NRM_EVENT_SERIES_US of its last occurrence
 *     is the same Event: its series.count and series.lastObservedTime
 *     grow, written by PATCH at the second occurrence and then at most
 *     every NRM_EVENT_REFRESH_US, and once more when the series ends;
 *   - a new Event about one object from one reporter takes a token from
 *     that pair's bucket (NRM_EVENT_BURST, refilled one every
 *     NRM_EVENT_REFILL_US); without one it is dropped. A repetition costs
 *     no token: it is counted, and its PATCH is already bounded.
 * Events are the same when reporter, regarding object, action, reason,
 * type and note are (client-go leaves the note out of its key; it is in
 * here, as tools/record's, so that two devices' Events on one Node stay
 * apart). Not thread-safe: the recorder (events.c) locks it. */

#define NRM_EVENT_SERIES_US (6 * 60 * 1000000LL)
#define NRM_EVENT_REFRESH_US (30 * 1000000LL)
#define NRM_EVENT_BURST 25
#define NRM_EVENT_REFILL_US (300 * 1000000LL)
#define NRM_EVENT_CACHE_MAX 4096
#define NRM_EVENT_NOTE_MAX 1024 /* the API server's limit, in bytes */

/* The object an Event is about (ObjectReference); ns NULL for a
 * cluster-scoped one, whose Events go to the namespace `default`. */
struct nrm_event_ref
{
  const char *api_version, *kind, *ns, *name, *uid;
};

struct nrm_event_spec
{
  const char *controller; /* reportingController, a qualified name (cpu.nrm.io) */
  const char *instance;   /* reportingInstance (the node's name) */
  struct nrm_event_ref regarding;
  bool warning;       /* type Warning, else Normal */
  const char *reason; /* CamelCase, at most 128 bytes */
  const char *action; /* CamelCase, at most 128 bytes */
  const char *note;   /* cut to NRM_EVENT_NOTE_MAX bytes */
};

/* The Event (new reference): metadata.name <regarding name>.<hex ns of
 * now>, eventTime now in microseconds (RFC 3339). */
json_t *nrm_event_new (const struct nrm_event_spec *s, int64_t now_us);

/* RFC 3339 with microseconds, UTC (a MicroTime): 28 bytes and NUL. */
void nrm_event_micro_time (int64_t us, char buf[32]);

struct nrm_event_cache;
struct nrm_event_cache *nrm_event_cache_new (void);
void nrm_event_cache_free (struct nrm_event_cache *c);

enum nrm_event_verdict
{
  NRM_EVENT_CREATE,  /* a new Event: create *write */
  NRM_EVENT_PATCH,   /* its second occurrence: *write has series, patch it */
  NRM_EVENT_COUNTED, /* a later one: counted, written at the next refresh */
  NRM_EVENT_SPAM,    /* no token left for its object: dropped */
};

/* One occurrence of an Event made by nrm_event_new() (borrowed) at now.
 * *write is what to send (a new reference) for CREATE and PATCH, else
 * NULL. */
enum nrm_event_verdict nrm_event_cache_observe (struct nrm_event_cache *c, json_t *event, int64_t now_us,
                                                json_t **write);

/* What is due at now (new references appended to out, each with its
 * series, to patch): series counted since they were last written, once
 * NRM_EVENT_REFRESH_US passed since; and series that ended (no occurrence
 * for NRM_EVENT_SERIES_US) with counts not yet written. Ended Events
 * leave the cache; their next occurrence is a new Event. */
void nrm_event_cache_tick (struct nrm_event_cache *c, int64_t now_us, json_t *out);

/* A series write about to be sent again (a retry): its series brought up
 * to what the cache counted since, so that an older count never follows a
 * newer one. */
void nrm_event_cache_update (struct nrm_event_cache *c, json_t *write, int64_t now_us);

/* Events held (for tests). */
size_t nrm_event_cache_size (struct nrm_event_cache *c);

#endif
