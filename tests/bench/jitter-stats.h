/* SPDX-License-Identifier: Apache-2.0 */
/* The order statistics of bench-jitter, apart so that tests/unit/test-jitter
 * checks them on synthetic data: a p99.99 that is off by one rank would
 * report the wrong sample out of the 1 in 10000 that matters. */
#ifndef NRM_TESTS_BENCH_JITTER_STATS_H
#define NRM_TESTS_BENCH_JITTER_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* The nearest rank (1-based) of the quantile ppm / 1e6 of n samples:
 * ceil(n * ppm / 1e6), in integers, so that it is exact for every count
 * with no question of rounding. */
static inline size_t
jitter_rank (size_t n, uint32_t ppm)
{
  if (n == 0)
    return 0;
  uint64_t k = ((uint64_t) n * ppm + 999999) / 1000000;
  return k == 0 ? 1 : (size_t) k;
}

static inline int
jitter_cmp (const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
  return (x > y) - (x < y);
}

/* The value at the quantile ppm / 1e6 of sorted[0..n), 0 for no samples. */
static inline uint64_t
jitter_quantile (const uint64_t *sorted, size_t n, uint32_t ppm)
{
  return n == 0 ? 0 : sorted[jitter_rank (n, ppm) - 1];
}

#endif
