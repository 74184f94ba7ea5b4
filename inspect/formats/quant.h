/* Dequantization of GGUF block types (ggml's layouts), gpt-oss's MXFP4 and plain dtypes to
 * float32.
 *
 *   float out[256];
 *   lp_dequantize(LP_DTYPE_Q4_K, block_ptr, 256, out, &err);   // n must be whole blocks
 *   lp_rows rows = {"wq", LP_DTYPE_Q4_K, data, 4096 * 4096, 4096};
 *   lp_rows_to_f32(&rows, 3, 1, out4096, &err);                // row 3 alone
 *   lp_dequantize_mxfp4(blocks, scales, 90, out2880, &err);    // gpt-oss: [90, 16] + [90]
 *
 * Every function reads exactly lp_dtype_bytes_for(dtype, n) bytes from src. lp_rows_to_f32 is the
 * one conversion of stored values to float32: the tensor catalogue and .npy both use it.
 */
#ifndef LP_INSPECT_QUANT_H
#define LP_INSPECT_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"

/* True when lp_dequantize handles this dtype. */
bool lp_dequantize_supported(lp_dtype dtype);

/* Convert n values (a whole number of blocks) of dtype at src to float32 at dst. Returns
 * LP_ERR_UNSUPPORTED for dtypes without a dequantizer, LP_ERR_USAGE for a partial block. */
lp_status lp_dequantize(lp_dtype dtype, const void *src, int64_t n, float *dst, lp_error *err);

/* A row-major array of n_elements values of dtype at data, row_len values a row (a whole
 * number of blocks); name is for messages ("tensor 'NAME': ..."). */
typedef struct lp_rows {
    const char *name;
    lp_dtype dtype;
    const void *data; /* lp_dtype_bytes_for(dtype, n_elements) bytes, checked by its reader */
    int64_t n_elements;
    int64_t row_len;
} lp_rows;

/* Convert rows [row_begin, row_begin + n_rows) to float32 into dst (n_rows * row_len floats),
 * touching only those rows' bytes. LP_ERR_RANGE outside the rows, LP_ERR_FORMAT for a row that is
 * not whole blocks, LP_ERR_UNSUPPORTED for a dtype without a conversion. */
lp_status lp_rows_to_f32(const lp_rows *rows, int64_t row_begin, int64_t n_rows, float *dst,
                         lp_error *err);

/* MXFP4 as gpt-oss's safetensors hold it, values and scales in two tensors (U8 or F4 "*_blocks",
 * U8 or F8_E8M0 "*_scales"):
 *   blocks  [n_blocks, 16] bytes: 32 E2M1 values a block, two a byte, value 2j in the low nibble
 *           and 2j + 1 in the high one
 *   scales  [n_blocks] E8M0 exponents
 *   dst[32 * b + i] = e2m1(value i of block b) * 2^(scales[b] - 127)        [n_blocks * 32]
 * as transformers' convert_moe_packed_tensors computes it. GGUF's MXFP4 (LP_DTYPE_MXFP4: the scale
 * byte first in each block, then values 0..15 in the low nibbles and 16..31 in the high ones) is
 * lp_dequantize's. LP_ERR_USAGE for n_blocks < 0. */
/* The 16 E2M1 values of a nibble, doubled so they are integers (0, 0.5, 1, 1.5, 2, 3, 4, 6 and
 * their negatives times two): an MXFP4 value is 2^(e - 128) * lp_mxfp4_levels_x2[nibble]. Shared
 * with the matvec kernels, which read GGUF's MXFP4 blocks directly. */
extern const int8_t lp_mxfp4_levels_x2[16];

lp_status lp_dequantize_mxfp4(const uint8_t *blocks, const uint8_t *scales, int64_t n_blocks,
                              float *dst, lp_error *err);

/* One block of the split form (16 bytes of values, its scale byte) as GGUF's MXFP4 block of 17
 * bytes: the scale, then value j in the low nibble and j + 16 in the high one of byte 1 + j.
 * The same numbers exactly (how trace binds gpt-oss's safetensors pairs). */
void lp_mxfp4_block_from_split(const uint8_t values[16], uint8_t scale, uint8_t block[17]);

#endif
