/* Recording a padded batch: each sequence of one lp_forward call becomes its own run, its sites
 * cropped to its real tokens [pad_left, T - pad_right) before the store sees them. The pass
 * stacks the sequences, so their sites arrive interleaved (layer by layer): all runs are open
 * at once and the store is pointed at the one each site belongs to. */
#define _POSIX_C_SOURCE 200809L
#include "trace/store/store_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct lp_store_batch {
    lp_store *store;
    lp_store_opts opts;
    const lp_run_info *infos;
    int64_t n_seqs, T;
    bool open;              /* the runs are begun */
    int64_t cur;            /* the sequence the store points at */
    lp_store_run_acc *accs; /* [n_seqs] each run's id and accumulators */
    lp_attn_row_stats *rows; /* [T] recomputed row statistics */
    lp_observer obs;
};

static bool batch_want(void *ctx, const lp_site *site)
{
    const lp_store_batch *b = ctx;
    if (site->batch < 0 || site->batch >= b->n_seqs)
        return false;
    switch (site->kind) {
    case LP_SITE_ATTN_PROBS: /* the statistics are recomputed from them */
    case LP_SITE_HEAD_OUTPUT:
    case LP_SITE_LOGITS:
    case LP_SITE_ROUTER:
        return true;
    default:
        return false;
    }
}

/* The store pointed at sequence seq's run, every run begun at the first site. */
static lp_status switch_to(lp_store_batch *b, int64_t seq, lp_error *err)
{
    if (!b->open) {
        lp_status st = lp_store_begin_batch_runs(b->store, b->infos, b->n_seqs, &b->opts,
                                                 b->accs, err);
        if (st != LP_OK)
            return st;
        b->open = true;
        b->cur = 0;
    }
    if (seq != b->cur)
        lp_store_select_run(b->store, &b->accs[seq]);
    b->cur = seq;
    return LP_OK;
}

/* The row statistics of n cropped probability rows (query i at the sequence's position i). */
static lp_status row_stats_of(const float *p, int64_t n, int64_t stride, int64_t local_window,
                              lp_attn_row_stats *out, lp_error *err)
{
    float *sorted = malloc((size_t)(n > 0 ? n : 1) * sizeof *sorted);
    if (!sorted)
        return lp_error_set(err, LP_ERR_NOMEM, "batch: out of memory for a probability row");
    for (int64_t i = 0; i < n; i++) {
        const float *row = p + i * stride;
        double h = 0, mx = 0, d = 0, loc = 0, sum = 0;
        for (int64_t k = 0; k < n; k++) {
            double v = (double)row[k];
            if (!(v > 0))
                continue;
            h -= v * log(v);
            mx = v > mx ? v : mx;
            d += v * (double)(i - k);
            loc += i - k < local_window ? v : 0;
            sum += v;
        }
        lp_attn_row_stats *r = &out[i];
        memset(r, 0, sizeof *r);
        r->entropy = (float)h;
        r->max_prob = (float)mx;
        r->sink = row[0];
        r->prev = i > 0 ? row[i - 1] : 0.0f;
        r->self = row[i];
        r->distance = (float)d;
        r->local = (float)loc;
        r->row_sum = (float)sum;
        memcpy(sorted, row, (size_t)n * sizeof *sorted); /* the masked keys are 0 and sort last */
        lp_attn_row_sparsity(sorted, n, r);
    }
    free(sorted);
    return LP_OK;
}

static lp_status batch_observe(void *ctx, const lp_site *site, const lp_view *v, lp_error *err)
{
    lp_store_batch *b = ctx;
    lp_status st;
    if ((!b->open || site->batch != b->cur) && (st = switch_to(b, site->batch, err)))
        return st;
    const lp_run_info *info = &b->infos[site->batch];
    int64_t a = info->pad_left, n = info->n_tokens;
    const lp_observer *inner = lp_store_observer(b->store);
    lp_site s0 = *site;
    s0.batch = 0;
    switch (site->kind) {
    case LP_SITE_ATTN_PROBS: {
        const float *p = v->data + a * v->stride + a;
        if ((st = row_stats_of(p, n, v->stride, b->opts.local_window, b->rows, err)))
            return st;
        lp_view pv = {p, n, n, v->stride, 0, b->rows, NULL};
        if (inner->want(inner->ctx, &s0) && (st = inner->observe(inner->ctx, &s0, &pv, err)))
            return st;
        lp_site ss = s0;
        ss.kind = LP_SITE_ATTN_STATS;
        lp_view sv = {NULL, n, 0, 0, 0, b->rows, NULL};
        return inner->observe(inner->ctx, &ss, &sv, err);
    }
    case LP_SITE_HEAD_OUTPUT: {
        lp_view hv = {v->data + a * v->stride, n, v->cols, v->stride, 0, NULL, NULL};
        return inner->observe(inner->ctx, &s0, &hv, err);
    }
    case LP_SITE_LOGITS: {
        int64_t lo = v->row0 > a ? v->row0 : a, hi = v->row0 + v->rows < a + n ? v->row0 + v->rows
                                                                             : a + n;
        if (lo >= hi)
            return LP_OK;
        lp_view lv = {v->data + (lo - v->row0) * v->stride, hi - lo, v->cols, v->stride, lo - a,
                      NULL, NULL};
        return inner->observe(inner->ctx, &s0, &lv, err);
    }
    case LP_SITE_ROUTER: {
        const lp_router_view *r = v->router;
        lp_router_view rv = {r->n_experts, r->top_k, r->experts + a * r->top_k,
                             r->weights + a * r->top_k};
        lp_view ov = {v->data + a * v->stride, n, v->cols, v->stride, 0, NULL, &rv};
        return inner->observe(inner->ctx, &s0, &ov, err);
    }
    default:
        return LP_OK;
    }
}

lp_status lp_store_batch_create(lp_store *store, const lp_store_opts *opts,
                                const lp_run_info *infos, int64_t n_seqs, int64_t n_tokens,
                                lp_store_batch **out, lp_error *err)
{
    *out = NULL;
    for (int64_t i = 0; i < n_seqs; i++)
        if (infos[i].pad_left < 0 || infos[i].n_tokens < 1 ||
            infos[i].pad_left + infos[i].n_tokens + infos[i].pad_right != n_tokens)
            return lp_error_set(err, LP_ERR_USAGE,
                                "batch sequence %lld: %lld + %lld + %lld tokens, not %lld",
                                (long long)i, (long long)infos[i].pad_left,
                                (long long)infos[i].n_tokens, (long long)infos[i].pad_right,
                                (long long)n_tokens);
    lp_store_batch *b = calloc(1, sizeof *b);
    if (!b || !(b->accs = calloc((size_t)n_seqs, sizeof *b->accs)) ||
        !(b->rows = malloc((size_t)n_tokens * sizeof *b->rows))) {
        if (b)
            free(b->accs);
        free(b);
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory for a batch");
    }
    b->store = store;
    lp_store_opts_init(&b->opts);
    if (opts)
        b->opts = *opts;
    b->infos = infos;
    b->n_seqs = n_seqs;
    b->T = n_tokens;
    b->obs = (lp_observer){b, batch_want, batch_observe};
    *out = b;
    return LP_OK;
}

const lp_observer *lp_store_batch_observer(lp_store_batch *b) { return &b->obs; }

lp_status lp_store_batch_finish(lp_store_batch *b, double seconds, int64_t *run_ids,
                                lp_error *err)
{
    /* a pass that reached no site still records every sequence */
    lp_status st = b->open ? LP_OK : switch_to(b, 0, err);
    if (st == LP_OK)
        st = lp_store_end_batch_runs(b->store, b->accs, b->n_seqs, seconds, err);
    b->open = false; /* ended, or aborted by the failed end */
    for (int64_t i = 0; st == LP_OK && run_ids && i < b->n_seqs; i++)
        run_ids[i] = b->accs[i].run_id;
    return st;
}

void lp_store_batch_destroy(lp_store_batch *b)
{
    if (!b)
        return;
    if (b->open)
        lp_store_abort_batch_runs(b->store, b->accs, b->n_seqs);
    free(b->accs);
    free(b->rows);
    free(b);
}
