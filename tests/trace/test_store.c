/* Tests of the SQLite trace store: what a run writes (maps, head statistics, predictions, logits,
 * MoE routing) against tests/support/ref_forward.c, selections, f16 maps, killed and failed runs, and
 * refusing a database from a newer loupe. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/dtype.h"
#include "ref_forward.h"
#include "trace/trace.h"

typedef struct fixture {
    ref_config cfg;
    ref_model m;
    ref_outputs ref;
    lp_model *model;
    char dir[512];
    char db[512];
    int32_t ids[32];
    int64_t T;
} fixture;

static void fixture_init(fixture *f, ref_family family, const char *tag)
{
    memset(f, 0, sizeof *f);
    ref_config llama = {.family = REF_LLAMA, .vocab = 67, .hidden = 32, .n_layers = 2,
                        .n_heads = 4, .n_kv_heads = 2, .head_dim = 8, .ffn = 40, .eps = 1e-5,
                        .theta = 10000, .scale = 0.25};
    ref_config mixtral = {.family = REF_MIXTRAL, .vocab = 67, .hidden = 32, .n_layers = 2,
                          .n_heads = 4, .n_kv_heads = 2, .head_dim = 8, .ffn = 24, .eps = 1e-5,
                          .theta = 10000, .n_experts = 4, .top_k = 2, .scale = 0.25};
    f->cfg = family == REF_MIXTRAL ? mixtral : llama;
    assert_true(ref_model_random(&f->cfg, 99, &f->m));
    snprintf(f->dir, sizeof f->dir, "%s/store_%s_%ld", lp_test_tmp_dir(), tag, (long)getpid());
    snprintf(f->db, sizeof f->db, "%s/store_%s_%ld.db", lp_test_tmp_dir(), tag, (long)getpid());
    remove(f->db);
    assert_true(ref_model_write_hf(&f->m, f->dir));
    f->T = 14;
    for (int64_t t = 0; t < f->T; t++)
        f->ids[t] = (int32_t)((t * 29 + 3) % f->cfg.vocab);
    assert_true(ref_forward(&f->m, f->ids, f->T, &f->ref));
    lp_error err = {0};
    if (lp_model_open(f->dir, &f->model, &err) != LP_OK)
        fail_msg("%s", err.msg);
}

static void fixture_free(fixture *f)
{
    lp_model_close(f->model);
    ref_outputs_free(&f->ref);
    ref_model_free(&f->m);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s-wal' '%s-shm'", f->dir, f->db, f->db, f->db);
    assert_int_equal(system(cmd), 0);
}

/* One complete traced run; returns its id. */
static int64_t trace_run(fixture *f, lp_store *store, const lp_store_opts *sopts)
{
    lp_error err = {0};
    lp_run_info info;
    memset(&info, 0, sizeof info);
    info.model_path = f->dir;
    info.model_format = "safetensors";
    info.arch = lp_model_arch(f->model);
    info.prompt = "a test prompt";
    info.tokens = f->ids;
    info.n_tokens = f->T;
    info.n_threads = 1;
    int64_t run_id;
    if (lp_store_begin_run(store, &info, sopts, &run_id, &err) != LP_OK)
        fail_msg("%s", err.msg);
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.observer = lp_store_observer(store);
    opts.local_window = sopts ? sopts->local_window : 8;
    lp_batch batch = lp_batch_single(f->ids, f->T);
    if (lp_forward(f->model, &batch, &opts, &err) != LP_OK)
        fail_msg("%s", err.msg);
    if (lp_store_end_run(store, 0.5, &err) != LP_OK)
        fail_msg("%s", err.msg);
    return run_id;
}

static int64_t query_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return v;
}

static void query_text(sqlite3 *db, const char *sql, char *buf, size_t size)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    const unsigned char *t = sqlite3_column_text(q, 0);
    snprintf(buf, size, "%s", t ? (const char *)t : "(null)");
    sqlite3_finalize(q);
}

/* Head statistics recomputed here from the reference probabilities, the README's definitions. */
static void expected_stats(const fixture *f, int64_t l, int64_t h, int64_t window, double *out)
{
    int64_t T = f->T, NH = f->cfg.n_heads;
    double ent = 0, mx = 0, sink = 0, prev = 0, self = 0, dist = 0, local = 0;
    for (int64_t q = 0; q < T; q++) {
        const float *row = f->ref.probs + ((l * NH + h) * T + q) * T;
        double rm = 0;
        for (int64_t k = 0; k <= q; k++) {
            double p = (double)row[k];
            if (p > 0)
                ent -= p * log(p);
            rm = fmax(rm, p);
            dist += p * (double)(q - k);
            if (q - k < window)
                local += p;
        }
        mx += rm;
        sink += (double)row[0];
        self += (double)row[q];
        if (q >= 1)
            prev += (double)row[q - 1];
    }
    double norm = 0;
    int64_t QD = NH * f->cfg.head_dim;
    for (int64_t q = 0; q < T; q++) {
        double ss = 0;
        for (int64_t d = 0; d < f->cfg.head_dim; d++) {
            double v = (double)f->ref.head_out[(l * T + q) * QD + h * f->cfg.head_dim + d];
            ss += v * v;
        }
        norm += sqrt(ss);
    }
    out[0] = ent / (double)T;
    out[1] = mx / (double)T;
    out[2] = sink / (double)T;
    out[3] = prev / (double)(T - 1);
    out[4] = self / (double)T;
    out[5] = dist / (double)T;
    out[6] = local / (double)T;
    out[7] = norm / (double)T;
}

static void test_complete_run_f32(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, REF_LLAMA, "f32");
    lp_store *store;
    lp_error err = {0};
    assert_int_equal(lp_store_open(f.db, &store, &err), LP_OK);
    lp_store_opts sopts;
    lp_store_opts_init(&sopts);
    sopts.maps = LP_MAPS_F32;
    sopts.logits = LP_LOGITS_FULL;
    sopts.top_k = 3;
    sopts.local_window = 3;
    int64_t run1 = trace_run(&f, store, &sopts);
    int64_t run2 = trace_run(&f, store, &sopts); /* runs are appended */
    assert_true(run2 > run1);
    sqlite3 *db = lp_store_db(store);
    char sql[256], text[256];
    snprintf(sql, sizeof sql, "SELECT status FROM runs WHERE id = %lld", (long long)run1);
    query_text(db, sql, text, sizeof text);
    assert_string_equal(text, "complete");
    query_text(db, "SELECT value FROM meta WHERE key = 'schema_version'", text, sizeof text);
    assert_string_equal(text, "1");
    query_text(db, "PRAGMA journal_mode", text, sizeof text);
    assert_string_equal(text, "wal");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM tokens WHERE run_id = %lld", (long long)run1);
    assert_int_equal(query_int(db, sql), f.T);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM attention WHERE run_id = %lld", (long long)run1);
    assert_int_equal(query_int(db, sql), f.cfg.n_layers * f.cfg.n_heads);

    /* Maps: exact f32 blobs equal to the reference probabilities. */
    sqlite3_stmt *q;
    snprintf(sql, sizeof sql, "SELECT layer, head, n_q, n_k, dtype, probs FROM attention WHERE run_id = %lld",
             (long long)run1);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    double worst = 0;
    int64_t T = f.T, NH = f.cfg.n_heads;
    while (sqlite3_step(q) == SQLITE_ROW) {
        int64_t l = sqlite3_column_int64(q, 0), h = sqlite3_column_int64(q, 1);
        assert_int_equal(sqlite3_column_int64(q, 2), T);
        assert_int_equal(sqlite3_column_int64(q, 3), T);
        assert_string_equal((const char *)sqlite3_column_text(q, 4), "f32");
        assert_int_equal(sqlite3_column_bytes(q, 5), T * T * 4);
        const uint8_t *blob = sqlite3_column_blob(q, 5);
        for (int64_t i = 0; i < T * T; i++)
            worst = fmax(worst, fabs((double)lp_load_f32(blob + 4 * i) -
                                     (double)f.ref.probs[(l * NH + h) * T * T + i]));
    }
    sqlite3_finalize(q);
    printf("  f32 maps vs reference: %.2e\n", worst);
    assert_true(worst <= 1e-5);

    /* Head statistics against definitions applied to the reference probabilities. */
    snprintf(sql, sizeof sql, "SELECT layer, head, entropy, max_prob, sink, prev_token, self, distance, "
             "local_frac, local_window, output_norm FROM head_stats WHERE run_id = %lld", (long long)run1);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    int64_t rows = 0;
    worst = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        double want[8];
        expected_stats(&f, sqlite3_column_int64(q, 0), sqlite3_column_int64(q, 1), 3, want);
        for (int i = 0; i < 7; i++)
            worst = fmax(worst, fabs(sqlite3_column_double(q, 2 + i) - want[i]));
        worst = fmax(worst, fabs(sqlite3_column_double(q, 10) - want[7]));
        assert_int_equal(sqlite3_column_int64(q, 9), 3);
        rows++;
    }
    sqlite3_finalize(q);
    printf("  head_stats vs definitions: %.2e over %lld heads\n", worst, (long long)rows);
    assert_int_equal(rows, f.cfg.n_layers * NH);
    assert_true(worst <= 1e-5);

    /* Predictions: top-1 is the reference argmax, probabilities sum below 1 and are ordered. */
    int64_t V = f.cfg.vocab;
    for (int64_t t = 0; t < T; t++) {
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            if (f.ref.logits[t * V + i] > f.ref.logits[t * V + best])
                best = i;
        snprintf(sql, sizeof sql, "SELECT token_id FROM predictions WHERE run_id = %lld AND pos = %lld "
                 "AND rank = 0", (long long)run1, (long long)t);
        assert_int_equal(query_int(db, sql), best);
    }
    snprintf(sql, sizeof sql, "SELECT count(*) FROM predictions WHERE run_id = %lld", (long long)run1);
    assert_int_equal(query_int(db, sql), T * 3);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM predictions a JOIN predictions b ON a.run_id = b.run_id "
             "AND a.pos = b.pos AND b.rank = a.rank + 1 WHERE a.run_id = %lld AND b.prob > a.prob",
             (long long)run1);
    assert_int_equal(query_int(db, sql), 0);

    /* Full logits: little-endian f32 rows equal to the reference. */
    snprintf(sql, sizeof sql, "SELECT pos, data FROM logits WHERE run_id = %lld ORDER BY pos", (long long)run1);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    worst = 0;
    rows = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        int64_t t = sqlite3_column_int64(q, 0);
        assert_int_equal(sqlite3_column_bytes(q, 1), V * 4);
        const uint8_t *blob = sqlite3_column_blob(q, 1);
        for (int64_t i = 0; i < V; i++)
            worst = fmax(worst, fabs((double)lp_load_f32(blob + 4 * i) - (double)f.ref.logits[t * V + i]));
        rows++;
    }
    sqlite3_finalize(q);
    assert_int_equal(rows, T);
    printf("  full logits vs reference: %.2e\n", worst);
    assert_true(worst <= 1e-4);
    lp_store_close(store);
    fixture_free(&f);
}

static void test_f16_maps_and_selection(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, REF_LLAMA, "f16");
    lp_store *store;
    lp_error err = {0};
    assert_int_equal(lp_store_open(f.db, &store, &err), LP_OK);
    bool layers[2] = {false, true}, heads[4] = {true, false, true, false};
    lp_store_opts sopts;
    lp_store_opts_init(&sopts);
    sopts.layers = layers;
    sopts.heads = heads;
    int64_t run = trace_run(&f, store, &sopts);
    sqlite3 *db = lp_store_db(store);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT layer, head, dtype, probs FROM attention WHERE run_id = %lld "
             "ORDER BY layer, head", (long long)run);
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    int64_t T = f.T, NH = f.cfg.n_heads, n = 0;
    double worst = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        int64_t l = sqlite3_column_int64(q, 0), h = sqlite3_column_int64(q, 1);
        assert_int_equal(l, 1);
        assert_true(h == 0 || h == 2);
        assert_string_equal((const char *)sqlite3_column_text(q, 2), "f16");
        assert_int_equal(sqlite3_column_bytes(q, 3), T * T * 2);
        const uint8_t *blob = sqlite3_column_blob(q, 3);
        for (int64_t i = 0; i < T * T; i++)
            worst = fmax(worst, fabs((double)lp_f16_to_f32(lp_load_u16(blob + 2 * i)) -
                                     (double)f.ref.probs[(l * NH + h) * T * T + i]));
        n++;
    }
    sqlite3_finalize(q);
    printf("  f16 maps vs reference: %.2e (f16 spacing near 1 is 4.9e-4)\n", worst);
    assert_int_equal(n, 2);
    assert_true(worst <= 5e-4);
    /* statistics are stored for every head regardless of the map selection */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM head_stats WHERE run_id = %lld", (long long)run);
    assert_int_equal(query_int(db, sql), 2 * NH);

    /* --maps none: no attention rows, stats still there */
    sopts.maps = LP_MAPS_NONE;
    run = trace_run(&f, store, &sopts);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM attention WHERE run_id = %lld", (long long)run);
    assert_int_equal(query_int(db, sql), 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM head_stats WHERE run_id = %lld", (long long)run);
    assert_int_equal(query_int(db, sql), 2 * NH);
    lp_store_close(store);
    fixture_free(&f);
}

static void test_killed_and_failed_runs(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, REF_LLAMA, "kill");
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The child begins a run, writes tokens and maps inside the run's transaction, and dies
         * without committing. */
        lp_store *store;
        lp_error err = {0};
        if (lp_store_open(f.db, &store, &err) != LP_OK)
            _exit(3);
        lp_run_info info;
        memset(&info, 0, sizeof info);
        info.model_path = f.dir;
        info.arch = lp_model_arch(f.model);
        info.tokens = f.ids;
        info.n_tokens = f.T;
        int64_t run_id;
        if (lp_store_begin_run(store, &info, NULL, &run_id, &err) != LP_OK)
            _exit(4);
        lp_forward_opts opts;
        lp_forward_opts_init(&opts);
        opts.observer = lp_store_observer(store);
        lp_batch batch = lp_batch_single(f.ids, f.T);
        if (lp_forward(f.model, &batch, &opts, &err) != LP_OK)
            _exit(5);
        _exit(0); /* killed: no end_run, no close */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    lp_store *store;
    lp_error err = {0};
    assert_int_equal(lp_store_open(f.db, &store, &err), LP_OK);
    sqlite3 *db = lp_store_db(store);
    char text[64];
    query_text(db, "SELECT status FROM runs WHERE id = 1", text, sizeof text);
    assert_string_equal(text, "running");
    assert_int_equal(query_int(db, "SELECT count(*) FROM tokens WHERE run_id = 1"), 0);
    assert_int_equal(query_int(db, "SELECT count(*) FROM attention WHERE run_id = 1"), 0);
    assert_int_equal(query_int(db, "SELECT count(*) FROM runs WHERE status = 'complete'"), 0);

    /* An aborted run leaves no data and says 'failed'. */
    lp_run_info info;
    memset(&info, 0, sizeof info);
    info.arch = lp_model_arch(f.model);
    info.tokens = f.ids;
    info.n_tokens = f.T;
    int64_t run_id;
    assert_int_equal(lp_store_begin_run(store, &info, NULL, &run_id, &err), LP_OK);
    lp_store_abort_run(store);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT status FROM runs WHERE id = %lld", (long long)run_id);
    query_text(db, sql, text, sizeof text);
    assert_string_equal(text, "failed");
    snprintf(sql, sizeof sql, "SELECT count(*) FROM tokens WHERE run_id = %lld", (long long)run_id);
    assert_int_equal(query_int(db, sql), 0);
    /* A second begin without an end is refused. */
    assert_int_equal(lp_store_begin_run(store, &info, NULL, &run_id, &err), LP_OK);
    assert_int_equal(lp_store_begin_run(store, &info, NULL, &run_id, &err), LP_ERR_USAGE);
    lp_store_close(store); /* rolls the open run back */
    fixture_free(&f);
}

static void test_newer_schema_refused(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/store_newer_%ld.db", lp_test_tmp_dir(), (long)getpid());
    remove(path);
    lp_store *store;
    lp_error err = {0};
    assert_int_equal(lp_store_open(path, &store, &err), LP_OK);
    assert_int_equal(sqlite3_exec(lp_store_db(store),
                                  "UPDATE meta SET value = '99' WHERE key = 'schema_version'", NULL,
                                  NULL, NULL), SQLITE_OK);
    lp_store_close(store);
    assert_int_equal(lp_store_open(path, &store, &err), LP_ERR_UNSUPPORTED);
    printf("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, "99"));
    assert_null(strchr(err.msg, '\n'));

    /* A version-1 database from before tokens.label: the column is added, runs still work. */
    remove(path);
    sqlite3 *old_db;
    assert_int_equal(sqlite3_open(path, &old_db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(old_db,
                                  "CREATE TABLE tokens (run_id INTEGER NOT NULL, pos INTEGER NOT "
                                  "NULL, token_id INTEGER NOT NULL, piece TEXT NOT NULL, PRIMARY "
                                  "KEY (run_id, pos))", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(old_db);
    assert_int_equal(lp_store_open(path, &store, &err), LP_OK);
    assert_int_equal(query_int(lp_store_db(store), "SELECT count(*) FROM pragma_table_info('tokens') "
                                                   "WHERE name = 'label'"), 1);
    lp_store_close(store);

    /* Not a database at all. */
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    for (int i = 0; i < 4096; i++)
        fputc("garbage!"[i % 8], fp);
    fclose(fp);
    char wal[600];
    snprintf(wal, sizeof wal, "%s-wal", path);
    remove(wal);
    snprintf(wal, sizeof wal, "%s-shm", path);
    remove(wal);
    assert_int_equal(lp_store_open(path, &store, &err), LP_ERR_SQLITE);
    printf("  %s\n", err.msg);
    remove(path);
}

static void test_moe_routing(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f, REF_MIXTRAL, "moe");
    lp_store *store;
    lp_error err = {0};
    assert_int_equal(lp_store_open(f.db, &store, &err), LP_OK);
    int64_t run = trace_run(&f, store, NULL);
    sqlite3 *db = lp_store_db(store);
    int64_t L = f.cfg.n_layers, E = f.cfg.n_experts, K = f.cfg.top_k, T = f.T;
    for (int64_t l = 0; l < L; l++) {
        for (int64_t e = 0; e < E; e++) {
            int64_t want = 0;
            for (int64_t i = 0; i < T * K; i++)
                want += f.ref.experts[l * T * K + i] == e;
            char sql[200];
            snprintf(sql, sizeof sql, "SELECT tokens FROM expert_routing WHERE run_id = %lld AND "
                     "layer = %lld AND expert = %lld", (long long)run, (long long)l, (long long)e);
            assert_int_equal(query_int(db, sql), want);
        }
    }
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM router_stats WHERE run_id = %lld AND "
             "mean_entropy > 0 AND mean_entropy <= %f", (long long)run, log((double)E) + 1e-9);
    assert_int_equal(query_int(db, sql), L);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM expert_routing WHERE run_id = %lld AND tokens > 0 "
             "AND (mean_weight <= 0 OR mean_weight > 1)", (long long)run);
    assert_int_equal(query_int(db, sql), 0);
    lp_store_close(store);
    fixture_free(&f);
}

static void test_index_list_and_top_k(void **state)
{
    (void)state;
    bool mask[8];
    lp_error err = {0};
    assert_int_equal(lp_parse_index_list("0,2-4,7", 8, mask, &err), LP_OK);
    bool want[8] = {true, false, true, true, true, false, false, true};
    assert_memory_equal(mask, want, sizeof want);
    assert_int_equal(lp_parse_index_list("all", 8, mask, &err), LP_OK);
    for (int i = 0; i < 8; i++)
        assert_true(mask[i]);
    assert_int_equal(lp_parse_index_list("8", 8, mask, &err), LP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "limit 8"));
    assert_int_equal(lp_parse_index_list("3-1", 8, mask, &err), LP_ERR_USAGE);
    assert_int_equal(lp_parse_index_list("1,,2", 8, mask, &err), LP_ERR_USAGE);
    assert_int_equal(lp_parse_index_list("x", 8, mask, &err), LP_ERR_USAGE);

    float logits[6] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, NAN};
    lp_prediction top[4];
    assert_int_equal(lp_top_k(logits, 5, 4, top), 4);
    assert_int_equal(top[0].token_id, 1); /* tie: lower id first */
    assert_int_equal(top[1].token_id, 3);
    assert_int_equal(top[2].token_id, 0);
    assert_int_equal(top[3].token_id, 4);
    double z = 2 * exp(3.0) + exp(1.0) + exp(-2.0) + exp(0.5);
    assert_true(fabs((double)top[0].prob - exp(3.0) / z) < 1e-6);
    assert_int_equal(lp_top_k(logits, 3, 10, top), 3); /* k clipped to vocab */
}

/* `loupe trace --prompt` on a model folder with a real tokenizer.json beside it: the stored ids
 * and pieces are Hugging Face's (../shared/tokenizers/tinyllama/reference.json). */
static void test_cli_tokenizer_beside_model(void **state)
{
    (void)state;
    const char *loupe = getenv("LOUPE_BIN");
    if (!lp_test_shared_dir() || !loupe) {
        printf("  SKIP: needs ../shared and LOUPE_BIN\n");
        skip();
    }
    char ref_path[512], tok_path[512];
    lp_test_shared_path(ref_path, sizeof ref_path, "tokenizers/tinyllama/reference.json");
    lp_test_shared_path(tok_path, sizeof tok_path, "tokenizers/tinyllama/tokenizer.json");
    json_error_t jerr;
    json_t *ref = json_load_file(ref_path, 0, &jerr);
    assert_non_null(ref);
    json_t *c0 = json_array_get(json_object_get(ref, "cases"), 0);
    const char *text = json_string_value(json_object_get(c0, "text"));
    json_t *want_ids = json_object_get(json_object_get(c0, "with_special_tokens"), "ids");
    json_t *want_tokens = json_object_get(json_object_get(c0, "with_special_tokens"), "tokens");
    assert_non_null(text);
    assert_true(json_array_size(want_ids) > 3);

    ref_config cfg = {.family = REF_LLAMA, .vocab = 32000, .hidden = 16, .n_layers = 1,
                      .n_heads = 2, .n_kv_heads = 1, .head_dim = 8, .ffn = 16, .eps = 1e-5,
                      .theta = 10000, .scale = 0.2};
    ref_model m;
    assert_true(ref_model_random(&cfg, 3, &m));
    char dir[512], cmd[2048], db[600];
    snprintf(dir, sizeof dir, "%s/store_tok_%ld", lp_test_tmp_dir(), (long)getpid());
    assert_true(ref_model_write_hf(&m, dir));
    ref_model_free(&m);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/tokenizer.json'", tok_path, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(db, sizeof db, "%s/trace.db", dir);
    snprintf(cmd, sizeof cmd, "'%s' trace '%s' --prompt '%s' --db '%s' --threads 1 >/dev/null", loupe,
             dir, text, db);
    assert_int_equal(system(cmd), 0);

    sqlite3 *conn;
    assert_int_equal(sqlite3_open(db, &conn), SQLITE_OK);
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(conn, "SELECT pos, token_id, piece FROM tokens WHERE "
                                              "run_id = 1 ORDER BY pos", -1, &q, NULL), SQLITE_OK);
    size_t n = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        assert_true(n < json_array_size(want_ids));
        assert_int_equal(sqlite3_column_int64(q, 1),
                         json_integer_value(json_array_get(want_ids, n)));
        assert_string_equal((const char *)sqlite3_column_text(q, 2),
                            json_string_value(json_array_get(want_tokens, n)));
        n++;
    }
    sqlite3_finalize(q);
    assert_int_equal(n, json_array_size(want_ids));
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE status = 'complete'");
    assert_int_equal(query_int(conn, sql), 1);
    sqlite3_close(conn);
    printf("  %zu tokens of \"%.30s...\" stored as Hugging Face's ids and pieces\n", n, text);
    json_decref(ref);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_list_and_top_k),
        cmocka_unit_test(test_complete_run_f32),
        cmocka_unit_test(test_f16_maps_and_selection),
        cmocka_unit_test(test_killed_and_failed_runs),
        cmocka_unit_test(test_newer_schema_refused),
        cmocka_unit_test(test_moe_routing),
        cmocka_unit_test(test_cli_tokenizer_beside_model),
    };
    return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
