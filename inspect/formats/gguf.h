/* GGUF v2/v3 reader: metadata key/values and tensor infos, validated against the file size.
 *
 *   lp_gguf *g;
 *   if (lp_gguf_open("model.gguf", &g, &err) != LP_OK) ...
 *   int64_t n_layers;
 *   if (lp_gguf_get_int(g, "llama.block_count", &n_layers)) ...
 *   int64_t kv = lp_gguf_find_key(g, "tokenizer.ggml.tokens");
 *   for (uint64_t i = 0; i < lp_gguf_arr_len(g, kv); i++) {
 *       const char *s; size_t len;
 *       lp_gguf_arr_str(g, kv, i, &s, &len);   // borrowed, not NUL-terminated
 *   }
 *   lp_gguf_close(g);
 *
 * Tensors are exposed through lp_weights (inspect/inspect.h); lp_gguf_tensor_* give the raw infos.
 */
#ifndef LP_INSPECT_GGUF_H
#define LP_INSPECT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"

typedef enum lp_gguf_type {
    LP_GGUF_UINT8 = 0,
    LP_GGUF_INT8 = 1,
    LP_GGUF_UINT16 = 2,
    LP_GGUF_INT16 = 3,
    LP_GGUF_UINT32 = 4,
    LP_GGUF_INT32 = 5,
    LP_GGUF_FLOAT32 = 6,
    LP_GGUF_BOOL = 7,
    LP_GGUF_STRING = 8,
    LP_GGUF_ARRAY = 9,
    LP_GGUF_UINT64 = 10,
    LP_GGUF_INT64 = 11,
    LP_GGUF_FLOAT64 = 12,
    LP_GGUF_TYPE_COUNT
} lp_gguf_type;

typedef struct lp_gguf lp_gguf;

lp_status lp_gguf_open(const char *path, lp_gguf **out, lp_error *err);
/* Parse from memory (fuzzing, tests); the buffer must outlive the handle. */
lp_status lp_gguf_open_memory(const void *data, size_t size, const char *name, lp_gguf **out,
                              lp_error *err);
void lp_gguf_close(lp_gguf *gguf);

uint32_t lp_gguf_version(const lp_gguf *gguf);
const char *lp_gguf_path(const lp_gguf *gguf);

/* Metadata. Keys are looked up exactly; -1 when absent. */
int64_t lp_gguf_n_kv(const lp_gguf *gguf);
int64_t lp_gguf_find_key(const lp_gguf *gguf, const char *key);
const char *lp_gguf_key_name(const lp_gguf *gguf, int64_t kv); /* NUL-terminated copy, borrowed */
lp_gguf_type lp_gguf_kv_type(const lp_gguf *gguf, int64_t kv);
lp_gguf_type lp_gguf_arr_type(const lp_gguf *gguf, int64_t kv); /* element type of an array */
uint64_t lp_gguf_arr_len(const lp_gguf *gguf, int64_t kv);       /* 0 if not an array */

/* Typed getters by key: false when absent or of an incompatible type. Integer getters accept
 * every integer type (and bool); float getters accept float and integer types. */
bool lp_gguf_get_int(const lp_gguf *gguf, const char *key, int64_t *out);
bool lp_gguf_get_float(const lp_gguf *gguf, const char *key, double *out);
bool lp_gguf_get_bool(const lp_gguf *gguf, const char *key, bool *out);
bool lp_gguf_get_str(const lp_gguf *gguf, const char *key, const char **s, size_t *len);

/* Array elements (index < lp_gguf_arr_len). Strings are borrowed, not NUL-terminated. */
bool lp_gguf_arr_int(const lp_gguf *gguf, int64_t kv, uint64_t index, int64_t *out);
bool lp_gguf_arr_float(const lp_gguf *gguf, int64_t kv, uint64_t index, double *out);
bool lp_gguf_arr_str(const lp_gguf *gguf, int64_t kv, uint64_t index, const char **s,
                     size_t *len);

/* Tensor infos, in file order. Dims are GGUF order (ne[0] innermost). */
int64_t lp_gguf_n_tensors(const lp_gguf *gguf);
const char *lp_gguf_tensor_name(const lp_gguf *gguf, int64_t index);
/* The index of the first tensor called name, or -1. */
int64_t lp_gguf_find_tensor(const lp_gguf *gguf, const char *name);
lp_dtype lp_gguf_tensor_dtype(const lp_gguf *gguf, int64_t index);
int lp_gguf_tensor_n_dims(const lp_gguf *gguf, int64_t index);
int64_t lp_gguf_tensor_ne(const lp_gguf *gguf, int64_t index, int dim);
uint64_t lp_gguf_tensor_offset(const lp_gguf *gguf, int64_t index); /* absolute, in the file */
uint64_t lp_gguf_tensor_bytes(const lp_gguf *gguf, int64_t index);
const void *lp_gguf_tensor_data(const lp_gguf *gguf, int64_t index); /* borrowed mmap view */

/* GGUF's numeric type id <-> loupe dtype; LP_DTYPE_INVALID for unknown ids. */
lp_dtype lp_gguf_dtype_from_id(uint32_t ggml_type);
int lp_gguf_dtype_to_id(lp_dtype dtype); /* -1 for dtypes GGUF has no id for */

#endif
