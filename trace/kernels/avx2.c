/* AVX2 + FMA + F16C kernels (this file alone is compiled with -mavx2 -mfma -mf16c; dispatch.c
 * only selects it after checking the CPU). Intrinsics only; the algorithms are ref.c's. */
#include "trace/kernels/kernels.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "inspect/formats/quant.h"
#include "trace/kernels/kernels_internal.h"

/* ---- GEMM micro-kernel: a 6x16 tile of C in 12 ymm accumulators; per k step two B loads, six
 * A broadcasts, twelve FMAs. Edge tiles are computed in full (the packed panels are zero-padded)
 * and only their real part is stored. */
static void gemm_f32_avx2_6x16(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
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
static void pack_a_6_avx2(const float *src, int64_t ld, int64_t rows, int64_t kc, float *dst)
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

/* ---- conversions */

static void f16_to_f32_avx2(const void *src, float *dst, int64_t n)
{
    const uint8_t *bytes = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(bytes + 2 * i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++)
        dst[i] = lp_f16_to_f32(lp_load_u16(bytes + 2 * i));
}

static void bf16_to_f32_avx2(const void *src, float *dst, int64_t n)
{
    const uint8_t *bytes = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(bytes + 2 * i));
        __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
    }
    for (; i < n; i++)
        dst[i] = lp_bf16_to_f32(lp_load_u16(bytes + 2 * i));
}

/* ---- helpers */

static float hsum(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static float hmax(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_max_ps(lo, hi);
    lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_max_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

/* exp(x) with Cephes' degree-6 polynomial on [-ln2/2, ln2/2] after range reduction; about 2 ulp.
 * Inputs below -87.3 (including -inf) give 0; above 88 saturate at exp(88); NaN stays NaN. */
static __m256 exp_avx2(__m256 x)
{
    const __m256 lower = _mm256_set1_ps(-87.33654f);
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q), input = x;
    __m256 underflow = _mm256_cmp_ps(x, lower, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lower), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    __m256 r2 = _mm256_mul_ps(r, r);
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 result = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    /* NaN in, NaN out: a broken model must not turn into plausible probabilities */
    return _mm256_blendv_ps(_mm256_andnot_ps(underflow, result), input, nan);
}

/* Masked load/store of the tail (n % 8 elements). */
static __m256i tail_mask(int64_t rem)
{
    static const int32_t bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(const void *)(bits + 8 - rem));
}

static float dot_avx2(const float *x, const float *y, int64_t n)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
    if (i < n) {
        __m256i mask = tail_mask(n - i);
        acc1 = _mm256_fmadd_ps(_mm256_maskload_ps(x + i, mask), _mm256_maskload_ps(y + i, mask), acc1);
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

static void axpy_avx2(float *y, float a, const float *x, int64_t n)
{
    __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] += a * x[i];
}

static void scale_avx2(float *y, float a, int64_t n)
{
    __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        y[i] *= a;
}

/* Four keys at a time share each load of q; their four sums are reduced together. */
static void scores_avx2(const float *q, const float *k, int64_t k_stride, int64_t n_keys,
                        int64_t head_dim, float scale, float *s)
{
    int64_t j = 0;
    if (head_dim % 8 == 0) {
        for (; j + 4 <= n_keys; j += 4) {
            const float *k0 = k + j * k_stride, *k1 = k0 + k_stride, *k2 = k1 + k_stride,
                        *k3 = k2 + k_stride;
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
            for (int64_t d = 0; d < head_dim; d += 8) {
                __m256 qv = _mm256_loadu_ps(q + d);
                a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + d), a0);
                a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + d), a1);
                a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + d), a2);
                a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + d), a3);
            }
            /* hadd pairs: lanes end up as (a0, a1, a2, a3) sums per 128-bit half */
            __m256 h01 = _mm256_hadd_ps(a0, a1), h23 = _mm256_hadd_ps(a2, a3);
            __m256 h = _mm256_hadd_ps(h01, h23);
            __m128 sum = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
            _mm_storeu_ps(s + j, _mm_mul_ps(sum, _mm_set1_ps(scale)));
        }
    }
    for (; j < n_keys; j++)
        s[j] = dot_avx2(q, k + j * k_stride, head_dim) * scale;
}

/* 64 output columns stay in eight registers while every key's row is added in. */
static void weighted_sum_avx2(float *out, const float *w, const float *v, int64_t v_stride,
                              int64_t n_keys, int64_t v_dim)
{
    int64_t d = 0;
    for (; d + 64 <= v_dim; d += 64) {
        __m256 o[8];
        for (int i = 0; i < 8; i++)
            o[i] = _mm256_loadu_ps(out + d + 8 * i);
        for (int64_t j = 0; j < n_keys; j++) {
            __m256 wj = _mm256_set1_ps(w[j]);
            const float *vj = v + j * v_stride + d;
            for (int i = 0; i < 8; i++)
                o[i] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(vj + 8 * i), o[i]);
        }
        for (int i = 0; i < 8; i++)
            _mm256_storeu_ps(out + d + 8 * i, o[i]);
    }
    if (d < v_dim)
        for (int64_t j = 0; j < n_keys; j++)
            axpy_avx2(out + d, w[j], v + j * v_stride + d, v_dim - d);
}

static float exp_sum_avx2(float *x, int64_t n, float max)
{
    __m256 mv = _mm256_set1_ps(max), acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (i < n) {
        __m256i mask = tail_mask(n - i);
        __m256 e = exp_avx2(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), mv));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(mask));
        _mm256_maskstore_ps(x + i, mask, e);
        acc = _mm256_add_ps(acc, e);
    }
    return hsum(acc);
}

static float sum_sq_avx2(const float *x, int64_t n)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        acc0 = _mm256_fmadd_ps(v0, v0, acc0);
        acc1 = _mm256_fmadd_ps(v1, v1, acc1);
    }
    float sum = hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++)
        sum += x[i] * x[i];
    return sum;
}

static void rmsnorm_avx2(float *y, const float *x, const float *weight, int64_t n, float eps,
                         bool weight_plus_one)
{
    float mean_sq = sum_sq_avx2(x, n) / (float)(n > 0 ? n : 1);
    float inv_rms = 1.0f / sqrtf(mean_sq + eps);
    __m256 inv = _mm256_set1_ps(inv_rms), one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), inv);
        if (weight) {
            __m256 w = _mm256_loadu_ps(weight + i);
            if (weight_plus_one)
                w = _mm256_add_ps(w, one);
            v = _mm256_mul_ps(v, w);
        }
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; i++) {
        float w = weight ? (weight_plus_one ? 1.0f + weight[i] : weight[i]) : 1.0f;
        y[i] = x[i] * inv_rms * w;
    }
}

static void layernorm_avx2(float *y, const float *x, const float *weight, const float *bias,
                           int64_t n, float eps)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + i));
    float sum = hsum(acc);
    for (; i < n; i++)
        sum += x[i];
    float mean = sum / (float)(n > 0 ? n : 1);
    __m256 mv = _mm256_set1_ps(mean);
    acc = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), mv);
        acc = _mm256_fmadd_ps(d, d, acc);
    }
    float var = hsum(acc);
    for (; i < n; i++)
        var += (x[i] - mean) * (x[i] - mean);
    var /= (float)(n > 0 ? n : 1);
    float inv_std = 1.0f / sqrtf(var + eps);
    __m256 inv = _mm256_set1_ps(inv_std);
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv), inv);
        if (weight)
            v = _mm256_mul_ps(v, _mm256_loadu_ps(weight + i));
        if (bias)
            v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
        _mm256_storeu_ps(y + i, v);
    }
    lp_layernorm_scalar(y, x, weight, bias, i, n, mean, inv_std);
}

static void softmax_avx2(float *x, int64_t n)
{
    if (n <= 0)
        return;
    __m256 mv = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
    float max = hmax(mv);
    for (; i < n; i++)
        if (x[i] > max)
            max = x[i];
    if (max == -INFINITY) {
        memset(x, 0, (size_t)n * sizeof *x);
        return;
    }
    float sum = exp_sum_avx2(x, n, max);
    scale_avx2(x, 1.0f / sum, n);
}

static __m256 silu8(__m256 v)
{
    __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), v));
    return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* tanh(u) = 1 - 2 / (exp(2u) + 1); absolute error ~1e-7, enough for GELU. */
static __m256 tanh8(__m256 u)
{
    __m256 e = exp_avx2(_mm256_add_ps(u, u));
    return _mm256_sub_ps(_mm256_set1_ps(1.0f),
                         _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
}

/* erf by Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7), odd symmetry restored at the
 * end. */
static __m256 erf8(__m256 x)
{
    __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
    __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f),
                             _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), ax, _mm256_set1_ps(1.0f)));
    __m256 p = _mm256_set1_ps(1.061405429f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
    p = _mm256_mul_ps(p, t);
    __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(ax, ax)));
    __m256 y = _mm256_fnmadd_ps(p, e, _mm256_set1_ps(1.0f));
    return _mm256_or_ps(y, sign);
}

static __m256 gelu8(__m256 v, bool tanh_approx)
{
    __m256 half_v = _mm256_mul_ps(_mm256_set1_ps(0.5f), v);
    __m256 inner;
    if (tanh_approx) {
        __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
        __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                 _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), v3, v));
        inner = tanh8(u);
    } else {
        inner = erf8(_mm256_mul_ps(v, _mm256_set1_ps(0.7071067811865476f)));
    }
    return _mm256_mul_ps(half_v, _mm256_add_ps(_mm256_set1_ps(1.0f), inner));
}

static void silu_mul_avx2(float *gate, const float *up, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
    if (i < n)
        lp_kernels_ref_table.silu_mul(gate + i, up + i, n - i);
}

static void gelu_mul_avx2(float *gate, const float *up, int64_t n, bool tanh_approx)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(gelu8(_mm256_loadu_ps(gate + i), tanh_approx),
                                                 _mm256_loadu_ps(up + i)));
    if (i < n)
        lp_kernels_ref_table.gelu_mul(gate + i, up + i, n - i, tanh_approx);
}

static void gelu_avx2(float *x, int64_t n, bool tanh_approx)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, gelu8(_mm256_loadu_ps(x + i), tanh_approx));
    if (i < n)
        lp_kernels_ref_table.gelu(x + i, n - i, tanh_approx);
}

static void silu_avx2(float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, silu8(_mm256_loadu_ps(x + i)));
    if (i < n)
        lp_kernels_ref_table.silu(x + i, n - i);
}

static void add_avx2(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++)
        y[i] += x[i];
}

static void rope_rotate_avx2(float *x, int64_t n_heads, int64_t head_dim, int64_t rot_dim,
                             const float *c, const float *s, bool adjacent_pairs)
{
    int64_t half = rot_dim / 2;
    for (int64_t h = 0; h < n_heads; h++) {
        float *head = x + h * head_dim;
        int64_t i = 0;
        if (adjacent_pairs) {
            /* (x0, x1) pairs: x * c + swap(x) * s, swap exchanging each pair's two lanes */
            for (; i + 8 <= rot_dim; i += 8) {
                __m256 v = _mm256_loadu_ps(head + i);
                __m256 swapped = _mm256_permute_ps(v, 0xB1);
                _mm256_storeu_ps(head + i, _mm256_fmadd_ps(v, _mm256_loadu_ps(c + i),
                                                           _mm256_mul_ps(swapped, _mm256_loadu_ps(s + i))));
            }
            lp_rope_adjacent_scalar(head, c, s, i, rot_dim);
        } else {
            for (; i + 8 <= half; i += 8) {
                __m256 x0 = _mm256_loadu_ps(head + i), x1 = _mm256_loadu_ps(head + half + i);
                __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
                _mm256_storeu_ps(head + i, _mm256_fmsub_ps(x0, cv, _mm256_mul_ps(x1, sv)));
                _mm256_storeu_ps(head + half + i, _mm256_fmadd_ps(x0, sv, _mm256_mul_ps(x1, cv)));
            }
            lp_rope_halves_scalar(head, c, s, i, half);
        }
    }
}

/* ---- matrix-vector rows: four independent accumulators of 8 lanes hide the FMA latency while
 * the row streams from memory; quant blocks are widened to f32 in registers. */

static float row_dot_f32_avx2(const void *row, const float *x, const float *x_sums, int64_t k)
{
    (void)x_sums;
    const float *w = row;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= k; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= k; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < k; i++) { /* GGUF rows need not be 4-byte aligned */
        float wi;
        memcpy(&wi, w + i, sizeof wi);
        sum += wi * x[i];
    }
    return sum;
}

static inline __m256 load_f16x8(const uint8_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

static inline __m256 load_bf16x8(const uint8_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

#define LP_ROW_DOT_HALF(name, load, scalar)                                                        \
    static float name(const void *row, const float *x, const float *x_sums, int64_t k)            \
    {                                                                                              \
        (void)x_sums;                                                                              \
        const uint8_t *w = row;                                                                    \
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                                 \
        __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();                                 \
        int64_t i = 0;                                                                             \
        for (; i + 32 <= k; i += 32) {                                                             \
            a0 = _mm256_fmadd_ps(load(w + 2 * i), _mm256_loadu_ps(x + i), a0);                     \
            a1 = _mm256_fmadd_ps(load(w + 2 * i + 16), _mm256_loadu_ps(x + i + 8), a1);            \
            a2 = _mm256_fmadd_ps(load(w + 2 * i + 32), _mm256_loadu_ps(x + i + 16), a2);           \
            a3 = _mm256_fmadd_ps(load(w + 2 * i + 48), _mm256_loadu_ps(x + i + 24), a3);           \
        }                                                                                          \
        for (; i + 8 <= k; i += 8)                                                                 \
            a0 = _mm256_fmadd_ps(load(w + 2 * i), _mm256_loadu_ps(x + i), a0);                     \
        float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));             \
        for (; i < k; i++)                                                                         \
            sum += scalar(lp_load_u16(w + 2 * i)) * x[i];                                          \
        return sum;                                                                                \
    }
LP_ROW_DOT_HALF(row_dot_f16_avx2, load_f16x8, lp_f16_to_f32)
LP_ROW_DOT_HALF(row_dot_bf16_avx2, load_bf16x8, lp_bf16_to_f32)
#undef LP_ROW_DOT_HALF

static inline float f16_scalar_avx2(const uint8_t *p)
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(lp_load_u16(p))));
}

/* Q8_0: each block's 32 int8 values are widened 8 at a time and dotted with x into a block sum,
 * which joins the row sum scaled by the block's d. */
static float row_dot_q8_0_avx2(const void *row, const float *x, const float *x_sums, int64_t k)
{
    (void)x_sums;
    const uint8_t *b = row;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t i0 = 0; i0 < k; i0 += 32, b += 34) {
        const float *xb = x + i0;
        __m256 s0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                      _mm_loadl_epi64((const __m128i *)(const void *)(b + 2)))),
                                  _mm256_loadu_ps(xb));
        __m256 s1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                      _mm_loadl_epi64((const __m128i *)(const void *)(b + 10)))),
                                  _mm256_loadu_ps(xb + 8));
        s0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                 _mm_loadl_epi64((const __m128i *)(const void *)(b + 18)))),
                             _mm256_loadu_ps(xb + 16), s0);
        s1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                 _mm_loadl_epi64((const __m128i *)(const void *)(b + 26)))),
                             _mm256_loadu_ps(xb + 24), s1);
        __m256 d = _mm256_set1_ps(f16_scalar_avx2(b));
        acc0 = _mm256_fmadd_ps(d, s0, acc0);
        acc1 = _mm256_fmadd_ps(d, s1, acc1);
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

/* Q4_K: each 32-byte slice of nibbles holds two groups (low nibbles: group 2p, high: 2p + 1);
 * their dot products with x are scaled by d * scale, and dmin * min * sum(x of the group) is
 * taken off per group. */
static float row_dot_q4_k_avx2(const void *row, const float *x, const float *x_sums, int64_t k)
{
    const uint8_t *b = row;
    const __m256i low4 = _mm256_set1_epi32(0x0f);
    __m256 acc = _mm256_setzero_ps();
    float mins = 0.0f;
    for (int64_t i0 = 0; i0 < k; i0 += 256, b += 144) {
        float d = f16_scalar_avx2(b), dmin = f16_scalar_avx2(b + 2);
        const uint8_t *q = b + 16;
        for (int p = 0; p < 4; p++, q += 32) {
            int sc0, m0, sc1, m1;
            lp_q4_k_scale_min(b + 4, 2 * p, &sc0, &m0);
            lp_q4_k_scale_min(b + 4, 2 * p + 1, &sc1, &m1);
            const float *x0 = x + i0 + 64 * p, *x1 = x0 + 32;
            __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
            for (int j = 0; j < 32; j += 8) {
                __m256i w = _mm256_cvtepu8_epi32(
                    _mm_loadl_epi64((const __m128i *)(const void *)(q + j)));
                lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(w, low4)),
                                     _mm256_loadu_ps(x0 + j), lo);
                hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(w, 4)),
                                     _mm256_loadu_ps(x1 + j), hi);
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * (float)sc0), lo, acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * (float)sc1), hi, acc);
            mins += dmin * ((float)m0 * x_sums[(i0 >> 5) + 2 * p] +
                            (float)m1 * x_sums[(i0 >> 5) + 2 * p + 1]);
        }
    }
    return hsum(acc) - mins;
}

/* MXFP4: the 16 nibble codes are looked up in the doubled E2M1 levels with one byte shuffle per
 * half (low nibbles: values 0..15, high: 16..31), widened 8 at a time, dotted with x and scaled
 * by the block's power of two. */
static float row_dot_mxfp4_avx2(const void *row, const float *x, const float *x_sums, int64_t k)
{
    (void)x_sums;
    const uint8_t *b = row;
    const __m128i levels = _mm_loadu_si128((const __m128i *)(const void *)lp_mxfp4_levels_x2);
    const __m128i low4 = _mm_set1_epi8(0x0f);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t i0 = 0; i0 < k; i0 += 32, b += 17) {
        const float *xb = x + i0;
        __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(b + 1));
        __m128i lo = _mm_shuffle_epi8(levels, _mm_and_si128(q, low4));
        __m128i hi = _mm_shuffle_epi8(levels, _mm_and_si128(_mm_srli_epi16(q, 4), low4));
        __m256 s0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), _mm256_loadu_ps(xb));
        __m256 s1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))),
                                  _mm256_loadu_ps(xb + 8));
        s0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), _mm256_loadu_ps(xb + 16),
                             s0);
        s1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))),
                             _mm256_loadu_ps(xb + 24), s1);
        __m256 d = _mm256_set1_ps(lp_mxfp4_half_scale(b[0]));
        acc0 = _mm256_fmadd_ps(d, s0, acc0);
        acc1 = _mm256_fmadd_ps(d, s1, acc1);
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

/* ---- matrix-vector rows against int8 activations (llama.cpp's AVX2 vec_dot): signed x signed
 * bytes go through maddubs as |a| x (b with a's sign), so pairs stay below 2 * 128 * 127. */

static inline __m256i i8_pair_sums(__m256i a, __m256i b)
{
    __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

static float row_dot_q8_0_i8_avx2(const void *row, const int8_t *xq, const float *xd,
                                  const int16_t *xs16, int64_t k)
{
    (void)xs16;
    const uint8_t *b = row;
    int64_t n = k / 32, i = 0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; i + 2 <= n; i += 2, b += 68) {
        _mm_prefetch((const char *)(b + 512), _MM_HINT_T0);
        __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)(b + 2));
        __m256i w1 = _mm256_loadu_si256((const __m256i *)(const void *)(b + 36));
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 32 * i));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 32 * i + 32));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16_scalar_avx2(b) * xd[i]),
                               _mm256_cvtepi32_ps(i8_pair_sums(w0, x0)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16_scalar_avx2(b + 34) * xd[i + 1]),
                               _mm256_cvtepi32_ps(i8_pair_sums(w1, x1)), acc1);
    }
    for (; i < n; i++, b += 34) {
        __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)(b + 2));
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 32 * i));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16_scalar_avx2(b) * xd[i]),
                               _mm256_cvtepi32_ps(i8_pair_sums(w0, x0)), acc0);
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

/* MXFP4: the nibbles looked up in the doubled levels as int8 (low nibbles values 0..15, high
 * 16..31, one 256-bit register per block), then dotted with the int8 activations as Q8_0 is;
 * two blocks a step into two accumulators. */
static inline __m256 mxfp4_i8_block(const uint8_t *b, const int8_t *x, float dx, __m128i levels)
{
    const __m128i low4 = _mm_set1_epi8(0x0f);
    __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(b + 1));
    __m128i lo = _mm_shuffle_epi8(levels, _mm_and_si128(q, low4));
    __m128i hi = _mm_shuffle_epi8(levels, _mm_and_si128(_mm_srli_epi16(q, 4), low4));
    __m256i w = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    __m256i p = i8_pair_sums(w, _mm256_loadu_si256((const __m256i *)(const void *)x));
    return _mm256_mul_ps(_mm256_set1_ps(lp_mxfp4_half_scale(b[0]) * dx), _mm256_cvtepi32_ps(p));
}

static float row_dot_mxfp4_i8_avx2(const void *row, const int8_t *xq, const float *xd,
                                   const int16_t *xs16, int64_t k)
{
    (void)xs16;
    const uint8_t *b = row;
    const __m128i levels = _mm_loadu_si128((const __m128i *)(const void *)lp_mxfp4_levels_x2);
    int64_t n = k / 32, i = 0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; i + 2 <= n; i += 2, b += 34) {
        acc0 = _mm256_add_ps(acc0, mxfp4_i8_block(b, xq + 32 * i, xd[i], levels));
        acc1 = _mm256_add_ps(acc1, mxfp4_i8_block(b + 17, xq + 32 * i + 32, xd[i + 1], levels));
    }
    if (i < n)
        acc0 = _mm256_add_ps(acc0, mxfp4_i8_block(b, xq + 32 * i, xd[i], levels));
    return hsum(_mm256_add_ps(acc0, acc1));
}

/* The 8 six-bit scales and 8 mins of a Q4_K block from its 12 packed bytes (the layout of
 * lp_q4_k_scale_min) in four 32-bit steps instead of eight of bytes: scales in bytes 0..7 of
 * out, mins in bytes 8..15. Words p0, p1, p2 are the packed bytes 0-3, 4-7, 8-11. */
static inline __m128i q4_k_scales_mins(const uint8_t *packed)
{
    const uint32_t six = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0x03030303;
    uint32_t p[3];
    memcpy(p, packed, sizeof p);
    uint32_t scales_lo = p[0] & six;                                    /* groups 0-3 */
    uint32_t scales_hi = (p[2] & low4) | (((p[0] >> 6) & top2) << 4);   /* groups 4-7 */
    uint32_t mins_lo = p[1] & six;
    uint32_t mins_hi = ((p[2] >> 4) & low4) | (((p[1] >> 6) & top2) << 4);
    return _mm_setr_epi32((int)scales_lo, (int)scales_hi, (int)mins_lo, (int)mins_hi);
}

/* Q4_K: nibbles are unsigned, so maddubs takes them directly against the int8 activations; the
 * 16-bit pair sums are weighted by the group's scale in madd (the scale broadcast to every
 * 16-bit lane by one byte shuffle of the block's eight), and the min term is one madd of the
 * mins against the activation sums per 16 values. Both stay in vector accumulators scaled per
 * block, summed across lanes once per row. */
static float row_dot_q4_k_i8_avx2(const void *row, const int8_t *xq, const float *xd,
                                  const int16_t *xs16, int64_t k)
{
    const uint8_t *b = row;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    /* byte pairs (2g, 2g + 1) of every 16-bit lane: group g's scale as int16 */
    const __m256i pick_pair = _mm256_set1_epi16(0x0100), next_pair = _mm256_set1_epi16(0x0202);
    /* each min byte twice: the mins of groups 0..7 against the 16 sums of 16 activations */
    const __m128i twice = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
    for (int64_t i = 0; i < k / 256; i++, b += 144) {
        __m128i sm = q4_k_scales_mins(b + 4);
        __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, twice));
        __m256i min_sums = _mm256_madd_epi16(
            mins, _mm256_loadu_si256((const __m256i *)(const void *)(xs16 + 16 * i)));
        const int8_t *x8 = xq + 256 * i;
        __m256i sumi = _mm256_setzero_si256(), pick = pick_pair;
        for (int p = 0; p < 4; p++) {
            __m256i q4 = _mm256_loadu_si256((const __m256i *)(const void *)(b + 16 + 32 * p));
            __m256i lo = _mm256_and_si256(q4, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), low4);
            __m256i plo = _mm256_maddubs_epi16(
                lo, _mm256_loadu_si256((const __m256i *)(const void *)(x8 + 64 * p)));
            __m256i phi = _mm256_maddubs_epi16(
                hi, _mm256_loadu_si256((const __m256i *)(const void *)(x8 + 64 * p + 32)));
            __m256i s_lo = _mm256_shuffle_epi8(scales, pick);
            pick = _mm256_add_epi8(pick, next_pair);
            __m256i s_hi = _mm256_shuffle_epi8(scales, pick);
            pick = _mm256_add_epi8(pick, next_pair);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_madd_epi16(s_lo, plo),
                                                           _mm256_madd_epi16(s_hi, phi)));
        }
        /* d and dmin of the block at once, times the activations' scale */
        uint32_t dd;
        memcpy(&dd, b, sizeof dd);
        __m128 dv = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dd)), _mm_set1_ps(xd[i]));
        acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dv), _mm256_cvtepi32_ps(sumi), acc);
        acc_min = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dv)),
                                  _mm256_cvtepi32_ps(min_sums), acc_min);
    }
    return hsum(acc) - hsum(acc_min);
}

/* What AVX2 overrides in ref's table (dispatch.c starts from a copy of ref's; a slot left out
 * here keeps the plain C kernel). Block sizes for Zen/Haswell-class cores: a 16 KiB B
 * micro-panel (kc x 16) stays in L1 while the mc x kc A block (144 KiB) streams from L2; nc bounds
 * the packed B block (4 MiB) in L3. */
const lp_kernel_table lp_kernels_avx2_overrides = {
    .isa = LP_ISA_AVX2,
    .gemm = {.mr = 6, .nr = 16, .kc = 256, .mc = 144, .nc = 4096, .ukernel = gemm_f32_avx2_6x16,
             .pack_a = pack_a_6_avx2, .pack_b = lp_gemm_pack_16_avx2},
    .f16_to_f32 = f16_to_f32_avx2,
    .bf16_to_f32 = bf16_to_f32_avx2,
    .dot = dot_avx2,
    .axpy = axpy_avx2,
    .scale = scale_avx2,
    .scores = scores_avx2,
    .weighted_sum = weighted_sum_avx2,
    .exp_sum = exp_sum_avx2,
    .rmsnorm = rmsnorm_avx2,
    .layernorm = layernorm_avx2,
    .softmax = softmax_avx2,
    .silu_mul = silu_mul_avx2,
    .gelu_mul = gelu_mul_avx2,
    .gelu = gelu_avx2,
    .silu = silu_avx2,
    .add = add_avx2,
    .rope_rotate = rope_rotate_avx2,
    .attn_pack_k = lp_gemm_pack_16_avx2,
    .attn_qk = lp_attn_qk_avx2_6x16,
    .attn_pv = lp_attn_pv_avx2_6x16,
    .attn_softmax = lp_attn_softmax_avx2,
    .attn_exp_sum = lp_attn_exp_sum_avx2,
    .attn_row_probs = lp_attn_row_probs_avx2,
    .sparsity_range = lp_attn_sparsity_range_avx2,
    .sparsity_histogram = lp_attn_sparsity_histogram_avx2,
    .sparsity_gather = lp_attn_sparsity_gather_avx2,
    .stream_fill = lp_attn_stream_fill_avx2,
    .f32_to_f16 = lp_attn_f32_to_f16_avx2,
    .block_max = lp_attn_block_max_avx2,
    .row_dot_f32 = row_dot_f32_avx2,
    .row_dot_f16 = row_dot_f16_avx2,
    .row_dot_bf16 = row_dot_bf16_avx2,
    .row_dot_q8_0 = row_dot_q8_0_avx2,
    .row_dot_q4_k = row_dot_q4_k_avx2,
    .row_dot_mxfp4 = row_dot_mxfp4_avx2,
    .row_dot_q8_0_i8 = row_dot_q8_0_i8_avx2,
    .row_dot_q4_k_i8 = row_dot_q4_k_i8_avx2,
    .row_dot_mxfp4_i8 = row_dot_mxfp4_i8_avx2,
};
