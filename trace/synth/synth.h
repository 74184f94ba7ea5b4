/* `loupe synth`: write a small Llama-style model whose attention heads are planted with known
 * behaviours, so every tool can be shown (and tested) offline on a model with a known answer.
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
 * The model (all weights computed here from the design below; nothing is trained or copied):
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
#ifndef LP_RENDER_SYNTH_H
#define LP_RENDER_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"

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

#endif
