/* The normalized model description (lp_arch) and the tensor catalogue (lp_weights): what every
 * other module reads, whichever format a model came in; and "what file is this?"
 * (lp_detect_format, inspect/formats/detect.h).
 *
 *   if (lp_detect_format(path) == LP_FILE_GGUF) ...                       // bytes, then name
 *   lp_arch arch;
 *   lp_error err = {0};
 *   if (lp_arch_load("configs/llama-3-8b.yaml", &arch, &err) != LP_OK) ...   // or config.json,
 *                                              // a model folder, .gguf, llama2.c .bin, card name
 *   lp_weights *w;
 *   if (lp_weights_open("model_dir/", &w, &err) != LP_OK) ...
 *   const lp_tensor *wq = lp_weights_find(w, LP_ROLE_ATTN_Q, 3, -1, false);  // layer 3 q_proj
 *   float row[4096];
 *   lp_tensor_rows_f32(wq, 0, 1, row, &err);                                  // dequantizes
 *   lp_weights_close(w);
 *
 * Shapes are always row-major, outermost first, as PyTorch prints them: a linear layer's weight is
 * [out_features, in_features], so one "row" is one output's weights. GGUF lists dimensions
 * innermost first; its reader reverses them. GPT-2's Conv1D stores [in, out]: such tensors have
 * `transposed` set.
 */
#ifndef LP_INSPECT_H
#define LP_INSPECT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "inspect/formats/detect.h"

#define LP_MAX_LAYERS 512 /* more is refused with an error naming the limit */
#define LP_MAX_DIMS 8
#define LP_MAX_ROPE_FACTORS 256 /* longrope factors per list (rope_dim / 2); more is refused */

typedef enum lp_ffn_kind {
    LP_FFN_MLP,    /* up -> act -> down, usually with biases (GPT-2, OPT, BLOOM, Phi-2, Falcon) */
    LP_FFN_SWIGLU, /* down(silu(gate x) * up x) (Llama, Mistral, Qwen) */
    LP_FFN_GEGLU,  /* down(gelu(gate x) * up x) (Gemma) */
    LP_FFN_KIND_COUNT
} lp_ffn_kind;

typedef enum lp_activation {
    LP_ACT_SILU,
    LP_ACT_GELU,      /* exact, erf-based */
    LP_ACT_GELU_TANH, /* tanh approximation ("gelu_new", "gelu_pytorch_tanh") */
    LP_ACT_RELU,
    LP_ACT_KIND_COUNT
} lp_activation;

typedef enum lp_norm_kind { LP_NORM_RMS, LP_NORM_LAYER, LP_NORM_KIND_COUNT } lp_norm_kind;

typedef enum lp_pos_kind {
    LP_POS_ROPE,
    LP_POS_LEARNED, /* a table of absolute position embeddings (GPT-2, OPT) */
    LP_POS_ALIBI,   /* BLOOM, some Falcon */
    LP_POS_NONE,
    LP_POS_KIND_COUNT
} lp_pos_kind;

typedef enum lp_rope_scaling_kind {
    LP_ROPE_SCALING_NONE,
    LP_ROPE_SCALING_LINEAR,
    LP_ROPE_SCALING_DYNAMIC, /* dynamic NTK */
    LP_ROPE_SCALING_LLAMA3,
    LP_ROPE_SCALING_YARN,
    LP_ROPE_SCALING_LONGROPE, /* Phi-3 "su"/"longrope" */
    LP_ROPE_SCALING_KIND_COUNT
} lp_rope_scaling_kind;

/* Which components RoPE rotates together within a head. Meta's original code, llama2.c and
 * GGUF's llama arch use ADJACENT pairs (2i, 2i+1); Hugging Face's rotate_half and GGUF's NEOX
 * archs use HALVES (i, i + rot_dim/2). HF Llama checkpoints have q/k rows permuted so that HALVES
 * gives the same scores as ADJACENT on the original rows. */
typedef enum lp_rope_layout { LP_ROPE_HALVES, LP_ROPE_ADJACENT, LP_ROPE_LAYOUT_COUNT } lp_rope_layout;

typedef struct lp_rope_scaling {
    lp_rope_scaling_kind kind;
    double factor;
    int64_t original_ctx;   /* original_max_position_embeddings; 0 if not given */
    double low_freq_factor; /* llama3 */
    double high_freq_factor;
    double beta_fast; /* yarn */
    double beta_slow;
    double attention_factor; /* yarn/longrope mscale; 0 = derive */
    /* yarn "truncate": false (gpt-oss) keeps the ramp's bounds fractional; true, transformers'
     * default and what ggml always does, floors the lower one and ceils the upper one */
    bool yarn_unrounded;
    /* longrope (Phi-3): one divisor of the inverse frequency per rotated pair, short_factor for
     * sequences up to original_ctx, long_factor beyond; n_factors = rope_dim / 2, 0 if not given */
    int64_t n_factors;
    double short_factor[LP_MAX_ROPE_FACTORS];
    double long_factor[LP_MAX_ROPE_FACTORS];
} lp_rope_scaling;

typedef struct lp_arch {
    char family[32];  /* model_type: "llama", "gpt2", "gemma2", "mixtral", "deepseek_v3", ... */
    char name[128];   /* human name when known ("Llama-3.1-8B"), else the source file */
    char source[256]; /* file it was read from, for messages */

    int64_t vocab_size;
    int64_t hidden_size;
    int64_t n_layers;
    int64_t n_heads;
    int64_t n_kv_heads;      /* = n_heads for MHA, 1 for MQA */
    int64_t head_dim;        /* from the config when given, else hidden / heads */
    bool head_dim_explicit;  /* true when the config stated head_dim */
    int64_t layer_kv_heads[LP_MAX_LAYERS]; /* per layer; all = n_kv_heads unless a per-layer
                                              array was given (GGUF, OpenELM-style) */

    int64_t ffn_hidden;                    /* dense FFN width (intermediate_size) */
    int64_t layer_ffn_hidden[LP_MAX_LAYERS]; /* per layer dense width; usually all ffn_hidden */
    lp_ffn_kind ffn_kind;
    lp_activation act;

    lp_norm_kind norm_kind;
    double norm_eps;
    bool norm_weight_plus_one;  /* Gemma: y = x_hat * (1 + w) */
    bool post_attn_norm;        /* Gemma 2/3: extra norm on the attention output */
    bool post_ffn_norm;         /* Gemma 2/3: extra norm on the FFN output */
    bool qk_norm;               /* per-head RMSNorm of q and k (Qwen3, Gemma 3) */
    bool qk_norm_full;          /* norm over all heads at once (OLMo 2): q hidden, k kv_dim */
    bool no_input_norm;         /* OLMo 2: norms after, not before, each sublayer */
    bool embed_norm;            /* BLOOM: LayerNorm right after the embedding */
    bool final_norm;            /* a norm before the classifier (true for all supported) */

    lp_pos_kind pos_kind;
    int64_t pos_table_rows;     /* learned tables: GPT-2 n_positions; OPT max_position + 2 */
    int64_t pos_offset;         /* OPT's learned positions start at index 2 */
    double rope_theta;
    double partial_rotary;      /* fraction of head_dim that is rotated (1.0 = all) */
    int64_t rope_dim;           /* rotated dims per head = head_dim * partial_rotary */
    lp_rope_layout rope_layout; /* how the stored q/k rows pair up; set by the weight reader */
    lp_rope_scaling rope_scaling;
    double rope_local_theta;    /* Gemma 3: theta of sliding layers; 0 = same as rope_theta */
    int64_t n_ctx;              /* trained context (max_position_embeddings) */

    bool tied_embeddings;
    bool bias_qkv;
    bool bias_o;
    bool bias_mlp;
    bool bias_lm_head;          /* Phi-2 */
    bool bias_norm;             /* LayerNorm with bias (true for LayerNorm unless disabled) */

    /* Sliding window: layer_window[l] > 0 means layer l sees that many keys including itself;
     * 0 means full causal attention. sliding_window is the configured size. */
    int64_t sliding_window;
    int64_t layer_window[LP_MAX_LAYERS];

    /* Mixture of experts (all zero for dense models). */
    int64_t n_experts;            /* routed experts per MoE layer */
    int64_t n_experts_per_tok;    /* top-k */
    int64_t n_shared_experts;     /* DeepSeek: shared experts, each expert_ffn_hidden wide */
    int64_t expert_ffn_hidden;    /* width of one routed expert */
    int64_t shared_expert_ffn_hidden; /* Qwen MoE: one shared expert of this width */
    bool shared_expert_gate;      /* Qwen MoE: sigmoid gate hidden -> 1 on the shared expert */
    bool router_score_bias;       /* DeepSeek V3: e_score_correction_bias per expert */
    bool norm_topk_prob;          /* renormalize the top-k weights */
    bool layer_moe[LP_MAX_LAYERS]; /* true where the layer's FFN is routed experts */

    /* DeepSeek multi-head latent attention; q_lora_rank 0 = plain q projection. */
    bool mla;
    int64_t q_lora_rank;
    int64_t kv_lora_rank;
    int64_t qk_rope_head_dim;
    int64_t qk_nope_head_dim;
    int64_t v_head_dim;

    bool parallel_block;         /* attention and MLP read the same input (GPT-J, Phi, Falcon) */
    bool parallel_two_norms;     /* Falcon new_decoder_architecture: separate ln_attn, ln_mlp */

    double embed_scale;          /* Gemma: sqrt(hidden); 1.0 otherwise */
    double attn_logit_softcap;   /* Gemma 2; 0 = off */
    double final_logit_softcap;  /* Gemma 2; 0 = off */
    double query_scale;          /* softmax scale; 0 = 1/sqrt(head_dim). Gemma 2:
                                    1/sqrt(query_pre_attn_scalar) */
    int64_t n_mtp_layers;        /* DeepSeek V3 multi-token prediction: not in the model */

    lp_dtype storage_dtype;      /* torch_dtype / file type; INVALID if unknown */
    int64_t bos_token_id;        /* -1 when unknown */
    int64_t eos_token_id;

    /* gpt-oss (added for exact parameter counts): */
    bool router_bias; /* the router linear has a bias: n_experts values per MoE layer */
    bool attn_sinks;  /* one learned sink logit per query head per layer, joining the softmax */
    /* StableLM 2 (qk_layernorm): a separate bias-free LayerNorm for every query and kv head
     * (n_heads + n_kv_heads vectors of head_dim) instead of one shared per-head norm; set
     * together with qk_norm. */
    bool qk_norm_per_head;
    /* OPT-350m (word_embed_proj_dim != hidden_size): token embeddings, and the lm_head tied to
     * them, are embed_proj_dim wide; bias-free project_in [hidden, embed_proj_dim] and
     * project_out [embed_proj_dim, hidden] convert at either end of the stack. 0 = no
     * projection (embeddings are hidden_size wide). */
    int64_t embed_proj_dim;
    /* Post-norm blocks (OPT do_layer_norm_before false): each sublayer's LayerNorm is applied
     * after its residual add instead of before the sublayer; same tensors, other graph. */
    bool post_norm;
    /* A config.json whose model_type the reader does not know is read with the rules of a
     * family it does know; this names that family ("llama"), so that every figure derived from
     * the description can say so. Empty when the model_type is known. */
    char assumed_family[32];
    /* BERT-style encoders (bert, roberta, xlm-roberta), counted as the bare encoder model
     * (BertModel): bidirectional attention, no KV cache, no LM head. n_token_types is the
     * segment embedding table (type_vocab_size rows of hidden_size); pooler is BertPooler's
     * dense hidden x hidden + bias on the first token. */
    bool encoder_only;
    int64_t n_token_types;
    bool pooler;
    /* ALiBi (BLOOM, MPT, Falcon-RW): the largest slope exponent, MPT's alibi_bias_max; 8 unless a
     * config says otherwise. Slopes are lp_alibi_slopes' rule for any head count. */
    double alibi_max_bias;
    /* MPT clip_qkv: the fused q/k/v projection is clamped to [-qkv_clip, qkv_clip]; 0 = off. */
    double qkv_clip;
    /* MPT logit_scale: the logits are multiplied by it (a number, or 1 / sqrt(d_model) for
     * "inv_sqrt_d_model"); 0 = off. */
    double logit_scale;
    /* DeepSeek routing: sigmoid scores instead of a softmax (V3, scoring_func sigmoid); the
     * experts in n_expert_groups equal groups of which only the topk_groups best are searched
     * (0 = no grouping: topk_method greedy); the chosen weights multiplied by routed_scaling
     * (0 = 1). */
    bool router_sigmoid;
    int64_t n_expert_groups, topk_groups;
    double routed_scaling;
    /* gpt-oss's clamped SwiGLU in the experts: gate clamped above and up to [-limit, limit]
     * (config swiglu_limit; GGUF has no key, llama.cpp uses 7). 0 = the plain SwiGLU. */
    double swiglu_limit;
} lp_arch;

/* Defaults every reader starts from: all zero except eps 1e-5, theta 10000, partial 1.0,
 * embed_scale 1.0, final_norm true, token ids -1, alibi_max_bias 8. */
void lp_arch_init(lp_arch *arch);

/* Fill the derived fields (head_dim, rope_dim, per-layer arrays where left zero) and check the
 * description: a missing required value or an impossible combination (heads not dividing hidden
 * without head_dim, kv heads not dividing heads, zero layers, too many layers) is LP_ERR_FORMAT
 * naming arch->source and the key. */
lp_status lp_arch_finish(lp_arch *arch, lp_error *err);

/* Readers. Each calls lp_arch_finish before returning. */
lp_status lp_arch_from_hf_config(const char *config_json_path, lp_arch *out, lp_error *err);
lp_status lp_arch_from_yaml(const char *yaml_path, lp_arch *out, lp_error *err);
lp_status lp_arch_from_llama2c(const char *bin_path, lp_arch *out, lp_error *err);
struct lp_gguf;
lp_status lp_arch_from_gguf(const struct lp_gguf *gguf, lp_arch *out, lp_error *err);

/* Any of: a model folder (config.json inside), config.json, *.yaml card, *.gguf, llama2.c .bin,
 * or the bare name of a card in lp_configs_dir() ("llama-3-8b"). */
lp_status lp_arch_load(const char *path_or_name, lp_arch *out, lp_error *err);

const char *lp_ffn_kind_name(lp_ffn_kind kind);
const char *lp_norm_kind_name(lp_norm_kind kind);
const char *lp_pos_kind_name(lp_pos_kind kind);
const char *lp_rope_scaling_name(lp_rope_scaling_kind kind);
const char *lp_activation_name(lp_activation act);

/* ---------------------------------------------------------------------------------------------
 * Tensor catalogue over safetensors (single or sharded), GGUF and llama2.c checkpoints.
 */

typedef enum lp_weights_format {
    LP_FORMAT_SAFETENSORS,
    LP_FORMAT_GGUF,
    LP_FORMAT_LLAMA2C,
    LP_FORMAT_COUNT
} lp_weights_format;

/* Canonical roles. Per-layer roles carry `layer`; expert roles also `expert`. Biases have the
 * same role as their weight with is_bias set. Fused tensors keep their fused role. */
typedef enum lp_role {
    LP_ROLE_UNKNOWN,
    LP_ROLE_TOKEN_EMBD,
    LP_ROLE_POS_EMBD,
    LP_ROLE_EMBD_NORM,
    LP_ROLE_ATTN_NORM,
    LP_ROLE_ATTN_Q,
    LP_ROLE_ATTN_K,
    LP_ROLE_ATTN_V,
    LP_ROLE_ATTN_QKV, /* fused (GPT-2 c_attn, Phi-3 qkv_proj, Falcon query_key_value) */
    LP_ROLE_ATTN_O,
    LP_ROLE_ATTN_Q_NORM,
    LP_ROLE_ATTN_K_NORM,
    LP_ROLE_ATTN_POST_NORM, /* Gemma 2 post_attention_layernorm */
    LP_ROLE_ATTN_Q_A,       /* MLA */
    LP_ROLE_ATTN_Q_A_NORM,
    LP_ROLE_ATTN_Q_B,
    LP_ROLE_ATTN_KV_A,
    LP_ROLE_ATTN_KV_A_NORM,
    LP_ROLE_ATTN_KV_B,
    LP_ROLE_ATTN_K_B, /* llama.cpp's kv_b split per head: [n_heads, kv_lora_rank, nope] */
    LP_ROLE_ATTN_V_B, /* [n_heads, v_head_dim, kv_lora_rank] */
    LP_ROLE_ATTN_SINKS, /* gpt-oss: one learned sink logit per query head, [n_heads] */
    LP_ROLE_FFN_NORM,
    LP_ROLE_FFN_GATE,
    LP_ROLE_FFN_UP,
    LP_ROLE_FFN_GATE_UP, /* fused (Phi-3 gate_up_proj) */
    LP_ROLE_FFN_DOWN,
    LP_ROLE_FFN_POST_NORM, /* Gemma 2 post_feedforward_layernorm */
    LP_ROLE_ROUTER,
    LP_ROLE_ROUTER_BIAS, /* DeepSeek V3 e_score_correction_bias */
    LP_ROLE_EXPERT_GATE,
    LP_ROLE_EXPERT_UP,
    LP_ROLE_EXPERT_DOWN,
    LP_ROLE_EXPERT_GATE_UP, /* fused experts, e.g. GGUF ffn_gate_exps holding all experts */
    LP_ROLE_SHARED_GATE,
    LP_ROLE_SHARED_UP,
    LP_ROLE_SHARED_DOWN,
    LP_ROLE_SHARED_EXPERT_GATE, /* Qwen MoE sigmoid gate on the shared expert */
    LP_ROLE_OUTPUT_NORM,
    LP_ROLE_LM_HEAD,
    LP_ROLE_EMBD_PROJ_IN,  /* OPT project_in [hidden, word_embed_proj_dim] */
    LP_ROLE_EMBD_PROJ_OUT, /* OPT project_out [word_embed_proj_dim, hidden] */
    LP_ROLE_ROPE_FREQS, /* stored buffers that are not parameters */
    LP_ROLE_ATTN_MASK_BUFFER,
    LP_ROLE_COUNT
} lp_role;

typedef struct lp_tensor {
    const char *name;          /* borrowed: valid until lp_weights_close() */
    lp_dtype dtype;
    int n_dims;
    int64_t shape[LP_MAX_DIMS]; /* row-major, outermost first */
    int64_t n_elements;
    uint64_t n_bytes;
    const void *data;           /* borrowed view into the mmap; valid until lp_weights_close() */
    int file_index;             /* which shard */
    uint64_t file_offset;       /* absolute byte offset of the data in that file */
    lp_role role;
    int layer;                  /* -1 when not per layer */
    int expert;                 /* -1 when not an expert (or all experts fused in one tensor) */
    bool is_bias;
    bool transposed;            /* stored [in, out] (GPT-2 Conv1D) */
} lp_tensor;

typedef struct lp_weights lp_weights;

/* PATH: model folder (config.json + *.safetensors / model.safetensors.index.json, or one .gguf),
 * a .safetensors file, a .safetensors.index.json, a .gguf or a llama2.c .bin. Validates every
 * header and offset; maps the files; reads no tensor data. */
lp_status lp_weights_open(const char *path, lp_weights **out, lp_error *err);
void lp_weights_close(lp_weights *weights);

lp_weights_format lp_weights_format_of(const lp_weights *weights);
const char *lp_weights_format_name(lp_weights_format format);
size_t lp_weights_count(const lp_weights *weights);
const lp_tensor *lp_weights_tensor(const lp_weights *weights, size_t index);
const lp_tensor *lp_weights_find(const lp_weights *weights, lp_role role, int layer, int expert,
                                 bool is_bias);
const lp_tensor *lp_weights_find_name(const lp_weights *weights, const char *name);
/* The architecture that came with the weights (config.json beside safetensors, GGUF metadata,
 * llama2.c header); NULL when none was found. Borrowed. */
const lp_arch *lp_weights_arch(const lp_weights *weights);
/* Why lp_weights_arch() is NULL although a description was found (a family loupe does not
 * describe yet); "" otherwise. Borrowed. */
const char *lp_weights_arch_note(const lp_weights *weights);
/* The GGUF handle behind GGUF weights (for its vocabulary), else NULL. Borrowed. */
const struct lp_gguf *lp_weights_gguf(const lp_weights *weights);
/* The path given to lp_weights_open. */
const char *lp_weights_path(const lp_weights *weights);

/* Dequantize/convert n_rows rows starting at row_begin into dst (n_rows * row_len floats), where
 * row_len = shape[n_dims-1] and rows count over all outer dimensions. Touches only those rows. */
lp_status lp_tensor_rows_f32(const lp_tensor *tensor, int64_t row_begin, int64_t n_rows,
                             float *dst, lp_error *err);

const char *lp_role_name(lp_role role);

#endif
