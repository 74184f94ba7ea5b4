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
 * is read by inspect/tokenizer/from_llama2c.c; lp_llama2c_is_tokenizer() here recognizes one, for
 * the format detector and so that a tokenizer given where a checkpoint is expected gets a clear
 * error.
 *
 * q/k rows are in Meta's original order: RoPE rotates adjacent pairs (2i, 2i+1).
 * The file must end exactly after the last table; trailing bytes are an error, because an
 * unshared classifier behind a positive vocab_size would otherwise go unnoticed. This is the one
 * parser of the header: the catalogue (lp_llama2c_read) and the model description
 * (lp_arch_from_llama2c) both read it here.
 */
#include "inspect/formats/formats_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/checked.h"

#define V0_HEADER_BYTES 28
#define V1_HEADER_BYTES 256
#define MAGIC 0x616b3432u
#define SHARED_FLAG_AT 36
#define GROUP_SIZE_AT 37
#define TOKENIZER_MAX_TOKEN_LEN 65536

/* ---- the header ------------------------------------------------------------------------------ */

/* llama2.c files have no magic number (the legacy ones): rule out the formats that do, so that a
 * stray pytorch_model.bin or a text file gets a message that says what it is. */
static lp_status refuse_other_format(const uint8_t *data, size_t size, const char *name,
                                     lp_error *err)
{
    /* pytorch_model.bin: a zip archive (torch.save since 1.6) or a bare pickle (protocol 2-5) */
    if ((size >= 4 && memcmp(data, "PK\x03\x04", 4) == 0) ||
        (size >= 2 && data[0] == 0x80 && data[1] >= 2 && data[1] <= 5))
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: a PyTorch checkpoint (zip/pickle), not a llama2.c .bin; loupe "
                            "reads safetensors, GGUF and llama2.c (convert it to safetensors)",
                            name);
    const char *other = NULL;
    if (size >= 4 && memcmp(data, "GGUF", 4) == 0)
        other = "a GGUF file";
    else if (size >= 1 && data[0] == '{')
        other = "JSON text";
    /* Header fields are small int32s, so a real header has zero bytes; text has none. */
    size_t n = size < V0_HEADER_BYTES ? size : V0_HEADER_BYTES;
    bool text = n > 0;
    for (size_t i = 0; i < n && text; i++)
        text = data[i] >= 0x20 || data[i] == '\n' || data[i] == '\r' || data[i] == '\t';
    if (!other && text)
        other = "text";
    if (other)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: this is %s, not a llama2.c checkpoint", name,
                            other);
    return LP_OK;
}

/* The magic and version (1, 2) or the legacy layout (0); *fields_at is where the seven int32
 * fields start. */
static lp_status read_version(const uint8_t *data, size_t size, const char *name,
                              lp_llama2c_header *h, size_t *fields_at, lp_error *err)
{
    h->version = 0;
    h->header_bytes = V0_HEADER_BYTES;
    *fields_at = 0;
    if (size >= 4 && lp_load_u32(data) == MAGIC) {
        if (size < V1_HEADER_BYTES)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: file is %zu bytes, too short for the 256-byte llama2.c "
                                "version 1/2 header",
                                name, size);
        int32_t version = lp_load_i32(data + 4);
        if (version != 1 && version != 2)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: header field version at byte 4 is %" PRId32
                                ", llama2.c export versions are 1 and 2 (0 has no magic)",
                                name, version);
        h->version = version;
        h->header_bytes = V1_HEADER_BYTES;
        *fields_at = 8;
    } else if (size < V0_HEADER_BYTES) {
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: file is %zu bytes, too short for the 28-byte llama2.c header",
                            name, size);
    }
    return LP_OK;
}

/* The seven int32 fields, each positive (legacy vocab_size may be negative: the classifier is
 * then not shared), and the shared-classifier flag of versions 1 and 2. */
static lp_status read_fields(const uint8_t *data, const char *name, size_t fields_at,
                             lp_llama2c_header *h, lp_error *err)
{
    static const char *const fields[7] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                          "n_kv_heads", "vocab_size", "seq_len"};
    int32_t v[7];
    for (int i = 0; i < 7; i++) {
        v[i] = lp_load_i32(data + fields_at + 4 * (size_t)i);
        if (h->version == 0 && i == 5 && v[i] < 0 && v[i] != INT32_MIN)
            continue;
        if (v[i] <= 0)
            return lp_error_set(err, LP_ERR_FORMAT, "%s: header field %s at byte %zu is %" PRId32
                                ", must be positive", name, fields[i], fields_at + 4 * (size_t)i,
                                v[i]);
    }
    h->dim = v[0];
    h->hidden_dim = v[1];
    h->n_layers = v[2];
    h->n_heads = v[3];
    h->n_kv_heads = v[4];
    h->vocab_size = v[5] > 0 ? v[5] : -(int64_t)v[5];
    h->seq_len = v[6];
    h->shared_classifier = v[5] > 0;
    if (h->version > 0) {
        uint8_t flag = data[SHARED_FLAG_AT];
        if (flag > 1)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: header field shared_classifier at byte %d is %u, must be 0 "
                                "or 1",
                                name, SHARED_FLAG_AT, (unsigned)flag);
        h->shared_classifier = flag == 1;
    }
    return LP_OK;
}

/* Heads must divide dim and kv heads must divide heads; version 2's group size must divide dim. */
static lp_status check_dims(const uint8_t *data, const char *name, size_t fields_at,
                            lp_llama2c_header *h, lp_error *err)
{
    if (h->dim % h->n_heads != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header n_heads %" PRId64 " at byte %zu does not divide dim %"
                            PRId64,
                            name, h->n_heads, fields_at + 12, h->dim);
    if (h->n_kv_heads > h->n_heads || h->n_heads % h->n_kv_heads != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header n_kv_heads %" PRId64 " at byte %zu does not divide "
                            "n_heads %" PRId64,
                            name, h->n_kv_heads, fields_at + 16, h->n_heads);
    h->head_dim = h->dim / h->n_heads;
    h->kv_dim = h->head_dim * h->n_kv_heads;
    h->group_size = 0;
    if (h->version == 2) {
        /* Every quantized matrix has dim as a factor, so a group_size dividing dim divides each
         * matrix's element count (export.py halves group_size until it divides dim). */
        int32_t gs = lp_load_i32(data + GROUP_SIZE_AT);
        if (gs <= 0 || h->dim % gs != 0)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: header field group_size at byte %d is %" PRId32
                                ", must be positive and divide dim %" PRId64,
                                name, GROUP_SIZE_AT, gs, h->dim);
        h->group_size = gs;
    }
    return LP_OK;
}

/* ---- the tables ------------------------------------------------------------------------------ */

typedef struct table {
    const char *name;
    bool per_layer;
    bool skipped;        /* stored but not exposed (legacy RoPE tables) */
    bool matrix;         /* int8 groups in version 2 */
    int64_t rows, cols;  /* one layer's [rows, cols] (cols 0: a vector of `rows`) */
} table;

#define MAX_TABLES 14

/* The tables in file order for the header's version; returns how many. */
static size_t file_tables(const lp_llama2c_header *h, table out[MAX_TABLES])
{
    const table emb = {"token_embedding_table", false, false, true, h->vocab_size, h->dim};
    const table att_norm = {"rms_att_weight", true, false, false, h->dim, 0};
    const table ffn_norm = {"rms_ffn_weight", true, false, false, h->dim, 0};
    const table final_norm = {"rms_final_weight", false, false, false, h->dim, 0};
    const table attn[4] = {
        {"wq", true, false, true, h->dim, h->dim},
        {"wk", true, false, true, h->kv_dim, h->dim},
        {"wv", true, false, true, h->kv_dim, h->dim},
        {"wo", true, false, true, h->dim, h->dim},
    };
    const table ffn[3] = {
        {"w1", true, false, true, h->hidden_dim, h->dim},
        {"w2", true, false, true, h->dim, h->hidden_dim},
        {"w3", true, false, true, h->hidden_dim, h->dim},
    };
    const table rope = {"freq_cis_real", false, true, false, h->seq_len, h->head_dim / 2};
    const table cls = {"wcls", false, false, true, h->vocab_size, h->dim};
    size_t n = 0;
    if (h->version == 0) {
        out[n++] = emb;
        out[n++] = att_norm;
        for (int i = 0; i < 4; i++)
            out[n++] = attn[i];
        out[n++] = ffn_norm;
        for (int i = 0; i < 3; i++)
            out[n++] = ffn[i];
        out[n++] = final_norm;
        out[n++] = rope;
        out[n] = rope;
        out[n++].name = "freq_cis_imag";
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
    if (!h->shared_classifier)
        out[n++] = cls;
    return n;
}

/* Sizes of one table: elements of one layer, the bytes the exposed tensor covers, one layer's
 * stride and the end of the whole stack from offset. False on a 64-bit overflow. */
typedef struct table_size {
    uint64_t elems, data_bytes, layer_bytes, n_stack, end;
    bool quantized;
} table_size;

static bool size_table(const lp_llama2c_header *h, const table *tb, uint64_t offset,
                       table_size *s)
{
    *s = (table_size){0};
    s->quantized = h->version == 2 && tb->matrix;
    s->n_stack = tb->per_layer ? (uint64_t)h->n_layers : 1;
    if (!lp_mul_u64((uint64_t)tb->rows, tb->cols ? (uint64_t)tb->cols : 1, &s->elems))
        return false;
    if (s->quantized) {
        s->data_bytes = s->elems; /* int8 codes, then one float32 scale per group */
        if (!lp_add_u64(s->elems, s->elems / (uint64_t)h->group_size * 4, &s->layer_bytes))
            return false;
    } else {
        if (!lp_mul_u64(s->elems, 4, &s->data_bytes))
            return false;
        s->layer_bytes = s->data_bytes;
    }
    return lp_mul_u64(s->layer_bytes, s->n_stack, &s->end) && lp_add_u64(offset, s->end, &s->end);
}

static const char *version_name(int version)
{
    return version == 0 ? "legacy (version 0)" : version == 1 ? "version 1" : "version 2";
}

/* The tables must fill the file exactly: each inside it, the last ending at its end. Sizes are
 * checked for overflow over the whole layout first, so that absurd header dims are called that
 * rather than a table running past a small file. */
static lp_status check_layout(const lp_llama2c_header *h, size_t size, const char *name,
                              lp_error *err)
{
    table tables[MAX_TABLES];
    const size_t n_tables = file_tables(h, tables);
    table_size s;
    uint64_t offset = h->header_bytes;
    for (size_t i = 0; i < n_tables; i++, offset = s.end)
        if (!size_table(h, &tables[i], offset, &s))
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: size of table %s overflows 64 bits (header dims too large)",
                                name, tables[i].name);
    offset = h->header_bytes;
    for (size_t i = 0; i < n_tables; i++, offset = s.end) {
        const table *tb = &tables[i];
        size_table(h, tb, offset, &s);
        if (s.end > size)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: table %s [%" PRIu64 " x %" PRId64 " x %" PRId64
                                "] at byte %" PRIu64 " runs past the end of the file (%zu bytes)",
                                name, tb->name, s.n_stack, tb->rows, tb->cols ? tb->cols : 1,
                                offset, size);
    }
    if (offset == size)
        return LP_OK;
    if (h->version == 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: the header's layout ends at byte %" PRIu64
                            " but the file has %zu bytes (%s classifier: vocab_size %s0)",
                            name, offset, size, h->shared_classifier ? "shared" : "unshared",
                            h->shared_classifier ? ">" : "<");
    return lp_error_set(err, LP_ERR_FORMAT,
                        "%s: the %s header's layout ends at byte %" PRIu64
                        " but the file has %zu bytes (shared_classifier %d)",
                        name, version_name(h->version), offset, size,
                        h->shared_classifier ? 1 : 0);
}

lp_status lp_llama2c_read_header(const uint8_t *data, size_t size, const char *name,
                                 lp_llama2c_header *out, lp_error *err)
{
    memset(out, 0, sizeof *out);
    size_t fields_at = 0;
    lp_status st;
    if ((st = refuse_other_format(data, size, name, err)) != LP_OK ||
        (st = read_version(data, size, name, out, &fields_at, err)) != LP_OK ||
        (st = read_fields(data, name, fields_at, out, err)) != LP_OK ||
        (st = check_dims(data, name, fields_at, out, err)) != LP_OK)
        return st;
    return check_layout(out, size, name, err);
}

/* One table's tensors, one per layer when it is stacked. */
static lp_status emit_table(const table *tb, const table_size *s, const uint8_t *data,
                            uint64_t offset, const lp_tensor_sink *sink, lp_error *err)
{
    for (uint64_t l = 0; l < s->n_stack; l++) {
        char name[64];
        if (tb->per_layer)
            snprintf(name, sizeof name, "layers.%" PRIu64 ".%s", l, tb->name);
        else
            snprintf(name, sizeof name, "%s", tb->name);
        lp_tensor_desc t = {0};
        t.name = name;
        t.dtype = s->quantized ? LP_DTYPE_I8 : LP_DTYPE_F32;
        t.n_dims = tb->cols ? 2 : 1;
        t.shape[0] = tb->rows;
        t.shape[1] = tb->cols;
        t.n_elements = (int64_t)s->elems;
        t.n_bytes = s->data_bytes;
        t.file_offset = offset + l * s->layer_bytes;
        t.data = data + t.file_offset;
        lp_status st = sink->add(sink->ctx, &t, err);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

lp_status lp_llama2c_read(const uint8_t *data, size_t size, const char *name,
                          const lp_tensor_sink *sink, lp_error *err)
{
    lp_llama2c_header h;
    lp_status st = lp_llama2c_read_header(data, size, name, &h, err);
    if (st != LP_OK)
        return st;
    table tables[MAX_TABLES];
    const size_t n_tables = file_tables(&h, tables);
    uint64_t offset = h.header_bytes;
    for (size_t i = 0; i < n_tables; i++) {
        table_size s;
        size_table(&h, &tables[i], offset, &s); /* checked by lp_llama2c_read_header */
        if (!tables[i].skipped &&
            (st = emit_table(&tables[i], &s, data, offset, sink, err)) != LP_OK)
            return st;
        offset = s.end;
    }
    return LP_OK;
}

/* ---- tokenizer.bin --------------------------------------------------------------------------- */

bool lp_llama2c_is_tokenizer(const uint8_t *data, size_t size, int64_t *n_tokens)
{
    if (size < 4 + 8)
        return false;
    int32_t max_len = lp_load_i32(data);
    if (max_len <= 0 || max_len > TOKENIZER_MAX_TOKEN_LEN)
        return false;
    /* every record must fit and the last one must end exactly at the end of the file */
    size_t pos = 4;
    int64_t n = 0;
    while (pos < size) {
        if (size - pos < 8)
            return false;
        float score = lp_load_f32(data + pos);
        int32_t len = lp_load_i32(data + pos + 4);
        if (!isfinite(score) || len < 0 || len > max_len || (size_t)len > size - pos - 8)
            return false;
        pos += 8 + (size_t)len;
        n++;
    }
    if (n_tokens)
        *n_tokens = n;
    return true;
}
