/* Models of any family as Hugging Face writes them. Families differ by data: which tensors they
 * have, under which names, in which layout (the tensor table), and which config keys (the key
 * table); one writer walks both. */
#include "trace/synth/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "trace/synth/synth_internal.h"

/* ---- the families ------------------------------------------------------------------------------ */

#define FAM(f) (1u << (f))
enum {
    ALL = FAM(LP_SYNTH_FAMILY_COUNT) - 1,
    GPT2 = FAM(LP_SYNTH_GPT2),
    NEOX = FAM(LP_SYNTH_NEOX),
    PHI = FAM(LP_SYNTH_PHI),
    GPTJ = FAM(LP_SYNTH_GPTJ),
    STABLELM = FAM(LP_SYNTH_STABLELM),
    FALCON = FAM(LP_SYNTH_FALCON),
    OLMO2 = FAM(LP_SYNTH_OLMO2), /* a DECODER without input norms */
    BLOOM = FAM(LP_SYNTH_BLOOM),
    FALCON_BLOCK = FALCON | BLOOM, /* transformer.h.N.self_attention..., mlp.dense_* */
    OPT = FAM(LP_SYNTH_OPT),
    PHI3 = FAM(LP_SYNTH_PHI3), /* a DECODER with fused qkv_proj and gate_up_proj */
    MPT = FAM(LP_SYNTH_MPT), /* LayerNorm and biases only without no_bias */
    SC2 = FAM(LP_SYNTH_STARCODER2), /* model.* names, LayerNorm, biases by use_bias */
    LAYERNORM = GPT2 | NEOX | PHI | GPTJ | FALCON | BLOOM | OPT, /* LayerNorm with bias, plain
                                                                   MLP, head_dim derived */
    HEAD_DIM_DERIVED = LAYERNORM | STABLELM | MPT | SC2, /* head_dim = hidden / heads, no key */
    DECODER = ALL & ~HEAD_DIM_DERIVED, /* Llama-like: "model.layers.N..." names, RMSNorm, RoPE */
    HF_SIZES = DECODER | NEOX | PHI | STABLELM | SC2, /* hidden_size, num_hidden_layers, ... */
    MHA_ONLY = GPT2 | NEOX | GPTJ | BLOOM | OPT,
    MOE = FAM(LP_SYNTH_MIXTRAL),
    GEMMAS = FAM(LP_SYNTH_GEMMA) | FAM(LP_SYNTH_GEMMA2) | FAM(LP_SYNTH_GEMMA3),
    POST_NORMS = FAM(LP_SYNTH_GEMMA2) | FAM(LP_SYNTH_GEMMA3), /* four norms per layer */
    QWEN_MOES = FAM(LP_SYNTH_QWEN2_MOE) | FAM(LP_SYNTH_QWEN3_MOE),
    V3 = FAM(LP_SYNTH_DEEPSEEK_V3),
    DEEPSEEKS = FAM(LP_SYNTH_DEEPSEEK_V2) | V3, /* latent attention */
    OSS = FAM(LP_SYNTH_GPT_OSS),
    QK_NORM = FAM(LP_SYNTH_QWEN3) | FAM(LP_SYNTH_GEMMA3) | FAM(LP_SYNTH_QWEN3_MOE),
    QKV_BIAS = FAM(LP_SYNTH_QWEN2) | FAM(LP_SYNTH_QWEN2_MOE),
    NORM_PLUS_ONE = GEMMAS, /* norms compute x * (1 + w): the identity is w = 0 */
};

typedef struct family_info {
    const char *name;
    const char *model_type;
    const char *architecture;
    const char *act; /* hidden_act (GPT-2: activation_function) */
} family_info;

static const family_info FAMILIES[LP_SYNTH_FAMILY_COUNT] = {
    [LP_SYNTH_LLAMA] = {"llama", "llama", "LlamaForCausalLM", "silu"},
    [LP_SYNTH_MISTRAL] = {"mistral", "mistral", "MistralForCausalLM", "silu"},
    [LP_SYNTH_QWEN2] = {"qwen2", "qwen2", "Qwen2ForCausalLM", "silu"},
    [LP_SYNTH_QWEN3] = {"qwen3", "qwen3", "Qwen3ForCausalLM", "silu"},
    [LP_SYNTH_MIXTRAL] = {"mixtral", "mixtral", "MixtralForCausalLM", "silu"},
    [LP_SYNTH_GEMMA] = {"gemma", "gemma", "GemmaForCausalLM", "gelu_pytorch_tanh"},
    [LP_SYNTH_GEMMA2] = {"gemma2", "gemma2", "Gemma2ForCausalLM", "gelu_pytorch_tanh"},
    [LP_SYNTH_GEMMA3] = {"gemma3", "gemma3_text", "Gemma3ForCausalLM", "gelu_pytorch_tanh"},
    [LP_SYNTH_GPT2] = {"gpt2", "gpt2", "GPT2LMHeadModel", "gelu_new"},
    [LP_SYNTH_NEOX] = {"gpt_neox", "gpt_neox", "GPTNeoXForCausalLM", "gelu"},
    [LP_SYNTH_PHI] = {"phi", "phi", "PhiForCausalLM", "gelu_new"},
    [LP_SYNTH_GPTJ] = {"gptj", "gptj", "GPTJForCausalLM", "gelu_new"},
    [LP_SYNTH_STABLELM] = {"stablelm", "stablelm", "StableLmForCausalLM", "silu"},
    [LP_SYNTH_FALCON] = {"falcon", "falcon", "FalconForCausalLM", "gelu"},
    [LP_SYNTH_OLMO2] = {"olmo2", "olmo2", "Olmo2ForCausalLM", "silu"},
    [LP_SYNTH_BLOOM] = {"bloom", "bloom", "BloomForCausalLM", "bloom_gelu"},
    [LP_SYNTH_OPT] = {"opt", "opt", "OPTForCausalLM", "relu"},
    [LP_SYNTH_PHI3] = {"phi3", "phi3", "Phi3ForCausalLM", "silu"},
    [LP_SYNTH_QWEN2_MOE] = {"qwen2_moe", "qwen2_moe", "Qwen2MoeForCausalLM", "silu"},
    [LP_SYNTH_QWEN3_MOE] = {"qwen3_moe", "qwen3_moe", "Qwen3MoeForCausalLM", "silu"},
    [LP_SYNTH_DEEPSEEK_V2] = {"deepseek_v2", "deepseek_v2", "DeepseekV2ForCausalLM", "silu"},
    [LP_SYNTH_DEEPSEEK_V3] = {"deepseek_v3", "deepseek_v3", "DeepseekV3ForCausalLM", "silu"},
    [LP_SYNTH_GPT_OSS] = {"gpt_oss", "gpt_oss", "GptOssForCausalLM", "silu"},
    [LP_SYNTH_MPT] = {"mpt", "mpt", "MPTForCausalLM", "gelu"},
    [LP_SYNTH_STARCODER2] = {"starcoder2", "starcoder2", "Starcoder2ForCausalLM", "gelu_pytorch_tanh"},
};

static bool has(const lp_synth_spec *spec, unsigned families)
{
    return (FAM(spec->family) & families) != 0;
}

const char *lp_synth_family_name(lp_synth_family family)
{
    return (unsigned)family < LP_SYNTH_FAMILY_COUNT ? FAMILIES[family].name : "invalid";
}

void lp_synth_spec_init(lp_synth_spec *spec, lp_synth_family family)
{
    memset(spec, 0, sizeof *spec);
    spec->family = family;
    spec->vocab = 64;
    spec->hidden = 32;
    spec->n_layers = 2;
    spec->n_heads = 4;
    spec->n_kv_heads = has(spec, GEMMAS | FALCON) ? 1 : has(spec, LAYERNORM | MPT) ? 4 : 2;
    spec->head_dim = 8;
    spec->ffn = 64;
    spec->n_ctx = 256;
    spec->norm_eps = has(spec, GEMMAS | QKV_BIAS | FAM(LP_SYNTH_QWEN3) | QWEN_MOES) ? 1e-6 : 1e-5;
    spec->rope_theta =
        has(spec, FAM(LP_SYNTH_GEMMA3) | QKV_BIAS | FAM(LP_SYNTH_QWEN3) | QWEN_MOES) ? 1e6 : 1e4;
    spec->tied = has(spec, GEMMAS | GPT2 | FALCON_BLOCK | OPT | MPT | SC2);
    if (has(spec, FALCON_BLOCK | MPT)) /* MPT: expansion_ratio 4 */
        spec->ffn = 4 * spec->hidden;
    if (has(spec, FALCON_BLOCK)) /* Falcon-7B: multi-query, parallel; BLOOM: always 4 x hidden */
        spec->ffn = 4 * spec->hidden;
    spec->qkv_bias = has(spec, BLOOM | SC2);
    spec->alibi = has(spec, BLOOM | MPT);
    /* the published defaults' fractions: Pythia's rotary_pct 0.25, Phi-2's 0.4 (here 0.5 of 8
     * dims), GPT-J's rotary_dim 64 of 256 */
    spec->rope_dim = has(spec, NEOX | GPTJ | STABLELM) ? 2 : has(spec, PHI) ? 4 : 0;
    spec->parallel = has(spec, NEOX | FALCON);
    if (has(spec, MOE | QWEN_MOES | DEEPSEEKS | OSS)) {
        spec->n_experts = 4;
        spec->top_k = 2;
    }
    spec->norm_topk_prob = has(spec, OSS); /* the softmax over the chosen logits */
    spec->swiglu_limit = has(spec, OSS) ? 7.0 : 0.0;
    if (has(spec, QWEN_MOES)) {
        spec->expert_ffn = 16;
        spec->shared_ffn = has(spec, FAM(LP_SYNTH_QWEN2_MOE)) ? 48 : 0;
        spec->sparse_step = 1;
    }
    if (has(spec, DEEPSEEKS)) {
        /* heads of 8 nope + 4 rope dims, values 8 wide, one leading dense layer */
        spec->n_kv_heads = spec->n_heads;
        spec->head_dim = 12;
        spec->rope_dim = 4;
        spec->v_head_dim = 8;
        spec->kv_lora = 16;
        spec->q_lora = has(spec, V3) ? 16 : 0;
        spec->expert_ffn = 16;
        spec->n_shared = 1;
        spec->first_dense = 1;
        spec->norm_topk_prob = has(spec, V3);
        spec->n_groups = has(spec, V3) ? 2 : 0;
        spec->topk_groups = has(spec, V3) ? 1 : 0;
        spec->routed_scaling = has(spec, V3) ? 2.5 : 0;
    }
    spec->window = has(spec, FAM(LP_SYNTH_MISTRAL) | POST_NORMS | OSS | SC2) ? 16 : 0;
    spec->sliding_pattern = has(spec, FAM(LP_SYNTH_GEMMA3)) ? 6 : 0;
    spec->local_theta = has(spec, FAM(LP_SYNTH_GEMMA3)) ? 1e4 : 0;
    spec->query_pre_attn_scalar = has(spec, POST_NORMS) ? (double)spec->head_dim : 0;
    if (has(spec, FAM(LP_SYNTH_GEMMA2))) {
        spec->attn_softcap = 50.0;
        spec->final_softcap = 30.0;
    }
    spec->bos_id = 1;
    spec->eos_id = 2;
    spec->dtype = spec->vector_dtype = LP_DTYPE_F32;
    spec->seed = 1;
    spec->scale = 0.02;
}

static bool plain_float(lp_dtype d)
{
    return d == LP_DTYPE_F32 || d == LP_DTYPE_F16 || d == LP_DTYPE_BF16;
}

static lp_status check_shape(const lp_synth_spec *s, lp_error *err)
{
    const char *name = lp_synth_family_name(s->family);
    if (s->vocab <= 0 || s->hidden <= 0 || s->n_heads <= 0 || s->n_kv_heads <= 0 ||
        s->head_dim <= 0 || s->ffn <= 0 || s->n_ctx <= 0)
        return lp_error_set(err, LP_ERR_USAGE,
                            "%s: every size must be positive (vocab %lld, hidden %lld, heads %lld, "
                            "kv heads %lld, head_dim %lld, ffn %lld, n_ctx %lld)",
                            name, (long long)s->vocab, (long long)s->hidden, (long long)s->n_heads,
                            (long long)s->n_kv_heads, (long long)s->head_dim, (long long)s->ffn,
                            (long long)s->n_ctx);
    if (s->n_layers <= 0 || s->n_layers > LP_MAX_LAYERS)
        return lp_error_set(err, LP_ERR_USAGE, "%s: n_layers %lld outside 1..%d", name,
                            (long long)s->n_layers, LP_MAX_LAYERS);
    if (s->n_heads % s->n_kv_heads != 0)
        return lp_error_set(err, LP_ERR_USAGE, "%s: %lld kv heads do not divide %lld heads", name,
                            (long long)s->n_kv_heads, (long long)s->n_heads);
    if (s->rope_dim < 0 || s->rope_dim > s->head_dim || s->rope_dim % 2 != 0)
        return lp_error_set(err, LP_ERR_USAGE, "%s: rope_dim %lld must be even and <= head_dim %lld",
                            name, (long long)s->rope_dim, (long long)s->head_dim);
    return LP_OK;
}

lp_status lp_synth_check_spec(const lp_synth_spec *s, lp_error *err)
{
    if ((unsigned)s->family >= LP_SYNTH_FAMILY_COUNT)
        return lp_error_set(err, LP_ERR_USAGE, "family %d is not one of 0..%d", (int)s->family,
                            LP_SYNTH_FAMILY_COUNT - 1);
    lp_status st = check_shape(s, err);
    if (st != LP_OK)
        return st;
    const char *name = lp_synth_family_name(s->family);
    /* these families derive head_dim from hidden / heads; most have no kv head count */
    if (has(s, HEAD_DIM_DERIVED | PHI3) && s->n_heads * s->head_dim != s->hidden)
        return lp_error_set(err, LP_ERR_USAGE, "%s: needs n_heads x head_dim = hidden (%lld x "
                                               "%lld, %lld)",
                            name, (long long)s->n_heads, (long long)s->head_dim,
                            (long long)s->hidden);
    if (has(s, FALCON) && !s->new_arch && s->n_kv_heads != 1 && s->n_kv_heads != s->n_heads)
        return lp_error_set(err, LP_ERR_USAGE, "falcon: without new_arch, n_kv_heads is 1 "
                                               "(multi_query) or n_heads, not %lld",
                            (long long)s->n_kv_heads);
    if (has(s, BLOOM) && (s->ffn != 4 * s->hidden || !s->qkv_bias || !s->alibi || s->parallel ||
                          s->new_arch))
        return lp_error_set(err, LP_ERR_USAGE, "bloom: needs ffn = 4 x hidden (%lld, %lld), "
                                               "biases, ALiBi and a sequential block",
                            (long long)s->ffn, (long long)s->hidden);
    if (has(s, MPT) && (s->ffn % s->hidden != 0 || !s->tied || s->parallel ||
                        s->new_arch || s->post_norm || s->qkv_clip < 0 || s->logit_scale < 0 ||
                        s->alibi_max < 0))
        return lp_error_set(err, LP_ERR_USAGE, "mpt: needs ffn a multiple of hidden (%lld, %lld) "
                                               "for expansion_ratio, a tied head, a "
                                               "sequential pre-norm block, clip_qkv, logit_scale "
                                               "and alibi_bias_max not negative",
                            (long long)s->ffn, (long long)s->hidden);
    if (s->embed_dim < 0 || (s->embed_dim > 0 && !has(s, OPT)))
        return lp_error_set(err, LP_ERR_USAGE, "%s: embed_dim %lld: only OPT projects its "
                                               "embeddings",
                            name, (long long)s->embed_dim);
    if (has(s, OPT) && !s->tied)
        return lp_error_set(err, LP_ERR_USAGE, "opt: the classifier is the embedding (tied)");
    if (has(s, FALCON) && s->new_arch && !s->parallel)
        return lp_error_set(err, LP_ERR_USAGE, "falcon: new_arch blocks are always parallel");
    if (has(s, MHA_ONLY) && s->n_kv_heads != s->n_heads)
        return lp_error_set(err, LP_ERR_USAGE, "%s: needs n_kv_heads = n_heads (%lld, %lld)",
                            name, (long long)s->n_kv_heads, (long long)s->n_heads);
    if (has(s, MOE | QWEN_MOES | DEEPSEEKS | OSS) &&
        (s->n_experts < 1 || s->top_k < 1 || s->top_k > s->n_experts))
        return lp_error_set(err, LP_ERR_USAGE, "%s: top_k %lld of %lld experts", name,
                            (long long)s->top_k, (long long)s->n_experts);
    if (has(s, QWEN_MOES) && (s->expert_ffn < 0 || s->shared_ffn < 0 || s->sparse_step < 0))
        return lp_error_set(err, LP_ERR_USAGE,
                            "%s: expert_ffn %lld, shared_ffn %lld, sparse_step %lld must not be "
                            "negative",
                            name, (long long)s->expert_ffn, (long long)s->shared_ffn,
                            (long long)s->sparse_step);
    if (has(s, DEEPSEEKS) &&
        (s->kv_lora < 1 || s->v_head_dim < 1 || s->rope_dim < 2 || s->rope_dim >= s->head_dim ||
         s->q_lora < 0 || s->n_shared < 0 || s->first_dense < 0 || s->n_groups < 0 ||
         (s->n_groups > 1 && (s->n_experts % s->n_groups != 0 || s->topk_groups < 1 ||
                              s->topk_groups > s->n_groups ||
                              s->topk_groups * (s->n_experts / s->n_groups) < s->top_k))))
        return lp_error_set(err, LP_ERR_USAGE,
                            "%s: kv_lora %lld, v_head_dim %lld, rope_dim %lld of head_dim %lld, "
                            "%lld groups of which %lld for top_k %lld of %lld experts",
                            name, (long long)s->kv_lora, (long long)s->v_head_dim,
                            (long long)s->rope_dim, (long long)s->head_dim,
                            (long long)s->n_groups, (long long)s->topk_groups,
                            (long long)s->top_k, (long long)s->n_experts);
    if (has(s, FAM(LP_SYNTH_QWEN3_MOE)) && s->shared_ffn > 0)
        return lp_error_set(err, LP_ERR_USAGE, "qwen3_moe: has no shared expert (shared_ffn %lld)",
                            (long long)s->shared_ffn);
    if (!plain_float(s->dtype) || !plain_float(s->vector_dtype))
        return lp_error_set(err, LP_ERR_USAGE, "%s: dtype '%s' / vector dtype '%s': want f32, "
                                               "f16 or bf16",
                            name, lp_dtype_name(s->dtype), lp_dtype_name(s->vector_dtype));
    return LP_OK;
}

/* ---- the tensor table ----------------------------------------------------------------------- */

typedef enum dim {
    D_NONE, D_VOCAB, D_HIDDEN, D_Q, D_KV, D_QKV, D_FFN, D_HEAD, D_EXPERTS, D_POS,
    D_POS_OPT, /* OPT's table: 2 rows before position 0 */
    D_EMBED,   /* the token embedding's width: OPT's word_embed_proj_dim, else hidden */
    D_FFN2,    /* Phi-3's gate | up */
    D_EXPERT_FFN, D_SHARED_FFN, D_ONE,
    D_Q_LORA, D_KV_A, D_KV_LORA, D_KV_B, D_HEADS_V, /* MLA */
    D_HEADS /* one value per query head (gpt-oss's sinks) */
} dim;

/* Where a row stands: before the layers, in each layer, in each expert, query head or kv head of
 * each layer (the index in the name's second %d), after. */
typedef enum scope { FIRST, LAYER, EXPERT, HEAD, KV_HEAD, LAST } scope;

/* When a row is written, beyond its families: always, only with a separate classifier, only in
 * a sequential block, only with the spec's q/k/v biases, only with its q/k norms. */
enum { C_ALWAYS = 0, C_UNTIED = 1, C_SEQUENTIAL = 2, C_QKV_BIAS = 4, C_QK_NORM = 8,
       C_NEW_ARCH = 16, C_OLD_ARCH = 32, /* Falcon's new_decoder_architecture or not */
       C_PRE_NORM = 64, C_PROJ = 128, /* OPT: do_layer_norm_before, word_embed_proj_dim */
       C_LEARNED_POS = 256 /* MPT: a position table when attn_config.alibi is false */ };

typedef enum storage {
    PLAIN,     /* [rows, cols] as the pass computes with it */
    CONV1D,    /* GPT-2's Conv1D: stored [cols, rows] */
    QKV_PARTS, /* GPT-2's c_attn: the q, k and v parts stacked, a matrix stored as Conv1D */
    QKV_GROUPED, /* GPT-NeoX's query_key_value: per kv group [its q heads, k, v], as Linear */
    QKV_CONCAT,  /* Phi-3's qkv_proj: the q, k and v parts stacked, as Linear */
    GATE_UP,     /* Phi-3's gate_up_proj: the gate and up parts stacked, as Linear */
    EXPERTS_STACKED, /* gpt-oss's experts: every expert of the layer in one tensor, matrices
                        [n_experts, in, out], biases [n_experts, out]; gate_up's gate and up
                        outputs interleaved */
} storage;

typedef struct tensor_row {
    scope scope;
    const char *name; /* printf format: the layer, then the expert */
    lp_role role;
    bool is_bias;
    dim rows, cols;
    storage storage;
    unsigned families;
    unsigned when; /* C_* */
} tensor_row;

/* A matrix, a vector (norm weight), a bias, a Conv1D matrix, GPT-2's fused q/k/v. */
#define MAT(sc, name, role, rows, cols, fam) {sc, name, LP_ROLE_##role, false, rows, cols, PLAIN, fam, C_ALWAYS}
#define VEC(sc, name, role, rows, fam) {sc, name, LP_ROLE_##role, false, rows, D_NONE, PLAIN, fam, C_ALWAYS}
#define BIAS(sc, name, role, rows, fam) {sc, name, LP_ROLE_##role, true, rows, D_NONE, PLAIN, fam, C_ALWAYS}
#define CONV(sc, name, role, rows, cols) {sc, name, LP_ROLE_##role, false, rows, cols, CONV1D, GPT2, C_ALWAYS}
#define VEC_IF(sc, name, role, rows, fam, when) {sc, name, LP_ROLE_##role, false, rows, D_NONE, PLAIN, fam, when}
#define BIAS_IF(sc, name, role, rows, fam, when) {sc, name, LP_ROLE_##role, true, rows, D_NONE, PLAIN, fam, when}
#define L_ "model.layers.%d."
#define E_ L_ "block_sparse_moe.experts.%d."
#define QE_ L_ "mlp.experts.%d."
#define NX_ "gpt_neox.layers.%d."
#define J_ "transformer.h.%d."
#define F_ "transformer.h.%d."
#define B_ "transformer.blocks.%d."
#define GROUPED(name, is_bias, cols) {LAYER, NX_ name, LP_ROLE_ATTN_QKV, is_bias, D_QKV, cols, QKV_GROUPED, NEOX, C_ALWAYS}
#define F_QKV(name, is_bias, cols, when) {LAYER, F_ name, LP_ROLE_ATTN_QKV, is_bias, D_QKV, cols, QKV_GROUPED, FALCON_BLOCK, when}
static const tensor_row TENSORS[] = {
    MAT(FIRST, "model.embed_tokens.weight", TOKEN_EMBD, D_VOCAB, D_HIDDEN, DECODER | PHI | STABLELM | SC2),
    VEC(LAYER, L_ "input_layernorm.weight", ATTN_NORM, D_HIDDEN, (DECODER & ~OLMO2) | PHI | STABLELM | SC2),
    BIAS(LAYER, L_ "input_layernorm.bias", ATTN_NORM, D_HIDDEN, PHI | STABLELM | SC2),
    MAT(LAYER, L_ "self_attn.q_proj.weight", ATTN_Q, D_Q, D_HIDDEN, (DECODER & ~PHI3) | PHI | STABLELM | SC2),
    MAT(LAYER, L_ "self_attn.k_proj.weight", ATTN_K, D_KV, D_HIDDEN, (DECODER & ~DEEPSEEKS & ~PHI3) | PHI | STABLELM | SC2),
    MAT(LAYER, L_ "self_attn.v_proj.weight", ATTN_V, D_KV, D_HIDDEN, (DECODER & ~DEEPSEEKS & ~PHI3) | PHI | STABLELM | SC2),
    {LAYER, L_ "self_attn.qkv_proj.weight", LP_ROLE_ATTN_QKV, false, D_QKV, D_HIDDEN, QKV_CONCAT, PHI3, C_ALWAYS},
    BIAS_IF(LAYER, L_ "self_attn.q_proj.bias", ATTN_Q, D_Q, STABLELM | SC2, C_QKV_BIAS),
    BIAS_IF(LAYER, L_ "self_attn.k_proj.bias", ATTN_K, D_KV, STABLELM | SC2, C_QKV_BIAS),
    BIAS_IF(LAYER, L_ "self_attn.v_proj.bias", ATTN_V, D_KV, STABLELM | SC2, C_QKV_BIAS),
    MAT(LAYER, L_ "self_attn.o_proj.weight", ATTN_O, D_HIDDEN, D_Q, (DECODER & ~DEEPSEEKS) | STABLELM | SC2),
    BIAS_IF(LAYER, L_ "self_attn.o_proj.bias", ATTN_O, D_HIDDEN, SC2, C_QKV_BIAS),
    /* DeepSeek's latent attention (q_proj above when there is no q_lora_rank) */
    MAT(LAYER, L_ "self_attn.q_a_proj.weight", ATTN_Q_A, D_Q_LORA, D_HIDDEN, DEEPSEEKS),
    VEC(LAYER, L_ "self_attn.q_a_layernorm.weight", ATTN_Q_A_NORM, D_Q_LORA, DEEPSEEKS),
    MAT(LAYER, L_ "self_attn.q_b_proj.weight", ATTN_Q_B, D_Q, D_Q_LORA, DEEPSEEKS),
    MAT(LAYER, L_ "self_attn.kv_a_proj_with_mqa.weight", ATTN_KV_A, D_KV_A, D_HIDDEN, DEEPSEEKS),
    VEC(LAYER, L_ "self_attn.kv_a_layernorm.weight", ATTN_KV_A_NORM, D_KV_LORA, DEEPSEEKS),
    MAT(LAYER, L_ "self_attn.kv_b_proj.weight", ATTN_KV_B, D_KV_B, D_KV_LORA, DEEPSEEKS),
    MAT(LAYER, L_ "self_attn.o_proj.weight", ATTN_O, D_HIDDEN, D_HEADS_V, DEEPSEEKS),
    VEC_IF(HEAD, L_ "self_attn.q_layernorm.norms.%d.weight", ATTN_Q_NORM, D_HEAD, STABLELM, C_QK_NORM),
    VEC_IF(KV_HEAD, L_ "self_attn.k_layernorm.norms.%d.weight", ATTN_K_NORM, D_HEAD, STABLELM, C_QK_NORM),
    MAT(LAYER, L_ "self_attn.dense.weight", ATTN_O, D_HIDDEN, D_Q, PHI),
    BIAS(LAYER, L_ "self_attn.dense.bias", ATTN_O, D_HIDDEN, PHI),
    VEC(LAYER, L_ "self_attn.q_norm.weight", ATTN_Q_NORM, D_HEAD, QK_NORM),
    VEC(LAYER, L_ "self_attn.k_norm.weight", ATTN_K_NORM, D_HEAD, QK_NORM),
    VEC(LAYER, L_ "self_attn.q_norm.weight", ATTN_Q_NORM, D_Q, OLMO2),
    VEC(LAYER, L_ "self_attn.k_norm.weight", ATTN_K_NORM, D_KV, OLMO2),
    BIAS(LAYER, L_ "self_attn.q_proj.bias", ATTN_Q, D_Q, QKV_BIAS | PHI | OSS),
    BIAS(LAYER, L_ "self_attn.k_proj.bias", ATTN_K, D_KV, QKV_BIAS | PHI | OSS),
    BIAS(LAYER, L_ "self_attn.v_proj.bias", ATTN_V, D_KV, QKV_BIAS | PHI | OSS),
    BIAS(LAYER, L_ "self_attn.o_proj.bias", ATTN_O, D_HIDDEN, OSS),
    VEC(LAYER, L_ "self_attn.sinks", ATTN_SINKS, D_HEADS, OSS),
    MAT(LAYER, L_ "mlp.fc1.weight", FFN_UP, D_FFN, D_HIDDEN, PHI),
    BIAS(LAYER, L_ "mlp.fc1.bias", FFN_UP, D_FFN, PHI),
    MAT(LAYER, L_ "mlp.fc2.weight", FFN_DOWN, D_HIDDEN, D_FFN, PHI),
    BIAS(LAYER, L_ "mlp.fc2.bias", FFN_DOWN, D_HIDDEN, PHI),
    /* one name: the FFN's norm in Llama, the attention's post norm in Gemma 2 and 3 */
    /* StableLM 2's parallel block has no second norm */
    VEC_IF(LAYER, L_ "post_attention_layernorm.weight", FFN_NORM, D_HIDDEN,
           (DECODER & ~POST_NORMS & ~OLMO2) | STABLELM | SC2, C_SEQUENTIAL),
    BIAS_IF(LAYER, L_ "post_attention_layernorm.bias", FFN_NORM, D_HIDDEN, STABLELM | SC2, C_SEQUENTIAL),
    /* StarCoder2's MLP: Linear c_fc and c_proj, biased by use_bias */
    MAT(LAYER, L_ "mlp.c_fc.weight", FFN_UP, D_FFN, D_HIDDEN, SC2),
    BIAS_IF(LAYER, L_ "mlp.c_fc.bias", FFN_UP, D_FFN, SC2, C_QKV_BIAS),
    MAT(LAYER, L_ "mlp.c_proj.weight", FFN_DOWN, D_HIDDEN, D_FFN, SC2),
    BIAS_IF(LAYER, L_ "mlp.c_proj.bias", FFN_DOWN, D_HIDDEN, SC2, C_QKV_BIAS),
    VEC(LAYER, L_ "post_attention_layernorm.weight", ATTN_POST_NORM, D_HIDDEN, POST_NORMS | OLMO2),
    VEC(LAYER, L_ "pre_feedforward_layernorm.weight", FFN_NORM, D_HIDDEN, POST_NORMS),
    VEC(LAYER, L_ "post_feedforward_layernorm.weight", FFN_POST_NORM, D_HIDDEN, POST_NORMS | OLMO2),
    MAT(LAYER, L_ "block_sparse_moe.gate.weight", ROUTER, D_EXPERTS, D_HIDDEN, MOE),
    MAT(LAYER, L_ "mlp.gate_proj.weight", FFN_GATE, D_FFN, D_HIDDEN, (DECODER & ~MOE & ~PHI3 & ~OSS) | STABLELM),
    MAT(LAYER, L_ "mlp.up_proj.weight", FFN_UP, D_FFN, D_HIDDEN, (DECODER & ~MOE & ~PHI3 & ~OSS) | STABLELM),
    {LAYER, L_ "mlp.gate_up_proj.weight", LP_ROLE_FFN_GATE_UP, false, D_FFN2, D_HIDDEN, GATE_UP, PHI3, C_ALWAYS},
    MAT(LAYER, L_ "mlp.down_proj.weight", FFN_DOWN, D_HIDDEN, D_FFN, (DECODER & ~MOE & ~OSS) | STABLELM),
    /* gpt-oss (modeling_gpt_oss.py): a biased router, the experts stacked */
    MAT(LAYER, L_ "mlp.router.weight", ROUTER, D_EXPERTS, D_HIDDEN, OSS),
    BIAS(LAYER, L_ "mlp.router.bias", ROUTER, D_EXPERTS, OSS),
    {LAYER, L_ "mlp.experts.gate_up_proj", LP_ROLE_EXPERT_GATE_UP, false, D_FFN2, D_HIDDEN, EXPERTS_STACKED, OSS, C_ALWAYS},
    {LAYER, L_ "mlp.experts.gate_up_proj_bias", LP_ROLE_EXPERT_GATE_UP, true, D_FFN2, D_NONE, EXPERTS_STACKED, OSS, C_ALWAYS},
    {LAYER, L_ "mlp.experts.down_proj", LP_ROLE_EXPERT_DOWN, false, D_HIDDEN, D_FFN, EXPERTS_STACKED, OSS, C_ALWAYS},
    {LAYER, L_ "mlp.experts.down_proj_bias", LP_ROLE_EXPERT_DOWN, true, D_HIDDEN, D_NONE, EXPERTS_STACKED, OSS, C_ALWAYS},
    MAT(EXPERT, E_ "w1.weight", EXPERT_GATE, D_FFN, D_HIDDEN, MOE),
    MAT(EXPERT, E_ "w2.weight", EXPERT_DOWN, D_HIDDEN, D_FFN, MOE),
    MAT(EXPERT, E_ "w3.weight", EXPERT_UP, D_FFN, D_HIDDEN, MOE),
    /* Qwen MoE and DeepSeek: a routed layer has the router, the experts and the shared expert(s)
     * (Qwen's with its gate); a dense layer (mlp_only_layers, decoder_sparse_step,
     * first_k_dense_replace) the plain MLP */
    MAT(LAYER, L_ "mlp.gate.weight", ROUTER, D_EXPERTS, D_HIDDEN, QWEN_MOES | DEEPSEEKS),
    VEC(LAYER, L_ "mlp.gate.e_score_correction_bias", ROUTER_BIAS, D_EXPERTS, V3),
    MAT(EXPERT, QE_ "gate_proj.weight", EXPERT_GATE, D_EXPERT_FFN, D_HIDDEN, QWEN_MOES | DEEPSEEKS),
    MAT(EXPERT, QE_ "up_proj.weight", EXPERT_UP, D_EXPERT_FFN, D_HIDDEN, QWEN_MOES | DEEPSEEKS),
    MAT(EXPERT, QE_ "down_proj.weight", EXPERT_DOWN, D_HIDDEN, D_EXPERT_FFN, QWEN_MOES | DEEPSEEKS),
    MAT(LAYER, L_ "mlp.shared_expert.gate_proj.weight", SHARED_GATE, D_SHARED_FFN, D_HIDDEN, QWEN_MOES),
    MAT(LAYER, L_ "mlp.shared_expert.up_proj.weight", SHARED_UP, D_SHARED_FFN, D_HIDDEN, QWEN_MOES),
    MAT(LAYER, L_ "mlp.shared_expert.down_proj.weight", SHARED_DOWN, D_HIDDEN, D_SHARED_FFN, QWEN_MOES),
    MAT(LAYER, L_ "mlp.shared_expert_gate.weight", SHARED_EXPERT_GATE, D_ONE, D_HIDDEN, QWEN_MOES),
    MAT(LAYER, L_ "mlp.shared_experts.gate_proj.weight", SHARED_GATE, D_SHARED_FFN, D_HIDDEN, DEEPSEEKS),
    MAT(LAYER, L_ "mlp.shared_experts.up_proj.weight", SHARED_UP, D_SHARED_FFN, D_HIDDEN, DEEPSEEKS),
    MAT(LAYER, L_ "mlp.shared_experts.down_proj.weight", SHARED_DOWN, D_HIDDEN, D_SHARED_FFN, DEEPSEEKS),
    VEC(LAST, "model.norm.weight", OUTPUT_NORM, D_HIDDEN, DECODER | STABLELM | SC2),
    BIAS(LAST, "model.norm.bias", OUTPUT_NORM, D_HIDDEN, STABLELM | SC2),
    VEC(LAST, "model.final_layernorm.weight", OUTPUT_NORM, D_HIDDEN, PHI),
    BIAS(LAST, "model.final_layernorm.bias", OUTPUT_NORM, D_HIDDEN, PHI),
    {LAST, "lm_head.weight", LP_ROLE_LM_HEAD, false, D_VOCAB, D_HIDDEN, PLAIN, DECODER | PHI | GPTJ | STABLELM | FALCON | SC2, C_UNTIED},
    {LAST, "lm_head.bias", LP_ROLE_LM_HEAD, true, D_VOCAB, D_NONE, PLAIN, PHI | GPTJ, C_UNTIED},

    MAT(FIRST, "gpt_neox.embed_in.weight", TOKEN_EMBD, D_VOCAB, D_HIDDEN, NEOX),
    VEC(LAYER, NX_ "input_layernorm.weight", ATTN_NORM, D_HIDDEN, NEOX),
    BIAS(LAYER, NX_ "input_layernorm.bias", ATTN_NORM, D_HIDDEN, NEOX),
    VEC(LAYER, NX_ "post_attention_layernorm.weight", FFN_NORM, D_HIDDEN, NEOX),
    BIAS(LAYER, NX_ "post_attention_layernorm.bias", FFN_NORM, D_HIDDEN, NEOX),
    GROUPED("attention.query_key_value.weight", false, D_HIDDEN),
    GROUPED("attention.query_key_value.bias", true, D_NONE),
    MAT(LAYER, NX_ "attention.dense.weight", ATTN_O, D_HIDDEN, D_Q, NEOX),
    BIAS(LAYER, NX_ "attention.dense.bias", ATTN_O, D_HIDDEN, NEOX),
    MAT(LAYER, NX_ "mlp.dense_h_to_4h.weight", FFN_UP, D_FFN, D_HIDDEN, NEOX),
    BIAS(LAYER, NX_ "mlp.dense_h_to_4h.bias", FFN_UP, D_FFN, NEOX),
    MAT(LAYER, NX_ "mlp.dense_4h_to_h.weight", FFN_DOWN, D_HIDDEN, D_FFN, NEOX),
    BIAS(LAYER, NX_ "mlp.dense_4h_to_h.bias", FFN_DOWN, D_HIDDEN, NEOX),
    VEC(LAST, "gpt_neox.final_layer_norm.weight", OUTPUT_NORM, D_HIDDEN, NEOX),
    BIAS(LAST, "gpt_neox.final_layer_norm.bias", OUTPUT_NORM, D_HIDDEN, NEOX),
    {LAST, "embed_out.weight", LP_ROLE_LM_HEAD, false, D_VOCAB, D_HIDDEN, PLAIN, NEOX, C_UNTIED},

    MAT(FIRST, "transformer.wte.weight", TOKEN_EMBD, D_VOCAB, D_HIDDEN, GPTJ | MPT),
    {FIRST, "transformer.wpe.weight", LP_ROLE_POS_EMBD, false, D_POS, D_HIDDEN, PLAIN, MPT, C_LEARNED_POS},
    VEC(LAYER, J_ "ln_1.weight", ATTN_NORM, D_HIDDEN, GPTJ),
    BIAS(LAYER, J_ "ln_1.bias", ATTN_NORM, D_HIDDEN, GPTJ),
    MAT(LAYER, J_ "attn.q_proj.weight", ATTN_Q, D_Q, D_HIDDEN, GPTJ),
    MAT(LAYER, J_ "attn.k_proj.weight", ATTN_K, D_KV, D_HIDDEN, GPTJ),
    MAT(LAYER, J_ "attn.v_proj.weight", ATTN_V, D_KV, D_HIDDEN, GPTJ),
    MAT(LAYER, J_ "attn.out_proj.weight", ATTN_O, D_HIDDEN, D_Q, GPTJ),
    MAT(LAYER, J_ "mlp.fc_in.weight", FFN_UP, D_FFN, D_HIDDEN, GPTJ),
    BIAS(LAYER, J_ "mlp.fc_in.bias", FFN_UP, D_FFN, GPTJ),
    MAT(LAYER, J_ "mlp.fc_out.weight", FFN_DOWN, D_HIDDEN, D_FFN, GPTJ),
    BIAS(LAYER, J_ "mlp.fc_out.bias", FFN_DOWN, D_HIDDEN, GPTJ),
    VEC(LAST, "transformer.ln_f.weight", OUTPUT_NORM, D_HIDDEN, GPTJ | FALCON_BLOCK),
    BIAS(LAST, "transformer.ln_f.bias", OUTPUT_NORM, D_HIDDEN, GPTJ | FALCON_BLOCK),

#define O_ "model.decoder.layers.%d."
    MAT(FIRST, "model.decoder.embed_tokens.weight", TOKEN_EMBD, D_VOCAB, D_EMBED, OPT),
    MAT(FIRST, "model.decoder.embed_positions.weight", POS_EMBD, D_POS_OPT, D_HIDDEN, OPT),
    {FIRST, "model.decoder.project_in.weight", LP_ROLE_EMBD_PROJ_IN, false, D_HIDDEN, D_EMBED, PLAIN, OPT, C_PROJ},
    {FIRST, "model.decoder.project_out.weight", LP_ROLE_EMBD_PROJ_OUT, false, D_EMBED, D_HIDDEN, PLAIN, OPT, C_PROJ},
    MAT(LAYER, O_ "self_attn.q_proj.weight", ATTN_Q, D_Q, D_HIDDEN, OPT),
    BIAS(LAYER, O_ "self_attn.q_proj.bias", ATTN_Q, D_Q, OPT),
    MAT(LAYER, O_ "self_attn.k_proj.weight", ATTN_K, D_KV, D_HIDDEN, OPT),
    BIAS(LAYER, O_ "self_attn.k_proj.bias", ATTN_K, D_KV, OPT),
    MAT(LAYER, O_ "self_attn.v_proj.weight", ATTN_V, D_KV, D_HIDDEN, OPT),
    BIAS(LAYER, O_ "self_attn.v_proj.bias", ATTN_V, D_KV, OPT),
    MAT(LAYER, O_ "self_attn.out_proj.weight", ATTN_O, D_HIDDEN, D_Q, OPT),
    BIAS(LAYER, O_ "self_attn.out_proj.bias", ATTN_O, D_HIDDEN, OPT),
    VEC(LAYER, O_ "self_attn_layer_norm.weight", ATTN_NORM, D_HIDDEN, OPT),
    BIAS(LAYER, O_ "self_attn_layer_norm.bias", ATTN_NORM, D_HIDDEN, OPT),
    MAT(LAYER, O_ "fc1.weight", FFN_UP, D_FFN, D_HIDDEN, OPT),
    BIAS(LAYER, O_ "fc1.bias", FFN_UP, D_FFN, OPT),
    MAT(LAYER, O_ "fc2.weight", FFN_DOWN, D_HIDDEN, D_FFN, OPT),
    BIAS(LAYER, O_ "fc2.bias", FFN_DOWN, D_HIDDEN, OPT),
    VEC(LAYER, O_ "final_layer_norm.weight", FFN_NORM, D_HIDDEN, OPT),
    BIAS(LAYER, O_ "final_layer_norm.bias", FFN_NORM, D_HIDDEN, OPT),
    VEC_IF(LAST, "model.decoder.final_layer_norm.weight", OUTPUT_NORM, D_HIDDEN, OPT, C_PRE_NORM),
    BIAS_IF(LAST, "model.decoder.final_layer_norm.bias", OUTPUT_NORM, D_HIDDEN, OPT, C_PRE_NORM),
#undef O_

    MAT(FIRST, "transformer.word_embeddings.weight", TOKEN_EMBD, D_VOCAB, D_HIDDEN, FALCON_BLOCK),
    VEC(FIRST, "transformer.word_embeddings_layernorm.weight", EMBD_NORM, D_HIDDEN, BLOOM),
    BIAS(FIRST, "transformer.word_embeddings_layernorm.bias", EMBD_NORM, D_HIDDEN, BLOOM),
    VEC_IF(LAYER, F_ "input_layernorm.weight", ATTN_NORM, D_HIDDEN, FALCON_BLOCK, C_OLD_ARCH),
    BIAS_IF(LAYER, F_ "input_layernorm.bias", ATTN_NORM, D_HIDDEN, FALCON_BLOCK, C_OLD_ARCH),
    VEC_IF(LAYER, F_ "ln_attn.weight", ATTN_NORM, D_HIDDEN, FALCON, C_NEW_ARCH),
    BIAS_IF(LAYER, F_ "ln_attn.bias", ATTN_NORM, D_HIDDEN, FALCON, C_NEW_ARCH),
    VEC_IF(LAYER, F_ "ln_mlp.weight", FFN_NORM, D_HIDDEN, FALCON, C_NEW_ARCH),
    BIAS_IF(LAYER, F_ "ln_mlp.bias", FFN_NORM, D_HIDDEN, FALCON, C_NEW_ARCH),
    F_QKV("self_attention.query_key_value.weight", false, D_HIDDEN, C_ALWAYS),
    F_QKV("self_attention.query_key_value.bias", true, D_NONE, C_QKV_BIAS),
    MAT(LAYER, F_ "self_attention.dense.weight", ATTN_O, D_HIDDEN, D_Q, FALCON_BLOCK),
    BIAS_IF(LAYER, F_ "self_attention.dense.bias", ATTN_O, D_HIDDEN, FALCON_BLOCK, C_QKV_BIAS),
    VEC_IF(LAYER, F_ "post_attention_layernorm.weight", FFN_NORM, D_HIDDEN, FALCON_BLOCK,
           C_SEQUENTIAL | C_OLD_ARCH),
    BIAS_IF(LAYER, F_ "post_attention_layernorm.bias", FFN_NORM, D_HIDDEN, FALCON_BLOCK,
            C_SEQUENTIAL | C_OLD_ARCH),
    MAT(LAYER, F_ "mlp.dense_h_to_4h.weight", FFN_UP, D_FFN, D_HIDDEN, FALCON_BLOCK),
    BIAS_IF(LAYER, F_ "mlp.dense_h_to_4h.bias", FFN_UP, D_FFN, FALCON_BLOCK, C_QKV_BIAS),
    MAT(LAYER, F_ "mlp.dense_4h_to_h.weight", FFN_DOWN, D_HIDDEN, D_FFN, FALCON_BLOCK),
    BIAS_IF(LAYER, F_ "mlp.dense_4h_to_h.bias", FFN_DOWN, D_HIDDEN, FALCON_BLOCK, C_QKV_BIAS),

    /* MPT: biases (norms included) only without no_bias */
    VEC(LAYER, B_ "norm_1.weight", ATTN_NORM, D_HIDDEN, MPT),
    BIAS_IF(LAYER, B_ "norm_1.bias", ATTN_NORM, D_HIDDEN, MPT, C_QKV_BIAS),
    {LAYER, B_ "attn.Wqkv.weight", LP_ROLE_ATTN_QKV, false, D_QKV, D_HIDDEN, QKV_CONCAT, MPT, C_ALWAYS},
    {LAYER, B_ "attn.Wqkv.bias", LP_ROLE_ATTN_QKV, true, D_QKV, D_NONE, QKV_CONCAT, MPT, C_QKV_BIAS},
    VEC_IF(LAYER, B_ "attn.q_ln.weight", ATTN_Q_NORM, D_Q, MPT, C_QK_NORM),
    BIAS_IF(LAYER, B_ "attn.q_ln.bias", ATTN_Q_NORM, D_Q, MPT, C_QK_NORM | C_QKV_BIAS),
    VEC_IF(LAYER, B_ "attn.k_ln.weight", ATTN_K_NORM, D_KV, MPT, C_QK_NORM),
    BIAS_IF(LAYER, B_ "attn.k_ln.bias", ATTN_K_NORM, D_KV, MPT, C_QK_NORM | C_QKV_BIAS),
    MAT(LAYER, B_ "attn.out_proj.weight", ATTN_O, D_HIDDEN, D_Q, MPT),
    BIAS_IF(LAYER, B_ "attn.out_proj.bias", ATTN_O, D_HIDDEN, MPT, C_QKV_BIAS),
    VEC(LAYER, B_ "norm_2.weight", FFN_NORM, D_HIDDEN, MPT),
    BIAS_IF(LAYER, B_ "norm_2.bias", FFN_NORM, D_HIDDEN, MPT, C_QKV_BIAS),
    MAT(LAYER, B_ "ffn.up_proj.weight", FFN_UP, D_FFN, D_HIDDEN, MPT),
    BIAS_IF(LAYER, B_ "ffn.up_proj.bias", FFN_UP, D_FFN, MPT, C_QKV_BIAS),
    MAT(LAYER, B_ "ffn.down_proj.weight", FFN_DOWN, D_HIDDEN, D_FFN, MPT),
    BIAS_IF(LAYER, B_ "ffn.down_proj.bias", FFN_DOWN, D_HIDDEN, MPT, C_QKV_BIAS),
    VEC(LAST, "transformer.norm_f.weight", OUTPUT_NORM, D_HIDDEN, MPT),
    BIAS_IF(LAST, "transformer.norm_f.bias", OUTPUT_NORM, D_HIDDEN, MPT, C_QKV_BIAS),

    MAT(FIRST, "wte.weight", TOKEN_EMBD, D_VOCAB, D_HIDDEN, GPT2),
    MAT(FIRST, "wpe.weight", POS_EMBD, D_POS, D_HIDDEN, GPT2),
    VEC(LAYER, "h.%d.ln_1.weight", ATTN_NORM, D_HIDDEN, GPT2),
    BIAS(LAYER, "h.%d.ln_1.bias", ATTN_NORM, D_HIDDEN, GPT2),
    {LAYER, "h.%d.attn.c_attn.weight", LP_ROLE_ATTN_QKV, false, D_QKV, D_HIDDEN, QKV_PARTS, GPT2, false},
    {LAYER, "h.%d.attn.c_attn.bias", LP_ROLE_ATTN_QKV, true, D_QKV, D_NONE, QKV_PARTS, GPT2, false},
    CONV(LAYER, "h.%d.attn.c_proj.weight", ATTN_O, D_HIDDEN, D_Q),
    BIAS(LAYER, "h.%d.attn.c_proj.bias", ATTN_O, D_HIDDEN, GPT2),
    VEC(LAYER, "h.%d.ln_2.weight", FFN_NORM, D_HIDDEN, GPT2),
    BIAS(LAYER, "h.%d.ln_2.bias", FFN_NORM, D_HIDDEN, GPT2),
    CONV(LAYER, "h.%d.mlp.c_fc.weight", FFN_UP, D_FFN, D_HIDDEN),
    BIAS(LAYER, "h.%d.mlp.c_fc.bias", FFN_UP, D_FFN, GPT2),
    CONV(LAYER, "h.%d.mlp.c_proj.weight", FFN_DOWN, D_HIDDEN, D_FFN),
    BIAS(LAYER, "h.%d.mlp.c_proj.bias", FFN_DOWN, D_HIDDEN, GPT2),
    VEC(LAST, "ln_f.weight", OUTPUT_NORM, D_HIDDEN, GPT2),
    BIAS(LAST, "ln_f.bias", OUTPUT_NORM, D_HIDDEN, GPT2),
};
#undef MAT
#undef VEC
#undef BIAS
#undef CONV
#undef VEC_IF
#undef BIAS_IF
#undef L_
#undef E_
#undef QE_
#undef NX_
#undef J_
#undef F_
#undef B_
#undef GROUPED
#undef F_QKV
#define N_TENSORS (sizeof TENSORS / sizeof TENSORS[0])

static int64_t dim_size(const lp_synth_spec *s, dim d)
{
    switch (d) {
    case D_VOCAB: return s->vocab;
    case D_HIDDEN: return s->hidden;
    case D_Q: return s->n_heads * s->head_dim;
    case D_KV: return s->n_kv_heads * s->head_dim;
    case D_QKV: return (s->n_heads + 2 * s->n_kv_heads) * s->head_dim;
    case D_FFN: return s->ffn;
    case D_HEAD: return s->head_dim;
    case D_EXPERTS: return s->n_experts;
    case D_POS: return s->n_ctx;
    case D_POS_OPT: return s->n_ctx + 2;
    case D_EMBED: return s->embed_dim > 0 ? s->embed_dim : s->hidden;
    case D_FFN2: return 2 * s->ffn;
    case D_EXPERT_FFN: return s->expert_ffn > 0 ? s->expert_ffn : s->ffn;
    case D_SHARED_FFN:
        return s->shared_ffn > 0 ? s->shared_ffn
                                 : s->n_shared * (s->expert_ffn > 0 ? s->expert_ffn : s->ffn);
    case D_ONE: return 1;
    case D_Q_LORA: return s->q_lora;
    case D_KV_A: return s->kv_lora + s->rope_dim;
    case D_KV_LORA: return s->kv_lora;
    case D_KV_B: return s->n_heads * (s->head_dim - s->rope_dim + s->v_head_dim);
    case D_HEADS_V: return s->n_heads * s->v_head_dim;
    case D_HEADS: return s->n_heads;
    default: return 0;
    }
}

/* ---- filling and storing one tensor ----------------------------------------------------------- */

typedef struct writer {
    const lp_synth_spec *spec;
    lp_st_writer *w;        /* NULL: nothing stored, every fill kept in parts instead */
    lp_synth_parts *parts;
    lp_synth_rng rng; /* the random fill's stream */
} writer;

static bool is_norm(lp_role role)
{
    return role == LP_ROLE_ATTN_NORM || role == LP_ROLE_FFN_NORM || role == LP_ROLE_ATTN_POST_NORM ||
           role == LP_ROLE_FFN_POST_NORM || role == LP_ROLE_ATTN_Q_NORM ||
           role == LP_ROLE_ATTN_K_NORM || role == LP_ROLE_OUTPUT_NORM || role == LP_ROLE_EMBD_NORM ||
           role == LP_ROLE_ATTN_Q_A_NORM || role == LP_ROLE_ATTN_KV_A_NORM;
}

static lp_status random_fill(void *ctx, const lp_synth_tensor *t, float *data, lp_error *err)
{
    writer *wr = ctx;
    (void)err;
    int64_t n = t->rows * (t->cols > 0 ? t->cols : 1);
    if (is_norm(t->role)) {
        float identity = t->is_bias || has(wr->spec, NORM_PLUS_ONE) ? 0.0f : 1.0f;
        for (int64_t i = 0; i < n; i++)
            data[i] = identity;
        return LP_OK;
    }
    for (int64_t i = 0; i < n; i++)
        data[i] = (float)(wr->spec->scale * (2.0 * lp_synth_rng_uniform(&wr->rng) - 1.0));
    return LP_OK;
}

/* Keep a copy of what the fill gave for t. */
static lp_status keep_part(lp_synth_parts *parts, const lp_synth_tensor *t, const float *data,
                           lp_error *err)
{
    size_t n = (size_t)(t->rows * (t->cols > 0 ? t->cols : 1));
    if (parts->n == parts->cap) {
        size_t cap = parts->cap ? parts->cap * 2 : 64;
        lp_synth_part *grown = realloc(parts->items, cap * sizeof *grown);
        if (!grown)
            return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", t->name);
        parts->items = grown;
        parts->cap = cap;
    }
    lp_synth_part *p = &parts->items[parts->n];
    p->data = malloc((n ? n : 1) * sizeof *p->data);
    if (!p->data)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", t->name);
    memcpy(p->data, data, n * sizeof *p->data);
    p->t = *t;
    p->t.name = NULL; /* the caller's buffer; the GGUF form names tensors its own way */
    parts->n++;
    return LP_OK;
}

static lp_status fill(writer *wr, const lp_synth_tensor *t, float *data, lp_error *err)
{
    const lp_synth_spec *s = wr->spec;
    lp_status st = s->fill ? s->fill(s->fill_ctx, t, data, err) : random_fill(wr, t, data, err);
    return st == LP_OK && wr->parts ? keep_part(wr->parts, t, data, err) : st;
}

/* GPT-2's c_attn: the q, k and v parts asked for one by one, stacked [q; k; v]. */
static lp_status fill_qkv_parts(writer *wr, const lp_synth_tensor *t, float *data, lp_error *err)
{
    static const lp_role parts[3] = {LP_ROLE_ATTN_Q, LP_ROLE_ATTN_K, LP_ROLE_ATTN_V};
    int64_t q = dim_size(wr->spec, D_Q), kv = dim_size(wr->spec, D_KV);
    int64_t width = t->cols > 0 ? t->cols : 1, row0 = 0;
    for (int i = 0; i < 3; i++) {
        lp_synth_tensor part = *t;
        part.role = parts[i];
        part.rows = i == 0 ? q : kv;
        lp_status st = fill(wr, &part, data + row0 * width, err);
        if (st != LP_OK)
            return st;
        row0 += part.rows;
    }
    return LP_OK;
}

/* GPT-NeoX's query_key_value: the q, k and v parts asked for one by one, then laid out per kv
 * group g as [the q rows of g's heads, k_g, v_g] (one head per group: [q_h, k_h, v_h]). */
static lp_status fill_qkv_grouped(writer *wr, const lp_synth_tensor *t, float *data,
                                  lp_error *err)
{
    const lp_synth_spec *s = wr->spec;
    int64_t width = t->cols > 0 ? t->cols : 1, hd = s->head_dim, G = s->n_kv_heads;
    int64_t per = s->n_heads / G, n = t->rows * width;
    float *parts = malloc((size_t)n * sizeof *parts);
    if (!parts)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", t->name);
    memset(parts, 0, (size_t)n * sizeof *parts);
    lp_status st = fill_qkv_parts(wr, t, parts, err);
    const float *q = parts, *k = q + s->n_heads * hd * width, *v = k + G * hd * width;
    size_t block = (size_t)(hd * width) * sizeof *data;
    float *dst = data;
    for (int64_t g = 0; st == LP_OK && g < G; g++) {
        memcpy(dst, q + g * per * hd * width, (size_t)per * block);
        dst += per * hd * width;
        memcpy(dst, k + g * hd * width, block);
        dst += hd * width;
        memcpy(dst, v + g * hd * width, block);
        dst += hd * width;
    }
    free(parts);
    return st;
}

/* Phi-3's gate_up_proj: the gate, then the up part, asked for one by one. */
static lp_status fill_gate_up(writer *wr, const lp_synth_tensor *t, float *data, lp_error *err)
{
    lp_synth_tensor part = *t;
    part.rows = t->rows / 2;
    part.role = LP_ROLE_FFN_GATE;
    lp_status st = fill(wr, &part, data, err);
    part.role = LP_ROLE_FFN_UP;
    return st != LP_OK ? st : fill(wr, &part, data + part.rows * t->cols, err);
}

/* [rows, cols] -> [cols, rows] in place through a copy; false when out of memory. */
static bool transpose(float *data, int64_t rows, int64_t cols)
{
    float *copy = malloc((size_t)(rows * cols) * sizeof *copy);
    if (!copy)
        return false;
    memcpy(copy, data, (size_t)(rows * cols) * sizeof *copy);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            data[c * rows + r] = copy[r * cols + c];
    free(copy);
    return true;
}

static lp_status store(writer *wr, const tensor_row *row, const lp_synth_tensor *t, float *data,
                       lp_error *err)
{
    if (!wr->w)
        return LP_OK;
    bool matrix = t->cols > 0;
    int64_t shape[2] = {t->rows, t->cols};
    if (matrix && (row->storage == CONV1D || row->storage == QKV_PARTS)) { /* stored [in, out] */
        if (!transpose(data, t->rows, t->cols))
            return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", t->name);
        shape[0] = t->cols;
        shape[1] = t->rows;
    }
    const lp_synth_spec *s = wr->spec;
    return lp_st_writer_add_f32_as(wr->w, t->name, matrix ? s->dtype : s->vector_dtype,
                                   matrix ? 2 : 1, shape, data, err);
}

/* Expert e's part of a stacked row into part ([rows, max(cols, 1)] as the pass computes): asked
 * for by role and expert, gate_up as its gate, then its up part. */
static lp_status fill_expert_part(writer *wr, const tensor_row *row, const char *name, int layer,
                                  int e, int64_t rows, int64_t cols, float *part, lp_error *err)
{
    bool fused = row->role == LP_ROLE_EXPERT_GATE_UP;
    int64_t part_rows = fused ? rows / 2 : rows;
    lp_synth_tensor t = {name, fused ? LP_ROLE_EXPERT_GATE : row->role, layer, e, row->is_bias,
                         part_rows, cols};
    lp_status st = fill(wr, &t, part, err);
    if (st != LP_OK || !fused)
        return st;
    t.role = LP_ROLE_EXPERT_UP;
    return fill(wr, &t, part + part_rows * (cols > 0 ? cols : 1), err);
}

/* gpt-oss's experts, all of a layer in one tensor: expert e's [rows, cols] stored at [e] as
 * [cols, rows] (transformers computes x @ W), a bias as [rows]; gate_up's output r is gate r / 2
 * for even r, up r / 2 for odd (modeling_gpt_oss.py: gate_up[..., ::2], gate_up[..., 1::2]). */
static lp_status write_stacked_experts(writer *wr, const tensor_row *row, int layer,
                                       lp_error *err)
{
    const lp_synth_spec *s = wr->spec;
    char name[160];
    snprintf(name, sizeof name, row->name, layer);
    int64_t E = s->n_experts, rows = dim_size(s, row->rows), cols = dim_size(s, row->cols);
    int64_t width = cols > 0 ? cols : 1, per = rows * width;
    bool fused = row->role == LP_ROLE_EXPERT_GATE_UP;
    float *all = calloc((size_t)(E * per), sizeof *all), *part = malloc((size_t)per * sizeof *part);
    lp_status st = all && part ? LP_OK : lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
    for (int e = 0; st == LP_OK && e < E; e++) {
        memset(part, 0, (size_t)per * sizeof *part);
        if ((st = fill_expert_part(wr, row, name, layer, e, rows, cols, part, err)) != LP_OK)
            break;
        float *dst = all + e * per;
        for (int64_t r = 0; r < rows; r++) {
            int64_t src_row = fused ? (r % 2 == 0 ? r / 2 : rows / 2 + r / 2) : r;
            for (int64_t c = 0; c < width; c++)
                dst[c * rows + r] = part[src_row * width + c];
        }
    }
    int64_t shape[3] = {E, cols > 0 ? cols : rows, rows};
    if (st == LP_OK && wr->w)
        st = lp_st_writer_add_f32_as(wr->w, name, cols > 0 ? s->dtype : s->vector_dtype,
                                     cols > 0 ? 3 : 2, shape, all, err);
    free(all);
    free(part);
    return st;
}

static lp_status write_row(writer *wr, const tensor_row *row, int layer, int expert, lp_error *err)
{
    if (row->storage == EXPERTS_STACKED)
        return write_stacked_experts(wr, row, layer, err);
    char name[160];
    snprintf(name, sizeof name, row->name, layer, expert);
    lp_synth_tensor t = {name, row->role, layer, expert, row->is_bias,
                         dim_size(wr->spec, row->rows), dim_size(wr->spec, row->cols)};
    uint64_t n;
    if (!lp_mul_u64((uint64_t)t.rows, (uint64_t)(t.cols > 0 ? t.cols : 1), &n) ||
        n > SIZE_MAX / sizeof(float))
        return lp_error_set(err, LP_ERR_RANGE, "%s: [%lld, %lld] is too large", name,
                            (long long)t.rows, (long long)t.cols);
    float *data = calloc((size_t)(n ? n : 1), sizeof *data);
    if (!data)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for %llu values", name,
                            (unsigned long long)n);
    lp_status st = row->storage == QKV_PARTS     ? fill_qkv_parts(wr, &t, data, err)
                   : row->storage == QKV_GROUPED ? fill_qkv_grouped(wr, &t, data, err)
                   : row->storage == QKV_CONCAT  ? fill_qkv_parts(wr, &t, data, err)
                   : row->storage == GATE_UP     ? fill_gate_up(wr, &t, data, err)
                                                 : fill(wr, &t, data, err);
    if (st == LP_OK)
        st = store(wr, row, &t, data, err);
    free(data);
    return st;
}

/* Whether the spec asks for a row with these conditions. */
static bool row_wanted(const lp_synth_spec *s, unsigned when)
{
    return !((when & C_UNTIED) && s->tied) && !((when & C_SEQUENTIAL) && s->parallel) &&
           !((when & C_QKV_BIAS) && !s->qkv_bias) && !((when & C_QK_NORM) && !s->qk_norm) &&
           !((when & C_NEW_ARCH) && !s->new_arch) && !((when & C_OLD_ARCH) && s->new_arch) &&
           !((when & C_PRE_NORM) && s->post_norm) && !((when & C_LEARNED_POS) && s->alibi) &&
           !((when & C_PROJ) && !(s->embed_dim > 0 && s->embed_dim != s->hidden));
}

bool lp_synth_layer_routed(const lp_synth_spec *spec, int layer)
{
    if (has(spec, MOE | OSS))
        return true;
    if (has(spec, DEEPSEEKS))
        return layer >= spec->first_dense;
    if (!has(spec, QWEN_MOES) || layer < 0 || layer >= LP_MAX_LAYERS || spec->dense_layer[layer])
        return false;
    int64_t step = spec->sparse_step > 0 ? spec->sparse_step : 1;
    return (layer + 1) % step == 0;
}

/* Whether a layer row of Qwen MoE or DeepSeek belongs in this layer: a routed layer has no
 * dense MLP, a dense one no router or shared expert; a shared expert needs a width; DeepSeek's
 * q is q_proj or q_a/q_b by q_lora. */
static bool row_in_layer(const lp_synth_spec *s, const tensor_row *row, int layer)
{
    if (row->scope != LAYER || !has(s, QWEN_MOES | DEEPSEEKS))
        return true;
    bool routed = lp_synth_layer_routed(s, layer);
    bool shared = routed && dim_size(s, D_SHARED_FFN) > 0;
    switch (row->role) {
    case LP_ROLE_ATTN_Q: return s->q_lora == 0;
    case LP_ROLE_ATTN_Q_A:
    case LP_ROLE_ATTN_Q_A_NORM:
    case LP_ROLE_ATTN_Q_B: return s->q_lora > 0;
    case LP_ROLE_FFN_GATE:
    case LP_ROLE_FFN_UP:
    case LP_ROLE_FFN_DOWN: return !routed;
    case LP_ROLE_ROUTER:
    case LP_ROLE_ROUTER_BIAS: return routed;
    case LP_ROLE_SHARED_GATE:
    case LP_ROLE_SHARED_UP:
    case LP_ROLE_SHARED_DOWN:
    case LP_ROLE_SHARED_EXPERT_GATE: return shared;
    default: return true;
    }
}

/* The rows of one scope the family has, in table order. */
static lp_status write_scope(writer *wr, scope sc, int layer, int expert, lp_error *err)
{
    for (size_t i = 0; i < N_TENSORS; i++) {
        const tensor_row *row = &TENSORS[i];
        if (row->scope != sc || !has(wr->spec, row->families) || !row_wanted(wr->spec, row->when) ||
            !row_in_layer(wr->spec, row, layer))
            continue;
        lp_status st = write_row(wr, row, layer, expert, err);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

/* Every row of the table the spec has, in file order, stored in wr's writer or kept. */
static lp_status walk_tensors(writer *wr, lp_error *err)
{
    const lp_synth_spec *spec = wr->spec;
    lp_status st = write_scope(wr, FIRST, -1, -1, err);
    for (int l = 0; l < spec->n_layers && st == LP_OK; l++) {
        st = write_scope(wr, LAYER, l, -1, err);
        for (int e = 0; lp_synth_layer_routed(spec, l) && e < spec->n_experts && st == LP_OK; e++)
            st = write_scope(wr, EXPERT, l, e, err);
        for (int h = 0; h < spec->n_heads && st == LP_OK; h++)
            st = write_scope(wr, HEAD, l, h, err);
        for (int h = 0; h < spec->n_kv_heads && st == LP_OK; h++)
            st = write_scope(wr, KV_HEAD, l, h, err);
    }
    return st == LP_OK ? write_scope(wr, LAST, -1, -1, err) : st;
}

lp_status lp_synth_collect_parts(const lp_synth_spec *spec, lp_synth_parts *parts, lp_error *err)
{
    memset(parts, 0, sizeof *parts);
    writer wr = {spec, NULL, parts, {spec->seed}};
    lp_status st = walk_tensors(&wr, err);
    if (st != LP_OK)
        lp_synth_parts_free(parts);
    return st;
}

void lp_synth_parts_free(lp_synth_parts *parts)
{
    for (size_t i = 0; i < parts->n; i++)
        free(parts->items[i].data);
    free(parts->items);
    memset(parts, 0, sizeof *parts);
}

lp_status lp_synth_add_tensors(const lp_synth_spec *spec, lp_st_writer *w, lp_error *err)
{
    writer wr = {spec, w, NULL, {spec->seed}};
    lp_status st = walk_tensors(&wr, err);
    if (st == LP_OK)
        st = lp_st_writer_set_metadata(w, "format", "pt", err);
    return st;
}

/* ---- the key table ------------------------------------------------------------------------------ */

typedef enum key_kind {
    K_INT,  /* an int64_t field of the spec */
    K_REAL, /* a double field */
    K_BOOL, /* a bool field */
    K_JSON, /* a constant, as JSON text */
    K_ARCHITECTURES,
    K_MODEL_TYPE,
    K_ACT,
    K_TORCH_DTYPE,
    K_PARTIAL_ROTARY, /* rope_dim / head_dim; left out when every dim rotates */
    K_ROTARY_FRACTION, /* rope_dim / head_dim, always (the family's default is not 1) */
    K_ROTARY_DIM,     /* rope_dim, or head_dim when every dim rotates (GPT-J) */
    K_FALCON_KV,      /* num_kv_heads, only with the new decoder architecture */
    K_MULTI_QUERY,    /* Falcon's multi_query: one kv head in the old architecture */
    K_FFN_UNLESS_4X,  /* ffn_hidden_size, left out when it is FalconConfig's 4 x hidden */
    K_EMBED_DIM,      /* OPT's word_embed_proj_dim: embed_dim, or hidden */
    K_PRE_NORM,       /* OPT's do_layer_norm_before: not post_norm */
    K_ORIG_CTX,       /* Phi-3's original_max_position_embeddings: orig_ctx, or n_ctx */
    K_LONGROPE,       /* Phi-3's rope_scaling: longrope with its factors, or null */
    K_MLP_ONLY,       /* the dense_layer list */
    K_EXPERT_FFN,     /* expert_ffn, else ffn */
    K_SPARSE_STEP,    /* sparse_step, else 1 */
    K_Q_LORA,         /* q_lora, null when 0 */
    K_NOPE,           /* head_dim - rope_dim */
    K_TOPK_METHOD,    /* DeepSeek's, from the family and the groups */
    K_SCORING,        /* sigmoid for V3, softmax for V2 */
    K_SCALING,        /* routed_scaling, else 1 */
    K_YARN,           /* DeepSeek's rope_scaling object; left out without a yarn factor */
    K_OSS_YARN,       /* gpt-oss's rope_scaling (yarn, truncate false); left out without one */
    K_LAYER_TYPES,    /* gpt-oss's layer_types: even layers slide when there is a window */
    K_EXPANSION,      /* MPT's expansion_ratio: ffn / hidden */
    K_NO_BIAS,        /* MPT's no_bias: not qkv_bias */
    K_MPT_ATTN,       /* MPT's attn_config object */
    K_LOGIT_SCALE,    /* MPT's logit_scale, null when 0 */
    K_WINDOW_OR_NULL, /* StarCoder2's sliding_window: window, null when 0 */
} key_kind;

typedef struct config_key {
    const char *key;  /* NULL: json is an object of several keys */
    key_kind kind;
    size_t offset;    /* K_INT, K_REAL, K_BOOL */
    const char *json; /* K_JSON */
    unsigned families;
} config_key;

/* A spec field, a constant every model of the families carries (CONSTS: several, as one JSON
 * object whose keys go in in its order), a value derived from the spec. */
#define FIELD(key, kind, field, fam) {key, kind, offsetof(lp_synth_spec, field), NULL, fam}
#define CONST(key, json, fam) {key, K_JSON, 0, json, fam}
#define CONSTS(json, fam) {NULL, K_JSON, 0, json, fam}
#define DERIVED(key, kind, fam) {key, kind, 0, NULL, fam}
static const config_key KEYS[] = {
    DERIVED("architectures", K_ARCHITECTURES, ALL),
    DERIVED("model_type", K_MODEL_TYPE, ALL),
    FIELD("vocab_size", K_INT, vocab, ALL),
    FIELD("hidden_size", K_INT, hidden, HF_SIZES),
    FIELD("intermediate_size", K_INT, ffn, HF_SIZES),
    FIELD("num_hidden_layers", K_INT, n_layers, HF_SIZES),
    FIELD("num_attention_heads", K_INT, n_heads, HF_SIZES),
    FIELD("num_key_value_heads", K_INT, n_kv_heads, DECODER | PHI | STABLELM | SC2),
    FIELD("head_dim", K_INT, head_dim, DECODER & ~OLMO2 & ~PHI3),
    DERIVED("hidden_act", K_ACT, HF_SIZES),
    FIELD("max_position_embeddings", K_INT, n_ctx, HF_SIZES),
    FIELD("rms_norm_eps", K_REAL, norm_eps, DECODER),
    FIELD("layer_norm_eps", K_REAL, norm_eps, NEOX | PHI | STABLELM),
    FIELD("rope_theta", K_REAL, rope_theta, DECODER | PHI | STABLELM | SC2),
    /* StarCoder2: Starcoder2Config's names */
    FIELD("norm_epsilon", K_REAL, norm_eps, SC2),
    FIELD("use_bias", K_BOOL, qkv_bias, SC2),
    DERIVED("sliding_window", K_WINDOW_OR_NULL, SC2),
    CONSTS("{\"rope_scaling\": null, \"attention_dropout\": 0.0, \"residual_dropout\": 0.0, "
           "\"embedding_dropout\": 0.0, \"initializer_range\": 0.02, \"use_cache\": true}", SC2),
    FIELD("rotary_emb_base", K_REAL, rope_theta, NEOX),
    DERIVED("rotary_pct", K_ROTARY_FRACTION, NEOX),
    FIELD("use_parallel_residual", K_BOOL, parallel, NEOX | STABLELM),
    FIELD("use_qkv_bias", K_BOOL, qkv_bias, STABLELM),
    FIELD("qk_layernorm", K_BOOL, qk_norm, STABLELM),
    CONSTS("{\"rope_scaling\": null, \"attention_bias\": false, \"attention_dropout\": 0.0, "
           "\"mlp_bias\": false}", DECODER),
    CONSTS("{\"rope_scaling\": null, \"attention_bias\": true, \"attention_dropout\": 0.0, "
           "\"hidden_dropout\": 0.0, \"classifier_dropout\": 0.1}", NEOX),
    CONSTS("{\"qk_layernorm\": false, \"rope_scaling\": null, \"resid_pdrop\": 0.1, "
           "\"embd_pdrop\": 0.0, \"attention_dropout\": 0.0}", PHI),
    FIELD("tie_word_embeddings", K_BOOL, tied, ALL),
    FIELD("bos_token_id", K_INT, bos_id, ALL & ~GPT2),
    FIELD("eos_token_id", K_INT, eos_id, ALL & ~GPT2),
    CONSTS("{\"pad_token_id\": null, \"initializer_range\": 0.02, \"pretraining_tp\": 1, "
           "\"use_cache\": true}", DECODER),
    CONSTS("{\"initializer_range\": 0.02, \"use_cache\": true}", NEOX | PHI | GPTJ | STABLELM),
    CONSTS("{\"rope_scaling\": null, \"attention_dropout\": 0.0, \"hidden_dropout\": 0.0}",
           STABLELM),
    DERIVED("torch_dtype", K_TORCH_DTYPE, ALL),
    DERIVED("partial_rotary_factor", K_PARTIAL_ROTARY, DECODER),
    DERIVED("partial_rotary_factor", K_ROTARY_FRACTION, PHI | STABLELM),
    DERIVED("original_max_position_embeddings", K_ORIG_CTX, PHI3),
    DERIVED("rope_scaling", K_LONGROPE, PHI3),
    CONST("sliding_window", "null", PHI3),
    FIELD("sliding_window", K_INT, window, FAM(LP_SYNTH_MISTRAL) | POST_NORMS),
    /* Qwen2.5's configs carry a window that use_sliding_window turns off */
    CONST("use_sliding_window", "false", QKV_BIAS),
    CONST("sliding_window", "4096", QKV_BIAS),
    FIELD("num_local_experts", K_INT, n_experts, MOE | OSS),
    FIELD("num_experts_per_tok", K_INT, top_k, MOE | OSS),
    FIELD("num_experts", K_INT, n_experts, QWEN_MOES),
    FIELD("num_experts_per_tok", K_INT, top_k, QWEN_MOES),
    DERIVED("moe_intermediate_size", K_EXPERT_FFN, QWEN_MOES),
    FIELD("shared_expert_intermediate_size", K_INT, shared_ffn, FAM(LP_SYNTH_QWEN2_MOE)),
    DERIVED("decoder_sparse_step", K_SPARSE_STEP, QWEN_MOES),
    DERIVED("mlp_only_layers", K_MLP_ONLY, QWEN_MOES),
    FIELD("norm_topk_prob", K_BOOL, norm_topk_prob, QWEN_MOES),
    CONSTS("{\"output_router_logits\": false, \"router_aux_loss_coef\": 0.001}", QWEN_MOES),
    FIELD("n_routed_experts", K_INT, n_experts, DEEPSEEKS),
    FIELD("num_experts_per_tok", K_INT, top_k, DEEPSEEKS),
    DERIVED("moe_intermediate_size", K_EXPERT_FFN, DEEPSEEKS),
    FIELD("n_shared_experts", K_INT, n_shared, DEEPSEEKS),
    FIELD("first_k_dense_replace", K_INT, first_dense, DEEPSEEKS),
    CONST("moe_layer_freq", "1", DEEPSEEKS),
    FIELD("norm_topk_prob", K_BOOL, norm_topk_prob, DEEPSEEKS),
    DERIVED("routed_scaling_factor", K_SCALING, DEEPSEEKS),
    DERIVED("topk_method", K_TOPK_METHOD, DEEPSEEKS),
    DERIVED("scoring_func", K_SCORING, DEEPSEEKS),
    FIELD("n_group", K_INT, n_groups, DEEPSEEKS),
    FIELD("topk_group", K_INT, topk_groups, DEEPSEEKS),
    DERIVED("q_lora_rank", K_Q_LORA, DEEPSEEKS),
    FIELD("kv_lora_rank", K_INT, kv_lora, DEEPSEEKS),
    FIELD("qk_rope_head_dim", K_INT, rope_dim, DEEPSEEKS),
    DERIVED("qk_nope_head_dim", K_NOPE, DEEPSEEKS),
    FIELD("v_head_dim", K_INT, v_head_dim, DEEPSEEKS),
    DERIVED("rope_scaling", K_YARN, DEEPSEEKS),
    /* gpt-oss's config.json as published: both top-k keys, the window and the layer kinds */
    FIELD("experts_per_token", K_INT, top_k, OSS),
    FIELD("sliding_window", K_INT, window, OSS),
    DERIVED("layer_types", K_LAYER_TYPES, OSS),
    DERIVED("rope_scaling", K_OSS_YARN, OSS),
    FIELD("swiglu_limit", K_REAL, swiglu_limit, OSS),
    CONSTS("{\"attention_bias\": true, \"output_router_logits\": false, "
           "\"router_aux_loss_coef\": 0.9}", OSS),
    CONST("sliding_window", "null", MOE),
    FIELD("query_pre_attn_scalar", K_REAL, query_pre_attn_scalar, POST_NORMS),
    FIELD("sliding_window_pattern", K_INT, sliding_pattern, FAM(LP_SYNTH_GEMMA3)),
    FIELD("rope_local_base_freq", K_REAL, local_theta, FAM(LP_SYNTH_GEMMA3)),
    FIELD("attn_logit_softcapping", K_REAL, attn_softcap, FAM(LP_SYNTH_GEMMA2)),
    FIELD("final_logit_softcapping", K_REAL, final_softcap, FAM(LP_SYNTH_GEMMA2)),
    CONST("attn_logit_softcapping", "null", FAM(LP_SYNTH_GEMMA3)),
    CONST("final_logit_softcapping", "null", FAM(LP_SYNTH_GEMMA3)),
    CONST("hidden_activation", "\"gelu_pytorch_tanh\"", GEMMAS),
    /* GPT-2 names the same sizes its own way */
    FIELD("n_embd", K_INT, hidden, GPT2), FIELD("n_layer", K_INT, n_layers, GPT2),
    FIELD("n_head", K_INT, n_heads, GPT2), FIELD("n_inner", K_INT, ffn, GPT2),
    FIELD("n_positions", K_INT, n_ctx, GPT2), FIELD("n_ctx", K_INT, n_ctx, GPT2),
    DERIVED("activation_function", K_ACT, GPT2),
    FIELD("layer_norm_epsilon", K_REAL, norm_eps, GPT2),
    /* GPT-J: GPT-2's key names with RoPE */
    FIELD("n_embd", K_INT, hidden, GPTJ), FIELD("n_layer", K_INT, n_layers, GPTJ),
    FIELD("n_head", K_INT, n_heads, GPTJ), FIELD("n_inner", K_INT, ffn, GPTJ),
    FIELD("n_positions", K_INT, n_ctx, GPTJ), DERIVED("rotary_dim", K_ROTARY_DIM, GPTJ),
    DERIVED("activation_function", K_ACT, GPTJ),
    FIELD("layer_norm_epsilon", K_REAL, norm_eps, GPTJ),
    CONSTS("{\"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0}", GPTJ),
    /* Falcon: FalconConfig's names; Falcon-7B's config.json leaves out num_kv_heads,
     * ffn_hidden_size and activation, as here */
    FIELD("hidden_size", K_INT, hidden, FALCON), FIELD("num_hidden_layers", K_INT, n_layers, FALCON),
    FIELD("num_attention_heads", K_INT, n_heads, FALCON),
    DERIVED("num_kv_heads", K_FALCON_KV, FALCON), DERIVED("multi_query", K_MULTI_QUERY, FALCON),
    FIELD("new_decoder_architecture", K_BOOL, new_arch, FALCON),
    FIELD("parallel_attn", K_BOOL, parallel, FALCON), FIELD("bias", K_BOOL, qkv_bias, FALCON),
    FIELD("alibi", K_BOOL, alibi, FALCON), DERIVED("ffn_hidden_size", K_FFN_UNLESS_4X, FALCON),
    FIELD("layer_norm_epsilon", K_REAL, norm_eps, FALCON),
    FIELD("rope_theta", K_REAL, rope_theta, FALCON),
    CONSTS("{\"hidden_dropout\": 0.0, \"attention_dropout\": 0.0, \"initializer_range\": 0.02, "
           "\"use_cache\": true}", FALCON),
    /* OPT: OPTConfig's names */
    FIELD("hidden_size", K_INT, hidden, OPT), FIELD("num_hidden_layers", K_INT, n_layers, OPT),
    FIELD("num_attention_heads", K_INT, n_heads, OPT), FIELD("ffn_dim", K_INT, ffn, OPT),
    FIELD("max_position_embeddings", K_INT, n_ctx, OPT),
    DERIVED("word_embed_proj_dim", K_EMBED_DIM, OPT),
    DERIVED("do_layer_norm_before", K_PRE_NORM, OPT),
    DERIVED("activation_function", K_ACT, OPT),
    CONSTS("{\"enable_bias\": true, \"layer_norm_elementwise_affine\": true, "
           "\"_remove_final_layer_norm\": false, \"dropout\": 0.1, \"attention_dropout\": 0.0, "
           "\"init_std\": 0.02, \"use_cache\": true}", OPT),
    /* BLOOM: BloomConfig's names (the FFN is always 4 x hidden) */
    FIELD("hidden_size", K_INT, hidden, BLOOM), FIELD("n_layer", K_INT, n_layers, BLOOM),
    FIELD("n_head", K_INT, n_heads, BLOOM), FIELD("layer_norm_epsilon", K_REAL, norm_eps, BLOOM),
    CONSTS("{\"apply_residual_connection_post_layernorm\": false, \"slow_but_exact\": false, "
           "\"attention_dropout\": 0.0, \"hidden_dropout\": 0.0, \"initializer_range\": 0.02, "
           "\"pretraining_tp\": 1, \"use_cache\": true}", BLOOM),
    /* MPT: MPTConfig's names as mpt-7b's config.json has them */
    FIELD("d_model", K_INT, hidden, MPT), FIELD("n_heads", K_INT, n_heads, MPT),
    FIELD("n_layers", K_INT, n_layers, MPT), DERIVED("expansion_ratio", K_EXPANSION, MPT),
    FIELD("max_seq_len", K_INT, n_ctx, MPT), DERIVED("no_bias", K_NO_BIAS, MPT),
    FIELD("layer_norm_epsilon", K_REAL, norm_eps, MPT),
    DERIVED("attn_config", K_MPT_ATTN, MPT), DERIVED("logit_scale", K_LOGIT_SCALE, MPT),
    CONSTS("{\"norm_type\": \"low_precision_layernorm\", \"learned_pos_emb\": true, "
           "\"emb_pdrop\": 0, \"resid_pdrop\": 0, \"embedding_fraction\": 1.0, "
           "\"init_device\": \"cpu\", \"use_cache\": false, \"verbose\": 0}", MPT),
};
#undef FIELD
#undef CONST
#undef CONSTS
#undef DERIVED

static const char *torch_dtype_name(lp_dtype dtype)
{
    return dtype == LP_DTYPE_BF16 ? "bfloat16" : dtype == LP_DTYPE_F16 ? "float16" : "float32";
}

/* rope_dim / head_dim as config.json carries it (10 significant digits), rounded up so that
 * int(head_dim * fraction), the reader's rule and transformers', gives rope_dim back (4 of 12
 * is 0.3333333334, not 0.3333333333). */
static double rotary_fraction(const lp_synth_spec *s)
{
    if (s->rope_dim <= 0 || s->rope_dim == s->head_dim)
        return 1.0;
    return ceil((double)s->rope_dim / (double)s->head_dim * 1e10) / 1e10;
}

/* {"type": "longrope", "short_factor": [...], "long_factor": [...]}: one factor per rotated
 * pair (1 where the spec gives none). NULL on OOM. */
static json_t *longrope_json(const lp_synth_spec *s)
{
    int64_t n = (s->rope_dim > 0 ? s->rope_dim : s->head_dim) / 2;
    json_t *sf = json_array(), *lf = json_array();
    bool ok = sf && lf;
    for (int64_t i = 0; ok && i < n; i++) {
        lp_synth_append(sf, json_real(s->short_factor ? s->short_factor[i] : 1.0), &ok);
        lp_synth_append(lf, json_real(s->long_factor ? s->long_factor[i] : 1.0), &ok);
    }
    json_t *obj = ok ? json_pack("{s:s, s:o, s:o}", "type", "longrope", "short_factor", sf,
                                 "long_factor", lf)
                     : NULL;
    if (!ok) { /* json_pack took them otherwise */
        json_decref(sf);
        json_decref(lf);
    }
    return obj;
}

/* The key's value for the spec; *skip when the key is left out. NULL on OOM. */
static json_t *key_value(const config_key *k, const lp_synth_spec *s, bool *skip)
{
    const char *base = (const char *)s + k->offset;
    const family_info *f = &FAMILIES[s->family];
    *skip = false;
    switch (k->kind) {
    case K_INT: return json_integer(*(const int64_t *)(const void *)base);
    case K_REAL: return json_real(*(const double *)(const void *)base);
    case K_BOOL: return json_boolean(*(const bool *)(const void *)base);
    case K_JSON: return json_loads(k->json, JSON_DECODE_ANY, NULL);
    case K_ARCHITECTURES: return json_pack("[s]", f->architecture);
    case K_MODEL_TYPE: return json_string(f->model_type);
    case K_ACT: return json_string(f->act);
    case K_TORCH_DTYPE: return json_string(torch_dtype_name(s->dtype));
    case K_PARTIAL_ROTARY:
        *skip = s->rope_dim == 0 || s->rope_dim == s->head_dim;
        return *skip ? NULL : json_real(rotary_fraction(s));
    case K_ROTARY_FRACTION: return json_real(rotary_fraction(s));
    case K_ROTARY_DIM: return json_integer(s->rope_dim > 0 ? s->rope_dim : s->head_dim);
    case K_FALCON_KV:
        *skip = !s->new_arch;
        return *skip ? NULL : json_integer(s->n_kv_heads);
    case K_MULTI_QUERY: return json_boolean(!s->new_arch && s->n_kv_heads == 1);
    case K_EMBED_DIM: return json_integer(s->embed_dim > 0 ? s->embed_dim : s->hidden);
    case K_PRE_NORM: return json_boolean(!s->post_norm);
    case K_ORIG_CTX: return json_integer(s->orig_ctx > 0 ? s->orig_ctx : s->n_ctx);
    case K_LONGROPE: return s->orig_ctx > 0 ? longrope_json(s) : json_null();
    case K_FFN_UNLESS_4X:
        *skip = s->ffn == 4 * s->hidden;
        return *skip ? NULL : json_integer(s->ffn);
    case K_MLP_ONLY: {
        json_t *list = json_array();
        bool ok = list != NULL;
        for (int64_t l = 0; ok && l < s->n_layers; l++)
            if (s->dense_layer[l])
                lp_synth_append(list, json_integer(l), &ok);
        if (!ok)
            json_decref(list);
        return ok ? list : NULL;
    }
    case K_EXPERT_FFN: return json_integer(s->expert_ffn > 0 ? s->expert_ffn : s->ffn);
    case K_SPARSE_STEP: return json_integer(s->sparse_step > 0 ? s->sparse_step : 1);
    case K_Q_LORA: return s->q_lora > 0 ? json_integer(s->q_lora) : json_null();
    case K_NOPE: return json_integer(s->head_dim - s->rope_dim);
    case K_TOPK_METHOD:
        return json_string(has(s, V3) ? "noaux_tc"
                           : s->n_groups > 1 ? "group_limited_greedy"
                                             : "greedy");
    case K_SCORING: return json_string(has(s, V3) ? "sigmoid" : "softmax");
    case K_SCALING: return json_real(s->routed_scaling > 0 ? s->routed_scaling : 1.0);
    case K_EXPANSION: return json_integer(s->ffn / s->hidden);
    case K_NO_BIAS: return json_boolean(!s->qkv_bias);
    case K_LOGIT_SCALE: return s->logit_scale > 0 ? json_real(s->logit_scale) : json_null();
    case K_WINDOW_OR_NULL: return s->window > 0 ? json_integer(s->window) : json_null();
    case K_MPT_ATTN: {
        bool gqa = s->n_kv_heads > 1 && s->n_kv_heads < s->n_heads;
        json_t *obj = json_pack(
            "{s:b, s:f, s:s, s:s, s:f, s:o, s:b, s:b, s:b, s:n}", "alibi", s->alibi, "alibi_bias_max",
            s->alibi_max > 0 ? s->alibi_max : 8.0, "attn_impl", "torch", "attn_type",
            gqa ? "grouped_query_attention"
            : s->n_kv_heads == 1 && s->n_heads > 1 ? "multiquery_attention"
                                                   : "multihead_attention",
            "attn_pdrop", 0.0, "clip_qkv", s->qkv_clip > 0 ? json_real(s->qkv_clip) : json_null(),
            "qk_ln", s->qk_norm, "prefix_lm", 0, "attn_uses_sequence_id", 0, "softmax_scale");
        bool ok = obj != NULL;
        if (ok && gqa)
            lp_synth_put(obj, "kv_n_heads", json_integer(s->n_kv_heads), &ok);
        if (!ok)
            json_decref(obj);
        return ok ? obj : NULL;
    }
    case K_YARN:
        *skip = !(s->yarn_factor > 0);
        return *skip ? NULL
                     : json_pack("{s:s, s:f, s:I, s:f, s:f, s:f, s:f}", "type", "yarn", "factor",
                                 s->yarn_factor, "original_max_position_embeddings",
                                 (json_int_t)s->yarn_orig, "beta_fast", 32.0, "beta_slow", 1.0,
                                 "mscale", s->yarn_mscale, "mscale_all_dim", s->yarn_mscale_all);
    case K_OSS_YARN:
        *skip = !(s->yarn_factor > 0);
        return *skip ? NULL
                     : json_pack("{s:s, s:f, s:I, s:f, s:f, s:b}", "rope_type", "yarn", "factor",
                                 s->yarn_factor, "original_max_position_embeddings",
                                 (json_int_t)s->yarn_orig, "beta_fast", 32.0, "beta_slow", 1.0,
                                 "truncate", 0);
    case K_LAYER_TYPES: {
        json_t *list = json_array();
        bool ok = list != NULL;
        for (int64_t l = 0; ok && l < s->n_layers; l++)
            lp_synth_append(list,
                            json_string(s->window > 0 && l % 2 == 0 ? "sliding_attention"
                                                                    : "full_attention"),
                            &ok);
        if (!ok)
            json_decref(list);
        return ok ? list : NULL;
    }
    }
    return NULL;
}

void lp_synth_put(json_t *obj, const char *key, json_t *value, bool *ok)
{
    if (!value || json_object_set_new(obj, key, value) != 0)
        *ok = false;
}

void lp_synth_append(json_t *arr, json_t *value, bool *ok)
{
    if (!value || json_array_append_new(arr, value) != 0)
        *ok = false;
}

json_t *lp_synth_config_json(const lp_synth_spec *spec)
{
    json_t *config = json_object();
    bool ok = config != NULL;
    for (size_t i = 0; ok && i < sizeof KEYS / sizeof KEYS[0]; i++) {
        bool skip;
        if (!has(spec, KEYS[i].families))
            continue;
        json_t *value = key_value(&KEYS[i], spec, &skip);
        if (skip)
            continue;
        if (KEYS[i].key) {
            lp_synth_put(config, KEYS[i].key, value, &ok);
            continue;
        }
        /* several constants: their keys in their order */
        if (!value || json_object_update(config, value) != 0)
            ok = false;
        json_decref(value);
    }
    if (!ok) {
        json_decref(config);
        return NULL;
    }
    return config;
}

/* ---- the writer ---------------------------------------------------------------------------------- */

lp_status lp_synth_check_request(const char *out_dir, const lp_synth_spec *spec, lp_error *err)
{
    if (!out_dir || !*out_dir)
        return lp_error_set(err, LP_ERR_USAGE, "no output folder given (the path is empty)");
    return lp_synth_check_spec(spec, err);
}

lp_status lp_synth_write_family(const char *out_dir, const lp_synth_spec *spec, lp_error *err)
{
    lp_status st = lp_synth_check_request(out_dir, spec, err);
    if (st != LP_OK)
        return st;
    lp_st_writer *w = NULL;
    json_t *config = NULL;
    if ((st = lp_st_writer_create(&w, err)) == LP_OK &&
        (st = lp_synth_add_tensors(spec, w, err)) == LP_OK) {
        config = lp_synth_config_json(spec);
        if (!config)
            st = lp_error_set(err, LP_ERR_NOMEM, "out of memory building config.json");
    }
    if (st == LP_OK) {
        lp_synth_file files[] = {{"model.safetensors", w, NULL, NULL},
                                 {"config.json", NULL, config, NULL}};
        st = lp_synth_commit(out_dir, files, 2, err);
    }
    json_decref(config);
    lp_st_writer_destroy(w);
    return st;
}
