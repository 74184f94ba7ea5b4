/* llama2.c checkpoint reader (the legacy "version 0" format run.c reads): validates the header
 * against the file size and exposes the stacked tables one layer at a time.
 *
 * Byte layout (little-endian; float32 tensors back to back, each row-major [out, in]):
 *
 *   offset 0   7 x int32   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
 *                          (vocab_size < 0: the classifier is NOT shared and is stored at the end)
 *   28         token_embedding_table [vocab, dim]
 *              rms_att_weight [n_layers, dim]
 *              wq [n_layers, dim, dim]            (n_heads * head_dim = dim)
 *              wk [n_layers, kv_dim, dim]         (kv_dim = dim * n_kv_heads / n_heads)
 *              wv [n_layers, kv_dim, dim]
 *              wo [n_layers, dim, dim]
 *              rms_ffn_weight [n_layers, dim]
 *              w1 [n_layers, hidden_dim, dim]     (gate)
 *              w2 [n_layers, dim, hidden_dim]     (down)
 *              w3 [n_layers, hidden_dim, dim]     (up)
 *              rms_final_weight [dim]
 *              freq_cis_real [seq_len, head_dim/2] legacy RoPE tables: skipped (run.c skips them
 *              freq_cis_imag [seq_len, head_dim/2] too), never exposed as tensors
 *              wcls [vocab, dim]                  only when vocab_size < 0
 *
 * Its tokenizer.bin (int32 max_token_length, then per token float32 score, int32 len, len bytes)
 * is read by inspect/tokenizer.c; lp_llama2c_is_tokenizer() only recognizes one, so that a
 * tokenizer given where a checkpoint is expected gets a clear error.
 *
 * q/k rows are in Meta's original order: RoPE rotates adjacent pairs (2i, 2i+1).
 * The file must end exactly after the last table; trailing bytes are an error, because an
 * unshared classifier behind a positive vocab_size would otherwise go unnoticed.
 */
#include "inspect/weights_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"

#define HEADER_BYTES 28

typedef struct layout {
    int64_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab, seq_len;
    bool shared_classifier;
    int64_t head_dim, kv_dim;
} layout;

static lp_status read_header(const lp_mapped_file *map, layout *lay, lp_error *err)
{
    const char *file = lp_path_basename(map->path);
    if (map->size < HEADER_BYTES)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: file is %zu bytes, too short for the 28-byte llama2.c header",
                            file, map->size);
    if (map->size >= 4 && memcmp(map->data, "24ka", 4) == 0)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: llama2.c export version 1/2 (magic 'ak42') is not supported; "
                            "use the legacy format (export.py --version 0)",
                            file);
    static const char *const fields[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                          "n_kv_heads", "vocab_size", "seq_len"};
    int32_t v[7];
    for (int i = 0; i < 7; i++)
        v[i] = lp_load_i32(map->data + 4 * i);
    for (int i = 0; i < 7; i++) {
        if (i == 5 && v[i] < 0 && v[i] != INT32_MIN)
            continue;
        if (v[i] <= 0)
            return lp_error_set(err, LP_ERR_FORMAT, "%s: header field %s at byte %d is %" PRId32
                                ", must be positive", file, fields[i], 4 * i, v[i]);
    }
    lay->dim = v[0];
    lay->hidden_dim = v[1];
    lay->n_layers = v[2];
    lay->n_heads = v[3];
    lay->n_kv_heads = v[4];
    lay->shared_classifier = v[5] > 0;
    lay->vocab = v[5] > 0 ? v[5] : -(int64_t)v[5];
    lay->seq_len = v[6];
    if (lay->n_layers > LP_MAX_LAYERS)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: header n_layers %" PRId64 " at byte 8 exceeds the limit of %d",
                            file, lay->n_layers, LP_MAX_LAYERS);
    if (lay->dim % lay->n_heads != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header n_heads %" PRId64 " at byte 12 does not divide dim %"
                            PRId64,
                            file, lay->n_heads, lay->dim);
    if (lay->n_kv_heads > lay->n_heads || lay->n_heads % lay->n_kv_heads != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header n_kv_heads %" PRId64 " at byte 16 does not divide n_heads %"
                            PRId64,
                            file, lay->n_kv_heads, lay->n_heads);
    lay->head_dim = lay->dim / lay->n_heads;
    lay->kv_dim = lay->head_dim * lay->n_kv_heads;
    return LP_OK;
}

bool lp_llama2c_is_tokenizer(const uint8_t *data, size_t size)
{
    if (size < 4 + 8)
        return false;
    int32_t max_len = lp_load_i32(data);
    if (max_len <= 0 || max_len > 65536)
        return false;
    /* every record must fit and the last one must end exactly at the end of the file */
    size_t pos = 4;
    while (pos < size) {
        if (size - pos < 8)
            return false;
        int32_t len = lp_load_i32(data + pos + 4);
        if (len < 0 || len > max_len || (size_t)len > size - pos - 8)
            return false;
        pos += 8 + (size_t)len;
    }
    return true;
}

typedef struct table {
    const char *name;
    lp_role role;
    bool per_layer;
    bool skipped;        /* legacy tables that are not exposed */
    int64_t rows, cols;  /* one layer's [rows, cols] (cols 0: a vector of `rows`) */
} table;

lp_status lp_llama2c_load(lp_weights *weights, const char *path, lp_error *err)
{
    int fi = 0;
    lp_status status = lp_weights_add_file(weights, path, &fi, err);
    if (status != LP_OK)
        return status;
    const lp_mapped_file *map = &weights->files[fi];
    const char *file = lp_path_basename(map->path);
    layout lay = {0};
    if ((status = read_header(map, &lay, err)) != LP_OK)
        return status;
    table tables[] = {
        {"token_embedding_table", LP_ROLE_TOKEN_EMBD, false, false, lay.vocab, lay.dim},
        {"rms_att_weight", LP_ROLE_ATTN_NORM, true, false, lay.dim, 0},
        {"wq", LP_ROLE_ATTN_Q, true, false, lay.dim, lay.dim},
        {"wk", LP_ROLE_ATTN_K, true, false, lay.kv_dim, lay.dim},
        {"wv", LP_ROLE_ATTN_V, true, false, lay.kv_dim, lay.dim},
        {"wo", LP_ROLE_ATTN_O, true, false, lay.dim, lay.dim},
        {"rms_ffn_weight", LP_ROLE_FFN_NORM, true, false, lay.dim, 0},
        {"w1", LP_ROLE_FFN_GATE, true, false, lay.hidden_dim, lay.dim},
        {"w2", LP_ROLE_FFN_DOWN, true, false, lay.dim, lay.hidden_dim},
        {"w3", LP_ROLE_FFN_UP, true, false, lay.hidden_dim, lay.dim},
        {"rms_final_weight", LP_ROLE_OUTPUT_NORM, false, false, lay.dim, 0},
        {"freq_cis_real", LP_ROLE_ROPE_FREQS, false, true, lay.seq_len, lay.head_dim / 2},
        {"freq_cis_imag", LP_ROLE_ROPE_FREQS, false, true, lay.seq_len, lay.head_dim / 2},
        {"wcls", LP_ROLE_LM_HEAD, false, lay.shared_classifier, lay.vocab, lay.dim},
    };
    const size_t n_tables = sizeof tables / sizeof tables[0];
    /* First pass: the whole layout must fit the file exactly, before anything is added. */
    uint64_t offset = HEADER_BYTES;
    for (int pass = 0; pass < 2; pass++) {
        offset = HEADER_BYTES;
        for (size_t i = 0; i < n_tables; i++) {
            const table *tb = &tables[i];
            if (tb->skipped && tb->role == LP_ROLE_LM_HEAD)
                continue; /* shared classifier: not stored */
            uint64_t elems, bytes, layer_bytes;
            uint64_t n_stack = tb->per_layer ? (uint64_t)lay.n_layers : 1;
            if (!lp_mul_u64((uint64_t)tb->rows, tb->cols ? (uint64_t)tb->cols : 1, &elems) ||
                !lp_mul_u64(elems, 4, &layer_bytes) ||
                !lp_mul_u64(layer_bytes, n_stack, &bytes) || !lp_add_u64(offset, bytes, &bytes))
                return lp_error_set(err, LP_ERR_FORMAT,
                                    "%s: size of table %s overflows 64 bits (header dims too "
                                    "large)",
                                    file, tb->name);
            if (pass == 0 && bytes > map->size)
                return lp_error_set(err, LP_ERR_FORMAT,
                                    "%s: table %s [%" PRIu64 " x %" PRId64 " x %" PRId64
                                    "] at byte %" PRIu64
                                    " runs past the end of the file (%zu bytes)",
                                    file, tb->name, n_stack, tb->rows, tb->cols ? tb->cols : 1,
                                    offset, map->size);
            if (pass == 1 && !tb->skipped) {
                for (uint64_t l = 0; l < n_stack; l++) {
                    char name[64];
                    if (tb->per_layer)
                        snprintf(name, sizeof name, "layers.%" PRIu64 ".%s", l, tb->name);
                    else
                        snprintf(name, sizeof name, "%s", tb->name);
                    lp_tensor t = {0};
                    t.name = name;
                    t.dtype = LP_DTYPE_F32;
                    t.n_dims = tb->cols ? 2 : 1;
                    t.shape[0] = tb->rows;
                    t.shape[1] = tb->cols;
                    t.n_elements = (int64_t)elems;
                    t.n_bytes = layer_bytes;
                    t.file_index = fi;
                    t.file_offset = offset + l * layer_bytes;
                    t.data = map->data + t.file_offset;
                    if ((status = lp_weights_add_tensor(weights, &t, err)) != LP_OK)
                        return status;
                }
            }
            offset = bytes;
        }
        if (pass == 0 && offset != map->size)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: the header's layout ends at byte %" PRIu64
                                " but the file has %zu bytes (%s classifier: vocab_size %s0)",
                                file, offset, map->size,
                                lay.shared_classifier ? "shared" : "unshared",
                                lay.shared_classifier ? ">" : "<");
    }
    return LP_OK;
}
