/* The synthetic model: a Llama-style checkpoint whose weights are computed so that chosen heads
 * show chosen attention patterns (design in synth.h; every amplitude is derived below). */
#define _POSIX_C_SOURCE 200809L /* mkdir, getpid, opendir */
#include "trace/synth/synth.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "core/checked.h"
#include "core/version.h"
#include "core/mapfile.h"
#include "inspect/formats/safetensors_write.h"
#include "inspect/tokenizer/tokenizer.h"
#include "trace/trace.h"

/* ---- shape and residual layout --------------------------------------------------------------- */

#define HIDDEN LP_SYNTH_HIDDEN
#define N_LAYERS LP_SYNTH_LAYERS
#define N_HEADS LP_SYNTH_HEADS
#define HEAD_DIM LP_SYNTH_HEAD_DIM
#define FFN LP_SYNTH_FFN
#define N_PAIRS (HEAD_DIM / 2) /* rotary pairs per head: dims (i, i + 32) */
#define ROPE_THETA 1e6
#define N_CTX 256
#define RMS_EPS 1e-5

#define ID_DIM 32    /* token identity block width = the slow pairs' 2 x 16 dims */
#define D_ID 0       /* [0, 32): identity */
#define D_CONST 32   /* the constant */
#define D_BOS 33     /* BOS flag */
#define D_PREV 34    /* [34, 66): previous token's identity */
#define D_PREV_BOS 66 /* "the previous token is <s>" (0.8), so every row of layer 1 has the same
                         norm: <s> has no identity to stand in [34, 66) */
#define D_SCRATCH 128 /* [128, 224): planted non-copy heads' outputs, 32 each */
#define D_NOISE 224   /* [224, 512): noise heads' outputs */

#define ID_AMP 0.8    /* identity block norm in an embedding row */
#define CONST_AMP 0.6 /* 0.8^2 + 0.6^2 = 1: every row has norm 1 */
#define BOS_AMP 0.8   /* <s>: no identity, constant 0.6, flag 0.8: norm 1 too */

#define TOKEN_UNK 0
#define TOKEN_BOS 1
#define TOKEN_EOS 2

/* Targets. An attention logit in nats is q.k / sqrt(head_dim) = q.k / 8. */
#define PREV_A2 120.0     /* prev head: a^2 (q.k units); gap to distances 0 and 2 =
                             a^2 sum_j (1 - cos th_j) / 8 = 12.2 nats over pairs 0..15 */
#define SINK_NATS 12.0    /* sink head: BOS key above every other key */
#define LOCAL_B2 8.0      /* local head: b^2 (q.k units) on pairs 2..7, a decay over ~4 tokens */
#define IND_MATCH_NATS 40.0 /* induction: a key whose previous token is the current token */
#define IND_BOS_NATS 26.0   /* induction: the resting place <s> (between match and mismatch) */
#define IND_GAIN 6.0        /* induction output gain: the copied identity dominates the logits */
#define SCRATCH_GAIN 0.25   /* planted non-copy heads write this much into scratch dims */
#define NOISE_LOGIT_STD 2.5 /* noise heads: spread of their attention logits, in nats */
#define NOISE_OUT_NORM 0.1  /* noise heads: norm of what they add to the residual */
#define FFN_DOWN_STD 5e-4   /* the FFN is almost silent: it must not disturb the circuits */
#define SCRATCH_SQ_EST 0.05 /* squared norm layer 0 adds outside identity/prev dims (estimate) */

/* Which head does what; the rest are noise. */
static const lp_synth_head PLANTED[] = {
    {0, 1, LP_SYNTH_PREV_TOKEN}, {0, 3, LP_SYNTH_SINK},      {0, 4, LP_SYNTH_LOCAL},
    {0, 6, LP_SYNTH_UNIFORM},    {1, 5, LP_SYNTH_INDUCTION},
};
#define N_PLANTED (sizeof PLANTED / sizeof PLANTED[0])

/* Whole words of the vocabulary (each becomes "▁word" by a chain of merges). */
static const char *const WORDS[] = {
    "the",   "cat",   "sat",  "on",    "mat",  "and",   "dog",  "ran",   "to",     "park",
    ".",     ",",     "!",    "?",     "a",    "an",    "big",  "small", "red",    "blue",
    "green", "bird",  "tree", "house", "sun",  "day",   "night", "is",   "was",    "in",
    "of",    "it",    "he",   "she",   "they", "we",    "saw",  "little", "old",   "man",
    "girl",  "boy",   "ball", "with",  "his",  "her",   "went", "home",  "fish",   "ate",
    "at",    "one",   "two",  "hello", "world", "model", "head", "heads", "token", "next",
};
static const char CHARS[] = "abcdefghijklmnopqrstuvwxyz.,!?'-";
#define SPACE_MARK "\xe2\x96\x81" /* U+2581, SentencePiece's word-start mark */

const char *lp_synth_behaviour_name(lp_synth_behaviour behaviour)
{
    static const char *const names[] = {"previous_token", "sink", "local", "uniform",
                                        "induction", "noise"};
    return (unsigned)behaviour < LP_SYNTH_BEHAVIOUR_COUNT ? names[behaviour] : "invalid";
}

const char *const *lp_synth_words(size_t *n_words)
{
    if (n_words)
        *n_words = sizeof WORDS / sizeof WORDS[0];
    return WORDS;
}

const lp_synth_head *lp_synth_planted_heads(size_t *n_heads)
{
    if (n_heads)
        *n_heads = N_PLANTED;
    return PLANTED;
}

void lp_synth_options_init(lp_synth_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->seed = 1;
    opts->dtype = LP_DTYPE_F32;
    opts->fault = LP_SYNTH_FAULT_NONE;
}

static lp_synth_behaviour behaviour_of(int layer, int head)
{
    for (size_t i = 0; i < N_PLANTED; i++)
        if (PLANTED[i].layer == layer && PLANTED[i].head == head)
            return PLANTED[i].behaviour;
    return LP_SYNTH_NOISE;
}

/* ---- deterministic randomness ------------------------------------------------------------------ */

typedef struct rng {
    uint64_t state;
} rng;

static uint64_t rng_next(rng *r) /* splitmix64 */
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_uniform(rng *r) /* (0, 1) */
{
    return ((double)(rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double rng_normal(rng *r) /* Box-Muller; one value per call keeps the stream simple */
{
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- vocabulary ---------------------------------------------------------------------------------- */

typedef struct vocab {
    char **pieces;
    int32_t n, cap;
    int32_t (*merges)[2]; /* left id, right id; rank = index */
    int32_t n_merges, merges_cap;
    bool *is_text;        /* pieces that words are built of: identities kept apart */
} vocab;

static void vocab_free(vocab *v)
{
    for (int32_t i = 0; i < v->n; i++)
        free(v->pieces[i]);
    free(v->pieces);
    free(v->merges);
    free(v->is_text);
    memset(v, 0, sizeof *v);
}

static int32_t vocab_find(const vocab *v, const char *piece)
{
    for (int32_t i = 0; i < v->n; i++)
        if (strcmp(v->pieces[i], piece) == 0)
            return i;
    return -1;
}

static lp_status vocab_add(vocab *v, const char *piece, bool is_text, int32_t *id, lp_error *err)
{
    int32_t found = vocab_find(v, piece);
    if (found >= 0) {
        *id = found;
        return LP_OK;
    }
    if (v->n == v->cap) {
        int32_t cap = v->cap ? v->cap * 2 : 512;
        char **p = realloc(v->pieces, (size_t)cap * sizeof *p);
        if (!p)
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory for the vocabulary");
        v->pieces = p;
        bool *t = realloc(v->is_text, (size_t)cap * sizeof *t);
        if (!t)
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory for the vocabulary");
        v->is_text = t;
        v->cap = cap;
    }
    size_t len = strlen(piece);
    char *copy = malloc(len + 1);
    if (!copy)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory for the vocabulary");
    memcpy(copy, piece, len + 1);
    v->pieces[v->n] = copy;
    v->is_text[v->n] = is_text;
    *id = v->n++;
    return LP_OK;
}

static lp_status vocab_add_merge(vocab *v, int32_t left, int32_t right, lp_error *err)
{
    for (int32_t i = 0; i < v->n_merges; i++)
        if (v->merges[i][0] == left && v->merges[i][1] == right)
            return LP_OK;
    if (v->n_merges == v->merges_cap) {
        int32_t cap = v->merges_cap ? v->merges_cap * 2 : 256;
        int32_t(*m)[2] = realloc(v->merges, (size_t)cap * sizeof *m);
        if (!m)
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory for the merges");
        v->merges = m;
        v->merges_cap = cap;
    }
    v->merges[v->n_merges][0] = left;
    v->merges[v->n_merges][1] = right;
    v->n_merges++;
    return LP_OK;
}

/* Llama's layout: <unk> <s> </s>, the 256 byte-fallback tokens, the word mark and characters,
 * then one token per merge. Every word's merges extend a "▁..." prefix by one character, and no
 * merge has a right side that starts with "▁", so a listed word always merges whole. */
static lp_status vocab_build(vocab *v, lp_error *err)
{
    int32_t id;
    lp_status st;
    static const char *const specials[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++)
        if ((st = vocab_add(v, specials[i], false, &id, err)) != LP_OK)
            return st;
    for (int b = 0; b < 256; b++) {
        char piece[8];
        snprintf(piece, sizeof piece, "<0x%02X>", b);
        if ((st = vocab_add(v, piece, false, &id, err)) != LP_OK)
            return st;
    }
    if ((st = vocab_add(v, SPACE_MARK, true, &id, err)) != LP_OK)
        return st;
    for (const char *c = CHARS; *c; c++) {
        char piece[2] = {*c, 0};
        if ((st = vocab_add(v, piece, true, &id, err)) != LP_OK)
            return st;
    }
    for (size_t w = 0; w < sizeof WORDS / sizeof WORDS[0]; w++) {
        char prefix[64] = SPACE_MARK;
        for (const char *c = WORDS[w]; *c; c++) {
            char ch[2] = {*c, 0}, merged[64];
            size_t len = strlen(prefix);
            LP_ASSERT(len + 2 <= sizeof merged); /* WORDS are short */
            memcpy(merged, prefix, len);
            merged[len] = *c;
            merged[len + 1] = '\0';
            int32_t left = vocab_find(v, prefix), right = vocab_find(v, ch);
            LP_ASSERT(left >= 0 && right >= 0); /* WORDS only use CHARS */
            if ((st = vocab_add(v, merged, true, &id, err)) != LP_OK ||
                (st = vocab_add_merge(v, left, right, err)) != LP_OK)
                return st;
            memcpy(prefix, merged, sizeof prefix);
        }
    }
    return LP_OK;
}

/* Seeded unit vectors r_t in ID_DIM dims. Text tokens are drawn apart (|cos| < 0.45 between any
 * two, by rejection) so the induction head's content match is unambiguous; byte and special
 * tokens are plain random draws. <s> has no identity. */
static void identities_draw(const vocab *v, rng *r, float *ident /* [n, ID_DIM] */)
{
    const double max_cos = 0.45;
    for (int32_t t = 0; t < v->n; t++) {
        float *row = ident + (size_t)t * ID_DIM;
        if (t == TOKEN_BOS) {
            memset(row, 0, ID_DIM * sizeof *row);
            continue;
        }
        for (int attempt = 0;; attempt++) {
            double x[ID_DIM], norm = 0;
            for (int j = 0; j < ID_DIM; j++) {
                x[j] = rng_normal(r);
                norm += x[j] * x[j];
            }
            norm = sqrt(norm);
            for (int j = 0; j < ID_DIM; j++)
                row[j] = (float)(x[j] / norm);
            if (!v->is_text[t] || attempt >= 100000)
                break;
            bool apart = true;
            for (int32_t u = 0; u < t && apart; u++) {
                if (!v->is_text[u])
                    continue;
                double dot = 0;
                for (int j = 0; j < ID_DIM; j++)
                    dot += (double)row[j] * (double)ident[(size_t)u * ID_DIM + j];
                apart = fabs(dot) < max_cos;
            }
            if (apart)
                break;
        }
    }
}

/* ---- weights ------------------------------------------------------------------------------------- */

typedef struct layer_weights {
    float *q, *k, *v, *o;   /* [512, 512] each, row-major [out, in] */
    float *gate, *up;       /* [FFN, HIDDEN] */
    float *down;            /* [HIDDEN, FFN] */
} layer_weights;

#define AT(m, row, col) (m)[(size_t)(row) * HIDDEN + (size_t)(col)]

static double rope_theta_of(int pair)
{
    return pow(ROPE_THETA, -(double)pair / N_PAIRS);
}

/* Attention logit scale and the RMSNorm factor each layer's input gets: layer 0 sees embedding
 * rows of norm 1 (x_hat = x sqrt(hidden)); layer 1 also sees the previous-token block (norm 0.8)
 * and a little scratch, so its factor is estimated from those norms. */
static double norm_scale(double sq_norm)
{
    return sqrt((double)HIDDEN / sq_norm);
}

static void head_copy_identity(float *wv, int head, double gain)
{
    for (int j = 0; j < ID_DIM; j++)
        AT(wv, head * HEAD_DIM + j, D_ID + j) = (float)gain;
}

static void head_noise(layer_weights *lw, int head, rng *r)
{
    /* q and k components of std sqrt(L) (|x_hat| = sqrt(hidden)): q.k has std 8 L, i.e. L nats. */
    const double qk_std = sqrt(NOISE_LOGIT_STD / HIDDEN);
    /* Values of norm about 1 (components about 1/8), like the planted heads' 0.8 r_t, so that
     * output_norm does not single the noise heads out. */
    const double v_std = 1.0 / sqrt((double)HEAD_DIM) / sqrt((double)HIDDEN);
    const double o_std = NOISE_OUT_NORM / sqrt((double)(HIDDEN - D_NOISE));
    for (int d = 0; d < HEAD_DIM; d++) {
        int row = head * HEAD_DIM + d;
        for (int c = 0; c < HIDDEN; c++) {
            AT(lw->q, row, c) = (float)(qk_std * rng_normal(r));
            AT(lw->k, row, c) = (float)(qk_std * rng_normal(r));
            AT(lw->v, row, c) = (float)(v_std * rng_normal(r));
        }
        for (int out = D_NOISE; out < HIDDEN; out++)
            AT(lw->o, out, row) = (float)(o_std * rng_normal(r));
    }
}

/* A planted head that does not copy into the circuit writes its value (an identity copy) into
 * its own 32 scratch dims, so it has an output to measure but disturbs nothing. */
static void head_scratch_output(layer_weights *lw, int head, int slot, double s)
{
    head_copy_identity(lw->v, head, 1.0 / s);
    for (int j = 0; j < ID_DIM; j++)
        AT(lw->o, D_SCRATCH + slot * ID_DIM + j, head * HEAD_DIM + j) = (float)SCRATCH_GAIN;
}

static void plant_layer0(layer_weights *lw, const lp_synth_options *opts, rng *r)
{
    const double s0 = norm_scale(1.0);
    const double x_const = CONST_AMP * s0, x_bos = BOS_AMP * s0;
    int scratch_slot = 0;
    for (int h = 0; h < N_HEADS; h++) {
        int base = h * HEAD_DIM;
        switch (behaviour_of(0, h)) {
        case LP_SYNTH_PREV_TOKEN: {
            /* q_j = a e^{-i th_j}, k_j = a on pairs 0..15: score a^2 sum cos((m-n-1) th_j). */
            double a = sqrt(PREV_A2);
            for (int p = 0; p < N_PAIRS / 2; p++) {
                double th = opts->fault == LP_SYNTH_FAULT_PREV_NO_PHASE ? 0.0 : rope_theta_of(p);
                AT(lw->q, base + p, D_CONST) = (float)(a * cos(th) / x_const);
                AT(lw->q, base + p + N_PAIRS, D_CONST) = (float)(-a * sin(th) / x_const);
                AT(lw->k, base + p, D_CONST) = (float)(a / x_const);
            }
            head_copy_identity(lw->v, h, 1.0 / s0); /* v = 0.8 r_t */
            AT(lw->v, base + ID_DIM, D_BOS) = (float)(1.0 / s0); /* v[32] = 0.8 at <s> */
            if (opts->fault != LP_SYNTH_FAULT_NO_PREV_WRITE) {
                for (int j = 0; j < ID_DIM; j++)
                    AT(lw->o, D_PREV + j, base + j) = 1.0f; /* 0.8 r_{t-1} into [34, 66) */
                AT(lw->o, D_PREV_BOS, base + ID_DIM) = 1.0f;
            }
            break;
        }
        case LP_SYNTH_SINK: {
            /* q constant, k = BOS flag, on the slow pairs 16..31 (real parts). */
            double qk = SINK_NATS * sqrt((double)HEAD_DIM) / (N_PAIRS / 2), amp = sqrt(qk);
            for (int p = N_PAIRS / 2; p < N_PAIRS; p++) {
                AT(lw->q, base + p, D_CONST) = (float)(amp / x_const);
                AT(lw->k, base + p, D_BOS) = (float)(amp / x_bos);
            }
            head_scratch_output(lw, h, scratch_slot++, s0);
            break;
        }
        case LP_SYNTH_LOCAL: {
            /* q = k = b on pairs 2..7: score b^2 sum cos(d th_j), highest at d = 0 and falling
             * off like exp(-b^2 d^2 sum th_j^2 / 16) for the first few tokens. */
            double b = sqrt(LOCAL_B2);
            for (int p = 2; p <= 7; p++) {
                AT(lw->q, base + p, D_CONST) = (float)(b / x_const);
                AT(lw->k, base + p, D_CONST) = (float)(b / x_const);
            }
            head_scratch_output(lw, h, scratch_slot++, s0);
            break;
        }
        case LP_SYNTH_UNIFORM:
            /* q = 0: every visible key gets the same logit. */
            head_scratch_output(lw, h, scratch_slot++, s0);
            break;
        default:
            head_noise(lw, h, r);
            break;
        }
    }
}

/* Head dim of identity component j on the slow pairs 16..31: real parts 16..31, imaginary
 * parts 48..63. */
static int slow_slot(int j)
{
    return j < N_PAIRS / 2 ? N_PAIRS / 2 + j : N_PAIRS + j;
}

static void plant_layer1(layer_weights *lw, rng *r)
{
    /* Layer 1's input: embedding (norm 1) + previous identity or previous-is-<s> flag (0.8)
     * + scratch, the same in every row. */
    const double s1 = norm_scale(1.0 + ID_AMP * ID_AMP + SCRATCH_SQ_EST);
    for (int h = 0; h < N_HEADS; h++) {
        int base = h * HEAD_DIM;
        if (behaviour_of(1, h) != LP_SYNTH_INDUCTION) {
            head_noise(lw, h, r);
            continue;
        }
        /* Content: q = g x_id, k = g x_prev on the slow pairs, so q.k = g^2 (0.8 s1)^2 cos. */
        double g = sqrt(IND_MATCH_NATS * sqrt((double)HEAD_DIM)) / (ID_AMP * s1);
        for (int j = 0; j < ID_DIM; j++) {
            AT(lw->q, base + slow_slot(j), D_ID + j) = (float)g;
            AT(lw->k, base + slow_slot(j), D_PREV + j) = (float)g;
        }
        /* Resting place: pairs 14 and 15 (slow enough over N_CTX) match the constant against
         * the BOS flag. */
        double x_const = CONST_AMP * s1, x_bos = BOS_AMP * s1;
        double per_pair = IND_BOS_NATS * sqrt((double)HEAD_DIM) / 2.0;
        for (int p = 14; p <= 15; p++) {
            AT(lw->q, base + p, D_CONST) = 1.0f;
            AT(lw->k, base + p, D_BOS) = (float)(per_pair / x_const / x_bos);
        }
        /* Copy the attended token's identity into the identity block, loud enough that the tied
         * classifier reads it as the prediction. */
        head_copy_identity(lw->v, h, 1.0 / s1);
        for (int j = 0; j < ID_DIM; j++)
            AT(lw->o, D_ID + j, base + j) = (float)IND_GAIN;
    }
}

static double silu(double x)
{
    return x / (1.0 + exp(-x));
}

/* Random, nearly silent FFNs; except that layer 1's first ID_DIM channels take the current
 * token's identity back out of the identity block. Without that the tied classifier would read
 * it and a row with nothing to copy would predict its own token, i.e. the model would predict
 * the current token better than the next one (which a leak checker rightly reads as a label or
 * mask bug). The gate reads the constant at about SUPPRESS_GATE, where silu is nearly linear,
 * so channel c = silu(gate) * up_c is a scaled copy of identity component c and the down
 * projection subtracts it. */
#define SUPPRESS_GATE 8.0

static void ffn_fill(layer_weights *lw, int layer, rng *r)
{
    const double in_std = 1.0 / sqrt((double)HIDDEN);
    for (size_t i = 0; i < (size_t)FFN * HIDDEN; i++) {
        lw->gate[i] = (float)(in_std * rng_normal(r));
        lw->up[i] = (float)(in_std * rng_normal(r));
    }
    for (size_t i = 0; i < (size_t)HIDDEN * FFN; i++)
        lw->down[i] = (float)(FFN_DOWN_STD * rng_normal(r));
    if (layer != N_LAYERS - 1)
        return;
    /* The FFN's input: layer 1's input plus what its noise heads add (the induction head adds
     * nothing in the rows that matter here: they rest on <s>). */
    const double s_mid = norm_scale(1.0 + ID_AMP * ID_AMP + 2 * SCRATCH_SQ_EST);
    for (int c = 0; c < ID_DIM; c++) {
        memset(lw->gate + (size_t)c * HIDDEN, 0, HIDDEN * sizeof(float));
        memset(lw->up + (size_t)c * HIDDEN, 0, HIDDEN * sizeof(float));
        lw->gate[(size_t)c * HIDDEN + D_CONST] = (float)(SUPPRESS_GATE / (CONST_AMP * s_mid));
        lw->up[(size_t)c * HIDDEN + D_ID + c] = (float)(1.0 / s_mid); /* 0.8 r_c */
        for (int out = 0; out < HIDDEN; out++)
            lw->down[(size_t)out * FFN + c] = 0.0f;
        lw->down[(size_t)(D_ID + c) * FFN + c] = (float)(-1.0 / silu(SUPPRESS_GATE));
    }
    /* One more channel removes <s>'s flag, or the classifier would predict <s> after <s>. */
    const int c = ID_DIM;
    memset(lw->gate + (size_t)c * HIDDEN, 0, HIDDEN * sizeof(float));
    memset(lw->up + (size_t)c * HIDDEN, 0, HIDDEN * sizeof(float));
    lw->gate[(size_t)c * HIDDEN + D_CONST] = (float)(SUPPRESS_GATE / (CONST_AMP * s_mid));
    lw->up[(size_t)c * HIDDEN + D_BOS] = (float)(1.0 / s_mid); /* 0.8 at <s> */
    for (int out = 0; out < HIDDEN; out++)
        lw->down[(size_t)out * FFN + c] = 0.0f;
    lw->down[(size_t)D_BOS * FFN + c] = (float)(-1.0 / silu(SUPPRESS_GATE));
}

static lp_status add_tensor(lp_st_writer *w, const char *name, lp_dtype dtype, int64_t rows,
                            int64_t cols, const float *data, lp_error *err)
{
    int64_t shape[2] = {rows, cols};
    return lp_st_writer_add_f32_as(w, name, dtype, cols ? 2 : 1, cols ? shape : &shape[0],
                                   data, err);
}

static lp_status build_weights(const vocab *v, const float *ident, const lp_synth_options *opts,
                               rng *r, lp_st_writer *w, lp_error *err)
{
    lp_status st = LP_OK;
    const size_t sq = (size_t)HIDDEN * HIDDEN;
    float *embd = calloc((size_t)v->n * HIDDEN, sizeof *embd);
    float *ones = malloc(HIDDEN * sizeof *ones);
    float *block = calloc(4 * sq + 3 * (size_t)FFN * HIDDEN, sizeof *block);
    if (!embd || !ones || !block) {
        st = lp_error_set(err, LP_ERR_NOMEM, "out of memory for the weights (%zu MiB)",
                          (4 * sq * sizeof(float)) >> 20);
        goto done;
    }
    for (int i = 0; i < HIDDEN; i++)
        ones[i] = 1.0f;
    for (int32_t t = 0; t < v->n; t++) {
        float *row = embd + (size_t)t * HIDDEN;
        for (int j = 0; j < ID_DIM; j++)
            row[D_ID + j] = (float)(ID_AMP * (double)ident[(size_t)t * ID_DIM + j]);
        row[D_CONST] = (float)CONST_AMP;
        if (t == TOKEN_BOS)
            row[D_BOS] = (float)BOS_AMP;
    }
    if ((st = add_tensor(w, "model.embed_tokens.weight", opts->dtype, v->n, HIDDEN, embd, err)))
        goto done;

    for (int l = 0; l < N_LAYERS; l++) {
        memset(block, 0, (4 * sq + 3 * (size_t)FFN * HIDDEN) * sizeof *block);
        layer_weights lw = {block, block + sq, block + 2 * sq, block + 3 * sq, block + 4 * sq,
                            block + 4 * sq + (size_t)FFN * HIDDEN,
                            block + 4 * sq + 2 * (size_t)FFN * HIDDEN};
        if (l == 0)
            plant_layer0(&lw, opts, r);
        else
            plant_layer1(&lw, r);
        ffn_fill(&lw, l, r);
        struct {
            const char *name;
            int64_t rows, cols;
            const float *data;
        } t[] = {
            {"input_layernorm.weight", HIDDEN, 0, ones},
            {"self_attn.q_proj.weight", HIDDEN, HIDDEN, lw.q},
            {"self_attn.k_proj.weight", HIDDEN, HIDDEN, lw.k},
            {"self_attn.v_proj.weight", HIDDEN, HIDDEN, lw.v},
            {"self_attn.o_proj.weight", HIDDEN, HIDDEN, lw.o},
            {"post_attention_layernorm.weight", HIDDEN, 0, ones},
            {"mlp.gate_proj.weight", FFN, HIDDEN, lw.gate},
            {"mlp.up_proj.weight", FFN, HIDDEN, lw.up},
            {"mlp.down_proj.weight", HIDDEN, FFN, lw.down},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.%s", l, t[i].name);
            if ((st = add_tensor(w, name, opts->dtype, t[i].rows, t[i].cols, t[i].data, err)))
                goto done;
        }
    }
    st = add_tensor(w, "model.norm.weight", opts->dtype, HIDDEN, 0, ones, err);
    if (st == LP_OK)
        st = lp_st_writer_set_metadata(w, "format", "pt", err);
done:
    free(embd);
    free(ones);
    free(block);
    return st;
}

/* ---- JSON files ---------------------------------------------------------------------------------- */

static const char *torch_dtype_name(lp_dtype dtype)
{
    return dtype == LP_DTYPE_BF16 ? "bfloat16" : dtype == LP_DTYPE_F16 ? "float16" : "float32";
}

/* json_object_set_new that remembers an allocation failure instead of checking every call. */
static void put(json_t *obj, const char *key, json_t *value, bool *ok)
{
    if (!value || json_object_set_new(obj, key, value) != 0)
        *ok = false;
}

static void append(json_t *arr, json_t *value, bool *ok)
{
    if (!value || json_array_append_new(arr, value) != 0)
        *ok = false;
}

static json_t *config_json(const vocab *v, const lp_synth_options *opts, bool *ok)
{
    json_t *c = json_object(), *arch = json_array();
    if (!c || !arch) {
        json_decref(c);
        json_decref(arch);
        *ok = false;
        return NULL;
    }
    append(arch, json_string("LlamaForCausalLM"), ok);
    put(c, "architectures", arch, ok);
    put(c, "model_type", json_string("llama"), ok);
    put(c, "vocab_size", json_integer(v->n), ok);
    put(c, "hidden_size", json_integer(HIDDEN), ok);
    put(c, "intermediate_size", json_integer(FFN), ok);
    put(c, "num_hidden_layers", json_integer(N_LAYERS), ok);
    put(c, "num_attention_heads", json_integer(N_HEADS), ok);
    put(c, "num_key_value_heads", json_integer(N_HEADS), ok);
    put(c, "head_dim", json_integer(HEAD_DIM), ok);
    put(c, "hidden_act", json_string("silu"), ok);
    put(c, "max_position_embeddings", json_integer(N_CTX), ok);
    put(c, "rms_norm_eps", json_real(RMS_EPS), ok);
    put(c, "rope_theta", json_real(ROPE_THETA), ok);
    put(c, "rope_scaling", json_null(), ok);
    put(c, "attention_bias", json_false(), ok);
    put(c, "attention_dropout", json_real(0.0), ok);
    put(c, "mlp_bias", json_false(), ok);
    put(c, "tie_word_embeddings", json_true(), ok);
    put(c, "bos_token_id", json_integer(TOKEN_BOS), ok);
    put(c, "eos_token_id", json_integer(TOKEN_EOS), ok);
    put(c, "pad_token_id", json_null(), ok);
    put(c, "initializer_range", json_real(0.02), ok);
    put(c, "pretraining_tp", json_integer(1), ok);
    put(c, "use_cache", json_true(), ok);
    put(c, "torch_dtype", json_string(torch_dtype_name(opts->dtype)), ok);
    return c;
}

static json_t *special_token(int32_t id, const char *content)
{
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", (int)id, "content",
                     content, "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
                     "special", 1);
}

static json_t *tokenizer_json(const vocab *v, bool *ok)
{
    json_t *t = json_object();
    if (!t) {
        *ok = false;
        return NULL;
    }
    put(t, "version", json_string("1.0"), ok);
    put(t, "truncation", json_null(), ok);
    put(t, "padding", json_null(), ok);
    json_t *added = json_array();
    if (added) {
        append(added, special_token(TOKEN_UNK, "<unk>"), ok);
        append(added, special_token(TOKEN_BOS, "<s>"), ok);
        append(added, special_token(TOKEN_EOS, "</s>"), ok);
    }
    put(t, "added_tokens", added, ok);
    /* SentencePiece without its model file: "▁" before the text and for every space. */
    put(t, "normalizer",
        json_pack("{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}", "type", "Sequence",
                  "normalizers", "type", "Prepend", "prepend", SPACE_MARK, "type", "Replace",
                  "pattern", "String", " ", "content", SPACE_MARK),
        ok);
    put(t, "pre_tokenizer", json_null(), ok);
    put(t, "post_processor",
        json_pack("{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}],"
                  " s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}}],"
                  " s:{s:{s:s, s:[i], s:[s]}}}",
                  "type", "TemplateProcessing", "single", "SpecialToken", "id", "<s>", "type_id",
                  0, "Sequence", "id", "A", "type_id", 0, "pair", "SpecialToken", "id", "<s>",
                  "type_id", 0, "Sequence", "id", "A", "type_id", 0, "SpecialToken", "id", "<s>",
                  "type_id", 1, "Sequence", "id", "B", "type_id", 1, "special_tokens", "<s>",
                  "id", "<s>", "ids", TOKEN_BOS, "tokens", "<s>"),
        ok);
    put(t, "decoder",
        json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}, {s:s, s:s, s:i, s:i}]}", "type",
                  "Sequence", "decoders", "type", "Replace", "pattern", "String", SPACE_MARK,
                  "content", " ", "type", "ByteFallback", "type", "Fuse", "type", "Strip",
                  "content", " ", "start", 1, "stop", 0),
        ok);
    json_t *model = json_object(), *vmap = json_object(), *merges = json_array();
    if (!model || !vmap || !merges) {
        json_decref(model);
        json_decref(vmap);
        json_decref(merges);
        *ok = false;
        return t;
    }
    put(model, "type", json_string("BPE"), ok);
    put(model, "dropout", json_null(), ok);
    put(model, "unk_token", json_string("<unk>"), ok);
    put(model, "continuing_subword_prefix", json_null(), ok);
    put(model, "end_of_word_suffix", json_null(), ok);
    put(model, "fuse_unk", json_true(), ok);
    put(model, "byte_fallback", json_true(), ok);
    put(model, "ignore_merges", json_false(), ok);
    for (int32_t i = 0; i < v->n; i++)
        put(vmap, v->pieces[i], json_integer(i), ok);
    for (int32_t i = 0; i < v->n_merges; i++) {
        const char *a = v->pieces[v->merges[i][0]], *b = v->pieces[v->merges[i][1]];
        size_t len = strlen(a) + strlen(b) + 2;
        char *pair = malloc(len);
        if (!pair) {
            *ok = false;
            break;
        }
        snprintf(pair, len, "%s %s", a, b);
        append(merges, json_string(pair), ok);
        free(pair);
    }
    put(model, "vocab", vmap, ok);
    put(model, "merges", merges, ok);
    put(t, "model", model, ok);
    return t;
}

static const char *fault_name(lp_synth_fault fault)
{
    return fault == LP_SYNTH_FAULT_PREV_NO_PHASE   ? "prev-no-phase"
           : fault == LP_SYNTH_FAULT_NO_PREV_WRITE ? "no-prev-write"
                                                   : "none";
}

#define GENERATOR "loupe synth"

static json_t *planted_json(const lp_synth_options *opts, bool *ok)
{
    json_t *p = json_object(), *heads = json_array(), *noise = json_array();
    if (!p || !heads || !noise) {
        json_decref(p);
        json_decref(heads);
        json_decref(noise);
        *ok = false;
        return NULL;
    }
    put(p, "generator", json_string(GENERATOR), ok);
    put(p, "version", json_string(LP_VERSION), ok);
    put(p, "seed", json_integer((json_int_t)opts->seed), ok);
    put(p, "dtype", json_string(lp_dtype_name(opts->dtype)), ok);
    put(p, "fault", json_string(fault_name(opts->fault)), ok);
    put(p, "demo_prompt", json_string(LP_SYNTH_DEMO_PROMPT), ok);
    for (int l = 0; l < N_LAYERS; l++)
        for (int h = 0; h < N_HEADS; h++) {
            lp_synth_behaviour b = behaviour_of(l, h);
            append(b == LP_SYNTH_NOISE ? noise : heads,
                   json_pack("{s:i, s:i, s:s}", "layer", l, "head", h, "behaviour",
                             lp_synth_behaviour_name(b)),
                   ok);
        }
    put(p, "heads", heads, ok);
    put(p, "noise_heads", noise, ok);
    return p;
}

/* ---- files --------------------------------------------------------------------------------------- */

static const char *const OUTPUT_FILES[] = {"model.safetensors", "config.json", "tokenizer.json",
                                           "planted_heads.json"};
#define N_OUTPUT_FILES (sizeof OUTPUT_FILES / sizeof OUTPUT_FILES[0])

static lp_status make_dirs(const char *path, lp_error *err)
{
    size_t len = strlen(path);
    char *buf = malloc(len + 1);
    if (!buf)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            lp_status st = lp_error_set(err, LP_ERR_IO, "%s: cannot create folder: %s", buf,
                                        strerror(errno));
            free(buf);
            return st;
        }
        buf[i] = saved;
    }
    free(buf);
    if (!lp_path_is_dir(path))
        return lp_error_set(err, LP_ERR_USAGE, "%s: exists and is not a folder", path);
    return LP_OK;
}

#define TEMP_TAG ".synth-tmp."

/* An empty folder, or one whose planted_heads.json says this generator wrote it. */
static lp_status check_out_dir(const char *dir, lp_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return lp_error_set(err, LP_ERR_IO, "%s: cannot open folder: %s", dir, strerror(errno));
    bool empty = true;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        /* Temporary files of an interrupted run of ours do not make the folder someone else's. */
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
            strstr(e->d_name, TEMP_TAG) == NULL) {
            empty = false;
            break;
        }
    closedir(d);
    if (empty)
        return LP_OK;
    char *marker = lp_path_join(dir, "planted_heads.json");
    if (!marker)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    /* A marker we wrote is about 1.5 KiB; anything far larger is not ours (and is not read). */
    char *text = NULL;
    size_t size = 0;
    lp_error ignored = {0};
    json_t *root = NULL;
    if (lp_path_exists(marker) && lp_read_file(marker, 1u << 20, &text, &size, &ignored) == LP_OK)
        root = json_loadb(text, size, 0, NULL);
    free(text);
    free(marker);
    const char *gen = json_string_value(json_object_get(root, "generator"));
    bool ours = gen && strcmp(gen, GENERATOR) == 0;
    json_decref(root);
    if (!ours)
        return lp_error_set(err, LP_ERR_USAGE,
                            "%s: folder is not empty and is no earlier synth output (no "
                            "planted_heads.json from \"%s\"): refusing to overwrite it",
                            dir, GENERATOR);
    return LP_OK;
}

static char *temp_name(const char *dir, const char *name)
{
    char tmp[256];
    snprintf(tmp, sizeof tmp, ".%s" TEMP_TAG "%ld", name, (long)getpid());
    return lp_path_join(dir, tmp);
}

static lp_status write_json(json_t *root, const char *path, lp_error *err)
{
    if (json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) != 0)
        return lp_error_set(err, LP_ERR_IO, "%s: cannot write: %s", path,
                            errno ? strerror(errno) : "jansson failed");
    return LP_OK;
}

lp_status lp_synth_write(const char *out_dir, const lp_synth_options *opts_in, lp_error *err)
{
    lp_synth_options opts;
    if (opts_in)
        opts = *opts_in;
    else
        lp_synth_options_init(&opts);
    if (!out_dir || !*out_dir)
        return lp_error_set(err, LP_ERR_USAGE, "no output folder given (the path is empty)");
    if (opts.dtype != LP_DTYPE_F32 && opts.dtype != LP_DTYPE_BF16 && opts.dtype != LP_DTYPE_F16)
        return lp_error_set(err, LP_ERR_USAGE, "dtype '%s' is not one of f32, bf16, f16",
                            lp_dtype_name(opts.dtype));
    if ((unsigned)opts.fault >= LP_SYNTH_FAULT_COUNT)
        return lp_error_set(err, LP_ERR_USAGE, "fault %d is not one of 0..%d",
                            (int)opts.fault, LP_SYNTH_FAULT_COUNT - 1);

    lp_status st;
    if (lp_path_exists(out_dir) && !lp_path_is_dir(out_dir))
        return lp_error_set(err, LP_ERR_USAGE, "%s: exists and is not a folder", out_dir);
    if (lp_path_exists(out_dir) && (st = check_out_dir(out_dir, err)) != LP_OK)
        return st;

    /* Everything in memory first. */
    vocab v = {0};
    float *ident = NULL;
    lp_st_writer *writer = NULL;
    json_t *docs[3] = {NULL, NULL, NULL};
    char *tmp[N_OUTPUT_FILES] = {NULL};
    char *final[N_OUTPUT_FILES] = {NULL};
    bool ok = true;
    rng r = {opts.seed};

    if ((st = vocab_build(&v, err)) != LP_OK)
        goto done;
    ident = malloc((size_t)v.n * ID_DIM * sizeof *ident);
    if (!ident) {
        st = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        goto done;
    }
    identities_draw(&v, &r, ident);
    if ((st = lp_st_writer_create(&writer, err)) != LP_OK ||
        (st = build_weights(&v, ident, &opts, &r, writer, err)) != LP_OK)
        goto done;
    docs[0] = config_json(&v, &opts, &ok);
    docs[1] = tokenizer_json(&v, &ok);
    docs[2] = planted_json(&opts, &ok);
    if (!ok || !docs[0] || !docs[1] || !docs[2]) {
        st = lp_error_set(err, LP_ERR_NOMEM, "out of memory building the JSON files");
        goto done;
    }

    /* Then the files: temporary names first, renamed only when all four are written. */
    if ((st = make_dirs(out_dir, err)) != LP_OK)
        goto done;
    for (size_t i = 0; i < N_OUTPUT_FILES; i++) {
        tmp[i] = temp_name(out_dir, OUTPUT_FILES[i]);
        final[i] = lp_path_join(out_dir, OUTPUT_FILES[i]);
        if (!tmp[i] || !final[i]) {
            st = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    if ((st = lp_st_writer_write(writer, tmp[0], err)) != LP_OK)
        goto done;
    for (size_t i = 1; i < N_OUTPUT_FILES; i++)
        if ((st = write_json(docs[i - 1], tmp[i], err)) != LP_OK)
            goto done;
    for (size_t i = 0; i < N_OUTPUT_FILES; i++)
        if (rename(tmp[i], final[i]) != 0) {
            st = lp_error_set(err, LP_ERR_IO, "%s: cannot rename into place: %s", final[i],
                              strerror(errno));
            goto done;
        }

done:
    for (size_t i = 0; i < N_OUTPUT_FILES; i++) {
        if (tmp[i])
            remove(tmp[i]); /* no-op once renamed */
        free(tmp[i]);
        free(final[i]);
    }
    for (int i = 0; i < 3; i++)
        json_decref(docs[i]);
    lp_st_writer_destroy(writer);
    free(ident);
    vocab_free(&v);
    return st;
}

/* ---- the check ------------------------------------------------------------------------------------ */

typedef struct check_capture {
    int64_t T, n_layers, n_heads, vocab;
    float *probs;   /* [n_layers, n_heads, T, T] */
    lp_head_stats *stats; /* [n_layers, n_heads] */
    float *logits;  /* [T, vocab] */
} check_capture;

static bool check_want(void *ctx, const lp_site *site)
{
    (void)ctx;
    return site->kind == LP_SITE_ATTN_PROBS || site->kind == LP_SITE_LOGITS;
}

static lp_status check_observe(void *ctx, const lp_site *site, const lp_view *view, lp_error *err)
{
    check_capture *c = ctx;
    if (site->kind == LP_SITE_LOGITS) {
        if (view->row0 < 0 || view->row0 + view->rows > c->T || view->cols != c->vocab)
            return lp_error_set(err, LP_ERR_RANGE, "check: logits rows [%lld, %lld) of %lld",
                                (long long)view->row0, (long long)(view->row0 + view->rows),
                                (long long)c->T);
        for (int64_t r = 0; r < view->rows; r++)
            memcpy(c->logits + (view->row0 + r) * c->vocab, view->data + r * view->stride,
                   (size_t)c->vocab * sizeof(float));
        return LP_OK;
    }
    if (site->layer < 0 || site->layer >= c->n_layers || site->head < 0 ||
        site->head >= c->n_heads || view->rows != c->T || view->cols != c->T)
        return lp_error_set(err, LP_ERR_RANGE, "check: unexpected attention site L%d H%d "
                            "[%lld, %lld]", site->layer, site->head, (long long)view->rows,
                            (long long)view->cols);
    int64_t idx = (int64_t)site->layer * c->n_heads + site->head;
    float *dst = c->probs + idx * c->T * c->T;
    for (int64_t r = 0; r < c->T; r++)
        memcpy(dst + r * c->T, view->data + r * view->stride, (size_t)c->T * sizeof(float));
    lp_head_stats_from_rows(view->row_stats, view->rows, 0, &c->stats[idx]);
    return LP_OK;
}

/* The statistic a behaviour is found by, for one head. */
static double check_value(const check_capture *c, const int32_t *tokens, lp_synth_behaviour b,
                          int64_t idx)
{
    const lp_head_stats *st = &c->stats[idx];
    switch (b) {
    case LP_SYNTH_PREV_TOKEN:
        return st->prev_token;
    case LP_SYNTH_SINK:
        return st->sink;
    case LP_SYNTH_LOCAL:
        return st->local_frac;
    case LP_SYNTH_UNIFORM:
        return st->entropy;
    case LP_SYNTH_INDUCTION: {
        /* Second copy: mass on keys k whose previous token equals the query's token. */
        const int64_t T = c->T, second = 1 + (T - 1) / 2;
        const float *p = c->probs + idx * T * T;
        double total = 0;
        for (int64_t q = second; q < T; q++)
            for (int64_t k = 1; k <= q; k++)
                if (tokens[k - 1] == tokens[q] && k - 1 < q)
                    total += (double)p[q * T + k];
        return T > second ? total / (double)(T - second) : 0.0;
    }
    default:
        return 0.0;
    }
}

static bool check_competes(const check_capture *c, lp_synth_behaviour b, int planted_layer,
                           int layer, int64_t idx)
{
    if (b == LP_SYNTH_UNIFORM)
        return layer == planted_layer;
    if (b == LP_SYNTH_LOCAL) /* a previous-token or self head is local trivially */
        return c->stats[idx].prev_token <= 0.5 && c->stats[idx].self <= 0.5;
    return true;
}

static void check_judge(const check_capture *c, const int32_t *tokens, lp_synth_report *rep)
{
    static const char *const stat_names[] = {"prev_token", "sink", "local_frac", "entropy",
                                             "induction_mass"};
    static const double bars[] = {0.9, 0.9, 0.9, 0.0, 0.5};
    rep->passed = true;
    for (size_t i = 0; i < N_PLANTED && i < sizeof rep->findings / sizeof rep->findings[0]; i++) {
        const lp_synth_head *ph = &PLANTED[i];
        lp_synth_finding *f = &rep->findings[rep->n_findings++];
        memset(f, 0, sizeof *f);
        f->head = *ph;
        f->statistic = stat_names[ph->behaviour];
        f->bar = bars[ph->behaviour];
        int64_t own = (int64_t)ph->layer * c->n_heads + ph->head;
        f->value = check_value(c, tokens, ph->behaviour, own);
        f->runner_up = -INFINITY;
        f->runner_up_layer = f->runner_up_head = -1;
        for (int l = 0; l < c->n_layers; l++)
            for (int h = 0; h < c->n_heads; h++) {
                int64_t idx = (int64_t)l * c->n_heads + h;
                if (idx == own || !check_competes(c, ph->behaviour, ph->layer, l, idx))
                    continue;
                double v = check_value(c, tokens, ph->behaviour, idx);
                if (v > f->runner_up) {
                    f->runner_up = v;
                    f->runner_up_layer = l;
                    f->runner_up_head = h;
                }
            }
        f->passed = f->value > f->bar && (f->runner_up_layer < 0 || f->value > f->runner_up);
        if (ph->behaviour == LP_SYNTH_UNIFORM) {
            double want = 0;
            for (int64_t q = 0; q < c->T; q++)
                want += 1.0 / (double)(q + 1);
            f->extra = c->stats[own].max_prob;
            f->extra_want = want / (double)c->T;
            f->passed = f->passed && fabs(f->extra - f->extra_want) < 0.01 * f->extra_want;
        }
        if (f->runner_up_layer < 0)
            f->runner_up = 0;
        rep->passed = rep->passed && f->passed;
    }
    /* Row q predicts token q + 1; in the second copy the induction head knows it. */
    const int64_t T = c->T, second = 1 + (T - 1) / 2;
    for (int64_t q = second; q + 1 < T; q++) {
        const float *lg = c->logits + q * c->vocab;
        int64_t best = 0;
        for (int64_t v = 1; v < c->vocab; v++)
            if (lg[v] > lg[best])
                best = v;
        int occurrences = 0;
        for (int64_t k = 1; k < second; k++)
            occurrences += tokens[k] == tokens[q];
        bool right = best == tokens[q + 1];
        rep->n_predicted++;
        rep->n_correct += right;
        if (occurrences == 1) {
            rep->n_unambiguous++;
            rep->n_unambiguous_correct += right;
        }
    }
    /* Alignment: rows 0 .. T-2 against token q + 1 and against token q. */
    double next = 0, same = 0;
    for (int64_t q = 0; q + 1 < T; q++) {
        const float *lg = c->logits + q * c->vocab;
        double mx = -INFINITY, sum = 0;
        for (int64_t v = 0; v < c->vocab; v++)
            mx = (double)lg[v] > mx ? (double)lg[v] : mx;
        for (int64_t v = 0; v < c->vocab; v++)
            sum += exp((double)lg[v] - mx);
        double log_z = mx + log(sum);
        next += log_z - (double)lg[tokens[q + 1]];
        same += log_z - (double)lg[tokens[q]];
    }
    rep->loss_next = T > 1 ? next / (double)(T - 1) : 0.0;
    rep->loss_current = T > 1 ? same / (double)(T - 1) : 0.0;
    rep->alignment_passed = rep->loss_next < rep->loss_current;
    rep->passed = rep->passed && rep->alignment_passed;
    rep->predictions_passed = rep->n_unambiguous > 0 &&
                              rep->n_unambiguous_correct == rep->n_unambiguous &&
                              2 * rep->n_correct > rep->n_predicted;
    rep->passed = rep->passed && rep->predictions_passed;
}

lp_status lp_synth_check(const char *model_dir, lp_synth_report *rep, lp_error *err)
{
    memset(rep, 0, sizeof *rep);
    lp_tokenizer *tok = NULL;
    lp_model *model = NULL;
    int32_t *tokens = NULL;
    size_t n_tokens = 0;
    check_capture c = {0};
    lp_status st;
    const char *prompt = LP_SYNTH_DEMO_PROMPT;
    if ((st = lp_tokenizer_open(model_dir, &tok, err)) != LP_OK ||
        (st = lp_tokenizer_encode(tok, prompt, strlen(prompt), true, &tokens, &n_tokens, err)) !=
            LP_OK ||
        (st = lp_model_open(model_dir, &model, err)) != LP_OK)
        goto done;
    const lp_arch *a = lp_model_arch(model);
    if (n_tokens < 3 || n_tokens % 2 != 1 || tokens[0] != TOKEN_BOS) {
        st = lp_error_set(err, LP_ERR_FORMAT, "%s: the demo prompt encodes to %zu tokens, not "
                          "<s> and two equal copies: not a synth tokenizer", model_dir, n_tokens);
        goto done;
    }
    for (size_t i = 1; i <= n_tokens / 2; i++)
        if (tokens[i] != tokens[i + n_tokens / 2]) {
            st = lp_error_set(err, LP_ERR_FORMAT, "%s: the demo prompt's two copies encode "
                              "differently (token %zu): not a synth tokenizer", model_dir, i);
            goto done;
        }
    for (size_t i = 0; i < N_PLANTED; i++)
        if (PLANTED[i].layer >= a->n_layers || PLANTED[i].head >= a->n_heads) {
            st = lp_error_set(err, LP_ERR_FORMAT, "%s: %lld layers x %lld heads has no layer %d "
                              "head %d: not a synth model", model_dir, (long long)a->n_layers,
                              (long long)a->n_heads, PLANTED[i].layer, PLANTED[i].head);
            goto done;
        }
    c.T = (int64_t)n_tokens;
    c.n_layers = a->n_layers;
    c.n_heads = a->n_heads;
    c.vocab = a->vocab_size;
    /* T is the demo prompt's length (29); the counts come from a config, so check them. */
    uint64_t n_maps, n_probs, n_logits;
    if (!lp_mul_u64((uint64_t)c.n_layers, (uint64_t)c.n_heads, &n_maps) ||
        !lp_mul_u64(n_maps, (uint64_t)(c.T * c.T), &n_probs) ||
        !lp_mul_u64((uint64_t)c.T, (uint64_t)c.vocab, &n_logits) || n_probs > SIZE_MAX / 4 ||
        n_logits > SIZE_MAX / 4) {
        st = lp_error_set(err, LP_ERR_RANGE, "%s: %lld layers x %lld heads x vocab %lld is too "
                          "large to check", model_dir, (long long)c.n_layers,
                          (long long)c.n_heads, (long long)c.vocab);
        goto done;
    }
    c.probs = calloc((size_t)n_probs, sizeof *c.probs);
    c.stats = calloc((size_t)n_maps, sizeof *c.stats);
    c.logits = calloc((size_t)n_logits, sizeof *c.logits);
    if (!c.probs || !c.stats || !c.logits) {
        st = lp_error_set(err, LP_ERR_NOMEM, "check: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= c.vocab) {
            st = lp_error_set(err, LP_ERR_FORMAT, "%s: token id %d outside the model's %lld",
                              model_dir, tokens[i], (long long)c.vocab);
            goto done;
        }
    lp_observer obs = {&c, check_want, check_observe};
    lp_forward_opts fopts;
    lp_forward_opts_init(&fopts);
    fopts.observer = &obs;
    lp_batch batch = lp_batch_single(tokens, c.T);
    if ((st = lp_forward(model, &batch, &fopts, err)) != LP_OK)
        goto done;
    rep->n_tokens = c.T;
    check_judge(&c, tokens, rep);
done:
    free(c.probs);
    free(c.stats);
    free(c.logits);
    free(tokens);
    lp_model_close(model);
    lp_tokenizer_close(tok);
    return st;
}
