/* SPDX-License-Identifier: Apache-2.0 */
/* Protocol tests: `nrm plugin` runs as its own process and is called over
 * its unix sockets exactly as the kubelet calls it. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hwloc.h>
#include <jansson.h>

#include "proto/dra_health_v1alpha1.pb-c.h"
#include "proto/dra_v1.pb-c.h"
#include "proto/pluginregistration.pb-c.h"
#include "tests/plugin/kubelet.h"

#define CPU_DRIVER "cpu.nrm.io"
#define MEM_DRIVER "memory.nrm.io"
#define NODE "node-1"
#define PREPARE "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
#define UNPREPARE "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources"
#define PREPARE_BETA "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources"

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim Claim;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse PrepareResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse PrepareClaimResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse UnprepareResponse;

static char root[256], kubelet_dir[300], cdi_dir[300], state_dir[300], claims_dir[300], log_path[300];
static char cpu_sock[512], cpu_reg[512], mem_sock[512];
static pid_t plugin_pid = -1;
static char fsroot[400];        /* --fsroot for the next start, or "" */
static const char *start_flag;  /* one more flag for the next start, or NULL */
static const char *start_flag2; /* and another */
static grpc_channel *cpu_ch, *mem_ch;
static const char *claim_ns = "default"; /* the namespace of the claims written and prepared */

/* --- the plugin process -------------------------------------------------------- */

static pid_t
spawn_plugin (const char *extra)
{
  const char *nrm = getenv ("NRM");
  char topo[4096];
  snprintf (topo, sizeof (topo), "%s/24em64t-2n6c2t-pci.xml", getenv ("NRM_TOPOLOGIES"));
  pid_t pid = fork ();
  if (pid == 0)
    {
      int fd = open (log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
      dup2 (fd, 2);
      dup2 (fd, 1);
      const char *args[32] = { nrm,
                               "plugin",
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
                               "--reserved-cpus",
                               "0",
                               "--isolated-cpus",
                               "23" };
      int n = 18;
      if (fsroot[0])
        {
          args[n++] = "--fsroot";
          args[n++] = fsroot;
          args[n++] = "--allow-no-cpuset"; /* the tree is sysfs only */
        }
      if (extra)
        {
          args[n++] = "--instance-uid";
          args[n++] = extra;
        }
      if (start_flag)
        args[n++] = start_flag;
      if (start_flag2)
        args[n++] = start_flag2;
      args[n] = NULL;
      execv (nrm, (char *const *) args);
      _exit (127);
    }
  return pid;
}

static void
start_plugin (void)
{
  char mem_reg[600];
  snprintf (mem_reg, sizeof (mem_reg), "%s/plugins_registry/" MEM_DRIVER "-reg.sock", kubelet_dir);
  plugin_pid = spawn_plugin (NULL);
  int i;
  for (i = 0; i < 150 && !(kc_answers (cpu_reg) && kc_answers (mem_reg)); i++)
    usleep (100000);
  assert_true (i < 150);
  cpu_ch = kc_connect (cpu_sock);
  mem_ch = kc_connect (mem_sock);
}

static void
stop_plugin (int sig)
{
  kc_close (cpu_ch);
  kc_close (mem_ch);
  cpu_ch = mem_ch = NULL;
  assert_true (plugin_pid > 0); /* never kill (-1, ...) */
  kill (plugin_pid, sig);
  int rc = kc_wait_exit (plugin_pid, 15000);
  if (sig == SIGTERM)
    assert_int_equal (rc, 0);
  plugin_pid = -1;
}

static bool
log_contains (const char *needle)
{
  char buf[65536];
  int fd = open (log_path, O_RDONLY);
  ssize_t n = fd >= 0 ? read (fd, buf, sizeof (buf) - 1) : -1;
  if (fd >= 0)
    close (fd);
  if (n < 0)
    return false;
  buf[n] = '\0';
  return strstr (buf, needle) != NULL;
}

/* --- claims -------------------------------------------------------------------- */

/* Writes a ResourceClaim file; results is a JSON array text. */
static void
write_claim (const char *name, const char *uid, const char *results)
{
  char path[600], text[8192];
  snprintf (path, sizeof (path), "%s/%s.json", claims_dir, name);
  if (results == NULL)
    snprintf (text, sizeof (text),
              "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"name\":\"%s\","
              "\"namespace\":\"%s\",\"uid\":\"%s\"},\"spec\":{},\"status\":{}}",
              name, claim_ns, uid);
  else
    snprintf (text, sizeof (text),
              "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"name\":\"%s\","
              "\"namespace\":\"%s\",\"uid\":\"%s\"},\"spec\":{},\"status\":{\"allocation\":{\"devices\":{"
              "\"results\":%s}}}}",
              name, claim_ns, uid, results);
  FILE *f = fopen (path, "w");
  assert_non_null (f);
  fputs (text, f);
  fclose (f);
}

static char *
cpu_result (const char *request, const char *device, int cpus)
{
  char *s = NULL;
  assert_true (asprintf (&s,
                         "{\"request\":\"%s\",\"driver\":\"" CPU_DRIVER "\",\"pool\":\"" NODE "\",\"device\":\"%s\","
                         "\"shareID\":\"%08x-0000-4000-8000-000000000000\",\"consumedCapacity\":{\"cpus\":\"%d\"}}",
                         request, device, (unsigned) rand (), cpus)
               >= 0);
  return s;
}

static void
claim_cpus (const char *name, const char *uid, const char *device, int cpus)
{
  char *r = cpu_result ("cpus", device, cpus), *arr = NULL;
  assert_true (asprintf (&arr, "[%s]", r) >= 0);
  write_claim (name, uid, arr);
  free (r);
  free (arr);
}

static PrepareResponse *
prepare (grpc_channel *ch, const char *method, const char *const *names, const char *const *uids, size_t n)
{
  size_t len;
  uint8_t *req = kc_pack_claims (claim_ns, names, uids, n, false, &len);
  struct kc_reply r;
  assert_int_equal (kc_unary (ch, method, req, len, 10000, &r), 0);
  free (req);
  if (r.status != GRPC_STATUS_OK)
    fail_msg ("prepare: status %d: %s", r.status, r.details);
  PrepareResponse *resp
      = k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__unpack (NULL, r.len, r.data);
  assert_non_null (resp);
  kc_reply_done (&r);
  return resp;
}

static PrepareClaimResponse *
entry (PrepareResponse *r, const char *uid)
{
  for (size_t i = 0; i < r->n_claims; i++)
    if (strcmp (r->claims[i]->key, uid) == 0)
      return r->claims[i]->value;
  fail_msg ("no entry for claim %s", uid);
  return NULL;
}

static void
unprepare (grpc_channel *ch, const char *const *uids, size_t n)
{
  static const char *names[16] = { "x", "x", "x", "x", "x", "x", "x", "x", "x", "x", "x", "x", "x", "x", "x", "x" };
  size_t len;
  uint8_t *req = kc_pack_claims ("default", names, uids, n, true, &len);
  struct kc_reply r;
  assert_int_equal (kc_unary (ch, UNPREPARE, req, len, 10000, &r), 0);
  free (req);
  assert_int_equal (r.status, GRPC_STATUS_OK);
  UnprepareResponse *resp
      = k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__unpack (NULL, r.len, r.data);
  assert_non_null (resp);
  assert_int_equal (resp->n_claims, n);
  for (size_t i = 0; i < resp->n_claims; i++)
    assert_string_equal (resp->claims[i]->value->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__free_unpacked (resp, NULL);
  kc_reply_done (&r);
}

/* The CPUs a prepared claim got, from its CDI spec. */
static hwloc_bitmap_t
cdi_cpus (const char *uid)
{
  char path[600];
  json_error_t e;
  snprintf (path, sizeof (path), "%s/" CPU_DRIVER "-%s.json", cdi_dir, uid);
  json_t *spec = json_load_file (path, 0, &e);
  if (spec == NULL)
    return NULL;
  assert_string_equal (json_string_value (json_object_get (spec, "cdiVersion")), "0.5.0");
  assert_string_equal (json_string_value (json_object_get (spec, "kind")), CPU_DRIVER "/claim");
  json_t *edits = json_object_get (json_array_get (json_object_get (spec, "devices"), 0), "containerEdits");
  json_t *env = json_object_get (edits, "env");
  /* The hook that binds the container before its workload starts. */
  json_t *hook = json_array_get (json_object_get (edits, "hooks"), 0);
  assert_string_equal (json_string_value (json_object_get (hook, "hookName")), "createRuntime");
  const char *hp = json_string_value (json_object_get (hook, "path"));
  assert_non_null (hp);
  assert_true (hp[0] == '/' && strstr (hp, "/nrm-hook") != NULL);
  assert_string_equal (json_string_value (json_array_get (json_object_get (hook, "args"), 0)), "nrm-hook");
  hwloc_bitmap_t set = NULL;
  for (size_t i = 0; i < json_array_size (env); i++)
    {
      const char *kv = json_string_value (json_array_get (env, i));
      if (strncmp (kv, "NRM_CPUS=", 9) == 0)
        {
          set = hwloc_bitmap_alloc ();
          assert_int_equal (hwloc_bitmap_list_sscanf (set, kv + 9), 0);
        }
    }
  json_decref (spec);
  return set;
}

/* Writes a claim of one memory device; config is the claim's opaque
 * MemoryConfig parameters (a JSON object text) or NULL. */
static void
claim_memory (const char *name, const char *uid, const char *device, const char *quantity, const char *config)
{
  char results[2048];
  int n = snprintf (results, sizeof (results),
                    "[{\"request\":\"mem\",\"driver\":\"" MEM_DRIVER "\",\"pool\":\"" NODE "\",\"device\":\"%s\","
                    "\"consumedCapacity\":{\"memory\":\"%s\"}}]",
                    device, quantity);
  if (config)
    snprintf (results + n, sizeof (results) - (size_t) n,
              ",\"config\":[{\"source\":\"FromClaim\",\"opaque\":{\"driver\":\"" MEM_DRIVER "\","
              "\"parameters\":%s}}]",
              config);
  write_claim (name, uid, results);
}

/* The value of variable `name` in the memory driver's CDI spec of a claim:
 * NULL when the spec or the variable is missing. */
static char *
cdi_memory_env (const char *uid, const char *name)
{
  char path[600];
  snprintf (path, sizeof (path), "%s/" MEM_DRIVER "-%s.json", cdi_dir, uid);
  json_t *spec = json_load_file (path, 0, NULL);
  if (spec == NULL)
    return NULL;
  char *value = NULL;
  size_t len = strlen (name), i;
  json_t *dev;
  json_array_foreach (json_object_get (spec, "devices"), i, dev)
  {
    json_t *env = json_object_get (json_object_get (dev, "containerEdits"), "env");
    for (size_t k = 0; k < json_array_size (env) && value == NULL; k++)
      {
        const char *kv = json_string_value (json_array_get (env, k));
        if (kv && strncmp (kv, name, len) == 0 && kv[len] == '=')
          value = strdup (kv + len + 1);
      }
  }
  json_decref (spec);
  return value;
}

/* --- tests ---------------------------------------------------------------------- */

static void
test_registration (void **state)
{
  (void) state;
  grpc_channel *reg = kc_connect (cpu_reg);
  Pluginregistration__InfoRequest in = PLUGINREGISTRATION__INFO_REQUEST__INIT;
  uint8_t buf[16];
  size_t len = protobuf_c_message_pack (&in.base, buf);
  struct kc_reply r;
  assert_int_equal (kc_unary (reg, "/pluginregistration.Registration/GetInfo", buf, len, 5000, &r), 0);
  assert_int_equal (r.status, GRPC_STATUS_OK);
  Pluginregistration__PluginInfo *info = pluginregistration__plugin_info__unpack (NULL, r.len, r.data);
  assert_non_null (info);
  assert_string_equal (info->type, "DRAPlugin");
  assert_string_equal (info->name, CPU_DRIVER);
  assert_string_equal (info->endpoint, cpu_sock);
  assert_true (info->n_supported_versions >= 2);
  assert_string_equal (info->supported_versions[0], "v1.DRAPlugin");
  assert_string_equal (info->supported_versions[1], "v1beta1.DRAPlugin");
  assert_string_equal (info->supported_versions[2], "v1alpha1.DRAResourceHealth");
  pluginregistration__plugin_info__free_unpacked (info, NULL);
  kc_reply_done (&r);

  /* Accepted, then refused with a reason: both are answered and logged. */
  for (int ok = 1; ok >= 0; ok--)
    {
      Pluginregistration__RegistrationStatus st = PLUGINREGISTRATION__REGISTRATION_STATUS__INIT;
      uint8_t sb[256];
      st.plugin_registered = ok;
      st.error = ok ? "" : "version skew: test refusal";
      len = protobuf_c_message_pack (&st.base, sb);
      assert_int_equal (kc_unary (reg, "/pluginregistration.Registration/NotifyRegistrationStatus", sb, len, 5000, &r),
                        0);
      assert_int_equal (r.status, GRPC_STATUS_OK);
      kc_reply_done (&r);
    }
  assert_true (log_contains ("registered with the kubelet"));
  assert_true (log_contains ("refused the registration: version skew: test refusal"));

  /* An unknown method and undecodable bytes. */
  assert_int_equal (kc_unary (reg, "/pluginregistration.Registration/Frobnicate", buf, 0, 5000, &r), 0);
  assert_int_equal (r.status, GRPC_STATUS_UNIMPLEMENTED);
  kc_reply_done (&r);
  const uint8_t junk[] = { 0xff, 0xff, 0xff, 0xff, 0x0f, 0x12 };
  assert_int_equal (kc_unary (cpu_ch, PREPARE, junk, sizeof (junk), 5000, &r), 0);
  assert_int_equal (r.status, GRPC_STATUS_INVALID_ARGUMENT);
  kc_reply_done (&r);
  kc_close (reg);
}

static void
test_prepare_mixed (void **state)
{
  (void) state;
  char *other = NULL;
  claim_cpus ("good", "00000000-0000-4000-8000-000000000001", "numa1", 4);
  write_claim ("unallocated", "00000000-0000-4000-8000-000000000002", NULL);
  claim_cpus ("replaced", "00000000-0000-4000-8000-999999999999", "numa1", 1);
  assert_true (asprintf (&other, "[{\"request\":\"gpu\",\"driver\":\"gpu.example.com\",\"pool\":\"" NODE "\","
                                 "\"device\":\"gpu0\"}]")
               >= 0);
  write_claim ("othersdriver", "00000000-0000-4000-8000-000000000004", other);
  free (other);
  claim_cpus ("toolarge", "00000000-0000-4000-8000-000000000005", "numa1", 100);
  claim_cpus ("nosuchdevice", "00000000-0000-4000-8000-000000000006", "numa9", 1);

  const char *names[] = { "good", "missing", "unallocated", "replaced", "othersdriver", "toolarge", "nosuchdevice" };
  const char *uids[] = { "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000007",
                         "00000000-0000-4000-8000-000000000002", "00000000-0000-4000-8000-000000000003",
                         "00000000-0000-4000-8000-000000000004", "00000000-0000-4000-8000-000000000005",
                         "00000000-0000-4000-8000-000000000006" };
  const char *want[] = {
    NULL, "not found", "not allocated", "replaced", "no device of driver", "more than the device", "unknown device"
  };
  PrepareResponse *resp = prepare (cpu_ch, PREPARE, names, uids, 7);
  assert_int_equal (resp->n_claims, 7);
  for (size_t i = 0; i < 7; i++)
    {
      PrepareClaimResponse *e = entry (resp, uids[i]);
      if (want[i] == NULL)
        {
          assert_string_equal (e->error, "");
          assert_int_equal (e->n_devices, 1);
          assert_string_equal (e->devices[0]->pool_name, NODE);
          assert_string_equal (e->devices[0]->device_name, "numa1");
          assert_string_equal (e->devices[0]->request_names[0], "cpus");
          assert_int_equal (e->devices[0]->n_cdi_device_ids, 1);
          assert_string_equal (e->devices[0]->cdi_device_ids[0], CPU_DRIVER "/claim="
                                                                            "00000000-0000-4000-8000-000000000001");
          assert_true (strlen (e->devices[0]->share_id) > 0);
        }
      else if (strstr (e->error, want[i]) == NULL)
        fail_msg ("claim %s: error `%s` lacks `%s`", names[i], e->error, want[i]);
    }
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);

  /* Four CPUs of node 1, two whole cores. */
  hwloc_bitmap_t cpus = cdi_cpus ("00000000-0000-4000-8000-000000000001");
  assert_non_null (cpus);
  assert_int_equal (hwloc_bitmap_weight (cpus), 4);
  hwloc_bitmap_t node1 = hwloc_bitmap_alloc ();
  for (unsigned c = 1; c < 24; c += 2) /* node 1 holds the odd CPUs here */
    hwloc_bitmap_set (node1, c);
  assert_true (hwloc_bitmap_isincluded (cpus, node1));

  /* Idempotent: the same answer, the same CPUs. */
  resp = prepare (cpu_ch, PREPARE, names, uids, 1);
  assert_string_equal (entry (resp, uids[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  hwloc_bitmap_t again = cdi_cpus (uids[0]);
  assert_true (hwloc_bitmap_isequal (cpus, again));

  /* Still the same answer once the claim is gone from its source. */
  char gone[600];
  snprintf (gone, sizeof (gone), "%s/good.json", claims_dir);
  assert_int_equal (unlink (gone), 0);
  resp = prepare (cpu_ch, PREPARE, names, uids, 1);
  assert_string_equal (entry (resp, uids[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);

  /* Isolated CPUs come from the isolated device only, never from numa1. */
  assert_false (hwloc_bitmap_isset (cpus, 23));
  const char *in[] = { "iso" }, *iu[] = { "00000000-0000-4000-8000-0000000000e1" };
  claim_cpus ("iso", iu[0], "numa1-isolated", 1);
  resp = prepare (cpu_ch, PREPARE, in, iu, 1);
  assert_string_equal (entry (resp, iu[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  hwloc_bitmap_t iso = cdi_cpus (iu[0]);
  assert_non_null (iso);
  assert_int_equal (hwloc_bitmap_first (iso), 23);
  assert_int_equal (hwloc_bitmap_weight (iso), 1);
  hwloc_bitmap_free (iso);
  unprepare (cpu_ch, iu, 1);

  /* Unprepare: the spec goes; unknown and repeated unprepares succeed. */
  const char *un[] = { uids[0], "00000000-0000-4000-8000-00000000dead" };
  unprepare (cpu_ch, un, 2);
  assert_null (cdi_cpus (uids[0]));
  unprepare (cpu_ch, un, 2);
  hwloc_bitmap_free (cpus);
  hwloc_bitmap_free (again);
  hwloc_bitmap_free (node1);
}

/* Opaque CPUConfig: kubelet option names per claim, checked strictly. */
static void
test_opaque_config (void **state)
{
  (void) state;
  struct
  {
    const char *name, *uid;
    int cpus;
    const char *params, *want;
  } cases[] = {
    { "spread", "00000000-0000-4000-8000-0000000000d1", 4,
      "{\"apiVersion\":\"cpu.nrm.io/v1alpha1\",\"kind\":\"CPUConfig\",\"options\":[\"distribute-cpus-across-cores\"]}",
      NULL },
    { "odd", "00000000-0000-4000-8000-0000000000d2", 3,
      "{\"apiVersion\":\"cpu.nrm.io/v1alpha1\",\"kind\":\"CPUConfig\",\"options\":[\"full-pcpus-only\"]}", "whole" },
    { "badopt", "00000000-0000-4000-8000-0000000000d3", 1,
      "{\"apiVersion\":\"cpu.nrm.io/v1alpha1\",\"kind\":\"CPUConfig\",\"options\":[\"turbo\"]}",
      "unknown CPU option `turbo`" },
    { "bysocket", "00000000-0000-4000-8000-0000000000d9", 1,
      "{\"apiVersion\":\"cpu.nrm.io/v1alpha1\",\"kind\":\"CPUConfig\",\"options\":[\"align-by-socket\"]}",
      "CPU option `align-by-socket` is not supported" },
    { "badkey", "00000000-0000-4000-8000-0000000000d4", 1,
      "{\"apiVersion\":\"cpu.nrm.io/v1alpha1\",\"kind\":\"CPUConfig\",\"colour\":1}", "unknown field `colour`" },
    { "badkind", "00000000-0000-4000-8000-0000000000d5", 1, "{\"apiVersion\":\"v9\",\"kind\":\"X\"}",
      "expected apiVersion cpu.nrm.io/v1alpha1" },
    { "mixed", "00000000-0000-4000-8000-0000000000d6", 2,
      "{\"apiVersion\":\"cpu.nrm.io/v1alpha1\",\"kind\":\"CPUConfig\",\"sharedCPUs\":true}", NULL },
    { "badmixed", "00000000-0000-4000-8000-0000000000d7", 2,
      "{\"apiVersion\":\"cpu.nrm.io/v1alpha1\",\"kind\":\"CPUConfig\",\"sharedCPUs\":\"yes\"}",
      "`sharedCPUs` must be a boolean" },
  };
  for (size_t i = 0; i < sizeof (cases) / sizeof (cases[0]); i++)
    {
      char path[600], text[4096];
      snprintf (path, sizeof (path), "%s/%s.json", claims_dir, cases[i].name);
      snprintf (text, sizeof (text),
                "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"default\",\"uid\":\"%s\"},\"status\":{"
                "\"allocation\":{\"devices\":{\"results\":[{\"request\":\"cpus\",\"driver\":\"" CPU_DRIVER "\","
                "\"pool\":\"" NODE "\",\"device\":\"numa1\",\"consumedCapacity\":{\"cpus\":\"%d\"}}],"
                "\"config\":[{\"source\":\"FromClaim\",\"opaque\":{\"driver\":\"" CPU_DRIVER "\","
                "\"parameters\":%s}}]}}}}",
                cases[i].name, cases[i].uid, cases[i].cpus, cases[i].params);
      FILE *f = fopen (path, "w");
      fputs (text, f);
      fclose (f);
      const char *names[] = { cases[i].name }, *uids[] = { cases[i].uid };
      PrepareResponse *resp = prepare (cpu_ch, PREPARE, names, uids, 1);
      PrepareClaimResponse *e = entry (resp, uids[0]);
      if (cases[i].want == NULL)
        assert_string_equal (e->error, "");
      else if (strstr (e->error, cases[i].want) == NULL)
        fail_msg ("claim %s: error `%s` lacks `%s`", cases[i].name, e->error, cases[i].want);
      k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
    }
  /* The spread claim: four different cores (siblings are n and n+12). */
  hwloc_bitmap_t cpus = cdi_cpus ("00000000-0000-4000-8000-0000000000d1");
  assert_non_null (cpus);
  assert_int_equal (hwloc_bitmap_weight (cpus), 4);
  for (unsigned c = 0; c < 12; c++)
    assert_false (hwloc_bitmap_isset (cpus, c) && hwloc_bitmap_isset (cpus, c + 12));
  hwloc_bitmap_free (cpus);
  /* A mixed claim: its exclusive CPUs in NRM_CPUS, and the hook told to add
   * the shared pool; the spread claim has no such variable. */
  char path[600];
  for (int k = 0; k < 2; k++)
    {
      snprintf (path, sizeof (path), "%s/" CPU_DRIVER "-%s.json", cdi_dir,
                k ? "00000000-0000-4000-8000-0000000000d1" : "00000000-0000-4000-8000-0000000000d6");
      json_t *spec = json_load_file (path, 0, NULL);
      assert_non_null (spec);
      char *text = json_dumps (spec, 0);
      assert_true ((strstr (text, "\"NRM_SHARED_CPUS=true\"") != NULL) == (k == 0));
      assert_non_null (strstr (text, "NRM_CPUS="));
      free (text);
      json_decref (spec);
    }
  const char *u[] = { "00000000-0000-4000-8000-0000000000d1", "00000000-0000-4000-8000-0000000000d6" };
  unprepare (cpu_ch, u, 2);
}

static void
test_memory_and_beta (void **state)
{
  (void) state;
  /* A claim that also asks for its memory as the container's limit. */
  write_claim ("mem", "00000000-0000-4000-8000-0000000000a1",
               "[{\"request\":\"mem/big\",\"driver\":\"" MEM_DRIVER "\",\"pool\":\"" NODE "\",\"device\":\"numa0\","
               "\"consumedCapacity\":{\"memory\":\"1Gi\"}}],\"config\":[{\"source\":\"FromClaim\",\"opaque\":{"
               "\"driver\":\"" MEM_DRIVER "\",\"parameters\":{\"apiVersion\":\"memory.nrm.io/v1alpha1\","
               "\"kind\":\"MemoryConfig\",\"limit\":true}}}]");
  const char *names[] = { "mem" };
  const char *uids[] = { "00000000-0000-4000-8000-0000000000a1" };
  PrepareResponse *resp = prepare (mem_ch, PREPARE_BETA, names, uids, 1);
  PrepareClaimResponse *e = entry (resp, uids[0]);
  assert_string_equal (e->error, "");
  assert_string_equal (e->devices[0]->request_names[0], "mem"); /* subrequest stripped */
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  char path[600];
  snprintf (path, sizeof (path), "%s/" MEM_DRIVER "-%s.json", cdi_dir, uids[0]);
  json_error_t je;
  json_t *spec = json_load_file (path, 0, &je);
  assert_non_null (spec);
  char *text = json_dumps (spec, 0);
  assert_non_null (strstr (text, "NRM_MEMS=0"));
  assert_non_null (strstr (text, "NRM_MEMORY_MAX=1073741824"));
  assert_null (strstr (text, "NRM_MEMORY_MIN"));
  free (text);
  json_decref (spec);
  unprepare (mem_ch, uids, 1);
}

/* Opaque MemoryConfig: guarantee puts the claimed bytes in NRM_MEMORY_MIN,
 * limit in NRM_MEMORY_MAX, each with the claim's own name too. */
/* A variable of a claim's environment and its per-claim copy: both want,
 * or both absent when want is NULL. */
static void
expect_var (const char *claim, const char *var, const char *got, const char *got_claim, const char *want)
{
  if (want == NULL)
    {
      assert_null (got);
      assert_null (got_claim);
      return;
    }
  if (got == NULL || strcmp (got, want) != 0)
    fail_msg ("claim %s: %s is `%s`, not %s", claim, var, got ? got : "(missing)", want);
  assert_non_null (got_claim);
  assert_string_equal (got_claim, want);
}

static void
test_memory_config (void **state)
{
  (void) state;
  struct
  {
    const char *name, *uid, *quantity, *config, *min, *max;
  } cases[] = {
    { "guaranteed", "00000000-0000-4000-8000-0000000000a2", "512Mi",
      "{\"apiVersion\":\"memory.nrm.io/v1alpha1\",\"kind\":\"MemoryConfig\",\"guarantee\":true}", "536870912", NULL },
    { "both", "00000000-0000-4000-8000-0000000000a3", "1536Mi",
      "{\"apiVersion\":\"memory.nrm.io/v1alpha1\",\"kind\":\"MemoryConfig\",\"limit\":true,\"guarantee\":true}",
      "1610612736", "1610612736" },
    { "plain", "00000000-0000-4000-8000-0000000000a4", "1Gi", NULL, NULL, NULL },
  };
  for (size_t i = 0; i < sizeof (cases) / sizeof (cases[0]); i++)
    {
      claim_memory (cases[i].name, cases[i].uid, "numa1", cases[i].quantity, cases[i].config);
      const char *names[] = { cases[i].name }, *uids[] = { cases[i].uid };
      PrepareResponse *resp = prepare (mem_ch, PREPARE, names, uids, 1);
      assert_string_equal (entry (resp, uids[0])->error, "");
      k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
      char per_claim[2][128];
      for (int k = 0; k < 2; k++)
        {
          int n = snprintf (per_claim[k], sizeof (per_claim[k]), "%s_", k ? "NRM_MEMORY_MAX" : "NRM_MEMORY_MIN");
          for (const char *c = cases[i].uid; *c; c++)
            per_claim[k][n++] = *c == '-' ? '_' : (char) (*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
          per_claim[k][n] = '\0';
        }
      char *mems = cdi_memory_env (uids[0], "NRM_MEMS");
      char *min = cdi_memory_env (uids[0], "NRM_MEMORY_MIN"), *min_claim = cdi_memory_env (uids[0], per_claim[0]);
      char *max = cdi_memory_env (uids[0], "NRM_MEMORY_MAX"), *max_claim = cdi_memory_env (uids[0], per_claim[1]);
      assert_non_null (mems);
      assert_string_equal (mems, "1");
      expect_var (cases[i].name, "NRM_MEMORY_MIN", min, min_claim, cases[i].min);
      expect_var (cases[i].name, "NRM_MEMORY_MAX", max, max_claim, cases[i].max);
      free (mems);
      free (min);
      free (min_claim);
      free (max);
      free (max_claim);
      unprepare (mem_ch, uids, 1);
    }
}

/* MemoryConfig policy: bind and local are cpuset.mems' own; interleave
 * over two nodes is the workload's (NRM_MEMORY_POLICY tells it); preferred,
 * and interleave over one node, are refused and nothing is held. */
static void
test_memory_policy (void **state)
{
  (void) state;
  struct
  {
    const char *name, *uid, *policy, *results, *want; /* want: the policy, or a piece of the error */
    bool ok;
  } cases[] = {
    { "pbind", "00000000-0000-4000-8000-0000000000b1", "bind", NULL, "bind", true },
    { "plocal", "00000000-0000-4000-8000-0000000000b2", "localalloc", NULL, "local", true },
    { "pinter", "00000000-0000-4000-8000-0000000000b3", "interleave",
      "[{\"request\":\"a\",\"driver\":\"" MEM_DRIVER "\",\"pool\":\"" NODE "\",\"device\":\"numa0\","
      "\"consumedCapacity\":{\"memory\":\"256Mi\"}},{\"request\":\"b\",\"driver\":\"" MEM_DRIVER "\",\"pool\":\"" NODE
      "\",\"device\":\"numa1\",\"consumedCapacity\":{\"memory\":\"256Mi\"}}]",
      "interleave", true },
    { "pinter1", "00000000-0000-4000-8000-0000000000b4", "interleave", NULL, "two or more NUMA nodes", false },
    { "ppref", "00000000-0000-4000-8000-0000000000b5", "preferred", NULL, "no other node to fall back to", false },
    { "pbad", "00000000-0000-4000-8000-0000000000b6", "spread", NULL, "unknown memory policy `spread`", false },
  };
  for (size_t i = 0; i < sizeof (cases) / sizeof (cases[0]); i++)
    {
      char config[256], results[2048];
      snprintf (config, sizeof (config),
                "{\"apiVersion\":\"memory.nrm.io/v1alpha1\",\"kind\":\"MemoryConfig\",\"policy\":\"%s\"}",
                cases[i].policy);
      if (cases[i].results)
        {
          snprintf (results, sizeof (results),
                    "%s,\"config\":[{\"source\":\"FromClaim\",\"opaque\":{\"driver\":\"" MEM_DRIVER "\","
                    "\"parameters\":%s}}]",
                    cases[i].results, config);
          write_claim (cases[i].name, cases[i].uid, results);
        }
      else
        claim_memory (cases[i].name, cases[i].uid, "numa1", "512Mi", config);
      const char *names[] = { cases[i].name }, *uids[] = { cases[i].uid };
      PrepareResponse *resp = prepare (mem_ch, PREPARE, names, uids, 1);
      const char *error = entry (resp, uids[0])->error;
      char *policy = cdi_memory_env (uids[0], "NRM_MEMORY_POLICY");
      if (cases[i].ok)
        {
          if (strcmp (error, "") != 0)
            fail_msg ("claim %s: `%s`", cases[i].name, error);
          assert_non_null (policy);
          assert_string_equal (policy, cases[i].want);
        }
      else
        {
          if (strstr (error, cases[i].want) == NULL)
            fail_msg ("claim %s: error `%s` lacks `%s`", cases[i].name, error, cases[i].want);
          assert_null (policy); /* no CDI spec: nothing was prepared */
        }
      free (policy);
      k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
      unprepare (mem_ch, uids, 1);
    }
  /* A refused claim held nothing: the same claim with a policy a container
   * can have is prepared afresh, not found "already prepared". */
  claim_memory ("ppref", "00000000-0000-4000-8000-0000000000b5", "numa1", "512Mi", NULL);
  const char *names[] = { "ppref" }, *uids[] = { "00000000-0000-4000-8000-0000000000b5" };
  PrepareResponse *resp = prepare (mem_ch, PREPARE, names, uids, 1);
  assert_string_equal (entry (resp, uids[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  unprepare (mem_ch, uids, 1);
}

/* Opens the health stream and reads its first message (the complete list). */
static V1alpha1__NodeWatchResourcesResponse *
watch_health (struct kc_stream **ret)
{
  V1alpha1__NodeWatchResourcesRequest in = V1ALPHA1__NODE_WATCH_RESOURCES_REQUEST__INIT;
  uint8_t buf[8];
  size_t len = protobuf_c_message_pack (&in.base, buf);
  struct kc_stream *s = kc_stream_open (cpu_ch, "/v1alpha1.DRAResourceHealth/NodeWatchResources", buf, len, 60000);
  uint8_t *data = NULL;
  size_t dlen = 0;
  assert_int_equal (kc_stream_read (s, 5000, &data, &dlen), 1);
  V1alpha1__NodeWatchResourcesResponse *r = v1alpha1__node_watch_resources_response__unpack (NULL, dlen, data);
  free (data);
  assert_non_null (r);
  *ret = s;
  return r;
}

static void
test_health (void **state)
{
  (void) state;
  struct kc_stream *s = NULL;
  V1alpha1__NodeWatchResourcesResponse *r = watch_health (&s);
  assert_int_equal (r->n_devices, 3); /* numa0, numa1 and numa1-isolated */
  for (size_t i = 0; i < r->n_devices; i++)
    {
      assert_int_equal (r->devices[i]->health, V1ALPHA1__HEALTH_STATUS__HEALTHY);
      assert_string_equal (r->devices[i]->device->pool_name, NODE);
      assert_true (r->devices[i]->health_check_timeout_seconds > 10);
      assert_true (r->devices[i]->last_updated_time > 0);
    }
  v1alpha1__node_watch_resources_response__free_unpacked (r, NULL);
  kc_stream_close (s);
}

/* CPUs that go offline make their device unhealthy, with the reason. */
static void
test_health_offline (void **state)
{
  (void) state;
  char dir[600], path[700];
  stop_plugin (SIGTERM);
  snprintf (fsroot, sizeof (fsroot), "%s/fsroot", root);
  snprintf (dir, sizeof (dir), "%s/sys/devices/system/cpu", fsroot);
  char cmd[800];
  snprintf (cmd, sizeof (cmd), "mkdir -p '%s'", dir);
  assert_int_equal (system (cmd), 0);
  snprintf (path, sizeof (path), "%s/online", dir);
  FILE *f = fopen (path, "w");
  fputs ("0-22\n", f);
  fclose (f);
  start_plugin ();

  struct kc_stream *s = NULL;
  V1alpha1__NodeWatchResourcesResponse *r = watch_health (&s);
  assert_int_equal (r->n_devices, 3);
  for (size_t i = 0; i < r->n_devices; i++)
    {
      if (strcmp (r->devices[i]->device->device_name, "numa1-isolated") == 0)
        {
          assert_int_equal (r->devices[i]->health, V1ALPHA1__HEALTH_STATUS__UNHEALTHY);
          assert_string_equal (r->devices[i]->message, "CPUs 23 went offline");
        }
      else
        assert_int_equal (r->devices[i]->health, V1ALPHA1__HEALTH_STATUS__HEALTHY);
    }
  v1alpha1__node_watch_resources_response__free_unpacked (r, NULL);
  kc_stream_close (s);
  stop_plugin (SIGTERM);
  fsroot[0] = '\0';
  start_plugin ();
}

/* cpu.partition on a node whose kernel (a fake 6.1 cgroupfs: partitions,
 * no cpuset.cpus.exclusive) cannot make a container one: the node's
 * setting lets the claim run and says why in the log, the state and the
 * metadata; a claim that asks for one itself is refused. */
static void
test_partition (void **state)
{
  (void) state;
  char path[700], cmd[4096], conf[600], flag[700];
  stop_plugin (SIGTERM);
  snprintf (fsroot, sizeof (fsroot), "%s/fsroot-part", root);
  snprintf (cmd, sizeof (cmd),
            "mkdir -p '%1$s/sys/devices/system/cpu' '%1$s/sys/fs/cgroup/kubepods.slice' && echo 0-23 > "
            "'%1$s/sys/devices/system/cpu/online' && echo cpuset cpu memory > '%1$s/sys/fs/cgroup/cgroup.controllers' "
            "&& echo 0-23 > '%1$s/sys/fs/cgroup/kubepods.slice/cpuset.cpus' && echo member > "
            "'%1$s/sys/fs/cgroup/kubepods.slice/cpuset.cpus.partition'",
            fsroot);
  assert_int_equal (system (cmd), 0);
  snprintf (conf, sizeof (conf), "%s/partition.yaml", root);
  FILE *f = fopen (conf, "w");
  fputs ("cpu:\n  partition: root\n", f);
  fclose (f);
  snprintf (flag, sizeof (flag), "--config=%s", conf);
  start_flag = flag;
  start_flag2 = "--device-metadata";
  start_plugin ();
  struct
  {
    const char *name, *uid, *partition, *want_error, *want_env;
  } cases[] = {
    { "pnode", "00000000-0000-4000-8000-0000000000f1", NULL, NULL, "\"NRM_PARTITION=root\"" },
    { "pclaim", "00000000-0000-4000-8000-0000000000f2", "isolated",
      "the claim asks for a cpuset partition (isolated), which this node cannot give: this kernel has only local "
      "partitions",
      NULL },
    { "poff", "00000000-0000-4000-8000-0000000000f3", "off", NULL, NULL },
    { "pbad", "00000000-0000-4000-8000-0000000000f4", "member", "`partition` must be off, root or isolated", NULL },
  };
  for (size_t i = 0; i < sizeof (cases) / sizeof (cases[0]); i++)
    {
      char text[4096], params[300] = "";
      if (cases[i].partition)
        snprintf (
            params, sizeof (params),
            ",\"config\":[{\"source\":\"FromClaim\",\"opaque\":{\"driver\":\"" CPU_DRIVER "\","
            "\"parameters\":{\"apiVersion\":\"cpu.nrm.io/v1alpha1\",\"kind\":\"CPUConfig\",\"partition\":\"%s\"}}}]",
            cases[i].partition);
      snprintf (path, sizeof (path), "%s/%s.json", claims_dir, cases[i].name);
      snprintf (text, sizeof (text),
                "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"default\",\"uid\":\"%s\"},\"status\":{"
                "\"allocation\":{\"devices\":{\"results\":[{\"request\":\"cpus\",\"driver\":\"" CPU_DRIVER "\","
                "\"pool\":\"" NODE "\",\"device\":\"numa1\",\"consumedCapacity\":{\"cpus\":\"1\"}}]%s}}}}",
                cases[i].name, cases[i].uid, params);
      f = fopen (path, "w");
      fputs (text, f);
      fclose (f);
      const char *names[] = { cases[i].name }, *uids[] = { cases[i].uid };
      PrepareResponse *resp = prepare (cpu_ch, PREPARE, names, uids, 1);
      PrepareClaimResponse *e = entry (resp, uids[0]);
      if (cases[i].want_error == NULL)
        assert_string_equal (e->error, "");
      else if (strstr (e->error, cases[i].want_error) == NULL)
        fail_msg ("claim %s: error `%s` lacks `%s`", cases[i].name, e->error, cases[i].want_error);
      k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
      if (cases[i].want_error)
        continue;
      snprintf (path, sizeof (path), "%s/" CPU_DRIVER "-%s.json", cdi_dir, cases[i].uid);
      char *spec = kc_slurp (path);
      assert_non_null (spec);
      if (cases[i].want_env)
        assert_non_null (strstr (spec, cases[i].want_env));
      else
        assert_null (strstr (spec, "NRM_PARTITION"));
      assert_null (strstr (spec, "NRM_PARTITION_REQUIRED"));
      free (spec);
    }
  /* The node's setting: the metadata and the log say why not. */
  snprintf (path, sizeof (path), "%s/plugins/" CPU_DRIVER "/dra-device-metadata/default_pnode/cpus/metadata.json",
            kubelet_dir);
  char *body = kc_slurp (path);
  assert_non_null (body);
  if (strstr (body, "\"partition\"") == NULL
      || strstr (body, "unavailable (this kernel has only local partitions") == NULL)
    fail_msg ("metadata without the partition's note: %s", body);
  free (body);
  assert_true (log_contains ("claim 00000000-0000-4000-8000-0000000000f1: partition: unavailable (this kernel has "
                             "only local partitions"));
  const char *u[] = { "00000000-0000-4000-8000-0000000000f1", "00000000-0000-4000-8000-0000000000f3" };
  unprepare (cpu_ch, u, 2);
  stop_plugin (SIGTERM);
  fsroot[0] = '\0';
  start_flag = start_flag2 = NULL;
  start_plugin ();
}

struct worker
{
  int id;
  int failures;
};

static void *
worker (void *arg)
{
  struct worker *w = arg;
  grpc_channel *ch = kc_connect (cpu_sock);
  char name[32], uid[64];
  snprintf (name, sizeof (name), "par%d", w->id);
  snprintf (uid, sizeof (uid), "00000000-0000-4000-8000-0000000001%02d", w->id);
  const char *names[] = { name }, *uids[] = { uid };
  for (int round = 0; round < 5; round++)
    {
      size_t len;
      uint8_t *req = kc_pack_claims ("default", names, uids, 1, false, &len);
      struct kc_reply r;
      if (kc_unary (ch, PREPARE, req, len, 20000, &r) < 0 || r.status != GRPC_STATUS_OK)
        w->failures++;
      else
        {
          PrepareResponse *resp
              = k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__unpack (NULL, r.len, r.data);
          if (resp == NULL || resp->n_claims != 1 || strcmp (resp->claims[0]->value->error, "") != 0)
            w->failures++;
          if (resp)
            k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
        }
      kc_reply_done (&r);
      free (req);
      if (round < 4)
        {
          req = kc_pack_claims ("default", names, uids, 1, true, &len);
          if (kc_unary (ch, UNPREPARE, req, len, 20000, &r) < 0 || r.status != GRPC_STATUS_OK)
            w->failures++;
          kc_reply_done (&r);
          free (req);
        }
    }
  kc_close (ch);
  return NULL;
}

/* 8 threads prepare and unprepare at once; no CPU ends up in two claims. */
static void
test_concurrent (void **state)
{
  (void) state;
  pthread_t th[8];
  struct worker w[8];
  char name[32], uid[64];
  for (int i = 0; i < 8; i++)
    {
      snprintf (name, sizeof (name), "par%d", i);
      snprintf (uid, sizeof (uid), "00000000-0000-4000-8000-0000000001%02d", i);
      claim_cpus (name, uid, i % 2 ? "numa1" : "numa0", 2);
    }
  for (int i = 0; i < 8; i++)
    {
      w[i] = (struct worker){ i, 0 };
      pthread_create (&th[i], NULL, worker, &w[i]);
    }
  for (int i = 0; i < 8; i++)
    {
      pthread_join (th[i], NULL);
      assert_int_equal (w[i].failures, 0);
    }
  hwloc_bitmap_t all = hwloc_bitmap_alloc ();
  const char *uids[8];
  char ub[8][64];
  for (int i = 0; i < 8; i++)
    {
      snprintf (ub[i], sizeof (ub[i]), "00000000-0000-4000-8000-0000000001%02d", i);
      uids[i] = ub[i];
      hwloc_bitmap_t c = cdi_cpus (ub[i]);
      assert_non_null (c);
      assert_int_equal (hwloc_bitmap_weight (c), 2);
      assert_false (hwloc_bitmap_intersects (all, c));
      assert_false (hwloc_bitmap_isset (c, 0)); /* reserved */
      hwloc_bitmap_or (all, all, c);
      hwloc_bitmap_free (c);
    }
  unprepare (cpu_ch, uids, 8);
  hwloc_bitmap_free (all);
}

/* State survives SIGTERM and kill -9; an interrupted prepare is rolled back. */
static void
test_restart (void **state)
{
  (void) state;
  const char *names[] = { "keep" }, *uids[] = { "00000000-0000-4000-8000-0000000000b1" };
  claim_cpus ("keep", uids[0], "numa0", 3);
  PrepareResponse *resp = prepare (cpu_ch, PREPARE, names, uids, 1);
  assert_string_equal (entry (resp, uids[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  hwloc_bitmap_t before = cdi_cpus (uids[0]);

  stop_plugin (SIGTERM);
  assert_false (access (cpu_sock, F_OK) == 0);
  assert_false (access (cpu_reg, F_OK) == 0);
  start_plugin ();
  /* Same claim, same CPUs; another claim does not get them. */
  resp = prepare (cpu_ch, PREPARE, names, uids, 1);
  assert_string_equal (entry (resp, uids[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  hwloc_bitmap_t after = cdi_cpus (uids[0]);
  assert_true (hwloc_bitmap_isequal (before, after));

  stop_plugin (SIGKILL);
  /* Specs are rebuilt from the checkpoint: a lost one comes back, an
   * orphan goes. */
  char spec[600], orphan[600];
  snprintf (spec, sizeof (spec), "%s/" CPU_DRIVER "-%s.json", cdi_dir, uids[0]);
  snprintf (orphan, sizeof (orphan), "%s/" CPU_DRIVER "-00000000-0000-4000-8000-0000000000ff.json", cdi_dir);
  assert_int_equal (unlink (spec), 0);
  FILE *of = fopen (orphan, "w");
  fputs ("{}", of);
  fclose (of);
  /* A crash between the two phases: PrepareStarted on disk, a stale spec. */
  char cp[600], stale[600];
  snprintf (cp, sizeof (cp), "%s/" CPU_DRIVER ".checkpoint.json", state_dir);
  json_error_t je;
  json_t *doc = json_load_file (cp, 0, &je);
  assert_non_null (doc);
  json_object_set_new (json_object_get (doc, "claims"), "00000000-0000-4000-8000-0000000000b2",
                       json_pack ("{s:s, s:s, s:s, s:[]}", "namespace", "default", "name", "half", "phase",
                                  "PrepareStarted", "devices"));
  json_dump_file (doc, cp, 0);
  json_decref (doc);
  snprintf (stale, sizeof (stale), "%s/" CPU_DRIVER "-00000000-0000-4000-8000-0000000000b2.json", cdi_dir);
  FILE *f = fopen (stale, "w");
  fputs ("{}", f);
  fclose (f);

  start_plugin ();
  assert_false (access (stale, F_OK) == 0);
  assert_false (access (orphan, F_OK) == 0);
  hwloc_bitmap_t rebuilt = cdi_cpus (uids[0]);
  assert_non_null (rebuilt);
  assert_true (hwloc_bitmap_isequal (rebuilt, before));
  hwloc_bitmap_free (rebuilt);
  assert_true (log_contains ("interrupted during prepare"));
  const char *n2[] = { "other" }, *u2[] = { "00000000-0000-4000-8000-0000000000b3" };
  claim_cpus ("other", u2[0], "numa0", 8);
  resp = prepare (cpu_ch, PREPARE, n2, u2, 1);
  assert_string_equal (entry (resp, u2[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  hwloc_bitmap_t other = cdi_cpus (u2[0]);
  assert_false (hwloc_bitmap_intersects (other, before));
  /* Node 0 now has 11 - 3 - 8 = 0 CPUs usable. */
  claim_cpus ("nomore", "00000000-0000-4000-8000-0000000000b4", "numa0", 1);
  const char *n3[] = { "nomore" }, *u3[] = { "00000000-0000-4000-8000-0000000000b4" };
  resp = prepare (cpu_ch, PREPARE, n3, u3, 1);
  assert_non_null (strstr (entry (resp, u3[0])->error, "0 usable"));
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  const char *all[] = { uids[0], u2[0] };
  unprepare (cpu_ch, all, 2);
  hwloc_bitmap_free (before);
  hwloc_bitmap_free (after);
  hwloc_bitmap_free (other);
}

/* The memory driver remembers held bytes across a restart: a claim that
 * only fits if the first one is forgotten is refused, and fits once the
 * first is unprepared. */
static void
test_memory_restart (void **state)
{
  (void) state;
  /* numa0 has a little under 18Gi: 16Gi + 4Gi do not fit, 4Gi alone does. */
  const char *n1[] = { "hold" }, *u1[] = { "00000000-0000-4000-8000-0000000000a5" };
  const char *n2[] = { "squeeze" }, *u2[] = { "00000000-0000-4000-8000-0000000000a6" };
  claim_memory (n1[0], u1[0], "numa0", "16Gi", NULL);
  claim_memory (n2[0], u2[0], "numa0", "4Gi", NULL);
  PrepareResponse *resp = prepare (mem_ch, PREPARE, n1, u1, 1);
  assert_string_equal (entry (resp, u1[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);

  stop_plugin (SIGTERM);
  start_plugin ();
  resp = prepare (mem_ch, PREPARE, n2, u2, 1);
  const char *error = entry (resp, u2[0])->error;
  if (strstr (error, "4294967296 bytes asked") == NULL)
    fail_msg ("after a restart, 4Gi beside a held 16Gi of numa0: error `%s`, expected no capacity", error);
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  char *mems = cdi_memory_env (u2[0], "NRM_MEMS");
  assert_null (mems);
  /* The held claim is still prepared, with the same spec. */
  resp = prepare (mem_ch, PREPARE, n1, u1, 1);
  assert_string_equal (entry (resp, u1[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  mems = cdi_memory_env (u1[0], "NRM_MEMS");
  assert_non_null (mems);
  assert_string_equal (mems, "0");
  free (mems);

  unprepare (mem_ch, u1, 1);
  resp = prepare (mem_ch, PREPARE, n2, u2, 1);
  assert_string_equal (entry (resp, u2[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  mems = cdi_memory_env (u2[0], "NRM_MEMS");
  assert_non_null (mems);
  assert_string_equal (mems, "0");
  free (mems);
  unprepare (mem_ch, u2, 1);
}

static void
test_refusals (void **state)
{
  (void) state;
  /* A second instance for the same drivers refuses to start. */
  pid_t twin = spawn_plugin (NULL);
  assert_int_not_equal (kc_wait_exit (twin, 15000), 0);
  assert_true (log_contains ("refusing to start a second instance"));
  assert_true (access (cpu_sock, F_OK) == 0);

  /* A corrupt checkpoint is named and left untouched. */
  stop_plugin (SIGTERM);
  char cp[600];
  snprintf (cp, sizeof (cp), "%s/" CPU_DRIVER ".checkpoint.json", state_dir);
  FILE *f = fopen (cp, "w");
  fputs ("{\"version\": 1, \"claims\": [", f);
  fclose (f);
  pid_t p = spawn_plugin (NULL);
  assert_int_not_equal (kc_wait_exit (p, 15000), 0);
  assert_true (log_contains ("is corrupt"));
  f = fopen (cp, "r");
  char buf[64] = { 0 };
  assert_non_null (fgets (buf, sizeof (buf), f));
  fclose (f);
  assert_string_equal (buf, "{\"version\": 1, \"claims\": [");
  unlink (cp);
  start_plugin ();
}

/* Rolling update: a second instance with a pod UID serves beside the first,
 * and the two share state: what one prepares, the other unprepares. */
static void
test_rolling_update (void **state)
{
  (void) state;
  char twin_sock[600], twin_reg[600];
  snprintf (twin_sock, sizeof (twin_sock), "%s/plugins/" CPU_DRIVER "/dra-pod-2.sock", kubelet_dir);
  snprintf (twin_reg, sizeof (twin_reg), "%s/plugins_registry/" CPU_DRIVER "-pod-2-reg.sock", kubelet_dir);
  pid_t twin = spawn_plugin ("pod-2");
  int i;
  for (i = 0; i < 150 && !kc_answers (twin_reg); i++)
    usleep (100000);
  assert_true (i < 150);
  grpc_channel *tch = kc_connect (twin_sock);

  const char *names[] = { "rolling" }, *uids[] = { "00000000-0000-4000-8000-0000000000c1" };
  claim_cpus ("rolling", uids[0], "numa1", 5);
  PrepareResponse *resp = prepare (tch, PREPARE, names, uids, 1);
  assert_string_equal (entry (resp, uids[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  hwloc_bitmap_t a = cdi_cpus (uids[0]);

  /* The old instance sees the claim: same answer, and its CPUs are taken. */
  resp = prepare (cpu_ch, PREPARE, names, uids, 1);
  assert_string_equal (entry (resp, uids[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  const char *n2[] = { "rolling2" }, *u2[] = { "00000000-0000-4000-8000-0000000000c2" };
  claim_cpus ("rolling2", u2[0], "numa1", 5);
  resp = prepare (cpu_ch, PREPARE, n2, u2, 1);
  assert_string_equal (entry (resp, u2[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  hwloc_bitmap_t b = cdi_cpus (u2[0]);
  assert_false (hwloc_bitmap_intersects (a, b));

  /* Unprepare on the old one, then the twin stops: only its own sockets go. */
  const char *both[] = { uids[0], u2[0] };
  unprepare (cpu_ch, both, 2);
  assert_null (cdi_cpus (uids[0]));
  /* The twin answered the claim as prepared before; now it prepares it
   * afresh instead of answering from what it remembers. */
  resp = prepare (tch, PREPARE, names, uids, 1);
  assert_string_equal (entry (resp, uids[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  hwloc_bitmap_t again = cdi_cpus (uids[0]);
  assert_non_null (again);
  hwloc_bitmap_free (again);
  unprepare (tch, uids, 1);
  assert_null (cdi_cpus (uids[0]));
  kc_close (tch);
  kill (twin, SIGTERM);
  assert_int_equal (kc_wait_exit (twin, 15000), 0);
  assert_false (access (twin_sock, F_OK) == 0);
  assert_false (access (twin_reg, F_OK) == 0);
  assert_true (access (cpu_sock, F_OK) == 0);
  assert_true (access (cpu_reg, F_OK) == 0);
  hwloc_bitmap_free (a);
  hwloc_bitmap_free (b);
}

/* Marks a written claim as reserved for the pods of a PodGroup (KEP-5729). */
static void
reserve_for_group (const char *name, const char *group)
{
  char path[600];
  snprintf (path, sizeof (path), "%s/%s.json", claims_dir, name);
  json_t *c = json_load_file (path, 0, NULL);
  assert_non_null (c);
  json_object_set_new (json_object_get (c, "status"), "reservedFor",
                       json_pack ("[{s:s, s:s, s:s, s:s}]", "apiGroup", "scheduling.k8s.io", "resource", "podgroups",
                                  "name", group, "uid", "00000000-0000-4000-8000-0000000000f0"));
  assert_int_equal (json_dump_file (c, path, 0), 0);
  json_decref (c);
}

/* A claim shared by the pods of a PodGroup is prepared once on the node:
 * every later call (another pod, a kubelet retry) gets the same devices
 * and the same CPUs; a memory limit or guarantee, which would apply to
 * each container, is refused and nothing is held. */
static void
test_pod_group (void **state)
{
  (void) state;
  const char *uid = "00000000-0000-4000-8000-0000000000f1", *muid = "00000000-0000-4000-8000-0000000000f2";
  const char *name[] = { "group-cpus" }, *uids[] = { uid };
  claim_cpus (name[0], uid, "numa1", 2);
  reserve_for_group (name[0], "trainers");
  PrepareResponse *r1 = prepare (cpu_ch, PREPARE, name, uids, 1);
  PrepareClaimResponse *e1 = entry (r1, uid);
  assert_string_equal (e1->error, "");
  hwloc_bitmap_t first = cdi_cpus (uid);
  assert_non_null (first);
  assert_int_equal (hwloc_bitmap_weight (first), 2);
  PrepareResponse *r2 = prepare (cpu_ch, PREPARE, name, uids, 1);
  PrepareClaimResponse *e2 = entry (r2, uid);
  assert_string_equal (e2->error, "");
  assert_int_equal (e2->n_devices, e1->n_devices);
  assert_string_equal (e2->devices[0]->cdi_device_ids[0], e1->devices[0]->cdi_device_ids[0]);
  hwloc_bitmap_t again = cdi_cpus (uid);
  assert_true (hwloc_bitmap_isequal (first, again));
  hwloc_bitmap_free (first);
  hwloc_bitmap_free (again);
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (r1, NULL);
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (r2, NULL);

  const char *mname[] = { "group-mem" }, *muids[] = { muid };
  claim_memory (mname[0], muid, "numa1", "1Gi",
                "{\"apiVersion\":\"memory.nrm.io/v1alpha1\",\"kind\":\"MemoryConfig\","
                "\"guarantee\":true}");
  reserve_for_group (mname[0], "trainers");
  PrepareResponse *r3 = prepare (mem_ch, PREPARE, mname, muids, 1);
  const char *why = entry (r3, muid)->error;
  if (strstr (why, "PodGroup `trainers`") == NULL || strstr (why, "guarantee") == NULL)
    fail_msg ("a guarantee on a PodGroup claim: `%s`", why);
  char spec[600];
  snprintf (spec, sizeof (spec), "%s/" MEM_DRIVER "-%s.json", cdi_dir, muid);
  assert_int_equal (access (spec, F_OK), -1);
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (r3, NULL);
  /* Without it, the group's memory is held once and binds its nodes. */
  claim_memory (mname[0], muid, "numa1", "1Gi", NULL);
  reserve_for_group (mname[0], "trainers");
  PrepareResponse *r4 = prepare (mem_ch, PREPARE, mname, muids, 1);
  assert_string_equal (entry (r4, muid)->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (r4, NULL);
  char *mems = cdi_memory_env (muid, "NRM_MEMS"), *min = cdi_memory_env (muid, "NRM_MEMORY_MIN");
  assert_non_null (mems);
  assert_string_equal (mems, "1");
  assert_null (min);
  free (mems);

  /* Released once, after the last pod (the kubelet's single unprepare). */
  unprepare (cpu_ch, uids, 1);
  unprepare (mem_ch, muids, 1);
  snprintf (spec, sizeof (spec), "%s/" CPU_DRIVER "-%s.json", cdi_dir, uid);
  assert_int_equal (access (spec, F_OK), -1);
}

/* KEP-5304: with --device-metadata, every prepared request gets a file of
 * its devices on the host and a CDI spec that mounts it read-only into the
 * container, at the paths and in the format of the 1.36 kubelet library;
 * the spec's id follows the request's first device; unprepare removes both. */
static void
test_device_metadata (void **state)
{
  (void) state;
  const char *uid = "00000000-0000-4000-8000-00000000ad01", *tuid = "00000000-0000-4000-8000-00000000ad02";
  stop_plugin (SIGTERM);
  start_flag = "--device-metadata";
  start_plugin ();
  claim_cpus ("meta", uid, "numa1", 2);
  /* A claim from a template: its pod claim name names the container path. */
  char path[700], text[4096];
  snprintf (path, sizeof (path), "%s/meta-tmpl.json", claims_dir);
  char *r = cpu_result ("cpus", "numa0", 1);
  snprintf (text, sizeof (text),
            "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"name\":\"meta-tmpl\","
            "\"namespace\":\"default\",\"uid\":\"%s\",\"annotations\":{\"resource.kubernetes.io/pod-claim-name\":"
            "\"workers\"}},\"spec\":{},\"status\":{\"allocation\":{\"devices\":{\"results\":[%s]}}}}",
            tuid, r);
  free (r);
  FILE *f = fopen (path, "w");
  assert_non_null (f);
  fputs (text, f);
  fclose (f);

  const char *names[] = { "meta", "meta-tmpl" }, *uids[] = { uid, tuid };
  PrepareResponse *resp = prepare (cpu_ch, PREPARE, names, uids, 2);
  for (int c = 0; c < 2; c++)
    {
      PrepareClaimResponse *e = entry (resp, uids[c]);
      assert_string_equal (e->error, "");
      assert_int_equal (e->devices[0]->n_cdi_device_ids, 2);
      char want[200];
      snprintf (want, sizeof (want), CPU_DRIVER "/metadata=%s_cpus", uids[c]);
      assert_string_equal (e->devices[0]->cdi_device_ids[1], want);

      /* The host file: one DeviceMetadata object, newline-terminated. */
      snprintf (path, sizeof (path), "%s/plugins/" CPU_DRIVER "/dra-device-metadata/default_%s/cpus/metadata.json",
                kubelet_dir, names[c]);
      char *body = kc_slurp (path);
      assert_non_null (body);
      assert_true (body[0] && body[strlen (body) - 1] == '\n');
      json_error_t je;
      json_t *doc = json_loads (body, JSON_DISABLE_EOF_CHECK, &je);
      assert_non_null (doc);
      free (body);
      assert_string_equal (json_string_value (json_object_get (doc, "apiVersion")),
                           "metadata.resource.k8s.io/v1alpha1");
      assert_string_equal (json_string_value (json_object_get (doc, "kind")), "DeviceMetadata");
      json_t *md = json_object_get (doc, "metadata");
      assert_string_equal (json_string_value (json_object_get (md, "name")), names[c]);
      assert_string_equal (json_string_value (json_object_get (md, "namespace")), "default");
      assert_string_equal (json_string_value (json_object_get (md, "uid")), uids[c]);
      assert_int_equal (json_integer_value (json_object_get (md, "generation")), 1);
      if (c == 1)
        assert_string_equal (json_string_value (json_object_get (doc, "podClaimName")), "workers");
      else
        assert_null (json_object_get (doc, "podClaimName"));
      json_t *req = json_array_get (json_object_get (doc, "requests"), 0);
      assert_int_equal (json_array_size (json_object_get (doc, "requests")), 1);
      assert_string_equal (json_string_value (json_object_get (req, "name")), "cpus");
      json_t *dev = json_array_get (json_object_get (req, "devices"), 0);
      assert_string_equal (json_string_value (json_object_get (dev, "driver")), CPU_DRIVER);
      assert_string_equal (json_string_value (json_object_get (dev, "pool")), NODE);
      assert_string_equal (json_string_value (json_object_get (dev, "name")), c ? "numa0" : "numa1");
      /* The container reads its own CPUs there: those its environment has. */
      json_t *attrs = json_object_get (dev, "attributes");
      hwloc_bitmap_t env_cpus = cdi_cpus (uids[c]), meta_cpus = hwloc_bitmap_alloc ();
      assert_non_null (env_cpus);
      assert_int_equal (hwloc_bitmap_list_sscanf (
                            meta_cpus, json_string_value (json_object_get (json_object_get (attrs, "cpus"), "string"))),
                        0);
      assert_true (hwloc_bitmap_isequal (env_cpus, meta_cpus));
      assert_int_equal (hwloc_bitmap_weight (meta_cpus), c ? 1 : 2);
      hwloc_bitmap_free (env_cpus);
      assert_string_equal (json_string_value (json_object_get (json_object_get (attrs, "numaNodes"), "string")),
                           c ? "0" : "1");
      /* Cores by coreID (their first CPU), as the core devices name them. */
      hwloc_bitmap_t cores = hwloc_bitmap_alloc ();
      assert_int_equal (hwloc_bitmap_list_sscanf (
                            cores, json_string_value (json_object_get (json_object_get (attrs, "cores"), "string"))),
                        0);
      assert_int_equal (hwloc_bitmap_weight (cores), 1);
      if (c == 0) /* two CPUs: a whole core, named by its first CPU */
        assert_int_equal (hwloc_bitmap_first (cores), hwloc_bitmap_first (meta_cpus));
      /* That core is whole; one CPU of the 2n6c2t's two-thread core splits
       * it with the shared pool: partial. */
      const char *core_list = json_string_value (json_object_get (json_object_get (attrs, "cores"), "string"));
      const char *whole = json_string_value (json_object_get (json_object_get (attrs, "wholeCores"), "string"));
      const char *partial = json_string_value (json_object_get (json_object_get (attrs, "partialCores"), "string"));
      assert_non_null (whole);
      assert_non_null (partial);
      assert_string_equal (c ? partial : whole, core_list);
      assert_string_equal (c ? whole : partial, "");
      hwloc_bitmap_free (cores);
      hwloc_bitmap_free (meta_cpus);
      assert_int_equal (json_integer_value (json_object_get (json_object_get (attrs, "numaNode"), "int")), c ? 0 : 1);
      json_decref (doc);

      /* The CDI spec mounts it read-only where the 1.36 library puts it. */
      char spec_path[700], host[700], cont[700];
      snprintf (spec_path, sizeof (spec_path), "%s/" CPU_DRIVER "_metadata_%s_cpus.json", cdi_dir, uids[c]);
      json_t *spec = json_load_file (spec_path, 0, &je);
      assert_non_null (spec);
      assert_string_equal (json_string_value (json_object_get (spec, "kind")), CPU_DRIVER "/metadata");
      json_t *d0 = json_array_get (json_object_get (spec, "devices"), 0);
      snprintf (want, sizeof (want), "%s_cpus", uids[c]);
      assert_string_equal (json_string_value (json_object_get (d0, "name")), want);
      json_t *m = json_array_get (json_object_get (json_object_get (d0, "containerEdits"), "mounts"), 0);
      snprintf (host, sizeof (host), "%s", path);
      if (c == 0)
        snprintf (cont, sizeof (cont),
                  "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/meta/cpus/" CPU_DRIVER "-metadata.json");
      else
        snprintf (cont, sizeof (cont),
                  "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/workers/cpus/" CPU_DRIVER
                  "-metadata.json");
      assert_string_equal (json_string_value (json_object_get (m, "hostPath")), host);
      assert_string_equal (json_string_value (json_object_get (m, "containerPath")), cont);
      assert_string_equal (json_string_value (json_array_get (json_object_get (m, "options"), 0)), "ro");
      assert_string_equal (json_string_value (json_array_get (json_object_get (m, "options"), 1)), "bind");
      json_decref (spec);
    }
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);

  /* A restart rewrites a lost spec (the CDI directory is a tmpfs), even
   * without --device-metadata now: the claim's recorded answer names it.
   * What a crash left of claims that are gone is removed. */
  char lost[700], ghost_spec[700], ghost_dir[700];
  snprintf (lost, sizeof (lost), "%s/" CPU_DRIVER "_metadata_%s_cpus.json", cdi_dir, uid);
  assert_int_equal (unlink (lost), 0);
  snprintf (ghost_spec, sizeof (ghost_spec),
            "%s/" CPU_DRIVER "_metadata_00000000-0000-4000-8000-00000000dead_cpus.json", cdi_dir);
  f = fopen (ghost_spec, "w");
  assert_non_null (f);
  fputs ("{}", f);
  fclose (f);
  snprintf (ghost_dir, sizeof (ghost_dir), "%s/plugins/" CPU_DRIVER "/dra-device-metadata/default_ghost/cpus",
            kubelet_dir);
  char cmd[1600];
  snprintf (cmd, sizeof (cmd), "mkdir -p %s && touch %s/metadata.json", ghost_dir, ghost_dir);
  assert_int_equal (system (cmd), 0);
  stop_plugin (SIGTERM);
  start_flag = NULL;
  start_plugin ();
  assert_int_equal (access (lost, F_OK), 0);
  assert_int_equal (access (ghost_spec, F_OK), -1);
  snprintf (ghost_dir, sizeof (ghost_dir), "%s/plugins/" CPU_DRIVER "/dra-device-metadata/default_ghost", kubelet_dir);
  assert_int_equal (access (ghost_dir, F_OK), -1);
  snprintf (path, sizeof (path), "%s/plugins/" CPU_DRIVER "/dra-device-metadata/default_meta/cpus/metadata.json",
            kubelet_dir);
  assert_int_equal (access (path, F_OK), 0);

  /* Unprepare removes the files and the specs. */
  unprepare (cpu_ch, uids, 2);
  assert_int_equal (access (lost, F_OK), -1);
  snprintf (path, sizeof (path), "%s/plugins/" CPU_DRIVER "/dra-device-metadata/default_meta", kubelet_dir);
  assert_int_equal (access (path, F_OK), -1);
  snprintf (path, sizeof (path), "%s/" CPU_DRIVER "_metadata_%s_cpus.json", cdi_dir, tuid);
  assert_int_equal (access (path, F_OK), -1);
}

/* A claim that looks like a run of nrm run (namespace nrm-run, name
 * run-<pid>-<start time> of no such process) is a claim like any other:
 * the plugin's pass over stale runs, at start, leaves it prepared. */
static void
test_run_lookalike (void **state)
{
  (void) state;
  const char *names[] = { "run-1-1" }, *uids[] = { "00000000-0000-4000-8000-0000000000c1" };
  char spec[600], cp[600];
  snprintf (spec, sizeof (spec), "%s/" CPU_DRIVER "-%s.json", cdi_dir, uids[0]);
  snprintf (cp, sizeof (cp), "%s/" CPU_DRIVER ".checkpoint.json", state_dir);
  claim_ns = "nrm-run";
  claim_cpus (names[0], uids[0], "numa0", 1);
  PrepareResponse *resp = prepare (cpu_ch, PREPARE, names, uids, 1);
  claim_ns = "default";
  assert_string_equal (entry (resp, uids[0])->error, "");
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (resp, NULL);
  /* SIGTERM is taken only after the first pass over stale runs. */
  stop_plugin (SIGTERM);
  start_plugin ();
  stop_plugin (SIGTERM);
  char *text = kc_slurp (cp);
  assert_non_null (text);
  bool kept = strstr (text, uids[0]) != NULL, spec_kept = access (spec, F_OK) == 0;
  free (text);
  /* Serving again before any assertion: the later tests need the plugin. */
  start_plugin ();
  unprepare (cpu_ch, uids, 1);
  assert_false (log_contains ("releasing the claim of run run-1-1"));
  assert_true (kept);
  assert_true (spec_kept);
}

static double
now_s (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* SIGTERM while the kubelet holds idle connections to every socket: the
 * plugin ends within about a second, not after gRPC's grace per server. */
static void
test_sigterm_idle_clients (void **state)
{
  (void) state;
  char mem_reg[600];
  assert_true (plugin_pid > 0 && cpu_ch && mem_ch);
  snprintf (mem_reg, sizeof (mem_reg), "%s/plugins_registry/" MEM_DRIVER "-reg.sock", kubelet_dir);
  grpc_channel *reg_ch[2] = { kc_connect (cpu_reg), kc_connect (mem_reg) };
  grpc_channel *dra_ch[2] = { cpu_ch, mem_ch };
  const char *names[] = { "x" }, *uids[] = { "00000000-0000-4000-8000-0000000000c2" };
  size_t len;
  uint8_t *req = kc_pack_claims ("default", names, uids, 0, false, &len);
  for (int i = 0; i < 2; i++)
    {
      struct kc_reply r;
      /* One answered call on each: the connections are up, then idle. */
      assert_int_equal (kc_unary (dra_ch[i], PREPARE, req, len, 10000, &r), 0);
      assert_int_equal (r.status, GRPC_STATUS_OK);
      kc_reply_done (&r);
      assert_int_equal (
          kc_unary (reg_ch[i], "/pluginregistration.Registration/GetInfo", (const uint8_t *) "", 0, 10000, &r), 0);
      assert_int_equal (r.status, GRPC_STATUS_OK);
      kc_reply_done (&r);
    }
  free (req);
  double t0 = now_s ();
  kill (plugin_pid, SIGTERM);
  int rc = kc_wait_exit (plugin_pid, 15000);
  double took = now_s () - t0;
  fprintf (stderr, "SIGTERM with 4 idle client connections: exit %d after %.3f s (goal: under 1 s)\n", rc, took);
  plugin_pid = -1;
  for (int i = 0; i < 2; i++)
    {
      kc_close (reg_ch[i]);
      kc_close (dra_ch[i]);
    }
  cpu_ch = mem_ch = NULL;
  assert_int_equal (rc, 0);
  assert_true (took < 2.0);
  start_plugin ();
}

static int
setup (void **state)
{
  (void) state;
  if (getenv ("NRM") == NULL || getenv ("NRM_TOPOLOGIES") == NULL)
    {
      fprintf (stderr, "SKIP: run through make check\n");
      exit (77);
    }
  snprintf (root, sizeof (root), "/tmp/nrm-plugin-XXXXXX");
  assert_non_null (mkdtemp (root));
  snprintf (kubelet_dir, sizeof (kubelet_dir), "%s/kubelet", root);
  snprintf (cdi_dir, sizeof (cdi_dir), "%s/cdi", root);
  snprintf (state_dir, sizeof (state_dir), "%s/state", root);
  snprintf (claims_dir, sizeof (claims_dir), "%s/claims", root);
  snprintf (log_path, sizeof (log_path), "%s/plugin.log", root);
  mkdir (claims_dir, 0700);
  mkdir (state_dir, 0700);
  snprintf (cpu_sock, sizeof (cpu_sock), "%s/plugins/" CPU_DRIVER "/dra.sock", kubelet_dir);
  snprintf (cpu_reg, sizeof (cpu_reg), "%s/plugins_registry/" CPU_DRIVER "-reg.sock", kubelet_dir);
  snprintf (mem_sock, sizeof (mem_sock), "%s/plugins/" MEM_DRIVER "/dra.sock", kubelet_dir);
  grpc_init ();
  start_plugin ();
  return 0;
}

static int
teardown (void **state)
{
  (void) state;
  if (plugin_pid > 0)
    stop_plugin (SIGTERM);
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
    cmocka_unit_test (test_registration),  cmocka_unit_test (test_prepare_mixed),
    cmocka_unit_test (test_opaque_config), cmocka_unit_test (test_memory_and_beta),
    cmocka_unit_test (test_memory_config), cmocka_unit_test (test_memory_policy),
    cmocka_unit_test (test_health),        cmocka_unit_test (test_health_offline),
    cmocka_unit_test (test_partition),     cmocka_unit_test (test_concurrent),
    cmocka_unit_test (test_restart),       cmocka_unit_test (test_device_metadata),
    cmocka_unit_test (test_pod_group),     cmocka_unit_test (test_memory_restart),
    cmocka_unit_test (test_refusals),      cmocka_unit_test (test_rolling_update),
    cmocka_unit_test (test_run_lookalike), cmocka_unit_test (test_sigterm_idle_clients),
  };
  return cmocka_run_group_tests_name ("plugin protocol", tests, setup, teardown);
}
