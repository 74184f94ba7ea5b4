/* lp_estimate: fills a whole report (defaults, params, memory, KV, FLOPs, fit, gates, audit). */
#include "estimate/estimate.h"

#include <string.h>

#include "core/checked.h"
#include "estimate/estimate_internal.h"

#define DEFAULT_SEQ 4096
#define DEFAULT_PREFILL_CHUNK 2048
#define FIT_SEARCH_MAX ((int64_t)1 << 40)


/* Widest activation row of any layer's FFN: dense width, or top-k experts plus shared ones. */
static int64_t ffn_live_width(const lp_arch *arch)
{
    int64_t widest = 0;
    for (int64_t l = 0; l < arch->n_layers; l++) {
        int64_t w;
        if (lp_est_layer_is_moe(arch, l)) {
            int64_t shared = arch->shared_expert_ffn_hidden > 0
                                 ? arch->shared_expert_ffn_hidden
                                 : arch->n_shared_experts * arch->expert_ffn_hidden;
            int64_t top_k = arch->n_experts_per_tok < arch->n_experts ? arch->n_experts_per_tok
                                                                      : arch->n_experts;
            w = top_k * arch->expert_ffn_hidden + shared;
        } else {
            w = lp_est_layer_ffn_hidden(arch, l);
        }
        if (w > widest)
            widest = w;
    }
    return widest;
}

/* Live activations of one forward pass: min(batch x seq, chunk) tokens each holding the
 * residual and its normalized copy (2 hidden), q, k and v, and the FFN's two intermediate rows,
 * at the activation dtype; plus f32 logits of the last position of every sequence (none for an
 * encoder). Attention scores are not materialized (fused/flash attention). */
static bool activation_bytes(const lp_arch *arch, const lp_est_report *rep, int64_t batch,
                             int64_t seq, uint64_t *bytes)
{
    uint64_t tokens;
    if (!lp_mul_u64((uint64_t)batch, (uint64_t)seq, &tokens))
        return false;
    if (tokens > (uint64_t)rep->prefill_chunk)
        tokens = (uint64_t)rep->prefill_chunk;
    int64_t qk =
        arch->mla ? arch->qk_nope_head_dim + arch->qk_rope_head_dim : lp_est_head_dim(arch);
    int64_t v = arch->mla ? arch->v_head_dim : lp_est_head_dim(arch);
    int64_t kv_heads = arch->mla ? arch->n_heads : lp_est_layer_kv_heads(arch, 0);
    for (int64_t l = 1; l < arch->n_layers && !arch->mla; l++)
        if (lp_est_layer_kv_heads(arch, l) > kv_heads)
            kv_heads = lp_est_layer_kv_heads(arch, l);
    uint64_t row = (uint64_t)(2 * arch->hidden_size + arch->n_heads * qk + kv_heads * (qk + v) +
                              2 * ffn_live_width(arch));
    uint64_t act, logits;
    if (!lp_mul_u64(tokens, row, &act) ||
        !lp_mul_u64(act, rep->act_dtype.block_bytes, &act) ||
        !lp_mul_u64((uint64_t)batch, arch->encoder_only ? 0 : (uint64_t)arch->vocab_size,
                    &logits) ||
        !lp_mul_u64(logits, 4, &logits) || !lp_add_u64(act, logits, bytes))
        return false;
    return true;
}

bool lp_est_memory_at(const lp_arch *arch, const lp_est_report *rep, int64_t batch, int64_t seq,
                      uint64_t *bytes)
{
    uint64_t kv, act, total;
    if (lp_est_kv_bytes(arch, &rep->kv_dtype, batch, seq, &kv, NULL) != LP_OK ||
        !activation_bytes(arch, rep, batch, seq, &act) ||
        !lp_add_u64(rep->weight_bytes[0], kv, &total) || !lp_add_u64(total, act, &total))
        return false;
    *bytes = total;
    return true;
}

static bool fits(const lp_arch *arch, const lp_est_report *rep, int64_t batch, int64_t seq)
{
    uint64_t bytes;
    return lp_est_memory_at(arch, rep, batch, seq, &bytes) && bytes <= rep->limits.budget;
}

/* Largest x in [1, FIT_SEARCH_MAX] with fits(x) (memory grows with x); 0 when even 1 does not
 * fit, -1 when the maximum fits (memory stops growing: all layers windowed). */
static int64_t search_max(const lp_arch *arch, const lp_est_report *rep, bool vary_seq)
{
    int64_t lo = 1, hi = FIT_SEARCH_MAX;
#define FITS(x) fits(arch, rep, vary_seq ? rep->batch : (x), vary_seq ? (x) : rep->seq)
    if (!FITS(lo))
        return 0;
    if (FITS(hi))
        return -1;
    while (hi - lo > 1) { /* invariant: lo fits, hi does not */
        int64_t mid = lo + (hi - lo) / 2;
        if (FITS(mid))
            lo = mid;
        else
            hi = mid;
    }
#undef FITS
    return lo;
}

static void describe_kinds(const lp_arch *arch, lp_est_report *rep)
{
    rep->n_kinds = 0;
    for (int64_t l = 0; l < rep->params.n_layers; l++) {
        const lp_est_layer *layer = &rep->params.layers[l];
        int k;
        for (k = 0; k < rep->n_kinds; k++) {
            const lp_est_layer *first = &rep->params.layers[rep->kinds[k].first_layer];
            if (first->moe == layer->moe && first->window == layer->window &&
                first->kv_heads == layer->kv_heads && first->params == layer->params &&
                first->active_params == layer->active_params)
                break;
        }
        if (k == rep->n_kinds) {
            if (rep->n_kinds == LP_EST_MAX_LAYER_KINDS) {
                k = LP_EST_MAX_LAYER_KINDS - 1; /* merged: the label says "and others" */
                snprintf(rep->kinds[k].label, sizeof rep->kinds[k].label, "other layers");
            } else {
                lp_est_layer_kind *kind = &rep->kinds[rep->n_kinds++];
                *kind = (lp_est_layer_kind){.first_layer = l, .params_per_layer = layer->params,
                                            .active_per_layer = layer->active_params,
                                            .kv_bytes_per_token = layer->kv_bytes_per_token,
                                            .window = layer->window};
                char attn[40], ffn[64];
                if (layer->window > 0)
                    snprintf(attn, sizeof attn, "sliding window %lld", (long long)layer->window);
                else
                    snprintf(attn, sizeof attn, "full attention");
                if (layer->moe)
                    snprintf(ffn, sizeof ffn, "MoE %lld experts, top-%lld",
                             (long long)arch->n_experts, (long long)arch->n_experts_per_tok);
                else
                    snprintf(ffn, sizeof ffn, "dense FFN %lld",
                             (long long)lp_est_layer_ffn_hidden(arch, l));
                if (arch->mla)
                    snprintf(kind->label, sizeof kind->label, "%s (MLA latent), %s", attn, ffn);
                else
                    snprintf(kind->label, sizeof kind->label, "%s, %lld kv heads, %s", attn,
                             (long long)layer->kv_heads, ffn);
                k = rep->n_kinds - 1;
                rep->kinds[k].n_layers = 0;
            }
        }
        rep->kinds[k].n_layers++;
    }
}

/* The settings actually used: the options, their defaults filled in. */
static void resolve_settings(const lp_arch *arch, const lp_est_options *opts, lp_est_report *rep)
{
    rep->batch = opts->batch > 0 ? opts->batch : 1;
    rep->batch_defaulted = opts->batch <= 0;
    rep->seq = opts->seq > 0 ? opts->seq : (arch->n_ctx > 0 ? arch->n_ctx : DEFAULT_SEQ);
    rep->seq_defaulted = opts->seq <= 0;
    rep->context = opts->context > 0 ? opts->context : rep->seq;
    rep->prefill_chunk = opts->prefill_chunk > 0 ? opts->prefill_chunk : DEFAULT_PREFILL_CHUNK;
    if (opts->n_weight_dtypes > 0) {
        rep->n_weight_dtypes = opts->n_weight_dtypes < LP_EST_MAX_DTYPES ? opts->n_weight_dtypes
                                                                         : LP_EST_MAX_DTYPES;
        memcpy(rep->weight_dtypes, opts->weight_dtypes,
               (size_t)rep->n_weight_dtypes * sizeof rep->weight_dtypes[0]);
    } else {
        rep->weight_dtype_defaulted = true;
        rep->n_weight_dtypes = 1;
        if (arch->storage_dtype == LP_DTYPE_INVALID ||
            !lp_est_dtype_parse(lp_dtype_name(arch->storage_dtype), &rep->weight_dtypes[0]))
            lp_est_dtype_parse("bf16", &rep->weight_dtypes[0]);
    }
    const lp_est_dtype *w0 = &rep->weight_dtypes[0];
    bool w0_float = !w0->is_block && w0->vector_bytes == 0 &&
                    lp_dtype_get(lp_dtype_from_name(w0->name))->is_float;
    if (opts->kv_dtype_set) {
        rep->kv_dtype = opts->kv_dtype;
    } else {
        rep->kv_dtype_defaulted = true;
        rep->kv_dtype = *w0;
        if (!w0_float) /* quantized weights: engines keep the cache in f16 by default */
            lp_est_dtype_parse("f16", &rep->kv_dtype);
    }
    lp_est_dtype_parse(w0_float && w0->block_bytes >= 4 ? "f32" : "bf16", &rep->act_dtype);
    rep->stored_weight_bytes = opts->stored_weight_bytes;
    rep->stored_params = opts->stored_params;
    rep->hw = opts->hw;
    rep->hw_set = opts->hw_set;
    rep->limits = opts->limits;
}

/* Weights at every dtype, the KV cache layer by layer, activations and the total. */
static lp_status fill_memory(const lp_arch *arch, lp_est_report *rep, lp_error *err)
{
    const char *src = arch->source[0] ? arch->source : "config";
    for (int d = 0; d < rep->n_weight_dtypes; d++) {
        lp_status st = lp_est_weight_bytes(arch, &rep->weight_dtypes[d], &rep->weight_bytes[d],
                                           d == 0 ? &rep->weight_bytes_experts : NULL, err);
        if (st != LP_OK)
            return st;
    }
    for (int64_t l = 0; l < rep->params.n_layers; l++) {
        lp_est_layer *layer = &rep->params.layers[l];
        uint64_t tokens = (uint64_t)(layer->window > 0 && layer->window < rep->seq ? layer->window
                                                                                  : rep->seq);
        if (!lp_est_layer_kv_bytes_per_token(arch, l, &rep->kv_dtype, &layer->kv_bytes_per_token) ||
            !lp_add_u64(rep->kv.bytes_per_token, layer->kv_bytes_per_token,
                        &rep->kv.bytes_per_token) ||
            !lp_mul_u64(layer->kv_bytes_per_token, tokens, &layer->kv_bytes) ||
            !lp_mul_u64(layer->kv_bytes, (uint64_t)rep->batch, &layer->kv_bytes) ||
            !lp_add_u64(rep->kv.bytes, layer->kv_bytes, &rep->kv.bytes))
            return lp_error_set(err, LP_ERR_RANGE,
                                "%s: KV cache for --batch %lld x --seq %lld overflows 64 bits",
                                src, (long long)rep->batch, (long long)rep->seq);
        layer->kv_tokens = tokens;
        if (layer->window == 0)
            rep->kv.bytes_per_token_full_layers += layer->kv_bytes_per_token;
    }
    if (!activation_bytes(arch, rep, rep->batch, rep->seq, &rep->activation_bytes) ||
        !lp_add_u64(rep->weight_bytes[0], rep->kv.bytes, &rep->total_bytes) ||
        !lp_add_u64(rep->total_bytes, rep->activation_bytes, &rep->total_bytes))
        return lp_error_set(err, LP_ERR_RANGE,
                            "%s: memory for --batch %lld x --seq %lld overflows 64 bits", src,
                            (long long)rep->batch, (long long)rep->seq);
    return LP_OK;
}

lp_status lp_estimate(const lp_arch *arch, const lp_est_options *opts, lp_est_report *rep,
                      lp_error *err)
{
    memset(rep, 0, sizeof *rep);
    if (opts->strict && arch->assumed_family[0])
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: model_type '%s' is not one loupe knows; --strict refuses to "
                            "count it with %s's rules",
                            arch->source[0] ? arch->source : "config", arch->family,
                            arch->assumed_family);
    resolve_settings(arch, opts, rep);
    lp_status st = lp_est_count_params(arch, &rep->params, err);
    if (st == LP_OK)
        st = fill_memory(arch, rep, err);
    if (st != LP_OK)
        return st;
    describe_kinds(arch, rep);
    lp_est_compute_flops(arch, rep);
    if (rep->limits.budget > 0) {
        rep->fit_max_seq = search_max(arch, rep, true);
        rep->fit_max_batch = search_max(arch, rep, false);
    }
    rep->gate_memory_exceeded = rep->limits.max_memory > 0 && rep->total_bytes > rep->limits.max_memory;
    rep->gate_kv_exceeded = rep->limits.max_kv > 0 && rep->kv.bytes > rep->limits.max_kv;
    st = lp_est_deploy_compute(arch, opts, rep, err); /* per device, and the gates with it */
    if (st == LP_OK && rep->deploy.present)
        lp_est_deploy_times(arch, rep); /* times read the placement; placement needs no times */
    if (st != LP_OK)
        return st;
    lp_est_rope_report(arch, &rep->rope);
    lp_est_audit(arch, opts, rep);
    return LP_OK;
}

lp_status lp_est_predict_times(const lp_arch *arch, const lp_est_dtype *weight_dtype,
                               int64_t tokens, bool logits_last_only, const lp_est_hw *hw,
                               lp_est_times *out, lp_error *err)
{
    memset(out, 0, sizeof *out);
    if (tokens <= 0 || !hw || !(hw->flops_per_s > 0) || !(hw->bytes_per_s > 0))
        return lp_error_set(err, LP_ERR_USAGE,
                            "lp_est_predict_times: want tokens > 0 and positive peaks (got %lld)",
                            (long long)tokens);
    lp_est_options opts;
    lp_est_options_init(&opts);
    opts.seq = tokens;
    opts.batch = 1;
    if (weight_dtype) {
        opts.weight_dtypes[0] = *weight_dtype;
        opts.n_weight_dtypes = 1;
    }
    opts.hw = *hw;
    opts.hw_set = true;
    lp_est_report *rep = malloc(sizeof *rep); /* large: per-layer tables */
    if (!rep)
        return lp_error_set(err, LP_ERR_NOMEM, "lp_est_predict_times: out of memory");
    lp_status st = lp_estimate(arch, &opts, rep, err);
    if (st == LP_OK) {
        const lp_est_flops *f = &rep->flops;
        /* the prefill's head for the last position only: (tokens - 1) positions fewer */
        double skipped = logits_last_only ? (double)(tokens - 1) * f->decode_lm_head : 0.0;
        out->prefill_flops = f->prefill - skipped;
        out->prefill_bytes = f->prefill_bytes;
        out->decode_flops = f->decode_per_token;
        out->decode_bytes = f->decode_bytes;
        double compute = out->prefill_flops / hw->flops_per_s;
        double memory = out->prefill_bytes / hw->bytes_per_s;
        out->prefill_compute_bound = compute >= memory;
        out->prefill_seconds = compute >= memory ? compute : memory;
        compute = out->decode_flops / hw->flops_per_s;
        memory = out->decode_bytes / hw->bytes_per_s;
        out->decode_compute_bound = compute >= memory;
        out->decode_seconds = compute >= memory ? compute : memory;
    }
    free(rep);
    return st;
}
