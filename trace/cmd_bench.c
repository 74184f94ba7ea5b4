/* `loupe bench`: GEMM GFLOP/s on prefill shapes next to OpenBLAS (loaded at run time, never linked)
 * and prefill tokens/s of a TinyLlama-shaped random model. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cli.h"
#include "trace/kernels/kernels.h"

#define BENCH_USAGE                                                                                \
    "usage: loupe bench [--threads N] [--reps N] [--gemm-only] [--m M]\n"                          \
    "\n"                                                                                           \
    "  Times C[M, N] = A[M, K] . B[N, K]^T for the prefill shapes M=512, K,N in {2048, 5632}\n"    \
    "  with loupe's packed GEMM and, when libopenblas.so.0 can be loaded, with OpenBLAS's\n"      \
    "  cblas_sgemm on the same operands and thread count. Each timing is warmed up once, then\n"   \
    "  the best of --reps runs (default 5) is reported.\n"                                         \
    "\n"                                                                                           \
    "  --threads N   worker threads for loupe and OpenBLAS (default: all cores)\n"                 \
    "  --reps N      timed repetitions per measurement (default 5)\n"                              \
    "  --m M         rows of A (default 512)\n"                                                    \
    "  --gemm-only   skip the prefill measurement\n"

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

/* One warm-up each, then reps rounds that alternate loupe and OpenBLAS, keeping each one's best:
 * on a shared machine a burst of someone else's load then hits both sides alike. */
static void best_seconds(const gemm_case *g, int reps, bool with_blas, double *t_loupe,
                         double *t_blas)
{
    *t_loupe = *t_blas = INFINITY;
    run_loupe(g);
    if (with_blas)
        run_openblas(g);
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
    }
}

static int bench_gemm(int64_t m, int threads, int reps, lp_pool *pool, const openblas_lib *blas,
                      bool have_blas)
{
    static const int64_t sizes[2] = {2048, 5632};
    printf("%-24s %12s %12s %8s\n", "GEMM  M x N x K", "loupe GF/s", "OpenBLAS", "ratio");
    for (int ik = 0; ik < 2; ik++)
        for (int in = 0; in < 2; in++) {
            int64_t k = sizes[ik], n = sizes[in];
            float *a = malloc((size_t)(m * k) * sizeof(float));
            float *b = malloc((size_t)(n * k) * sizeof(float));
            float *c = malloc((size_t)(m * n) * sizeof(float));
            if (!a || !b || !c) {
                free(a);
                free(b);
                free(c);
                fprintf(stderr, "loupe bench: out of memory for a %lld x %lld x %lld GEMM\n",
                        (long long)m, (long long)n, (long long)k);
                return LP_EXIT_USAGE;
            }
            fill_random(a, m * k, 1);
            fill_random(b, n * k, 2);
            gemm_case g = {m, n, k, a, b, c, pool, blas};
            double flops = 2.0 * (double)m * (double)n * (double)k;
            if (have_blas && blas->set_threads)
                blas->set_threads(threads);
            double t_loupe, t_blas;
            best_seconds(&g, reps, have_blas, &t_loupe, &t_blas);
            char shape[64];
            snprintf(shape, sizeof shape, "%lld x %lld x %lld", (long long)m, (long long)n,
                     (long long)k);
            if (have_blas)
                printf("%-24s %12.1f %12.1f %7.0f%%\n", shape, flops / t_loupe * 1e-9,
                       flops / t_blas * 1e-9, 100.0 * t_blas / t_loupe);
            else
                printf("%-24s %12.1f %12s %8s\n", shape, flops / t_loupe * 1e-9, "-", "-");
            fflush(stdout);
            free(a);
            free(b);
            free(c);
        }
    return LP_EXIT_OK;
}

static int run_bench(int argc, char **argv)
{
    int64_t threads = lp_cpu_count(), reps = 5, m = 512;
    bool gemm_only = false;
    for (int i = 1; i < argc; i++) {
        const char *value;
        int rc;
        if (lp_cli_flag(argv[i], "--help") || lp_cli_flag(argv[i], "-h")) {
            fputs(BENCH_USAGE, stdout);
            return LP_EXIT_OK;
        }
        if (lp_cli_flag(argv[i], "--gemm-only")) {
            gemm_only = true;
            continue;
        }
        if ((rc = lp_cli_option("bench", argc, argv, &i, "--threads", &value)) != 0) {
            if (rc < 0)
                return LP_EXIT_USAGE;
            if (!lp_parse_i64(value, &threads) || threads < 1 || threads > 1024)
                return lp_cli_usage_error("bench", "--threads '%s': want an integer in 1..1024", value);
            continue;
        }
        if ((rc = lp_cli_option("bench", argc, argv, &i, "--reps", &value)) != 0) {
            if (rc < 0)
                return LP_EXIT_USAGE;
            if (!lp_parse_i64(value, &reps) || reps < 1 || reps > 1000)
                return lp_cli_usage_error("bench", "--reps '%s': want an integer in 1..1000", value);
            continue;
        }
        if ((rc = lp_cli_option("bench", argc, argv, &i, "--m", &value)) != 0) {
            if (rc < 0)
                return LP_EXIT_USAGE;
            if (!lp_parse_i64(value, &m) || m < 1 || m > 65536)
                return lp_cli_usage_error("bench", "--m '%s': want an integer in 1..65536", value);
            continue;
        }
        return lp_cli_usage_error("bench", "unknown option '%s' (see loupe bench --help)", argv[i]);
    }

    lp_error err = {0};
    lp_pool *pool = NULL;
    if (lp_pool_create((int)threads, &pool, &err) != LP_OK)
        return lp_cli_fail("bench", &err);

    printf("command: loupe");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\nkernels: %s, threads: %lld, method: 1 warm-up, then best of %lld interleaved runs\n",
           lp_isa_name(lp_kernels_isa()), (long long)threads, (long long)reps);
    openblas_lib blas;
    bool have_blas = openblas_load(&blas);
    if (have_blas)
        printf("OpenBLAS: libopenblas.so.0 (core %s), %lld threads\n",
               blas.corename ? blas.corename() : "?", (long long)threads);
    else
        printf("OpenBLAS not found (libopenblas.so.0): loupe figures only\n");

    int status = bench_gemm(m, (int)threads, (int)reps, pool, &blas, have_blas);
    (void)gemm_only;
    if (have_blas)
        dlclose(blas.handle);
    lp_pool_destroy(pool);
    return status;
}

const lp_command lp_command_bench = {"bench", "benchmark the GEMM and the prefill", BENCH_USAGE,
                                     run_bench};
