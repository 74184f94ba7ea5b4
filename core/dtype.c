/* dtype table and scalar float conversions (f16, bf16, fp8). */
#include "core/dtype.h"

#include <math.h>
#include <strings.h>

#include "core/names.h"

static const lp_dtype_info dtype_table[LP_DTYPE_COUNT] = {
    [LP_DTYPE_INVALID] = {"invalid", 1, 0, false, false},
    [LP_DTYPE_F64] = {"f64", 1, 8, true, false},
    [LP_DTYPE_F32] = {"f32", 1, 4, true, false},
    [LP_DTYPE_F16] = {"f16", 1, 2, true, false},
    [LP_DTYPE_BF16] = {"bf16", 1, 2, true, false},
    [LP_DTYPE_F8_E4M3] = {"f8_e4m3", 1, 1, true, false},
    [LP_DTYPE_F8_E5M2] = {"f8_e5m2", 1, 1, true, false},
    [LP_DTYPE_F8_E8M0] = {"f8_e8m0", 1, 1, true, false},
    [LP_DTYPE_F4_E2M1] = {"f4_e2m1", 2, 1, true, false},
    [LP_DTYPE_I64] = {"i64", 1, 8, false, false},
    [LP_DTYPE_I32] = {"i32", 1, 4, false, false},
    [LP_DTYPE_I16] = {"i16", 1, 2, false, false},
    [LP_DTYPE_I8] = {"i8", 1, 1, false, false},
    [LP_DTYPE_U64] = {"u64", 1, 8, false, false},
    [LP_DTYPE_U32] = {"u32", 1, 4, false, false},
    [LP_DTYPE_U16] = {"u16", 1, 2, false, false},
    [LP_DTYPE_U8] = {"u8", 1, 1, false, false},
    [LP_DTYPE_BOOL] = {"bool", 1, 1, false, false},
    /* ggml-common.h block layouts */
    [LP_DTYPE_Q4_0] = {"q4_0", 32, 18, false, true},
    [LP_DTYPE_Q4_1] = {"q4_1", 32, 20, false, true},
    [LP_DTYPE_Q5_0] = {"q5_0", 32, 22, false, true},
    [LP_DTYPE_Q5_1] = {"q5_1", 32, 24, false, true},
    [LP_DTYPE_Q8_0] = {"q8_0", 32, 34, false, true},
    [LP_DTYPE_Q8_1] = {"q8_1", 32, 36, false, true},
    [LP_DTYPE_Q2_K] = {"q2_k", 256, 84, false, true},
    [LP_DTYPE_Q3_K] = {"q3_k", 256, 110, false, true},
    [LP_DTYPE_Q4_K] = {"q4_k", 256, 144, false, true},
    [LP_DTYPE_Q5_K] = {"q5_k", 256, 176, false, true},
    [LP_DTYPE_Q6_K] = {"q6_k", 256, 210, false, true},
    [LP_DTYPE_Q8_K] = {"q8_k", 256, 292, false, true},
    [LP_DTYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, false, true},
    [LP_DTYPE_IQ2_XS] = {"iq2_xs", 256, 74, false, true},
    [LP_DTYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, false, true},
    [LP_DTYPE_IQ1_S] = {"iq1_s", 256, 50, false, true},
    [LP_DTYPE_IQ4_NL] = {"iq4_nl", 32, 18, false, true},
    [LP_DTYPE_IQ3_S] = {"iq3_s", 256, 110, false, true},
    [LP_DTYPE_IQ2_S] = {"iq2_s", 256, 82, false, true},
    [LP_DTYPE_IQ4_XS] = {"iq4_xs", 256, 136, false, true},
    [LP_DTYPE_IQ1_M] = {"iq1_m", 256, 56, false, true},
    [LP_DTYPE_TQ1_0] = {"tq1_0", 256, 54, false, true},
    [LP_DTYPE_TQ2_0] = {"tq2_0", 256, 66, false, true},
    [LP_DTYPE_MXFP4] = {"mxfp4", 32, 17, false, true},
};

const lp_dtype_info *lp_dtype_get(lp_dtype dtype)
{
    if ((unsigned)dtype >= LP_DTYPE_COUNT)
        return &dtype_table[LP_DTYPE_INVALID];
    return &dtype_table[dtype];
}

const char *lp_dtype_name(lp_dtype dtype) { return lp_dtype_get(dtype)->name; }

/* Spellings other tools use for the same types; the canonical names come from dtype_table. */
static const lp_name_entry dtype_aliases[] = {
    {LP_DTYPE_F32, "float32"},
    {LP_DTYPE_F32, "fp32"},
    {LP_DTYPE_F16, "float16"},
    {LP_DTYPE_F16, "fp16"},
    {LP_DTYPE_F16, "half"},
    {LP_DTYPE_BF16, "bfloat16"},
    {LP_DTYPE_F64, "float64"},
    {LP_DTYPE_F8_E4M3, "fp8"},
    {LP_DTYPE_F8_E4M3, "f8"},
    {LP_DTYPE_F8_E4M3, "e4m3"},
    {LP_DTYPE_F8_E5M2, "e5m2"},
    {LP_DTYPE_I8, "int8"},
    {LP_DTYPE_U8, "uint8"},
    {LP_DTYPE_I32, "int32"},
    {LP_DTYPE_I64, "int64"},
    {LP_DTYPE_I16, "int16"},
};

lp_dtype lp_dtype_from_name(const char *name)
{
    if (!name)
        return LP_DTYPE_INVALID;
    for (int d = 1; d < LP_DTYPE_COUNT; d++)
        if (strcasecmp(name, dtype_table[d].name) == 0)
            return (lp_dtype)d;
    int alias;
    if (lp_names_value(dtype_aliases, LP_NAMES_LEN(dtype_aliases), name, true, &alias))
        return (lp_dtype)alias;
    return LP_DTYPE_INVALID;
}

double lp_dtype_bits_per_weight(lp_dtype dtype)
{
    const lp_dtype_info *info = lp_dtype_get(dtype);
    return 8.0 * info->block_bytes / info->block_elems;
}

bool lp_dtype_bytes_for(lp_dtype dtype, uint64_t n_elements, uint64_t *bytes)
{
    const lp_dtype_info *info = lp_dtype_get(dtype);
    if (dtype == LP_DTYPE_INVALID || n_elements % info->block_elems != 0)
        return false;
    return !__builtin_mul_overflow(n_elements / info->block_elems, (uint64_t)info->block_bytes,
                                   bytes);
}

/* A float's bits and back, through memcpy (no type-punned pointer). */
static float float_of_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint32_t bits_of_float(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    return bits;
}

float lp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exponent = (h >> 10) & 0x1f;
    uint32_t mantissa = h & 0x3ff;
    uint32_t bits;
    if (exponent == 0) {
        if (mantissa == 0) {
            bits = sign;
        } else { /* subnormal: renormalize */
            int shift = 0;
            while (!(mantissa & 0x400)) {
                mantissa <<= 1;
                shift++;
            }
            mantissa &= 0x3ff;
            bits = sign | ((uint32_t)(127 - 15 + 1 - shift) << 23) | (mantissa << 13);
        }
    } else if (exponent == 0x1f) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else {
        bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
    }
    return float_of_bits(bits);
}

uint16_t lp_f32_to_f16(float f)
{
    uint32_t bits = bits_of_float(f);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000);
    uint32_t abs_bits = bits & 0x7fffffffu;
    if (abs_bits >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (abs_bits > 0x7f800000u ? 0x200 : 0));
    if (abs_bits >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (abs_bits < 0x38800000u) { /* below the smallest normal: subnormal or zero */
        if (abs_bits < 0x33000000u)
            return sign;
        uint32_t exponent = abs_bits >> 23;
        uint32_t mantissa = (abs_bits & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - exponent; /* 14..24 */
        uint32_t half_mantissa = mantissa >> shift;
        uint32_t remainder = mantissa & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (remainder > halfway || (remainder == halfway && (half_mantissa & 1)))
            half_mantissa++;
        return (uint16_t)(sign | half_mantissa);
    }
    uint32_t rounded = abs_bits + 0xfff + ((abs_bits >> 13) & 1); /* round to nearest even */
    return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

float lp_bf16_to_f32(uint16_t b)
{
    return float_of_bits((uint32_t)b << 16);
}

uint16_t lp_f32_to_bf16(float f)
{
    uint32_t bits = bits_of_float(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) /* keep NaN a NaN */
        return (uint16_t)((bits >> 16) | 0x40);
    bits += 0x7fff + ((bits >> 16) & 1);
    return (uint16_t)(bits >> 16);
}

float lp_f8_e4m3_to_f32(uint8_t v)
{
    /* OCP E4M3 "fn": bias 7, no infinities, S.1111.111 is NaN. */
    float sign = (v & 0x80) ? -1.0f : 1.0f;
    int exponent = (v >> 3) & 0xf;
    int mantissa = v & 0x7;
    if (exponent == 0xf && mantissa == 0x7)
        return NAN;
    if (exponent == 0)
        return sign * ldexpf((float)mantissa, -9);
    return sign * ldexpf((float)(8 + mantissa), exponent - 10);
}

float lp_f8_e5m2_to_f32(uint8_t v)
{
    /* E5M2 is the top byte of an IEEE half. */
    return lp_f16_to_f32((uint16_t)((uint16_t)v << 8));
}

float lp_f8_e8m0_to_f32(uint8_t v)
{
    /* ldexpf gives 2^-127 for v = 0 exactly (a float32 subnormal) */
    return v == 0xFF ? NAN : ldexpf(1.0f, (int)v - 127);
}

float lp_f4_e2m1_to_f32(uint8_t v)
{
    static const float values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    return values[v & 0xF];
}
