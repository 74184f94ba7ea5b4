/* GGUF v2/v3 reader: every field from the file is checked against the bytes that remain before
 * it is used, so a hostile file gives an error naming the offset, never an overflow.
 *
 * Byte layout (little-endian; ggml's docs/gguf.md):
 *
 *   u32 magic "GGUF"   u32 version (2 or 3; v1 had 32-bit counts and is refused)
 *   u64 n_tensors      u64 n_kv
 *   n_kv x { string key; u32 type; value }
 *       string = u64 len, len bytes (no NUL)
 *       array  = u32 elem_type, u64 count, count values (arrays may nest)
 *   n_tensors x { string name; u32 n_dims; u64 ne[n_dims]; u32 ggml_type; u64 offset }
 *   padding to general.alignment (u32, default 32)
 *   tensor data; each offset is relative to the aligned data start and a multiple of the alignment
 */
#include "inspect/formats/gguf.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/mapfile.h"
#include "inspect/formats/formats_internal.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_HEADER_BYTES 24
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_ARRAY_DEPTH 8
/* Smallest encodings, used to bound counts by the bytes left before allocating anything. */
#define GGUF_MIN_KV_BYTES 13     /* empty key (8) + type (4) + a 1-byte value */
#define GGUF_MIN_TENSOR_BYTES 32 /* empty name (8) + n_dims (4) + one dim (8) + type (4) + offset (8) */

typedef struct gguf_kv {
    uint64_t entry_pos;    /* where the entry (its key) starts, for messages */
    char *key;             /* NUL-terminated copy */
    lp_gguf_type type;
    lp_gguf_type arr_type; /* element type when type == ARRAY */
    uint64_t arr_len;
    uint64_t value_pos;    /* absolute offset of the value (arrays: of the first element) */
    uint64_t *str_pos;     /* string arrays: absolute offset of each element's length field */
} gguf_kv;

typedef struct gguf_tensor {
    uint64_t entry_pos; /* where the tensor info starts, for messages */
    char *name;
    lp_dtype dtype;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t rel_offset; /* as stored: relative to the data section */
    uint64_t offset_at;  /* where the offset field is in the file, for messages */
    uint64_t offset;     /* absolute */
    uint64_t n_bytes;
} gguf_tensor;

struct lp_gguf {
    char *path;
    const uint8_t *data;
    uint64_t size;
    lp_mapped_file map; /* set when opened from a file */
    bool mapped;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_start;
    int64_t n_kv;
    gguf_kv *kvs;
    uint64_t kv_table_size; /* power of two; slots hold kv index + 1, 0 = empty */
    int64_t *kv_table;
    int64_t n_tensors;
    gguf_tensor *tensors;
};

/* ---------------------------------------------------------------------------------------------
 * ggml type ids (ggml.h enum ggml_type). 4, 5, 31-33 and 36-38 were removed from GGUF.
 */

static const lp_dtype ggml_type_map[] = {
    [0] = LP_DTYPE_F32,      [1] = LP_DTYPE_F16,     [2] = LP_DTYPE_Q4_0,   [3] = LP_DTYPE_Q4_1,
    [6] = LP_DTYPE_Q5_0,     [7] = LP_DTYPE_Q5_1,    [8] = LP_DTYPE_Q8_0,   [9] = LP_DTYPE_Q8_1,
    [10] = LP_DTYPE_Q2_K,    [11] = LP_DTYPE_Q3_K,   [12] = LP_DTYPE_Q4_K,  [13] = LP_DTYPE_Q5_K,
    [14] = LP_DTYPE_Q6_K,    [15] = LP_DTYPE_Q8_K,   [16] = LP_DTYPE_IQ2_XXS,
    [17] = LP_DTYPE_IQ2_XS,  [18] = LP_DTYPE_IQ3_XXS, [19] = LP_DTYPE_IQ1_S,
    [20] = LP_DTYPE_IQ4_NL,  [21] = LP_DTYPE_IQ3_S,  [22] = LP_DTYPE_IQ2_S, [23] = LP_DTYPE_IQ4_XS,
    [24] = LP_DTYPE_I8,      [25] = LP_DTYPE_I16,    [26] = LP_DTYPE_I32,   [27] = LP_DTYPE_I64,
    [28] = LP_DTYPE_F64,     [29] = LP_DTYPE_IQ1_M,  [30] = LP_DTYPE_BF16,  [34] = LP_DTYPE_TQ1_0,
    [35] = LP_DTYPE_TQ2_0,   [39] = LP_DTYPE_MXFP4,
};
#define N_GGML_TYPES (sizeof ggml_type_map / sizeof ggml_type_map[0])

lp_dtype lp_gguf_dtype_from_id(uint32_t ggml_type)
{
    if (ggml_type >= N_GGML_TYPES)
        return LP_DTYPE_INVALID;
    return ggml_type_map[ggml_type];
}

int lp_gguf_dtype_to_id(lp_dtype dtype)
{
    if (dtype == LP_DTYPE_INVALID)
        return -1;
    for (size_t id = 0; id < N_GGML_TYPES; id++)
        if (ggml_type_map[id] == dtype)
            return (int)id;
    return -1;
}

static const char *gguf_type_name(uint32_t type)
{
    static const char *const names[LP_GGUF_TYPE_COUNT] = {
        "uint8", "int8",  "uint16", "int16", "uint32", "int32",  "float32",
        "bool",  "string", "array", "uint64", "int64", "float64",
    };
    return type < LP_GGUF_TYPE_COUNT ? names[type] : "unknown";
}

/* Bytes of one scalar value; 0 for string and array. */
uint64_t lp_gguf_scalar_bytes(lp_gguf_type type)
{
    switch (type) {
    case LP_GGUF_UINT8: case LP_GGUF_INT8: case LP_GGUF_BOOL: return 1;
    case LP_GGUF_UINT16: case LP_GGUF_INT16: return 2;
    case LP_GGUF_UINT32: case LP_GGUF_INT32: case LP_GGUF_FLOAT32: return 4;
    case LP_GGUF_UINT64: case LP_GGUF_INT64: case LP_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* ---------------------------------------------------------------------------------------------
 * A bounds-checked cursor over the file.
 */

typedef struct cursor {
    const uint8_t *data;
    uint64_t size;
    uint64_t pos;
    const char *name; /* for messages */
    lp_error *err;
} cursor;

static lp_status truncated(cursor *c, uint64_t need, const char *what)
{
    return lp_error_set(c->err, LP_ERR_FORMAT,
                        "%s: offset %llu: %s needs %llu bytes but the %llu-byte file has %llu left "
                        "(truncated?)",
                        c->name, (unsigned long long)c->pos, what, (unsigned long long)need,
                        (unsigned long long)c->size, (unsigned long long)(c->size - c->pos));
}

static bool has(const cursor *c, uint64_t n) { return n <= c->size - c->pos; }

static lp_status read_u32(cursor *c, uint32_t *out, const char *what)
{
    if (!has(c, 4))
        return truncated(c, 4, what);
    *out = lp_load_u32(c->data + c->pos);
    c->pos += 4;
    return LP_OK;
}

static lp_status read_u64(cursor *c, uint64_t *out, const char *what)
{
    if (!has(c, 8))
        return truncated(c, 8, what);
    *out = lp_load_u64(c->data + c->pos);
    c->pos += 8;
    return LP_OK;
}

/* A string: sets *pos to its first byte and *len; advances past it. */
static lp_status read_string(cursor *c, uint64_t *pos, uint64_t *len, const char *what)
{
    uint64_t at = c->pos;
    lp_status st = read_u64(c, len, what);
    if (st != LP_OK)
        return st;
    if (!has(c, *len))
        return lp_error_set(c->err, LP_ERR_FORMAT,
                            "%s: offset %llu: %s length %llu exceeds the %llu bytes left in the "
                            "%llu-byte file",
                            c->name, (unsigned long long)at, what, (unsigned long long)*len,
                            (unsigned long long)(c->size - c->pos), (unsigned long long)c->size);
    *pos = c->pos;
    c->pos += *len;
    return LP_OK;
}

/* A NUL-terminated heap copy of a string that must not contain NUL bytes itself. */
static lp_status copy_name(cursor *c, uint64_t pos, uint64_t len, const char *what, char **out)
{
    if (memchr(c->data + pos, 0, len))
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: offset %llu: %s contains a NUL byte",
                            c->name, (unsigned long long)(pos - 8), what);
    char *s = malloc(len + 1);
    if (!s)
        return lp_error_set(c->err, LP_ERR_NOMEM, "%s: out of memory copying a %llu-byte %s",
                            c->name, (unsigned long long)len, what);
    memcpy(s, c->data + pos, len);
    s[len] = '\0';
    *out = s;
    return LP_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Hash table of names (FNV-1a, open addressing) for key lookup and duplicate detection.
 */

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t table_size_for(int64_t n)
{
    uint64_t size = 16;
    while (size < (uint64_t)n * 2)
        size <<= 1;
    return size;
}

/* Insert name #index (names[index] read through get_name); returns the index of an existing entry
 * with the same name, or -1 after inserting. */
static int64_t table_insert(int64_t *table, uint64_t table_size, int64_t index,
                            const char *(*get_name)(const void *, int64_t), const void *owner)
{
    const char *name = get_name(owner, index);
    uint64_t slot = hash_name(name) & (table_size - 1);
    while (table[slot] != 0) {
        int64_t other = table[slot] - 1;
        if (strcmp(get_name(owner, other), name) == 0)
            return other;
        slot = (slot + 1) & (table_size - 1);
    }
    table[slot] = index + 1;
    return -1;
}

/* Make room for entry `index` in a zero-filled array that grows by doubling up to `max` entries:
 * a count that the file size allows can still be far more than the file really holds, so memory
 * follows what is parsed, not what the header claims. */
static bool grow(void **array, uint64_t *capacity, uint64_t index, uint64_t max, size_t elem_size)
{
    if (index < *capacity)
        return true;
    uint64_t want = *capacity ? *capacity * 2 : 64;
    if (want > max)
        want = max;
    void *grown = realloc(*array, want * elem_size);
    if (!grown)
        return false;
    memset((char *)grown + *capacity * elem_size, 0, (want - *capacity) * elem_size);
    *array = grown;
    *capacity = want;
    return true;
}

static const char *kv_name(const void *owner, int64_t i)
{
    return ((const lp_gguf *)owner)->kvs[i].key;
}

static const char *tensor_name(const void *owner, int64_t i)
{
    return ((const lp_gguf *)owner)->tensors[i].name;
}

/* ---------------------------------------------------------------------------------------------
 * Metadata values.
 */

/* Skip one value of `type` at the cursor, validating it. depth counts array nesting. */
static lp_status skip_value(cursor *c, uint32_t type, int depth, const char *key);

static lp_status check_value_type(cursor *c, uint64_t at, uint32_t type, const char *key,
                                  const char *what)
{
    if (type >= LP_GGUF_TYPE_COUNT)
        return lp_error_set(c->err, LP_ERR_FORMAT,
                            "%s: offset %llu: key '%s': %s %u is not a GGUF value type (0..%d)",
                            c->name, (unsigned long long)at, key, what, type,
                            LP_GGUF_TYPE_COUNT - 1);
    return LP_OK;
}

/* Reads an array header at the cursor and bounds its count by the bytes left. */
static lp_status read_array_header(cursor *c, const char *key, int depth, uint32_t *elem_type,
                                   uint64_t *count)
{
    uint64_t at = c->pos;
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return lp_error_set(c->err, LP_ERR_FORMAT,
                            "%s: offset %llu: key '%s': arrays nested more than %d deep", c->name,
                            (unsigned long long)at, key, GGUF_MAX_ARRAY_DEPTH);
    lp_status st = read_u32(c, elem_type, "array element type");
    if (st != LP_OK)
        return st;
    st = check_value_type(c, at, *elem_type, key, "array element type");
    if (st != LP_OK)
        return st;
    uint64_t count_at = c->pos;
    st = read_u64(c, count, "array length");
    if (st != LP_OK)
        return st;
    /* Every element takes at least this many bytes: a string its 8-byte length, an array its
     * 12-byte header. */
    uint64_t min_elem = lp_gguf_scalar_bytes((lp_gguf_type)*elem_type);
    if (*elem_type == LP_GGUF_STRING)
        min_elem = 8;
    else if (*elem_type == LP_GGUF_ARRAY)
        min_elem = 12;
    uint64_t need;
    if (!lp_mul_u64(*count, min_elem, &need) || !has(c, need))
        return lp_error_set(c->err, LP_ERR_FORMAT,
                            "%s: offset %llu: key '%s': array length %llu of %s exceeds what the "
                            "%llu bytes left in the %llu-byte file can hold",
                            c->name, (unsigned long long)count_at, key,
                            (unsigned long long)*count, gguf_type_name(*elem_type),
                            (unsigned long long)(c->size - c->pos), (unsigned long long)c->size);
    return LP_OK;
}

static lp_status skip_value(cursor *c, uint32_t type, int depth, const char *key)
{
    lp_status st;
    if (type == LP_GGUF_STRING) {
        uint64_t pos, len;
        return read_string(c, &pos, &len, "string value");
    }
    if (type == LP_GGUF_ARRAY) {
        uint32_t elem_type = 0;
        uint64_t count = 0;
        st = read_array_header(c, key, depth, &elem_type, &count);
        if (st != LP_OK)
            return st;
        uint64_t elem_size = lp_gguf_scalar_bytes((lp_gguf_type)elem_type);
        if (elem_size) {
            if (elem_type == LP_GGUF_BOOL) {
                for (uint64_t i = 0; i < count; i++) {
                    uint8_t b = c->data[c->pos + i];
                    if (b > 1)
                        return lp_error_set(c->err, LP_ERR_FORMAT,
                                            "%s: offset %llu: key '%s': bool value %u is not 0 or 1",
                                            c->name, (unsigned long long)(c->pos + i), key, b);
                }
            }
            c->pos += count * elem_size; /* bounded by read_array_header */
            return LP_OK;
        }
        for (uint64_t i = 0; i < count; i++) {
            st = skip_value(c, elem_type, depth + 1, key);
            if (st != LP_OK)
                return st;
        }
        return LP_OK;
    }
    uint64_t size = lp_gguf_scalar_bytes((lp_gguf_type)type);
    if (!has(c, size))
        return truncated(c, size, "value");
    if (type == LP_GGUF_BOOL && c->data[c->pos] > 1)
        return lp_error_set(c->err, LP_ERR_FORMAT,
                            "%s: offset %llu: key '%s': bool value %u is not 0 or 1", c->name,
                            (unsigned long long)c->pos, key, c->data[c->pos]);
    c->pos += size;
    return LP_OK;
}

static lp_status read_kv(lp_gguf *g, cursor *c, gguf_kv *kv)
{
    uint64_t key_pos, key_len;
    lp_status st = read_string(c, &key_pos, &key_len, "key");
    if (st != LP_OK)
        return st;
    st = copy_name(c, key_pos, key_len, "key", &kv->key);
    if (st != LP_OK)
        return st;
    uint64_t type_at = c->pos;
    uint32_t type = 0;
    st = read_u32(c, &type, "value type");
    if (st != LP_OK)
        return st;
    st = check_value_type(c, type_at, type, kv->key, "value type");
    if (st != LP_OK)
        return st;
    kv->type = (lp_gguf_type)type;
    kv->arr_type = LP_GGUF_TYPE_COUNT;
    if (type != LP_GGUF_ARRAY) {
        kv->value_pos = c->pos;
        return skip_value(c, type, 0, kv->key);
    }
    uint32_t elem_type = 0;
    uint64_t count = 0;
    st = read_array_header(c, kv->key, 0, &elem_type, &count);
    if (st != LP_OK)
        return st;
    kv->arr_type = (lp_gguf_type)elem_type;
    kv->arr_len = count;
    kv->value_pos = c->pos;
    if (elem_type == LP_GGUF_STRING) {
        /* Index every element for random access (tokenizer vocabularies). count * 8 bytes is
         * bounded by the file size, checked in read_array_header. */
        if (count > 0) {
            kv->str_pos = malloc(count * sizeof *kv->str_pos);
            if (!kv->str_pos)
                return lp_error_set(c->err, LP_ERR_NOMEM,
                                    "%s: key '%s': out of memory indexing %llu strings", g->path,
                                    kv->key, (unsigned long long)count);
        }
        for (uint64_t i = 0; i < count; i++) {
            kv->str_pos[i] = c->pos;
            uint64_t pos, len;
            st = read_string(c, &pos, &len, "string array element");
            if (st != LP_OK)
                return st;
        }
        return LP_OK;
    }
    /* Rewind to the array header and let skip_value validate the elements. */
    c->pos = kv->value_pos - 12;
    return skip_value(c, LP_GGUF_ARRAY, 0, kv->key);
}

/* ---------------------------------------------------------------------------------------------
 * Tensor infos.
 */

/* n_dims and ne[]: each dimension 1..INT64_MAX, their product within 64 bits. */
static lp_status read_tensor_dims(lp_gguf *g, cursor *c, gguf_tensor *t, int64_t *n_elements)
{
    uint64_t dims_at = c->pos;
    uint32_t n_dims = 0;
    lp_status st = read_u32(c, &n_dims, "tensor n_dims");
    if (st != LP_OK)
        return st;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return lp_error_set(c->err, LP_ERR_FORMAT,
                            "%s: offset %llu: tensor '%s': n_dims %u outside 1..%d", g->path,
                            (unsigned long long)dims_at, t->name, n_dims, GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    *n_elements = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne_at = c->pos, ne = 0;
        if ((st = read_u64(c, &ne, "tensor dimension")) != LP_OK)
            return st;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return lp_error_set(c->err, LP_ERR_FORMAT,
                                "%s: offset %llu: tensor '%s': ne[%u] = %llu, must be 1..%lld",
                                g->path, (unsigned long long)ne_at, t->name, d,
                                (unsigned long long)ne, (long long)INT64_MAX);
        if (!lp_mul_i64(*n_elements, (int64_t)ne, n_elements))
            return lp_error_set(c->err, LP_ERR_FORMAT,
                                "%s: offset %llu: tensor '%s': element count overflows 64 bits at "
                                "ne[%u] = %llu",
                                g->path, (unsigned long long)ne_at, t->name, d,
                                (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    return LP_OK;
}

/* The ggml type: known, whole blocks a row, a byte count within 64 bits. dims_at: where n_dims
 * was, for messages about the shape. */
static lp_status read_tensor_type(lp_gguf *g, cursor *c, gguf_tensor *t, int64_t n_elements,
                                  uint64_t dims_at)
{
    uint64_t type_at = c->pos;
    uint32_t type_id = 0;
    lp_status st = read_u32(c, &type_id, "tensor type");
    if (st != LP_OK)
        return st;
    t->dtype = lp_gguf_dtype_from_id(type_id);
    if (t->dtype == LP_DTYPE_INVALID)
        return lp_error_set(c->err, LP_ERR_UNSUPPORTED,
                            "%s: offset %llu: tensor '%s': unknown ggml type id %u (removed or "
                            "newer than this reader)",
                            g->path, (unsigned long long)type_at, t->name, type_id);
    const lp_dtype_info *info = lp_dtype_get(t->dtype);
    if (t->ne[0] % info->block_elems != 0)
        return lp_error_set(c->err, LP_ERR_FORMAT,
                            "%s: offset %llu: tensor '%s': row length ne[0] = %lld is not a "
                            "multiple of the %s block size %u",
                            g->path, (unsigned long long)(dims_at + 4), t->name,
                            (long long)t->ne[0], info->name, info->block_elems);
    if (!lp_dtype_bytes_for(t->dtype, (uint64_t)n_elements, &t->n_bytes))
        return lp_error_set(c->err, LP_ERR_FORMAT,
                            "%s: offset %llu: tensor '%s': %lld elements of %s overflow a 64-bit "
                            "byte count",
                            g->path, (unsigned long long)(dims_at + 4), t->name,
                            (long long)n_elements, info->name);
    return LP_OK;
}

static lp_status read_tensor_info(lp_gguf *g, cursor *c, gguf_tensor *t)
{
    uint64_t name_pos, name_len;
    lp_status st = read_string(c, &name_pos, &name_len, "tensor name");
    if (st != LP_OK || (st = copy_name(c, name_pos, name_len, "tensor name", &t->name)) != LP_OK)
        return st;
    uint64_t dims_at = c->pos;
    int64_t n_elements = 0;
    if ((st = read_tensor_dims(g, c, t, &n_elements)) != LP_OK ||
        (st = read_tensor_type(g, c, t, n_elements, dims_at)) != LP_OK)
        return st;
    t->offset_at = c->pos;
    if ((st = read_u64(c, &t->rel_offset, "tensor data offset")) != LP_OK)
        return st;
    if (t->rel_offset % g->alignment != 0)
        return lp_error_set(c->err, LP_ERR_FORMAT,
                            "%s: offset %llu: tensor '%s': data offset %llu is not a multiple of "
                            "the alignment %u",
                            g->path, (unsigned long long)t->offset_at, t->name,
                            (unsigned long long)t->rel_offset, g->alignment);
    return LP_OK;
}

static int compare_by_offset(const void *a, const void *b, const gguf_tensor *tensors)
{
    uint64_t oa = tensors[*(const int64_t *)a].offset, ob = tensors[*(const int64_t *)b].offset;
    return oa < ob ? -1 : oa > ob ? 1 : 0;
}

/* qsort has no context argument in C11: sort indices with a small merge sort instead. */
static void sort_by_offset(int64_t *idx, int64_t *tmp, int64_t n, const gguf_tensor *tensors)
{
    if (n < 2)
        return;
    int64_t half = n / 2;
    sort_by_offset(idx, tmp, half, tensors);
    sort_by_offset(idx + half, tmp, n - half, tensors);
    int64_t i = 0, j = half, k = 0;
    while (i < half && j < n)
        tmp[k++] = compare_by_offset(&idx[j], &idx[i], tensors) < 0 ? idx[j++] : idx[i++];
    while (i < half)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
}

static lp_status check_tensor_layout(lp_gguf *g, lp_error *err)
{
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint64_t end;
        if (!lp_add_u64(g->data_start, t->rel_offset, &t->offset) ||
            !lp_add_u64(t->offset, t->n_bytes, &end) || end > g->size)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: offset %llu: tensor '%s': %llu bytes at relative offset "
                                "%llu (data section at %llu) end past the end of the %llu-byte "
                                "file",
                                g->path, (unsigned long long)t->offset_at, t->name,
                                (unsigned long long)t->n_bytes, (unsigned long long)t->rel_offset,
                                (unsigned long long)g->data_start, (unsigned long long)g->size);
    }
    if (g->n_tensors < 2)
        return LP_OK;
    int64_t *idx = malloc((size_t)g->n_tensors * 2 * sizeof *idx);
    if (!idx)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory sorting %lld tensors", g->path,
                            (long long)g->n_tensors);
    for (int64_t i = 0; i < g->n_tensors; i++)
        idx[i] = i;
    sort_by_offset(idx, idx + g->n_tensors, g->n_tensors, g->tensors);
    lp_status st = LP_OK;
    for (int64_t i = 1; i < g->n_tensors; i++) {
        const gguf_tensor *prev = &g->tensors[idx[i - 1]], *t = &g->tensors[idx[i]];
        if (prev->offset + prev->n_bytes > t->offset) {
            st = lp_error_set(err, LP_ERR_FORMAT,
                              "%s: offset %llu: tensor '%s': data at relative offset %llu overlaps "
                              "tensor '%s' (relative offset %llu, %llu bytes)",
                              g->path, (unsigned long long)t->offset_at, t->name,
                              (unsigned long long)t->rel_offset, prev->name,
                              (unsigned long long)prev->rel_offset,
                              (unsigned long long)prev->n_bytes);
            break;
        }
    }
    free(idx);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * Open and close.
 */

/* Magic, version (2 or 3) and the two counts, each bounded by the bytes the file has left. */
static lp_status read_header(lp_gguf *g, cursor *c, uint64_t *n_tensors, uint64_t *n_kv)
{
    lp_error *err = c->err;
    if (g->size < 4)
        return truncated(c, 4, "magic");
    if (memcmp(g->data, GGUF_MAGIC, 4) != 0) {
        char shown[5];
        for (int i = 0; i < 4; i++)
            shown[i] = (g->data[i] >= 0x20 && g->data[i] < 0x7f) ? (char)g->data[i] : '?';
        shown[4] = '\0';
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: offset 0: magic '%s' (0x%08x) is not 'GGUF': not a GGUF file",
                            g->path, shown, lp_load_u32(g->data));
    }
    c->pos = 4;
    lp_status st = read_u32(c, &g->version, "version");
    if (st != LP_OK)
        return st;
    if (g->version == 1)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: offset 4: GGUF version 1 is not supported (it used 32-bit counts; "
                            "re-convert the model with a current llama.cpp)",
                            g->path);
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: offset 4: version 0x%08x looks like a big-endian GGUF, which is "
                            "not supported",
                            g->path, g->version);
    if (g->version != 2 && g->version != 3)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: offset 4: GGUF version %u is not supported (only 2 and 3)",
                            g->path, g->version);
    if ((st = read_u64(c, n_tensors, "tensor count")) != LP_OK ||
        (st = read_u64(c, n_kv, "metadata key/value count")) != LP_OK)
        return st;
    uint64_t left = g->size - c->pos;
    if (*n_tensors > left / GGUF_MIN_TENSOR_BYTES)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: offset 8: tensor count %llu exceeds what a %llu-byte file can hold "
                            "(at most %llu tensor infos of %d bytes)",
                            g->path, (unsigned long long)*n_tensors, (unsigned long long)g->size,
                            (unsigned long long)(left / GGUF_MIN_TENSOR_BYTES),
                            GGUF_MIN_TENSOR_BYTES);
    if (*n_kv > left / GGUF_MIN_KV_BYTES ||
        *n_kv * GGUF_MIN_KV_BYTES + *n_tensors * GGUF_MIN_TENSOR_BYTES > left)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: offset 16: metadata key/value count %llu exceeds what a %llu-byte "
                            "file with %llu tensors can hold",
                            g->path, (unsigned long long)*n_kv, (unsigned long long)g->size,
                            (unsigned long long)*n_tensors);
    return LP_OK;
}

/* general.alignment: a uint32 power of two. */
static lp_status read_alignment(lp_gguf *g, const gguf_kv *kv, lp_error *err)
{
    if (kv->type != LP_GGUF_UINT32)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: offset %llu: general.alignment has type %s, expected uint32",
                            g->path, (unsigned long long)kv->entry_pos, gguf_type_name(kv->type));
    uint32_t alignment = lp_load_u32(g->data + kv->value_pos);
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: offset %llu: general.alignment %u is not a power of two", g->path,
                            (unsigned long long)kv->value_pos, alignment);
    g->alignment = alignment;
    return LP_OK;
}

/* The key/values, then the key table (keys are unique: llama.cpp refuses duplicates too; the
 * table also serves lookups). */
static lp_status read_kvs(lp_gguf *g, cursor *c, uint64_t n_kv)
{
    lp_error *err = c->err;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    uint64_t kv_capacity = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (!grow((void **)&g->kvs, &kv_capacity, i, n_kv, sizeof *g->kvs))
            return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for %llu metadata keys",
                                g->path, (unsigned long long)i + 1);
        g->kvs[i].entry_pos = c->pos;
        lp_status st = read_kv(g, c, &g->kvs[i]);
        g->n_kv = (int64_t)i + 1; /* so close() frees what was allocated */
        if (st == LP_OK && strcmp(g->kvs[i].key, "general.alignment") == 0)
            st = read_alignment(g, &g->kvs[i], err);
        if (st != LP_OK)
            return st;
    }
    if (g->n_kv > 0) {
        g->kv_table_size = table_size_for(g->n_kv);
        g->kv_table = calloc(g->kv_table_size, sizeof *g->kv_table);
        if (!g->kv_table)
            return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory indexing %lld keys",
                                g->path, (long long)g->n_kv);
    }
    for (int64_t i = 0; i < g->n_kv; i++)
        if (table_insert(g->kv_table, g->kv_table_size, i, kv_name, g) >= 0)
            return lp_error_set(err, LP_ERR_FORMAT, "%s: offset %llu: duplicate key '%s'",
                                g->path, (unsigned long long)g->kvs[i].entry_pos, g->kvs[i].key);
    return LP_OK;
}

/* The tensor infos, their names unique. */
static lp_status read_tensor_infos(lp_gguf *g, cursor *c, uint64_t n_tensors)
{
    lp_error *err = c->err;
    uint64_t tensor_capacity = 0;
    lp_status st = LP_OK;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (!grow((void **)&g->tensors, &tensor_capacity, i, n_tensors, sizeof *g->tensors))
            return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for %llu tensor infos",
                                g->path, (unsigned long long)i + 1);
        g->tensors[i].entry_pos = c->pos;
        st = read_tensor_info(g, c, &g->tensors[i]);
        g->n_tensors = (int64_t)i + 1;
        if (st != LP_OK)
            return st;
    }
    if (g->n_tensors == 0)
        return LP_OK;
    uint64_t names_size = table_size_for(g->n_tensors);
    int64_t *names = calloc(names_size, sizeof *names);
    if (!names)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory indexing %lld tensor names",
                            g->path, (long long)g->n_tensors);
    for (int64_t i = 0; i < g->n_tensors && st == LP_OK; i++)
        if (table_insert(names, names_size, i, tensor_name, g) >= 0)
            st = lp_error_set(err, LP_ERR_FORMAT, "%s: offset %llu: duplicate tensor name '%s'",
                              g->path, (unsigned long long)g->tensors[i].entry_pos,
                              g->tensors[i].name);
    free(names);
    return st;
}

static lp_status parse(lp_gguf *g, lp_error *err)
{
    cursor c = {g->data, g->size, 0, g->path, err};
    uint64_t n_tensors = 0, n_kv = 0;
    lp_status st;
    if ((st = read_header(g, &c, &n_tensors, &n_kv)) != LP_OK ||
        (st = read_kvs(g, &c, n_kv)) != LP_OK ||
        (st = read_tensor_infos(g, &c, n_tensors)) != LP_OK)
        return st;
    /* The data section starts at the next multiple of the alignment. */
    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    g->data_start = c.pos + pad;
    if (g->n_tensors > 0 && g->data_start > g->size)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: offset %llu: the data section would start at %llu, past the end "
                            "of the %llu-byte file",
                            g->path, (unsigned long long)c.pos, (unsigned long long)g->data_start,
                            (unsigned long long)g->size);
    return check_tensor_layout(g, err);
}

static lp_status open_common(lp_gguf *g, lp_gguf **out, lp_error *err)
{
    lp_status st = parse(g, err);
    if (st != LP_OK) {
        lp_gguf_close(g);
        return st;
    }
    *out = g;
    return LP_OK;
}

lp_status lp_gguf_open_memory(const void *data, size_t size, const char *name, lp_gguf **out,
                              lp_error *err)
{
    *out = NULL;
    if (!name)
        name = "<memory>";
    lp_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
    g->path = malloc(strlen(name) + 1);
    if (!g->path) {
        free(g);
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
    }
    strcpy(g->path, name);
    g->data = data;
    g->size = size;
    return open_common(g, out, err);
}

lp_status lp_gguf_open(const char *path, lp_gguf **out, lp_error *err)
{
    *out = NULL;
    lp_mapped_file map;
    lp_status st = lp_map_file(path, &map, err);
    if (st != LP_OK)
        return st;
    lp_gguf *g = calloc(1, sizeof *g);
    char *copy = malloc(strlen(path) + 1);
    if (!g || !copy) {
        free(g);
        free(copy);
        lp_unmap_file(&map);
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", path);
    }
    strcpy(copy, path);
    g->path = copy;
    g->map = map;
    g->mapped = true;
    g->data = map.data;
    g->size = map.size;
    return open_common(g, out, err);
}

void lp_gguf_close(lp_gguf *g)
{
    if (!g)
        return;
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->kvs[i].key);
        free(g->kvs[i].str_pos);
    }
    free(g->kvs);
    free(g->kv_table);
    for (int64_t i = 0; i < g->n_tensors; i++)
        free(g->tensors[i].name);
    free(g->tensors);
    if (g->mapped)
        lp_unmap_file(&g->map);
    free(g->path);
    free(g);
}

uint32_t lp_gguf_version(const lp_gguf *g) { return g->version; }
const char *lp_gguf_path(const lp_gguf *g) { return g->path; }

/* ---------------------------------------------------------------------------------------------
 * Metadata access.
 */

int64_t lp_gguf_n_kv(const lp_gguf *g) { return g->n_kv; }

int64_t lp_gguf_find_key(const lp_gguf *g, const char *key)
{
    if (!key || g->n_kv == 0)
        return -1;
    uint64_t slot = hash_name(key) & (g->kv_table_size - 1);
    while (g->kv_table[slot] != 0) {
        int64_t i = g->kv_table[slot] - 1;
        if (strcmp(g->kvs[i].key, key) == 0)
            return i;
        slot = (slot + 1) & (g->kv_table_size - 1);
    }
    return -1;
}

static const gguf_kv *kv_at(const lp_gguf *g, int64_t kv)
{
    return (kv >= 0 && kv < g->n_kv) ? &g->kvs[kv] : NULL;
}

const char *lp_gguf_key_name(const lp_gguf *g, int64_t kv)
{
    const gguf_kv *p = kv_at(g, kv);
    return p ? p->key : NULL;
}

lp_gguf_type lp_gguf_kv_type(const lp_gguf *g, int64_t kv)
{
    const gguf_kv *p = kv_at(g, kv);
    return p ? p->type : LP_GGUF_TYPE_COUNT;
}

lp_gguf_type lp_gguf_arr_type(const lp_gguf *g, int64_t kv)
{
    const gguf_kv *p = kv_at(g, kv);
    return p && p->type == LP_GGUF_ARRAY ? p->arr_type : LP_GGUF_TYPE_COUNT;
}

uint64_t lp_gguf_arr_len(const lp_gguf *g, int64_t kv)
{
    const gguf_kv *p = kv_at(g, kv);
    return p && p->type == LP_GGUF_ARRAY ? p->arr_len : 0;
}

/* Integer value of a scalar at p; false for non-integer types or uint64 values above INT64_MAX. */
static bool load_int(lp_gguf_type type, const uint8_t *p, int64_t *out)
{
    switch (type) {
    case LP_GGUF_UINT8: case LP_GGUF_BOOL: *out = p[0]; return true;
    case LP_GGUF_INT8: *out = (int8_t)p[0]; return true;
    case LP_GGUF_UINT16: *out = lp_load_u16(p); return true;
    case LP_GGUF_INT16: *out = (int16_t)lp_load_u16(p); return true;
    case LP_GGUF_UINT32: *out = lp_load_u32(p); return true;
    case LP_GGUF_INT32: *out = lp_load_i32(p); return true;
    case LP_GGUF_INT64: *out = (int64_t)lp_load_u64(p); return true;
    case LP_GGUF_UINT64: {
        uint64_t v = lp_load_u64(p);
        if (v > (uint64_t)INT64_MAX)
            return false;
        *out = (int64_t)v;
        return true;
    }
    default: return false;
    }
}

static bool load_float(lp_gguf_type type, const uint8_t *p, double *out)
{
    if (type == LP_GGUF_FLOAT32) {
        *out = (double)lp_load_f32(p);
        return true;
    }
    if (type == LP_GGUF_FLOAT64) {
        uint64_t bits = lp_load_u64(p);
        memcpy(out, &bits, 8);
        return true;
    }
    if (type == LP_GGUF_UINT64) { /* keep values above INT64_MAX */
        *out = (double)lp_load_u64(p);
        return true;
    }
    if (type == LP_GGUF_BOOL)
        return false;
    int64_t v;
    if (!load_int(type, p, &v))
        return false;
    *out = (double)v;
    return true;
}

static const gguf_kv *find(const lp_gguf *g, const char *key)
{
    return kv_at(g, lp_gguf_find_key(g, key));
}

bool lp_gguf_get_int(const lp_gguf *g, const char *key, int64_t *out)
{
    const gguf_kv *kv = find(g, key);
    return kv && load_int(kv->type, g->data + kv->value_pos, out);
}

bool lp_gguf_get_float(const lp_gguf *g, const char *key, double *out)
{
    const gguf_kv *kv = find(g, key);
    return kv && load_float(kv->type, g->data + kv->value_pos, out);
}

bool lp_gguf_get_bool(const lp_gguf *g, const char *key, bool *out)
{
    const gguf_kv *kv = find(g, key);
    if (!kv || kv->type != LP_GGUF_BOOL)
        return false;
    *out = g->data[kv->value_pos] != 0;
    return true;
}

bool lp_gguf_get_str(const lp_gguf *g, const char *key, const char **s, size_t *len)
{
    const gguf_kv *kv = find(g, key);
    if (!kv || kv->type != LP_GGUF_STRING)
        return false;
    /* value_pos is the length field; the bytes follow (validated at open). */
    *len = (size_t)lp_load_u64(g->data + kv->value_pos);
    *s = (const char *)g->data + kv->value_pos + 8;
    return true;
}

static const uint8_t *array_elem(const lp_gguf *g, int64_t kv, uint64_t index, lp_gguf_type *type)
{
    const gguf_kv *p = kv_at(g, kv);
    if (!p || p->type != LP_GGUF_ARRAY || index >= p->arr_len)
        return NULL;
    uint64_t size = lp_gguf_scalar_bytes(p->arr_type);
    if (!size)
        return NULL;
    *type = p->arr_type;
    return g->data + p->value_pos + index * size;
}

bool lp_gguf_arr_int(const lp_gguf *g, int64_t kv, uint64_t index, int64_t *out)
{
    lp_gguf_type type;
    const uint8_t *p = array_elem(g, kv, index, &type);
    return p && load_int(type, p, out);
}

bool lp_gguf_arr_float(const lp_gguf *g, int64_t kv, uint64_t index, double *out)
{
    lp_gguf_type type;
    const uint8_t *p = array_elem(g, kv, index, &type);
    return p && load_float(type, p, out);
}

bool lp_gguf_arr_str(const lp_gguf *g, int64_t kv, uint64_t index, const char **s, size_t *len)
{
    const gguf_kv *p = kv_at(g, kv);
    if (!p || p->type != LP_GGUF_ARRAY || p->arr_type != LP_GGUF_STRING || index >= p->arr_len)
        return false;
    uint64_t at = p->str_pos[index];
    *len = (size_t)lp_load_u64(g->data + at);
    *s = (const char *)g->data + at + 8;
    return true;
}

/* ---------------------------------------------------------------------------------------------
 * Tensor infos.
 */

int64_t lp_gguf_n_tensors(const lp_gguf *g) { return g->n_tensors; }

static const gguf_tensor *tensor_at(const lp_gguf *g, int64_t index)
{
    return (index >= 0 && index < g->n_tensors) ? &g->tensors[index] : NULL;
}

const char *lp_gguf_tensor_name(const lp_gguf *g, int64_t index)
{
    const gguf_tensor *t = tensor_at(g, index);
    return t ? t->name : NULL;
}

int64_t lp_gguf_find_tensor(const lp_gguf *g, const char *name)
{
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0)
            return i;
    return -1;
}

lp_dtype lp_gguf_tensor_dtype(const lp_gguf *g, int64_t index)
{
    const gguf_tensor *t = tensor_at(g, index);
    return t ? t->dtype : LP_DTYPE_INVALID;
}

int lp_gguf_tensor_n_dims(const lp_gguf *g, int64_t index)
{
    const gguf_tensor *t = tensor_at(g, index);
    return t ? t->n_dims : 0;
}

int64_t lp_gguf_tensor_ne(const lp_gguf *g, int64_t index, int dim)
{
    const gguf_tensor *t = tensor_at(g, index);
    if (!t || dim < 0)
        return 0;
    return dim < t->n_dims ? t->ne[dim] : 1; /* ggml pads shapes with ones */
}

uint64_t lp_gguf_tensor_offset(const lp_gguf *g, int64_t index)
{
    const gguf_tensor *t = tensor_at(g, index);
    return t ? t->offset : 0;
}

uint64_t lp_gguf_tensor_bytes(const lp_gguf *g, int64_t index)
{
    const gguf_tensor *t = tensor_at(g, index);
    return t ? t->n_bytes : 0;
}

const void *lp_gguf_tensor_data(const lp_gguf *g, int64_t index)
{
    const gguf_tensor *t = tensor_at(g, index);
    return t ? g->data + t->offset : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Tensors for the catalogue: shapes outermost first, sizes checked once more against the dtype.
 */

static lp_status describe_tensor(const lp_gguf *g, int64_t i, lp_tensor_desc *t, lp_error *err)
{
    const char *file = lp_path_basename(g->path);
    t->name = lp_gguf_tensor_name(g, i);
    t->dtype = lp_gguf_tensor_dtype(g, i);
    t->n_dims = lp_gguf_tensor_n_dims(g, i);
    if (!t->name || t->dtype == LP_DTYPE_INVALID)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor %" PRId64 " has no known type", file,
                            i);
    if (t->n_dims < 0 || t->n_dims > LP_TENSOR_DESC_MAX_DIMS)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: tensor '%s': %d dimensions exceed the limit of %d", file, t->name,
                            t->n_dims, LP_TENSOR_DESC_MAX_DIMS);
    uint64_t n_elements = 1;
    for (int d = 0; d < t->n_dims; d++) {
        /* GGUF lists ne[0] (the row length) first; shapes here are outermost first */
        int64_t ne = lp_gguf_tensor_ne(g, i, d);
        if (ne < 0 || !lp_mul_u64(n_elements, (uint64_t)ne, &n_elements) ||
            n_elements > (uint64_t)INT64_MAX)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: tensor '%s': dimension %d (%" PRId64
                                ") is negative or overflows 64 bits",
                                file, t->name, d, ne);
        t->shape[t->n_dims - 1 - d] = ne;
    }
    t->n_elements = (int64_t)n_elements;
    t->n_bytes = lp_gguf_tensor_bytes(g, i);
    uint64_t need;
    if (!lp_dtype_bytes_for(t->dtype, n_elements, &need) || need != t->n_bytes)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': %" PRIu64 " elements of %s do not make %" PRIu64
                            " bytes",
                            file, t->name, n_elements, lp_dtype_name(t->dtype), t->n_bytes);
    t->file_offset = lp_gguf_tensor_offset(g, i);
    t->data = lp_gguf_tensor_data(g, i);
    if (!t->data && t->n_bytes > 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': no data in the file", file,
                            t->name);
    return LP_OK;
}

lp_status lp_gguf_read_tensors(const lp_gguf *g, const lp_tensor_sink *sink, lp_error *err)
{
    for (int64_t i = 0; i < g->n_tensors; i++) {
        lp_tensor_desc t = {0};
        lp_status st = describe_tensor(g, i, &t, err);
        if (st != LP_OK || (st = sink->add(sink->ctx, &t, err)) != LP_OK)
            return st;
    }
    return LP_OK;
}
