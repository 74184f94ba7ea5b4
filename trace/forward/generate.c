/* Generation over the KV cache: a prefill, then one decode step per new token (the last one fed
 * through too), tokens chosen greedily or sampled with a seeded generator. */
#include "trace/trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/random.h"

void lp_generate_opts_init(lp_generate_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->top_p = 1.0;
    opts->stop_id = -1;
    opts->kv_dtype = LP_DTYPE_INVALID;
    opts->fault = LP_KV_FAULT_NONE;
}

typedef struct cand {
    double p;
    int32_t id;
} cand;

/* Best first; equal probabilities: the lower id first, so the order is total. */
static int cand_cmp(const void *x, const void *y)
{
    const cand *a = x, *b = y;
    if (a->p != b->p)
        return a->p > b->p ? -1 : 1;
    return a->id < b->id ? -1 : (a->id > b->id);
}

static int32_t argmax(const float *logits, int64_t vocab)
{
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) /* strict: ties keep the lower id */
            best = i;
    return (int32_t)best;
}

lp_status lp_sample_token(const float *logits, int64_t vocab, const lp_generate_opts *gen,
                          uint64_t *rng, int32_t *out, lp_error *err)
{
    if (!(gen->temperature > 0.0)) {
        *out = argmax(logits, vocab);
        return LP_OK;
    }
    cand *c = malloc((size_t)vocab * sizeof *c);
    if (!c)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory for sampling over %lld tokens",
                            (long long)vocab);
    double mx = -INFINITY;
    for (int64_t i = 0; i < vocab; i++)
        mx = (double)logits[i] > mx ? (double)logits[i] : mx;
    for (int64_t i = 0; i < vocab; i++) {
        c[i].p = exp(((double)logits[i] - mx) / gen->temperature);
        c[i].id = (int32_t)i;
    }
    qsort(c, (size_t)vocab, sizeof *c, cand_cmp);
    int64_t n = gen->top_k > 0 && gen->top_k < vocab ? gen->top_k : vocab;
    /* top-p over the (renormalized) top-k: the smallest prefix whose mass reaches top_p */
    double kept = 0.0;
    for (int64_t i = 0; i < n; i++)
        kept += c[i].p;
    if (gen->top_p < 1.0) {
        double acc = 0.0;
        for (int64_t i = 0; i < n; i++) {
            acc += c[i].p;
            if (acc >= gen->top_p * kept) {
                n = i + 1;
                kept = acc;
                break;
            }
        }
    }
    /* a uniform draw in [0, kept) from the top 53 bits */
    double u = (double)(lp_splitmix64(rng) >> 11) * (1.0 / 9007199254740992.0) * kept, acc = 0.0;
    int32_t chosen = c[n - 1].id;
    for (int64_t i = 0; i < n; i++) {
        acc += c[i].p;
        if (u < acc) {
            chosen = c[i].id;
            break;
        }
    }
    free(c);
    *out = chosen;
    return LP_OK;
}

/* Passes every site on and keeps a copy of the last logits row of each call. */
typedef struct gen_tee {
    const lp_observer *inner;
    float *last; /* [vocab] */
    int64_t last_pos, want_pos;
} gen_tee;

static bool tee_want(void *ctx, const lp_site *site)
{
    gen_tee *t = ctx;
    return site->kind == LP_SITE_LOGITS ||
           (t->inner && t->inner->want && t->inner->want(t->inner->ctx, site));
}

static lp_status tee_observe(void *ctx, const lp_site *site, const lp_view *view, lp_error *err)
{
    gen_tee *t = ctx;
    if (site->kind == LP_SITE_LOGITS && view->row0 + view->rows - 1 == t->want_pos) {
        memcpy(t->last, view->data + (view->rows - 1) * view->stride,
               (size_t)view->cols * sizeof(float));
        t->last_pos = t->want_pos;
    }
    if (t->inner && t->inner->want && t->inner->observe && t->inner->want(t->inner->ctx, site))
        return t->inner->observe(t->inner->ctx, site, view, err);
    return LP_OK;
}

lp_status lp_generate(const lp_model *model, const int32_t *prompt, int64_t n_prompt,
                      const lp_generate_opts *gen, const lp_forward_opts *opts_in, int32_t *out,
                      int64_t *n_out, uint64_t *kv_bytes, int64_t *kv_rebuilt_at, lp_error *err)
{
    lp_forward_opts opts;
    if (opts_in)
        opts = *opts_in;
    else
        lp_forward_opts_init(&opts);
    const lp_arch *a = lp_model_arch(model);
    *n_out = 0;
    if (n_prompt < 1 || gen->n_new < 0)
        return lp_error_set(err, LP_ERR_USAGE, "generate: %lld prompt tokens, %lld new",
                            (long long)n_prompt, (long long)gen->n_new);
    lp_kv_cache *kv;
    lp_status st = lp_kv_cache_create(model, n_prompt + gen->n_new, gen->kv_dtype, &opts,
                                      gen->fault, &kv, err);
    if (st != LP_OK)
        return st;
    gen_tee tee = {opts.observer, malloc((size_t)a->vocab_size * sizeof(float)), -1, n_prompt - 1};
    if (!tee.last) {
        lp_kv_cache_destroy(kv);
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    }
    lp_observer obs = {&tee, tee_want, tee_observe};
    opts.observer = &obs;
    memcpy(out, prompt, (size_t)n_prompt * sizeof *out);
    int64_t n = n_prompt;
    uint64_t rng = gen->seed;
    st = lp_forward_cached(model, kv, prompt, n_prompt, &opts, err);
    for (int64_t i = 0; i < gen->n_new && st == LP_OK; i++) {
        if (tee.last_pos != n - 1) {
            st = lp_error_set(err, LP_ERR_USAGE, "generate: no logits for position %lld",
                              (long long)(n - 1));
            break;
        }
        int32_t next;
        if ((st = lp_sample_token(tee.last, a->vocab_size, gen, &rng, &next, err)))
            break;
        out[n++] = next;
        tee.want_pos = n - 1;
        st = lp_forward_cached(model, kv, &out[n - 1], 1, &opts, err);
        if (next == gen->stop_id)
            break;
    }
    *n_out = n;
    *kv_bytes = lp_kv_cache_bytes(kv);
    if (kv_rebuilt_at)
        *kv_rebuilt_at = lp_kv_cache_rebuilt_at(kv);
    free(tee.last);
    lp_kv_cache_destroy(kv);
    return st;
}
