/* `--hw local`: this machine's f32 FMA peak and streaming-read bandwidth, measured the way a
 * roofline needs them (all threads at once, best of three rounds), and its physical memory.
 *
 * The FMA loop keeps only registers busy (independent accumulators, no loads), so it measures
 * what the cores can compute, not what loupe's GEMM achieves: the ratio of a measured pass to the
 * prediction from these figures is the kernels' efficiency. The read touches a buffer several
 * times the last-level cache once per pass, so it measures DRAM, not cache. LP_ISA=ref (as for
 * the trace kernels) measures the plain C loops, which is what the reference kernels can use. */
#define _POSIX_C_SOURCE 200809L
#include "estimate/estimate.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/platform.h"
#include "estimate/estimate_internal.h"

#define DEFAULT_READ_BYTES ((uint64_t)256 << 20)
#define ROUNDS 3
#define FMA_SECONDS 0.04 /* per round and thread */
#define MAX_THREADS 256

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool use_avx2(void)
{
    const char *isa = getenv("LP_ISA");
    if (isa && strcmp(isa, "ref") == 0)
        return false;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* The plain C loops: 16 independent accumulators of acc x m + c (ISO C: no contraction to FMA,
 * so 2 FLOPs as a multiply and an add). */
static double fma_loop_ref(int64_t iters)
{
    float a[16];
    for (int j = 0; j < 16; j++)
        a[j] = 0.5f + 0.0625f * (float)j;
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 16; j++)
            a[j] = a[j] * 0.999999f + 1e-6f;
    double sum = 0;
    for (int j = 0; j < 16; j++)
        sum += (double)a[j];
    return sum;
}

static uint64_t read_ref(const void *buf, size_t bytes)
{
    const uint64_t *p = buf;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < bytes / 8; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    return s0 + s1 + s2 + s3;
}

/* Threads wait at the gate until every one exists, so that they start together. */
typedef struct gate {
    pthread_mutex_t lock;
    pthread_cond_t open;
    bool go, abort;
} gate;

typedef struct worker {
    gate *start;
    bool avx2, read; /* which loop */
    int64_t iters;   /* FMA */
    const unsigned char *buf;
    size_t bytes;    /* read: this thread's slice */
    double sink;     /* the loop's result, kept so it is not optimized away */
} worker;

static void *run_worker(void *arg)
{
    worker *w = arg;
    pthread_mutex_lock(&w->start->lock);
    while (!w->start->go)
        pthread_cond_wait(&w->start->open, &w->start->lock);
    bool abort_run = w->start->abort;
    pthread_mutex_unlock(&w->start->lock);
    if (abort_run)
        return NULL;
    if (w->read)
        w->sink = (double)(w->avx2 ? lp_est_read_avx2(w->buf, w->bytes)
                                   : read_ref(w->buf, w->bytes));
    else
        w->sink = w->avx2 ? lp_est_fma_loop_avx2(w->iters) : fma_loop_ref(w->iters);
    return NULL;
}

static void open_gate(gate *g, bool abort_run)
{
    pthread_mutex_lock(&g->lock);
    g->go = true;
    g->abort = abort_run;
    pthread_cond_broadcast(&g->open);
    pthread_mutex_unlock(&g->lock);
}

/* One round on n threads; the seconds from the common start to the last one done. */
static lp_status run_round(worker *w, int n, double *seconds, lp_error *err)
{
    pthread_t threads[MAX_THREADS];
    gate start = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false};
    int made = 0;
    for (; made < n; made++) {
        w[made].start = &start;
        if (pthread_create(&threads[made], NULL, run_worker, &w[made]) != 0)
            break;
    }
    open_gate(&start, made < n); /* all or none of them run */
    double t0 = now_seconds();
    for (int i = 0; i < made; i++)
        pthread_join(threads[i], NULL);
    *seconds = now_seconds() - t0;
    pthread_mutex_destroy(&start.lock);
    pthread_cond_destroy(&start.open);
    if (made < n)
        return lp_error_set(err, LP_ERR_NOMEM, "--hw local: cannot start %d threads", n);
    return LP_OK;
}

static lp_status measure_fma(int n, bool avx2, double *flops_per_s, lp_error *err)
{
    /* calibrate on one thread: iterations for about FMA_SECONDS */
    int64_t iters = 1 << 16;
    double t0 = now_seconds();
    volatile double keep = avx2 ? lp_est_fma_loop_avx2(iters) : fma_loop_ref(iters);
    double dt = now_seconds() - t0;
    (void)keep;
    if (dt > 0)
        iters = (int64_t)((double)iters * FMA_SECONDS / dt) + 1;
    double flops_per_thread = (double)iters * (avx2 ? 12.0 * 8.0 * 2.0 : 16.0 * 2.0);
    worker w[MAX_THREADS];
    *flops_per_s = 0;
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < n; i++)
            w[i] = (worker){NULL, avx2, false, iters, NULL, 0, 0.0};
        double seconds;
        lp_status st = run_round(w, n, &seconds, err);
        if (st != LP_OK)
            return st;
        double rate = seconds > 0 ? flops_per_thread * n / seconds : 0;
        if (rate > *flops_per_s)
            *flops_per_s = rate;
    }
    return LP_OK;
}

static lp_status measure_read(int n, bool avx2, uint64_t bytes, double *bytes_per_s,
                              lp_error *err)
{
    size_t slice = (size_t)(bytes / (uint64_t)n) / 128 * 128; /* whole 128-byte steps */
    if (slice == 0)
        return lp_error_set(err, LP_ERR_RANGE, "--hw local: %llu bytes to read over %d threads",
                            (unsigned long long)bytes, n);
    unsigned char *buf = aligned_alloc(64, slice * (size_t)n);
    if (!buf)
        return lp_error_set(err, LP_ERR_NOMEM, "--hw local: out of memory for a %zu MiB read",
                            slice * (size_t)n >> 20);
    memset(buf, 1, slice * (size_t)n); /* first touch: the page faults are not the read */
    worker w[MAX_THREADS];
    *bytes_per_s = 0;
    lp_status st = LP_OK;
    for (int r = 0; r < ROUNDS && st == LP_OK; r++) {
        for (int i = 0; i < n; i++)
            w[i] = (worker){NULL, avx2, true, 0, buf + (size_t)i * slice, slice, 0.0};
        double seconds;
        st = run_round(w, n, &seconds, err);
        double rate = st == LP_OK && seconds > 0 ? (double)(slice * (size_t)n) / seconds : 0;
        if (rate > *bytes_per_s)
            *bytes_per_s = rate;
    }
    free(buf);
    return st;
}

lp_status lp_est_hw_measure(int threads, uint64_t read_bytes, lp_est_hw *out, lp_error *err)
{
    memset(out, 0, sizeof *out);
    int n = threads > 0 ? threads : lp_cpu_count();
    if (n > MAX_THREADS)
        n = MAX_THREADS;
    bool avx2 = use_avx2();
    if (read_bytes == 0)
        read_bytes = DEFAULT_READ_BYTES;
    lp_status st = measure_fma(n, avx2, &out->flops_per_s, err);
    if (st == LP_OK)
        st = measure_read(n, avx2, read_bytes, &out->bytes_per_s, err);
    if (st != LP_OK)
        return st;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    out->memory_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    snprintf(out->name, sizeof out->name, "local");
    snprintf(out->label, sizeof out->label,
             "this machine, measured: f32 FMA peak %.1f GFLOP/s (%s, %d threads), streaming "
             "read %.1f GB/s of %llu MiB",
             out->flops_per_s * 1e-9, avx2 ? "AVX2+FMA" : "plain C", n, out->bytes_per_s * 1e-9,
             (unsigned long long)(read_bytes >> 20));
    return LP_OK;
}
