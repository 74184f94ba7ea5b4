/* What the render tests share: trace databases with planted runs, maps, tokens and statistics,
 * built through the store (plain SQL via lp_store_sql), and small file helpers. Include after
 * test_util.h. */
#ifndef LP_TESTS_RENDER_DB_H
#define LP_TESTS_RENDER_DB_H

#include <unistd.h>

#include "core/dtype.h"
#include "render/render.h"
#include "store_test_util.h"

#define ATTN_INSERT "INSERT INTO attention (run_id, layer, head, n_q, n_k, dtype, probs) VALUES "

/* ---- building databases with planted maps (plain SQL through lp_store_sql) ---- */

static inline void tmp_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/render_%ld_%s", lp_test_tmp_dir(), (long)getpid(), name);
}

/* A database and the -wal and -shm files SQLite keeps beside it. */
static inline void unlink_db(const char *path)
{
    char side[600];
    unlink(path);
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
}

/* The files one test writes, named after its stem in the scratch folder: STEM.db, .png, .svg and
 * .pdf; scratch_remove unlinks whichever were written, the database with its -wal and -shm. */
typedef struct scratch {
    char db[512], png[512], svg[512], pdf[512];
} scratch;

static inline void scratch_init(scratch *s, const char *stem)
{
    char base[400];
    tmp_path(base, sizeof base, stem);
    snprintf(s->db, sizeof s->db, "%s.db", base);
    snprintf(s->png, sizeof s->png, "%s.png", base);
    snprintf(s->svg, sizeof s->svg, "%s.svg", base);
    snprintf(s->pdf, sizeof s->pdf, "%s.pdf", base);
}

static inline void scratch_remove(const scratch *s)
{
    unlink_db(s->db);
    unlink(s->png);
    unlink(s->svg);
    unlink(s->pdf);
}

/* A fresh database with loupe's schema, made by the store itself. */
static inline void new_db(const char *path)
{
    unlink_db(path);
    lp_store *store;
    lp_error err = {0};
    if (lp_store_open(path, &store, &err) != LP_OK)
        fail_msg("%s", err.msg);
    lp_store_close(store);
}

static inline void add_run(const char *db, int64_t id, const char *status, const char *kind,
                    int64_t n_tokens, int64_t n_layers, int64_t n_heads, const char *arch_json)
{
    char *arch = lp_test_sql_text_literal(arch_json);
    lp_test_sql_exec(db,
                     "INSERT INTO runs (id, status, kind, model_path, model_format, "
                     "architecture, arch_json, n_tokens, n_layers, n_heads, n_threads, isa, "
                     "loupe_version, maps_dtype, started_at) VALUES (%lld, '%s', '%s', "
                     "'/models/tiny-test', 'safetensors', 'llama', %s, %lld, %lld, %lld, 1, 'ref', "
                     "'0.1.0', 'f32', '2026-01-01')",
                     (long long)id, status, kind, arch, (long long)n_tokens, (long long)n_layers,
                     (long long)n_heads);
    free(arch);
}

static inline void add_tokens(const char *db, int64_t run, const char *const *pieces, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        char *piece = lp_test_sql_text_literal(pieces[i]);
        lp_test_sql_exec(db,
                         "INSERT INTO tokens (run_id, pos, token_id, piece) VALUES (%lld, %lld, "
                         "%lld, %s)",
                         (long long)run, (long long)i, (long long)(100 + i), piece);
        free(piece);
    }
}

/* values: row-major [n_q, n_k] floats, stored as f32 or f16 */
static inline void add_map(const char *db, int64_t run, int64_t layer, int64_t head, int64_t n_q,
                    int64_t n_k, const float *values, bool f16)
{
    size_t n = (size_t)(n_q * n_k);
    size_t bytes = n * (f16 ? 2 : 4);
    unsigned char *blob = malloc(bytes);
    assert_non_null(blob);
    for (size_t i = 0; i < n; i++) {
        if (f16) {
            uint16_t h = lp_f32_to_f16(values[i]);
            memcpy(blob + 2 * i, &h, 2);
        } else {
            memcpy(blob + 4 * i, &values[i], 4);
        }
    }
    char *literal = lp_test_sql_blob_literal(blob, bytes);
    lp_test_sql_exec(db, ATTN_INSERT "(%lld, %lld, %lld, %lld, %lld, '%s', %s)", (long long)run,
                     (long long)layer, (long long)head, (long long)n_q, (long long)n_k,
                     f16 ? "f16" : "f32", literal);
    free(literal);
    free(blob);
}

/* A causal map: row i spreads its mass evenly over keys 0..i (bottom-right aligned). */
static inline void causal_uniform(float *v, int64_t n_q, int64_t n_k)
{
    for (int64_t i = 0; i < n_q; i++) {
        int64_t pos = n_k - n_q + i;
        for (int64_t j = 0; j < n_k; j++)
            v[i * n_k + j] = j <= pos ? 1.0f / (float)(pos + 1) : 0.0f;
    }
}

static inline void add_stats(const char *db, int64_t run, int64_t n_layers, int64_t n_heads)
{
    for (int64_t l = 0; l < n_layers; l++)
        for (int64_t h = 0; h < n_heads; h++)
            lp_test_sql_exec(db,
                             "INSERT INTO head_stats (run_id, layer, head, entropy, max_prob, "
                             "sink, prev_token, self, distance, local_frac, local_window, "
                             "output_norm) VALUES (%lld, %lld, %lld, %.17g, 0.5, %.17g, 0.25, "
                             "0.1, 1.5, 0.9, 8, 2.0)",
                             (long long)run, (long long)l, (long long)h,
                             0.1 * (double)(l * n_heads + h), /* entropy */
                             l == 0 && h == 0 ? 1.0 : 0.0);   /* sink */
}

/* The database read-only and its run run_id (0: the latest complete one); the test fails with
 * the store's message otherwise. */
static inline void close_run(lp_store *db, lp_store_run *run)
{
    lp_store_run_clear(run);
    lp_store_close(db);
}

static inline lp_store *open_run(const char *db_path, int64_t run_id, lp_store_run *run)
{
    lp_error err = {0};
    lp_store *db;
    bool incomplete;
    if (lp_store_open_read(db_path, &db, &err) != LP_OK ||
        lp_store_read_run(db, run_id, NULL, run, &incomplete, &err) != LP_OK)
        fail_msg("%s", err.msg);
    return db;
}

static inline char *read_text_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static inline bool file_exists(const char *path) { return access(path, F_OK) == 0; }

#endif
