/* SPDX-License-Identifier: Apache-2.0 */
/* nrm plugin's agent (nrm/agent.h) started and stopped in this process: a
 * recorded machine, a temporary kubelet and state directory, claims from a
 * directory, no API server. It serves (its sockets answer the kubelet's
 * registration call), and it stops cleanly: its threads gone, its sockets
 * removed. */
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nrm/agent.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"
#include "nrm/logging.h"
#include "tests/plugin/kubelet.h"
#include "tests/unit/fakefs.h"

#define TOPO_2N "24em64t-2n6c2t-pci.xml"

/* This process's threads. */
static int
threads (void)
{
  int n = 0;
  DIR *d = opendir ("/proc/self/task");
  struct dirent *e;
  assert_non_null (d);
  while ((e = readdir (d)) != NULL)
    n += e->d_name[0] != '.';
  closedir (d);
  return n;
}

static bool
is_socket (const char *path)
{
  struct stat st;
  return stat (path, &st) == 0 && S_ISSOCK (st.st_mode);
}

static void
set (char **field, const char *value)
{
  nrm_error_t err = NULL;
  assert_int_equal (nrm_config_set_string (field, value, &err), 0);
}

static void
test_start_stop (void **state)
{
  (void) state;
  char base[] = "/tmp/nrm-agent-XXXXXX";
  nrm_error_t err = NULL;
  struct nrm_config c;
  struct nrm_agent *a = NULL;
  assert_non_null (mkdtemp (base));
  cleanup_free char *kubelet = xasprintf ("%s/k", base), *cdi = xasprintf ("%s/cdi", base);
  cleanup_free char *state_dir = xasprintf ("%s/state", base), *claims = xasprintf ("%s/claims", base);
  assert_int_equal (nrm_mkdir_p (claims, 0700, &err), 0);
  const char *dir = getenv ("NRM_TOPOLOGIES");
  cleanup_free char *topo = xasprintf ("%s/%s", dir ? dir : "tests/topologies", TOPO_2N);
  unsetenv ("KUBERNETES_SERVICE_HOST");

  nrm_config_init (&c);
  set (&c.topology, topo);
  set (&c.node_name, "node-a");
  set (&c.drivers, "cpu,memory");
  set (&c.kubelet_dir, kubelet);
  set (&c.cdi_dir, cdi);
  set (&c.state_dir, state_dir);
  set (&c.claims_dir, claims);
  set (&c.hook_path, "");
  c.create_state_dir = true;
  if (nrm_config_finish (&c, &err) < 0 || nrm_config_resolve_node (&c, NULL, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  nrm_log_setup (NRM_LOG_WARNING, false);
  int before = threads ();
  /* The client's: the kubelet's side of the calls. */
  grpc_init ();

  if (nrm_agent_start (&c, fake_root (c.fsroot), &a, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  char *reg[2] = { NULL, NULL }, *dra[2] = { NULL, NULL }; /* freed below */
  for (size_t i = 0; i < 2; i++)
    {
      struct nrm_plugin *p = nrm_agent_plugin (a, i);
      assert_non_null (p);
      reg[i] = xstrdup (nrm_plugin_registration_socket (p));
      dra[i] = xstrdup (nrm_plugin_dra_socket (p));
      assert_true (is_socket (reg[i]));
      assert_true (is_socket (dra[i]));
      Pluginregistration__PluginInfo *info = kc_get_info (reg[i], 2000);
      assert_non_null (info);
      assert_string_equal (info->name, i == 0 ? "cpu.nrm.io" : "memory.nrm.io");
      pluginregistration__plugin_info__free_unpacked (info, NULL);
    }
  assert_null (nrm_agent_plugin (a, 2));
  cleanup_free char *settings = xasprintf ("%s/settings.json", state_dir);
  assert_int_equal (access (settings, F_OK), 0);
  assert_true (threads () > before);

  nrm_agent_stop (a);
  for (size_t i = 0; i < 2; i++)
    {
      assert_int_equal (access (reg[i], F_OK), -1);
      assert_int_equal (access (dra[i], F_OK), -1);
      free (reg[i]);
      free (dra[i]);
    }
  /* gRPC's threads end with its last user, this client. */
  grpc_shutdown ();
  for (int ms = 0; threads () != before && ms < 5000; ms += 10)
    nanosleep (&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);

  assert_int_equal (threads (), before);

  nrm_config_done (&c);
  cleanup_free char *cmd = xasprintf ("rm -rf '%s'", base);
  assert_int_equal (system (cmd), 0);
}

/* A setting that is wrong fails the start, and nothing is left running. */
static void
test_bad_start (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  struct nrm_config c;
  struct nrm_agent *a = NULL;
  nrm_config_init (&c);
  set (&c.node_name, "node-a");
  c.claims_dir = NULL;
  unsetenv ("KUBERNETES_SERVICE_HOST");
  if (nrm_config_finish (&c, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  int before = threads ();
  assert_int_equal (nrm_agent_start (&c, fake_root (c.fsroot), &a, &err), -1);
  assert_null (a);
  assert_non_null (strstr (nrm_error_msg (err), "no claim source"));
  nrm_error_release (&err);
  assert_int_equal (threads (), before);
  nrm_config_done (&c);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_start_stop),
    cmocka_unit_test (test_bad_start),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
