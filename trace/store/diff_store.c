/* loupe diff's rows: a diffs row and its diff_heads / diff_head_stats / diff_positions rows,
 * written in one transaction and read back for render and the viewer. */
#define _POSIX_C_SOURCE 200809L
#include "trace/store/store.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "trace/store/store_internal.h"

static lp_status insert_diff_row(lp_store *s, const lp_store_diff *d, int64_t *id, lp_error *err)
{
    sqlite3_stmt *q = NULL;
    lp_status st = lp_store_prepare(s,
                                    "INSERT INTO diffs (a_db, a_run, b_db, b_run, n_tokens, "
                                    "n_layers, n_heads, has_kl) VALUES (?1, ?2, ?3, ?4, ?5, ?6, "
                                    "?7, ?8)",
                                    &q, "inserting diffs", err);
    if (st != LP_OK)
        return st;
    sqlite3_bind_text(q, 1, d->a_db, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, d->a_run);
    sqlite3_bind_text(q, 3, d->b_db, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 4, d->b_run);
    sqlite3_bind_int64(q, 5, d->n_tokens);
    sqlite3_bind_int64(q, 6, d->n_layers);
    sqlite3_bind_int64(q, 7, d->n_heads);
    sqlite3_bind_int(q, 8, d->has_kl ? 1 : 0);
    st = lp_store_step_once(s, q, "inserting diffs", err);
    *id = sqlite3_last_insert_rowid(s->db);
    return st;
}

/* ?1 ?2 ?3 = the diff, the layer and the head of head slot i. */
static void bind_head(sqlite3_stmt *q, int64_t diff_id, int64_t i, int64_t n_heads)
{
    sqlite3_bind_int64(q, 1, diff_id);
    sqlite3_bind_int64(q, 2, i / n_heads);
    sqlite3_bind_int64(q, 3, i % n_heads);
}

static lp_status insert_diff_heads(lp_store *s, int64_t id, const lp_store_diff *d, lp_error *err)
{
    sqlite3_stmt *q = NULL;
    lp_status st = lp_store_prepare(s,
                                    "INSERT INTO diff_heads (diff_id, layer, head, js_mean, "
                                    "max_abs) VALUES (?1, ?2, ?3, ?4, ?5)",
                                    &q, "inserting diff_heads", err);
    for (int64_t i = 0; st == LP_OK && i < d->n_layers * d->n_heads; i++) {
        bind_head(q, id, i, d->n_heads);
        lp_store_bind_real_or_null(q, 4, d->js[i]);
        lp_store_bind_real_or_null(q, 5, d->max_abs[i]);
        st = lp_store_step_done(s, q, "inserting diff_heads", err);
    }
    sqlite3_finalize(q);
    return st;
}

static lp_status insert_diff_head_stats(lp_store *s, int64_t id, const lp_store_diff *d,
                                        lp_error *err)
{
    sqlite3_stmt *q = NULL;
    lp_status st = lp_store_prepare(s,
                                    "INSERT INTO diff_head_stats (diff_id, layer, head, stat, "
                                    "delta) VALUES (?1, ?2, ?3, ?4, ?5)",
                                    &q, "inserting diff_head_stats", err);
    int64_t LH = d->n_layers * d->n_heads;
    for (int64_t i = 0; st == LP_OK && i < LH; i++)
        for (int k = 0; st == LP_OK && k < LP_STAT_COUNT; k++) {
            if (lp_head_stat_absent(d->stat_delta, LH, (lp_head_stat)k))
                continue;
            bind_head(q, id, i, d->n_heads);
            sqlite3_bind_text(q, 4, lp_head_stat_name((lp_head_stat)k), -1, SQLITE_STATIC);
            lp_store_bind_real_or_null(q, 5, d->stat_delta[i * LP_STAT_COUNT + k]);
            st = lp_store_step_done(s, q, "inserting diff_head_stats", err);
        }
    sqlite3_finalize(q);
    return st;
}

static lp_status insert_diff_positions(lp_store *s, int64_t id, const lp_store_diff *d,
                                       lp_error *err)
{
    sqlite3_stmt *q = NULL;
    lp_status st = lp_store_prepare(s,
                                    "INSERT INTO diff_positions (diff_id, pos, kl, argmax_agree) "
                                    "VALUES (?1, ?2, ?3, ?4)",
                                    &q, "inserting diff_positions", err);
    for (int64_t p = 0; st == LP_OK && p < d->n_tokens; p++) {
        sqlite3_bind_int64(q, 1, id);
        sqlite3_bind_int64(q, 2, p);
        lp_store_bind_real_or_null(q, 3, d->kl[p]);
        sqlite3_bind_int(q, 4, d->argmax_agree[p] ? 1 : 0);
        st = lp_store_step_done(s, q, "inserting diff_positions", err);
    }
    sqlite3_finalize(q);
    return st;
}

lp_status lp_store_add_diff(lp_store *s, const lp_store_diff *d, int64_t *diff_id, lp_error *err)
{
    if (s->in_run)
        return lp_error_set(err, LP_ERR_USAGE, "%s: a run is already open", s->path);
    if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        return lp_store_sql_error(s, "starting the diff's transaction", err);
    int64_t id = 0;
    lp_status st = insert_diff_row(s, d, &id, err);
    if (st == LP_OK)
        st = insert_diff_heads(s, id, d, err);
    if (st == LP_OK && d->stat_delta)
        st = insert_diff_head_stats(s, id, d, err);
    if (st == LP_OK)
        st = insert_diff_positions(s, id, d, err);
    if (st == LP_OK && sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        st = lp_store_sql_error(s, "committing the diff", err);
    if (st != LP_OK)
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    else
        *diff_id = id;
    return st;
}

/* ---- reading ---------------------------------------------------------------------------------- */

void lp_store_diff_rows_clear(lp_store_diff_rows *d)
{
    free(d->a_db);
    free(d->b_db);
    free(d->js); /* one block with the other arrays (lp_store_read_diff) */
    memset(d, 0, sizeof *d);
}

lp_status lp_store_list_diffs(lp_store *s, int64_t **ids, int64_t *n, lp_error *err)
{
    *ids = NULL;
    *n = 0;
    if (!lp_store_table_exists(s, "diffs"))
        return LP_OK;
    sqlite3_stmt *q;
    lp_status st = lp_store_prepare(s, "SELECT id FROM diffs ORDER BY id", &q, "reading diffs",
                                    err);
    if (st != LP_OK)
        return st;
    int64_t cap = 0;
    int rc = SQLITE_DONE;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (*n == cap) {
            int64_t *grown = realloc(*ids, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *grown);
            if (!grown) {
                st = lp_error_set(err, LP_ERR_NOMEM, "reading diffs: out of memory");
                break;
            }
            *ids = grown;
        }
        (*ids)[(*n)++] = sqlite3_column_int64(q, 0);
    }
    if (st == LP_OK && rc != SQLITE_DONE)
        st = lp_store_sql_error(s, "reading diffs", err);
    sqlite3_finalize(q);
    if (st != LP_OK) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return st;
}

static char *dup_column(sqlite3_stmt *q, int col)
{
    const char *t = (const char *)sqlite3_column_text(q, col);
    char *out = malloc(strlen(t ? t : "") + 1);
    if (out)
        strcpy(out, t ? t : "");
    return out;
}

/* The diffs row: the latest when id is 0. Shapes from the file are bounded before allocating. */
static lp_status read_diff_row(lp_store *s, int64_t id, lp_store_diff_rows *d, lp_error *err)
{
    sqlite3_stmt *q;
    lp_status st = lp_store_prepare(s,
                                    "SELECT id, a_db, a_run, b_db, b_run, n_tokens, n_layers, "
                                    "n_heads, has_kl FROM diffs WHERE id = ?1 OR (?1 = 0 AND id = "
                                    "(SELECT max(id) FROM diffs))",
                                    &q, "reading diffs", err);
    if (st != LP_OK)
        return st;
    sqlite3_bind_int64(q, 1, id);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
        d->id = sqlite3_column_int64(q, 0);
        d->a_db = dup_column(q, 1);
        d->a_run = sqlite3_column_int64(q, 2);
        d->b_db = dup_column(q, 3);
        d->b_run = sqlite3_column_int64(q, 4);
        d->n_tokens = sqlite3_column_int64(q, 5);
        d->n_layers = sqlite3_column_int64(q, 6);
        d->n_heads = sqlite3_column_int64(q, 7);
        d->has_kl = sqlite3_column_int(q, 8) != 0;
        if (!d->a_db || !d->b_db)
            st = lp_error_set(err, LP_ERR_NOMEM, "reading diffs: out of memory");
        else if (d->n_layers < 1 || d->n_layers > 65536 || d->n_heads < 1 ||
                 d->n_heads > 65536 || d->n_tokens < 0 || d->n_tokens > ((int64_t)1 << 30))
            st = lp_error_set(err, LP_ERR_FORMAT,
                              "%s: diffs row %lld: %lld layers x %lld heads, %lld tokens (want "
                              "1..65536 layers and heads, 0..2^30 tokens)",
                              s->path, (long long)d->id, (long long)d->n_layers,
                              (long long)d->n_heads, (long long)d->n_tokens);
    } else if (rc == SQLITE_DONE) {
        int64_t *ids = NULL, n = 0;
        lp_error local = {0};
        lp_store_list_diffs(s, &ids, &n, &local);
        if (n == 0)
            st = lp_error_set(err, LP_ERR_NOT_FOUND,
                              "%s: no diffs stored (run `loupe diff A.db B.db` first)", s->path);
        else
            st = lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no diff %lld (diffs %lld..%lld stored)",
                              s->path, (long long)id, (long long)ids[0], (long long)ids[n - 1]);
        free(ids);
    } else {
        st = lp_store_sql_error(s, "reading diffs", err);
    }
    sqlite3_finalize(q);
    return st;
}

static void fill_nan(double *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = NAN;
}

static double real_or_nan(sqlite3_stmt *q, int col)
{
    return sqlite3_column_type(q, col) == SQLITE_NULL ? (double)NAN : sqlite3_column_double(q, col);
}

/* Rows of `sql` (bound to the diff's id) into their slot: each row names its cell with the first
 * columns, read_row files it. Rows outside the diff's shape are ignored. */
typedef void (*diff_row_fn)(lp_store_diff_rows *d, sqlite3_stmt *q);

static lp_status read_diff_rows(lp_store *s, lp_store_diff_rows *d, const char *table,
                                const char *sql, diff_row_fn row, lp_error *err)
{
    if (!lp_store_table_exists(s, table))
        return LP_OK; /* a database from before the table: NaN */
    sqlite3_stmt *q;
    char what[64];
    snprintf(what, sizeof what, "reading %s", table);
    lp_status st = lp_store_prepare(s, sql, &q, what, err);
    if (st != LP_OK)
        return st;
    sqlite3_bind_int64(q, 1, d->id);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW)
        row(d, q);
    if (rc != SQLITE_DONE)
        st = lp_store_sql_error(s, what, err);
    sqlite3_finalize(q);
    return st;
}

/* (layer, head) of columns 0 and 1 as an index into [n_layers * n_heads], -1 when outside. */
static int64_t head_index(const lp_store_diff_rows *d, sqlite3_stmt *q)
{
    int64_t l = sqlite3_column_int64(q, 0), h = sqlite3_column_int64(q, 1);
    return l >= 0 && l < d->n_layers && h >= 0 && h < d->n_heads ? l * d->n_heads + h : -1;
}

static void head_row(lp_store_diff_rows *d, sqlite3_stmt *q)
{
    int64_t i = head_index(d, q);
    if (i >= 0) {
        d->js[i] = real_or_nan(q, 2);
        d->max_abs[i] = real_or_nan(q, 3);
    }
}

static void head_stat_row(lp_store_diff_rows *d, sqlite3_stmt *q)
{
    int64_t i = head_index(d, q);
    const char *name = (const char *)sqlite3_column_text(q, 2);
    lp_head_stat k = name ? lp_head_stat_from_name(name) : LP_STAT_COUNT;
    if (i >= 0 && k != LP_STAT_COUNT)
        d->stat_delta[i * LP_STAT_COUNT + k] = real_or_nan(q, 3);
}

static void position_row(lp_store_diff_rows *d, sqlite3_stmt *q)
{
    int64_t p = sqlite3_column_int64(q, 0);
    if (p >= 0 && p < d->n_tokens) {
        d->kl[p] = real_or_nan(q, 1);
        d->argmax_agree[p] = sqlite3_column_int(q, 2) != 0;
    }
}

lp_status lp_store_read_diff(lp_store *s, int64_t diff_id, lp_store_diff_rows *d, lp_error *err)
{
    memset(d, 0, sizeof *d);
    if (!lp_store_table_exists(s, "diffs"))
        return lp_error_set(err, LP_ERR_NOT_FOUND,
                            "%s: no diffs stored (run `loupe diff A.db B.db` first)", s->path);
    lp_status st = read_diff_row(s, diff_id, d, err);
    if (st == LP_OK) {
        int64_t LH = d->n_layers * d->n_heads;
        const lp_owned_array arrays[] = {
            LP_OWNED_ARRAY(lp_store_diff_rows, js, LH),
            LP_OWNED_ARRAY(lp_store_diff_rows, max_abs, LH),
            LP_OWNED_ARRAY(lp_store_diff_rows, stat_delta, LH * LP_STAT_COUNT),
            LP_OWNED_ARRAY(lp_store_diff_rows, kl, d->n_tokens),
            LP_OWNED_ARRAY(lp_store_diff_rows, argmax_agree, d->n_tokens),
        };
        if (!lp_alloc_arrays_of(d, arrays, sizeof arrays / sizeof arrays[0])) {
            st = lp_error_set(err, LP_ERR_NOMEM, "reading diff %lld: out of memory",
                              (long long)d->id);
        } else {
            fill_nan(d->js, LH);
            fill_nan(d->max_abs, LH);
            fill_nan(d->stat_delta, LH * LP_STAT_COUNT);
            fill_nan(d->kl, d->n_tokens);
            memset(d->argmax_agree, -1, (size_t)d->n_tokens);
        }
    }
    if (st == LP_OK)
        st = read_diff_rows(s, d, "diff_heads",
                            "SELECT layer, head, js_mean, max_abs FROM diff_heads WHERE diff_id "
                            "= ?1",
                            head_row, err);
    if (st == LP_OK)
        st = read_diff_rows(s, d, "diff_head_stats",
                            "SELECT layer, head, stat, delta FROM diff_head_stats WHERE diff_id "
                            "= ?1",
                            head_stat_row, err);
    if (st == LP_OK)
        st = read_diff_rows(s, d, "diff_positions",
                            "SELECT pos, kl, argmax_agree FROM diff_positions WHERE diff_id = ?1",
                            position_row, err);
    if (st != LP_OK)
        lp_store_diff_rows_clear(d);
    return st;
}
