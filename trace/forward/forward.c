/* The instrumented forward pass: one prefill per sequence, observers asked at every named site. */
#include "trace/trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/checked.h"
#include "trace/forward/model_internal.h"

/* Logits are computed in chunks of rows so a 150k vocabulary never needs [T, vocab] at once. */
#define LOGITS_CHUNK_FLOATS (4u << 20)
/* The FFN runs over at most this many rows at a time, so its [rows, ffn] scratch stays small for
 * long prompts (GEMMs of 256 rows are already at full speed). */
#define FFN_CHUNK_ROWS 256
/* Longest sequence one call accepts; the [T, T] probability slots bound it long before this. */
#define MAX_TOKENS (1 << 20)

void lp_forward_opts_init(lp_forward_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->mask_fault = LP_MASK_FAULT_NONE;
    opts->sliding_window = true;
    opts->local_window = 8;
}

/* Scratch layout for one sequence of T tokens; every buffer 64-byte aligned in one arena. */
typedef struct scratch_plan {
    int64_t T;
    int64_t q_dim, kv_dim, ffn; /* the widest layer's (lp_layer_shape_of) */
    int64_t n_prob_slots; /* heads computed at once, each with its own [T, T] slot */
    int64_t slot_stride;  /* floats between slots: T*T rounded up to a cache line, so threads
                             writing neighbouring slots never share one */
    int64_t logits_rows;  /* rows per logits chunk */
    int64_t ffn_rows;     /* rows per FFN chunk */
    uint64_t total;
} scratch_plan;

typedef struct scratch {
    float *x;        /* [T, hidden] residual stream */
    float *xn;       /* [T, hidden] normed input of a sublayer */
    float *tmp;      /* [T, hidden] sublayer output before the residual add */
    float *qkv;      /* [T, q_dim + 2 kv_dim] (q | k | v per row) */
    float *attn;     /* [T, q_dim] head outputs, head h at columns h*head_dim */
    float *gate;     /* [ffn_rows, 2 ffn] (fused gate|up needs both halves) */
    float *up;       /* [ffn_rows, ffn] */
    float *probs;    /* [n_prob_slots, slot_stride >= T*T] or NULL */
    lp_attn_row_stats *row_stats; /* [n_heads, T] */
    float *logits;   /* [logits_rows, vocab] */
    float *inv_freq; /* [rope_dim / 2] */
    float *inv_freq_local;
    int64_t *positions; /* [T] */
    /* MoE */
    float *router;      /* [T, n_experts] softmax over all experts */
    int32_t *chosen;    /* [T, top_k] */
    float *chosen_w;    /* [T, top_k] */
    int64_t *tok_list;  /* [T] tokens routed to one expert */
    float *gather;      /* [ffn_rows, hidden] */
    float *expert_out;  /* [ffn_rows, hidden] */
} scratch;

static uint64_t round64(uint64_t n) { return (n + 63) / 64 * 64; }

/* Adds n elements of `size` bytes to *total; false on overflow. */
static bool plan_add(uint64_t *total, uint64_t n, uint64_t size)
{
    uint64_t bytes;
    if (!lp_mul_u64(n, size, &bytes))
        return false;
    return lp_add_u64(*total, round64(bytes) + 64, total);
}

static void widest_layer(const lp_arch *a, scratch_plan *p)
{
    p->q_dim = p->kv_dim = p->ffn = 0;
    for (int l = 0; l < a->n_layers; l++) {
        lp_layer_shape ls = lp_layer_shape_of(a, l);
        p->q_dim = ls.q_dim > p->q_dim ? ls.q_dim : p->q_dim;
        p->kv_dim = ls.kv_dim > p->kv_dim ? ls.kv_dim : p->kv_dim;
        p->ffn = ls.ffn_hidden > p->ffn ? ls.ffn_hidden : p->ffn;
    }
}

/* The [T, T] probability slots: one per head computed at once. */
static bool plan_prob_slots(const lp_arch *a, bool want_probs, int n_threads, scratch_plan *p,
                            uint64_t *total)
{
    uint64_t t = (uint64_t)p->T, tt, slots;
    p->n_prob_slots = want_probs ? (n_threads < a->n_heads ? n_threads : a->n_heads) : 0;
    p->slot_stride = 0;
    if (p->n_prob_slots == 0)
        return true;
    if (!lp_mul_u64(t, t, &tt) || tt >= ((uint64_t)1 << 40))
        return false;
    tt = (tt + 15) / 16 * 16;
    p->slot_stride = (int64_t)tt;
    return lp_mul_u64((uint64_t)p->n_prob_slots, tt, &slots) && plan_add(total, slots, 4);
}

static bool make_plan(const lp_arch *a, int64_t T, bool want_probs, int n_threads,
                      scratch_plan *p)
{
    uint64_t t = (uint64_t)T, H = (uint64_t)a->hidden_size, total = 0;
    uint64_t E = (uint64_t)(a->n_experts > 0 ? a->n_experts : 0);
    uint64_t K = (uint64_t)(a->n_experts_per_tok > 0 ? a->n_experts_per_tok : 0);
    p->T = T;
    widest_layer(a, p);
    uint64_t qkv_w = (uint64_t)(p->q_dim + 2 * p->kv_dim), ffn = (uint64_t)p->ffn;
    int64_t rows = (int64_t)(LOGITS_CHUNK_FLOATS / (uint64_t)a->vocab_size);
    if (rows < 1)
        rows = 1;
    p->logits_rows = rows < T ? rows : T;
    p->ffn_rows = T < FFN_CHUNK_ROWS ? T : FFN_CHUNK_ROWS;
    uint64_t fr = (uint64_t)p->ffn_rows;
    bool ok = plan_add(&total, t * 3, H * 4) && plan_add(&total, t, qkv_w * 4) &&
              plan_add(&total, t, (uint64_t)p->q_dim * 4) && plan_add(&total, fr, 2 * ffn * 4) &&
              plan_add(&total, fr, ffn * 4) &&
              plan_add(&total, (uint64_t)a->n_heads * t, sizeof(lp_attn_row_stats)) &&
              plan_add(&total, (uint64_t)p->logits_rows, (uint64_t)a->vocab_size * 4) &&
              plan_add(&total, 2 * (uint64_t)(a->rope_dim / 2 + 1), 4) && plan_add(&total, t, 8);
    ok = ok && plan_prob_slots(a, want_probs, n_threads, p, &total);
    if (ok && E > 0)
        ok = plan_add(&total, t, E * 4) && plan_add(&total, t, K * 4) && plan_add(&total, t, K * 4) &&
             plan_add(&total, t, 8) && plan_add(&total, fr * 2, H * 4);
    p->total = total;
    return ok && total < ((uint64_t)1 << 46);
}

uint64_t lp_forward_scratch_bytes(const lp_arch *arch, int64_t n_tokens, int n_threads,
                                  bool attention_maps)
{
    scratch_plan p;
    /* The dimensions make_plan divides by or loops over must be there. */
    if (!arch || n_tokens <= 0 || n_tokens > MAX_TOKENS || n_threads < 1 || arch->n_layers <= 0 ||
        arch->n_layers > LP_MAX_LAYERS || arch->n_heads <= 0 || arch->head_dim <= 0 ||
        arch->hidden_size <= 0 || arch->vocab_size <= 0)
        return 0;
    if (!make_plan(arch, n_tokens, attention_maps, n_threads, &p))
        return 0;
    return p.total;
}

static void *take(lp_arena *arena, uint64_t n, uint64_t size)
{
    uint64_t bytes = n * size; /* planned with overflow checks in make_plan */
    return lp_arena_alloc(arena, (size_t)(bytes > 0 ? bytes : 1));
}

static bool carve_moe(lp_arena *arena, const lp_arch *a, const scratch_plan *p, scratch *s)
{
    uint64_t T = (uint64_t)p->T, H = (uint64_t)a->hidden_size, FR = (uint64_t)p->ffn_rows;
    uint64_t E = (uint64_t)a->n_experts, K = (uint64_t)a->n_experts_per_tok;
    s->router = take(arena, T * E, 4);
    s->chosen = take(arena, T * K, 4);
    s->chosen_w = take(arena, T * K, 4);
    s->tok_list = take(arena, T, 8);
    s->gather = take(arena, FR * H, 4);
    s->expert_out = take(arena, FR * H, 4);
    return s->router && s->chosen && s->chosen_w && s->tok_list && s->gather && s->expert_out;
}

static bool carve(lp_arena *arena, const lp_arch *a, const scratch_plan *p, scratch *s)
{
    uint64_t T = (uint64_t)p->T, H = (uint64_t)a->hidden_size, FR = (uint64_t)p->ffn_rows;
    memset(s, 0, sizeof *s);
    s->x = take(arena, T * H, 4);
    s->xn = take(arena, T * H, 4);
    s->tmp = take(arena, T * H, 4);
    s->qkv = take(arena, T * (uint64_t)(p->q_dim + 2 * p->kv_dim), 4);
    s->attn = take(arena, T * (uint64_t)p->q_dim, 4);
    s->gate = take(arena, FR * 2 * (uint64_t)p->ffn, 4);
    s->up = take(arena, FR * (uint64_t)p->ffn, 4);
    s->row_stats = take(arena, (uint64_t)a->n_heads * T, sizeof(lp_attn_row_stats));
    s->logits = take(arena, (uint64_t)p->logits_rows * (uint64_t)a->vocab_size, 4);
    s->inv_freq = take(arena, (uint64_t)(a->rope_dim / 2 + 1), 4);
    s->inv_freq_local = take(arena, (uint64_t)(a->rope_dim / 2 + 1), 4);
    s->positions = take(arena, T, 8);
    bool ok = s->x && s->xn && s->tmp && s->qkv && s->attn && s->gate && s->up && s->row_stats &&
              s->logits && s->inv_freq && s->inv_freq_local && s->positions;
    if (p->n_prob_slots > 0) {
        s->probs = take(arena, (uint64_t)p->n_prob_slots * (uint64_t)p->slot_stride, 4);
        ok = ok && s->probs;
    }
    return ok && (a->n_experts <= 0 || carve_moe(arena, a, p, s));
}

/* The state of one call, shared by the helpers below. */
typedef struct pass {
    const lp_model *m;
    const lp_forward_opts *opts;
    const lp_observer *obs;
    lp_pool *pool;
    scratch s;
    scratch_plan plan;
    int64_t b;   /* batch item */
    int64_t T;
    lp_mask_spec mask;
    lp_error *err;
} pass;

static bool wants(const pass *p, lp_site_kind kind, int layer, int head)
{
    if (!p->obs || !p->obs->want || !p->obs->observe)
        return false;
    lp_site site = {kind, p->b, layer, head};
    return p->obs->want(p->obs->ctx, &site);
}

static lp_status emit(const pass *p, lp_site_kind kind, int layer, int head, const lp_view *view)
{
    lp_site site = {kind, p->b, layer, head};
    lp_status st = p->obs->observe(p->obs->ctx, &site, view, p->err);
    if (st != LP_OK && p->err && p->err->code == LP_OK)
        lp_error_set(p->err, st, "observer failed at %d/%d", layer, head);
    return st;
}

static lp_status emit_matrix(const pass *p, lp_site_kind kind, int layer, const float *data,
                             int64_t rows, int64_t cols, int64_t stride)
{
    if (!wants(p, kind, layer, -1))
        return LP_OK;
    lp_view v = {data, rows, cols, stride, 0, NULL, NULL};
    return emit(p, kind, layer, -1, &v);
}

static void apply_norm(const pass *p, const lp_norm_weights *nw, float *dst, const float *src,
                       int64_t rows)
{
    const lp_arch *a = &p->m->arch;
    int64_t H = a->hidden_size;
    for (int64_t t = 0; t < rows; t++) {
        if (a->norm_kind == LP_NORM_LAYER)
            lp_layernorm(dst + t * H, src + t * H, nw->weight, nw->bias, H, (float)a->norm_eps);
        else
            lp_rmsnorm(dst + t * H, src + t * H, nw->weight, H, (float)a->norm_eps,
                       a->norm_weight_plus_one);
    }
}

static lp_status linear(const pass *p, const float *x, int64_t rows, const lp_matrix *w,
                        const float *bias, float *y)
{
    return lp_linear(x, rows, w, bias, y, p->pool, p->err);
}

/* A sublayer's output in s->tmp: its post norm (Gemma 2/3), the observer's site, then the
 * residual add. */
static lp_status finish_sublayer(pass *p, int l, const lp_norm_weights *post, lp_site_kind site)
{
    int64_t T = p->T, H = p->m->arch.hidden_size;
    scratch *s = &p->s;
    if (post->present)
        apply_norm(p, post, s->tmp, s->tmp, T);
    lp_status st = emit_matrix(p, site, l, s->tmp, T, H, H);
    if (st == LP_OK)
        lp_add(s->x, s->tmp, T * H);
    return st;
}

/* ---- attention ---- */

typedef struct head_task {
    const pass *p;
    const lp_layer_weights *L;
    int64_t q_stride, kv_stride;
    const float *q, *k, *v;
    int head0; /* first head of this group; task i runs head head0 + i into probability slot i */
    bool with_probs;
} head_task;

static void run_head(void *ctx, int64_t task)
{
    const head_task *h = ctx;
    const pass *p = h->p;
    const lp_arch *a = &p->m->arch;
    int head = h->head0 + (int)task;
    int64_t group = a->n_heads / h->L->n_kv_heads; /* query heads per kv head */
    int64_t kv_head = head / group;
    int64_t hd = a->head_dim, T = p->T;
    /* GQA: query head `head` reads kv head head / group; q, k, v are rows of the projections */
    lp_attn_args args = {
        .q = h->q + head * hd, .k = h->k + kv_head * hd, .v = h->v + kv_head * hd,
        .out = p->s.attn + head * hd, .n_q = T, .n_k = T, .head_dim = hd, .v_dim = hd,
        .q_stride = h->q_stride, .k_stride = h->kv_stride, .v_stride = h->kv_stride,
        .out_stride = h->L->q_dim,
        .scale = a->query_scale > 0 ? (float)a->query_scale : (float)(1.0 / sqrt((double)hd)),
        .softcap = (float)a->attn_logit_softcap, .mask = &p->mask, .batch = p->b,
        .probs = h->with_probs ? p->s.probs + task * p->plan.slot_stride : NULL,
        .row_stats = p->s.row_stats + (int64_t)head * T, .local_window = p->opts->local_window,
    };
    lp_attention(&args);
}

static void pool_or_serial(lp_pool *pool, int64_t n, void (*fn)(void *, int64_t), void *ctx)
{
    if (pool && n > 1) {
        lp_pool_run(pool, n, fn, ctx);
    } else {
        for (int64_t i = 0; i < n; i++)
            fn(ctx, i);
    }
}

/* The layer's q, k and v rows, views into s->qkv: fused projections interleave them per row,
 * separate ones fill contiguous [T, q_dim], [T, kv_dim], [T, kv_dim] blocks. */
typedef struct qkv_views {
    float *q, *k, *v;
    int64_t q_stride, kv_stride;
} qkv_views;

static lp_status project_qkv(pass *p, const lp_layer_weights *L, qkv_views *x)
{
    scratch *s = &p->s;
    int64_t T = p->T;
    lp_status st;
    x->q = s->qkv;
    if (L->fused_qkv) {
        x->q_stride = x->kv_stride = L->q_dim + 2 * L->kv_dim;
        x->k = x->q + L->q_dim;
        x->v = x->k + L->kv_dim;
        return linear(p, s->xn, T, &L->qkv, L->qkv_bias, s->qkv);
    }
    x->q_stride = L->q_dim;
    x->kv_stride = L->kv_dim;
    x->k = x->q + T * L->q_dim;
    x->v = x->k + T * L->kv_dim;
    if ((st = linear(p, s->xn, T, &L->q, L->q_bias, x->q)) ||
        (st = linear(p, s->xn, T, &L->k, L->k_bias, x->k)))
        return st;
    return linear(p, s->xn, T, &L->v, L->v_bias, x->v);
}

/* Per-head q/k norms (Qwen3, Gemma 3), then RoPE, position by position. Sliding layers of a
 * model with a local theta (Gemma 3) rotate with it and without the global attention factor. */
static lp_status rotate_qk(pass *p, const lp_layer_weights *L, const qkv_views *x)
{
    const lp_arch *a = &p->m->arch;
    scratch *s = &p->s;
    int64_t hd = a->head_dim;
    bool local_rope = L->window > 0 && a->rope_local_theta > 0;
    const float *inv_freq = local_rope ? s->inv_freq_local : s->inv_freq;
    float attn_factor = 1.0f, unused;
    lp_status st;
    if (a->pos_kind == LP_POS_ROPE) {
        if ((st = lp_model_rope_freqs(p->m, p->T, false, s->inv_freq, &attn_factor, p->err)))
            return st;
        if (local_rope && (st = lp_model_rope_freqs(p->m, p->T, true, s->inv_freq_local, &unused,
                                                    p->err)))
            return st;
        if (local_rope)
            attn_factor = 1.0f;
    }
    bool adjacent = a->rope_layout == LP_ROPE_ADJACENT;
    float eps = (float)a->norm_eps;
    for (int64_t t = 0; t < p->T; t++) {
        float *qt = x->q + t * x->q_stride, *kt = x->k + t * x->kv_stride;
        for (int64_t h = 0; L->q_norm && h < a->n_heads; h++)
            lp_rmsnorm(qt + h * hd, qt + h * hd, L->q_norm, hd, eps, a->norm_weight_plus_one);
        for (int64_t h = 0; L->k_norm && h < L->n_kv_heads; h++)
            lp_rmsnorm(kt + h * hd, kt + h * hd, L->k_norm, hd, eps, a->norm_weight_plus_one);
        if (a->pos_kind == LP_POS_ROPE) {
            int64_t pos = s->positions[t];
            lp_rope(qt, a->n_heads, hd, a->rope_dim, pos, inv_freq, attn_factor, adjacent);
            lp_rope(kt, L->n_kv_heads, hd, a->rope_dim, pos, inv_freq, attn_factor, adjacent);
        }
    }
    return LP_OK;
}

/* Hand the maps and statistics of heads h0 .. h0+n-1 (just computed, probabilities in slots
 * 0 .. n-1 when with_probs) to the observer. */
static lp_status emit_head_maps(pass *p, int l, int h0, int64_t n, bool with_probs)
{
    scratch *s = &p->s;
    int64_t T = p->T;
    lp_status st;
    for (int64_t i = 0; i < n; i++) {
        int head = h0 + (int)i;
        const lp_attn_row_stats *rs = s->row_stats + (int64_t)head * T;
        if (with_probs && wants(p, LP_SITE_ATTN_PROBS, l, head)) {
            lp_view view = {s->probs + i * p->plan.slot_stride, T, T, T, 0, rs, NULL};
            if ((st = emit(p, LP_SITE_ATTN_PROBS, l, head, &view)))
                return st;
        }
        if (wants(p, LP_SITE_ATTN_STATS, l, head)) {
            lp_view view = {NULL, T, 0, 0, 0, rs, NULL};
            if ((st = emit(p, LP_SITE_ATTN_STATS, l, head, &view)))
                return st;
        }
    }
    return LP_OK;
}

/* Every head, in groups of n_prob_slots when probabilities are wanted (each needs a [T, T]
 * slot), else all at once; maps and statistics go to the observer group by group. */
static lp_status run_heads(pass *p, int l, const lp_layer_weights *L, const qkv_views *x)
{
    const lp_arch *a = &p->m->arch;
    bool any_probs = false;
    for (int h = 0; h < a->n_heads && !any_probs; h++)
        any_probs = wants(p, LP_SITE_ATTN_PROBS, l, h);
    /* An observer that said no to every map up front gets none now either (no slots exist). */
    any_probs = any_probs && p->s.probs != NULL;
    int64_t group = any_probs ? p->plan.n_prob_slots : a->n_heads;
    if (group < 1)
        group = 1;
    for (int h0 = 0; h0 < a->n_heads; h0 += (int)group) {
        int64_t n = a->n_heads - h0 < group ? a->n_heads - h0 : group;
        head_task task = {p, L, x->q_stride, x->kv_stride, x->q, x->k, x->v, h0, any_probs};
        pool_or_serial(p->pool, n, run_head, &task);
        lp_status st = emit_head_maps(p, l, h0, n, any_probs);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

static lp_status emit_head_outputs(pass *p, int l, const lp_layer_weights *L)
{
    const lp_arch *a = &p->m->arch;
    for (int h = 0; h < a->n_heads; h++) {
        if (!wants(p, LP_SITE_HEAD_OUTPUT, l, h))
            continue;
        lp_view view = {p->s.attn + (int64_t)h * a->head_dim, p->T, a->head_dim, L->q_dim, 0, NULL,
                        NULL};
        lp_status st = emit(p, LP_SITE_HEAD_OUTPUT, l, h, &view);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

static lp_status attention_block(pass *p, int l)
{
    const lp_layer_weights *L = &p->m->layers[l];
    int64_t T = p->T;
    scratch *s = &p->s;
    qkv_views x;
    lp_status st;
    apply_norm(p, &L->attn_norm, s->xn, s->x, T);
    if ((st = project_qkv(p, L, &x)) || (st = rotate_qk(p, L, &x)))
        return st;
    p->mask.window = p->opts->window_override > 0 ? p->opts->window_override
                     : p->opts->sliding_window     ? L->window
                                                   : 0;
    if ((st = run_heads(p, l, L, &x)) || (st = emit_head_outputs(p, l, L)) ||
        (st = linear(p, s->attn, T, &L->o, L->o_bias, s->tmp)))
        return st;
    return finish_sublayer(p, l, &L->post_attn_norm, LP_SITE_ATTN_OUT);
}

/* ---- feed-forward ---- */

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

/* The FFN of `rows` rows (at most ffn_rows), in -> out. */
static lp_status dense_ffn_chunk(pass *p, const lp_layer_weights *L, const float *in,
                                 int64_t rows, float *out)
{
    const lp_arch *a = &p->m->arch;
    int64_t F = L->ffn_hidden;
    scratch *s = &p->s;
    lp_status st;
    if (a->ffn_kind == LP_FFN_MLP) {
        if ((st = linear(p, in, rows, &L->up, L->up_bias, s->gate)))
            return st;
        activate(a, s->gate, NULL, rows * F);
    } else if (L->fused_gate_up) {
        /* [gate | up] per row; compact the gate half after activation. */
        if ((st = linear(p, in, rows, &L->gate_up, NULL, s->gate)))
            return st;
        for (int64_t t = 0; t < rows; t++) {
            float *row = s->gate + t * 2 * F;
            activate(a, row, row + F, F);
            memmove(s->gate + t * F, row, (size_t)F * sizeof(float));
        }
    } else {
        if ((st = linear(p, in, rows, &L->gate, L->gate_bias, s->gate)) ||
            (st = linear(p, in, rows, &L->up, L->up_bias, s->up)))
            return st;
        activate(a, s->gate, s->up, rows * F);
    }
    return linear(p, s->gate, rows, &L->down, L->down_bias, out);
}

static lp_status dense_ffn(pass *p, const lp_layer_weights *L, const float *in, int64_t rows,
                           float *out)
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

/* Token t's top-k experts by router probability r[E] (ties: lower id), best first, and their
 * mixing weights (renormalized over the chosen ones where the family does that). */
static void choose_experts(const lp_model *m, const float *r, int64_t E, int64_t K,
                           int32_t *chosen, float *w)
{
    double sum = 0.0;
    for (int64_t j = 0; j < K; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < E; e++) {
            bool taken = false;
            for (int64_t i = 0; i < j; i++)
                taken = taken || chosen[i] == e;
            if (!taken && (best < 0 || r[e] > r[best]))
                best = e;
        }
        chosen[j] = best;
        w[j] = r[best];
        sum += (double)r[best];
    }
    if (m->renorm_topk && sum > 0)
        for (int64_t j = 0; j < K; j++)
            w[j] = (float)((double)w[j] / sum);
}

/* The router over every token, its choices, and the ROUTER site. */
static lp_status route_tokens(pass *p, int l, const lp_layer_weights *L)
{
    const lp_arch *a = &p->m->arch;
    int64_t T = p->T, E = a->n_experts, K = a->n_experts_per_tok;
    scratch *s = &p->s;
    lp_status st = linear(p, s->xn, T, &L->router, L->router_bias, s->router);
    if (st != LP_OK)
        return st;
    for (int64_t t = 0; t < T; t++) {
        lp_softmax(s->router + t * E, E);
        choose_experts(p->m, s->router + t * E, E, K, s->chosen + t * K, s->chosen_w + t * K);
    }
    if (!wants(p, LP_SITE_ROUTER, l, -1))
        return LP_OK;
    lp_router_view rv = {E, K, s->chosen, s->chosen_w};
    lp_view view = {s->router, T, E, E, 0, NULL, &rv};
    return emit(p, LP_SITE_ROUTER, l, -1, &view);
}

/* Expert e's weight in token t's mixture (0 when not chosen). */
static float expert_weight(const scratch *s, int64_t K, int64_t t, int32_t e)
{
    float w = 0.0f;
    for (int64_t j = 0; j < K; j++)
        if (s->chosen[t * K + j] == e)
            w = s->chosen_w[t * K + j];
    return w;
}

/* Expert e over the tokens routed to it, ffn_rows at a time, its weighted output added into
 * s->tmp in token order. */
static lp_status run_expert(pass *p, const lp_layer_weights *L, int32_t e)
{
    const lp_arch *a = &p->m->arch;
    int64_t T = p->T, H = a->hidden_size, K = a->n_experts_per_tok, F = L->ffn_hidden;
    scratch *s = &p->s;
    int64_t n = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++)
            if (s->chosen[t * K + j] == e)
                s->tok_list[n++] = t;
    const lp_expert_weights *X = &L->experts[e];
    lp_status st;
    for (int64_t i0 = 0; i0 < n; i0 += p->plan.ffn_rows) {
        int64_t c = n - i0 < p->plan.ffn_rows ? n - i0 : p->plan.ffn_rows;
        const int64_t *toks = s->tok_list + i0;
        for (int64_t i = 0; i < c; i++)
            memcpy(s->gather + i * H, s->xn + toks[i] * H, (size_t)H * sizeof(float));
        if ((st = linear(p, s->gather, c, &X->gate, NULL, s->gate)) ||
            (st = linear(p, s->gather, c, &X->up, NULL, s->up)))
            return st;
        activate(a, s->gate, s->up, c * F);
        if ((st = linear(p, s->gate, c, &X->down, NULL, s->expert_out)))
            return st;
        for (int64_t i = 0; i < c; i++) {
            float w = expert_weight(s, K, toks[i], e);
            float *dst = s->tmp + toks[i] * H;
            const float *src = s->expert_out + i * H;
            for (int64_t d = 0; d < H; d++)
                dst[d] += w * src[d];
        }
    }
    return LP_OK;
}

static lp_status moe_ffn(pass *p, int l)
{
    const lp_layer_weights *L = &p->m->layers[l];
    int64_t T = p->T, H = p->m->arch.hidden_size;
    lp_status st = route_tokens(p, l, L);
    if (st != LP_OK)
        return st;
    memset(p->s.tmp, 0, (size_t)(T * H) * sizeof(float));
    /* Expert by expert, over the tokens routed to it; the weighted sum is added in a fixed
     * (expert, token) order, so the result does not depend on threads. */
    for (int32_t e = 0; e < p->m->arch.n_experts; e++)
        if ((st = run_expert(p, L, e)) != LP_OK)
            return st;
    return LP_OK;
}

static lp_status ffn_block(pass *p, int l)
{
    const lp_layer_weights *L = &p->m->layers[l];
    scratch *s = &p->s;
    lp_status st;
    apply_norm(p, &L->ffn_norm, s->xn, s->x, p->T);
    if (L->moe)
        st = moe_ffn(p, l);
    else
        st = dense_ffn(p, L, s->xn, p->T, s->tmp);
    return st ? st : finish_sublayer(p, l, &L->post_ffn_norm, LP_SITE_FFN_OUT);
}

/* ---- embeddings and logits ---- */

static lp_status embed(pass *p, const int32_t *tokens)
{
    const lp_model *m = p->m;
    const lp_arch *a = &m->arch;
    int64_t T = p->T, H = a->hidden_size;
    scratch *s = &p->s;
    lp_status st;
    for (int64_t t = 0; t < T; t++) {
        float *row = s->x + t * H;
        if ((st = lp_tensor_rows_f32(m->tok_embd, tokens[t], 1, row, p->err)))
            return st;
        if (a->embed_scale != 1.0 && a->embed_scale > 0)
            for (int64_t c = 0; c < H; c++)
                row[c] *= (float)a->embed_scale;
        if (m->pos_embd) {
            int64_t idx = s->positions[t] + a->pos_offset;
            if ((st = lp_tensor_rows_f32(m->pos_embd, idx, 1, s->xn, p->err)))
                return st;
            lp_add(row, s->xn, H);
        }
    }
    return emit_matrix(p, LP_SITE_EMBED, -1, s->x, T, H, H);
}

static lp_status logits(pass *p)
{
    const lp_model *m = p->m;
    const lp_arch *a = &m->arch;
    int64_t T = p->T, H = a->hidden_size, V = a->vocab_size;
    scratch *s = &p->s;
    lp_status st;
    if (m->out_norm.present)
        apply_norm(p, &m->out_norm, s->xn, s->x, T);
    else
        memcpy(s->xn, s->x, (size_t)(T * H) * sizeof(float));
    bool want = wants(p, LP_SITE_LOGITS, -1, -1);
    int64_t first = p->opts->logits_last_only ? T - 1 : 0;
    for (int64_t r0 = first; r0 < T; r0 += p->plan.logits_rows) {
        int64_t rows = T - r0 < p->plan.logits_rows ? T - r0 : p->plan.logits_rows;
        if ((st = linear(p, s->xn + r0 * H, rows, &m->lm_head, m->lm_head_bias, s->logits)))
            return st;
        if (a->final_logit_softcap > 0) {
            float cap = (float)a->final_logit_softcap;
            for (int64_t i = 0; i < rows * V; i++)
                s->logits[i] = cap * tanhf(s->logits[i] / cap);
        }
        if (want) {
            lp_view view = {s->logits, rows, V, V, r0, NULL, NULL};
            if ((st = emit(p, LP_SITE_LOGITS, -1, -1, &view)))
                return st;
        }
    }
    return LP_OK;
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
    if (!lp_mul_i64(batch->n_seqs, batch->n_tokens, &total))
        return lp_error_set(err, LP_ERR_RANGE, "forward: batch size overflows");
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
                maybe = wants(p, LP_SITE_ATTN_PROBS, l, h);
    }
    p->b = 0;
    return maybe;
}

/* Batch item b: positions and mask, embedding, every layer, logits. */
static lp_status run_sequence(pass *p, const lp_batch *batch, int64_t b)
{
    const lp_arch *a = &p->m->arch;
    p->b = b;
    int64_t pad_left = batch->pad_left ? batch->pad_left[b] : 0;
    for (int64_t t = 0; t < p->T; t++)
        p->s.positions[t] = t >= pad_left ? t - pad_left : 0;
    p->mask = lp_mask_causal(p->T, p->T);
    p->mask.pad_left = batch->pad_left;
    p->mask.pad_right = batch->pad_right;
    p->mask.fault = p->opts->mask_fault;
    lp_status st = embed(p, batch->tokens + b * p->T);
    for (int l = 0; l < a->n_layers && st == LP_OK; l++) {
        st = attention_block(p, l);
        if (st == LP_OK)
            st = ffn_block(p, l);
        if (st == LP_OK)
            st = emit_matrix(p, LP_SITE_RESID, l, p->s.x, p->T, a->hidden_size, a->hidden_size);
        if (st == LP_OK && p->opts->progress)
            p->opts->progress(p->opts->progress_ctx, b, l, (int)a->n_layers);
    }
    return st == LP_OK ? logits(p) : st;
}

lp_status lp_forward(const lp_model *model, const lp_batch *batch, const lp_forward_opts *opts_in,
                     lp_error *err)
{
    lp_forward_opts defaults;
    if (!opts_in) {
        lp_forward_opts_init(&defaults);
        opts_in = &defaults;
    }
    lp_status st = lp_forward_check(model, batch, err);
    if (st != LP_OK)
        return st;
    pass p;
    memset(&p, 0, sizeof p);
    p.m = model;
    p.opts = opts_in;
    p.obs = opts_in->observer;
    p.pool = opts_in->pool;
    p.T = batch->n_tokens;
    p.err = err;
    int n_threads = p.pool ? lp_pool_threads(p.pool) : 1;
    if (!make_plan(&model->arch, p.T, any_map_wanted(&p, batch), n_threads, &p.plan))
        return lp_error_set(err, LP_ERR_RANGE, "forward: scratch for %lld tokens overflows",
                            (long long)p.T);
    lp_arena *arena;
    if ((st = lp_arena_create((size_t)p.plan.total, &arena, err)) != LP_OK)
        return st;
    if (!carve(arena, &model->arch, &p.plan, &p.s)) {
        lp_arena_destroy(arena);
        return lp_error_set(err, LP_ERR_NOMEM, "forward: scratch plan of %llu bytes too small "
                                               "(bug)", (unsigned long long)p.plan.total);
    }
    for (int64_t b = 0; b < batch->n_seqs && st == LP_OK; b++)
        st = run_sequence(&p, batch, b);
    lp_arena_destroy(arena);
    return st;
}
