/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_NAMES_H
#define NRM_NAMES_H

#include <stdbool.h>

/* Kubernetes name formats (RFC 1123 as the API server checks them). */
bool nrm_is_dns_label (const char *s);              /* <= 63, [a-z0-9]([-a-z0-9]*[a-z0-9])? */
bool nrm_is_dns_subdomain (const char *s, int max); /* dot-separated RFC 1123 labels, <= max in all */
bool nrm_is_c_identifier (const char *s, int max);  /* [A-Za-z_][A-Za-z0-9_]*, <= max */
bool nrm_is_qualified_name (const char *s);         /* [<subdomain <= 63>/]<identifier <= 32> */

/* The base request "req" of a request reference "req" or "req/sub", as
 * the kubelet's reply and the device metadata name it (malloc'd). */
char *nrm_base_request (const char *request);

#endif
