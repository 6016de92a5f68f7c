/* SPDX-License-Identifier: Apache-2.0 */
/* CPU lists, Kubernetes quantities and Kubernetes names. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <stdio.h>
#include <fcntl.h>

#include <cmocka.h>

#include "driver/claimview.h"
#include "driver/kit.h"
#include "driver/names.h"
#include "nrm/base/quantity.h"
#include "nrm/base/cleanup.h"
#include "nrm/base/fs.h"
#include "nrm/base/text.h"
#include "topology/topology.h"
#include "fakefs.h"

static void
test_cpulist (void **state)
{
  static const struct
  {
    const char *in, *out;
  } good[] = { { "0-3,8,10-11", "0-3,8,10-11" }, { "", "" },   { "5", "5" }, { "3,2,1", "1-3" },
               { "0-1,1-2\n", "0-2" },           { " 7", "7" } };
  static const char *const bad[] = { "x", "1-", "-1", "3-1", "1,,2", "1,", "1 2", "0-99999", "1;2" };
  (void) state;
  for (size_t i = 0; i < sizeof (good) / sizeof (good[0]); i++)
    {
      nrm_error_t err = NULL;
      hwloc_bitmap_t set = NULL;
      assert_int_equal (nrm_cpulist_parse (good[i].in, &set, &err), 0);
      cleanup_free char *s = nrm_cpulist_format (set);
      assert_string_equal (s, good[i].out);
      hwloc_bitmap_free (set);
    }
  for (size_t i = 0; i < sizeof (bad) / sizeof (bad[0]); i++)
    {
      nrm_error_t err = NULL;
      hwloc_bitmap_t set = NULL;
      assert_int_equal (nrm_cpulist_parse (bad[i], &set, &err), -1);
      assert_null (set);
      assert_non_null (strstr (nrm_error_msg (err), "invalid CPU list"));
      nrm_error_release (&err);
    }
}

static void
test_quantity (void **state)
{
  static const struct
  {
    const char *in;
    long long nano;
  } good[] = { { "1", 1000000000LL },
               { "500m", 500000000LL },
               { "1Ki", 1024000000000LL },
               { "1.5", 1500000000LL },
               { "2e3", 2000000000000LL },
               { "1k", 1000000000000LL },
               { "+3", 3000000000LL },
               { "-1", -1000000000LL },
               { "1n", 1LL },
               { ".5", 500000000LL },
               { "1E", 0 },
               { "0", 0 } };
  /* The last ones overflow 128 bits unless checked before multiplying (found by fuzz-parsers). */
  static const char *const bad[] = { "",
                                     "Gi",
                                     "1Q",
                                     "1.2.3",
                                     "1 Gi",
                                     "1gi",
                                     "--1",
                                     "1e",
                                     "177777777777777777715Ei",
                                     "1329227995784915872903807060280344575Ei",
                                     "1.999999999999999999e27" };
  (void) state;
  for (size_t i = 0; i < sizeof (good) / sizeof (good[0]); i++)
    {
      nrm_error_t err = NULL;
      nrm_quantity_t q;
      assert_int_equal (nrm_quantity_parse (good[i].in, &q, &err), 0);
      if (strcmp (good[i].in, "1E") == 0)
        assert_true (q == (nrm_quantity_t) 1000000000000000000LL * NRM_QUANTITY_ONE);
      else
        assert_true (q == (nrm_quantity_t) good[i].nano);
    }
  for (size_t i = 0; i < sizeof (bad) / sizeof (bad[0]); i++)
    {
      nrm_error_t err = NULL;
      nrm_quantity_t q;
      assert_int_equal (nrm_quantity_parse (bad[i], &q, &err), -1);
      nrm_error_release (&err);
    }
  uint64_t b;
  nrm_error_t err = NULL;
  assert_int_equal (nrm_quantity_parse_bytes ("64Gi", &b, &err), 0);
  assert_int_equal (b, 68719476736ULL);
  assert_int_equal (nrm_quantity_parse_bytes ("1.5Ki", &b, &err), 0);
  assert_int_equal (b, 1536);
  assert_int_equal (nrm_quantity_parse_bytes ("100m", &b, &err), -1);
  nrm_error_release (&err);
  assert_int_equal (nrm_quantity_parse_bytes ("-1Gi", &b, &err), -1);
  nrm_error_release (&err);

  char buf[32];
  assert_string_equal (nrm_quantity_format (68719476736ULL, 1, buf, sizeof (buf)), "64Gi");
  assert_string_equal (nrm_quantity_format (1536ULL * 1024 * 1024, 1, buf, sizeof (buf)), "1536Mi");
  assert_string_equal (nrm_quantity_format (17, 1, buf, sizeof (buf)), "17");
  assert_string_equal (nrm_quantity_format (2048, 0, buf, sizeof (buf)), "2048");
  assert_string_equal (nrm_quantity_format (0, 1, buf, sizeof (buf)), "0");
  /* Round trip. */
  nrm_quantity_t q;
  assert_int_equal (nrm_quantity_parse (nrm_quantity_format (3ULL << 40, 1, buf, sizeof (buf)), &q, &err), 0);
  assert_true (q == (nrm_quantity_t) (3ULL << 40) * NRM_QUANTITY_ONE);
}

static void
test_names (void **state)
{
  (void) state;
  assert_true (nrm_is_dns_label ("numa0"));
  assert_true (nrm_is_dns_label ("numa0-hugepages-2mi"));
  assert_false (nrm_is_dns_label ("Numa0"));
  assert_false (nrm_is_dns_label ("-a"));
  assert_false (nrm_is_dns_label ("a-"));
  assert_false (nrm_is_dns_label ("a.b"));
  assert_false (nrm_is_dns_label ("a123456789012345678901234567890123456789012345678901234567890123"));
  assert_true (nrm_is_dns_subdomain ("cpu.nrm.io", 63));
  assert_false (nrm_is_dns_subdomain ("cpu..io", 63));
  assert_false (nrm_is_dns_subdomain ("", 63));
  /* Kubernetes limits a subdomain's length, not its labels'. */
  assert_true (
      nrm_is_dns_subdomain ("a1234567890123456789012345678901234567890123456789012345678901234567890.io", 253));
  assert_false (
      nrm_is_dns_subdomain ("a1234567890123456789012345678901234567890123456789012345678901234567890.io", 63));
  assert_true (nrm_is_qualified_name ("numaNode"));
  assert_true (nrm_is_qualified_name ("resource.kubernetes.io/numaNode"));
  assert_false (nrm_is_qualified_name ("1abc"));
  assert_false (nrm_is_qualified_name ("a/b/c"));
  assert_false (nrm_is_qualified_name ("/x"));
  assert_false (nrm_is_qualified_name ("a23456789012345678901234567890123"));
  char *p = nrm_pagesize_name (2 * 1024 * 1024);
  assert_string_equal (p, "2Mi");
  free (p);
  p = nrm_pagesize_name (1024ULL * 1024 * 1024);
  assert_string_equal (p, "1Gi");
  free (p);
}

/* The devices of a NUMA node: made and read by one helper. */
static void
test_numa_names (void **state)
{
  (void) state;
  char b[NRM_NUMA_NAME_MAX];
  unsigned node = 0;
  enum nrm_numa_name_kind kind;
  assert_string_equal (nrm_numa_name (b, sizeof (b), 3, NRM_NUMA_NAME_NODE, NULL), "numa3");
  assert_string_equal (nrm_numa_name (b, sizeof (b), 0, NRM_NUMA_NAME_ISOLATED, NULL), "numa0-isolated");
  assert_string_equal (nrm_numa_name (b, sizeof (b), 12, NRM_NUMA_NAME_HUGEPAGES, "1Gi"), "numa12-hugepages-1gi");
  assert_true (nrm_numa_name_parse ("numa12-hugepages-1gi", &node, &kind));
  assert_int_equal (node, 12);
  assert_int_equal (kind, NRM_NUMA_NAME_HUGEPAGES);
  assert_true (nrm_numa_name_parse ("numa7-isolated", &node, &kind));
  assert_int_equal (node, 7);
  assert_int_equal (kind, NRM_NUMA_NAME_ISOLATED);
  assert_true (nrm_numa_name_parse ("numa0", &node, &kind));
  assert_int_equal (kind, NRM_NUMA_NAME_NODE);
  const char *bad[] = { "numa", "numa-1", "numa1x", "numa1-hugepages-", "l3-0", "core4", "Numa1", NULL };
  for (size_t i = 0; bad[i]; i++)
    assert_false (nrm_numa_name_parse (bad[i], &node, &kind));
}

/* A claim's allocation as one driver sees it: its own results (in this
 * node's pool), every driver's results (a GPU of another vendor too, so a
 * CPU driver can align with it), its opaque configuration only; the
 * PodGroup it is reserved for. */
static void
test_claim_view (void **state)
{
  (void) state;
  json_error_t je;
  cleanup_json json_t *claim = json_loads (
      "{\"metadata\":{\"uid\":\"u1\"},\"status\":{\"reservedFor\":[{\"apiGroup\":\"scheduling.k8s.io\","
      "\"resource\":\"podgroups\",\"name\":\"g\",\"uid\":\"x\"}],\"allocation\":{\"devices\":{\"results\":["
      "{\"request\":\"gpu\",\"driver\":\"gpu.nvidia.com\",\"pool\":\"n1\",\"device\":\"gpu-0\"},"
      "{\"request\":\"cpus/big\",\"driver\":\"cpu.nrm.io\",\"pool\":\"n1\",\"device\":\"numa1\","
      "\"consumedCapacity\":{\"cpus\":\"4\"}}],"
      "\"config\":[{\"opaque\":{\"driver\":\"gpu.nvidia.com\",\"parameters\":{}}},"
      "{\"opaque\":{\"driver\":\"cpu.nrm.io\",\"parameters\":{\"kind\":\"CPUConfig\"}}}]}}}}",
      0, &je);
  assert_non_null (claim);
  struct nrm_allocation a;
  nrm_error_t err = NULL;
  memset (&a, 0, sizeof (a));
  assert_int_equal (nrm_claim_allocation ("cpu.nrm.io", "n1", claim, "u1", &a, &err), 0);
  assert_int_equal (a.view.n_results, 1);
  assert_string_equal (a.view.results[0].device, "numa1");
  assert_string_equal (a.view.results[0].request, "cpus/big");
  assert_int_equal (a.view.n_all, 2);
  assert_string_equal (a.view.all[0].driver, "gpu.nvidia.com");
  assert_string_equal (a.view.all[0].device, "gpu-0");
  assert_int_equal (json_array_size (a.view.config), 1);
  assert_string_equal (
      json_string_value (json_object_get (
          json_object_get (json_object_get (json_array_get (a.view.config, 0), "opaque"), "parameters"), "kind")),
      "CPUConfig");
  assert_true (a.view.claim == claim);
  assert_string_equal (nrm_kit_pod_group (claim), "g");
  nrm_allocation_done (&a);

  /* Another node's pool, a replaced claim, a driver with nothing here. */
  memset (&a, 0, sizeof (a));
  assert_int_equal (nrm_claim_allocation ("cpu.nrm.io", "n2", claim, "u1", &a, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "not in this node's pool `n2`"));
  nrm_error_release (&err);
  nrm_allocation_done (&a);
  memset (&a, 0, sizeof (a));
  assert_int_equal (nrm_claim_allocation ("cpu.nrm.io", "n1", claim, "u2", &a, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "replaced"));
  nrm_error_release (&err);
  nrm_allocation_done (&a);
  memset (&a, 0, sizeof (a));
  assert_int_equal (nrm_claim_allocation ("memory.nrm.io", "n1", claim, "u1", &a, &err), -1);
  assert_non_null (strstr (nrm_error_msg (err), "no device of driver memory.nrm.io"));
  nrm_error_release (&err);
  nrm_allocation_done (&a);
  json_object_del (json_object_get (claim, "status"), "reservedFor");
  assert_null (nrm_kit_pod_group (claim));
}

/* Untrusted text in messages: bounded, printable, valid UTF-8. */
static void
test_text (void **state)
{
  (void) state;
  static const struct
  {
    const char *s;
    size_t len;
    bool valid;
  } u[] = {
    { "", 0, true },      { "abc", 3, true },       { "\xc3\xbc", 2, true },      { "\xf0\x9f\x98\x80", 4, true },
    { "\xff", 1, false }, { "\xc0\xaf", 2, false }, { "\xed\xa0\x80", 3, false }, { "\xf4\x90\x80\x80", 4, false },
    { "\xc3", 1, false }, { "a\0b", 3, true },      { "\xe2\x82", 2, false },     { "\xef\xbf\xbf", 3, true },
  };
  for (size_t i = 0; i < sizeof (u) / sizeof (u[0]); i++)
    if (nrm_utf8_valid (u[i].s, u[i].len) != u[i].valid)
      fail_msg ("case %zu: valid is %d", i, !u[i].valid);

  char *q = nrm_quote ("u1\0/../x", 8, 64);
  assert_string_equal (q, "u1\\0/../x");
  free (q);
  q = nrm_quote ("a\xff\n\\b", 5, 64);
  assert_string_equal (q, "a\\xff\\n\\\\b");
  free (q);
  q = nrm_quote ("abcdefgh", 8, 3);
  assert_string_equal (q, "abc...");
  free (q);
  /* A character cut by the bound is left out whole. */
  q = nrm_quote ("ab\xc3\xbc", 4, 3);
  assert_string_equal (q, "ab...");
  free (q);

  cleanup_free char *big = malloc (3 << 20);
  memset (big, 'x', 3 << 20);
  big[(3 << 20) - 1] = '\0';
  q = nrm_text_bound (big, 1024);
  assert_int_equal (strlen (q), 1024);
  assert_string_equal (q + 1021, "...");
  free (q);
  q = nrm_text_bound ("ok \xff\xfe end", 1024);
  assert_string_equal (q, "ok ?? end");
  assert_true (nrm_utf8_valid (q, strlen (q)));
  free (q);
  q = nrm_text_bound ("short", 1024);
  assert_string_equal (q, "short");
  free (q);
  /* What kubectl nrm prints from the API: no escape reaches the terminal
   * (ESC, BEL, the C1 CSI as UTF-8, a stray byte), text and newlines stay. */
  char term[] = "a\x1b[2Jb\x07"
                "c\xc2\x9b"
                "31md\xff"
                "e\n\xc3\xbc\x7f";
  nrm_text_defang (term, strlen (term));
  assert_string_equal (term, "a?[2Jb?c??31md?e\n\xc3\xbc?");
  /* Found by fuzz-parsers: a text just under the bound is not cut (it was
   * cut and "..." written past the buffer). */
  char under[99];
  memset (under, '\x89', 98);
  under[98] = '\0';
  q = nrm_text_bound (under, 100);
  assert_int_equal (strlen (q), 98);
  assert_null (strstr (q, "..."));
  free (q);
}

/* consumedCapacity against what the device publishes, exactly. */
static void
test_consumed_checked (void **state)
{
  (void) state;
  json_t *dev
      = json_loads ("{\"capacity\":{\"memory\":{\"value\":\"18421Mi\",\"requestPolicy\":{\"default\":\"1Mi\","
                    "\"validRange\":{\"min\":\"1Mi\",\"step\":\"1Mi\"}}},"
                    "\"cpus\":{\"value\":\"1\",\"requestPolicy\":{\"default\":\"1\",\"validValues\":[\"1\"]}}}}",
                    0, NULL);
  assert_non_null (dev);
  static const struct
  {
    const char *key, *amount, *want; /* want: NULL accepted, else in the error */
  } c[] = {
    { "memory", "1Mi", NULL },
    { "memory", "18421Mi", NULL },
    { "memory", "3Mi", NULL },
    { "memory", NULL, NULL }, /* the default */
    { "memory", "18422Mi", "more than the device's 19315818496" },
    { "memory", "8Ei", "more than the device's" },
    { "memory", "16Ei", "more than the device's" },
    { "memory", "10E", "more than the device's" },
    { "memory", "1", "below the device's minimum 1048576" },
    { "memory", "1.5Mi", "whole steps" },
    { "memory", "-1Mi", "must be positive" },
    { "memory", "0", "must be positive" },
    { "memory", "1e40", "not a quantity" },
    { "cpus", "1", NULL },
    { "cpus", "2", "more than the device's 1" },
    { "cpus", "0.5", "none of the device's valid values" },
    { "gpus", "1", "has no capacity `gpus`" },
  };
  for (size_t i = 0; i < sizeof (c) / sizeof (c[0]); i++)
    {
      json_t *consumed = c[i].amount ? json_pack ("{s:s}", c[i].key, c[i].amount) : NULL;
      struct nrm_alloc_result r = { .request = "r", .driver = "d", .pool = "p", .device = "dev", .consumed = consumed };
      nrm_quantity_t q = 0;
      nrm_error_t err = NULL;
      int rc = nrm_kit_consumed_checked (&r, dev, c[i].key, &q, &err);
      if (c[i].want == NULL && rc < 0)
        fail_msg ("%s %s: %s", c[i].key, c[i].amount, nrm_error_msg (err));
      if (c[i].want && (rc == 0 || strstr (nrm_error_msg (err), c[i].want) == NULL))
        fail_msg ("%s %s: `%s` lacks `%s`", c[i].key, c[i].amount, rc ? nrm_error_msg (err) : "accepted", c[i].want);
      if (c[i].want == NULL && c[i].amount == NULL)
        assert_true (q == 1048576 * NRM_QUANTITY_ONE);
      nrm_error_release (&err);
      json_decref (consumed);
    }
  json_decref (dev);
  char buf[64];
  assert_string_equal (nrm_quantity_text ((nrm_quantity_t) 18446744073709551615ULL * NRM_QUANTITY_ONE * 10, buf, 64),
                       "184467440737095516150");
  assert_string_equal (nrm_quantity_text (NRM_QUANTITY_ONE / 2, buf, 64), "0.5");
  assert_string_equal (nrm_quantity_text (-3 * NRM_QUANTITY_ONE, buf, 64), "-3");
}

static bool
exists (const char *dir, const char *name)
{
  char path[512];
  snprintf (path, sizeof (path), "%s/%s", dir, name);
  return access (path, F_OK) == 0;
}

/* Replacing writes leave no temporary file, and the temporary files of
 * interrupted writes are removed unless their writer still holds them. */
static void
test_write_atomic (void **state)
{
  (void) state;
  char dir[] = "/tmp/nrm-fs-XXXXXX", sub[600], path[600];
  nrm_error_t err = NULL;
  assert_non_null (mkdtemp (dir));
  snprintf (path, sizeof (path), "%s/cp.json", dir);
  for (int i = 0; i < 20; i++)
    assert_int_equal (nrm_write_atomic (path, "{\"a\": 1}", 8, 0600, &err), 0);
  cleanup_free char *text = NULL;
  assert_int_equal (nrm_read_file (path, 64, &text, NULL, &err), 0);
  assert_string_equal (text, "{\"a\": 1}");
  struct stat st;
  assert_int_equal (stat (path, &st), 0);
  assert_int_equal (st.st_mode & 07777, 0600);

  /* Left by killed writers: here, one level down and three levels down
   * (too deep for depth 2); a live writer's; a FIFO and a file that only
   * look alike. */
  fake_put (dir, "cp.json.tmp.a1b2c3", "{}");
  fake_put (dir, "spec.json.tmp.zzzzzz", "{}");
  snprintf (sub, sizeof (sub), "%s/containers", dir);
  mkdir (sub, 0700);
  fake_put (sub, "rec.json.tmp.q1w2e3", "{}");
  snprintf (sub, sizeof (sub), "%s/a/b/c", dir);
  assert_int_equal (nrm_mkdir_p (sub, 0700, &err), 0);
  fake_put (sub, "deep.json.tmp.123456", "{}");
  fake_put (dir, "live.json.tmp.777777", "{}");
  snprintf (path, sizeof (path), "%s/live.json.tmp.777777", dir);
  int live = open (path, O_RDONLY);
  assert_int_equal (flock (live, LOCK_EX), 0);
  snprintf (path, sizeof (path), "%s/fifo.tmp.abcdef", dir);
  assert_int_equal (mkfifo (path, 0600), 0);
  fake_put (dir, "notes.tmp.txt", "{}");
  fake_put (dir, "x.tmp.", "{}");

  unsigned removed = 0;
  assert_int_equal (nrm_remove_stale_temps (dir, 2, &removed, &err), 0);
  assert_int_equal (removed, 3);
  assert_false (exists (dir, "cp.json.tmp.a1b2c3"));
  assert_false (exists (dir, "spec.json.tmp.zzzzzz"));
  assert_false (exists (dir, "containers/rec.json.tmp.q1w2e3"));
  assert_true (exists (dir, "a/b/c/deep.json.tmp.123456"));
  assert_true (exists (dir, "live.json.tmp.777777"));
  assert_true (exists (dir, "fifo.tmp.abcdef"));
  assert_true (exists (dir, "notes.tmp.txt"));
  assert_true (exists (dir, "x.tmp."));
  assert_true (exists (dir, "cp.json"));
  close (live);
  assert_int_equal (nrm_remove_stale_temps (dir, 3, &removed, &err), 0);
  assert_int_equal (removed, 5);
  assert_false (exists (dir, "live.json.tmp.777777"));
  assert_int_equal (nrm_remove_stale_temps ("/tmp/nrm-no-such-dir-here", 1, NULL, &err), 0);

  char cmd[100];
  snprintf (cmd, sizeof (cmd), "rm -rf '%s'", dir);
  assert_int_equal (system (cmd), 0);
}

static unsigned
count_temps (const char *dir)
{
  unsigned n = 0;
  DIR *d = opendir (dir);
  struct dirent *de;
  while (d && (de = readdir (d)) != NULL)
    n += strstr (de->d_name, ".tmp.") != NULL;
  if (d)
    closedir (d);
  return n;
}

/* Staged writes: two stages of one path at once, committed in order, leave
 * the second; a stage is held from the cleaner of interrupted writes until
 * its commit; an abort leaves the file as it was; a commit that cannot
 * rename says so, removes its file and tells it did not rename. */
static void
test_write_staged (void **state)
{
  (void) state;
  char dir[] = "/tmp/nrm-fs-XXXXXX", path[600];
  nrm_error_t err = NULL;
  cleanup_free char *text = NULL;
  assert_non_null (mkdtemp (dir));
  snprintf (path, sizeof (path), "%s/cp.json", dir);
  struct nrm_staged_write a, b;
  assert_int_equal (nrm_write_stage (path, "first", 5, 0600, true, &a, &err), 0);
  assert_int_equal (nrm_write_stage (path, "second", 6, 0600, true, &b, &err), 0);
  assert_int_equal (count_temps (dir), 2);
  unsigned removed = 0;
  assert_int_equal (nrm_remove_stale_temps (dir, 0, &removed, &err), 0);
  assert_int_equal (removed, 0);
  assert_int_equal (access (path, F_OK), -1);
  assert_int_equal (nrm_write_commit (&a, true, &err), 0);
  assert_true (a.renamed);
  assert_int_equal (nrm_read_file (path, 64, &text, NULL, &err), 0);
  assert_string_equal (text, "first");
  free (TAKE_PTR (text));
  assert_int_equal (nrm_write_commit (&b, true, &err), 0);
  assert_int_equal (nrm_read_file (path, 64, &text, NULL, &err), 0);
  assert_string_equal (text, "second");
  free (TAKE_PTR (text));
  assert_int_equal (count_temps (dir), 0);

  assert_int_equal (nrm_write_stage (path, "third", 5, 0600, true, &a, &err), 0);
  nrm_write_abort (&a);
  assert_null (a.tmp);
  assert_int_equal (count_temps (dir), 0);
  assert_int_equal (nrm_read_file (path, 64, &text, NULL, &err), 0);
  assert_string_equal (text, "second");

  /* The path became a non-empty directory: the rename fails. */
  assert_int_equal (nrm_write_stage (path, "fourth", 6, 0600, true, &a, &err), 0);
  char cmd[1400];
  snprintf (cmd, sizeof (cmd), "rm -f '%s' && mkdir -p '%s/x'", path, path);
  assert_int_equal (system (cmd), 0);
  assert_int_equal (nrm_write_commit (&a, true, &err), -1);
  assert_false (a.renamed);
  assert_non_null (strstr (nrm_error_msg (err), "cannot rename"));
  nrm_error_release (&err);
  assert_int_equal (count_temps (dir), 0);

  snprintf (cmd, sizeof (cmd), "rm -rf '%s'", dir);
  assert_int_equal (system (cmd), 0);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_cpulist),          cmocka_unit_test (test_claim_view),
    cmocka_unit_test (test_quantity),         cmocka_unit_test (test_names),
    cmocka_unit_test (test_numa_names),       cmocka_unit_test (test_text),
    cmocka_unit_test (test_consumed_checked), cmocka_unit_test (test_write_atomic),
    cmocka_unit_test (test_write_staged),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
