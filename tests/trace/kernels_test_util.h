/* Helpers the kernel tests share: a seeded generator, random and NaN-filled arrays, the ISAs this
 * CPU runs. */
#ifndef LP_TESTS_KERNELS_TEST_UTIL_H
#define LP_TESTS_KERNELS_TEST_UTIL_H

#include "test_util.h"

#include <math.h>

#include "trace/kernels/kernels.h"

/* ---- helpers */

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static inline float rnd(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 23) - 1.0);
}

static inline float *rnd_array(int64_t n)
{
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd();
    return x;
}

static inline float *nan_array(int64_t n)
{
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++)
        x[i] = NAN;
    return x;
}

/* The ISAs this CPU runs, ref first. */
static inline int available_isas(lp_isa *out)
{
    int n = 0;
    for (int isa = 0; isa < LP_ISA_COUNT; isa++)
        if (lp_kernels_set_isa((lp_isa)isa))
            out[n++] = (lp_isa)isa;
    return n;
}


#endif
