/* The connection the writer and the reader share: the handle, SQLite's errors in one wording, and
 * the schema-version check (one place for both sides). */
#include "trace/store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "trace/store/store_internal.h"

lp_store *lp_store_alloc(const char *path, lp_error *err)
{
    lp_store *s = calloc(1, sizeof *s);
    size_t len = strlen(path);
    if (s)
        s->path = malloc(len + 1);
    if (!s || !s->path) {
        free(s);
        lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", path);
        return NULL;
    }
    memcpy(s->path, path, len + 1);
    return s;
}

void lp_store_free(lp_store *store)
{
    if (!store)
        return;
    for (int i = 0; i < LP_STMT_COUNT; i++)
        sqlite3_finalize(store->stmt[i]);
    if (store->db)
        sqlite3_close(store->db);
    free(store->path);
    free(store);
}

lp_status lp_store_sql_error(const lp_store *store, const char *what, lp_error *err)
{
    return lp_error_set(err, LP_ERR_SQLITE, "%s: %s: %s", store->path, what,
                        sqlite3_errmsg(store->db));
}

lp_status lp_store_prepare(lp_store *store, const char *sql, sqlite3_stmt **stmt,
                           const char *what, lp_error *err)
{
    if (sqlite3_prepare_v2(store->db, sql, -1, stmt, NULL) != SQLITE_OK) {
        *stmt = NULL;
        return lp_store_sql_error(store, what, err);
    }
    return LP_OK;
}

bool lp_store_table_exists(lp_store *store, const char *name)
{
    sqlite3_stmt *stmt;
    if (sqlite3_prepare_v2(store->db,
                           "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", -1,
                           &stmt, NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(stmt, 1, name, -1, SQLITE_STATIC);
    bool found = sqlite3_step(stmt) == SQLITE_ROW;
    sqlite3_finalize(stmt);
    return found;
}

/* Also the first read of the file: a non-database fails here with SQLite's own words. */
static lp_status has_meta_table(lp_store *s, bool *has_meta, lp_error *err)
{
    sqlite3_stmt *q;
    lp_status st = lp_store_prepare(
        s, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'", &q,
        "reading the schema", err);
    if (st != LP_OK)
        return st;
    *has_meta = sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 0) > 0;
    sqlite3_finalize(q);
    return LP_OK;
}

lp_status lp_store_check_version(lp_store *store, const char *advice, int64_t *version,
                                 lp_error *err)
{
    *version = 0;
    bool has_meta;
    sqlite3_stmt *q;
    lp_status st = has_meta_table(store, &has_meta, err);
    if (st != LP_OK || !has_meta)
        return st;
    st = lp_store_prepare(store, "SELECT value FROM meta WHERE key = 'schema_version'", &q,
                          "reading meta.schema_version", err);
    if (st != LP_OK)
        return st;
    if (sqlite3_step(q) == SQLITE_ROW) {
        const char *text = (const char *)sqlite3_column_text(q, 0);
        if (!text || !lp_parse_i64(text, version))
            st = lp_error_set(err, LP_ERR_FORMAT, "%s: meta.schema_version '%s' is not a number",
                              store->path, text ? text : "(null)");
    }
    sqlite3_finalize(q);
    /* A newer loupe may have changed what the columns mean: refuse rather than misread. */
    if (st == LP_OK && *version > LP_STORE_SCHEMA_VERSION)
        st = lp_error_set(err, LP_ERR_UNSUPPORTED,
                          "%s: meta.schema_version %lld is newer than this loupe's %d (%s)",
                          store->path, (long long)*version, LP_STORE_SCHEMA_VERSION, advice);
    return st;
}
