/* The GEMM's AVX2 + FMA micro-kernel and panel packers (compiled with avx2.c's flags; dispatch.c
 * only selects them after checking the CPU). Their own file because avx2.c's table, the
 * attention tiles (attention_avx2.c) and AVX-512's table (avx512.c) all use them. */
#include "trace/kernels/kernels.h"

#include <immintrin.h>

#include "trace/kernels/kernels_internal.h"

/* ---- GEMM micro-kernel: a 6x16 tile of C in 12 ymm accumulators; per k step two B loads, six
 * A broadcasts, twelve FMAs. Edge tiles are computed in full (the packed panels are zero-padded)
 * and only their real part is stored. */
void lp_gemm_avx2_6x16(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                       int m_edge, int n_edge, bool accumulate)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int i = 0; i < m_edge; i++)
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);

#define LP_STEP(off_a, off_b)                                                                      \
    do {                                                                                           \
        __m256 b0 = _mm256_load_ps(b + (off_b));                                                   \
        __m256 b1 = _mm256_load_ps(b + (off_b) + 8);                                               \
        __m256 av = _mm256_broadcast_ss(a + (off_a) + 0);                                          \
        c00 = _mm256_fmadd_ps(av, b0, c00);                                                        \
        c01 = _mm256_fmadd_ps(av, b1, c01);                                                        \
        av = _mm256_broadcast_ss(a + (off_a) + 1);                                                 \
        c10 = _mm256_fmadd_ps(av, b0, c10);                                                        \
        c11 = _mm256_fmadd_ps(av, b1, c11);                                                        \
        av = _mm256_broadcast_ss(a + (off_a) + 2);                                                 \
        c20 = _mm256_fmadd_ps(av, b0, c20);                                                        \
        c21 = _mm256_fmadd_ps(av, b1, c21);                                                        \
        av = _mm256_broadcast_ss(a + (off_a) + 3);                                                 \
        c30 = _mm256_fmadd_ps(av, b0, c30);                                                        \
        c31 = _mm256_fmadd_ps(av, b1, c31);                                                        \
        av = _mm256_broadcast_ss(a + (off_a) + 4);                                                 \
        c40 = _mm256_fmadd_ps(av, b0, c40);                                                        \
        c41 = _mm256_fmadd_ps(av, b1, c41);                                                        \
        av = _mm256_broadcast_ss(a + (off_a) + 5);                                                 \
        c50 = _mm256_fmadd_ps(av, b0, c50);                                                        \
        c51 = _mm256_fmadd_ps(av, b1, c51);                                                        \
    } while (0)

    /* One k step per iteration: unrolling by hand made GCC shuffle and spill accumulators. */
    int64_t p = 0;
    for (; p + 2 <= kc; p += 2) {
        LP_STEP(0, 0);
        LP_STEP(6, 16);
        a += 12;
        b += 32;
    }
    for (; p < kc; p++) {
        LP_STEP(0, 0);
        a += 6;
        b += 16;
    }
#undef LP_STEP

    if (m_edge == 6 && n_edge == 16) {
#define LP_STORE_ROW(i, r0, r1)                                                                    \
    do {                                                                                           \
        float *row = c + (i) * ldc;                                                                \
        if (accumulate) {                                                                          \
            r0 = _mm256_add_ps(_mm256_loadu_ps(row), r0);                                          \
            r1 = _mm256_add_ps(_mm256_loadu_ps(row + 8), r1);                                      \
        }                                                                                          \
        _mm256_storeu_ps(row, r0);                                                                 \
        _mm256_storeu_ps(row + 8, r1);                                                             \
    } while (0)
        LP_STORE_ROW(0, c00, c01);
        LP_STORE_ROW(1, c10, c11);
        LP_STORE_ROW(2, c20, c21);
        LP_STORE_ROW(3, c30, c31);
        LP_STORE_ROW(4, c40, c41);
        LP_STORE_ROW(5, c50, c51);
#undef LP_STORE_ROW
        return;
    }
    float tile[6][16];
    _mm256_storeu_ps(tile[0], c00);
    _mm256_storeu_ps(tile[0] + 8, c01);
    _mm256_storeu_ps(tile[1], c10);
    _mm256_storeu_ps(tile[1] + 8, c11);
    _mm256_storeu_ps(tile[2], c20);
    _mm256_storeu_ps(tile[2] + 8, c21);
    _mm256_storeu_ps(tile[3], c30);
    _mm256_storeu_ps(tile[3] + 8, c31);
    _mm256_storeu_ps(tile[4], c40);
    _mm256_storeu_ps(tile[4] + 8, c41);
    _mm256_storeu_ps(tile[5], c50);
    _mm256_storeu_ps(tile[5] + 8, c51);
    for (int i = 0; i < m_edge; i++) {
        float *row = c + i * ldc;
        for (int j = 0; j < n_edge; j++)
            row[j] = accumulate ? row[j] + tile[i][j] : tile[i][j];
    }
}

/* ---- packing: 8x8 transposes in registers instead of one strided store per element */

static void transpose8(__m256 r[8])
{
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* 16-column B panel: two 8x8 transposes per 8 k steps, stored as whole 16-float rows (also
 * AVX-512's 16-row A panel, the same layout). */
void lp_gemm_pack_16_avx2(const float *src, int64_t ld, int64_t rows, int64_t kc, float *dst)
{
    int64_t p = 0;
    for (; p + 8 <= kc; p += 8) {
        for (int half = 0; half < 2; half++) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) {
                int64_t row = half * 8 + i;
                r[i] = row < rows ? _mm256_loadu_ps(src + row * ld + p) : _mm256_setzero_ps();
            }
            transpose8(r);
            for (int j = 0; j < 8; j++)
                _mm256_store_ps(dst + (p + j) * 16 + half * 8, r[j]);
        }
    }
    for (; p < kc; p++)
        for (int64_t row = 0; row < 16; row++)
            dst[p * 16 + row] = row < rows ? src[row * ld + p] : 0.0f;
}

/* 6-row A panel: one 8x8 transpose (two zero rows) per 8 k steps; each k step's 6 values are
 * written with an 8-wide store that the next step overwrites, the last one masked. */
void lp_gemm_pack_a6_avx2(const float *src, int64_t ld, int64_t rows, int64_t kc, float *dst)
{
    const __m256i six = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
    int64_t p = 0;
    for (; p + 8 <= kc; p += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; i++)
            r[i] = i < rows && i < 6 ? _mm256_loadu_ps(src + i * ld + p) : _mm256_setzero_ps();
        transpose8(r);
        for (int j = 0; j < 7; j++)
            _mm256_storeu_ps(dst + (p + j) * 6, r[j]);
        _mm256_maskstore_ps(dst + (p + 7) * 6, six, r[7]);
    }
    for (; p < kc; p++)
        for (int64_t i = 0; i < 6; i++)
            dst[p * 6 + i] = i < rows ? src[i * ld + p] : 0.0f;
}
