/* lp_linear's weight checks, and lp_matvec: one vector times a weight matrix read in its stored format (decode's step). The
 * row kernels (row_dot_* in the dispatch table) widen each block to f32 in registers, so the
 * weights are streamed once and never copied; the rows are split into one contiguous range per
 * pool thread. lp_matvec_int8 quantizes x to int8 once instead and takes the row_dot_*_i8 kernels
 * for Q8_0 / Q4_K / MXFP4 (trace/README.md, "int8 activations"). */
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

typedef struct matvec_job {
    lp_row_dot_fn dot;
    lp_row_dot_i8_fn dot_i8; /* set: x is read as xq/xd/xs16 instead */
    const float *x, *x_sums, *bias;
    const int8_t *xq;
    const float *xd;
    const int16_t *xs16;
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
        float v = j->dot_i8 ? j->dot_i8(row, j->xq, j->xd, j->xs16, j->cols)
                            : j->dot(row, j->x, j->x_sums, j->cols);
        j->y[r] = j->bias ? v + j->bias[r] : v;
    }
}

/* x as int8 in blocks of `block` values (32 or 256), as llama.cpp's quantize_row_q8_0/q8_K:
 * d = max|x| / 127, q = round(x / d); xs16 = sums of 16 consecutive q (for block 256). False
 * when x holds a NaN or infinity, which int8 cannot carry: the caller then keeps x in float so
 * a broken activation still shows as NaN downstream. */
static bool quantize_x(const float *x, int64_t k, int block, int8_t *xq, float *xd, int16_t *xs16)
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

static lp_status matvec_run(const lp_kernel_table *kt, const float *x, const lp_matrix *w,
                            const float *bias, float *y, lp_pool *pool, bool int8_x, lp_error *err)
{
    lp_status st = lp_linear_check(1, w, err);
    if (st != LP_OK)
        return st;
    if (!lp_matvec_supported(w->dtype) || w->transposed)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "matvec: %s%s weights not supported",
                            w->transposed ? "transposed " : "", lp_dtype_get(w->dtype)->name);
    if (w->rows == 0)
        return LP_OK;
    int64_t threads = pool ? lp_pool_threads(pool) : 1;
    matvec_job job = {row_dot_for(kt, w->dtype), NULL, x, NULL, bias, NULL, NULL, NULL,
                      w->data, w->row_bytes, w->rows, w->cols,
                      threads < w->rows ? threads : w->rows, y};
    /* int8_x: x quantized to int8 once, then integer dot products per block (the widening of
     * every weight to f32 makes these rows compute-bound). Otherwise, and for an x int8 cannot
     * hold, x stays f32 and Q4_K's min term takes the float group sums. */
    void *scratch = NULL;
    bool q4k = w->dtype == LP_DTYPE_Q4_K;
    lp_row_dot_i8_fn dot_i8 = int8_x ? row_dot_i8_for(kt, w->dtype) : NULL;
    if (dot_i8) {
        int block = q4k ? 256 : 32;
        size_t n_blocks = (size_t)(w->cols / block);
        scratch = malloc((size_t)w->cols + n_blocks * sizeof(float) +
                         (size_t)(w->cols / 16) * sizeof(int16_t));
        if (!scratch)
            return lp_error_set(err, LP_ERR_NOMEM, "matvec: int8 copy of %lld activations",
                                (long long)w->cols);
        float *xd = scratch;
        int16_t *xs16 = (int16_t *)(void *)(xd + n_blocks);
        int8_t *xq = (int8_t *)(void *)(xs16 + w->cols / 16);
        if (quantize_x(x, w->cols, block, xq, xd, q4k ? xs16 : NULL)) {
            job.dot_i8 = dot_i8;
            job.xq = xq;
            job.xd = xd;
            job.xs16 = xs16;
        } else {
            free(scratch);
            scratch = NULL;
        }
    }
    if (q4k && !job.dot_i8) {
        float *x_sums = malloc((size_t)(w->cols / 32) * sizeof *x_sums);
        if (!x_sums)
            return lp_error_set(err, LP_ERR_NOMEM, "matvec: %lld group sums",
                                (long long)(w->cols / 32));
        group_sums(x, w->cols, x_sums);
        scratch = x_sums;
        job.x_sums = x_sums;
    }
    if (pool && job.n_tasks > 1 && !lp_pool_in_worker())
        lp_pool_run(pool, job.n_tasks, matvec_task, &job);
    else
        for (int64_t t = 0; t < job.n_tasks; t++)
            matvec_task(&job, t);
    free(scratch);
    return LP_OK;
}

lp_status lp_matvec(const float *x, const lp_matrix *w, const float *bias, float *y, lp_pool *pool,
                    lp_error *err)
{
    return matvec_run(lp_kernels_table(), x, w, bias, y, pool, false, err);
}

lp_status lp_matvec_int8(const float *x, const lp_matrix *w, const float *bias, float *y,
                         lp_pool *pool, lp_error *err)
{
    return matvec_run(lp_kernels_table(), x, w, bias, y, pool, true, err);
}

lp_status lp_matvec_ref(const float *x, const lp_matrix *w, const float *bias, float *y,
                        lp_error *err)
{
    return matvec_run(&lp_kernels_ref_table, x, w, bias, y, NULL, false, err);
}
