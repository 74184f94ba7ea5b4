/* What the forward tests share: an observer that keeps every site the reference forward
 * (ref_forward.h) has, and the comparison of a real pass with it under every ISA the CPU runs.
 *
 *   capture cap;
 *   run_capture(model, ids, T, NULL, &cap);      // logits, probs, resid, head_out, experts
 *   compare_with_ref("qwen2-moe f32", model, ids, T, &cfg, &ref, 1e-4);
 *   capture_free(&cap);
 *
 * Everything is static inline: include it in a cmocka test after test_util.h. */
#ifndef LP_TESTS_FORWARD_CAPTURE_H
#define LP_TESTS_FORWARD_CAPTURE_H

#include <math.h>
#include <unistd.h>

#include "ref_forward.h"
#include "trace/trace.h"

/* ---- an observer that keeps everything ---- */

typedef struct capture {
    int64_t T, V, H, L, NH, HD, K;
    int64_t batch; /* which batch item to keep */
    float *logits;  /* [T, V] */
    float *probs;   /* [L, NH, T, T] */
    float *resid;   /* [L, T, H] */
    float *head_out; /* [L, T, NH*HD] */
    int32_t *experts; /* [L, T, K] */
    lp_attn_row_stats *stats; /* [L, NH, T] */
    int n_logit_calls;
} capture;

static inline bool cap_want(void *ctx, const lp_site *site)
{
    capture *c = ctx;
    if (site->batch != c->batch)
        return false;
    return site->kind == LP_SITE_LOGITS || site->kind == LP_SITE_ATTN_PROBS ||
           site->kind == LP_SITE_RESID || site->kind == LP_SITE_HEAD_OUTPUT ||
           site->kind == LP_SITE_ROUTER;
}

static inline lp_status cap_observe(void *ctx, const lp_site *site, const lp_view *v, lp_error *err)
{
    capture *c = ctx;
    (void)err;
    switch (site->kind) {
    case LP_SITE_LOGITS:
        for (int64_t r = 0; r < v->rows; r++)
            memcpy(c->logits + (v->row0 + r) * c->V, v->data + r * v->stride,
                   (size_t)c->V * sizeof(float));
        c->n_logit_calls++;
        break;
    case LP_SITE_ATTN_PROBS:
        for (int64_t r = 0; r < v->rows; r++) {
            memcpy(c->probs + ((site->layer * c->NH + site->head) * c->T + r) * c->T,
                   v->data + r * v->stride, (size_t)c->T * sizeof(float));
            c->stats[(site->layer * c->NH + site->head) * c->T + r] = v->row_stats[r];
        }
        break;
    case LP_SITE_RESID:
        for (int64_t r = 0; r < v->rows; r++)
            memcpy(c->resid + (site->layer * c->T + r) * c->H, v->data + r * v->stride,
                   (size_t)c->H * sizeof(float));
        break;
    case LP_SITE_HEAD_OUTPUT:
        for (int64_t r = 0; r < v->rows; r++)
            memcpy(c->head_out + (site->layer * c->T + r) * c->NH * c->HD + site->head * c->HD,
                   v->data + r * v->stride, (size_t)c->HD * sizeof(float));
        break;
    case LP_SITE_ROUTER:
        memcpy(c->experts + site->layer * c->T * c->K, v->router->experts,
               (size_t)(c->T * c->K) * sizeof(int32_t));
        break;
    default:
        break;
    }
    return LP_OK;
}

static inline void capture_init(capture *c, const lp_arch *a, int64_t T)
{
    memset(c, 0, sizeof *c);
    c->T = T;
    c->V = a->vocab_size;
    c->H = a->hidden_size;
    c->L = a->n_layers;
    c->NH = a->n_heads;
    c->HD = a->mla ? a->v_head_dim : a->head_dim; /* one head's output */
    c->K = a->n_experts_per_tok > 0 ? a->n_experts_per_tok : 1;
    c->logits = calloc((size_t)(T * c->V), sizeof(float));
    c->probs = calloc((size_t)(c->L * c->NH * T * T), sizeof(float));
    c->resid = calloc((size_t)(c->L * T * c->H), sizeof(float));
    c->head_out = calloc((size_t)(c->L * T * c->NH * c->HD), sizeof(float));
    c->experts = calloc((size_t)(c->L * T * c->K), sizeof(int32_t));
    c->stats = calloc((size_t)(c->L * c->NH * T), sizeof(lp_attn_row_stats));
    assert_non_null(c->logits);
    assert_non_null(c->probs);
    assert_non_null(c->resid);
    assert_non_null(c->head_out);
    assert_non_null(c->experts);
    assert_non_null(c->stats);
}

static inline void capture_free(capture *c)
{
    free(c->logits);
    free(c->probs);
    free(c->resid);
    free(c->head_out);
    free(c->experts);
    free(c->stats);
}

static inline double max_abs_diff(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) /* NaN counts as infinitely wrong */
            m = isnan(d) ? (double)INFINITY : d;
    }
    return m;
}

static inline void run_capture(const lp_model *model, const int32_t *ids, int64_t T, lp_pool *pool,
                        capture *cap)
{
    capture_init(cap, lp_model_arch(model), T);
    lp_observer obs = {cap, cap_want, cap_observe};
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.observer = &obs;
    opts.pool = pool;
    lp_batch batch = lp_batch_single(ids, T);
    lp_error err = {0};
    lp_status st = lp_forward(model, &batch, &opts, &err);
    if (st != LP_OK)
        fail_msg("lp_forward: %s", err.msg);
}

static inline void remove_dir(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* A random reference model (ref_model_random of cfg and seed) written as a Hugging Face folder
 * "<tmp>/<prefix>_<name>_<pid>" and opened: what a test runs loupe on and checks against.
 * hf_model_close closes the model, removes the folder and frees the reference. */
typedef struct hf_model {
    ref_model ref;
    lp_model *model;
    char dir[512];
} hf_model;

static inline void hf_model_open(hf_model *h, const ref_config *cfg, uint64_t seed,
                                 const char *prefix, const char *name)
{
    assert_true(ref_model_random(cfg, seed, &h->ref));
    snprintf(h->dir, sizeof h->dir, "%s/%s_%s_%ld", lp_test_tmp_dir(), prefix, name,
             (long)getpid());
    assert_true(ref_model_write_hf(&h->ref, h->dir));
    lp_error err = {0};
    if (lp_model_open(h->dir, &h->model, &err) != LP_OK)
        fail_msg("%s", err.msg);
}

static inline void hf_model_close(hf_model *h)
{
    lp_model_close(h->model);
    remove_dir(h->dir);
    ref_model_free(&h->ref);
}

/* Tokens of a case: a seeded LCG below vocab. */
static inline void case_tokens(int32_t *ids, int64_t T, int64_t vocab)
{
    uint64_t s = 12345;
    for (int64_t t = 0; t < T; t++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        ids[t] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
}

/* Run the model under every ISA the CPU has and compare each with the reference: logits,
 * probabilities, residual stream and head outputs within budget, the same experts. */
static inline void compare_with_ref(const char *label, const lp_model *model, const int32_t *ids,
                             int64_t T, const ref_config *cfg, const ref_outputs *ref,
                             double budget)
{
    lp_isa chosen = lp_kernels_isa();
    int64_t L = cfg->n_layers, NH = cfg->n_heads;
    for (int isa = 0; isa < LP_ISA_COUNT; isa++) {
        if (!lp_kernels_set_isa((lp_isa)isa))
            continue;
        capture cap;
        run_capture(model, ids, T, NULL, &cap);
        double dl = max_abs_diff(cap.logits, ref->logits, T * cfg->vocab);
        double dp = max_abs_diff(cap.probs, ref->probs, L * NH * T * T);
        double dr = max_abs_diff(cap.resid, ref->resid, L * T * cfg->hidden);
        double dh = max_abs_diff(cap.head_out, ref->head_out, L * T * NH * ref_head_out_width(cfg));
        int64_t expert_mismatch = 0;
        for (int64_t i = 0; i < L * T * cfg->top_k; i++)
            expert_mismatch += cap.experts[i] != ref->experts[i];
        printf("  %-18s %-4s T=%2lld  logits %.2e  probs %.2e  resid %.2e  head_out %.2e  "
               "experts differ %lld (budget %.0e)\n",
               label, lp_isa_name((lp_isa)isa), (long long)T, dl, dp, dr, dh,
               (long long)expert_mismatch, budget);
        assert_true(dl <= budget);
        assert_true(dp <= budget);
        assert_true(dr <= budget);
        assert_true(dh <= budget);
        assert_int_equal(expert_mismatch, 0);
        capture_free(&cap);
    }
    assert_true(lp_kernels_set_isa(chosen));
}

/* The largest distance of any logit from logit 0 of row 0: signal, or the comparison proves
 * nothing. */
static inline double logit_spread(const ref_outputs *ref, int64_t n)
{
    double spread = 0;
    for (int64_t i = 1; i < n; i++)
        spread = fmax(spread, fabs((double)ref->logits[i] - (double)ref->logits[0]));
    return spread;
}

#endif
