/* Per-device time of a deployment: the FLOPs each device computes, the bytes it reads from its
 * memory and sends over its link, for a prefill and a decode step, and which of the three bounds
 * it (a roofline: they are assumed to overlap).
 *
 * Communication per token, as vLLM's layers exchange it (bytes at the activation dtype, ring
 * collectives: an all-reduce of M bytes among n ranks sends 2 (n-1)/n M from each):
 * - tensor parallel: two all-reduces of the hidden state per layer (after o and after down);
 *   a MoE layer without expert parallelism reduces over its tp x dp ranks instead;
 * - expert parallel: each token's hidden state goes to its k experts and comes back, the
 *   (ep - 1)/ep of it that leaves the device, from the tp ranks of its replica in turn (the
 *   ideal all-to-all; vLLM's naive backend gathers more);
 * - pipeline parallel: the hidden state and the residual (vLLM's IntermediateTensors) cross
 *   each stage boundary once. */
#include "estimate/estimate.h"

#include <math.h>
#include <string.h>

#include "estimate/estimate_internal.h"

/* What one device does per replica token in its stage's layers. */
typedef struct device_work {
    double linear_flops;         /* 2 x local multiply-adds, experts at their expected share */
    double prefill_score_flops;  /* attention scores of one sequence's prefill, windows applied */
    double decode_score_flops;   /* of one decode step at the report's context */
    double expert_bytes;         /* local routed experts: read as far as tokens touch them */
    double link_bytes;           /* sent per token */
} device_work;

/* Ring all-reduce of one hidden state among n ranks: bytes each rank sends. */
static double allreduce_bytes(double message, int64_t n)
{
    return n > 1 ? 2.0 * (double)(n - 1) / (double)n * message : 0.0;
}

static void add_layer_work(const lp_arch *arch, const lp_est_report *rep, int64_t l,
                           device_work *w)
{
    const lp_est_deploy *d = &rep->deploy;
    lp_est_part parts[LP_EST_MAX_PARTS];
    int n = lp_est_layer_parts(arch, l, parts);
    for (int i = 0; i < n; i++) {
        lp_est_part local;
        uint64_t bytes = 0;
        lp_est_local_part(&parts[i], d, &local);
        lp_est_part_bytes(&local, &rep->weight_dtypes[0], &bytes); /* fits: checked before */
        double elems = (double)local.rows * (double)local.cols;
        if (parts[i].comp == LP_EST_EXPERTS) {
            /* the MoE layer serves all dp replicas: per replica token, k experts' work spread
             * over tp x dp ranks = k x expert / tp on each */
            if (local.is_matrix)
                w->linear_flops += 2.0 * elems * (double)arch->n_experts_per_tok *
                                   (double)d->dp * (double)local.copies /
                                   (double)arch->n_experts;
            w->expert_bytes += (double)bytes;
        } else if (local.is_matrix) {
            w->linear_flops += 2.0 * elems;
        }
    }
    const lp_est_layer *layer = &rep->params.layers[l];
    double per_key = 2.0 * (double)(layer->n_heads / d->tp) *
                     (double)(layer->attn_qk_dim + layer->attn_v_dim);
    int64_t window = layer->window;
    w->prefill_score_flops += per_key * (arch->encoder_only
                                             ? (double)rep->seq * (double)rep->seq
                                             : lp_est_causal_pairs(rep->seq, window));
    w->decode_score_flops += per_key * (double)(window > 0 && window < rep->context
                                                    ? window
                                                    : rep->context);
    double message = (double)arch->hidden_size * (double)rep->act_dtype.block_bytes;
    bool moe = lp_est_layer_is_moe(arch, l);
    w->link_bytes += allreduce_bytes(message, d->tp); /* after attention */
    if (!moe)
        w->link_bytes += allreduce_bytes(message, d->tp);
    else if (d->ep == 1)
        w->link_bytes += (double)d->dp * allreduce_bytes(message, d->moe_tp);
    else
        w->link_bytes += d->ep_alltoall_bytes / (double)d->tp;
}

/* The head's FLOPs per sequence: it runs on the last stage for the last position of each
 * sequence only (vLLM computes no other logits); embedding lookups cost none. */
static double head_flops(const lp_arch *arch, const lp_est_deploy *d, const lp_est_device *dev)
{
    if (!dev->holds_lm_head || arch->encoder_only)
        return 0.0;
    return 2.0 * (double)d->vocab_per_rank * (double)lp_est_embed_dim(arch);
}

/* The three times of a phase and the largest, when the hardware is known. */
static void finish_phase(const lp_est_report *rep, lp_est_phase *p)
{
    const lp_est_deploy *d = &rep->deploy;
    if (rep->hw_set && rep->hw.flops_per_s > 0 && rep->hw.bytes_per_s > 0) {
        p->compute_seconds = p->flops / rep->hw.flops_per_s;
        p->memory_seconds = p->bytes / rep->hw.bytes_per_s;
    }
    if (d->link_set && d->link.bytes_per_s > 0)
        p->link_seconds = p->link_bytes / d->link.bytes_per_s;
    p->bound = LP_EST_BOUND_COMPUTE;
    p->seconds = p->compute_seconds;
    if (p->memory_seconds > p->seconds) {
        p->bound = LP_EST_BOUND_MEMORY;
        p->seconds = p->memory_seconds;
    }
    if (p->link_seconds > p->seconds) {
        p->bound = LP_EST_BOUND_LINK;
        p->seconds = p->link_seconds;
    }
}

/* Fraction of the local experts that n routed tokens touch under uniform routing. */
static double touched(const lp_arch *arch, double n_tokens)
{
    if (arch->n_experts <= 0)
        return 1.0;
    double k = (double)arch->n_experts_per_tok, e = (double)arch->n_experts;
    return k >= e ? 1.0 : 1.0 - pow(1.0 - k / e, n_tokens);
}

static void device_times(const lp_arch *arch, lp_est_report *rep, lp_est_device *dev)
{
    const lp_est_deploy *d = &rep->deploy;
    device_work w;
    memset(&w, 0, sizeof w);
    for (int64_t l = dev->first_layer; l < dev->first_layer + dev->n_layers; l++)
        add_layer_work(arch, rep, l, &w);
    if (dev->pp_stage < d->pp - 1)
        w.link_bytes += d->pp_handoff_bytes;
    double head = head_flops(arch, d, dev);
    double dense_bytes = (double)dev->weights_bytes - w.expert_bytes; /* read whole per pass */
    double batch = (double)rep->batch, prefill_tokens = batch * (double)rep->seq;
    dev->prefill.flops = prefill_tokens * w.linear_flops + batch * (head + w.prefill_score_flops);
    dev->prefill.bytes = dense_bytes + w.expert_bytes * touched(arch, prefill_tokens * d->dp) +
                         (double)dev->kv_cache_bytes;
    dev->prefill.link_bytes = prefill_tokens * w.link_bytes;
    finish_phase(rep, &dev->prefill);
    if (arch->encoder_only)
        return; /* an encoder has no decode step */
    uint64_t kv_read = 0;
    lp_est_stage_kv_bytes(arch, d, dev, &rep->kv_dtype, rep->context, 0, &kv_read);
    dev->decode.flops = batch * (w.linear_flops + head + w.decode_score_flops);
    dev->decode.bytes = dense_bytes + w.expert_bytes * touched(arch, batch * d->dp) +
                        batch * (double)kv_read;
    dev->decode.link_bytes = batch * w.link_bytes;
    finish_phase(rep, &dev->decode);
}

void lp_est_deploy_times(const lp_arch *arch, lp_est_report *rep)
{
    lp_est_deploy *d = &rep->deploy;
    double act = (double)rep->act_dtype.block_bytes, h = (double)arch->hidden_size;
    d->tp_allreduce_bytes = h * act;
    d->tp_allreduces_per_layer = d->tp > 1 ? 2 : 0;
    d->pp_handoff_bytes = d->pp > 1 ? 2.0 * h * act : 0.0;
    d->ep_alltoall_bytes = d->ep > 1 ? 2.0 * (double)arch->n_experts_per_tok * h * act *
                                           (double)(d->ep - 1) / (double)d->ep
                                     : 0.0;
    double slowest_prefill = -1, slowest_decode = -1;
    for (int i = 0; i < d->n_devices; i++) {
        lp_est_device *dev = &d->device[i];
        device_times(arch, rep, dev);
        /* one pass of a replica goes through the stages one after another */
        d->prefill_seconds += dev->prefill.seconds;
        d->decode_seconds += dev->decode.seconds;
        if (dev->prefill.seconds > slowest_prefill) {
            slowest_prefill = dev->prefill.seconds;
            d->prefill_bound = dev->prefill.bound;
        }
        if (dev->decode.seconds > slowest_decode) {
            slowest_decode = dev->decode.seconds;
            d->decode_bound = dev->decode.bound;
        }
    }
}
