/* `--hw local`: this machine's f32 FMA peak and streaming-read bandwidth, measured the way a
 * roofline needs them (all threads at once, best of several rounds), and its physical memory.
 *
 * The FMA loop keeps only registers busy (independent accumulators, no loads), so it measures
 * what the cores can compute, not what loupe's GEMM achieves: the ratio of a measured pass to the
 * prediction from these figures is the kernels' efficiency. The read touches a buffer several
 * times the last-level cache once per round, each thread its own contiguous slice as a
 * matrix-vector product reads its rows, so it measures DRAM, not cache. LP_ISA=ref (as for
 * the trace kernels) measures the plain C loops, which is what the reference kernels can use. */
#define _POSIX_C_SOURCE 200809L
#include "estimate/estimate.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/platform.h"
#include "estimate/estimate_internal.h"

#define DEFAULT_READ_BYTES ((uint64_t)256 << 20)
#define FMA_ROUNDS 3
#define FMA_SECONDS 0.04 /* per round and thread */
/* A round reads 256 MiB in about 10 ms: many rounds cost little, and the best of them is the
 * one the other jobs of a shared machine disturbed least. */
#define READ_ROUNDS 12
#define MAX_ROUNDS 16 /* the warm-up round and the timed ones */
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

/* The threads of a measurement stay alive for all its rounds and meet at a spinning barrier
 * before each one, so a round times the loop alone: no thread creation, no wake-up from a
 * condition variable (which on a loaded machine let one thread start late and read the round
 * as a lower bandwidth). Each thread stamps its own start and end; a round lasts from the
 * first start to the last end. */
typedef struct barrier {
    atomic_int go; /* 0 until every thread exists, then 1 (run) or -1 (one failed to start) */
    atomic_int arrived;
    int n;
} barrier;

typedef struct worker {
    barrier *meet;
    bool avx2, read; /* which loop */
    int64_t iters;   /* FMA */
    const unsigned char *buf;
    size_t bytes;    /* read: this thread's slice */
    int rounds;
    double start[MAX_ROUNDS], end[MAX_ROUNDS];
    double sink;     /* the loop's result, kept so it is not optimized away */
} worker;

static void *run_worker(void *arg)
{
    worker *w = arg;
    while (atomic_load(&w->meet->go) == 0)
        ;
    if (atomic_load(&w->meet->go) < 0)
        return NULL;
    for (int r = 0; r < w->rounds; r++) {
        atomic_fetch_add(&w->meet->arrived, 1);
        while (atomic_load(&w->meet->arrived) < w->meet->n * (r + 1))
            ;
        w->start[r] = now_seconds();
        if (w->read)
            w->sink += (double)(w->avx2 ? lp_est_read_avx2(w->buf, w->bytes)
                                        : read_ref(w->buf, w->bytes));
        else
            w->sink += w->avx2 ? lp_est_fma_loop_avx2(w->iters) : fma_loop_ref(w->iters);
        w->end[r] = now_seconds();
    }
    return NULL;
}

/* Runs w[0..n) for their rounds, the caller being thread 0; *best = the shortest round (first
 * start to last end) after the first, which warms the caches, the TLB and the clocks. */
static lp_status run_rounds(worker *w, int n, double *best, lp_error *err)
{
    pthread_t threads[MAX_THREADS];
    barrier meet = {0, 0, n};
    int made = 1;
    for (int i = 0; i < n; i++)
        w[i].meet = &meet;
    for (; made < n; made++)
        if (pthread_create(&threads[made], NULL, run_worker, &w[made]) != 0)
            break;
    atomic_store(&meet.go, made < n ? -1 : 1); /* all or none of them run */
    if (made == n)
        run_worker(&w[0]);
    for (int i = 1; i < made; i++)
        pthread_join(threads[i], NULL);
    if (made < n)
        return lp_error_set(err, LP_ERR_NOMEM, "--hw local: cannot start %d threads", n);
    *best = HUGE_VAL;
    for (int r = 1; r < w[0].rounds; r++) {
        double first = w[0].start[r], last = w[0].end[r];
        for (int i = 1; i < n; i++) {
            first = w[i].start[r] < first ? w[i].start[r] : first;
            last = w[i].end[r] > last ? w[i].end[r] : last;
        }
        if (last - first < *best)
            *best = last - first;
    }
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
    worker *w = calloc((size_t)n, sizeof *w);
    if (!w)
        return lp_error_set(err, LP_ERR_NOMEM, "--hw local: out of memory for %d threads", n);
    for (int i = 0; i < n; i++) {
        w[i].avx2 = avx2;
        w[i].iters = iters;
        w[i].rounds = 1 + FMA_ROUNDS;
    }
    double seconds;
    lp_status st = run_rounds(w, n, &seconds, err);
    *flops_per_s = st == LP_OK && seconds > 0 ? flops_per_thread * n / seconds : 0;
    free(w);
    return st;
}

/* The timed rounds over `slice` bytes per thread from buf. */
static lp_status read_rounds(int n, const unsigned char *buf, size_t slice, int rounds,
                             double *bytes_per_s, lp_error *err)
{
    worker *w = calloc((size_t)n, sizeof *w);
    if (!w)
        return lp_error_set(err, LP_ERR_NOMEM, "--hw local: out of memory for %d threads", n);
    bool avx2 = use_avx2();
    for (int i = 0; i < n; i++) {
        w[i].avx2 = avx2;
        w[i].read = true;
        w[i].buf = buf + (size_t)i * slice;
        w[i].bytes = slice;
        w[i].rounds = 1 + rounds;
    }
    double seconds;
    lp_status st = run_rounds(w, n, &seconds, err);
    *bytes_per_s = st == LP_OK && seconds > 0 ? (double)(slice * (size_t)n) / seconds : 0;
    free(w);
    return st;
}

static int read_threads(int threads)
{
    int n = threads > 0 ? threads : lp_cpu_count();
    return n > MAX_THREADS ? MAX_THREADS : n;
}

lp_status lp_est_read_bandwidth(int threads, uint64_t bytes, double *bytes_per_s, lp_error *err)
{
    int n = read_threads(threads);
    bytes = bytes ? bytes : DEFAULT_READ_BYTES;
    size_t slice = (size_t)(bytes / (uint64_t)n) / 128 * 128; /* whole 128-byte steps */
    if (slice == 0)
        return lp_error_set(err, LP_ERR_RANGE, "--hw local: %llu bytes to read over %d threads",
                            (unsigned long long)bytes, n);
    unsigned char *buf = aligned_alloc(64, slice * (size_t)n);
    if (!buf)
        return lp_error_set(err, LP_ERR_NOMEM, "--hw local: out of memory for a %zu MiB read",
                            slice * (size_t)n >> 20);
    /* each thread's slice is first touched by the memset here; the warm-up round then maps
     * whatever the kernel deferred, so the timed rounds read memory, not page faults */
    memset(buf, 1, slice * (size_t)n);
    lp_status st = read_rounds(n, buf, slice, READ_ROUNDS, bytes_per_s, err);
    free(buf);
    return st;
}

lp_status lp_est_read_bandwidth_of(int threads, const void *buf, uint64_t bytes, int rounds,
                                   double *bytes_per_s, lp_error *err)
{
    int n = read_threads(threads);
    /* whole 128-byte steps from a 64-byte boundary inside the buffer */
    uintptr_t start = ((uintptr_t)buf + 63) / 64 * 64;
    uint64_t usable = bytes > start - (uintptr_t)buf ? bytes - (start - (uintptr_t)buf) : 0;
    size_t slice = (size_t)(usable / (uint64_t)n) / 128 * 128;
    if (slice == 0)
        return lp_error_set(err, LP_ERR_RANGE, "bandwidth: %llu bytes to read over %d threads",
                            (unsigned long long)bytes, n);
    return read_rounds(n, (const unsigned char *)start, slice, rounds > 0 ? rounds : READ_ROUNDS,
                       bytes_per_s, err);
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
        st = lp_est_read_bandwidth(n, read_bytes, &out->bytes_per_s, err);
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
