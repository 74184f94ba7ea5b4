/* The one pseudo-random generator loupe uses (sampling, leak-check cuts, synthetic weights):
 *
 *   uint64_t state = seed;
 *   uint64_t draw = lp_splitmix64(&state);
 *
 * splitmix64 has a full 2^64 period and is pure integer arithmetic, so the same seed gives the
 * same draws on every platform and compiler - traces and synthetic models stay reproducible. */
#ifndef LP_CORE_RANDOM_H
#define LP_CORE_RANDOM_H

#include <stdint.h>

static inline uint64_t lp_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
