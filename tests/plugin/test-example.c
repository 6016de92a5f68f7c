/* SPDX-License-Identifier: Apache-2.0 */
/* A driver that is one folder: the example driver (driver/example), built
 * as its own shared object, loaded by `nrm plugin --driver-dir` and called
 * over its sockets exactly as the kubelet calls it; nrm slices and status
 * with it; a shared object of another driver ABI and an unknown id refused. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "driver/driver.h"
#include "proto/dra_health_v1alpha1.pb-c.h"
#include "proto/dra_v1.pb-c.h"
#include "proto/pluginregistration.pb-c.h"
#include "tests/plugin/kubelet.h"

#define DRIVER "example.nrm.io"
#define NODE "node-1"
#define PREPARE "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
#define UNPREPARE "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources"
#define UID_TWO "00000000-0000-4000-8000-00000000e001"
#define UID_BUSY "00000000-0000-4000-8000-00000000e002"
#define UID_FREE "00000000-0000-4000-8000-00000000e003"
#define UID_UNKNOWN "00000000-0000-4000-8000-00000000e004"

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim Claim;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse PrepareResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse PrepareClaimResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse UnprepareResponse;

static char root[256], kubelet_dir[300], cdi_dir[300], state_dir[300], claims_dir[300], fsroot[300], log_path[300];
static char bad_dir[300], sock[512], reg[512], topo[4096];
static const char *driver_dir;
static pid_t plugin_pid = -1;
static grpc_channel *ch;

/* --- processes ------------------------------------------------------------------ */

static pid_t
spawn (const char *const *args, const char *out, const char *err)
{
  pid_t pid = fork ();
  if (pid == 0)
    {
      int o = open (out, O_WRONLY | O_CREAT | O_APPEND, 0600), e = open (err, O_WRONLY | O_CREAT | O_APPEND, 0600);
      dup2 (o, 1);
      dup2 (e, 2);
      execv (args[0], (char *const *) args);
      _exit (127);
    }
  return pid;
}

/* Runs `nrm ARGS...` to the end: its exit status; stdout and stderr (the
 * caller frees them). */
static int
run_nrm (char **out, char **err, ...)
{
  const char *args[32] = { getenv ("NRM") };
  char o[400], e[400];
  va_list ap;
  int n = 1;
  va_start (ap, err);
  for (const char *a; n < 31 && (a = va_arg (ap, const char *)) != NULL;)
    args[n++] = a;
  va_end (ap);
  args[n] = NULL;
  snprintf (o, sizeof (o), "%s/run.out", root);
  snprintf (e, sizeof (e), "%s/run.err", root);
  unlink (o);
  unlink (e);
  int rc = kc_wait_exit (spawn (args, o, e), 30000);
  *out = kc_slurp (o);
  *err = kc_slurp (e);
  assert_non_null (*out);
  assert_non_null (*err);
  return rc;
}

static pid_t
spawn_plugin (const char *dir)
{
  const char *args[] = { getenv ("NRM"),
                         "plugin",
                         "--drivers",
                         "example",
                         "--driver-dir",
                         dir,
                         "--topology",
                         topo,
                         "--node-name",
                         NODE,
                         "--kubelet-dir",
                         kubelet_dir,
                         "--cdi-dir",
                         cdi_dir,
                         "--state-dir",
                         state_dir,
                         "--claims-dir",
                         claims_dir,
                         "--fsroot",
                         fsroot,
                         "--allow-no-cpuset", /* the tree is sysfs only */
                         "--log-level",
                         "debug",
                         "--reconcile-interval",
                         "0",
                         NULL };
  return spawn (args, log_path, log_path);
}

static void
start_plugin (void)
{
  plugin_pid = spawn_plugin (driver_dir);
  int i;
  for (i = 0; i < 150 && !kc_answers (reg); i++)
    usleep (100000);
  if (i == 150)
    {
      char *log = kc_slurp (log_path);
      fail_msg ("nrm plugin with the example driver does not answer at %s: %s", reg, log ? log : "");
    }
  ch = kc_connect (sock);
}

static void
stop_plugin (void)
{
  kc_close (ch);
  ch = NULL;
  kill (plugin_pid, SIGTERM);
  assert_int_equal (kc_wait_exit (plugin_pid, 15000), 0);
  plugin_pid = -1;
}

/* --- claims ------------------------------------------------------------------------ */

/* A ResourceClaim file with one whole example device per name. */
static void
claim_devices (const char *name, const char *uid, const char *const *devices, size_t n)
{
  char path[600], results[2048] = "";
  for (size_t i = 0; i < n; i++)
    snprintf (results + strlen (results), sizeof (results) - strlen (results),
              "%s{\"request\":\"dev\",\"driver\":\"" DRIVER "\",\"pool\":\"" NODE "\",\"device\":\"%s\"}", i ? "," : "",
              devices[i]);
  snprintf (path, sizeof (path), "%s/%s.json", claims_dir, name);
  FILE *f = fopen (path, "w");
  assert_non_null (f);
  fprintf (f,
           "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"name\":\"%s\","
           "\"namespace\":\"default\",\"uid\":\"%s\"},\"spec\":{},\"status\":{\"allocation\":{\"devices\":{"
           "\"results\":[%s]}}}}",
           name, uid, results);
  fclose (f);
}

/* Prepares one claim; returns its error ("" on success, malloc'd) and, when
 * it succeeded, checks its devices. */
static char *
prepare_one (const char *name, const char *uid, const char *const *want, size_t n_want)
{
  size_t len;
  uint8_t *buf = kc_pack_claims ("default", &name, &uid, 1, false, &len);
  struct kc_reply r;
  assert_int_equal (kc_unary (ch, PREPARE, buf, len, 10000, &r), 0);
  free (buf);
  if (r.status != GRPC_STATUS_OK)
    fail_msg ("prepare: status %d: %s", r.status, r.details);
  PrepareResponse *resp
      = k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__unpack (NULL, r.len, r.data);
  assert_non_null (resp);
  assert_int_equal (resp->n_claims, 1);
  assert_string_equal (resp->claims[0]->key, uid);
  PrepareClaimResponse *e = resp->claims[0]->value;
  char *error = strdup (e->error);
  if (error[0] == '\0')
    {
      char id[200];
      snprintf (id, sizeof (id), DRIVER "/claim=%s", uid);
      assert_int_equal (e->n_devices, n_want);
      for (size_t i = 0; i < n_want; i++)
        {
          assert_string_equal (e->devices[i]->pool_name, NODE);
          assert_string_equal (e->devices[i]->device_name, want[i]);
          assert_int_equal (e->devices[i]->n_cdi_device_ids, 1);
          assert_string_equal (e->devices[i]->cdi_device_ids[0], id);
        }
    }
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  kc_reply_done (&r);
  return error;
}

static void
expect_prepared (const char *name, const char *uid, const char *const *devices, size_t n)
{
  char *error = prepare_one (name, uid, devices, n);
  if (error[0])
    fail_msg ("claim %s: %s", name, error);
  free (error);
}

static void
expect_refused (const char *name, const char *uid, const char *needle)
{
  char *error = prepare_one (name, uid, NULL, 0);
  if (strstr (error, needle) == NULL)
    fail_msg ("claim %s: error `%s` lacks `%s`", name, error, needle);
  free (error);
}

static void
unprepare_one (const char *uid)
{
  const char *name = "x";
  size_t len;
  uint8_t *buf = kc_pack_claims ("default", &name, &uid, 1, true, &len);
  struct kc_reply r;
  assert_int_equal (kc_unary (ch, UNPREPARE, buf, len, 10000, &r), 0);
  free (buf);
  assert_int_equal (r.status, GRPC_STATUS_OK);
  UnprepareResponse *resp
      = k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__unpack (NULL, r.len, r.data);
  assert_non_null (resp);
  assert_int_equal (resp->n_claims, 1);
  assert_string_equal (resp->claims[0]->value->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__free_unpacked (resp, NULL);
  kc_reply_done (&r);
}

static char *
spec_path (const char *uid)
{
  char *p = NULL;
  assert_true (asprintf (&p, "%s/" DRIVER "-%s.json", cdi_dir, uid) >= 0);
  return p;
}

/* The containerEdits a claim of dev0 and dev1 gets, exactly: the driver's
 * edits and nothing of the framework (the example asks for no commit hook). */
static void
check_spec_two (void)
{
  char *path = spec_path (UID_TWO);
  json_error_t je;
  json_t *spec = json_load_file (path, 0, &je);
  if (spec == NULL)
    fail_msg ("no CDI spec %s: %s", path, je.text);
  assert_string_equal (json_string_value (json_object_get (spec, "cdiVersion")), "0.5.0");
  assert_string_equal (json_string_value (json_object_get (spec, "kind")), DRIVER "/claim");
  json_t *devices = json_object_get (spec, "devices");
  assert_int_equal (json_array_size (devices), 1);
  assert_string_equal (json_string_value (json_object_get (json_array_get (devices, 0), "name")), UID_TWO);
  json_t *edits = json_object_get (json_array_get (devices, 0), "containerEdits");
  json_t *want = json_loads ("{\"env\": [\"EXAMPLE_DEVICES=dev0,dev1\"],"
                             " \"deviceNodes\": [{\"path\": \"/dev/example/dev0\", \"hostPath\": \"/dev/null\"},"
                             "                   {\"path\": \"/dev/example/dev1\", \"hostPath\": \"/dev/null\"}],"
                             " \"mounts\": [{\"hostPath\": \"/dev/null\", \"containerPath\": \"/run/example/dev0\","
                             "               \"options\": [\"ro\", \"bind\"]},"
                             "              {\"hostPath\": \"/dev/null\", \"containerPath\": \"/run/example/dev1\","
                             "               \"options\": [\"ro\", \"bind\"]}]}",
                             0, &je);
  assert_non_null (want);
  if (!json_equal (edits, want))
    {
      char *got = json_dumps (edits, JSON_INDENT (2));
      fail_msg ("containerEdits of %s:\n%s", path, got);
    }
  /* Above all, no nrm-hook: it binds CPUs and memory, nothing of this driver. */
  assert_null (json_object_get (edits, "hooks"));
  json_decref (want);
  json_decref (spec);
  free (path);
}

/* --- tests ---------------------------------------------------------------------- */

/* The kubelet finds the driver under its own name, with its own sockets. */
static void
test_registration (void **state)
{
  (void) state;
  Pluginregistration__PluginInfo *info = kc_get_info (reg, 5000);
  assert_non_null (info);
  assert_string_equal (info->type, "DRAPlugin");
  assert_string_equal (info->name, DRIVER);
  assert_string_equal (info->endpoint, sock);
  pluginregistration__plugin_info__free_unpacked (info, NULL);
  /* --drivers example: the built-in drivers are not served. */
  char cpu[600];
  snprintf (cpu, sizeof (cpu), "%s/plugins_registry/cpu.nrm.io-reg.sock", kubelet_dir);
  assert_false (access (cpu, F_OK) == 0);
}

/* Two devices for one claim: exactly the driver's edits in the CDI spec;
 * a held device, an unknown one and a claim twice over refused. */
static void
test_prepare (void **state)
{
  (void) state;
  const char *two[] = { "dev0", "dev1" }, *busy[] = { "dev2", "dev1" }, *free_[] = { "dev2" }, *unknown[] = { "dev9" };
  claim_devices ("two", UID_TWO, two, 2);
  expect_prepared ("two", UID_TWO, two, 2);
  check_spec_two ();
  /* Again: the same answer. */
  expect_prepared ("two", UID_TWO, two, 2);

  /* dev1 is held: refused, naming it, and dev2 is not taken meanwhile. */
  claim_devices ("busy", UID_BUSY, busy, 2);
  expect_refused ("busy", UID_BUSY, "device dev1 is held by claim " UID_TWO);
  char *p = spec_path (UID_BUSY);
  assert_false (access (p, F_OK) == 0);
  free (p);
  claim_devices ("free", UID_FREE, free_, 1);
  expect_prepared ("free", UID_FREE, free_, 1);
  unprepare_one (UID_FREE);

  claim_devices ("unknown", UID_UNKNOWN, unknown, 1);
  expect_refused ("unknown", UID_UNKNOWN, "unknown device `dev9`");
}

/* A restart restores the held devices from the checkpoint; unprepare gives
 * them back and removes the spec. */
static void
test_restart (void **state)
{
  (void) state;
  const char *busy[] = { "dev2", "dev1" };
  stop_plugin ();
  start_plugin ();
  check_spec_two ();
  expect_refused ("busy", UID_BUSY, "device dev1 is held by claim " UID_TWO);

  /* nrm status reads the checkpoint through the driver: two of four held. */
  char *out, *err;
  int rc = run_nrm (&out, &err, "status", "--json", "--drivers", "example", "--driver-dir", driver_dir, "--topology",
                    topo, "--node-name", NODE, "--state-dir", state_dir, NULL);
  if (rc != 0)
    fail_msg ("nrm status: exit %d: %s", rc, err);
  json_t *doc = json_loads (out, 0, NULL);
  assert_non_null (doc);
  json_t *pool = json_array_get (json_object_get (doc, "pools"), 0);
  assert_int_equal (json_array_size (json_object_get (doc, "pools")), 1);
  assert_string_equal (json_string_value (json_object_get (pool, "driver")), DRIVER);
  assert_int_equal (json_integer_value (json_object_get (pool, "totalDevices")), 4);
  assert_int_equal (json_integer_value (json_object_get (pool, "allocatedDevices")), 2);
  json_decref (doc);
  free (out);
  free (err);

  char *p = spec_path (UID_TWO);
  unprepare_one (UID_TWO);
  assert_false (access (p, F_OK) == 0);
  free (p);
  expect_prepared ("busy", UID_BUSY, busy, 2);
  unprepare_one (UID_BUSY);
}

/* A device listed in <fsroot>/example-unhealthy is reported unhealthy, with
 * the reason, on the kubelet's health stream; the others healthy. */
static void
test_health (void **state)
{
  (void) state;
  char path[400];
  snprintf (path, sizeof (path), "%s/example-unhealthy", fsroot);
  FILE *f = fopen (path, "w");
  assert_non_null (f);
  fputs ("dev3\n", f);
  fclose (f);

  V1alpha1__NodeWatchResourcesRequest in = V1ALPHA1__NODE_WATCH_RESOURCES_REQUEST__INIT;
  uint8_t buf[8], *data = NULL;
  size_t len = protobuf_c_message_pack (&in.base, buf), dlen = 0;
  struct kc_stream *s = kc_stream_open (ch, "/v1alpha1.DRAResourceHealth/NodeWatchResources", buf, len, 60000);
  assert_int_equal (kc_stream_read (s, 5000, &data, &dlen), 1);
  V1alpha1__NodeWatchResourcesResponse *r = v1alpha1__node_watch_resources_response__unpack (NULL, dlen, data);
  free (data);
  assert_non_null (r);
  assert_int_equal (r->n_devices, 4);
  for (size_t i = 0; i < r->n_devices; i++)
    {
      assert_string_equal (r->devices[i]->device->pool_name, NODE);
      if (strcmp (r->devices[i]->device->device_name, "dev3") == 0)
        {
          assert_int_equal (r->devices[i]->health, V1ALPHA1__HEALTH_STATUS__UNHEALTHY);
          assert_non_null (strstr (r->devices[i]->message, "example-unhealthy"));
        }
      else
        assert_int_equal (r->devices[i]->health, V1ALPHA1__HEALTH_STATUS__HEALTHY);
    }
  v1alpha1__node_watch_resources_response__free_unpacked (r, NULL);
  /* The driver's health_fd (inotify on the file's folder) wakes the stream
   * at once: a report with every device healthy comes well before the 10 s
   * period (reports the file's own writing woke may come first). */
  unlink (path);
  struct timespec t0, t1;
  clock_gettime (CLOCK_MONOTONIC, &t0);
  bool healthy = false;
  long ms = 0;
  while (!healthy && ms < 3000 && kc_stream_read (s, (int) (3000 - ms), &data, &dlen) == 1)
    {
      r = v1alpha1__node_watch_resources_response__unpack (NULL, dlen, data);
      free (data);
      assert_non_null (r);
      healthy = r->n_devices == 4;
      for (size_t i = 0; i < r->n_devices; i++)
        healthy &= r->devices[i]->health == V1ALPHA1__HEALTH_STATUS__HEALTHY;
      v1alpha1__node_watch_resources_response__free_unpacked (r, NULL);
      clock_gettime (CLOCK_MONOTONIC, &t1);
      ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    }
  clock_gettime (CLOCK_MONOTONIC, &t1);
  ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
  if (!healthy)
    fail_msg ("no report with dev3 healthy again within 3 s of removing the file (waited %ld ms)", ms);
  kc_stream_close (s);
}

/* nrm slices publishes the example's pool: four devices over both NUMA nodes. */
static void
test_slices (void **state)
{
  (void) state;
  char *out, *err;
  int rc = run_nrm (&out, &err, "slices", "--drivers", "example", "--driver-dir", driver_dir, "--topology", topo,
                    "--node-name", NODE, NULL);
  if (rc != 0)
    fail_msg ("nrm slices: exit %d: %s", rc, err);
  json_t *list = json_loads (out, 0, NULL);
  assert_non_null (list);
  json_t *items = json_object_get (list, "items");
  assert_int_equal (json_array_size (items), 1);
  json_t *spec = json_object_get (json_array_get (items, 0), "spec");
  assert_string_equal (json_string_value (json_object_get (spec, "driver")), DRIVER);
  assert_string_equal (json_string_value (json_object_get (spec, "nodeName")), NODE);
  json_t *devices = json_object_get (spec, "devices");
  assert_int_equal (json_array_size (devices), 4);
  for (size_t i = 0; i < 4; i++)
    {
      json_t *d = json_array_get (devices, i), *attrs = json_object_get (d, "attributes");
      char name[8];
      snprintf (name, sizeof (name), "dev%zu", i);
      assert_string_equal (json_string_value (json_object_get (d, "name")), name);
      /* Round robin over the two nodes of this machine. */
      assert_int_equal (
          json_integer_value (json_object_get (json_object_get (attrs, "resource.kubernetes.io/numaNode"), "int")),
          (json_int_t) (i % 2));
      assert_string_equal (json_string_value (json_object_get (json_object_get (attrs, "model"), "string")),
                           "nrm-example-1");
      assert_null (json_object_get (d, "capacity"));
    }
  json_decref (list);
  free (out);
  free (err);

  /* Beside the built-in drivers when --drivers is not given. */
  rc = run_nrm (&out, &err, "slices", "--driver-dir", driver_dir, "--topology", topo, NULL);
  assert_int_equal (rc, 0);
  assert_non_null (strstr (out, "\"driver\": \"cpu.nrm.io\""));
  assert_non_null (strstr (out, "\"driver\": \"" DRIVER "\""));
  free (out);
  free (err);
}

/* A shared object built for another driver ABI is refused before any of it
 * runs, naming the file and both versions; so are drivers others could have
 * written, and an unknown driver id. */
static void
test_refusals (void **state)
{
  (void) state;
  char *out, *err, so[400], abi[200];
  snprintf (so, sizeof (so), "%s/nrm-driver-mismatch.so", bad_dir);
  snprintf (abi, sizeof (abi), "built for driver ABI %u; this nrm has ABI %u", NRM_DRIVER_ABI + 1, NRM_DRIVER_ABI);
  int rc = run_nrm (&out, &err, "slices", "--driver-dir", bad_dir, "--topology", topo, NULL);
  assert_int_not_equal (rc, 0);
  assert_string_equal (out, "");
  if (strstr (err, so) == NULL || strstr (err, abi) == NULL)
    fail_msg ("nrm slices with %s: `%s` lacks the file or `%s`", so, err, abi);
  free (out);
  free (err);

  /* nrm plugin does not start with it either. */
  assert_int_not_equal (kc_wait_exit (spawn_plugin (bad_dir), 15000), 0);
  char *log = kc_slurp (log_path);
  assert_non_null (strstr (log, abi));
  free (log);

  /* A driver or a folder that others may write, or a link, is never loaded. */
  char dir[400], cmd[3][2400];
  snprintf (dir, sizeof (dir), "%s/loose", root);
  snprintf (cmd[0], sizeof (cmd[0]), "mkdir -p %s && cp %s/nrm-driver-example.so %s/x.so && chmod 0666 %s/x.so", dir,
            driver_dir, dir, dir);
  snprintf (cmd[1], sizeof (cmd[1]), "chmod 0755 %s/x.so && chmod 0777 %s", dir, dir);
  snprintf (cmd[2], sizeof (cmd[2]), "chmod 0755 %s && mv %s/x.so %s/real && ln -s real %s/x.so", dir, dir, dir, dir);
  const char *want[] = { "is writable by others (mode 0666)", "driver directory", "Too many levels of symbolic links" };
  for (size_t i = 0; i < 3; i++)
    {
      assert_int_equal (system (cmd[i]), 0);
      rc = run_nrm (&out, &err, "slices", "--driver-dir", dir, "--topology", topo, NULL);
      assert_int_not_equal (rc, 0);
      assert_string_equal (out, "");
      if (strstr (err, want[i]) == NULL || strstr (err, dir) == NULL)
        fail_msg ("a loose driver (%s): `%s` lacks `%s`", cmd[i], err, want[i]);
      free (out);
      free (err);
    }

  rc = run_nrm (&out, &err, "slices", "--drivers", "nosuch", "--driver-dir", driver_dir, "--topology", topo, NULL);
  assert_int_not_equal (rc, 0);
  assert_string_equal (out, "");
  if (strstr (err, "unknown driver `nosuch` (known: cpu, memory, pci, example)") == NULL)
    fail_msg ("--drivers nosuch: `%s`", err);
  free (out);
  free (err);
}

static int
setup (void **state)
{
  (void) state;
  const char *mismatch = getenv ("NRM_MISMATCH_DRIVER");
  driver_dir = getenv ("NRM_EXAMPLE_DRIVER_DIR");
  if (getenv ("NRM") == NULL || getenv ("NRM_TOPOLOGIES") == NULL || driver_dir == NULL || mismatch == NULL)
    {
      fprintf (stderr, "SKIP: run through make check\n");
      exit (77);
    }
  snprintf (topo, sizeof (topo), "%s/24em64t-2n6c2t-pci.xml", getenv ("NRM_TOPOLOGIES"));
  snprintf (root, sizeof (root), "/tmp/nrm-example-XXXXXX");
  assert_non_null (mkdtemp (root));
  snprintf (kubelet_dir, sizeof (kubelet_dir), "%s/kubelet", root);
  snprintf (cdi_dir, sizeof (cdi_dir), "%s/cdi", root);
  snprintf (state_dir, sizeof (state_dir), "%s/state", root);
  mkdir (state_dir, 0700);
  snprintf (claims_dir, sizeof (claims_dir), "%s/claims", root);
  snprintf (fsroot, sizeof (fsroot), "%s/fsroot", root);
  snprintf (bad_dir, sizeof (bad_dir), "%s/bad-drivers", root);
  snprintf (log_path, sizeof (log_path), "%s/plugin.log", root);
  assert_int_equal (mkdir (claims_dir, 0700), 0);
  assert_int_equal (mkdir (fsroot, 0700), 0);
  assert_int_equal (mkdir (bad_dir, 0700), 0);
  /* A copy: drivers are loaded from regular files only, never links. */
  char copy[1200];
  snprintf (copy, sizeof (copy), "cp %s %s/nrm-driver-mismatch.so", mismatch, bad_dir);
  assert_int_equal (system (copy), 0);
  snprintf (sock, sizeof (sock), "%s/plugins/" DRIVER "/dra.sock", kubelet_dir);
  snprintf (reg, sizeof (reg), "%s/plugins_registry/" DRIVER "-reg.sock", kubelet_dir);
  grpc_init ();
  start_plugin ();
  return 0;
}

static int
teardown (void **state)
{
  (void) state;
  if (plugin_pid > 0)
    stop_plugin ();
  grpc_shutdown ();
  if (getenv ("NRM_KEEP_TMP") == NULL)
    {
      char cmd[400];
      snprintf (cmd, sizeof (cmd), "rm -rf '%s'", root);
      if (system (cmd) != 0)
        return 0;
    }
  return 0;
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_registration), cmocka_unit_test (test_prepare), cmocka_unit_test (test_restart),
    cmocka_unit_test (test_health),       cmocka_unit_test (test_slices),  cmocka_unit_test (test_refusals),
  };
  return cmocka_run_group_tests_name ("example driver, a shared object", tests, setup, teardown);
}
