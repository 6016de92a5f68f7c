/* SPDX-License-Identifier: Apache-2.0 */
/* The order statistics of bench-jitter (tests/bench/jitter-stats.h) on
 * synthetic samples whose quantiles are known by hand. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "nrm/base/xalloc.h"
#include "tests/bench/jitter-stats.h"

static uint64_t *
ramp (size_t n)
{
  uint64_t *v = xcalloc (n, sizeof (uint64_t));
  for (size_t i = 0; i < n; i++)
    v[i] = i + 1;
  return v;
}

/* 1..10000: p99 is 9900, p99.99 is 9999 (rank 9999, the last but one),
 * the max 10000. */
static void
test_ramp (void **state)
{
  (void) state;
  uint64_t *v = ramp (10000);
  assert_int_equal (jitter_rank (10000, 999900), 9999);
  assert_int_equal (jitter_quantile (v, 10000, 990000), 9900);
  assert_int_equal (jitter_quantile (v, 10000, 999900), 9999);
  assert_int_equal (jitter_quantile (v, 10000, 1000000), 10000);
  assert_int_equal (jitter_quantile (v, 10000, 500000), 5000);
  free (v);
}

/* Ranks round up, never down: 15000 samples put p99.99 at rank 14999
 * (14998.5 up). */
static void
test_round_up (void **state)
{
  (void) state;
  assert_int_equal (jitter_rank (15000, 999900), 14999);
  assert_int_equal (jitter_rank (101, 990000), 100);
  assert_int_equal (jitter_rank (100, 990000), 99);
  assert_int_equal (jitter_rank (1, 999900), 1);
  assert_int_equal (jitter_rank (1, 1), 1);
  assert_int_equal (jitter_rank (0, 999900), 0);
  /* No overflow for a long run's count. */
  assert_int_equal (jitter_rank ((size_t) 1 << 40, 1000000), (size_t) 1 << 40);
}

/* One stall in 20000 samples: below p99.99's rank it does not show there,
 * only in the max; two stalls in 10000 do show. */
static void
test_outliers (void **state)
{
  (void) state;
  uint64_t *v = xcalloc (20000, sizeof (uint64_t));
  for (size_t i = 0; i < 20000; i++)
    v[i] = i % 7 == 0 ? 5 : 3;
  v[123] = 900000;
  qsort (v, 20000, sizeof (uint64_t), jitter_cmp);
  assert_int_equal (v[0], 3);
  assert_int_equal (jitter_quantile (v, 20000, 999900), 5);
  assert_int_equal (v[19999], 900000);
  /* 17141 threes (ranks 1-17141), then 2858 fives. */
  assert_int_equal (jitter_quantile (v, 20000, 857050), 3);
  assert_int_equal (jitter_quantile (v, 20000, 857100), 5);
  for (size_t i = 0; i < 10000; i++)
    v[i] = i >= 9998 ? 700 : 1;
  assert_int_equal (jitter_quantile (v, 10000, 999900), 700);
  assert_int_equal (jitter_quantile (NULL, 0, 999900), 0);
  free (v);
}

/* The comparison sorts past 2^32 ns (a stall of seconds) and does not wrap
 * as a subtraction cast to int would. */
static void
test_sort_large (void **state)
{
  (void) state;
  uint64_t v[] = { (uint64_t) 5 << 32, 1, (uint64_t) 1 << 63, 7, 0 };
  qsort (v, 5, sizeof (uint64_t), jitter_cmp);
  assert_true (v[0] == 0 && v[1] == 1 && v[2] == 7 && v[3] == (uint64_t) 5 << 32 && v[4] == (uint64_t) 1 << 63);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_ramp),
    cmocka_unit_test (test_round_up),
    cmocka_unit_test (test_outliers),
    cmocka_unit_test (test_sort_large),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
