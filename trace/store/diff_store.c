/* loupe diff's rows: a diffs row and its diff_heads / diff_positions rows, in one transaction. */
#define _POSIX_C_SOURCE 200809L
#include "trace/store/store.h"

#include <stdio.h>

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
    if (sqlite3_step(q) != SQLITE_DONE)
        st = lp_store_sql_error(s, "inserting diffs", err);
    else
        *id = sqlite3_last_insert_rowid(s->db);
    sqlite3_finalize(q);
    return st;
}

static lp_status insert_diff_heads(lp_store *s, int64_t id, const lp_store_diff *d, lp_error *err)
{
    sqlite3_stmt *q = NULL;
    lp_status st = lp_store_prepare(s,
                                    "INSERT INTO diff_heads (diff_id, layer, head, js_mean, "
                                    "max_abs) VALUES (?1, ?2, ?3, ?4, ?5)",
                                    &q, "inserting diff_heads", err);
    for (int64_t i = 0; st == LP_OK && i < d->n_layers * d->n_heads; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, id);
        sqlite3_bind_int64(q, 2, i / d->n_heads);
        sqlite3_bind_int64(q, 3, i % d->n_heads);
        lp_store_bind_real_or_null(q, 4, d->js[i]);
        lp_store_bind_real_or_null(q, 5, d->max_abs[i]);
        if (sqlite3_step(q) != SQLITE_DONE)
            st = lp_store_sql_error(s, "inserting diff_heads", err);
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
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, id);
        sqlite3_bind_int64(q, 2, p);
        lp_store_bind_real_or_null(q, 3, d->kl[p]);
        sqlite3_bind_int(q, 4, d->argmax_agree[p] ? 1 : 0);
        if (sqlite3_step(q) != SQLITE_DONE)
            st = lp_store_sql_error(s, "inserting diff_positions", err);
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
