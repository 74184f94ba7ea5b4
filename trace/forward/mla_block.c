/* DeepSeek's multi-head latent attention (MLA). Per token: q = q_b(RMSNorm(q_a x)) (or q x
 * without q_lora_rank), [nope | rope] per head; kv_a x = [latent c | k_rope]; kv_b RMSNorm(c)
 * = [k_nope | v] per head. Head h's key is [k_nope_h | k_rope], the one rotated k_rope shared
 * by every head; RoPE rotates adjacent pairs (2i, 2i+1) of the rope dims, as DeepSeek's
 * reference code and llama.cpp do. Scores over nope + rope dims with arch.query_scale (YaRN's
 * mscale squared folded in by the reader), outputs v_head_dim wide, then o. A KV cache holds
 * [normed latent | rotated k_rope] per position (kv_cache.c); see through_cache. */
#include "trace/forward/forward_internal.h"

#include <string.h>

/* transformers' DeepseekV2/V3 RMSNorm of q_a_layernorm and kv_a_layernorm: its default eps */
#define MLA_LATENT_EPS 1e-6f

static void norm_rows(float *x, int64_t rows, int64_t n, int64_t stride, const float *w)
{
    for (int64_t t = 0; t < rows; t++)
        lp_rmsnorm(x + t * stride, x + t * stride, w, n, MLA_LATENT_EPS, false);
}

/* kv_b on rows of the normed latent: [rows, n_heads * (nope + v)], fused or (GGUF's split
 * attn_k_b/attn_v_b) head by head through part [rows, max(nope, v)]. */
static lp_status expand_latent(lp_fw_pass *p, const lp_layer_weights *L, const float *latent,
                               int64_t rows, float *kvb, float *part)
{
    const lp_arch *a = &p->m->arch;
    if (!L->k_b)
        return lp_fw_linear(p, latent, rows, &L->kv_b, NULL, kvb);
    int64_t nh = a->n_heads, nope = a->qk_nope_head_dim, v = a->v_head_dim;
    for (int64_t h = 0; h < nh; h++) {
        for (int half = 0; half < 2; half++) {
            int64_t width = half ? v : nope, off = h * (nope + v) + (half ? nope : 0);
            lp_status st = lp_fw_linear(p, latent, rows, half ? &L->v_b[h] : &L->k_b[h], NULL, part);
            if (st != LP_OK)
                return st;
            for (int64_t t = 0; t < rows; t++)
                memcpy(kvb + t * nh * (nope + v) + off, part + t * width,
                       (size_t)width * sizeof *kvb);
        }
    }
    return LP_OK;
}

/* q [T, n_heads * head_dim], kv_a's output [T, kv_lora + rope] and the normed latent [T, kv_lora]
 * for the call's T tokens. */
static lp_status project(lp_fw_pass *p, const lp_layer_weights *L, const float *in, float *q,
                         float *qa, float *kva, float *latent)
{
    const lp_arch *a = &p->m->arch;
    int64_t T = p->rows, qr = a->q_lora_rank, kvr = a->kv_lora_rank, rope = a->qk_rope_head_dim;
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
    return LP_OK;
}

/* RoPE on every head's rope part of q and on the call's shared k_rope (in kva's rows). */
static lp_status rotate(lp_fw_pass *p, float *q, float *kva)
{
    const lp_arch *a = &p->m->arch;
    int64_t T = p->rows, nh = a->n_heads, hd = a->head_dim, rope = a->qk_rope_head_dim;
    int64_t nope = a->qk_nope_head_dim, kvr = a->kv_lora_rank;
    float attn_factor;
    lp_status st = lp_model_rope_freqs(p->m, p->rope_len, false, p->s.inv_freq, &attn_factor,
                                       p->err);
    if (st != LP_OK)
        return st;
    for (int64_t t = 0; t < T; t++) {
        int64_t pos = p->s.positions[t];
        lp_rope(q + t * nh * hd + nope, nh, hd, rope, pos, p->s.inv_freq, attn_factor, true);
        lp_rope(kva + t * (kvr + rope) + kvr, 1, rope, rope, pos, p->s.inv_freq, attn_factor,
                true);
    }
    return LP_OK;
}

/* With a cache: the call's [latent | k_rope] rows stored, then all n_k positions' rows read back
 * (at the cache's precision) into kva and their latents into latent. Decode re-expands every
 * cached latent with kv_b instead of absorbing kv_b into q and o: the same products as prefill,
 * so decode matches it to float32 rounding, at the cost of n_k expansions per step. */
static lp_status through_cache(lp_fw_pass *p, int l, float *kva, float *latent)
{
    const lp_arch *a = &p->m->arch;
    int64_t kvr = a->kv_lora_rank, w = kvr + a->qk_rope_head_dim;
    for (int64_t t = 0; t < p->T; t++)
        memcpy(kva + t * w, latent + t * kvr, (size_t)kvr * sizeof *kva);
    lp_status st = lp_fw_kv_latent(p, l, kva, w);
    if (st != LP_OK)
        return st;
    for (int64_t t = 0; t < p->n_k; t++)
        memcpy(latent + t * kvr, kva + t * w, (size_t)kvr * sizeof *latent);
    return LP_OK;
}

lp_status lp_fw_mla_attention(lp_fw_pass *p, int l, const float *in, float *out)
{
    const lp_arch *a = &p->m->arch;
    const lp_layer_weights *L = &p->m->layers[l];
    /* key rows: every cached position with a cache (one sequence), else the stacked rows */
    int64_t T = p->rows, R = p->kv ? p->n_k : p->rows, H = a->hidden_size, nh = a->n_heads;
    int64_t hd = a->head_dim;
    int64_t nope = a->qk_nope_head_dim, v = a->v_head_dim, kvr = a->kv_lora_rank;
    int64_t rope = a->qk_rope_head_dim;
    /* s.mla holds R rows of each */
    float *q = p->s.qkv, *qa = p->s.mla, *kva = qa + R * a->q_lora_rank;
    float *latent = kva + R * (kvr + rope), *kvb = latent + R * kvr;
    float *k = kvb + R * nh * (nope + v), *part = k + R * nh * hd;
    lp_status st;
    if ((st = project(p, L, in, q, qa, kva, latent)) || (st = rotate(p, q, kva)) ||
        (p->kv && (st = through_cache(p, l, kva, latent))) ||
        (st = expand_latent(p, L, latent, R, kvb, part)))
        return st;
    /* head h's key [k_nope_h | k_rope] for every key position */
    for (int64_t t = 0; t < R; t++)
        for (int64_t h = 0; h < nh; h++) {
            memcpy(k + (t * nh + h) * hd, kvb + t * nh * (nope + v) + h * (nope + v),
                   (size_t)nope * sizeof *k);
            memcpy(k + (t * nh + h) * hd + nope, kva + t * (kvr + rope) + kvr,
                   (size_t)rope * sizeof *k);
        }
    p->mask.window = lp_fw_layer_window(p->opts, L);
    /* every head its own key and value: group 1; values read in place from kv_b's rows */
    lp_fw_kv_source kv = {k, kvb + nope, nh * hd, nh * (nope + v), hd, LP_DTYPE_F32};
    lp_fw_heads heads = {q, nh * hd, hd, kv, nope + v, hd, v, 1, NULL};
    if ((st = lp_fw_run_heads(p, l, &heads)) || (st = lp_fw_emit_head_outputs(p, l, v)) ||
        (st = lp_fw_linear(p, p->s.attn, T, &L->o, L->o_bias, out)))
        return st;
    return lp_fw_emit_seqs(p, LP_SITE_ATTN_OUT, l, out, H, H);
}
