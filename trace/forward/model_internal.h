/* The bound model behind lp_model: per-layer weight views (mmap-borrowed matrices, f32 copies of
 * the small vectors) and the rope tables, shared by model_load.c and forward.c. */
#ifndef LP_TRACE_MODEL_INTERNAL_H
#define LP_TRACE_MODEL_INTERNAL_H

#include "trace/trace.h"

typedef struct lp_norm_weights {
    float *weight; /* [n] or NULL (unweighted) */
    float *bias;   /* [n] or NULL */
    bool present;
} lp_norm_weights;

typedef struct lp_expert_weights {
    lp_matrix gate; /* [expert_ffn, hidden] */
    lp_matrix up;   /* [expert_ffn, hidden] */
    lp_matrix down; /* [hidden, expert_ffn] */
} lp_expert_weights;

typedef struct lp_layer_weights {
    int64_t n_kv_heads;
    int64_t q_dim;  /* n_heads * head_dim */
    int64_t kv_dim; /* n_kv_heads * head_dim */
    int64_t window; /* keys seen including self; 0 = full causal */

    lp_norm_weights attn_norm;
    bool fused_qkv;
    lp_matrix q, k, v;  /* [q_dim, hidden], [kv_dim, hidden] x2 */
    lp_matrix qkv;      /* fused [q_dim + 2 kv_dim, hidden] */
    float *q_bias, *k_bias, *v_bias; /* or NULL */
    float *qkv_bias;    /* fused [q_dim + 2 kv_dim] or NULL */
    float *q_norm, *k_norm; /* per-head RMSNorm weights [head_dim] (qk_norm) or NULL */
    lp_matrix o;        /* [hidden, q_dim] */
    float *o_bias;
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
    lp_expert_weights *experts; /* [n_experts] */
} lp_layer_weights;

/* The shape of layer l as the arch describes it: the one definition model_load.c binds tensors
 * to and forward.c sizes its scratch by (lp_forward_scratch_bytes takes an arch alone). */
typedef struct lp_layer_shape {
    int64_t n_kv_heads;
    int64_t q_dim;      /* n_heads * head_dim */
    int64_t kv_dim;     /* n_kv_heads * head_dim */
    int64_t ffn_hidden; /* dense width, or each expert's */
    bool moe;
} lp_layer_shape;

lp_layer_shape lp_layer_shape_of(const lp_arch *arch, int layer);

struct lp_model {
    lp_arch arch;
    const lp_weights *weights;
    lp_weights *owned_weights; /* closed by lp_model_close when we opened them */

    const lp_tensor *tok_embd;  /* [vocab, hidden] rows fetched per token */
    const lp_tensor *pos_embd;  /* [n_positions, hidden] or NULL */
    lp_norm_weights embed_norm;
    lp_norm_weights out_norm;
    lp_matrix lm_head;          /* [vocab, hidden] (the embedding when tied) */
    float *lm_head_bias;
    lp_layer_weights *layers;   /* [n_layers] */

    bool renorm_topk;           /* mixing weights = softmax over the chosen experts */

    void **owned; /* every small f32 vector we allocated */
    size_t n_owned, cap_owned;
};

/* inv_freq[rope_dim/2] for a sequence of n_tokens (dynamic NTK depends on it) and the cos/sin
 * multiplier (YaRN's attention factor). local: Gemma 3's sliding-layer theta. */
lp_status lp_model_rope_freqs(const lp_model *model, int64_t n_tokens, bool local, float *inv_freq,
                              float *attn_factor, lp_error *err);

#endif
