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
 * A deployment (estimate/README.md): set opts.deploy and read rep->deploy, one device[] entry
 * per pipeline stage.
 *
 *   opts.deploy.tp = 8;                                 // vLLM's placement
 *   opts.deploy.max_model_len = 131072;
 *   lp_est_hw_parse("h100-sxm", &opts.hw);              // its memory: 81,559 MiB
 *   opts.hw_set = true;
 *   lp_estimate(&arch, &opts, rep, &err);
 *   rep->deploy.device[0].weights_bytes, rep->deploy.max_concurrent_sequences
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

/* Hardware for the roofline (one device). */
typedef struct lp_est_hw {
    char name[48];
    char label[160]; /* where the figures come from */
    double flops_per_s;
    double bytes_per_s;
    uint64_t memory_bytes; /* device memory as the driver reports it; 0 unknown */
} lp_est_hw;

/* "h100-sxm", "a100-80gb", ... or "FLOPS,BYTES_PER_S[,MEMORY]" with optional k/M/G/T/P suffixes
 * on the rates and a size for the memory ("989T,3.35T,80GiB"). false on anything else. */
bool lp_est_hw_parse(const char *text, lp_est_hw *out);
/* The presets, for --help: index 0.. until NULL. */
const lp_est_hw *lp_est_hw_preset(int index);

/* This machine, measured as `loupe bench` would run on it: the f32 FMA peak of `threads`
 * threads (a register-only loop of independent fused multiply-adds, AVX2+FMA when the CPU has
 * them, else plain C; best of 3 rounds), the bandwidth of lp_est_read_bandwidth, and the
 * physical memory. Takes about half a second. threads <= 0 = every online CPU. */
lp_status lp_est_hw_measure(int threads, uint64_t read_bytes, lp_est_hw *out, lp_error *err);
/* The bandwidth of a read-only streaming pass over bytes (0 = 256 MiB, several times any
 * last-level cache) split into one contiguous slice per thread, all threads at once (a
 * matrix-vector product's access pattern): best of 12 rounds after a warm-up one, each timed
 * from the first thread's start to the last one's end. About 0.2 s. */
lp_status lp_est_read_bandwidth(int threads, uint64_t bytes, double *bytes_per_s, lp_error *err);
/* The same streaming pass over the caller's bytes (buf; read only), best of `rounds` timed
 * rounds after the warm-up one (0 = 12): the bandwidth of those very pages, at that moment (a
 * shared host's bandwidth moves: the same buffer read 34 and 59 GB/s a second apart here). */
lp_status lp_est_read_bandwidth_of(int threads, const void *buf, uint64_t bytes, int rounds,
                                   double *bytes_per_s, lp_error *err);

/* A link between the devices of a deployment: bytes per second in one direction per device. */
typedef struct lp_est_link {
    char name[32];
    double bytes_per_s;
} lp_est_link;

/* "NVLink4" (H100: 900 GB/s both ways = 450 GB/s each), "NVLink3" (A100: 300 GB/s), "PCIe5"
 * (x16: 64 GB/s), "PCIe4" (32 GB/s), or a number of GB/s ("200"). false on anything else. */
bool lp_est_link_parse(const char *text, lp_est_link *out);

/* A deployment: the model split over devices as vLLM places it (tensor parallel column/row
 * splits with vocab-parallel embedding and head, KV heads split by TP and replicated when TP
 * exceeds them, MoE experts split by TP or spread by expert parallelism over tp x dp ranks,
 * pipeline stages of consecutive layers). Any field set (non-zero) turns the device view on. */
typedef struct lp_est_deploy_options {
    int64_t tp, pp, dp, ep; /* 0 = not given: 1, or derived (dp from --devices, dp from --ep) */
    int64_t devices;        /* 0 = tp x pp x dp */
    double gpu_memory_utilization; /* fraction of device memory the engine may use; 0 = 0.9 */
    uint64_t device_memory; /* bytes per device; 0 = the hardware's */
    int64_t max_model_len;  /* tokens per sequence for the concurrency figure; 0 = seq */
    int64_t block_size;     /* paged-attention block in tokens; 0 = no paging granularity */
    lp_est_link link;
    bool link_set;
} lp_est_deploy_options;

#define LP_EST_MAX_DTYPES 8
#define LP_EST_MAX_WARNINGS 32
#define LP_EST_MAX_LAYER_KINDS 16

/* What the caller allows: the memory the fit search fills and the two gates a report fails. */
typedef struct lp_est_limits {
    uint64_t budget;     /* bytes for the fit search; 0 = no search */
    uint64_t max_memory; /* gates; 0 = off */
    uint64_t max_kv;
} lp_est_limits;

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
    lp_est_limits limits;
    int lm_head_tensor_present; /* -1 unknown, 0 no, 1 yes (from the weights, when given) */
    uint64_t stored_weight_bytes; /* tensor bytes of the weights beside the config; 0 unknown */
    int64_t stored_params;        /* their element count (buffers included); 0 unknown */
    bool strict; /* refuse (LP_ERR_UNSUPPORTED) a description read with assumed family rules */
    lp_est_deploy_options deploy;
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

typedef enum lp_est_bound {
    LP_EST_BOUND_COMPUTE,
    LP_EST_BOUND_MEMORY,
    LP_EST_BOUND_LINK,
    LP_EST_BOUND_COUNT
} lp_est_bound;

const char *lp_est_bound_name(lp_est_bound bound); /* "compute", "memory", "link" */

/* One phase (a prefill, a decode step) on one device: the FLOPs it computes, the bytes it moves
 * from memory and over the link, the time each takes at the peaks, and the largest of the three
 * (the bound; a roofline assumes they overlap). */
typedef struct lp_est_phase {
    double flops, bytes, link_bytes;
    double compute_seconds, memory_seconds, link_seconds;
    double seconds;
    lp_est_bound bound;
} lp_est_phase;

#define LP_EST_MAX_STAGES 64

/* One device role. Under the splits loupe accepts every TP and EP rank of a pipeline stage holds
 * the same amount, so a role is a stage: n_devices = tp x dp devices, tp_rank 0..tp-1 and
 * ep_rank 0..ep-1 alike. */
typedef struct lp_est_device {
    int64_t pp_stage, first_layer, n_layers;
    int64_t n_devices;
    bool holds_embedding, holds_lm_head; /* beyond its layers (tied + pp > 1: both on the last) */
    int64_t experts;  /* routed experts per MoE layer held here; 0 for a dense model */
    int64_t kv_heads; /* kv heads a layer holds here (the most of any layer); 0 for MLA (latent) */
    uint64_t weights_bytes;      /* at the first weight dtype */
    uint64_t kv_bytes_per_token; /* the stage's layers, each token up to the windows */
    uint64_t kv_cache_bytes;     /* at the report's batch x seq */
    uint64_t activations_bytes;
    uint64_t total_bytes;        /* weights + KV cache + activations */
    uint64_t kv_budget_bytes;    /* usable - weights - activations; 0 when nothing is left */
    bool fits;                   /* total within usable memory (false when memory is unknown) */
    lp_est_phase prefill, decode; /* with hardware: batch x seq tokens; one step of batch */
} lp_est_device;

typedef struct lp_est_deploy {
    bool present;
    int64_t tp, pp, dp, ep, devices;
    int64_t kv_head_replicas; /* TP ranks holding the same kv head (tp / kv heads when more) */
    int64_t vocab_padded;     /* vLLM pads the vocabulary to a multiple of 64 ... */
    int64_t vocab_per_rank;   /* ... and gives each TP rank padded / tp rows */
    int64_t moe_tp;           /* ways each expert is split: tp x dp without EP, 1 with EP */
    int n_devices;            /* entries in device[] (= pp) */
    lp_est_device device[LP_EST_MAX_STAGES];
    /* communication, per token and device */
    double tp_allreduce_bytes;   /* one TP all-reduce message: hidden x activation bytes */
    int64_t tp_allreduces_per_layer; /* 2 (after attention, after the FFN); 1 in a MoE layer
                                        with EP, whose experts send all-to-all instead */
    double pp_handoff_bytes;     /* hidden state + residual sent at each stage boundary */
    double ep_alltoall_bytes;    /* dispatch + combine leaving a device per MoE layer */
    lp_est_link link;
    bool link_set;
    /* serving (when device memory is known) */
    bool memory_known;
    double gpu_memory_utilization;
    uint64_t device_memory, usable_bytes;
    int64_t max_model_len, block_size;
    uint64_t kv_bytes_per_sequence;  /* one sequence of max_model_len on the busiest device */
    int64_t kv_blocks;               /* per device, the fewest of any stage; 0 without blocks */
    int64_t max_concurrent_sequences; /* per replica; -1 = no KV cache bounds it (encoder) */
    double max_concurrency;          /* before rounding down (vLLM logs it as "N.NNx") */
    /* one pass of a replica, its stages one after another (with hardware) */
    double prefill_seconds, decode_seconds;
    lp_est_bound prefill_bound, decode_bound; /* of the slowest stage */
} lp_est_deploy;

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

    lp_est_limits limits; /* as given */
    int64_t fit_max_seq;   /* largest seq at `batch` within budget; -1 unbounded; 0 none */
    int64_t fit_max_batch; /* largest batch at `seq` within budget; -1 unbounded; 0 none */

    bool gate_memory_exceeded;
    bool gate_kv_exceeded;

    lp_est_rope rope;
    lp_est_deploy deploy; /* present when opts.deploy asked for a device view */
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

/* Roofline times of one device running the whole model: a prefill of `tokens` tokens of one
 * sequence and one decode step at context `tokens`, weights stored as weight_dtype (NULL = the
 * config's), KV cache at the same type, activations f32 for f32 weights. logits_last_only: the
 * prefill computes the lm_head for its last position only, as loupe trace and bench do. This is
 * what trace/bench print next to their measured times (with a measured hw, lp_est_hw_measure). */
typedef struct lp_est_times {
    double prefill_flops, prefill_bytes, prefill_seconds;
    double decode_flops, decode_bytes, decode_seconds;
    bool prefill_compute_bound, decode_compute_bound;
} lp_est_times;

lp_status lp_est_predict_times(const lp_arch *arch, const lp_est_dtype *weight_dtype,
                               int64_t tokens, bool logits_last_only, const lp_est_hw *hw,
                               lp_est_times *out, lp_error *err);

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
