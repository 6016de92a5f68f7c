/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_DRIVER_MEMORY_HEALTH_H
#define NRM_DRIVER_MEMORY_HEALTH_H

/* The memory driver's health: EDAC error counters mapped to NUMA nodes
 * (the errors of a machine-wide controller, ghes_edac, placed one by one
 * by the address of their ras:mc_event), memory blocks offlined or added
 * since the start (the capacity of numaN follows), polled by a timer:
 * sysfs sends no event for either; the trace does. */

#include <jansson.h>
#include <stdint.h>

#include "driver/driver.h"

#define NRM_MEMORY_HEALTH_THRESHOLD 100 /* corrected errors before NoSchedule */
#define NRM_MEMORY_HEALTH_POLL_S 5

struct nrm_memory_health;

/* Reads the settings (h->settings: {"health": {correctedErrorThreshold,
 * pollSeconds}}), the memory blocks online at the start and the errors
 * placed by address before a restart (<state_dir>/<name>.mc-events.json). */
int nrm_memory_health_new (const struct nrm_driver_host *h, struct nrm_memory_health **ret, nrm_error_t *err);
void nrm_memory_health_free (struct nrm_memory_health *mh);

/* Bytes of memory online now less those at the start, for each NUMA node
 * (topology order) into change; 0 where nothing is known. */
void nrm_memory_health_online_change (struct nrm_memory_health *mh, int64_t *change);

/* The health of the devices named (numaN, numaN-hugepages-SIZE). */
int nrm_memory_health_report (struct nrm_memory_health *mh, json_t *names, struct nrm_health_report *ret,
                              nrm_error_t *err);

/* Readable every pollSeconds and when a memory error event waits (an
 * epoll descriptor over the timer and trace_pipe); -1 without sysfs.
 * drain() reads both. The first call opens the trace (a warning through
 * h->log where it cannot): only the process that watches health, the
 * plugin, takes the events (each is read once) and keeps their tallies;
 * nrm slices and status show what it kept. */
int nrm_memory_health_fd (struct nrm_memory_health *mh);
void nrm_memory_health_drain (struct nrm_memory_health *mh);

#endif
