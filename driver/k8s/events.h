/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_EVENTS_H
#define NRM_EVENTS_H

#include "driver/k8s/eventcache.h"
#include "driver/k8s/kube.h"
#include "nrm/base/log.h"

/* The event recorder of nrm plugin: Events (events.k8s.io/v1) on the
 * objects nrm decides about, written by a thread of its own, so that a
 * caller (a prepare) never waits on the API server. What is written is
 * eventcache.h's decision (series, spam filter). A write that fails is
 * tried again NRM_EVENTS_TRIES times in all, NRM_EVENTS_RETRY_S apart and
 * then dropped with a warning; at most NRM_EVENTS_QUEUE writes wait, and
 * one more is dropped (Events are help for the operator, not state). */

#define NRM_EVENTS_TRIES 3
#define NRM_EVENTS_RETRY_S 5
#define NRM_EVENTS_QUEUE 1000

struct nrm_events_config
{
  struct nrm_kube *kube;
  const char *instance; /* reportingInstance: the node's name */
  nrm_log_fn log;
  void *log_ctx;
};

struct nrm_events;

int nrm_events_start (const struct nrm_events_config *cfg, struct nrm_events **ret, nrm_error_t *err);

/* Records one occurrence (e NULL: nothing); controller is the
 * reportingController (a driver's name); spec's instance is the
 * recorder's. */
void nrm_events_record (struct nrm_events *e, const char *controller, const struct nrm_event_ref *regarding,
                        bool warning, const char *reason, const char *action, const char *fmt, ...)
    __attribute__ ((format (printf, 7, 8)));

/* The Node as the kubelet names it in its Events (uid: the node's name). */
struct nrm_event_ref nrm_event_node_ref (const char *node);

/* Ends the thread (what still waits is dropped) and frees. */
void nrm_events_stop (struct nrm_events *e);

#endif
