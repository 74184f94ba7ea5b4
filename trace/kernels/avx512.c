/* AVX-512F kernels: the GEMM's micro-kernel in zmm registers. This file alone is compiled with
 * -mavx512f (plus AVX2/FMA/F16C); dispatch.c selects its table only after checking that the CPU
 * has AVX-512F and that the OS saves the zmm state. Every slot it does not override is AVX2's
 * (dispatch.c builds the table from AVX2's), so only what pays for the wider registers is here.
 *
 * Why a 16x16 tile: with 32 zmm registers the tile can hold 16 rows of one 16-float B vector in
 * 16 accumulators, so each B load feeds 16 FMAs and each A value is one embedded broadcast
 * (vfmadd231ps zmm, zmm, m32{1to16}): half the loads per FMA of AVX2's 6x16 tile. On cores that
 * split 512-bit operations in two (Zen 4) the peak is the same as AVX2's; the gain is fewer
 * instructions and loads per FLOP, which is what the 6x16 kernel's front end runs short of. */
#include "trace/kernels/kernels.h"

#include <immintrin.h>
#include <stdint.h>

#include "trace/kernels/kernels_internal.h"

enum { MR = 16, NR = 16 };

#define LP_ROWS(X)                                                                                 \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

/* c[0..m_edge)[0..n_edge) (+)= a_panel . b_panel: one B vector and sixteen broadcast A values a
 * k step. Edge tiles are computed in full (the panels are zero-padded) and stored under masks. */
static void gemm_f32_avx512_16x16(int64_t kc, const float *a, const float *b, float *c,
                                  int64_t ldc, int m_edge, int n_edge, bool accumulate)
{
#define LP_DECLARE(i) __m512 c##i = _mm512_setzero_ps();
    LP_ROWS(LP_DECLARE)
#undef LP_DECLARE
    /* the tile's C rows are read after kc steps: fetch both lines a row may straddle */
    for (int i = 0; i < m_edge; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + NR - 1), _MM_HINT_T0);
    }
#define LP_FMA(i) c##i = _mm512_fmadd_ps(_mm512_set1_ps(a[i]), bv, c##i);
    for (int64_t p = 0; p < kc; p++) {
        __m512 bv = _mm512_load_ps(b);
        LP_ROWS(LP_FMA)
        a += MR;
        b += NR;
    }
#undef LP_FMA
    __mmask16 cols = (__mmask16)(n_edge >= NR ? 0xffffu : (1u << n_edge) - 1u);
#define LP_STORE(i)                                                                                \
    if ((i) < m_edge) {                                                                            \
        float *row = c + (i) * ldc;                                                                \
        if (accumulate)                                                                            \
            c##i = _mm512_add_ps(_mm512_maskz_loadu_ps(cols, row), c##i);                          \
        _mm512_mask_storeu_ps(row, cols, c##i);                                                    \
    }
    LP_ROWS(LP_STORE)
#undef LP_STORE
}

/* A 16-row A panel has the layout of a 16-column B panel (16 floats a k step), so AVX2's packer
 * serves both. Blocks for Zen 4-class cores (32 KiB L1d, 1 MiB L2): kc = 512 makes the B
 * micro-panel 32 KiB, so it and the A micro-panels stream from L2 rather than sit in L1; a k step
 * then reads 128 bytes per 16 FMA cycles, a quarter of L2's bandwidth, and each C tile is read and
 * written half as often as at kc = 256 (which measured 3-6% slower on the prefill shapes). The
 * mc x kc A block (512 KiB) stays in L2, nc bounds the packed B block (8 MiB) in L3. */
const lp_kernel_table lp_kernels_avx512_overrides = {
    .isa = LP_ISA_AVX512,
    .gemm = {.mr = MR, .nr = NR, .kc = 512, .mc = 256, .nc = 4096,
             .ukernel = gemm_f32_avx512_16x16, .pack_a = lp_gemm_pack_16_avx2,
             .pack_b = lp_gemm_pack_16_avx2},
};
