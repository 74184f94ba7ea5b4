/* A tiny model "like" a card or config: the family's writer with the card's rules (parallel or
 * sequential, biases, q/k norms, rotated fraction, ALiBi, norms, kv grouping, experts, windows)
 * and small sizes, so every supported card can be traced without a download. */
#include "trace/synth/synth.h"

#include <string.h>

typedef struct family_name {
    const char *family; /* lp_arch.family */
    lp_synth_family synth;
} family_name;

static const family_name FAMILY_NAMES[] = {
    {"llama", LP_SYNTH_LLAMA},     {"mistral", LP_SYNTH_MISTRAL}, {"qwen2", LP_SYNTH_QWEN2},
    {"qwen3", LP_SYNTH_QWEN3},     {"mixtral", LP_SYNTH_MIXTRAL}, {"gemma", LP_SYNTH_GEMMA},
    {"gemma2", LP_SYNTH_GEMMA2},   {"gemma3", LP_SYNTH_GEMMA3},   {"gemma3_text", LP_SYNTH_GEMMA3},
    {"gpt2", LP_SYNTH_GPT2},       {"gpt_neox", LP_SYNTH_NEOX},   {"phi", LP_SYNTH_PHI},
    {"gptj", LP_SYNTH_GPTJ},       {"stablelm", LP_SYNTH_STABLELM}, {"falcon", LP_SYNTH_FALCON},
    {"bloom", LP_SYNTH_BLOOM},     {"opt", LP_SYNTH_OPT},         {"olmo2", LP_SYNTH_OLMO2},
    {"phi3", LP_SYNTH_PHI3},
    {"qwen2_moe", LP_SYNTH_QWEN2_MOE}, {"qwen3_moe", LP_SYNTH_QWEN3_MOE},
    {"deepseek_v2", LP_SYNTH_DEEPSEEK_V2}, {"deepseek_v3", LP_SYNTH_DEEPSEEK_V3},
    {"gpt_oss", LP_SYNTH_GPT_OSS},
    {"mpt", LP_SYNTH_MPT},         {"starcoder2", LP_SYNTH_STARCODER2},
};

/* Qwen MoE and DeepSeek: the card's routing rules on 4 experts (its dense leading layers, a
 * shared expert when it has one, groups of 2 of which 1 when it groups, its scaling). */
static void like_moe(const lp_arch *a, lp_synth_spec *spec)
{
    spec->norm_topk_prob = a->norm_topk_prob;
    for (int l = 0; l < spec->n_layers && l < LP_MAX_LAYERS; l++)
        spec->dense_layer[l] = a->n_experts > 0 && !a->layer_moe[l];
    if (spec->family == LP_SYNTH_QWEN2_MOE && a->shared_expert_ffn_hidden == 0)
        spec->shared_ffn = 0;
    if (spec->family != LP_SYNTH_DEEPSEEK_V2 && spec->family != LP_SYNTH_DEEPSEEK_V3)
        return;
    spec->n_kv_heads = spec->n_heads;
    spec->first_dense = spec->dense_layer[0] ? 1 : 0;
    spec->n_shared = a->n_shared_experts > 0 ? 1 : 0;
    spec->q_lora = a->q_lora_rank > 0 ? 16 : 0;
    spec->n_groups = a->n_expert_groups > 1 ? 2 : 0;
    spec->topk_groups = a->n_expert_groups > 1 ? 1 : 0;
    spec->routed_scaling = a->routed_scaling;
}

/* kv heads of a 4-head copy: multi-head stays multi-head, multi-query stays multi-query,
 * grouped keeps groups of 2 */
static int64_t small_kv_heads(const lp_arch *a, int64_t heads)
{
    int64_t kv = a->n_kv_heads > 0 ? a->n_kv_heads : a->n_heads;
    if (kv >= a->n_heads)
        return heads;
    return kv == 1 ? 1 : heads / 2;
}

/* The rotated dims of a head_dim-wide head at the card's fraction: even, at least 2. */
static int64_t small_rope_dim(const lp_arch *a, int64_t head_dim)
{
    double frac = a->partial_rotary > 0 ? a->partial_rotary : 1.0;
    if (frac >= 1.0)
        return 0;
    int64_t r = (int64_t)((double)head_dim * frac) / 2 * 2;
    return r < 2 ? 2 : r;
}

/* Gemma 3: every pattern-th layer is global; the first layer without a window says which. */
static int64_t window_pattern(const lp_arch *a)
{
    for (int l = 0; l < a->n_layers && l < LP_MAX_LAYERS; l++)
        if (a->layer_window[l] == 0)
            return l + 1;
    return 0;
}

lp_status lp_synth_spec_like(const lp_arch *a, lp_synth_spec *spec, lp_error *err)
{
    const family_name *f = NULL;
    for (size_t i = 0; i < sizeof FAMILY_NAMES / sizeof FAMILY_NAMES[0]; i++)
        if (strcmp(a->family, FAMILY_NAMES[i].family) == 0)
            f = &FAMILY_NAMES[i];
    /* a llama-style card with a window everywhere is Mistral's layout */
    lp_synth_family fam = f ? f->synth : LP_SYNTH_FAMILY_COUNT;
    if (fam == LP_SYNTH_LLAMA && a->sliding_window > 0)
        fam = LP_SYNTH_MISTRAL;
    if (fam == LP_SYNTH_FAMILY_COUNT)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: family '%s' has no synthetic writer (synth --like writes llama, "
                            "mistral, qwen2, qwen3, mixtral, gemma, gemma2, gemma3, gpt2, "
                            "gpt_neox, phi, gptj, stablelm, falcon, bloom, opt, phi3, olmo2, "
                            "qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss, mpt, starcoder2)",
                            a->source, a->family);
    lp_synth_spec_init(spec, fam);
    spec->n_kv_heads = small_kv_heads(a, spec->n_heads);
    spec->rope_dim = small_rope_dim(a, spec->head_dim);
    spec->tied = a->tied_embeddings;
    if (a->norm_eps > 0)
        spec->norm_eps = a->norm_eps;
    if (a->rope_theta > 0 && fam != LP_SYNTH_GPTJ) /* GPT-J's base is fixed */
        spec->rope_theta = a->rope_theta;
    spec->parallel = a->parallel_block;
    spec->qkv_bias = fam == LP_SYNTH_BLOOM || (fam == LP_SYNTH_FALCON || fam == LP_SYNTH_STABLELM ||
                                                       fam == LP_SYNTH_MPT || fam == LP_SYNTH_STARCODER2
                                                   ? a->bias_qkv
                                                   : spec->qkv_bias);
    if (fam == LP_SYNTH_STARCODER2) /* its window (16 of 256 positions) when the card has one */
        spec->window = a->sliding_window > 0 ? spec->window : 0;
    spec->qk_norm = (fam == LP_SYNTH_STABLELM && (a->qk_norm || a->qk_norm_per_head)) ||
                    (fam == LP_SYNTH_MPT && a->qk_norm_full);
    if (fam == LP_SYNTH_MPT) { /* clip_qkv, logit_scale and alibi_bias_max as the card has them */
        spec->qkv_clip = a->qkv_clip;
        spec->logit_scale = a->logit_scale;
        spec->alibi_max = a->alibi_max_bias;
    }
    spec->alibi = a->pos_kind == LP_POS_ALIBI;
    if (fam == LP_SYNTH_FALCON) {
        spec->new_arch = a->parallel_two_norms;
        spec->parallel = a->parallel_block || spec->new_arch;
        if (!spec->new_arch && spec->n_kv_heads != 1)
            spec->n_kv_heads = spec->n_heads;
    }
    spec->post_norm = a->post_norm;
    if (a->embed_proj_dim > 0 && a->embed_proj_dim != a->hidden_size)
        spec->embed_dim = spec->hidden / 2;
    if (spec->n_experts > 0) {
        spec->n_experts = a->n_experts < 4 ? a->n_experts : 4;
        spec->top_k = a->n_experts_per_tok < 2 ? a->n_experts_per_tok : 2;
        if (fam != LP_SYNTH_MIXTRAL)
            like_moe(a, spec);
    }
    if (fam == LP_SYNTH_GPT_OSS) {
        /* the card's clamp; its window (16 of 256 positions) on the even layers; YaRN at a
         * factor of 4 over an original context of 64, so that factor = n_ctx / original */
        spec->swiglu_limit = a->swiglu_limit > 0 ? a->swiglu_limit : spec->swiglu_limit;
        spec->dtype = LP_DTYPE_BF16; /* the unquantized release is bf16 */
        spec->window = a->sliding_window > 0 ? spec->window : 0;
        if (a->rope_scaling.kind == LP_ROPE_SCALING_YARN) {
            spec->yarn_factor = 4;
            spec->yarn_orig = 64;
        }
    }
    if (fam == LP_SYNTH_GEMMA3 && window_pattern(a) > 0)
        spec->sliding_pattern = window_pattern(a);
    if (fam == LP_SYNTH_GEMMA2) {
        spec->attn_softcap = a->attn_logit_softcap;
        spec->final_softcap = a->final_logit_softcap;
    }
    /* longrope: an original context of 16 in 64 positions, unit factors */
    if (fam == LP_SYNTH_PHI3 && a->rope_scaling.kind == LP_ROPE_SCALING_LONGROPE) {
        spec->orig_ctx = 16;
        spec->n_ctx = 64;
    }
    if (a->bos_token_id >= 0 && a->bos_token_id < spec->vocab)
        spec->bos_id = a->bos_token_id;
    if (a->eos_token_id >= 0 && a->eos_token_id < spec->vocab)
        spec->eos_id = a->eos_token_id;
    return LP_OK;
}
