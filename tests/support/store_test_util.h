/* Plain SQL on a trace database for the tests (through lp_store_sql, so no test includes SQLite):
 * plant rows the store never writes, and look at rows it wrote. Include after test_util.h. */
#ifndef LP_TESTS_STORE_TEST_UTIL_H
#define LP_TESTS_STORE_TEST_UTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/store/store.h"

/* The first column of the first row. */
typedef struct lp_test_sql_first {
    int n_rows;
    lp_sql_type type;
    int64_t i;
    double d;
    char text[512];
} lp_test_sql_first;

static inline lp_status lp_test_sql_first_row(void *ctx, const lp_sql_value *cols, int n_cols,
                                              lp_error *err)
{
    (void)err;
    lp_test_sql_first *f = ctx;
    if (f->n_rows++ > 0 || n_cols < 1)
        return LP_OK;
    f->type = cols[0].type;
    f->i = cols[0].i;
    f->d = cols[0].d;
    snprintf(f->text, sizeof f->text, "%s",
             cols[0].type == LP_SQL_TEXT ? (const char *)cols[0].data : "(null)");
    return LP_OK;
}

/* printf-style SQL; any error fails the test with SQLite's words. */
static inline void lp_test_sql_run(const char *db, lp_sql_row_fn row, void *ctx, const char *fmt,
                                   va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    char *sql = malloc((size_t)n + 1);
    assert_non_null(sql);
    vsnprintf(sql, (size_t)n + 1, fmt, ap);
    lp_error err = {0};
    if (lp_store_sql(db, sql, row, ctx, &err) != LP_OK)
        fail_msg("%s", err.msg);
    free(sql);
}

static inline void lp_test_sql_exec(const char *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lp_test_sql_run(db, NULL, NULL, fmt, ap);
    va_end(ap);
}

/* The first row's first value of a printf-style query (the test fails when there is no row). */
static inline lp_test_sql_first lp_test_sql_value(const char *db, const char *fmt, va_list ap)
{
    lp_test_sql_first f = {0};
    lp_test_sql_run(db, lp_test_sql_first_row, &f, fmt, ap);
    if (f.n_rows == 0)
        fail_msg("%s: the query returned no row", db);
    return f;
}

/* ... as an integer. */
static inline int64_t lp_test_sql_int(const char *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lp_test_sql_first f = lp_test_sql_value(db, fmt, ap);
    va_end(ap);
    return f.i;
}

/* ... as text ("(null)" for NULL) into buf. */
static inline const char *lp_test_sql_text(const char *db, char *buf, size_t size,
                                           const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lp_test_sql_first f = lp_test_sql_value(db, fmt, ap);
    va_end(ap);
    size_t n = strlen(f.text) < size ? strlen(f.text) : size - 1;
    memcpy(buf, f.text, n);
    buf[n] = '\0';
    return buf;
}

/* bytes as an SQL blob literal X'...' (malloc'd). */
static inline char *lp_test_sql_blob_literal(const void *data, size_t bytes)
{
    char *out = malloc(2 * bytes + 4);
    assert_non_null(out);
    const unsigned char *p = data;
    size_t o = 0;
    out[o++] = 'X';
    out[o++] = '\'';
    for (size_t i = 0; i < bytes; i++)
        o += (size_t)snprintf(out + o, 3, "%02x", p[i]);
    out[o++] = '\'';
    out[o] = '\0';
    return out;
}

/* text as an SQL literal that survives any byte (quotes included), or NULL (malloc'd). */
static inline char *lp_test_sql_text_literal(const char *text)
{
    if (!text) {
        char *null = malloc(5);
        assert_non_null(null);
        memcpy(null, "NULL", 5);
        return null;
    }
    char *blob = lp_test_sql_blob_literal(text, strlen(text));
    size_t n = strlen(blob) + 32;
    char *out = malloc(n);
    assert_non_null(out);
    snprintf(out, n, "CAST(%s AS TEXT)", blob);
    free(blob);
    return out;
}

#endif
