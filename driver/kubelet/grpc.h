/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_GRPC_H
#define NRM_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>

#include "nrm/base/error.h"

/* A small gRPC server on gRPC core: unary and server-streaming methods over
 * one unix socket, serialized messages in and out (protobuf-c does the
 * rest). Unknown methods are answered UNIMPLEMENTED. */

struct nrm_grpc_server;
struct nrm_grpc_stream;

/* A unary handler: *resp (malloc'd) on GRPC_STATUS_OK, else *details. */
typedef grpc_status_code (*nrm_grpc_unary_fn) (void *ctx, const uint8_t *req, size_t len, uint8_t **resp,
                                               size_t *resp_len, char **details);
/* A server-streaming handler is called once when the stream opens; it keeps
 * the stream with nrm_grpc_stream_ref() to send on it later. */
typedef grpc_status_code (*nrm_grpc_stream_fn) (void *ctx, const uint8_t *req, size_t len,
                                                struct nrm_grpc_stream *stream, char **details);

struct nrm_grpc_method
{
  const char *path; /* "/package.Service/Method" */
  nrm_grpc_unary_fn unary;
  nrm_grpc_stream_fn stream;
  void *ctx;
};

/* Binds "unix:<path>" (mode 0600) and serves with `threads` polling threads. */
int nrm_grpc_server_start (const char *path, const struct nrm_grpc_method *methods, size_t n_methods, int threads,
                           struct nrm_grpc_server **ret, nrm_error_t *err);

/* Stops taking calls, lets unary calls in flight finish, ends open streams,
 * and frees everything. The socket file is left for the caller. */
void nrm_grpc_server_stop (struct nrm_grpc_server *s);

/* Queues one message on the stream; -1 once the client has gone. */
int nrm_grpc_stream_send (struct nrm_grpc_stream *st, const uint8_t *buf, size_t len);
bool nrm_grpc_stream_closed (struct nrm_grpc_stream *st);
struct nrm_grpc_stream *nrm_grpc_stream_ref (struct nrm_grpc_stream *st);
void nrm_grpc_stream_unref (struct nrm_grpc_stream *st);

/* A byte buffer holding a copy of buf; the caller destroys it. */
grpc_byte_buffer *nrm_grpc_make_buffer (const uint8_t *buf, size_t len);

/* Copies a byte buffer into one malloc'd block; NULL gives an empty block. */
uint8_t *nrm_grpc_read_buffer (grpc_byte_buffer *bb, size_t *len);

#endif
