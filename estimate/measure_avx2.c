/* The AVX2+FMA loops behind lp_est_hw_measure; compiled with -mavx2 -mfma, called only after the
 * CPU was checked (measure.c). */
#include "estimate/estimate_internal.h"

#include <immintrin.h>

/* 12 independent accumulators: enough to fill two FMA pipes of 4-cycle latency. Each step is
 * acc = acc x 0.999999 + 1e-6, which stays near 1 (no overflow, no denormals). */
double lp_est_fma_loop_avx2(int64_t iters)
{
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
    __m256 a0 = _mm256_set1_ps(0.5f), a1 = _mm256_set1_ps(0.6f), a2 = _mm256_set1_ps(0.7f);
    __m256 a3 = _mm256_set1_ps(0.8f), a4 = _mm256_set1_ps(0.9f), a5 = _mm256_set1_ps(1.0f);
    __m256 a6 = _mm256_set1_ps(1.1f), a7 = _mm256_set1_ps(1.2f), a8 = _mm256_set1_ps(1.3f);
    __m256 a9 = _mm256_set1_ps(1.4f), a10 = _mm256_set1_ps(1.5f), a11 = _mm256_set1_ps(1.6f);
    for (int64_t i = 0; i < iters; i++) {
        a0 = _mm256_fmadd_ps(a0, m, c);
        a1 = _mm256_fmadd_ps(a1, m, c);
        a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c);
        a4 = _mm256_fmadd_ps(a4, m, c);
        a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c);
        a7 = _mm256_fmadd_ps(a7, m, c);
        a8 = _mm256_fmadd_ps(a8, m, c);
        a9 = _mm256_fmadd_ps(a9, m, c);
        a10 = _mm256_fmadd_ps(a10, m, c);
        a11 = _mm256_fmadd_ps(a11, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    double sum = 0;
    for (int i = 0; i < 8; i++)
        sum += (double)lanes[i];
    return sum; /* the caller keeps it, so the loop cannot be dropped */
}

/* Sum of bytes / 8 64-bit words, 128 bytes a step; buf is 32-byte aligned, bytes a multiple of
 * 128. */
uint64_t lp_est_read_avx2(const void *buf, size_t bytes)
{
    const __m256i *p = buf;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < bytes / 32; i += 4) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256(p + i));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256(p + i + 1));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256(p + i + 2));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256(p + i + 3));
    }
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, s);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
