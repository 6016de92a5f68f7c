/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_BASE_CLOCK_H
#define NRM_BASE_CLOCK_H

#include <time.h>

/* Seconds on the monotonic clock: for durations and deadlines, which
 * the wall clock's jumps must not change. */
static inline double
nrm_mono_s (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return (double) t.tv_sec + (double) t.tv_nsec / 1e9;
}

#endif
