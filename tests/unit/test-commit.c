/* SPDX-License-Identifier: Apache-2.0 */
/* cgroup v2 commit on a fake cgroupfs/procfs tree behind one root prefix:
 * container paths of both cgroup drivers and runtimes, the OCI hook, the
 * all-or-nothing apply, the shared-pool reconciler. */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpuset/kubepods.h"
#include "cpuset/watch.h"
#include "fakefs.h"
#include "nrm/base/cgroupfs.h"
#include "nrm/base/cleanup.h"
#include "nrm/commit.h"

static char root[128], state_dir[256];

/* A container cgroup with cpuset files. */
static void
container (const char *cg, const char *cpus)
{
  char rel[1024];
  snprintf (rel, sizeof (rel), "sys/fs/cgroup/%s/cpuset.cpus", cg);
  fake_put (root, rel, cpus);
  snprintf (rel, sizeof (rel), "sys/fs/cgroup/%s/cpuset.mems", cg);
  fake_put (root, rel, "");
  snprintf (rel, sizeof (rel), "sys/fs/cgroup/%s/cgroup.procs", cg);
  fake_put (root, rel, "");
}

static int
setup (void **state)
{
  (void) state;
  snprintf (root, sizeof (root), "/tmp/nrm-commit-XXXXXX");
  assert_non_null (mkdtemp (root));
  snprintf (state_dir, sizeof (state_dir), "%s/state", root);
  fake_put (root, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory hugetlb");
  return 0;
}

static int
teardown (void **state)
{
  (void) state;
  char cmd[256];
  snprintf (cmd, sizeof (cmd), "rm -rf '%s'", root);
  return system (cmd) == 0 ? 0 : -1;
}

static void
test_paths (void **state)
{
  (void) state;
  struct
  {
    const char *path, *uid, *id, *qos;
  } good[] = {
    { "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_3c4d.slice/cri-containerd-abc123.scope",
      "1a2b-3c4d", "abc123", "burstable" },
    { "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod99.slice/crio-ff00.scope", "99", "ff00",
      "besteffort" },
    { "kubepods.slice/kubepods-pod0001_0002.slice/cri-containerd-beef.scope", "0001-0002", "beef", "guaranteed" },
    { "/kubepods/burstable/pod1a2b-3c4d/abc123", "1a2b-3c4d", "abc123", "burstable" },
    { "kubepods/podaa-bb/deadbeef", "aa-bb", "deadbeef", "guaranteed" },
    { "kubepods/besteffort/pod7/crio-77", "7", "77", "besteffort" },
  };
  static const char *const bad[] = {
    "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice", /* a pod, not a container */
    "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/crio-conmon-77.scope",
    "system.slice/containerd.service",
    "kubepods/weird/pod1/x",
    "kubepods.slice/kubepods-pod1.slice/init.scope",
    "kubepods/pod1/../x",
  };
  for (size_t i = 0; i < sizeof (good) / sizeof (good[0]); i++)
    {
      struct nrm_container_cgroup c;
      if (!nrm_kubepods_parse (good[i].path, &c))
        fail_msg ("not recognised: %s", good[i].path);
      assert_string_equal (c.pod_uid, good[i].uid);
      assert_string_equal (c.id, good[i].id);
      assert_string_equal (c.qos, good[i].qos);
    }
  for (size_t i = 0; i < sizeof (bad) / sizeof (bad[0]); i++)
    {
      struct nrm_container_cgroup c;
      if (nrm_kubepods_parse (bad[i], &c))
        fail_msg ("wrongly recognised: %s", bad[i]);
    }
  assert_false (nrm_cgroup_path_valid ("a/../b"));
  assert_false (nrm_cgroup_path_valid ("a//b"));
  assert_false (nrm_cgroup_path_valid ("./a"));
  assert_true (nrm_cgroup_path_valid ("/kubepods/pod1/x"));
}

static void
bundle (const char *id, const char *env)
{
  char rel[512], text[2048];
  snprintf (rel, sizeof (rel), "bundles/%s/config.json", id);
  snprintf (text, sizeof (text), "{\"ociVersion\":\"1.0.2\",\"process\":{\"env\":[\"PATH=/bin\"%s]}}", env);
  fake_put (root, rel, text);
}

static int
hook (const char *id, int pid, char **summary, nrm_error_t *err)
{
  char st[1024];
  snprintf (st, sizeof (st),
            "{\"ociVersion\":\"1.0.2\",\"id\":\"%s\",\"status\":\"creating\",\"pid\":%d,"
            "\"bundle\":\"%s/bundles/%s\"}",
            id, pid, root, id);
  return nrm_hook_run (fake_root (root), st, strlen (st), state_dir, summary, err);
}

static void
test_hook (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  cleanup_free char *summary = NULL;
  const char *cg = "kubepods.slice/kubepods-pod11_22.slice/cri-containerd-c1.scope";
  container (cg, "0-7");
  fake_put (root, "proc/4242/cgroup", "0::/kubepods.slice/kubepods-pod11_22.slice/cri-containerd-c1.scope\n");
  bundle ("c1", ",\"NRM_CPUS=2-3\",\"NRM_CPU_NODES=0\"");
  if (hook ("c1", 4242, &summary, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  cleanup_free char *cpus
      = fake_get (root, "sys/fs/cgroup/kubepods.slice/kubepods-pod11_22.slice/cri-containerd-c1.scope/cpuset.cpus");
  cleanup_free char *mems
      = fake_get (root, "sys/fs/cgroup/kubepods.slice/kubepods-pod11_22.slice/cri-containerd-c1.scope/cpuset.mems");
  assert_string_equal (cpus, "2-3");
  assert_string_equal (mems, "0");
  cleanup_free char *rec = fake_get (root, "state/containers/c1.json");
  assert_non_null (rec);
  assert_non_null (strstr (rec, "\"cpus\":\"2-3\""));

  /* A memory claim's NRM_MEMS wins over the CPUs' nodes. */
  const char *cg2 = "kubepods/burstable/pod33/c2";
  container (cg2, "");
  fake_put (root, "proc/4343/cgroup", "0::/kubepods/burstable/pod33/c2\n");
  bundle ("c2", ",\"NRM_CPUS=4,6\",\"NRM_CPU_NODES=0\",\"NRM_MEMS=1\"");
  assert_int_equal (hook ("c2", 4343, NULL, &err), 0);
  cleanup_free char *mems2 = fake_get (root, "sys/fs/cgroup/kubepods/burstable/pod33/c2/cpuset.mems");
  assert_string_equal (mems2, "1");

  /* Memory limits and huge pages. */
  const char *cg4 = "kubepods/burstable/pod44/c4";
  container (cg4, "");
  fake_put (root, "sys/fs/cgroup/kubepods/burstable/pod44/c4/memory.max", "max");
  fake_put (root, "sys/fs/cgroup/kubepods/burstable/pod44/c4/memory.min", "0");
  fake_put (root, "sys/fs/cgroup/kubepods/burstable/pod44/c4/hugetlb.2MB.max", "max");
  fake_put (root, "sys/fs/cgroup/kubepods/burstable/pod44/c4/hugetlb.2MB.rsvd.max", "max");
  fake_put (root, "proc/4545/cgroup", "0::/kubepods/burstable/pod44/c4\n");
  bundle ("c4", ",\"NRM_MEMS=0\",\"NRM_MEMORY_MAX=1073741824\",\"NRM_MEMORY_MIN=1073741824\","
                "\"NRM_HUGETLB_2MB=8388608\",\"NRM_HUGETLB_2MB_0000_1111=8388608\"");
  if (hook ("c4", 4545, NULL, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  const char *want[][2] = { { "memory.max", "1073741824" },
                            { "memory.min", "1073741824" },
                            { "hugetlb.2MB.max", "8388608" },
                            { "hugetlb.2MB.rsvd.max", "8388608" },
                            { "cpuset.mems", "0" } };
  for (size_t i = 0; i < sizeof (want) / sizeof (want[0]); i++)
    {
      char rel[256];
      snprintf (rel, sizeof (rel), "sys/fs/cgroup/kubepods/burstable/pod44/c4/%s", want[i][0]);
      cleanup_free char *v = fake_get (root, rel);
      assert_string_equal (v, want[i][1]);
    }
  bundle ("c4", ",\"NRM_HUGETLB_2MB/../x=8\"");
  assert_int_equal (hook ("c4", 4545, NULL, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "malformed"));
  nrm_error_release (&err);
  bundle ("c4", ",\"NRM_MEMORY_MAX=lots\"");
  assert_int_equal (hook ("c4", 4545, NULL, &err), -1);
  nrm_error_release (&err);

  /* No nrm variables: nothing is touched. */
  static const char *const c3_files[][2]
      = { { "cpuset.cpus", "0-7\n" }, { "cpuset.mems", "0-1\n" }, { "memory.max", "max\n" }, { "memory.min", "0\n" } };
  char c3_rel[256];
  for (size_t i = 0; i < sizeof (c3_files) / sizeof (c3_files[0]); i++)
    {
      snprintf (c3_rel, sizeof (c3_rel), "sys/fs/cgroup/kubepods/burstable/pod33/c3/%s", c3_files[i][0]);
      fake_put (root, c3_rel, c3_files[i][1]);
    }
  bundle ("c3", "");
  fake_put (root, "proc/4444/cgroup", "0::/kubepods/burstable/pod33/c3\n");
  assert_int_equal (hook ("c3", 4444, NULL, &err), 0);
  /* No record for the reconciler, and every cgroup file as it was. */
  cleanup_free char *rec3 = fake_get (root, "state/containers/c3.json");
  assert_null (rec3);
  for (size_t i = 0; i < sizeof (c3_files) / sizeof (c3_files[0]); i++)
    {
      char path[1024], buf[256];
      snprintf (path, sizeof (path), "%s/sys/fs/cgroup/kubepods/burstable/pod33/c3/%s", root, c3_files[i][0]);
      FILE *f = fopen (path, "r");
      assert_non_null (f);
      size_t n = fread (buf, 1, sizeof (buf), f);
      fclose (f);
      assert_int_equal (n, strlen (c3_files[i][1]));
      assert_memory_equal (buf, c3_files[i][1], n);
    }
}

static void
test_hook_errors (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  /* cpuset.mems refuses the write (here: it is a directory): cpuset.cpus is
   * put back as it was. */
  const char *cg = "kubepods/pod55/c5";
  container (cg, "0-7");
  char path[512];
  snprintf (path, sizeof (path), "%s/sys/fs/cgroup/%s/cpuset.mems", root, cg);
  unlink (path);
  mkdir (path, 0755);
  fake_put (root, "proc/5555/cgroup", "0::/kubepods/pod55/c5\n");
  bundle ("c5", ",\"NRM_CPUS=1\",\"NRM_CPU_NODES=0\"");
  assert_int_equal (hook ("c5", 5555, NULL, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "cpuset.mems"));
  assert_non_null (strstr (nrm_error_msg (err), "c5"));
  nrm_error_release (&err);
  cleanup_free char *cpus = fake_get (root, "sys/fs/cgroup/kubepods/pod55/c5/cpuset.cpus");
  assert_string_equal (cpus, "0-7");
  cleanup_free char *rec = fake_get (root, "state/containers/c5.json");
  assert_null (rec);

  /* A vanished cgroup. */
  fake_put (root, "proc/6666/cgroup", "0::/kubepods/pod66/gone\n");
  bundle ("c6", ",\"NRM_CPUS=1\"");
  assert_int_equal (hook ("c6", 6666, NULL, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "vanished"));
  nrm_error_release (&err);

  /* cgroup v2 without the cpuset controller (a cgroup v1 hybrid host): said
   * so, rather than "vanished". */
  fake_put (root, "sys/fs/cgroup/cgroup.controllers", "cpu io memory pids");
  fake_put (root, "sys/fs/cgroup/kubepods/pod69/c69/cgroup.procs", "");
  fake_put (root, "proc/6969/cgroup", "0::/kubepods/pod69/c69\n");
  bundle ("c69", ",\"NRM_CPUS=1\"");
  assert_int_equal (hook ("c69", 6969, NULL, &err), -1);
  fake_put (root, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory hugetlb");
  assert_non_null (strstr (nrm_error_msg (err), "has no cpuset controller"));
  assert_null (strstr (nrm_error_msg (err), "vanished"));
  nrm_error_release (&err);
  /* No cgroup v2 at all: no cgroup.controllers. */
  char ctl[512];
  snprintf (ctl, sizeof (ctl), "%s/sys/fs/cgroup/cgroup.controllers", root);
  unlink (ctl);
  assert_int_equal (hook ("c69", 6969, NULL, &err), -1);
  fake_put (root, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory hugetlb");
  assert_non_null (strstr (nrm_error_msg (err), "is not cgroup v2"));
  nrm_error_release (&err);

  /* A cgroup path that tries to leave the root. */
  fake_put (root, "proc/7777/cgroup", "0::/kubepods/../../etc\n");
  bundle ("c7", ",\"NRM_CPUS=1\"");
  assert_int_equal (hook ("c7", 7777, NULL, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "invalid cgroup"));
  nrm_error_release (&err);

  /* Bad input on stdin and in the bundle. */
  static const char *const states[]
      = { "not json", "{\"id\":\"../x\",\"pid\":1,\"bundle\":\"/b\"}",
          "{\"id\":\"ok\",\"pid\":1,\"bundle\":\"relative\"}", "{\"id\":\"ok\",\"pid\":0,\"bundle\":\"/b\"}" };
  for (size_t i = 0; i < sizeof (states) / sizeof (states[0]); i++)
    {
      assert_int_equal (nrm_hook_run (fake_root (root), states[i], strlen (states[i]), state_dir, NULL, &err), -1);
      nrm_error_release (&err);
    }
  bundle ("c8", ",\"NRM_CPUS=1-\"");
  fake_put (root, "proc/8888/cgroup", "0::/kubepods/pod55/c5\n");
  assert_int_equal (hook ("c8", 8888, NULL, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "NRM_CPUS"));
  nrm_error_release (&err);
}

static void
test_reconcile (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  struct nrm_cgroupfs *fs = NULL;
  struct nrm_reconcile_stats st;
  assert_int_equal (nrm_cgroupfs_open (fake_root (root), &fs, &err), 0);
  /* c1 and c2 are exclusive (hooked above), s1 and s2 are shared. */
  container ("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod77.slice/crio-s1.scope", "0-7");
  container ("kubepods/besteffort/pod88/s2", "");
  assert_int_equal (nrm_reconcile (fs, state_dir, "0-1,5,7", NULL, NULL, NULL, 0, &st, NULL, &err), 0);
  cleanup_free char *s1 = fake_get (
      root, "sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod77.slice/crio-s1.scope/"
            "cpuset.cpus");
  cleanup_free char *s2 = fake_get (root, "sys/fs/cgroup/kubepods/besteffort/pod88/s2/cpuset.cpus");
  assert_string_equal (s1, "0-1,5,7");
  assert_string_equal (s2, "0-1,5,7");
  /* A container with only a memory claim runs on the shared pool too. */
  cleanup_free char *c4 = fake_get (root, "sys/fs/cgroup/kubepods/burstable/pod44/c4/cpuset.cpus");
  assert_string_equal (c4, "0-1,5,7");
  assert_true (st.exclusive >= 2);
  assert_true (st.updated >= 2);

  /* Someone else moves an exclusive container: repaired. A second pass
   * with nothing to do writes nothing. */
  fake_put (root, "sys/fs/cgroup/kubepods.slice/kubepods-pod11_22.slice/cri-containerd-c1.scope/cpuset.cpus", "0-7");
  assert_int_equal (nrm_reconcile (fs, state_dir, "0-1,5,7", NULL, NULL, NULL, 0, &st, NULL, &err), 0);
  cleanup_free char *c1
      = fake_get (root, "sys/fs/cgroup/kubepods.slice/kubepods-pod11_22.slice/cri-containerd-c1.scope/cpuset.cpus");
  assert_string_equal (c1, "2-3");
  assert_int_equal (st.updated, 1);
  assert_int_equal (nrm_reconcile (fs, state_dir, "0-1,5,7", NULL, NULL, NULL, 0, &st, NULL, &err), 0);
  assert_int_equal (st.updated, 0);

  /* The pass leaves the shared pool for the hook. A mixed claim
   * (CPUConfig sharedCPUs) starts on its CPUs and the shared pool, and
   * follows the pool when it changes; NRM_CPUS stays the exclusive part. */
  cleanup_free char *pool = fake_get (root, "state/shared-cpus");
  assert_string_equal (pool, "0-1,5,7");
  const char *cg6 = "kubepods/pod66/c6";
  container (cg6, "");
  fake_put (root, "proc/4747/cgroup", "0::/kubepods/pod66/c6\n");
  bundle ("c6", ",\"NRM_CPUS=2-3\",\"NRM_CPU_NODES=0\",\"NRM_SHARED_CPUS=true\"");
  if (hook ("c6", 4747, NULL, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  cleanup_free char *c6 = fake_get (root, "sys/fs/cgroup/kubepods/pod66/c6/cpuset.cpus");
  assert_string_equal (c6, "0-3,5,7");
  assert_int_equal (nrm_reconcile (fs, state_dir, "0-1,5", NULL, NULL, NULL, 0, &st, NULL, &err), 0);
  cleanup_free char *c6b = fake_get (root, "sys/fs/cgroup/kubepods/pod66/c6/cpuset.cpus");
  cleanup_free char *c1b
      = fake_get (root, "sys/fs/cgroup/kubepods.slice/kubepods-pod11_22.slice/cri-containerd-c1.scope/cpuset.cpus");
  assert_string_equal (c6b, "0-3,5");
  assert_string_equal (c1b, "2-3");
  cleanup_free char *pool2 = fake_get (root, "state/shared-cpus");
  assert_string_equal (pool2, "0-1,5");

  /* The container goes away: its record is forgotten. */
  char cmd[512];
  snprintf (cmd, sizeof (cmd), "rm -rf '%s/sys/fs/cgroup/kubepods/burstable/pod33/c2'", root);
  assert_int_equal (system (cmd), 0);
  assert_int_equal (nrm_reconcile (fs, state_dir, "0-1,5,7", NULL, NULL, NULL, 0, &st, NULL, &err), 0);
  assert_int_equal (st.forgotten, 1);
  cleanup_free char *rec = fake_get (root, "state/containers/c2.json");
  assert_null (rec);
  /* A record a power cut emptied (records are not synced) is removed. */
  fake_put (root, "state/containers/c9.json", "");
  assert_int_equal (nrm_reconcile (fs, state_dir, "0-1,5,7", NULL, NULL, NULL, 0, &st, NULL, &err), 0);
  assert_int_equal (st.forgotten, 1);
  cleanup_free char *emptied = fake_get (root, "state/containers/c9.json");
  assert_null (emptied);

  /* An empty shared pool is refused outright. */
  assert_int_equal (nrm_reconcile (fs, state_dir, "", NULL, NULL, NULL, 0, &st, NULL, &err), -1);
  nrm_error_release (&err);
  nrm_cgroupfs_close (fs);
}

/* Amounts the machine cannot have are refused by the hook, naming the
 * file and the limit, and nothing is written or recorded. */
static void
test_hook_memory_bounds (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  const char *cg = "kubepods/burstable/podb1/b1";
  container (cg, "");
  fake_put (root, "sys/fs/cgroup/kubepods/burstable/podb1/b1/memory.max", "max");
  fake_put (root, "sys/fs/cgroup/kubepods/burstable/podb1/b1/hugetlb.2MB.max", "max");
  fake_put (root, "sys/fs/cgroup/kubepods/burstable/podb1/b1/hugetlb.2MB.rsvd.max", "max");
  fake_put (root, "proc/6161/cgroup", "0::/kubepods/burstable/podb1/b1\n");
  fake_put (root, "sys/devices/system/node/node0/meminfo",
            "Node 0 MemTotal:        1048576 kB\nNode 0 MemFree: 524288 kB\n");
  fake_put (root, "sys/devices/system/node/node1/meminfo", "Node 1 MemTotal:        1048576 kB\n");
  fake_put (root, "sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages", "4\n");
  fake_put (root, "sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages", "2\n");
  struct
  {
    const char *env, *want; /* want: a piece of the error, or NULL */
  } cases[] = {
    { ",\"NRM_MEMS=0\",\"NRM_MEMORY_MAX=1\"", "memory.max of 1 bytes is below the least" },
    { ",\"NRM_MEMS=0\",\"NRM_MEMORY_MIN=1000\"", "memory.min of 1000 bytes is below the least" },
    { ",\"NRM_MEMS=0\",\"NRM_MEMORY_MAX=2147483648\"", "more than the 1073741824 bytes of memory nodes 0" },
    { ",\"NRM_MEMORY_MAX=3221225472\"", "more than the 2147483648 bytes of memory nodes (all)" },
    { ",\"NRM_MEMS=0\",\"NRM_HUGETLB_2MB=3145728\"", "not a whole number of 2MB pages" },
    { ",\"NRM_MEMS=0\",\"NRM_HUGETLB_2MB=10485760\"", "5 pages is more than the 4 reserved on memory nodes 0" },
    { ",\"NRM_MEMS=0\",\"NRM_HUGETLB_3XB=2097152\"", "malformed" },
    { ",\"NRM_MEMS=0-1\",\"NRM_MEMORY_MAX=2147483648\",\"NRM_HUGETLB_2MB=12582912\"", NULL },
  };
  for (size_t i = 0; i < sizeof (cases) / sizeof (cases[0]); i++)
    {
      bundle ("b1", cases[i].env);
      int r = hook ("b1", 6161, NULL, &err);
      cleanup_free char *mems = fake_get (root, "sys/fs/cgroup/kubepods/burstable/podb1/b1/cpuset.mems");
      cleanup_free char *max = fake_get (root, "sys/fs/cgroup/kubepods/burstable/podb1/b1/memory.max");
      cleanup_free char *rec = fake_get (root, "state/containers/b1.json");
      if (cases[i].want == NULL)
        {
          if (r < 0)
            fail_msg ("case %zu: %s", i, nrm_error_msg (err));
          assert_string_equal (mems, "0-1");
          assert_string_equal (max, "2147483648");
          continue;
        }
      assert_int_equal (r, -1);
      if (strstr (nrm_error_msg (err), cases[i].want) == NULL)
        fail_msg ("case %zu: `%s` lacks `%s`", i, nrm_error_msg (err), cases[i].want);
      nrm_error_release (&err);
      assert_string_equal (mems, "");
      assert_string_equal (max, "max");
      assert_null (rec);
    }
}

/* The shared pool's memory nodes: containers without their own memory
 * nodes follow them, those with a claim keep (and get back) theirs, and
 * an empty cpuset.mems that already means the pool is left alone. */
static void
test_reconcile_mems (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  struct nrm_cgroupfs *fs = NULL;
  struct nrm_reconcile_stats st;
  assert_int_equal (nrm_cgroupfs_open (fake_root (root), &fs, &err), 0);
  container ("kubepods/besteffort/podm1/m1", "");
  container ("kubepods/podm2/m2", "");
  container ("kubepods/podm3/m3", "");
  fake_put (root, "proc/5151/cgroup", "0::/kubepods/podm2/m2\n");
  bundle ("m2", ",\"NRM_MEMS=1\"");
  fake_put (root, "proc/5252/cgroup", "0::/kubepods/podm3/m3\n");
  bundle ("m3", ",\"NRM_CPUS=2-3\",\"NRM_CPU_NODES=0\"");
  if (hook ("m2", 5151, NULL, &err) < 0 || hook ("m3", 5252, NULL, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  /* Nothing held in full: the shared container's empty file is the pool. */
  assert_int_equal (nrm_reconcile (fs, state_dir, "0-1,5,7", "0-1", "0-1", NULL, 0, &st, NULL, &err), 0);
  cleanup_free char *m1 = fake_get (root, "sys/fs/cgroup/kubepods/besteffort/podm1/m1/cpuset.mems");
  assert_string_equal (m1, "");
  /* Node 1 claimed in full: the shared container moves off it; the
   * memory claim's container and the CPU claim's keep their nodes. */
  assert_int_equal (nrm_reconcile (fs, state_dir, "0-1,5,7", "0", "0-1", NULL, 0, &st, NULL, &err), 0);
  cleanup_free char *m1b = fake_get (root, "sys/fs/cgroup/kubepods/besteffort/podm1/m1/cpuset.mems");
  cleanup_free char *m2 = fake_get (root, "sys/fs/cgroup/kubepods/podm2/m2/cpuset.mems");
  cleanup_free char *m3 = fake_get (root, "sys/fs/cgroup/kubepods/podm3/m3/cpuset.mems");
  assert_string_equal (m1b, "0");
  assert_string_equal (m2, "1");
  assert_string_equal (m3, "0");
  /* Someone widens the memory claim's container: repaired. */
  fake_put (root, "sys/fs/cgroup/kubepods/podm2/m2/cpuset.mems", "0-1");
  assert_int_equal (nrm_reconcile (fs, state_dir, "0-1,5,7", "0", "0-1", NULL, 0, &st, NULL, &err), 0);
  cleanup_free char *m2b = fake_get (root, "sys/fs/cgroup/kubepods/podm2/m2/cpuset.mems");
  assert_string_equal (m2b, "1");
  assert_int_equal (st.updated, 1);
  /* Node 1 free again: the shared container gets it back. */
  assert_int_equal (nrm_reconcile (fs, state_dir, "0-1,5,7", "0-1", "0-1", NULL, 0, &st, NULL, &err), 0);
  cleanup_free char *m1c = fake_get (root, "sys/fs/cgroup/kubepods/besteffort/podm1/m1/cpuset.mems");
  assert_string_equal (m1c, "0-1");
  /* Without memory nodes to manage, nothing of theirs is written. */
  fake_put (root, "sys/fs/cgroup/kubepods/besteffort/podm1/m1/cpuset.mems", "1");
  assert_int_equal (nrm_reconcile (fs, state_dir, "0-1,5,7", NULL, NULL, NULL, 0, &st, NULL, &err), 0);
  cleanup_free char *m1d = fake_get (root, "sys/fs/cgroup/kubepods/besteffort/podm1/m1/cpuset.mems");
  assert_string_equal (m1d, "1");
  nrm_cgroupfs_close (fs);
}

/* A new pod and container cgroup wake the reconciler through inotify. */
static void
test_watch (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  struct nrm_cgroupfs *fs = NULL;
  struct nrm_kubepods_watch *w = NULL;
  assert_int_equal (nrm_cgroupfs_open (fake_root (root), &fs, &err), 0);
  assert_int_equal (nrm_kubepods_watch_open (fs, &w, &err), 0);
  assert_int_equal (nrm_kubepods_watch_drain (w), 0);
  char path[512];
  snprintf (path, sizeof (path), "%s/sys/fs/cgroup/kubepods/besteffort/pod99", root);
  assert_int_equal (mkdir (path, 0755), 0);
  assert_true (nrm_kubepods_watch_drain (w) >= 1);
  /* The new pod directory is watched in turn: its container shows too. */
  snprintf (path, sizeof (path), "%s/sys/fs/cgroup/kubepods/besteffort/pod99/c9", root);
  assert_int_equal (mkdir (path, 0755), 0);
  assert_true (nrm_kubepods_watch_drain (w) >= 1);
  /* Elsewhere: no wake-up. */
  snprintf (path, sizeof (path), "%s/sys/fs/cgroup/system.slice", root);
  assert_int_equal (mkdir (path, 0755), 0);
  assert_int_equal (nrm_kubepods_watch_drain (w), 0);
  nrm_kubepods_watch_close (w);
  nrm_cgroupfs_close (fs);
}

/* A cgroup is made and removed through the root handle; a path that
 * leaves the root is refused. */
static void
test_mkdir (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  struct nrm_cgroupfs *fs = fake_cgroupfs (root);
  assert_int_equal (nrm_cgroup_mkdir (fs, "nrm.slice", &err), 0);
  assert_int_equal (nrm_cgroup_mkdir (fs, "nrm.slice", &err), 0); /* there already */
  assert_int_equal (nrm_cgroup_mkdir (fs, "/nrm.slice/run-1", &err), 0);
  cleanup_free char *path = xasprintf ("%s/sys/fs/cgroup/nrm.slice/run-1", root);
  assert_int_equal (access (path, F_OK), 0);
  assert_int_equal (nrm_cgroup_rmdir (fs, "nrm.slice/run-1", &err), 0);
  assert_int_not_equal (access (path, F_OK), 0);
  assert_int_equal (nrm_cgroup_rmdir (fs, "nrm.slice/run-1", &err), -1);
  nrm_error_release (&err);
  assert_int_equal (nrm_cgroup_mkdir (fs, "nrm.slice/../x", &err), -1);
  nrm_error_release (&err);
  assert_int_equal (nrm_cgroup_mkdir (fs, "no-such/run-2", &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "no-such/run-2"));
  nrm_error_release (&err);
  nrm_cgroupfs_close (fs);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_paths),
    cmocka_unit_test (test_hook),
    cmocka_unit_test (test_hook_errors),
    cmocka_unit_test (test_reconcile),
    cmocka_unit_test (test_hook_memory_bounds),
    cmocka_unit_test (test_reconcile_mems),
    cmocka_unit_test (test_watch),
    cmocka_unit_test (test_mkdir),
  };
  return cmocka_run_group_tests_name ("commit", tests, setup, teardown);
}
