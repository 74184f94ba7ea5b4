/* Tests of the SQLite trace store: what a run writes (maps, head statistics, predictions, logits,
 * MoE routing) against tests/support/ref_forward.c, read back through the store's typed reads;
 * selections and f16 maps; killed and failed runs; leak-check rows; refusing a database from a
 * newer loupe and migrating an older one. Rows the store never writes are planted, and rows it
 * wrote looked at, with plain SQL through lp_store_sql (tests/support/store_test_util.h). */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <jansson.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/dtype.h"
#include "ref_forward.h"
#include "store_test_util.h"
#include "trace/store/store.h"
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

/* The fixture and a store writing into its database. */
static lp_store *fixture_open(fixture *f, ref_family family, const char *tag)
{
    fixture_init(f, family, tag);
    lp_store *store;
    lp_error err = {0};
    if (lp_store_open(f->db, &store, &err) != LP_OK)
        fail_msg("%s", err.msg);
    return store;
}

/* One complete traced run of ids[n]; returns its id. */
static int64_t trace_tokens(fixture *f, lp_store *store, const lp_store_opts *sopts,
                            const int32_t *ids, int64_t n)
{
    lp_error err = {0};
    lp_run_info info;
    memset(&info, 0, sizeof info);
    info.model_path = f->dir;
    info.model_format = "safetensors";
    info.arch = lp_model_arch(f->model);
    info.prompt = "a test prompt";
    info.tokens = ids;
    info.n_tokens = n;
    info.n_threads = 1;
    int64_t run_id;
    if (lp_store_begin_run(store, &info, sopts, &run_id, &err) != LP_OK)
        fail_msg("%s", err.msg);
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.observer = lp_store_observer(store);
    opts.local_window = sopts ? sopts->local_window : 8;
    lp_batch batch = lp_batch_single(ids, n);
    if (lp_forward(f->model, &batch, &opts, &err) != LP_OK)
        fail_msg("%s", err.msg);
    if (lp_store_end_run(store, 0.5, &err) != LP_OK)
        fail_msg("%s", err.msg);
    return run_id;
}

/* One complete traced run of the fixture's tokens; returns its id. */
static int64_t trace_run(fixture *f, lp_store *store, const lp_store_opts *sopts)
{
    return trace_tokens(f, store, sopts, f->ids, f->T);
}

/* Head statistics recomputed here from the reference probabilities, the README's definitions, in
 * the order of lp_head_stat. */
static int double_larger_first(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a < b) - (a > b);
}

/* Sparsity of one reference row of n keys, from the definition: the fewest keys whose
 * probabilities, largest first, reach 50% / 90% / 99% of the row's mass; the mass below 1e-3. */
static void row_sparsity_definition(const float *row, int64_t n, double *acc)
{
    double sorted[512], total = 0;
    assert_true(n <= 512);
    for (int64_t k = 0; k < n; k++) {
        sorted[k] = (double)row[k];
        total += sorted[k];
        if (row[k] < 1e-3f)
            acc[3] += sorted[k];
    }
    qsort(sorted, (size_t)n, sizeof *sorted, double_larger_first);
    const double fraction[3] = {0.5, 0.9, 0.99};
    for (int f = 0; f < 3; f++) {
        double sum = 0;
        int64_t k = 0;
        while (k < n && sum < fraction[f] * total)
            sum += sorted[k++];
        acc[f] += (double)k;
    }
}

static void expected_stats(const fixture *f, int64_t l, int64_t h, int64_t window, double *out)
{
    double sparsity[4] = {0, 0, 0, 0};
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
        row_sparsity_definition(row, q + 1, sparsity);
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
    double values[LP_STAT_COUNT] = {ent / (double)T,      mx / (double)T,   sink / (double)T,
                                    prev / (double)(T - 1), self / (double)T, dist / (double)T,
                                    local / (double)T,    norm / (double)T,
                                    sparsity[0] / (double)T, sparsity[1] / (double)T,
                                    sparsity[2] / (double)T, sparsity[3] / (double)T};
    memcpy(out, values, sizeof values);
}

/* ---- what a run writes, case by case ---------------------------------------------------------- */

typedef struct store_case {
    const char *name;
    ref_family family;
    lp_maps_dtype maps;
    lp_logits_mode logits;
    int64_t top_k, local_window;
    const char *layers, *heads; /* map selection, lp_parse_index_list syntax */
    double map_tolerance;       /* max |stored - reference| probability (f16 spacing near 1 is
                                   4.9e-4) */
} store_case;

static const store_case store_cases[] = {
    {"llama: f32 maps, full logits, top-3, window 3", REF_LLAMA, LP_MAPS_F32, LP_LOGITS_FULL, 3, 3,
     "all", "all", 1e-5},
    {"llama: f16 maps of layer 1, heads 0 and 2", REF_LLAMA, LP_MAPS_F16, LP_LOGITS_TOPK, 5, 8,
     "1", "0,2", 5e-4},
    {"llama: no maps, statistics only", REF_LLAMA, LP_MAPS_NONE, LP_LOGITS_TOPK, 5, 8, "all", "all",
     0},
    {"mixtral: f16 maps and expert routing", REF_MIXTRAL, LP_MAPS_F16, LP_LOGITS_TOPK, 2, 8, "all",
     "all", 5e-4},
};

/* Every stored map equals the reference; the maps not selected are not there. */
static void check_maps(const fixture *f, lp_store *rd, const lp_store_run *run,
                       const store_case *c, const bool *layers, const bool *heads)
{
    int64_t T = f->T, NH = f->cfg.n_heads, n_stored = 0;
    double worst = 0;
    float *row = malloc((size_t)T * sizeof *row);
    assert_non_null(row);
    for (int64_t l = 0; l < f->cfg.n_layers; l++) {
        for (int64_t h = 0; h < NH; h++) {
            lp_store_map *map;
            lp_error err = {0};
            lp_status st = lp_store_map_open(rd, run, l, h, &map, &err);
            if (c->maps == LP_MAPS_NONE || !layers[l] || !heads[h]) {
                assert_int_equal(st, LP_ERR_NOT_FOUND);
                continue;
            }
            if (st != LP_OK)
                fail_msg("%s: layer %lld head %lld: %s", c->name, (long long)l, (long long)h,
                         err.msg);
            int64_t n_q, n_k;
            lp_store_map_shape(map, &n_q, &n_k);
            assert_int_equal(n_q, T);
            assert_int_equal(n_k, T);
            for (int64_t q = 0; q < T; q++) {
                assert_int_equal(lp_store_map_read(map, q, 0, T, row, &err), LP_OK);
                for (int64_t k = 0; k < T; k++)
                    worst = fmax(worst, fabs((double)row[k] -
                                             (double)f->ref.probs[((l * NH + h) * T + q) * T + k]));
            }
            lp_store_map_close(map);
            n_stored++;
        }
    }
    free(row);
    const char *dtype = c->maps == LP_MAPS_F32 ? "f32" : "f16";
    assert_int_equal(lp_test_sql_int(f->db, "SELECT count(*) FROM attention WHERE run_id = %lld "
                                            "AND dtype = '%s'",
                                     (long long)run->id, dtype),
                     n_stored);
    printf("  %s: %lld maps vs reference %.2e (budget %.0e)\n", c->name, (long long)n_stored,
           worst, c->map_tolerance);
    assert_true(worst <= c->map_tolerance);
}

/* Statistics of every head, whatever the map selection. */
static void check_head_stats(const fixture *f, lp_store *rd, const lp_store_run *run,
                             const store_case *c)
{
    int64_t NH = f->cfg.n_heads, LH = f->cfg.n_layers * NH;
    double worst = 0;
    for (int s = 0; s < LP_STAT_COUNT; s++) {
        double *values;
        lp_error err = {0};
        lp_status st = lp_store_read_head_stat(rd, run, (lp_head_stat)s, &values, &err);
        if (s == LP_STAT_LEARNED_SINK) {
            /* a model without sinks stores NULL: there is nothing to read */
            assert_int_equal(st, LP_ERR_NOT_FOUND);
            assert_non_null(strstr(err.msg, "learned sink"));
            continue;
        }
        if (st != LP_OK)
            fail_msg("%s: %s", c->name, err.msg);
        for (int64_t i = 0; i < LH; i++) {
            double want[LP_STAT_COUNT];
            expected_stats(f, i / NH, i % NH, c->local_window, want);
            worst = fmax(worst, fabs(values[i] - want[s]));
        }
        free(values);
    }
    printf("  %s: head_stats vs definitions %.2e over %lld heads\n", c->name, worst,
           (long long)LH);
    assert_true(worst <= 1e-5);
    assert_int_equal(lp_test_sql_int(f->db, "SELECT count(*) FROM head_stats WHERE run_id = %lld "
                                            "AND local_window = %lld",
                                     (long long)run->id, (long long)c->local_window),
                     LH);
}

/* Top-1 is the reference argmax, probabilities are ordered by rank. */
static void check_predictions(const fixture *f, int64_t run_id, const store_case *c)
{
    int64_t V = f->cfg.vocab, T = f->T;
    for (int64_t t = 0; t < T; t++) {
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            if (f->ref.logits[t * V + i] > f->ref.logits[t * V + best])
                best = i;
        assert_int_equal(lp_test_sql_int(f->db, "SELECT token_id FROM predictions WHERE run_id = "
                                                "%lld AND pos = %lld AND rank = 0",
                                         (long long)run_id, (long long)t),
                         best);
    }
    assert_int_equal(lp_test_sql_int(f->db, "SELECT count(*) FROM predictions WHERE run_id = %lld",
                                     (long long)run_id),
                     T * c->top_k);
    assert_int_equal(lp_test_sql_int(f->db, "SELECT count(*) FROM predictions a JOIN predictions b "
                                            "ON a.run_id = b.run_id AND a.pos = b.pos AND b.rank = "
                                            "a.rank + 1 WHERE a.run_id = %lld AND b.prob > a.prob",
                                     (long long)run_id),
                     0);
}

typedef struct logits_check {
    const fixture *f;
    int64_t rows;
    double worst;
} logits_check;

static lp_status logits_row(void *ctx, const lp_sql_value *cols, int n_cols, lp_error *err)
{
    (void)err;
    logits_check *lc = ctx;
    int64_t V = lc->f->cfg.vocab, t = cols[0].i;
    assert_int_equal(n_cols, 2);
    assert_int_equal(cols[1].type, LP_SQL_BLOB);
    assert_int_equal(cols[1].bytes, V * 4);
    for (int64_t i = 0; i < V; i++)
        lc->worst = fmax(lc->worst, fabs((double)lp_load_f32((const uint8_t *)cols[1].data + 4 * i) -
                                         (double)lc->f->ref.logits[t * V + i]));
    lc->rows++;
    return LP_OK;
}

/* Full logits: little-endian f32 rows equal to the reference; none unless asked for. */
static void check_logits(const fixture *f, int64_t run_id, const store_case *c)
{
    logits_check lc = {f, 0, 0};
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT pos, data FROM logits WHERE run_id = %lld ORDER BY pos",
             (long long)run_id);
    lp_error err = {0};
    assert_int_equal(lp_store_sql(f->db, sql, logits_row, &lc, &err), LP_OK);
    assert_int_equal(lc.rows, c->logits == LP_LOGITS_FULL ? f->T : 0);
    if (lc.rows > 0)
        printf("  %s: full logits vs reference %.2e\n", c->name, lc.worst);
    assert_true(lc.worst <= 1e-4);
}

/* MoE: tokens per expert equal the reference's routing; router entropy within [0, ln E]. */
static void check_routing(const fixture *f, int64_t run_id)
{
    int64_t L = f->cfg.n_layers, E = f->cfg.n_experts, K = f->cfg.top_k, T = f->T;
    for (int64_t l = 0; l < L; l++) {
        for (int64_t e = 0; e < E; e++) {
            int64_t want = 0;
            for (int64_t i = 0; i < T * K; i++)
                want += f->ref.experts[l * T * K + i] == e;
            assert_int_equal(lp_test_sql_int(f->db, "SELECT tokens FROM expert_routing WHERE "
                                                    "run_id = %lld AND layer = %lld AND expert = "
                                                    "%lld",
                                             (long long)run_id, (long long)l, (long long)e),
                             want);
        }
    }
    assert_int_equal(lp_test_sql_int(f->db, "SELECT count(*) FROM router_stats WHERE run_id = %lld "
                                            "AND mean_entropy > 0 AND mean_entropy <= %.17g",
                                     (long long)run_id, log((double)E) + 1e-9),
                     L);
    assert_int_equal(lp_test_sql_int(f->db, "SELECT count(*) FROM expert_routing WHERE run_id = "
                                            "%lld AND tokens > 0 AND (mean_weight <= 0 OR "
                                            "mean_weight > 1)",
                                     (long long)run_id),
                     0);
}

static void run_store_case(const store_case *c)
{
    fixture f;
    lp_store *store = fixture_open(&f, c->family, c->family == REF_MIXTRAL ? "moe" : "llama");
    bool layers[8], heads[8];
    lp_error err = {0};
    assert_int_equal(lp_parse_index_list(c->layers, f.cfg.n_layers, layers, &err), LP_OK);
    assert_int_equal(lp_parse_index_list(c->heads, f.cfg.n_heads, heads, &err), LP_OK);
    lp_store_opts sopts;
    lp_store_opts_init(&sopts);
    sopts.maps = c->maps;
    sopts.logits = c->logits;
    sopts.top_k = c->top_k;
    sopts.local_window = c->local_window;
    sopts.layers = layers;
    sopts.heads = heads;
    int64_t run_id = trace_run(&f, store, &sopts);

    lp_store *rd;
    lp_store_run run;
    bool incomplete;
    assert_int_equal(lp_store_open_read(f.db, &rd, &err), LP_OK);
    assert_int_equal(lp_store_read_run(rd, 0, "trace", &run, &incomplete, &err), LP_OK);
    assert_int_equal(run.id, run_id);
    assert_false(incomplete);
    assert_string_equal(run.status, "complete");
    assert_int_equal(run.n_tokens, f.T);
    assert_int_equal(run.n_layers, f.cfg.n_layers);
    assert_string_equal(run.maps_dtype, c->maps == LP_MAPS_F32   ? "f32"
                                        : c->maps == LP_MAPS_F16 ? "f16"
                                                                 : "none");
    assert_string_equal(run.prompt, "a test prompt");
    char **texts;
    int64_t n_texts;
    assert_int_equal(lp_store_read_tokens(rd, run_id, &texts, &n_texts, &err), LP_OK);
    assert_int_equal(n_texts, f.T);
    assert_string_equal(texts[0], "<3>"); /* no tokenizer: the id is the piece */
    lp_store_free_texts(texts, n_texts);
    check_maps(&f, rd, &run, c, layers, heads);
    check_head_stats(&f, rd, &run, c);
    lp_store_run_clear(&run);
    lp_store_close(rd);
    check_predictions(&f, run_id, c);
    check_logits(&f, run_id, c);
    if (f.cfg.n_experts > 0)
        check_routing(&f, run_id);
    lp_store_close(store);
    fixture_free(&f);
}

static void test_store_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof store_cases / sizeof store_cases[0]; i++)
        run_store_case(&store_cases[i]);
}

/* Runs are appended to one database in WAL mode with its schema version. */
static void test_schema_and_appended_runs(void **state)
{
    (void)state;
    fixture f;
    lp_store *store = fixture_open(&f, REF_LLAMA, "append");
    int64_t run1 = trace_run(&f, store, NULL);
    int64_t run2 = trace_run(&f, store, NULL);
    assert_true(run2 > run1);
    char text[64];
    assert_string_equal(lp_test_sql_text(f.db, text, sizeof text, "SELECT value FROM meta WHERE "
                                                                  "key = 'schema_version'"),
                        "2");
    assert_string_equal(lp_test_sql_text(f.db, text, sizeof text, "PRAGMA journal_mode"), "wal");
    assert_int_equal(lp_test_sql_int(f.db, "SELECT count(*) FROM runs WHERE status = 'complete'"),
                     2);
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
    char text[64];
    assert_string_equal(lp_test_sql_text(f.db, text, sizeof text,
                                         "SELECT status FROM runs WHERE id = 1"),
                        "running");
    assert_int_equal(lp_test_sql_int(f.db, "SELECT count(*) FROM tokens WHERE run_id = 1"), 0);
    assert_int_equal(lp_test_sql_int(f.db, "SELECT count(*) FROM attention WHERE run_id = 1"), 0);
    assert_int_equal(lp_test_sql_int(f.db, "SELECT count(*) FROM runs WHERE status = 'complete'"),
                     0);

    /* An aborted run leaves no data and says 'failed'. */
    lp_run_info info;
    memset(&info, 0, sizeof info);
    info.arch = lp_model_arch(f.model);
    info.tokens = f.ids;
    info.n_tokens = f.T;
    int64_t run_id;
    assert_int_equal(lp_store_begin_run(store, &info, NULL, &run_id, &err), LP_OK);
    lp_store_abort_run(store);
    assert_string_equal(lp_test_sql_text(f.db, text, sizeof text,
                                         "SELECT status FROM runs WHERE id = %lld",
                                         (long long)run_id),
                        "failed");
    assert_int_equal(lp_test_sql_int(f.db, "SELECT count(*) FROM tokens WHERE run_id = %lld",
                                     (long long)run_id),
                     0);
    /* A second begin without an end is refused. */
    assert_int_equal(lp_store_begin_run(store, &info, NULL, &run_id, &err), LP_OK);
    assert_int_equal(lp_store_begin_run(store, &info, NULL, &run_id, &err), LP_ERR_USAGE);
    lp_store_close(store); /* rolls the open run back */
    fixture_free(&f);
}

/* ---- a stacked batch: every sequence its own run ------------------------------------------------ */

enum { BATCH_N = 3 };

/* The batch's sequences: the fixture's tokens, the first 10 right-padded, the last 11
 * left-padded; infos[b] describes sequence b and tokens holds the padded batch. */
static void batch_infos(fixture *f, lp_run_info *infos, int32_t *tokens, int64_t *pl, int64_t *pr)
{
    const int64_t T = f->T, lens[BATCH_N] = {T, 10, 11};
    for (int64_t b = 0; b < BATCH_N; b++) {
        pl[b] = b == 2 ? T - lens[b] : 0;
        pr[b] = T - lens[b] - pl[b];
        const int32_t *real = f->ids + (b == 2 ? T - lens[b] : 0);
        for (int64_t t = 0; t < T; t++)
            tokens[b * T + t] = t >= pl[b] && t < pl[b] + lens[b] ? real[t - pl[b]] : 0;
        infos[b] = lp_run_info_for_model("trace", f->dir, f->model, NULL, tokens + b * T + pl[b],
                                         lens[b], NULL, 1);
        infos[b].in_batch = true;
        infos[b].batch_index = b;
        infos[b].pad_left = pl[b];
        infos[b].pad_right = pr[b];
    }
}

/* The pass delivers the sequences' sites interleaved (layer by layer); each run must still get
 * exactly its own: tokens, maps, routing and predictions as the sequence traced alone, within
 * the batch observer's recomputed statistics (double, from the cropped maps). A batch dropped
 * before it finishes leaves every run 'failed' and no data. */
static void test_batch_runs(void **state)
{
    (void)state;
    fixture f;
    lp_store *store = fixture_open(&f, REF_MIXTRAL, "batch");
    lp_run_info infos[BATCH_N];
    int32_t tokens[BATCH_N * 32];
    int64_t pl[BATCH_N], pr[BATCH_N], alone[BATCH_N], runs[BATCH_N];
    batch_infos(&f, infos, tokens, pl, pr);
    lp_error err = {0};
    for (int64_t b = 0; b < BATCH_N; b++)
        alone[b] = trace_tokens(&f, store, NULL, infos[b].tokens, infos[b].n_tokens);
    for (int finish = 1; finish >= 0; finish--) {
        lp_store_batch *rec;
        assert_int_equal(lp_store_batch_create(store, NULL, infos, BATCH_N, f.T, &rec, &err),
                         LP_OK);
        lp_forward_opts opts;
        lp_forward_opts_init(&opts);
        opts.observer = lp_store_batch_observer(rec);
        lp_batch batch = {BATCH_N, f.T, tokens, pl, pr};
        if (lp_forward(f.model, &batch, &opts, &err) != LP_OK)
            fail_msg("%s", err.msg);
        if (finish && lp_store_batch_finish(rec, 0.25, runs, &err) != LP_OK)
            fail_msg("%s", err.msg);
        lp_store_batch_destroy(rec);
    }
    const char *db = f.db;
    int64_t LH = f.cfg.n_layers * f.cfg.n_heads, LE = f.cfg.n_layers * f.cfg.n_experts;
    for (int64_t b = 0; b < BATCH_N; b++) {
        long long r = (long long)runs[b], a = (long long)alone[b];
        char text[64];
        assert_string_equal(lp_test_sql_text(db, text, sizeof text,
                                             "SELECT status FROM runs WHERE id = %lld", r),
                            "complete");
        assert_int_equal(lp_test_sql_int(db, "SELECT batch_index FROM runs WHERE id = %lld", r), b);
        assert_int_equal(lp_test_sql_int(db, "SELECT count(*) FROM tokens t JOIN tokens u ON "
                                             "u.pos = t.pos AND u.token_id = t.token_id AND "
                                             "u.run_id = %lld WHERE t.run_id = %lld", a, r),
                         infos[b].n_tokens);
        assert_int_equal(lp_test_sql_int(db, "SELECT count(*) FROM attention WHERE run_id = %lld "
                                             "AND n_q = %lld", r, (long long)infos[b].n_tokens),
                         LH);
        assert_int_equal(lp_test_sql_int(db, "SELECT count(*) FROM expert_routing x JOIN expert_routing y ON "
                                             "y.layer = x.layer AND y.expert = x.expert AND "
                                             "y.tokens = x.tokens AND y.run_id = %lld WHERE "
                                             "x.run_id = %lld", a, r),
                         LE);
        assert_int_equal(lp_test_sql_int(db, "SELECT count(*) FROM head_stats x JOIN head_stats y "
                                             "ON y.layer = x.layer AND y.head = x.head AND "
                                             "abs(y.entropy - x.entropy) < 1e-5 AND "
                                             "abs(y.output_norm - x.output_norm) < 1e-5 AND "
                                             "y.run_id = %lld WHERE x.run_id = %lld", a, r),
                         LH);
        assert_int_equal(lp_test_sql_int(db, "SELECT count(*) FROM predictions x JOIN predictions "
                                             "y ON y.pos = x.pos AND y.rank = x.rank AND "
                                             "y.token_id = x.token_id AND y.run_id = %lld WHERE "
                                             "x.run_id = %lld", a, r),
                         lp_test_sql_int(db, "SELECT count(*) FROM predictions WHERE run_id = %lld",
                                         a));
    }
    /* the dropped batch: the three runs after the finished ones */
    assert_int_equal(lp_test_sql_int(db, "SELECT count(*) FROM runs WHERE id > %lld AND status "
                                         "= 'failed'", (long long)runs[BATCH_N - 1]),
                     BATCH_N);
    assert_int_equal(lp_test_sql_int(db, "SELECT count(*) FROM tokens WHERE run_id > %lld",
                                     (long long)runs[BATCH_N - 1]),
                     0);
    lp_store_close(store);
    fixture_free(&f);
}

/* ---- leak checks: rows in, rows out ----------------------------------------------------------- */

typedef struct leak_row_case {
    lp_leak_check in;
    const char *stored; /* layer|position|max_abs_diff as SQLite prints them (NULL = empty) */
} leak_row_case;

static const leak_row_case leak_rows[] = {
    {{"perturbation", true, 0, 3, 0.0, "ok"}, "0|3|0.0"},
    {{"perturbation", false, 1, 3, 0.125, "leak"}, "1|3|0.125"},
    {{"perturbation", false, -1, 5, 0.5, "logits"}, "-1|5|0.5"}, /* -1: the logits */
    {{"attention_map", true, 1, -1, (double)NAN, "clean"}, "1||"},
    {{"structural", false, -1, 7, (double)NAN, "spec"}, "|7|"}, /* -1: not per layer */
    {{"alignment", true, -1, -1, (double)NAN, "loss"}, "||"},
};

static void test_leak_check_rows(void **state)
{
    (void)state;
    fixture f;
    lp_store *store = fixture_open(&f, REF_LLAMA, "leakrows");
    lp_error err = {0};
    size_t n = sizeof leak_rows / sizeof leak_rows[0];
    lp_leak_check checks[sizeof leak_rows / sizeof leak_rows[0]];
    for (size_t i = 0; i < n; i++)
        checks[i] = leak_rows[i].in;
    assert_int_equal(lp_store_add_leak_checks(store, checks, (int64_t)n, &err), LP_ERR_USAGE);
    lp_run_info info;
    memset(&info, 0, sizeof info);
    info.kind = "leak";
    info.arch = lp_model_arch(f.model);
    info.tokens = f.ids;
    info.n_tokens = f.T;
    int64_t run_id, mask_run;
    assert_int_equal(lp_store_begin_run(store, &info, NULL, &run_id, &err), LP_OK);
    assert_int_equal(lp_store_add_leak_checks(store, checks, (int64_t)n, &err), LP_OK);
    assert_int_equal(lp_store_end_run(store, 0.1, &err), LP_OK);
    lp_leak_check mask = {"mask", false, -1, 2, (double)NAN, "obo.npy as causal"};
    assert_int_equal(lp_store_add_mask_run(store, "/tmp/obo.npy", 8, 2, &mask, &mask_run, &err),
                     LP_OK);
    assert_true(mask_run > run_id);
    lp_store_close(store);

    for (size_t i = 0; i < n; i++) {
        char got[128];
        lp_test_sql_text(f.db, got, sizeof got,
                         "SELECT coalesce(layer, '') || '|' || coalesce(position, '') || '|' || "
                         "coalesce(max_abs_diff, '') FROM leak_checks WHERE run_id = %lld AND "
                         "detail = '%s'",
                         (long long)run_id, leak_rows[i].in.detail);
        if (strcmp(got, leak_rows[i].stored) != 0)
            fail_msg("row %zu (%s): stored '%s', want '%s'", i, leak_rows[i].in.name, got,
                     leak_rows[i].stored);
    }
    char text[256];
    assert_string_equal(lp_test_sql_text(f.db, text, sizeof text,
                                         "SELECT status || ' ' || kind || ' ' || model_format || "
                                         "' ' || architecture || ' ' || n_tokens || ' ' || "
                                         "n_layers || ' ' || n_heads FROM runs WHERE id = %lld",
                                         (long long)mask_run),
                        "complete leak npy mask 8 0 2");
    assert_string_equal(lp_test_sql_text(f.db, text, sizeof text,
                                         "SELECT check_name || ' ' || passed || ' ' || "
                                         "coalesce(layer, 'null') || ' ' || position FROM "
                                         "leak_checks WHERE run_id = %lld",
                                         (long long)mask_run),
                        "mask 0 null 2");

    /* Read back per layer: the logits (-1) first, in layer order, failures flagged. */
    lp_store *rd;
    assert_int_equal(lp_store_open_read(f.db, &rd, &err), LP_OK);
    int64_t latest, *layers, n_layers;
    double *diffs;
    bool *failed;
    assert_int_equal(lp_store_latest_leak_run(rd, &latest, &err), LP_OK);
    assert_int_equal(latest, run_id); /* the mask run has no perturbation rows */
    assert_int_equal(lp_store_read_leak_diffs(rd, run_id, &layers, &diffs, &failed, &n_layers,
                                              &err),
                     LP_OK);
    assert_int_equal(n_layers, 3);
    assert_int_equal(layers[0], -1);
    assert_true(diffs[0] == 0.5 && failed[0]);
    assert_true(diffs[1] == 0.0 && !failed[1]);
    assert_true(diffs[2] == 0.125 && failed[2]);
    free(layers);
    free(diffs);
    free(failed);
    assert_int_equal(lp_store_read_leak_diffs(rd, mask_run, &layers, &diffs, &failed, &n_layers,
                                              &err),
                     LP_ERR_NOT_FOUND);
    /* a read-only store writes nothing */
    assert_int_equal(lp_store_begin_run(rd, &info, NULL, &run_id, &err), LP_ERR_USAGE);
    lp_store_close(rd);
    fixture_free(&f);
}

/* ---- databases from other loupes, and from no loupe at all ------------------------------------ */

static void test_newer_schema_refused(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/store_newer_%ld.db", lp_test_tmp_dir(), (long)getpid());
    remove(path);
    lp_store *store;
    lp_error err = {0};
    assert_int_equal(lp_store_open(path, &store, &err), LP_OK);
    lp_store_close(store);
    lp_test_sql_exec(path, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
    assert_int_equal(lp_store_open(path, &store, &err), LP_ERR_UNSUPPORTED);
    printf("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, "99"));
    assert_null(strchr(err.msg, '\n'));
    assert_int_equal(lp_store_open_read(path, &store, &err), LP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "schema_version 99 is newer"));

    /* A version-1 database from before tokens.label: the column is added, runs still work. */
    remove(path);
    lp_test_sql_exec(path, "CREATE TABLE tokens (run_id INTEGER NOT NULL, pos INTEGER NOT NULL, "
                           "token_id INTEGER NOT NULL, piece TEXT NOT NULL, PRIMARY KEY (run_id, "
                           "pos))");
    assert_int_equal(lp_store_open(path, &store, &err), LP_OK);
    assert_int_equal(lp_test_sql_int(path, "SELECT count(*) FROM pragma_table_info('tokens') "
                                           "WHERE name = 'label'"),
                     1);
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
    assert_int_equal(lp_store_open_read(path, &store, &err), LP_ERR_SQLITE);
    assert_non_null(strstr(err.msg, path));
    remove(path);
    assert_int_equal(lp_store_open_read(path, &store, &err), LP_ERR_IO);
    assert_non_null(strstr(err.msg, "no such file"));
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
    /* the shared softmax denominator top-k, eval's NLL and the leak alignment read */
    double max = 0;
    double sum = lp_softmax_sum(logits, 5, &max);
    assert_true(max == 3.0);
    assert_true(fabs(sum - z / exp(3.0)) < 1e-12);
}

typedef struct token_rows {
    json_t *ids, *tokens;
    size_t n;
} token_rows;

static lp_status token_row(void *ctx, const lp_sql_value *cols, int n_cols, lp_error *err)
{
    (void)err;
    token_rows *tr = ctx;
    assert_int_equal(n_cols, 2);
    assert_true(tr->n < json_array_size(tr->ids));
    assert_int_equal(cols[0].i, json_integer_value(json_array_get(tr->ids, tr->n)));
    assert_string_equal((const char *)cols[1].data,
                        json_string_value(json_array_get(tr->tokens, tr->n)));
    tr->n++;
    return LP_OK;
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
    token_rows tr = {json_object_get(json_object_get(c0, "with_special_tokens"), "ids"),
                     json_object_get(json_object_get(c0, "with_special_tokens"), "tokens"), 0};
    assert_non_null(text);
    assert_true(json_array_size(tr.ids) > 3);

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

    lp_error err = {0};
    assert_int_equal(lp_store_sql(db, "SELECT token_id, piece FROM tokens WHERE run_id = 1 ORDER "
                                      "BY pos",
                                  token_row, &tr, &err),
                     LP_OK);
    assert_int_equal(tr.n, json_array_size(tr.ids));
    assert_int_equal(lp_test_sql_int(db, "SELECT count(*) FROM runs WHERE status = 'complete'"), 1);
    printf("  %zu tokens of \"%.30s...\" stored as Hugging Face's ids and pieces\n", tr.n, text);
    json_decref(ref);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_list_and_top_k),
        cmocka_unit_test(test_store_cases),
        cmocka_unit_test(test_schema_and_appended_runs),
        cmocka_unit_test(test_killed_and_failed_runs),
        cmocka_unit_test(test_batch_runs),
        cmocka_unit_test(test_leak_check_rows),
        cmocka_unit_test(test_newer_schema_refused),
        cmocka_unit_test(test_cli_tokenizer_beside_model),
    };
    return cmocka_run_group_tests_name("store", tests, NULL, NULL);
}
