/* SPDX-License-Identifier: Apache-2.0 */
/* nrm run's records under <state-dir>/runs, one per run (its pid, start
 * time, PID namespace and boot; the process it is attached to), and the
 * release of the claims of runs whose process is gone. */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "driver/kubelet/plugin.h"
#include "nrm/attach.h"
#include "nrm/base/cgroupfs.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"
#include "nrm/logging.h"
#include "nrm/run-internal.h"

/* A process's start time (clock ticks since boot), to tell a pid reused. */
unsigned long long
nrm_run_start_time (pid_t pid)
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

char *
nrm_run_record_dir (const char *state_dir)
{
  return xasprintf ("%s/runs", state_dir);
}

static char *
record_path (const char *state_dir, const char *uid)
{
  return xasprintf ("%s/runs/%s.json", state_dir, uid);
}

void
nrm_run_record_remove (const char *state_dir, const char *uid)
{
  cleanup_free char *path = record_path (state_dir, uid);
  unlink (path);
}

/* The run's own record, written before its claims exist: only nrm writes
 * in the state directory, so no claim can pose as a run. A run attached to
 * a process (--pid) names it too: the run is over when either is gone. */
int
nrm_run_record_write (const char *state_dir, const char *uid, const char *name, pid_t pid, unsigned long long st,
                      const struct nrm_attach *att, nrm_error_t *err)
{
  cleanup_free char *dir = nrm_run_record_dir (state_dir), *path = record_path (state_dir, uid);
  cleanup_free char *ns = pid_namespace (), *boot = boot_id (), *text = NULL;
  cleanup_json json_t *rec = json_pack ("{s:s, s:s, s:i, s:I, s:s, s:s}", "uid", uid, "name", name, "pid", (int) pid,
                                        "startTime", (json_int_t) st, "pidNamespace", ns, "bootId", boot);
  if (att)
    {
      json_object_set_new (rec, "attachedPid", json_integer ((json_int_t) att->pid));
      json_object_set_new (rec, "attachedStartTime", json_integer ((json_int_t) att->start));
    }
  text = json_dumps (rec, JSON_COMPACT);
  if (nrm_mkdir_p (dir, 0700, err) < 0 || nrm_write_atomic (path, text, strlen (text), 0600, err) < 0)
    return nrm_error_wrap (err, "run record");
  return 0;
}

/* Whether the run of this record is gone: 1 gone, 2 the process it was
 * attached to is gone, 0 alive, -1 not known here (another PID namespace,
 * or an unreadable record). */
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
  if (nrm_run_start_time ((pid_t) p) != (unsigned long long) json_integer_value (st))
    return 1;
  json_t *apid = json_object_get (rec, "attachedPid"), *ast = json_object_get (rec, "attachedStartTime");
  if (apid == NULL)
    return 0;
  json_int_t ap = json_integer_value (apid);
  if (!json_is_integer (apid) || !json_is_integer (ast) || ap <= 0 || ap > 4194304)
    return -1;
  return nrm_run_start_time ((pid_t) ap) == (unsigned long long) json_integer_value (ast) ? 0 : 2;
}

void
nrm_run_release_stale (const struct nrm_fsroot *root, const char *state_dir, struct nrm_plugin *const *pl, size_t n)
{
  cleanup_free char *dir = nrm_run_record_dir (state_dir), *ns = pid_namespace (), *boot = boot_id ();
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
      int gone = record_gone (rec, uid, ns, boot);
      if (gone < 1)
        continue;
      const char *name = json_string_value (json_object_get (rec, "name"));
      nrm_log (NULL, NRM_LOG_INFO, "releasing the claim of run %s (%s is gone)", name ? name : uid,
               gone == 1 ? "its nrm process" : "the process it was attached to");
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
        {
          struct nrm_cgroupfs *fs = NULL;
          if (gone == 1 && nrm_cgroup_v2_controller (root, "cpuset") == NRM_CGROUP_V2_WITH
              && nrm_cgroupfs_open (root, &fs, &err) == 0)
            {
              cleanup_free char *cgname = xasprintf ("run-%d", (int) json_integer_value (json_object_get (rec, "pid")));
              nrm_run_cgroup_remove (fs, cgname, &err);
              nrm_cgroupfs_close (fs);
            }
          nrm_error_release (&err);
          unlink (path);
        }
    }
  closedir (d);
}
