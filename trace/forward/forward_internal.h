/* What the files of the forward pass share: one call's state (the pass), its scratch, and the
 * helpers every sublayer uses. forward.c runs the layers; attn_block.c and ffn_block.c are the two
 * sublayers; pass.c sizes the scratch and talks to the observer. Calls go one way only:
 * forward.c -> attn_block.c, ffn_block.c -> pass.c.
 *
 *   pass p = ...;                                   // forward.c fills it per call
 *   const float *in = lp_fw_block_input(&p, &L->attn_norm);
 *   lp_fw_attention(&p, l, in, p.s.tmp);            // ATTN_OUT emitted inside
 */
#ifndef LP_TRACE_FORWARD_INTERNAL_H
#define LP_TRACE_FORWARD_INTERNAL_H

#include "trace/forward/model_internal.h"
#include "trace/trace.h"

/* Scratch layout for n_seqs sequences of T tokens stacked into rows = n_seqs * T rows (the
 * linear layers' buffers hold every row; attention's probability slots and row statistics hold
 * one sequence); every buffer 64-byte aligned in one arena. */
typedef struct lp_fw_plan {
    int64_t n_seqs, T, rows;
    int64_t q_dim, kv_dim, ffn; /* the widest layer's (lp_layer_shape_of) */
    int64_t n_prob_slots; /* heads computed at once, each with its own [T, T] slot */
    int64_t slot_stride;  /* floats between slots: T*T rounded up to a cache line, so threads
                             writing neighbouring slots never share one */
    int64_t logits_rows;  /* rows per logits chunk */
    int64_t ffn_rows;     /* rows per FFN chunk */
    int64_t n_k;          /* keys per probability row (T, or the cache's length after the call) */
    bool kv_gather;       /* carve the KV gather buffers */
    uint64_t total;
} lp_fw_plan;

/* R = plan.rows, the stacked rows of every sequence (sequence b's token t at row b * T + t). */
typedef struct lp_fw_scratch {
    float *x;        /* [R, hidden] residual stream */
    float *xn;       /* [R, hidden] normed input of a sublayer */
    float *tmp;      /* [R, hidden] sublayer output before the residual add */
    float *ffn_out;  /* [R, hidden] the FFN's output beside the attention's (parallel blocks) */
    float *embed;    /* [R, embed_dim] token rows before project_in, after project_out (OPT) */
    float *qkv;      /* [R, q_dim + 2 kv_dim] (q | k | v per row) */
    float *qkv_row;  /* [q_dim + 2 kv_dim] one fused row while it is regrouped */
    float *attn;     /* [R, q_dim] head outputs, head h at columns h*head_dim */
    float *gate;     /* [ffn_rows, 2 ffn] (fused gate|up needs both halves) */
    float *up;       /* [ffn_rows, ffn] */
    float *probs;    /* [n_prob_slots, slot_stride >= T*T] or NULL (one sequence at a time) */
    lp_attn_row_stats *row_stats; /* [n_heads, T] (one sequence at a time) */
    float *logits;   /* [logits_rows, vocab] */
    float *inv_freq; /* [rope_dim / 2] */
    float *inv_freq_local;
    int64_t *positions; /* [R] */
    /* MoE */
    float *router;      /* [R, n_experts] softmax over all experts */
    int32_t *chosen;    /* [R, top_k] */
    float *chosen_w;    /* [R, top_k] */
    int64_t *tok_list;  /* [R] rows routed to one expert */
    float *gather;      /* [ffn_rows, hidden] */
    float *expert_out;  /* [ffn_rows, hidden] */
    /* KV cache calls that gather keys (rolling or q8_0 caches): [kv_dim, n_k] f32 each */
    float *kv_k, *kv_v;
    float *router_sel;  /* [2 n_experts] one token's scores for the choice, its group scores */
    float *mla; /* [max(n_k, R), q_lora + 2 kv_lora + rope + n_heads (nope + v + head_dim) + max(nope, v)] */
} lp_fw_scratch;

/* The state of one call, shared by the sublayers. The sequences of a batch are stacked: norms,
 * linear layers, RoPE, routing and experts run once over all rows, so each weight panel is
 * packed once per batch; attention and every site run per sequence (b), on its T rows. */
typedef struct lp_fw_pass {
    const lp_model *m;
    const lp_forward_opts *opts;
    const lp_observer *obs;
    lp_pool *pool;
    lp_fw_scratch s;
    lp_fw_plan plan;
    int64_t b;        /* the sequence the per-sequence parts and the sites are at */
    int64_t n_seqs;   /* 1 with a KV cache */
    int64_t T;        /* tokens per sequence (padding included) */
    int64_t rows;     /* n_seqs * T */
    int64_t rope_len; /* the call's longest real sequence: what dynamic NTK and longrope see */
    struct lp_kv_cache *kv; /* lp_forward_cached: the cache, else NULL */
    int64_t pos0;     /* absolute position of row 0 (the cache's length before the call; else 0) */
    int64_t n_k;      /* keys each head attends over: pos0 + T */
    lp_mask_spec mask;
    lp_error *err;
} lp_fw_pass;

/* pass.c: the plan (false on overflow) and the arena's buffers (false when it is too small).
 * lp_fw_make_plan_kv plans n_seqs sequences of T new rows, each against n_k keys (probability
 * slots [T, n_k]) and, with gather, the KV cache's f32 gather buffers. */
bool lp_fw_make_plan(const lp_arch *a, int64_t T, bool want_probs, int n_threads, lp_fw_plan *p);
bool lp_fw_make_plan_kv(const lp_arch *a, int64_t n_seqs, int64_t T, int64_t n_k, bool gather,
                        bool want_probs, int n_threads, lp_fw_plan *p);
struct lp_arena;
bool lp_fw_carve(struct lp_arena *arena, const lp_arch *a, const lp_fw_plan *p, lp_fw_scratch *s);

/* pass.c: the observer. */
bool lp_fw_wants(const lp_fw_pass *p, lp_site_kind kind, int layer, int head);
lp_status lp_fw_emit(const lp_fw_pass *p, lp_site_kind kind, int layer, int head,
                     const lp_view *view);
lp_status lp_fw_emit_matrix(const lp_fw_pass *p, lp_site_kind kind, int layer, const float *data,
                            int64_t rows, int64_t cols, int64_t stride);

/* pass.c: the intervention (lp_fw_edit: LP_OK when it wants nothing here), then the observer,
 * at a site whose data the pass owns. */
lp_status lp_fw_edit(const lp_fw_pass *p, lp_site_kind kind, int layer, int head, float *data,
                     int64_t rows, int64_t cols, int64_t stride);
lp_status lp_fw_hook_matrix(const lp_fw_pass *p, lp_site_kind kind, int layer, float *data,
                            int64_t rows, int64_t cols, int64_t stride);
/* A site of every sequence in turn: stacked data [R, cols] (row stride `stride`) handed over as
 * sequence b's [T, cols] from row b * T; hook = intervention, then observer; emit = observer. */
lp_status lp_fw_hook_seqs(lp_fw_pass *p, lp_site_kind kind, int layer, float *data, int64_t cols,
                          int64_t stride);
lp_status lp_fw_emit_seqs(lp_fw_pass *p, lp_site_kind kind, int layer, const float *data,
                          int64_t cols, int64_t stride);

/* unembed.c: the logits' last steps in place: MPT's logit_scale, then Gemma 2's final
 * soft-cap. */
void lp_fw_finish_logits(const lp_arch *a, float *logits, int64_t n);
/* pass.c: the arch's norm (RMS or LayerNorm) over `rows` rows of n values, dst may be src;
 * weight and bias may be NULL. */
void lp_fw_norm_rows(const lp_arch *a, const float *weight, const float *bias, float *dst,
                     const float *src, int64_t rows, int64_t n);
/* A hidden-wide norm of the layer (or the final one) over `rows` rows. */
void lp_fw_norm(const lp_fw_pass *p, const lp_norm_weights *nw, float *dst, const float *src,
                int64_t rows);
/* The input of a sublayer: its norm of x into xn, or x itself when the block has no input
 * norms (OLMo 2) or none is given. */
const float *lp_fw_block_input(lp_fw_pass *p, const lp_norm_weights *nw);
lp_status lp_fw_linear(const lp_fw_pass *p, const float *x, int64_t rows, const lp_matrix *w,
                       const float *bias, float *y);
void lp_fw_pool_or_serial(lp_pool *pool, int64_t n, void (*fn)(void *, int64_t), void *ctx);
/* Several matrices applied to the same input x: for one row (a decode step), lp_matvec_group (one
 * pool run over the rows of all of them, x quantized once); otherwise lp_fw_linear on each. */
typedef struct lp_fw_linear_part {
    const lp_matrix *w;
    const float *bias; /* or NULL */
    float *y;          /* [rows, w->rows] */
} lp_fw_linear_part;
lp_status lp_fw_linear_group(const lp_fw_pass *p, const float *x, int64_t rows,
                             const lp_fw_linear_part *parts, int n_parts);
/* lp_fw_linear for a few rows x [rows, w->cols] (a batch's last positions; up to
 * LP_FW_MATVEC_ROWS): each row's result is lp_matvec's, as the row alone gets it, and the
 * weights are read once for all rows (the packed GEMM would pack every weight for one tile).
 * On the 32000 x 2048 f32 LM head (2 threads, load 12-15): 1 row 0.03-0.05 s, 4 rows 0.06-0.10 s
 * (packed GEMM 0.13-0.24 s), 16 rows 0.14-0.28 s, no better than packing: hence 8. */
enum { LP_FW_MATVEC_ROWS = 8 };
lp_status lp_fw_linear_rows(const lp_fw_pass *p, const float *x, int64_t rows, const lp_matrix *w,
                            const float *bias, float *y);

/* The keys and values the heads of one layer read: the projections themselves (plain pass), the
 * cache's own rows, or the gather buffers. Kv head g's rows start at element g * head_stride. */
typedef struct lp_fw_kv_source {
    const void *k, *v;
    int64_t k_stride, v_stride; /* elements between keys */
    int64_t head_stride;        /* elements between kv heads */
    lp_dtype dtype;             /* f32, f16 or bf16 */
} lp_fw_kv_source;

/* kv_cache.c: the window layer L attends with under opts (0 = none); the cache's rings use it. */
int64_t lp_fw_layer_window(const lp_forward_opts *opts, const lp_layer_weights *L);
/* kv_cache.c: write the new rows k, v ([T, kv_dim], row stride kv_stride) of layer l into the
 * cache and say where the heads read all pos0 + T keys from. */
lp_status lp_fw_kv_append(lp_fw_pass *p, int l, const float *k, const float *v, int64_t kv_stride,
                          lp_fw_kv_source *src);
/* kv_cache.c: longrope's rebuild: the ids kept, the length RoPE sees, the rebuild's bounds. */
void lp_fw_kv_remember(struct lp_kv_cache *kv, const int32_t *tokens, int64_t n);
int64_t lp_fw_kv_rope_len(const struct lp_kv_cache *kv, int64_t n_k);
const int32_t *lp_fw_kv_begin_rebuild(struct lp_kv_cache *kv, int64_t total, int64_t *n_old);
void lp_fw_kv_end_rebuild(struct lp_kv_cache *kv);
/* kv_cache.c: MLA's latent rows: the call's new ones stored, all n_k read back in place. */
lp_status lp_fw_kv_latent(lp_fw_pass *p, int l, float *rows, int64_t stride);
/* kv_cache.c: what the cache changes in a call: the RoPE position of row 0 (rope-stale keeps
 * the first decode position) and the mask alignment (mask-top-left). */
int64_t lp_fw_kv_rope_pos0(const struct lp_kv_cache *kv, int64_t pos0);
bool lp_fw_kv_top_left(const struct lp_kv_cache *kv);
bool lp_fw_kv_needs_gather(const struct lp_kv_cache *kv);
void lp_fw_kv_advance(struct lp_kv_cache *kv, int64_t n);

/* attn_block.c: layer l's attention over in [R, hidden] into out [R, hidden], its post norm
 * applied and ATTN_OUT (and every per-head site) emitted. */
lp_status lp_fw_attention(lp_fw_pass *p, int l, const float *in, float *out);

/* Where the heads of one layer read: head h's query at q + h * q_step (rows q_stride apart),
 * its kv head h / group's key as kv says and its value at kv.v + (h / group) * v_step; scores
 * over head_dim values, outputs v_dim wide into s.attn at h * v_dim (rows n_heads * v_dim
 * apart); head h's softmax also counts sinks[h] when the layer has learned sinks. q, keys and
 * values hold every sequence's rows stacked (T apart); with a cache there is one sequence. */
typedef struct lp_fw_heads {
    const float *q;
    int64_t q_stride, q_step;
    lp_fw_kv_source kv;
    int64_t v_step;
    int64_t head_dim, v_dim, group;
    const float *sinks; /* [n_heads] learned sink logits, or NULL */
} lp_fw_heads;

/* attn_block.c: every head of every sequence (maps and statistics to the observer) and the
 * HEAD_OUTPUT sites of heads width wide. */
lp_status lp_fw_run_heads(lp_fw_pass *p, int l, const lp_fw_heads *heads);
lp_status lp_fw_emit_head_outputs(lp_fw_pass *p, int l, int64_t width);

/* mla_block.c: DeepSeek's multi-head latent attention, the same contract as lp_fw_attention. */
lp_status lp_fw_mla_attention(lp_fw_pass *p, int l, const float *in, float *out);

/* ffn_block.c: layer l's FFN (dense or experts) over in into out, post norm, FFN_OUT. */
lp_status lp_fw_ffn(lp_fw_pass *p, int l, const float *in, float *out);

#endif
