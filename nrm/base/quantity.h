/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_BASE_QUANTITY_H
#define NRM_BASE_QUANTITY_H

#include <stdint.h>

#include "nrm/base/error.h"

/* Kubernetes resource.Quantity: "<number><suffix>" with binary (Ki..Ei),
 * decimal (n, u, m, "", k, M, G, T, P, E) or exponent (e3) suffixes.
 * Values are held exactly in nano-units. */
typedef __int128 nrm_quantity_t;

#define NRM_QUANTITY_ONE ((nrm_quantity_t) 1000000000)

int nrm_quantity_parse (const char *text, nrm_quantity_t *ret, nrm_error_t *err);

/* Parses a byte size (a quantity that is a whole, non-negative number). */
int nrm_quantity_parse_bytes (const char *text, uint64_t *ret, nrm_error_t *err);

/* The exact decimal text of q ("1", "0.5", "18446744073709551617"), for
 * messages. Returns buf (64 bytes hold any quantity). */
char *nrm_quantity_text (nrm_quantity_t q, char *buf, unsigned len);

/* Canonical text of a whole number: the largest binary suffix that divides
 * it exactly ("64Gi", "1536Mi", "17"), or plain digits when binary is
 * false. Returns buf. */
char *nrm_quantity_format (uint64_t value, int binary, char *buf, unsigned len);

#endif
