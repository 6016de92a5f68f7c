/* SPDX-License-Identifier: Apache-2.0 */
/* nrm plugin: the agent that serves every enabled driver (nrm/agent.h). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "driver/k8s/binding.h"
#include "driver/k8s/claimstatus.h"
#include "driver/k8s/events.h"
#include "driver/k8s/handover.h"
#include "driver/k8s/kube.h"
#include "driver/k8s/nodeview.h"
#include "driver/k8s/publish.h"
#include "driver/kubelet/checkpoint.h"
#include "driver/registry.h"
#include "nrm/agent.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/cgroupfs.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"
#include "nrm/http.h"
#include "nrm/leftout.h"
#include "nrm/logging.h"
#include "nrm/metrics.h"
#include "nrm/reconcile.h"
#include "nrm/refresh.h"
#include "nrm/run.h"
#include "nrm/settings.h"
#include "nrm/setup.h"

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

/* 1.36's allocator takes every slice with shared counters as relevant to
 * every node (fixed in 1.37 by kubernetes/kubernetes#138917): each node it
 * filters reads every partitioned pool of the cluster, and its cost grows
 * with the square of such nodes (docs/scale.md). */
static void
warn_partitioned (const struct nrm_config *c)
{
  if (c->cpu.mode == NRM_CPU_MODE_PARTITIONED && c->publish.api_minor <= 36)
    nrm_log (NULL, NRM_LOG_WARNING,
             "cpu.mode partitioned and the API server is 1.%u: its scheduler reads every node's partitioned CPU pool "
             "for each node it filters, so it slows with the square of the nodes in partitioned mode (100 such "
             "nodes: about 3 pods a second); on 1.36 use numa mode beyond a few dozen nodes, or 1.37 "
             "(docs/scale.md)",
             c->publish.api_minor);
}

/* The node-allocatable mappings changed shape in 1.37: without
 * --kubernetes-version, the plugin writes them as the API server's release
 * reads them (GET /version, which every authenticated client may read).
 * The same answer says whether partitioned mode meets 1.36's scheduler. */
static void
ask_api_minor (struct nrm_config *c, struct nrm_kube *kube)
{
  if (kube == NULL || c->api_minor_set
      || (!c->publish.node_allocatable && !c->publish.list_attributes && c->cpu.mode != NRM_CPU_MODE_PARTITIONED))
    {
      warn_list_attributes (c);
      if (c->api_minor_set)
        warn_partitioned (c);
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
      warn_partitioned (c);
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
  if (nrm_setup_kubelet (c, "plugin", NRM_LOG_INFO, &kubelet, err) < 0)
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
  struct nrm_reconciler *rec;
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
  nrm_reconciler_kick (tb->rec);
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
      cleanup_json json_t *mine = nrm_refresh_driver_slices (list, d->slots[i].name);
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
static int
check_cpuset (const struct nrm_config *c, const struct nrm_fsroot *root, nrm_error_t *err)
{
  /* Only the CPU and memory drivers bind containers. */
  if ((c->topology && nrm_fsroot_live (root)) || c->allow_no_cpuset
      || !(nrm_driver_ids_enable (c->drivers, "cpu") || nrm_driver_ids_enable (c->drivers, "memory")))
    return 0;
  cleanup_free char *cg = nrm_fsroot_path (root, "/sys/fs/cgroup");
  cleanup_free char *ctl = nrm_fsroot_path (root, "/sys/fs/cgroup/cgroup.controllers");
  switch (nrm_cgroup_v2_controller (root, "cpuset"))
    {
    case NRM_CGROUP_V2_WITH:
      return 0;
    case NRM_CGROUP_V2_NONE:
      return nrm_error_set (err, ENOTSUP,
                            "plugin: no cgroup v2 at %s (no `%s`: cgroup v1?): containers with claims "
                            "could not be bound to their CPUs and would fail in the hook; boot with cgroup v2 "
                            "(systemd.unified_cgroup_hierarchy=1), or give --allow-no-cpuset to serve anyway",
                            cg, ctl);
    default:
      return nrm_error_set (err, ENOTSUP,
                            "plugin: cgroup v2 at %s has no cpuset controller (`%s` lacks it: cgroup "
                            "v1 hybrid, with cpuset on v1?): containers with claims could not be bound to their CPUs "
                            "and would fail in the hook; give cpuset to cgroup v2, or --allow-no-cpuset to serve "
                            "anyway",
                            cg, ctl);
    }
}

struct nrm_agent
{
  struct nrm_config *cfg;
  const struct nrm_fsroot *root;
  bool api; /* the Kubernetes API: claims from it, slices to it */
  struct nrm_topology *t;
  struct nrm_registry *reg;
  struct nrm_drivers d;
  struct nrm_plugin **plugins;
  struct nrm_publisher **pubs;
  struct nrm_handover **handovers;
  const char **names;
  json_t *settings;
  char *digest;
  json_t *hook;
  struct takeback takeback;
  struct nrm_claims_dir *claims_dir;
  struct nrm_kube *kube;
  struct nrm_binder *binder;
  struct nrm_claimstatus *placement; /* each claim's placement in its status */
  struct nrm_nodeview *nodeview;
  struct nrm_events *events;
  struct nrm_leftout *leftout;
  int http_fd;
  struct nrm_http *http;
  struct nrm_metrics_sources ms;
  struct nrm_refresher *refresher;
  struct nrm_reconciler *rec;
};

/* Whether this instance writes the node's slices and cpusets: not while a
 * newer one of a rolling update does (driver/k8s/handover.h). */
static bool
publishing (void *ctx)
{
  struct nrm_agent *a = ctx;
  bool all = true;
  for (size_t i = 0; a->handovers && i < a->d.n; i++)
    all &= a->handovers[i] == NULL || nrm_handover_active (a->handovers[i]);
  return all;
}

/* Every setting is checked before the first socket or file is made. */
static int
check_settings (struct nrm_agent *a, nrm_error_t *err)
{
  struct nrm_config *c = a->cfg;
  if (a->api)
    {
      struct nrm_kube_options ko;
      nrm_kube_options_init (&ko);
      ko.kubeconfig = c->kubeconfig;
      ko.qps = c->api_qps;
      ko.burst = (int) c->api_burst;
      if (nrm_kube_new (&ko, &a->kube, err) < 0)
        return -1;
      nrm_log (NULL, NRM_LOG_INFO, "Kubernetes API at %s", nrm_kube_server (a->kube));
    }
  if (resolve_node_settings (c, a->kube, err) < 0 || check_kubelet_managers (c, err) < 0)
    return -1;
  ask_api_minor (c, a->kube);
  if (c->http_address && nrm_http_bind (c->http_address, &a->http_fd, err) < 0)
    return nrm_error_wrap (err, "plugin");
  if (nrm_setup_check_state_dir (c, "plugin", err) < 0 || check_cpuset (c, a->root, err) < 0)
    return -1;
  if (nrm_setup_machine (c, a->root, &a->t, err) < 0 || nrm_setup_drivers (c, a->root, a->t, &a->reg, &a->d, err) < 0)
    return -1;
  if (a->d.n == 0)
    return nrm_error_set (err, EINVAL, "plugin: no driver enabled (--drivers `%s`)", c->drivers ? c->drivers : "");
  return 0;
}

/* The completed claims of a driver's checkpoint, for the placement writer. */
static json_t *
completed_claims (void *ctx, const char *driver)
{
  struct nrm_agent *a = ctx;
  nrm_error_t err = NULL;
  cleanup_json json_t *claims = nrm_checkpoint_claims (a->cfg->state_dir, driver, &err);
  if (err)
    {
      nrm_log (NULL, NRM_LOG_WARNING, "%s: placement status: %s", driver, nrm_error_msg (err));
      nrm_error_release (&err);
      return NULL; /* not "no claims": the writer tries again */
    }
  json_t *out = json_object ();
  const char *uid;
  json_t *cl;
  json_object_foreach (claims, uid, cl)
  {
    if (nrm_checkpoint_completed (cl))
      json_object_set (out, uid, cl);
  }
  return out;
}

static void
claim_changed (void *ctx, const char *driver, const char *uid, const char *ns, const char *name)
{
  nrm_claimstatus_changed (ctx, driver, uid, ns, name);
}

/* Before the plugins: a claim prepared from their start on is written. */
static int
start_placement (struct nrm_agent *a, nrm_error_t *err)
{
  struct nrm_claimstatus_config cc = { .kube = a->kube,
                                       .drivers = &a->d,
                                       .node_name = a->cfg->node_name,
                                       .claims = completed_claims,
                                       .claims_ctx = a,
                                       .log = publisher_log,
                                       .log_ctx = "placement" };
  return nrm_claimstatus_start (&cc, &a->placement, err);
}

/* Driver i's kubelet plugin, and its claim of the role of the instance
 * that writes (the newest; an older one still running, in a rolling
 * update, sees it and stops). */
static int
start_plugin (struct nrm_agent *a, size_t i, nrm_error_t *err)
{
  struct nrm_config *c = a->cfg;
  struct nrm_plugin_config pc;
  a->names[i] = a->d.slots[i].name;
  nrm_config_plugin (c, a->d.slots[i].name, &pc);
  pc.log = nrm_log;
  pc.cdi_hook = a->hook;
  /* Any claim may change the exclusive CPUs: the shared pool follows. */
  pc.on_change = nrm_reconciler_kick;
  pc.on_change_ctx = a->rec;
  if (a->placement)
    {
      pc.on_claim = claim_changed;
      pc.on_claim_ctx = a->placement;
    }
  pc.on_health = nrm_refresher_kick;
  pc.on_health_ctx = a->refresher;
  pc.events = a->events;
  if (c->claims_dir)
    {
      if (a->claims_dir == NULL)
        a->claims_dir = nrm_claims_dir_new (c->claims_dir);
      nrm_claim_source_dir (&pc.claims, a->claims_dir);
    }
  else
    nrm_claim_source_kube (&pc.claims, a->kube);
  if (nrm_plugin_start (&pc, a->d.slots[i].ops, a->d.slots[i].self, &a->plugins[i], err) < 0)
    return -1;
  nrm_log (NULL, NRM_LOG_INFO, "%s: serving %s, registering at %s", pc.driver, nrm_plugin_dra_socket (a->plugins[i]),
           nrm_plugin_registration_socket (a->plugins[i]));
  struct nrm_handover_config hc = { .state_dir = c->state_dir,
                                    .driver = a->d.slots[i].name,
                                    .instance_lock = nrm_plugin_instance_lock (a->plugins[i]),
                                    .instance_uid = c->instance_uid,
                                    .settings = a->digest,
                                    .log = publisher_log,
                                    .log_ctx = (void *) a->d.slots[i].name,
                                    .became_active = took_back,
                                    .ctx = &a->takeback };
  return nrm_handover_claim (&hc, &a->handovers[i], err);
}

/* The publishers and the slice refresher, the binder (binding conditions,
 * for the drivers that have them) and the node view (other drivers'
 * devices here, for the drivers that step aside). */
static int
start_api (struct nrm_agent *a, nrm_error_t *err)
{
  struct nrm_config *c = a->cfg;
  bool refreshing = false;
  if (!c->no_publish)
    {
      if (start_publishers (c, &a->d, a->kube, a->pubs, a->handovers, err) < 0)
        return -1;
      /* Functions a PCI driver leaves to another driver: seen after a pass. */
      a->leftout = nrm_leftout_new (&a->d, a->events, c->node_name);
      if (a->leftout)
        nrm_refresher_after_pass (a->refresher, nrm_leftout_check, a->leftout);
      refreshing = nrm_refresher_start (a->refresher, c, &a->d, a->pubs);
    }
  struct nrm_binder_config bc
      = { .kube = a->kube, .node_name = c->node_name, .drivers = &a->d, .log = publisher_log, .log_ctx = "binding" };
  if (nrm_binder_start (&bc, &a->binder, err) < 0)
    return -1;
  struct nrm_nodeview_config vc = { .kube = a->kube,
                                    .node_name = c->node_name,
                                    .drivers = &a->d,
                                    .changed = refreshing ? nrm_refresher_kick : NULL,
                                    .ctx = a->refresher,
                                    .log = publisher_log,
                                    .log_ctx = "node devices" };
  return nrm_nodeview_start (&vc, &a->nodeview, err);
}

int
nrm_agent_start (struct nrm_config *c, const struct nrm_fsroot *root, struct nrm_agent **ret, nrm_error_t *err)
{
  struct nrm_agent *a = xcalloc (1, sizeof (*a));
  a->cfg = c;
  a->root = root;
  a->http_fd = -1;
  a->api = c->kubeconfig != NULL || nrm_kube_in_cluster ();
  *ret = NULL;
  if (!a->api && c->claims_dir == NULL)
    {
      free (a);
      return nrm_error_set (err, EINVAL,
                            "plugin: no claim source: give --kubeconfig (outside a pod), or --claims-dir for claims "
                            "in files");
    }
  a->refresher = nrm_refresher_new ();
  a->rec = nrm_reconciler_new ();
  if (check_settings (a, err) < 0)
    goto fail;
  a->plugins = xcalloc (a->d.n, sizeof (*a->plugins));
  a->pubs = xcalloc (a->d.n, sizeof (*a->pubs));
  a->handovers = xcalloc (a->d.n, sizeof (*a->handovers));
  a->names = xcalloc (a->d.n, sizeof (*a->names));
  if (c->hook_path[0])
    a->hook = json_pack ("{s:s, s:s, s:[s, s, s, s, s]}", "hookName", "createRuntime", "path", c->hook_path, "args",
                         "nrm-hook", "--fsroot", c->fsroot, "--state-dir", c->state_dir);
  /* What shapes the devices, for nrm status to compare its own settings
   * with; before the drivers start, whose recovery removes what an
   * interrupted write of it left. */
  a->settings = nrm_settings_record (c, a->t, &a->d);
  a->digest = settings_digest (a->settings);
  a->takeback = (struct takeback){ .state_dir = c->state_dir, .settings = a->settings, .rec = a->rec };
  if (nrm_mkdir_p (c->state_dir, 0700, err) < 0 || nrm_settings_write (c->state_dir, a->settings, err) < 0)
    goto fail;
  /* Events on claims and on the Node, when the API is in use. */
  struct nrm_events_config ec
      = { .kube = a->kube, .instance = c->node_name, .log = publisher_log, .log_ctx = "events" };
  if (a->api && (nrm_events_start (&ec, &a->events, err) < 0 || start_placement (a, err) < 0))
    goto fail;
  for (size_t i = 0; i < a->d.n; i++)
    if (start_plugin (a, i, err) < 0)
      goto fail;
  if (a->api && start_api (a, err) < 0)
    goto fail;
  a->ms = (struct nrm_metrics_sources){ .cfg = c,
                                        .root = a->root,
                                        .t = a->t,
                                        .drivers = &a->d,
                                        .names = a->names,
                                        .plugins = a->plugins,
                                        .publishers = a->api && !c->no_publish ? a->pubs : NULL };
  if (c->http_address)
    {
      if (nrm_http_start (TAKE_FD (a->http_fd), http_handler, &a->ms, &a->http, err) < 0)
        goto fail;
      nrm_log (NULL, NRM_LOG_INFO, "serving /healthz, /readyz and /metrics on port %d", nrm_http_port (a->http));
    }
  nrm_reconciler_start (a->rec, c, a->root, a->t, &a->d, publishing, a);
  *ret = a;
  return 0;
fail:
  nrm_agent_stop (a);
  return -1;
}

int
nrm_agent_wait (struct nrm_agent *a, const sigset_t *set)
{
  for (;;)
    {
      nrm_run_release_stale (a->root, a->cfg->state_dir, a->plugins, a->d.n);
      struct timespec minute = { .tv_sec = 60 };
      int sig = sigtimedwait (set, NULL, &minute);
      if (sig > 0)
        return sig;
    }
}

struct nrm_plugin *
nrm_agent_plugin (const struct nrm_agent *a, size_t i)
{
  return a && a->plugins && i < a->d.n ? a->plugins[i] : NULL;
}

void
nrm_agent_stop (struct nrm_agent *a)
{
  if (a == NULL)
    return;
  nrm_reconciler_stop (a->rec);
  nrm_http_stop (a->http);
  nrm_refresher_stop (a->refresher);
  /* Requests in flight end now: nothing waits for the API server. */
  nrm_binder_stopping (a->binder);
  nrm_nodeview_stopping (a->nodeview);
  nrm_claimstatus_stopping (a->placement);
  if (a->kube)
    nrm_kube_cancel (a->kube);
  nrm_binder_stop (a->binder);
  nrm_nodeview_stop (a->nodeview);
  for (size_t i = a->d.n; a->pubs && i-- > 0;)
    nrm_publisher_stop (a->pubs[i]);
  /* Nothing of this instance writes any more: a twin may take over now. */
  for (size_t i = a->d.n; a->handovers && i-- > 0;)
    nrm_handover_release (a->handovers[i]);
  for (size_t i = a->d.n; a->plugins && i-- > 0;)
    nrm_plugin_stop (a->plugins[i]);
  /* After the plugins, which tell it of their claims. */
  nrm_claimstatus_stop (a->placement);
  /* After everything that records Events. */
  nrm_events_stop (a->events);
  /* Freed only now: the node view's thread and the plugins' health threads
   * (joined by nrm_plugin_stop()) may kick it until they end. */
  nrm_refresher_free (a->refresher);
  nrm_leftout_free (a->leftout);
  nrm_claims_dir_free (a->claims_dir);
  nrm_setup_close_drivers (a->reg, &a->d);
  nrm_kube_free (a->kube);
  nrm_reconciler_free (a->rec);
  nrm_topology_free (a->t);
  if (a->http_fd >= 0)
    close (a->http_fd);
  free (a->plugins);
  free (a->pubs);
  free (a->handovers);
  free (a->names);
  json_decref (a->settings);
  json_decref (a->hook);
  free (a->digest);
  free (a);
}
