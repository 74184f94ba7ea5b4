/* Plain SQL on a database file, for tests and tools (see store.h): what loupe itself runs goes
 * through the typed calls. */
#include "trace/store/store.h"

#include <stdlib.h>

#include "trace/store/store_internal.h"

/* The columns of the current row, borrowed from the statement. */
static void row_values(sqlite3_stmt *stmt, lp_sql_value *cols, int n)
{
    for (int c = 0; c < n; c++) {
        lp_sql_value *v = &cols[c];
        int type = sqlite3_column_type(stmt, c);
        v->i = sqlite3_column_int64(stmt, c);
        v->d = sqlite3_column_double(stmt, c);
        v->type = type == SQLITE_INTEGER ? LP_SQL_INT
                  : type == SQLITE_FLOAT ? LP_SQL_REAL
                  : type == SQLITE_TEXT  ? LP_SQL_TEXT
                  : type == SQLITE_BLOB  ? LP_SQL_BLOB
                                         : LP_SQL_NULL;
        v->data = type == SQLITE_BLOB   ? sqlite3_column_blob(stmt, c)
                  : type == SQLITE_NULL ? NULL
                                        : (const void *)sqlite3_column_text(stmt, c);
        v->bytes = (size_t)sqlite3_column_bytes(stmt, c);
    }
}

/* One statement, every row to the callback. */
static lp_status run_statement(lp_store *s, sqlite3_stmt *stmt, lp_sql_row_fn row, void *ctx,
                               lp_error *err)
{
    int n = sqlite3_column_count(stmt);
    lp_sql_value *cols = n > 0 ? calloc((size_t)n, sizeof *cols) : NULL;
    if (n > 0 && !cols)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", s->path);
    lp_status st = LP_OK;
    int rc = SQLITE_DONE;
    while (st == LP_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        if (!row)
            continue;
        row_values(stmt, cols, n);
        st = row(ctx, cols, n, err);
    }
    if (st == LP_OK && rc != SQLITE_DONE)
        st = lp_error_set(err, LP_ERR_SQLITE, "%s: %s: %s", s->path, sqlite3_sql(stmt),
                          sqlite3_errmsg(s->db));
    free(cols);
    return st;
}

lp_status lp_store_sql(const char *path, const char *sql, lp_sql_row_fn row, void *ctx,
                       lp_error *err)
{
    lp_store *s = lp_store_alloc(path, err);
    if (!s)
        return LP_ERR_NOMEM;
    lp_status st = LP_OK;
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK)
        st = lp_store_sql_error(s, "cannot open", err);
    else
        sqlite3_busy_timeout(s->db, 10000);
    const char *next = sql;
    while (st == LP_OK && next && *next) {
        sqlite3_stmt *stmt = NULL;
        const char *this_sql = next;
        if (sqlite3_prepare_v2(s->db, this_sql, -1, &stmt, &next) != SQLITE_OK)
            st = lp_error_set(err, LP_ERR_SQLITE, "%s: %.200s: %s", path, this_sql,
                              sqlite3_errmsg(s->db));
        else if (stmt) /* NULL for a tail of blanks or comments */
            st = run_statement(s, stmt, row, ctx, err);
        sqlite3_finalize(stmt);
    }
    lp_store_free(s);
    return st;
}
