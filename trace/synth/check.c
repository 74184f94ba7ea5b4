/* lp_synth_check: run the planted model on the demo prompt and judge, with the trace's own head
 * statistics, whether every planted head is found where the generator put it. */
#include "trace/synth/synth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "inspect/tokenizer/tokenizer.h"
#include "trace/synth/synth_internal.h"
#include "trace/trace.h"

/* ---- the check ------------------------------------------------------------------------------------ */

typedef struct check_capture {
    int64_t T, n_layers, n_heads, vocab;
    float *probs;   /* [n_layers, n_heads, T, T] */
    lp_head_stats *stats; /* [n_layers, n_heads] */
    float *logits;  /* [T, vocab] */
} check_capture;

static bool check_want(void *ctx, const lp_site *site)
{
    (void)ctx;
    return site->kind == LP_SITE_ATTN_PROBS || site->kind == LP_SITE_LOGITS;
}

static lp_status check_observe(void *ctx, const lp_site *site, const lp_view *view, lp_error *err)
{
    check_capture *c = ctx;
    if (site->kind == LP_SITE_LOGITS) {
        if (view->row0 < 0 || view->row0 + view->rows > c->T || view->cols != c->vocab)
            return lp_error_set(err, LP_ERR_RANGE, "check: logits rows [%lld, %lld) of %lld",
                                (long long)view->row0, (long long)(view->row0 + view->rows),
                                (long long)c->T);
        for (int64_t r = 0; r < view->rows; r++)
            memcpy(c->logits + (view->row0 + r) * c->vocab, view->data + r * view->stride,
                   (size_t)c->vocab * sizeof(float));
        return LP_OK;
    }
    if (site->layer < 0 || site->layer >= c->n_layers || site->head < 0 ||
        site->head >= c->n_heads || view->rows != c->T || view->cols != c->T)
        return lp_error_set(err, LP_ERR_RANGE, "check: unexpected attention site L%d H%d "
                            "[%lld, %lld]", site->layer, site->head, (long long)view->rows,
                            (long long)view->cols);
    int64_t idx = (int64_t)site->layer * c->n_heads + site->head;
    float *dst = c->probs + idx * c->T * c->T;
    for (int64_t r = 0; r < c->T; r++)
        memcpy(dst + r * c->T, view->data + r * view->stride, (size_t)c->T * sizeof(float));
    lp_head_stats_from_rows(view->row_stats, view->rows, 0, &c->stats[idx]);
    return LP_OK;
}

/* The statistic a behaviour is found by, for one head. */
static double check_value(const check_capture *c, const int32_t *tokens, lp_synth_behaviour b,
                          int64_t idx)
{
    const lp_head_stats *st = &c->stats[idx];
    switch (b) {
    case LP_SYNTH_PREV_TOKEN:
        return st->prev_token;
    case LP_SYNTH_SINK:
        return st->sink;
    case LP_SYNTH_LOCAL:
        return st->local_frac;
    case LP_SYNTH_UNIFORM:
        return st->entropy;
    case LP_SYNTH_INDUCTION: {
        /* Second copy: mass on keys k whose previous token equals the query's token. */
        const int64_t T = c->T, second = 1 + (T - 1) / 2;
        const float *p = c->probs + idx * T * T;
        double total = 0;
        for (int64_t q = second; q < T; q++)
            for (int64_t k = 1; k <= q; k++)
                if (tokens[k - 1] == tokens[q] && k - 1 < q)
                    total += (double)p[q * T + k];
        return T > second ? total / (double)(T - second) : 0.0;
    }
    default:
        return 0.0;
    }
}

static bool check_competes(const check_capture *c, lp_synth_behaviour b, int planted_layer,
                           int layer, int64_t idx)
{
    if (b == LP_SYNTH_UNIFORM)
        return layer == planted_layer;
    if (b == LP_SYNTH_LOCAL) /* a previous-token or self head is local trivially */
        return c->stats[idx].prev_token <= 0.5 && c->stats[idx].self <= 0.5;
    return true;
}

/* The best value of the statistic among the heads the planted one competes with. */
static void find_runner_up(const check_capture *c, const int32_t *tokens, lp_synth_finding *f)
{
    const lp_synth_head *ph = &f->head;
    int64_t own = (int64_t)ph->layer * c->n_heads + ph->head;
    f->runner_up = -INFINITY;
    f->runner_up_layer = f->runner_up_head = -1;
    for (int l = 0; l < c->n_layers; l++)
        for (int h = 0; h < c->n_heads; h++) {
            int64_t idx = (int64_t)l * c->n_heads + h;
            if (idx == own || !check_competes(c, ph->behaviour, ph->layer, l, idx))
                continue;
            double v = check_value(c, tokens, ph->behaviour, idx);
            if (v > f->runner_up) {
                f->runner_up = v;
                f->runner_up_layer = l;
                f->runner_up_head = h;
            }
        }
}

/* One planted head: its statistic, the bar, the runner-up, and for the uniform head how close
 * its max_prob comes to the mean 1/(t+1) of a truly uniform head. */
static void judge_head(const check_capture *c, const int32_t *tokens, const lp_synth_head *ph,
                       lp_synth_finding *f)
{
    static const char *const stat_names[] = {"prev_token", "sink", "local_frac", "entropy",
                                             "induction_mass"};
    static const double bars[] = {0.9, 0.9, 0.9, 0.0, 0.5};
    memset(f, 0, sizeof *f);
    f->head = *ph;
    f->statistic = stat_names[ph->behaviour];
    f->bar = bars[ph->behaviour];
    int64_t own = (int64_t)ph->layer * c->n_heads + ph->head;
    f->value = check_value(c, tokens, ph->behaviour, own);
    find_runner_up(c, tokens, f);
    f->passed = f->value > f->bar && (f->runner_up_layer < 0 || f->value > f->runner_up);
    if (ph->behaviour == LP_SYNTH_UNIFORM) {
        double want = 0;
        for (int64_t q = 0; q < c->T; q++)
            want += 1.0 / (double)(q + 1);
        f->extra = c->stats[own].max_prob;
        f->extra_want = want / (double)c->T;
        f->passed = f->passed && fabs(f->extra - f->extra_want) < 0.01 * f->extra_want;
    }
    if (f->runner_up_layer < 0)
        f->runner_up = 0;
}

/* Row q predicts token q + 1; in the second copy the induction head knows it. */
static void judge_predictions(const check_capture *c, const int32_t *tokens, lp_synth_report *rep)
{
    const int64_t T = c->T, second = 1 + (T - 1) / 2;
    for (int64_t q = second; q + 1 < T; q++) {
        const float *lg = c->logits + q * c->vocab;
        int64_t best = 0;
        for (int64_t v = 1; v < c->vocab; v++)
            if (lg[v] > lg[best])
                best = v;
        int occurrences = 0;
        for (int64_t k = 1; k < second; k++)
            occurrences += tokens[k] == tokens[q];
        bool right = best == tokens[q + 1];
        rep->n_predicted++;
        rep->n_correct += right;
        if (occurrences == 1) {
            rep->n_unambiguous++;
            rep->n_unambiguous_correct += right;
        }
    }
    rep->predictions_passed = rep->n_unambiguous > 0 &&
                              rep->n_unambiguous_correct == rep->n_unambiguous &&
                              2 * rep->n_correct > rep->n_predicted;
}

/* Alignment: the mean loss of rows 0 .. T-2 against token q + 1 and against token q. */
static void judge_alignment(const check_capture *c, const int32_t *tokens, lp_synth_report *rep)
{
    const int64_t T = c->T;
    double next = 0, same = 0;
    for (int64_t q = 0; q + 1 < T; q++) {
        const float *lg = c->logits + q * c->vocab;
        double mx;
        double sum = lp_softmax_sum(lg, c->vocab, &mx);
        double log_z = mx + log(sum);
        next += log_z - (double)lg[tokens[q + 1]];
        same += log_z - (double)lg[tokens[q]];
    }
    rep->loss_next = T > 1 ? next / (double)(T - 1) : 0.0;
    rep->loss_current = T > 1 ? same / (double)(T - 1) : 0.0;
    rep->alignment_passed = rep->loss_next < rep->loss_current;
}

static void check_judge(const check_capture *c, const int32_t *tokens, lp_synth_report *rep)
{
    size_t n_planted;
    const lp_synth_head *planted = lp_synth_planted_heads(&n_planted);
    rep->passed = true;
    for (size_t i = 0; i < n_planted && i < sizeof rep->findings / sizeof rep->findings[0]; i++) {
        lp_synth_finding *f = &rep->findings[rep->n_findings++];
        judge_head(c, tokens, &planted[i], f);
        rep->passed = rep->passed && f->passed;
    }
    judge_predictions(c, tokens, rep);
    judge_alignment(c, tokens, rep);
    rep->passed = rep->passed && rep->alignment_passed && rep->predictions_passed;
}

/* The demo prompt through the model's tokenizer: <s> and two equal copies, every id in the
 * vocabulary, and the planted heads inside the model's shape, or it is no synth model. */
static lp_status check_inputs(const char *model_dir, const lp_arch *a, const int32_t *tokens,
                              size_t n_tokens, lp_error *err)
{
    size_t n_planted;
    const lp_synth_head *planted = lp_synth_planted_heads(&n_planted);
    if (n_tokens < 3 || n_tokens % 2 != 1 || tokens[0] != LP_SYNTH_TOKEN_BOS)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: the demo prompt encodes to %zu tokens, not "
                            "<s> and two equal copies: not a synth tokenizer", model_dir, n_tokens);
    for (size_t i = 1; i <= n_tokens / 2; i++)
        if (tokens[i] != tokens[i + n_tokens / 2])
            return lp_error_set(err, LP_ERR_FORMAT, "%s: the demo prompt's two copies encode "
                                "differently (token %zu): not a synth tokenizer", model_dir, i);
    for (size_t i = 0; i < n_planted; i++)
        if (planted[i].layer >= a->n_layers || planted[i].head >= a->n_heads)
            return lp_error_set(err, LP_ERR_FORMAT, "%s: %lld layers x %lld heads has no layer %d "
                                "head %d: not a synth model", model_dir, (long long)a->n_layers,
                                (long long)a->n_heads, planted[i].layer, planted[i].head);
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= a->vocab_size)
            return lp_error_set(err, LP_ERR_FORMAT, "%s: token id %d outside the model's %lld",
                                model_dir, tokens[i], (long long)a->vocab_size);
    return LP_OK;
}

/* Room for every head's [T, T] map, its statistics and the [T, vocab] logits. */
static lp_status capture_alloc(const char *model_dir, const lp_arch *a, int64_t T,
                               check_capture *c, lp_error *err)
{
    c->T = T;
    c->n_layers = a->n_layers;
    c->n_heads = a->n_heads;
    c->vocab = a->vocab_size;
    /* T is the demo prompt's length (29); the counts come from a config, so check them. */
    uint64_t n_maps, n_probs, n_logits;
    if (!lp_mul_u64((uint64_t)c->n_layers, (uint64_t)c->n_heads, &n_maps) ||
        !lp_mul_u64(n_maps, (uint64_t)(T * T), &n_probs) ||
        !lp_mul_u64((uint64_t)T, (uint64_t)c->vocab, &n_logits) || n_probs > SIZE_MAX / 4 ||
        n_logits > SIZE_MAX / 4)
        return lp_error_set(err, LP_ERR_RANGE, "%s: %lld layers x %lld heads x vocab %lld is too "
                            "large to check", model_dir, (long long)c->n_layers,
                            (long long)c->n_heads, (long long)c->vocab);
    c->probs = calloc((size_t)n_probs, sizeof *c->probs);
    c->stats = calloc((size_t)n_maps, sizeof *c->stats);
    c->logits = calloc((size_t)n_logits, sizeof *c->logits);
    if (!c->probs || !c->stats || !c->logits)
        return lp_error_set(err, LP_ERR_NOMEM, "check: out of memory");
    return LP_OK;
}

lp_status lp_synth_check(const char *model_dir, lp_synth_report *rep, lp_error *err)
{
    memset(rep, 0, sizeof *rep);
    lp_tokenizer *tok = NULL;
    lp_model *model = NULL;
    int32_t *tokens = NULL;
    size_t n_tokens = 0;
    check_capture c = {0};
    const char *prompt = LP_SYNTH_DEMO_PROMPT;
    lp_status st = lp_tokenizer_open(model_dir, &tok, err);
    if (st == LP_OK)
        st = lp_tokenizer_encode(tok, prompt, strlen(prompt), true, &tokens, &n_tokens, err);
    if (st == LP_OK)
        st = lp_model_open(model_dir, &model, err);
    if (st == LP_OK)
        st = check_inputs(model_dir, lp_model_arch(model), tokens, n_tokens, err);
    if (st == LP_OK)
        st = capture_alloc(model_dir, lp_model_arch(model), (int64_t)n_tokens, &c, err);
    lp_observer obs = {&c, check_want, check_observe};
    lp_forward_opts fopts;
    lp_forward_opts_init(&fopts);
    fopts.observer = &obs;
    lp_batch batch = lp_batch_single(tokens, c.T);
    if (st == LP_OK)
        st = lp_forward(model, &batch, &fopts, err);
    if (st == LP_OK) {
        rep->n_tokens = c.T;
        check_judge(&c, tokens, rep);
    }
    free(c.probs);
    free(c.stats);
    free(c.logits);
    free(tokens);
    lp_model_close(model);
    lp_tokenizer_close(tok);
    return st;
}
