/* The --json document of an estimate, one function per top-level key. */
#include "estimate/estimate.h"

#include "estimate/estimate_internal.h"

#define put lp_est_json_put
#define append lp_est_json_append
#define ju64 lp_est_json_u64

static json_t *jfit(int64_t v) { return v < 0 ? json_string("unbounded") : json_integer(v); }

static json_t *settings_json(const lp_est_report *rep, bool *ok)
{
    json_t *set = json_object();
    put(set, "batch", json_integer(rep->batch), ok);
    put(set, "seq", json_integer(rep->seq), ok);
    put(set, "context", json_integer(rep->context), ok);
    put(set, "weight_dtype", json_string(rep->weight_dtypes[0].name), ok);
    put(set, "kv_dtype", json_string(rep->kv_dtype.name), ok);
    put(set, "activation_dtype", json_string(rep->act_dtype.name), ok);
    put(set, "prefill_chunk", json_integer(rep->prefill_chunk), ok);
    json_t *defaults = json_array();
    if (rep->batch_defaulted)
        append(defaults, json_string("batch"), ok);
    if (rep->seq_defaulted)
        append(defaults, json_string("seq"), ok);
    if (rep->weight_dtype_defaulted)
        append(defaults, json_string("weight_dtype"), ok);
    if (rep->kv_dtype_defaulted)
        append(defaults, json_string("kv_dtype"), ok);
    put(set, "defaulted", defaults, ok);
    return set;
}

static json_t *params_json(const lp_est_report *rep, bool *ok)
{
    const lp_est_params *p = &rep->params;
    json_t *params = json_object();
    put(params, "total", json_integer(p->total), ok);
    put(params, "active", json_integer(p->active), ok);
    json_t *by = json_object(), *aby = json_object();
    for (int c = 0; c < LP_EST_COMPONENT_COUNT; c++) {
        const char *name = lp_est_component_name((lp_est_component)c);
        put(by, name, json_integer(p->by_component[c]), ok);
        put(aby, name, json_integer(p->active_by_component[c]), ok);
    }
    put(params, "by_component", by, ok);
    put(params, "active_by_component", aby, ok);
    put(params, "mtp_not_in_total", json_integer(p->mtp), ok);
    json_t *kinds = json_array();
    for (int k = 0; k < rep->n_kinds; k++) {
        const lp_est_layer_kind *lk = &rep->kinds[k];
        json_t *kind = json_object();
        put(kind, "label", json_string(lk->label), ok);
        put(kind, "n_layers", json_integer(lk->n_layers), ok);
        put(kind, "first_layer", json_integer(lk->first_layer), ok);
        put(kind, "params_per_layer", json_integer(lk->params_per_layer), ok);
        put(kind, "active_per_layer", json_integer(lk->active_per_layer), ok);
        put(kind, "window", json_integer(lk->window), ok);
        put(kind, "kv_bytes_per_token", ju64(lk->kv_bytes_per_token), ok);
        append(kinds, kind, ok);
    }
    put(params, "by_layer_kind", kinds, ok);
    return params;
}

static json_t *memory_json(const lp_est_report *rep, bool *ok)
{
    json_t *mem = json_object();
    put(mem, "weights_bytes", ju64(rep->weight_bytes[0]), ok);
    json_t *wlist = json_array();
    for (int d = 0; d < rep->n_weight_dtypes; d++) {
        json_t *w = json_object();
        put(w, "name", json_string(rep->weight_dtypes[d].name), ok);
        put(w, "bits_per_weight", json_real(lp_est_dtype_bits(&rep->weight_dtypes[d])), ok);
        put(w, "bytes", ju64(rep->weight_bytes[d]), ok);
        append(wlist, w, ok);
    }
    put(mem, "weights", wlist, ok);
    put(mem, "stored_weights_bytes",
        rep->stored_weight_bytes ? ju64(rep->stored_weight_bytes) : json_null(), ok);
    put(mem, "stored_tensor_values",
        rep->stored_params ? json_integer(rep->stored_params) : json_null(), ok);
    put(mem, "activations_bytes", ju64(rep->activation_bytes), ok);
    put(mem, "kv_cache_bytes", ju64(rep->kv.bytes), ok);
    put(mem, "total_bytes", ju64(rep->total_bytes), ok);
    return mem;
}

static json_t *kv_json(const lp_est_report *rep, int flags, bool *ok)
{
    json_t *kv = json_object();
    put(kv, "dtype", json_string(rep->kv_dtype.name), ok);
    put(kv, "bytes_per_token", ju64(rep->kv.bytes_per_token), ok);
    put(kv, "bytes_per_token_full_layers", ju64(rep->kv.bytes_per_token_full_layers), ok);
    put(kv, "bytes", ju64(rep->kv.bytes), ok);
    put(kv, "batch", json_integer(rep->batch), ok);
    put(kv, "seq", json_integer(rep->seq), ok);
    if (!(flags & LP_EST_PRINT_PER_LAYER))
        return kv;
    json_t *layers = json_array();
    for (int64_t l = 0; l < rep->params.n_layers; l++) {
        const lp_est_layer *layer = &rep->params.layers[l];
        json_t *o = json_object();
        put(o, "layer", json_integer(l), ok);
        put(o, "moe", json_boolean(layer->moe), ok);
        put(o, "window", json_integer(layer->window), ok);
        put(o, "kv_heads", json_integer(layer->kv_heads), ok);
        put(o, "params", json_integer(layer->params), ok);
        put(o, "active_params", json_integer(layer->active_params), ok);
        put(o, "kv_values_per_token", json_integer(layer->kv_values_per_token), ok);
        put(o, "kv_bytes_per_token", ju64(layer->kv_bytes_per_token), ok);
        put(o, "kv_tokens", ju64(layer->kv_tokens), ok);
        put(o, "kv_bytes", ju64(layer->kv_bytes), ok);
        append(layers, o, ok);
    }
    put(kv, "per_layer", layers, ok);
    return kv;
}

static json_t *flops_json(const lp_est_flops *f, bool *ok)
{
    json_t *fl = json_object();
    put(fl, "prefill", json_real(f->prefill), ok);
    put(fl, "prefill_dense_attention", json_real(f->prefill_dense), ok);
    put(fl, "decode_per_token", json_real(f->decode_per_token), ok);
    put(fl, "training", json_real(f->training), ok);
    json_t *pb = json_object();
    put(pb, "attention_projections", json_real(f->prefill_attn_proj), ok);
    put(pb, "attention_scores_causal", json_real(f->prefill_attn_scores_causal), ok);
    put(pb, "attention_scores_dense", json_real(f->prefill_attn_scores_dense), ok);
    put(pb, "ffn", json_real(f->prefill_ffn), ok);
    put(pb, "lm_head", json_real(f->prefill_lm_head), ok);
    put(fl, "prefill_breakdown", pb, ok);
    json_t *db = json_object();
    put(db, "attention_projections", json_real(f->decode_attn_proj), ok);
    put(db, "attention_scores", json_real(f->decode_attn_scores), ok);
    put(db, "ffn", json_real(f->decode_ffn), ok);
    put(db, "lm_head", json_real(f->decode_lm_head), ok);
    put(fl, "decode_breakdown", db, ok);
    json_t *ai = json_object();
    put(ai, "prefill", json_real(f->prefill_intensity), ok);
    put(ai, "decode", json_real(f->decode_intensity), ok);
    put(ai, "prefill_bytes", json_real(f->prefill_bytes), ok);
    put(ai, "decode_step_bytes", json_real(f->decode_bytes), ok);
    put(fl, "intensity", ai, ok);
    return fl;
}

static json_t *roofline_json(const lp_est_report *rep, bool *ok)
{
    if (!rep->hw_set)
        return json_null();
    const lp_est_flops *f = &rep->flops;
    json_t *rl = json_object();
    put(rl, "hw", json_string(rep->hw.name), ok);
    put(rl, "source", json_string(rep->hw.label), ok);
    put(rl, "flops_per_s", json_real(rep->hw.flops_per_s), ok);
    put(rl, "bytes_per_s", json_real(rep->hw.bytes_per_s), ok);
    put(rl, "memory_bytes", rep->hw.memory_bytes ? ju64(rep->hw.memory_bytes) : json_null(), ok);
    put(rl, "prefill_seconds", json_real(f->prefill_seconds), ok);
    put(rl, "prefill_bound", json_string(f->prefill_compute_bound ? "compute" : "memory"), ok);
    put(rl, "decode_step_seconds", json_real(f->decode_seconds), ok);
    put(rl, "decode_bound", json_string(f->decode_compute_bound ? "compute" : "memory"), ok);
    return rl;
}

static json_t *fit_json(const lp_est_report *rep, bool *ok)
{
    if (rep->limits.budget == 0)
        return json_null();
    json_t *fit = json_object();
    put(fit, "budget_bytes", ju64(rep->limits.budget), ok);
    put(fit, "max_seq", jfit(rep->fit_max_seq), ok);
    put(fit, "max_batch", jfit(rep->fit_max_batch), ok);
    return fit;
}

static json_t *rope_json(const lp_arch *arch, const lp_est_rope *r, bool *ok)
{
    if (!r->present)
        return json_null();
    json_t *ro = json_object();
    put(ro, "rope_dim", json_integer(r->rope_dim), ok);
    put(ro, "theta", json_real(r->theta), ok);
    put(ro, "scaling", json_string(lp_est_scaling_name(arch->rope_scaling.kind)), ok);
    put(ro, "trained_ctx", json_integer(r->trained_ctx), ok);
    put(ro, "target_ctx", json_integer(r->target_ctx), ok);
    put(ro, "pairs", json_integer(r->n_pairs), ok);
    put(ro, "pairs_no_rotation", json_integer(r->pairs_no_rotation), ok);
    put(ro, "pairs_no_rotation_scaled", json_integer(r->pairs_no_rotation_scaled), ok);
    put(ro, "pairs_changed_by_scaling", json_integer(r->pairs_changed), ok);
    put(ro, "scaling_modelled", json_boolean(r->scaling_modelled), ok);
    json_t *wl = json_array(), *swl = json_array();
    for (int64_t i = 0; i < r->n_stored; i++) {
        append(wl, json_real(r->freqs[i].wavelength), ok);
        append(swl, json_real(r->freqs[i].scaled_wavelength), ok);
    }
    put(ro, "wavelengths", wl, ok);
    put(ro, "scaled_wavelengths", swl, ok);
    return ro;
}

static json_t *gate_json(const lp_est_report *rep, bool *ok)
{
    json_t *gate = json_object();
    put(gate, "max_memory_bytes", rep->limits.max_memory ? ju64(rep->limits.max_memory) : json_null(), ok);
    put(gate, "max_kv_bytes", rep->limits.max_kv ? ju64(rep->limits.max_kv) : json_null(), ok);
    put(gate, "per_device", json_boolean(rep->deploy.present), ok);
    put(gate, "memory_exceeded", json_boolean(rep->gate_memory_exceeded), ok);
    put(gate, "kv_exceeded", json_boolean(rep->gate_kv_exceeded), ok);
    return gate;
}

static json_t *warnings_json(const lp_est_report *rep, bool *ok)
{
    json_t *warnings = json_array();
    for (int i = 0; i < rep->n_warnings; i++) {
        json_t *w = json_object();
        put(w, "code", json_string(rep->warnings[i].code), ok);
        put(w, "message", json_string(rep->warnings[i].msg), ok);
        append(warnings, w, ok);
    }
    return warnings;
}

json_t *lp_est_to_json(const lp_arch *arch, const lp_est_report *rep, int flags)
{
    bool ok = true;
    json_t *doc = json_object();
    put(doc, "model", json_string(lp_est_model_name(arch)), &ok);
    put(doc, "family", json_string(arch->family), &ok);
    put(doc, "assumed_family",
        arch->assumed_family[0] ? json_string(arch->assumed_family) : json_null(), &ok);
    put(doc, "encoder_only", json_boolean(arch->encoder_only), &ok);
    put(doc, "source", json_string(arch->source), &ok);
    put(doc, "settings", settings_json(rep, &ok), &ok);
    put(doc, "params", params_json(rep, &ok), &ok);
    put(doc, "memory", memory_json(rep, &ok), &ok);
    put(doc, "kv_cache", kv_json(rep, flags, &ok), &ok);
    put(doc, "flops", flops_json(&rep->flops, &ok), &ok);
    put(doc, "roofline", roofline_json(rep, &ok), &ok);
    put(doc, "fit", fit_json(rep, &ok), &ok);
    put(doc, "rope", rope_json(arch, &rep->rope, &ok), &ok);
    lp_est_deploy_json(doc, arch, rep, &ok); /* deployment, devices, serving */
    put(doc, "gate", gate_json(rep, &ok), &ok);
    put(doc, "warnings", warnings_json(rep, &ok), &ok);
    if (!ok) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}
