/* Writing the trace store: the schema, runs committed in one transaction, the recording observer,
 * and the leak checker's rows. */
#define _POSIX_C_SOURCE 200809L
#include "trace/store/store.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/dtype.h"
#include "core/text.h"
#include "core/version.h"
#include "inspect/arch/arch_json.h"
#include "inspect/tokenizer/tokenizer.h"
#include "trace/kernels/kernels.h"
#include "trace/store/store_internal.h"

static const char *const stmt_sql[LP_STMT_COUNT] = {
    [LP_STMT_ATTENTION] = "INSERT INTO attention (run_id, layer, head, n_q, n_k, dtype, probs) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?)",
    [LP_STMT_HEAD_STATS] = "INSERT INTO head_stats (run_id, layer, head, entropy, max_prob, sink, "
                           "prev_token, self, distance, local_frac, local_window, output_norm, "
                           "keys50, keys90, keys99, low_mass, learned_sink) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [LP_STMT_PREDICTION] = "INSERT INTO predictions (run_id, pos, rank, token_id, piece, prob, "
                           "logit) VALUES (?, ?, ?, ?, ?, ?, ?)",
    [LP_STMT_LOGITS] = "INSERT INTO logits (run_id, pos, data) VALUES (?, ?, ?)",
    [LP_STMT_ROUTING] = "INSERT INTO expert_routing (run_id, layer, expert, tokens, mean_weight) "
                        "VALUES (?, ?, ?, ?, ?)",
    [LP_STMT_ROUTER_STATS] = "INSERT INTO router_stats (run_id, layer, mean_entropy) "
                             "VALUES (?, ?, ?)",
    [LP_STMT_TOKEN] = "INSERT INTO tokens (run_id, pos, token_id, piece, label, generated) "
                      "VALUES (?, ?, ?, ?, ?, ?)",
    [LP_STMT_LEAK_CHECK] = "INSERT INTO leak_checks (run_id, check_name, passed, layer, position, "
                           "max_abs_diff, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
};

#define NOW_SQL "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

/* The one-off statements. */
static const char sql_foreign_tables[] =
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT "
    "IN ('meta', 'runs', 'tokens', 'attention', 'head_stats', 'predictions', 'logits', "
    "'expert_routing', 'router_stats', 'leak_checks', 'datasets', 'dataset_stats', "
    "'eval_results', 'token_nll', 'head_importance', 'pruning_plan', 'logit_lens', "
    "'logit_lens_layers', 'diffs', 'diff_heads', 'diff_head_stats', 'diff_positions') ORDER BY name";
static const char sql_insert_run[] =
    "INSERT INTO runs (status, kind, model_path, model_format, architecture, arch_json, prompt, "
    "n_tokens, n_layers, n_heads, n_threads, isa, loupe_version, maps_dtype, dataset, "
    "prompt_index, prompt_id, batch_id, batch_index, pad_left, pad_right, started_at) VALUES "
    "('running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, " NOW_SQL ")";
static const char sql_complete_run[] = "UPDATE runs SET status = 'complete', finished_at = "
                                       NOW_SQL ", seconds = ? WHERE id = ?";
static const char sql_insert_mask_run[] =
    "INSERT INTO runs (status, kind, model_path, model_format, architecture, n_tokens, n_layers, "
    "n_heads, n_threads, isa, loupe_version, maps_dtype, started_at, finished_at, seconds) VALUES "
    "('complete', 'leak', ?, ?, 'mask', ?, 0, ?, 1, 'none', ?, 'none', " NOW_SQL ", " NOW_SQL
    ", 0)";

static lp_status exec(lp_store *s, const char *sql, lp_error *err)
{
    if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK)
        return lp_store_sql_error(s, NULL, err);
    return LP_OK;
}

/* Run a prepared statement once and reset it; the bound blobs are SQLITE_STATIC (not copied). */
static lp_status step(lp_store *s, int which, lp_error *err)
{
    lp_status st = lp_store_step_done(s, s->stmt[which], "insert", err);
    sqlite3_clear_bindings(s->stmt[which]);
    return st;
}

void lp_store_opts_init(lp_store_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->maps = LP_MAPS_F16;
    opts->logits = LP_LOGITS_TOPK;
    opts->top_k = 5;
    opts->local_window = 8;
}

lp_run_info lp_run_info_for_model(const char *kind, const char *model_path, const lp_model *model,
                                  const char *prompt, const int32_t *tokens, int64_t n_tokens,
                                  const struct lp_tokenizer *tokenizer, int n_threads)
{
    const lp_weights *w = lp_model_weights(model);
    lp_run_info info = {kind,   model_path, lp_weights_format_name(lp_weights_format_of(w)),
                        lp_model_arch(model), prompt, tokens, n_tokens, tokenizer, n_threads,
                        NULL, 0, NULL, false, 0, 0, 0, 0};
    return info;
}

/* ---- opening ---------------------------------------------------------------------------------- */

/* A table loupe never made, when the database has no meta.schema_version. */
static lp_status check_foreign_tables(lp_store *s, lp_error *err)
{
    sqlite3_stmt *q;
    lp_status st = lp_store_prepare(s, sql_foreign_tables, &q, "reading the schema", err);
    if (st != LP_OK)
        return st;
    char name[128];
    if (sqlite3_step(q) == SQLITE_ROW)
        st = lp_error_set(err, LP_ERR_FORMAT,
                          "%s: not a loupe trace database (it has a table '%s' and no "
                          "meta.schema_version); use another --db",
                          s->path,
                          lp_store_one_line((const char *)sqlite3_column_text(q, 0), name,
                                            sizeof name));
    sqlite3_finalize(q);
    return st;
}

/* A database without meta.schema_version is new, or a loupe database from before versioning. One
 * with a table loupe never made, or a loupe-named table without loupe's columns, is someone
 * else's: refuse it before writing anything into it (found by hardening: a --db pointing at a
 * user's own database used to gain loupe's ten tables, even when the run then failed). */
static lp_status check_unversioned(lp_store *s, lp_error *err)
{
    static const char *const probes[][2] = {
        {"runs", "SELECT id, status, model_path, n_tokens FROM runs LIMIT 0"},
        {"tokens", "SELECT run_id, pos, token_id, piece FROM tokens LIMIT 0"},
        {"attention", "SELECT run_id, layer, head, probs FROM attention LIMIT 0"},
    };
    lp_status st = check_foreign_tables(s, err);
    for (size_t i = 0; st == LP_OK && i < sizeof probes / sizeof probes[0]; i++) {
        if (!lp_store_table_exists(s, probes[i][0]))
            continue;
        sqlite3_stmt *probe;
        char why[256];
        if (sqlite3_prepare_v2(s->db, probes[i][1], -1, &probe, NULL) != SQLITE_OK)
            st = lp_error_set(err, LP_ERR_FORMAT,
                              "%s: not a loupe trace database (its table '%s' lacks loupe's "
                              "columns: %s); use another --db",
                              s->path, probes[i][0],
                              lp_store_one_line(sqlite3_errmsg(s->db), why, sizeof why));
        sqlite3_finalize(probe);
    }
    return st;
}

/* True when `table` has `column` (a probe statement compiles). */
static bool has_column(lp_store *s, const char *table, const char *column)
{
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT %s FROM %s LIMIT 0", column, table);
    sqlite3_stmt *probe;
    if (sqlite3_prepare_v2(s->db, sql, -1, &probe, NULL) != SQLITE_OK)
        return false;
    sqlite3_finalize(probe);
    return true;
}

/* ---- migration: every column added since the first databases, then schema_version ----------
 * Version 1 -> 2 (generation and datasets, issue 12): tokens.generated, runs.kv_bytes,
 * runs.kv_dtype, runs.kv_rebuilt_at, runs.dataset, runs.prompt_index, runs.prompt_id, runs.batch_id,
 * runs.batch_index, runs.pad_left, runs.pad_right (the tables datasets and
 * dataset_stats come from schema.sql's CREATE IF NOT EXISTS).
 * (tokens.label came during version 1.) A column is added only where it is missing, so a
 * database any earlier loupe wrote reaches the current schema in one step. */
static lp_status migrate(lp_store *s, lp_error *err)
{
    static const char *const added[][3] = {
        {"tokens", "label", "ALTER TABLE tokens ADD COLUMN label TEXT"},
        {"tokens", "generated", "ALTER TABLE tokens ADD COLUMN generated INTEGER NOT NULL DEFAULT 0"},
        {"runs", "kv_bytes", "ALTER TABLE runs ADD COLUMN kv_bytes INTEGER"},
        {"runs", "kv_dtype", "ALTER TABLE runs ADD COLUMN kv_dtype TEXT"},
        {"runs", "kv_rebuilt_at", "ALTER TABLE runs ADD COLUMN kv_rebuilt_at INTEGER"},
        {"runs", "dataset", "ALTER TABLE runs ADD COLUMN dataset TEXT"},
        {"runs", "prompt_index", "ALTER TABLE runs ADD COLUMN prompt_index INTEGER"},
        {"runs", "prompt_id", "ALTER TABLE runs ADD COLUMN prompt_id TEXT"},
        {"runs", "batch_id", "ALTER TABLE runs ADD COLUMN batch_id INTEGER"},
        {"runs", "batch_index", "ALTER TABLE runs ADD COLUMN batch_index INTEGER"},
        {"runs", "pad_left", "ALTER TABLE runs ADD COLUMN pad_left INTEGER"},
        {"runs", "pad_right", "ALTER TABLE runs ADD COLUMN pad_right INTEGER"},
        {"head_stats", "keys50", "ALTER TABLE head_stats ADD COLUMN keys50 REAL"},
        {"head_stats", "keys90", "ALTER TABLE head_stats ADD COLUMN keys90 REAL"},
        {"head_stats", "keys99", "ALTER TABLE head_stats ADD COLUMN keys99 REAL"},
        {"head_stats", "low_mass", "ALTER TABLE head_stats ADD COLUMN low_mass REAL"},
        {"head_stats", "learned_sink", "ALTER TABLE head_stats ADD COLUMN learned_sink REAL"},
    };
    lp_status st = LP_OK;
    for (size_t i = 0; st == LP_OK && i < sizeof added / sizeof added[0]; i++)
        if (!has_column(s, added[i][0], added[i][1]))
            st = exec(s, added[i][2], err);
    char sql[96];
    snprintf(sql, sizeof sql, "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', "
             "'%d')", LP_STORE_SCHEMA_VERSION);
    return st == LP_OK ? exec(s, sql, err) : st;
}

/* Switching a new database to WAL needs it alone; SQLite does not wait on the busy handler there
 * when another connection is switching it too, so wait here, within the same busy timeout. */
static lp_status set_wal(lp_store *s, lp_error *err)
{
    for (int waited_ms = 0;; waited_ms += 10) {
        int rc = sqlite3_exec(s->db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            return LP_OK;
        if ((rc & 0xff) != SQLITE_BUSY || waited_ms >= LP_STORE_BUSY_TIMEOUT_MS)
            return lp_store_sql_error(s, NULL, err);
        sqlite3_sleep(10);
    }
}

static lp_status create_schema(lp_store *s, lp_error *err)
{
    /* WAL: readers (render, users' SQL) never block the writer, and a killed writer leaves the
     * last committed state intact. */
    lp_status st = set_wal(s, err);
    /* One write transaction taken up front: two loupes opening the same new database at once
     * then queue on the busy timeout. Statement by statement, the second could find its read
     * snapshot stale when it upgrades to write, which SQLite reports as busy at once. */
    if (st || (st = exec(s, "BEGIN IMMEDIATE", err)))
        return st;
    if ((st = exec(s, lp_schema_sql, err)) == LP_OK &&
        /* migration step (issue 13): the analysis tables, added to databases that predate them */
        (st = lp_store_create_analysis_tables(s, err)) == LP_OK &&
        (st = migrate(s, err)) == LP_OK && (st = exec(s, "COMMIT", err)) == LP_OK)
        return LP_OK;
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
}

static lp_status prepare_statements(lp_store *s, lp_error *err)
{
    for (int i = 0; i < LP_STMT_COUNT; i++)
        if (sqlite3_prepare_v3(s->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->stmt[i],
                               NULL) != SQLITE_OK)
            return lp_store_sql_error(s, "preparing statements (is this a loupe database?)", err);
    return LP_OK;
}

static bool store_want(void *ctx, const lp_site *site);
static lp_status store_observe(void *ctx, const lp_site *site, const lp_view *view, lp_error *err);

lp_status lp_store_open(const char *path, lp_store **out, lp_error *err)
{
    *out = NULL;
    lp_store *s = lp_store_alloc(path, err);
    if (!s)
        return LP_ERR_NOMEM;
    lp_status st;
    int64_t version;
    if ((st = lp_store_check_writable(path, err)) != LP_OK) {
        lp_store_free(s);
        return st;
    }
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        char why[256];
        st = lp_error_set(err, LP_ERR_SQLITE, "%s: cannot open: %s", path,
                          s->db ? lp_store_one_line(sqlite3_errmsg(s->db), why, sizeof why)
                                : "out of memory");
        lp_store_free(s);
        return st;
    }
    sqlite3_busy_timeout(s->db, LP_STORE_BUSY_TIMEOUT_MS);
    if ((st = lp_store_check_version(s, "upgrade loupe or use another --db", &version, err)) ||
        (version == 0 && (st = check_unversioned(s, err))) || (st = create_schema(s, err)) ||
        (st = prepare_statements(s, err))) {
        lp_store_free(s);
        return st;
    }
    s->observer.ctx = s;
    s->observer.want = store_want;
    s->observer.observe = store_observe;
    *out = s;
    return LP_OK;
}

const lp_observer *lp_store_observer(lp_store *store) { return &store->observer; }

/* ---- beginning a run -------------------------------------------------------------------------- */

void lp_store_select_run(lp_store *s, const lp_store_run_acc *acc) { s->run = *acc; }

static void acc_free(lp_store_run_acc *acc)
{
    free(acc->stats);
    free(acc->stats_seen);
    free(acc->expert_tokens);
    free(acc->expert_weight);
    free(acc->router_entropy);
    free(acc->router_rows);
    lp_store_run_acc gone = {acc->run_id, NULL, NULL, NULL, NULL, NULL, NULL};
    *acc = gone; /* the id stays: lp_store_batch_finish reports it */
}

/* A run's accumulators, shaped by the store's n_layers, n_heads and n_experts. */
static bool acc_alloc(const lp_store *s, lp_store_run_acc *acc)
{
    size_t LH = (size_t)(s->n_layers * s->n_heads);
    size_t LE = (size_t)(s->n_layers * (s->n_experts > 0 ? s->n_experts : 1));
    acc->stats = calloc(LH, sizeof *acc->stats);
    acc->stats_seen = calloc(LH, sizeof(bool));
    acc->expert_tokens = calloc(LE, sizeof(int64_t));
    acc->expert_weight = calloc(LE, sizeof(double));
    acc->router_entropy = calloc((size_t)s->n_layers, sizeof(double));
    acc->router_rows = calloc((size_t)s->n_layers, sizeof(int64_t));
    return acc->stats && acc->stats_seen && acc->expert_tokens && acc->expert_weight &&
           acc->router_entropy && acc->router_rows;
}

static void free_run(lp_store *s)
{
    acc_free(&s->run);
    free(s->layer_sel);
    free(s->head_sel);
    free(s->f16);
    free(s->top);
    lp_store_gen_free(s);
    s->layer_sel = s->head_sel = NULL;
    s->f16 = NULL;
    s->f16_cap = 0;
    s->top = NULL;
    s->in_run = false;
}

static void mark_failed(lp_store *s)
{
    char sql[96];
    snprintf(sql, sizeof sql, "UPDATE runs SET status = 'failed' WHERE id = %lld",
             (long long)s->run.run_id);
    sqlite3_exec(s->db, sql, NULL, NULL, NULL);
}

static void piece_of(const lp_store *s, int32_t id, char *buf, size_t size, const char **out)
{
    const char *p = s->tok ? lp_tokenizer_piece(s->tok, id) : NULL;
    if (p) {
        *out = p;
    } else {
        snprintf(buf, size, "<%ld>", (long)id);
        *out = buf;
    }
}

static void bind_text_or_null(sqlite3_stmt *q, int col, const char *text)
{
    if (text)
        sqlite3_bind_text(q, col, text, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(q, col);
}

/* The runs row, 'running', committed at once (autocommit): durable before any data, so a killed
 * run shows as such. */
static lp_status insert_run_row(lp_store *s, const lp_run_info *info, lp_maps_dtype maps,
                                lp_error *err)
{
    const lp_arch *a = info->arch;
    char *arch_text = NULL;
    json_t *arch_json = lp_arch_to_json(a);
    if (arch_json) {
        arch_text = json_dumps(arch_json, JSON_COMPACT);
        json_decref(arch_json);
    }
    const char *maps_name = maps == LP_MAPS_F32 ? "f32" : maps == LP_MAPS_NONE ? "none" : "f16";
    sqlite3_stmt *q;
    lp_status st = lp_store_prepare(s, sql_insert_run, &q, "preparing the runs insert", err);
    if (st != LP_OK) {
        free(arch_text);
        return st;
    }
    sqlite3_bind_text(q, 1, info->kind ? info->kind : "trace", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 2, info->model_path ? info->model_path : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 3, info->model_format ? info->model_format : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(q, 4, a->family, -1, SQLITE_TRANSIENT);
    bind_text_or_null(q, 5, arch_text);
    bind_text_or_null(q, 6, info->prompt);
    sqlite3_bind_int64(q, 7, info->n_tokens);
    sqlite3_bind_int64(q, 8, a->n_layers);
    sqlite3_bind_int64(q, 9, a->n_heads);
    sqlite3_bind_int64(q, 10, info->n_threads > 0 ? info->n_threads : 1);
    sqlite3_bind_text(q, 11, lp_isa_name(lp_kernels_isa()), -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 12, LP_VERSION, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 13, maps_name, -1, SQLITE_STATIC);
    bind_text_or_null(q, 14, info->dataset);
    if (info->dataset)
        sqlite3_bind_int64(q, 15, info->prompt_index);
    else
        sqlite3_bind_null(q, 15);
    bind_text_or_null(q, 16, info->dataset ? info->prompt_id : NULL);
    int64_t batch_cols[4] = {info->batch_id, info->batch_index, info->pad_left, info->pad_right};
    for (int i = 0; i < 4; i++) {
        if (info->in_batch)
            sqlite3_bind_int64(q, 17 + i, batch_cols[i]);
        else
            sqlite3_bind_null(q, 17 + i);
    }
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    free(arch_text);
    if (rc != SQLITE_DONE)
        return lp_store_sql_error(s, "inserting the run", err);
    s->run.run_id = sqlite3_last_insert_rowid(s->db);
    return LP_OK;
}

/* The aggregates the observer accumulates over the pass, and the map selection. */
static lp_status alloc_run_state(lp_store *s, const lp_run_info *info, const lp_store_opts *opts,
                                 lp_error *err)
{
    const lp_arch *a = info->arch;
    s->opts = *opts;
    s->n_layers = a->n_layers;
    s->n_heads = a->n_heads;
    s->n_experts = a->n_experts > 0 ? a->n_experts : 0;
    s->has_sinks = a->attn_sinks;
    s->tok = info->tokenizer;
    int64_t top_k = s->opts.top_k > 0 ? s->opts.top_k : 1;
    lp_store_run_acc acc = {s->run.run_id, NULL, NULL, NULL, NULL, NULL, NULL};
    bool ok = acc_alloc(s, &acc);
    lp_store_select_run(s, &acc);
    s->layer_sel = malloc((size_t)s->n_layers * sizeof(bool));
    s->head_sel = malloc((size_t)s->n_heads * sizeof(bool));
    s->top = malloc((size_t)top_k * sizeof *s->top);
    if (!ok || !s->layer_sel || !s->head_sel || !s->top)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", s->path);
    for (int64_t l = 0; l < s->n_layers; l++)
        s->layer_sel[l] = opts->layers ? opts->layers[l] : true;
    for (int64_t h = 0; h < s->n_heads; h++)
        s->head_sel[h] = opts->heads ? opts->heads[h] : true;
    s->opts.layers = s->layer_sel;
    s->opts.heads = s->head_sel;
    s->gen_total = opts->seq_len;
    return opts->seq_len > 0 ? lp_store_gen_begin(s, err) : LP_OK;
}

/* tokens[t0 .. t1) at their positions; generated: 1 for tokens a generation produced. */
static lp_status insert_token_range(lp_store *s, const int32_t *tokens, int64_t t0, int64_t t1,
                                    int generated, lp_error *err)
{
    for (int64_t t = t0; t < t1; t++) {
        char buf[32];
        const char *piece;
        piece_of(s, tokens[t], buf, sizeof buf, &piece);
        char *label = s->tok ? lp_tokenizer_label(s->tok, tokens[t]) : NULL;
        sqlite3_stmt *ins = s->stmt[LP_STMT_TOKEN];
        sqlite3_bind_int64(ins, 1, s->run.run_id);
        sqlite3_bind_int64(ins, 2, t);
        sqlite3_bind_int64(ins, 3, tokens[t]);
        sqlite3_bind_text(ins, 4, piece, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(ins, 5, label ? label : piece, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(ins, 6, generated);
        lp_status st = step(s, LP_STMT_TOKEN, err);
        free(label);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

static lp_status insert_tokens(lp_store *s, const lp_run_info *info, lp_error *err)
{
    return insert_token_range(s, info->tokens, 0, info->n_tokens, 0, err);
}

lp_status lp_store_set_generated(lp_store *s, const int32_t *tokens, int64_t n_prompt,
                                 int64_t n_total, uint64_t kv_bytes, const char *kv_dtype,
                                 lp_error *err)
{
    if (!s->in_run || s->opts.seq_len <= 0 || n_total > s->opts.seq_len || n_prompt > n_total)
        return lp_error_set(err, LP_ERR_USAGE, "%s: no generation run open for %lld tokens",
                            s->path, (long long)n_total);
    lp_status st = insert_token_range(s, tokens, n_prompt, n_total, 1, err);
    if (st == LP_OK && n_total < s->opts.seq_len)
        st = lp_store_gen_cut_maps(s, n_total, err);
    if (st != LP_OK)
        return st;
    s->gen_total = n_total;
    sqlite3_stmt *q;
    if ((st = lp_store_prepare(s, "UPDATE runs SET n_tokens = ?, kv_bytes = ?, kv_dtype = ? "
                                  "WHERE id = ?", &q, "recording the generation", err)))
        return st;
    sqlite3_bind_int64(q, 1, n_total);
    sqlite3_bind_int64(q, 2, (int64_t)kv_bytes);
    sqlite3_bind_text(q, 3, kv_dtype, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(q, 4, s->run.run_id);
    st = lp_store_step_once(s, q, "recording the generation", err);
    return st;
}

lp_status lp_store_set_kv_rebuilt(lp_store *s, int64_t at, lp_error *err)
{
    if (!s->in_run)
        return lp_error_set(err, LP_ERR_USAGE, "%s: no run open to record a cache rebuild", s->path);
    sqlite3_stmt *q;
    lp_status st = lp_store_prepare(s, "UPDATE runs SET kv_rebuilt_at = ? WHERE id = ?", &q,
                                    "recording the cache rebuild", err);
    if (st != LP_OK)
        return st;
    sqlite3_bind_int64(q, 1, at);
    sqlite3_bind_int64(q, 2, s->run.run_id);
    st = lp_store_step_once(s, q, "recording the cache rebuild", err);
    return st;
}

lp_status lp_store_begin_run(lp_store *s, const lp_run_info *info, const lp_store_opts *opts,
                             int64_t *run_id, lp_error *err)
{
    lp_store_opts defaults;
    if (!opts) {
        lp_store_opts_init(&defaults);
        opts = &defaults;
    }
    if (s->read_only)
        return lp_error_set(err, LP_ERR_USAGE, "%s: opened read-only", s->path);
    if (s->in_run)
        return lp_error_set(err, LP_ERR_USAGE, "%s: a run is already open", s->path);
    if (!info->arch || info->n_tokens < 0 || (info->n_tokens > 0 && !info->tokens))
        return lp_error_set(err, LP_ERR_USAGE, "%s: run info lacks the arch or tokens", s->path);
    lp_status st = insert_run_row(s, info, opts->maps, err);
    if (st != LP_OK)
        return st;
    *run_id = s->run.run_id;
    if ((st = alloc_run_state(s, info, opts, err)) || (st = exec(s, "BEGIN IMMEDIATE", err))) {
        free_run(s);
        mark_failed(s);
        return st;
    }
    s->in_run = true;
    if ((st = insert_tokens(s, info, err)) != LP_OK)
        lp_store_abort_run(s);
    return st;
}

/* ---- the recording observer ------------------------------------------------------------------- */

static bool store_want(void *ctx, const lp_site *site)
{
    const lp_store *s = ctx;
    if (!s->in_run || site->batch != 0)
        return false;
    switch (site->kind) {
    case LP_SITE_ATTN_STATS:
    case LP_SITE_HEAD_OUTPUT:
    case LP_SITE_LOGITS:
    case LP_SITE_ROUTER:
        return true;
    case LP_SITE_ATTN_PROBS:
        return s->opts.maps != LP_MAPS_NONE && site->layer >= 0 && site->layer < s->n_layers &&
               site->head >= 0 && site->head < s->n_heads && s->layer_sel[site->layer] &&
               s->head_sel[site->head];
    default:
        return false;
    }
}

/* The map as the blob to bind: the view itself when it already is contiguous f32, else converted
 * into the store's buffer. */
static lp_status map_blob(lp_store *s, const lp_view *v, const void **blob, uint64_t *bytes,
                          lp_error *err)
{
    uint64_t n = (uint64_t)v->rows * (uint64_t)v->cols;
    if (s->opts.maps == LP_MAPS_F32 && v->stride == v->cols) {
        *blob = v->data;
        *bytes = n * 4;
        return LP_OK;
    }
    size_t elem = s->opts.maps == LP_MAPS_F32 ? 4 : 2;
    if (n * elem > s->f16_cap) {
        free(s->f16);
        s->f16 = malloc((size_t)(n * elem));
        s->f16_cap = s->f16 ? (size_t)(n * elem) : 0;
        if (!s->f16)
            return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for a %lldx%lld map",
                                s->path, (long long)v->rows, (long long)v->cols);
    }
    if (elem == 2)
        lp_f32_to_f16_rows(v->data, v->stride, v->rows, v->cols, s->f16, s->opts.pool);
    else
        for (int64_t r = 0; r < v->rows; r++)
            memcpy((float *)(void *)s->f16 + r * v->cols, v->data + r * v->stride,
                   (size_t)v->cols * 4);
    *blob = s->f16;
    *bytes = n * elem;
    return LP_OK;
}

static lp_status store_probs(lp_store *s, const lp_site *site, const lp_view *v, lp_error *err)
{
    const void *blob = NULL;
    uint64_t bytes = 0;
    lp_status st = map_blob(s, v, &blob, &bytes, err);
    if (st != LP_OK)
        return st;
    if ((st = lp_store_bind_map(s, site, v->rows, v->cols, bytes, err)) != LP_OK)
        return st;
    sqlite3_bind_blob(s->stmt[LP_STMT_ATTENTION], 7, blob, (int)bytes, SQLITE_STATIC);
    return step(s, LP_STMT_ATTENTION, err);
}

/* The top-k predictions of one position. */
static lp_status store_predictions(lp_store *s, const float *row, int64_t vocab, int64_t pos,
                                   lp_error *err)
{
    int64_t n = lp_top_k(row, vocab, s->opts.top_k > 0 ? s->opts.top_k : 1, s->top);
    for (int64_t k = 0; k < n; k++) {
        if (!isfinite(s->top[k].logit))
            return lp_error_set(err, LP_ERR_RANGE,
                                "position %lld: logit of token %ld is %g (the model overflows "
                                "or its weights hold NaN/Inf)",
                                (long long)pos, (long)s->top[k].token_id,
                                (double)s->top[k].logit);
        char buf[32];
        const char *piece;
        piece_of(s, s->top[k].token_id, buf, sizeof buf, &piece);
        sqlite3_stmt *q = s->stmt[LP_STMT_PREDICTION];
        sqlite3_bind_int64(q, 1, s->run.run_id);
        sqlite3_bind_int64(q, 2, pos);
        sqlite3_bind_int64(q, 3, k);
        sqlite3_bind_int64(q, 4, s->top[k].token_id);
        sqlite3_bind_text(q, 5, piece, -1, SQLITE_STATIC);
        sqlite3_bind_double(q, 6, (double)s->top[k].prob);
        sqlite3_bind_double(q, 7, (double)s->top[k].logit);
        lp_status st = step(s, LP_STMT_PREDICTION, err);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

static lp_status store_logits(lp_store *s, const lp_view *v, lp_error *err)
{
    lp_status st;
    for (int64_t r = 0; r < v->rows; r++) {
        const float *row = v->data + r * v->stride;
        int64_t pos = v->row0 + r;
        if (s->opts.logits == LP_LOGITS_FULL) {
            sqlite3_stmt *q = s->stmt[LP_STMT_LOGITS];
            sqlite3_bind_int64(q, 1, s->run.run_id);
            sqlite3_bind_int64(q, 2, pos);
            sqlite3_bind_blob(q, 3, row, (int)(v->cols * 4), SQLITE_STATIC);
            if ((st = step(s, LP_STMT_LOGITS, err)))
                return st;
        }
        if ((st = store_predictions(s, row, v->cols, pos, err)))
            return st;
    }
    return LP_OK;
}

/* Expert counts, mixing weights and router entropy, summed over the tokens of one MoE layer. */
static void observe_router(lp_store *s, const lp_site *site, const lp_view *v)
{
    const lp_router_view *r = v->router;
    if (!r || r->n_experts != s->n_experts || site->layer < 0 || site->layer >= s->n_layers)
        return;
    int64_t E = r->n_experts, l = site->layer;
    for (int64_t t = 0; t < v->rows; t++) {
        const float *p = v->data + t * v->stride;
        double h = 0.0;
        for (int64_t e = 0; e < E; e++)
            if (p[e] > 0.0f)
                h -= (double)p[e] * log((double)p[e]);
        s->run.router_entropy[l] += h;
        s->run.router_rows[l]++;
        for (int64_t j = 0; j < r->top_k; j++) {
            int32_t e = r->experts[t * r->top_k + j];
            if (e >= 0 && e < E) {
                s->run.expert_tokens[l * E + e]++;
                s->run.expert_weight[l * E + e] += (double)r->weights[t * r->top_k + j];
            }
        }
    }
}

static lp_status store_observe(void *ctx, const lp_site *site, const lp_view *v, lp_error *err)
{
    lp_store *s = ctx;
    size_t slot = (size_t)(site->layer * s->n_heads + site->head);
    if (s->opts.seq_len > 0) { /* a generation: rows of many calls make one run */
        if (site->kind == LP_SITE_ATTN_PROBS)
            return lp_store_gen_probs(s, site, v, err);
        if (site->kind == LP_SITE_ATTN_STATS) {
            lp_store_gen_stats(s, site, v);
            return LP_OK;
        }
        if (site->kind == LP_SITE_HEAD_OUTPUT) {
            lp_store_gen_norms(s, site, v);
            return LP_OK;
        }
    }
    switch (site->kind) {
    case LP_SITE_ATTN_PROBS:
        return store_probs(s, site, v, err);
    case LP_SITE_ATTN_STATS: {
        double norm = s->run.stats[slot].output_norm;
        lp_head_stats_from_rows(v->row_stats, v->rows, v->row0, &s->run.stats[slot]);
        s->run.stats[slot].output_norm = norm;
        s->run.stats_seen[slot] = true;
        return LP_OK;
    }
    case LP_SITE_HEAD_OUTPUT:
        s->run.stats[slot].output_norm = lp_mean_row_norm(v->data, v->rows, v->cols, v->stride);
        return LP_OK;
    case LP_SITE_LOGITS:
        return store_logits(s, v, err);
    case LP_SITE_ROUTER:
        observe_router(s, site, v);
        return LP_OK;
    default:
        return LP_OK;
    }
}

/* ---- ending a run ----------------------------------------------------------------------------- */

static lp_status write_head_stats(lp_store *s, int64_t l, lp_error *err)
{
    for (int64_t h = 0; h < s->n_heads; h++) {
        size_t slot = (size_t)(l * s->n_heads + h);
        if (!s->run.stats_seen[slot])
            continue;
        const lp_head_stats *hs = &s->run.stats[slot];
        if (!isfinite(hs->entropy) || !isfinite(hs->output_norm))
            return lp_error_set(err, LP_ERR_RANGE,
                                "layer %lld head %lld: attention statistics are not finite "
                                "(entropy %g, output norm %g)",
                                (long long)l, (long long)h, hs->entropy, hs->output_norm);
        sqlite3_stmt *q = s->stmt[LP_STMT_HEAD_STATS];
        double values[] = {hs->entropy,  hs->max_prob, hs->sink,       hs->prev_token,
                           hs->self,     hs->distance, hs->local_frac};
        sqlite3_bind_int64(q, 1, s->run.run_id);
        sqlite3_bind_int64(q, 2, l);
        sqlite3_bind_int64(q, 3, h);
        for (int i = 0; i < 7; i++)
            sqlite3_bind_double(q, 4 + i, values[i]);
        sqlite3_bind_int64(q, 11, s->opts.local_window);
        sqlite3_bind_double(q, 12, hs->output_norm);
        double sparsity[] = {hs->keys50, hs->keys90, hs->keys99, hs->low_mass};
        for (int i = 0; i < 4; i++)
            sqlite3_bind_double(q, 13 + i, sparsity[i]);
        if (s->has_sinks)
            sqlite3_bind_double(q, 17, hs->learned_sink);
        else
            sqlite3_bind_null(q, 17);
        lp_status st = step(s, LP_STMT_HEAD_STATS, err);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

static lp_status write_routing(lp_store *s, int64_t l, lp_error *err)
{
    lp_status st;
    for (int64_t e = 0; e < s->n_experts; e++) {
        sqlite3_stmt *q = s->stmt[LP_STMT_ROUTING];
        int64_t n = s->run.expert_tokens[l * s->n_experts + e];
        sqlite3_bind_int64(q, 1, s->run.run_id);
        sqlite3_bind_int64(q, 2, l);
        sqlite3_bind_int64(q, 3, e);
        sqlite3_bind_int64(q, 4, n);
        sqlite3_bind_double(q, 5,
                            n > 0 ? s->run.expert_weight[l * s->n_experts + e] / (double)n : 0.0);
        if ((st = step(s, LP_STMT_ROUTING, err)))
            return st;
    }
    sqlite3_stmt *q = s->stmt[LP_STMT_ROUTER_STATS];
    sqlite3_bind_int64(q, 1, s->run.run_id);
    sqlite3_bind_int64(q, 2, l);
    sqlite3_bind_double(q, 3, s->run.router_entropy[l] / (double)s->run.router_rows[l]);
    return step(s, LP_STMT_ROUTER_STATS, err);
}

static lp_status mark_complete(lp_store *s, double seconds, lp_error *err)
{
    sqlite3_stmt *q;
    lp_status st = lp_store_prepare(s, sql_complete_run, &q, "preparing the run update", err);
    if (st != LP_OK)
        return st;
    sqlite3_bind_double(q, 1, seconds);
    sqlite3_bind_int64(q, 2, s->run.run_id);
    st = lp_store_step_once(s, q, "completing the run", err);
    return st;
}

/* The open run's head statistics and routing, and its row marked complete (not committed). */
static lp_status write_aggregates(lp_store *s, double seconds, lp_error *err)
{
    lp_status st = LP_OK;
    if (s->opts.seq_len > 0)
        lp_store_gen_finish_stats(s, s->gen_total);
    for (int64_t l = 0; l < s->n_layers && st == LP_OK; l++) {
        st = write_head_stats(s, l, err);
        if (st == LP_OK && s->n_experts > 0 && s->run.router_rows[l] > 0)
            st = write_routing(s, l, err);
    }
    return st == LP_OK ? mark_complete(s, seconds, err) : st;
}

lp_status lp_store_end_run(lp_store *s, double seconds, lp_error *err)
{
    if (!s->in_run)
        return lp_error_set(err, LP_ERR_USAGE, "%s: no run is open", s->path);
    lp_status st = write_aggregates(s, seconds, err);
    if (st == LP_OK)
        st = exec(s, "COMMIT", err);
    if (st != LP_OK) {
        lp_store_abort_run(s);
        return st;
    }
    free_run(s);
    return LP_OK;
}

void lp_store_abort_run(lp_store *s)
{
    if (!s || !s->in_run)
        return;
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    mark_failed(s);
    free_run(s);
}

/* ---- the runs of a stacked batch --------------------------------------------------------------- */

/* The store's own accumulators back (run 0's), the others freed, the runs state released. */
static void release_batch(lp_store *s, lp_store_run_acc *accs, int64_t n)
{
    lp_store_select_run(s, &accs[0]);
    for (int64_t i = 1; i < n; i++)
        acc_free(&accs[i]);
    free_run(s);
}

lp_status lp_store_begin_batch_runs(lp_store *s, const lp_run_info *infos, int64_t n,
                                    const lp_store_opts *opts, lp_store_run_acc *accs,
                                    lp_error *err)
{
    memset(accs, 0, (size_t)n * sizeof *accs);
    if (s->read_only || s->in_run || n < 1 || opts->seq_len > 0)
        return lp_error_set(err, LP_ERR_USAGE, "%s: %s", s->path,
                            s->read_only ? "opened read-only"
                            : s->in_run  ? "a run is already open"
                                         : "a batch needs sequences and no generation");
    for (int64_t i = 0; i < n; i++)
        if (!infos[i].arch || infos[i].n_tokens < 0 || (infos[i].n_tokens > 0 && !infos[i].tokens))
            return lp_error_set(err, LP_ERR_USAGE, "%s: run info %lld lacks the arch or tokens",
                                s->path, (long long)i);
    lp_status st = LP_OK;
    int64_t begun = 0;
    for (; begun < n; begun++) {
        if ((st = insert_run_row(s, &infos[begun], opts->maps, err)) != LP_OK)
            break;
        accs[begun].run_id = s->run.run_id;
    }
    if (st != LP_OK) {
        for (int64_t i = 0; i < begun; i++) {
            s->run.run_id = accs[i].run_id;
            mark_failed(s);
        }
        return st;
    }
    int64_t run0 = accs[0].run_id;
    st = alloc_run_state(s, &infos[0], opts, err);
    s->run.run_id = run0;
    accs[0] = s->run;
    for (int64_t i = 1; i < n && st == LP_OK; i++)
        if (!acc_alloc(s, &accs[i]))
            st = lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for a batch of %lld runs",
                              s->path, (long long)n);
    if (st == LP_OK && (st = exec(s, "BEGIN IMMEDIATE", err)) == LP_OK)
        s->in_run = true;
    for (int64_t i = 0; i < n && st == LP_OK; i++) {
        lp_store_select_run(s, &accs[i]);
        st = insert_tokens(s, &infos[i], err);
    }
    if (st != LP_OK) {
        if (s->in_run)
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        for (int64_t i = 0; i < n; i++) {
            s->run.run_id = accs[i].run_id;
            mark_failed(s);
        }
        release_batch(s, accs, n);
        return st;
    }
    lp_store_select_run(s, &accs[0]);
    return LP_OK;
}

lp_status lp_store_end_batch_runs(lp_store *s, lp_store_run_acc *accs, int64_t n, double seconds,
                                  lp_error *err)
{
    if (!s->in_run)
        return lp_error_set(err, LP_ERR_USAGE, "%s: no batch is open", s->path);
    lp_status st = LP_OK;
    for (int64_t i = 0; i < n && st == LP_OK; i++) {
        lp_store_select_run(s, &accs[i]);
        st = write_aggregates(s, seconds, err);
    }
    if (st == LP_OK)
        st = exec(s, "COMMIT", err);
    if (st != LP_OK) {
        lp_store_abort_batch_runs(s, accs, n);
        return st;
    }
    release_batch(s, accs, n);
    return LP_OK;
}

void lp_store_abort_batch_runs(lp_store *s, lp_store_run_acc *accs, int64_t n)
{
    if (!s || !s->in_run)
        return;
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    for (int64_t i = 0; i < n; i++) {
        s->run.run_id = accs[i].run_id;
        mark_failed(s);
    }
    release_batch(s, accs, n);
}

/* Here rather than beside lp_store_free: closing rolls back a run still open, which is the
 * writer's business (a read-only store never has one). */
void lp_store_close(lp_store *store)
{
    if (!store)
        return;
    if (store->in_run)
        lp_store_abort_run(store);
    lp_store_free(store);
}

/* ---- leak checks ------------------------------------------------------------------------------ */

static lp_status insert_leak_check(lp_store *s, int64_t run_id, const lp_leak_check *c,
                                   lp_error *err)
{
    sqlite3_stmt *q = s->stmt[LP_STMT_LEAK_CHECK];
    sqlite3_bind_int64(q, 1, run_id);
    sqlite3_bind_text(q, 2, c->name, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 3, c->passed);
    /* layer -1 means the logits only for perturbation; elsewhere the check is not per layer */
    if (c->layer == -1 && strcmp(c->name, "perturbation") != 0)
        sqlite3_bind_null(q, 4);
    else
        sqlite3_bind_int(q, 4, c->layer);
    if (c->position < 0)
        sqlite3_bind_null(q, 5);
    else
        sqlite3_bind_int64(q, 5, c->position);
    if (isnan(c->max_abs_diff))
        sqlite3_bind_null(q, 6);
    else
        sqlite3_bind_double(q, 6, c->max_abs_diff);
    sqlite3_bind_text(q, 7, c->detail, -1, SQLITE_STATIC);
    return step(s, LP_STMT_LEAK_CHECK, err);
}

lp_status lp_store_add_leak_checks(lp_store *s, const lp_leak_check *checks, int64_t n,
                                   lp_error *err)
{
    if (!s->in_run)
        return lp_error_set(err, LP_ERR_USAGE, "%s: no run is open", s->path);
    for (int64_t i = 0; i < n; i++) {
        lp_status st = insert_leak_check(s, s->run.run_id, &checks[i], err);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

static lp_status insert_mask_row(lp_store *s, const char *mask_path, int64_t n_tokens,
                                 int64_t n_heads, lp_error *err)
{
    sqlite3_stmt *q;
    lp_status st = lp_store_prepare(s, sql_insert_mask_run, &q, "inserting the run", err);
    if (st != LP_OK)
        return st;
    const char *dot = strrchr(mask_path, '.');
    sqlite3_bind_text(q, 1, mask_path, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, dot ? dot + 1 : "", -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 3, n_tokens);
    sqlite3_bind_int64(q, 4, n_heads);
    sqlite3_bind_text(q, 5, LP_VERSION, -1, SQLITE_STATIC);
    st = lp_store_step_once(s, q, "inserting the run", err);
    return st;
}

lp_status lp_store_add_mask_run(lp_store *s, const char *mask_path, int64_t n_tokens,
                                int64_t n_heads, const lp_leak_check *check, int64_t *run_id,
                                lp_error *err)
{
    if (s->in_run)
        return lp_error_set(err, LP_ERR_USAGE, "%s: a run is already open", s->path);
    lp_status st = exec(s, "BEGIN", err);
    if (st != LP_OK)
        return st;
    st = insert_mask_row(s, mask_path, n_tokens, n_heads, err);
    if (st == LP_OK) {
        *run_id = sqlite3_last_insert_rowid(s->db);
        st = insert_leak_check(s, *run_id, check, err);
    }
    if (st == LP_OK)
        st = exec(s, "COMMIT", err);
    if (st != LP_OK)
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
}
