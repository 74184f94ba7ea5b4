/* A straightforward plain-C forward pass for tests: naive loops in double, no tiling, no kernels,
 * no loader. Tests build a random model in memory, write it to disk for the real pass (through
 * trace/synth's family writer, so link lp_trace), and check the real pass's outputs against this
 * one.
 *
 *   ref_config cfg = {.family = REF_LLAMA, .vocab = 64, .hidden = 32, ...};
 *   ref_model m;
 *   ref_model_random(&cfg, 1234, &m);       // weights uniform in [-scale, scale]
 *   ref_outputs out;
 *   ref_forward(&m, tokens, T, &out);       // out.logits [T, vocab], out.probs, out.resid
 *   ref_outputs_free(&out); ref_model_free(&m);
 */
#ifndef LP_TESTS_REF_FORWARD_H
#define LP_TESTS_REF_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"

typedef enum ref_family {
    REF_LLAMA,   /* RMSNorm, RoPE, SwiGLU, GQA; Qwen2 when qkv_bias */
    REF_GPT2,    /* LayerNorm + bias, learned positions, gelu_new MLP, fused Conv1D qkv, tied */
    REF_GEMMA2,  /* (1+w) RMSNorm, sqrt(hidden) embedding scale, GeGLU (tanh), post norms,
                    alternating sliding window (even layers), attention and final soft-caps */
    REF_MIXTRAL, /* llama attention + top-k MoE with softmax over the chosen experts */
    REF_GEMMA,   /* Gemma 1: Gemma 2 without post norms, windows, soft-caps; 1/sqrt(head_dim) */
    REF_GEMMA3,  /* Gemma 3: Gemma 2's block without soft-caps, (1 + w) q/k norms, layers with
                    (l + 1) % sliding_pattern != 0 slide and rotate with local_theta */
    REF_NEOX,    /* GPT-NeoX / Pythia: LayerNorm + bias, biases on q/k/v/o and the MLP, exact
                    (erf) GELU MLP, partial RoPE (halves), untied bias-free embed_out; parallel
                    residual x + attn(ln1 x) + mlp(ln2 x) when cfg.parallel, else sequential */
    REF_PHI,     /* Phi-1/1.5/2: one LayerNorm feeding attention and MLP in parallel, biases on
                    q/k/v/dense/fc1/fc2, gelu_new, partial RoPE (halves), biased lm_head */
    REF_GPTJ,    /* GPT-J: Phi's parallel block with bias-free q/k/v/out_proj, biased fc_in/fc_out
                    and lm_head, gelu_new, partial RoPE on adjacent (rotate-every-two) pairs */
    REF_STABLELM, /* StableLM: LayerNorm + bias, SwiGLU without biases, q/k/v biases when
                    qkv_bias, a bias-free LayerNorm of its own per head on q and k when qk_norm,
                    partial RoPE (halves); StableLM 2's parallel block with one norm when
                    cfg.parallel, StableLM-3B's sequential block otherwise */
    REF_FALCON,  /* Falcon: LayerNorm + bias, exact GELU MLP, full RoPE (halves) or ALiBi added
                    before the 1/sqrt(head_dim) scale (cfg.alibi); biases on every linear layer
                    when cfg.qkv_bias (Falcon's "bias"); cfg.new_arch: ln_attn + ln_mlp feeding
                    attention and MLP in parallel, grouped kv heads; else one input norm, in
                    parallel when cfg.parallel (7B, multi-query), sequential otherwise */
    REF_BLOOM,   /* BLOOM: LayerNorm + bias after the embedding and in every block, biases
                    everywhere, per-head fused q/k/v, bloom_gelu (tanh), ALiBi added after the
                    1/sqrt(head_dim) scale (cfg.alibi), no RoPE, sequential, tied */
    REF_OPT,     /* OPT: LayerNorm + bias, biases everywhere, ReLU MLP, learned positions read at
                    pos + 2, tied; cfg.embed_dim != hidden: embeddings of that width with
                    project_in / project_out around the stack; cfg.post_norm
                    (do_layer_norm_before false): x = ln(x + sublayer(x)), no final norm */
    REF_PHI3,    /* Phi-3: Llama's block (RMSNorm, SwiGLU, RoPE on halves, partial rotary) with
                    q/k/v fused as qkv_proj and gate/up as gate_up_proj (the writer's layout);
                    longrope when cfg.longrope_orig > 0: every pair's frequency divided by
                    long_factor[i] when the sequence is longer than longrope_orig, else by
                    short_factor[i]; cos and sin times sqrt(1 + ln(s) / ln(orig)), s = n_ctx /
                    orig */
    REF_OLMO2,   /* OLMo 2: Llama's SwiGLU and RoPE with no input norms; RMSNorm on each
                    sublayer's output before the residual add; q and k RMSNorm over the whole
                    projection ([q_dim], [kv_dim]) before RoPE */
    REF_QWEN_MOE, /* Qwen2-MoE (qkv_bias, shared expert behind a sigmoid gate) or Qwen3-MoE
                     (qk_norm): softmax router over all experts, top-k, renormalized only with
                     norm_topk; dense layers where (l + 1) % sparse_step != 0 or in mlp_only */
    REF_DEEPSEEK, /* multi-head latent attention (q_lora or a plain q; kv_lora; head_dim = nope +
                     rope_dim, adjacent RoPE pairs, the k rope part shared by every head;
                     v_dim-wide values), layers below first_dense dense, n_shared experts of
                     expert_ffn, softmax (V2) or sigmoid + score bias (V3) router with groups */
    REF_GPT_OSS,  /* gpt-oss: Llama's RMSNorm block with q/k/v/o biases, one learned sink logit
                     per head joining its softmax (the probabilities over the keys sum to less
                     than 1), a window on even layers (layer_types sliding, full, ...), YaRN with
                     unrounded ramp bounds when yarn_factor > 0; every layer routed: biased
                     router, top-k of the logits, softmax over the chosen; experts with gate, up
                     and down biases and the clamped SwiGLU (up + 1) g sigmoid(1.702 g) */
    REF_MPT,     /* MPT: LayerNorm, exact GELU MLP, fused Wqkv (q | k | v), ALiBi added after the
                    softmax scale with alibi_max (0 = 8) when cfg.alibi, else learned positions
                    (n_positions rows) added to the embeddings, no RoPE; tied; every linear and LayerNorm
                    biased only when qkv_bias (!no_bias); q/k clamped to [-qkv_clip, qkv_clip]
                    (v too) when qkv_clip > 0; qk_norm: LayerNorm over the whole q and k
                    projections (qk_ln, after the clamp); logits times logit_scale when > 0 */
    REF_STARCODER2, /* StarCoder2: LayerNorm + bias, GQA, RoPE (halves), cfg.window on every
                       layer, a gelu_tanh MLP (c_fc, c_proj); q/k/v/o and the MLP biased when
                       cfg.qkv_bias (use_bias), sequential; tied when cfg.tied */
    REF_FAMILY_COUNT
} ref_family;

typedef struct ref_config {
    ref_family family;
    int64_t vocab, hidden, n_layers, n_heads, n_kv_heads, head_dim, ffn;
    int64_t n_positions;      /* GPT-2's, OPT's and MPT's (without ALiBi) table rows */
    double eps, theta;
    bool qkv_bias;            /* Qwen2 */
    bool rope_adjacent;       /* false = halves (HF rotate_half) */
    bool tied;
    int64_t n_experts, top_k; /* Mixtral */
    int64_t window;           /* Gemma 2 sliding window on even layers; Mistral-style on all
                                 layers for REF_LLAMA when > 0 */
    double query_pre_attn_scalar; /* Gemma 2 (0 = head_dim) */
    double attn_softcap, final_softcap;
    double scale;             /* weights uniform in [-scale, scale] */
    int64_t rope_dim;         /* rotated dims per head (partial_rotary_factor); 0 = head_dim */
    bool qk_norm;             /* Qwen3: per-head RMSNorm of q and k before RoPE (StableLM: a
                                 LayerNorm of each head's own) */
    int64_t sliding_pattern;  /* Gemma 3 */
    double local_theta;       /* Gemma 3: RoPE base of sliding layers */
    bool parallel;            /* GPT-NeoX, StableLM: use_parallel_residual; Falcon: parallel_attn */
    bool new_arch;            /* Falcon: new_decoder_architecture */
    bool alibi;               /* Falcon: ALiBi instead of RoPE */
    double alibi_max;         /* MPT alibi_bias_max; 0 = 8 */
    double qkv_clip;          /* MPT clip_qkv; 0 = off */
    double logit_scale;       /* MPT logit_scale; 0 = off */
    bool post_norm;           /* OPT: do_layer_norm_before false */
    int64_t embed_dim;        /* OPT: word_embed_proj_dim; 0 = hidden */
    int64_t longrope_orig;    /* Phi-3: original_max_position_embeddings; 0 = no longrope */
    int64_t n_ctx;            /* Phi-3: max_position_embeddings (longrope's scale) */
    double short_factor[32], long_factor[32]; /* Phi-3: one per rotated pair */
    /* Qwen MoE: each expert's width (0 = ffn), the shared expert's (0 = none), the sparse step
     * (0 = 1), the dense layers (bit l), whether the top-k weights are renormalized */
    int64_t expert_ffn, shared_ffn, sparse_step;
    uint64_t mlp_only;
    bool norm_topk;
    /* DeepSeek */
    int64_t q_lora, kv_lora, v_dim, first_dense, n_shared, n_groups, topk_groups;
    double routed_scaling; /* 0 = 1 */
    bool v3;               /* sigmoid scores, e_score_correction_bias, noaux_tc groups */
    /* DeepSeek's YaRN (yarn_factor 0 = plain RoPE): original context, beta 32 / 1, cos/sin times
     * m(mscale) / m(mscale_all_dim) and the softmax scale times m(mscale_all_dim)^2, with
     * m(x) = 0.1 x ln(factor) + 1 */
    double yarn_factor, yarn_mscale, yarn_mscale_all;
    int64_t yarn_orig;
    double swiglu_limit;   /* gpt-oss: the experts' clamp (0 = 7) */
} ref_config;

typedef struct ref_layer {
    float *attn_norm, *attn_norm_b;   /* [hidden] */
    float *wq, *wk, *wv, *wo;         /* [q_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim] */
    float *bq, *bk, *bv, *bo;         /* or NULL */
    float *post_attn_norm;            /* Gemma 2 */
    float *ffn_norm, *ffn_norm_b;
    float *w_gate, *w_up, *w_down;    /* [ffn, hidden], [ffn, hidden], [hidden, ffn] */
    float *b_up, *b_down;             /* GPT-2 */
    float *post_ffn_norm;             /* Gemma 2 */
    float *router;                    /* [n_experts, hidden] */
    float **e_gate, **e_up, **e_down; /* [n_experts] of [ffn, hidden], [ffn, hidden], [hidden, ffn] */
    float *q_norm, *k_norm;           /* [head_dim] (qk_norm); StableLM: [n_heads, head_dim],
                                         [n_kv_heads, head_dim]; OLMo 2, MPT: [q_dim], [kv_dim] */
    float *q_norm_b, *k_norm_b;       /* MPT qk_ln without no_bias, or NULL */
    float *s_gate, *s_up, *s_down;    /* shared expert [shared_ffn, hidden] x2, [hidden, shared_ffn] */
    float *s_gate_w;                  /* [hidden] its sigmoid gate */
    float *q_a, *q_a_norm, *q_b;      /* MLA [q_lora, hidden], [q_lora], [n_heads head_dim, q_lora] */
    float *kv_a, *kv_a_norm, *kv_b;   /* [kv_lora + rope, hidden], [kv_lora],
                                         [n_heads (nope + v_dim), kv_lora] */
    float *score_bias;                /* [n_experts] V3 */
    float *sinks;                     /* [n_heads] gpt-oss */
    float *router_b;                  /* [n_experts] gpt-oss */
    float *eb_gate, *eb_up, *eb_down; /* gpt-oss expert biases [n_experts, ffn] x2,
                                         [n_experts, hidden] */
} ref_layer;

typedef struct ref_model {
    ref_config cfg;
    float *embed;     /* [vocab, hidden] ([vocab, embed_dim] for OPT) */
    float *pos;       /* [n_positions, hidden] GPT-2 */
    float *out_norm, *out_norm_b;
    float *lm_head;   /* [vocab, hidden]; == embed when tied */
    float *lm_head_b; /* [vocab] (Phi, GPT-J) or NULL */
    float *embed_norm, *embed_norm_b; /* BLOOM's word_embeddings_layernorm, or NULL */
    float *project_in, *project_out;  /* OPT: [hidden, embed_dim], [embed_dim, hidden] or NULL */
    ref_layer *layers;
} ref_model;

typedef struct ref_outputs {
    int64_t T;
    float *logits;  /* [T, vocab] */
    float *probs;   /* [n_layers, n_heads, T, T] */
    float *resid;   /* [n_layers, T, hidden] */
    float *head_out; /* [n_layers, T, n_heads * head_dim] attention outputs before o_proj */
    int32_t *experts; /* [n_layers, T, top_k] chosen experts (MoE), best first */
} ref_outputs;

/* Whether layer l routes its tokens to experts (Mixtral: every layer). */
bool ref_layer_routed(const ref_config *cfg, int64_t l);

/* The width of one head's output (v_dim for DeepSeek, else head_dim). */
int64_t ref_head_out_width(const ref_config *cfg);

/* Fill m with deterministic pseudo-random weights (xorshift from seed). Returns false on OOM. */
bool ref_model_random(const ref_config *cfg, uint64_t seed, ref_model *m);
void ref_model_free(ref_model *m);

/* Write m as a Hugging Face folder in dir (created): config.json and model.safetensors with
 * the family's HF tensor names (GPT-2: fused Conv1D c_attn stored [in, out]), by
 * lp_synth_write_family. REF_LLAMA is written as Qwen3 with qk_norm, Qwen2 with qkv_bias,
 * Mistral with a window. False on error (message on stderr). */
bool ref_model_write_hf(const ref_model *m, const char *dir);

/* The same with every 2-D tensor stored as matrix_dtype (F32, F16 or BF16); round the model
 * first with ref_model_round_matrices so the reference sees the stored values. */
bool ref_model_write_hf_as(const ref_model *m, const char *dir, lp_dtype matrix_dtype);
void ref_model_round_matrices(ref_model *m, lp_dtype dtype);

/* The same model as llama.cpp's converter writes it: dir/model.gguf by
 * lp_synth_write_family_gguf. False with *expressible false when the family or variant has no
 * GGUF form (OPT, ...); false with *expressible true on any other error (message on stderr). */
bool ref_model_write_gguf_as(const ref_model *m, const char *dir, lp_dtype matrix_dtype,
                             bool *expressible);

/* Run the model on T tokens (causal, no padding). Returns false on OOM. */
bool ref_forward(const ref_model *m, const int32_t *tokens, int64_t T, ref_outputs *out);
void ref_outputs_free(ref_outputs *out);

#endif
