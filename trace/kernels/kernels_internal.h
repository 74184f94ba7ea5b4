/* The dispatch table shared by ref.c, avx2.c, dispatch.c, gemm.c and attention.c.
 *
 *   const lp_kernel_table *kt = lp_kernels_table();   // chosen once; LP_ISA=ref|avx2 forces one
 *   kt->gemm_ukernel(kc, a_panel, b_panel, c, ldc, m_edge, n_edge, accumulate);
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

#include <stdbool.h>
#include <stdint.h>

#include "trace/kernels/kernels.h"

/* c[0..m_edge)[0..n_edge) (+)= a_panel . b_panel over kc steps; ldc in elements. */
typedef void (*lp_gemm_ukernel_fn)(int64_t kc, const float *a, const float *b, float *c,
                                   int64_t ldc, int m_edge, int n_edge, bool accumulate);

typedef struct lp_kernel_table {
    lp_isa isa;
    /* GEMM: tile and cache block sizes are data, per ISA. kc must be a multiple of 256. */
    int mr, nr;
    int64_t kc, mc, nc;
    lp_gemm_ukernel_fn gemm_ukernel;
    /* Packing (layouts above): rows [0, rows) of src (row stride ld floats), kc values from each,
     * into one MR-row A panel / NR-column B panel; rows past `rows` are zero. */
    void (*pack_a)(const float *src, int64_t ld, int64_t rows, int64_t kc, float *dst);
    void (*pack_b)(const float *src, int64_t ld, int64_t rows, int64_t kc, float *dst);
    /* Row conversions used while packing. */
    void (*f16_to_f32)(const void *src, float *dst, int64_t n); /* unaligned ok */
    void (*bf16_to_f32)(const void *src, float *dst, int64_t n);
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
} lp_kernel_table;

/* The table in use (never NULL). */
const lp_kernel_table *lp_kernels_table(void);

/* ref.c: the plain C spec of every kernel. */
extern const lp_kernel_table lp_kernels_ref_table;
void lp_gemm_f32_ref_4x8(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                         int m_edge, int n_edge, bool accumulate);
void lp_pack_panel_ref(const float *src, int64_t ld, int64_t rows, int64_t kc, int width,
                       float *dst);
void lp_f16_to_f32_ref(const void *src, float *dst, int64_t n);
void lp_bf16_to_f32_ref(const void *src, float *dst, int64_t n);
float lp_dot_ref(const float *x, const float *y, int64_t n);
void lp_axpy_ref(float *y, float a, const float *x, int64_t n);
void lp_scale_ref(float *y, float a, int64_t n);
float lp_exp_sum_ref(float *x, int64_t n, float max);
void lp_scores_ref(const float *q, const float *k, int64_t k_stride, int64_t n_keys,
                   int64_t head_dim, float scale, float *s);
void lp_weighted_sum_ref(float *out, const float *w, const float *v, int64_t v_stride,
                         int64_t n_keys, int64_t v_dim);
void lp_rmsnorm_ref(float *y, const float *x, const float *weight, int64_t n, float eps,
                    bool weight_plus_one);
void lp_layernorm_ref(float *y, const float *x, const float *weight, const float *bias, int64_t n,
                      float eps);
void lp_softmax_ref(float *x, int64_t n);
void lp_silu_mul_ref(float *gate, const float *up, int64_t n);
void lp_gelu_mul_ref(float *gate, const float *up, int64_t n, bool tanh_approx);
void lp_gelu_ref(float *x, int64_t n, bool tanh_approx);
void lp_silu_ref(float *x, int64_t n);
void lp_add_ref(float *y, const float *x, int64_t n);
void lp_rope_rotate_ref(float *x, int64_t n_heads, int64_t head_dim, int64_t rot_dim,
                        const float *c, const float *s, bool adjacent_pairs);

/* avx2.c: AVX2 + FMA + F16C; only called after dispatch checked the CPU. */
extern const lp_kernel_table lp_kernels_avx2_table;

/* True for ISAs this CPU can run. */
bool lp_kernels_cpu_has(lp_isa isa);

/* pool.c: true inside a task of lp_pool_run (a nested run would execute serially). */
bool lp_pool_in_worker(void);
/* 64-byte aligned scratch owned by the pool for task index `task` (< thread count) of the
 * current run, kept and grown across runs; NULL on failure or without a pool. Valid until the
 * next call for the same task or lp_pool_destroy. Only for runs dispatched on the pool. */
void *lp_pool_scratch(lp_pool *pool, int64_t task, size_t bytes);

#endif
