/* SPDX-License-Identifier: Apache-2.0 */
/* cpuset partitions on fake cgroupfs trees: what the kernel offers (a
 * 6.7+ tree with cpuset.cpus.exclusive, a 6.1 tree without, one without
 * partitions), the remote partition written down the ancestors and put
 * back when the kernel refuses, and the hook's fallback or refusal. */
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

#include "cpuset/partition.h"
#include "fakefs.h"
#include "nrm/base/cgroupfs.h"
#include "nrm/commit.h"

static char root[128], state_dir[256];

#define KP "kubepods.slice"
#define QOS KP "/kubepods-burstable.slice"
#define POD QOS "/kubepods-burstable-pod11_22.slice"
#define CT POD "/cri-containerd-c1.scope"

#define ASSERT_FILE(cg, file, want)                                                                                    \
  do                                                                                                                   \
    {                                                                                                                  \
      cleanup_free char *v_ = fake_cg_get (root, cg, file);                                                            \
      assert_string_equal (v_, want);                                                                                  \
    }                                                                                                                  \
  while (0)

/* The kubepods chain of a burstable pod's container; exclusive: the
 * cpuset.cpus.exclusive files of a 6.7+ kernel. */
static void
tree (bool partition, bool exclusive, const char *effective)
{
  static const char *const cgs[] = { KP, QOS, POD, CT };
  for (size_t i = 0; i < 4; i++)
    {
      fake_cg_put (root, cgs[i], "cpuset.cpus", i == 3 ? "2-3" : "");
      fake_cg_put (root, cgs[i], "cpuset.mems", "");
      fake_cg_put (root, cgs[i], "cgroup.procs", "");
      fake_cg_put (root, cgs[i], "cpuset.cpus.effective", i == 3 ? effective : "0-7");
      if (partition)
        fake_cg_put (root, cgs[i], "cpuset.cpus.partition", "member");
      if (exclusive)
        fake_cg_put (root, cgs[i], "cpuset.cpus.exclusive", i == 0 ? "6" : "");
    }
  fake_cg_put (root, "", "cgroup.controllers", "cpuset cpu memory hugetlb");
  fake_put (root, "proc/4242/cgroup", "0::/" CT "\n");
}

static void
wipe (void)
{
  cleanup_free char *cmd = xasprintf ("rm -rf '%s/sys'", root);
  assert_int_equal (system (cmd), 0);
}

static int
setup (void **state)
{
  (void) state;
  snprintf (root, sizeof (root), "/tmp/nrm-partition-XXXXXX");
  assert_non_null (mkdtemp (root));
  snprintf (state_dir, sizeof (state_dir), "%s/state", root);
  return 0;
}

static int
teardown (void **state)
{
  (void) state;
  return fake_remove (root);
}

static struct nrm_cgroupfs *
open_fs (void)
{
  return fake_cgroupfs (root);
}

static void
test_modes (void **state)
{
  (void) state;
  enum nrm_partition_mode m;
  nrm_error_t err = NULL;
  assert_int_equal (nrm_partition_mode_parse ("isolated", "cpu.partition", &m, &err), 0);
  assert_int_equal (m, NRM_PARTITION_ISOLATED);
  assert_int_equal (nrm_partition_mode_parse ("off", "cpu.partition", &m, &err), 0);
  assert_int_equal (m, NRM_PARTITION_OFF);
  assert_int_equal (nrm_partition_mode_parse ("member", "cpu.partition", &m, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "cpu.partition must be off, root or isolated, not `member`"));
  nrm_error_release (&err);
  assert_string_equal (nrm_partition_mode_name (NRM_PARTITION_ROOT), "root");
}

/* What the kernel reads back: a refusal shows only there. */
static void
test_check (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  assert_int_equal (nrm_partition_check ("c", NRM_PARTITION_ROOT, "2-3", "root", "2,3", &err), 0);
  assert_int_equal (nrm_partition_check ("c", NRM_PARTITION_ISOLATED, "2-3", "isolated", "2-3", &err), 0);
  assert_int_equal (nrm_partition_check ("c", NRM_PARTITION_ROOT, "2-3",
                                         "root invalid (Cpu list in cpuset.cpus not exclusive)", "2-3", &err),
                    -1);
  assert_non_null (strstr (nrm_error_msg (err), "reads `root invalid (Cpu list in cpuset.cpus not exclusive)`"));
  nrm_error_release (&err);
  assert_int_equal (nrm_partition_check ("c", NRM_PARTITION_ISOLATED, "2-3", "root", "2-3", &err), -1);
  nrm_error_release (&err);
  assert_int_equal (nrm_partition_check ("c", NRM_PARTITION_ROOT, "2-3", "root", "0-7", &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "cpuset.cpus.effective reads `0-7`, not the claim's CPUs 2-3"));
  nrm_error_release (&err);
}

static void
test_supported (void **state)
{
  (void) state;
  cleanup_free char *r1 = NULL, *r2 = NULL, *r3 = NULL;
  tree (true, true, "2-3");
  struct nrm_cgroupfs *fs = open_fs ();
  assert_true (nrm_partition_supported (fs, &r1));
  nrm_cgroupfs_close (fs);
  wipe ();
  tree (true, false, "2-3");
  fs = open_fs ();
  assert_false (nrm_partition_supported (fs, &r2));
  assert_non_null (strstr (r2, "only local partitions (no cpuset.cpus.exclusive, which Linux 6.7 added)"));
  nrm_cgroupfs_close (fs);
  wipe ();
  tree (false, false, "2-3");
  fs = open_fs ();
  assert_false (nrm_partition_supported (fs, &r3));
  assert_non_null (strstr (r3, "no cpuset partitions"));
  nrm_cgroupfs_close (fs);
}

/* 6.7+: the CPUs go down the ancestors' cpuset.cpus.exclusive (added to
 * what kubepods had), then the container becomes the partition. */
static void
test_make (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  cleanup_free char *eff = NULL;
  tree (true, true, "2-3");
  struct nrm_cgroupfs *fs = open_fs ();
  if (nrm_partition_make (fs, "/" CT, "2-3", NRM_PARTITION_ISOLATED, &eff, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_string_equal (eff, "2-3");
  ASSERT_FILE (KP, "cpuset.cpus.exclusive", "2-3,6");
  ASSERT_FILE (QOS, "cpuset.cpus.exclusive", "2-3");
  ASSERT_FILE (POD, "cpuset.cpus.exclusive", "2-3");
  ASSERT_FILE (CT, "cpuset.cpus.exclusive", "2-3");
  ASSERT_FILE (CT, "cpuset.cpus.partition", "isolated");
  ASSERT_FILE (POD, "cpuset.cpus.partition", "member");
  nrm_cgroupfs_close (fs);
}

static void
assert_untouched (void)
{
  ASSERT_FILE (KP, "cpuset.cpus.exclusive", "6");
  ASSERT_FILE (QOS, "cpuset.cpus.exclusive", "");
  ASSERT_FILE (POD, "cpuset.cpus.exclusive", "");
  ASSERT_FILE (CT, "cpuset.cpus.exclusive", "");
  ASSERT_FILE (CT, "cpuset.cpus.partition", "member");
}

/* The kernel took the writes but the partition has other CPUs than the
 * claim: everything is put back. */
static void
test_make_refused (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  tree (true, true, "0-7");
  struct nrm_cgroupfs *fs = open_fs ();
  assert_int_equal (nrm_partition_make (fs, CT, "2-3", NRM_PARTITION_ROOT, NULL, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "cpuset.cpus.effective reads `0-7`"));
  nrm_error_release (&err);
  assert_untouched ();
  nrm_cgroupfs_close (fs);
}

/* A file that is no CPU list: refused by name, the ancestors above put back. */
static void
test_make_garbage (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  tree (true, true, "2-3");
  fake_cg_put (root, POD, "cpuset.cpus.exclusive", "lots");
  struct nrm_cgroupfs *fs = open_fs ();
  assert_int_equal (nrm_partition_make (fs, CT, "2-3", NRM_PARTITION_ROOT, NULL, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "cpuset.cpus.exclusive reads `lots`, not a CPU list"));
  nrm_error_release (&err);
  ASSERT_FILE (KP, "cpuset.cpus.exclusive", "6");
  ASSERT_FILE (QOS, "cpuset.cpus.exclusive", "");
  nrm_cgroupfs_close (fs);
}

/* A write refused half way down (the pod's file cannot be written): the
 * ancestors above get their old values back. */
static void
test_make_write_fails (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  tree (true, true, "2-3");
  cleanup_free char *f = xasprintf ("%s/sys/fs/cgroup/%s/cpuset.cpus.exclusive", root, POD);
  assert_int_equal (unlink (f), 0);
  assert_int_equal (mkdir (f, 0755), 0);
  struct nrm_cgroupfs *fs = open_fs ();
  assert_int_equal (nrm_partition_make (fs, CT, "2-3", NRM_PARTITION_ROOT, NULL, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "kubepods-burstable-pod11_22.slice"));
  nrm_error_release (&err);
  ASSERT_FILE (KP, "cpuset.cpus.exclusive", "6");
  ASSERT_FILE (QOS, "cpuset.cpus.exclusive", "");
  ASSERT_FILE (CT, "cpuset.cpus.partition", "member");
  nrm_cgroupfs_close (fs);
}

/* 6.1: local partitions only; nothing is written. */
static void
test_make_local_only (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  tree (true, false, "2-3");
  struct nrm_cgroupfs *fs = open_fs ();
  assert_int_equal (nrm_partition_make (fs, CT, "2-3", NRM_PARTITION_ROOT, NULL, &err), -1);
  assert_int_equal (err->status, ENOTSUP);
  assert_non_null (strstr (nrm_error_msg (err), "only local partitions"));
  nrm_error_release (&err);
  ASSERT_FILE (CT, "cpuset.cpus.partition", "member");
  nrm_cgroupfs_close (fs);
}

static void
bundle (const char *env)
{
  cleanup_free char *text = xasprintf (
      "{\"ociVersion\":\"1.0.2\",\"process\":{\"env\":[\"PATH=/bin\",\"NRM_CPUS=2-3\",\"NRM_CPU_NODES=0\"%s]}}", env);
  fake_put (root, "bundles/c1/config.json", text);
}

static int
hook (char **summary, nrm_error_t *err)
{
  cleanup_free char *st = xasprintf ("{\"ociVersion\":\"1.0.2\",\"id\":\"c1\",\"status\":\"creating\",\"pid\":4242,"
                                     "\"bundle\":\"%s/bundles/c1\"}",
                                     root);
  return nrm_hook_run (fake_root (root), st, strlen (st), state_dir, summary, err);
}

static char *
record (void)
{
  cleanup_free char *path = xasprintf ("%s/state/containers/c1.json", root);
  char *text = NULL;
  nrm_error_t err = NULL;
  if (nrm_read_file (path, 1 << 16, &text, NULL, &err) < 0)
    {
      nrm_error_release (&err);
      return NULL;
    }
  return text;
}

/* The hook on a 6.7+ tree: the container is a partition, the record says so. */
static void
test_hook_partition (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  cleanup_free char *summary = NULL, *rec = NULL;
  tree (true, true, "2-3");
  bundle (",\"NRM_PARTITION=root\",\"NRM_PARTITION_REQUIRED=true\"");
  if (hook (&summary, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_non_null (strstr (summary, "; partition: root"));
  ASSERT_FILE (CT, "cpuset.cpus", "2-3");
  ASSERT_FILE (CT, "cpuset.cpus.partition", "root");
  ASSERT_FILE (KP, "cpuset.cpus.exclusive", "2-3,6");
  rec = record ();
  assert_non_null (strstr (rec, "\"partition\":\"root\""));
}

/* 6.1 and the node's setting: the container starts without one, and the
 * record and summary say why; asked for by the claim: refused. */
static void
test_hook_fallback (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  cleanup_free char *summary = NULL, *rec = NULL, *rec2 = NULL;
  tree (true, false, "2-3");
  bundle (",\"NRM_PARTITION=isolated\"");
  if (hook (&summary, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_non_null (strstr (summary, "; partition: unavailable (this kernel has only local partitions"));
  ASSERT_FILE (CT, "cpuset.cpus", "2-3");
  ASSERT_FILE (CT, "cpuset.cpus.partition", "member");
  rec = record ();
  assert_non_null (strstr (rec, "\"partition\":\"unavailable (this kernel has only local partitions"));

  bundle (",\"NRM_PARTITION=isolated\",\"NRM_PARTITION_REQUIRED=true\"");
  assert_int_equal (hook (NULL, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "container c1: the claim asks for a cpuset partition: this kernel has "
                                                "only local partitions"));
  nrm_error_release (&err);
  rec2 = record ();
  assert_null (rec2);
}

/* Bad values and a mixed claim: refused before anything is written. */
static void
test_hook_bad (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  tree (true, true, "2-3");
  fake_cg_put (root, CT, "cpuset.cpus", "0-7");
  bundle (",\"NRM_PARTITION=yes\"");
  assert_int_equal (hook (NULL, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "NRM_PARTITION must be off, root or isolated, not `yes`"));
  nrm_error_release (&err);
  ASSERT_FILE (CT, "cpuset.cpus", "0-7");
  bundle (",\"NRM_PARTITION=root\",\"NRM_PARTITION_REQUIRED=true\",\"NRM_SHARED_CPUS=true\"");
  assert_int_equal (hook (NULL, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "a claim with sharedCPUs shares its CPUs"));
  nrm_error_release (&err);
  ASSERT_FILE (CT, "cpuset.cpus", "0-7");
  assert_untouched ();
}

/* What partitions that are gone left in the ancestors goes back, by the
 * reconciler's pass; a live partition keeps its CPUs there. */
static void
test_trim (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  size_t n = 0;
  tree (true, true, "2-3");
  fake_cg_put (root, KP, "cpuset.cpus.exclusive", "2-3,6");
  fake_cg_put (root, QOS, "cpuset.cpus.exclusive", "2-3");
  fake_cg_put (root, POD, "cpuset.cpus.exclusive", "2-3");
  fake_cg_put (root, CT, "cpuset.cpus.exclusive", "2-3");
  fake_cg_put (root, CT, "cpuset.cpus.partition", "isolated");
  /* A besteffort pod whose partition is gone (its container cgroup too). */
  fake_cg_put (root, KP "/kubepods-besteffort.slice", "cpuset.cpus.exclusive", "6");
  fake_cg_put (root, KP "/kubepods-besteffort.slice", "cpuset.cpus.partition", "member");
  fake_cg_put (root, KP "/kubepods-besteffort.slice/kubepods-besteffort-pod9.slice", "cpuset.cpus.exclusive", "6");
  struct nrm_cgroupfs *fs = open_fs ();
  if (nrm_partition_trim (fs, KP, &n, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_int_equal (n, 3);
  ASSERT_FILE (KP, "cpuset.cpus.exclusive", "2-3");
  ASSERT_FILE (QOS, "cpuset.cpus.exclusive", "2-3");
  ASSERT_FILE (POD, "cpuset.cpus.exclusive", "2-3");
  ASSERT_FILE (CT, "cpuset.cpus.exclusive", "2-3");
  ASSERT_FILE (KP "/kubepods-besteffort.slice", "cpuset.cpus.exclusive", "");
  ASSERT_FILE (KP "/kubepods-besteffort.slice/kubepods-besteffort-pod9.slice", "cpuset.cpus.exclusive", "");
  /* Again: nothing to do. */
  assert_int_equal (nrm_partition_trim (fs, KP, &n, &err), 0);
  assert_int_equal (n, 0);
  /* The partition's container is gone: the reconciler's pass gives its
   * CPUs back all the way up. */
  cleanup_free char *cmd = xasprintf ("rm -rf '%s/sys/fs/cgroup/%s'", root, CT);
  assert_int_equal (system (cmd), 0);
  struct nrm_reconcile_stats st;
  if (nrm_reconcile (fs, state_dir, "0-7", NULL, NULL, NULL, 0, &st, NULL, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_int_equal (st.updated, 3);
  ASSERT_FILE (KP, "cpuset.cpus.exclusive", "");
  ASSERT_FILE (POD, "cpuset.cpus.exclusive", "");
  nrm_cgroupfs_close (fs);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_modes),
    cmocka_unit_test (test_check),
    cmocka_unit_test_setup_teardown (test_supported, setup, teardown),
    cmocka_unit_test_setup_teardown (test_make, setup, teardown),
    cmocka_unit_test_setup_teardown (test_make_refused, setup, teardown),
    cmocka_unit_test_setup_teardown (test_make_write_fails, setup, teardown),
    cmocka_unit_test_setup_teardown (test_make_garbage, setup, teardown),
    cmocka_unit_test_setup_teardown (test_make_local_only, setup, teardown),
    cmocka_unit_test_setup_teardown (test_hook_partition, setup, teardown),
    cmocka_unit_test_setup_teardown (test_hook_fallback, setup, teardown),
    cmocka_unit_test_setup_teardown (test_hook_bad, setup, teardown),
    cmocka_unit_test_setup_teardown (test_trim, setup, teardown),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
