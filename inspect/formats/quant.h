/* Dequantization of GGUF block types (ggml's layouts) and plain dtypes to float32.
 *
 *   float out[256];
 *   lp_dequantize(LP_DTYPE_Q4_K, block_ptr, 256, out);   // n must be whole blocks
 *
 * Every function reads exactly lp_dtype_bytes_for(dtype, n) bytes from src.
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

#endif
