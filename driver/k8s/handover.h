/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_HANDOVER_H
#define NRM_HANDOVER_H

#include <stdbool.h>

#include "nrm/base/error.h"
#include "nrm/base/log.h"

/* Which of the instances of one driver on this node writes its
 * ResourceSlices and the shared pool's cpusets, when two run at once on one
 * state directory (rolling-update mode: the old and the new pod of a
 * DaemonSet). The newest instance does: at its start it writes
 * <state-dir>/<driver>.publisher.json naming itself, and any other instance
 * that reads the record stops writing (it keeps serving its kubelet
 * socket). An instance whose record names one that is gone (its instance
 * lock is free: the kernel releases the flock of a process that died) or
 * no one takes the role back. Updates of the record are serialized by
 * <driver>.publisher.lock. */

struct nrm_handover_config
{
  const char *state_dir;
  const char *driver;
  const char *instance_lock; /* this instance's lock file, held for its life */
  const char *instance_uid;  /* or NULL */
  const char *settings;      /* what shapes its devices, for the log (a digest) */
  nrm_log_fn log;            /* every change of role; may be NULL */
  void *log_ctx;
  void (*became_active) (void *ctx); /* after a change to active; may be NULL */
  void *ctx;
};

struct nrm_handover;

/* Takes the role now, whoever had it. */
int nrm_handover_claim (const struct nrm_handover_config *cfg, struct nrm_handover **ret, nrm_error_t *err);

/* Whether this instance has the role: the record names it, or names an
 * instance that is gone, or is missing or unreadable (the role is taken
 * back then). Safe from any thread; each change is logged once. */
bool nrm_handover_active (struct nrm_handover *h);

/* At a clean stop: removes the record if it names this instance (another
 * one still running takes the role back at once), and frees h. */
void nrm_handover_release (struct nrm_handover *h);

#endif
