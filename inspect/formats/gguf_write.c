/* Writes GGUF v3 files: metadata encoded as it is set, tensor infos and aligned data at the end. */
#include "inspect/formats/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/bytes.h"
#include "core/checked.h"
#include "inspect/formats/formats_internal.h"

#define GGUF_MAX_DIMS 4

typedef struct gguf_entry {
    char *name;
    uint32_t type_id;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] innermost */
    uint64_t n_bytes;
    void *data; /* owned copy */
} gguf_entry;

struct lp_gguf_writer {
    lp_bytes kvs; /* the encoded key/value pairs */
    lp_block_list keys; /* each key set (for duplicate checks); keys.n is the kv count */
    uint32_t alignment;
    gguf_entry *entries;
    size_t n_entries, cap_entries;
};

static void put_u32(lp_bytes *b, uint32_t v)
{
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    lp_bytes_append(b, le, 4);
}

static void put_u64(lp_bytes *b, uint64_t v)
{
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    lp_bytes_append(b, le, 8);
}

static void put_str(lp_bytes *b, const char *s)
{
    size_t n = strlen(s);
    put_u64(b, n);
    lp_bytes_append(b, s, n);
}

lp_status lp_gguf_writer_create(lp_gguf_writer **out, lp_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return lp_error_set(err, LP_ERR_NOMEM, "GGUF writer: out of memory");
    (*out)->alignment = 32;
    return LP_OK;
}

void lp_gguf_writer_destroy(lp_gguf_writer *w)
{
    if (!w)
        return;
    lp_block_list_free(&w->keys);
    for (size_t i = 0; i < w->n_entries; i++) {
        free(w->entries[i].name);
        free(w->entries[i].data);
    }
    free(w->entries);
    lp_bytes_free(&w->kvs);
    free(w);
}

/* Record the key and encode it with its type; the caller encodes the value. */
static lp_status begin_kv(lp_gguf_writer *w, const char *key, lp_gguf_type type, lp_error *err)
{
    if (!key || !*key)
        return lp_error_set(err, LP_ERR_USAGE, "GGUF writer: empty metadata key");
    for (size_t i = 0; i < w->keys.n; i++)
        if (strcmp(w->keys.blocks[i], key) == 0)
            return lp_error_set(err, LP_ERR_USAGE, "GGUF writer: key '%s' set twice", key);
    size_t n = strlen(key) + 1;
    char *copy = lp_block_list_alloc(&w->keys, n);
    if (!copy)
        return lp_error_set(err, LP_ERR_NOMEM, "GGUF writer: out of memory");
    memcpy(copy, key, n);
    put_str(&w->kvs, key);
    put_u32(&w->kvs, (uint32_t)type);
    return LP_OK;
}

static lp_status end_kv(const lp_gguf_writer *w, const char *key, lp_error *err)
{
    if (w->kvs.failed)
        return lp_error_set(err, LP_ERR_NOMEM, "GGUF writer: key '%s': out of memory", key);
    return LP_OK;
}

lp_status lp_gguf_writer_set_str(lp_gguf_writer *w, const char *key, const char *value,
                                 lp_error *err)
{
    lp_status st = begin_kv(w, key, LP_GGUF_STRING, err);
    if (st != LP_OK)
        return st;
    put_str(&w->kvs, value);
    return end_kv(w, key, err);
}

lp_status lp_gguf_writer_set_u32(lp_gguf_writer *w, const char *key, uint32_t value,
                                 lp_error *err)
{
    lp_status st = begin_kv(w, key, LP_GGUF_UINT32, err);
    if (st != LP_OK)
        return st;
    put_u32(&w->kvs, value);
    /* the reader lays data out by the declared alignment; so does the writer */
    if (strcmp(key, "general.alignment") == 0 && value != 0 && (value & (value - 1)) == 0)
        w->alignment = value;
    return end_kv(w, key, err);
}

lp_status lp_gguf_writer_set_f32(lp_gguf_writer *w, const char *key, float value, lp_error *err)
{
    lp_status st = begin_kv(w, key, LP_GGUF_FLOAT32, err);
    if (st != LP_OK)
        return st;
    uint32_t bits;
    memcpy(&bits, &value, 4);
    put_u32(&w->kvs, bits);
    return end_kv(w, key, err);
}

lp_status lp_gguf_writer_set_bool(lp_gguf_writer *w, const char *key, bool value, lp_error *err)
{
    lp_status st = begin_kv(w, key, LP_GGUF_BOOL, err);
    if (st != LP_OK)
        return st;
    uint8_t b = value ? 1 : 0;
    lp_bytes_append(&w->kvs, &b, 1);
    return end_kv(w, key, err);
}

lp_status lp_gguf_writer_set_strs(lp_gguf_writer *w, const char *key, const char *const *values,
                                  size_t n, lp_error *err)
{
    lp_status st = begin_kv(w, key, LP_GGUF_ARRAY, err);
    if (st != LP_OK)
        return st;
    put_u32(&w->kvs, LP_GGUF_STRING);
    put_u64(&w->kvs, n);
    for (size_t i = 0; i < n; i++)
        put_str(&w->kvs, values[i]);
    return end_kv(w, key, err);
}

lp_status lp_gguf_writer_set_array(lp_gguf_writer *w, const char *key, lp_gguf_type elem,
                                   const void *values, size_t n, lp_error *err)
{
    size_t size = (size_t)lp_gguf_scalar_bytes(elem);
    if (size == 0)
        return lp_error_set(err, LP_ERR_USAGE, "GGUF writer: key '%s': element type %d is not a "
                                               "fixed-size scalar", key, (int)elem);
    if (n > SIZE_MAX / size)
        return lp_error_set(err, LP_ERR_RANGE, "GGUF writer: key '%s': %zu elements overflow",
                            key, n);
    lp_status st = begin_kv(w, key, LP_GGUF_ARRAY, err);
    if (st != LP_OK)
        return st;
    put_u32(&w->kvs, (uint32_t)elem);
    put_u64(&w->kvs, n);
    /* the host is little-endian, as the reader assumes */
    lp_bytes_append(&w->kvs, values, n * size);
    return end_kv(w, key, err);
}

/* Name, dtype and shape checked; ne filled innermost first, the byte size in *n_bytes. */
static lp_status check_tensor(const lp_gguf_writer *w, const char *name, lp_dtype dtype,
                              int n_dims, const int64_t *shape, int64_t ne[GGUF_MAX_DIMS],
                              uint64_t *n_bytes, lp_error *err)
{
    if (!name || !*name)
        return lp_error_set(err, LP_ERR_USAGE, "GGUF writer: empty tensor name");
    for (size_t i = 0; i < w->n_entries; i++)
        if (strcmp(w->entries[i].name, name) == 0)
            return lp_error_set(err, LP_ERR_USAGE, "GGUF writer: tensor '%s' added twice", name);
    if (lp_gguf_dtype_to_id(dtype) < 0)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "GGUF writer: tensor '%s': dtype %s has no "
                                                     "GGUF type id", name, lp_dtype_name(dtype));
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return lp_error_set(err, LP_ERR_RANGE, "GGUF writer: tensor '%s': %d dimensions (1..%d)",
                            name, n_dims, GGUF_MAX_DIMS);
    uint64_t n = 1;
    for (int d = 0; d < n_dims; d++) {
        if (shape[d] < 0)
            return lp_error_set(err, LP_ERR_RANGE, "GGUF writer: tensor '%s': dimension %d is "
                                                   "%lld (< 0)", name, d, (long long)shape[d]);
        if (!lp_mul_u64(n, (uint64_t)shape[d], &n))
            return lp_error_set(err, LP_ERR_RANGE, "GGUF writer: tensor '%s': element count "
                                                   "overflows 64 bits", name);
        ne[n_dims - 1 - d] = shape[d];
    }
    if (ne[0] % lp_dtype_get(dtype)->block_elems != 0)
        return lp_error_set(err, LP_ERR_USAGE, "GGUF writer: tensor '%s': rows of %lld values do "
                                               "not hold whole %s blocks of %u",
                            name, (long long)ne[0], lp_dtype_name(dtype),
                            lp_dtype_get(dtype)->block_elems);
    if (!lp_dtype_bytes_for(dtype, n, n_bytes) || *n_bytes > (uint64_t)SIZE_MAX / 2)
        return lp_error_set(err, LP_ERR_RANGE, "GGUF writer: tensor '%s': byte size overflows",
                            name);
    return LP_OK;
}

/* Append a checked tensor whose bytes are already in owned (freed on failure). */
static lp_status append_entry(lp_gguf_writer *w, const char *name, lp_dtype dtype, int n_dims,
                              const int64_t ne[GGUF_MAX_DIMS], uint64_t n_bytes, void *owned,
                              lp_error *err)
{
    size_t n = strlen(name) + 1;
    char *copy = malloc(n);
    if (copy && w->n_entries == w->cap_entries) {
        size_t cap = w->cap_entries ? w->cap_entries * 2 : 32;
        gguf_entry *grown = realloc(w->entries, cap * sizeof *grown);
        if (grown) {
            w->entries = grown;
            w->cap_entries = cap;
        }
    }
    if (!copy || w->n_entries == w->cap_entries) {
        free(copy);
        free(owned);
        return lp_error_set(err, LP_ERR_NOMEM, "GGUF writer: tensor '%s': out of memory", name);
    }
    memcpy(copy, name, n);
    gguf_entry *e = &w->entries[w->n_entries++];
    memset(e, 0, sizeof *e);
    e->name = copy;
    e->type_id = (uint32_t)lp_gguf_dtype_to_id(dtype);
    e->n_dims = n_dims;
    memcpy(e->ne, ne, sizeof e->ne);
    e->n_bytes = n_bytes;
    e->data = owned;
    return LP_OK;
}

/* Check a tensor and append it with its bytes: data copied as it is, or (f32 non-NULL) f32
 * converted to dtype. */
static lp_status add_tensor(lp_gguf_writer *w, const char *name, lp_dtype dtype, int n_dims,
                            const int64_t *shape, const void *data, const float *f32,
                            lp_error *err)
{
    int64_t ne[GGUF_MAX_DIMS] = {1, 1, 1, 1};
    uint64_t n_bytes;
    lp_status st = check_tensor(w, name, dtype, n_dims, shape, ne, &n_bytes, err);
    if (st != LP_OK)
        return st;
    void *copy = malloc(n_bytes ? (size_t)n_bytes : 1);
    if (!copy)
        return lp_error_set(err, LP_ERR_NOMEM, "GGUF writer: tensor '%s': out of memory", name);
    if (f32)
        lp_f32_store_as(dtype, f32, n_bytes / lp_dtype_get(dtype)->block_bytes, copy);
    else if (n_bytes)
        memcpy(copy, data, (size_t)n_bytes);
    return append_entry(w, name, dtype, n_dims, ne, n_bytes, copy, err);
}

lp_status lp_gguf_writer_add(lp_gguf_writer *w, const char *name, lp_dtype dtype, int n_dims,
                             const int64_t *shape, const void *data, lp_error *err)
{
    return add_tensor(w, name, dtype, n_dims, shape, data, NULL, err);
}

lp_status lp_gguf_writer_add_f32_as(lp_gguf_writer *w, const char *name, lp_dtype dtype,
                                    int n_dims, const int64_t *shape, const float *data,
                                    lp_error *err)
{
    if (dtype != LP_DTYPE_F32 && dtype != LP_DTYPE_F16 && dtype != LP_DTYPE_BF16)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "GGUF writer: tensor '%s': cannot convert "
                                                     "f32 to %s", name, lp_dtype_name(dtype));
    return add_tensor(w, name, dtype, n_dims, shape, NULL, data, err);
}

static uint64_t align_up(uint64_t v, uint64_t alignment)
{
    return (v + alignment - 1) / alignment * alignment;
}

/* The whole file in memory: header, kvs, tensor infos, padding, data. */
static void encode(const lp_gguf_writer *w, lp_bytes *out)
{
    lp_bytes_append(out, "GGUF", 4);
    put_u32(out, 3);
    put_u64(out, w->n_entries);
    put_u64(out, w->keys.n);
    lp_bytes_append(out, w->kvs.data, w->kvs.len);
    uint64_t offset = 0;
    for (size_t i = 0; i < w->n_entries; i++) {
        const gguf_entry *e = &w->entries[i];
        put_str(out, e->name);
        put_u32(out, (uint32_t)e->n_dims);
        for (int d = 0; d < e->n_dims; d++)
            put_u64(out, (uint64_t)e->ne[d]);
        put_u32(out, e->type_id);
        put_u64(out, offset);
        offset = align_up(offset + e->n_bytes, w->alignment);
    }
    lp_bytes_append_zeros(out, (size_t)(align_up(out->len, w->alignment) - out->len));
    for (size_t i = 0; i < w->n_entries; i++) {
        lp_bytes_append(out, w->entries[i].data, (size_t)w->entries[i].n_bytes);
        lp_bytes_append_zeros(out, (size_t)(align_up(w->entries[i].n_bytes, w->alignment) -
                                            w->entries[i].n_bytes));
    }
}

lp_status lp_gguf_writer_write(const lp_gguf_writer *w, const char *path, lp_error *err)
{
    lp_bytes file = {0};
    encode(w, &file);
    if (file.failed || w->kvs.failed) {
        lp_bytes_free(&file);
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory encoding the GGUF file", path);
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        lp_bytes_free(&file);
        return lp_error_set(err, LP_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    bool ok = fwrite(file.data, 1, file.len, f) == file.len;
    int saved_errno = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        saved_errno = errno;
    }
    lp_bytes_free(&file);
    if (!ok) {
        remove(path); /* a truncated GGUF must not stay behind looking like a model */
        return lp_error_set(err, LP_ERR_IO, "%s: write failed: %s", path, strerror(saved_errno));
    }
    return LP_OK;
}
