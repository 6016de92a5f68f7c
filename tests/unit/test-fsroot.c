/* SPDX-License-Identifier: Apache-2.0 */
/* The root handle: the live machine and a tree resolve the same machine
 * paths, and nothing else glues a prefix. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "nrm/base/fsroot.h"
#include "tests/unit/fakefs.h"

static void
test_live (void **state)
{
  (void) state;
  struct nrm_fsroot *r = NULL;
  nrm_error_t err = NULL;
  for (size_t i = 0; i < 3; i++)
    {
      const char *as[] = { NULL, "", "/" };
      assert_int_equal (nrm_fsroot_open (as[i], &r, &err), 0);
      assert_true (nrm_fsroot_live (r));
      assert_string_equal (nrm_fsroot_dir (r), "/");
      cleanup_free char *p = nrm_fsroot_path (r, "/sys/devices/system/node/node%u/meminfo", 3u);
      assert_string_equal (p, "/sys/devices/system/node/node3/meminfo");
      assert_true (nrm_fsroot_exists (r, "/proc/self/status"));
      nrm_fsroot_free (r);
    }
  /* NULL is the live machine everywhere but in open. */
  assert_true (nrm_fsroot_live (NULL));
  cleanup_free char *p = nrm_fsroot_path (NULL, "/proc/%d/cgroup", 1);
  assert_string_equal (p, "/proc/1/cgroup");
  int fd = nrm_fsroot_openat (NULL, "/proc/self/status", O_RDONLY);
  assert_true (fd >= 0);
  close (fd);
}

static void
test_tree (void **state)
{
  (void) state;
  char tmpl[] = "/tmp/nrm-fsroot.XXXXXX";
  assert_non_null (mkdtemp (tmpl));
  fake_put (tmpl, "sys/devices/system/cpu/isolated", "2-3\n");
  struct nrm_fsroot *r = NULL;
  nrm_error_t err = NULL;
  cleanup_free char *slashed = xasprintf ("%s//", tmpl);
  assert_int_equal (nrm_fsroot_open (slashed, &r, &err), 0);
  assert_false (nrm_fsroot_live (r));
  assert_string_equal (nrm_fsroot_dir (r), tmpl);
  cleanup_free char *p = nrm_fsroot_path (r, "/sys/devices/system/cpu/%s", "isolated");
  cleanup_free char *want = xasprintf ("%s/sys/devices/system/cpu/isolated", tmpl);
  assert_string_equal (p, want);
  cleanup_free char *text = NULL;
  assert_int_equal (nrm_fsroot_read (r, "/sys/devices/system/cpu/isolated", 64, &text, NULL, &err), 0);
  assert_string_equal (text, "2-3\n");
  assert_false (nrm_fsroot_exists (r, "/proc/self/status"));
  int fd = nrm_fsroot_openat (r, "/sys/devices/system/cpu/isolated", O_RDONLY);
  assert_true (fd >= 0);
  close (fd);
  assert_true (nrm_fsroot_openat (r, "/proc/self/status", O_RDONLY) < 0);
  DIR *d = nrm_fsroot_opendir (r, "/sys/devices/system/cpu");
  assert_non_null (d);
  closedir (d);
  nrm_fsroot_free (r);

  /* A missing tree is refused with its name. */
  cleanup_free char *gone = xasprintf ("%s/none", tmpl);
  assert_int_equal (nrm_fsroot_open (gone, &r, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), gone));
  nrm_error_release (&err);
  assert_int_equal (fake_remove (tmpl), 0);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_live),
    cmocka_unit_test (test_tree),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
