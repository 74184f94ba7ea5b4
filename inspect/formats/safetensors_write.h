/* A small safetensors writer: collect named tensors, write one file atomically.
 *
 *   lp_st_writer *w;
 *   if (lp_st_writer_create(&w, &err) != LP_OK) ...
 *   int64_t shape[2] = {512, 64};
 *   lp_st_writer_add(w, "model.embed_tokens.weight", LP_DTYPE_F32, 2, shape, data, &err); // copies
 *   lp_st_writer_set_metadata(w, "format", "pt", &err);
 *   lp_st_writer_write(w, "out/model.safetensors", &err);  // temp file + rename: all or nothing
 *   lp_st_writer_destroy(w);
 *
 * File layout written (the format's spec, https://github.com/huggingface/safetensors):
 *   bytes [0, 8)        u64 little-endian N = header length
 *   bytes [8, 8+N)      UTF-8 JSON object: {"__metadata__": {"k": "v", ...},
 *                       "name": {"dtype": "F32", "shape": [512, 64], "data_offsets": [b, e]}, ...}
 *                       padded with spaces so that 8+N is a multiple of 8 (aligned data)
 *   bytes [8+N, end)    tensor data back to back, row-major, little-endian, in insertion order;
 *                       data_offsets are relative to 8+N, half-open, with no gaps.
 * Plain dtypes only (F64 F32 F16 BF16 F8_E4M3 F8_E5M2 F8_E8M0 F4 I64 I32 I16 I8 U64 U32 U16 U8
 * BOOL; F4 packs two values a byte, so its element count must be even).
 */
#ifndef LP_INSPECT_SAFETENSORS_WRITER_H
#define LP_INSPECT_SAFETENSORS_WRITER_H

#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"

typedef struct lp_st_writer lp_st_writer;

lp_status lp_st_writer_create(lp_st_writer **out, lp_error *err);
/* NULL is fine. Frees every copied tensor. */
void lp_st_writer_destroy(lp_st_writer *writer);

/* Add a tensor; data (n_elements * dtype size bytes, little-endian) is copied. A duplicate or
 * empty name, "__metadata__", a quant dtype, a negative dimension or a size overflow is an
 * error (LP_ERR_USAGE / LP_ERR_UNSUPPORTED / LP_ERR_RANGE) naming the tensor. n_dims 0 = scalar. */
lp_status lp_st_writer_add(lp_st_writer *writer, const char *name, lp_dtype dtype, int n_dims,
                           const int64_t *shape, const void *data, lp_error *err);

/* Convenience: an f32 buffer stored as dtype (F32, F16 or BF16; rounded to nearest even). */
lp_status lp_st_writer_add_f32_as(lp_st_writer *writer, const char *name, lp_dtype dtype,
                                  int n_dims, const int64_t *shape, const float *data,
                                  lp_error *err);

/* String metadata (__metadata__); setting a key again replaces its value. */
lp_status lp_st_writer_set_metadata(lp_st_writer *writer, const char *key, const char *value,
                                    lp_error *err);

/* Write the file: PATH.tmp.<pid> first, then rename over PATH, so a failure never leaves a
 * half-written PATH. LP_ERR_IO carries strerror. */
lp_status lp_st_writer_write(const lp_st_writer *writer, const char *path, lp_error *err);

#endif
