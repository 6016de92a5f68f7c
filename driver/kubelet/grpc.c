/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "driver/kubelet/grpc.h"
#include "nrm/base/xalloc.h"

/* Every completion carries a tag: what finished, and for whom. */
enum tag_kind
{
  TAG_NEW_CALL,    /* a registered method was called */
  TAG_NEW_UNKNOWN, /* a method nobody registered */
  TAG_UNARY_DONE,  /* reply and status sent */
  TAG_UNKNOWN_DONE,
  TAG_STREAM_CLOSE, /* the stream's call ended (client gone, or cancelled) */
  TAG_STREAM_SEND,
  TAG_SHUTDOWN,
};

struct tag
{
  enum tag_kind kind;
  void *obj;
};

struct nrm_grpc_server
{
  grpc_server *server;
  grpc_completion_queue *cq;
  struct nrm_grpc_method *methods;
  void **handles;
  size_t n_methods;
  pthread_t *threads;
  int n_threads;

  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool stopping, shutdown_done;
  long live;                       /* calls and pending requests not yet freed */
  struct nrm_grpc_stream *streams; /* open streams, to end them at stop */
  struct tag shutdown_tag;
};

/* A call waiting for, or being served by, a handler. */
struct call
{
  struct tag tag;
  struct nrm_grpc_server *srv;
  size_t method; /* index, or SIZE_MAX for an unknown method */
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
  grpc_call_details details; /* unknown methods only */
  grpc_byte_buffer *payload;
  grpc_byte_buffer *reply;
  grpc_slice status_details;
  int cancelled;
};

struct nrm_grpc_stream
{
  struct nrm_grpc_server *srv;
  grpc_call *call;
  pthread_mutex_t lock;
  int refs;
  bool closed, sending, initial_sent;
  int cancelled;
  struct tag close_tag, send_tag;
  grpc_byte_buffer *in_flight;
  struct queued *head, *tail;
  struct nrm_grpc_stream *next; /* server's list */
};

struct queued
{
  grpc_byte_buffer *bb;
  struct queued *next;
};

static void
live_add (struct nrm_grpc_server *s, long d)
{
  pthread_mutex_lock (&s->lock);
  s->live += d;
  if (s->live == 0 && s->shutdown_done)
    pthread_cond_broadcast (&s->cond);
  pthread_mutex_unlock (&s->lock);
}

uint8_t *
nrm_grpc_read_buffer (grpc_byte_buffer *bb, size_t *len)
{
  grpc_byte_buffer_reader r;
  uint8_t *out;
  *len = 0;
  if (bb == NULL || !grpc_byte_buffer_reader_init (&r, bb))
    return xcalloc (1, 1);
  grpc_slice all = grpc_byte_buffer_reader_readall (&r);
  grpc_byte_buffer_reader_destroy (&r);
  *len = GRPC_SLICE_LENGTH (all);
  out = xmalloc (*len);
  memcpy (out, GRPC_SLICE_START_PTR (all), *len);
  grpc_slice_unref (all);
  return out;
}

grpc_byte_buffer *
nrm_grpc_make_buffer (const uint8_t *buf, size_t len)
{
  grpc_slice s = grpc_slice_from_copied_buffer ((const char *) buf, len);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create (&s, 1);
  grpc_slice_unref (s);
  return bb;
}

static void
call_free (struct call *c)
{
  if (c->call)
    grpc_call_unref (c->call);
  grpc_metadata_array_destroy (&c->md);
  if (c->method == SIZE_MAX)
    grpc_call_details_destroy (&c->details);
  if (c->payload)
    grpc_byte_buffer_destroy (c->payload);
  if (c->reply)
    grpc_byte_buffer_destroy (c->reply);
  grpc_slice_unref (c->status_details);
  struct nrm_grpc_server *s = c->srv;
  free (c);
  live_add (s, -1);
}

/* Asks gRPC for the next call of a method (SIZE_MAX: any unknown method). */
static void
request_call (struct nrm_grpc_server *s, size_t method)
{
  struct call *c = xcalloc (1, sizeof (*c));
  grpc_call_error e;
  c->srv = s;
  c->method = method;
  c->tag.obj = c;
  c->status_details = grpc_empty_slice ();
  grpc_metadata_array_init (&c->md);
  live_add (s, 1);
  if (method == SIZE_MAX)
    {
      c->tag.kind = TAG_NEW_UNKNOWN;
      grpc_call_details_init (&c->details);
      e = grpc_server_request_call (s->server, &c->call, &c->details, &c->md, s->cq, s->cq, &c->tag);
    }
  else
    {
      c->tag.kind = TAG_NEW_CALL;
      e = grpc_server_request_registered_call (s->server, s->handles[method], &c->call, &c->deadline, &c->md,
                                               &c->payload, s->cq, s->cq, &c->tag);
    }
  if (e != GRPC_CALL_OK)
    call_free (c);
}

/* Sends status (and a reply on success) and frees the call when done. */
static void
finish_call (struct call *c, grpc_status_code code, const char *details, enum tag_kind kind)
{
  grpc_op ops[4];
  size_t n = 0;
  memset (ops, 0, sizeof (ops));
  ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[n++].data.send_initial_metadata.count = 0;
  if (code == GRPC_STATUS_OK && c->reply != NULL)
    {
      ops[n].op = GRPC_OP_SEND_MESSAGE;
      ops[n++].data.send_message.send_message = c->reply;
    }
  grpc_slice_unref (c->status_details);
  c->status_details = grpc_slice_from_copied_string (details ? details : "");
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = code;
  ops[n].data.send_status_from_server.status_details = details ? &c->status_details : NULL;
  ops[n++].data.send_status_from_server.trailing_metadata_count = 0;
  ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
  c->tag.kind = kind;
  if (grpc_call_start_batch (c->call, ops, n, &c->tag, NULL) != GRPC_CALL_OK)
    call_free (c);
}

static void stream_unref (struct nrm_grpc_stream *st);

static void
stream_start_send_locked (struct nrm_grpc_stream *st)
{
  grpc_op ops[2];
  size_t n = 0;
  if (st->sending || st->closed || st->head == NULL)
    return;
  struct queued *q = st->head;
  st->head = q->next;
  if (st->head == NULL)
    st->tail = NULL;
  st->in_flight = q->bb;
  free (q);
  memset (ops, 0, sizeof (ops));
  if (!st->initial_sent)
    {
      ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
      ops[n++].data.send_initial_metadata.count = 0;
      st->initial_sent = true;
    }
  ops[n].op = GRPC_OP_SEND_MESSAGE;
  ops[n++].data.send_message.send_message = st->in_flight;
  st->sending = true;
  st->refs++;
  if (grpc_call_start_batch (st->call, ops, n, &st->send_tag, NULL) != GRPC_CALL_OK)
    {
      st->sending = false;
      st->closed = true;
      st->refs--;
      grpc_byte_buffer_destroy (st->in_flight);
      st->in_flight = NULL;
    }
}

int
nrm_grpc_stream_send (struct nrm_grpc_stream *st, const uint8_t *buf, size_t len)
{
  struct queued *q = xcalloc (1, sizeof (*q));
  pthread_mutex_lock (&st->lock);
  if (st->closed)
    {
      pthread_mutex_unlock (&st->lock);
      free (q);
      return -1;
    }
  q->bb = nrm_grpc_make_buffer (buf, len);
  if (st->tail)
    st->tail->next = q;
  else
    st->head = q;
  st->tail = q;
  stream_start_send_locked (st);
  pthread_mutex_unlock (&st->lock);
  return 0;
}

bool
nrm_grpc_stream_closed (struct nrm_grpc_stream *st)
{
  pthread_mutex_lock (&st->lock);
  bool c = st->closed;
  pthread_mutex_unlock (&st->lock);
  return c;
}

struct nrm_grpc_stream *
nrm_grpc_stream_ref (struct nrm_grpc_stream *st)
{
  pthread_mutex_lock (&st->lock);
  st->refs++;
  pthread_mutex_unlock (&st->lock);
  return st;
}

static void
stream_unref (struct nrm_grpc_stream *st)
{
  pthread_mutex_lock (&st->lock);
  bool last = --st->refs == 0;
  pthread_mutex_unlock (&st->lock);
  if (!last)
    return;
  struct nrm_grpc_server *s = st->srv;
  pthread_mutex_lock (&s->lock);
  for (struct nrm_grpc_stream **p = &s->streams; *p; p = &(*p)->next)
    if (*p == st)
      {
        *p = st->next;
        break;
      }
  pthread_mutex_unlock (&s->lock);
  while (st->head)
    {
      struct queued *q = st->head;
      st->head = q->next;
      grpc_byte_buffer_destroy (q->bb);
      free (q);
    }
  grpc_call_unref (st->call);
  pthread_mutex_destroy (&st->lock);
  free (st);
  live_add (s, -1);
}

void
nrm_grpc_stream_unref (struct nrm_grpc_stream *st)
{
  stream_unref (st);
}

static void
open_stream (struct call *c)
{
  struct nrm_grpc_server *s = c->srv;
  const struct nrm_grpc_method *m = &s->methods[c->method];
  struct nrm_grpc_stream *st = xcalloc (1, sizeof (*st));
  size_t len;
  char *details = NULL;
  uint8_t *req = nrm_grpc_read_buffer (c->payload, &len);

  /* The stream takes the call over. */
  st->srv = s;
  st->call = c->call;
  c->call = NULL;
  pthread_mutex_init (&st->lock, NULL);
  st->refs = 2; /* the close op, and this function until it returns */
  st->close_tag = (struct tag){ TAG_STREAM_CLOSE, st };
  st->send_tag = (struct tag){ TAG_STREAM_SEND, st };
  live_add (s, 1);
  pthread_mutex_lock (&s->lock);
  st->next = s->streams;
  s->streams = st;
  pthread_mutex_unlock (&s->lock);

  grpc_op op;
  memset (&op, 0, sizeof (op));
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &st->cancelled;
  if (grpc_call_start_batch (st->call, &op, 1, &st->close_tag, NULL) != GRPC_CALL_OK)
    {
      st->closed = true;
      st->refs--;
    }
  grpc_status_code code = m->stream (m->ctx, req, len, st, &details);
  free (req);
  if (code != GRPC_STATUS_OK)
    {
      grpc_op ops[2];
      grpc_slice d = grpc_slice_from_copied_string (details ? details : "");
      memset (ops, 0, sizeof (ops));
      ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
      ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
      ops[1].data.send_status_from_server.status = code;
      ops[1].data.send_status_from_server.status_details = &d;
      /* The close op completes once the status is out. */
      grpc_call_start_batch (st->call, ops, 2, NULL, NULL);
      grpc_slice_unref (d);
    }
  free (details);
  call_free (c);
  stream_unref (st);
}

static void
serve_unary (struct call *c)
{
  const struct nrm_grpc_method *m = &c->srv->methods[c->method];
  size_t len = 0, resp_len = 0;
  uint8_t *resp = NULL;
  char *details = NULL;
  uint8_t *req = nrm_grpc_read_buffer (c->payload, &len);
  grpc_status_code code;

  code = m->unary (m->ctx, req, len, &resp, &resp_len, &details);
  free (req);
  if (code == GRPC_STATUS_OK)
    c->reply = nrm_grpc_make_buffer (resp ? resp : (const uint8_t *) "", resp_len);
  free (resp);
  finish_call (c, code, details, TAG_UNARY_DONE);
  free (details);
}

static void
handle (struct nrm_grpc_server *s, struct tag *t, bool ok)
{
  switch (t->kind)
    {
    case TAG_NEW_CALL:
      {
        struct call *c = t->obj;
        if (!ok)
          {
            call_free (c); /* the server is shutting down */
            return;
          }
        request_call (s, c->method);
        if (s->methods[c->method].stream)
          open_stream (c);
        else
          serve_unary (c);
        return;
      }
    case TAG_NEW_UNKNOWN:
      {
        struct call *c = t->obj;
        if (!ok)
          {
            call_free (c);
            return;
          }
        request_call (s, SIZE_MAX);
        finish_call (c, GRPC_STATUS_UNIMPLEMENTED, "unknown method", TAG_UNKNOWN_DONE);
        return;
      }
    case TAG_UNARY_DONE:
    case TAG_UNKNOWN_DONE:
      call_free (t->obj);
      return;
    case TAG_STREAM_CLOSE:
      {
        struct nrm_grpc_stream *st = t->obj;
        pthread_mutex_lock (&st->lock);
        st->closed = true;
        pthread_mutex_unlock (&st->lock);
        stream_unref (st);
        return;
      }
    case TAG_STREAM_SEND:
      {
        struct nrm_grpc_stream *st = t->obj;
        pthread_mutex_lock (&st->lock);
        grpc_byte_buffer_destroy (st->in_flight);
        st->in_flight = NULL;
        st->sending = false;
        if (!ok)
          st->closed = true;
        stream_start_send_locked (st);
        pthread_mutex_unlock (&st->lock);
        stream_unref (st);
        return;
      }
    case TAG_SHUTDOWN:
      pthread_mutex_lock (&s->lock);
      s->shutdown_done = true;
      if (s->live == 0)
        pthread_cond_broadcast (&s->cond);
      pthread_mutex_unlock (&s->lock);
      return;
    }
}

static void *
poll_thread (void *arg)
{
  struct nrm_grpc_server *s = arg;
  for (;;)
    {
      grpc_event ev = grpc_completion_queue_next (s->cq, gpr_inf_future (GPR_CLOCK_REALTIME), NULL);
      if (ev.type == GRPC_QUEUE_SHUTDOWN)
        return NULL;
      if (ev.type == GRPC_OP_COMPLETE && ev.tag != NULL)
        handle (s, ev.tag, ev.success != 0);
    }
}

int
nrm_grpc_server_start (const char *path, const struct nrm_grpc_method *methods, size_t n_methods, int threads,
                       struct nrm_grpc_server **ret, nrm_error_t *err)
{
  struct nrm_grpc_server *s = xcalloc (1, sizeof (*s));
  char *addr = xasprintf ("unix:%s", path);

  grpc_init ();
  pthread_mutex_init (&s->lock, NULL);
  pthread_cond_init (&s->cond, NULL);
  s->n_methods = n_methods;
  s->methods = xcalloc (n_methods, sizeof (*s->methods));
  s->handles = xcalloc (n_methods, sizeof (void *));
  s->n_threads = threads > 0 ? threads : 1;
  s->threads = xcalloc ((size_t) s->n_threads, sizeof (pthread_t));
  s->server = grpc_server_create (NULL, NULL);
  s->cq = grpc_completion_queue_create_for_next (NULL);
  s->shutdown_tag = (struct tag){ TAG_SHUTDOWN, s };
  grpc_server_register_completion_queue (s->server, s->cq, NULL);
  for (size_t i = 0; i < n_methods; i++)
    {
      s->methods[i] = methods[i];
      s->handles[i] = grpc_server_register_method (s->server, methods[i].path, NULL,
                                                   GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    }
  grpc_server_credentials *creds = grpc_insecure_server_credentials_create ();
  int port = grpc_server_add_http2_port (s->server, addr, creds);
  grpc_server_credentials_release (creds);
  free (addr);
  if (port == 0)
    {
      grpc_server_destroy (s->server);
      grpc_completion_queue_shutdown (s->cq);
      while (grpc_completion_queue_next (s->cq, gpr_inf_future (GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN)
        ;
      grpc_completion_queue_destroy (s->cq);
      free (s->methods);
      free (s->handles);
      free (s->threads);
      free (s);
      grpc_shutdown ();
      return nrm_error_set (err, EADDRNOTAVAIL, "cannot listen on unix socket `%s`", path);
    }
  grpc_server_start (s->server);
  /* Only root (the kubelet) talks to nrm. */
  if (chmod (path, 0600) < 0)
    {
      int e = errno;
      *ret = s;
      nrm_grpc_server_stop (s);
      *ret = NULL;
      return nrm_error_errno (err, e, "cannot restrict socket `%s`", path);
    }
  for (size_t i = 0; i < n_methods; i++)
    request_call (s, i);
  request_call (s, SIZE_MAX);
  for (int i = 0; i < s->n_threads; i++)
    pthread_create (&s->threads[i], NULL, poll_thread, s);
  *ret = s;
  return 0;
}

void
nrm_grpc_server_stop (struct nrm_grpc_server *s)
{
  if (s == NULL)
    return;
  pthread_mutex_lock (&s->lock);
  s->stopping = true;
  pthread_mutex_unlock (&s->lock);
  grpc_server_shutdown_and_notify (s->server, s->cq, &s->shutdown_tag);
  /* Without this the shutdown waits seconds on every idle client
   * connection (the kubelet keeps one open). A handler already running
   * still ends on its polling thread; only its answer may be lost, and the
   * kubelet retries prepare and unprepare, which are idempotent. */
  grpc_server_cancel_all_calls (s->server);
  /* Streams never end by themselves (already cancelled above; kept for
   * the streams that start while the server shuts down). */
  pthread_mutex_lock (&s->lock);
  for (struct nrm_grpc_stream *st = s->streams; st; st = st->next)
    grpc_call_cancel (st->call, NULL);
  pthread_mutex_unlock (&s->lock);
  if (s->threads[0] == 0)
    {
      /* Never started polling (failure in start): drain here. */
      grpc_event ev;
      while (!(s->shutdown_done && s->live == 0))
        {
          ev = grpc_completion_queue_next (s->cq, gpr_inf_future (GPR_CLOCK_REALTIME), NULL);
          if (ev.type == GRPC_OP_COMPLETE && ev.tag)
            handle (s, ev.tag, ev.success != 0);
        }
    }
  pthread_mutex_lock (&s->lock);
  while (!(s->shutdown_done && s->live == 0))
    pthread_cond_wait (&s->cond, &s->lock);
  pthread_mutex_unlock (&s->lock);
  grpc_server_destroy (s->server);
  grpc_completion_queue_shutdown (s->cq);
  for (int i = 0; i < s->n_threads; i++)
    if (s->threads[i])
      pthread_join (s->threads[i], NULL);
  if (s->threads[0] == 0)
    while (grpc_completion_queue_next (s->cq, gpr_inf_future (GPR_CLOCK_REALTIME), NULL).type != GRPC_QUEUE_SHUTDOWN)
      ;
  grpc_completion_queue_destroy (s->cq);
  pthread_mutex_destroy (&s->lock);
  pthread_cond_destroy (&s->cond);
  free (s->methods);
  free (s->handles);
  free (s->threads);
  free (s);
  grpc_shutdown ();
}
