/* SPDX-License-Identifier: Apache-2.0 */
/* nrm run: the plugin's placement and state for any command, without
 * Kubernetes. The allocation is a claim in the same checkpoints the plugin
 * uses (so both coexist), committed into a transient cgroup v2, or with
 * sched_setaffinity and set_mempolicy where there is no cgroup v2 cpuset. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <numa.h>

#include "cpuset/cgroup.h"
#include "cpuset/commit.h"
#include "driver/cpu/cpu.h"
#include "driver/plugin.h"
#include "driver/registry.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/base/fs.h"
#include "nrm/log.h"
#include "nrm/run.h"
#include "nrm/status.h"

#define RUN_NAMESPACE "nrm-run"

struct run_source
{
  json_t *claim; /* the one claim this run prepares */
};

static int
run_get (void *self, const char *ns, const char *name, json_t **ret, nrm_error_t *err)
{
  struct run_source *s = self;
  json_t *meta = json_object_get (s->claim, "metadata");
  if (s->claim && strcmp (ns, json_string_value (json_object_get (meta, "namespace"))) == 0
      && strcmp (name, json_string_value (json_object_get (meta, "name"))) == 0)
    {
      *ret = json_incref (s->claim);
      return 0;
    }
  return nrm_error_set (err, ENOENT, "no such run %s/%s", ns, name);
}

/* A process's start time (clock ticks since boot), to tell a pid reused. */
static unsigned long long
start_time (pid_t pid)
{
  char path[64], buf[4096];
  snprintf (path, sizeof (path), "/proc/%d/stat", (int) pid);
  FILE *f = fopen (path, "re");
  if (f == NULL)
    return 0;
  size_t n = fread (buf, 1, sizeof (buf) - 1, f);
  fclose (f);
  buf[n] = '\0';
  /* Field 22; the command name (field 2) may hold spaces: start after ')'. */
  char *p = strrchr (buf, ')');
  unsigned long long v = 0;
  for (int field = 2; p && field < 22; field++)
    p = strchr (p + 1, ' ');
  if (p)
    v = strtoull (p + 1, NULL, 10);
  return v;
}

/* This process's PID namespace, "dev:ino" of /proc/self/ns/pid: a record
 * written in another one names a pid this process cannot look up. */
static char *
pid_namespace (void)
{
  struct stat st;
  if (stat ("/proc/self/ns/pid", &st) < 0)
    return xstrdup ("?");
  return xasprintf ("%llu:%llu", (unsigned long long) st.st_dev, (unsigned long long) st.st_ino);
}

/* This boot's id: start times count from boot, so a record of an earlier
 * boot is stale whatever its pid. */
static char *
boot_id (void)
{
  char *text = NULL;
  nrm_error_t err = NULL;
  if (nrm_read_file ("/proc/sys/kernel/random/boot_id", 128, &text, NULL, &err) < 0)
    {
      nrm_error_release (&err);
      return xstrdup ("?");
    }
  text[strcspn (text, "\n")] = '\0';
  return text;
}

static char *
record_dir (const char *state_dir)
{
  return xasprintf ("%s/runs", state_dir);
}

static char *
record_path (const char *state_dir, const char *uid)
{
  return xasprintf ("%s/runs/%s.json", state_dir, uid);
}

/* The run's own record, written before its claims exist: only nrm writes
 * in the state directory, so no claim can pose as a run. */
static int
write_record (const char *state_dir, const char *uid, const char *name, pid_t pid, unsigned long long st,
              nrm_error_t *err)
{
  cleanup_free char *dir = record_dir (state_dir), *path = record_path (state_dir, uid);
  cleanup_free char *ns = pid_namespace (), *boot = boot_id (), *text = NULL;
  cleanup_json json_t *rec = json_pack ("{s:s, s:s, s:i, s:I, s:s, s:s}", "uid", uid, "name", name, "pid", (int) pid,
                                        "startTime", (json_int_t) st, "pidNamespace", ns, "bootId", boot);
  text = json_dumps (rec, JSON_COMPACT);
  if (nrm_mkdir_p (dir, 0700, err) < 0 || nrm_write_atomic (path, text, strlen (text), 0600, err) < 0)
    return nrm_error_wrap (err, "run record");
  return 0;
}

/* Whether the run of this record is gone: 1 gone, 0 alive, -1 not known
 * here (another PID namespace, or an unreadable record). */
static int
record_gone (json_t *rec, const char *uid, const char *ns, const char *boot)
{
  json_t *pid = json_object_get (rec, "pid"), *st = json_object_get (rec, "startTime");
  const char *rns = json_string_value (json_object_get (rec, "pidNamespace"));
  const char *rboot = json_string_value (json_object_get (rec, "bootId"));
  const char *ruid = json_string_value (json_object_get (rec, "uid"));
  if (!json_is_integer (pid) || !json_is_integer (st) || rns == NULL || rboot == NULL || ruid == NULL
      || strcmp (ruid, uid) != 0)
    return -1;
  if (strcmp (rboot, boot) != 0)
    return 1;
  if (strcmp (rns, ns) != 0)
    return -1;
  json_int_t p = json_integer_value (pid);
  if (p <= 0 || p > 4194304)
    return -1;
  return start_time ((pid_t) p) == (unsigned long long) json_integer_value (st) ? 0 : 1;
}

void
nrm_run_release_stale (const char *state_dir, struct nrm_plugin *const *pl, size_t n)
{
  cleanup_free char *dir = record_dir (state_dir), *ns = pid_namespace (), *boot = boot_id ();
  DIR *d = opendir (dir);
  struct dirent *de;
  if (d == NULL)
    return; /* no run has ever started here */
  while ((de = readdir (d)) != NULL)
    {
      size_t len = strlen (de->d_name);
      if (len <= 5 || len > 64 + 5 || strcmp (de->d_name + len - 5, ".json") != 0 || de->d_name[0] == '.')
        continue;
      cleanup_free char *uid = xstrndup (de->d_name, len - 5);
      cleanup_free char *path = record_path (state_dir, uid), *text = NULL;
      nrm_error_t err = NULL;
      if (nrm_read_file (path, 4096, &text, NULL, &err) < 0)
        {
          nrm_error_release (&err);
          continue;
        }
      cleanup_json json_t *rec = json_loads (text, 0, NULL);
      if (record_gone (rec, uid, ns, boot) != 1)
        continue;
      const char *name = json_string_value (json_object_get (rec, "name"));
      nrm_log (NULL, NRM_LOG_INFO, "releasing the claim of run %s (its nrm process is gone)", name ? name : uid);
      bool all = true;
      for (size_t i = 0; i < n; i++)
        if (pl[i] && nrm_plugin_unprepare (pl[i], uid, &err) < 0)
          {
            nrm_log (NULL, NRM_LOG_ERROR, "run %s: %s", name ? name : uid, nrm_error_msg (err));
            nrm_error_release (&err);
            all = false;
          }
      /* Kept until every driver has let go, to try again later. */
      if (all)
        unlink (path);
    }
  closedir (d);
}

static json_t *
result_for (const char *request, const char *driver, const char *node, const char *device, const char *key,
            const char *amount)
{
  return json_pack ("{s:s, s:s, s:s, s:s, s:{s:s}}", "request", request, "driver", driver, "pool", node, "device",
                    device, "consumedCapacity", key, amount);
}

/* A ResourceClaim as the scheduler would have allocated it: results is an
 * array of allocation results (stolen). */
static json_t *
claim_with (const char *uid, const char *name, json_t *results, json_t *config)
{
  return json_pack ("{s:s, s:s, s:{s:s, s:s, s:s}, s:{s:{s:{s:o, s:O}}}}", "apiVersion", "resource.k8s.io/v1", "kind",
                    "ResourceClaim", "metadata", "namespace", RUN_NAMESPACE, "name", name, "uid", uid, "status",
                    "allocation", "devices", "results", results, "config", config);
}

static json_t *
claim_for (const char *uid, const char *name, const char *driver, const char *node, const char *device, const char *key,
           const char *amount, json_t *config)
{
  return claim_with (uid, name, json_pack ("[o]", result_for ("run", driver, node, device, key, amount)), config);
}

static bool
have_cgroup_cpuset (const char *fsroot)
{
  cleanup_free char *path = xasprintf ("%s/sys/fs/cgroup/cgroup.controllers", strcmp (fsroot, "/") ? fsroot : "");
  cleanup_free char *text = NULL;
  nrm_error_t err = NULL;
  if (nrm_read_file (path, 4096, &text, NULL, &err) < 0)
    {
      nrm_error_release (&err);
      return false;
    }
  return strstr (text, "cpuset") != NULL;
}

/* The transient cgroup <root>/nrm.slice/run-<pid>, with cpuset (and memory)
 * enabled on the way down. */
static int
make_cgroup (struct nrm_cgroupfs *fs, const char *name, nrm_error_t *err)
{
  cleanup_free char *parent = xasprintf ("%s/nrm.slice", nrm_cgroupfs_root (fs));
  cleanup_free char *child = xasprintf ("%s/nrm.slice/%s", nrm_cgroupfs_root (fs), name);
  if (nrm_cgroup_write (fs, "", "cgroup.subtree_control", "+cpuset", err) < 0
      || (mkdir (parent, 0755) < 0 && errno != EEXIST)
      || nrm_cgroup_write (fs, "nrm.slice", "cgroup.subtree_control", "+cpuset", err) < 0)
    {
      if (err && *err == NULL)
        nrm_error_errno (err, errno, "cannot create `%s`", parent);
      return -1;
    }
  /* The memory and hugetlb controllers are welcome, not needed: a run that
   * asks for a limit fails later, naming the file, when one is missing. */
  static const char *const welcome[] = { "+memory", "+hugetlb" };
  for (size_t i = 0; i < 2; i++)
    {
      nrm_error_t ignored = NULL;
      if (nrm_cgroup_write (fs, "", "cgroup.subtree_control", welcome[i], &ignored) == 0)
        nrm_cgroup_write (fs, "nrm.slice", "cgroup.subtree_control", welcome[i], &ignored);
      nrm_error_release (&ignored);
    }
  if (mkdir (child, 0755) < 0 && errno != EEXIST)
    return nrm_error_errno (err, errno, "cannot create `%s`", child);
  return 0;
}

static pid_t child_pid;

static void
forward (int sig)
{
  if (child_pid > 0)
    kill (child_pid, sig);
}

int
nrm_cmd_run (struct nrm_config *c, struct nrm_topology *t, const struct nrm_run_request *rq, int *ret_status,
             nrm_error_t *err)
{
  struct nrm_registry *reg = NULL;
  struct nrm_drivers drivers = { 0 };
  struct nrm_driver_slot *drv[2] = { NULL, NULL };
  struct nrm_plugin *pl[2] = { NULL, NULL };
  struct run_source src[2] = { { NULL }, { NULL } };
  struct nrm_cgroupfs *fs = NULL;
  cleanup_free char *uid = NULL, *name = NULL, *cpus = NULL, *mems = NULL, *cgname = NULL;
  cleanup_json json_t *config = json_array ();
  cleanup_free size_t *order = NULL;
  cleanup_free uint64_t *free_cpus = NULL, *free_cell = NULL;
  bool use_mem = rq->memory != NULL || rq->hugepages_2mi != NULL || rq->hugepages_1gi != NULL;
  bool prepared[2] = { false, false }, recorded = false, released = true;
  cleanup_json json_t *mem_env = NULL, *cpu_claims = NULL, *held = NULL;
  struct nrm_env_binding mem_eb = { 0 }; /* the memory driver's limits, from its environment */
  int r = -1;

  pid_t self = getpid ();
  unsigned long long st = start_time (self);
  name = xasprintf ("run-%d-%llu", (int) self, st);
  uid = xasprintf ("%08x-0000-4000-8000-%012llx", (unsigned) self, st & 0xffffffffffffULL);
  cgname = xasprintf ("run-%d", (int) self);
  /* A run is the command line of the CPU and memory drivers: their claims,
   * with their names, in their checkpoints. */
  struct nrm_publish_options po = c->publish;
  struct nrm_driver_selection sel = { "cpu,memory", c->driver_names, c->driver_settings };
  struct nrm_driver_host host = { .topo = t, .node = &po, .fsroot = c->fsroot, .live = true, .log = nrm_log };
  /* A run takes CPUs by count from a node's consumable device, whatever
   * device mode the plugin publishes: the claims of both are CPU sets. */
  po.cpu_mode = NRM_CPU_MODE_NUMA;
  if (nrm_registry_new (&reg, err) < 0 || nrm_drivers_open (reg, &sel, &host, &drivers, err) < 0)
    goto out;
  drv[0] = nrm_drivers_find (&drivers, "cpu");
  drv[1] = nrm_drivers_find (&drivers, "memory");
  if (rq->options && rq->options[0])
    json_array_append_new (config, json_pack ("{s:s, s:{s:s, s:{s:s, s:s, s:o}}}", "source", "FromClaim", "opaque",
                                              "driver", drv[0]->name, "parameters", "apiVersion", "cpu.nrm.io/v1alpha1",
                                              "kind", "CPUConfig", "options", json_pack ("[]")));
  for (size_t i = 0; rq->options && rq->options[i]; i++)
    json_array_append_new (
        json_object_get (json_object_get (json_object_get (json_array_get (config, 0), "opaque"), "parameters"),
                         "options"),
        json_string (rq->options[i]));

  for (int i = 0; i < 2; i++)
    {
      struct nrm_plugin_config pc;
      nrm_config_plugin (c, drv[i]->name, &pc);
      pc.instance_uid = NULL;
      pc.log = nrm_log;
      pc.local = true;
      pc.claims = (struct nrm_claim_source){ run_get, &src[i] };
      if (nrm_plugin_start (&pc, drv[i]->ops, drv[i]->self, &pl[i], err) < 0)
        goto out;
    }
  /* Runs whose nrm process is gone (killed with -9) still hold their
   * claims, CPUs and memory: released first. */
  nrm_run_release_stale (c->state_dir, pl, 2);
  if (write_record (c->state_dir, uid, name, self, st, err) < 0)
    goto out;
  recorded = true;

  /* The node: the one asked for, else the first in preference order that
   * has room, the fullest first (a best fit, as the slices offer the nodes
   * to the scheduler). */
  nrm_error_t e = NULL;
  cpu_claims = nrm_checkpoint_claims (c->state_dir, drv[0]->name, &e);
  held = cpu_claims ? nrm_checkpoint_held (cpu_claims) : NULL;
  nrm_error_release (&e);
  /* Unreadable state: the nodes keep the preference order. */
  if (held)
    nrm_cpu_room (t, held, &free_cpus, &free_cell);
  order = nrm_numa_preference_by_room (t, free_cpus, free_cell);
  char count[32];
  snprintf (count, sizeof (count), "%u", rq->cpus);
  nrm_error_t last = NULL;
  int node = -1;
  for (size_t k = 0; k < t->n_numa && node < 0; k++)
    {
      const struct nrm_numa_node *n = &t->numa[order[k]];
      char dev[32];
      if (rq->numa_node >= 0 && (int) n->os_index != rq->numa_node)
        continue;
      if (hwloc_bitmap_iszero (n->cpus) || (rq->isolated && !hwloc_bitmap_intersects (n->cpus, t->isolated)))
        continue;
      snprintf (dev, sizeof (dev), rq->isolated ? "numa%u-isolated" : "numa%u", n->os_index);
      json_decref (src[0].claim);
      src[0].claim = claim_for (uid, name, drv[0]->name, c->node_name, dev, "cpus", count, config);
      nrm_error_release (&last);
      json_t *devs = nrm_plugin_prepare (pl[0], RUN_NAMESPACE, name, uid, &last);
      if (devs != NULL)
        {
          json_decref (devs);
          node = (int) n->os_index;
          prepared[0] = true;
        }
    }
  if (node < 0)
    {
      if (last == NULL && rq->isolated)
        nrm_error_set (err, ENOSPC,
                       "no NUMA node%s has isolated CPUs (--isolated-cpus, or isolcpus= on the kernel "
                       "command line)",
                       rq->numa_node >= 0 ? " asked for" : "");
      else if (last == NULL)
        nrm_error_set (err, EINVAL, "NUMA node %d does not exist or has no CPUs", rq->numa_node);
      else
        {
          *err = last;
          nrm_error_wrap (err, "%u CPU%s%s", rq->cpus, rq->cpus == 1 ? "" : "s",
                          rq->numa_node >= 0 ? " on the NUMA node asked for" : " on any NUMA node");
        }
      goto out;
    }
  for (int h = 0; h < 2 && node >= 0; h++)
    {
      const char *want = h == 0 ? rq->hugepages_2mi : rq->hugepages_1gi;
      uint64_t size = h == 0 ? 2u << 20 : 1u << 30;
      int ni = nrm_topology_numa_index (t, (unsigned) node);
      bool have = false;
      for (size_t k = 0; want && ni >= 0 && k < t->numa[ni].n_hugepages; k++)
        have |= t->numa[ni].hugepages[k].size == size && t->numa[ni].hugepages[k].count > 0;
      if (want && !have)
        {
          nrm_error_set (err, ENOSPC,
                         "NUMA node %d has no %s huge pages (reserve some in "
                         "/sys/devices/system/node/node%d/hugepages/hugepages-%ukB/nr_hugepages)",
                         node, h == 0 ? "2Mi" : "1Gi", node, (unsigned) (size >> 10));
          goto out;
        }
    }
  if (use_mem)
    {
      /* Memory and huge pages of the CPUs' node; the run's memory is also
       * its limit (MemoryConfig limit). */
      char dev[64];
      const char *md = drv[1]->name;
      cleanup_json json_t *results = json_array ();
      cleanup_json json_t *mconfig
          = json_pack ("[{s:s, s:{s:s, s:{s:s, s:s, s:b}}}]", "source", "FromClaim", "opaque", "driver", md,
                       "parameters", "apiVersion", "memory.nrm.io/v1alpha1", "kind", "MemoryConfig", "limit", 1);
      cleanup_free char *what = NULL;
      if (rq->memory)
        {
          snprintf (dev, sizeof (dev), "numa%d", node);
          json_array_append_new (results, result_for ("memory", md, c->node_name, dev, "memory", rq->memory));
        }
      if (rq->hugepages_2mi)
        {
          snprintf (dev, sizeof (dev), "numa%d-hugepages-2mi", node);
          json_array_append_new (results,
                                 result_for ("hugepages-2mi", md, c->node_name, dev, "hugepages", rq->hugepages_2mi));
        }
      if (rq->hugepages_1gi)
        {
          snprintf (dev, sizeof (dev), "numa%d-hugepages-1gi", node);
          json_array_append_new (results,
                                 result_for ("hugepages-1gi", md, c->node_name, dev, "hugepages", rq->hugepages_1gi));
        }
      what = xasprintf ("%s%s%s%s%s%s%s%s on NUMA node %d", rq->memory ? "memory " : "", rq->memory ?: "",
                        rq->hugepages_2mi ? (rq->memory ? ", " : "") : "", rq->hugepages_2mi ? "2Mi huge pages " : "",
                        rq->hugepages_2mi ?: "", rq->hugepages_1gi ? (rq->memory || rq->hugepages_2mi ? ", " : "") : "",
                        rq->hugepages_1gi ? "1Gi huge pages " : "", rq->hugepages_1gi ?: "", node);
      src[1].claim = claim_with (uid, name, TAKE_PTR (results), mconfig);
      json_t *devs = nrm_plugin_prepare (pl[1], RUN_NAMESPACE, name, uid, err);
      if (devs == NULL)
        {
          nrm_error_wrap (err, "%s", what);
          goto out;
        }
      json_decref (devs);
      prepared[1] = true;
      cleanup_json json_t *mclaims = nrm_plugin_claims (pl[1], err);
      mem_env = json_incref (json_object_get (json_object_get (json_object_get (mclaims, uid), "edits"), "env"));
      if (*err)
        nrm_error_release (err);
      if (nrm_env_binding_parse (mem_env, name, &mem_eb, err) < 0)
        goto out;
    }

  /* What was picked. */
  {
    cleanup_json json_t *claims = nrm_plugin_claims (pl[0], err);
    json_t *state = json_object_get (json_object_get (claims, uid), "state");
    cpus = xstrdup (json_string_value (json_object_get (state, "cpus")) ?: "");
    mems = xstrdup (json_string_value (json_object_get (state, "mems")) ?: "");
  }
  nrm_log (NULL, NRM_LOG_INFO, "run %s: CPUs %s, memory node %s", name, cpus, mems);

  bool cgroup = have_cgroup_cpuset (c->fsroot);
  if (cgroup)
    {
      struct nrm_binding b = { .cpus = cpus, .memory = { .mems = mems } };
      nrm_env_binding_memory (&mem_eb, &b.memory);
      cleanup_free char *rel = xasprintf ("nrm.slice/%s", cgname);
      if (nrm_cgroupfs_open (c->fsroot, &fs, err) < 0 || make_cgroup (fs, cgname, err) < 0
          || nrm_cgroup_apply (fs, rel, &b, err) < 0)
        goto out;
    }
  else
    {
      nrm_log (NULL, NRM_LOG_INFO, "no cgroup v2 cpuset here: pinning with sched_setaffinity and set_mempolicy");
      if (mem_eb.memory_max || mem_eb.n_hugetlb)
        nrm_log (NULL, NRM_LOG_INFO,
                 "without cgroup v2 the memory and huge pages are held for this run but not "
                 "enforced as limits");
    }

  int go[2];
  if (pipe2 (go, O_CLOEXEC) < 0)
    {
      nrm_error_errno (err, errno, "pipe");
      goto out;
    }
  setenv (nrm_env_name[NRM_ENV_CPUS], cpus, 1);
  setenv (nrm_env_name[NRM_ENV_MEMS], mems, 1);
  /* The memory driver's variables, as a container gets them. */
  {
    size_t i;
    json_t *v;
    json_array_foreach (mem_env, i, v)
    {
      const char *kv = json_string_value (v), *eq = kv ? strchr (kv, '=') : NULL;
      size_t ml = strlen (nrm_env_name[NRM_ENV_MEMS]);
      if (eq && !(strncmp (kv, nrm_env_name[NRM_ENV_MEMS], ml) == 0 && kv[ml] == '='))
        {
          cleanup_free char *k = xstrndup (kv, (size_t) (eq - kv));
          setenv (k, eq + 1, 1);
        }
    }
  }
  pid_t parent = getpid ();
  child_pid = fork ();
  if (child_pid < 0)
    {
      nrm_error_errno (err, errno, "fork");
      goto out;
    }
  if (child_pid == 0)
    {
      char ok;
      close (go[1]);
      /* If nrm run dies (kill -9), the command dies too: its CPUs may be
       * handed out again once the next run releases the stale claim. */
      if (prctl (PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid () != parent)
        _exit (NRM_RUN_EXIT_FAILED);
      /* Wait until the parent has moved us into the cgroup. */
      if (read (go[0], &ok, 1) != 1)
        _exit (NRM_RUN_EXIT_FAILED);
      if (!cgroup)
        {
          struct bitmask *cm = numa_parse_cpustring_all (cpus);
          struct bitmask *mm = numa_parse_nodestring_all (mems);
          if (cm == NULL || mm == NULL || numa_sched_setaffinity (0, cm) < 0)
            {
              fprintf (stderr, "nrm run: cannot pin to CPUs %s\n", cpus);
              _exit (NRM_RUN_EXIT_FAILED);
            }
          numa_set_membind (mm);
          numa_free_cpumask (cm);
          numa_free_nodemask (mm);
        }
      execvp (rq->argv[0], rq->argv);
      /* env(1)'s codes: 127 not found, 126 found but not executable. */
      int exec_errno = errno;
      fprintf (stderr, "nrm run: cannot run `%s`: %s\n", rq->argv[0], strerror (exec_errno));
      _exit (exec_errno == ENOENT || exec_errno == ENOTDIR ? NRM_RUN_EXIT_NOT_FOUND : NRM_RUN_EXIT_CANNOT_EXEC);
    }
  close (go[0]);
  if (cgroup)
    {
      char pidtext[32];
      cleanup_free char *rel = xasprintf ("nrm.slice/%s", cgname);
      snprintf (pidtext, sizeof (pidtext), "%d", (int) child_pid);
      if (nrm_cgroup_write (fs, rel, "cgroup.procs", pidtext, err) < 0)
        {
          kill (child_pid, SIGKILL);
          waitpid (child_pid, NULL, 0);
          close (go[1]);
          goto out;
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
  r = 0;
out:
  /* Released when the command ends, however it ends. */
  for (int i = 1; i >= 0; i--)
    {
      nrm_error_t uerr = NULL;
      if (prepared[i] && nrm_plugin_unprepare (pl[i], uid, &uerr) < 0)
        {
          nrm_log (NULL, NRM_LOG_ERROR, "run %s: %s", name, nrm_error_msg (uerr));
          nrm_error_release (&uerr);
          released = false;
        }
      nrm_plugin_stop (pl[i]);
      json_decref (src[i].claim);
    }
  /* A claim that could not be released keeps its record: the next run or
   * the plugin releases it once this process is gone. */
  if (recorded && released)
    {
      cleanup_free char *path = record_path (c->state_dir, uid);
      unlink (path);
    }
  nrm_drivers_close (&drivers);
  nrm_registry_free (reg);
  if (fs)
    {
      cleanup_free char *dir = xasprintf ("%s/nrm.slice/%s", nrm_cgroupfs_root (fs), cgname);
      rmdir (dir);
      nrm_cgroupfs_close (fs);
    }
  return r;
}
