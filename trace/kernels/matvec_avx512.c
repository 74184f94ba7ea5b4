/* AVX-512 VNNI matrix-vector rows: the avx512vnni table (the avx512 table plus these slots). This
 * file alone is compiled with -mavx512bw -mavx512vl -mavx512vnni; dispatch.c selects its table
 * only after checking those CPUID bits and the OS's zmm state.
 *
 * Why: decode's int8 rows are compute-bound next to the memory stream, and vpdpbusd (unsigned x
 * signed bytes, four products summed into each 32-bit lane, added to the destination) does in one
 * instruction what AVX2 needs sign + sign + maddubs + madd for. The int8 rows' registers are ymm
 * with EVEX encoding: on Zen 4, whose 512-bit operations are double-pumped, a zmm vpdpbusd costs
 * two ymm ones (measured 1.56 against 0.80 cycles in a loop of 16 independent accumulators), so
 * zmm buys no throughput, blocks of 34 or 17 bytes would need extra inserts to fill one, and a
 * zmm Q4_K row measured slower (22.0 against 25.8 GB/s). The F16 row, which needs only AVX-512F,
 * is zmm: there the halved instruction count shows. It sits in this table rather than avx512's
 * because it was measured on this core only.
 *
 * Every integer sum is the exact one ref.c computes (the AVX2 kernels' too); only the float order
 * of the block sums differs (lp_row_dot_i8_fn). */
#include "trace/kernels/kernels.h"

#include <immintrin.h>
#include <stdint.h>

#include "inspect/formats/quant.h"
#include "trace/kernels/kernels_internal.h"
#include "trace/kernels/simd_avx2.h"

static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

static inline __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* ---- rows of 32-value blocks (Q8_0, MXFP4) ------------------------------------------------------
 * The weights go to vpdpbusd as unsigned bytes w + 128 against the signed x (Q8_0 by one xor;
 * MXFP4 looks its codes up in levels already offset by 128, for free), so a block's lanes add
 * up to w . x + 128 * sum(x). The lanes of 8 blocks are reduced to their 8 exact block totals
 * in integers (block_totals8), x_off = -128 * sum(x) of each block is added, and the 8 totals
 * are scaled by their d_w * d_x in one FMA: one FMA and one conversion per 8 blocks instead of
 * one each per block, and no per-lane correction to load. The scales of 8 blocks are gathered,
 * widened to f32 and multiplied by x's in one step (each d_w * d_x rounds once, as one scalar
 * product would). Each block's sum is then ref's, scale * (float)isum; only the order in which
 * the blocks' sums are added differs. */

/* The exact totals of 8 blocks' lane sums p[0..8), in block order: adjacent blocks' lanes
 * interleaved and added, then pairs of pairs, then the two 128-bit halves. */
static inline __m256i block_totals8(const __m256i p[8])
{
    __m256i q[4], r[2];
    for (int j = 0; j < 4; j++) /* blocks 2j, 2j + 1: [a b a b] per half */
        q[j] = _mm256_add_epi32(_mm256_unpacklo_epi32(p[2 * j], p[2 * j + 1]),
                                _mm256_unpackhi_epi32(p[2 * j], p[2 * j + 1]));
    for (int j = 0; j < 2; j++) /* blocks 4j .. 4j + 3: [a b c d] per half */
        r[j] = _mm256_add_epi32(_mm256_unpacklo_epi64(q[2 * j], q[2 * j + 1]),
                                _mm256_unpackhi_epi64(q[2 * j], q[2 * j + 1]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(r[0], r[1], 0x20),
                            _mm256_permute2x128_si256(r[0], r[1], 0x31));
}

static inline int32_t hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 1)));
}

static inline __attribute__((always_inline)) float
blocks32_i8_vnni(const uint8_t *b, const int8_t *xq, const float *xd, const int32_t *x_off,
                 int64_t k, int64_t block_bytes, __m256 (*scales8)(const uint8_t *b),
                 float (*scale1)(const uint8_t *b), __m256i (*block)(const uint8_t *b))
{
    int64_t n = k / 32, i = 0;
    __m256 acc = _mm256_setzero_ps();
    const __m256i zero = _mm256_setzero_si256();
    for (; i + 8 <= n; i += 8) {
        __m256 d8 = _mm256_mul_ps(scales8(b), _mm256_loadu_ps(xd + i));
        __m256i p[8];
        for (int j = 0; j < 8; j++, b += block_bytes)
            p[j] = _mm256_dpbusd_epi32(zero, block(b), loadu256(xq + 32 * (i + j)));
        __m256i totals = _mm256_add_epi32(block_totals8(p), loadu256(x_off + i));
        acc = _mm256_fmadd_ps(d8, _mm256_cvtepi32_ps(totals), acc);
    }
    float sum = hsum8(acc);
    for (; i < n; i++, b += block_bytes) {
        int32_t isum = hsum_epi32(_mm256_dpbusd_epi32(zero, block(b), loadu256(xq + 32 * i)));
        sum += scale1(b) * xd[i] * (float)(isum + x_off[i]);
    }
    return sum;
}

static inline float f16_scalar(const uint8_t *p)
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(lp_load_u16(p))));
}

/* Q8_0 {f16 d; i8 q[32]}: the 8 f16 scales in one conversion, gathered in general registers
 * (the integer ports are idle in this loop; eight vector inserts would take the shuffle ports). */
static inline __m256 q8_0_scales8(const uint8_t *b)
{
    uint64_t lo = 0, hi = 0;
    for (int j = 0; j < 4; j++) {
        lo |= (uint64_t)lp_load_u16(b + 34 * j) << (16 * j);
        hi |= (uint64_t)lp_load_u16(b + 34 * (j + 4)) << (16 * j);
    }
    return _mm256_cvtph_ps(_mm_insert_epi64(_mm_cvtsi64_si128((long long)lo), (long long)hi, 1));
}

static inline __m256i q8_0_block_u8(const uint8_t *b)
{
    return _mm256_xor_si256(loadu256(b + 2), _mm256_set1_epi8((char)0x80));
}

static float row_dot_q8_0_i8_vnni(const void *row, const int8_t *xq, const float *xd,
                                  const int16_t *xs16, const int32_t *x_off, int64_t k)
{
    (void)xs16;
    return blocks32_i8_vnni(row, xq, xd, x_off, k, 34, q8_0_scales8, f16_scalar, q8_0_block_u8);
}

static inline float mxfp4_scale1(const uint8_t *b) { return lp_mxfp4_half_scale(b[0]); }

/* The 32 nibble codes as unsigned bytes level + 128: the 16 code bytes in both 128-bit halves,
 * the upper half shifted down a nibble, then one byte shuffle of the offset levels (low nibbles:
 * values 0..15, high: 16..31). */
static inline __m256i mxfp4_block_u8(const uint8_t *b)
{
    const __m256i levels = _mm256_broadcastsi128_si256(_mm_xor_si128(
        _mm_loadu_si128((const __m128i *)(const void *)lp_mxfp4_levels_x2),
        _mm_set1_epi8((char)0x80)));
    __m256i q =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(b + 1)));
    q = _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_setr_epi64x(0, 0, 4, 4)),
                         _mm256_set1_epi8(0x0f));
    return _mm256_shuffle_epi8(levels, q);
}

static float row_dot_mxfp4_i8_vnni(const void *row, const int8_t *xq, const float *xd,
                                   const int16_t *xs16, const int32_t *x_off, int64_t k)
{
    (void)xs16;
    return blocks32_i8_vnni(row, xq, xd, x_off, k, 17, lp_mxfp4_scales8_avx2, mxfp4_scale1,
                            mxfp4_block_u8);
}

/* ---- Q4_K (scales and mins unpacked by lp_q4_k_scales_mins_avx2, simd_avx2.h) ----------- */

/* Q4_K: the unsigned nibbles go to vpdpbusd against the int8 x directly, a group's 32 products
 * into 8 lanes of at most 4 * 15 * 127 = 7620 in magnitude, so the two groups of a 32-byte slice
 * pack into one vector of int16 (vpackssdw, exact) and one vpdpwssd against their scales
 * multiplies and adds both: per block 8 vpdpbusd and 4 vpdpwssd where AVX2 has 8 maddubs and 8
 * madd, the multiplier ports being what limits this row. The min term is one madd of the mins
 * against the 16-value activation sums. */
static float row_dot_q4_k_i8_vnni(const void *row, const int8_t *xq, const float *xd,
                                  const int16_t *xs16, const int32_t *x_off, int64_t k)
{
    (void)x_off;
    const uint8_t *b = row;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    /* each min byte twice: the mins of groups 0..7 against the 16 sums of 16 activations */
    const __m128i twice = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    /* vpackssdw's order in each 128-bit half: four lanes of group 2p, then four of 2p + 1 */
    const __m128i pick01 = _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m128i pick23 = _mm_setr_epi8(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
    __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
    for (int64_t i = 0; i < k / 256; i++, b += 144) {
        __m128i sm = lp_q4_k_scales_mins_avx2(b + 4);
        __m256i s01 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, pick01));
        __m256i s23 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, pick23));
        __m256i scs[4] = {_mm256_permute4x64_epi64(s01, 0x44), _mm256_permute4x64_epi64(s01, 0xee),
                          _mm256_permute4x64_epi64(s23, 0x44), _mm256_permute4x64_epi64(s23, 0xee)};
        __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, twice));
        __m256i min_sums = _mm256_madd_epi16(mins, loadu256(xs16 + 16 * i));
        const int8_t *x8 = xq + 256 * i;
        __m256i sumi = _mm256_setzero_si256(), sumi1 = _mm256_setzero_si256();
        for (int p = 0; p < 4; p++) {
            __m256i q4 = loadu256(b + 16 + 32 * p);
            /* one load for both nibbles: the compiler would fold it into each use */
            __asm__("" : "+v"(q4));
            __m256i lo = _mm256_and_si256(q4, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), low4);
            __m256i plo = _mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, loadu256(x8 + 64 * p));
            __m256i phi =
                _mm256_dpbusd_epi32(_mm256_setzero_si256(), hi, loadu256(x8 + 64 * p + 32));
            __m256i scales = scs[p];
            if (p % 2)
                sumi1 = _mm256_dpwssd_epi32(sumi1, _mm256_packs_epi32(plo, phi), scales);
            else
                sumi = _mm256_dpwssd_epi32(sumi, _mm256_packs_epi32(plo, phi), scales);
        }
        /* d and dmin of the block at once, times the activations' scale */
        uint32_t dd;
        memcpy(&dd, b, sizeof dd);
        __m128 dv = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dd)), _mm_set1_ps(xd[i]));
        sumi = _mm256_add_epi32(sumi, sumi1);
        acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dv), _mm256_cvtepi32_ps(sumi), acc);
        acc_min = _mm256_fmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dv)),
                                  _mm256_cvtepi32_ps(min_sums), acc_min);
    }
    return hsum8(acc) - hsum8(acc_min);
}

/* ---- F16 rows -------------------------------------------------------------------------------
 * 16 values a zmm conversion and FMA, four accumulators: half the instructions of AVX2's row for
 * the same work. One thread: 59.4 against 53.9 GB/s with the rows in L2, 53.1-54.4 against
 * 51.1-51.2 in L3 (16 MB); decode's rows from DRAM are bandwidth-bound and measured the same
 * (61.1-61.7 against 61.8-62.6 ms a step's matrices). BF16 (a widening shift, as AVX2's) and
 * F32 rows measured the same in zmm and keep AVX2's. */
static float row_dot_f16_avx512(const void *row, const float *x, const float *x_sums, int64_t k)
{
    (void)x_sums;
    const uint8_t *w = row;
#define LP_F16X16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= k; i += 64) {
        a0 = _mm512_fmadd_ps(LP_F16X16(w + 2 * i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(LP_F16X16(w + 2 * i + 32), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(LP_F16X16(w + 2 * i + 64), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(LP_F16X16(w + 2 * i + 96), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= k; i += 16)
        a0 = _mm512_fmadd_ps(LP_F16X16(w + 2 * i), _mm512_loadu_ps(x + i), a0);
#undef LP_F16X16
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < k; i++)
        sum += lp_f16_to_f32(lp_load_u16(w + 2 * i)) * x[i];
    return sum;
}

/* What the avx512vnni table changes in avx512's (dispatch.c starts from a copy of it). */
const lp_kernel_table lp_kernels_avx512_vnni_overrides = {
    .isa = LP_ISA_AVX512_VNNI,
    .row_dot_q8_0_i8 = row_dot_q8_0_i8_vnni,
    .row_dot_q4_k_i8 = row_dot_q4_k_i8_vnni,
    .row_dot_mxfp4_i8 = row_dot_mxfp4_i8_vnni,
    .row_dot_f16 = row_dot_f16_avx512,
};
