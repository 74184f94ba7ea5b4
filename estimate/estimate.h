/* The analytic cost model behind `loupe estimate`: parameters, weight memory, KV cache, FLOPs,
 * roofline, memory fit and config audits, all from an lp_arch alone (no weights are read).
 *
 *   lp_arch arch;
 *   lp_error err = {0};
 *   if (lp_arch_load("llama-3-8b", &arch, &err) != LP_OK) ...
 *   lp_est_options opts;
 *   lp_est_options_init(&opts);
 *   opts.batch = 8;
 *   opts.seq = 8192;
 *   lp_est_dtype_parse("bf16", &opts.weight_dtypes[0]);
 *   opts.n_weight_dtypes = 1;
 *   lp_est_dtype_parse("fp8", &opts.kv_dtype);
 *   opts.kv_dtype_set = true;
 *   lp_est_report *rep = malloc(sizeof *rep);          // large: per-layer tables inside
 *   if (lp_estimate(&arch, &opts, rep, &err) != LP_OK) ...
 *   printf("%lld params, KV %llu bytes\n", (long long)rep->params.total,
 *          (unsigned long long)rep->kv.bytes);
 *   lp_est_print_text(stdout, &arch, rep, LP_EST_PRINT_PER_LAYER);
 *   json_t *doc = lp_est_to_json(&arch, rep, 0);      // caller json_decref()s
 *   free(rep);
 *
 * Conventions (the README's "loupe estimate" section has the formulas):
 * - Parameter and byte counts are exact int64/uint64 computed with overflow checks.
 * - FLOPs count matrix multiplies only, 2 per multiply-add, as doubles (exact below 2^53).
 * - A "decode step at context c" is one new token attending to c cached keys (itself included).
 */
#ifndef LP_ESTIMATE_ESTIMATE_H
#define LP_ESTIMATE_ESTIMATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "core/dtype.h"
#include "core/error.h"
#include "inspect/inspect.h"

/* Where a parameter lives. Attention-internal norms (q/k norms, MLA latent norms) count as
 * attention, as in the modules that own them; NORMS holds the block norms, the embedding norm
 * and the final norm. */
typedef enum lp_est_component {
    LP_EST_EMBED,          /* token embedding table (and OPT's project_in/out) */
    LP_EST_POS_EMBED,      /* learned absolute position table */
    LP_EST_ATTN,           /* q/k/v/o (or MLA) projections, biases, q/k norms */
    LP_EST_FFN,            /* dense feed-forward */
    LP_EST_EXPERTS,        /* routed experts (all of them in total, top-k in active) */
    LP_EST_SHARED_EXPERTS, /* always-on experts of MoE layers (and Qwen's shared gate) */
    LP_EST_ROUTER,         /* router matrices and score biases */
    LP_EST_NORMS,          /* per-block norms, embedding norm, final norm */
    LP_EST_LM_HEAD,        /* untied output projection (+ bias); 0 when tied */
    LP_EST_POOLER,         /* BERT-style encoders: the pooler's dense layer */
    LP_EST_COMPONENT_COUNT
} lp_est_component;

const char *lp_est_component_name(lp_est_component component); /* "attention", "experts", ... */

/* A storage type for weights or the KV cache: any lp_dtype, or "int4" (4 bits flat, no scales).
 * GGUF block types keep 1-D tensors (norms, biases) in f32, as llama.cpp does; int4 keeps them in
 * f16, as GPTQ/AWQ checkpoints do. */
typedef struct lp_est_dtype {
    char name[16];
    uint32_t block_elems;
    uint32_t block_bytes;
    bool is_block;         /* a GGUF block type */
    uint32_t vector_bytes; /* bytes per value of 1-D tensors; 0 = the dtype itself */
} lp_est_dtype;

/* false when the name is unknown (or a non-storage type such as bool). */
bool lp_est_dtype_parse(const char *name, lp_est_dtype *out);
double lp_est_dtype_bits(const lp_est_dtype *dtype);
/* Bytes of n values stored in rows of row_len values (rows padded to whole blocks). */
bool lp_est_dtype_bytes(const lp_est_dtype *dtype, uint64_t n_rows, uint64_t row_len,
                        uint64_t *bytes);

/* Hardware for the roofline. */
typedef struct lp_est_hw {
    char name[48];
    char label[128]; /* where the figures come from */
    double flops_per_s;
    double bytes_per_s;
} lp_est_hw;

/* "h100-sxm", "a100-80gb", ... or "FLOPS,BYTES_PER_S" with optional k/M/G/T/P suffixes
 * ("989T,3.35T"). false on anything else. */
bool lp_est_hw_parse(const char *text, lp_est_hw *out);
/* The presets, for --help: index 0.. until NULL. */
const lp_est_hw *lp_est_hw_preset(int index);

#define LP_EST_MAX_DTYPES 8
#define LP_EST_MAX_WARNINGS 32
#define LP_EST_MAX_LAYER_KINDS 16

typedef struct lp_est_options {
    int64_t batch;   /* 0 = default 1 */
    int64_t seq;     /* tokens per sequence; 0 = default n_ctx, or 4096 when unknown */
    int64_t context; /* decode context; 0 = seq */
    lp_est_dtype weight_dtypes[LP_EST_MAX_DTYPES];
    int n_weight_dtypes;   /* 0 = the config's storage dtype, else bf16 */
    lp_est_dtype kv_dtype;
    bool kv_dtype_set;     /* false = the first weight dtype if a plain float, else f16 */
    int64_t prefill_chunk; /* tokens whose activations are live at once; 0 = default 2048 */
    lp_est_hw hw;
    bool hw_set;
    uint64_t budget;     /* bytes for the fit search; 0 = no search */
    uint64_t max_memory; /* gates; 0 = off */
    uint64_t max_kv;
    int lm_head_tensor_present; /* -1 unknown, 0 no, 1 yes (from the weights, when given) */
    uint64_t stored_weight_bytes; /* tensor bytes of the weights beside the config; 0 unknown */
    int64_t stored_params;        /* their element count (buffers included); 0 unknown */
    bool strict; /* refuse (LP_ERR_UNSUPPORTED) a description read with assumed family rules */
} lp_est_options;

void lp_est_options_init(lp_est_options *opts);

typedef struct lp_est_layer {
    bool moe;
    int64_t window;           /* 0 = full attention */
    int64_t kv_heads;
    int64_t params;
    int64_t active_params;
    int64_t by_component[LP_EST_COMPONENT_COUNT];
    int64_t kv_values_per_token; /* K+V values cached per token (MLA: latent + rope key) */
    uint64_t kv_bytes_per_token; /* at the report's kv dtype */
    uint64_t kv_tokens;          /* tokens cached at the report's seq: min(seq, window) */
    uint64_t kv_bytes;           /* batch x kv_tokens x bytes per token */
    int64_t attn_qk_dim;         /* per head, for the score FLOPs */
    int64_t attn_v_dim;
    int64_t n_heads;
} lp_est_layer;

typedef struct lp_est_params {
    int64_t total;
    int64_t active;
    int64_t by_component[LP_EST_COMPONENT_COUNT];
    int64_t active_by_component[LP_EST_COMPONENT_COUNT];
    int64_t mtp; /* multi-token-prediction modules: not part of total */
    int64_t matrix_params; /* 2-D weights (the rest are vectors: norms, biases) */
    int64_t n_layers;
    lp_est_layer layers[LP_MAX_LAYERS];
} lp_est_params;

typedef struct lp_est_layer_kind {
    char label[128];
    int64_t n_layers;
    int64_t first_layer;
    int64_t params_per_layer;
    int64_t active_per_layer;
    uint64_t kv_bytes_per_token; /* per layer */
    int64_t window;
} lp_est_layer_kind;

typedef struct lp_est_flops {
    /* prefill of seq tokens for the whole batch */
    double prefill;             /* causal attention: what is really computed */
    double prefill_dense;       /* the same with dense (T x T) attention, as many tools print */
    double prefill_attn_proj;
    double prefill_attn_scores_causal; /* QK^T and the weighted sum of V */
    double prefill_attn_scores_dense;
    double prefill_ffn;
    double prefill_lm_head;
    /* one decode step of one sequence at `context` */
    double decode_per_token;
    double decode_attn_proj;
    double decode_attn_scores;
    double decode_ffn;
    double decode_lm_head;
    double training;            /* forward + backward over batch x seq tokens = 3 x prefill */
    /* arithmetic intensity (FLOP per byte moved) */
    double prefill_bytes;       /* weights touched + KV cache written */
    double decode_bytes;        /* per step of the whole batch: weights touched + KV read */
    double prefill_intensity;
    double decode_intensity;
    /* roofline (only when hw is set) */
    double prefill_seconds;
    bool prefill_compute_bound;
    double decode_seconds; /* one step of the whole batch */
    bool decode_compute_bound;
} lp_est_flops;

typedef struct lp_est_warning {
    char code[40];
    char msg[320];
} lp_est_warning;

typedef struct lp_est_rope_freq {
    double wavelength;        /* 2 pi / inv_freq, in tokens */
    double scaled_wavelength; /* after the configured scaling */
} lp_est_rope_freq;

#define LP_EST_MAX_ROPE_PAIRS 1024

typedef struct lp_est_rope {
    bool present;
    int64_t rope_dim;
    int64_t n_pairs;             /* rope_dim / 2 */
    int64_t n_stored;            /* freqs[] entries filled: min(n_pairs, LP_EST_MAX_ROPE_PAIRS) */
    double theta;
    int64_t trained_ctx;         /* original context (before scaling) */
    int64_t target_ctx;          /* context the scaling aims at (n_ctx when larger) */
    int64_t pairs_no_rotation;   /* wavelength > trained_ctx */
    int64_t pairs_no_rotation_scaled; /* scaled wavelength > target_ctx */
    int64_t pairs_changed;       /* scaled wavelength differs by more than 0.1% */
    bool scaling_modelled;       /* false for longrope (per-dimension factors not in lp_arch) */
    lp_est_rope_freq freqs[LP_EST_MAX_ROPE_PAIRS];
} lp_est_rope;

typedef struct lp_est_report {
    /* the settings actually used, defaults filled in */
    int64_t batch;
    int64_t seq;
    int64_t context;
    int64_t prefill_chunk;
    bool seq_defaulted;
    bool batch_defaulted;
    bool weight_dtype_defaulted;
    bool kv_dtype_defaulted;
    lp_est_dtype weight_dtypes[LP_EST_MAX_DTYPES];
    int n_weight_dtypes;
    lp_est_dtype kv_dtype;
    lp_est_dtype act_dtype;

    lp_est_params params;
    lp_est_layer_kind kinds[LP_EST_MAX_LAYER_KINDS];
    int n_kinds; /* more distinct kinds than the table holds are merged into the last */

    uint64_t weight_bytes[LP_EST_MAX_DTYPES]; /* one per weight dtype */
    uint64_t weight_bytes_experts;            /* routed experts' share, first dtype */
    uint64_t stored_weight_bytes;             /* as stored in the given weights; 0 unknown */
    int64_t stored_params;
    uint64_t activation_bytes;
    uint64_t total_bytes; /* weights (first dtype) + KV cache + activations */

    struct {
        uint64_t bytes_per_token;            /* all layers: cost of each token up to the windows */
        uint64_t bytes_per_token_full_layers; /* layers without a window: the cost beyond them */
        uint64_t bytes;                      /* batch x seq, windows applied per layer */
    } kv;

    lp_est_flops flops;
    lp_est_hw hw;
    bool hw_set;

    uint64_t budget;
    int64_t fit_max_seq;   /* largest seq at `batch` within budget; -1 unbounded; 0 none */
    int64_t fit_max_batch; /* largest batch at `seq` within budget; -1 unbounded; 0 none */

    uint64_t max_memory;
    uint64_t max_kv;
    bool gate_memory_exceeded;
    bool gate_kv_exceeded;

    lp_est_rope rope;
    lp_est_warning warnings[LP_EST_MAX_WARNINGS];
    int n_warnings;
} lp_est_report;

/* Parameter counts alone: totals, by component, per layer (out is fully overwritten). */
lp_status lp_est_count_params(const lp_arch *arch, lp_est_params *out, lp_error *err);

/* Weight bytes for one dtype: matrices at the dtype (rows padded to whole blocks), 1-D tensors
 * at the dtype, or f32 for GGUF block types. experts_bytes (optional) gets the routed experts'
 * share. */
lp_status lp_est_weight_bytes(const lp_arch *arch, const lp_est_dtype *dtype, uint64_t *bytes,
                              uint64_t *experts_bytes, lp_error *err);

/* KV cache bytes for batch sequences of seq tokens, summed layer by layer. */
lp_status lp_est_kv_bytes(const lp_arch *arch, const lp_est_dtype *kv_dtype, int64_t batch,
                          int64_t seq, uint64_t *bytes, lp_error *err);

/* Everything; out is fully overwritten. Fails (LP_ERR_RANGE) when batch/seq overflow. */
lp_status lp_estimate(const lp_arch *arch, const lp_est_options *opts, lp_est_report *out,
                      lp_error *err);

/* Weights + KV + activations at (batch, seq) for the report's dtypes; false on overflow. */
bool lp_est_memory_at(const lp_arch *arch, const lp_est_report *rep, int64_t batch, int64_t seq,
                      uint64_t *bytes);

enum { LP_EST_PRINT_PER_LAYER = 1, LP_EST_PRINT_ROPE = 2 };

/* The human report: aligned tables with units. */
void lp_est_print_text(FILE *out, const lp_arch *arch, const lp_est_report *rep, int flags);
/* Several models side by side (key figures only). */
void lp_est_print_side_by_side(FILE *out, const lp_arch *const *archs,
                               const lp_est_report *const *reps, int n);
/* The --json document (keys in the README's "loupe estimate" section); NULL on allocation
 * failure. */
json_t *lp_est_to_json(const lp_arch *arch, const lp_est_report *rep, int flags);

#endif
