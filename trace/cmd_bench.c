/* `loupe bench`: GEMM GFLOP/s on prefill shapes next to OpenBLAS (loaded at run time, never linked)
 * and prefill tokens/s of a TinyLlama-shaped random model. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cli/cli.h"
#include "core/mapfile.h"
#include "estimate/estimate.h"
#include "trace/kernels/kernels.h"
#include "trace/synth/synth.h"
#include "trace/trace.h"

/* cblas_sgemm's enums as the CBLAS standard fixes them. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };
typedef void (*cblas_sgemm_fn)(int order, int trans_a, int trans_b, int m, int n, int k,
                               float alpha, const float *a, int lda, const float *b, int ldb,
                               float beta, float *c, int ldc);
typedef void (*openblas_set_threads_fn)(int n);
typedef char *(*openblas_corename_fn)(void);

typedef struct openblas_lib {
    void *handle;
    cblas_sgemm_fn sgemm;
    openblas_set_threads_fn set_threads;
    openblas_corename_fn corename;
} openblas_lib;

static bool openblas_load(openblas_lib *lib)
{
    memset(lib, 0, sizeof *lib);
    lib->handle = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!lib->handle)
        return false;
    /* POSIX allows converting dlsym's void * to a function pointer; memcpy keeps ISO C quiet. */
    void *sym = dlsym(lib->handle, "cblas_sgemm");
    if (!sym) {
        dlclose(lib->handle);
        lib->handle = NULL;
        return false;
    }
    memcpy(&lib->sgemm, &sym, sizeof sym);
    sym = dlsym(lib->handle, "openblas_set_num_threads");
    if (sym)
        memcpy(&lib->set_threads, &sym, sizeof sym);
    sym = dlsym(lib->handle, "openblas_get_corename");
    if (sym)
        memcpy(&lib->corename, &sym, sizeof sym);
    return true;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fill_random(float *x, int64_t n, uint64_t seed)
{
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        x[i] = (float)((double)(state >> 40) / (double)(1ull << 24) - 0.5);
    }
}

typedef struct gemm_case {
    int64_t m, n, k;
    const float *a, *b;
    float *c;
    lp_pool *pool;
    const openblas_lib *blas;
} gemm_case;

static void run_loupe(const gemm_case *g)
{
    lp_gemm_f32(g->m, g->n, g->k, g->a, g->k, g->b, g->k, g->c, g->n, false, g->pool);
}

static void run_openblas(const gemm_case *g)
{
    g->blas->sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)g->m, (int)g->n, (int)g->k,
                   1.0f, g->a, (int)g->k, g->b, (int)g->k, 0.0f, g->c, (int)g->n);
}

/* OpenBLAS's idle workers keep polling (sched_yield) for a while after a call before they sleep;
 * on a 2-core machine that would steal time from loupe's next run. Wait them out. */
static void blas_settle(double last_call_seconds)
{
    /* 0.3 s, or less after tiny calls whose timings matter little (keeps the CLI test quick) */
    double seconds = 20.0 * last_call_seconds < 0.3 ? 20.0 * last_call_seconds : 0.3;
    struct timespec pause = {0, (long)(seconds * 1e9)};
    nanosleep(&pause, NULL);
}

/* One warm-up each, then reps rounds that alternate loupe and OpenBLAS, keeping each one's best:
 * on a shared machine a burst of someone else's load then hits both sides alike. */
static void best_seconds(const gemm_case *g, int reps, bool with_blas, double *t_loupe,
                         double *t_blas)
{
    *t_loupe = *t_blas = HUGE_VAL;
    run_loupe(g);
    if (with_blas) {
        double t0 = now_seconds();
        run_openblas(g);
        blas_settle(now_seconds() - t0);
    }
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        run_loupe(g);
        double t = now_seconds() - t0;
        if (t < *t_loupe)
            *t_loupe = t;
        if (!with_blas)
            continue;
        t0 = now_seconds();
        run_openblas(g);
        t = now_seconds() - t0;
        if (t < *t_blas)
            *t_blas = t;
        blas_settle(t);
    }
}

/* The worst difference between loupe's C and OpenBLAS's on the same operands, relative to the
 * largest entry (NaN sticks); -1 when there is no memory for the second product. */
static double blas_disagreement(const gemm_case *g, double t_blas)
{
    int64_t n = g->m * g->n;
    float *c_blas = malloc((size_t)n * sizeof(float));
    if (!c_blas)
        return -1.0;
    run_loupe(g);
    gemm_case gb = *g;
    gb.c = c_blas;
    run_openblas(&gb);
    blas_settle(t_blas);
    double worst = 0.0, largest = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)g->c[i] - (double)c_blas[i]);
        if (!(d <= worst))
            worst = d; /* NaN sticks */
        if (fabs((double)c_blas[i]) > largest)
            largest = fabs((double)c_blas[i]);
    }
    free(c_blas);
    return worst / (largest > 0.0 ? largest : 1.0);
}

/* Time one shape and print its line; false when loupe and OpenBLAS disagree. */
static bool time_gemm_shape(const gemm_case *g, int reps, bool have_blas)
{
    double flops = 2.0 * (double)g->m * (double)g->n * (double)g->k;
    double t_loupe, t_blas;
    best_seconds(g, reps, have_blas, &t_loupe, &t_blas);
    char shape[64];
    snprintf(shape, sizeof shape, "%lld x %lld x %lld", (long long)g->m, (long long)g->n,
             (long long)g->k);
    if (!have_blas) {
        printf("%-24s %12.1f %12s %8s\n", shape, flops / t_loupe * 1e-9, "-", "-");
        return true;
    }
    /* The two must compute the same product: the worst difference relative to the largest
     * entry, against 1e-4 (f32 sums of k <= 5632 terms agree to ~1e-6). */
    double rel = blas_disagreement(g, t_blas);
    rel = rel < 0.0 ? 0.0 : rel; /* no memory to compare: nothing measured against */
    printf("%-24s %12.1f %12.1f %7.0f%%   %.1e\n", shape, flops / t_loupe * 1e-9,
           flops / t_blas * 1e-9, 100.0 * t_blas / t_loupe, rel);
    if (rel <= 1e-4)
        return true;
    fprintf(stderr, "loupe bench: loupe and OpenBLAS disagree on %s: relative difference %.3g "
                    "> 1e-4\n", shape, rel);
    return false;
}

/* Prints one line per shape; exit status 1 when loupe and OpenBLAS disagree. */
static int bench_gemm(int64_t m, int threads, int reps, lp_pool *pool, const openblas_lib *blas,
                      bool have_blas)
{
    bool agree = true;
    static const int64_t sizes[2] = {2048, 5632};
    printf("%-24s %12s %12s %8s   %s\n", "GEMM  M x N x K", "loupe GF/s", "OpenBLAS", "ratio",
           have_blas ? "agreement (max |loupe - OpenBLAS| / max |C|)" : "");
    if (have_blas && blas->set_threads)
        blas->set_threads(threads);
    for (int ik = 0; ik < 2; ik++)
        for (int in = 0; in < 2; in++) {
            int64_t k = sizes[ik], n = sizes[in];
            float *a = malloc((size_t)(m * k) * sizeof(float));
            float *b = malloc((size_t)(n * k) * sizeof(float));
            float *c = malloc((size_t)(m * n) * sizeof(float));
            if (a && b && c) {
                fill_random(a, m * k, 1);
                fill_random(b, n * k, 2);
                gemm_case g = {m, n, k, a, b, c, pool, blas};
                agree = time_gemm_shape(&g, reps, have_blas) && agree;
                fflush(stdout);
            }
            free(a);
            free(b);
            free(c);
            if (!a || !b || !c) {
                fprintf(stderr, "loupe bench: out of memory for a %lld x %lld x %lld GEMM\n",
                        (long long)m, (long long)n, (long long)k);
                return LP_EXIT_USAGE;
            }
        }
    return agree ? LP_EXIT_OK : LP_EXIT_CHECK_FAILED;
}

/* ---- prefill of a TinyLlama-1.1B-shaped model (its config.json's numbers) */

enum {
    TL_HIDDEN = 2048,
    TL_FFN = 5632,
    TL_HEADS = 32,
    TL_KV_HEADS = 4,
    TL_HEAD_DIM = 64,
    TL_VOCAB = 32000,
    TL_LAYERS = 22
};

/* Multiply-adds of the linear layers per token and layer, times 2: q, o [2048 x 2048], k, v
 * [256 x 2048], gate, up, down [5632 x 2048]. */
static double tl_layer_flops_per_token(void)
{
    double kv = (double)TL_KV_HEADS * TL_HEAD_DIM;
    return 2.0 * (2.0 * TL_HIDDEN * TL_HIDDEN + 2.0 * kv * TL_HIDDEN + 3.0 * TL_FFN * TL_HIDDEN);
}

/* TinyLlama-1.1B's config.json numbers with --layers of its layers, random f32 weights about
 * the size of an initialized model's; embeddings tied (the logits are computed for the last
 * position only, so an untied classifier would cost the same and double the file). */
static lp_status write_tinyllama(const char *dir, int n_layers, lp_dtype dtype, lp_error *err)
{
    lp_synth_spec spec = {
        .family = LP_SYNTH_LLAMA, .vocab = TL_VOCAB, .hidden = TL_HIDDEN, .n_layers = n_layers,
        .n_heads = TL_HEADS, .n_kv_heads = TL_KV_HEADS, .head_dim = TL_HEAD_DIM, .ffn = TL_FFN,
        .n_ctx = 2048, .norm_eps = 1e-5, .rope_theta = 10000.0, .tied = true, .bos_id = 1,
        .eos_id = 2, .dtype = dtype, .vector_dtype = LP_DTYPE_F32, .seed = 10,
        .scale = 0.02,
    };
    return lp_synth_write_family(dir, &spec, err);
}

/* A new folder DIR/loupe-bench-XXXXXX for the temporary model, its path in model_dir; the exit
 * status (a message printed) when DIR is too long or the folder cannot be made. */
static int make_model_dir(const char *dir, char *model_dir, size_t size)
{
    int len = snprintf(model_dir, size, "%s/loupe-bench-XXXXXX", dir);
    if (len < 0 || (size_t)len >= size)
        return lp_cli_usage_error("bench", "--dir '%s': path longer than %zu bytes", dir,
                                  size - 20);
    if (!mkdtemp(model_dir)) {
        lp_error err = {0};
        lp_error_set(&err, LP_ERR_IO, "%s: cannot create a temporary folder: %s", dir,
                     strerror(errno));
        return lp_cli_fail("bench", &err);
    }
    return LP_EXIT_OK;
}

static void remove_model_dir(const char *dir)
{
    static const char *const files[] = {"config.json", "model.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *path = lp_path_join(dir, files[i]);
        if (path)
            remove(path);
        free(path);
    }
    rmdir(dir);
}

typedef struct layer_clock {
    double start;
    double *end; /* [n_layers] */
    int n_layers;
} layer_clock;

static void on_layer(void *ctx, int64_t batch, int layer, int n_layers)
{
    layer_clock *clock = ctx;
    (void)batch;
    if (layer >= 0 && layer < clock->n_layers && n_layers == clock->n_layers)
        clock->end[layer] = now_seconds();
}

static bool want_everything(void *ctx, const lp_site *site)
{
    (void)ctx;
    (void)site;
    return true;
}

/* The probed passes' observer does to each map what `loupe trace --maps f16` does before the
 * store binds it: the f32 rows converted into one f16 buffer reused across maps (the store's
 * map_blob), so the probes' figure counts reading the map back. */
typedef struct map_sink {
    uint16_t *f16;
    size_t cap;   /* elements */
    lp_pool *pool; /* the pass's threads, as `loupe trace` hands the store */
} map_sink;

static map_sink bench_maps;

static lp_status observe_like_store(void *ctx, const lp_site *site, const lp_view *view,
                                    lp_error *err)
{
    map_sink *sink = ctx;
    if (site->kind != LP_SITE_ATTN_PROBS || !view->data)
        return LP_OK;
    size_t n = (size_t)view->rows * (size_t)view->cols;
    if (n > sink->cap) {
        free(sink->f16);
        sink->f16 = malloc(n * sizeof *sink->f16);
        sink->cap = sink->f16 ? n : 0;
        if (!sink->f16)
            return lp_error_set(err, LP_ERR_NOMEM, "bench: out of memory for a map");
    }
    lp_f32_to_f16_rows(view->data, view->stride, view->rows, view->cols, sink->f16, sink->pool);
    return LP_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct prefill_result {
    double total;    /* best measured pass */
    double layer;    /* median layer time of that pass */
    double tail;     /* after the last layer: final norm and logits */
    double full;     /* extrapolated 22-layer pass */
} prefill_result;

/* OpenBLAS's GEMM on the four bench shapes, timed between prefill passes, so the prefill's
 * ratio compares runs that saw the same machine load. */
typedef struct blas_yardstick {
    const openblas_lib *blas;
    float *a, *b, *c; /* big enough for the largest shape */
    double best[4];   /* seconds per shape */
} blas_yardstick;

static const int64_t yardstick_sizes[2] = {2048, 5632};

static bool yardstick_init(blas_yardstick *y, const openblas_lib *blas, int threads)
{
    memset(y, 0, sizeof *y);
    y->blas = blas;
    for (int i = 0; i < 4; i++)
        y->best[i] = HUGE_VAL;
    y->a = malloc((size_t)512 * 5632 * sizeof(float));
    y->b = malloc((size_t)5632 * 5632 * sizeof(float));
    y->c = malloc((size_t)512 * 5632 * sizeof(float));
    if (!y->a || !y->b || !y->c)
        return false;
    fill_random(y->a, (int64_t)512 * 5632, 1);
    fill_random(y->b, (int64_t)5632 * 5632, 2);
    if (blas->set_threads)
        blas->set_threads(threads);
    return true;
}

static void yardstick_free(blas_yardstick *y)
{
    free(y->a);
    free(y->b);
    free(y->c);
}

static void yardstick_run(blas_yardstick *y)
{
    for (int i = 0; i < 4; i++) {
        gemm_case g = {512, yardstick_sizes[i % 2], yardstick_sizes[i / 2], y->a, y->b, y->c, NULL,
                       y->blas};
        double t0 = now_seconds();
        run_openblas(&g);
        double t = now_seconds() - t0;
        if (t < y->best[i])
            y->best[i] = t;
        blas_settle(t);
    }
}

/* Mean GFLOP/s over the shapes (0 before any run). */
static double yardstick_gflops(const blas_yardstick *y)
{
    double sum = 0.0;
    for (int i = 0; i < 4; i++) {
        if (!isfinite(y->best[i]))
            return 0.0;
        sum += 2.0 * 512.0 * (double)yardstick_sizes[i % 2] * (double)yardstick_sizes[i / 2] /
               y->best[i] * 1e-9;
    }
    return sum / 4.0;
}

/* The pass just timed, if it is the best so far: its total, median layer and tail. */
static void keep_if_best(const layer_clock *clock, double total, double *dur, prefill_result *out)
{
    if (total >= out->total)
        return;
    int n_layers = clock->n_layers;
    double prev = clock->start;
    for (int l = 0; l < n_layers; l++) {
        dur[l] = clock->end[l] - prev;
        prev = clock->end[l];
    }
    qsort(dur, (size_t)n_layers, sizeof *dur, cmp_double);
    out->total = total;
    out->layer = n_layers % 2 ? dur[n_layers / 2]
                              : 0.5 * (dur[n_layers / 2 - 1] + dur[n_layers / 2]);
    out->tail = total - (prev - clock->start);
    out->full = out->tail + (double)TL_LAYERS * out->layer;
}

/* What a timed prefill observes: nothing, every site, or every site with head statistics that
 * skip the sparsity fields (their cost, A/B). */
typedef enum probe_mode { PROBES_OFF, PROBES_ALL, PROBES_NO_SPARSITY } probe_mode;

/* A prefill timer: the options of the passes it times and the layer clock they tick. */
typedef struct pass_timer {
    lp_forward_opts opts;
    layer_clock clock;
    double *dur; /* [n_layers] scratch for keep_if_best */
} pass_timer;

static void timer_free(pass_timer *pt)
{
    free(pt->clock.end);
    free(pt->dur);
    pt->clock.end = pt->dur = NULL;
}

static lp_status timer_init(pass_timer *pt, lp_pool *pool, probe_mode probes, int n_layers,
                            lp_error *err)
{
    static const lp_observer everything = {&bench_maps, want_everything, observe_like_store};
    pt->clock = (layer_clock){0.0, calloc((size_t)n_layers, sizeof(double)), n_layers};
    pt->dur = calloc((size_t)n_layers, sizeof *pt->dur);
    if (!pt->clock.end || !pt->dur) {
        timer_free(pt);
        return lp_error_set(err, LP_ERR_NOMEM, "bench: out of memory");
    }
    lp_forward_opts_init(&pt->opts);
    pt->opts.pool = pool;
    bench_maps.pool = pool;
    pt->opts.observer = probes != PROBES_OFF ? &everything : NULL;
    pt->opts.skip_sparsity = probes == PROBES_NO_SPARSITY;
    pt->opts.logits_last_only = true;
    pt->opts.progress = on_layer;
    pt->opts.progress_ctx = &pt->clock;
    return LP_OK;
}

/* One pass over batch, kept in *out when it is the best so far and `timed` (not a warm-up). */
static lp_status timer_pass(pass_timer *pt, const lp_model *model, const lp_batch *batch,
                            bool timed, prefill_result *out, lp_error *err)
{
    pt->clock.start = now_seconds();
    lp_status st = lp_forward(model, batch, &pt->opts, err);
    double total = now_seconds() - pt->clock.start;
    if (st == LP_OK && timed)
        keep_if_best(&pt->clock, total, pt->dur, out);
    return st;
}

static lp_status time_prefill(const lp_model *model, const lp_batch *batch, lp_pool *pool,
                              probe_mode probes, int n_layers, int reps,
                              blas_yardstick *yardstick, prefill_result *out, lp_error *err)
{
    pass_timer pt;
    lp_status st = timer_init(&pt, pool, probes, n_layers, err);
    *out = (prefill_result){HUGE_VAL, 0.0, 0.0, 0.0};
    for (int r = 0; r <= reps && st == LP_OK; r++) { /* r = 0 is the warm-up */
        st = timer_pass(&pt, model, batch, r > 0, out, err);
        if (st == LP_OK && r > 0 && yardstick)
            yardstick_run(yardstick);
    }
    timer_free(&pt);
    return st;
}

/* What loupe estimate predicts for the full 22-layer pass on this machine (its FMA peak and
 * streaming read measured now, on the same threads), next to the measured pass. */
static void print_prediction(const char *model_dir, int threads, int64_t n_tokens,
                             double measured)
{
    lp_error err = {0};
    lp_arch arch;
    lp_est_hw hw;
    lp_est_dtype f32;
    lp_est_times t;
    char *config = lp_path_join(model_dir, "config.json");
    lp_status st = config ? lp_arch_from_hf_config(config, &arch, &err)
                          : lp_error_set(&err, LP_ERR_NOMEM, "bench: out of memory");
    free(config);
    if (st == LP_OK) {
        arch.n_layers = TL_LAYERS; /* the model built has fewer; the times are for all 22 */
        st = lp_arch_finish(&arch, &err);
    }
    lp_est_dtype_parse("f32", &f32);
    if (st == LP_OK)
        st = lp_est_hw_measure(threads, 0, &hw, &err);
    if (st == LP_OK)
        st = lp_est_predict_times(&arch, &f32, n_tokens, true, &hw, &t, &err);
    if (st != LP_OK) {
        printf("  predicted: not available (%s)\n", err.msg);
        return;
    }
    printf("  predicted (loupe estimate on %.1f GFLOP/s FMA peak, %.1f GB/s read, %d threads): "
           "22 layers %.3f s, %s-bound; measured %.3f s = %.2fx the prediction\n",
           hw.flops_per_s * 1e-9, hw.bytes_per_s * 1e-9, threads, t.prefill_seconds,
           t.prefill_compute_bound ? "compute" : "memory", measured, measured / t.prefill_seconds);
}

static void print_prefill(const prefill_result *bare, const prefill_result *probed, int n_layers,
                          int64_t n_tokens, double blas_gflops)
{
    if (blas_gflops > 0.0)
        printf("  OpenBLAS GEMM timed after each pass: best per shape, mean %.1f GFLOP/s over the "
               "4 shapes\n",
               blas_gflops);
    double flops = tl_layer_flops_per_token() * (double)TL_LAYERS * (double)n_tokens;
    const prefill_result *rs[2] = {bare, probed};
    const char *names[2] = {"probes off", "all probes"};
    for (int i = 0; i < 2; i++) {
        double gflops = flops / rs[i]->full * 1e-9;
        printf("  %-10s  %d-layer pass %.3f s: layer %.3f s, tail %.3f s -> 22 layers %.2f s = "
               "%.1f tokens/s, %.1f GFLOP/s of matmul",
               names[i], n_layers, rs[i]->total, rs[i]->layer, rs[i]->tail, rs[i]->full,
               (double)n_tokens / rs[i]->full, gflops);
        if (blas_gflops > 0.0)
            printf(" = %.0f%% of OpenBLAS's GEMM", 100.0 * gflops / blas_gflops);
        if (i == 1)
            printf(" (%.2fx the bare pass)", rs[i]->full / bare->full);
        printf("\n");
    }
}

/* Write the model with weights in dtype, open it and draw the seeded random tokens (the same
 * for every dtype); *tokens is the caller's to free, also on failure. */
static lp_status open_tinyllama(const char *model_dir, int n_layers, lp_dtype dtype,
                                int64_t n_tokens, lp_model **model, int32_t **tokens,
                                lp_error *err)
{
    *tokens = malloc((size_t)n_tokens * sizeof **tokens);
    lp_status st = *tokens ? write_tinyllama(model_dir, n_layers, dtype, err)
                           : lp_error_set(err, LP_ERR_NOMEM, "bench: out of memory");
    if (st == LP_OK)
        st = lp_model_open(model_dir, model, err);
    uint64_t state = 12345;
    for (int64_t t = 0; st == LP_OK && t < n_tokens; t++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        (*tokens)[t] = (int32_t)((state >> 33) % TL_VOCAB);
    }
    return st;
}

enum { BATCH_SEQS = 4 };

/* The process's CPU seconds (every thread): on a machine others load, the work a pass did
 * varies less than its wall time. */
static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A batch of BATCH_SEQS prompts of n_tokens / BATCH_SEQS tokens against one prompt of the same
 * total length: the rule is that a batch costs no more per token than the long prompt.
 * The two passes run in turn, rep by rep (one warm-up each, then the best of reps each), so both
 * see the same load on a shared machine. Probes off; the totals of the layers built, and the
 * 22-layer pass extrapolated as the other prefill lines do. */
static lp_status time_batch(const lp_model *model, const int32_t *tokens, int64_t n_tokens,
                            lp_pool *pool, int n_layers, int reps, lp_error *err)
{
    int64_t per_seq = n_tokens / BATCH_SEQS, total = BATCH_SEQS * per_seq;
    const lp_batch shapes[2] = {lp_batch_single(tokens, total),
                                {BATCH_SEQS, per_seq, tokens, NULL, NULL}};
    prefill_result res[2] = {{HUGE_VAL, 0, 0, 0}, {HUGE_VAL, 0, 0, 0}};
    double cpu[2] = {HUGE_VAL, HUGE_VAL};
    pass_timer pt;
    lp_status st = timer_init(&pt, pool, PROBES_OFF, n_layers, err);
    for (int r = 0; r <= reps && st == LP_OK; r++)
        for (int i = 0; i < 2 && st == LP_OK; i++) {
            double c0 = cpu_seconds();
            st = timer_pass(&pt, model, &shapes[i], r > 0, &res[i], err);
            double c = cpu_seconds() - c0;
            if (r > 0 && c < cpu[i])
                cpu[i] = c;
        }
    timer_free(&pt);
    if (st != LP_OK)
        return st;
    const prefill_result *one = &res[0], *batch = &res[1];
    printf("  batch of %d x %lld tokens, probes off, in turn with one prompt of %lld (best of %d "
           "each): %d-layer pass %.3f s vs %.3f s = %.2fx per token; layer %.3f s vs %.3f s, "
           "tail %.3f s vs %.3f s -> 22 layers %.2f s vs %.2f s = %.2fx per token; CPU time "
           "%.3f s vs %.3f s = %.2fx\n",
           BATCH_SEQS, (long long)per_seq, (long long)total, reps, n_layers, batch->total,
           one->total, batch->total / one->total, batch->layer, one->layer, batch->tail,
           one->tail, batch->full, one->full, batch->full / one->full, cpu[1], cpu[0],
           cpu[1] / cpu[0]);
    return LP_OK;
}

/* Write the model, open it and time both passes on seeded random tokens. */
static lp_status run_prefill(const char *model_dir, int n_layers, int64_t n_tokens, int reps,
                             lp_pool *pool, blas_yardstick *yardstick, double *bare_full,
                             lp_error *err)
{
    int32_t *tokens = NULL;
    lp_model *model = NULL;
    lp_status st = open_tinyllama(model_dir, n_layers, LP_DTYPE_F32, n_tokens, &model, &tokens, err);
    lp_batch batch = lp_batch_single(tokens, n_tokens);
    prefill_result bare, probed;
    if (st == LP_OK)
        st = time_prefill(model, &batch, pool, PROBES_OFF, n_layers, reps, yardstick, &bare,
                          err);
    if (st == LP_OK)
        st = time_prefill(model, &batch, pool, PROBES_ALL, n_layers, reps, yardstick, &probed,
                          err);
    if (st == LP_OK) {
        print_prefill(&bare, &probed, n_layers, n_tokens,
                      yardstick ? yardstick_gflops(yardstick) : 0.0);
        print_prediction(model_dir, pool ? lp_pool_threads(pool) : 1, n_tokens, bare.full);
        *bare_full = bare.full;
    }
    if (st == LP_OK && n_tokens >= 2 * BATCH_SEQS)
        st = time_batch(model, tokens, n_tokens, pool, n_layers, reps, err);
    lp_model_close(model);
    free(tokens);
    return st;
}

static void fill_weight_bytes(lp_dtype dt, uint8_t *dst, uint64_t bytes, uint64_t seed);

/* The prefill's linear layers alone, y[T, N] = x[T, K] . W[N, K]^T on the four shapes (N, K in
 * {2048, 5632}), with W stored in f32 and in dt, rep by rep in turn: best seconds per shape
 * summed, so both dtypes see the same load. false when out of memory. */
static bool time_linear_dtype(lp_dtype dt, int64_t T, int reps, lp_pool *pool, double *f32_s,
                              double *dt_s)
{
    const lp_dtype dts[2] = {LP_DTYPE_F32, dt};
    uint64_t bytes[2] = {0, 0};
    for (int i = 0; i < 2; i++)
        if (!lp_dtype_bytes_for(dts[i], 5632u * 5632u, &bytes[i]))
            return false;
    float *x = malloc((size_t)T * 5632 * sizeof *x), *y = malloc((size_t)T * 5632 * sizeof *y);
    uint8_t *w[2] = {malloc(bytes[0]), malloc(bytes[1])};
    bool ok = x && y && w[0] && w[1];
    *f32_s = *dt_s = 0.0;
    for (int i = 0; ok && i < 2; i++)
        fill_weight_bytes(dts[i], w[i], bytes[i], 21);
    if (ok)
        fill_random(x, T * 5632, 22);
    for (int shape = 0; ok && shape < 4; shape++) {
        int64_t n = yardstick_sizes[shape % 2], k = yardstick_sizes[shape / 2];
        double best[2] = {HUGE_VAL, HUGE_VAL};
        for (int r = 0; ok && r <= reps; r++)
            for (int i = 0; ok && i < 2; i++) {
                uint64_t row_bytes;
                ok = lp_dtype_bytes_for(dts[i], (uint64_t)k, &row_bytes);
                lp_matrix m = {dts[i], w[i], n, k, row_bytes, false};
                double t0 = now_seconds();
                ok = ok && lp_linear(x, T, &m, NULL, y, pool, NULL) == LP_OK;
                double t = now_seconds() - t0;
                if (r > 0 && t < best[i])
                    best[i] = t;
            }
        *f32_s += best[0];
        *dt_s += best[1];
    }
    free(x);
    free(y);
    free(w[0]);
    free(w[1]);
    return ok;
}

/* --dtype: the linear layers in dt beside f32, and for f16/bf16 the bare prefill of the model
 * stored in dt beside f32's (f32_full, timed just before). */
static lp_status prefill_dtype(const char *model_dir, lp_dtype dt, int n_layers, int64_t n_tokens,
                               int reps, lp_pool *pool, double f32_full, lp_error *err)
{
    double f32_s, dt_s;
    const char *name = lp_dtype_get(dt)->name;
    if (!time_linear_dtype(dt, n_tokens, reps, pool, &f32_s, &dt_s))
        return lp_error_set(err, LP_ERR_NOMEM, "bench: out of memory for the %s linear layers",
                            name);
    double flops = 0.0;
    for (int shape = 0; shape < 4; shape++)
        flops += 2.0 * (double)n_tokens * (double)yardstick_sizes[shape % 2] *
                 (double)yardstick_sizes[shape / 2];
    printf("  %s weights, linear layers alone (%lld x {2048, 5632}^2, best of %d, in turn with "
           "f32): %.1f GFLOP/s = %.0f%% of f32's %.1f GFLOP/s\n",
           name, (long long)n_tokens, reps, flops / dt_s * 1e-9, 100.0 * f32_s / dt_s,
           flops / f32_s * 1e-9);
    if (dt != LP_DTYPE_F16 && dt != LP_DTYPE_BF16)
        return LP_OK; /* loupe synth writes float checkpoints only */
    remove_model_dir(model_dir);
    if (mkdir(model_dir, 0700) != 0)
        return lp_error_set(err, LP_ERR_IO, "%s: cannot create a temporary folder: %s", model_dir,
                            strerror(errno));
    int32_t *tokens = NULL;
    lp_model *model = NULL;
    lp_status st = open_tinyllama(model_dir, n_layers, dt, n_tokens, &model, &tokens, err);
    lp_batch batch = lp_batch_single(tokens, n_tokens);
    prefill_result bare;
    if (st == LP_OK)
        st = time_prefill(model, &batch, pool, PROBES_OFF, n_layers, reps, NULL, &bare, err);
    if (st == LP_OK)
        printf("  %s weights, probes off: 22 layers %.2f s = %.1f tokens/s = %.0f%% of f32's "
               "speed (timed after it)\n",
               name, bare.full, (double)n_tokens / bare.full, 100.0 * f32_full / bare.full);
    lp_model_close(model);
    free(tokens);
    return st;
}

static int bench_prefill(int threads, int reps, int n_layers, int64_t n_tokens, const char *dir,
                         lp_pool *pool, const openblas_lib *blas, lp_dtype dtype)
{
    lp_error err = {0};
    char model_dir[4096];
    int rc = make_model_dir(dir, model_dir, sizeof model_dir);
    if (rc != LP_EXIT_OK)
        return rc;
    blas_yardstick yardstick_store, *yardstick = NULL;
    if (blas) {
        if (!yardstick_init(&yardstick_store, blas, threads)) {
            yardstick_free(&yardstick_store);
            rmdir(model_dir);
            fprintf(stderr, "loupe bench: out of memory for the OpenBLAS yardstick\n");
            return LP_EXIT_USAGE;
        }
        yardstick = &yardstick_store;
    }
    printf("\nprefill: TinyLlama-1.1B shape (hidden %d, %d heads / %d KV, FFN %d, vocab %d), f32 "
           "random weights, %lld tokens, logits for the last position, threads %d\n",
           TL_HIDDEN, TL_HEADS, TL_KV_HEADS, TL_FFN, TL_VOCAB, (long long)n_tokens, threads);
    printf("  built %d of %d layers in %s; 22-layer time = tail + 22 x median layer; "
           "1 warm-up, then best of %d passes\n",
           n_layers, TL_LAYERS, model_dir, reps);
    fflush(stdout);
    double f32_full = 0.0;
    lp_status st = run_prefill(model_dir, n_layers, n_tokens, reps, pool, yardstick, &f32_full,
                               &err);
    if (st == LP_OK && dtype != LP_DTYPE_F32)
        st = prefill_dtype(model_dir, dtype, n_layers, n_tokens, reps, pool, f32_full, &err);
    remove_model_dir(model_dir);
    if (yardstick)
        yardstick_free(yardstick);
    return st == LP_OK ? LP_EXIT_OK : lp_cli_fail("bench", &err);
}

/* ---- attention: the blocked kernels beside the FMA peak, and an attention-heavy prefill */

enum { AH_HIDDEN = 512, AH_HEADS = 8, AH_HEAD_DIM = 64, AH_FFN = 1024, AH_LAYERS = 2,
       AH_VOCAB = 32000 };

enum { ATTN_MAX_ITEMS = AH_HEADS * 64 };

typedef struct attn_bench {
    const float *q, *k, *v;
    float *out;
    int64_t T, D, heads, group, n_chunks; /* group: query heads per KV head */
    int64_t edges[65]; /* row chunk edges of equal causal work */
    lp_mask_spec mask;
    /* per item of the last run: the CPU time of the thread that ran it and which thread it was
     * (the address of a thread-local), for the load-independent scaling figure */
    double item_cpu[ATTN_MAX_ITEMS];
    const void *item_thread[ATTN_MAX_ITEMS];
} attn_bench;

static _Thread_local char bench_thread_tag;

static double thread_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The CPU seconds of the busiest thread of the last run of n items (all of them for one thread):
 * what the run would take on otherwise idle cores. Time other processes take from our threads is
 * not counted; cache and memory contention between our threads is. */
static double busiest_thread_cpu(const attn_bench *b, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double sum = 0.0;
        bool first = true;
        for (int64_t j = 0; j < n && first; j++)
            first = !(j < i && b->item_thread[j] == b->item_thread[i]);
        for (int64_t j = i; j < n && first; j++)
            sum += b->item_thread[j] == b->item_thread[i] ? b->item_cpu[j] : 0.0;
        worst = sum > worst ? sum : worst;
    }
    return worst;
}

/* Item (KV head, row chunk): the group's query heads in one call, sharing each K/V block. */
static void attn_bench_item(void *ctx, int64_t item)
{
    attn_bench *b = ctx;
    double cpu0 = thread_cpu_seconds();
    int64_t kvh = item / b->n_chunks, c = item % b->n_chunks;
    int64_t q_stride = b->heads * b->D, kv_stride = b->heads / b->group * b->D;
    lp_attn_args a = {.q = b->q + kvh * b->group * b->D, .k = b->k + kvh * b->D,
                      .v = b->v + kvh * b->D, .out = b->out + kvh * b->group * b->D, .n_q = b->T,
                      .n_k = b->T, .head_dim = b->D, .v_dim = b->D, .q_stride = q_stride,
                      .k_stride = kv_stride, .v_stride = kv_stride, .out_stride = q_stride,
                      .scale = (float)(1.0 / sqrt((double)b->D)), .mask = &b->mask,
                      .row_begin = b->edges[c], .row_end = b->edges[c + 1], .n_group = b->group,
                      .q_head_stride = b->D, .out_head_stride = b->D};
    lp_attention(&a);
    b->item_cpu[item] = thread_cpu_seconds() - cpu0;
    b->item_thread[item] = &bench_thread_tag;
}

/* Causal T x T attention of `heads` query heads of D dims, `group` of them per KV head, items
 * (KV head, row chunk) over the pool, then the same items on the calling thread alone, rep by
 * rep in turn (so both see the same load); GFLOP/s counts 2 D flops per visible (query, key)
 * pair for each of Q.K and P.V. peak_gflops is the pool's. */
static bool time_attention(int64_t T, int64_t D, int64_t group, int reps, lp_pool *pool,
                           double peak_gflops)
{
    const int64_t heads = AH_HEADS, n = T * heads * D;
    int threads = pool ? lp_pool_threads(pool) : 1;
    float *q = malloc((size_t)n * sizeof *q), *k = malloc((size_t)(n / group) * sizeof *k);
    float *v = malloc((size_t)(n / group) * sizeof *v), *out = malloc((size_t)n * sizeof *out);
    bool ok = q && k && v && out;
    if (ok) {
        fill_random(q, n, 3);
        fill_random(k, n / group, 4);
        fill_random(v, n / group, 5);
        static attn_bench b; /* 8 KB of per-item clocks: off the stack */
        b = (attn_bench){q, k, v, out, T, D, heads, group, 1, {0}, lp_mask_causal(T, T), {0}, {0}};
        b.n_chunks = threads < 64 ? threads : 64;
        for (int64_t c = 0; c <= b.n_chunks; c++) /* row r costs r + 1: edges at T sqrt(c / C) */
            b.edges[c] = (int64_t)((double)T * sqrt((double)c / (double)b.n_chunks) + 0.5);
        b.edges[b.n_chunks] = T;
        int64_t items = heads / group * b.n_chunks;
        double best = HUGE_VAL, best_one = HUGE_VAL, cpu = HUGE_VAL, cpu_one = HUGE_VAL;
        for (int r = 0; r <= reps; r++) {
            double t0 = now_seconds();
            lp_pool_run(pool, items, attn_bench_item, &b);
            double t = now_seconds() - t0, c = busiest_thread_cpu(&b, items);
            if (r > 0 && t < best)
                best = t;
            if (r > 0 && c < cpu)
                cpu = c;
            if (threads == 1)
                continue;
            t0 = now_seconds();
            lp_pool_run(NULL, items, attn_bench_item, &b);
            t = now_seconds() - t0;
            c = busiest_thread_cpu(&b, items);
            if (r > 0 && t < best_one)
                best_one = t;
            if (r > 0 && c < cpu_one)
                cpu_one = c;
        }
        double flops = 2.0 * (double)D * (double)T * (double)(T + 1) * (double)heads;
        printf("  causal %5lld x %-5lld head_dim %3lld, %d heads", (long long)T, (long long)T,
               (long long)D, (int)heads);
        if (group > 1)
            printf(" / %d KV", (int)(heads / group));
        printf(": %.3f s, %.1f GFLOP/s = %.0f%% of the FMA peak", best, flops / best * 1e-9,
               100.0 * flops / best * 1e-9 / peak_gflops);
        printf("\n    CPU clock of the busiest thread %.3f s = %.1f GFLOP/s in the threads' own time",
               cpu, flops / cpu * 1e-9);
        if (threads > 1)
            printf("; 1 thread: %.1f GFLOP/s = %.0f%% of one thread's peak; %d threads = %.2fx 1 "
                   "thread by the wall clock, %.2fx by the CPU clocks",
                   flops / best_one * 1e-9, 100.0 * flops / best_one * 1e-9 * threads / peak_gflops,
                   threads, best_one / best, cpu_one / cpu);
        printf("\n");
    }
    free(q);
    free(k);
    free(v);
    free(out);
    return ok;
}

/* CPU seconds of the whole process: what the load takes from the wall clock does not count (the
 * pool's spinning workers do, alike in every variant). */
static double process_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double peak_rss_mb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : 0.0;
}

/* FLOPs of one attention-heavy pass of T tokens: the linear layers plus causal attention. */
static double ah_pass_flops(int64_t T)
{
    double linear = 2.0 * (4.0 * AH_HIDDEN * AH_HIDDEN + 3.0 * AH_FFN * AH_HIDDEN) * (double)T;
    double attention = 2.0 * AH_HEAD_DIM * (double)T * (double)(T + 1) * AH_HEADS;
    return (linear + attention) * AH_LAYERS;
}

/* The attention-heavy model: bare passes at each T, then every probe at the first T. */
static lp_status time_attention_passes(const char *dir, const int64_t *Ts, int n_T, int reps,
                                       lp_pool *pool, double blas_gflops, lp_error *err)
{
    lp_synth_spec spec = {
        .family = LP_SYNTH_LLAMA, .vocab = AH_VOCAB, .hidden = AH_HIDDEN, .n_layers = AH_LAYERS,
        .n_heads = AH_HEADS, .n_kv_heads = AH_HEADS, .head_dim = AH_HEAD_DIM, .ffn = AH_FFN,
        .n_ctx = 32768, .norm_eps = 1e-5, .rope_theta = 10000.0, .tied = true, .bos_id = 1,
        .eos_id = 2, .dtype = LP_DTYPE_F32, .vector_dtype = LP_DTYPE_F32, .seed = 11,
        .scale = 0.02,
    };
    int64_t t_max = 0;
    for (int i = 0; i < n_T; i++)
        t_max = Ts[i] > t_max ? Ts[i] : t_max;
    lp_model *model = NULL;
    int32_t *tokens = malloc((size_t)t_max * sizeof *tokens);
    lp_status st = tokens ? lp_synth_write_family(dir, &spec, err)
                          : lp_error_set(err, LP_ERR_NOMEM, "bench: out of memory");
    if (st == LP_OK)
        st = lp_model_open(dir, &model, err);
    for (int64_t t = 0; st == LP_OK && t < t_max; t++)
        tokens[t] = (int32_t)((t * 7919 + 13) % AH_VOCAB);
    printf("  whole pass: hidden %d, %d heads of %d, %d layers, FFN %d, vocab %d, f32, logits "
           "for the last position; GFLOP/s counts the linear layers and causal attention\n",
           AH_HIDDEN, AH_HEADS, AH_HEAD_DIM, AH_LAYERS, AH_FFN, AH_VOCAB);
    double bare_first = 0.0;
    for (int i = 0; st == LP_OK && i <= n_T; i++) {
        bool probes = i == n_T; /* the last round: every probe at the first T */
        int64_t T = probes ? Ts[0] : Ts[i];
        lp_batch batch = lp_batch_single(tokens, T);
        prefill_result r;
        st = time_prefill(model, &batch, pool, probes ? PROBES_ALL : PROBES_OFF, AH_LAYERS, reps,
                          NULL, &r, err);
        if (st != LP_OK)
            break;
        double gflops = ah_pass_flops(T) / r.total * 1e-9;
        printf("  T %5lld %-10s %.3f s, %.1f tokens/s, %.1f GFLOP/s", (long long)T,
               probes ? "all probes" : "maps none", r.total, (double)T / r.total, gflops);
        if (blas_gflops > 0.0)
            printf(" = %.0f%% of OpenBLAS's GEMM", 100.0 * gflops / blas_gflops);
        if (probes)
            printf(" (%.2fx the bare pass)", r.total / bare_first);
        else
            printf(", peak RSS so far %.0f MB", peak_rss_mb());
        printf("\n");
        fflush(stdout);
        if (i == 0)
            bare_first = r.total;
    }
    /* The head statistics' sparsity cost, A/B/C: the bare pass, probed passes with and without
     * the sparsity statistics, interleaved so that a busy machine slows all alike (the bare
     * round above runs first, on colder pages, and read up to 2x slow); the best of each. */
    double best[3] = {HUGE_VAL, HUGE_VAL, HUGE_VAL}; /* bare, probed, probed without sparsity */
    double cpu[3] = {HUGE_VAL, HUGE_VAL, HUGE_VAL};  /* the same by the process CPU clock */
    lp_batch batch = lp_batch_single(tokens, Ts[0]);
    for (int rep = 0; st == LP_OK && rep < 3 * reps; rep++) {
        prefill_result r;
        int variant = rep % 3;
        const probe_mode modes[3] = {PROBES_OFF, PROBES_ALL, PROBES_NO_SPARSITY};
        double cpu0 = process_cpu_seconds();
        st = time_prefill(model, &batch, pool, modes[variant], AH_LAYERS, 1, NULL, &r, err);
        double used = (process_cpu_seconds() - cpu0) / 2.0; /* warm-up + 1 timed pass */
        if (st == LP_OK && r.total < best[variant])
            best[variant] = r.total;
        if (st == LP_OK && used < cpu[variant])
            cpu[variant] = used;
    }
    if (st == LP_OK)
        printf("  T %5lld interleaved, best of %d each: probes off %.3f s, all probes %.3f s "
               "(%.2fx the bare pass), without the sparsity statistics %.3f s: they cost %.1f%% "
               "of the probed pass\n",
               (long long)Ts[0], reps, best[0], best[1], best[1] / best[0], best[2],
               100.0 * (best[1] - best[2]) / best[1]);
    if (st == LP_OK)
        printf("    by the process CPU clock (per pass, the load's share left out): probes off %.3f "
               "s, all probes %.3f s = %.2fx, without the sparsity statistics %.3f s = %.2fx\n",
               cpu[0], cpu[1], cpu[1] / cpu[0], cpu[2], cpu[2] / cpu[0]);
    lp_model_close(model);
    free(tokens);
    return st;
}

static int bench_attention(int threads, int reps, int64_t tokens, int64_t head_dim,
                           const char *dir, lp_pool *pool, const openblas_lib *blas)
{
    lp_error err = {0};
    lp_est_hw hw;
    if (lp_est_hw_measure(threads, 0, &hw, &err) != LP_OK)
        return lp_cli_fail("bench", &err);
    double blas_gflops = 0.0;
    blas_yardstick y;
    if (blas && yardstick_init(&y, blas, threads)) {
        for (int r = 0; r < 3; r++)
            yardstick_run(&y);
        blas_gflops = yardstick_gflops(&y);
    }
    if (blas)
        yardstick_free(&y);
    printf("\nattention: blocked kernels, %d threads; FMA peak %.1f GFLOP/s (register-only FMA "
           "loop per thread, measured now)",
           threads, hw.flops_per_s * 1e-9);
    if (blas_gflops > 0.0)
        printf("; OpenBLAS sgemm %.1f GFLOP/s (best of 3, mean of the 4 prefill shapes)",
               blas_gflops);
    printf("\n");
    int64_t T = tokens > 0 ? tokens : 4096;
    /* head_dim 64 and 128 with one KV head per query head, then 128 with GQA (4 per KV head) */
    int64_t dims[3] = {64, 128, 128}, groups[3] = {1, 1, 4};
    for (int i = 0; i < 3; i++) {
        if (head_dim > 0 && i == 1)
            continue;
        if (!time_attention(T, head_dim > 0 ? head_dim : dims[i], groups[i], reps, pool,
                            hw.flops_per_s * 1e-9)) {
            fprintf(stderr, "loupe bench: out of memory for a %lld-token attention\n",
                    (long long)T);
            return LP_EXIT_USAGE;
        }
        fflush(stdout);
    }
    char model_dir[4096];
    int rc = make_model_dir(dir, model_dir, sizeof model_dir);
    if (rc != LP_EXIT_OK)
        return rc;
    int64_t Ts[2] = {4096, 8192};
    if (tokens > 0)
        Ts[0] = tokens;
    lp_status st = time_attention_passes(model_dir, Ts, tokens > 0 ? 1 : 2, reps, pool,
                                         blas_gflops, &err);
    remove_model_dir(model_dir);
    return st == LP_OK ? LP_EXIT_OK : lp_cli_fail("bench", &err);
}

/* ---- decode: one token's step of a TinyLlama-shaped model straight on the kernels */

enum { DEC_CTX = 512, DEC_MATS = 7 };

/* The weights of the decode step in one buffer: per layer q, k, v, o, gate, up, down, then the
 * classifier; values random but valid in the dtype (quant blocks get sane f16 scales). */
typedef struct decode_model {
    lp_dtype dtype;
    int n_layers;
    uint8_t *data;
    uint64_t weight_bytes;
    lp_matrix *mats; /* [n_layers * DEC_MATS + 1] */
    uint16_t *kv;    /* f16 cache [n_layers][2][kv heads][DEC_CTX][head_dim] */
} decode_model;

static const int64_t dec_shapes[DEC_MATS][2] = {
    {TL_HIDDEN, TL_HIDDEN}, {TL_KV_HEADS * TL_HEAD_DIM, TL_HIDDEN},
    {TL_KV_HEADS * TL_HEAD_DIM, TL_HIDDEN}, {TL_HIDDEN, TL_HIDDEN}, {TL_FFN, TL_HIDDEN},
    {TL_FFN, TL_HIDDEN}, {TL_HIDDEN, TL_FFN}};

static void fill_weight_bytes(lp_dtype dt, uint8_t *dst, uint64_t bytes, uint64_t seed)
{
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 7;
    if (dt == LP_DTYPE_F32 || dt == LP_DTYPE_F16 || dt == LP_DTYPE_BF16) {
        for (uint64_t i = 0; i < bytes / (dt == LP_DTYPE_F32 ? 4 : 2); i++) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            float v = (float)((double)(state >> 40) / (double)(1ull << 24) - 0.5) * 0.04f;
            if (dt == LP_DTYPE_F32) {
                memcpy(dst + 4 * i, &v, 4);
            } else {
                uint16_t h = dt == LP_DTYPE_F16 ? lp_f32_to_f16(v) : lp_f32_to_bf16(v);
                memcpy(dst + 2 * i, &h, 2);
            }
        }
        return;
    }
    for (uint64_t i = 0; i + 8 <= bytes; i += 8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        memcpy(dst + i, &state, 8);
    }
    const lp_dtype_info *info = lp_dtype_get(dt);
    uint16_t d = lp_f32_to_f16(0.001f);
    for (uint64_t off = 0; off + info->block_bytes <= bytes; off += info->block_bytes) {
        memcpy(dst + off, &d, 2); /* d; Q4_K's dmin follows; MXFP4's E8M0 byte is 0x19, 2^-102 */
        if (dt == LP_DTYPE_Q4_K)
            memcpy(dst + off + 2, &d, 2);
    }
}

static void decode_model_free(decode_model *dm)
{
    free(dm->data);
    free(dm->mats);
    free(dm->kv);
}

static bool decode_model_build(decode_model *dm, lp_dtype dt, int n_layers)
{
    memset(dm, 0, sizeof *dm);
    dm->dtype = dt;
    dm->n_layers = n_layers;
    int n_mats = n_layers * DEC_MATS + 1;
    dm->mats = calloc((size_t)n_mats, sizeof *dm->mats);
    if (!dm->mats)
        return false;
    uint64_t total = 0;
    for (int i = 0; i < n_mats; i++) {
        int64_t rows = i == n_mats - 1 ? TL_VOCAB : dec_shapes[i % DEC_MATS][0];
        int64_t cols = i == n_mats - 1 ? TL_HIDDEN : dec_shapes[i % DEC_MATS][1];
        uint64_t row_bytes;
        if (!lp_dtype_bytes_for(dt, (uint64_t)cols, &row_bytes))
            return false;
        dm->mats[i] = (lp_matrix){dt, NULL, rows, cols, row_bytes, false};
        total += row_bytes * (uint64_t)rows;
    }
    dm->data = malloc((size_t)total);
    size_t kv_elems = (size_t)n_layers * 2 * TL_KV_HEADS * DEC_CTX * TL_HEAD_DIM;
    dm->kv = malloc(kv_elems * sizeof *dm->kv);
    if (!dm->data || !dm->kv)
        return false;
    dm->weight_bytes = total;
    uint64_t off = 0;
    for (int i = 0; i < n_mats; i++) {
        dm->mats[i].data = dm->data + off;
        uint64_t bytes = dm->mats[i].row_bytes * (uint64_t)dm->mats[i].rows;
        fill_weight_bytes(dt, dm->data + off, bytes, (uint64_t)i + 1);
        off += bytes;
    }
    fill_weight_bytes(LP_DTYPE_F16, (uint8_t *)dm->kv, kv_elems * 2, 99);
    return true;
}

typedef struct decode_heads {
    const float *q;
    const uint16_t *k, *v; /* this layer's [kv heads][DEC_CTX][head_dim] */
    float *out;
    lp_mask_spec mask;
} decode_heads;

/* The query heads of KV group g against its cache, in one call (as generation's attention
 * sublayer runs them: each cached block is read once for the group's heads). */
static void decode_group(void *ctx, int64_t g)
{
    const decode_heads *d = ctx;
    enum { GROUP = TL_HEADS / TL_KV_HEADS };
    lp_attn_args a = {.q = d->q + g * GROUP * TL_HEAD_DIM,
                      .k = d->k + g * DEC_CTX * TL_HEAD_DIM,
                      .v = d->v + g * DEC_CTX * TL_HEAD_DIM,
                      .out = d->out + g * GROUP * TL_HEAD_DIM, .n_q = 1, .n_k = DEC_CTX,
                      .head_dim = TL_HEAD_DIM, .v_dim = TL_HEAD_DIM, .q_stride = TL_HIDDEN,
                      .k_stride = TL_HEAD_DIM, .v_stride = TL_HEAD_DIM, .out_stride = TL_HIDDEN,
                      .scale = 0.125f, .mask = &d->mask, .kv_dtype = LP_DTYPE_F16,
                      .n_group = GROUP, .q_head_stride = TL_HEAD_DIM,
                      .out_head_stride = TL_HEAD_DIM};
    lp_attention(&a);
}

/* One step: per layer the seven matrix-vector products, attention of 32 heads over the 512
 * cached f16 keys, SwiGLU and the residual; then the classifier. */
static lp_status decode_step(const decode_model *dm, float *buf, lp_pool *pool, bool int8_x,
                             lp_error *err)
{
    lp_status (*matvec)(const float *, const lp_matrix *, const float *, float *, lp_pool *,
                        lp_error *) = int8_x ? lp_matvec_int8 : lp_matvec;
    float *x = buf, *q = x + TL_HIDDEN, *k = q + TL_HIDDEN, *v = k + TL_HIDDEN;
    float *att = v + TL_HIDDEN, *o = att + TL_HIDDEN, *gate = o + TL_HIDDEN, *up = gate + TL_FFN;
    float *logits = up + TL_FFN;
    lp_status st = LP_OK;
    for (int l = 0; l < dm->n_layers && st == LP_OK; l++) {
        const lp_matrix *w = dm->mats + l * DEC_MATS;
        size_t kv_layer = (size_t)2 * TL_KV_HEADS * DEC_CTX * TL_HEAD_DIM;
        decode_heads heads = {q, dm->kv + l * kv_layer, dm->kv + l * kv_layer + kv_layer / 2,
                              att, lp_mask_causal(1, DEC_CTX)};
        /* grouped as generation groups them (lp_fw_linear_group calls lp_matvec_group): q|k|v,
         * gate|up */
        lp_matvec_part qkv[3] = {{&w[0], NULL, q}, {&w[1], NULL, k}, {&w[2], NULL, v}};
        lp_matvec_part gate_up[2] = {{&w[4], NULL, gate}, {&w[5], NULL, up}};
        if ((st = lp_matvec_group(x, qkv, 3, int8_x, pool, err)))
            break;
        lp_pool_run(pool, TL_KV_HEADS, decode_group, &heads);
        if ((st = matvec(att, &w[3], NULL, o, pool, err)))
            break;
        lp_add(x, o, TL_HIDDEN);
        if ((st = lp_matvec_group(x, gate_up, 2, int8_x, pool, err)))
            break;
        lp_silu_mul(gate, up, TL_FFN);
        if ((st = matvec(gate, &w[6], NULL, o, pool, err)))
            break;
        lp_add(x, o, TL_HIDDEN);
        lp_rmsnorm(x, x, NULL, TL_HIDDEN, 1e-5f, false);
    }
    if (st == LP_OK)
        st = matvec(x, &dm->mats[dm->n_layers * DEC_MATS], NULL, logits, pool, err);
    return st;
}

enum { DEC_MAX_REPS = 64 };

/* A dtype's steps, float activations [0] and int8 [1] (Q8_0 / Q4_K / MXFP4 only): the best
 * step, and per timed step its bandwidth over that of a read of the same weights right after it
 * (one round: the step's moment, not the run's best one). */
typedef struct decode_result {
    lp_dtype dtype;
    bool int8_too;
    double best[2];
    uint64_t weight_bytes;
    int n_pairs;
    double share[2][DEC_MAX_REPS];
    double read_lo, read_hi; /* the reads' range, bytes/s */
} decode_result;

static double median_of(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* One step of variant v, then one read of the model's weights: the step's share of that read. */
static int decode_pair(const decode_model *dm, int v, int threads, lp_pool *pool, float *buf,
                       uint64_t step_bytes, double *t, double *share, double *read_bps)
{
    lp_error err = {0};
    fill_random(buf, TL_HIDDEN, 6);
    double t0 = now_seconds();
    if (decode_step(dm, buf, pool, v == 1, &err) != LP_OK)
        return lp_cli_fail("bench", &err);
    *t = now_seconds() - t0;
    if (lp_est_read_bandwidth_of(threads, dm->data, dm->weight_bytes, 1, read_bps, &err) != LP_OK)
        return lp_cli_fail("bench", &err);
    *share = (double)step_bytes / *t / *read_bps;
    return LP_EXIT_OK;
}

static int time_decode_dtype(lp_dtype dt, int reps, int n_layers, int threads, lp_pool *pool,
                             float *buf, uint64_t kv_bytes, decode_result *out)
{
    decode_model dm;
    if (!decode_model_build(&dm, dt, n_layers)) {
        decode_model_free(&dm);
        fprintf(stderr, "loupe bench: out of memory for the %s decode model\n",
                lp_dtype_get(dt)->name);
        return LP_EXIT_USAGE;
    }
    /* Q8_0 / Q4_K / MXFP4: lp_matvec and lp_matvec_int8 in turn, rep by rep */
    *out = (decode_result){.dtype = dt, .best = {HUGE_VAL, HUGE_VAL},
                           .int8_too = dt == LP_DTYPE_Q8_0 || dt == LP_DTYPE_Q4_K ||
                                       dt == LP_DTYPE_MXFP4,
                           .weight_bytes = dm.weight_bytes, .read_lo = HUGE_VAL};
    reps = reps < DEC_MAX_REPS ? reps : DEC_MAX_REPS;
    int status = LP_EXIT_OK;
    for (int r = 0; r <= reps && status == LP_EXIT_OK; r++)
        for (int v = 0; v <= (int)out->int8_too && status == LP_EXIT_OK; v++) {
            double t = 0.0, share = 0.0, bps = 0.0;
            status = decode_pair(&dm, v, threads, pool, buf, dm.weight_bytes + kv_bytes, &t,
                                 &share, &bps);
            if (status != LP_EXIT_OK || r == 0) /* the first is the warm-up */
                continue;
            out->best[v] = t < out->best[v] ? t : out->best[v];
            out->share[v][r - 1] = share;
            out->read_lo = bps < out->read_lo ? bps : out->read_lo;
            out->read_hi = bps > out->read_hi ? bps : out->read_hi;
            out->n_pairs = r;
        }
    decode_model_free(&dm);
    return status;
}

/* The bound of each step is a streaming read of its model's own weights right after it: the
 * same pages at the same moment. A fixed yardstick is none on this host: its bandwidth moves
 * over seconds (the same weights read 34 and 59 GB/s either side of their steps, a 256 MiB
 * buffer of its own 28-63 GB/s in one run), so the best of separate readings could halve every
 * share, and a step caught in a fast moment could pass 100%. The share printed is the median
 * over the pairs. */
static int bench_decode(int threads, int reps, int n_layers, lp_pool *pool)
{
    static const lp_dtype dts[] = {LP_DTYPE_F32, LP_DTYPE_F16, LP_DTYPE_Q8_0, LP_DTYPE_Q4_K,
                                   LP_DTYPE_MXFP4};
    enum { N_DTS = (int)(sizeof dts / sizeof dts[0]) };
    printf("\ndecode: TinyLlama-1.1B shape (hidden %d, %d heads / %d KV, FFN %d, vocab %d), %d of "
           "%d layers, random weights, f16 KV cache at %d context, %d threads; one step = 7 "
           "matrix-vector products and the cached attention per layer, then the classifier\n",
           TL_HIDDEN, TL_HEADS, TL_KV_HEADS, TL_FFN, TL_VOCAB, n_layers, TL_LAYERS, DEC_CTX,
           threads);
    float *buf = calloc((size_t)(8 * TL_HIDDEN + 2 * TL_FFN + TL_VOCAB), sizeof *buf);
    if (!buf) {
        fprintf(stderr, "loupe bench: out of memory\n");
        return LP_EXIT_USAGE;
    }
    decode_result res[N_DTS];
    uint64_t kv_bytes = (uint64_t)n_layers * 2 * TL_KV_HEADS * DEC_CTX * TL_HEAD_DIM * 2;
    int status = LP_EXIT_OK, done = 0;
    for (int i = 0; i < N_DTS && status == LP_EXIT_OK; i++)
        if ((status = time_decode_dtype(dts[i], reps, n_layers, threads, pool, buf, kv_bytes,
                                        &res[i])) == LP_EXIT_OK)
            done++;
    free(buf);
    printf("  bound: each step against a streaming read of the same weights by %d threads right "
           "after it (one round); the share is the median over %d such pairs, tokens/s the best "
           "step, after 1 warm-up\n",
           threads, reps < DEC_MAX_REPS ? reps : DEC_MAX_REPS);
    for (int i = 0; i < done; i++) {
        decode_result *r = &res[i];
        double bytes = (double)(r->weight_bytes + kv_bytes);
        for (int v = 0; v <= (int)r->int8_too; v++)
            printf("  %-5s%s %7.1f MB a step (weights %.1f + KV %.1f): %.3f s = %.2f tokens/s, "
                   "%.1f GB/s; %.0f%% of the bound (its reads %.1f-%.1f GB/s)\n",
                   lp_dtype_get(r->dtype)->name, v ? " x int8" : "", bytes * 1e-6,
                   (double)r->weight_bytes * 1e-6, (double)kv_bytes * 1e-6, r->best[v],
                   1.0 / r->best[v], bytes / r->best[v] * 1e-9,
                   100.0 * median_of(r->share[v], r->n_pairs), r->read_lo * 1e-9,
                   r->read_hi * 1e-9);
    }
    return status;
}

/* ---- the command ----------------------------------------------------------------------------- */

typedef struct bench_opts {
    int64_t threads, reps, m, layers, tokens;
    bool gemm_only, prefill_only;
    const char *dir;
    bool attention;
    int64_t head_dim;
    bool decode;
    const char *dtype;
    lp_dtype weight_dtype; /* --dtype parsed; f32 without it */
} bench_opts;

static const lp_option bench_options[] = {
    LP_OPT_INT_OF(bench_opts, threads, "threads", "N", 1, 1024,
                  "worker threads for loupe and OpenBLAS (default: all cores)"),
    LP_OPT_INT_OF(bench_opts, reps, "reps", "N", 1, 1000,
                  "timed repetitions per measurement (default 5 GEMM, 3 prefill)"),
    LP_OPT_INT_OF(bench_opts, m, "m", "M", 1, 65536, "rows of A in the GEMM part (default 512)"),
    LP_OPT_FLAG_OF(bench_opts, gemm_only, "gemm-only", "skip the prefill part"),
    LP_OPT_FLAG_OF(bench_opts, prefill_only, "prefill-only", "skip the GEMM part"),
    LP_OPT_INT_OF(bench_opts, layers, "layers", "L", 1, TL_LAYERS,
                  "layers actually built and timed (default 2)"),
    LP_OPT_INT_OF(bench_opts, tokens, "tokens", "T", 1, 32768,
                  "prefill length (default 512, at most 2048); with --attention the attention "
                  "length (default 4096, and whole passes at 4096 and 8192)"),
    LP_OPT_FLAG_OF(bench_opts, attention, "attention",
                   "only the attention part: kernels and an attention-heavy prefill"),
    LP_OPT_INT_OF(bench_opts, head_dim, "head-dim", "D", 1, 512,
                  "with --attention: one head dim (default 64 and 128)"),
    LP_OPT_FLAG_OF(bench_opts, decode, "decode",
                   "only the decode part: tokens/s of one step beside the memory bandwidth"),
    LP_OPT_STRING_OF(bench_opts, dtype, "dtype", "TYPE",
                     "prefill part: also time weights stored in f16, bf16, q8_0, q4_k or mxfp4 beside "
                     "f32 in the same run"),
    LP_OPT_STRING_OF(bench_opts, dir, "dir", "DIR",
                     "where the temporary model goes (default $TMPDIR or /tmp)"),
    LP_OPT_END_OF_TABLE,
};

LP_CLI_COMMAND(bench, run_bench, bench_options, 0, 0,
               "benchmark the GEMM, the prefill and attention",
               "[--gemm-only | --prefill-only | --attention | --decode] [options]",
    .description =
        "GEMM: times C[M, N] = A[M, K] . B[N, K]^T for the prefill shapes M=512, K,N in\n"
        "{2048, 5632} with loupe's packed GEMM and, when libopenblas.so.0 can be loaded, with\n"
        "OpenBLAS's cblas_sgemm on the same operands and thread count (loaded at run time, never\n"
        "linked). One warm-up each, then the best of --reps interleaved runs.\n"
        "\n"
        "Prefill: writes a TinyLlama-1.1B-shaped model with random f32 weights (hidden 2048, 32\n"
        "heads, 4 KV heads, FFN 5632, vocab 32000; --layers of its 22 layers, default 2) to a\n"
        "temporary folder, runs a T-token prefill (default 512) without and with every probe, and\n"
        "reports tokens/s for the full 22-layer model: the embedding/classifier time plus 22 times\n"
        "the median per-layer time. Needs about 0.5 GiB of disk and memory per 2 layers.\n"
        "--dtype f16|bf16|q8_0|q4_k|mxfp4 adds the linear layers with weights in that dtype beside\n"
        "f32 (in turn, same reps) and, for f16/bf16, the bare prefill of the model in that dtype.\n"
        "\n"
        "Attention (--attention, alone): the FMA peak of the threads (register-only loop) and\n"
        "OpenBLAS's sgemm, measured now; causal T x T attention of 8 heads at head_dim 64 and\n"
        "128 and GQA 8/2 heads at 128 (--tokens, default 4096; --head-dim for one) in GFLOP/s and\n"
        "% of that peak, with 1 thread beside (wall clock and busiest thread's CPU clock); whole\n"
        "passes of an attention-heavy model (hidden 512, 8 heads of 64, 2 layers, FFN 1024) at\n"
        "4096 and 8192 tokens without probes, then with every probe at the first length (each\n"
        "map converted to f16 as the store does) and again without the sparsity statistics\n"
        "(their cost, A/B in one process, by the wall and the process CPU clock), with the\n"
        "peak RSS.\n"
        "\n"
        "Decode (--decode, alone): one token's step of the TinyLlama shape (all 22 layers, or\n"
        "--layers) on the kernels: per layer the q, k, v, o, gate, up, down matrix-vector products\n"
        "reading F32, F16, Q8_0, Q4_K and MXFP4 weights in place and 32 heads over an f16 KV cache of\n"
        "512 positions, then the 32000-row classifier; tokens/s (the best step) and the share of\n"
        "the memory-bandwidth bound: each step against a streaming read of the same weights right\n"
        "after it, the median over --reps such pairs. Q8_0, Q4_K and MXFP4 also run with int8\n"
        "activations (lp_matvec_int8, the 'x int8' lines), step by step in turn with the float\n"
        "ones. F32 needs 4.4 GB of memory at 22 layers.",
    .notes = "Exit status: 0 done, 1 loupe's and OpenBLAS's products differ by more than 1e-4 of\n"
             "the largest entry, 2 bad usage or a failure (memory, disk).");

static void print_header(int argc, char **argv, int64_t threads, const openblas_lib *blas,
                         bool have_blas)
{
    printf("command: loupe");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\nkernels: %s, threads: %lld\n", lp_isa_name(lp_kernels_isa()), (long long)threads);
    if (have_blas)
        printf("OpenBLAS: libopenblas.so.0 (core %s), %lld threads\n",
               blas->corename ? blas->corename() : "?", (long long)threads);
    else
        printf("OpenBLAS not found (libopenblas.so.0): loupe figures only\n");
}

/* Both parts (or the one asked for) on one pool; the GEMM's disagreement does not stop the
 * prefill, its exit status stays. */
static int run_parts(const bench_opts *o, lp_pool *pool, const openblas_lib *blas, bool have_blas)
{
    int status = LP_EXIT_OK;
    if (o->decode)
        return bench_decode((int)o->threads, (int)(o->reps > 0 ? o->reps : 5),
                            (int)(o->layers > 0 ? o->layers : TL_LAYERS), pool);
    if (o->attention)
        return bench_attention((int)o->threads, (int)(o->reps > 0 ? o->reps : 2), o->tokens,
                               o->head_dim, o->dir, pool, have_blas ? blas : NULL);
    if (!o->prefill_only) {
        int reps = (int)(o->reps > 0 ? o->reps : 5);
        printf("GEMM method: 1 warm-up each, then best of %d runs alternating loupe and "
               "OpenBLAS (a pause of up to 0.3 s after each OpenBLAS call lets its polling workers "
               "sleep)\n",
               reps);
        status = bench_gemm(o->m, (int)o->threads, reps, pool, blas, have_blas);
    }
    if ((status == LP_EXIT_OK || status == LP_EXIT_CHECK_FAILED) && !o->gemm_only) {
        int prefill_status = bench_prefill((int)o->threads, (int)(o->reps > 0 ? o->reps : 3),
                                           (int)(o->layers > 0 ? o->layers : 2), o->tokens > 0 ? o->tokens : 512,
                                           o->dir, pool,
                                           have_blas ? blas : NULL, o->weight_dtype);
        if (prefill_status != LP_EXIT_OK)
            status = prefill_status;
    }
    return status;
}

static int run_bench(int argc, char **argv)
{
    bench_opts o = {lp_cpu_count(), -1, 512, -1, -1, false, false, NULL, false, -1, false, NULL,
                    LP_DTYPE_F32};
    const char *pos[LP_CLI_MAX_POSITIONAL];
    LP_CLI_PARSE_OR_RETURN(&bench_spec, argc, argv, &o, pos, NULL);
    if (o.dir && !lp_path_is_dir(o.dir))
        return lp_cli_usage_error("bench", "--dir '%s': not a folder", o.dir);
    if (!o.dir)
        o.dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    if (o.gemm_only && o.prefill_only)
        return lp_cli_usage_error("bench", "--gemm-only and --prefill-only exclude each other");
    if ((o.attention || o.decode) && (o.gemm_only || o.prefill_only))
        return lp_cli_usage_error("bench", "--%s excludes --gemm-only and --prefill-only",
                                  o.attention ? "attention" : "decode");
    if (o.attention && o.decode)
        return lp_cli_usage_error("bench", "--attention and --decode exclude each other");
    if (o.dtype) {
        o.weight_dtype = lp_dtype_from_name(o.dtype);
        lp_dtype d = o.weight_dtype;
        if (d != LP_DTYPE_F32 && d != LP_DTYPE_F16 && d != LP_DTYPE_BF16 && d != LP_DTYPE_Q8_0 &&
            d != LP_DTYPE_Q4_K && d != LP_DTYPE_MXFP4)
            return lp_cli_usage_error("bench", "--dtype '%s': expected f32, f16, bf16, q8_0, q4_k "
                                      "or mxfp4", o.dtype);
        if (o.attention || o.decode || o.gemm_only)
            return lp_cli_usage_error("bench", "--dtype is for the prefill part (not with "
                                      "--attention, --decode or --gemm-only)");
    }
    if (!o.attention && o.head_dim > 0)
        return lp_cli_usage_error("bench", "--head-dim needs --attention");
    if (!o.attention && o.tokens > 2048)
        return lp_cli_usage_error("bench", "--tokens %lld: the prefill part takes at most 2048 "
                                  "(--attention takes up to 32768)", (long long)o.tokens);
    lp_error err = {0};
    lp_pool *pool = NULL;
    if (lp_pool_create((int)o.threads, &pool, &err) != LP_OK)
        return lp_cli_fail("bench", &err);
    openblas_lib blas;
    bool have_blas = openblas_load(&blas);
    print_header(argc, argv, o.threads, &blas, have_blas);
    int status = run_parts(&o, pool, &blas, have_blas);
    if (have_blas)
        dlclose(blas.handle);
    lp_pool_destroy(pool);
    return status;
}
