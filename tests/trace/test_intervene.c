/* Interventions in the forward pass: a hook that zeroes a head's output equals the plain C
 * reference with that head's columns of o_proj zeroed (dense and MoE, GQA), resuming from a
 * stored residual changes no bit, and edits at RESID / FFN_OUT reach the logits. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <math.h>
#include <unistd.h>

#include "forward_capture.h"
#include "trace/trace.h"

typedef struct keep {
    int64_t T, V, H;
    float *logits; /* [T, V] */
    float *resid;  /* [L + 1, T, H]: entering layer l at l (EMBED at 0) */
} keep;

static bool keep_want(void *ctx, const lp_site *s)
{
    (void)ctx;
    return s->kind == LP_SITE_LOGITS || s->kind == LP_SITE_EMBED || s->kind == LP_SITE_RESID;
}

static lp_status keep_observe(void *ctx, const lp_site *s, const lp_view *v, lp_error *err)
{
    keep *k = ctx;
    (void)err;
    float *dst = s->kind == LP_SITE_LOGITS ? k->logits + v->row0 * k->V
                 : s->kind == LP_SITE_EMBED ? k->resid
                                            : k->resid + (int64_t)(s->layer + 1) * k->T * k->H;
    for (int64_t r = 0; r < v->rows; r++)
        memcpy(dst + r * v->cols, v->data + r * v->stride, (size_t)v->cols * sizeof(float));
    return LP_OK;
}

typedef struct zero_head {
    int layer, head;
    lp_site_kind kind;
    float value; /* written into every element */
    int calls;
} zero_head;

static bool zero_want(void *ctx, const lp_site *s)
{
    zero_head *z = ctx;
    return s->kind == z->kind && s->layer == z->layer && (z->head < 0 || s->head == z->head);
}

static lp_status zero_edit(void *ctx, const lp_site *s, float *data, int64_t rows, int64_t cols,
                           int64_t stride, lp_error *err)
{
    zero_head *z = ctx;
    (void)s;
    (void)err;
    z->calls++;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            data[r * stride + c] = z->value;
    return LP_OK;
}

static void run(const lp_model *model, const int32_t *ids, int64_t T, const lp_intervention *iv,
                int start_layer, const float *start_resid, keep *k)
{
    lp_observer obs = {k, keep_want, keep_observe};
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.observer = &obs;
    opts.intervention = iv;
    opts.start_layer = start_layer;
    opts.start_resid = start_resid;
    lp_batch batch = lp_batch_single(ids, T);
    lp_error err = {0};
    if (lp_forward(model, &batch, &opts, &err) != LP_OK)
        fail_msg("lp_forward: %s", err.msg);
}

static void keep_init(keep *k, const ref_config *c, int64_t T)
{
    k->T = T;
    k->V = c->vocab;
    k->H = c->hidden;
    k->logits = calloc((size_t)(T * c->vocab), sizeof(float));
    k->resid = calloc((size_t)((c->n_layers + 1) * T * c->hidden), sizeof(float));
    assert_non_null(k->logits);
    assert_non_null(k->resid);
}

static void keep_free(keep *k)
{
    free(k->logits);
    free(k->resid);
}

static double max_diff(const float *a, const float *b, int64_t n)
{
    double d = 0;
    for (int64_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

/* For every (layer, head): the hook's ablation against the reference with o_proj's columns of
 * that head zeroed, and the same ablation resumed from the clean residual entering the layer,
 * which must equal the full ablated pass bit for bit. */
static void check_family(const ref_config *cfg, const char *name)
{
    hf_model hf;
    hf_model_open(&hf, cfg, 4242, "intervene", name);
    const int64_t T = 13, V = cfg->vocab, q_dim = cfg->n_heads * cfg->head_dim;
    int32_t ids[13];
    for (int64_t t = 0; t < T; t++)
        ids[t] = (int32_t)((t * 37 + 11) % V);
    keep clean, full, resumed;
    keep_init(&clean, cfg, T);
    keep_init(&full, cfg, T);
    keep_init(&resumed, cfg, T);
    run(hf.model, ids, T, NULL, 0, NULL, &clean);
    double worst = 0;
    for (int l = 0; l < cfg->n_layers; l++)
        for (int h = 0; h < cfg->n_heads; h++) {
            zero_head z = {l, h, LP_SITE_HEAD_OUTPUT, 0.0f, 0};
            lp_intervention iv = {&z, zero_want, zero_edit};
            run(hf.model, ids, T, &iv, 0, NULL, &full);
            assert_int_equal(z.calls, 1);
            run(hf.model, ids, T, &iv, l, l > 0 ? clean.resid + (int64_t)l * T * cfg->hidden : NULL,
                &resumed);
            assert_memory_equal(full.logits, resumed.logits, (size_t)(T * V) * sizeof(float));

            ref_model zm = hf.ref;
            ref_layer *layers = malloc((size_t)cfg->n_layers * sizeof *layers);
            float *wo = malloc((size_t)(cfg->hidden * q_dim) * sizeof *wo);
            assert_non_null(layers);
            assert_non_null(wo);
            memcpy(layers, hf.ref.layers, (size_t)cfg->n_layers * sizeof *layers);
            memcpy(wo, hf.ref.layers[l].wo, (size_t)(cfg->hidden * q_dim) * sizeof *wo);
            for (int64_t r = 0; r < cfg->hidden; r++)
                memset(wo + r * q_dim + h * cfg->head_dim, 0,
                       (size_t)cfg->head_dim * sizeof *wo);
            layers[l].wo = wo;
            zm.layers = layers;
            ref_outputs ref;
            assert_true(ref_forward(&zm, ids, T, &ref));
            double d = max_diff(full.logits, ref.logits, T * V);
            worst = fmax(worst, d);
            /* the ablation must move the logits by much more than the budget */
            assert_true(max_diff(full.logits, clean.logits, T * V) > 1e-3);
            ref_outputs_free(&ref);
            free(wo);
            free(layers);
        }
    printf("%s: max |hook ablation - reference with o_proj columns zeroed| = %.2e (budget 1e-4)\n",
           name, worst);
    assert_true(worst < 1e-4);
    keep_free(&clean);
    keep_free(&full);
    keep_free(&resumed);
    hf_model_close(&hf);
}

static void test_llama_gqa(void **state)
{
    (void)state;
    ref_config cfg = {.family = REF_LLAMA, .vocab = 61, .hidden = 32, .n_layers = 4, .n_heads = 4,
                      .n_kv_heads = 2, .head_dim = 8, .ffn = 40, .eps = 1e-5, .theta = 10000,
                      .scale = 0.3};
    check_family(&cfg, "llama");
}

static void test_mixtral(void **state)
{
    (void)state;
    ref_config cfg = {.family = REF_MIXTRAL, .vocab = 53, .hidden = 32, .n_layers = 2,
                      .n_heads = 4, .n_kv_heads = 2, .head_dim = 8, .ffn = 40, .eps = 1e-5,
                      .theta = 10000, .n_experts = 4, .top_k = 2, .scale = 0.3};
    check_family(&cfg, "mixtral");
}

/* Edits of the residual stream and of the FFN output reach what follows: a RESID of zeros after
 * the last layer gives the logits of a zero input to the final norm (all equal per row when the
 * head has no bias), an FFN_OUT edit changes the logits, and observers see the edited data. */
static void test_resid_and_ffn_sites(void **state)
{
    (void)state;
    ref_config cfg = {.family = REF_LLAMA, .vocab = 41, .hidden = 16, .n_layers = 2, .n_heads = 2,
                      .n_kv_heads = 2, .head_dim = 8, .ffn = 24, .eps = 1e-5, .theta = 10000,
                      .scale = 0.3};
    hf_model hf;
    hf_model_open(&hf, &cfg, 9, "intervene", "sites");
    const int64_t T = 7;
    int32_t ids[7] = {1, 5, 9, 13, 2, 40, 3};
    keep clean, edited;
    keep_init(&clean, &cfg, T);
    keep_init(&edited, &cfg, T);
    run(hf.model, ids, T, NULL, 0, NULL, &clean);
    zero_head z = {1, -1, LP_SITE_RESID, 0.0f, 0};
    lp_intervention iv = {&z, zero_want, zero_edit};
    run(hf.model, ids, T, &iv, 0, NULL, &edited);
    assert_int_equal(z.calls, 1);
    for (int64_t i = 0; i < T * cfg.hidden; i++)
        assert_true(edited.resid[2 * T * cfg.hidden + i] == 0.0f);
    for (int64_t t = 0; t < T; t++)
        for (int64_t v = 1; v < cfg.vocab; v++)
            assert_true(edited.logits[t * cfg.vocab + v] == edited.logits[t * cfg.vocab]);
    zero_head f = {0, -1, LP_SITE_FFN_OUT, 0.5f, 0};
    lp_intervention iv2 = {&f, zero_want, zero_edit};
    run(hf.model, ids, T, &iv2, 0, NULL, &edited);
    assert_int_equal(f.calls, 1);
    assert_true(max_diff(edited.logits, clean.logits, T * cfg.vocab) > 1e-3);
    /* a bad start layer is refused */
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.start_layer = 1;
    lp_batch batch = lp_batch_single(ids, T);
    lp_error err = {0};
    assert_int_equal(lp_forward(hf.model, &batch, &opts, &err), LP_ERR_USAGE);
    keep_free(&clean);
    keep_free(&edited);
    hf_model_close(&hf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_gqa),
        cmocka_unit_test(test_mixtral),
        cmocka_unit_test(test_resid_and_ffn_sites),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
