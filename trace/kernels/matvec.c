/* lp_linear's weight checks, and lp_matvec: one vector times a weight matrix read in its stored
 * format (decode's step). The row kernels (row_dot_* in the dispatch table) widen each block to
 * f32 in registers, so the weights are streamed once and never copied; the pool's threads take
 * the rows chunk by chunk, over every matrix of a group (lp_matvec_group: q|k|v, gate|up) in one
 * run. lp_matvec_int8 quantizes x to int8 once instead and takes the row_dot_*_i8 kernels for
 * Q8_0 / Q4_K / MXFP4 (trace/README.md, "int8 activations"). */
#include "trace/kernels/kernels.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "inspect/formats/quant.h"
#include "trace/kernels/kernels_internal.h"

static bool linear_dtype_ok(lp_dtype dtype)
{
    if (dtype == LP_DTYPE_F32 || dtype == LP_DTYPE_F16 || dtype == LP_DTYPE_BF16)
        return true;
    return lp_dtype_get(dtype)->is_quant && lp_dequantize_supported(dtype);
}

/* The weight matrix lp_linear can compute with: a supported dtype, whole blocks per row, stored
 * rows that fit their stride. */
lp_status lp_linear_check(int64_t m, const lp_matrix *w, lp_error *err)
{
    const lp_dtype_info *info = lp_dtype_get(w->dtype);
    if (!linear_dtype_ok(w->dtype))
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "linear: weight dtype %s not supported",
                            info->name);
    if (m < 0 || w->rows < 0 || w->cols < 0)
        return lp_error_set(err, LP_ERR_RANGE, "linear: negative shape m=%lld [%lld, %lld]",
                            (long long)m, (long long)w->rows, (long long)w->cols);
    if (w->transposed && info->is_quant)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "linear: transposed (Conv1D) weights in %s not supported (f32/f16/bf16 only)",
                            info->name);
    if (info->is_quant && w->cols % info->block_elems != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "linear: %s row of %lld values is not a whole number of %u-value blocks",
                            info->name, (long long)w->cols, info->block_elems);
    uint64_t stored_row_elems = (uint64_t)(w->transposed ? w->rows : w->cols), need;
    if (!lp_dtype_bytes_for(w->dtype, stored_row_elems, &need))
        return lp_error_set(err, LP_ERR_RANGE, "linear: row of %llu %s values overflows",
                            (unsigned long long)stored_row_elems, info->name);
    if (w->row_bytes < need)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "linear: row stride %llu bytes is less than one %s row of %llu values (%llu bytes)",
                            (unsigned long long)w->row_bytes, info->name,
                            (unsigned long long)stored_row_elems, (unsigned long long)need);
    return LP_OK;
}

bool lp_matvec_supported(lp_dtype dtype)
{
    return dtype == LP_DTYPE_F32 || dtype == LP_DTYPE_F16 || dtype == LP_DTYPE_BF16 ||
           dtype == LP_DTYPE_Q8_0 || dtype == LP_DTYPE_Q4_K || dtype == LP_DTYPE_MXFP4;
}

static lp_row_dot_fn row_dot_for(const lp_kernel_table *kt, lp_dtype dtype)
{
    switch (dtype) {
    case LP_DTYPE_F32: return kt->row_dot_f32;
    case LP_DTYPE_F16: return kt->row_dot_f16;
    case LP_DTYPE_BF16: return kt->row_dot_bf16;
    case LP_DTYPE_Q8_0: return kt->row_dot_q8_0;
    case LP_DTYPE_Q4_K: return kt->row_dot_q4_k;
    case LP_DTYPE_MXFP4: return kt->row_dot_mxfp4;
    default: return NULL;
    }
}

/* The int8-activation row kernel of a dtype, NULL for the dtypes that keep x in float. */
static lp_row_dot_i8_fn row_dot_i8_for(const lp_kernel_table *kt, lp_dtype dtype)
{
    switch (dtype) {
    case LP_DTYPE_Q8_0: return kt->row_dot_q8_0_i8;
    case LP_DTYPE_Q4_K: return kt->row_dot_q4_k_i8;
    case LP_DTYPE_MXFP4: return kt->row_dot_mxfp4_i8;
    default: return NULL;
    }
}

/* Rows go in chunks of about this many weight bytes. Thread t owns a contiguous slice of the
 * chunks and walks it through its own counter, so each thread streams one range as a static split
 * would; a thread that finishes its slice takes the next chunks of the others' through their
 * counters, so a preempted or slower thread (a loaded machine) leaves the rest of its slice to
 * the others instead of stalling the run. */
enum { CHUNK_BYTES = 64 << 10, MAX_SLICES = 64 };

typedef struct matvec_slice {
    _Alignas(64) atomic_int_fast64_t next; /* own cache line: the owner bumps it per chunk */
    int64_t end;
} matvec_slice;

/* x as the row kernels read it: float, plus what the int8 paths and Q4_K's float min term need. */
typedef struct matvec_x {
    const float *x;
    const float *x_sums;  /* [k / 32] float group sums, or NULL */
    const int8_t *xq32;   /* blocks of 32 (Q8_0, MXFP4), or NULL: x stays float */
    const float *xd32;
    const int32_t *x_off32; /* -128 * the sum of each block of xq32 */
    const int8_t *xq256;  /* blocks of 256 with xs16 (Q4_K), or NULL */
    const float *xd256;
    const int16_t *xs16;
} matvec_x;

typedef struct matvec_part_job {
    lp_row_dot_fn dot;
    lp_row_dot_i8_fn dot_i8; /* set: x is read as xq/xd/xs16 instead */
    const int8_t *xq;
    const float *xd;
    const int16_t *xs16;
    const int32_t *x_off;
    const uint8_t *data;
    uint64_t row_bytes;
    int64_t rows, cols, chunk_rows, first_chunk;
    const float *bias;
    float *y;
} matvec_part_job;

typedef struct matvec_job {
    matvec_part_job parts[LP_MATVEC_MAX_PARTS];
    int n_parts;
    const float *x, *x_sums;
    int64_t n_chunks;
    int n_slices;
    matvec_slice slices[MAX_SLICES];
} matvec_job;

static void matvec_rows(const matvec_job *j, const matvec_part_job *p, int64_t r0, int64_t r1)
{
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = p->data + (uint64_t)r * p->row_bytes;
        float v = p->dot_i8 ? p->dot_i8(row, p->xq, p->xd, p->xs16, p->x_off, p->cols)
                            : p->dot(row, j->x, j->x_sums, p->cols);
        p->y[r] = p->bias ? v + p->bias[r] : v;
    }
}

static void matvec_chunk(const matvec_job *j, int64_t c)
{
    int part = 0;
    while (part + 1 < j->n_parts && c >= j->parts[part + 1].first_chunk)
        part++;
    const matvec_part_job *p = &j->parts[part];
    int64_t r0 = (c - p->first_chunk) * p->chunk_rows;
    int64_t r1 = r0 + p->chunk_rows < p->rows ? r0 + p->chunk_rows : p->rows;
    matvec_rows(j, p, r0, r1);
}

/* Task t: its own slice, then what is left of the others', each from its counter. */
static void matvec_task(void *ctx, int64_t task)
{
    matvec_job *j = ctx;
    for (int i = 0; i < j->n_slices; i++) {
        matvec_slice *s = &j->slices[(task + i) % j->n_slices];
        for (;;) {
            int64_t c = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
            if (c >= s->end)
                break;
            matvec_chunk(j, c);
        }
    }
}

/* x as int8 in blocks of `block` values (32 or 256), as llama.cpp's quantize_row_q8_0/q8_K:
 * d = max|x| / 127, q = round(x / d); xs16 = sums of 16 consecutive q (for block 256), x_off =
 * -128 * each block's sum (for block 32, the row kernels' lp_row_dot_i8_fn). False
 * when x holds a NaN or infinity, which int8 cannot carry: the caller then keeps x in float so
 * a broken activation still shows as NaN downstream. */
static bool quantize_x(const float *x, int64_t k, int block, int8_t *xq, float *xd, int16_t *xs16,
                       int32_t *x_off)
{
    for (int64_t b = 0; b < k / block; b++) {
        const float *xb = x + b * block;
        float amax = 0.0f;
        for (int j = 0; j < block; j++) {
            if (!isfinite(xb[j])) /* fmaxf would drop a NaN */
                return false;
            amax = fmaxf(amax, fabsf(xb[j]));
        }
        float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        xd[b] = d;
        for (int j = 0; j < block; j++) {
            float v = roundf(xb[j] * id);
            xq[b * block + j] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
        }
    }
    if (xs16)
        for (int64_t i = 0; i < k / 16; i++) {
            int s = 0;
            for (int j = 0; j < 16; j++)
                s += xq[16 * i + j];
            xs16[i] = (int16_t)s;
        }
    for (int64_t b = 0; x_off && b < k / block; b++) {
        int32_t s = 0;
        for (int j = 0; j < block; j++)
            s += xq[b * block + j];
        x_off[b] = -128 * s;
    }
    return true;
}

/* Q4_K's min term in float: the sum of x over each group of 32 values. */
static void group_sums(const float *x, int64_t k, float *x_sums)
{
    for (int64_t g = 0; g < k / 32; g++) {
        float s = 0.0f;
        for (int j = 0; j < 32; j++)
            s += x[32 * g + j];
        x_sums[g] = s;
    }
}

static lp_status part_check(const lp_matvec_part *part, int64_t cols, lp_error *err)
{
    const lp_matrix *w = part->w;
    lp_status st = lp_linear_check(1, w, err);
    if (st != LP_OK)
        return st;
    if (!lp_matvec_supported(w->dtype) || w->transposed)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "matvec: %s%s weights not supported",
                            w->transposed ? "transposed " : "", lp_dtype_get(w->dtype)->name);
    if (w->cols != cols)
        return lp_error_set(err, LP_ERR_RANGE,
                            "matvec group: a matrix of %lld columns beside one of %lld (one x)",
                            (long long)w->cols, (long long)cols);
    return LP_OK;
}

/* x as every part needs it, in one allocation *scratch (caller frees): int8 blocks of 32 and of
 * 256 for the int8 row kernels (int8_x), float group sums for Q4_K rows that keep x in float.
 * An x int8 cannot hold (NaN, infinity) stays float, so a broken activation still shows. */
static lp_status prepare_x(const lp_kernel_table *kt, const float *x, const lp_matvec_part *parts,
                           int n_parts, bool int8_x, matvec_x *mx, void **scratch, lp_error *err)
{
    int64_t k = parts[0].w->cols;
    bool want32 = false, want256 = false, want_sums = false;
    for (int i = 0; i < n_parts; i++) {
        bool q4k = parts[i].w->dtype == LP_DTYPE_Q4_K, i8 = int8_x && row_dot_i8_for(kt, parts[i].w->dtype);
        want32 |= i8 && !q4k;
        want256 |= i8 && q4k;
        want_sums |= q4k;
    }
    *mx = (matvec_x){.x = x};
    *scratch = NULL;
    if (!want32 && !want256 && !want_sums)
        return LP_OK;
    /* floats and int32 first (aligned), then int16, then bytes */
    size_t n_floats = (size_t)(k / 32) * 3 + (size_t)(k / 256), n_i16 = (size_t)(k / 16);
    uint8_t *buf = malloc(n_floats * sizeof(float) + n_i16 * sizeof(int16_t) + 2 * (size_t)k);
    if (!buf)
        return lp_error_set(err, LP_ERR_NOMEM, "matvec: int8 copies of %lld activations",
                            (long long)k);
    *scratch = buf;
    float *x_sums = (float *)(void *)buf, *xd32 = x_sums + k / 32, *xd256 = xd32 + k / 32;
    int32_t *x_off32 = (int32_t *)(void *)(xd256 + k / 256);
    int16_t *xs16 = (int16_t *)(void *)(x_off32 + k / 32);
    int8_t *xq32 = (int8_t *)(void *)(xs16 + k / 16), *xq256 = xq32 + k;
    bool finite = true;
    if (want32 && (finite = quantize_x(x, k, 32, xq32, xd32, NULL, x_off32))) {
        mx->xq32 = xq32;
        mx->xd32 = xd32;
        mx->x_off32 = x_off32;
    }
    if (want256 && finite && quantize_x(x, k, 256, xq256, xd256, xs16, NULL)) {
        mx->xq256 = xq256;
        mx->xd256 = xd256;
        mx->xs16 = xs16;
    }
    if (want_sums && !mx->xq256) {
        group_sums(x, k, x_sums);
        mx->x_sums = x_sums;
    }
    return LP_OK;
}

/* A matrix smaller than threads x CHUNK_BYTES still goes to every thread, in one chunk each. */
static void part_job_init(const lp_kernel_table *kt, const lp_matvec_part *part,
                          const matvec_x *mx, int64_t threads, int64_t first_chunk,
                          matvec_part_job *pj)
{
    const lp_matrix *w = part->w;
    bool q4k = w->dtype == LP_DTYPE_Q4_K;
    int64_t chunk_rows = (int64_t)(CHUNK_BYTES / (w->row_bytes > 0 ? w->row_bytes : 1));
    int64_t share = (w->rows + threads - 1) / threads;
    chunk_rows = chunk_rows < share ? chunk_rows : share;
    *pj = (matvec_part_job){.dot = row_dot_for(kt, w->dtype), .data = w->data,
                            .row_bytes = w->row_bytes, .rows = w->rows, .cols = w->cols,
                            .chunk_rows = chunk_rows < 1 ? 1 : chunk_rows,
                            .first_chunk = first_chunk, .bias = part->bias, .y = part->y};
    const int8_t *xq = q4k ? mx->xq256 : mx->xq32;
    lp_row_dot_i8_fn dot_i8 = row_dot_i8_for(kt, w->dtype);
    if (xq && dot_i8) {
        pj->dot_i8 = dot_i8;
        pj->xq = xq;
        pj->xd = q4k ? mx->xd256 : mx->xd32;
        pj->xs16 = mx->xs16;
        pj->x_off = q4k ? NULL : mx->x_off32;
    }
}

/* int8_x: x quantized to int8 once, then integer dot products per block (the widening of every
 * weight to f32 makes these rows compute-bound). Otherwise x stays f32 and Q4_K's min term
 * takes the float group sums. */
static lp_status matvec_run(const lp_kernel_table *kt, const float *x, const lp_matvec_part *parts,
                            int n_parts, lp_pool *pool, bool int8_x, lp_error *err)
{
    LP_ASSERT(n_parts >= 1 && n_parts <= LP_MATVEC_MAX_PARTS);
    for (int i = 0; i < n_parts; i++) {
        lp_status st = part_check(&parts[i], parts[0].w->cols, err);
        if (st != LP_OK)
            return st;
    }
    matvec_x mx;
    void *scratch;
    lp_status st = prepare_x(kt, x, parts, n_parts, int8_x, &mx, &scratch, err);
    if (st != LP_OK)
        return st;
    matvec_job job = {.n_parts = n_parts, .x = x, .x_sums = mx.x_sums};
    int64_t threads = pool && !lp_pool_in_worker() ? lp_pool_threads(pool) : 1;
    threads = threads < MAX_SLICES ? threads : MAX_SLICES;
    int64_t n_chunks = 0;
    for (int i = 0; i < n_parts; i++) {
        part_job_init(kt, &parts[i], &mx, threads, n_chunks, &job.parts[i]);
        n_chunks += (job.parts[i].rows + job.parts[i].chunk_rows - 1) / job.parts[i].chunk_rows;
    }
    job.n_chunks = n_chunks;
    threads = threads < n_chunks ? threads : n_chunks;
    job.n_slices = threads > 1 ? (int)threads : 1;
    for (int t = 0; t < job.n_slices; t++) {
        atomic_init(&job.slices[t].next, n_chunks * t / job.n_slices);
        job.slices[t].end = n_chunks * (t + 1) / job.n_slices;
    }
    if (job.n_slices > 1)
        lp_pool_run(pool, job.n_slices, matvec_task, &job);
    else if (n_chunks > 0)
        matvec_task(&job, 0);
    free(scratch);
    return LP_OK;
}

lp_status lp_matvec_group(const float *x, const lp_matvec_part *parts, int n_parts, bool int8_x,
                          lp_pool *pool, lp_error *err)
{
    return matvec_run(lp_kernels_table(), x, parts, n_parts, pool, int8_x, err);
}

lp_status lp_matvec(const float *x, const lp_matrix *w, const float *bias, float *y, lp_pool *pool,
                    lp_error *err)
{
    lp_matvec_part part = {w, bias, y};
    return matvec_run(lp_kernels_table(), x, &part, 1, pool, false, err);
}

lp_status lp_matvec_int8(const float *x, const lp_matrix *w, const float *bias, float *y,
                         lp_pool *pool, lp_error *err)
{
    lp_matvec_part part = {w, bias, y};
    return matvec_run(lp_kernels_table(), x, &part, 1, pool, true, err);
}

lp_status lp_matvec_ref(const float *x, const lp_matrix *w, const float *bias, float *y,
                        lp_error *err)
{
    lp_matvec_part part = {w, bias, y};
    return matvec_run(&lp_kernels_ref_table, x, &part, 1, NULL, false, err);
}
