/* Next-token scoring: NLL per position from the LOGITS site, sliding windows over long texts. */
#include "trace/analysis/analysis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct score_ctx {
    const lp_observer *inner; /* the caller's observer, or NULL */
    const int32_t *ids;
    int64_t T;
    double *nll; /* [T - 1] */
} score_ctx;

static bool score_want(void *ctx, const lp_site *site)
{
    score_ctx *s = ctx;
    if (site->kind == LP_SITE_LOGITS && site->batch == 0)
        return true;
    return s->inner && s->inner->want && s->inner->want(s->inner->ctx, site);
}

/* -log softmax(row)[target] in double: max-shifted log-sum-exp. */
static double row_nll(const float *row, int64_t V, int32_t target)
{
    double mx;
    double sum = lp_softmax_sum(row, V, &mx);
    return log(sum) + mx - (double)row[target];
}

static lp_status score_observe(void *ctx, const lp_site *site, const lp_view *view,
                               lp_error *err)
{
    score_ctx *s = ctx;
    if (site->kind == LP_SITE_LOGITS && site->batch == 0)
        for (int64_t r = 0; r < view->rows; r++) {
            int64_t p = view->row0 + r;
            if (p + 1 < s->T)
                s->nll[p] = row_nll(view->data + r * view->stride, view->cols, s->ids[p + 1]);
        }
    if (s->inner && s->inner->want && s->inner->want(s->inner->ctx, site))
        return s->inner->observe(s->inner->ctx, site, view, err);
    return LP_OK;
}

lp_status lp_score_pass(const lp_model *model, const int32_t *ids, int64_t T,
                        const lp_forward_opts *base, double *nll, lp_error *err)
{
    lp_forward_opts opts;
    if (base)
        opts = *base;
    else
        lp_forward_opts_init(&opts);
    score_ctx s = {opts.observer, ids, T, nll};
    lp_observer obs = {&s, score_want, score_observe};
    opts.observer = &obs;
    opts.logits_last_only = false;
    lp_batch batch = lp_batch_single(ids, T);
    return lp_forward(model, &batch, &opts, err);
}

double lp_mean_range(const double *x, int64_t first, int64_t n)
{
    if (n <= first)
        return NAN;
    double sum = 0;
    for (int64_t i = first; i < n; i++)
        sum += x[i];
    return sum / (double)(n - first);
}

double lp_bits_per_byte(double nll_sum, int64_t n_bytes)
{
    return n_bytes > 0 ? nll_sum / (log(2.0) * (double)n_bytes) : (double)NAN;
}

lp_status lp_eval_tokens(const lp_model *model, const int32_t *ids, int64_t T,
                         const lp_eval_window *win, lp_pool *pool, const lp_observer *observer,
                         double *nll, lp_eval_result *out, lp_error *err)
{
    memset(out, 0, sizeof *out);
    if (T < 2)
        return lp_error_set(err, LP_ERR_USAGE, "eval: %lld token%s: need at least 2 to score a "
                            "next token", (long long)T, T == 1 ? "" : "s");
    if (win->context < 2 || win->stride < 1 || win->stride > win->context)
        return lp_error_set(err, LP_ERR_USAGE, "eval: stride %lld outside [1, context %lld]",
                            (long long)win->stride, (long long)win->context);
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.pool = pool;
    opts.observer = T <= win->context ? observer : NULL;
    double *part = malloc((size_t)(win->context > T ? T : win->context) * sizeof *part);
    if (!part)
        return lp_error_set(err, LP_ERR_NOMEM, "eval: out of memory");
    lp_status st = LP_OK;
    int64_t prev_end = 0;
    for (int64_t p = 0; p < T - 1; p++)
        nll[p] = NAN;
    for (int64_t begin = 0; st == LP_OK; begin += win->stride) {
        int64_t end = begin + win->context < T ? begin + win->context : T;
        int64_t n = end - begin;
        /* targets are tokens prev_end .. end-1 (token 0 has no prediction), predicted from
         * window positions (t - 1 - begin) */
        if ((st = lp_score_pass(model, ids + begin, n, &opts, part, err)) != LP_OK)
            break;
        for (int64_t t = prev_end > begin + 1 ? prev_end : begin + 1; t < end; t++)
            nll[t - 1] = part[t - 1 - begin];
        out->n_windows++;
        prev_end = end;
        if (end == T)
            break;
    }
    free(part);
    if (st != LP_OK)
        return st;
    out->n_tokens = T;
    for (int64_t p = 0; p < T - 1; p++)
        if (!isnan(nll[p])) {
            out->nll_sum += nll[p];
            out->n_scored++;
        }
    out->nll = out->nll_sum / (double)out->n_scored;
    out->ppl = exp(out->nll);
    return LP_OK;
}
