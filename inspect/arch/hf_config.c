/* Hugging Face config.json -> lp_arch, honouring each architecture's defaults and key aliases.
 *
 * The rules (defaults for tie_word_embeddings, implicit biases, aliases such as n_embd / n_head_kv
 * / num_local_experts, MoE layer selection, sliding-window patterns) follow the configuration and
 * modeling files of Hugging Face transformers; they are listed in ../shared/configs/README.md
 * and in the README's "The model description" section.
 */
#define _POSIX_C_SOURCE 200809L
#include "inspect/arch/arch_internal.h"
#include "core/names.h"
#include "inspect/inspect.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"

#define HF_CONFIG_MAX_BYTES (64u << 20) /* real configs are a few KiB; a tokenizer is not one */

/* What the reader needs while it walks one config: the file name for messages and the two
 * objects keys are looked up in (a multimodal config keeps the language model in text_config). */
typedef struct hf_reader {
    const char *path;
    const json_t *obj;  /* text_config when present, else the root */
    const json_t *root;
    lp_error *err;
    json_t *seen; /* keys looked up (an object used as a set), or NULL when nobody asks */
} hf_reader;

static const char *json_type_name(const json_t *value)
{
    switch (json_typeof(value)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

/* The value of key, from text_config first, then the root; NULL when absent or null. */
static const json_t *hf_get(const hf_reader *r, const char *key)
{
    if (r->seen)
        json_object_set_new(r->seen, key, json_true());
    const json_t *v = json_object_get(r->obj, key);
    if (!v && r->obj != r->root)
        v = json_object_get(r->root, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* A key the rules know but do not need in this config (it matters only with a setting this
 * config does not have): not listed by --strict. */
static void hf_mark(const hf_reader *r, const char *key)
{
    if (r->seen)
        json_object_set_new(r->seen, key, json_true());
}

static lp_status hf_type_error(const hf_reader *r, const char *key, const char *want,
                               const json_t *value)
{
    /* Show the bad value itself, cut short: configs are small, but a value may be a big array. */
    char shown[64] = "";
    char *dump = json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT);
    if (dump) {
        snprintf(shown, sizeof shown, " %.40s%s", dump, strlen(dump) > 40 ? "..." : "");
        free(dump);
    }
    return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key '%s': expected %s, got %s%s", r->path,
                        key, want, json_type_name(value), shown);
}

/* Integer value of a JSON node (an integral real such as 4096.0 counts too). */
static bool json_as_int(const json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && fabs(d) < 9.0e15) {
            *out = (int64_t)d;
            return true;
        }
    }
    return false;
}

/* Read an integer key; *found says whether it was present (absent or null leaves *out alone). */
static lp_status hf_int(const hf_reader *r, const char *key, int64_t *out, bool *found)
{
    if (found)
        *found = false;
    const json_t *v = hf_get(r, key);
    if (!v)
        return LP_OK;
    int64_t value;
    if (!json_as_int(v, &value))
        return hf_type_error(r, key, "an integer", v);
    if (value > LP_ARCH_MAX_COUNT || value < -LP_ARCH_MAX_COUNT)
        return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key '%s': %lld exceeds the limit of %lld",
                            r->path, key, (long long)value, (long long)LP_ARCH_MAX_COUNT);
    *out = value;
    if (found)
        *found = true;
    return LP_OK;
}

/* The first present key of a NULL-terminated alias list; *used names it (NULL if none). */
static lp_status hf_int_alias(const hf_reader *r, const char *const *keys, int64_t *out,
                              const char **used)
{
    *used = NULL;
    for (; *keys; keys++) {
        bool found;
        lp_status st = hf_int(r, *keys, out, &found);
        if (st != LP_OK)
            return st;
        if (found) {
            *used = *keys;
            return LP_OK;
        }
    }
    return LP_OK;
}

static lp_status hf_num(const hf_reader *r, const char *key, double *out, bool *found)
{
    if (found)
        *found = false;
    const json_t *v = hf_get(r, key);
    if (!v)
        return LP_OK;
    if (!json_is_number(v))
        return hf_type_error(r, key, "a number", v);
    *out = json_number_value(v) == 0.0 ? 0.0 : json_number_value(v); /* -0 is 0 */
    if (found)
        *found = true;
    return LP_OK;
}

static lp_status hf_bool(const hf_reader *r, const char *key, bool *out, bool *found)
{
    if (found)
        *found = false;
    const json_t *v = hf_get(r, key);
    if (!v)
        return LP_OK;
    if (!json_is_boolean(v))
        return hf_type_error(r, key, "true or false", v);
    *out = json_is_true(v);
    if (found)
        *found = true;
    return LP_OK;
}

static lp_status hf_str(const hf_reader *r, const char *key, const char **out)
{
    *out = NULL;
    const json_t *v = hf_get(r, key);
    if (!v)
        return LP_OK;
    if (!json_is_string(v))
        return hf_type_error(r, key, "a string", v);
    *out = json_string_value(v);
    return LP_OK;
}

/* A required positive count: missing, null, zero or negative is an error naming the key.
 * *used_out (may be NULL) names the alias that was found. */
static lp_status hf_require_count_as(const hf_reader *r, const char *const *keys, int64_t *out,
                                     const char **used_out)
{
    const char *used;
    *out = 0;
    if (used_out)
        *used_out = keys[0];
    lp_status st = hf_int_alias(r, keys, out, &used);
    if (st != LP_OK)
        return st;
    if (!used)
        return lp_error_set(r->err, LP_ERR_FORMAT, "%s: missing required key '%s'", r->path,
                            keys[0]);
    if (*out <= 0)
        return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key '%s': %lld must be at least 1",
                            r->path, used, (long long)*out);
    if (used_out)
        *used_out = used;
    return LP_OK;
}

static lp_status hf_require_count(const hf_reader *r, const char *const *keys, int64_t *out)
{
    return hf_require_count_as(r, keys, out, NULL);
}

/* An optional non-negative count. */
static lp_status hf_opt_count(const hf_reader *r, const char *const *keys, int64_t *out,
                              const char **used)
{
    const char *dummy;
    if (!used)
        used = &dummy;
    lp_status st = hf_int_alias(r, keys, out, used);
    if (st != LP_OK)
        return st;
    if (*used && *out < 0)
        return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key '%s': %lld must not be negative",
                            r->path, *used, (long long)*out);
    return LP_OK;
}

#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Per-architecture facts that are not in the config: what the modeling file hard-codes. */
typedef struct family_rules {
    const char *model_type;
    lp_ffn_kind ffn_kind;
    lp_norm_kind norm_kind;
    lp_pos_kind pos_kind;
    bool tied_default;  /* tie_word_embeddings when the key is absent */
    bool bias_all;      /* bias on every linear layer (GPT-2, OPT, BLOOM, Phi) */
    bool parallel;      /* attention and MLP read the same normed input */
} family_rules;

static const family_rules FAMILIES[] = {
    {"gpt2", LP_FFN_MLP, LP_NORM_LAYER, LP_POS_LEARNED, true, true, false},
    {"opt", LP_FFN_MLP, LP_NORM_LAYER, LP_POS_LEARNED, true, true, false},
    {"bloom", LP_FFN_MLP, LP_NORM_LAYER, LP_POS_ALIBI, true, true, false},
    {"falcon", LP_FFN_MLP, LP_NORM_LAYER, LP_POS_ROPE, true, false, true},
    {"phi", LP_FFN_MLP, LP_NORM_LAYER, LP_POS_ROPE, false, true, true},
    {"gptj", LP_FFN_MLP, LP_NORM_LAYER, LP_POS_ROPE, false, false, true},
    {"gpt_neox", LP_FFN_MLP, LP_NORM_LAYER, LP_POS_ROPE, false, true, true},
    {"stablelm", LP_FFN_SWIGLU, LP_NORM_LAYER, LP_POS_ROPE, false, false, false},
    {"gemma", LP_FFN_GEGLU, LP_NORM_RMS, LP_POS_ROPE, true, false, false},
    {"gemma2", LP_FFN_GEGLU, LP_NORM_RMS, LP_POS_ROPE, true, false, false},
    {"gemma3", LP_FFN_GEGLU, LP_NORM_RMS, LP_POS_ROPE, true, false, false},
    {"gemma3_text", LP_FFN_GEGLU, LP_NORM_RMS, LP_POS_ROPE, true, false, false},
    {"llama", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"mistral", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"mixtral", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"qwen2", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"qwen2_moe", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"qwen3", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"qwen3_moe", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"phi3", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"olmo2", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"deepseek_v2", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"deepseek_v3", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"starcoder2", LP_FFN_MLP, LP_NORM_LAYER, LP_POS_ROPE, true, true, false},
    {"gpt_oss", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    /* MPT: no_bias (MptConfig's default true) and attn_config are read by quirks_mpt */
    {"mpt", LP_FFN_MLP, LP_NORM_LAYER, LP_POS_ALIBI, true, false, false},
    /* read further by apply_family_quirks below */
    {"chatglm", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"qwen", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"internlm", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"internlm2", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"baichuan", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false, false, false},
    {"cohere", LP_FFN_SWIGLU, LP_NORM_LAYER, LP_POS_ROPE, true, false, true},
    {"gpt_bigcode", LP_FFN_MLP, LP_NORM_LAYER, LP_POS_LEARNED, true, true, false},
    {"bert", LP_FFN_MLP, LP_NORM_LAYER, LP_POS_LEARNED, true, true, false},
    {"roberta", LP_FFN_MLP, LP_NORM_LAYER, LP_POS_LEARNED, true, true, false},
    {"xlm-roberta", LP_FFN_MLP, LP_NORM_LAYER, LP_POS_LEARNED, true, true, false},
};

/* A model_type that is not listed is read like Llama (the most common layout, and what many
 * "llama-compatible" types are), and arch->assumed_family says so: nothing derived from such a
 * description may pass for exact. */
static const family_rules LLAMA_LIKE = {"", LP_FFN_SWIGLU, LP_NORM_RMS, LP_POS_ROPE, false,
                                        false, false};

static bool is_family(const lp_arch *a, const char *name)
{
    return strcmp(a->family, name) == 0;
}

static bool family_prefix(const lp_arch *a, const char *prefix)
{
    return strncmp(a->family, prefix, strlen(prefix)) == 0;
}

static bool family_in(const lp_arch *a, const char *families)
{
    return lp_arch_name_in(a->family, families);
}

/* ---- key tables ------------------------------------------------------------------------------ */

/* How a table row reads its key into an lp_arch field. */
typedef enum hf_kind {
    HF_REQUIRED, /* int64_t: a count >= 1 that must be there */
    HF_COUNT,    /* int64_t: a count >= 0, left alone when absent */
    HF_INT,      /* int64_t: any integer within LP_ARCH_MAX_COUNT, left alone when absent */
    HF_NUMBER,   /* double, left alone when absent */
    HF_FLAG,     /* bool, left alone when absent */
} hf_kind;

typedef struct hf_key {
    hf_kind kind;
    size_t field;            /* offsetof(lp_arch, ...) of the value */
    const char *families;    /* NULL: every family; else as family_in() takes them */
    const char *const *keys; /* aliases: the first one present is read */
} hf_key;

#define HF_KEY(kind, field, families, ...) \
    {kind, offsetof(lp_arch, field), families, KEYS(__VA_ARGS__)}

#define N_ROWS(rows) (sizeof rows / sizeof rows[0])

/* The first of the aliases that is present (for messages about a value already read). */
static const char *present_key(const hf_reader *r, const char *const *keys)
{
    for (const char *const *k = keys; *k; k++)
        if (hf_get(r, *k))
            return *k;
    return keys[0];
}

static lp_status hf_num_alias(const hf_reader *r, const char *const *keys, double *out)
{
    bool found = false;
    for (; *keys && !found; keys++) {
        lp_status st = hf_num(r, *keys, out, &found);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

static lp_status hf_bool_alias(const hf_reader *r, const char *const *keys, bool *out)
{
    bool found = false;
    for (; *keys && !found; keys++) {
        lp_status st = hf_bool(r, *keys, out, &found);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

static lp_status read_key(const hf_reader *r, const hf_key *k, void *field)
{
    switch (k->kind) {
    case HF_REQUIRED: return hf_require_count(r, k->keys, field);
    case HF_COUNT: return hf_opt_count(r, k->keys, field, NULL);
    case HF_INT: {
        const char *used;
        return hf_int_alias(r, k->keys, field, &used);
    }
    case HF_NUMBER: return hf_num_alias(r, k->keys, field);
    case HF_FLAG: return hf_bool_alias(r, k->keys, field);
    }
    return LP_OK;
}

/* Read the rows that apply to the family, in order; the first error stops. */
static lp_status read_keys(const hf_reader *r, lp_arch *a, const hf_key *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (rows[i].families && !family_in(a, rows[i].families))
            continue;
        lp_status st = read_key(r, &rows[i], (char *)a + rows[i].field);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}


static lp_status parse_activation(const hf_reader *r, const char *key, const char *name,
                                  lp_activation *out)
{
    static const lp_name_entry activations[] = {
        {LP_ACT_SILU, "silu"},
        {LP_ACT_SILU, "swish"},
        {LP_ACT_GELU, "gelu"},
        {LP_ACT_GELU, "gelu_python"},
        {LP_ACT_GELU_TANH, "gelu_new"},
        {LP_ACT_GELU_TANH, "gelu_pytorch_tanh"},
        {LP_ACT_GELU_TANH, "gelu_fast"},
        {LP_ACT_GELU_TANH, "gelu_accurate"},
        {LP_ACT_RELU, "relu"},
    };
    int act;
    if (lp_names_value(activations, LP_NAMES_LEN(activations), name, false, &act)) {
        *out = (lp_activation)act;
        return LP_OK;
    }
    return lp_error_set(r->err, LP_ERR_UNSUPPORTED,
                        "%s: key '%s': activation \"%s\" is not supported (silu, gelu, gelu_new, "
                        "gelu_pytorch_tanh, relu)",
                        r->path, key, name);
}

static lp_dtype dtype_from_torch(const char *name)
{
    if (strcmp(name, "bfloat16") == 0)
        return LP_DTYPE_BF16;
    if (strcmp(name, "float16") == 0 || strcmp(name, "half") == 0)
        return LP_DTYPE_F16;
    if (strcmp(name, "float32") == 0 || strcmp(name, "float") == 0)
        return LP_DTYPE_F32;
    if (strcmp(name, "float64") == 0 || strcmp(name, "double") == 0)
        return LP_DTYPE_F64;
    if (strncmp(name, "float8_e4m3", 11) == 0)
        return LP_DTYPE_F8_E4M3;
    if (strncmp(name, "float8_e5m2", 11) == 0)
        return LP_DTYPE_F8_E5M2;
    return lp_dtype_from_name(name);
}

/* DeepSeek's yarn attention temperature: 0.1 * m * ln(scale) + 1 for scale > 1. */
static double yarn_mscale(double scale, double m)
{
    return scale <= 1.0 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}


/* ---- rope scaling ---------------------------------------------------------------------------- */

static const struct {
    const char *name;
    lp_rope_scaling_kind kind;
} ROPE_TYPES[] = {
    {"linear", LP_ROPE_SCALING_LINEAR}, {"dynamic", LP_ROPE_SCALING_DYNAMIC},
    {"llama3", LP_ROPE_SCALING_LLAMA3}, {"yarn", LP_ROPE_SCALING_YARN},
    {"longrope", LP_ROPE_SCALING_LONGROPE}, {"su", LP_ROPE_SCALING_LONGROPE},
};

/* Inside the rope_scaling object. */
static const hf_key ROPE_SCALING[] = {
    HF_KEY(HF_NUMBER, rope_scaling.factor, NULL, "factor"),
    HF_KEY(HF_INT, rope_scaling.original_ctx, NULL, "original_max_position_embeddings"),
    HF_KEY(HF_NUMBER, rope_scaling.low_freq_factor, NULL, "low_freq_factor"),
    HF_KEY(HF_NUMBER, rope_scaling.high_freq_factor, NULL, "high_freq_factor"),
    HF_KEY(HF_NUMBER, rope_scaling.beta_fast, NULL, "beta_fast"),
    HF_KEY(HF_NUMBER, rope_scaling.beta_slow, NULL, "beta_slow"),
    HF_KEY(HF_NUMBER, rope_scaling.attention_factor, NULL, "attention_factor"),
};

/* The rope type; *kind stays NONE for plain RoPE ("default", and "mrope", which only splits the
 * rotary dims among modalities: plain RoPE for text). */
static lp_status rope_scaling_kind(const hf_reader *sub, const char *key,
                                   lp_rope_scaling_kind *kind)
{
    const char *type = NULL;
    lp_status st = hf_str(sub, "rope_type", &type);
    if (st == LP_OK && !type)
        st = hf_str(sub, "type", &type);
    *kind = LP_ROPE_SCALING_NONE;
    if (st != LP_OK || !type || strcmp(type, "default") == 0 || strcmp(type, "mrope") == 0)
        return st;
    for (size_t i = 0; i < N_ROWS(ROPE_TYPES); i++)
        if (strcmp(type, ROPE_TYPES[i].name) == 0) {
            *kind = ROPE_TYPES[i].kind;
            return LP_OK;
        }
    return lp_error_set(sub->err, LP_ERR_UNSUPPORTED,
                        "%s: key '%s': rope type \"%s\" is not supported (linear, dynamic, "
                        "llama3, yarn, longrope)",
                        sub->path, key, type);
}

/* yarn: transformers' defaults for beta and truncate, and DeepSeek's mscale: the cos/sin are scaled by
 * mscale(mscale)/mscale(mscale_all_dim) and the softmax by mscale(mscale_all_dim)^2. */
static lp_status read_yarn(const hf_reader *sub, lp_arch *a)
{
    lp_rope_scaling *s = &a->rope_scaling;
    lp_arch_yarn_defaults(s);
    double mscale = 0.0, mscale_all_dim = 0.0;
    bool truncate = true;
    lp_status st;
    if ((st = hf_num(sub, "mscale", &mscale, NULL)) != LP_OK ||
        (st = hf_num(sub, "mscale_all_dim", &mscale_all_dim, NULL)) != LP_OK ||
        (st = hf_bool(sub, "truncate", &truncate, NULL)) != LP_OK)
        return st;
    s->yarn_unrounded = !truncate;
    if (s->attention_factor == 0.0 && mscale != 0.0 && mscale_all_dim != 0.0)
        s->attention_factor =
            yarn_mscale(s->factor, mscale) / yarn_mscale(s->factor, mscale_all_dim);
    /* only DeepSeek's MLA attention applies the softmax part */
    if (a->mla && mscale_all_dim != 0.0 && a->head_dim > 0) {
        double m = yarn_mscale(s->factor, mscale_all_dim);
        a->query_scale = m * m / sqrt((double)a->head_dim);
    }
    return LP_OK;
}

/* longrope's short_factor and long_factor: arrays of one length (at most LP_MAX_ROPE_FACTORS)
 * of positive numbers; their length is checked against rope_dim / 2 when the arch is finished. */
static lp_status read_longrope_factors(const hf_reader *sub, const char *key, lp_rope_scaling *s)
{
    static const char *const names[2] = {"short_factor", "long_factor"};
    double *dst[2] = {s->short_factor, s->long_factor};
    size_t n[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(sub->obj, names[i]);
        if (!v)
            continue;
        if (!json_is_array(v) || json_array_size(v) > LP_MAX_ROPE_FACTORS)
            return lp_error_set(sub->err, LP_ERR_FORMAT,
                                "%s: key '%s.%s': expected an array of at most %d numbers",
                                sub->path, key, names[i], LP_MAX_ROPE_FACTORS);
        n[i] = json_array_size(v);
        for (size_t j = 0; j < n[i]; j++) {
            const json_t *x = json_array_get(v, j);
            double d = json_is_number(x) ? json_number_value(x) : 0.0;
            if (!(d > 0.0))
                return lp_error_set(sub->err, LP_ERR_FORMAT,
                                    "%s: key '%s.%s[%zu]': expected a positive number", sub->path,
                                    key, names[i], j);
            dst[i][j] = d;
        }
    }
    if (n[0] != n[1])
        return lp_error_set(sub->err, LP_ERR_FORMAT,
                            "%s: key '%s': short_factor has %zu values, long_factor %zu", sub->path,
                            key, n[0], n[1]);
    s->n_factors = (int64_t)n[0];
    return LP_OK;
}

/* rope_scaling (or transformers v5 rope_parameters). */
static lp_status parse_rope_scaling(const hf_reader *r, lp_arch *a)
{
    const char *key = "rope_scaling";
    const json_t *rs = hf_get(r, key);
    if (!rs) {
        key = "rope_parameters";
        rs = hf_get(r, key);
    }
    if (!rs) {
        hf_mark(r, "original_max_position_embeddings"); /* Phi-3's, for longrope only */
        return LP_OK;
    }
    if (!json_is_object(rs))
        return hf_type_error(r, key, "an object", rs);
    hf_reader sub = {r->path, rs, rs, r->err, NULL}; /* nested keys are not listed */
    lp_rope_scaling *s = &a->rope_scaling;
    lp_status st = hf_num(&sub, "rope_theta", &a->rope_theta, NULL);
    if (st != LP_OK || (st = rope_scaling_kind(&sub, key, &s->kind)) != LP_OK ||
        s->kind == LP_ROPE_SCALING_NONE)
        return st;
    if ((st = read_keys(&sub, a, ROPE_SCALING, N_ROWS(ROPE_SCALING))) != LP_OK)
        return st;
    if (s->original_ctx == 0) /* Phi-3 keeps it at the top level */
        if ((st = hf_int(r, "original_max_position_embeddings", &s->original_ctx, NULL)) != LP_OK)
            return st;
    if (s->kind == LP_ROPE_SCALING_YARN && (st = read_yarn(&sub, a)) != LP_OK)
        return st;
    if (s->kind == LP_ROPE_SCALING_LONGROPE && (st = read_longrope_factors(&sub, key, s)) != LP_OK)
        return st;
    if (s->kind == LP_ROPE_SCALING_LONGROPE && s->factor == 0.0 && s->original_ctx > 0 &&
        a->n_ctx > 0)
        s->factor = (double)a->n_ctx / (double)s->original_ctx;
    return LP_OK;
}

/* ---- sliding windows, experts, latent attention --------------------------------------------- */

/* layer_types: ["sliding_attention", "full_attention", ...], one per layer. */
static lp_status parse_layer_types(const hf_reader *r, lp_arch *a, bool *found)
{
    *found = false;
    const json_t *types = hf_get(r, "layer_types");
    if (!types)
        return LP_OK;
    if (!json_is_array(types))
        return hf_type_error(r, "layer_types", "an array", types);
    if ((int64_t)json_array_size(types) != a->n_layers)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key 'layer_types': %zu entries, want one per layer (%lld)",
                            r->path, json_array_size(types), (long long)a->n_layers);
    for (int64_t l = 0; l < a->n_layers; l++) {
        const json_t *t = json_array_get(types, (size_t)l);
        const char *name = json_is_string(t) ? json_string_value(t) : NULL;
        if (!name)
            return lp_error_set(r->err, LP_ERR_FORMAT,
                                "%s: key 'layer_types': entry %lld is %s, want a string", r->path,
                                (long long)l, json_type_name(t));
        if (strcmp(name, "sliding_attention") == 0)
            a->layer_window[l] = a->sliding_window; /* a null window means full attention */
        else if (strcmp(name, "full_attention") == 0)
            a->layer_window[l] = 0;
        else
            return lp_error_set(r->err, LP_ERR_UNSUPPORTED,
                                "%s: key 'layer_types': entry %lld \"%s\" is not supported "
                                "(sliding_attention, full_attention)",
                                r->path, (long long)l, name);
    }
    *found = true;
    return LP_OK;
}

static lp_status parse_windows(const hf_reader *r, lp_arch *a)
{
    lp_status st;
    if ((st = hf_opt_count(r, KEYS("sliding_window"), &a->sliding_window, NULL)) != LP_OK)
        return st;
    bool use_sw = true;
    if ((st = hf_bool(r, "use_sliding_window", &use_sw, NULL)) != LP_OK)
        return st;
    if (!use_sw)
        a->sliding_window = 0;
    if (a->sliding_window == 0)
        hf_mark(r, "max_window_layers"); /* Qwen's, read only when a window is used */

    bool have_types;
    if ((st = parse_layer_types(r, a, &have_types)) != LP_OK || have_types)
        return st;
    if (a->sliding_window == 0)
        return LP_OK;

    if (family_prefix(a, "qwen")) {
        /* Qwen2/3: the layers from max_window_layers on use the window. */
        int64_t max_window_layers = 28;
        if ((st = hf_opt_count(r, KEYS("max_window_layers"), &max_window_layers, NULL)) != LP_OK)
            return st;
        for (int64_t l = max_window_layers; l < a->n_layers; l++)
            a->layer_window[l] = a->sliding_window;
    } else if (is_family(a, "gemma2")) {
        /* Every other layer slides, starting with layer 0. */
        for (int64_t l = 0; l < a->n_layers; l += 2)
            a->layer_window[l] = a->sliding_window;
    } else if (family_prefix(a, "gemma3")) {
        int64_t pattern = 6;
        const char *used;
        if ((st = hf_opt_count(r, KEYS("sliding_window_pattern", "_sliding_window_pattern"),
                               &pattern, &used)) != LP_OK)
            return st;
        if (pattern == 0)
            return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key '%s': 0 must be at least 1",
                                r->path, used);
        for (int64_t l = 0; l < a->n_layers; l++)
            if ((l + 1) % pattern != 0)
                a->layer_window[l] = a->sliding_window;
    } else if (is_family(a, "gemma")) {
        a->sliding_window = 0; /* Gemma 1 attends globally */
    } else {
        for (int64_t l = 0; l < a->n_layers; l++)
            a->layer_window[l] = a->sliding_window;
    }
    return LP_OK;
}


/* DeepSeek's layer selection, also used by its descendants (GLM-4.5 and others) that keep
 * first_k_dense_replace and n_routed_experts. */
static lp_status read_deepseek_moe_layers(const hf_reader *r, lp_arch *a)
{
    int64_t first_dense = 0, freq = 1;
    lp_status st;
    if ((st = hf_opt_count(r, KEYS("n_shared_experts"), &a->n_shared_experts, NULL)) != LP_OK ||
        (st = hf_opt_count(r, KEYS("first_k_dense_replace"), &first_dense, NULL)) != LP_OK ||
        (st = hf_opt_count(r, KEYS("moe_layer_freq"), &freq, NULL)) != LP_OK)
        return st;
    if (freq == 0)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key 'moe_layer_freq': 0 must be at least 1", r->path);
    for (int64_t l = first_dense; l < a->n_layers; l++)
        a->layer_moe[l] = l % freq == 0;
    const char *topk_method = NULL, *scoring = NULL;
    if ((st = hf_str(r, "topk_method", &topk_method)) != LP_OK ||
        (st = hf_str(r, "scoring_func", &scoring)) != LP_OK)
        return st;
    bool v3 = is_family(a, "deepseek_v3");
    /* DeepseekV3Config: noaux_tc, 8 groups of which 4, scaling 2.5, normalized; V2: greedy */
    if (!topk_method)
        topk_method = v3 ? "noaux_tc" : "greedy";
    a->router_score_bias = strcmp(topk_method, "noaux_tc") == 0;
    a->router_sigmoid = scoring ? strcmp(scoring, "sigmoid") == 0 : v3;
    bool grouped = a->router_score_bias || strcmp(topk_method, "group_limited_greedy") == 0;
    int64_t groups = v3 ? 8 : 0, topk_groups = v3 ? 4 : 0;
    double scaling = v3 ? 2.5 : 1.0;
    if ((st = hf_opt_count(r, KEYS("n_group"), &groups, NULL)) != LP_OK ||
        (st = hf_opt_count(r, KEYS("topk_group"), &topk_groups, NULL)) != LP_OK ||
        (st = hf_num(r, "routed_scaling_factor", &scaling, NULL)) != LP_OK)
        return st;
    if (v3 && !hf_get(r, "norm_topk_prob"))
        a->norm_topk_prob = true;
    if (grouped && groups > 1) {
        if (a->n_experts % groups != 0 || topk_groups < 1 || topk_groups > groups ||
            topk_groups * (a->n_experts / groups) < a->n_experts_per_tok)
            return lp_error_set(r->err, LP_ERR_FORMAT,
                                "%s: keys 'n_group' %lld / 'topk_group' %lld: %lld experts do not "
                                "split into groups that hold the %lld chosen",
                                r->path, (long long)groups, (long long)topk_groups,
                                (long long)a->n_experts, (long long)a->n_experts_per_tok);
        a->n_expert_groups = groups;
        a->topk_groups = topk_groups;
    }
    a->routed_scaling = scaling == 1.0 ? 0.0 : scaling;
    return LP_OK;
}

/* What Qwen2MoeConfig and Qwen3MoeConfig put in for a key the config leaves out. */
typedef struct moe_class_defaults {
    const char *family;
    int64_t n_experts, top_k, expert_ffn, shared_ffn;
} moe_class_defaults;

static const moe_class_defaults *moe_defaults_of(const lp_arch *a)
{
    static const moe_class_defaults table[] = {
        {"qwen2_moe", 60, 4, 1408, 5632},
        {"qwen3_moe", 128, 8, 768, 0},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (is_family(a, table[i].family))
            return &table[i];
    return NULL;
}

/* Qwen MoE style: decoder_sparse_step and mlp_only_layers choose the MoE layers. */
static lp_status read_qwen_moe_layers(const hf_reader *r, lp_arch *a)
{
    int64_t step = 1;
    lp_status st = hf_opt_count(r, KEYS("decoder_sparse_step"), &step, NULL);
    if (st != LP_OK)
        return st;
    if (step == 0)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key 'decoder_sparse_step': 0 must be at least 1", r->path);
    for (int64_t l = 0; l < a->n_layers; l++)
        a->layer_moe[l] = (l + 1) % step == 0;
    const json_t *dense = hf_get(r, "mlp_only_layers");
    if (dense && !json_is_array(dense))
        return hf_type_error(r, "mlp_only_layers", "an array", dense);
    for (size_t i = 0; dense && i < json_array_size(dense); i++) {
        int64_t l;
        if (!json_as_int(json_array_get(dense, i), &l) || l < 0 || l >= a->n_layers)
            return lp_error_set(r->err, LP_ERR_FORMAT,
                                "%s: key 'mlp_only_layers': entry %zu is not a layer index in "
                                "0..%lld",
                                r->path, i, (long long)a->n_layers - 1);
        a->layer_moe[l] = false;
    }
    const char *used;
    if ((st = hf_opt_count(r, KEYS("shared_expert_intermediate_size"),
                           &a->shared_expert_ffn_hidden, &used)) != LP_OK)
        return st;
    const moe_class_defaults *d = moe_defaults_of(a);
    if (!used && d)
        a->shared_expert_ffn_hidden = d->shared_ffn;
    a->shared_expert_gate = a->shared_expert_ffn_hidden > 0;
    return LP_OK;
}

/* Experts and top-k; *any is false for a dense model. */
static lp_status read_expert_counts(const hf_reader *r, lp_arch *a, bool *any)
{
    const char *used;
    const moe_class_defaults *d = moe_defaults_of(a);
    lp_status st = hf_opt_count(r, KEYS("num_local_experts", "num_experts", "n_routed_experts"),
                                &a->n_experts, &used);
    if (st == LP_OK && !used && d)
        a->n_experts = d->n_experts;
    *any = st == LP_OK && a->n_experts > 0;
    if (!*any)
        return st;
    if ((st = hf_opt_count(r, KEYS("num_experts_per_tok", "moe_top_k", "top_k"),
                           &a->n_experts_per_tok, &used)) != LP_OK)
        return st;
    if (!used && d) {
        a->n_experts_per_tok = d->top_k;
        used = "num_experts_per_tok";
    }
    if (!used)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: missing required key 'num_experts_per_tok' for %lld experts",
                            r->path, (long long)a->n_experts);
    if (a->n_experts_per_tok == 0 || a->n_experts_per_tok > a->n_experts)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key '%s': %lld must be in 1..%lld (the expert count)", r->path,
                            used, (long long)a->n_experts_per_tok, (long long)a->n_experts);
    if ((st = hf_bool(r, "norm_topk_prob", &a->norm_topk_prob, NULL)) != LP_OK)
        return st;
    if (is_family(a, "gpt_oss")) {
        a->norm_topk_prob = true; /* softmax over the top-k logits only */
        if ((st = hf_num(r, "swiglu_limit", &a->swiglu_limit, NULL)) != LP_OK)
            return st;
    }
    return LP_OK;
}

static lp_status parse_moe(const hf_reader *r, lp_arch *a)
{
    bool any;
    lp_status st = read_expert_counts(r, a, &any);
    if (st != LP_OK || !any)
        return st;
    if (is_family(a, "mixtral")) {
        a->expert_ffn_hidden = a->ffn_hidden; /* intermediate_size is per expert */
        a->norm_topk_prob = true;             /* Mixtral renormalizes its top-2 */
        for (int64_t l = 0; l < a->n_layers; l++)
            a->layer_moe[l] = true;
        return LP_OK;
    }
    const char *used;
    if ((st = hf_opt_count(r, KEYS("moe_intermediate_size"), &a->expert_ffn_hidden, &used)) !=
        LP_OK)
        return st;
    if (!used)
        a->expert_ffn_hidden = moe_defaults_of(a) ? moe_defaults_of(a)->expert_ffn : a->ffn_hidden;
    if (family_prefix(a, "deepseek") || hf_get(r, "first_k_dense_replace"))
        return read_deepseek_moe_layers(r, a);
    return read_qwen_moe_layers(r, a);
}

static lp_status parse_mla(const hf_reader *r, lp_arch *a)
{
    lp_status st;
    const char *used;
    if ((st = hf_opt_count(r, KEYS("kv_lora_rank"), &a->kv_lora_rank, &used)) != LP_OK)
        return st;
    if (!used)
        return LP_OK;
    a->mla = true;
    if ((st = hf_opt_count(r, KEYS("q_lora_rank"), &a->q_lora_rank, NULL)) != LP_OK)
        return st;
    if ((st = hf_require_count(r, KEYS("qk_rope_head_dim"), &a->qk_rope_head_dim)) != LP_OK ||
        (st = hf_require_count(r, KEYS("qk_nope_head_dim"), &a->qk_nope_head_dim)) != LP_OK ||
        (st = hf_require_count(r, KEYS("v_head_dim"), &a->v_head_dim)) != LP_OK)
        return st;
    /* A query/key head is nope + rope wide; only the rope part rotates. */
    a->head_dim = a->qk_nope_head_dim + a->qk_rope_head_dim;
    a->head_dim_explicit = false;
    a->rope_dim = a->qk_rope_head_dim;
    a->partial_rotary = (double)a->qk_rope_head_dim / (double)a->head_dim;
    return LP_OK;
}

static void set_name(lp_arch *a, const char *path)
{
    /* ".../Llama-3.1-8B/config.json" is best named by its folder. */
    size_t end = strlen(path);
    const char *base = lp_path_basename(path);
    if (strcmp(base, "config.json") == 0) {
        end = (size_t)(base - path);
        while (end > 0 && path[end - 1] == '/')
            end--;
        size_t begin = end;
        while (begin > 0 && path[begin - 1] != '/')
            begin--;
        size_t len = end - begin;
        if (len > 0 && !(len == 1 && path[begin] == '.') && !(len == 2 && path[begin] == '.')) {
            if (len >= sizeof a->name)
                len = sizeof a->name - 1;
            memcpy(a->name, path + begin, len);
            a->name[len] = '\0';
            return;
        }
    }
    snprintf(a->name, sizeof a->name, "%s", base);
}

/* Old configs may lack model_type; their class name says the same. Longest prefixes first. */
static const char *model_type_from_architectures(const hf_reader *r)
{
    static const char *const table[][2] = {
        {"Qwen2Moe", "qwen2_moe"},    {"Qwen3Moe", "qwen3_moe"},    {"Qwen2", "qwen2"},
        {"Qwen3", "qwen3"},           {"Gemma3", "gemma3_text"},    {"Gemma2", "gemma2"},
        {"Gemma", "gemma"},           {"Phi3", "phi3"},             {"Phi", "phi"},
        {"Mixtral", "mixtral"},       {"Mistral", "mistral"},       {"Llama", "llama"},
        {"GPT2", "gpt2"},             {"GPTNeoX", "gpt_neox"},      {"GPTJ", "gptj"},
        {"OPT", "opt"},               {"Bloom", "bloom"},           {"Falcon", "falcon"},
        {"DeepseekV2", "deepseek_v2"}, {"DeepseekV3", "deepseek_v3"}, {"StableLm", "stablelm"},
        {"Olmo2", "olmo2"},
    };
    if (r->seen)
        json_object_set_new(r->seen, "architectures", json_true());
    const json_t *archs = json_object_get(r->root, "architectures");
    const json_t *first = json_is_array(archs) ? json_array_get(archs, 0) : NULL;
    const char *name = json_is_string(first) ? json_string_value(first) : NULL;
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strncmp(name, table[i][0], strlen(table[i][0])) == 0)
            return table[i][1];
    return NULL;
}

/* ---- families read beyond the shared keys --------------------------------------------------
 * ChatGLM, Qwen (v1), InternLM and Baichuan ship their modeling code in their Hugging Face
 * repositories (trust_remote_code); Cohere, GPT-BigCode and the BERT family are in transformers.
 * Each function states what its modeling file hard-codes; the parameter counts that follow are
 * derived by hand beside the tests (tests/estimate/test_estimate.c). */

/* A positive count under key, if present, into *out. */
static lp_status quirk_count(const hf_reader *r, const char *key, int64_t *out)
{
    const char *used;
    int64_t v = *out;
    lp_status st = hf_opt_count(r, (const char *const[]){key, NULL}, &v, &used);
    if (st != LP_OK)
        return st;
    if (used && v == 0)
        return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key '%s': 0 must be at least 1", r->path,
                            key);
    *out = v;
    return LP_OK;
}

/* kv_channels (ChatGLM, Qwen): the width of one head, stated by the config. */
static lp_status quirk_kv_channels(const hf_reader *r, lp_arch *a)
{
    int64_t d = 0;
    lp_status st = quirk_count(r, "kv_channels", &d);
    if (st == LP_OK && d > 0) {
        a->head_dim = d;
        a->head_dim_explicit = true;
    }
    return st;
}

static lp_status quirks_chatglm(const hf_reader *r, lp_arch *a)
{
    /* modeling_chatglm.py (THUDM/chatglm2-6b, chatglm3-6b, glm-4-9b): padded_vocab_size rows of
     * embedding and output_layer; query_key_value [(heads + 2 x multi_query_group_num) x
     * kv_channels, hidden] with a bias when add_qkv_bias; dense and the MLP biased only when
     * add_bias_linear; dense_h_to_4h fuses gate and up (SwiGLU); RMSNorm unless rmsnorm is false;
     * a final norm when post_layer_norm; RoPE over the first half of each head in adjacent pairs,
     * base 10000 x rope_ratio. */
    lp_status st;
    bool mqa = false, qkv_bias = false, linear_bias = false, rms = true, final_norm = true;
    double ratio = 1.0;
    if ((st = quirk_count(r, "padded_vocab_size", &a->vocab_size)) != LP_OK ||
        (st = quirk_kv_channels(r, a)) != LP_OK ||
        (st = hf_bool(r, "multi_query_attention", &mqa, NULL)) != LP_OK ||
        (st = hf_bool(r, "add_qkv_bias", &qkv_bias, NULL)) != LP_OK ||
        (st = hf_bool(r, "add_bias_linear", &linear_bias, NULL)) != LP_OK ||
        (st = hf_bool(r, "rmsnorm", &rms, NULL)) != LP_OK ||
        (st = hf_bool(r, "post_layer_norm", &final_norm, NULL)) != LP_OK ||
        (st = hf_num(r, "layernorm_epsilon", &a->norm_eps, NULL)) != LP_OK ||
        (st = hf_num(r, "rope_ratio", &ratio, NULL)) != LP_OK)
        return st;
    if (mqa) {
        a->n_kv_heads = 1;
        if ((st = quirk_count(r, "multi_query_group_num", &a->n_kv_heads)) != LP_OK)
            return st;
    }
    a->bias_qkv = qkv_bias;
    a->bias_o = a->bias_mlp = linear_bias;
    a->norm_kind = rms ? LP_NORM_RMS : LP_NORM_LAYER;
    a->bias_norm = !rms;
    a->final_norm = final_norm;
    if (!(ratio > 0.0))
        return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key 'rope_ratio': %g must be positive",
                            r->path, ratio);
    a->rope_theta = 10000.0 * ratio;
    a->rope_dim = a->head_dim / 2;
    a->partial_rotary = 0.5;
    a->rope_layout = LP_ROPE_ADJACENT;
    return LP_OK;
}

static lp_status quirks_qwen(const hf_reader *r, lp_arch *a)
{
    /* modeling_qwen.py (Qwen/Qwen-1_8B, -7B, -14B, -72B): QWenMLP's w1 and w2 are
     * intermediate_size / 2 wide (the config states twice the width); c_attn always has a
     * bias, c_proj and the MLP only when no_bias is false; kv_channels is the head width. */
    bool no_bias = true;
    lp_status st;
    if ((st = quirk_kv_channels(r, a)) != LP_OK ||
        (st = hf_bool(r, "no_bias", &no_bias, NULL)) != LP_OK)
        return st;
    if (a->ffn_hidden % 2 != 0)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key 'intermediate_size': %lld is odd, but Qwen's MLP is half "
                            "of it wide", r->path, (long long)a->ffn_hidden);
    a->ffn_hidden /= 2;
    a->bias_qkv = true;
    a->bias_o = a->bias_mlp = !no_bias;
    return LP_OK;
}

static lp_status quirks_internlm(const hf_reader *r, lp_arch *a)
{
    /* modeling_internlm.py / modeling_internlm2.py: q/k/v/o (InternLM2: wqkv and wo) carry a
     * bias when config.bias, which defaults to true; the rest is Llama's layout. */
    bool bias = true;
    lp_status st = hf_bool(r, "bias", &bias, NULL);
    a->bias_qkv = a->bias_o = bias;
    return st;
}

static lp_status quirks_baichuan(const hf_reader *r, lp_arch *a)
{
    /* modeling_baichuan.py: W_pack [3 hidden, hidden] and the rest bias-free, as Llama; the
     * 13B models use ALiBi instead of RoPE and give their context as model_max_length. vLLM
     * tells them apart by hidden_size 4096 (7B, RoPE); so does this. */
    if (a->hidden_size != 4096)
        a->pos_kind = LP_POS_ALIBI;
    return a->n_ctx == 0 ? quirk_count(r, "model_max_length", &a->n_ctx) : LP_OK;
}

static lp_status quirks_cohere(const hf_reader *r, lp_arch *a)
{
    /* modeling_cohere.py: one CohereLayerNorm (weight only) feeds attention and MLP in parallel;
     * with use_qk_norm, q and k get per-head norms [heads, head_dim] and [kv heads, head_dim]. */
    a->bias_norm = false;
    lp_status st = hf_bool(r, "use_qk_norm", &a->qk_norm, NULL);
    a->qk_norm_per_head = a->qk_norm;
    return st;
}

static lp_status quirks_gpt_bigcode(const hf_reader *r, lp_arch *a)
{
    /* modeling_gpt_bigcode.py: multi_query defaults to true (one shared k/v head, c_attn
     * [hidden + 2 head_dim, hidden]); learned positions n_positions; biases everywhere; tied. */
    bool multi_query = true;
    lp_status st = hf_bool(r, "multi_query", &multi_query, NULL);
    a->n_kv_heads = multi_query ? 1 : a->n_heads;
    return st;
}

static lp_status quirks_bert(const hf_reader *r, lp_arch *a)
{
    /* modeling_bert.py / modeling_roberta.py, counted as BertModel: word, position and
     * token-type embeddings and their LayerNorm; post-norm blocks (attention.output.LayerNorm,
     * output.LayerNorm) with biases everywhere; no final norm; the pooler; no LM head. RoBERTa's
     * positions start at padding_idx + 1 = 2, so max_position_embeddings (514) holds 2 more rows
     * than the context. */
    const char *pos_type = NULL;
    lp_status st;
    a->n_token_types = 2; /* BertConfig's type_vocab_size default */
    if ((st = hf_str(r, "position_embedding_type", &pos_type)) != LP_OK ||
        (st = hf_opt_count(r, KEYS("type_vocab_size"), &a->n_token_types, NULL)) != LP_OK)
        return st;
    if (pos_type && strcmp(pos_type, "absolute") != 0)
        return lp_error_set(r->err, LP_ERR_UNSUPPORTED,
                            "%s: key 'position_embedding_type': \"%.40s\" is not supported "
                            "(absolute)", r->path, pos_type);
    if (a->n_ctx == 0)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: missing required key 'max_position_embeddings'", r->path);
    if (!is_family(a, "bert") && a->n_ctx > 2) {
        a->pos_offset = 2;
        a->pos_table_rows = a->n_ctx;
        a->n_ctx -= 2;
    }
    a->encoder_only = a->pooler = a->post_norm = a->embed_norm = true;
    a->final_norm = false;
    return LP_OK;
}

static lp_status quirks_phi(const hf_reader *r, lp_arch *a)
{
    /* The original Phi-1.5/Phi-2 configs give the rotated width as rotary_dim (32 of 64); the
     * transformers ones as partial_rotary_factor, read above. */
    int64_t rotary_dim = 0;
    lp_status st = quirk_count(r, "rotary_dim", &rotary_dim);
    if (st == LP_OK && rotary_dim > 0 && rotary_dim <= a->head_dim) {
        a->rope_dim = rotary_dim;
        a->partial_rotary = (double)rotary_dim / (double)a->head_dim;
    }
    return st;
}

/* MPT's attention settings live in the nested attn_config; a key it omits takes MptAttentionConfig's
 * default (ALiBi on with alibi_bias_max 8, no clip, no qk_ln, multi-head attention). llm-foundry's
 * qk_ln is one LayerNorm over the whole q projection (d_model) and one over the whole k
 * projection; logit_scale multiplies the logits ("inv_sqrt_d_model" = 1 / sqrt(d_model)). */
static lp_status quirks_mpt(const hf_reader *r, lp_arch *a)
{
    bool no_bias = true, alibi = true, qk_ln = false, learned_pos = true;
    lp_status st = hf_bool(r, "no_bias", &no_bias, NULL);
    if (st != LP_OK || (st = hf_bool(r, "learned_pos_emb", &learned_pos, NULL)) != LP_OK)
        return st;
    a->bias_qkv = a->bias_o = a->bias_mlp = a->bias_norm = !no_bias;
    const char *norm_type = NULL;
    if ((st = hf_str(r, "norm_type", &norm_type)) != LP_OK)
        return st;
    if (norm_type && strcmp(norm_type, "low_precision_layernorm") != 0 &&
        strcmp(norm_type, "layernorm") != 0)
        return lp_error_set(r->err, LP_ERR_UNSUPPORTED,
                            "%s: key 'norm_type': \"%.40s\" is not supported (low_precision_layernorm "
                            "and layernorm are)", r->path, norm_type);
    const json_t *logit = hf_get(r, "logit_scale");
    if (logit && json_is_string(logit) && strcmp(json_string_value(logit), "inv_sqrt_d_model") == 0)
        a->logit_scale = 1.0 / sqrt((double)a->hidden_size);
    else if (logit && json_is_number(logit) && json_number_value(logit) > 0.0)
        a->logit_scale = json_number_value(logit);
    else if (logit)
        return hf_type_error(r, "logit_scale", "a positive number or \"inv_sqrt_d_model\"", logit);
    const json_t *cfg = hf_get(r, "attn_config");
    if (cfg && !json_is_object(cfg))
        return hf_type_error(r, "attn_config", "an object", cfg);
    hf_reader sub = {r->path, cfg, cfg, r->err, NULL}; /* nested keys are not listed */
    double softmax_scale = 0.0;
    const char *attn_type = NULL;
    if (cfg && ((st = hf_bool(&sub, "alibi", &alibi, NULL)) != LP_OK ||
                (st = hf_num(&sub, "alibi_bias_max", &a->alibi_max_bias, NULL)) != LP_OK ||
                (st = hf_num(&sub, "clip_qkv", &a->qkv_clip, NULL)) != LP_OK ||
                (st = hf_bool(&sub, "qk_ln", &qk_ln, NULL)) != LP_OK ||
                (st = hf_num(&sub, "softmax_scale", &softmax_scale, NULL)) != LP_OK ||
                (st = hf_str(&sub, "attn_type", &attn_type)) != LP_OK))
        return st;
    /* llm-foundry: multi-query attention has one kv head, grouped-query kv_n_heads of them;
     * Wqkv stays q | k | v */
    if (attn_type && strcmp(attn_type, "multiquery_attention") == 0)
        a->n_kv_heads = 1;
    else if (attn_type && strcmp(attn_type, "grouped_query_attention") == 0) {
        if ((st = hf_require_count(&sub, KEYS("kv_n_heads"), &a->n_kv_heads)) != LP_OK)
            return st;
    } else if (attn_type && strcmp(attn_type, "multihead_attention") != 0)
        return lp_error_set(r->err, LP_ERR_UNSUPPORTED,
                            "%s: key 'attn_config.attn_type': \"%.40s\" is not one of "
                            "multihead_attention, multiquery_attention, grouped_query_attention",
                            r->path, attn_type);
    if (!(a->alibi_max_bias > 0.0) || a->qkv_clip < 0.0 || softmax_scale < 0.0)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: attn_config: alibi_bias_max %g must be positive, clip_qkv %g and "
                            "softmax_scale %g not negative", r->path, a->alibi_max_bias,
                            a->qkv_clip, softmax_scale);
    a->query_scale = softmax_scale;
    a->qk_norm_full = qk_ln;
    if (!alibi && !learned_pos)
        return lp_error_set(r->err, LP_ERR_UNSUPPORTED,
                            "%s: MPT without alibi and without learned_pos_emb (no positions) is "
                            "not supported", r->path);
    if (!alibi) { /* transformer.wpe, max_seq_len rows */
        a->pos_kind = LP_POS_LEARNED;
        a->pos_table_rows = a->n_ctx;
    }
    return LP_OK;
}

static lp_status apply_family_quirks(const hf_reader *r, lp_arch *a)
{
    static const struct {
        const char *family;
        lp_status (*apply)(const hf_reader *r, lp_arch *a);
    } quirks[] = {
        {"chatglm", quirks_chatglm},   {"qwen", quirks_qwen},
        {"internlm", quirks_internlm}, {"internlm2", quirks_internlm},
        {"baichuan", quirks_baichuan}, {"cohere", quirks_cohere},
        {"gpt_bigcode", quirks_gpt_bigcode}, {"bert", quirks_bert},
        {"roberta", quirks_bert},      {"xlm-roberta", quirks_bert},
        {"phi", quirks_phi},           {"mpt", quirks_mpt},
    };
    for (size_t i = 0; i < sizeof quirks / sizeof quirks[0]; i++)
        if (is_family(a, quirks[i].family))
            return quirks[i].apply(r, a);
    return LP_OK;
}


/* ---- the groups of keys ---------------------------------------------------------------------- */

/* model_type (or the class name in 'architectures'), checked and stored as the family; the
 * family's rules set the defaults every later group starts from. */
static lp_status read_family(const hf_reader *r, lp_arch *a, const family_rules **rules,
                             bool *refined_web)
{
    const char *model_type = NULL;
    lp_status st = hf_str(r, "model_type", &model_type);
    if (st != LP_OK)
        return st;
    if (!model_type)
        model_type = model_type_from_architectures(r);
    if (!model_type)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: missing required key 'model_type' (and no known 'architectures')",
                            r->path);
    /* Falcon's first releases called themselves RefinedWeb (40B) and RefinedWebModel (7B). */
    *refined_web = strcmp(model_type, "RefinedWeb") == 0;
    if (*refined_web || strcmp(model_type, "RefinedWebModel") == 0)
        model_type = "falcon";
    /* Phi-1.5 and Phi-2 as first released (remote code, before transformers' PhiModel): the
     * same tensors under other names and keys (n_embd, rotary_dim, n_inner null). */
    if (strcmp(model_type, "phi-msft") == 0 || strcmp(model_type, "mixformer-sequential") == 0)
        model_type = "phi";
    size_t bad = strspn(model_type, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                    "0123456789_-.");
    if (model_type[bad])
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key 'model_type': byte 0x%02x in \"%.40s\" is not a letter, "
                            "digit, '_', '-' or '.'",
                            r->path, (unsigned char)model_type[bad], model_type);
    if (!*model_type)
        return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key 'model_type' is empty", r->path);
    if (strlen(model_type) >= sizeof a->family)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key 'model_type': \"%.40s...\" longer than %zu bytes", r->path,
                            model_type, sizeof a->family - 1);
    snprintf(a->family, sizeof a->family, "%s", model_type);
    *rules = &LLAMA_LIKE;
    for (size_t i = 0; i < N_ROWS(FAMILIES); i++)
        if (strcmp(model_type, FAMILIES[i].model_type) == 0)
            *rules = &FAMILIES[i];
    if (*rules == &LLAMA_LIKE)
        snprintf(a->assumed_family, sizeof a->assumed_family, "llama");
    if (is_family(a, "chatglm") && !hf_get(r, "ffn_hidden_size") && hf_get(r, "inner_hidden_size"))
        return lp_error_set(r->err, LP_ERR_UNSUPPORTED,
                            "%s: key 'inner_hidden_size': the first ChatGLM-6B layout (GLM "
                            "blocks, 2-D positions) is not supported; ChatGLM2/3 and GLM-4 are",
                            r->path);
    a->ffn_kind = (*rules)->ffn_kind;
    a->norm_kind = (*rules)->norm_kind;
    a->pos_kind = (*rules)->pos_kind;
    a->bias_norm = (*rules)->norm_kind == LP_NORM_LAYER;
    a->bias_qkv = a->bias_o = a->bias_mlp = (*rules)->bias_all;
    a->parallel_block = (*rules)->parallel;
    a->rope_layout = LP_ROPE_HALVES; /* HF checkpoints are stored for rotate_half */
    a->act = (*rules)->ffn_kind == LP_FFN_SWIGLU ? LP_ACT_SILU : LP_ACT_GELU_TANH;
    return LP_OK;
}

static const hf_key DIMS[] = {
    HF_KEY(HF_REQUIRED, vocab_size, NULL, "vocab_size", "padded_vocab_size"),
    HF_KEY(HF_REQUIRED, hidden_size, NULL, "hidden_size", "n_embd", "n_embed", "d_model"),
    HF_KEY(HF_REQUIRED, n_layers, NULL, "num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    HF_KEY(HF_REQUIRED, n_heads, NULL, "num_attention_heads", "n_head", "num_heads", "n_heads"),
};
#define LAYERS_KEYS (DIMS[2].keys)
#define HEADS_KEYS (DIMS[3].keys)

/* MptConfig's defaults for what an MPT config omits. */
static const hf_key MPT_DIMS[] = {
    HF_KEY(HF_COUNT, vocab_size, NULL, "vocab_size"),
    HF_KEY(HF_COUNT, hidden_size, NULL, "d_model"),
    HF_KEY(HF_COUNT, n_layers, NULL, "n_layers"),
    HF_KEY(HF_COUNT, n_heads, NULL, "n_heads"),
    HF_KEY(HF_COUNT, n_ctx, NULL, "max_seq_len"),
};

static lp_status read_mpt_dims(const hf_reader *r, lp_arch *a)
{
    a->vocab_size = 50368, a->hidden_size = 2048, a->n_layers = 24, a->n_heads = 16;
    a->n_ctx = 2048;
    lp_status st = read_keys(r, a, MPT_DIMS, N_ROWS(MPT_DIMS));
    for (size_t i = 0; st == LP_OK && i < N_ROWS(MPT_DIMS); i++)
        if (*(int64_t *)((char *)a + MPT_DIMS[i].field) < 1)
            return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key '%s': must be at least 1",
                                r->path, MPT_DIMS[i].keys[0]);
    return st;
}

static lp_status read_dims(const hf_reader *r, lp_arch *a)
{
    lp_status st = is_family(a, "mpt") ? read_mpt_dims(r, a) : read_keys(r, a, DIMS, N_ROWS(DIMS));
    if (st == LP_OK && a->n_layers > LP_MAX_LAYERS)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key '%s': %lld exceeds the limit of %d layers", r->path,
                            present_key(r, LAYERS_KEYS), (long long)a->n_layers, LP_MAX_LAYERS);
    return st;
}

/* Falcon: grouped kv heads only with the new decoder architecture; else multi_query. */
static lp_status read_falcon_attention(const hf_reader *r, lp_arch *a, bool refined_web,
                                       const char **kv_key)
{
    bool new_arch = refined_web, multi_query = !refined_web, parallel = true, bias = false;
    bool alibi = false;
    int64_t n_ln = 2;
    lp_status st;
    if ((st = hf_bool(r, "new_decoder_architecture", &new_arch, NULL)) != LP_OK ||
        (st = hf_bool(r, "multi_query", &multi_query, NULL)) != LP_OK ||
        (st = hf_bool(r, "parallel_attn", &parallel, NULL)) != LP_OK ||
        (st = hf_bool(r, "bias", &bias, NULL)) != LP_OK)
        return st;
    if (new_arch) {
        if ((st = hf_opt_count(r, KEYS("num_kv_heads", "n_head_kv"), &a->n_kv_heads, kv_key)) !=
                LP_OK ||
            (st = hf_opt_count(r, KEYS("num_ln_in_parallel_attn"), &n_ln, NULL)) != LP_OK)
            return st;
        a->parallel_two_norms = n_ln == 2;
        parallel = true; /* the new architecture is always parallel */
    } else if (multi_query) {
        a->n_kv_heads = 1;
    }
    a->parallel_block = parallel;
    a->bias_qkv = a->bias_o = a->bias_mlp = bias;
    if ((st = hf_bool(r, "alibi", &alibi, NULL)) != LP_OK)
        return st;
    if (alibi)
        a->pos_kind = LP_POS_ALIBI;
    a->act = LP_ACT_GELU;
    a->n_ctx = 2048; /* FalconConfig default */
    return LP_OK;
}

static lp_status read_kv_heads(const hf_reader *r, lp_arch *a, bool refined_web)
{
    const char *kv_key = NULL;
    bool multi_query = false;
    lp_status st;
    if (is_family(a, "falcon")) {
        st = read_falcon_attention(r, a, refined_web, &kv_key);
    } else {
        st = hf_opt_count(r, KEYS("num_key_value_heads", "n_head_kv", "num_kv_heads"),
                          &a->n_kv_heads, &kv_key);
        if (st == LP_OK && !kv_key)
            st = hf_bool(r, "multi_query", &multi_query, NULL);
        if (multi_query)
            a->n_kv_heads = 1;
    }
    if (st != LP_OK)
        return st;
    if (kv_key && a->n_kv_heads == 0)
        a->n_kv_heads = a->n_heads;
    if (a->n_kv_heads > 0 && a->n_heads % a->n_kv_heads != 0)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key '%s': %lld kv heads do not divide %lld attention heads",
                            r->path, kv_key ? kv_key : "num_key_value_heads",
                            (long long)a->n_kv_heads, (long long)a->n_heads);
    return LP_OK;
}

/* head_dim as given, from MLA's parts, or hidden / heads. */
static lp_status read_head_dim(const hf_reader *r, lp_arch *a)
{
    const char *used;
    lp_status st = hf_opt_count(r, KEYS("head_dim"), &a->head_dim, &used);
    if (st != LP_OK)
        return st;
    a->head_dim_explicit = used && a->head_dim > 0;
    if ((st = parse_mla(r, a)) != LP_OK)
        return st;
    if (a->head_dim == 0 && a->hidden_size % a->n_heads != 0)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key '%s': %lld heads do not divide hidden size %lld and "
                            "'head_dim' is absent",
                            r->path, present_key(r, HEADS_KEYS), (long long)a->n_heads,
                            (long long)a->hidden_size);
    if (a->head_dim == 0)
        a->head_dim = a->hidden_size / a->n_heads;
    return LP_OK;
}

static const hf_key CONTEXT[] = {
    HF_KEY(HF_COUNT, n_ctx, NULL, "max_position_embeddings", "n_positions", "max_seq_len",
           "seq_length", "max_sequence_length", "n_ctx"),
};

static const hf_key ROPE[] = {
    HF_KEY(HF_NUMBER, rope_theta, NULL, "rope_theta", "rotary_emb_base"),
    HF_KEY(HF_NUMBER, partial_rotary, NULL, "partial_rotary_factor", "rotary_pct"),
};

/* Tables of learned positions: GPT-2's n_positions; OPT's are offset by 2 (a fairseq
 * leftover), so its table is 2 longer than the context. */
static lp_status read_learned_positions(const hf_reader *r, lp_arch *a)
{
    if (is_family(a, "gpt2")) {
        const char *used;
        lp_status st = hf_opt_count(r, KEYS("n_positions"), &a->pos_table_rows, &used);
        if (st != LP_OK)
            return st;
        if (!used)
            a->pos_table_rows = a->n_ctx;
        if (a->pos_table_rows == 0)
            return lp_error_set(r->err, LP_ERR_FORMAT, "%s: missing required key 'n_positions'",
                                r->path);
    } else if (is_family(a, "opt")) {
        if (a->n_ctx == 0)
            return lp_error_set(r->err, LP_ERR_FORMAT,
                                "%s: missing required key 'max_position_embeddings'", r->path);
        a->pos_offset = 2;
        a->pos_table_rows = a->n_ctx + 2;
    }
    return LP_OK;
}

/* Context, learned positions, RoPE (GPT-J's rotary_dim and rotate_every_two, scaling, Gemma 3's
 * local theta). */
static lp_status read_positions(const hf_reader *r, lp_arch *a)
{
    lp_status st;
    if ((st = read_keys(r, a, CONTEXT, N_ROWS(CONTEXT))) != LP_OK ||
        (st = read_learned_positions(r, a)) != LP_OK ||
        (st = read_keys(r, a, ROPE, N_ROWS(ROPE))) != LP_OK)
        return st;
    if (is_family(a, "gptj")) {
        int64_t rotary_dim = 0;
        if ((st = hf_opt_count(r, KEYS("rotary_dim"), &rotary_dim, NULL)) != LP_OK)
            return st;
        if (rotary_dim > 0 && rotary_dim <= a->head_dim) {
            a->rope_dim = rotary_dim;
            a->partial_rotary = (double)rotary_dim / (double)a->head_dim;
        }
        a->rope_layout = LP_ROPE_ADJACENT; /* GPT-J's rotate_every_two */
    }
    if (!(a->partial_rotary > 0.0 && a->partial_rotary <= 1.0))
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key 'partial_rotary_factor': %g must be in (0, 1]", r->path,
                            a->partial_rotary);
    if ((st = parse_rope_scaling(r, a)) != LP_OK)
        return st;
    if (family_prefix(a, "gemma3")) {
        a->rope_local_theta = 10000.0;
        st = hf_num(r, "rope_local_base_freq", &a->rope_local_theta, NULL);
    }
    return st;
}

/* The activation: Gemma ships hidden_act "gelu" but runs the tanh approximation unless
 * hidden_activation says otherwise; BLOOM's bloom_gelu_forward is the tanh approximation. */
static lp_status read_activation(const hf_reader *r, lp_arch *a)
{
    static const char *const act_keys[] = {"hidden_act", "activation_function", "activation"};
    const char *act_key = "hidden_act", *act = NULL;
    lp_status st = LP_OK;
    if (family_prefix(a, "gemma")) {
        hf_mark(r, "hidden_act"); /* overridden, as transformers' Gemma does */
        act_key = "hidden_activation";
        st = hf_str(r, act_key, &act);
        if (!act)
            act = "gelu_pytorch_tanh";
    } else if (is_family(a, "bloom")) {
        act = "gelu_new";
    } else {
        for (size_t i = 0; i < N_ROWS(act_keys) && !act && st == LP_OK; i++)
            st = hf_str(r, act_key = act_keys[i], &act);
    }
    if (st != LP_OK || !act)
        return st;
    return parse_activation(r, act_key, act, &a->act);
}

static lp_status read_ffn(const hf_reader *r, lp_arch *a, const family_rules *rules)
{
    lp_status st;
    if (is_family(a, "opt")) {
        st = hf_require_count(r, KEYS("ffn_dim"), &a->ffn_hidden);
    } else if (is_family(a, "mpt")) {
        /* llm-foundry's MPTMLP: expansion_ratio x d_model, exact GELU (nn.GELU()) */
        double ratio = 4.0;
        if ((st = hf_num(r, "expansion_ratio", &ratio, NULL)) != LP_OK)
            return st;
        double width = ratio * (double)a->hidden_size;
        if (!(width >= 1.0 && width <= (double)LP_ARCH_MAX_COUNT) || width != floor(width))
            return lp_error_set(r->err, LP_ERR_FORMAT,
                                "%s: key 'expansion_ratio': %g x d_model %lld is not a whole width",
                                r->path, ratio, (long long)a->hidden_size);
        a->ffn_hidden = (int64_t)width;
        a->act = LP_ACT_GELU;
        return LP_OK;
    } else {
        const char *used;
        st = hf_opt_count(r, KEYS("intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim"),
                          &a->ffn_hidden, &used);
        if (st == LP_OK && !used && rules->ffn_kind != LP_FFN_MLP)
            return lp_error_set(r->err, LP_ERR_FORMAT,
                                "%s: missing required key 'intermediate_size'", r->path);
        if (!used)
            a->ffn_hidden = 4 * a->hidden_size; /* GPT-2 n_inner null, BLOOM, Falcon */
    }
    return st == LP_OK ? read_activation(r, a) : st;
}

static const hf_key NORM_EPS[] = {
    HF_KEY(HF_NUMBER, norm_eps, NULL, "rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps",
           "norm_epsilon"),
};

static const lp_arch_fixed NORM_FIXED[] = {
    LP_ARCH_FIXED("gemma*", norm_weight_plus_one, true), /* y = x_hat * (1 + w) */
    LP_ARCH_FIXED("gemma2 gemma3*", post_attn_norm, true),
    LP_ARCH_FIXED("gemma2 gemma3*", post_ffn_norm, true),
    LP_ARCH_FIXED("gemma3* qwen3*", qk_norm, true),
    LP_ARCH_FIXED("olmo2", qk_norm_full, true),
    LP_ARCH_FIXED("olmo2", no_input_norm, true),
    LP_ARCH_FIXED("olmo2", post_attn_norm, true),
    LP_ARCH_FIXED("olmo2", post_ffn_norm, true),
    LP_ARCH_FIXED("bloom", embed_norm, true),
};

static const hf_key NORM_FLAGS[] = {
    HF_KEY(HF_FLAG, qk_norm, "phi stablelm", "qk_layernorm"),
};

/* transformers' OPTDecoder: final_layer_norm exists only for pre-norm models that keep it;
 * project_in/project_out only when the embedding width differs from hidden. */
static lp_status read_opt_norms(const hf_reader *r, lp_arch *a)
{
    bool pre_norm = true, remove_final = false;
    int64_t proj_dim = a->hidden_size;
    lp_status st;
    if ((st = hf_bool(r, "do_layer_norm_before", &pre_norm, NULL)) != LP_OK ||
        (st = hf_opt_count(r, KEYS("word_embed_proj_dim"), &proj_dim, NULL)) != LP_OK ||
        (st = hf_bool(r, "_remove_final_layer_norm", &remove_final, NULL)) != LP_OK)
        return st;
    a->post_norm = !pre_norm;
    a->final_norm = pre_norm && !remove_final;
    if (proj_dim != a->hidden_size)
        a->embed_proj_dim = proj_dim;
    return LP_OK;
}

static lp_status read_norms(const hf_reader *r, lp_arch *a)
{
    lp_status st = read_keys(r, a, NORM_EPS, N_ROWS(NORM_EPS));
    if (st != LP_OK)
        return st;
    if (!(a->norm_eps > 0.0))
        return lp_error_set(r->err, LP_ERR_FORMAT, "%s: norm epsilon %g must be positive",
                            r->path, a->norm_eps);
    lp_arch_apply_fixed(a, a->family, NORM_FIXED, N_ROWS(NORM_FIXED));
    if (family_prefix(a, "gemma"))
        a->embed_scale = sqrt((double)a->hidden_size);
    if ((st = read_keys(r, a, NORM_FLAGS, N_ROWS(NORM_FLAGS))) != LP_OK)
        return st;
    if (is_family(a, "stablelm")) /* StableLmLayerNormPerHead: one bias-free norm per head */
        a->qk_norm_per_head = a->qk_norm;
    return is_family(a, "opt") ? read_opt_norms(r, a) : LP_OK;
}

/* Bias switches: a key that, when present, sets the biases it names. */
typedef struct hf_bias_key {
    const char *key;
    const char *families; /* NULL: every family */
    const char *ignored;  /* families that have the key but whose biases it does not change */
    bool qkv, o, mlp;
} hf_bias_key;

static const lp_arch_fixed BIAS_BEFORE[] = {
    /* Qwen2 always has q/k/v biases and no flag for them */
    LP_ARCH_FIXED("qwen2*", bias_qkv, true),
    LP_ARCH_FIXED("qwen2*", bias_o, false),
};

static const hf_bias_key BIAS_KEYS[] = {
    {"attention_bias", NULL, "qwen2*", true, true, false},
    {"mlp_bias", NULL, NULL, false, false, true},
    {"use_qkv_bias", NULL, NULL, true, false, false},
    {"use_bias", "gpt_neox starcoder2", NULL, true, true, true},
    {"enable_bias", "opt", NULL, true, true, true},
};

static const lp_arch_fixed BIAS_AFTER[] = {
    LP_ARCH_FIXED("phi gptj", bias_lm_head, true),
    LP_ARCH_FIXED("gptj", bias_qkv, false), /* GPT-J: biases only in the MLP (fc_in, fc_out) */
    LP_ARCH_FIXED("gptj", bias_o, false),
    LP_ARCH_FIXED("gptj", bias_mlp, true),
    /* gpt-oss: experts (gate_up_proj, down_proj) and the router carry biases; each attention
     * layer has one learned sink logit per head */
    LP_ARCH_FIXED("gpt_oss", bias_mlp, true),
    LP_ARCH_FIXED("gpt_oss", router_bias, true),
    LP_ARCH_FIXED("gpt_oss", attn_sinks, true),
};

static lp_status read_biases(const hf_reader *r, lp_arch *a)
{
    lp_arch_apply_fixed(a, a->family, BIAS_BEFORE, N_ROWS(BIAS_BEFORE));
    for (size_t i = 0; i < N_ROWS(BIAS_KEYS); i++) {
        const hf_bias_key *k = &BIAS_KEYS[i];
        bool flag, found;
        if (k->families && !family_in(a, k->families))
            continue;
        lp_status st = hf_bool(r, k->key, &flag, &found);
        if (st != LP_OK)
            return st;
        if (!found || (k->ignored && family_in(a, k->ignored)))
            continue;
        if (k->qkv)
            a->bias_qkv = flag;
        if (k->o)
            a->bias_o = flag;
        if (k->mlp)
            a->bias_mlp = flag;
    }
    lp_arch_apply_fixed(a, a->family, BIAS_AFTER, N_ROWS(BIAS_AFTER));
    return LP_OK;
}

static const hf_key PARALLEL[] = {
    HF_KEY(HF_FLAG, parallel_block, "stablelm gpt_neox", "use_parallel_residual"),
};

static const hf_key SOFTCAPS[] = {
    HF_KEY(HF_NUMBER, attn_logit_softcap, NULL, "attn_logit_softcapping"),
    HF_KEY(HF_NUMBER, final_logit_softcap, NULL, "final_logit_softcapping"),
};

/* Parallel blocks and Gemma 2/3's attention details (query scale, soft caps). */
static lp_status read_attention_details(const hf_reader *r, lp_arch *a)
{
    lp_status st = read_keys(r, a, PARALLEL, N_ROWS(PARALLEL));
    if (st != LP_OK)
        return st;
    /* GPT-NeoX keeps both input_layernorm and post_attention_layernorm in parallel mode (the
     * MLP reads the second); StableLM drops the second one. */
    if (is_family(a, "gpt_neox"))
        a->parallel_two_norms = a->parallel_block;
    double scalar = 0.0;
    bool found;
    if ((st = hf_num(r, "query_pre_attn_scalar", &scalar, &found)) != LP_OK)
        return st;
    if (found && !(scalar > 0.0))
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key 'query_pre_attn_scalar': %g must be positive", r->path,
                            scalar);
    if (found)
        a->query_scale = 1.0 / sqrt(scalar);
    return read_keys(r, a, SOFTCAPS, N_ROWS(SOFTCAPS));
}

static const hf_key EMBEDDINGS[] = {
    HF_KEY(HF_COUNT, n_mtp_layers, NULL, "num_nextn_predict_layers"),
    HF_KEY(HF_FLAG, tied_embeddings, NULL, "tie_word_embeddings"),
};

/* Tied embeddings (the family's default unless the key says), the storage dtype, the special
 * token ids (the first of several end tokens; an id loupe cannot use is unknown). */
static lp_status read_embeddings(const hf_reader *r, lp_arch *a, const family_rules *rules)
{
    a->tied_embeddings = rules->tied_default;
    lp_status st = read_keys(r, a, EMBEDDINGS, N_ROWS(EMBEDDINGS));
    const char *dtype = NULL;
    if (st == LP_OK)
        st = hf_str(r, "torch_dtype", &dtype);
    if (st == LP_OK && !dtype)
        st = hf_str(r, "dtype", &dtype);
    if (st != LP_OK)
        return st;
    if (dtype)
        a->storage_dtype = dtype_from_torch(dtype);
    static const char *const token_keys[2] = {"bos_token_id", "eos_token_id"};
    int64_t *token_ids[2] = {&a->bos_token_id, &a->eos_token_id};
    for (int i = 0; i < 2; i++) {
        const json_t *v = hf_get(r, token_keys[i]);
        if (v && json_is_array(v))
            v = json_array_size(v) ? json_array_get(v, 0) : NULL;
        if (v && !json_as_int(v, token_ids[i]))
            return hf_type_error(r, token_keys[i], "an integer", v);
        if (*token_ids[i] > LP_ARCH_MAX_COUNT || *token_ids[i] < -1)
            *token_ids[i] = -1;
    }
    return LP_OK;
}

static lp_status parse_config(const hf_reader *r, lp_arch *a)
{
    const family_rules *rules = &LLAMA_LIKE;
    bool refined_web = false;
    lp_status st;
    if ((st = read_family(r, a, &rules, &refined_web)) != LP_OK ||
        (st = read_dims(r, a)) != LP_OK || (st = read_kv_heads(r, a, refined_web)) != LP_OK ||
        (st = read_head_dim(r, a)) != LP_OK || (st = read_positions(r, a)) != LP_OK ||
        (st = read_ffn(r, a, rules)) != LP_OK || (st = read_norms(r, a)) != LP_OK ||
        (st = read_biases(r, a)) != LP_OK || (st = read_attention_details(r, a)) != LP_OK ||
        (st = apply_family_quirks(r, a)) != LP_OK || (st = parse_windows(r, a)) != LP_OK ||
        (st = parse_moe(r, a)) != LP_OK)
        return st;
    return read_embeddings(r, a, rules);
}

/* The config in text as a description; with seen, every key the rules look up is recorded. */
static lp_status hf_parse(const char *text, size_t size, const char *name, lp_arch *out,
                          json_t **root_out, json_t *seen, lp_error *err)
{
    lp_arch_init(out);
    snprintf(out->source, sizeof out->source, "%s", name);
    json_error_t jerr;
    json_t *root = json_loadb(text, size, 0, &jerr);
    if (!root)
        return lp_error_set(err, LP_ERR_FORMAT, "%s:%d:%d: %s", name, jerr.line, jerr.column,
                            jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return lp_error_set(err, LP_ERR_FORMAT, "%s: the top level is not a JSON object", name);
    }
    hf_reader r = {name, root, root, err, seen};
    /* Multimodal wrappers (Gemma 3, Llava, ...) keep the language model in text_config. */
    const json_t *text_config = json_object_get(root, "text_config");
    if (text_config && json_is_object(text_config))
        r.obj = text_config;
    if (seen)
        json_object_set_new(seen, "text_config", json_true());
    set_name(out, name);
    lp_status st = parse_config(&r, out);
    if (st == LP_OK)
        st = lp_arch_finish(out, err);
    if (st == LP_OK && root_out)
        *root_out = root;
    else
        json_decref(root);
    return st;
}

lp_status lp_arch_from_hf_json(const char *text, size_t size, const char *name, lp_arch *out,
                               lp_error *err)
{
    return hf_parse(text, size, name, out, NULL, NULL, err);
}

/* Keys transformers' PretrainedConfig and the training code keep that cannot change what the
 * network computes at inference (bookkeeping, generation defaults, training-only settings):
 * known, so --strict does not list them. Dropout rates are recognised by their name. */
static bool no_effect_key(const char *key)
{
    static const char *const keys[] = {
        "_name_or_path", "transformers_version", "architectures", "auto_map", "model_type",
        "use_cache", "initializer_range", "init_std", "initializer_factor", "pretraining_tp",
        "output_attentions", "output_hidden_states", "return_dict", "torchscript",
        "use_bfloat16", "pad_token_id", "sep_token_id", "decoder_start_token_id",
        "tokenizer_class", "prefix", "task_specific_params", "problem_type", "id2label",
        "label2id", "finetuning_task", "is_encoder_decoder", "is_decoder",
        "add_cross_attention", "tie_encoder_decoder", "chunk_size_feed_forward",
        "gradient_checkpointing", "max_length", "min_length", "do_sample", "early_stopping",
        "num_beams", "num_beam_groups", "temperature", "top_k", "top_p", "typical_p",
        "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "bad_words_ids",
        "num_return_sequences", "diversity_penalty", "remove_invalid_values",
        "forced_bos_token_id", "forced_eos_token_id", "output_scores",
        "return_dict_in_generate", "encoder_no_repeat_ngram_size", "exponential_decay_length_penalty",
        "suppress_tokens", "begin_suppress_tokens", "cross_attention_hidden_size",
        "tf_legacy_loss", "pruned_heads", "bos_token_id", "eos_token_id", "layerdrop",
        "output_router_logits", "router_aux_loss_coef", "aux_loss_alpha", "seq_aux",
        "unk_token_id",
    };
    size_t len = strlen(key);
    if ((len >= 7 && strcmp(key + len - 7, "dropout") == 0) ||
        (len >= 5 && strcmp(key + len - 5, "pdrop") == 0) || strstr(key, "dropout_") ||
        strncmp(key, "summary_", 8) == 0) /* GPT-2's sequence-classification head */
        return true;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(key, keys[i]) == 0)
            return true;
    return false;
}

/* Keys of obj not in seen and not known to have no effect, appended to list as prefix + key. */
static void list_unread(const json_t *obj, const json_t *seen, const char *prefix, json_t *list)
{
    const char *key;
    json_t *v;
    json_object_foreach ((json_t *)obj, key, v) {
        if (json_object_get(seen, key) || no_effect_key(key))
            continue;
        char full[512];
        snprintf(full, sizeof full, "%s%s", prefix, key);
        json_array_append_new(list, json_string(full));
    }
}

lp_status lp_hf_config_unread_keys(const char *path, json_t **keys, lp_error *err)
{
    *keys = NULL;
    char *text;
    size_t size;
    lp_status st = lp_read_file(path, HF_CONFIG_MAX_BYTES, &text, &size, err);
    if (st != LP_OK)
        return st;
    json_t *seen = json_object(), *list = json_array(), *root = NULL;
    lp_arch arch;
    if (!seen || !list)
        st = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    else
        st = hf_parse(text, size, path, &arch, &root, seen, err);
    free(text);
    if (st == LP_OK) {
        list_unread(root, seen, "", list);
        const json_t *tc = json_object_get(root, "text_config");
        if (json_is_object(tc))
            list_unread(tc, seen, "text_config.", list);
        *keys = list;
        list = NULL;
    }
    json_decref(root);
    json_decref(seen);
    json_decref(list);
    return st;
}

lp_status lp_arch_from_hf_config(const char *config_json_path, lp_arch *out, lp_error *err)
{
    return lp_arch_read_file(config_json_path, HF_CONFIG_MAX_BYTES, lp_arch_from_hf_json, out, err);
}

