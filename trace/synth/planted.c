/* The planted model of `loupe synth`: a Llama-style checkpoint whose weights are computed so
 * that chosen heads show chosen attention patterns (design in synth.h; every amplitude is derived
 * below). It is written through the llama family writer (family.c) with a fill that computes
 * each layer's weights from the design. */
#include "trace/synth/synth.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/mapfile.h"
#include "core/version.h"
#include "trace/synth/synth_internal.h"

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

const char *lp_synth_behaviour_name(lp_synth_behaviour behaviour)
{
    static const char *const names[] = {"previous_token", "sink", "local", "uniform",
                                        "induction", "noise"};
    return (unsigned)behaviour < LP_SYNTH_BEHAVIOUR_COUNT ? names[behaviour] : "invalid";
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

/* ---- token identities ---------------------------------------------------------------------------- */

/* Seeded unit vectors r_t in ID_DIM dims. Text tokens are drawn apart (|cos| < 0.45 between any
 * two, by rejection) so the induction head's content match is unambiguous; byte and special
 * tokens are plain random draws. <s> has no identity. */
static void identities_draw(const lp_synth_vocab *v, lp_synth_rng *r,
                            float *ident /* [n, ID_DIM] */)
{
    const double max_cos = 0.45;
    for (int32_t t = 0; t < v->n; t++) {
        float *row = ident + (size_t)t * ID_DIM;
        if (t == LP_SYNTH_TOKEN_BOS) {
            memset(row, 0, ID_DIM * sizeof *row);
            continue;
        }
        for (int attempt = 0;; attempt++) {
            double x[ID_DIM], norm = 0;
            for (int j = 0; j < ID_DIM; j++) {
                x[j] = lp_synth_rng_normal(r);
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

static void head_noise(layer_weights *lw, int head, lp_synth_rng *r)
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
            AT(lw->q, row, c) = (float)(qk_std * lp_synth_rng_normal(r));
            AT(lw->k, row, c) = (float)(qk_std * lp_synth_rng_normal(r));
            AT(lw->v, row, c) = (float)(v_std * lp_synth_rng_normal(r));
        }
        for (int out = D_NOISE; out < HIDDEN; out++)
            AT(lw->o, out, row) = (float)(o_std * lp_synth_rng_normal(r));
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

static void plant_layer0(layer_weights *lw, const lp_synth_options *opts, lp_synth_rng *r)
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

static void plant_layer1(layer_weights *lw, lp_synth_rng *r)
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

static void ffn_fill(layer_weights *lw, int layer, lp_synth_rng *r)
{
    const double in_std = 1.0 / sqrt((double)HIDDEN);
    for (size_t i = 0; i < (size_t)FFN * HIDDEN; i++) {
        lw->gate[i] = (float)(in_std * lp_synth_rng_normal(r));
        lw->up[i] = (float)(in_std * lp_synth_rng_normal(r));
    }
    for (size_t i = 0; i < (size_t)HIDDEN * FFN; i++)
        lw->down[i] = (float)(FFN_DOWN_STD * lp_synth_rng_normal(r));
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

/* ---- planted_heads.json ------------------------------------------------------------------------- */

static const char *fault_name(lp_synth_fault fault)
{
    return fault == LP_SYNTH_FAULT_PREV_NO_PHASE   ? "prev-no-phase"
           : fault == LP_SYNTH_FAULT_NO_PREV_WRITE ? "no-prev-write"
                                                   : "none";
}

#define GENERATOR "loupe synth"

static json_t *planted_json(const lp_synth_options *opts, bool *ok)
{
    /* A NULL from jansson reaches lp_synth_put or lp_synth_append, which free what they were
     * given and clear *ok. */
    json_t *p = json_object(), *heads = json_array(), *noise = json_array();
    lp_synth_put(p, "generator", json_string(GENERATOR), ok);
    lp_synth_put(p, "version", json_string(LP_VERSION), ok);
    lp_synth_put(p, "seed", json_integer((json_int_t)opts->seed), ok);
    lp_synth_put(p, "dtype", json_string(lp_dtype_name(opts->dtype)), ok);
    lp_synth_put(p, "fault", json_string(fault_name(opts->fault)), ok);
    lp_synth_put(p, "demo_prompt", json_string(LP_SYNTH_DEMO_PROMPT), ok);
    for (int l = 0; l < N_LAYERS; l++)
        for (int h = 0; h < N_HEADS; h++) {
            lp_synth_behaviour b = behaviour_of(l, h);
            lp_synth_append(b == LP_SYNTH_NOISE ? noise : heads,
                            json_pack("{s:i, s:i, s:s}", "layer", l, "head", h, "behaviour",
                                      lp_synth_behaviour_name(b)),
                            ok);
        }
    lp_synth_put(p, "heads", heads, ok);
    lp_synth_put(p, "noise_heads", noise, ok);
    return p;
}

/* ---- the weights, tensor by tensor --------------------------------------------------------------- */

/* What the llama writer's fill works from. Each layer's matrices are computed together (the
 * plantings set entries across q, k, v and o) when the layer's first matrix is asked for; the
 * writer asks in file order, so the random stream is drawn layer by layer as the design says. */
typedef struct planted_fill {
    const lp_synth_vocab *v;
    const float *ident; /* [v->n, ID_DIM] */
    const lp_synth_options *opts;
    lp_synth_rng *r;
    int layer;          /* whose matrices lw holds; -1 before the first */
    float *block;       /* q, k, v, o [HIDDEN, HIDDEN]; gate, up [FFN, HIDDEN]; down [HIDDEN, FFN] */
    layer_weights lw;   /* views into block */
} planted_fill;

#define BLOCK_FLOATS (4 * (size_t)HIDDEN * HIDDEN + 3 * (size_t)FFN * HIDDEN)

static void planted_layer(planted_fill *p, int l)
{
    const size_t sq = (size_t)HIDDEN * HIDDEN, ffn = (size_t)FFN * HIDDEN;
    float *b = p->block;
    memset(b, 0, BLOCK_FLOATS * sizeof *b);
    layer_weights lw = {b, b + sq, b + 2 * sq, b + 3 * sq, b + 4 * sq, b + 4 * sq + ffn,
                        b + 4 * sq + 2 * ffn};
    p->lw = lw;
    if (l == 0)
        plant_layer0(&p->lw, p->opts, p->r);
    else
        plant_layer1(&p->lw, p->r);
    ffn_fill(&p->lw, l, p->r);
    p->layer = l;
}

/* Embedding rows of norm 1: 0.8 r_t, the constant 0.6 and <s>'s flag. */
static void planted_embedding(const planted_fill *p, float *embd /* [v->n, HIDDEN] */)
{
    for (int32_t t = 0; t < p->v->n; t++) {
        float *row = embd + (size_t)t * HIDDEN;
        for (int j = 0; j < ID_DIM; j++)
            row[D_ID + j] = (float)(ID_AMP * (double)p->ident[(size_t)t * ID_DIM + j]);
        row[D_CONST] = (float)CONST_AMP;
        if (t == LP_SYNTH_TOKEN_BOS)
            row[D_BOS] = (float)BOS_AMP;
    }
}

static const float *planted_matrix(planted_fill *p, const lp_synth_tensor *t)
{
    if (t->layer < 0 || t->is_bias)
        return NULL;
    if (t->layer != p->layer)
        planted_layer(p, t->layer);
    switch (t->role) {
    case LP_ROLE_ATTN_Q: return p->lw.q;
    case LP_ROLE_ATTN_K: return p->lw.k;
    case LP_ROLE_ATTN_V: return p->lw.v;
    case LP_ROLE_ATTN_O: return p->lw.o;
    case LP_ROLE_FFN_GATE: return p->lw.gate;
    case LP_ROLE_FFN_UP: return p->lw.up;
    case LP_ROLE_FFN_DOWN: return p->lw.down;
    default: return NULL;
    }
}

static lp_status fill_planted(void *ctx, const lp_synth_tensor *t, float *data, lp_error *err)
{
    planted_fill *p = ctx;
    size_t n = (size_t)t->rows * (size_t)(t->cols > 0 ? t->cols : 1);
    if (t->role == LP_ROLE_TOKEN_EMBD) {
        planted_embedding(p, data);
        return LP_OK;
    }
    if (t->role == LP_ROLE_ATTN_NORM || t->role == LP_ROLE_FFN_NORM ||
        t->role == LP_ROLE_OUTPUT_NORM) {
        for (size_t i = 0; i < n; i++)
            data[i] = 1.0f;
        return LP_OK;
    }
    const float *src = planted_matrix(p, t);
    if (!src)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "planted model: no design for tensor %s",
                            t->name);
    memcpy(data, src, n * sizeof *data);
    return LP_OK;
}

/* The llama the planted model is: its shape, and the planted fill for its weights. */
static lp_synth_spec planted_spec(const lp_synth_vocab *v, const lp_synth_options *opts,
                                  planted_fill *fill)
{
    lp_synth_spec spec = {
        .family = LP_SYNTH_LLAMA, .vocab = v->n, .hidden = HIDDEN, .n_layers = N_LAYERS,
        .n_heads = N_HEADS, .n_kv_heads = N_HEADS, .head_dim = HEAD_DIM, .ffn = FFN,
        .n_ctx = N_CTX, .norm_eps = RMS_EPS, .rope_theta = ROPE_THETA, .tied = true,
        .bos_id = LP_SYNTH_TOKEN_BOS, .eos_id = LP_SYNTH_TOKEN_EOS, .dtype = opts->dtype,
        .vector_dtype = opts->dtype, .fill = fill_planted, .fill_ctx = fill,
    };
    return spec;
}

/* ---- writing it -------------------------------------------------------------------------------- */

/* Everything lp_synth_write writes, built in memory first. */
typedef struct planted_model {
    lp_synth_vocab v;
    float *ident;     /* [v.n, ID_DIM] */
    float *block;     /* one layer's matrices */
    lp_st_writer *tensors;
    json_t *docs[3];  /* config.json, tokenizer.json, planted_heads.json */
} planted_model;

static void planted_model_free(planted_model *m)
{
    for (int i = 0; i < 3; i++)
        json_decref(m->docs[i]);
    lp_st_writer_destroy(m->tensors);
    free(m->block);
    free(m->ident);
    lp_synth_vocab_free(&m->v);
}

static lp_status build_planted(const lp_synth_options *opts, planted_model *m, lp_error *err)
{
    lp_synth_rng r = {opts->seed};
    lp_status st = lp_synth_vocab_build(&m->v, err);
    if (st != LP_OK)
        return st;
    m->ident = malloc((size_t)m->v.n * ID_DIM * sizeof *m->ident);
    m->block = malloc(BLOCK_FLOATS * sizeof *m->block);
    if (!m->ident || !m->block)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory for the weights (%zu MiB)",
                            (BLOCK_FLOATS * sizeof(float)) >> 20);
    identities_draw(&m->v, &r, m->ident);
    planted_fill fill = {&m->v, m->ident, opts, &r, -1, m->block, {0}};
    lp_synth_spec spec = planted_spec(&m->v, opts, &fill);
    if ((st = lp_st_writer_create(&m->tensors, err)) != LP_OK ||
        (st = lp_synth_add_tensors(&spec, m->tensors, err)) != LP_OK)
        return st;
    bool ok = true;
    m->docs[0] = lp_synth_config_json(&spec);
    m->docs[1] = lp_synth_tokenizer_json(&m->v, &ok);
    m->docs[2] = planted_json(opts, &ok);
    if (!ok || !m->docs[0] || !m->docs[1] || !m->docs[2])
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory building the JSON files");
    return LP_OK;
}

/* The options and the folder, checked before anything is built. */
static lp_status check_request(const char *out_dir, const lp_synth_options *opts, lp_error *err)
{
    if (!out_dir || !*out_dir)
        return lp_error_set(err, LP_ERR_USAGE, "no output folder given (the path is empty)");
    if (opts->dtype != LP_DTYPE_F32 && opts->dtype != LP_DTYPE_BF16 && opts->dtype != LP_DTYPE_F16)
        return lp_error_set(err, LP_ERR_USAGE, "dtype '%s' is not one of f32, bf16, f16",
                            lp_dtype_name(opts->dtype));
    if ((unsigned)opts->fault >= LP_SYNTH_FAULT_COUNT)
        return lp_error_set(err, LP_ERR_USAGE, "fault %d is not one of 0..%d", (int)opts->fault,
                            LP_SYNTH_FAULT_COUNT - 1);
    if (!lp_path_exists(out_dir))
        return LP_OK;
    if (!lp_path_is_dir(out_dir))
        return lp_error_set(err, LP_ERR_USAGE, "%s: exists and is not a folder", out_dir);
    return lp_synth_check_out_dir(out_dir, GENERATOR, err);
}

lp_status lp_synth_write(const char *out_dir, const lp_synth_options *opts_in, lp_error *err)
{
    lp_synth_options opts;
    if (opts_in)
        opts = *opts_in;
    else
        lp_synth_options_init(&opts);
    lp_status st = check_request(out_dir, &opts, err);
    if (st != LP_OK)
        return st;
    planted_model m;
    memset(&m, 0, sizeof m);
    st = build_planted(&opts, &m, err);
    if (st == LP_OK) {
        lp_synth_file files[] = {{"model.safetensors", m.tensors, NULL, NULL},
                                 {"config.json", NULL, m.docs[0], NULL},
                                 {"tokenizer.json", NULL, m.docs[1], NULL},
                                 {"planted_heads.json", NULL, m.docs[2], NULL}};
        st = lp_synth_commit(out_dir, files, sizeof files / sizeof files[0], err);
    }
    planted_model_free(&m);
    return st;
}
