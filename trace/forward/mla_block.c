/* DeepSeek's multi-head latent attention (MLA). Per token: q = q_b(RMSNorm(q_a x)) (or q x
 * without q_lora_rank), [nope | rope] per head; kv_a x = [latent c | k_rope]; kv_b RMSNorm(c)
 * = [k_nope | v] per head. Head h's key is [k_nope_h | k_rope], the one rotated k_rope shared
 * by every head; RoPE rotates adjacent pairs (2i, 2i+1) of the rope dims, as DeepSeek's
 * reference code and llama.cpp do. Scores over nope + rope dims with arch.query_scale (YaRN's
 * mscale squared folded in by the reader), outputs v_head_dim wide, then o. */
#include "trace/forward/forward_internal.h"

#include <string.h>

/* transformers' DeepseekV2/V3 RMSNorm of q_a_layernorm and kv_a_layernorm: its default eps */
#define MLA_LATENT_EPS 1e-6f

static void norm_rows(float *x, int64_t rows, int64_t n, int64_t stride, const float *w)
{
    for (int64_t t = 0; t < rows; t++)
        lp_rmsnorm(x + t * stride, x + t * stride, w, n, MLA_LATENT_EPS, false);
}

/* q [T, n_heads * head_dim], kv_a's output [T, kv_lora + rope] and kv_b's [T, n_heads *
 * (nope + v)] for every token of in. */
static lp_status project(lp_fw_pass *p, const lp_layer_weights *L, const float *in, float *q,
                         float *kva, float *latent, float *kvb)
{
    const lp_arch *a = &p->m->arch;
    int64_t T = p->T, qr = a->q_lora_rank, kvr = a->kv_lora_rank, rope = a->qk_rope_head_dim;
    float *qa = p->s.mla;
    lp_status st;
    if (qr > 0) {
        if ((st = lp_fw_linear(p, in, T, &L->q_a, NULL, qa)))
            return st;
        norm_rows(qa, T, qr, qr, L->q_a_norm);
        if ((st = lp_fw_linear(p, qa, T, &L->q_b, NULL, q)))
            return st;
    } else if ((st = lp_fw_linear(p, in, T, &L->q, NULL, q))) {
        return st;
    }
    if ((st = lp_fw_linear(p, in, T, &L->kv_a, NULL, kva)))
        return st;
    for (int64_t t = 0; t < T; t++)
        memcpy(latent + t * kvr, kva + t * (kvr + rope), (size_t)kvr * sizeof *latent);
    norm_rows(latent, T, kvr, kvr, L->kv_a_norm);
    return lp_fw_linear(p, latent, T, &L->kv_b, NULL, kvb);
}

/* RoPE on every head's rope part of q and on the shared k_rope, then each head's key
 * [k_nope_h | k_rope] assembled in k. */
static lp_status rotate_and_assemble(lp_fw_pass *p, float *q, float *k, float *kva,
                                     const float *kvb)
{
    const lp_arch *a = &p->m->arch;
    int64_t T = p->T, nh = a->n_heads, hd = a->head_dim, rope = a->qk_rope_head_dim;
    int64_t nope = a->qk_nope_head_dim, v = a->v_head_dim, kvr = a->kv_lora_rank;
    float attn_factor;
    lp_status st = lp_model_rope_freqs(p->m, p->rope_len, false, p->s.inv_freq, &attn_factor,
                                       p->err);
    if (st != LP_OK)
        return st;
    for (int64_t t = 0; t < T; t++) {
        int64_t pos = p->s.positions[t];
        float *qt = q + t * nh * hd, *kt = k + t * nh * hd, *kpe = kva + t * (kvr + rope) + kvr;
        lp_rope(qt + nope, nh, hd, rope, pos, p->s.inv_freq, attn_factor, true);
        lp_rope(kpe, 1, rope, rope, pos, p->s.inv_freq, attn_factor, true);
        for (int64_t h = 0; h < nh; h++) {
            memcpy(kt + h * hd, kvb + t * nh * (nope + v) + h * (nope + v),
                   (size_t)nope * sizeof *kt);
            memcpy(kt + h * hd + nope, kpe, (size_t)rope * sizeof *kt);
        }
    }
    return LP_OK;
}

lp_status lp_fw_mla_attention(lp_fw_pass *p, int l, const float *in, float *out)
{
    const lp_arch *a = &p->m->arch;
    const lp_layer_weights *L = &p->m->layers[l];
    int64_t T = p->T, H = a->hidden_size, nh = a->n_heads, hd = a->head_dim;
    int64_t nope = a->qk_nope_head_dim, v = a->v_head_dim, kvr = a->kv_lora_rank;
    int64_t rope = a->qk_rope_head_dim;
    float *q = p->s.qkv, *k = q + T * nh * hd;
    float *kva = p->s.mla + T * a->q_lora_rank, *latent = kva + T * (kvr + rope);
    float *kvb = latent + T * kvr;
    lp_status st;
    if (p->kv)
        return lp_error_set(p->err, LP_ERR_UNSUPPORTED,
                            "%s: a KV cache for multi-head latent attention: run the whole "
                            "sequence in one call",
                            a->source);
    if ((st = project(p, L, in, q, kva, latent, kvb)) ||
        (st = rotate_and_assemble(p, q, k, kva, kvb)))
        return st;
    p->mask.window = lp_fw_layer_window(p->opts, L);
    /* every head its own key and value: group 1; values read in place from kv_b's rows */
    lp_fw_kv_source kv = {k, kvb + nope, nh * hd, nh * (nope + v), hd, LP_DTYPE_F32};
    lp_fw_heads heads = {q, nh * hd, hd, kv, nope + v, hd, v, 1};
    if ((st = lp_fw_run_heads(p, l, &heads)) || (st = lp_fw_emit_head_outputs(p, l, v)) ||
        (st = lp_fw_linear(p, p->s.attn, T, &L->o, L->o_bias, out)))
        return st;
    return lp_fw_emit_matrix(p, LP_SITE_ATTN_OUT, l, out, T, H, H);
}
