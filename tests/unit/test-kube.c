/* SPDX-License-Identifier: Apache-2.0 */
/* YAML input, kubeconfig settings, and how the publisher compares slices
 * and finds the fields an API server dropped. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/k8s/kube.h"
#include "driver/k8s/publish.h"
#include "nrm/base/cleanup.h"
#include "tests/unit/util.h"
#include "nrm/conf.h"
#include "nrm/base/yaml.h"

static json_t *
yaml (const char *text)
{
  json_t *v = NULL;
  nrm_error_t err = NULL;
  if (nrm_yaml_load (text, strlen (text), "test", &v, &err) < 0)
    fail_msg ("`%s`: %s", text, nrm_error_msg (err));
  return v;
}

static void
yaml_fails (const char *text, const char *needle)
{
  json_t *v = NULL;
  nrm_error_t err = NULL;
  assert_int_equal (nrm_yaml_load (text, strlen (text), "input `x`", &v, &err), -1);
  assert_null (v);
  if (strstr (nrm_error_msg (err), needle) == NULL || strstr (nrm_error_msg (err), "input `x`") == NULL)
    fail_msg ("error `%s` should name the input and say `%s`", nrm_error_msg (err), needle);
  nrm_error_release (&err);
}

static void
test_yaml_scalars (void **state)
{
  cleanup_json json_t *v = yaml ("a: 1\nb: -0x10\nc: 0o17\nd: 1.5\ne: true\nf: False\ng: ~\nh:\ni: '12'\n"
                                 "j: \"true\"\nk: 1Gi\nl: 2020-01-01\nm: -x\nn: [1, two, {x: y}]\no: |\n  line\n"
                                 "p: .5\nq: 1e3\n");
  assert_int_equal (json_integer_value (json_object_get (v, "a")), 1);
  assert_int_equal (json_integer_value (json_object_get (v, "b")), -16);
  assert_int_equal (json_integer_value (json_object_get (v, "c")), 15);
  assert_true (json_real_value (json_object_get (v, "d")) == 1.5);
  assert_true (json_is_true (json_object_get (v, "e")));
  assert_true (json_is_false (json_object_get (v, "f")));
  assert_true (json_is_null (json_object_get (v, "g")));
  assert_true (json_is_null (json_object_get (v, "h")));
  assert_string_equal (json_string_value (json_object_get (v, "i")), "12");
  assert_string_equal (json_string_value (json_object_get (v, "j")), "true");
  assert_string_equal (json_string_value (json_object_get (v, "k")), "1Gi");
  assert_string_equal (json_string_value (json_object_get (v, "l")), "2020-01-01");
  assert_string_equal (json_string_value (json_object_get (v, "m")), "-x");
  assert_int_equal (json_array_size (json_object_get (v, "n")), 3);
  assert_string_equal (json_string_value (json_object_get (json_array_get (json_object_get (v, "n"), 2), "x")), "y");
  assert_string_equal (json_string_value (json_object_get (v, "o")), "line\n");
  assert_true (json_real_value (json_object_get (v, "p")) == 0.5);
  assert_true (json_real_value (json_object_get (v, "q")) == 1000.0);
  cleanup_json json_t *j = yaml ("{\"a\": [1, 2], \"b\": {\"c\": null}}");
  assert_int_equal (json_array_size (json_object_get (j, "a")), 2);
  cleanup_json json_t *alias = yaml ("base: &b {x: 1}\nuse: *b\n");
  assert_int_equal (json_integer_value (json_object_get (json_object_get (alias, "use"), "x")), 1);
}

static void
test_yaml_errors (void **state)
{
  yaml_fails ("a: 1\na: 2\n", "duplicate key `a`");
  yaml_fails ("a: [1\n", "line");
  yaml_fails ("", "empty document");
  yaml_fails ("a: 1\n---\nb: 2\n", "more than one YAML document");
  yaml_fails ("? [1, 2]\n: x\n", "must be a string");
  yaml_fails ("a: &x 1\nb:\n  <<: *x\n", "merge keys");
  /* An alias bomb: 9 levels of 10 references each. */
  char bomb[2048];
  size_t n = (size_t) snprintf (bomb, sizeof (bomb), "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
  for (int i = 1; i <= 9; i++)
    n += (size_t) snprintf (bomb + n, sizeof (bomb) - n,
                            "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i - 1,
                            i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1);
  yaml_fails (bomb, "alias");
}

static void
kubeconfig_fails (const char *text, const char *needle)
{
  cleanup_free char *path = write_tmp (text);
  struct nrm_kube_options o;
  struct nrm_kube *k = NULL;
  nrm_error_t err = NULL;
  nrm_kube_options_init (&o);
  o.kubeconfig = path;
  assert_int_equal (nrm_kube_new (&o, &k, &err), -1);
  assert_null (k);
  if (strstr (nrm_error_msg (err), needle) == NULL)
    fail_msg ("error `%s` should say `%s`", nrm_error_msg (err), needle);
  nrm_error_release (&err);
  unlink (path);
}

#define KC_HEAD                                                                                                        \
  "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"

static void
test_kubeconfig (void **state)
{
  kubeconfig_fails ("apiVersion: v1\nkind: Config\n", "no current-context");
  kubeconfig_fails ("current-context: nope\ncontexts: []\n", "context `nope` not found");
  kubeconfig_fails (KC_HEAD "clusters: []\n", "cluster of context `c` not found");
  kubeconfig_fails (KC_HEAD "clusters:\n- name: k\n  cluster: {server: http://127.0.0.1:1}\n", "https://");
  kubeconfig_fails (KC_HEAD "clusters:\n- name: k\n  cluster: {server: https://a, insecure-skip-tls-verify: true}\n",
                    "insecure-skip-tls-verify");
  kubeconfig_fails (KC_HEAD
                    "clusters:\n- name: k\n  cluster: {server: https://a, certificate-authority: /nonexistent/ca}\n",
                    "/nonexistent/ca");
  kubeconfig_fails (KC_HEAD "clusters:\n- name: k\n  cluster: {server: https://a, certificate-authority-data: '@@@'}\n",
                    "not valid base64");
  kubeconfig_fails (KC_HEAD "clusters:\n- name: k\n  cluster: {server: https://a}\n"
                            "users:\n- name: u\n  user: {exec: {command: x}}\n",
                    "`exec`");
  kubeconfig_fails (KC_HEAD "clusters:\n- name: k\n  cluster: {server: https://a}\n"
                            "users:\n- name: u\n  user: {tokenFile: /nonexistent/token}\n",
                    "/nonexistent/token");
  kubeconfig_fails (KC_HEAD "clusters:\n- name: k\n  cluster: {server: https://a}\n"
                            "users:\n- name: u\n  user: {client-certificate-data: eA==}\n",
                    "both a client certificate and its key");

  /* A good one: the server comes back without its trailing slash. */
  cleanup_free char *path = write_tmp (KC_HEAD "clusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:6443/', "
                                               "certificate-authority-data: eA==}\n"
                                               "users:\n- name: u\n  user: {token: abc}\n");
  struct nrm_kube_options o;
  struct nrm_kube *k = NULL;
  nrm_error_t err = NULL;
  nrm_kube_options_init (&o);
  o.kubeconfig = path;
  if (nrm_kube_new (&o, &k, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_string_equal (nrm_kube_server (k), "https://127.0.0.1:6443");
  nrm_kube_free (k);
  unlink (path);
}

static void
test_spec_equal (void **state)
{
  cleanup_json json_t *a
      = json_loads ("{\"devices\":[{\"name\":\"numa0\",\"capacity\":{\"memory\":{\"value\":\"1024Mi\","
                    "\"requestPolicy\":{\"default\":\"1Mi\",\"validRange\":{\"min\":\"1048576\"}}}},"
                    "\"taints\":[{\"key\":\"k\",\"effect\":\"NoSchedule\"}]}]}",
                    0, NULL);
  cleanup_json json_t *b
      = json_loads ("{\"devices\":[{\"name\":\"numa0\",\"capacity\":{\"memory\":{\"value\":\"1Gi\","
                    "\"requestPolicy\":{\"default\":\"1Mi\",\"validRange\":{\"min\":\"1Mi\"}}}},"
                    "\"taints\":[{\"key\":\"k\",\"effect\":\"NoSchedule\",\"timeAdded\":\"2026-01-01T00:00:00Z\"}]}]}",
                    0, NULL);
  assert_true (nrm_slice_spec_equal (a, b));
  assert_true (nrm_slice_spec_equal (b, a));
  /* A quantity-looking attribute is compared as text. */
  cleanup_json json_t *c = json_loads ("{\"attributes\":{\"x\":{\"string\":\"1Gi\"}}}", 0, NULL);
  cleanup_json json_t *d = json_loads ("{\"attributes\":{\"x\":{\"string\":\"1024Mi\"}}}", 0, NULL);
  assert_false (nrm_slice_spec_equal (c, d));
  /* A field only one side has differs. */
  cleanup_json json_t *e = json_loads ("{\"devices\":[{\"name\":\"numa0\"}]}", 0, NULL);
  cleanup_json json_t *f
      = json_loads ("{\"devices\":[{\"name\":\"numa0\",\"allowMultipleAllocations\":true}]}", 0, NULL);
  assert_false (nrm_slice_spec_equal (e, f));
  assert_false (nrm_slice_spec_equal (f, e));
  assert_false (nrm_slice_spec_equal (a, NULL));
}

static void
dropped_is (const char *sent, const char *stored, const char *field, const char *gate)
{
  cleanup_json json_t *a = json_loads (sent, 0, NULL), *b = json_loads (stored, 0, NULL);
  const char *g = NULL;
  cleanup_free char *f = nrm_slice_dropped_field (a, b, &g);
  if (field == NULL)
    {
      assert_null (f);
      return;
    }
  assert_non_null (f);
  assert_string_equal (f, field);
  if (gate)
    assert_string_equal (g, gate);
  else
    assert_null (g);
}

static void
test_dropped_fields (void **state)
{
  dropped_is ("{\"devices\":[{\"name\":\"a\",\"allowMultipleAllocations\":true}]}", "{\"devices\":[{\"name\":\"a\"}]}",
              "spec.devices[0].allowMultipleAllocations", "DRAConsumableCapacity");
  dropped_is ("{\"devices\":[{\"name\":\"a\",\"capacity\":{\"cpus\":{\"value\":\"4\",\"requestPolicy\":{}}}}]}",
              "{\"devices\":[{\"name\":\"a\",\"capacity\":{\"cpus\":{\"value\":\"4\"}}}]}",
              "spec.devices[0].capacity.cpus.requestPolicy", "DRAConsumableCapacity");
  dropped_is ("{\"devices\":[{\"name\":\"a\",\"attributes\":{\"numaNodes\":{\"ints\":[0,1]},\"x\":{\"int\":1}}}]}",
              "{\"devices\":[{\"name\":\"a\",\"attributes\":{\"x\":{\"int\":1}}}]}",
              "spec.devices[0].attributes.numaNodes", "DRAListTypeAttributes");
  dropped_is ("{\"sharedCounters\":[{\"name\":\"n\"}]}", "{}", "spec.sharedCounters", "DRAPartitionableDevices");
  dropped_is ("{\"devices\":[{\"name\":\"a\",\"taints\":[]}]}", "{\"devices\":[{\"name\":\"a\"}]}",
              "spec.devices[0].taints", "DRADeviceTaints");
  dropped_is ("{\"devices\":[{\"name\":\"a\",\"mystery\":1}]}", "{\"devices\":[{\"name\":\"a\"}]}",
              "spec.devices[0].mystery", NULL);
  dropped_is ("{\"devices\":[{\"name\":\"a\"}]}", "{\"devices\":[{\"name\":\"a\",\"extra\":1}]}", NULL, NULL);
}

static void
test_config_yaml (void **state)
{
  cleanup_free char *path
      = write_tmp ("# nrm settings\nnodeName: node-1\nreservedCPUs: \"0-1\"\n"
                   "cpu:\n  mode: partitioned\n  options: [full-pcpus-only]\n"
                   "kubeconfig: /etc/nrm/kubeconfig\npublishSlices: false\napiQPS: 2.5\napiBurst: 4\n"
                   "httpAddress: 127.0.0.1:9464\n");
  struct nrm_config c;
  nrm_error_t err = NULL;
  nrm_config_init (&c);
  if (nrm_config_load_file (&c, path, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_string_equal (c.node_name, "node-1");
  assert_string_equal (c.kubeconfig, "/etc/nrm/kubeconfig");
  assert_string_equal (c.http_address, "127.0.0.1:9464");
  assert_true (c.no_publish);
  assert_true (c.api_qps == 2.5);
  assert_int_equal (c.api_burst, 4);
  assert_int_equal (c.cpu.mode, NRM_CPU_MODE_PARTITIONED);
  nrm_config_done (&c);
  unlink (path);

  /* A YAML mistake names the file and the line. */
  cleanup_free char *bad = write_tmp ("nodeName: a\ncpu:\n  mode: numa\n mode: x\n");
  nrm_config_init (&c);
  assert_int_equal (nrm_config_load_file (&c, bad, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), bad));
  assert_non_null (strstr (nrm_error_msg (err), "line 4"));
  nrm_error_release (&err);
  nrm_config_done (&c);
  unlink (bad);

  cleanup_free char *typo = write_tmp ("apiBurst: 0\n");
  nrm_config_init (&c);
  assert_int_equal (nrm_config_load_file (&c, typo, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "apiBurst"));
  nrm_error_release (&err);
  nrm_config_done (&c);
  unlink (typo);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_yaml_scalars), cmocka_unit_test (test_yaml_errors),    cmocka_unit_test (test_kubeconfig),
    cmocka_unit_test (test_spec_equal),   cmocka_unit_test (test_dropped_fields), cmocka_unit_test (test_config_yaml),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
