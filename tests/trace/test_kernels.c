/* Kernel tests: every ISA against ref (GEMM on odd shapes, vector kernels), lp_linear on every
 * weight dtype against dequantize-then-ref, thread-count determinism, RoPE against its formula.
 * Attention has its own file (test_attention.c). No timing assertions.
 *
 * Dispatch: every ISA's table is complete (no NULL slot) and is ref's with that ISA's overrides.
 *
 * Error budgets are stated next to each check and the observed worst value is printed, so a
 * regression in accuracy shows up in the log before it crosses the budget. */
#include "kernels_test_util.h"

#include "core/dtype.h"
#include "inspect/formats/quant.h"
#include "trace/kernels/kernels.h"
#include "trace/kernels/kernels_internal.h"

/* ---- GEMM */


/* Budget: |c - ref| <= 2e-6 * sum_p |a_ip b_jp| (+1e-30): float accumulation of k products in
 * kc-long FMA chains is good to ~sqrt(k) * 6e-8 of that sum; observed values are printed. */
static double gemm_check(int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                         const float *c, const float *c0, bool accumulate)
{
    double worst = 0.0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double sum = accumulate ? (double)c0[i * n + j] : 0.0, mag = accumulate ? fabs(sum) : 0.0;
            for (int64_t p = 0; p < k; p++) {
                sum += (double)a[i * k + p] * (double)b[j * k + p];
                mag += fabs((double)a[i * k + p] * (double)b[j * k + p]);
            }
            double got = (double)c[i * n + j];
            if (isnan(got)) {
                fail_msg("c[%lld][%lld] is NaN (m=%lld n=%lld k=%lld)", (long long)i, (long long)j,
                         (long long)m, (long long)n, (long long)k);
            }
            double rel = fabs(got - sum) / (mag + 1e-30);
            if (fabs(got - sum) > 1e-30 && rel > worst)
                worst = rel;
        }
    return worst;
}

static void test_gemm_odd_shapes(void **state)
{
    (void)state;
    static const int64_t ms[] = {1, 5, 7, 13, 50};
    static const int64_t ns[] = {1, 3, 17, 33, 100};
    static const int64_t ks[] = {0, 1, 7, 4099};
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    lp_pool *pool;
    assert_int_equal(lp_pool_create(2, &pool, NULL), LP_OK);
    for (int s = 0; s < n_isas; s++) {
        assert_true(lp_kernels_set_isa(isas[s]));
        double worst = 0.0;
        for (size_t ik = 0; ik < sizeof ks / sizeof ks[0]; ik++)
            for (size_t im = 0; im < sizeof ms / sizeof ms[0]; im++)
                for (size_t in = 0; in < sizeof ns / sizeof ns[0]; in++) {
                    int64_t m = ms[im], n = ns[in], k = ks[ik];
                    if (k == 4099 && m * n > 700)
                        continue; /* keep the double-precision check fast */
                    float *a = rnd_array(m * k), *b = rnd_array(n * k);
                    float *c = nan_array(m * n), *c0 = rnd_array(m * n);
                    lp_gemm_f32(m, n, k, a, k, b, k, c, n, false, (im + in) % 2 ? pool : NULL);
                    double w = gemm_check(m, n, k, a, b, c, NULL, false);
                    if (w > worst)
                        worst = w;
                    /* accumulate into existing values */
                    memcpy(c, c0, (size_t)(m * n) * sizeof(float));
                    lp_gemm_f32(m, n, k, a, k, b, k, c, n, true, pool);
                    w = gemm_check(m, n, k, a, b, c, c0, true);
                    if (w > worst)
                        worst = w;
                    free(a);
                    free(b);
                    free(c);
                    free(c0);
                }
        /* several MC row blocks, several NC column blocks (one thread), several KC blocks */
        static const int64_t blocks[][3] = {{300, 40, 50}, {7, 4100, 300}, {13, 20, 777}};
        for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
            int64_t m = blocks[bi][0], n = blocks[bi][1], k = blocks[bi][2];
            float *a = rnd_array(m * k), *b = rnd_array(n * k), *c = nan_array(m * n);
            lp_gemm_f32(m, n, k, a, k, b, k, c, n, false, NULL);
            double w = gemm_check(m, n, k, a, b, c, NULL, false);
            if (w > worst)
                worst = w;
            free(a);
            free(b);
            free(c);
        }
        printf("gemm %s: worst |err| / sum|ab| = %.2e (budget 2e-6)\n", lp_isa_name(isas[s]), worst);
        assert_true(worst <= 2e-6);
    }
    lp_pool_destroy(pool);
}

/* Leading dimensions wider than the matrices: sub-matrix views. */
static void test_gemm_strides(void **state)
{
    (void)state;
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    const int64_t m = 11, n = 19, k = 300, lda = 305, ldb = 301, ldc = 23;
    float *a = rnd_array(m * lda), *b = rnd_array(n * ldb);
    for (int s = 0; s < n_isas; s++) {
        assert_true(lp_kernels_set_isa(isas[s]));
        float *c = nan_array(m * ldc);
        lp_gemm_f32(m, n, k, a, lda, b, ldb, c, ldc, false, NULL);
        float *ref = nan_array(m * ldc);
        lp_gemm_f32_ref(m, n, k, a, lda, b, ldb, ref, ldc, false);
        for (int64_t i = 0; i < m; i++) {
            for (int64_t j = 0; j < n; j++)
                assert_true(fabsf(c[i * ldc + j] - ref[i * ldc + j]) <= 1e-4f);
            for (int64_t j = n; j < ldc; j++)
                assert_true(isnan(c[i * ldc + j])); /* padding columns untouched */
        }
        free(c);
        free(ref);
    }
    free(a);
    free(b);
}

/* Same thread count -> same bits, run after run; and since each element is summed in the same
 * order whatever the partition, 1, 2 and 3 threads agree too (stronger than promised). */
static void test_gemm_thread_determinism(void **state)
{
    (void)state;
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    static const int64_t shapes[][3] = {{37, 200, 300}, {100, 5, 70}, {512, 48, 513}};
    lp_pool *pools[3];
    for (int t = 0; t < 3; t++)
        assert_int_equal(lp_pool_create(t + 1, &pools[t], NULL), LP_OK);
    for (int s = 0; s < n_isas; s++) {
        assert_true(lp_kernels_set_isa(isas[s]));
        for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
            int64_t m = shapes[c][0], n = shapes[c][1], k = shapes[c][2];
            float *a = rnd_array(m * k), *b = rnd_array(n * k);
            float *first = nan_array(m * n), *again = nan_array(m * n);
            lp_gemm_f32(m, n, k, a, k, b, k, first, n, false, pools[0]);
            for (int t = 0; t < 3; t++)
                for (int rep = 0; rep < 2; rep++) {
                    for (int64_t i = 0; i < m * n; i++)
                        again[i] = NAN;
                    lp_gemm_f32(m, n, k, a, k, b, k, again, n, false, pools[t]);
                    assert_memory_equal(first, again, (size_t)(m * n) * sizeof(float));
                }
            free(a);
            free(b);
            free(first);
            free(again);
        }
    }
    for (int t = 0; t < 3; t++)
        lp_pool_destroy(pools[t]);
}

/* ---- lp_linear on every weight dtype */

typedef struct linear_case {
    lp_dtype dtype;
    int64_t n, k;
    bool transposed;
} linear_case;

static void fill_f16_like(uint8_t *dst, float value, bool bf16)
{
    uint16_t h = bf16 ? lp_f32_to_bf16(value) : lp_f32_to_f16(value);
    memcpy(dst, &h, 2);
}

/* Random but valid blocks: scale fields are sane f16 values, the rest random bytes. */
static void fill_quant_blocks(lp_dtype dtype, uint8_t *dst, uint64_t bytes)
{
    const lp_dtype_info *info = lp_dtype_get(dtype);
    for (uint64_t i = 0; i < bytes; i++)
        dst[i] = (uint8_t)(rnd() * 127.0f + 128.0f);
    for (uint64_t off = 0; off < bytes; off += info->block_bytes) {
        if (dtype == LP_DTYPE_MXFP4) { /* E8M0 scale: 2^-9 .. 2^2, now and then the subnormals
                                          * 2^-127 and 2^-126 (bytes 0 and 1, halved 2^-128, 2^-127) */
            uint64_t block = off / info->block_bytes;
            dst[off] = block % 7 == 0   ? 0
                       : block % 11 == 5 ? 1
                                         : (uint8_t)(118 + (int)(fabsf(rnd()) * 11.0f));
            continue;
        }
        fill_f16_like(dst + off, 0.01f + 0.02f * fabsf(rnd()), false); /* d */
        if (dtype == LP_DTYPE_Q4_K)
            fill_f16_like(dst + off + 2, 0.01f * fabsf(rnd()), false); /* dmin */
    }
}

/* One weight matrix of n rows x k values in dtype, stored with a stride pad bytes wider than the
 * row, and its dense float copy (the values the stored form means). */
static uint8_t *stored_weights(lp_dtype dtype, int64_t n, int64_t k, uint64_t pad, lp_matrix *w,
                               float *dense)
{
    const lp_dtype_info *info = lp_dtype_get(dtype);
    uint64_t row_bytes;
    assert_true(lp_dtype_bytes_for(dtype, (uint64_t)k, &row_bytes));
    *w = (lp_matrix){dtype, NULL, n, k, row_bytes + pad, false};
    uint8_t *storage = calloc((size_t)(w->row_bytes * (uint64_t)n), 1);
    assert_non_null(storage);
    for (int64_t r = 0; r < n; r++) {
        uint8_t *row = storage + r * w->row_bytes;
        if (info->is_quant) {
            fill_quant_blocks(dtype, row, row_bytes);
            assert_int_equal(lp_dequantize(dtype, row, k, dense + r * k, NULL), LP_OK);
            continue;
        }
        for (int64_t c = 0; c < k; c++) {
            float v = rnd();
            if (dtype == LP_DTYPE_F32) {
                memcpy(row + 4 * c, &v, 4);
            } else {
                fill_f16_like(row + 2 * c, v, dtype == LP_DTYPE_BF16);
                v = dtype == LP_DTYPE_BF16 ? lp_bf16_to_f32(lp_load_u16(row + 2 * c))
                                           : lp_f16_to_f32(lp_load_u16(row + 2 * c));
            }
            dense[r * k + c] = v;
        }
    }
    w->data = storage;
    return storage;
}

static void test_linear_dtypes(void **state)
{
    (void)state;
    static const linear_case cases[] = {
        {LP_DTYPE_F32, 29, 300, false},  {LP_DTYPE_F16, 29, 300, false},
        {LP_DTYPE_BF16, 29, 300, false}, {LP_DTYPE_F32, 21, 259, true},
        {LP_DTYPE_F16, 21, 259, true},   {LP_DTYPE_BF16, 21, 259, true},
        {LP_DTYPE_Q8_0, 23, 416, false}, {LP_DTYPE_Q4_0, 23, 544, false},
        {LP_DTYPE_Q4_K, 19, 768, false}, {LP_DTYPE_MXFP4, 23, 544, false},
    };
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    lp_pool *pool;
    assert_int_equal(lp_pool_create(2, &pool, NULL), LP_OK);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const linear_case *lc = &cases[ci];
        const lp_dtype_info *info = lp_dtype_get(lc->dtype);
        if (info->is_quant && !lp_dequantize_supported(lc->dtype)) {
            printf("linear %s: skipped, lp_dequantize does not support it\n", info->name);
            continue;
        }
        /* The dense float version of the weights, [n, k], that the reference multiplies. */
        float *dense = malloc((size_t)(lc->n * lc->k) * sizeof(float));
        assert_non_null(dense);
        lp_matrix w = {lc->dtype, NULL, lc->n, lc->k, 0, lc->transposed};
        uint8_t *storage;
        if (info->is_quant) {
            storage = stored_weights(lc->dtype, lc->n, lc->k, 8, &w, dense);
            if (lc->dtype == LP_DTYPE_Q8_0) {
                /* independent of lp_dequantize: value = d * int8 */
                float d = lp_f16_to_f32(lp_load_u16(storage));
                assert_true(fabsf(dense[5] - d * (float)(int8_t)storage[2 + 5]) <= 1e-6f);
            }
        } else {
            size_t esize = lc->dtype == LP_DTYPE_F32 ? 4 : 2;
            int64_t stored_rows = lc->transposed ? lc->k : lc->n;
            int64_t stored_cols = lc->transposed ? lc->n : lc->k;
            w.row_bytes = (uint64_t)(stored_cols * (int64_t)esize + 6); /* odd stride */
            /* +1: the data starts at an odd address, as a mapped file may put it */
            storage = calloc((size_t)(w.row_bytes * (uint64_t)stored_rows) + 1, 1);
            assert_non_null(storage);
            for (int64_t r = 0; r < stored_rows; r++)
                for (int64_t c = 0; c < stored_cols; c++) {
                    float v = rnd();
                    uint8_t *dst = storage + 1 + r * w.row_bytes + c * (int64_t)esize;
                    if (lc->dtype == LP_DTYPE_F32)
                        memcpy(dst, &v, 4);
                    else {
                        fill_f16_like(dst, v, lc->dtype == LP_DTYPE_BF16);
                        v = lc->dtype == LP_DTYPE_BF16 ? lp_bf16_to_f32(lp_load_u16(dst))
                                                       : lp_f16_to_f32(lp_load_u16(dst));
                    }
                    int64_t out_row = lc->transposed ? c : r, in_col = lc->transposed ? r : c;
                    dense[out_row * lc->k + in_col] = v;
                }
        }
        if (!info->is_quant)
            w.data = storage + 1;
        /* m = 1, 2 take the unpacked row-dot path, m = 9 the packed GEMM */
        static const int64_t ms[] = {1, 2, 9};
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            const int64_t m = ms[mi];
            float *x = rnd_array(m * lc->k), *bias = rnd_array(lc->n);
            float *ref = nan_array(m * lc->n);
            lp_gemm_f32_ref(m, lc->n, lc->k, x, lc->k, dense, lc->k, ref, lc->n, false);
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < lc->n; j++)
                    ref[i * lc->n + j] += bias[j];
            for (int s = 0; s < n_isas; s++) {
                assert_true(lp_kernels_set_isa(isas[s]));
                float *y = nan_array(m * lc->n);
                lp_error err = {0};
                lp_status st = lp_linear(x, m, &w, bias, y, s % 2 ? pool : NULL, &err);
                if (st != LP_OK)
                    fail_msg("linear %s: %s", info->name, err.msg);
                double worst = 0.0;
                for (int64_t i = 0; i < m * lc->n; i++) {
                    assert_false(isnan(y[i]));
                    double e = fabs((double)y[i] - (double)ref[i]) / (1.0 + fabs((double)ref[i]));
                    if (e > worst)
                        worst = e;
                }
                printf("linear %s%s m=%lld %s: worst |err|/(1+|y|) = %.2e (budget 5e-5)\n",
                       info->name, lc->transposed ? " transposed" : "", (long long)m,
                       lp_isa_name(isas[s]), worst);
                assert_true(worst <= 5e-5);
                free(y);
            }
            free(x);
            free(bias);
            free(ref);
        }
        free(dense);
        free(storage);
    }
    lp_pool_destroy(pool);
}

/* ---- lp_matvec: stored rows read directly, against a float64 dot of the dequantized rows */

/* Budget: |y - exact| <= 1e-6 * sum_j |w_j x_j| + 1e-6 * |bias| (float sums of k <= 1024
 * products in a few chains; the reference sums in double), plus for Q8_0 / Q4_K / MXFP4 weights, whose
 * lp_matvec_int8 reads x as int8 (blocks of 32 / 256 values scaled by max|x| / 127), the rounding of x:
 * sum_j |w_j| * d_x(j) / 2. Returns the worst error as a share of its budget (<= 1 passes); the
 * worst error relative to sum |w_j x_j| goes to *rel. */
static double matvec_error(const lp_matrix *w, const float *dense, const float *x,
                           const float *bias, const float *y, bool int8_x, double *rel)
{
    int block = !int8_x                      ? 0
                : w->dtype == LP_DTYPE_Q8_0  ? 32
                : w->dtype == LP_DTYPE_MXFP4 ? 32
                : w->dtype == LP_DTYPE_Q4_K  ? 256
                                             : 0;
    double worst = 0.0;
    *rel = 0.0;
    for (int64_t r = 0; r < w->rows; r++) {
        double exact = bias[r], mag = 1e-6 * fabs(bias[r]) + 1e-30, rounding = 0.0;
        for (int64_t c = 0; c < w->cols; c++) {
            exact += (double)dense[r * w->cols + c] * (double)x[c];
            mag += fabs((double)dense[r * w->cols + c] * (double)x[c]);
            if (block && c % block == 0) {
                double amax = 0.0;
                for (int j = 0; j < block; j++)
                    amax = fmax(amax, fabs((double)x[c + j]));
                for (int j = 0; j < block; j++)
                    rounding += fabs((double)dense[r * w->cols + c + j]) * amax / 127.0 / 2.0;
            }
        }
        if (isnan(y[r]))
            fail_msg("matvec %s row %lld is NaN", lp_dtype_get(w->dtype)->name, (long long)r);
        double e = fabs((double)y[r] - exact);
        if (e / mag > *rel)
            *rel = e / mag;
        if (e / (1e-6 * mag + rounding) > worst)
            worst = e / (1e-6 * mag + rounding);
    }
    return worst;
}

static void test_matvec_dtypes(void **state)
{
    (void)state;
    static const linear_case cases[] = {
        {LP_DTYPE_F32, 37, 259, false}, {LP_DTYPE_F16, 37, 259, false},
        {LP_DTYPE_BF16, 37, 259, false}, {LP_DTYPE_F32, 5, 1024, false},
        {LP_DTYPE_Q8_0, 41, 416, false}, {LP_DTYPE_Q4_K, 29, 768, false},
        {LP_DTYPE_Q4_K, 1, 256, false}, {LP_DTYPE_MXFP4, 43, 800, false},
        {LP_DTYPE_MXFP4, 1, 32, false},
    };
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    lp_pool *pool;
    assert_int_equal(lp_pool_create(2, &pool, NULL), LP_OK);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const linear_case *lc = &cases[ci];
        assert_true(lp_matvec_supported(lc->dtype));
        float *dense = malloc((size_t)(lc->n * lc->k) * sizeof(float));
        assert_non_null(dense);
        lp_matrix w;
        uint8_t *storage = stored_weights(lc->dtype, lc->n, lc->k, 4, &w, dense);
        float *x = rnd_array(lc->k), *bias = rnd_array(lc->n), *y = nan_array(lc->n);
        lp_error err = {0};
        assert_int_equal(lp_matvec_ref(x, &w, bias, y, &err), LP_OK);
        double rel, worst = matvec_error(&w, dense, x, bias, y, false, &rel);
        printf("matvec %s n=%lld k=%lld ref: worst |err|/sum|wx| = %.2e, %.2f of its budget\n",
               lp_dtype_get(lc->dtype)->name, (long long)lc->n, (long long)lc->k, rel, worst);
        assert_true(worst <= 1.0);
        float *y8_ref = nan_array(lc->n);
        assert_true(lp_kernels_set_isa(LP_ISA_REF));
        assert_int_equal(lp_matvec_int8(x, &w, bias, y8_ref, NULL, &err), LP_OK);
        for (int s = 0; s < n_isas; s++) {
            assert_true(lp_kernels_set_isa(isas[s]));
            for (int with_pool = 0; with_pool < 4; with_pool++) {
                bool int8_x = with_pool >= 2;
                float *yi = nan_array(lc->n);
                lp_status st = (int8_x ? lp_matvec_int8 : lp_matvec)(
                    x, &w, bias, yi, with_pool % 2 ? pool : NULL, &err);
                if (st != LP_OK)
                    fail_msg("matvec %s: %s", lp_dtype_get(lc->dtype)->name, err.msg);
                double rel_i, e = matvec_error(&w, dense, x, bias, yi, int8_x, &rel_i);
                printf("matvec%s %s n=%lld k=%lld %s %s: worst |err|/sum|wx| = %.2e, %.2f of its "
                       "budget\n", int8_x ? "_int8" : "", lp_dtype_get(lc->dtype)->name,
                       (long long)lc->n, (long long)lc->k, lp_isa_name(isas[s]),
                       with_pool % 2 ? "2 threads" : "1 thread", rel_i, e);
                assert_true(e <= 1.0);
                /* the int8 path's ISAs differ from its plain C twin only in the float order of
                 * the block sums (the integer sums are exact) */
                for (int64_t r = 0; int8_x && r < lc->n; r++)
                    assert_true(fabsf(yi[r] - y8_ref[r]) <= 1e-5f * (fabsf(y8_ref[r]) + 1.0f));
                free(yi);
            }
        }
        free(y8_ref);
        free(x);
        free(bias);
        free(y);
        free(dense);
        free(storage);
    }
    lp_pool_destroy(pool);
}

/* lp_matvec_group: matrices of different dtypes over one x, each y bit-equal to lp_matvec (or
 * lp_matvec_int8) on that matrix alone, on 1-3 threads; enough rows that the matrices split into
 * several 64 KB chunks, so threads walk their slices and take the others' across parts. */
static void test_matvec_group(void **state)
{
    (void)state;
    enum { K = 512, N_PARTS = 5 };
    static const struct { lp_dtype dtype; int64_t rows; } shapes[N_PARTS] = {
        {LP_DTYPE_F32, 100}, {LP_DTYPE_Q8_0, 300}, {LP_DTYPE_Q4_K, 257},
        {LP_DTYPE_MXFP4, 1001}, {LP_DTYPE_F16, 1},
    };
    lp_matrix w[N_PARTS];
    uint8_t *storage[N_PARTS];
    float *bias[N_PARTS], *alone[N_PARTS], *grouped[N_PARTS];
    for (int i = 0; i < N_PARTS; i++) {
        float *dense = malloc((size_t)(shapes[i].rows * K) * sizeof(float));
        assert_non_null(dense);
        storage[i] = stored_weights(shapes[i].dtype, shapes[i].rows, K, 4, &w[i], dense);
        free(dense);
        bias[i] = i % 2 ? rnd_array(shapes[i].rows) : NULL;
        alone[i] = nan_array(shapes[i].rows);
    }
    float *x = rnd_array(K);
    lp_error err = {0};
    for (int threads = 1; threads <= 3; threads++) {
        lp_pool *pool;
        assert_int_equal(lp_pool_create(threads, &pool, NULL), LP_OK);
        for (int variant = 0; variant < 3; variant++) {
            bool int8_x = variant >= 1;
            x[7] = variant == 2 ? NAN : 0.25f; /* int8 cannot hold a NaN: every part keeps float */
            lp_matvec_part parts[N_PARTS];
            for (int i = 0; i < N_PARTS; i++) {
                assert_int_equal((int8_x ? lp_matvec_int8 : lp_matvec)(x, &w[i], bias[i],
                                                                      alone[i], NULL, &err),
                                 LP_OK);
                grouped[i] = nan_array(shapes[i].rows);
                parts[i] = (lp_matvec_part){&w[i], bias[i], grouped[i]};
            }
            assert_int_equal(lp_matvec_group(x, parts, N_PARTS, int8_x, pool, &err), LP_OK);
            for (int i = 0; i < N_PARTS; i++) {
                assert_memory_equal(alone[i], grouped[i], (size_t)shapes[i].rows * sizeof(float));
                assert_true(variant != 2 || isnan(grouped[i][0]));
                free(grouped[i]);
            }
        }
        lp_pool_destroy(pool);
    }
    /* one x: the matrices must agree on cols; every part is checked before any runs */
    lp_matrix narrow = w[0];
    narrow.cols = K / 2;
    lp_matvec_part mismatch[2] = {{&w[0], NULL, alone[0]}, {&narrow, NULL, alone[0]}};
    assert_int_equal(lp_matvec_group(x, mismatch, 2, false, NULL, &err), LP_ERR_RANGE);
    assert_non_null(strstr(err.msg, "columns"));
    lp_matrix q40 = {LP_DTYPE_Q4_0, storage[2], 1, K, 288, false};
    lp_matvec_part unsupported[2] = {{&w[0], NULL, alone[0]}, {&q40, NULL, alone[0]}};
    assert_int_equal(lp_matvec_group(x, unsupported, 2, false, NULL, &err), LP_ERR_UNSUPPORTED);
    for (int i = 0; i < N_PARTS; i++) {
        free(storage[i]);
        free(bias[i]);
        free(alone[i]);
    }
    free(x);
}

/* The int8 rows at the ends of their ranges, where an offset or a saturating step would show:
 * Q8_0 weights of -128 and 127 and MXFP4's +-12 (doubled +-6), against x quantized to +-127,
 * over 9 blocks of 32 (the 8-block loops and a tail). Every ISA within the contract's 1e-5 of
 * the exact integer sums scaled per block, relative (observed: every ISA gives ref's float,
 * at most 6.9e-5 from the double sum of 18432, i.e. 3.7e-9 relative). */
static void test_matvec_int8_extremes(void **state)
{
    (void)state;
    enum { K = 288, ROWS = 3 };
    float x[K], y[ROWS];
    for (int j = 0; j < K; j++)
        x[j] = j % 4 == 3 ? 1.0f : -1.0f; /* q = +-127, d_x = 1 / 127 */
    const float dx = 1.0f / 127.0f;
    for (int f = 0; f < 2; f++) {
        bool q8 = f == 0;
        uint64_t row_bytes = q8 ? 34 * K / 32 : 17 * K / 32;
        uint8_t data[ROWS * 34 * K / 32];
        double want[ROWS] = {0};
        for (int r = 0; r < ROWS; r++)
            for (int b = 0; b < K / 32; b++) {
                uint8_t *blk = data + r * row_bytes + b * (q8 ? 34 : 17);
                int64_t isum = 0;
                if (q8)
                    blk[0] = 0x00, blk[1] = 0x3c; /* d = 1 */
                else
                    blk[0] = 127; /* half scale 2^(127 - 128) */
                for (int j = 0; j < 32; j++) {
                    bool low = r == 0 || (r == 2 && (j + b) % 3 != 0);
                    int w = q8 ? (low ? -128 : 127) : (low ? -12 : 12);
                    if (q8)
                        blk[2 + j] = (uint8_t)(int8_t)w;
                    else if (j < 16)
                        blk[1 + j] = (uint8_t)(low ? 15 : 7); /* value j: the low nibble */
                    else
                        blk[1 + j - 16] |= (uint8_t)((low ? 15 : 7) << 4);
                    isum += w * (j % 4 == 3 ? 127 : -127);
                }
                want[r] += (double)((q8 ? 1.0f : 0.5f) * dx) * (double)isum;
            }
        lp_matrix w = {q8 ? LP_DTYPE_Q8_0 : LP_DTYPE_MXFP4, data, ROWS, K, row_bytes, false};
        lp_isa isas[LP_ISA_COUNT];
        int n_isas = available_isas(isas);
        for (int s = 0; s < n_isas; s++) {
            assert_true(lp_kernels_set_isa(isas[s]));
            lp_error err = {0};
            assert_int_equal(lp_matvec_int8(x, &w, NULL, y, NULL, &err), LP_OK);
            for (int r = 0; r < ROWS; r++) {
                double e = fabs((double)y[r] - want[r]);
                printf("matvec_int8 extremes %s row %d %s: %.9g, |err| %.2e\n",
                       q8 ? "q8_0" : "mxfp4", r, lp_isa_name(isas[s]), (double)y[r], e);
                assert_true(e <= 1e-5 * (fabs(want[r]) + 1.0));
            }
        }
    }
}

static void test_matvec_errors(void **state)
{
    (void)state;
    float x[256] = {0}, y[8];
    uint8_t data[4096] = {0};
    lp_error err = {0};
    lp_matrix q40 = {LP_DTYPE_Q4_0, data, 2, 256, 144, false};
    assert_false(lp_matvec_supported(LP_DTYPE_Q4_0));
    assert_int_equal(lp_matvec(x, &q40, NULL, y, NULL, &err), LP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "q4_0"));
    lp_matrix tr = {LP_DTYPE_F32, data, 2, 8, 32, true};
    assert_int_equal(lp_matvec(x, &tr, NULL, y, NULL, &err), LP_ERR_UNSUPPORTED);
    lp_matrix partial = {LP_DTYPE_Q8_0, data, 2, 40, 64, false};
    assert_int_equal(lp_matvec(x, &partial, NULL, y, NULL, &err), LP_ERR_FORMAT);
    lp_matrix narrow = {LP_DTYPE_F32, data, 2, 64, 100, false};
    assert_int_equal(lp_matvec(x, &narrow, NULL, y, NULL, &err), LP_ERR_FORMAT);
    /* int8 cannot carry a NaN: lp_matvec_int8 keeps such an x in float, so it still shows */
    lp_matrix q80 = {LP_DTYPE_Q8_0, data, 2, 256, 272, false};
    for (int i = 0; i < 2 * 8; i++)
        data[34 * i] = 0x00, data[34 * i + 1] = 0x3c; /* d = 1.0 */
    x[3] = NAN;
    assert_int_equal(lp_matvec_int8(x, &q80, NULL, y, NULL, &err), LP_OK);
    assert_true(isnan(y[0]) && isnan(y[1]));
}

static void test_linear_errors(void **state)
{
    (void)state;
    float x[64] = {0}, y[64];
    uint8_t data[4096] = {0};
    lp_error err = {0};
    lp_matrix w = {LP_DTYPE_Q8_0, data, 2, 40, 64, false}; /* 40 is not whole 32-blocks */
    assert_int_equal(lp_linear(x, 1, &w, NULL, y, NULL, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "40"));
    lp_matrix w2 = {LP_DTYPE_F32, data, 2, 16, 60, false}; /* stride < 16 * 4 */
    assert_int_equal(lp_linear(x, 1, &w2, NULL, y, NULL, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "60"));
    lp_matrix w3 = {LP_DTYPE_I32, data, 2, 16, 64, false};
    assert_int_equal(lp_linear(x, 1, &w3, NULL, y, NULL, &err), LP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "i32"));
    lp_matrix w4 = {LP_DTYPE_Q8_0, data, 32, 2, 68, true};
    assert_int_equal(lp_linear(x, 1, &w4, NULL, y, NULL, &err), LP_ERR_UNSUPPORTED);
    /* a block type without a dequantizer is refused by name, never read */
    for (int d = LP_DTYPE_Q4_0; d < LP_DTYPE_COUNT; d++)
        if (!lp_dequantize_supported((lp_dtype)d)) {
            lp_matrix w5 = {(lp_dtype)d, data, 1, 256, 4096, false};
            assert_int_equal(lp_linear(x, 1, &w5, NULL, y, NULL, &err), LP_ERR_UNSUPPORTED);
            assert_non_null(strstr(err.msg, lp_dtype_name((lp_dtype)d)));
        }
    /* nothing to compute is fine and writes nothing */
    y[0] = 42.0f;
    lp_matrix w6 = {LP_DTYPE_F32, data, 1, 16, 64, false};
    assert_int_equal(lp_linear(x, 0, &w6, NULL, y, NULL, &err), LP_OK);
    assert_true(y[0] == 42.0f);
}

/* ---- the pool */

typedef struct count_ctx {
    int *hits;
    lp_pool *pool;
} count_ctx;

static void count_task(void *ctx, int64_t task)
{
    count_ctx *c = ctx;
    c->hits[task]++;
}

static void nested_task(void *ctx, int64_t task)
{
    count_ctx *c = ctx;
    (void)task;
    /* a run from inside a task runs serially on this thread instead of deadlocking */
    int inner[5] = {0};
    count_ctx sub = {inner, c->pool};
    lp_pool_run(c->pool, 5, count_task, &sub);
    for (int i = 0; i < 5; i++)
        assert_int_equal(inner[i], 1);
}

static void test_pool(void **state)
{
    (void)state;
    lp_error err = {0};
    lp_pool *pool;
    assert_int_equal(lp_pool_create(0, &pool, &err), LP_ERR_RANGE);
    assert_null(pool);
    assert_int_equal(lp_pool_create(3, &pool, &err), LP_OK);
    assert_int_equal(lp_pool_threads(pool), 3);
    for (int64_t n = 0; n < 40; n += 7) {
        int hits[40] = {0};
        count_ctx c = {hits, pool};
        for (int rep = 0; rep < 50; rep++)
            lp_pool_run(pool, n, count_task, &c);
        for (int64_t i = 0; i < 40; i++)
            assert_int_equal(hits[i], i < n ? 50 : 0);
    }
    count_ctx c = {NULL, pool};
    lp_pool_run(pool, 4, nested_task, &c);
    lp_pool_destroy(pool);
    lp_pool_destroy(NULL);
}

static void test_rope(void **state)
{
    (void)state;
    /* {head_dim, rot_dim}: partial rotary, a tail past whole vectors, a full 64-dim head, and a
     * rotation wider than the coefficient buffer (the scalar fallback) */
    static const int64_t shapes[][2] = {{20, 16}, {24, 20}, {64, 64}, {300, 300}};
    static const int64_t positions[] = {0, 1, 17, 1000};
    const int64_t n_heads = 3;
    float inv_freq[150];
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    for (int si = 0; si < n_isas; si++) {
        assert_true(lp_kernels_set_isa(isas[si]));
        for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
            int64_t head_dim = shapes[sh][0], rot_dim = shapes[sh][1], half = rot_dim / 2;
            for (int64_t i = 0; i < half; i++)
                inv_freq[i] = (float)pow(10000.0, -2.0 * (double)i / (double)rot_dim);
            for (int layout = 0; layout < 2; layout++)
                for (size_t pi = 0; pi < sizeof positions / sizeof positions[0]; pi++) {
                    int64_t pos = positions[pi];
                    float attn_scale = pi == 2 ? 1.25f : 1.0f;
                    float *x = rnd_array(n_heads * head_dim);
                    float *orig = malloc((size_t)(n_heads * head_dim) * sizeof(float));
                    assert_non_null(orig);
                    memcpy(orig, x, (size_t)(n_heads * head_dim) * sizeof(float));
                    lp_rope(x, n_heads, head_dim, rot_dim, pos, inv_freq, attn_scale, layout == 1);
                    for (int64_t h = 0; h < n_heads; h++) {
                        const float *o = orig + h * head_dim;
                        const float *r = x + h * head_dim;
                        for (int64_t i = 0; i < half; i++) {
                            /* the angle as Hugging Face forms it: a float32 product */
                            double angle = (double)((float)pos * inv_freq[i]);
                            int64_t i0 = layout == 1 ? 2 * i : i;
                            int64_t i1 = layout == 1 ? 2 * i + 1 : i + half;
                            double c = cos(angle) * (double)attn_scale;
                            double s = sin(angle) * (double)attn_scale;
                            double o0 = (double)o[i0], o1 = (double)o[i1];
                            double want0 = o0 * c - o1 * s, want1 = o0 * s + o1 * c;
                            if (fabs((double)r[i0] - want0) > 1e-5 ||
                                fabs((double)r[i1] - want1) > 1e-5)
                                fail_msg("rope %s layout %s rot %lld pos %lld pair %lld: got "
                                         "(%g, %g) want (%g, %g)",
                                         lp_isa_name(isas[si]), layout ? "adjacent" : "halves",
                                         (long long)rot_dim, (long long)pos, (long long)i,
                                         (double)r[i0], (double)r[i1], want0, want1);
                        }
                        for (int64_t d = rot_dim; d < head_dim; d++)
                            assert_true(r[d] == o[d]); /* unrotated tail untouched */
                    }
                    free(x);
                    free(orig);
                }
        }
        /* position 0 is the identity */
        float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
        memcpy(y, x, sizeof x);
        lp_rope(y, 1, 8, 8, 0, inv_freq, 1.0f, false);
        assert_memory_equal(x, y, sizeof x);
    }
}

static double gelu_exact(double v) { return 0.5 * v * (1.0 + erf(v / sqrt(2.0))); }
static double gelu_tanh(double v)
{
    return 0.5 * v * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (v + 0.044715 * v * v * v)));
}
static double silu_d(double v) { return v / (1.0 + exp(-v)); }

/* Budget for activations and norms: |y - formula| <= 2e-6 * (1 + |formula|). */
static void check_close(const float *got, const double *want, int64_t n, const char *what,
                        double *worst)
{
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (1.0 + fabs(want[i]));
        if (isnan(got[i]) || e > 2e-6)
            fail_msg("%s %s: [%lld] got %.9g want %.9g", what, lp_isa_name(lp_kernels_isa()),
                     (long long)i, (double)got[i], want[i]);
        if (e > *worst)
            *worst = e;
    }
}

static void test_vector_kernels(void **state)
{
    (void)state;
    static const int64_t sizes[] = {1, 7, 8, 33, 1000};
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    for (int s = 0; s < n_isas; s++) {
        assert_true(lp_kernels_set_isa(isas[s]));
        double worst = 0.0;
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            int64_t n = sizes[si];
            float *x = rnd_array(n), *w = rnd_array(n), *b = rnd_array(n), *y = nan_array(n);
            double *want = malloc((size_t)n * sizeof(double));
            assert_non_null(want);
            for (int64_t i = 0; i < n; i++)
                x[i] *= 6.0f; /* exercise the tails of exp/erf/tanh */
            /* rmsnorm, plain and Gemma's (1 + w) */
            for (int plus_one = 0; plus_one < 2; plus_one++) {
                double ss = 0.0;
                for (int64_t i = 0; i < n; i++)
                    ss += (double)x[i] * (double)x[i];
                double inv = 1.0 / sqrt(ss / (double)n + 1e-5);
                for (int64_t i = 0; i < n; i++)
                    want[i] = (double)x[i] * inv * (plus_one ? 1.0 + (double)w[i] : (double)w[i]);
                lp_rmsnorm(y, x, w, n, 1e-5f, plus_one);
                check_close(y, want, n, "rmsnorm", &worst);
            }
            /* layernorm with weight and bias */
            double mean = 0.0, var = 0.0;
            for (int64_t i = 0; i < n; i++)
                mean += (double)x[i];
            mean /= (double)n;
            for (int64_t i = 0; i < n; i++)
                var += ((double)x[i] - mean) * ((double)x[i] - mean);
            var /= (double)n;
            for (int64_t i = 0; i < n; i++)
                want[i] = ((double)x[i] - mean) / sqrt(var + 1e-5) * (double)w[i] + (double)b[i];
            lp_layernorm(y, x, w, b, n, 1e-5f);
            check_close(y, want, n, "layernorm", &worst);
            /* softmax */
            double max = -HUGE_VAL, sum = 0.0;
            for (int64_t i = 0; i < n; i++)
                max = (double)x[i] > max ? (double)x[i] : max;
            for (int64_t i = 0; i < n; i++)
                sum += exp((double)x[i] - max);
            for (int64_t i = 0; i < n; i++)
                want[i] = exp((double)x[i] - max) / sum;
            memcpy(y, x, (size_t)n * sizeof(float));
            lp_softmax(y, n);
            check_close(y, want, n, "softmax", &worst);
            /* activations */
            for (int tanh_approx = 0; tanh_approx < 2; tanh_approx++) {
                for (int64_t i = 0; i < n; i++)
                    want[i] = tanh_approx ? gelu_tanh((double)x[i]) : gelu_exact((double)x[i]);
                memcpy(y, x, (size_t)n * sizeof(float));
                lp_gelu(y, n, tanh_approx);
                check_close(y, want, n, tanh_approx ? "gelu_tanh" : "gelu", &worst);
                for (int64_t i = 0; i < n; i++)
                    want[i] *= (double)w[i];
                memcpy(y, x, (size_t)n * sizeof(float));
                lp_gelu_mul(y, w, n, tanh_approx);
                check_close(y, want, n, "gelu_mul", &worst);
            }
            for (int64_t i = 0; i < n; i++)
                want[i] = silu_d((double)x[i]);
            memcpy(y, x, (size_t)n * sizeof(float));
            lp_silu(y, n);
            check_close(y, want, n, "silu", &worst);
            for (int64_t i = 0; i < n; i++)
                want[i] = silu_d((double)x[i]) * (double)w[i];
            memcpy(y, x, (size_t)n * sizeof(float));
            lp_silu_mul(y, w, n);
            check_close(y, want, n, "silu_mul", &worst);
            for (int64_t i = 0; i < n; i++)
                want[i] = (double)x[i] + (double)w[i];
            memcpy(y, x, (size_t)n * sizeof(float));
            lp_add(y, w, n);
            check_close(y, want, n, "add", &worst);
            free(x);
            free(w);
            free(b);
            free(y);
            free(want);
        }
        printf("vector kernels %s: worst |err|/(1+|y|) = %.2e (budget 2e-6)\n",
               lp_isa_name(isas[s]), worst);
    }
    /* a fully masked softmax row is all zeros, not NaN */
    float masked[5] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    lp_softmax(masked, 5);
    for (int i = 0; i < 5; i++)
        assert_true(masked[i] == 0.0f);
}

/* ---- dispatch: every ISA's table is ref's with the ISA's overrides, and complete */

static bool same_gemm(const lp_gemm_config *a, const lp_gemm_config *b)
{
    return a->mr == b->mr && a->nr == b->nr && a->kc == b->kc && a->mc == b->mc &&
           a->nc == b->nc && a->ukernel == b->ukernel && a->pack_a == b->pack_a &&
           a->pack_b == b->pack_b;
}

static void test_dispatch_tables(void **state)
{
    (void)state;
    for (int isa = 0; isa < LP_ISA_COUNT; isa++) {
        const lp_kernel_table *t = lp_kernels_table_for((lp_isa)isa);
        assert_non_null(t);
        const char *missing = lp_kernels_missing_slot(t);
        if (missing)
            fail_msg("%s table: slot %s is empty", lp_isa_name((lp_isa)isa), missing);
        assert_int_equal(t->isa, isa);
        printf("dispatch %s: tile %dx%d, blocks kc %lld mc %lld nc %lld\n",
               lp_isa_name((lp_isa)isa), t->gemm.mr, t->gemm.nr, (long long)t->gemm.kc,
               (long long)t->gemm.mc, (long long)t->gemm.nc);
    }
    assert_null(lp_kernels_table_for(LP_ISA_COUNT));
    /* ref's own table is the spec: the dispatch copy of it is the same table */
    const lp_kernel_table *ref = lp_kernels_table_for(LP_ISA_REF);
    assert_true(same_gemm(&ref->gemm, &lp_kernels_ref_table.gemm));
#define LP_SAME_SLOT(slot) assert_true(ref->slot == lp_kernels_ref_table.slot);
    LP_KERNEL_SLOTS(LP_SAME_SLOT)
#undef LP_SAME_SLOT
    /* AVX2 overrides the micro-kernel, and with it the whole tile */
    const lp_kernel_table *avx2 = lp_kernels_table_for(LP_ISA_AVX2);
    assert_true(avx2->gemm.ukernel != lp_kernels_ref_table.gemm.ukernel);
    assert_int_equal(avx2->gemm.mr, 6);
    assert_int_equal(avx2->gemm.nr, 16);
    /* AVX-512 starts from AVX2's table: its own GEMM tile, AVX2's kernels in every other slot */
    const lp_kernel_table *avx512 = lp_kernels_table_for(LP_ISA_AVX512);
    assert_int_equal(avx512->isa, LP_ISA_AVX512);
    assert_true(avx512->gemm.ukernel != avx2->gemm.ukernel);
    assert_int_equal(avx512->gemm.mr, 16);
    assert_int_equal(avx512->gemm.nr, 16);
#define LP_FROM_AVX2(slot) assert_true(avx512->slot == avx2->slot);
    LP_KERNEL_SLOTS(LP_FROM_AVX2)
#undef LP_FROM_AVX2
    /* AVX-512 VNNI starts from AVX-512's: its GEMM, and its own int8 matrix-vector rows */
    const lp_kernel_table *vnni = lp_kernels_table_for(LP_ISA_AVX512_VNNI);
    assert_int_equal(vnni->isa, LP_ISA_AVX512_VNNI);
    assert_true(same_gemm(&vnni->gemm, &avx512->gemm));
    assert_true(vnni->row_dot_q8_0_i8 != avx512->row_dot_q8_0_i8);
    assert_true(vnni->row_dot_q4_k_i8 != avx512->row_dot_q4_k_i8);
    assert_true(vnni->row_dot_mxfp4_i8 != avx512->row_dot_mxfp4_i8);
    assert_true(vnni->row_dot_f16 != avx512->row_dot_f16);
    assert_true(vnni->softmax == avx512->softmax && vnni->attn_qk == avx512->attn_qk);

    /* An ISA that overrides one slot keeps ref's kernels in every other, tile included. */
    lp_kernel_table partial;
    memset(&partial, 0, sizeof partial);
    partial.isa = LP_ISA_AVX2;
    partial.dot = avx2->dot;
    lp_kernel_table merged = lp_kernels_ref_table;
    lp_kernels_override(&merged, &partial);
    assert_null(lp_kernels_missing_slot(&merged));
    assert_int_equal(merged.isa, LP_ISA_AVX2);
    assert_true(merged.dot == avx2->dot);
    assert_true(merged.softmax == lp_kernels_ref_table.softmax);
    assert_true(same_gemm(&merged.gemm, &lp_kernels_ref_table.gemm));
    /* and an empty slot is named */
    merged.rope_rotate = NULL;
    assert_string_equal(lp_kernels_missing_slot(&merged), "rope_rotate");
    merged = lp_kernels_ref_table;
    merged.gemm.kc = 100; /* not whole GGUF blocks */
    assert_non_null(lp_kernels_missing_slot(&merged));
}

static void test_isa_names(void **state)
{
    (void)state;
    assert_string_equal(lp_isa_name(LP_ISA_REF), "ref");
    assert_string_equal(lp_isa_name(LP_ISA_AVX2), "avx2");
    assert_string_equal(lp_isa_name(LP_ISA_AVX512), "avx512");
    assert_string_equal(lp_isa_name(LP_ISA_AVX512_VNNI), "avx512vnni");
    assert_true(lp_kernels_set_isa(LP_ISA_REF));
    assert_int_equal(lp_kernels_isa(), LP_ISA_REF);
    assert_false(lp_kernels_set_isa(LP_ISA_COUNT));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isa_names),
        cmocka_unit_test(test_dispatch_tables),
        cmocka_unit_test(test_gemm_odd_shapes),
        cmocka_unit_test(test_gemm_strides),
        cmocka_unit_test(test_gemm_thread_determinism),
        cmocka_unit_test(test_linear_dtypes),
        cmocka_unit_test(test_linear_errors),
        cmocka_unit_test(test_matvec_dtypes),
        cmocka_unit_test(test_matvec_group),
        cmocka_unit_test(test_matvec_int8_extremes),
        cmocka_unit_test(test_matvec_errors),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_vector_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
