/* Head ablation and pruning plans: one clean pass that keeps the residual entering every layer
 * and what each head's slice is replaced by, then one resumed pass per head (or set of heads). */
#include "trace/analysis/analysis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "trace/forward/model_internal.h"

static const char *const method_names[] = {"zero", "mean", "patch"};

const char *lp_ablate_method_name(lp_ablate_method method)
{
    return method < LP_ABLATE_METHOD_COUNT ? method_names[method] : "?";
}

double lp_pass_flops(const lp_arch *a, int64_t T, int first_layer)
{
    double t = (double)T, H = (double)a->hidden_size, keys = t * (t + 1) / 2; /* causal */
    double total = 2.0 * t * H * (double)a->vocab_size;
    int n_mats = a->ffn_kind == LP_FFN_MLP ? 2 : 3;
    for (int l = first_layer; l < a->n_layers; l++) {
        lp_layer_shape s = lp_layer_shape_of(a, l);
        double proj = H * (double)(2 * s.q_dim + 2 * s.kv_dim);
        double ffn = (double)n_mats * H * (double)s.ffn_hidden;
        if (s.moe)
            ffn = ffn * (double)a->n_experts_per_tok + H * (double)a->n_experts;
        total += 2.0 * t * (proj + ffn) + 4.0 * keys * (double)s.q_dim;
    }
    return total;
}

/* ---- the clean pass: residuals and head outputs ---- */

typedef struct clean_ctx {
    const lp_observer *inner;
    int64_t T, H, L, q_dim, hd;
    float *resid;    /* [L, T, H] entering layer l */
    float *head_out; /* [L, T, q_dim] */
} clean_ctx;

static bool clean_want(void *ctx, const lp_site *s)
{
    clean_ctx *c = ctx;
    bool mine = s->batch == 0 && (s->kind == LP_SITE_EMBED || s->kind == LP_SITE_RESID ||
                                  s->kind == LP_SITE_HEAD_OUTPUT);
    return mine || (c->inner && c->inner->want && c->inner->want(c->inner->ctx, s));
}

static void copy_rows(float *dst, int64_t dst_stride, const lp_view *v)
{
    for (int64_t r = 0; r < v->rows; r++)
        memcpy(dst + r * dst_stride, v->data + r * v->stride, (size_t)v->cols * sizeof(float));
}

static lp_status clean_observe(void *ctx, const lp_site *s, const lp_view *v, lp_error *err)
{
    clean_ctx *c = ctx;
    int64_t next = (int64_t)s->layer + 1; /* RESID of layer l enters layer l + 1 */
    if (s->batch == 0 && s->kind == LP_SITE_EMBED)
        copy_rows(c->resid, c->H, v);
    if (s->batch == 0 && s->kind == LP_SITE_RESID && next < c->L)
        copy_rows(c->resid + next * c->T * c->H, c->H, v);
    if (s->batch == 0 && s->kind == LP_SITE_HEAD_OUTPUT)
        copy_rows(c->head_out + (int64_t)s->layer * c->T * c->q_dim + (int64_t)s->head * c->hd,
                  c->q_dim, v);
    if (c->inner && c->inner->want && c->inner->want(c->inner->ctx, s))
        return c->inner->observe(c->inner->ctx, s, v, err);
    return LP_OK;
}

/* ---- the intervention: a set of heads replaced by ab->replacement ---- */

typedef struct replace_ctx {
    const lp_ablation *ab;
    const bool *removed; /* [L * NH] */
    int64_t q_dim, hd;
} replace_ctx;

static bool replace_want(void *ctx, const lp_site *s)
{
    replace_ctx *r = ctx;
    return s->kind == LP_SITE_HEAD_OUTPUT &&
           r->removed[(int64_t)s->layer * r->ab->n_heads + s->head];
}

static lp_status replace_edit(void *ctx, const lp_site *s, float *data, int64_t rows,
                              int64_t cols, int64_t stride, lp_error *err)
{
    replace_ctx *r = ctx;
    (void)err;
    const float *src = r->ab->replacement + (int64_t)s->layer * r->ab->T * r->q_dim +
                       (int64_t)s->head * r->hd;
    for (int64_t t = 0; t < rows; t++)
        memcpy(data + t * stride, src + t * r->q_dim, (size_t)cols * sizeof *data);
    return LP_OK;
}

/* One pass with the heads of `removed` replaced, resumed at the first layer they touch. */
static lp_status score_removed(const lp_model *model, const int32_t *ids, const lp_ablation *ab,
                               const bool *removed, lp_pool *pool, const lp_observer *observer,
                               double *nll, double *flops, lp_error *err)
{
    const lp_arch *a = lp_model_arch(model);
    int first = -1;
    for (int64_t i = 0; i < ab->n_layers * ab->n_heads && first < 0; i++)
        if (removed[i])
            first = (int)(i / ab->n_heads);
    first = first < 0 ? 0 : first;
    replace_ctx rc = {ab, removed, a->n_heads * a->head_dim, a->head_dim};
    lp_intervention iv = {&rc, replace_want, replace_edit};
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.pool = pool;
    opts.observer = observer;
    opts.intervention = &iv;
    opts.start_layer = first;
    opts.start_resid = first > 0 ? ab->resid + (int64_t)first * ab->T * a->hidden_size : NULL;
    *flops += lp_pass_flops(a, ab->T, first);
    return lp_score_pass(model, ids, ab->T, &opts, nll, err);
}

/* The report and its arrays are one block (alloc_ablation). */
void lp_ablation_free(lp_ablation *ab) { free(ab); }

static lp_status alloc_ablation(const lp_arch *a, int64_t T, lp_ablation **out, lp_error *err)
{
    int64_t L = a->n_layers, NH = a->n_heads, LH = L * NH;
    const lp_owned_array arrays[] = {
        LP_OWNED_ARRAY(lp_ablation, clean_pos, T - 1),
        LP_OWNED_ARRAY(lp_ablation, nll, LH),
        LP_OWNED_ARRAY(lp_ablation, pos_nll, LH * (T - 1)),
        LP_OWNED_ARRAY(lp_ablation, patch_diff, LH),
        LP_OWNED_ARRAY(lp_ablation, resid, L * T * a->hidden_size),
        LP_OWNED_ARRAY(lp_ablation, replacement, L * T * NH * a->head_dim),
    };
    lp_ablation *ab = lp_alloc_with_arrays(sizeof *ab, arrays, sizeof arrays / sizeof arrays[0]);
    if (!ab)
        return lp_error_set(err, LP_ERR_NOMEM, "ablate: out of memory for %lld tokens x %lld "
                            "heads", (long long)T, (long long)LH);
    ab->n_layers = L;
    ab->n_heads = NH;
    ab->T = T;
    *out = ab;
    return LP_OK;
}

/* The last position's logits, for patching's logit difference. */
typedef struct last_logits {
    int64_t T;
    float *row; /* [vocab] */
} last_logits;

static bool last_want(void *ctx, const lp_site *s)
{
    (void)ctx;
    return s->kind == LP_SITE_LOGITS && s->batch == 0;
}

static lp_status last_observe(void *ctx, const lp_site *s, const lp_view *v, lp_error *err)
{
    last_logits *k = ctx;
    (void)s;
    (void)err;
    if (v->row0 + v->rows == k->T)
        memcpy(k->row, v->data + (v->rows - 1) * v->stride, (size_t)v->cols * sizeof(float));
    return LP_OK;
}

static int32_t argmax_f(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        best = x[i] > x[best] ? i : best;
    return (int32_t)best;
}

/* The clean pass (its residuals; the head outputs the replacement is made of) and, for
 * patching, the corrupted pass whose head outputs become the replacement. */
static lp_status clean_pass(const lp_model *model, const int32_t *ids, const lp_ablation_opts *o,
                            lp_ablation *ab, last_logits *last, lp_error *err)
{
    const lp_arch *a = lp_model_arch(model);
    int64_t T = ab->T, q_dim = a->n_heads * a->head_dim;
    lp_observer last_obs = {last, last_want, last_observe};
    clean_ctx c = {o->method == LP_ABLATE_PATCH ? &last_obs : o->clean_observer, T,
                   a->hidden_size, a->n_layers, q_dim, a->head_dim, ab->resid, ab->replacement};
    lp_observer obs = {&c, clean_want, clean_observe};
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.pool = o->pool;
    opts.observer = &obs;
    lp_status st = lp_score_pass(model, ids, T, &opts, ab->clean_pos, err);
    ab->work_flops = ab->naive_flops = ab->pass_flops = lp_pass_flops(a, T, 0);
    if (st != LP_OK || o->method == LP_ABLATE_ZERO) {
        if (st == LP_OK)
            memset(ab->replacement, 0, (size_t)(a->n_layers * T * q_dim) * sizeof(float));
        return st;
    }
    if (o->method == LP_ABLATE_MEAN) {
        for (int64_t l = 0; l < a->n_layers; l++) {
            float *rows = ab->replacement + l * T * q_dim;
            for (int64_t j = 0; j < q_dim; j++) {
                double sum = 0;
                for (int64_t t = 0; t < T; t++)
                    sum += (double)rows[t * q_dim + j];
                for (int64_t t = 0; t < T; t++)
                    rows[t * q_dim + j] = (float)(sum / (double)T);
            }
        }
        return LP_OK;
    }
    /* patching: the targets are the clean and the corrupted run's top tokens at the end */
    int64_t V = a->vocab_size;
    float *clean_row = malloc((size_t)V * sizeof(float));
    double *scratch = malloc((size_t)(T - 1) * sizeof(double));
    if (!clean_row || !scratch) {
        free(clean_row);
        free(scratch);
        return lp_error_set(err, LP_ERR_NOMEM, "ablate: out of memory");
    }
    memcpy(clean_row, last->row, (size_t)V * sizeof(float));
    clean_ctx pc = {&last_obs, T, a->hidden_size, a->n_layers, q_dim, a->head_dim, ab->resid,
                    ab->replacement};
    float *keep_resid = ab->resid;
    float *scratch_resid = malloc((size_t)(a->n_layers * T * a->hidden_size) * sizeof(float));
    if (!scratch_resid)
        st = lp_error_set(err, LP_ERR_NOMEM, "ablate: out of memory");
    pc.resid = scratch_resid; /* the corrupted residuals are not needed */
    lp_observer pobs = {&pc, clean_want, clean_observe};
    opts.observer = &pobs;
    if (st == LP_OK)
        st = lp_score_pass(model, o->patch_ids, T, &opts, scratch, err);
    ab->work_flops += ab->pass_flops;
    ab->naive_flops += ab->pass_flops;
    ab->resid = keep_resid;
    if (st == LP_OK) {
        ab->clean_target = argmax_f(clean_row, V);
        ab->corrupt_target = argmax_f(last->row, V);
        ab->clean_diff = (double)clean_row[ab->clean_target] - (double)clean_row[ab->corrupt_target];
        ab->corrupt_diff =
            (double)last->row[ab->clean_target] - (double)last->row[ab->corrupt_target];
    }
    free(scratch_resid);
    free(clean_row);
    free(scratch);
    return st;
}

lp_status lp_ablate_heads(const lp_model *model, const int32_t *ids, int64_t T,
                          const lp_ablation_opts *o, lp_ablation **out, lp_error *err)
{
    const lp_arch *a = lp_model_arch(model);
    *out = NULL;
    if (T < 2)
        return lp_error_set(err, LP_ERR_USAGE, "ablate: %lld token%s: need at least 2",
                            (long long)T, T == 1 ? "" : "s");
    if (a->mla)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "ablate: MLA heads (value width %lld, not "
                            "head_dim) are not ablated yet", (long long)a->v_head_dim);
    if (o->method == LP_ABLATE_PATCH && !o->patch_ids)
        return lp_error_set(err, LP_ERR_USAGE, "ablate: patching needs a second prompt");
    lp_ablation *ab = NULL;
    lp_status st = alloc_ablation(a, T, &ab, err);
    if (st != LP_OK)
        return st;
    ab->method = o->method;
    float *last_row = malloc((size_t)a->vocab_size * sizeof(float));
    bool *removed = calloc((size_t)(ab->n_layers * ab->n_heads), sizeof(bool));
    last_logits last = {T, last_row};
    if (!last_row || !removed)
        st = lp_error_set(err, LP_ERR_NOMEM, "ablate: out of memory");
    if (st == LP_OK)
        st = clean_pass(model, ids, o, ab, &last, err);
    if (st == LP_OK)
        ab->clean_nll = lp_mean_range(ab->clean_pos, 0, T - 1);
    lp_observer last_obs = {&last, last_want, last_observe};
    for (int64_t i = 0; st == LP_OK && i < ab->n_layers * ab->n_heads; i++) {
        removed[i] = true;
        double *pos = ab->pos_nll + i * (T - 1);
        st = score_removed(model, ids, ab, removed, o->pool,
                           o->method == LP_ABLATE_PATCH ? &last_obs : NULL, pos, &ab->work_flops,
                           err);
        removed[i] = false;
        ab->naive_flops += ab->pass_flops;
        ab->nll[i] = lp_mean_range(pos, 0, T - 1);
        if (o->method == LP_ABLATE_PATCH)
            ab->patch_diff[i] =
                (double)last_row[ab->clean_target] - (double)last_row[ab->corrupt_target];
    }
    free(last_row);
    free(removed);
    if (st != LP_OK) {
        lp_ablation_free(ab);
        return st;
    }
    *out = ab;
    return LP_OK;
}

/* ---- pruning plans ---- */

typedef struct ranked {
    double key;
    int64_t index; /* layer * n_heads + head: ties go to the lower layer, then head */
} ranked;

static int cmp_ranked(const void *x, const void *y)
{
    const ranked *a = x, *b = y;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

lp_status lp_prune_plan(const lp_model *model, const int32_t *ids, const lp_ablation *ab,
                        int64_t K, bool iterative, lp_pool *pool, int64_t *layers, int64_t *heads,
                        double *nll, lp_error *err)
{
    int64_t LH = ab->n_layers * ab->n_heads, T = ab->T;
    if (K < 1 || K > LH)
        return lp_error_set(err, LP_ERR_RANGE, "--prune %lld outside [1, %lld heads]",
                            (long long)K, (long long)LH);
    bool *removed = calloc((size_t)LH, sizeof(bool));
    ranked *order = malloc((size_t)LH * sizeof *order);
    double *pos = malloc((size_t)(T - 1) * sizeof *pos);
    lp_status st = LP_OK;
    double flops = 0;
    if (!removed || !order || !pos)
        st = lp_error_set(err, LP_ERR_NOMEM, "ablate: out of memory");
    for (int64_t i = 0; st == LP_OK && i < LH; i++)
        order[i] = (ranked){ab->nll[i] - ab->clean_nll, i};
    if (st == LP_OK)
        qsort(order, (size_t)LH, sizeof *order, cmp_ranked);
    for (int64_t k = 0; st == LP_OK && k < K; k++) {
        int64_t pick = order[k].index;
        double best = NAN;
        if (iterative && k > 0) {
            /* every remaining head on top of those removed; lowest NLL first, ties by index */
            pick = -1;
            for (int64_t i = 0; st == LP_OK && i < LH; i++) {
                if (removed[i])
                    continue;
                removed[i] = true;
                st = score_removed(model, ids, ab, removed, pool, NULL, pos, &flops, err);
                removed[i] = false;
                double v = lp_mean_range(pos, 0, T - 1);
                if (st == LP_OK && (pick < 0 || v < best)) {
                    pick = i;
                    best = v;
                }
            }
        }
        if (st != LP_OK)
            break;
        removed[pick] = true;
        if (isnan(best)) {
            st = score_removed(model, ids, ab, removed, pool, NULL, pos, &flops, err);
            best = lp_mean_range(pos, 0, T - 1);
        }
        layers[k] = pick / ab->n_heads;
        heads[k] = pick % ab->n_heads;
        nll[k] = best;
    }
    free(removed);
    free(order);
    free(pos);
    return st;
}

void lp_prune_savings_of(const lp_arch *a, const int64_t *layers, const int64_t *heads,
                         int64_t n, int64_t context, int64_t kv_bytes, lp_prune_savings *out)
{
    memset(out, 0, sizeof *out);
    int64_t hd = a->head_dim, H = a->hidden_size;
    int64_t per_head = 2 * hd * H + (a->bias_qkv ? hd : 0); /* q rows and o columns */
    for (int64_t i = 0; i < n; i++) {
        out->params += per_head;
        out->flops_per_token += 2.0 * (double)(2 * hd * H) + 4.0 * (double)hd * (double)context;
    }
    /* whole KV groups: every query head of the group removed */
    for (int l = 0; l < a->n_layers; l++) {
        lp_layer_shape s = lp_layer_shape_of(a, l);
        int64_t group = a->n_heads / (s.n_kv_heads > 0 ? s.n_kv_heads : 1);
        for (int64_t g = 0; g < s.n_kv_heads; g++) {
            int64_t hit = 0;
            for (int64_t i = 0; i < n; i++)
                hit += layers[i] == l && heads[i] / group == g;
            if (hit < group)
                continue;
            out->kv_groups++;
            out->params += 2 * (hd * H + (a->bias_qkv ? hd : 0));
            out->flops_per_token += 2.0 * (double)(2 * hd * H);
            out->kv_bytes_per_token += 2 * hd * kv_bytes;
        }
    }
}
