/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_REFRESH_H
#define NRM_REFRESH_H

/* The slice refresher of nrm plugin: every pool follows the node while the
 * plugin runs, checked every NRM_REFRESH_PERIOD_S seconds (sysfs cannot be
 * watched, and claims come and go): a device whose driver reports it
 * unhealthy with a taint gets that taint (the driver's effect: None,
 * NoSchedule or NoExecute) until it is healthy again; and a driver may
 * order its devices by what its claims hold (the CPU driver lists its
 * consumable devices fullest first, so that the scheduler's first fit is a
 * best fit). A new generation is published only when a driver's slices
 * change. */

#include <jansson.h>
#include <stdbool.h>

#include "driver/k8s/publish.h"
#include "driver/registry.h"
#include "nrm/conf.h"

#define NRM_REFRESH_PERIOD_S 5

/* The driver's slices of a List from nrm_drivers_slices() (new reference). */
json_t *nrm_refresh_driver_slices (json_t *list, const char *driver);

/* new() makes its wake-up, which kick() (a driver's health event, a change
 * of the other drivers' devices: the slices follow at once) may be called
 * on from then until free(); start() starts the thread, which updates
 * pubs[i] with the slices of driver i (false when it could not start);
 * stop() joins it. */
struct nrm_refresher;
struct nrm_refresher *nrm_refresher_new (void);
void nrm_refresher_kick (void *refresher);
bool nrm_refresher_start (struct nrm_refresher *rf, const struct nrm_config *c, const struct nrm_drivers *d,
                          struct nrm_publisher **pubs);
void nrm_refresher_stop (struct nrm_refresher *rf);
/* fn runs on the thread after each pass (set before start()). */
void nrm_refresher_after_pass (struct nrm_refresher *rf, void (*fn) (void *ctx), void *ctx);
void nrm_refresher_free (struct nrm_refresher *rf);

#endif
