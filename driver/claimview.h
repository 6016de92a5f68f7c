/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_CLAIMVIEW_H
#define NRM_CLAIMVIEW_H

#include <jansson.h>

#include "driver/driver.h"

/* A claim's allocation as one driver sees it (the view's arrays owned). */
struct nrm_allocation
{
  struct nrm_claim_view view;
  struct nrm_alloc_result *all, *mine;
};

void nrm_allocation_done (struct nrm_allocation *a);

/* Checks a ResourceClaim object (its UID must be uid) and extracts every
 * result (each driver's), this driver's (which must be in the pool of this
 * node) and this driver's opaque configuration. a must be zeroed; release
 * it with nrm_allocation_done() whatever the outcome. */
int nrm_claim_allocation (const char *driver, const char *node, json_t *claim, const char *uid,
                          struct nrm_allocation *a, nrm_error_t *err);

#endif
