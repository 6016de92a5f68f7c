/* SPDX-License-Identifier: Apache-2.0 */
/* main() of nrm-agent: the commands that need gRPC and libnuma (nrm
 * plugin, nrm run, nrm controller), and those of nrm besides. */
#include "config.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/k8s/kube.h"
#include "driver/names.h"
#include "driver/registry.h"
#include "nrm/agent.h"
#include "nrm/base/cleanup.h"
#include "nrm/cli.h"
#include "nrm/controller.h"
#include "nrm/kubectl.h"
#include "nrm/logging.h"
#include "nrm/run.h"
#include "nrm/setup.h"

/* Serves every enabled driver until SIGTERM or SIGINT. Signals are blocked
 * before any thread starts (gRPC's own threads inherit the mask) and taken
 * here with sigwait(): no gRPC call ever runs in a signal handler. */
static int
cmd_plugin (struct nrm_cli *cli, nrm_error_t *err)
{
  struct nrm_config *c = &cli->cfg;
  enum nrm_log_level level = NRM_LOG_INFO;
  struct nrm_agent *agent = NULL;
  sigset_t set;

  /* Before any thread starts: one malloc arena instead of one per thread
   * (up to 8 per CPU) for gRPC's, libcurl's and libmicrohttpd's threads
   * (docs/plugin.md, memory). */
  mallopt (M_ARENA_MAX, 1);
  nrm_log_parse_level (c->log_level, &level);
  nrm_log_setup (level, strcmp (c->log_format, "json") == 0);
  sigemptyset (&set);
  sigaddset (&set, SIGTERM);
  sigaddset (&set, SIGINT);
  pthread_sigmask (SIG_BLOCK, &set, NULL);
  signal (SIGPIPE, SIG_IGN);
  if (nrm_agent_start (c, cli->root, &agent, err) < 0)
    return -1;
  int sig = nrm_agent_wait (agent, &set);
  nrm_log (NULL, NRM_LOG_INFO, "%s: finishing calls in flight and stopping", strsignal (sig));
  nrm_agent_stop (agent);
  return 0;
}

static int
cmd_run (struct nrm_cli *cli, nrm_error_t *err)
{
  struct nrm_topology *t = NULL;
  enum nrm_log_level level = NRM_LOG_INFO;
  struct nrm_run_request *rq = &cli->run;
  if (cli->cfg.topology && !rq->dry_run)
    return nrm_error_set (err, EINVAL,
                          "run: the command runs on this machine; --topology is only for --dry-run (a preview)");
  if (cli->json && !rq->dry_run)
    return nrm_error_set (err, EINVAL, "run: --json is only for --dry-run");
  if (rq->attach_pid && rq->argv)
    return nrm_error_set (err, EINVAL, "run: `--pid %d` and a command `%s`: give one or the other", rq->attach_pid,
                          rq->argv[0]);
  if (rq->attach_pid && cli->cfg.topology)
    return nrm_error_set (err, EINVAL, "run: `--pid %d` names a process on this machine, not on --topology",
                          rq->attach_pid);
  if (rq->argv == NULL && !rq->dry_run && !rq->attach_pid)
    return nrm_error_set (err, EINVAL,
                          "run: no command given (nrm run --cpus N -- COMMAND..., or --pid PID for a running one)");
  if (rq->cpu_list)
    {
      unsigned n = (unsigned) hwloc_bitmap_weight (rq->cpu_list);
      cleanup_free char *list = nrm_cpulist_format (rq->cpu_list);
      if (rq->cpus && rq->cpus != n)
        return nrm_error_set (err, EINVAL, "run: `--physcpubind %s` names %u CPU%s, --cpus asks for %u", list, n,
                              n == 1 ? "" : "s", rq->cpus);
      if (rq->cpu_nodes)
        return nrm_error_set (
            err, EINVAL, "run: `--physcpubind %s` and --cpunodebind (or --numa-node): the CPUs name their nodes", list);
      rq->cpus = n;
    }
  if (rq->cpus == 0)
    return nrm_error_set (err, EINVAL, "run: --cpus N (or --physcpubind LIST) is required");
  if (!rq->dry_run && nrm_setup_check_state_dir (&cli->cfg, "run", err) < 0)
    return -1;
  nrm_log_parse_level (cli->cfg.log_level, &level);
  nrm_log_setup (level, strcmp (cli->cfg.log_format, "json") == 0);
  {
    cleanup_json json_t *kubelet = NULL;
    /* A run's stderr is its command's too: only at debug level. */
    if (nrm_setup_kubelet (&cli->cfg, "run", rq->dry_run ? -1 : NRM_LOG_DEBUG, &kubelet, err) < 0)
      return -1;
  }
  if (nrm_setup_machine (&cli->cfg, cli->root, &t, err) < 0)
    return -1;
  cli->options[cli->n_options] = NULL;
  rq->options = cli->options;
  rq->json = cli->json;
  cleanup_free char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);
  int r = f ? nrm_cmd_run (&cli->cfg, cli->root, t, rq, f, &cli->status, err)
            : nrm_error_errno (err, errno, "open_memstream");
  if (f)
    fclose (f);
  nrm_topology_free (t);
  return r < 0 ? -1 : nrm_cli_emit (buf, len, err);
}

/* nrm controller: see nrm/controller.h. */
static int
cmd_controller (struct nrm_cli *cli, nrm_error_t *err)
{
  struct nrm_config *c = &cli->cfg;
  struct nrm_registry *reg = NULL;
  struct nrm_kube *kube = NULL;
  struct nrm_driver_selection sel;
  cleanup_json json_t *names = NULL;
  enum nrm_log_level level = NRM_LOG_INFO;
  char host[256] = "";
  sigset_t set;
  int r = -1;
  nrm_log_parse_level (c->log_level, &level);
  nrm_log_setup (level, strcmp (c->log_format, "json") == 0);
  if (c->kubeconfig == NULL && !nrm_kube_in_cluster ())
    return nrm_error_set (err, EINVAL, "controller: give --kubeconfig (outside a pod)");
  sigemptyset (&set);
  sigaddset (&set, SIGTERM);
  sigaddset (&set, SIGINT);
  pthread_sigmask (SIG_BLOCK, &set, NULL);
  signal (SIGPIPE, SIG_IGN);
  nrm_config_drivers (c, &sel);
  if (nrm_registry_new (&reg, err) < 0)
    return -1;
  if ((c->driver_dir && nrm_registry_load_dir (reg, c->driver_dir, err) < 0)
      || (names = nrm_registry_names (reg, &sel, err)) == NULL)
    goto out;
  struct nrm_kube_options ko;
  nrm_kube_options_init (&ko);
  ko.kubeconfig = c->kubeconfig;
  ko.qps = c->api_qps;
  ko.burst = (int) c->api_burst;
  if (nrm_kube_new (&ko, &kube, err) < 0)
    goto out;
  const char *ns = c->lease_namespace ? c->lease_namespace : getenv ("POD_NAMESPACE");
  const char *id = getenv ("POD_NAME");
  if (id == NULL || *id == '\0')
    {
      gethostname (host, sizeof (host) - 1);
      id = host;
    }
  if (ns == NULL || *ns == '\0')
    ns = "nrm-system";
  if (!nrm_is_dns_label (ns))
    {
      nrm_error_set (err, EINVAL, "controller: lease namespace `%s` is not a DNS label", ns);
      goto out;
    }
  r = nrm_cmd_controller (kube, names, ns, id, &set, err);
out:
  nrm_kube_free (kube);
  nrm_registry_free (reg);
  return r;
}

int
main (int argc, char **argv)
{
  static const struct nrm_command commands[] = {
    { "topology", nrm_cli_topology, NULL }, { "slices", nrm_cli_slices, NULL },   { "status", nrm_cli_status, NULL },
    { "hook", nrm_cli_hook, NULL },         { "plugin", cmd_plugin, NULL },       { "run", cmd_run, NULL },
    { "controller", cmd_controller, NULL }, { "kubectl", nrm_cli_kubectl, NULL },
  };
  return nrm_cli_main (argc, argv, commands, sizeof (commands) / sizeof (commands[0]));
}
