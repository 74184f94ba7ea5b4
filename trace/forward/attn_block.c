/* The attention sublayer of every family: q/k/v projections (apart, concatenated or grouped per
 * kv head), clipping, q/k norms (shared per head, one per head, or over the whole projection),
 * positions (RoPE with any scaling, ALiBi, none), the heads, o_proj and the post norm. The
 * block description (model_internal.h) picks each branch. */
#include "trace/forward/forward_internal.h"

#include <math.h>
#include <string.h>

/* At most this many row chunks per head (one per thread). */
enum { LP_FW_MAX_CHUNKS = 64 };

typedef struct head_task {
    const lp_fw_pass *p;
    const lp_fw_heads *h;
    int head0; /* first head of this round; task i runs heads_per_task heads from head0 +
                  (i / n_chunks) * heads_per_task into the probability slots from there, query
                  rows of chunk i % n_chunks */
    int heads_per_task; /* the KV group when the round holds whole groups (they share each
                           packed K/V block), else 1 */
    bool with_probs;
    bool with_stats; /* an observer wants some head's maps or statistics: only then do the
                        kernels fill row_stats (their second pass, with the sparsity selection) */
    int n_chunks;
    int64_t chunk_rows[LP_FW_MAX_CHUNKS + 1]; /* row boundaries of the chunks */
} head_task;

static void run_head(void *ctx, int64_t task)
{
    const head_task *ht = ctx;
    const lp_fw_heads *h = ht->h;
    const lp_fw_pass *p = ht->p;
    const lp_model *m = p->m;
    const lp_arch *a = &m->arch;
    int64_t slot = task / ht->n_chunks * ht->heads_per_task, chunk = task % ht->n_chunks;
    int head = ht->head0 + (int)slot;
    int64_t kv_head = head / h->group, T = p->T;
    const lp_fw_kv_source *kv = &h->kv;
    size_t elem = kv->dtype == LP_DTYPE_F32 ? 4 : 2;
    size_t k_off = (size_t)(kv_head * kv->head_stride) * elem;
    size_t v_off = (size_t)(kv_head * h->v_step) * elem;
    /* GQA: query head `head` reads kv head head / group */
    int64_t out_stride = a->n_heads * h->v_dim;
    lp_attn_args args = {
        .q = h->q + head * h->q_step, .k = (const char *)kv->k + k_off,
        .v = (const char *)kv->v + v_off,
        .out = p->s.attn + p->b * T * out_stride + head * h->v_dim, .n_q = T,
        .n_k = p->n_k, .head_dim = h->head_dim, .v_dim = h->v_dim, .q_stride = h->q_stride,
        .k_stride = kv->k_stride, .v_stride = kv->v_stride, .out_stride = out_stride,
        .scale = a->query_scale > 0 ? (float)a->query_scale
                                    : (float)(1.0 / sqrt((double)h->head_dim)),
        .softcap = (float)a->attn_logit_softcap, .mask = &p->mask, .batch = p->b,
        .probs = ht->with_probs ? p->s.probs + slot * p->plan.slot_stride : NULL,
        .row_stats = ht->with_stats ? p->s.row_stats + (int64_t)head * T : NULL,
        .local_window = p->opts->local_window, .skip_sparsity = p->opts->skip_sparsity,
        .alibi_slope = m->alibi_slopes ? m->alibi_slopes[head] : 0.0f, .kv_dtype = kv->dtype,
        .row_begin = ht->chunk_rows[chunk], .row_end = ht->chunk_rows[chunk + 1],
        .n_group = ht->heads_per_task, .q_head_stride = h->q_step, .out_head_stride = h->v_dim,
        .probs_head_stride = p->plan.slot_stride, .stats_head_stride = T,
        .alibi_slopes = m->alibi_slopes ? m->alibi_slopes + head : NULL,
        .sink_logits = h->sinks ? h->sinks + head : NULL,
        .has_sink = h->sinks != NULL, .sink_logit = h->sinks ? h->sinks[head] : 0.0f,
    };
    lp_attention(&args);
}

/* The layer's q, k and v rows, views into s->qkv: fused projections interleave them per row,
 * separate ones fill contiguous [R, q_dim], [R, kv_dim], [R, kv_dim] blocks. */
typedef struct qkv_views {
    float *q, *k, *v;
    int64_t q_stride, kv_stride;
} qkv_views;

/* A grouped row [g][q of the group's heads, k_g, v_g] rewritten in place as q | k | v. */
static void regroup_row(const lp_fw_pass *p, const lp_layer_weights *L, float *row)
{
    int64_t hd = p->m->arch.head_dim, groups = L->n_kv_heads;
    int64_t q_per_group = L->q_dim / groups, width = L->q_dim + 2 * L->kv_dim;
    float *src = p->s.qkv_row;
    memcpy(src, row, (size_t)width * sizeof *src);
    for (int64_t g = 0; g < groups; g++) {
        const float *grp = src + g * (q_per_group + 2 * hd);
        memcpy(row + g * q_per_group, grp, (size_t)q_per_group * sizeof *row);
        memcpy(row + L->q_dim + g * hd, grp + q_per_group, (size_t)hd * sizeof *row);
        memcpy(row + L->q_dim + L->kv_dim + g * hd, grp + q_per_group + hd,
               (size_t)hd * sizeof *row);
    }
}

/* MPT's clip_qkv: every q, k and v value clamped to [-c, c]. */
static void clip_qkv(float *x, int64_t n, double c)
{
    float lo = (float)-c, hi = (float)c;
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
}

static lp_status project_qkv(lp_fw_pass *p, const lp_layer_weights *L, const float *in,
                             qkv_views *x)
{
    lp_fw_scratch *s = &p->s;
    int64_t T = p->rows, width = L->q_dim + 2 * L->kv_dim;
    lp_status st;
    x->q = s->qkv;
    if (L->qkv_layout != LP_QKV_SEPARATE) {
        x->q_stride = x->kv_stride = width;
        x->k = x->q + L->q_dim;
        x->v = x->k + L->kv_dim;
        if ((st = lp_fw_linear(p, in, T, &L->qkv, L->qkv_bias, s->qkv)))
            return st;
        for (int64_t t = 0; L->qkv_layout == LP_QKV_GROUPED && t < T; t++)
            regroup_row(p, L, s->qkv + t * width);
    } else {
        x->q_stride = L->q_dim;
        x->kv_stride = L->kv_dim;
        x->k = x->q + T * L->q_dim;
        x->v = x->k + T * L->kv_dim;
        lp_fw_linear_part qkv[3] = {{&L->q, L->q_bias, x->q}, {&L->k, L->k_bias, x->k},
                                    {&L->v, L->v_bias, x->v}};
        if ((st = lp_fw_linear_group(p, in, T, qkv, 3)))
            return st;
    }
    /* either layout fills R * width values from s->qkv on */
    if (p->m->block.qkv_clip > 0)
        clip_qkv(s->qkv, T * width, p->m->block.qkv_clip);
    return LP_OK;
}

/* One position's q and k rows normed as the block says, in place. */
static void norm_qk(const lp_fw_pass *p, const lp_layer_weights *L, float *q, float *k)
{
    const lp_arch *a = &p->m->arch;
    int64_t hd = a->head_dim;
    switch (p->m->block.qk_norm) {
    case LP_QK_NORM_SHARED:
        lp_fw_norm_rows(a, L->q_norm, L->q_norm_bias, q, q, a->n_heads, hd);
        lp_fw_norm_rows(a, L->k_norm, L->k_norm_bias, k, k, L->n_kv_heads, hd);
        break;
    case LP_QK_NORM_EACH:
        for (int64_t h = 0; h < a->n_heads; h++)
            lp_fw_norm_rows(a, L->q_norm + h * hd, L->q_norm_bias ? L->q_norm_bias + h * hd : NULL,
                            q + h * hd, q + h * hd, 1, hd);
        for (int64_t h = 0; h < L->n_kv_heads; h++)
            lp_fw_norm_rows(a, L->k_norm + h * hd, L->k_norm_bias ? L->k_norm_bias + h * hd : NULL,
                            k + h * hd, k + h * hd, 1, hd);
        break;
    case LP_QK_NORM_WHOLE:
        lp_fw_norm_rows(a, L->q_norm, L->q_norm_bias, q, q, 1, L->q_dim);
        lp_fw_norm_rows(a, L->k_norm, L->k_norm_bias, k, k, 1, L->kv_dim);
        break;
    default:
        break;
    }
}

/* The layer's inverse frequencies and cos/sin factor: sliding layers of a model with a local
 * theta (Gemma 3) rotate with it and without the global attention factor. */
static lp_status layer_freqs(lp_fw_pass *p, const lp_layer_weights *L, const float **inv_freq,
                             float *attn_factor)
{
    const lp_arch *a = &p->m->arch;
    bool local = L->window > 0 && a->rope_local_theta > 0;
    float unused;
    lp_status st = lp_model_rope_freqs(p->m, p->rope_len, false, p->s.inv_freq, attn_factor,
                                       p->err);
    if (st == LP_OK && local) {
        st = lp_model_rope_freqs(p->m, p->rope_len, true, p->s.inv_freq_local, &unused, p->err);
        *attn_factor = 1.0f;
    }
    *inv_freq = local ? p->s.inv_freq_local : p->s.inv_freq;
    return st;
}

/* q/k norms, then RoPE, position by position. */
static lp_status position_qk(lp_fw_pass *p, const lp_layer_weights *L, const qkv_views *x)
{
    const lp_arch *a = &p->m->arch;
    bool rope = p->m->block.positions == LP_POS_ROPE;
    const float *inv_freq = NULL;
    float attn_factor = 1.0f;
    lp_status st;
    if (rope && (st = layer_freqs(p, L, &inv_freq, &attn_factor)))
        return st;
    bool adjacent = a->rope_layout == LP_ROPE_ADJACENT;
    int64_t hd = a->head_dim;
    for (int64_t t = 0; t < p->rows; t++) {
        float *qt = x->q + t * x->q_stride, *kt = x->k + t * x->kv_stride;
        norm_qk(p, L, qt, kt);
        if (rope) {
            int64_t pos = p->s.positions[t];
            lp_rope(qt, a->n_heads, hd, a->rope_dim, pos, inv_freq, attn_factor, adjacent);
            lp_rope(kt, L->n_kv_heads, hd, a->rope_dim, pos, inv_freq, attn_factor, adjacent);
        }
    }
    return LP_OK;
}

/* Hand the maps and statistics of heads h0 .. h0+n-1 (just computed, probabilities in slots
 * 0 .. n-1 when with_probs) to the observer. */
static lp_status emit_head_maps(lp_fw_pass *p, int l, int h0, int64_t n, bool with_probs)
{
    lp_fw_scratch *s = &p->s;
    int64_t T = p->T;
    lp_status st;
    for (int64_t i = 0; i < n; i++) {
        int head = h0 + (int)i;
        const lp_attn_row_stats *rs = s->row_stats + (int64_t)head * T;
        if (with_probs && lp_fw_wants(p, LP_SITE_ATTN_PROBS, l, head)) {
            lp_view view = {s->probs + i * p->plan.slot_stride, T, p->n_k, p->n_k, p->pos0, rs,
                            NULL};
            if ((st = lp_fw_emit(p, LP_SITE_ATTN_PROBS, l, head, &view)))
                return st;
        }
        if (lp_fw_wants(p, LP_SITE_ATTN_STATS, l, head)) {
            lp_view view = {NULL, T, 0, 0, p->pos0, rs, NULL};
            if ((st = lp_fw_emit(p, LP_SITE_ATTN_STATS, l, head, &view)))
                return st;
        }
    }
    return LP_OK;
}

/* Split the query rows into one chunk per thread of equal attention work (the visible keys
 * summed over the rows: causal rows grow along the prompt, so the chunks shrink), so that
 * (head, chunk) items balance whatever the head count. */
static void plan_chunks(const lp_fw_pass *p, head_task *task)
{
    int64_t T = p->T, threads = p->pool ? lp_pool_threads(p->pool) : 1;
    task->n_chunks = (int)(threads < LP_FW_MAX_CHUNKS ? threads : LP_FW_MAX_CHUNKS);
    if (T < 64 || task->n_chunks < 1)
        task->n_chunks = 1;
    double total = 0.0;
    for (int64_t i = 0; i < T; i++) {
        int64_t lo, hi;
        lp_mask_row_range(&p->mask, p->b, i, &lo, &hi);
        total += (double)(hi - lo) + 1.0; /* + 1: a row costs something even when masked */
    }
    task->chunk_rows[0] = 0;
    double seen = 0.0;
    int c = 1;
    for (int64_t i = 0; i < T && c < task->n_chunks; i++) {
        int64_t lo, hi;
        lp_mask_row_range(&p->mask, p->b, i, &lo, &hi);
        seen += (double)(hi - lo) + 1.0;
        if (seen >= total * c / task->n_chunks)
            task->chunk_rows[c++] = i + 1;
    }
    while (c <= task->n_chunks)
        task->chunk_rows[c++] = T;
}

/* Sequence p->b's heads, in groups of n_prob_slots when probabilities are wanted (each needs a
 * [T, T] slot), else all at once; maps and statistics go to the observer group by group. */
static lp_status run_seq_heads(lp_fw_pass *p, int l, const lp_fw_heads *heads)
{
    const lp_arch *a = &p->m->arch;
    bool any_probs = false, any_stats = false;
    for (int h = 0; h < a->n_heads; h++) {
        any_probs = any_probs || lp_fw_wants(p, LP_SITE_ATTN_PROBS, l, h);
        any_stats = any_stats || lp_fw_wants(p, LP_SITE_ATTN_STATS, l, h);
    }
    bool with_stats = any_probs || any_stats;
    /* An observer that said no to every map up front gets none now either (no slots exist). */
    any_probs = any_probs && p->s.probs != NULL;
    int64_t group = any_probs ? p->plan.n_prob_slots : a->n_heads;
    if (group < 1)
        group = 1;
    for (int h0 = 0; h0 < a->n_heads; h0 += (int)group) {
        int64_t n = a->n_heads - h0 < group ? a->n_heads - h0 : group;
        /* a group's heads share each packed K/V block (their sink logits go per head) */
        bool whole_groups = heads->group > 1 && h0 % heads->group == 0 &&
                            n % heads->group == 0;
        head_task task = {p, heads, h0, whole_groups ? (int)heads->group : 1,
                          any_probs, with_stats, 1, {0}};
        plan_chunks(p, &task);
        lp_fw_pool_or_serial(p->pool, n / task.heads_per_task * task.n_chunks, run_head, &task);
        lp_status st = emit_head_maps(p, l, h0, n, any_probs);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

/* The heads as sequence b's rows see them: queries, keys and values from its row r0 = b * T on
 * (the stacked projections; a cache serves one sequence, whose r0 is 0). */
static lp_fw_heads heads_of_sequence(const lp_fw_heads *all, int64_t r0)
{
    lp_fw_heads h = *all;
    size_t elem = h.kv.dtype == LP_DTYPE_F32 ? 4 : 2;
    h.q += r0 * h.q_stride;
    h.kv.k = (const char *)h.kv.k + (size_t)(r0 * h.kv.k_stride) * elem;
    h.kv.v = (const char *)h.kv.v + (size_t)(r0 * h.kv.v_stride) * elem;
    return h;
}

lp_status lp_fw_run_heads(lp_fw_pass *p, int l, const lp_fw_heads *heads)
{
    lp_status st = LP_OK;
    for (p->b = 0; p->b < p->n_seqs && st == LP_OK; p->b++) {
        lp_fw_heads seq = heads_of_sequence(heads, p->b * p->T);
        st = run_seq_heads(p, l, &seq);
    }
    p->b = 0;
    return st;
}

/* Sequence p->b's HEAD_OUTPUT sites. */
static lp_status emit_seq_head_outputs(lp_fw_pass *p, int l, int64_t width)
{
    const lp_arch *a = &p->m->arch;
    int64_t stride = a->n_heads * width;
    float *rows = p->s.attn + p->b * p->T * stride;
    for (int h = 0; h < a->n_heads; h++) {
        float *head = rows + (int64_t)h * width;
        lp_status st = lp_fw_edit(p, LP_SITE_HEAD_OUTPUT, l, h, head, p->T, width, stride);
        if (st != LP_OK)
            return st;
        if (!lp_fw_wants(p, LP_SITE_HEAD_OUTPUT, l, h))
            continue;
        lp_view view = {head, p->T, width, stride, p->pos0, NULL, NULL};
        if ((st = lp_fw_emit(p, LP_SITE_HEAD_OUTPUT, l, h, &view)) != LP_OK)
            return st;
    }
    return LP_OK;
}

lp_status lp_fw_emit_head_outputs(lp_fw_pass *p, int l, int64_t width)
{
    lp_status st = LP_OK;
    for (p->b = 0; p->b < p->n_seqs && st == LP_OK; p->b++)
        st = emit_seq_head_outputs(p, l, width);
    p->b = 0;
    return st;
}

lp_status lp_fw_attention(lp_fw_pass *p, int l, const float *in, float *out)
{
    const lp_layer_weights *L = &p->m->layers[l];
    int64_t R = p->rows, H = p->m->arch.hidden_size;
    qkv_views x;
    lp_status st;
    if ((st = project_qkv(p, L, in, &x)) || (st = position_qk(p, L, &x)))
        return st;
    p->mask.window = lp_fw_layer_window(p->opts, L);
    /* the plain pass reads the projections; a cached call reads what the cache holds */
    lp_fw_kv_source kv = {x.k, x.v, x.kv_stride, x.kv_stride, p->m->arch.head_dim, LP_DTYPE_F32};
    if (p->kv && (st = lp_fw_kv_append(p, l, x.k, x.v, x.kv_stride, &kv)))
        return st;
    int64_t hd = p->m->arch.head_dim;
    lp_fw_heads heads = {x.q, x.q_stride, hd, kv, kv.head_stride, hd, hd,
                         p->m->arch.n_heads / L->n_kv_heads, L->sinks};
    if ((st = lp_fw_run_heads(p, l, &heads)) || (st = lp_fw_emit_head_outputs(p, l, hd)) ||
        (st = lp_fw_linear(p, p->s.attn, R, &L->o, L->o_bias, out)))
        return st;
    if (L->post_attn_norm.present)
        lp_fw_norm(p, &L->post_attn_norm, out, out, R);
    return lp_fw_hook_seqs(p, LP_SITE_ATTN_OUT, l, out, H, H);
}
