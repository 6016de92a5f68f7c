/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <stdarg.h>
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nrm/commit.h"
#include "cpuset/partition.h"
#include "cpuset/watch.h"
#include "cpuset/placement.h"
#include "driver/devices.h"
#include "nrm/base/quantity.h"
#include "driver/k8s/binding.h"
#include "driver/k8s/handover.h"
#include "driver/k8s/nodeview.h"
#include "driver/registry.h"
#include "driver/k8s/kube.h"
#include "driver/kubelet/plugin.h"
#include "driver/k8s/publish.h"
#include "nrm/base/fs.h"
#ifdef NRM_AGENT
#include "nrm/http.h"
#include "nrm/metrics.h"
#endif
#include "nrm/log.h"
#include "nrm/run.h"
#include "nrm/settings.h"
#include "nrm/status.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/conf.h"
#include "nrm/controller.h"
#include "driver/names.h"
#include "topology/topology.h"

#define EXIT_USAGE 2

static const char usage_text[]
    = "Usage: nrm COMMAND [OPTIONS]\n"
      "\n"
      "nrm publishes this node's CPUs, memory and PCI devices as NUMA-aware Kubernetes DRA devices.\n"
      "\n"
      "Commands:\n"
      "  topology   show the machine as nrm models it (packages, NUMA nodes, caches, cores, PCI)\n"
      "  slices     print the node's ResourceSlices (resource.k8s.io/v1) as one List document\n"
      "  plugin     serve the enabled drivers (CPU, memory, PCI, ...) to the kubelet (DRA kubelet plugin)\n"
      "  run        run a command on CPUs (and memory) picked as for a claim, then release them:\n"
      "             nrm run {--cpus N | -C LIST} [-N NODES] [--membind NODES] [--memory SIZE]\n"
      "             [--dry-run [--json] [-t FILE]] -- COMMAND...\n"
      "             nrm run --pid PID {--cpus N | -C LIST} ...: move a running process onto them\n"
      "  controller the cluster's one binding-conditions controller (a Deployment beside the\n"
      "             DaemonSet): labels each claim that waits for binding conditions on an nrm\n"
      "             device with its node, so that each node watches only its own claims\n"
      "  status     what nrm has handed out: pools (PCI functions with their holders and those\n"
      "             left to other drivers), claims and runs (their CPUs' whole and partial cores, L3\n"
      "             groups, packages and NUMA nodes), exclusive and shared CPUs\n"
      "             (options: --json, --state-dir, --kubelet-dir, --drivers, --driver-dir, and\n"
      "             those of every command)\n"
      "  hook       OCI createRuntime hook: bind a new container to its claim's CPUs and memory\n"
      "             nodes (the runtime runs it from the CDI spec, with the OCI state on stdin)\n"
      "  help       show this help\n"
      "  version    show the version\n"
      "\n"
      "Options of every command:\n"
      "  -c, --config FILE          YAML or JSON config file; flags override it (docs/configuration.md)\n"
      "  -t, --topology FILE        read an hwloc XML export instead of this machine\n"
      "      --node-name NAME       Kubernetes node name (default: $NODE_NAME, else the host name)\n"
      "      --reserved-cpus LIST   CPUs never handed out, e.g. 0-1 (like reservedSystemCPUs)\n"
      "      --isolated-cpus LIST   isolated CPUs (default: /sys/devices/system/cpu/isolated\n"
      "                             on this machine, none for an XML file)\n"
      "      --reserved-memory SPEC memory kept back on a NUMA node, in the kubelet's format:\n"
      "                             NODE:memory=AMOUNT[,hugepages-SIZE=AMOUNT]; repeatable\n"
      "      --cpu-mode MODE        numa (default): one consumable CPU device per NUMA node;\n"
      "                             partitioned: exclusive node, L3-group and core devices\n"
      "      --cpu-options LIST     node-wide CPU placement options, the kubelet's names:\n"
      "                             full-pcpus-only, distribute-cpus-across-cores,\n"
      "                             strict-cpu-reservation, prefer-align-cpus-by-uncorecache\n"
      "                             (a claim's CPUConfig replaces them; distribute-cpus-\n"
      "                             across-numa and align-by-socket are refused: a request\n"
      "                             lies on one NUMA node)\n"
      "      --feature-gates LIST   API server gates the slices may use, e.g.\n"
      "                             DRAListTypeAttributes=true,DRANodeAllocatableResources=true\n"
      "      --kubernetes-version V the API server's release, e.g. 1.37, whose field shapes\n"
      "                             the slices take (1.36; plugin: asked of the API server)\n"
      "      --fsroot DIR           prefix of /sys for the files nrm reads itself ($NRM_FSROOT)\n"
      "  -h, --help                 show this help\n"
      "\n"
      "Options of slices, status, plugin and controller:\n"
      "      --drivers LIST         the drivers to serve, by id (default: every one; built in:\n"
      "                             cpu, memory, pci)\n"
      "      --driver-dir DIR       load every driver DIR/*.so as well (docs/architecture.md)\n"
      "      --kubelet-dir DIR      kubelet root with plugins/ and plugins_registry/\n"
      "                             (/var/lib/kubelet), where the PCI driver sees other drivers\n"
      "                             (it reads them under --fsroot; not controller), and whose\n"
      "                             config.yaml (config key kubeletConfig) plugin, status and run\n"
      "                             read: its reserved CPUs and memory adopted, or refused when\n"
      "                             they differ from nrm's\n"
      "\n"
      "Options of topology:\n"
      "      --json                 print the whole model as JSON\n"
      "      --hardware             numactl -H's view: each node's CPUs, size and free memory\n"
      "                             (live machine only), the distance table\n"
      "\n"
      "Options of plugin (and --kubelet-dir above):\n"
      "      --cdi-dir DIR          where CDI specs are written (/var/run/cdi)\n"
      "      --state-dir DIR        checkpoints and locks (/var/lib/nrm); it must exist, except\n"
      "                             the default, which is created\n"
      "      --create-state-dir     create a missing --state-dir (plugin and run)\n"
      "      --allow-no-cpuset      serve although cgroup v2 has no cpuset controller (cgroup\n"
      "                             v1 or hybrid): the hook cannot bind containers, and fails\n"
      "                             those with claims; for trying the protocol only\n"
      "      --kubeconfig FILE      the Kubernetes API for claims and ResourceSlices (in a pod:\n"
      "                             its service account, without this flag)\n"
      "      --claims-dir DIR       read ResourceClaims from the *.json files in DIR instead\n"
      "      --no-publish           do not publish ResourceSlices\n"
      "      --device-metadata      give every container a metadata file of its devices\n"
      "                             (KEP-5304) under /var/run/kubernetes.io/dra-device-attributes\n"
      "      --api-qps N            API requests per second (20), --api-burst N above it (100)\n"
      "      --http-address A:PORT  serve /healthz, /readyz and /metrics (Prometheus) there\n"
      "      --min-shared-cpus N    allocatable CPUs that always stay shared (1)\n"
      "      --reconcile-interval S seconds between passes that keep every container on the\n"
      "                             shared pool or its claim's CPUs (5; 0 turns it off)\n"
      "      --shared-pool-cgroups LIST  the host's cgroup subtrees kept on the shared pool\n"
      "                             besides the pods, e.g. system.slice,user.slice,machine.slice\n"
      "                             (bare metal: services, sessions, podman; \"\" for none)\n"
      "      --hook-path PATH       the nrm-hook executable the CDI specs' hook runs (the one\n"
      "                             beside this nrm; \"\" for no hook)\n"
      "      --instance-uid UID     rolling-update mode: UID in the socket names, so two\n"
      "                             instances can serve side by side; the one that started\n"
      "                             last writes the slices and cpusets\n"
      "      --log-level LEVEL      error, warning, info (default) or debug\n"
      "      --log-format FORMAT    plain (default) or json\n"
      "\n"
      "Options of controller (and --kubeconfig, --api-qps, --api-burst, --drivers, --driver-dir,\n"
      "--log-level, --log-format as for plugin):\n"
      "      --lease-namespace NS   namespace of its leader-election Lease (default:\n"
      "                             $POD_NAMESPACE, else nrm-system)\n"
      "\n"
      "Options of run (and --state-dir, --create-state-dir, --cpu-options, --min-shared-cpus as\n"
      "for plugin):\n"
      "      --cpus N               exclusive CPUs for the command\n"
      "      --memory SIZE          memory on the same NUMA node, also its limit (e.g. 1Gi)\n"
      "      --hugepages-2Mi SIZE   2 MiB huge pages on that node (e.g. 64Mi); --hugepages-1Gi too\n"
      "      --memory-kind KIND     memory (and the binding) from the nearest node of this kind with\n"
      "                             room: DRAM, HBM, NVM (nrm topology shows each node's kind)\n"
      "      --memory-tier N        likewise by tier, 0 the fastest kind on the machine\n"
      "  -C, --physcpubind LIST     exactly these CPUs (as numactl -C, taskset -c); refused, naming\n"
      "                             the holder, when a claim or run holds one\n"
      "  -N, --cpunodebind NODES    CPUs from these NUMA nodes only (default: the first node with\n"
      "                             room, else several, nearest first); --numa-node K is -N K\n"
      "  -m, --membind NODES        memory from these nodes only (default: the CPUs' nodes)\n"
      "  -i, --interleave NODES     memory interleaved over these nodes\n"
      "  -p, --preferred NODE       memory from this node first\n"
      "  -l, --localalloc           memory from the node of the CPU that touches it\n"
      "      --dry-run              print what would be taken and why (cores, L3 groups, NUMA\n"
      "                             nodes, distances, what else is held); take nothing, run\n"
      "                             nothing; with --json as JSON, with -t FILE on a recorded\n"
      "                             machine (holding nothing unless --state-dir is given)\n"
      "      --isolated             isolated CPUs (see --isolated-cpus) instead of allocatable ones\n"
      "      --partition MODE       root or isolated: the run's cgroup becomes a cpuset partition\n"
      "                             (Linux 6.7+), so no other task runs on its CPUs even if it\n"
      "                             sets its own affinity; refused where the kernel cannot (off:\n"
      "                             none; default: the node's cpu.partition, where it can)\n"
      "      --option NAME          a CPU placement option for this run (repeatable)\n"
      "      --pid PID              no command: move running process PID (every thread) onto the\n"
      "                             CPUs, its pages onto their memory nodes, and hold them until\n"
      "                             it exits (as taskset -a -p); SIGINT or SIGTERM puts it back\n"
      "  The command runs in a transient cgroup v2 (nrm.slice/run-<pid>), or, without a\n"
      "  cgroup v2 cpuset, pinned with sched_setaffinity and set_mempolicy. The CPUs come from\n"
      "  the same state as nrm plugin's, so both can run side by side.\n"
      "\n"
      "Options of hook: --fsroot, --state-dir (as for plugin).\n"
      "\n"
      "Exit status: 0 on success, 1 when the machine or a setting is unusable, 2 for bad usage.\n"
      "nrm run, as timeout(1) and env(1): the command's own status (128 + N when signal N\n"
      "killed it); 125 when nrm fails before the command starts (bad usage, no room); 126\n"
      "when the command cannot be executed; 127 when it is not found. nrm run --pid: 0 when\n"
      "the process exits, 128 + N when signal N ends nrm run (the process is put back).\n";

enum
{
  OPT_NODE_NAME = 256,
  OPT_RESERVED_CPUS,
  OPT_ISOLATED_CPUS,
  OPT_RESERVED_MEMORY,
  OPT_CPU_MODE,
  OPT_CPU_OPTIONS,
  OPT_FEATURE_GATES,
  OPT_KUBERNETES_VERSION,
  OPT_FSROOT,
  OPT_JSON,
  OPT_HARDWARE,
  OPT_KUBELET_DIR,
  OPT_CDI_DIR,
  OPT_STATE_DIR,
  OPT_CLAIMS_DIR,
  OPT_INSTANCE_UID,
  OPT_LOG_LEVEL,
  OPT_LOG_FORMAT,
  OPT_MIN_SHARED,
  OPT_RECONCILE,
  OPT_SHARED_POOL_CGROUPS,
  OPT_HOOK_PATH,
  OPT_CPUS,
  OPT_MEMORY,
  OPT_HUGEPAGES_2MI,
  OPT_HUGEPAGES_1GI,
  OPT_MEMORY_KIND,
  OPT_MEMORY_TIER,
  OPT_ISOLATED,
  OPT_RUN_PARTITION,
  OPT_NUMA_NODE,
  OPT_OPTION,
  OPT_KUBECONFIG,
  OPT_NO_PUBLISH,
  OPT_API_QPS,
  OPT_API_BURST,
  OPT_HTTP_ADDRESS,
  OPT_DRIVERS,
  OPT_DRIVER_DIR,
  OPT_DEVICE_METADATA,
  OPT_LEASE_NAMESPACE,
  OPT_CREATE_STATE_DIR,
  OPT_ALLOW_NO_CPUSET,
  OPT_DRY_RUN,
  OPT_PID,
};

/* The commands, as bits: an option names those that take it, and any
 * other refuses it. */
enum
{
  CMD_TOPOLOGY = 1 << 0,
  CMD_SLICES = 1 << 1,
  CMD_PLUGIN = 1 << 2,
  CMD_RUN = 1 << 3,
  CMD_STATUS = 1 << 4,
  CMD_HOOK = 1 << 5,
  CMD_CONTROLLER = 1 << 6,
  CMD_ALL = (1 << 7) - 1,
};
static const char *const command_names[] = { "topology", "slices", "plugin", "run", "status", "hook", "controller" };

/* Every option, once: its name, argument, value and the commands that
 * take it (the config file keys are in docs/configuration.md). */
struct cli_option
{
  const char *name;
  int has_arg;
  int val;
  unsigned commands;
};

static const struct cli_option cli_options[] = {
  { "config", required_argument, 'c', CMD_ALL },
  { "topology", required_argument, 't', CMD_ALL },
  { "node-name", required_argument, OPT_NODE_NAME, CMD_ALL },
  { "reserved-cpus", required_argument, OPT_RESERVED_CPUS, CMD_ALL },
  { "isolated-cpus", required_argument, OPT_ISOLATED_CPUS, CMD_ALL },
  { "reserved-memory", required_argument, OPT_RESERVED_MEMORY, CMD_ALL },
  { "cpu-mode", required_argument, OPT_CPU_MODE, CMD_ALL },
  { "cpu-options", required_argument, OPT_CPU_OPTIONS, CMD_ALL },
  { "feature-gates", required_argument, OPT_FEATURE_GATES, CMD_ALL },
  { "kubernetes-version", required_argument, OPT_KUBERNETES_VERSION, CMD_ALL },
  { "fsroot", required_argument, OPT_FSROOT, CMD_ALL },
  { "json", no_argument, OPT_JSON, CMD_TOPOLOGY | CMD_STATUS | CMD_RUN },
  { "hardware", no_argument, OPT_HARDWARE, CMD_TOPOLOGY },
  { "kubelet-dir", required_argument, OPT_KUBELET_DIR, CMD_PLUGIN | CMD_SLICES | CMD_STATUS },
  { "cdi-dir", required_argument, OPT_CDI_DIR, CMD_PLUGIN },
  { "state-dir", required_argument, OPT_STATE_DIR, CMD_PLUGIN | CMD_RUN | CMD_STATUS | CMD_HOOK },
  { "claims-dir", required_argument, OPT_CLAIMS_DIR, CMD_PLUGIN },
  { "instance-uid", required_argument, OPT_INSTANCE_UID, CMD_PLUGIN },
  { "log-level", required_argument, OPT_LOG_LEVEL, CMD_PLUGIN | CMD_CONTROLLER },
  { "log-format", required_argument, OPT_LOG_FORMAT, CMD_PLUGIN | CMD_CONTROLLER },
  { "min-shared-cpus", required_argument, OPT_MIN_SHARED, CMD_PLUGIN | CMD_RUN },
  { "reconcile-interval", required_argument, OPT_RECONCILE, CMD_PLUGIN },
  { "shared-pool-cgroups", required_argument, OPT_SHARED_POOL_CGROUPS, CMD_PLUGIN },
  { "hook-path", required_argument, OPT_HOOK_PATH, CMD_PLUGIN },
  { "cpus", required_argument, OPT_CPUS, CMD_RUN },
  { "memory", required_argument, OPT_MEMORY, CMD_RUN },
  { "hugepages-2Mi", required_argument, OPT_HUGEPAGES_2MI, CMD_RUN },
  { "hugepages-1Gi", required_argument, OPT_HUGEPAGES_1GI, CMD_RUN },
  { "memory-kind", required_argument, OPT_MEMORY_KIND, CMD_RUN },
  { "memory-tier", required_argument, OPT_MEMORY_TIER, CMD_RUN },
  { "isolated", no_argument, OPT_ISOLATED, CMD_RUN },
  { "partition", required_argument, OPT_RUN_PARTITION, CMD_RUN },
  { "numa-node", required_argument, OPT_NUMA_NODE, CMD_RUN },
  { "option", required_argument, OPT_OPTION, CMD_RUN },
  { "dry-run", no_argument, OPT_DRY_RUN, CMD_RUN },
  { "pid", required_argument, OPT_PID, CMD_RUN },
  /* numactl's names and letters. */
  { "physcpubind", required_argument, 'C', CMD_RUN },
  { "cpunodebind", required_argument, 'N', CMD_RUN },
  { "membind", required_argument, 'm', CMD_RUN },
  { "interleave", required_argument, 'i', CMD_RUN },
  { "preferred", required_argument, 'p', CMD_RUN },
  { "localalloc", no_argument, 'l', CMD_RUN },
  { "kubeconfig", required_argument, OPT_KUBECONFIG, CMD_PLUGIN | CMD_CONTROLLER },
  { "no-publish", no_argument, OPT_NO_PUBLISH, CMD_PLUGIN },
  { "device-metadata", no_argument, OPT_DEVICE_METADATA, CMD_PLUGIN },
  { "api-qps", required_argument, OPT_API_QPS, CMD_PLUGIN | CMD_CONTROLLER },
  { "api-burst", required_argument, OPT_API_BURST, CMD_PLUGIN | CMD_CONTROLLER },
  { "http-address", required_argument, OPT_HTTP_ADDRESS, CMD_PLUGIN },
  { "drivers", required_argument, OPT_DRIVERS, CMD_SLICES | CMD_STATUS | CMD_PLUGIN | CMD_CONTROLLER },
  { "driver-dir", required_argument, OPT_DRIVER_DIR, CMD_SLICES | CMD_STATUS | CMD_PLUGIN | CMD_CONTROLLER },
  { "lease-namespace", required_argument, OPT_LEASE_NAMESPACE, CMD_CONTROLLER },
  { "create-state-dir", no_argument, OPT_CREATE_STATE_DIR, CMD_PLUGIN | CMD_RUN },
  { "allow-no-cpuset", no_argument, OPT_ALLOW_NO_CPUSET, CMD_PLUGIN },
  { "help", no_argument, 'h', CMD_ALL },
};
#define N_OPTIONS (sizeof (cli_options) / sizeof (cli_options[0]))
#define SHORT_OPTIONS "+c:t:hC:N:m:i:p:l"

struct cli
{
  struct nrm_config cfg;
  bool json;
  bool hardware; /* nrm topology --hardware */
  struct nrm_run_request run;
  const char *options[16];
  size_t n_options;
};

static int
fail (nrm_error_t *err, int code)
{
  fprintf (stderr, "nrm: %s\n", nrm_error_msg (*err));
  nrm_error_release (err);
  return code;
}

/* Options are applied in two passes so that the config file is read first
 * and every flag overrides it, wherever it stands on the command line. */
/* "`nrm plugin` and `nrm controller`": the commands that take an option. */
static int
refuse (nrm_error_t *err, const char *cmd, const char *flag, unsigned commands)
{
  char list[256] = "";
  size_t n = 0, total = (size_t) __builtin_popcount (commands);
  for (size_t i = 0; i < sizeof (command_names) / sizeof (command_names[0]); i++)
    if (commands & (1u << i))
      {
        n++;
        snprintf (list + strlen (list), sizeof (list) - strlen (list), "%s`nrm %s`",
                  n == 1       ? ""
                  : n == total ? " and "
                               : ", ",
                  command_names[i]);
      }
  return nrm_error_set (err, EINVAL, "%s: `--%s` is an option of %s", cmd, flag, list);
}

static unsigned
command_bit (const char *cmd)
{
  for (size_t i = 0; i < sizeof (command_names) / sizeof (command_names[0]); i++)
    if (strcmp (cmd, command_names[i]) == 0)
      return 1u << i;
  return 0;
}

/* One memory policy, as numactl takes one. */
static int
run_policy (struct cli *cli, enum nrm_run_mempolicy p, const char *flag, nrm_error_t *err)
{
  if (cli->run.policy != NRM_RUN_MEM_DEFAULT && cli->run.policy != p)
    return nrm_error_set (err, EINVAL,
                          "run: `--%s` and another of --membind, --interleave, --preferred, --localalloc: one "
                          "memory policy only",
                          flag);
  cli->run.policy = p;
  return 0;
}

/* -C CPUS, -N NODES (and --numa-node K), -m/-i NODES, -p NODE: lists as
 * numactl takes them ("all" for every one, for nodes); whether they are on
 * this machine is checked by the run, which has the machine. */
static int
run_list_option (struct cli *cli, int c, const char *flag, const char *arg, nrm_error_t *err)
{
  hwloc_bitmap_t set = NULL;
  nrm_error_t perr = NULL;
  bool nodes = c != 'C';
  if (nodes && strcmp (arg, "all") == 0)
    {
      set = xbitmap_alloc ();
      hwloc_bitmap_fill (set);
    }
  else if (nrm_cpulist_parse (arg, &set, &perr) < 0 || hwloc_bitmap_iszero (set)
           || (hwloc_bitmap_weight (set) != 1 && c == 'p'))
    {
      nrm_error_release (&perr);
      hwloc_bitmap_free (set);
      return nrm_error_set (err, EINVAL, "run: `--%s` needs %s, not `%s`", flag,
                            c == 'C'   ? "a list of CPUs such as 0-3,8"
                            : c == 'p' ? "one NUMA node number"
                                       : "a list of NUMA nodes such as 0-1, or all",
                            arg);
    }
  hwloc_bitmap_t *slot = c == 'C' ? &cli->run.cpu_list : c == 'N' ? &cli->run.cpu_nodes : &cli->run.mem_nodes;
  if (c == 'm' || c == 'i' || c == 'p')
    {
      enum nrm_run_mempolicy p = c == 'm'   ? NRM_RUN_MEM_BIND
                                 : c == 'i' ? NRM_RUN_MEM_INTERLEAVE
                                            : NRM_RUN_MEM_PREFERRED;
      if (run_policy (cli, p, flag, err) < 0)
        {
          hwloc_bitmap_free (set);
          return -1;
        }
    }
  /* Given twice (also --numa-node and -N): the last one counts. */
  hwloc_bitmap_free (*slot);
  *slot = set;
  return 0;
}

static int
parse_options (struct cli *cli, const char *cmd, int argc, char **argv, nrm_error_t *err)
{
  int c;
  struct option long_options[N_OPTIONS + 1];
  for (size_t i = 0; i < N_OPTIONS; i++)
    long_options[i] = (struct option){ cli_options[i].name, cli_options[i].has_arg, NULL, cli_options[i].val };
  memset (&long_options[N_OPTIONS], 0, sizeof (long_options[0]));
  unsigned me = command_bit (cmd);

  optind = 1;
  opterr = 0;
  while ((c = getopt_long (argc, argv, SHORT_OPTIONS, long_options, NULL)) != -1)
    {
      if (c == 'c' && nrm_config_load_file (&cli->cfg, optarg, err) < 0)
        return -1;
      if (c == '?')
        {
          if (optopt > 0 && optopt < 128)
            return nrm_error_set (err, EINVAL, "%s: option -%c needs an argument or is unknown", cmd, optopt);
          return nrm_error_set (err, EINVAL, "%s: unknown option or missing argument in `%s`", cmd, argv[optind - 1]);
        }
      if (c == 'h')
        return 1;
    }
  if (strcmp (cmd, "run") == 0)
    cli->run.argv = optind < argc ? argv + optind : NULL; /* none: only for --dry-run */
  else if (optind < argc)
    return nrm_error_set (err, EINVAL, "%s: unexpected argument `%s`", cmd, argv[optind]);

  optind = 1;
  bool memory_flag = false;
  int li = -1;
  while ((c = getopt_long (argc, argv, SHORT_OPTIONS, long_options, &li)) != -1)
    {
      int r = 0;
      /* A letter (-C) is refused by the commands its long name is refused by. */
      for (size_t i = 0; li < 0 && c != '?' && i < N_OPTIONS; i++)
        if (cli_options[i].val == c)
          li = (int) i;
      const char *flag = li >= 0 ? long_options[li].name : "?";
      if (li >= 0 && !(cli_options[li].commands & me))
        return refuse (err, cmd, flag, cli_options[li].commands);
      switch (c)
        {
        case 't':
          r = nrm_config_set_string (&cli->cfg.topology, optarg, err);
          break;
        case OPT_NODE_NAME:
          r = nrm_config_set_string (&cli->cfg.node_name, optarg, err);
          break;
        case OPT_RESERVED_CPUS:
          r = nrm_config_set_reserved_cpus (&cli->cfg, optarg, err);
          nrm_config_set_source (&cli->cfg, "reservedCPUs", "flag");
          break;
        case OPT_ISOLATED_CPUS:
          r = nrm_config_set_isolated_cpus (&cli->cfg, optarg, err);
          nrm_config_set_source (&cli->cfg, "isolatedCPUs", "flag");
          break;
        case OPT_RESERVED_MEMORY:
          /* The flags replace the file's list rather than adding to it. */
          if (!memory_flag)
            nrm_config_clear_reserved_memory (&cli->cfg);
          memory_flag = true;
          r = nrm_config_add_reserved_memory (&cli->cfg, optarg, err);
          nrm_config_set_source (&cli->cfg, "reservedMemory", "flag");
          break;
        case OPT_CPU_MODE:
          r = nrm_config_set_cpu_mode (&cli->cfg, optarg, err);
          nrm_config_set_source (&cli->cfg, "cpu.mode", "flag");
          break;
        case OPT_CPU_OPTIONS:
          r = nrm_config_set_cpu_options (&cli->cfg, optarg, err);
          nrm_config_set_source (&cli->cfg, "cpu.options", "flag");
          break;
        case OPT_FEATURE_GATES:
          r = nrm_config_set_feature_gates (&cli->cfg, optarg, err);
          break;
        case OPT_KUBERNETES_VERSION:
          r = nrm_config_set_kubernetes_version (&cli->cfg, optarg, err);
          break;
        case OPT_FSROOT:
          r = nrm_config_set_string (&cli->cfg.fsroot, optarg, err);
          break;
        case OPT_KUBELET_DIR:
        case OPT_CDI_DIR:
        case OPT_STATE_DIR:
        case OPT_CLAIMS_DIR:
        case OPT_INSTANCE_UID:
        case OPT_LOG_LEVEL:
        case OPT_LOG_FORMAT:
          {
            char **field[] = { &cli->cfg.kubelet_dir,  &cli->cfg.cdi_dir,   &cli->cfg.state_dir, &cli->cfg.claims_dir,
                               &cli->cfg.instance_uid, &cli->cfg.log_level, &cli->cfg.log_format };
            r = nrm_config_set_string (field[c - OPT_KUBELET_DIR], optarg, err);
          }
          break;
        case OPT_MIN_SHARED:
        case OPT_RECONCILE:
          {
            char *end = NULL;
            long v = strtol (optarg, &end, 10);
            long max = c == OPT_MIN_SHARED ? 100000 : 86400;
            if (*optarg == '\0' || *end || v < 0 || v > max)
              return nrm_error_set (err, EINVAL, "%s: `--%s` needs a number from 0 to %ld, not `%s`", cmd, flag, max,
                                    optarg);
            if (c == OPT_MIN_SHARED)
              {
                cli->cfg.min_shared_cpus = v;
                nrm_config_set_source (&cli->cfg, "cpu.minSharedCPUs", "flag");
              }
            else
              cli->cfg.reconcile_interval = v;
          }
          break;
        case OPT_SHARED_POOL_CGROUPS:
          r = nrm_config_set_shared_pool_cgroups (&cli->cfg, optarg, err);
          break;
        case OPT_ISOLATED:
          cli->run.isolated = true;
          break;
        case OPT_RUN_PARTITION:
          {
            enum nrm_partition_mode m;
            if (nrm_partition_mode_parse (optarg, "run: `--partition`", &m, err) < 0)
              return -1;
            cli->run.partition = (int) m;
          }
          break;
        case OPT_DRY_RUN:
          cli->run.dry_run = true;
          break;
        case OPT_PID:
          {
            char *end = NULL;
            errno = 0;
            long v = strtol (optarg, &end, 10);
            if (*optarg == '\0' || *end || errno || v <= 0 || v > 4194304)
              return nrm_error_set (err, EINVAL, "run: `--pid` needs a process id, not `%.40s`", optarg);
            cli->run.attach_pid = (int) v;
          }
          break;
        case OPT_MEMORY_KIND:
          if (*optarg == '\0' || strlen (optarg) > 32
              || strspn (optarg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-") != strlen (optarg))
            return nrm_error_set (
                err, EINVAL, "run: `--memory-kind` needs a memory kind such as DRAM, HBM or NVM, not `%.40s`", optarg);
          cli->run.memory_kind = optarg;
          break;
        case OPT_MEMORY_TIER:
          {
            char *end;
            long v = strtol (optarg, &end, 10);
            if (*optarg == '\0' || *end || v < 0 || v > 15)
              return nrm_error_set (
                  err, EINVAL, "run: `--memory-tier` needs a tier from 0 (the fastest) to 15, not `%.40s`", optarg);
            cli->run.memory_tier = (int) v;
          }
          break;
        case 'C':
        case 'N':
        case 'm':
        case 'i':
        case 'p':
          r = run_list_option (cli, c, flag, optarg, err);
          break;
        case 'l':
          r = run_policy (cli, NRM_RUN_MEM_LOCAL, flag, err);
          break;
        case OPT_CPUS:
        case OPT_MEMORY:
        case OPT_HUGEPAGES_2MI:
        case OPT_HUGEPAGES_1GI:
        case OPT_NUMA_NODE:
        case OPT_OPTION:
          if (c == OPT_MEMORY || c == OPT_HUGEPAGES_2MI || c == OPT_HUGEPAGES_1GI)
            {
              /* Bytes; huge pages in whole pages. */
              uint64_t bytes = 0, page = c == OPT_MEMORY ? 1 : c == OPT_HUGEPAGES_2MI ? 2u << 20 : 1u << 30;
              nrm_error_t qerr = NULL;
              if (nrm_quantity_parse_bytes (optarg, &bytes, &qerr) < 0 || bytes == 0 || bytes % page)
                {
                  nrm_error_release (&qerr);
                  return nrm_error_set (err, EINVAL, "run: `--%s` needs %s such as %s, not `%s`", flag,
                                        page == 1 ? "a size" : "an amount of whole pages",
                                        c == OPT_MEMORY          ? "512Mi"
                                        : c == OPT_HUGEPAGES_2MI ? "64Mi"
                                                                 : "2Gi",
                                        optarg);
                }
              *(c == OPT_MEMORY          ? &cli->run.memory
                : c == OPT_HUGEPAGES_2MI ? &cli->run.hugepages_2mi
                                         : &cli->run.hugepages_1gi)
                  = optarg;
            }
          else if (c == OPT_OPTION)
            {
              unsigned o = 0;
              if (cli->n_options == 15)
                return nrm_error_set (err, EINVAL, "run: at most 15 `--option`s");
              if (nrm_cpu_option_parse (optarg, &o, err) < 0)
                return -1;
              cli->options[cli->n_options++] = optarg;
            }
          else
            {
              char *end = NULL;
              long v = strtol (optarg, &end, 10);
              if (*optarg == '\0' || *end || v < (c == OPT_CPUS ? 1 : 0) || v > 65535)
                return nrm_error_set (err, EINVAL, "run: `--%s` needs a number, not `%s`", flag, optarg);
              if (c == OPT_CPUS)
                cli->run.cpus = (unsigned) v;
              else
                r = run_list_option (cli, 'N', flag, optarg, err);
            }
          break;
        case OPT_DEVICE_METADATA:
          cli->cfg.device_metadata = true;
          break;
        case OPT_CREATE_STATE_DIR:
          cli->cfg.create_state_dir = true;
          break;
        case OPT_ALLOW_NO_CPUSET:
          cli->cfg.allow_no_cpuset = true;
          break;
        case OPT_KUBECONFIG:
        case OPT_NO_PUBLISH:
        case OPT_API_QPS:
        case OPT_API_BURST:
        case OPT_HTTP_ADDRESS:
          if (c == OPT_KUBECONFIG)
            r = nrm_config_set_string (&cli->cfg.kubeconfig, optarg, err);
          else if (c == OPT_HTTP_ADDRESS)
            r = nrm_config_set_string (&cli->cfg.http_address, optarg, err);
          else if (c == OPT_NO_PUBLISH)
            cli->cfg.no_publish = true;
          else
            {
              char *end = NULL;
              double v = strtod (optarg, &end);
              bool qps = c == OPT_API_QPS;
              if (*optarg == '\0' || *end || v < (qps ? 0 : 1) || v > 10000 || (!qps && v != (long) v))
                return nrm_error_set (err, EINVAL, "%s: `--%s` needs a%s number from %d to 10000, not `%s`", cmd, flag,
                                      qps ? "" : " whole", qps ? 0 : 1, optarg);
              if (qps)
                cli->cfg.api_qps = v;
              else
                cli->cfg.api_burst = (long) v;
            }
          break;
        case OPT_DRIVERS:
        case OPT_DRIVER_DIR:
          r = nrm_config_set_string (c == OPT_DRIVERS ? &cli->cfg.drivers : &cli->cfg.driver_dir, optarg, err);
          break;
        case OPT_LEASE_NAMESPACE:
          r = nrm_config_set_string (&cli->cfg.lease_namespace, optarg, err);
          break;
        case OPT_HOOK_PATH:
          r = nrm_config_set_string (&cli->cfg.hook_path, optarg, err);
          break;
        case OPT_JSON:
          cli->json = true;
          break;
        case OPT_HARDWARE:
          cli->hardware = true;
          break;
        default:
          break;
        }
      if (r < 0)
        return -1;
      li = -1;
    }
  if (cli->json && cli->hardware)
    return nrm_error_set (err, EINVAL, "topology: --hardware is a text view and --json the whole model: give one");
  return nrm_config_finish (&cli->cfg, err);
}

static int
load_machine (struct cli *cli, struct nrm_topology **ret, nrm_error_t *err)
{
  struct nrm_topology *t = NULL;
  if (nrm_topology_load (cli->cfg.topology, &t, err) < 0)
    return -1;
  if (nrm_topology_apply_settings (t, &cli->cfg.node, cli->cfg.fsroot, err) < 0)
    {
      nrm_topology_free (t);
      return -1;
    }
  *ret = t;
  return 0;
}

/* The registry and the enabled drivers of this node, for the machine t. */
static int
open_drivers (struct nrm_config *c, const struct nrm_topology *t, struct nrm_registry **reg, struct nrm_drivers *d,
              nrm_error_t *err)
{
  struct nrm_driver_selection sel;
  struct nrm_driver_host h = { .topo = t,
                               .node = &c->publish,
                               .fsroot = c->fsroot,
                               .live = c->topology == NULL,
                               .log = nrm_log,
                               .kubelet_dir = c->kubelet_dir,
                               .state_dir = c->state_dir };
  nrm_config_drivers (c, &sel);
  if (nrm_registry_new (reg, err) < 0)
    return -1;
  if ((c->driver_dir && nrm_registry_load_dir (*reg, c->driver_dir, err) < 0)
      || nrm_drivers_open (*reg, &sel, &h, d, err) < 0)
    {
      nrm_registry_free (*reg);
      *reg = NULL;
      return -1;
    }
  return 0;
}

static void
close_drivers (struct nrm_registry *reg, struct nrm_drivers *d)
{
  nrm_drivers_close (d);
  nrm_registry_free (reg);
}

/* Output is built in memory and written only on success: a failing command
 * prints nothing on stdout. */
static int
emit (const char *buf, size_t len, nrm_error_t *err)
{
  if (fwrite (buf, 1, len, stdout) != len || fflush (stdout) != 0)
    return nrm_error_errno (err, errno ? errno : EIO, "cannot write to stdout");
  return 0;
}

static int
emit_json (json_t *doc, nrm_error_t *err)
{
  cleanup_free char *s = json_dumps (doc, JSON_INDENT (2));
  size_t len = strlen (s);
  s[len] = '\n';
  return emit (s, len + 1, err);
}

static int
cmd_topology (struct cli *cli, nrm_error_t *err)
{
  struct nrm_topology *t = NULL;
  int r;
  if (load_machine (cli, &t, err) < 0)
    return -1;
  if (cli->json)
    {
      cleanup_json json_t *doc = nrm_topology_to_json (t);
      r = emit_json (doc, err);
    }
  else
    {
      cleanup_free char *buf = NULL;
      size_t len = 0;
      FILE *f = open_memstream (&buf, &len);
      if (f == NULL)
        r = nrm_error_errno (err, errno, "open_memstream");
      else
        {
          r = cli->hardware ? nrm_topology_print_hardware (t, cli->cfg.fsroot, f, err)
                            : nrm_topology_print_summary (t, f, err);
          fclose (f);
          if (r == 0)
            r = emit (buf, len, err);
        }
    }
  nrm_topology_free (t);
  return r;
}

static int
cmd_slices (struct cli *cli, nrm_error_t *err)
{
  struct nrm_topology *t = NULL;
  struct nrm_registry *reg = NULL;
  struct nrm_drivers d = { 0 };
  cleanup_json json_t *list = NULL;
  int r = -1;
  if (load_machine (cli, &t, err) < 0)
    return -1;
  if (open_drivers (&cli->cfg, t, &reg, &d, err) == 0)
    r = nrm_drivers_slices (&d, &cli->cfg.publish, NULL, NULL, &list, err);
  close_drivers (reg, &d);
  nrm_topology_free (t);
  if (r < 0)
    return -1;
  return emit_json (list, err);
}

#ifdef NRM_AGENT
/* The shared pool: every container without an exclusive claim runs on the
 * allocatable CPUs no claim holds (reserved ones too, unless
 * strict-cpu-reservation keeps them out). */
struct reconciler
{
  struct nrm_config *cfg;
  struct nrm_topology *t;
  const struct nrm_drivers *drivers;
  struct nrm_cgroupfs *fs;
  int wake; /* eventfd: a claim changed, or stop */
  bool stop;
  bool starved;                    /* every node's memory was claimed at the last pass */
  struct nrm_handover **handovers; /* one a driver: write only while all are ours */
  pthread_t thread;
};

/* Whether this instance writes the node's slices and cpusets: not while a
 * newer one of a rolling update does (driver/handover.h). */
static bool
publishing (struct nrm_handover **h, size_t n)
{
  bool all = true;
  for (size_t i = 0; h && i < n; i++)
    all &= h[i] == NULL || nrm_handover_active (h[i]);
  return all;
}

static void
reconcile_kick (void *arg)
{
  struct reconciler *r = arg;
  uint64_t one = 1;
  if (write (r->wake, &one, sizeof (one)) < 0)
    nrm_log (NULL, NRM_LOG_DEBUG, "shared pool: cannot wake the reconciler: %s", strerror (errno));
}

static void
reconcile_pass (struct reconciler *r)
{
  if (!publishing (r->handovers, r->drivers->n))
    return;
  cleanup_bitmap hwloc_bitmap_t taken = nrm_status_claimed_cpus (r->cfg, r->drivers);
  cleanup_bitmap hwloc_bitmap_t shared = nrm_status_shared_cpus (r->cfg, r->t, taken);
  cleanup_free char *list = nrm_cpulist_format (shared), *first = NULL;
  /* Shared containers stay off nodes whose memory claims hold in full. */
  bool starved = false;
  cleanup_bitmap hwloc_bitmap_t full = nrm_status_full_memory_nodes (r->cfg, r->t, r->drivers);
  cleanup_bitmap hwloc_bitmap_t mems = nrm_status_shared_mems (r->t, full, &starved);
  cleanup_bitmap hwloc_bitmap_t none = xbitmap_alloc ();
  cleanup_bitmap hwloc_bitmap_t all = nrm_status_shared_mems (r->t, none, &(bool){ false });
  cleanup_free char *mem_list = nrm_cpulist_format (mems), *all_list = nrm_cpulist_format (all);
  struct nrm_reconcile_stats st;
  nrm_error_t err = NULL;
  if (starved != r->starved)
    nrm_log (NULL, starved ? NRM_LOG_WARNING : NRM_LOG_INFO,
             starved ? "shared pool: claims hold the memory of every NUMA node; shared containers keep all of them"
                     : "shared pool: a NUMA node's memory is free again");
  r->starved = starved;
  size_t n_host = json_array_size (r->cfg->shared_pool_cgroups);
  cleanup_free const char **host = xcalloc (n_host + 1, sizeof (char *));
  for (size_t i = 0; i < n_host; i++)
    host[i] = json_string_value (json_array_get (r->cfg->shared_pool_cgroups, i));
  if (nrm_reconcile (r->fs, r->cfg->state_dir, list, *mem_list ? mem_list : NULL, all_list, host, n_host, &st, &first,
                     &err)
      < 0)
    {
      nrm_log (NULL, NRM_LOG_ERROR, "shared pool: %s", nrm_error_msg (err));
      nrm_error_release (&err);
      return;
    }
  if (st.failed)
    nrm_log (NULL, NRM_LOG_WARNING, "shared pool %s: %zu of %zu containers could not be updated; first: %s", list,
             st.failed, st.containers, first ? first : "?");
  if (st.updated || st.forgotten)
    nrm_log (NULL, NRM_LOG_INFO,
             "shared pool %s, memory nodes %s: containers updated %zu, exclusive %zu, gone %zu; host cgroups "
             "holding it %zu",
             list, mem_list, st.updated, st.exclusive, st.forgotten, st.host_confined);
}

/* A pass at start, then whenever a claim changes, a pod cgroup appears
 * (inotify) or the interval has passed (drift written by others). */
static void *
reconcile_thread (void *arg)
{
  struct reconciler *r = arg;
  struct nrm_kubepods_watch *w = NULL;
  nrm_error_t err = NULL;
  if (nrm_kubepods_watch_open (r->fs, &w, &err) < 0)
    {
      nrm_log (NULL, NRM_LOG_WARNING, "shared pool: %s; new containers wait for the periodic pass",
               nrm_error_msg (err));
      nrm_error_release (&err);
    }
  /* A checkpoint replaced by another process (an nrm run, a rolling-update
   * twin) changes the claimed CPUs too. */
  cleanup_close int state_fd = inotify_init1 (IN_NONBLOCK | IN_CLOEXEC);
  /* The publisher records too: a twin that stops removes its own. */
  if (state_fd >= 0 && inotify_add_watch (state_fd, r->cfg->state_dir, IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE) < 0)
    {
      nrm_log (NULL, NRM_LOG_WARNING, "shared pool: cannot watch `%s` (%s); runs are seen at the periodic pass",
               r->cfg->state_dir, strerror (errno));
      close (state_fd);
      state_fd = -1;
    }
  while (!__atomic_load_n (&r->stop, __ATOMIC_SEQ_CST))
    {
      reconcile_pass (r);
      struct pollfd fds[3]
          = { { r->wake, POLLIN, 0 }, { w ? nrm_kubepods_watch_fd (w) : -1, POLLIN, 0 }, { state_fd, POLLIN, 0 } };
      /* A standby looks every second for a twin that died. */
      int ms = publishing (r->handovers, r->drivers->n) ? (int) r->cfg->reconcile_interval * 1000 : 1000;
      int n = poll (fds, 3, ms);
      if (n > 0 && (fds[2].revents & POLLIN))
        {
          char buf[4096];
          while (read (state_fd, buf, sizeof (buf)) > 0)
            ;
        }
      if (n > 0 && (fds[0].revents & POLLIN))
        {
          uint64_t v;
          if (read (r->wake, &v, sizeof (v)) < 0)
            continue;
        }
      if (n > 0 && w && (fds[1].revents & POLLIN))
        nrm_kubepods_watch_drain (w);
    }
  nrm_kubepods_watch_close (w);
  return NULL;
}

#endif

static int run_status;

/* The kubelet's reserved CPUs and memory, adopted or compared
 * (nrm_config_import_kubelet); the lines it has to say go to the log at
 * level, or nowhere when level is negative. *kubelet as there. */
static int
import_kubelet (struct nrm_config *c, const char *cmd, int level, json_t **kubelet, nrm_error_t *err)
{
  cleanup_json json_t *notes = json_array ();
  size_t i;
  json_t *n;
  if (nrm_config_import_kubelet (c, kubelet, notes, err) < 0)
    return nrm_error_wrap (err, "%s", cmd);
  json_array_foreach (notes, i, n)
  {
    if (level >= 0)
      nrm_log (NULL, (enum nrm_log_level) level, "%s", json_string_value (n));
  }
  return 0;
}

static int
cmd_status (struct cli *cli, nrm_error_t *err)
{
  struct nrm_topology *t = NULL;
  struct nrm_registry *reg = NULL;
  struct nrm_drivers d = { 0 };
  cleanup_free char *buf = NULL;
  size_t len = 0;
  int r = -1;
  /* nodes[] as the plugin matched it (by labels too), else by name. */
  long entry = nrm_settings_node_entry (cli->cfg.state_dir);
  if (entry >= 0 && (size_t) entry >= json_array_size (cli->cfg.nodes))
    return nrm_error_set (err, EINVAL,
                          "status: the plugin applied nodes[%ld] (its record in `%s`), which this config does not "
                          "have: give status the plugin's settings (the same -c file)",
                          entry, cli->cfg.state_dir);
  if ((entry >= 0 ? nrm_config_apply_node_entry (&cli->cfg, (size_t) entry, err)
                  : nrm_config_resolve_node (&cli->cfg, NULL, err))
      < 0)
    return nrm_error_wrap (err, "status");
  {
    cleanup_json json_t *kubelet = NULL;
    if (import_kubelet (&cli->cfg, "status", -1, &kubelet, err) < 0)
      return -1;
  }
  if (load_machine (cli, &t, err) < 0)
    return -1;
  if (open_drivers (&cli->cfg, t, &reg, &d, err) == 0)
    {
      cleanup_json json_t *mine = nrm_settings_record (&cli->cfg, t, &d);
      if (nrm_settings_check (cli->cfg.state_dir, mine, "status", err) < 0)
        {
          close_drivers (reg, &d);
          nrm_topology_free (t);
          return -1;
        }
      FILE *f = open_memstream (&buf, &len);
      r = f ? nrm_status (&cli->cfg, t, &d, cli->json, f, err) : nrm_error_errno (err, errno, "open_memstream");
      if (f)
        fclose (f);
    }
  close_drivers (reg, &d);
  nrm_topology_free (t);
  return r < 0 ? -1 : emit (buf, len, err);
}

#ifdef NRM_AGENT
/* A state directory that does not exist is most likely a typo: created, it
 * would split the bookkeeping from the plugin's and the runs'. The default
 * is nrm's own and is created; any other only when asked for. */
static int
check_state_dir (const struct nrm_config *c, const char *cmd, nrm_error_t *err)
{
  struct stat st;
  if (stat (c->state_dir, &st) == 0)
    {
      if (!S_ISDIR (st.st_mode))
        return nrm_error_set (err, ENOTDIR, "%s: the state directory `%s` is not a directory", cmd, c->state_dir);
      return 0;
    }
  if (errno != ENOENT)
    return nrm_error_errno (err, errno, "%s: the state directory `%s`", cmd, c->state_dir);
  if (c->create_state_dir || strcmp (c->state_dir, NRM_DEFAULT_STATE_DIR) == 0)
    return 0;
  return nrm_error_set (err, ENOENT,
                        "%s: the state directory `%s` does not exist (a typo would split nrm's bookkeeping in "
                        "two): create it, or give --create-state-dir",
                        cmd, c->state_dir);
}

static int
cmd_run (struct cli *cli, nrm_error_t *err)
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
  if (!rq->dry_run && check_state_dir (&cli->cfg, "run", err) < 0)
    return -1;
  nrm_log_parse_level (cli->cfg.log_level, &level);
  nrm_log_setup (level, strcmp (cli->cfg.log_format, "json") == 0);
  {
    cleanup_json json_t *kubelet = NULL;
    /* A run's stderr is its command's too: only at debug level. */
    if (import_kubelet (&cli->cfg, "run", rq->dry_run ? -1 : NRM_LOG_DEBUG, &kubelet, err) < 0)
      return -1;
  }
  if (load_machine (cli, &t, err) < 0)
    return -1;
  cli->options[cli->n_options] = NULL;
  rq->options = cli->options;
  rq->json = cli->json;
  cleanup_free char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);
  int r = f ? nrm_cmd_run (&cli->cfg, t, rq, f, &run_status, err) : nrm_error_errno (err, errno, "open_memstream");
  if (f)
    fclose (f);
  nrm_topology_free (t);
  return r < 0 ? -1 : emit (buf, len, err);
}

#endif

static int
cmd_hook (struct cli *cli, nrm_error_t *err)
{
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;)
    {
      if (len + 4096 > cap)
        {
          cap = cap ? cap * 2 : 8192;
          if (cap > (1 << 21))
            {
              free (buf);
              return nrm_error_set (err, EFBIG, "hook: the OCI state on stdin is too large");
            }
          buf = xrealloc (buf, cap);
        }
      size_t n = fread (buf + len, 1, cap - len, stdin);
      len += n;
      if (n == 0)
        break;
    }
  cleanup_free char *summary = NULL;
  int r = nrm_hook_run (cli->cfg.fsroot, buf, len, cli->cfg.state_dir, &summary, err);
  free (buf);
  if (r < 0)
    return nrm_error_wrap (err, "hook");
  return 0;
}

#ifdef NRM_AGENT
static void publisher_log (void *ctx, enum nrm_log_level level, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

static void
publisher_log (void *ctx, enum nrm_log_level level, const char *fmt, ...)
{
  va_list ap;
  char *msg = NULL;
  va_start (ap, fmt);
  msg = xvasprintf (fmt, ap);
  va_end (ap);
  nrm_log (NULL, level, "%s: %s", (const char *) ctx, msg);
  free (msg);
}

/* 1.36.3's scheduler leaves DRAListTypeAttributes out of its allocator's
 * features: its allocator takes every list attribute for an unknown type,
 * so no matchAttribute or distinctAttribute on one is ever met. */
static void
warn_list_attributes (const struct nrm_config *c)
{
  if (c->publish.list_attributes && c->publish.api_minor <= 36)
    nrm_log (NULL, NRM_LOG_WARNING,
             "DRAListTypeAttributes is on and the API server is 1.%u: its scheduler never meets matchAttribute or "
             "distinctAttribute on a list attribute (resource.kubernetes.io/numaNode, pcieRoot), so claims that "
             "constrain one stay Pending; turn the gate off in nrm on 1.36 (docs/versions.md)",
             c->publish.api_minor);
}

/* The node-allocatable mappings changed shape in 1.37: without
 * --kubernetes-version, the plugin writes them as the API server's release
 * reads them (GET /version, which every authenticated client may read). */
static void
ask_api_minor (struct nrm_config *c, struct nrm_kube *kube)
{
  if (kube == NULL || c->api_minor_set || (!c->publish.node_allocatable && !c->publish.list_attributes))
    {
      warn_list_attributes (c);
      return;
    }
  cleanup_json json_t *v = NULL;
  nrm_error_t err = NULL;
  int code = nrm_kube_call (kube, "GET", "/version", NULL, &v, &err);
  const char *minor = json_string_value (json_object_get (v, "minor"));
  unsigned m = minor ? (unsigned) strtoul (minor, NULL, 10) : 0; /* "37", or "37+" from some vendors */
  if (code == 200 && m >= 36)
    {
      c->publish.api_minor = m;
      nrm_log (NULL, NRM_LOG_INFO, "Kubernetes API server %s: fields as 1.%u reads them",
               json_string_value (json_object_get (v, "gitVersion")) ?: "?", m);
    }
  else
    nrm_log (NULL, NRM_LOG_WARNING,
             "Kubernetes API server version unknown (%s): fields as 1.%u reads them; give --kubernetes-version",
             code < 0 ? nrm_error_msg (err) : nrm_kube_status_message (v, code), c->publish.api_minor);
  nrm_error_release (&err);
  warn_list_attributes (c);
}

/* The first nodes[] entry that matches this node overrides the top level:
 * by name, or by the Node object's labels, read once at start. */
static int
resolve_node_settings (struct nrm_config *c, struct nrm_kube *kube, nrm_error_t *err)
{
  cleanup_json json_t *node = NULL, *none = json_object ();
  json_t *labels = NULL;
  if (nrm_config_nodes_need_labels (c))
    {
      if (kube == NULL)
        nrm_log (NULL, NRM_LOG_WARNING,
                 "node settings: without the Kubernetes API the node's labels are unknown: only nodes[] entries "
                 "with names can match");
      else
        {
          cleanup_free char *esc = nrm_kube_escape (c->node_name);
          cleanup_free char *path = xasprintf ("/api/v1/nodes/%s", esc);
          int code = nrm_kube_call (kube, "GET", path, NULL, &node, err);
          if (code < 0)
            return nrm_error_wrap (err, "plugin: node settings: cannot read Node `%s`", c->node_name);
          if (code != 200)
            return nrm_error_set (err, EIO, "plugin: node settings: cannot read Node `%s` for its labels: %s",
                                  c->node_name, nrm_kube_status_message (node, code));
          labels = json_object_get (json_object_get (node, "metadata"), "labels");
          if (!json_is_object (labels))
            labels = none;
        }
    }
  if (nrm_config_resolve_node (c, labels, err) < 0)
    return nrm_error_wrap (err, "plugin");
  if (c->node_entry >= 0)
    nrm_log (NULL, NRM_LOG_INFO, "node settings: nodes[%ld] applies to node %s (by %s)", c->node_entry, c->node_name,
             json_object_get (json_array_get (c->nodes, (size_t) c->node_entry), "names") ? "name" : "labels");
  return 0;
}

/* The kubelet's static CPU or Memory Manager writes the same cpusets and
 * memory nodes as nrm: both at once would undo each other's work. Its
 * config file says the policy it starts with, its state files the policy
 * it runs with. */
static int
check_kubelet_managers (struct nrm_config *c, nrm_error_t *err)
{
  static const struct
  {
    const char *file, *key, *policy, *fix;
  } managers[] = {
    { "cpu_manager_state", "cpuManagerPolicy", "static", "cpuManagerPolicy: none" },
    { "memory_manager_state", "memoryManagerPolicy", "Static", "memoryManagerPolicy: None" },
  };
  cleanup_json json_t *kubelet = NULL;
  if (import_kubelet (c, "plugin", NRM_LOG_INFO, &kubelet, err) < 0)
    return -1;
  for (size_t i = 0; i < sizeof (managers) / sizeof (managers[0]); i++)
    {
      const char *conf = json_string_value (json_object_get (json_object_get (kubelet, "config"), managers[i].key));
      if (conf && strcasecmp (conf, managers[i].policy) == 0)
        return nrm_error_set (err, EBUSY,
                              "the kubelet's configuration `%s` sets %s: %s: set %s there, remove `%s/%s` and "
                              "restart the kubelet first (docs/install.md, migration)",
                              json_string_value (json_object_get (kubelet, "path")), managers[i].key, conf,
                              managers[i].fix, c->kubelet_dir, managers[i].file);
    }
  for (size_t i = 0; i < sizeof (managers) / sizeof (managers[0]); i++)
    {
      cleanup_free char *path = xasprintf ("%s/%s", c->kubelet_dir, managers[i].file), *text = NULL;
      nrm_error_t rerr = NULL;
      if (nrm_read_file (path, 16 << 20, &text, NULL, &rerr) < 0)
        {
          nrm_error_release (&rerr);
          continue;
        }
      cleanup_json json_t *st = json_loads (text, 0, NULL);
      const char *policy = json_string_value (json_object_get (st, "policyName"));
      if (policy && strcmp (policy, managers[i].policy) == 0)
        return nrm_error_set (err, EBUSY,
                              "the kubelet's %s policy is still active (`%s`): set %s in the kubelet configuration, "
                              "remove that file and restart the kubelet first (docs/install.md, migration)",
                              policy, path, managers[i].fix);
    }
  return 0;
}

/* The driver's slices of a List from nrm_drivers_slices() (new reference). */
static json_t *
driver_slices (json_t *list, const char *driver)
{
  json_t *mine = json_array ();
  size_t k;
  json_t *s;
  json_array_foreach (json_object_get (list, "items"), k, s)
  {
    const char *d = json_string_value (json_object_get (json_object_get (s, "spec"), "driver"));
    if (d && strcmp (d, driver) == 0)
      json_array_append (mine, s);
  }
  return mine;
}

/* The prepared claims of every driver, {driver name: {uid: state}}, from
 * the checkpoints (a new reference); a driver whose checkpoint cannot be
 * read has none here. */
static json_t *
held_claims (const struct nrm_config *c, const struct nrm_drivers *d)
{
  json_t *held = json_object ();
  for (size_t i = 0; held && i < d->n; i++)
    {
      nrm_error_t err = NULL;
      cleanup_json json_t *claims = nrm_checkpoint_claims (c->state_dir, d->slots[i].name, &err);
      nrm_error_release (&err);
      if (claims)
        json_object_set_new (held, d->slots[i].name, nrm_checkpoint_held (claims));
    }
  return held;
}

static bool
may_write (void *ctx)
{
  return nrm_handover_active (ctx);
}

/* What a driver's instance does when the role comes back to it. */
struct takeback
{
  const char *state_dir;
  json_t *settings; /* the record nrm status compares with */
  struct reconciler *rec;
};

static void
took_back (void *ctx)
{
  struct takeback *tb = ctx;
  nrm_error_t err = NULL;
  if (nrm_settings_write (tb->state_dir, tb->settings, &err) < 0)
    {
      nrm_log (NULL, NRM_LOG_WARNING, "settings record: %s", nrm_error_msg (err));
      nrm_error_release (&err);
    }
  reconcile_kick (tb->rec);
}

/* A short digest of the settings record, for the publisher records: two
 * instances can say whether their devices differ. */
static char *
settings_digest (json_t *settings)
{
  cleanup_free char *text = json_dumps (settings, JSON_SORT_KEYS | JSON_COMPACT);
  uint64_t h = 1469598103934665603ULL;
  for (const char *p = text ? text : ""; *p; p++)
    h = (h ^ (unsigned char) *p) * 1099511628211ULL;
  return xasprintf ("%016llx", (unsigned long long) h);
}

/* One publisher a driver, each with the driver's slices of `nrm slices`. */
static int
start_publishers (struct nrm_config *c, const struct nrm_drivers *d, struct nrm_kube *kube, struct nrm_publisher **pubs,
                  struct nrm_handover **handovers, nrm_error_t *err)
{
  cleanup_json json_t *list = NULL;
  if (nrm_drivers_slices (d, &c->publish, NULL, NULL, &list, err) < 0)
    return -1;
  for (size_t i = 0; i < d->n; i++)
    {
      cleanup_json json_t *mine = driver_slices (list, d->slots[i].name);
      struct nrm_publisher_config pc = { .kube = kube,
                                         .driver = d->slots[i].name,
                                         .node_name = c->node_name,
                                         .log = publisher_log,
                                         .log_ctx = d->slots[i].name,
                                         .may_write = handovers[i] ? may_write : NULL,
                                         .may_write_ctx = handovers[i] };
      if (nrm_publisher_start (&pc, mine, &pubs[i], err) < 0)
        return nrm_error_wrap (err, "%s", d->slots[i].name);
    }
  return 0;
}

/* Every pool follows the node while the plugin runs, checked every
 * SLICE_PERIOD_S seconds (sysfs cannot be watched, and claims come and go):
 * a device whose driver reports it unhealthy with a taint gets that taint
 * (the driver's effect: None, NoSchedule or NoExecute) until it is healthy
 * again; and a driver may order its devices by what its claims hold (the
 * CPU driver lists its consumable devices fullest first, so that the
 * scheduler's first fit is a best fit). A new generation is published only
 * when a driver's slices change. */
#define SLICE_PERIOD_S 5
struct refresher
{
  struct nrm_config *cfg;
  const struct nrm_drivers *drivers;
  struct nrm_publisher **pubs;
  int wake;
  bool stop;
  pthread_t thread;
};

/* The taints of every driver from its health report, {name: {device:
 * [taint]}}; changes against last are logged. */
static json_t *
health_taints (const struct nrm_drivers *d, json_t *last)
{
  json_t *all = json_object ();
  for (size_t i = 0; all && i < d->n; i++)
    {
      const struct nrm_driver_slot *s = &d->slots[i];
      struct nrm_health_report rep = { 0 };
      nrm_error_t err = NULL;
      json_t *was = json_object_get (last, s->name), *now;
      if (s->ops->health == NULL)
        continue;
      if (s->ops->health (s->self, &rep, &err) < 0)
        {
          /* Unknown health: the taints stay as they were. */
          nrm_log (NULL, NRM_LOG_WARNING, "%s: health: %s", s->name, nrm_error_msg (err));
          nrm_error_release (&err);
          if (was)
            json_object_set (all, s->name, was);
          continue;
        }
      now = nrm_health_taints (s->name, &rep);
      for (size_t k = 0; now && k < rep.n; k++)
        {
          const struct nrm_device_health *h = &rep.devices[k];
          json_t *tn = h->device ? json_object_get (now, h->device) : NULL;
          if (tn && json_object_get (was, h->device) == NULL)
            nrm_log (NULL, NRM_LOG_WARNING, "%s: device %s: %s; tainted %s:%s", s->name, h->device,
                     h->message ? h->message : "unhealthy",
                     json_string_value (json_object_get (json_array_get (tn, 0), "key")),
                     json_string_value (json_object_get (json_array_get (tn, 0), "effect")));
        }
      const char *dev;
      json_t *v;
      json_object_foreach (was, dev, v)
      {
        if (json_object_get (now, dev) == NULL)
          nrm_log (NULL, NRM_LOG_INFO, "%s: device %s is healthy again; taint removed", s->name, dev);
      }
      nrm_health_report_done (&rep);
      if (now)
        json_object_set_new (all, s->name, now);
    }
  return all;
}

/* A driver's health event: the taints follow at once. */
static void
refresh_kick (void *arg)
{
  struct refresher *rf = arg;
  uint64_t one = 1;
  if (rf->wake >= 0 && write (rf->wake, &one, sizeof (one)) < 0)
    nrm_log (NULL, NRM_LOG_DEBUG, "cannot wake the slice refresher: %s", strerror (errno));
}

static void *
refresh_thread (void *arg)
{
  struct refresher *rf = arg;
  const struct nrm_drivers *d = rf->drivers;
  cleanup_json json_t *last = json_object (), *published = json_object (), *plain = NULL;
  /* What start_publishers published; unknown: the first pass publishes. */
  nrm_error_t e = NULL;
  if (nrm_drivers_slices (d, &rf->cfg->publish, NULL, NULL, &plain, &e) == 0)
    for (size_t i = 0; i < d->n; i++)
      json_object_set_new (published, d->slots[i].name, driver_slices (plain, d->slots[i].name));
  nrm_error_release (&e);
  while (!__atomic_load_n (&rf->stop, __ATOMIC_SEQ_CST))
    {
      cleanup_json json_t *taints = health_taints (d, last);
      cleanup_json json_t *held = held_claims (rf->cfg, d);
      cleanup_json json_t *list = NULL;
      nrm_error_t err = NULL;
      json_decref (last);
      last = json_incref (taints);
      if (nrm_drivers_slices (d, &rf->cfg->publish, held, taints, &list, &err) == 0)
        for (size_t i = 0; i < d->n && err == NULL; i++)
          {
            const char *name = d->slots[i].name;
            cleanup_json json_t *mine = driver_slices (list, name);
            json_t *was = json_object_get (published, name);
            if ((was == NULL || !json_equal (mine, was)) && nrm_publisher_update (rf->pubs[i], mine, &err) == 0)
              json_object_set (published, name, mine);
          }
      if (err)
        {
          nrm_log (NULL, NRM_LOG_ERROR, "updating the slices: %s", nrm_error_msg (err));
          nrm_error_release (&err);
        }
      struct pollfd pfd = { rf->wake, POLLIN, 0 };
      if (poll (&pfd, 1, SLICE_PERIOD_S * 1000) > 0)
        {
          uint64_t x;
          if (read (rf->wake, &x, sizeof (x)) < 0)
            continue;
        }
    }
  return NULL;
}

static char *
http_handler (void *ctx, const char *path, int *status, const char **content_type)
{
  struct nrm_metrics_sources *s = ctx;
  char *why = NULL, *body = NULL;
  if (strcmp (path, "/metrics") == 0)
    {
      *content_type = "text/plain; version=0.0.4; charset=utf-8";
      return nrm_metrics_render (s);
    }
  bool live = strcmp (path, "/healthz") == 0 || strcmp (path, "/livez") == 0;
  if (!live && strcmp (path, "/readyz") != 0)
    return NULL;
  bool ok = live ? nrm_metrics_live (s, &why) : nrm_metrics_ready (s, &why);
  *status = ok ? 200 : 503;
  body = xasprintf ("%s\n", ok ? "ok" : why);
  free (why);
  return body;
}

/* Where the plugin binds containers (this host, or an --fsroot tree), cgroup
 * v2 must have the cpuset controller: without it every container with a
 * claim would fail in the hook. Not checked for a recorded machine served
 * on this host, whose containers nrm leaves alone. */
/* Whether the configuration enables the driver with this id. */
static bool
enables (const struct nrm_config *c, const char *id)
{
  size_t n = strlen (id);
  if (c->drivers == NULL)
    return true;
  for (const char *p = c->drivers; *p; p += strcspn (p, ","), p += *p == ',')
    if (strncmp (p, id, n) == 0 && (p[n] == ',' || p[n] == '\0'))
      return true;
  return false;
}

static int
check_cpuset (const struct nrm_config *c, nrm_error_t *err)
{
  bool here = strcmp (c->fsroot, "/") == 0;
  /* Only the CPU and memory drivers bind containers. */
  if ((c->topology && here) || c->allow_no_cpuset || !(enables (c, "cpu") || enables (c, "memory")))
    return 0;
  cleanup_free char *ctl = xasprintf ("%s/sys/fs/cgroup/cgroup.controllers", here ? "" : c->fsroot);
  cleanup_free char *text = NULL;
  nrm_error_t rerr = NULL;
  if (nrm_read_file (ctl, 4096, &text, NULL, &rerr) < 0)
    {
      nrm_error_release (&rerr);
      return nrm_error_set (err, ENOTSUP,
                            "plugin: no cgroup v2 at %s/sys/fs/cgroup (no `%s`: cgroup v1?): containers with claims "
                            "could not be bound to their CPUs and would fail in the hook; boot with cgroup v2 "
                            "(systemd.unified_cgroup_hierarchy=1), or give --allow-no-cpuset to serve anyway",
                            here ? "" : c->fsroot, ctl);
    }
  char *save = NULL;
  for (char *tok = strtok_r (text, " \n", &save); tok; tok = strtok_r (NULL, " \n", &save))
    if (strcmp (tok, "cpuset") == 0)
      return 0;
  return nrm_error_set (err, ENOTSUP,
                        "plugin: cgroup v2 at %s/sys/fs/cgroup has no cpuset controller (`%s` lacks it: cgroup v1 "
                        "hybrid, with cpuset on v1?): containers with claims could not be bound to their CPUs and "
                        "would fail in the hook; give cpuset to cgroup v2, or --allow-no-cpuset to serve anyway",
                        here ? "" : c->fsroot, ctl);
}

/* Serves every enabled driver until SIGTERM or SIGINT. Signals are blocked
 * before any thread starts (gRPC's own threads inherit the mask) and taken
 * here with sigwait(): no gRPC call ever runs in a signal handler. */
static int
cmd_plugin (struct cli *cli, nrm_error_t *err)
{
  struct nrm_config *c = &cli->cfg;
  struct nrm_topology *t = NULL;
  struct nrm_registry *reg = NULL;
  struct nrm_drivers d = { 0 };
  cleanup_free struct nrm_plugin **plugins = NULL;
  cleanup_free struct nrm_publisher **pubs = NULL;
  cleanup_free struct nrm_handover **handovers = NULL;
  cleanup_json json_t *settings = NULL;
  cleanup_free char *digest = NULL;
  struct takeback takeback = { 0 };
  cleanup_free const char **names = NULL;
  struct nrm_claims_dir *claims_dir = NULL;
  struct nrm_kube *kube = NULL;
  struct nrm_binder *binder = NULL;
  struct nrm_nodeview *nodeview = NULL;
  struct nrm_http *http = NULL;
  cleanup_close int http_fd = -1;
  struct refresher refresher = { .wake = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK) };
  bool refreshing = false;
  struct reconciler rec = { .cfg = c, .wake = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK) };
  cleanup_json json_t *hook = NULL;
  enum nrm_log_level level = NRM_LOG_INFO;
  sigset_t set;
  int sig = 0, r = -1;

  /* Before any thread starts: one malloc arena instead of one per thread
   * (up to 8 per CPU) for gRPC's, libcurl's and libmicrohttpd's threads
   * (docs/plugin.md, memory). */
  mallopt (M_ARENA_MAX, 1);
  nrm_log_parse_level (c->log_level, &level);
  nrm_log_setup (level, strcmp (c->log_format, "json") == 0);
  bool api = c->kubeconfig != NULL || nrm_kube_in_cluster ();
  if (!api && c->claims_dir == NULL)
    return nrm_error_set (err, EINVAL,
                          "plugin: no claim source: give --kubeconfig (outside a pod), or --claims-dir for claims "
                          "in files");
  sigemptyset (&set);
  sigaddset (&set, SIGTERM);
  sigaddset (&set, SIGINT);
  pthread_sigmask (SIG_BLOCK, &set, NULL);
  signal (SIGPIPE, SIG_IGN);

  if (api)
    {
      struct nrm_kube_options ko;
      nrm_kube_options_init (&ko);
      ko.kubeconfig = c->kubeconfig;
      ko.qps = c->api_qps;
      ko.burst = (int) c->api_burst;
      if (nrm_kube_new (&ko, &kube, err) < 0)
        goto out;
      nrm_log (NULL, NRM_LOG_INFO, "Kubernetes API at %s", nrm_kube_server (kube));
    }
  if (resolve_node_settings (c, kube, err) < 0 || check_kubelet_managers (c, err) < 0)
    goto out;
  ask_api_minor (c, kube);
  /* Every setting is checked before the first socket or file is made. */
  if (c->http_address && nrm_http_bind (c->http_address, &http_fd, err) < 0)
    {
      nrm_error_wrap (err, "plugin");
      goto out;
    }
  if (check_state_dir (c, "plugin", err) < 0 || check_cpuset (c, err) < 0)
    goto out;
  if (load_machine (cli, &t, err) < 0)
    goto out;
  if (open_drivers (c, t, &reg, &d, err) < 0)
    goto out;
  if (d.n == 0)
    {
      nrm_error_set (err, EINVAL, "plugin: no driver enabled (--drivers `%s`)", c->drivers ? c->drivers : "");
      goto out;
    }
  plugins = xcalloc (d.n, sizeof (*plugins));
  pubs = xcalloc (d.n, sizeof (*pubs));
  handovers = xcalloc (d.n, sizeof (*handovers));
  names = xcalloc (d.n, sizeof (*names));
  if (c->hook_path[0])
    hook = json_pack ("{s:s, s:s, s:[s, s, s, s, s]}", "hookName", "createRuntime", "path", c->hook_path, "args",
                      "nrm-hook", "--fsroot", c->fsroot, "--state-dir", c->state_dir);
  /* What shapes the devices, for nrm status to compare its own settings
   * with; before the drivers start, whose recovery removes what an
   * interrupted write of it left. */
  settings = nrm_settings_record (c, t, &d);
  digest = settings_digest (settings);
  takeback = (struct takeback){ .state_dir = c->state_dir, .settings = settings, .rec = &rec };
  if (nrm_mkdir_p (c->state_dir, 0700, err) < 0 || nrm_settings_write (c->state_dir, settings, err) < 0)
    goto out;
  for (size_t i = 0; i < d.n; i++)
    {
      struct nrm_plugin_config pc;
      names[i] = d.slots[i].name;
      nrm_config_plugin (c, d.slots[i].name, &pc);
      pc.log = nrm_log;
      pc.cdi_hook = hook;
      /* Any claim may change the exclusive CPUs: the shared pool follows. */
      pc.on_change = reconcile_kick;
      pc.on_change_ctx = &rec;
      pc.on_health = refresh_kick;
      pc.on_health_ctx = &refresher;
      if (c->claims_dir)
        {
          if (claims_dir == NULL)
            claims_dir = nrm_claims_dir_new (c->claims_dir);
          nrm_claim_source_dir (&pc.claims, claims_dir);
        }
      else
        nrm_claim_source_kube (&pc.claims, kube);
      if (nrm_plugin_start (&pc, d.slots[i].ops, d.slots[i].self, &plugins[i], err) < 0)
        goto out;
      nrm_log (NULL, NRM_LOG_INFO, "%s: serving %s, registering at %s", pc.driver, nrm_plugin_dra_socket (plugins[i]),
               nrm_plugin_registration_socket (plugins[i]));
      /* The newest instance writes the slices and cpusets; an older one
       * still running (a rolling update) sees this and stops. */
      struct nrm_handover_config hc = { .state_dir = c->state_dir,
                                        .driver = d.slots[i].name,
                                        .instance_lock = nrm_plugin_instance_lock (plugins[i]),
                                        .instance_uid = c->instance_uid,
                                        .settings = digest,
                                        .log = publisher_log,
                                        .log_ctx = (void *) d.slots[i].name,
                                        .became_active = took_back,
                                        .ctx = &takeback };
      if (nrm_handover_claim (&hc, &handovers[i], err) < 0)
        goto out;
    }
  rec.handovers = handovers;
  if (api && !c->no_publish)
    {
      if (start_publishers (c, &d, kube, pubs, handovers, err) < 0)
        goto out;
      refresher.cfg = c;
      refresher.drivers = &d;
      refresher.pubs = pubs;
      if (refresher.wake >= 0 && pthread_create (&refresher.thread, NULL, refresh_thread, &refresher) == 0)
        refreshing = true;
    }
  /* Binding conditions, for the drivers that have them. */
  if (api)
    {
      struct nrm_binder_config bc
          = { .kube = kube, .node_name = c->node_name, .drivers = &d, .log = publisher_log, .log_ctx = "binding" };
      if (nrm_binder_start (&bc, &binder, err) < 0)
        goto out;
      /* Other drivers' devices here, for the drivers that step aside. */
      struct nrm_nodeview_config vc = { .kube = kube,
                                        .node_name = c->node_name,
                                        .drivers = &d,
                                        .changed = refreshing ? refresh_kick : NULL,
                                        .ctx = &refresher,
                                        .log = publisher_log,
                                        .log_ctx = "node devices" };
      if (nrm_nodeview_start (&vc, &nodeview, err) < 0)
        goto out;
    }
  struct nrm_metrics_sources ms = { .cfg = c,
                                    .t = t,
                                    .drivers = &d,
                                    .names = names,
                                    .plugins = plugins,
                                    .publishers = api && !c->no_publish ? pubs : NULL };
  if (c->http_address)
    {
      if (nrm_http_start (TAKE_FD (http_fd), http_handler, &ms, &http, err) < 0)
        goto out;
      nrm_log (NULL, NRM_LOG_INFO, "serving /healthz, /readyz and /metrics on port %d", nrm_http_port (http));
    }
  /* The shared pool is kept where cgroup v2 is mounted; never this
   * host's when a recorded machine is served without an --fsroot. */
  if (c->reconcile_interval > 0 && c->topology && strcmp (c->fsroot, "/") == 0)
    nrm_log (NULL, NRM_LOG_INFO, "serving a recorded machine: this host's container cgroups are left alone");
  else if (c->reconcile_interval > 0)
    {
      nrm_error_t cerr = NULL;
      cleanup_free char *ctl
          = xasprintf ("%s/sys/fs/cgroup/cgroup.controllers", strcmp (c->fsroot, "/") ? c->fsroot : "");
      if (access (ctl, F_OK) == 0 && nrm_cgroupfs_open (c->fsroot, &rec.fs, &cerr) == 0)
        {
          rec.t = t;
          rec.drivers = &d;
          if (pthread_create (&rec.thread, NULL, reconcile_thread, &rec) != 0)
            {
              nrm_cgroupfs_close (rec.fs);
              rec.fs = NULL;
            }
        }
      else
        nrm_log (NULL, NRM_LOG_WARNING, "no cgroup v2 at %s/sys/fs/cgroup: the shared pool is not managed%s%s",
                 strcmp (c->fsroot, "/") ? c->fsroot : "", cerr ? ": " : "", cerr ? nrm_error_msg (cerr) : "");
      nrm_error_release (&cerr);
    }
  /* Until a signal; meanwhile, every minute, the claims of runs killed
   * with -9 go back (a run releases them too, but runs may be rare). */
  for (;;)
    {
      nrm_run_release_stale (c->fsroot, c->state_dir, plugins, d.n);
      struct timespec minute = { .tv_sec = 60 };
      sig = sigtimedwait (&set, NULL, &minute);
      if (sig > 0)
        break;
    }
  nrm_log (NULL, NRM_LOG_INFO, "%s: finishing calls in flight and stopping", strsignal (sig));
  r = 0;
out:
  if (rec.fs)
    {
      __atomic_store_n (&rec.stop, true, __ATOMIC_SEQ_CST);
      reconcile_kick (&rec);
      pthread_join (rec.thread, NULL);
      nrm_cgroupfs_close (rec.fs);
    }
  nrm_http_stop (http);
  if (refreshing)
    {
      uint64_t one = 1;
      __atomic_store_n (&refresher.stop, true, __ATOMIC_SEQ_CST);
      if (write (refresher.wake, &one, sizeof (one)) < 0)
        nrm_log (NULL, NRM_LOG_DEBUG, "cannot wake the slice refresher: %s", strerror (errno));
      pthread_join (refresher.thread, NULL);
    }
  /* Requests in flight end now: nothing waits for the API server. */
  nrm_binder_stopping (binder);
  nrm_nodeview_stopping (nodeview);
  if (kube)
    nrm_kube_cancel (kube);
  nrm_binder_stop (binder);
  nrm_nodeview_stop (nodeview);
  /* Closed only now: the node view's thread may still have kicked it. */
  if (refresher.wake >= 0)
    close (refresher.wake);
  for (size_t i = d.n; pubs && i-- > 0;)
    nrm_publisher_stop (pubs[i]);
  /* Nothing of this instance writes any more: a twin may take over now. */
  for (size_t i = d.n; handovers && i-- > 0;)
    nrm_handover_release (handovers[i]);
  for (size_t i = d.n; plugins && i-- > 0;)
    nrm_plugin_stop (plugins[i]);
  nrm_claims_dir_free (claims_dir);
  close_drivers (reg, &d);
  nrm_kube_free (kube);
  if (rec.wake >= 0)
    close (rec.wake);
  nrm_topology_free (t);
  return r;
}

/* nrm controller: see nrm/controller.h. */
static int
cmd_controller (struct cli *cli, nrm_error_t *err)
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

#else
/* plugin and run need gRPC and libnuma, whose loading alone costs more
 * memory than a whole `nrm slices`: they live in nrm-agent, beside nrm. */
static void
exec_agent (char **argv)
{
  char self[4096];
  ssize_t n = readlink ("/proc/self/exe", self, sizeof (self) - 20);
  if (n > 0)
    {
      self[n] = '\0';
      char *slash = strrchr (self, '/');
      if (slash)
        {
          strcpy (slash + 1, "nrm-agent");
          argv[0] = self;
          execv (self, argv);
        }
    }
  fprintf (stderr, "nrm: cannot run nrm-agent from beside nrm (%s): %s\n", n > 0 ? self : "?", strerror (errno));
  exit (strcmp (argv[1], "run") == 0 ? NRM_RUN_EXIT_FAILED : EXIT_FAILURE);
}
#endif

int
main (int argc, char **argv)
{
  nrm_error_t err = NULL;
  struct cli cli = { .json = false, .run.memory_tier = -1, .run.partition = -1 };
  int r;

  nrm_json_abort_on_oom ();
  if (argc < 2)
    {
      fputs (usage_text, stderr);
      return EXIT_USAGE;
    }
  const char *cmd = argv[1];
  if (strcmp (cmd, "help") == 0 || strcmp (cmd, "--help") == 0 || strcmp (cmd, "-h") == 0)
    {
      fputs (usage_text, stdout);
      return 0;
    }
  if (strcmp (cmd, "version") == 0 || strcmp (cmd, "--version") == 0)
    {
      printf ("nrm %s\n", PACKAGE_VERSION);
      return 0;
    }
  int (*run) (struct cli *, nrm_error_t *) = NULL;
  if (strcmp (cmd, "topology") == 0)
    run = cmd_topology;
  else if (strcmp (cmd, "slices") == 0)
    run = cmd_slices;
#ifdef NRM_AGENT
  else if (strcmp (cmd, "plugin") == 0)
    run = cmd_plugin;
  else if (strcmp (cmd, "controller") == 0)
    run = cmd_controller;
  else if (strcmp (cmd, "run") == 0)
    run = cmd_run;
#else
  else if (strcmp (cmd, "plugin") == 0 || strcmp (cmd, "run") == 0 || strcmp (cmd, "controller") == 0)
    exec_agent (argv);
#endif
  else if (strcmp (cmd, "hook") == 0)
    run = cmd_hook;
  else if (strcmp (cmd, "status") == 0)
    run = cmd_status;
  else
    {
      fprintf (stderr, "nrm: unknown command `%s`; see `nrm --help`\n", cmd);
      return EXIT_USAGE;
    }

  nrm_config_init (&cli.cfg);
  r = parse_options (&cli, cmd, argc - 1, argv + 1, &err);
  if (r == 1)
    {
      fputs (usage_text, stdout);
      nrm_config_done (&cli.cfg);
      return 0;
    }
  /* nrm run's own failures are 125, as timeout(1)'s and env(1)'s: never
   * taken for a command's own 1 or 2. */
  bool is_run = strcmp (cmd, "run") == 0;
  if (r < 0)
    {
      nrm_config_done (&cli.cfg);
      hwloc_bitmap_free (cli.run.cpu_list);
      hwloc_bitmap_free (cli.run.cpu_nodes);
      hwloc_bitmap_free (cli.run.mem_nodes);
      return fail (&err, is_run ? NRM_RUN_EXIT_FAILED : EXIT_USAGE);
    }
  /* The plugin matches nodes[] by labels too, once it has the API; status
   * takes the plugin's choice from its record. */
  if (strcmp (cmd, "plugin") && strcmp (cmd, "status") && nrm_config_resolve_node (&cli.cfg, NULL, &err) < 0)
    {
      nrm_config_done (&cli.cfg);
      return fail (&err, is_run ? NRM_RUN_EXIT_FAILED : EXIT_USAGE);
    }
  r = run (&cli, &err);
  nrm_config_done (&cli.cfg);
  hwloc_bitmap_free (cli.run.cpu_list);
  hwloc_bitmap_free (cli.run.cpu_nodes);
  hwloc_bitmap_free (cli.run.mem_nodes);
  if (r < 0)
    return fail (&err, is_run ? NRM_RUN_EXIT_FAILED : EXIT_FAILURE);
  return run_status; /* nrm run: the command's own status */
}
