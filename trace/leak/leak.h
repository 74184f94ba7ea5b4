/* The leak checker: proves that no position sees the future, in mask tensors users dump from their
 * own code (mask_file.c) and in a real forward pass of a model (model_check.c).
 *
 *   // A mask tensor against its definition.
 *   lp_leak_mask_opts mo;
 *   lp_leak_mask_opts_init(&mo);
 *   lp_leak_def_parse("window:4", &mo.def, &err);            // or "causal", "doc:ids.txt"
 *   lp_leak_mask_report rep;
 *   if (lp_leak_check_mask_file("mask.npy", &mo, &rep, &err) != LP_OK) ...  // bad input
 *   bool ok = rep.leak_count == 0 && rep.blocked_count == 0 && rep.nan_rows == 0;
 *   lp_leak_mask_report_free(&rep);
 *   lp_leak_def_free(&mo.def);
 *
 *   // A model's forward pass: perturbation, attention maps, structural, alignment checks.
 *   lp_leak_model_opts opts;
 *   lp_leak_model_opts_init(&opts);
 *   opts.fault = LP_MASK_FAULT_OFF_BY_ONE;                   // prove the checker catches it
 *   lp_leak_model_report r;
 *   lp_leak_check_model(model, ids, n_ids, &opts, &r, &err);
 *   // r.passed, r.diagnosis ("off-by-one"), r.checks[i] (one row per leak_checks row)
 *   lp_leak_model_report_free(&r);
 *
 * Definitions (the same as trace/kernels/mask.h's lp_mask_allows_reference):
 *   causal      query q may see key k iff k <= q
 *   window:W    causal and q - k < W: W keys including the query itself (W >= 1)
 *   doc:IDS     causal and doc[k] == doc[q]: packed sequences never see across documents
 * A *leak* is a cell the mask allows and the definition forbids; a *blocked* cell is one the
 * definition allows and the mask forbids (the model goes blind to its own context).
 *
 * Additive masks (float dtypes): 0 = attend, large negative = masked. A cell counts as masked when
 * its value is <= masked_below (default -1000, i.e. a key whose score exceeds a visible key's by
 * up to ~979 still gets relative weight below 1e-9); anything above gives weight once scores are
 * large enough, so it counts as visible. The fill (the most negative value) is also evaluated
 * after rounding to fp16 and bf16: overflow to -inf, and rows that become all -inf (softmax NaN).
 */
#ifndef LP_TRACE_LEAK_H
#define LP_TRACE_LEAK_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"
#include "trace/store/store.h"
#include "trace/trace.h"

#define LP_LEAK_MAX_LISTED 20            /* coordinates listed by default (all are counted) */
#define LP_LEAK_MASKED_BELOW (-1000.0)   /* additive: a value <= this is masked */
#define LP_LEAK_NEGLIGIBLE_LOG (-20.72)  /* ln(1e-9): relative weight below which a key is unseen */
#define LP_LEAK_ROW_SUM_TOL 1e-5         /* attention rows must sum to 1 within this */
#define LP_LEAK_MOE_TOLERANCE 1e-5       /* perturbation, MoE only: relative to the row's max */
/* alignment: the label order is judged only when the model's better loss (next or current token)
 * beats a uniform guess (ln V) by at least this many nats. Random --like models reach 0.36 (tied
 * embeddings favour the current token by construction); stories260K 5.2. */
#define LP_LEAK_ALIGNMENT_MIN_SIGNAL 1.0
#define LP_LEAK_PAD_TOLERANCE 1e-5       /* padded vs unpadded rows: relative to the row's max */

/* ---------------------------------------------------------------------------------------------
 * Definitions.
 */

typedef enum lp_leak_def_kind {
    LP_LEAK_DEF_CAUSAL,
    LP_LEAK_DEF_WINDOW,
    LP_LEAK_DEF_DOC,
    LP_LEAK_DEF_COUNT
} lp_leak_def_kind;

typedef struct lp_leak_def {
    lp_leak_def_kind kind;
    int64_t window;   /* WINDOW: keys per query, the query itself included (>= 1) */
    int64_t *doc_ids; /* DOC: [n_doc_rows, n_doc_ids] one document id per position, one row per
                         batch item or one shared row; owned (lp_leak_def_free) */
    int64_t n_doc_ids;
    int64_t n_doc_rows;
    char text[512];   /* as given, for reports: "causal", "window:4", "doc:ids.txt" */
} lp_leak_def;

/* "causal", "window:W" or "doc:IDS_FILE" (lp_leak_read_int_rows: one document id per position,
 * one line per batch item or one line for all). Bad text, W < 1 or an unreadable/malformed ids
 * file is an error naming it. */
lp_status lp_leak_def_parse(const char *text, lp_leak_def *def, lp_error *err);
void lp_leak_def_free(lp_leak_def *def);
/* Cell (query, key) of batch item `batch` allowed by the definition. */
bool lp_leak_def_allows(const lp_leak_def *def, int64_t batch, int64_t query, int64_t key);

/* A small integer matrix from PATH: .npy [n] or [rows, n] (integer or bool dtypes, or floats
 * holding whole numbers), or text with one row per line, values separated by commas or blanks
 * (blank lines skipped; every line as long as the first). *values ([rows, cols]) is malloc'd. */
lp_status lp_leak_read_int_rows(const char *path, int64_t **values, int64_t *rows, int64_t *cols,
                                lp_error *err);

/* ---------------------------------------------------------------------------------------------
 * Mask tensors.
 */

typedef enum lp_mask_encoding {
    LP_MASK_ENC_AUTO,     /* bool and integer dtypes: boolean; float dtypes: additive */
    LP_MASK_ENC_BOOL,     /* nonzero = may attend (or = masked with true_means_masked) */
    LP_MASK_ENC_ADDITIVE, /* added to the scores: 0 = attend, large negative = masked */
    LP_MASK_ENC_COUNT
} lp_mask_encoding;

const char *lp_mask_encoding_name(lp_mask_encoding enc);

typedef struct lp_leak_coord {
    int64_t batch, head, query, key; /* key = -1 for a whole row */
} lp_leak_coord;

/* Counts of cells that differ from a definition, and where they sit (for naming the bug). */
typedef struct lp_leak_cell_stats {
    int64_t leak_count;
    int64_t blocked_count;
    lp_leak_coord first_leak;    /* valid when leak_count > 0 */
    lp_leak_coord first_blocked; /* valid when blocked_count > 0 */
    /* Where the leaks are, for naming the bug (positions are q_pos0 + row): */
    int64_t leak_next;           /* key == pos + 1 */
    int64_t leak_future;         /* key > pos + 1 */
    int64_t leak_window_edge;    /* pos - key == window (one key too far back) */
    int64_t leak_padding_key;    /* a padding key visible to a real query */
    int64_t leak_padding_query;  /* a padding query seeing anything */
    int64_t blocked_past;        /* key < pos, real, inside the window, yet hidden */
    int64_t leak_cross_doc;      /* mask tensors, doc: a past key of another document */
} lp_leak_cell_stats;

/* What the fill value becomes in one dtype. */
typedef struct lp_fill_verdict {
    lp_dtype dtype;        /* F32, F16 or BF16 */
    float value;           /* the fill rounded to dtype */
    bool overflows;        /* a finite fill that becomes -inf */
    int64_t nan_rows;      /* rows whose every cell is -inf in this dtype: softmax gives NaN */
    double overflow_score; /* score + fill overflows to -inf for scores below this; +inf when
                              the fill already is -inf (any score) */
} lp_fill_verdict;

typedef struct lp_leak_mask_opts {
    lp_leak_def def;
    lp_mask_encoding encoding;
    bool true_means_masked;   /* boolean masks: true = masked (PyTorch's key_padding_mask) */
    double masked_below;      /* additive threshold (default LP_LEAK_MASKED_BELOW) */
    int64_t max_listed;       /* coordinates kept per list (default LP_LEAK_MAX_LISTED) */
    const char *tensor_name;  /* safetensors: which tensor; NULL = the only one */
    /* Padding (Hugging Face's attention_mask): real[b * real_len + t] is 1 for a real token, 0
     * for padding; n_real_batch is 1 (shared) or the mask's B; real_len must equal T. NULL = no
     * padding. Padding keys are then forbidden to every query, and padding query rows are not
     * compared (their outputs are discarded; Hugging Face even unmasks them on purpose so they do
     * not give NaN), though their NaN is still counted. */
    const uint8_t *real;
    int64_t n_real_batch;
    int64_t real_len;
} lp_leak_mask_opts;

void lp_leak_mask_opts_init(lp_leak_mask_opts *opts);

typedef struct lp_leak_mask_report {
    lp_dtype dtype;
    int n_dims;
    int64_t shape[4];
    int64_t n_batch, n_heads, T;
    lp_mask_encoding encoding;   /* as resolved (never AUTO) */
    int64_t n_cells;
    int64_t leak_count;
    int64_t blocked_count;
    int64_t fully_masked_rows;   /* rows where the mask allows no key */
    int64_t nan_rows;            /* rows whose softmax is NaN as given: a NaN or +inf cell, or
                                    every cell -inf */
    int64_t nan_cells;           /* NaN and +inf values in the mask */
    int64_t padding_rows;        /* query rows of padding tokens, not compared (opts->real) */
    lp_leak_coord *leaks;        /* first max_listed, row-major order; owned */
    int64_t n_leaks_listed;
    lp_leak_coord *blocked;      /* first max_listed; owned */
    int64_t n_blocked_listed;
    lp_leak_coord *masked_rows;  /* first max_listed fully masked rows (key = -1); owned */
    int64_t n_masked_rows_listed;
    /* additive masks only */
    bool has_fill;               /* some cell is negative */
    float fill;                  /* the most negative value */
    bool weak_fill;              /* fill above masked_below: its cells count as visible */
    lp_leak_cell_stats cells;    /* where the leaks are */
    const char *diagnosis;       /* lp_leak_diagnose(&cells), static */
    double leak_gap;             /* a masked key gets relative weight > 1e-9 once its score
                                    exceeds a visible key's by this much (inf for -inf fills) */
    lp_fill_verdict fills[3];    /* f32, f16, bf16 */
} lp_leak_mask_report;

/* Check the mask in FILE (.npy, or .safetensors with opts->tensor_name or a single tensor):
 * shapes [T, T], [B, 1, T, T] or [B, H, T, T]. Invalid files, shapes or dtypes are errors naming
 * them; a mask that differs from its definition is not an error (see the report). */
lp_status lp_leak_check_mask_file(const char *path, const lp_leak_mask_opts *opts,
                                  lp_leak_mask_report *out, lp_error *err);

/* Read a padding file for opts->real: .npy of shape [T] or [B, T] (any numeric dtype, nonzero =
 * real token), or text with one line per batch item of 0/1 values separated by commas or spaces.
 * *real is malloc'd (caller frees). */
lp_status lp_leak_read_padding(const char *path, uint8_t **real, int64_t *n_batch, int64_t *len,
                               lp_error *err);

/* A .safetensors image already in memory (its header is read directly: no config.json is
 * looked for, so a mask dumped into a checkpoint folder is just a mask). */
lp_status lp_leak_check_mask_safetensors(const void *data, size_t size, const char *name,
                                         const lp_leak_mask_opts *opts, lp_leak_mask_report *out,
                                         lp_error *err);

/* The same on a buffer already in memory: data [n_elements of dtype], shape as above. name is
 * used in messages. */
lp_status lp_leak_check_mask(const void *data, lp_dtype dtype, int n_dims, const int64_t *shape,
                             const char *name, const lp_leak_mask_opts *opts,
                             lp_leak_mask_report *out, lp_error *err);

void lp_leak_mask_report_free(lp_leak_mask_report *rep);

/* True when the mask equals its definition and no row gives NaN. */
bool lp_leak_mask_passed(const lp_leak_mask_report *rep);

/* ---------------------------------------------------------------------------------------------
 * Engine masks: the cell-by-cell comparison of trace/kernels/mask.h's row ranges with the definition.
 */


/* Add one cell observation: `allowed` by the engine (mask or nonzero probability) versus the
 * reference of spec (which carries padding, window and alignment; its fault is ignored). */
void lp_leak_cell_add(lp_leak_cell_stats *st, const lp_mask_spec *spec, int64_t batch,
                      int64_t head, int64_t row, int64_t key, bool allowed);

/* Compare lp_mask_row_range(spec) with lp_mask_allows_reference(spec) for every cell of n_batch
 * items (the pads in spec must have n_batch entries). */
void lp_leak_check_mask_spec(const lp_mask_spec *spec, int64_t n_batch, lp_leak_cell_stats *st);

/* Name the bug a set of leaks looks like: "off-by-one", "transposed", "no-mask" (future keys
 * visible beyond the next one, nothing hidden), "window+1", "pad-axis" (the names of
 * lp_mask_fault_name), "cross-document", "blocked" (no leak, hidden keys), "leak" (another
 * pattern) or "none". */
const char *lp_leak_diagnose(const lp_leak_cell_stats *st);

/* ---------------------------------------------------------------------------------------------
 * Models.
 */

typedef struct lp_leak_model_opts {
    lp_mask_fault fault;    /* inject this broken mask into every pass */
    int64_t window;         /* > 0: force this sliding window on every layer */
    lp_pool *pool;          /* NULL = single-threaded */
    int64_t n_random_cuts;  /* random cut points besides first, middle and last (default 2) */
    uint64_t seed;          /* for the random cuts and the replacement tokens (default 1) */
    int64_t max_listed;     /* leak coordinates kept (default LP_LEAK_MAX_LISTED) */
    const lp_observer *record; /* also sees the unperturbed pass (e.g. lp_store_observer), or
                                  NULL */
} lp_leak_model_opts;

void lp_leak_model_opts_init(lp_leak_model_opts *opts);

/* The result rows (lp_leak_check, one leak_checks row each) are defined by the store. */

/* A leaking attention cell of a real pass. */
typedef struct lp_leak_model_coord {
    int64_t batch;
    int layer, head;
    int64_t query, key;
    float prob;
} lp_leak_model_coord;

typedef struct lp_leak_model_report {
    int64_t n_tokens;
    int n_layers;
    /* perturbation */
    int64_t n_cuts;
    int64_t *cuts;              /* [n_cuts]; owned */
    double *layer_max_diff;     /* [n_layers + 1] over all cuts; index n_layers = the logits */
    bool bitwise;               /* every compared value identical bit for bit */
    double tolerance;           /* 0 (bitwise required) for dense models; for MoE models
                                   LP_LEAK_MOE_TOLERANCE relative to each row's largest value */
    int first_diff_layer;       /* -2 = none; -1 = the logits (no hidden state differed) */
    int64_t first_diff_position;
    int64_t first_diff_cut;
    /* attention maps (the main pass) and the structural test (padded batch + mask specs) */
    lp_leak_cell_stats attn;
    lp_leak_cell_stats structural;
    int64_t attn_bad_rows;      /* rows not summing to 1 within LP_LEAK_ROW_SUM_TOL */
    double attn_max_row_err;
    int64_t attn_nonfinite;     /* NaN/Inf probabilities */
    int64_t attn_masked_rows;   /* rows with no visible key (row_sum 0) */
    lp_leak_model_coord *leaks; /* first max_listed leaking cells (main pass, then padded batch) */
    int64_t n_leaks_listed;
    int64_t leak_count;         /* leaking cells: main pass + padded batch + mask specs */
    int64_t blocked_count;
    int64_t nan_rows;           /* attention rows holding NaN */
    /* alignment */
    double loss_next;           /* mean -log p(token[t+1] | logits[t]), nats */
    double loss_same;           /* mean -log p(token[t] | logits[t]) */
    bool alignment_flagged;     /* loss_same < loss_next, with signal (LP_ALIGNMENT_FLAGGED) */
    bool alignment_inconclusive; /* too little signal to judge (LP_ALIGNMENT_INCONCLUSIVE) */
    /* all checks, in order; owned */
    lp_leak_check *checks;
    int64_t n_checks;
    const char *diagnosis;      /* lp_leak_diagnose of all leaks seen, static */
    bool passed;
} lp_leak_model_report;

typedef enum lp_leak_alignment_verdict {
    LP_ALIGNMENT_OK,           /* the next token is predicted better than the current one */
    LP_ALIGNMENT_FLAGGED,      /* the current token better than the next: a label or mask bug */
    LP_ALIGNMENT_INCONCLUSIVE, /* neither loss beats ln V by LP_LEAK_ALIGNMENT_MIN_SIGNAL nats */
} lp_leak_alignment_verdict;

/* The alignment check on logits [n_ids, V] of ids: mean loss against the next token (over
 * n_ids - 1 positions) and against the current one (over n_ids), in nats. The order of the two
 * losses is evidence only about a model whose predictions carry signal: random weights, or text
 * the model cannot predict, leave both near ln V and a tied classifier reading the token's own
 * embedding tips them toward the current token, so those are INCONCLUSIVE, not FLAGGED. */
lp_leak_alignment_verdict lp_leak_alignment(const float *logits, int64_t V, const int32_t *ids,
                                            int64_t n_ids, double *loss_next, double *loss_same);

/* Run every model check on ids[n_ids] (n_ids >= 2). Bad ids are errors (lp_forward_check); a
 * failed check is not an error (see the report). */
lp_status lp_leak_check_model(const lp_model *model, const int32_t *ids, int64_t n_ids,
                              const lp_leak_model_opts *opts, lp_leak_model_report *out,
                              lp_error *err);
void lp_leak_model_report_free(lp_leak_model_report *rep);

/* ---------------------------------------------------------------------------------------------
 * The decode check (decode_check.c): incremental decoding through the KV cache (a prefill of the
 * first half, then one token at a time) against one prefill of the same tokens, hidden states of
 * every layer and logits at every position, with an f32 cache and with an f16 one. Longrope past
 * its switch (lp_forward_rope_switch_len): the positions the incremental run computed in calls no
 * longer than the switch are compared with a prefill of the switch length instead. Differences
 * are relative to each row's largest magnitude. A failure is named from its signature at layer 0
 * ("mask-top-left", "cache-off-by-one", "rope-stale"; lp_kv_fault injects each).
 */

#define LP_LEAK_DECODE_TOLERANCE 1e-4      /* f32 cache: only summation order differs */
#define LP_LEAK_DECODE_F16_TOLERANCE 5e-2  /* f16 cache: K/V rounded to 11 bits */
/* f32 cache, decode steps with int8 activations (models with Q8_0/Q4_K/MXFP4 weights, as
 * generation runs them) against the float prefill: x rounded to 8 bits in every product */
#define LP_LEAK_DECODE_INT8_TOLERANCE 5e-2

typedef struct lp_leak_decode_opts {
    lp_kv_fault fault;
    int64_t window; /* > 0: this window on every layer (as lp_leak_model_opts.window) */
    lp_pool *pool;
} lp_leak_decode_opts;

typedef struct lp_leak_decode_report {
    int64_t prefix;           /* positions prefilled before decoding one at a time */
    int64_t window;           /* the widest window of any layer (0 = none) */
    int64_t short_prefill;    /* longrope: positions below it are compared with a prefill of
                               * this many tokens (short factors), as generation computed them;
                               * 0 = every position against the one prefill */
    double logit_diff, hidden_diff;         /* f32 cache: max relative difference */
    double f16_logit_diff, f16_hidden_diff; /* f16 cache */
    bool int8;                /* the model has int8-activation weights: a third row was run */
    double int8_logit_diff, int8_hidden_diff; /* f32 cache, int8 activations (when int8) */
    int64_t first_pos;        /* first position over tolerance (when !passed) */
    int first_layer;          /* its layer, -1 = the logits */
    const char *diagnosis;    /* "none", "mask-top-left", "cache-off-by-one", "rope-stale" */
    bool passed;
    bool skipped;             /* no family skips it now (MLA caches its latent) */
    int n_checks;             /* 2 (3 with int8), or 0 when skipped */
    lp_leak_check checks[3];  /* "decode" rows: f32 cache, f16 cache, f32 cache x int8 */
} lp_leak_decode_report;

lp_status lp_leak_check_decode(const lp_model *model, const int32_t *ids, int64_t n,
                               const lp_leak_decode_opts *opts, lp_leak_decode_report *rep,
                               lp_error *err);

#endif
