/* Recording a generation: each call of lp_generate (the prefill, then one row per decode step)
 * hands the store rows of the same maps. A map is inserted once as a zero blob of
 * [seq_len, seq_len] and each call's rows are written into it in place (sqlite3_blob_write), so
 * the stored map is the whole sequence's lower triangle; row statistics are kept per row and
 * averaged at the end, as one prefill of the whole sequence would. */
#define _POSIX_C_SOURCE 200809L
#include "trace/store/store_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"

static size_t elem_of(const lp_store *s) { return s->opts.maps == LP_MAPS_F32 ? 4 : 2; }

lp_status lp_store_gen_begin(lp_store *s, lp_error *err)
{
    size_t LH = (size_t)(s->n_layers * s->n_heads);
    s->map_rowid = calloc(LH, sizeof *s->map_rowid);
    s->gen_rows = calloc(LH * (size_t)s->opts.seq_len, sizeof *s->gen_rows);
    s->gen_norm = calloc(LH, sizeof *s->gen_norm);
    if (!s->map_rowid || !s->gen_rows || !s->gen_norm)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for %lld positions", s->path,
                            (long long)s->opts.seq_len);
    return LP_OK;
}

static void close_blob(lp_store *s)
{
    if (s->blob)
        sqlite3_blob_close(s->blob); /* before COMMIT or another statement on the row */
    s->blob = NULL;
}

void lp_store_gen_free(lp_store *s)
{
    close_blob(s);
    free(s->map_rowid);
    free(s->gen_rows);
    free(s->gen_norm);
    s->map_rowid = NULL;
    s->gen_rows = NULL;
    s->gen_norm = NULL;
}

static lp_status insert_zero_map(lp_store *s, const lp_site *site, int64_t *rowid, lp_error *err)
{
    uint64_t n = (uint64_t)s->opts.seq_len, bytes = n * n * elem_of(s);
    lp_status st = lp_store_bind_map(s, site, (int64_t)n, (int64_t)n, bytes, err);
    if (st != LP_OK)
        return st;
    sqlite3_stmt *q = s->stmt[LP_STMT_ATTENTION];
    sqlite3_bind_zeroblob64(q, 7, bytes);
    st = lp_store_step_done(s, q, "inserting a map", err);
    sqlite3_clear_bindings(q);
    if (st != LP_OK)
        return st;
    *rowid = sqlite3_last_insert_rowid(s->db);
    return LP_OK;
}

static lp_status open_blob(lp_store *s, int64_t rowid, int writable, lp_error *err)
{
    if (sqlite3_blob_open(s->db, "main", "attention", "probs", rowid, writable, &s->blob) !=
        SQLITE_OK)
        return lp_store_sql_error(s, "opening a map", err);
    return LP_OK;
}

/* Rows row0 .. row0+rows-1 of the map: each written from column 0 to the view's width. */
lp_status lp_store_gen_probs(lp_store *s, const lp_site *site, const lp_view *v, lp_error *err)
{
    size_t slot = (size_t)(site->layer * s->n_heads + site->head);
    int64_t n = s->opts.seq_len;
    size_t elem = elem_of(s);
    if (v->row0 + v->rows > n || v->cols > n)
        return lp_error_set(err, LP_ERR_RANGE, "%s: map rows up to %lld of %lld keys exceed the "
                                               "run's %lld positions", s->path,
                            (long long)(v->row0 + v->rows), (long long)v->cols, (long long)n);
    lp_status st;
    if (!s->map_rowid[slot] && (st = insert_zero_map(s, site, &s->map_rowid[slot], err)))
        return st;
    if ((size_t)v->cols * elem > s->f16_cap) {
        free(s->f16);
        s->f16 = malloc((size_t)v->cols * elem);
        s->f16_cap = s->f16 ? (size_t)v->cols * elem : 0;
        if (!s->f16)
            return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", s->path);
    }
    if ((st = open_blob(s, s->map_rowid[slot], 1, err)))
        return st;
    for (int64_t r = 0; r < v->rows && st == LP_OK; r++) {
        const float *row = v->data + r * v->stride;
        if (elem == 4) {
            memcpy(s->f16, row, (size_t)v->cols * 4);
        } else {
            for (int64_t c = 0; c < v->cols; c++)
                s->f16[c] = lp_f32_to_f16(row[c]);
        }
        int64_t off = (v->row0 + r) * n * (int64_t)elem;
        if (sqlite3_blob_write(s->blob, s->f16, (int)(v->cols * (int64_t)elem), (int)off) !=
            SQLITE_OK)
            st = lp_store_sql_error(s, "writing a map row", err);
    }
    close_blob(s);
    return st;
}

void lp_store_gen_stats(lp_store *s, const lp_site *site, const lp_view *v)
{
    size_t slot = (size_t)(site->layer * s->n_heads + site->head);
    for (int64_t r = 0; r < v->rows; r++)
        if (v->row0 + r < s->opts.seq_len)
            s->gen_rows[slot * (size_t)s->opts.seq_len + (size_t)(v->row0 + r)] = v->row_stats[r];
    s->run.stats_seen[slot] = true;
}

void lp_store_gen_norms(lp_store *s, const lp_site *site, const lp_view *v)
{
    size_t slot = (size_t)(site->layer * s->n_heads + site->head);
    s->gen_norm[slot] += lp_mean_row_norm(v->data, v->rows, v->cols, v->stride) * (double)v->rows;
}

void lp_store_gen_finish_stats(lp_store *s, int64_t n_total)
{
    for (size_t slot = 0; slot < (size_t)(s->n_layers * s->n_heads); slot++) {
        if (!s->run.stats_seen[slot])
            continue;
        lp_head_stats_from_rows(s->gen_rows + slot * (size_t)s->opts.seq_len, n_total, 0,
                                &s->run.stats[slot]);
        s->run.stats[slot].output_norm = n_total > 0 ? s->gen_norm[slot] / (double)n_total : 0.0;
    }
}

/* A generation that stopped early: each map's top-left [n, n] replaces it. */
lp_status lp_store_gen_cut_maps(lp_store *s, int64_t n, lp_error *err)
{
    int64_t full = s->opts.seq_len;
    size_t elem = elem_of(s), bytes = (size_t)(n * n) * elem;
    uint8_t *buf = malloc(bytes > 0 ? bytes : 1);
    if (!buf)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", s->path);
    sqlite3_stmt *q = NULL;
    lp_status st = lp_store_prepare(s, "UPDATE attention SET n_q = ?, n_k = ?, probs = ? "
                                       "WHERE rowid = ?", &q, "cutting maps", err);
    for (size_t slot = 0; st == LP_OK && slot < (size_t)(s->n_layers * s->n_heads); slot++) {
        if (!s->map_rowid[slot])
            continue;
        if ((st = open_blob(s, s->map_rowid[slot], 0, err)))
            break;
        for (int64_t r = 0; r < n && st == LP_OK; r++)
            if (sqlite3_blob_read(s->blob, buf + (size_t)(r * n) * elem, (int)((size_t)n * elem),
                                  (int)((size_t)(r * full) * elem)) != SQLITE_OK)
                st = lp_store_sql_error(s, "reading a map", err);
        close_blob(s);
        if (st != LP_OK)
            break;
        sqlite3_bind_int64(q, 1, n);
        sqlite3_bind_int64(q, 2, n);
        sqlite3_bind_blob(q, 3, buf, (int)bytes, SQLITE_STATIC);
        sqlite3_bind_int64(q, 4, s->map_rowid[slot]);
        st = lp_store_step_done(s, q, "cutting a map", err);
    }
    if (q)
        sqlite3_finalize(q);
    free(buf);
    return st;
}
