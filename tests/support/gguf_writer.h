/* A tiny GGUF writer for tests: build valid files in memory, then corrupt them on purpose.
 *
 *   lp_gw w;
 *   lp_gw_init(&w, 3);                                   // GGUF version 2 or 3
 *   lp_gw_kv_str(&w, "general.architecture", "llama");
 *   lp_gw_kv_u32(&w, "llama.block_count", 2);
 *   const char *tokens[] = {"<unk>", "<s>", "</s>"};
 *   lp_gw_kv_arr_str(&w, "tokenizer.ggml.tokens", tokens, 3);
 *   int64_t ne[2] = {64, 512};                           // GGUF order: ne[0] is the row length
 *   lp_gw_tensor(&w, "token_embd.weight", 2, ne, 0, data, 64 * 512 * 4);  // ggml type id 0 = F32
 *   if (!lp_gw_finish(&w)) ...                           // allocation failed
 *   ... w.file.data[0 .. w.file.len) is the file; lp_gw_write(&w, path) saves it ...
 *   lp_gw_free(&w);
 *
 * After lp_gw_finish, the byte offsets of every field are recorded so tests can patch them:
 * w.count_pos[0] (tensor count), w.count_pos[1] (kv count), w.kv_pos[i] (key length field of
 * kv i), w.kv_value_pos[i] (its value: for arrays the element type field), and per tensor
 * w.tensors[i].info_pos / n_dims_pos / ne_pos / type_pos / offset_pos. lp_gw_put_u32/u64 patch
 * little-endian values in place. Metadata goes in before tensors (lp_gw_kv_* after the first
 * lp_gw_tensor is still fine: tensor infos are written at finish). Alignment is taken from a
 * "general.alignment" u32 written with lp_gw_kv_u32 (default 32); set w.alignment directly to
 * lay out data with a different alignment than the one declared.
 *
 * Everything is static inline over core's lp_bytes: include it in any test that links lp_core.
 */
#ifndef LP_TESTS_GGUF_WRITER_H
#define LP_TESTS_GGUF_WRITER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"

#define LP_GW_MAX_TENSORS 256
#define LP_GW_MAX_KVS 256

typedef struct lp_gw_tensor_rec {
    char name[128];
    uint32_t n_dims;
    int64_t ne[4];
    uint32_t type;
    const void *data; /* borrowed until lp_gw_finish */
    size_t n_bytes;
    /* filled by lp_gw_finish */
    size_t info_pos, n_dims_pos, ne_pos, type_pos, offset_pos;
    uint64_t rel_offset; /* relative to the data section */
    size_t data_pos;     /* absolute */
} lp_gw_tensor_rec;

typedef struct lp_gw {
    lp_bytes file; /* the file so far (sticky failure) */
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    size_t count_pos[2];
    size_t kv_pos[LP_GW_MAX_KVS];
    size_t kv_value_pos[LP_GW_MAX_KVS];
    int n_tensors;
    lp_gw_tensor_rec tensors[LP_GW_MAX_TENSORS];
    size_t data_start;
} lp_gw;

static inline void lp_gw_bytes(lp_gw *w, const void *p, size_t n)
{
    lp_bytes_append(&w->file, p, n);
}

static inline void lp_gw_u8(lp_gw *w, uint8_t v) { lp_gw_bytes(w, &v, 1); }
static inline void lp_gw_u32(lp_gw *w, uint32_t v) { lp_gw_bytes(w, &v, 4); }
static inline void lp_gw_u64(lp_gw *w, uint64_t v) { lp_gw_bytes(w, &v, 8); }
static inline void lp_gw_f32(lp_gw *w, float v) { lp_gw_bytes(w, &v, 4); }

/* Patch a value already written (little-endian hosts only, like the reader's tests). */
static inline void lp_gw_put_u32(lp_gw *w, size_t pos, uint32_t v)
{
    if (pos + 4 <= w->file.len)
        memcpy(w->file.data + pos, &v, 4);
}
static inline void lp_gw_put_u64(lp_gw *w, size_t pos, uint64_t v)
{
    if (pos + 8 <= w->file.len)
        memcpy(w->file.data + pos, &v, 8);
}

static inline void lp_gw_str(lp_gw *w, const char *s)
{
    size_t n = strlen(s);
    lp_gw_u64(w, n);
    lp_gw_bytes(w, s, n);
}

static inline void lp_gw_init(lp_gw *w, uint32_t version)
{
    memset(w, 0, sizeof *w);
    w->version = version;
    w->alignment = 32;
    lp_gw_bytes(w, "GGUF", 4);
    lp_gw_u32(w, version);
    w->count_pos[0] = w->file.len;
    lp_gw_u64(w, 0); /* tensor count, patched at finish */
    w->count_pos[1] = w->file.len;
    lp_gw_u64(w, 0); /* kv count */
}

/* Start a key/value: writes the key and the type id; the caller writes the value. */
static inline void lp_gw_key(lp_gw *w, const char *key, uint32_t type)
{
    if (w->n_kv < LP_GW_MAX_KVS)
        w->kv_pos[w->n_kv] = w->file.len;
    lp_gw_str(w, key);
    lp_gw_u32(w, type);
    if (w->n_kv < LP_GW_MAX_KVS)
        w->kv_value_pos[w->n_kv] = w->file.len;
    w->n_kv++;
}

/* GGUF value type ids (same numbers as lp_gguf_type). */
enum {
    LP_GW_UINT8 = 0, LP_GW_INT8, LP_GW_UINT16, LP_GW_INT16, LP_GW_UINT32, LP_GW_INT32,
    LP_GW_FLOAT32, LP_GW_BOOL, LP_GW_STRING, LP_GW_ARRAY, LP_GW_UINT64, LP_GW_INT64, LP_GW_FLOAT64
};

static inline void lp_gw_kv_u32(lp_gw *w, const char *key, uint32_t v)
{
    lp_gw_key(w, key, LP_GW_UINT32);
    lp_gw_u32(w, v);
    if (strcmp(key, "general.alignment") == 0 && v != 0 && (v & (v - 1)) == 0)
        w->alignment = v;
}
static inline void lp_gw_kv_i32(lp_gw *w, const char *key, int32_t v)
{
    lp_gw_key(w, key, LP_GW_INT32);
    lp_gw_bytes(w, &v, 4);
}
static inline void lp_gw_kv_u64(lp_gw *w, const char *key, uint64_t v)
{
    lp_gw_key(w, key, LP_GW_UINT64);
    lp_gw_u64(w, v);
}
static inline void lp_gw_kv_f32(lp_gw *w, const char *key, float v)
{
    lp_gw_key(w, key, LP_GW_FLOAT32);
    lp_gw_f32(w, v);
}
static inline void lp_gw_kv_f64(lp_gw *w, const char *key, double v)
{
    lp_gw_key(w, key, LP_GW_FLOAT64);
    lp_gw_bytes(w, &v, 8);
}
static inline void lp_gw_kv_bool(lp_gw *w, const char *key, bool v)
{
    lp_gw_key(w, key, LP_GW_BOOL);
    lp_gw_u8(w, v ? 1 : 0);
}
static inline void lp_gw_kv_str(lp_gw *w, const char *key, const char *v)
{
    lp_gw_key(w, key, LP_GW_STRING);
    lp_gw_str(w, v);
}
static inline void lp_gw_kv_arr_str(lp_gw *w, const char *key, const char *const *v, uint64_t n)
{
    lp_gw_key(w, key, LP_GW_ARRAY);
    lp_gw_u32(w, LP_GW_STRING);
    lp_gw_u64(w, n);
    for (uint64_t i = 0; i < n; i++)
        lp_gw_str(w, v[i]);
}
/* An array of n fixed-size little-endian elements of the given GGUF type, copied as they are. */
static inline void lp_gw_kv_arr_raw(lp_gw *w, const char *key, uint32_t type, const void *v,
                                    uint64_t n, uint64_t elem_bytes)
{
    lp_gw_key(w, key, LP_GW_ARRAY);
    lp_gw_u32(w, type);
    lp_gw_u64(w, n);
    lp_gw_bytes(w, v, (size_t)(n * elem_bytes));
}
static inline void lp_gw_kv_arr_i32(lp_gw *w, const char *key, const int32_t *v, uint64_t n)
{
    lp_gw_kv_arr_raw(w, key, LP_GW_INT32, v, n, 4);
}
static inline void lp_gw_kv_arr_u32(lp_gw *w, const char *key, const uint32_t *v, uint64_t n)
{
    lp_gw_kv_arr_raw(w, key, LP_GW_UINT32, v, n, 4);
}
static inline void lp_gw_kv_arr_f32(lp_gw *w, const char *key, const float *v, uint64_t n)
{
    lp_gw_kv_arr_raw(w, key, LP_GW_FLOAT32, v, n, 4);
}
static inline void lp_gw_kv_arr_bool(lp_gw *w, const char *key, const bool *v, uint64_t n)
{
    lp_gw_key(w, key, LP_GW_ARRAY);
    lp_gw_u32(w, LP_GW_BOOL);
    lp_gw_u64(w, n);
    for (uint64_t i = 0; i < n; i++)
        lp_gw_u8(w, v[i] ? 1 : 0);
}

/* Queue a tensor; ne in GGUF order (ne[0] innermost); type is the ggml type id. data is copied
 * at lp_gw_finish and must stay valid until then. */
static inline void lp_gw_tensor(lp_gw *w, const char *name, uint32_t n_dims, const int64_t *ne,
                                uint32_t type, const void *data, size_t n_bytes)
{
    if (w->n_tensors >= LP_GW_MAX_TENSORS || n_dims > 4 || strlen(name) >= 128) {
        w->file.failed = true;
        return;
    }
    lp_gw_tensor_rec *t = &w->tensors[w->n_tensors++];
    memset(t, 0, sizeof *t);
    strcpy(t->name, name);
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < n_dims; d++)
        t->ne[d] = ne[d];
    t->type = type;
    t->data = data;
    t->n_bytes = n_bytes;
}

static inline void lp_gw_pad(lp_gw *w, size_t alignment)
{
    if (w->file.len % alignment != 0)
        lp_bytes_append_zeros(&w->file, alignment - w->file.len % alignment);
}

/* Write the tensor infos, padding and data; patch the counts. False if anything failed. */
static inline bool lp_gw_finish(lp_gw *w)
{
    uint64_t rel = 0;
    for (int i = 0; i < w->n_tensors; i++) {
        lp_gw_tensor_rec *t = &w->tensors[i];
        t->rel_offset = rel;
        rel += t->n_bytes;
        rel = (rel + w->alignment - 1) / w->alignment * w->alignment;
    }
    for (int i = 0; i < w->n_tensors; i++) {
        lp_gw_tensor_rec *t = &w->tensors[i];
        t->info_pos = w->file.len;
        lp_gw_str(w, t->name);
        t->n_dims_pos = w->file.len;
        lp_gw_u32(w, t->n_dims);
        t->ne_pos = w->file.len;
        for (uint32_t d = 0; d < t->n_dims; d++)
            lp_gw_u64(w, (uint64_t)t->ne[d]);
        t->type_pos = w->file.len;
        lp_gw_u32(w, t->type);
        t->offset_pos = w->file.len;
        lp_gw_u64(w, t->rel_offset);
    }
    if (w->n_tensors > 0)
        lp_gw_pad(w, w->alignment);
    w->data_start = w->file.len;
    for (int i = 0; i < w->n_tensors; i++) {
        lp_gw_tensor_rec *t = &w->tensors[i];
        lp_gw_pad(w, w->alignment);
        t->data_pos = w->file.len;
        lp_gw_bytes(w, t->data, t->n_bytes);
    }
    if (w->n_tensors > 0)
        lp_gw_pad(w, w->alignment);
    if (w->file.failed)
        return false;
    lp_gw_put_u64(w, w->count_pos[0], (uint64_t)w->n_tensors);
    lp_gw_put_u64(w, w->count_pos[1], w->n_kv);
    return true;
}

static inline bool lp_gw_write(const lp_gw *w, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(w->file.data, 1, w->file.len, f) == w->file.len;
    return fclose(f) == 0 && ok;
}

static inline void lp_gw_free(lp_gw *w)
{
    lp_bytes_free(&w->file);
}

#endif
