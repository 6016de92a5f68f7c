/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_HTTP_H
#define NRM_HTTP_H

#include "nrm/base/error.h"

/* A small HTTP server (libmicrohttpd) for /healthz, /readyz and /metrics.
 * The handler gets the path of every GET and returns the body (malloc'd),
 * setting *status and *content_type; NULL means 404. */
typedef char *(*nrm_http_handler) (void *ctx, const char *path, int *status, const char **content_type);

struct nrm_http;

/* The listening socket for address: "HOST:PORT", "[V6]:PORT" or ":PORT"
 * (every address, IPv6 and IPv4). Bound at once, so that a bad address or
 * a port in use is refused before anything else is set up. */
int nrm_http_bind (const char *address, int *fd, nrm_error_t *err);
/* Serves on a socket of nrm_http_bind (which it owns from now on). */
int nrm_http_start (int fd, nrm_http_handler fn, void *ctx, struct nrm_http **ret, nrm_error_t *err);
/* The port actually bound (for ":0"). */
int nrm_http_port (struct nrm_http *h);
void nrm_http_stop (struct nrm_http *h);

#endif
