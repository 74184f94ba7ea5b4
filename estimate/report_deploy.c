/* Printing a deployment: the per-device table, serving, communication and times; text and JSON. */
#include "estimate/estimate.h"

#include <string.h>

#include "core/text.h"
#include "estimate/estimate_internal.h"

#define put lp_est_json_put
#define ju64 lp_est_json_u64

/* ---- text -------------------------------------------------------------------------------- */

static const char *fmt_bytes(uint64_t v, char *buf) { return lp_format_bytes(v, buf, 48); }
static const char *fmt_int(int64_t v, char *buf) { return lp_format_int(v, buf, 48); }

static const char *holds(const lp_est_device *dev)
{
    if (dev->holds_lm_head && dev->pp_stage == 0)
        return "all";
    if (dev->holds_lm_head)
        return dev->holds_embedding ? "head + embed" : "norm + head";
    return "embedding";
}

static void print_mesh(FILE *out, const lp_arch *arch, const lp_est_deploy *d)
{
    char a[48], b[48];
    fprintf(out, "\ndeployment: tp %lld x pp %lld x dp %lld = %lld devices, ep %lld "
                 "(vLLM's placement; estimate/README.md)\n",
            (long long)d->tp, (long long)d->pp, (long long)d->dp, (long long)d->devices,
            (long long)d->ep);
    fprintf(out, "  vocabulary padded to %s rows (a multiple of 64): %s per TP rank\n",
            fmt_int(d->vocab_padded, a), fmt_int(d->vocab_per_rank, b));
    if (arch->mla)
        fprintf(out, "  MLA: q_a/kv_a and the cached latent whole on every TP rank; q_b, kv_b "
                     "and o split by heads (%lld per rank)\n",
                (long long)(arch->n_heads / d->tp));
    else if (!arch->encoder_only)
        fprintf(out, "  %lld kv heads over tp %lld: %lld per rank%s\n",
                (long long)lp_est_layer_kv_heads(arch, 0), (long long)d->tp,
                (long long)lp_est_local_kv_heads(d, lp_est_layer_kv_heads(arch, 0)),
                d->kv_head_replicas > 1 ? ", each held by several ranks (replicated)" : "");
    if (arch->n_experts > 0)
        fprintf(out, "  experts: %s\n",
                d->ep > 1 ? "spread by EP, whole; shared experts split by tp like an MLP"
                          : "every expert split tp x dp ways (no --ep)");
}

static void print_devices(FILE *out, const lp_est_deploy *d)
{
    char w[48], k[48], act[48], t[48], layers[32];
    fprintf(out, "  %-5s %-9s %7s %-12s %7s %11s %11s %11s %11s %5s\n", "stage", "layers",
            "devices", "holds", "experts", "weights", "KV cache", "activations", "total",
            d->memory_known ? "fits" : "");
    for (int i = 0; i < d->n_devices; i++) {
        const lp_est_device *dev = &d->device[i];
        snprintf(layers, sizeof layers, "%lld-%lld", (long long)dev->first_layer,
                 (long long)(dev->first_layer + dev->n_layers - 1));
        fprintf(out, "  %-5lld %-9s %7lld %-12s %7lld %11s %11s %11s %11s %5s\n",
                (long long)dev->pp_stage, layers, (long long)dev->n_devices, holds(dev),
                (long long)dev->experts, fmt_bytes(dev->weights_bytes, w),
                fmt_bytes(dev->kv_cache_bytes, k), fmt_bytes(dev->activations_bytes, act),
                fmt_bytes(dev->total_bytes, t), d->memory_known ? (dev->fits ? "yes" : "NO") : "");
    }
}

static void print_serving(FILE *out, const lp_est_report *rep)
{
    const lp_est_deploy *d = &rep->deploy;
    char a[48], b[48], c[48];
    if (!d->memory_known) {
        fprintf(out, "serving: device memory unknown (give --hw with a preset or "
                     "--device-memory SIZE)\n");
        return;
    }
    fprintf(out, "serving: %s x %.2f = %s per device; max-model-len %s, KV %s%s\n",
            fmt_bytes(d->device_memory, a), d->gpu_memory_utilization,
            fmt_bytes(d->usable_bytes, b), fmt_int(d->max_model_len, c), rep->kv_dtype.name,
            d->block_size > 0 ? ", paged" : "");
    if (d->max_concurrent_sequences < 0) {
        fprintf(out, "  no KV cache: concurrency is bounded by activations only\n");
        return;
    }
    uint64_t budget = UINT64_MAX;
    for (int i = 0; i < d->n_devices; i++)
        budget = d->device[i].kv_budget_bytes < budget ? d->device[i].kv_budget_bytes : budget;
    fprintf(out, "  KV budget per device (the smallest stage's) %s; one sequence of %s tokens "
                 "needs %s there\n",
            fmt_bytes(budget, a), fmt_int(d->max_model_len, b),
            fmt_bytes(d->kv_bytes_per_sequence, c));
    if (d->block_size > 0)
        fprintf(out, "  %s blocks of %lld tokens per device\n", fmt_int(d->kv_blocks, a),
                (long long)d->block_size);
    fprintf(out, "  max concurrent sequences per replica: %s (%.2fx)",
            fmt_int(d->max_concurrent_sequences, a), d->max_concurrency);
    if (d->dp > 1)
        fprintf(out, "; %lld replicas: %s", (long long)d->dp,
                fmt_int(d->max_concurrent_sequences * d->dp, b));
    fputc('\n', out);
}

static void print_comm(FILE *out, const lp_arch *arch, const lp_est_report *rep)
{
    const lp_est_deploy *d = &rep->deploy;
    char a[48], b[48];
    fprintf(out, "communication per token (%s activations)\n", rep->act_dtype.name);
    if (d->tp > 1)
        fprintf(out, "  TP: all-reduces of %s after attention and after the FFN%s; a ring sends "
                     "%s from each device\n",
                fmt_bytes((uint64_t)d->tp_allreduce_bytes, a),
                d->ep > 1 ? " (not after an EP MoE layer)" : "",
                fmt_bytes((uint64_t)(2.0 * (double)(d->tp - 1) / (double)d->tp *
                                     d->tp_allreduce_bytes),
                          b));
    if (d->pp > 1)
        fprintf(out, "  PP: hidden state + residual, %s per stage boundary\n",
                fmt_bytes((uint64_t)d->pp_handoff_bytes, a));
    if (d->ep > 1)
        fprintf(out, "  EP: dispatch + combine to the top-%lld experts, %s leaving a device per "
                     "token and MoE layer\n",
                (long long)arch->n_experts_per_tok,
                fmt_bytes((uint64_t)d->ep_alltoall_bytes, a));
    if (d->tp == 1 && d->pp == 1 && d->ep == 1)
        fprintf(out, "  none within a replica\n");
}

static void print_phase(FILE *out, int64_t stage, const char *name, const lp_est_phase *p)
{
    char c[48], m[48], l[48];
    fprintf(out, "  %-5lld %-8s %12s %12s %12s   %s-bound\n", (long long)stage, name,
            lp_est_format_seconds(p->compute_seconds, c),
            lp_est_format_seconds(p->memory_seconds, m), lp_est_format_seconds(p->link_seconds, l),
            lp_est_bound_name(p->bound));
}

static void print_times(FILE *out, const lp_arch *arch, const lp_est_report *rep)
{
    const lp_est_deploy *d = &rep->deploy;
    char a[48], b[48];
    if (!rep->hw_set)
        return;
    fprintf(out, "time per device on %s%s%s%s\n", rep->hw.name, d->link_set ? ", link " : "",
            d->link_set ? d->link.name : "", d->link_set ? "" : " (no --link: link time 0)");
    fprintf(out, "  %-5s %-8s %12s %12s %12s\n", "stage", "phase", "compute", "memory", "link");
    for (int i = 0; i < d->n_devices; i++) {
        print_phase(out, d->device[i].pp_stage, "prefill", &d->device[i].prefill);
        if (!arch->encoder_only)
            print_phase(out, d->device[i].pp_stage, "decode", &d->device[i].decode);
    }
    fprintf(out, "  replica (stages in turn): prefill of batch %lld x %lld %s, %s-bound",
            (long long)rep->batch, (long long)rep->seq,
            lp_est_format_seconds(d->prefill_seconds, a), lp_est_bound_name(d->prefill_bound));
    if (!arch->encoder_only)
        fprintf(out, "; decode step %s, %s-bound", lp_est_format_seconds(d->decode_seconds, b),
                lp_est_bound_name(d->decode_bound));
    fputc('\n', out);
}

void lp_est_print_deploy(FILE *out, const lp_arch *arch, const lp_est_report *rep)
{
    const lp_est_deploy *d = &rep->deploy;
    if (!d->present)
        return;
    print_mesh(out, arch, d);
    print_devices(out, d);
    print_serving(out, rep);
    print_comm(out, arch, rep);
    print_times(out, arch, rep);
}

/* ---- JSON -------------------------------------------------------------------------------- */

static json_t *range_json(int64_t first, int64_t last, bool *ok)
{
    json_t *r = json_array();
    lp_est_json_append(r, json_integer(first), ok);
    lp_est_json_append(r, json_integer(last), ok);
    return r;
}

static json_t *phase_json(const lp_est_report *rep, const lp_est_phase *p, bool *ok)
{
    json_t *o = json_object();
    put(o, "flops", json_real(p->flops), ok);
    put(o, "bytes", json_real(p->bytes), ok);
    put(o, "link_bytes", json_real(p->link_bytes), ok);
    put(o, "compute_seconds", json_real(p->compute_seconds), ok);
    put(o, "memory_seconds", json_real(p->memory_seconds), ok);
    put(o, "link_seconds", json_real(p->link_seconds), ok);
    put(o, "seconds", json_real(p->seconds), ok);
    put(o, "bound", rep->hw_set ? json_string(lp_est_bound_name(p->bound)) : json_null(), ok);
    return o;
}

static json_t *device_json(const lp_est_report *rep, const lp_est_device *dev, bool *ok)
{
    const lp_est_deploy *d = &rep->deploy;
    json_t *o = json_object();
    put(o, "tp_rank", json_integer(0), ok);
    put(o, "pp_stage", json_integer(dev->pp_stage), ok);
    put(o, "ep_rank", json_integer(0), ok);
    put(o, "tp_ranks", range_json(0, d->tp - 1, ok), ok); /* every one of them alike */
    put(o, "ep_ranks", range_json(0, d->ep - 1, ok), ok);
    put(o, "n_devices", json_integer(dev->n_devices), ok);
    put(o, "layers", range_json(dev->first_layer, dev->first_layer + dev->n_layers - 1, ok), ok);
    put(o, "holds_embedding", json_boolean(dev->holds_embedding), ok);
    put(o, "holds_lm_head", json_boolean(dev->holds_lm_head), ok);
    put(o, "experts", json_integer(dev->experts), ok);
    put(o, "kv_heads", json_integer(dev->kv_heads), ok);
    put(o, "weights_bytes", ju64(dev->weights_bytes), ok);
    put(o, "kv_bytes_per_token", ju64(dev->kv_bytes_per_token), ok);
    put(o, "kv_cache_bytes", ju64(dev->kv_cache_bytes), ok);
    put(o, "activations_bytes", ju64(dev->activations_bytes), ok);
    put(o, "total_bytes", ju64(dev->total_bytes), ok);
    put(o, "kv_budget_bytes", d->memory_known ? ju64(dev->kv_budget_bytes) : json_null(), ok);
    put(o, "fits", d->memory_known ? json_boolean(dev->fits) : json_null(), ok);
    put(o, "prefill", phase_json(rep, &dev->prefill, ok), ok);
    put(o, "decode", phase_json(rep, &dev->decode, ok), ok);
    return o;
}

static json_t *mesh_json(const lp_est_report *rep, bool *ok)
{
    const lp_est_deploy *d = &rep->deploy;
    json_t *o = json_object();
    put(o, "conventions", json_string("vllm"), ok);
    put(o, "tp", json_integer(d->tp), ok);
    put(o, "pp", json_integer(d->pp), ok);
    put(o, "dp", json_integer(d->dp), ok);
    put(o, "ep", json_integer(d->ep), ok);
    put(o, "devices", json_integer(d->devices), ok);
    put(o, "kv_head_replicas", json_integer(d->kv_head_replicas), ok);
    put(o, "vocab_padded", json_integer(d->vocab_padded), ok);
    put(o, "vocab_per_rank", json_integer(d->vocab_per_rank), ok);
    put(o, "expert_split", json_integer(d->moe_tp), ok);
    json_t *c = json_object();
    put(c, "tp_allreduce_bytes", json_real(d->tp_allreduce_bytes), ok);
    put(c, "tp_allreduces_per_layer", json_integer(d->tp_allreduces_per_layer), ok);
    put(c, "pp_handoff_bytes", json_real(d->pp_handoff_bytes), ok);
    put(c, "ep_alltoall_bytes", json_real(d->ep_alltoall_bytes), ok);
    put(c, "link", d->link_set ? json_string(d->link.name) : json_null(), ok);
    put(c, "link_bytes_per_s", d->link_set ? json_real(d->link.bytes_per_s) : json_null(), ok);
    put(o, "communication_per_token", c, ok);
    put(o, "prefill_seconds", rep->hw_set ? json_real(d->prefill_seconds) : json_null(), ok);
    put(o, "prefill_bound",
        rep->hw_set ? json_string(lp_est_bound_name(d->prefill_bound)) : json_null(), ok);
    put(o, "decode_step_seconds", rep->hw_set ? json_real(d->decode_seconds) : json_null(), ok);
    put(o, "decode_bound",
        rep->hw_set ? json_string(lp_est_bound_name(d->decode_bound)) : json_null(), ok);
    return o;
}

static json_t *serving_json(const lp_est_report *rep, bool *ok)
{
    const lp_est_deploy *d = &rep->deploy;
    json_t *o = json_object();
    put(o, "gpu_memory_utilization", json_real(d->gpu_memory_utilization), ok);
    put(o, "device_memory_bytes", d->memory_known ? ju64(d->device_memory) : json_null(), ok);
    put(o, "usable_bytes", d->memory_known ? ju64(d->usable_bytes) : json_null(), ok);
    put(o, "max_model_len", json_integer(d->max_model_len), ok);
    put(o, "kv_dtype", json_string(rep->kv_dtype.name), ok);
    put(o, "block_size", d->block_size ? json_integer(d->block_size) : json_null(), ok);
    put(o, "kv_bytes_per_sequence", ju64(d->kv_bytes_per_sequence), ok);
    put(o, "kv_blocks", d->memory_known && d->block_size ? json_integer(d->kv_blocks) : json_null(),
        ok);
    bool bounded = d->memory_known && d->max_concurrent_sequences >= 0;
    put(o, "max_concurrent_sequences",
        bounded ? json_integer(d->max_concurrent_sequences) : json_null(), ok);
    put(o, "max_concurrency", bounded ? json_real(d->max_concurrency) : json_null(), ok);
    put(o, "replicas", json_integer(d->dp), ok);
    return o;
}

void lp_est_deploy_json(json_t *doc, const lp_arch *arch, const lp_est_report *rep, bool *ok)
{
    (void)arch;
    const lp_est_deploy *d = &rep->deploy;
    if (!d->present) {
        put(doc, "deployment", json_null(), ok);
        put(doc, "devices", json_null(), ok);
        put(doc, "serving", json_null(), ok);
        return;
    }
    put(doc, "deployment", mesh_json(rep, ok), ok);
    json_t *devices = json_array();
    for (int i = 0; i < d->n_devices; i++)
        lp_est_json_append(devices, device_json(rep, &d->device[i], ok), ok);
    put(doc, "devices", devices, ok);
    put(doc, "serving", serving_json(rep, ok), ok);
}
