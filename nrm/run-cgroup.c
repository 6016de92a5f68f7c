/* SPDX-License-Identifier: Apache-2.0 */
/* nrm run's transient cgroup nrm.slice/run-<pid> and its cpuset
 * partition: made for a run, judged for a dry run, removed when the run
 * ends or is found stale. */
#include "config.h"

#include <string.h>

#include "cpuset/partition.h"
#include "nrm/base/cgroupfs.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/xalloc.h"
#include "nrm/logging.h"
#include "nrm/run-internal.h"

/* A run's transient cgroup nrm.slice/<cgname> goes: no longer a partition
 * (a process of a killed run may still be in it, and its CPUs would stay
 * exclusive to it), removed where it is empty, and the exclusive CPUs it
 * left in nrm.slice given back. */
int
nrm_run_cgroup_remove (struct nrm_cgroupfs *fs, const char *cgname, nrm_error_t *err)
{
  cleanup_free char *rel = xasprintf ("nrm.slice/%s", cgname), *part = NULL;
  nrm_error_t e = NULL;
  if (nrm_cgroup_read (fs, rel, "cpuset.cpus.partition", &part, &e) == 0 && strncmp (part, "member", 6) != 0
      && nrm_cgroup_write (fs, rel, "cpuset.cpus.partition", "member", &e) == 0)
    nrm_cgroup_write (fs, rel, "cpuset.cpus.exclusive", "\n", &e);
  nrm_error_release (&e);
  nrm_cgroup_rmdir (fs, rel, &e);
  nrm_error_release (&e);
  size_t trimmed = 0;
  return nrm_partition_trim (fs, "nrm.slice", &trimmed, err);
}

/* The transient cgroup <root>/nrm.slice/run-<pid>, with cpuset (and memory)
 * enabled on the way down. */
int
nrm_run_cgroup_make (struct nrm_cgroupfs *fs, const char *name, nrm_error_t *err)
{
  cleanup_free char *child = xasprintf ("nrm.slice/%s", name);
  if (nrm_cgroup_write (fs, "", "cgroup.subtree_control", "+cpuset", err) < 0
      || nrm_cgroup_mkdir (fs, "nrm.slice", err) < 0
      || nrm_cgroup_write (fs, "nrm.slice", "cgroup.subtree_control", "+cpuset", err) < 0)
    return -1;
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
  return nrm_cgroup_mkdir (fs, child, err);
}

/* A run's partition: --partition's, else the node's cpu.partition. */
enum nrm_partition_mode
nrm_run_partition_mode (const struct nrm_config *c, const struct nrm_run_request *rq)
{
  return (enum nrm_partition_mode) (rq->partition >= 0 ? rq->partition : (int) c->cpu.partition);
}

/* The run's cgroup made a cpuset partition m: asked for (--partition), one
 * that cannot be had fails the run before the command starts; from the
 * node's cpu.partition, the run goes on without one and says why. */
int
nrm_run_partition_make (struct nrm_cgroupfs *fs, const char *rel, const char *name, const char *cpus,
                        enum nrm_partition_mode m, bool asked, nrm_error_t *err)
{
  if (m == NRM_PARTITION_OFF)
    return 0;
  nrm_error_t perr = NULL;
  cleanup_free char *eff = NULL;
  if (nrm_partition_make (fs, rel, cpus, m, &eff, &perr) < 0)
    {
      if (asked)
        {
          *err = perr;
          return nrm_error_wrap (err, "--partition %s", nrm_partition_mode_name (m));
        }
      nrm_log (NULL, NRM_LOG_INFO, "run %s: no cpuset partition (cpu.partition %s): %s", name,
               nrm_partition_mode_name (m), nrm_error_msg (perr));
      nrm_error_release (&perr);
      return 0;
    }
  nrm_log (NULL, NRM_LOG_INFO, "run %s: CPUs %s are a cpuset partition (%s): no task outside the run runs there%s",
           name, eff, nrm_partition_mode_name (m),
           m == NRM_PARTITION_ISOLATED ? ", and the scheduler balances no load onto them" : "");
  return 0;
}

/* What a partition of the run would be: asked for or the node's, and
 * whether this kernel can make one (not judged for a recorded machine). */
json_t *
nrm_run_partition_view (const struct nrm_config *c, const struct nrm_fsroot *root, enum nrm_partition_mode m,
                        bool asked)
{
  json_t *v
      = json_pack ("{s:s, s:s}", "mode", nrm_partition_mode_name (m), "from", asked ? "--partition" : "cpu.partition");
  if (c->topology)
    {
      json_object_set_new (v, "why", json_string ("not judged: a recorded machine"));
      return v;
    }
  cleanup_free char *reason = NULL;
  bool can = nrm_cgroup_v2_controller (root, "cpuset") == NRM_CGROUP_V2_WITH && nrm_partition_available (root, &reason);
  if (!can && reason == NULL)
    reason = xstrdup ("no cgroup v2 cpuset here (cgroup v1?)");
  json_object_set_new (v, "available", json_boolean (can));
  if (reason)
    json_object_set_new (v, "why", json_string (reason));
  return v;
}
