/* GGUF metadata -> lp_arch: llama.cpp's `<arch>.*` keys, per-layer arrays, and the facts each
 * architecture hard-codes (norm kind, FFN kind, biases, RoPE pair layout).
 *
 * Keys read (prefix = general.architecture): block_count, embedding_length, context_length,
 * feed_forward_length (scalar or per layer), attention.head_count / head_count_kv (scalar or per
 * layer), attention.key_length / value_length (and the *_mla variants), attention.layer_norm_
 * (rms_)epsilon, attention.sliding_window (+ sliding_window_pattern), attention.q_lora_rank /
 * kv_lora_rank, rope.freq_base, rope.dimension_count, rope.scaling.{type, factor,
 * original_context_length, attn_factor, yarn_log_multiplier, yarn_beta_fast, yarn_beta_slow},
 * expert_count, expert_used_count, expert_feed_forward_length, expert_shared_count,
 * expert_shared_feed_forward_length, leading_dense_block_count, expert_weights_norm,
 * expert_gating_func, attn_logit_softcapping, final_logit_softcapping, use_parallel_residual,
 * vocab_size (else the length of tokenizer.ggml.tokens), tokenizer.ggml.bos/eos_token_id.
 * Biases, tied embeddings and a few variants are read off the tensor names, which are the truth
 * for the file at hand.
 */
#include "inspect/arch/arch_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/mapfile.h"
#include "inspect/formats/gguf.h"

/* What llama.cpp's graph for each architecture hard-codes. rope_layout follows
 * llama_model_rope_type(): NORM = adjacent pairs, NEOX = halves. */
typedef struct gguf_family {
    const char *gguf_name;
    const char *family; /* the Hugging Face model_type the rest of loupe knows */
    lp_ffn_kind ffn_kind;
    lp_activation act;
    lp_norm_kind norm_kind;
    lp_pos_kind pos_kind;
    lp_rope_layout rope_layout;
    bool tied_default;
    bool bias_all;
    bool parallel;
} gguf_family;

static const gguf_family FAMILIES[] = {
    {"llama", "llama", LP_FFN_SWIGLU, LP_ACT_SILU, LP_NORM_RMS, LP_POS_ROPE, LP_ROPE_ADJACENT, false, false, false},
    {"qwen2", "qwen2", LP_FFN_SWIGLU, LP_ACT_SILU, LP_NORM_RMS, LP_POS_ROPE, LP_ROPE_HALVES, false, false, false},
    {"qwen2moe", "qwen2_moe", LP_FFN_SWIGLU, LP_ACT_SILU, LP_NORM_RMS, LP_POS_ROPE, LP_ROPE_HALVES, false, false, false},
    {"qwen3", "qwen3", LP_FFN_SWIGLU, LP_ACT_SILU, LP_NORM_RMS, LP_POS_ROPE, LP_ROPE_HALVES, false, false, false},
    {"qwen3moe", "qwen3_moe", LP_FFN_SWIGLU, LP_ACT_SILU, LP_NORM_RMS, LP_POS_ROPE, LP_ROPE_HALVES, false, false, false},
    {"gemma", "gemma", LP_FFN_GEGLU, LP_ACT_GELU_TANH, LP_NORM_RMS, LP_POS_ROPE, LP_ROPE_HALVES, true, false, false},
    {"gemma2", "gemma2", LP_FFN_GEGLU, LP_ACT_GELU_TANH, LP_NORM_RMS, LP_POS_ROPE, LP_ROPE_HALVES, true, false, false},
    {"gemma3", "gemma3", LP_FFN_GEGLU, LP_ACT_GELU_TANH, LP_NORM_RMS, LP_POS_ROPE, LP_ROPE_HALVES, true, false, false},
    {"phi2", "phi", LP_FFN_MLP, LP_ACT_GELU_TANH, LP_NORM_LAYER, LP_POS_ROPE, LP_ROPE_HALVES, false, true, true},
    {"phi3", "phi3", LP_FFN_SWIGLU, LP_ACT_SILU, LP_NORM_RMS, LP_POS_ROPE, LP_ROPE_HALVES, false, false, false},
    {"gpt2", "gpt2", LP_FFN_MLP, LP_ACT_GELU_TANH, LP_NORM_LAYER, LP_POS_LEARNED, LP_ROPE_HALVES, true, true, false},
    {"falcon", "falcon", LP_FFN_MLP, LP_ACT_GELU, LP_NORM_LAYER, LP_POS_ROPE, LP_ROPE_HALVES, true, false, true},
    {"deepseek2", "deepseek_v2", LP_FFN_SWIGLU, LP_ACT_SILU, LP_NORM_RMS, LP_POS_ROPE, LP_ROPE_ADJACENT, false, false, false},
    {"starcoder2", "starcoder2", LP_FFN_MLP, LP_ACT_GELU_TANH, LP_NORM_LAYER, LP_POS_ROPE, LP_ROPE_HALVES, true, true, false},
    {"stablelm", "stablelm", LP_FFN_SWIGLU, LP_ACT_SILU, LP_NORM_LAYER, LP_POS_ROPE, LP_ROPE_HALVES, false, false, false},
    {"gptneox", "gpt_neox", LP_FFN_MLP, LP_ACT_GELU, LP_NORM_LAYER, LP_POS_ROPE, LP_ROPE_HALVES, false, true, true},
    /* GPT-J: llama.cpp's graph rotates adjacent pairs (rotate_every_two); biases where the
     * tensors have them */
    {"gptj", "gptj", LP_FFN_MLP, LP_ACT_GELU_TANH, LP_NORM_LAYER, LP_POS_ROPE, LP_ROPE_ADJACENT, false, false, true},
    {"bloom", "bloom", LP_FFN_MLP, LP_ACT_GELU_TANH, LP_NORM_LAYER, LP_POS_ALIBI, LP_ROPE_HALVES, true, true, false},
    /* MPT: llama.cpp's graph runs ggml_gelu (the tanh form); the model was trained with the
     * exact one (nn.GELU()), which is what loupe computes for either format */
    {"mpt", "mpt", LP_FFN_MLP, LP_ACT_GELU, LP_NORM_LAYER, LP_POS_ALIBI, LP_ROPE_HALVES, true, false, false},
    {"olmo2", "olmo2", LP_FFN_SWIGLU, LP_ACT_SILU, LP_NORM_RMS, LP_POS_ROPE, LP_ROPE_HALVES, false, false, false},
    {"gpt-oss", "gpt_oss", LP_FFN_SWIGLU, LP_ACT_SILU, LP_NORM_RMS, LP_POS_ROPE, LP_ROPE_HALVES, false, false, false},
};
#define N_FAMILIES (sizeof FAMILIES / sizeof FAMILIES[0])

typedef struct reader {
    const lp_gguf *g;
    const char *file; /* basename, for messages */
    const char *prefix;
    lp_error *err;
} reader;

static const char *key_of(const reader *r, const char *suffix, char *buf, size_t size)
{
    snprintf(buf, size, "%s.%s", r->prefix, suffix);
    return buf;
}

static const char *type_name(lp_gguf_type type)
{
    static const char *const names[LP_GGUF_TYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64"};
    return (unsigned)type < LP_GGUF_TYPE_COUNT ? names[type] : "unknown";
}

static lp_status type_error(const reader *r, const char *key, const char *want)
{
    int64_t kv = lp_gguf_find_key(r->g, key);
    lp_gguf_type type = lp_gguf_kv_type(r->g, kv);
    double big;
    if (type == LP_GGUF_UINT64 && lp_gguf_get_float(r->g, key, &big))
        return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key '%s': %.0f is too large", r->file,
                            key, big);
    if (type == LP_GGUF_ARRAY)
        return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key '%s': expected %s, got an array of %s",
                            r->file, key, want, type_name(lp_gguf_arr_type(r->g, kv)));
    return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key '%s': expected %s, got %s", r->file, key,
                        want, type_name(type));
}

/* Optional integer `<arch>.suffix`: absent leaves *out; present must be an integer >= 0. */
static lp_status opt_count(const reader *r, const char *suffix, int64_t *out, bool *found)
{
    char key[256];
    key_of(r, suffix, key, sizeof key);
    if (found)
        *found = false;
    if (lp_gguf_find_key(r->g, key) < 0)
        return LP_OK;
    int64_t v;
    if (!lp_gguf_get_int(r->g, key, &v))
        return type_error(r, key, "an integer");
    if (v < 0)
        return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key '%s': %lld must not be negative",
                            r->file, key, (long long)v);
    *out = v;
    if (found)
        *found = true;
    return LP_OK;
}

static lp_status require_count(const reader *r, const char *suffix, int64_t *out)
{
    bool found;
    lp_status st = opt_count(r, suffix, out, &found);
    if (st != LP_OK)
        return st;
    char key[256];
    key_of(r, suffix, key, sizeof key);
    if (!found)
        return lp_error_set(r->err, LP_ERR_NOT_FOUND, "%s: missing required key '%s'", r->file,
                            key);
    if (*out <= 0)
        return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key '%s': %lld must be at least 1",
                            r->file, key, (long long)*out);
    return LP_OK;
}

static lp_status opt_float(const reader *r, const char *suffix, double *out, bool *found)
{
    char key[256];
    key_of(r, suffix, key, sizeof key);
    if (found)
        *found = false;
    if (lp_gguf_find_key(r->g, key) < 0)
        return LP_OK;
    double v;
    if (!lp_gguf_get_float(r->g, key, &v))
        return type_error(r, key, "a number");
    if (!isfinite(v))
        return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key '%s': %g is not a finite number",
                            r->file, key, v);
    *out = v;
    if (found)
        *found = true;
    return LP_OK;
}

static lp_status opt_bool(const reader *r, const char *suffix, bool *out)
{
    char key[256];
    key_of(r, suffix, key, sizeof key);
    if (lp_gguf_find_key(r->g, key) < 0)
        return LP_OK;
    if (!lp_gguf_get_bool(r->g, key, out))
        return type_error(r, key, "a bool");
    return LP_OK;
}

/* A key newer models store per layer: a scalar (copied to every layer) or an array of n_layers
 * integers. *max gets the largest value; *found whether the key was there. */
static lp_status per_layer(const reader *r, const char *suffix, int64_t n_layers,
                           int64_t values[LP_MAX_LAYERS], int64_t *max, bool *found)
{
    char key[256];
    key_of(r, suffix, key, sizeof key);
    *found = false;
    int64_t kv = lp_gguf_find_key(r->g, key);
    if (kv < 0)
        return LP_OK;
    *max = 0;
    if (lp_gguf_kv_type(r->g, kv) != LP_GGUF_ARRAY) {
        int64_t v;
        if (!lp_gguf_get_int(r->g, key, &v))
            return type_error(r, key, "an integer or an array of integers");
        if (v < 0)
            return lp_error_set(r->err, LP_ERR_FORMAT, "%s: key '%s': %lld must not be negative",
                                r->file, key, (long long)v);
        for (int64_t l = 0; l < n_layers; l++)
            values[l] = v;
        *max = v;
        *found = true;
        return LP_OK;
    }
    uint64_t len = lp_gguf_arr_len(r->g, kv);
    if (len != (uint64_t)n_layers)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key '%s': %llu entries, want one per layer (%lld)", r->file, key,
                            (unsigned long long)len, (long long)n_layers);
    for (int64_t l = 0; l < n_layers; l++) {
        int64_t v;
        if (!lp_gguf_arr_int(r->g, kv, (uint64_t)l, &v))
            return type_error(r, key, "an integer or an array of integers");
        if (v < 0)
            return lp_error_set(r->err, LP_ERR_FORMAT,
                                "%s: key '%s': entry %lld is %lld, must not be negative", r->file,
                                key, (long long)l, (long long)v);
        values[l] = v;
        if (v > *max)
            *max = v;
    }
    *found = true;
    return LP_OK;
}

static bool has_tensor(const lp_gguf *g, const char *name)
{
    return lp_gguf_find_tensor(g, name) >= 0;
}

/* A tensor of every layer's name pattern, e.g. "attn_q.bias" in any blk.N. */
static bool has_layer_tensor(const lp_gguf *g, const char *suffix)
{
    size_t suffix_len = strlen(suffix);
    for (int64_t i = 0; i < lp_gguf_n_tensors(g); i++) {
        const char *name = lp_gguf_tensor_name(g, i);
        if (strncmp(name, "blk.", 4) != 0)
            continue;
        const char *dot = strchr(name + 4, '.');
        if (dot && strlen(dot + 1) == suffix_len && strcmp(dot + 1, suffix) == 0)
            return true;
    }
    return false;
}

/* The dtype holding most elements: what the file mostly stores (general.file_type records only
 * what was asked for; llama-quantize falls back tensor by tensor). */
static lp_dtype dominant_dtype(const lp_gguf *g)
{
    double elements[LP_DTYPE_COUNT] = {0};
    for (int64_t i = 0; i < lp_gguf_n_tensors(g); i++) {
        double n = 1;
        for (int d = 0; d < lp_gguf_tensor_n_dims(g, i); d++)
            n *= (double)lp_gguf_tensor_ne(g, i, d);
        lp_dtype dt = lp_gguf_tensor_dtype(g, i);
        if ((unsigned)dt < LP_DTYPE_COUNT)
            elements[dt] += n;
    }
    lp_dtype best = LP_DTYPE_INVALID;
    for (int d = 1; d < LP_DTYPE_COUNT; d++)
        if (elements[d] > elements[best])
            best = (lp_dtype)d;
    return best;
}

/* rope.scaling.type as stored (NULL when absent). */
static lp_status rope_scaling_type(const reader *r, const char **type, size_t *len)
{
    char key[256];
    key_of(r, "rope.scaling.type", key, sizeof key);
    *type = NULL;
    *len = 0;
    if (lp_gguf_find_key(r->g, key) >= 0 && !lp_gguf_get_str(r->g, key, type, len))
        return type_error(r, key, "a string");
    return LP_OK;
}

/* The scaling the type names, or what the factor and the tensors imply without one; *kind
 * stays NONE without scaling. */
static lp_status rope_scaling_kind(const reader *r, const char *type, size_t len, double factor,
                                   lp_rope_scaling_kind *kind)
{
    static const struct {
        const char *name;
        lp_rope_scaling_kind kind;
    } types[] = {{"none", LP_ROPE_SCALING_NONE},
                 {"linear", LP_ROPE_SCALING_LINEAR},
                 {"yarn", LP_ROPE_SCALING_YARN},
                 {"longrope", LP_ROPE_SCALING_LONGROPE}};
    *kind = LP_ROPE_SCALING_NONE;
    if (!type) {
        if (factor != 1.0 && factor != 0.0)
            *kind = LP_ROPE_SCALING_LINEAR; /* llama.cpp's default type */
        else if (has_tensor(r->g, "rope_factors_long.weight"))
            /* Phi-3 128k: the converter stores longrope's per-dimension factors as tensors and
             * only the original context and attention factor as keys */
            *kind = LP_ROPE_SCALING_LONGROPE;
        return LP_OK;
    }
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (len == strlen(types[i].name) && memcmp(type, types[i].name, len) == 0) {
            *kind = types[i].kind;
            return LP_OK;
        }
    char key[256];
    return lp_error_set(r->err, LP_ERR_UNSUPPORTED,
                        "%s: key '%s': rope scaling \"%.*s\" is not supported (none, linear, "
                        "yarn, longrope)",
                        r->file, key_of(r, "rope.scaling.type", key, sizeof key),
                        (int)(len > 40 ? 40 : len), type);
}

/* yarn: transformers' defaults for beta. DeepSeek: yarn_log_multiplier = 0.1 * mscale_all_dim;
 * the softmax is scaled by (1 + log_mul * ln(factor))^2 / sqrt(head_dim) (llama.cpp's deepseek2
 * graph, HF's softmax_scale). With mscale == mscale_all_dim, as DeepSeek ships, the cos/sin
 * factor is 1. */
static lp_status read_yarn(const reader *r, lp_arch *a)
{
    lp_rope_scaling *s = &a->rope_scaling;
    lp_arch_yarn_defaults(s);
    double log_mul = 0.0;
    bool has_log_mul;
    lp_status st = opt_float(r, "rope.scaling.yarn_log_multiplier", &log_mul, &has_log_mul);
    if (st == LP_OK && has_log_mul && log_mul > 0.0 && s->factor > 1.0) {
        double m = 1.0 + log_mul * log(s->factor);
        a->query_scale = m * m / sqrt((double)a->head_dim);
        if (s->attention_factor == 0.0)
            s->attention_factor = 1.0;
    }
    return st;
}

/* longrope's factors: llama.cpp's converter (Phi3MiniModel) writes long_factor and short_factor
 * as one-dimensional F32 tensors of rope_dim / 2 values, not as keys. Both or neither. */
static lp_status read_longrope_factors(const reader *r, lp_rope_scaling *s)
{
    static const char *const names[2] = {"rope_factors_short.weight", "rope_factors_long.weight"};
    double *dst[2] = {s->short_factor, s->long_factor};
    int64_t idx[2] = {lp_gguf_find_tensor(r->g, names[0]), lp_gguf_find_tensor(r->g, names[1])};
    if (idx[0] < 0 && idx[1] < 0)
        return LP_OK; /* the loader names what is missing against rope_dim */
    for (int k = 0; k < 2; k++) {
        if (idx[k] < 0)
            return lp_error_set(r->err, LP_ERR_FORMAT, "%s: tensor '%s' is missing (its pair '%s' "
                                "is there)", r->file, names[k], names[1 - k]);
        int64_t n = lp_gguf_tensor_ne(r->g, idx[k], 0);
        if (lp_gguf_tensor_dtype(r->g, idx[k]) != LP_DTYPE_F32 ||
            lp_gguf_tensor_n_dims(r->g, idx[k]) != 1 || n <= 0 || n > LP_MAX_ROPE_FACTORS ||
            lp_gguf_tensor_bytes(r->g, idx[k]) != (uint64_t)n * sizeof(float))
            return lp_error_set(r->err, LP_ERR_FORMAT, "%s: tensor '%s': want a 1-D F32 tensor of "
                                "1..%d values", r->file, names[k], LP_MAX_ROPE_FACTORS);
        if (k == 1 && n != s->n_factors)
            return lp_error_set(r->err, LP_ERR_FORMAT, "%s: tensor '%s' has %lld values, '%s' "
                                "%lld", r->file, names[1], (long long)n, names[0],
                                (long long)s->n_factors);
        const unsigned char *data = lp_gguf_tensor_data(r->g, idx[k]);
        for (int64_t i = 0; i < n; i++) {
            float v;
            memcpy(&v, data + (size_t)i * sizeof v, sizeof v); /* rows need not be aligned */
            if (!(v > 0.0f) || !isfinite(v))
                return lp_error_set(r->err, LP_ERR_FORMAT, "%s: tensor '%s' value %lld is %g "
                                    "(factors divide a frequency: must be positive)", r->file,
                                    names[k], (long long)i, (double)v);
            dst[k][i] = (double)v;
        }
        s->n_factors = n;
    }
    return LP_OK;
}

static lp_status read_rope_scaling(const reader *r, lp_arch *a)
{
    lp_rope_scaling *s = &a->rope_scaling;
    const char *type;
    size_t len;
    double factor = 0.0; /* absent: no scaling unless the type or the tensors say */
    bool has_factor = false;
    lp_status st = rope_scaling_type(r, &type, &len);
    if (st == LP_OK)
        st = opt_float(r, "rope.scaling.factor", &factor, &has_factor);
    if (st == LP_OK && !has_factor)
        st = opt_float(r, "rope.scale_linear", &factor, &has_factor);
    if (st != LP_OK || (st = rope_scaling_kind(r, type, len, factor, &s->kind)) != LP_OK ||
        s->kind == LP_ROPE_SCALING_NONE)
        return st;
    s->factor = factor;
    if ((st = opt_count(r, "rope.scaling.original_context_length", &s->original_ctx, NULL)) !=
            LP_OK ||
        (st = opt_float(r, "rope.scaling.attn_factor", &s->attention_factor, NULL)) != LP_OK ||
        (st = opt_float(r, "rope.scaling.yarn_beta_fast", &s->beta_fast, NULL)) != LP_OK ||
        (st = opt_float(r, "rope.scaling.yarn_beta_slow", &s->beta_slow, NULL)) != LP_OK)
        return st;
    if (s->kind == LP_ROPE_SCALING_YARN && (st = read_yarn(r, a)) != LP_OK)
        return st;
    if (s->kind == LP_ROPE_SCALING_LONGROPE && s->factor == 0.0 && s->original_ctx > 0 &&
        a->n_ctx > 0)
        s->factor = (double)a->n_ctx / (double)s->original_ctx;
    if (s->kind == LP_ROPE_SCALING_LONGROPE)
        return read_longrope_factors(r, s);
    return LP_OK;
}

static lp_status read_windows(const reader *r, lp_arch *a)
{
    lp_status st;
    if ((st = opt_count(r, "attention.sliding_window", &a->sliding_window, NULL)) != LP_OK)
        return st;
    if (a->sliding_window == 0)
        return LP_OK;
    char key[256];
    key_of(r, "attention.sliding_window_pattern", key, sizeof key);
    int64_t kv = lp_gguf_find_key(r->g, key);
    int64_t pattern = 0; /* 0: every layer slides */
    if (strcmp(a->family, "gemma2") == 0 || strcmp(a->family, "gpt_oss") == 0)
        pattern = 2;
    else if (strcmp(a->family, "gemma3") == 0)
        pattern = 6;
    if (kv >= 0 && lp_gguf_kv_type(r->g, kv) == LP_GGUF_ARRAY) {
        /* one flag per layer: true = sliding */
        if (lp_gguf_arr_len(r->g, kv) != (uint64_t)a->n_layers)
            return lp_error_set(r->err, LP_ERR_FORMAT,
                                "%s: key '%s': %llu entries, want one per layer (%lld)", r->file,
                                key, (unsigned long long)lp_gguf_arr_len(r->g, kv),
                                (long long)a->n_layers);
        for (int64_t l = 0; l < a->n_layers; l++) {
            int64_t slides;
            if (!lp_gguf_arr_int(r->g, kv, (uint64_t)l, &slides))
                return type_error(r, key, "an integer or an array of bools");
            a->layer_window[l] = slides ? a->sliding_window : 0;
        }
        return LP_OK;
    }
    if (kv >= 0 && (st = opt_count(r, "attention.sliding_window_pattern", &pattern, NULL)) != LP_OK)
        return st;
    /* llama.cpp's set_swa_pattern(n): layer l slides unless it is the last of each group of n */
    for (int64_t l = 0; l < a->n_layers; l++)
        if (pattern <= 1 || l % pattern < pattern - 1)
            a->layer_window[l] = a->sliding_window;
    if (strcmp(a->family, "gemma") == 0)
        for (int64_t l = 0; l < a->n_layers; l++)
            a->layer_window[l] = 0;
    return LP_OK;
}

static lp_status read_moe(const reader *r, lp_arch *a, const char *gguf_name)
{
    lp_status st;
    bool found;
    if ((st = opt_count(r, "expert_count", &a->n_experts, &found)) != LP_OK)
        return st;
    if (a->n_experts == 0)
        return LP_OK;
    char key[256];
    if ((st = opt_count(r, "expert_used_count", &a->n_experts_per_tok, &found)) != LP_OK)
        return st;
    if (!found)
        return lp_error_set(r->err, LP_ERR_NOT_FOUND, "%s: missing required key '%s' for %lld experts",
                            r->file, key_of(r, "expert_used_count", key, sizeof key),
                            (long long)a->n_experts);
    if ((st = opt_count(r, "expert_feed_forward_length", &a->expert_ffn_hidden, &found)) != LP_OK)
        return st;
    if (!found)
        a->expert_ffn_hidden = a->ffn_hidden; /* Mixtral: feed_forward_length is per expert */
    if ((st = opt_bool(r, "expert_weights_norm", &a->norm_topk_prob)) != LP_OK)
        return st;
    int64_t first_dense = 0;
    if (strcmp(gguf_name, "llama") == 0) {
        snprintf(a->family, sizeof a->family, "mixtral");
        a->norm_topk_prob = true;
    } else if (strcmp(gguf_name, "gpt-oss") == 0) {
        a->norm_topk_prob = true; /* softmax over the top-k logits = renormalized top-k */
    } else if (strcmp(gguf_name, "qwen3moe") == 0) {
        a->norm_topk_prob = true; /* llama.cpp's qwen3moe graph always renormalizes */
    } else if (strcmp(gguf_name, "qwen2moe") == 0) {
        if ((st = opt_count(r, "expert_shared_feed_forward_length", &a->shared_expert_ffn_hidden,
                            NULL)) != LP_OK)
            return st;
        a->shared_expert_gate = a->shared_expert_ffn_hidden > 0;
    } else if (strcmp(gguf_name, "deepseek2") == 0) {
        if ((st = opt_count(r, "expert_shared_count", &a->n_shared_experts, NULL)) != LP_OK ||
            (st = opt_count(r, "leading_dense_block_count", &first_dense, NULL)) != LP_OK)
            return st;
        int64_t gating = 0;
        if ((st = opt_count(r, "expert_gating_func", &gating, NULL)) != LP_OK)
            return st;
        /* DeepSeek V3's sigmoid router comes with a per-expert score bias */
        a->router_score_bias = has_layer_tensor(r->g, "exp_probs_b.bias") || gating == 2;
        /* llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID */
        a->router_sigmoid = gating == 2;
        double scale = 0.0;
        if ((st = opt_count(r, "expert_group_count", &a->n_expert_groups, NULL)) != LP_OK ||
            (st = opt_count(r, "expert_group_used_count", &a->topk_groups, NULL)) != LP_OK ||
            (st = opt_float(r, "expert_weights_scale", &scale, NULL)) != LP_OK)
            return st;
        if (a->n_expert_groups <= 1)
            a->n_expert_groups = a->topk_groups = 0;
        a->routed_scaling = scale == 1.0 ? 0.0 : scale;
    }
    for (int64_t l = first_dense; l < a->n_layers; l++) {
        a->layer_moe[l] = true;
        a->layer_ffn_hidden[l] = 0; /* no dense FFN in a routed layer */
    }
    return LP_OK;
}

/* DeepSeek's multi-head latent attention. head_dim: hidden / heads when no key_length is given. */
static lp_status read_mla(const reader *r, lp_arch *a, int64_t head_dim)
{
    lp_status st;
    bool found;
    if ((st = opt_count(r, "attention.kv_lora_rank", &a->kv_lora_rank, &found)) != LP_OK)
        return st;
    if (!found || a->kv_lora_rank == 0)
        return LP_OK;
    a->mla = true;
    if ((st = opt_count(r, "attention.q_lora_rank", &a->q_lora_rank, NULL)) != LP_OK)
        return st;
    /* Newer converters store MLA as MQA over the latent (key_length = kv_lora_rank + rope) and
     * put the real per-head sizes in *_mla. */
    int64_t key_length = head_dim, value_length = head_dim;
    if ((st = opt_count(r, "attention.key_length_mla", &key_length, &found)) != LP_OK)
        return st;
    if (!found && (st = opt_count(r, "attention.key_length", &key_length, NULL)) != LP_OK)
        return st;
    if ((st = opt_count(r, "attention.value_length_mla", &value_length, &found)) != LP_OK)
        return st;
    if (!found && (st = opt_count(r, "attention.value_length", &value_length, NULL)) != LP_OK)
        return st;
    char key[256];
    if (a->rope_dim == 0 || a->rope_dim >= key_length)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key '%s': %lld rotated dims must be fewer than the MLA key "
                            "length %lld",
                            r->file, key_of(r, "rope.dimension_count", key, sizeof key),
                            (long long)a->rope_dim, (long long)key_length);
    a->qk_rope_head_dim = a->rope_dim;
    a->qk_nope_head_dim = key_length - a->rope_dim;
    a->v_head_dim = value_length;
    a->head_dim = key_length;
    a->head_dim_explicit = false;
    a->partial_rotary = (double)a->rope_dim / (double)a->head_dim;
    return LP_OK;
}

/* general.architecture, one of FAMILIES; a shard of a split file without it says so. */
static lp_status find_family(const lp_gguf *g, const char *file, const gguf_family **out,
                             lp_error *err)
{
    const char *arch_name;
    size_t arch_len;
    int64_t split_no, split_count;
    if (lp_gguf_find_key(g, "general.architecture") < 0 &&
        lp_gguf_get_int(g, "split.no", &split_no) && lp_gguf_get_int(g, "split.count", &split_count))
        /* llama.cpp's split files keep the metadata in the first shard only */
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: shard %lld of %lld of a split GGUF has no model metadata (it is "
                            "in the first shard)",
                            file, (long long)split_no + 1, (long long)split_count);
    if (lp_gguf_find_key(g, "general.architecture") < 0)
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: missing required key 'general.architecture'",
                            file);
    if (!lp_gguf_get_str(g, "general.architecture", &arch_name, &arch_len))
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: key 'general.architecture': expected a string", file);
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (strlen(FAMILIES[i].gguf_name) == arch_len &&
            memcmp(FAMILIES[i].gguf_name, arch_name, arch_len) == 0)
            *out = &FAMILIES[i];
    if (*out)
        return LP_OK;
    return lp_error_set(err, LP_ERR_UNSUPPORTED,
                        "%s: general.architecture \"%.*s\" is not supported (llama, qwen2, "
                        "qwen2moe, qwen3, qwen3moe, gemma, gemma2, gemma3, phi2, phi3, gpt2, "
                        "falcon, deepseek2, starcoder2, stablelm, gptneox, gptj, bloom, mpt, "
                        "olmo2, gpt-oss)",
                        file, (int)(arch_len > 40 ? 40 : arch_len), arch_name);
}

/* The family's defaults, and the name (general.name unless it only repeats the architecture). */
static void apply_family(lp_arch *a, const gguf_family *fam, const lp_gguf *g, const char *file)
{
    snprintf(a->family, sizeof a->family, "%s", fam->family);
    a->ffn_kind = fam->ffn_kind;
    a->act = fam->act;
    a->norm_kind = fam->norm_kind;
    a->pos_kind = fam->pos_kind;
    a->rope_layout = fam->rope_layout;
    a->tied_embeddings = fam->tied_default;
    a->bias_qkv = a->bias_o = a->bias_mlp = fam->bias_all;
    a->bias_norm = fam->norm_kind == LP_NORM_LAYER;
    a->parallel_block = fam->parallel;
    const char *name;
    size_t name_len, arch_len = strlen(fam->gguf_name);
    if (lp_gguf_get_str(g, "general.name", &name, &name_len) && name_len > 0 &&
        !(name_len == arch_len && memcmp(name, fam->gguf_name, arch_len) == 0))
        snprintf(a->name, sizeof a->name, "%.*s", (int)(name_len < 127 ? name_len : 127), name);
    else
        snprintf(a->name, sizeof a->name, "%s", file);
}

/* Layers, width, heads (per layer: the same in every layer), kv heads, key length. */
static lp_status read_dims(const reader *r, lp_arch *a)
{
    char key[256];
    lp_status st;
    bool found;
    if ((st = require_count(r, "block_count", &a->n_layers)) != LP_OK ||
        (st = require_count(r, "embedding_length", &a->hidden_size)) != LP_OK)
        return st;
    if (a->n_layers > LP_MAX_LAYERS)
        return lp_error_set(r->err, LP_ERR_FORMAT,
                            "%s: key '%s': %lld exceeds the limit of %d layers", r->file,
                            key_of(r, "block_count", key, sizeof key), (long long)a->n_layers,
                            LP_MAX_LAYERS);
    int64_t heads[LP_MAX_LAYERS];
    key_of(r, "attention.head_count", key, sizeof key);
    if ((st = per_layer(r, "attention.head_count", a->n_layers, heads, &a->n_heads, &found)) !=
        LP_OK)
        return st;
    if (!found || a->n_heads == 0)
        return lp_error_set(r->err, found ? LP_ERR_FORMAT : LP_ERR_NOT_FOUND,
                            "%s: missing required key '%s'", r->file, key);
    for (int64_t l = 0; l < a->n_layers; l++)
        if (heads[l] != a->n_heads && heads[l] != 0)
            return lp_error_set(r->err, LP_ERR_UNSUPPORTED,
                                "%s: key '%s': layer %lld has %lld heads, layer-varying head "
                                "counts are not supported",
                                r->file, key, (long long)l, (long long)heads[l]);
    if ((st = per_layer(r, "attention.head_count_kv", a->n_layers, a->layer_kv_heads,
                        &a->n_kv_heads, &found)) != LP_OK ||
        (st = opt_count(r, "attention.key_length", &a->head_dim, &found)) != LP_OK)
        return st;
    a->head_dim_explicit = found && a->head_dim > 0;
    return LP_OK;
}

/* vocab_size, else the length of tokenizer.ggml.tokens; the special ids inside it. */
static lp_status read_vocab(const reader *r, lp_arch *a)
{
    bool found;
    lp_status st = opt_count(r, "vocab_size", &a->vocab_size, &found);
    if (st != LP_OK)
        return st;
    if (!found) {
        int64_t tok = lp_gguf_find_key(r->g, "tokenizer.ggml.tokens");
        a->vocab_size = (int64_t)lp_gguf_arr_len(r->g, tok);
        char key[256];
        if (a->vocab_size == 0)
            return lp_error_set(r->err, LP_ERR_FORMAT,
                                "%s: neither '%s' nor a tokenizer.ggml.tokens array gives the "
                                "vocabulary size",
                                r->file, key_of(r, "vocab_size", key, sizeof key));
    }
    int64_t v;
    if (lp_gguf_get_int(r->g, "tokenizer.ggml.bos_token_id", &v) && v < a->vocab_size)
        a->bos_token_id = v;
    if (lp_gguf_get_int(r->g, "tokenizer.ggml.eos_token_id", &v) && v < a->vocab_size)
        a->eos_token_id = v;
    return LP_OK;
}

/* Context, RoPE (rotated dims, MLA, scaling, Gemma 3's local theta). */
static lp_status read_positions(const reader *r, lp_arch *a, const gguf_family *fam)
{
    lp_status st;
    bool found;
    if ((st = opt_count(r, "context_length", &a->n_ctx, NULL)) != LP_OK)
        return st;
    if (a->pos_kind == LP_POS_LEARNED)
        a->pos_table_rows = a->n_ctx;
    if ((st = opt_float(r, "rope.freq_base", &a->rope_theta, NULL)) != LP_OK ||
        (st = opt_count(r, "rope.dimension_count", &a->rope_dim, &found)) != LP_OK)
        return st;
    int64_t head_dim = a->head_dim;
    if (head_dim == 0 && a->hidden_size % a->n_heads == 0)
        head_dim = a->hidden_size / a->n_heads;
    if (found && a->pos_kind == LP_POS_ROPE && head_dim > 0 && a->rope_dim > 0 &&
        a->rope_dim <= head_dim)
        a->partial_rotary = (double)a->rope_dim / (double)head_dim;
    if (strcmp(fam->gguf_name, "deepseek2") == 0 && (st = read_mla(r, a, head_dim)) != LP_OK)
        return st;
    if (a->head_dim == 0)
        a->head_dim = head_dim;
    if (a->pos_kind == LP_POS_ROPE && (st = read_rope_scaling(r, a)) != LP_OK)
        return st;
    if (strcmp(fam->gguf_name, "gemma3") == 0)
        a->rope_local_theta = 10000.0; /* llama.cpp: rope_freq_base_train_swa */
    return LP_OK;
}

/* The dense width (per layer), then the experts. */
static lp_status read_ffn(const reader *r, lp_arch *a, const gguf_family *fam)
{
    bool found;
    lp_status st = per_layer(r, "feed_forward_length", a->n_layers, a->layer_ffn_hidden,
                             &a->ffn_hidden, &found);
    if (st != LP_OK)
        return st;
    if (!found && fam->ffn_kind == LP_FFN_MLP)
        a->ffn_hidden = 4 * a->hidden_size;
    return read_moe(r, a, fam->gguf_name);
}

/* The epsilon under the key of the family's norm, else under the other one. */
static lp_status read_norm_eps(const reader *r, lp_arch *a)
{
    bool rms = a->norm_kind == LP_NORM_RMS, found;
    lp_status st = opt_float(r, rms ? "attention.layer_norm_rms_epsilon"
                                    : "attention.layer_norm_epsilon",
                             &a->norm_eps, &found);
    if (st != LP_OK || found)
        return st;
    return opt_float(r, rms ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon",
                     &a->norm_eps, NULL);
}

/* What llama.cpp's graphs hard-code beyond FAMILIES (GGUF architecture names). No
 * norm_weight_plus_one for Gemma: llama.cpp's converter folds Gemma's "+1" into every stored
 * norm weight, so a GGUF already holds 1 + w and its graph uses a plain RMSNorm. */
static const lp_arch_fixed GRAPH_FIXED[] = {
    LP_ARCH_FIXED("gemma2 gemma3", post_attn_norm, true),
    LP_ARCH_FIXED("gemma2 gemma3", post_ffn_norm, true),
    LP_ARCH_FIXED("gemma3 qwen3*", qk_norm, true),
    LP_ARCH_FIXED("qwen2 qwen2moe", bias_qkv, true),
    LP_ARCH_FIXED("phi2", bias_lm_head, true),
    LP_ARCH_FIXED("bloom", embed_norm, true),
    LP_ARCH_FIXED("olmo2", qk_norm_full, true),
    LP_ARCH_FIXED("olmo2", no_input_norm, true),
    LP_ARCH_FIXED("olmo2", post_attn_norm, true),
    LP_ARCH_FIXED("olmo2", post_ffn_norm, true),
    LP_ARCH_FIXED("gpt-oss", bias_mlp, true),
    LP_ARCH_FIXED("gpt-oss", router_bias, true),
    LP_ARCH_FIXED("gpt-oss", attn_sinks, true),
};

/* MPT (convert_hf_to_gguf's MPTModel): attention.max_alibi_bias is alibi_bias_max, 0 for a
 * model with learned positions (position_embd); attention.clamp_kqv is clip_qkv. logit_scale
 * and softmax_scale have no key: a GGUF of a model that set them traces without them. */
static lp_status read_mpt_details(const reader *r, lp_arch *a)
{
    bool found;
    lp_status st = opt_float(r, "attention.max_alibi_bias", &a->alibi_max_bias, &found);
    if (st != LP_OK || (st = opt_float(r, "attention.clamp_kqv", &a->qkv_clip, NULL)) != LP_OK)
        return st;
    if (found && a->alibi_max_bias == 0.0) {
        a->pos_kind = LP_POS_LEARNED;
        a->pos_table_rows = a->n_ctx;
    }
    return LP_OK;
}

/* Gemma's embedding scale and (2, 3) soft caps and query scale; the parallel residual. */
static lp_status read_family_details(const reader *r, lp_arch *a, const gguf_family *fam)
{
    const char *name = fam->gguf_name;
    lp_status st = LP_OK;
    lp_arch_apply_fixed(a, name, GRAPH_FIXED, sizeof GRAPH_FIXED / sizeof GRAPH_FIXED[0]);
    if (strncmp(name, "gemma", 5) == 0)
        a->embed_scale = sqrt((double)a->hidden_size);
    if (lp_arch_name_in(name, "gemma2 gemma3")) {
        if ((st = opt_float(r, "attn_logit_softcapping", &a->attn_logit_softcap, NULL)) !=
                LP_OK ||
            (st = opt_float(r, "final_logit_softcapping", &a->final_logit_softcap, NULL)) != LP_OK)
            return st;
        /* query_pre_attn_scalar is not in GGUF; llama.cpp uses hidden / heads for the 27B models
         * (46 layers for Gemma 2, 62 for Gemma 3) and head_dim for the rest. */
        if ((strcmp(name, "gemma2") == 0 && a->n_layers == 46) ||
            (strcmp(name, "gemma3") == 0 && a->n_layers == 62))
            a->query_scale = 1.0 / sqrt((double)a->hidden_size / (double)a->n_heads);
    }
    if (lp_arch_name_in(name, "stablelm gptneox") &&
        (st = opt_bool(r, "use_parallel_residual", &a->parallel_block)) != LP_OK)
        return st;
    /* GPT-NeoX keeps both input and post-attention norms in parallel mode; StableLM does not */
    if (strcmp(name, "gptneox") == 0)
        a->parallel_two_norms = a->parallel_block;
    return strcmp(name, "mpt") == 0 ? read_mpt_details(r, a) : LP_OK;
}

/* What the tensors say, when the file has them: they are the truth for the file at hand. */
static void read_tensor_facts(const lp_gguf *g, lp_arch *a, const gguf_family *fam)
{
    if (lp_gguf_n_tensors(g) == 0)
        return;
    a->tied_embeddings = !has_tensor(g, "output.weight");
    a->bias_qkv = has_layer_tensor(g, "attn_q.bias") || has_layer_tensor(g, "attn_qkv.bias");
    a->bias_o = has_layer_tensor(g, "attn_output.bias");
    a->bias_mlp = has_layer_tensor(g, "ffn_up.bias") || has_layer_tensor(g, "ffn_down.bias") ||
                  has_layer_tensor(g, "ffn_up_exps.bias") ||
                  has_layer_tensor(g, "ffn_down_exps.bias");
    if (a->n_experts > 0)
        a->router_bias = has_layer_tensor(g, "ffn_gate_inp.bias");
    a->attn_sinks = has_layer_tensor(g, "attn_sinks.weight") || has_layer_tensor(g, "attn_sinks");
    a->bias_lm_head = has_tensor(g, "output.bias");
    if (a->norm_kind == LP_NORM_LAYER)
        a->bias_norm = has_layer_tensor(g, "attn_norm.bias") || has_tensor(g, "output_norm.bias");
    if (strcmp(fam->gguf_name, "falcon") == 0)
        a->parallel_two_norms = has_layer_tensor(g, "attn_norm_2.weight");
    if (lp_arch_name_in(fam->gguf_name, "stablelm phi2"))
        a->qk_norm = has_layer_tensor(g, "attn_q_norm.weight");
    /* StableLM's q/k norms are one per head, stacked [n_heads, head_dim] by the converter */
    if (strcmp(fam->gguf_name, "stablelm") == 0)
        a->qk_norm_per_head = a->qk_norm;
    /* MPT's qk_ln: one norm over the whole q and k projections */
    if (strcmp(fam->gguf_name, "mpt") == 0)
        a->qk_norm_full = has_layer_tensor(g, "attn_q_norm.weight");
    a->storage_dtype = dominant_dtype(g);
}

lp_status lp_arch_from_gguf(const struct lp_gguf *g, lp_arch *a, lp_error *err)
{
    const char *file = lp_path_basename(lp_gguf_path(g));
    lp_arch_init(a);
    snprintf(a->source, sizeof a->source, "%s", lp_gguf_path(g));
    const gguf_family *fam = NULL;
    lp_status st = find_family(g, file, &fam, err);
    if (st != LP_OK)
        return st;
    apply_family(a, fam, g, file);
    reader rd = {g, file, fam->gguf_name, err};
    if ((st = read_dims(&rd, a)) != LP_OK || (st = read_vocab(&rd, a)) != LP_OK ||
        (st = read_positions(&rd, a, fam)) != LP_OK || (st = read_ffn(&rd, a, fam)) != LP_OK ||
        (st = read_norm_eps(&rd, a)) != LP_OK || (st = read_family_details(&rd, a, fam)) != LP_OK ||
        (st = read_windows(&rd, a)) != LP_OK)
        return st;
    read_tensor_facts(g, a, fam);
    return lp_arch_finish(a, err);
}
