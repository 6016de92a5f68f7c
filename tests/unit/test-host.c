/* SPDX-License-Identifier: Apache-2.0 */
/* The shared pool beyond kubepods on a fake cgroupfs tree: a subtree
 * without claims held at its top, one with a claimed podman container
 * descended into, the claim's drift repaired, a subtree let go when its
 * claim ends, and the hook widening a confined slice for a new claim
 * without handing its CPUs to the slice's other containers. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpuset/host.h"
#include "fakefs.h"
#include "nrm/base/cgroupfs.h"
#include "nrm/commit.h"

static char root[128], state_dir[256];

#define SYS "system.slice"
#define SVC SYS "/cron.service"
#define MACH "machine.slice"
#define CX MACH "/libpod-x.scope"
#define CY MACH "/libpod-y.scope"
#define CZ MACH "/libpod-z.scope"
#define USER "user.slice"

static const char *const subtrees[] = { SYS, MACH, USER, "docker" };

#define ASSERT_FILE(cg, file, want)                                                                                    \
  do                                                                                                                   \
    {                                                                                                                  \
      cleanup_free char *v_ = fake_cg_get (root, cg, file);                                                            \
      assert_string_equal (v_, want);                                                                                  \
    }                                                                                                                  \
  while (0)

static void
cgroup (const char *cg, const char *cpus)
{
  fake_cg_put (root, cg, "cpuset.cpus", cpus);
  fake_cg_put (root, cg, "cpuset.cpus.effective", "0-7");
  fake_cg_put (root, cg, "cpuset.mems", "");
  fake_cg_put (root, cg, "cpuset.mems.effective", "0-1");
  fake_cg_put (root, cg, "cgroup.procs", "");
}

/* A claimed container's record, as the hook writes it. */
static void
record (const char *id, const char *cg, const char *cpus, const char *mems)
{
  cleanup_free char *rel = xasprintf ("state/containers/%s.json", id);
  cleanup_free char *text
      = xasprintf ("{\"id\":\"%s\",\"cgroup\":\"/%s\",\"cpus\":\"%s\",\"mems\":\"%s\"}", id, cg, cpus, mems);
  fake_put (root, rel, text);
}

static int
setup (void **state)
{
  (void) state;
  snprintf (root, sizeof (root), "/tmp/nrm-host-XXXXXX");
  assert_non_null (mkdtemp (root));
  snprintf (state_dir, sizeof (state_dir), "%s/state", root);
  fake_cg_put (root, "", "cgroup.controllers", "cpuset cpu memory");
  fake_cg_put (root, "", "cgroup.subtree_control", "cpuset cpu memory");
  fake_cg_put (root, "", "cpuset.cpus.effective", "0-7");
  fake_cg_put (root, "", "cpuset.mems.effective", "0-1");
  cgroup (SYS, "");
  cgroup (SVC, "");
  cgroup (MACH, "");
  cgroup (CX, "0-7"); /* drift: its claim holds 4-5 */
  cgroup (CY, "");
  cgroup (USER, "");
  record ("x", CX, "4-5", "1");
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
pass (struct nrm_reconcile_stats *st, size_t n)
{
  struct nrm_cgroupfs *fs = open_fs ();
  nrm_error_t err = NULL;
  char *first = NULL;
  if (nrm_reconcile (fs, state_dir, "0-3", "0", "0-1", subtrees, n, st, &first, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  if (first)
    fail_msg ("a cgroup failed: %s", first);
  nrm_cgroupfs_close (fs);
}

static char *
confined (void)
{
  cleanup_free char *path = xasprintf ("%s/host-cgroups.json", state_dir);
  char *text = NULL;
  nrm_error_t err = NULL;
  if (nrm_read_file (path, 1 << 16, &text, NULL, &err) < 0)
    {
      nrm_error_release (&err);
      return xstrdup ("");
    }
  return text;
}

static void
test_reconcile (void **state)
{
  (void) state;
  struct nrm_reconcile_stats st;
  pass (&st, 4);
  /* No claim below: held at the top, what runs below inherits. */
  ASSERT_FILE (SYS, "cpuset.cpus", "0-3");
  ASSERT_FILE (SYS, "cpuset.mems", "0");
  ASSERT_FILE (SVC, "cpuset.cpus", "");
  ASSERT_FILE (USER, "cpuset.cpus", "0-3");
  /* A claim below: the slice inherits, its other containers hold the
   * pool, the claimed one its CPUs and node again. */
  ASSERT_FILE (MACH, "cpuset.cpus", "");
  ASSERT_FILE (CY, "cpuset.cpus", "0-3");
  ASSERT_FILE (CY, "cpuset.mems", "0");
  ASSERT_FILE (CX, "cpuset.cpus", "4-5");
  ASSERT_FILE (CX, "cpuset.mems", "1");
  assert_int_equal (st.host_confined, 3);
  assert_int_equal (st.exclusive, 1);
  cleanup_free char *c1 = confined ();
  assert_non_null (strstr (c1, "\"" CY "\""));
  assert_non_null (strstr (c1, "\"" SYS "\""));
  assert_null (strstr (c1, "\"" MACH "\""));
  assert_null (strstr (c1, "libpod-x"));

  /* Nothing to write the second time. */
  pass (&st, 4);
  assert_int_equal (st.updated, 0);
  assert_int_equal (st.failed, 0);

  /* Drift in a held slice is repaired. */
  fake_cg_put (root, SYS, "cpuset.cpus", "0-7");
  pass (&st, 4);
  ASSERT_FILE (SYS, "cpuset.cpus", "0-3");
  assert_int_equal (st.updated, 1);

  /* The claim ends: the slice holds the pool itself, and the container it
   * held keeps it too (Linux refuses to empty a populated cpuset). */
  cleanup_free char *rec = xasprintf ("%s/containers/x.json", state_dir);
  cleanup_free char *cx = xasprintf ("rm -rf '%s/sys/fs/cgroup/" CX "'", root);
  assert_int_equal (unlink (rec), 0);
  assert_int_equal (system (cx), 0);
  pass (&st, 4);
  ASSERT_FILE (MACH, "cpuset.cpus", "0-3");
  ASSERT_FILE (CY, "cpuset.cpus", "0-3");
  cleanup_free char *c2 = confined ();
  assert_non_null (strstr (c2, "\"" MACH "\""));
  assert_non_null (strstr (c2, "\"" CY "\""));
  /* When the pool changes, what nrm holds below a held cgroup follows. */
  {
    struct nrm_cgroupfs *fs = open_fs ();
    nrm_error_t err = NULL;
    assert_int_equal (nrm_reconcile (fs, state_dir, "0-5", "0", "0-1", subtrees, 4, &st, NULL, &err), 0);
    nrm_cgroupfs_close (fs);
  }
  ASSERT_FILE (MACH, "cpuset.cpus", "0-5");
  ASSERT_FILE (CY, "cpuset.cpus", "0-5");
  pass (&st, 4);

  /* Subtrees no longer named take their parents' sets, top down. */
  pass (&st, 1);
  ASSERT_FILE (SYS, "cpuset.cpus", "0-3");
  ASSERT_FILE (MACH, "cpuset.cpus", "0-7");
  ASSERT_FILE (CY, "cpuset.cpus", "0-7");
  ASSERT_FILE (USER, "cpuset.cpus", "0-7");
  ASSERT_FILE (USER, "cpuset.mems", "0-1");
  cleanup_free char *c3 = confined ();
  assert_null (strstr (c3, "\"" USER "\""));
  assert_null (strstr (c3, "\"" MACH "\""));
}

static void
test_make_room (void **state)
{
  (void) state;
  struct nrm_reconcile_stats st;
  cleanup_free char *rec = xasprintf ("%s/containers/x.json", state_dir);
  assert_int_equal (unlink (rec), 0);
  pass (&st, 4);
  ASSERT_FILE (MACH, "cpuset.cpus", "0-3");
  /* A new claimed container under the held slice. */
  cgroup (CZ, "");
  struct nrm_cgroupfs *fs = open_fs ();
  nrm_error_t err = NULL;
  if (nrm_host_make_room (fs, state_dir, "/" CZ, "6-7", "1", &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  /* The slice takes the claim on; its containers that inherited keep
   * what they had, the new one is left to the hook. */
  ASSERT_FILE (MACH, "cpuset.cpus", "0-3,6-7");
  ASSERT_FILE (MACH, "cpuset.mems", "0-1");
  ASSERT_FILE (CX, "cpuset.cpus", "0-3");
  ASSERT_FILE (CY, "cpuset.cpus", "0-3");
  ASSERT_FILE (CY, "cpuset.mems", "0");
  ASSERT_FILE (CZ, "cpuset.cpus", "");
  cleanup_free char *c1 = confined ();
  assert_non_null (strstr (c1, "\"" CY "\""));
  assert_null (strstr (c1, "libpod-z"));
  /* Already room: nothing written. */
  fake_cg_put (root, CY, "cpuset.cpus", "marker");
  assert_int_equal (nrm_host_make_room (fs, state_dir, "/" CZ, "6", NULL, &err), 0);
  ASSERT_FILE (CY, "cpuset.cpus", "marker");
  /* Not below a held cgroup: nothing to do. */
  assert_int_equal (nrm_host_make_room (fs, state_dir, "/kubepods.slice/x", "6", NULL, &err), 0);
  nrm_cgroupfs_close (fs);
}

/* The hook itself, for a podman container below a held machine.slice. */
static void
test_hook (void **state)
{
  (void) state;
  struct nrm_reconcile_stats st;
  cleanup_free char *rec = xasprintf ("%s/containers/x.json", state_dir);
  assert_int_equal (unlink (rec), 0);
  pass (&st, 4);
  cgroup (CZ, "");
  fake_put (root, "proc/4242/cgroup", "0::/" CZ "\n");
  fake_put (root, "bundles/z/config.json",
            "{\"ociVersion\":\"1.0.2\",\"process\":{\"env\":[\"NRM_CPUS=6-7\",\"NRM_CPU_NODES=0\"]}}");
  cleanup_free char *oci = xasprintf ("{\"ociVersion\":\"1.0.2\",\"id\":\"z\",\"status\":\"creating\",\"pid\":4242,"
                                      "\"bundle\":\"%s/bundles/z\"}",
                                      root);
  nrm_error_t err = NULL;
  cleanup_free char *summary = NULL;
  if (nrm_hook_run (fake_root (root), oci, strlen (oci), state_dir, &summary, &err) < 0)
    fail_msg ("%s", nrm_error_msg (err));
  ASSERT_FILE (CZ, "cpuset.cpus", "6-7");
  ASSERT_FILE (MACH, "cpuset.cpus", "0-3,6-7");
  ASSERT_FILE (CY, "cpuset.cpus", "0-3");
  /* The next pass: the slice leads to a claim now, and has its parent's
   * set again. */
  pass (&st, 4);
  ASSERT_FILE (MACH, "cpuset.cpus", "0-7");
  ASSERT_FILE (CY, "cpuset.cpus", "0-3");
  ASSERT_FILE (CZ, "cpuset.cpus", "6-7");
}

static void
test_subtree_check (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  assert_int_equal (nrm_host_subtree_check ("system.slice", &err), 0);
  assert_int_equal (nrm_host_subtree_check ("/machine.slice/x", &err), 0);
  const char *bad[] = { "", "/", "kubepods", "kubepods.slice/a", "nrm.slice", "a/../b", "a//b", NULL };
  for (size_t i = 0; i < sizeof (bad) / sizeof (bad[0]); i++)
    {
      assert_int_equal (nrm_host_subtree_check (bad[i], &err), -1);
      nrm_error_release (&err);
    }
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown (test_reconcile, setup, teardown),
    cmocka_unit_test_setup_teardown (test_make_room, setup, teardown),
    cmocka_unit_test_setup_teardown (test_hook, setup, teardown),
    cmocka_unit_test (test_subtree_check),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
