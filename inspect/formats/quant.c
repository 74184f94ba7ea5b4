/* Dequantization of ggml block types and plain dtypes to float32, one block at a time.
 *
 * Block layouts (ggml-common.h; all little-endian, f16 scales; QK_K = 256):
 *   q4_0  {f16 d; u8 qs[16]}                   x = d * (nibble - 8)
 *   q4_1  {f16 d, m; u8 qs[16]}                x = d * nibble + m
 *   q5_0  {f16 d; u8 qh[4]; u8 qs[16]}         x = d * ((nibble | fifth bit << 4) - 16)
 *   q5_1  {f16 d, m; u8 qh[4]; u8 qs[16]}      x = d * (nibble | fifth bit << 4) + m
 *   q8_0  {f16 d; i8 qs[32]}                   x = d * q
 *   q8_1  {f16 d, s; i8 qs[32]}                x = d * q (s = d * sum q, for dot products)
 *   In the 32-value types byte j holds value j in its low nibble and value j + 16 in its high
 *   nibble; bit j of qh is value j's fifth bit.
 *   q2_K  {u8 scales[16]; u8 qs[64]; f16 d, dmin}           16 groups of 16, 4-bit scale/min
 *   q3_K  {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}   16 groups, 6-bit signed scales
 *   q4_K  {f16 d, dmin; u8 scales[12]; u8 qs[128]}          8 groups of 32, 6-bit scale/min
 *   q5_K  {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
 *   q6_K  {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}
 *   q8_K  {f32 d; i8 qs[256]; i16 bsums[16]}
 *   iq4_nl {f16 d; u8 qs[16]}                  x = d * kvalues[nibble]
 *   iq4_xs {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}
 *   tq1_0 {u8 qs[48]; u8 qh[4]; f16 d}         ternary, 5 (qs) or 4 (qh) trits per byte
 *   tq2_0 {u8 qs[64]; f16 d}                   ternary, 2 bits per value
 *   mxfp4 {u8 e (E8M0); u8 qs[16]}             x = 2^(e-128) * fp4 value (doubled table)
 *
 * Plain 4-bit floats (safetensors F4 = f4_e2m1): two values a byte, value 2i in the low nibble and
 * 2i + 1 in the high one. gpt-oss's split MXFP4 (lp_dequantize_mxfp4): 16 such bytes a block of
 * 32 values, and one E8M0 exponent a block in a second array.
 */
#include "inspect/formats/quant.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "core/checked.h"

#define QK_K 256

/* Half -> float without branches on the common path, bit-exact with lp_f16_to_f32 (checked for
 * all 65536 inputs in test_quant): shifting the half's exponent and mantissa into a float and
 * multiplying by 2^112 rebiases normals and renormalizes subnormals exactly; only inf/NaN need a
 * fix-up. About 1.8x the generic conversion's speed on f16 tensors. Relies on the default
 * floating-point environment (subnormal floats not flushed to zero, which only fast-math sets). */
static inline float half_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)(h & 0x7fff) << 13;
    float f;
    memcpy(&f, &bits, 4);
    f *= 0x1p112f;
    memcpy(&bits, &f, 4);
    if ((h & 0x7c00) == 0x7c00)
        bits = 0x7f800000u | ((uint32_t)(h & 0x3ff) << 13);
    bits |= (uint32_t)(h & 0x8000) << 16;
    memcpy(&f, &bits, 4);
    return f;
}

static float f16_at(const uint8_t *p) { return half_to_float(lp_load_u16(p)); }

/* The 16 non-uniform levels of iq4_nl and iq4_xs. */
static const int8_t iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

/* E2M1 values times two; mxfp4 halves them through its scale. */
const int8_t lp_mxfp4_levels_x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ---- 32-value blocks ------------------------------------------------------------------------ */

static void dq_q4_0(const uint8_t *b, float *y)
{
    float d = f16_at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((qs[j] & 0xf) - 8);
        y[j + 16] = d * (float)((qs[j] >> 4) - 8);
    }
}

static void dq_q4_1(const uint8_t *b, float *y)
{
    float d = f16_at(b), m = f16_at(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(qs[j] & 0xf) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

static void dq_q5_0(const uint8_t *b, float *y)
{
    float d = f16_at(b);
    uint32_t qh = lp_load_u32(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
        int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        y[j] = d * (float)(lo - 16);
        y[j + 16] = d * (float)(hi - 16);
    }
}

static void dq_q5_1(const uint8_t *b, float *y)
{
    float d = f16_at(b), m = f16_at(b + 2);
    uint32_t qh = lp_load_u32(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
        int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        y[j] = d * (float)lo + m;
        y[j + 16] = d * (float)hi + m;
    }
}

static void dq_q8_0(const uint8_t *b, float *y)
{
    float d = f16_at(b);
    for (int j = 0; j < 32; j++)
        y[j] = d * (float)(int8_t)b[2 + j];
}

static void dq_q8_1(const uint8_t *b, float *y)
{
    float d = f16_at(b);
    for (int j = 0; j < 32; j++)
        y[j] = d * (float)(int8_t)b[4 + j];
}

static void dq_iq4_nl(const uint8_t *b, float *y)
{
    float d = f16_at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)iq4_levels[qs[j] & 0xf];
        y[j + 16] = d * (float)iq4_levels[qs[j] >> 4];
    }
}

static void dq_mxfp4(const uint8_t *b, float *y)
{
    /* E8M0 scale 2^(e-127), halved because the level table is doubled. ldexpf handles the
     * subnormal results of e = 0 and 1 exactly. */
    float d = ldexpf(1.0f, (int)b[0] - 128);
    const uint8_t *qs = b + 1;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)lp_mxfp4_levels_x2[qs[j] & 0xf];
        y[j + 16] = d * (float)lp_mxfp4_levels_x2[qs[j] >> 4];
    }
}

/* ---- 256-value K blocks ----------------------------------------------------------------------- */

static void dq_q2_k(const uint8_t *b, float *y)
{
    const uint8_t *scales = b, *q = b + 16;
    float d = f16_at(b + 80), dmin = f16_at(b + 82);
    /* Two halves of 128 values; each byte of a 32-byte run holds one value of each of four
     * 32-value groups (2 bits each, lowest bits first); each group splits into two scale groups of
     * 16. */
    int is = 0;
    for (int half = 0; half < 2; half++, q += 32) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int part = 0; part < 2; part++) {
                uint8_t sc = scales[is++];
                float dl = d * (float)(sc & 0xf), ml = dmin * (float)(sc >> 4);
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (float)((q[part * 16 + l] >> shift) & 3) - ml;
            }
        }
    }
}

/* Unpack q3_K's twelve bytes into sixteen 6-bit scales (low 4 bits from bytes 0-7, high 2 bits
 * from bytes 8-11), minus 32. */
static void q3_k_scales(const uint8_t *packed, int scales[16])
{
    for (int i = 0; i < 16; i++) {
        int low = (i < 8) ? (packed[i] & 0xf) : (packed[i - 8] >> 4);
        int high = (packed[8 + (i % 4)] >> (2 * (i / 4))) & 3;
        scales[i] = (low | (high << 4)) - 32;
    }
}

static void dq_q3_k(const uint8_t *b, float *y)
{
    const uint8_t *hmask = b, *q = b + 32;
    int scales[16];
    q3_k_scales(b + 96, scales);
    float d = f16_at(b + 108);
    int is = 0;
    uint8_t m = 1;
    for (int half = 0; half < 2; half++, q += 32) {
        for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
            for (int part = 0; part < 2; part++) {
                float dl = d * (float)scales[is++];
                for (int l = 0; l < 16; l++) {
                    int k = part * 16 + l;
                    /* the high bit is stored inverted: clear means subtract 4 */
                    int v = ((q[k] >> shift) & 3) - ((hmask[k] & m) ? 0 : 4);
                    *y++ = dl * (float)v;
                }
            }
        }
    }
}

/* q4_K/q5_K: 8 scales and 8 mins of 6 bits in 12 bytes (ggml's get_scale_min_k4); group j's
 * scale is d x its 6-bit scale and its min dmin x its 6-bit min. */
static void k4_scale_min(int j, const uint8_t *q, float d, float dmin, float *scale, float *min)
{
    int sc, m;
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
    *scale = d * (float)sc;
    *min = dmin * (float)m;
}

static void dq_q4_k(const uint8_t *b, float *y)
{
    float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *q = b + 16;
    for (int g = 0; g < 8; g += 2, q += 32) {
        float d0, min0, d1, min1;
        k4_scale_min(g, scales, d, dmin, &d0, &min0);
        k4_scale_min(g + 1, scales, d, dmin, &d1, &min1);
        for (int l = 0; l < 32; l++)
            *y++ = d0 * (float)(q[l] & 0xf) - min0;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)(q[l] >> 4) - min1;
    }
}

static void dq_q5_k(const uint8_t *b, float *y)
{
    float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int g = 0; g < 8; g += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
        float d0, min0, d1, min1;
        k4_scale_min(g, scales, d, dmin, &d0, &min0);
        k4_scale_min(g + 1, scales, d, dmin, &d1, &min1);
        for (int l = 0; l < 32; l++)
            *y++ = d0 * (float)((ql[l] & 0xf) + ((qh[l] & u1) ? 16 : 0)) - min0;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - min1;
    }
}

static void dq_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = f16_at(b + 208);
    for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
    }
}

static void dq_q8_k(const uint8_t *b, float *y)
{
    float d = lp_load_f32(b);
    for (int j = 0; j < QK_K; j++)
        y[j] = d * (float)(int8_t)b[4 + j];
}

static void dq_iq4_xs(const uint8_t *b, float *y)
{
    float d = f16_at(b);
    uint16_t scales_h = lp_load_u16(b + 2);
    const uint8_t *scales_l = b + 4, *qs = b + 8;
    for (int ib = 0; ib < 8; ib++, y += 32, qs += 16) {
        int ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((scales_h >> (2 * ib)) & 3) << 4);
        float dl = d * (float)(ls - 32);
        for (int j = 0; j < 16; j++) {
            y[j] = dl * (float)iq4_levels[qs[j] & 0xf];
            y[j + 16] = dl * (float)iq4_levels[qs[j] >> 4];
        }
    }
}

/* A base-3 digit packed as a fixed-point fraction: multiplying the byte by 3^n (mod 256) brings
 * trit n to the top, and (q * 3) >> 8 reads it. */
static float trit(uint8_t packed, uint8_t pow3, float d)
{
    uint8_t q = (uint8_t)(packed * pow3);
    int xi = (int)(((uint16_t)q * 3) >> 8);
    return (float)(xi - 1) * d;
}

static void dq_tq1_0(const uint8_t *b, float *y)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t *qs = b, *qh = b + 48;
    float d = f16_at(b + 52);
    /* qs[0..32): 5 trits each for values 0..159; qs[32..48): 5 each for 160..239; qh: 4 each. */
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 32; m++)
            *y++ = trit(qs[m], pow3[n], d);
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 16; m++)
            *y++ = trit(qs[32 + m], pow3[n], d);
    for (int n = 0; n < 4; n++)
        for (int m = 0; m < 4; m++)
            *y++ = trit(qh[m], pow3[n], d);
}

static void dq_tq2_0(const uint8_t *b, float *y)
{
    const uint8_t *qs = b;
    float d = f16_at(b + 64);
    for (int j = 0; j < 64; j += 32)
        for (int shift = 0; shift < 8; shift += 2)
            for (int m = 0; m < 32; m++)
                *y++ = (float)(((qs[j + m] >> shift) & 3) - 1) * d;
}

/* ---- dispatch --------------------------------------------------------------------------------- */

typedef void (*block_fn)(const uint8_t *block, float *out);

static block_fn block_function(lp_dtype dtype)
{
    switch (dtype) {
    case LP_DTYPE_Q4_0: return dq_q4_0;
    case LP_DTYPE_Q4_1: return dq_q4_1;
    case LP_DTYPE_Q5_0: return dq_q5_0;
    case LP_DTYPE_Q5_1: return dq_q5_1;
    case LP_DTYPE_Q8_0: return dq_q8_0;
    case LP_DTYPE_Q8_1: return dq_q8_1;
    case LP_DTYPE_Q2_K: return dq_q2_k;
    case LP_DTYPE_Q3_K: return dq_q3_k;
    case LP_DTYPE_Q4_K: return dq_q4_k;
    case LP_DTYPE_Q5_K: return dq_q5_k;
    case LP_DTYPE_Q6_K: return dq_q6_k;
    case LP_DTYPE_Q8_K: return dq_q8_k;
    case LP_DTYPE_IQ4_NL: return dq_iq4_nl;
    case LP_DTYPE_IQ4_XS: return dq_iq4_xs;
    case LP_DTYPE_TQ1_0: return dq_tq1_0;
    case LP_DTYPE_TQ2_0: return dq_tq2_0;
    case LP_DTYPE_MXFP4: return dq_mxfp4;
    default: return NULL;
    }
}

static bool plain_supported(lp_dtype dtype)
{
    switch (dtype) {
    case LP_DTYPE_F64: case LP_DTYPE_F32: case LP_DTYPE_F16: case LP_DTYPE_BF16:
    case LP_DTYPE_F8_E4M3: case LP_DTYPE_F8_E5M2: case LP_DTYPE_F8_E8M0: case LP_DTYPE_F4_E2M1:
    case LP_DTYPE_I64: case LP_DTYPE_I32: case LP_DTYPE_I16: case LP_DTYPE_I8:
    case LP_DTYPE_U64: case LP_DTYPE_U32: case LP_DTYPE_U16: case LP_DTYPE_U8: case LP_DTYPE_BOOL:
        return true;
    default:
        return false;
    }
}

bool lp_dequantize_supported(lp_dtype dtype)
{
    return plain_supported(dtype) || block_function(dtype) != NULL;
}

/* The floating-point dtypes; false for the others. */
static bool convert_float(lp_dtype dtype, const uint8_t *s, int64_t n, float *y)
{
    switch (dtype) {
    case LP_DTYPE_F32: memcpy(y, s, (size_t)n * 4); return true;
    case LP_DTYPE_F64:
        for (int64_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, s + 8 * i, 8);
            y[i] = (float)v;
        }
        return true;
    case LP_DTYPE_F16:
        for (int64_t i = 0; i < n; i++)
            y[i] = half_to_float(lp_load_u16(s + 2 * i));
        return true;
    case LP_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            y[i] = lp_bf16_to_f32(lp_load_u16(s + 2 * i));
        return true;
    case LP_DTYPE_F8_E4M3:
        for (int64_t i = 0; i < n; i++)
            y[i] = lp_f8_e4m3_to_f32(s[i]);
        return true;
    case LP_DTYPE_F8_E5M2:
        for (int64_t i = 0; i < n; i++)
            y[i] = lp_f8_e5m2_to_f32(s[i]);
        return true;
    case LP_DTYPE_F8_E8M0:
        for (int64_t i = 0; i < n; i++)
            y[i] = lp_f8_e8m0_to_f32(s[i]);
        return true;
    case LP_DTYPE_F4_E2M1: /* n is even: lp_dequantize checked whole two-value blocks */
        for (int64_t i = 0; i < n / 2; i++) {
            y[2 * i] = lp_f4_e2m1_to_f32(s[i] & 0xF);
            y[2 * i + 1] = lp_f4_e2m1_to_f32(s[i] >> 4);
        }
        return true;
    default: return false;
    }
}

/* The integer dtypes and bool, each value as the nearest float. */
static void convert_int(lp_dtype dtype, const uint8_t *s, int64_t n, float *y)
{
    for (int64_t i = 0; i < n; i++) {
        switch (dtype) {
        case LP_DTYPE_I64: y[i] = (float)(int64_t)lp_load_u64(s + 8 * i); break;
        case LP_DTYPE_U64: y[i] = (float)lp_load_u64(s + 8 * i); break;
        case LP_DTYPE_I32: y[i] = (float)lp_load_i32(s + 4 * i); break;
        case LP_DTYPE_U32: y[i] = (float)lp_load_u32(s + 4 * i); break;
        case LP_DTYPE_I16: y[i] = (float)(int16_t)lp_load_u16(s + 2 * i); break;
        case LP_DTYPE_U16: y[i] = (float)lp_load_u16(s + 2 * i); break;
        case LP_DTYPE_I8: y[i] = (float)(int8_t)s[i]; break;
        case LP_DTYPE_U8: y[i] = (float)s[i]; break;
        case LP_DTYPE_BOOL: y[i] = s[i] ? 1.0f : 0.0f; break;
        default: return;
        }
    }
}

static void convert_plain(lp_dtype dtype, const uint8_t *s, int64_t n, float *y)
{
    if (!convert_float(dtype, s, n, y))
        convert_int(dtype, s, n, y);
}

lp_status lp_dequantize(lp_dtype dtype, const void *src, int64_t n, float *dst, lp_error *err)
{
    const lp_dtype_info *info = lp_dtype_get(dtype);
    block_fn fn = block_function(dtype);
    if (!fn && !plain_supported(dtype))
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "dequantize: no dequantizer for type %s",
                            info->name);
    if (n < 0 || n % info->block_elems != 0)
        return lp_error_set(err, LP_ERR_USAGE,
                            "dequantize: %lld values of %s is not a whole number of %u-value "
                            "blocks",
                            (long long)n, info->name, info->block_elems);
    if (n == 0)
        return LP_OK;
    const uint8_t *s = src;
    if (!fn) {
        convert_plain(dtype, s, n, dst);
        return LP_OK;
    }
    int64_t n_blocks = n / info->block_elems;
    for (int64_t i = 0; i < n_blocks; i++)
        fn(s + (size_t)i * info->block_bytes, dst + (size_t)i * info->block_elems);
    return LP_OK;
}

lp_status lp_rows_to_f32(const lp_rows *rows, int64_t row_begin, int64_t n_rows, float *dst,
                         lp_error *err)
{
    int64_t row_len = rows->row_len;
    int64_t total_rows = row_len > 0 ? rows->n_elements / row_len : 0;
    int64_t end;
    if (row_begin < 0 || n_rows < 0 || !lp_add_i64(row_begin, n_rows, &end) || end > total_rows)
        return lp_error_set(err, LP_ERR_RANGE,
                            "tensor '%s': rows [%" PRId64 ", %" PRId64 "+%" PRId64
                            ") outside its %" PRId64 " rows",
                            rows->name, row_begin, row_begin, n_rows, total_rows);
    if (n_rows == 0 || row_len == 0)
        return LP_OK;
    const lp_dtype_info *info = lp_dtype_get(rows->dtype);
    if (rows->dtype == LP_DTYPE_INVALID)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "tensor '%s': invalid dtype", rows->name);
    if (row_len % info->block_elems != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "tensor '%s': row length %" PRId64 " is not a whole number of %s "
                            "blocks (%u values)",
                            rows->name, row_len, info->name, info->block_elems);
    /* in range of the data's bytes, which its reader checked against the file */
    uint64_t row_bytes = (uint64_t)(row_len / info->block_elems) * info->block_bytes;
    const uint8_t *src = (const uint8_t *)rows->data + (uint64_t)row_begin * row_bytes;
    lp_status status = lp_dequantize(rows->dtype, src, n_rows * row_len, dst, err);
    if (status != LP_OK)
        lp_error_prefix(err, "tensor '%s': ", rows->name);
    return status;
}

lp_status lp_dequantize_mxfp4(const uint8_t *blocks, const uint8_t *scales, int64_t n_blocks,
                              float *dst, lp_error *err)
{
    if (n_blocks < 0)
        return lp_error_set(err, LP_ERR_USAGE, "dequantize mxfp4: %lld blocks", (long long)n_blocks);
    for (int64_t b = 0; b < n_blocks; b++) {
        /* ldexpf, not lp_f8_e8m0_to_f32: as Hugging Face's and ggml's converters, scale 0xFF is
         * 2^128 (values overflow to +-inf, zeros become NaN) rather than NaN outright */
        int exponent = (int)scales[b] - 127;
        const uint8_t *q = blocks + 16 * b;
        float *y = dst + 32 * b;
        for (int j = 0; j < 16; j++) {
            y[2 * j] = ldexpf(lp_f4_e2m1_to_f32(q[j] & 0xF), exponent);
            y[2 * j + 1] = ldexpf(lp_f4_e2m1_to_f32(q[j] >> 4), exponent);
        }
    }
    return LP_OK;
}

void lp_mxfp4_block_from_split(const uint8_t values[16], uint8_t scale, uint8_t block[17])
{
    block[0] = scale;
    /* value j sits in byte j / 2 of the split form, the low nibble for even j */
    for (int j = 0; j < 16; j++) {
        uint8_t lo = (uint8_t)((values[j / 2] >> (4 * (j % 2))) & 0x0f);
        uint8_t hi = (uint8_t)((values[(j + 16) / 2] >> (4 * (j % 2))) & 0x0f);
        block[1 + j] = (uint8_t)(lo | (hi << 4));
    }
}
