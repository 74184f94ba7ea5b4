/* Pass 2 of both attention paths, one query row at a time: once a row's max and sum are final,
 * its kept scores become its probabilities (its map row, the masked frame included) in one
 * sweep that also sums what its statistics need (attn_row_probs), then the statistics and the
 * sparsity counts (attention.c's header explains the sums). Also the rows' initial state and the
 * count lp_attn_rows_probed reports. */
#include "trace/kernels/kernels.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "trace/kernels/kernels_internal.h"

/* lp_attn_rows_probed's count: one relaxed add per tile or call, never on the bare path. */
static _Atomic uint64_t rows_probed;

uint64_t lp_attn_rows_probed(void)
{
    return atomic_load_explicit(&rows_probed, memory_order_relaxed);
}

void lp_attn_note_probed(uint64_t rows)
{
    atomic_fetch_add_explicit(&rows_probed, rows, memory_order_relaxed);
}

void lp_attn_row_init(const lp_attn_args *a, int64_t i, lp_attn_row_state *rs)
{
    lp_mask_row_range(a->mask, a->batch, i, &rs->lo, &rs->hi);
    if (rs->hi > a->n_k) /* a mask built for more keys than given: never read past K/V */
        rs->hi = a->n_k;
    if (rs->lo > rs->hi)
        rs->lo = rs->hi;
    rs->pos = a->mask->q_pos0 + i;
    rs->m = a->has_sink ? a->sink_logit : -INFINITY;
    rs->l = a->has_sink ? 1.0f : 0.0f;
    rs->poisoned = a->has_sink && !isfinite(a->sink_logit);
    memset(a->out + i * a->out_stride, 0, (size_t)a->v_dim * sizeof(float));
}

/* Before pass 2: row i's probabilities are 0 outside its visible keys (all of them for an
 * empty row), NaN inside them for a poisoned row. */
static void row_probs_frame(const lp_kernel_table *kt, const lp_attn_args *a,
                            const lp_attn_row_state *rs, int64_t i)
{
    float *prow = a->probs + i * a->n_k;
    if (lp_attn_row_empty(rs) && !rs->poisoned) {
        kt->stream_fill(prow, NULL, a->n_k);
        return;
    }
    kt->stream_fill(prow, NULL, rs->lo);
    kt->stream_fill(prow + rs->hi, NULL, a->n_k - rs->hi);
    if (rs->poisoned)
        for (int64_t j = rs->lo; j < rs->hi; j++)
            prow[j] = NAN;
}

static uint32_t float_bits(float p)
{
    uint32_t u;
    memcpy(&u, &p, sizeof u);
    return u;
}

/* The statistics of a row whose probabilities p (indexed by key) and sums are computed. */
static void row_stats_from_probs(const lp_attn_args *a, const lp_attn_row_state *rs,
                                 const float *p, const lp_attn_row_sums *sums,
                                 lp_attn_row_stats *st)
{
    float inv_l = 1.0f / rs->l;
    float sink_w = a->has_sink ? expf(a->sink_logit - rs->m) : 0.0f;
    float entropy_part = sums->entropy_part + sink_w * inv_l * (a->has_sink ? a->sink_logit - rs->m
                                                                              : 0.0f);
    float entropy = logf(rs->l) - entropy_part;
    st->entropy = entropy > 0.0f ? entropy : 0.0f;
    st->max_prob = sums->max_prob;
    st->sink = rs->lo <= 0 && 0 < rs->hi ? p[0] : 0.0f;
    st->prev = rs->lo <= rs->pos - 1 && rs->pos - 1 < rs->hi ? p[rs->pos - 1] : 0.0f;
    st->self = rs->lo <= rs->pos && rs->pos < rs->hi ? p[rs->pos] : 0.0f;
    st->distance = sums->distance;
    st->local = sums->local;
    st->learned_sink = sink_w * inv_l;
    st->row_sum = a->has_sink ? (rs->l - sink_w) * inv_l : 1.0f;
}

void lp_attn_row_probes(const lp_kernel_table *kt, const lp_attn_args *a,
                        const lp_attn_row_state *rs, float *row, int64_t i)
{
    lp_attn_row_stats *st = a->row_stats ? &a->row_stats[i] : NULL;
    if (a->probs)
        row_probs_frame(kt, a, rs, i);
    if (st)
        memset(st, 0, sizeof *st); /* a row with no mass: 0 */
    if (rs->poisoned && st) {
        st->entropy = st->max_prob = st->sink = st->prev = st->self = NAN;
        st->distance = st->local = st->row_sum = st->learned_sink = NAN;
        st->keys50 = st->keys90 = st->keys99 = st->low_mass = NAN;
    }
    if (rs->poisoned || lp_attn_row_empty(rs))
        return;
    lp_attn_row_sums sums = {0.0f, 0.0f, 0.0f, 0.0f, INFINITY};
    int64_t n = rs->hi - rs->lo;
    if (n > 0)
        kt->attn_row_probs(row + rs->lo, n, rs->m, 1.0f / rs->l, rs->lo, rs->pos,
                           a->local_window, &sums);
    if (a->probs) /* the map is written once, past the caches: no read for ownership */
        kt->stream_fill(a->probs + i * a->n_k + rs->lo, row + rs->lo, n);
    if (!st)
        return;
    row_stats_from_probs(a, rs, row, &sums, st);
    if (n > 0 && !a->skip_sparsity) /* it permutes the kept row, which is scratch */
        /* the range from pass 2's sums, not from one more sweep (p is never -0) */
        lp_attn_row_sparsity_in(kt, row + rs->lo, n,
                                sums.min_positive == INFINITY ? UINT32_MAX
                                                              : float_bits(sums.min_positive),
                                float_bits(sums.max_prob), st);
}

