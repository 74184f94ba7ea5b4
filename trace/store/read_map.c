/* Streaming one attention map out of the store, a row (or part of one) at a time.
 *
 * attention.probs layout (schema.sql): n_q rows of n_k little-endian values, f16 (2 bytes) or f32
 * (4 bytes) as attention.dtype says, row-major, no header or padding; so the blob is exactly
 * n_q * n_k * size bytes and row i starts at byte i * n_k * size. Anything else is refused when
 * the map is opened. */
#include "trace/store/store.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/dtype.h"
#include "trace/store/store_internal.h"

struct lp_store_map {
    lp_store *store;
    sqlite3_blob *blob;
    int64_t n_q, n_k;
    uint64_t elem;      /* bytes per value: 2 (f16) or 4 (f32) */
    unsigned char *raw; /* one read's bytes, at most one row */
    size_t raw_cap;
};

/* f16 -> f32 for all 65536 patterns, built once: an overview reads thousands of maps. */
static float half_table[65536];
static pthread_once_t half_table_once = PTHREAD_ONCE_INIT;

static void build_half_table(void)
{
    for (uint32_t h = 0; h < 65536; h++)
        half_table[h] = lp_f16_to_f32((uint16_t)h);
}

static const char sql_find_map[] = "SELECT rowid, n_q, n_k, dtype, length(probs) FROM "
                                   "attention WHERE run_id = ?1 AND layer = ?2 AND head = ?3";

/* The row's rowid, shape, dtype and blob length. */
typedef struct map_row {
    sqlite3_int64 rowid;
    int64_t n_q, n_k, blob_bytes;
    char dtype[8];
} map_row;

static lp_status find_map(lp_store *s, const lp_store_run *run, int64_t layer, int64_t head,
                          map_row *row, lp_error *err)
{
    sqlite3_stmt *stmt;
    lp_status st = lp_store_prepare(s, sql_find_map, &stmt, "query failed", err);
    if (st != LP_OK)
        return st;
    sqlite3_bind_int64(stmt, 1, run->id);
    sqlite3_bind_int64(stmt, 2, layer);
    sqlite3_bind_int64(stmt, 3, head);
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
        const unsigned char *dtype = sqlite3_column_text(stmt, 3);
        row->rowid = sqlite3_column_int64(stmt, 0);
        row->n_q = sqlite3_column_int64(stmt, 1);
        row->n_k = sqlite3_column_int64(stmt, 2);
        snprintf(row->dtype, sizeof row->dtype, "%s", dtype ? (const char *)dtype : "");
        row->blob_bytes = sqlite3_column_int64(stmt, 4);
    }
    sqlite3_finalize(stmt);
    if (rc == SQLITE_ROW)
        return LP_OK;
    if (rc != SQLITE_DONE)
        return lp_store_sql_error(s, "reading attention", err);
    return lp_error_set(err, LP_ERR_NOT_FOUND,
                        "%s: run %lld has no attention map for layer %lld head %lld "
                        "(maps_dtype '%s')",
                        s->path, (long long)run->id, (long long)layer, (long long)head,
                        run->maps_dtype);
}

/* The stored shape, dtype and blob length must agree before a byte of the blob is read. */
static lp_status check_map(const lp_store *s, const lp_store_run *run, int64_t layer,
                           int64_t head, const map_row *row, uint64_t *elem, lp_error *err)
{
    *elem = strcmp(row->dtype, "f16") == 0 ? 2 : (strcmp(row->dtype, "f32") == 0 ? 4 : 0);
    if (!*elem)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: attention run %lld layer %lld head %lld: dtype '%s' is not "
                            "f16 or f32",
                            s->path, (long long)run->id, (long long)layer, (long long)head,
                            row->dtype);
    uint64_t cells, want;
    bool shape_ok = row->n_q >= 1 && row->n_k >= 1 && row->n_q <= row->n_k;
    if (!shape_ok || !lp_mul_u64((uint64_t)row->n_q, (uint64_t)row->n_k, &cells) ||
        !lp_mul_u64(cells, *elem, &want) || want != (uint64_t)row->blob_bytes)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: attention run %lld layer %lld head %lld: n_q %lld x n_k %lld "
                            "x %s needs %s bytes, blob has %lld (need 1 <= n_q <= n_k)",
                            s->path, (long long)run->id, (long long)layer, (long long)head,
                            (long long)row->n_q, (long long)row->n_k, row->dtype,
                            shape_ok ? "n_q*n_k*elem" : "valid", (long long)row->blob_bytes);
    /* sqlite3_blob_read takes int offsets; SQLite's own blob limit (1e9 bytes by default) is
     * below this, so only a database built with a raised limit can trip it. */
    if (want > (uint64_t)INT_MAX)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: attention run %lld layer %lld head %lld: blob of %llu bytes is "
                            "over the %d bytes sqlite3_blob_read can address",
                            s->path, (long long)run->id, (long long)layer, (long long)head,
                            (unsigned long long)want, INT_MAX);
    return LP_OK;
}

lp_status lp_store_map_open(lp_store *s, const lp_store_run *run, int64_t layer, int64_t head,
                            lp_store_map **out, lp_error *err)
{
    *out = NULL;
    map_row row;
    uint64_t elem;
    lp_status st = find_map(s, run, layer, head, &row, err);
    if (st == LP_OK)
        st = check_map(s, run, layer, head, &row, &elem, err);
    if (st != LP_OK)
        return st;
    lp_store_map *m = calloc(1, sizeof *m);
    if (!m)
        return lp_error_set(err, LP_ERR_NOMEM, "attention layer %lld head %lld: out of memory",
                            (long long)layer, (long long)head);
    m->store = s;
    m->n_q = row.n_q;
    m->n_k = row.n_k;
    m->elem = elem;
    if (sqlite3_blob_open(s->db, "main", "attention", "probs", row.rowid, 0, &m->blob) !=
        SQLITE_OK) {
        st = lp_store_sql_error(s, "opening attention blob", err);
        lp_store_map_close(m);
        return st;
    }
    if (elem == 2)
        pthread_once(&half_table_once, build_half_table);
    *out = m;
    return LP_OK;
}

void lp_store_map_shape(const lp_store_map *map, int64_t *n_q, int64_t *n_k)
{
    *n_q = map->n_q;
    *n_k = map->n_k;
}

lp_status lp_store_map_read(lp_store_map *m, int64_t row, int64_t col0, int64_t n, float *out,
                            lp_error *err)
{
    LP_ASSERT(row >= 0 && row < m->n_q && col0 >= 0 && n >= 0 && col0 + n <= m->n_k);
    size_t bytes = (size_t)n * (size_t)m->elem; /* <= one row, which check_map bounded */
    if (bytes > m->raw_cap) {
        unsigned char *grown = realloc(m->raw, bytes);
        if (!grown)
            return lp_error_set(err, LP_ERR_NOMEM, "attention row of %lld values: out of memory",
                                (long long)n);
        m->raw = grown;
        m->raw_cap = bytes;
    }
    uint64_t offset = ((uint64_t)row * (uint64_t)m->n_k + (uint64_t)col0) * m->elem;
    if (sqlite3_blob_read(m->blob, m->raw, (int)bytes, (int)offset) != SQLITE_OK)
        return lp_store_sql_error(m->store, "reading attention blob", err);
    if (m->elem == 2)
        for (int64_t j = 0; j < n; j++)
            out[j] = half_table[lp_load_u16(m->raw + 2 * j)];
    else
        for (int64_t j = 0; j < n; j++)
            out[j] = lp_load_f32(m->raw + 4 * j);
    return LP_OK;
}

void lp_store_map_close(lp_store_map *map)
{
    if (!map)
        return;
    if (map->blob)
        sqlite3_blob_close(map->blob);
    free(map->raw);
    free(map);
}

int lp_store_map_elem_size(const lp_store_map *map) { return (int)map->elem; }

lp_status lp_store_map_read_raw(lp_store_map *m, int64_t row, void *out, lp_error *err)
{
    LP_ASSERT(row >= 0 && row < m->n_q);
    uint64_t bytes = (uint64_t)m->n_k * m->elem; /* one row; check_map bounded the blob by INT_MAX */
    uint64_t offset = (uint64_t)row * bytes;
    if (sqlite3_blob_read(m->blob, out, (int)bytes, (int)offset) != SQLITE_OK)
        return lp_store_sql_error(m->store, "reading attention blob", err);
    return LP_OK;
}
