/* SPDX-License-Identifier: Apache-2.0 */
/* A bad-input sweep over the plugin's sockets and its claims directory, as
 * a hostile or broken client would call it: claim references with NUL,
 * bytes that are not UTF-8, huge or malformed fields; quantities that wrap
 * or leave the device; files that are not claims. Every case must give a
 * clear, bounded, valid UTF-8 error and change nothing: no claim held, no
 * spec written, and afterwards each device can still be taken whole. */
#include "config.h"

#include <locale.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <wchar.h>

#include <cmocka.h>

#include "proto/dra_v1.pb-c.h"
#include "tests/plugin/harness.h"
#include "tests/plugin/kubelet.h"

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse PrepareResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse UnprepareResponse;

#define GOOD_UID "00000000-0000-4000-8000-00000000a000"
#define MAX_ERROR 4100 /* the plugin bounds a reply error to 4096 bytes */

static struct nh h;
static grpc_channel *cpu_ch, *mem_ch;
static int cases;

/* Checked with the C library's decoder, not nrm's own. */
static bool
utf8_ok (const char *s)
{
  mbstate_t st;
  memset (&st, 0, sizeof (st));
  size_t n = strlen (s);
  while (n > 0)
    {
      wchar_t wc;
      size_t k = mbrtowc (&wc, s, n, &st);
      if (k == (size_t) -1 || k == (size_t) -2 || (wc >= 0xd800 && wc <= 0xdfff))
        return false;
      s += k ? k : 1;
      n -= k ? k : 1;
    }
  return true;
}

static void
check_message (const char *what, const char *msg)
{
  if (strlen (msg) > MAX_ERROR)
    fail_msg ("%s: an error of %zu bytes", what, strlen (msg));
  if (!utf8_ok (msg))
    fail_msg ("%s: the error is not valid UTF-8", what);
}

/* One call with raw references; returns the reply (status and message). */
static void
call (grpc_channel *ch, const struct kc_ref *refs, size_t n, bool unprepare, struct kc_reply *r)
{
  size_t len;
  uint8_t *req = kc_pack_refs (refs, n, unprepare, &len);
  assert_int_equal (kc_unary (ch, unprepare ? NH_UNPREPARE : NH_PREPARE, req, len, 20000, r), 0);
  free (req);
}

/* The error of the one entry of a reply (NULL when the call was refused
 * as a whole: then *details holds why). */
static char *
entry_error (const struct kc_reply *r, bool unprepare, const char *uid)
{
  char *ret = NULL;
  if (unprepare)
    {
      UnprepareResponse *u
          = k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__unpack (NULL, r->len, r->data);
      assert_non_null (u);
      for (size_t i = 0; i < u->n_claims; i++)
        if (strcmp (u->claims[i]->key, uid) == 0)
          ret = strdup (u->claims[i]->value->error);
      k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__free_unpacked (u, NULL);
    }
  else
    {
      PrepareResponse *p
          = k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__unpack (NULL, r->len, r->data);
      assert_non_null (p);
      for (size_t i = 0; i < p->n_claims; i++)
        if (strcmp (p->claims[i]->key, uid) == 0)
          ret = strdup (p->claims[i]->value->error);
      k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (p, NULL);
    }
  if (ret == NULL)
    fail_msg ("no entry for claim %s", uid);
  return ret;
}

/* Nothing held, nothing written: only the claims the test holds on purpose
 * (held) are in the checkpoints. */
static void
check_unchanged (const char *what, int held)
{
  int n = nh_checkpoint_claims (&h, NH_CPU_DRIVER) + nh_checkpoint_claims (&h, NH_MEM_DRIVER);
  if (n != held)
    fail_msg ("%s: %d claims in the checkpoints, expected %d", what, n, held);
}

struct bad
{
  const char *label, *s;
  size_t len;
};

#define B(label, lit)                                                                                                  \
  {                                                                                                                    \
    label, lit, sizeof (lit) - 1                                                                                       \
  }

static const struct bad hostile[] = {
  B ("empty", ""),
  B ("NUL inside", "u1\0/../../x"),
  B ("NUL only", "\0"),
  B ("NUL at the end", "default\0"),
  B ("dot-dot", ".."),
  B ("a path", "../../etc/passwd"),
  B ("absolute", "/etc"),
  B ("invalid UTF-8", "\xff\xfe"),
  B ("overlong UTF-8", "\xc0\xaf"),
  B ("a surrogate", "\xed\xa0\x80"),
  B ("a newline", "a\nb"),
  B ("upper case", "ABC"),
  B ("a space", "a b"),
  B ("non-ASCII", "\xc3\xbcn\xc3\xaf"),
  B ("percent", "a%2fb"),
  { "3 MiB", NULL, 3 << 20 },
  { "254 bytes", NULL, 254 },
};
#define N_HOSTILE (sizeof (hostile) / sizeof (hostile[0]))

static char *big;

static const char *
bytes_of (const struct bad *b)
{
  return b->s ? b->s : big;
}

/* A UID that is not one refuses the whole request, named and bounded; a
 * good claim in the same request is not prepared either. */
static void
test_bad_uids (void **state)
{
  (void) state;
  for (size_t i = 0; i < N_HOSTILE; i++)
    for (int un = 0; un < 2; un++)
      {
        struct kc_ref refs[2] = { { "default", "good", GOOD_UID, 7, 4, strlen (GOOD_UID) },
                                  { "default", "c1", bytes_of (&hostile[i]), 7, 2, hostile[i].len } };
        struct kc_reply r;
        call (cpu_ch, refs, 2, un, &r);
        if (r.status != GRPC_STATUS_INVALID_ARGUMENT)
          fail_msg ("uid %s (%s): status %d", hostile[i].label, un ? "unprepare" : "prepare", r.status);
        assert_non_null (r.details);
        check_message (hostile[i].label, r.details);
        assert_non_null (strstr (r.details, "claim 1 of the request"));
        kc_reply_done (&r);
        check_unchanged (hostile[i].label, 0);
        assert_false (nh_spec_exists (&h, NH_CPU_DRIVER, GOOD_UID));
        cases++;
      }
}

/* A namespace or name that is not one refuses that claim, not the others;
 * the claim file "c1" exists and is valid, so a reference cut at a NUL
 * would find it. */
static void
test_bad_names (void **state)
{
  (void) state;
  nh_write_claim (&h, "c1.json", "c1", "00000000-0000-4000-8000-00000000c001",
                  "[{\"request\":\"cpus\",\"driver\":\"" NH_CPU_DRIVER "\",\"pool\":\"" NH_NODE "\","
                  "\"device\":\"numa0\",\"consumedCapacity\":{\"cpus\":\"1\"}}]");
  for (size_t i = 0; i < N_HOSTILE; i++)
    for (int field = 0; field < 2; field++)
      {
        const char *uid = "00000000-0000-4000-8000-00000000c001";
        struct kc_ref ref = { "default", "c1", uid, 7, 2, strlen (uid) };
        if (field == 0)
          ref.ns = bytes_of (&hostile[i]), ref.ns_len = hostile[i].len;
        else
          ref.name = bytes_of (&hostile[i]), ref.name_len = hostile[i].len;
        /* "default\0" as a name is no DNS subdomain either; upper case and
         * the rest are refused by the name rules. */
        struct kc_reply r;
        call (cpu_ch, &ref, 1, false, &r);
        assert_int_equal (r.status, GRPC_STATUS_OK);
        char *e = entry_error (&r, false, uid);
        if (e[0] == '\0')
          fail_msg ("%s %s: prepared", field ? "name" : "namespace", hostile[i].label);
        check_message (hostile[i].label, e);
        free (e);
        kc_reply_done (&r);
        check_unchanged (hostile[i].label, 0);
        assert_false (nh_spec_exists (&h, NH_CPU_DRIVER, uid));
        cases++;
      }
}

static void
prepare_ok (grpc_channel *ch, const char *name, const char *uid)
{
  struct kc_ref ref = { "default", name, uid, 7, strlen (name), strlen (uid) };
  struct kc_reply r;
  call (ch, &ref, 1, false, &r);
  assert_int_equal (r.status, GRPC_STATUS_OK);
  char *e = entry_error (&r, false, uid);
  if (e[0])
    fail_msg ("prepare %s: %s", name, e);
  free (e);
  kc_reply_done (&r);
}

static void
unprepare_ok (grpc_channel *ch, const char *uid)
{
  struct kc_ref ref = { "default", "x", uid, 7, 1, strlen (uid) };
  struct kc_reply r;
  call (ch, &ref, 1, true, &r);
  assert_int_equal (r.status, GRPC_STATUS_OK);
  char *e = entry_error (&r, true, uid);
  assert_string_equal (e, "");
  free (e);
  kc_reply_done (&r);
}

/* Unprepare checks what prepare checks: a prepared claim stays prepared
 * when its reference comes with a UID cut at a NUL or a bad name. */
static void
test_bad_unprepare (void **state)
{
  (void) state;
  const char *uid = "00000000-0000-4000-8000-00000000c001";
  prepare_ok (cpu_ch, "c1", uid);
  assert_true (nh_spec_exists (&h, NH_CPU_DRIVER, uid));
  static const char cut[] = "00000000-0000-4000-8000-00000000c001\0junk";
  struct kc_ref ref = { "default", "c1", cut, 7, 2, sizeof (cut) - 1 };
  struct kc_reply r;
  call (cpu_ch, &ref, 1, true, &r);
  assert_int_equal (r.status, GRPC_STATUS_INVALID_ARGUMENT);
  assert_non_null (strstr (r.details, "\\0junk"));
  kc_reply_done (&r);
  assert_true (nh_spec_exists (&h, NH_CPU_DRIVER, uid));
  cases++;
  for (size_t i = 0; i < N_HOSTILE; i++)
    {
      struct kc_ref bad = { "default", bytes_of (&hostile[i]), uid, 7, hostile[i].len, strlen (uid) };
      call (cpu_ch, &bad, 1, true, &r);
      assert_int_equal (r.status, GRPC_STATUS_OK);
      char *e = entry_error (&r, true, uid);
      if (e[0] == '\0')
        fail_msg ("unprepare with name %s: unprepared", hostile[i].label);
      check_message (hostile[i].label, e);
      free (e);
      kc_reply_done (&r);
      assert_true (nh_spec_exists (&h, NH_CPU_DRIVER, uid));
      check_unchanged (hostile[i].label, 1);
      cases++;
    }
  unprepare_ok (cpu_ch, uid);
  assert_false (nh_spec_exists (&h, NH_CPU_DRIVER, uid));
}

/* Quantities that wrap, leave the device or miss its steps are refused per
 * claim, and nothing is taken. */
static void
test_quantities (void **state)
{
  (void) state;
  static const struct
  {
    const char *driver, *device, *key, *amount;
  } q[] = {
    { NH_CPU_DRIVER, "numa0", "cpus", "18446744073709551617" },
    { NH_CPU_DRIVER, "numa0", "cpus", "18446744073709551616" },
    { NH_CPU_DRIVER, "numa0", "cpus", "4294967297" },
    { NH_CPU_DRIVER, "numa0", "cpus", "1e30" },
    { NH_CPU_DRIVER, "numa0", "cpus", "1e40" },
    { NH_CPU_DRIVER, "numa0", "cpus", "12" },
    { NH_CPU_DRIVER, "numa0", "cpus", "100" },
    { NH_CPU_DRIVER, "numa0", "cpus", "-1" },
    { NH_CPU_DRIVER, "numa0", "cpus", "0" },
    { NH_CPU_DRIVER, "numa0", "cpus", "0.5" },
    { NH_CPU_DRIVER, "numa0", "cpus", "1.5" },
    { NH_CPU_DRIVER, "numa0", "cpus", "500m" },
    { NH_CPU_DRIVER, "numa0", "cpus", "1Ki" },
    { NH_CPU_DRIVER, "numa0", "cpus", "16Ei" },
    { NH_CPU_DRIVER, "numa0", "cpus", "" },
    { NH_CPU_DRIVER, "numa0", "cpus", "x" },
    { NH_CPU_DRIVER, "numa0", "cpus", "1 " },
    { NH_CPU_DRIVER, "numa0", "cpus", "999999999999999999999999999999999999999999" },
    { NH_CPU_DRIVER, "numa1-isolated", "cpus", "2" },
    { NH_MEM_DRIVER, "numa0", "memory", "8Ei" },
    { NH_MEM_DRIVER, "numa0", "memory", "16Ei" },
    { NH_MEM_DRIVER, "numa0", "memory", "10E" },
    { NH_MEM_DRIVER, "numa0", "memory", "9223372036854775808" },
    { NH_MEM_DRIVER, "numa0", "memory", "1Pi" },
    { NH_MEM_DRIVER, "numa0", "memory", "18422Mi" },
    { NH_MEM_DRIVER, "numa0", "memory", "1" },
    { NH_MEM_DRIVER, "numa0", "memory", "1e3" },
    { NH_MEM_DRIVER, "numa0", "memory", "1Ki" },
    { NH_MEM_DRIVER, "numa0", "memory", "1.5Mi" },
    { NH_MEM_DRIVER, "numa0", "memory", "-1Mi" },
    { NH_MEM_DRIVER, "numa0", "memory", "0" },
    { NH_MEM_DRIVER, "numa0", "memory", "1n" },
    { NH_MEM_DRIVER, "numa0", "memory", "1e-3" },
  };
  for (size_t i = 0; i < sizeof (q) / sizeof (q[0]); i++)
    {
      char uid[64], results[1024];
      snprintf (uid, sizeof (uid), "00000000-0000-4000-8000-0000000b%04zx", i);
      snprintf (results, sizeof (results),
                "[{\"request\":\"r\",\"driver\":\"%s\",\"pool\":\"" NH_NODE "\",\"device\":\"%s\","
                "\"consumedCapacity\":{\"%s\":\"%s\"}}]",
                q[i].driver, q[i].device, q[i].key, q[i].amount);
      nh_write_claim (&h, "q.json", "q", uid, results);
      grpc_channel *ch = strcmp (q[i].driver, NH_CPU_DRIVER) == 0 ? cpu_ch : mem_ch;
      struct kc_ref ref = { "default", "q", uid, 7, 1, strlen (uid) };
      struct kc_reply r;
      call (ch, &ref, 1, false, &r);
      assert_int_equal (r.status, GRPC_STATUS_OK);
      char *e = entry_error (&r, false, uid);
      if (e[0] == '\0')
        fail_msg ("%s %s of %s: prepared", q[i].key, q[i].amount, q[i].device);
      check_message (q[i].amount, e);
      free (e);
      kc_reply_done (&r);
      check_unchanged (q[i].amount, 0);
      assert_false (nh_spec_exists (&h, q[i].driver, uid));
      cases++;
    }
}

/* Files that are not claims: none blocks a lookup or is followed. */
static void
test_claims_dir (void **state)
{
  (void) state;
  char path[700], target[700];
  /* The direct file of a claim is a FIFO, a folder, a link to a valid claim
   * outside the directory, too large, or not JSON. */
  snprintf (path, sizeof (path), "%s/default_fifo.json", h.claims_dir);
  assert_int_equal (mkfifo (path, 0600), 0);
  snprintf (path, sizeof (path), "%s/other_fifo2.json", h.claims_dir);
  assert_int_equal (mkfifo (path, 0600), 0);
  snprintf (path, sizeof (path), "%s/default_dir.json", h.claims_dir);
  assert_int_equal (mkdir (path, 0700), 0);
  snprintf (target, sizeof (target), "%s/outside.json", h.root);
  FILE *f = fopen (target, "w");
  fprintf (f, "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"name\":\"link\","
              "\"namespace\":\"default\",\"uid\":\"00000000-0000-4000-8000-00000000d001\"},\"status\":{"
              "\"allocation\":{\"devices\":{\"results\":[{\"request\":\"cpus\",\"driver\":\"" NH_CPU_DRIVER "\","
              "\"pool\":\"" NH_NODE "\",\"device\":\"numa0\",\"consumedCapacity\":{\"cpus\":\"1\"}}]}}}}");
  fclose (f);
  snprintf (path, sizeof (path), "%s/default_link.json", h.claims_dir);
  assert_int_equal (symlink (target, path), 0);
  snprintf (path, sizeof (path), "%s/default_big.json", h.claims_dir);
  f = fopen (path, "w");
  for (int i = 0; i < (5 << 20) / 64; i++)
    fputs ("                                                               \n", f);
  fclose (f);
  snprintf (path, sizeof (path), "%s/default_junk.json", h.claims_dir);
  f = fopen (path, "w");
  fputs ("{\"metadata\": [", f);
  fclose (f);
  /* A file that names another claim than its file name says. */
  nh_write_claim (&h, "default_liar.json", "someone-else", "00000000-0000-4000-8000-00000000d006", "[]");

  static const char *const names[] = { "fifo", "fifo2", "dir", "link", "big", "junk", "liar" };
  for (size_t i = 0; i < sizeof (names) / sizeof (names[0]); i++)
    {
      char uid[64];
      snprintf (uid, sizeof (uid), "00000000-0000-4000-8000-00000000d%03zu", i);
      struct kc_ref ref = { "default", names[i], uid, 7, strlen (names[i]), strlen (uid) };
      struct kc_reply r;
      call (cpu_ch, &ref, 1, false, &r);
      assert_int_equal (r.status, GRPC_STATUS_OK);
      char *e = entry_error (&r, false, uid);
      if (strstr (e, "not found") == NULL)
        fail_msg ("claim file %s: `%s`", names[i], e);
      free (e);
      kc_reply_done (&r);
      check_unchanged (names[i], 0);
      cases++;
    }

  /* 4096 unknown claims in one call are answered (each is one failed open,
   * not a read of the directory). */
  enum
  {
    N = 4096
  };
  struct kc_ref *refs = calloc (N, sizeof (*refs));
  char (*uids)[40] = calloc (N, sizeof (*uids));
  for (size_t i = 0; i < N; i++)
    {
      snprintf (uids[i], sizeof (uids[i]), "00000000-0000-4000-8000-0000000e%04zx", i);
      refs[i] = (struct kc_ref){ "default", "nobody", uids[i], 7, 6, strlen (uids[i]) };
    }
  struct kc_reply r;
  call (cpu_ch, refs, N, false, &r);
  assert_int_equal (r.status, GRPC_STATUS_OK);
  PrepareResponse *p
      = k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__unpack (NULL, r.len, r.data);
  assert_non_null (p);
  assert_int_equal (p->n_claims, N);
  for (size_t i = 0; i < p->n_claims; i++)
    assert_non_null (strstr (p->claims[i]->value->error, "not found"));
  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__free_unpacked (p, NULL);
  kc_reply_done (&r);
  free (refs);
  free (uids);
  cases++;

  /* A claim written after the index was built is found. */
  nh_write_claim (&h, "later-under-another-name.json", "later", "00000000-0000-4000-8000-00000000d100",
                  "[{\"request\":\"cpus\",\"driver\":\"" NH_CPU_DRIVER "\",\"pool\":\"" NH_NODE "\","
                  "\"device\":\"numa0\",\"consumedCapacity\":{\"cpus\":\"1\"}}]");
  prepare_ok (cpu_ch, "later", "00000000-0000-4000-8000-00000000d100");
  unprepare_ok (cpu_ch, "00000000-0000-4000-8000-00000000d100");
}

/* After the sweep every device can still be taken whole: nothing leaked,
 * no count went negative. */
static void
test_whole_devices_after (void **state)
{
  (void) state;
  static const struct
  {
    const char *driver, *device, *key, *amount;
  } w[] = {
    { NH_CPU_DRIVER, "numa0", "cpus", "11" },
    { NH_CPU_DRIVER, "numa1", "cpus", "11" },
    { NH_MEM_DRIVER, "numa0", "memory", "18421Mi" },
    { NH_MEM_DRIVER, "numa1", "memory", "18431Mi" },
  };
  char uids[4][64];
  for (size_t i = 0; i < 4; i++)
    {
      char results[1024], file[64], name[16];
      snprintf (uids[i], sizeof (uids[i]), "00000000-0000-4000-8000-0000000f%04zx", i);
      snprintf (name, sizeof (name), "whole%zu", i);
      snprintf (file, sizeof (file), "%s.json", name);
      snprintf (results, sizeof (results),
                "[{\"request\":\"r\",\"driver\":\"%s\",\"pool\":\"" NH_NODE "\",\"device\":\"%s\","
                "\"consumedCapacity\":{\"%s\":\"%s\"}}]",
                w[i].driver, w[i].device, w[i].key, w[i].amount);
      nh_write_claim (&h, file, name, uids[i], results);
      prepare_ok (strcmp (w[i].driver, NH_CPU_DRIVER) == 0 ? cpu_ch : mem_ch, name, uids[i]);
      /* One CPU device at a time: both would leave no shared CPU. */
      if (i == 0)
        unprepare_ok (cpu_ch, uids[i]);
    }
  /* Full now: one more MiB does not fit. */
  nh_write_claim (&h, "more.json", "more", "00000000-0000-4000-8000-0000000fffff",
                  "[{\"request\":\"r\",\"driver\":\"" NH_MEM_DRIVER "\",\"pool\":\"" NH_NODE "\",\"device\":\"numa0\","
                  "\"consumedCapacity\":{\"memory\":\"1Mi\"}}]");
  struct kc_ref ref = { "default", "more", "00000000-0000-4000-8000-0000000fffff", 7, 4, 36 };
  struct kc_reply r;
  call (mem_ch, &ref, 1, false, &r);
  char *e = entry_error (&r, false, "00000000-0000-4000-8000-0000000fffff");
  assert_non_null (strstr (e, "free"));
  free (e);
  kc_reply_done (&r);
  for (size_t i = 1; i < 4; i++)
    unprepare_ok (strcmp (w[i].driver, NH_CPU_DRIVER) == 0 ? cpu_ch : mem_ch, uids[i]);
  check_unchanged ("the end", 0);
  printf ("# %d bad-input cases, each refused with nothing changed\n", cases);
  assert_true (cases >= 100);
}

static int
setup (void **state)
{
  (void) state;
  setlocale (LC_CTYPE, "C.UTF-8");
  nh_init (&h, "hostile");
  big = malloc (3 << 20);
  memset (big, 'a', 3 << 20);
  grpc_init ();
  if (!nh_start (&h, NULL))
    {
      char *log = kc_slurp (h.log_path);
      fprintf (stderr, "the plugin did not start:\n%s\n", log ? log : "");
      free (log);
      return -1;
    }
  cpu_ch = kc_connect (h.cpu_sock);
  mem_ch = kc_connect (h.mem_sock);
  return 0;
}

static int
teardown (void **state)
{
  (void) state;
  kc_close (cpu_ch);
  kc_close (mem_ch);
  int rc = nh_stop (&h, SIGTERM);
  grpc_shutdown ();
  nh_cleanup (&h);
  free (big);
  return rc == 0 ? 0 : -1;
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_bad_uids),   cmocka_unit_test (test_bad_names),  cmocka_unit_test (test_bad_unprepare),
    cmocka_unit_test (test_quantities), cmocka_unit_test (test_claims_dir), cmocka_unit_test (test_whole_devices_after),
  };
  /* One test alone, e.g. to try it against another build of nrm. */
  if (getenv ("NRM_TEST_FILTER"))
    cmocka_set_test_filter (getenv ("NRM_TEST_FILTER"));
  return cmocka_run_group_tests_name ("hostile clients", tests, setup, teardown);
}
