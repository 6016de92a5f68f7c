/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_NODEDRV_H
#define NRM_NODEDRV_H

#include <stdbool.h>

#include "driver/devices.h"
#include "driver/plugin.h"

/* The CPU (cpu == true) or memory driver of this node, over the devices
 * nrm publishes for it. The topology must outlive the driver. */
struct nrm_node_driver;

extern const struct nrm_driver_ops nrm_node_driver_ops;

int nrm_node_driver_new (const struct nrm_topology *t, const struct nrm_publish_options *o, bool cpu,
                         struct nrm_node_driver **ret, nrm_error_t *err);

/* Node-wide placement options (enum nrm_cpu_option; a claim's opaque
 * CPUConfig replaces them) and the allocatable CPUs that must stay in the
 * shared pool (a prepare that would leave fewer fails). */
void nrm_node_driver_set_cpu_options (struct nrm_node_driver *d, unsigned options, size_t min_shared);

/* Health of CPU devices follows this file (a Linux online CPU list, e.g.
 * /sys/devices/system/cpu/online): a device with an offline CPU is
 * unhealthy. NULL (the default) skips the check. */
int nrm_node_driver_watch_online (struct nrm_node_driver *d, const char *online_path, nrm_error_t *err);
void nrm_node_driver_free (struct nrm_node_driver *d);

#endif
