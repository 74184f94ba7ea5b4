/* Printing an estimate: the aligned human tables, the side-by-side view and the --json document. */
#include "estimate/estimate.h"

#include <math.h>
#include <string.h>

#include "core/text.h"
#include "core/mapfile.h"
#include "estimate/estimate_internal.h"

/* ---- small formatters -------------------------------------------------------------------- */

static const char *fmt_int(int64_t v, char *buf) { return lp_format_int(v, buf, 48); }
static const char *fmt_bytes(uint64_t v, char *buf) { return lp_format_bytes(v, buf, 48); }
static const char *fmt_flops(double v, char *buf) { return lp_format_flops(v, buf, 48); }


static const char *fmt_window(int64_t window, char *buf)
{
    if (window > 0)
        snprintf(buf, 48, "%lld", (long long)window);
    else
        snprintf(buf, 48, "full");
    return buf;
}

static const char *fmt_fit(int64_t v, char *buf)
{
    if (v < 0)
        snprintf(buf, 48, "unbounded (memory stops growing)");
    else if (v == 0)
        snprintf(buf, 48, "none (does not fit even at 1)");
    else
        lp_format_int(v, buf, 48);
    return buf;
}

const char *lp_est_model_name(const lp_arch *arch)
{
    if (arch->name[0])
        return arch->name;
    return arch->source[0] ? lp_path_basename(arch->source) : "model";
}

/* ---- text -------------------------------------------------------------------------------- */

static void print_defaults(FILE *out, const lp_arch *arch, const lp_est_report *rep)
{
    char list[200] = "";
    size_t n = 0;
    if (rep->batch_defaulted)
        n += (size_t)snprintf(list + n, sizeof list - n, "%sbatch 1", n ? ", " : "");
    if (rep->seq_defaulted && n < sizeof list)
        n += (size_t)snprintf(list + n, sizeof list - n, "%sseq = %s", n ? ", " : "",
                              arch->n_ctx > 0 ? "trained context" : "4096 (no context in config)");
    if (rep->weight_dtype_defaulted && n < sizeof list)
        n += (size_t)snprintf(list + n, sizeof list - n, "%sweights = %s", n ? ", " : "",
                              arch->storage_dtype != LP_DTYPE_INVALID ? "config dtype"
                                                                      : "bf16 (config names none)");
    if (rep->kv_dtype_defaulted && n < sizeof list)
        n += (size_t)snprintf(list + n, sizeof list - n, "%sKV = %s", n ? ", " : "",
                              strcmp(rep->kv_dtype.name, rep->weight_dtypes[0].name) == 0
                                  ? "weight dtype"
                                  : "f16 (weights quantized)");
    if (n)
        fprintf(out, "  %-14s %s\n", "defaults used", list);
}

static void print_params(FILE *out, const lp_est_report *rep)
{
    char a[48], b[48];
    const lp_est_params *p = &rep->params;
    fprintf(out, "\n%-30s %20s %20s\n", "parameters", "total", "active per token");
    for (int c = 0; c < LP_EST_COMPONENT_COUNT; c++) {
        if (p->by_component[c] == 0)
            continue;
        fprintf(out, "  %-28s %20s %20s\n", lp_est_component_name((lp_est_component)c),
                fmt_int(p->by_component[c], a), fmt_int(p->active_by_component[c], b));
    }
    fprintf(out, "  %-28s %20s %20s\n", "total", fmt_int(p->total, a), fmt_int(p->active, b));
    if (p->mtp > 0)
        fprintf(out, "  %-28s %20s\n", "MTP modules (not in total)", fmt_int(p->mtp, a));

    fprintf(out, "\n%-58s %-12s %16s %16s %12s\n", "layer kinds", "layers", "params/layer",
            "active/layer", "KV B/token");
    for (int k = 0; k < rep->n_kinds; k++) {
        const lp_est_layer_kind *kind = &rep->kinds[k];
        char first[24];
        snprintf(first, sizeof first, "from %lld", (long long)kind->first_layer);
        fprintf(out, "  %-56s %3lld %-8s %16s %16s %12llu\n", kind->label,
                (long long)kind->n_layers, first, fmt_int(kind->params_per_layer, a),
                fmt_int(kind->active_per_layer, b),
                (unsigned long long)kind->kv_bytes_per_token);
    }
}

static void print_memory(FILE *out, const lp_est_report *rep)
{
    char a[48], b[48], label[96];
    fprintf(out, "\nmemory\n");
    for (int d = 0; d < rep->n_weight_dtypes; d++) {
        snprintf(label, sizeof label, "weights %s (%.4g bits/weight)", rep->weight_dtypes[d].name,
                 lp_est_dtype_bits(&rep->weight_dtypes[d]));
        fprintf(out, "  %-44s %12s %24s B\n", label, fmt_bytes(rep->weight_bytes[d], a),
                fmt_int((int64_t)rep->weight_bytes[d], b));
    }
    if (rep->stored_weight_bytes > 0) {
        snprintf(label, sizeof label, "weights as stored (%s tensor values)",
                 fmt_int(rep->stored_params, a));
        fprintf(out, "  %-44s %12s %24s B\n", label, fmt_bytes(rep->stored_weight_bytes, a),
                fmt_int((int64_t)rep->stored_weight_bytes, b));
    }
    snprintf(label, sizeof label, "KV cache %s per token, all layers", rep->kv_dtype.name);
    fprintf(out, "  %-44s %12s %24s B\n", label, fmt_bytes(rep->kv.bytes_per_token, a),
            fmt_int((int64_t)rep->kv.bytes_per_token, b));
    if (rep->kv.bytes_per_token_full_layers != rep->kv.bytes_per_token)
        fprintf(out, "  %-44s %12s %24s B\n", "KV per token beyond the windows",
                fmt_bytes(rep->kv.bytes_per_token_full_layers, a),
                fmt_int((int64_t)rep->kv.bytes_per_token_full_layers, b));
    snprintf(label, sizeof label, "KV cache, batch %lld x seq %lld", (long long)rep->batch,
             (long long)rep->seq);
    fprintf(out, "  %-44s %12s %24s B\n", label, fmt_bytes(rep->kv.bytes, a),
            fmt_int((int64_t)rep->kv.bytes, b));
    snprintf(label, sizeof label, "activations (%lld tokens live, %s)",
             (long long)(rep->batch * rep->seq < rep->prefill_chunk ? rep->batch * rep->seq
                                                                    : rep->prefill_chunk),
             rep->act_dtype.name);
    fprintf(out, "  %-44s %12s %24s B\n", label, fmt_bytes(rep->activation_bytes, a),
            fmt_int((int64_t)rep->activation_bytes, b));
    snprintf(label, sizeof label, "total (weights %s + KV + activations)",
             rep->weight_dtypes[0].name);
    fprintf(out, "  %-44s %12s %24s B\n", label, fmt_bytes(rep->total_bytes, a),
            fmt_int((int64_t)rep->total_bytes, b));
}

static void print_prefill_flops(FILE *out, const lp_arch *arch, const lp_est_report *rep)
{
    const lp_est_flops *f = &rep->flops;
    char a[48], b[48], label[96];
    snprintf(label, sizeof label, "flops: prefill, batch %lld x %lld tokens",
             (long long)rep->batch, (long long)rep->seq);
    fprintf(out, "\n%-46s %14s %14s\n", label, arch->encoder_only ? "both ways" : "causal",
            "dense attn");
    fprintf(out, "  %-44s %14s %14s\n", "attention projections", fmt_flops(f->prefill_attn_proj, a),
            fmt_flops(f->prefill_attn_proj, b));
    fprintf(out, "  %-44s %14s %14s\n", "attention scores + weighted sum",
            fmt_flops(f->prefill_attn_scores_causal, a),
            fmt_flops(f->prefill_attn_scores_dense, b));
    fprintf(out, "  %-44s %14s %14s\n", "FFN / active experts + router",
            fmt_flops(f->prefill_ffn, a), fmt_flops(f->prefill_ffn, b));
    fprintf(out, "  %-44s %14s %14s\n", "lm_head (every position)",
            fmt_flops(f->prefill_lm_head, a), fmt_flops(f->prefill_lm_head, b));
    fprintf(out, "  %-44s %14s %14s\n", "total", fmt_flops(f->prefill, a),
            fmt_flops(f->prefill_dense, b));
    fprintf(out, "  %-44s %14s\n", "training step (forward + backward = 3x)",
            fmt_flops(f->training, a));
}

static void print_decode_flops(FILE *out, const lp_arch *arch, const lp_est_report *rep)
{
    const lp_est_flops *f = &rep->flops;
    char a[48], label[96];
    if (arch->encoder_only) {
        fprintf(out, "flops: decode: none (an encoder generates nothing)\n");
        return;
    }
    snprintf(label, sizeof label, "flops: decode, 1 token at context %lld",
             (long long)rep->context);
    fprintf(out, "%-46s %14s\n", label, "per token");
    fprintf(out, "  %-44s %14s\n", "attention projections", fmt_flops(f->decode_attn_proj, a));
    fprintf(out, "  %-44s %14s\n", "attention scores + weighted sum",
            fmt_flops(f->decode_attn_scores, a));
    fprintf(out, "  %-44s %14s\n", "FFN / active experts + router", fmt_flops(f->decode_ffn, a));
    fprintf(out, "  %-44s %14s\n", "lm_head", fmt_flops(f->decode_lm_head, a));
    fprintf(out, "  %-44s %14s\n", "total", fmt_flops(f->decode_per_token, a));
}

static void print_roofline(FILE *out, const lp_arch *arch, const lp_est_report *rep)
{
    const lp_est_flops *f = &rep->flops;
    char a[48], b[48], label[96];
    fprintf(out, "arithmetic intensity\n");
    fprintf(out, "  %-44s %9.1f FLOP/B  (%s over %s)\n", "prefill", f->prefill_intensity,
            fmt_flops(f->prefill, a), fmt_bytes((uint64_t)f->prefill_bytes, b));
    snprintf(label, sizeof label, "decode step, batch %lld", (long long)rep->batch);
    if (!arch->encoder_only)
        fprintf(out, "  %-44s %9.1f FLOP/B  (%s over %s)\n", label, f->decode_intensity,
                fmt_flops((double)rep->batch * f->decode_per_token, a),
                fmt_bytes((uint64_t)f->decode_bytes, b));
    if (!rep->hw_set)
        return;
    fprintf(out, "roofline on %s (%s)\n", rep->hw.name, rep->hw.label);
    fprintf(out, "  %-44s %14s  %s-bound\n", "prefill",
            lp_est_format_seconds(f->prefill_seconds, a),
            f->prefill_compute_bound ? "compute" : "memory");
    if (!arch->encoder_only)
        fprintf(out, "  %-44s %14s  %s-bound, at most %.0f tokens/s\n", label,
                lp_est_format_seconds(f->decode_seconds, a),
                f->decode_compute_bound ? "compute" : "memory",
                f->decode_seconds > 0 ? (double)rep->batch / f->decode_seconds : 0.0);
}

static void print_rope(FILE *out, const lp_arch *arch, const lp_est_report *rep, bool table)
{
    const lp_est_rope *r = &rep->rope;
    if (!r->present)
        return;
    fprintf(out, "\nrope: %lld rotary dims (%lld pairs), theta %g, trained context %lld\n",
            (long long)r->rope_dim, (long long)r->rope_dim / 2, r->theta,
            (long long)r->trained_ctx);
    fprintf(out, "  %lld of %lld pairs have a wavelength > %lld tokens: they never complete a "
                 "rotation within the trained context\n",
            (long long)r->pairs_no_rotation, (long long)r->n_pairs, (long long)r->trained_ctx);
    if (arch->rope_scaling.kind != LP_ROPE_SCALING_NONE) {
        if (r->scaling_modelled)
            fprintf(out, "  %s scaling x%g changes %lld pairs; at %lld tokens %lld pairs never "
                         "complete a rotation\n",
                    lp_est_scaling_name(arch->rope_scaling.kind), arch->rope_scaling.factor,
                    (long long)r->pairs_changed, (long long)r->target_ctx,
                    (long long)r->pairs_no_rotation_scaled);
        else
            fprintf(out, "  %s scaling: per-dimension factors, not modelled\n",
                    lp_est_scaling_name(arch->rope_scaling.kind));
    }
    if (arch->rope_local_theta > 0 && arch->rope_local_theta != r->theta)
        fprintf(out, "  sliding-window layers use theta %g without scaling\n",
                arch->rope_local_theta);
    if (!table)
        return;
    fprintf(out, "  %6s %18s %18s %14s\n", "pair", "wavelength", "scaled wavelength",
            "turns in ctx");
    for (int64_t i = 0; i < r->n_stored; i++)
        fprintf(out, "  %6lld %18.1f %18.1f %14.3f\n", (long long)i, r->freqs[i].wavelength,
                r->freqs[i].scaled_wavelength, (double)r->trained_ctx / r->freqs[i].wavelength);
}

static void print_per_layer(FILE *out, const lp_est_report *rep)
{
    char a[48], b[48], c[48], w[48];
    fprintf(out, "\nper layer\n  %5s %10s %8s %5s %16s %16s %12s %12s %14s\n", "layer", "ffn",
            "window", "kv_h", "params", "active", "KV B/token", "KV tokens", "KV bytes");
    for (int64_t l = 0; l < rep->params.n_layers; l++) {
        const lp_est_layer *layer = &rep->params.layers[l];
        fprintf(out, "  %5lld %10s %8s %5lld %16s %16s %12llu %12llu %14s\n", (long long)l,
                layer->moe ? "moe" : "dense", fmt_window(layer->window, w),
                (long long)layer->kv_heads, fmt_int(layer->params, a),
                fmt_int(layer->active_params, b), (unsigned long long)layer->kv_bytes_per_token,
                (unsigned long long)layer->kv_tokens, fmt_bytes(layer->kv_bytes, c));
    }
}

/* The gates: on the whole model, or with a device view on the busiest device. */
static void print_gates(FILE *out, const lp_est_report *rep)
{
    char a[48], b[48];
    if (rep->limits.max_memory == 0 && rep->limits.max_kv == 0)
        return;
    uint64_t total = rep->total_bytes, kv = rep->kv.bytes;
    const char *where = "";
    if (rep->deploy.present) {
        total = kv = 0;
        for (int i = 0; i < rep->deploy.n_devices; i++) {
            const lp_est_device *dev = &rep->deploy.device[i];
            total = dev->total_bytes > total ? dev->total_bytes : total;
            kv = dev->kv_cache_bytes > kv ? dev->kv_cache_bytes : kv;
        }
        where = " on the busiest device";
    }
    fprintf(out, "\ngate\n");
    if (rep->limits.max_memory > 0)
        fprintf(out, "  %-44s %s: total %s%s vs limit %s\n", "--max-memory",
                rep->gate_memory_exceeded ? "EXCEEDED" : "ok", fmt_bytes(total, a), where,
                fmt_bytes(rep->limits.max_memory, b));
    if (rep->limits.max_kv > 0)
        fprintf(out, "  %-44s %s: KV cache %s%s vs limit %s\n", "--max-kv",
                rep->gate_kv_exceeded ? "EXCEEDED" : "ok", fmt_bytes(kv, a), where,
                fmt_bytes(rep->limits.max_kv, b));
}

void lp_est_print_text(FILE *out, const lp_arch *arch, const lp_est_report *rep, int flags)
{
    char a[48], b[48];
    fprintf(out, "%s  (%s, from %s)\n", lp_est_model_name(arch),
            arch->family[0] ? arch->family : "?", arch->source[0] ? arch->source : "?");
    fprintf(out, "  %-14s batch %lld, seq %lld, decode context %lld, weights %s, KV cache %s\n",
            "settings", (long long)rep->batch, (long long)rep->seq, (long long)rep->context,
            rep->weight_dtypes[0].name, rep->kv_dtype.name);
    if (arch->assumed_family[0])
        fprintf(out, "  %-14s %s's rules: model_type '%s' is not one loupe knows (see warnings)\n",
                "ASSUMED", arch->assumed_family, arch->family);
    if (arch->encoder_only)
        fprintf(out, "  %-14s bidirectional encoder: no KV cache, no LM head, no decode step\n",
                "encoder");
    print_defaults(out, arch, rep);
    print_params(out, rep);
    print_memory(out, rep);
    print_prefill_flops(out, arch, rep);
    print_decode_flops(out, arch, rep);
    print_roofline(out, arch, rep);
    if (rep->limits.budget > 0) {
        fprintf(out, "\nfit in %s (weights + KV + activations)\n", fmt_bytes(rep->limits.budget, a));
        snprintf(b, sizeof b, "largest seq at batch %lld", (long long)rep->batch);
        fprintf(out, "  %-44s %s", b, fmt_fit(rep->fit_max_seq, a));
        if (rep->fit_max_seq > 0 && arch->n_ctx > 0 && rep->fit_max_seq > arch->n_ctx)
            fprintf(out, " (beyond the trained context %lld)", (long long)arch->n_ctx);
        fputc('\n', out);
        snprintf(b, sizeof b, "largest batch at seq %lld", (long long)rep->seq);
        fprintf(out, "  %-44s %s\n", b, fmt_fit(rep->fit_max_batch, a));
    }
    lp_est_print_deploy(out, arch, rep);
    print_rope(out, arch, rep, (flags & LP_EST_PRINT_ROPE) != 0);
    if (flags & LP_EST_PRINT_PER_LAYER)
        print_per_layer(out, rep);
    if (rep->n_warnings > 0) {
        fprintf(out, "\nwarnings\n");
        for (int i = 0; i < rep->n_warnings; i++)
            fprintf(out, "  [%s] %s\n", rep->warnings[i].code, rep->warnings[i].msg);
    }
    print_gates(out, rep);
}

void lp_est_print_side_by_side(FILE *out, const lp_arch *const *archs,
                               const lp_est_report *const *reps, int n)
{
    char buf[48];
    fprintf(out, "%-30s", "");
    for (int i = 0; i < n; i++) {
        char name[24];
        snprintf(name, sizeof name, "%.22s", lp_est_model_name(archs[i]));
        fprintf(out, " %22s", name);
    }
    fputc('\n', out);
#define ROW(label, expr)                                   \
    do {                                                   \
        fprintf(out, "%-30s", label);                      \
        for (int i = 0; i < n; i++) {                      \
            const lp_est_report *rep = reps[i];            \
            (void)rep;                                     \
            fprintf(out, " %22s", expr);                   \
        }                                                  \
        fputc('\n', out);                                  \
    } while (0)
    ROW("params total", fmt_int(rep->params.total, buf));
    ROW("params active", fmt_int(rep->params.active, buf));
    ROW("weight dtype", rep->weight_dtypes[0].name);
    ROW("weights", fmt_bytes(rep->weight_bytes[0], buf));
    ROW("batch", fmt_int(rep->batch, buf));
    ROW("seq", fmt_int(rep->seq, buf));
    ROW("KV dtype", rep->kv_dtype.name);
    ROW("KV per token", fmt_bytes(rep->kv.bytes_per_token, buf));
    ROW("KV cache", fmt_bytes(rep->kv.bytes, buf));
    ROW("total memory", fmt_bytes(rep->total_bytes, buf));
    ROW("prefill FLOPs (causal)", fmt_flops(rep->flops.prefill, buf));
    ROW("decode FLOPs/token", fmt_flops(rep->flops.decode_per_token, buf));
    ROW("training FLOPs", fmt_flops(rep->flops.training, buf));
    if (reps[0]->hw_set) {
        ROW("prefill time bound", lp_est_format_seconds(rep->flops.prefill_seconds, buf));
        ROW("decode step time bound", lp_est_format_seconds(rep->flops.decode_seconds, buf));
    }
    if (reps[0]->limits.budget > 0) {
        ROW("max seq in budget",
            rep->fit_max_seq < 0 ? "unbounded" : fmt_int(rep->fit_max_seq, buf));
        ROW("max batch in budget",
            rep->fit_max_batch < 0 ? "unbounded" : fmt_int(rep->fit_max_batch, buf));
    }
    ROW("warnings", fmt_int(rep->n_warnings, buf));
#undef ROW
    for (int i = 0; i < n; i++)
        for (int w = 0; w < reps[i]->n_warnings; w++)
            fprintf(out, "  %s: [%s] %s\n", lp_est_model_name(archs[i]), reps[i]->warnings[w].code,
                    reps[i]->warnings[w].msg);
}
