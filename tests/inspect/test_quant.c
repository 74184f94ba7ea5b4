/* Unit tests of inspect/formats/quant.c: every block type is packed by hand from chosen integer levels and
 * scales (following ggml's quantize_row_*_ref packing, the inverse direction of the dequantizer)
 * and every dequantized value is checked against scale * level computed here. */
#include "test_util.h"

#include <math.h>

#include "core/dtype.h"
#include "inspect/formats/quant.h"

/* Deterministic pseudo-random integers in [lo, hi]. */
static uint32_t rng_state = 12345u;
static int rnd(int lo, int hi)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return lo + (int)((rng_state >> 8) % (uint32_t)(hi - lo + 1));
}

static void put_f16(uint8_t *p, float v)
{
    uint16_t h = lp_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* Compare with a relative tolerance of a few float ulps: the products are mostly exact, but the
 * dequantizer may associate d * scale * q differently. Reports the first mismatch. */
static void check_values(const char *what, const float *got, const float *want, int n)
{
    for (int i = 0; i < n; i++) {
        float tol = 1e-6f * fmaxf(1.0f, fabsf(want[i]));
        if (!(fabsf(got[i] - want[i]) <= tol)) {
            print_error("%s: value %d: got %.9g, want %.9g\n", what, i, (double)got[i],
                        (double)want[i]);
            fail();
        }
    }
}

static void dequant_ok(lp_dtype dtype, const void *src, int n, float *out)
{
    lp_error err = {0};
    for (int i = 0; i < n; i++)
        out[i] = NAN; /* every value must be written */
    assert_int_equal(lp_dequantize(dtype, src, n, out, &err), LP_OK);
}

/* ---- 32-value types --------------------------------------------------------------------------- */

static void test_q4_0(void **state)
{
    (void)state;
    uint8_t block[2 * 18];
    float want[64], got[64];
    for (int b = 0; b < 2; b++) {
        uint8_t *p = block + 18 * b;
        float d = b == 0 ? 0.5f : -1.25f;
        put_f16(p, d);
        int q[32];
        for (int i = 0; i < 32; i++)
            q[i] = rnd(0, 15);
        q[0] = 0;
        q[31] = 15;
        for (int j = 0; j < 16; j++)
            p[2 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
        for (int i = 0; i < 32; i++)
            want[32 * b + i] = d * (float)(q[i] - 8);
    }
    dequant_ok(LP_DTYPE_Q4_0, block, 64, got);
    check_values("q4_0", got, want, 64);
    assert_true(got[0] == -4.0f); /* d = 0.5, nibble 0 -> 0.5 * -8 */
    assert_true(got[31] == 3.5f);
}

static void test_q4_1(void **state)
{
    (void)state;
    uint8_t p[20];
    float want[32], got[32];
    float d = 0.25f, m = -3.0f;
    put_f16(p, d);
    put_f16(p + 2, m);
    int q[32];
    for (int i = 0; i < 32; i++)
        q[i] = rnd(0, 15);
    for (int j = 0; j < 16; j++)
        p[4 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
    for (int i = 0; i < 32; i++)
        want[i] = d * (float)q[i] + m;
    dequant_ok(LP_DTYPE_Q4_1, p, 32, got);
    check_values("q4_1", got, want, 32);
}

static void pack_q5(const int *q, uint8_t *qh4, uint8_t *qs16)
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs16[j] = (uint8_t)((q[j] & 0xf) | ((q[j + 16] & 0xf) << 4));
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    memcpy(qh4, &qh, 4);
}

static void test_q5_0(void **state)
{
    (void)state;
    uint8_t p[22];
    float want[32], got[32];
    float d = 0.5f;
    put_f16(p, d);
    int q[32];
    for (int i = 0; i < 32; i++)
        q[i] = rnd(0, 31);
    q[3] = 31;  /* fifth bit set in the low half */
    q[20] = 16; /* and in the high half */
    q[21] = 15;
    pack_q5(q, p + 2, p + 6);
    for (int i = 0; i < 32; i++)
        want[i] = d * (float)(q[i] - 16);
    dequant_ok(LP_DTYPE_Q5_0, p, 32, got);
    check_values("q5_0", got, want, 32);
    assert_true(got[3] == 7.5f);
    assert_true(got[20] == 0.0f);
}

static void test_q5_1(void **state)
{
    (void)state;
    uint8_t p[24];
    float want[32], got[32];
    float d = 0.125f, m = 1.5f;
    put_f16(p, d);
    put_f16(p + 2, m);
    int q[32];
    for (int i = 0; i < 32; i++)
        q[i] = rnd(0, 31);
    pack_q5(q, p + 4, p + 8);
    for (int i = 0; i < 32; i++)
        want[i] = d * (float)q[i] + m;
    dequant_ok(LP_DTYPE_Q5_1, p, 32, got);
    check_values("q5_1", got, want, 32);
}

static void test_q8_0_and_q8_1(void **state)
{
    (void)state;
    uint8_t p0[34], p1[36];
    float want[32], got[32];
    float d = 0.0625f;
    put_f16(p0, d);
    put_f16(p1, d);
    put_f16(p1 + 2, 99.0f); /* the sum field must be ignored */
    for (int i = 0; i < 32; i++) {
        int q = rnd(-128, 127);
        p0[2 + i] = (uint8_t)(int8_t)q;
        p1[4 + i] = (uint8_t)(int8_t)q;
        want[i] = d * (float)q;
    }
    p0[2] = 0x80; /* -128 */
    p1[4] = 0x80;
    want[0] = d * -128.0f;
    dequant_ok(LP_DTYPE_Q8_0, p0, 32, got);
    check_values("q8_0", got, want, 32);
    dequant_ok(LP_DTYPE_Q8_1, p1, 32, got);
    check_values("q8_1", got, want, 32);
}

static const int iq4_table[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                  1,    13,   25,  38,  53,  69,  89,  113};

static void test_iq4_nl(void **state)
{
    (void)state;
    uint8_t p[18];
    float want[32], got[32];
    float d = 0.5f;
    put_f16(p, d);
    int q[32];
    for (int i = 0; i < 32; i++)
        q[i] = i % 16;
    for (int j = 0; j < 16; j++)
        p[2 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
    for (int i = 0; i < 32; i++)
        want[i] = d * (float)iq4_table[q[i]];
    dequant_ok(LP_DTYPE_IQ4_NL, p, 32, got);
    check_values("iq4_nl", got, want, 32);
    assert_true(got[0] == -63.5f);
}

static void test_mxfp4(void **state)
{
    (void)state;
    /* E2M1 magnitudes for codes 0..7; bit 3 is the sign. */
    static const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    uint8_t p[2 * 17];
    float want[64], got[64];
    const int exps[2] = {127 + 2, 127 - 3}; /* scales 4 and 1/8 */
    for (int b = 0; b < 2; b++) {
        uint8_t *blk = p + 17 * b;
        blk[0] = (uint8_t)exps[b];
        int q[32];
        for (int i = 0; i < 32; i++)
            q[i] = (i * 7 + b) % 16;
        for (int j = 0; j < 16; j++)
            blk[1 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
        for (int i = 0; i < 32; i++) {
            float mag = e2m1[q[i] & 7];
            want[32 * b + i] = ldexpf((q[i] & 8) ? -mag : mag, exps[b] - 127);
        }
    }
    dequant_ok(LP_DTYPE_MXFP4, p, 64, got);
    check_values("mxfp4", got, want, 64);
}

/* Plain E2M1 (safetensors F4) over every byte, E8M0 over every exponent, and gpt-oss's split MXFP4
 * against GGUF's MXFP4 blocks holding the same numbers in ggml's layout. */
static void test_f4_e8m0_and_split_mxfp4(void **state)
{
    (void)state;
    static const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    uint8_t bytes[256];
    float got[512], want[512];
    for (int b = 0; b < 256; b++) {
        bytes[b] = (uint8_t)b;
        for (int k = 0; k < 2; k++) { /* the low nibble is the first value */
            int q = k ? b >> 4 : b & 15;
            want[2 * b + k] = (q & 8) ? -e2m1[q & 7] : e2m1[q & 7];
        }
    }
    dequant_ok(LP_DTYPE_F4_E2M1, bytes, 512, got);
    for (int i = 0; i < 512; i++)
        if (got[i] != want[i] || signbit(got[i]) != signbit(want[i]))
            fail_msg("f4_e2m1 value %d (byte 0x%02X): got %g, want %g", i, i / 2, (double)got[i],
                     (double)want[i]);
    lp_error err = {0};
    assert_int_equal(lp_dequantize(LP_DTYPE_F4_E2M1, bytes, 3, got, &err), LP_ERR_USAGE);
    dequant_ok(LP_DTYPE_F8_E8M0, bytes, 256, got);
    for (int e = 0; e < 255; e++)
        if (got[e] != ldexpf(1.0f, e - 127))
            fail_msg("f8_e8m0 %d: got %g", e, (double)got[e]);
    assert_true(isnan(got[255]));
    /* three blocks: scales 2^3, 2^-2 and 2^-127 (the smallest, subnormal results) */
    uint8_t blocks[3 * 16], scales[3] = {130, 125, 0}, gguf[3 * 17];
    for (int b = 0; b < 3; b++) {
        int q[32];
        for (int i = 0; i < 32; i++)
            q[i] = (i * 5 + (i >> 4) + 3 * b) % 16; /* values j and j + 16 differ */
        for (int j = 0; j < 16; j++) {
            blocks[16 * b + j] = (uint8_t)(q[2 * j] | q[2 * j + 1] << 4);
            gguf[17 * b + 1 + j] = (uint8_t)(q[j] | q[j + 16] << 4);
        }
        gguf[17 * b] = scales[b];
        for (int i = 0; i < 32; i++)
            want[32 * b + i] = ldexpf((q[i] & 8) ? -e2m1[q[i] & 7] : e2m1[q[i] & 7], scales[b] - 127);
    }
    for (int i = 0; i < 96; i++)
        got[i] = NAN;
    assert_int_equal(lp_dequantize_mxfp4(blocks, scales, 3, got, &err), LP_OK);
    check_values("split mxfp4", got, want, 96);
    float from_gguf[96];
    dequant_ok(LP_DTYPE_MXFP4, gguf, 96, from_gguf);
    check_values("split mxfp4 vs gguf mxfp4", got, from_gguf, 96);
    /* the repacking trace binds safetensors pairs with gives ggml's bytes exactly */
    uint8_t repacked[3 * 17];
    for (int b = 0; b < 3; b++)
        lp_mxfp4_block_from_split(blocks + 16 * b, scales[b], repacked + 17 * b);
    assert_memory_equal(repacked, gguf, sizeof gguf);
    assert_int_equal(lp_dequantize_mxfp4(blocks, scales, -1, got, &err), LP_ERR_USAGE);
}

/* ---- 256-value K types ------------------------------------------------------------------------ */

/* 2-bit packing shared by q2_K, q3_K: 128-value halves, byte l of a 32-byte run holds values l,
 * l+32, l+64, l+96 of the half in bits 0-1, 2-3, 4-5, 6-7. */
static void pack_2bit(const int *L, uint8_t *qs64)
{
    for (int j = 0; j < 256; j += 128)
        for (int l = 0; l < 32; l++)
            qs64[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                        (L[j + l + 96] << 6));
}

static void test_q2_k(void **state)
{
    (void)state;
    uint8_t p[84];
    float want[256], got[256];
    float d = 0.5f, dmin = 0.25f;
    int sc[16], mn[16], L[256];
    for (int g = 0; g < 16; g++) {
        sc[g] = rnd(0, 15);
        mn[g] = rnd(0, 15);
        p[g] = (uint8_t)(sc[g] | (mn[g] << 4));
    }
    for (int i = 0; i < 256; i++)
        L[i] = rnd(0, 3);
    pack_2bit(L, p + 16);
    put_f16(p + 80, d);
    put_f16(p + 82, dmin);
    for (int i = 0; i < 256; i++)
        want[i] = d * (float)sc[i / 16] * (float)L[i] - dmin * (float)mn[i / 16];
    dequant_ok(LP_DTYPE_Q2_K, p, 256, got);
    check_values("q2_k", got, want, 256);
}

static void test_q3_k(void **state)
{
    (void)state;
    uint8_t p[110];
    memset(p, 0, sizeof p);
    float want[256], got[256];
    float d = 0.25f;
    int s[16], q[256], L[256];
    for (int g = 0; g < 16; g++)
        s[g] = rnd(-32, 31);
    s[0] = -32;
    s[15] = 31;
    for (int i = 0; i < 256; i++)
        q[i] = rnd(-4, 3);
    /* scales: 6 bits (s + 32); low nibbles in bytes 0-7 (groups 8-15 in the high nibble), high
     * two bits of group j in byte 8 + j%4 at bit 2*(j/4) */
    uint8_t *scales = p + 96;
    for (int j = 0; j < 16; j++) {
        int l = s[j] + 32;
        if (j < 8)
            scales[j] = (uint8_t)(l & 0xf);
        else
            scales[j - 8] |= (uint8_t)((l & 0xf) << 4);
        scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
    }
    /* high bit of value i (set when q >= 0) goes to hmask[i % 32] bit i / 32 */
    uint8_t *hmask = p;
    for (int i = 0; i < 256; i++) {
        L[i] = q[i] + 4;
        if (L[i] > 3) {
            hmask[i % 32] |= (uint8_t)(1 << (i / 32));
            L[i] -= 4;
        }
    }
    pack_2bit(L, p + 32);
    put_f16(p + 108, d);
    for (int i = 0; i < 256; i++)
        want[i] = d * (float)s[i / 16] * (float)q[i];
    dequant_ok(LP_DTYPE_Q3_K, p, 256, got);
    check_values("q3_k", got, want, 256);
}

/* q4_K/q5_K: 8 six-bit scales and mins in 12 bytes. */
static void pack_k4_scales(const int *sc, const int *mn, uint8_t *s12)
{
    memset(s12, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s12[j] = (uint8_t)sc[j];
            s12[j + 4] = (uint8_t)mn[j];
        } else {
            s12[j + 4] = (uint8_t)((sc[j] & 0xf) | ((mn[j] & 0xf) << 4));
            s12[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            s12[j] |= (uint8_t)((mn[j] >> 4) << 6);
        }
    }
}

static void test_q4_k(void **state)
{
    (void)state;
    uint8_t p[144];
    float want[256], got[256];
    float d = 0.125f, dmin = 0.5f;
    int sc[8], mn[8], L[256];
    for (int g = 0; g < 8; g++) {
        sc[g] = rnd(0, 63);
        mn[g] = rnd(0, 63);
    }
    sc[7] = 63; /* high bits of the packed second half */
    mn[5] = 63;
    for (int i = 0; i < 256; i++)
        L[i] = rnd(0, 15);
    put_f16(p, d);
    put_f16(p + 2, dmin);
    pack_k4_scales(sc, mn, p + 4);
    for (int j = 0; j < 256; j += 64)
        for (int l = 0; l < 32; l++)
            p[16 + j / 2 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    for (int i = 0; i < 256; i++)
        want[i] = d * (float)sc[i / 32] * (float)L[i] - dmin * (float)mn[i / 32];
    dequant_ok(LP_DTYPE_Q4_K, p, 256, got);
    check_values("q4_k", got, want, 256);
}

static void test_q5_k(void **state)
{
    (void)state;
    uint8_t p[176];
    memset(p, 0, sizeof p);
    float want[256], got[256];
    float d = 0.25f, dmin = 0.125f;
    int sc[8], mn[8], L[256];
    for (int g = 0; g < 8; g++) {
        sc[g] = rnd(0, 63);
        mn[g] = rnd(0, 63);
    }
    for (int i = 0; i < 256; i++)
        L[i] = rnd(0, 31);
    put_f16(p, d);
    put_f16(p + 2, dmin);
    pack_k4_scales(sc, mn, p + 4);
    uint8_t *qh = p + 16, *ql = p + 48;
    uint8_t m1 = 1, m2 = 2;
    for (int j = 0; j < 256; j += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
        for (int l = 0; l < 32; l++) {
            int l1 = L[j + l], l2 = L[j + l + 32];
            if (l1 > 15) {
                l1 -= 16;
                qh[l] |= m1;
            }
            if (l2 > 15) {
                l2 -= 16;
                qh[l] |= m2;
            }
            ql[l] = (uint8_t)(l1 | (l2 << 4));
        }
    }
    for (int i = 0; i < 256; i++)
        want[i] = d * (float)sc[i / 32] * (float)L[i] - dmin * (float)mn[i / 32];
    dequant_ok(LP_DTYPE_Q5_K, p, 256, got);
    check_values("q5_k", got, want, 256);
}

static void test_q6_k(void **state)
{
    (void)state;
    uint8_t p[210];
    memset(p, 0, sizeof p);
    float want[256], got[256];
    float d = 0.0625f;
    int sc[16], q[256];
    for (int g = 0; g < 16; g++)
        sc[g] = rnd(-128, 127);
    for (int i = 0; i < 256; i++)
        q[i] = rnd(-32, 31);
    uint8_t *ql = p, *qh = p + 128;
    for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; l++) {
            int L0 = q[j + l] + 32, L1 = q[j + l + 32] + 32, L2 = q[j + l + 64] + 32,
                L3 = q[j + l + 96] + 32;
            ql[l] = (uint8_t)((L0 & 0xf) | ((L2 & 0xf) << 4));
            ql[l + 32] = (uint8_t)((L1 & 0xf) | ((L3 & 0xf) << 4));
            qh[l] = (uint8_t)((L0 >> 4) | ((L1 >> 4) << 2) | ((L2 >> 4) << 4) | ((L3 >> 4) << 6));
        }
    }
    for (int g = 0; g < 16; g++)
        p[192 + g] = (uint8_t)(int8_t)sc[g];
    put_f16(p + 208, d);
    for (int i = 0; i < 256; i++)
        want[i] = d * (float)sc[i / 16] * (float)q[i];
    dequant_ok(LP_DTYPE_Q6_K, p, 256, got);
    check_values("q6_k", got, want, 256);
}

static void test_q8_k(void **state)
{
    (void)state;
    uint8_t p[292];
    memset(p, 0x55, sizeof p); /* bsums garbage must not matter */
    float want[256], got[256];
    float d = 0.01f; /* a plain f32, not an f16 */
    memcpy(p, &d, 4);
    for (int i = 0; i < 256; i++) {
        int q = rnd(-127, 127);
        p[4 + i] = (uint8_t)(int8_t)q;
        want[i] = d * (float)q;
    }
    dequant_ok(LP_DTYPE_Q8_K, p, 256, got);
    check_values("q8_k", got, want, 256);
}

static void test_iq4_xs(void **state)
{
    (void)state;
    uint8_t p[136];
    memset(p, 0, sizeof p);
    float want[256], got[256];
    float d = 0.5f;
    int ls[8], q[256];
    for (int ib = 0; ib < 8; ib++)
        ls[ib] = rnd(0, 63);
    for (int i = 0; i < 256; i++)
        q[i] = rnd(0, 15);
    put_f16(p, d);
    uint16_t scales_h = 0;
    for (int ib = 0; ib < 8; ib++) {
        p[4 + ib / 2] |= (uint8_t)((ls[ib] & 0xf) << (4 * (ib % 2)));
        scales_h |= (uint16_t)((ls[ib] >> 4) << (2 * ib));
    }
    memcpy(p + 2, &scales_h, 2);
    for (int ib = 0; ib < 8; ib++)
        for (int j = 0; j < 16; j++)
            p[8 + 16 * ib + j] = (uint8_t)(q[32 * ib + j] | (q[32 * ib + j + 16] << 4));
    for (int i = 0; i < 256; i++)
        want[i] = d * (float)(ls[i / 32] - 32) * (float)iq4_table[q[i]];
    dequant_ok(LP_DTYPE_IQ4_XS, p, 256, got);
    check_values("iq4_xs", got, want, 256);
}

static void test_tq2_0(void **state)
{
    (void)state;
    uint8_t p[66];
    float want[256], got[256];
    float d = 1.5f;
    int t[256];
    for (int i = 0; i < 256; i++)
        t[i] = rnd(-1, 1);
    for (int j = 0; j < 64; j += 32)
        for (int m = 0; m < 32; m++) {
            int q = 0;
            for (int n = 0; n < 4; n++)
                q |= (t[j * 4 + m + n * 32] + 1) << (2 * n);
            p[j + m] = (uint8_t)q;
        }
    put_f16(p + 64, d);
    for (int i = 0; i < 256; i++)
        want[i] = d * (float)t[i];
    dequant_ok(LP_DTYPE_TQ2_0, p, 256, got);
    check_values("tq2_0", got, want, 256);
}

/* Pack trits (first = most significant) as a fixed-point fraction of 3^5, as ggml does. */
static uint8_t pack_trits(const int *t, int n_trits, int stride)
{
    int q = 0;
    for (int n = 0; n < n_trits; n++)
        q = q * 3 + t[n * stride] + 1;
    for (int n = n_trits; n < 5; n++)
        q *= 3;
    return (uint8_t)((q * 256 + 242) / 243);
}

static void test_tq1_0(void **state)
{
    (void)state;
    uint8_t p[54];
    float want[256], got[256];
    float d = 0.75f;
    int t[256];
    for (int i = 0; i < 256; i++)
        t[i] = rnd(-1, 1);
    for (int m = 0; m < 32; m++) /* values 0..159 */
        p[m] = pack_trits(t + m, 5, 32);
    for (int m = 0; m < 16; m++) /* values 160..239 */
        p[32 + m] = pack_trits(t + 160 + m, 5, 16);
    for (int j = 0; j < 4; j++) /* values 240..255 */
        p[48 + j] = pack_trits(t + 240 + j, 4, 4);
    put_f16(p + 52, d);
    for (int i = 0; i < 256; i++)
        want[i] = d * (float)t[i];
    dequant_ok(LP_DTYPE_TQ1_0, p, 256, got);
    check_values("tq1_0", got, want, 256);
}

/* ---- plain types and errors ------------------------------------------------------------------- */

static void test_plain_types(void **state)
{
    (void)state;
    float got[4];
    const uint16_t f16[4] = {0x3c00, 0xc000, 0x0001, 0x7bff};
    dequant_ok(LP_DTYPE_F16, f16, 4, got);
    assert_true(got[0] == 1.0f && got[1] == -2.0f && got[2] == ldexpf(1.0f, -24) &&
                got[3] == 65504.0f);
    const uint16_t bf16[2] = {0x3f80, 0xc040};
    dequant_ok(LP_DTYPE_BF16, bf16, 2, got);
    assert_true(got[0] == 1.0f && got[1] == -3.0f);
    const float f32[3] = {1.5f, -0.0f, 1e30f};
    dequant_ok(LP_DTYPE_F32, f32, 3, got);
    assert_true(got[0] == 1.5f && got[1] == 0.0f && signbit(got[1]) && got[2] == 1e30f);
    const double f64[2] = {0.1, -7.0};
    dequant_ok(LP_DTYPE_F64, f64, 2, got);
    assert_true(got[0] == 0.1f && got[1] == -7.0f);
    const int8_t i8[3] = {-128, 0, 127};
    dequant_ok(LP_DTYPE_I8, i8, 3, got);
    assert_true(got[0] == -128.0f && got[2] == 127.0f);
    const int16_t i16[2] = {-32768, 1234};
    dequant_ok(LP_DTYPE_I16, i16, 2, got);
    assert_true(got[0] == -32768.0f && got[1] == 1234.0f);
    const int32_t i32[2] = {-5, 1 << 20};
    dequant_ok(LP_DTYPE_I32, i32, 2, got);
    assert_true(got[0] == -5.0f && got[1] == 1048576.0f);
}

/* The dequantizer's own half conversion must match core's exactly, for every bit pattern. */
static void test_f16_all_values(void **state)
{
    (void)state;
    static uint16_t all[65536];
    static float got[65536];
    for (uint32_t h = 0; h < 65536; h++)
        all[h] = (uint16_t)h;
    dequant_ok(LP_DTYPE_F16, all, 65536, got);
    for (uint32_t h = 0; h < 65536; h++) {
        float want = lp_f16_to_f32((uint16_t)h);
        if (memcmp(&got[h], &want, 4) != 0) {
            print_error("f16 0x%04x: got %a, want %a\n", h, (double)got[h], (double)want);
            fail();
        }
    }
}

static void test_errors(void **state)
{
    (void)state;
    lp_error err = {0};
    uint8_t block[34] = {0};
    float out[64];
    assert_int_equal(lp_dequantize(LP_DTYPE_Q8_0, block, 16, out, &err), LP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "q8_0"));
    assert_int_equal(lp_dequantize(LP_DTYPE_Q8_0, block, -32, out, &err), LP_ERR_USAGE);
    assert_int_equal(lp_dequantize(LP_DTYPE_IQ2_XXS, block, 256, out, &err), LP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "iq2_xxs"));
    assert_int_equal(lp_dequantize(LP_DTYPE_INVALID, block, 1, out, &err), LP_ERR_UNSUPPORTED);
    assert_int_equal(lp_dequantize(LP_DTYPE_Q8_0, block, 0, out, &err), LP_OK);
    assert_false(lp_dequantize_supported(LP_DTYPE_IQ2_XXS));
    assert_false(lp_dequantize_supported(LP_DTYPE_INVALID));
    /* every type the issue requires */
    const lp_dtype required[] = {LP_DTYPE_F32,  LP_DTYPE_F16,  LP_DTYPE_BF16, LP_DTYPE_Q8_0,
                                 LP_DTYPE_Q4_0, LP_DTYPE_Q4_1, LP_DTYPE_Q5_0, LP_DTYPE_Q5_1,
                                 LP_DTYPE_Q4_K, LP_DTYPE_Q5_K, LP_DTYPE_Q6_K, LP_DTYPE_Q8_K,
                                 LP_DTYPE_Q2_K, LP_DTYPE_Q3_K};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        assert_true(lp_dequantize_supported(required[i]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q4_0),        cmocka_unit_test(test_q4_1),
        cmocka_unit_test(test_q5_0),        cmocka_unit_test(test_q5_1),
        cmocka_unit_test(test_q8_0_and_q8_1), cmocka_unit_test(test_iq4_nl),
        cmocka_unit_test(test_mxfp4),       cmocka_unit_test(test_f4_e8m0_and_split_mxfp4),
        cmocka_unit_test(test_q2_k),
        cmocka_unit_test(test_q3_k),        cmocka_unit_test(test_q4_k),
        cmocka_unit_test(test_q5_k),        cmocka_unit_test(test_q6_k),
        cmocka_unit_test(test_q8_k),        cmocka_unit_test(test_iq4_xs),
        cmocka_unit_test(test_tq2_0),       cmocka_unit_test(test_tq1_0),
        cmocka_unit_test(test_plain_types), cmocka_unit_test(test_f16_all_values),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
