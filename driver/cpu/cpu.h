/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_CPU_H
#define NRM_CPU_H

#include "driver/devices.h"
#include "driver/driver.h"

/* The CPU driver's pool (its devices for this node, in preference order). */
int nrm_cpu_pool (const struct nrm_topology *t, const struct nrm_publish_options *o, const char *driver,
                  struct nrm_pool *ret, nrm_error_t *err);

/* The free (unheld, allocatable, not isolated) CPUs of each NUMA node, and
 * the most of them in one L3 group (both per node index, allocated), given
 * the held claims {uid: state with "cpus"}. The order
 * nrm_numa_preference_by_room() makes of them is the order the pool offers
 * its consumable devices in. */
void nrm_cpu_room (const struct nrm_topology *t, json_t *held, uint64_t **free_cpus, uint64_t **free_cell);

/* The CPUs of the machine that no held claim ({uid: state with "cpus"})
 * holds (isolated ones too), allocated. */
hwloc_bitmap_t nrm_cpu_unheld (const struct nrm_topology *t, json_t *held);

/* The driver's rule for one consumable device of a claim, for a caller
 * that places before it prepares (nrm run; the prepare then takes exactly
 * those CPUs): the CPUs a result consumes of its device (dev as the pool
 * publishes it), checked against the device's capacity; and count CPUs
 * placed within the device's CPUs among free, into got. */
int nrm_cpu_consumed (const struct nrm_alloc_result *r, json_t *dev, size_t *count, nrm_error_t *err);
int nrm_cpu_place_device (const struct nrm_topology *t, const char *device, size_t count, unsigned options,
                          const char *cpu_kind, hwloc_const_bitmap_t near, hwloc_const_bitmap_t free,
                          hwloc_bitmap_t got, nrm_error_t *err);

/* The CPUs a device of the CPU driver stands for (numa<N>, numa<N>-isolated,
 * l3-<id>, core<cpu>): allocatable ones, isolated ones only for an isolated
 * device; empty for a name that is none of these (a new set). */
hwloc_bitmap_t nrm_cpu_device_cpus (const struct nrm_topology *t, const char *name);

#endif
