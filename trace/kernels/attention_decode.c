/* Attention for a few query rows against many keys: a decode step (one new token over its KV
 * cache) and the like. The blocked path (attention.c) packs every key of the call into 16-key
 * panels and converts every V row before it computes anything, which pays when tiles of query
 * rows reuse the panels and costs ten times the arithmetic when one row reads each key once.
 * Here the keys go by in chunks of about 16 KiB: an f16/bf16 chunk is converted once into L1
 * and read by every query row and every head of the GQA group, scores by the `scores` kernel,
 * the online softmax between chunks, and out += P V by `weighted_sum`.
 *
 * Same scores, masks, softcap, ALiBi, sinks, poisoning and LP_ATTN_EXP_MIN flushing as the
 * blocked path (kernels.h's lp_attn_args); the sums run in another order, so the two agree
 * within float rounding, not bit for bit. Probabilities and row statistics are the blocked
 * path's job: a call that asks for them goes there, so a decode step observed with maps may
 * differ from an unobserved one in the last bits (the leak check's decode tolerance covers it).
 * Which path a head takes depends only on its n_q and on what is asked, never on the thread
 * count, and a row's chunks start at multiples of the chunk from key 0, so a row's result does
 * not depend on the other rows of its call either. */
#include "trace/kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trace/kernels/kernels_internal.h"

/* Floats per converted chunk of K (and of V): 16 KiB each, so both stay in L1 with the scores. */
enum { DEC_CHUNK_FLOATS = 4096 };

/* The running softmax of one (query row, head) pair. */
typedef struct dec_row {
    lp_attn_args head; /* the head as a call of its own (lp_attn_group_head) */
    int64_t i, lo, hi, pos;
    float m, l;
    bool poisoned;
} dec_row;

/* By the head's n_q, not the call's row range: a head split across threads takes one path in
 * every part, so the result does not depend on the thread count. */
bool lp_attention_decode_applies(const lp_attn_args *a)
{
    int64_t widest = a->head_dim > a->v_dim ? a->head_dim : a->v_dim;
    return !a->probs && !a->row_stats && a->n_q <= LP_ATTN_DECODE_MAX_ROWS &&
           widest <= DEC_CHUNK_FLOATS / 4;
}

static void dec_row_init(const lp_attn_args *a, int64_t g, int64_t i, dec_row *r)
{
    r->head = lp_attn_group_head(a, g);
    r->i = i;
    lp_mask_row_range(a->mask, a->batch, i, &r->lo, &r->hi);
    if (r->hi > a->n_k) /* a mask built for more keys than given: never read past K/V */
        r->hi = a->n_k;
    if (r->lo > r->hi)
        r->lo = r->hi;
    r->pos = a->mask->q_pos0 + i;
    r->m = a->has_sink ? r->head.sink_logit : -INFINITY;
    r->l = a->has_sink ? 1.0f : 0.0f;
    r->poisoned = a->has_sink && !isfinite(r->head.sink_logit);
    memset(r->head.out + i * a->out_stride, 0, (size_t)a->v_dim * sizeof(float));
}

/* Rows [j0, j0 + n) of a K or V matrix as f32 rows of `width` values: the stored rows
 * themselves for f32 (*stride = the call's), else converted into buf (*stride = width). */
static const float *chunk_rows(const lp_kernel_table *kt, lp_dtype dt, const void *base,
                               int64_t row_stride, int64_t j0, int64_t n, int64_t width,
                               float *buf, int64_t *stride)
{
    if (dt == LP_DTYPE_F32) {
        *stride = row_stride;
        return (const float *)base + j0 * row_stride;
    }
    for (int64_t j = 0; j < n; j++) {
        const uint8_t *row = (const uint8_t *)base + (uint64_t)((j0 + j) * row_stride) * 2;
        if (dt == LP_DTYPE_F16)
            kt->f16_to_f32(row, buf + j * width, width);
        else
            kt->bf16_to_f32(row, buf + j * width, width);
    }
    *stride = width;
    return buf;
}

/* Fold keys [kb, kb + kn) of the chunk (k, v as f32 rows) into row r: scores, the running max
 * and sum (the output rescaled when the max rises), then out += weights . V. */
static void dec_row_take(const lp_kernel_table *kt, dec_row *r, int64_t kb, int64_t kn,
                         const float *k, int64_t k_stride, const float *v, int64_t v_stride,
                         float *s)
{
    const lp_attn_args *a = &r->head;
    int64_t j0 = r->lo > kb ? r->lo : kb, j1 = r->hi < kb + kn ? r->hi : kb + kn;
    if (j0 >= j1 || r->poisoned)
        return;
    int64_t n = j1 - j0;
    kt->scores(a->q + r->i * a->q_stride, k + (j0 - kb) * k_stride, k_stride, n, a->head_dim,
               a->scale, s);
    lp_attn_finish_scores(a, s, j0, n, r->pos);
    bool finite;
    float block_max = kt->block_max(s, n, &finite);
    if (!finite) {
        r->poisoned = true;
        return;
    }
    float *out = a->out + r->i * a->out_stride;
    if (block_max > r->m) {
        if (r->m != -INFINITY) {
            float alpha = expf(r->m - block_max);
            kt->scale(out, alpha, a->v_dim);
            r->l *= alpha;
        }
        r->m = block_max;
    }
    r->l += kt->attn_exp_sum(s, n, r->m); /* s now holds the weights exp(s - m) */
    kt->weighted_sum(out, s, v + (j0 - kb) * v_stride, v_stride, n, a->v_dim);
}

/* The output row: normalized, NaN when poisoned, 0 with no mass (no key and no sink). */
static void dec_row_finish(const lp_kernel_table *kt, const dec_row *r)
{
    const lp_attn_args *a = &r->head;
    float *out = a->out + r->i * a->out_stride;
    if (r->poisoned)
        for (int64_t d = 0; d < a->v_dim; d++)
            out[d] = NAN;
    else if (r->l > 0.0f)
        kt->scale(out, 1.0f / r->l, a->v_dim);
}

void lp_attention_decode(const lp_attn_args *a)
{
    const lp_kernel_table *kt = lp_kernels_table();
    lp_dtype dt = lp_attn_kv_dtype(a);
    int64_t begin, end, n_heads = lp_attn_group_size(a);
    lp_attn_rows(a, &begin, &end);
    int64_t n_rows = (end - begin) * n_heads;
    if (n_rows == 0)
        return;
    dec_row *rows = malloc((size_t)n_rows * sizeof *rows);
    if (!rows) { /* the reference needs no scratch */
        lp_attention_ref(a);
        return;
    }
    int64_t k_lo = a->n_k, k_hi = 0;
    for (int64_t i = begin; i < end; i++)
        for (int64_t g = 0; g < n_heads; g++) {
            dec_row *r = &rows[(i - begin) * n_heads + g];
            dec_row_init(a, g, i, r);
            if (r->lo < r->hi) {
                k_lo = r->lo < k_lo ? r->lo : k_lo;
                k_hi = r->hi > k_hi ? r->hi : k_hi;
            }
        }
    int64_t widest = a->head_dim > a->v_dim ? a->head_dim : a->v_dim;
    int64_t chunk = DEC_CHUNK_FLOATS / widest;
    _Alignas(64) float kbuf[DEC_CHUNK_FLOATS], vbuf[DEC_CHUNK_FLOATS], s[DEC_CHUNK_FLOATS];
    /* chunks aligned from key 0: a row's sums do not depend on the other rows of the call */
    for (int64_t kb = k_lo / chunk * chunk; kb < k_hi; kb += chunk) {
        int64_t kn = k_hi - kb < chunk ? k_hi - kb : chunk, ks, vs;
        const float *k = chunk_rows(kt, dt, a->k, a->k_stride, kb, kn, a->head_dim, kbuf, &ks);
        const float *v = chunk_rows(kt, dt, a->v, a->v_stride, kb, kn, a->v_dim, vbuf, &vs);
        for (int64_t r = 0; r < n_rows; r++)
            dec_row_take(kt, &rows[r], kb, kn, k, ks, v, vs, s);
    }
    for (int64_t r = 0; r < n_rows; r++)
        dec_row_finish(kt, &rows[r]);
    free(rows);
}
