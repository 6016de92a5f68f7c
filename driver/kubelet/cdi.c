/* SPDX-License-Identifier: Apache-2.0 */
/* The CDI spec of every prepared claim: <cdi_dir>/<driver>-<uid>.json, one
 * device named by the claim's UID with the driver's container edits, and
 * the commit hook for the drivers that ask for it. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cpuset/env.h"
#include "driver/kubelet/plugin-internal.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"

static char *
cdi_path (struct nrm_plugin *p, const char *uid)
{
  return xasprintf ("%s/%s-%s.json", p->cdi_dir, p->driver, uid);
}

char *
nrm_plugin_cdi_id (struct nrm_plugin *p, const char *uid)
{
  return xasprintf ("%s/claim=%s", p->driver, uid);
}

int
nrm_cdi_limits_env (struct nrm_container_edits *e, const char *uid, nrm_error_t *err)
{
  const struct nrm_container_limits *l = &e->limits;
  char num[24];
  if (e->env == NULL && (l->memory_max || l->memory_min || l->n_hugetlb))
    e->env = json_array ();
  for (int m = 0; m < 2; m++)
    {
      uint64_t v = m == 0 ? l->memory_max : l->memory_min;
      snprintf (num, sizeof (num), "%" PRIu64, v);
      if (v && nrm_env_add (e->env, m == 0 ? NRM_ENV_MEMORY_MAX : NRM_ENV_MEMORY_MIN, NULL, uid, num, err) < 0)
        return -1;
    }
  for (size_t h = 0; h < l->n_hugetlb && h < sizeof (l->hugetlb) / sizeof (l->hugetlb[0]); h++)
    {
      snprintf (num, sizeof (num), "%" PRIu64, l->hugetlb[h].max);
      if (nrm_env_add (e->env, NRM_ENV_HUGETLB, l->hugetlb[h].size, uid, num, err) < 0)
        return -1;
    }
  return 0;
}

json_t *
nrm_cdi_edits (const struct nrm_container_edits *e)
{
  json_t *o = json_object ();
  const struct
  {
    const char *key;
    json_t *v;
  } parts[] = { { "env", e->env }, { "deviceNodes", e->device_nodes }, { "mounts", e->mounts }, { "hooks", e->hooks } };
  for (size_t i = 0; i < sizeof (parts) / sizeof (parts[0]); i++)
    if (json_array_size (parts[i].v) > 0)
      json_object_set (o, parts[i].key, parts[i].v);
  if (e->commit_hook)
    json_object_set_new (o, "commitHook", json_true ());
  return o;
}

/* An entry of an nrm that kept only the environment ("env") was a CPU or
 * memory claim, which the commit hook binds. */
json_t *
nrm_cdi_entry_edits (json_t *entry)
{
  json_t *e = json_object_get (entry, "edits");
  if (json_is_object (e))
    return json_incref (e);
  return json_pack ("{s:O, s:b}", "env", json_object_get (entry, "env") ?: json_array (), "commitHook", 1);
}

/* One spec per claim; 0.5.0 is the lowest version that allows a device name
 * starting with a digit, as claim UIDs may. Specs are not synced: every
 * start rewrites them from the checkpoint. */
int
nrm_plugin_cdi_write (struct nrm_plugin *p, const char *uid, json_t *edits, nrm_error_t *err)
{
  if (p->cfg.local)
    return 0;
  cleanup_free char *path = cdi_path (p, uid), *kind = xasprintf ("%s/claim", p->driver);
  cleanup_json json_t *ce = json_object ();
  json_t *env = json_object_get (edits, "env");
  json_object_set_new (ce, "env", json_is_array (env) ? json_incref (env) : json_array ());
  static const char *const arrays[] = { "deviceNodes", "mounts" };
  for (size_t i = 0; i < 2; i++)
    if (json_array_size (json_object_get (edits, arrays[i])) > 0)
      json_object_set (ce, arrays[i], json_object_get (edits, arrays[i]));
  json_t *hooks = json_array ();
  size_t i;
  json_t *h;
  json_array_foreach (json_object_get (edits, "hooks"), i, h) { json_array_append (hooks, h); }
  /* The commit hook binds the container to its CPUs and memory before the
   * workload starts: only for the drivers that ask for it. */
  if (p->cfg.cdi_hook && json_is_true (json_object_get (edits, "commitHook")))
    json_array_append (hooks, p->cfg.cdi_hook);
  if (json_array_size (hooks) > 0)
    json_object_set_new (ce, "hooks", hooks);
  else
    json_decref (hooks);
  cleanup_json json_t *spec = json_pack ("{s:s, s:s, s:[{s:s, s:O}]}", "cdiVersion", "0.5.0", "kind", kind, "devices",
                                         "name", uid, "containerEdits", ce);
  cleanup_free char *text = json_dumps (spec, JSON_INDENT (2));
  /* Rebuilt from the checkpoint at every start (recover), before
   * the sockets exist: its own syncs would protect nothing. */
  return nrm_write_unsynced (path, text, strlen (text), 0644, err);
}

void
nrm_plugin_cdi_remove (struct nrm_plugin *p, const char *uid)
{
  if (p->cfg.local)
    return;
  cleanup_free char *path = cdi_path (p, uid);
  if (unlink (path) < 0 && errno != ENOENT)
    LOG (p, NRM_LOG_WARNING, "cannot remove CDI spec %s: %s", path, strerror (errno));
}

void
nrm_plugin_cdi_remove_orphans (struct nrm_plugin *p)
{
  DIR *d = opendir (p->cdi_dir);
  struct dirent *de;
  size_t plen = strlen (p->driver);
  if (d == NULL)
    return;
  while ((de = readdir (d)) != NULL)
    {
      size_t n = strlen (de->d_name);
      if (n <= plen + 6 || strncmp (de->d_name, p->driver, plen) != 0 || de->d_name[plen] != '-'
          || strcmp (de->d_name + n - 5, ".json") != 0)
        continue;
      cleanup_free char *uid = xstrndup (de->d_name + plen + 1, n - plen - 6);
      if (json_object_get (json_object_get (p->cp, "claims"), uid) == NULL)
        {
          LOG (p, NRM_LOG_INFO, "removing CDI spec of unknown claim %s", uid);
          nrm_plugin_cdi_remove (p, uid);
        }
    }
  closedir (d);
}
