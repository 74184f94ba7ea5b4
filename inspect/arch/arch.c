/* lp_arch defaults, derived fields and the checks every reader shares; the family tables the
 * readers share. */
#include "inspect/arch/arch_internal.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"

void lp_arch_init(lp_arch *arch)
{
    memset(arch, 0, sizeof *arch);
    arch->norm_eps = 1e-5;
    arch->rope_theta = 10000.0;
    arch->partial_rotary = 1.0;
    arch->embed_scale = 1.0;
    arch->final_norm = true;
    arch->bos_token_id = -1;
    arch->eos_token_id = -1;
    arch->storage_dtype = LP_DTYPE_INVALID;
    arch->alibi_max_bias = 8.0;
}

bool lp_arch_name_in(const char *name, const char *names)
{
    for (const char *p = names; *p;) {
        size_t n = strcspn(p, " ");
        bool prefix = n > 0 && p[n - 1] == '*';
        size_t len = prefix ? n - 1 : n;
        if (n > 0 && strncmp(name, p, len) == 0 && (prefix || name[len] == '\0'))
            return true;
        p += n;
        p += strspn(p, " ");
    }
    return false;
}

void lp_arch_apply_fixed(lp_arch *arch, const char *family, const lp_arch_fixed *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (lp_arch_name_in(family, rows[i].families))
            *(bool *)(void *)((char *)arch + rows[i].field) = rows[i].value;
}

lp_status lp_arch_read_file(const char *path, size_t max_bytes, lp_arch_text_reader read,
                            lp_arch *out, lp_error *err)
{
    char *text;
    size_t size;
    lp_status st = lp_read_file(path, max_bytes, &text, &size, err);
    if (st != LP_OK) {
        lp_arch_init(out);
        snprintf(out->source, sizeof out->source, "%s", path);
        return st;
    }
    st = read(text, size, path, out, err);
    free(text);
    return st;
}

void lp_arch_yarn_defaults(lp_rope_scaling *scaling)
{
    if (scaling->beta_fast == 0.0)
        scaling->beta_fast = 32.0;
    if (scaling->beta_slow == 0.0)
        scaling->beta_slow = 1.0;
}

static const char *source_of(const lp_arch *arch)
{
    return arch->source[0] ? arch->source : "<model>";
}

/* One check: a non-negative count that must be present (> 0) or may be absent (>= 0). */
static lp_status check_count(const lp_arch *arch, const char *key, int64_t value, bool required,
                             lp_error *err)
{
    if (value > LP_ARCH_MAX_COUNT)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: %s %lld exceeds the limit of %lld",
                            source_of(arch), key, (long long)value, (long long)LP_ARCH_MAX_COUNT);
    if (value < 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: %s is %lld, must not be negative",
                            source_of(arch), key, (long long)value);
    if (required && value == 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: %s is missing or 0, must be at least 1",
                            source_of(arch), key);
    return LP_OK;
}

/* The counts every description has: n_layers first (per-layer arrays depend on it). */
static const struct {
    const char *key;
    size_t field; /* offsetof(lp_arch, ...) of an int64_t */
    bool required;
} COUNTS[] = {
    {"vocab_size", offsetof(lp_arch, vocab_size), true},
    {"hidden_size", offsetof(lp_arch, hidden_size), true},
    {"n_heads", offsetof(lp_arch, n_heads), true},
    {"n_kv_heads", offsetof(lp_arch, n_kv_heads), false},
    {"head_dim", offsetof(lp_arch, head_dim), false},
    {"ffn_hidden", offsetof(lp_arch, ffn_hidden), false},
    {"n_ctx", offsetof(lp_arch, n_ctx), false},
    {"pos_table_rows", offsetof(lp_arch, pos_table_rows), false},
    {"pos_offset", offsetof(lp_arch, pos_offset), false},
    {"sliding_window", offsetof(lp_arch, sliding_window), false},
    {"n_experts", offsetof(lp_arch, n_experts), false},
    {"n_experts_per_tok", offsetof(lp_arch, n_experts_per_tok), false},
    {"n_shared_experts", offsetof(lp_arch, n_shared_experts), false},
    {"expert_ffn_hidden", offsetof(lp_arch, expert_ffn_hidden), false},
    {"shared_expert_ffn_hidden", offsetof(lp_arch, shared_expert_ffn_hidden), false},
    {"q_lora_rank", offsetof(lp_arch, q_lora_rank), false},
    {"kv_lora_rank", offsetof(lp_arch, kv_lora_rank), false},
    {"qk_rope_head_dim", offsetof(lp_arch, qk_rope_head_dim), false},
    {"qk_nope_head_dim", offsetof(lp_arch, qk_nope_head_dim), false},
    {"v_head_dim", offsetof(lp_arch, v_head_dim), false},
    {"n_mtp_layers", offsetof(lp_arch, n_mtp_layers), false},
};

static lp_status finish_counts(const lp_arch *arch, lp_error *err)
{
    lp_status st = check_count(arch, "n_layers", arch->n_layers, true, err);
    if (st != LP_OK)
        return st;
    if (arch->n_layers > LP_MAX_LAYERS)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: n_layers %lld exceeds the limit of %d layers",
                            source_of(arch), (long long)arch->n_layers, LP_MAX_LAYERS);
    for (size_t i = 0; i < sizeof COUNTS / sizeof COUNTS[0]; i++) {
        int64_t value = *(const int64_t *)(const void *)((const char *)arch + COUNTS[i].field);
        if ((st = check_count(arch, COUNTS[i].key, value, COUNTS[i].required, err)) != LP_OK)
            return st;
    }
    return LP_OK;
}

/* kv heads (none stated: multi-head attention) and head_dim (hidden / heads unless given). */
static lp_status finish_heads(lp_arch *arch, lp_error *err)
{
    const char *src = source_of(arch);
    if (arch->n_kv_heads == 0)
        arch->n_kv_heads = arch->n_heads;
    if (arch->n_kv_heads > arch->n_heads || arch->n_heads % arch->n_kv_heads != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: n_kv_heads %lld does not divide n_heads %lld", src,
                            (long long)arch->n_kv_heads, (long long)arch->n_heads);
    if (arch->head_dim != 0)
        return LP_OK;
    if (arch->hidden_size % arch->n_heads != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: n_heads %lld does not divide hidden_size %lld and head_dim "
                            "is not given",
                            src, (long long)arch->n_heads, (long long)arch->hidden_size);
    arch->head_dim = arch->hidden_size / arch->n_heads;
    arch->head_dim_explicit = false;
    return LP_OK;
}

/* longrope's factor lists: one per rotated pair; meaningless (and cleared) for other kinds. */
static lp_status finish_rope_factors(lp_arch *arch, lp_error *err)
{
    lp_rope_scaling *s = &arch->rope_scaling;
    if (s->kind != LP_ROPE_SCALING_LONGROPE) {
        s->n_factors = 0;
        memset(s->short_factor, 0, sizeof s->short_factor);
        memset(s->long_factor, 0, sizeof s->long_factor);
        return LP_OK;
    }
    if (s->n_factors != 0 && s->n_factors != arch->rope_dim / 2)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: longrope has %lld short/long factors, want rope_dim / 2 = %lld",
                            source_of(arch), (long long)s->n_factors,
                            (long long)(arch->rope_dim / 2));
    return LP_OK;
}

/* ALiBi's bias (0 without ALiBi, so descriptions of one model compare equal) and MPT's
 * clip, checked. */
static lp_status finish_alibi_clip(lp_arch *arch, lp_error *err)
{
    if (arch->pos_kind != LP_POS_ALIBI)
        arch->alibi_max_bias = 0.0;
    else if (!(arch->alibi_max_bias > 0.0) || !isfinite(arch->alibi_max_bias))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: alibi_max_bias %g must be positive",
                            source_of(arch), arch->alibi_max_bias);
    if (!(arch->qkv_clip >= 0.0) || !isfinite(arch->qkv_clip))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: qkv_clip %g must be a number >= 0 (0 = off)",
                            source_of(arch), arch->qkv_clip);
    return LP_OK;
}

/* RoPE's settings checked (rope_dim derived); without RoPE they mean nothing and are normalized
 * so that two descriptions of one model compare equal whichever reader filled them. */
static lp_status finish_rope(lp_arch *arch, lp_error *err)
{
    const char *src = source_of(arch);
    if (arch->pos_kind != LP_POS_ROPE) {
        arch->rope_dim = 0;
        arch->rope_theta = 10000.0;
        arch->partial_rotary = 1.0;
        arch->rope_local_theta = 0.0;
        arch->rope_layout = LP_ROPE_HALVES;
        memset(&arch->rope_scaling, 0, sizeof arch->rope_scaling);
        return LP_OK;
    }
    if (!(arch->rope_theta > 0.0) || !isfinite(arch->rope_theta))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: rope_theta %g must be positive", src,
                            arch->rope_theta);
    if (!(arch->partial_rotary > 0.0 && arch->partial_rotary <= 1.0))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: partial_rotary %g must be in (0, 1]", src,
                            arch->partial_rotary);
    /* int(head_dim * partial_rotary_factor), as transformers computes the rotated width */
    if (arch->rope_dim == 0)
        arch->rope_dim = (int64_t)((double)arch->head_dim * arch->partial_rotary);
    if (arch->rope_dim < 0 || arch->rope_dim > arch->head_dim || arch->rope_dim % 2 != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: rope_dim %lld must be even and at most head_dim %lld", src,
                            (long long)arch->rope_dim, (long long)arch->head_dim);
    if (arch->rope_scaling.kind != LP_ROPE_SCALING_NONE &&
        arch->rope_scaling.kind != LP_ROPE_SCALING_LONGROPE && !(arch->rope_scaling.factor > 0.0))
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: rope_scaling %s needs a positive factor, got %g", src,
                            lp_rope_scaling_name(arch->rope_scaling.kind),
                            arch->rope_scaling.factor);
    return finish_rope_factors(arch, err);
}

/* Experts checked; a dense model's expert settings (a family default, a stray key) cleared. */
static lp_status finish_experts(lp_arch *arch, lp_error *err)
{
    const char *src = source_of(arch);
    if (arch->n_experts > 0) {
        if (arch->n_experts_per_tok < 1 || arch->n_experts_per_tok > arch->n_experts)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: n_experts_per_tok %lld must be in 1..n_experts (%lld)", src,
                                (long long)arch->n_experts_per_tok, (long long)arch->n_experts);
        if (arch->expert_ffn_hidden == 0)
            return lp_error_set(err, LP_ERR_FORMAT, "%s: expert_ffn_hidden is missing", src);
        return LP_OK;
    }
    for (int64_t l = 0; l < arch->n_layers; l++)
        if (arch->layer_moe[l])
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: layer %lld is marked MoE but n_experts is 0", src,
                                (long long)l);
    arch->n_experts_per_tok = arch->n_shared_experts = 0;
    arch->expert_ffn_hidden = arch->shared_expert_ffn_hidden = 0;
    arch->shared_expert_gate = arch->router_score_bias = arch->norm_topk_prob = false;
    arch->router_bias = false;
    return LP_OK;
}

static lp_status finish_mla(const lp_arch *arch, lp_error *err)
{
    const char *src = source_of(arch);
    if (!arch->mla)
        return LP_OK;
    if (arch->kv_lora_rank == 0 || arch->qk_rope_head_dim == 0 || arch->v_head_dim == 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: MLA needs kv_lora_rank, qk_rope_head_dim and v_head_dim "
                            "(got %lld, %lld, %lld)",
                            src, (long long)arch->kv_lora_rank, (long long)arch->qk_rope_head_dim,
                            (long long)arch->v_head_dim);
    if (arch->head_dim != arch->qk_nope_head_dim + arch->qk_rope_head_dim)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: MLA head_dim %lld must be qk_nope_head_dim + "
                            "qk_rope_head_dim = %lld",
                            src, (long long)arch->head_dim,
                            (long long)(arch->qk_nope_head_dim + arch->qk_rope_head_dim));
    return LP_OK;
}

/* One layer's kv heads and dense width (defaults filled) and window. */
static lp_status finish_layer(lp_arch *arch, int64_t l, lp_error *err)
{
    const char *src = source_of(arch);
    if (arch->layer_kv_heads[l] == 0)
        arch->layer_kv_heads[l] = arch->n_kv_heads;
    if (arch->layer_kv_heads[l] < 0 || arch->n_heads % arch->layer_kv_heads[l] != 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: layer %lld kv heads %lld does not divide n_heads %lld", src,
                            (long long)l, (long long)arch->layer_kv_heads[l],
                            (long long)arch->n_heads);
    /* MoE layers have no dense FFN: their width stays 0. */
    if (arch->layer_ffn_hidden[l] == 0 && !arch->layer_moe[l])
        arch->layer_ffn_hidden[l] = arch->ffn_hidden;
    if (arch->layer_ffn_hidden[l] < 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: layer %lld ffn width %lld is negative", src,
                            (long long)l, (long long)arch->layer_ffn_hidden[l]);
    if (!arch->layer_moe[l] && arch->layer_ffn_hidden[l] == 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: layer %lld is dense but ffn_hidden is missing or 0", src,
                            (long long)l);
    if (arch->layer_window[l] < 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: layer %lld window %lld is negative", src,
                            (long long)l, (long long)arch->layer_window[l]);
    return LP_OK;
}

static lp_status finish_layers(lp_arch *arch, lp_error *err)
{
    bool any_window = false;
    for (int64_t l = 0; l < arch->n_layers; l++) {
        lp_status st = finish_layer(arch, l, err);
        if (st != LP_OK)
            return st;
        any_window |= arch->layer_window[l] > 0;
    }
    /* Unused per-layer slots stay zero so two descriptions of one model compare equal. */
    for (int64_t l = arch->n_layers; l < LP_MAX_LAYERS; l++) {
        arch->layer_kv_heads[l] = 0;
        arch->layer_ffn_hidden[l] = 0;
        arch->layer_window[l] = 0;
        arch->layer_moe[l] = false;
    }
    if (!any_window)
        arch->sliding_window = 0; /* configured but switched off (Qwen2 use_sliding_window) */
    return LP_OK;
}

lp_status lp_arch_finish(lp_arch *arch, lp_error *err)
{
    const char *src = source_of(arch);
    lp_status st;
    if ((st = finish_counts(arch, err)) != LP_OK || (st = finish_heads(arch, err)) != LP_OK)
        return st;
    if (!(arch->norm_eps > 0.0) || !isfinite(arch->norm_eps))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: norm_eps %g must be a positive number", src,
                            arch->norm_eps);
    if ((st = finish_rope(arch, err)) != LP_OK || (st = finish_alibi_clip(arch, err)) != LP_OK)
        return st;
    if (arch->pos_kind == LP_POS_LEARNED && arch->pos_table_rows == 0) {
        if (arch->n_ctx == 0)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: learned positions need n_ctx or pos_table_rows", src);
        arch->pos_table_rows = arch->n_ctx + arch->pos_offset;
    }
    if ((st = finish_experts(arch, err)) != LP_OK || (st = finish_mla(arch, err)) != LP_OK ||
        (st = finish_layers(arch, err)) != LP_OK)
        return st;
    if (!(arch->embed_scale > 0.0))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: embed_scale %g must be positive", src,
                            arch->embed_scale);
    if (arch->query_scale < 0.0 || arch->attn_logit_softcap < 0.0 ||
        arch->final_logit_softcap < 0.0 || arch->logit_scale < 0.0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: query_scale and soft-caps must not be negative", src);
    /* gpt-oss's experts clamp at 7 (GptOssConfig's default, llama.cpp's constant) unless the
     * config says otherwise */
    if (arch->swiglu_limit == 0.0 && strcmp(arch->family, "gpt_oss") == 0)
        arch->swiglu_limit = 7.0;
    if (arch->swiglu_limit < 0.0 || !isfinite(arch->swiglu_limit))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: swiglu_limit %g must be positive", src,
                            arch->swiglu_limit);
    return LP_OK;
}

const char *lp_ffn_kind_name(lp_ffn_kind kind)
{
    static const char *const names[LP_FFN_KIND_COUNT] = {"mlp", "swiglu", "geglu"};
    return (unsigned)kind < LP_FFN_KIND_COUNT ? names[kind] : "invalid";
}

const char *lp_norm_kind_name(lp_norm_kind kind)
{
    static const char *const names[LP_NORM_KIND_COUNT] = {"rms", "layer"};
    return (unsigned)kind < LP_NORM_KIND_COUNT ? names[kind] : "invalid";
}

const char *lp_pos_kind_name(lp_pos_kind kind)
{
    static const char *const names[LP_POS_KIND_COUNT] = {"rope", "learned", "alibi", "none"};
    return (unsigned)kind < LP_POS_KIND_COUNT ? names[kind] : "invalid";
}

const char *lp_rope_scaling_name(lp_rope_scaling_kind kind)
{
    static const char *const names[LP_ROPE_SCALING_KIND_COUNT] = {
        "none", "linear", "dynamic", "llama3", "yarn", "longrope"};
    return (unsigned)kind < LP_ROPE_SCALING_KIND_COUNT ? names[kind] : "invalid";
}

const char *lp_activation_name(lp_activation act)
{
    static const char *const names[LP_ACT_KIND_COUNT] = {"silu", "gelu", "gelu_tanh", "relu"};
    return (unsigned)act < LP_ACT_KIND_COUNT ? names[act] : "invalid";
}
