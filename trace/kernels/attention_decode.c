/* Attention for a few query rows against many keys: a decode step (one new token over its KV
 * cache) and the like. The blocked path (attention.c) packs every key of the call into 16-key
 * panels and converts every V row, then runs 6-row tiles, which pays when tiles of query rows
 * reuse the panels and costs several times the arithmetic when one row reads each key once.
 * Here the keys go by in chunks of about 16 KiB: an f16/bf16 chunk is converted once into L1
 * and read by every query row and every head of the GQA group, scores by the `scores` kernel,
 * the online softmax between chunks, and out += P V by `weighted_sum`. With probabilities or
 * statistics asked for, each (row, head) keeps its finished scores ([n_k] floats, never T x T)
 * and the blocked path's pass 2 (lp_attn_row_probes) turns them into its map row and its
 * statistics once the row's max and sum are final.
 *
 * Same scores, masks, softcap, ALiBi, sinks, poisoning and LP_ATTN_EXP_MIN flushing as the
 * blocked path (kernels.h's lp_attn_args); the sums run in another order, so the two agree
 * within float rounding, not bit for bit. Which path a head takes depends only on its n_q, n_k
 * and head sizes, so an observed decode step computes what an unobserved one does and no result
 * depends on the thread count; a row's chunks start at multiples of the chunk from key 0, so a
 * row's result does not depend on the other rows of its call either. */
#include "trace/kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trace/kernels/kernels_internal.h"

/* Floats per converted chunk of K (and of V): 16 KiB each, so both stay in L1 with the scores. */
enum { DEC_CHUNK_FLOATS = 4096 };

/* One (query row, head) pair of the call. */
typedef struct dec_row {
    lp_attn_args head; /* the head as a call of its own (lp_attn_group_head) */
    int64_t i;         /* its query row */
    lp_attn_row_state rs;
    float *kept;       /* with probes: its finished scores, indexed by key; else NULL */
} dec_row;

/* By the head's n_q and n_k, not the call's row range: a head split across threads takes one
 * path in every part. Queries against a longer key range (a cache) only: a prompt of a few
 * tokens stays on the blocked path, so it computes bit for bit what it computes padded in a
 * batch (where its n_q is the batch's length). */
bool lp_attention_decode_applies(const lp_attn_args *a)
{
    int64_t widest = a->head_dim > a->v_dim ? a->head_dim : a->v_dim;
    return a->n_q <= LP_ATTN_DECODE_MAX_ROWS && a->n_k > a->n_q &&
           widest <= DEC_CHUNK_FLOATS / 4;
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
    lp_attn_row_state *rs = &r->rs;
    int64_t j0 = rs->lo > kb ? rs->lo : kb, j1 = rs->hi < kb + kn ? rs->hi : kb + kn;
    if (j0 >= j1 || rs->poisoned)
        return;
    int64_t n = j1 - j0;
    kt->scores(a->q + r->i * a->q_stride, k + (j0 - kb) * k_stride, k_stride, n, a->head_dim,
               a->scale, s);
    lp_attn_finish_scores(a, s, j0, n, rs->pos);
    bool finite;
    float block_max = kt->block_max(s, n, &finite);
    if (!finite) {
        rs->poisoned = true;
        return;
    }
    if (r->kept)
        memcpy(r->kept + j0, s, (size_t)n * sizeof *s);
    float *out = a->out + r->i * a->out_stride;
    if (block_max > rs->m) {
        if (rs->m != -INFINITY) {
            float alpha = lp_attn_rescale(kt, rs->m, block_max);
            kt->scale(out, alpha, a->v_dim);
            rs->l *= alpha;
        }
        rs->m = block_max;
    }
    rs->l += kt->attn_exp_sum(s, n, rs->m); /* s now holds the weights exp(s - m) */
    kt->weighted_sum(out, s, v + (j0 - kb) * v_stride, v_stride, n, a->v_dim);
}

/* The output row: normalized, NaN when poisoned, 0 with no mass (no key and no sink); then its
 * map row and statistics when asked for. */
static void dec_row_finish(const lp_kernel_table *kt, dec_row *r)
{
    const lp_attn_args *a = &r->head;
    float *out = a->out + r->i * a->out_stride;
    if (r->rs.poisoned)
        for (int64_t d = 0; d < a->v_dim; d++)
            out[d] = NAN;
    else if (r->rs.l > 0.0f)
        kt->scale(out, 1.0f / r->rs.l, a->v_dim);
    if (r->kept)
        lp_attn_row_probes(kt, a, &r->rs, r->kept, r->i);
}

/* The call's (row, head) pairs, each with its kept-scores row when probes are asked for, in
 * one allocation (NULL: out of memory); *k_lo, *k_hi the keys any of them sees. */
static dec_row *dec_rows_init(const lp_attn_args *a, int64_t begin, int64_t end,
                              int64_t n_heads, int64_t *k_lo, int64_t *k_hi)
{
    int64_t n_rows = (end - begin) * n_heads;
    bool probes = a->probs || a->row_stats;
    size_t kept_floats = probes ? (size_t)n_rows * (size_t)a->n_k : 0;
    dec_row *rows = malloc((size_t)n_rows * sizeof *rows + kept_floats * sizeof(float));
    if (!rows)
        return NULL;
    float *kept = (float *)(void *)(rows + n_rows);
    *k_lo = a->n_k;
    *k_hi = 0;
    for (int64_t i = begin; i < end; i++)
        for (int64_t g = 0; g < n_heads; g++) {
            dec_row *r = &rows[(i - begin) * n_heads + g];
            r->head = lp_attn_group_head(a, g);
            r->i = i;
            r->kept = probes ? kept + (r - rows) * a->n_k : NULL;
            lp_attn_row_init(&r->head, i, &r->rs);
            if (r->rs.lo < r->rs.hi) {
                *k_lo = r->rs.lo < *k_lo ? r->rs.lo : *k_lo;
                *k_hi = r->rs.hi > *k_hi ? r->rs.hi : *k_hi;
            }
        }
    return rows;
}

void lp_attention_decode(const lp_attn_args *a)
{
    const lp_kernel_table *kt = lp_kernels_table();
    lp_dtype dt = lp_attn_kv_dtype(a);
    int64_t begin, end, n_heads = lp_attn_group_size(a), k_lo, k_hi;
    lp_attn_rows(a, &begin, &end);
    int64_t n_rows = (end - begin) * n_heads;
    if (n_rows == 0)
        return;
    dec_row *rows = dec_rows_init(a, begin, end, n_heads, &k_lo, &k_hi);
    if (!rows) { /* the reference needs no scratch */
        lp_attention_ref(a);
        return;
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
    if (a->probs || a->row_stats)
        lp_attn_note_probed((uint64_t)n_rows);
    free(rows);
}
