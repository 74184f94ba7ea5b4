/* A small GGUF v3 writer: collect metadata and named tensors, then write one file.
 *
 *   lp_gguf_writer *w;
 *   if (lp_gguf_writer_create(&w, &err) != LP_OK) ...
 *   lp_gguf_writer_set_str(w, "general.architecture", "llama", &err);
 *   lp_gguf_writer_set_u32(w, "llama.block_count", 2, &err);
 *   const char *tokens[] = {"<unk>", "<s>", "</s>"};
 *   lp_gguf_writer_set_strs(w, "tokenizer.ggml.tokens", tokens, 3, &err);
 *   int64_t shape[2] = {512, 64};                 // outermost first, as safetensors and lp_tensor
 *   lp_gguf_writer_add_f32_as(w, "token_embd.weight", LP_DTYPE_F16, 2, shape, data, &err);
 *   lp_gguf_writer_write(w, "model.gguf", &err);
 *   lp_gguf_writer_destroy(w);
 *
 * File layout written (ggml's gguf.h, version 3, little-endian):
 *   "GGUF", u32 version 3, u64 tensor count, u64 kv count
 *   kv count times: key (u64 length + bytes), u32 value type (lp_gguf_type), value
 *     (a string is u64 length + bytes; an array is u32 element type, u64 count, elements)
 *   tensor count times: name, u32 n_dims, u64 ne[n_dims] (ne[0] innermost: the reverse of
 *     the shape given here), u32 ggml type id, u64 offset relative to the data section
 *   zero padding to general.alignment (32 unless that key is set as a u32 power of two)
 *   the data section: each tensor at its offset, padded to the alignment, in insertion order
 * Any dtype GGUF has an id for, quant blocks included (the innermost dimension must hold whole
 * blocks).
 */
#ifndef LP_INSPECT_GGUF_WRITE_H
#define LP_INSPECT_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "inspect/formats/gguf.h"

typedef struct lp_gguf_writer lp_gguf_writer;

lp_status lp_gguf_writer_create(lp_gguf_writer **out, lp_error *err);
/* NULL is fine. Frees every copied value and tensor. */
void lp_gguf_writer_destroy(lp_gguf_writer *writer);

/* Metadata, written in the order set. A key set twice or an empty key is LP_ERR_USAGE. */
lp_status lp_gguf_writer_set_str(lp_gguf_writer *w, const char *key, const char *value,
                                 lp_error *err);
lp_status lp_gguf_writer_set_u32(lp_gguf_writer *w, const char *key, uint32_t value,
                                 lp_error *err);
lp_status lp_gguf_writer_set_f32(lp_gguf_writer *w, const char *key, float value, lp_error *err);
lp_status lp_gguf_writer_set_bool(lp_gguf_writer *w, const char *key, bool value, lp_error *err);
lp_status lp_gguf_writer_set_strs(lp_gguf_writer *w, const char *key, const char *const *values,
                                  size_t n, lp_error *err);
/* An array of n fixed-size elements of type elem (not STRING or ARRAY), little-endian, copied
 * as they are (BOOL: one byte each). */
lp_status lp_gguf_writer_set_array(lp_gguf_writer *w, const char *key, lp_gguf_type elem,
                                   const void *values, size_t n, lp_error *err);

/* A tensor of dtype whose bytes (lp_dtype_bytes_for of its elements) are copied. A duplicate
 * or empty name, a dtype without a GGUF id, more than 4 dimensions, a negative dimension, an
 * innermost dimension that does not hold whole blocks or a size overflow is an error naming
 * the tensor. */
lp_status lp_gguf_writer_add(lp_gguf_writer *w, const char *name, lp_dtype dtype, int n_dims,
                             const int64_t *shape, const void *data, lp_error *err);
/* Convenience: an f32 buffer stored as F32, F16 or BF16 (rounded to nearest even). */
lp_status lp_gguf_writer_add_f32_as(lp_gguf_writer *w, const char *name, lp_dtype dtype,
                                    int n_dims, const int64_t *shape, const float *data,
                                    lp_error *err);

/* Write the file at path (replaced when present; removed again when a write fails, so no
 * truncated file stays; callers that must keep the old file write to a temporary name and
 * rename, as loupe synth does). LP_ERR_IO carries strerror. */
lp_status lp_gguf_writer_write(const lp_gguf_writer *w, const char *path, lp_error *err);

#endif
