/* SPDX-License-Identifier: Apache-2.0 */
/* Which instance of a driver publishes (driver/k8s/handover.h), with the
 * instance locks held in this process: a flock belongs to its open file,
 * so another open of the same file sees it as another process would. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/k8s/handover.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/xalloc.h"

static char dir[128];
static char logged[4096];

static void test_log (void *ctx, enum nrm_log_level level, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

static void
test_log (void *ctx, enum nrm_log_level level, const char *fmt, ...)
{
  (void) ctx;
  (void) level;
  va_list ap;
  va_start (ap, fmt);
  size_t n = strlen (logged);
  vsnprintf (logged + n, sizeof (logged) - n, fmt, ap);
  va_end (ap);
  n = strlen (logged);
  snprintf (logged + n, sizeof (logged) - n, "\n");
}

static int back;
static void
took_back (void *ctx)
{
  (void) ctx;
  back++;
}

/* An instance: its lock file, held, and its claim of the role. */
struct inst
{
  int fd;
  struct nrm_handover *h;
};

static void
start (struct inst *in, const char *uid, const char *settings)
{
  nrm_error_t err = NULL;
  cleanup_free char *lock = xasprintf ("%s/cpu.nrm.io-%s.instance.lock", dir, uid);
  in->fd = open (lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  assert_true (in->fd >= 0);
  assert_int_equal (flock (in->fd, LOCK_EX | LOCK_NB), 0);
  struct nrm_handover_config hc = { .state_dir = dir,
                                    .driver = "cpu.nrm.io",
                                    .instance_lock = lock,
                                    .instance_uid = uid,
                                    .settings = settings,
                                    .log = test_log,
                                    .became_active = took_back };
  assert_int_equal (nrm_handover_claim (&hc, &in->h, &err), 0);
}

static void
record (const char *text)
{
  nrm_error_t err = NULL;
  cleanup_free char *path = xasprintf ("%s/cpu.nrm.io.publisher.json", dir);
  assert_int_equal (nrm_write_atomic (path, text, strlen (text), 0600, &err), 0);
}

static int
setup (void **state)
{
  (void) state;
  snprintf (dir, sizeof (dir), "/tmp/nrm-handover-XXXXXX");
  assert_non_null (mkdtemp (dir));
  return 0;
}

static int
teardown (void **state)
{
  (void) state;
  cleanup_free char *cmd = xasprintf ("rm -rf '%s'", dir);
  return system (cmd) == 0 ? 0 : -1;
}

static void
test_handover (void **state)
{
  (void) state;
  struct inst a, b, c;
  start (&a, "pod-a", "s1");
  assert_true (nrm_handover_active (a.h));

  /* The newer takes over at its start; the older sees it, once. */
  logged[0] = '\0';
  start (&b, "pod-b", "s2");
  assert_non_null (strstr (logged, "taking over the ResourceSlices and the shared pool's cpusets from instance pod-a"));
  assert_true (nrm_handover_active (b.h));
  assert_false (nrm_handover_active (a.h));
  assert_false (nrm_handover_active (a.h));
  assert_non_null (strstr (logged, "instance pod-b (pid"));
  assert_non_null (strstr (logged, "other settings) publishes now"));
  assert_null (strstr (strstr (logged, "publishes now") + 1, "publishes now"));

  /* The newer stops cleanly: the older takes back at its next look. */
  back = 0;
  nrm_handover_release (b.h);
  close (b.fd);
  assert_true (nrm_handover_active (a.h));
  assert_int_equal (back, 1);
  assert_true (nrm_handover_active (a.h));
  assert_int_equal (back, 1);

  /* A newer dies without releasing: its lock is free, the older takes back. */
  start (&c, "pod-c", "s1");
  logged[0] = '\0';
  assert_false (nrm_handover_active (a.h));
  assert_non_null (strstr (logged, "the same settings) publishes now"));
  close (c.fd);
  assert_true (nrm_handover_active (a.h));
  assert_int_equal (back, 2);
  /* The dead one's view: the record no longer names it, and its owner lives. */
  assert_false (nrm_handover_active (c.h));
  nrm_handover_release (c.h);
  cleanup_free char *path = xasprintf ("%s/cpu.nrm.io.publisher.json", dir);
  assert_int_equal (access (path, F_OK), 0);

  /* Records that name no live instance: missing, not JSON, a lock outside
   * the state directory, an empty lock name. Each is taken back. */
  static const char *const bad[] = {
    "not json",
    "{\"token\":\"x\",\"lock\":\"../cpu.nrm.io-pod-a.instance.lock\"}",
    "{\"token\":\"x\",\"lock\":\"/etc/passwd\"}",
    "{\"token\":\"x\",\"lock\":\"\"}",
    "[]",
  };
  for (size_t i = 0; i < sizeof (bad) / sizeof (bad[0]); i++)
    {
      record (bad[i]);
      assert_true (nrm_handover_active (a.h));
    }
  unlink (path);
  assert_true (nrm_handover_active (a.h));
  assert_int_equal (access (path, F_OK), 0);

  nrm_handover_release (a.h);
  assert_int_equal (access (path, F_OK), -1);
  close (a.fd);
}

static void
test_unwritable (void **state)
{
  (void) state;
  nrm_error_t err = NULL;
  struct nrm_handover *h = NULL;
  cleanup_free char *missing = xasprintf ("%s/no/such/dir", dir);
  struct nrm_handover_config hc
      = { .state_dir = missing, .driver = "cpu.nrm.io", .instance_lock = "/x/cpu.nrm.io.instance.lock" };
  assert_int_equal (nrm_handover_claim (&hc, &h, &err), -1);
  assert_null (h);
  assert_non_null (strstr (nrm_error_msg (err), "cpu.nrm.io.publisher.lock"));
  nrm_error_release (&err);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_handover),
    cmocka_unit_test (test_unwritable),
  };
  return cmocka_run_group_tests_name ("handover", tests, setup, teardown);
}
