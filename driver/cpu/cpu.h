/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_CPU_H
#define NRM_CPU_H

#include "driver/devices.h"
#include "driver/driver.h"

/* How CPUs are published. */
enum nrm_cpu_mode
{
  /* One device per NUMA node with consumable capacity "cpus". */
  NRM_CPU_MODE_NUMA,
  /* Exclusive whole-node, whole-L3 and whole-core devices over shared counters. */
  NRM_CPU_MODE_PARTITIONED,
};

/* The CPU driver's settings: its section of the configuration (the config
 * file's `cpu`, its flags --cpu-mode, --cpu-options, --min-shared-cpus),
 * which it gets as nrm_driver_host.settings. nrm keeps one as well, for
 * what its own commands need of them (nrm status, nrm run, the
 * reconciler). */
struct nrm_cpu_settings
{
  enum nrm_cpu_mode mode; /* mode (numa) */
  unsigned options;       /* options: node-wide placement options (enum nrm_cpu_option) */
  long min_shared_cpus;   /* minSharedCPUs: allocatable CPUs that must stay shared (1) */
  unsigned partition;     /* partition: exclusive claims' containers made cpuset
                           * partitions (enum nrm_partition_mode; off) */
};

void nrm_cpu_settings_init (struct nrm_cpu_settings *s);
/* The keys of a `cpu` section (NULL: none) onto s; each one checked, the
 * error naming the key (`cpu.mode`); an unknown key is an error. s is left
 * as it was on error. */
int nrm_cpu_settings_read (json_t *section, struct nrm_cpu_settings *s, nrm_error_t *err);
/* The section that reads back as s (a new reference). */
json_t *nrm_cpu_settings_json (const struct nrm_cpu_settings *s);
int nrm_cpu_mode_parse (const char *name, enum nrm_cpu_mode *ret, nrm_error_t *err);
const char *nrm_cpu_mode_name (enum nrm_cpu_mode m);

/* The CPU driver's pool (its devices for this node, in preference order). */
int nrm_cpu_pool (const struct nrm_topology *t, const struct nrm_publish_options *o, enum nrm_cpu_mode mode,
                  const char *driver, struct nrm_pool *ret, nrm_error_t *err);

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
