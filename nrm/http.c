/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/http.h"

struct nrm_http
{
  struct MHD_Daemon *d;
  nrm_http_handler fn;
  void *ctx;
  int port;
};

static enum MHD_Result
answer (void *cls, struct MHD_Connection *conn, const char *url, const char *method, const char *version,
        const char *upload, size_t *upload_size, void **req_cls)
{
  struct nrm_http *h = cls;
  struct MHD_Response *r;
  int status = 200;
  const char *type = "text/plain; charset=utf-8";
  char *body = NULL;
  enum MHD_Result ret;

  if (strcmp (method, "GET") != 0 && strcmp (method, "HEAD") != 0)
    {
      static const char msg[] = "only GET\n";
      r = MHD_create_response_from_buffer (sizeof (msg) - 1, (void *) msg, MHD_RESPMEM_PERSISTENT);
      status = MHD_HTTP_METHOD_NOT_ALLOWED;
    }
  else if ((body = h->fn (h->ctx, url, &status, &type)) != NULL)
    r = MHD_create_response_from_buffer (strlen (body), body, MHD_RESPMEM_MUST_FREE);
  else
    {
      static const char msg[] = "not found: try /healthz, /readyz or /metrics\n";
      r = MHD_create_response_from_buffer (sizeof (msg) - 1, (void *) msg, MHD_RESPMEM_PERSISTENT);
      status = MHD_HTTP_NOT_FOUND;
    }
  if (r == NULL)
    {
      free (body);
      return MHD_NO;
    }
  MHD_add_response_header (r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  ret = MHD_queue_response (conn, (unsigned) status, r);
  MHD_destroy_response (r);
  return ret;
}

/* One daemon; addr NULL is every address. */
static struct MHD_Daemon *
start_daemon (struct nrm_http *s, unsigned flags, uint16_t port, const struct sockaddr *addr)
{
  return MHD_start_daemon (MHD_USE_INTERNAL_POLLING_THREAD | flags, port, NULL, NULL, answer, s, MHD_OPTION_SOCK_ADDR,
                           addr, MHD_OPTION_CONNECTION_LIMIT, 16u, MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
}

/* The address split and resolved: *ai is NULL for ":PORT". */
static int
parse_address (const char *address, long *ret_port, struct addrinfo **ai, nrm_error_t *err)
{
  cleanup_free char *host = NULL;
  const char *colon = strrchr (address, ':');
  *ai = NULL;
  if (colon == NULL || colon[1] == '\0')
    return nrm_error_set (err, EINVAL, "HTTP address `%s` is not HOST:PORT (e.g. 0.0.0.0:9464, or :9464)", address);
  const char *h = address;
  size_t hl = (size_t) (colon - address);
  if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']')
    {
      h++;
      hl -= 2;
    }
  host = xstrndup (h, hl);
  char *end = NULL;
  long port = strtol (colon + 1, &end, 10);
  if (*end || port < 0 || port > 65535)
    return nrm_error_set (err, EINVAL, "HTTP address `%s`: bad port (0 to 65535)", address);

  struct addrinfo hints
      = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
  if (*host != '\0')
    {
      int gr = getaddrinfo (host, colon + 1, &hints, ai);
      if (gr != 0)
        return nrm_error_set (err, EINVAL, "HTTP address `%s`: %s", address, gai_strerror (gr));
    }
  *ret_port = port;
  return 0;
}

int
nrm_http_check_address (const char *address, nrm_error_t *err)
{
  long port;
  struct addrinfo *ai = NULL;
  if (parse_address (address, &port, &ai, err) < 0)
    return -1;
  if (ai)
    freeaddrinfo (ai);
  return 0;
}

int
nrm_http_start (const char *address, nrm_http_handler fn, void *ctx, struct nrm_http **ret, nrm_error_t *err)
{
  long port = 0;
  struct addrinfo *ai = NULL;
  if (parse_address (address, &port, &ai, err) < 0)
    return -1;
  struct nrm_http *s = xcalloc (1, sizeof (*s));
  s->fn = fn;
  s->ctx = ctx;
  if (ai)
    {
      s->d = start_daemon (s, ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0, (uint16_t) port, ai->ai_addr);
      freeaddrinfo (ai);
    }
  else
    {
      /* ":PORT" is every address, IPv4 and IPv6 (one dual-stack socket);
       * IPv4 only on a machine without IPv6. */
      s->d = start_daemon (s, MHD_USE_DUAL_STACK, (uint16_t) port, NULL);
      if (s->d == NULL)
        s->d = start_daemon (s, 0, (uint16_t) port, NULL);
    }
  if (s->d == NULL)
    {
      free (s);
      return nrm_error_set (err, EADDRINUSE, "cannot serve HTTP on `%s` (address in use or not local?)", address);
    }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info (s->d, MHD_DAEMON_INFO_BIND_PORT);
  s->port = info ? info->port : 0;
  *ret = s;
  return 0;
}

int
nrm_http_port (struct nrm_http *h)
{
  return h->port;
}

void
nrm_http_stop (struct nrm_http *h)
{
  if (h == NULL)
    return;
  MHD_stop_daemon (h->d);
  free (h);
}
