/* The forward pass's ground floor: one call's scratch (planned, then carved from one arena), the
 * observer calls, norms and linear layers as every sublayer uses them. */
#include "trace/forward/forward_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/checked.h"

/* Logits are computed in chunks of rows so a 150k vocabulary never needs [T, vocab] at once. */
#define LOGITS_CHUNK_FLOATS (4u << 20)
/* The FFN runs over at most this many rows at a time, so its [rows, ffn] scratch stays small for
 * long prompts (GEMMs of 256 rows are already at full speed). */
#define FFN_CHUNK_ROWS 256

static uint64_t round64(uint64_t n) { return (n + 63) / 64 * 64; }

/* Adds n elements of `size` bytes to *total; false on overflow. */
static bool plan_add(uint64_t *total, uint64_t n, uint64_t size)
{
    uint64_t bytes;
    if (!lp_mul_u64(n, size, &bytes))
        return false;
    return lp_add_u64(*total, round64(bytes) + 64, total);
}

static void widest_layer(const lp_arch *a, lp_fw_plan *p)
{
    p->q_dim = p->kv_dim = p->ffn = 0;
    for (int l = 0; l < a->n_layers; l++) {
        lp_layer_shape ls = lp_layer_shape_of(a, l);
        p->q_dim = ls.q_dim > p->q_dim ? ls.q_dim : p->q_dim;
        p->kv_dim = ls.kv_dim > p->kv_dim ? ls.kv_dim : p->kv_dim;
        p->ffn = ls.ffn_hidden > p->ffn ? ls.ffn_hidden : p->ffn;
        p->ffn = ls.shared_ffn > p->ffn ? ls.shared_ffn : p->ffn;
    }
}

/* The [T, T] probability slots: one per head computed at once. */
static bool plan_prob_slots(const lp_arch *a, bool want_probs, int n_threads, lp_fw_plan *p,
                            uint64_t *total)
{
    uint64_t t = (uint64_t)p->T, tt, slots;
    p->n_prob_slots = want_probs ? (n_threads < a->n_heads ? n_threads : a->n_heads) : 0;
    p->slot_stride = 0;
    if (p->n_prob_slots == 0)
        return true;
    if (!lp_mul_u64(t, (uint64_t)p->n_k, &tt) || tt >= ((uint64_t)1 << 40))
        return false;
    tt = (tt + 15) / 16 * 16;
    p->slot_stride = (int64_t)tt;
    return lp_mul_u64((uint64_t)p->n_prob_slots, tt, &slots) && plan_add(total, slots, 4);
}

/* MLA's per-key scratch (n_k rows: with a cache, every cached position's latent is expanded):
 * q_a's output, kv_a's, the normed latent, kv_b's, the assembled keys, one split head's part. */
static uint64_t mla_width(const lp_arch *a)
{
    int64_t part = a->qk_nope_head_dim > a->v_head_dim ? a->qk_nope_head_dim : a->v_head_dim;
    return (uint64_t)(a->q_lora_rank + 2 * a->kv_lora_rank + a->qk_rope_head_dim +
                      a->n_heads * (a->qk_nope_head_dim + a->v_head_dim + a->head_dim) + part);
}

/* MLA's key rows: every cached position with a cache, else the stacked rows. */
static int64_t mla_rows(const lp_fw_plan *p) { return p->n_k > p->rows ? p->n_k : p->rows; }

/* The buffers only some blocks need: the parallel FFN's output, OPT's projected embeddings,
 * the MoE routing. */
static bool plan_block_extras(const lp_arch *a, const lp_fw_plan *p, uint64_t *total)
{
    lp_block_desc b = lp_block_of(a);
    uint64_t t = (uint64_t)p->rows, H = (uint64_t)a->hidden_size, fr = (uint64_t)p->ffn_rows;
    uint64_t E = (uint64_t)(a->n_experts > 0 ? a->n_experts : 0);
    uint64_t K = (uint64_t)(a->n_experts_per_tok > 0 ? a->n_experts_per_tok : 0);
    bool ok = true;
    if (b.residual == LP_RESIDUAL_PARALLEL)
        ok = plan_add(total, t, H * 4);
    if (ok && a->embed_proj_dim > 0)
        ok = plan_add(total, t, (uint64_t)a->embed_proj_dim * 4);
    if (ok && E > 0)
        ok = plan_add(total, t, E * 4) && plan_add(total, t, K * 4) && plan_add(total, t, K * 4) &&
             plan_add(total, t, 8) && plan_add(total, fr * 2, H * 4) && plan_add(total, 2, E * 4);
    if (ok && a->mla)
        ok = plan_add(total, (uint64_t)mla_rows(p), mla_width(a) * 4);
    return ok;
}

bool lp_fw_make_plan(const lp_arch *a, int64_t T, bool want_probs, int n_threads, lp_fw_plan *p)
{
    return lp_fw_make_plan_kv(a, 1, T, T, false, want_probs, n_threads, p);
}

bool lp_fw_make_plan_kv(const lp_arch *a, int64_t n_seqs, int64_t T, int64_t n_k, bool gather,
                        bool want_probs, int n_threads, lp_fw_plan *p)
{
    uint64_t rows_u, H = (uint64_t)a->hidden_size, total = 0;
    if (!lp_mul_u64((uint64_t)n_seqs, (uint64_t)T, &rows_u) || rows_u >= ((uint64_t)1 << 40))
        return false;
    uint64_t t = rows_u;
    p->n_seqs = n_seqs;
    p->T = T;
    p->rows = (int64_t)rows_u;
    p->n_k = n_k;
    p->kv_gather = gather;
    widest_layer(a, p);
    uint64_t qkv_w = (uint64_t)(p->q_dim + 2 * p->kv_dim), ffn = (uint64_t)p->ffn;
    int64_t rows = (int64_t)(LOGITS_CHUNK_FLOATS / (uint64_t)a->vocab_size);
    if (rows < 1)
        rows = 1;
    p->logits_rows = rows < p->rows ? rows : p->rows;
    p->ffn_rows = p->rows < FFN_CHUNK_ROWS ? p->rows : FFN_CHUNK_ROWS;
    uint64_t fr = (uint64_t)p->ffn_rows;
    bool ok = plan_add(&total, t * 3, H * 4) && plan_add(&total, t, qkv_w * 4) &&
              plan_add(&total, 1, qkv_w * 4) &&
              plan_add(&total, t, (uint64_t)p->q_dim * 4) && plan_add(&total, fr, 2 * ffn * 4) &&
              plan_add(&total, fr, ffn * 4) &&
              plan_add(&total, (uint64_t)a->n_heads * (uint64_t)T, sizeof(lp_attn_row_stats)) &&
              plan_add(&total, (uint64_t)p->logits_rows, (uint64_t)a->vocab_size * 4) &&
              plan_add(&total, 2 * (uint64_t)(a->rope_dim / 2 + 1), 4) && plan_add(&total, t, 8);
    ok = ok && plan_prob_slots(a, want_probs, n_threads, p, &total) &&
         plan_block_extras(a, p, &total);
    if (ok && gather)
        ok = plan_add(&total, 2 * (uint64_t)n_k, (uint64_t)p->kv_dim * 4);
    p->total = total;
    return ok && total < ((uint64_t)1 << 46);
}

static void *take(lp_arena *arena, uint64_t n, uint64_t size)
{
    uint64_t bytes = n * size; /* planned with overflow checks in lp_fw_make_plan */
    return lp_arena_alloc(arena, (size_t)(bytes > 0 ? bytes : 1));
}

static bool carve_extras(lp_arena *arena, const lp_arch *a, const lp_fw_plan *p, lp_fw_scratch *s)
{
    uint64_t T = (uint64_t)p->rows, H = (uint64_t)a->hidden_size, FR = (uint64_t)p->ffn_rows;
    bool ok = true;
    if (lp_block_of(a).residual == LP_RESIDUAL_PARALLEL)
        ok = (s->ffn_out = take(arena, T * H, 4)) != NULL;
    if (ok && a->embed_proj_dim > 0)
        ok = (s->embed = take(arena, T * (uint64_t)a->embed_proj_dim, 4)) != NULL;
    if (ok && a->mla)
        ok = (s->mla = take(arena, (uint64_t)mla_rows(p) * mla_width(a), 4)) != NULL;
    if (!ok || a->n_experts <= 0)
        return ok;
    uint64_t E = (uint64_t)a->n_experts, K = (uint64_t)a->n_experts_per_tok;
    s->router = take(arena, T * E, 4);
    s->chosen = take(arena, T * K, 4);
    s->chosen_w = take(arena, T * K, 4);
    s->tok_list = take(arena, T, 8);
    s->gather = take(arena, FR * H, 4);
    s->expert_out = take(arena, FR * H, 4);
    s->router_sel = take(arena, 2 * E, 4);
    return s->router && s->chosen && s->chosen_w && s->tok_list && s->gather && s->expert_out &&
           s->router_sel;
}

bool lp_fw_carve(lp_arena *arena, const lp_arch *a, const lp_fw_plan *p, lp_fw_scratch *s)
{
    uint64_t T = (uint64_t)p->rows, H = (uint64_t)a->hidden_size, FR = (uint64_t)p->ffn_rows;
    uint64_t qkv_w = (uint64_t)(p->q_dim + 2 * p->kv_dim);
    memset(s, 0, sizeof *s);
    s->x = take(arena, T * H, 4);
    s->xn = take(arena, T * H, 4);
    s->tmp = take(arena, T * H, 4);
    s->qkv = take(arena, T * qkv_w, 4);
    s->qkv_row = take(arena, qkv_w, 4);
    s->attn = take(arena, T * (uint64_t)p->q_dim, 4);
    s->gate = take(arena, FR * 2 * (uint64_t)p->ffn, 4);
    s->up = take(arena, FR * (uint64_t)p->ffn, 4);
    s->row_stats = take(arena, (uint64_t)a->n_heads * (uint64_t)p->T, sizeof(lp_attn_row_stats));
    s->logits = take(arena, (uint64_t)p->logits_rows * (uint64_t)a->vocab_size, 4);
    s->inv_freq = take(arena, (uint64_t)(a->rope_dim / 2 + 1), 4);
    s->inv_freq_local = take(arena, (uint64_t)(a->rope_dim / 2 + 1), 4);
    s->positions = take(arena, T, 8);
    bool ok = s->x && s->xn && s->tmp && s->qkv && s->qkv_row && s->attn && s->gate && s->up &&
              s->row_stats && s->logits && s->inv_freq && s->inv_freq_local && s->positions;
    if (p->n_prob_slots > 0) {
        s->probs = take(arena, (uint64_t)p->n_prob_slots * (uint64_t)p->slot_stride, 4);
        ok = ok && s->probs;
    }
    if (ok && p->kv_gather) {
        s->kv_k = take(arena, (uint64_t)p->n_k * (uint64_t)p->kv_dim, 4);
        s->kv_v = take(arena, (uint64_t)p->n_k * (uint64_t)p->kv_dim, 4);
        ok = s->kv_k && s->kv_v;
    }
    return ok && carve_extras(arena, a, p, s);
}

/* ---- the observer ---- */

bool lp_fw_wants(const lp_fw_pass *p, lp_site_kind kind, int layer, int head)
{
    if (!p->obs || !p->obs->want || !p->obs->observe)
        return false;
    lp_site site = {kind, p->b, layer, head};
    return p->obs->want(p->obs->ctx, &site);
}

lp_status lp_fw_emit(const lp_fw_pass *p, lp_site_kind kind, int layer, int head,
                     const lp_view *view)
{
    lp_site site = {kind, p->b, layer, head};
    lp_status st = p->obs->observe(p->obs->ctx, &site, view, p->err);
    if (st != LP_OK && p->err && p->err->code == LP_OK)
        lp_error_set(p->err, st, "observer failed at %d/%d", layer, head);
    return st;
}

lp_status lp_fw_emit_matrix(const lp_fw_pass *p, lp_site_kind kind, int layer, const float *data,
                            int64_t rows, int64_t cols, int64_t stride)
{
    if (!lp_fw_wants(p, kind, layer, -1))
        return LP_OK;
    lp_view v = {data, rows, cols, stride, p->pos0, NULL, NULL};
    return lp_fw_emit(p, kind, layer, -1, &v);
}

lp_status lp_fw_edit(const lp_fw_pass *p, lp_site_kind kind, int layer, int head, float *data,
                     int64_t rows, int64_t cols, int64_t stride)
{
    const lp_intervention *iv = p->opts->intervention;
    lp_site site = {kind, p->b, layer, head};
    if (!iv || !iv->want || !iv->edit || !iv->want(iv->ctx, &site))
        return LP_OK;
    lp_status st = iv->edit(iv->ctx, &site, data, rows, cols, stride, p->err);
    if (st != LP_OK && p->err && p->err->code == LP_OK)
        lp_error_set(p->err, st, "intervention failed at %d/%d", layer, head);
    return st;
}

lp_status lp_fw_hook_matrix(const lp_fw_pass *p, lp_site_kind kind, int layer, float *data,
                            int64_t rows, int64_t cols, int64_t stride)
{
    lp_status st = lp_fw_edit(p, kind, layer, -1, data, rows, cols, stride);
    return st != LP_OK ? st : lp_fw_emit_matrix(p, kind, layer, data, rows, cols, stride);
}

lp_status lp_fw_hook_seqs(lp_fw_pass *p, lp_site_kind kind, int layer, float *data, int64_t cols,
                          int64_t stride)
{
    lp_status st = LP_OK;
    for (p->b = 0; p->b < p->n_seqs && st == LP_OK; p->b++)
        st = lp_fw_hook_matrix(p, kind, layer, data + p->b * p->T * stride, p->T, cols, stride);
    p->b = 0;
    return st;
}

lp_status lp_fw_emit_seqs(lp_fw_pass *p, lp_site_kind kind, int layer, const float *data,
                          int64_t cols, int64_t stride)
{
    lp_status st = LP_OK;
    for (p->b = 0; p->b < p->n_seqs && st == LP_OK; p->b++)
        st = lp_fw_emit_matrix(p, kind, layer, data + p->b * p->T * stride, p->T, cols, stride);
    p->b = 0;
    return st;
}

/* ---- norms and linear layers ---- */

void lp_fw_norm_rows(const lp_arch *a, const float *weight, const float *bias, float *dst,
                     const float *src, int64_t rows, int64_t n)
{
    for (int64_t t = 0; t < rows; t++) {
        if (a->norm_kind == LP_NORM_LAYER)
            lp_layernorm(dst + t * n, src + t * n, weight, bias, n, (float)a->norm_eps);
        else
            lp_rmsnorm(dst + t * n, src + t * n, weight, n, (float)a->norm_eps,
                       a->norm_weight_plus_one);
    }
}

void lp_fw_norm(const lp_fw_pass *p, const lp_norm_weights *nw, float *dst, const float *src,
                int64_t rows)
{
    const lp_arch *a = &p->m->arch;
    lp_fw_norm_rows(a, nw->weight, nw->bias, dst, src, rows, a->hidden_size);
}

const float *lp_fw_block_input(lp_fw_pass *p, const lp_norm_weights *nw)
{
    if (!p->m->block.input_norms || !nw->present)
        return p->s.x;
    lp_fw_norm(p, nw, p->s.xn, p->s.x, p->rows);
    return p->s.xn;
}

/* One-row products with int8 activations when asked (lp_forward_opts.int8_activations). */
static bool int8_matvec(const lp_fw_pass *p, int64_t rows, const lp_matrix *w)
{
    return rows == 1 && p->opts->int8_activations && !w->transposed &&
           lp_matvec_supported(w->dtype);
}

lp_status lp_fw_linear(const lp_fw_pass *p, const float *x, int64_t rows, const lp_matrix *w,
                       const float *bias, float *y)
{
    if (int8_matvec(p, rows, w))
        return lp_matvec_int8(x, w, bias, y, p->pool, p->err);
    return lp_linear(x, rows, w, bias, y, p->pool, p->err);
}

/* A batch's few last-position rows against one matrix (the LM head, OPT's project_out) in one
 * pool run (one row goes to lp_matvec_group instead): each thread walks its rows a cache-sized
 * slice at a time through every input, so the weights are read from memory once however many
 * inputs there are. Each result is lp_matvec's dot product of one weight row and one input, so the results
 * are those of separate single-row calls bit for bit. */
enum { GROUP_MAX_TASKS = 64, GROUP_SLICE_BYTES = 128 << 10 };

typedef struct linear_group {
    const float *x; /* [n_x, ldx] */
    int64_t n_x, ldx;
    const lp_fw_linear_part *parts; /* part i's y: [n_x, w->rows] */
    int n_parts;
    int64_t total_rows, n_tasks;
    bool int8_x; /* lp_matvec_int8's rows */
    lp_status status[GROUP_MAX_TASKS];
    lp_error err[GROUP_MAX_TASKS];
} linear_group;

/* Rows [lo, hi) of one part against every input, slice by slice. */
static lp_status group_part_rows(const linear_group *g, const lp_fw_linear_part *part, int64_t lo,
                                 int64_t hi, lp_error *err)
{
    const lp_matrix *w = part->w;
    int64_t step = hi - lo;
    if (g->n_x > 1) {
        step = (int64_t)(GROUP_SLICE_BYTES / (w->row_bytes > 0 ? w->row_bytes : 1));
        step = step < 1 ? 1 : step;
    }
    for (int64_t s0 = lo; s0 < hi; s0 += step) {
        lp_matrix slice = *w;
        slice.data = (const uint8_t *)w->data + (uint64_t)s0 * w->row_bytes;
        slice.rows = hi - s0 < step ? hi - s0 : step;
        for (int64_t i = 0; i < g->n_x; i++) {
            lp_status st = (g->int8_x ? lp_matvec_int8 : lp_matvec)(
                g->x + i * g->ldx, &slice, part->bias ? part->bias + s0 : NULL,
                part->y + i * w->rows + s0, NULL, err);
            if (st != LP_OK)
                return st;
        }
    }
    return LP_OK;
}

static void group_task(void *ctx, int64_t task)
{
    linear_group *g = ctx;
    int64_t r0 = g->total_rows * task / g->n_tasks, r1 = g->total_rows * (task + 1) / g->n_tasks;
    g->status[task] = LP_OK;
    int64_t base = 0;
    for (int i = 0; i < g->n_parts; base += g->parts[i].w->rows, i++) {
        const lp_fw_linear_part *part = &g->parts[i];
        int64_t lo = r0 - base, hi = r1 - base;
        if (hi <= 0 || lo >= part->w->rows)
            continue;
        lo = lo < 0 ? 0 : lo;
        hi = hi > part->w->rows ? part->w->rows : hi;
        lp_status st = group_part_rows(g, part, lo, hi, &g->err[task]);
        if (st != LP_OK) {
            g->status[task] = st;
            return;
        }
    }
}

/* Whether every part can go through lp_matvec. */
static bool matvec_parts(const lp_fw_linear_part *parts, int n_parts)
{
    for (int i = 0; i < n_parts; i++)
        if (parts[i].w->transposed || !lp_matvec_supported(parts[i].w->dtype) ||
            parts[i].w->rows <= 0)
            return false;
    return true;
}

static lp_status run_group(const lp_fw_pass *p, const float *x, int64_t n_x,
                           const lp_fw_linear_part *parts, int n_parts)
{
    int threads = p->pool ? lp_pool_threads(p->pool) : 1;
    linear_group *g = malloc(sizeof *g);
    if (!g)
        return lp_error_set(p->err, LP_ERR_NOMEM, "forward: out of memory for a matvec group");
    int64_t total = 0;
    for (int i = 0; i < n_parts; i++)
        total += parts[i].w->rows;
    g->x = x;
    g->n_x = n_x;
    g->ldx = parts[0].w->cols;
    g->parts = parts;
    g->n_parts = n_parts;
    g->total_rows = total;
    g->int8_x = p->opts->int8_activations;
    g->n_tasks = threads < GROUP_MAX_TASKS ? threads : GROUP_MAX_TASKS;
    g->n_tasks = g->n_tasks < total ? g->n_tasks : total;
    lp_fw_pool_or_serial(p->pool, g->n_tasks, group_task, g);
    lp_status st = LP_OK;
    for (int64_t t = 0; t < g->n_tasks && st == LP_OK; t++)
        if ((st = g->status[t]) != LP_OK && p->err)
            *p->err = g->err[t];
    free(g);
    return st;
}

/* One row (a decode step): lp_matvec_group, one pool run over all the matrices with x prepared
 * once, each y what lp_fw_linear gives it alone. */
lp_status lp_fw_linear_group(const lp_fw_pass *p, const float *x, int64_t rows,
                             const lp_fw_linear_part *parts, int n_parts)
{
    if (rows == 1 && n_parts <= LP_MATVEC_MAX_PARTS && matvec_parts(parts, n_parts)) {
        lp_matvec_part mparts[LP_MATVEC_MAX_PARTS];
        for (int i = 0; i < n_parts; i++)
            mparts[i] = (lp_matvec_part){parts[i].w, parts[i].bias, parts[i].y};
        return lp_matvec_group(x, mparts, n_parts, p->opts->int8_activations, p->pool, p->err);
    }
    lp_status st = LP_OK;
    for (int i = 0; i < n_parts && st == LP_OK; i++)
        st = lp_fw_linear(p, x, rows, parts[i].w, parts[i].bias, parts[i].y);
    return st;
}

lp_status lp_fw_linear_rows(const lp_fw_pass *p, const float *x, int64_t rows, const lp_matrix *w,
                            const float *bias, float *y)
{
    lp_fw_linear_part part = {w, bias, y};
    if (rows > 1 && rows <= LP_FW_MATVEC_ROWS && matvec_parts(&part, 1))
        return run_group(p, x, rows, &part, 1);
    return lp_fw_linear(p, x, rows, w, bias, y);
}

void lp_fw_pool_or_serial(lp_pool *pool, int64_t n, void (*fn)(void *, int64_t), void *ctx)
{
    if (pool && n > 1) {
        lp_pool_run(pool, n, fn, ctx);
    } else {
        for (int64_t i = 0; i < n; i++)
            fn(ctx, i);
    }
}
