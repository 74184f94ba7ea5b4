/* lp_pool: persistent worker threads with a static, deterministic partition of each run.
 *
 * Slice s of every lp_pool_run is tasks [s*n/T, (s+1)*n/T); the caller runs the last slice and
 * worker w (1..T-1) slice T-1-w, so which thread computes what depends only on the thread count.
 * Workers spin briefly on the run counter before sleeping on a condition variable: the forward
 * pass issues many short runs back to back and a futex wake-up per run would cost more than the
 * run itself; a run whose workers are all still spinning touches no lock (the caller wakes the
 * condition variable only when a worker counted itself asleep, and a worker signals `done` only
 * when the caller counted itself waiting: both by the seq_cst store-then-load of a flag against
 * the other side's counter, so no wake-up is lost). lp_pool_get_counts counts the runs and the
 * sleeping wake-ups (what the decode step pays per matrix). A run issued from inside a
 * task (nested parallelism) executes serially on the calling thread instead of deadlocking.
 */
#define _POSIX_C_SOURCE 200809L
#include "trace/kernels/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "trace/kernels/kernels_internal.h"

enum { SPIN_ITERATIONS = 20000 };

typedef struct pool_worker {
    struct lp_pool *pool;
    int index;
    pthread_t thread;
} pool_worker;

struct lp_pool {
    int n_threads;
    int n_started;
    pool_worker *workers; /* [n_threads - 1] */
    pthread_mutex_t run_lock; /* one run at a time per pool */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t done;
    atomic_uint_fast64_t generation; /* bumped per run */
    atomic_int pending;              /* workers still in the current run */
    atomic_bool stop;
    atomic_int sleepers;             /* workers on (or about to wait on) `wake` */
    atomic_bool caller_waiting;      /* the caller on (or about to wait on) `done` */
    atomic_uint_fast64_t n_runs;     /* runs handed to the workers */
    atomic_uint_fast64_t n_sleeps;   /* worker wake-ups that found it asleep on `wake` */
    /* the current run */
    void (*fn)(void *ctx, int64_t task);
    void *ctx;
    int64_t n_tasks;
    /* Per-task scratch kept between runs (lp_pool_scratch): re-faulting megabytes of fresh pages
     * on every GEMM costs time and serializes threads on the kernel's mm lock. */
    void **scratch;        /* [n_threads] */
    size_t *scratch_bytes; /* [n_threads] */
};

static _Thread_local bool in_worker;

bool lp_pool_in_worker(void) { return in_worker; }

/* Thread `index` runs slice (T - 1 - index): the caller (index 0) takes the last slice, which is
 * never empty, so a run with fewer tasks than threads does not leave the caller waiting on a
 * worker that was still asleep. */
static void run_slice(lp_pool *pool, int index)
{
    int64_t n = pool->n_tasks, t = pool->n_threads, slice = t - 1 - index;
    int64_t begin = n * slice / t, end = n * (slice + 1) / t;
    for (int64_t task = begin; task < end; task++)
        pool->fn(pool->ctx, task);
}

static void *worker_main(void *arg)
{
    pool_worker *self = arg;
    lp_pool *pool = self->pool;
    uint_fast64_t seen = 0;
    in_worker = true;
    for (;;) {
        uint_fast64_t gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        for (int spin = 0; gen == seen && spin < SPIN_ITERATIONS; spin++) {
            if (atomic_load_explicit(&pool->stop, memory_order_relaxed))
                break;
            gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        }
        if (gen == seen) {
            pthread_mutex_lock(&pool->lock);
            atomic_fetch_add(&pool->sleepers, 1);
            bool slept = false;
            while ((gen = atomic_load(&pool->generation)) == seen && !atomic_load(&pool->stop)) {
                pthread_cond_wait(&pool->wake, &pool->lock);
                slept = true;
            }
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->lock);
            if (slept)
                atomic_fetch_add_explicit(&pool->n_sleeps, 1, memory_order_relaxed);
        }
        if (atomic_load(&pool->stop))
            return NULL;
        seen = gen;
        run_slice(pool, self->index);
        if (atomic_fetch_sub(&pool->pending, 1) == 1 && atomic_load(&pool->caller_waiting)) {
            pthread_mutex_lock(&pool->lock);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->lock);
        }
    }
}

lp_status lp_pool_create(int n_threads, lp_pool **out, lp_error *err)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return lp_error_set(err, LP_ERR_RANGE, "thread count %d outside 1..1024", n_threads);
    lp_pool *pool = calloc(1, sizeof *pool);
    if (!pool)
        return lp_error_set(err, LP_ERR_NOMEM, "thread pool: out of memory");
    pool->n_threads = n_threads;
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->stop, false);
    atomic_init(&pool->sleepers, 0);
    atomic_init(&pool->caller_waiting, false);
    atomic_init(&pool->n_runs, 0);
    atomic_init(&pool->n_sleeps, 0);
    pthread_mutex_init(&pool->run_lock, NULL);
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    pool->scratch = calloc((size_t)n_threads, sizeof *pool->scratch);
    pool->scratch_bytes = calloc((size_t)n_threads, sizeof *pool->scratch_bytes);
    if (!pool->scratch || !pool->scratch_bytes) {
        lp_pool_destroy(pool);
        return lp_error_set(err, LP_ERR_NOMEM, "thread pool: out of memory");
    }
    if (n_threads > 1) {
        pool->workers = calloc((size_t)n_threads - 1, sizeof *pool->workers);
        if (!pool->workers) {
            lp_pool_destroy(pool);
            return lp_error_set(err, LP_ERR_NOMEM, "thread pool: out of memory");
        }
    }
    for (int i = 1; i < n_threads; i++) {
        pool_worker *w = &pool->workers[i - 1];
        w->pool = pool;
        w->index = i;
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc != 0) {
            lp_pool_destroy(pool);
            return lp_error_set(err, LP_ERR_NOMEM, "thread pool: cannot start thread %d of %d: %s",
                                i + 1, n_threads, strerror(rc));
        }
        pool->n_started++;
    }
    *out = pool;
    return LP_OK;
}

void lp_pool_destroy(lp_pool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->lock);
    atomic_store(&pool->stop, true);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 0; i < pool->n_started; i++)
        pthread_join(pool->workers[i].thread, NULL);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    pthread_mutex_destroy(&pool->lock);
    pthread_mutex_destroy(&pool->run_lock);
    if (pool->scratch)
        for (int i = 0; i < pool->n_threads; i++)
            free(pool->scratch[i]);
    free(pool->scratch);
    free(pool->scratch_bytes);
    free(pool->workers);
    free(pool);
}

void *lp_pool_scratch(lp_pool *pool, int64_t task, size_t bytes)
{
    if (!pool || task < 0 || task >= pool->n_threads)
        return NULL;
    if (pool->scratch_bytes[task] >= bytes)
        return pool->scratch[task];
    free(pool->scratch[task]);
    pool->scratch[task] = NULL;
    pool->scratch_bytes[task] = 0;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded < bytes)
        return NULL;
    pool->scratch[task] = aligned_alloc(64, rounded);
    if (pool->scratch[task])
        pool->scratch_bytes[task] = rounded;
    return pool->scratch[task];
}

int lp_pool_threads(const lp_pool *pool) { return pool ? pool->n_threads : 1; }

void lp_pool_run(lp_pool *pool, int64_t n_tasks, void (*fn)(void *ctx, int64_t task), void *ctx)
{
    if (n_tasks <= 0)
        return;
    if (!pool || in_worker) {
        for (int64_t task = 0; task < n_tasks; task++)
            fn(ctx, task);
        return;
    }
    pthread_mutex_lock(&pool->run_lock); /* also guards the per-task scratch */
    if (pool->n_threads == 1) {
        in_worker = true;
        for (int64_t task = 0; task < n_tasks; task++)
            fn(ctx, task);
        in_worker = false;
        pthread_mutex_unlock(&pool->run_lock);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n_tasks = n_tasks;
    atomic_store_explicit(&pool->pending, pool->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->n_runs, 1, memory_order_relaxed);
    atomic_fetch_add(&pool->generation, 1);
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->lock);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->lock);
    }

    in_worker = true; /* a nested run from our own slice stays serial */
    run_slice(pool, 0);
    in_worker = false;

    for (int spin = 0; spin < SPIN_ITERATIONS; spin++)
        if (atomic_load_explicit(&pool->pending, memory_order_acquire) == 0)
            break;
    if (atomic_load_explicit(&pool->pending, memory_order_acquire) != 0) {
        pthread_mutex_lock(&pool->lock);
        atomic_store(&pool->caller_waiting, true);
        while (atomic_load(&pool->pending) != 0)
            pthread_cond_wait(&pool->done, &pool->lock);
        atomic_store(&pool->caller_waiting, false);
        pthread_mutex_unlock(&pool->lock);
    }
    pthread_mutex_unlock(&pool->run_lock);
}

void lp_pool_get_counts(const lp_pool *pool, lp_pool_counts *out)
{
    memset(out, 0, sizeof *out);
    if (!pool)
        return;
    out->runs = atomic_load_explicit(&((lp_pool *)pool)->n_runs, memory_order_relaxed);
    out->sleeps = atomic_load_explicit(&((lp_pool *)pool)->n_sleeps, memory_order_relaxed);
}
