/* safetensors reader: validates the JSON header at least as strictly as the format's own loader
 * and appends one lp_tensor per entry, pointing into the mapped file.
 *
 * Byte layout (all little-endian):
 *
 *   offset 0        u64 N            length of the JSON header, at most 100,000,000
 *   offset 8        N bytes          UTF-8 JSON object, usually padded with spaces:
 *                                      { "__metadata__": {"format": "pt", ...},   (optional,
 *                                        "name": {"dtype": "F32",                  string values)
 *                                                 "shape": [512, 64],
 *                                                 "data_offsets": [begin, end]}, ... }
 *   offset 8 + N    data section     tensors back to back; [begin, end) are relative to its start
 *
 * Rules (as the reference Rust loader enforces them, plus duplicate keys): the header starts with
 * '{' and lies inside the file; the JSON is valid UTF-8 with no duplicate keys; every tensor's
 * end - begin equals dtype size x product(shape) (64-bit, overflow-checked); sorted by begin, the
 * ranges are contiguous, start at 0, never overlap, and end exactly at the end of the file.
 */
#include "inspect/weights_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/checked.h"

#define ST_MAX_HEADER 100000000ull

typedef struct st_entry {
    const char *name; /* borrowed from the JSON */
    lp_dtype dtype;
    int n_dims;
    int64_t shape[LP_MAX_DIMS];
    int64_t n_elements;
    uint64_t begin, end;
} st_entry;

static lp_dtype dtype_from_st(const char *s, bool *known_unsupported)
{
    static const struct {
        const char *name;
        lp_dtype dtype;
    } table[] = {
        {"F64", LP_DTYPE_F64},         {"F32", LP_DTYPE_F32},         {"F16", LP_DTYPE_F16},
        {"BF16", LP_DTYPE_BF16},       {"F8_E4M3", LP_DTYPE_F8_E4M3}, {"F8_E5M2", LP_DTYPE_F8_E5M2},
        {"I64", LP_DTYPE_I64},         {"I32", LP_DTYPE_I32},         {"I16", LP_DTYPE_I16},
        {"I8", LP_DTYPE_I8},           {"U64", LP_DTYPE_U64},         {"U32", LP_DTYPE_U32},
        {"U16", LP_DTYPE_U16},         {"U8", LP_DTYPE_U8},           {"BOOL", LP_DTYPE_BOOL},
    };
    /* Newer safetensors dtypes that loupe has no lp_dtype for (yet). */
    static const char *const later[] = {"F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64", NULL};
    *known_unsupported = false;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, s) == 0)
            return table[i].dtype;
    for (size_t i = 0; later[i]; i++)
        if (strcmp(later[i], s) == 0)
            *known_unsupported = true;
    return LP_DTYPE_INVALID;
}

static int compare_entries(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* A JSON integer >= 0, read into *out; false otherwise. */
static bool json_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static lp_status parse_entry(const char *file, const char *key, json_t *value, st_entry *e,
                             lp_error *err)
{
    memset(e, 0, sizeof *e);
    e->name = key;
    if (!json_is_object(value))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': header entry is not an object",
                            file, key);
    json_t *dtype = json_object_get(value, "dtype");
    json_t *shape = json_object_get(value, "shape");
    json_t *offsets = json_object_get(value, "data_offsets");
    if (!json_is_string(dtype))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': missing or non-string 'dtype'",
                            file, key);
    if (!json_is_array(shape))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': missing or non-array 'shape'",
                            file, key);
    if (!json_is_array(offsets) || json_array_size(offsets) != 2)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': 'data_offsets' must be an array [begin, end]", file,
                            key);
    bool later = false;
    e->dtype = dtype_from_st(json_string_value(dtype), &later);
    if (e->dtype == LP_DTYPE_INVALID)
        return lp_error_set(err, later ? LP_ERR_UNSUPPORTED : LP_ERR_FORMAT,
                            "%s: tensor '%s': %s dtype '%s'", file, key,
                            later ? "unsupported" : "unknown", json_string_value(dtype));
    size_t n_dims = json_array_size(shape);
    if (n_dims > LP_MAX_DIMS)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: tensor '%s': %zu dimensions exceed the limit of %d", file, key,
                            n_dims, LP_MAX_DIMS);
    e->n_dims = (int)n_dims;
    uint64_t n_elements = 1;
    for (size_t d = 0; d < n_dims; d++) {
        uint64_t dim;
        if (!json_u64(json_array_get(shape, d), &dim))
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: tensor '%s': shape[%zu] is not a non-negative integer", file,
                                key, d);
        e->shape[d] = (int64_t)dim;
        if (!lp_mul_u64(n_elements, dim, &n_elements) || n_elements > (uint64_t)INT64_MAX)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: tensor '%s': shape product overflows 64 bits at shape[%zu] = "
                                "%" PRIu64,
                                file, key, d, dim);
    }
    e->n_elements = (int64_t)n_elements;
    if (!json_u64(json_array_get(offsets, 0), &e->begin) ||
        !json_u64(json_array_get(offsets, 1), &e->end))
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets are not non-negative integers", file,
                            key);
    if (e->end < e->begin)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                            "] end before start",
                            file, key, e->begin, e->end);
    uint64_t bytes;
    if (!lp_dtype_bytes_for(e->dtype, n_elements, &bytes))
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': byte size of %" PRIu64 " x %s overflows 64 bits",
                            file, key, n_elements, lp_dtype_name(e->dtype));
    if (e->end - e->begin != bytes)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                            " bytes but dtype %s x shape needs %" PRIu64,
                            file, key, e->begin, e->end, e->end - e->begin,
                            json_string_value(dtype), bytes);
    return LP_OK;
}

/* On an error about one entry, say where the entry is: the absolute byte offset of its quoted
 * name in the header (a plain search; names with JSON escapes are not found and get no
 * location). Runs only on the error path. */
static void add_entry_location(lp_error *err, const char *header, size_t header_len,
                               const char *key)
{
    if (!err)
        return;
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl + 2 <= header_len; i++) {
        if (header[i] != '"' || memcmp(header + i + 1, key, kl) != 0 || header[i + 1 + kl] != '"')
            continue;
        size_t j = i + kl + 2;
        while (j < header_len && (header[j] == ' ' || header[j] == '\t' || header[j] == '\n' ||
                                  header[j] == '\r'))
            j++;
        if (j < header_len && header[j] == ':') {
            size_t used = strlen(err->msg);
            snprintf(err->msg + used, sizeof err->msg - used, " (header entry at file byte %zu)",
                     8 + i);
            return;
        }
    }
}

static lp_status check_metadata(const char *file, json_t *meta, lp_error *err)
{
    if (!json_is_object(meta))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: '__metadata__' is not an object", file);
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v)
    {
        if (!json_is_string(v))
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: '__metadata__' value of '%s' is not a string", file, k);
    }
    return LP_OK;
}

lp_status lp_safetensors_parse(lp_weights *weights, int file_index, lp_error *err)
{
    const lp_mapped_file *map = &weights->files[file_index];
    const char *file = lp_path_basename(map->path);
    if (map->size < 8)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: file is %zu bytes, too short for the 8-byte header length", file,
                            map->size);
    uint64_t header_len = lp_load_u64(map->data);
    if (header_len > ST_MAX_HEADER)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header length %" PRIu64 " at byte 0 exceeds the limit of %llu",
                            file, header_len, ST_MAX_HEADER);
    if (header_len > map->size - 8)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header length %" PRIu64
                            " at byte 0 runs past the end of the file (%zu bytes)",
                            file, header_len, map->size);
    const char *header = (const char *)map->data + 8;
    if (header_len == 0 || header[0] != '{')
        return lp_error_set(err, LP_ERR_FORMAT, "%s: header at byte 8 does not start with '{'",
                            file);
    json_error_t jerr;
    json_t *root = json_loadb(header, (size_t)header_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: header JSON at byte %lld: %s", file,
                            (long long)(8 + jerr.position), jerr.text);
    lp_status status = LP_OK;
    st_entry *entries = NULL;
    if (!json_is_object(root)) {
        status = lp_error_set(err, LP_ERR_FORMAT, "%s: header JSON is not an object", file);
        goto done;
    }
    /* The JSON was at most header_len bytes, so the entry count is bounded by the file. */
    size_t n_keys = json_object_size(root);
    entries = calloc(n_keys ? n_keys : 1, sizeof *entries);
    if (!entries) {
        status = lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for %zu header entries", file,
                              n_keys);
        goto done;
    }
    size_t n = 0;
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value)
    {
        if (strcmp(key, "__metadata__") == 0) {
            status = check_metadata(file, value, err);
        } else {
            status = parse_entry(file, key, value, &entries[n], err);
            n++;
            if (status != LP_OK)
                add_entry_location(err, header, (size_t)header_len, key);
        }
        if (status != LP_OK)
            goto done;
    }
    qsort(entries, n, sizeof *entries, compare_entries);
    uint64_t data_size = map->size - 8 - header_len;
    uint64_t data_start = 8 + header_len;
    uint64_t expected = 0;
    for (size_t i = 0; i < n; i++) {
        const st_entry *e = &entries[i];
        if (e->begin != expected) {
            if (e->begin < expected)
                status = lp_error_set(err, LP_ERR_FORMAT,
                                      "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                                      "] overlap tensor '%s' ending at %" PRIu64
                                      " (file byte %" PRIu64 ")",
                                      file, e->name, e->begin, e->end, entries[i - 1].name,
                                      expected, data_start + e->begin);
            else
                status = lp_error_set(err, LP_ERR_FORMAT,
                                      "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                                      "] leave a gap after offset %" PRIu64
                                      " (file byte %" PRIu64 ")",
                                      file, e->name, e->begin, e->end, expected,
                                      data_start + expected);
            add_entry_location(err, header, (size_t)header_len, e->name);
            goto done;
        }
        if (e->end > data_size) {
            status = lp_error_set(err, LP_ERR_FORMAT,
                                  "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                                  "] end at byte %" PRIu64 ", past the end of the file (%zu bytes)",
                                  file, e->name, e->begin, e->end, data_start + e->end,
                                  map->size);
            add_entry_location(err, header, (size_t)header_len, e->name);
            goto done;
        }
        expected = e->end;
    }
    if (expected != data_size) {
        status = lp_error_set(err, LP_ERR_FORMAT,
                              "%s: tensors cover %" PRIu64 " bytes of the data section at byte %"
                              PRIu64 ", but it holds %" PRIu64 " (file %zu bytes)",
                              file, expected, data_start, data_size, map->size);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const st_entry *e = &entries[i];
        lp_tensor t = {0};
        t.name = e->name;
        t.dtype = e->dtype;
        t.n_dims = e->n_dims;
        memcpy(t.shape, e->shape, sizeof t.shape);
        t.n_elements = e->n_elements;
        t.n_bytes = e->end - e->begin;
        t.file_index = file_index;
        t.file_offset = data_start + e->begin;
        t.data = map->data + t.file_offset;
        status = lp_weights_add_tensor(weights, &t, err);
        if (status != LP_OK)
            goto done;
    }
done:
    free(entries);
    json_decref(root);
    return status;
}
