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

/* The 8 six-bit scales and 8 mins of a Q4_K block from its 12 packed bytes (the layout of
 * lp_q4_k_scale_min), four bytes per 32-bit lane at once: scales in bytes 0..7 of the result,
 * mins in bytes 8..15. With p0, p1, p2 the packed words (bytes 0-3, 4-7, 8-11): scales 0-3 =
 * p0 & 0x3f, scales 4-7 = (p2 & 0x0f) | (top two bits of p0's bytes) << 4, mins 0-3 = p1 & 0x3f,
 * mins 4-7 = (p2 >> 4 & 0x0f) | (top two bits of p1's bytes) << 4. Reads 16 bytes from packed
 * (the 4 past the scales are the block's first nibbles). */
__attribute__((target("avx2"))) static inline __m128i
lp_q4_k_scales_mins_avx2(const uint8_t *packed)
{
    __m128i p = _mm_loadu_si128((const __m128i *)(const void *)packed);
    __m128i low = _mm_shuffle_epi32(p, _MM_SHUFFLE(2, 1, 2, 0)); /* p0 p2 p1 p2 */
    low = _mm_srlv_epi32(low, _mm_setr_epi32(0, 0, 0, 4));
    low = _mm_and_si128(low, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    __m128i top = _mm_shuffle_epi32(p, _MM_SHUFFLE(1, 1, 0, 0)); /* p0 p0 p1 p1 */
    top = _mm_and_si128(_mm_srli_epi32(top, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(low, top);
}

#endif
