/* The dispatch table shared by ref.c, avx2.c, dispatch.c, gemm.c and attention.c.
 *
 *   const lp_kernel_table *kt = lp_kernels_table();   // chosen once; LP_ISA forces one
 *                                                      // (ref|avx2|avx512|avx512vnni)
 *   kt->gemm.ukernel(kc, a_panel, b_panel, c, ldc, m_edge, n_edge, accumulate);
 *
 * Tables are built as BLIS builds its contexts: each ISA's table starts as a copy of ref's and
 * takes the ISA's overrides (lp_kernels_override), so a slot an ISA does not provide falls back
 * to the plain C kernel instead of being NULL. Tile and block sizes are data in the table
 * (lp_gemm_config), never constants in gemm.c.
 *
 * Packed GEMM layouts (C[m, n] = A[m, k] . B[n, k]^T, blocks of kc along k):
 *
 *   A block (mc x kc) -> ceil(mc/MR) panels of MR rows, each stored k-major:
 *
 *     panel 0: a[0][0] a[1][0] .. a[MR-1][0] | a[0][1] a[1][1] .. a[MR-1][1] | ... (kc groups)
 *     panel 1: a[MR][0] .. a[2MR-1][0]       | ...
 *     rows past mc are zero, so the micro-kernel never branches inside its loop.
 *
 *   B block (nc x kc) -> ceil(nc/NR) panels of NR columns (= NR weight rows), stored k-major:
 *
 *     panel 0: w[0][p] w[1][p] .. w[NR-1][p]  for p = 0 .. kc-1   (NR floats per k step)
 *     columns past nc are zero. Weight rows in f16/bf16/GGUF quants are converted to f32 here,
 *     kc values at a time (kc is a multiple of 256, so quant segments are whole blocks).
 *
 *   The micro-kernel multiplies one A panel (MR x kc) by one B panel (kc x NR) into an MR x NR
 *   tile of C held in registers; m_edge/n_edge (<= MR/NR) say how much of the tile is real.
 *
 *   Loops (BLIS order), per thread over its own range of NR-column panels:
 *     for jc in n step NC:  for pc in k step KC:  pack B[jc.., pc..]          (L3/L2)
 *       for ic in m step MC:  pack A[ic.., pc..]                              (L2)
 *         for jr in nc step NR:  for ir in mc step MR:  micro-kernel          (B panel in L1)
 *   Each C element is summed in the same order whatever the thread count, so results are
 *   bitwise identical for 1, 2 or N threads with the same ISA.
 */
#ifndef LP_TRACE_KERNELS_INTERNAL_H
#define LP_TRACE_KERNELS_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "trace/kernels/kernels.h"

/* c[0..m_edge)[0..n_edge) (+)= a_panel . b_panel over kc steps; ldc in elements. */
typedef void (*lp_gemm_ukernel_fn)(int64_t kc, const float *a, const float *b, float *c,
                                   int64_t ldc, int m_edge, int n_edge, bool accumulate);
/* Rows [0, rows) of src (row stride ld floats), kc values from each, into one MR-row A panel or
 * NR-column B panel (layouts above); rows past `rows` are zero. */
typedef void (*lp_gemm_pack_fn)(const float *src, int64_t ld, int64_t rows, int64_t kc, float *dst);

/* The GEMM of one ISA: its register tile, cache blocks and the three functions built for that
 * tile. They go together: an ISA that overrides the micro-kernel overrides all of it. */
typedef struct lp_gemm_config {
    int mr, nr;             /* register tile of the micro-kernel */
    int64_t kc, mc, nc;     /* cache blocks; kc is a multiple of 256 (whole GGUF blocks) */
    lp_gemm_ukernel_fn ukernel;
    lp_gemm_pack_fn pack_a; /* MR rows */
    lp_gemm_pack_fn pack_b; /* NR rows of the weights */
} lp_gemm_config;

/* Query rows per attention tile (attn_qk / attn_pv): six rows x 16 keys = 12 ymm accumulators,
 * the GEMM's register tile. */
enum { LP_ATTN_MR = 6, LP_ATTN_NR = 16 };
/* The softmax weights exp(s - m) are flushed to 0 below this exponent (exp(-86) = 4.5e-38, a
 * normal float; below it a vector exp's 2^n would leave the normal range). */
#define LP_ATTN_EXP_MIN (-86.0f)

/* What attn_row_probs returns beside the probabilities (the slot's contract below). */
typedef struct lp_attn_row_sums {
    float entropy_part, distance, local, max_prob;
    float min_positive; /* the smallest p_j > 0, INFINITY when none */
} lp_attn_row_sums;

/* The dot product of one stored weight row with x (lp_matvec; x_sums as the table says). */
typedef float (*lp_row_dot_fn)(const void *row, const float *x, const float *x_sums, int64_t k);

/* The dot product of one stored Q8_0 / Q4_K / MXFP4 weight row with x quantized to int8 once per
 * matvec (lp_matvec_int8, llama.cpp's vec_dot_q8_0_q8_0 / q4_K_q8_K / mxfp4_q8_0): xq[k] int8
 * values, xd[b] the scale of each activation block (32 values for Q8_0 and MXFP4, 256 for Q4_K),
 * xs16[i] = sum of xq[16 i .. 16 i + 16) (Q4_K's min term; the others ignore it), and for blocks
 * of 32 x_off[b] = -128 * sum of xq[32 b .. 32 b + 32): what a kernel that reads the weights as
 * unsigned bytes w + 128 (vpdpbusd multiplies unsigned by signed bytes) takes off each block's
 * integer sum (Q4_K ignores it). Integer dot products per block, block scales in float. */
typedef float (*lp_row_dot_i8_fn)(const void *row, const int8_t *xq, const float *xd,
                                  const int16_t *xs16, const int32_t *x_off, int64_t k);

/* Every function slot of the table after the GEMM, in declaration order; dispatch.c merges and
 * checks tables slot by slot with it, and the _Static_assert below keeps it complete. */
#define LP_KERNEL_SLOTS(X)                                                                         \
    X(f16_to_f32) X(bf16_to_f32) X(f32_to_f16) X(dot) X(axpy) X(scale) X(scores) X(weighted_sum) X(exp_sum)     \
    X(rmsnorm) X(layernorm) X(softmax) X(silu_mul) X(gelu_mul) X(gelu) X(silu) X(add)             \
    X(rope_rotate) X(attn_pack_k) X(attn_qk) X(attn_pv) X(attn_softmax) X(attn_exp_sum) X(attn_row_probs) X(block_max)            \
    X(sparsity_range) X(sparsity_histogram) X(sparsity_gather) X(stream_fill) X(row_dot_f32)       \
    X(row_dot_f16) X(row_dot_bf16) X(row_dot_q8_0) X(row_dot_q4_k) X(row_dot_mxfp4)                \
    X(row_dot_q8_0_i8) X(row_dot_q4_k_i8) X(row_dot_mxfp4_i8)

typedef struct lp_kernel_table {
    lp_isa isa;
    lp_gemm_config gemm;
    /* Row conversions used while packing. */
    void (*f16_to_f32)(const void *src, float *dst, int64_t n); /* unaligned ok */
    void (*bf16_to_f32)(const void *src, float *dst, int64_t n);
    /* dst[i] = lp_f32_to_f16(src[i]) (round to nearest even, subnormals kept): the f16 maps */
    void (*f32_to_f16)(const float *src, uint16_t *dst, int64_t n);
    /* Attention helpers. */
    float (*dot)(const float *x, const float *y, int64_t n);
    void (*axpy)(float *y, float a, const float *x, int64_t n); /* y += a x */
    void (*scale)(float *y, float a, int64_t n);                /* y *= a */
    /* s[j] = scale * (q . k[j * k_stride ..]) for j < n_keys (attention scores of one row). */
    void (*scores)(const float *q, const float *k, int64_t k_stride, int64_t n_keys,
                   int64_t head_dim, float scale, float *s);
    /* out[0..v_dim) += sum_j w[j] * v[j * v_stride ..] for j < n_keys. */
    void (*weighted_sum)(float *out, const float *w, const float *v, int64_t v_stride,
                         int64_t n_keys, int64_t v_dim);
    /* x[i] = exp(x[i] - max); returns the sum. */
    float (*exp_sum)(float *x, int64_t n, float max);
    /* The public vector kernels. */
    void (*rmsnorm)(float *y, const float *x, const float *weight, int64_t n, float eps,
                    bool weight_plus_one);
    void (*layernorm)(float *y, const float *x, const float *weight, const float *bias, int64_t n,
                      float eps);
    void (*softmax)(float *x, int64_t n);
    void (*silu_mul)(float *gate, const float *up, int64_t n);
    void (*gelu_mul)(float *gate, const float *up, int64_t n, bool tanh_approx);
    void (*gelu)(float *x, int64_t n, bool tanh_approx);
    void (*silu)(float *x, int64_t n);
    void (*add)(float *y, const float *x, int64_t n);
    /* RoPE rotation of the first rot_dim dims of n_heads heads, given per-dim coefficients:
     * halves:   x[i] = x[i] c[i] - x[i+h] s[i],  x[i+h] = x[i] s[i] + x[i+h] c[i]  (i < h, h = rot/2)
     * adjacent: x[2i] = x[2i] c[2i] + x[2i+1] s[2i], x[2i+1] = x[2i+1] c[2i+1] + x[2i] s[2i+1]
     *           with c = (cos_i, cos_i), s = (-sin_i, +sin_i) per pair. */
    void (*rope_rotate)(float *x, int64_t n_heads, int64_t head_dim, int64_t rot_dim,
                        const float *c, const float *s, bool adjacent_pairs);
    /* Blocked attention (attention.c), tiles of up to LP_ATTN_MR query rows:
     * s[r * ld_s + c] = scale * (q row r . key c) for r < rows, c < 16, from a packed query
     * panel qp[d * LP_ATTN_MR + r] and a packed key panel kp[d * 16 + c] (16 keys), both
     * head_dim deep and 32-byte aligned; rows past `rows` are not written. */
    /* The 16-wide panel attn_qk reads its keys from (and attention.c compacts query tiles
     * from): kp[d * 16 + c] = k[c * k_stride + d] for c < n (0 <= n <= 16) and 0 for
     * n <= c < 16, d < head_dim; kp 32-byte aligned. The GEMM's B packer has this contract. */
    void (*attn_pack_k)(const float *k, int64_t k_stride, int64_t n, int64_t head_dim, float *kp);
    void (*attn_qk)(const float *qp, int rows, const float *kp, int64_t head_dim, float scale,
                    float *s, int64_t ld_s);
    /* out[r * out_stride + d] = alpha[r] * out[r * out_stride + d]
     *                           + sum_{j < n_keys} p[r * ld_p + j] * v[j * v_stride + d]
     * for r < rows, d < v_dim: the online softmax's rescale of the row and the block's P x V. */
    void (*attn_pv)(const float *p, int64_t ld_p, int rows, int64_t n_keys, const float *v,
                    int64_t v_stride, const float *alpha, float *out, int64_t out_stride,
                    int64_t v_dim);
    /* The online softmax step of a tile whose rows all see keys [0, n) (n >= 1): for r < rows,
     * with M the max of row r's scores s[r * ld_s + 0 .. n) and m_new = max(m[r], M),
     *   s[r * ld_s + j] = exp(s - m_new),  alpha[r] = exp(m[r] - m_new),
     *   l[r] = l[r] alpha[r] + sum_j s[r * ld_s + j],  m[r] = m_new
     * where exp is LP_ATTN_EXP_MIN-flushed (exp(x) = 0 for x < LP_ATTN_EXP_MIN; m[r] = -inf
     * gives alpha 0). A row with an infinite or NaN score is left alone (s, m, l, alpha) and
     * its bit (1 << r) set in the result. */
    unsigned (*attn_softmax)(float *s, int64_t ld_s, int rows, int64_t n, float *m, float *l,
                             float *alpha);
    /* x[j] = exp(x[j] - max) for j < n, LP_ATTN_EXP_MIN-flushed; returns their sum. The same
     * exp and summation order as one row of attn_softmax, bit for bit, so a row's result does
     * not depend on whether its block went row by row (a tile cut by the diagonal) or fused. */
    float (*attn_exp_sum)(float *x, int64_t n, float max);
    /* The probabilities of one row from its kept scores, in place, with the sums its statistics
     * need: for j < n (keys j0 + j of a query at position pos, every s[j] <= m, finite),
     *   s[j] = exp(s[j] - m) * inv_l   (exp LP_ATTN_EXP_MIN-flushed, as attn_softmax's)
     *   sums->entropy_part = sum_j p_j (s_j - m)      (before the conversion)
     *   sums->distance     = sum_j p_j (pos - j0 - j)
     *   sums->local        = sum over pos - j0 - j < window of p_j
     *   sums->max_prob     = max_j p_j   (0 for n = 0)
     *   sums->min_positive = min over p_j > 0 of p_j   (INFINITY when none)
     * both exactly the stored p (the sparsity's range comes from them, lp_attn_row_sparsity_in). */
    void (*attn_row_probs)(float *s, int64_t n, float m, float inv_l, int64_t j0, int64_t pos,
                           int64_t window, lp_attn_row_sums *sums);
    /* The three sweeps of lp_attn_row_sparsity's fitted histogram (ref.c), over the float bits u
     * of p[0..n) with -0 read as 0. sparsity_range: *hi = the largest u, *lo = the smallest
     * nonzero u (UINT32_MAX when none). With key(u) = u ? ((u - base) >> shift) + 1 : 0 (every
     * nonzero u >= base), sparsity_histogram adds 2^40 (a count) plus u's 24-bit mantissa
     * (hidden bit included) to buckets[key(u)] for every value, and returns the sum of the
     * mantissas of the values with key(u) == low_key and u < low_bits; sparsity_gather moves
     * the values whose key is one of keys[0..3) to the front of p (the others keep no order)
     * and returns how many. */
    void (*sparsity_range)(const float *p, int64_t n, uint32_t *lo, uint32_t *hi);
    uint64_t (*sparsity_histogram)(const float *p, int64_t n, uint32_t base, int shift,
                                   uint32_t low_key, uint32_t low_bits, uint64_t *buckets);
    int64_t (*sparsity_gather)(float *p, int64_t n, uint32_t base, int shift,
                               const uint32_t keys[3]);
    /* dst[0..n) = src[0..n), or 0 when src is NULL, in stores that bypass the caches where the
     * ISA has them (the probability maps: written once, read by the observer much later). */
    void (*stream_fill)(float *dst, const float *src, int64_t n);
    /* The largest of x[0..n) (-inf for n = 0); *all_finite = no NaN or infinity among them. */
    float (*block_max)(const float *x, int64_t n, bool *all_finite);
    /* Matrix-vector rows (lp_matvec): the dot product of one stored weight row of k values with
     * x, read in its own format. x_sums[b] = sum of x[32 b .. 32 b + 32) (Q4_K's min term);
     * the other formats ignore it. */
    lp_row_dot_fn row_dot_f32, row_dot_f16, row_dot_bf16, row_dot_q8_0, row_dot_q4_k;
    /* Q8_0 / Q4_K rows against int8 activations (lp_row_dot_i8_fn): lp_matvec_int8's path. */
    lp_row_dot_i8_fn row_dot_q8_0_i8, row_dot_q4_k_i8;
    lp_row_dot_fn row_dot_mxfp4;
    lp_row_dot_i8_fn row_dot_mxfp4_i8; /* MXFP4 against int8 activations in blocks of 32 */
} lp_kernel_table;

#define LP_KERNEL_COUNT_SLOT(slot) +1
_Static_assert(sizeof(lp_kernel_table) - offsetof(lp_kernel_table, f16_to_f32) ==
                   (0 LP_KERNEL_SLOTS(LP_KERNEL_COUNT_SLOT)) * sizeof(void (*)(void)),
               "every function slot after the GEMM is listed in LP_KERNEL_SLOTS");

/* The table in use (never NULL). */
const lp_kernel_table *lp_kernels_table(void);
/* The complete table of an ISA, whether or not this CPU runs it (tests); NULL past the enum. */
const lp_kernel_table *lp_kernels_table_for(lp_isa isa);
/* Overlay an ISA's overrides on a table: every non-NULL slot replaces the table's, and a GEMM
 * with a micro-kernel replaces the whole GEMM configuration. */
void lp_kernels_override(lp_kernel_table *table, const lp_kernel_table *overrides);
/* The name of the first empty slot or zero block size, or NULL for a table that is complete. */
const char *lp_kernels_missing_slot(const lp_kernel_table *table);

/* ref.c: the plain C spec of every kernel, complete. Its slots are also the tails the SIMD
 * kernels call for the last n % width elements. */
extern const lp_kernel_table lp_kernels_ref_table;
/* Rotate with cos/sin computed pair by pair: rotations wider than dispatch's coefficient
 * buffer (none known today) take this path. Same arguments as lp_rope. */
void lp_rope_ref(float *x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
                 const float *inv_freq, float attn_scale, bool adjacent_pairs);

/* cos and sin of pair i at position pos, scaled: the angle is pos * inv_freq rounded to float,
 * as Hugging Face computes it in float32. */
static inline void lp_rope_coeff(float pos, float inv_freq, float attn_scale, float *cos_out,
                                 float *sin_out)
{
    float angle = pos * inv_freq;
    *cos_out = (float)cos((double)angle) * attn_scale;
    *sin_out = (float)sin((double)angle) * attn_scale;
}

/* The scalar step of every layernorm, for x[i0 .. n): ref's whole row, a SIMD kernel's tail. */
static inline void lp_layernorm_scalar(float *y, const float *x, const float *weight,
                                       const float *bias, int64_t i0, int64_t n, float mean,
                                       float inv_std)
{
    for (int64_t i = i0; i < n; i++) {
        float v = (x[i] - mean) * inv_std;
        if (weight)
            v *= weight[i];
        if (bias)
            v += bias[i];
        y[i] = v;
    }
}

/* The scalar RoPE steps on one head (layouts and coefficients as rope_rotate's): adjacent pairs
 * (i, i+1) from dim i0, halves pairs (i, i + half) from pair i0. Ref's whole head, a SIMD
 * kernel's tail. */
static inline void lp_rope_adjacent_scalar(float *head, const float *c, const float *s,
                                           int64_t i0, int64_t rot_dim)
{
    for (int64_t i = i0; i + 1 < rot_dim; i += 2) {
        float x0 = head[i], x1 = head[i + 1];
        head[i] = x0 * c[i] + x1 * s[i];
        head[i + 1] = x1 * c[i + 1] + x0 * s[i + 1];
    }
}

static inline void lp_rope_halves_scalar(float *head, const float *c, const float *s, int64_t i0,
                                         int64_t half)
{
    for (int64_t i = i0; i < half; i++) {
        float x0 = head[i], x1 = head[i + half];
        head[i] = x0 * c[i] - x1 * s[i];
        head[i + half] = x0 * s[i] + x1 * c[i];
    }
}

/* The K/V element type of an attention call: 0 (a zeroed lp_attn_args) means f32. Anything but
 * f32, f16 and bf16 is programmer misuse. */
static inline lp_dtype lp_attn_kv_dtype(const lp_attn_args *a)
{
    lp_dtype dt = a->kv_dtype == LP_DTYPE_INVALID ? LP_DTYPE_F32 : a->kv_dtype;
    LP_ASSERT(dt == LP_DTYPE_F32 || dt == LP_DTYPE_F16 || dt == LP_DTYPE_BF16);
    return dt;
}

/* The query rows an attention call computes: [row_begin, row_end) clamped to [0, n_q), or every
 * row when both are 0. */
static inline void lp_attn_rows(const lp_attn_args *a, int64_t *begin, int64_t *end)
{
    *begin = a->row_begin;
    *end = a->row_end;
    if (*begin == 0 && *end == 0)
        *end = a->n_q;
    if (*end > a->n_q)
        *end = a->n_q;
    if (*begin < 0)
        *begin = 0;
    if (*begin > *end)
        *begin = *end;
}

/* The query heads an attention call computes against its K/V (n_group, at least 1). */
static inline int64_t lp_attn_group_size(const lp_attn_args *a)
{
    return a->n_group > 1 ? a->n_group : 1;
}

/* Head g of a call's group as a call of its own (n_group 1): its q, out, probs, row_stats,
 * ALiBi slope and sink logit. */
static inline lp_attn_args lp_attn_group_head(const lp_attn_args *a, int64_t g)
{
    lp_attn_args h = *a;
    h.n_group = 1;
    if (g == 0 && !a->alibi_slopes && !a->sink_logits)
        return h;
    h.q = a->q + g * a->q_head_stride;
    h.out = a->out + g * a->out_head_stride;
    h.probs = a->probs ? a->probs + g * a->probs_head_stride : NULL;
    h.row_stats = a->row_stats ? a->row_stats + g * a->stats_head_stride : NULL;
    h.alibi_slope = a->alibi_slopes ? a->alibi_slopes[g] : a->alibi_slope;
    h.alibi_slopes = NULL;
    h.sink_logit = a->sink_logits ? a->sink_logits[g] : a->sink_logit;
    h.sink_logits = NULL;
    return h;
}

/* exp(m_old - m_new), the factor a row's output and sum take when its running max rises, in
 * the arithmetic of the table's attn_softmax (its exp, flushed below LP_ATTN_EXP_MIN): a row
 * whose block goes row by row then computes what it computes in a fused tile, so a row's result
 * does not depend on which rows share its tile (a call's row range, the thread split). */
static inline float lp_attn_rescale(const lp_kernel_table *kt, float m_old, float m_new)
{
    float x = m_old;
    return kt->attn_exp_sum(&x, 1, m_new);
}

/* Softcap and ALiBi on the scores s[0 .. n) of keys j0 .. j0 + n for a query at pos (both
 * attention paths apply them after scale * q.k). */
static inline void lp_attn_finish_scores(const lp_attn_args *a, float *s, int64_t j0, int64_t n,
                                         int64_t pos)
{
    if (a->softcap > 0.0f) {
        float inv = 1.0f / a->softcap;
        for (int64_t j = 0; j < n; j++)
            s[j] = a->softcap * tanhf(s[j] * inv);
    }
    if (a->alibi_slope != 0.0f)
        for (int64_t j = 0; j < n; j++)
            s[j] += a->alibi_slope * (float)(j0 + j - pos);
}

/* One query row's running softmax (both attention paths): its visible keys [lo, hi), its
 * position, the running max m and sum l (a learned sink counts from the start). */
typedef struct lp_attn_row_state {
    int64_t lo, hi, pos;
    float m, l;
    bool poisoned; /* a non-finite score: the row's output, probabilities and stats are NaN */
} lp_attn_row_state;

/* A row with no mass at all: no visible key and no sink. */
static inline bool lp_attn_row_empty(const lp_attn_row_state *rs) { return !(rs->l > 0.0f); }

/* attention_rows.c. lp_attn_row_init: row i of head a (one head, not a group) before its
 * first key block: its range, position and empty sums (the sink's when it has one); its output
 * row is zeroed. lp_attn_row_probes, once the row's m and l are final: its probabilities from
 * `row`, its finished scores indexed by key (permuted: scratch), into a->probs' row i (the
 * masked frame included) and its statistics into a->row_stats[i], whichever the call asks for.
 * lp_attn_note_probed adds to lp_attn_rows_probed's count. */
void lp_attn_row_init(const lp_attn_args *a, int64_t i, lp_attn_row_state *rs);
void lp_attn_row_probes(const lp_kernel_table *kt, const lp_attn_args *a,
                        const lp_attn_row_state *rs, float *row, int64_t i);
void lp_attn_note_probed(uint64_t rows);

/* attention_decode.c: heads of at most this many query rows (n_q) against more keys (a KV
 * cache) skip the blocked path's packing (a decode step reads each key once; at 4 rows both
 * paths cost about the same). */
enum { LP_ATTN_DECODE_MAX_ROWS = 4 };
bool lp_attention_decode_applies(const lp_attn_args *a);
void lp_attention_decode(const lp_attn_args *a);

/* Element d of row j of a K or V matrix (row stride in elements) as f32. */
static inline float lp_attn_kv_at(lp_dtype dt, const void *base, int64_t stride, int64_t j,
                                  int64_t d)
{
    const uint8_t *bytes = base;
    int64_t index = j * stride + d;
    if (dt == LP_DTYPE_F32) {
        float v;
        memcpy(&v, bytes + index * 4, 4);
        return v;
    }
    uint16_t h = lp_load_u16(bytes + index * 2);
    return dt == LP_DTYPE_F16 ? lp_f16_to_f32(h) : lp_bf16_to_f32(h);
}

/* The 6-bit scale and min of group j (0..7) of a Q4_K block from its 12 packed bytes: groups 0-3
 * in the low 6 bits of bytes j and j + 4, groups 4-7 from the nibbles of bytes j + 4 plus the
 * top two bits of bytes j - 4 and j. */
static inline void lp_q4_k_scale_min(const uint8_t *packed, int j, int *scale, int *min)
{
    if (j < 4) {
        *scale = packed[j] & 63;
        *min = packed[j + 4] & 63;
    } else {
        *scale = (packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4);
        *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
    }
}

/* The multiplier of an MXFP4 block's doubled levels (lp_mxfp4_levels_x2): 2^(e - 127) for the
 * E8M0 byte e, halved. Built from the bits for e >= 2; e = 0 and 1 give the subnormals 2^-128
 * and 2^-127, which have no exponent field of their own. */
static inline float lp_mxfp4_half_scale(uint8_t e)
{
    if (e < 2)
        return e ? 0x1p-127f : 0x1p-128f;
    uint32_t bits = (uint32_t)(e - 1) << 23;
    float d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* matvec.c: lp_linear's checks of a weight matrix for m input rows (dtype, shape, stride). */
lp_status lp_linear_check(int64_t m, const lp_matrix *w, lp_error *err);

/* avx2.c: AVX2 + FMA + F16C overrides (data only: no code of that file runs before dispatch
 * has checked the CPU). */
extern const lp_kernel_table lp_kernels_avx2_overrides;
/* AVX-512F's overrides, applied on top of AVX2's table (avx512.c). */
extern const lp_kernel_table lp_kernels_avx512_overrides;
/* AVX-512 BW/VL/VNNI's matrix-vector rows, on top of AVX-512F's table (matvec_avx512.c). */
extern const lp_kernel_table lp_kernels_avx512_vnni_overrides;
/* gemm_avx2.c: AVX2's 6x16 micro-kernel and its packers. The 16-wide k-major panel of rows
 * [0, rows) of src is AVX2's B packer, AVX-512's A and B packer, and the AVX2 table's
 * attn_pack_k. */
void lp_gemm_avx2_6x16(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                       int m_edge, int n_edge, bool accumulate);
void lp_gemm_pack_a6_avx2(const float *src, int64_t ld, int64_t rows, int64_t kc, float *dst);
void lp_gemm_pack_16_avx2(const float *src, int64_t ld, int64_t rows, int64_t kc, float *dst);
/* attention_avx2.c: the attention tiles of the AVX2 table (slot contracts above). */
void lp_attn_qk_avx2_6x16(const float *qp, int rows, const float *kp, int64_t head_dim,
                          float scale, float *s, int64_t ld_s);
void lp_attn_pv_avx2_6x16(const float *p, int64_t ld_p, int rows, int64_t n_keys, const float *v,
                          int64_t v_stride, const float *alpha, float *out, int64_t out_stride,
                          int64_t v_dim);
unsigned lp_attn_softmax_avx2(float *s, int64_t ld_s, int rows, int64_t n, float *m, float *l,
                              float *alpha);
float lp_attn_exp_sum_avx2(float *x, int64_t n, float max);
float lp_attn_block_max_avx2(const float *x, int64_t n, bool *all_finite);
void lp_attn_stream_fill_avx2(float *dst, const float *src, int64_t n);
void lp_attn_f32_to_f16_avx2(const float *src, uint16_t *dst, int64_t n);
void lp_attn_sparsity_range_avx2(const float *p, int64_t n, uint32_t *lo, uint32_t *hi);
uint64_t lp_attn_sparsity_histogram_avx2(const float *p, int64_t n, uint32_t base, int shift,
                                         uint32_t low_key, uint32_t low_bits, uint64_t *buckets);
int64_t lp_attn_sparsity_gather_avx2(float *p, int64_t n, uint32_t base, int shift,
                                     const uint32_t keys[3]);
/* attention.c: query rows (of any head) whose probabilities and statistics lp_attention has
 * computed since the process started: pass 2 ran for them. The bare path (no probs, no
 * row_stats) leaves it alone; for tests. */
uint64_t lp_attn_rows_probed(void);
/* ref.c: lp_attn_row_sparsity with the sweeps of table kt (the same counts on every ISA). */
/* lp_attn_row_sparsity_with for a row whose float bits' range is known: hi the largest, lo the
 * smallest nonzero (UINT32_MAX when none), -0 read as 0; what attn_row_probs' sums give. */
void lp_attn_row_sparsity_in(const lp_kernel_table *kt, float *p, int64_t n, uint32_t lo,
                             uint32_t hi, lp_attn_row_stats *st);
void lp_attn_row_sparsity_with(const lp_kernel_table *kt, float *p, int64_t n,
                               lp_attn_row_stats *st);
void lp_attn_row_probs_avx2(float *s, int64_t n, float m, float inv_l, int64_t j0, int64_t pos,
                            int64_t window, lp_attn_row_sums *sums);
/* x[i] = exp(x[i]) for x[i] <= 0, flushed below LP_ATTN_EXP_MIN (the softmax's weights). */
void lp_attn_exp_avx2(float *x, int64_t n);

/* pool.c: true inside a task of lp_pool_run (a nested run would execute serially). */
bool lp_pool_in_worker(void);
/* 64-byte aligned scratch owned by the pool for task index `task` (< thread count) of the
 * current run, kept and grown across runs; NULL on failure or without a pool. Valid until the
 * next call for the same task or lp_pool_destroy. Only for runs dispatched on the pool. */
void *lp_pool_scratch(lp_pool *pool, int64_t task, size_t bytes);

#endif
