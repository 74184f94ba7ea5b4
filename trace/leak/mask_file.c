/* The mask-tensor checker: a boolean or additive mask from a user's own code, cell by cell
 * against its definition, and what its fill value does in fp32, fp16 and bf16. */
#include "trace/leak/leak.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/arena.h"
#include "core/text.h"
#include "core/checked.h"
#include "core/mapfile.h"
#include "inspect/inspect.h"
#include "inspect/formats/detect.h"
#include "inspect/formats/npy.h"

void lp_leak_mask_opts_init(lp_leak_mask_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->def.kind = LP_LEAK_DEF_CAUSAL;
    snprintf(opts->def.text, sizeof opts->def.text, "causal");
    opts->encoding = LP_MASK_ENC_AUTO;
    opts->masked_below = LP_LEAK_MASKED_BELOW;
    opts->max_listed = LP_LEAK_MAX_LISTED;
}

const char *lp_mask_encoding_name(lp_mask_encoding enc)
{
    switch (enc) {
    case LP_MASK_ENC_BOOL: return "bool";
    case LP_MASK_ENC_ADDITIVE: return "additive";
    case LP_MASK_ENC_AUTO: return "auto";
    default: return "unknown";
    }
}

void lp_leak_mask_report_free(lp_leak_mask_report *rep)
{
    if (!rep)
        return;
    free(rep->leaks); /* the three lists are one block */
    rep->leaks = rep->blocked = rep->masked_rows = NULL;
}

bool lp_leak_mask_passed(const lp_leak_mask_report *rep)
{
    return rep->leak_count == 0 && rep->blocked_count == 0 && rep->nan_rows == 0;
}

static bool dtype_is_boolish(lp_dtype dt)
{
    switch (dt) {
    case LP_DTYPE_BOOL: case LP_DTYPE_U8: case LP_DTYPE_I8: case LP_DTYPE_U16: case LP_DTYPE_I16:
    case LP_DTYPE_U32: case LP_DTYPE_I32: case LP_DTYPE_U64: case LP_DTYPE_I64:
        return true;
    default:
        return false;
    }
}

static bool dtype_is_additive(lp_dtype dt)
{
    return dt == LP_DTYPE_F32 || dt == LP_DTYPE_F64 || dt == LP_DTYPE_F16 || dt == LP_DTYPE_BF16;
}

/* Cell i as a double (floats) or 0/1 (anything nonzero is 1 for integer types). */
static double cell_value(const uint8_t *data, lp_dtype dt, int64_t i)
{
    const uint8_t *p;
    switch (dt) {
    case LP_DTYPE_F32: return (double)lp_load_f32(data + (uint64_t)i * 4);
    case LP_DTYPE_F64: {
        double v;
        memcpy(&v, data + (uint64_t)i * 8, 8);
        return v;
    }
    case LP_DTYPE_F16: return (double)lp_f16_to_f32(lp_load_u16(data + (uint64_t)i * 2));
    case LP_DTYPE_BF16: return (double)lp_bf16_to_f32(lp_load_u16(data + (uint64_t)i * 2));
    case LP_DTYPE_BOOL: case LP_DTYPE_U8: case LP_DTYPE_I8: return data[i] != 0;
    case LP_DTYPE_U16: case LP_DTYPE_I16: return lp_load_u16(data + (uint64_t)i * 2) != 0;
    case LP_DTYPE_U32: case LP_DTYPE_I32: return lp_load_u32(data + (uint64_t)i * 4) != 0;
    case LP_DTYPE_U64: case LP_DTYPE_I64:
        p = data + (uint64_t)i * 8;
        return lp_load_u64(p) != 0;
    default: return 0.0;
    }
}

static void list_add(lp_leak_coord *list, int64_t *n, int64_t max, lp_leak_coord c)
{
    if (*n < max)
        list[(*n)++] = c;
}

/* Where a leak sits, for naming the bug. */
static void classify_leak(lp_leak_cell_stats *st, const lp_leak_def *def, const uint8_t *real,
                          int64_t q, int64_t k)
{
    st->leak_count++;
    if (real && !real[k])
        st->leak_padding_key++;
    else if (k == q + 1)
        st->leak_next++;
    else if (k > q + 1)
        st->leak_future++;
    else if (def->kind == LP_LEAK_DEF_WINDOW && q - k == def->window)
        st->leak_window_edge++;
    else if (def->kind == LP_LEAK_DEF_DOC)
        st->leak_cross_doc++;
}

/* What `fill` becomes in dtype: overflow and the score below which score + fill overflows. */
static void fill_verdict(lp_fill_verdict *v, lp_dtype dt, float fill)
{
    memset(v, 0, sizeof *v);
    v->dtype = dt;
    /* Largest finite magnitude and the magnitude that rounds to infinity. */
    double inf_at;
    if (dt == LP_DTYPE_F16) {
        v->value = lp_f16_to_f32(lp_f32_to_f16(fill));
        inf_at = 65520.0;
    } else if (dt == LP_DTYPE_BF16) {
        v->value = lp_bf16_to_f32(lp_f32_to_bf16(fill));
        inf_at = 3.3961775292304476e38; /* (2 - 2^-8) * 2^127: halfway above bf16's max */
    } else {
        v->value = fill;
        inf_at = 3.4028235677973366e38 * (1.0 + 1.0 / 16777216.0);
    }
    v->overflows = isfinite(fill) && isinf(v->value);
    if (isinf(v->value))
        v->overflow_score = (double)INFINITY; /* already -inf: any score gives -inf */
    else
        v->overflow_score = -(inf_at + (double)v->value); /* score + fill <= -inf_at */
}

/* Rank, dimensions, squareness, dtype and encoding, and that the document ids and the padding
 * fit the mask; fills out's shape fields. */
static lp_status check_shape(lp_dtype dtype, int n_dims, const int64_t *shape, const char *name,
                             const lp_leak_mask_opts *opts, lp_leak_mask_report *out,
                             lp_error *err)
{
    if (n_dims != 2 && n_dims != 4) {
        char dims[128] = "";
        size_t used = 0;
        for (int d = 0; d < n_dims && d < LP_MAX_DIMS && used + 24 < sizeof dims; d++)
            used += (size_t)snprintf(dims + used, sizeof dims - used, "%s%lld", d ? ", " : "",
                                     (long long)shape[d]);
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: mask has rank %d [%s] (expected [T, T], [B, 1, T, T] or "
                            "[B, H, T, T])",
                            name, n_dims, dims);
    }
    for (int d = 0; d < n_dims; d++) {
        out->shape[d] = shape[d];
        if (shape[d] <= 0)
            return lp_error_set(err, LP_ERR_FORMAT, "%s: dimension %d is %lld (expected >= 1)",
                                name, d, (long long)shape[d]);
    }
    int64_t nq = shape[n_dims - 2], nk = shape[n_dims - 1];
    if (nq != nk)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: mask is %lld queries x %lld keys (expected square [T, T]: the "
                            "definitions compare query and key positions)",
                            name, (long long)nq, (long long)nk);
    out->T = nq;
    out->n_batch = n_dims == 4 ? shape[0] : 1;
    out->n_heads = n_dims == 4 ? shape[1] : 1;
    if (!dtype_is_boolish(dtype) && !dtype_is_additive(dtype))
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: mask dtype %s (expected bool, an integer type, f16, bf16, f32 or "
                            "f64)",
                            name, lp_dtype_name(dtype));
    lp_mask_encoding enc = opts->encoding;
    if (enc == LP_MASK_ENC_AUTO)
        enc = dtype_is_additive(dtype) ? LP_MASK_ENC_ADDITIVE : LP_MASK_ENC_BOOL;
    if (enc == LP_MASK_ENC_ADDITIVE && !dtype_is_additive(dtype))
        return lp_error_set(err, LP_ERR_USAGE, "%s: an additive mask needs a float dtype, not %s",
                            name, lp_dtype_name(dtype));
    out->encoding = enc;
    return LP_OK;
}

/* The document ids and the padding must give one value per position: [T] or [B, T]. */
static lp_status check_side_inputs(const char *name, const lp_leak_mask_opts *opts,
                                   const lp_leak_mask_report *out, lp_error *err)
{
    if (opts->def.kind == LP_LEAK_DEF_DOC &&
        (opts->def.n_doc_ids != out->T ||
         (opts->def.n_doc_rows != 1 && opts->def.n_doc_rows != out->n_batch)))
        return lp_error_set(err, LP_ERR_USAGE,
                            "%s: %lld x %lld document ids for a mask of batch %lld and %lld "
                            "positions (need one per position: [T] or [B, T])",
                            name, (long long)opts->def.n_doc_rows, (long long)opts->def.n_doc_ids,
                            (long long)out->n_batch, (long long)out->T);
    if (opts->real && (opts->real_len != out->T ||
                       (opts->n_real_batch != 1 && opts->n_real_batch != out->n_batch)))
        return lp_error_set(err, LP_ERR_USAGE,
                            "%s: padding of %lld x %lld positions for a mask of batch %lld and "
                            "%lld positions (need [T] or [B, T])",
                            name, (long long)opts->n_real_batch, (long long)opts->real_len,
                            (long long)out->n_batch, (long long)out->T);
    return LP_OK;
}

/* Additive masks: the fill is the most negative value; what it becomes in f32, f16, bf16. */
static void find_fill(lp_leak_mask_report *out, const uint8_t *data, lp_dtype dtype,
                      double masked_below)
{
    float fill = 0.0f;
    for (int64_t i = 0; i < out->n_cells; i++) {
        double v = cell_value(data, dtype, i);
        if (v < (double)fill)
            fill = (float)v;
    }
    out->has_fill = fill < 0.0f;
    out->fill = fill;
    out->weak_fill = out->has_fill && (double)fill > masked_below;
    out->leak_gap = isinf(fill) ? (double)INFINITY : -(double)fill + LP_LEAK_NEGLIGIBLE_LOG;
    fill_verdict(&out->fills[0], LP_DTYPE_F32, fill);
    fill_verdict(&out->fills[1], LP_DTYPE_F16, fill);
    fill_verdict(&out->fills[2], LP_DTYPE_BF16, fill);
}

/* What one query row has seen so far. */
typedef struct mask_row {
    bool any_visible, has_nan;
    bool all_inf[3]; /* every cell -inf in f32, f16, bf16 (softmax NaN) */
} mask_row;

/* An additive cell: visible unless <= masked_below; NaN and +inf poison the whole row (inf - inf
 * in the softmax's max subtraction), so they are never "masked". */
static bool additive_visible(double v, double masked_below, mask_row *row,
                             lp_leak_mask_report *out)
{
    bool visible;
    if (isnan(v) || (isinf(v) && v > 0)) {
        row->has_nan = true;
        out->nan_cells++;
        visible = true;
    } else {
        visible = v > masked_below;
    }
    /* A cell is -inf in a narrower dtype when its rounding overflows; conversions only while the
     * row can still be all -inf. */
    float f = (float)v;
    if (row->all_inf[0])
        row->all_inf[0] = isinf(f) && f < 0;
    if (row->all_inf[1]) {
        float h16 = lp_f16_to_f32(lp_f32_to_f16(f));
        row->all_inf[1] = isinf(h16) && h16 < 0;
    }
    if (row->all_inf[2]) {
        float b16 = lp_bf16_to_f32(lp_f32_to_bf16(f));
        row->all_inf[2] = isinf(b16) && b16 < 0;
    }
    return visible;
}

/* The future cells of the compared rows (key > query, real keys) and how many the mask shows:
 * "no-mask" needs every one of them visible, "off-by-one" every (q, q + 1). */
typedef struct future_cells {
    int64_t upper, upper_visible, next, next_visible;
} future_cells;

/* The mask's cell (q, k) of item b, head h against the definition. */
static void judge_cell(lp_leak_mask_report *out, const lp_leak_mask_opts *opts,
                       const uint8_t *real, int64_t max_listed, lp_leak_coord c, bool visible,
                       future_cells *fc)
{
    if (c.key > c.query && (!real || real[c.key])) {
        fc->upper++;
        fc->upper_visible += visible;
        fc->next += c.key == c.query + 1;
        fc->next_visible += visible && c.key == c.query + 1;
    }
    bool ref = lp_leak_def_allows(&opts->def, c.batch, c.query, c.key) && (!real || real[c.key]);
    if (visible && !ref) {
        out->leak_count++;
        list_add(out->leaks, &out->n_leaks_listed, max_listed, c);
        classify_leak(&out->cells, &opts->def, real, c.query, c.key);
    } else if (!visible && ref) {
        out->blocked_count++;
        list_add(out->blocked, &out->n_blocked_listed, max_listed, c);
        if (c.key < c.query)
            out->cells.blocked_past++;
    }
}

/* One query row: T cells starting at cell index `cell`. */
static void check_row(lp_leak_mask_report *out, const lp_leak_mask_opts *opts, const uint8_t *data,
                      lp_dtype dtype, int64_t b, int64_t h, int64_t q, int64_t cell,
                      future_cells *fc)
{
    int64_t T = out->T, max_listed = opts->max_listed > 0 ? opts->max_listed : 0;
    bool additive = out->encoding == LP_MASK_ENC_ADDITIVE;
    const uint8_t *real = opts->real ? opts->real + (opts->n_real_batch == 1 ? 0 : b) * T : NULL;
    bool padding_row = real && !real[q];
    out->padding_rows += padding_row;
    mask_row row = {false, false, {true, true, true}};
    for (int64_t k = 0; k < T; k++) {
        double v = cell_value(data, dtype, cell + k);
        bool visible = additive ? additive_visible(v, opts->masked_below, &row, out)
                                : (v != 0.0) != opts->true_means_masked;
        row.any_visible = row.any_visible || (visible && !isnan(v));
        if (!padding_row)
            judge_cell(out, opts, real, max_listed, (lp_leak_coord){b, h, q, k}, visible, fc);
    }
    if (!row.any_visible && !row.has_nan && !padding_row) {
        out->fully_masked_rows++;
        list_add(out->masked_rows, &out->n_masked_rows_listed, max_listed,
                 (lp_leak_coord){b, h, q, -1});
    }
    if (additive) {
        if (row.has_nan || row.all_inf[0])
            out->nan_rows++;
        for (int d = 0; d < 3; d++)
            out->fills[d].nan_rows += row.has_nan || row.all_inf[d];
    }
}

lp_status lp_leak_check_mask(const void *data_v, lp_dtype dtype, int n_dims, const int64_t *shape,
                             const char *name, const lp_leak_mask_opts *opts,
                             lp_leak_mask_report *out, lp_error *err)
{
    const uint8_t *data = data_v;
    memset(out, 0, sizeof *out);
    out->dtype = dtype;
    out->n_dims = n_dims;
    lp_status st = check_shape(dtype, n_dims, shape, name, opts, out, err);
    if (st == LP_OK)
        st = check_side_inputs(name, opts, out, err);
    if (st != LP_OK)
        return st;
    int64_t n_cells = 1;
    for (int d = 0; d < n_dims; d++)
        if (!lp_mul_i64(n_cells, shape[d], &n_cells))
            return lp_error_set(err, LP_ERR_RANGE, "%s: mask size overflows", name);
    out->n_cells = n_cells;
    int64_t max_listed = opts->max_listed > 0 ? opts->max_listed : 0;
    int64_t list_len = max_listed > 0 ? max_listed : 1;
    const lp_owned_array lists[] = {
        LP_OWNED_ARRAY(lp_leak_mask_report, leaks, list_len),
        LP_OWNED_ARRAY(lp_leak_mask_report, blocked, list_len),
        LP_OWNED_ARRAY(lp_leak_mask_report, masked_rows, list_len),
    };
    if (!lp_alloc_arrays_of(out, lists, sizeof lists / sizeof lists[0]))
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
    if (out->encoding == LP_MASK_ENC_ADDITIVE)
        find_fill(out, data, dtype, opts->masked_below);
    int64_t cell = 0;
    future_cells fc = {0, 0, 0, 0};
    for (int64_t b = 0; b < out->n_batch; b++)
        for (int64_t h = 0; h < out->n_heads; h++)
            for (int64_t q = 0; q < out->T; q++, cell += out->T)
                check_row(out, opts, data, dtype, b, h, q, cell, &fc);
    out->cells.blocked_count = out->blocked_count;
    out->diagnosis = lp_leak_diagnose(&out->cells);
    /* A name for a whole pattern only when the whole pattern is there: a few future cells shown
     * are stray cells (listed with their coordinates), not a missing mask. */
    const char *no_mask = lp_mask_fault_name(LP_MASK_FAULT_NO_MASK);
    const char *off_by_one = lp_mask_fault_name(LP_MASK_FAULT_OFF_BY_ONE);
    if ((strcmp(out->diagnosis, no_mask) == 0 && fc.upper_visible < fc.upper) ||
        (strcmp(out->diagnosis, off_by_one) == 0 && fc.next_visible < fc.next))
        out->diagnosis = "stray cells";
    return LP_OK;
}

lp_status lp_leak_read_padding(const char *path, uint8_t **real_out, int64_t *n_batch,
                               int64_t *len, lp_error *err)
{
    int64_t *values;
    lp_status st = lp_leak_read_int_rows(path, &values, n_batch, len, err);
    if (st != LP_OK)
        return lp_error_prefix(err, "--padding: ");
    int64_t n = *n_batch * *len; /* bounded by the file: no overflow */
    uint8_t *real = malloc((size_t)n);
    if (!real) {
        free(values);
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", path);
    }
    for (int64_t i = 0; i < n; i++) {
        if (values[i] != 0 && values[i] != 1) {
            lp_error_set(err, LP_ERR_FORMAT,
                         "--padding: %s: value %lld is %lld (expected 0 = padding or 1 = real "
                         "token)",
                         path, (long long)i, (long long)values[i]);
            free(values);
            free(real);
            return LP_ERR_FORMAT;
        }
        real[i] = values[i] == 1;
    }
    free(values);
    *real_out = real;
    return LP_OK;
}

/* A mask in a .safetensors file, read from its header directly rather than through the weights
 * catalogue: masks get dumped into checkpoint folders whose config.json (of a model loupe may not
 * know) the catalogue would insist on reading. Layout (the format's spec): u64 little-endian N,
 * N bytes of JSON {"name": {"dtype": "BOOL", "shape": [..], "data_offsets": [b, e]}, ...,
 * "__metadata__": {...}}, then the data; offsets are relative to 8 + N. */
#define MAX_ST_HEADER_BYTES (100u << 20)

typedef struct st_mask {
    lp_dtype dtype;
    int n_dims;
    int64_t shape[LP_MAX_DIMS];
    const uint8_t *data;
    char name[256];
} st_mask;

/* The header's JSON object (*header_len bytes after the 8-byte length); caller json_decref's. */
static lp_status st_header(const lp_mapped_file *map, const char *file, json_t **root,
                           uint64_t *header_len, lp_error *err)
{
    if (map->size < 8 || !map->data)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: %zu bytes, shorter than the 8-byte header "
                            "length", file, map->size);
    uint64_t n = lp_load_u64(map->data);
    if (n > map->size - 8 || n > MAX_ST_HEADER_BYTES)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header length %llu exceeds the file (%zu bytes) or %u bytes", file,
                            (unsigned long long)n, map->size, MAX_ST_HEADER_BYTES);
    json_error_t jerr;
    *root = json_loadb((const char *)map->data + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!*root || !json_is_object(*root)) {
        lp_status st = lp_error_set(err, LP_ERR_FORMAT, "%s: header byte %d: %s", file,
                                    8 + jerr.position, *root ? "not a JSON object" : jerr.text);
        json_decref(*root);
        *root = NULL;
        return st;
    }
    *header_len = n;
    return LP_OK;
}

/* The entry named `want`, or the only tensor when want is NULL; its name into out->name. */
static lp_status st_pick(json_t *root, const char *file, const char *want, st_mask *out,
                         json_t **entry, lp_error *err)
{
    const char *key;
    json_t *value;
    size_t n_tensors = 0;
    *entry = NULL;
    json_object_foreach(root, key, value) {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        n_tensors++;
        if (want ? strcmp(key, want) == 0 : n_tensors == 1) {
            *entry = value;
            snprintf(out->name, sizeof out->name, "%s", key);
        }
    }
    if (want && !*entry)
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no tensor named '%s'", file, want);
    if (!want && n_tensors != 1)
        return lp_error_set(err, LP_ERR_USAGE,
                            "%s: %zu tensors in the file; name the mask with --tensor NAME", file,
                            n_tensors);
    return LP_OK;
}

/* dtype and shape of the entry; *count the number of values. */
static lp_status st_dtype_shape(json_t *dtype, json_t *shape, const char *file, st_mask *out,
                                uint64_t *count, lp_error *err)
{
    out->dtype = lp_dtype_from_name(json_string_value(dtype));
    if (out->dtype == LP_DTYPE_INVALID || lp_dtype_get(out->dtype)->block_elems != 1)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: tensor '%s': dtype '%s' is not a "
                            "safetensors element type loupe reads", file, out->name,
                            json_string_value(dtype));
    size_t rank = json_array_size(shape);
    if (rank > LP_MAX_DIMS)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': rank %zu (limit %d)", file,
                            out->name, rank, LP_MAX_DIMS);
    *count = 1;
    for (size_t d = 0; d < rank; d++) {
        json_t *dim = json_array_get(shape, d);
        json_int_t v = json_is_integer(dim) ? json_integer_value(dim) : -1;
        if (v < 0 || !lp_mul_u64(*count, (uint64_t)v, count))
            return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': dimension %zu is not a "
                                "non-negative size", file, out->name, d);
        out->shape[d] = (int64_t)v;
    }
    out->n_dims = (int)rank;
    return LP_OK;
}

/* The entry's dtype, shape and data_offsets, checked against the data the file holds. */
static lp_status st_read_entry(json_t *entry, const lp_mapped_file *map, uint64_t header_len,
                               const char *file, st_mask *out, lp_error *err)
{
    json_t *dtype = json_object_get(entry, "dtype"), *shape = json_object_get(entry, "shape");
    json_t *offsets = json_object_get(entry, "data_offsets");
    if (!json_is_string(dtype) || !json_is_array(shape) || !json_is_array(offsets) ||
        json_array_size(offsets) != 2 || !json_is_integer(json_array_get(offsets, 0)) ||
        !json_is_integer(json_array_get(offsets, 1)))
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': needs dtype, shape and data_offsets [begin, end]",
                            file, out->name);
    uint64_t count = 0;
    lp_status st = st_dtype_shape(dtype, shape, file, out, &count, err);
    if (st != LP_OK)
        return st;
    json_int_t begin = json_integer_value(json_array_get(offsets, 0));
    json_int_t end = json_integer_value(json_array_get(offsets, 1));
    uint64_t need = 0, available = map->size - 8 - header_len;
    if (begin < 0 || end < begin || (uint64_t)end > available)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets [%lld, %lld] outside the %llu data "
                            "bytes",
                            file, out->name, (long long)begin, (long long)end,
                            (unsigned long long)available);
    if (!lp_dtype_bytes_for(out->dtype, count, &need) || need != (uint64_t)(end - begin))
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': %lld data bytes for %llu %s values (need %llu)",
                            file, out->name, (long long)(end - begin), (unsigned long long)count,
                            lp_dtype_name(out->dtype), (unsigned long long)need);
    out->data = map->data + 8 + header_len + (uint64_t)begin;
    return LP_OK;
}

static lp_status st_find_mask(const lp_mapped_file *map, const char *file, const char *want,
                              st_mask *out, lp_error *err)
{
    json_t *root = NULL, *entry;
    uint64_t header_len = 0;
    lp_status st = st_header(map, file, &root, &header_len, err);
    if (st == LP_OK)
        st = st_pick(root, file, want, out, &entry, err);
    if (st == LP_OK)
        st = st_read_entry(entry, map, header_len, file, out, err);
    json_decref(root);
    return st;
}

lp_status lp_leak_check_mask_safetensors(const void *data, size_t size, const char *name,
                                         const lp_leak_mask_opts *opts, lp_leak_mask_report *out,
                                         lp_error *err)
{
    memset(out, 0, sizeof *out);
    lp_mapped_file view = {(const uint8_t *)data, size, NULL};
    st_mask m;
    memset(&m, 0, sizeof m);
    lp_status st = st_find_mask(&view, name, opts->tensor_name, &m, err);
    if (st != LP_OK)
        return st;
    char label[300];
    snprintf(label, sizeof label, "%s: tensor '%s'", name, m.name);
    return lp_leak_check_mask(m.data, m.dtype, m.n_dims, m.shape, label, opts, out, err);
}

lp_status lp_leak_check_mask_file(const char *path, const lp_leak_mask_opts *opts,
                                  lp_leak_mask_report *out, lp_error *err)
{
    memset(out, 0, sizeof *out);
    lp_status st;
    const char *base = lp_path_basename(path);
    lp_file_kind kind = lp_detect_format(path);
    if (kind == LP_FILE_NPY) {
        lp_npy npy;
        if ((st = lp_npy_open(path, &npy, err)) != LP_OK)
            return st;
        int64_t shape[LP_NPY_MAX_DIMS];
        memcpy(shape, npy.shape, sizeof shape);
        st = lp_leak_check_mask(npy.data, npy.dtype, npy.n_dims, shape, base, opts, out, err);
        lp_npy_close(&npy);
        return st;
    }
    if (kind == LP_FILE_SAFETENSORS) {
        lp_mapped_file map;
        if ((st = lp_map_file(path, &map, err)) != LP_OK)
            return st;
        st = lp_leak_check_mask_safetensors(map.data, map.size, base, opts, out, err);
        lp_unmap_file(&map);
        return st;
    }
    return lp_error_set(err, LP_ERR_UNSUPPORTED,
                        "%s: not a mask file (expected .npy or .safetensors, found %s)", path,
                        lp_file_kind_name(kind));
}
