/* SPDX-License-Identifier: Apache-2.0 */
/* nrm run: the plugin's placement and state for any command, without
 * Kubernetes. The allocation is a claim in the same checkpoints the plugin
 * uses (so both coexist), committed into a transient cgroup v2, or with
 * sched_setaffinity and set_mempolicy where there is no cgroup v2 cpuset.
 * This file holds the phases of a run and nrm_cmd_run, which calls them in
 * order; nrm/run-internal.h names the files that hold the rest. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <numa.h>
#include <numaif.h>

#include "cpuset/partition.h"
#include "cpuset/placement.h"
#include "driver/names.h"
#include "driver/cpu/cpu.h"
#include "driver/kit.h"
#include "driver/kubelet/plugin.h"
#include "driver/registry.h"
#include "nrm/attach.h"
#include "nrm/base/cgroupfs.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/quantity.h"
#include "nrm/base/xalloc.h"
#include "nrm/commit.h"
#include "nrm/logging.h"
#include "nrm/run.h"
#include "nrm/run-internal.h"
#include "memory/place.h"
#include "memory/policy.h"

static json_t *
result_for (const char *request, const char *driver, const char *node, const char *device, const char *key,
            const char *amount)
{
  return json_pack ("{s:s, s:s, s:s, s:s, s:{s:s}}", "request", request, "driver", driver, "pool", node, "device",
                    device, "consumedCapacity", key, amount);
}

json_t *
nrm_run_claim (const char *uid, const char *name, json_t *results, json_t *config)
{
  return json_pack ("{s:s, s:s, s:{s:s, s:s, s:s}, s:{s:{s:{s:o, s:O}}}}", "apiVersion", "resource.k8s.io/v1", "kind",
                    "ResourceClaim", "metadata", "namespace", RUN_NAMESPACE, "name", name, "uid", uid, "status",
                    "allocation", "devices", "results", results, "config", config);
}

/* "all" on the command line: every node. */
static bool
is_all (hwloc_const_bitmap_t set)
{
  return hwloc_bitmap_last (set) == -1 && !hwloc_bitmap_iszero (set);
}

static const char *const policy_flags[] = { "", "--membind", "--interleave", "--preferred", "--localalloc" };

static char *
node_list (const struct nrm_topology *t)
{
  cleanup_bitmap hwloc_bitmap_t all = xbitmap_alloc ();
  for (size_t i = 0; i < t->n_numa; i++)
    hwloc_bitmap_set (all, t->numa[i].os_index);
  return nrm_cpulist_format (all);
}

/* Nodes named on the command line that this machine has; "all" is every
 * one. with_cpus: nodes the CPUs come from. */
static int
check_nodes (const struct nrm_topology *t, hwloc_const_bitmap_t set, const char *flag, bool with_cpus, nrm_error_t *err)
{
  int os;
  if (set == NULL || is_all (set))
    return 0;
  hwloc_bitmap_foreach_begin (os, set)
  {
    int ni = nrm_topology_numa_index (t, (unsigned) os);
    if (ni < 0)
      {
        cleanup_free char *all = node_list (t);
        return nrm_error_set (err, EINVAL, "%s: NUMA node %d does not exist (this machine has nodes %s)", flag, os,
                              all);
      }
    if (with_cpus && hwloc_bitmap_iszero (t->numa[ni].cpus))
      return nrm_error_set (err, EINVAL, "%s: NUMA node %d has no CPUs", flag, os);
  }
  hwloc_bitmap_foreach_end ();
  return 0;
}

static pid_t child_pid;

static void
forward (int sig)
{
  if (child_pid > 0)
    kill (child_pid, sig);
}

/* Back as it was: into its old cgroup first (its old affinity may lie
 * outside the run's cpuset), then each thread's affinity. */
static void
put_back (struct nrm_cgroupfs *fs, struct nrm_attach *a)
{
  if (fs && a->old_cgroup)
    {
      char pidtext[32];
      nrm_error_t ignored = NULL;
      snprintf (pidtext, sizeof (pidtext), "%d", (int) a->pid);
      if (nrm_cgroup_write (fs, a->old_cgroup, "cgroup.procs", pidtext, &ignored) < 0 && nrm_attach_alive (a))
        nrm_log (NULL, NRM_LOG_WARNING, "process %d: cannot move it back to cgroup /%s: %s", (int) a->pid,
                 a->old_cgroup, nrm_error_msg (ignored));
      nrm_error_release (&ignored);
    }
  nrm_attach_restore (a);
}

/* nrm run --pid: the process moved onto the run's CPUs and memory nodes,
 * held until it exits (*ret_status 0) or nrm run gets SIGINT, SIGTERM,
 * SIGHUP or SIGQUIT (the process is put back as it was; 128 + N). */
static int
attach_and_hold (struct nrm_cgroupfs *fs, const char *cgname, const char *name, const char *cpus, const char *mems,
                 struct nrm_attach *a, int *ret_status, nrm_error_t *err)
{
  size_t threads = 0;
  long left = 0;
  int sig = 0;
  sigset_t set;
  sigemptyset (&set);
  sigaddset (&set, SIGINT);
  sigaddset (&set, SIGTERM);
  sigaddset (&set, SIGHUP);
  sigaddset (&set, SIGQUIT);
  /* A signal during the move waits for it to end, then puts it back. */
  sigprocmask (SIG_BLOCK, &set, NULL);
  if (fs)
    {
      char pidtext[32];
      cleanup_free char *rel = xasprintf ("nrm.slice/%s", cgname);
      snprintf (pidtext, sizeof (pidtext), "%d", (int) a->pid);
      cleanup_free char *old = NULL;
      nrm_error_t cerr = NULL;
      if (nrm_cgroup_of_pid (NULL, (int) a->pid, &old, &cerr) < 0)
        {
          /* A cgroup path the cgroup layer refuses: it could not be put
           * back there. Else (no "0::" line, /proc unreadable) the run's
           * own message. */
          if (cerr->status == EINVAL)
            {
              *err = cerr;
              return nrm_error_wrap (err, "--pid %d (%s)", (int) a->pid, a->comm);
            }
          nrm_error_release (&cerr);
          return nrm_error_set (err, EINVAL, "--pid %d (%s): not in a cgroup v2 (no `0::` line in /proc/%d/cgroup)",
                                (int) a->pid, a->comm, (int) a->pid);
        }
      /* Relative to the cgroup layer's root, as put_back's message and
       * the layer's errors name it. */
      a->old_cgroup = xstrdup (old[0] == '/' ? old + 1 : old);
      /* The affinities to put back are those before the move: joining
       * the run's cgroup narrows them to its cpuset. */
      nrm_attach_save (a);
      /* cgroup.procs moves every thread. */
      if (nrm_cgroup_write (fs, rel, "cgroup.procs", pidtext, err) < 0)
        {
          free (a->old_cgroup);
          a->old_cgroup = NULL;
          return nrm_error_wrap (err, "--pid %d (%s)", (int) a->pid, a->comm);
        }
    }
  /* Also each thread's affinity: one narrower than the cpuset (an earlier
   * taskset) would keep it off some of the run's CPUs. */
  if (nrm_attach_pin (a, cpus, &threads, err) < 0 || nrm_attach_migrate (a, mems, &left, err) < 0)
    {
      put_back (fs, a);
      return -1;
    }
  nrm_log (NULL, NRM_LOG_INFO,
           "run %s: process %d (%s): %zu thread%s moved onto CPUs %s%s%s, its pages onto memory nodes %s%s; %s; "
           "held until it exits",
           name, (int) a->pid, a->comm, threads, threads == 1 ? "" : "s", cpus, fs ? " in cgroup nrm.slice/" : "",
           fs ? cgname : "", mems, left > 0 ? " (some pages could not be moved)" : "",
           fs ? "cpuset.mems binds its future allocations"
              : "its memory policy for future allocations stays its own (only a process can set its own)");
  if (left > 0)
    nrm_log (NULL, NRM_LOG_WARNING, "run %s: process %d: %ld pages could not be moved to memory nodes %s", name,
             (int) a->pid, left, mems);
  if (nrm_attach_wait (a, &sig, err) < 0)
    {
      put_back (fs, a);
      return -1;
    }
  if (sig)
    {
      put_back (fs, a);
      nrm_log (NULL, NRM_LOG_INFO, "run %s: %s: process %d put back on its old CPUs, its claim released", name,
               strsignal (sig), (int) a->pid);
      *ret_status = 128 + sig;
    }
  else
    {
      nrm_log (NULL, NRM_LOG_INFO, "run %s: process %d exited: its claim is released", name, (int) a->pid);
      *ret_status = 0;
    }
  return 0;
}

static bool
uses_memory (const struct nrm_run_request *rq)
{
  return rq->memory != NULL || rq->hugepages_2mi != NULL || rq->hugepages_1gi != NULL;
}

/* The request checked before anything is opened or taken, and the run's
 * names: its claims', its record's and its cgroup's. */
static int
run_check (struct run *r, nrm_error_t *err)
{
  const struct nrm_run_request *rq = r->rq;
  r->self = getpid ();
  r->st = nrm_run_start_time (r->self);
  /* --pid: the process is checked before anything is taken. */
  if (rq->attach_pid)
    {
      if (rq->policy == NRM_RUN_MEM_INTERLEAVE || rq->policy == NRM_RUN_MEM_PREFERRED
          || rq->policy == NRM_RUN_MEM_LOCAL)
        return nrm_error_set (err, EINVAL,
                              "--pid with %s: only a process itself can set its memory policy (set_mempolicy); "
                              "--membind NODES moves its pages there",
                              policy_flags[rq->policy]);
      if (nrm_attach_open (rq->attach_pid, &r->att, err) < 0)
        return -1;
    }
  r->name = rq->attach_pid ? xasprintf ("run-%d-%llu-pid-%d", (int) r->self, r->st, (int) rq->attach_pid)
                           : xasprintf ("run-%d-%llu", (int) r->self, r->st);
  r->uid = xasprintf ("%08x-0000-4000-8000-%012llx", (unsigned) r->self, r->st & 0xffffffffffffULL);
  r->cgname = xasprintf ("run-%d", (int) r->self);
  if (check_nodes (r->t, rq->cpu_nodes, "--cpunodebind (--numa-node)", true, err) < 0
      || check_nodes (r->t, rq->mem_nodes, policy_flags[rq->policy], false, err) < 0)
    return -1;
  if (uses_memory (rq) && rq->policy == NRM_RUN_MEM_INTERLEAVE)
    return nrm_error_set (err, EINVAL,
                          "--interleave with --memory or huge pages: a run takes its memory from one node's device");
  return 0;
}

/* The CPU claim's opaque configuration and the options placement uses:
 * --option's, else the node's. */
static int
run_options (struct run *r, nrm_error_t *err)
{
  const struct nrm_run_request *rq = r->rq;
  r->options = r->c->cpu.options;
  if (rq->options == NULL || rq->options[0] == NULL)
    return 0;
  json_t *list = json_array ();
  r->options = 0;
  for (size_t i = 0; rq->options[i]; i++)
    {
      json_array_append_new (list, json_string (rq->options[i]));
      if (nrm_cpu_option_parse (rq->options[i], &r->options, err) < 0)
        {
          json_decref (list);
          return -1;
        }
    }
  json_array_append_new (r->config, json_pack ("{s:s, s:{s:s, s:{s:s, s:s, s:o}}}", "source", "FromClaim", "opaque",
                                               "driver", r->drv[0]->name, "parameters", "apiVersion",
                                               "cpu.nrm.io/v1alpha1", "kind", "CPUConfig", "options", list));
  return 0;
}

/* The CPU and memory drivers, their plugins on the state directory (a
 * scratch copy for a dry run), and the run's record. */
static int
run_open (struct run *r, nrm_error_t *err)
{
  struct nrm_config *c = r->c;
  /* A run is the command line of the CPU and memory drivers: their claims,
   * with their names, in their checkpoints. */
  struct nrm_driver_selection sel = { "cpu,memory", c->driver_names, nrm_config_run_settings (c) };
  struct nrm_driver_host host
      = { .topo = r->t, .node = &r->po, .fsroot = r->root, .live = c->topology == NULL, .log = nrm_log };
  struct nrm_pool pool = { 0 };
  cleanup_json json_t *names = NULL;
  /* A run takes CPUs by count from a node's consumable device, whatever
   * device mode the plugin publishes (nrm_config_run_settings() gives the
   * CPU driver numa mode): the claims of both are CPU sets. */
  r->po = c->publish;
  if (nrm_registry_new (&r->reg, err) < 0 || nrm_drivers_open (r->reg, &sel, &host, &r->drivers, err) < 0)
    return -1;
  r->drv[0] = nrm_drivers_find (&r->drivers, "cpu");
  r->drv[1] = nrm_drivers_find (&r->drivers, "memory");
  int pr = nrm_cpu_pool (r->t, &r->po, NRM_CPU_MODE_NUMA, r->drv[0]->name, &pool, err);
  if (pr == 0)
    pr = nrm_kit_index_pool (&pool, &r->cpu_devices, &names, err);
  nrm_pool_done (&pool);
  if (pr < 0 || run_options (r, err) < 0)
    return -1;
  if (r->rq->dry_run)
    {
      /* A recorded machine shares nothing with this one's state, unless a
       * state directory is given for it. */
      const char *dnames[2] = { r->drv[0]->name, r->drv[1]->name };
      struct stat sb;
      bool read_state
          = (c->topology == NULL || strcmp (c->state_dir, NRM_DEFAULT_STATE_DIR) != 0) && stat (c->state_dir, &sb) == 0;
      if ((r->scratch = nrm_run_scratch_make (read_state ? c->state_dir : NULL, dnames, err)) == NULL)
        return -1;
      r->state = r->scratch;
    }
  for (int i = 0; i < 2; i++)
    {
      struct nrm_plugin_config pc;
      nrm_config_plugin (c, r->drv[i]->name, &pc);
      pc.state_dir = r->state;
      pc.instance_uid = NULL;
      pc.log = nrm_log;
      pc.local = true;
      if (nrm_plugin_start (&pc, r->drv[i]->ops, r->drv[i]->self, &r->pl[i], err) < 0)
        return -1;
    }
  /* Runs whose nrm process is gone (killed with -9) still hold their
   * claims, CPUs and memory: released first. */
  nrm_run_release_stale (r->root, r->state, r->pl, 2);
  if (nrm_run_record_write (r->state, r->uid, r->name, r->self, r->st, r->rq->attach_pid ? &r->att : NULL, err) < 0)
    return -1;
  r->recorded = true;
  return 0;
}

/* The CPUs: placed and prepared in one hold of the lock; the driver's state
 * says which CPUs and nodes it took. */
static int
run_take_cpus (struct run *r, nrm_error_t *err)
{
  const struct nrm_run_request *rq = r->rq;
  if (nrm_plugin_prepare_local (r->pl[0], RUN_NAMESPACE, r->name, r->uid, nrm_run_choose_cpus, r, &r->cpu, err) < 0)
    {
      if (r->placement_failed)
        return -1;
      if (rq->cpu_list)
        {
          cleanup_free char *list = nrm_cpulist_format (rq->cpu_list);
          return nrm_error_wrap (err, "CPUs %s", list);
        }
      nrm_run_drop_parts (r);
      return nrm_run_no_room (r, TAKE_PTR (*err), err);
    }
  r->prepared[0] = true;
  r->cpus = xstrdup (json_string_value (json_object_get (r->cpu.state, "cpus")) ?: "");
  r->mems = xstrdup (json_string_value (json_object_get (r->cpu.state, "mems")) ?: "");
  return nrm_cpulist_parse (r->cpus, &r->got, err);
}

/* The memory nodes: the CPUs' by default; the policy's when it names
 * some (--preferred adds its node to the CPUs'). The node memory is taken
 * from: the first of --membind or --preferred, else that of the (first)
 * CPUs; of a kind or tier, the nearest of it with room (memory/place). */
static int
run_memory_nodes (struct run *r, nrm_error_t *err)
{
  const struct nrm_topology *t = r->t;
  const struct nrm_run_request *rq = r->rq;
  if (rq->policy == NRM_RUN_MEM_BIND || rq->policy == NRM_RUN_MEM_INTERLEAVE || rq->policy == NRM_RUN_MEM_PREFERRED)
    {
      cleanup_bitmap hwloc_bitmap_t m = xbitmap_alloc ();
      for (size_t i = 0; i < t->n_numa; i++)
        if (hwloc_bitmap_isset (rq->mem_nodes, t->numa[i].os_index))
          hwloc_bitmap_set (m, t->numa[i].os_index);
      if (rq->policy == NRM_RUN_MEM_PREFERRED)
        {
          cleanup_bitmap hwloc_bitmap_t cm = NULL;
          if (nrm_cpulist_parse (r->mems, &cm, err) < 0)
            return -1;
          hwloc_bitmap_or (m, m, cm);
        }
      free (r->mems);
      r->mems = nrm_cpulist_format (m);
    }
  r->node = (int) r->parts[0].os;
  if (rq->policy == NRM_RUN_MEM_BIND || rq->policy == NRM_RUN_MEM_PREFERRED)
    for (size_t i = 0; i < t->n_numa; i++)
      if (hwloc_bitmap_isset (rq->mem_nodes, t->numa[i].os_index))
        {
          r->node = (int) t->numa[i].os_index;
          break;
        }
  if (rq->memory_kind || rq->memory_tier >= 0)
    {
      /* HBM beside the CPUs on a Xeon Max, the far NVM node only when asked. */
      uint64_t bytes = 0;
      size_t pick;
      int near = nrm_topology_numa_index (t, (unsigned) r->node);
      if ((rq->memory && nrm_quantity_parse_bytes (rq->memory, &bytes, err) < 0)
          || nrm_memory_pick (t, near >= 0 ? (size_t) near : 0, rq->memory_kind, rq->memory_tier, bytes, NULL, &pick,
                              err)
                 < 0)
        return -1;
      r->node = (int) t->numa[pick].os_index;
      if (rq->policy == NRM_RUN_MEM_DEFAULT)
        {
          free (r->mems);
          r->mems = xasprintf ("%d", r->node);
        }
    }
  for (int h = 0; h < 2; h++)
    {
      const char *want = h == 0 ? rq->hugepages_2mi : rq->hugepages_1gi;
      uint64_t size = h == 0 ? 2u << 20 : 1u << 30;
      int ni = nrm_topology_numa_index (t, (unsigned) r->node);
      bool have = false;
      for (size_t k = 0; want && ni >= 0 && k < t->numa[ni].n_hugepages; k++)
        have |= t->numa[ni].hugepages[k].size == size && t->numa[ni].hugepages[k].count > 0;
      if (want && !have)
        return nrm_error_set (err, ENOSPC,
                              "NUMA node %d has no %s huge pages (reserve some in "
                              "/sys/devices/system/node/node%d/hugepages/hugepages-%ukB/nr_hugepages)",
                              r->node, h == 0 ? "2Mi" : "1Gi", r->node, (unsigned) (size >> 10));
    }
  return 0;
}

/* The memory claim is made before the lock: nothing in it depends on what
 * is held. */
static int
choose_claim (void *ctx, json_t *claims, json_t **ret, nrm_error_t *err)
{
  (void) claims;
  (void) err;
  *ret = json_incref (ctx);
  return 0;
}

/* Memory and huge pages of the run's node; the run's memory is also its
 * limit (MemoryConfig limit). The driver's container edits come back with
 * the prepare: the limits the commit writes, the variables the command
 * gets. */
static int
run_take_memory (struct run *r, nrm_error_t *err)
{
  const struct nrm_run_request *rq = r->rq;
  const char *md = r->drv[1]->name, *node_name = r->c->node_name;
  char dev[64];
  if (!uses_memory (rq))
    return 0;
  cleanup_json json_t *results = json_array ();
  cleanup_json json_t *mconfig
      = json_pack ("[{s:s, s:{s:s, s:{s:s, s:s, s:b}}}]", "source", "FromClaim", "opaque", "driver", md, "parameters",
                   "apiVersion", "memory.nrm.io/v1alpha1", "kind", "MemoryConfig", "limit", 1);
  if (rq->memory)
    {
      nrm_numa_name (dev, sizeof (dev), (unsigned) r->node, NRM_NUMA_NAME_NODE, NULL);
      json_array_append_new (results, result_for ("memory", md, node_name, dev, "memory", rq->memory));
    }
  if (rq->hugepages_2mi)
    {
      nrm_numa_name (dev, sizeof (dev), (unsigned) r->node, NRM_NUMA_NAME_HUGEPAGES, "2Mi");
      json_array_append_new (results, result_for ("hugepages-2mi", md, node_name, dev, "hugepages", rq->hugepages_2mi));
    }
  if (rq->hugepages_1gi)
    {
      nrm_numa_name (dev, sizeof (dev), (unsigned) r->node, NRM_NUMA_NAME_HUGEPAGES, "1Gi");
      json_array_append_new (results, result_for ("hugepages-1gi", md, node_name, dev, "hugepages", rq->hugepages_1gi));
    }
  cleanup_json json_t *claim = nrm_run_claim (r->uid, r->name, TAKE_PTR (results), mconfig);
  if (nrm_plugin_prepare_local (r->pl[1], RUN_NAMESPACE, r->name, r->uid, choose_claim, claim, &r->mem, err) < 0)
    return nrm_error_wrap (err, "%s%s%s%s%s%s%s%s on NUMA node %d", rq->memory ? "memory " : "", rq->memory ?: "",
                           rq->hugepages_2mi ? (rq->memory ? ", " : "") : "",
                           rq->hugepages_2mi ? "2Mi huge pages " : "", rq->hugepages_2mi ?: "",
                           rq->hugepages_1gi ? (rq->memory || rq->hugepages_2mi ? ", " : "") : "",
                           rq->hugepages_1gi ? "1Gi huge pages " : "", rq->hugepages_1gi ?: "", r->node);
  r->prepared[1] = true;
  return 0;
}

/* The memory driver's limits, as its prepare typed them, in the words the
 * commit writes (the text kept in r). */
static void
run_memory_limits (struct run *r, struct nrm_memory_binding *m)
{
  const struct nrm_container_limits *l = &r->mem.limits;
  const uint64_t v[2] = { l->memory_max, l->memory_min };
  const char **to[2] = { &m->memory_max, &m->memory_min };
  for (int i = 0; i < 2; i++)
    if (v[i])
      {
        snprintf (r->limit_text[i], sizeof (r->limit_text[i]), "%" PRIu64, v[i]);
        *to[i] = r->limit_text[i];
      }
  for (m->n_hugetlb = 0; m->n_hugetlb < l->n_hugetlb; m->n_hugetlb++)
    {
      char *t = r->limit_text[2 + m->n_hugetlb];
      snprintf (t, sizeof (r->limit_text[0]), "%" PRIu64, l->hugetlb[m->n_hugetlb].max);
      m->hugetlb[m->n_hugetlb].size = l->hugetlb[m->n_hugetlb].size;
      m->hugetlb[m->n_hugetlb].max = t;
    }
}

/* The binding: the run's cgroup nrm.slice/run-<pid> through the cgroup
 * layer (a cpuset partition where one is asked for); without cgroup v2
 * cpuset, the command pins itself (run_command) and the limits are held,
 * not enforced. */
static int
run_bind (struct run *r, nrm_error_t *err)
{
  const struct nrm_run_request *rq = r->rq;
  r->cgroup = nrm_cgroup_v2_controller (r->root, "cpuset") == NRM_CGROUP_V2_WITH;
  if (r->cgroup)
    {
      struct nrm_binding b = { .cpus = r->cpus, .memory = { .mems = r->mems } };
      run_memory_limits (r, &b.memory);
      cleanup_free char *rel = xasprintf ("nrm.slice/%s", r->cgname);
      if (nrm_cgroupfs_open (r->root, &r->fs, err) < 0 || nrm_run_cgroup_make (r->fs, r->cgname, err) < 0
          || nrm_binding_apply (r->fs, rel, &b, err) < 0)
        return -1;
      return nrm_run_partition_make (r->fs, rel, r->name, r->cpus, nrm_run_partition_mode (r->c, rq),
                                     rq->partition >= 0, err);
    }
  if (rq->partition > NRM_PARTITION_OFF)
    return nrm_error_set (err, ENOTSUP, "--partition %s: no cgroup v2 cpuset here (cgroup v1?), so no cpuset partition",
                          nrm_partition_mode_name ((enum nrm_partition_mode) rq->partition));
  if (rq->attach_pid)
    nrm_log (NULL, NRM_LOG_INFO,
             "no cgroup v2 cpuset here: pinning every thread of process %d with sched_setaffinity, its pages "
             "moved with migrate_pages",
             (int) r->att.pid);
  else
    nrm_log (NULL, NRM_LOG_INFO, "no cgroup v2 cpuset here: pinning with sched_setaffinity and set_mempolicy");
  if (r->mem.limits.memory_max || r->mem.limits.n_hugetlb)
    nrm_log (NULL, NRM_LOG_INFO,
             "without cgroup v2 the memory and huge pages are held for this run but not "
             "enforced as limits");
  return 0;
}

/* The command's environment: its CPUs and memory nodes, and the memory
 * driver's variables as a container gets them from its edits. */
static void
command_env (struct run *r)
{
  size_t i, ml = strlen (nrm_env_name[NRM_ENV_MEMS]);
  json_t *v;
  setenv (nrm_env_name[NRM_ENV_CPUS], r->cpus, 1);
  setenv (nrm_env_name[NRM_ENV_MEMS], r->mems, 1);
  json_array_foreach (json_object_get (r->mem.edits, "env"), i, v)
  {
    const char *kv = json_string_value (v), *eq = kv ? strchr (kv, '=') : NULL;
    if (eq && !(strncmp (kv, nrm_env_name[NRM_ENV_MEMS], ml) == 0 && kv[ml] == '='))
      {
        cleanup_free char *k = xstrndup (kv, (size_t) (eq - kv));
        setenv (k, eq + 1, 1);
      }
  }
}

/* In the child, once the parent has moved it into the cgroup: pinned
 * where there is no cgroup, numactl's memory policy, then the command. */
static void __attribute__ ((noreturn)) child_exec (const struct run *r, int go, pid_t parent)
{
  const struct nrm_run_request *rq = r->rq;
  char ok;
  /* If nrm run dies (kill -9), the command dies too: its CPUs may be
   * handed out again once the next run releases the stale claim. */
  if (prctl (PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid () != parent || read (go, &ok, 1) != 1)
    _exit (NRM_RUN_EXIT_FAILED);
  if (!r->cgroup || rq->policy != NRM_RUN_MEM_DEFAULT)
    {
      /* --preferred names one node. */
      int mem_node_first = rq->mem_nodes && !is_all (rq->mem_nodes) ? hwloc_bitmap_first (rq->mem_nodes) : -1;
      struct bitmask *cm = numa_parse_cpustring_all (r->cpus);
      struct bitmask *mm = numa_parse_nodestring_all (r->mems);
      if (cm == NULL || mm == NULL || (!r->cgroup && numa_sched_setaffinity (0, cm) < 0))
        {
          fprintf (stderr, "nrm run: cannot pin to CPUs %s\n", r->cpus);
          _exit (NRM_RUN_EXIT_FAILED);
        }
      /* numactl's policies through libnuma's set_mempolicy wrappers;
       * without one, bound to the CPUs' nodes (the cgroup's cpuset.mems
       * does that where there is one). */
      int want = MPOL_BIND;
      if (rq->policy == NRM_RUN_MEM_INTERLEAVE)
        {
          want = MPOL_INTERLEAVE;
          numa_set_interleave_mask (mm);
        }
      else if (rq->policy == NRM_RUN_MEM_PREFERRED)
        {
          want = MPOL_PREFERRED;
          numa_set_preferred (mem_node_first);
        }
      else if (rq->policy == NRM_RUN_MEM_LOCAL)
        {
          want = MPOL_DEFAULT;
          numa_set_localalloc ();
        }
      else
        numa_set_membind (mm);
      /* libnuma reports a failure only on stderr: the policy is read back.
       * Local allocation reads back as MPOL_LOCAL (4) on newer libnuma. */
      int mode = -1;
      if (get_mempolicy (&mode, NULL, 0, NULL, 0) < 0 || (mode != want && !(want == MPOL_DEFAULT && mode == 4)))
        {
          fprintf (stderr, "nrm run: cannot set the memory policy %s on nodes %s\n", nrm_run_policy_name (rq->policy),
                   r->mems);
          _exit (NRM_RUN_EXIT_FAILED);
        }
      numa_free_cpumask (cm);
      numa_free_nodemask (mm);
    }
  execvp (rq->argv[0], rq->argv);
  /* env(1)'s codes: 127 not found, 126 found but not executable. */
  int exec_errno = errno;
  fprintf (stderr, "nrm run: cannot run `%s`: %s\n", rq->argv[0], strerror (exec_errno));
  _exit (exec_errno == ENOENT || exec_errno == ENOTDIR ? NRM_RUN_EXIT_NOT_FOUND : NRM_RUN_EXIT_CANNOT_EXEC);
}

/* The command started in the run's cgroup (it waits on a pipe until it is
 * there), signals forwarded to it, and waited for. */
static int
run_command (struct run *r, int *ret_status, nrm_error_t *err)
{
  int go[2];
  if (pipe2 (go, O_CLOEXEC) < 0)
    return nrm_error_errno (err, errno, "pipe");
  command_env (r);
  pid_t parent = getpid ();
  child_pid = fork ();
  if (child_pid < 0)
    return nrm_error_errno (err, errno, "fork");
  if (child_pid == 0)
    {
      close (go[1]);
      child_exec (r, go[0], parent);
    }
  close (go[0]);
  if (r->cgroup)
    {
      char pidtext[32];
      cleanup_free char *rel = xasprintf ("nrm.slice/%s", r->cgname);
      snprintf (pidtext, sizeof (pidtext), "%d", (int) child_pid);
      if (nrm_cgroup_write (r->fs, rel, "cgroup.procs", pidtext, err) < 0)
        {
          kill (child_pid, SIGKILL);
          waitpid (child_pid, NULL, 0);
          close (go[1]);
          return -1;
        }
    }
  signal (SIGINT, forward);
  signal (SIGTERM, forward);
  signal (SIGHUP, forward);
  signal (SIGQUIT, forward);
  if (write (go[1], "g", 1) != 1)
    kill (child_pid, SIGKILL);
  close (go[1]);
  int status = 0;
  while (waitpid (child_pid, &status, 0) < 0 && errno == EINTR)
    ;
  *ret_status = WIFEXITED (status) ? WEXITSTATUS (status) : 128 + WTERMSIG (status);
  return 0;
}

/* Released when the command ends, however it ends; a claim that could not
 * be released keeps its record: the next run or the plugin releases it
 * once this process is gone. */
static void
run_close (struct run *r)
{
  for (int i = 1; i >= 0; i--)
    {
      nrm_error_t uerr = NULL;
      if (r->prepared[i] && nrm_plugin_unprepare (r->pl[i], r->uid, &uerr) < 0)
        {
          nrm_log (NULL, NRM_LOG_ERROR, "run %s: %s", r->name, nrm_error_msg (uerr));
          nrm_error_release (&uerr);
          r->released = false;
        }
      nrm_plugin_stop (r->pl[i]);
    }
  if (r->recorded && r->released)
    nrm_run_record_remove (r->c->state_dir, r->uid);
  nrm_plugin_prepared_done (&r->cpu);
  nrm_plugin_prepared_done (&r->mem);
  nrm_attach_close (&r->att);
  nrm_drivers_close (&r->drivers);
  nrm_registry_free (r->reg);
  nrm_run_drop_parts (r);
  if (r->scratch)
    nrm_run_scratch_remove (r->scratch);
  if (r->fs)
    {
      nrm_error_t terr = NULL;
      if (nrm_run_cgroup_remove (r->fs, r->cgname, &terr) < 0)
        {
          nrm_log (NULL, NRM_LOG_WARNING, "run %s: %s", r->name, nrm_error_msg (terr));
          nrm_error_release (&terr);
        }
      nrm_cgroupfs_close (r->fs);
    }
  json_decref (r->config);
  json_decref (r->cpu_devices);
  json_decref (r->tried);
  json_decref (r->cpu_claims);
  hwloc_bitmap_free (r->got);
  free (r->parts);
  free (r->uid);
  free (r->name);
  free (r->cgname);
  free (r->scratch);
  free (r->cpus);
  free (r->mems);
}

/* Forward: the request checked, the drivers opened, the CPUs placed and
 * prepared, the memory prepared, the choice explained, the binding made,
 * the command run (or the process attached); then everything released. */
int
nrm_cmd_run (struct nrm_config *c, const struct nrm_fsroot *root, struct nrm_topology *t,
             const struct nrm_run_request *rq, FILE *out, int *ret_status, nrm_error_t *err)
{
  struct run r = { .c = c,
                   .root = root,
                   .t = t,
                   .rq = rq,
                   .state = c->state_dir,
                   .att = { .pidfd = -1 },
                   .released = true,
                   .config = json_array (),
                   .tried = json_array (),
                   .parts = xcalloc (t->n_numa + 1, sizeof (struct part)) };
  int ret = -1;
  if (run_check (&r, err) < 0 || run_open (&r, err) < 0 || run_take_cpus (&r, err) < 0 || run_memory_nodes (&r, err) < 0
      || run_take_memory (&r, err) < 0)
    goto out;
  nrm_run_explain (&r, out);
  if (rq->dry_run)
    {
      *ret_status = 0;
      ret = 0;
    }
  else if (run_bind (&r, err) == 0)
    ret = rq->attach_pid ? attach_and_hold (r.fs, r.cgname, r.name, r.cpus, r.mems, &r.att, ret_status, err)
                         : run_command (&r, ret_status, err);
out:
  run_close (&r);
  return ret;
}
