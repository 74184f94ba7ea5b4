/* The tests' reference forward pass: each family written out the way its Hugging Face modeling
 * file computes it, in double, one loop per formula. Slow and obvious on purpose. Writing a model
 * to disk is trace/synth's job (lp_synth_write_family); this file only says which of its arrays
 * each tensor is. */
#include "ref_forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "trace/synth/synth.h"

/* ---- random weights ---- */

static uint64_t next_u64(uint64_t *s)
{
    /* xorshift64*: enough for test weights, same on every platform */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static float *rand_tensor(uint64_t *s, int64_t n, double scale, double offset)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    if (!p)
        return NULL;
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(next_u64(s) >> 11) / 9007199254740992.0; /* [0, 1) */
        p[i] = (float)(offset + scale * (2.0 * u - 1.0));
    }
    return p;
}

static int64_t q_dim(const ref_config *c) { return c->n_heads * c->head_dim; }
static bool is_gemma(const ref_config *c)
{
    return c->family == REF_GEMMA || c->family == REF_GEMMA2 || c->family == REF_GEMMA3;
}
/* Gemma 2/3: norms after attention and FFN too */
static bool has_post_norms(const ref_config *c)
{
    return c->family == REF_GEMMA2 || c->family == REF_GEMMA3 || c->family == REF_OLMO2;
}
static int64_t kv_dim(const ref_config *c) { return c->n_kv_heads * c->head_dim; }

bool ref_layer_routed(const ref_config *c, int64_t l)
{
    if (c->family == REF_MIXTRAL || c->family == REF_GPT_OSS)
        return true;
    if (c->family == REF_DEEPSEEK)
        return l >= c->first_dense;
    if (c->family != REF_QWEN_MOE || (l < 64 && (c->mlp_only >> l) & 1))
        return false;
    return (l + 1) % (c->sparse_step > 0 ? c->sparse_step : 1) == 0;
}
/* One routed expert's width */
static int64_t expert_ffn(const ref_config *c) { return c->expert_ffn > 0 ? c->expert_ffn : c->ffn; }
/* The shared expert's width: Qwen's own, DeepSeek's n_shared routed widths */
static int64_t shared_width(const ref_config *c)
{
    return c->family == REF_DEEPSEEK ? c->n_shared * expert_ffn(c) : c->shared_ffn;
}
/* MLA: the per-head dims */
static int64_t nope_dim(const ref_config *c) { return c->head_dim - c->rope_dim; }
static int64_t o_width(const ref_config *c)
{
    return c->family == REF_DEEPSEEK ? c->n_heads * c->v_dim : q_dim(c);
}

int64_t ref_head_out_width(const ref_config *c)
{
    return c->family == REF_DEEPSEEK ? c->v_dim : c->head_dim;
}

/* LayerNorm with bias and a plain (ungated) MLP */
static bool is_layernorm_mlp(const ref_config *c)
{
    return c->family == REF_GPT2 || c->family == REF_NEOX || c->family == REF_PHI ||
           c->family == REF_GPTJ || c->family == REF_FALCON || c->family == REF_BLOOM ||
           c->family == REF_OPT || c->family == REF_MPT || c->family == REF_STARCODER2;
}
/* OPT's token embedding width (project_in / project_out when it is not hidden) */
static int64_t embed_dim(const ref_config *c) { return c->embed_dim > 0 ? c->embed_dim : c->hidden; }

/* A learned position table added to the embeddings: GPT-2, OPT, MPT without ALiBi. */
static bool learned_positions(const ref_config *c)
{
    return c->family == REF_GPT2 || c->family == REF_OPT || (c->family == REF_MPT && !c->alibi);
}
/* biases on the MLP's two matrices; on q, k, v and o (Falcon: its one "bias" switch) */
static bool has_mlp_bias(const ref_config *c)
{
    return c->family == REF_FALCON || c->family == REF_MPT || c->family == REF_STARCODER2
               ? c->qkv_bias
               : is_layernorm_mlp(c);
}
static bool has_attn_bias(const ref_config *c)
{
    if (c->family == REF_GPT_OSS)
        return true;
    return c->family == REF_FALCON || c->family == REF_MPT || c->family == REF_STARCODER2
               ? c->qkv_bias
               : is_layernorm_mlp(c) && c->family != REF_GPTJ;
}
/* attention and MLP both read the block's input; one norm feeds both (Phi, GPT-J) */
static bool is_parallel(const ref_config *c)
{
    return ((c->family == REF_NEOX || c->family == REF_STABLELM) && c->parallel) ||
           c->family == REF_PHI || c->family == REF_GPTJ ||
           (c->family == REF_FALCON && (c->parallel || c->new_arch));
}
static bool shares_input_norm(const ref_config *c)
{
    return c->family == REF_PHI || c->family == REF_GPTJ ||
           ((c->family == REF_STABLELM || c->family == REF_FALCON) && c->parallel && !c->new_arch);
}
static bool uses_layernorm(const ref_config *c)
{
    return is_layernorm_mlp(c) || c->family == REF_STABLELM;
}
/* StableLM: each head's q and k norm is its own */
static bool qk_norm_each_head(const ref_config *c) { return c->family == REF_STABLELM; }
/* OLMo 2, MPT: one q norm over all heads, one k norm; OLMo 2 has no norms before the sublayers */
static bool qk_norm_whole(const ref_config *c)
{
    return c->family == REF_OLMO2 || c->family == REF_MPT;
}
/* LayerNorms carry a bias, except MPT's with no_bias */
static bool has_norm_bias(const ref_config *c)
{
    return uses_layernorm(c) && (c->family != REF_MPT || c->qkv_bias);
}
static bool has_input_norms(const ref_config *c)
{
    return c->family != REF_OLMO2 && !(c->family == REF_OPT && c->post_norm);
}

bool ref_model_random(const ref_config *cfg, uint64_t seed, ref_model *m)
{
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    const ref_config *c = &m->cfg;
    uint64_t s = seed ? seed : 1;
    double sc = c->scale > 0 ? c->scale : 0.2;
    int64_t H = c->hidden, F = c->ffn;
    bool ok = true;
    /* Norm weights near 1 (near 0 for Gemma's 1 + w), so activations keep a sane size. */
    bool gemma = is_gemma(c);
    double norm_offset = gemma ? 0.0 : 1.0;
#define RT(ptr, n, scale, off)                            \
    do {                                                  \
        (ptr) = rand_tensor(&s, (n), (scale), (off));     \
        ok = ok && (ptr) != NULL;                         \
    } while (0)
    RT(m->embed, c->vocab * embed_dim(c), gemma ? sc / 4 : sc, 0.0);
    if (learned_positions(c)) /* OPT's table has 2 rows more */
        RT(m->pos, (c->n_positions + (c->family == REF_OPT ? 2 : 0)) * H, sc, 0.0);
    if (embed_dim(c) != H) {
        RT(m->project_in, H * embed_dim(c), sc * 4, 0.0);
        RT(m->project_out, embed_dim(c) * H, sc * 4, 0.0);
    }
    RT(m->out_norm, H, 0.1, norm_offset);
    if (has_norm_bias(c))
        RT(m->out_norm_b, H, 0.1, 0.0);
    if (c->tied)
        m->lm_head = m->embed;
    else
        RT(m->lm_head, c->vocab * embed_dim(c), sc, 0.0);
    if (c->family == REF_PHI || c->family == REF_GPTJ)
        RT(m->lm_head_b, c->vocab, 0.1, 0.0);
    if (c->family == REF_BLOOM) {
        RT(m->embed_norm, H, 0.1, 1.0);
        RT(m->embed_norm_b, H, 0.1, 0.0);
    }
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    ok = ok && m->layers;
    for (int64_t l = 0; ok && l < c->n_layers; l++) {
        ref_layer *L = &m->layers[l];
        RT(L->attn_norm, H, 0.1, norm_offset);
        RT(L->wq, q_dim(c) * H, sc, 0.0);
        RT(L->wk, kv_dim(c) * H, sc, 0.0);
        RT(L->wv, kv_dim(c) * H, sc, 0.0);
        RT(L->wo, H * o_width(c), sc, 0.0);
        if (c->family == REF_DEEPSEEK) {
            int64_t kvr = c->kv_lora, qr = c->q_lora;
            if (qr > 0) {
                RT(L->q_a, qr * H, sc, 0.0);
                RT(L->q_a_norm, qr, 0.1, 1.0);
                RT(L->q_b, q_dim(c) * qr, sc, 0.0);
            }
            RT(L->kv_a, (kvr + c->rope_dim) * H, sc, 0.0);
            RT(L->kv_a_norm, kvr, 0.1, 1.0);
            RT(L->kv_b, c->n_heads * (nope_dim(c) + c->v_dim) * kvr, sc, 0.0);
        }
        if (!shares_input_norm(c))
            RT(L->ffn_norm, H, 0.1, norm_offset);
        if (has_norm_bias(c)) {
            RT(L->attn_norm_b, H, 0.1, 0.0);
            if (!shares_input_norm(c))
                RT(L->ffn_norm_b, H, 0.1, 0.0);
        }
        if (has_mlp_bias(c)) {
            RT(L->b_up, F, 0.1, 0.0);
            RT(L->b_down, H, 0.1, 0.0);
        }
        if (has_attn_bias(c)) {
            RT(L->bq, q_dim(c), 0.1, 0.0);
            RT(L->bk, kv_dim(c), 0.1, 0.0);
            RT(L->bv, kv_dim(c), 0.1, 0.0);
            RT(L->bo, H, 0.1, 0.0);
        }
        if (c->qkv_bias && c->family != REF_FALCON && c->family != REF_MPT &&
            c->family != REF_STARCODER2) {
            /* families with every bias drew q/k/v biases above: these replace them */
            free(L->bq);
            free(L->bk);
            free(L->bv);
            RT(L->bq, q_dim(c), 0.1, 0.0);
            RT(L->bk, kv_dim(c), 0.1, 0.0);
            RT(L->bv, kv_dim(c), 0.1, 0.0);
        }
        if (c->qk_norm) {
            bool wide = qk_norm_each_head(c) || qk_norm_whole(c);
            int64_t nq = wide ? q_dim(c) : c->head_dim;
            int64_t nk = wide ? kv_dim(c) : c->head_dim;
            RT(L->q_norm, nq, 0.1, norm_offset);
            RT(L->k_norm, nk, 0.1, norm_offset);
            if (c->family == REF_MPT && c->qkv_bias) {
                RT(L->q_norm_b, nq, 0.1, 0.0);
                RT(L->k_norm_b, nk, 0.1, 0.0);
            }
        }
        if (c->family == REF_GPT_OSS) /* sinks of either sign, large enough to take mass */
            RT(L->sinks, c->n_heads, 2.0, 0.0);
        if (has_post_norms(c)) {
            RT(L->post_attn_norm, H, 0.1, norm_offset);
            RT(L->post_ffn_norm, H, 0.1, norm_offset);
        }
        if (ref_layer_routed(c, l)) {
            int64_t EF = expert_ffn(c), SF = shared_width(c);
            RT(L->router, c->n_experts * H, 1.0, 0.0);
            if (c->v3)
                RT(L->score_bias, c->n_experts, 0.3, 0.0);
            L->e_gate = calloc((size_t)c->n_experts, sizeof(float *));
            L->e_up = calloc((size_t)c->n_experts, sizeof(float *));
            L->e_down = calloc((size_t)c->n_experts, sizeof(float *));
            ok = ok && L->e_gate && L->e_up && L->e_down;
            for (int64_t e = 0; ok && e < c->n_experts; e++) {
                RT(L->e_gate[e], EF * H, sc, 0.0);
                RT(L->e_up[e], EF * H, sc, 0.0);
                RT(L->e_down[e], H * EF, sc, 0.0);
            }
            if (c->family == REF_GPT_OSS) {
                RT(L->router_b, c->n_experts, 0.5, 0.0);
                RT(L->eb_gate, c->n_experts * EF, 0.3, 0.0);
                RT(L->eb_up, c->n_experts * EF, 0.3, 0.0);
                RT(L->eb_down, c->n_experts * H, 0.1, 0.0);
            }
            if (SF > 0) {
                RT(L->s_gate, SF * H, sc, 0.0);
                RT(L->s_up, SF * H, sc, 0.0);
                RT(L->s_down, H * SF, sc, 0.0);
                if (c->family == REF_QWEN_MOE)
                    RT(L->s_gate_w, H, 1.0, 0.0);
            }
        } else {
            if (!is_layernorm_mlp(c))
                RT(L->w_gate, F * H, sc, 0.0);
            RT(L->w_up, F * H, sc, 0.0);
            RT(L->w_down, H * F, sc, 0.0);
        }
    }
#undef RT
    if (!ok)
        ref_model_free(m);
    return ok;
}

void ref_model_free(ref_model *m)
{
    if (m->layers) {
        for (int64_t l = 0; l < m->cfg.n_layers; l++) {
            ref_layer *L = &m->layers[l];
            float *ps[] = {L->attn_norm, L->attn_norm_b, L->wq, L->wk, L->wv, L->wo, L->bq, L->bk,
                           L->bv, L->bo, L->post_attn_norm, L->ffn_norm, L->ffn_norm_b, L->w_gate,
                           L->w_up, L->w_down, L->b_up, L->b_down, L->post_ffn_norm, L->router,
                           L->q_norm, L->k_norm, L->s_gate, L->s_up, L->s_down, L->s_gate_w,
                           L->q_a, L->q_a_norm, L->q_b, L->kv_a, L->kv_a_norm, L->kv_b,
                           L->score_bias, L->sinks, L->router_b, L->eb_gate, L->eb_up,
                           L->eb_down, L->q_norm_b, L->k_norm_b};
            for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
                free(ps[i]);
            for (int64_t e = 0; L->e_gate && e < m->cfg.n_experts; e++) {
                if (L->e_gate) free(L->e_gate[e]);
                if (L->e_up) free(L->e_up[e]);
                if (L->e_down) free(L->e_down[e]);
            }
            free(L->e_gate);
            free(L->e_up);
            free(L->e_down);
        }
    }
    free(m->layers);
    if (m->lm_head != m->embed)
        free(m->lm_head);
    free(m->embed);
    free(m->pos);
    free(m->out_norm);
    free(m->out_norm_b);
    free(m->lm_head_b);
    free(m->embed_norm);
    free(m->embed_norm_b);
    free(m->project_in);
    free(m->project_out);
    memset(m, 0, sizeof *m);
}

void ref_outputs_free(ref_outputs *out)
{
    free(out->logits);
    free(out->probs);
    free(out->resid);
    free(out->head_out);
    free(out->experts);
    memset(out, 0, sizeof *out);
}

/* ---- the pass, in double ---- */

/* y[n_out] = W[n_out, n_in] x + b */
static void matvec(double *y, const float *w, const float *b, const double *x, int64_t n_out,
                   int64_t n_in)
{
    for (int64_t o = 0; o < n_out; o++) {
        double sum = b ? (double)b[o] : 0.0;
        for (int64_t i = 0; i < n_in; i++)
            sum += (double)w[o * n_in + i] * x[i];
        y[o] = sum;
    }
}

static void norm(const ref_config *c, double *y, const double *x, const float *w, const float *b,
                 int64_t n)
{
    if (uses_layernorm(c)) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; i++)
            mean += x[i];
        mean /= (double)n;
        for (int64_t i = 0; i < n; i++)
            var += (x[i] - mean) * (x[i] - mean);
        var /= (double)n;
        for (int64_t i = 0; i < n; i++)
            y[i] = (x[i] - mean) / sqrt(var + c->eps) * (double)w[i] + (b ? (double)b[i] : 0.0);
        return;
    }
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / (double)n + c->eps);
    for (int64_t i = 0; i < n; i++) {
        double g = is_gemma(c) ? 1.0 + (double)w[i] : (double)w[i];
        y[i] = x[i] * inv * g;
    }
}

/* RMSNorm with its own eps (DeepSeek's latent norms) */
static void rms_eps(double *y, const double *x, const float *w, int64_t n, double eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * inv * (double)w[i];
}

static double silu(double v) { return v / (1.0 + exp(-v)); }
static double gelu_tanh(double v)
{
    return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

static double gelu_erf(double v) { return 0.5 * v * (1.0 + erf(v / sqrt(2.0))); }

/* longrope (Phi-3): the factor set of a call of T tokens and the cos/sin multiplier */
static const double *longrope_factors(const ref_config *c, int64_t T, double *mscale)
{
    *mscale = 1.0;
    if (c->longrope_orig <= 0)
        return NULL;
    double s = (double)c->n_ctx / (double)c->longrope_orig;
    if (s > 1.0)
        *mscale = sqrt(1.0 + log(s) / log((double)c->longrope_orig));
    return T > c->longrope_orig ? c->long_factor : c->short_factor;
}

/* DeepSeek's yarn_get_mscale */
static double yarn_m(double factor, double m) { return factor <= 1 ? 1.0 : 0.1 * m * log(factor) + 1.0; }

/* DeepSeek's YaRN frequency of pair i (extrapolated below the beta_fast correction dim,
 * interpolated by the factor above beta_slow's, a linear ramp between) and *mag, the cos/sin
 * magnitude. */
static double yarn_freq(const ref_config *c, double base, int64_t dim, int64_t i, double extra,
                        double *mag)
{
    const double pi = 3.14159265358979323846;
    double orig = (double)c->yarn_orig, d = (double)dim;
    double low = d * log(orig / (32.0 * 2 * pi)) / (2 * log(base));
    double high = d * log(orig / (1.0 * 2 * pi)) / (2 * log(base));
    if (c->family != REF_GPT_OSS) { /* gpt-oss's "truncate": false keeps them fractional */
        low = floor(low);
        high = ceil(high);
    }
    low = low < 0 ? 0 : low;
    high = high > d - 1 ? d - 1 : high;
    if (low == high)
        high += 0.001;
    double ramp = ((double)i - low) / (high - low);
    ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
    double keep = 1.0 - ramp; /* the share of the extrapolated frequency */
    /* DeepSeek's mscale ratio; transformers' default 0.1 ln(factor) + 1 for gpt-oss */
    *mag = c->family == REF_GPT_OSS
               ? yarn_m(c->yarn_factor, 1.0)
               : yarn_m(c->yarn_factor, c->yarn_mscale) / yarn_m(c->yarn_factor, c->yarn_mscale_all);
    return extra / c->yarn_factor * (1.0 - keep) + extra * keep;
}

static void rope(const ref_config *c, double theta, double *v, int64_t n_heads, int64_t pos,
                 const double *ext, double mscale)
{
    int64_t hd = c->head_dim, rot = c->rope_dim > 0 ? c->rope_dim : hd, half = rot / 2;
    for (int64_t h = 0; h < n_heads; h++) {
        double *x = v + h * hd;
        for (int64_t i = 0; i < half; i++) {
            /* inv_freq over the rotated dims only, as HF's partial_rotary_factor does */
            double freq = pow(theta, -(double)(2 * i) / (double)rot) / (ext ? ext[i] : 1.0);
            double mag = mscale;
            if (c->yarn_factor > 0)
                freq = yarn_freq(c, theta, rot, i, freq, &mag);
            double a = (double)pos * freq, cs = cos(a) * mag, sn = sin(a) * mag;
            int64_t i0 = c->rope_adjacent ? 2 * i : i;
            int64_t i1 = c->rope_adjacent ? 2 * i + 1 : i + half;
            double x0 = x[i0], x1 = x[i1];
            x[i0] = x0 * cs - x1 * sn;
            x[i1] = x0 * sn + x1 * cs;
        }
    }
}

/* The FFN of one token: dense, or an expert's SwiGLU. */
static void mlp_w(const ref_config *c, int64_t F, double *out, const double *x,
                  const float *w_gate, const float *w_up, const float *w_down, const float *b_up,
                  const float *b_down, double *g, double *u)
{
    int64_t H = c->hidden;
    matvec(u, w_up, b_up, x, F, H);
    if (is_layernorm_mlp(c)) {
        /* GPT-NeoX's and Falcon's "gelu" is the exact one; GPT-2, Phi and GPT-J use gelu_new */
        bool exact = c->family == REF_NEOX || c->family == REF_FALCON || c->family == REF_MPT;
        for (int64_t i = 0; i < F; i++)
            g[i] = c->family == REF_OPT ? (u[i] > 0 ? u[i] : 0.0)
                   : exact              ? gelu_erf(u[i])
                                        : gelu_tanh(u[i]);
    } else {
        matvec(g, w_gate, NULL, x, F, H);
        for (int64_t i = 0; i < F; i++)
            g[i] = (is_gemma(c) ? gelu_tanh(g[i]) : silu(g[i])) * u[i];
    }
    matvec(out, w_down, b_down, g, H, F);
}

static void mlp(const ref_config *c, double *out, const double *x, const float *w_gate,
                const float *w_up, const float *w_down, const float *b_up, const float *b_down,
                double *g, double *u)
{
    mlp_w(c, c->ffn, out, x, w_gate, w_up, w_down, b_up, b_down, g, u);
}

/* gpt-oss's expert e on one token (GptOssExperts): biased gate and up, gate clamped above and up
 * to [-limit, limit], (up + 1) * gate * sigmoid(1.702 gate), biased down. */
static void oss_expert(const ref_config *c, const ref_layer *Ly, int64_t e, double *out,
                       const double *x, double *g, double *u)
{
    int64_t H = c->hidden, F = expert_ffn(c);
    double limit = c->swiglu_limit > 0 ? c->swiglu_limit : 7.0;
    matvec(g, Ly->e_gate[e], Ly->eb_gate + e * F, x, F, H);
    matvec(u, Ly->e_up[e], Ly->eb_up + e * F, x, F, H);
    for (int64_t i = 0; i < F; i++) {
        double gv = g[i] > limit ? limit : g[i];
        double uv = u[i] > limit ? limit : u[i] < -limit ? -limit : u[i];
        g[i] = (uv + 1.0) * gv / (1.0 + exp(-1.702 * gv));
    }
    matvec(out, Ly->e_down[e], Ly->eb_down + e * H, g, H, F);
}

/* The routed FFN of one token: softmax router over every expert, the K best by rank (an
 * expert's rank is how many beat it: a higher probability, or the same and a lower id), their
 * outputs mixed by the probabilities (renormalized over the K for Mixtral and with norm_topk),
 * plus the shared expert scaled by sigmoid(s_gate_w . x). tmp2 is [hidden] scratch. */
static void moe_ffn(const ref_config *c, const ref_layer *Ly, double *out, const double *x,
                    double *rp, int32_t *chosen, double *tmp2, double *g, double *u)
{
    int64_t H = c->hidden, E = c->n_experts, K = c->top_k;
    matvec(rp, Ly->router, Ly->router_b, x, E, H);
    if (c->v3) {
        for (int64_t e = 0; e < E; e++)
            rp[e] = 1.0 / (1.0 + exp(-rp[e]));
    } else {
        double mx = -INFINITY, z = 0;
        for (int64_t e = 0; e < E; e++)
            mx = rp[e] > mx ? rp[e] : mx;
        for (int64_t e = 0; e < E; e++)
            z += (rp[e] = exp(rp[e] - mx));
        for (int64_t e = 0; e < E; e++)
            rp[e] /= z;
    }
    /* the choice ranks sel: the scores plus V3's bias, -inf outside the kept groups */
    double sel[256];
    for (int64_t e = 0; e < E; e++)
        sel[e] = rp[e] + (Ly->score_bias ? (double)Ly->score_bias[e] : 0.0);
    if (c->n_groups > 1) {
        int64_t G = c->n_groups, n = E / G;
        double gs[64];
        for (int64_t gi = 0; gi < G; gi++) {
            /* V2: the group's best expert; V3: the sum of its best two */
            double b1 = -INFINITY, b2 = -INFINITY;
            for (int64_t i = 0; i < n; i++) {
                double v = sel[gi * n + i];
                if (v > b1) {
                    b2 = b1;
                    b1 = v;
                } else if (v > b2) {
                    b2 = v;
                }
            }
            gs[gi] = c->v3 && n > 1 ? b1 + b2 : b1;
        }
        for (int64_t gi = 0; gi < G; gi++) {
            int64_t rank = 0;
            for (int64_t o = 0; o < G; o++)
                rank += gs[o] > gs[gi] || (gs[o] == gs[gi] && o < gi);
            for (int64_t i = 0; rank >= c->topk_groups && i < n; i++)
                sel[gi * n + i] = -INFINITY;
        }
    }
    double wsum = 0;
    for (int64_t e = 0; e < E; e++) {
        if (sel[e] == -(double)INFINITY)
            continue;
        int64_t rank = 0;
        for (int64_t o = 0; o < E; o++)
            rank += sel[o] > sel[e] || (sel[o] == sel[e] && o < e);
        if (rank < K) {
            chosen[rank] = (int32_t)e;
            wsum += rp[e];
        }
    }
    bool renorm = c->family == REF_MIXTRAL || c->norm_topk;
    /* DeepSeek: routed_scaling_factor, which V2 leaves out when it renormalizes */
    double scale = c->routed_scaling > 0 && (c->v3 || !renorm) ? c->routed_scaling : 1.0;
    for (int64_t i = 0; i < H; i++)
        out[i] = 0;
    for (int64_t j = 0; j < K; j++) {
        int64_t e = chosen[j];
        if (c->family == REF_GPT_OSS)
            oss_expert(c, Ly, e, tmp2, x, g, u);
        else
            mlp_w(c, expert_ffn(c), tmp2, x, Ly->e_gate[e], Ly->e_up[e], Ly->e_down[e], NULL,
                  NULL, g, u);
        double w = (renorm ? rp[e] / wsum : rp[e]) * scale;
        for (int64_t i = 0; i < H; i++)
            out[i] += w * tmp2[i];
    }
    if (shared_width(c) <= 0)
        return;
    mlp_w(c, shared_width(c), tmp2, x, Ly->s_gate, Ly->s_up, Ly->s_down, NULL, NULL, g, u);
    double zg = 0;
    for (int64_t i = 0; Ly->s_gate_w && i < H; i++)
        zg += (double)Ly->s_gate_w[i] * x[i];
    double sg = Ly->s_gate_w ? 1.0 / (1.0 + exp(-zg)) : 1.0;
    for (int64_t i = 0; i < H; i++)
        out[i] += sg * tmp2[i];
}

/* DeepSeek's latent attention over the normed inputs xn [T, hidden] of layer l: the head
 * outputs into att [T, n_heads v_dim] and out's head_out, the probabilities into out. */
static bool mla_attention(const ref_config *c, const ref_layer *Ly, const double *xn, int64_t T,
                          int64_t l, double theta, double *att, ref_outputs *out)
{
    int64_t H = c->hidden, nh = c->n_heads, hd = c->head_dim, rot = c->rope_dim;
    int64_t nope = nope_dim(c), vd = c->v_dim, qr = c->q_lora, kvr = c->kv_lora;
    int64_t kvw = nh * (nope + vd);
    double *q = calloc((size_t)(T * nh * hd), sizeof(double));
    double *k = calloc((size_t)(T * nh * hd), sizeof(double));
    double *v = calloc((size_t)(T * nh * vd), sizeof(double));
    double *a = calloc((size_t)(qr + kvr + rot + 1), sizeof(double));
    double *an = calloc((size_t)(qr + kvr + 1), sizeof(double));
    double *kvb = calloc((size_t)kvw, sizeof(double)), *sc = calloc((size_t)T, sizeof(double));
    bool ok = q && k && v && a && an && kvb && sc;
    for (int64_t t = 0; ok && t < T; t++) {
        double *qt = q + t * nh * hd;
        if (qr > 0) {
            matvec(a, Ly->q_a, NULL, xn + t * H, qr, H);
            rms_eps(an, a, Ly->q_a_norm, qr, 1e-6);
            matvec(qt, Ly->q_b, NULL, an, nh * hd, qr);
        } else {
            matvec(qt, Ly->wq, NULL, xn + t * H, nh * hd, H);
        }
        matvec(a, Ly->kv_a, NULL, xn + t * H, kvr + rot, H);
        rms_eps(an, a, Ly->kv_a_norm, kvr, 1e-6);
        matvec(kvb, Ly->kv_b, NULL, an, kvw, kvr);
        double *kpe = a + kvr; /* one rope head shared by all */
        rope(c, theta, qt + nope, nh, t, NULL, 1.0);
        rope(c, theta, kpe, 1, t, NULL, 1.0);
        for (int64_t h = 0; h < nh; h++) {
            for (int64_t i = 0; i < nope; i++)
                k[(t * nh + h) * hd + i] = kvb[h * (nope + vd) + i];
            for (int64_t i = 0; i < rot; i++)
                k[(t * nh + h) * hd + nope + i] = kpe[i];
            for (int64_t i = 0; i < vd; i++)
                v[(t * nh + h) * vd + i] = kvb[h * (nope + vd) + nope + i];
        }
    }
    double scale = 1.0 / sqrt((double)hd);
    if (c->yarn_factor > 0) /* DeepSeek: the softmax scale carries mscale_all_dim squared */
        scale *= yarn_m(c->yarn_factor, c->yarn_mscale_all) * yarn_m(c->yarn_factor, c->yarn_mscale_all);
    for (int64_t h = 0; ok && h < nh; h++) {
        for (int64_t t = 0; t < T; t++) {
            double mx = -INFINITY, z = 0;
            for (int64_t s2 = 0; s2 <= t; s2++) {
                double d = 0;
                for (int64_t i = 0; i < hd; i++)
                    d += q[(t * nh + h) * hd + i] * k[(s2 * nh + h) * hd + i];
                sc[s2] = d * scale;
                mx = sc[s2] > mx ? sc[s2] : mx;
            }
            for (int64_t s2 = 0; s2 <= t; s2++)
                z += (sc[s2] = exp(sc[s2] - mx));
            for (int64_t i = 0; i < vd; i++) {
                double o = 0;
                for (int64_t s2 = 0; s2 <= t; s2++)
                    o += sc[s2] / z * v[(s2 * nh + h) * vd + i];
                att[t * nh * vd + h * vd + i] = o;
                out->head_out[(l * T + t) * nh * vd + h * vd + i] = (float)o;
            }
            for (int64_t s2 = 0; s2 <= t; s2++)
                out->probs[((l * nh + h) * T + t) * T + s2] = (float)(sc[s2] / z);
        }
    }
    free(q);
    free(k);
    free(v);
    free(a);
    free(an);
    free(kvb);
    free(sc);
    return ok;
}

bool ref_forward(const ref_model *m, const int32_t *tokens, int64_t T, ref_outputs *out)
{
    const ref_config *c = &m->cfg;
    int64_t H = c->hidden, V = c->vocab, L = c->n_layers, nh = c->n_heads, hd = c->head_dim;
    int64_t QD = q_dim(c), KVD = kv_dim(c), F = c->ffn, E = c->n_experts, K = c->top_k;
    memset(out, 0, sizeof *out);
    out->T = T;
    out->logits = calloc((size_t)(T * V), sizeof(float));
    out->probs = calloc((size_t)(L * nh * T * T), sizeof(float));
    out->resid = calloc((size_t)(L * T * H), sizeof(float));
    int64_t OW = o_width(c) > QD ? o_width(c) : QD; /* head outputs per token */
    out->head_out = calloc((size_t)(L * T * OW), sizeof(float));
    out->experts = calloc((size_t)(L * T * (K > 0 ? K : 1)), sizeof(int32_t));
    double *x = calloc((size_t)(T * H), sizeof(double));
    double *xn = calloc((size_t)(T * H), sizeof(double));
    double *q = calloc((size_t)(T * QD), sizeof(double));
    double *k = calloc((size_t)(T * KVD), sizeof(double));
    double *v = calloc((size_t)(T * KVD), sizeof(double));
    double *att = calloc((size_t)(T * OW), sizeof(double));
    double *tmp = calloc((size_t)(H > V ? H : V), sizeof(double));
    double *tmp2 = calloc((size_t)H, sizeof(double));
    int64_t FW = F > expert_ffn(c) ? F : expert_ffn(c);
    FW = FW > shared_width(c) ? FW : shared_width(c);
    double *g = calloc((size_t)FW, sizeof(double)), *u = calloc((size_t)FW, sizeof(double));
    double *sc = calloc((size_t)T, sizeof(double));
    double *ao = calloc((size_t)(T * H), sizeof(double)); /* attention's output, per token */
    double *rp = calloc((size_t)(E > 0 ? E : 1), sizeof(double));
    bool ok = out->logits && out->probs && out->resid && out->head_out && out->experts && x &&
              xn && q && k && v && att && tmp && tmp2 && g && u && sc && rp && ao;
    if (!ok)
        goto done;

    double embed_scale = is_gemma(c) ? sqrt((double)H) : 1.0;
    int64_t ED = embed_dim(c);
    double *row = calloc((size_t)ED, sizeof *row);
    if (!row) {
        ok = false;
        goto done;
    }
    for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < ED; i++)
            row[i] = (double)m->embed[(int64_t)tokens[t] * ED + i] * embed_scale;
        if (m->project_in)
            matvec(x + t * H, m->project_in, NULL, row, H, ED);
        else
            memcpy(x + t * H, row, (size_t)H * sizeof *row);
        /* GPT-2 reads position t, OPT's table position t + 2 */
        int64_t pos_row = c->family == REF_OPT ? t + 2 : t;
        for (int64_t i = 0; i < H && learned_positions(c); i++)
            x[t * H + i] += (double)m->pos[pos_row * H + i];
    }
    free(row);
    if (m->embed_norm) /* BLOOM: word_embeddings_layernorm */
        for (int64_t t = 0; t < T; t++) {
            memcpy(tmp2, x + t * H, (size_t)H * sizeof(double));
            norm(c, x + t * H, tmp2, m->embed_norm, m->embed_norm_b, H);
        }
    double scale = has_post_norms(c) && c->query_pre_attn_scalar > 0
                       ? 1.0 / sqrt(c->query_pre_attn_scalar)
                       : 1.0 / sqrt((double)hd);
    /* ALiBi slopes (Press et al.; BLOOM's build_alibi_tensor): for the largest power of two
     * n <= heads, 2^(-8 (h + 1) / n); the remaining heads take every other slope of 2n heads */
    double slopes[64] = {0}, max_bias = c->alibi_max > 0 ? c->alibi_max : 8.0;
    if (c->alibi) {
        int64_t pow2 = 1;
        while (pow2 * 2 <= nh)
            pow2 *= 2;
        for (int64_t h = 0; h < nh && h < 64; h++)
            slopes[h] = h < pow2 ? pow(2.0, -max_bias * (double)(h + 1) / (double)pow2)
                                 : pow(2.0, -max_bias / 2 * (double)(2 * (h - pow2) + 1) /
                                                (double)pow2);
    }
    double mscale;
    const double *ext = longrope_factors(c, T, &mscale);
    for (int64_t l = 0; l < L; l++) {
        const ref_layer *Ly = &m->layers[l];
        int64_t window = c->family == REF_GEMMA2 || c->family == REF_GPT_OSS
                             ? (l % 2 == 0 ? c->window : 0)
                         : c->family == REF_GEMMA3
                             ? ((l + 1) % c->sliding_pattern != 0 ? c->window : 0)
                             : c->window;
        double theta = c->family == REF_GEMMA3 && window > 0 ? c->local_theta : c->theta;
        if (c->family == REF_DEEPSEEK) {
            for (int64_t t = 0; t < T; t++)
                norm(c, xn + t * H, x + t * H, Ly->attn_norm, Ly->attn_norm_b, H);
            if (!mla_attention(c, Ly, xn, T, l, theta, att, out)) {
                ok = false;
                goto done;
            }
        } else {
            for (int64_t t = 0; t < T; t++) {
                if (has_input_norms(c))
                    norm(c, xn + t * H, x + t * H, Ly->attn_norm, Ly->attn_norm_b, H);
                else
                    memcpy(xn + t * H, x + t * H, (size_t)H * sizeof(double));
                matvec(q + t * QD, Ly->wq, Ly->bq, xn + t * H, QD, H);
                matvec(k + t * KVD, Ly->wk, Ly->bk, xn + t * H, KVD, H);
                matvec(v + t * KVD, Ly->wv, Ly->bv, xn + t * H, KVD, H);
                if (c->qkv_clip > 0) { /* MPT: the fused projection's output, clamped */
                    double cl = c->qkv_clip;
                    for (int64_t i = 0; i < QD; i++)
                        q[t * QD + i] = fmin(fmax(q[t * QD + i], -cl), cl);
                    for (int64_t i = 0; i < KVD; i++) {
                        k[t * KVD + i] = fmin(fmax(k[t * KVD + i], -cl), cl);
                        v[t * KVD + i] = fmin(fmax(v[t * KVD + i], -cl), cl);
                    }
                }
                if (c->qk_norm && qk_norm_whole(c)) {
                    /* one RMSNorm over the whole projection, on a copy */
                    double *cp = malloc((size_t)(QD > KVD ? QD : KVD) * sizeof *cp);
                    if (!cp) {
                        ok = false;
                        goto done;
                    }
                    memcpy(cp, q + t * QD, (size_t)QD * sizeof *cp);
                    norm(c, q + t * QD, cp, Ly->q_norm, Ly->q_norm_b, QD);
                    memcpy(cp, k + t * KVD, (size_t)KVD * sizeof *cp);
                    norm(c, k + t * KVD, cp, Ly->k_norm, Ly->k_norm_b, KVD);
                    free(cp);
                } else if (c->qk_norm) {
                    /* per-head RMSNorm over head_dim, on a copy (norm() reads and writes) */
                    double tmp_head[512];
                    for (int64_t h = 0; h < nh; h++) {
                        memcpy(tmp_head, q + t * QD + h * hd, (size_t)hd * sizeof(double));
                        norm(c, q + t * QD + h * hd, tmp_head,
                             Ly->q_norm + (qk_norm_each_head(c) ? h * hd : 0), NULL, hd);
                    }
                    for (int64_t h = 0; h < c->n_kv_heads; h++) {
                        memcpy(tmp_head, k + t * KVD + h * hd, (size_t)hd * sizeof(double));
                        norm(c, k + t * KVD + h * hd, tmp_head,
                             Ly->k_norm + (qk_norm_each_head(c) ? h * hd : 0), NULL, hd);
                    }
                }
                if (!learned_positions(c) && !c->alibi) {
                    rope(c, theta, q + t * QD, nh, t, ext, mscale);
                    rope(c, theta, k + t * KVD, c->n_kv_heads, t, ext, mscale);
                }
            }
            for (int64_t h = 0; h < nh; h++) {
                int64_t kvh = h / (nh / c->n_kv_heads);
                for (int64_t t = 0; t < T; t++) {
                    double max = -INFINITY, sum = 0;
                    for (int64_t s = 0; s <= t; s++) {
                        if (window > 0 && t - s >= window) {
                            sc[s] = -INFINITY;
                            continue;
                        }
                        double d = 0;
                        for (int64_t i = 0; i < hd; i++)
                            d += q[t * QD + h * hd + i] * k[s * KVD + kvh * hd + i];
                        /* Falcon adds the ALiBi bias (key position times the head's slope) to
                         * q.k and scales the sum */
                        if (c->alibi && c->family == REF_FALCON)
                            d += slopes[h] * (double)s;
                        d *= scale;
                        /* BLOOM adds it to the scaled scores (baddbmm with beta 1) */
                        if (c->alibi && c->family != REF_FALCON)
                            d += slopes[h] * (double)s;
                        if (c->attn_softcap > 0)
                            d = c->attn_softcap * tanh(d / c->attn_softcap);
                        sc[s] = d;
                        if (d > max)
                            max = d;
                    }
                    /* gpt-oss: the head's sink logit joins the denominator, without a value */
                    double sink = Ly->sinks ? (double)Ly->sinks[h] : -(double)INFINITY;
                    if (sink > max)
                        max = sink;
                    for (int64_t s = 0; s <= t; s++) {
                        sc[s] = sc[s] == -(double)INFINITY ? 0.0 : exp(sc[s] - max);
                        sum += sc[s];
                    }
                    if (Ly->sinks)
                        sum += exp(sink - max);
                    for (int64_t i = 0; i < hd; i++) {
                        double o = 0;
                        for (int64_t s = 0; s <= t; s++)
                            o += sc[s] / sum * v[s * KVD + kvh * hd + i];
                        att[t * QD + h * hd + i] = o;
                        out->head_out[(l * T + t) * QD + h * hd + i] = (float)o;
                    }
                    for (int64_t s = 0; s <= t; s++)
                        out->probs[((l * nh + h) * T + t) * T + s] = (float)(sc[s] / sum);
                }
            }
        }
        for (int64_t t = 0; t < T; t++) {
            matvec(tmp, Ly->wo, Ly->bo, att + t * o_width(c), H, o_width(c));
            if (Ly->post_attn_norm) {
                norm(c, tmp2, tmp, Ly->post_attn_norm, NULL, H);
                memcpy(tmp, tmp2, (size_t)H * sizeof(double));
            }
            /* a parallel block adds it together with the MLP's, which reads the same x */
            for (int64_t i = 0; i < H; i++) {
                ao[t * H + i] = tmp[i];
                if (!is_parallel(c))
                    x[t * H + i] += tmp[i];
            }
            if (c->post_norm) { /* OPT: the norm after the add */
                memcpy(tmp2, x + t * H, (size_t)H * sizeof(double));
                norm(c, x + t * H, tmp2, Ly->attn_norm, Ly->attn_norm_b, H);
            }
        }
        for (int64_t t = 0; t < T; t++) {
            double *h_in = xn + t * H;
            if (!has_input_norms(c))
                memcpy(h_in, x + t * H, (size_t)H * sizeof(double));
            else if (shares_input_norm(c))
                norm(c, h_in, x + t * H, Ly->attn_norm, Ly->attn_norm_b, H);
            else
                norm(c, h_in, x + t * H, Ly->ffn_norm, Ly->ffn_norm_b, H);
            if (ref_layer_routed(c, l)) {
                moe_ffn(c, Ly, tmp, h_in, rp, out->experts + (l * T + t) * K, tmp2, g, u);
            } else {
                mlp(c, tmp, h_in, Ly->w_gate, Ly->w_up, Ly->w_down, Ly->b_up, Ly->b_down, g, u);
            }
            if (Ly->post_ffn_norm) {
                norm(c, tmp2, tmp, Ly->post_ffn_norm, NULL, H);
                memcpy(tmp, tmp2, (size_t)H * sizeof(double));
            }
            for (int64_t i = 0; i < H; i++)
                x[t * H + i] += tmp[i] + (is_parallel(c) ? ao[t * H + i] : 0.0);
            if (c->post_norm) {
                memcpy(tmp2, x + t * H, (size_t)H * sizeof(double));
                norm(c, x + t * H, tmp2, Ly->ffn_norm, Ly->ffn_norm_b, H);
            }
        }
        for (int64_t i = 0; i < T * H; i++)
            out->resid[l * T * H + i] = (float)x[i];
    }
    for (int64_t t = 0; t < T; t++) {
        if (c->post_norm) /* OPT-350m: no final norm */
            memcpy(tmp2, x + t * H, (size_t)H * sizeof(double));
        else
            norm(c, tmp2, x + t * H, m->out_norm, m->out_norm_b, H);
        const double *cls_in = tmp2;
        double cls_row[512];
        if (m->project_out) {
            matvec(cls_row, m->project_out, NULL, tmp2, ED, H);
            cls_in = cls_row;
        }
        matvec(tmp, m->lm_head, m->lm_head_b, cls_in, V, ED);
        for (int64_t i = 0; i < V; i++) {
            double z = tmp[i];
            if (c->logit_scale > 0)
                z *= c->logit_scale;
            if (c->final_softcap > 0)
                z = c->final_softcap * tanh(z / c->final_softcap);
            out->logits[t * V + i] = (float)z;
        }
    }
done:
    free(x);
    free(xn);
    free(q);
    free(k);
    free(v);
    free(att);
    free(tmp);
    free(tmp2);
    free(g);
    free(u);
    free(sc);
    free(rp);
    free(ao);
    if (!ok)
        ref_outputs_free(out);
    return ok;
}

/* ---- writing the model as a Hugging Face folder: trace/synth's family writer, asked for each
 * tensor by role and filled from the reference model's own arrays ---- */

static lp_synth_family synth_family(const ref_config *c)
{
    switch (c->family) {
    case REF_GPT2: return LP_SYNTH_GPT2;
    case REF_MIXTRAL: return LP_SYNTH_MIXTRAL;
    case REF_GEMMA: return LP_SYNTH_GEMMA;
    case REF_GEMMA2: return LP_SYNTH_GEMMA2;
    case REF_GEMMA3: return LP_SYNTH_GEMMA3;
    case REF_QWEN_MOE: return c->qk_norm ? LP_SYNTH_QWEN3_MOE : LP_SYNTH_QWEN2_MOE;
    case REF_DEEPSEEK: return c->v3 ? LP_SYNTH_DEEPSEEK_V3 : LP_SYNTH_DEEPSEEK_V2;
    case REF_NEOX: return LP_SYNTH_NEOX;
    case REF_PHI: return LP_SYNTH_PHI;
    case REF_GPTJ: return LP_SYNTH_GPTJ;
    case REF_STABLELM: return LP_SYNTH_STABLELM;
    case REF_FALCON: return LP_SYNTH_FALCON;
    case REF_OLMO2: return LP_SYNTH_OLMO2;
    case REF_BLOOM: return LP_SYNTH_BLOOM;
    case REF_OPT: return LP_SYNTH_OPT;
    case REF_PHI3: return LP_SYNTH_PHI3;
    case REF_GPT_OSS: return LP_SYNTH_GPT_OSS;
    case REF_MPT: return LP_SYNTH_MPT;
    case REF_STARCODER2: return LP_SYNTH_STARCODER2;
    default:
        return c->qk_norm    ? LP_SYNTH_QWEN3
               : c->qkv_bias ? LP_SYNTH_QWEN2
               : c->window > 0 ? LP_SYNTH_MISTRAL
                               : LP_SYNTH_LLAMA;
    }
}

/* The reference array behind a tensor of layer L (expert e), NULL when the model has none. */
static const float *layer_tensor(const ref_layer *L, const lp_synth_tensor *t)
{
    bool b = t->is_bias;
    if (t->expert >= 0)
        switch (t->role) {
        /* StableLM's per-head norms: the head's slice */
        case LP_ROLE_ATTN_Q_NORM: return L->q_norm + t->expert * t->rows;
        case LP_ROLE_ATTN_K_NORM: return L->k_norm + t->expert * t->rows;
        /* gpt-oss's expert biases: the expert's row of [n_experts, rows] */
        case LP_ROLE_EXPERT_GATE: return b ? L->eb_gate + t->expert * t->rows : L->e_gate[t->expert];
        case LP_ROLE_EXPERT_UP: return b ? L->eb_up + t->expert * t->rows : L->e_up[t->expert];
        case LP_ROLE_EXPERT_DOWN: return b ? L->eb_down + t->expert * t->rows : L->e_down[t->expert];
        default: return NULL;
        }
    switch (t->role) {
    case LP_ROLE_ATTN_NORM: return b ? L->attn_norm_b : L->attn_norm;
    case LP_ROLE_ATTN_Q: return b ? L->bq : L->wq;
    case LP_ROLE_ATTN_K: return b ? L->bk : L->wk;
    case LP_ROLE_ATTN_V: return b ? L->bv : L->wv;
    case LP_ROLE_ATTN_O: return b ? L->bo : L->wo;
    case LP_ROLE_ATTN_Q_NORM: return b ? L->q_norm_b : L->q_norm;
    case LP_ROLE_ATTN_K_NORM: return b ? L->k_norm_b : L->k_norm;
    case LP_ROLE_ATTN_POST_NORM: return L->post_attn_norm;
    case LP_ROLE_FFN_NORM: return b ? L->ffn_norm_b : L->ffn_norm;
    case LP_ROLE_FFN_POST_NORM: return L->post_ffn_norm;
    case LP_ROLE_ROUTER: return b ? L->router_b : L->router;
    case LP_ROLE_ATTN_SINKS: return L->sinks;
    case LP_ROLE_FFN_GATE: return L->w_gate;
    case LP_ROLE_FFN_UP: return b ? L->b_up : L->w_up;
    case LP_ROLE_FFN_DOWN: return b ? L->b_down : L->w_down;
    case LP_ROLE_SHARED_GATE: return L->s_gate;
    case LP_ROLE_SHARED_UP: return L->s_up;
    case LP_ROLE_SHARED_DOWN: return L->s_down;
    case LP_ROLE_SHARED_EXPERT_GATE: return L->s_gate_w;
    case LP_ROLE_ATTN_Q_A: return L->q_a;
    case LP_ROLE_ATTN_Q_A_NORM: return L->q_a_norm;
    case LP_ROLE_ATTN_Q_B: return L->q_b;
    case LP_ROLE_ATTN_KV_A: return L->kv_a;
    case LP_ROLE_ATTN_KV_A_NORM: return L->kv_a_norm;
    case LP_ROLE_ATTN_KV_B: return L->kv_b;
    case LP_ROLE_ROUTER_BIAS: return L->score_bias;
    default: return NULL;
    }
}

static const float *model_tensor(const ref_model *m, const lp_synth_tensor *t)
{
    if (t->layer >= 0)
        return t->layer < m->cfg.n_layers ? layer_tensor(&m->layers[t->layer], t) : NULL;
    switch (t->role) {
    case LP_ROLE_TOKEN_EMBD: return m->embed;
    case LP_ROLE_POS_EMBD: return m->pos;
    case LP_ROLE_OUTPUT_NORM: return t->is_bias ? m->out_norm_b : m->out_norm;
    case LP_ROLE_LM_HEAD: return t->is_bias ? m->lm_head_b : m->lm_head;
    case LP_ROLE_EMBD_NORM: return t->is_bias ? m->embed_norm_b : m->embed_norm;
    case LP_ROLE_EMBD_PROJ_IN: return m->project_in;
    case LP_ROLE_EMBD_PROJ_OUT: return m->project_out;
    default: return NULL;
    }
}

static lp_status fill_from_model(void *ctx, const lp_synth_tensor *t, float *data, lp_error *err)
{
    const float *src = model_tensor(ctx, t);
    if (!src)
        return lp_error_set(err, LP_ERR_USAGE, "ref_model: no array for %s (role %s, layer %d)",
                            t->name, lp_role_name(t->role), t->layer);
    memcpy(data, src, (size_t)(t->rows * (t->cols > 0 ? t->cols : 1)) * sizeof *data);
    return LP_OK;
}

/* The synth spec that writes m's arrays in its family's layout. */
static void spec_of(const ref_model *m, lp_dtype matrix_dtype, lp_synth_spec *out)
{
    const ref_config *c = &m->cfg;
    /* every field the family writer reads, so no default of lp_synth_spec_init is needed */
    lp_synth_spec spec = {
        .family = synth_family(c), .vocab = c->vocab, .hidden = c->hidden,
        .n_layers = c->n_layers, .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads,
        .head_dim = c->head_dim, .ffn = c->ffn, .rope_dim = c->rope_dim,
        .n_ctx = learned_positions(c) ? c->n_positions
                 : c->n_ctx > 0                               ? c->n_ctx
                                                              : 256,
        .norm_eps = c->eps, .post_norm = c->post_norm, .embed_dim = c->embed_dim,
        .orig_ctx = c->longrope_orig, .short_factor = c->short_factor,
        .long_factor = c->long_factor,
        .rope_theta = c->theta, .tied = c->tied, .n_experts = c->n_experts, .top_k = c->top_k,
        .window = c->window, .sliding_pattern = c->sliding_pattern,
        .local_theta = c->local_theta, .query_pre_attn_scalar = c->query_pre_attn_scalar,
        .attn_softcap = c->attn_softcap, .final_softcap = c->final_softcap,
        .parallel = c->parallel, .qkv_bias = c->qkv_bias, .qk_norm = c->qk_norm,
        .new_arch = c->new_arch, .alibi = c->alibi, .qkv_clip = c->qkv_clip,
        .logit_scale = c->logit_scale, .alibi_max = c->alibi_max, .expert_ffn = c->expert_ffn, .shared_ffn = c->shared_ffn, .sparse_step = c->sparse_step,
        .norm_topk_prob = c->norm_topk, .q_lora = c->q_lora, .kv_lora = c->kv_lora,
        .v_head_dim = c->v_dim, .n_shared = c->n_shared, .first_dense = c->first_dense,
        .n_groups = c->n_groups, .topk_groups = c->topk_groups,
        .routed_scaling = c->routed_scaling, .yarn_factor = c->yarn_factor,
        .yarn_orig = c->yarn_orig, .yarn_mscale = c->yarn_mscale,
        .yarn_mscale_all = c->yarn_mscale_all, .bos_id = 1,
        .swiglu_limit = c->swiglu_limit > 0 ? c->swiglu_limit : 7.0,
        .eos_id = 2, .dtype = matrix_dtype, .vector_dtype = LP_DTYPE_F32,
        .fill = fill_from_model, .fill_ctx = (void *)m,
    };
    for (int64_t l = 0; l < c->n_layers && l < 64; l++)
        spec.dense_layer[l] = (c->mlp_only >> l) & 1;
    *out = spec;
}

bool ref_model_write_hf_as(const ref_model *m, const char *dir, lp_dtype matrix_dtype)
{
    lp_synth_spec spec;
    spec_of(m, matrix_dtype, &spec);
    lp_error err = {0};
    if (lp_synth_write_family(dir, &spec, &err) != LP_OK) {
        fprintf(stderr, "ref_model_write_hf: %s\n", err.msg);
        return false;
    }
    return true;
}

bool ref_model_write_gguf_as(const ref_model *m, const char *dir, lp_dtype matrix_dtype,
                             bool *expressible)
{
    lp_synth_spec spec;
    spec_of(m, matrix_dtype, &spec);
    lp_error err = {0};
    lp_status st = lp_synth_write_family_gguf(dir, &spec, &err);
    *expressible = st != LP_ERR_UNSUPPORTED;
    if (st != LP_OK && *expressible)
        fprintf(stderr, "ref_model_write_gguf: %s\n", err.msg);
    return st == LP_OK;
}

bool ref_model_write_hf(const ref_model *m, const char *dir)
{
    return ref_model_write_hf_as(m, dir, LP_DTYPE_F32);
}

static void round_array(float *p, int64_t n, lp_dtype dtype)
{
    if (!p)
        return;
    for (int64_t i = 0; i < n; i++)
        p[i] = dtype == LP_DTYPE_BF16 ? lp_bf16_to_f32(lp_f32_to_bf16(p[i]))
               : dtype == LP_DTYPE_F16 ? lp_f16_to_f32(lp_f32_to_f16(p[i]))
                                       : p[i];
}

void ref_model_round_matrices(ref_model *m, lp_dtype dtype)
{
    const ref_config *c = &m->cfg;
    int64_t H = c->hidden, F = c->ffn, QD = c->n_heads * c->head_dim;
    int64_t KVD = c->n_kv_heads * c->head_dim;
    int64_t E = embed_dim(c);
    round_array(m->embed, c->vocab * E, dtype);
    round_array(m->pos, (c->n_positions + (c->family == REF_OPT ? 2 : 0)) * H, dtype);
    if (m->lm_head != m->embed)
        round_array(m->lm_head, c->vocab * E, dtype);
    round_array(m->project_in, H * E, dtype);
    round_array(m->project_out, E * H, dtype);
    for (int64_t l = 0; l < c->n_layers; l++) {
        ref_layer *L = &m->layers[l];
        round_array(L->wq, QD * H, dtype);
        round_array(L->wk, KVD * H, dtype);
        round_array(L->wv, KVD * H, dtype);
        round_array(L->wo, H * o_width(c), dtype);
        if (c->family == REF_DEEPSEEK) {
            round_array(L->q_a, c->q_lora * H, dtype);
            round_array(L->q_b, QD * c->q_lora, dtype);
            round_array(L->kv_a, (c->kv_lora + c->rope_dim) * H, dtype);
            round_array(L->kv_b, c->n_heads * (nope_dim(c) + c->v_dim) * c->kv_lora, dtype);
        }
        round_array(L->w_gate, F * H, dtype);
        round_array(L->w_up, F * H, dtype);
        round_array(L->w_down, H * F, dtype);
        if (!ref_layer_routed(c, l))
            continue;
        int64_t EF = expert_ffn(c), SF = shared_width(c);
        round_array(L->router, c->n_experts * H, dtype);
        for (int64_t e = 0; e < c->n_experts; e++) {
            round_array(L->e_gate[e], EF * H, dtype);
            round_array(L->e_up[e], EF * H, dtype);
            round_array(L->e_down[e], H * EF, dtype);
        }
        round_array(L->s_gate, SF * H, dtype);
        round_array(L->s_up, SF * H, dtype);
        round_array(L->s_down, H * SF, dtype);
        round_array(L->s_gate_w, H, dtype);
    }
}
