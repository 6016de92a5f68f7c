/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_TEST_KUBELET_H
#define NRM_TEST_KUBELET_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>

#include "proto/pluginregistration.pb-c.h"

/* A gRPC core client that calls a plugin's sockets as the kubelet does:
 * insecure credentials over unix:<path>, a deadline per call. */

struct kc_reply
{
  grpc_status_code status;
  char *details;
  uint8_t *data; /* the reply message, or NULL */
  size_t len;
};

grpc_channel *kc_connect (const char *socket_path);
void kc_close (grpc_channel *ch);

/* One unary call; timeout in milliseconds. Returns 0 when the call
 * completed (whatever its status), -1 when it could not be made. */
int kc_unary (grpc_channel *ch, const char *method, const uint8_t *req, size_t len, int timeout_ms,
              struct kc_reply *out);
void kc_reply_done (struct kc_reply *r);

/* A server-streaming call. */
struct kc_stream;
struct kc_stream *kc_stream_open (grpc_channel *ch, const char *method, const uint8_t *req, size_t len, int timeout_ms);
/* Next message within timeout_ms: 1 got one, 0 end of stream, -1 timeout or error. */
int kc_stream_read (struct kc_stream *s, int timeout_ms, uint8_t **data, size_t *len);
/* Cancels and frees; returns the final status. */
grpc_status_code kc_stream_close (struct kc_stream *s);

/* Process helpers of the protocol tests. */
#include <stdbool.h>
#include <sys/types.h>

/* The exit status of pid within ms (128 + signal for a signal), or -1. */
int kc_wait_exit (pid_t pid, int ms);
/* Whether a plugin answers GetInfo on its registration socket (serving
 * means answering: a socket file may be left over from a crash). */
bool kc_answers (const char *reg_socket);
/* The whole of a file (malloc'd, NUL-terminated), or NULL. */
char *kc_slurp (const char *path);

/* A NodePrepareResourcesRequest (or NodeUnprepareResourcesRequest) of n
 * claims in namespace ns, packed (malloc'd, *len bytes). */
uint8_t *kc_pack_claims (const char *ns, const char *const *names, const char *const *uids, size_t n, bool unprepare,
                         size_t *len);

/* One claim reference as raw bytes, which may hold a NUL or bytes that are
 * not UTF-8, as a hostile client may send them. */
struct kc_ref
{
  const char *ns, *name, *uid;
  size_t ns_len, name_len, uid_len;
};

/* Like kc_pack_claims(), from raw references. */
uint8_t *kc_pack_refs (const struct kc_ref *refs, size_t n, bool unprepare, size_t *len);

/* GetInfo on a registration socket: the PluginInfo (free it with
 * pluginregistration__plugin_info__free_unpacked), or NULL when the call
 * failed or the answer cannot be decoded. */
Pluginregistration__PluginInfo *kc_get_info (const char *reg_socket, int timeout_ms);

#endif
