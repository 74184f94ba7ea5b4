/* Reading the trace store, typed: runs (with the mask their arch_json describes), token texts,
 * head statistics and the leak checker's per-layer differences. Attention maps stream through
 * read_map.c. */
#include "trace/store/store.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "core/names.h"
#include "trace/store/store_internal.h"

/* Runs with more layers or heads than this are refused as corrupt before anything is sized by
 * them (the largest published models have < 200 layers and < 256 heads). */
#define MAX_LAYERS_OR_HEADS 65536

/* The queries, in one place. */
#define RUN_COLUMNS                                                                            \
    "id, status, kind, model_path, architecture, arch_json, n_tokens, n_layers, n_heads, "     \
    "maps_dtype, prompt"
static const char sql_trace_tables[] =
    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('runs', 'attention', "
    "'tokens')";
static const char sql_run_by_id[] = "SELECT " RUN_COLUMNS " FROM runs WHERE id = ?1";
static const char sql_latest_run[] = "SELECT " RUN_COLUMNS " FROM runs WHERE status = "
                                     "'complete' AND (?1 IS NULL OR kind = ?1) ORDER BY id DESC "
                                     "LIMIT 1";
static const char sql_last_run[] = "SELECT id, status FROM runs ORDER BY id DESC LIMIT 1";
static const char sql_count_tokens[] = "SELECT count(*) FROM tokens WHERE run_id = ?1";
static const char sql_token_texts[] = "SELECT pos, coalesce(label, piece) FROM tokens WHERE "
                                      "run_id = ?1 ORDER BY pos";
static const char sql_token_pieces[] = "SELECT pos, piece FROM tokens WHERE run_id = ?1 ORDER "
                                       "BY pos"; /* from before tokens.label */
static const char sql_latest_leak_run[] =
    "SELECT max(r.id) FROM runs r WHERE r.status = 'complete' AND EXISTS (SELECT 1 FROM "
    "leak_checks l WHERE l.run_id = r.id AND l.check_name = 'perturbation' AND l.layer IS NOT "
    "NULL)";
static const char sql_count_leak_layers[] =
    "SELECT count(DISTINCT layer) FROM leak_checks WHERE run_id = ?1 AND check_name = "
    "'perturbation' AND layer IS NOT NULL";
static const char sql_leak_diffs[] =
    "SELECT layer, max(max_abs_diff), max(passed = 0) FROM leak_checks WHERE run_id = ?1 AND "
    "check_name = 'perturbation' AND layer IS NOT NULL GROUP BY layer ORDER BY layer";

/* ---- opening ---------------------------------------------------------------------------------- */

/* Also the first read of the file: a non-database fails here with SQLite's own words. */
static lp_status check_trace_tables(lp_store *s, lp_error *err)
{
    sqlite3_stmt *stmt;
    lp_status st = lp_store_prepare(s, sql_trace_tables, &stmt, "not a trace database", err);
    if (st != LP_OK)
        return st;
    int rc = sqlite3_step(stmt);
    int n_tables = rc == SQLITE_ROW ? sqlite3_column_int(stmt, 0) : -1;
    sqlite3_finalize(stmt);
    if (rc != SQLITE_ROW)
        return lp_store_sql_error(s, "not a trace database", err);
    if (n_tables != 3)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: not a loupe trace database (tables runs, attention, tokens: %d "
                            "of 3 present)",
                            s->path, n_tables);
    return LP_OK;
}

lp_status lp_store_open_read(const char *path, lp_store **out, lp_error *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return lp_error_set(err, LP_ERR_IO, "%s: no such file", path);
    if (!S_ISREG(sb.st_mode))
        return lp_error_set(err, LP_ERR_IO, "%s: not a regular file", path);
    lp_store *s = lp_store_alloc(path, err);
    if (!s)
        return LP_ERR_NOMEM;
    s->read_only = true;
    lp_status st;
    int64_t version;
    /* A WAL reader can still meet a brief lock while `loupe trace` checkpoints or resets the WAL:
     * the connection waits for it instead of failing with "database is locked". */
    if ((st = lp_store_connect_read(s, err)) || (st = check_trace_tables(s, err)) ||
        (st = lp_store_check_version(s, "upgrade loupe", &version, err))) {
        lp_store_free(s);
        return st;
    }
    *out = s;
    return LP_OK;
}

/* ---- runs ------------------------------------------------------------------------------------- */

void lp_store_run_clear(lp_store_run *run)
{
    free(run->layer_window);
    memset(run, 0, sizeof *run);
}

int64_t lp_store_run_window(const lp_store_run *run, int64_t layer)
{
    if (run->layer_window && layer >= 0 && layer < run->n_layers)
        return run->layer_window[layer];
    return run->window;
}

static void copy_text(char *dst, size_t size, const unsigned char *src)
{
    snprintf(dst, size, "%s", src ? (const char *)src : "");
}

/* layer_window, when the description has one entry per layer: it wins over sliding_window. */
static lp_status read_layer_windows(lp_store_run *run, json_t *list, lp_error *err)
{
    size_t n = json_array_size(list);
    if ((int64_t)n != run->n_layers)
        return LP_OK;
    run->layer_window = calloc(n, sizeof *run->layer_window);
    if (!run->layer_window)
        return lp_error_set(err, LP_ERR_NOMEM, "run %lld: out of memory", (long long)run->id);
    for (size_t i = 0; i < n; i++) {
        json_t *w = json_array_get(list, i);
        run->layer_window[i] = json_is_integer(w) && json_integer_value(w) > 0
                                   ? json_integer_value(w)
                                   : 0;
    }
    run->window = 0;
    return LP_OK;
}

/* The window and causality the arch description records, when it does. Field names follow
 * inspect/inspect.h (sliding_window, layer_window); anything missing keeps the plain causal mask. */
static lp_status read_arch(lp_store_run *run, const char *arch_json, lp_error *err)
{
    run->causal = true;
    if (!arch_json || !*arch_json)
        return LP_OK;
    json_error_t jerr;
    json_t *root = json_loads(arch_json, 0, &jerr);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return LP_OK; /* an unreadable description only costs us the window */
    }
    json_t *v = json_object_get(root, "causal");
    if (json_is_boolean(v))
        run->causal = json_is_true(v);
    v = json_object_get(root, "sliding_window");
    if (json_is_integer(v) && json_integer_value(v) > 0)
        run->window = json_integer_value(v);
    v = json_object_get(root, "layer_window");
    lp_status st = LP_OK;
    if (json_is_array(v) && run->n_layers > 0)
        st = read_layer_windows(run, v, err);
    json_decref(root);
    return st;
}

/* The row of run_id, or the latest complete one (of kind, unless NULL). */
static lp_status query_run(lp_store *s, int64_t run_id, const char *kind, sqlite3_stmt **stmt,
                           lp_error *err)
{
    lp_status st;
    if (run_id > 0) {
        st = lp_store_prepare(s, sql_run_by_id, stmt, "query failed", err);
        if (st == LP_OK)
            sqlite3_bind_int64(*stmt, 1, run_id);
        return st;
    }
    st = lp_store_prepare(s, sql_latest_run, stmt, "query failed", err);
    if (st == LP_OK && kind)
        sqlite3_bind_text(*stmt, 1, kind, -1, SQLITE_TRANSIENT);
    return st;
}

/* No such run: say what is there, so the user knows which --run to name. */
static lp_status no_such_run(lp_store *s, int64_t run_id, const char *kind, lp_error *err)
{
    if (run_id > 0)
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no run with id %lld", s->path,
                            (long long)run_id);
    long long latest = 0;
    char status[32] = "";
    sqlite3_stmt *stmt;
    if (lp_store_prepare(s, sql_last_run, &stmt, "query failed", err) == LP_OK) {
        if (sqlite3_step(stmt) == SQLITE_ROW) {
            latest = sqlite3_column_int64(stmt, 0);
            copy_text(status, sizeof status, sqlite3_column_text(stmt, 1));
        }
        sqlite3_finalize(stmt);
    }
    if (latest > 0)
        return lp_error_set(err, LP_ERR_NOT_FOUND,
                            "%s: no complete%s%s run (the latest, run %lld, is '%s'; name a run "
                            "with --run N to draw it anyway)",
                            s->path, kind ? " " : "", kind ? kind : "", latest, status);
    return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no runs", s->path);
}

/* snprintf may have cut a UTF-8 sequence at the end of buf: drop the partial character. */
static void trim_partial_utf8(char *buf, size_t size)
{
    size_t len = strlen(buf);
    if (len != size - 1)
        return;
    while (len > 0 && ((unsigned char)buf[len - 1] & 0xc0) == 0x80)
        len--;
    if (len > 0 && ((unsigned char)buf[len - 1] & 0xc0) == 0xc0)
        len--;
    buf[len] = '\0';
}

static void fill_run(lp_store_run *run, sqlite3_stmt *stmt)
{
    run->id = sqlite3_column_int64(stmt, 0);
    copy_text(run->status, sizeof run->status, sqlite3_column_text(stmt, 1));
    copy_text(run->kind, sizeof run->kind, sqlite3_column_text(stmt, 2));
    const char *model_path = (const char *)sqlite3_column_text(stmt, 3);
    const char *base = model_path ? strrchr(model_path, '/') : NULL;
    copy_text(run->model, sizeof run->model,
              (const unsigned char *)(base && base[1] ? base + 1 : model_path));
    copy_text(run->architecture, sizeof run->architecture, sqlite3_column_text(stmt, 4));
    run->n_tokens = sqlite3_column_int64(stmt, 6);
    run->n_layers = sqlite3_column_int64(stmt, 7);
    run->n_heads = sqlite3_column_int64(stmt, 8);
    copy_text(run->maps_dtype, sizeof run->maps_dtype, sqlite3_column_text(stmt, 9));
    copy_text(run->prompt, sizeof run->prompt, sqlite3_column_text(stmt, 10));
    trim_partial_utf8(run->prompt, sizeof run->prompt);
}

lp_status lp_store_read_run(lp_store *s, int64_t run_id, const char *kind, lp_store_run *run,
                            bool *incomplete, lp_error *err)
{
    memset(run, 0, sizeof *run);
    *incomplete = false;
    sqlite3_stmt *stmt;
    lp_status st = query_run(s, run_id, kind, &stmt, err);
    if (st != LP_OK)
        return st;
    int rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(stmt);
        return rc == SQLITE_DONE ? no_such_run(s, run_id, kind, err)
                                 : lp_store_sql_error(s, "reading runs", err);
    }
    fill_run(run, stmt);
    if (run->n_layers < 1 || run->n_layers > MAX_LAYERS_OR_HEADS || run->n_heads < 1 ||
        run->n_heads > MAX_LAYERS_OR_HEADS || run->n_tokens < 0) {
        st = lp_error_set(err, LP_ERR_FORMAT,
                          "%s: run %lld: n_layers %lld, n_heads %lld, n_tokens %lld outside "
                          "[1, %d] / [0, ...)",
                          s->path, (long long)run->id, (long long)run->n_layers,
                          (long long)run->n_heads, (long long)run->n_tokens, MAX_LAYERS_OR_HEADS);
        sqlite3_finalize(stmt);
        memset(run, 0, sizeof *run);
        return st;
    }
    st = read_arch(run, (const char *)sqlite3_column_text(stmt, 5), err);
    sqlite3_finalize(stmt);
    if (st != LP_OK) {
        lp_store_run_clear(run);
        return st;
    }
    *incomplete = strcmp(run->status, "complete") != 0;
    return LP_OK;
}

/* ---- tokens ----------------------------------------------------------------------------------- */

void lp_store_free_texts(char **texts, int64_t n)
{
    if (!texts)
        return;
    for (int64_t i = 0; i < n; i++)
        free(texts[i]);
    free(texts);
}

static lp_status count_rows(lp_store *s, const char *sql, int64_t run_id, const char *what,
                            int64_t *count, lp_error *err)
{
    sqlite3_stmt *stmt;
    lp_status st = lp_store_prepare(s, sql, &stmt, "query failed", err);
    if (st != LP_OK)
        return st;
    sqlite3_bind_int64(stmt, 1, run_id);
    *count = sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : -1;
    sqlite3_finalize(stmt);
    return *count < 0 ? lp_store_sql_error(s, what, err) : LP_OK;
}

static char *copy_string(const unsigned char *text)
{
    const char *src = text ? (const char *)text : "";
    size_t n = strlen(src);
    char *out = malloc(n + 1);
    if (out)
        memcpy(out, src, n + 1);
    return out;
}

/* Rows (pos, text) into texts[count]. */
static lp_status fill_texts(lp_store *s, sqlite3_stmt *stmt, int64_t run_id, char **texts,
                            int64_t count, lp_error *err)
{
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        int64_t pos = sqlite3_column_int64(stmt, 0);
        if (pos < 0 || pos >= count)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: tokens of run %lld: pos %lld outside [0, %lld) (positions "
                                "must be 0..n-1)",
                                s->path, (long long)run_id, (long long)pos, (long long)count);
        free(texts[pos]);
        texts[pos] = copy_string(sqlite3_column_text(stmt, 1));
        if (!texts[pos])
            return lp_error_set(err, LP_ERR_NOMEM, "tokens: out of memory");
    }
    return rc == SQLITE_DONE ? LP_OK : lp_store_sql_error(s, "reading tokens", err);
}

lp_status lp_store_read_tokens(lp_store *s, int64_t run_id, char ***texts, int64_t *n,
                               lp_error *err)
{
    *texts = NULL;
    *n = 0;
    int64_t count;
    lp_status st = count_rows(s, sql_count_tokens, run_id, "reading tokens", &count, err);
    if (st != LP_OK || count == 0)
        return st;
    char **out = calloc((size_t)count, sizeof *out);
    if (!out)
        return lp_error_set(err, LP_ERR_NOMEM, "tokens of run %lld: out of memory (%lld)",
                            (long long)run_id, (long long)count);
    /* Newer stores add `label`, the text a piece stands for ("Ġthe" -> " the"): prefer it. */
    sqlite3_stmt *stmt;
    bool have_label = sqlite3_prepare_v2(s->db, "SELECT label FROM tokens LIMIT 0", -1, &stmt,
                                         NULL) == SQLITE_OK;
    sqlite3_finalize(stmt);
    st = lp_store_prepare(s, have_label ? sql_token_texts : sql_token_pieces, &stmt,
                          "query failed", err);
    if (st == LP_OK) {
        sqlite3_bind_int64(stmt, 1, run_id);
        st = fill_texts(s, stmt, run_id, out, count, err);
        sqlite3_finalize(stmt);
    }
    if (st != LP_OK) {
        lp_store_free_texts(out, count);
        return st;
    }
    *texts = out;
    *n = count;
    return LP_OK;
}

/* ---- head statistics -------------------------------------------------------------------------- */

/* The column names in lp_head_stat order (the first row of a value is its printed word), then
 * the spellings people reach for first. */
static const lp_name_entry stat_names[] = {
    {LP_STAT_ENTROPY, "entropy"},
    {LP_STAT_MAX_PROB, "max_prob"},
    {LP_STAT_SINK, "sink"},
    {LP_STAT_PREV_TOKEN, "prev_token"},
    {LP_STAT_SELF, "self"},
    {LP_STAT_DISTANCE, "distance"},
    {LP_STAT_LOCAL_FRAC, "local_frac"},
    {LP_STAT_OUTPUT_NORM, "output_norm"},
    {LP_STAT_KEYS50, "keys50"},
    {LP_STAT_KEYS90, "keys90"},
    {LP_STAT_KEYS99, "keys99"},
    {LP_STAT_LOW_MASS, "low_mass"},
    {LP_STAT_LEARNED_SINK, "learned_sink"},
    {LP_STAT_PREV_TOKEN, "prev"},
    {LP_STAT_PREV_TOKEN, "previous-token"},
    {LP_STAT_PREV_TOKEN, "previous_token"},
};

LP_NAMES_DEFINE(lp_head_stat_name, lp_head_stat_from_name, lp_head_stat, stat_names, "?", true,
                LP_STAT_COUNT)

bool lp_head_stat_absent(const double *stat_delta, int64_t n_heads_total, lp_head_stat stat)
{
    if (stat != LP_STAT_LEARNED_SINK)
        return false;
    for (int64_t i = 0; i < n_heads_total; i++)
        if (!isnan(stat_delta[i * LP_STAT_COUNT + stat]))
            return false;
    return true;
}

/* Rows (layer, head, value) into out[n_layers * n_heads]; *rows counts the non-NULL values (a
 * column added by a migration is NULL in the runs traced before it). */
static lp_status fill_stats(lp_store *s, sqlite3_stmt *stmt, const lp_store_run *run,
                            double *out, int64_t *rows, lp_error *err)
{
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        int64_t layer = sqlite3_column_int64(stmt, 0);
        int64_t head = sqlite3_column_int64(stmt, 1);
        if (layer < 0 || layer >= run->n_layers || head < 0 || head >= run->n_heads)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: head_stats of run %lld: layer %lld head %lld outside the "
                                "run's %lld layers x %lld heads",
                                s->path, (long long)run->id, (long long)layer, (long long)head,
                                (long long)run->n_layers, (long long)run->n_heads);
        if (sqlite3_column_type(stmt, 2) == SQLITE_NULL)
            continue; /* stays NaN */
        out[layer * run->n_heads + head] = sqlite3_column_double(stmt, 2);
        (*rows)++;
    }
    return rc == SQLITE_DONE ? LP_OK : lp_store_sql_error(s, "reading head_stats", err);
}

lp_status lp_store_read_head_stat(lp_store *s, const lp_store_run *run, lp_head_stat stat,
                                  double **values, lp_error *err)
{
    *values = NULL;
    if ((unsigned)stat >= LP_STAT_COUNT)
        return lp_error_set(err, LP_ERR_USAGE, "unknown statistic %d", (int)stat);
    if (!lp_store_table_exists(s, "head_stats"))
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: run %lld has no head_stats rows (no such "
                            "table)", s->path, (long long)run->id);
    /* The column name comes from our own table, never from the user. */
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pragma_table_info('head_stats') WHERE name = "
             "'%s'", lp_head_stat_name(stat));
    sqlite3_stmt *probe;
    lp_status st = lp_store_prepare(s, sql, &probe, "query failed", err);
    if (st != LP_OK)
        return st;
    bool has = sqlite3_step(probe) == SQLITE_ROW && sqlite3_column_int64(probe, 0) > 0;
    sqlite3_finalize(probe);
    if (!has) /* a database no trace has written to since the column was added */
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: run %lld has no %s (traced before loupe "
                            "recorded it)", s->path, (long long)run->id, lp_head_stat_name(stat));
    snprintf(sql, sizeof sql, "SELECT layer, head, %s FROM head_stats WHERE run_id = ?1",
             lp_head_stat_name(stat));
    sqlite3_stmt *stmt;
    st = lp_store_prepare(s, sql, &stmt, "query failed", err);
    if (st != LP_OK)
        return st;
    sqlite3_bind_int64(stmt, 1, run->id);
    size_t n = (size_t)(run->n_layers * run->n_heads); /* both bounded by lp_store_read_run */
    double *out = malloc(n * sizeof *out);
    int64_t rows = 0;
    if (!out)
        st = lp_error_set(err, LP_ERR_NOMEM, "head_stats: out of memory");
    for (size_t i = 0; out && i < n; i++)
        out[i] = (double)NAN;
    if (st == LP_OK)
        st = fill_stats(s, stmt, run, out, &rows, err);
    sqlite3_finalize(stmt);
    if (st == LP_OK && rows == 0)
        st = lp_error_set(err, LP_ERR_NOT_FOUND, "%s: run %lld has no head_stats rows%s",
                          s->path, (long long)run->id,
                          stat == LP_STAT_LEARNED_SINK ? " with a learned sink (the model has none)"
                          : stat >= LP_STAT_KEYS50     ? " with this statistic (traced before loupe "
                                                         "recorded it)"
                                                       : "");
    if (st != LP_OK) {
        free(out);
        return st;
    }
    *values = out;
    return LP_OK;
}

/* ---- leak checks ------------------------------------------------------------------------------ */

lp_status lp_store_latest_leak_run(lp_store *s, int64_t *run_id, lp_error *err)
{
    *run_id = 0;
    if (!lp_store_table_exists(s, "leak_checks"))
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no leak runs (no leak_checks table)",
                            s->path);
    sqlite3_stmt *stmt;
    lp_status st = lp_store_prepare(s, sql_latest_leak_run, &stmt, "query failed", err);
    if (st != LP_OK)
        return st;
    int rc = sqlite3_step(stmt);
    int64_t id = rc == SQLITE_ROW && sqlite3_column_type(stmt, 0) != SQLITE_NULL
                     ? sqlite3_column_int64(stmt, 0)
                     : 0;
    sqlite3_finalize(stmt);
    if (rc != SQLITE_ROW)
        return lp_store_sql_error(s, "reading leak_checks", err);
    if (id == 0)
        return lp_error_set(err, LP_ERR_NOT_FOUND,
                            "%s: no leak runs (no complete run has 'perturbation' leak checks: "
                            "run `loupe leak MODEL --db %s` first)",
                            s->path, s->path);
    *run_id = id;
    return LP_OK;
}

/* The per-layer rows into layers/diffs/failed[count]; *got of them were there. */
static lp_status fill_leak_diffs(lp_store *s, int64_t run_id, int64_t *layers, double *diffs,
                                 bool *failed, int64_t count, int64_t *got, lp_error *err)
{
    sqlite3_stmt *stmt;
    lp_status st = lp_store_prepare(s, sql_leak_diffs, &stmt, "query failed", err);
    if (st != LP_OK)
        return st;
    sqlite3_bind_int64(stmt, 1, run_id);
    int rc;
    *got = 0;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW && *got < count) {
        layers[*got] = sqlite3_column_int64(stmt, 0);
        diffs[*got] = sqlite3_column_type(stmt, 1) == SQLITE_NULL ? (double)NAN
                                                                  : sqlite3_column_double(stmt, 1);
        failed[*got] = sqlite3_column_int(stmt, 2) != 0;
        (*got)++;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        st = lp_store_sql_error(s, "reading leak_checks", err);
    sqlite3_finalize(stmt);
    return st;
}

lp_status lp_store_read_leak_diffs(lp_store *s, int64_t run_id, int64_t **layers,
                                   double **diffs, bool **failed, int64_t *n, lp_error *err)
{
    *layers = NULL;
    *diffs = NULL;
    *failed = NULL;
    *n = 0;
    if (!lp_store_table_exists(s, "leak_checks"))
        return lp_error_set(err, LP_ERR_NOT_FOUND,
                            "%s: run %lld has no 'perturbation' leak checks (no leak_checks table)",
                            s->path, (long long)run_id);
    int64_t count;
    lp_status st = count_rows(s, sql_count_leak_layers, run_id, "reading leak_checks", &count,
                              err);
    if (st != LP_OK)
        return st;
    if (count == 0)
        return lp_error_set(err, LP_ERR_NOT_FOUND,
                            "%s: run %lld has no 'perturbation' leak checks (no leak runs: run "
                            "`loupe leak` first, or name its run with --run)",
                            s->path, (long long)run_id);
    int64_t *l = malloc((size_t)count * sizeof *l), got = 0;
    double *d = malloc((size_t)count * sizeof *d);
    bool *f = malloc((size_t)count * sizeof *f);
    if (!l || !d || !f)
        st = lp_error_set(err, LP_ERR_NOMEM, "leak_checks: out of memory");
    else
        st = fill_leak_diffs(s, run_id, l, d, f, count, &got, err);
    if (st != LP_OK) {
        free(l);
        free(d);
        free(f);
        return st;
    }
    *layers = l;
    *diffs = d;
    *failed = f;
    *n = got;
    return LP_OK;
}
