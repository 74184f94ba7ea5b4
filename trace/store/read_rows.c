/* Reading what a run holds beyond its maps, typed: token ids, top-k predictions, full logits,
 * every leak check, and the runs row as text (for `loupe export` and the HTML viewer). Each is
 * optional data: LP_ERR_NOT_FOUND when the run (or the database) has none. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "trace/store/store.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/dtype.h"
#include "trace/store/store_internal.h"

/* A run's top-k is bounded by `loupe trace --top-k` (<= 1000); a larger rank is corruption. */
#define MAX_RANK 65536

static const char sql_token_ids[] = "SELECT pos, token_id FROM tokens WHERE run_id = ?1";
static const char sql_max_rank[] = "SELECT max(rank) FROM predictions WHERE run_id = ?1";
static const char sql_predictions[] = "SELECT pos, rank, token_id, piece, prob, logit FROM "
                                      "predictions WHERE run_id = ?1";
static const char sql_logits_shape[] = "SELECT count(*), min(length(data)), max(length(data)), "
                                       "min(pos), max(pos) FROM logits WHERE run_id = ?1";
static const char sql_logits_row[] = "SELECT data FROM logits WHERE run_id = ?1 AND pos = ?2";
static const char sql_leak_checks[] = "SELECT check_name, passed, layer, position, max_abs_diff, "
                                      "detail FROM leak_checks WHERE run_id = ?1 ORDER BY rowid";
static const char sql_count_leak_checks[] = "SELECT count(*) FROM leak_checks WHERE run_id = ?1";
static const char sql_run_row[] = "SELECT * FROM runs WHERE id = ?1";

/* A statement with ?1 bound to run_id. */
static lp_status prepare_run(lp_store *s, const char *sql, int64_t run_id, sqlite3_stmt **stmt,
                             lp_error *err)
{
    lp_status st = lp_store_prepare(s, sql, stmt, "query failed", err);
    if (st == LP_OK)
        sqlite3_bind_int64(*stmt, 1, run_id);
    return st;
}

/* The first column of a one-row query on run_id; *null when it is NULL (an empty aggregate). */
static lp_status query_int(lp_store *s, const char *sql, int64_t run_id, const char *what,
                           int64_t *value, bool *null, lp_error *err)
{
    sqlite3_stmt *stmt;
    lp_status st = prepare_run(s, sql, run_id, &stmt, err);
    if (st != LP_OK)
        return st;
    int rc = sqlite3_step(stmt);
    *null = rc != SQLITE_ROW || sqlite3_column_type(stmt, 0) == SQLITE_NULL;
    *value = rc == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : 0;
    sqlite3_finalize(stmt);
    return rc == SQLITE_ROW ? LP_OK : lp_store_sql_error(s, what, err);
}

/* A column's text as a malloc'd string ("" for NULL); NULL when out of memory. */
static char *copy_text(const unsigned char *text) { return strdup(text ? (const char *)text : ""); }

static lp_status no_rows(const lp_store *s, int64_t run_id, const char *table, lp_error *err)
{
    return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: run %lld has no %s rows", s->path,
                        (long long)run_id, table);
}

/* ---- token ids -------------------------------------------------------------------------------- */

lp_status lp_store_read_token_ids(lp_store *s, int64_t run_id, int32_t **ids, int64_t *n,
                                  lp_error *err)
{
    *ids = NULL;
    *n = 0;
    int64_t max_pos;
    bool none;
    lp_status st = query_int(s, "SELECT max(pos) FROM tokens WHERE run_id = ?1", run_id,
                             "reading tokens", &max_pos, &none, err);
    if (st != LP_OK)
        return st;
    if (none)
        return no_rows(s, run_id, "tokens", err);
    int64_t rows;
    st = query_int(s, "SELECT count(*) FROM tokens WHERE run_id = ?1", run_id, "reading tokens",
                   &rows, &none, err);
    /* positions are 0..n-1, so the largest is below the row count; anything else is corrupt */
    if (st == LP_OK && (max_pos < 0 || max_pos >= rows))
        st = lp_error_set(err, LP_ERR_FORMAT,
                          "%s: tokens of run %lld: pos %lld outside [0, %lld) (positions must "
                          "be 0..n-1)",
                          s->path, (long long)run_id, (long long)max_pos, (long long)rows);
    int32_t *out = st == LP_OK ? malloc((size_t)rows * sizeof *out) : NULL;
    if (st == LP_OK && !out)
        st = lp_error_set(err, LP_ERR_NOMEM, "tokens of run %lld: out of memory", (long long)run_id);
    sqlite3_stmt *stmt = NULL;
    if (st == LP_OK)
        st = prepare_run(s, sql_token_ids, run_id, &stmt, err);
    for (int64_t i = 0; st == LP_OK && i < rows; i++)
        out[i] = -1;
    int rc = SQLITE_DONE;
    while (st == LP_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        int64_t pos = sqlite3_column_int64(stmt, 0);
        if (pos >= 0 && pos < rows) /* bounded above; a negative pos is simply dropped */
            out[pos] = (int32_t)sqlite3_column_int64(stmt, 1);
    }
    if (st == LP_OK && rc != SQLITE_DONE)
        st = lp_store_sql_error(s, "reading tokens", err);
    sqlite3_finalize(stmt);
    if (st != LP_OK) {
        free(out);
        return st;
    }
    *ids = out;
    *n = rows;
    return LP_OK;
}

/* ---- predictions ------------------------------------------------------------------------------ */

void lp_store_predictions_clear(lp_store_predictions *p)
{
    free(p->token_id);
    free(p->prob);
    free(p->logit);
    lp_store_free_texts(p->piece, p->n_pos * p->k);
    memset(p, 0, sizeof *p);
}

static lp_status alloc_predictions(lp_store_predictions *p, int64_t n_pos, int64_t k,
                                   lp_error *err)
{
    uint64_t cells;
    if (!lp_mul_u64((uint64_t)n_pos, (uint64_t)k, &cells) || cells > SIZE_MAX / sizeof(double))
        return lp_error_set(err, LP_ERR_RANGE, "predictions: %lld positions x %lld ranks overflow",
                            (long long)n_pos, (long long)k);
    p->n_pos = n_pos;
    p->k = k;
    p->token_id = malloc((size_t)cells * sizeof *p->token_id + 1);
    p->prob = malloc((size_t)cells * sizeof *p->prob + 1);
    p->logit = malloc((size_t)cells * sizeof *p->logit + 1);
    p->piece = calloc((size_t)cells + 1, sizeof *p->piece);
    if (!p->token_id || !p->prob || !p->logit || !p->piece)
        return lp_error_set(err, LP_ERR_NOMEM, "predictions: out of memory (%llu cells)",
                            (unsigned long long)cells);
    for (uint64_t i = 0; i < cells; i++) {
        p->token_id[i] = -1;
        p->prob[i] = p->logit[i] = (double)NAN;
    }
    return LP_OK;
}

static double column_real(sqlite3_stmt *stmt, int col)
{
    return sqlite3_column_type(stmt, col) == SQLITE_NULL ? (double)NAN
                                                         : sqlite3_column_double(stmt, col);
}

/* Rows (pos, rank, token_id, piece, prob, logit) into the arrays. */
static lp_status fill_predictions(lp_store *s, sqlite3_stmt *stmt, int64_t run_id,
                                  lp_store_predictions *p, lp_error *err)
{
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        int64_t pos = sqlite3_column_int64(stmt, 0), rank = sqlite3_column_int64(stmt, 1);
        if (pos < 0 || pos >= p->n_pos || rank < 0 || rank >= p->k)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: predictions of run %lld: pos %lld rank %lld outside the "
                                "run's %lld positions x %lld ranks",
                                s->path, (long long)run_id, (long long)pos, (long long)rank,
                                (long long)p->n_pos, (long long)p->k);
        int64_t i = pos * p->k + rank;
        p->token_id[i] = (int32_t)sqlite3_column_int64(stmt, 2);
        free(p->piece[i]);
        if (!(p->piece[i] = copy_text(sqlite3_column_text(stmt, 3))))
            return lp_error_set(err, LP_ERR_NOMEM, "predictions: out of memory");
        p->prob[i] = column_real(stmt, 4);
        p->logit[i] = column_real(stmt, 5);
    }
    return rc == SQLITE_DONE ? LP_OK : lp_store_sql_error(s, "reading predictions", err);
}

lp_status lp_store_read_predictions(lp_store *s, const lp_store_run *run,
                                    lp_store_predictions *out, lp_error *err)
{
    memset(out, 0, sizeof *out);
    if (!lp_store_table_exists(s, "predictions"))
        return no_rows(s, run->id, "predictions", err);
    int64_t max_rank;
    bool none;
    lp_status st = query_int(s, sql_max_rank, run->id, "reading predictions", &max_rank, &none,
                             err);
    if (st != LP_OK)
        return st;
    if (none || run->n_tokens == 0)
        return no_rows(s, run->id, "predictions", err);
    if (max_rank < 0 || max_rank >= MAX_RANK)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: predictions of run %lld: rank %lld outside "
                            "[0, %d)", s->path, (long long)run->id, (long long)max_rank, MAX_RANK);
    sqlite3_stmt *stmt = NULL;
    st = alloc_predictions(out, run->n_tokens, max_rank + 1, err);
    if (st == LP_OK)
        st = prepare_run(s, sql_predictions, run->id, &stmt, err);
    if (st == LP_OK)
        st = fill_predictions(s, stmt, run->id, out, err);
    sqlite3_finalize(stmt);
    if (st != LP_OK)
        lp_store_predictions_clear(out);
    return st;
}

/* ---- full logits ------------------------------------------------------------------------------ */

lp_status lp_store_logits_shape(lp_store *s, const lp_store_run *run, int64_t *n_rows,
                                int64_t *vocab, lp_error *err)
{
    *n_rows = *vocab = 0;
    if (!lp_store_table_exists(s, "logits"))
        return no_rows(s, run->id, "logits", err);
    sqlite3_stmt *stmt;
    lp_status st = prepare_run(s, sql_logits_shape, run->id, &stmt, err);
    if (st != LP_OK)
        return st;
    int rc = sqlite3_step(stmt);
    int64_t rows = rc == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : 0;
    int64_t lo = sqlite3_column_int64(stmt, 1), hi = sqlite3_column_int64(stmt, 2);
    int64_t pos_lo = sqlite3_column_int64(stmt, 3), pos_hi = sqlite3_column_int64(stmt, 4);
    sqlite3_finalize(stmt);
    if (rc != SQLITE_ROW)
        return lp_store_sql_error(s, "reading logits", err);
    if (rows == 0)
        return no_rows(s, run->id, "logits", err);
    if (lo != hi || lo <= 0 || lo % 4 != 0 || pos_lo < 0 || pos_hi >= run->n_tokens)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: logits of run %lld: rows of %lld..%lld bytes at positions "
                            "%lld..%lld (want one f32 length for all, positions in [0, %lld))",
                            s->path, (long long)run->id, (long long)lo, (long long)hi,
                            (long long)pos_lo, (long long)pos_hi, (long long)run->n_tokens);
    *n_rows = rows;
    *vocab = lo / 4;
    return LP_OK;
}

lp_status lp_store_read_logits(lp_store *s, const lp_store_run *run, int64_t pos, int64_t vocab,
                               float *out, lp_error *err)
{
    sqlite3_stmt *stmt;
    lp_status st = prepare_run(s, sql_logits_row, run->id, &stmt, err);
    if (st != LP_OK)
        return st;
    sqlite3_bind_int64(stmt, 2, pos);
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
        const unsigned char *data = sqlite3_column_blob(stmt, 0);
        int64_t bytes = sqlite3_column_bytes(stmt, 0);
        if (bytes != vocab * 4)
            st = lp_error_set(err, LP_ERR_FORMAT, "%s: logits of run %lld pos %lld: %lld bytes, "
                              "want %lld", s->path, (long long)run->id, (long long)pos,
                              (long long)bytes, (long long)(vocab * 4));
        for (int64_t i = 0; st == LP_OK && i < vocab; i++)
            out[i] = lp_load_f32(data + 4 * i);
    } else if (rc == SQLITE_DONE) {
        for (int64_t i = 0; i < vocab; i++)
            out[i] = NAN;
    } else {
        st = lp_store_sql_error(s, "reading logits", err);
    }
    sqlite3_finalize(stmt);
    return st;
}

/* ---- leak checks ------------------------------------------------------------------------------ */

static void fill_leak_check(sqlite3_stmt *stmt, lp_leak_check *c)
{
    const unsigned char *name = sqlite3_column_text(stmt, 0);
    const unsigned char *detail = sqlite3_column_text(stmt, 5);
    snprintf(c->name, sizeof c->name, "%s", name ? (const char *)name : "");
    c->passed = sqlite3_column_int(stmt, 1) != 0;
    c->layer = sqlite3_column_type(stmt, 2) == SQLITE_NULL ? -1 : sqlite3_column_int(stmt, 2);
    c->position = sqlite3_column_type(stmt, 3) == SQLITE_NULL ? -1
                                                              : sqlite3_column_int64(stmt, 3);
    c->max_abs_diff = column_real(stmt, 4);
    snprintf(c->detail, sizeof c->detail, "%s", detail ? (const char *)detail : "");
}

lp_status lp_store_read_leak_checks(lp_store *s, int64_t run_id, lp_leak_check **checks,
                                    int64_t *n, lp_error *err)
{
    *checks = NULL;
    *n = 0;
    if (!lp_store_table_exists(s, "leak_checks"))
        return no_rows(s, run_id, "leak_checks", err);
    int64_t count;
    bool none;
    lp_status st = query_int(s, sql_count_leak_checks, run_id, "reading leak_checks", &count,
                             &none, err);
    if (st != LP_OK)
        return st;
    if (count == 0)
        return no_rows(s, run_id, "leak_checks", err);
    lp_leak_check *out = calloc((size_t)count, sizeof *out);
    if (!out)
        return lp_error_set(err, LP_ERR_NOMEM, "leak_checks: out of memory (%lld rows)",
                            (long long)count);
    sqlite3_stmt *stmt;
    st = prepare_run(s, sql_leak_checks, run_id, &stmt, err);
    int64_t got = 0;
    int rc = SQLITE_DONE;
    /* a writer may add rows between the count and the read: keep the first `count` */
    while (st == LP_OK && got < count && (rc = sqlite3_step(stmt)) == SQLITE_ROW)
        fill_leak_check(stmt, &out[got++]);
    if (st == LP_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
        st = lp_store_sql_error(s, "reading leak_checks", err);
    sqlite3_finalize(stmt);
    if (st != LP_OK) {
        free(out);
        return st;
    }
    *checks = out;
    *n = got;
    return LP_OK;
}

/* ---- the runs row ----------------------------------------------------------------------------- */

/* The non-NULL columns of the row as (name, text) pairs. */
static lp_status fill_fields(sqlite3_stmt *stmt, char **keys, char **values, int64_t *n,
                             lp_error *err)
{
    int n_cols = sqlite3_column_count(stmt);
    for (int c = 0; c < n_cols; c++) {
        if (sqlite3_column_type(stmt, c) == SQLITE_NULL)
            continue;
        keys[*n] = copy_text((const unsigned char *)sqlite3_column_name(stmt, c));
        values[*n] = copy_text(sqlite3_column_text(stmt, c));
        (*n)++;
        if (!keys[*n - 1] || !values[*n - 1])
            return lp_error_set(err, LP_ERR_NOMEM, "runs row: out of memory");
    }
    return LP_OK;
}

lp_status lp_store_read_run_fields(lp_store *s, int64_t run_id, char ***keys, char ***values,
                                   int64_t *n, lp_error *err)
{
    *keys = *values = NULL;
    *n = 0;
    sqlite3_stmt *stmt;
    lp_status st = prepare_run(s, sql_run_row, run_id, &stmt, err);
    if (st != LP_OK)
        return st;
    int rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(stmt);
        return rc == SQLITE_DONE ? lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no run with id %lld",
                                                s->path, (long long)run_id)
                                 : lp_store_sql_error(s, "reading runs", err);
    }
    size_t n_cols = (size_t)sqlite3_column_count(stmt);
    char **k = calloc(n_cols + 1, sizeof *k), **v = calloc(n_cols + 1, sizeof *v);
    if (!k || !v)
        st = lp_error_set(err, LP_ERR_NOMEM, "runs row: out of memory");
    else
        st = fill_fields(stmt, k, v, n, err);
    sqlite3_finalize(stmt);
    if (st != LP_OK) {
        lp_store_free_texts(k, (int64_t)n_cols);
        lp_store_free_texts(v, (int64_t)n_cols);
        *n = 0;
        return st;
    }
    *keys = k;
    *values = v;
    return LP_OK;
}

lp_status lp_store_read_first_generated(lp_store *s, int64_t run_id, int64_t *pos, lp_error *err)
{
    *pos = -1;
    sqlite3_stmt *probe;
    /* databases from before schema version 2 have no generated column: nothing was generated */
    if (sqlite3_prepare_v2(s->db, "SELECT generated FROM tokens LIMIT 0", -1, &probe, NULL) !=
        SQLITE_OK)
        return LP_OK;
    sqlite3_finalize(probe);
    int64_t first;
    bool none;
    lp_status st = query_int(s, "SELECT min(pos) FROM tokens WHERE run_id = ?1 AND generated = 1",
                             run_id, "reading tokens", &first, &none, err);
    if (st == LP_OK && !none)
        *pos = first;
    return st;
}
