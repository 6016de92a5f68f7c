/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_AGENT_H
#define NRM_AGENT_H

/* nrm plugin in one object: every enabled driver served to the kubelet,
 * with its handover (rolling updates), publisher and slice refresher,
 * the binder and node view (with the API), the HTTP server
 * (--http-address) and the shared-pool reconciler. */

#include <signal.h>
#include <stddef.h>

#include "driver/kubelet/plugin.h"
#include "nrm/base/error.h"
#include "nrm/base/fsroot.h"
#include "nrm/conf.h"

struct nrm_agent;

/* Checks every setting of c and its opened root (which the agent borrows
 * until stop), then
 * starts serving. The caller blocks the signals it waits for before, so
 * that no thread of the agent (gRPC's own inherit the mask) takes them,
 * and sets up the log. On failure nothing is left running. */
int nrm_agent_start (struct nrm_config *c, const struct nrm_fsroot *root, struct nrm_agent **ret, nrm_error_t *err);

/* Until one of the signals in set (blocked), which it returns; meanwhile,
 * every minute, the claims of runs killed with -9 go back (a run releases
 * them too, but runs may be rare). */
int nrm_agent_wait (struct nrm_agent *a, const sigset_t *set);

/* Finishes the calls in flight and stops everything start started, the
 * threads joined and the sockets removed; frees a (NULL is fine). */
void nrm_agent_stop (struct nrm_agent *a);

/* The plugin of enabled driver i, or NULL past the last one. */
struct nrm_plugin *nrm_agent_plugin (const struct nrm_agent *a, size_t i);

#endif
