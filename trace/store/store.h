/* The SQLite trace store: `loupe trace` and `loupe leak` write runs into it (the store is an
 * observer of the forward pass), `loupe render` reads them back through the typed calls below.
 * Every SQL statement loupe runs is in trace/store/; the schema is trace/store/schema.sql.
 *
 *   // Writing a run.
 *   lp_store *store;
 *   lp_store_open("loupe.db", &store, &err);            // creates the schema, WAL mode
 *   lp_store_opts sopts;
 *   lp_store_opts_init(&sopts);                          // all layers/heads, f16 maps, top-5
 *   lp_run_info info = {...};                            // model path, prompt, tokens, pieces
 *   int64_t run_id;
 *   lp_store_begin_run(store, &info, &sopts, &run_id, &err);  // row 'running', committed at once
 *   opts.observer = lp_store_observer(store);
 *   if (lp_forward(model, &batch, &opts, &err) != LP_OK) lp_store_abort_run(store);
 *   else lp_store_end_run(store, seconds, &err);         // one transaction, status 'complete'
 *   lp_store_close(store);
 *
 *   // Reading it back (read-only; a writer may be busy at the same time).
 *   lp_store_open_read("loupe.db", &store, &err);
 *   lp_store_run run;
 *   bool incomplete;
 *   lp_store_read_run(store, 0, "trace", &run, &incomplete, &err);   // 0 = latest complete
 *   lp_store_map *map;
 *   lp_store_map_open(store, &run, layer, head, &map, &err);        // one attention map
 *   lp_store_map_read(map, row, 0, n_k, values, &err);              // streamed, row by row
 *   lp_store_map_close(map);
 *   lp_store_run_clear(&run);
 *   lp_store_close(store);
 */
#ifndef LP_TRACE_STORE_STORE_H
#define LP_TRACE_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "trace/trace.h"

#define LP_STORE_SCHEMA_VERSION 2

typedef struct lp_store lp_store;
struct lp_tokenizer;

/* ---------------------------------------------------------------------------------------------
 * Writing runs.
 */

typedef enum lp_maps_dtype { LP_MAPS_F16, LP_MAPS_F32, LP_MAPS_NONE, LP_MAPS_COUNT } lp_maps_dtype;
typedef enum lp_logits_mode { LP_LOGITS_TOPK, LP_LOGITS_FULL, LP_LOGITS_MODE_COUNT } lp_logits_mode;

typedef struct lp_store_opts {
    lp_maps_dtype maps;
    const bool *layers;   /* [n_layers] whose maps to store, NULL = all (stats: always all) */
    const bool *heads;    /* [n_heads], NULL = all */
    lp_logits_mode logits;
    int64_t top_k;        /* predictions per position (default 5) */
    int64_t local_window; /* recorded with head_stats; must equal the forward's (default 8) */
    /* Generation (lp_generate): the positions the run will hold (prompt + new tokens), 0 = the
     * pass's own. Maps are then [seq_len, seq_len], filled row by row as each call's rows arrive
     * (view->row0 on), and head statistics cover every row of every call. */
    int64_t seq_len;
    /* Threads that convert each map to f16 before it is bound (the forward's pool, idle while
     * the observer runs); NULL = the observer's thread alone. */
    lp_pool *pool;
} lp_store_opts;

void lp_store_opts_init(lp_store_opts *opts);

/* What the runs row records. Strings are copied. */
typedef struct lp_run_info {
    const char *kind;         /* "trace" (default when NULL) or "leak" */
    const char *model_path;
    const char *model_format; /* "safetensors", "gguf", "llama2c" */
    const lp_arch *arch;
    const char *prompt;       /* may be NULL */
    const int32_t *tokens;    /* [n_tokens] of batch item 0 */
    int64_t n_tokens;
    const struct lp_tokenizer *tokenizer; /* pieces for tokens and predictions; NULL = "<id>" */
    int n_threads;
    /* --prompts: the dataset the run belongs to (NULL = none), the prompt's index in its file
     * and its "id" (may be NULL) */
    const char *dataset;
    int64_t prompt_index;
    const char *prompt_id;
    /* --batch-size: the sequence's batch, index in it and padding (in_batch false = none) */
    bool in_batch;
    int64_t batch_id, batch_index, pad_left, pad_right;
} lp_run_info;

/* The run info of a model opened with lp_model_open (its format and arch) for these tokens. */
lp_run_info lp_run_info_for_model(const char *kind, const char *model_path, const lp_model *model,
                                  const char *prompt, const int32_t *tokens, int64_t n_tokens,
                                  const struct lp_tokenizer *tokenizer, int n_threads);

/* Open or create the database (WAL mode), create the schema if missing; a database whose
 * meta.schema_version is newer than LP_STORE_SCHEMA_VERSION is refused (LP_ERR_UNSUPPORTED), and
 * so is one with tables loupe never made (LP_ERR_FORMAT, before anything is written). */
lp_status lp_store_open(const char *path, lp_store **out, lp_error *err);
/* Rolls back a run still open. NULL is fine. */
void lp_store_close(lp_store *store);

/* Insert the runs row with status 'running' and commit it at once (a killed run stays visibly
 * incomplete), then open the run's transaction and insert its tokens. */
lp_status lp_store_begin_run(lp_store *store, const lp_run_info *info, const lp_store_opts *opts,
                             int64_t *run_id, lp_error *err);
/* The observer recording into the open run (stats for every head, maps for the selection,
 * predictions or full logits, MoE routing). Borrowed: valid until lp_store_close. Records batch
 * item 0 only. */
const lp_observer *lp_store_observer(lp_store *store);
/* Write the aggregates (head_stats, expert routing), set status 'complete', finished_at and
 * seconds, and commit. */
lp_status lp_store_end_run(lp_store *store, double seconds, lp_error *err);
/* Generation: the tokens after the prompt (n_total - n_prompt of them, positions continuing,
 * tokens.generated = 1), runs.n_tokens = n_total, runs.kv_bytes and kv_dtype. Call before
 * lp_store_end_run; when n_total < opts.seq_len (a stop token) the maps are cut to
 * [n_total, n_total]. */
lp_status lp_store_set_generated(lp_store *store, const int32_t *tokens, int64_t n_prompt,
                                 int64_t n_total, uint64_t kv_bytes, const char *kv_dtype,
                                 lp_error *err);
/* Generation past longrope's original context: runs.kv_rebuilt_at = the length at which the
 * cache was rebuilt with the long factors (NULL when it was not). */
lp_status lp_store_set_kv_rebuilt(lp_store *store, int64_t at, lp_error *err);
/* Roll back the run's data; its row stays 'running' (or becomes 'failed' if that can be
 * written). */
void lp_store_abort_run(lp_store *store);

/* Padded batches (trace/store/batch.c): an observer that records every sequence of one
 * lp_forward batch as its own run, infos[b] describing sequence b (its real tokens, n_tokens
 * of them, and its padding within the batch's T tokens). Each sequence's sites are cropped to its
 * real tokens; its row statistics are recomputed from the cropped probabilities, so they refer
 * to the sequence's own positions (key 0 = its first real token). The pass stacks the sequences,
 * so their sites arrive interleaved: every run opens at the first site, all in one transaction,
 * and lp_store_batch_finish ends them together. run_ids[n_seqs] receives the ids. */
typedef struct lp_store_batch lp_store_batch;
lp_status lp_store_batch_create(lp_store *store, const lp_store_opts *opts,
                                const lp_run_info *infos, int64_t n_seqs, int64_t n_tokens,
                                lp_store_batch **out, lp_error *err);
const lp_observer *lp_store_batch_observer(lp_store_batch *batch);
lp_status lp_store_batch_finish(lp_store_batch *batch, double seconds, int64_t *run_ids,
                                lp_error *err);
/* Aborts a run still open. NULL is fine. */
void lp_store_batch_destroy(lp_store_batch *batch);

/* Datasets (trace/store/dataset.c). The datasets row for name (source: the prompts file,
 * n_prompts: its prompts, all shards), inserted if missing; no run may be open. */
lp_status lp_store_add_dataset(lp_store *store, const char *name, const char *source,
                               int64_t n_prompts, lp_error *err);
/* Recompute dataset_stats of one dataset (NULL: every dataset) from the head_stats of its
 * complete runs: per layer, head and statistic the mean and population standard deviation over
 * runs. One transaction; no run may be open. */
lp_status lp_store_update_dataset_stats(lp_store *store, const char *name, lp_error *err);
/* Combine databases: OUT (created; refused when it holds runs) receives every run of each IN in
 * turn, renumbered after the runs already there, with every row that names a run_id; datasets
 * rows are merged by name and dataset_stats recomputed. An IN whose meta.schema_version differs
 * from this loupe's is refused with one line before anything is written. */
lp_status lp_store_merge(const char *out_path, const char *const *in_paths, int n_in,
                         int64_t *n_runs, lp_error *err);

/* One row of leak_checks: a result of `loupe leak`. */
typedef struct lp_leak_check {
    char name[24];        /* "perturbation", "attention_map", "structural", "alignment", "mask" */
    bool passed;
    int layer;            /* -1 for the logits (perturbation) or when not per layer (NULL) */
    int64_t position;     /* cut point, first bad position, or -1 (NULL) */
    double max_abs_diff;  /* perturbation: max |difference| at positions <= cut; NAN = NULL */
    char detail[256];
} lp_leak_check;

/* Add n leak_checks rows to the open run (inside its transaction: they commit with it). */
lp_status lp_store_add_leak_checks(lp_store *store, const lp_leak_check *checks, int64_t n,
                                   lp_error *err);
/* A mask file's check as a run of its own, in one transaction: a 'complete' runs row of kind
 * 'leak' and architecture 'mask' (model_path the file, model_format its extension, n_tokens T,
 * n_heads the mask's heads, no layers) and its one leak_checks row. No run may be open. */
lp_status lp_store_add_mask_run(lp_store *store, const char *mask_path, int64_t n_tokens,
                                int64_t n_heads, const lp_leak_check *check, int64_t *run_id,
                                lp_error *err);

/* ---------------------------------------------------------------------------------------------
 * Analysis results (trace/store/analysis.c): rows added to the open run, committed with it.
 */

/* One eval_results row: how a run's tokens scored (loupe eval). */
typedef struct lp_store_eval {
    int64_t n_tokens, n_scored, n_windows, context, stride;
    double nll, ppl;
    int64_t n_bytes;      /* bytes of the text, 0 = token ids (NULL) */
    double bits_per_byte; /* NaN = NULL */
} lp_store_eval;

/* The eval_results row and its token_nll rows (nll[n_tokens - 1], NaN = not scored). */
lp_status lp_store_add_eval(lp_store *store, const lp_store_eval *eval, const int32_t *ids,
                            const double *nll, lp_error *err);
/* token_nll rows alone: nll[p] is the NLL of ids[p + 1] after position p (NaN rows skipped). */
lp_status lp_store_add_token_nll(lp_store *store, const int32_t *ids, const double *nll,
                                 int64_t n_tokens, lp_error *err);
/* head_importance rows: nll[n_layers * n_heads] with each head ablated by `method`. */
lp_status lp_store_add_head_importance(lp_store *store, const char *method, int64_t n_layers,
                                       int64_t n_heads, const double *nll, double clean_nll,
                                       lp_error *err);
/* pruning_plan rows: step i removes (layers[i], heads[i]) on top of steps < i; nll[i] after it. */
lp_status lp_store_add_pruning_plan(lp_store *store, const int64_t *layers, const int64_t *heads,
                                    const double *nll, int64_t n_steps, bool iterative,
                                    lp_error *err);

/* logit_lens rows (tokens/probs [n_layers, n_pos, k], rank-major; token -1 = no row) and
 * logit_lens_layers rows (layer_nll[n_layers], NaN = NULL). */
lp_status lp_store_add_logit_lens(lp_store *store, int64_t n_layers, int64_t n_pos, int64_t k,
                                  const int32_t *tokens, const float *probs,
                                  const double *layer_nll, lp_error *err);

/* loupe diff's result, stored as a diffs row with diff_heads (js[L * H], max_abs[L * H]),
 * diff_head_stats (stat_delta[(l * H + h) * LP_STAT_COUNT + stat], B - A of every head_stats
 * column) and diff_positions (kl[n_tokens], argmax_agree[n_tokens]) rows; NaN = NULL. */
typedef struct lp_store_diff {
    const char *a_db, *b_db;
    int64_t a_run, b_run, n_tokens, n_layers, n_heads;
    bool has_kl;
    const double *js, *max_abs, *kl, *stat_delta;
    const bool *argmax_agree;
} lp_store_diff;
/* All of it in one transaction of its own (no run may be open); *diff_id the new diffs.id. */
lp_status lp_store_add_diff(lp_store *store, const lp_store_diff *diff, int64_t *diff_id,
                            lp_error *err);

/* ---------------------------------------------------------------------------------------------
 * Reading runs (typed; `loupe render` reads nothing else).
 */

/* Open an existing trace database read-only. A file that is no SQLite database, or one without
 * loupe's runs, attention and tokens tables, is LP_ERR_SQLITE / LP_ERR_FORMAT; one whose
 * meta.schema_version is newer than this loupe's is LP_ERR_UNSUPPORTED (a newer loupe may have
 * changed what the columns mean); older databases read as they are. Close with lp_store_close. */
lp_status lp_store_open_read(const char *path, lp_store **out, lp_error *err);

/* A runs row, with the mask its arch_json describes. */
typedef struct lp_store_run {
    int64_t id;
    char status[32];
    char kind[16];
    char model[256];        /* basename of model_path */
    char architecture[64];
    int64_t n_tokens;
    int64_t n_layers;       /* in [1, 65536]: larger counts are refused as corrupt */
    int64_t n_heads;        /* in [1, 65536] */
    char maps_dtype[8];
    int64_t window;         /* sliding window of every layer, 0 = none */
    int64_t *layer_window;  /* [n_layers] from arch_json when it says, else NULL; owned */
    bool causal;            /* false when arch_json says the attention is bidirectional */
    char prompt[256];       /* the run's prompt, cut to fit on a character boundary ("" = none) */
} lp_store_run;

/* run_id > 0: that run (*incomplete = true when its status is not 'complete'); 0: the latest
 * complete run, of `kind` unless kind is NULL. LP_ERR_NOT_FOUND says what the database holds
 * instead. Free *run with lp_store_run_clear. */
lp_status lp_store_read_run(lp_store *store, int64_t run_id, const char *kind, lp_store_run *run,
                            bool *incomplete, lp_error *err);
void lp_store_run_clear(lp_store_run *run);
/* The window that applies to a layer of the run (0 = none). */
int64_t lp_store_run_window(const lp_store_run *run, int64_t layer);

/* One stored attention map, open for streaming: n_q rows of n_k probabilities (attention.probs,
 * little-endian f16 or f32, row-major, checked against its stored shape when opened). Reads go
 * through sqlite3_blob_read, so memory is one row whatever the map's size. */
typedef struct lp_store_map lp_store_map;

/* LP_ERR_NOT_FOUND when the run stored no map for (layer, head); LP_ERR_FORMAT naming the row
 * when its dtype, shape or blob length disagree (need 1 <= n_q <= n_k, blob n_q * n_k * size). */
lp_status lp_store_map_open(lp_store *store, const lp_store_run *run, int64_t layer, int64_t head,
                            lp_store_map **out, lp_error *err);
void lp_store_map_shape(const lp_store_map *map, int64_t *n_q, int64_t *n_k);
/* Keys [col0, col0 + n) of query row `row` as floats into out[n]. */
lp_status lp_store_map_read(lp_store_map *map, int64_t row, int64_t col0, int64_t n, float *out,
                            lp_error *err);
/* NULL is fine. */
void lp_store_map_close(lp_store_map *map);

/* The text of each token of a run in position order: tokens.label (what the piece stands for,
 * "Ġthe" -> " the") where the database has it, else the piece. *texts[n] are malloc'd strings
 * (NULL for a position without a row); free with lp_store_free_texts. */
lp_status lp_store_read_tokens(lp_store *store, int64_t run_id, char ***texts, int64_t *n,
                               lp_error *err);
void lp_store_free_texts(char **texts, int64_t n);

/* The per-head statistics of head_stats, one column each. */
typedef enum lp_head_stat {
    LP_STAT_ENTROPY,
    LP_STAT_MAX_PROB,
    LP_STAT_SINK,
    LP_STAT_PREV_TOKEN,
    LP_STAT_SELF,
    LP_STAT_DISTANCE,
    LP_STAT_LOCAL_FRAC,
    LP_STAT_OUTPUT_NORM,
    LP_STAT_KEYS50, /* sparsity: mean keys holding 50% / 90% / 99% of a row's mass */
    LP_STAT_KEYS90,
    LP_STAT_KEYS99,
    LP_STAT_LOW_MASS, /* mean mass on keys with probability below 1e-3 */
    LP_STAT_LEARNED_SINK, /* mean probability on the learned sink (gpt-oss); NULL in models
                             without sinks, so it comes last */
    LP_STAT_COUNT
} lp_head_stat;

/* Whether stat is one the heads do not have at all, so that a diff leaves it out rather than
 * list NULLs: learned_sink when no head of [n_heads_total] rows of stride LP_STAT_COUNT in
 * stat_delta has a value (models without sinks). */
bool lp_head_stat_absent(const double *stat_delta, int64_t n_heads_total, lp_head_stat stat);

/* The column name ("prev_token"); lp_head_stat_from_name also takes "prev", "previous_token"
 * (any case) and returns LP_STAT_COUNT for unknown names. */
const char *lp_head_stat_name(lp_head_stat stat);
lp_head_stat lp_head_stat_from_name(const char *name);

/* One statistic of a run as a [n_layers * n_heads] matrix (NaN where a row is missing; malloc'd).
 * LP_ERR_NOT_FOUND when the run has no head_stats rows. */
lp_status lp_store_read_head_stat(lp_store *store, const lp_store_run *run, lp_head_stat stat,
                                  double **values, lp_error *err);

/* The latest complete run that has 'perturbation' leak checks, whatever its kind;
 * LP_ERR_NOT_FOUND ("no leak runs") when there is none. */
lp_status lp_store_latest_leak_run(lp_store *store, int64_t *run_id, lp_error *err);

/* Per-layer max_abs_diff of the 'perturbation' leak checks of a run, in layer order: layers[i],
 * diffs[i] (NaN where NULL), and whether any check of that layer failed. layer -1 is the logits.
 * LP_ERR_NOT_FOUND when the run has no such rows. Caller frees the three arrays. */
lp_status lp_store_read_leak_diffs(lp_store *store, int64_t run_id, int64_t **layers,
                                   double **diffs, bool **failed, int64_t *n, lp_error *err);

/* ---------------------------------------------------------------------------------------------
 * Reading analysis results (trace/store/analysis.c), for `loupe render`.
 */

/* head_importance deltas of a run as [n_layers * n_heads] (NaN where missing; malloc'd), of
 * method 'zero' when the run has it, else the first by name; *method names it. LP_ERR_NOT_FOUND
 * when the run has none. */
lp_status lp_store_read_importance(lp_store *store, const lp_store_run *run, double **delta,
                                   char method[16], lp_error *err);
/* The latest complete run of `kind` ("ablate", "eval", ...); LP_ERR_NOT_FOUND when none. */
lp_status lp_store_latest_run_of_kind(lp_store *store, const char *kind, int64_t *run_id,
                                      lp_error *err);

/* The logit lens of a run, rank 0 only: [n_layers * n_pos] pieces (NULL where missing) and
 * probabilities (NaN where missing), and per-layer NLL (NaN where NULL). */
typedef struct lp_store_logit_lens {
    int64_t n_layers, n_pos;
    char **piece;
    double *prob;
    double *layer_nll;
} lp_store_logit_lens;
lp_status lp_store_read_logit_lens(lp_store *store, const lp_store_run *run,
                                   lp_store_logit_lens *out, lp_error *err);
void lp_store_logit_lens_clear(lp_store_logit_lens *lens);

/* A stored `loupe diff` (trace/store/diff_store.c): the diffs row and its rows as arrays, NaN
 * where NULL or missing. a_db/b_db are the paths as diff was given them (malloc'd). */
typedef struct lp_store_diff_rows {
    int64_t id, a_run, b_run, n_tokens, n_layers, n_heads;
    char *a_db, *b_db;
    bool has_kl;
    double *js, *max_abs;  /* [n_layers * n_heads] */
    double *stat_delta;    /* [n_layers * n_heads * LP_STAT_COUNT], NaN for databases before it */
    double *kl;            /* [n_tokens] */
    int8_t *argmax_agree;  /* [n_tokens] 1, 0, or -1 where the row is missing */
} lp_store_diff_rows;
/* diff_id > 0: that diff; 0: the latest. LP_ERR_NOT_FOUND (naming `loupe diff` and the ids the
 * database has) when there is none; LP_ERR_FORMAT for a row whose shape is out of range. */
lp_status lp_store_read_diff(lp_store *store, int64_t diff_id, lp_store_diff_rows *out,
                             lp_error *err);
void lp_store_diff_rows_clear(lp_store_diff_rows *d);
/* The ids of every stored diff in order (*ids malloc'd, NULL when n is 0; none is not an error). */
lp_status lp_store_list_diffs(lp_store *store, int64_t **ids, int64_t *n, lp_error *err);

/* ---------------------------------------------------------------------------------------------
 * Reading what a run holds beyond maps (trace/store/read_rows.c): for `loupe export` and the HTML
 * viewer. Each returns LP_ERR_NOT_FOUND when the run has no such rows (or the database predates
 * the table), so callers can treat the data as optional.
 */

/* The stored map's element size in bytes (2: f16, 4: f32) and its dtype name ("f16", "f32"). */
int lp_store_map_elem_size(const lp_store_map *map);
/* Keys [0, n_k) of query row `row` as the stored little-endian bytes into out[n_k * elem]. */
lp_status lp_store_map_read_raw(lp_store_map *map, int64_t row, void *out, lp_error *err);

/* One statistic of a dataset's aggregate: mean and std as [n_layers * n_heads] matrices (NaN
 * where missing; malloc'd), the runs aggregated. LP_ERR_NOT_FOUND names the datasets the
 * database holds when it has no such dataset. */
lp_status lp_store_read_dataset_stat(lp_store *store, const char *name, lp_head_stat stat,
                                     int64_t *n_layers, int64_t *n_heads, double **mean,
                                     double **std, int64_t *n_runs, lp_error *err);

/* The position of the run's first generated token (tokens.generated = 1), or -1 when it has none
 * (a prefill-only run, or a database from before generation). */
lp_status lp_store_read_first_generated(lp_store *store, int64_t run_id, int64_t *pos,
                                        lp_error *err);

/* tokens.token_id in position order into *ids[n] (malloc'd; -1 for a position without a row). */
lp_status lp_store_read_token_ids(lp_store *store, int64_t run_id, int32_t **ids, int64_t *n,
                                  lp_error *err);

/* The predictions table of a run as [n_pos, k] arrays, rank-major within a position: token_id
 * (-1 where missing), prob and logit (NaN where missing), piece (NULL where missing; free with
 * lp_store_free_texts(pieces, n_pos * k)). k is the largest rank + 1, n_pos the run's n_tokens. */
typedef struct lp_store_predictions {
    int64_t n_pos, k;
    int32_t *token_id; /* [n_pos * k] */
    double *prob;      /* [n_pos * k] */
    double *logit;     /* [n_pos * k] */
    char **piece;      /* [n_pos * k] */
} lp_store_predictions;
lp_status lp_store_read_predictions(lp_store *store, const lp_store_run *run,
                                    lp_store_predictions *out, lp_error *err);
void lp_store_predictions_clear(lp_store_predictions *p);

/* Full logits (`loupe trace --logits full`): how many positions have a row and the vocabulary
 * size (every row must have the same length, a multiple of 4 bytes: LP_ERR_FORMAT otherwise),
 * then one position's f32 values into out[vocab] (NaN-filled when that position has no row). */
lp_status lp_store_logits_shape(lp_store *store, const lp_store_run *run, int64_t *n_rows,
                                int64_t *vocab, lp_error *err);
lp_status lp_store_read_logits(lp_store *store, const lp_store_run *run, int64_t pos,
                               int64_t vocab, float *out, lp_error *err);

/* Every leak_checks row of a run, in insertion order (malloc'd *checks[n]). */
lp_status lp_store_read_leak_checks(lp_store *store, int64_t run_id, lp_leak_check **checks,
                                    int64_t *n, lp_error *err);

/* The runs row as text: every column of the row (whatever this database's schema has), in
 * column order, NULL columns left out. keys/values are malloc'd strings; free both with
 * lp_store_free_texts(x, n). */
lp_status lp_store_read_run_fields(lp_store *store, int64_t run_id, char ***keys,
                                   char ***values, int64_t *n, lp_error *err);

/* ---------------------------------------------------------------------------------------------
 * Plain SQL, for tests and tools: the typed calls above are all loupe itself uses. This runs SQL
 * the caller writes on the database at `path` over a connection of its own (the file is created
 * if missing; no schema is made), so tests can plant what the store never writes (hostile shapes,
 * an older schema, a newer version) and look at what it wrote.
 */

typedef enum lp_sql_type { LP_SQL_NULL, LP_SQL_INT, LP_SQL_REAL, LP_SQL_TEXT, LP_SQL_BLOB } lp_sql_type;

/* One column of a result row. Borrowed: valid during the row callback only. */
typedef struct lp_sql_value {
    lp_sql_type type;
    int64_t i;          /* INT (and REAL truncated) */
    double d;           /* REAL (and INT converted) */
    const void *data;   /* TEXT (NUL-terminated) or BLOB bytes; NULL for NULL */
    size_t bytes;
} lp_sql_value;

/* Called once per result row; a non-OK status stops the statement and is returned. */
typedef lp_status (*lp_sql_row_fn)(void *ctx, const lp_sql_value *cols, int n_cols,
                                   lp_error *err);

/* Run every statement of `sql` in turn; rows of each go to row(ctx, ...) (row may be NULL).
 * SQLite's errors are LP_ERR_SQLITE with its own words and the statement that failed. */
lp_status lp_store_sql(const char *path, const char *sql, lp_sql_row_fn row, void *ctx,
                       lp_error *err);

#endif
