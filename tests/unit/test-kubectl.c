/* SPDX-License-Identifier: Apache-2.0 */
/* kubectl nrm's pure parts: the views from API objects (fixtures in
 * tests/fixtures/kubectl: slices as `nrm slices` prints them, claims and
 * pods as the API server returns them), kubeconfig lists and contexts, and
 * exec credential plugins. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <pty.h>
#include <signal.h>

#include "driver/k8s/kube.h"
#include "driver/k8s/kubeconfig.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/yaml.h"
#include "nrm/kubectl-view.h"
#include "nrm/kubectl.h"
#include "fakefs.h"

static json_t *
fixture (const char *name)
{
  const char *src = getenv ("NRM_SRCDIR");
  cleanup_free char *path = xasprintf ("%s/tests/fixtures/kubectl/%s", src ? src : ".", name);
  json_error_t e;
  json_t *j = json_load_file (path, 0, &e);
  if (j == NULL)
    fail_msg ("%s: %s", path, e.text);
  return j;
}

/* The slices of every fixture, in one list. */
static json_t *
all_slices (void)
{
  json_t *all = json_array ();
  const char *names[] = { "slices-numa.json", "slices-partitioned.json", "slices-hugepages.json" };
  for (size_t i = 0; i < 3; i++)
    {
      cleanup_json json_t *s = fixture (names[i]);
      json_array_extend (all, s);
    }
  return all;
}

static json_t *
find_row (json_t *view, const char *node, json_int_t numa, const char *resource)
{
  size_t i;
  json_t *r;
  json_array_foreach (json_object_get (view, "resources"), i, r)
  {
    if (strcmp (json_string_value (json_object_get (r, "node")), node) == 0
        && json_integer_value (json_object_get (r, "numaNode")) == numa
        && strcmp (json_string_value (json_object_get (r, "resource")), resource) == 0)
      return r;
  }
  fail_msg ("no row %s/%lld/%s", node, (long long) numa, resource);
  return NULL;
}

static void
check_row (json_t *view, const char *node, json_int_t numa, const char *resource, json_int_t published,
           json_int_t allocated, json_int_t prepared)
{
  json_t *r = find_row (view, node, numa, resource);
  json_int_t p = json_integer_value (json_object_get (r, "published"));
  json_int_t a = json_integer_value (json_object_get (r, "allocated"));
  json_int_t q = json_integer_value (json_object_get (r, "prepared"));
  json_int_t f = json_integer_value (json_object_get (r, "free"));
  if (p != published || a != allocated || q != prepared || f != published - allocated)
    fail_msg ("%s/%lld/%s: published %lld allocated %lld prepared %lld free %lld, want %lld %lld %lld", node,
              (long long) numa, resource, (long long) p, (long long) a, (long long) q, (long long) f,
              (long long) published, (long long) allocated, (long long) prepared);
}

static void
check_node (json_t *view, const char *node, json_int_t claims, json_int_t prepared)
{
  size_t i;
  json_t *n;
  json_array_foreach (json_object_get (view, "nodes"), i, n)
  {
    if (strcmp (json_string_value (json_object_get (n, "name")), node) == 0)
      {
        assert_int_equal (json_integer_value (json_object_get (n, "claims")), claims);
        assert_int_equal (json_integer_value (json_object_get (n, "preparedClaims")), prepared);
        return;
      }
  }
  fail_msg ("no node %s", node);
}

#define MI (1024LL * 1024)

static void
test_nodes (void **state)
{
  cleanup_json json_t *slices = all_slices (), *claims = fixture ("claims.json");
  cleanup_json json_t *view = nrm_kview_nodes (slices, claims, NULL);
  /* numa mode: consumed capacity of the shared devices. */
  check_row (view, "n1", 0, "cpus", 12, 4, 4);
  check_row (view, "n1", 1, "cpus", 12, 2, 0);
  check_row (view, "n1", 0, "memory", 17397 * MI, 1024 * MI, 1024 * MI);
  check_row (view, "n1", 1, "memory", 18431 * MI, 0, 0);
  /* partitioned: the counter sets, once each, and whole exclusive devices;
   * a condition Ready False is not prepared. */
  check_row (view, "n2", 0, "cpus", 12, 12, 0);
  check_row (view, "n2", 1, "cpus", 12, 2, 0);
  /* The newest generation of a pool only; huge pages by size; devices
   * without capacity counted, those of no NUMA node apart. */
  check_row (view, "n3", 0, "memory", 8192 * MI, 0, 0);
  check_row (view, "n3", 0, "hugepages-2Mi", 64 * MI, 32 * MI, 0);
  check_row (view, "n3", 0, "devices", 1, 1, 1);
  check_row (view, "n3", -1, "devices", 1, 0, 0);
  check_node (view, "n1", 2, 1);
  check_node (view, "n2", 1, 0);
  check_node (view, "n3", 1, 0);
  /* A pool for every node (allNodes) is no node's. */
  assert_int_equal (json_array_size (json_object_get (view, "nodes")), 3);
  assert_int_equal (json_array_size (json_object_get (view, "resources")), 10);

  /* One node: only its rows. */
  cleanup_json json_t *one = nrm_kview_nodes (slices, claims, "n2");
  assert_int_equal (json_array_size (json_object_get (one, "resources")), 2);
  check_row (one, "n2", 1, "cpus", 12, 2, 0);

  /* The columns name every row's figures. */
  cleanup_free char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);
  nrm_kubectl_print ("nodes", view, f);
  fclose (f);
  assert_non_null (strstr (buf, "NODE   NUMA   RESOURCE"));
  assert_non_null (strstr (buf, "17397Mi"));
  assert_non_null (strstr (buf, "hugepages-2Mi"));
  assert_non_null (strstr (buf, "n1: 2 allocated claim(s), 1 prepared"));
}

static void
test_claim (void **state)
{
  cleanup_json json_t *claims = fixture ("claims.json");
  cleanup_json json_t *view = nrm_kview_claim (json_array_get (claims, 0));
  assert_string_equal (json_string_value (json_object_get (view, "node")), "n1");
  assert_true (json_is_true (json_object_get (view, "allocated")));
  json_t *results = json_object_get (view, "results");
  assert_int_equal (json_array_size (results), 2);
  assert_true (json_is_true (json_object_get (json_array_get (results, 0), "prepared")));
  json_t *dev = json_array_get (json_object_get (view, "devices"), 0);
  /* The known keys first, in their order, then the others as they came. */
  const char *want[] = { "request", "cpus", "numaNodes", "wholeCores", "l3Groups", "zzExtra" };
  void *it = json_object_iter (json_object_get (dev, "data"));
  for (size_t i = 0; i < 6; i++, it = json_object_iter_next (json_object_get (dev, "data"), it))
    {
      assert_non_null (it);
      assert_string_equal (json_object_iter_key (it), want[i]);
    }
  assert_null (it);
  assert_string_equal (
      json_string_value (json_object_get (json_array_get (json_object_get (dev, "conditions"), 0), "reason")),
      "Prepared");
  assert_string_equal (
      json_string_value (json_object_get (json_array_get (json_object_get (view, "reservedFor"), 0), "name")), "p1");

  cleanup_free char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);
  nrm_kubectl_print ("claim", view, f);
  fclose (f);
  assert_non_null (strstr (buf, "cpus           0-1,12-13"));
  assert_non_null (strstr (buf, "zzExtra        kept"));
  assert_non_null (strstr (buf, "condition      Ready=True Prepared"));

  /* A pending claim: not allocated, nothing else. */
  cleanup_json json_t *pending = nrm_kview_claim (json_array_get (claims, 4));
  assert_true (json_is_false (json_object_get (pending, "allocated")));
  assert_true (json_is_null (json_object_get (pending, "node")));
  assert_int_equal (json_array_size (json_object_get (pending, "results")), 0);
}

static void
test_pods (void **state)
{
  cleanup_json json_t *claims = fixture ("claims.json"), *pods = fixture ("pods.json");
  cleanup_json json_t *view = nrm_kview_pods (pods, claims);
  /* p1's claim from its status (a template's), p2's two from its spec;
   * the pod without claims is left out. */
  assert_int_equal (json_array_size (view), 3);
  json_t *p1 = json_array_get (view, 0);
  assert_string_equal (json_string_value (json_object_get (p1, "claim")), "a");
  assert_string_equal (json_string_value (json_object_get (p1, "cpus")), "0-1,12-13");
  assert_string_equal (json_string_value (json_object_get (p1, "numaNodes")), "0");
  assert_int_equal (json_integer_value (json_object_get (p1, "bytes")), 1024 * MI);
  assert_true (json_is_true (json_object_get (p1, "prepared")));
  json_t *p2 = json_array_get (view, 1);
  assert_string_equal (json_string_value (json_object_get (p2, "claim")), "b");
  assert_true (json_is_false (json_object_get (p2, "prepared")));
  assert_string_equal (json_string_value (json_object_get (p2, "cpus")), "");
  assert_true (json_is_false (json_object_get (json_array_get (view, 2), "found")));

  cleanup_free char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);
  nrm_kubectl_print ("pods", view, f);
  fclose (f);
  assert_non_null (strstr (buf, "0-1,12-13"));
  assert_non_null (strstr (buf, "1Gi"));
  assert_non_null (strstr (buf, "(no claim)"));
}

static void
test_yaml (void **state)
{
  cleanup_json json_t *doc = json_pack ("{s:s, s:s, s:s, s:I, s:[b, n], s:{s:s}}", "plain", "text", "number", "12",
                                        "empty", "", "n", (json_int_t) 5, "list", 1, "nested", "k", "a: b");
  cleanup_free char *buf = NULL;
  size_t len = 0;
  nrm_error_t err = NULL;
  FILE *f = open_memstream (&buf, &len);
  assert_int_equal (nrm_kubectl_yaml (doc, f, &err), 0);
  fclose (f);
  /* It reads back as the same document: strings that look like numbers
   * stay strings. */
  cleanup_json json_t *back = NULL;
  if (nrm_yaml_load (buf, len, "output", &back, &err) < 0)
    fail_msg ("%s\n%s", nrm_error_msg (err), buf);
  assert_true (json_equal (doc, back));
}

/* --- kubeconfig --------------------------------------------------------------- */

static char dir[64];

/* fake_put() with a mode (the exec plugins are run, the kubeconfigs read
 * only by their owner); the file's path, which the caller frees. */
static char *
write_file (const char *name, const char *text, mode_t mode)
{
  char *path = xasprintf ("%s/%s", dir, name);
  fake_put (dir, name, text);
  assert_int_equal (chmod (path, mode), 0);
  return path;
}

static int
setup_dir (void **state)
{
  snprintf (dir, sizeof (dir), "/tmp/nrm-kubectl-XXXXXX");
  return mkdtemp (dir) ? 0 : -1;
}

static int
teardown_dir (void **state)
{
  cleanup_free char *cmd = xasprintf ("rm -rf '%s'", dir);
  return system (cmd) == 0 ? 0 : -1;
}

static void
load_ok (const char *paths, bool list, const char *context, const char *server, const char *ns,
         struct nrm_kubeconfig **ret)
{
  nrm_error_t err = NULL;
  struct nrm_kubeconfig *kc = NULL;
  if (nrm_kubeconfig_load (paths, list, context, &kc, &err) < 0)
    fail_msg ("%s: %s", paths, nrm_error_msg (err));
  assert_string_equal (kc->server, server);
  if (ns)
    assert_string_equal (kc->namespace, ns);
  else
    assert_null (kc->namespace);
  if (ret)
    *ret = kc;
  else
    nrm_kubeconfig_free (kc);
}

static void
load_fails (const char *paths, bool list, const char *context, const char *needle)
{
  nrm_error_t err = NULL;
  struct nrm_kubeconfig *kc = NULL;
  assert_int_equal (nrm_kubeconfig_load (paths, list, context, &kc, &err), -1);
  assert_null (kc);
  if (strstr (nrm_error_msg (err), needle) == NULL)
    fail_msg ("error `%s` should say `%s`", nrm_error_msg (err), needle);
  nrm_error_release (&err);
}

static void
test_kubeconfig_list (void **state)
{
  cleanup_free char *sub = xasprintf ("%s/sub", dir);
  mkdir (sub, 0700);
  cleanup_free char *one = write_file ("one",
                                       "current-context: c1\n"
                                       "contexts:\n- name: c1\n  context: {cluster: k1, user: u1, namespace: ns1}\n"
                                       "clusters:\n- name: k1\n  cluster: {server: 'https://one:6443/'}\n"
                                       "users:\n- name: u1\n  user: {token: t1}\n",
                                       0600);
  cleanup_free char *ca = write_file ("sub/ca.crt", "not read here\n", 0600);
  cleanup_free char *two = write_file ("sub/two",
                                       "current-context: c2\n"
                                       "contexts:\n- name: c2\n  context: {cluster: k2, user: u2}\n"
                                       "- name: c1\n  context: {cluster: k2, user: u2}\n"
                                       "clusters:\n- name: k1\n  cluster: {server: 'https://lost'}\n"
                                       "- name: k2\n  cluster: {server: 'https://two', "
                                       "certificate-authority: ca.crt}\n"
                                       "users:\n- name: u2\n  user: {tokenFile: token}\n",
                                       0600);
  cleanup_free char *list = xasprintf ("%s/missing:%s::%s", dir, one, two);
  cleanup_free char *rev = xasprintf ("%s:%s", two, one);
  struct nrm_kubeconfig *kc = NULL;
  /* The first file that sets current-context, or names an entry, wins;
   * a list's missing files are skipped. */
  load_ok (list, true, NULL, "https://one:6443", "ns1", &kc);
  assert_string_equal (kc->context, "c1");
  assert_string_equal (kc->token, "t1");
  nrm_kubeconfig_free (kc);
  load_ok (rev, true, NULL, "https://two", NULL, NULL);
  /* --context; relative paths from the file that holds them. */
  load_ok (list, true, "c2", "https://two", NULL, &kc);
  cleanup_free char *want_ca = xasprintf ("%s/sub/ca.crt", dir);
  cleanup_free char *want_token = xasprintf ("%s/sub/token", dir);
  assert_string_equal (kc->ca_file, want_ca);
  assert_string_equal (kc->token_file, want_token);
  nrm_kubeconfig_free (kc);
  load_fails (list, true, "nope", "context `nope` not found");
  /* A single file must exist; a list needs one that does. */
  cleanup_free char *missing = xasprintf ("%s/missing", dir);
  cleanup_free char *missing2 = xasprintf ("%s/missing:%s/missing2", dir, dir);
  load_fails (missing, false, NULL, "missing");
  load_fails (missing2, true, NULL, "none of the files");
  /* A path with a colon is one file when it is not a list. */
  cleanup_free char *colon = write_file ("a:b",
                                         "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k}\n"
                                         "clusters:\n- name: k\n  cluster: {server: 'https://colon'}\n",
                                         0600);
  load_ok (colon, false, NULL, "https://colon", NULL, NULL);

  /* nrm_kubeconfig_default: $KUBECONFIG, else ~/.kube/config. */
  nrm_error_t err = NULL;
  bool is_list = false;
  setenv ("KUBECONFIG", list, 1);
  cleanup_free char *d1 = nrm_kubeconfig_default (&is_list, &err);
  assert_string_equal (d1, list);
  assert_true (is_list);
  setenv ("KUBECONFIG", "", 1);
  setenv ("HOME", "/home/x", 1);
  cleanup_free char *d2 = nrm_kubeconfig_default (&is_list, &err);
  assert_string_equal (d2, "/home/x/.kube/config");
  assert_false (is_list);
  unsetenv ("KUBECONFIG");
}

static void
parse_fails (const char *text, const char *needle)
{
  struct nrm_exec_credential c;
  nrm_error_t err = NULL;
  assert_int_equal (nrm_exec_credential_parse (text, strlen (text), "client.authentication.k8s.io/v1", &c, &err), -1);
  if (strstr (nrm_error_msg (err), needle) == NULL)
    fail_msg ("error `%s` should say `%s`", nrm_error_msg (err), needle);
  nrm_error_release (&err);
}

#define EC_HEAD "{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","

static void
test_exec_parse (void **state)
{
  struct nrm_exec_credential c;
  nrm_error_t err = NULL;
  const char *ok = EC_HEAD "\"status\":{\"token\":\"abc\",\"expirationTimestamp\":\"2030-01-02T03:04:05Z\"}}";
  assert_int_equal (nrm_exec_credential_parse (ok, strlen (ok), "client.authentication.k8s.io/v1", &c, &err), 0);
  assert_string_equal (c.token, "abc");
  assert_int_equal (c.expires, 1893553445);
  nrm_exec_credential_clear (&c);
  const char *zone = EC_HEAD "\"status\":{\"clientCertificateData\":\"-----BEGIN CERTIFICATE-----\","
                             "\"clientKeyData\":\"-----BEGIN PRIVATE KEY-----\","
                             "\"expirationTimestamp\":\"2030-01-02T04:04:05.123+01:00\"}}";
  assert_int_equal (nrm_exec_credential_parse (zone, strlen (zone), "client.authentication.k8s.io/v1", &c, &err), 0);
  assert_null (c.token);
  assert_string_equal (c.cert_pem, "-----BEGIN CERTIFICATE-----");
  assert_string_equal (c.key_pem, "-----BEGIN PRIVATE KEY-----");
  assert_int_equal (c.expires, 1893553445);
  nrm_exec_credential_clear (&c);
  const char *never = EC_HEAD "\"status\":{\"token\":\"x\"}}";
  assert_int_equal (nrm_exec_credential_parse (never, strlen (never), "client.authentication.k8s.io/v1", &c, &err), 0);
  assert_int_equal (c.expires, 0);
  nrm_exec_credential_clear (&c);

  parse_fails ("not json", "not JSON");
  parse_fails ("{\"kind\":\"Status\"}", "not an ExecCredential");
  parse_fails ("{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\","
               "\"status\":{\"token\":\"x\"}}",
               "it was asked for `client.authentication.k8s.io/v1`");
  parse_fails (EC_HEAD "\"spec\":{}}", "no status");
  parse_fails (EC_HEAD "\"status\":{}}", "neither a token nor a client certificate");
  parse_fails (EC_HEAD "\"status\":{\"clientCertificateData\":\"c\"}}", "without the other");
  parse_fails (EC_HEAD "\"status\":{\"token\":\"x\",\"expirationTimestamp\":\"tomorrow\"}}", "RFC 3339");
  parse_fails (EC_HEAD "\"status\":{\"token\":\"x\\r\\nX-Injected: 1\"}}", "control character");
}

#define EXEC_KC_MODE(cmd, mode, extra)                                                                                 \
  "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"                                       \
  "clusters:\n- name: k\n  cluster: {server: 'https://exec', certificate-authority-data: Q0EK}\n"                      \
  "users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"                         \
  "      interactiveMode: " mode "\n      command: " cmd "\n" extra
#define EXEC_KC(cmd, extra) EXEC_KC_MODE (cmd, "Never", extra)

static void
test_exec_run (void **state)
{
  /* A plugin that answers with what it was given: its env, its argument
   * and the ExecCredential request. */
  cleanup_free char *plugin = write_file (
      "plugin.sh",
      "#!/bin/sh\n"
      "case \"$KUBERNETES_EXEC_INFO\" in *'\"interactive\":false'*'\"server\":\"https://exec\"'*) ok=info;; "
      "*) ok=noinfo;; esac\n"
      "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
      "\"status\":{\"token\":\"%s-%s-%s\",\"expirationTimestamp\":\"2030-01-02T03:04:05Z\"}}' \"$FOO\" \"$1\" $ok\n",
      0700);
  cleanup_free char *fail = write_file ("fail.sh", "#!/bin/sh\necho 'no login' >&2\nexit 3\n", 0700);
  cleanup_free char *kc1 = write_file ("exec.yaml",
                                       EXEC_KC ("./plugin.sh", "      args: [arg1]\n      env: [{name: FOO, value: "
                                                               "bar}]\n      provideClusterInfo: true\n"),
                                       0600);
  struct nrm_kubeconfig *kc = NULL;
  struct nrm_exec_credential c;
  nrm_error_t err = NULL;
  load_ok (kc1, false, NULL, "https://exec", NULL, &kc);
  assert_non_null (kc->exec);
  if (nrm_exec_credential_run (kc, &c, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_string_equal (c.token, "bar-arg1-info");
  assert_int_equal (c.expires, 1893553445);
  nrm_exec_credential_clear (&c);
  nrm_kubeconfig_free (kc);

  /* The client runs it when it starts, with the cluster's facts too. */
  cleanup_free char *strict = write_file (
      "strict.sh",
      "#!/bin/sh\n"
      "case \"$KUBERNETES_EXEC_INFO\" in *'\"server\":\"https://exec\"'*) ;; *) echo \"no server\" >&2; exit 1;; esac\n"
      "case \"$KUBERNETES_EXEC_INFO\" in *'\"certificate-authority-data\":\"Q0EK\"'*) ;; *) echo \"no CA\" >&2; exit "
      "1;; esac\n"
      "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
      "\"status\":{\"token\":\"t\"}}'\n",
      0700);
  cleanup_free char *kc0
      = write_file ("strict.yaml", EXEC_KC ("./strict.sh", "      provideClusterInfo: true\n"), 0600);
  struct nrm_kube_options o;
  struct nrm_kube *k = NULL;
  nrm_kube_options_init (&o);
  o.kubeconfig = kc0;
  if (nrm_kube_new (&o, &k, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  nrm_kube_free (k);

  /* A failing plugin, a missing one (with its install hint), and stanzas
   * nrm cannot run. */
  cleanup_free char *kc2 = write_file ("fail.yaml", EXEC_KC ("fail.sh", ""), 0600);
  cleanup_free char *path = xasprintf ("%s:%s", dir, getenv ("PATH") ? getenv ("PATH") : "/usr/bin:/bin");
  cleanup_free char *old_path = xstrdup (getenv ("PATH") ? getenv ("PATH") : "/usr/bin:/bin");
  setenv ("PATH", path, 1);
  load_ok (kc2, false, NULL, "https://exec", NULL, &kc);
  assert_int_equal (nrm_exec_credential_run (kc, &c, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "exit status 3"));
  nrm_error_release (&err);
  nrm_kubeconfig_free (kc);
  setenv ("PATH", old_path, 1);
  cleanup_free char *kc3
      = write_file ("missing.yaml", EXEC_KC ("nrm-no-such-plugin", "      installHint: install it from X\n"), 0600);
  load_ok (kc3, false, NULL, "https://exec", NULL, &kc);
  assert_int_equal (nrm_exec_credential_run (kc, &c, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "install it from X"));
  nrm_error_release (&err);
  nrm_kubeconfig_free (kc);
  /* A plugin that must ask, without a terminal to ask on. */
  cleanup_free char *kc5 = write_file ("always.yaml", EXEC_KC_MODE ("./plugin.sh", "Always", ""), 0600);
  if (!isatty (STDIN_FILENO))
    {
      load_ok (kc5, false, NULL, "https://exec", NULL, &kc);
      assert_int_equal (nrm_exec_credential_run (kc, &c, &err), -1);
      assert_non_null (strstr (nrm_error_msg (err), "needs a terminal"));
      nrm_error_release (&err);
      nrm_kubeconfig_free (kc);
    }
  cleanup_free char *old_api
      = write_file ("alpha.yaml",
                    "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                    "clusters:\n- name: k\n  cluster: {server: 'https://exec'}\n"
                    "users:\n- name: u\n  user: {exec: {apiVersion: client.authentication.k8s.io/v1alpha1, "
                    "command: x}}\n",
                    0600);
  load_fails (old_api, false, NULL, "v1alpha1` is not supported");
}

/* A plugin that answers with a client certificate alone (no token) runs
 * once, not again at every request while its credential holds. */
static void
test_exec_cert_once (void **state)
{
  cleanup_free char *plugin
      = write_file ("cert.sh",
                    "#!/bin/sh\necho run >> \"$(dirname \"$0\")/runs\"\n"
                    "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
                    "\"status\":{\"clientCertificateData\":\"cert\",\"clientKeyData\":\"key\"}}'\n",
                    0700);
  cleanup_free char *kc = write_file (
      "cert.yaml",
      "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"
      "clusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:1', certificate-authority-data: Q0EK}\n"
      "users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
      "      interactiveMode: Never\n      command: ./cert.sh\n",
      0600);
  struct nrm_kube_options o;
  struct nrm_kube *k = NULL;
  nrm_error_t err = NULL;
  nrm_kube_options_init (&o);
  o.kubeconfig = kc;
  o.max_tries = 1;
  o.timeout_ms = 2000;
  if (nrm_kube_new (&o, &k, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  for (int i = 0; i < 3; i++)
    {
      json_t *body = NULL;
      /* Nothing listens there: no answer, and no 401 that would renew it. */
      assert_int_equal (nrm_kube_call (k, "GET", "/version", NULL, &body, &err), -1);
      nrm_error_release (&err);
      json_decref (body);
    }
  nrm_kube_free (k);
  cleanup_free char *runs = xasprintf ("%s/runs", dir);
  FILE *f = fopen (runs, "r");
  assert_non_null (f);
  int lines = 0, ch;
  while ((ch = fgetc (f)) != EOF)
    lines += ch == '\n';
  fclose (f);
  assert_int_equal (lines, 1);
}

/* A v1beta1 plugin without interactiveMode may ask (IfAvailable, as
 * client-go defaults it): with a terminal on stdin it is told so. */
static void
test_exec_beta_interactive (void **state)
{
  int master = -1, slave = -1;
  if (openpty (&master, &slave, NULL, NULL, NULL) < 0)
    skip ();
  cleanup_free char *plugin
      = write_file ("beta.sh",
                    "#!/bin/sh\n"
                    "case \"$KUBERNETES_EXEC_INFO\" in *'\"interactive\":true'*) t=asked;; *) t=silent;; esac\n"
                    "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\","
                    "\"status\":{\"token\":\"%s\"}}' $t\n",
                    0700);
  cleanup_free char *path
      = write_file ("beta.yaml",
                    "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"
                    "clusters:\n- name: k\n  cluster: {server: 'https://exec'}\n"
                    "users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n"
                    "      command: ./beta.sh\n",
                    0600);
  struct nrm_kubeconfig *kc = NULL;
  struct nrm_exec_credential c;
  nrm_error_t err = NULL;
  load_ok (path, false, NULL, "https://exec", NULL, &kc);
  int saved = dup (STDIN_FILENO);
  assert_true (saved >= 0);
  assert_int_equal (dup2 (slave, STDIN_FILENO), STDIN_FILENO);
  int r = nrm_exec_credential_run (kc, &c, &err);
  dup2 (saved, STDIN_FILENO);
  close (saved);
  close (slave);
  close (master);
  if (r < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_string_equal (c.token, "asked");
  nrm_exec_credential_clear (&c);
  nrm_kubeconfig_free (kc);
}

/* A daemon blocks SIGTERM and ignores SIGPIPE: its plugin gets neither. */
static void
test_exec_signals (void **state)
{
  cleanup_free char *plugin
      = write_file ("sig.sh",
                    "#!/bin/sh\n"
                    "blk=$(sed -n 's/^SigBlk:[[:space:]]*//p' /proc/$$/status)\n"
                    "ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status)\n"
                    "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
                    "\"status\":{\"token\":\"%s-%s\"}}' $blk $ign\n",
                    0700);
  cleanup_free char *path = write_file ("sig.yaml", EXEC_KC ("./sig.sh", ""), 0600);
  struct nrm_kubeconfig *kc = NULL;
  struct nrm_exec_credential c;
  nrm_error_t err = NULL;
  sigset_t set, old;
  sigemptyset (&set);
  sigaddset (&set, SIGTERM);
  sigaddset (&set, SIGINT);
  pthread_sigmask (SIG_BLOCK, &set, &old);
  void (*was) (int) = signal (SIGPIPE, SIG_IGN);
  load_ok (path, false, NULL, "https://exec", NULL, &kc);
  int r = nrm_exec_credential_run (kc, &c, &err);
  pthread_sigmask (SIG_SETMASK, &old, NULL);
  signal (SIGPIPE, was);
  if (r < 0)
    fail_msg ("%s", nrm_error_msg (err));
  /* The masks of /proc/PID/status: bit N-1 for signal N. */
  unsigned long long blk = 0, ign = 0;
  assert_int_equal (sscanf (c.token, "%llx-%llx", &blk, &ign), 2);
  assert_int_equal (blk & (1ULL << (SIGTERM - 1) | 1ULL << (SIGINT - 1)), 0);
  assert_int_equal (ign & (1ULL << (SIGPIPE - 1)), 0);
  nrm_exec_credential_clear (&c);
  nrm_kubeconfig_free (kc);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_nodes),
    cmocka_unit_test (test_claim),
    cmocka_unit_test (test_pods),
    cmocka_unit_test (test_yaml),
    cmocka_unit_test_setup_teardown (test_kubeconfig_list, setup_dir, teardown_dir),
    cmocka_unit_test (test_exec_parse),
    cmocka_unit_test_setup_teardown (test_exec_run, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown (test_exec_cert_once, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown (test_exec_beta_interactive, setup_dir, teardown_dir),
    cmocka_unit_test_setup_teardown (test_exec_signals, setup_dir, teardown_dir),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
