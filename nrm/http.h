/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_HTTP_H
#define NRM_HTTP_H

#include "nrm/base/error.h"

/* A small HTTP server (libmicrohttpd) for /healthz, /readyz and /metrics.
 * The handler gets the path of every GET and returns the body (malloc'd),
 * setting *status and *content_type; NULL means 404. */
typedef char *(*nrm_http_handler) (void *ctx, const char *path, int *status, const char **content_type);

struct nrm_http;

/* address: "HOST:PORT", "[V6]:PORT" or ":PORT" (every address). */
/* Whether address is one nrm_http_start takes (HOST:PORT with a port from
 * 0 to 65535 and a host that resolves), without binding anything. */
int nrm_http_check_address (const char *address, nrm_error_t *err);
int nrm_http_start (const char *address, nrm_http_handler fn, void *ctx, struct nrm_http **ret, nrm_error_t *err);
/* The port actually bound (for ":0"). */
int nrm_http_port (struct nrm_http *h);
void nrm_http_stop (struct nrm_http *h);

#endif
