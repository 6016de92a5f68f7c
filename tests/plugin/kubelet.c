/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "driver/kubelet/grpc.h"
#include "proto/dra_v1.pb-c.h"
#include "proto/pluginregistration.pb-c.h"
#include "tests/plugin/kubelet.h"

static gpr_timespec
after_ms (int ms)
{
  return gpr_time_add (gpr_now (GPR_CLOCK_REALTIME), gpr_time_from_millis (ms, GPR_TIMESPAN));
}

grpc_channel *
kc_connect (const char *socket_path)
{
  char target[4200];
  snprintf (target, sizeof (target), "unix:%s", socket_path);
  grpc_channel_credentials *creds = grpc_insecure_credentials_create ();
  grpc_channel *ch = grpc_channel_create (target, creds, NULL);
  grpc_channel_credentials_release (creds);
  return ch;
}

void
kc_close (grpc_channel *ch)
{
  if (ch)
    grpc_channel_destroy (ch);
}

int
kc_unary (grpc_channel *ch, const char *method, const uint8_t *req, size_t len, int timeout_ms, struct kc_reply *out)
{
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck (NULL);
  grpc_slice m = grpc_slice_from_copied_string (method);
  grpc_call *call
      = grpc_channel_create_call (ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m, NULL, after_ms (timeout_ms), NULL);
  grpc_slice_unref (m);
  grpc_metadata_array initial, trailing;
  grpc_metadata_array_init (&initial);
  grpc_metadata_array_init (&trailing);
  grpc_byte_buffer *send = nrm_grpc_make_buffer (req, len), *recv = NULL;
  grpc_slice details = grpc_empty_slice ();
  grpc_op ops[6];
  memset (ops, 0, sizeof (ops));
  memset (out, 0, sizeof (*out));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &trailing;
  ops[5].data.recv_status_on_client.status = &out->status;
  ops[5].data.recv_status_on_client.status_details = &details;
  int tag = 0, r = -1;
  if (grpc_call_start_batch (call, ops, 6, &tag, NULL) == GRPC_CALL_OK)
    {
      grpc_event ev = grpc_completion_queue_pluck (cq, &tag, after_ms (timeout_ms + 5000), NULL);
      if (ev.type == GRPC_OP_COMPLETE)
        {
          r = 0;
          out->details = strndup ((const char *) GRPC_SLICE_START_PTR (details), GRPC_SLICE_LENGTH (details));
          if (recv)
            out->data = nrm_grpc_read_buffer (recv, &out->len);
        }
    }
  if (recv)
    grpc_byte_buffer_destroy (recv);
  grpc_byte_buffer_destroy (send);
  grpc_slice_unref (details);
  grpc_metadata_array_destroy (&initial);
  grpc_metadata_array_destroy (&trailing);
  grpc_call_unref (call);
  grpc_completion_queue_shutdown (cq);
  while (grpc_completion_queue_pluck (cq, NULL, gpr_inf_future (GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy (cq);
  return r;
}

void
kc_reply_done (struct kc_reply *r)
{
  free (r->details);
  free (r->data);
  memset (r, 0, sizeof (*r));
}

struct kc_stream
{
  grpc_completion_queue *cq;
  grpc_call *call;
  grpc_metadata_array initial, trailing;
  grpc_status_code status;
  grpc_slice details;
  int status_tag;
  int got_initial;
};

struct kc_stream *
kc_stream_open (grpc_channel *ch, const char *method, const uint8_t *req, size_t len, int timeout_ms)
{
  struct kc_stream *s = calloc (1, sizeof (*s));
  s->cq = grpc_completion_queue_create_for_pluck (NULL);
  grpc_slice m = grpc_slice_from_copied_string (method);
  s->call = grpc_channel_create_call (ch, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq, m, NULL, after_ms (timeout_ms), NULL);
  grpc_slice_unref (m);
  grpc_metadata_array_init (&s->initial);
  grpc_metadata_array_init (&s->trailing);
  s->details = grpc_empty_slice ();
  grpc_byte_buffer *send = nrm_grpc_make_buffer (req, len);
  grpc_op ops[4];
  memset (ops, 0, sizeof (ops));
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  int tag = 0;
  grpc_call_start_batch (s->call, ops, 3, &tag, NULL);
  grpc_completion_queue_pluck (s->cq, &tag, after_ms (timeout_ms), NULL);
  grpc_byte_buffer_destroy (send);
  memset (ops, 0, sizeof (ops));
  ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[0].data.recv_status_on_client.trailing_metadata = &s->trailing;
  ops[0].data.recv_status_on_client.status = &s->status;
  ops[0].data.recv_status_on_client.status_details = &s->details;
  grpc_call_start_batch (s->call, ops, 1, &s->status_tag, NULL);
  return s;
}

int
kc_stream_read (struct kc_stream *s, int timeout_ms, uint8_t **data, size_t *len)
{
  grpc_byte_buffer *recv = NULL;
  grpc_op ops[2];
  size_t n = 0;
  int tag = 0;
  memset (ops, 0, sizeof (ops));
  if (!s->got_initial)
    {
      /* Messages arrive only after the initial metadata is asked for. */
      ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
      ops[n++].data.recv_initial_metadata.recv_initial_metadata = &s->initial;
      s->got_initial = 1;
    }
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n++].data.recv_message.recv_message = &recv;
  if (grpc_call_start_batch (s->call, ops, n, &tag, NULL) != GRPC_CALL_OK)
    return -1;
  grpc_event ev = grpc_completion_queue_pluck (s->cq, &tag, after_ms (timeout_ms), NULL);
  if (ev.type != GRPC_OP_COMPLETE)
    {
      /* Cancel so that the pending receive completes, then collect it. */
      grpc_call_cancel (s->call, NULL);
      grpc_completion_queue_pluck (s->cq, &tag, gpr_inf_future (GPR_CLOCK_REALTIME), NULL);
      if (recv)
        grpc_byte_buffer_destroy (recv);
      return -1;
    }
  if (recv == NULL)
    return 0;
  *data = nrm_grpc_read_buffer (recv, len);
  grpc_byte_buffer_destroy (recv);
  return 1;
}

grpc_status_code
kc_stream_close (struct kc_stream *s)
{
  grpc_call_cancel (s->call, NULL);
  grpc_completion_queue_pluck (s->cq, &s->status_tag, gpr_inf_future (GPR_CLOCK_REALTIME), NULL);
  grpc_status_code st = s->status;
  grpc_call_unref (s->call);
  grpc_metadata_array_destroy (&s->initial);
  grpc_metadata_array_destroy (&s->trailing);
  grpc_slice_unref (s->details);
  grpc_completion_queue_shutdown (s->cq);
  while (grpc_completion_queue_pluck (s->cq, NULL, gpr_inf_future (GPR_CLOCK_REALTIME), NULL).type
         != GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy (s->cq);
  free (s);
  return st;
}

int
kc_wait_exit (pid_t pid, int ms)
{
  int status;
  for (int i = 0; i < ms / 10; i++)
    {
      if (waitpid (pid, &status, WNOHANG) == pid)
        return WIFEXITED (status) ? WEXITSTATUS (status) : 128 + WTERMSIG (status);
      usleep (10000);
    }
  return -1;
}

Pluginregistration__PluginInfo *
kc_get_info (const char *reg_socket, int timeout_ms)
{
  Pluginregistration__InfoRequest in = PLUGINREGISTRATION__INFO_REQUEST__INIT;
  uint8_t buf[16];
  size_t len = protobuf_c_message_pack (&in.base, buf);
  grpc_channel *ch = kc_connect (reg_socket);
  struct kc_reply r;
  Pluginregistration__PluginInfo *info = NULL;
  if (kc_unary (ch, "/pluginregistration.Registration/GetInfo", buf, len, timeout_ms, &r) == 0
      && r.status == GRPC_STATUS_OK)
    info = pluginregistration__plugin_info__unpack (NULL, r.len, r.data);
  kc_reply_done (&r);
  kc_close (ch);
  return info;
}

bool
kc_answers (const char *reg_socket)
{
  Pluginregistration__PluginInfo *info = kc_get_info (reg_socket, 200);
  if (info)
    pluginregistration__plugin_info__free_unpacked (info, NULL);
  return info != NULL;
}

char *
kc_slurp (const char *path)
{
  FILE *f = fopen (path, "re");
  if (f == NULL)
    return NULL;
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream (&buf, &len);
  int c;
  while (m && (c = fgetc (f)) != EOF)
    fputc (c, m);
  if (m)
    fclose (m);
  fclose (f);
  return buf;
}

static ProtobufCBinaryData
bytes_of (const char *s, size_t len)
{
  return (ProtobufCBinaryData){ .len = len, .data = (uint8_t *) s };
}

uint8_t *
kc_pack_claims (const char *ns, const char *const *names, const char *const *uids, size_t n, bool unprepare,
                size_t *len)
{
  struct kc_ref *refs = calloc (n + 1, sizeof (*refs));
  for (size_t i = 0; i < n; i++)
    refs[i] = (struct kc_ref){ ns, names[i], uids[i], strlen (ns), strlen (names[i]), strlen (uids[i]) };
  uint8_t *buf = kc_pack_refs (refs, n, unprepare, len);
  free (refs);
  return buf;
}

uint8_t *
kc_pack_refs (const struct kc_ref *refs, size_t n, bool unprepare, size_t *len)
{
  K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim *c = calloc (n + 1, sizeof (*c));
  K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim **ptrs = calloc (n + 1, sizeof (*ptrs));
  uint8_t *buf;
  for (size_t i = 0; i < n; i++)
    {
      k8s__io__kubelet__pkg__apis__dra__v1__claim__init (&c[i]);
      c[i].namespace_ = bytes_of (refs[i].ns, refs[i].ns_len);
      c[i].name = bytes_of (refs[i].name, refs[i].name_len);
      c[i].uid = bytes_of (refs[i].uid, refs[i].uid_len);
      ptrs[i] = &c[i];
    }
  /* The two requests have the same one field: claims. */
  K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest ureq
      = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_REQUEST__INIT;
  K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest preq
      = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_REQUEST__INIT;
  ureq.n_claims = preq.n_claims = n;
  ureq.claims = preq.claims = ptrs;
  const ProtobufCMessage *m = unprepare ? &ureq.base : &preq.base;
  *len = protobuf_c_message_get_packed_size (m);
  buf = malloc (*len + 1);
  protobuf_c_message_pack (m, buf);
  free (c);
  free (ptrs);
  return buf;
}
