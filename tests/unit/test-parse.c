/* SPDX-License-Identifier: Apache-2.0 */
/* CPU lists, Kubernetes quantities and Kubernetes names. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "driver/claimview.h"
#include "driver/kit.h"
#include "driver/names.h"
#include "driver/quantity.h"
#include "nrm/base/cleanup.h"
#include "topology/topology.h"

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

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_cpulist),
    cmocka_unit_test (test_claim_view),
    cmocka_unit_test (test_quantity),
    cmocka_unit_test (test_names),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
