/* SPDX-License-Identifier: Apache-2.0 */
#ifndef NRM_TEST_RNG_H
#define NRM_TEST_RNG_H

#include <stdint.h>

/* xorshift64*: the same seed gives the same churn everywhere, for the
 * placement tests and the placement benchmark alike. */
static inline uint32_t
rng_next (uint64_t *state)
{
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return (uint32_t) ((*state * 2685821657736338717ULL) >> 32);
}

#endif
