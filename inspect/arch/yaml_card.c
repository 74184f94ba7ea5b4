/* YAML model cards (the configs folder) <-> lp_arch. The schema is one table, FIELDS, that both the
 * reader and the writer walk; configs/README.md documents every key. */
#define _POSIX_C_SOURCE 200809L
#include "inspect/arch/arch_internal.h"
#include "inspect/inspect.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/dtype.h"
#include "core/mapfile.h"

#define CARD_MAX_BYTES (1u << 20)

typedef enum field_type {
    F_INT,      /* int64_t, >= 0 */
    F_NUM,      /* double */
    F_BOOL,
    F_NOT_BOOL, /* a bool stored negated (norm.input -> no_input_norm) */
    F_STR,      /* char[size] */
    F_FFN,
    F_ACT,
    F_NORM,
    F_POS,
    F_LAYOUT,
    F_SCALING,
    F_DTYPE,
    F_QK_NORM,  /* none | per_head | all_heads -> qk_norm, qk_norm_full */
    F_SPECIAL,  /* handled by name after the walk (lists, derived values) */
} field_type;

typedef struct card_field {
    const char *group; /* dotted path of the mapping that holds the key */
    const char *key;
    field_type type;
    size_t offset;     /* into lp_arch; unused for F_SPECIAL */
    size_t size;       /* F_STR buffer size */
    bool always;       /* the writer states it even when it equals the default */
} card_field;

#define A(field) offsetof(lp_arch, field), sizeof(((lp_arch *)0)->field)
#define RS(field) offsetof(lp_arch, rope_scaling.field), sizeof(((lp_arch *)0)->rope_scaling.field)
#define NONE 0, 0

static const card_field FIELDS[] = {
    {"model", "name", F_STR, A(name), true},
    {"model", "family", F_STR, A(family), true},
    {"model", "config_url", F_SPECIAL, NONE, false},
    {"model", "dtype", F_DTYPE, A(storage_dtype), false},
    {"model", "bos_token_id", F_INT, A(bos_token_id), false},
    {"model", "eos_token_id", F_INT, A(eos_token_id), false},
    {"model", "assumed_family", F_STR, A(assumed_family), false},

    {"dims", "vocab_size", F_INT, A(vocab_size), true},
    {"dims", "hidden_size", F_INT, A(hidden_size), true},
    {"dims", "n_layers", F_INT, A(n_layers), true},
    {"dims", "n_ctx", F_INT, A(n_ctx), true},

    {"attention", "n_heads", F_INT, A(n_heads), true},
    {"attention", "n_kv_heads", F_INT, A(n_kv_heads), true},
    {"attention", "head_dim", F_SPECIAL, NONE, false},
    {"attention", "kv_heads_per_layer", F_SPECIAL, NONE, false},
    {"attention", "bias_qkv", F_BOOL, A(bias_qkv), true},
    {"attention", "bias_o", F_BOOL, A(bias_o), true},
    {"attention", "qk_norm", F_QK_NORM, NONE, false},
    {"attention", "query_scale", F_NUM, A(query_scale), false},
    {"attention", "query_pre_attn_scalar", F_SPECIAL, NONE, false},
    {"attention", "logit_softcap", F_NUM, A(attn_logit_softcap), false},
    {"attention", "sinks", F_BOOL, A(attn_sinks), false},
    {"attention", "qkv_clip", F_NUM, A(qkv_clip), false},
    {"attention", "sliding_window", F_INT, A(sliding_window), false},
    {"attention", "window_layers", F_SPECIAL, NONE, false},
    {"attention", "window_pattern", F_SPECIAL, NONE, false},
    {"attention", "window_per_layer", F_SPECIAL, NONE, false},

    {"mla", "q_lora_rank", F_INT, A(q_lora_rank), true},
    {"mla", "kv_lora_rank", F_INT, A(kv_lora_rank), true},
    {"mla", "qk_rope_head_dim", F_INT, A(qk_rope_head_dim), true},
    {"mla", "qk_nope_head_dim", F_INT, A(qk_nope_head_dim), true},
    {"mla", "v_head_dim", F_INT, A(v_head_dim), true},

    {"ffn", "kind", F_FFN, A(ffn_kind), true},
    {"ffn", "activation", F_ACT, A(act), true},
    {"ffn", "hidden", F_INT, A(ffn_hidden), true},
    {"ffn", "hidden_per_layer", F_SPECIAL, NONE, false},
    {"ffn", "bias", F_BOOL, A(bias_mlp), true},

    {"moe", "n_experts", F_INT, A(n_experts), true},
    {"moe", "experts_per_token", F_INT, A(n_experts_per_tok), true},
    {"moe", "expert_hidden", F_INT, A(expert_ffn_hidden), true},
    {"moe", "n_shared_experts", F_INT, A(n_shared_experts), false},
    {"moe", "shared_expert_hidden", F_INT, A(shared_expert_ffn_hidden), false},
    {"moe", "shared_expert_gate", F_BOOL, A(shared_expert_gate), false},
    {"moe", "router_score_bias", F_BOOL, A(router_score_bias), false},
    {"moe", "router_bias", F_BOOL, A(router_bias), false},
    {"moe", "swiglu_limit", F_NUM, A(swiglu_limit), false},
    {"moe", "norm_topk_prob", F_BOOL, A(norm_topk_prob), true},
    {"moe", "router_sigmoid", F_BOOL, A(router_sigmoid), false},
    {"moe", "expert_groups", F_INT, A(n_expert_groups), false},
    {"moe", "topk_groups", F_INT, A(topk_groups), false},
    {"moe", "routed_scaling", F_NUM, A(routed_scaling), false},
    {"moe", "dense_layers", F_SPECIAL, NONE, false},

    {"positions", "kind", F_POS, A(pos_kind), true},
    {"positions", "table_rows", F_INT, A(pos_table_rows), false},
    {"positions", "offset", F_INT, A(pos_offset), false},
    {"positions", "rope_theta", F_NUM, A(rope_theta), false},
    {"positions", "rope_local_theta", F_NUM, A(rope_local_theta), false},
    {"positions", "partial_rotary", F_NUM, A(partial_rotary), false},
    {"positions", "rope_dim", F_INT, A(rope_dim), false},
    {"positions", "rope_layout", F_LAYOUT, A(rope_layout), false},
    {"positions", "alibi_max_bias", F_NUM, A(alibi_max_bias), false},
    {"positions.rope_scaling", "kind", F_SCALING, RS(kind), true},
    {"positions.rope_scaling", "factor", F_NUM, RS(factor), false},
    {"positions.rope_scaling", "original_ctx", F_INT, RS(original_ctx), false},
    {"positions.rope_scaling", "low_freq_factor", F_NUM, RS(low_freq_factor), false},
    {"positions.rope_scaling", "high_freq_factor", F_NUM, RS(high_freq_factor), false},
    {"positions.rope_scaling", "beta_fast", F_NUM, RS(beta_fast), false},
    {"positions.rope_scaling", "beta_slow", F_NUM, RS(beta_slow), false},
    {"positions.rope_scaling", "attention_factor", F_NUM, RS(attention_factor), false},
    {"positions.rope_scaling", "mscale", F_SPECIAL, NONE, false},
    {"positions.rope_scaling", "mscale_all_dim", F_SPECIAL, NONE, false},
    {"positions.rope_scaling", "truncate", F_SPECIAL, NONE, false},
    {"positions.rope_scaling", "short_factor", F_SPECIAL, NONE, false},
    {"positions.rope_scaling", "long_factor", F_SPECIAL, NONE, false},

    {"norm", "kind", F_NORM, A(norm_kind), true},
    {"norm", "eps", F_NUM, A(norm_eps), true},
    {"norm", "bias", F_SPECIAL, NONE, false},
    {"norm", "weight_plus_one", F_BOOL, A(norm_weight_plus_one), false},
    {"norm", "input", F_NOT_BOOL, A(no_input_norm), false},
    {"norm", "post_attn", F_BOOL, A(post_attn_norm), false},
    {"norm", "post_ffn", F_BOOL, A(post_ffn_norm), false},
    {"norm", "embed", F_BOOL, A(embed_norm), false},
    {"norm", "final", F_BOOL, A(final_norm), false},
    {"norm", "post", F_BOOL, A(post_norm), false},

    {"block", "parallel", F_BOOL, A(parallel_block), false},
    {"block", "parallel_two_norms", F_BOOL, A(parallel_two_norms), false},
    {"block", "encoder_only", F_BOOL, A(encoder_only), false},

    {"embeddings", "tied", F_BOOL, A(tied_embeddings), true},
    {"embeddings", "scale", F_NUM, A(embed_scale), false},
    {"embeddings", "proj_dim", F_INT, A(embed_proj_dim), false},
    {"embeddings", "lm_head_bias", F_BOOL, A(bias_lm_head), false},
    {"embeddings", "final_logit_softcap", F_NUM, A(final_logit_softcap), false},
    {"embeddings", "logit_scale", F_NUM, A(logit_scale), false},
    {"embeddings", "n_mtp_layers", F_INT, A(n_mtp_layers), false},
    {"embeddings", "token_types", F_INT, A(n_token_types), false},
    {"embeddings", "pooler", F_BOOL, A(pooler), false},
};
#define N_FIELDS (sizeof FIELDS / sizeof FIELDS[0])

static const char *const FFN_NAMES[] = {"mlp", "swiglu", "geglu"};
static const char *const ACT_NAMES[] = {"silu", "gelu", "gelu_tanh", "relu"};
static const char *const NORM_NAMES[] = {"rms", "layer"};
static const char *const POS_NAMES[] = {"rope", "learned", "alibi", "none"};
static const char *const LAYOUT_NAMES[] = {"halves", "adjacent"};
static const char *const SCALING_NAMES[] = {"none",  "linear", "dynamic",
                                            "llama3", "yarn",  "longrope"};
/* per_head: one head_dim weight shared by the heads (Qwen3, Gemma 3); all_heads: one norm over
 * all heads (OLMo 2); each_head: a separate bias-free norm for every q and kv head (StableLM 2). */
static const char *const QK_NORM_NAMES[] = {"none", "per_head", "all_heads", "each_head"};

/* ---------------------------------------------------------------------------------------------
 * Reading
 */

typedef struct card_reader {
    const char *path;
    yaml_document_t *doc;
    lp_error *err;
    yaml_node_t *seen[N_FIELDS]; /* value node of each key that was given */
} card_reader;

static lp_status at(const card_reader *r, const yaml_node_t *node, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* "file:line:col: message" with the node's 1-based position. */
static lp_status at(const card_reader *r, const yaml_node_t *node, const char *fmt, ...)
{
    char msg[LP_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lp_error_set(r->err, LP_ERR_FORMAT, "%s:%zu:%zu: %s", r->path,
                        node->start_mark.line + 1, node->start_mark.column + 1, msg);
}

static const char *scalar_text(const yaml_node_t *node)
{
    return (const char *)node->data.scalar.value;
}

static bool scalar_is_null(const yaml_node_t *node)
{
    if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *s = scalar_text(node);
    return !*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0;
}

static lp_status read_int(const card_reader *r, const yaml_node_t *node, const char *key,
                          int64_t *out)
{
    if (node->type != YAML_SCALAR_NODE)
        return at(r, node, "key '%s': expected an integer", key);
    const char *s = scalar_text(node);
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno == ERANGE)
        return at(r, node, "key '%s': expected an integer, got '%s'", key, s);
    if (v > LP_ARCH_MAX_COUNT || v < -LP_ARCH_MAX_COUNT)
        return at(r, node, "key '%s': %lld exceeds the limit of %lld", key, v,
                  (long long)LP_ARCH_MAX_COUNT);
    *out = v;
    return LP_OK;
}

static lp_status read_count(const card_reader *r, const yaml_node_t *node, const char *key,
                            int64_t *out)
{
    lp_status st = read_int(r, node, key, out);
    if (st == LP_OK && *out < 0 && strcmp(key, "bos_token_id") != 0 &&
        strcmp(key, "eos_token_id") != 0)
        return at(r, node, "key '%s': %lld must not be negative", key, (long long)*out);
    return st;
}

static lp_status read_num(const card_reader *r, const yaml_node_t *node, const char *key,
                          double *out)
{
    if (node->type != YAML_SCALAR_NODE)
        return at(r, node, "key '%s': expected a number", key);
    const char *s = scalar_text(node);
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !isfinite(v))
        return at(r, node, "key '%s': expected a number, got '%s'", key, s);
    *out = v == 0.0 ? 0.0 : v; /* -0 is 0 */
    return LP_OK;
}

static lp_status read_bool(const card_reader *r, const yaml_node_t *node, const char *key,
                           bool *out)
{
    const char *s = node->type == YAML_SCALAR_NODE ? scalar_text(node) : "";
    if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "yes") == 0)
        *out = true;
    else if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "no") == 0)
        *out = false;
    else
        return at(r, node, "key '%s': expected true or false, got '%s'", key, s);
    return LP_OK;
}

static lp_status read_enum(const card_reader *r, const yaml_node_t *node, const char *key,
                           const char *const *names, int n_names, int *out)
{
    const char *s = node->type == YAML_SCALAR_NODE ? scalar_text(node) : "";
    for (int i = 0; i < n_names; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return LP_OK;
        }
    char list[160] = "";
    for (int i = 0; i < n_names; i++) {
        strncat(list, names[i], sizeof list - strlen(list) - 1);
        if (i + 1 < n_names)
            strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    return at(r, node, "key '%s': '%s' is not one of %s", key, s, list);
}

#define ENUM_COUNT(names) ((int)(sizeof names / sizeof names[0]))

/* The fields stored as an enum of lp_arch, read by name. */
static const struct {
    field_type type;
    const char *const *names;
    int n_names;
} ENUMS[] = {
    {F_FFN, FFN_NAMES, ENUM_COUNT(FFN_NAMES)},          {F_ACT, ACT_NAMES, ENUM_COUNT(ACT_NAMES)},
    {F_NORM, NORM_NAMES, ENUM_COUNT(NORM_NAMES)},       {F_POS, POS_NAMES, ENUM_COUNT(POS_NAMES)},
    {F_LAYOUT, LAYOUT_NAMES, ENUM_COUNT(LAYOUT_NAMES)},
    {F_SCALING, SCALING_NAMES, ENUM_COUNT(SCALING_NAMES)},
};

_Static_assert(sizeof(lp_ffn_kind) == sizeof(int) && sizeof(lp_activation) == sizeof(int) &&
                   sizeof(lp_norm_kind) == sizeof(int) && sizeof(lp_pos_kind) == sizeof(int) &&
                   sizeof(lp_rope_layout) == sizeof(int) &&
                   sizeof(lp_rope_scaling_kind) == sizeof(int),
               "enum fields are stored as int");

static lp_status read_enum_field(card_reader *r, const card_field *f, yaml_node_t *node,
                                 void *field)
{
    for (size_t i = 0; i < sizeof ENUMS / sizeof ENUMS[0]; i++) {
        if (ENUMS[i].type != f->type)
            continue;
        int e = 0;
        lp_status st = read_enum(r, node, f->key, ENUMS[i].names, ENUMS[i].n_names, &e);
        memcpy(field, &e, sizeof e);
        return st;
    }
    return LP_OK;
}

static lp_status read_dtype_field(card_reader *r, const card_field *f, yaml_node_t *node,
                                  lp_arch *a)
{
    const char *s = node->type == YAML_SCALAR_NODE ? scalar_text(node) : "";
    lp_dtype d = lp_dtype_from_name(s);
    if (strcmp(s, "bfloat16") == 0)
        d = LP_DTYPE_BF16;
    else if (strcmp(s, "float16") == 0)
        d = LP_DTYPE_F16;
    else if (strcmp(s, "float32") == 0)
        d = LP_DTYPE_F32;
    if (d == LP_DTYPE_INVALID)
        return at(r, node, "key '%s': unknown dtype '%s' (f32, f16, bf16, f8_e4m3, ...)", f->key,
                  s);
    a->storage_dtype = d;
    return LP_OK;
}

static lp_status read_field(card_reader *r, const card_field *f, yaml_node_t *node, lp_arch *a)
{
    char *base = (char *)a + f->offset;
    lp_status st = LP_OK;
    int e = 0;
    bool b;
    switch (f->type) {
    case F_INT: return read_count(r, node, f->key, (int64_t *)(void *)base);
    case F_NUM: return read_num(r, node, f->key, (double *)(void *)base);
    case F_BOOL: return read_bool(r, node, f->key, (bool *)(void *)base);
    case F_NOT_BOOL:
        if ((st = read_bool(r, node, f->key, &b)) == LP_OK)
            *(bool *)(void *)base = !b;
        return st;
    case F_STR:
        if (node->type != YAML_SCALAR_NODE)
            return at(r, node, "key '%s': expected a string", f->key);
        if (strlen(scalar_text(node)) >= f->size)
            return at(r, node, "key '%s': longer than %zu bytes", f->key, f->size - 1);
        snprintf(base, f->size, "%s", scalar_text(node));
        return LP_OK;
    case F_QK_NORM:
        st = read_enum(r, node, f->key, QK_NORM_NAMES, ENUM_COUNT(QK_NORM_NAMES), &e);
        a->qk_norm = e == 1 || e == 3;
        a->qk_norm_full = e == 2;
        a->qk_norm_per_head = e == 3;
        return st;
    case F_DTYPE: return read_dtype_field(r, f, node, a);
    case F_SPECIAL: return LP_OK; /* handled after the walk */
    default: return read_enum_field(r, f, node, base);
    }
}

static bool group_known(const char *group)
{
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strcmp(FIELDS[i].group, group) == 0)
            return true;
    return false;
}

/* Walk one mapping whose dotted path is `group` ("" for the top level). */
static lp_status walk(card_reader *r, yaml_node_t *map, const char *group, lp_arch *a)
{
    if (map->type != YAML_MAPPING_NODE)
        return at(r, map, "'%s' must be a mapping of keys to values", *group ? group : "card");
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(r->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(r->doc, p->value);
        if (!k || !v || k->type != YAML_SCALAR_NODE)
            return at(r, k ? k : map, "keys must be plain strings");
        const char *key = scalar_text(k);
        char path[96];
        snprintf(path, sizeof path, "%s%s%s", group, *group ? "." : "", key);
        if (v->type == YAML_MAPPING_NODE) {
            if (!group_known(path))
                continue; /* unknown sections are ignored, like unknown keys */
            lp_status st = walk(r, v, path, a);
            if (st != LP_OK)
                return st;
            continue;
        }
        if (!*group)
            continue; /* a top-level scalar is not part of the schema: ignored like any note */
        size_t i = 0;
        while (i < N_FIELDS && !(strcmp(FIELDS[i].group, group) == 0 &&
                                 strcmp(FIELDS[i].key, key) == 0))
            i++;
        /* Unknown keys are ignored, as in config.json: cards may carry notes and keys of newer
         * loupe versions. A misspelt required key still fails as missing. */
        if (i == N_FIELDS)
            continue;
        if (r->seen[i])
            return at(r, k, "key '%s' given twice", path);
        if (scalar_is_null(v))
            continue;
        r->seen[i] = v;
        lp_status st = read_field(r, &FIELDS[i], v, a);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

static yaml_node_t *given(const card_reader *r, const char *group, const char *key)
{
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strcmp(FIELDS[i].group, group) == 0 && strcmp(FIELDS[i].key, key) == 0)
            return r->seen[i];
    return NULL;
}

/* A sequence of integers; n_items = its length. */
static lp_status read_int_list(const card_reader *r, yaml_node_t *node, const char *key,
                               int64_t *items, int64_t max_items, int64_t *n_items)
{
    if (node->type != YAML_SEQUENCE_NODE)
        return at(r, node, "key '%s': expected a list like [0, 1]", key);
    int64_t n = 0;
    for (yaml_node_item_t *it = node->data.sequence.items.start;
         it < node->data.sequence.items.top; it++, n++) {
        yaml_node_t *item = yaml_document_get_node(r->doc, *it);
        if (n >= max_items)
            return at(r, node, "key '%s': more than %lld entries", key, (long long)max_items);
        lp_status st = read_count(r, item, key, &items[n]);
        if (st != LP_OK)
            return st;
    }
    *n_items = n;
    return LP_OK;
}

static lp_status read_layer_indices(const card_reader *r, yaml_node_t *node, const char *key,
                                    const lp_arch *a, bool *mark)
{
    int64_t idx[LP_MAX_LAYERS], n = 0;
    lp_status st = read_int_list(r, node, key, idx, LP_MAX_LAYERS, &n);
    if (st != LP_OK)
        return st;
    for (int64_t i = 0; i < n; i++) {
        if (idx[i] >= a->n_layers)
            return at(r, node, "key '%s': layer %lld is not in 0..%lld", key, (long long)idx[i],
                      (long long)a->n_layers - 1);
        mark[idx[i]] = true;
    }
    return LP_OK;
}

static lp_status read_per_layer(const card_reader *r, yaml_node_t *node, const char *key,
                                const lp_arch *a, int64_t *values)
{
    int64_t n = 0;
    lp_status st = read_int_list(r, node, key, values, LP_MAX_LAYERS, &n);
    if (st == LP_OK && n != a->n_layers)
        return at(r, node, "key '%s': %lld entries, want one per layer (%lld)", key, (long long)n,
                  (long long)a->n_layers);
    return st;
}

/* A list of numbers [1.0, 1.5, ...] of at most max_items entries. */
static lp_status read_num_list(const card_reader *r, yaml_node_t *node, const char *key,
                               double *items, int64_t max_items, int64_t *n_items)
{
    if (node->type != YAML_SEQUENCE_NODE)
        return at(r, node, "key '%s': expected a list like [1.0, 1.5]", key);
    int64_t n = 0;
    for (yaml_node_item_t *it = node->data.sequence.items.start;
         it < node->data.sequence.items.top; it++, n++) {
        if (n >= max_items)
            return at(r, node, "key '%s': more than %lld entries", key, (long long)max_items);
        lp_status st = read_num(r, yaml_document_get_node(r->doc, *it), key, &items[n]);
        if (st != LP_OK)
            return st;
    }
    *n_items = n;
    return LP_OK;
}

/* longrope's short_factor and long_factor: both or neither, of one length, every value
 * positive. */
static lp_status read_rope_factors(card_reader *r, lp_arch *a)
{
    lp_rope_scaling *s = &a->rope_scaling;
    yaml_node_t *sn = given(r, "positions.rope_scaling", "short_factor");
    yaml_node_t *ln = given(r, "positions.rope_scaling", "long_factor");
    if (!sn && !ln)
        return LP_OK;
    if (!sn || !ln)
        return at(r, sn ? sn : ln, "key '%s' needs %s too", sn ? "short_factor" : "long_factor",
                  sn ? "long_factor" : "short_factor");
    int64_t n_short = 0, n_long = 0;
    lp_status st = read_num_list(r, sn, "short_factor", s->short_factor, LP_MAX_ROPE_FACTORS,
                                 &n_short);
    if (st == LP_OK)
        st = read_num_list(r, ln, "long_factor", s->long_factor, LP_MAX_ROPE_FACTORS, &n_long);
    if (st != LP_OK)
        return st;
    if (n_short != n_long)
        return at(r, ln, "key 'long_factor': %lld entries, short_factor has %lld",
                  (long long)n_long, (long long)n_short);
    for (int64_t i = 0; i < n_short; i++)
        if (!(s->short_factor[i] > 0) || !(s->long_factor[i] > 0))
            return at(r, s->short_factor[i] > 0 ? ln : sn,
                      "key 'rope_scaling': factor %lld must be positive", (long long)i);
    s->n_factors = n_short;
    return LP_OK;
}

static double yarn_mscale(double scale, double m)
{
    return scale <= 1.0 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

/* n_layers within the limit, and the keys every card must give (each count at least 1). */
static lp_status check_required(card_reader *r, const lp_arch *a)
{
    if (a->n_layers > LP_MAX_LAYERS)
        return at(r, given(r, "dims", "n_layers"), "key 'n_layers': %lld exceeds the limit of %d",
                  (long long)a->n_layers, LP_MAX_LAYERS);
    if (a->n_layers <= 0)
        return lp_error_set(r->err, LP_ERR_FORMAT, "%s: missing required key 'dims.n_layers'",
                            r->path);
    static const char *const required[][2] = {
        {"dims", "vocab_size"},   {"dims", "hidden_size"}, {"attention", "n_heads"},
        {"model", "family"},
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!given(r, required[i][0], required[i][1]))
            return lp_error_set(r->err, LP_ERR_FORMAT, "%s: missing required key '%s.%s'",
                                r->path, required[i][0], required[i][1]);
    const int64_t *counts[3] = {&a->vocab_size, &a->hidden_size, &a->n_heads};
    for (int i = 0; i < 3; i++)
        if (*counts[i] <= 0)
            return at(r, given(r, required[i][0], required[i][1]),
                      "key '%s': %lld must be at least 1", required[i][1], (long long)*counts[i]);
    return LP_OK;
}

/* Keys that only mean something with another one: refuse them alone rather than keep values the
 * rest of the description ignores (and a card written back would drop). */
static lp_status check_dependent_keys(card_reader *r, const lp_arch *a)
{
    for (size_t i = 0; i < N_FIELDS; i++) {
        const card_field *f = &FIELDS[i];
        if (!r->seen[i])
            continue;
        bool scaling = strcmp(f->group, "positions.rope_scaling") == 0;
        const char *needs = NULL;
        if (strcmp(f->group, "mla") == 0 && !given(r, "mla", "kv_lora_rank"))
            needs = "mla.kv_lora_rank";
        else if (strcmp(f->group, "moe") == 0 && a->n_experts == 0)
            needs = "moe.n_experts of at least 1";
        else if (scaling && strcmp(f->key, "kind") != 0 &&
                 a->rope_scaling.kind == LP_ROPE_SCALING_NONE)
            needs = "a rope_scaling.kind other than none";
        else if (((strcmp(f->group, "positions") == 0 && strncmp(f->key, "rope", 4) == 0) ||
                  scaling || strcmp(f->key, "partial_rotary") == 0) &&
                 a->pos_kind != LP_POS_ROPE)
            needs = "positions.kind rope";
        else if (strcmp(f->key, "alibi_max_bias") == 0 && a->pos_kind != LP_POS_ALIBI)
            needs = "positions.kind alibi";
        if (needs)
            return at(r, r->seen[i], "key '%s.%s' needs %s", f->group, f->key, needs);
    }
    return LP_OK;
}

/* head_dim (given, from MLA's parts, or hidden / heads) and the heads dividing what they must;
 * *head_dim gets the value the later steps use. */
static lp_status read_heads(card_reader *r, lp_arch *a, int64_t *head_dim)
{
    yaml_node_t *n;
    lp_status st;
    if ((n = given(r, "attention", "head_dim"))) {
        if ((st = read_count(r, n, "head_dim", &a->head_dim)) != LP_OK)
            return st;
        a->head_dim_explicit = a->head_dim > 0;
    }
    if (given(r, "mla", "kv_lora_rank")) {
        a->mla = true;
        if (a->head_dim == 0)
            a->head_dim = a->qk_nope_head_dim + a->qk_rope_head_dim;
        if (!given(r, "positions", "rope_dim"))
            a->rope_dim = a->qk_rope_head_dim;
        if (!given(r, "positions", "partial_rotary") && a->head_dim > 0)
            a->partial_rotary = (double)a->rope_dim / (double)a->head_dim;
    }
    if (a->head_dim == 0 && a->n_heads > 0 && a->hidden_size % a->n_heads != 0)
        return at(r, given(r, "attention", "n_heads"),
                  "key 'n_heads': %lld heads do not divide hidden_size %lld and head_dim is "
                  "absent",
                  (long long)a->n_heads, (long long)a->hidden_size);
    if ((n = given(r, "attention", "n_kv_heads")) && a->n_kv_heads > 0 &&
        a->n_heads % a->n_kv_heads != 0)
        return at(r, n, "key 'n_kv_heads': %lld does not divide n_heads %lld",
                  (long long)a->n_kv_heads, (long long)a->n_heads);
    *head_dim = a->head_dim ? a->head_dim : a->hidden_size / a->n_heads; /* n_heads >= 1 */
    return LP_OK;
}

/* The norm bias (LayerNorm's default), query_pre_attn_scalar, yarn's truncate and mscale pair
 * (the same derivation as for a DeepSeek config.json, hf_config.c). */
static lp_status read_scales(card_reader *r, lp_arch *a, int64_t head_dim)
{
    yaml_node_t *n;
    lp_status st;
    if ((n = given(r, "norm", "bias")) && (st = read_bool(r, n, "bias", &a->bias_norm)) != LP_OK)
        return st;
    if (!n)
        a->bias_norm = a->norm_kind == LP_NORM_LAYER;
    if ((n = given(r, "attention", "query_pre_attn_scalar"))) {
        double s = 0.0;
        if ((st = read_num(r, n, "query_pre_attn_scalar", &s)) != LP_OK)
            return st;
        if (!(s > 0.0))
            return at(r, n, "key 'query_pre_attn_scalar': %g must be positive", s);
        a->query_scale = 1.0 / sqrt(s);
    }
    yaml_node_t *m = given(r, "positions.rope_scaling", "mscale");
    yaml_node_t *m_all = given(r, "positions.rope_scaling", "mscale_all_dim");
    double mscale = 0.0, mscale_all = 0.0;
    if ((m && (st = read_num(r, m, "mscale", &mscale)) != LP_OK) ||
        (m_all && (st = read_num(r, m_all, "mscale_all_dim", &mscale_all)) != LP_OK))
        return st;
    bool truncate = true; /* yarn's ramp bounds rounded to whole pairs, transformers' default */
    if ((n = given(r, "positions.rope_scaling", "truncate")) &&
        (st = read_bool(r, n, "truncate", &truncate)) != LP_OK)
        return st;
    a->rope_scaling.yarn_unrounded = !truncate;
    if (mscale != 0.0 && mscale_all != 0.0 && a->rope_scaling.attention_factor == 0.0)
        a->rope_scaling.attention_factor = yarn_mscale(a->rope_scaling.factor, mscale) /
                                           yarn_mscale(a->rope_scaling.factor, mscale_all);
    if (a->mla && mscale_all != 0.0) { /* as in the HF reader: MLA attention only */
        double f = yarn_mscale(a->rope_scaling.factor, mscale_all);
        a->query_scale = f * f / sqrt((double)head_dim);
    }
    return LP_OK;
}

/* window_pattern: [sliding, full, ...] repeated over the layers. */
static lp_status read_window_pattern(card_reader *r, yaml_node_t *pattern, const lp_arch *a,
                                     bool *sliding)
{
    static const char *const words[] = {"full", "sliding"};
    if (pattern->type != YAML_SEQUENCE_NODE ||
        pattern->data.sequence.items.top == pattern->data.sequence.items.start)
        return at(r, pattern, "key 'window_pattern': expected a list like [sliding, full]");
    int64_t period = pattern->data.sequence.items.top - pattern->data.sequence.items.start;
    for (int64_t l = 0; l < a->n_layers; l++) {
        yaml_node_t *item =
            yaml_document_get_node(r->doc, pattern->data.sequence.items.start[l % period]);
        int s = 0;
        lp_status st = read_enum(r, item, "window_pattern", words, 2, &s);
        if (st != LP_OK)
            return st;
        sliding[l] = s == 1;
    }
    return LP_OK;
}

/* Which layers slide: window_layers (none, all or a list), window_pattern, else all. */
static lp_status read_sliding_layers(card_reader *r, yaml_node_t *layers, yaml_node_t *pattern,
                                     lp_arch *a)
{
    bool sliding[LP_MAX_LAYERS] = {false};
    lp_status st = LP_OK;
    if (layers && layers->type == YAML_SCALAR_NODE) {
        static const char *const words[] = {"none", "all"};
        int all = 0;
        st = read_enum(r, layers, "window_layers", words, 2, &all);
        for (int64_t l = 0; l < a->n_layers; l++)
            sliding[l] = all == 1;
    } else if (layers) {
        st = read_layer_indices(r, layers, "window_layers", a, sliding);
    } else if (pattern) {
        st = read_window_pattern(r, pattern, a, sliding);
    } else {
        for (int64_t l = 0; l < a->n_layers; l++)
            sliding[l] = true;
    }
    for (int64_t l = 0; st == LP_OK && l < a->n_layers; l++)
        a->layer_window[l] = sliding[l] ? a->sliding_window : 0;
    return st;
}

/* Windows: a size plus which layers use it, or a window per layer. */
static lp_status read_windows(card_reader *r, lp_arch *a)
{
    yaml_node_t *layers = given(r, "attention", "window_layers");
    yaml_node_t *pattern = given(r, "attention", "window_pattern");
    yaml_node_t *per_layer = given(r, "attention", "window_per_layer");
    if ((layers != NULL) + (pattern != NULL) + (per_layer != NULL) > 1)
        return at(r, layers ? layers : pattern,
                  "give only one of window_layers, window_pattern, window_per_layer");
    if (per_layer) {
        lp_status st = read_per_layer(r, per_layer, "window_per_layer", a, a->layer_window);
        for (int64_t l = 0; st == LP_OK && l < a->n_layers && a->sliding_window == 0; l++)
            a->sliding_window = a->layer_window[l];
        return st;
    }
    return a->sliding_window > 0 ? read_sliding_layers(r, layers, pattern, a) : LP_OK;
}

/* kv heads and dense widths per layer; which layers are MoE (all but dense_layers). */
static lp_status read_layer_lists(card_reader *r, lp_arch *a)
{
    yaml_node_t *n;
    lp_status st;
    if ((n = given(r, "attention", "kv_heads_per_layer")) &&
        (st = read_per_layer(r, n, "kv_heads_per_layer", a, a->layer_kv_heads)) != LP_OK)
        return st;
    if ((n = given(r, "ffn", "hidden_per_layer")) &&
        (st = read_per_layer(r, n, "hidden_per_layer", a, a->layer_ffn_hidden)) != LP_OK)
        return st;
    if (a->n_experts == 0)
        return LP_OK;
    bool dense[LP_MAX_LAYERS] = {false};
    if ((n = given(r, "moe", "dense_layers")) &&
        (st = read_layer_indices(r, n, "dense_layers", a, dense)) != LP_OK)
        return st;
    for (int64_t l = 0; l < a->n_layers; l++)
        a->layer_moe[l] = !dense[l];
    return LP_OK;
}

/* The keys that need other values first: lists over layers and derived numbers. */
static lp_status finish_specials(card_reader *r, lp_arch *a)
{
    int64_t head_dim = 0;
    lp_status st;
    if ((st = check_required(r, a)) != LP_OK || (st = check_dependent_keys(r, a)) != LP_OK ||
        (st = read_heads(r, a, &head_dim)) != LP_OK || (st = read_scales(r, a, head_dim)) != LP_OK ||
        (st = read_windows(r, a)) != LP_OK || (st = read_rope_factors(r, a)) != LP_OK)
        return st;
    return read_layer_lists(r, a);
}

/* libyaml's scanner walks its stack of flow levels for every token, so time grows with the square
 * of the nesting: 200,000 '[' took 140 s (found by hardening). A card nests two or three levels;
 * refuse deep flow nesting before libyaml sees it. Brackets are counted without regard to quoting:
 * a card never comes near the limit either way. */
#define CARD_MAX_FLOW_DEPTH 64

static lp_status check_flow_depth(const char *text, size_t size, const char *name, lp_error *err)
{
    size_t depth = 0, line = 1, col = 1;
    for (size_t i = 0; i < size; i++, col++) {
        char c = text[i];
        if (c == '\n') {
            line++;
            col = 0;
        } else if (c == '[' || c == '{') {
            if (++depth > CARD_MAX_FLOW_DEPTH)
                return lp_error_set(err, LP_ERR_FORMAT,
                                    "%s:%zu:%zu: flow collections nested deeper than %d levels",
                                    name, line, col, CARD_MAX_FLOW_DEPTH);
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return LP_OK;
}

lp_status lp_arch_from_yaml_text(const char *text, size_t size, const char *name, lp_arch *out,
                                 lp_error *err)
{
    lp_arch_init(out);
    snprintf(out->source, sizeof out->source, "%s", name);
    lp_status depth_st = check_flow_depth(text, size, name, err);
    if (depth_st != LP_OK)
        return depth_st;
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return lp_error_set(err, LP_ERR_NOMEM, "%s: cannot start the YAML parser", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, size);
    lp_status st;
    if (!yaml_parser_load(&parser, &doc)) {
        /* libyaml's own words, with its 1-based position */
        st = lp_error_set(err, parser.error == YAML_MEMORY_ERROR ? LP_ERR_NOMEM : LP_ERR_FORMAT,
                          "%s:%zu:%zu: %s%s%s", name, parser.problem_mark.line + 1,
                          parser.problem_mark.column + 1,
                          parser.problem ? parser.problem : "YAML error",
                          parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return st;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    card_reader *r = calloc(1, sizeof *r);
    if (!r) {
        st = lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
    } else if (!root) {
        st = lp_error_set(err, LP_ERR_FORMAT, "%s: empty card", name);
    } else {
        r->path = name;
        r->doc = &doc;
        r->err = err;
        /* A card's name comes from model.name; start from the file name. */
        snprintf(out->name, sizeof out->name, "%s", lp_path_basename(name));
        out->rope_layout = LP_ROPE_HALVES;
        st = walk(r, root, "", out);
        if (st == LP_OK)
            st = finish_specials(r, out);
    }
    free(r);
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (st != LP_OK)
        return st;
    return lp_arch_finish(out, err);
}

lp_status lp_arch_from_yaml(const char *yaml_path, lp_arch *out, lp_error *err)
{
    return lp_arch_read_file(yaml_path, CARD_MAX_BYTES, lp_arch_from_yaml_text, out, err);
}

/* ---------------------------------------------------------------------------------------------
 * Writing
 */

/* Shortest decimal that reads back as the same double; whole numbers as "10000.0". */
static void format_num(double v, char *buf, size_t size)
{
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, size, "%.1f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    /* "1e-06" is a string to YAML 1.1 readers such as PyYAML; "1.0e-06" is a float to all. */
    char *e = strchr(buf, 'e');
    if (e && !strchr(buf, '.') && strlen(buf) + 3 <= size) {
        memmove(e + 2, e, strlen(e) + 1);
        e[0] = '.';
        e[1] = '0';
    }
}

static bool field_is_default(const card_field *f, const lp_arch *a, const lp_arch *def)
{
    const char *x = (const char *)a + f->offset, *y = (const char *)def + f->offset;
    switch (f->type) {
    case F_INT: return *(const int64_t *)(const void *)x == *(const int64_t *)(const void *)y;
    case F_NUM: return *(const double *)(const void *)x == *(const double *)(const void *)y;
    case F_BOOL:
    case F_NOT_BOOL: return *(const bool *)(const void *)x == *(const bool *)(const void *)y;
    case F_STR: return strcmp(x, y) == 0;
    case F_QK_NORM: return !a->qk_norm && !a->qk_norm_full && !a->qk_norm_per_head;
    case F_SPECIAL: return true;
    default: return memcmp(x, y, f->size) == 0;
    }
}

/* Length of the valid UTF-8 sequence at s, or 0 if the bytes there are not one. */
static size_t utf8_sequence(const unsigned char *s)
{
    size_t n = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
             : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 2 && s[0] < 0xc2)
        return 0; /* overlong */
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

/* A string as a plain scalar when that is unambiguous, else double-quoted with escapes. Names
 * come from files and folders: control characters are escaped and bytes that are not UTF-8
 * become '?', since YAML readers refuse both. */
static void write_string(FILE *out, const char *x)
{
    bool plain = (x[0] >= 'A' && x[0] <= 'Z') || (x[0] >= 'a' && x[0] <= 'z') ||
                 (x[0] >= '0' && x[0] <= '9');
    for (const char *c = x; *c && plain; c++)
        plain = strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-+/()",
                       *c) != NULL;
    if (plain && strcmp(x, "null") != 0 && strcmp(x, "Null") != 0 && strcmp(x, "NULL") != 0) {
        fputs(x, out);
        return;
    }
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)x; *c;) {
        if (*c == '"' || *c == '\\') {
            fprintf(out, "\\%c", *c++);
        } else if (*c < 0x20 || *c == 0x7f) {
            fprintf(out, "\\x%02x", *c++);
        } else {
            size_t n = utf8_sequence(c);
            if (n == 0) {
                fputc('?', out);
                c++;
            } else {
                fwrite(c, 1, n, out);
                c += n;
            }
        }
    }
    fputc('"', out);
}

static void write_value(FILE *out, const card_field *f, const lp_arch *a)
{
    const char *x = (const char *)a + f->offset;
    char buf[64];
    switch (f->type) {
    case F_INT: fprintf(out, "%lld", (long long)*(const int64_t *)(const void *)x); break;
    case F_NUM:
        format_num(*(const double *)(const void *)x, buf, sizeof buf);
        fputs(buf, out);
        break;
    case F_BOOL: fputs(*(const bool *)(const void *)x ? "true" : "false", out); break;
    case F_NOT_BOOL: fputs(*(const bool *)(const void *)x ? "false" : "true", out); break;
    case F_STR: write_string(out, x); break;
    case F_FFN: fputs(FFN_NAMES[a->ffn_kind], out); break;
    case F_ACT: fputs(ACT_NAMES[a->act], out); break;
    case F_NORM: fputs(NORM_NAMES[a->norm_kind], out); break;
    case F_POS: fputs(POS_NAMES[a->pos_kind], out); break;
    case F_LAYOUT: fputs(LAYOUT_NAMES[a->rope_layout], out); break;
    case F_SCALING: fputs(SCALING_NAMES[a->rope_scaling.kind], out); break;
    case F_DTYPE: fputs(lp_dtype_name(a->storage_dtype), out); break;
    case F_QK_NORM:
        fputs(QK_NORM_NAMES[a->qk_norm_full       ? 2
                            : a->qk_norm_per_head ? 3
                            : a->qk_norm          ? 1
                                                  : 0],
              out);
        break;
    case F_SPECIAL: break;
    }
}

static void write_layer_list(FILE *out, const char *key, const int64_t *v, int64_t n)
{
    fprintf(out, "  %s: [", key);
    for (int64_t l = 0; l < n; l++)
        fprintf(out, "%s%lld", l ? ", " : "", (long long)v[l]);
    fputs("]\n", out);
}

static void write_windows(FILE *out, const lp_arch *a)
{
    int64_t n = a->n_layers, n_sliding = 0;
    bool uniform = true; /* every sliding layer uses sliding_window */
    for (int64_t l = 0; l < n; l++) {
        if (a->layer_window[l] > 0)
            n_sliding++;
        if (a->layer_window[l] != 0 && a->layer_window[l] != a->sliding_window)
            uniform = false;
    }
    if (n_sliding == 0)
        return;
    if (!uniform) {
        write_layer_list(out, "window_per_layer", a->layer_window, n);
        return;
    }
    fprintf(out, "  sliding_window: %lld\n", (long long)a->sliding_window);
    if (n_sliding == n) {
        fputs("  window_layers: all\n", out);
        return;
    }
    /* The shortest repeating pattern of at most 8 layers, else the list of sliding layers. */
    for (int64_t period = 1; period <= 8 && period < n; period++) {
        bool repeats = true;
        for (int64_t l = period; l < n && repeats; l++)
            repeats = a->layer_window[l] == a->layer_window[l % period];
        if (repeats) {
            fputs("  window_pattern: [", out);
            for (int64_t l = 0; l < period; l++)
                fprintf(out, "%s%s", l ? ", " : "", a->layer_window[l] ? "sliding" : "full");
            fputs("]\n", out);
            return;
        }
    }
    fputs("  window_layers: [", out);
    bool first = true;
    for (int64_t l = 0; l < n; l++)
        if (a->layer_window[l]) {
            fprintf(out, "%s%lld", first ? "" : ", ", (long long)l);
            first = false;
        }
    fputs("]\n", out);
}

static void write_num_list(FILE *out, const char *key, const double *v, int64_t n)
{
    fprintf(out, "    %s: [", key);
    for (int64_t i = 0; i < n; i++) {
        char buf[40];
        format_num(v[i], buf, sizeof buf);
        fprintf(out, "%s%s", i ? ", " : "", buf);
    }
    fputs("]\n", out);
}

static void write_specials(FILE *out, const char *group, const lp_arch *a, const char *url)
{
    const lp_rope_scaling *rs = &a->rope_scaling;
    if (strcmp(group, "positions.rope_scaling") == 0 && rs->n_factors > 0) {
        write_num_list(out, "short_factor", rs->short_factor, rs->n_factors);
        write_num_list(out, "long_factor", rs->long_factor, rs->n_factors);
    }
    if (strcmp(group, "positions.rope_scaling") == 0 && rs->yarn_unrounded)
        fputs("    truncate: false\n", out);
    int64_t n = a->n_layers;
    if (strcmp(group, "model") == 0 && url)
        fprintf(out, "  config_url: %s\n", url);
    if (strcmp(group, "attention") == 0) {
        if (a->head_dim_explicit)
            fprintf(out, "  head_dim: %lld\n", (long long)a->head_dim);
        bool varies = false;
        for (int64_t l = 0; l < n; l++)
            varies |= a->layer_kv_heads[l] != a->n_kv_heads;
        if (varies)
            write_layer_list(out, "kv_heads_per_layer", a->layer_kv_heads, n);
        write_windows(out, a);
    }
    if (strcmp(group, "ffn") == 0) {
        bool varies = false;
        for (int64_t l = 0; l < n; l++)
            varies |= a->layer_ffn_hidden[l] != (a->layer_moe[l] ? 0 : a->ffn_hidden);
        if (varies)
            write_layer_list(out, "hidden_per_layer", a->layer_ffn_hidden, n);
    }
    if (strcmp(group, "moe") == 0) {
        int64_t dense[LP_MAX_LAYERS], n_dense = 0;
        for (int64_t l = 0; l < n; l++)
            if (!a->layer_moe[l])
                dense[n_dense++] = l;
        if (n_dense)
            write_layer_list(out, "dense_layers", dense, n_dense);
    }
    if (strcmp(group, "norm") == 0 && a->bias_norm != (a->norm_kind == LP_NORM_LAYER))
        fprintf(out, "  bias: %s\n", a->bias_norm ? "true" : "false");
}

/* Write the body of one group (its keys, indented) into out. */
static void write_group(FILE *out, const char *group, const lp_arch *arch, const lp_arch *def,
                        const char *url)
{
    bool nested = strchr(group, '.') != NULL;
    for (size_t i = 0; i < N_FIELDS; i++) {
        const card_field *f = &FIELDS[i];
        if (strcmp(f->group, group) != 0 || f->type == F_SPECIAL)
            continue;
        if (strcmp(f->key, "sliding_window") == 0)
            continue; /* written with the window layers */
        bool rope_field = strcmp(f->group, "positions") == 0 && strncmp(f->key, "rope", 4) == 0;
        if (rope_field && arch->pos_kind != LP_POS_ROPE)
            continue;
        if (strcmp(f->key, "alibi_max_bias") == 0 && arch->pos_kind != LP_POS_ALIBI)
            continue;
        bool show = f->always || !field_is_default(f, arch, def) ||
                    strcmp(f->key, "rope_theta") == 0;
        if (!show)
            continue;
        fprintf(out, "%s%s: ", nested ? "    " : "  ", f->key);
        write_value(out, f, arch);
        fputc('\n', out);
    }
    write_specials(out, group, arch, url);
}

lp_status lp_arch_write_yaml(const lp_arch *arch, const char *config_url, FILE *out,
                             lp_error *err)
{
    lp_arch def;
    lp_arch_init(&def);
    /* Values the reader derives need not be written. */
    def.rope_layout = LP_ROPE_HALVES;
    def.n_kv_heads = arch->n_kv_heads;
    if (arch->pos_kind == LP_POS_ROPE) {
        def.rope_dim = arch->mla ? arch->qk_rope_head_dim
                                 : (int64_t)((double)arch->head_dim * arch->partial_rotary);
        def.partial_rotary = arch->mla ? (double)arch->qk_rope_head_dim / (double)arch->head_dim
                                       : 1.0;
    } else {
        def.rope_dim = 0;
    }
    if (arch->pos_kind == LP_POS_LEARNED)
        def.pos_table_rows = arch->n_ctx + arch->pos_offset;

    static const char *const groups[] = {"model", "dims",      "attention", "mla",
                                         "ffn",   "moe",       "positions", "norm",
                                         "block", "embeddings"};
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        if ((strcmp(groups[g], "mla") == 0 && !arch->mla) ||
            (strcmp(groups[g], "moe") == 0 && arch->n_experts == 0))
            continue;
        char *body = NULL;
        size_t body_len = 0;
        FILE *mem = open_memstream(&body, &body_len);
        if (!mem)
            return lp_error_set(err, LP_ERR_NOMEM, "writing the card for %s: out of memory",
                                arch->name);
        write_group(mem, groups[g], arch, &def, config_url);
        if (strcmp(groups[g], "positions") == 0 && arch->pos_kind == LP_POS_ROPE &&
            arch->rope_scaling.kind != LP_ROPE_SCALING_NONE) {
            fputs("  rope_scaling:\n", mem);
            write_group(mem, "positions.rope_scaling", arch, &def, config_url);
        }
        if (fclose(mem) != 0) {
            free(body);
            return lp_error_set(err, LP_ERR_NOMEM, "writing the card for %s: out of memory",
                                arch->name);
        }
        if (body_len > 0)
            fprintf(out, "%s:\n%s", groups[g], body);
        free(body);
    }
    if (ferror(out))
        return lp_error_set(err, LP_ERR_IO, "writing the card for %s failed", arch->name);
    return LP_OK;
}
