/* The plain C kernels: the spec every SIMD kernel is tested against, and the fallback table. */
#include "trace/kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inspect/formats/quant.h"
#include "trace/kernels/kernels_internal.h"

void lp_gemm_f32_ref(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float *c, int64_t ldc, bool accumulate)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            /* double accumulation: the reference should be the most accurate one in the room */
            double sum = 0.0;
            for (int64_t p = 0; p < k; p++)
                sum += (double)a[i * lda + p] * (double)b[j * ldb + p];
            c[i * ldc + j] = (float)(accumulate ? (double)c[i * ldc + j] + sum : sum);
        }
}

/* A 4x8 register tile in plain C: what the packed GEMM runs under LP_ISA=ref. */
static void gemm_f32_ref_4x8(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                             int m_edge, int n_edge, bool accumulate)
{
    float tile[4][8];
    memset(tile, 0, sizeof tile);
    for (int64_t p = 0; p < kc; p++) {
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 8; j++)
                tile[i][j] += a[i] * b[j];
        a += 4;
        b += 8;
    }
    for (int i = 0; i < m_edge; i++)
        for (int j = 0; j < n_edge; j++)
            c[i * ldc + j] = accumulate ? c[i * ldc + j] + tile[i][j] : tile[i][j];
}

/* One panel of `width` interleaved rows: dst[p * width + r] = src[r * ld + p]. */
static void pack_panel_ref(const float *src, int64_t ld, int64_t rows, int64_t kc, int width,
                           float *dst)
{
    for (int64_t r = 0; r < width; r++) {
        if (r < rows)
            for (int64_t p = 0; p < kc; p++)
                dst[p * width + r] = src[r * ld + p];
        else
            for (int64_t p = 0; p < kc; p++)
                dst[p * width + r] = 0.0f;
    }
}

static void pack_a_4(const float *src, int64_t ld, int64_t rows, int64_t kc, float *dst)
{
    pack_panel_ref(src, ld, rows, kc, 4, dst);
}

static void pack_b_8(const float *src, int64_t ld, int64_t rows, int64_t kc, float *dst)
{
    pack_panel_ref(src, ld, rows, kc, 8, dst);
}

static void f16_to_f32_ref(const void *src, float *dst, int64_t n)
{
    const uint8_t *bytes = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = lp_f16_to_f32(lp_load_u16(bytes + 2 * i));
}

static void bf16_to_f32_ref(const void *src, float *dst, int64_t n)
{
    const uint8_t *bytes = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = lp_bf16_to_f32(lp_load_u16(bytes + 2 * i));
}

static float dot_ref(const float *x, const float *y, int64_t n)
{
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += x[i] * y[i];
    return sum;
}

static void axpy_ref(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

static void scale_ref(float *y, float a, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] *= a;
}

/* x[i] = exp_fn(x[i] - max) in place, summed in order: exp_sum's and attn_exp_sum's twins. */
static float exp_sum_by(float *x, int64_t n, float max, float (*exp_fn)(float))
{
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = exp_fn(x[i] - max);
        sum += x[i];
    }
    return sum;
}

static float exp_sum_ref(float *x, int64_t n, float max) { return exp_sum_by(x, n, max, expf); }

static void scores_ref(const float *q, const float *k, int64_t k_stride, int64_t n_keys,
                       int64_t head_dim, float scale, float *s)
{
    for (int64_t j = 0; j < n_keys; j++)
        s[j] = dot_ref(q, k + j * k_stride, head_dim) * scale;
}

static void weighted_sum_ref(float *out, const float *w, const float *v, int64_t v_stride,
                             int64_t n_keys, int64_t v_dim)
{
    for (int64_t j = 0; j < n_keys; j++)
        axpy_ref(out, w[j], v + j * v_stride, v_dim);
}

static void rmsnorm_ref(float *y, const float *x, const float *weight, int64_t n, float eps,
                        bool weight_plus_one)
{
    double sum_sq = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum_sq += (double)x[i] * (double)x[i];
    float inv_rms = (float)(1.0 / sqrt(sum_sq / (double)(n > 0 ? n : 1) + (double)eps));
    for (int64_t i = 0; i < n; i++) {
        float w = weight ? (weight_plus_one ? 1.0f + weight[i] : weight[i]) : 1.0f;
        y[i] = x[i] * inv_rms * w;
    }
}

static void layernorm_ref(float *y, const float *x, const float *weight, const float *bias,
                          int64_t n, float eps)
{
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < n; i++)
        mean += (double)x[i];
    mean /= (double)(n > 0 ? n : 1);
    for (int64_t i = 0; i < n; i++)
        var += ((double)x[i] - mean) * ((double)x[i] - mean);
    var /= (double)(n > 0 ? n : 1);
    float inv_std = (float)(1.0 / sqrt(var + (double)eps));
    lp_layernorm_scalar(y, x, weight, bias, 0, n, (float)mean, inv_std);
}

static void softmax_ref(float *x, int64_t n)
{
    if (n <= 0)
        return;
    float max = x[0];
    for (int64_t i = 1; i < n; i++)
        if (x[i] > max)
            max = x[i];
    if (max == -INFINITY) { /* every entry masked: no distribution, all zero */
        memset(x, 0, (size_t)n * sizeof *x);
        return;
    }
    float sum = exp_sum_ref(x, n, max);
    float inv = 1.0f / sum;
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

static float silu1(float v) { return v / (1.0f + expf(-v)); }
static float gelu1(float v, bool tanh_approx)
{
    if (tanh_approx) {
        const float k = 0.7978845608028654f; /* sqrt(2/pi) */
        return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
    }
    return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
}

static void silu_mul_ref(float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        gate[i] = silu1(gate[i]) * up[i];
}

static void gelu_mul_ref(float *gate, const float *up, int64_t n, bool tanh_approx)
{
    for (int64_t i = 0; i < n; i++)
        gate[i] = gelu1(gate[i], tanh_approx) * up[i];
}

static void gelu_ref(float *x, int64_t n, bool tanh_approx)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = gelu1(x[i], tanh_approx);
}

static void silu_ref(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = silu1(x[i]);
}

static void add_ref(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

static void rope_rotate_ref(float *x, int64_t n_heads, int64_t head_dim, int64_t rot_dim,
                            const float *c, const float *s, bool adjacent_pairs)
{
    for (int64_t h = 0; h < n_heads; h++) {
        if (adjacent_pairs)
            lp_rope_adjacent_scalar(x + h * head_dim, c, s, 0, rot_dim);
        else
            lp_rope_halves_scalar(x + h * head_dim, c, s, 0, rot_dim / 2);
    }
}

/* RoPE pair by pair, cos and sin computed per pair and head: no coefficient buffer, so any
 * rotation width goes (dispatch.c sends the ones wider than its buffer here). */
void lp_rope_ref(float *x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
                 const float *inv_freq, float attn_scale, bool adjacent_pairs)
{
    int64_t half = rot_dim / 2;
    for (int64_t h = 0; h < n_heads; h++) {
        float *head = x + h * head_dim;
        for (int64_t i = 0; i < half; i++) {
            float cv, sv;
            lp_rope_coeff((float)pos, inv_freq[i], attn_scale, &cv, &sv);
            int64_t i0 = adjacent_pairs ? 2 * i : i, i1 = adjacent_pairs ? 2 * i + 1 : i + half;
            float x0 = head[i0], x1 = head[i1];
            head[i0] = x0 * cv - x1 * sv;
            head[i1] = x0 * sv + x1 * cv;
        }
    }
}

/* ---- attention, the spec: each row's scores are recomputed per pass instead of stored, so the
 * reference needs no allocation at all. */

static float ref_score(const lp_attn_args *a, int64_t i, int64_t j)
{
    lp_dtype dt = lp_attn_kv_dtype(a);
    double dot = 0.0;
    for (int64_t d = 0; d < a->head_dim; d++)
        dot += (double)a->q[i * a->q_stride + d] * (double)lp_attn_kv_at(dt, a->k, a->k_stride, j, d);
    double s = dot * (double)a->scale;
    if (a->softcap > 0.0f)
        s = (double)a->softcap * tanh(s / (double)a->softcap);
    int64_t pos = a->mask->q_pos0 + i;
    s += (double)a->alibi_slope * (double)(j - pos);
    return (float)s;
}

/* Query row i's visible keys [lo, hi), clipped to the keys given. */
static void ref_row_range(const lp_attn_args *a, int64_t i, int64_t *lo, int64_t *hi)
{
    lp_mask_row_range(a->mask, a->batch, i, lo, hi);
    if (*hi > a->n_k)
        *hi = a->n_k;
    if (*lo > *hi)
        *lo = *hi;
}

/* A poisoned row: NaN wherever a value would depend on it. */
static void ref_poison_row(const lp_attn_args *a, int64_t lo, int64_t hi, float *out, float *prow,
                           lp_attn_row_stats *st)
{
    for (int64_t d = 0; d < a->v_dim; d++)
        out[d] = NAN;
    for (int64_t j = lo; prow && j < hi; j++)
        prow[j] = NAN;
    st->entropy = st->max_prob = st->sink = st->prev = st->self = NAN;
    st->distance = st->local = st->row_sum = st->learned_sink = NAN;
    st->keys50 = st->keys90 = st->keys99 = st->low_mass = NAN;
}

static int larger_first(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return (a < b) - (a > b);
}

/* ---- the sparsity statistics: exact sums, so that no summation order can change a count.
 * A probability p in [0, 2) is an integer multiple of 2^-149 (the smallest denormal): its float
 * bits split into a biased exponent E and a 24-bit mantissa m (hidden bit included when E > 0),
 * p = m * 2^(max(E, 1) - 1) units. A row's sum of at most 2^40 of them, times 100, stays below
 * 2^256: four 64-bit limbs hold every sum and comparison below without rounding. */

typedef struct {
    uint64_t limb[4]; /* least significant first */
} exact_sum;

static void exact_add_shifted(exact_sum *a, uint64_t m, int shift)
{
    int at = shift / 64, off = shift % 64;
    uint64_t part[2] = {m << off, off ? m >> (64 - off) : 0};
    uint64_t carry = 0;
    for (int i = at; i < 4; i++) {
        uint64_t add = i - at < 2 ? part[i - at] : 0;
        uint64_t s = a->limb[i] + add;
        uint64_t s2 = s + carry;
        carry = (uint64_t)(s < add) + (uint64_t)(s2 < s);
        a->limb[i] = s2;
    }
}

static exact_sum exact_times(const exact_sum *a, uint32_t k)
{
    exact_sum r;
    unsigned __int128 carry = 0;
    for (int i = 0; i < 4; i++) {
        unsigned __int128 v = (unsigned __int128)a->limb[i] * k + carry;
        r.limb[i] = (uint64_t)v;
        carry = v >> 64;
    }
    return r;
}

static int exact_cmp(const exact_sum *a, const exact_sum *b)
{
    for (int i = 3; i >= 0; i--)
        if (a->limb[i] != b->limb[i])
            return a->limb[i] < b->limb[i] ? -1 : 1;
    return 0;
}

static double exact_value(const exact_sum *a)
{
    double v = 0.0;
    for (int i = 3; i >= 0; i--)
        v = v * 0x1p64 + (double)a->limb[i];
    return ldexp(v, -149);
}

/* The float bits of a probability, -0 as 0; values outside [0, 2) (NaN included) come out at
 * or above PROB_BITS_END, and the row is refused before any sum. */
enum { PROB_BITS_END = 0x40000000 };
static uint32_t prob_bits(float p)
{
    uint32_t u;
    memcpy(&u, &p, sizeof u);
    return u == 0x80000000u ? 0 : u;
}

/* A row with a value outside [0, 2): its sparsity is NaN rather than a count of garbage. */
static bool sparsity_refused(const float *p, int64_t n, lp_attn_row_stats *st)
{
    uint32_t worst = 0;
    for (int64_t j = 0; j < n; j++) {
        uint32_t u = prob_bits(p[j]);
        worst = u > worst ? u : worst;
    }
    if (worst < PROB_BITS_END)
        return false;
    st->keys50 = st->keys90 = st->keys99 = st->low_mass = NAN;
    return true;
}

static uint64_t bits_mantissa(uint32_t u)
{
    uint32_t e = u >> 23;
    return (uint64_t)((u & 0x7fffffu) | (e ? 0x800000u : 0u));
}

static int bits_shift(uint32_t u)
{
    uint32_t e = u >> 23;
    return e ? (int)e - 1 : 0;
}

/* The thresholds as exact fractions num / den of the keys' mass. */
static const uint32_t sparsity_num[3] = {1, 9, 99}, sparsity_den[3] = {2, 10, 100};

/* Whether den * acc >= need. */
static bool exact_reaches(const exact_sum *acc, uint32_t den, const exact_sum *need)
{
    exact_sum scaled = exact_times(acc, den);
    return exact_cmp(&scaled, need) >= 0;
}

static void sparsity_fill(lp_attn_row_stats *st, const int64_t k[3], const exact_sum *low)
{
    st->keys50 = (float)k[0];
    st->keys90 = (float)k[1];
    st->keys99 = (float)k[2];
    st->low_mass = (float)exact_value(low);
}

void lp_attn_row_sparsity_sorted(float *p, int64_t n, lp_attn_row_stats *st)
{
    if (sparsity_refused(p, n, st))
        return;
    if (n > 1)
        qsort(p, (size_t)n, sizeof *p, larger_first);
    exact_sum total = {{0}}, low = {{0}};
    for (int64_t j = 0; j < n; j++) {
        uint32_t u = prob_bits(p[j]);
        exact_add_shifted(&total, bits_mantissa(u), bits_shift(u));
        if (p[j] < 1e-3f)
            exact_add_shifted(&low, bits_mantissa(u), bits_shift(u));
    }
    exact_sum acc = {{0}};
    int64_t k[3], taken = 0;
    for (int f = 0; f < 3; f++) {
        exact_sum need = exact_times(&total, sparsity_num[f]);
        while (taken < n && !exact_reaches(&acc, sparsity_den[f], &need)) {
            uint32_t u = prob_bits(p[taken++]);
            exact_add_shifted(&acc, bits_mantissa(u), bits_shift(u));
        }
        k[f] = taken;
    }
    sparsity_fill(st, k, &low);
}

/* Radix selection over the float bits, most significant field first: 9 bits (the exponent, whose
 * top bit is 0 below 2, and 2 mantissa bits), then three fields of 7 mantissa bits. Inside one
 * bucket of the first field every value has the same exponent, so a bucket's mass is its
 * mantissas' sum (< 2^64) shifted once. */
enum { SPARSE_LEVELS = 4, SPARSE_SMALL = 16 };
static const int sparse_field_lo[SPARSE_LEVELS] = {21, 14, 7, 0};
static const int sparse_field_bits[SPARSE_LEVELS] = {9, 7, 7, 7};

static uint32_t sparse_key(uint32_t u, int level)
{
    return (u >> sparse_field_lo[level]) & ((1u << sparse_field_bits[level]) - 1u);
}

/* Scanning the buckets of one level down from `from`: the first whose mass takes den * acc to
 * need (n_buckets if none); acc and *taken advance past the buckets before it. Below the first
 * level every value shares one exponent, shift; at the first it is the key's top 7 bits. */
static uint32_t crossing_bucket(const uint32_t *count, const uint64_t *mantissas, uint32_t from,
                                int level, int shift, exact_sum *acc, int64_t *taken,
                                uint32_t den, const exact_sum *need)
{
    for (uint32_t b = from + 1; b-- > 0;) {
        if (!count[b])
            continue;
        if (level == 0)
            shift = b >> 2 ? (int)(b >> 2) - 1 : 0;
        exact_sum trial = *acc;
        exact_add_shifted(&trial, mantissas[b], shift);
        if (exact_reaches(&trial, den, need))
            return b;
        *acc = trial;
        *taken += count[b];
    }
    return UINT32_MAX;
}

/* Moves the c values of p whose key at `level` is b to the front; returns how many. */
static int64_t bucket_to_front(float *p, int64_t c, int level, uint32_t b)
{
    int64_t front = 0;
    for (int64_t j = 0; j < c; j++)
        if (sparse_key(prob_bits(p[j]), level) == b) {
            float t = p[front];
            p[front++] = p[j];
            p[j] = t;
        }
    return front;
}

/* p[0..c) largest first by insertion, for the few values of a crossing bucket: qsort's calls
 * through a comparator cost more than the whole sort of a handful. */
static void sort_larger_first(float *p, int64_t c)
{
    for (int64_t i = 1; i < c; i++) {
        float v = p[i];
        int64_t j = i;
        for (; j > 0 && p[j - 1] < v; j--)
            p[j] = p[j - 1];
        p[j] = v;
    }
}

/* The smallest j such that den * (acc + the j largest of p[0..c)) >= need, given that all c reach
 * it and share one first-level bucket (level >= 1); acc is advanced past what was taken. p is
 * permuted. */
static int64_t keys_needed(float *p, int64_t c, int level, exact_sum *acc, uint32_t den,
                           const exact_sum *need)
{
    if (exact_reaches(acc, den, need))
        return 0;
    if (c <= SPARSE_SMALL || level == SPARSE_LEVELS) {
        /* few values (or all equal, past the last field): take them largest first */
        if (c <= SPARSE_SMALL)
            sort_larger_first(p, c);
        else
            qsort(p, (size_t)c, sizeof *p, larger_first);
        int64_t j = 0;
        while (j < c && !exact_reaches(acc, den, need)) {
            uint32_t u = prob_bits(p[j++]);
            exact_add_shifted(acc, bits_mantissa(u), bits_shift(u));
        }
        return j;
    }
    uint32_t count[1u << 7] = {0};
    uint64_t mantissas[1u << 7] = {0};
    uint32_t n_buckets = 1u << sparse_field_bits[level];
    for (int64_t j = 0; j < c; j++) {
        uint32_t u = prob_bits(p[j]);
        uint32_t b = sparse_key(u, level);
        count[b]++;
        mantissas[b] += bits_mantissa(u);
    }
    int64_t taken = 0;
    uint32_t b = crossing_bucket(count, mantissas, n_buckets - 1, level,
                                 bits_shift(prob_bits(p[0])), acc, &taken, den, need);
    LP_ASSERT(b < n_buckets); /* the whole of p reaches need */
    int64_t front = bucket_to_front(p, c, level, b);
    return taken + keys_needed(p, front, level + 1, acc, den, need);
}

/* The selection with fixed fields, for rows the fitted histogram below cannot hold. */
static void sparsity_by_fields(float *p, int64_t n, lp_attn_row_stats *st)
{
    /* one pass: the first level's histogram (count and mantissa sum per bucket) and the mass
     * below 1e-3 per exponent; the totals are shifted sums of those */
    enum { TOP = 1u << 9 };
    uint32_t count[TOP] = {0};
    uint64_t mantissas[TOP] = {0}, below[128] = {0};
    const uint32_t low_bits = prob_bits(1e-3f);
    for (int64_t j = 0; j < n; j++) {
        uint32_t u = prob_bits(p[j]);
        uint32_t b = sparse_key(u, 0);
        count[b]++;
        mantissas[b] += bits_mantissa(u);
        below[u >> 23] += u < low_bits ? bits_mantissa(u) : 0;
    }
    exact_sum total = {{0}}, low = {{0}};
    for (uint32_t b = 0; b < TOP; b++)
        exact_add_shifted(&total, mantissas[b], b >> 2 ? (int)(b >> 2) - 1 : 0);
    for (int e = 0; e < 128; e++)
        exact_add_shifted(&low, below[e], e ? e - 1 : 0);
    /* the thresholds cross at buckets in descending order: one scan from the top serves all */
    int64_t k[3], taken = 0;
    exact_sum acc = {{0}};
    uint32_t from = TOP - 1;
    for (int f = 0; f < 3; f++) {
        exact_sum need = exact_times(&total, sparsity_num[f]);
        if (exact_reaches(&acc, sparsity_den[f], &need) && taken == 0) {
            k[f] = 0; /* a row of zeros */
            continue;
        }
        uint32_t b = crossing_bucket(count, mantissas, from, 0, 0, &acc, &taken,
                                     sparsity_den[f], &need);
        LP_ASSERT(b < TOP);
        exact_sum in_bucket = acc;
        int64_t front = bucket_to_front(p, n, 0, b);
        k[f] = taken + keys_needed(p, front, 1, &in_bucket, sparsity_den[f], &need);
        from = b;
    }
    sparsity_fill(st, k, &low);
}

/* ---- the usual path: a histogram fitted to the row. Its buckets are equal steps of the float
 * bits from the row's smallest positive value to its largest (bits order non-negative floats as
 * their values), a bucket per 2 to 8 values, so the bucket where a threshold is crossed holds
 * a handful of values even when the row is nearly flat; zeros have a bucket of their own. Steps
 * of at most 2^23 bits aligned to groups of FIT_GROUP buckets keep every group within one
 * exponent, so its mass is its mantissas' integer sum shifted once. When the row spans at most
 * FIT_MAX_SPAN exponents, every sum fits a 128-bit integer in units of its smallest value's
 * exponent, and the three thresholds are found by one scan over groups, then buckets, from the
 * top; a crossing bucket's count and sum mostly settle its share (fit_bucket_share), and only
 * the values of the others are refined (keys_needed). Wider rows (denormals beside large values)
 * take the fixed fields above. */
typedef unsigned __int128 fit_u128;
enum { FIT_MIN_BUCKETS = 128, FIT_MAX_BUCKETS = 2048, FIT_GROUP = 32, FIT_MAX_SPAN = 60,
       /* a bucket is one 64-bit word, its count above bit 40: below 2^16 values every
        * mantissa sum (< 2^16 x 2^24) stays below it, and one add per value updates both */
       FIT_COUNT_SHIFT = 40, FIT_MAX_VALUES = 1 << 16,
       FIT_MAX_GROUPS = FIT_MAX_BUCKETS / 4 /* groups hold 4 buckets or more */ };

typedef struct fit_hist {
    uint32_t base;  /* bits of bucket 1's lower edge, aligned to a group */
    int shift;      /* bucket k >= 1 holds bits [base + (k-1) << shift, base + k << shift) */
    int group;      /* buckets per group (FIT_GROUP or the buckets of one exponent) */
    int group_log2; /* group = 1 << group_log2 */
    int e_lo;       /* the unit: 2^(e_lo - 150), e_lo the smallest positive value's exponent */
    int64_t n_buckets;
    uint64_t buckets[FIT_MAX_BUCKETS]; /* count << FIT_COUNT_SHIFT | mantissa sum */
} fit_hist;

static uint64_t fit_count(const fit_hist *h, int64_t k) { return h->buckets[k] >> FIT_COUNT_SHIFT; }

static uint64_t fit_mantissas(const fit_hist *h, int64_t k)
{
    return h->buckets[k] & ((UINT64_C(1) << FIT_COUNT_SHIFT) - 1);
}

static uint32_t fit_key(uint32_t base, int shift, uint32_t u)
{
    return u ? ((u - base) >> shift) + 1u : 0u;
}

static void sparsity_range_ref(const float *p, int64_t n, uint32_t *lo, uint32_t *hi)
{
    uint32_t smallest = UINT32_MAX, largest = 0;
    for (int64_t j = 0; j < n; j++) {
        uint32_t u = prob_bits(p[j]);
        largest = u > largest ? u : largest;
        uint32_t positive = u ? u : UINT32_MAX;
        smallest = positive < smallest ? positive : smallest;
    }
    *lo = smallest;
    *hi = largest;
}

static uint64_t sparsity_histogram_ref(const float *p, int64_t n, uint32_t base, int shift,
                                       uint32_t low_key, uint32_t low_bits, uint64_t *buckets)
{
    uint64_t low_part = 0;
    for (int64_t j = 0; j < n; j++) {
        uint32_t u = prob_bits(p[j]), k = fit_key(base, shift, u);
        uint64_t m = bits_mantissa(u);
        buckets[k] += (UINT64_C(1) << 40) + m;
        low_part += k == low_key && u < low_bits ? m : 0;
    }
    return low_part;
}

static int64_t sparsity_gather_ref(float *p, int64_t n, uint32_t base, int shift,
                                   const uint32_t keys[3])
{
    int64_t front = 0;
    for (int64_t j = 0; j < n; j++) {
        uint32_t k = fit_key(base, shift, prob_bits(p[j]));
        if (k == keys[0] || k == keys[1] || k == keys[2]) {
            float t = p[front];
            p[front++] = p[j];
            p[j] = t;
        }
    }
    return front;
}

/* Bucket k's mantissa sum in units: shifted by its exponent's distance from e_lo. */
static int fit_unit_shift(const fit_hist *h, int64_t k)
{
    uint32_t e = (h->base + ((uint32_t)(k - 1) << h->shift)) >> 23;
    return (e ? (int)e : 1) - h->e_lo;
}

static exact_sum fit_exact(const fit_hist *h, fit_u128 x)
{
    exact_sum e = {{0}};
    exact_add_shifted(&e, (uint64_t)x, h->e_lo - 1);
    exact_add_shifted(&e, (uint64_t)(x >> 64), h->e_lo - 1 + 64);
    return e;
}

/* The shift and base that map [lo, hi] onto the buckets; false for a row too wide to fit. */
static bool fit_layout(fit_hist *h, uint32_t lo, uint32_t hi, int64_t n)
{
    int e_lo = (int)(lo >> 23) ? (int)(lo >> 23) : 1, e_hi = (int)(hi >> 23);
    if (e_hi - e_lo > FIT_MAX_SPAN || n >= FIT_MAX_VALUES)
        return false;
    /* n / 4 to n / 2 buckets, of which the span uses half or more: with the shares settled
     * from the sums, fewer buckets to clear and sum paid on the bench's flat rows (0.77 against
     * 0.84 ns a value at n / 2 to n; n / 8 to n / 4 gave 0.75) and cost little on peaked ones
     * (1.61 against 1.57; 1.74 at n / 8) */
    h->n_buckets = FIT_MIN_BUCKETS;
    while (4 * h->n_buckets < n && h->n_buckets < FIT_MAX_BUCKETS)
        h->n_buckets *= 2;
    h->e_lo = e_lo;
    /* at most 21: the refinement's fields (keys_needed, from level 1) assume shared bits >= 21 */
    for (h->shift = 0; h->shift <= 21; h->shift++) {
        h->group_log2 = h->shift <= 23 - 5 ? 5 : 23 - h->shift;
        h->group = 1 << h->group_log2; /* FIT_GROUP at most */
        h->base = lo & ~(((uint32_t)h->group << h->shift) - 1u);
        int64_t top = (int64_t)((hi - h->base) >> h->shift) + 1; /* hi's bucket */
        if (top < h->n_buckets) {
            h->n_buckets = top + 1; /* the buckets past hi's would stay empty: never cleared,
                                       summed or scanned */
            return true;
        }
    }
    return false;
}

/* The fewest mantissa units, summed over buckets of shift s below acc, that take den * acc to
 * need: ceil((need - den acc) / (den 2^s)), 0 when acc already does, UINT64_MAX past any sum of
 * mantissas. One division where comparing bucket by bucket took a 128-bit product each. */
static uint64_t fit_units_short(fit_u128 acc, uint32_t den, fit_u128 need, int s)
{
    if ((fit_u128)den * acc >= need)
        return 0;
    fit_u128 step = (fit_u128)den << s, q = (need - (fit_u128)den * acc + step - 1) / step;
    return q >> 64 ? UINT64_MAX : (uint64_t)q;
}

/* Scanning down from bucket `from` (groups first, then the crossing group's buckets): the
 * bucket whose mass takes den * acc to need; acc and taken advance past the buckets above it.
 * The buckets of one group share an exponent, so within it the test is on their mantissas. */
static int64_t fit_crossing(const fit_hist *h, const fit_u128 *group_mass,
                            const uint32_t *group_count, int64_t from, fit_u128 *acc,
                            int64_t *taken, uint32_t den, fit_u128 need)
{
    int64_t k = from;
    while (k >= 1) {
        int64_t g = (k - 1) >> h->group_log2, bottom = 1 + (g << h->group_log2);
        if (((k - 1) & (h->group - 1)) == h->group - 1 && den * (*acc + group_mass[g]) < need) {
            *acc += group_mass[g]; /* the whole group stays above the threshold */
            *taken += group_count[g];
            k -= h->group;
            continue;
        }
        int s = fit_unit_shift(h, k);
        uint64_t short_by = fit_units_short(*acc, den, need, s), units = 0, count = 0;
        for (; k >= bottom; k--) {
            units += fit_mantissas(h, k);
            if (units >= short_by) {
                *acc += (fit_u128)(units - fit_mantissas(h, k)) << s;
                *taken += (int64_t)count;
                return k;
            }
            count += fit_count(h, k);
        }
        *acc += (fit_u128)units << s;
        *taken += (int64_t)count;
    }
    return 0;
}

/* How many of bucket k's values, largest first, take den * acc (acc: the mass above the bucket)
 * to need, when the bucket's count c, mantissa sum M and bit range settle it without its values;
 * -1 when they do not. The bucket lies in one exponent, so its mantissas lie in [m_lo, m_hi] and
 * the j largest of them sum to at most min(j m_hi, M - (c - j) m_lo) and at least
 * max(j M / c, M - (c - j) m_hi): the fewest j the first bound lets reach the units the bucket
 * must supply and the fewest the second guarantees are the answer when they agree. With a
 * bucket 2^shift bits wide the two differ by about c 2^(shift - 23) of a value, so they mostly
 * agree (in 1 of 400 rows of the bench's probed pass and 1.4% of test_attention's rows they do
 * not), and the row's values are not swept again. */
static int64_t fit_bucket_share(const fit_hist *h, int64_t k, fit_u128 acc, uint32_t den,
                                fit_u128 need)
{
    uint64_t c = fit_count(h, k), m = fit_mantissas(h, k);
    uint64_t short_by = fit_units_short(acc, den, need, fit_unit_shift(h, k));
    uint32_t b0 = h->base + ((uint32_t)(k - 1) << h->shift);
    uint64_t m_lo = bits_mantissa(b0), m_hi = bits_mantissa(b0 + ((1u << h->shift) - 1u));
    m_lo = m_lo ? m_lo : 1; /* a bucket from bits 0 up holds no zero */
    LP_ASSERT(short_by >= 1 && short_by <= m && c >= 1); /* fit_crossing's bucket reaches */
    uint64_t fewest = (short_by + m_hi - 1) / m_hi, rest = (m - short_by) / m_lo;
    fewest = rest < c && c - rest > fewest ? c - rest : fewest;
    uint64_t enough = (short_by * c + m - 1) / m, enough_b = c - (m - short_by) / m_hi;
    enough = enough_b < enough ? enough_b : enough;
    return fewest == enough ? (int64_t)fewest : -1;
}

/* The fitted path; false (nothing written) when the row does not fit. */
static bool sparsity_fitted(const lp_kernel_table *kt, float *p, int64_t n, uint32_t lo,
                            uint32_t hi, lp_attn_row_stats *st)
{
    fit_hist h; /* 24 KB of stack */
    if (!fit_layout(&h, lo, hi, n))
        return false;
    memset(h.buckets, 0, (size_t)h.n_buckets * sizeof *h.buckets);
    const uint32_t low_bits = prob_bits(1e-3f);
    const uint32_t low_key = low_bits > lo && low_bits <= hi ? fit_key(h.base, h.shift, low_bits)
                                                              : 0;
    /* the values of low_key's bucket below 1e-3 */
    uint64_t low_part = kt->sparsity_histogram(p, n, h.base, h.shift, low_key, low_bits,
                                               h.buckets);
    int64_t n_groups = (h.n_buckets - 2) / h.group + 1;
    fit_u128 group_mass[FIT_MAX_GROUPS], total = 0, low = 0;
    uint32_t group_count[FIT_MAX_GROUPS];
    for (int64_t g = 0; g < n_groups; g++) {
        /* the buckets' words summed whole: below FIT_MAX_VALUES values neither field carries
         * into the other */
        uint64_t word = 0;
        int64_t k0 = 1 + g * h.group, k1 = k0 + h.group < h.n_buckets ? k0 + h.group : h.n_buckets;
        for (int64_t k = k0; k < k1; k++)
            word += h.buckets[k];
        uint64_t m = word & ((UINT64_C(1) << FIT_COUNT_SHIFT) - 1);
        group_mass[g] = (fit_u128)m << fit_unit_shift(&h, k0);
        group_count[g] = (uint32_t)(word >> FIT_COUNT_SHIFT);
        total += group_mass[g];
        if (low_key && k1 <= (int64_t)low_key) {
            low += group_mass[g]; /* the whole group lies below low_key's bucket */
        } else if (low_key && k0 < (int64_t)low_key) {
            uint64_t below = 0;
            for (int64_t k = k0; k < (int64_t)low_key; k++)
                below += fit_mantissas(&h, k);
            low += (fit_u128)below << fit_unit_shift(&h, k0);
        }
    }
    if (low_bits > hi)
        low = total;
    else if (low_key)
        low += (fit_u128)low_part << fit_unit_shift(&h, low_key);
    /* the crossing bucket of each threshold, then its values refined */
    int64_t bucket[3], taken[3], from = h.n_buckets - 1, above = 0;
    fit_u128 acc = 0, acc_at[3];
    for (int f = 0; f < 3; f++) {
        bucket[f] = fit_crossing(&h, group_mass, group_count, from, &acc, &above,
                                 sparsity_den[f], total * sparsity_num[f]);
        LP_ASSERT(bucket[f] >= 1); /* the whole row reaches every threshold */
        taken[f] = above;
        acc_at[f] = acc;
        from = bucket[f];
    }
    /* each crossing bucket's count, sum and bounds mostly settle its share; the values of the
     * others to the front, in one pass, and refined */
    int64_t k[3];
    uint32_t keys[3];
    bool settled = true;
    for (int f = 0; f < 3; f++) {
        int64_t j = fit_bucket_share(&h, bucket[f], acc_at[f], sparsity_den[f],
                                     total * sparsity_num[f]);
        k[f] = taken[f] + j;
        keys[f] = j < 0 ? (uint32_t)bucket[f] : UINT32_MAX; /* no value has key UINT32_MAX */
        settled = settled && j >= 0;
    }
    exact_sum low_exact = fit_exact(&h, low);
    if (settled) {
        sparsity_fill(st, k, &low_exact);
        return true;
    }
    int64_t front = kt->sparsity_gather(p, n, h.base, h.shift, keys);
    exact_sum total_exact = fit_exact(&h, total);
    int level = h.shift > 14 ? 1 : h.shift > 7 ? 2 : h.shift > 0 ? 3 : SPARSE_LEVELS;
    for (int f = 0; f < 3; f++) {
        if (keys[f] == UINT32_MAX)
            continue;
        int64_t c = 0;
        for (int64_t j = 0; j < front; j++)
            if (fit_key(h.base, h.shift, prob_bits(p[j])) == keys[f]) {
                float t = p[c];
                p[c++] = p[j];
                p[j] = t;
            }
        exact_sum in_bucket = fit_exact(&h, acc_at[f]);
        exact_sum need = exact_times(&total_exact, sparsity_num[f]);
        k[f] = taken[f] + keys_needed(p, c, level, &in_bucket, sparsity_den[f], &need);
    }
    sparsity_fill(st, k, &low_exact);
    return true;
}

void lp_attn_row_sparsity_with(const lp_kernel_table *kt, float *p, int64_t n,
                               lp_attn_row_stats *st)
{
    uint32_t lo, hi;
    kt->sparsity_range(p, n, &lo, &hi);
    lp_attn_row_sparsity_in(kt, p, n, lo, hi, st);
}

void lp_attn_row_sparsity_in(const lp_kernel_table *kt, float *p, int64_t n, uint32_t lo,
                             uint32_t hi, lp_attn_row_stats *st)
{
    if (hi >= PROB_BITS_END) { /* a value outside [0, 2) or NaN: refused */
        st->keys50 = st->keys90 = st->keys99 = st->low_mass = NAN;
        return;
    }
    if (hi == 0) { /* zeros only: no mass to reach */
        int64_t none[3] = {0, 0, 0};
        exact_sum zero = {{0}};
        sparsity_fill(st, none, &zero);
        return;
    }
    if (!sparsity_fitted(kt, p, n, lo, hi, st))
        sparsity_by_fields(p, n, st);
}

void lp_attn_row_sparsity(float *p, int64_t n, lp_attn_row_stats *st)
{
    lp_attn_row_sparsity_with(&lp_kernels_ref_table, p, n, st);
}

/* The row's softmax maximum and denominator over keys [lo, hi) and the learned sink, in double. */
static void ref_row_norm(const lp_attn_args *a, int64_t i, int64_t lo, int64_t hi, double *max,
                         double *sum)
{
    *max = a->has_sink ? (double)a->sink_logit : -HUGE_VAL;
    for (int64_t j = lo; j < hi; j++) {
        double s = (double)ref_score(a, i, j);
        if (s > *max)
            *max = s;
    }
    *sum = a->has_sink ? exp((double)a->sink_logit - *max) : 0.0;
    for (int64_t j = lo; j < hi; j++)
        *sum += exp((double)ref_score(a, i, j) - *max);
}

/* The softmax of a row with visible keys [lo, hi) (and the learned sink): output, probabilities
 * and statistics, all in double from the recomputed scores. */
static void ref_softmax_row(const lp_attn_args *a, int64_t i, int64_t lo, int64_t hi, float *out,
                            float *prow, lp_attn_row_stats *st)
{
    int64_t pos = a->mask->q_pos0 + i;
    lp_dtype dt = lp_attn_kv_dtype(a);
    double max, sum;
    ref_row_norm(a, i, lo, hi, &max, &sum);
    for (int64_t d = 0; d < a->v_dim; d++) {
        double o = 0.0;
        for (int64_t j = lo; j < hi; j++)
            o += exp((double)ref_score(a, i, j) - max) / sum *
                 (double)lp_attn_kv_at(dt, a->v, a->v_stride, j, d);
        out[d] = (float)o;
    }
    double entropy = 0.0, dist = 0.0, local = 0.0, total = 0.0, best = 0.0;
    for (int64_t j = lo; j < hi; j++) {
        double p = exp((double)ref_score(a, i, j) - max) / sum;
        if (prow)
            prow[j] = (float)p;
        if (p > 0.0)
            entropy -= p * log(p);
        dist += p * (double)(pos - j);
        if (pos - j < a->local_window)
            local += p;
        total += p;
        if (p > best)
            best = p;
        if (j == 0)
            st->sink = (float)p;
        if (j == pos - 1)
            st->prev = (float)p;
        if (j == pos)
            st->self = (float)p;
    }
    if (a->has_sink) {
        double p = exp((double)a->sink_logit - max) / sum;
        if (p > 0.0)
            entropy -= p * log(p); /* the entropy is of the whole distribution, sink included */
        st->learned_sink = (float)p;
    }
    st->entropy = (float)entropy;
    st->max_prob = (float)best;
    st->distance = (float)dist;
    st->local = (float)local;
    st->row_sum = (float)total;
}

static void attention_ref_head(const lp_attn_args *a);

void lp_attention_ref(const lp_attn_args *a)
{
    for (int64_t g = 0; g < lp_attn_group_size(a); g++) {
        lp_attn_args head = lp_attn_group_head(a, g);
        attention_ref_head(&head);
    }
}

/* One query head: every row materialized, softmax in the definition's order. */
static void attention_ref_head(const lp_attn_args *a)
{
    int64_t begin, end;
    lp_attn_rows(a, &begin, &end);
    /* the sparsity statistics sort a copy of each row; without it they are NaN */
    float *sorted = a->row_stats ? malloc((size_t)(a->n_k > 0 ? a->n_k : 1) * sizeof *sorted)
                                 : NULL;
    for (int64_t i = begin; i < end; i++) {
        int64_t lo, hi;
        ref_row_range(a, i, &lo, &hi);
        float *out = a->out + i * a->out_stride;
        float *prow = a->probs ? a->probs + i * a->n_k : sorted;
        lp_attn_row_stats st;
        memset(&st, 0, sizeof st);
        for (int64_t d = 0; d < a->v_dim; d++)
            out[d] = 0.0f;
        if (prow)
            for (int64_t j = 0; j < a->n_k; j++)
                prow[j] = 0.0f;
        bool finite = !a->has_sink || isfinite(a->sink_logit);
        for (int64_t j = lo; j < hi; j++)
            finite = finite && isfinite(ref_score(a, i, j));
        if (!finite)
            ref_poison_row(a, lo, hi, out, prow, &st);
        else if (lo < hi || a->has_sink)
            ref_softmax_row(a, i, lo, hi, out, prow, &st);
        if (a->row_stats && finite && !sorted)
            st.keys50 = st.keys90 = st.keys99 = st.low_mass = NAN;
        else if (a->row_stats && finite && lo < hi && !a->skip_sparsity) {
            if (prow != sorted)
                memcpy(sorted + lo, prow + lo, (size_t)(hi - lo) * sizeof *sorted);
            lp_attn_row_sparsity(sorted + lo, hi - lo, &st);
        }
        if (a->row_stats)
            a->row_stats[i] = st;
    }
    free(sorted);
}

/* ---- blocked attention tiles (attention.c) */

static float block_max_ref(const float *x, int64_t n, bool *all_finite)
{
    float max = -INFINITY;
    bool finite = true;
    for (int64_t i = 0; i < n; i++) {
        finite = finite && isfinite(x[i]);
        if (x[i] > max)
            max = x[i];
    }
    *all_finite = finite;
    return max;
}

static void attn_pack_k_ref(const float *k, int64_t k_stride, int64_t n, int64_t head_dim,
                            float *kp)
{
    for (int64_t c = 0; c < LP_ATTN_NR; c++)
        for (int64_t d = 0; d < head_dim; d++)
            kp[d * LP_ATTN_NR + c] = c < n ? k[c * k_stride + d] : 0.0f;
}

static void attn_qk_ref(const float *qp, int rows, const float *kp, int64_t head_dim,
                        float scale, float *s, int64_t ld_s)
{
    for (int r = 0; r < rows; r++) {
        float acc[LP_ATTN_NR] = {0};
        for (int64_t d = 0; d < head_dim; d++)
            for (int c = 0; c < LP_ATTN_NR; c++)
                acc[c] += qp[d * LP_ATTN_MR + r] * kp[d * LP_ATTN_NR + c];
        for (int c = 0; c < LP_ATTN_NR; c++)
            s[r * ld_s + c] = acc[c] * scale;
    }
}

static void attn_pv_ref(const float *p, int64_t ld_p, int rows, int64_t n_keys, const float *v,
                        int64_t v_stride, const float *alpha, float *out, int64_t out_stride,
                        int64_t v_dim)
{
    for (int r = 0; r < rows; r++) {
        scale_ref(out + r * out_stride, alpha[r], v_dim);
        for (int64_t j = 0; j < n_keys; j++)
            axpy_ref(out + r * out_stride, p[r * ld_p + j], v + j * v_stride, v_dim);
    }
}

/* exp(x) for the softmax weights, x <= 0: 0 below LP_ATTN_EXP_MIN as the SIMD twins. */
static float attn_exp1(float x) { return x >= LP_ATTN_EXP_MIN ? expf(x) : 0.0f; }

static unsigned attn_softmax_ref(float *s, int64_t ld_s, int rows, int64_t n, float *m, float *l,
                                 float *alpha)
{
    unsigned bad = 0;
    for (int r = 0; r < rows; r++) {
        float *x = s + r * ld_s;
        bool finite;
        float block_max = block_max_ref(x, n, &finite);
        if (!finite) {
            bad |= 1u << r;
            continue;
        }
        float m_new = block_max > m[r] ? block_max : m[r];
        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            x[j] = attn_exp1(x[j] - m_new);
            sum += x[j];
        }
        alpha[r] = attn_exp1(m[r] - m_new);
        l[r] = l[r] * alpha[r] + sum;
        m[r] = m_new;
    }
    return bad;
}

static float attn_exp_sum_ref(float *x, int64_t n, float max)
{
    return exp_sum_by(x, n, max, attn_exp1);
}

static void stream_fill_ref(float *dst, const float *src, int64_t n)
{
    if (n <= 0)
        return;
    if (src)
        memcpy(dst, src, (size_t)n * sizeof *dst);
    else
        memset(dst, 0, (size_t)n * sizeof *dst);
}

static void f32_to_f16_ref(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = lp_f32_to_f16(src[i]);
}

static void attn_row_probs_ref(float *s, int64_t n, float m, float inv_l, int64_t j0, int64_t pos,
                               int64_t window, lp_attn_row_sums *sums)
{
    float entropy_part = 0.0f, distance = 0.0f, local = 0.0f, max_prob = 0.0f;
    float min_positive = INFINITY;
    for (int64_t j = 0; j < n; j++) {
        float centred = s[j] - m, p = attn_exp1(centred) * inv_l;
        float dist = (float)(pos - j0 - j);
        entropy_part += p * centred;
        distance += p * dist;
        local += pos - j0 - j < window ? p : 0.0f;
        max_prob = p > max_prob ? p : max_prob;
        min_positive = p > 0.0f && p < min_positive ? p : min_positive;
        s[j] = p;
    }
    *sums = (lp_attn_row_sums){entropy_part, distance, local, max_prob, min_positive};
}

/* ---- matrix-vector rows: each value converted from its stored form as it is multiplied */

static float row_dot_f32_ref(const void *row, const float *x, const float *x_sums, int64_t k)
{
    (void)x_sums;
    const uint8_t *bytes = row;
    double sum = 0.0;
    for (int64_t i = 0; i < k; i++) {
        float w;
        memcpy(&w, bytes + 4 * i, 4);
        sum += (double)w * (double)x[i];
    }
    return (float)sum;
}

static float row_dot_f16_ref(const void *row, const float *x, const float *x_sums, int64_t k)
{
    (void)x_sums;
    const uint8_t *bytes = row;
    double sum = 0.0;
    for (int64_t i = 0; i < k; i++)
        sum += (double)lp_f16_to_f32(lp_load_u16(bytes + 2 * i)) * (double)x[i];
    return (float)sum;
}

static float row_dot_bf16_ref(const void *row, const float *x, const float *x_sums, int64_t k)
{
    (void)x_sums;
    const uint8_t *bytes = row;
    double sum = 0.0;
    for (int64_t i = 0; i < k; i++)
        sum += (double)lp_bf16_to_f32(lp_load_u16(bytes + 2 * i)) * (double)x[i];
    return (float)sum;
}

/* Rows of 32-value blocks of block_bytes each, a scale times a sum of integer codes times x:
 * the block sums in double, each scaled as it joins the row's sum (Q8_0, MXFP4). */
typedef double (*block32_dot_fn)(const uint8_t *block, const float *x, double *scale);

static float row_dot_blocks32(const uint8_t *b, const float *x, int64_t k, uint32_t block_bytes,
                              block32_dot_fn block_dot)
{
    double sum = 0.0;
    for (int64_t i0 = 0; i0 < k; i0 += 32, b += block_bytes) {
        double scale, dot = block_dot(b, x + i0, &scale);
        sum += scale * dot;
    }
    return (float)sum;
}

/* Q8_0 blocks {f16 d; i8 q[32]}: w = d * q. */
static double q8_0_block_dot(const uint8_t *b, const float *x, double *scale)
{
    double dot = 0.0;
    for (int j = 0; j < 32; j++)
        dot += (double)(int8_t)b[2 + j] * (double)x[j];
    *scale = (double)lp_f16_to_f32(lp_load_u16(b));
    return dot;
}

static float row_dot_q8_0_ref(const void *row, const float *x, const float *x_sums, int64_t k)
{
    (void)x_sums;
    return row_dot_blocks32(row, x, k, 34, q8_0_block_dot);
}

/* Q4_K blocks {f16 d, dmin; u8 scales[12]; u8 q[128]} of 256 values in 8 groups of 32: group g
 * has w = d * scale_g * q - dmin * min_g, its nibbles in bytes 32 (g / 2) .. + 32, low nibbles
 * for even g and high for odd. The min term is dmin * min_g * (sum of x over the group). */
static float row_dot_q4_k_ref(const void *row, const float *x, const float *x_sums, int64_t k)
{
    const uint8_t *b = row;
    double sum = 0.0;
    for (int64_t i0 = 0; i0 < k; i0 += 256, b += 144) {
        double d = lp_f16_to_f32(lp_load_u16(b)), dmin = lp_f16_to_f32(lp_load_u16(b + 2));
        for (int g = 0; g < 8; g++) {
            int scale, min;
            lp_q4_k_scale_min(b + 4, g, &scale, &min);
            const uint8_t *q = b + 16 + 32 * (g / 2);
            const float *xg = x + i0 + 32 * g;
            double dot = 0.0;
            for (int j = 0; j < 32; j++)
                dot += (double)((g % 2) ? q[j] >> 4 : q[j] & 0x0f) * (double)xg[j];
            sum += d * scale * dot - dmin * min * (double)x_sums[(i0 >> 5) + g];
        }
    }
    return (float)sum;
}

/* MXFP4 blocks {u8 e (E8M0); u8 qs[16]} of 32 values: w = 2^(e - 128) * doubled E2M1 level,
 * values 0..15 in the low nibbles and 16..31 in the high ones (ggml's layout). */
static double mxfp4_block_dot(const uint8_t *b, const float *x, double *scale)
{
    double dot = 0.0;
    for (int j = 0; j < 16; j++)
        dot += (double)lp_mxfp4_levels_x2[b[1 + j] & 0x0f] * (double)x[j] +
               (double)lp_mxfp4_levels_x2[b[1 + j] >> 4] * (double)x[16 + j];
    *scale = (double)lp_mxfp4_half_scale(b[0]);
    return dot;
}

static float row_dot_mxfp4_ref(const void *row, const float *x, const float *x_sums, int64_t k)
{
    (void)x_sums;
    return row_dot_blocks32(row, x, k, 17, mxfp4_block_dot);
}

/* Rows of 32-value blocks of block_bytes each against int8 activations: per block the exact
 * integer sum of the weight codes times q_x, scaled by the block's scale times d_x in float
 * (Q8_0, MXFP4). */
typedef int32_t (*block32_isum_fn)(const uint8_t *block, const int8_t *xq, float *scale);

static float row_dot_blocks32_i8(const uint8_t *b, const int8_t *xq, const float *xd, int64_t k,
                                 uint32_t block_bytes, block32_isum_fn isum_of)
{
    float sum = 0.0f;
    for (int64_t i = 0; i < k / 32; i++, b += block_bytes) {
        float scale;
        int32_t isum = isum_of(b, xq + 32 * i, &scale);
        sum += scale * xd[i] * (float)isum;
    }
    return sum;
}

static int32_t q8_0_block_isum(const uint8_t *b, const int8_t *xq, float *scale)
{
    int32_t isum = 0;
    for (int j = 0; j < 32; j++)
        isum += (int32_t)(int8_t)b[2 + j] * (int32_t)xq[j];
    *scale = lp_f16_to_f32(lp_load_u16(b));
    return isum;
}

static float row_dot_q8_0_i8_ref(const void *row, const int8_t *xq, const float *xd,
                                 const int16_t *xs16, const int32_t *x_off, int64_t k)
{
    (void)xs16;
    (void)x_off;
    return row_dot_blocks32_i8(row, xq, xd, k, 34, q8_0_block_isum);
}

/* Q4_K rows against int8 activations in 256-value blocks: per block the integer sum over groups
 * of scale_g * (q4 . q8), less dmin * sum_g min_g * (sum of the group's q8, from xs16). */
static float row_dot_q4_k_i8_ref(const void *row, const int8_t *xq, const float *xd,
                                 const int16_t *xs16, const int32_t *x_off, int64_t k)
{
    (void)x_off;
    const uint8_t *b = row;
    float sum = 0.0f, mins = 0.0f;
    for (int64_t i = 0; i < k / 256; i++, b += 144) {
        int32_t isum = 0, msum = 0;
        for (int g = 0; g < 8; g++) {
            int scale, min;
            lp_q4_k_scale_min(b + 4, g, &scale, &min);
            const uint8_t *q = b + 16 + 32 * (g / 2);
            const int8_t *xg = xq + 256 * i + 32 * g;
            int32_t dot = 0;
            for (int j = 0; j < 32; j++)
                dot += (int32_t)((g % 2) ? q[j] >> 4 : q[j] & 0x0f) * (int32_t)xg[j];
            isum += scale * dot;
            msum += min * ((int32_t)xs16[16 * i + 2 * g] + (int32_t)xs16[16 * i + 2 * g + 1]);
        }
        float dx = xd[i];
        sum += lp_f16_to_f32(lp_load_u16(b)) * dx * (float)isum;
        mins += lp_f16_to_f32(lp_load_u16(b + 2)) * dx * (float)msum;
    }
    return sum - mins;
}

/* MXFP4 blocks against int8 activations: the doubled levels times q_x, scaled by 2^(e - 128). */
static int32_t mxfp4_block_isum(const uint8_t *b, const int8_t *xq, float *scale)
{
    int32_t isum = 0;
    for (int j = 0; j < 16; j++)
        isum += (int32_t)lp_mxfp4_levels_x2[b[1 + j] & 0x0f] * (int32_t)xq[j] +
                (int32_t)lp_mxfp4_levels_x2[b[1 + j] >> 4] * (int32_t)xq[16 + j];
    *scale = lp_mxfp4_half_scale(b[0]);
    return isum;
}

static float row_dot_mxfp4_i8_ref(const void *row, const int8_t *xq, const float *xd,
                                  const int16_t *xs16, const int32_t *x_off, int64_t k)
{
    (void)xs16;
    (void)x_off;
    return row_dot_blocks32_i8(row, xq, xd, k, 17, mxfp4_block_isum);
}

/* Every slot is the function named <slot>_ref above: a slot without one does not compile, so this
 * table is complete by construction and is the fallback of every other ISA's. */
#define LP_REF_SLOT(slot) .slot = slot##_ref,
const lp_kernel_table lp_kernels_ref_table = {
    .isa = LP_ISA_REF,
    .gemm = {.mr = 4, .nr = 8, .kc = 256, .mc = 128, .nc = 2048, .ukernel = gemm_f32_ref_4x8,
             .pack_a = pack_a_4, .pack_b = pack_b_8},
    LP_KERNEL_SLOTS(LP_REF_SLOT)
};
#undef LP_REF_SLOT
