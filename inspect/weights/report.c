/* inspect's report on open weights: architecture, tensor table, totals, tied-embedding detection,
 * checks of config against weights, optional per-tensor statistics, as JSON or text. */
#define _POSIX_C_SOURCE 200809L /* posix_madvise */
#include "inspect/weights/report_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/checked.h"
#include "core/text.h"
#include "inspect/arch/arch_json.h"
#include "inspect/weights/weights_internal.h"

/* Classifier/embedding comparison reads both tensors; above this size, without --stats, only
 * sampled windows are compared so that a plain inspect stays a header-only operation. */
#define FULL_COMPARE_MAX_BYTES (64ull << 20)
#define SAMPLE_WINDOWS 16
#define SAMPLE_WINDOW_BYTES 4096
#define STATS_CHUNK 65536 /* values per conversion chunk: a multiple of every block size */
#define LIST_MAX 12       /* names listed in a check's detail before "and N more" */

/* ---- statistics ---------------------------------------------------------------------------- */


/* The statistics kernel: plain C that gcc -O3 (CMake's Release) vectorizes at the x86-64
 * baseline (SSE2) without -ffast-math; `-fopt-info-vec` reports the three lane loops below as
 * vectorized. Float compares would not vectorize (they may trap on NaN), so min and max run
 * on integer keys that order like the floats (sign-magnitude folded to two's complement), and
 * NaN/Inf are masked out with integer bit tests. Eight independent lanes keep every reduction
 * in its own register; n is at most STATS_CHUNK, so int32 counters cannot overflow. */
enum { LANES = 8 };

static inline int32_t float_key(uint32_t bits)
{
    return (int32_t)(bits ^ ((uint32_t)((int32_t)bits >> 31) & 0x7fffffffu));
}

static inline float key_float(int32_t key)
{
    uint32_t bits = (uint32_t)key ^ ((uint32_t)(key >> 31) & 0x7fffffffu); /* an involution */
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

/* The lanes' partial results over one chunk. */
typedef struct lane_stats {
    int32_t lo[LANES], hi[LANES], fin[LANES], nan_count[LANES];
    double sum[LANES], m2[LANES];
} lane_stats;

/* Pass 1: counts and extremes, all integer. */
static inline void lanes_extremes(const float *x, int64_t n, lane_stats *ls)
{
    int64_t n_full = n - n % LANES;
    for (int64_t i = 0; i < n; i += LANES) {
        int lanes = i < n_full ? LANES : (int)(n - i);
        for (int j = 0; j < LANES; j++) {
            uint32_t u = 0x7f800000u; /* past the end: counted as special, then undone */
            if (j < lanes)
                memcpy(&u, &x[i + j], 4);
            int32_t special = -(int32_t)((u & 0x7f800000u) == 0x7f800000u); /* NaN or Inf */
            int32_t key = float_key(u);
            int32_t klo = (key & ~special) | (INT32_MAX & special);
            int32_t khi = (key & ~special) | (INT32_MIN & special);
            ls->lo[j] = klo < ls->lo[j] ? klo : ls->lo[j];
            ls->hi[j] = khi > ls->hi[j] ? khi : ls->hi[j];
            ls->fin[j] += 1 + special;
            ls->nan_count[j] += (u & 0x7fffffffu) > 0x7f800000u;
        }
    }
}

/* Pass 2 (mean 0, sums) or pass 3 (squared deviations from mean, no cancellation) over the
 * finite values; the chunk is still in cache. */
static inline void lanes_moment(const float *x, int64_t n, bool squares, double mean,
                                double acc[LANES])
{
    int64_t n_full = n - n % LANES;
    for (int64_t i = 0; i < n_full; i += LANES) {
        for (int j = 0; j < LANES; j++) {
            uint32_t u;
            memcpy(&u, &x[i + j], 4);
            uint32_t keep = (u & 0x7f800000u) == 0x7f800000u ? 0u : 0xffffffffu;
            uint32_t w = u & keep;
            float v;
            memcpy(&v, &w, 4);
            double d = ((double)v - mean) * (double)(keep & 1u);
            acc[j] += squares ? d * d : (double)v;
        }
    }
    for (int64_t i = n_full; i < n; i++)
        if (((lp_load_u32(&x[i])) & 0x7f800000u) != 0x7f800000u)
            acc[0] += squares ? ((double)x[i] - mean) * ((double)x[i] - mean) : (double)x[i];
}

/* Merge one chunk's results into the running totals (Chan et al.'s pairwise update). */
static void merge_chunk(lp_tensor_stats *out, int64_t n_fin, double mean, double m2, double lo,
                        double hi)
{
    if (n_fin == 0)
        return;
    if (out->n_finite == 0) {
        out->mean = mean;
        out->m2 = m2;
        out->min = lo;
        out->max = hi;
    } else {
        double na = (double)out->n_finite, nb = (double)n_fin;
        double delta = mean - out->mean;
        out->mean += delta * nb / (na + nb);
        out->m2 += m2 + delta * delta * na * nb / (na + nb);
        out->min = lo < out->min ? lo : out->min;
        out->max = hi > out->max ? hi : out->max;
    }
    out->n_finite += n_fin;
}

static void chunk_stats(const float *x, int64_t n, lp_tensor_stats *out)
{
    lane_stats ls;
    for (int j = 0; j < LANES; j++) {
        ls.lo[j] = INT32_MAX;
        ls.hi[j] = INT32_MIN;
        ls.fin[j] = ls.nan_count[j] = 0;
        ls.sum[j] = ls.m2[j] = 0.0;
    }
    lanes_extremes(x, n, &ls);
    lanes_moment(x, n, false, 0.0, ls.sum);
    int64_t n_fin = 0, n_nan = 0;
    int32_t klo = INT32_MAX, khi = INT32_MIN;
    double total = 0.0;
    for (int j = 0; j < LANES; j++) {
        n_fin += ls.fin[j];
        n_nan += ls.nan_count[j];
        klo = ls.lo[j] < klo ? ls.lo[j] : klo;
        khi = ls.hi[j] > khi ? ls.hi[j] : khi;
        total += ls.sum[j];
    }
    double mean = n_fin ? total / (double)n_fin : 0.0;
    lanes_moment(x, n, true, mean, ls.m2);
    double chunk_m2 = 0.0;
    for (int j = 0; j < LANES; j++)
        chunk_m2 += ls.m2[j];
    merge_chunk(out, n_fin, mean, chunk_m2, (double)key_float(klo), (double)key_float(khi));
    out->n_nan += n_nan;
    out->n_inf += n - n_fin - n_nan;
}

/* Stream the tensor through a fixed buffer, STATS_CHUNK values at a time, so no tensor is ever
 * converted whole. Quant blocks are contiguous in the file, so a flat chunk of a whole number of
 * blocks starts at (first / block_elems) * block_bytes. */
static lp_status compute_stats(const lp_tensor *t, float *buf, lp_tensor_stats *out, lp_error *err)
{
    memset(out, 0, sizeof *out);
    const lp_dtype_info *info = lp_dtype_get(t->dtype);
    for (int64_t first = 0; first < t->n_elements; first += STATS_CHUNK) {
        int64_t len = t->n_elements - first < STATS_CHUNK ? t->n_elements - first : STATS_CHUNK;
        lp_tensor view = *t;
        view.n_dims = 1;
        view.shape[0] = len;
        view.n_elements = len;
        view.data = (const uint8_t *)t->data +
                    (uint64_t)(first / info->block_elems) * info->block_bytes;
        lp_status status = lp_tensor_rows_f32(&view, 0, 1, buf, err);
        if (status != LP_OK)
            return status;
        chunk_stats(buf, len, out);
    }
    return LP_OK;
}

static json_t *stats_json(const lp_tensor_stats *s)
{
    json_t *j = json_object();
    if (!j)
        return NULL;
    if (s->n_finite > 0) {
        double absmax = fabs(s->min) > fabs(s->max) ? fabs(s->min) : fabs(s->max);
        json_object_set_new(j, "min", json_real(s->min));
        json_object_set_new(j, "max", json_real(s->max));
        json_object_set_new(j, "mean", json_real(s->mean));
        json_object_set_new(j, "std", json_real(sqrt(s->m2 / (double)s->n_finite)));
        json_object_set_new(j, "absmax", json_real(absmax));
    } else {
        json_object_set_new(j, "min", json_null());
        json_object_set_new(j, "max", json_null());
        json_object_set_new(j, "mean", json_null());
        json_object_set_new(j, "std", json_null());
        json_object_set_new(j, "absmax", json_null());
    }
    json_object_set_new(j, "nan", json_integer(s->n_nan));
    json_object_set_new(j, "inf", json_integer(s->n_inf));
    return j;
}

/* ---- expected tensors ----------------------------------------------------------------------- */

/* The names a check reports: the count, and copies of only the first LIST_MAX (the detail
 * lists no more), so a check over 300,000 tensors holds no second copy of their names. */
typedef struct name_list {
    size_t count;
    char *items[LIST_MAX];
    bool oom; /* a copy failed: the report is refused */
} name_list;

static void list_add(name_list *l, const char *item)
{
    if (l->count < LIST_MAX) {
        size_t len = strlen(item) + 1;
        char *copy = malloc(len);
        if (copy)
            memcpy(copy, item, len);
        else
            l->oom = true;
        l->items[l->count] = copy;
    }
    l->count++;
}

static void list_free(name_list *l)
{
    for (size_t i = 0; i < l->count && i < LIST_MAX; i++)
        free(l->items[i]);
}

typedef struct expect_ctx {
    const lp_weights *w;
    const lp_arch *a;
    bool *hit;           /* [n_tensors] expected and found */
    name_list missing;   /* descriptions of expected tensors not found */
} expect_ctx;

static size_t tensor_index(const lp_weights *w, const lp_tensor *t)
{
    return (size_t)(t - w->tensors);
}

static void describe_key(char *buf, size_t size, lp_role role, int layer, int expert, bool bias)
{
    /* StableLM's per-head q/k norms use the expert slot for the head */
    bool per_head = role == LP_ROLE_ATTN_Q_NORM || role == LP_ROLE_ATTN_K_NORM;
    int n = snprintf(buf, size, "%s", lp_role_name(role));
    if (layer >= 0 && n >= 0 && (size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, " layer %d", layer);
    if (expert >= 0 && n >= 0 && (size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, " %s %d", per_head ? "head" : "expert", expert);
    if (bias && n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, " bias");
}

/* Mark one expected tensor; returns whether it is there. */
static bool want(expect_ctx *c, lp_role role, int layer, int expert, bool bias, bool report)
{
    const lp_tensor *t = lp_weights_find(c->w, role, layer, expert, bias);
    if (t) {
        c->hit[tensor_index(c->w, t)] = true;
        return true;
    }
    if (report) {
        char buf[96];
        describe_key(buf, sizeof buf, role, layer, expert, bias);
        list_add(&c->missing, buf);
    }
    return false;
}

/* A weight and, when has_bias, its bias. */
static void want_linear(expect_ctx *c, lp_role role, int layer, int expert, bool has_bias)
{
    want(c, role, layer, expert, false, true);
    if (has_bias)
        want(c, role, layer, expert, true, true);
}

static void want_norm(expect_ctx *c, lp_role role, int layer)
{
    want(c, role, layer, -1, false, true);
    if (c->a->norm_kind == LP_NORM_LAYER && c->a->bias_norm)
        want(c, role, layer, -1, true, true);
}

/* Either one fused tensor or all its parts. */
static void want_fused_or_parts(expect_ctx *c, lp_role fused, const lp_role *parts, int n_parts,
                                int layer, bool has_bias)
{
    if (lp_weights_find(c->w, fused, layer, -1, false)) {
        want_linear(c, fused, layer, -1, has_bias);
        return;
    }
    for (int i = 0; i < n_parts; i++)
        want_linear(c, parts[i], layer, -1, has_bias);
}

static void want_experts(expect_ctx *c, lp_role role, int layer)
{
    /* GGUF stores all experts of a layer in one 3-D tensor (expert -1) */
    bool stacked = want(c, role, layer, -1, false, false);
    for (int64_t e = 0; !stacked && e < c->a->n_experts; e++)
        want(c, role, layer, (int)e, false, true);
    if (c->a->bias_mlp) /* gpt-oss: the experts' biases, stacked [n_experts, rows] */
        want(c, role, layer, -1, true, true);
}

/* StableLM's per-head q/k norms: GGUF stacks them in one [heads, head_dim] tensor, the
 * Hugging Face checkpoint keeps one vector per head (q_layernorm.norms.H). */
static void want_per_head_norms(expect_ctx *c, lp_role role, int layer, int64_t n_heads)
{
    bool stacked = want(c, role, layer, -1, false, false);
    for (int64_t h = 0; !stacked && h < n_heads; h++)
        want(c, role, layer, (int)h, false, true);
}

/* One layer's attention: its norms, q/k/v (fused or apart, or MLA's low-rank factors), output
 * and q/k norms. */
static void walk_attention(expect_ctx *c, int l)
{
    const lp_arch *a = c->a;
    if (!a->no_input_norm)
        want_norm(c, LP_ROLE_ATTN_NORM, l);
    if (!a->no_input_norm && (!a->parallel_block || a->parallel_two_norms))
        want_norm(c, LP_ROLE_FFN_NORM, l);
    if (a->post_attn_norm || a->no_input_norm)
        want_norm(c, LP_ROLE_ATTN_POST_NORM, l);
    if (a->post_ffn_norm || a->no_input_norm)
        want_norm(c, LP_ROLE_FFN_POST_NORM, l);
    if (a->mla && a->q_lora_rank > 0) {
        want_linear(c, LP_ROLE_ATTN_Q_A, l, -1, false);
        want_norm(c, LP_ROLE_ATTN_Q_A_NORM, l);
        want_linear(c, LP_ROLE_ATTN_Q_B, l, -1, false);
    } else if (a->mla) {
        want_linear(c, LP_ROLE_ATTN_Q, l, -1, false);
    }
    if (a->mla) {
        want_linear(c, LP_ROLE_ATTN_KV_A, l, -1, false);
        want_norm(c, LP_ROLE_ATTN_KV_A_NORM, l);
        /* llama.cpp's newer converter splits kv_b per head into attn_k_b and attn_v_b */
        if (!lp_weights_find(c->w, LP_ROLE_ATTN_KV_B, l, -1, false) &&
            lp_weights_find(c->w, LP_ROLE_ATTN_K_B, l, -1, false)) {
            want_linear(c, LP_ROLE_ATTN_K_B, l, -1, false);
            want_linear(c, LP_ROLE_ATTN_V_B, l, -1, false);
        } else {
            want_linear(c, LP_ROLE_ATTN_KV_B, l, -1, false);
        }
    } else {
        static const lp_role qkv[3] = {LP_ROLE_ATTN_Q, LP_ROLE_ATTN_K, LP_ROLE_ATTN_V};
        want_fused_or_parts(c, LP_ROLE_ATTN_QKV, qkv, 3, l, a->bias_qkv);
    }
    want_linear(c, LP_ROLE_ATTN_O, l, -1, a->bias_o);
    if (a->attn_sinks)
        want(c, LP_ROLE_ATTN_SINKS, l, -1, false, true);
    if (a->qk_norm_per_head) {
        want_per_head_norms(c, LP_ROLE_ATTN_Q_NORM, l, a->n_heads);
        want_per_head_norms(c, LP_ROLE_ATTN_K_NORM, l,
                            a->layer_kv_heads[l] > 0 ? a->layer_kv_heads[l] : a->n_kv_heads);
    } else if (a->qk_norm || a->qk_norm_full) {
        want(c, LP_ROLE_ATTN_Q_NORM, l, -1, false, true);
        want(c, LP_ROLE_ATTN_K_NORM, l, -1, false, true);
    }
}

/* A MoE layer: router (and its score bias), the experts (fused or one by one), the shared
 * expert and its gate. */
static void walk_experts(expect_ctx *c, int l)
{
    const lp_arch *a = c->a;
    bool gated = a->ffn_kind != LP_FFN_MLP;
    want_linear(c, LP_ROLE_ROUTER, l, -1, a->router_bias);
    /* V3's score bias: a vector in safetensors, GGUF's exp_probs_b.bias */
    if (a->router_score_bias && !want(c, LP_ROLE_ROUTER_BIAS, l, -1, false, false))
        want(c, LP_ROLE_ROUTER_BIAS, l, -1, true, true);
    if (gated && want(c, LP_ROLE_EXPERT_GATE_UP, l, -1, false, false)) {
        if (a->bias_mlp) /* gpt-oss's gate_up_proj_bias */
            want(c, LP_ROLE_EXPERT_GATE_UP, l, -1, true, true);
    } else if (gated) {
        want_experts(c, LP_ROLE_EXPERT_GATE, l);
        want_experts(c, LP_ROLE_EXPERT_UP, l);
    } else if (!gated) {
        want_experts(c, LP_ROLE_EXPERT_UP, l);
    }
    want_experts(c, LP_ROLE_EXPERT_DOWN, l);
    if (a->n_shared_experts > 0 || a->shared_expert_ffn_hidden > 0) {
        if (gated)
            want(c, LP_ROLE_SHARED_GATE, l, -1, false, true);
        want(c, LP_ROLE_SHARED_UP, l, -1, false, true);
        want(c, LP_ROLE_SHARED_DOWN, l, -1, false, true);
    }
    if (a->shared_expert_gate)
        want(c, LP_ROLE_SHARED_EXPERT_GATE, l, -1, false, true);
}

/* Phi-3's GGUF: gate | up fused under the name ffn_up (2 x ffn rows), no ffn_gate. */
static bool phi3_gguf_gate_up(const expect_ctx *c, int l)
{
    const lp_tensor *up = lp_weights_find(c->w, LP_ROLE_FFN_UP, l, -1, false);
    int64_t ffn = c->a->layer_ffn_hidden[l] > 0 ? c->a->layer_ffn_hidden[l] : c->a->ffn_hidden;
    return up && strcmp(c->a->family, "phi3") == 0 &&
           !lp_weights_find(c->w, LP_ROLE_FFN_GATE, l, -1, false) && up->n_dims == 2 &&
           up->shape[0] == 2 * ffn;
}

/* One layer's FFN: experts, or a gated (gate and up fused or apart) or plain MLP. */
static void walk_ffn(expect_ctx *c, int l)
{
    const lp_arch *a = c->a;
    if (a->layer_moe[l]) {
        walk_experts(c, l);
    } else if (a->ffn_kind != LP_FFN_MLP && phi3_gguf_gate_up(c, l)) {
        want_linear(c, LP_ROLE_FFN_UP, l, -1, a->bias_mlp);
        want_linear(c, LP_ROLE_FFN_DOWN, l, -1, a->bias_mlp);
    } else if (a->ffn_kind != LP_FFN_MLP) {
        static const lp_role gate_up[2] = {LP_ROLE_FFN_GATE, LP_ROLE_FFN_UP};
        want_fused_or_parts(c, LP_ROLE_FFN_GATE_UP, gate_up, 2, l, a->bias_mlp);
        want_linear(c, LP_ROLE_FFN_DOWN, l, -1, a->bias_mlp);
    } else {
        want_linear(c, LP_ROLE_FFN_UP, l, -1, a->bias_mlp);
        want_linear(c, LP_ROLE_FFN_DOWN, l, -1, a->bias_mlp);
    }
}

static void walk_expected(expect_ctx *c)
{
    const lp_arch *a = c->a;
    want(c, LP_ROLE_TOKEN_EMBD, -1, -1, false, true);
    if (a->embed_proj_dim > 0 && a->embed_proj_dim != a->hidden_size) {
        want(c, LP_ROLE_EMBD_PROJ_IN, -1, -1, false, true);
        want(c, LP_ROLE_EMBD_PROJ_OUT, -1, -1, false, true);
    }
    if (a->pos_kind == LP_POS_LEARNED)
        want(c, LP_ROLE_POS_EMBD, -1, -1, false, true);
    if (a->embed_norm)
        want_norm(c, LP_ROLE_EMBD_NORM, -1);
    if (a->final_norm)
        want_norm(c, LP_ROLE_OUTPUT_NORM, -1);
    if (!a->tied_embeddings)
        want_linear(c, LP_ROLE_LM_HEAD, -1, -1, a->bias_lm_head);
    else
        want(c, LP_ROLE_LM_HEAD, -1, -1, false, false); /* a stored copy is fine */
    for (int l = 0; l < (int)a->n_layers && l < LP_MAX_LAYERS; l++) {
        walk_attention(c, l);
        walk_ffn(c, l);
    }
}

/* Shape arithmetic on description values: an overflow gives -1, which no tensor matches, so a
 * nonsensical description fails the shape check instead of overflowing. */
static int64_t mul(int64_t x, int64_t y)
{
    int64_t r;
    return x < 0 || y < 0 || !lp_mul_i64(x, y, &r) ? -1 : r;
}

static int64_t add(int64_t x, int64_t y)
{
    int64_t r;
    return x < 0 || y < 0 || !lp_add_i64(x, y, &r) ? -1 : r;
}

/* [rows, cols] of a tensor (cols 0: a vector); per_expert_3d for the expert matrices GGUF may
 * hold as one [n_experts, rows, cols]. */
typedef struct role_shape {
    int64_t rows, cols;
    bool per_expert_3d;
} role_shape;

/* The embeddings, norms and attention of layer l; false for the other roles. */
static bool attention_dims(const lp_arch *a, lp_role role, int l, role_shape *r)
{
    int64_t hidden = a->hidden_size, hd = a->head_dim;
    int64_t kv = a->layer_kv_heads[l] > 0 ? a->layer_kv_heads[l] : a->n_kv_heads;
    int64_t q_out = a->mla ? mul(a->n_heads, add(a->qk_nope_head_dim, a->qk_rope_head_dim))
                           : mul(a->n_heads, hd);
    int64_t o_in = a->mla ? mul(a->n_heads, a->v_head_dim) : mul(a->n_heads, hd);
    /* OPT-350m: the embedding (and the classifier tied to it) is word_embed_proj_dim wide */
    int64_t embed = a->embed_proj_dim > 0 ? a->embed_proj_dim : hidden;
    switch (role) {
    case LP_ROLE_TOKEN_EMBD:
    case LP_ROLE_LM_HEAD: *r = (role_shape){a->vocab_size, embed, false}; return true;
    case LP_ROLE_EMBD_PROJ_IN: *r = (role_shape){hidden, embed, false}; return true;
    case LP_ROLE_EMBD_PROJ_OUT: *r = (role_shape){embed, hidden, false}; return true;
    case LP_ROLE_POS_EMBD: *r = (role_shape){a->pos_table_rows, hidden, false}; return true;
    case LP_ROLE_EMBD_NORM:
    case LP_ROLE_OUTPUT_NORM:
    case LP_ROLE_ATTN_NORM:
    case LP_ROLE_FFN_NORM:
    case LP_ROLE_ATTN_POST_NORM:
    case LP_ROLE_FFN_POST_NORM: *r = (role_shape){hidden, 0, false}; return true;
    case LP_ROLE_ATTN_Q: *r = (role_shape){q_out, hidden, false}; return true;
    case LP_ROLE_ATTN_K:
    case LP_ROLE_ATTN_V: *r = (role_shape){mul(kv, hd), hidden, false}; return true;
    case LP_ROLE_ATTN_QKV:
        *r = (role_shape){mul(add(a->n_heads, mul(2, kv)), hd), hidden, false};
        return true;
    case LP_ROLE_ATTN_O: *r = (role_shape){hidden, o_in, false}; return true;
    case LP_ROLE_ATTN_Q_NORM:
        /* StableLM's per-head norms: GGUF stacks them [heads, head_dim] */
        *r = a->qk_norm_per_head ? (role_shape){a->n_heads, hd, false}
                                 : (role_shape){a->qk_norm_full ? mul(a->n_heads, hd) : hd, 0, false};
        return true;
    case LP_ROLE_ATTN_K_NORM:
        *r = a->qk_norm_per_head ? (role_shape){kv, hd, false}
                                 : (role_shape){a->qk_norm_full ? mul(kv, hd) : hd, 0, false};
        return true;
    case LP_ROLE_ATTN_SINKS: *r = (role_shape){a->n_heads, 0, false}; return true;
    case LP_ROLE_ATTN_Q_A: *r = (role_shape){a->q_lora_rank, hidden, false}; return true;
    case LP_ROLE_ATTN_Q_A_NORM: *r = (role_shape){a->q_lora_rank, 0, false}; return true;
    case LP_ROLE_ATTN_Q_B: *r = (role_shape){q_out, a->q_lora_rank, false}; return true;
    case LP_ROLE_ATTN_KV_A:
        *r = (role_shape){add(a->kv_lora_rank, a->qk_rope_head_dim), hidden, false};
        return true;
    case LP_ROLE_ATTN_KV_A_NORM: *r = (role_shape){a->kv_lora_rank, 0, false}; return true;
    case LP_ROLE_ATTN_KV_B:
        *r = (role_shape){mul(a->n_heads, add(a->qk_nope_head_dim, a->v_head_dim)),
                          a->kv_lora_rank, false};
        return true;
    /* per head [heads, kv_lora, nope] and [heads, v, kv_lora]: checked in expected_shape */
    case LP_ROLE_ATTN_K_B: *r = (role_shape){a->kv_lora_rank, a->qk_nope_head_dim, false}; return true;
    case LP_ROLE_ATTN_V_B: *r = (role_shape){a->v_head_dim, a->kv_lora_rank, false}; return true;
    default: return false;
    }
}

/* The FFN, router and experts of layer l; false for the other roles. */
static bool ffn_dims(const lp_arch *a, lp_role role, int l, role_shape *r)
{
    int64_t hidden = a->hidden_size, expert = a->expert_ffn_hidden;
    int64_t ffn = a->layer_ffn_hidden[l] > 0 ? a->layer_ffn_hidden[l] : a->ffn_hidden;
    int64_t shared = a->shared_expert_ffn_hidden > 0 ? a->shared_expert_ffn_hidden
                                                     : mul(a->n_shared_experts, expert);
    switch (role) {
    case LP_ROLE_FFN_GATE:
    case LP_ROLE_FFN_UP: *r = (role_shape){ffn, hidden, false}; return true;
    case LP_ROLE_FFN_GATE_UP: *r = (role_shape){mul(2, ffn), hidden, false}; return true;
    case LP_ROLE_FFN_DOWN: *r = (role_shape){hidden, ffn, false}; return true;
    case LP_ROLE_ROUTER: *r = (role_shape){a->n_experts, hidden, false}; return true;
    case LP_ROLE_ROUTER_BIAS: *r = (role_shape){a->n_experts, 0, false}; return true;
    case LP_ROLE_EXPERT_GATE:
    case LP_ROLE_EXPERT_UP: *r = (role_shape){expert, hidden, true}; return true;
    case LP_ROLE_EXPERT_GATE_UP: *r = (role_shape){mul(2, expert), hidden, true}; return true;
    case LP_ROLE_EXPERT_DOWN: *r = (role_shape){hidden, expert, true}; return true;
    case LP_ROLE_SHARED_GATE:
    case LP_ROLE_SHARED_UP: *r = (role_shape){shared, hidden, false}; return true;
    case LP_ROLE_SHARED_DOWN: *r = (role_shape){hidden, shared, false}; return true;
    case LP_ROLE_SHARED_EXPERT_GATE: *r = (role_shape){1, hidden, false}; return true;
    default: return false;
    }
}

/* The shape of t's role in its layer; false when loupe has no rule for the role. */
static bool role_dims(const lp_arch *a, const lp_tensor *t, int64_t *rows_out, int64_t *cols_out,
                      bool *per_expert_3d_out)
{
    int l = t->layer >= 0 && t->layer < LP_MAX_LAYERS ? t->layer : 0;
    role_shape r;
    if (!attention_dims(a, t->role, l, &r) && !ffn_dims(a, t->role, l, &r))
        return false;
    *rows_out = r.rows;
    *cols_out = r.cols;
    *per_expert_3d_out = r.per_expert_3d;
    return true;
}

/* The shape the architecture implies for t (weights [out, in], norms and biases [n]); false
 * when loupe has no rule for this role. */
static bool expected_shape(const lp_arch *a, const lp_tensor *t, int64_t *shape, int *n_dims)
{
    int64_t rows, cols;
    bool per_expert_3d;
    if (!role_dims(a, t, &rows, &cols, &per_expert_3d))
        return false;
    if (t->is_bias && per_expert_3d && t->expert < 0) { /* gpt-oss: [n_experts, rows] */
        shape[0] = a->n_experts;
        shape[1] = rows;
        *n_dims = 2;
        return true;
    }
    if (t->is_bias) {
        shape[0] = rows;
        *n_dims = 1;
        return true;
    }
    if (a->qk_norm_per_head && t->expert >= 0 &&
        (t->role == LP_ROLE_ATTN_Q_NORM || t->role == LP_ROLE_ATTN_K_NORM)) {
        shape[0] = a->head_dim; /* one head's vector */
        *n_dims = 1;
        return true;
    }
    if (t->role == LP_ROLE_ATTN_K_B || t->role == LP_ROLE_ATTN_V_B) {
        shape[0] = a->n_heads;
        shape[1] = rows;
        shape[2] = cols;
        *n_dims = 3;
        return true;
    }
    if (cols == 0) {
        shape[0] = rows;
        *n_dims = 1;
        return true;
    }
    /* Phi-3's GGUF keeps gate | up fused under ffn_up's name */
    if (t->role == LP_ROLE_FFN_UP && strcmp(a->family, "phi3") == 0 &&
        strncmp(t->name, "blk.", 4) == 0)
        rows = mul(2, rows);
    if (t->transposed) { /* GPT-2 Conv1D: [in, out] */
        int64_t tmp = rows;
        rows = cols;
        cols = tmp;
    }
    if (per_expert_3d && t->expert < 0) {
        shape[0] = a->n_experts;
        shape[1] = rows;
        shape[2] = cols;
        *n_dims = 3;
        return true;
    }
    shape[0] = rows;
    shape[1] = cols;
    *n_dims = 2;
    return true;
}

/* Equal up to leading dimensions of 1: Qwen MoE's shared-expert gate is [1, hidden] in
 * safetensors and [hidden] in GGUF. */
static bool shapes_match(const int64_t *a, int na, const int64_t *b, int nb)
{
    while (na > 1 && a[0] == 1) {
        a++;
        na--;
    }
    while (nb > 1 && b[0] == 1) {
        b++;
        nb--;
    }
    if (na != nb)
        return false;
    for (int d = 0; d < na; d++)
        if (a[d] != b[d])
            return false;
    return true;
}

void lp_format_shape(char *buf, size_t size, const int64_t *shape, int n_dims)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, size - n, "[");
    for (int d = 0; d < n_dims && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

/* ---- report ------------------------------------------------------------------------------- */

static json_t *make_check(const char *name, bool passed, const char *detail)
{
    json_t *c = json_object();
    if (!c)
        return NULL;
    json_object_set_new(c, "name", json_string(name));
    json_object_set_new(c, "passed", json_boolean(passed));
    json_object_set_new(c, "detail", json_string(detail));
    return c;
}

/* "a, b, c and 4 more". */
static void join_list(char *buf, size_t size, const name_list *items)
{
    size_t n = 0, count = items->count;
    buf[0] = '\0';
    for (size_t i = 0; i < count && i < LIST_MAX && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "",
                              items->items[i] ? items->items[i] : "");
    if (count > LIST_MAX && n < size)
        snprintf(buf + n, size - n, " and %zu more", count - LIST_MAX);
}

/* Advise the kernel about [p, p + len) of a mapping, widened to whole pages. Only a hint:
 * failures are ignored. */
static void advise_range(const void *p, uint64_t len, int advice)
{
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || len == 0)
        return;
    uintptr_t begin = (uintptr_t)p & ~(uintptr_t)(page - 1);
    uintptr_t end = (uintptr_t)p + (uintptr_t)len;
    (void)posix_madvise((void *)begin, (size_t)(end - begin), advice);
}

static bool same_bytes_sampled(const lp_tensor *a, const lp_tensor *b, bool full, bool *sampled)
{
    *sampled = false;
    if (a->n_bytes != b->n_bytes)
        return false;
    if (full || a->n_bytes <= FULL_COMPARE_MAX_BYTES)
        return a->n_bytes == 0 || memcmp(a->data, b->data, a->n_bytes) == 0;
    *sampled = true;
    /* Random-access advice for the sampled reads: otherwise each fault pulls in the device's
     * whole read-ahead window (8 MiB on some disks) around every 4 KiB sample. */
    advise_range(a->data, a->n_bytes, POSIX_MADV_RANDOM);
    advise_range(b->data, b->n_bytes, POSIX_MADV_RANDOM);
    bool same = true;
    uint64_t step = a->n_bytes / SAMPLE_WINDOWS;
    for (int i = 0; i < SAMPLE_WINDOWS && same; i++) {
        uint64_t off = (uint64_t)i * step;
        uint64_t len = a->n_bytes - off < SAMPLE_WINDOW_BYTES ? a->n_bytes - off
                                                              : SAMPLE_WINDOW_BYTES;
        same = memcmp((const uint8_t *)a->data + off, (const uint8_t *)b->data + off, len) == 0;
    }
    advise_range(a->data, a->n_bytes, POSIX_MADV_NORMAL);
    advise_range(b->data, b->n_bytes, POSIX_MADV_NORMAL);
    return same;
}

static bool same_shape(const lp_tensor *a, const lp_tensor *b)
{
    if (a->n_dims != b->n_dims)
        return false;
    for (int d = 0; d < a->n_dims; d++)
        if (a->shape[d] != b->shape[d])
            return false;
    return true;
}

/* Dequantize two same-sized tensors chunk by chunk and return the largest |a - b| and |a|. */
static lp_status compare_values(const lp_tensor *a, const lp_tensor *b, double *max_diff,
                                double *absmax, lp_error *err)
{
    *max_diff = *absmax = 0.0;
    float *va = malloc(2 * STATS_CHUNK * sizeof(float));
    if (!va)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    float *vb = va + STATS_CHUNK;
    const lp_dtype_info *ia = lp_dtype_get(a->dtype), *ib = lp_dtype_get(b->dtype);
    lp_status status = LP_OK;
    for (int64_t first = 0; first < a->n_elements && status == LP_OK; first += STATS_CHUNK) {
        int64_t len = a->n_elements - first < STATS_CHUNK ? a->n_elements - first : STATS_CHUNK;
        lp_tensor x = *a, y = *b;
        x.n_dims = y.n_dims = 1;
        x.shape[0] = y.shape[0] = x.n_elements = y.n_elements = len;
        x.data = (const uint8_t *)a->data + (uint64_t)(first / ia->block_elems) * ia->block_bytes;
        y.data = (const uint8_t *)b->data + (uint64_t)(first / ib->block_elems) * ib->block_bytes;
        if ((status = lp_tensor_rows_f32(&x, 0, 1, va, err)) == LP_OK &&
            (status = lp_tensor_rows_f32(&y, 0, 1, vb, err)) == LP_OK) {
            for (int64_t i = 0; i < len; i++) {
                double d = fabs((double)va[i] - (double)vb[i]), m = fabs((double)va[i]);
                *max_diff = d > *max_diff || d != d ? d : *max_diff;
                *absmax = m > *absmax ? m : *absmax;
            }
        }
    }
    free(va);
    return status;
}

/* What the weights say about tied embeddings. */
typedef struct tied_info {
    const lp_tensor *embd, *head;
    bool tied, copy, requantized, compared, sampled;
    char how[256];
} tied_info;

/* A classifier stored in another type than the embedding (GGUF quantizers do that to the copy):
 * compare the values, with a bound far above any quantization error (Q4_0: ~7% of absmax) and
 * far below the difference between two unrelated matrices (~100%). */
static void compare_requantized(tied_info *ti, bool full_compare)
{
    const lp_tensor *embd = ti->embd, *head = ti->head;
    double max_diff = 0, absmax = 0;
    lp_error cmp_err = {0};
    bool small = embd->n_bytes <= FULL_COMPARE_MAX_BYTES && head->n_bytes <= FULL_COMPARE_MAX_BYTES;
    if (!(full_compare || small)) {
        snprintf(ti->how, sizeof ti->how,
                 "classifier '%s' is stored separately as %s (embedding %s); values compared "
                 "only with --stats",
                 head->name, lp_dtype_name(head->dtype), lp_dtype_name(embd->dtype));
        return;
    }
    if (compare_values(embd, head, &max_diff, &absmax, &cmp_err) != LP_OK) {
        snprintf(ti->how, sizeof ti->how, "classifier '%s' could not be compared: %.150s",
                 head->name, cmp_err.msg);
        return;
    }
    ti->compared = true;
    ti->requantized = ti->tied = max_diff <= 0.25 * absmax;
    snprintf(ti->how, sizeof ti->how,
             "classifier '%s' (%s) %s the embedding (%s): max |difference| %.3g, absmax %.3g",
             head->name, lp_dtype_name(head->dtype),
             ti->requantized ? "is a re-quantized copy of" : "differs from",
             lp_dtype_name(embd->dtype), max_diff, absmax);
}

static void detect_tied(const lp_weights *w, bool full_compare, tied_info *ti)
{
    memset(ti, 0, sizeof *ti);
    const lp_tensor *embd = ti->embd = lp_weights_find(w, LP_ROLE_TOKEN_EMBD, -1, -1, false);
    const lp_tensor *head = ti->head = lp_weights_find(w, LP_ROLE_LM_HEAD, -1, -1, false);
    if (!head) {
        ti->tied = embd != NULL;
        snprintf(ti->how, sizeof ti->how, "%s",
                 embd ? "no classifier tensor: the embedding is the classifier"
                      : "neither an embedding nor a classifier tensor");
    } else if (!embd) {
        snprintf(ti->how, sizeof ti->how, "classifier '%s' without an embedding tensor",
                 head->name);
    } else if (!same_shape(embd, head)) {
        snprintf(ti->how, sizeof ti->how,
                 "classifier '%s' has a different shape from the embedding", head->name);
    } else if (embd->dtype != head->dtype) {
        compare_requantized(ti, full_compare);
    } else {
        ti->compared = true;
        ti->copy = ti->tied = same_bytes_sampled(embd, head, full_compare, &ti->sampled);
        snprintf(ti->how, sizeof ti->how, "classifier '%s' %s the embedding '%s'%s", head->name,
                 ti->copy ? "is a byte copy of" : "differs from", embd->name,
                 ti->sampled ? " (compared in 16 sampled 4 KiB windows)" : "");
    }
}

/* Tied-embedding detection and its check against the config. */
static void tied_report(const lp_weights *w, bool full_compare, json_t *report, json_t *checks)
{
    tied_info ti;
    detect_tied(w, full_compare, &ti);
    json_t *j = json_object();
    json_object_set_new(j, "tied", json_boolean(ti.tied));
    json_object_set_new(j, "stored_copy", json_boolean(ti.copy || ti.requantized));
    json_object_set_new(j, "requantized", json_boolean(ti.requantized));
    json_object_set_new(j, "sampled", json_boolean(ti.sampled));
    json_object_set_new(j, "detail", json_string(ti.how));
    json_object_set_new(report, "tied_embeddings", j);
    const lp_arch *a = w->arch;
    if (!a)
        return;
    char detail[512];
    bool passed = ti.head != NULL;
    /* tied config: no classifier, or a (re-quantized) copy of the embedding; a copy in another
     * type that was not compared gets the benefit of the doubt */
    if (a->tied_embeddings)
        passed = !ti.head || ti.copy || ti.requantized ||
                 (!ti.compared && ti.embd && same_shape(ti.embd, ti.head) &&
                  ti.embd->dtype != ti.head->dtype);
    snprintf(detail, sizeof detail, "config: %s; weights: %s",
             a->tied_embeddings ? "tied" : "untied", ti.how);
    json_array_append_new(checks, make_check("tied_embeddings", passed, detail));
}

/* A check over a list of names: passed when it is empty. none: the detail then; some: the
 * detail's format before the list ("%zu missing: "). */
static void list_check(json_t *checks, const char *name, const name_list *l, const char *none,
                       const char *some, const char *after)
{
    char list[2048], detail[2400];
    if (l->count == 0) {
        snprintf(detail, sizeof detail, "%s", none);
    } else {
        join_list(list, sizeof list, l);
        int n = snprintf(detail, sizeof detail, some, l->count);
        if (n >= 0 && (size_t)n < sizeof detail)
            snprintf(detail + n, sizeof detail - (size_t)n, "%s", list);
    }
    if (after && after[0]) {
        size_t len = strlen(detail);
        snprintf(detail + len, sizeof detail - len, "%s", after);
    }
    json_array_append_new(checks, make_check(name, l->count == 0, detail));
}

/* What arch_checks collects: tensors expected and found, wrong shapes, the rest. */
typedef struct shape_scan {
    size_t n_expected;
    name_list bad_shapes, unexpected, buffers;
} shape_scan;

static void scan_tensors(const expect_ctx *c, shape_scan *sc)
{
    for (size_t i = 0; i < c->w->n_tensors; i++) {
        const lp_tensor *t = &c->w->tensors[i];
        if (!c->hit[i]) {
            list_add(lp_role_is_buffer(t->role) ? &sc->buffers : &sc->unexpected, t->name);
            continue;
        }
        sc->n_expected++;
        int64_t shape[LP_MAX_DIMS];
        int n_dims;
        if (!expected_shape(c->a, t, shape, &n_dims) ||
            shapes_match(shape, n_dims, t->shape, t->n_dims))
            continue;
        char got[128], wanted[128], line[400];
        lp_format_shape(got, sizeof got, t->shape, t->n_dims);
        lp_format_shape(wanted, sizeof wanted, shape, n_dims);
        snprintf(line, sizeof line, "%s is %s, expected %s", t->name, got, wanted);
        list_add(&sc->bad_shapes, line);
    }
}

static void arch_checks(const lp_weights *w, json_t *checks, lp_status *status, lp_error *err)
{
    size_t n = w->n_tensors;
    expect_ctx c = {w, w->arch, calloc(n ? n : 1, sizeof(bool)), {0}};
    shape_scan sc = {0};
    if (c.hit) {
        walk_expected(&c);
        scan_tensors(&c, &sc);
    }
    if (!c.hit || c.missing.oom || sc.bad_shapes.oom || sc.unexpected.oom || sc.buffers.oom) {
        *status = lp_error_set(err, LP_ERR_NOMEM, "out of memory checking %zu tensors", n);
    } else {
        char none[96], buffers[2200] = "";
        snprintf(none, sizeof none, "all %zu expected tensors present", sc.n_expected);
        list_check(checks, "expected_tensors", &c.missing, none, "%zu missing: ", NULL);
        snprintf(none, sizeof none, "%zu tensors have the shapes the architecture implies",
                 sc.n_expected);
        list_check(checks, "tensor_shapes", &sc.bad_shapes, none, "%zu wrong: ", NULL);
        if (sc.buffers.count > 0) {
            char list[2048];
            join_list(list, sizeof list, &sc.buffers);
            snprintf(buffers, sizeof buffers, " (stored buffers, not parameters: %s)", list);
        }
        list_check(checks, "unexpected_tensors", &sc.unexpected, "none", "%zu: ", buffers);
    }
    free(c.hit);
    list_free(&c.missing);
    list_free(&sc.bad_shapes);
    list_free(&sc.unexpected);
    list_free(&sc.buffers);
}

static void add_total(json_t *by, const char *key, int64_t params, uint64_t bytes)
{
    json_t *entry = json_object_get(by, key);
    if (!entry) {
        entry = json_object();
        json_object_set_new(entry, "tensors", json_integer(0));
        json_object_set_new(entry, "params", json_integer(0));
        json_object_set_new(entry, "bytes", json_integer(0));
        json_object_set_new(by, key, entry);
    }
    json_int_t n_tensors = json_integer_value(json_object_get(entry, "tensors"));
    json_int_t n_params = json_integer_value(json_object_get(entry, "params"));
    json_int_t n_bytes = json_integer_value(json_object_get(entry, "bytes"));
    json_object_set_new(entry, "tensors", json_integer(n_tensors + 1));
    json_object_set_new(entry, "params", json_integer(n_params + params));
    json_object_set_new(entry, "bytes", json_integer(n_bytes + (json_int_t)bytes));
}

/* One row of the tensor table as JSON; s is NULL without --stats. NULL when out of memory. */
static json_t *tensor_json(const lp_weights *w, const lp_tensor *t, const lp_tensor_stats *s)
{
    json_t *jt = json_object();
    json_t *shape = json_array();
    if (!jt || !shape) {
        json_decref(jt);
        json_decref(shape);
        return NULL;
    }
    for (int d = 0; d < t->n_dims; d++)
        json_array_append_new(shape, json_integer(t->shape[d]));
    json_object_set_new(jt, "name", json_string(t->name));
    json_object_set_new(jt, "role", json_string(lp_role_name(t->role)));
    json_object_set_new(jt, "layer", t->layer >= 0 ? json_integer(t->layer) : json_null());
    json_object_set_new(jt, "expert", t->expert >= 0 ? json_integer(t->expert) : json_null());
    json_object_set_new(jt, "is_bias", json_boolean(t->is_bias));
    json_object_set_new(jt, "transposed", json_boolean(t->transposed));
    json_object_set_new(jt, "dtype", json_string(lp_dtype_name(t->dtype)));
    json_object_set_new(jt, "shape", shape);
    json_object_set_new(jt, "params", json_integer(t->n_elements));
    json_object_set_new(jt, "bytes", json_integer((json_int_t)t->n_bytes));
    json_object_set_new(jt, "file", json_string(lp_weights_file_name(w, t->file_index)));
    json_object_set_new(jt, "offset", json_integer((json_int_t)t->file_offset));
    if (s) {
        json_t *js = stats_json(s);
        if (!js) {
            json_decref(jt);
            return NULL;
        }
        json_object_set_new(jt, "stats", js);
    }
    return jt;
}

/* What lp_inspect_build_report fills while it walks the tensors. */
typedef struct report_build {
    const lp_weights *w;
    bool stats, embed_tensors;
    json_t *report, *files, *checks, *tensors, *by_dtype, *by_role;
    float *buf;                  /* [STATS_CHUNK] with stats */
    lp_tensor_stats *all_stats;  /* [n_tensors] with stats */
    name_list nonfinite;         /* tensors with NaN or Inf */
    int64_t n_nonfinite, total_params;
    uint64_t total_bytes;
} report_build;

/* Path, format, files, architecture (and why there is none). */
static void report_head(report_build *b)
{
    const lp_weights *w = b->w;
    json_object_set_new(b->report, "path", json_string(w->path));
    json_object_set_new(b->report, "format", json_string(lp_weights_format_name(w->format)));
    for (int i = 0; i < lp_weights_file_count(w); i++)
        json_array_append_new(b->files, json_string(lp_weights_file_name(w, i)));
    json_object_set(b->report, "files", b->files);
    json_object_set_new(b->report, "architecture",
                        w->arch ? lp_arch_to_json(w->arch) : json_null());
    if (w->arch_note[0])
        json_object_set_new(b->report, "architecture_note", json_string(w->arch_note));
    if (w->gguf && !w->arch) /* nothing describes the file: show what it says about itself */
        json_object_set_new(b->report, "metadata", lp_gguf_metadata_json(w));
}

/* One tensor: its statistics, its row (embed_tensors), the totals by dtype and by role. */
static lp_status report_tensor(report_build *b, size_t i, lp_error *err)
{
    const lp_tensor *t = &b->w->tensors[i];
    lp_status status;
    if (b->stats) {
        lp_tensor_stats *s = &b->all_stats[i];
        if ((status = compute_stats(t, b->buf, s, err)) != LP_OK)
            return status;
        if (s->n_nan + s->n_inf > 0) {
            b->n_nonfinite += s->n_nan + s->n_inf;
            list_add(&b->nonfinite, t->name);
        }
    }
    if (b->embed_tensors) {
        json_t *jt = tensor_json(b->w, t, b->stats ? &b->all_stats[i] : NULL);
        if (!jt)
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        json_array_append_new(b->tensors, jt);
    }
    if (!lp_add_i64(b->total_params, t->n_elements, &b->total_params) ||
        !lp_add_u64(b->total_bytes, t->n_bytes, &b->total_bytes))
        return lp_error_set(err, LP_ERR_RANGE, "parameter total overflows 64 bits");
    add_total(b->by_dtype, lp_dtype_name(t->dtype), t->n_elements, t->n_bytes);
    char role_key[48];
    snprintf(role_key, sizeof role_key, "%s%s", lp_role_name(t->role), t->is_bias ? ".bias" : "");
    add_total(b->by_role, role_key, t->n_elements, t->n_bytes);
    return LP_OK;
}

/* params (totals), n_tensors, tensors: the report's members after the architecture. */
static void report_totals(report_build *b)
{
    json_t *params = json_object();
    json_object_set_new(params, "total", json_integer(b->total_params));
    json_object_set_new(params, "bytes", json_integer((json_int_t)b->total_bytes));
    json_object_set_new(params, "by_dtype", b->by_dtype);
    json_object_set_new(params, "by_role", b->by_role);
    b->by_dtype = b->by_role = NULL;
    json_object_set_new(b->report, "params", params);
    json_object_set_new(b->report, "n_tensors", json_integer((json_int_t)b->w->n_tensors));
    json_object_set(b->report, "tensors", b->tensors);
}

/* With --stats: every value finite. */
static lp_status finite_check(report_build *b, lp_error *err)
{
    if (b->nonfinite.oom)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    char list[2048], detail[2400];
    if (b->n_nonfinite == 0) {
        snprintf(detail, sizeof detail, "no NaN or Inf in %zu tensors", b->w->n_tensors);
    } else {
        join_list(list, sizeof list, &b->nonfinite);
        snprintf(detail, sizeof detail, "%" PRId64 " NaN/Inf values in %zu tensors: %s",
                 b->n_nonfinite, b->nonfinite.count, list);
    }
    json_array_append_new(b->checks, make_check("finite_values", b->n_nonfinite == 0, detail));
    return LP_OK;
}

static lp_status report_body(report_build *b, lp_error *err)
{
    lp_status status = LP_OK;
    report_head(b);
    for (size_t i = 0; i < b->w->n_tensors && status == LP_OK; i++)
        status = report_tensor(b, i, err);
    if (status != LP_OK)
        return status;
    report_totals(b);
    if (b->w->arch_incomplete) {
        char detail[LP_ERROR_MSG_MAX + 32];
        snprintf(detail, sizeof detail, "incomplete: %s", b->w->arch_note);
        json_array_append_new(b->checks, make_check("architecture", false, detail));
    }
    if (b->w->arch) {
        arch_checks(b->w, b->checks, &status, err);
        if (status != LP_OK)
            return status;
    }
    tied_report(b->w, b->stats, b->report, b->checks);
    if (b->stats && (status = finite_check(b, err)) != LP_OK)
        return status;
    json_object_set(b->report, "checks", b->checks);
    return LP_OK;
}

/* Build the report of open weights. With embed_tensors the "tensors" member holds one object
 * per tensor; without, it is a null placeholder that keeps the member's place in the key order
 * (the CLI streams the rows there: with 300,000 tensors the objects would cost ~20x the file).
 * With stats, *stats_out receives one lp_tensor_stats per tensor (caller frees). Without stats,
 * reads no tensor data except the embedding/classifier comparison (sampled above
 * FULL_COMPARE_MAX_BYTES). */
lp_status lp_inspect_build_report(const lp_weights *w, bool stats, bool embed_tensors, json_t **out,
                                  lp_tensor_stats **stats_out, lp_error *err)
{
    *out = NULL;
    if (stats_out)
        *stats_out = NULL;
    report_build b = {.w = w, .stats = stats, .embed_tensors = embed_tensors};
    b.report = json_object();
    b.files = json_array();
    b.checks = json_array();
    b.tensors = embed_tensors ? json_array() : json_null();
    b.by_dtype = json_object();
    b.by_role = json_object();
    b.buf = stats ? malloc(STATS_CHUNK * sizeof(float)) : NULL;
    b.all_stats = stats ? calloc(w->n_tensors ? w->n_tensors : 1, sizeof *b.all_stats) : NULL;
    lp_status status;
    if (!b.report || !b.files || !b.tensors || !b.checks || !b.by_dtype || !b.by_role ||
        (stats && (!b.buf || !b.all_stats)))
        status = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    else
        status = report_body(&b, err);
    json_decref(b.files);
    json_decref(b.tensors);
    json_decref(b.checks);
    json_decref(b.by_dtype);
    json_decref(b.by_role);
    list_free(&b.nonfinite);
    free(b.buf);
    if (status != LP_OK) {
        json_decref(b.report);
        free(b.all_stats);
        return status;
    }
    if (stats_out)
        *stats_out = b.all_stats;
    else
        free(b.all_stats);
    *out = b.report;
    return LP_OK;
}

lp_status lp_inspect_report(const lp_weights *w, bool stats, json_t **out, lp_error *err)
{
    return lp_inspect_build_report(w, stats, true, out, NULL, err);
}

/* ---- streamed JSON -------------------------------------------------------------------------- */

#define REPORT_JSON_FLAGS (JSON_INDENT(2) | JSON_REAL_PRECISION(9) | JSON_ENCODE_ANY)

/* Write text with every line after the first indented by depth levels more: a value dumped on
 * its own then reads as if jansson had dumped it nested. Newlines inside strings are escaped
 * ("\\n"), so every raw newline is formatting. */
static bool write_indented(FILE *f, const char *text, int depth)
{
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) + 1 : strlen(p);
        if (fwrite(p, 1, len, f) != len)
            return false;
        if (nl && fprintf(f, "%*s", 2 * depth, "") < 0)
            return false;
        p += len;
    }
    return true;
}

static bool write_value(FILE *f, json_t *value, int depth)
{
    char *text = json_dumps(value, REPORT_JSON_FLAGS);
    if (!text)
        return false;
    bool ok = write_indented(f, text, depth);
    free(text);
    return ok;
}

/* The document json_dumps(report) would give with "tensors" filled in, byte for byte, but with
 * one tensor object alive at a time: the summary's members are written around a tensors array
 * whose objects are built, dumped and freed one by one. */
lp_status lp_inspect_write_report_json(FILE *f, json_t *report, const lp_weights *w,
                                   const lp_tensor_stats *stats, lp_error *err)
{
    bool ok = fputs("{", f) >= 0;
    bool first = true;
    for (void *it = json_object_iter(report); it && ok; it = json_object_iter_next(report, it)) {
        const char *key = json_object_iter_key(it);
        json_t *key_json = json_string(key);
        ok = key_json && fputs(first ? "\n  " : ",\n  ", f) >= 0 && write_value(f, key_json, 1) &&
             fputs(": ", f) >= 0;
        json_decref(key_json);
        first = false;
        if (!ok)
            break;
        if (strcmp(key, "tensors") != 0) {
            ok = write_value(f, json_object_iter_value(it), 1);
            continue;
        }
        if (w->n_tensors == 0) {
            ok = fputs("[]", f) >= 0;
            continue;
        }
        ok = fputs("[", f) >= 0;
        for (size_t i = 0; i < w->n_tensors && ok; i++) {
            json_t *jt = tensor_json(w, &w->tensors[i], stats ? &stats[i] : NULL);
            ok = jt && fputs(i ? ",\n    " : "\n    ", f) >= 0 && write_value(f, jt, 2);
            json_decref(jt);
        }
        ok = ok && fputs("\n  ]", f) >= 0;
    }
    ok = ok && fputs(first ? "}\n" : "\n}\n", f) >= 0 && fflush(f) == 0;
    if (!ok)
        return lp_error_set(err, LP_ERR_IO, "writing the JSON report failed (out of memory or "
                                            "output error)");
    return LP_OK;
}

lp_status lp_inspect_write_json(const lp_weights *w, bool stats, FILE *out, lp_error *err)
{
    json_t *report;
    lp_tensor_stats *all_stats = NULL;
    lp_status status = lp_inspect_build_report(w, stats, false, &report, &all_stats, err);
    if (status != LP_OK)
        return status;
    status = lp_inspect_write_report_json(out, report, w, all_stats, err);
    json_decref(report);
    free(all_stats);
    return status;
}

