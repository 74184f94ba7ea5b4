/* Mask definitions, cell-by-cell comparison of the engine's masks with them, and naming the bug. */
#include "trace/leak/leak.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "core/mapfile.h"
#include "inspect/formats/detect.h"
#include "inspect/formats/npy.h"

#define MAX_TEXT_FILE_BYTES (256u << 20)

/* One integer of an integer/bool .npy, by index (raw little-endian read). */
static int64_t npy_int(const lp_npy *npy, int64_t i)
{
    const uint8_t *p = (const uint8_t *)npy->data;
    switch (npy->dtype) {
    case LP_DTYPE_I8: return (int8_t)p[i];
    case LP_DTYPE_BOOL:
    case LP_DTYPE_U8: return p[i];
    case LP_DTYPE_I16: return (int16_t)lp_load_u16(p + 2 * i);
    case LP_DTYPE_U16: return lp_load_u16(p + 2 * i);
    case LP_DTYPE_I32: return lp_load_i32(p + 4 * i);
    case LP_DTYPE_U32: return lp_load_u32(p + 4 * i);
    case LP_DTYPE_I64:
    case LP_DTYPE_U64: return (int64_t)lp_load_u64(p + 8 * i);
    default: return 0;
    }
}

static lp_status read_int_rows_npy(const char *path, int64_t **out, int64_t *rows, int64_t *cols,
                                   lp_error *err)
{
    lp_npy npy;
    lp_status st = lp_npy_open(path, &npy, err);
    if (st != LP_OK)
        return st;
    if ((npy.n_dims != 1 && npy.n_dims != 2) || npy.n_elements <= 0) {
        lp_npy_close(&npy);
        return lp_error_set(err, LP_ERR_FORMAT, "%s: rank %d with %lld values (expected [T] or "
                            "[B, T])", path, npy.n_dims, (long long)npy.n_elements);
    }
    int64_t *values = malloc((size_t)npy.n_elements * sizeof *values);
    float *f = lp_dtype_get(npy.dtype)->is_float ? malloc((size_t)npy.n_elements * sizeof *f)
                                                 : NULL;
    if (!values || (lp_dtype_get(npy.dtype)->is_float && !f)) {
        free(values);
        free(f);
        lp_npy_close(&npy);
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", path);
    }
    if (f) {
        /* Floats only when every value is a small whole number (2^24 keeps f32 exact). */
        if ((st = lp_npy_to_f32(&npy, f, err)) == LP_OK)
            for (int64_t i = 0; i < npy.n_elements && st == LP_OK; i++) {
                if (!(f[i] == floorf(f[i]) && fabsf(f[i]) <= 16777216.0f))
                    st = lp_error_set(err, LP_ERR_FORMAT,
                                      "%s: value %lld is %g (expected whole numbers)", path,
                                      (long long)i, (double)f[i]);
                values[i] = (int64_t)f[i];
            }
    } else {
        for (int64_t i = 0; i < npy.n_elements; i++)
            values[i] = npy_int(&npy, i);
    }
    *rows = npy.n_dims == 2 ? npy.shape[0] : 1;
    *cols = npy.shape[npy.n_dims - 1];
    free(f);
    lp_npy_close(&npy);
    if (st != LP_OK) {
        free(values);
        return st;
    }
    *out = values;
    return LP_OK;
}

static bool ends_number(char c)
{
    return c == '\0' || c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Rows of integers separated by commas or blanks, one row per line (blank lines skipped, every
 * row as long as the first), into values (room for one per byte of text). */
static lp_status parse_int_text(const char *path, const char *text, int64_t *values,
                                int64_t *rows, int64_t *cols, lp_error *err)
{
    int64_t n = 0, n_rows = 0, row_len = -1, in_row = 0;
    for (const char *p = text;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == ',')
            p++;
        if (*p == '\n' || *p == '\0') {
            if (in_row > 0 && row_len >= 0 && in_row != row_len)
                return lp_error_set(err, LP_ERR_FORMAT,
                                    "%s: line %lld has %lld values, the first had %lld", path,
                                    (long long)(n_rows + 1), (long long)in_row,
                                    (long long)row_len);
            if (in_row > 0) {
                row_len = in_row;
                n_rows++;
                in_row = 0;
            }
            if (*p == '\0')
                break;
            p++;
            continue;
        }
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno != 0 || !ends_number(*end))
            return lp_error_set(err, LP_ERR_FORMAT, "%s: byte %zu: expected an integer", path,
                                (size_t)(p - text));
        values[n++] = (int64_t)v;
        in_row++;
        p = end;
    }
    if (n_rows == 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: no values", path);
    *rows = n_rows;
    *cols = row_len;
    return LP_OK;
}

lp_status lp_leak_read_int_rows(const char *path, int64_t **out, int64_t *rows, int64_t *cols,
                                lp_error *err)
{
    *out = NULL;
    /* .npy by its magic (or its name, so a damaged one gets the npy reader's error); else text */
    if (lp_detect_format(path) == LP_FILE_NPY)
        return read_int_rows_npy(path, out, rows, cols, err);
    char *text = NULL;
    size_t size = 0;
    lp_status st = lp_read_file(path, MAX_TEXT_FILE_BYTES, &text, &size, err);
    if (st != LP_OK)
        return st;
    /* Every value takes at least one byte: the count is bounded by the file size. */
    int64_t *values = malloc((size + 1) * sizeof *values);
    if (!values)
        st = lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for %zu values", path, size);
    else
        st = parse_int_text(path, text, values, rows, cols, err);
    free(text);
    if (st != LP_OK) {
        free(values);
        return st;
    }
    *out = values;
    return LP_OK;
}

static lp_status parse_doc_ids(const char *path, lp_leak_def *def, lp_error *err)
{
    lp_status st = lp_leak_read_int_rows(path, &def->doc_ids, &def->n_doc_rows, &def->n_doc_ids,
                                         err);
    if (st != LP_OK)
        return lp_error_prefix(err, "--kind doc: ");
    return LP_OK;
}

lp_status lp_leak_def_parse(const char *text, lp_leak_def *def, lp_error *err)
{
    memset(def, 0, sizeof *def);
    snprintf(def->text, sizeof def->text, "%s", text);
    if (strcmp(text, "causal") == 0) {
        def->kind = LP_LEAK_DEF_CAUSAL;
        return LP_OK;
    }
    if (strncmp(text, "window:", 7) == 0) {
        int64_t w;
        if (!lp_parse_i64(text + 7, &w) || w < 1)
            return lp_error_set(err, LP_ERR_USAGE,
                                "--kind '%s': window must be an integer >= 1 (keys per query, "
                                "itself included)",
                                text);
        def->kind = LP_LEAK_DEF_WINDOW;
        def->window = w;
        return LP_OK;
    }
    if (strncmp(text, "doc:", 4) == 0) {
        if (text[4] == '\0')
            return lp_error_set(err, LP_ERR_USAGE, "--kind doc: needs a file of document ids");
        def->kind = LP_LEAK_DEF_DOC;
        return parse_doc_ids(text + 4, def, err);
    }
    return lp_error_set(err, LP_ERR_USAGE,
                        "--kind '%s': expected causal, window:W or doc:IDS_FILE", text);
}

void lp_leak_def_free(lp_leak_def *def)
{
    if (!def)
        return;
    free(def->doc_ids);
    def->doc_ids = NULL;
    def->n_doc_ids = 0;
    def->n_doc_rows = 0;
}

bool lp_leak_def_allows(const lp_leak_def *def, int64_t batch, int64_t query, int64_t key)
{
    if (key < 0 || key > query)
        return false;
    switch (def->kind) {
    case LP_LEAK_DEF_WINDOW:
        return query - key < def->window;
    case LP_LEAK_DEF_DOC: {
        if (query >= def->n_doc_ids || batch < 0 ||
            (def->n_doc_rows > 1 && batch >= def->n_doc_rows))
            return false;
        const int64_t *row = def->doc_ids + (def->n_doc_rows > 1 ? batch : 0) * def->n_doc_ids;
        return row[key] == row[query];
    }
    default:
        return true;
    }
}

/* ---- engine masks ---- */

static bool is_padding(const lp_mask_spec *spec, int64_t batch, int64_t index)
{
    int64_t pl = spec->pad_left ? spec->pad_left[batch] : 0;
    int64_t pr = spec->pad_right ? spec->pad_right[batch] : 0;
    return index < pl || index >= spec->n_k - pr;
}

void lp_leak_cell_add(lp_leak_cell_stats *st, const lp_mask_spec *spec, int64_t batch,
                      int64_t head, int64_t row, int64_t key, bool allowed)
{
    bool ref = lp_mask_allows_reference(spec, batch, row, key);
    if (allowed == ref)
        return;
    int64_t pos = spec->q_pos0 + row;
    lp_leak_coord c = {batch, head, row, key};
    if (allowed) {
        if (st->leak_count++ == 0)
            st->first_leak = c;
        if (is_padding(spec, batch, pos))
            st->leak_padding_query++;
        else if (is_padding(spec, batch, key))
            st->leak_padding_key++;
        else if (spec->causal && key == pos + 1)
            st->leak_next++;
        else if (spec->causal && key > pos + 1)
            st->leak_future++;
        else if (spec->window > 0 && pos - key == spec->window)
            st->leak_window_edge++;
    } else {
        if (st->blocked_count++ == 0)
            st->first_blocked = c;
        if (key < pos)
            st->blocked_past++;
    }
}

void lp_leak_check_mask_spec(const lp_mask_spec *spec, int64_t n_batch, lp_leak_cell_stats *st)
{
    for (int64_t b = 0; b < n_batch; b++)
        for (int64_t r = 0; r < spec->n_q; r++) {
            int64_t lo, hi;
            lp_mask_row_range(spec, b, r, &lo, &hi);
            for (int64_t k = 0; k < spec->n_k; k++)
                lp_leak_cell_add(st, spec, b, -1, r, k, k >= lo && k < hi);
        }
}

const char *lp_leak_diagnose(const lp_leak_cell_stats *st)
{
    if (st->leak_count == 0)
        return st->blocked_count > 0 ? "blocked" : "none";
    int64_t future = st->leak_next + st->leak_future;
    if (future > 0) {
        /* Transposed hides the past while showing the future; no-mask shows everything;
         * off-by-one shows exactly one key more. */
        if (st->blocked_past > 0)
            return lp_mask_fault_name(LP_MASK_FAULT_TRANSPOSED);
        if (st->leak_future == 0)
            return lp_mask_fault_name(LP_MASK_FAULT_OFF_BY_ONE);
        return lp_mask_fault_name(LP_MASK_FAULT_NO_MASK);
    }
    if (st->leak_window_edge > 0 && st->leak_window_edge == st->leak_count)
        return lp_mask_fault_name(LP_MASK_FAULT_WINDOW_PLUS_ONE);
    if (st->leak_padding_key > 0 && st->leak_padding_query == 0)
        return lp_mask_fault_name(LP_MASK_FAULT_PAD_AXIS);
    if (st->leak_cross_doc > 0 && st->leak_cross_doc == st->leak_count)
        return "cross-document";
    return "leak";
}
