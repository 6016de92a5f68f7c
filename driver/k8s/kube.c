/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <libgen.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "driver/k8s/kube.h"
#include "driver/k8s/kubeconfig.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/clock.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/fs.h"
#include "nrm/base/yaml.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define MAX_BODY (64u << 20)      /* a list of slices is far smaller */
#define MAX_EVENT (16u << 20)     /* one watch event line */
#define MAX_SMALL_FILE (1u << 20) /* tokens, certificates, kubeconfigs */
#define TOKEN_REFRESH_NS (60LL * 1000000000LL)

struct nrm_kube
{
  char *server; /* https://host:port, no trailing slash */
  char *user_agent;
  /* TLS: a CA file or PEM data; a client certificate and key as files or
   * PEM data. */
  char *ca_file, *ca_pem;
  char *cert_file, *cert_pem, *key_file, *key_pem;
  /* Bearer token: fixed, or a file re-read when it changes or every minute
   * (projected service account tokens rotate). */
  pthread_mutex_t token_lock;
  char *token;
  char *token_file;
  long long token_read_ns;
  struct timespec token_mtime;
  /* Or an exec plugin's credential, run again when it expires or the API
   * answers 401; its client certificate replaces cert_pem and key_pem. */
  struct nrm_kubeconfig *exec;
  bool exec_have; /* the plugin answered: a credential is in hand */
  time_t token_expires;
  char *namespace; /* the kubeconfig context's */
  /* Token bucket. */
  pthread_mutex_t rate_lock;
  double qps, tokens;
  int burst;
  long long rate_ns;
  int timeout_ms, max_tries;
  /* Set at shutdown: calls in flight and waits end at once. */
  volatile int cancelled;
  /* One connection cache for every thread. */
  CURLSH *share;
  pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
};

static long long
now_ns (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Sleeps in short steps so that a shutdown is not kept waiting. */
static void
sleep_ns (struct nrm_kube *k, long long ns)
{
  while (ns > 0 && !__atomic_load_n (&k->cancelled, __ATOMIC_RELAXED))
    {
      long long step = ns > 50000000LL ? 50000000LL : ns;
      struct timespec ts = { .tv_sec = 0, .tv_nsec = step };
      nanosleep (&ts, NULL);
      ns -= step;
    }
}

static int
progress_cb (void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
  struct nrm_kube *k = ctx;
  return __atomic_load_n (&k->cancelled, __ATOMIC_RELAXED) ? 1 : 0;
}

void
nrm_kube_cancel (struct nrm_kube *k)
{
  __atomic_store_n (&k->cancelled, 1, __ATOMIC_RELAXED);
}

/* A uniform random factor in [0.5, 1.5): spreads retries of many nodes. */
static double
jitter (void)
{
  return 0.5 + (double) nrm_random_below (10000) / 10000.0;
}

long
nrm_kube_relist_wait_ms (void)
{
  return 250 + (long) nrm_random_below (500);
}

long
nrm_kube_retry_after_ms (json_t *status, unsigned *refused)
{
  json_int_t s = json_integer_value (json_object_get (json_object_get (status, "details"), "retryAfterSeconds"));
  s = s < 1 ? 1 : s > 10 ? 10 : s;
  unsigned doublings = *refused < 5 ? *refused : 5;
  (*refused)++;
  return (long) ((double) (s << doublings) * 1000.0 * jitter ());
}

void
nrm_kube_options_init (struct nrm_kube_options *o)
{
  memset (o, 0, sizeof (*o));
  o->qps = 20;
  o->burst = 100;
  o->timeout_ms = 10000;
  o->max_tries = 5;
  o->user_agent = PACKAGE_NAME "/" PACKAGE_VERSION;
}

static void
share_lock (CURL *h, curl_lock_data data, curl_lock_access a, void *ctx)
{
  struct nrm_kube *k = ctx;
  pthread_mutex_lock (&k->share_locks[data]);
}

static void
share_unlock (CURL *h, curl_lock_data data, void *ctx)
{
  struct nrm_kube *k = ctx;
  pthread_mutex_unlock (&k->share_locks[data]);
}

void
nrm_kube_free (struct nrm_kube *k)
{
  if (k == NULL)
    return;
  if (k->share)
    curl_share_cleanup (k->share);
  for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
    pthread_mutex_destroy (&k->share_locks[i]);
  pthread_mutex_destroy (&k->token_lock);
  pthread_mutex_destroy (&k->rate_lock);
  free (k->server);
  free (k->user_agent);
  free (k->ca_file);
  free (k->ca_pem);
  free (k->cert_file);
  free (k->cert_pem);
  free (k->key_file);
  free (k->key_pem);
  if (k->token)
    explicit_bzero (k->token, strlen (k->token));
  free (k->token);
  free (k->token_file);
  free (k->namespace);
  nrm_kubeconfig_free (k->exec);
  free (k);
}

bool
nrm_kube_in_cluster (void)
{
  const char *host = getenv ("KUBERNETES_SERVICE_HOST"), *port = getenv ("KUBERNETES_SERVICE_PORT");
  return host && *host && port && *port;
}

const char *
nrm_kube_server (struct nrm_kube *k)
{
  return k->server;
}

const char *
nrm_kube_namespace (struct nrm_kube *k)
{
  return k->namespace;
}

/* --- settings --------------------------------------------------------- */

/* The chosen context of a kubeconfig (driver/k8s/kubeconfig.h). */
static int
load_kubeconfig (struct nrm_kube *k, const struct nrm_kube_options *o, nrm_error_t *err)
{
  struct nrm_kubeconfig *kc = NULL;
  if (nrm_kubeconfig_load (o->kubeconfig, o->kubeconfig_list, o->context, &kc, err) < 0)
    return -1;
  /* Copies: an exec plugin keeps kc, and is told of the cluster from it
   * (provideClusterInfo). */
  k->server = xstrdup (kc->server);
  k->ca_file = kc->ca_file ? xstrdup (kc->ca_file) : NULL;
  k->ca_pem = kc->ca_pem ? xstrdup (kc->ca_pem) : NULL;
  k->cert_file = TAKE_PTR (kc->cert_file);
  k->cert_pem = TAKE_PTR (kc->cert_pem);
  k->key_file = TAKE_PTR (kc->key_file);
  k->key_pem = TAKE_PTR (kc->key_pem);
  k->token = TAKE_PTR (kc->token);
  k->token_file = TAKE_PTR (kc->token_file);
  k->namespace = TAKE_PTR (kc->namespace);
  if (kc->exec)
    k->exec = kc; /* the plugin needs the cluster and the user */
  else
    nrm_kubeconfig_free (kc);
  return 0;
}

static int
load_in_cluster (struct nrm_kube *k, nrm_error_t *err)
{
  const char *host = getenv ("KUBERNETES_SERVICE_HOST"), *port = getenv ("KUBERNETES_SERVICE_PORT");
  const char *dir = getenv ("NRM_SERVICE_ACCOUNT_DIR");
  if (!nrm_kube_in_cluster ())
    return nrm_error_set (err, ENOENT,
                          "no Kubernetes API settings: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not "
                          "set (outside a pod, give --kubeconfig)");
  if (dir == NULL || *dir == '\0')
    dir = SA_DIR;
  bool v6 = strchr (host, ':') != NULL;
  k->server = xasprintf ("https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
  k->token_file = xasprintf ("%s/token", dir);
  k->ca_file = xasprintf ("%s/ca.crt", dir);
  if (access (k->ca_file, R_OK) < 0)
    return nrm_error_errno (err, errno, "service account CA `%s`", k->ca_file);
  return 0;
}

/* The current bearer token (a copy), or NULL without one. */
static int
current_token (struct nrm_kube *k, bool force, char **ret, nrm_error_t *err)
{
  int r = 0;
  *ret = NULL;
  pthread_mutex_lock (&k->token_lock);
  /* A credential is renewed a little before it expires. */
  /* A credential of a client certificate alone has no token: whether the
   * plugin answered is what says one is in hand. */
  if (k->exec && (force || !k->exec_have || (k->token_expires && time (NULL) + 10 >= k->token_expires)))
    {
      struct nrm_exec_credential c;
      if (nrm_exec_credential_run (k->exec, &c, err) < 0)
        r = -1;
      else
        {
          if (k->token)
            explicit_bzero (k->token, strlen (k->token));
          free (k->token);
          k->token = TAKE_PTR (c.token);
          if (c.cert_pem)
            {
              free (k->cert_pem);
              if (k->key_pem)
                explicit_bzero (k->key_pem, strlen (k->key_pem));
              free (k->key_pem);
              k->cert_pem = TAKE_PTR (c.cert_pem);
              k->key_pem = TAKE_PTR (c.key_pem);
            }
          k->token_expires = c.expires;
          k->exec_have = true;
          nrm_exec_credential_clear (&c);
        }
    }
  if (k->token_file)
    {
      struct stat st;
      bool changed = stat (k->token_file, &st) == 0
                     && (st.st_mtim.tv_sec != k->token_mtime.tv_sec || st.st_mtim.tv_nsec != k->token_mtime.tv_nsec);
      if (force || changed || k->token == NULL || now_ns () - k->token_read_ns >= TOKEN_REFRESH_NS)
        {
          cleanup_free char *t = NULL;
          size_t len = 0;
          nrm_error_t e = NULL;
          if (nrm_read_file (k->token_file, MAX_SMALL_FILE, &t, &len, &e) < 0)
            {
              /* Keep the old token while the file is being replaced. */
              if (k->token == NULL)
                {
                  nrm_error_wrap (&e, "bearer token");
                  *err = TAKE_PTR (e);
                  r = -1;
                }
              nrm_error_release (&e);
            }
          else
            {
              while (len > 0 && (t[len - 1] == '\n' || t[len - 1] == '\r' || t[len - 1] == ' '))
                t[--len] = '\0';
              if (k->token)
                explicit_bzero (k->token, strlen (k->token));
              free (k->token);
              k->token = TAKE_PTR (t);
              k->token_read_ns = now_ns ();
              if (stat (k->token_file, &st) == 0)
                k->token_mtime = st.st_mtim;
            }
        }
    }
  if (r == 0 && k->token)
    *ret = xstrdup (k->token);
  pthread_mutex_unlock (&k->token_lock);
  return r;
}

static void
global_init (void)
{
  curl_global_init (CURL_GLOBAL_DEFAULT);
}

int
nrm_kube_new (const struct nrm_kube_options *o, struct nrm_kube **ret, nrm_error_t *err)
{
  struct nrm_kube *k = xcalloc (1, sizeof (*k));
  pthread_mutex_init (&k->token_lock, NULL);
  pthread_mutex_init (&k->rate_lock, NULL);
  for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
    pthread_mutex_init (&k->share_locks[i], NULL);
  k->qps = o->qps;
  k->burst = o->burst > 0 ? o->burst : 1;
  k->tokens = k->burst;
  k->rate_ns = now_ns ();
  k->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 10000;
  k->max_tries = o->max_tries > 0 ? o->max_tries : 1;
  k->user_agent = xstrdup (o->user_agent ? o->user_agent : PACKAGE_NAME);

  int r = o->kubeconfig ? load_kubeconfig (k, o, err) : load_in_cluster (k, err);
  cleanup_free char *probe = NULL;
  if (r == 0)
    r = current_token (k, true, &probe, err);
  if (probe)
    explicit_bzero (probe, strlen (probe));
  if (r == 0)
    {
      /* The first call is not thread-safe: make it here, once. */
      static pthread_once_t once = PTHREAD_ONCE_INIT;
      pthread_once (&once, global_init);
      /* It fails only for lack of memory. */
      k->share = curl_share_init ();
      if (k->share == NULL)
        nrm_oom ();
      curl_share_setopt (k->share, CURLSHOPT_LOCKFUNC, share_lock);
      curl_share_setopt (k->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
      curl_share_setopt (k->share, CURLSHOPT_USERDATA, k);
      curl_share_setopt (k->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
      curl_share_setopt (k->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
      curl_share_setopt (k->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    }
  if (r < 0)
    {
      nrm_kube_free (k);
      return -1;
    }
  *ret = k;
  return 0;
}

/* --- requests ----------------------------------------------------------- */

/* Waits for a token of the bucket. */
static void
rate_wait (struct nrm_kube *k)
{
  if (k->qps <= 0)
    return;
  pthread_mutex_lock (&k->rate_lock);
  long long now = now_ns ();
  k->tokens += (double) (now - k->rate_ns) / 1e9 * k->qps;
  if (k->tokens > k->burst)
    k->tokens = k->burst;
  k->rate_ns = now;
  k->tokens -= 1; /* reserved; a negative balance is the wait */
  long long wait = k->tokens < 0 ? (long long) (-k->tokens / k->qps * 1e9) : 0;
  pthread_mutex_unlock (&k->rate_lock);
  sleep_ns (k, wait);
}

struct buf
{
  char *data;
  size_t len, cap, max;
  bool overflow;
};

static size_t
buf_write (char *ptr, size_t size, size_t nmemb, void *ctx)
{
  struct buf *b = ctx;
  size_t n = size * nmemb;
  if (b->len + n + 1 > b->max)
    {
      b->overflow = true;
      return 0; /* aborts the transfer */
    }
  if (b->len + n + 1 > b->cap)
    {
      size_t cap = b->cap ? b->cap : 4096;
      while (cap < b->len + n + 1)
        cap *= 2;
      b->data = xrealloc (b->data, cap);
      b->cap = cap;
    }
  memcpy (b->data + b->len, ptr, n);
  b->len += n;
  b->data[b->len] = '\0';
  return n;
}

struct retry_after
{
  long seconds;
};

static size_t
header_cb (char *ptr, size_t size, size_t nmemb, void *ctx)
{
  struct retry_after *ra = ctx;
  size_t n = size * nmemb;
  if (n > 12 && strncasecmp (ptr, "Retry-After:", 12) == 0)
    ra->seconds = strtol (ptr + 12, NULL, 10);
  return n;
}

DEFINE_TRIVIAL_CLEANUP_FUNC (CURL *, curl_easy_cleanup)

/* Headers with the token: wiped before they are freed. */
static void
headers_free (struct curl_slist **h)
{
  for (struct curl_slist *i = *h; i; i = i->next)
    explicit_bzero (i->data, strlen (i->data));
  curl_slist_free_all (*h);
}

/* PEM data from a kubeconfig's *-data field (copied by libcurl); type_opt
 * names its format when the option has one. */
static CURLcode
set_pem (CURL *h, CURLoption blob_opt, CURLoption type_opt, const char *pem)
{
  if (pem == NULL)
    return CURLE_OK;
  struct curl_blob b = { .data = (void *) pem, .len = strlen (pem), .flags = CURL_BLOB_COPY };
  CURLcode c = curl_easy_setopt (h, blob_opt, &b);
  if (c == CURLE_OK && type_opt != CURLOPT_LASTENTRY)
    c = curl_easy_setopt (h, type_opt, "PEM");
  return c;
}

/* curl_slist_append() fails only for lack of memory. */
static struct curl_slist *
slist_append (struct curl_slist *list, const char *s)
{
  struct curl_slist *l = curl_slist_append (list, s);
  if (l == NULL)
    nrm_oom ();
  return l;
}

/* An easy handle for one request to path, with TLS and authentication. */
static int
easy_new (struct nrm_kube *k, const char *method, const char *path, const char *ctype, bool force_token, CURL **ret,
          struct curl_slist **headers, char *errbuf, nrm_error_t *err)
{
  cleanup_free char *url = NULL, *token = NULL, *auth = NULL, *cth = NULL;
  if (path[0] != '/')
    return nrm_error_set (err, EINVAL, "API path `%s` does not start with /", path);
  url = xasprintf ("%s%s", k->server, path);
  if (current_token (k, force_token, &token, err) < 0)
    return -1;

  __attribute__ ((cleanup (curl_easy_cleanupp))) CURL *h = curl_easy_init ();
  if (h == NULL)
    return nrm_error_set (err, ENOMEM, "cannot start a libcurl handle");
  struct curl_slist *hl = slist_append (NULL, "Accept: application/json");
  cth = xasprintf ("Content-Type: %s", ctype);
  hl = slist_append (hl, cth);
  if (token)
    {
      auth = xasprintf ("Authorization: Bearer %s", token);
      hl = slist_append (hl, auth);
      explicit_bzero (auth, strlen (auth));
      explicit_bzero (token, strlen (token));
    }
  *headers = hl;

  CURLcode c = CURLE_OK;
#define SET(opt, val)                                                                                                  \
  do                                                                                                                   \
    if (c == CURLE_OK)                                                                                                 \
      c = curl_easy_setopt (h, opt, val);                                                                              \
  while (0)
  SET (CURLOPT_URL, url);
  SET (CURLOPT_PROTOCOLS_STR, "https");
  SET (CURLOPT_SHARE, k->share);
  SET (CURLOPT_NOSIGNAL, 1L);
  SET (CURLOPT_ERRORBUFFER, errbuf);
  SET (CURLOPT_SSL_VERIFYPEER, 1L);
  SET (CURLOPT_SSL_VERIFYHOST, 2L);
  SET (CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  SET (CURLOPT_USERAGENT, k->user_agent);
  SET (CURLOPT_HTTPHEADER, hl);
  SET (CURLOPT_CUSTOMREQUEST, method);
  SET (CURLOPT_NOPROGRESS, 0L);
  SET (CURLOPT_XFERINFOFUNCTION, progress_cb);
  SET (CURLOPT_XFERINFODATA, k);
  if (k->ca_file)
    SET (CURLOPT_CAINFO, k->ca_file);
  /* A named CA is the only one trusted, as for kubectl: never the system
   * store's directory, which libcurl adds by default. */
  if (k->ca_file || k->ca_pem)
    SET (CURLOPT_CAPATH, (char *) NULL);
  if (c == CURLE_OK)
    c = set_pem (h, CURLOPT_CAINFO_BLOB, CURLOPT_LASTENTRY, k->ca_pem);
  if (k->cert_file)
    SET (CURLOPT_SSLCERT, k->cert_file);
  if (k->key_file)
    SET (CURLOPT_SSLKEY, k->key_file);
  /* An exec plugin's certificate may be renewed by another thread. */
  pthread_mutex_lock (&k->token_lock);
  if (c == CURLE_OK)
    c = set_pem (h, CURLOPT_SSLCERT_BLOB, CURLOPT_SSLCERTTYPE, k->cert_pem);
  if (c == CURLE_OK)
    c = set_pem (h, CURLOPT_SSLKEY_BLOB, CURLOPT_SSLKEYTYPE, k->key_pem);
  pthread_mutex_unlock (&k->token_lock);
#undef SET
  if (c != CURLE_OK)
    return nrm_error_set (err, EINVAL, "libcurl: %s", curl_easy_strerror (c));
  *ret = TAKE_PTR (h);
  return 0;
}

static bool
transient_status (long code)
{
  return code == 429 || code == 500 || code == 502 || code == 503 || code == 504;
}

/* Whether the request surely never reached the server (safe to repeat a
 * create). */
static bool
not_sent (CURLcode c)
{
  return c == CURLE_COULDNT_CONNECT || c == CURLE_COULDNT_RESOLVE_HOST || c == CURLE_SSL_CONNECT_ERROR;
}

static int
call (struct nrm_kube *k, const char *method, const char *path, const char *ctype, json_t *body, json_t **ret,
      nrm_error_t *err)
{
  cleanup_free char *payload = NULL;
  bool is_post = strcmp (method, "POST") == 0;
  bool force_token = false;
  /* json_dumps() encodes only an object or an array. */
  if (body && (payload = json_dumps (body, JSON_COMPACT)) == NULL)
    return nrm_error_set (err, EINVAL, "%s %s: the request body is not a JSON object or array", method, path);
  *ret = NULL;

  for (int attempt = 1;; attempt++)
    {
      if (__atomic_load_n (&k->cancelled, __ATOMIC_RELAXED))
        return nrm_error_set (err, ECANCELED, "%s %s: shutting down", method, path);
      char errbuf[CURL_ERROR_SIZE] = "";
      __attribute__ ((cleanup (curl_easy_cleanupp))) CURL *h = NULL;
      __attribute__ ((cleanup (headers_free))) struct curl_slist *headers = NULL;
      struct buf b = { .max = MAX_BODY };
      struct retry_after ra = { 0 };

      rate_wait (k);
      if (easy_new (k, method, path, ctype, force_token, &h, &headers, errbuf, err) < 0)
        return -1;
      curl_easy_setopt (h, CURLOPT_TIMEOUT_MS, (long) k->timeout_ms);
      curl_easy_setopt (h, CURLOPT_WRITEFUNCTION, buf_write);
      curl_easy_setopt (h, CURLOPT_WRITEDATA, &b);
      curl_easy_setopt (h, CURLOPT_HEADERFUNCTION, header_cb);
      curl_easy_setopt (h, CURLOPT_HEADERDATA, &ra);
      if (payload)
        curl_easy_setopt (h, CURLOPT_POSTFIELDS, payload);
      else if (strcmp (method, "GET") != 0)
        curl_easy_setopt (h, CURLOPT_POSTFIELDSIZE, 0L);

      CURLcode c = curl_easy_perform (h);
      long code = 0;
      curl_easy_getinfo (h, CURLINFO_RESPONSE_CODE, &code);
      cleanup_free char *data = b.data;

      if (c != CURLE_OK || transient_status (code) || (code == 401 && !force_token))
        {
          bool retry = attempt < k->max_tries && (!is_post || not_sent (c) || code == 429)
                       && !__atomic_load_n (&k->cancelled, __ATOMIC_RELAXED);
          if (code == 401)
            {
              /* The token may have rotated under us: read it again, once. */
              force_token = true;
              retry = !__atomic_load_n (&k->cancelled, __ATOMIC_RELAXED);
            }
          if (retry)
            {
              long long base = 200LL * 1000000LL << (attempt - 1 < 5 ? attempt - 1 : 5);
              long long wait = (long long) (base * jitter ());
              if (ra.seconds > 0)
                wait = (ra.seconds > 10 ? 10 : ra.seconds) * 1000000000LL;
              sleep_ns (k, wait);
              continue;
            }
          if (c != CURLE_OK)
            {
              if (b.overflow)
                return nrm_error_set (err, EFBIG, "%s %s: the answer is larger than %u MiB", method, path,
                                      MAX_BODY >> 20);
              return nrm_error_set (err, c == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO, "%s %s%s: %s", method,
                                    k->server, path, errbuf[0] ? errbuf : curl_easy_strerror (c));
            }
        }
      if (data && b.len > 0)
        {
          json_error_t jerr;
          *ret = json_loadb (data, b.len, 0, &jerr);
          /* A non-JSON body (a proxy's error page) is kept as its text. */
          if (*ret == NULL && code >= 400)
            *ret = json_pack ("{s:s, s:s%}", "kind", "Status", "message", data, b.len > 200 ? (size_t) 200 : b.len);
          else if (*ret == NULL)
            return nrm_error_set (err, EPROTO, "%s %s: the answer is not JSON: %s", method, path, jerr.text);
        }
      return (int) code;
    }
}

int
nrm_kube_call (struct nrm_kube *k, const char *method, const char *path, json_t *body, json_t **ret, nrm_error_t *err)
{
  return call (k, method, path, "application/json", body, ret, err);
}

int
nrm_kube_patch (struct nrm_kube *k, const char *path, const char *content_type, json_t *body, json_t **ret,
                nrm_error_t *err)
{
  return call (k, "PATCH", path, content_type, body, ret, err);
}

char *
nrm_kube_escape (const char *s)
{
  char *e = curl_easy_escape (NULL, s, 0);
  char *r = e ? xstrdup (e) : NULL;
  curl_free (e);
  return r;
}

const char *
nrm_kube_status_message (json_t *body, int code)
{
  const char *m = json_string_value (json_object_get (body, "message"));
  if (m && *m)
    return m;
  switch (code)
    {
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 422:
      return "Invalid";
    default:
      return code >= 500 ? "server error" : "request failed";
    }
}

/* --- watch ------------------------------------------------------------ */

struct nrm_kube_watch
{
  CURLM *multi;
  CURL *easy;
  struct curl_slist *headers;
  char errbuf[CURL_ERROR_SIZE];
  struct buf line; /* the unfinished event line, or a non-200 body */
  nrm_kube_event_fn fn;
  void *ctx;
  bool stopped, bad_event;
  long status;
};

static int
deliver (struct nrm_kube_watch *w, const char *s, size_t len)
{
  json_error_t jerr;
  cleanup_json json_t *ev = json_loadb (s, len, 0, &jerr);
  const char *type = json_string_value (json_object_get (ev, "type"));
  json_t *obj = json_object_get (ev, "object");
  if (type == NULL || !json_is_object (obj))
    {
      w->bad_event = true;
      return -1;
    }
  return w->fn (w->ctx, type, obj);
}

static size_t
watch_write (char *ptr, size_t size, size_t nmemb, void *ctx)
{
  struct nrm_kube_watch *w = ctx;
  size_t n = size * nmemb;
  long code = 0;
  curl_easy_getinfo (w->easy, CURLINFO_RESPONSE_CODE, &code);
  if (buf_write (ptr, size, nmemb, &w->line) != n)
    return 0;
  if (code != 200)
    return n; /* a Status body: read whole at the end */
  /* One JSON event a line. */
  char *start = w->line.data, *nl;
  while ((nl = memchr (start, '\n', w->line.len - (size_t) (start - w->line.data))) != NULL)
    {
      if (nl > start && deliver (w, start, (size_t) (nl - start)) < 0)
        {
          w->stopped = true;
          return 0;
        }
      start = nl + 1;
    }
  size_t rest = w->line.len - (size_t) (start - w->line.data);
  memmove (w->line.data, start, rest);
  w->line.len = rest;
  w->line.data[rest] = '\0';
  return n;
}

void
nrm_kube_watch_close (struct nrm_kube_watch *w)
{
  if (w == NULL)
    return;
  if (w->multi && w->easy)
    curl_multi_remove_handle (w->multi, w->easy);
  if (w->easy)
    curl_easy_cleanup (w->easy);
  if (w->multi)
    curl_multi_cleanup (w->multi);
  headers_free (&w->headers);
  free (w->line.data);
  free (w);
}

int
nrm_kube_watch_open (struct nrm_kube *k, const char *path, nrm_kube_event_fn fn, void *ctx, struct nrm_kube_watch **ret,
                     nrm_error_t *err)
{
  struct nrm_kube_watch *w = xcalloc (1, sizeof (*w));
  w->fn = fn;
  w->ctx = ctx;
  w->line.max = MAX_EVENT;
  rate_wait (k);
  if (easy_new (k, "GET", path, "application/json", false, &w->easy, &w->headers, w->errbuf, err) < 0)
    {
      nrm_kube_watch_close (w);
      return -1;
    }
  curl_easy_setopt (w->easy, CURLOPT_WRITEFUNCTION, watch_write);
  curl_easy_setopt (w->easy, CURLOPT_WRITEDATA, w);
  /* The server ends a watch at its timeoutSeconds (nrm asks for 599 at
   * most); a stream silent past that and a minute more is dead. Not
   * sooner: on a resource where nothing changes the server's bookmarks
   * stop (each carries the last change's resourceVersion, and one the
   * watch has seen is not sent again), so a quiet watch sends nothing
   * until its end, and a shorter limit cut every quiet watch short with an
   * error and a new list (bench-fleet: 28 of 100 plugins at once, 120 s
   * after their start, their next full lists then in step). */
  curl_easy_setopt (w->easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt (w->easy, CURLOPT_LOW_SPEED_TIME, (long) NRM_KUBE_WATCH_SILENT_S);
  w->multi = curl_multi_init ();
  if (w->multi == NULL || curl_multi_add_handle (w->multi, w->easy) != CURLM_OK)
    {
      nrm_kube_watch_close (w);
      return nrm_error_set (err, ENOMEM, "cannot start a watch");
    }
  *ret = w;
  return 0;
}

int
nrm_kube_watch_poll (struct nrm_kube_watch *w, int timeout_ms, int wake_fd, long *status, json_t **body,
                     nrm_error_t *err)
{
  struct curl_waitfd extra = { .fd = wake_fd, .events = CURL_WAIT_POLLIN };
  int running = 0, msgs = 0;
  *status = 0;
  if (body)
    *body = NULL;
  curl_multi_perform (w->multi, &running);
  if (running)
    {
      curl_multi_poll (w->multi, wake_fd >= 0 ? &extra : NULL, wake_fd >= 0 ? 1 : 0, timeout_ms, NULL);
      curl_multi_perform (w->multi, &running);
    }
  CURLMsg *m;
  while ((m = curl_multi_info_read (w->multi, &msgs)) != NULL)
    {
      if (m->msg != CURLMSG_DONE)
        continue;
      curl_easy_getinfo (w->easy, CURLINFO_RESPONSE_CODE, status);
      if (w->stopped)
        return w->bad_event ? nrm_error_set (err, EPROTO, "watch: an event that is not a JSON watch event") : -1;
      if (m->data.result != CURLE_OK)
        return nrm_error_set (err, EIO, "watch: %s", w->errbuf[0] ? w->errbuf : curl_easy_strerror (m->data.result));
      if (*status != 200 && body && w->line.len > 0)
        *body = json_loadb (w->line.data, w->line.len, 0, NULL);
      return 0;
    }
  return 1;
}
