/* The bound model behind lp_model: the block description every family is told apart by, per-layer
 * weight views (mmap-borrowed matrices, f32 copies of the small vectors) and the rope tables,
 * shared by model_load.c and forward.c. */
#ifndef LP_TRACE_MODEL_INTERNAL_H
#define LP_TRACE_MODEL_INTERNAL_H

#include "core/arena.h"
#include "trace/trace.h"

/* ---- the block description: what makes one family's layer differ from another's ------------
 *
 * forward.c runs one loop for every family; these values choose its branches. They come from the
 * arch alone (lp_block_of), except the fused-q/k/v layout, which also depends on how the file
 * stores the matrix (lp_qkv_layout_of). */

/* How the two sublayers meet the residual stream x. */
typedef enum lp_residual_kind {
    LP_RESIDUAL_SEQUENTIAL, /* x += attn(n1 x); x += ffn(n2 x)        Llama, GPT-2, OLMo 2, ... */
    LP_RESIDUAL_PARALLEL,   /* x += attn(n1 x) + ffn(n2 x)            GPT-NeoX, GPT-J, Phi, Falcon */
    LP_RESIDUAL_POST_NORM,  /* x = n1(x + attn x); x = n2(x + ffn x)  OPT with do_layer_norm_before
                               false */
    LP_RESIDUAL_KIND_COUNT
} lp_residual_kind;

/* Where a fused q/k/v projection keeps its rows. */
typedef enum lp_qkv_layout {
    LP_QKV_SEPARATE, /* three matrices */
    LP_QKV_CONCAT,   /* one matrix, rows q | k | v: GPT-2 c_attn, Phi-3 qkv_proj, MPT Wqkv, every
                        GGUF attn_qkv (llama.cpp's converters reorder the others into this) */
    LP_QKV_GROUPED,  /* rows per kv group g: [q of the group's heads, k_g, v_g]: Falcon's
                        query_key_value (one group = the 7B layout, one head per group = the per-
                        head [h][q, k, v] layout that GPT-NeoX and BLOOM store) */
    LP_QKV_LAYOUT_COUNT
} lp_qkv_layout;

/* Norms of q and k after the projection, before RoPE. Their kind (RMS or LayerNorm, bias or not)
 * is the arch's norm_kind, as in every family that has them. */
typedef enum lp_qk_norm_kind {
    LP_QK_NORM_NONE,
    LP_QK_NORM_SHARED, /* one [head_dim] norm applied to every head: Qwen3, Gemma 3, Phi */
    LP_QK_NORM_EACH,   /* a norm of its own per head, [n_heads, head_dim] / [n_kv, head_dim]:
                          StableLM 2, Cohere */
    LP_QK_NORM_WHOLE,  /* one norm over the whole projection, [q_dim] / [kv_dim]: OLMo 2 */
    LP_QK_NORM_KIND_COUNT
} lp_qk_norm_kind;

/* How a gated FFN combines its gate g and up u. */
typedef enum lp_glu_kind {
    LP_GLU_PLAIN,           /* act(g) * u with the arch's activation (SwiGLU, GeGLU) */
    LP_GLU_CLAMPED_SWIGLU,  /* gpt-oss: g = min(g, limit), u = clamp(u, -limit, limit),
                               (u + 1) * g * sigmoid(alpha g) */
    LP_GLU_KIND_COUNT
} lp_glu_kind;

typedef struct lp_block_desc {
    lp_residual_kind residual;
    bool input_norms;        /* n1, n2 before the sublayers (false: OLMo 2 norms only outputs) */
    bool shared_input_norm;  /* parallel with one norm feeding both branches (GPT-J, Phi, Falcon
                                7B, StableLM 2), else n2 is the FFN's own */
    bool post_attn_norm;     /* a norm on each sublayer's output before the add (Gemma 2/3
                                sandwich, OLMo 2) */
    bool post_ffn_norm;
    lp_qk_norm_kind qk_norm;
    lp_pos_kind positions;
    double alibi_scale;      /* ALiBi slopes are multiplied by this: 1, or 1/sqrt(head_dim) where
                                the family adds the bias before the softmax scale (Falcon) */
    double qkv_clip;         /* q, k, v clamped to [-c, c] (MPT clip_qkv); 0 = off */
    bool embed_norm;         /* a norm right after the embedding (BLOOM) */
    int64_t embed_dim;       /* width of the token embedding and of the classifier's input:
                                hidden, or OPT's word_embed_proj_dim with project_in/out */
    bool attn_sinks;         /* one learned logit per query head joins its softmax (gpt-oss) */
    lp_glu_kind glu;         /* how a gated FFN or expert combines gate and up */
    double glu_alpha, glu_limit; /* LP_GLU_CLAMPED_SWIGLU: sigmoid(alpha g), the clamp */
    bool gate_up_interleaved; /* a fused expert gate_up alternates gate and up outputs (gpt-oss
                                 gate_up_proj: gate = [..., ::2], up = [..., 1::2]); else the
                                 gate half, then the up half */
} lp_block_desc;

/* The description an arch implies; the one definition forward.c sizes its scratch by. */
lp_block_desc lp_block_of(const lp_arch *arch);

/* The layout a fused q/k/v matrix of this arch has in a file of this format. */
lp_qkv_layout lp_qkv_layout_of(const lp_arch *arch, lp_weights_format format);

/* ALiBi slopes of n_heads heads with the given maximum bias (BLOOM, MPT and llama.cpp use 8):
 * for the largest power of two p <= n_heads, head h < p has 2^(-max_bias (h + 1) / p); the rest
 * take the odd powers of the next step, 2^(-max_bias (2 (h - p) + 1) / (2 p)). */
void lp_alibi_slopes(int64_t n_heads, double max_bias, double *slopes);

typedef struct lp_norm_weights {
    float *weight; /* [n] or NULL (unweighted) */
    float *bias;   /* [n] or NULL */
    bool present;
} lp_norm_weights;

/* Expert groups of DeepSeek's group-limited routing a model may have (V3: 8). */
#define LP_FW_MAX_GROUPS 64

typedef struct lp_expert_weights {
    lp_matrix gate; /* [expert_ffn, hidden] */
    lp_matrix up;   /* [expert_ffn, hidden] */
    lp_matrix down; /* [hidden, expert_ffn] */
    lp_matrix gate_up; /* fused [2 expert_ffn, hidden] (gate_up_proj; gate and up unbound), in
                          the order block.gate_up_interleaved says */
    float *gate_bias, *up_bias, *gate_up_bias, *down_bias; /* or NULL (gpt-oss has them) */
} lp_expert_weights;

typedef struct lp_layer_weights {
    int64_t n_kv_heads;
    int64_t q_dim;  /* n_heads * head_dim */
    int64_t kv_dim; /* n_kv_heads * head_dim */
    int64_t window; /* keys seen including self; 0 = full causal */

    lp_norm_weights attn_norm;
    lp_qkv_layout qkv_layout;
    lp_matrix q, k, v;  /* [q_dim, hidden], [kv_dim, hidden] x2 */
    lp_matrix qkv;      /* fused [q_dim + 2 kv_dim, hidden] */
    float *q_bias, *k_bias, *v_bias; /* or NULL */
    float *qkv_bias;    /* fused [q_dim + 2 kv_dim] or NULL */
    /* q/k norm weights and biases as block.qk_norm shapes them: [head_dim] shared, [heads,
     * head_dim] each, [q_dim] / [kv_dim] whole; NULL when absent */
    float *q_norm, *k_norm, *q_norm_bias, *k_norm_bias;
    lp_matrix o;        /* [hidden, q_dim] (MLA: [hidden, n_heads * v_head_dim]) */
    float *o_bias;
    float *sinks;       /* [n_heads] learned sink logits (block.attn_sinks), else NULL */
    /* MLA (DeepSeek): q = q_b(norm(q_a x)) with q_lora_rank, else q (above) x, per head
     * [nope | rope]; kv_a x = [latent (kv_lora_rank) | k_rope (one shared head)]; kv_b
     * norm(latent) per head [k_nope | v]. */
    lp_matrix q_a, q_b, kv_a, kv_b;
    float *q_a_norm, *kv_a_norm;
    lp_matrix *k_b, *v_b; /* [n_heads] each: llama.cpp's split kv_b (attn_k_b stored [kv_lora,
                             nope] per head, transposed; attn_v_b [v, kv_lora]); NULL = kv_b */
    lp_norm_weights post_attn_norm;

    lp_norm_weights ffn_norm;
    bool fused_gate_up;
    lp_matrix gate, up, down; /* [ffn, hidden], [ffn, hidden], [hidden, ffn] */
    lp_matrix gate_up;        /* fused [2 ffn, hidden] */
    float *gate_bias, *up_bias, *down_bias;
    int64_t ffn_hidden;
    lp_norm_weights post_ffn_norm;

    bool moe;
    lp_matrix router;          /* [n_experts, hidden] */
    float *router_bias;
    float *score_bias;         /* [n_experts] DeepSeek V3's e_score_correction_bias: added to
                                  the scores for the choice only */
    lp_expert_weights *experts; /* [n_experts] */
    /* The always-on expert beside the routed ones (Qwen MoE's shared_expert, DeepSeek's
     * n_shared_experts as one MLP of their summed width); shared_ffn 0 = none. */
    lp_expert_weights shared;
    int64_t shared_ffn;
    float *shared_gate;        /* [hidden]: Qwen MoE scales the shared expert by
                                  sigmoid(shared_gate . x); NULL = ungated */
} lp_layer_weights;

/* The shape of layer l as the arch describes it: the one definition model_load.c binds tensors
 * to and forward.c sizes its scratch by (lp_forward_scratch_bytes takes an arch alone). */
typedef struct lp_layer_shape {
    int64_t n_kv_heads;
    int64_t q_dim;      /* n_heads * head_dim */
    int64_t kv_dim;     /* n_kv_heads * head_dim */
    int64_t ffn_hidden; /* dense width, or each expert's */
    int64_t shared_ffn; /* MoE layers: the shared expert's width, 0 = none */
    bool moe;
} lp_layer_shape;

lp_layer_shape lp_layer_shape_of(const lp_arch *arch, int layer);

struct lp_model {
    lp_arch arch;
    lp_block_desc block;
    const lp_weights *weights;
    lp_weights *owned_weights; /* closed by lp_model_close when we opened them */

    const lp_tensor *tok_embd;  /* [vocab, embed_dim] rows fetched per token */
    const lp_tensor *pos_embd;  /* [n_positions, hidden] or NULL */
    lp_norm_weights embed_norm;
    lp_norm_weights out_norm;
    lp_matrix lm_head;          /* [vocab, embed_dim] (the embedding when tied) */
    float *lm_head_bias;
    bool has_proj;              /* OPT: project_in [hidden, embed_dim], project_out [embed_dim,
                                   hidden] */
    lp_matrix project_in, project_out;
    float *alibi_slopes;        /* [n_heads], block.alibi_scale applied; NULL without ALiBi */
    lp_layer_weights *layers;   /* [n_layers] */

    bool renorm_topk;           /* mixing weights = softmax over the chosen experts */

    lp_block_list owned; /* every small vector we allocated */
};

/* mxfp4_pair.c: expert `expert`'s [rows, cols] matrix of role (EXPERT_GATE_UP, _GATE, _UP,
 * _DOWN) at a layer from gpt-oss's safetensors pair "<P>experts.<stem>_blocks" + "_scales" (P
 * the router's stem), repacked into an MXFP4 matrix whose data the caller frees (malloc'd;
 * model_load.c hands it to the model). *found = false (and LP_OK) when the
 * file has no such pair; a pair of the wrong dtype or shape, or half of one, is LP_ERR_FORMAT
 * naming the tensor. */
lp_status lp_mxfp4_pair_bind(lp_model *m, lp_role role, int layer, int expert, int64_t rows,
                             int64_t cols, lp_matrix *out, bool *found, lp_error *err);

/* inv_freq[rope_dim/2] for a call whose longest sequence is n_tokens (dynamic NTK and longrope's
 * choice of factors depend on it) and the cos/sin multiplier (YaRN's and longrope's attention
 * factor). local: Gemma 3's sliding-layer theta. */
lp_status lp_model_rope_freqs(const lp_model *model, int64_t n_tokens, bool local, float *inv_freq,
                              float *attn_factor, lp_error *err);

#endif
