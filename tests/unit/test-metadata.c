/* SPDX-License-Identifier: Apache-2.0 */
/* Device metadata for containers (KEP-5304) on a temporary directory: the
 * host file, the CDI spec that mounts it, generations, refused names, and
 * removal that stays inside its directory. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
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

#include "driver/kubelet/metadata.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "fakefs.h"

#define DRIVER "cpu.nrm.example.com"
#define NS "team-a"
#define NAME "my-claim"
#define UID "0f1e2d3c-aaaa-bbbb-cccc-000000000001"

static char root[128], plugin_dir[256], cdi_dir[256];

static int
setup (void **state)
{
  (void) state;
  snprintf (root, sizeof (root), "/tmp/nrm-metadata-XXXXXX");
  assert_non_null (mkdtemp (root));
  snprintf (plugin_dir, sizeof (plugin_dir), "%s/plugins/" DRIVER, root);
  snprintf (cdi_dir, sizeof (cdi_dir), "%s/cdi", root);
  nrm_error_t err = NULL;
  assert_int_equal (nrm_mkdir_p (plugin_dir, 0755, &err), 0);
  assert_int_equal (nrm_mkdir_p (cdi_dir, 0755, &err), 0);
  return 0;
}

static int
teardown (void **state)
{
  (void) state;
  char cmd[256];
  snprintf (cmd, sizeof (cmd), "rm -rf '%s'", root);
  return system (cmd) == 0 ? 0 : -1;
}

static char *path_of (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));
static char *
path_of (const char *fmt, ...)
{
  char *p = NULL;
  va_list ap;
  va_start (ap, fmt);
  assert_true (vasprintf (&p, fmt, ap) >= 0);
  va_end (ap);
  return p;
}

static char *
slurp (const char *path)
{
  char *text = NULL;
  nrm_error_t err = NULL;
  if (nrm_read_file (path, 1 << 20, &text, NULL, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  return text;
}

/* The one JSON value in the file at path, which must end with a newline. */
static json_t *
load (const char *path)
{
  cleanup_free char *text = slurp (path);
  size_t n = strlen (text);
  assert_true (n > 0 && text[n - 1] == '\n');
  json_error_t jerr;
  json_t *v = json_loads (text, 0, &jerr);
  if (v == NULL)
    fail_msg ("`%s`: %s", path, jerr.text);
  return v;
}

static int
entries (const char *dir)
{
  DIR *d = opendir (dir);
  struct dirent *de;
  int n = 0;
  assert_non_null (d);
  while ((de = readdir (d)) != NULL)
    if (strcmp (de->d_name, ".") != 0 && strcmp (de->d_name, "..") != 0)
      n++;
  closedir (d);
  return n;
}

static bool
exists (const char *path)
{
  struct stat st;
  return lstat (path, &st) == 0;
}

static json_t *
two_devices (void)
{
  return json_pack ("[{s:s, s:s, s:s, s:{s:{s:I}, s:{s:s}, s:{s:b}}, s:s}, {s:s, s:s, s:s}]", "driver", DRIVER, "pool",
                    "node-1", "name", "numa0", "attributes", "dra.cpu/numaNode", "int", (json_int_t) 0, "dra.cpu/model",
                    "string", "EPYC", "dra.cpu/smt", "bool", 1, "ignored", "not copied", "driver", DRIVER, "pool",
                    "node-1", "name", "numa1");
}

static void
write_ok (const char *ns, const char *name, const char *uid, const char *pod_claim, const char *request,
          const char *driver, char **ret_id)
{
  cleanup_json json_t *devs = two_devices ();
  nrm_error_t err = NULL;
  if (nrm_metadata_write (plugin_dir, cdi_dir, driver, ns, name, uid, pod_claim, request, devs, ret_id, &err) < 0)
    fail_msg ("write: %s", nrm_error_msg (err));
}

static void
check_spec (const char *cdi_file, const char *kind, const char *dev_name, const char *host, const char *container)
{
  cleanup_json json_t *spec = load (cdi_file);
  cleanup_json json_t *want = json_pack ("{s:s, s:s, s:[{s:s, s:{s:[{s:s, s:s, s:[s, s]}]}}]}", "cdiVersion", "0.5.0",
                                         "kind", kind, "devices", "name", dev_name, "containerEdits", "mounts",
                                         "hostPath", host, "containerPath", container, "options", "ro", "bind");
  if (!json_equal (spec, want))
    {
      cleanup_free char *got = json_dumps (spec, JSON_COMPACT), *exp = json_dumps (want, JSON_COMPACT);
      fail_msg ("CDI spec\n%s\nwanted\n%s", got, exp);
    }
  json_t *mount = json_array_get (
      json_object_get (json_object_get (json_array_get (json_object_get (spec, "devices"), 0), "containerEdits"),
                       "mounts"),
      0);
  assert_string_equal (json_string_value (json_object_get (mount, "containerPath")), container);
  assert_string_equal (json_string_value (json_array_get (json_object_get (mount, "options"), 0)), "ro");
  assert_string_equal (json_string_value (json_array_get (json_object_get (mount, "options"), 1)), "bind");
}

static json_t *
want_doc (const char *pod_claim, const char *request, json_int_t generation)
{
  json_t *devs
      = json_pack ("[{s:s, s:s, s:s, s:{s:{s:I}, s:{s:s}, s:{s:b}}}, {s:s, s:s, s:s}]", "driver", DRIVER, "pool",
                   "node-1", "name", "numa0", "attributes", "dra.cpu/numaNode", "int", (json_int_t) 0, "dra.cpu/model",
                   "string", "EPYC", "dra.cpu/smt", "bool", 1, "driver", DRIVER, "pool", "node-1", "name", "numa1");
  json_t *doc
      = json_pack ("{s:s, s:s, s:{s:s, s:s, s:s, s:I}, s:[{s:s, s:o}]}", "apiVersion",
                   "metadata.resource.k8s.io/v1alpha1", "kind", "DeviceMetadata", "metadata", "name", NAME, "namespace",
                   NS, "uid", UID, "generation", generation, "requests", "name", request, "devices", devs);
  if (pod_claim)
    json_object_set_new (doc, "podClaimName", json_string (pod_claim));
  return doc;
}

static void
check_doc (const char *host, const char *pod_claim, const char *request, json_int_t generation)
{
  cleanup_json json_t *doc = load (host);
  cleanup_json json_t *want = want_doc (pod_claim, request, generation);
  if (!json_equal (doc, want))
    {
      cleanup_free char *got = json_dumps (doc, JSON_COMPACT), *exp = json_dumps (want, JSON_COMPACT);
      fail_msg ("metadata\n%s\nwanted\n%s", got, exp);
    }
  assert_int_equal (json_integer_value (json_object_get (json_object_get (doc, "metadata"), "generation")), generation);
  assert_int_equal (json_object_get (doc, "podClaimName") != NULL, pod_claim != NULL);
  assert_int_equal (json_array_size (json_object_get (doc, "requests")), 1);
}

static void
check_mode (const char *path, mode_t mode)
{
  struct stat st;
  assert_int_equal (lstat (path, &st), 0);
  if ((st.st_mode & 07777) != mode)
    fail_msg ("`%s` has mode %o, wanted %o", path, (unsigned) (st.st_mode & 07777), (unsigned) mode);
}

static void
test_named_claim (void **state)
{
  (void) state;
  cleanup_free char *id = NULL;
  mode_t old = umask (077); /* the modes must not depend on it */
  write_ok (NS, NAME, UID, NULL, "cpus", DRIVER, &id);
  umask (old);
  assert_string_equal (id, DRIVER "/metadata=" UID "_cpus");

  cleanup_free char *host = path_of ("%s/dra-device-metadata/" NS "_" NAME "/cpus/metadata.json", plugin_dir);
  cleanup_free char *cdi = path_of ("%s/" DRIVER "_metadata_" UID "_cpus.json", cdi_dir);
  check_doc (host, NULL, "cpus", 1);
  check_spec (cdi, DRIVER "/metadata", UID "_cpus", host,
              "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/" NAME "/cpus/" DRIVER "-metadata.json");
  /* One pretty-printed object and its newline: nothing else in the stream. */
  cleanup_free char *text = slurp (host);
  assert_non_null (strstr (text, "\n  \"kind\": \"DeviceMetadata\""));
  json_error_t jerr;
  cleanup_json json_t *first = json_loads (text, JSON_DISABLE_EOF_CHECK, &jerr);
  assert_non_null (first);
  assert_string_equal (text + jerr.position, "\n");
  assert_int_equal (entries (cdi_dir), 1);

  check_mode (host, 0644);
  check_mode (cdi, 0644);
  cleanup_free char *d1 = path_of ("%s/dra-device-metadata", plugin_dir);
  cleanup_free char *d2 = path_of ("%s/dra-device-metadata/" NS "_" NAME, plugin_dir);
  cleanup_free char *d3 = path_of ("%s/dra-device-metadata/" NS "_" NAME "/cpus", plugin_dir);
  check_mode (d1, 0755);
  check_mode (d2, 0755);
  check_mode (d3, 0755);
}

static void
test_template_claim (void **state)
{
  (void) state;
  cleanup_free char *id = NULL;
  write_ok (NS, NAME, UID, "cpu-claim", "req/sub", DRIVER, &id);
  assert_string_equal (id, DRIVER "/metadata=" UID "_req");

  cleanup_free char *host = path_of ("%s/dra-device-metadata/" NS "_" NAME "/req/metadata.json", plugin_dir);
  cleanup_free char *cdi = path_of ("%s/" DRIVER "_metadata_" UID "_req.json", cdi_dir);
  /* The base request in paths, the full reference in the file. */
  check_doc (host, "cpu-claim", "req/sub", 1);
  check_spec (cdi, DRIVER "/metadata", UID "_req", host,
              "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/cpu-claim/req/" DRIVER
              "-metadata.json");
  /* No CDI id wanted: fine. */
  write_ok (NS, NAME, UID, "cpu-claim", "other", DRIVER, NULL);
  assert_int_equal (entries (cdi_dir), 2);
}

static void
test_generation (void **state)
{
  (void) state;
  cleanup_free char *host = path_of ("%s/dra-device-metadata/" NS "_" NAME "/cpus/metadata.json", plugin_dir);
  write_ok (NS, NAME, UID, NULL, "cpus", DRIVER, NULL);
  check_doc (host, NULL, "cpus", 1);
  write_ok (NS, NAME, UID, NULL, "cpus", DRIVER, NULL);
  check_doc (host, NULL, "cpus", 2);
  write_ok (NS, NAME, UID, NULL, "cpus", DRIVER, NULL);
  check_doc (host, NULL, "cpus", 3);

  /* Another request has its own generation. */
  cleanup_free char *other = path_of ("%s/dra-device-metadata/" NS "_" NAME "/mem/metadata.json", plugin_dir);
  write_ok (NS, NAME, UID, NULL, "mem/a", DRIVER, NULL);
  check_doc (other, NULL, "mem/a", 1);

  /* A corrupt file starts over. */
  nrm_error_t err = NULL;
  assert_int_equal (nrm_write_atomic (host, "{\"metadata\": {", 14, 0644, &err), 0);
  write_ok (NS, NAME, UID, NULL, "cpus", DRIVER, NULL);
  check_doc (host, NULL, "cpus", 1);

  /* So does a claim of the same name with another uid. */
  write_ok (NS, NAME, "0f1e2d3c-aaaa-bbbb-cccc-000000000002", NULL, "cpus", DRIVER, NULL);
  cleanup_json json_t *doc = load (host);
  assert_int_equal (json_integer_value (json_object_get (json_object_get (doc, "metadata"), "generation")), 1);
}

static void
refused (const char *field, const char *needle, const char *ns, const char *name, const char *uid,
         const char *pod_claim, const char *request, const char *driver, json_t *devs)
{
  nrm_error_t err = NULL;
  char *id = NULL;
  cleanup_json json_t *good = two_devices ();
  int rc = nrm_metadata_write (plugin_dir, cdi_dir, driver, ns, name, uid, pod_claim, request, devs ? devs : good, &id,
                               &err);
  if (rc != -1)
    fail_msg ("%s: accepted", field);
  assert_null (id);
  if (strstr (nrm_error_msg (err), field) == NULL || (needle && strstr (nrm_error_msg (err), needle) == NULL))
    fail_msg ("error `%s` should name `%s` and say `%s`", nrm_error_msg (err), field, needle ? needle : "");
  nrm_error_release (&err);
  /* Nothing written: not even a directory. */
  assert_int_equal (entries (plugin_dir), 0);
  assert_int_equal (entries (cdi_dir), 0);
}

static void
test_invalid (void **state)
{
  (void) state;
  char long_uid[200];
  memset (long_uid, 'a', 129);
  long_uid[129] = '\0';
  char long_name[300];
  memset (long_name, 'n', 253);
  long_name[253] = '\0';

  refused ("claim uid", "`a/b`", NS, NAME, "a/b", NULL, "cpus", DRIVER, NULL);
  refused ("claim uid", "`..`", NS, NAME, "..", NULL, "cpus", DRIVER, NULL);
  refused ("claim uid", "`0F1E`", NS, NAME, "0F1E", NULL, "cpus", DRIVER, NULL);
  refused ("claim uid", NULL, NS, NAME, "", NULL, "cpus", DRIVER, NULL);
  refused ("claim uid", "aaaa...`", NS, NAME, long_uid, NULL, "cpus", DRIVER, NULL);
  refused ("claim uid", "`a?b`", NS, NAME, "a\nb", NULL, "cpus", DRIVER, NULL);
  refused ("namespace", "`../x`", "../x", NAME, UID, NULL, "cpus", DRIVER, NULL);
  refused ("namespace", NULL, "a.b", NAME, UID, NULL, "cpus", DRIVER, NULL);
  refused ("namespace", "missing", NULL, NAME, UID, NULL, "cpus", DRIVER, NULL);
  refused ("claim name", "``", NS, "", UID, NULL, "cpus", DRIVER, NULL);
  refused ("claim name", NULL, NS, "a/b", UID, NULL, "cpus", DRIVER, NULL);
  refused ("claim name", NULL, NS, "..", UID, NULL, "cpus", DRIVER, NULL);
  refused ("claim name", "too long", NS, long_name, UID, NULL, "cpus", DRIVER, NULL);
  refused ("request", "`a/b/c`", NS, NAME, UID, NULL, "a/b/c", DRIVER, NULL);
  refused ("request", NULL, NS, NAME, UID, NULL, "../x", DRIVER, NULL);
  refused ("request", NULL, NS, NAME, UID, NULL, "req/", DRIVER, NULL);
  refused ("request", NULL, NS, NAME, UID, NULL, "/sub", DRIVER, NULL);
  refused ("request", NULL, NS, NAME, UID, NULL, "", DRIVER, NULL);
  refused ("request", "missing", NS, NAME, UID, NULL, NULL, DRIVER, NULL);
  refused ("pod claim name", NULL, NS, NAME, UID, "a/b", "cpus", DRIVER, NULL);
  refused ("pod claim name", NULL, NS, NAME, UID, "..", "cpus", DRIVER, NULL);
  refused ("driver", NULL, NS, NAME, UID, NULL, "cpus", "../driver", NULL);
  refused ("driver", NULL, NS, NAME, UID, NULL, "cpus", "Bad_Driver", NULL);

  cleanup_json json_t *not_array = json_object ();
  cleanup_json json_t *empty = json_array ();
  cleanup_json json_t *no_pool = json_pack ("[{s:s, s:s}]", "driver", DRIVER, "name", "numa0");
  cleanup_json json_t *bad_attrs
      = json_pack ("[{s:s, s:s, s:s, s:i}]", "driver", DRIVER, "pool", "p", "name", "n", "attributes", 1);
  refused ("request `cpus`", "non-empty array", NS, NAME, UID, NULL, "cpus", DRIVER, not_array);
  refused ("request `cpus`", "non-empty array", NS, NAME, UID, NULL, "cpus", DRIVER, empty);
  refused ("request `cpus`", "device 0", NS, NAME, UID, NULL, "cpus", DRIVER, no_pool);
  refused ("request `cpus`", "attributes", NS, NAME, UID, NULL, "cpus", DRIVER, bad_attrs);

  /* remove checks the same names before it touches anything. */
  nrm_error_t err = NULL;
  assert_int_equal (nrm_metadata_remove (plugin_dir, cdi_dir, DRIVER, "../x", NAME, UID, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "namespace"));
  nrm_error_release (&err);
  assert_int_equal (nrm_metadata_remove (plugin_dir, cdi_dir, DRIVER, NS, NAME, "*", &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "claim uid"));
  nrm_error_release (&err);
}

static void
test_remove (void **state)
{
  (void) state;
  const char *uid2 = UID "-2"; /* our uid is a prefix of it */
  write_ok (NS, NAME, UID, NULL, "cpus", DRIVER, NULL);
  write_ok (NS, NAME, UID, NULL, "mem/sub", DRIVER, NULL);
  write_ok (NS, "other-claim", uid2, NULL, "cpus", DRIVER, NULL);
  /* Another driver, with its own plugin data directory, for the same claim. */
  cleanup_free char *mem_dir = path_of ("%s/plugins/memory.nrm.example.com", root);
  cleanup_json json_t *devs = two_devices ();
  nrm_error_t err = NULL;
  assert_int_equal (
      nrm_metadata_write (mem_dir, cdi_dir, "memory.nrm.example.com", NS, NAME, UID, NULL, "cpus", devs, NULL, &err),
      0);
  cleanup_free char *stale = path_of ("%s/" DRIVER "_metadata_" UID "_cpus.json.tmp.1234", cdi_dir);
  cleanup_free char *unrelated = path_of ("%s/" DRIVER "-" UID ".json", cdi_dir);
  fake_put (cdi_dir, DRIVER "_metadata_" UID "_cpus.json.tmp.1234", "keep\n");
  fake_put (cdi_dir, DRIVER "-" UID ".json", "keep\n");
  assert_int_equal (entries (cdi_dir), 6);

  /* Links inside the tree, to a file and to a directory outside it. */
  cleanup_free char *outside = path_of ("%s/outside", root);
  cleanup_free char *outside_file = path_of ("%s/outside/precious", root);
  assert_int_equal (mkdir (outside, 0755), 0);
  fake_put (root, "outside/precious", "keep\n");
  cleanup_free char *link1 = path_of ("%s/dra-device-metadata/" NS "_" NAME "/cpus/evil", plugin_dir);
  cleanup_free char *link2 = path_of ("%s/dra-device-metadata/" NS "_" NAME "/evil-dir", plugin_dir);
  assert_int_equal (symlink (outside_file, link1), 0);
  assert_int_equal (symlink (outside, link2), 0);

  if (nrm_metadata_remove (plugin_dir, cdi_dir, DRIVER, NS, NAME, UID, &err) < 0)
    fail_msg ("remove: %s", nrm_error_msg (err));

  cleanup_free char *mine = path_of ("%s/dra-device-metadata/" NS "_" NAME, plugin_dir);
  cleanup_free char *theirs = path_of ("%s/dra-device-metadata/" NS "_other-claim/cpus/metadata.json", plugin_dir);
  cleanup_free char *theirs_cdi = path_of ("%s/" DRIVER "_metadata_%s_cpus.json", cdi_dir, uid2);
  cleanup_free char *other_driver = path_of ("%s/memory.nrm.example.com_metadata_" UID "_cpus.json", cdi_dir);
  assert_false (exists (mine));
  assert_false (exists (stale));
  assert_true (exists (theirs));
  assert_true (exists (theirs_cdi));
  assert_true (exists (other_driver));
  cleanup_free char *other_host = path_of ("%s/dra-device-metadata/" NS "_" NAME "/cpus/metadata.json", mem_dir);
  assert_true (exists (other_host));
  assert_true (exists (unrelated));
  assert_int_equal (entries (cdi_dir), 3);
  assert_true (exists (outside_file));
  cleanup_free char *kept = slurp (outside_file);
  assert_string_equal (kept, "keep\n");
  assert_int_equal (entries (outside), 1);

  /* Again, and with nothing there at all. */
  assert_int_equal (nrm_metadata_remove (plugin_dir, cdi_dir, DRIVER, NS, NAME, UID, &err), 0);
  cleanup_free char *nowhere = path_of ("%s/missing", root);
  assert_int_equal (nrm_metadata_remove (nowhere, nowhere, DRIVER, NS, NAME, UID, &err), 0);
  assert_null (err);
}

/* A claim directory that is a link elsewhere: write refuses to go through
 * it, remove drops the link and leaves its target alone. */
static void
test_linked_claim_dir (void **state)
{
  (void) state;
  cleanup_free char *outside = path_of ("%s/outside", root);
  cleanup_free char *outside_file = path_of ("%s/outside/precious", root);
  cleanup_free char *top = path_of ("%s/dra-device-metadata", plugin_dir);
  cleanup_free char *link = path_of ("%s/dra-device-metadata/" NS "_" NAME, plugin_dir);
  assert_int_equal (mkdir (outside, 0755), 0);
  fake_put (root, "outside/precious", "keep\n");
  assert_int_equal (mkdir (top, 0755), 0);
  assert_int_equal (symlink (outside, link), 0);

  nrm_error_t err = NULL;
  cleanup_json json_t *devs = two_devices ();
  assert_int_equal (nrm_metadata_write (plugin_dir, cdi_dir, DRIVER, NS, NAME, UID, NULL, "cpus", devs, NULL, &err),
                    -1);
  assert_non_null (strstr (nrm_error_msg (err), "not a directory"));
  nrm_error_release (&err);
  assert_int_equal (entries (outside), 1);

  assert_int_equal (nrm_metadata_remove (plugin_dir, cdi_dir, DRIVER, NS, NAME, UID, &err), 0);
  assert_false (exists (link));
  assert_true (exists (outside_file));
}

static void
test_pod_claim_name (void **state)
{
  (void) state;
  cleanup_json json_t *generated
      = json_pack ("{s:{s:s, s:{s:s, s:s}}}", "metadata", "name", "pod-x-cpu-abcde", "annotations",
                   "resource.kubernetes.io/pod-claim-name", "cpu", "other", "value");
  cleanup_json json_t *named = json_pack ("{s:{s:s, s:{s:s}}}", "metadata", "name", NAME, "annotations", "a", "b");
  cleanup_json json_t *bare = json_pack ("{s:{s:s}}", "metadata", "name", NAME);
  cleanup_json json_t *odd
      = json_pack ("{s:{s:{s:i}}}", "metadata", "annotations", "resource.kubernetes.io/pod-claim-name", 1);
  assert_string_equal (nrm_metadata_pod_claim_name (generated), "cpu");
  assert_null (nrm_metadata_pod_claim_name (named));
  assert_null (nrm_metadata_pod_claim_name (bare));
  assert_null (nrm_metadata_pod_claim_name (odd));
  assert_null (nrm_metadata_pod_claim_name (NULL));
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown (test_named_claim, setup, teardown),
    cmocka_unit_test_setup_teardown (test_template_claim, setup, teardown),
    cmocka_unit_test_setup_teardown (test_generation, setup, teardown),
    cmocka_unit_test_setup_teardown (test_invalid, setup, teardown),
    cmocka_unit_test_setup_teardown (test_remove, setup, teardown),
    cmocka_unit_test_setup_teardown (test_linked_claim_dir, setup, teardown),
    cmocka_unit_test (test_pod_claim_name),
  };
  return cmocka_run_group_tests_name ("metadata", tests, NULL, NULL);
}
