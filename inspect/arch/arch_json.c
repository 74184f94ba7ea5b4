/* lp_arch as a JSON object: every field under its lp_arch name, enums as their names, per-layer
 * arrays cut to n_layers. */
#define _POSIX_C_SOURCE 200809L
#include "inspect/arch/arch_json.h"

#include <string.h>

#include "core/dtype.h"

/* Each setter reports failure through *ok so the builder can stay a flat list. */
static void put(json_t *obj, const char *key, json_t *value, bool *ok)
{
    if (!value || json_object_set_new(obj, key, value) != 0)
        *ok = false;
}

static void put_int(json_t *obj, const char *key, int64_t v, bool *ok)
{
    put(obj, key, json_integer((json_int_t)v), ok);
}

static void put_num(json_t *obj, const char *key, double v, bool *ok)
{
    put(obj, key, json_real(v), ok);
}

static void put_bool(json_t *obj, const char *key, bool v, bool *ok)
{
    put(obj, key, json_boolean(v), ok);
}

static void put_str(json_t *obj, const char *key, const char *v, bool *ok)
{
    put(obj, key, json_string(v), ok);
}

/* Text from a file may not be UTF-8, which json_string refuses: keep ASCII, mark the rest. */
static void put_text(json_t *obj, const char *key, const char *text, size_t max, bool *ok)
{
    size_t len = strnlen(text, max);
    json_t *s = json_stringn(text, len);
    if (!s) {
        char clean[256];
        if (len >= sizeof clean)
            len = sizeof clean - 1;
        for (size_t i = 0; i < len; i++)
            clean[i] = (unsigned char)text[i] < 0x80 ? text[i] : '?';
        s = json_stringn(clean, len);
    }
    put(obj, key, s, ok);
}

static void put_layers_int(json_t *obj, const char *key, const int64_t *v, int64_t n, bool *ok)
{
    json_t *arr = json_array();
    for (int64_t l = 0; arr && l < n; l++)
        if (json_array_append_new(arr, json_integer((json_int_t)v[l])) != 0)
            *ok = false;
    put(obj, key, arr, ok);
}

json_t *lp_arch_to_json(const lp_arch *a)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    bool ok = true;
    int64_t n = a->n_layers < 0 ? 0 : a->n_layers > LP_MAX_LAYERS ? LP_MAX_LAYERS : a->n_layers;

    put_text(o, "family", a->family, sizeof a->family, &ok);
    put_text(o, "name", a->name, sizeof a->name, &ok);
    put_text(o, "source", a->source, sizeof a->source, &ok);

    put_int(o, "vocab_size", a->vocab_size, &ok);
    put_int(o, "hidden_size", a->hidden_size, &ok);
    put_int(o, "n_layers", a->n_layers, &ok);
    put_int(o, "n_heads", a->n_heads, &ok);
    put_int(o, "n_kv_heads", a->n_kv_heads, &ok);
    put_int(o, "head_dim", a->head_dim, &ok);
    put_bool(o, "head_dim_explicit", a->head_dim_explicit, &ok);
    put_layers_int(o, "layer_kv_heads", a->layer_kv_heads, n, &ok);

    put_int(o, "ffn_hidden", a->ffn_hidden, &ok);
    put_layers_int(o, "layer_ffn_hidden", a->layer_ffn_hidden, n, &ok);
    put_str(o, "ffn_kind", lp_ffn_kind_name(a->ffn_kind), &ok);
    put_str(o, "act", lp_activation_name(a->act), &ok);

    put_str(o, "norm_kind", lp_norm_kind_name(a->norm_kind), &ok);
    put_num(o, "norm_eps", a->norm_eps, &ok);
    put_bool(o, "norm_weight_plus_one", a->norm_weight_plus_one, &ok);
    put_bool(o, "post_attn_norm", a->post_attn_norm, &ok);
    put_bool(o, "post_ffn_norm", a->post_ffn_norm, &ok);
    put_bool(o, "qk_norm", a->qk_norm, &ok);
    put_bool(o, "qk_norm_full", a->qk_norm_full, &ok);
    put_bool(o, "qk_norm_per_head", a->qk_norm_per_head, &ok);
    put_bool(o, "no_input_norm", a->no_input_norm, &ok);
    put_bool(o, "embed_norm", a->embed_norm, &ok);
    put_bool(o, "final_norm", a->final_norm, &ok);
    put_bool(o, "post_norm", a->post_norm, &ok);
    put_text(o, "assumed_family", a->assumed_family, sizeof a->assumed_family, &ok);
    put_bool(o, "encoder_only", a->encoder_only, &ok);
    put_int(o, "n_token_types", a->n_token_types, &ok);
    put_bool(o, "pooler", a->pooler, &ok);

    put_str(o, "pos_kind", lp_pos_kind_name(a->pos_kind), &ok);
    put_int(o, "pos_table_rows", a->pos_table_rows, &ok);
    put_int(o, "pos_offset", a->pos_offset, &ok);
    put_num(o, "rope_theta", a->rope_theta, &ok);
    put_num(o, "partial_rotary", a->partial_rotary, &ok);
    put_int(o, "rope_dim", a->rope_dim, &ok);
    put_str(o, "rope_layout", a->rope_layout == LP_ROPE_ADJACENT ? "adjacent" : "halves", &ok);
    json_t *rs = json_object();
    if (rs) {
        put_str(rs, "kind", lp_rope_scaling_name(a->rope_scaling.kind), &ok);
        put_num(rs, "factor", a->rope_scaling.factor, &ok);
        put_int(rs, "original_ctx", a->rope_scaling.original_ctx, &ok);
        put_num(rs, "low_freq_factor", a->rope_scaling.low_freq_factor, &ok);
        put_num(rs, "high_freq_factor", a->rope_scaling.high_freq_factor, &ok);
        put_num(rs, "beta_fast", a->rope_scaling.beta_fast, &ok);
        put_num(rs, "beta_slow", a->rope_scaling.beta_slow, &ok);
        put_num(rs, "attention_factor", a->rope_scaling.attention_factor, &ok);
    }
    put(o, "rope_scaling", rs, &ok);
    put_num(o, "rope_local_theta", a->rope_local_theta, &ok);
    put_int(o, "n_ctx", a->n_ctx, &ok);

    put_bool(o, "tied_embeddings", a->tied_embeddings, &ok);
    put_int(o, "embed_proj_dim", a->embed_proj_dim, &ok);
    put_bool(o, "bias_qkv", a->bias_qkv, &ok);
    put_bool(o, "bias_o", a->bias_o, &ok);
    put_bool(o, "bias_mlp", a->bias_mlp, &ok);
    put_bool(o, "bias_lm_head", a->bias_lm_head, &ok);
    put_bool(o, "bias_norm", a->bias_norm, &ok);

    put_int(o, "sliding_window", a->sliding_window, &ok);
    put_layers_int(o, "layer_window", a->layer_window, n, &ok);

    put_int(o, "n_experts", a->n_experts, &ok);
    put_int(o, "n_experts_per_tok", a->n_experts_per_tok, &ok);
    put_int(o, "n_shared_experts", a->n_shared_experts, &ok);
    put_int(o, "expert_ffn_hidden", a->expert_ffn_hidden, &ok);
    put_int(o, "shared_expert_ffn_hidden", a->shared_expert_ffn_hidden, &ok);
    put_bool(o, "shared_expert_gate", a->shared_expert_gate, &ok);
    put_bool(o, "router_score_bias", a->router_score_bias, &ok);
    put_bool(o, "norm_topk_prob", a->norm_topk_prob, &ok);
    put_bool(o, "router_bias", a->router_bias, &ok);
    put_bool(o, "attn_sinks", a->attn_sinks, &ok);
    json_t *moe = json_array();
    for (int64_t l = 0; moe && l < n; l++)
        if (json_array_append_new(moe, json_boolean(a->layer_moe[l])) != 0)
            ok = false;
    put(o, "layer_moe", moe, &ok);

    put_bool(o, "mla", a->mla, &ok);
    put_int(o, "q_lora_rank", a->q_lora_rank, &ok);
    put_int(o, "kv_lora_rank", a->kv_lora_rank, &ok);
    put_int(o, "qk_rope_head_dim", a->qk_rope_head_dim, &ok);
    put_int(o, "qk_nope_head_dim", a->qk_nope_head_dim, &ok);
    put_int(o, "v_head_dim", a->v_head_dim, &ok);

    put_bool(o, "parallel_block", a->parallel_block, &ok);
    put_bool(o, "parallel_two_norms", a->parallel_two_norms, &ok);
    put_num(o, "embed_scale", a->embed_scale, &ok);
    put_num(o, "attn_logit_softcap", a->attn_logit_softcap, &ok);
    put_num(o, "final_logit_softcap", a->final_logit_softcap, &ok);
    put_num(o, "query_scale", a->query_scale, &ok);
    put_int(o, "n_mtp_layers", a->n_mtp_layers, &ok);
    /* unknown dtype is null rather than the string "invalid" */
    put(o, "storage_dtype",
        a->storage_dtype == LP_DTYPE_INVALID ? json_null()
                                             : json_string(lp_dtype_name(a->storage_dtype)),
        &ok);
    put_int(o, "bos_token_id", a->bos_token_id, &ok);
    put_int(o, "eos_token_id", a->eos_token_id, &ok);

    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}
