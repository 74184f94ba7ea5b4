/* llama2.c checkpoint reader: the legacy "version 0" format run.c reads, and export.py's
 * version 1 (float32, 256-byte header) and version 2 (int8 in groups, runq.c). Validates the header
 * against the file size and exposes the stacked tables one layer at a time.
 *
 * Byte layout of version 0 (little-endian; float32 tensors back to back, each row-major
 * [out, in]):
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
 * Versions 1 and 2 (export.py --version 1|2):
 *
 *   offset 0   uint32 magic 0x616b3432 ("ak42" as a little-endian number: bytes "24ka")
 *   4          int32 version (1 or 2)
 *   8          7 x int32 as above, vocab_size positive
 *   36         uint8 shared_classifier (1: wcls is the embedding and is not stored)
 *   37         version 2 only: int32 group_size (unaligned)
 *   ..256      zero padding
 *   256        rms_att_weight [n_layers, dim], rms_ffn_weight [n_layers, dim], rms_final_weight
 *              [dim] (float32), then token_embedding_table, wq, wk, wv, wo, w1, w2, w3 (each of
 *              all layers, shapes as above), then wcls when not shared. No RoPE tables.
 *
 * Version 1 stores those matrices as float32. Version 2 stores each matrix of each layer as
 * n int8 codes immediately followed by n / group_size float32 scales (symmetric, value =
 * code * scale, groups run over the flattened matrix, so a group may straddle rows when the row
 * length is not a multiple of group_size). Loupe has no dtype for that layout: version 2 matrices
 * are exposed as dtype i8 over the codes alone (n_bytes = n; the scales follow at
 * data + n_bytes), so inspect lists and counts them honestly, --stats describes the codes, and
 * the forward pass refuses them (it computes with float and GGUF block types only).
 *
 * Its tokenizer.bin (int32 max_token_length, then per token float32 score, int32 len, len bytes)
 * is read by inspect/tokenizer/tokenizer.c; lp_llama2c_is_tokenizer() only recognizes one, so that a
 * tokenizer given where a checkpoint is expected gets a clear error.
 *
 * q/k rows are in Meta's original order: RoPE rotates adjacent pairs (2i, 2i+1).
 * The file must end exactly after the last table; trailing bytes are an error, because an
 * unshared classifier behind a positive vocab_size would otherwise go unnoticed.
 */
#include "inspect/weights/weights_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"

#define V0_HEADER_BYTES 28
#define V1_HEADER_BYTES 256
#define MAGIC 0x616b3432u
#define SHARED_FLAG_AT 36
#define GROUP_SIZE_AT 37

typedef struct layout {
    int version;  /* 0 (legacy), 1 (float32) or 2 (int8 groups) */
    uint64_t header_bytes;
    int64_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab, seq_len;
    bool shared_classifier;
    int64_t group_size; /* version 2 only */
    int64_t head_dim, kv_dim;
} layout;

static lp_status read_header(const lp_mapped_file *map, layout *lay, lp_error *err)
{
    const char *file = lp_path_basename(map->path);
    size_t fields_at = 0;
    lay->version = 0;
    lay->header_bytes = V0_HEADER_BYTES;
    if (map->size >= 4 && lp_load_u32(map->data) == MAGIC) {
        if (map->size < V1_HEADER_BYTES)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: file is %zu bytes, too short for the 256-byte llama2.c "
                                "version 1/2 header",
                                file, map->size);
        int32_t version = lp_load_i32(map->data + 4);
        if (version != 1 && version != 2)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: header field version at byte 4 is %" PRId32
                                ", llama2.c export versions are 1 and 2 (0 has no magic)",
                                file, version);
        lay->version = version;
        lay->header_bytes = V1_HEADER_BYTES;
        fields_at = 8;
    } else if (map->size < V0_HEADER_BYTES) {
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: file is %zu bytes, too short for the 28-byte llama2.c header",
                            file, map->size);
    }
    static const char *const fields[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                          "n_kv_heads", "vocab_size", "seq_len"};
    int32_t v[7];
    for (int i = 0; i < 7; i++)
        v[i] = lp_load_i32(map->data + fields_at + 4 * (size_t)i);
    for (int i = 0; i < 7; i++) {
        /* legacy only: a negative vocab_size says the classifier is not shared */
        if (lay->version == 0 && i == 5 && v[i] < 0 && v[i] != INT32_MIN)
            continue;
        if (v[i] <= 0)
            return lp_error_set(err, LP_ERR_FORMAT, "%s: header field %s at byte %zu is %" PRId32
                                ", must be positive", file, fields[i], fields_at + 4 * (size_t)i,
                                v[i]);
    }
    lay->dim = v[0];
    lay->hidden_dim = v[1];
    lay->n_layers = v[2];
    lay->n_heads = v[3];
    lay->n_kv_heads = v[4];
    lay->vocab = v[5] > 0 ? v[5] : -(int64_t)v[5];
    lay->seq_len = v[6];
    if (lay->version == 0) {
        lay->shared_classifier = v[5] > 0;
    } else {
        uint8_t flag = map->data[SHARED_FLAG_AT];
        if (flag > 1)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: header field shared_classifier at byte %d is %u, must be 0 "
                                "or 1",
                                file, SHARED_FLAG_AT, (unsigned)flag);
        lay->shared_classifier = flag == 1;
    }
    if (lay->n_layers > LP_MAX_LAYERS)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: header n_layers %" PRId64 " at byte %zu exceeds the limit of %d",
                            file, lay->n_layers, fields_at + 8, LP_MAX_LAYERS);
    if (lay->dim % lay->n_heads != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header n_heads %" PRId64 " at byte %zu does not divide dim %"
                            PRId64,
                            file, lay->n_heads, fields_at + 12, lay->dim);
    if (lay->n_kv_heads > lay->n_heads || lay->n_heads % lay->n_kv_heads != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header n_kv_heads %" PRId64 " at byte %zu does not divide "
                            "n_heads %" PRId64,
                            file, lay->n_kv_heads, fields_at + 16, lay->n_heads);
    lay->head_dim = lay->dim / lay->n_heads;
    lay->kv_dim = lay->head_dim * lay->n_kv_heads;
    if (lay->version == 2) {
        /* Every quantized matrix has dim as a factor, so a group_size dividing dim divides each
         * matrix's element count (export.py halves group_size until it divides dim). */
        int32_t gs = lp_load_i32(map->data + GROUP_SIZE_AT);
        if (gs <= 0 || lay->dim % gs != 0)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: header field group_size at byte %d is %" PRId32
                                ", must be positive and divide dim %" PRId64,
                                file, GROUP_SIZE_AT, gs, lay->dim);
        lay->group_size = gs;
    }
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
    bool skipped;        /* stored but not exposed (legacy RoPE tables) */
    bool matrix;         /* int8 groups in version 2 */
    int64_t rows, cols;  /* one layer's [rows, cols] (cols 0: a vector of `rows`) */
} table;

#define MAX_TABLES 14

/* The tables in file order for the header's version; returns how many. */
static size_t file_tables(const layout *lay, table out[MAX_TABLES])
{
    const table emb = {"token_embedding_table", LP_ROLE_TOKEN_EMBD, false, false, true,
                       lay->vocab, lay->dim};
    const table att_norm = {"rms_att_weight", LP_ROLE_ATTN_NORM, true, false, false, lay->dim, 0};
    const table ffn_norm = {"rms_ffn_weight", LP_ROLE_FFN_NORM, true, false, false, lay->dim, 0};
    const table final_norm = {"rms_final_weight", LP_ROLE_OUTPUT_NORM, false, false, false,
                              lay->dim, 0};
    const table attn[4] = {
        {"wq", LP_ROLE_ATTN_Q, true, false, true, lay->dim, lay->dim},
        {"wk", LP_ROLE_ATTN_K, true, false, true, lay->kv_dim, lay->dim},
        {"wv", LP_ROLE_ATTN_V, true, false, true, lay->kv_dim, lay->dim},
        {"wo", LP_ROLE_ATTN_O, true, false, true, lay->dim, lay->dim},
    };
    const table ffn[3] = {
        {"w1", LP_ROLE_FFN_GATE, true, false, true, lay->hidden_dim, lay->dim},
        {"w2", LP_ROLE_FFN_DOWN, true, false, true, lay->dim, lay->hidden_dim},
        {"w3", LP_ROLE_FFN_UP, true, false, true, lay->hidden_dim, lay->dim},
    };
    const table rope[2] = {
        {"freq_cis_real", LP_ROLE_ROPE_FREQS, false, true, false, lay->seq_len, lay->head_dim / 2},
        {"freq_cis_imag", LP_ROLE_ROPE_FREQS, false, true, false, lay->seq_len, lay->head_dim / 2},
    };
    const table cls = {"wcls", LP_ROLE_LM_HEAD, false, false, true, lay->vocab, lay->dim};
    size_t n = 0;
    if (lay->version == 0) {
        out[n++] = emb;
        out[n++] = att_norm;
        for (int i = 0; i < 4; i++)
            out[n++] = attn[i];
        out[n++] = ffn_norm;
        for (int i = 0; i < 3; i++)
            out[n++] = ffn[i];
        out[n++] = final_norm;
        out[n++] = rope[0];
        out[n++] = rope[1];
    } else {
        out[n++] = att_norm;
        out[n++] = ffn_norm;
        out[n++] = final_norm;
        out[n++] = emb;
        for (int i = 0; i < 4; i++)
            out[n++] = attn[i];
        for (int i = 0; i < 3; i++)
            out[n++] = ffn[i];
    }
    if (!lay->shared_classifier)
        out[n++] = cls;
    return n;
}

static const char *version_name(int version)
{
    return version == 0 ? "legacy (version 0)" : version == 1 ? "version 1" : "version 2";
}

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
    table tables[MAX_TABLES];
    const size_t n_tables = file_tables(&lay, tables);
    /* First pass: the whole layout must fit the file exactly, before anything is added. */
    uint64_t offset = lay.header_bytes;
    for (int pass = 0; pass < 2; pass++) {
        offset = lay.header_bytes;
        for (size_t i = 0; i < n_tables; i++) {
            const table *tb = &tables[i];
            bool quantized = lay.version == 2 && tb->matrix;
            /* data_bytes: what the exposed tensor covers; layer_bytes: one layer's stride */
            uint64_t elems, data_bytes, layer_bytes, bytes;
            uint64_t n_stack = tb->per_layer ? (uint64_t)lay.n_layers : 1;
            bool ok = lp_mul_u64((uint64_t)tb->rows, tb->cols ? (uint64_t)tb->cols : 1, &elems);
            if (ok && quantized) {
                data_bytes = elems; /* int8 codes, then one float32 scale per group */
                ok = lp_add_u64(elems, elems / (uint64_t)lay.group_size * 4, &layer_bytes);
            } else if (ok) {
                ok = lp_mul_u64(elems, 4, &data_bytes);
                layer_bytes = data_bytes;
            }
            if (!ok || !lp_mul_u64(layer_bytes, n_stack, &bytes) ||
                !lp_add_u64(offset, bytes, &bytes))
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
                    t.dtype = quantized ? LP_DTYPE_I8 : LP_DTYPE_F32;
                    t.n_dims = tb->cols ? 2 : 1;
                    t.shape[0] = tb->rows;
                    t.shape[1] = tb->cols;
                    t.n_elements = (int64_t)elems;
                    t.n_bytes = data_bytes;
                    t.file_index = fi;
                    t.file_offset = offset + l * layer_bytes;
                    t.data = map->data + t.file_offset;
                    if ((status = lp_weights_add_tensor(weights, &t, err)) != LP_OK)
                        return status;
                }
            }
            offset = bytes;
        }
        if (pass == 0 && offset != map->size) {
            if (lay.version == 0)
                return lp_error_set(err, LP_ERR_FORMAT,
                                    "%s: the header's layout ends at byte %" PRIu64
                                    " but the file has %zu bytes (%s classifier: vocab_size %s0)",
                                    file, offset, map->size,
                                    lay.shared_classifier ? "shared" : "unshared",
                                    lay.shared_classifier ? ">" : "<");
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: the %s header's layout ends at byte %" PRIu64
                                " but the file has %zu bytes (shared_classifier %d)",
                                file, version_name(lay.version), offset, map->size,
                                lay.shared_classifier ? 1 : 0);
        }
    }
    return LP_OK;
}
