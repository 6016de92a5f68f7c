/* SPDX-License-Identifier: Apache-2.0 */
/* Every option of nrm, once (nrm/options.h): one row each, from which the
 * parser, the refusal by other commands, --help and the man page all come.
 * A new flag is one row. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpuset/partition.h"
#include "cpuset/placement.h"
#include "driver/names.h"
#include "nrm/base/quantity.h"
#include "nrm/base/xalloc.h"
#include "nrm/options.h"

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
  CMD_ALL = (1 << 7) - 1, /* the node's commands: all but kubectl */
  CMD_KUBECTL_NODES = 1 << 7,
  CMD_KUBECTL_CLAIM = 1 << 8,
  CMD_KUBECTL_PODS = 1 << 9,
  CMD_KUBECTL = CMD_KUBECTL_NODES | CMD_KUBECTL_CLAIM | CMD_KUBECTL_PODS,
  CMD_EVERY = CMD_ALL | CMD_KUBECTL,
  CMD_DRIVERS = CMD_SLICES | CMD_STATUS | CMD_PLUGIN | CMD_CONTROLLER,
  CMD_API = CMD_PLUGIN | CMD_CONTROLLER,
};

static const struct
{
  const char *name, *help;
} commands[] = {
  { "topology", "show the machine as nrm models it (packages, NUMA nodes, caches, cores, PCI)" },
  { "slices", "print the node's ResourceSlices (resource.k8s.io/v1) as one List document" },
  { "plugin", "serve the enabled drivers (CPU, memory, PCI, ...) to the kubelet (DRA kubelet plugin)" },
  { "run", "run a command on CPUs (and memory) picked as for a claim, then release them:\n"
           "nrm run {--cpus N | -C LIST} [-N NODES] [--membind NODES] [--memory SIZE]\n"
           "[--dry-run [--json] [-t FILE]] -- COMMAND...\n"
           "nrm run --pid PID {--cpus N | -C LIST} ...: move a running process onto them\n"
           "The command runs in a transient cgroup v2 (nrm.slice/run-<pid>), or, without a\n"
           "cgroup v2 cpuset, pinned with sched_setaffinity and set_mempolicy. The CPUs come\n"
           "from the same state as nrm plugin's, so both can run side by side." },
  { "status", "what nrm has handed out: pools (PCI functions with their holders and those\n"
              "left to other drivers), claims and runs (their CPUs' whole and partial cores, L3\n"
              "groups, packages and NUMA nodes), exclusive and shared CPUs" },
  { "hook", "OCI createRuntime hook: bind a new container to its claim's CPUs and memory\n"
            "nodes (the runtime runs it from the CDI spec, with the OCI state on stdin)" },
  { "controller", "the cluster's one binding-conditions controller (a Deployment beside the\n"
                  "DaemonSet): labels each claim that waits for binding conditions on an nrm\n"
                  "device with its node, so that each node watches only its own claims" },
  { "kubectl nodes", "per node and NUMA node: the CPUs, memory, huge pages and devices the\n"
                     "ResourceSlices publish, what claims have allocated and prepared of them,\n"
                     "and what is free, as the scheduler sees it (also `kubectl nrm nodes`)" },
  { "kubectl claim", "kubectl claim NAME: a ResourceClaim's allocation, the placement nrm's\n"
                     "drivers report in its status.devices (CPUs, NUMA nodes, bytes, PCI\n"
                     "function...) and their conditions (also `kubectl nrm claim NAME`)" },
  { "kubectl pods", "which pods hold which CPUs, NUMA nodes, memory and PCI functions,\n"
                    "through their claims (also `kubectl nrm pods`)" },
};
#define N_COMMANDS (sizeof (commands) / sizeof (commands[0]))

/* How a row's value is stored: the setters that need no code of their own
 * take the field by its offset in struct nrm_cli. */
enum kind
{
  K_STRING, /* char *, through nrm_config_set_string() */
  K_TRUE,   /* bool, set by the switch */
  K_LONG,   /* numbers, through number() */
  K_INT,
  K_UINT,
  K_DOUBLE,
};

struct row;
typedef int setter (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err);

struct row
{
  const char *name;
  char letter;     /* or 0 */
  const char *arg; /* its argument in the help, or NULL for a switch */
  unsigned cmds;   /* the commands that take it */
  const char *key; /* its config file key, or NULL */
  setter *set;     /* NULL: store by kind at field */
  enum kind kind;
  size_t field;     /* offsetof (struct nrm_cli, ...) */
  double min, max;  /* numbers */
  const char *what; /* numbers: what the error says it needs (default: a number from min to max) */
  const char *help;
};

#define CFG(f) offsetof (struct nrm_cli, cfg.f)
#define KCTL(f) offsetof (struct nrm_cli, kubectl.f)
#define RUN(f) offsetof (struct nrm_cli, run.f)

static void *
field (struct nrm_cli *cli, const struct row *o)
{
  return (char *) cli + o->field;
}

/* The one number parser of the flags: decimal digits (and a fraction for a
 * double), read exactly as a quantity, within the row's bounds. */
static int
number (const struct row *o, const char *cmd, const char *arg, double *ret, nrm_error_t *err)
{
  nrm_quantity_t q = 0;
  nrm_error_t e = NULL;
  const char *digits = o->kind == K_DOUBLE ? "0123456789." : "0123456789";
  const nrm_quantity_t unit = 1000000000;
  if (*arg == '\0' || strspn (arg, digits) != strlen (arg) || strlen (arg) > 24 || nrm_quantity_parse (arg, &q, &e) < 0
      || q < (nrm_quantity_t) o->min * unit || q > (nrm_quantity_t) o->max * unit)
    {
      char what[64];
      nrm_error_release (&e);
      snprintf (what, sizeof (what), "a number from %g to %g", o->min, o->max);
      return nrm_error_set (err, EINVAL, "%s: `--%s` needs %s, not `%.40s`", cmd, o->name, o->what ? o->what : what,
                            arg);
    }
  *ret = (double) q / (double) unit;
  return 0;
}

static int
store (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  double v = 0;
  if (o->kind == K_STRING)
    return nrm_config_set_string ((char **) field (cli, o), arg, err);
  if (o->kind == K_TRUE)
    {
      *(bool *) field (cli, o) = true;
      return 0;
    }
  if (number (o, cmd, arg, &v, err) < 0)
    return -1;
  if (o->kind == K_LONG)
    *(long *) field (cli, o) = (long) v;
  else if (o->kind == K_INT)
    *(int *) field (cli, o) = (int) v;
  else if (o->kind == K_UINT)
    *(unsigned *) field (cli, o) = (unsigned) v;
  else
    *(double *) field (cli, o) = v;
  return 0;
}

/* --- the setters of their own -------------------------------------------- */

static int
set_reserved_cpus (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  return nrm_config_set_reserved_cpus (&cli->cfg, arg, err);
}

static int
set_isolated_cpus (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  return nrm_config_set_isolated_cpus (&cli->cfg, arg, err);
}

/* The flags replace the file's list rather than adding to it. */
static int
set_reserved_memory (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  if (!cli->reserved_memory_flag)
    nrm_config_clear_reserved_memory (&cli->cfg);
  cli->reserved_memory_flag = true;
  return nrm_config_add_reserved_memory (&cli->cfg, arg, err);
}

static int
set_cpu_mode (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  return nrm_config_set_cpu_mode (&cli->cfg, arg, err);
}

static int
set_cpu_options (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  return nrm_config_set_cpu_options (&cli->cfg, arg, err);
}

static int
set_feature_gates (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  return nrm_config_set_feature_gates (&cli->cfg, arg, err);
}

static int
set_kubernetes_version (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  return nrm_config_set_kubernetes_version (&cli->cfg, arg, err);
}

static int
set_shared_pool_cgroups (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  return nrm_config_set_shared_pool_cgroups (&cli->cfg, arg, err);
}

static int
set_no_publish (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  cli->cfg.no_publish = true;
  return 0;
}

static int
set_partition (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  enum nrm_partition_mode m;
  if (nrm_partition_mode_parse (arg, "run: `--partition`", &m, err) < 0)
    return -1;
  cli->run.partition = (int) m;
  return 0;
}

static int
set_memory_kind (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  if (*arg == '\0' || strlen (arg) > 32
      || strspn (arg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-") != strlen (arg))
    return nrm_error_set (err, EINVAL, "run: `--memory-kind` needs a memory kind such as DRAM, HBM or NVM, not `%.40s`",
                          arg);
  cli->run.memory_kind = arg;
  return 0;
}

/* --memory and the huge pages: bytes; huge pages in whole pages. */
static int
set_bytes (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  bool memory = strcmp (o->name, "memory") == 0, small = strcmp (o->name, "hugepages-2Mi") == 0;
  uint64_t bytes = 0, page = memory ? 1 : small ? 2u << 20 : 1u << 30;
  nrm_error_t qerr = NULL;
  if (nrm_quantity_parse_bytes (arg, &bytes, &qerr) < 0 || bytes == 0 || bytes % page)
    {
      nrm_error_release (&qerr);
      return nrm_error_set (err, EINVAL, "run: `--%s` needs %s such as %s, not `%s`", o->name,
                            page == 1 ? "a size" : "an amount of whole pages",
                            memory  ? "512Mi"
                            : small ? "64Mi"
                                    : "2Gi",
                            arg);
    }
  *(const char **) field (cli, o) = arg;
  return 0;
}

static int
set_option (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  unsigned bits = 0;
  if (cli->n_options == 15)
    return nrm_error_set (err, EINVAL, "run: at most 15 `--option`s");
  if (nrm_cpu_option_parse (arg, &bits, err) < 0)
    return -1;
  cli->options[cli->n_options++] = arg;
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

static int
set_localalloc (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  return run_policy (cli, NRM_RUN_MEM_LOCAL, o->name, err);
}

/* -C CPUS, -N NODES (and --numa-node K), -m/-i NODES, -p NODE: lists as
 * numactl takes them ("all" for every one, for nodes); whether they are on
 * this machine is checked by the run, which has the machine. */
static int
set_list (struct nrm_cli *cli, const struct row *o, const char *cmd, const char *arg, nrm_error_t *err)
{
  hwloc_bitmap_t set = NULL;
  nrm_error_t perr = NULL;
  int c = o->letter ? o->letter : 'N';
  bool nodes = c != 'C';
  if (c == 'N' && o->letter == 0)
    {
      double v;
      if (number (o, cmd, arg, &v, err) < 0)
        return -1;
    }
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
      return nrm_error_set (err, EINVAL, "run: `--%s` needs %s, not `%s`", o->name,
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
      if (run_policy (cli, p, o->name, err) < 0)
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

/* --- the table ------------------------------------------------------------ */

/* clang-format off */
static const struct row rows[] = {
  { "config", 'c', "FILE", CMD_ALL, NULL, NULL, K_STRING, 0, 0, 0, NULL,
    "YAML or JSON config file; flags override it (docs/configuration.md)" },
  { "topology", 't', "FILE", CMD_ALL, "topology", NULL, K_STRING, CFG (topology), 0, 0, NULL,
    "read an hwloc XML export instead of this machine" },
  { "node-name", 0, "NAME", CMD_ALL, "nodeName", NULL, K_STRING, CFG (node_name), 0, 0, NULL,
    "Kubernetes node name (default: $NODE_NAME, else the host name)" },
  { "reserved-cpus", 0, "LIST", CMD_ALL, "reservedCPUs", set_reserved_cpus, 0, 0, 0, 0, NULL,
    "CPUs never handed out, e.g. 0-1 (like reservedSystemCPUs)" },
  { "isolated-cpus", 0, "LIST", CMD_ALL, "isolatedCPUs", set_isolated_cpus, 0, 0, 0, 0, NULL,
    "isolated CPUs (default: /sys/devices/system/cpu/isolated\non this machine, none for an XML file)" },
  { "reserved-memory", 0, "SPEC", CMD_ALL, "reservedMemory", set_reserved_memory, 0, 0, 0, 0, NULL,
    "memory kept back on a NUMA node, in the kubelet's format:\nNODE:memory=AMOUNT[,hugepages-SIZE=AMOUNT]; repeatable" },
  { "cpu-mode", 0, "MODE", CMD_ALL, "cpu.mode", set_cpu_mode, 0, 0, 0, 0, NULL,
    "numa (default): one consumable CPU device per NUMA node;\npartitioned: exclusive node, L3-group and core devices" },
  { "cpu-options", 0, "LIST", CMD_ALL, "cpu.options", set_cpu_options, 0, 0, 0, 0, NULL,
    "node-wide CPU placement options, the kubelet's names:\nfull-pcpus-only, distribute-cpus-across-cores,\n"
    "strict-cpu-reservation, prefer-align-cpus-by-uncorecache\n(a claim's CPUConfig replaces them; distribute-cpus-\n"
    "across-numa and align-by-socket are refused: a request\nlies on one NUMA node)" },
  { "feature-gates", 0, "LIST", CMD_ALL, "featureGates", set_feature_gates, 0, 0, 0, 0, NULL,
    "API server gates the slices may use, e.g.\nDRAListTypeAttributes=true,DRANodeAllocatableResources=true" },
  { "kubernetes-version", 0, "V", CMD_ALL, "kubernetesVersion", set_kubernetes_version, 0, 0, 0, 0, NULL,
    "the API server's release, e.g. 1.37, whose field shapes\nthe slices take (1.36; plugin: asked of the API server)" },
  { "fsroot", 0, "DIR", CMD_ALL, "fsroot", NULL, K_STRING, CFG (fsroot), 0, 0, NULL,
    "prefix of /sys for the files nrm reads itself ($NRM_FSROOT)" },
  { "help", 'h', NULL, CMD_EVERY, NULL, NULL, K_TRUE, 0, 0, 0, NULL, "show this help" },
  { "drivers", 0, "LIST", CMD_DRIVERS, "drivers", NULL, K_STRING, CFG (drivers), 0, 0, NULL,
    "the drivers to serve, by id (default: every one; built in:\ncpu, memory, pci)" },
  { "driver-dir", 0, "DIR", CMD_DRIVERS, "driverDir", NULL, K_STRING, CFG (driver_dir), 0, 0, NULL,
    "load every driver DIR/*.so as well (docs/architecture.md)" },
  { "kubelet-dir", 0, "DIR", CMD_PLUGIN | CMD_SLICES | CMD_STATUS, "kubeletDir", NULL, K_STRING, CFG (kubelet_dir), 0,
    0, NULL,
    "kubelet root with plugins/ and plugins_registry/\n(/var/lib/kubelet), where the PCI driver sees other drivers\n"
    "(it reads them under --fsroot; not controller), and whose\nconfig.yaml (config key kubeletConfig) plugin, status and run\n"
    "read: its reserved CPUs and memory adopted, or refused when\nthey differ from nrm's" },
  { "json", 0, NULL, CMD_TOPOLOGY | CMD_STATUS | CMD_RUN, NULL, NULL, K_TRUE, offsetof (struct nrm_cli, json), 0, 0,
    NULL, "print the whole model (status, run --dry-run: the report) as JSON" },
  { "hardware", 0, NULL, CMD_TOPOLOGY, NULL, NULL, K_TRUE, offsetof (struct nrm_cli, hardware), 0, 0, NULL,
    "numactl -H's view: each node's CPUs, size and free memory\n(live machine only), the distance table" },
  { "cdi-dir", 0, "DIR", CMD_PLUGIN, "cdiDir", NULL, K_STRING, CFG (cdi_dir), 0, 0, NULL,
    "where CDI specs are written (/var/run/cdi)" },
  { "state-dir", 0, "DIR", CMD_PLUGIN | CMD_RUN | CMD_STATUS | CMD_HOOK, "stateDir", NULL, K_STRING, CFG (state_dir), 0,
    0, NULL, "checkpoints and locks (/var/lib/nrm); it must exist, except\nthe default, which is created" },
  { "create-state-dir", 0, NULL, CMD_PLUGIN | CMD_RUN, "createStateDir", NULL, K_TRUE, CFG (create_state_dir), 0, 0,
    NULL, "create a missing --state-dir (plugin and run)" },
  { "allow-no-cpuset", 0, NULL, CMD_PLUGIN, "allowNoCpuset", NULL, K_TRUE, CFG (allow_no_cpuset), 0, 0, NULL,
    "serve although cgroup v2 has no cpuset controller (cgroup\nv1 or hybrid): the hook cannot bind containers, and fails\n"
    "those with claims; for trying the protocol only" },
  { "kubeconfig", 0, "FILE", CMD_API | CMD_KUBECTL, "kubeconfig", NULL, K_STRING, CFG (kubeconfig), 0, 0, NULL,
    "the Kubernetes API for claims and ResourceSlices (in a pod:\nits service account, without this flag; kubectl:\n"
    "default $KUBECONFIG, a list of files, else ~/.kube/config)" },
  { "context", 0, "NAME", CMD_KUBECTL, NULL, NULL, K_STRING, KCTL (context), 0, 0, NULL,
    "the kubeconfig context to use (default: its current-context)" },
  { "namespace", 'n', "NS", CMD_KUBECTL_CLAIM | CMD_KUBECTL_PODS, NULL, NULL, K_STRING, KCTL (namespace), 0, 0, NULL,
    "the namespace (claim: default the context's, else default;\npods: default every namespace)" },
  { "all-namespaces", 'A', NULL, CMD_KUBECTL_PODS, NULL, NULL, K_TRUE, KCTL (all_namespaces), 0, 0, NULL,
    "pods of every namespace (the default without -n)" },
  { "node", 0, "NAME", CMD_KUBECTL_NODES | CMD_KUBECTL_PODS, NULL, NULL, K_STRING, KCTL (node), 0, 0, NULL,
    "only this Kubernetes node" },
  { "output", 'o', "FORMAT", CMD_KUBECTL, NULL, NULL, K_STRING, KCTL (output), 0, 0, NULL,
    "json or yaml: the whole view (default: aligned columns)" },
  { "claims-dir", 0, "DIR", CMD_PLUGIN, "claimsDir", NULL, K_STRING, CFG (claims_dir), 0, 0, NULL,
    "read ResourceClaims from the *.json files in DIR instead" },
  { "no-publish", 0, NULL, CMD_PLUGIN, "publishSlices", set_no_publish, 0, 0, 0, 0, NULL,
    "do not publish ResourceSlices" },
  { "device-metadata", 0, NULL, CMD_PLUGIN, "deviceMetadata", NULL, K_TRUE, CFG (device_metadata), 0, 0, NULL,
    "give every container a metadata file of its devices\n(KEP-5304) under /var/run/kubernetes.io/dra-device-attributes" },
  { "api-qps", 0, "N", CMD_API, "apiQPS", NULL, K_DOUBLE, CFG (api_qps), 0, 10000, NULL,
    "API requests per second (20)" },
  { "api-burst", 0, "N", CMD_API, "apiBurst", NULL, K_LONG, CFG (api_burst), 1, 10000, "a whole number from 1 to 10000",
    "API requests allowed above --api-qps (100)" },
  { "http-address", 0, "A:PORT", CMD_PLUGIN, "httpAddress", NULL, K_STRING, CFG (http_address), 0, 0, NULL,
    "serve /healthz, /readyz and /metrics (Prometheus) there" },
  { "min-shared-cpus", 0, "N", CMD_PLUGIN | CMD_RUN, "cpu.minSharedCPUs", NULL, K_LONG, CFG (cpu.min_shared_cpus), 0,
    100000, NULL, "allocatable CPUs that always stay shared (1)" },
  { "reconcile-interval", 0, "S", CMD_PLUGIN, "reconcileIntervalSeconds", NULL, K_LONG, CFG (reconcile_interval), 0,
    86400, NULL, "seconds between passes that keep every container on the\nshared pool or its claim's CPUs (5; 0 turns it off)" },
  { "shared-pool-cgroups", 0, "LIST", CMD_PLUGIN, "cpu.sharedPoolCgroups", set_shared_pool_cgroups, 0, 0, 0, 0, NULL,
    "the host's cgroup subtrees kept on the shared pool\nbesides the pods, e.g. system.slice,user.slice,machine.slice\n"
    "(bare metal: services, sessions, podman; \"\" for none)" },
  { "hook-path", 0, "PATH", CMD_PLUGIN, "hookPath", NULL, K_STRING, CFG (hook_path), 0, 0, NULL,
    "the nrm-hook executable the CDI specs' hook runs (the one\nbeside this nrm; \"\" for no hook)" },
  { "instance-uid", 0, "UID", CMD_PLUGIN, "instanceUID", NULL, K_STRING, CFG (instance_uid), 0, 0, NULL,
    "rolling-update mode: UID in the socket names, so two\ninstances can serve side by side; the one that started\n"
    "last writes the slices and cpusets" },
  { "log-level", 0, "LEVEL", CMD_API, "logLevel", NULL, K_STRING, CFG (log_level), 0, 0, NULL,
    "error, warning, info (default) or debug" },
  { "log-format", 0, "FORMAT", CMD_API, "logFormat", NULL, K_STRING, CFG (log_format), 0, 0, NULL,
    "plain (default) or json" },
  { "lease-namespace", 0, "NS", CMD_CONTROLLER, NULL, NULL, K_STRING, CFG (lease_namespace), 0, 0, NULL,
    "namespace of its leader-election Lease (default:\n$POD_NAMESPACE, else nrm-system)" },
  { "cpus", 0, "N", CMD_RUN, NULL, NULL, K_UINT, RUN (cpus), 1, 65535, NULL, "exclusive CPUs for the command" },
  { "memory", 0, "SIZE", CMD_RUN, NULL, set_bytes, 0, RUN (memory), 0, 0, NULL,
    "memory on the same NUMA node, also its limit (e.g. 1Gi)" },
  { "hugepages-2Mi", 0, "SIZE", CMD_RUN, NULL, set_bytes, 0, RUN (hugepages_2mi), 0, 0, NULL,
    "2 MiB huge pages on that node (e.g. 64Mi)" },
  { "hugepages-1Gi", 0, "SIZE", CMD_RUN, NULL, set_bytes, 0, RUN (hugepages_1gi), 0, 0, NULL,
    "1 GiB huge pages on that node (e.g. 2Gi)" },
  { "memory-kind", 0, "KIND", CMD_RUN, NULL, set_memory_kind, 0, 0, 0, 0, NULL,
    "memory (and the binding) from the nearest node of this kind with\nroom: DRAM, HBM, NVM (nrm topology shows each node's kind)" },
  { "memory-tier", 0, "N", CMD_RUN, NULL, NULL, K_INT, RUN (memory_tier), 0, 15, "a tier from 0 (the fastest) to 15",
    "likewise by tier, 0 the fastest kind on the machine" },
  { "physcpubind", 'C', "LIST", CMD_RUN, NULL, set_list, 0, 0, 0, 0, NULL,
    "exactly these CPUs (as numactl -C, taskset -c); refused, naming\nthe holder, when a claim or run holds one" },
  { "cpunodebind", 'N', "NODES", CMD_RUN, NULL, set_list, 0, 0, 0, 0, NULL,
    "CPUs from these NUMA nodes only (default: the first node with\nroom, else several, nearest first)" },
  { "numa-node", 0, "K", CMD_RUN, NULL, set_list, 0, 0, 0, 65535, NULL, "the same as -N K" },
  { "membind", 'm', "NODES", CMD_RUN, NULL, set_list, 0, 0, 0, 0, NULL,
    "memory from these nodes only (default: the CPUs' nodes)" },
  { "interleave", 'i', "NODES", CMD_RUN, NULL, set_list, 0, 0, 0, 0, NULL, "memory interleaved over these nodes" },
  { "preferred", 'p', "NODE", CMD_RUN, NULL, set_list, 0, 0, 0, 0, NULL, "memory from this node first" },
  { "localalloc", 'l', NULL, CMD_RUN, NULL, set_localalloc, 0, 0, 0, 0, NULL,
    "memory from the node of the CPU that touches it" },
  { "dry-run", 0, NULL, CMD_RUN, NULL, NULL, K_TRUE, RUN (dry_run), 0, 0, NULL,
    "print what would be taken and why (cores, L3 groups, NUMA\nnodes, distances, what else is held); take nothing, run\n"
    "nothing; with --json as JSON, with -t FILE on a recorded\nmachine (holding nothing unless --state-dir is given)" },
  { "isolated", 0, NULL, CMD_RUN, NULL, NULL, K_TRUE, RUN (isolated), 0, 0, NULL,
    "isolated CPUs (see --isolated-cpus) instead of allocatable ones" },
  { "partition", 0, "MODE", CMD_RUN, NULL, set_partition, 0, 0, 0, 0, NULL,
    "root or isolated: the run's cgroup becomes a cpuset partition\n(Linux 6.7+), so no other task runs on its CPUs even if it\n"
    "sets its own affinity; refused where the kernel cannot (off:\nnone; default: the node's cpu.partition, where it can)" },
  { "option", 0, "NAME", CMD_RUN, NULL, set_option, 0, 0, 0, 0, NULL, "a CPU placement option for this run (repeatable)" },
  { "pid", 0, "PID", CMD_RUN, NULL, NULL, K_INT, RUN (attach_pid), 1, 4194304, "a process id",
    "no command: move running process PID (every thread) onto the\nCPUs, its pages onto their memory nodes, and hold them until\n"
    "it exits (as taskset -a -p); SIGINT or SIGTERM puts it back" },
};
/* clang-format on */
#define N_ROWS (sizeof (rows) / sizeof (rows[0]))

/* kubectl's flags and argument, checked: names go into request paths. */
static int
kubectl_usage (const struct nrm_kubectl_args *a, nrm_error_t *err)
{
  const char *sub = a->sub;
  if (a->output && strcmp (a->output, "json") && strcmp (a->output, "yaml"))
    return nrm_error_set (err, EINVAL, "%s: `-o %.40s`: the outputs are json and yaml (default: columns)", sub,
                          a->output);
  if (a->node && !nrm_is_dns_subdomain (a->node, 253))
    return nrm_error_set (err, EINVAL, "%s: `--node %.80s` is not a node name", sub, a->node);
  if (a->namespace && !nrm_is_dns_label (a->namespace))
    return nrm_error_set (err, EINVAL, "%s: `-n %.80s` is not a namespace name", sub, a->namespace);
  if (a->namespace && a->all_namespaces)
    return nrm_error_set (err, EINVAL, "%s: -n and -A: give one", sub);
  if (strcmp (sub, "claim") == 0 && a->name == NULL)
    return nrm_error_set (err, EINVAL, "claim: which claim? (kubectl nrm claim NAME [-n NAMESPACE])");
  if (a->name && !nrm_is_dns_subdomain (a->name, 253))
    return nrm_error_set (err, EINVAL, "claim: `%.80s` is not a ResourceClaim name", a->name);
  return 0;
}

static unsigned
command_bit (const char *cmd)
{
  for (size_t i = 0; cmd && i < N_COMMANDS; i++)
    if (strcmp (cmd, commands[i].name) == 0)
      return 1u << i;
  return 0;
}

/* "`nrm plugin` and `nrm controller`": the commands of a mask, kubectl's
 * three as `nrm kubectl` when the mask has them all. */
static void
command_list (unsigned mask, char *list, size_t size)
{
  bool all_kubectl = (mask & CMD_KUBECTL) == CMD_KUBECTL;
  if (all_kubectl)
    mask = (mask & ~(unsigned) CMD_KUBECTL) | CMD_KUBECTL_NODES;
  size_t n = 0, total = (size_t) __builtin_popcount (mask);
  list[0] = '\0';
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (mask & (1u << i))
      {
        n++;
        snprintf (list + strlen (list), size - strlen (list), "%s`nrm %s`",
                  n == 1       ? ""
                  : n == total ? " and "
                               : ", ",
                  (1u << i) == CMD_KUBECTL_NODES && all_kubectl ? "kubectl" : commands[i].name);
      }
}

static const struct row *
row_of (int c)
{
  if (c >= 256 && (size_t) (c - 256) < N_ROWS)
    return &rows[c - 256];
  for (size_t i = 0; i < N_ROWS; i++)
    if (rows[i].letter && rows[i].letter == c)
      return &rows[i];
  return NULL;
}

int
nrm_options_parse (struct nrm_cli *cli, const char *cmd, int argc, char **argv, nrm_error_t *err)
{
  struct option long_options[N_ROWS + 1];
  char shorts[2 * N_ROWS + 2] = "+";
  int c;
  for (size_t i = 0; i < N_ROWS; i++)
    {
      long_options[i] = (struct option){ rows[i].name, rows[i].arg ? required_argument : no_argument, NULL,
                                         rows[i].letter ? rows[i].letter : (int) (256 + i) };
      if (rows[i].letter)
        snprintf (shorts + strlen (shorts), sizeof (shorts) - strlen (shorts), "%c%s", rows[i].letter,
                  rows[i].arg ? ":" : "");
    }
  memset (&long_options[N_ROWS], 0, sizeof (long_options[0]));
  unsigned me = command_bit (cmd);
  /* kubectl's flags go before or after its arguments (kubectl nrm claim
   * NAME -n NS); the other commands stop at the first argument. */
  const char *optstring = me & CMD_KUBECTL ? shorts + 1 : shorts;

  /* Two passes: the config files first, so that every flag overrides them
   * wherever it stands on the command line. optind 0 starts getopt over
   * (its permutation included). */
  optind = 0;
  opterr = 0;
  while ((c = getopt_long (argc, argv, optstring, long_options, NULL)) != -1)
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
  else if ((me & CMD_KUBECTL_CLAIM) && optind + 1 == argc)
    cli->kubectl.name = argv[optind];
  else if (optind < argc)
    return nrm_error_set (err, EINVAL, "%s: unexpected argument `%s`", cmd,
                          argv[optind + ((me & CMD_KUBECTL_CLAIM) != 0)]);

  optind = 0;
  while ((c = getopt_long (argc, argv, optstring, long_options, NULL)) != -1)
    {
      const struct row *o = row_of (c);
      if (o == NULL || c == 'c')
        continue;
      /* A letter (-C) is refused by the commands its long name is refused by. */
      if (!(o->cmds & me))
        {
          char list[256];
          command_list (o->cmds, list, sizeof (list));
          return nrm_error_set (err, EINVAL, "%s: `--%s` is an option of %s", cmd, o->name, list);
        }
      if ((o->set ? o->set : store) (cli, o, cmd, optarg, err) < 0)
        return -1;
      /* Where a setting a node may have of its own came from. */
      if (o->key && nrm_config_is_node_key (o->key))
        nrm_config_set_source (&cli->cfg, o->key, "flag");
    }
  if (cli->json && cli->hardware)
    return nrm_error_set (err, EINVAL, "topology: --hardware is a text view and --json the whole model: give one");
  if ((me & CMD_KUBECTL) && kubectl_usage (&cli->kubectl, err) < 0)
    return -1;
  return nrm_config_finish (&cli->cfg, err);
}

/* --- help and man page ----------------------------------------------------- */

static void
help_text (FILE *out, const char *text, int column)
{
  for (const char *p = text; *p;)
    {
      size_t n = strcspn (p, "\n");
      fprintf (out, "%.*s\n", (int) n, p);
      p += n + (p[n] == '\n');
      if (*p)
        fprintf (out, "%*s", column, "");
    }
}

static void
help_row (FILE *out, const struct row *o)
{
  char head[64];
  snprintf (head, sizeof (head), "  %c%c%c --%s%s%s", o->letter ? '-' : ' ', o->letter ? o->letter : ' ',
            o->letter ? ',' : ' ', o->name, o->arg ? " " : "", o->arg ? o->arg : "");
  if (strlen (head) >= 29)
    fprintf (out, "%s\n%*s", head, 29, "");
  else
    fprintf (out, "%-29s", head);
  help_text (out, o->help, 29);
}

static const char trailer[]
    = "Exit status: 0 on success, 1 when the machine or a setting is unusable, 2 for bad usage.\n"
      "nrm run, as timeout(1) and env(1): the command's own status (128 + N when signal N\n"
      "killed it); 125 when nrm fails before the command starts (bad usage, no room); 126\n"
      "when the command cannot be executed; 127 when it is not found. nrm run --pid: 0 when\n"
      "the process exits, 128 + N when signal N ends nrm run (the process is put back).\n";

void
nrm_options_help (FILE *out, const char *cmd)
{
  unsigned me = command_bit (cmd);
  if (cmd && strcmp (cmd, "kubectl") == 0)
    {
      /* kubectl nrm, or nrm kubectl: the sub-commands and their options. */
      fputs ("Usage: kubectl nrm COMMAND [OPTIONS] (or nrm kubectl COMMAND [OPTIONS])\n\n"
             "What the scheduler and nrm's drivers decided, read from the Kubernetes API with\n"
             "your kubeconfig (kubectl passes its own flags to no plugin: give them here).\n\n"
             "Commands:\n",
             out);
      for (size_t i = 0; i < N_COMMANDS; i++)
        if ((1u << i) & CMD_KUBECTL)
          {
            fprintf (out, "  %-8s ", commands[i].name + 8);
            help_text (out, commands[i].help, 11);
          }
      fputs ("\nOptions:\n", out);
      for (size_t i = 0; i < N_ROWS; i++)
        if (rows[i].cmds & CMD_KUBECTL)
          help_row (out, &rows[i]);
      fputs ("\nkubectl nrm COMMAND --help: the options of COMMAND. Exit status: 0 on success, 1 when\n"
             "the API or a kubeconfig fails, 2 for bad usage.\n",
             out);
      return;
    }
  if (me)
    {
      fprintf (out, "Usage: nrm %s [OPTIONS]\n\n", cmd);
      help_text (out, commands[__builtin_ctz (me)].help, 0);
      fputs ("\nOptions:\n", out);
      for (size_t i = 0; i < N_ROWS; i++)
        if (rows[i].cmds & me)
          help_row (out, &rows[i]);
      fputc ('\n', out);
      fputs (me & CMD_KUBECTL ? "Exit status: 0 on success, 1 when the API or a kubeconfig fails, 2 for bad usage.\n"
                              : trailer,
             out);
      return;
    }
  fputs ("Usage: nrm COMMAND [OPTIONS]\n\n"
         "nrm publishes this node's CPUs, memory and PCI devices as NUMA-aware Kubernetes DRA devices.\n\n"
         "Commands:\n",
         out);
  for (size_t i = 0; i < N_COMMANDS; i++)
    {
      if (strlen (commands[i].name) > 10)
        fprintf (out, "  %s\n%13s", commands[i].name, "");
      else
        fprintf (out, "  %-10s ", commands[i].name);
      help_text (out, commands[i].help, 13);
    }
  fputs ("  help       show this help (nrm COMMAND --help: the options of COMMAND)\n"
         "  version    show the version\n",
         out);
  /* The options by the commands that take them, in the table's order. */
  unsigned done[N_ROWS];
  size_t n_done = 0;
  for (size_t i = 0; i < N_ROWS; i++)
    {
      bool seen = false;
      for (size_t k = 0; k < n_done; k++)
        seen |= done[k] == rows[i].cmds;
      if (seen)
        continue;
      done[n_done++] = rows[i].cmds;
      char list[256];
      command_list (rows[i].cmds, list, sizeof (list));
      fprintf (out, "\nOptions of %s:\n",
               rows[i].cmds == CMD_EVERY ? "every command"
               : rows[i].cmds == CMD_ALL ? "every command but `nrm kubectl`"
                                         : list);
      for (size_t k = i; k < N_ROWS; k++)
        if (rows[k].cmds == rows[i].cmds)
          help_row (out, &rows[k]);
    }
  fputc ('\n', out);
  fputs (trailer, out);
}

/* Text for roff: backslashes and leading dots escaped, minus signs as such. */
static void
roff (FILE *out, const char *text)
{
  bool start = true;
  for (const char *p = text; *p; p++)
    {
      if (start && (*p == '.' || *p == '\''))
        fputs ("\\&", out);
      if (*p == '\\')
        fputs ("\\e", out);
      else if (*p == '-')
        fputs ("\\-", out);
      else if (*p == '\n')
        fputc (' ', out);
      else
        fputc (*p, out);
      start = false;
    }
}

void
nrm_options_man (FILE *out)
{
  fprintf (out, ".TH NRM 1 \"\" \"nrm %s\" \"User Commands\"\n", PACKAGE_VERSION);
  fputs (".SH NAME\nnrm \\- node-local resource manager for Kubernetes (DRA CPU, memory and PCI device drivers)\n"
         ".SH SYNOPSIS\n.B nrm\n\\fICOMMAND\\fR [\\fIOPTIONS\\fR]\n"
         ".SH DESCRIPTION\nnrm publishes this node's CPUs, memory and PCI devices as NUMA\\-aware Kubernetes DRA "
         "devices.\n.SH COMMANDS\n",
         out);
  for (size_t i = 0; i < N_COMMANDS; i++)
    {
      fprintf (out, ".TP\n.B %s\n", commands[i].name);
      roff (out, commands[i].help);
      fputc ('\n', out);
    }
  fputs (".SH OPTIONS\n", out);
  for (size_t i = 0; i < N_ROWS; i++)
    {
      const struct row *o = &rows[i];
      char list[256];
      fputs (".TP\n", out);
      if (o->letter)
        fprintf (out, "\\fB\\-%c\\fR, ", o->letter);
      fputs ("\\fB\\-\\-", out);
      roff (out, o->name);
      fputs ("\\fR", out);
      if (o->arg)
        fprintf (out, " \\fI%s\\fR", o->arg);
      fputc ('\n', out);
      roff (out, o->help);
      command_list (o->cmds, list, sizeof (list));
      fputs (".\nCommands: ", out);
      roff (out, o->cmds == CMD_EVERY ? "every one" : o->cmds == CMD_ALL ? "every one but kubectl" : list);
      if (o->key)
        {
          fputs ("; config key ", out);
          roff (out, o->key);
        }
      fputs (".\n", out);
    }
  fputs (".SH \"EXIT STATUS\"\n", out);
  roff (out, trailer);
  fputs ("\n.SH \"SEE ALSO\"\nnrm\\-hook(1); docs/configuration.md\n", out);
}
