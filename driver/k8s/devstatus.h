/* SPDX-License-Identifier: Apache-2.0 */
/* A claim's status.devices as the binder and the placement writer read it:
 * its entries (a list keyed by driver, pool, device and shareID), their
 * conditions, and the time a condition changed. */
#ifndef NRM_K8S_DEVSTATUS_H
#define NRM_K8S_DEVSTATUS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* Whether a and b have the same string at key (both without it counts). */
bool nrm_devstatus_same (json_t *a, json_t *b, const char *key);

/* Whether two entries (or an entry and an allocation result, or a key of
 * managedFields) are the same item of the list. */
bool nrm_devstatus_same_item (json_t *a, json_t *b);

/* The claim's status.devices entry of item, or NULL (borrowed). */
json_t *nrm_devstatus_entry (json_t *claim, json_t *item);

/* The condition of this type in an entry, or NULL (borrowed). */
json_t *nrm_devstatus_condition (json_t *entry, const char *type);

/* Now, as a condition's lastTransitionTime (RFC 3339, seconds, UTC). */
void nrm_devstatus_now (char *buf, size_t len);

#endif
