/* The packed GEMM (BLIS loop structure; layouts drawn in kernels_internal.h) and lp_linear, which
 * packs weight panels straight from f32/f16/bf16/GGUF-quant storage, kc values at a time. */
#include "trace/kernels/kernels.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "inspect/formats/quant.h"
#include "trace/kernels/kernels_internal.h"

/* Where B (the weights: [n, k] row-major, or [k, n] when transposed) comes from. */
typedef struct gemm_b_source {
    lp_dtype dtype;
    const uint8_t *data;
    uint64_t row_bytes; /* between stored rows */
    bool transposed;    /* stored [k, n] (GPT-2 Conv1D) */
} gemm_b_source;

typedef struct gemm_job {
    const lp_kernel_table *kt;
    int64_t m, n, k;
    const float *a; /* [m, k], row stride lda */
    int64_t lda;
    gemm_b_source b;
    float *c; /* [m, n], row stride ldc */
    int64_t ldc;
    bool accumulate;
    const float *bias; /* [n] or NULL */
    int n_parts;
    bool split_rows;    /* partition rows (few column panels) instead of column panels */
    lp_pool *pool;      /* the pool the parts run on (its scratch is reused), or NULL */
    lp_status *status;  /* [n_parts] or NULL (lp_gemm_f32 cannot fail) */
    lp_error *errors;   /* [n_parts] or NULL */
} gemm_job;

static int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

static float *alloc_floats(int64_t count)
{
    uint64_t bytes;
    if (count <= 0 || !lp_mul_u64((uint64_t)count, sizeof(float), &bytes) ||
        !lp_add_u64(bytes, 63, &bytes))
        return NULL;
    return aligned_alloc(64, (size_t)(bytes / 64 * 64));
}

/* A[ic.., pc..] (mc x kc, row stride lda) -> MR-row panels, zero-padded past mc. */
static void pack_a(const lp_kernel_table *kt, const float *a, int64_t lda, int64_t mc, int64_t kc,
                   float *dst)
{
    for (int64_t r0 = 0; r0 < mc; r0 += kt->gemm.mr)
        kt->gemm.pack_a(a + r0 * lda, lda, min_i64(kt->gemm.mr, mc - r0), kc, dst + r0 * kc);
}

/* kc values of stored row `row` from element `col0`, as f32 in seg (or a direct pointer). */
static const float *load_row_segment(const gemm_job *job, int64_t row, int64_t col0, int64_t count,
                                     float *seg, lp_error *err, lp_status *status)
{
    const gemm_b_source *b = &job->b;
    const uint8_t *base = b->data + (uint64_t)row * b->row_bytes;
    *status = LP_OK;
    switch (b->dtype) {
    case LP_DTYPE_F32: {
        const uint8_t *p = base + (uint64_t)col0 * 4;
        if ((uintptr_t)p % _Alignof(float) == 0)
            return (const float *)(const void *)p;
        memcpy(seg, p, (size_t)count * 4);
        return seg;
    }
    case LP_DTYPE_F16:
        job->kt->f16_to_f32(base + (uint64_t)col0 * 2, seg, count);
        return seg;
    case LP_DTYPE_BF16:
        job->kt->bf16_to_f32(base + (uint64_t)col0 * 2, seg, count);
        return seg;
    default: {
        /* GGUF blocks: col0 and count are whole blocks because kc is a multiple of 256 and the
         * row length a multiple of the block size (checked by lp_linear). */
        const lp_dtype_info *info = lp_dtype_get(b->dtype);
        uint64_t offset = (uint64_t)col0 / info->block_elems * info->block_bytes;
        *status = lp_dequantize(b->dtype, base + offset, count, seg, err);
        return seg;
    }
    }
}

/* B[jc.., pc..] (nc columns = weight rows, kc deep) -> NR-column panels, zero-padded past nc. */
static lp_status pack_b(const gemm_job *job, int64_t jc, int64_t nc, int64_t pc, int64_t kc,
                        float *dst, float *seg, lp_error *err)
{
    const int nr = job->kt->gemm.nr;
    const gemm_b_source *b = &job->b;
    for (int64_t j0 = 0; j0 < nc; j0 += nr) {
        int64_t cols = min_i64(nr, nc - j0);
        float *panel = dst + j0 * kc;
        if (b->transposed) {
            /* stored [k, n]: each k step reads `cols` consecutive values */
            for (int64_t p = 0; p < kc; p++) {
                lp_status st;
                const float *src = load_row_segment(job, pc + p, jc + j0, cols, seg, err, &st);
                if (st != LP_OK)
                    return st;
                memcpy(panel + p * nr, src, (size_t)cols * sizeof(float));
                for (int64_t c = cols; c < nr; c++)
                    panel[p * nr + c] = 0.0f;
            }
            continue;
        }
        /* f32 rows on a float boundary are packed in place; anything else is first converted
         * row by row into seg ([NR, kc]) */
        const uint8_t *first = b->data + (uint64_t)(jc + j0) * b->row_bytes + (uint64_t)pc * 4;
        if (b->dtype == LP_DTYPE_F32 && b->row_bytes % sizeof(float) == 0 &&
            (uintptr_t)first % _Alignof(float) == 0) {
            job->kt->gemm.pack_b((const float *)(const void *)first,
                            (int64_t)(b->row_bytes / sizeof(float)), cols, kc, panel);
            continue;
        }
        for (int64_t c = 0; c < cols; c++) {
            lp_status st;
            float *row = seg + c * kc;
            const float *src = load_row_segment(job, jc + j0 + c, pc, kc, row, err, &st);
            if (st != LP_OK)
                return st;
            if (src != row)
                memcpy(row, src, (size_t)kc * sizeof(float));
        }
        job->kt->gemm.pack_b(seg, kc, cols, kc, panel);
    }
    return LP_OK;
}

/* The C block rows [i0, i1) x columns [j0, j1) of one part, computed without packing: the fallback
 * when scratch cannot be allocated (lp_gemm_f32 has no error channel). f32 sources only. */
static void gemm_unpacked(const gemm_job *job, int64_t i0, int64_t i1, int64_t j0, int64_t j1)
{
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++) {
            float sum = 0.0f;
            for (int64_t p = 0; p < job->k; p++) {
                float w;
                const uint8_t *src = job->b.transposed
                                         ? job->b.data + (uint64_t)p * job->b.row_bytes + (uint64_t)j * 4
                                         : job->b.data + (uint64_t)j * job->b.row_bytes + (uint64_t)p * 4;
                memcpy(&w, src, 4);
                sum += job->a[i * job->lda + p] * w;
            }
            float *c = job->c + i * job->ldc + j;
            *c = job->accumulate ? *c + sum : sum;
        }
}

/* One or two rows (decode, last-position logits): packing would re-write every weight for a tile
 * that is mostly padding, so each weight row segment is dotted straight from its storage. */
enum { GEMV_MAX_M = 2, GEMV_MAX_KC = 1024 };

static lp_status gemv_part(const gemm_job *job, int64_t j_begin, int64_t j_end, lp_error *err)
{
    const lp_kernel_table *kt = job->kt;
    float seg[GEMV_MAX_KC];
    for (int64_t j = j_begin; j < j_end; j++) {
        float acc[GEMV_MAX_M] = {0};
        for (int64_t pc = 0; pc < job->k; pc += kt->gemm.kc) {
            int64_t kc = min_i64(kt->gemm.kc, job->k - pc);
            lp_status st;
            const float *w = load_row_segment(job, j, pc, kc, seg, err, &st);
            if (st != LP_OK)
                return st;
            for (int64_t i = 0; i < job->m; i++)
                acc[i] += kt->dot(job->a + i * job->lda + pc, w, kc);
        }
        for (int64_t i = 0; i < job->m; i++) {
            float *c = job->c + i * job->ldc + j;
            *c = job->accumulate ? *c + acc[i] : acc[i];
        }
    }
    return LP_OK;
}

/* The block of C one part computes: rows [i0, i1) x columns [j0, j1), whole panels of its
 * partitioned dimension. */
typedef struct c_block {
    int64_t i0, i1, j0, j1;
} c_block;

static c_block part_block(const gemm_job *job, int64_t part)
{
    const int mr = job->kt->gemm.mr, nr = job->kt->gemm.nr;
    c_block r = {0, job->m, 0, job->n};
    if (job->split_rows) {
        int64_t panels = (job->m + mr - 1) / mr;
        r.i0 = min_i64(job->m, panels * part / job->n_parts * mr);
        r.i1 = min_i64(job->m, panels * (part + 1) / job->n_parts * mr);
    } else {
        int64_t panels = (job->n + nr - 1) / nr;
        r.j0 = min_i64(job->n, panels * part / job->n_parts * nr);
        r.j1 = min_i64(job->n, panels * (part + 1) / job->n_parts * nr);
    }
    return r;
}

/* The packed blocks of one part, 64-byte aligned in its scratch. */
typedef struct packed_scratch {
    float *b_pack; /* [nc, kc] NR-column panels */
    float *a_pack; /* [mc, kc] MR-row panels */
    float *seg;    /* [NR, kc] weight rows converted to f32 */
} packed_scratch;

/* The two inner loops (BLIS's macro-kernel): every MR x NR tile of the packed mc x nc block. */
static void macro_kernel(const gemm_job *job, const packed_scratch *ps, int64_t ic, int64_t mc,
                         int64_t jc, int64_t nc, int64_t kc, bool acc)
{
    const lp_gemm_config *g = &job->kt->gemm;
    for (int64_t jr = 0; jr < nc; jr += g->nr) {
        int n_edge = (int)min_i64(g->nr, nc - jr);
        for (int64_t ir = 0; ir < mc; ir += g->mr) {
            int m_edge = (int)min_i64(g->mr, mc - ir);
            g->ukernel(kc, ps->a_pack + ir * kc, ps->b_pack + jr * kc,
                       job->c + (ic + ir) * job->ldc + jc + jr, job->ldc, m_edge, n_edge, acc);
        }
    }
}

/* The three outer loops over a part's block: NC columns, KC deep (pack B), MC rows (pack A). */
static lp_status packed_loops(const gemm_job *job, const c_block *r, const packed_scratch *ps,
                              lp_error *err)
{
    const lp_gemm_config *g = &job->kt->gemm;
    for (int64_t jc = r->j0; jc < r->j1; jc += g->nc) {
        int64_t nc = min_i64(g->nc, r->j1 - jc);
        for (int64_t pc = 0; pc < job->k; pc += g->kc) {
            int64_t kc = min_i64(g->kc, job->k - pc);
            lp_status st = pack_b(job, jc, nc, pc, kc, ps->b_pack, ps->seg, err);
            if (st != LP_OK)
                return st;
            for (int64_t ic = r->i0; ic < r->i1; ic += g->mc) {
                int64_t mc = min_i64(g->mc, r->i1 - ic);
                pack_a(job->kt, job->a + ic * job->lda + pc, job->lda, mc, kc, ps->a_pack);
                macro_kernel(job, ps, ic, mc, jc, nc, kc, job->accumulate || pc > 0);
            }
        }
    }
    return LP_OK;
}

/* One part through the packed GEMM, its scratch from the pool (kept across runs) or malloc. */
static lp_status gemm_packed(const gemm_job *job, int64_t part, const c_block *r, lp_error *err)
{
    const lp_gemm_config *g = &job->kt->gemm;
    int64_t kc_max = min_i64(g->kc, job->k);
    int64_t nc_max = min_i64(g->nc, round_up(r->j1 - r->j0, g->nr));
    int64_t mc_max = min_i64(g->mc, round_up(r->i1 - r->i0, g->mr));
    /* one block: packed B (nc x kc), packed A (mc x kc), NR row segments, each 64-aligned */
    int64_t b_floats = round_up(nc_max * kc_max, 16), a_floats = round_up(mc_max * kc_max, 16);
    int64_t seg_floats = round_up((kc_max > g->nr ? kc_max : g->nr) * g->nr, 16); /* [NR, kc] */
    int64_t total = b_floats + a_floats + seg_floats;
    float *scratch = job->pool ? lp_pool_scratch(job->pool, part, (size_t)total * sizeof(float))
                               : alloc_floats(total);
    if (!scratch) {
        if (job->status)
            return lp_error_set(err, LP_ERR_NOMEM,
                                "GEMM scratch: out of memory for %lld x %lld panels",
                                (long long)nc_max, (long long)kc_max);
        gemm_unpacked(job, r->i0, r->i1, r->j0, r->j1);
        return LP_OK;
    }
    packed_scratch ps = {scratch, scratch + b_floats, scratch + b_floats + a_floats};
    lp_status st = packed_loops(job, r, &ps, err);
    if (!job->pool)
        free(scratch);
    return st;
}

static void gemm_part(void *ctx, int64_t part)
{
    const gemm_job *job = ctx;
    c_block r = part_block(job, part);
    if (r.i0 >= r.i1 || r.j0 >= r.j1)
        return;
    lp_error *err = job->errors ? &job->errors[part] : NULL;
    lp_status st = LP_OK;
    if (job->k == 0) {
        if (!job->accumulate)
            for (int64_t i = r.i0; i < r.i1; i++)
                memset(job->c + i * job->ldc + r.j0, 0, (size_t)(r.j1 - r.j0) * sizeof(float));
    } else if (job->m <= GEMV_MAX_M && !job->b.transposed && job->kt->gemm.kc <= GEMV_MAX_KC) {
        st = gemv_part(job, r.j0, r.j1, err);
    } else {
        st = gemm_packed(job, part, &r, err);
    }
    if (st != LP_OK) {
        if (job->status)
            job->status[part] = st;
        return;
    }
    if (job->bias)
        for (int64_t i = r.i0; i < r.i1; i++) {
            float *row = job->c + i * job->ldc;
            for (int64_t j = r.j0; j < r.j1; j++)
                row[j] += job->bias[j];
        }
}

static void plan_parts(gemm_job *job, lp_pool *pool)
{
    if (lp_pool_in_worker())
        pool = NULL; /* nested inside a task: run serially, with private scratch */
    job->pool = pool;
    int threads = lp_pool_threads(pool);
    int64_t col_panels = (job->n + job->kt->gemm.nr - 1) / job->kt->gemm.nr;
    int64_t row_panels = (job->m + job->kt->gemm.mr - 1) / job->kt->gemm.mr;
    job->split_rows = col_panels < threads && row_panels > col_panels;
    int64_t panels = job->split_rows ? row_panels : col_panels;
    job->n_parts = (int)(panels < threads ? (panels > 0 ? panels : 1) : threads);
}

/* A job over A [m, k] (row stride lda) and the weights b, into C [m, n] (row stride ldc). */
static gemm_job make_job(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                         gemm_b_source b, float *c, int64_t ldc)
{
    gemm_job job;
    memset(&job, 0, sizeof job);
    job.kt = lp_kernels_table();
    job.m = m;
    job.n = n;
    job.k = k;
    job.a = a;
    job.lda = lda;
    job.b = b;
    job.c = c;
    job.ldc = ldc;
    return job;
}

void lp_gemm_f32(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float *c, int64_t ldc, bool accumulate, lp_pool *pool)
{
    if (m <= 0 || n <= 0)
        return;
    gemm_b_source src = {LP_DTYPE_F32, (const uint8_t *)b, (uint64_t)ldb * sizeof(float), false};
    gemm_job job = make_job(m, n, k, a, lda, src, c, ldc);
    job.accumulate = accumulate;
    plan_parts(&job, pool);
    lp_pool_run(job.pool, job.n_parts, gemm_part, &job);
}


/* Run the job's parts and return the first part's failure (parts fail only on bad blocks or
 * memory). */
static lp_status run_parts(gemm_job *job, lp_error *err)
{
    job->status = calloc((size_t)job->n_parts, sizeof *job->status);
    job->errors = calloc((size_t)job->n_parts, sizeof *job->errors);
    lp_status result = LP_OK;
    if (!job->status || !job->errors) {
        result = lp_error_set(err, LP_ERR_NOMEM, "linear: out of memory");
    } else {
        lp_pool_run(job->pool, job->n_parts, gemm_part, job);
        for (int part = 0; part < job->n_parts && result == LP_OK; part++)
            if (job->status[part] != LP_OK) {
                result = job->status[part];
                if (err)
                    *err = job->errors[part];
                lp_error_prefix(err, "linear: ");
            }
    }
    free(job->status);
    free(job->errors);
    return result;
}

lp_status lp_linear(const float *x, int64_t m, const lp_matrix *w, const float *bias, float *y,
                    lp_pool *pool, lp_error *err)
{
    lp_status st = lp_linear_check(m, w, err);
    if (st != LP_OK || m == 0 || w->rows == 0)
        return st;
    /* one row (a decode step, last-position logits): the matrix-vector kernels read the stored
     * blocks directly */
    if (m == 1 && !w->transposed && lp_matvec_supported(w->dtype))
        return lp_matvec(x, w, bias, y, pool, err);
    /* y must not overlap x: threads write C while others still pack A (programmer misuse) */
    uintptr_t x0 = (uintptr_t)x, x1 = (uintptr_t)(x + m * w->cols);
    uintptr_t y0 = (uintptr_t)y, y1 = (uintptr_t)(y + m * w->rows);
    LP_ASSERT(x1 <= y0 || y1 <= x0 || w->cols == 0);
    gemm_b_source src = {w->dtype, w->data, w->row_bytes, w->transposed};
    gemm_job job = make_job(m, w->rows, w->cols, x, w->cols, src, y, w->rows);
    job.bias = bias;
    plan_parts(&job, pool);
    return run_parts(&job, err);
}
