/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_MEMORY_ONDEMAND_H
#define NRM_MEMORY_ONDEMAND_H

/* Huge pages raised on demand (memory.hugepagesOnDemand): a node's pool of
 * a page size may grow above the administrator's baseline by at most the
 * configured room, for the claims allocated on its device. Every change is
 * journaled first, durably (<state_dir>/<name>.hugepages/node<N>-<kB>kB.json:
 * baseline, target, and the pages of each claim), and the kernel's pool is
 * then set to the target, max(baseline, reserved + pages of the claims): a
 * crash at any step leaves a journal from which the next start sets the
 * same target. Not thread-safe: the memory driver locks. */

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "driver/driver.h"

/* A claim that bound pages and was never prepared (its pod went elsewhere)
 * gives them back after this long. */
#define NRM_ONDEMAND_STALE_S 600

struct nrm_ondemand;

/* From the memory driver's hugepagesOnDemand setting ({"2Mi": "4Gi"}:
 * room per NUMA node and size; NULL: off, *ret stays NULL). Reads the
 * journal and sets the kernel's pools to their journaled targets. */
int nrm_ondemand_new (const struct nrm_driver_host *h, json_t *setting, struct nrm_ondemand **ret, nrm_error_t *err);
void nrm_ondemand_free (struct nrm_ondemand *od);

/* Whether numa[i].hugepages[k] is raised on demand; its baseline, its
 * target now and its room, in pages. */
bool nrm_ondemand_slot (const struct nrm_ondemand *od, size_t i, size_t k, uint64_t *baseline, uint64_t *target,
                        uint64_t *room);

/* The condition types of the huge-page devices: ready, failed. */
const char *nrm_ondemand_condition (const struct nrm_ondemand *od, bool failed);

/* Whether a device is an on-demand huge-page device. */
bool nrm_ondemand_device (const struct nrm_ondemand *od, const char *device);

/* Whether the claim holds pages of the journal. */
bool nrm_ondemand_has (const struct nrm_ondemand *od, const char *uid);

/* Takes the pages of claim uid (want: device -> bytes; devices that are
 * not on demand are left out): raises each pool that lacks them.
 * unclaimed[i]: bytes of NUMA node index i that no claim holds, which a
 * raise must fit in. When a pool cannot be raised (too little memory, the
 * kernel gives fewer pages), every pool goes back to what it was and the
 * error names the node, the size, what was asked and what was had. Taken
 * already: 0, nothing changes. */
int nrm_ondemand_take (struct nrm_ondemand *od, const char *uid, json_t *want, const uint64_t *unclaimed,
                       nrm_error_t *err);

/* Gives the claim's pages back: each pool down to max(baseline, what the
 * other claims need). A failure is logged; the journal keeps the target. */
void nrm_ondemand_give (struct nrm_ondemand *od, const char *uid);

/* Gives back the pages of claims that held(ctx, uid) says are not held
 * and whose entry is NRM_ONDEMAND_STALE_S old at now (counted from the
 * driver's start at the earliest, so that a restart restores its claims
 * first). */
void nrm_ondemand_give_stale (struct nrm_ondemand *od, time_t now, bool (*held) (void *ctx, const char *uid),
                              void *ctx);

#endif
