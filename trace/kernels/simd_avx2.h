/* Inline AVX2 helpers shared by the kernel files compiled with AVX2 flags or wider (avx2.c,
 * matvec_avx512.c). Each carries target("avx2"), so the header compiles anywhere, but only code
 * that runs after dispatch has checked the CPU may call it. */
#ifndef LP_TRACE_KERNELS_SIMD_AVX2_H
#define LP_TRACE_KERNELS_SIMD_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* MXFP4 {u8 e; u8 qs[16]}: lp_mxfp4_half_scale of 8 consecutive blocks' E8M0 bytes at once,
 * 2^(e - 128) built from the bits, (e - 1) << 23, for e >= 2, and the subnormals 2^-128 and
 * 2^-127 as 0x00200000 << e for e = 0 and 1. The bytes are gathered in a general register (one
 * move into the vector unit instead of eight inserts). */
__attribute__((target("avx2"))) static inline __m256 lp_mxfp4_scales8_avx2(const uint8_t *b)
{
    uint64_t bytes = 0;
    for (int j = 0; j < 8; j++)
        bytes |= (uint64_t)b[17 * j] << (8 * j);
    __m256i e32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)bytes));
    __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e32, _mm256_set1_epi32(1)), 23);
    __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e32);
    __m256i is_subnormal = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e32);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, is_subnormal));
}

#endif
