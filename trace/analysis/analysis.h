/* Which heads matter: next-token scoring (NLL, perplexity, bits per byte, sliding windows) and
 * head ablation, built on the forward pass's observers and interventions (trace.h). Nothing here
 * knows SQLite: the commands store the results through trace/store/store.h.
 *
 *   double *nll = malloc((T - 1) * sizeof *nll);          // nll[p]: -log P(ids[p+1] | ids[..p])
 *   lp_eval_window win = {.context = 512, .stride = 256};
 *   lp_eval_result r;
 *   lp_eval_tokens(model, ids, T, &win, pool, NULL, nll, &r, &err);
 *   printf("nll %.4f ppl %.3f over %lld tokens in %lld windows\n", r.nll, r.ppl, ...);
 *
 *   lp_ablation *ab;                                        // every (layer, query head)
 *   lp_ablation_opts aopts = {.method = LP_ABLATE_ZERO, .pool = pool};
 *   lp_ablate_heads(model, ids, T, &aopts, &ab, &err);
 *   lp_ablation_clean_nll(ab), lp_ablation_head(ab, l, h)->nll ...
 *   lp_ablation_free(ab);
 */
#ifndef LP_TRACE_ANALYSIS_ANALYSIS_H
#define LP_TRACE_ANALYSIS_ANALYSIS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "trace/store/store.h"
#include "trace/trace.h"

/* ---------------------------------------------------------------------------------------------
 * Scoring: negative log-likelihood of the next token (natural log).
 */

/* One pass over ids[0, T) with `base` (observer, intervention, start layer, pool ... are kept;
 * logits_last_only is turned off); nll[p] for p in [0, T-1) is -log softmax(logits[p])[ids[p+1]],
 * computed in double. The base observer still sees every site it wants. */
lp_status lp_score_pass(const lp_model *model, const int32_t *ids, int64_t T,
                        const lp_forward_opts *base, double *nll, lp_error *err);

/* Hugging Face's perplexity recipe for texts longer than the context: windows [begin, end) of
 * at most `context` tokens, begin = 0, stride, 2 stride, ... until end = T; each window scores
 * the targets the previous one did not (tokens prev_end .. end-1), except its own first token,
 * which nothing in the window predicts (with stride < context there is none such: every token
 * 1..T-1 is scored once, with at least context - stride tokens of history; stride = context
 * leaves each window's first token unscored, as HF's shifted labels do). T <= context: one
 * window, plain scoring. */
typedef struct lp_eval_window {
    int64_t context; /* > 1 */
    int64_t stride;  /* in [1, context] */
} lp_eval_window;

typedef struct lp_eval_result {
    int64_t n_tokens;  /* T */
    int64_t n_scored;  /* T - 1 unless stride = context skipped window starts */
    int64_t n_windows;
    double nll_sum;    /* nats */
    double nll;        /* mean over the scored tokens */
    double ppl;        /* exp(nll) */
} lp_eval_result;

/* Score ids with windows; nll[T-1] as lp_score_pass (each from its window, NaN where unscored).
 * `observer` (may be
 * NULL) is attached only when one window covers everything. T >= 2. */
lp_status lp_eval_tokens(const lp_model *model, const int32_t *ids, int64_t T,
                         const lp_eval_window *win, lp_pool *pool, const lp_observer *observer,
                         double *nll, lp_eval_result *out, lp_error *err);

/* Bits per byte of a text whose tokens scored nll_sum nats: nll_sum / (ln 2 * n_bytes). */
double lp_bits_per_byte(double nll_sum, int64_t n_bytes);

/* Mean of x[first, n) (NaN when empty). */
double lp_mean_range(const double *x, int64_t first, int64_t n);

/* ---------------------------------------------------------------------------------------------
 * Head ablation: every (layer, query head)'s attention output (its head_dim slice entering
 * o_proj) replaced at every position, everything after recomputed. The clean pass keeps the
 * residual entering each layer, so ablating a head of layer l resumes there (start_layer):
 * work is counted in FLOPs of the layers and the LM head actually run, against L x H full passes.
 */

typedef enum lp_ablate_method {
    LP_ABLATE_ZERO,  /* zeros (o_proj's bias stays) */
    LP_ABLATE_MEAN,  /* the head's mean output over the clean run's positions */
    LP_ABLATE_PATCH, /* the head's output on another prompt of the same length */
    LP_ABLATE_METHOD_COUNT
} lp_ablate_method;

const char *lp_ablate_method_name(lp_ablate_method method); /* "zero", "mean", "patch" */

typedef struct lp_ablation_opts {
    lp_ablate_method method;
    lp_pool *pool;
    const lp_observer *clean_observer; /* sees the clean pass (a store), or NULL */
    const int32_t *patch_ids;          /* LP_ABLATE_PATCH: [T] the corrupted prompt */
} lp_ablation_opts;

typedef struct lp_ablation {
    int64_t n_layers, n_heads, T;
    lp_ablate_method method;
    double clean_nll;  /* mean over positions 0..T-2 */
    double *clean_pos; /* [T - 1] */
    double *nll;       /* [n_layers * n_heads] mean NLL with that head ablated */
    double *pos_nll;   /* [n_layers * n_heads, T - 1] per position */
    double work_flops;  /* what was computed: the clean pass and every resumed pass */
    double naive_flops; /* the clean pass and L x H full passes */
    double pass_flops;  /* one full pass */
    /* patching: the logit difference clean target - corrupted target at the last position */
    int32_t clean_target, corrupt_target;
    double clean_diff, corrupt_diff;
    double *patch_diff; /* [n_layers * n_heads] the difference with the head patched */
    /* kept for pruning plans */
    float *resid;       /* [n_layers, T, hidden]: entering layer l */
    float *replacement; /* [n_layers, T, q_dim]: what an ablated head's slice becomes */
} lp_ablation;

/* The clean pass, then every head. *out is freed with lp_ablation_free. T >= 2. */
lp_status lp_ablate_heads(const lp_model *model, const int32_t *ids, int64_t T,
                          const lp_ablation_opts *opts, lp_ablation **out, lp_error *err);
void lp_ablation_free(lp_ablation *ab);

/* FLOPs (2 per multiply-add, matrices and attention scores/values over a causal T) of layers
 * first .. L-1 and the LM head over T tokens. */
double lp_pass_flops(const lp_arch *arch, int64_t T, int first_layer);

/* A pruning plan: K heads removed together. Greedy (iterative false): by ascending delta of the
 * single-head ablations (ties: lower layer, then lower head), nll[i] with the first i+1 removed.
 * Iterative: each step re-scores every remaining head on top of those removed and takes the one
 * with the lowest NLL (same ties). layers/heads/nll are [K]. */
lp_status lp_prune_plan(const lp_model *model, const int32_t *ids, const lp_ablation *ab,
                        int64_t K, bool iterative, lp_pool *pool, int64_t *layers, int64_t *heads,
                        double *nll, lp_error *err);

/* What removing a set of query heads saves, counted as `loupe estimate` counts: q and o
 * projection parameters (weights and biases) of the removed heads, k and v of every KV group
 * whose query heads are all removed, FLOPs per token (2 per parameter used, plus 4 x head_dim
 * per attended key at `context`), KV cache bytes per token at kv_bytes per element. */
typedef struct lp_prune_savings {
    int64_t params;
    int64_t kv_groups;   /* whole KV groups removed */
    double flops_per_token;
    int64_t kv_bytes_per_token;
} lp_prune_savings;

void lp_prune_savings_of(const lp_arch *arch, const int64_t *layers, const int64_t *heads,
                         int64_t n, int64_t context, int64_t kv_bytes, lp_prune_savings *out);

/* ---------------------------------------------------------------------------------------------
 * The logit lens: the residual stream after every layer through the final norm and the LM head
 * (lp_model_unembed). An observer: chain it into a pass (it wants RESID of batch item 0).
 *
 *   lp_logit_lens *lens;
 *   lp_logit_lens_create(model, ids, T, 5, pool, &lens, &err);
 *   opts.observer = lp_logit_lens_observer(lens);     // or call it from your own observer
 *   lp_forward(...);
 *   lens->token[(l * T + pos) * k + rank], lens->prob[...], lens->layer_nll[l]
 *   lp_logit_lens_free(lens);
 */
typedef struct lp_logit_lens {
    int64_t n_layers, T, k;
    int32_t *token;    /* [n_layers, T, k] top-k token ids, rank 0 the argmax (ties: lower id) */
    float *prob;       /* [n_layers, T, k] softmax over the whole vocabulary */
    double *layer_nll; /* [n_layers] mean next-token NLL over positions 0..T-2 (NaN if T < 2) */
    bool *seen;        /* [n_layers] */
    /* private */
    const lp_model *model;
    const int32_t *ids;
    lp_pool *pool;
    float *logits;     /* [chunk, vocab] */
    int64_t chunk;
    lp_prediction *top;
    lp_observer observer;
} lp_logit_lens;

lp_status lp_logit_lens_create(const lp_model *model, const int32_t *ids, int64_t T, int64_t k,
                               lp_pool *pool, lp_logit_lens **out, lp_error *err);
void lp_logit_lens_free(lp_logit_lens *lens);
const lp_observer *lp_logit_lens_observer(lp_logit_lens *lens); /* borrowed */

/* ---------------------------------------------------------------------------------------------
 * Run-to-run differences (trace/analysis/diff.c), read from two stores: runs over the same
 * tokens (else LP_ERR_USAGE naming the first differing position) and the same heads.
 */
typedef struct lp_run_diff {
    int64_t n_layers, n_heads, T;
    int64_t n_maps;      /* heads whose maps both runs stored */
    double *js;          /* [L * H] mean Jensen-Shannon divergence of the rows (nats); NaN: no map */
    double *max_abs;     /* [L * H] max |p_A - p_B| over the map */
    double *stat_delta;  /* [L * H, LP_STAT_COUNT] B - A of every head statistic (NaN: missing) */
    bool has_kl;         /* both runs stored full logits */
    double *kl;          /* [T] KL(A || B) of the next-token distributions (NaN without logits) */
    bool *argmax_agree;  /* [T] from full logits, else from the predictions' rank 0 */
} lp_run_diff;

lp_status lp_diff_runs(lp_store *a, const lp_store_run *run_a, lp_store *b,
                       const lp_store_run *run_b, lp_run_diff **out, lp_error *err);
void lp_run_diff_free(lp_run_diff *diff);

#endif
