/* AVX2 + FMA tiles of the blocked attention (attention.c): the Q x K^T and P x V micro-kernels,
 * the fused online-softmax step of a score tile and its fast exp. Compiled with -mavx2 -mfma
 * (the name says so) and reached only through the dispatch table after the CPU check; ref.c
 * holds the plain C twin of each, which the tests compare against. */
#include "trace/kernels/kernels.h"

#include <immintrin.h>
#include <math.h>

#include "trace/kernels/kernels_internal.h"

/* ---- the 6x16 register tile (the GEMM's): rows past `rows` (repeated rows in the packed
 * panels) are computed and never stored, so the loops do not branch. */

void lp_attn_qk_avx2_6x16(const float *qp, int rows, const float *kp, int64_t head_dim,
                          float scale, float *s, int64_t ld_s)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int64_t d = 0; d < head_dim; d++, kp += LP_ATTN_NR, qp += LP_ATTN_MR) {
        __m256 b0 = _mm256_load_ps(kp), b1 = _mm256_load_ps(kp + 8);
        __m256 av = _mm256_broadcast_ss(qp + 0);
        c00 = _mm256_fmadd_ps(av, b0, c00);
        c01 = _mm256_fmadd_ps(av, b1, c01);
        av = _mm256_broadcast_ss(qp + 1);
        c10 = _mm256_fmadd_ps(av, b0, c10);
        c11 = _mm256_fmadd_ps(av, b1, c11);
        av = _mm256_broadcast_ss(qp + 2);
        c20 = _mm256_fmadd_ps(av, b0, c20);
        c21 = _mm256_fmadd_ps(av, b1, c21);
        av = _mm256_broadcast_ss(qp + 3);
        c30 = _mm256_fmadd_ps(av, b0, c30);
        c31 = _mm256_fmadd_ps(av, b1, c31);
        av = _mm256_broadcast_ss(qp + 4);
        c40 = _mm256_fmadd_ps(av, b0, c40);
        c41 = _mm256_fmadd_ps(av, b1, c41);
        av = _mm256_broadcast_ss(qp + 5);
        c50 = _mm256_fmadd_ps(av, b0, c50);
        c51 = _mm256_fmadd_ps(av, b1, c51);
    }
    __m256 sc = _mm256_set1_ps(scale);
    __m256 acc[LP_ATTN_MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                                 {c30, c31}, {c40, c41}, {c50, c51}};
    for (int r = 0; r < rows; r++) {
        _mm256_storeu_ps(s + r * ld_s, _mm256_mul_ps(acc[r][0], sc));
        _mm256_storeu_ps(s + r * ld_s + 8, _mm256_mul_ps(acc[r][1], sc));
    }
}

/* Sixteen output columns of six rows stay in registers while the keys' V rows stream by; then
 * eight columns, then a plain tail. Each output row is first multiplied by its alpha (the online
 * softmax's rescale, folded in here so the row is read and written once per block). */
void lp_attn_pv_avx2_6x16(const float *p, int64_t ld_p, int rows, int64_t n_keys, const float *v,
                          int64_t v_stride, const float *alpha, float *out, int64_t out_stride,
                          int64_t v_dim)
{
    const float *pr[LP_ATTN_MR], *ar[LP_ATTN_MR];
    float *orow[LP_ATTN_MR];
    for (int r = 0; r < LP_ATTN_MR; r++) {
        int rr = r < rows ? r : rows - 1;
        pr[r] = p + rr * ld_p;
        orow[r] = out + rr * out_stride;
        ar[r] = alpha + rr;
    }
    const float *p0 = pr[0], *p1 = pr[1], *p2 = pr[2], *p3 = pr[3], *p4 = pr[4], *p5 = pr[5];
    int64_t d = 0;
    for (; d + 16 <= v_dim; d += 16) {
        __m256 a = _mm256_broadcast_ss(ar[0]);
        __m256 o00 = _mm256_mul_ps(a, _mm256_loadu_ps(orow[0] + d));
        __m256 o01 = _mm256_mul_ps(a, _mm256_loadu_ps(orow[0] + d + 8));
        a = _mm256_broadcast_ss(ar[1]);
        __m256 o10 = _mm256_mul_ps(a, _mm256_loadu_ps(orow[1] + d));
        __m256 o11 = _mm256_mul_ps(a, _mm256_loadu_ps(orow[1] + d + 8));
        a = _mm256_broadcast_ss(ar[2]);
        __m256 o20 = _mm256_mul_ps(a, _mm256_loadu_ps(orow[2] + d));
        __m256 o21 = _mm256_mul_ps(a, _mm256_loadu_ps(orow[2] + d + 8));
        a = _mm256_broadcast_ss(ar[3]);
        __m256 o30 = _mm256_mul_ps(a, _mm256_loadu_ps(orow[3] + d));
        __m256 o31 = _mm256_mul_ps(a, _mm256_loadu_ps(orow[3] + d + 8));
        a = _mm256_broadcast_ss(ar[4]);
        __m256 o40 = _mm256_mul_ps(a, _mm256_loadu_ps(orow[4] + d));
        __m256 o41 = _mm256_mul_ps(a, _mm256_loadu_ps(orow[4] + d + 8));
        a = _mm256_broadcast_ss(ar[5]);
        __m256 o50 = _mm256_mul_ps(a, _mm256_loadu_ps(orow[5] + d));
        __m256 o51 = _mm256_mul_ps(a, _mm256_loadu_ps(orow[5] + d + 8));
        const float *vj = v + d;
        for (int64_t j = 0; j < n_keys; j++, vj += v_stride) {
            __m256 b0 = _mm256_loadu_ps(vj), b1 = _mm256_loadu_ps(vj + 8);
            __m256 w = _mm256_broadcast_ss(p0 + j);
            o00 = _mm256_fmadd_ps(w, b0, o00);
            o01 = _mm256_fmadd_ps(w, b1, o01);
            w = _mm256_broadcast_ss(p1 + j);
            o10 = _mm256_fmadd_ps(w, b0, o10);
            o11 = _mm256_fmadd_ps(w, b1, o11);
            w = _mm256_broadcast_ss(p2 + j);
            o20 = _mm256_fmadd_ps(w, b0, o20);
            o21 = _mm256_fmadd_ps(w, b1, o21);
            w = _mm256_broadcast_ss(p3 + j);
            o30 = _mm256_fmadd_ps(w, b0, o30);
            o31 = _mm256_fmadd_ps(w, b1, o31);
            w = _mm256_broadcast_ss(p4 + j);
            o40 = _mm256_fmadd_ps(w, b0, o40);
            o41 = _mm256_fmadd_ps(w, b1, o41);
            w = _mm256_broadcast_ss(p5 + j);
            o50 = _mm256_fmadd_ps(w, b0, o50);
            o51 = _mm256_fmadd_ps(w, b1, o51);
        }
        __m256 acc[LP_ATTN_MR][2] = {{o00, o01}, {o10, o11}, {o20, o21},
                                     {o30, o31}, {o40, o41}, {o50, o51}};
        for (int r = 0; r < rows; r++) {
            _mm256_storeu_ps(out + r * out_stride + d, acc[r][0]);
            _mm256_storeu_ps(out + r * out_stride + d + 8, acc[r][1]);
        }
    }
    for (; d + 8 <= v_dim; d += 8) {
        __m256 o[LP_ATTN_MR];
        for (int r = 0; r < LP_ATTN_MR; r++)
            o[r] = _mm256_mul_ps(_mm256_broadcast_ss(ar[r]), _mm256_loadu_ps(orow[r] + d));
        for (int64_t j = 0; j < n_keys; j++) {
            __m256 b = _mm256_loadu_ps(v + j * v_stride + d);
            for (int r = 0; r < LP_ATTN_MR; r++)
                o[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(pr[r] + j), b, o[r]);
        }
        for (int r = 0; r < rows; r++)
            _mm256_storeu_ps(out + r * out_stride + d, o[r]);
    }
    for (; d < v_dim; d++)
        for (int r = 0; r < rows; r++) {
            float acc = out[r * out_stride + d] * alpha[r];
            for (int64_t j = 0; j < n_keys; j++)
                acc += p[r * ld_p + j] * v[j * v_stride + d];
            out[r * out_stride + d] = acc;
        }
}

/* ---- the online softmax of a score tile */

/* Lanes of the first `n` (0..8) set: the tail of a row as a load/store mask. */
static __m256i lanes_below(int64_t n)
{
    __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), index);
}

/* exp(x) for x <= 0, the weights of the softmax: Cody-Waite reduction x = n ln2 + r (ln2 in two
 * parts, both steps fused multiply-adds), a degree-6 polynomial for exp(r) on [-ln2/2, ln2/2]
 * (1 + r + r^2 P(r), P of degree 4 least-squares fitted to the relative error at Chebyshev
 * nodes: 3.8e-9, 0.06 ulp, before rounding; six FMAs where Cephes' degree 7 took eight
 * operations), and 2^n added into the exponent bits (no multiply). Relative error within
 * 2 ulp of expf (tests/trace/test_attention.c measures it on [-87, 0]); x below LP_ATTN_EXP_MIN
 * (-86: exp < 4.5e-38, where 2^n would leave the normal range) gives exactly 0. NaN is not
 * propagated (gives 0): the callers have checked their scores finite first.
 * n comes from adding 1.5 * 2^23 (the sum's low mantissa bits are then n, rounded to nearest),
 * so n << 23 is that sum's bits shifted, with no round or convert; lanes below the threshold are
 * not clamped first, their garbage is masked off at the end. At head_dim 64 this exp is a
 * tenth of the attention's time, so each instruction shows. */
static inline __m256 exp_nonpositive(__m256 x)
{
    const __m256 shifter = _mm256_set1_ps(12582912.0f); /* 1.5 * 2^23 */
    __m256 kept = _mm256_cmp_ps(x, _mm256_set1_ps(LP_ATTN_EXP_MIN), _CMP_GE_OQ);
    __m256 shifted = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), shifter);
    __m256 n = _mm256_sub_ps(shifted, shifter);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.3751408551e-3f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3689158782e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1669532657e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666518152e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.9999988079e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f)); /* 1 + r P(r) */
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f)); /* 1 + r + r^2 P(r) */
    __m256i scaled = _mm256_add_epi32(_mm256_castps_si256(p),
                                      _mm256_slli_epi32(_mm256_castps_si256(shifted), 23));
    return _mm256_and_ps(_mm256_castsi256_ps(scaled), kept);
}

void lp_attn_exp_avx2(float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, exp_nonpositive(_mm256_loadu_ps(x + i)));
    if (i < n) {
        __m256i tail = lanes_below(n - i);
        _mm256_maskstore_ps(x + i, tail, exp_nonpositive(_mm256_maskload_ps(x + i, tail)));
    }
}

/* The horizontal max and sum of eight lanes. */
static inline float reduce_max(__m256 v)
{
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_shuffle_ps(x, x, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_max_ss(x, _mm_shuffle_ps(x, x, _MM_SHUFFLE(2, 3, 0, 1))));
}

static inline float reduce_add(__m256 v)
{
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_shuffle_ps(x, x, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_shuffle_ps(x, x, _MM_SHUFFLE(2, 3, 0, 1))));
}

/* The weights of one row and their sum: 8 lane sums over the row, the tail's masked lanes
 * adding 0, then reduced (attn_softmax's order, which the row-by-row path shares). */
float lp_attn_exp_sum_avx2(float *x, int64_t n, float max)
{
    __m256 mv = _mm256_set1_ps(max), sum = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv));
        _mm256_storeu_ps(x + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (j < n) {
        __m256i tail = lanes_below(n - j);
        __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_maskload_ps(x + j, tail), mv));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(tail));
        _mm256_maskstore_ps(x + j, tail, e);
        sum = _mm256_add_ps(sum, e);
    }
    return reduce_add(sum);
}

/* One sweep for the max and the finiteness check (s * 0 + acc is NaN as soon as one s is
 * infinite or NaN), one for the weights and their sum; the row never leaves L1. */
unsigned lp_attn_softmax_avx2(float *s, int64_t ld_s, int rows, int64_t n, float *m, float *l,
                              float *alpha)
{
    unsigned bad = 0;
    const __m256 zero = _mm256_setzero_ps();
    __m256i tail = lanes_below(n % 8);
    for (int r = 0; r < rows; r++) {
        float *x = s + r * ld_s;
        __m256 mx = _mm256_set1_ps(-INFINITY), poison = zero;
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            __m256 v = _mm256_loadu_ps(x + j);
            mx = _mm256_max_ps(mx, v);
            poison = _mm256_fmadd_ps(v, zero, poison);
        }
        if (j < n) {
            __m256 v = _mm256_maskload_ps(x + j, tail);
            mx = _mm256_max_ps(mx, _mm256_blendv_ps(mx, v, _mm256_castsi256_ps(tail)));
            poison = _mm256_fmadd_ps(v, zero, poison);
        }
        if (reduce_add(poison) != 0.0f) {
            bad |= 1u << r;
            continue;
        }
        float block_max = reduce_max(mx);
        float m_new = block_max > m[r] ? block_max : m[r];
        /* exp(m_old - m_new) in the same arithmetic; m_old = -inf (nothing yet) gives 0 */
        float a = _mm256_cvtss_f32(exp_nonpositive(_mm256_set1_ps(m[r] - m_new)));
        l[r] = l[r] * a + lp_attn_exp_sum_avx2(x, n, m_new);
        m[r] = m_new;
        alpha[r] = a;
    }
    return bad;
}

/* max and a finiteness check in one sweep: x * 0 is 0 for finite x and NaN otherwise. */
float lp_attn_block_max_avx2(const float *x, int64_t n, bool *all_finite)
{
    const __m256 zero = _mm256_setzero_ps();
    __m256 mx = _mm256_set1_ps(-INFINITY), poison = zero;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        mx = _mm256_max_ps(mx, v);
        poison = _mm256_fmadd_ps(v, zero, poison);
    }
    float max = reduce_max(mx);
    bool finite = reduce_add(poison) == 0.0f;
    for (; i < n; i++) {
        finite = finite && isfinite(x[i]);
        if (x[i] > max)
            max = x[i];
    }
    *all_finite = finite;
    return max;
}

/* The running sums of lp_attn_row_probs_avx2 and one step of them over 8 lanes. */
typedef struct row_probs_acc {
    __m256 entropy, distance, local, top;
    __m256i bottom; /* the bits of the smallest positive p minus 1, unsigned: a 0 wraps above all */
} row_probs_acc;

/* near: some lane may lie in the local window (else local is left alone: it would add 0s);
 * lanes: the tail's mask, or NULL in the row's body. */
static inline __m256 row_probs_step(row_probs_acc *acc, __m256 x, __m256 m, __m256 scale,
                                    __m256 dist, __m256 win, bool near, const __m256 *lanes)
{
    __m256 centred = _mm256_sub_ps(x, m);
    if (lanes)
        centred = _mm256_and_ps(centred, *lanes);
    __m256 p = _mm256_mul_ps(exp_nonpositive(centred), scale);
    if (lanes)
        p = _mm256_and_ps(p, *lanes);
    acc->entropy = _mm256_fmadd_ps(p, centred, acc->entropy);
    acc->distance = _mm256_fmadd_ps(p, dist, acc->distance);
    if (near)
        acc->local = _mm256_add_ps(acc->local,
                                   _mm256_and_ps(p, _mm256_cmp_ps(dist, win, _CMP_LT_OQ)));
    acc->top = _mm256_max_ps(acc->top, p);
    /* p >= +0: its bits order it, and bits - 1 sends 0 past every positive value */
    acc->bottom = _mm256_min_epu32(acc->bottom, _mm256_sub_epi32(_mm256_castps_si256(p),
                                                                 _mm256_set1_epi32(1)));
    return p;
}

/* One sweep over a row kept in L2: the weights in the softmax's own exp, scaled, stored back,
 * and the statistics' four sums in vector accumulators (the masked tail lanes add 0). The keys
 * left of the local window (all but the last `window` ones before pos) skip its compare. */
void lp_attn_row_probs_avx2(float *s, int64_t n, float m, float inv_l, int64_t j0, int64_t pos,
                            int64_t window, lp_attn_row_sums *sums)
{
    const __m256 mv = _mm256_set1_ps(m), scale = _mm256_set1_ps(inv_l);
    const __m256 step = _mm256_set1_ps(-8.0f), win = _mm256_set1_ps((float)window);
    __m256 dist = _mm256_add_ps(_mm256_set1_ps((float)(pos - j0)),
                                _mm256_setr_ps(0, -1, -2, -3, -4, -5, -6, -7));
    row_probs_acc acc = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                         _mm256_setzero_ps(), _mm256_set1_epi32(-1)};
    int64_t j = 0;
    /* lane 7's distance pos - j0 - j - 7 is the block's smallest */
    for (; j + 8 <= n && pos - j0 - j - 7 >= window; j += 8, dist = _mm256_add_ps(dist, step))
        _mm256_storeu_ps(s + j, row_probs_step(&acc, _mm256_loadu_ps(s + j), mv, scale, dist, win,
                                               false, NULL));
    for (; j + 8 <= n; j += 8, dist = _mm256_add_ps(dist, step))
        _mm256_storeu_ps(s + j, row_probs_step(&acc, _mm256_loadu_ps(s + j), mv, scale, dist, win,
                                               true, NULL));
    if (j < n) {
        __m256i tail = lanes_below(n - j);
        __m256 lanes = _mm256_castsi256_ps(tail);
        __m256 p = row_probs_step(&acc, _mm256_maskload_ps(s + j, tail), mv, scale, dist, win,
                                  true, &lanes);
        _mm256_maskstore_ps(s + j, tail, p);
    }
    sums->entropy_part = reduce_add(acc.entropy);
    sums->distance = reduce_add(acc.distance);
    sums->local = reduce_add(acc.local);
    sums->max_prob = reduce_max(acc.top);
    uint32_t b[8], bottom = UINT32_MAX;
    _mm256_storeu_si256((__m256i *)(void *)b, acc.bottom);
    for (int i = 0; i < 8; i++)
        bottom = b[i] < bottom ? b[i] : bottom;
    float min_positive = INFINITY;
    if (bottom != UINT32_MAX) {
        bottom += 1u;
        memcpy(&min_positive, &bottom, sizeof min_positive);
    }
    sums->min_positive = min_positive;
}

/* ---- the sparsity histogram's sweeps (ref.c's sparsity_fitted; contracts in the table) */

/* The float bits of 8 probabilities, -0 as 0. */
static inline __m256i prob_bits8(const float *p)
{
    __m256i u = _mm256_loadu_si256((const __m256i *)(const void *)p);
    __m256i negative_zero = _mm256_cmpeq_epi32(u, _mm256_set1_epi32((int)0x80000000u));
    return _mm256_andnot_si256(negative_zero, u);
}

void lp_attn_sparsity_range_avx2(const float *p, int64_t n, uint32_t *lo, uint32_t *hi)
{
    const __m256i ones = _mm256_set1_epi32(-1);
    __m256i smallest = ones, largest = _mm256_setzero_si256();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256i u = prob_bits8(p + j);
        largest = _mm256_max_epu32(largest, u);
        __m256i zero = _mm256_cmpeq_epi32(u, _mm256_setzero_si256());
        smallest = _mm256_min_epu32(smallest, _mm256_or_si256(u, zero));
    }
    uint32_t s[8], l[8];
    _mm256_storeu_si256((__m256i *)(void *)s, smallest);
    _mm256_storeu_si256((__m256i *)(void *)l, largest);
    uint32_t a = UINT32_MAX, b = 0;
    for (int i = 0; i < 8; i++) {
        a = s[i] < a ? s[i] : a;
        b = l[i] > b ? l[i] : b;
    }
    for (; j < n; j++) {
        uint32_t u;
        memcpy(&u, p + j, sizeof u);
        u = u == 0x80000000u ? 0 : u;
        b = u > b ? u : b;
        a = u && u < a ? u : a;
    }
    *lo = a;
    *hi = b;
}

/* The keys of 8 values' bits (ref.c's fit_key). */
static inline __m256i fit_keys8(__m256i u, __m256i base, __m128i shift)
{
    __m256i k = _mm256_add_epi32(_mm256_srl_epi32(_mm256_sub_epi32(u, base), shift),
                                 _mm256_set1_epi32(1));
    return _mm256_andnot_si256(_mm256_cmpeq_epi32(u, _mm256_setzero_si256()), k);
}

enum { HIST_CHUNK = 64 }; /* values a chunk: the scalar updates' batch */

/* One chunk's keys and mantissas into key[] and mant[]; with_low (a constant where it is
 * inlined) adds the mantissas of low_key's values below low_bits into *low (4 x 64-bit). */
static inline void hist_chunk(const float *p, __m256i basev, __m128i sh, __m256i lowk,
                              __m256i lowb, bool with_low, __m256i *low, uint32_t *key,
                              uint32_t *mant)
{
    const __m256i frac = _mm256_set1_epi32(0x7fffff), hidden = _mm256_set1_epi32(0x800000);
    for (int c = 0; c < HIST_CHUNK; c += 8) {
        __m256i u = prob_bits8(p + c), k = fit_keys8(u, basev, sh);
        __m256i normal = _mm256_cmpgt_epi32(u, frac);
        __m256i m = _mm256_or_si256(_mm256_and_si256(u, frac), _mm256_and_si256(normal, hidden));
        if (with_low) {
            __m256i in_low = _mm256_and_si256(_mm256_cmpeq_epi32(k, lowk),
                                              _mm256_cmpgt_epi32(lowb, u));
            __m256i ml = _mm256_and_si256(m, in_low);
            *low = _mm256_add_epi64(*low, _mm256_cvtepu32_epi64(_mm256_castsi256_si128(ml)));
            *low = _mm256_add_epi64(*low, _mm256_cvtepu32_epi64(_mm256_extracti128_si256(ml, 1)));
        }
        _mm256_storeu_si256((__m256i *)(void *)(key + c), k);
        _mm256_storeu_si256((__m256i *)(void *)(mant + c), m);
    }
}

/* Keys and mantissas in vectors, a chunk at a time, into small arrays the scalar bucket
 * updates then read (AVX2 has no conflict-free scatter). Taking each lane straight from the
 * vector (vpextrd) made the increments' addresses late, and every pair of equal keys among the
 * stores in flight cost a memory-ordering flush: three times slower than plain C. A row that
 * lies wholly on one side of 1e-3 (low_key 0, as flat rows of over 1000 keys do) skips the low
 * sums, a third of the vector work. */
uint64_t lp_attn_sparsity_histogram_avx2(const float *p, int64_t n, uint32_t base, int shift,
                                         uint32_t low_key, uint32_t low_bits, uint64_t *buckets)
{
    const __m256i basev = _mm256_set1_epi32((int)base), lowk = _mm256_set1_epi32((int)low_key);
    const __m256i lowb = _mm256_set1_epi32((int)low_bits);
    const __m128i sh = _mm_cvtsi32_si128(shift);
    __m256i low = _mm256_setzero_si256(); /* 4 x 64-bit sums */
    uint32_t key[HIST_CHUNK], mant[HIST_CHUNK];
    int64_t j = 0;
    for (; j + HIST_CHUNK <= n; j += HIST_CHUNK) {
        if (low_key)
            hist_chunk(p + j, basev, sh, lowk, lowb, true, &low, key, mant);
        else
            hist_chunk(p + j, basev, sh, lowk, lowb, false, &low, key, mant);
        for (int c = 0; c < HIST_CHUNK; c += 4) { /* unrolled: the loop's own ops were a third */
            buckets[key[c]] += (UINT64_C(1) << 40) + mant[c];
            buckets[key[c + 1]] += (UINT64_C(1) << 40) + mant[c + 1];
            buckets[key[c + 2]] += (UINT64_C(1) << 40) + mant[c + 2];
            buckets[key[c + 3]] += (UINT64_C(1) << 40) + mant[c + 3];
        }
    }
    uint64_t l4[4];
    _mm256_storeu_si256((__m256i *)(void *)l4, low);
    uint64_t low_part = l4[0] + l4[1] + l4[2] + l4[3];
    for (; j < n; j++) {
        uint32_t u;
        memcpy(&u, p + j, sizeof u);
        u = u == 0x80000000u ? 0 : u;
        uint32_t k = u ? ((u - base) >> shift) + 1u : 0u;
        uint64_t m = (u & 0x7fffffu) | (u >> 23 ? 0x800000u : 0u);
        buckets[k] += (UINT64_C(1) << 40) + m;
        low_part += k == low_key && u < low_bits ? m : 0;
    }
    return low_part;
}

/* Eight keys compared at once; the rare matches are moved one by one. */
int64_t lp_attn_sparsity_gather_avx2(float *p, int64_t n, uint32_t base, int shift,
                                     const uint32_t keys[3])
{
    const __m256i basev = _mm256_set1_epi32((int)base);
    const __m256i k0 = _mm256_set1_epi32((int)keys[0]), k1 = _mm256_set1_epi32((int)keys[1]);
    const __m256i k2 = _mm256_set1_epi32((int)keys[2]);
    const __m128i sh = _mm_cvtsi32_si128(shift);
    int64_t front = 0, j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256i k = fit_keys8(prob_bits8(p + j), basev, sh);
        __m256i hit = _mm256_or_si256(_mm256_or_si256(_mm256_cmpeq_epi32(k, k0),
                                                      _mm256_cmpeq_epi32(k, k1)),
                                      _mm256_cmpeq_epi32(k, k2));
        unsigned bits = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(hit));
        while (bits) {
            int64_t at = j + __builtin_ctz(bits);
            float t = p[front];
            p[front++] = p[at];
            p[at] = t;
            bits &= bits - 1;
        }
    }
    for (; j < n; j++) {
        uint32_t u;
        memcpy(&u, p + j, sizeof u);
        u = u == 0x80000000u ? 0 : u;
        uint32_t k = u ? ((u - base) >> shift) + 1u : 0u;
        if (k == keys[0] || k == keys[1] || k == keys[2]) {
            float t = p[front];
            p[front++] = p[j];
            p[j] = t;
        }
    }
    return front;
}

/* Non-temporal stores from the first 32-byte boundary on; the ends as plain stores. The fence
 * orders them before whatever the caller publishes next (the pool's barrier). */
void lp_attn_stream_fill_avx2(float *dst, const float *src, int64_t n)
{
    int64_t j = 0;
    for (; j < n && ((uintptr_t)(dst + j) & 31u) != 0; j++)
        dst[j] = src ? src[j] : 0.0f;
    for (; j + 8 <= n; j += 8)
        _mm256_stream_ps(dst + j, src ? _mm256_loadu_ps(src + j) : _mm256_setzero_ps());
    for (; j < n; j++)
        dst[j] = src ? src[j] : 0.0f;
    _mm_sfence();
}

static inline uint16_t f32_to_f16_one(float x)
{
    return (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT), 0);
}

/* F16C's conversion rounds to nearest even and keeps subnormals, as lp_f32_to_f16 does; only a
 * NaN's payload may differ (both give a quiet NaN of the same sign). The slot serves the maps
 * (lp_f32_to_f16_rows), written once and handed on: non-temporal stores from the first 32-byte
 * boundary skip reading the destination first, a quarter of the traffic (two 4096 x 4096 maps on
 * 2 threads, a scratch harness, best of 12: 3.36-4.67 ms against 3.90-5.63 ms). The fence orders
 * them before the pool's barrier. */
void lp_attn_f32_to_f16_avx2(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i < n && ((uintptr_t)(dst + i) & 31u) != 0; i++)
        dst[i] = f32_to_f16_one(src[i]);
    for (; i + 16 <= n; i += 16) {
        __m128i lo = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        __m128i hi = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 8), _MM_FROUND_TO_NEAREST_INT);
        _mm256_stream_si256((__m256i *)(void *)(dst + i), _mm256_set_m128i(hi, lo));
    }
    for (; i < n; i++)
        dst[i] = f32_to_f16_one(src[i]);
    _mm_sfence();
}
