/* Element types of every weight format loupe reads, their storage sizes and scalar conversions.
 *
 * A dtype stores values in blocks: plain types have blocks of 1 element; GGUF quant types pack
 * block_elems values into block_bytes (scales included), so bits per weight = 8*bytes/elems.
 *
 *   uint64_t bytes;
 *   if (!lp_dtype_bytes_for(LP_DTYPE_Q4_K, n_elements, &bytes)) ... // overflow or partial block
 *
 * Block dequantization (Q4_0 ... Q6_K, IQ*, MXFP4) lives in inspect/formats/quant.h.
 */
#ifndef LP_CORE_DTYPE_H
#define LP_CORE_DTYPE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef enum lp_dtype {
    LP_DTYPE_INVALID = 0,
    /* plain numeric types (safetensors, GGUF, npy) */
    LP_DTYPE_F64,
    LP_DTYPE_F32,
    LP_DTYPE_F16,
    LP_DTYPE_BF16,
    LP_DTYPE_F8_E4M3,
    LP_DTYPE_F8_E5M2,
    LP_DTYPE_F8_E8M0, /* an exponent alone, 2^(e-127): MX block scales (safetensors F8_E8M0) */
    LP_DTYPE_F4_E2M1, /* 4-bit floats, two a byte, the first in the low nibble (safetensors F4) */
    LP_DTYPE_I64,
    LP_DTYPE_I32,
    LP_DTYPE_I16,
    LP_DTYPE_I8,
    LP_DTYPE_U64,
    LP_DTYPE_U32,
    LP_DTYPE_U16,
    LP_DTYPE_U8,
    LP_DTYPE_BOOL,
    /* GGUF block-quantized types (ggml's block layouts) */
    LP_DTYPE_Q4_0,
    LP_DTYPE_Q4_1,
    LP_DTYPE_Q5_0,
    LP_DTYPE_Q5_1,
    LP_DTYPE_Q8_0,
    LP_DTYPE_Q8_1,
    LP_DTYPE_Q2_K,
    LP_DTYPE_Q3_K,
    LP_DTYPE_Q4_K,
    LP_DTYPE_Q5_K,
    LP_DTYPE_Q6_K,
    LP_DTYPE_Q8_K,
    LP_DTYPE_IQ2_XXS,
    LP_DTYPE_IQ2_XS,
    LP_DTYPE_IQ3_XXS,
    LP_DTYPE_IQ1_S,
    LP_DTYPE_IQ4_NL,
    LP_DTYPE_IQ3_S,
    LP_DTYPE_IQ2_S,
    LP_DTYPE_IQ4_XS,
    LP_DTYPE_IQ1_M,
    LP_DTYPE_TQ1_0,
    LP_DTYPE_TQ2_0,
    LP_DTYPE_MXFP4,
    LP_DTYPE_COUNT
} lp_dtype;

typedef struct lp_dtype_info {
    const char *name;        /* lower-case canonical name: "f32", "bf16", "q4_k", "f8_e4m3" */
    uint32_t block_elems;    /* values per block: 1 for plain types (2 for f4_e2m1, two values a
                                byte), 32 or 256 for quants */
    uint32_t block_bytes;    /* bytes per block, scales included */
    bool is_float;           /* a plain floating type */
    bool is_quant;           /* a GGUF block type */
} lp_dtype_info;

const lp_dtype_info *lp_dtype_get(lp_dtype dtype);   /* never NULL; INVALID has name "invalid" */
const char *lp_dtype_name(lp_dtype dtype);

/* Parse a name, case-insensitively: "F32", "bf16", "Q4_K", "fp8" (= f8_e4m3), "int8" (= i8),
 * "int4" (= q4_0 is NOT implied: returns INVALID; estimate handles int4 itself). */
lp_dtype lp_dtype_from_name(const char *name);

/* Bits per weight including block scales: 8 * block_bytes / block_elems. */
double lp_dtype_bits_per_weight(lp_dtype dtype);

/* Bytes needed for n_elements; false on overflow or when n_elements is not a whole number of
 * blocks. */
bool lp_dtype_bytes_for(lp_dtype dtype, uint64_t n_elements, uint64_t *bytes);

/* Scalar conversions, exact (round-to-nearest-even where narrowing). */
float lp_f16_to_f32(uint16_t h);
uint16_t lp_f32_to_f16(float f);
float lp_bf16_to_f32(uint16_t b);
uint16_t lp_f32_to_bf16(float f);
float lp_f8_e4m3_to_f32(uint8_t v);
float lp_f8_e5m2_to_f32(uint8_t v);
/* E8M0: 2^(v-127); 0xFF is NaN (OCP MX spec). */
float lp_f8_e8m0_to_f32(uint8_t v);
/* E2M1 in the low 4 bits of v: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (-0 included). */
float lp_f4_e2m1_to_f32(uint8_t v);

/* Unaligned little-endian loads from mapped files (memcpy, never a cast). */
static inline uint16_t lp_load_u16(const void *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t lp_load_u32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t lp_load_u64(const void *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline int32_t lp_load_i32(const void *p) { int32_t v; memcpy(&v, p, 4); return v; }
static inline float lp_load_f32(const void *p) { float v; memcpy(&v, p, 4); return v; }

#endif
