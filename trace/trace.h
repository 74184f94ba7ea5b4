/* The instrumented forward pass: a runnable model and observers at named sites. The SQLite trace
 * store (trace/store/store.h) and the leak checker (trace/leak/leak.h) are two such observers.
 *
 *   lp_model *model;
 *   if (lp_model_open("stories260K.gguf", &model, &err) != LP_OK) ...   // any lp_weights_open path
 *
 *   // Plain pass: no observer, nothing recorded.
 *   int32_t ids[] = {1, 403, 407};
 *   lp_batch batch = lp_batch_single(ids, 3);
 *   lp_forward_opts opts;
 *   lp_forward_opts_init(&opts);
 *   lp_forward(model, &batch, &opts, &err);
 *
 *   lp_model_close(model);
 *
 *   // Your own observer: say which sites you want, receive borrowed views of them.
 *   static bool want(void *ctx, const lp_site *site) { return site->kind == LP_SITE_RESID; }
 *   static lp_status observe(void *ctx, const lp_site *site, const lp_view *view, lp_error *err)
 *   { ... view->data[r * view->stride + c] for r < view->rows, c < view->cols ... }
 *   lp_observer obs = {ctx, want, observe};
 *
 * Sites, in the order the pass reaches them (per layer; within a layer each site for batch item
 * 0, 1, ... in turn, since the items are computed together):
 *   EMBED        layer -1, head -1: [T, hidden] the input of layer 0 (embedding, scaled, plus
 *                learned positions)
 *   ATTN_PROBS   layer l, head h: [T, T] exact probabilities, 0 on masked cells (row_stats too)
 *   ATTN_STATS   layer l, head h: no matrix (data NULL); row_stats[T] per query row
 *   HEAD_OUTPUT  layer l, head h: [T, head_dim] the head's attention output, before o_proj
 *   ATTN_OUT     layer l: [T, hidden] attention block output (after o_proj and any post norm),
 *                before the residual add
 *   ROUTER       layer l (MoE layers only): [T, n_experts] router softmax over all experts, and
 *                view->router with the chosen experts and their weights
 *   FFN_OUT      layer l: [T, hidden] FFN/MoE output (after any post norm), before the residual add
 *   RESID        layer l: [T, hidden] the residual stream after layer l
 *   LOGITS       layer -1: [rows, vocab] classifier output (after any soft-cap) for positions
 *                row0 .. row0+rows-1; may arrive in several consecutive chunks
 * Views are borrowed: valid only during the observe() call. T = batch->n_tokens (padding
 * included); padded query rows are fully masked (probabilities 0, row_sum 0).
 *
 * Positions: in batch item b, token t sits at RoPE/learned position t - pad_left[b] (Hugging
 * Face's cumsum-of-attention-mask convention; padding tokens get position 0). The mask works on
 * indices t (trace/kernels/mask.h), which for real tokens differ exactly as positions do.
 *
 * Determinism: for a given thread count the pass is bit-for-bit repeatable (static partitions,
 * no atomics in sums).
 */
#ifndef LP_TRACE_TRACE_H
#define LP_TRACE_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "inspect/inspect.h"
#include "trace/kernels/kernels.h"
#include "trace/kernels/mask.h"

/* ---------------------------------------------------------------------------------------------
 * A runnable model: lp_weights bound to the arch's computation graph.
 */

typedef struct lp_model lp_model;

/* Open PATH with lp_weights_open (folder, .safetensors, .gguf, llama2.c .bin), take its arch and
 * bind every tensor the family needs; a missing tensor or a shape that disagrees with the arch is
 * LP_ERR_FORMAT naming the tensor, an unsupported feature (MLA, ALiBi, ...) LP_ERR_UNSUPPORTED.
 * Only norms and biases (1-D, small) are converted to f32 up front; matrices stay in the mmap. */
lp_status lp_model_open(const char *path, lp_model **out, lp_error *err);

/* Bind already-open weights; arch NULL = lp_weights_arch(weights). The model borrows weights
 * (close the model before the weights) and copies arch. */
lp_status lp_model_from_weights(const lp_weights *weights, const lp_arch *arch, lp_model **out,
                                lp_error *err);

/* Closes the weights too when the model opened them. NULL is fine. */
void lp_model_close(lp_model *model);

const lp_arch *lp_model_arch(const lp_model *model);       /* borrowed */
const lp_weights *lp_model_weights(const lp_model *model); /* borrowed */

/* ---------------------------------------------------------------------------------------------
 * Observers.
 */

typedef enum lp_site_kind {
    LP_SITE_EMBED,
    LP_SITE_ATTN_PROBS,
    LP_SITE_ATTN_STATS,
    LP_SITE_HEAD_OUTPUT,
    LP_SITE_ATTN_OUT,
    LP_SITE_ROUTER,
    LP_SITE_FFN_OUT,
    LP_SITE_RESID,
    LP_SITE_LOGITS,
    LP_SITE_KIND_COUNT
} lp_site_kind;

typedef struct lp_site {
    lp_site_kind kind;
    int64_t batch; /* batch item */
    int layer;     /* -1 for EMBED and LOGITS */
    int head;      /* query head for per-head sites, else -1 */
} lp_site;

/* Expert routing of one MoE layer for T tokens. */
typedef struct lp_router_view {
    int64_t n_experts;
    int64_t top_k;
    const int32_t *experts; /* [T, top_k] chosen experts, best first */
    const float *weights;   /* [T, top_k] their mixing weights (softmax over the chosen) */
} lp_router_view;

typedef struct lp_view {
    const float *data; /* [rows, cols] with row stride `stride` floats; NULL for ATTN_STATS */
    int64_t rows;
    int64_t cols;
    int64_t stride;
    int64_t row0;                        /* index of the first row (LOGITS chunks); else 0 */
    const lp_attn_row_stats *row_stats;  /* ATTN_PROBS and ATTN_STATS: [rows] */
    const lp_router_view *router;        /* ROUTER only */
} lp_view;

typedef struct lp_observer {
    void *ctx;
    /* Asked once per site before computing anything only it needs; NULL want = wants nothing. */
    bool (*want)(void *ctx, const lp_site *site);
    /* A non-OK status stops the pass and is returned by lp_forward with the observer's error. */
    lp_status (*observe)(void *ctx, const lp_site *site, const lp_view *view, lp_error *err);
} lp_observer;

/* Interventions: like an observer, but the data at the site is writable and what the hook leaves
 * there is what the pass goes on with (TransformerLens hooks, nnsight interventions). Editable
 * sites: EMBED, HEAD_OUTPUT (the head's head_dim slice entering o_proj: zero it and the head is
 * ablated, o_proj's bias stays), ATTN_OUT, FFN_OUT, RESID. The edit runs before the observer
 * sees the site, so observers see the edited data. The pass does not know what a hook is for.
 *
 *   static bool want(void *ctx, const lp_site *s)
 *   { return s->kind == LP_SITE_HEAD_OUTPUT && s->layer == 1 && s->head == 5; }
 *   static lp_status zero(void *ctx, const lp_site *s, float *data, int64_t rows, int64_t cols,
 *                         int64_t stride, lp_error *err)
 *   { for (r < rows) memset(data + r * stride, 0, cols * sizeof *data); return LP_OK; }
 *   lp_intervention iv = {NULL, want, zero};
 *   opts.intervention = &iv;
 */
typedef struct lp_intervention {
    void *ctx;
    bool (*want)(void *ctx, const lp_site *site); /* NULL = edits nothing */
    /* data [rows, cols], row stride `stride`, writable; a non-OK status stops the pass. */
    lp_status (*edit)(void *ctx, const lp_site *site, float *data, int64_t rows, int64_t cols,
                      int64_t stride, lp_error *err);
} lp_intervention;

/* ---------------------------------------------------------------------------------------------
 * The forward pass.
 */

/* n_seqs sequences of n_tokens each (padding included), processed together: their rows are
 * stacked for the linear layers (GEMMs over n_seqs * n_tokens rows, at most 2^20), while
 * attention, positions and masks stay per sequence, so each computes what it computes alone. */
typedef struct lp_batch {
    int64_t n_seqs;
    int64_t n_tokens;
    const int32_t *tokens;    /* [n_seqs, n_tokens]; padding cells may hold any valid id */
    const int64_t *pad_left;  /* [n_seqs] padding tokens at the start, or NULL = none */
    const int64_t *pad_right; /* [n_seqs] padding tokens at the end, or NULL = none */
} lp_batch;

static inline lp_batch lp_batch_single(const int32_t *tokens, int64_t n_tokens)
{
    lp_batch b = {1, n_tokens, tokens, NULL, NULL};
    return b;
}

typedef struct lp_forward_opts {
    const lp_observer *observer; /* NULL = the plain pass */
    lp_pool *pool;               /* worker threads; NULL = single-threaded */
    lp_mask_fault mask_fault;    /* deliberately broken mask (leak checker); default NONE */
    bool sliding_window;         /* honour arch.layer_window (default true) */
    int64_t window_override;     /* > 0: this window on every layer instead (tests) */
    int64_t local_window;        /* row_stats.local counts keys with q - k < this (default 8) */
    bool skip_sparsity;          /* head statistics without keys50 .. low_mass (left 0): for
                                    timing what they cost (loupe bench --attention) */
    bool logits_last_only;       /* compute logits for the last position only */
    const lp_intervention *intervention; /* NULL = none */
    /* Resume at layer start_layer (> 0) from start_resid [n_seqs, n_tokens, hidden], the
     * residual stream entering it (as RESID of layer start_layer - 1 gave it): earlier layers
     * and EMBED are skipped, so a caller that stored a clean run recomputes only what an edit
     * at or after start_layer can change. 0 = the whole pass. */
    int start_layer;
    const float *start_resid;
    /* Progress, called after each layer of each batch item; NULL = none. */
    void (*progress)(void *ctx, int64_t batch, int layer, int n_layers);
    void *progress_ctx;
    /* One-row products of the layers (decode steps, one-token calls) with Q8_0, Q4_K or MXFP4
     * weights read x quantized to int8 (lp_matvec_int8), as llama.cpp generates: faster there,
     * at a rounding of a few 1e-4 of each product; the LM head keeps float x. Default false:
     * float x, so a decode step computes what a prefill computes (trace/README.md, "int8
     * activations"). */
    bool int8_activations;
} lp_forward_opts;

void lp_forward_opts_init(lp_forward_opts *opts);

/* The classifier alone: rows x [rows, hidden] of a residual stream through the final norm (and
 * OPT's project_out), the LM head and any final soft-cap into logits [rows, vocab], the same
 * kernels the pass uses (the logit lens: RESID of the last layer gives the pass's own logits). */
lp_status lp_model_unembed(const lp_model *model, const float *x, int64_t rows, lp_pool *pool,
                           float *logits, lp_error *err);

/* Run the pass. Token ids must be < vocab_size and n_tokens <= a bound derived from the arch
 * (learned position tables) and memory; violations are LP_ERR_RANGE naming the value. The last
 * pass's scratch (lp_forward_scratch_bytes, maps included) is kept for the next one, so repeated
 * passes do not page-fault it in again; the process holds it until it exits. */
lp_status lp_forward(const lp_model *model, const lp_batch *batch, const lp_forward_opts *opts,
                     lp_error *err);

/* The checks lp_forward makes before computing anything (token ids, padding, learned position
 * table length), so callers can refuse bad input before recording anything. */
lp_status lp_forward_check(const lp_model *model, const lp_batch *batch, lp_error *err);

/* Bytes of scratch lp_forward allocates for a sequence of n_tokens on n_threads threads: one
 * arena, sized up front, holding the residual stream and sublayer buffers of the widest layer,
 * row statistics, a logits chunk, MoE routing and, when attention_maps (an observer that wants
 * ATTN_PROBS, as loupe trace's default --maps f16 does), one [T, T] f32 probability slot per
 * thread (at most one per head). Weights are not counted: they stay in the mmap. Needs only the
 * arch, so a config can be sized before any weights exist:
 *   uint64_t bytes = lp_forward_scratch_bytes(&arch, 4096, 8, true);
 * 0 when the arch lacks a dimension (layers, heads, head_dim, hidden, vocab), n_tokens is
 * outside 1 .. 2^20, n_threads < 1, or the size overflows. */
uint64_t lp_forward_scratch_bytes(const lp_arch *arch, int64_t n_tokens, int n_threads,
                                  bool attention_maps);

/* ---------------------------------------------------------------------------------------------
 * The KV cache and incremental decoding (trace/forward/kv_cache.c, trace/forward/decode.c).
 *
 *   lp_kv_cache *kv;
 *   lp_kv_cache_create(model, T + N, LP_DTYPE_INVALID, &opts, LP_KV_FAULT_NONE, &kv, &err);
 *   lp_forward_cached(model, kv, prompt, T, &opts, &err);   // prefill: positions 0 .. T-1
 *   lp_forward_cached(model, kv, &next, 1, &opts, &err);    // decode: position T, against T keys
 *   lp_kv_cache_destroy(kv);
 *
 * Layout per layer [n_kv_heads, slots, head_dim] in the cache dtype (f32, f16, bf16 or q8_0, whose
 * rows are ceil(head_dim / 32) blocks of 34 bytes); slots = ctx, or for a sliding-window layer
 * min(ctx, window) used as a ring (position p in slot p % window), as vLLM and llama.cpp keep
 * it. New keys are written into the cache before the new queries attend, so every query reads the
 * keys at the cache's precision. In lp_forward_cached the sites carry rows for the new tokens
 * only: view->row0 is the absolute position of the first, ATTN_PROBS is [n_new, len + n_new]
 * (bottom-right causal: row r sits at position row0 + r), LOGITS rows are positions row0 + r.
 */

typedef struct lp_kv_cache lp_kv_cache;

/* Deliberately broken caches, so `loupe leak`'s decode check can prove it catches each. */
typedef enum lp_kv_fault {
    LP_KV_FAULT_NONE,
    LP_KV_FAULT_CACHE_OFF_BY_ONE, /* a decode step writes its K/V one slot late */
    LP_KV_FAULT_ROPE_STALE,       /* the decode position is not advanced */
    LP_KV_FAULT_MASK_TOP_LEFT,    /* the causal mask aligned top-left when n_q != n_k */
    LP_KV_FAULT_COUNT
} lp_kv_fault;

const char *lp_kv_fault_name(lp_kv_fault fault);        /* "cache-off-by-one", ... */
lp_kv_fault lp_kv_fault_from_name(const char *name);    /* COUNT when unknown */

/* Whether lp_forward_opts.int8_activations changes anything for this model: some weight of a
 * layer that a one-row product reads (attention, MLP, the first expert) is Q8_0, Q4_K or
 * MXFP4. */
bool lp_model_int8_matvec(const lp_model *model);

/* The default cache dtype: f16 for quantized weights, else the weights' dtype (f32, f16, bf16). */
lp_dtype lp_kv_default_dtype(const lp_model *model);

/* A cache for ctx positions. dtype INVALID = lp_kv_default_dtype; others than f32/f16/bf16/q8_0
 * are LP_ERR_UNSUPPORTED. opts (NULL = defaults) gives the windows (sliding_window,
 * window_override) the later calls must use too. Every allocation is checked. */
lp_status lp_kv_cache_create(const lp_model *model, int64_t ctx, lp_dtype dtype,
                             const lp_forward_opts *opts, lp_kv_fault fault, lp_kv_cache **out,
                             lp_error *err);
void lp_kv_cache_destroy(lp_kv_cache *cache); /* NULL is fine */
int64_t lp_kv_cache_len(const lp_kv_cache *cache);   /* positions processed so far */
int64_t lp_kv_cache_ctx(const lp_kv_cache *cache);
lp_dtype lp_kv_cache_dtype(const lp_kv_cache *cache);
uint64_t lp_kv_cache_bytes(const lp_kv_cache *cache); /* K and V of every layer, as allocated */
/* The length at which longrope's switch to its long factors rebuilt the cache (the positions
 * before it recomputed with the long factors), -1 when it did not. */
int64_t lp_kv_cache_rebuilt_at(const lp_kv_cache *cache);

/* n new tokens of one sequence at positions len .. len+n-1, attending to the cache and to each
 * other; their K/V join the cache. len + n must not exceed the cache's ctx (LP_ERR_RANGE). */
lp_status lp_forward_cached(const lp_model *model, lp_kv_cache *cache, const int32_t *tokens,
                            int64_t n, const lp_forward_opts *opts, lp_error *err);

/* Longrope's switch (Phi-3): a call whose sequence is longer than this length rotates every one
 * of its positions with the long factors, a shorter one with the short factors, as transformers
 * picks the set per forward call; lp_forward_cached rebuilds the cache when it crosses it. 0 when
 * the model's RoPE has no such switch. */
int64_t lp_forward_rope_switch_len(const lp_model *model);

/* Generation: prefill, then one decode step per new token, the last one fed through too, so all
 * T + N positions have been processed. Greedy (argmax, ties to the lower id) when temperature
 * <= 0; else softmax(logits / temperature) restricted to the top_k best (0 = all) and to the
 * smallest set whose probability reaches top_p (1 = all), sampled with a generator seeded by
 * seed (repeatable). */
typedef struct lp_generate_opts {
    int64_t n_new;
    double temperature;
    int64_t top_k;
    double top_p;
    uint64_t seed;
    int32_t stop_id; /* >= 0: stop after this token was generated (and fed through) */
    lp_dtype kv_dtype;  /* INVALID = lp_kv_default_dtype */
    lp_kv_fault fault;
} lp_generate_opts;

void lp_generate_opts_init(lp_generate_opts *opts);

/* out[T + n_new] receives the prompt and the generated tokens; *n_out their count (less than
 * T + n_new when stop_id was met); *kv_bytes the cache's size; *kv_rebuilt_at (NULL = not wanted)
 * the length at which longrope's switch rebuilt the cache, -1 when it did not. opts->observer
 * sees the prefill's sites, then each step's. */
lp_status lp_generate(const lp_model *model, const int32_t *prompt, int64_t n_prompt,
                      const lp_generate_opts *gen, const lp_forward_opts *opts, int32_t *out,
                      int64_t *n_out, uint64_t *kv_bytes, int64_t *kv_rebuilt_at, lp_error *err);

/* The sampling rule alone over one logits row: the chosen id into *out; *rng_state is advanced
 * (seed it with gen->seed). LP_ERR_NOMEM when its [vocab] scratch cannot be had. */
lp_status lp_sample_token(const float *logits, int64_t vocab, const lp_generate_opts *gen,
                          uint64_t *rng_state, int32_t *out, lp_error *err);

/* ---------------------------------------------------------------------------------------------
 * Probes: per-head summaries and predictions.
 */

typedef struct lp_head_stats {
    double entropy;    /* mean over visible query rows, nats */
    double max_prob;
    double sink;       /* mass on key 0 */
    double prev_token; /* mass on key q-1, over rows q >= 1 */
    double self;
    double distance;   /* expected q - k */
    double local_frac; /* mass on keys with q - k < local_window */
    double output_norm; /* mean L2 norm of the head's output rows (0 if not given) */
    double keys50, keys90, keys99; /* mean smallest k holding 50/90/99% of a row's key mass */
    double low_mass;    /* mean mass on keys with probability below 1e-3 */
    double learned_sink; /* mean probability on the learned sink logit (gpt-oss): each row's
                            keys hold 1 minus it; 0 without sinks */
    int64_t n_rows;     /* rows that saw at least one key */
} lp_head_stats;

/* Average row statistics over the rows that saw any key (row_sum > 0). row_index0 is the query
 * index of rows[0], used to leave row 0 out of prev_token. */
void lp_head_stats_from_rows(const lp_attn_row_stats *rows, int64_t n_rows, int64_t row_index0,
                             lp_head_stats *out);

/* Mean L2 norm of n_rows rows of length n (row stride `stride`), summed in double. */
double lp_mean_row_norm(const float *x, int64_t n_rows, int64_t n, int64_t stride);

typedef struct lp_prediction {
    int32_t token_id;
    float logit;
    float prob; /* softmax over the whole vocabulary */
} lp_prediction;

/* The k largest logits, best first (ties: lower id first); k is clipped to vocab. Returns the
 * number written. */
int64_t lp_top_k(const float *logits, int64_t vocab, int64_t k, lp_prediction *out);

/* Softmax's denominator in double, shifted for range: returns sum_i exp(logits[i] - *max) and
 * sets *max to the largest logit, so p_i = exp(logits[i] - *max) / sum and
 * log-sum-exp = log(sum) + *max. */
double lp_softmax_sum(const float *logits, int64_t vocab, double *max);

/* Parse an index list "0,2-4,7" with every index < limit into mask[limit] (true = chosen).
 * "all" or "" chooses everything. Bad syntax or an index >= limit is LP_ERR_USAGE naming it. */
lp_status lp_parse_index_list(const char *text, int64_t limit, bool *mask, lp_error *err);

#endif
