/* What inspect's other wings (weights/, arch/, tokenizer/) use of formats/ beyond its public
 * headers: the tensor descriptor and sink every weights reader reports through, the readers that
 * report that way (safetensors, llama2.c, GGUF's tensor infos), the llama2.c header, and the
 * llama2.c tokenizer.bin check. Not a public header.
 *
 *   static lp_status keep(void *ctx, const lp_tensor_desc *t, lp_error *err)
 *   {
 *       ... copy *t (and t->name, which is borrowed for this call only) into the catalogue ...
 *   }
 *   lp_tensor_sink sink = {catalogue, keep};
 *   if (lp_safetensors_read(map.data, map.size, "model.safetensors", &sink, &err) != LP_OK) ...
 *
 * Formats know nothing of the catalogue: a reader validates the whole file first and only then
 * hands each tensor to sink->add, in file order, so a sink never sees part of a bad file (though
 * it may have kept earlier tensors when its own add fails).
 */
#ifndef LP_INSPECT_FORMATS_INTERNAL_H
#define LP_INSPECT_FORMATS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "inspect/formats/gguf.h"

#define LP_TENSOR_DESC_MAX_DIMS 8 /* = LP_MAX_DIMS of inspect/inspect.h (checked there) */

/* One tensor as a format stores it. */
typedef struct lp_tensor_desc {
    const char *name;  /* borrowed: valid during sink->add only */
    lp_dtype dtype;
    int n_dims;
    int64_t shape[LP_TENSOR_DESC_MAX_DIMS]; /* row-major, outermost first */
    int64_t n_elements;
    uint64_t n_bytes;
    uint64_t file_offset; /* absolute byte offset of the data in the file */
    const void *data;     /* borrowed view into the reader's input (n_bytes long) */
} lp_tensor_desc;

typedef struct lp_tensor_sink {
    void *ctx;
    /* Keep the tensor; any status but LP_OK stops the reader, which returns it. */
    lp_status (*add)(void *ctx, const lp_tensor_desc *tensor, lp_error *err);
} lp_tensor_sink;

/* safetensors (layout and rules in safetensors.c): data[0, size) is the whole file; name is
 * the file's name for messages. Memory: a compact record and the name of each tensor until the
 * file is validated, then the sink's. */
lp_status lp_safetensors_read(const uint8_t *data, size_t size, const char *name,
                              const lp_tensor_sink *sink, lp_error *err);

/* GGUF: the tensor infos of an open file, shapes reversed to outermost first, element counts
 * checked against the byte sizes. Views point into the GGUF's own mapping. */
lp_status lp_gguf_read_tensors(const lp_gguf *gguf, const lp_tensor_sink *sink,
                               lp_error *err);

/* The llama2.c checkpoint header (byte layout in llama2c.c), with the derived sizes. */
typedef struct lp_llama2c_header {
    int version;           /* 0 (legacy, no magic), 1 (float32) or 2 (int8 in groups) */
    uint64_t header_bytes; /* 28 or 256 */
    int64_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
    bool shared_classifier;
    int64_t group_size;    /* version 2 only, else 0 */
    int64_t head_dim, kv_dim;
} lp_llama2c_header;

/* Read and check the header of data[0, size) and that its tables fill the file exactly. A file
 * that is plainly something else (text, JSON, GGUF, a PyTorch zip or pickle) gets a message that
 * says what it is. name stands for the file in messages. */
lp_status lp_llama2c_read_header(const uint8_t *data, size_t size, const char *name,
                                 lp_llama2c_header *out, lp_error *err);

/* The header, then one tensor per layer and table ("layers.3.wq", "token_embedding_table"),
 * in file order. Version 2 matrices are dtype i8 over the codes alone (scales follow them). */
lp_status lp_llama2c_read(const uint8_t *data, size_t size, const char *name,
                          const lp_tensor_sink *sink, lp_error *err);

/* True when data is a well-formed llama2.c tokenizer.bin (int32 max_token_length, then records
 * of float32 score, int32 len, len bytes filling the file exactly; at least one record).
 * *n_tokens (may be NULL) receives the record count. */
bool lp_llama2c_is_tokenizer(const uint8_t *data, size_t size, int64_t *n_tokens);

/* Bytes of one GGUF scalar of the type; 0 for STRING, ARRAY and
 * unknown types. The reader's and the writer's one table. */
uint64_t lp_gguf_scalar_bytes(lp_gguf_type type);

/* The writers' conversion: n f32 values into dst as F32, F16 or BF16 (nearest even), 4 or 2
 * bytes each, little-endian. */
void lp_f32_store_as(lp_dtype dtype, const float *src, uint64_t n, void *dst);

#endif
