/* Mask definitions, cell-by-cell comparison of the engine's masks with them, and naming the bug. */
#include "trace/leak.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli.h"
#include "core/mapfile.h"

#define MAX_DOC_FILE_BYTES (256u << 20)

static lp_status parse_doc_ids(const char *path, lp_leak_def *def, lp_error *err)
{
    char *text = NULL;
    size_t size = 0;
    lp_status st = lp_read_file(path, MAX_DOC_FILE_BYTES, &text, &size, err);
    if (st != LP_OK)
        return lp_error_prefix(err, "--kind doc: ");
    /* At most one id per two bytes ("1,"), plus one: the count is bounded by the file size. */
    size_t cap = size / 2 + 1;
    int64_t *ids = malloc(cap * sizeof *ids);
    if (!ids) {
        free(text);
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for %zu document ids", path, cap);
    }
    size_t n = 0;
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',')
            p++;
        if (*p == '\0')
            break;
        const char *start = p;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno != 0 ||
            (*end != '\0' && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n' &&
             *end != '\r')) {
            lp_error_set(err, LP_ERR_FORMAT, "%s: byte %zu: expected an integer document id", path,
                         (size_t)(start - text));
            free(ids);
            free(text);
            return LP_ERR_FORMAT;
        }
        if (n >= cap) { /* cannot happen: every id takes at least two bytes but the last */
            free(ids);
            free(text);
            return lp_error_set(err, LP_ERR_FORMAT, "%s: too many ids", path);
        }
        ids[n++] = (int64_t)v;
        p = end;
    }
    free(text);
    if (n == 0) {
        free(ids);
        return lp_error_set(err, LP_ERR_FORMAT, "%s: no document ids (expected one per position)",
                            path);
    }
    def->doc_ids = ids;
    def->n_doc_ids = (int64_t)n;
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
}

bool lp_leak_def_allows(const lp_leak_def *def, int64_t query, int64_t key)
{
    if (key < 0 || key > query)
        return false;
    switch (def->kind) {
    case LP_LEAK_DEF_WINDOW:
        return query - key < def->window;
    case LP_LEAK_DEF_DOC:
        if (query >= def->n_doc_ids)
            return false;
        return def->doc_ids[key] == def->doc_ids[query];
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
