/* SPDX-License-Identifier: Apache-2.0 */
/* The command line both executables share (nrm/cli.h). */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/partition.h"
#include "cpuset/placement.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/quantity.h"
#include "nrm/base/xalloc.h"
#include "nrm/cli.h"
#include "nrm/hook.h"
#include "nrm/settings.h"
#include "nrm/setup.h"
#include "nrm/status.h"
#include "topology/topology.h"

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
run_policy (struct nrm_cli *cli, enum nrm_run_mempolicy p, const char *flag, nrm_error_t *err)
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
run_list_option (struct nrm_cli *cli, int c, const char *flag, const char *arg, nrm_error_t *err)
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
parse_options (struct nrm_cli *cli, const char *cmd, int argc, char **argv, nrm_error_t *err)
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

/* Output is built in memory and written only on success: a failing command
 * prints nothing on stdout. */
int
nrm_cli_emit (const char *buf, size_t len, nrm_error_t *err)
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
  return nrm_cli_emit (s, len + 1, err);
}

int
nrm_cli_topology (struct nrm_cli *cli, nrm_error_t *err)
{
  struct nrm_topology *t = NULL;
  int r;
  if (nrm_setup_machine (&cli->cfg, &t, err) < 0)
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
            r = nrm_cli_emit (buf, len, err);
        }
    }
  nrm_topology_free (t);
  return r;
}

int
nrm_cli_slices (struct nrm_cli *cli, nrm_error_t *err)
{
  struct nrm_topology *t = NULL;
  struct nrm_registry *reg = NULL;
  struct nrm_drivers d = { 0 };
  cleanup_json json_t *list = NULL;
  int r = -1;
  if (nrm_setup_machine (&cli->cfg, &t, err) < 0)
    return -1;
  if (nrm_setup_drivers (&cli->cfg, t, &reg, &d, err) == 0)
    r = nrm_drivers_slices (&d, &cli->cfg.publish, NULL, NULL, &list, err);
  nrm_setup_close_drivers (reg, &d);
  nrm_topology_free (t);
  if (r < 0)
    return -1;
  return emit_json (list, err);
}

int
nrm_cli_status (struct nrm_cli *cli, nrm_error_t *err)
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
    if (nrm_setup_kubelet (&cli->cfg, "status", -1, &kubelet, err) < 0)
      return -1;
  }
  if (nrm_setup_machine (&cli->cfg, &t, err) < 0)
    return -1;
  if (nrm_setup_drivers (&cli->cfg, t, &reg, &d, err) == 0)
    {
      cleanup_json json_t *mine = nrm_settings_record (&cli->cfg, t, &d);
      if (nrm_settings_check (cli->cfg.state_dir, mine, "status", err) < 0)
        {
          nrm_setup_close_drivers (reg, &d);
          nrm_topology_free (t);
          return -1;
        }
      FILE *f = open_memstream (&buf, &len);
      r = f ? nrm_status (&cli->cfg, t, &d, cli->json, f, err) : nrm_error_errno (err, errno, "open_memstream");
      if (f)
        fclose (f);
    }
  nrm_setup_close_drivers (reg, &d);
  nrm_topology_free (t);
  return r < 0 ? -1 : nrm_cli_emit (buf, len, err);
}

int
nrm_cli_hook (struct nrm_cli *cli, nrm_error_t *err)
{
  cleanup_free char *summary = NULL;
  if (nrm_hook_stdin (cli->cfg.fsroot, cli->cfg.state_dir, &summary, err) < 0)
    return nrm_error_wrap (err, "hook");
  return 0;
}

static void
cli_done (struct nrm_cli *cli)
{
  nrm_config_done (&cli->cfg);
  hwloc_bitmap_free (cli->run.cpu_list);
  hwloc_bitmap_free (cli->run.cpu_nodes);
  hwloc_bitmap_free (cli->run.mem_nodes);
}

int
nrm_cli_main (int argc, char **argv, const struct nrm_command *commands, size_t n)
{
  nrm_error_t err = NULL;
  struct nrm_cli cli = { .json = false, .run.memory_tier = -1, .run.partition = -1 };
  const struct nrm_command *command = NULL;
  int r;

  nrm_json_abort_on_oom ();
  if (argc < 2)
    {
      fputs (usage_text, stderr);
      return NRM_EXIT_USAGE;
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
  for (size_t i = 0; i < n && command == NULL; i++)
    if (strcmp (cmd, commands[i].name) == 0)
      command = &commands[i];
  if (command == NULL)
    {
      fprintf (stderr, "nrm: unknown command `%s`; see `nrm --help`\n", cmd);
      return NRM_EXIT_USAGE;
    }
  if (command->handoff)
    command->handoff (argv);

  nrm_config_init (&cli.cfg);
  r = parse_options (&cli, cmd, argc - 1, argv + 1, &err);
  if (r == 1)
    {
      fputs (usage_text, stdout);
      cli_done (&cli);
      return 0;
    }
  /* nrm run's own failures are 125, as timeout(1)'s and env(1)'s: never
   * taken for a command's own 1 or 2. */
  bool is_run = strcmp (cmd, "run") == 0;
  /* The plugin matches nodes[] by labels too, once it has the API; status
   * takes the plugin's choice from its record. */
  if (r == 0 && strcmp (cmd, "plugin") && strcmp (cmd, "status"))
    r = nrm_config_resolve_node (&cli.cfg, NULL, &err);
  if (r < 0)
    {
      cli_done (&cli);
      return fail (&err, is_run ? NRM_RUN_EXIT_FAILED : NRM_EXIT_USAGE);
    }
  r = command->run (&cli, &err);
  cli_done (&cli);
  if (r < 0)
    return fail (&err, is_run ? NRM_RUN_EXIT_FAILED : EXIT_FAILURE);
  return cli.status; /* nrm run: the command's own status */
}
