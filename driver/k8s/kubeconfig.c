/* SPDX-License-Identifier: Apache-2.0 */
/* Kubeconfig files and exec credential plugins (driver/k8s/kubeconfig.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "driver/k8s/kubeconfig.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/yaml.h"

#define MAX_SMALL_FILE (1u << 20) /* kubeconfigs, a plugin's answer */

extern char **environ;

void
nrm_kubeconfig_free (struct nrm_kubeconfig *kc)
{
  if (kc == NULL)
    return;
  free (kc->context);
  free (kc->cluster_name);
  free (kc->user_name);
  free (kc->namespace);
  free (kc->server);
  free (kc->ca_file);
  free (kc->ca_pem);
  free (kc->cert_file);
  free (kc->cert_pem);
  free (kc->key_file);
  if (kc->key_pem)
    explicit_bzero (kc->key_pem, strlen (kc->key_pem));
  free (kc->key_pem);
  if (kc->token)
    explicit_bzero (kc->token, strlen (kc->token));
  free (kc->token);
  free (kc->token_file);
  json_decref (kc->exec);
  free (kc);
}

static int
base64_decode (const char *in, const char *what, char **ret, nrm_error_t *err)
{
  size_t len = strlen (in);
  cleanup_free char *out = xmalloc (len / 4 * 3 + 4);
  EVP_ENCODE_CTX *ctx = EVP_ENCODE_CTX_new ();
  int n = 0, m = 0;
  /* It fails only for lack of memory. */
  if (ctx == NULL)
    nrm_oom ();
  EVP_DecodeInit (ctx);
  int r = EVP_DecodeUpdate (ctx, (unsigned char *) out, &n, (const unsigned char *) in, (int) len);
  if (r >= 0)
    r = EVP_DecodeFinal (ctx, (unsigned char *) out + n, &m);
  EVP_ENCODE_CTX_free (ctx);
  if (r < 0)
    return nrm_error_set (err, EINVAL, "%s is not valid base64", what);
  out[n + m] = '\0';
  *ret = TAKE_PTR (out);
  return 0;
}

static char *
base64_encode (const char *in)
{
  size_t len = strlen (in);
  char *out = xmalloc (4 * ((len + 2) / 3) + 1);
  EVP_EncodeBlock ((unsigned char *) out, (const unsigned char *) in, (int) len);
  return out;
}

/* A path of the kubeconfig is relative to the directory of the file that
 * holds it. */
static char *
resolve_path (const char *base_dir, const char *p)
{
  if (p[0] == '/')
    return xstrdup (p);
  return xasprintf ("%s/%s", base_dir, p);
}

/* The merged file: each named entry as {"file": dir, "value": entry}. */
struct merged
{
  json_t *clusters, *users, *contexts; /* name -> {dir, file, value} */
  const char *current;                 /* borrowed from files */
  json_t *files;                       /* the parsed files, kept for current */
};

static void
merge_list (json_t *into, json_t *list, const char *inner, const char *path)
{
  size_t i;
  json_t *e;
  cleanup_free char *dcopy = xstrdup (path);
  const char *dir = dirname (dcopy);
  json_array_foreach (list, i, e)
  {
    const char *n = json_string_value (json_object_get (e, "name"));
    json_t *v = json_object_get (e, inner);
    if (n == NULL || json_object_get (into, n))
      continue; /* the first file that names it wins */
    json_object_set_new (into, n, json_pack ("{s:s, s:s, s:O?}", "dir", dir, "file", path, "value", v));
  }
}

static int
set_file_or_data (json_t *obj, const char *key, const char *base_dir, const char *what, char **file, char **pem,
                  nrm_error_t *err)
{
  cleanup_free char *data_key = xasprintf ("%s-data", key);
  const char *data = json_string_value (json_object_get (obj, data_key));
  const char *path = json_string_value (json_object_get (obj, key));
  if (data && *data)
    {
      cleanup_free char *w = xasprintf ("%s %s", what, data_key);
      return base64_decode (data, w, pem, err);
    }
  if (path && *path)
    {
      *file = resolve_path (base_dir, path);
      if (access (*file, R_OK) < 0)
        return nrm_error_errno (err, errno, "%s %s `%s`", what, key, *file);
    }
  return 0;
}

/* The exec stanza, checked, with its command resolved as client-go does:
 * a command with a / is relative to the file's directory, one without is
 * looked up in $PATH when it runs. */
static int
load_exec (struct nrm_kubeconfig *kc, json_t *exec, const char *dir, const char *path, nrm_error_t *err)
{
  const char *cmd = json_string_value (json_object_get (exec, "command"));
  const char *api = json_string_value (json_object_get (exec, "apiVersion"));
  const char *mode = json_string_value (json_object_get (exec, "interactiveMode"));
  json_t *args = json_object_get (exec, "args"), *env = json_object_get (exec, "env");
  size_t i;
  json_t *e;
  if (cmd == NULL || *cmd == '\0')
    return nrm_error_set (err, EINVAL, "kubeconfig `%s`: user `%s`: `exec` has no command", path, kc->user_name);
  if (api == NULL
      || (strcmp (api, "client.authentication.k8s.io/v1") && strcmp (api, "client.authentication.k8s.io/v1beta1")))
    return nrm_error_set (err, EINVAL,
                          "kubeconfig `%s`: user `%s`: `exec` apiVersion `%s` is not supported (nrm runs "
                          "client.authentication.k8s.io/v1 and v1beta1 plugins)",
                          path, kc->user_name, api ? api : "(none)");
  if (mode && strcmp (mode, "Never") && strcmp (mode, "IfAvailable") && strcmp (mode, "Always"))
    return nrm_error_set (err, EINVAL,
                          "kubeconfig `%s`: user `%s`: `exec` interactiveMode `%s` is not Never, "
                          "IfAvailable or Always",
                          path, kc->user_name, mode);
  if (mode == NULL && strcmp (api, "client.authentication.k8s.io/v1") == 0)
    return nrm_error_set (err, EINVAL, "kubeconfig `%s`: user `%s`: `exec` of apiVersion v1 needs an interactiveMode",
                          path, kc->user_name);
  if ((args && !json_is_array (args)) || (env && !json_is_array (env)))
    return nrm_error_set (err, EINVAL, "kubeconfig `%s`: user `%s`: `exec` args and env must be lists", path,
                          kc->user_name);
  json_array_foreach (args, i, e)
  {
    if (!json_is_string (e))
      return nrm_error_set (err, EINVAL, "kubeconfig `%s`: user `%s`: `exec` args[%zu] is not a string", path,
                            kc->user_name, i);
  }
  json_array_foreach (env, i, e)
  {
    const char *n = json_string_value (json_object_get (e, "name"));
    if (n == NULL || *n == '\0' || strchr (n, '=') || !json_is_string (json_object_get (e, "value")))
      return nrm_error_set (err, EINVAL, "kubeconfig `%s`: user `%s`: `exec` env[%zu] needs a name and a value", path,
                            kc->user_name, i);
  }
  kc->exec = json_deep_copy (exec);
  if (strchr (cmd, '/'))
    {
      cleanup_free char *full = resolve_path (dir, cmd);
      json_object_set_new (kc->exec, "command", json_string (full));
    }
  return 0;
}

static int
load_user (struct nrm_kubeconfig *kc, json_t *user, const char *dir, const char *path, nrm_error_t *err)
{
  static const char *const unsupported[] = { "auth-provider", "username", "password", "as", NULL };
  for (const char *const *u = unsupported; *u; u++)
    if (json_object_get (user, *u))
      return nrm_error_set (err, EINVAL,
                            "kubeconfig `%s`: user `%s` uses `%s`, which nrm does not support: give a token, "
                            "tokenFile, a client certificate or an exec plugin",
                            path, kc->user_name, *u);
  const char *token = json_string_value (json_object_get (user, "token"));
  const char *token_file = json_string_value (json_object_get (user, "tokenFile"));
  if (token && *token)
    kc->token = xstrdup (token);
  if (token == NULL && token_file && *token_file)
    kc->token_file = resolve_path (dir, token_file);
  if (set_file_or_data (user, "client-certificate", dir, "kubeconfig user", &kc->cert_file, &kc->cert_pem, err) < 0
      || set_file_or_data (user, "client-key", dir, "kubeconfig user", &kc->key_file, &kc->key_pem, err) < 0)
    return -1;
  if ((kc->cert_file || kc->cert_pem) != (kc->key_file || kc->key_pem))
    return nrm_error_set (err, EINVAL, "kubeconfig `%s`: user `%s` needs both a client certificate and its key", path,
                          kc->user_name);
  json_t *exec = json_object_get (user, "exec");
  if (exec && load_exec (kc, exec, dir, path, err) < 0)
    return -1;
  return 0;
}

static int
load_cluster (struct nrm_kubeconfig *kc, json_t *cluster, const char *dir, const char *path, nrm_error_t *err)
{
  const char *server = json_string_value (json_object_get (cluster, "server"));
  if (server == NULL || strncmp (server, "https://", 8) != 0 || server[8] == '\0')
    return nrm_error_set (err, EINVAL, "kubeconfig `%s`: cluster `%s` needs an https:// server", path,
                          kc->cluster_name);
  if (json_is_true (json_object_get (cluster, "insecure-skip-tls-verify")))
    return nrm_error_set (err, EINVAL,
                          "kubeconfig `%s`: cluster `%s` sets insecure-skip-tls-verify; nrm always verifies the "
                          "API server's certificate: give certificate-authority(-data)",
                          path, kc->cluster_name);
  if (json_object_get (cluster, "proxy-url") || json_object_get (cluster, "tls-server-name"))
    return nrm_error_set (err, EINVAL, "kubeconfig `%s`: cluster `%s`: proxy-url and tls-server-name are not supported",
                          path, kc->cluster_name);
  kc->server = xstrdup (server);
  size_t sl = strlen (kc->server);
  while (sl > 8 && kc->server[sl - 1] == '/')
    kc->server[--sl] = '\0';
  return set_file_or_data (cluster, "certificate-authority", dir, "kubeconfig cluster", &kc->ca_file, &kc->ca_pem, err);
}

static int
select_context (struct nrm_kubeconfig *kc, struct merged *m, const char *where, const char *context, nrm_error_t *err)
{
  const char *ctx_name = context ? context : m->current;
  if (ctx_name == NULL || *ctx_name == '\0')
    return nrm_error_set (err, EINVAL, "kubeconfig `%s` has no current-context (give --context)", where);
  json_t *ce = json_object_get (m->contexts, ctx_name);
  json_t *ctx = json_object_get (ce, "value");
  if (ctx == NULL)
    return nrm_error_set (err, EINVAL, "kubeconfig `%s`: context `%s` not found", where, ctx_name);
  kc->context = xstrdup (ctx_name);
  const char *cluster_name = json_string_value (json_object_get (ctx, "cluster"));
  const char *user_name = json_string_value (json_object_get (ctx, "user"));
  const char *ns = json_string_value (json_object_get (ctx, "namespace"));
  if (ns && *ns)
    kc->namespace = xstrdup (ns);
  json_t *ce_cluster = cluster_name ? json_object_get (m->clusters, cluster_name) : NULL;
  json_t *cluster = json_object_get (ce_cluster, "value");
  if (cluster == NULL)
    return nrm_error_set (err, EINVAL, "kubeconfig `%s`: cluster of context `%s` not found", where, ctx_name);
  kc->cluster_name = xstrdup (cluster_name);
  if (load_cluster (kc, cluster, json_string_value (json_object_get (ce_cluster, "dir")),
                    json_string_value (json_object_get (ce_cluster, "file")), err)
      < 0)
    return -1;
  json_t *ce_user = user_name ? json_object_get (m->users, user_name) : NULL;
  json_t *user = json_object_get (ce_user, "value");
  if (user == NULL)
    return 0;
  kc->user_name = xstrdup (user_name);
  return load_user (kc, user, json_string_value (json_object_get (ce_user, "dir")),
                    json_string_value (json_object_get (ce_user, "file")), err);
}

int
nrm_kubeconfig_load (const char *paths, bool list, const char *context, struct nrm_kubeconfig **ret, nrm_error_t *err)
{
  struct merged m
      = { .clusters = json_object (), .users = json_object (), .contexts = json_object (), .files = json_array () };
  cleanup_free char *copy = xstrdup (paths);
  size_t loaded = 0;
  int r = 0;
  *ret = NULL;
  for (char *save = NULL, *p = list ? strtok_r (copy, ":", &save) : copy; p && r == 0;
       p = list ? strtok_r (NULL, ":", &save) : NULL)
    {
      json_t *cfg = NULL;
      if (*p == '\0' || (list && access (p, F_OK) < 0 && errno == ENOENT))
        continue; /* as kubectl: a list's missing files are skipped */
      if (nrm_yaml_load_file (p, MAX_SMALL_FILE, &cfg, err) < 0)
        {
          r = nrm_error_wrap (err, "kubeconfig");
          break;
        }
      if (!json_is_object (cfg))
        {
          json_decref (cfg);
          r = nrm_error_set (err, EINVAL, "kubeconfig `%s` is not a mapping", p);
          break;
        }
      json_array_append_new (m.files, cfg);
      loaded++;
      merge_list (m.clusters, json_object_get (cfg, "clusters"), "cluster", p);
      merge_list (m.users, json_object_get (cfg, "users"), "user", p);
      merge_list (m.contexts, json_object_get (cfg, "contexts"), "context", p);
      const char *cur = json_string_value (json_object_get (cfg, "current-context"));
      if (m.current == NULL && cur && *cur)
        m.current = cur;
    }
  if (r == 0 && loaded == 0)
    r = nrm_error_set (err, ENOENT, "kubeconfig: none of the files of `%s` exists", paths);
  struct nrm_kubeconfig *kc = xcalloc (1, sizeof (*kc));
  if (r == 0)
    r = select_context (kc, &m, paths, context, err);
  json_decref (m.clusters);
  json_decref (m.users);
  json_decref (m.contexts);
  json_decref (m.files);
  if (r < 0)
    {
      nrm_kubeconfig_free (kc);
      return -1;
    }
  *ret = kc;
  return 0;
}

char *
nrm_kubeconfig_default (bool *list, nrm_error_t *err)
{
  const char *env = getenv ("KUBECONFIG");
  const char *home = getenv ("HOME");
  if (env && *env)
    {
      *list = true;
      return xstrdup (env);
    }
  *list = false;
  if (home == NULL || *home == '\0')
    {
      nrm_error_set (err, ENOENT, "no kubeconfig: give --kubeconfig, or set $KUBECONFIG or $HOME");
      return NULL;
    }
  return xasprintf ("%s/.kube/config", home);
}

/* --- exec credential plugins ------------------------------------------- */

void
nrm_exec_credential_clear (struct nrm_exec_credential *c)
{
  if (c->token)
    explicit_bzero (c->token, strlen (c->token));
  if (c->key_pem)
    explicit_bzero (c->key_pem, strlen (c->key_pem));
  free (c->token);
  free (c->cert_pem);
  free (c->key_pem);
  memset (c, 0, sizeof (*c));
}

/* RFC 3339, as metav1.Time writes it: 2006-01-02T15:04:05Z, a fraction
 * and a zone offset allowed. */
static int
parse_time (const char *s, time_t *ret)
{
  struct tm tm = { 0 };
  const char *p = strptime (s, "%Y-%m-%dT%H:%M:%S", &tm);
  long offset = 0;
  if (p == NULL)
    return -1;
  if (*p == '.')
    for (p++; *p >= '0' && *p <= '9'; p++)
      ;
  if (*p == '+' || *p == '-')
    {
      int hh, mm, n = 0;
      if (sscanf (p + 1, "%2d:%2d%n", &hh, &mm, &n) != 2 || n != 5 || p[1 + n] != '\0')
        return -1;
      offset = (hh * 60L + mm) * 60L * (*p == '-' ? -1 : 1);
    }
  else if (strcmp (p, "Z") != 0 && strcmp (p, "z") != 0)
    return -1;
  *ret = timegm (&tm) - offset;
  return 0;
}

int
nrm_exec_credential_parse (const char *text, size_t len, const char *api_version, struct nrm_exec_credential *ret,
                           nrm_error_t *err)
{
  json_error_t jerr;
  cleanup_json json_t *doc = json_loadb (text, len, 0, &jerr);
  memset (ret, 0, sizeof (*ret));
  if (doc == NULL)
    return nrm_error_set (err, EPROTO, "exec plugin: its output is not JSON: %s", jerr.text);
  const char *kind = json_string_value (json_object_get (doc, "kind"));
  const char *api = json_string_value (json_object_get (doc, "apiVersion"));
  if (kind == NULL || strcmp (kind, "ExecCredential") != 0)
    return nrm_error_set (err, EPROTO, "exec plugin: its output is not an ExecCredential (kind `%s`)",
                          kind ? kind : "(none)");
  if (api == NULL || strcmp (api, api_version) != 0)
    return nrm_error_set (err, EPROTO, "exec plugin: it answered apiVersion `%s`, it was asked for `%s`",
                          api ? api : "(none)", api_version);
  json_t *status = json_object_get (doc, "status");
  if (!json_is_object (status))
    return nrm_error_set (err, EPROTO, "exec plugin: its ExecCredential has no status");
  const char *token = json_string_value (json_object_get (status, "token"));
  const char *cert = json_string_value (json_object_get (status, "clientCertificateData"));
  const char *key = json_string_value (json_object_get (status, "clientKeyData"));
  const char *exp = json_string_value (json_object_get (status, "expirationTimestamp"));
  if ((cert && *cert) != (key && *key))
    return nrm_error_set (err, EPROTO,
                          "exec plugin: status has clientCertificateData or clientKeyData without the other");
  if (!(token && *token) && !(cert && *cert))
    return nrm_error_set (err, EPROTO, "exec plugin: status has neither a token nor a client certificate");
  /* The token goes into an HTTP header line: a CR or LF would end it and
   * start another. */
  for (const char *t = token; t && *t; t++)
    if ((unsigned char) *t < 0x20 || *t == 0x7f)
      return nrm_error_set (err, EPROTO, "exec plugin: status.token holds a control character");
  if (exp && *exp && parse_time (exp, &ret->expires) < 0)
    return nrm_error_set (err, EPROTO, "exec plugin: expirationTimestamp `%.40s` is not an RFC 3339 time", exp);
  if (token && *token)
    ret->token = xstrdup (token);
  if (cert && *cert)
    {
      ret->cert_pem = xstrdup (cert);
      ret->key_pem = xstrdup (key);
    }
  return 0;
}

char *
nrm_exec_info (const struct nrm_kubeconfig *kc, bool interactive)
{
  const char *api = json_string_value (json_object_get (kc->exec, "apiVersion"));
  cleanup_json json_t *info = json_pack ("{s:s, s:s, s:{s:b}}", "kind", "ExecCredential", "apiVersion", api, "spec",
                                         "interactive", interactive);
  if (json_is_true (json_object_get (kc->exec, "provideClusterInfo")))
    {
      json_t *cluster = json_pack ("{s:s}", "server", kc->server);
      cleanup_free char *ca = NULL;
      size_t len = 0;
      nrm_error_t e = NULL;
      if (kc->ca_pem)
        ca = xstrdup (kc->ca_pem);
      else if (kc->ca_file && nrm_read_file (kc->ca_file, MAX_SMALL_FILE, &ca, &len, &e) < 0)
        nrm_error_release (&e); /* it was readable a moment ago; the plugin does without */
      if (ca)
        {
          cleanup_free char *b64 = base64_encode (ca);
          json_object_set_new (cluster, "certificate-authority-data", json_string (b64));
        }
      json_object_set_new (json_object_get (info, "spec"), "cluster", cluster);
    }
  return json_dumps (info, JSON_COMPACT);
}

/* The environment of the plugin: ours, less the names it sets, then its
 * env and KUBERNETES_EXEC_INFO. */
static char **
plugin_env (json_t *env, const char *info)
{
  size_t n = 0, k = 0, i;
  json_t *e;
  while (environ && environ[n])
    n++;
  char **out = xcalloc (n + json_array_size (env) + 2, sizeof (char *));
  for (size_t j = 0; j < n; j++)
    {
      size_t nl = strcspn (environ[j], "=");
      bool replaced = nl == strlen ("KUBERNETES_EXEC_INFO") && strncmp (environ[j], "KUBERNETES_EXEC_INFO", nl) == 0;
      json_array_foreach (env, i, e)
      {
        const char *name = json_string_value (json_object_get (e, "name"));
        replaced |= strlen (name) == nl && strncmp (environ[j], name, nl) == 0;
      }
      if (!replaced)
        out[k++] = xstrdup (environ[j]);
    }
  json_array_foreach (env, i, e)
  {
    out[k++] = xasprintf ("%s=%s", json_string_value (json_object_get (e, "name")),
                          json_string_value (json_object_get (e, "value")));
  }
  out[k++] = xasprintf ("KUBERNETES_EXEC_INFO=%s", info);
  return out;
}

static void
strv_free (char **v)
{
  for (size_t i = 0; v && v[i]; i++)
    free (v[i]);
  free (v);
}

int
nrm_exec_credential_run (const struct nrm_kubeconfig *kc, struct nrm_exec_credential *ret, nrm_error_t *err)
{
  const char *cmd = json_string_value (json_object_get (kc->exec, "command"));
  const char *api = json_string_value (json_object_get (kc->exec, "apiVersion"));
  const char *mode = json_string_value (json_object_get (kc->exec, "interactiveMode"));
  const char *hint = json_string_value (json_object_get (kc->exec, "installHint"));
  json_t *args = json_object_get (kc->exec, "args");
  bool tty = isatty (STDIN_FILENO) == 1;
  /* v1beta1 without interactiveMode means IfAvailable (client-go's
   * SetDefaults_ExecConfig); v1 always names one. */
  bool interactive = tty && (mode == NULL || strcmp (mode, "Never") != 0);
  size_t i;
  json_t *e;
  memset (ret, 0, sizeof (*ret));
  if (mode && strcmp (mode, "Always") == 0 && !tty)
    return nrm_error_set (err, EINVAL,
                          "exec plugin `%s` of user `%s` needs a terminal (interactiveMode Always), and stdin is not "
                          "one",
                          cmd, kc->user_name);
  cleanup_free char *info = nrm_exec_info (kc, interactive);
  char **envp = plugin_env (json_object_get (kc->exec, "env"), info);
  char **argv = xcalloc (json_array_size (args) + 2, sizeof (char *));
  argv[0] = (char *) cmd;
  json_array_foreach (args, i, e) { argv[i + 1] = (char *) json_string_value (e); }

  int fds[2] = { -1, -1 };
  cleanup_free char *buf = NULL;
  size_t len = 0;
  posix_spawn_file_actions_t fa;
  pid_t pid = -1;
  int r = -1;
  if (pipe2 (fds, O_CLOEXEC) < 0)
    {
      nrm_error_errno (err, errno, "exec plugin `%s`: pipe", cmd);
      goto out;
    }
  posix_spawn_file_actions_init (&fa);
  posix_spawn_file_actions_adddup2 (&fa, fds[1], STDOUT_FILENO);
  if (!interactive)
    posix_spawn_file_actions_addopen (&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  /* The daemons block SIGTERM and SIGINT for their signal wait and ignore
   * SIGPIPE; a plugin would inherit both, and could then be neither
   * stopped nor ended by a closed pipe. It starts as from a shell. */
  posix_spawnattr_t attr;
  sigset_t none, all;
  sigemptyset (&none);
  sigfillset (&all);
  posix_spawnattr_init (&attr);
  posix_spawnattr_setsigmask (&attr, &none);
  posix_spawnattr_setsigdefault (&attr, &all);
  posix_spawnattr_setflags (&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  int s = posix_spawnp (&pid, cmd, &fa, &attr, argv, envp);
  posix_spawnattr_destroy (&attr);
  posix_spawn_file_actions_destroy (&fa);
  close (fds[1]);
  if (s != 0)
    {
      nrm_error_errno (err, s, "exec plugin `%s` of user `%s` cannot be started%s%s", cmd, kc->user_name,
                       hint ? "; " : "", hint ? hint : "");
      goto out;
    }
  buf = xmalloc (MAX_SMALL_FILE + 1);
  for (;;)
    {
      ssize_t n = read (fds[0], buf + len, MAX_SMALL_FILE - len);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      len += (size_t) n;
      if (len == MAX_SMALL_FILE)
        break;
    }
  close (fds[0]);
  fds[0] = -1;
  int status = 0;
  while (waitpid (pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
    {
      nrm_error_set (err, EPERM, "exec plugin `%s` of user `%s` failed (%s %d)%s%s", cmd, kc->user_name,
                     WIFEXITED (status) ? "exit status" : "signal",
                     WIFEXITED (status) ? WEXITSTATUS (status) : WTERMSIG (status),
                     WIFEXITED (status) && WEXITSTATUS (status) == 127 && hint ? "; " : "",
                     WIFEXITED (status) && WEXITSTATUS (status) == 127 && hint ? hint : "");
      goto out;
    }
  if (len == MAX_SMALL_FILE)
    {
      nrm_error_set (err, EFBIG, "exec plugin `%s`: its output is larger than %u KiB", cmd, MAX_SMALL_FILE >> 10);
      goto out;
    }
  r = nrm_exec_credential_parse (buf, len, api, ret, err);
  explicit_bzero (buf, len);
  if (r < 0)
    nrm_error_wrap (err, "user `%s`", kc->user_name);
out:
  if (fds[0] >= 0)
    close (fds[0]);
  free (argv);
  strv_free (envp);
  return r;
}
