/* Compute kernels of the forward pass: each has a plain-C reference (ref.c, the spec the tests
 * compare against) and SIMD versions (avx2.c, ...) chosen once at run time (dispatch.c).
 * LP_ISA=ref|avx2|avx512|avx512vnni in the environment forces one.
 *
 *   // y[m, n] = x[m, k] . W[n, k]^T + bias[n]; W may be f32/f16/bf16 or a GGUF quant type and
 *   // is dequantized panel by panel while packing, never as a whole.
 *   lp_matrix w = {LP_DTYPE_Q8_0, data, n, k, row_bytes, false};   // [out n, in k], borrowed
 *   if (lp_linear(x, m, &w, bias, y, pool, &err) != LP_OK) ...
 *
 * (The packed layouts of the GEMM are drawn in kernels_internal.h.)
 */
#ifndef LP_TRACE_KERNELS_H
#define LP_TRACE_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "trace/kernels/mask.h"

/* Each ISA's table is its parent's plus its overrides: ref <- avx2 <- avx512 <- avx512vnni
 * (AVX-512 BW/VL/VNNI: the matrix-vector rows). */
typedef enum lp_isa {
    LP_ISA_REF,
    LP_ISA_AVX2,
    LP_ISA_AVX512,
    LP_ISA_AVX512_VNNI,
    LP_ISA_COUNT
} lp_isa;

/* The ISA in use (detected once; LP_ISA overrides). */
lp_isa lp_kernels_isa(void);
const char *lp_isa_name(lp_isa isa);
/* Force an ISA (tests); returns false if the CPU lacks it. */
bool lp_kernels_set_isa(lp_isa isa);

/* A weight matrix [rows = out features, cols = in features] in any supported dtype. */
typedef struct lp_matrix {
    lp_dtype dtype;
    const void *data;   /* borrowed */
    int64_t rows;
    int64_t cols;
    uint64_t row_bytes; /* stride between rows */
    bool transposed;    /* stored [cols, rows] (GPT-2 Conv1D); f32/f16/bf16 only */
} lp_matrix;

/* A fixed set of worker threads reused by every kernel call (deterministic static partition). */
typedef struct lp_pool lp_pool;
lp_status lp_pool_create(int n_threads, lp_pool **out, lp_error *err);
void lp_pool_destroy(lp_pool *pool);
int lp_pool_threads(const lp_pool *pool);
/* Run fn(ctx, task) for task in [0, n_tasks) on the pool; returns when all are done. */
void lp_pool_run(lp_pool *pool, int64_t n_tasks, void (*fn)(void *ctx, int64_t task), void *ctx);
/* Since the pool was created: runs handed to its workers (each wakes them, from their spin or
 * from sleep; serial runs of a 1-thread pool and nested runs are not counted) and the worker
 * wake-ups that found a worker asleep (a futex wake each). For tests and the bench; NULL = 0. */
typedef struct lp_pool_counts {
    uint64_t runs, sleeps;
} lp_pool_counts;
void lp_pool_get_counts(const lp_pool *pool, lp_pool_counts *out);

/* y[m, n] = x[m, k] . W^T (+ bias). x is row-major with row stride k. pool may be NULL.
 * y must not overlap x (asserted). */
lp_status lp_linear(const float *x, int64_t m, const lp_matrix *w, const float *bias, float *y,
                    lp_pool *pool, lp_error *err);

/* Decode: y[n] = W[n, k] . x[k] (+ bias) for one vector, reading W's stored rows directly, block
 * by block, with no dequantized copy: the step of generation that streams every weight once.
 * F32, F16, BF16, Q8_0, Q4_K and MXFP4 rows (row-major, not transposed); other dtypes and transposed
 * weights return LP_ERR_UNSUPPORTED (lp_linear with m = 1 takes them). The pool's threads take
 * the rows in chunks of about 64 KB of weights from one counter; each row's sum is computed the
 * same way whatever the thread count or the thread that takes it.
 *   lp_matrix w = {LP_DTYPE_Q4_K, data, 5632, 2048, row_bytes, false};
 *   if (lp_matvec(x, &w, NULL, y, pool, &err) != LP_OK) ...
 * lp_matvec_ref is the plain C spec (same checks, one thread). */
bool lp_matvec_supported(lp_dtype dtype);
lp_status lp_matvec(const float *x, const lp_matrix *w, const float *bias, float *y, lp_pool *pool,
                    lp_error *err);
lp_status lp_matvec_ref(const float *x, const lp_matrix *w, const float *bias, float *y,
                        lp_error *err);
/* lp_matvec with Q8_0, Q4_K and MXFP4 rows dotted against x quantized to int8 once per call
 * (blocks of 32 / 256 / 32 values scaled by max|x| / 127, llama.cpp's Q8_0 / Q8_K) in integer
 * arithmetic; other dtypes, and an x holding NaN or infinity, as lp_matvec. Each result carries
 * x's rounding, at most sum_j |w_j| * d_x(j) / 2 (a few 1e-4 of sum |w_j x_j|): generation
 * takes it for quantized weights, prefill and the decode=prefill check keep lp_matvec unless
 * told (trace/README.md, "int8 activations"). With LP_ISA=ref it is the plain C twin. */
lp_status lp_matvec_int8(const float *x, const lp_matrix *w, const float *bias, float *y,
                         lp_pool *pool, lp_error *err);
/* Matrices that read the same x (a decode step's q, k, v; gate, up) in one pool run: the threads
 * take rows chunk by chunk from all of them, so the workers are woken once per group, and x is
 * prepared (int8_x: quantized, as lp_matvec_int8) once. Each y equals what lp_matvec
 * (lp_matvec_int8 when int8_x) computes for that matrix alone, bit for bit. The matrices must
 * have the same cols; up to LP_MATVEC_MAX_PARTS of them. */
enum { LP_MATVEC_MAX_PARTS = 8 };
typedef struct lp_matvec_part {
    const lp_matrix *w;
    const float *bias; /* [w->rows] or NULL */
    float *y;          /* [w->rows] */
} lp_matvec_part;
lp_status lp_matvec_group(const float *x, const lp_matvec_part *parts, int n_parts, bool int8_x,
                          lp_pool *pool, lp_error *err);

/* Plain f32 GEMM: C[m, n] = A[m, k] . B[n, k]^T (+ C if accumulate). Leading dims in elements. */
void lp_gemm_f32(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float *c, int64_t ldc, bool accumulate, lp_pool *pool);
/* The reference the tests compare against. */
void lp_gemm_f32_ref(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float *c, int64_t ldc, bool accumulate);

/* Per query row summaries of an attention head, computed from the exact probabilities without
 * keeping a T x T buffer. */
typedef struct lp_attn_row_stats {
    float entropy;  /* nats */
    float max_prob;
    float sink;     /* probability on key position 0 */
    float prev;     /* on the key one position before the query */
    float self;     /* on the query's own position */
    float distance; /* expected query - key distance */
    float local;    /* mass on keys with query - key < local_window */
    float row_sum;  /* sum of probabilities over the keys (1, less with a learned sink, 0 for a
                       row that sees no key) */
    float learned_sink; /* probability on the learned sink logit (gpt-oss), 0 without one */
    /* Sparsity: the smallest k whose k largest key probabilities sum to at least 50%, 90%, 99%
     * of the keys' mass (row_sum), and the mass of the keys with probability below 1e-3. */
    float keys50, keys90, keys99;
    float low_mass;
} lp_attn_row_stats;

/* The sparsity fields of st from the n visible probabilities p (each in [0, 2)) of one row; p is
 * permuted. Every sum is exact (fixed point in units of 2^-149) and the thresholds are the
 * fractions 1/2, 9/10, 99/100, so no order or tie can change a count: radix selection over the
 * float bits, O(n). A value outside [0, 2) (NaN, negative) makes the four fields NaN. The
 * spec both attention kernels use. */
void lp_attn_row_sparsity(float *p, int64_t n, lp_attn_row_stats *st);
/* The same by the definition: p sorted in place, largest first, taken one by one (tests). */
void lp_attn_row_sparsity_sorted(float *p, int64_t n, lp_attn_row_stats *st);

/* dst[i] = lp_f32_to_f16(src[i]) for i < n, vectorised where the ISA converts (the f16 maps). */
void lp_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n);
/* rows x cols of src (row stride src_stride) into dst [rows, cols] the same way, the rows split
 * over the pool's threads: a T x T map is read once at memory speed instead of by one core while
 * the others wait (serial when pool is NULL or the caller is one of its workers). */
void lp_f32_to_f16_rows(const float *src, int64_t src_stride, int64_t rows, int64_t cols,
                        uint16_t *dst, lp_pool *pool);

/* One attention head. q: [n_q, head_dim] f32 with row stride q_stride; k: [n_k, head_dim] and
 * v: [n_k, v_dim] in kv_dtype (f32, f16 or bf16; converted to f32 as blocks are loaded) with row
 * strides k_stride, v_stride in elements; out: [n_q, v_dim] f32 stride out_stride. Tiled with an
 * online softmax; probs (optional, [n_q, n_k] row-major) receives the exact probabilities, 0 on
 * masked cells; row_stats (optional, [n_q]).
 *
 * The score of query row i (position pos = mask->q_pos0 + i) and key j (position j) is
 *     s = softcap(scale * q_i . k_j) + alibi_slope * (j - pos)
 * softcap(x) = softcap * tanh(x / softcap) when softcap > 0. The ALiBi bias (BLOOM, MPT,
 * Falcon-RW; the caller computes each head's slope) is 0 on the diagonal and negative to the
 * left. A learned sink (gpt-oss: has_sink, sink_logit) joins the softmax denominator as one more
 * logit without a value row, so the probabilities over the keys sum to 1 - learned_sink; a row
 * that sees no key then puts all its mass on the sink and its output is 0. Decode and chunked
 * prefill pass n_q < n_k with the mask's q_pos0 = n_k - n_q (bottom-right alignment). v_dim may
 * differ from head_dim (MLA). A non-finite score or sink logit poisons its row: output, visible
 * probabilities and statistics become NaN. */
typedef struct lp_attn_args {
    const float *q;
    const void *k;      /* kv_dtype elements */
    const void *v;      /* kv_dtype elements */
    float *out;
    int64_t n_q, n_k, head_dim, v_dim;
    int64_t q_stride, k_stride, v_stride, out_stride; /* in elements */
    float scale;        /* usually 1/sqrt(head_dim) */
    float softcap;      /* 0 = off; else scores = softcap * tanh(scores / softcap) */
    const lp_mask_spec *mask;
    int64_t batch;      /* batch item, for the mask's padding */
    float *probs;
    lp_attn_row_stats *row_stats;
    int64_t local_window; /* for row_stats.local */
    float alibi_slope;  /* 0 = no ALiBi bias */
    bool has_sink;      /* a learned sink logit joins the softmax */
    float sink_logit;
    lp_dtype kv_dtype;  /* LP_DTYPE_F32 (also when left 0), LP_DTYPE_F16 or LP_DTYPE_BF16 */
    /* Only query rows [row_begin, row_end) are computed (out, probs and row_stats rows of the
     * others untouched): how callers split one head across threads. Both 0 = every row. */
    int64_t row_begin, row_end;
    /* GQA: n_group query heads (0 or 1 = just this one) share this K and V. Head g of the group
     * reads q + g * q_head_stride and writes out + g * out_head_stride, probs + g *
     * probs_head_stride and row_stats + g * stats_head_stride; its ALiBi slope is
     * alibi_slopes[g] when alibi_slopes is given, else alibi_slope, and with has_sink its sink
     * logit sink_logits[g] when sink_logits is given (gpt-oss: one per query head), else
     * sink_logit. Each K/V block is packed
     * once and multiplied by every head of the group while it is in L1. */
    int64_t n_group;
    int64_t q_head_stride, out_head_stride, probs_head_stride, stats_head_stride;
    const float *alibi_slopes; /* [n_group] or NULL */
    const float *sink_logits;  /* [n_group] or NULL */
    /* row_stats without the sparsity fields (keys50 .. low_mass left 0): how `loupe bench`
     * times what they cost, A/B in one process. */
    bool skip_sparsity;
} lp_attn_args;

void lp_attention(const lp_attn_args *args);
void lp_attention_ref(const lp_attn_args *args); /* materializes each row; the spec */

/* Vector kernels, in place or out of place as named. n is the row length. */
void lp_rmsnorm(float *y, const float *x, const float *weight, int64_t n, float eps,
                bool weight_plus_one);
void lp_layernorm(float *y, const float *x, const float *weight, const float *bias, int64_t n,
                  float eps);
void lp_softmax(float *x, int64_t n);
void lp_silu_mul(float *gate, const float *up, int64_t n);     /* gate = silu(gate) * up */
void lp_gelu_mul(float *gate, const float *up, int64_t n, bool tanh_approx);
void lp_gelu(float *x, int64_t n, bool tanh_approx);
void lp_silu(float *x, int64_t n);
void lp_add(float *y, const float *x, int64_t n);             /* y += x */
/* Rotate rot_dim dims of each of n_heads heads of one position (head stride head_dim), with
 * per-pair inverse frequencies inv_freq[rot_dim/2], in the given pair layout. */
void lp_rope(float *x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t pos,
             const float *inv_freq, float attn_scale, bool adjacent_pairs);

#endif
