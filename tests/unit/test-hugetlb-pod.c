/* SPDX-License-Identifier: Apache-2.0 */
/* Huge-page claims in a kubelet pod whose own hugetlb limit is 0 (as the
 * kubelet sets it for a size the pod spec does not request), over a fake
 * cgroupfs tree: the hook raises the pod and kubepods, shares one claim
 * between containers, undoes everything when the container's commit
 * fails, and the reconciler puts the originals back. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fakefs.h"
#include "memory/hugetlb-pod.h"
#include "nrm/base/cgroupfs.h"
#include "nrm/base/cleanup.h"
#include "nrm/commit.h"

static char root[128], state_dir[256];

#define POD "kubepods/burstable/pod1a2b"
#define CLAIM "\"NRM_HUGETLB_2MB=67108864\",\"NRM_HUGETLB_2MB_AAAA_0001=67108864\""

static void
expect (const char *cgroup, const char *file, const char *value)
{
  char rel[1024];
  snprintf (rel, sizeof (rel), "sys/fs/cgroup/%s/%s", cgroup, file);
  cleanup_free char *v = fake_get (root, rel);
  if (v == NULL || strcmp (v, value) != 0)
    fail_msg ("%s of %s is %s, not %s", file, cgroup, v ? v : "(missing)", value);
}

static void
hugetlb (const char *cgroup, const char *value)
{
  char rel[1024];
  snprintf (rel, sizeof (rel), "sys/fs/cgroup/%s/hugetlb.2MB.max", cgroup);
  fake_put (root, rel, value);
  snprintf (rel, sizeof (rel), "sys/fs/cgroup/%s/hugetlb.2MB.rsvd.max", cgroup);
  fake_put (root, rel, value);
  snprintf (rel, sizeof (rel), "sys/fs/cgroup/%s/cgroup.procs", cgroup);
  fake_put (root, rel, "");
}

static void
expect2 (const char *cgroup, const char *value)
{
  expect (cgroup, "hugetlb.2MB.max", value);
  expect (cgroup, "hugetlb.2MB.rsvd.max", value);
}

/* A container of POD with the huge page files the runtime creates. */
static void
container (const char *id, int pid, const char *env)
{
  char cg[256], rel[1024], text[2048];
  snprintf (cg, sizeof (cg), POD "/%s", id);
  hugetlb (cg, "max");
  snprintf (rel, sizeof (rel), "sys/fs/cgroup/%s/cpuset.mems", cg);
  fake_put (root, rel, "");
  snprintf (rel, sizeof (rel), "proc/%d/cgroup", pid);
  snprintf (text, sizeof (text), "0::/%s\n", cg);
  fake_put (root, rel, text);
  snprintf (rel, sizeof (rel), "bundles/%s/config.json", id);
  snprintf (text, sizeof (text), "{\"process\":{\"env\":[\"PATH=/bin\",\"NRM_MEMS=0\",%s]}}", env);
  fake_put (root, rel, text);
}

static int
hook (const char *id, int pid, nrm_error_t *err)
{
  char st[1024];
  snprintf (st, sizeof (st), "{\"id\":\"%s\",\"pid\":%d,\"bundle\":\"%s/bundles/%s\"}", id, pid, root, id);
  return nrm_hook_run (fake_root (root), st, strlen (st), state_dir, NULL, err);
}

static void
hook_ok (const char *id, int pid)
{
  nrm_error_t err = NULL;
  if (hook (id, pid, &err) < 0)
    fail_msg ("hook of %s: %s", id, nrm_error_msg (err));
}

static void
gone (const char *id)
{
  char cmd[1024];
  snprintf (cmd, sizeof (cmd), "rm -rf '%s/sys/fs/cgroup/" POD "/%s'", root, id);
  assert_int_equal (system (cmd), 0);
}

static struct nrm_hugetlb_pod_stats
sweep (void)
{
  nrm_error_t err = NULL;
  struct nrm_cgroupfs *fs = NULL;
  struct nrm_hugetlb_pod_stats st;
  assert_int_equal (nrm_cgroupfs_open (fake_root (root), &fs, &err), 0);
  if (nrm_hugetlb_pod_sweep (fs, state_dir, &st, &err) < 0)
    fail_msg ("sweep: %s", nrm_error_msg (err));
  nrm_cgroupfs_close (fs);
  return st;
}

/* The tree as the kubelet leaves it: kubepods at the allocatable 1 GiB,
 * the QoS level unbounded (1 << 62), the pod at 0. */
static int
setup (void **state)
{
  (void) state;
  snprintf (root, sizeof (root), "/tmp/nrm-hpod-XXXXXX");
  assert_non_null (mkdtemp (root));
  snprintf (state_dir, sizeof (state_dir), "%s/state", root);
  assert_int_equal (mkdir (state_dir, 0700), 0);
  fake_put (root, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory hugetlb");
  hugetlb ("kubepods", "1073741824");
  hugetlb ("kubepods/burstable", "4611686018427387904");
  hugetlb (POD, "0");
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
test_raise_and_restore (void **state)
{
  (void) state;
  container ("c1", 101, CLAIM);
  hook_ok ("c1", 101);
  expect2 (POD "/c1", "67108864");
  expect2 (POD, "67108864");
  expect2 ("kubepods", "1140850688");
  expect2 ("kubepods/burstable", "4611686018427387904"); /* unbounded: untouched */

  /* Again (a runtime that retries the hook): no second raise. */
  hook_ok ("c1", 101);
  expect2 (POD, "67108864");
  expect2 ("kubepods", "1140850688");

  /* A second container with the same claim: the pod does not double. */
  container ("c2", 102, CLAIM);
  hook_ok ("c2", 102);
  expect2 (POD, "67108864");
  expect2 ("kubepods", "1140850688");

  /* A third with a claim of its own adds to it. */
  container ("c3", 103, "\"NRM_HUGETLB_2MB=2097152\",\"NRM_HUGETLB_2MB_BBBB=2097152\"");
  hook_ok ("c3", 103);
  expect2 (POD, "69206016");
  expect2 ("kubepods", "1142947840");

  /* The reconciler: while the containers run, nothing changes. */
  struct nrm_hugetlb_pod_stats st = sweep ();
  assert_int_equal (st.claims, 2);
  assert_int_equal (st.restored + st.raised + st.released, 0);
  expect2 (POD, "69206016");

  /* c3 goes: its claim's bytes come off. c1 goes: c2 still uses the
   * shared claim. */
  gone ("c3");
  gone ("c1");
  st = sweep ();
  assert_int_equal (st.released, 1);
  assert_int_equal (st.claims, 1);
  expect2 (POD, "67108864");
  expect2 ("kubepods", "1140850688");
  /* The last one: the originals are back and the journal is gone. */
  gone ("c2");
  st = sweep ();
  assert_int_equal (st.released, 1);
  assert_int_equal (st.restored, 4);
  expect2 (POD, "0");
  expect2 ("kubepods", "1073741824");
  cleanup_free char *j = fake_get (root, "state/hugetlb-pods.json");
  assert_null (j);
}

/* The kubelet writes the pod's limits again (an in-place resize writes 0
 * for every size not in its config): the next pass raises them back; and
 * a value someone else wrote is not "restored" over. */
static void
test_kubelet_rewrites (void **state)
{
  (void) state;
  container ("c1", 101, CLAIM);
  hook_ok ("c1", 101);
  hugetlb (POD, "0");
  struct nrm_hugetlb_pod_stats st = sweep ();
  assert_int_equal (st.raised, 2);
  expect2 (POD, "67108864");

  /* kubepods written anew (a kubelet restart with more allocatable). */
  hugetlb ("kubepods", "2147483648");
  gone ("c1");
  st = sweep ();
  expect2 (POD, "0");
  expect2 ("kubepods", "2147483648");
}

/* A reconciler pass of nrm (nrm_reconcile) does the sweep. */
static void
test_reconcile_restores (void **state)
{
  (void) state;
  container ("c1", 101, CLAIM);
  hook_ok ("c1", 101);
  expect2 (POD, "67108864");
  gone ("c1");
  nrm_error_t err = NULL;
  struct nrm_cgroupfs *fs = NULL;
  struct nrm_reconcile_stats rs;
  char *first = NULL;
  assert_int_equal (nrm_cgroupfs_open (fake_root (root), &fs, &err), 0);
  if (nrm_reconcile (fs, state_dir, "0-3", NULL, NULL, NULL, 0, &rs, &first, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  assert_null (first);
  nrm_cgroupfs_close (fs);
  expect2 (POD, "0");
  expect2 ("kubepods", "1073741824");
}

/* Makes a file refuse writes, also to root; false where that cannot be
 * done here. */
static bool
unwritable (const char *rel, bool on)
{
  char path[1024];
  snprintf (path, sizeof (path), "%s/%s", root, rel);
  if (geteuid () != 0)
    return chmod (path, on ? 0444 : 0644) == 0;
  int fd = open (path, O_RDONLY);
  int flags = 0;
  bool ok = fd >= 0 && ioctl (fd, FS_IOC_GETFLAGS, &flags) == 0;
  flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
  ok = ok && ioctl (fd, FS_IOC_SETFLAGS, &flags) == 0;
  if (fd >= 0)
    close (fd);
  return ok;
}

static void
test_failures_change_nothing (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  /* The container's own commit fails (cpuset.mems is a directory): the
   * pod and kubepods are put back, no journal stays. */
  container ("c1", 101, CLAIM);
  char path[1024];
  snprintf (path, sizeof (path), "%s/sys/fs/cgroup/" POD "/c1/cpuset.mems", root);
  assert_int_equal (unlink (path), 0);
  assert_int_equal (mkdir (path, 0755), 0);
  assert_int_equal (hook ("c1", 101, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "cpuset.mems"));
  nrm_error_release (&err);
  expect2 (POD, "0");
  expect2 ("kubepods", "1073741824");
  expect2 (POD "/c1", "max");
  cleanup_free char *j = fake_get (root, "state/hugetlb-pods.json");
  assert_null (j);

  /* The last raise fails (kubepods' .rsvd.max refuses): the ones before
   * are put back, the error names the file and the value. */
  container ("c2", 102, CLAIM);
  if (!unwritable ("sys/fs/cgroup/kubepods/hugetlb.2MB.rsvd.max", true))
    skip ();
  int r = hook ("c2", 102, &err);
  assert_true (unwritable ("sys/fs/cgroup/kubepods/hugetlb.2MB.rsvd.max", false));
  assert_int_equal (r, -1);
  assert_non_null (strstr (nrm_error_msg (err), "hugetlb.2MB.rsvd.max"));
  assert_non_null (strstr (nrm_error_msg (err), "kubepods"));
  nrm_error_release (&err);
  expect2 (POD, "0");
  expect2 ("kubepods", "1073741824");
  expect2 (POD "/c2", "max");
  cleanup_free char *j2 = fake_get (root, "state/hugetlb-pods.json");
  assert_null (j2);

  /* A level that is not a byte count: named, nothing written. */
  fake_put (root, "sys/fs/cgroup/" POD "/hugetlb.2MB.max", "lots");
  assert_int_equal (hook ("c2", 102, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "`lots`"));
  nrm_error_release (&err);
  expect (POD, "hugetlb.2MB.rsvd.max", "0");
  expect2 ("kubepods", "1073741824");
  fake_put (root, "sys/fs/cgroup/" POD "/hugetlb.2MB.max", "0");

  /* A malformed per-claim variable. */
  container ("c3", 103, "\"NRM_HUGETLB_2MB=2097152\",\"NRM_HUGETLB_2MB_a-b=2097152\"");
  assert_int_equal (hook ("c3", 103, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "NRM_HUGETLB_2MB_a-b"));
  nrm_error_release (&err);
  expect2 (POD, "0");
}

/* What a crash leaves: the journal written, the raise not (or half) done;
 * or the containers gone with the journal still there. The next hook run
 * or pass converges. */
static void
test_journal_left_over (void **state)
{
  (void) state;
  container ("c1", 101, CLAIM);
  hook_ok ("c1", 101);
  /* The journal was written, the crash came before the writes. */
  hugetlb (POD, "0");
  fake_put (root, "sys/fs/cgroup/" POD "/c1/cgroup.procs", "");
  hugetlb ("kubepods", "1073741824");
  hook_ok ("c1", 101);
  expect2 (POD, "67108864");
  expect2 ("kubepods", "1140850688");
  /* Half: the pod raised, kubepods not; the container is gone meanwhile. */
  hugetlb ("kubepods", "1073741824");
  gone ("c1");
  sweep ();
  expect2 (POD, "0");
  expect2 ("kubepods", "1073741824");
  /* The pod is gone too (the usual end): the entries are dropped. */
  container ("c2", 102, CLAIM);
  hook_ok ("c2", 102);
  char cmd[1024];
  snprintf (cmd, sizeof (cmd), "rm -rf '%s/sys/fs/cgroup/" POD "'", root);
  assert_int_equal (system (cmd), 0);
  sweep ();
  expect2 ("kubepods", "1073741824");
  cleanup_free char *j = fake_get (root, "state/hugetlb-pods.json");
  assert_null (j);
}

/* A container outside the kubelet's layouts has no pod level: only its own
 * cgroup is written, as before. */
static void
test_not_a_pod (void **state)
{
  (void) state;
  hugetlb ("system.slice/x", "max");
  fake_put (root, "sys/fs/cgroup/system.slice/x/cpuset.mems", "");
  fake_put (root, "proc/200/cgroup", "0::/system.slice/x\n");
  fake_put (root, "bundles/x/config.json", "{\"process\":{\"env\":[\"NRM_MEMS=0\"," CLAIM "]}}");
  hook_ok ("x", 200);
  expect2 ("system.slice/x", "67108864");
  cleanup_free char *j = fake_get (root, "state/hugetlb-pods.json");
  assert_null (j);

  /* A pod with no hugetlb limit above it (the controller is off there):
   * nothing raised, nothing journaled. */
  const char *cg = "kubepods.slice/kubepods-pod9.slice/cri-containerd-c9.scope";
  hugetlb (cg, "max");
  fake_put (root, "sys/fs/cgroup/kubepods.slice/kubepods-pod9.slice/cri-containerd-c9.scope/cpuset.mems", "");
  fake_put (root, "proc/201/cgroup", "0::/kubepods.slice/kubepods-pod9.slice/cri-containerd-c9.scope\n");
  fake_put (root, "bundles/c9/config.json", "{\"process\":{\"env\":[\"NRM_MEMS=0\"," CLAIM "]}}");
  hook_ok ("c9", 201);
  expect2 (cg, "67108864");
  cleanup_free char *j2 = fake_get (root, "state/hugetlb-pods.json");
  assert_null (j2);
}

/* nrm-hook killed (-9) at each of its file system calls under the tree
 * (crashfs.so: cgroup writes, the journal's temporary file, fsync, rename,
 * the container record), with another claim of the pod already raised.
 * Then either the hook runs again (the runtime retries) or the container
 * is gone (the runtime gave up): the reconciler's pass ends at the values
 * of the claims still in use, and at the originals when none is. */
static int
hook_crashing (const char *hook_bin, const char *shim, long at)
{
  char st[1024];
  snprintf (st, sizeof (st), "{\"id\":\"c1\",\"pid\":101,\"bundle\":\"%s/bundles/c1\"}", root);
  int in[2];
  assert_int_equal (pipe (in), 0);
  pid_t pid = fork ();
  assert_true (pid >= 0);
  if (pid == 0)
    {
      char at_text[32];
      snprintf (at_text, sizeof (at_text), "%ld", at);
      dup2 (in[0], 0);
      close (in[1]);
      int null = open ("/dev/null", O_WRONLY);
      dup2 (null, 2);
      setenv ("LD_PRELOAD", shim, 1);
      setenv ("NRM_CRASH_DIR", root, 1);
      setenv ("NRM_CRASH_AT", at_text, 1);
      setenv ("NRM_CRASH_LOSE", "0", 1);
      setenv ("ASAN_OPTIONS", "verify_asan_link_order=0:detect_leaks=0", 1);
      execl (hook_bin, hook_bin, "hook", "--fsroot", root, "--state-dir", state_dir, (char *) NULL);
      _exit (127);
    }
  close (in[0]);
  assert_int_equal (write (in[1], st, strlen (st)), (ssize_t) strlen (st));
  close (in[1]);
  int status;
  assert_int_equal (waitpid (pid, &status, 0), pid);
  if (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL)
    return 1;
  assert_true (WIFEXITED (status));
  assert_int_equal (WEXITSTATUS (status), 0);
  return 0;
}

static void
test_crash_points (void **state)
{
  (void) state;
  const char *nrm = getenv ("NRM"), *shim = getenv ("NRM_CRASHFS");
  if (nrm == NULL || shim == NULL || access (shim, R_OK) != 0)
    {
      fprintf (stderr, "SKIP: NRM and NRM_CRASHFS come from make check\n");
      skip ();
    }
  /* `nrm hook`: the same nrm_hook_run() as nrm-hook, which is linked
   * statically where it can be and then takes no LD_PRELOAD. */
  const char *hook_bin = nrm;
  int crashes = 0;
  for (long at = 1; at < 200; at++)
    {
      teardown (NULL);
      setup (NULL);
      container ("c0", 100, "\"NRM_HUGETLB_2MB=2097152\",\"NRM_HUGETLB_2MB_BBBB=2097152\"");
      hook_ok ("c0", 100);
      container ("c1", 101, CLAIM);
      if (!hook_crashing (hook_bin, shim, at))
        break; /* past its last call: nothing left to cut */
      crashes++;
      if (at % 2)
        {
          hook_ok ("c1", 101);
          expect2 (POD, "69206016");
          expect2 ("kubepods", "1142947840");
        }
      gone ("c1");
      sweep ();
      expect2 (POD, "2097152");
      expect2 ("kubepods", "1075838976");
      gone ("c0");
      sweep ();
      expect2 (POD, "0");
      expect2 ("kubepods", "1073741824");
      cleanup_free char *j = fake_get (root, "state/hugetlb-pods.json");
      if (j)
        fail_msg ("crash at call %ld: the journal stays: %s", at, j);
    }
  fprintf (stderr, "# %d crash points\n", crashes);
  assert_true (crashes >= 6);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown (test_raise_and_restore, setup, teardown),
    cmocka_unit_test_setup_teardown (test_kubelet_rewrites, setup, teardown),
    cmocka_unit_test_setup_teardown (test_reconcile_restores, setup, teardown),
    cmocka_unit_test_setup_teardown (test_failures_change_nothing, setup, teardown),
    cmocka_unit_test_setup_teardown (test_journal_left_over, setup, teardown),
    cmocka_unit_test_setup_teardown (test_not_a_pod, setup, teardown),
    cmocka_unit_test_setup_teardown (test_crash_points, setup, teardown),
  };
  return cmocka_run_group_tests_name ("hugetlb-pod", tests, NULL, NULL);
}
