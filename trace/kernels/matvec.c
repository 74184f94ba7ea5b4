/* lp_linear's weight checks, and lp_matvec: one vector times a weight matrix read in its stored format (decode's step). The
 * row kernels (row_dot_* in the dispatch table) widen each block to f32 in registers, so the
 * weights are streamed once and never copied; the rows are split into one contiguous range per
 * pool thread. */
#include "trace/kernels/kernels.h"

#include <math.h>
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
           dtype == LP_DTYPE_Q8_0 || dtype == LP_DTYPE_Q4_K;
}

static lp_row_dot_fn row_dot_for(const lp_kernel_table *kt, lp_dtype dtype)
{
    switch (dtype) {
    case LP_DTYPE_F32: return kt->row_dot_f32;
    case LP_DTYPE_F16: return kt->row_dot_f16;
    case LP_DTYPE_BF16: return kt->row_dot_bf16;
    default: return NULL;
    }
}

static lp_row_dot_q8_fn row_dot_q8_for(const lp_kernel_table *kt, lp_dtype dtype)
{
    switch (dtype) {
    case LP_DTYPE_Q8_0: return kt->row_dot_q8_0;
    case LP_DTYPE_Q4_K: return kt->row_dot_q4_k;
    default: return NULL;
    }
}

/* x in blocks of 32 as int8 with one scale each (round to nearest, |q| <= 127 so the rows'
 * sign trick cannot overflow), and each block's sum d * sum(q) for Q4_K's min term: both terms
 * see the same rounded x, so the row is exactly w . (rounded x) up to float sums. */
static void quantize_x_q8(const float *x, int64_t k, lp_q8_act *xq, float *x_sums)
{
    for (int64_t b = 0; b < k / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fabsf(xb[j]) > amax ? fabsf(xb[j]) : amax;
        float d = amax / 127.0f, inv = d > 0.0f ? 1.0f / d : 0.0f;
        int32_t q_sum = 0;
        xq[b].d = d;
        for (int j = 0; j < 32; j++) {
            xq[b].q[j] = (int8_t)lrintf(xb[j] * inv);
            q_sum += xq[b].q[j];
        }
        x_sums[b] = d * (float)q_sum;
    }
}

typedef struct matvec_job {
    lp_row_dot_fn dot;
    lp_row_dot_q8_fn dot_q8;
    const float *x, *x_sums, *bias;
    const lp_q8_act *xq;
    const uint8_t *data;
    uint64_t row_bytes;
    int64_t rows, cols, n_tasks;
    float *y;
} matvec_job;

static void matvec_task(void *ctx, int64_t task)
{
    const matvec_job *j = ctx;
    int64_t r0 = j->rows * task / j->n_tasks, r1 = j->rows * (task + 1) / j->n_tasks;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = j->data + (uint64_t)r * j->row_bytes;
        float v = j->dot_q8 ? j->dot_q8(row, j->xq, j->x_sums, j->cols)
                            : j->dot(row, j->x, j->x_sums, j->cols);
        j->y[r] = j->bias ? v + j->bias[r] : v;
    }
}

static lp_status matvec_run(const lp_kernel_table *kt, const float *x, const lp_matrix *w,
                            const float *bias, float *y, lp_pool *pool, lp_error *err)
{
    lp_status st = lp_linear_check(1, w, err);
    if (st != LP_OK)
        return st;
    if (!lp_matvec_supported(w->dtype) || w->transposed)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "matvec: %s%s weights not supported",
                            w->transposed ? "transposed " : "", lp_dtype_get(w->dtype)->name);
    if (w->rows == 0)
        return LP_OK;
    /* Q8_0 and Q4_K rows take x quantized per 32 values (and Q4_K the sum of each block) */
    lp_row_dot_q8_fn dot_q8 = row_dot_q8_for(kt, w->dtype);
    int64_t n_blocks = dot_q8 ? w->cols / 32 : 0;
    void *x_blocks = NULL;
    lp_q8_act *xq = NULL;
    float *x_sums = NULL;
    if (n_blocks > 0) {
        x_blocks = malloc((size_t)n_blocks * (sizeof *xq + sizeof *x_sums));
        if (!x_blocks)
            return lp_error_set(err, LP_ERR_NOMEM, "matvec: %lld quantized blocks of x",
                                (long long)n_blocks);
        xq = x_blocks;
        x_sums = (float *)(void *)(xq + n_blocks);
        quantize_x_q8(x, w->cols, xq, x_sums);
    }
    int64_t threads = pool ? lp_pool_threads(pool) : 1;
    matvec_job job = {row_dot_for(kt, w->dtype), dot_q8, x, x_sums, bias, xq, w->data,
                      w->row_bytes, w->rows, w->cols, threads < w->rows ? threads : w->rows, y};
    if (pool && job.n_tasks > 1 && !lp_pool_in_worker())
        lp_pool_run(pool, job.n_tasks, matvec_task, &job);
    else
        for (int64_t t = 0; t < job.n_tasks; t++)
            matvec_task(&job, t);
    free(x_blocks);
    return LP_OK;
}

lp_status lp_matvec(const float *x, const lp_matrix *w, const float *bias, float *y, lp_pool *pool,
                    lp_error *err)
{
    return matvec_run(lp_kernels_table(), x, w, bias, y, pool, err);
}

lp_status lp_matvec_ref(const float *x, const lp_matrix *w, const float *bias, float *y,
                        lp_error *err)
{
    return matvec_run(&lp_kernels_ref_table, x, w, bias, y, NULL, err);
}
