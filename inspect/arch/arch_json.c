/* lp_arch as a JSON object: every field under its lp_arch name, enums as their names, per-layer
 * arrays cut to n_layers. One table, FIELDS, lists the members in the order they are written. */
#define _POSIX_C_SOURCE 200809L
#include "inspect/arch/arch_json.h"

#include <stddef.h>
#include <string.h>

#include "core/dtype.h"

typedef enum json_kind {
    J_TEXT,         /* char[]: may not be UTF-8 (it comes from a file) */
    J_INT,          /* int64_t */
    J_NUM,          /* double */
    J_BOOL,         /* bool */
    J_LAYERS_INT,   /* int64_t[LP_MAX_LAYERS], n_layers of them */
    J_LAYERS_BOOL,  /* bool[LP_MAX_LAYERS], n_layers of them */
    J_FFN,          /* the enums, as their names */
    J_ACT,
    J_NORM,
    J_POS,
    J_LAYOUT,
    J_SCALING,
    J_DTYPE,        /* null when unknown rather than "invalid" */
    J_ROPE_SCALING, /* the object of ROPE_SCALING_FIELDS */
    J_NUM_SET,      /* double, left out when 0 (fields most families do not have) */
    J_INT_SET,      /* int64_t, left out when 0 */
    J_BOOL_SET,     /* bool, left out when false */
} json_kind;

typedef struct json_field {
    const char *key;
    json_kind kind;
    size_t offset; /* into lp_arch */
    size_t size;
} json_field;

#define F(kind, field) {#field, kind, offsetof(lp_arch, field), sizeof(((lp_arch *)0)->field)}
#define RS(kind, field) \
    {#field, kind, offsetof(lp_arch, rope_scaling.field), sizeof(((lp_arch *)0)->rope_scaling.field)}

static const json_field FIELDS[] = {
    F(J_TEXT, family), F(J_TEXT, name), F(J_TEXT, source),
    F(J_INT, vocab_size), F(J_INT, hidden_size), F(J_INT, n_layers), F(J_INT, n_heads),
    F(J_INT, n_kv_heads), F(J_INT, head_dim), F(J_BOOL, head_dim_explicit),
    F(J_LAYERS_INT, layer_kv_heads),
    F(J_INT, ffn_hidden), F(J_LAYERS_INT, layer_ffn_hidden), F(J_FFN, ffn_kind), F(J_ACT, act),
    F(J_NORM, norm_kind), F(J_NUM, norm_eps), F(J_BOOL, norm_weight_plus_one),
    F(J_BOOL, post_attn_norm), F(J_BOOL, post_ffn_norm), F(J_BOOL, qk_norm),
    F(J_BOOL, qk_norm_full), F(J_BOOL, qk_norm_per_head), F(J_BOOL, no_input_norm),
    F(J_BOOL, embed_norm), F(J_BOOL, final_norm), F(J_BOOL, post_norm),
    F(J_TEXT, assumed_family), F(J_BOOL, encoder_only), F(J_INT, n_token_types), F(J_BOOL, pooler),
    F(J_POS, pos_kind), F(J_INT, pos_table_rows), F(J_INT, pos_offset), F(J_NUM, rope_theta),
    F(J_NUM, partial_rotary), F(J_INT, rope_dim), F(J_LAYOUT, rope_layout),
    F(J_ROPE_SCALING, rope_scaling), F(J_NUM, rope_local_theta), F(J_INT, n_ctx),
    F(J_BOOL, tied_embeddings), F(J_INT, embed_proj_dim), F(J_BOOL, bias_qkv), F(J_BOOL, bias_o),
    F(J_BOOL, bias_mlp), F(J_BOOL, bias_lm_head), F(J_BOOL, bias_norm),
    F(J_INT, sliding_window), F(J_LAYERS_INT, layer_window),
    F(J_INT, n_experts), F(J_INT, n_experts_per_tok), F(J_INT, n_shared_experts),
    F(J_INT, expert_ffn_hidden), F(J_INT, shared_expert_ffn_hidden), F(J_BOOL, shared_expert_gate),
    F(J_BOOL, router_score_bias), F(J_BOOL, norm_topk_prob), F(J_BOOL, router_bias),
    F(J_BOOL, attn_sinks), F(J_LAYERS_BOOL, layer_moe),
    F(J_BOOL, mla), F(J_INT, q_lora_rank), F(J_INT, kv_lora_rank), F(J_INT, qk_rope_head_dim),
    F(J_INT, qk_nope_head_dim), F(J_INT, v_head_dim),
    F(J_BOOL, parallel_block), F(J_BOOL, parallel_two_norms), F(J_NUM, embed_scale),
    F(J_NUM, attn_logit_softcap), F(J_NUM, final_logit_softcap), F(J_NUM, query_scale),
    F(J_INT, n_mtp_layers), F(J_DTYPE, storage_dtype), F(J_INT, bos_token_id),
    F(J_INT, eos_token_id), F(J_NUM_SET, alibi_max_bias), F(J_NUM_SET, qkv_clip),
    F(J_BOOL_SET, router_sigmoid), F(J_INT_SET, n_expert_groups), F(J_INT_SET, topk_groups),
    F(J_NUM_SET, routed_scaling), F(J_NUM_SET, swiglu_limit), F(J_NUM_SET, logit_scale),
};

static const json_field ROPE_SCALING_FIELDS[] = {
    RS(J_SCALING, kind), RS(J_NUM, factor), RS(J_INT, original_ctx),
    RS(J_NUM, low_freq_factor), RS(J_NUM, high_freq_factor), RS(J_NUM, beta_fast),
    RS(J_NUM, beta_slow), RS(J_NUM, attention_factor), RS(J_INT_SET, n_factors),
    RS(J_BOOL_SET, yarn_unrounded),
};

_Static_assert(sizeof(lp_ffn_kind) == sizeof(int) && sizeof(lp_activation) == sizeof(int) &&
                   sizeof(lp_norm_kind) == sizeof(int) && sizeof(lp_pos_kind) == sizeof(int) &&
                   sizeof(lp_rope_layout) == sizeof(int) &&
                   sizeof(lp_rope_scaling_kind) == sizeof(int) && sizeof(lp_dtype) == sizeof(int),
               "enum fields are read as int");

/* Text from a file may not be UTF-8, which json_string refuses: keep ASCII, mark the rest. */
static json_t *text_json(const char *text, size_t max)
{
    size_t len = strnlen(text, max);
    json_t *s = json_stringn(text, len);
    if (s)
        return s;
    char clean[256];
    if (len >= sizeof clean)
        len = sizeof clean - 1;
    for (size_t i = 0; i < len; i++)
        clean[i] = (unsigned char)text[i] < 0x80 ? text[i] : '?';
    return json_stringn(clean, len);
}

static json_t *layers_json(const void *values, bool is_bool, int64_t n)
{
    json_t *arr = json_array();
    for (int64_t l = 0; arr && l < n; l++) {
        json_t *v = is_bool ? json_boolean(((const bool *)values)[l])
                            : json_integer((json_int_t)((const int64_t *)values)[l]);
        if (json_array_append_new(arr, v) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

static json_t *enum_json(json_kind kind, int v)
{
    switch (kind) {
    case J_FFN: return json_string(lp_ffn_kind_name((lp_ffn_kind)v));
    case J_ACT: return json_string(lp_activation_name((lp_activation)v));
    case J_NORM: return json_string(lp_norm_kind_name((lp_norm_kind)v));
    case J_POS: return json_string(lp_pos_kind_name((lp_pos_kind)v));
    case J_LAYOUT: return json_string(v == LP_ROPE_ADJACENT ? "adjacent" : "halves");
    case J_SCALING: return json_string(lp_rope_scaling_name((lp_rope_scaling_kind)v));
    default:
        return v == LP_DTYPE_INVALID ? json_null() : json_string(lp_dtype_name((lp_dtype)v));
    }
}

static json_t *object_json(const lp_arch *a, const json_field *fields, size_t n_fields);

static json_t *field_json(const lp_arch *a, const json_field *f)
{
    const char *p = (const char *)a + f->offset;
    int64_t n = a->n_layers < 0 ? 0 : a->n_layers > LP_MAX_LAYERS ? LP_MAX_LAYERS : a->n_layers;
    int64_t i;
    double d;
    int e;
    switch (f->kind) {
    case J_TEXT: return text_json(p, f->size);
    case J_INT:
    case J_INT_SET:
        memcpy(&i, p, sizeof i);
        return json_integer((json_int_t)i);
    case J_NUM:
    case J_NUM_SET:
        memcpy(&d, p, sizeof d);
        return json_real(d);
    case J_BOOL:
    case J_BOOL_SET: return json_boolean(*(const bool *)(const void *)p);
    case J_LAYERS_INT: return layers_json(p, false, n);
    case J_LAYERS_BOOL: return layers_json(p, true, n);
    case J_ROPE_SCALING:
        return object_json(a, ROPE_SCALING_FIELDS,
                           sizeof ROPE_SCALING_FIELDS / sizeof ROPE_SCALING_FIELDS[0]);
    default:
        memcpy(&e, p, sizeof e);
        return enum_json(f->kind, e);
    }
}

/* A J_*_SET field that holds 0 (absent). */
static bool left_out(const lp_arch *a, const json_field *f)
{
    const char *p = (const char *)a + f->offset;
    int64_t i;
    double d;
    if (f->kind == J_INT_SET)
        return memcpy(&i, p, sizeof i), i == 0;
    if (f->kind == J_NUM_SET)
        return memcpy(&d, p, sizeof d), d == 0.0;
    if (f->kind == J_BOOL_SET)
        return !*(const bool *)(const void *)p;
    return false;
}

static json_t *object_json(const lp_arch *a, const json_field *fields, size_t n_fields)
{
    json_t *o = json_object();
    for (size_t k = 0; o && k < n_fields; k++) {
        if (left_out(a, &fields[k]))
            continue;
        json_t *v = field_json(a, &fields[k]);
        if (!v || json_object_set_new(o, fields[k].key, v) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

json_t *lp_arch_to_json(const lp_arch *a)
{
    return object_json(a, FIELDS, sizeof FIELDS / sizeof FIELDS[0]);
}
