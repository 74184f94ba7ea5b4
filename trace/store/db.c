/* The connection the writer and the reader share: the handle, SQLite's errors in one wording, and
 * the schema-version check (one place for both sides). */
#define _POSIX_C_SOURCE 200809L /* access */
#include "trace/store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* What SQLite's short message leaves out: whose lock, which OS error. */
static void fault_hint(sqlite3 *db, char *buf, size_t size)
{
    int code = sqlite3_extended_errcode(db) & 0xff, os = sqlite3_system_errno(db);
    buf[0] = '\0';
    if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
        snprintf(buf, size, " (another connection held the write lock past the %d s busy timeout)",
                 LP_STORE_BUSY_TIMEOUT_MS / 1000);
    else if ((code == SQLITE_IOERR || code == SQLITE_FULL || code == SQLITE_CANTOPEN ||
              code == SQLITE_READONLY) && os != 0)
        snprintf(buf, size, " (%s)", strerror(os));
    else if (code == SQLITE_READONLY)
        snprintf(buf, size, " (the file or its folder is not writable)");
}

const char *lp_store_one_line(const char *text, char *buf, size_t size)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)(text ? text : ""); *p && n + 5 < size;
         p++)
        n += (size_t)(*p < 0x20 || *p == 0x7F ? snprintf(buf + n, size - n, "\\x%02X", *p)
                                              : snprintf(buf + n, size - n, "%c", *p));
    buf[n] = '\0';
    return buf;
}

lp_status lp_store_sql_error(const lp_store *store, const char *what, lp_error *err)
{
    char hint[128], msg[LP_ERROR_MSG_MAX];
    fault_hint(store->db, hint, sizeof hint);
    /* SQLite quotes names from the file ("malformed database schema (NAME)"): a hostile file
     * must not break the one-line message */
    return lp_error_set(err, LP_ERR_SQLITE, "%s: %s%s%s%s", store->path, what ? what : "",
                        what ? ": " : "", lp_store_one_line(sqlite3_errmsg(store->db), msg,
                                                            sizeof msg),
                        hint);
}

/* The folder of path ("." for a bare name) into buf. */
static void folder_of(const char *path, char *buf, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(buf, size, ".");
    else if (slash == path)
        snprintf(buf, size, "/");
    else
        snprintf(buf, size, "%.*s", (int)(slash - path), path);
}

lp_status lp_store_check_writable(const char *path, lp_error *err)
{
    char dir[4096];
    folder_of(path, dir, sizeof dir);
    if (access(path, F_OK) == 0 && access(path, W_OK) != 0)
        return lp_error_set(err, LP_ERR_IO,
                            "%s: the database file is not writable (%s); loupe trace records its "
                            "runs there: use another --db",
                            path, strerror(errno));
    if (access(dir, W_OK | X_OK) != 0)
        return lp_error_set(err, LP_ERR_IO,
                            "%s: its folder %s is not writable (%s); SQLite keeps the -wal and "
                            "-shm files beside the database: use another --db",
                            path, dir, strerror(errno));
    return LP_OK;
}

/* A database in a folder nobody may write (a read-only mount, a shared archive): WAL readers need
 * the -shm file beside it, which cannot be made there. Without a -wal file every committed run is
 * in the database file itself, so it is read as immutable. */
static bool read_immutable(const char *path)
{
    char dir[4096], wal[4200];
    folder_of(path, dir, sizeof dir);
    snprintf(wal, sizeof wal, "%s-wal", path);
    return access(dir, W_OK) != 0 && access(wal, F_OK) != 0;
}

/* "file:" URI of path with ?immutable=1 (%, ? and # escaped), or NULL when out of memory. */
static char *immutable_uri(const char *path)
{
    size_t len = strlen(path);
    char *uri = malloc(len * 3 + 32);
    if (!uri)
        return NULL;
    size_t n = (size_t)sprintf(uri, "file:");
    for (const char *p = path; *p; p++)
        n += (size_t)(*p == '%' || *p == '?' || *p == '#' ? sprintf(uri + n, "%%%02X", *p)
                                                          : sprintf(uri + n, "%c", *p));
    sprintf(uri + n, "?immutable=1");
    return uri;
}

lp_status lp_store_connect_read(lp_store *s, lp_error *err)
{
    if (sqlite3_open_v2(s->path, &s->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        return lp_store_sql_error(s, "cannot open", err);
    sqlite3_busy_timeout(s->db, LP_STORE_BUSY_TIMEOUT_MS);
    int rc = sqlite3_exec(s->db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL);
    int code = sqlite3_errcode(s->db);
    if (rc == SQLITE_OK || (code != SQLITE_READONLY && code != SQLITE_CANTOPEN) ||
        !read_immutable(s->path))
        return LP_OK; /* other failures are the callers' to name */
    sqlite3_close(s->db);
    s->db = NULL;
    char *uri = immutable_uri(s->path);
    if (!uri)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", s->path);
    rc = sqlite3_open_v2(uri, &s->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
    free(uri);
    if (rc != SQLITE_OK)
        return lp_store_sql_error(s, "cannot open", err);
    sqlite3_busy_timeout(s->db, LP_STORE_BUSY_TIMEOUT_MS);
    return LP_OK;
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

lp_status lp_store_step_done(lp_store *store, sqlite3_stmt *stmt, const char *what, lp_error *err)
{
    lp_status st = sqlite3_step(stmt) == SQLITE_DONE ? LP_OK : lp_store_sql_error(store, what, err);
    sqlite3_reset(stmt);
    return st;
}

lp_status lp_store_step_once(lp_store *store, sqlite3_stmt *stmt, const char *what, lp_error *err)
{
    lp_status st = lp_store_step_done(store, stmt, what, err);
    sqlite3_finalize(stmt);
    return st;
}

lp_status lp_store_bind_map(lp_store *s, const lp_site *site, int64_t rows, int64_t cols,
                            uint64_t bytes, lp_error *err)
{
    if (bytes > 0x7fffffff)
        return lp_error_set(err, LP_ERR_RANGE, "%s: attention map of %llu bytes exceeds SQLite's "
                                               "blob limit", s->path, (unsigned long long)bytes);
    sqlite3_stmt *q = s->stmt[LP_STMT_ATTENTION];
    sqlite3_bind_int64(q, 1, s->run.run_id);
    sqlite3_bind_int(q, 2, site->layer);
    sqlite3_bind_int(q, 3, site->head);
    sqlite3_bind_int64(q, 4, rows);
    sqlite3_bind_int64(q, 5, cols);
    sqlite3_bind_text(q, 6, s->opts.maps == LP_MAPS_F32 ? "f32" : "f16", -1, SQLITE_STATIC);
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
        char shown[64];
        if (!text || !lp_parse_i64(text, version))
            st = lp_error_set(err, LP_ERR_FORMAT, "%s: meta.schema_version '%s' is not a number",
                              store->path, text ? lp_store_one_line(text, shown, sizeof shown)
                                                : "(null)");
    }
    sqlite3_finalize(q);
    /* A newer loupe may have changed what the columns mean: refuse rather than misread. */
    if (st == LP_OK && *version > LP_STORE_SCHEMA_VERSION)
        st = lp_error_set(err, LP_ERR_UNSUPPORTED,
                          "%s: meta.schema_version %lld is newer than this loupe's %d (%s)",
                          store->path, (long long)*version, LP_STORE_SCHEMA_VERSION, advice);
    return st;
}
