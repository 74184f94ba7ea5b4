/* The feed-forward sublayer: a plain MLP with its activation, a gated one (gate and up apart or
 * fused), or routed experts; then the post norm and the FFN_OUT site. */
#include "trace/forward/forward_internal.h"

#include <math.h>
#include <string.h>

static void activate(const lp_arch *a, float *gate, const float *up, int64_t n)
{
    bool tanh_approx = a->act == LP_ACT_GELU_TANH;
    if (up) {
        if (a->ffn_kind == LP_FFN_GEGLU || a->act == LP_ACT_GELU || a->act == LP_ACT_GELU_TANH)
            lp_gelu_mul(gate, up, n, tanh_approx);
        else
            lp_silu_mul(gate, up, n);
        return;
    }
    switch (a->act) {
    case LP_ACT_SILU: lp_silu(gate, n); break;
    case LP_ACT_RELU:
        for (int64_t i = 0; i < n; i++)
            gate[i] = gate[i] > 0.0f ? gate[i] : 0.0f;
        break;
    default: lp_gelu(gate, n, tanh_approx); break;
    }
}

/* A gated FFN's gate[n] combined with up[n] into gate as the block says. */
static void gate_times_up(const lp_model *m, float *gate, const float *up, int64_t n)
{
    const lp_block_desc *b = &m->block;
    if (b->glu != LP_GLU_CLAMPED_SWIGLU) {
        activate(&m->arch, gate, up, n);
        return;
    }
    float limit = (float)b->glu_limit, alpha = (float)b->glu_alpha;
    for (int64_t i = 0; i < n; i++) {
        /* written so that a NaN stays NaN, as torch's clamp keeps it */
        float g = gate[i] > limit ? limit : gate[i];
        float u = up[i] > limit ? limit : (up[i] < -limit ? -limit : up[i]);
        gate[i] = (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
    }
}

/* The activation row by row over [rows, F] (up NULL: ungated): the vector kernels take 8
 * values at a time and finish a call with a scalar tail, so one call over all rows would make
 * a row's values depend on where it sits in the stack; per row, a row computes the same
 * whichever sequences share its batch. */
static void activate_rows(const lp_model *m, float *gate, const float *up, int64_t rows,
                          int64_t F)
{
    for (int64_t t = 0; t < rows; t++) {
        if (up)
            gate_times_up(m, gate + t * F, up + t * F, F);
        else
            activate(&m->arch, gate + t * F, NULL, F);
    }
}

/* rows fused [rows, 2 F] gate/up rows in gu, split in place: the gates packed [rows, F] from gu
 * on, the ups into up [rows, F]. Interleaved rows alternate gate, up; else gate half, up half.
 * Row t's gates land at or before where row t was read, so nothing unread is overwritten. */
static void split_gate_up(float *gu, float *up, int64_t rows, int64_t F, bool interleaved)
{
    for (int64_t t = 0; t < rows; t++) {
        const float *src = gu + t * 2 * F;
        float *g = gu + t * F, *u = up + t * F;
        for (int64_t i = 0; i < F; i++) {
            float gv = interleaved ? src[2 * i] : src[i];
            u[i] = interleaved ? src[2 * i + 1] : src[F + i];
            g[i] = gv;
        }
    }
}

/* The FFN of `rows` rows (at most ffn_rows), in -> out. */
static lp_status dense_ffn_chunk(lp_fw_pass *p, const lp_layer_weights *L, const float *in,
                                 int64_t rows, float *out)
{
    const lp_arch *a = &p->m->arch;
    int64_t F = L->ffn_hidden;
    lp_fw_scratch *s = &p->s;
    lp_status st;
    if (a->ffn_kind == LP_FFN_MLP) {
        if ((st = lp_fw_linear(p, in, rows, &L->up, L->up_bias, s->gate)))
            return st;
        activate_rows(p->m, s->gate, NULL, rows, F);
    } else if (L->fused_gate_up) {
        /* [gate | up] per row; compact the gate half after activation. */
        if ((st = lp_fw_linear(p, in, rows, &L->gate_up, NULL, s->gate)))
            return st;
        for (int64_t t = 0; t < rows; t++) {
            float *row = s->gate + t * 2 * F;
            gate_times_up(p->m, row, row + F, F);
            memmove(s->gate + t * F, row, (size_t)F * sizeof(float));
        }
    } else {
        lp_fw_linear_part gate_up[2] = {{&L->gate, L->gate_bias, s->gate},
                                        {&L->up, L->up_bias, s->up}};
        if ((st = lp_fw_linear_group(p, in, rows, gate_up, 2)))
            return st;
        activate_rows(p->m, s->gate, s->up, rows, F);
    }
    return lp_fw_linear(p, s->gate, rows, &L->down, L->down_bias, out);
}

static lp_status dense_ffn(lp_fw_pass *p, const lp_layer_weights *L, const float *in,
                           int64_t rows, float *out)
{
    int64_t H = p->m->arch.hidden_size, chunk = p->plan.ffn_rows;
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t n = rows - r0 < chunk ? rows - r0 : chunk;
        lp_status st = dense_ffn_chunk(p, L, in + r0 * H, n, out + r0 * H);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

/* The index of the best value of v[n] not yet in taken[n_taken] and not -inf (ties: lower
 * index), or -1. */
static int32_t best_free(const float *v, int64_t n, const int32_t *taken, int64_t n_taken)
{
    int32_t best = -1;
    for (int32_t e = 0; e < n; e++) {
        bool used = v[e] == -INFINITY;
        for (int64_t i = 0; i < n_taken && !used; i++)
            used = taken[i] == e;
        if (!used && (best < 0 || v[e] > v[best]))
            best = e;
    }
    return best;
}

/* DeepSeek's group-limited choice: the experts in G equal groups, each group scored by its best
 * expert (V2) or the sum of its best two (V3, with the score correction), and every expert
 * outside the topk_groups best groups (ties: lower group) set to -inf in sel. gs: [G] scratch. */
static void limit_groups(const lp_arch *a, float *sel, float *gs, int64_t E)
{
    int64_t G = a->n_expert_groups, n = E / G;
    int32_t top2[2], kept[LP_FW_MAX_GROUPS];
    for (int64_t g = 0; g < G; g++) {
        const float *v = sel + g * n;
        top2[0] = best_free(v, n, top2, 0);
        gs[g] = v[top2[0]];
        if (a->router_score_bias && n > 1) {
            top2[1] = best_free(v, n, top2, 1);
            gs[g] += v[top2[1]];
        }
    }
    int64_t K = a->topk_groups < LP_FW_MAX_GROUPS ? a->topk_groups : LP_FW_MAX_GROUPS;
    for (int64_t j = 0; j < K; j++)
        kept[j] = best_free(gs, G, kept, j);
    for (int64_t g = 0; g < G; g++) {
        bool keep = false;
        for (int64_t j = 0; j < K && !keep; j++)
            keep = kept[j] == g;
        for (int64_t i = 0; !keep && i < n; i++)
            sel[g * n + i] = -INFINITY;
    }
}

/* Token t's scores r[E] (router logits in: a softmax over all experts, or a sigmoid for
 * DeepSeek V3), its top-k experts by score plus the score correction (ties: lower id), best
 * first, within the best groups where the family groups them, and their mixing weights: the
 * scores, renormalized over the chosen ones where the family does that, times the routed
 * scaling (DeepSeek V2 scales only what it does not renormalize). sel: [2 E] scratch. */
static void choose_experts(const lp_model *m, const lp_layer_weights *L, float *r, float *sel,
                           int64_t E, int64_t K, int32_t *chosen, float *w)
{
    const lp_arch *a = &m->arch;
    if (a->router_sigmoid)
        for (int64_t e = 0; e < E; e++)
            r[e] = (float)(1.0 / (1.0 + exp(-(double)r[e])));
    else
        lp_softmax(r, E);
    for (int64_t e = 0; e < E; e++)
        sel[e] = r[e] + (L->score_bias ? L->score_bias[e] : 0.0f);
    if (a->n_expert_groups > 1)
        limit_groups(a, sel, sel + E, E);
    double sum = 0.0;
    for (int64_t j = 0; j < K; j++) {
        chosen[j] = best_free(sel, E, chosen, j);
        w[j] = chosen[j] >= 0 ? r[chosen[j]] : 0.0f;
        sum += (double)w[j];
    }
    if (m->renorm_topk && sum > 0)
        for (int64_t j = 0; j < K; j++)
            w[j] = (float)((double)w[j] / sum);
    if (a->routed_scaling > 0 && (a->router_sigmoid || !m->renorm_topk))
        for (int64_t j = 0; j < K; j++)
            w[j] = (float)((double)w[j] * a->routed_scaling);
    if (!a->router_sigmoid)
        return;
    /* the ROUTER site and router_stats see a distribution: the scores over their sum */
    double z = 0.0;
    for (int64_t e = 0; e < E; e++)
        z += (double)r[e];
    for (int64_t e = 0; e < E; e++)
        r[e] = (float)((double)r[e] / z);
}

/* Sequence p->b's ROUTER site: its T rows of the stacked routing. */
static lp_status emit_routing(lp_fw_pass *p, int l)
{
    int64_t E = p->m->arch.n_experts, K = p->m->arch.n_experts_per_tok, r0 = p->b * p->T;
    const lp_fw_scratch *s = &p->s;
    if (!lp_fw_wants(p, LP_SITE_ROUTER, l, -1))
        return LP_OK;
    lp_router_view rv = {E, K, s->chosen + r0 * K, s->chosen_w + r0 * K};
    lp_view view = {s->router + r0 * E, p->T, E, E, 0, NULL, &rv};
    return lp_fw_emit(p, LP_SITE_ROUTER, l, -1, &view);
}

/* The router over every row of in, its choices, and each sequence's ROUTER site. */
static lp_status route_tokens(lp_fw_pass *p, int l, const lp_layer_weights *L, const float *in)
{
    const lp_arch *a = &p->m->arch;
    int64_t R = p->rows, E = a->n_experts, K = a->n_experts_per_tok;
    lp_fw_scratch *s = &p->s;
    lp_status st = lp_fw_linear(p, in, R, &L->router, L->router_bias, s->router);
    if (st != LP_OK)
        return st;
    for (int64_t t = 0; t < R; t++)
        choose_experts(p->m, L, s->router + t * E, s->router_sel, E, K, s->chosen + t * K,
                       s->chosen_w + t * K);
    for (p->b = 0; p->b < p->n_seqs && st == LP_OK; p->b++)
        st = emit_routing(p, l);
    p->b = 0;
    return st;
}

/* Expert e's weight in token t's mixture (0 when not chosen). */
static float expert_weight(const lp_fw_scratch *s, int64_t K, int64_t t, int32_t e)
{
    float w = 0.0f;
    for (int64_t j = 0; j < K; j++)
        if (s->chosen[t * K + j] == e)
            w = s->chosen_w[t * K + j];
    return w;
}

/* One gated expert (F wide) over `rows` rows of in (rows <= ffn_rows) into s->expert_out. */
static lp_status expert_rows(lp_fw_pass *p, const lp_expert_weights *X, int64_t F,
                             const float *in, int64_t rows)
{
    lp_fw_scratch *s = &p->s;
    lp_status st;
    lp_fw_linear_part gate_up[2] = {{&X->gate, X->gate_bias, s->gate},
                                    {&X->up, X->up_bias, s->up}};
    if (X->gate_up.data) {
        if ((st = lp_fw_linear(p, in, rows, &X->gate_up, X->gate_up_bias, s->gate)))
            return st;
        split_gate_up(s->gate, s->up, rows, F, p->m->block.gate_up_interleaved);
    } else if ((st = lp_fw_linear_group(p, in, rows, gate_up, 2))) {
        return st;
    }
    activate_rows(p->m, s->gate, s->up, rows, F);
    return lp_fw_linear(p, s->gate, rows, &X->down, X->down_bias, s->expert_out);
}

/* Expert e over the rows routed to it (of every sequence), ffn_rows at a time, its weighted
 * output added into out in row order. */
static lp_status run_expert(lp_fw_pass *p, const lp_layer_weights *L, int32_t e, const float *in,
                            float *out)
{
    const lp_arch *a = &p->m->arch;
    int64_t T = p->rows, H = a->hidden_size, K = a->n_experts_per_tok;
    lp_fw_scratch *s = &p->s;
    int64_t n = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++)
            if (s->chosen[t * K + j] == e)
                s->tok_list[n++] = t;
    for (int64_t i0 = 0; i0 < n; i0 += p->plan.ffn_rows) {
        int64_t c = n - i0 < p->plan.ffn_rows ? n - i0 : p->plan.ffn_rows;
        const int64_t *toks = s->tok_list + i0;
        for (int64_t i = 0; i < c; i++)
            memcpy(s->gather + i * H, in + toks[i] * H, (size_t)H * sizeof(float));
        lp_status st = expert_rows(p, &L->experts[e], L->ffn_hidden, s->gather, c);
        if (st != LP_OK)
            return st;
        for (int64_t i = 0; i < c; i++) {
            float w = expert_weight(s, K, toks[i], e);
            float *dst = out + toks[i] * H;
            const float *src = s->expert_out + i * H;
            for (int64_t d = 0; d < H; d++)
                dst[d] += w * src[d];
        }
    }
    return LP_OK;
}

/* The shared expert over every row, added into out: scaled by sigmoid(shared_gate . x) where
 * the family gates it (Qwen MoE), as it is (DeepSeek). */
static lp_status run_shared_expert(lp_fw_pass *p, const lp_layer_weights *L, const float *in,
                                   float *out)
{
    int64_t T = p->rows, H = p->m->arch.hidden_size;
    for (int64_t r0 = 0; r0 < T; r0 += p->plan.ffn_rows) {
        int64_t c = T - r0 < p->plan.ffn_rows ? T - r0 : p->plan.ffn_rows;
        lp_status st = expert_rows(p, &L->shared, L->shared_ffn, in + r0 * H, c);
        if (st != LP_OK)
            return st;
        for (int64_t i = 0; i < c; i++) {
            const float *x = in + (r0 + i) * H, *src = p->s.expert_out + i * H;
            float *dst = out + (r0 + i) * H;
            float w = 1.0f;
            if (L->shared_gate) {
                double z = 0.0;
                for (int64_t d = 0; d < H; d++)
                    z += (double)L->shared_gate[d] * (double)x[d];
                w = (float)(1.0 / (1.0 + exp(-z)));
            }
            for (int64_t d = 0; d < H; d++)
                dst[d] += w * src[d];
        }
    }
    return LP_OK;
}

static lp_status moe_ffn(lp_fw_pass *p, int l, const float *in, float *out)
{
    const lp_layer_weights *L = &p->m->layers[l];
    int64_t T = p->rows, H = p->m->arch.hidden_size;
    lp_status st = route_tokens(p, l, L, in);
    if (st != LP_OK)
        return st;
    memset(out, 0, (size_t)(T * H) * sizeof(float));
    /* Expert by expert, over the tokens routed to it; the weighted sum is added in a fixed
     * (expert, token) order, so the result does not depend on threads. */
    for (int32_t e = 0; e < p->m->arch.n_experts; e++)
        if ((st = run_expert(p, L, e, in, out)) != LP_OK)
            return st;
    return L->shared_ffn > 0 ? run_shared_expert(p, L, in, out) : LP_OK;
}

lp_status lp_fw_ffn(lp_fw_pass *p, int l, const float *in, float *out)
{
    const lp_layer_weights *L = &p->m->layers[l];
    int64_t R = p->rows, H = p->m->arch.hidden_size;
    lp_status st = L->moe ? moe_ffn(p, l, in, out) : dense_ffn(p, L, in, R, out);
    if (st != LP_OK)
        return st;
    if (L->post_ffn_norm.present)
        lp_fw_norm(p, &L->post_ffn_norm, out, out, R);
    return lp_fw_hook_seqs(p, LP_SITE_FFN_OUT, l, out, H, H);
}
