/* Writes safetensors files: JSON header padded to 8 bytes, then the tensors back to back. */
#define _POSIX_C_SOURCE 200809L
#include "inspect/formats/safetensors_write.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/checked.h"
#include "inspect/formats/formats_internal.h"

typedef struct st_entry {
    char *name;
    lp_dtype dtype;
    int n_dims;
    int64_t shape[8];
    uint64_t n_bytes;
    void *data; /* owned copy */
} st_entry;

typedef struct st_meta {
    char *key;
    char *value;
} st_meta;

struct lp_st_writer {
    st_entry *entries;
    size_t n_entries, cap_entries;
    st_meta *meta;
    size_t n_meta, cap_meta;
};

/* safetensors' dtype spellings. */
static const char *st_dtype_name(lp_dtype dtype)
{
    switch (dtype) {
    case LP_DTYPE_F64: return "F64";
    case LP_DTYPE_F32: return "F32";
    case LP_DTYPE_F16: return "F16";
    case LP_DTYPE_BF16: return "BF16";
    case LP_DTYPE_F8_E4M3: return "F8_E4M3";
    case LP_DTYPE_F8_E5M2: return "F8_E5M2";
    case LP_DTYPE_F8_E8M0: return "F8_E8M0";
    case LP_DTYPE_F4_E2M1: return "F4";
    case LP_DTYPE_I64: return "I64";
    case LP_DTYPE_I32: return "I32";
    case LP_DTYPE_I16: return "I16";
    case LP_DTYPE_I8: return "I8";
    case LP_DTYPE_U64: return "U64";
    case LP_DTYPE_U32: return "U32";
    case LP_DTYPE_U16: return "U16";
    case LP_DTYPE_U8: return "U8";
    case LP_DTYPE_BOOL: return "BOOL";
    default: return NULL;
    }
}

static char *dup_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *copy = malloc(n);
    if (copy)
        memcpy(copy, s, n);
    return copy;
}

lp_status lp_st_writer_create(lp_st_writer **out, lp_error *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return lp_error_set(err, LP_ERR_NOMEM, "safetensors writer: out of memory");
    return LP_OK;
}

void lp_st_writer_destroy(lp_st_writer *writer)
{
    if (!writer)
        return;
    for (size_t i = 0; i < writer->n_entries; i++) {
        free(writer->entries[i].name);
        free(writer->entries[i].data);
    }
    for (size_t i = 0; i < writer->n_meta; i++) {
        free(writer->meta[i].key);
        free(writer->meta[i].value);
    }
    free(writer->entries);
    free(writer->meta);
    free(writer);
}

/* Validate name, dtype and shape; returns the byte size in *n_bytes. */
static lp_status check_tensor(const lp_st_writer *writer, const char *name, lp_dtype dtype,
                              int n_dims, const int64_t *shape, uint64_t *n_bytes,
                              lp_error *err)
{
    if (!name || !*name)
        return lp_error_set(err, LP_ERR_USAGE, "safetensors writer: empty tensor name");
    if (strcmp(name, "__metadata__") == 0)
        return lp_error_set(err, LP_ERR_USAGE,
                            "safetensors writer: '__metadata__' is reserved, not a tensor name");
    for (size_t i = 0; i < writer->n_entries; i++)
        if (strcmp(writer->entries[i].name, name) == 0)
            return lp_error_set(err, LP_ERR_USAGE, "safetensors writer: tensor '%s' added twice",
                                name);
    if (!st_dtype_name(dtype))
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "safetensors writer: tensor '%s': dtype %s has no safetensors name",
                            name, lp_dtype_name(dtype));
    if (n_dims < 0 || n_dims > 8)
        return lp_error_set(err, LP_ERR_RANGE,
                            "safetensors writer: tensor '%s': %d dimensions (limit 8)", name,
                            n_dims);
    uint64_t n_elements = 1;
    for (int d = 0; d < n_dims; d++) {
        if (shape[d] < 0)
            return lp_error_set(err, LP_ERR_RANGE,
                                "safetensors writer: tensor '%s': dimension %d is %lld (< 0)",
                                name, d, (long long)shape[d]);
        if (!lp_mul_u64(n_elements, (uint64_t)shape[d], &n_elements))
            return lp_error_set(err, LP_ERR_RANGE,
                                "safetensors writer: tensor '%s': element count overflows 64 bits",
                                name);
    }
    if (n_elements % lp_dtype_get(dtype)->block_elems != 0)
        return lp_error_set(err, LP_ERR_USAGE,
                            "safetensors writer: tensor '%s': %llu %s values do not fill whole "
                            "bytes",
                            name, (unsigned long long)n_elements, lp_dtype_name(dtype));
    if (!lp_dtype_bytes_for(dtype, n_elements, n_bytes) || *n_bytes > (uint64_t)SIZE_MAX / 2)
        return lp_error_set(err, LP_ERR_RANGE,
                            "safetensors writer: tensor '%s': byte size overflows", name);
    return LP_OK;
}

static lp_status append_entry(lp_st_writer *writer, const char *name, lp_dtype dtype, int n_dims,
                              const int64_t *shape, uint64_t n_bytes, void *owned_data,
                              lp_error *err)
{
    if (writer->n_entries == writer->cap_entries) {
        size_t cap = writer->cap_entries ? writer->cap_entries * 2 : 16;
        st_entry *grown = realloc(writer->entries, cap * sizeof *grown);
        if (!grown) {
            free(owned_data);
            return lp_error_set(err, LP_ERR_NOMEM, "safetensors writer: out of memory");
        }
        writer->entries = grown;
        writer->cap_entries = cap;
    }
    st_entry *e = &writer->entries[writer->n_entries];
    memset(e, 0, sizeof *e);
    e->name = dup_string(name);
    if (!e->name) {
        free(owned_data);
        return lp_error_set(err, LP_ERR_NOMEM, "safetensors writer: out of memory");
    }
    e->dtype = dtype;
    e->n_dims = n_dims;
    for (int d = 0; d < n_dims; d++)
        e->shape[d] = shape[d];
    e->n_bytes = n_bytes;
    e->data = owned_data;
    writer->n_entries++;
    return LP_OK;
}

/* The tensor checked and a buffer of its n_bytes for the writer to own (freed by the writer once
 * append_entry has it). */
static lp_status checked_buffer(const lp_st_writer *writer, const char *name, lp_dtype dtype,
                                int n_dims, const int64_t *shape, uint64_t *n_bytes, void **out,
                                lp_error *err)
{
    lp_status st = check_tensor(writer, name, dtype, n_dims, shape, n_bytes, err);
    if (st != LP_OK)
        return st;
    *out = malloc(*n_bytes ? (size_t)*n_bytes : 1);
    if (!*out)
        return lp_error_set(err, LP_ERR_NOMEM, "safetensors writer: tensor '%s': out of memory "
                                               "(%llu bytes)", name, (unsigned long long)*n_bytes);
    return LP_OK;
}

lp_status lp_st_writer_add(lp_st_writer *writer, const char *name, lp_dtype dtype, int n_dims,
                           const int64_t *shape, const void *data, lp_error *err)
{
    uint64_t n_bytes;
    void *copy;
    lp_status st = checked_buffer(writer, name, dtype, n_dims, shape, &n_bytes, &copy, err);
    if (st != LP_OK)
        return st;
    if (n_bytes)
        memcpy(copy, data, (size_t)n_bytes);
    return append_entry(writer, name, dtype, n_dims, shape, n_bytes, copy, err);
}

lp_status lp_st_writer_add_f32_as(lp_st_writer *writer, const char *name, lp_dtype dtype,
                                  int n_dims, const int64_t *shape, const float *data,
                                  lp_error *err)
{
    if (dtype != LP_DTYPE_F32 && dtype != LP_DTYPE_F16 && dtype != LP_DTYPE_BF16)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "safetensors writer: tensor '%s': cannot convert f32 to %s", name,
                            lp_dtype_name(dtype));
    uint64_t n_bytes;
    void *copy;
    lp_status st = checked_buffer(writer, name, dtype, n_dims, shape, &n_bytes, &copy, err);
    if (st != LP_OK)
        return st;
    lp_f32_store_as(dtype, data, n_bytes / lp_dtype_get(dtype)->block_bytes, copy);
    return append_entry(writer, name, dtype, n_dims, shape, n_bytes, copy, err);
}

void lp_f32_store_as(lp_dtype dtype, const float *src, uint64_t n, void *dst)
{
    if (dtype == LP_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof *src);
        return;
    }
    uint8_t *out = dst;
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h = dtype == LP_DTYPE_F16 ? lp_f32_to_f16(src[i]) : lp_f32_to_bf16(src[i]);
        memcpy(out + 2 * i, &h, 2);
    }
}

lp_status lp_st_writer_set_metadata(lp_st_writer *writer, const char *key, const char *value,
                                    lp_error *err)
{
    for (size_t i = 0; i < writer->n_meta; i++) {
        if (strcmp(writer->meta[i].key, key) == 0) {
            char *v = dup_string(value);
            if (!v)
                return lp_error_set(err, LP_ERR_NOMEM, "safetensors writer: out of memory");
            free(writer->meta[i].value);
            writer->meta[i].value = v;
            return LP_OK;
        }
    }
    if (writer->n_meta == writer->cap_meta) {
        size_t cap = writer->cap_meta ? writer->cap_meta * 2 : 4;
        st_meta *grown = realloc(writer->meta, cap * sizeof *grown);
        if (!grown)
            return lp_error_set(err, LP_ERR_NOMEM, "safetensors writer: out of memory");
        writer->meta = grown;
        writer->cap_meta = cap;
    }
    char *k = dup_string(key), *v = dup_string(value);
    if (!k || !v) {
        free(k);
        free(v);
        return lp_error_set(err, LP_ERR_NOMEM, "safetensors writer: out of memory");
    }
    writer->meta[writer->n_meta].key = k;
    writer->meta[writer->n_meta].value = v;
    writer->n_meta++;
    return LP_OK;
}

/* The header JSON, unpadded; caller frees. */
static char *build_header(const lp_st_writer *writer)
{
    json_t *root = json_object();
    if (!root)
        return NULL;
    bool ok = true;
    if (writer->n_meta) {
        json_t *meta = json_object();
        ok = meta && json_object_set_new(root, "__metadata__", meta) == 0;
        for (size_t i = 0; ok && i < writer->n_meta; i++)
            ok = json_object_set_new(meta, writer->meta[i].key,
                                     json_string(writer->meta[i].value)) == 0;
    }
    uint64_t offset = 0;
    for (size_t i = 0; ok && i < writer->n_entries; i++) {
        const st_entry *e = &writer->entries[i];
        json_t *t = json_object(), *shape = json_array(), *offsets = json_array();
        ok = t && shape && offsets;
        for (int d = 0; ok && d < e->n_dims; d++)
            ok = json_array_append_new(shape, json_integer((json_int_t)e->shape[d])) == 0;
        ok = ok && json_array_append_new(offsets, json_integer((json_int_t)offset)) == 0;
        ok = ok && json_array_append_new(offsets, json_integer((json_int_t)(offset + e->n_bytes))) == 0;
        ok = ok && json_object_set_new(t, "dtype", json_string(st_dtype_name(e->dtype))) == 0;
        ok = ok && json_object_set(t, "shape", shape) == 0;
        ok = ok && json_object_set(t, "data_offsets", offsets) == 0;
        ok = ok && json_object_set(root, e->name, t) == 0;
        json_decref(t);
        json_decref(shape);
        json_decref(offsets);
        offset += e->n_bytes;
    }
    char *text = ok ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return text;
}

lp_status lp_st_writer_write(const lp_st_writer *writer, const char *path, lp_error *err)
{
    char *header = build_header(writer);
    if (!header)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: cannot build the safetensors header", path);
    uint64_t header_len = strlen(header);
    uint64_t padded = (8 + header_len + 7) / 8 * 8 - 8;

    size_t tmp_len = strlen(path) + 32;
    char *tmp = malloc(tmp_len);
    if (!tmp) {
        free(header);
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", path);
    }
    snprintf(tmp, tmp_len, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        lp_status st = lp_error_set(err, LP_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(header);
        free(tmp);
        return st;
    }
    uint8_t len_bytes[8];
    for (int i = 0; i < 8; i++)
        len_bytes[i] = (uint8_t)(padded >> (8 * i));
    bool ok = fwrite(len_bytes, 1, 8, f) == 8 && fwrite(header, 1, header_len, f) == header_len;
    for (uint64_t i = header_len; ok && i < padded; i++)
        ok = fputc(' ', f) != EOF;
    for (size_t i = 0; ok && i < writer->n_entries; i++)
        ok = writer->entries[i].n_bytes == 0 ||
             fwrite(writer->entries[i].data, 1, (size_t)writer->entries[i].n_bytes, f) ==
                 writer->entries[i].n_bytes;
    int saved_errno = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        saved_errno = errno;
    }
    free(header);
    if (!ok) {
        remove(tmp);
        lp_status st = lp_error_set(err, LP_ERR_IO, "%s: write failed: %s", tmp,
                                    strerror(saved_errno));
        free(tmp);
        return st;
    }
    if (rename(tmp, path) != 0) {
        lp_status st = lp_error_set(err, LP_ERR_IO, "%s: cannot rename from %s: %s", path, tmp,
                                    strerror(errno));
        remove(tmp);
        free(tmp);
        return st;
    }
    free(tmp);
    return LP_OK;
}
