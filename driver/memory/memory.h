/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_MEMORY_H
#define NRM_MEMORY_H

#include "driver/devices.h"

struct nrm_ondemand;

/* The memory driver's pool: memory and huge pages of every NUMA node; od
 * (or NULL) the pools raised on demand (driver/memory/ondemand.h). */
int nrm_memory_pool (const struct nrm_topology *t, const struct nrm_publish_options *o, const char *driver,
                     const struct nrm_ondemand *od, struct nrm_pool *ret, nrm_error_t *err);
/* The same with change[i] bytes online more (or less) on the node at
 * topology position i than the topology says; change may be NULL. */
int nrm_memory_pool_online (const struct nrm_topology *t, const struct nrm_publish_options *o, const char *driver,
                            const struct nrm_ondemand *od, const int64_t *change, struct nrm_pool *ret,
                            nrm_error_t *err);

#endif
