/* SPDX-License-Identifier: Apache-2.0 */
/* The commit (nrm/commit.h): the OCI hook and the reconciler pass. */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cpuset/host.h"
#include "cpuset/kubepods.h"
#include "cpuset/partition.h"
#include "memory/hugetlb-pod.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/hugetlb.h"
#include "nrm/base/xalloc.h"
#include "nrm/commit.h"
#include "topology/topology.h"

#define MAX_BUNDLE_CONFIG (16 << 20)

static bool
id_valid (const char *id)
{
  size_t n = id ? strlen (id) : 0;
  if (n == 0 || n > 128)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum ((unsigned char) id[i]) && id[i] != '-' && id[i] != '_' && id[i] != '.')
      return false;
  return id[0] != '.';
}

/* Hook and reconciler take turns on the container records. */
static int
lock_records (const char *state_dir, nrm_error_t *err)
{
  cleanup_free char *path = xasprintf ("%s/containers.lock", state_dir);
  return nrm_lock_file (path, err);
}

static char *
record_path (const char *state_dir, const char *id)
{
  return xasprintf ("%s/containers/%s.json", state_dir, id);
}

/* A CPU or node list from the environment, checked and normalised. */
static int
list_value (const char *name, const char *text, char **ret, nrm_error_t *err)
{
  hwloc_bitmap_t set = NULL;
  if (nrm_cpulist_parse (text, &set, err) < 0)
    return nrm_error_wrap (err, "%s", name);
  *ret = nrm_cpulist_format (set);
  hwloc_bitmap_free (set);
  if (**ret == '\0')
    return nrm_error_set (err, EINVAL, "%s is empty: a container cannot run on no CPU or memory node", name);
  return 0;
}

static char *
shared_path (const char *state_dir)
{
  return xasprintf ("%s/shared-cpus", state_dir);
}

/* cpus with the shared pool the reconciler last wrote, or NULL. */
static char *
mixed_cpus (const char *state_dir, const char *cpus)
{
  cleanup_free char *path = shared_path (state_dir), *text = NULL;
  nrm_error_t e = NULL;
  if (nrm_read_file (path, 1 << 16, &text, NULL, &e) < 0)
    {
      nrm_error_release (&e);
      return NULL;
    }
  return nrm_cpulist_combine (cpus, text, NRM_CPULIST_UNION);
}

/* The huge page claims of a container's environment into claims (uid ->
 * {size: bytes}): the per-claim NRM_HUGETLB_<size>_<UID>, or when it has
 * none the plain NRM_HUGETLB_<size> as one claim. */
static int
hugetlb_claims (json_t *env, json_t *claims, nrm_error_t *err)
{
  const char *prefix = nrm_env_name[NRM_ENV_HUGETLB];
  size_t pl = strlen (prefix), i;
  json_t *e;
  cleanup_json json_t *plain = json_object ();
  json_array_foreach (env, i, e)
  {
    const char *kv = json_string_value (e);
    if (kv == NULL || strncmp (kv, prefix, pl) != 0)
      continue;
    const char *eq = strchr (kv, '=');
    if (eq == NULL)
      continue;
    size_t nl = (size_t) (eq - kv) - pl;
    const char *us = memchr (kv + pl, '_', nl);
    size_t sl = us ? (size_t) (us - kv) - pl : nl;
    const char *uid = us ? us + 1 : NULL;
    size_t ul = us ? (size_t) (eq - uid) : 0;
    unsigned long long v;
    if (sl == 0 || sl > 8 || strspn (kv + pl, "0123456789KMGB") != sl || (us && (ul == 0 || ul > 64))
        || (us && strspn (uid, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != ul) || !nrm_cgroup_value_bytes (eq + 1, &v)
        || v >= NRM_HUGETLB_POD_UNBOUNDED)
      return nrm_error_set (err, EINVAL, "malformed `%.40s`", kv);
    char size[12], key[72];
    snprintf (size, sizeof (size), "%.*s", (int) sl, kv + pl);
    snprintf (key, sizeof (key), "%.*s", (int) ul, uid ? uid : "");
    json_t *into = us ? claims : plain;
    json_t *c = us ? json_object_get (claims, key) : plain;
    if (us && c == NULL)
      {
        if (json_object_size (claims) == NRM_HUGETLB_POD_CLAIMS_MAX)
          return nrm_error_set (err, EINVAL, "more than %d huge page claims", NRM_HUGETLB_POD_CLAIMS_MAX);
        json_object_set_new (into, key, c = json_object ());
      }
    json_object_set_new (c, size, json_integer ((json_int_t) v));
  }
  /* Without the per-claim copies (a hand-made bundle): one claim. */
  if (json_object_size (claims) == 0 && json_object_size (plain) > 0)
    json_object_set (claims, "-", plain);
  return 0;
}

/* The pod cgroup and its ancestors up to the top (kubepods). */
static size_t
chain (const char *pod, char out[4][1024])
{
  size_t n = 0;
  snprintf (out[n++], sizeof (out[0]), "%s", pod);
  for (;;)
    {
      char *slash = strrchr (out[n - 1], '/');
      if (slash == NULL || n == 4)
        return n;
      snprintf (out[n], sizeof (out[0]), "%.*s", (int) (slash - out[n - 1]), out[n - 1]);
      n++;
    }
}

/* The pod's (and kubepods') hugetlb limits raised for the container's huge
 * page claims, undone if a later step fails. Only in a kubelet pod: no
 * other cgroup has pod levels that limit the claim. */
static int
raise_pod_hugetlb (struct nrm_cgroupfs *fs, const char *state_dir, const char *cgroup, json_t *env,
                   struct nrm_hugetlb_pod_undo **ret_undo, nrm_error_t *err)
{
  struct nrm_container_cgroup cc;
  cleanup_json json_t *claims = json_object ();
  if (!nrm_cgroup_path_valid (cgroup) || !nrm_kubepods_parse (cgroup, &cc))
    return 0;
  if (hugetlb_claims (env, claims, err) < 0)
    return -1;
  char pod[1024], lv[4][1024];
  snprintf (pod, sizeof (pod), "%s", cc.path);
  *strrchr (pod, '/') = '\0';
  size_t n = chain (pod, lv);
  const char *levels[4];
  for (size_t i = 0; i < n; i++)
    levels[i] = lv[i];
  return nrm_hugetlb_pod_raise (fs, state_dir, cc.path, levels, n, claims, ret_undo, err);
}

int
nrm_binding_apply (struct nrm_cgroupfs *fs, const char *cgroup, const struct nrm_binding *b, nrm_error_t *err)
{
  struct
  {
    const char *file, *value;
    char *old;
  } w[1 + NRM_MEMORY_FILES_MAX];
  struct nrm_cgroup_file mf[NRM_MEMORY_FILES_MAX];
  char names[2 * NRM_HUGETLB_SIZES_MAX][32];
  size_t n = 0;

  if (!nrm_cgroup_path_valid (cgroup))
    return nrm_error_set (err, EINVAL, "invalid cgroup path `%s`", cgroup);
  /* cpus before mems: a CPU set change never needs the memory nodes first,
   * and mems is what a failure most often refuses. */
  if (b->cpus)
    w[n++] = (typeof (w[0])){ "cpuset.cpus", b->cpus, NULL };
  size_t nm = nrm_memory_files (&b->memory, mf, names);
  for (size_t i = 0; i < nm; i++)
    w[n++] = (typeof (w[0])){ mf[i].file, mf[i].value, NULL };
  int r = 0;
  size_t done = 0;
  for (size_t i = 0; i < n && r == 0; i++)
    if (nrm_cgroup_read (fs, cgroup, w[i].file, &w[i].old, err) < 0)
      r = -1;
  for (; r == 0 && done < n; done++)
    if (nrm_cgroup_write (fs, cgroup, w[done].file, w[done].value, err) < 0)
      r = -1;
  if (r < 0)
    /* Put back what was written before the failure, newest first. */
    while (done-- > 0)
      {
        nrm_error_t ignored = NULL;
        /* An empty cpuset file reads back as "" and means "inherit". */
        nrm_cgroup_write (fs, cgroup, w[done].file, w[done].old && *w[done].old ? w[done].old : "\n", &ignored);
        nrm_error_release (&ignored);
      }
  for (size_t i = 0; i < n; i++)
    free (w[i].old);
  return r;
}

void
nrm_env_binding_memory (const struct nrm_env_binding *eb, struct nrm_memory_binding *m)
{
  m->memory_max = eb->memory_max;
  m->memory_min = eb->memory_min;
  m->n_hugetlb = eb->n_hugetlb;
  for (size_t h = 0; h < eb->n_hugetlb; h++)
    {
      m->hugetlb[h].size = eb->hugetlb[h].size;
      m->hugetlb[h].max = eb->hugetlb[h].max;
    }
}

/* What the hook reads of one container: the OCI state and the binding in
 * its bundle's environment, and the partition it asks for. */
struct hook
{
  json_t *st, *cfg;
  const char *id; /* in st */
  json_int_t pid;
  struct nrm_env_binding eb; /* in cfg */
  struct nrm_binding b;
  char *cpus, *mems;
  enum nrm_partition_mode pmode;
  char *punavail; /* why there is no partition, where one was asked for */
};

static void
hook_done (struct hook *h)
{
  json_decref (h->st);
  json_decref (h->cfg);
  free (h->cpus);
  free (h->mems);
  free (h->punavail);
}

/* The OCI state and the bundle's NRM_* variables. */
static int
hook_read (struct hook *h, const char *state, size_t len, nrm_error_t *err)
{
  json_error_t jerr;
  h->st = json_loadb (state, len, 0, &jerr);
  if (h->st == NULL || len > NRM_HOOK_STATE_MAX)
    return nrm_error_set (err, EINVAL, "the OCI state on stdin is not JSON: %s", h->st ? "too large" : jerr.text);
  const char *id = json_string_value (json_object_get (h->st, "id"));
  const char *bundle = json_string_value (json_object_get (h->st, "bundle"));
  h->pid = json_integer_value (json_object_get (h->st, "pid"));
  if (!id_valid (id))
    return nrm_error_set (err, EINVAL, "OCI state: invalid container id");
  h->id = id;
  if (bundle == NULL || bundle[0] != '/')
    return nrm_error_set (err, EINVAL, "OCI state of %s: bundle must be an absolute path", id);
  if (h->pid <= 0 || h->pid > (1 << 22))
    return nrm_error_set (err, EINVAL, "OCI state of %s: invalid pid", id);

  cleanup_free char *cfg_path = xasprintf ("%s/config.json", bundle), *cfg_text = NULL;
  if (nrm_read_file (cfg_path, MAX_BUNDLE_CONFIG, &cfg_text, NULL, err) < 0)
    return nrm_error_wrap (err, "container %s", id);
  h->cfg = json_loads (cfg_text, 0, &jerr);
  if (h->cfg == NULL)
    return nrm_error_set (err, EINVAL, "container %s: `%s` is not JSON: %s", id, cfg_path, jerr.text);

  cleanup_free char *who = xasprintf ("container %s", id);
  struct nrm_env_binding *eb = &h->eb;
  if (nrm_env_binding_parse (json_object_get (json_object_get (h->cfg, "process"), "env"), who, eb, err) < 0)
    return -1;
  nrm_env_binding_memory (eb, &h->b.memory);
  if (eb->cpus && list_value (nrm_env_name[NRM_ENV_CPUS], eb->cpus, &h->cpus, err) < 0)
    return nrm_error_wrap (err, "container %s", id);
  if ((eb->mems || eb->cpu_nodes)
      && list_value (nrm_env_name[eb->mems ? NRM_ENV_MEMS : NRM_ENV_CPU_NODES], eb->mems ? eb->mems : eb->cpu_nodes,
                     &h->mems, err)
             < 0)
    return nrm_error_wrap (err, "container %s", id);
  return 0;
}

/* A partition: asked for, checked before anything is written. A mixed
 * claim's CPUs are shared, so it cannot have one. */
static int
hook_partition (struct hook *h, nrm_error_t *err)
{
  h->pmode = NRM_PARTITION_OFF;
  if (h->eb.partition
      && nrm_partition_mode_parse (h->eb.partition, nrm_env_name[NRM_ENV_PARTITION], &h->pmode, err) < 0)
    return nrm_error_wrap (err, "container %s", h->id);
  if (h->pmode != NRM_PARTITION_OFF && (h->cpus == NULL || h->eb.shared_cpus))
    {
      const char *why = h->cpus ? "a claim with sharedCPUs shares its CPUs" : "no exclusive CPUs (NRM_CPUS)";
      if (h->eb.partition_required)
        return nrm_error_set (err, EINVAL, "container %s: no cpuset partition can be made: %s", h->id, why);
      h->punavail = xstrdup (why);
      h->pmode = NRM_PARTITION_OFF;
    }
  return 0;
}

/* The record, the pod's huge page limits, the binding and the partition of
 * the container in cgroup, all or nothing. */
static int
hook_bind (struct hook *h, struct nrm_cgroupfs *fs, const char *state_dir, const char *cgroup, nrm_error_t *err)
{
  /* The record comes first, under the reconciler's lock: a pass that runs
   * meanwhile either sees the record or finishes before the cgroup is
   * written, so it never moves the container back. */
  cleanup_free char *dir = xasprintf ("%s/containers", state_dir), *rec = record_path (state_dir, h->id), *text = NULL;
  cleanup_free char *with_shared = NULL;
  cleanup_close int lock = -1;
  cleanup_json json_t *doc = NULL;
  struct nrm_hugetlb_pod_undo *hp = NULL;
  const char *cpus = h->cpus, *mems = h->mems;
  if (nrm_mkdir_p (dir, 0700, err) < 0 || (lock = lock_records (state_dir, err)) < 0)
    return -1;
  /* The pod's own hugetlb limits (the kubelet's 0 for a size the pod spec
   * does not request), undone if a later step fails. Before the record:
   * the journal's fsync then does not carry the record's rename too. */
  if (h->b.memory.n_hugetlb > 0
      && raise_pod_hugetlb (fs, state_dir, cgroup, json_object_get (json_object_get (h->cfg, "process"), "env"), &hp,
                            err)
             < 0)
    return -1;
  doc = json_pack ("{s:s, s:s, s:s?, s:s?}", "id", h->id, "cgroup", cgroup, "cpus", cpus, "mems", mems);
  if (h->eb.shared_cpus && cpus)
    json_object_set_new (doc, "sharedCPUs", json_true ());
  text = json_dumps (doc, JSON_COMPACT);
  /* Not synced: a crash of the machine that could lose it ends the
   * container as well (and the reconciler removes a record it cannot
   * read). A sync here would cost about 1 ms of every container start. */
  if (nrm_write_unsynced (rec, text, strlen (text), 0600, err) < 0)
    {
      nrm_hugetlb_pod_undo (fs, hp);
      return -1;
    }
  /* A mixed claim starts on its CPUs and the shared pool as the reconciler
   * last wrote it (under the same lock); without that file, on its own
   * CPUs until the next pass. */
  if (h->eb.shared_cpus && cpus)
    with_shared = mixed_cpus (state_dir, cpus);
  h->b.cpus = with_shared ? with_shared : cpus;
  h->b.memory.mems = mems;
  /* Below a host cgroup that nrm keeps on the shared pool (podman's
   * machine.slice, say), the claim's CPUs are outside it until it widens. */
  if (nrm_host_make_room (fs, state_dir, cgroup, h->b.cpus, mems, err) < 0
      || nrm_binding_apply (fs, cgroup, &h->b, err) < 0)
    {
      nrm_hugetlb_pod_undo (fs, hp);
      unlink (rec);
      return -1;
    }
  /* The partition after the cpuset: the kernel wants cpuset.cpus first. */
  if (h->pmode != NRM_PARTITION_OFF)
    {
      nrm_error_t pe = NULL;
      if (nrm_partition_make (fs, cgroup, cpus, h->pmode, NULL, h->eb.partition_required ? err : &pe) < 0)
        {
          if (h->eb.partition_required)
            {
              nrm_error_wrap (err, "the claim asks for a cpuset partition");
              nrm_hugetlb_pod_undo (fs, hp);
              unlink (rec);
              return -1;
            }
          h->punavail = xstrdup (nrm_error_msg (pe));
          nrm_error_release (&pe);
        }
    }
  if (h->punavail || h->pmode != NRM_PARTITION_OFF)
    {
      /* What the container got, for `nrm status` and whoever reads the
       * record; rewritten only when there is a partition to tell of. */
      cleanup_free char *note
          = h->punavail ? xasprintf ("unavailable (%s)", h->punavail) : xstrdup (nrm_partition_mode_name (h->pmode));
      json_object_set_new (doc, "partition", json_string (note));
      free (text);
      text = json_dumps (doc, JSON_COMPACT);
      nrm_error_t we = NULL;
      if (nrm_write_unsynced (rec, text, strlen (text), 0600, &we) < 0)
        nrm_error_release (&we); /* the binding stands; only the note is lost */
    }
  nrm_hugetlb_pod_keep (hp);
  return 0;
}

int
nrm_hook_run (const struct nrm_fsroot *root, const char *state, size_t len, const char *state_dir, char **ret_summary,
              nrm_error_t *err)
{
  struct hook h = { 0 };
  int r = -1;
  cleanup_free char *cgroup = NULL;
  struct nrm_cgroupfs *fs = NULL;
  if (hook_read (&h, state, len, err) < 0)
    goto out;
  if (h.cpus == NULL && h.mems == NULL && h.b.memory.memory_max == NULL && h.b.memory.memory_min == NULL
      && h.b.memory.n_hugetlb == 0)
    {
      if (ret_summary)
        *ret_summary = xstrdup ("no nrm binding in the container's environment; nothing to do");
      r = 0;
      goto out;
    }
  if (hook_partition (&h, err) < 0)
    goto out;
  /* Amounts the machine cannot have are refused before anything is
   * recorded or written. */
  h.b.memory.mems = h.mems;
  if (nrm_memory_binding_check (root, &h.b.memory, err) < 0 || nrm_cgroup_of_pid (root, (int) h.pid, &cgroup, err) < 0
      || nrm_cgroupfs_open (root, &fs, err) < 0)
    {
      nrm_error_wrap (err, "container %s", h.id);
      goto out;
    }
  if (hook_bind (&h, fs, state_dir, cgroup, err) < 0)
    {
      nrm_error_wrap (err, "container %s", h.id);
      goto out;
    }
  if (ret_summary)
    *ret_summary = xasprintf ("container %s in %s: cpus %s, mems %s%s%s%s%s", h.id, cgroup, h.cpus ? h.cpus : "-",
                              h.mems ? h.mems : "-", h.punavail || h.pmode ? "; partition: " : "",
                              h.punavail ? "unavailable (" : (h.pmode ? nrm_partition_mode_name (h.pmode) : ""),
                              h.punavail ? h.punavail : "", h.punavail ? ")" : "");
  r = 0;
out:
  nrm_cgroupfs_close (fs);
  hook_done (&h);
  return r;
}

/* --- reconciler --------------------------------------------------------------- */

struct pass
{
  struct nrm_cgroupfs *fs;
  const char *state_dir;
  char *shared_text;
  const char *shared_mems, *all_mems; /* or NULL: memory nodes left alone */
  json_t *records;                    /* id -> record */
  json_t *seen;                       /* ids of records whose container exists */
  struct nrm_reconcile_stats *st;
  char **first_error;
};

static void
note_error (struct pass *p, nrm_error_t *e)
{
  nrm_error_tally (e, &p->st->failed, p->first_error);
}

/* Writes want into a cpuset file (cpuset.cpus or cpuset.mems) when what is
 * there means another set. An empty file inherits the parent's: the same
 * as want when want is all of inherit. */
static void
ensure (struct pass *p, const char *cgroup, const char *file, const char *want, const char *inherit)
{
  nrm_error_t e = NULL;
  cleanup_free char *have = NULL;
  if (nrm_cgroup_read (p->fs, cgroup, file, &have, &e) < 0)
    {
      if (e->status == ENOENT)
        nrm_error_release (&e); /* vanished: nothing to keep right */
      else
        note_error (p, &e);
      return;
    }
  const char *now = *have == '\0' && inherit ? inherit : have;
  if (nrm_cpulist_equal (now, want))
    return;
  struct nrm_binding b = { 0 };
  if (strcmp (file, "cpuset.cpus") == 0)
    b.cpus = want;
  else
    b.memory.mems = want;
  if (nrm_binding_apply (p->fs, cgroup, &b, &e) < 0)
    {
      if (e->status == ENOENT)
        nrm_error_release (&e);
      else
        note_error (p, &e);
      return;
    }
  p->st->updated++;
}

/* A container's memory nodes: its own (a memory claim, or a CPU claim's
 * nodes) as the hook recorded them; else the shared pool's, when the
 * reconciler manages them. */
static void
ensure_mems (struct pass *p, const char *cgroup, json_t *rec)
{
  const char *mems = json_string_value (json_object_get (rec, "mems"));
  if (mems)
    ensure (p, cgroup, "cpuset.mems", mems, NULL);
  else if (p->shared_mems)
    ensure (p, cgroup, "cpuset.mems", p->shared_mems, p->all_mems);
}

static int
visit (const struct nrm_container_cgroup *c, void *arg)
{
  struct pass *p = arg;
  p->st->containers++;
  json_t *rec = json_object_get (p->records, c->id);
  const char *cpus = json_string_value (json_object_get (rec, "cpus"));
  if (rec)
    json_object_set_new (p->seen, c->id, json_true ());
  if (cpus)
    {
      p->st->exclusive++;
      if (json_is_true (json_object_get (rec, "sharedCPUs")))
        {
          /* Mixed: its exclusive CPUs and the shared pool. */
          cleanup_free char *both = nrm_cpulist_combine (cpus, p->shared_text, NRM_CPULIST_UNION);
          ensure (p, c->path, "cpuset.cpus", both ? both : cpus, NULL);
          ensure_mems (p, c->path, rec);
          return 0;
        }
      ensure (p, c->path, "cpuset.cpus", cpus, NULL);
      ensure_mems (p, c->path, rec);
      return 0;
    }
  /* No claim, or a memory-only one: the shared pool. */
  ensure (p, c->path, "cpuset.cpus", p->shared_text, NULL);
  ensure_mems (p, c->path, rec);
  return 0;
}

/* The host subtrees' view of the records: claimed containers by cgroup. */
struct host_view
{
  struct pass *p;
  json_t *by_cgroup; /* cgroup (no leading '/') -> id */
};

static bool
host_is_claimed (const char *cgroup, void *arg)
{
  struct host_view *h = arg;
  return json_object_get (h->by_cgroup, cgroup) != NULL;
}

static bool
host_holds_claims (const char *cgroup, void *arg)
{
  struct host_view *h = arg;
  size_t n = strlen (cgroup);
  const char *cg;
  json_t *v;
  json_object_foreach (h->by_cgroup, cg, v)
  {
    if (strncmp (cg, cgroup, n) == 0 && (cg[n] == '\0' || cg[n] == '/'))
      return true;
  }
  return false;
}

/* A claimed container in a host subtree: kept as one under kubepods. */
static void
host_keep (const char *cgroup, void *arg)
{
  struct host_view *h = arg;
  struct nrm_container_cgroup c = { 0 };
  snprintf (c.path, sizeof (c.path), "%s", cgroup);
  snprintf (c.id, sizeof (c.id), "%s", json_string_value (json_object_get (h->by_cgroup, cgroup)));
  visit (&c, h->p);
}

static void
host_pass (struct pass *p, const char *const *host, size_t n_host)
{
  cleanup_json json_t *by_cgroup = json_object ();
  const char *id;
  json_t *rec;
  json_object_foreach (p->records, id, rec)
  {
    const char *cg = json_string_value (json_object_get (rec, "cgroup"));
    if (cg && strlen (cg) < sizeof (((struct nrm_container_cgroup *) 0)->path))
      json_object_set_new (by_cgroup, cg[0] == '/' ? cg + 1 : cg, json_string (id));
  }
  struct host_view h = { p, by_cgroup };
  struct nrm_host_claims claims = { host_is_claimed, host_holds_claims, host_keep, &h };
  struct nrm_host_stats hs;
  nrm_error_t e = NULL;
  if (nrm_host_reconcile (p->fs, p->state_dir, host, n_host, &claims, p->shared_text, p->shared_mems, &hs,
                          p->first_error, &e)
      < 0)
    note_error (p, &e);
  p->st->updated += hs.updated;
  p->st->failed += hs.failed;
  p->st->host_confined = hs.confined;
}

int
nrm_reconcile (struct nrm_cgroupfs *fs, const char *state_dir, const char *shared_cpus, const char *shared_mems,
               const char *all_mems, const char *const *host, size_t n_host, struct nrm_reconcile_stats *st,
               char **ret_first_error, nrm_error_t *err)
{
  struct pass p = { fs, state_dir, NULL, shared_mems, all_mems, json_object (), json_object (), st, ret_first_error };
  cleanup_free char *dir = xasprintf ("%s/containers", state_dir);
  cleanup_close int lock = -1;
  int r = -1;
  memset (st, 0, sizeof (*st));
  if (list_value ("shared pool", shared_cpus, &p.shared_text, err) < 0)
    goto out;
  if (nrm_mkdir_p (dir, 0700, err) < 0 || (lock = lock_records (state_dir, err)) < 0)
    goto out;
  /* The shared pool, for the hook of a mixed claim's container. */
  {
    cleanup_free char *path = shared_path (state_dir), *old = NULL;
    nrm_error_t ignored = NULL;
    if (nrm_read_file (path, 1 << 16, &old, NULL, &ignored) < 0 || strcmp (old, p.shared_text) != 0)
      {
        nrm_error_release (&ignored);
        /* Rewritten by every pass; what it names dies with the machine. */
        if (nrm_write_unsynced (path, p.shared_text, strlen (p.shared_text), 0600, err) < 0)
          goto out;
      }
    nrm_error_release (&ignored);
  }
  /* The hook's records. */
  DIR *d = opendir (dir);
  struct dirent *de;
  while (d && (de = readdir (d)) != NULL)
    {
      size_t n = strlen (de->d_name);
      if (n < 6 || strcmp (de->d_name + n - 5, ".json") != 0 || de->d_name[0] == '.')
        continue;
      cleanup_free char *path = xasprintf ("%s/%s", dir, de->d_name), *text = NULL;
      nrm_error_t ignored = NULL;
      if (nrm_read_file (path, 1 << 16, &text, NULL, &ignored) < 0)
        {
          nrm_error_release (&ignored);
          continue;
        }
      json_t *rec = json_loads (text, 0, NULL);
      const char *id = json_string_value (json_object_get (rec, "id"));
      if (id && id_valid (id))
        json_object_set (p.records, id, rec);
      else if (unlink (path) == 0)
        /* Written by rename, so never half-written while the machine runs:
         * this one was emptied by a crash, and names no live container. */
        st->forgotten++;
      json_decref (rec);
    }
  if (d)
    closedir (d);

  if (nrm_kubepods_walk (fs, visit, &p, err) < 0)
    goto out;
  /* The host's own subtrees, where the setting names them; also when it
   * names none, so that what an earlier setting confined is let go. */
  host_pass (&p, host, n_host);
  /* Exclusive CPUs that partitions now gone left above them: a later
   * partition of those CPUs elsewhere needs them back. */
  for (int i = 0; i < 2; i++)
    {
      size_t trimmed = 0;
      nrm_error_t e = NULL;
      if (nrm_partition_trim (fs, i ? "kubepods" : "kubepods.slice", &trimmed, &e) < 0)
        note_error (&p, &e);
      st->updated += trimmed;
    }
  /* The pods' huge page limits of claims whose containers are gone. */
  {
    struct nrm_hugetlb_pod_stats hs;
    nrm_error_t e = NULL;
    if (nrm_hugetlb_pod_sweep (fs, state_dir, &hs, &e) < 0)
      note_error (&p, &e);
  }
  /* Records of containers that are gone. */
  const char *id;
  json_t *rec;
  json_object_foreach (p.records, id, rec)
  {
    const char *cg = json_string_value (json_object_get (rec, "cgroup"));
    if (json_object_get (p.seen, id) || (cg && nrm_cgroup_exists (fs, cg)))
      continue;
    cleanup_free char *path = record_path (state_dir, id);
    if (unlink (path) == 0)
      st->forgotten++;
  }
  r = 0;
out:
  free (p.shared_text);
  json_decref (p.records);
  json_decref (p.seen);
  return r;
}
