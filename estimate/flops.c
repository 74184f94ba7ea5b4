/* FLOPs of prefill, decode and training, arithmetic intensity, roofline and hardware presets. */
#include "estimate/estimate.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "estimate/estimate_internal.h"

/* Published peak figures: dense (no sparsity) bf16 tensor throughput and memory bandwidth. */
static const lp_est_hw presets[] = {
    {"h100-sxm", "NVIDIA H100 SXM5 80GB datasheet: 989 TFLOP/s bf16 dense, 3.35 TB/s HBM3",
     989e12, 3.35e12},
    {"h100-pcie", "NVIDIA H100 PCIe 80GB datasheet: 756 TFLOP/s bf16 dense, 2.0 TB/s HBM2e",
     756e12, 2.0e12},
    {"h200", "NVIDIA H200 SXM datasheet: 989 TFLOP/s bf16 dense, 4.8 TB/s HBM3e", 989e12,
     4.8e12},
    {"a100-80gb", "NVIDIA A100 80GB SXM datasheet: 312 TFLOP/s bf16 dense, 2.039 TB/s HBM2e",
     312e12, 2.039e12},
    {"a100-40gb", "NVIDIA A100 40GB datasheet: 312 TFLOP/s bf16 dense, 1.555 TB/s HBM2", 312e12,
     1.555e12},
    {"rtx-4090",
     "NVIDIA Ada whitepaper, RTX 4090: 165.2 TFLOP/s bf16 dense (fp32 accumulate), 1.008 TB/s "
     "GDDR6X",
     165.2e12, 1.008e12},
    {"mi300x", "AMD Instinct MI300X datasheet: 1307.4 TFLOP/s bf16 dense, 5.3 TB/s HBM3",
     1307.4e12, 5.3e12},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

const lp_est_hw *lp_est_hw_preset(int index)
{
    return index >= 0 && index < N_PRESETS ? &presets[index] : NULL;
}

/* A positive number with an optional k/M/G/T/P suffix. */
static bool parse_rate(const char *text, size_t len, double *out)
{
    char buf[64];
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, text, len);
    buf[len] = '\0';
    char *end;
    double v = strtod(buf, &end);
    if (end == buf || !isfinite(v) || v <= 0)
        return false;
    static const char suffixes[] = "kMGTP";
    static const double scales[] = {1e3, 1e6, 1e9, 1e12, 1e15};
    if (*end) {
        const char *s = strchr(suffixes, *end);
        if (!s || end[1] != '\0')
            return false;
        v *= scales[s - suffixes];
    }
    *out = v;
    return true;
}

bool lp_est_hw_parse(const char *text, lp_est_hw *out)
{
    memset(out, 0, sizeof *out);
    if (!text)
        return false;
    for (int i = 0; i < N_PRESETS; i++) {
        if (strcasecmp(text, presets[i].name) == 0) {
            *out = presets[i];
            return true;
        }
    }
    const char *comma = strchr(text, ',');
    if (!comma)
        return false;
    if (!parse_rate(text, (size_t)(comma - text), &out->flops_per_s) ||
        !parse_rate(comma + 1, strlen(comma + 1), &out->bytes_per_s))
        return false;
    snprintf(out->name, sizeof out->name, "custom");
    snprintf(out->label, sizeof out->label, "user figures: %g FLOP/s, %g B/s", out->flops_per_s,
             out->bytes_per_s);
    return true;
}

/* Weight bytes read when n tokens are routed: every non-expert weight, and the routed experts
 * each token batch touches at least once, expected under uniform routing:
 * E x (1 - (1 - k/E)^n) of the E experts. */
static double weights_touched(const lp_arch *arch, const lp_est_report *rep, double n_tokens)
{
    double all = (double)rep->weight_bytes[0];
    double experts = (double)rep->weight_bytes_experts;
    if (arch->n_experts <= 0 || experts <= 0)
        return all;
    double k = (double)(arch->n_experts_per_tok > 0 ? arch->n_experts_per_tok : 1);
    double e = (double)arch->n_experts;
    double miss = k >= e ? 0.0 : pow(1.0 - k / e, n_tokens);
    return all - experts + experts * (1.0 - miss);
}

void lp_est_compute_flops(const lp_arch *arch, lp_est_report *rep)
{
    lp_est_flops *f = &rep->flops;
    double batch = (double)rep->batch;
    double seq = (double)rep->seq;

    /* matmul weights used per token, split by where they sit */
    double attn_proj = 0, ffn = 0, scores_causal = 0, scores_dense = 0, scores_decode = 0;
    lp_est_part parts[LP_EST_MAX_PARTS];
    double kv_read_bytes = 0;
    for (int64_t l = 0; l < arch->n_layers; l++) {
        int n = lp_est_layer_parts(arch, l, parts);
        for (int i = 0; i < n; i++) {
            if (!parts[i].is_matrix)
                continue;
            double active = (double)parts[i].rows * (double)parts[i].cols *
                            (double)parts[i].active_copies;
            if (parts[i].comp == LP_EST_ATTN)
                attn_proj += 2.0 * active;
            else
                ffn += 2.0 * active;
        }
        const lp_est_layer *layer = &rep->params.layers[l];
        /* QK^T: 2 x heads x qk_dim per key; weights x V: 2 x heads x v_dim per key */
        double per_key = 2.0 * (double)layer->n_heads *
                         (double)(layer->attn_qk_dim + layer->attn_v_dim);
        /* an encoder attends both ways: every query sees every key */
        scores_causal += per_key * (arch->encoder_only
                                        ? seq * seq
                                        : lp_est_causal_pairs(rep->seq, layer->window));
        scores_dense += per_key * seq * seq;
        double keys = (double)(layer->window > 0 && layer->window < rep->context ? layer->window
                                                                                 : rep->context);
        scores_decode += per_key * keys;
        kv_read_bytes += (double)layer->kv_bytes_per_token * keys;
    }
    /* the output projection costs the same whether or not it is tied to the embedding; an
     * encoder has none (its pooler's 2 h^2 per sequence is left out) */
    double embed_dim = (double)lp_est_embed_dim(arch);
    double lm_head = arch->encoder_only ? 0.0 : 2.0 * (double)arch->vocab_size * embed_dim;
    if (lp_est_embed_dim(arch) != arch->hidden_size) /* OPT-350m: project_in and project_out */
        lm_head += 2.0 * 2.0 * embed_dim * (double)arch->hidden_size;

    f->prefill_attn_proj = batch * seq * attn_proj;
    f->prefill_ffn = batch * seq * ffn;
    f->prefill_lm_head = batch * seq * lm_head;
    f->prefill_attn_scores_causal = batch * scores_causal;
    f->prefill_attn_scores_dense = batch * scores_dense;
    double linear = f->prefill_attn_proj + f->prefill_ffn + f->prefill_lm_head;
    f->prefill = linear + f->prefill_attn_scores_causal;
    f->prefill_dense = linear + f->prefill_attn_scores_dense;
    f->training = 3.0 * f->prefill; /* backward = 2 x forward */

    f->prefill_bytes = weights_touched(arch, rep, batch * seq) + (double)rep->kv.bytes;
    if (!arch->encoder_only) { /* an encoder has no decode step: it generates nothing */
        f->decode_attn_proj = attn_proj;
        f->decode_ffn = ffn;
        f->decode_lm_head = lm_head;
        f->decode_attn_scores = scores_decode;
        f->decode_per_token = attn_proj + ffn + lm_head + scores_decode;
        f->decode_bytes = weights_touched(arch, rep, batch) + batch * kv_read_bytes;
    }
    double decode_step = batch * f->decode_per_token;
    f->prefill_intensity = f->prefill_bytes > 0 ? f->prefill / f->prefill_bytes : 0;
    f->decode_intensity = f->decode_bytes > 0 ? decode_step / f->decode_bytes : 0;

    if (rep->hw_set && rep->hw.flops_per_s > 0 && rep->hw.bytes_per_s > 0) {
        double compute = f->prefill / rep->hw.flops_per_s;
        double memory = f->prefill_bytes / rep->hw.bytes_per_s;
        f->prefill_compute_bound = compute >= memory;
        f->prefill_seconds = compute >= memory ? compute : memory;
        compute = decode_step / rep->hw.flops_per_s;
        memory = f->decode_bytes / rep->hw.bytes_per_s;
        f->decode_compute_bound = compute >= memory;
        f->decode_seconds = compute >= memory ? compute : memory;
    }
}
