/* Reading a trace database for pictures: runs, token pieces, head statistics, leak checks, and
 * attention maps max-pooled while streaming the blob one row at a time.
 *
 * attention.probs layout (trace/store/schema.sql): n_q rows of n_k little-endian values, f16 (2 bytes)
 * or f32 (4 bytes) as attention.dtype says, row-major, no header or padding; so the blob is exactly
 * n_q * n_k * size bytes and row i starts at byte i * n_k * size. Anything else is refused. */
#include "render/render.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>

#include "core/checked.h"
#include "core/text.h"
#include "core/dtype.h"
#include "render/render_internal.h"
#include "trace/kernels/mask.h"
#include "trace/trace.h"

/* Runs with more layers or heads than this are refused as corrupt before anything is sized by
 * them (the largest published models have < 200 layers and < 256 heads). */
#define MAX_LAYERS_OR_HEADS 65536

struct lp_render_db {
    sqlite3 *db;
    char path[512];
};

static lp_status sql_error(lp_render_db *db, lp_error *err, const char *what)
{
    return lp_error_set(err, LP_ERR_SQLITE, "%s: %s: %s", db->path, what, sqlite3_errmsg(db->db));
}

static lp_status prepare(lp_render_db *db, const char *sql, sqlite3_stmt **stmt, lp_error *err)
{
    if (sqlite3_prepare_v2(db->db, sql, -1, stmt, NULL) != SQLITE_OK) {
        *stmt = NULL;
        return sql_error(db, err, "query failed");
    }
    return LP_OK;
}

/* Databases from before a table existed simply have none of its rows. */
static bool table_exists(lp_render_db *db, const char *name)
{
    sqlite3_stmt *stmt;
    if (sqlite3_prepare_v2(db->db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                           -1, &stmt, NULL) != SQLITE_OK)
        return false;
    sqlite3_bind_text(stmt, 1, name, -1, SQLITE_STATIC);
    bool found = sqlite3_step(stmt) == SQLITE_ROW;
    sqlite3_finalize(stmt);
    return found;
}

lp_status lp_render_db_open(const char *path, lp_render_db **out, lp_error *err)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return lp_error_set(err, LP_ERR_IO, "%s: no such file", path);
    if (!S_ISREG(st.st_mode))
        return lp_error_set(err, LP_ERR_IO, "%s: not a regular file", path);
    lp_render_db *db = calloc(1, sizeof *db);
    if (!db)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", path);
    snprintf(db->path, sizeof db->path, "%s", path);
    if (sqlite3_open_v2(path, &db->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        lp_status s = sql_error(db, err, "cannot open");
        sqlite3_close(db->db);
        free(db);
        return s;
    }
    /* A WAL reader can still meet a brief lock while `loupe trace` checkpoints or resets the WAL:
     * wait for it instead of failing with "database is locked". */
    sqlite3_busy_timeout(db->db, 10000);
    sqlite3_stmt *stmt;
    /* Also the first read of the file: a non-database fails here with SQLite's own words. */
    if (sqlite3_prepare_v2(db->db,
                           "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                           "('runs', 'attention', 'tokens')",
                           -1, &stmt, NULL) != SQLITE_OK) {
        lp_status s = sql_error(db, err, "not a trace database");
        lp_render_db_close(db);
        return s;
    }
    int rc = sqlite3_step(stmt);
    int n_tables = rc == SQLITE_ROW ? sqlite3_column_int(stmt, 0) : -1;
    sqlite3_finalize(stmt);
    if (rc != SQLITE_ROW) {
        lp_status s = sql_error(db, err, "not a trace database");
        lp_render_db_close(db);
        return s;
    }
    if (n_tables != 3) {
        lp_error_set(err, LP_ERR_FORMAT,
                     "%s: not a loupe trace database (tables runs, attention, tokens: %d of 3 "
                     "present)",
                     path, n_tables);
        lp_render_db_close(db);
        return LP_ERR_FORMAT;
    }
    /* A newer loupe may have changed what the columns mean: refuse rather than draw nonsense.
     * Older databases (no meta table, no version row) read as they are. */
    if (table_exists(db, "meta")) {
        sqlite3_stmt *q = NULL;
        if (sqlite3_prepare_v2(db->db, "SELECT value FROM meta WHERE key = 'schema_version'", -1,
                               &q, NULL) == SQLITE_OK &&
            sqlite3_step(q) == SQLITE_ROW) {
            const char *text = (const char *)sqlite3_column_text(q, 0);
            int64_t version = 0;
            bool number = text && lp_parse_i64(text, &version);
            if (!number || version > LP_STORE_SCHEMA_VERSION) {
                lp_status refused;
                if (number)
                    refused = lp_error_set(err, LP_ERR_UNSUPPORTED,
                                 "%s: meta.schema_version %lld is newer than this loupe's %d "
                                 "(upgrade loupe)",
                                 path, (long long)version, LP_STORE_SCHEMA_VERSION);
                else
                    refused = lp_error_set(err, LP_ERR_FORMAT,
                                           "%s: meta.schema_version '%s' is not a number",
                                 path, text ? text : "(null)");
                sqlite3_finalize(q);
                lp_render_db_close(db);
                return refused;
            }
        }
        sqlite3_finalize(q);
    }
    *out = db;
    return LP_OK;
}

void lp_render_db_close(lp_render_db *db)
{
    if (!db)
        return;
    sqlite3_close(db->db);
    free(db);
}

void lp_render_run_clear(lp_render_run *run)
{
    free(run->layer_window);
    memset(run, 0, sizeof *run);
}

static void copy_text(char *dst, size_t size, const unsigned char *src)
{
    snprintf(dst, size, "%s", src ? (const char *)src : "");
}

/* The window and causality the arch description records, when it does. Field names follow
 * inspect/inspect.h (sliding_window, layer_window); anything missing keeps the plain causal mask. */
static lp_status read_arch(lp_render_run *run, const char *arch_json, lp_error *err)
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
    if (json_is_array(v) && run->n_layers > 0) {
        size_t n = json_array_size(v);
        if ((int64_t)n == run->n_layers) {
            run->layer_window = calloc(n, sizeof *run->layer_window);
            if (!run->layer_window) {
                json_decref(root);
                return lp_error_set(err, LP_ERR_NOMEM, "run %lld: out of memory",
                                    (long long)run->id);
            }
            for (size_t i = 0; i < n; i++) {
                json_t *w = json_array_get(v, i);
                run->layer_window[i] = json_is_integer(w) && json_integer_value(w) > 0
                                           ? json_integer_value(w)
                                           : 0;
            }
            run->window = 0; /* per layer wins */
        }
    }
    json_decref(root);
    return LP_OK;
}

int64_t lp_render_run_window(const lp_render_run *run, int64_t layer)
{
    if (run->layer_window && layer >= 0 && layer < run->n_layers)
        return run->layer_window[layer];
    return run->window;
}

#define RUN_COLUMNS                                                                            \
    "id, status, kind, model_path, architecture, arch_json, n_tokens, n_layers, n_heads, "     \
    "maps_dtype, prompt"

lp_status lp_render_db_pick_run_kind(lp_render_db *db, int64_t run_id, const char *kind,
                                     lp_render_run *run, bool *incomplete, lp_error *err)
{
    memset(run, 0, sizeof *run);
    *incomplete = false;
    sqlite3_stmt *stmt;
    lp_status s;
    if (run_id > 0) {
        s = prepare(db, "SELECT " RUN_COLUMNS " FROM runs WHERE id = ?1", &stmt, err);
        if (s)
            return s;
        sqlite3_bind_int64(stmt, 1, run_id);
    } else {
        s = prepare(db,
                    "SELECT " RUN_COLUMNS " FROM runs WHERE status = 'complete' "
                    "AND (?1 IS NULL OR kind = ?1) ORDER BY id DESC LIMIT 1",
                    &stmt, err);
        if (s)
            return s;
        if (kind)
            sqlite3_bind_text(stmt, 1, kind, -1, SQLITE_TRANSIENT);
    }
    int rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(stmt);
        if (rc != SQLITE_DONE)
            return sql_error(db, err, "reading runs");
        if (run_id > 0)
            return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no run with id %lld", db->path,
                                (long long)run_id);
        /* Say what is there, so the user knows which --run to name. */
        long long latest = 0;
        char status[32] = "";
        if (prepare(db, "SELECT id, status FROM runs ORDER BY id DESC LIMIT 1", &stmt, err) ==
            LP_OK) {
            if (sqlite3_step(stmt) == SQLITE_ROW) {
                latest = sqlite3_column_int64(stmt, 0);
                copy_text(status, sizeof status, sqlite3_column_text(stmt, 1));
            }
            sqlite3_finalize(stmt);
        }
        if (latest > 0)
            return lp_error_set(err, LP_ERR_NOT_FOUND,
                                "%s: no complete%s%s run (the latest, run %lld, is '%s'; name "
                                "a run with --run N to draw it anyway)",
                                db->path, kind ? " " : "", kind ? kind : "", latest, status);
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no runs", db->path);
    }
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
    /* snprintf may have cut a UTF-8 sequence: drop the partial character */
    size_t len = strlen(run->prompt);
    if (len == sizeof run->prompt - 1) {
        while (len > 0 && ((unsigned char)run->prompt[len - 1] & 0xc0) == 0x80)
            len--;
        if (len > 0 && ((unsigned char)run->prompt[len - 1] & 0xc0) == 0xc0)
            len--;
        run->prompt[len] = '\0';
    }
    if (run->n_layers < 1 || run->n_layers > MAX_LAYERS_OR_HEADS || run->n_heads < 1 ||
        run->n_heads > MAX_LAYERS_OR_HEADS || run->n_tokens < 0) {
        lp_error_set(err, LP_ERR_FORMAT,
                     "%s: run %lld: n_layers %lld, n_heads %lld, n_tokens %lld outside "
                     "[1, %d] / [0, ...)",
                     db->path, (long long)run->id, (long long)run->n_layers,
                     (long long)run->n_heads, (long long)run->n_tokens, MAX_LAYERS_OR_HEADS);
        sqlite3_finalize(stmt);
        memset(run, 0, sizeof *run);
        return LP_ERR_FORMAT;
    }
    s = read_arch(run, (const char *)sqlite3_column_text(stmt, 5), err);
    sqlite3_finalize(stmt);
    if (s) {
        lp_render_run_clear(run);
        return s;
    }
    *incomplete = strcmp(run->status, "complete") != 0;
    return LP_OK;
}

lp_status lp_render_db_pick_run(lp_render_db *db, int64_t run_id, lp_render_run *run,
                                bool *incomplete, lp_error *err)
{
    return lp_render_db_pick_run_kind(db, run_id, NULL, run, incomplete, err);
}

/* f16 -> f32 for all 65536 patterns, built once: an overview reads thousands of maps. */
static float half_table[65536];
static pthread_once_t half_table_once = PTHREAD_ONCE_INIT;

static void build_half_table(void)
{
    for (uint32_t h = 0; h < 65536; h++)
        half_table[h] = lp_f16_to_f32((uint16_t)h);
}

void lp_pooled_map_free(lp_pooled_map *map)
{
    free(map->allowed_max);
    free(map->masked_max);
    free(map->flags);
    memset(map, 0, sizeof *map);
}

/* Fold one row of probabilities (the shown keys only, row[0] = key col0) into the pooled grid.
 * Shown keys [lo, hi) are allowed. */
static void pool_row(lp_pooled_map *map, const float *row, int64_t n_cols, int64_t pooled_row,
                     int64_t lo, int64_t hi, float leak_threshold)
{
    float *amax = map->allowed_max + pooled_row * map->cols;
    float *mmax = map->masked_max + pooled_row * map->cols;
    uint8_t *flags = map->flags + pooled_row * map->cols;
    int64_t block = map->block;
    for (int64_t j = 0; j < n_cols; j++) {
        float v = row[j];
        int64_t c = j / block;
        if (!(v >= 0.0f)) { /* NaN or negative: not a probability */
            flags[c] |= LP_CELL_NAN;
            map->n_bad_cells++;
            continue;
        }
        if (j >= lo && j < hi) {
            flags[c] |= LP_CELL_ALLOWED;
            if (v > amax[c])
                amax[c] = v;
            if (v > map->max_value)
                map->max_value = v;
        } else {
            flags[c] |= LP_CELL_MASKED;
            if (v > mmax[c])
                mmax[c] = v;
            if (v > leak_threshold) {
                flags[c] |= LP_CELL_LEAK;
                map->n_leak_cells++;
                if (v > map->max_value)
                    map->max_value = v;
            }
        }
    }
}

lp_status lp_render_db_read_map(lp_render_db *db, const lp_render_run *run, int64_t layer,
                                int64_t head, int64_t max_cells, double leak_threshold,
                                lp_pooled_map *map, lp_error *err)
{
    return lp_render_db_read_map_range(db, run, layer, head, max_cells, leak_threshold, 0, 0, map,
                                       err);
}

lp_status lp_render_db_read_map_range(lp_render_db *db, const lp_render_run *run, int64_t layer,
                                      int64_t head, int64_t max_cells, double leak_threshold,
                                      int64_t pos_lo, int64_t pos_hi, lp_pooled_map *map,
                                      lp_error *err)
{
    memset(map, 0, sizeof *map);
    if (max_cells < 1)
        return lp_error_set(err, LP_ERR_USAGE, "map size %lld: must be at least 1 cell",
                            (long long)max_cells);
    sqlite3_stmt *stmt;
    lp_status s = prepare(db,
                          "SELECT rowid, n_q, n_k, dtype, length(probs) FROM attention "
                          "WHERE run_id = ?1 AND layer = ?2 AND head = ?3",
                          &stmt, err);
    if (s)
        return s;
    sqlite3_bind_int64(stmt, 1, run->id);
    sqlite3_bind_int64(stmt, 2, layer);
    sqlite3_bind_int64(stmt, 3, head);
    int rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(stmt);
        if (rc != SQLITE_DONE)
            return sql_error(db, err, "reading attention");
        return lp_error_set(err, LP_ERR_NOT_FOUND,
                            "%s: run %lld has no attention map for layer %lld head %lld "
                            "(maps_dtype '%s')",
                            db->path, (long long)run->id, (long long)layer, (long long)head,
                            run->maps_dtype);
    }
    sqlite3_int64 rowid = sqlite3_column_int64(stmt, 0);
    int64_t n_q = sqlite3_column_int64(stmt, 1);
    int64_t n_k = sqlite3_column_int64(stmt, 2);
    char dtype[8];
    copy_text(dtype, sizeof dtype, sqlite3_column_text(stmt, 3));
    int64_t blob_bytes = sqlite3_column_int64(stmt, 4);
    sqlite3_finalize(stmt);

    uint64_t elem = strcmp(dtype, "f16") == 0 ? 2 : (strcmp(dtype, "f32") == 0 ? 4 : 0);
    if (!elem)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: attention run %lld layer %lld head %lld: dtype '%s' is not "
                            "f16 or f32",
                            db->path, (long long)run->id, (long long)layer, (long long)head,
                            dtype);
    uint64_t cells, want;
    if (n_q < 1 || n_k < 1 || n_q > n_k || !lp_mul_u64((uint64_t)n_q, (uint64_t)n_k, &cells) ||
        !lp_mul_u64(cells, elem, &want) || want != (uint64_t)blob_bytes)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: attention run %lld layer %lld head %lld: n_q %lld x n_k %lld "
                            "x %s needs %s bytes, blob has %lld (need 1 <= n_q <= n_k)",
                            db->path, (long long)run->id, (long long)layer, (long long)head,
                            (long long)n_q, (long long)n_k, dtype,
                            n_q >= 1 && n_k >= 1 && n_q <= n_k ? "n_q*n_k*elem" : "valid",
                            (long long)blob_bytes);

    /* sqlite3_blob_read takes int offsets; SQLite's own blob limit (1e9 bytes by default) is
     * below this, so only a database built with a raised limit can trip it. */
    if (want > (uint64_t)INT_MAX)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: attention run %lld layer %lld head %lld: blob of %llu bytes is "
                            "over the %d bytes sqlite3_blob_read can address",
                            db->path, (long long)run->id, (long long)layer, (long long)head,
                            (unsigned long long)want, INT_MAX);
    /* The window of positions shown: keys [pos_lo, pos_hi), and the query rows whose positions
     * fall there (query row i is at position n_k - n_q + i). */
    int64_t q_pos0 = n_k - n_q;
    if (pos_hi == 0)
        pos_hi = n_k;
    if (pos_lo < 0 || pos_lo >= pos_hi || pos_hi > n_k)
        return lp_error_set(err, LP_ERR_RANGE,
                            "--range %lld:%lld: outside the map's positions 0:%lld (need "
                            "0 <= A < B <= %lld)",
                            (long long)pos_lo, (long long)pos_hi, (long long)n_k, (long long)n_k);
    int64_t row0 = pos_lo > q_pos0 ? pos_lo - q_pos0 : 0;
    int64_t row_end = pos_hi - q_pos0;
    if (row_end <= row0)
        return lp_error_set(err, LP_ERR_RANGE,
                            "--range %lld:%lld: no query in it (the queries are positions "
                            "%lld:%lld)",
                            (long long)pos_lo, (long long)pos_hi, (long long)q_pos0, (long long)n_k);
    int64_t shown_q = row_end - row0, shown_k = pos_hi - pos_lo;
    int64_t longest = shown_q > shown_k ? shown_q : shown_k;
    map->n_q = n_q;
    map->n_k = n_k;
    map->row0 = row0;
    map->col0 = pos_lo;
    map->shown_q = shown_q;
    map->shown_k = shown_k;
    map->block = (longest + max_cells - 1) / max_cells;
    map->rows = (shown_q + map->block - 1) / map->block;
    map->cols = (shown_k + map->block - 1) / map->block;
    size_t n_cells = (size_t)(map->rows * map->cols); /* <= max_cells^2, bounded by the caller */
    map->allowed_max = calloc(n_cells, sizeof *map->allowed_max);
    map->masked_max = calloc(n_cells, sizeof *map->masked_max);
    map->flags = calloc(n_cells, 1);
    size_t row_bytes = (size_t)n_k * (size_t)elem;
    size_t shown_bytes = (size_t)shown_k * (size_t)elem;
    void *raw = malloc(shown_bytes);
    float *row = malloc((size_t)shown_k * sizeof *row);
    if (!map->allowed_max || !map->masked_max || !map->flags || !raw || !row) {
        free(raw);
        free(row);
        lp_pooled_map_free(map);
        return lp_error_set(err, LP_ERR_NOMEM, "attention layer %lld head %lld: out of memory",
                            (long long)layer, (long long)head);
    }
    if (elem == 2)
        pthread_once(&half_table_once, build_half_table);

    /* Stream the blob: only one row of it is in memory at a time. */
    sqlite3_blob *blob = NULL;
    s = LP_OK;
    if (sqlite3_blob_open(db->db, "main", "attention", "probs", rowid, 0, &blob) != SQLITE_OK) {
        s = sql_error(db, err, "opening attention blob");
    } else {
        lp_mask_spec mask = lp_mask_causal(n_q, n_k);
        mask.causal = run->causal;
        mask.window = lp_render_run_window(run, layer);
        for (int64_t i = row0; i < row_end && s == LP_OK; i++) {
            /* only the shown keys of the row are read */
            uint64_t offset = (uint64_t)i * row_bytes + (uint64_t)pos_lo * elem;
            if (sqlite3_blob_read(blob, raw, (int)shown_bytes, (int)offset) != SQLITE_OK) {
                s = sql_error(db, err, "reading attention blob");
                break;
            }
            const unsigned char *p = raw;
            if (elem == 2)
                for (int64_t j = 0; j < shown_k; j++)
                    row[j] = half_table[lp_load_u16(p + 2 * j)];
            else
                for (int64_t j = 0; j < shown_k; j++)
                    row[j] = lp_load_f32(p + 4 * j);
            int64_t lo, hi;
            lp_mask_row_range(&mask, 0, i, &lo, &hi);
            pool_row(map, row, shown_k, (i - row0) / map->block, lo - pos_lo, hi - pos_lo,
                     (float)leak_threshold);
        }
        sqlite3_blob_close(blob);
    }
    free(raw);
    free(row);
    if (s)
        lp_pooled_map_free(map);
    return s;
}

/* Append one code point as UTF-8. */
static size_t put_utf8(char *dst, uint32_t cp)
{
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char)(0xc0 | (cp >> 6));
        dst[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xe0 | (cp >> 12));
        dst[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        dst[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    dst[0] = (char)(0xf0 | (cp >> 18));
    dst[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    dst[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Decode one UTF-8 sequence; returns its length, or 0 when invalid (overlong, surrogate, cut). */
static size_t get_utf8(const unsigned char *s, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

char *lp_render_visible_piece(const char *piece, int max_chars)
{
    if (!piece)
        piece = "";
    size_t n = strlen(piece);
    if (max_chars < 1)
        max_chars = 1;
    /* each input byte becomes at most 3 output bytes (U+FFFD or a control picture) */
    size_t cap = 3 * n + 8;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    size_t o = 0;
    int chars = 0;
    const unsigned char *s = (const unsigned char *)piece;
    size_t i = 0;
    while (i < n) {
        if (chars == max_chars) {
            o += put_utf8(out + o, 0x2026); /* ellipsis */
            break;
        }
        uint32_t cp;
        size_t len = get_utf8(s + i, &cp);
        if (len == 0) {
            cp = 0xfffd;
            len = 1;
        } else if (cp == ' ' || cp == 0x2581) {
            cp = 0x2423;
        } else if (cp == '\n') {
            cp = 0x23ce;
        } else if (cp == '\t') {
            cp = 0x21e5;
        } else if (cp == '\r') {
            cp = 0x240d;
        } else if (cp < 0x20) {
            cp = 0x2400 + cp;
        } else if (cp == 0x7f) {
            cp = 0x2421;
        }
        o += put_utf8(out + o, cp);
        i += len;
        chars++;
    }
    out[o] = '\0';
    return out;
}

void lp_render_free_pieces(char **pieces, int64_t n)
{
    if (!pieces)
        return;
    for (int64_t i = 0; i < n; i++)
        free(pieces[i]);
    free(pieces);
}

/* Longest label kept, in characters; longer pieces end in an ellipsis. */
#define PIECE_MAX_CHARS 24

lp_status lp_render_db_tokens(lp_render_db *db, int64_t run_id, char ***pieces, int64_t *n,
                              lp_error *err)
{
    *pieces = NULL;
    *n = 0;
    sqlite3_stmt *stmt;
    lp_status s = prepare(db, "SELECT count(*) FROM tokens WHERE run_id = ?1", &stmt, err);
    if (s)
        return s;
    sqlite3_bind_int64(stmt, 1, run_id);
    int64_t count = sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : -1;
    sqlite3_finalize(stmt);
    if (count < 0)
        return sql_error(db, err, "reading tokens");
    if (count == 0)
        return LP_OK;
    char **out = calloc((size_t)count, sizeof *out);
    if (!out)
        return lp_error_set(err, LP_ERR_NOMEM, "tokens of run %lld: out of memory (%lld)",
                            (long long)run_id, (long long)count);
    /* Newer stores add `label`, the text a piece stands for ("Ġthe" -> " the"): prefer it. */
    bool have_label = sqlite3_prepare_v2(db->db, "SELECT label FROM tokens LIMIT 0", -1, &stmt,
                                         NULL) == SQLITE_OK;
    sqlite3_finalize(stmt);
    s = prepare(db,
                have_label ? "SELECT pos, coalesce(label, piece) FROM tokens WHERE run_id = ?1 "
                             "ORDER BY pos"
                           : "SELECT pos, piece FROM tokens WHERE run_id = ?1 ORDER BY pos",
                &stmt, err);
    if (s) {
        free(out);
        return s;
    }
    sqlite3_bind_int64(stmt, 1, run_id);
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        int64_t pos = sqlite3_column_int64(stmt, 0);
        if (pos < 0 || pos >= count) {
            s = lp_error_set(err, LP_ERR_FORMAT,
                             "%s: tokens of run %lld: pos %lld outside [0, %lld) (positions must "
                             "be 0..n-1)",
                             db->path, (long long)run_id, (long long)pos, (long long)count);
            break;
        }
        free(out[pos]);
        out[pos] = lp_render_visible_piece((const char *)sqlite3_column_text(stmt, 1),
                                           PIECE_MAX_CHARS);
        if (!out[pos]) {
            s = lp_error_set(err, LP_ERR_NOMEM, "tokens: out of memory");
            break;
        }
    }
    if (s == LP_OK && rc != SQLITE_DONE)
        s = sql_error(db, err, "reading tokens");
    sqlite3_finalize(stmt);
    if (s) {
        lp_render_free_pieces(out, count);
        return s;
    }
    *pieces = out;
    *n = count;
    return LP_OK;
}

lp_status lp_render_db_head_stat(lp_render_db *db, const lp_render_run *run, lp_head_stat stat,
                                 double **values, lp_error *err)
{
    *values = NULL;
    if ((unsigned)stat >= LP_STAT_COUNT)
        return lp_error_set(err, LP_ERR_USAGE, "unknown statistic %d", (int)stat);
    if (!table_exists(db, "head_stats"))
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: run %lld has no head_stats rows (no such "
                            "table)", db->path, (long long)run->id);
    /* The column name comes from our own table, never from the user. */
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT layer, head, %s FROM head_stats WHERE run_id = ?1", lp_head_stat_name(stat));
    sqlite3_stmt *stmt;
    lp_status s = prepare(db, sql, &stmt, err);
    if (s)
        return s;
    sqlite3_bind_int64(stmt, 1, run->id);
    size_t n = (size_t)(run->n_layers * run->n_heads); /* both bounded at pick time */
    double *out = malloc(n * sizeof *out);
    if (!out) {
        sqlite3_finalize(stmt);
        return lp_error_set(err, LP_ERR_NOMEM, "head_stats: out of memory");
    }
    for (size_t i = 0; i < n; i++)
        out[i] = (double)NAN;
    int rc;
    int64_t rows = 0;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        int64_t layer = sqlite3_column_int64(stmt, 0);
        int64_t head = sqlite3_column_int64(stmt, 1);
        if (layer < 0 || layer >= run->n_layers || head < 0 || head >= run->n_heads) {
            s = lp_error_set(err, LP_ERR_FORMAT,
                             "%s: head_stats of run %lld: layer %lld head %lld outside the "
                             "run's %lld layers x %lld heads",
                             db->path, (long long)run->id, (long long)layer, (long long)head,
                             (long long)run->n_layers, (long long)run->n_heads);
            break;
        }
        out[layer * run->n_heads + head] = sqlite3_column_type(stmt, 2) == SQLITE_NULL
                                               ? (double)NAN
                                               : sqlite3_column_double(stmt, 2);
        rows++;
    }
    if (s == LP_OK && rc != SQLITE_DONE)
        s = sql_error(db, err, "reading head_stats");
    sqlite3_finalize(stmt);
    if (s == LP_OK && rows == 0)
        s = lp_error_set(err, LP_ERR_NOT_FOUND, "%s: run %lld has no head_stats rows", db->path,
                         (long long)run->id);
    if (s) {
        free(out);
        return s;
    }
    *values = out;
    return LP_OK;
}

lp_status lp_render_db_latest_leak_run(lp_render_db *db, int64_t *run_id, lp_error *err)
{
    *run_id = 0;
    if (!table_exists(db, "leak_checks"))
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no leak runs (no leak_checks table)",
                            db->path);
    sqlite3_stmt *stmt;
    lp_status s = prepare(db,
                          "SELECT max(r.id) FROM runs r WHERE r.status = 'complete' AND EXISTS "
                          "(SELECT 1 FROM leak_checks l WHERE l.run_id = r.id AND "
                          "l.check_name = 'perturbation' AND l.layer IS NOT NULL)",
                          &stmt, err);
    if (s)
        return s;
    int rc = sqlite3_step(stmt);
    int64_t id = rc == SQLITE_ROW && sqlite3_column_type(stmt, 0) != SQLITE_NULL
                     ? sqlite3_column_int64(stmt, 0)
                     : 0;
    sqlite3_finalize(stmt);
    if (rc != SQLITE_ROW)
        return sql_error(db, err, "reading leak_checks");
    if (id == 0)
        return lp_error_set(err, LP_ERR_NOT_FOUND,
                            "%s: no leak runs (no complete run has 'perturbation' leak checks: "
                            "run `loupe leak MODEL --db %s` first)",
                            db->path, db->path);
    *run_id = id;
    return LP_OK;
}

lp_status lp_render_db_leak_diffs(lp_render_db *db, int64_t run_id, int64_t **layers,
                                  double **diffs, bool **failed, int64_t *n, lp_error *err)
{
    *layers = NULL;
    *diffs = NULL;
    *failed = NULL;
    *n = 0;
    if (!table_exists(db, "leak_checks"))
        return lp_error_set(err, LP_ERR_NOT_FOUND,
                            "%s: run %lld has no 'perturbation' leak checks (no leak_checks table)",
                            db->path, (long long)run_id);
    sqlite3_stmt *stmt;
    lp_status s = prepare(db,
                          "SELECT count(DISTINCT layer) FROM leak_checks WHERE run_id = ?1 AND "
                          "check_name = 'perturbation' AND layer IS NOT NULL",
                          &stmt, err);
    if (s)
        return s;
    sqlite3_bind_int64(stmt, 1, run_id);
    int64_t count = sqlite3_step(stmt) == SQLITE_ROW ? sqlite3_column_int64(stmt, 0) : -1;
    sqlite3_finalize(stmt);
    if (count < 0)
        return sql_error(db, err, "reading leak_checks");
    if (count == 0)
        return lp_error_set(err, LP_ERR_NOT_FOUND,
                            "%s: run %lld has no 'perturbation' leak checks (no leak runs: run "
                            "`loupe leak` first, or name its run with --run)",
                            db->path, (long long)run_id);
    int64_t *l = malloc((size_t)count * sizeof *l);
    double *d = malloc((size_t)count * sizeof *d);
    bool *f = malloc((size_t)count * sizeof *f);
    if (!l || !d || !f) {
        free(l);
        free(d);
        free(f);
        return lp_error_set(err, LP_ERR_NOMEM, "leak_checks: out of memory");
    }
    s = prepare(db,
                "SELECT layer, max(max_abs_diff), max(passed = 0) FROM leak_checks WHERE "
                "run_id = ?1 AND check_name = 'perturbation' AND layer IS NOT NULL "
                "GROUP BY layer ORDER BY layer",
                &stmt, err);
    int64_t got = 0;
    if (s == LP_OK) {
        sqlite3_bind_int64(stmt, 1, run_id);
        int rc;
        while ((rc = sqlite3_step(stmt)) == SQLITE_ROW && got < count) {
            l[got] = sqlite3_column_int64(stmt, 0);
            d[got] = sqlite3_column_type(stmt, 1) == SQLITE_NULL ? (double)NAN
                                                                 : sqlite3_column_double(stmt, 1);
            f[got] = sqlite3_column_int(stmt, 2) != 0;
            got++;
        }
        if (rc != SQLITE_DONE && rc != SQLITE_ROW)
            s = sql_error(db, err, "reading leak_checks");
        sqlite3_finalize(stmt);
    }
    if (s) {
        free(l);
        free(d);
        free(f);
        return s;
    }
    *layers = l;
    *diffs = d;
    *failed = f;
    *n = got;
    return LP_OK;
}
