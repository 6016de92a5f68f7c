/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_MEMORY_H
#define NRM_MEMORY_H

#include "driver/devices.h"

struct nrm_ondemand;

/* The memory driver's settings are its section of the configuration (the
 * config file's `memory`), which it gets as nrm_driver_host.settings:
 * granularity (a quantity: the step of consumable memory, 1Mi by
 * default), hugepagesOnDemand (ondemand.h) and health (health.h). */
#define NRM_MEMORY_GRANULARITY (1024 * 1024)

/* Checks the section's keys (NULL: none), an unknown one an error, and
 * reads its granularity into *granularity (left as it is when the section
 * has none). The one reader of the section's keys: the driver's new() and
 * nrm's config file both call it; the values of hugepagesOnDemand and
 * health are checked where they are used. */
int nrm_memory_settings_read (json_t *section, uint64_t *granularity, nrm_error_t *err);

/* The memory driver's pool: memory and huge pages of every NUMA node, in
 * steps of granularity bytes; od (or NULL) the pools raised on demand
 * (driver/memory/ondemand.h). */
int nrm_memory_pool (const struct nrm_topology *t, const struct nrm_publish_options *o, uint64_t granularity,
                     const char *driver, const struct nrm_ondemand *od, struct nrm_pool *ret, nrm_error_t *err);
/* The same with change[i] bytes online more (or less) on the node at
 * topology position i than the topology says; change may be NULL. */
int nrm_memory_pool_online (const struct nrm_topology *t, const struct nrm_publish_options *o, uint64_t granularity,
                            const char *driver, const struct nrm_ondemand *od, const int64_t *change,
                            struct nrm_pool *ret, nrm_error_t *err);

#endif
