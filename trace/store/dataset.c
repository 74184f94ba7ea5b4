/* Datasets: runs of one prompts file under a name, their aggregated head statistics, and the
 * merge of databases written by shards of one file. */
#define _POSIX_C_SOURCE 200809L
#include "trace/store/store_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lp_status exec_sql(lp_store *s, const char *sql, lp_error *err)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        lp_status st = lp_error_set(err, LP_ERR_SQLITE, "%s: %s", s->path,
                                    msg ? msg : sqlite3_errmsg(s->db));
        sqlite3_free(msg);
        return st;
    }
    return LP_OK;
}

lp_status lp_store_add_dataset(lp_store *s, const char *name, const char *source,
                               int64_t n_prompts, lp_error *err)
{
    if (s->in_run || s->read_only)
        return lp_error_set(err, LP_ERR_USAGE, "%s: cannot add a dataset now", s->path);
    sqlite3_stmt *q;
    lp_status st = lp_store_prepare(s, "INSERT OR IGNORE INTO datasets (name, source, n_prompts) "
                                       "VALUES (?, ?, ?)", &q, "adding the dataset", err);
    if (st != LP_OK)
        return st;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, source, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 3, n_prompts);
    st = lp_store_step_once(s, q, "adding the dataset", err);
    return st;
}

typedef struct group_acc {
    char dataset[256];
    int64_t layer, head;
    double *v;
    size_t n, cap;
} group_acc;

/* The group's mean and population std (two passes over its values, in prompt order) as one
 * dataset_stats row. */
static lp_status flush_group(lp_store *s, sqlite3_stmt *ins, const char *col, group_acc *g,
                             lp_error *err)
{
    if (g->n == 0)
        return LP_OK;
    double sum = 0.0, dev = 0.0;
    for (size_t i = 0; i < g->n; i++)
        sum += g->v[i];
    double mean = sum / (double)g->n;
    for (size_t i = 0; i < g->n; i++)
        dev += (g->v[i] - mean) * (g->v[i] - mean);
    sqlite3_bind_text(ins, 1, g->dataset, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(ins, 2, g->layer);
    sqlite3_bind_int64(ins, 3, g->head);
    sqlite3_bind_text(ins, 4, col, -1, SQLITE_STATIC);
    sqlite3_bind_int64(ins, 5, (int64_t)g->n);
    sqlite3_bind_double(ins, 6, mean);
    sqlite3_bind_double(ins, 7, sqrt(dev / (double)g->n));
    int rc = sqlite3_step(ins);
    sqlite3_reset(ins);
    g->n = 0;
    return rc == SQLITE_DONE ? LP_OK : lp_store_sql_error(s, "aggregating the dataset", err);
}

/* Mean and std over runs of one statistic column for the dataset ?1 (NULL = all), summed in
 * the order of the prompts, so shards merged in any order aggregate to the same numbers. */
static lp_status update_stat(lp_store *s, const char *col, const char *name, lp_error *err)
{
    char sql[640];
    snprintf(sql, sizeof sql,
             "SELECT r.dataset, h.layer, h.head, h.%s FROM head_stats h JOIN runs r ON r.id = "
             "h.run_id WHERE r.status = 'complete' AND r.dataset IS NOT NULL AND (?1 IS NULL OR "
             "r.dataset = ?1) AND h.%s IS NOT NULL " /* runs traced before a column existed */
             "ORDER BY r.dataset, h.layer, h.head, r.prompt_index, r.id",
             col, col);
    sqlite3_stmt *q, *ins;
    lp_status st = lp_store_prepare(s, sql, &q, "aggregating the dataset", err);
    if (st != LP_OK)
        return st;
    if ((st = lp_store_prepare(s, "INSERT INTO dataset_stats (dataset, layer, head, stat, n_runs, "
                                  "mean, std) VALUES (?, ?, ?, ?, ?, ?, ?)", &ins,
                               "aggregating the dataset", err))) {
        sqlite3_finalize(q);
        return st;
    }
    if (name)
        sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    group_acc g = {"", -1, -1, NULL, 0, 0};
    int rc;
    while (st == LP_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *d = (const char *)sqlite3_column_text(q, 0);
        int64_t l = sqlite3_column_int64(q, 1), h = sqlite3_column_int64(q, 2);
        if (strcmp(d, g.dataset) != 0 || l != g.layer || h != g.head) {
            if ((st = flush_group(s, ins, col, &g, err)))
                break;
            snprintf(g.dataset, sizeof g.dataset, "%s", d);
            g.layer = l;
            g.head = h;
        }
        if (g.n == g.cap) {
            size_t cap = g.cap ? 2 * g.cap : 64;
            double *grown = realloc(g.v, cap * sizeof *grown);
            if (!grown) {
                st = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
                break;
            }
            g.v = grown;
            g.cap = cap;
        }
        g.v[g.n++] = sqlite3_column_double(q, 3);
    }
    if (st == LP_OK && rc != SQLITE_DONE)
        st = lp_store_sql_error(s, "aggregating the dataset", err);
    if (st == LP_OK)
        st = flush_group(s, ins, col, &g, err);
    free(g.v);
    sqlite3_finalize(q);
    sqlite3_finalize(ins);
    return st;
}

/* Inside the caller's transaction. */
static lp_status recompute(lp_store *s, const char *name, lp_error *err)
{
    sqlite3_stmt *del;
    lp_status st = lp_store_prepare(s, "DELETE FROM dataset_stats WHERE ?1 IS NULL OR dataset = ?1",
                                    &del, "aggregating the dataset", err);
    if (st != LP_OK)
        return st;
    if (name)
        sqlite3_bind_text(del, 1, name, -1, SQLITE_STATIC);
    if (sqlite3_step(del) != SQLITE_DONE)
        st = lp_store_sql_error(s, "aggregating the dataset", err);
    sqlite3_finalize(del);
    for (int i = 0; st == LP_OK && i < LP_STAT_COUNT; i++)
        st = update_stat(s, lp_head_stat_name((lp_head_stat)i), name, err);
    return st;
}

lp_status lp_store_update_dataset_stats(lp_store *s, const char *name, lp_error *err)
{
    if (s->in_run || s->read_only)
        return lp_error_set(err, LP_ERR_USAGE, "%s: cannot aggregate now", s->path);
    lp_status st = exec_sql(s, "BEGIN IMMEDIATE", err);
    if (st == LP_OK)
        st = recompute(s, name, err);
    if (st == LP_OK)
        st = exec_sql(s, "COMMIT", err);
    if (st != LP_OK)
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
}

lp_status lp_store_read_dataset_stat(lp_store *s, const char *name, lp_head_stat stat,
                                     int64_t *n_layers, int64_t *n_heads, double **mean,
                                     double **std, int64_t *n_runs, lp_error *err)
{
    *mean = *std = NULL;
    *n_layers = *n_heads = *n_runs = 0;
    if (!lp_store_table_exists(s, "dataset_stats"))
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no datasets (a database from before "
                                                   "loupe trace --prompts)", s->path);
    sqlite3_stmt *q;
    lp_status st = lp_store_prepare(s, "SELECT max(layer) + 1, max(head) + 1, max(n_runs) FROM "
                                       "dataset_stats WHERE dataset = ? AND stat = ?", &q,
                                    "reading the dataset", err);
    if (st != LP_OK)
        return st;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, lp_head_stat_name(stat), -1, SQLITE_STATIC);
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL) {
        *n_layers = sqlite3_column_int64(q, 0);
        *n_heads = sqlite3_column_int64(q, 1);
        *n_runs = sqlite3_column_int64(q, 2);
    }
    sqlite3_finalize(q);
    if (*n_layers <= 0 || *n_heads <= 0 || *n_layers > 65536 || *n_heads > 65536)
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no dataset '%s' with aggregated head "
                                                   "statistics", s->path, name);
    size_t n = (size_t)(*n_layers * *n_heads);
    *mean = malloc(n * sizeof **mean);
    *std = malloc(n * sizeof **std);
    if (!*mean || !*std) {
        free(*mean);
        free(*std);
        *mean = *std = NULL;
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        (*mean)[i] = (*std)[i] = (double)NAN;
    if ((st = lp_store_prepare(s, "SELECT layer, head, mean, std FROM dataset_stats WHERE "
                                  "dataset = ? AND stat = ?", &q, "reading the dataset", err)))
        return st;
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, lp_head_stat_name(stat), -1, SQLITE_STATIC);
    while (sqlite3_step(q) == SQLITE_ROW) {
        int64_t l = sqlite3_column_int64(q, 0), h = sqlite3_column_int64(q, 1);
        if (l < 0 || h < 0 || l >= *n_layers || h >= *n_heads)
            continue;
        (*mean)[l * *n_heads + h] = sqlite3_column_double(q, 2);
        (*std)[l * *n_heads + h] = sqlite3_column_double(q, 3);
    }
    sqlite3_finalize(q);
    return LP_OK;
}

/* ---- merge ------------------------------------------------------------------------------------ */

/* sql = INSERT INTO main."table" (every column) SELECT (the same, `shifted` plus offset) FROM
 * src."table" followed by `tail`: the copy of one table of the attached `src` whose rows name runs
 * that are renumbered by offset. *usable is false when the table has no column `shifted` (or the
 * lists do not fit sql). */
static lp_status shifted_copy_sql(lp_store *s, const char *table, const char *shifted,
                                  int64_t offset, const char *tail, char *sql, size_t size,
                                  bool *usable, lp_error *err)
{
    char cols[3000] = "", sel[3000] = "";
    snprintf(sql, size, "SELECT name FROM pragma_table_info('%s', 'src')", table);
    sqlite3_stmt *ti;
    lp_status st = lp_store_prepare(s, sql, &ti, "merging", err);
    if (st != LP_OK)
        return st;
    bool has_shifted = false;
    size_t nc = 0, ns = 0;
    while (sqlite3_step(ti) == SQLITE_ROW) {
        const char *c = (const char *)sqlite3_column_text(ti, 0);
        bool shift = strcmp(c, shifted) == 0;
        has_shifted = has_shifted || shift;
        nc += (size_t)snprintf(cols + nc, sizeof cols - nc, "%s\"%s\"", nc ? ", " : "", c);
        if (shift)
            ns += (size_t)snprintf(sel + ns, sizeof sel - ns, "%s%s + %lld", ns ? ", " : "", c,
                                   (long long)offset);
        else
            ns += (size_t)snprintf(sel + ns, sizeof sel - ns, "%s\"%s\"", ns ? ", " : "", c);
    }
    sqlite3_finalize(ti);
    int len = snprintf(sql, size, "INSERT INTO main.\"%s\" (%s) SELECT %s FROM src.\"%s\"%s", table,
                       cols, sel, table, tail);
    *usable = has_shifted && nc < sizeof cols - 1 && ns < sizeof sel - 1 && len > 0 &&
              (size_t)len < size;
    return LP_OK;
}

/* The tables of the attached `src` (other than runs, meta and the dataset tables) that have a
 * run_id column, each copied with its own column list. */
static lp_status copy_run_rows(lp_store *s, int64_t offset, lp_error *err)
{
    sqlite3_stmt *tables;
    lp_status st = lp_store_prepare(s, "SELECT name FROM src.sqlite_master WHERE type = 'table' "
                                       "AND name NOT LIKE 'sqlite_%' AND name NOT IN ('runs', "
                                       "'meta', 'datasets', 'dataset_stats') ORDER BY name",
                                    &tables, "merging", err);
    while (st == LP_OK && sqlite3_step(tables) == SQLITE_ROW) {
        char sql[6400];
        bool usable;
        st = shifted_copy_sql(s, (const char *)sqlite3_column_text(tables, 0), "run_id", offset,
                              "", sql, sizeof sql, &usable, err);
        if (st == LP_OK && usable)
            st = exec_sql(s, sql, err);
    }
    sqlite3_finalize(tables);
    return st;
}

static lp_status copy_runs(lp_store *s, int64_t offset, lp_error *err)
{
    char sql[6400];
    bool usable;
    lp_status st = shifted_copy_sql(s, "runs", "id", offset, " ORDER BY id", sql, sizeof sql,
                                    &usable, err);
    if (st == LP_OK && !usable)
        st = lp_error_set(err, LP_ERR_FORMAT, "%s: merging: the runs table has no id column or "
                                              "too many columns", s->path);
    if (st != LP_OK || (st = exec_sql(s, sql, err)))
        return st;
    return exec_sql(s, "INSERT OR IGNORE INTO main.datasets (name, source, n_prompts) "
                       "SELECT name, source, n_prompts FROM src.datasets", err);
}

static lp_status query_one(lp_store *s, const char *sql, int64_t *v, lp_error *err)
{
    sqlite3_stmt *q;
    lp_status st = lp_store_prepare(s, sql, &q, "merging", err);
    if (st != LP_OK)
        return st;
    *v = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int64(q, 0) : 0;
    sqlite3_finalize(q);
    return LP_OK;
}

/* An IN must be a loupe database of this loupe's schema version. */
static lp_status check_input(const char *path, lp_error *err)
{
    lp_store *in;
    int64_t version;
    lp_status st = lp_store_open_read(path, &in, err);
    if (st != LP_OK)
        return st;
    st = lp_store_check_version(in, "upgrade loupe", &version, err);
    lp_store_free(in);
    if (st == LP_OK && version != LP_STORE_SCHEMA_VERSION)
        st = lp_error_set(err, LP_ERR_UNSUPPORTED,
                          "%s: meta.schema_version %lld, this loupe writes %d: run loupe trace on "
                          "it once to migrate it, then merge",
                          path, (long long)version, LP_STORE_SCHEMA_VERSION);
    return st;
}

/* One IN: attached, its runs and rows copied after OUT's last run, in one transaction. */
static lp_status merge_one(lp_store *s, const char *path, int64_t *n_runs, lp_error *err)
{
    int64_t offset, n;
    lp_status st;
    sqlite3_stmt *att;
    if ((st = lp_store_prepare(s, "ATTACH DATABASE ? AS src", &att, "merging", err)))
        return st;
    sqlite3_bind_text(att, 1, path, -1, SQLITE_STATIC);
    int rc = sqlite3_step(att);
    sqlite3_finalize(att);
    if (rc != SQLITE_DONE)
        return lp_store_sql_error(s, "attaching an input", err);
    st = query_one(s, "SELECT coalesce(max(id), 0) FROM main.runs", &offset, err);
    if (st == LP_OK)
        st = query_one(s, "SELECT count(*) FROM src.runs", &n, err);
    if (st == LP_OK && (st = exec_sql(s, "BEGIN IMMEDIATE", err)) == LP_OK) {
        if ((st = copy_runs(s, offset, err)) == LP_OK && (st = copy_run_rows(s, offset, err)) == LP_OK)
            st = exec_sql(s, "COMMIT", err);
        if (st != LP_OK)
            sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    }
    sqlite3_exec(s->db, "DETACH DATABASE src", NULL, NULL, NULL);
    *n_runs += st == LP_OK ? n : 0;
    return st;
}

lp_status lp_store_merge(const char *out_path, const char *const *in_paths, int n_in,
                         int64_t *n_runs, lp_error *err)
{
    *n_runs = 0;
    lp_store *s;
    for (int i = 0; i < n_in; i++)
        if (strcmp(in_paths[i], out_path) == 0)
            return lp_error_set(err, LP_ERR_USAGE, "%s is both the output and an input", out_path);
    lp_status st = lp_store_open(out_path, &s, err);
    if (st != LP_OK)
        return st;
    int64_t existing = 0;
    if ((st = query_one(s, "SELECT count(*) FROM runs", &existing, err)) == LP_OK && existing > 0)
        st = lp_error_set(err, LP_ERR_USAGE, "%s already holds %lld runs; merge into a new file",
                          out_path, (long long)existing);
    for (int i = 0; st == LP_OK && i < n_in; i++)
        st = check_input(in_paths[i], err); /* all of them before anything is written */
    for (int i = 0; st == LP_OK && i < n_in; i++)
        st = merge_one(s, in_paths[i], n_runs, err);
    if (st == LP_OK)
        st = lp_store_update_dataset_stats(s, NULL, err);
    lp_store_close(s);
    return st;
}
