/* Synthetic models written by loupe itself, so every tool can be shown and tested offline: the
 * small Llama-style model of `loupe synth` whose attention heads are planted with known
 * behaviours, and models of any supported family with random (or caller-supplied) weights, for
 * `loupe bench` and the tests.
 *
 *   lp_synth_options opts;
 *   lp_synth_options_init(&opts);          // seed 1, f32, no fault
 *   opts.dtype = LP_DTYPE_BF16;
 *   lp_error err = {0};
 *   if (lp_synth_write("synth-model", &opts, &err) != LP_OK) ...   // creates the folder
 *   // synth-model/{config.json, model.safetensors, tokenizer.json, planted_heads.json}
 *
 *   size_t n;
 *   const lp_synth_head *heads = lp_synth_planted_heads(&n);       // layer, head, behaviour
 *
 *   lp_synth_spec spec;
 *   lp_synth_spec_init(&spec, LP_SYNTH_MIXTRAL);   // a tiny Mixtral; change any field
 *   spec.n_layers = 4;
 *   if (lp_synth_write_family("moe-model", &spec, &err) != LP_OK) ...
 *   // moe-model/{config.json, model.safetensors} with Hugging Face's names and keys
 *
 * The planted model (all weights computed from the design below; nothing is trained or copied):
 *   hidden 512, 2 layers, 8 heads of head_dim 64 (MHA), SwiGLU FFN of width 64 whose down
 *   projection is tiny, RMSNorm weights 1, rope_theta 1e6 (HF "halves" layout: pair i of a head
 *   is dims (i, i+32)), tied embeddings, a SentencePiece-style BPE vocabulary of whole words.
 *   With theta 1e6 and 32 pairs, pair i turns by theta_i = 1e6^(-i/32) rad per token: pairs
 *   0..15 rotate fast (position patterns), pairs 16..31 barely move over a few hundred tokens
 *   (content matching).
 *
 *   Residual stream layout (embedding rows have norm 1):
 *     [0, 32)    token identity: 0.8 * r_t, r_t a seeded random unit vector per token
 *     32         a constant 0.6 on every token
 *     33         BOS flag (0.8 on <s>, whose identity block is zero)
 *     [34, 66)   previous token's identity, written by layer 0's previous-token head
 *     66         0.8 on <s> and the token after it (same head), so every row has one norm
 *     [128, 512) scratch that planted non-copy heads and noise heads write into
 *
 *   Layer 0: previous-token head (q = a e^{-i theta_j} on the fast pairs, k = a: the score
 *   a^2 sum_j cos((m-n-1) theta_j) peaks at distance 1), sink head (k = BOS flag only), local
 *   head (peak at distance 0, Gaussian-like decay over a few tokens), uniform head (q = 0).
 *   Layer 1: induction head (q = current identity, k = previous-identity block on the slow
 *   pairs, plus a weaker BOS term so rows without an earlier match rest on <s>; its output
 *   copies the attended token's identity into [0, 32), so the tied classifier predicts it;
 *   32 channels of layer 1's FFN subtract the current token's identity, so a row with nothing
 *   to copy does not predict its own token).
 *   Every other head is noise: seeded random weights, labelled "noise".
 */
#ifndef LP_TRACE_SYNTH_H
#define LP_TRACE_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "inspect/inspect.h"

/* A prompt with a repeated sentence: the planted heads all show on it, and the second copy is
 * predicted token by token by the induction head. */
#define LP_SYNTH_DEMO_PROMPT                                         \
    "the cat sat on the mat and the dog ran to the park . "         \
    "the cat sat on the mat and the dog ran to the park ."

typedef enum lp_synth_behaviour {
    LP_SYNTH_PREV_TOKEN, /* attends to the previous token */
    LP_SYNTH_SINK,       /* attends to the first token (<s>) */
    LP_SYNTH_LOCAL,      /* attends to the last few tokens, peak on itself */
    LP_SYNTH_UNIFORM,    /* the same weight on every visible key */
    LP_SYNTH_INDUCTION,  /* attends to the token after an earlier copy of the current token */
    LP_SYNTH_NOISE,      /* random weights: no planted behaviour */
    LP_SYNTH_BEHAVIOUR_COUNT
} lp_synth_behaviour;

/* Deliberately wrong plantings, so tests can show that their checks fail on a broken model. */
typedef enum lp_synth_fault {
    LP_SYNTH_FAULT_NONE,
    LP_SYNTH_FAULT_PREV_NO_PHASE, /* previous-token head without its phase: peaks on itself */
    LP_SYNTH_FAULT_NO_PREV_WRITE, /* previous-token head writes nothing: no induction possible */
    LP_SYNTH_FAULT_COUNT
} lp_synth_fault;

typedef struct lp_synth_options {
    uint64_t seed;        /* token identities and noise heads; default 1 */
    lp_dtype dtype;       /* stored weights: LP_DTYPE_F32 (default), LP_DTYPE_BF16, LP_DTYPE_F16 */
    lp_synth_fault fault; /* default LP_SYNTH_FAULT_NONE */
} lp_synth_options;

typedef struct lp_synth_head {
    int layer;
    int head;
    lp_synth_behaviour behaviour;
} lp_synth_head;

void lp_synth_options_init(lp_synth_options *opts);

/* Write config.json, model.safetensors, tokenizer.json and planted_heads.json into out_dir
 * (opts NULL = the defaults), creating it (and missing parents) when needed. A folder that is
 * neither empty nor an earlier synth output (planted_heads.json with "generator": "loupe
 * synth") is refused with LP_ERR_USAGE and left untouched. Everything is built in memory
 * first, written under temporary names and renamed only when all four files are written; on a
 * failure the temporary files are removed. Output is bit-for-bit deterministic for given
 * options. */
lp_status lp_synth_write(const char *out_dir, const lp_synth_options *opts, lp_error *err);

/* ---- Checking a written model: are the planted heads found? ---------------------------------
 *
 *   lp_synth_report rep;
 *   if (lp_synth_check("synth-model", &rep, &err) != LP_OK) ...   // could not run
 *   if (!rep.passed) ...                                            // a planted head is missing
 *
 * Runs the real forward pass on LP_SYNTH_DEMO_PROMPT and measures every head with the trace's
 * own head statistics (lp_head_stats_from_rows). A planted head is found when it has the top
 * value of its statistic among the heads it competes with and passes an absolute bar:
 *   previous_token  prev_token, all heads, > 0.9
 *   sink            sink, all heads, > 0.9
 *   local           local_frac, heads whose prev_token and self are both <= 0.5, > 0.9
 *   uniform         entropy, heads of its layer; and max_prob within 1% of mean 1/(t+1)
 *   induction       mass, in the second copy of the sentence, on keys right after an earlier
 *                   copy of the query's token; all heads; > 0.5
 * and the predictions pass when every second-copy token that occurs once per copy is predicted
 * top-1 and more than half of all second-copy positions are; and the mean loss against the
 * next token must be below the loss against the current token. */

typedef struct lp_synth_finding {
    lp_synth_head head;    /* the planted head */
    const char *statistic; /* "prev_token", "sink", "local_frac", "entropy", "induction_mass" */
    double value;          /* its value for the planted head */
    double bar;            /* the absolute bar it must pass (entropy: none, 0) */
    double runner_up;      /* the best value among the competing heads */
    int runner_up_layer, runner_up_head; /* -1 when there is no competitor */
    double extra, extra_want; /* uniform: max_prob and mean 1/(t+1); else 0 */
    bool passed;
} lp_synth_finding;

typedef struct lp_synth_report {
    int64_t n_tokens;
    lp_synth_finding findings[8];
    size_t n_findings;
    int n_predicted, n_correct;       /* second-copy positions and top-1 hits */
    int n_unambiguous, n_unambiguous_correct; /* of those, tokens that occur once per copy */
    bool predictions_passed;
    /* Mean cross-entropy over the prompt against the next token and against the current one:
     * a model that predicts the current token better looks like a label or mask bug. */
    double loss_next, loss_current;
    bool alignment_passed; /* loss_next < loss_current */
    bool passed; /* every finding, the predictions and the alignment */
} lp_synth_report;

/* model_dir: a folder written by lp_synth_write (its tokenizer.json is used). LP_ERR_* when the
 * model cannot be opened or run; a missing head is not an error but rep->passed = false. */
lp_status lp_synth_check(const char *model_dir, lp_synth_report *rep, lp_error *err);

/* The planted heads, in (layer, head) order, noise heads left out. Static storage. */
const lp_synth_head *lp_synth_planted_heads(size_t *n_heads);

/* The whole words of the vocabulary ("the", "cat", ..., "."); each encodes to one "▁word"
 * token. Static storage. */
const char *const *lp_synth_words(size_t *n_words);

/* "previous_token", "sink", "local", "uniform", "induction", "noise". */
const char *lp_synth_behaviour_name(lp_synth_behaviour behaviour);

/* Shape of the written model, for callers that check it. */
enum { LP_SYNTH_HIDDEN = 512, LP_SYNTH_LAYERS = 2, LP_SYNTH_HEADS = 8, LP_SYNTH_HEAD_DIM = 64,
       LP_SYNTH_FFN = 64 };

/* ---- Models of any family ----------------------------------------------------------------------
 *
 * config.json and model.safetensors as Hugging Face writes them for the family: its tensor names
 * and layouts (GPT-2's fused Conv1D c_attn stored [in, out], Mixtral's w1/w2/w3 experts, Gemma 2's
 * four norms per layer, Qwen2's q/k/v biases) and its config keys. The weights come from
 * spec->fill, asked once per tensor in the order the file stores them, in the layout the forward
 * pass computes with: [rows = out features, cols = in features], row-major f32 (cols 0 for a
 * vector); the writer fuses and transposes where the family stores tensors so (GPT-2's c_attn is
 * asked for as its q, k and v parts). Without a fill, weights are uniform in [-scale, scale] from
 * a splitmix64 stream seeded by spec->seed, norm weights are the identity (1, or 0 where the
 * family computes 1 + w) and norm biases 0.
 *
 * Families differ by data: a table of tensors (name, role, shape, storage, which families have
 * it) and a table of config keys, in family.c. */

typedef enum lp_synth_family {
    LP_SYNTH_LLAMA,   /* RMSNorm, RoPE (halves), SwiGLU, GQA */
    LP_SYNTH_MISTRAL, /* llama with a sliding window on every layer */
    LP_SYNTH_QWEN2,   /* llama with q/k/v biases */
    LP_SYNTH_QWEN3,   /* llama with per-head q/k RMSNorm */
    LP_SYNTH_MIXTRAL, /* llama attention, top-k routed SwiGLU experts */
    LP_SYNTH_GEMMA,   /* (1 + w) RMSNorm, sqrt(hidden) embedding scale, GeGLU (tanh), tied */
    LP_SYNTH_GEMMA2,  /* Gemma + post norms, alternating sliding window, soft-caps */
    LP_SYNTH_GEMMA3,  /* Gemma 2 without soft-caps, q/k norms, a local RoPE base */
    LP_SYNTH_GPT2,    /* LayerNorm with biases, learned positions, gelu_new MLP, Conv1D, tied */
    LP_SYNTH_NEOX,    /* GPT-NeoX / Pythia: gpt_neox.* names, fused query_key_value in the per-head
                         [q_h, k_h, v_h] layout, LayerNorm biases, exact GELU MLP, rotary_pct,
                         use_parallel_residual (spec.parallel), untied embed_out */
    LP_SYNTH_PHI,     /* Phi-1/1.5/2: model.* names, one input LayerNorm per layer, q/k/v/dense and
                         fc1/fc2 with biases, gelu_new, partial_rotary_factor, biased lm_head */
    LP_SYNTH_GPTJ,    /* GPT-J: transformer.h.N names, ln_1 only, bias-free q/k/v/out_proj, biased
                         fc_in/fc_out and lm_head, rotary_dim (rotate-every-two pairs) */
    LP_SYNTH_STABLELM, /* StableLM: model.* names, LayerNorms with bias, SwiGLU, partial rotary;
                         spec.parallel (StableLM 2: no post_attention_layernorm), spec.qkv_bias
                         (use_qkv_bias), spec.qk_norm (qk_layernorm: q_layernorm.norms.H, one
                         bias-free LayerNorm per head) */
    LP_SYNTH_FALCON,  /* Falcon: transformer.* names, query_key_value grouped per kv head (7B's
                         multi-query: [q heads, k, v]), LayerNorms with bias, exact GELU MLP;
                         spec.new_arch (ln_attn + ln_mlp, num_kv_heads), spec.parallel
                         (parallel_attn), spec.qkv_bias (Falcon's "bias": every linear layer),
                         spec.alibi (ALiBi instead of RoPE); config keys as FalconConfig
                         publishes them (no ffn_hidden_size when it is 4 x hidden) */
    LP_SYNTH_BLOOM,   /* BLOOM: transformer.* names (Falcon's block names), word_embeddings_layernorm,
                         per-head query_key_value, biases everywhere, ALiBi, tied; n_layer and
                         n_head keys; FFN 4 x hidden */
    LP_SYNTH_OPT,     /* OPT: model.decoder.* names, learned positions with 2 extra rows, ReLU,
                         biases everywhere, tied; spec.post_norm (do_layer_norm_before false: no
                         final_layer_norm), spec.embed_dim (word_embed_proj_dim, project_in and
                         project_out when it is not hidden) */
    LP_SYNTH_PHI3,    /* Phi-3: Llama's names with fused self_attn.qkv_proj (q | k | v) and
                         mlp.gate_up_proj (gate | up); spec.orig_ctx > 0: longrope rope_scaling
                         with spec's short and long factors (one per rotated pair; NULL: 1 each)
                         and original_max_position_embeddings */
    LP_SYNTH_OLMO2,   /* OLMo 2: Llama's names without input_layernorm; post_attention_layernorm
                         and post_feedforward_layernorm on the sublayer outputs; q_norm [q_dim]
                         and k_norm [kv_dim] over the whole projections */
    LP_SYNTH_QWEN2_MOE, /* Qwen2's attention, routed experts plus a sigmoid-gated shared expert,
                           dense layers by decoder_sparse_step / mlp_only_layers */
    LP_SYNTH_QWEN3_MOE, /* Qwen3's attention (q/k norms), routed experts, no shared expert */
    LP_SYNTH_DEEPSEEK_V2, /* latent attention (q_proj or q_a/q_b, kv_a, kv_b), softmax router,
                             greedy or group-limited top-k, shared experts, leading dense layers */
    LP_SYNTH_DEEPSEEK_V3, /* V2 with a sigmoid router and e_score_correction_bias (noaux_tc) */
    LP_SYNTH_GPT_OSS, /* gpt-oss: q/k/v/o biases, per-head sinks, sliding and full layers
                         alternating (layer_types), a biased router over experts stored stacked
                         [n_experts, in, out] with gate and up interleaved, expert biases */
    LP_SYNTH_MPT,     /* MPT: transformer.blocks.N names, fused attn.Wqkv (q | k | v), exact GELU
                         up_proj/down_proj, ALiBi (spec.alibi_max) or, with spec.alibi false,
                         learned positions (transformer.wpe, n_ctx rows), tied; spec.qkv_bias is
                         !no_bias (every linear and LayerNorm), spec.qk_norm qk_ln (q_ln [q_dim],
                         k_ln [kv_dim]), spec.qkv_clip clip_qkv, spec.logit_scale; d_model,
                         n_heads, n_layers, expansion_ratio = ffn / hidden, nested attn_config */
    LP_SYNTH_STARCODER2, /* StarCoder2: model.* names, LayerNorms with bias, GQA, RoPE (halves), a
                            window on every layer, non-gated c_fc/c_proj MLP (gelu_pytorch_tanh);
                            spec.qkv_bias is use_bias (every linear layer); tied by default */
    LP_SYNTH_FAMILY_COUNT
} lp_synth_family;

/* One tensor the writer asks for. */
typedef struct lp_synth_tensor {
    const char *name;   /* as stored (GPT-2's fused c_attn for its q, k, v parts) */
    lp_role role;       /* inspect.h's role: LP_ROLE_ATTN_Q, LP_ROLE_FFN_NORM, ... */
    int layer;          /* -1 outside the layers */
    int expert;         /* -1 unless an expert's */
    bool is_bias;
    int64_t rows, cols; /* [out, in]; cols 0 for a vector */
} lp_synth_tensor;

/* Fill data[rows * max(cols, 1)] (zeroed beforehand) with tensor t's weights. */
typedef lp_status (*lp_synth_fill_fn)(void *ctx, const lp_synth_tensor *t, float *data,
                                      lp_error *err);

typedef struct lp_synth_spec {
    lp_synth_family family;
    int64_t vocab, hidden, n_layers, n_heads, n_kv_heads, head_dim, ffn;
    int64_t n_ctx;                /* max_position_embeddings (GPT-2: learned positions) */
    int64_t rope_dim;             /* rotated dims per head (partial rotary); 0 = head_dim */
    double norm_eps, rope_theta;
    bool tied;                    /* the classifier is the embedding (no lm_head tensor) */
    int64_t n_experts, top_k;     /* Mixtral, Qwen MoE */
    /* Qwen MoE: moe_intermediate_size (0 = ffn), shared_expert_intermediate_size (0 = no
     * shared expert), norm_topk_prob; layer l is routed when (l + 1) % sparse_step == 0 (0 is
     * taken as 1) and dense_layer[l] is false (mlp_only_layers), else a dense MLP of width ffn */
    int64_t expert_ffn, shared_ffn, sparse_step;
    bool norm_topk_prob;
    bool dense_layer[LP_MAX_LAYERS];
    /* DeepSeek: q_lora_rank (0 = a plain q_proj), kv_lora_rank, v_head_dim (qk_rope_head_dim is
     * rope_dim, qk_nope_head_dim head_dim - rope_dim); n_shared experts of expert_ffn; layers
     * below first_dense dense; n_groups / topk_groups (0 = greedy); routed_scaling (0 = 1) */
    int64_t q_lora, kv_lora, v_head_dim, n_shared, first_dense, n_groups, topk_groups;
    double routed_scaling;
    /* DeepSeek's rope_scaling yarn: factor (0 = none), original_max_position_embeddings, mscale
     * and mscale_all_dim (beta_fast 32, beta_slow 1) */
    double yarn_factor, yarn_mscale, yarn_mscale_all;
    int64_t yarn_orig;
    double swiglu_limit;          /* gpt-oss: the experts' clamp (swiglu_limit; 7 by default) */
    int64_t window;               /* sliding window: Mistral (every layer), Gemma 2 and 3 */
    int64_t sliding_pattern;      /* Gemma 3: layers l with (l + 1) % pattern == 0 are global */
    double local_theta;           /* Gemma 3: RoPE base of the sliding layers */
    double query_pre_attn_scalar; /* Gemma 2 and 3: scores scaled by its -1/2 power */
    double attn_softcap, final_softcap; /* Gemma 2 */
    bool parallel;                /* GPT-NeoX, StableLM: use_parallel_residual */
    bool qkv_bias, qk_norm;       /* StableLM: use_qkv_bias, qk_layernorm; Falcon: bias */
    bool new_arch, alibi;         /* Falcon: new_decoder_architecture, alibi */
    bool post_norm;               /* OPT: do_layer_norm_before false */
    double qkv_clip;              /* MPT clip_qkv; 0 = null */
    double logit_scale;           /* MPT logit_scale; 0 = null */
    double alibi_max;             /* MPT alibi_bias_max; 0 = MPT's default 8 */
    int64_t embed_dim;            /* OPT: word_embed_proj_dim; 0 = hidden */
    int64_t orig_ctx;             /* Phi-3: original_max_position_embeddings; 0 = no longrope */
    const double *short_factor, *long_factor; /* Phi-3 longrope: rope_dim / 2 each, or NULL */
    int64_t bos_id, eos_id;
    lp_dtype dtype;               /* matrices: F32, F16 or BF16 (rounded to nearest even) */
    lp_dtype vector_dtype;        /* norms and biases: F32, F16 or BF16 */
    uint64_t seed;                /* the random fill */
    double scale;                 /* the random fill: uniform in [-scale, scale] */
    lp_synth_fill_fn fill;        /* NULL = the random fill */
    void *fill_ctx;
} lp_synth_spec;

/* A tiny model of the family (vocab 64, hidden 32, 2 layers, 4 heads of 8, f32, seed 1, scale
 * 0.02) with the family's usual settings (Mixtral 4 experts top 2, Gemma windows of 16, Qwen MoE
 * 4 experts top 2 of width 16 and a shared expert of 48 for Qwen2-MoE, ...). */

/* Whether layer l of the spec has routed experts (every layer of Mixtral; Qwen MoE by
 * sparse_step and dense_layer). */
bool lp_synth_layer_routed(const lp_synth_spec *spec, int layer);
void lp_synth_spec_init(lp_synth_spec *spec, lp_synth_family family);

/* Write config.json and model.safetensors into out_dir, creating it (and missing parents) when
 * needed and replacing those two files when present; other files are left alone, so give each
 * model a folder of its own. Built in memory, written under temporary names and renamed only
 * when both are written. A spec its family cannot have (heads that do not divide, GPT-2 with
 * GQA, top_k > n_experts, a quant dtype, ...) is LP_ERR_USAGE naming the field; a fill's error
 * is returned as it is. */
lp_status lp_synth_write_family(const char *out_dir, const lp_synth_spec *spec, lp_error *err);

/* The same model (same spec, same weights) as llama.cpp's convert_hf_to_gguf.py writes it: one
 * out_dir/model.gguf with the family's GGUF architecture name ("llama" for Mistral and Mixtral,
 * "gptneox", "phi2", "deepseek2", "gpt-oss", ...), its metadata keys and tensor names, the
 * converter's layouts (Llama's q/k rows permuted to adjacent RoPE pairs, Gemma's norms stored
 * as 1 + w, q | k | v fused as attn_qkv where llama.cpp fuses them, experts stacked per layer,
 * DeepSeek's kv_b split into attn_k_b and attn_v_b, StableLM's per-head norms stacked) and a
 * byte-level BPE vocabulary of spec->vocab tokens (<unk> <s> </s>, then single characters).
 * Written like lp_synth_write_family. LP_ERR_UNSUPPORTED where llama.cpp has no architecture
 * for the spec (OPT; Falcon's sequential or ALiBi variants). */
lp_status lp_synth_write_family_gguf(const char *out_dir, const lp_synth_spec *spec,
                                     lp_error *err);

/* A tiny spec of the family a card or config describes (loupe synth --like): 2 layers of 4 heads
 * x 8, vocab 64, with the card's rules carried over: multi-head / multi-query / grouped (groups of
 * 2), the rotated fraction (even, at least 2 dims), tied or not, norm epsilon, RoPE base,
 * parallel or sequential, Falcon's new architecture and bias, StableLM's q/k norms and biases,
 * ALiBi, OPT's post-norm and projected embeddings (half the width), Mixtral's experts (at most
 * 4), Gemma 2's soft-caps and Gemma 3's window pattern, gpt-oss's clamp, window and YaRN.
 * LP_ERR_UNSUPPORTED for a family without a writer. */
lp_status lp_synth_spec_like(const lp_arch *arch, lp_synth_spec *spec, lp_error *err);

/* "llama", "mistral", "qwen2", "qwen3", "mixtral", "gemma", "gemma2", "gemma3", "gpt2",
 * "gpt_neox", "phi", "gptj", "stablelm", "falcon", "bloom", "opt", "phi3", "olmo2", "qwen2_moe",
 * "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss", "mpt", "starcoder2". */
const char *lp_synth_family_name(lp_synth_family family);

#endif
