/* AVX2 + FMA + F16C kernels and the AVX2 table (the *avx2*.c files alone are compiled with -mavx2
 * -mfma -mf16c; dispatch.c only selects them after checking the CPU). Intrinsics only; the
 * algorithms are ref.c's. The GEMM's micro-kernel and packers are in gemm_avx2.c. */
#include "trace/kernels/kernels.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "inspect/formats/quant.h"
#include "trace/kernels/kernels_internal.h"
#include "trace/kernels/simd_avx2.h"

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

/* Rows of 32-value blocks (Q8_0, MXFP4) against int8 x: the scales of 8 blocks are gathered,
 * widened to f32 and multiplied by x's scales in one step (each product d_w * d_x rounds once,
 * as one scalar product would), then each block's integer pair sums join one of two
 * accumulators in one FMA. The formats differ in the scale (scales8 for 8 blocks, scale1 for
 * one) and in how a block becomes 32 int8 weights (block). */
static inline __attribute__((always_inline)) float
blocks32_i8_avx2(const uint8_t *b, const int8_t *xq, const float *xd, int64_t k,
                 int64_t block_bytes, __m256 (*scales8)(const uint8_t *b),
                 float (*scale1)(const uint8_t *b), __m256i (*block)(const uint8_t *b))
{
    int64_t n = k / 32, i = 0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    _Alignas(32) float ds[8];
    for (; i + 8 <= n; i += 8, b += 8 * block_bytes) {
        _mm256_store_ps(ds, _mm256_mul_ps(scales8(b), _mm256_loadu_ps(xd + i)));
        const int8_t *x = xq + 32 * i;
        for (int j = 0; j < 8; j += 2) {
            __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(x + 32 * j));
            __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(x + 32 * j + 32));
            __m256 p0 = _mm256_cvtepi32_ps(i8_pair_sums(block(b + block_bytes * j), x0));
            __m256 p1 = _mm256_cvtepi32_ps(i8_pair_sums(block(b + block_bytes * (j + 1)), x1));
            acc0 = _mm256_fmadd_ps(_mm256_broadcast_ss(ds + j), p0, acc0);
            acc1 = _mm256_fmadd_ps(_mm256_broadcast_ss(ds + j + 1), p1, acc1);
        }
    }
    for (; i < n; i++, b += block_bytes) {
        __m256 d = _mm256_set1_ps(scale1(b) * xd[i]);
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(xq + 32 * i));
        __m256 p = _mm256_cvtepi32_ps(i8_pair_sums(block(b), x0));
        if (i % 2 == 0)
            acc0 = _mm256_fmadd_ps(d, p, acc0);
        else
            acc1 = _mm256_fmadd_ps(d, p, acc1);
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

/* Q8_0 {f16 d; i8 q[32]}: the 8 f16 scales in one conversion. */
static inline __m256 q8_0_scales8(const uint8_t *b)
{
    __m128i h = _mm_cvtsi32_si128(lp_load_u16(b));
    h = _mm_insert_epi16(h, lp_load_u16(b + 34), 1);
    h = _mm_insert_epi16(h, lp_load_u16(b + 68), 2);
    h = _mm_insert_epi16(h, lp_load_u16(b + 102), 3);
    h = _mm_insert_epi16(h, lp_load_u16(b + 136), 4);
    h = _mm_insert_epi16(h, lp_load_u16(b + 170), 5);
    h = _mm_insert_epi16(h, lp_load_u16(b + 204), 6);
    h = _mm_insert_epi16(h, lp_load_u16(b + 238), 7);
    return _mm256_cvtph_ps(h);
}

static inline __m256i q8_0_block(const uint8_t *b)
{
    return _mm256_loadu_si256((const __m256i *)(const void *)(b + 2));
}

static float row_dot_q8_0_i8_avx2(const void *row, const int8_t *xq, const float *xd,
                                  const int16_t *xs16, const int32_t *x_off, int64_t k)
{
    (void)xs16;
    (void)x_off;
    return blocks32_i8_avx2(row, xq, xd, k, 34, q8_0_scales8, f16_scalar_avx2, q8_0_block);
}

static inline float mxfp4_scale1(const uint8_t *b) { return lp_mxfp4_half_scale(b[0]); }

/* The 32 nibble codes looked up in the doubled levels as int8 (low nibbles: values 0..15, high:
 * 16..31), one byte shuffle per half. */
static inline __m256i mxfp4_block(const uint8_t *b)
{
    const __m128i levels = _mm_loadu_si128((const __m128i *)(const void *)lp_mxfp4_levels_x2);
    const __m128i low4 = _mm_set1_epi8(0x0f);
    __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(b + 1));
    __m128i lo = _mm_shuffle_epi8(levels, _mm_and_si128(q, low4));
    __m128i hi = _mm_shuffle_epi8(levels, _mm_and_si128(_mm_srli_epi16(q, 4), low4));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

static float row_dot_mxfp4_i8_avx2(const void *row, const int8_t *xq, const float *xd,
                                   const int16_t *xs16, const int32_t *x_off, int64_t k)
{
    (void)xs16;
    (void)x_off;
    return blocks32_i8_avx2(row, xq, xd, k, 17, lp_mxfp4_scales8_avx2, mxfp4_scale1,
                            mxfp4_block);
}

/* Byte shuffles that broadcast group g's 16-bit scale (bytes 2g, 2g + 1 of each 128-bit lane of
 * the widened scales) to every 16-bit lane. */
static const uint8_t q4_k_pick_scale[8][32] __attribute__((aligned(32))) = {
#define LP_PICK(g) {2 * g, 2 * g + 1, 2 * g, 2 * g + 1, 2 * g, 2 * g + 1, 2 * g, 2 * g + 1,         \
                    2 * g, 2 * g + 1, 2 * g, 2 * g + 1, 2 * g, 2 * g + 1, 2 * g, 2 * g + 1,         \
                    2 * g, 2 * g + 1, 2 * g, 2 * g + 1, 2 * g, 2 * g + 1, 2 * g, 2 * g + 1,         \
                    2 * g, 2 * g + 1, 2 * g, 2 * g + 1, 2 * g, 2 * g + 1, 2 * g, 2 * g + 1}
    LP_PICK(0), LP_PICK(1), LP_PICK(2), LP_PICK(3), LP_PICK(4), LP_PICK(5), LP_PICK(6), LP_PICK(7),
#undef LP_PICK
};

/* Q4_K: nibbles are unsigned, so maddubs takes them directly against the int8 activations; the
 * 16-bit pair sums are weighted by the group's scale in madd (the scale broadcast to every
 * 16-bit lane by one byte shuffle of the block's eight), and the min term is one madd of the
 * mins against the activation sums per 16 values. Both stay in vector accumulators scaled per
 * block, summed across lanes once per row. */
static float row_dot_q4_k_i8_avx2(const void *row, const int8_t *xq, const float *xd,
                                  const int16_t *xs16, const int32_t *x_off, int64_t k)
{
    (void)x_off;
    const uint8_t *b = row;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    /* each min byte twice: the mins of groups 0..7 against the 16 sums of 16 activations */
    const __m128i twice = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
    for (int64_t i = 0; i < k / 256; i++, b += 144) {
        __m128i sm = lp_q4_k_scales_mins_avx2(b + 4);
        __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, twice));
        __m256i min_sums = _mm256_madd_epi16(
            mins, _mm256_loadu_si256((const __m256i *)(const void *)(xs16 + 16 * i)));
        const int8_t *x8 = xq + 256 * i;
        __m256i sumi = _mm256_setzero_si256();
        for (int p = 0; p < 4; p++) {
            __m256i q4 = _mm256_loadu_si256((const __m256i *)(const void *)(b + 16 + 32 * p));
            __m256i lo = _mm256_and_si256(q4, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), low4);
            __m256i plo = _mm256_maddubs_epi16(
                lo, _mm256_loadu_si256((const __m256i *)(const void *)(x8 + 64 * p)));
            __m256i phi = _mm256_maddubs_epi16(
                hi, _mm256_loadu_si256((const __m256i *)(const void *)(x8 + 64 * p + 32)));
            __m256i s_lo = _mm256_shuffle_epi8(
                scales, _mm256_load_si256((const __m256i *)(const void *)q4_k_pick_scale[2 * p]));
            __m256i s_hi = _mm256_shuffle_epi8(
                scales, _mm256_load_si256((const __m256i *)(const void *)q4_k_pick_scale[2 * p + 1]));
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
    .gemm = {.mr = 6, .nr = 16, .kc = 256, .mc = 144, .nc = 4096, .ukernel = lp_gemm_avx2_6x16,
             .pack_a = lp_gemm_pack_a6_avx2, .pack_b = lp_gemm_pack_16_avx2},
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
