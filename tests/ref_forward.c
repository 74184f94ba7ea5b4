/* The tests' reference forward pass: each family written out the way its Hugging Face modeling
 * file computes it, in double, one loop per formula. Slow and obvious on purpose. */
#include "ref_forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
static int64_t kv_dim(const ref_config *c) { return c->n_kv_heads * c->head_dim; }

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
    double norm_offset = c->family == REF_GEMMA2 ? 0.0 : 1.0;
#define RT(ptr, n, scale, off)                            \
    do {                                                  \
        (ptr) = rand_tensor(&s, (n), (scale), (off));     \
        ok = ok && (ptr) != NULL;                         \
    } while (0)
    RT(m->embed, c->vocab * H, c->family == REF_GEMMA2 ? sc / 4 : sc, 0.0);
    if (c->family == REF_GPT2)
        RT(m->pos, c->n_positions * H, sc, 0.0);
    RT(m->out_norm, H, 0.1, norm_offset);
    if (c->family == REF_GPT2)
        RT(m->out_norm_b, H, 0.1, 0.0);
    if (c->tied)
        m->lm_head = m->embed;
    else
        RT(m->lm_head, c->vocab * H, sc, 0.0);
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    ok = ok && m->layers;
    for (int64_t l = 0; ok && l < c->n_layers; l++) {
        ref_layer *L = &m->layers[l];
        RT(L->attn_norm, H, 0.1, norm_offset);
        RT(L->wq, q_dim(c) * H, sc, 0.0);
        RT(L->wk, kv_dim(c) * H, sc, 0.0);
        RT(L->wv, kv_dim(c) * H, sc, 0.0);
        RT(L->wo, H * q_dim(c), sc, 0.0);
        RT(L->ffn_norm, H, 0.1, norm_offset);
        if (c->family == REF_GPT2) {
            RT(L->attn_norm_b, H, 0.1, 0.0);
            RT(L->ffn_norm_b, H, 0.1, 0.0);
            RT(L->bq, q_dim(c), 0.1, 0.0);
            RT(L->bk, kv_dim(c), 0.1, 0.0);
            RT(L->bv, kv_dim(c), 0.1, 0.0);
            RT(L->bo, H, 0.1, 0.0);
            RT(L->b_up, F, 0.1, 0.0);
            RT(L->b_down, H, 0.1, 0.0);
        }
        if (c->qkv_bias) {
            RT(L->bq, q_dim(c), 0.1, 0.0);
            RT(L->bk, kv_dim(c), 0.1, 0.0);
            RT(L->bv, kv_dim(c), 0.1, 0.0);
        }
        if (c->family == REF_GEMMA2) {
            RT(L->post_attn_norm, H, 0.1, 0.0);
            RT(L->post_ffn_norm, H, 0.1, 0.0);
        }
        if (c->family == REF_MIXTRAL) {
            RT(L->router, c->n_experts * H, 1.0, 0.0);
            L->e_gate = calloc((size_t)c->n_experts, sizeof(float *));
            L->e_up = calloc((size_t)c->n_experts, sizeof(float *));
            L->e_down = calloc((size_t)c->n_experts, sizeof(float *));
            ok = ok && L->e_gate && L->e_up && L->e_down;
            for (int64_t e = 0; ok && e < c->n_experts; e++) {
                RT(L->e_gate[e], F * H, sc, 0.0);
                RT(L->e_up[e], F * H, sc, 0.0);
                RT(L->e_down[e], H * F, sc, 0.0);
            }
        } else {
            if (c->family != REF_GPT2)
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
                           L->w_up, L->w_down, L->b_up, L->b_down, L->post_ffn_norm, L->router};
            for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
                free(ps[i]);
            for (int64_t e = 0; e < m->cfg.n_experts; e++) {
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
    if (c->family == REF_GPT2) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; i++)
            mean += x[i];
        mean /= (double)n;
        for (int64_t i = 0; i < n; i++)
            var += (x[i] - mean) * (x[i] - mean);
        var /= (double)n;
        for (int64_t i = 0; i < n; i++)
            y[i] = (x[i] - mean) / sqrt(var + c->eps) * (double)w[i] + (double)b[i];
        return;
    }
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / (double)n + c->eps);
    for (int64_t i = 0; i < n; i++) {
        double g = c->family == REF_GEMMA2 ? 1.0 + (double)w[i] : (double)w[i];
        y[i] = x[i] * inv * g;
    }
}

static double silu(double v) { return v / (1.0 + exp(-v)); }
static double gelu_tanh(double v)
{
    return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}

static void rope(const ref_config *c, double *v, int64_t n_heads, int64_t pos)
{
    int64_t hd = c->head_dim, half = hd / 2;
    for (int64_t h = 0; h < n_heads; h++) {
        double *x = v + h * hd;
        for (int64_t i = 0; i < half; i++) {
            double freq = pow(c->theta, -(double)(2 * i) / (double)hd);
            double a = (double)pos * freq, cs = cos(a), sn = sin(a);
            int64_t i0 = c->rope_adjacent ? 2 * i : i;
            int64_t i1 = c->rope_adjacent ? 2 * i + 1 : i + half;
            double x0 = x[i0], x1 = x[i1];
            x[i0] = x0 * cs - x1 * sn;
            x[i1] = x0 * sn + x1 * cs;
        }
    }
}

/* The FFN of one token: dense, or an expert's SwiGLU. */
static void mlp(const ref_config *c, double *out, const double *x, const float *w_gate,
                const float *w_up, const float *w_down, const float *b_up, const float *b_down,
                double *g, double *u)
{
    int64_t H = c->hidden, F = c->ffn;
    matvec(u, w_up, b_up, x, F, H);
    if (c->family == REF_GPT2) {
        for (int64_t i = 0; i < F; i++)
            g[i] = gelu_tanh(u[i]);
    } else {
        matvec(g, w_gate, NULL, x, F, H);
        for (int64_t i = 0; i < F; i++)
            g[i] = (c->family == REF_GEMMA2 ? gelu_tanh(g[i]) : silu(g[i])) * u[i];
    }
    matvec(out, w_down, b_down, g, H, F);
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
    out->head_out = calloc((size_t)(L * T * QD), sizeof(float));
    out->experts = calloc((size_t)(L * T * (K > 0 ? K : 1)), sizeof(int32_t));
    double *x = calloc((size_t)(T * H), sizeof(double));
    double *xn = calloc((size_t)(T * H), sizeof(double));
    double *q = calloc((size_t)(T * QD), sizeof(double));
    double *k = calloc((size_t)(T * KVD), sizeof(double));
    double *v = calloc((size_t)(T * KVD), sizeof(double));
    double *att = calloc((size_t)(T * QD), sizeof(double));
    double *tmp = calloc((size_t)(H > V ? H : V), sizeof(double));
    double *tmp2 = calloc((size_t)H, sizeof(double));
    double *g = calloc((size_t)F, sizeof(double)), *u = calloc((size_t)F, sizeof(double));
    double *sc = calloc((size_t)T, sizeof(double));
    double *rp = calloc((size_t)(E > 0 ? E : 1), sizeof(double));
    bool ok = out->logits && out->probs && out->resid && out->head_out && out->experts && x &&
              xn && q && k && v && att && tmp && tmp2 && g && u && sc && rp;
    if (!ok)
        goto done;

    double embed_scale = c->family == REF_GEMMA2 ? sqrt((double)H) : 1.0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < H; i++) {
            x[t * H + i] = (double)m->embed[(int64_t)tokens[t] * H + i] * embed_scale;
            if (c->family == REF_GPT2)
                x[t * H + i] += (double)m->pos[t * H + i];
        }
    double scale = c->family == REF_GEMMA2 && c->query_pre_attn_scalar > 0
                       ? 1.0 / sqrt(c->query_pre_attn_scalar)
                       : 1.0 / sqrt((double)hd);
    for (int64_t l = 0; l < L; l++) {
        const ref_layer *Ly = &m->layers[l];
        int64_t window = c->family == REF_GEMMA2 ? (l % 2 == 0 ? c->window : 0) : c->window;
        for (int64_t t = 0; t < T; t++) {
            norm(c, xn + t * H, x + t * H, Ly->attn_norm, Ly->attn_norm_b, H);
            matvec(q + t * QD, Ly->wq, Ly->bq, xn + t * H, QD, H);
            matvec(k + t * KVD, Ly->wk, Ly->bk, xn + t * H, KVD, H);
            matvec(v + t * KVD, Ly->wv, Ly->bv, xn + t * H, KVD, H);
            if (c->family != REF_GPT2) {
                rope(c, q + t * QD, nh, t);
                rope(c, k + t * KVD, c->n_kv_heads, t);
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
                    d *= scale;
                    if (c->attn_softcap > 0)
                        d = c->attn_softcap * tanh(d / c->attn_softcap);
                    sc[s] = d;
                    if (d > max)
                        max = d;
                }
                for (int64_t s = 0; s <= t; s++) {
                    sc[s] = sc[s] == -INFINITY ? 0.0 : exp(sc[s] - max);
                    sum += sc[s];
                }
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
        for (int64_t t = 0; t < T; t++) {
            matvec(tmp, Ly->wo, Ly->bo, att + t * QD, H, QD);
            if (Ly->post_attn_norm) {
                norm(c, tmp2, tmp, Ly->post_attn_norm, NULL, H);
                memcpy(tmp, tmp2, (size_t)H * sizeof(double));
            }
            for (int64_t i = 0; i < H; i++)
                x[t * H + i] += tmp[i];
        }
        for (int64_t t = 0; t < T; t++) {
            double *h_in = xn + t * H;
            norm(c, h_in, x + t * H, Ly->ffn_norm, Ly->ffn_norm_b, H);
            if (c->family == REF_MIXTRAL) {
                matvec(rp, Ly->router, NULL, h_in, E, H);
                double mx = -INFINITY, z = 0;
                for (int64_t e = 0; e < E; e++)
                    mx = rp[e] > mx ? rp[e] : mx;
                for (int64_t e = 0; e < E; e++)
                    z += (rp[e] = exp(rp[e] - mx));
                for (int64_t e = 0; e < E; e++)
                    rp[e] /= z;
                int32_t *chosen = out->experts + (l * T + t) * K;
                double wsum = 0;
                for (int64_t j = 0; j < K; j++) {
                    int64_t best = -1;
                    for (int64_t e = 0; e < E; e++) {
                        bool taken = false;
                        for (int64_t i = 0; i < j; i++)
                            taken = taken || chosen[i] == e;
                        if (!taken && (best < 0 || rp[e] > rp[best]))
                            best = e;
                    }
                    chosen[j] = (int32_t)best;
                    wsum += rp[best];
                }
                for (int64_t i = 0; i < H; i++)
                    tmp[i] = 0;
                for (int64_t j = 0; j < K; j++) {
                    int64_t e = chosen[j];
                    mlp(c, tmp2, h_in, Ly->e_gate[e], Ly->e_up[e], Ly->e_down[e], NULL, NULL, g, u);
                    for (int64_t i = 0; i < H; i++)
                        tmp[i] += rp[e] / wsum * tmp2[i];
                }
            } else {
                mlp(c, tmp, h_in, Ly->w_gate, Ly->w_up, Ly->w_down, Ly->b_up, Ly->b_down, g, u);
            }
            if (Ly->post_ffn_norm) {
                norm(c, tmp2, tmp, Ly->post_ffn_norm, NULL, H);
                memcpy(tmp, tmp2, (size_t)H * sizeof(double));
            }
            for (int64_t i = 0; i < H; i++)
                x[t * H + i] += tmp[i];
        }
        for (int64_t i = 0; i < T * H; i++)
            out->resid[l * T * H + i] = (float)x[i];
    }
    for (int64_t t = 0; t < T; t++) {
        norm(c, tmp2, x + t * H, m->out_norm, m->out_norm_b, H);
        matvec(tmp, m->lm_head, NULL, tmp2, V, H);
        for (int64_t i = 0; i < V; i++) {
            double z = tmp[i];
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
    if (!ok)
        ref_outputs_free(out);
    return ok;
}
