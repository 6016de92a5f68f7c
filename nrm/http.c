/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

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

/* A listening TCP socket on addr, or -1 with errno. */
static int
listen_on (int family, const struct sockaddr *addr, socklen_t len, bool dual)
{
  cleanup_close int fd = socket (family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1, zero = 0;
  if (fd < 0 || setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof (one)) < 0
      || (dual && setsockopt (fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof (zero)) < 0) || bind (fd, addr, len) < 0
      || listen (fd, 64) < 0)
    return -1;
  return TAKE_FD (fd);
}

int
nrm_http_bind (const char *address, int *ret, nrm_error_t *err)
{
  long port = 0;
  struct addrinfo *ai = NULL;
  int fd;
  if (parse_address (address, &port, &ai, err) < 0)
    return -1;
  if (ai)
    {
      fd = listen_on (ai->ai_family, ai->ai_addr, ai->ai_addrlen, false);
      freeaddrinfo (ai);
    }
  else
    {
      /* ":PORT" is every address, IPv4 and IPv6 (one dual-stack socket);
       * IPv4 only on a machine without IPv6. */
      struct sockaddr_in6 a6
          = { .sin6_family = AF_INET6, .sin6_port = htons ((uint16_t) port), .sin6_addr = in6addr_any };
      struct sockaddr_in a4
          = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port), .sin_addr.s_addr = INADDR_ANY };
      fd = listen_on (AF_INET6, (struct sockaddr *) &a6, sizeof (a6), true);
      if (fd < 0 && errno != EADDRINUSE)
        fd = listen_on (AF_INET, (struct sockaddr *) &a4, sizeof (a4), false);
    }
  if (fd < 0)
    return nrm_error_errno (err, errno, "cannot serve HTTP on `%s`", address);
  *ret = fd;
  return 0;
}

int
nrm_http_start (int fd, nrm_http_handler fn, void *ctx, struct nrm_http **ret, nrm_error_t *err)
{
  struct nrm_http *s = xcalloc (1, sizeof (*s));
  struct sockaddr_storage ss;
  socklen_t sl = sizeof (ss);
  s->fn = fn;
  s->ctx = ctx;
  s->d = MHD_start_daemon (MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, answer, s, MHD_OPTION_LISTEN_SOCKET, fd,
                           MHD_OPTION_CONNECTION_LIMIT, 16u, MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
  if (s->d == NULL)
    {
      free (s);
      close (fd);
      return nrm_error_set (err, EIO, "cannot start the HTTP server");
    }
  if (getsockname (fd, (struct sockaddr *) &ss, &sl) == 0)
    s->port = ntohs (ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *) &ss)->sin6_port
                                              : ((struct sockaddr_in *) &ss)->sin_port);
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
