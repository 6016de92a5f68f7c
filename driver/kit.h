/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_KIT_H
#define NRM_KIT_H

#include <jansson.h>
#include <stdbool.h>

#include "driver/driver.h"
#include "nrm/base/quantity.h"

/* Helpers that every driver's prepare needs: request names, consumed
 * capacity, opaque configuration. */

/* Whether a config entry's "requests" list (empty: every request) names
 * request ("req" also names "req/sub"). */
bool nrm_kit_names_request (json_t *requests, const char *request);

/* The consumedCapacity `key` of a result, or dflt when it has none; an
 * amount that is not a positive quantity is an error naming the device. */
int nrm_kit_consumed (const struct nrm_alloc_result *r, const char *key, nrm_quantity_t dflt, nrm_quantity_t *ret,
                      nrm_error_t *err);

/* The consumedCapacity `key` of a result, checked against what the device
 * (its JSON as published) offers: at most the capacity's value, and within
 * its requestPolicy (validRange min, max and step, or validValues). Without
 * a consumed amount the result took the policy's default (the whole value
 * when there is no policy). Anything else is an error naming the amount,
 * the device and the limit; the arithmetic is exact. */
int nrm_kit_consumed_checked (const struct nrm_alloc_result *r, json_t *device, const char *key, nrm_quantity_t *ret,
                              nrm_error_t *err);

/* The parameters of opaque configuration entry i, checked to be an object
 * of this apiVersion and kind; *ret is borrowed. */
int nrm_kit_opaque_params (json_t *entry, size_t i, const char *api_version, const char *kind, json_t **ret,
                           nrm_error_t *err);

/* The PodGroup a claim is reserved for (KEP-5729: one status.reservedFor
 * entry of scheduling.k8s.io podgroups, shared by every pod of the group),
 * or NULL; the string belongs to claim. */
const char *nrm_kit_pod_group (json_t *claim);

/* name -> Device of a pool, and the names in pool order (new references). */
int nrm_kit_index_pool (const struct nrm_pool *p, json_t **ret_by_name, json_t **ret_names, nrm_error_t *err);

#endif
