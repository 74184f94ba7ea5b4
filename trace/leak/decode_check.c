/* The decode check: incremental decoding through the KV cache (a prefill of a prefix, then one
 * token at a time) must compute what one prefill of the whole sequence computes, at every
 * position, in the hidden states of every layer and in the logits. Run with an f32 cache (tight
 * tolerance: only summation order differs) and an f16 one (its rounding bounds the difference).
 * A failure is named from its signature at layer 0, whose input the cache cannot have touched:
 *   the first decoded position wrong, its attention row seeing other keys  -> mask-top-left
 *   the first decoded position wrong, the same keys visible                -> cache-off-by-one
 *   the first decoded position right, a later one wrong                    -> rope-stale */
#define _POSIX_C_SOURCE 200809L
#include "trace/leak/leak.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Everything one pass shows, by absolute position. */
typedef struct dec_capture {
    int64_t n, V, H, L;
    float *logits; /* [n, V] */
    float *resid;  /* [L, n, H] */
    float *probs;  /* [n, n] layer 0 head 0 */
} dec_capture;

static bool cap_want(void *ctx, const lp_site *site)
{
    (void)ctx;
    return site->batch == 0 &&
           (site->kind == LP_SITE_LOGITS || site->kind == LP_SITE_RESID ||
            (site->kind == LP_SITE_ATTN_PROBS && site->layer == 0 && site->head == 0));
}

static lp_status cap_observe(void *ctx, const lp_site *site, const lp_view *v, lp_error *err)
{
    dec_capture *c = ctx;
    if (v->row0 < 0 || v->row0 + v->rows > c->n || v->cols > (site->kind == LP_SITE_LOGITS ? c->V
                                                             : site->kind == LP_SITE_RESID ? c->H
                                                                                           : c->n))
        return lp_error_set(err, LP_ERR_RANGE, "decode check: a view outside the sequence");
    for (int64_t r = 0; r < v->rows; r++) {
        const float *src = v->data + r * v->stride;
        int64_t pos = v->row0 + r;
        if (site->kind == LP_SITE_LOGITS)
            memcpy(c->logits + pos * c->V, src, (size_t)c->V * sizeof(float));
        else if (site->kind == LP_SITE_RESID)
            memcpy(c->resid + (site->layer * c->n + pos) * c->H, src, (size_t)c->H * sizeof(float));
        else
            memcpy(c->probs + pos * c->n, src, (size_t)v->cols * sizeof(float));
    }
    return LP_OK;
}

static void cap_free(dec_capture *c)
{
    free(c->logits);
    free(c->resid);
    free(c->probs);
}

static lp_status cap_init(dec_capture *c, const lp_arch *a, int64_t n, lp_error *err)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->V = a->vocab_size;
    c->H = a->hidden_size;
    c->L = a->n_layers;
    c->logits = calloc((size_t)(n * c->V), sizeof(float));
    c->resid = calloc((size_t)(c->L * n * c->H), sizeof(float));
    c->probs = calloc((size_t)(n * n), sizeof(float));
    if (!c->logits || !c->resid || !c->probs) {
        cap_free(c);
        return lp_error_set(err, LP_ERR_NOMEM, "decode check: out of memory for %lld positions",
                            (long long)n);
    }
    return LP_OK;
}

/* |a - b| over one row, relative to the row's largest |a| (at least 1e-6). */
static double row_rel_diff(const float *a, const float *b, int64_t n)
{
    double top = 1e-6, d = 0.0;
    for (int64_t i = 0; i < n; i++)
        top = fabs((double)a[i]) > top ? fabs((double)a[i]) : top;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (!(e <= d))
            d = isnan(e) ? (double)INFINITY : e;
    }
    return d / top;
}

typedef struct dec_result {
    double logit_diff, hidden_diff;
    int64_t first_pos; /* -1 = none above tolerance */
    int first_layer;   /* -1 = the logits */
} dec_result;

static void compare(const dec_capture *full, const dec_capture *inc, double tol, dec_result *r)
{
    *r = (dec_result){0.0, 0.0, -1, -1};
    for (int64_t p = 0; p < full->n; p++) {
        bool bad = false;
        for (int64_t l = 0; l < full->L; l++) {
            const float *a = full->resid + (l * full->n + p) * full->H;
            double d = row_rel_diff(a, inc->resid + (l * full->n + p) * full->H, full->H);
            r->hidden_diff = d > r->hidden_diff ? d : r->hidden_diff;
            if (d > tol && !bad && r->first_pos < 0) {
                r->first_pos = p;
                r->first_layer = (int)l;
                bad = true;
            }
        }
        double d = row_rel_diff(full->logits + p * full->V, inc->logits + p * full->V, full->V);
        r->logit_diff = d > r->logit_diff ? d : r->logit_diff;
        if (d > tol && r->first_pos < 0) {
            r->first_pos = p;
            r->first_layer = -1;
        }
    }
}

/* Keys with probability > 0 in a row of n. */
static int64_t support(const float *row, int64_t n)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        k += row[i] > 0.0f;
    return k;
}

static const char *diagnose(const dec_capture *full, const dec_capture *inc, int64_t prefix,
                            const dec_result *r)
{
    if (r->first_pos < 0)
        return "none";
    if (r->first_pos > prefix)
        return "rope-stale";
    int64_t p = r->first_pos;
    if (p < prefix) /* the prefill itself differs: not the cache's doing */
        return "prefill differs";
    if (support(full->probs + p * full->n, p + 1) != support(inc->probs + p * full->n, full->n))
        return "mask-top-left";
    return "cache-off-by-one";
}

static lp_status run_incremental(const lp_model *model, const int32_t *ids, int64_t n,
                                 int64_t prefix, lp_dtype dtype, lp_kv_fault fault,
                                 lp_forward_opts *fo, lp_error *err)
{
    lp_kv_cache *kv;
    lp_status st = lp_kv_cache_create(model, n, dtype, fo, fault, &kv, err);
    if (st != LP_OK)
        return st;
    st = lp_forward_cached(model, kv, ids, prefix, fo, err);
    for (int64_t t = prefix; t < n && st == LP_OK; t++)
        st = lp_forward_cached(model, kv, ids + t, 1, fo, err);
    lp_kv_cache_destroy(kv);
    return st;
}

/* The largest window any layer attends with under fo (0 = none). */
static int64_t widest_window(const lp_arch *a, const lp_forward_opts *fo)
{
    if (fo->window_override > 0)
        return fo->window_override;
    int64_t w = 0;
    for (int64_t l = 0; l < a->n_layers && l < LP_MAX_LAYERS; l++)
        w = a->layer_window[l] > w ? a->layer_window[l] : w;
    return w;
}

static void fill_check(lp_leak_check *c, const char *label, const dec_result *r, double tol,
                       int64_t prefix, int64_t n, int64_t window, int64_t short_prefill,
                       const char *diagnosis)
{
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "decode");
    c->passed = r->first_pos < 0;
    c->layer = r->first_pos >= 0 ? r->first_layer : -1;
    c->position = r->first_pos;
    c->max_abs_diff = r->logit_diff > r->hidden_diff ? r->logit_diff : r->hidden_diff;
    char past[96] = "";
    if (window > 0)
        snprintf(past, sizeof past, ", %s the window of %lld", n > window ? "past" : "inside",
                 (long long)window);
    else if (short_prefill > 0)
        snprintf(past, sizeof past, ", positions < %lld against a prefill of %lld (longrope)",
                 (long long)short_prefill, (long long)short_prefill);
    snprintf(c->detail, sizeof c->detail,
             "%s: prefill of %lld then one token at a time to %lld%s: relative |dlogit| "
             "%.2e, |dhidden| %.2e (tolerance %.0e)%s%s",
             label, (long long)prefix, (long long)n, past, r->logit_diff, r->hidden_diff, tol,
             c->passed ? "" : "; ", c->passed ? "" : diagnosis);
}

lp_status lp_leak_check_decode(const lp_model *model, const int32_t *ids, int64_t n,
                               const lp_leak_decode_opts *opts, lp_leak_decode_report *rep,
                               lp_error *err)
{
    memset(rep, 0, sizeof *rep);
    rep->diagnosis = "none";
    const lp_arch *a = lp_model_arch(model);
    if (n < 2)
        return lp_error_set(err, LP_ERR_USAGE, "decode check: %lld tokens (need 2)", (long long)n);
    lp_forward_opts fo;
    lp_forward_opts_init(&fo);
    fo.pool = opts->pool;
    fo.window_override = opts->window;
    rep->window = widest_window(a, &fo);
    rep->prefix = n / 2 > 0 ? n / 2 : 1;
    dec_capture full, inc;
    lp_status st = cap_init(&full, a, n, err);
    if (st != LP_OK)
        return st;
    if ((st = cap_init(&inc, a, n, err)) != LP_OK) {
        cap_free(&full);
        return st;
    }
    lp_observer obs = {&full, cap_want, cap_observe};
    fo.observer = &obs;
    lp_batch batch = lp_batch_single(ids, n);
    st = lp_forward(model, &batch, &fo, err);
    /* Longrope: transformers picks the factor set per forward call (long once the call's sequence
     * passes the switch, for all its positions) and generation rebuilds the cache when it crosses
     * it. So when the prefix fits, the prefix and the steps up to the switch were computed with
     * the short factors, exactly as a prefill of the switch length computes them; that prefill
     * overwrites those rows of the reference. Later positions keep the whole prefill's rows. */
    int64_t sw = lp_forward_rope_switch_len(model);
    if (st == LP_OK && sw > 0 && !a->mla && rep->prefix <= sw && n > sw) {
        lp_batch head = lp_batch_single(ids, sw);
        rep->short_prefill = sw;
        st = lp_forward(model, &head, &fo, err);
    }
    /* The first two rows test the cache with float activations on both sides, so only the
     * cache can differ; the third (quantized models) runs the steps as generation does, with
     * int8 activations, against the same float prefill: that row measures the rounding. */
    static const lp_dtype dtypes[3] = {LP_DTYPE_F32, LP_DTYPE_F16, LP_DTYPE_F32};
    static const double tols[3] = {LP_LEAK_DECODE_TOLERANCE, LP_LEAK_DECODE_F16_TOLERANCE,
                                   LP_LEAK_DECODE_INT8_TOLERANCE};
    static const char *const labels[3] = {"f32 cache", "f16 cache",
                                          "f32 cache, int8 activations"};
    rep->int8 = lp_model_int8_matvec(model);
    rep->n_checks = rep->int8 ? 3 : 2;
    rep->passed = true;
    for (int i = 0; i < rep->n_checks && st == LP_OK; i++) {
        obs.ctx = &inc;
        fo.int8_activations = i == 2;
        st = run_incremental(model, ids, n, rep->prefix, dtypes[i], opts->fault, &fo, err);
        if (st != LP_OK)
            break;
        dec_result r;
        compare(&full, &inc, tols[i], &r);
        const char *diag = diagnose(&full, &inc, rep->prefix, &r);
        double *logit[3] = {&rep->logit_diff, &rep->f16_logit_diff, &rep->int8_logit_diff};
        double *hidden[3] = {&rep->hidden_diff, &rep->f16_hidden_diff, &rep->int8_hidden_diff};
        *logit[i] = r.logit_diff;
        *hidden[i] = r.hidden_diff;
        if (r.first_pos >= 0 && rep->passed) {
            rep->passed = false;
            rep->diagnosis = diag;
            rep->first_pos = r.first_pos;
            rep->first_layer = r.first_layer;
        }
        fill_check(&rep->checks[i], labels[i], &r, tols[i], rep->prefix, n, rep->window,
                   rep->short_prefill, diag);
    }
    cap_free(&full);
    cap_free(&inc);
    return st;
}
