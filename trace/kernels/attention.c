/* Tiled attention with an online softmax (FlashAttention's scheme): no T x T buffer; exact
 * probabilities and per-row statistics on request.
 *
 * Query rows are taken BQ at a time and keys BK at a time, so a key block (BK x head_dim) stays in
 * L1 while the BQ rows visit it. Each row keeps a running max m, sum l = sum exp(s - m) and its
 * output accumulator (the out row itself); a new block with a larger max rescales them by
 * exp(m_old - m_new). The statistics are kept the same way, relative to the running max:
 *   e_sum = sum exp(s - m) * (s - m)        entropy = log l - e_sum / l
 *   d_sum = sum exp(s - m) * (pos - j)      distance = d_sum / l
 *   w_sum = sum over local keys exp(s - m)  local = w_sum / l
 * and rescale as e_sum' = a * (e_sum + (m_old - m_new) * l) with a = exp(m_old - m_new).
 * When probs is requested, a second pass over the row's blocks (after its final m and l are
 * known) recomputes the scores and writes p = exp(s - m) / l: exact, not rescaled.
 * A learned sink starts each row as if one key with score sink_logit and a zero value row had
 * been seen (m = sink_logit, l = 1); the max probability uses the largest real score kmax. K/V
 * stored in f16/bf16 are converted to f32 block by block into scratch (the reference runs
 * instead when that scratch cannot be allocated).
 * Scores are computed by the same code in both passes, so they agree bit for bit. A non-finite
 * score (NaN or overflow in q or k) poisons its row: output, visible probabilities and statistics
 * become NaN instead of a plausible-looking distribution.
 */
#include "trace/kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trace/kernels/kernels_internal.h"

enum { ATT_BQ = 16, ATT_BK = 64 };

typedef struct row_state {
    int64_t lo, hi, pos;
    float m, l, e_sum, d_sum, w_sum;
    float kmax; /* largest real key score (m may be the sink's) */
    float s_sink, s_prev, s_self; /* raw scores of keys 0, pos-1, pos; NAN when not visible */
    bool poisoned; /* a non-finite score: the row's output, probabilities and stats are NaN */
} row_state;

/* Keys [k0, k0 + n) of K and V as f32 rows: the stored rows themselves, or converted into the
 * caller's scratch. */
typedef struct kv_block {
    const float *k, *v; /* row k0 of the block */
    int64_t k_stride, v_stride;
    int64_t k0;
} kv_block;

typedef struct kv_scratch {
    lp_dtype dtype;
    float *k, *v; /* [ATT_BK, head_dim], [ATT_BK, v_dim]; NULL for f32 */
} kv_scratch;

static void convert_rows(const lp_kernel_table *kt, lp_dtype dt, const void *base, int64_t stride,
                         int64_t j0, int64_t n, int64_t dim, float *dst)
{
    const uint8_t *bytes = base;
    for (int64_t j = 0; j < n; j++) {
        const void *row = bytes + (uint64_t)((j0 + j) * stride) * 2;
        if (dt == LP_DTYPE_F16)
            kt->f16_to_f32(row, dst + j * dim, dim);
        else
            kt->bf16_to_f32(row, dst + j * dim, dim);
    }
}

static kv_block load_block(const lp_kernel_table *kt, const lp_attn_args *a, const kv_scratch *ks,
                           int64_t k0, int64_t n, bool with_v)
{
    kv_block b = {NULL, NULL, a->k_stride, a->v_stride, k0};
    if (ks->dtype == LP_DTYPE_F32) {
        b.k = (const float *)a->k + k0 * a->k_stride;
        b.v = (const float *)a->v + k0 * a->v_stride;
        return b;
    }
    convert_rows(kt, ks->dtype, a->k, a->k_stride, k0, n, a->head_dim, ks->k);
    b.k = ks->k;
    b.k_stride = a->head_dim;
    if (with_v)
        convert_rows(kt, ks->dtype, a->v, a->v_stride, k0, n, a->v_dim, ks->v);
    b.v = ks->v;
    b.v_stride = a->v_dim;
    return b;
}

/* Final scores of query row q (at position pos) against keys [j0, j1) of the block into
 * s[0 .. j1-j0): scaled dot products, softcap, ALiBi bias. */
static void block_scores(const lp_kernel_table *kt, const lp_attn_args *a, const kv_block *b,
                         const float *q, int64_t pos, int64_t j0, int64_t j1, float *s)
{
    kt->scores(q, b->k + (j0 - b->k0) * b->k_stride, b->k_stride, j1 - j0, a->head_dim, a->scale,
               s);
    if (a->softcap > 0.0f) {
        float inv = 1.0f / a->softcap;
        for (int64_t j = 0; j < j1 - j0; j++)
            s[j] = a->softcap * tanhf(s[j] * inv);
    }
    if (a->alibi_slope != 0.0f)
        for (int64_t j = 0; j < j1 - j0; j++)
            s[j] += a->alibi_slope * (float)(j0 + j - pos);
}

static void rescale_stats(row_state *r, float m_new)
{
    if (r->m == -INFINITY)
        return; /* nothing accumulated yet */
    float alpha = expf(r->m - m_new);
    r->e_sum = alpha * (r->e_sum + (r->m - m_new) * r->l);
    r->d_sum *= alpha;
    r->w_sum *= alpha;
    r->l *= alpha;
}

/* Row r of the query block starting at q0: its visible keys, position and empty accumulators;
 * its output row is zeroed. */
static void row_init(const lp_attn_args *a, int64_t i, row_state *rs)
{
    lp_mask_row_range(a->mask, a->batch, i, &rs->lo, &rs->hi);
    if (rs->hi > a->n_k) /* a mask built for more keys than given: never read past K/V */
        rs->hi = a->n_k;
    if (rs->lo > rs->hi)
        rs->lo = rs->hi;
    rs->pos = a->mask->q_pos0 + i;
    rs->m = a->has_sink ? a->sink_logit : -INFINITY;
    rs->l = a->has_sink ? 1.0f : 0.0f;
    rs->e_sum = rs->d_sum = rs->w_sum = 0.0f;
    rs->kmax = -INFINITY;
    rs->s_sink = rs->s_prev = rs->s_self = NAN;
    rs->poisoned = a->has_sink && !isfinite(a->sink_logit);
    memset(a->out + i * a->out_stride, 0, (size_t)a->v_dim * sizeof(float));
}

/* The raw scores of keys 0, pos-1 and pos, when they fall in [j0, j1). */
static void keep_marked_scores(row_state *rs, int64_t j0, int64_t j1, const float *s)
{
    if (j0 <= 0 && 0 < j1)
        rs->s_sink = s[0 - j0];
    if (j0 <= rs->pos - 1 && rs->pos - 1 < j1)
        rs->s_prev = s[rs->pos - 1 - j0];
    if (j0 <= rs->pos && rs->pos < j1)
        rs->s_self = s[rs->pos - j0];
}

/* Pass 1 for query row i and the key block at k0: fold the row's visible keys of the block into
 * its running max, sum, statistics and output. s, s_raw: [ATT_BK] scratch. */
static void row_take_block(const lp_kernel_table *kt, const lp_attn_args *a, const kv_block *b,
                           row_state *rs, int64_t i, float *s, float *s_raw)
{
    const bool want_stats = a->row_stats != NULL;
    int64_t j0 = rs->lo > b->k0 ? rs->lo : b->k0;
    int64_t j1 = rs->hi < b->k0 + ATT_BK ? rs->hi : b->k0 + ATT_BK;
    if (j0 >= j1 || rs->poisoned)
        return;
    float *out = a->out + i * a->out_stride;
    int64_t count = j1 - j0;
    block_scores(kt, a, b, a->q + i * a->q_stride, rs->pos, j0, j1, s);
    float block_max = -INFINITY;
    bool finite = true;
    for (int64_t j = 0; j < count; j++) {
        finite = finite && isfinite(s[j]);
        if (s[j] > block_max)
            block_max = s[j];
    }
    if (!finite) {
        rs->poisoned = true;
        return;
    }
    if (want_stats)
        keep_marked_scores(rs, j0, j1, s);
    if (block_max > rs->kmax)
        rs->kmax = block_max;
    if (block_max > rs->m) {
        if (rs->m != -INFINITY)
            kt->scale(out, expf(rs->m - block_max), a->v_dim);
        if (want_stats)
            rescale_stats(rs, block_max);
        else if (rs->m != -INFINITY)
            rs->l *= expf(rs->m - block_max);
        rs->m = block_max;
    }
    float m = rs->m;
    if (want_stats)
        memcpy(s_raw, s, (size_t)count * sizeof(float));
    rs->l += kt->exp_sum(s, count, m); /* s now holds the weights exp(s - m) */
    if (want_stats)
        for (int64_t j = 0; j < count; j++) {
            int64_t dist = rs->pos - (j0 + j);
            rs->e_sum += s[j] * (s_raw[j] - m);
            rs->d_sum += s[j] * (float)dist;
            if (dist < a->local_window)
                rs->w_sum += s[j];
        }
    kt->weighted_sum(out, s, b->v + (j0 - b->k0) * b->v_stride, b->v_stride, count, a->v_dim);
}

/* A row with no mass at all: no visible key and no sink. */
static bool row_empty(const row_state *rs) { return !(rs->l > 0.0f); }

/* The row's statistics from its accumulators (0 for a fully masked row, NaN when poisoned). */
static void row_stats(const lp_attn_args *a, const row_state *rs, lp_attn_row_stats *st)
{
    memset(st, 0, sizeof *st);
    if (rs->poisoned) {
        st->entropy = st->max_prob = st->sink = st->prev = st->self = NAN;
        st->distance = st->local = st->row_sum = st->learned_sink = NAN;
    } else if (!row_empty(rs)) {
        float inv_l = 1.0f / rs->l;
        float entropy = logf(rs->l) - rs->e_sum * inv_l;
        float sink_w = a->has_sink ? expf(a->sink_logit - rs->m) : 0.0f;
        st->entropy = entropy > 0.0f ? entropy : 0.0f;
        st->max_prob = rs->kmax == -INFINITY ? 0.0f : expf(rs->kmax - rs->m) * inv_l;
        st->sink = isnan(rs->s_sink) ? 0.0f : expf(rs->s_sink - rs->m) * inv_l;
        st->prev = isnan(rs->s_prev) ? 0.0f : expf(rs->s_prev - rs->m) * inv_l;
        st->self = isnan(rs->s_self) ? 0.0f : expf(rs->s_self - rs->m) * inv_l;
        st->distance = rs->d_sum * inv_l;
        st->local = rs->w_sum * inv_l;
        st->learned_sink = sink_w * inv_l;
        st->row_sum = a->has_sink ? (rs->l - sink_w) * inv_l : 1.0f;
    }
}

/* Finish query row i: normalize (or poison) its output and write its statistics. */
static void row_finish(const lp_kernel_table *kt, const lp_attn_args *a, const row_state *rs,
                       int64_t i)
{
    float *out = a->out + i * a->out_stride;
    if (rs->poisoned) {
        for (int64_t d = 0; d < a->v_dim; d++)
            out[d] = NAN;
    } else if (!row_empty(rs)) {
        kt->scale(out, 1.0f / rs->l, a->v_dim);
    }
    if (a->row_stats)
        row_stats(a, rs, &a->row_stats[i]);
}

/* Pass 2 for query row i: exact probabilities, block by block, zeros outside the visible
 * range. */
static void row_probs(const lp_kernel_table *kt, const lp_attn_args *a, const kv_scratch *ks,
                      const row_state *rs, int64_t i)
{
    float *prow = a->probs + i * a->n_k;
    if (row_empty(rs) && !rs->poisoned) {
        memset(prow, 0, (size_t)a->n_k * sizeof(float));
        return;
    }
    memset(prow, 0, (size_t)rs->lo * sizeof(float));
    memset(prow + rs->hi, 0, (size_t)(a->n_k - rs->hi) * sizeof(float));
    if (rs->poisoned) {
        for (int64_t j = rs->lo; j < rs->hi; j++)
            prow[j] = NAN;
        return;
    }
    const float *q = a->q + i * a->q_stride;
    float inv_l = 1.0f / rs->l;
    for (int64_t k0 = rs->lo / ATT_BK * ATT_BK; k0 < rs->hi; k0 += ATT_BK) {
        int64_t j0 = rs->lo > k0 ? rs->lo : k0;
        int64_t j1 = rs->hi < k0 + ATT_BK ? rs->hi : k0 + ATT_BK;
        kv_block b = load_block(kt, a, ks, j0, j1 - j0, false);
        block_scores(kt, a, &b, q, rs->pos, j0, j1, prow + j0);
        kt->exp_sum(prow + j0, j1 - j0, rs->m);
        kt->scale(prow + j0, inv_l, j1 - j0);
    }
}

/* One block of ATT_BQ query rows from q0: both passes. */
static void query_block(const lp_kernel_table *kt, const lp_attn_args *a, const kv_scratch *ks,
                        int64_t q0, row_state *rows)
{
    float s[ATT_BK], s_raw[ATT_BK];
    int64_t bq = a->n_q - q0 < ATT_BQ ? a->n_q - q0 : ATT_BQ;
    int64_t k_lo = a->n_k, k_hi = 0; /* the keys any row of the block sees */
    for (int64_t r = 0; r < bq; r++) {
        row_init(a, q0 + r, &rows[r]);
        if (rows[r].lo < rows[r].hi) {
            k_lo = rows[r].lo < k_lo ? rows[r].lo : k_lo;
            k_hi = rows[r].hi > k_hi ? rows[r].hi : k_hi;
        }
    }
    /* pass 1: online softmax over key blocks, aligned to ATT_BK so both passes see the same
     * blocks */
    for (int64_t k0 = k_lo / ATT_BK * ATT_BK; k0 < k_hi; k0 += ATT_BK) {
        int64_t n = a->n_k - k0 < ATT_BK ? a->n_k - k0 : ATT_BK;
        kv_block b = load_block(kt, a, ks, k0, n, true);
        for (int64_t r = 0; r < bq; r++)
            row_take_block(kt, a, &b, &rows[r], q0 + r, s, s_raw);
    }
    for (int64_t r = 0; r < bq; r++)
        row_finish(kt, a, &rows[r], q0 + r);
    if (a->probs)
        for (int64_t r = 0; r < bq; r++)
            row_probs(kt, a, ks, &rows[r], q0 + r);
}

void lp_attention(const lp_attn_args *a)
{
    const lp_kernel_table *kt = lp_kernels_table();
    row_state rows[ATT_BQ];
    kv_scratch ks = {lp_attn_kv_dtype(a), NULL, NULL};
    if (ks.dtype != LP_DTYPE_F32) {
        ks.k = malloc((size_t)(ATT_BK * a->head_dim) * sizeof(float));
        ks.v = malloc((size_t)(ATT_BK * (a->v_dim > 0 ? a->v_dim : 1)) * sizeof(float));
        if (!ks.k || !ks.v) { /* no scratch: the reference needs none */
            free(ks.k);
            free(ks.v);
            lp_attention_ref(a);
            return;
        }
    }
    for (int64_t q0 = 0; q0 < a->n_q; q0 += ATT_BQ)
        query_block(kt, a, &ks, q0, rows);
    free(ks.k);
    free(ks.v);
}
