/* The instrumented forward pass: one prefill of every sequence of a batch, stacked (the linear
 * layers see all rows at once, attention and the sites see each sequence), observers asked at
 * every named site. One loop for every family: the block description (model_internal.h) says
 * where the norms sit and how the sublayers meet the residual stream; attn_block.c and
 * ffn_block.c are the two sublayers. */
#include "trace/trace.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/checked.h"
#include "trace/forward/forward_internal.h"

typedef lp_fw_pass pass;

/* Most rows one call accepts (all sequences of a batch stacked); the [T, T] probability slots
 * bound a sequence long before this. */
#define MAX_TOKENS (1 << 20)

void lp_forward_opts_init(lp_forward_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->mask_fault = LP_MASK_FAULT_NONE;
    opts->sliding_window = true;
    opts->local_window = 8;
}

uint64_t lp_forward_scratch_bytes(const lp_arch *arch, int64_t n_tokens, int n_threads,
                                  bool attention_maps)
{
    lp_fw_plan p;
    /* The dimensions the plan divides by or loops over must be there. */
    if (!arch || n_tokens <= 0 || n_tokens > MAX_TOKENS || n_threads < 1 || arch->n_layers <= 0 ||
        arch->n_layers > LP_MAX_LAYERS || arch->n_heads <= 0 || arch->head_dim <= 0 ||
        arch->hidden_size <= 0 || arch->vocab_size <= 0)
        return 0;
    if (!lp_fw_make_plan(arch, n_tokens, attention_maps, n_threads, &p))
        return 0;
    return p.total;
}

/* ---- embeddings and logits ---- */

/* Token rows of every sequence, scaled (Gemma), projected to hidden (OPT project_in), plus
 * learned positions, normed (BLOOM): the input of layer 0. */
static lp_status embed(pass *p, const int32_t *tokens)
{
    const lp_model *m = p->m;
    const lp_arch *a = &m->arch;
    int64_t T = p->rows, H = a->hidden_size, E = m->block.embed_dim;
    lp_fw_scratch *s = &p->s;
    float *rows = m->has_proj ? s->embed : s->x; /* [R, E] */
    lp_status st;
    for (int64_t t = 0; t < T; t++) {
        float *row = rows + t * E;
        if ((st = lp_tensor_rows_f32(m->tok_embd, tokens[t], 1, row, p->err)))
            return st;
        if (a->embed_scale != 1.0 && a->embed_scale > 0)
            for (int64_t c = 0; c < E; c++)
                row[c] *= (float)a->embed_scale;
    }
    if (m->has_proj && (st = lp_fw_linear(p, s->embed, T, &m->project_in, NULL, s->x)))
        return st;
    for (int64_t t = 0; m->pos_embd && t < T; t++) {
        int64_t idx = s->positions[t] + a->pos_offset;
        if ((st = lp_tensor_rows_f32(m->pos_embd, idx, 1, s->xn, p->err)))
            return st;
        lp_add(s->x + t * H, s->xn, H);
    }
    if (m->embed_norm.present)
        lp_fw_norm(p, &m->embed_norm, s->x, s->x, T);
    return lp_fw_hook_seqs(p, LP_SITE_EMBED, -1, s->x, H, H);
}

/* The classifier's input rows: every row, or (last_only) each sequence's last row gathered into
 * row b; *n_rows of them. The final norm (if any), then OPT's project_out; *width is the row
 * length of *out. */
static lp_status classifier_input(pass *p, bool last_only, const float **out, int64_t *n_rows,
                                  int64_t *width)
{
    const lp_model *m = p->m;
    int64_t T = p->T, H = m->arch.hidden_size, n = last_only ? p->n_seqs : p->rows;
    lp_fw_scratch *s = &p->s;
    for (int64_t b = 0; last_only && b < p->n_seqs; b++)
        memcpy(s->xn + b * H, s->x + (b * T + T - 1) * H, (size_t)H * sizeof(float));
    const float *src = last_only ? s->xn : s->x;
    if (m->out_norm.present)
        lp_fw_norm(p, &m->out_norm, s->xn, src, n);
    else if (!last_only)
        memcpy(s->xn, src, (size_t)(n * H) * sizeof(float));
    *out = s->xn;
    *n_rows = n;
    *width = H;
    if (!m->has_proj)
        return LP_OK;
    *out = s->embed;
    *width = m->block.embed_dim;
    return last_only ? lp_fw_linear_rows(p, s->xn, n, &m->project_out, NULL, s->embed)
                     : lp_fw_linear(p, s->xn, n, &m->project_out, NULL, s->embed);
}

/* The LOGITS sites of classifier rows [r0, r0 + n) (logits of row r0 first): each sequence's
 * part with its own positions. */
static lp_status emit_logits(pass *p, bool last_only, int64_t r0, int64_t n)
{
    int64_t T = p->T, V = p->m->arch.vocab_size, per_seq = last_only ? 1 : T;
    lp_status st = LP_OK;
    for (p->b = r0 / per_seq; p->b * per_seq < r0 + n && st == LP_OK; p->b++) {
        int64_t lo = p->b * per_seq > r0 ? p->b * per_seq : r0;
        int64_t hi = (p->b + 1) * per_seq < r0 + n ? (p->b + 1) * per_seq : r0 + n;
        int64_t t0 = last_only ? T - 1 : lo - p->b * T;
        lp_view view = {p->s.logits + (lo - r0) * V, hi - lo, V, V, p->pos0 + t0, NULL, NULL};
        if (lp_fw_wants(p, LP_SITE_LOGITS, -1, -1))
            st = lp_fw_emit(p, LP_SITE_LOGITS, -1, -1, &view);
    }
    p->b = 0;
    return st;
}

static lp_status logits(pass *p)
{
    const lp_model *m = p->m;
    const lp_arch *a = &m->arch;
    int64_t V = a->vocab_size, width, n;
    bool last_only = p->opts->logits_last_only;
    const float *in;
    lp_status st = classifier_input(p, last_only, &in, &n, &width);
    for (int64_t r0 = 0; r0 < n && st == LP_OK; r0 += p->plan.logits_rows) {
        int64_t rows = n - r0 < p->plan.logits_rows ? n - r0 : p->plan.logits_rows;
        const float *x = in + r0 * width;
        st = last_only ? lp_fw_linear_rows(p, x, rows, &m->lm_head, m->lm_head_bias, p->s.logits)
                       : lp_fw_linear(p, x, rows, &m->lm_head, m->lm_head_bias, p->s.logits);
        if (st == LP_OK) {
            lp_fw_finish_logits(a, p->s.logits, rows * V);
            st = emit_logits(p, last_only, r0, rows);
        }
    }
    return st;
}

/* ---- one layer, as the block description says ---- */

/* The attention sublayer: DeepSeek's latent attention or everyone else's. */
static lp_status attention(pass *p, int l, const float *in, float *out)
{
    return p->m->arch.mla ? lp_fw_mla_attention(p, l, in, out) : lp_fw_attention(p, l, in, out);
}

static lp_status sequential_layer(pass *p, int l)
{
    const lp_layer_weights *L = &p->m->layers[l];
    int64_t n = p->rows * p->m->arch.hidden_size;
    lp_fw_scratch *s = &p->s;
    lp_status st = attention(p, l, lp_fw_block_input(p, &L->attn_norm), s->tmp);
    if (st != LP_OK)
        return st;
    lp_add(s->x, s->tmp, n);
    if ((st = lp_fw_ffn(p, l, lp_fw_block_input(p, &L->ffn_norm), s->tmp)) != LP_OK)
        return st;
    lp_add(s->x, s->tmp, n);
    return LP_OK;
}

/* Both branches read the same residual stream (through one norm or each its own); their
 * outputs are added together. */
static lp_status parallel_layer(pass *p, int l)
{
    const lp_layer_weights *L = &p->m->layers[l];
    int64_t n = p->rows * p->m->arch.hidden_size;
    lp_fw_scratch *s = &p->s;
    const float *in = lp_fw_block_input(p, &L->attn_norm);
    lp_status st = attention(p, l, in, s->tmp);
    if (st != LP_OK)
        return st;
    if (!p->m->block.shared_input_norm)
        in = lp_fw_block_input(p, &L->ffn_norm); /* x is unchanged until both are done */
    if ((st = lp_fw_ffn(p, l, in, s->ffn_out)) != LP_OK)
        return st;
    lp_add(s->x, s->tmp, n);
    lp_add(s->x, s->ffn_out, n);
    return LP_OK;
}

/* Each sublayer reads the residual stream itself; its norm runs after the add. */
static lp_status post_norm_layer(pass *p, int l)
{
    const lp_layer_weights *L = &p->m->layers[l];
    int64_t T = p->rows, n = T * p->m->arch.hidden_size;
    lp_fw_scratch *s = &p->s;
    lp_status st = attention(p, l, s->x, s->tmp);
    if (st != LP_OK)
        return st;
    lp_add(s->x, s->tmp, n);
    lp_fw_norm(p, &L->attn_norm, s->x, s->x, T);
    if ((st = lp_fw_ffn(p, l, s->x, s->tmp)) != LP_OK)
        return st;
    lp_add(s->x, s->tmp, n);
    lp_fw_norm(p, &L->ffn_norm, s->x, s->x, T);
    return LP_OK;
}

static lp_status run_layer(pass *p, int l)
{
    switch (p->m->block.residual) {
    case LP_RESIDUAL_PARALLEL: return parallel_layer(p, l);
    case LP_RESIDUAL_POST_NORM: return post_norm_layer(p, l);
    default: return sequential_layer(p, l);
    }
}

/* ---- the pass ---- */

lp_status lp_forward_check(const lp_model *m, const lp_batch *batch, lp_error *err)
{
    const lp_arch *a = &m->arch;
    if (!batch || batch->n_seqs <= 0 || batch->n_tokens <= 0 || !batch->tokens)
        return lp_error_set(err, LP_ERR_USAGE, "forward: empty batch (%lld sequences of %lld tokens)",
                            batch ? (long long)batch->n_seqs : 0LL,
                            batch ? (long long)batch->n_tokens : 0LL);
    if (batch->n_tokens > MAX_TOKENS)
        return lp_error_set(err, LP_ERR_RANGE, "forward: %lld tokens (limit %d)",
                            (long long)batch->n_tokens, MAX_TOKENS);
    int64_t total;
    if (!lp_mul_i64(batch->n_seqs, batch->n_tokens, &total) || total > MAX_TOKENS)
        return lp_error_set(err, LP_ERR_RANGE,
                            "forward: %lld sequences of %lld tokens stack more than %d rows",
                            (long long)batch->n_seqs, (long long)batch->n_tokens, MAX_TOKENS);
    for (int64_t b = 0; b < batch->n_seqs; b++) {
        int64_t pl = batch->pad_left ? batch->pad_left[b] : 0;
        int64_t pr = batch->pad_right ? batch->pad_right[b] : 0;
        if (pl < 0 || pr < 0 || pl + pr > batch->n_tokens)
            return lp_error_set(err, LP_ERR_RANGE,
                                "forward: sequence %lld: padding %lld left + %lld right exceeds %lld "
                                "tokens",
                                (long long)b, (long long)pl, (long long)pr,
                                (long long)batch->n_tokens);
    }
    for (int64_t i = 0; i < total; i++) {
        int32_t id = batch->tokens[i];
        if (id < 0 || id >= a->vocab_size || id >= m->tok_embd->shape[0])
            return lp_error_set(err, LP_ERR_RANGE,
                                "forward: token %lld of sequence %lld is id %ld, outside the "
                                "vocabulary [0, %lld)",
                                (long long)(i % batch->n_tokens), (long long)(i / batch->n_tokens),
                                (long)id, (long long)a->vocab_size);
    }
    if (m->pos_embd) {
        int64_t rows = m->pos_embd->shape[0] - a->pos_offset;
        if (batch->n_tokens > rows)
            return lp_error_set(err, LP_ERR_RANGE,
                                "forward: %lld tokens exceed the learned position table (%lld "
                                "positions)",
                                (long long)batch->n_tokens, (long long)rows);
    }
    return LP_OK;
}

/* [T, T] probability slots only if the observer wants some head's map (asked up front; a
 * store with --maps none must not pay T*T per thread). */
static bool any_map_wanted(pass *p, const lp_batch *batch)
{
    const lp_arch *a = &p->m->arch;
    bool maybe = false;
    for (int64_t b = 0; b < batch->n_seqs && !maybe && p->obs && p->obs->want; b++) {
        p->b = b;
        for (int l = 0; l < a->n_layers && !maybe; l++)
            for (int h = 0; h < a->n_heads && !maybe; h++)
                maybe = lp_fw_wants(p, LP_SITE_ATTN_PROBS, l, h);
    }
    p->b = 0;
    return maybe;
}

/* Every sequence's RoPE/learned positions (padding at position 0) and the shared mask, whose
 * padding the attention kernels read for the sequence at hand. */
static void set_positions_and_mask(pass *p, const lp_batch *batch)
{
    int64_t rope0 = p->kv ? lp_fw_kv_rope_pos0(p->kv, p->pos0) : 0;
    for (int64_t b = 0; b < p->n_seqs; b++) {
        int64_t pad_left = batch->pad_left ? batch->pad_left[b] : 0;
        int64_t *pos = p->s.positions + b * p->T;
        for (int64_t t = 0; t < p->T; t++)
            pos[t] = t >= pad_left ? rope0 + t - pad_left : 0;
    }
    p->mask = lp_mask_causal(p->T, p->n_k);
    if (p->kv && lp_fw_kv_top_left(p->kv))
        p->mask.q_pos0 = 0;
    p->mask.pad_left = batch->pad_left;
    p->mask.pad_right = batch->pad_right;
    p->mask.fault = p->opts->mask_fault;
}

/* The residual stream after layer l: every sequence's RESID site and progress. */
static lp_status after_layer(pass *p, int l)
{
    const lp_arch *a = &p->m->arch;
    lp_status st = lp_fw_hook_seqs(p, LP_SITE_RESID, l, p->s.x, a->hidden_size, a->hidden_size);
    for (int64_t b = 0; st == LP_OK && p->opts->progress && b < p->n_seqs; b++)
        p->opts->progress(p->opts->progress_ctx, b, l, (int)a->n_layers);
    return st;
}

/* The stacked batch: positions and mask, embedding, every layer, logits. */
static lp_status run_batch(pass *p, const lp_batch *batch)
{
    const lp_arch *a = &p->m->arch;
    set_positions_and_mask(p, batch);
    int first = p->opts->start_layer;
    lp_status st = LP_OK;
    if (first > 0)
        memcpy(p->s.x, p->opts->start_resid, (size_t)(p->rows * a->hidden_size) * sizeof(float));
    else
        st = embed(p, batch->tokens);
    for (int l = first; l < a->n_layers && st == LP_OK; l++)
        if ((st = run_layer(p, l)) == LP_OK)
            st = after_layer(p, l);
    return st == LP_OK ? logits(p) : st;
}

/* The longest real sequence of the batch (padding left out): the sequence length Hugging Face's
 * RoPE variants see (max position + 1), on which dynamic NTK and longrope's factors depend. */
static int64_t longest_sequence(const lp_batch *batch)
{
    int64_t longest = 1;
    for (int64_t b = 0; b < batch->n_seqs; b++) {
        int64_t n = batch->n_tokens - (batch->pad_left ? batch->pad_left[b] : 0) -
                    (batch->pad_right ? batch->pad_right[b] : 0);
        longest = n > longest ? n : longest;
    }
    return longest;
}

/* The last pass's scratch, kept for the next: a fresh arena per pass first-touched every page
 * of it, and with probability maps (two [T, T] slots, 134 MB at T = 4096) that was 32k page
 * faults a pass. One arena at most is kept (the process holds its pages until exit); passes
 * running at once each take it or make their own, so the exchange is all the locking needed. */
static _Atomic(lp_arena *) spare_scratch;

static lp_status scratch_take(size_t bytes, lp_arena **out, lp_error *err)
{
    lp_arena *arena = atomic_exchange(&spare_scratch, NULL);
    if (arena && lp_arena_capacity(arena) >= bytes) {
        lp_arena_reset_to(arena, 0);
        *out = arena;
        return LP_OK;
    }
    lp_arena_destroy(arena);
    return lp_arena_create(bytes, out, err);
}

static void scratch_give_back(lp_arena *arena)
{
    lp_arena_destroy(atomic_exchange(&spare_scratch, arena));
}

/* The pass over a batch, or (kv != NULL) over one sequence's new tokens against the cache. */
static lp_status forward_run(const lp_model *model, const lp_batch *batch,
                             const lp_forward_opts *opts_in, lp_kv_cache *kv, lp_error *err)
{
    lp_forward_opts defaults;
    if (!opts_in) {
        lp_forward_opts_init(&defaults);
        opts_in = &defaults;
    }
    lp_status st = lp_forward_check(model, batch, err);
    if (st != LP_OK)
        return st;
    if (opts_in->start_layer < 0 || opts_in->start_layer >= model->arch.n_layers ||
        (opts_in->start_layer > 0 && !opts_in->start_resid))
        return lp_error_set(err, LP_ERR_USAGE,
                            "forward: start_layer %d outside [0, %lld) or without start_resid",
                            opts_in->start_layer, (long long)model->arch.n_layers);
    pass p;
    memset(&p, 0, sizeof p);
    p.m = model;
    p.opts = opts_in;
    p.obs = opts_in->observer;
    p.pool = opts_in->pool;
    p.n_seqs = batch->n_seqs;
    p.T = batch->n_tokens;
    p.rows = p.n_seqs * p.T; /* bounded by lp_forward_check */
    p.err = err;
    p.kv = kv;
    p.pos0 = kv ? lp_kv_cache_len(kv) : 0;
    p.n_k = p.pos0 + p.T;
    p.rope_len = kv ? lp_fw_kv_rope_len(kv, p.n_k) : longest_sequence(batch);
    int n_threads = p.pool ? lp_pool_threads(p.pool) : 1;
    bool gather = kv && lp_fw_kv_needs_gather(kv);
    if (!lp_fw_make_plan_kv(&model->arch, p.n_seqs, p.T, p.n_k, gather,
                            any_map_wanted(&p, batch), n_threads, &p.plan))
        return lp_error_set(err, LP_ERR_RANGE, "forward: scratch for %lld x %lld tokens overflows",
                            (long long)p.n_seqs, (long long)p.T);
    lp_arena *arena;
    if ((st = scratch_take((size_t)p.plan.total, &arena, err)) != LP_OK)
        return st;
    if (!lp_fw_carve(arena, &model->arch, &p.plan, &p.s)) {
        lp_arena_destroy(arena);
        return lp_error_set(err, LP_ERR_NOMEM, "forward: scratch plan of %llu bytes too small "
                                               "(bug)", (unsigned long long)p.plan.total);
    }
    st = run_batch(&p, batch);
    scratch_give_back(arena);
    if (st == LP_OK && kv)
        lp_fw_kv_advance(kv, p.T);
    return st;
}

lp_status lp_forward(const lp_model *model, const lp_batch *batch, const lp_forward_opts *opts_in,
                     lp_error *err)
{
    return forward_run(model, batch, opts_in, NULL, err);
}

int64_t lp_forward_rope_switch_len(const lp_model *model)
{
    const lp_rope_scaling *rs = &model->arch.rope_scaling;
    if (rs->kind != LP_ROPE_SCALING_LONGROPE)
        return 0;
    return rs->original_ctx > 0 ? rs->original_ctx : model->arch.n_ctx;
}

/* Longrope's switch: the cached positions recomputed, unobserved (their rows were reported when
 * they were made), with the factors of the new length. */
static lp_status rebuild_for_longrope(const lp_model *model, lp_kv_cache *cache, int64_t total,
                                      const lp_forward_opts *opts, lp_error *err)
{
    lp_forward_opts quiet;
    if (opts)
        quiet = *opts;
    else
        lp_forward_opts_init(&quiet);
    quiet.observer = NULL;
    int64_t n_old;
    const int32_t *old = lp_fw_kv_begin_rebuild(cache, total, &n_old);
    lp_batch batch = lp_batch_single(old, n_old);
    lp_status st = forward_run(model, &batch, &quiet, cache, err);
    lp_fw_kv_end_rebuild(cache);
    return st;
}

lp_status lp_forward_cached(const lp_model *model, lp_kv_cache *cache, const int32_t *tokens,
                            int64_t n, const lp_forward_opts *opts, lp_error *err)
{
    int64_t len = lp_kv_cache_len(cache), ctx = lp_kv_cache_ctx(cache);
    if (n <= 0 || n > ctx - len)
        return lp_error_set(err, LP_ERR_RANGE,
                            "forward: %lld new tokens after %lld do not fit the KV cache of %lld "
                            "positions",
                            (long long)n, (long long)len, (long long)ctx);
    if (model->pos_embd && len + n > model->pos_embd->shape[0] - model->arch.pos_offset)
        return lp_error_set(err, LP_ERR_RANGE,
                            "forward: position %lld exceeds the learned position table (%lld "
                            "positions)",
                            (long long)(len + n - 1),
                            (long long)(model->pos_embd->shape[0] - model->arch.pos_offset));
    int64_t orig = lp_forward_rope_switch_len(model);
    lp_status st;
    if (orig > 0 && !model->arch.mla && len > 0 && len <= orig && len + n > orig &&
        (st = rebuild_for_longrope(model, cache, len + n, opts, err)) != LP_OK)
        return st;
    lp_fw_kv_remember(cache, tokens, n);
    lp_batch batch = lp_batch_single(tokens, n);
    return forward_run(model, &batch, opts, cache, err);
}
