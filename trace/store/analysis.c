/* The analysis tables (loupe eval, loupe ablate): their schema, created on every open (the one
 * migration step older databases need: CREATE IF NOT EXISTS adds them), and their writes into the
 * open run's transaction. */
#define _POSIX_C_SOURCE 200809L
#include "trace/store/store.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect/tokenizer/tokenizer.h"

#include "trace/store/store_internal.h"

/* ---- schema (documented in trace/README.md, "The trace database") ---- */
static const char analysis_schema[] =
    /* loupe eval: one row per run */
    "CREATE TABLE IF NOT EXISTS eval_results (\n"
    "    run_id        INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,\n"
    "    n_tokens      INTEGER NOT NULL,\n"
    "    n_scored      INTEGER NOT NULL,\n"
    "    n_windows     INTEGER NOT NULL,\n"
    "    context       INTEGER NOT NULL,\n"
    "    stride        INTEGER NOT NULL,\n"
    "    nll           REAL NOT NULL,\n"
    "    ppl           REAL NOT NULL,\n"
    "    n_bytes       INTEGER,\n"
    "    bits_per_byte REAL\n"
    ");\n"
    /* next-token NLL after position pos (of the token at pos + 1) */
    "CREATE TABLE IF NOT EXISTS token_nll (\n"
    "    run_id    INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,\n"
    "    pos       INTEGER NOT NULL,\n"
    "    target_id INTEGER NOT NULL,\n"
    "    nll       REAL NOT NULL,\n"
    "    PRIMARY KEY (run_id, pos)\n"
    ");\n"
    /* loupe ablate: the mean NLL with one head ablated */
    "CREATE TABLE IF NOT EXISTS head_importance (\n"
    "    run_id  INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,\n"
    "    layer   INTEGER NOT NULL,\n"
    "    head    INTEGER NOT NULL,\n"
    "    method  TEXT NOT NULL,\n"
    "    nll     REAL NOT NULL,\n"
    "    delta   REAL NOT NULL,\n"
    "    PRIMARY KEY (run_id, layer, head, method)\n"
    ");\n"
    /* loupe ablate --prune: heads removed together, in order, and the NLL after each step */
    "CREATE TABLE IF NOT EXISTS pruning_plan (\n"
    "    run_id    INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,\n"
    "    step      INTEGER NOT NULL,\n"
    "    layer     INTEGER NOT NULL,\n"
    "    head      INTEGER NOT NULL,\n"
    "    nll       REAL NOT NULL,\n"
    "    iterative INTEGER NOT NULL,\n"
    "    PRIMARY KEY (run_id, step)\n"
    ");\n"
    /* loupe trace --logit-lens: every layer's residual read out by the classifier */
    "CREATE TABLE IF NOT EXISTS logit_lens (\n"
    "    run_id   INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,\n"
    "    layer    INTEGER NOT NULL,\n"
    "    pos      INTEGER NOT NULL,\n"
    "    rank     INTEGER NOT NULL,\n"
    "    token_id INTEGER NOT NULL,\n"
    "    piece    TEXT NOT NULL,\n"
    "    prob     REAL NOT NULL,\n"
    "    PRIMARY KEY (run_id, layer, pos, rank)\n"
    ");\n"
    "CREATE TABLE IF NOT EXISTS logit_lens_layers (\n"
    "    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,\n"
    "    layer  INTEGER NOT NULL,\n"
    "    nll    REAL,\n"
    "    PRIMARY KEY (run_id, layer)\n"
    ");\n"
    /* loupe diff: one row per comparison of two runs (B's database may be another file) */
    "CREATE TABLE IF NOT EXISTS diffs (\n"
    "    id         INTEGER PRIMARY KEY,\n"
    "    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),\n"
    "    a_db       TEXT NOT NULL,\n"
    "    a_run      INTEGER NOT NULL,\n"
    "    b_db       TEXT NOT NULL,\n"
    "    b_run      INTEGER NOT NULL,\n"
    "    n_tokens   INTEGER NOT NULL,\n"
    "    n_layers   INTEGER NOT NULL,\n"
    "    n_heads    INTEGER NOT NULL,\n"
    "    has_kl     INTEGER NOT NULL\n"
    ");\n"
    "CREATE TABLE IF NOT EXISTS diff_heads (\n"
    "    diff_id INTEGER NOT NULL REFERENCES diffs(id) ON DELETE CASCADE,\n"
    "    layer   INTEGER NOT NULL,\n"
    "    head    INTEGER NOT NULL,\n"
    "    js_mean REAL,\n"
    "    max_abs REAL,\n"
    "    PRIMARY KEY (diff_id, layer, head)\n"
    ");\n"
    /* per head the change B - A of every head_stats column (NULL where a run lacks it) */
    "CREATE TABLE IF NOT EXISTS diff_head_stats (\n"
    "    diff_id INTEGER NOT NULL REFERENCES diffs(id) ON DELETE CASCADE,\n"
    "    layer   INTEGER NOT NULL,\n"
    "    head    INTEGER NOT NULL,\n"
    "    stat    TEXT NOT NULL,\n"
    "    delta   REAL,\n"
    "    PRIMARY KEY (diff_id, layer, head, stat)\n"
    ");\n"
    "CREATE TABLE IF NOT EXISTS diff_positions (\n"
    "    diff_id      INTEGER NOT NULL REFERENCES diffs(id) ON DELETE CASCADE,\n"
    "    pos          INTEGER NOT NULL,\n"
    "    kl           REAL,\n"
    "    argmax_agree INTEGER NOT NULL,\n"
    "    PRIMARY KEY (diff_id, pos)\n"
    ");\n";

lp_status lp_store_create_analysis_tables(lp_store *s, lp_error *err)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, analysis_schema, NULL, NULL, &msg) != SQLITE_OK) {
        lp_status st = lp_error_set(err, LP_ERR_SQLITE, "%s: creating the analysis tables: %s",
                                    s->path, msg ? msg : sqlite3_errmsg(s->db));
        sqlite3_free(msg);
        return st;
    }
    return LP_OK;
}

/* ---- writes ---- */

/* An insert into the open run's rows: LP_ERR_USAGE when no run is open. */
static lp_status prepare_in_run(lp_store *s, const char *sql, sqlite3_stmt **q, const char *what,
                                lp_error *err)
{
    *q = NULL;
    if (!s->in_run)
        return lp_error_set(err, LP_ERR_USAGE, "%s: no run is open", s->path);
    return lp_store_prepare(s, sql, q, what, err);
}

void lp_store_bind_real_or_null(sqlite3_stmt *q, int i, double v)
{
    if (isnan(v))
        sqlite3_bind_null(q, i);
    else
        sqlite3_bind_double(q, i, v);
}

lp_status lp_store_add_eval(lp_store *s, const lp_store_eval *e, const int32_t *ids,
                            const double *nll, lp_error *err)
{
    sqlite3_stmt *q;
    lp_status st = prepare_in_run(s,
                                  "INSERT INTO eval_results (run_id, n_tokens, n_scored, "
                                  "n_windows, context, stride, nll, ppl, n_bytes, bits_per_byte) "
                                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                                  &q, "inserting eval_results", err);
    if (st != LP_OK)
        return st;
    sqlite3_bind_int64(q, 1, s->run.run_id);
    sqlite3_bind_int64(q, 2, e->n_tokens);
    sqlite3_bind_int64(q, 3, e->n_scored);
    sqlite3_bind_int64(q, 4, e->n_windows);
    sqlite3_bind_int64(q, 5, e->context);
    sqlite3_bind_int64(q, 6, e->stride);
    sqlite3_bind_double(q, 7, e->nll);
    sqlite3_bind_double(q, 8, e->ppl);
    if (e->n_bytes > 0)
        sqlite3_bind_int64(q, 9, e->n_bytes);
    else
        sqlite3_bind_null(q, 9);
    lp_store_bind_real_or_null(q, 10, e->bits_per_byte);
    st = lp_store_step_once(s, q, "inserting eval_results", err);
    if (st != LP_OK)
        return st;
    return lp_store_add_token_nll(s, ids, nll, e->n_tokens, err);
}

lp_status lp_store_add_token_nll(lp_store *s, const int32_t *ids, const double *nll,
                                 int64_t n_tokens, lp_error *err)
{
    sqlite3_stmt *q;
    lp_status st = prepare_in_run(s,
                                  "INSERT INTO token_nll (run_id, pos, target_id, nll) VALUES "
                                  "(?1, ?2, ?3, ?4)",
                                  &q, "inserting token_nll", err);
    if (st != LP_OK)
        return st;
    for (int64_t p = 0; p + 1 < n_tokens && st == LP_OK; p++) {
        if (isnan(nll[p]))
            continue; /* a window start that nothing predicted */
        sqlite3_bind_int64(q, 1, s->run.run_id);
        sqlite3_bind_int64(q, 2, p);
        sqlite3_bind_int64(q, 3, ids[p + 1]);
        sqlite3_bind_double(q, 4, nll[p]);
        st = lp_store_step_done(s, q, "inserting token_nll", err);
    }
    sqlite3_finalize(q);
    return st;
}

lp_status lp_store_add_head_importance(lp_store *s, const char *method, int64_t n_layers,
                                       int64_t n_heads, const double *nll, double clean_nll,
                                       lp_error *err)
{
    sqlite3_stmt *q;
    lp_status st = prepare_in_run(s,
                                  "INSERT INTO head_importance (run_id, layer, head, method, nll, "
                                  "delta) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                                  &q, "inserting head_importance", err);
    if (st != LP_OK)
        return st;
    for (int64_t i = 0; i < n_layers * n_heads && st == LP_OK; i++) {
        sqlite3_bind_int64(q, 1, s->run.run_id);
        sqlite3_bind_int64(q, 2, i / n_heads);
        sqlite3_bind_int64(q, 3, i % n_heads);
        sqlite3_bind_text(q, 4, method, -1, SQLITE_STATIC);
        sqlite3_bind_double(q, 5, nll[i]);
        sqlite3_bind_double(q, 6, nll[i] - clean_nll);
        st = lp_store_step_done(s, q, "inserting head_importance", err);
    }
    sqlite3_finalize(q);
    return st;
}

lp_status lp_store_add_pruning_plan(lp_store *s, const int64_t *layers, const int64_t *heads,
                                    const double *nll, int64_t n_steps, bool iterative,
                                    lp_error *err)
{
    sqlite3_stmt *q;
    lp_status st = prepare_in_run(s,
                                  "INSERT INTO pruning_plan (run_id, step, layer, head, nll, "
                                  "iterative) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                                  &q, "inserting pruning_plan", err);
    if (st != LP_OK)
        return st;
    for (int64_t i = 0; i < n_steps && st == LP_OK; i++) {
        sqlite3_bind_int64(q, 1, s->run.run_id);
        sqlite3_bind_int64(q, 2, i);
        sqlite3_bind_int64(q, 3, layers[i]);
        sqlite3_bind_int64(q, 4, heads[i]);
        sqlite3_bind_double(q, 5, nll[i]);
        sqlite3_bind_int(q, 6, iterative);
        st = lp_store_step_done(s, q, "inserting pruning_plan", err);
    }
    sqlite3_finalize(q);
    return st;
}

lp_status lp_store_add_logit_lens(lp_store *s, int64_t n_layers, int64_t n_pos, int64_t k,
                                  const int32_t *tokens, const float *probs,
                                  const double *layer_nll, lp_error *err)
{
    sqlite3_stmt *q, *ql;
    lp_status st = prepare_in_run(s,
                                  "INSERT INTO logit_lens (run_id, layer, pos, rank, token_id, "
                                  "piece, prob) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                                  &q, "inserting logit_lens", err);
    if (st == LP_OK &&
        (st = lp_store_prepare(s,
                               "INSERT INTO logit_lens_layers (run_id, layer, nll) VALUES "
                               "(?1, ?2, ?3)",
                               &ql, "inserting logit_lens_layers", err)))
        sqlite3_finalize(q);
    if (st != LP_OK)
        return st;
    for (int64_t i = 0; i < n_layers * n_pos * k && st == LP_OK; i++) {
        if (tokens[i] < 0)
            continue;
        sqlite3_bind_int64(q, 1, s->run.run_id);
        sqlite3_bind_int64(q, 2, i / (n_pos * k));
        sqlite3_bind_int64(q, 3, (i / k) % n_pos);
        sqlite3_bind_int64(q, 4, i % k);
        sqlite3_bind_int64(q, 5, tokens[i]);
        const char *piece = s->tok ? lp_tokenizer_piece(s->tok, tokens[i]) : NULL;
        char buf[32];
        if (!piece) {
            snprintf(buf, sizeof buf, "<%ld>", (long)tokens[i]);
            piece = buf;
        }
        sqlite3_bind_text(q, 6, piece, -1, SQLITE_TRANSIENT);
        sqlite3_bind_double(q, 7, (double)probs[i]);
        st = lp_store_step_done(s, q, "inserting logit_lens", err);
    }
    for (int64_t l = 0; l < n_layers && st == LP_OK; l++) {
        sqlite3_bind_int64(ql, 1, s->run.run_id);
        sqlite3_bind_int64(ql, 2, l);
        lp_store_bind_real_or_null(ql, 3, layer_nll[l]);
        st = lp_store_step_done(s, ql, "inserting logit_lens_layers", err);
    }
    sqlite3_finalize(q);
    sqlite3_finalize(ql);
    return st;
}

/* ---- reads (for loupe render) ---- */

/* Prepared with run_id bound to ?1. */
static lp_status prepare_run(lp_store *s, const char *sql, int64_t run_id, sqlite3_stmt **q,
                             const char *what, lp_error *err)
{
    lp_status st = lp_store_prepare(s, sql, q, what, err);
    if (st == LP_OK)
        sqlite3_bind_int64(*q, 1, run_id);
    return st;
}

lp_status lp_store_read_importance(lp_store *s, const lp_store_run *run, double **delta,
                                   char method[16], lp_error *err)
{
    *delta = NULL;
    method[0] = '\0';
    if (!lp_store_table_exists(s, "head_importance"))
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no head_importance table (run `loupe "
                            "ablate` first)", s->path);
    sqlite3_stmt *q;
    lp_status st = prepare_run(s,
                               "SELECT layer, head, delta, method FROM head_importance WHERE "
                               "run_id = ?1 AND method = (SELECT method FROM head_importance "
                               "WHERE run_id = ?1 ORDER BY method = 'zero' DESC, method LIMIT 1)",
                               run->id, &q, "reading head_importance", err);
    if (st != LP_OK)
        return st;
    int64_t n = run->n_layers * run->n_heads, got = 0;
    double *v = malloc((size_t)n * sizeof *v);
    if (!v) {
        sqlite3_finalize(q);
        return lp_error_set(err, LP_ERR_NOMEM, "head_importance: out of memory");
    }
    for (int64_t i = 0; i < n; i++)
        v[i] = NAN;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t l = sqlite3_column_int64(q, 0), h = sqlite3_column_int64(q, 1);
        if (l < 0 || l >= run->n_layers || h < 0 || h >= run->n_heads)
            continue; /* outside the run's shape: not drawn */
        v[l * run->n_heads + h] = sqlite3_column_double(q, 2);
        snprintf(method, 16, "%s", (const char *)sqlite3_column_text(q, 3));
        got++;
    }
    if (rc != SQLITE_DONE)
        st = lp_store_sql_error(s, "reading head_importance", err);
    else if (got == 0)
        st = lp_error_set(err, LP_ERR_NOT_FOUND, "%s: run %lld has no head_importance rows (run "
                          "`loupe ablate` first, or name its run with --run)",
                          s->path, (long long)run->id);
    sqlite3_finalize(q);
    if (st != LP_OK) {
        free(v);
        return st;
    }
    *delta = v;
    return LP_OK;
}

lp_status lp_store_latest_run_of_kind(lp_store *s, const char *kind, int64_t *run_id,
                                      lp_error *err)
{
    sqlite3_stmt *q;
    lp_status st = lp_store_prepare(s, "SELECT max(id) FROM runs WHERE status = 'complete' AND "
                                    "kind = ?1", &q, "reading runs", err);
    if (st != LP_OK)
        return st;
    sqlite3_bind_text(q, 1, kind, -1, SQLITE_STATIC);
    *run_id = 0;
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL)
        *run_id = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return *run_id > 0 ? LP_OK
                       : lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no complete '%s' runs",
                                      s->path, kind);
}

void lp_store_logit_lens_clear(lp_store_logit_lens *lens)
{
    lp_store_free_texts(lens->piece, lens->n_layers * lens->n_pos);
    free(lens->prob);
    free(lens->layer_nll);
    memset(lens, 0, sizeof *lens);
}

lp_status lp_store_read_logit_lens(lp_store *s, const lp_store_run *run,
                                   lp_store_logit_lens *out, lp_error *err)
{
    memset(out, 0, sizeof *out);
    if (!lp_store_table_exists(s, "logit_lens"))
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no logit_lens table (trace with "
                            "--logit-lens first)", s->path);
    int64_t L = run->n_layers, T = run->n_tokens;
    out->n_layers = L;
    out->n_pos = T;
    out->piece = calloc((size_t)(L * T), sizeof *out->piece);
    out->prob = malloc((size_t)(L * T) * sizeof *out->prob);
    out->layer_nll = malloc((size_t)L * sizeof *out->layer_nll);
    if (!out->piece || !out->prob || !out->layer_nll) {
        lp_store_logit_lens_clear(out);
        return lp_error_set(err, LP_ERR_NOMEM, "logit_lens: out of memory");
    }
    for (int64_t i = 0; i < L * T; i++)
        out->prob[i] = NAN;
    for (int64_t l = 0; l < L; l++)
        out->layer_nll[l] = NAN;
    sqlite3_stmt *q = NULL;
    lp_status st = prepare_run(s, "SELECT layer, pos, piece, prob FROM logit_lens WHERE run_id = "
                               "?1 AND rank = 0", run->id, &q, "reading logit_lens", err);
    int64_t got = 0;
    int rc = SQLITE_DONE;
    while (st == LP_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t l = sqlite3_column_int64(q, 0), p = sqlite3_column_int64(q, 1);
        const char *piece = (const char *)sqlite3_column_text(q, 2);
        if (l < 0 || l >= L || p < 0 || p >= T || !piece)
            continue;
        free(out->piece[l * T + p]);
        out->piece[l * T + p] = strdup(piece);
        out->prob[l * T + p] = sqlite3_column_double(q, 3);
        got++;
    }
    if (st == LP_OK && rc != SQLITE_DONE)
        st = lp_store_sql_error(s, "reading logit_lens", err);
    sqlite3_finalize(q);
    if (st == LP_OK && got == 0)
        st = lp_error_set(err, LP_ERR_NOT_FOUND, "%s: run %lld has no logit_lens rows (trace "
                          "with --logit-lens, or name its run with --run)",
                          s->path, (long long)run->id);
    if (st == LP_OK && (st = prepare_run(s, "SELECT layer, nll FROM logit_lens_layers WHERE "
                                         "run_id = ?1", run->id, &q,
                                         "reading logit_lens_layers", err)) == LP_OK) {
        while (sqlite3_step(q) == SQLITE_ROW) {
            int64_t l = sqlite3_column_int64(q, 0);
            if (l >= 0 && l < L && sqlite3_column_type(q, 1) != SQLITE_NULL)
                out->layer_nll[l] = sqlite3_column_double(q, 1);
        }
        sqlite3_finalize(q);
    }
    if (st != LP_OK)
        lp_store_logit_lens_clear(out);
    return st;
}
