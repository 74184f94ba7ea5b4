/* The KV cache: per layer [n_kv_heads, slots, head_dim] keys and values in f32, f16, bf16 or
 * q8_0; multi-head latent attention caches instead, per layer and position, one row [latent
 * (kv_lora_rank, after kv_a_layernorm) | rotated k_rope (qk_rope_head_dim)] as DeepSeek and vLLM
 * do, which decode expands back into every head's K_nope and V with kv_b; sliding-window layers keep a ring of min(ctx, window) slots. A call's new rows are
 * written before its queries attend, so every query reads keys at the cache's precision. The
 * heads read f32/f16/bf16 caches of full layers in place; rings and q8_0 caches are gathered, in
 * position order, into the pass's f32 buffers first (the kernel then sees key j at position j). */
#include "trace/forward/forward_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/dtype.h"
#include "core/names.h"
#include "inspect/formats/quant.h"

#define Q8_BLOCK 32
#define Q8_BLOCK_BYTES 34 /* f16 scale + 32 int8 */

typedef struct kv_layer {
    int64_t n_kv, slots; /* slots = ctx, or min(ctx, window) for a ring */
    int64_t window;      /* the window the layer attends with (0 = none) */
    bool ring;
    uint64_t row_bytes;  /* one kv head at one slot */
    uint8_t *k, *v;      /* [n_kv, slots, row_bytes]; MLA: k holds the latent rows, v is NULL */
} kv_layer;

struct lp_kv_cache {
    const lp_model *model;
    lp_dtype dtype;
    int64_t ctx, len, head_dim;
    int64_t latent_width; /* MLA: kv_lora_rank + qk_rope_head_dim, else 0 */
    int n_layers;
    kv_layer *layers;
    uint64_t bytes;
    uint8_t *row; /* one encoded row */
    int32_t *tokens;   /* [ctx] the ids processed, for a longrope rebuild */
    int64_t rope_len;  /* > 0 while rebuilding: the length RoPE's factors are chosen for */
    int64_t rebuilt_at; /* the length at which longrope's switch rebuilt the cache, -1 = never */
    lp_kv_fault fault;
    int64_t stale_pos; /* rope-stale: the first decode position, -1 until one was made */
};

static const lp_name_entry fault_names[] = {
    {LP_KV_FAULT_NONE, "none"},
    {LP_KV_FAULT_CACHE_OFF_BY_ONE, "cache-off-by-one"},
    {LP_KV_FAULT_ROPE_STALE, "rope-stale"},
    {LP_KV_FAULT_MASK_TOP_LEFT, "mask-top-left"},
};

LP_NAMES_DEFINE(lp_kv_fault_name, lp_kv_fault_from_name, lp_kv_fault, fault_names, "unknown", false,
                LP_KV_FAULT_COUNT)

lp_dtype lp_kv_default_dtype(const lp_model *model)
{
    const lp_layer_weights *L = &model->layers[0];
    lp_dtype d = model->arch.mla ? L->kv_a.dtype : L->qkv_layout != LP_QKV_SEPARATE ? L->qkv.dtype : L->k.dtype;
    return d == LP_DTYPE_F32 || d == LP_DTYPE_BF16 ? d : LP_DTYPE_F16;
}

static bool int8_dtype(const lp_matrix *w)
{
    return w->data && (w->dtype == LP_DTYPE_Q8_0 || w->dtype == LP_DTYPE_Q4_K ||
                       w->dtype == LP_DTYPE_MXFP4);
}

static bool expert_int8(const lp_expert_weights *e)
{
    return int8_dtype(&e->gate) || int8_dtype(&e->up) || int8_dtype(&e->down) ||
           int8_dtype(&e->gate_up);
}

static bool layer_int8(const lp_layer_weights *L)
{
    const lp_matrix *dense[] = {&L->q, &L->k, &L->v, &L->qkv, &L->o, &L->q_a, &L->q_b,
                                &L->kv_a, &L->kv_b, &L->gate, &L->up, &L->down, &L->gate_up};
    for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++)
        if (int8_dtype(dense[i]))
            return true;
    if (L->moe && L->experts && expert_int8(&L->experts[0]))
        return true;
    return L->shared_ffn > 0 && expert_int8(&L->shared);
}

/* Every layer: llama.cpp's mixes (Q4_K_M) give layers different types. */
bool lp_model_int8_matvec(const lp_model *model)
{
    for (int64_t l = 0; l < model->arch.n_layers; l++)
        if (layer_int8(&model->layers[l]))
            return true;
    return false;
}

int64_t lp_fw_layer_window(const lp_forward_opts *opts, const lp_layer_weights *L)
{
    if (opts->window_override > 0)
        return opts->window_override;
    return opts->sliding_window ? L->window : 0;
}

static uint64_t row_bytes_of(lp_dtype dtype, int64_t head_dim)
{
    if (dtype == LP_DTYPE_Q8_0)
        return (uint64_t)((head_dim + Q8_BLOCK - 1) / Q8_BLOCK) * Q8_BLOCK_BYTES;
    return (uint64_t)head_dim * (dtype == LP_DTYPE_F32 ? 4u : 2u);
}

void lp_kv_cache_destroy(lp_kv_cache *c)
{
    if (!c)
        return;
    for (int l = 0; c->layers && l < c->n_layers; l++) {
        free(c->layers[l].k);
        free(c->layers[l].v);
    }
    free(c->layers);
    free(c->row);
    free(c->tokens);
    free(c);
}

lp_status lp_kv_cache_create(const lp_model *model, int64_t ctx, lp_dtype dtype,
                             const lp_forward_opts *opts, lp_kv_fault fault, lp_kv_cache **out,
                             lp_error *err)
{
    lp_forward_opts defaults; /* lp_forward_opts_init's windows: the model's own */
    if (!opts) {
        memset(&defaults, 0, sizeof defaults);
        defaults.sliding_window = true;
        opts = &defaults;
    }
    *out = NULL;
    const lp_arch *a = &model->arch;
    if (dtype == LP_DTYPE_INVALID)
        dtype = lp_kv_default_dtype(model);
    if (dtype != LP_DTYPE_F32 && dtype != LP_DTYPE_F16 && dtype != LP_DTYPE_BF16 &&
        dtype != LP_DTYPE_Q8_0)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "KV cache dtype %s is not supported (f32, f16, bf16, q8_0)",
                            lp_dtype_name(dtype));
    if (ctx < 1 || ctx > (1 << 20))
        return lp_error_set(err, LP_ERR_RANGE, "KV cache of %lld positions (1 .. 2^20)",
                            (long long)ctx);
    lp_kv_cache *c = calloc(1, sizeof *c);
    if (!c || !(c->layers = calloc((size_t)a->n_layers, sizeof *c->layers))) {
        free(c);
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory for the KV cache");
    }
    c->model = model;
    c->dtype = dtype;
    c->ctx = ctx;
    c->head_dim = a->head_dim;
    c->n_layers = (int)a->n_layers;
    c->fault = fault;
    c->stale_pos = -1;
    c->rebuilt_at = -1;
    c->latent_width = a->mla ? a->kv_lora_rank + a->qk_rope_head_dim : 0;
    int64_t row_width = a->mla ? c->latent_width : a->head_dim;
    if (!(c->row = malloc((size_t)row_bytes_of(dtype, row_width))) ||
        !(c->tokens = malloc((size_t)ctx * sizeof *c->tokens))) {
        lp_kv_cache_destroy(c);
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory for the KV cache");
    }
    for (int l = 0; l < c->n_layers; l++) {
        kv_layer *kl = &c->layers[l];
        kl->n_kv = a->mla ? 1 : model->layers[l].n_kv_heads;
        kl->window = lp_fw_layer_window(opts, &model->layers[l]);
        kl->ring = kl->window > 0 && kl->window < ctx;
        if (a->mla && kl->ring) {
            lp_kv_cache_destroy(c);
            return lp_error_set(err, LP_ERR_UNSUPPORTED,
                                "KV cache: a sliding window (%lld) over multi-head latent "
                                "attention (%s): DeepSeek's layers attend to every position",
                                (long long)kl->window, a->family);
        }
        kl->slots = kl->ring ? kl->window : ctx;
        kl->row_bytes = row_bytes_of(dtype, row_width);
        uint64_t bytes;
        if (!lp_mul_u64((uint64_t)(kl->n_kv * kl->slots), kl->row_bytes, &bytes) ||
            !(kl->k = calloc(1, (size_t)bytes)) || (!a->mla && !(kl->v = calloc(1, (size_t)bytes)))) {
            lp_kv_cache_destroy(c);
            return lp_error_set(err, LP_ERR_NOMEM,
                                "out of memory for the KV cache (layer %d: %lld slots)", l,
                                (long long)kl->slots);
        }
        c->bytes += a->mla ? bytes : 2 * bytes;
    }
    *out = c;
    return LP_OK;
}

int64_t lp_kv_cache_len(const lp_kv_cache *c) { return c->len; }
int64_t lp_kv_cache_ctx(const lp_kv_cache *c) { return c->ctx; }
lp_dtype lp_kv_cache_dtype(const lp_kv_cache *c) { return c->dtype; }
uint64_t lp_kv_cache_bytes(const lp_kv_cache *c) { return c->bytes; }
int64_t lp_kv_cache_rebuilt_at(const lp_kv_cache *c) { return c->rebuilt_at; }

int64_t lp_fw_kv_rope_len(const lp_kv_cache *c, int64_t n_k)
{
    return c->rope_len > n_k ? c->rope_len : n_k;
}

void lp_fw_kv_remember(lp_kv_cache *c, const int32_t *tokens, int64_t n)
{
    memcpy(c->tokens + c->len, tokens, (size_t)n * sizeof *tokens);
}

/* Phi-3's longrope switch (the long factors once the sequence passes the original context) as
 * Phi3ForCausalLM.prepare_inputs_for_generation does it: the cache of the first len positions is
 * dropped and recomputed, all its keys rotated with the factors of the new length total. */
const int32_t *lp_fw_kv_begin_rebuild(lp_kv_cache *c, int64_t total, int64_t *n_old)
{
    *n_old = c->len;
    c->rebuilt_at = c->len;
    c->rope_len = total;
    c->len = 0;
    return c->tokens;
}

void lp_fw_kv_end_rebuild(lp_kv_cache *c) { c->rope_len = 0; }

bool lp_fw_kv_needs_gather(const lp_kv_cache *c)
{
    if (c->dtype == LP_DTYPE_Q8_0)
        return true;
    for (int l = 0; l < c->n_layers; l++)
        if (c->layers[l].ring)
            return true;
    return false;
}

int64_t lp_fw_kv_rope_pos0(const lp_kv_cache *c, int64_t pos0)
{
    if (c->fault != LP_KV_FAULT_ROPE_STALE || pos0 == 0)
        return pos0;
    return c->stale_pos >= 0 ? c->stale_pos : pos0;
}

bool lp_fw_kv_top_left(const lp_kv_cache *c) { return c->fault == LP_KV_FAULT_MASK_TOP_LEFT; }

void lp_fw_kv_advance(lp_kv_cache *c, int64_t n)
{
    if (c->len > 0 && c->stale_pos < 0)
        c->stale_pos = c->len;
    c->len += n;
}

/* ---- rows in the cache's dtype ---- */

/* llama.cpp's q8_0: per block of 32, d = max|x| / 127 (stored f16), q = round(x / d). The last
 * block of a head_dim that is no multiple of 32 is padded with zeros. */
static void q8_0_quantize(const float *x, int64_t n, uint8_t *dst)
{
    for (int64_t b0 = 0; b0 < n; b0 += Q8_BLOCK, dst += Q8_BLOCK_BYTES) {
        float block[Q8_BLOCK] = {0}, amax = 0.0f;
        int64_t m = n - b0 < Q8_BLOCK ? n - b0 : Q8_BLOCK;
        memcpy(block, x + b0, (size_t)m * sizeof(float));
        for (int i = 0; i < Q8_BLOCK; i++)
            amax = fabsf(block[i]) > amax ? fabsf(block[i]) : amax;
        float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        uint16_t dh = lp_f32_to_f16(d);
        memcpy(dst, &dh, 2);
        for (int i = 0; i < Q8_BLOCK; i++)
            dst[2 + i] = (uint8_t)(int8_t)lroundf(block[i] * id);
    }
}

static void encode_row(lp_dtype dt, const float *x, int64_t n, uint8_t *dst)
{
    if (dt == LP_DTYPE_F32) {
        memcpy(dst, x, (size_t)n * sizeof(float));
    } else if (dt == LP_DTYPE_Q8_0) {
        q8_0_quantize(x, n, dst);
    } else {
        uint16_t *h = (uint16_t *)(void *)dst;
        for (int64_t i = 0; i < n; i++)
            h[i] = dt == LP_DTYPE_F16 ? lp_f32_to_f16(x[i]) : lp_f32_to_bf16(x[i]);
    }
}

static lp_status decode_row(lp_dtype dt, const uint8_t *src, int64_t n, float *dst, lp_error *err)
{
    if (dt == LP_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return LP_OK;
    }
    if (dt == LP_DTYPE_Q8_0) {
        float tmp[Q8_BLOCK];
        for (int64_t b0 = 0; b0 < n; b0 += Q8_BLOCK) {
            int64_t m = n - b0 < Q8_BLOCK ? n - b0 : Q8_BLOCK;
            lp_status st = lp_dequantize(LP_DTYPE_Q8_0, src + b0 / Q8_BLOCK * Q8_BLOCK_BYTES,
                                         Q8_BLOCK, tmp, err);
            if (st != LP_OK)
                return st;
            memcpy(dst + b0, tmp, (size_t)m * sizeof(float));
        }
        return LP_OK;
    }
    const uint16_t *h = (const uint16_t *)(const void *)src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = dt == LP_DTYPE_F16 ? lp_f16_to_f32(h[i]) : lp_bf16_to_f32(h[i]);
    return LP_OK;
}

/* ---- one layer's call ---- */

static uint8_t *slot_row(const kv_layer *kl, uint8_t *base, int64_t g, int64_t slot)
{
    return base + ((uint64_t)(g * kl->slots + slot)) * kl->row_bytes;
}

/* The slot position pos is written to (and read from); -1 when it has none. */
static int64_t slot_of(const kv_layer *kl, int64_t pos)
{
    return kl->ring ? pos % kl->slots : (pos < kl->slots ? pos : -1);
}

/* Keys [lo, n_k) of every kv head, in position order, into the gather buffers: older ones from the
 * cache, the new ones (positions >= pos0) as the cache holds them after they were written. */
static lp_status gather(lp_fw_pass *p, const kv_layer *kl, int64_t lo, lp_fw_kv_source *src)
{
    const lp_kv_cache *c = p->kv;
    int64_t hd = c->head_dim, n_k = p->n_k;
    for (int64_t g = 0; g < kl->n_kv; g++) {
        float *gk = p->s.kv_k + g * n_k * hd, *gv = p->s.kv_v + g * n_k * hd;
        /* keys below lo are never scored; the kernel may still load their block */
        int64_t z = lo / 64 * 64;
        memset(gk + z * hd, 0, (size_t)((lo - z) * hd) * sizeof(float));
        memset(gv + z * hd, 0, (size_t)((lo - z) * hd) * sizeof(float));
        for (int64_t pos = lo; pos < n_k; pos++) {
            int64_t slot = slot_of(kl, pos);
            lp_status st;
            if (slot < 0) {
                memset(gk + pos * hd, 0, (size_t)hd * sizeof(float));
                memset(gv + pos * hd, 0, (size_t)hd * sizeof(float));
                continue;
            }
            if ((st = decode_row(c->dtype, slot_row(kl, kl->k, g, slot), hd, gk + pos * hd,
                                 p->err)) ||
                (st = decode_row(c->dtype, slot_row(kl, kl->v, g, slot), hd, gv + pos * hd,
                                 p->err)))
                return st;
        }
    }
    *src = (lp_fw_kv_source){p->s.kv_k, p->s.kv_v, hd, hd, n_k * hd, LP_DTYPE_F32};
    return LP_OK;
}

lp_status lp_fw_kv_append(lp_fw_pass *p, int l, const float *k, const float *v, int64_t kv_stride,
                          lp_fw_kv_source *src)
{
    lp_kv_cache *c = p->kv;
    kv_layer *kl = &c->layers[l];
    int64_t hd = c->head_dim, T = p->T, pos0 = p->pos0;
    if (p->mask.window != kl->window)
        return lp_error_set(p->err, LP_ERR_USAGE,
                            "KV cache: layer %d was made for window %lld, the call uses %lld", l,
                            (long long)kl->window, (long long)p->mask.window);
    /* A ring holds the last `slots` positions: the new rows that could still be read. Rows a ring
     * is too small for (a prefill longer than the window) are read from the projections. */
    int64_t first = kl->ring && T > kl->slots ? T - kl->slots : 0;
    int64_t lo = kl->window > 0 && pos0 + 1 > kl->window ? pos0 + 1 - kl->window : 0;
    bool gathered = kl->ring || c->dtype == LP_DTYPE_Q8_0;
    lp_status st;
    /* the ring's old rows must be read before the new ones overwrite their slots */
    if (gathered && kl->ring && (st = gather(p, kl, lo, src)))
        return st;
    int64_t late = c->fault == LP_KV_FAULT_CACHE_OFF_BY_ONE && pos0 > 0 ? 1 : 0;
    for (int64_t t = 0; t < T; t++) {
        int64_t pos = pos0 + t, slot = slot_of(kl, pos + late);
        for (int64_t g = 0; g < kl->n_kv; g++) {
            for (int kv = 0; kv < 2; kv++) {
                const float *x = (kv ? v : k) + t * kv_stride + g * hd;
                uint8_t *base = kv ? kl->v : kl->k;
                encode_row(c->dtype, x, hd, c->row);
                if (t >= first && slot >= 0)
                    memcpy(slot_row(kl, base, g, slot), c->row, (size_t)kl->row_bytes);
                if (!kl->ring)
                    continue;
                /* a ring's new rows join the gather buffers at the cache's precision (with the
                 * fault: what the slot they should be in holds) */
                float *dst = (kv ? p->s.kv_v : p->s.kv_k) + (g * p->n_k + pos) * hd;
                const uint8_t *row = late ? slot_row(kl, base, g, slot_of(kl, pos)) : c->row;
                if ((st = decode_row(c->dtype, row, hd, dst, p->err)))
                    return st;
            }
        }
    }
    if (kl->ring)
        return LP_OK;
    if (gathered)
        return gather(p, kl, lo, src);
    uint64_t elems = kl->row_bytes / (c->dtype == LP_DTYPE_F32 ? 4u : 2u);
    *src = (lp_fw_kv_source){kl->k, kl->v, (int64_t)elems, (int64_t)elems,
                             kl->slots * (int64_t)elems, c->dtype};
    return LP_OK;
}

/* MLA: the call's T new rows ([latent | k_rope], row stride `stride`) written at their positions,
 * then every position 0 .. n_k - 1 read back into rows (in place: rows' first T rows are the new
 * ones), so prefill and decode both see the latent at the cache's precision. */
lp_status lp_fw_kv_latent(lp_fw_pass *p, int l, float *rows, int64_t stride)
{
    lp_kv_cache *c = p->kv;
    kv_layer *kl = &c->layers[l];
    int64_t w = c->latent_width, T = p->T, pos0 = p->pos0;
    if (w <= 0)
        return lp_error_set(p->err, LP_ERR_USAGE, "KV cache: layer %d holds no latent", l);
    int64_t late = c->fault == LP_KV_FAULT_CACHE_OFF_BY_ONE && pos0 > 0 ? 1 : 0;
    for (int64_t t = 0; t < T; t++) {
        int64_t slot = slot_of(kl, pos0 + t + late);
        encode_row(c->dtype, rows + t * stride, w, c->row);
        if (slot >= 0)
            memcpy(slot_row(kl, kl->k, 0, slot), c->row, (size_t)kl->row_bytes);
    }
    for (int64_t pos = 0; pos < p->n_k; pos++) {
        lp_status st = decode_row(c->dtype, slot_row(kl, kl->k, 0, pos), w, rows + pos * stride,
                                  p->err);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}
