/* FLOPs of prefill, decode and training, arithmetic intensity and the single-device roofline. */
#include "estimate/estimate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "estimate/estimate_internal.h"

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

/* Per token of one sequence, summed over the layers: matmul FLOPs of the attention and of the
 * FFN/experts, attention-score FLOPs of a prefill (causal and dense) and of a decode step, and
 * the KV bytes a decode step reads. */
typedef struct layer_sums {
    double attn_proj, ffn, scores_causal, scores_dense, scores_decode, kv_read_bytes;
} layer_sums;

static void sum_layers(const lp_arch *arch, const lp_est_report *rep, layer_sums *t)
{
    double seq = (double)rep->seq;
    lp_est_part parts[LP_EST_MAX_PARTS];
    memset(t, 0, sizeof *t);
    for (int64_t l = 0; l < arch->n_layers; l++) {
        int n = lp_est_layer_parts(arch, l, parts);
        for (int i = 0; i < n; i++) {
            if (!parts[i].is_matrix)
                continue;
            double active = (double)parts[i].rows * (double)parts[i].cols *
                            (double)parts[i].active_copies;
            if (parts[i].comp == LP_EST_ATTN)
                t->attn_proj += 2.0 * active;
            else
                t->ffn += 2.0 * active;
        }
        const lp_est_layer *layer = &rep->params.layers[l];
        /* QK^T: 2 x heads x qk_dim per key; weights x V: 2 x heads x v_dim per key */
        double per_key = 2.0 * (double)layer->n_heads *
                         (double)(layer->attn_qk_dim + layer->attn_v_dim);
        /* an encoder attends both ways: every query sees every key */
        t->scores_causal += per_key * (arch->encoder_only
                                           ? seq * seq
                                           : lp_est_causal_pairs(rep->seq, layer->window));
        t->scores_dense += per_key * seq * seq;
        double keys = (double)(layer->window > 0 && layer->window < rep->context ? layer->window
                                                                                 : rep->context);
        t->scores_decode += per_key * keys;
        t->kv_read_bytes += (double)layer->kv_bytes_per_token * keys;
    }
}

void lp_est_compute_flops(const lp_arch *arch, lp_est_report *rep)
{
    lp_est_flops *f = &rep->flops;
    double batch = (double)rep->batch;
    double seq = (double)rep->seq;
    layer_sums t;
    sum_layers(arch, rep, &t);
    double attn_proj = t.attn_proj, ffn = t.ffn, scores_causal = t.scores_causal;
    double scores_dense = t.scores_dense, scores_decode = t.scores_decode;
    double kv_read_bytes = t.kv_read_bytes;
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

