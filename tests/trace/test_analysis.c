/* trace/analysis against the plain C reference in double: the clean NLL, per-head zero and mean
 * ablations (the reference zeroes the head's columns of o_proj; mean adds W_o[:, head] . mean as
 * a bias), the greedy pruning plan, sliding windows, the work ratio on a 4-layer model, and on
 * the planted-head model the induction and previous-token heads matter most. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <math.h>
#include <unistd.h>

#include "inspect/tokenizer/tokenizer.h"
#include "forward_capture.h"
#include "trace/analysis/analysis.h"
#include "trace/synth/synth.h"
#include "trace/trace.h"

/* Mean next-token NLL of the reference's logits, in double. */
static double ref_nll(const ref_model *m, const int32_t *ids, int64_t T)
{
    ref_outputs out;
    assert_true(ref_forward(m, ids, T, &out));
    int64_t V = m->cfg.vocab;
    double sum = 0;
    for (int64_t p = 0; p + 1 < T; p++) {
        const float *row = out.logits + p * V;
        double mx = (double)row[0], s = 0;
        for (int64_t v = 1; v < V; v++)
            mx = fmax(mx, (double)row[v]);
        for (int64_t v = 0; v < V; v++)
            s += exp((double)row[v] - mx);
        sum += log(s) + mx - (double)row[ids[p + 1]];
    }
    ref_outputs_free(&out);
    return sum / (double)(T - 1);
}

/* A copy of m whose layers own their o_proj (and bias), for editing. */
typedef struct edited {
    ref_model m;
    ref_layer *layers;
    float **wo, **bo;
} edited;

static void edited_init(edited *e, const ref_model *m)
{
    const ref_config *c = &m->cfg;
    int64_t L = c->n_layers, H = c->hidden, QD = c->n_heads * c->head_dim;
    e->m = *m;
    e->layers = malloc((size_t)L * sizeof *e->layers);
    e->wo = calloc((size_t)L, sizeof *e->wo);
    e->bo = calloc((size_t)L, sizeof *e->bo);
    assert_non_null(e->layers);
    memcpy(e->layers, m->layers, (size_t)L * sizeof *e->layers);
    for (int64_t l = 0; l < L; l++) {
        e->wo[l] = malloc((size_t)(H * QD) * sizeof(float));
        e->bo[l] = calloc((size_t)H, sizeof(float));
        memcpy(e->wo[l], m->layers[l].wo, (size_t)(H * QD) * sizeof(float));
        if (m->layers[l].bo)
            memcpy(e->bo[l], m->layers[l].bo, (size_t)H * sizeof(float));
        e->layers[l].wo = e->wo[l];
        e->layers[l].bo = e->bo[l];
    }
    e->m.layers = e->layers;
}

static void edited_free(edited *e)
{
    for (int64_t l = 0; l < e->m.cfg.n_layers; l++) {
        free(e->wo[l]);
        free(e->bo[l]);
    }
    free(e->wo);
    free(e->bo);
    free(e->layers);
}

/* Head h of layer l removed from o_proj; with mean (or NULL), its mean output folded into the
 * bias instead. */
static void remove_head(edited *e, const ref_model *orig, int64_t l, int64_t h, const double *mean)
{
    const ref_config *c = &orig->cfg;
    int64_t H = c->hidden, QD = c->n_heads * c->head_dim, hd = c->head_dim;
    for (int64_t r = 0; r < H; r++) {
        float *row = e->wo[l] + r * QD + h * hd;
        double add = 0;
        for (int64_t j = 0; mean && j < hd; j++)
            add += (double)row[j] * mean[j];
        e->bo[l][r] += (float)add;
        memset(row, 0, (size_t)hd * sizeof(float));
    }
}

static void restore(edited *e, const ref_model *orig)
{
    const ref_config *c = &orig->cfg;
    int64_t H = c->hidden, QD = c->n_heads * c->head_dim;
    for (int64_t l = 0; l < c->n_layers; l++) {
        memcpy(e->wo[l], orig->layers[l].wo, (size_t)(H * QD) * sizeof(float));
        if (orig->layers[l].bo)
            memcpy(e->bo[l], orig->layers[l].bo, (size_t)H * sizeof(float));
        else
            memset(e->bo[l], 0, (size_t)H * sizeof(float));
    }
}

static const ref_config llama4 = {.family = REF_LLAMA, .vocab = 47, .hidden = 32, .n_layers = 4,
                                  .n_heads = 4, .n_kv_heads = 2, .head_dim = 8, .ffn = 40,
                                  .eps = 1e-5, .theta = 10000, .scale = 0.35};

static void check_ablation(lp_ablate_method method)
{
    hf_model hf;
    hf_model_open(&hf, &llama4, 99, "analysis", lp_ablate_method_name(method));
    const int64_t T = 15, LH = llama4.n_layers * llama4.n_heads, QD = 32, hd = 8;
    int32_t ids[15];
    for (int64_t t = 0; t < T; t++)
        ids[t] = (int32_t)((t * 13 + 5) % llama4.vocab);
    lp_ablation_opts ao = {method, NULL, NULL, NULL};
    lp_ablation *ab;
    lp_error err = {0};
    if (lp_ablate_heads(hf.model, ids, T, &ao, &ab, &err) != LP_OK)
        fail_msg("%s", err.msg);
    double clean = ref_nll(&hf.ref, ids, T);
    printf("%s: clean nll %.8f, reference %.8f\n", lp_ablate_method_name(method), ab->clean_nll,
           clean);
    assert_true(fabs(ab->clean_nll - clean) < 1e-5);
    ref_outputs out;
    assert_true(ref_forward(&hf.ref, ids, T, &out));
    edited e;
    edited_init(&e, &hf.ref);
    double worst = 0, spread = 0;
    for (int64_t i = 0; i < LH; i++) {
        int64_t l = i / llama4.n_heads, h = i % llama4.n_heads;
        double mean[8] = {0};
        for (int64_t t = 0; method == LP_ABLATE_MEAN && t < T; t++)
            for (int64_t j = 0; j < hd; j++)
                mean[j] += (double)out.head_out[(l * T + t) * QD + h * hd + j] / (double)T;
        remove_head(&e, &hf.ref, l, h, method == LP_ABLATE_MEAN ? mean : NULL);
        double want = ref_nll(&e.m, ids, T);
        restore(&e, &hf.ref);
        worst = fmax(worst, fabs(ab->nll[i] - want));
        spread = fmax(spread, fabs(want - clean));
    }
    printf("%s: max |ablated nll - reference| = %.2e over %lld heads (largest delta %.3f)\n",
           lp_ablate_method_name(method), worst, (long long)LH, spread);
    assert_true(worst < 1e-5);
    assert_true(spread > 1e-3); /* the ablations change something */
    /* work: resumed passes against L x H full passes, on this 4-layer model */
    double ratio = ab->work_flops / ab->naive_flops;
    printf("work ratio %.3f (target <= 0.7)\n", ratio);
    assert_true(ratio <= 0.7);

    /* the greedy plan: ascending delta, ties by index; its NLL is the reference's with the
     * K heads' columns removed together */
    if (method == LP_ABLATE_ZERO) {
        int64_t K = 3, layers[3], heads[3];
        double nll[3];
        if (lp_prune_plan(hf.model, ids, ab, K, false, NULL, layers, heads, nll, &err) != LP_OK)
            fail_msg("%s", err.msg);
        for (int64_t k = 0; k < K; k++) {
            int64_t idx = layers[k] * llama4.n_heads + heads[k];
            for (int64_t j = 0; j < LH; j++) {
                bool earlier = false;
                for (int64_t q = 0; q < k; q++)
                    earlier = earlier || layers[q] * llama4.n_heads + heads[q] == j;
                if (!earlier && j != idx)
                    assert_true(ab->nll[j] > ab->nll[idx] ||
                                (ab->nll[j] == ab->nll[idx] && j > idx));
            }
            remove_head(&e, &hf.ref, layers[k], heads[k], NULL);
            double want = ref_nll(&e.m, ids, T);
            assert_true(fabs(nll[k] - want) < 1e-5);
        }
        restore(&e, &hf.ref);
        /* iterative: its first pick is the greedy one; every step is the best remaining */
        int64_t il[3], ih[3];
        double inll[3];
        if (lp_prune_plan(hf.model, ids, ab, K, true, NULL, il, ih, inll, &err) != LP_OK)
            fail_msg("%s", err.msg);
        assert_int_equal(il[0], layers[0]);
        assert_int_equal(ih[0], heads[0]);
        for (int64_t k = 0; k < K; k++) {
            remove_head(&e, &hf.ref, il[k], ih[k], NULL);
            assert_true(fabs(inll[k] - ref_nll(&e.m, ids, T)) < 1e-5);
        }
        assert_true(inll[K - 1] <= nll[K - 1] + 1e-9);
        restore(&e, &hf.ref);
    }
    edited_free(&e);
    ref_outputs_free(&out);
    lp_ablation_free(ab);
    hf_model_close(&hf);
}

static void test_zero_ablation(void **state)
{
    (void)state;
    check_ablation(LP_ABLATE_ZERO);
}

static void test_mean_ablation(void **state)
{
    (void)state;
    check_ablation(LP_ABLATE_MEAN);
}

/* Windows: one window covering everything is the plain pass; with windows each token's NLL is
 * the one its own window's pass gives (HF's recipe), recomputed here window by window. */
static void test_sliding_window(void **state)
{
    (void)state;
    hf_model hf;
    hf_model_open(&hf, &llama4, 5, "analysis", "window");
    const int64_t T = 23;
    int32_t ids[23];
    for (int64_t t = 0; t < T; t++)
        ids[t] = (int32_t)((t * 7 + 3) % llama4.vocab);
    double nll[22], part[22];
    lp_eval_result r;
    lp_error err = {0};
    lp_eval_window whole = {64, 32};
    assert_int_equal(lp_eval_tokens(hf.model, ids, T, &whole, NULL, NULL, nll, &r, &err), LP_OK);
    assert_int_equal(r.n_windows, 1);
    assert_int_equal(r.n_scored, T - 1);
    assert_true(fabs(r.nll - ref_nll(&hf.ref, ids, T)) < 1e-5);
    assert_true(fabs(r.ppl - exp(r.nll)) < 1e-12);
    const lp_eval_window cases[] = {{8, 3}, {8, 8}, {5, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        lp_eval_window w = cases[c];
        assert_int_equal(lp_eval_tokens(hf.model, ids, T, &w, NULL, NULL, nll, &r, &err), LP_OK);
        int64_t scored = 0, windows = 0, prev_end = 0;
        double sum = 0;
        for (int64_t begin = 0;; begin += w.stride) {
            int64_t end = begin + w.context < T ? begin + w.context : T;
            assert_int_equal(lp_score_pass(hf.model, ids + begin, end - begin, NULL, part, &err),
                             LP_OK);
            for (int64_t t = prev_end > begin + 1 ? prev_end : begin + 1; t < end; t++) {
                assert_true(nll[t - 1] == part[t - 1 - begin]);
                sum += part[t - 1 - begin];
                scored++;
            }
            windows++;
            prev_end = end;
            if (end == T)
                break;
        }
        assert_int_equal(r.n_windows, windows);
        assert_int_equal(r.n_scored, scored);
        assert_true(fabs(r.nll - sum / (double)scored) < 1e-12);
        if (w.stride < w.context)
            assert_int_equal(scored, T - 1);
    }
    lp_eval_window bad = {8, 9};
    assert_int_equal(lp_eval_tokens(hf.model, ids, T, &bad, NULL, NULL, nll, &r, &err),
                     LP_ERR_USAGE);
    hf_model_close(&hf);
}

/* The planted model on its repeated prompt: in the repeated half, ablating the induction head
 * (1.5) or the previous-token head it reads from (0.1) raises the NLL far more than any other. */
static void test_planted_heads(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/analysis_synth_%ld", lp_test_tmp_dir(), (long)getpid());
    lp_synth_options so;
    lp_synth_options_init(&so);
    lp_error err = {0};
    if (lp_synth_write(dir, &so, &err) != LP_OK)
        fail_msg("%s", err.msg);
    lp_model *model;
    lp_tokenizer *tok;
    char path[600];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    assert_int_equal(lp_model_open(dir, &model, &err), LP_OK);
    assert_int_equal(lp_tokenizer_open(path, &tok, &err), LP_OK);
    const char *text = LP_SYNTH_DEMO_PROMPT;
    int32_t *ids;
    size_t n;
    assert_int_equal(lp_tokenizer_encode(tok, text, strlen(text), true, &ids, &n, &err), LP_OK);
    lp_ablation_opts ao = {LP_ABLATE_ZERO, NULL, NULL, NULL};
    lp_ablation *ab;
    assert_int_equal(lp_ablate_heads(model, ids, (int64_t)n, &ao, &ab, &err), LP_OK);
    /* the repeated half: predictions from the middle on */
    int64_t T = (int64_t)n, half = T / 2, NH = ab->n_heads;
    double clean = lp_mean_range(ab->clean_pos, half, T - 1);
    double planted_min = INFINITY, other_max = -INFINITY;
    for (int64_t i = 0; i < ab->n_layers * NH; i++) {
        double d = lp_mean_range(ab->pos_nll + i * (T - 1), half, T - 1) - clean;
        bool planted = i == 1 * NH + 5 || i == 0 * NH + 1;
        if (planted)
            planted_min = fmin(planted_min, d);
        else
            other_max = fmax(other_max, d);
    }
    printf("repeated half: clean nll %.3f; planted heads raise it by >= %.3f, others by <= %.3f\n",
           clean, planted_min, other_max);
    assert_true(planted_min > 1.0);
    assert_true(planted_min > 3.0 * fmax(other_max, 0.01));
    lp_ablation_free(ab);
    free(ids);
    lp_tokenizer_close(tok);
    lp_model_close(model);
    remove_dir(dir);
}

/* The logit lens against the reference: each layer's residual (ref resid) through RMSNorm and
 * the LM head in double; top-1 tokens agree where the reference's margin is clear, per-layer NLL
 * within 1e-5, and the last layer equals the pass's own NLL. */
static void test_logit_lens(void **state)
{
    (void)state;
    hf_model hf;
    hf_model_open(&hf, &llama4, 31, "analysis", "lens");
    const int64_t T = 12, V = llama4.vocab, H = llama4.hidden, L = llama4.n_layers;
    int32_t ids[12];
    for (int64_t t = 0; t < T; t++)
        ids[t] = (int32_t)((t * 11 + 2) % V);
    lp_logit_lens *lens;
    lp_error err = {0};
    assert_int_equal(lp_logit_lens_create(hf.model, ids, T, 3, NULL, &lens, &err), LP_OK);
    double nll[11];
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.observer = lp_logit_lens_observer(lens);
    assert_int_equal(lp_score_pass(hf.model, ids, T, &opts, nll, &err), LP_OK);
    assert_true(fabs(lens->layer_nll[L - 1] - lp_mean_range(nll, 0, T - 1)) < 1e-12);
    ref_outputs out;
    assert_true(ref_forward(&hf.ref, ids, T, &out));
    double worst = 0;
    int64_t agree = 0, clear = 0;
    for (int64_t l = 0; l < L; l++) {
        double sum = 0;
        for (int64_t t = 0; t < T; t++) {
            const float *x = out.resid + (l * T + t) * H;
            double ms = 0, xn[32], logit[64];
            for (int64_t c = 0; c < H; c++)
                ms += (double)x[c] * (double)x[c];
            double inv = 1.0 / sqrt(ms / (double)H + llama4.eps);
            for (int64_t c = 0; c < H; c++)
                xn[c] = (double)x[c] * inv * (double)hf.ref.out_norm[c];
            int64_t best = 0, second = -1;
            for (int64_t v = 0; v < V; v++) {
                logit[v] = 0;
                for (int64_t c = 0; c < H; c++)
                    logit[v] += (double)hf.ref.lm_head[v * H + c] * xn[c];
            }
            for (int64_t v = 1; v < V; v++)
                if (logit[v] > logit[best])
                    best = v;
            for (int64_t v = 0; v < V; v++)
                if (v != best && (second < 0 || logit[v] > logit[second]))
                    second = v;
            if (logit[best] - logit[second] > 1e-4) {
                clear++;
                agree += lens->token[(l * T + t) * lens->k] == (int32_t)best;
            }
            if (t + 1 < T) {
                double mx = logit[best], z = 0;
                for (int64_t v = 0; v < V; v++)
                    z += exp(logit[v] - mx);
                sum += log(z) + mx - logit[ids[t + 1]];
            }
        }
        worst = fmax(worst, fabs(sum / (double)(T - 1) - lens->layer_nll[l]));
    }
    printf("logit lens: per-layer nll within %.2e of the reference; top-1 agrees %lld/%lld\n",
           worst, (long long)agree, (long long)clear);
    assert_true(worst < 1e-5);
    assert_int_equal(agree, clear);
    assert_true(clear > L * T / 2);
    ref_outputs_free(&out);
    lp_logit_lens_free(lens);
    hf_model_close(&hf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_ablation),
        cmocka_unit_test(test_mean_ablation),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_planted_heads),
        cmocka_unit_test(test_logit_lens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
