/* A synthetic model's GGUF form, as llama.cpp's convert_hf_to_gguf.py writes the family: its
 * architecture name and keys, llama.cpp's tensor names, and the converter's layouts. The
 * weights are the safetensors form's (lp_synth_collect_parts), so the two forms trace alike.
 *
 * What the converter does that this file does too:
 *   - Llama, Mistral, Mixtral ("llama"): q and k rows permuted per head from the halves RoPE
 *     layout to adjacent pairs (llama.cpp rotates adjacent pairs for "llama").
 *   - Gemma, 2 and 3: every norm weight stored as 1 + w (its graph runs a plain RMSNorm).
 *   - GPT-2, GPT-NeoX, Falcon, BLOOM, MPT, Phi-3: q | k | v fused as attn_qkv (NeoX, Falcon and
 *     BLOOM reordered from their per-head or per-group layouts); Phi-3's gate | up as ffn_up.
 *   - experts stacked per layer as ffn_{gate,up,down}_exps [n_experts, rows, cols] (gpt-oss's
 *     gate and up de-interleaved, its biases [n_experts, rows]); StableLM's per-head q/k norms
 *     stacked [heads, head_dim]; DeepSeek's kv_b split per head into attn_k_b [kv_lora, nope]
 *     (transposed) and attn_v_b [v_head_dim, kv_lora].
 * What a GGUF cannot carry (no key in llama.cpp): Mistral's window on the "llama"
 * architecture and StarCoder2's, MPT's logit_scale, Qwen MoE's dense layers, Qwen3-MoE without norm_topk_prob,
 * Falcon's sequential and ALiBi variants; OPT has no llama.cpp architecture. Those are refused, or (window, logit_scale)
 * left out as the converter leaves them out. */
#include "trace/synth/synth_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the families ------------------------------------------------------------------------- */

typedef struct gguf_family {
    const char *arch;   /* general.architecture; NULL: llama.cpp has none */
    bool fused_qkv;     /* attn_qkv */
    bool permute_qk;    /* Llama's converter permutes q and k to adjacent pairs */
    bool norm_plus_one; /* Gemma: norms stored as 1 + w */
    bool layer_norm;    /* LayerNorm: attention.layer_norm_epsilon */
    bool rope;          /* RoPE keys (freq_base, dimension_count) */
} gguf_family;

static const gguf_family GGUF_FAMILIES[LP_SYNTH_FAMILY_COUNT] = {
    [LP_SYNTH_LLAMA] = {"llama", false, true, false, false, true},
    [LP_SYNTH_MISTRAL] = {"llama", false, true, false, false, true},
    [LP_SYNTH_MIXTRAL] = {"llama", false, true, false, false, true},
    [LP_SYNTH_QWEN2] = {"qwen2", false, false, false, false, true},
    [LP_SYNTH_QWEN3] = {"qwen3", false, false, false, false, true},
    [LP_SYNTH_GEMMA] = {"gemma", false, false, true, false, true},
    [LP_SYNTH_GEMMA2] = {"gemma2", false, false, true, false, true},
    [LP_SYNTH_GEMMA3] = {"gemma3", false, false, true, false, true},
    [LP_SYNTH_GPT2] = {"gpt2", true, false, false, true, false},
    [LP_SYNTH_NEOX] = {"gptneox", true, false, false, true, true},
    [LP_SYNTH_PHI] = {"phi2", false, false, false, true, true},
    [LP_SYNTH_GPTJ] = {"gptj", false, false, false, true, true},
    [LP_SYNTH_STABLELM] = {"stablelm", false, false, false, true, true},
    [LP_SYNTH_FALCON] = {"falcon", true, false, false, true, true},
    [LP_SYNTH_BLOOM] = {"bloom", true, false, false, true, false},
    [LP_SYNTH_OPT] = {NULL, false, false, false, true, false},
    [LP_SYNTH_PHI3] = {"phi3", true, false, false, false, true},
    [LP_SYNTH_OLMO2] = {"olmo2", false, false, false, false, true},
    [LP_SYNTH_QWEN2_MOE] = {"qwen2moe", false, false, false, false, true},
    [LP_SYNTH_QWEN3_MOE] = {"qwen3moe", false, false, false, false, true},
    [LP_SYNTH_DEEPSEEK_V2] = {"deepseek2", false, false, false, false, true},
    [LP_SYNTH_DEEPSEEK_V3] = {"deepseek2", false, false, false, false, true},
    [LP_SYNTH_GPT_OSS] = {"gpt-oss", false, false, false, false, true},
    [LP_SYNTH_MPT] = {"mpt", true, false, false, true, false},
    [LP_SYNTH_STARCODER2] = {"starcoder2", false, false, false, true, true},
};

static bool is_deepseek(const lp_synth_spec *s)
{
    return s->family == LP_SYNTH_DEEPSEEK_V2 || s->family == LP_SYNTH_DEEPSEEK_V3;
}

/* The spec's variants a GGUF of its architecture cannot express. */
static lp_status check_expressible(const lp_synth_spec *s, lp_error *err)
{
    const char *name = lp_synth_family_name(s->family);
    if (!GGUF_FAMILIES[s->family].arch)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: llama.cpp has no GGUF architecture for "
                                                     "this family (write safetensors)", name);
    if (s->family == LP_SYNTH_FALCON && (!s->parallel || s->alibi))
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "falcon: llama.cpp's falcon graph is parallel "
                                                     "with RoPE; this spec is %s",
                            s->alibi ? "ALiBi" : "sequential");
    if (s->family == LP_SYNTH_QWEN3_MOE && !s->norm_topk_prob)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "qwen3_moe: llama.cpp's qwen3moe graph always "
                                                     "renormalizes the top-k weights; this spec "
                                                     "has norm_topk_prob false");
    if (s->family == LP_SYNTH_QWEN2_MOE || s->family == LP_SYNTH_QWEN3_MOE)
        for (int l = 0; l < s->n_layers; l++)
            if (!lp_synth_layer_routed(s, l))
                return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: layer %d is dense, and a GGUF of "
                                                             "%s routes every layer",
                                    name, l, GGUF_FAMILIES[s->family].arch);
    return LP_OK;
}

/* ---- tensor names --------------------------------------------------------------------------- */

/* llama.cpp's name (without .weight / .bias) for a part of the family; NULL when unknown. */
static const char *gguf_base_name(const lp_synth_spec *s, const lp_synth_tensor *t)
{
    const gguf_family *f = &GGUF_FAMILIES[s->family];
    switch (t->role) {
    case LP_ROLE_TOKEN_EMBD: return "token_embd";
    case LP_ROLE_POS_EMBD: return "position_embd";
    case LP_ROLE_EMBD_NORM: return "token_embd_norm";
    case LP_ROLE_ATTN_NORM: return "attn_norm";
    case LP_ROLE_ATTN_Q: return f->fused_qkv ? "attn_qkv" : "attn_q";
    case LP_ROLE_ATTN_K: return f->fused_qkv ? "attn_qkv" : "attn_k";
    case LP_ROLE_ATTN_V: return f->fused_qkv ? "attn_qkv" : "attn_v";
    case LP_ROLE_ATTN_O: return "attn_output";
    case LP_ROLE_ATTN_Q_NORM: return "attn_q_norm";
    case LP_ROLE_ATTN_K_NORM: return "attn_k_norm";
    case LP_ROLE_ATTN_POST_NORM: return "post_attention_norm";
    case LP_ROLE_ATTN_Q_A: return "attn_q_a";
    case LP_ROLE_ATTN_Q_A_NORM: return "attn_q_a_norm";
    case LP_ROLE_ATTN_Q_B: return "attn_q_b";
    case LP_ROLE_ATTN_KV_A: return "attn_kv_a_mqa";
    case LP_ROLE_ATTN_KV_A_NORM: return "attn_kv_a_norm";
    case LP_ROLE_ATTN_SINKS: return "attn_sinks";
    case LP_ROLE_FFN_NORM:
        /* gpt-oss's converter names the FFN's input norm after its HF name */
        return s->family == LP_SYNTH_GPT_OSS                 ? "post_attention_norm"
               : s->family == LP_SYNTH_FALCON && s->new_arch ? "attn_norm_2"
                                                              : "ffn_norm";
    case LP_ROLE_FFN_GATE: return s->family == LP_SYNTH_PHI3 ? "ffn_up" : "ffn_gate";
    case LP_ROLE_FFN_UP: return "ffn_up";
    case LP_ROLE_FFN_DOWN: return "ffn_down";
    case LP_ROLE_FFN_POST_NORM: return "post_ffw_norm";
    case LP_ROLE_ROUTER: return "ffn_gate_inp";
    case LP_ROLE_ROUTER_BIAS: return "exp_probs_b";
    case LP_ROLE_EXPERT_GATE: return "ffn_gate_exps";
    case LP_ROLE_EXPERT_UP: return "ffn_up_exps";
    case LP_ROLE_EXPERT_DOWN: return "ffn_down_exps";
    case LP_ROLE_SHARED_GATE: return "ffn_gate_shexp";
    case LP_ROLE_SHARED_UP: return "ffn_up_shexp";
    case LP_ROLE_SHARED_DOWN: return "ffn_down_shexp";
    case LP_ROLE_SHARED_EXPERT_GATE: return "ffn_gate_inp_shexp";
    case LP_ROLE_OUTPUT_NORM: return "output_norm";
    case LP_ROLE_LM_HEAD: return "output";
    default: return NULL;
    }
}

static void gguf_name(const lp_synth_tensor *t, const char *base, char *out, size_t size)
{
    /* V3's e_score_correction_bias is a vector the converter names a bias */
    const char *suffix = t->is_bias || t->role == LP_ROLE_ROUTER_BIAS ? "bias" : "weight";
    if (t->layer >= 0)
        snprintf(out, size, "blk.%d.%s.%s", t->layer, base, suffix);
    else
        snprintf(out, size, "%s.%s", base, suffix);
}

/* ---- assembling tensors from parts ---------------------------------------------------------- */

/* One GGUF tensor: parts with its name appended in the order asked, rows stacked (q | k | v,
 * gate | up) or, for parts of an expert or a head, one slab per part. */
typedef struct out_tensor {
    char name[96];
    float *data;
    int64_t rows, cols; /* rows summed over the parts; cols 0 for vectors */
    int64_t n_slabs;    /* experts or heads stacked; 0 when rows are concatenated */
    bool matrix;
} out_tensor;

typedef struct out_list {
    out_tensor *items;
    size_t n, cap;
} out_list;

static void out_list_free(out_list *o)
{
    for (size_t i = 0; i < o->n; i++)
        free(o->items[i].data);
    free(o->items);
}

static out_tensor *find_or_add(out_list *o, const char *name, lp_error *err)
{
    for (size_t i = 0; i < o->n; i++)
        if (strcmp(o->items[i].name, name) == 0)
            return &o->items[i];
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        out_tensor *grown = realloc(o->items, cap * sizeof *grown);
        if (!grown) {
            lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
            return NULL;
        }
        o->items = grown;
        o->cap = cap;
    }
    out_tensor *t = &o->items[o->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

/* Append rows x width values to the tensor named name. */
static lp_status append_rows(out_list *o, const char *name, const float *data, int64_t rows,
                             int64_t cols, bool slab, lp_error *err)
{
    out_tensor *t = find_or_add(o, name, err);
    if (!t)
        return LP_ERR_NOMEM;
    int64_t width = cols > 0 ? cols : 1;
    if (t->rows > 0 && t->cols != cols)
        return lp_error_set(err, LP_ERR_USAGE, "%s: parts of %lld and %lld columns", name,
                            (long long)t->cols, (long long)cols);
    float *grown = realloc(t->data, (size_t)((t->rows + rows) * width) * sizeof *grown);
    if (!grown)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
    memcpy(grown + t->rows * width, data, (size_t)(rows * width) * sizeof *grown);
    t->data = grown;
    t->rows += rows;
    t->cols = cols;
    t->matrix = cols > 0;
    t->n_slabs += slab ? 1 : 0;
    return LP_OK;
}

/* Llama's converter: row h*hd + j*(d/2) + i (halves over the d rotated dims) goes to
 * h*hd + 2i + j (adjacent pairs); the converter permutes whole heads (d = hd), and with partial
 * rotary only the rotated dims move, so that adjacent pairs over them are the halves' pairs. */
static void permute_heads(float *data, const float *src, int64_t rows, int64_t width,
                          int64_t head_dim, int64_t rotated)
{
    int64_t half = rotated / 2;
    for (int64_t r = 0; r < rows; r++) {
        int64_t h = r / head_dim, within = r % head_dim, to = within;
        if (within < rotated)
            to = 2 * (within % half) + within / half;
        memcpy(data + (h * head_dim + to) * width, src + r * width, (size_t)width * sizeof *data);
    }
}

static bool is_norm_weight(const lp_synth_tensor *t)
{
    switch (t->role) {
    case LP_ROLE_ATTN_NORM: case LP_ROLE_FFN_NORM: case LP_ROLE_ATTN_POST_NORM:
    case LP_ROLE_FFN_POST_NORM: case LP_ROLE_ATTN_Q_NORM: case LP_ROLE_ATTN_K_NORM:
    case LP_ROLE_OUTPUT_NORM: case LP_ROLE_EMBD_NORM:
        return !t->is_bias;
    default:
        return false;
    }
}

/* DeepSeek's kv_b [heads * (nope + v), kv_lora] as llama.cpp's newer converter splits it:
 * attn_k_b [heads, kv_lora, nope] (each head's k rows transposed), attn_v_b [heads, v, kv_lora]. */
static lp_status split_kv_b(const lp_synth_spec *s, const lp_synth_part *p, out_list *o,
                            lp_error *err)
{
    int64_t nh = s->n_heads, nope = s->head_dim - s->rope_dim, vd = s->v_head_dim, r = s->kv_lora;
    float *kb = malloc((size_t)(nh * r * nope) * sizeof *kb);
    float *vb = malloc((size_t)(nh * vd * r) * sizeof *vb);
    lp_status st = kb && vb ? LP_OK : lp_error_set(err, LP_ERR_NOMEM, "kv_b: out of memory");
    for (int64_t h = 0; st == LP_OK && h < nh; h++)
        for (int64_t c = 0; c < r; c++) {
            for (int64_t i = 0; i < nope; i++)
                kb[(h * r + c) * nope + i] = p->data[(h * (nope + vd) + i) * r + c];
            for (int64_t j = 0; j < vd; j++)
                vb[(h * vd + j) * r + c] = p->data[(h * (nope + vd) + nope + j) * r + c];
        }
    char name[96];
    for (int64_t h = 0; st == LP_OK && h < nh; h++) {
        snprintf(name, sizeof name, "blk.%d.attn_k_b.weight", p->t.layer);
        st = append_rows(o, name, kb + h * r * nope, r, nope, true, err);
        snprintf(name, sizeof name, "blk.%d.attn_v_b.weight", p->t.layer);
        if (st == LP_OK)
            st = append_rows(o, name, vb + h * vd * r, vd, r, true, err);
    }
    free(kb);
    free(vb);
    return st;
}

/* One part, transformed as the converter does, appended to its tensor. */
static lp_status add_part(const lp_synth_spec *s, const lp_synth_part *p, out_list *o,
                          lp_error *err)
{
    const gguf_family *f = &GGUF_FAMILIES[s->family];
    if (p->t.role == LP_ROLE_ATTN_KV_B)
        return split_kv_b(s, p, o, err);
    const char *base = gguf_base_name(s, &p->t);
    if (!base)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: a %s tensor has no GGUF name",
                            lp_synth_family_name(s->family), lp_role_name(p->t.role));
    char name[96];
    gguf_name(&p->t, base, name, sizeof name);
    int64_t rows = p->t.rows, cols = p->t.cols, width = cols > 0 ? cols : 1;
    float *data = malloc((size_t)(rows * width) * sizeof *data);
    if (!data)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
    memcpy(data, p->data, (size_t)(rows * width) * sizeof *data);
    if (f->permute_qk && (p->t.role == LP_ROLE_ATTN_Q || p->t.role == LP_ROLE_ATTN_K))
        permute_heads(data, p->data, rows, width, s->head_dim,
                      s->rope_dim > 0 ? s->rope_dim : s->head_dim);
    if (f->norm_plus_one && is_norm_weight(&p->t))
        for (int64_t i = 0; i < rows * width; i++)
            data[i] += 1.0f;
    /* Qwen2-MoE's shared-expert gate is [1, hidden] in transformers and a vector in GGUF */
    if (p->t.role == LP_ROLE_SHARED_EXPERT_GATE) {
        rows = cols;
        cols = 0;
    }
    lp_status st = append_rows(o, name, data, rows, cols, p->t.expert >= 0, err);
    free(data);
    return st;
}

static lp_status add_tensors(const lp_synth_spec *s, const out_list *o, lp_gguf_writer *w,
                             lp_error *err)
{
    lp_status st = LP_OK;
    for (size_t i = 0; st == LP_OK && i < o->n; i++) {
        const out_tensor *t = &o->items[i];
        int64_t shape[3];
        int n_dims = 0;
        if (t->n_slabs > 0)
            shape[n_dims++] = t->n_slabs;
        shape[n_dims++] = t->n_slabs > 0 ? t->rows / t->n_slabs : t->rows;
        if (t->matrix)
            shape[n_dims++] = t->cols;
        st = lp_gguf_writer_add_f32_as(w, t->name, t->matrix ? s->dtype : s->vector_dtype,
                                       n_dims, shape, t->data, err);
    }
    return st;
}

/* ---- metadata ------------------------------------------------------------------------------- */

typedef struct keys {
    const lp_synth_spec *s;
    lp_gguf_writer *w;
    const char *arch;
    lp_error *err;
    lp_status st;
} keys;

static const char *arch_key(const keys *k, const char *suffix, char *buf, size_t size)
{
    snprintf(buf, size, "%s.%s", k->arch, suffix);
    return buf;
}

static void key_u32(keys *k, const char *suffix, int64_t v)
{
    char key[128];
    if (k->st == LP_OK)
        k->st = lp_gguf_writer_set_u32(k->w, arch_key(k, suffix, key, sizeof key), (uint32_t)v,
                                       k->err);
}

static void key_f32(keys *k, const char *suffix, double v)
{
    char key[128];
    if (k->st == LP_OK)
        k->st = lp_gguf_writer_set_f32(k->w, arch_key(k, suffix, key, sizeof key), (float)v,
                                       k->err);
}

static void key_bool(keys *k, const char *suffix, bool v)
{
    char key[128];
    if (k->st == LP_OK)
        k->st = lp_gguf_writer_set_bool(k->w, arch_key(k, suffix, key, sizeof key), v, k->err);
}

static void key_str(keys *k, const char *suffix, const char *v)
{
    char key[128];
    if (k->st == LP_OK)
        k->st = lp_gguf_writer_set_str(k->w, arch_key(k, suffix, key, sizeof key), v, k->err);
}

/* Routed experts: counts, widths, and each family's routing keys. */
static void moe_keys(keys *k)
{
    const lp_synth_spec *s = k->s;
    if (s->n_experts == 0)
        return;
    key_u32(k, "expert_count", s->n_experts);
    key_u32(k, "expert_used_count", s->top_k);
    int64_t expert_ffn = s->expert_ffn > 0 ? s->expert_ffn : s->ffn;
    if (s->family == LP_SYNTH_MIXTRAL)
        return; /* feed_forward_length is the expert's */
    key_u32(k, "expert_feed_forward_length", expert_ffn);
    if (s->family == LP_SYNTH_QWEN2_MOE && s->shared_ffn > 0)
        key_u32(k, "expert_shared_feed_forward_length", s->shared_ffn);
    if (s->family == LP_SYNTH_QWEN2_MOE && s->norm_topk_prob)
        key_bool(k, "expert_weights_norm", true);
    if (!is_deepseek(s))
        return;
    key_u32(k, "expert_shared_count", s->n_shared);
    key_u32(k, "leading_dense_block_count", s->first_dense);
    key_u32(k, "expert_gating_func", s->family == LP_SYNTH_DEEPSEEK_V3 ? 2 : 1);
    key_u32(k, "expert_group_count", s->n_groups);
    key_u32(k, "expert_group_used_count", s->topk_groups);
    key_bool(k, "expert_weights_norm", s->norm_topk_prob);
    key_f32(k, "expert_weights_scale", s->routed_scaling > 0 ? s->routed_scaling : 1.0);
}

/* RoPE, its scaling, and the windows. */
static void position_keys(keys *k)
{
    const lp_synth_spec *s = k->s;
    if (GGUF_FAMILIES[s->family].rope) {
        key_f32(k, "rope.freq_base", s->rope_theta);
        key_u32(k, "rope.dimension_count", s->rope_dim > 0 ? s->rope_dim : s->head_dim);
    }
    if (s->yarn_factor > 0) {
        key_str(k, "rope.scaling.type", "yarn");
        key_f32(k, "rope.scaling.factor", s->yarn_factor);
        key_u32(k, "rope.scaling.original_context_length", s->yarn_orig);
        if (is_deepseek(s)) /* the converter's log multiplier: 0.1 * mscale_all_dim */
            key_f32(k, "rope.scaling.yarn_log_multiplier", 0.1 * s->yarn_mscale_all);
    }
    if (s->family == LP_SYNTH_PHI3 && s->orig_ctx > 0) {
        /* Phi3MiniModel: the original context and the attention factor it derives; the
         * factors go in as tensors */
        double scale = (double)s->n_ctx / (double)s->orig_ctx;
        key_u32(k, "rope.scaling.original_context_length", s->orig_ctx);
        key_f32(k, "rope.scaling.attn_factor",
                scale <= 1.0 ? 1.0 : sqrt(1.0 + log(scale) / log((double)s->orig_ctx)));
    }
    /* the converter writes no window for "llama" (Mistral) or "starcoder2" */
    bool window = s->window > 0 && s->family != LP_SYNTH_MISTRAL &&
                  s->family != LP_SYNTH_STARCODER2;
    if (window)
        key_u32(k, "attention.sliding_window", s->window);
    if (window && s->family == LP_SYNTH_GEMMA3 && s->sliding_pattern != 6)
        key_u32(k, "attention.sliding_window_pattern", s->sliding_pattern);
}

/* What one family's graph reads beyond the shared keys. */
static void family_keys(keys *k)
{
    const lp_synth_spec *s = k->s;
    if (s->family == LP_SYNTH_GEMMA2) {
        key_f32(k, "attn_logit_softcapping", s->attn_softcap);
        key_f32(k, "final_logit_softcapping", s->final_softcap);
    }
    if (s->family == LP_SYNTH_NEOX || s->family == LP_SYNTH_STABLELM)
        key_bool(k, "use_parallel_residual", s->parallel);
    if (s->family == LP_SYNTH_MPT) {
        /* 0 says learned positions (position_embd) to llama.cpp's mpt graph */
        key_f32(k, "attention.max_alibi_bias", !s->alibi ? 0.0 : s->alibi_max > 0 ? s->alibi_max : 8.0);
        if (s->qkv_clip > 0)
            key_f32(k, "attention.clamp_kqv", s->qkv_clip);
    }
    if (is_deepseek(s)) {
        key_u32(k, "attention.kv_lora_rank", s->kv_lora);
        key_u32(k, "attention.q_lora_rank", s->q_lora);
    }
}

static void hparam_keys(keys *k)
{
    const lp_synth_spec *s = k->s;
    const gguf_family *f = &GGUF_FAMILIES[s->family];
    if (k->st == LP_OK)
        k->st = lp_gguf_writer_set_str(k->w, "general.architecture", f->arch, k->err);
    if (k->st == LP_OK)
        k->st = lp_gguf_writer_set_str(k->w, "general.name", lp_synth_family_name(s->family),
                                       k->err);
    key_u32(k, "block_count", s->n_layers);
    key_u32(k, "context_length", s->n_ctx);
    key_u32(k, "embedding_length", s->hidden);
    key_u32(k, "feed_forward_length", s->ffn);
    key_u32(k, "attention.head_count", s->n_heads);
    /* the gpt2, gptneox and gptj converters write no kv head count (always multi-head) */
    if (s->family != LP_SYNTH_GPT2 && s->family != LP_SYNTH_NEOX && s->family != LP_SYNTH_GPTJ)
        key_u32(k, "attention.head_count_kv", s->n_kv_heads);
    if (!f->layer_norm) {
        key_u32(k, "attention.key_length", s->head_dim);
        key_u32(k, "attention.value_length", is_deepseek(s) ? s->v_head_dim : s->head_dim);
    }
    key_f32(k, f->layer_norm ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon",
            s->norm_eps);
    key_u32(k, "vocab_size", s->vocab);
    position_keys(k);
    moe_keys(k);
    family_keys(k);
}

/* The single characters of the vocabulary, most useful first: GPT-2's byte-level space, the
 * lowercase letters, digits, common punctuation, then every other printable ASCII byte. */
static int64_t vocab_chars(char out[96][3])
{
    static const char first[] = "abcdefghijklmnopqrstuvwxyz0123456789.,!?'-:;()\"";
    int64_t n = 0;
    out[n][0] = '\xc4', out[n][1] = '\xa0', out[n][2] = 0; /* U+0120: a space, byte-level */
    n++;
    for (const char *c = first; *c; c++, n++)
        out[n][0] = *c, out[n][1] = 0;
    for (int c = '!'; c <= '~'; c++)
        if (!strchr(first, c)) {
            out[n][0] = (char)c, out[n][1] = 0;
            n++;
        }
    return n;
}

/* A byte-level BPE vocabulary of spec->vocab tokens: <unk> <s> </s>, then single characters
 * (vocab_chars), then control tokens <|tN|>; no merges, so text is encoded character by
 * character. */
static lp_status vocab_keys(const lp_synth_spec *s, lp_gguf_writer *w, lp_error *err)
{
    int64_t V = s->vocab;
    char chars[96][3];
    int64_t n_chars = vocab_chars(chars);
    char (*text)[32] = calloc((size_t)V, sizeof *text);
    const char **tokens = calloc((size_t)V, sizeof *tokens);
    int32_t *types = calloc((size_t)V, sizeof *types);
    lp_status st = text && tokens && types
                       ? LP_OK
                       : lp_error_set(err, LP_ERR_NOMEM, "vocabulary of %lld: out of memory",
                                      (long long)V);
    static const char *const specials[3] = {"<unk>", "<s>", "</s>"};
    for (int64_t t = 0; st == LP_OK && t < V; t++) {
        bool is_char = t >= 3 && t - 3 < n_chars;
        if (t < 3)
            snprintf(text[t], sizeof text[t], "%s", specials[t]);
        else if (is_char)
            snprintf(text[t], sizeof text[t], "%s", chars[t - 3]);
        else
            snprintf(text[t], sizeof text[t], "<|t%lld|>", (long long)t);
        types[t] = is_char ? 1 : 3; /* llama.cpp: 1 normal, 3 control */
        tokens[t] = text[t];
    }
    if (st == LP_OK)
        st = lp_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2", err);
    if (st == LP_OK)
        st = lp_gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2", err);
    if (st == LP_OK)
        st = lp_gguf_writer_set_strs(w, "tokenizer.ggml.tokens", tokens, (size_t)V, err);
    if (st == LP_OK)
        st = lp_gguf_writer_set_array(w, "tokenizer.ggml.token_type", LP_GGUF_INT32, types,
                                      (size_t)V, err);
    if (st == LP_OK)
        st = lp_gguf_writer_set_strs(w, "tokenizer.ggml.merges", NULL, 0, err);
    if (st == LP_OK)
        st = lp_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)s->bos_id, err);
    if (st == LP_OK)
        st = lp_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)s->eos_id, err);
    free(text);
    free(tokens);
    free(types);
    return st;
}

/* Phi-3's longrope factors: F32 tensors of rope_dim / 2 values (1 where the spec has none). */
static lp_status longrope_tensors(const lp_synth_spec *s, lp_gguf_writer *w, lp_error *err)
{
    if (s->family != LP_SYNTH_PHI3 || s->orig_ctx <= 0)
        return LP_OK;
    int64_t n = (s->rope_dim > 0 ? s->rope_dim : s->head_dim) / 2;
    float *f = malloc((size_t)(2 * n) * sizeof *f);
    if (!f)
        return lp_error_set(err, LP_ERR_NOMEM, "longrope factors: out of memory");
    for (int64_t i = 0; i < n; i++) {
        f[i] = (float)(s->long_factor ? s->long_factor[i] : 1.0);
        f[n + i] = (float)(s->short_factor ? s->short_factor[i] : 1.0);
    }
    lp_status st = lp_gguf_writer_add(w, "rope_factors_long.weight", LP_DTYPE_F32, 1, &n, f, err);
    if (st == LP_OK)
        st = lp_gguf_writer_add(w, "rope_factors_short.weight", LP_DTYPE_F32, 1, &n, f + n, err);
    free(f);
    return st;
}

/* Metadata, vocabulary and tensors of spec's GGUF form into w; LP_ERR_UNSUPPORTED for a family
 * or variant llama.cpp has no architecture for. */
static lp_status build(const lp_synth_spec *spec, lp_gguf_writer *w, lp_error *err)
{
    lp_status st = check_expressible(spec, err);
    if (st != LP_OK)
        return st;
    keys k = {spec, w, GGUF_FAMILIES[spec->family].arch, err, LP_OK};
    hparam_keys(&k);
    if ((st = k.st) != LP_OK || (st = vocab_keys(spec, w, err)) != LP_OK ||
        (st = longrope_tensors(spec, w, err)) != LP_OK)
        return st;
    lp_synth_parts parts;
    if ((st = lp_synth_collect_parts(spec, &parts, err)) != LP_OK)
        return st;
    out_list out = {0};
    for (size_t i = 0; st == LP_OK && i < parts.n; i++)
        st = add_part(spec, &parts.items[i], &out, err);
    if (st == LP_OK)
        st = add_tensors(spec, &out, w, err);
    out_list_free(&out);
    lp_synth_parts_free(&parts);
    return st;
}

lp_status lp_synth_write_family_gguf(const char *out_dir, const lp_synth_spec *spec,
                                     lp_error *err)
{
    lp_status st = lp_synth_check_request(out_dir, spec, err);
    if (st != LP_OK)
        return st;
    lp_gguf_writer *w = NULL;
    if ((st = lp_gguf_writer_create(&w, err)) == LP_OK &&
        (st = build(spec, w, err)) == LP_OK) {
        lp_synth_file files[] = {{"model.gguf", NULL, NULL, w}};
        st = lp_synth_commit(out_dir, files, 1, err);
    }
    lp_gguf_writer_destroy(w);
    return st;
}
