/* SPDX-License-Identifier: Apache-2.0 */
/* Counters of the plugin's prepare and unprepare calls, per claim, for
 * /metrics (nrm/metrics.c renders them). */
#include "config.h"

#include <errno.h>

#include "driver/kubelet/plugin-internal.h"

const double nrm_latency_bounds[NRM_LATENCY_BUCKETS]
    = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5 };

const char *
nrm_error_kind_name (enum nrm_error_kind k)
{
  static const char *const names[] = { "invalid", "not_found", "claim_replaced", "no_capacity", "api", "internal" };
  return k < NRM_ERRKIND_COUNT ? names[k] : "internal";
}

enum nrm_error_kind
nrm_error_kind_of (int status)
{
  switch (status)
    {
    case EINVAL:
      return NRM_ERRKIND_INVALID;
    case ENOENT:
    case ENODEV:
      return NRM_ERRKIND_NOT_FOUND;
    case ESTALE:
      return NRM_ERRKIND_REPLACED;
    case ENOSPC:
    case EBUSY:
      return NRM_ERRKIND_NO_CAPACITY;
    case EIO:
    case ETIMEDOUT:
    case EPROTO:
    case ECANCELED:
      return NRM_ERRKIND_API;
    default:
      return NRM_ERRKIND_INTERNAL;
    }
}

static double
seconds_since (const struct timespec *t0)
{
  struct timespec t1;
  clock_gettime (CLOCK_MONOTONIC, &t1);
  return (double) (t1.tv_sec - t0->tv_sec) + (double) (t1.tv_nsec - t0->tv_nsec) / 1e9;
}

void
nrm_plugin_record (struct nrm_plugin *p, struct nrm_op_metrics *m, const struct timespec *t0, nrm_error_t err)
{
  double s = seconds_since (t0);
  pthread_mutex_lock (&p->mlock);
  m->count++;
  m->sum_s += s;
  for (size_t i = 0; i < NRM_LATENCY_BUCKETS; i++)
    if (s <= nrm_latency_bounds[i])
      {
        m->buckets[i]++;
        break;
      }
  if (err)
    m->errors[nrm_error_kind_of (err->status)]++;
  pthread_mutex_unlock (&p->mlock);
}

void
nrm_plugin_record_write_error (struct nrm_plugin *p)
{
  pthread_mutex_lock (&p->mlock);
  p->metrics.checkpoint_write_errors++;
  pthread_mutex_unlock (&p->mlock);
}

void
nrm_plugin_metrics (struct nrm_plugin *p, struct nrm_plugin_metrics *out)
{
  pthread_mutex_lock (&p->mlock);
  *out = p->metrics;
  pthread_mutex_unlock (&p->mlock);
}
