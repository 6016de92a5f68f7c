/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_BASE_CLOCK_H
#define NRM_BASE_CLOCK_H

#include <sys/random.h>
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

/* A uniform random number below n (0 for n 0): jitter that spreads the
 * retries, watches and relists of many nodes. */
static inline unsigned
nrm_random_below (unsigned n)
{
  unsigned r = 0;
  if (getrandom (&r, sizeof (r), GRND_NONBLOCK) != sizeof (r))
    r = (unsigned) time (NULL);
  return n ? r % n : 0;
}

#endif
