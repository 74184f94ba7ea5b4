/* A gpt-oss GGUF as llama.cpp's convert_hf_to_gguf.py (GptOssModel) writes it, for tests:
 *
 *   gw_gpt_oss g = {.vocab = 45, .hidden = 64, ..., .layers = {{.wq = ..., .gate_up_blocks = ...}}};
 *   if (!lp_gw_write_gpt_oss(path, &g)) ...
 *
 * What the converter does, and this writer with it:
 *   - arch "gpt-oss"; keys block_count, context_length, embedding_length, feed_forward_length
 *     (= expert_feed_forward_length, intermediate_size), attention.head_count(_kv),
 *     attention.key_length / value_length (head_dim), attention.layer_norm_rms_epsilon,
 *     attention.sliding_window, rope.freq_base, rope.scaling.type "yarn", rope.scaling.factor,
 *     rope.scaling.original_context_length, expert_count, expert_used_count. No key for yarn's
 *     truncate, for layer_types (llama.cpp slides on even layers: set_swa_pattern(2)) or for
 *     the SwiGLU limit and alpha (its graph has 7.0 and 1.702 built in).
 *   - per layer attn_norm, attn_q/k/v/output with .bias, attn_sinks [n_heads],
 *     post_attention_norm (the FFN's input norm), ffn_gate_inp with .bias, and the experts
 *     de-interleaved: transformers' gate_up rows alternate gate, up (gate = rows 0, 2, 4...),
 *     the converter writes ffn_gate_exps = the even rows and ffn_up_exps = the odd ones, biases
 *     likewise, plus ffn_down_exps and its bias.
 *   - MXFP4 experts: the safetensors pair (blocks [E, rows, G, 16], values 2j / 2j + 1 in the
 *     low / high nibble of byte j; scales [E, rows, G]) repacked into ggml's MXFP4 blocks
 *     (type 39: the scale byte, then values 0..15 in the low nibbles and 16..31 in the high).
 *     Without blocks the experts are written F32 from the [E, rows, cols] arrays.
 *
 * Every matrix here is [out, in] row-major (a GGUF ne of {in, out}); gate_up arrays have 2 x
 * expert_ffn rows, interleaved as transformers keeps them. Written through the library's
 * lp_gguf_writer (inspect/formats/gguf_write.h), which copies every tensor as it is added.
 * Static inline (links lp_inspect for the writer and the MXFP4 repacking). */
#ifndef LP_TESTS_GGUF_GPT_OSS_H
#define LP_TESTS_GGUF_GPT_OSS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect/formats/gguf_write.h"
#include "inspect/formats/quant.h"

#define GW_GPT_OSS_MAX_LAYERS 8

typedef struct gw_gpt_oss_layer {
    const float *attn_norm, *ffn_norm;          /* [hidden] (ffn_norm: post_attention_layernorm) */
    const float *wq, *bq, *wk, *bk, *wv, *bv;   /* [q_dim | kv_dim, hidden], biases */
    const float *wo, *bo;                       /* [hidden, q_dim], [hidden] */
    const float *sinks;                         /* [n_heads] */
    const float *router, *router_bias;          /* [E, hidden], [E] */
    const uint8_t *gate_up_blocks, *gate_up_scales; /* split MXFP4 [E, 2F, H/32, 16] + [E, 2F, H/32] */
    const uint8_t *down_blocks, *down_scales;       /* [E, H, F/32, 16] + [E, H, F/32] */
    const float *gate_up, *down;                /* f32 [E, 2F, H], [E, H, F] when no blocks */
    const float *gate_up_bias, *down_bias;      /* [E, 2F] interleaved, [E, H] */
} gw_gpt_oss_layer;

typedef struct gw_gpt_oss {
    int64_t vocab, hidden, n_layers, n_heads, n_kv_heads, head_dim;
    int64_t n_experts, top_k, expert_ffn, window, n_ctx, yarn_orig;
    double yarn_factor, theta, eps;
    const float *embed, *out_norm, *lm_head; /* [V, H], [H], [V, H] */
    gw_gpt_oss_layer layers[GW_GPT_OSS_MAX_LAYERS];
} gw_gpt_oss;

/* The writer and the first failure, so the calls below need no checks of their own. */
typedef struct gw_gpt_oss_out {
    lp_gguf_writer *w;
    lp_status st;
    lp_error err;
} gw_gpt_oss_out;

/* A tensor of n_dims dims given innermost first (GGUF's ne order), named after layer l. */
static inline void gw_gpt_oss_add(gw_gpt_oss_out *o, const char *fmt, int64_t l, lp_dtype dtype,
                                  uint32_t n_dims, int64_t d0, int64_t d1, int64_t d2,
                                  const void *data)
{
    char name[96];
    snprintf(name, sizeof name, fmt, (int)l);
    int64_t ne[3] = {d0, d1, d2}, shape[3];
    for (uint32_t d = 0; d < n_dims; d++)
        shape[d] = ne[n_dims - 1 - d];
    if (o->st == LP_OK)
        o->st = lp_gguf_writer_add(o->w, name, dtype, (int)n_dims, shape, data, &o->err);
}

static inline void gw_gpt_oss_f32(gw_gpt_oss_out *o, const char *fmt, int64_t l, uint32_t n_dims,
                                  int64_t d0, int64_t d1, int64_t d2, const float *data)
{
    gw_gpt_oss_add(o, fmt, l, LP_DTYPE_F32, n_dims, d0, d1, d2, data);
}

/* Rows `parity`, parity + 2, ... of each expert's [2 rows, cols] f32 matrix, as one tensor. */
static inline void gw_gpt_oss_half_f32(gw_gpt_oss_out *o, const char *fmt, int64_t l,
                                       const float *src, int64_t E, int64_t rows, int64_t cols,
                                       int parity)
{
    float *dst = malloc((size_t)(E * rows * cols) * sizeof *dst);
    for (int64_t e = 0; dst && e < E; e++)
        for (int64_t r = 0; r < rows; r++)
            memcpy(dst + (e * rows + r) * cols, src + (e * 2 * rows + 2 * r + parity) * cols,
                   (size_t)cols * sizeof *dst);
    if (!dst && o->st == LP_OK)
        o->st = LP_ERR_NOMEM;
    if (dst)
        gw_gpt_oss_f32(o, fmt, l, cols > 1 ? 3 : 2, cols > 1 ? cols : rows, cols > 1 ? rows : E, E,
                       dst);
    free(dst);
}

/* ggml MXFP4 blocks of rows `first`, first + step, ... of each expert's split pair, as one
 * [E, rows, G * 32] tensor. */
static inline void gw_gpt_oss_mxfp4(gw_gpt_oss_out *o, const char *fmt, int64_t l,
                                    const uint8_t *blocks, const uint8_t *scales, int64_t E,
                                    int64_t src_rows, int64_t rows, int64_t G, int first, int step)
{
    uint8_t *dst = malloc((size_t)(E * rows * G * 17));
    for (int64_t e = 0; dst && e < E; e++)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t g = 0; g < G; g++) {
                int64_t src = (e * src_rows + first + step * r) * G + g;
                lp_mxfp4_block_from_split(blocks + 16 * src, scales[src],
                                          dst + 17 * ((e * rows + r) * G + g));
            }
    if (!dst && o->st == LP_OK)
        o->st = LP_ERR_NOMEM;
    if (dst)
        gw_gpt_oss_add(o, fmt, l, LP_DTYPE_MXFP4, 3, 32 * G, rows, E, dst);
    free(dst);
}

static inline void gw_gpt_oss_keys(gw_gpt_oss_out *o, const gw_gpt_oss *g)
{
    const char *A = "gpt-oss";
    char key[128];
    struct { const char *name; int64_t value; } u32s[] = {
        {"block_count", g->n_layers}, {"context_length", g->n_ctx}, {"embedding_length", g->hidden},
        {"feed_forward_length", g->expert_ffn}, {"expert_feed_forward_length", g->expert_ffn},
        {"attention.head_count", g->n_heads}, {"attention.head_count_kv", g->n_kv_heads},
        {"attention.key_length", g->head_dim}, {"attention.value_length", g->head_dim},
        {"attention.sliding_window", g->window}, {"expert_count", g->n_experts},
        {"expert_used_count", g->top_k}, {"rope.scaling.original_context_length", g->yarn_orig},
    };
    if (o->st == LP_OK)
        o->st = lp_gguf_writer_set_str(o->w, "general.architecture", A, &o->err);
    for (size_t i = 0; o->st == LP_OK && i < sizeof u32s / sizeof u32s[0]; i++) {
        snprintf(key, sizeof key, "%s.%s", A, u32s[i].name);
        o->st = lp_gguf_writer_set_u32(o->w, key, (uint32_t)u32s[i].value, &o->err);
    }
    /* the vocabulary's size from its tokens (the converter writes the o200k BPE vocabulary) */
    char (*tokens)[24] = calloc((size_t)g->vocab, sizeof *tokens);
    const char **token_ptrs = calloc((size_t)g->vocab, sizeof *token_ptrs);
    if ((!tokens || !token_ptrs) && o->st == LP_OK)
        o->st = LP_ERR_NOMEM;
    for (int64_t t = 0; o->st == LP_OK && t < g->vocab; t++) {
        snprintf(tokens[t], sizeof tokens[t], "t%lld", (long long)t);
        token_ptrs[t] = tokens[t];
    }
    if (o->st == LP_OK)
        o->st = lp_gguf_writer_set_str(o->w, "tokenizer.ggml.model", "gpt2", &o->err);
    if (o->st == LP_OK)
        o->st = lp_gguf_writer_set_strs(o->w, "tokenizer.ggml.tokens", token_ptrs,
                                        (size_t)g->vocab, &o->err);
    free(token_ptrs);
    free(tokens);
    struct { const char *name; double value; } f32s[] = {
        {"attention.layer_norm_rms_epsilon", g->eps}, {"rope.freq_base", g->theta},
        {"rope.scaling.factor", g->yarn_factor},
    };
    for (size_t i = 0; o->st == LP_OK && i < sizeof f32s / sizeof f32s[0]; i++) {
        snprintf(key, sizeof key, "%s.%s", A, f32s[i].name);
        o->st = lp_gguf_writer_set_f32(o->w, key, (float)f32s[i].value, &o->err);
    }
    snprintf(key, sizeof key, "%s.rope.scaling.type", A);
    if (o->st == LP_OK)
        o->st = lp_gguf_writer_set_str(o->w, key, "yarn", &o->err);
}

static inline void gw_gpt_oss_layer_tensors(gw_gpt_oss_out *o, const gw_gpt_oss *g, int64_t l)
{
    int64_t H = g->hidden, E = g->n_experts, F = g->expert_ffn;
    int64_t QD = g->n_heads * g->head_dim, KVD = g->n_kv_heads * g->head_dim;
    const gw_gpt_oss_layer *L = &g->layers[l];
    gw_gpt_oss_f32(o, "blk.%d.attn_norm.weight", l, 1, H, 0, 0, L->attn_norm);
    gw_gpt_oss_f32(o, "blk.%d.attn_q.weight", l, 2, H, QD, 0, L->wq);
    gw_gpt_oss_f32(o, "blk.%d.attn_q.bias", l, 1, QD, 0, 0, L->bq);
    gw_gpt_oss_f32(o, "blk.%d.attn_k.weight", l, 2, H, KVD, 0, L->wk);
    gw_gpt_oss_f32(o, "blk.%d.attn_k.bias", l, 1, KVD, 0, 0, L->bk);
    gw_gpt_oss_f32(o, "blk.%d.attn_v.weight", l, 2, H, KVD, 0, L->wv);
    gw_gpt_oss_f32(o, "blk.%d.attn_v.bias", l, 1, KVD, 0, 0, L->bv);
    gw_gpt_oss_f32(o, "blk.%d.attn_output.weight", l, 2, QD, H, 0, L->wo);
    gw_gpt_oss_f32(o, "blk.%d.attn_output.bias", l, 1, H, 0, 0, L->bo);
    gw_gpt_oss_f32(o, "blk.%d.attn_sinks.weight", l, 1, g->n_heads, 0, 0, L->sinks);
    gw_gpt_oss_f32(o, "blk.%d.post_attention_norm.weight", l, 1, H, 0, 0, L->ffn_norm);
    gw_gpt_oss_f32(o, "blk.%d.ffn_gate_inp.weight", l, 2, H, E, 0, L->router);
    gw_gpt_oss_f32(o, "blk.%d.ffn_gate_inp.bias", l, 1, E, 0, 0, L->router_bias);
    static const char *const weights[2] = {"blk.%d.ffn_gate_exps.weight", "blk.%d.ffn_up_exps.weight"};
    static const char *const biases[2] = {"blk.%d.ffn_gate_exps.bias", "blk.%d.ffn_up_exps.bias"};
    for (int half = 0; half < 2; half++) {
        if (L->gate_up_blocks)
            gw_gpt_oss_mxfp4(o, weights[half], l, L->gate_up_blocks, L->gate_up_scales, E, 2 * F, F,
                             H / 32, half, 2);
        else
            gw_gpt_oss_half_f32(o, weights[half], l, L->gate_up, E, F, H, half);
        gw_gpt_oss_half_f32(o, biases[half], l, L->gate_up_bias, E, F, 1, half);
    }
    if (L->down_blocks)
        gw_gpt_oss_mxfp4(o, "blk.%d.ffn_down_exps.weight", l, L->down_blocks, L->down_scales, E, H,
                         H, F / 32, 0, 1);
    else
        gw_gpt_oss_f32(o, "blk.%d.ffn_down_exps.weight", l, 3, F, H, E, L->down);
    gw_gpt_oss_f32(o, "blk.%d.ffn_down_exps.bias", l, 2, H, E, 0, L->down_bias);
}

static inline bool lp_gw_write_gpt_oss(const char *path, const gw_gpt_oss *g)
{
    if (g->n_layers > GW_GPT_OSS_MAX_LAYERS)
        return false;
    gw_gpt_oss_out o = {NULL, LP_OK, {0}};
    o.st = lp_gguf_writer_create(&o.w, &o.err);
    gw_gpt_oss_keys(&o, g);
    gw_gpt_oss_f32(&o, "token_embd.weight", 0, 2, g->hidden, g->vocab, 0, g->embed);
    gw_gpt_oss_f32(&o, "output_norm.weight", 0, 1, g->hidden, 0, 0, g->out_norm);
    gw_gpt_oss_f32(&o, "output.weight", 0, 2, g->hidden, g->vocab, 0, g->lm_head);
    for (int64_t l = 0; l < g->n_layers; l++)
        gw_gpt_oss_layer_tensors(&o, g, l);
    if (o.st == LP_OK)
        o.st = lp_gguf_writer_write(o.w, path, &o.err);
    if (o.st != LP_OK)
        fprintf(stderr, "lp_gw_write_gpt_oss(%s): %s\n", path, o.err.msg);
    lp_gguf_writer_destroy(o.w);
    return o.st == LP_OK;
}

#endif
