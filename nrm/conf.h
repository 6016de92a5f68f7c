/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_CONF_H
#define NRM_CONF_H

#include <stdbool.h>

#include "driver/cpu/cpu.h"
#include "driver/devices.h"
#include "driver/kubelet/plugin.h"
#include "nrm/base/error.h"
#include "topology/topology.h"

/* Everything a command needs, from the config file with flags on top. */
struct nrm_config
{
  char *node_name;
  char *topology; /* hwloc XML to serve instead of the live machine */
  char *fsroot;   /* prefix of the /sys files nrm reads itself; "/" by default */
  struct nrm_node_settings node;
  struct nrm_publish_options publish;
  char *drivers;           /* enabled driver ids, "cpu,memory"; NULL: every registered one */
  char *driver_dir;        /* shared-object drivers to load, or NULL */
  json_t *driver_names;    /* driver id -> name (cpu.driverName, memory.driverName) */
  json_t *driver_settings; /* driver id -> its settings (cpu, memory, pci, driverSettings.<id>) */
  json_t *run_settings;    /* the same for nrm run (nrm_config_run_settings) */

  /* The built-in drivers' settings that nrm's own commands need too (nrm
   * status, nrm run, the reconciler); the drivers get them in
   * driver_settings. */
  struct nrm_cpu_settings cpu; /* cpu.mode, cpu.options, cpu.minSharedCPUs, cpu.partition */
  uint64_t memory_granularity; /* memory.granularity, bytes */
  json_t *shared_pool_cgroups; /* cpu.sharedPoolCgroups: host cgroup subtrees, strings ([]) */
  long reconcile_interval;     /* seconds between shared-pool passes (5); 0: off */
  char *hook_path;             /* nrm executable for the CDI hook; "": no hook */

  /* nrm plugin */
  char *kubelet_dir;     /* /var/lib/kubelet */
  char *cdi_dir;         /* /var/run/cdi */
  char *state_dir;       /* /var/lib/nrm */
  char *claims_dir;      /* ResourceClaim JSON files, or NULL */
  char *instance_uid;    /* rolling-update mode: pod UID in socket names */
  char *log_level;       /* error, warning, info, debug */
  char *log_format;      /* plain or json */
  char *kubeconfig;      /* kubeconfig file; NULL: in-cluster settings, if any */
  bool no_publish;       /* leave the ResourceSlices alone */
  bool device_metadata;  /* KEP-5304 metadata files in containers */
  bool create_state_dir; /* create a missing state_dir other than the default */
  bool allow_no_cpuset;  /* serve where cgroup v2 has no cpuset controller */
  bool api_minor_set;    /* publish.api_minor given (else the plugin asks the API server) */
  double api_qps;        /* client-side rate limit (5 requests/s) */
  long api_burst;        /* (10) */
  char *http_address;    /* ADDR:PORT of /healthz and /metrics, or NULL */
  char *lease_namespace; /* nrm controller: its Lease's namespace */
  char *kubelet_config;  /* the kubelet's config file; NULL: <kubelet_dir>/config.yaml; "": none */

  /* Per-node settings (the file's `nodes`, checked), and where each
   * setting that a node may set came from: "default", "top level",
   * "nodes[i]", "flag", or "kubelet `FILE`", by key (reservedCPUs,
   * cpu.mode, ...). */
  json_t *nodes;
  json_t *sources;
  long node_entry; /* the nodes[] entry applied, or -1 */
};

#define NRM_DEFAULT_STATE_DIR "/var/lib/nrm"

void nrm_config_init (struct nrm_config *c);
void nrm_config_done (struct nrm_config *c);

/* Reads a config file (YAML, or JSON); unknown keys and wrong types are errors that
 * name the key. Values already set from the file are replaced. */
int nrm_config_load_file (struct nrm_config *c, const char *path, nrm_error_t *err);

/* The same settings as flags take them. */
int nrm_config_set_reserved_cpus (struct nrm_config *c, const char *list, nrm_error_t *err);
int nrm_config_set_isolated_cpus (struct nrm_config *c, const char *list, nrm_error_t *err);
/* "0:memory=1Gi,hugepages-2Mi=64Mi" (the kubelet's --reserved-memory format);
 * may be given several times. */
int nrm_config_add_reserved_memory (struct nrm_config *c, const char *spec, nrm_error_t *err);
void nrm_config_clear_reserved_memory (struct nrm_config *c);
/* "DRAListTypeAttributes=true,DRANodeAllocatableResources=false" */
int nrm_config_set_feature_gates (struct nrm_config *c, const char *spec, nrm_error_t *err);
/* "1.37": the API server's release, whose field shapes the slices take
 * (publish.api_minor). */
int nrm_config_set_kubernetes_version (struct nrm_config *c, const char *version, nrm_error_t *err);
int nrm_config_set_cpu_mode (struct nrm_config *c, const char *mode, nrm_error_t *err);
/* "full-pcpus-only,distribute-cpus-across-numa": replaces the options. */
int nrm_config_set_cpu_options (struct nrm_config *c, const char *list, nrm_error_t *err);
int nrm_config_set_string (char **field, const char *value, nrm_error_t *err);
/* "system.slice,user.slice": the host's cgroup subtrees the reconciler
 * keeps on the shared pool besides kubepods (cpuset/host.h); "" for none. */
int nrm_config_set_shared_pool_cgroups (struct nrm_config *c, const char *list, nrm_error_t *err);

/* Per-node settings. The first nodes[] entry that matches this node (by
 * name, or by its labels, a JSON object: NULL when they are unknown, and
 * then only `names` entries match) overrides the top level; the flags keep
 * their values. Call once, after nrm_config_finish(). */
int nrm_config_resolve_node (struct nrm_config *c, json_t *labels, nrm_error_t *err);
/* The same with nodes[index] chosen already (the plugin's record). */
int nrm_config_apply_node_entry (struct nrm_config *c, size_t index, nrm_error_t *err);
/* Whether some nodes[] entry matches by labels only. */
bool nrm_config_nodes_need_labels (const struct nrm_config *c);
void nrm_config_set_source (struct nrm_config *c, const char *key, const char *source);
/* Whether a config key (cpu.mode, reservedCPUs) is one of the settings a
 * nodes[] entry may set, whose source is kept. */
bool nrm_config_is_node_key (const char *key);
/* "default" for a setting nothing set. */
const char *nrm_config_source (const struct nrm_config *c, const char *key);

/* The kubelet's config file (kubeletConfig; <kubeletDir>/config.yaml by
 * default, where a missing file is no error; "": none), so that nrm and the
 * kubelet agree: its reservedSystemCPUs and reservedMemory are adopted
 * where nrm's settings set none (source "kubelet `FILE`"), and refused
 * with both values where they differ. *kubelet gets {path, config} for the
 * caller's policy checks (new reference; NULL: no file), notes the lines to
 * log. */
int nrm_config_import_kubelet (struct nrm_config *c, json_t **kubelet, json_t *notes, nrm_error_t *err);

/* The plugin settings of one driver, as the config has them; the caller
 * adds what is its own (claim source, hook, callbacks). */
void nrm_config_plugin (const struct nrm_config *c, const char *driver, struct nrm_plugin_config *pc);

/* The driver selection the config makes (borrowed). */
struct nrm_driver_selection;
void nrm_config_drivers (const struct nrm_config *c, struct nrm_driver_selection *sel);
/* The drivers' settings for nrm run (borrowed, until the next call): the
 * CPU driver's in numa mode, whatever device mode the plugin publishes, as
 * a run takes CPUs by count from a node's consumable device (the claims of
 * both modes are CPU sets). */
json_t *nrm_config_run_settings (struct nrm_config *c);

/* Fills defaults (node name from $NODE_NAME or the host name) and checks
 * names; call once all sources are read. */
int nrm_config_finish (struct nrm_config *c, nrm_error_t *err);

#endif
