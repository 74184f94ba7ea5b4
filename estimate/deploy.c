/* The device view of a deployment: what each device of each pipeline stage holds (weights, KV
 * cache, activations) under vLLM's placement, and how many sequences its KV budget takes.
 *
 * vLLM's rules, read from its model_executor/layers (linear.py, vocab_parallel_embedding.py,
 * fused_moe/layer.py) and distributed/utils.py:
 * - ColumnParallelLinear divides the output features by tp (q, gate/up, MLA's q_b and kv_b),
 *   RowParallelLinear the input features (o, down) and keeps its bias whole; norms, routers and
 *   MLA's q_a/kv_a (ReplicatedLinear) are whole on every rank.
 * - QKVParallelLinear gives each rank kv_heads / tp kv heads, or, when tp exceeds them, one kv
 *   head that tp / kv_heads ranks hold alike; the KV cache follows. MLA's latent is whole on
 *   every rank (each caches kv_lora_rank + rope values per token).
 * - VocabParallelEmbedding and ParallelLMHead pad the vocabulary to a multiple of 64 and give
 *   each rank padded / tp rows. The first stage holds the embedding, the last the final norm and
 *   head; a tied head on its own stage keeps its own copy of the embedding.
 * - Pipeline stages take L / pp consecutive layers; the remainder goes one each to the stages
 *   before the last (get_pp_indices).
 * - MoE layers (FusedMoE) see tp x dp ranks: without expert parallelism every expert is split
 *   tp x dp ways; with it (ep = tp x dp) each rank holds E / ep whole experts. Shared experts are
 *   ordinary MLPs split by tp.
 * Megatron-LM and DeepSpeed differ: see estimate/README.md. */
#include "estimate/estimate.h"

#include <math.h>
#include <string.h>

#include "core/checked.h"
#include "estimate/estimate_internal.h"

#define DEFAULT_GPU_MEMORY_UTILIZATION 0.9 /* vLLM's default */
#define VOCAB_PADDING 64                   /* vLLM's DEFAULT_VOCAB_PADDING_SIZE */

static const char *source(const lp_arch *arch)
{
    return arch->source[0] ? arch->source : "config";
}

bool lp_est_deploy_requested(const lp_est_deploy_options *o)
{
    return o->tp > 0 || o->pp > 0 || o->dp > 0 || o->ep > 0 || o->devices > 0 ||
           o->gpu_memory_utilization > 0 || o->device_memory > 0 || o->max_model_len > 0 ||
           o->block_size > 0 || o->link_set;
}

void lp_est_stage_layers(int64_t n_layers, int64_t pp, int64_t stage, int64_t *first,
                         int64_t *count)
{
    int64_t base = n_layers / pp, extra = n_layers % pp;
    /* stages pp-1-extra .. pp-2 get one more layer each */
    *first = 0;
    for (int64_t s = 0; s <= stage; s++) {
        int64_t n = base + (s >= pp - 1 - extra && s < pp - 1 ? 1 : 0);
        if (s == stage)
            *count = n;
        else
            *first += n;
    }
}

int64_t lp_est_local_kv_heads(const lp_est_deploy *d, int64_t kv_heads)
{
    return kv_heads >= d->tp ? kv_heads / d->tp : 1;
}

void lp_est_local_part(const lp_est_part *p, const lp_est_deploy *d, lp_est_part *out)
{
    *out = *p;
    bool expert = p->comp == LP_EST_EXPERTS;
    int64_t ways = expert ? d->moe_tp : d->tp;
    if (expert)
        out->copies = p->copies / d->ep;
    switch (p->split) {
    case LP_EST_SPLIT_ROWS:
        out->rows = p->rows / ways;
        break;
    case LP_EST_SPLIT_COLS:
        out->cols = p->cols / ways;
        break;
    case LP_EST_SPLIT_KV:
        out->rows = p->rows / p->split_groups * lp_est_local_kv_heads(d, p->split_groups);
        break;
    case LP_EST_SPLIT_VOCAB:
        out->rows = (p->rows + VOCAB_PADDING - 1) / VOCAB_PADDING * VOCAB_PADDING / d->tp;
        break;
    case LP_EST_SPLIT_NONE:
        break;
    }
}

/* ---- the mesh and the splits it must make ------------------------------------------------ */

static lp_status resolve_mesh(const lp_arch *arch, const lp_est_deploy_options *o,
                              lp_est_deploy *d, lp_error *err)
{
    const char *src = source(arch);
    /* --devices alone: tensor parallel over all of them, the usual single-node deployment */
    d->tp = o->tp > 0 ? o->tp : (o->devices > 0 && o->pp == 0 && o->dp == 0 && o->ep == 0
                                     ? o->devices
                                     : 1);
    d->pp = o->pp > 0 ? o->pp : 1;
    d->ep = o->ep > 0 ? o->ep : 1;
    d->dp = o->dp;
    if (d->dp == 0 && o->devices > 0) {
        if (o->devices % (d->tp * d->pp) != 0)
            return lp_error_set(err, LP_ERR_USAGE,
                                "--devices %lld is not a multiple of tp %lld x pp %lld",
                                (long long)o->devices, (long long)d->tp, (long long)d->pp);
        d->dp = o->devices / (d->tp * d->pp);
    } else if (d->dp == 0) {
        /* vLLM's expert parallelism spans tp x dp ranks: --ep alone sets dp */
        d->dp = d->ep > 1 && d->ep % d->tp == 0 ? d->ep / d->tp : 1;
    }
    if (!lp_mul_i64(d->tp, d->pp, &d->devices) || !lp_mul_i64(d->devices, d->dp, &d->devices))
        return lp_error_set(err, LP_ERR_RANGE, "tp x pp x dp overflows");
    if (o->devices > 0 && o->devices != d->devices)
        return lp_error_set(err, LP_ERR_USAGE,
                            "--devices %lld, but tp %lld x pp %lld x dp %lld = %lld",
                            (long long)o->devices, (long long)d->tp, (long long)d->pp,
                            (long long)d->dp, (long long)d->devices);
    if (d->pp > arch->n_layers || d->pp > LP_EST_MAX_STAGES)
        return lp_error_set(err, LP_ERR_USAGE, "%s: --pp %lld exceeds the %lld layers%s", src,
                            (long long)d->pp, (long long)arch->n_layers,
                            d->pp > LP_EST_MAX_STAGES ? " (or the limit of 64 stages)" : "");
    if (d->ep > 1 && arch->n_experts == 0)
        return lp_error_set(err, LP_ERR_USAGE, "%s: --ep %lld, but the model has no experts",
                            src, (long long)d->ep);
    if (d->ep > 1 && arch->n_experts % d->ep != 0)
        return lp_error_set(err, LP_ERR_USAGE, "%s: --ep %lld does not divide the %lld experts",
                            src, (long long)d->ep, (long long)arch->n_experts);
    if (d->ep > 1 && d->ep != d->tp * d->dp)
        return lp_error_set(err, LP_ERR_USAGE,
                            "--ep %lld: vLLM's expert parallelism spans tp x dp = %lld ranks",
                            (long long)d->ep, (long long)(d->tp * d->dp));
    d->moe_tp = d->ep > 1 ? 1 : d->tp * d->dp;
    int64_t k = arch->mla ? arch->n_heads : lp_est_layer_kv_heads(arch, 0);
    d->kv_head_replicas = d->tp > k ? d->tp / k : 1;
    d->vocab_padded = (arch->vocab_size + VOCAB_PADDING - 1) / VOCAB_PADDING * VOCAB_PADDING;
    d->vocab_per_rank = d->vocab_padded / d->tp;
    return LP_OK;
}

/* "--tp 3 does not divide the 32 attention heads": the first split the mesh cannot make. */
static lp_status check_width(const lp_arch *arch, int64_t ways, const char *flag, int64_t width,
                             const char *what, lp_error *err)
{
    if (width > 0 && width % ways != 0)
        return lp_error_set(err, LP_ERR_USAGE, "%s: %s %lld does not divide the %lld %s",
                            source(arch), flag, (long long)ways, (long long)width, what);
    return LP_OK;
}

static lp_status check_splits(const lp_arch *arch, const lp_est_deploy *d, lp_error *err)
{
    lp_status st = check_width(arch, d->tp, "--tp", arch->n_heads, "attention heads", err);
    for (int64_t l = 0; l < arch->n_layers && st == LP_OK && !arch->mla; l++) {
        int64_t k = lp_est_layer_kv_heads(arch, l);
        if (k % d->tp != 0 && d->tp % k != 0)
            st = lp_error_set(err, LP_ERR_USAGE,
                              "%s: --tp %lld and layer %lld's %lld kv heads: neither divides the "
                              "other (vLLM splits kv heads or gives each rank one)",
                              source(arch), (long long)d->tp, (long long)l, (long long)k);
    }
    for (int64_t l = 0; l < arch->n_layers && st == LP_OK; l++)
        if (!lp_est_layer_is_moe(arch, l))
            st = check_width(arch, d->tp, "--tp", lp_est_layer_ffn_hidden(arch, l),
                             "rows of a dense FFN", err);
    int64_t shared = arch->shared_expert_ffn_hidden > 0
                         ? arch->shared_expert_ffn_hidden
                         : arch->n_shared_experts * arch->expert_ffn_hidden;
    if (st == LP_OK && arch->n_experts > 0)
        st = check_width(arch, d->tp, "--tp", shared, "rows of the shared experts", err);
    if (st == LP_OK && arch->n_experts > 0 && d->ep == 1)
        st = check_width(arch, d->moe_tp, "tp x dp", arch->expert_ffn_hidden,
                         "rows of each expert (without --ep, vLLM splits every expert)", err);
    if (st == LP_OK)
        st = check_width(arch, d->tp, "--tp", d->vocab_padded,
                         "vocabulary rows (padded to a multiple of 64)", err);
    return st;
}

/* ---- one device of one stage ------------------------------------------------------------- */

static lp_status overflow(const lp_arch *arch, const char *what, lp_error *err)
{
    return lp_error_set(err, LP_ERR_RANGE, "%s: %s per device overflows 64 bits", source(arch),
                        what);
}

static bool add_parts_bytes(const lp_est_part *parts, int n, const lp_est_deploy *d,
                            const lp_est_dtype *dtype, int side, uint64_t *total)
{
    for (int i = 0; i < n; i++) {
        if (side >= 0 && parts[i].head_side != (side == 1))
            continue;
        lp_est_part local;
        uint64_t b;
        lp_est_local_part(&parts[i], d, &local);
        if (!lp_est_part_bytes(&local, dtype, &b) || !lp_add_u64(*total, b, total))
            return false;
    }
    return true;
}

static bool stage_weight_bytes(const lp_arch *arch, const lp_est_deploy *d,
                               const lp_est_device *dev, const lp_est_dtype *dtype,
                               uint64_t *bytes)
{
    lp_est_part parts[LP_EST_MAX_PARTS];
    uint64_t total = 0;
    for (int64_t l = dev->first_layer; l < dev->first_layer + dev->n_layers; l++)
        if (!add_parts_bytes(parts, lp_est_layer_parts(arch, l, parts), d, dtype, -1, &total))
            return false;
    int n = lp_est_global_parts(arch, parts);
    if (dev->pp_stage == 0 && !add_parts_bytes(parts, n, d, dtype, 0, &total))
        return false;
    if (dev->pp_stage == d->pp - 1 && !add_parts_bytes(parts, n, d, dtype, 1, &total))
        return false;
    /* a tied head on a stage of its own has its own copy of the embedding (the first part) */
    if (dev->holds_lm_head && arch->tied_embeddings && !arch->encoder_only && d->pp > 1 &&
        !add_parts_bytes(parts, 1, d, dtype, 0, &total))
        return false;
    *bytes = total;
    return true;
}

/* KV bytes one token costs on this device in layer l. */
static bool local_kv_bytes(const lp_arch *arch, const lp_est_deploy *d, int64_t l,
                           const lp_est_dtype *dtype, uint64_t *bytes)
{
    if (arch->encoder_only || arch->mla) /* nothing cached, or the whole latent on every rank */
        return lp_est_layer_kv_bytes_per_token(arch, l, dtype, bytes);
    int64_t heads = lp_est_local_kv_heads(d, lp_est_layer_kv_heads(arch, l));
    return lp_est_dtype_bytes(dtype, (uint64_t)heads * 2, (uint64_t)lp_est_head_dim(arch), bytes);
}

/* KV bytes of the stage for one sequence of `tokens`, each layer up to its window, counted in
 * whole blocks of `block` tokens (0 = exact). */
bool lp_est_stage_kv_bytes(const lp_arch *arch, const lp_est_deploy *d, const lp_est_device *dev,
                           const lp_est_dtype *dtype, int64_t tokens, int64_t block,
                           uint64_t *bytes)
{
    uint64_t total = 0;
    for (int64_t l = dev->first_layer; l < dev->first_layer + dev->n_layers; l++) {
        uint64_t per_token, layer;
        int64_t window = lp_est_layer_window(arch, l);
        int64_t held = window > 0 && window < tokens ? window : tokens;
        if (block > 0)
            held = (held + block - 1) / block * block;
        if (!local_kv_bytes(arch, d, l, dtype, &per_token) ||
            !lp_mul_u64(per_token, (uint64_t)held, &layer) || !lp_add_u64(total, layer, &total))
            return false;
    }
    *bytes = total;
    return true;
}

/* The widest FFN row a token holds on this device (see activation_bytes in estimate.c). */
static int64_t local_ffn_width(const lp_arch *arch, const lp_est_deploy *d,
                               const lp_est_device *dev)
{
    int64_t widest = 0;
    for (int64_t l = dev->first_layer; l < dev->first_layer + dev->n_layers; l++) {
        int64_t w = lp_est_layer_ffn_hidden(arch, l) / d->tp;
        if (lp_est_layer_is_moe(arch, l)) {
            int64_t k = arch->n_experts_per_tok, local = arch->n_experts / d->ep;
            int64_t shared = arch->shared_expert_ffn_hidden > 0
                                 ? arch->shared_expert_ffn_hidden
                                 : arch->n_shared_experts * arch->expert_ffn_hidden;
            w = (d->ep > 1 ? (k < local ? k : local) * arch->expert_ffn_hidden
                           : k * arch->expert_ffn_hidden / d->moe_tp) +
                shared / d->tp;
        }
        if (w > widest)
            widest = w;
    }
    return widest;
}

/* Activations as the single-device model counts them (estimate.c), with the device's share of
 * heads and FFN rows; the last stage also holds the gathered f32 logits of each sequence. */
static bool stage_activation_bytes(const lp_arch *arch, const lp_est_report *rep,
                                   const lp_est_deploy *d, const lp_est_device *dev,
                                   uint64_t *bytes)
{
    uint64_t tokens;
    if (!lp_mul_u64((uint64_t)rep->batch, (uint64_t)rep->seq, &tokens))
        return false;
    if (tokens > (uint64_t)rep->prefill_chunk)
        tokens = (uint64_t)rep->prefill_chunk;
    int64_t qk = arch->mla ? arch->qk_nope_head_dim + arch->qk_rope_head_dim
                           : lp_est_head_dim(arch);
    int64_t v = arch->mla ? arch->v_head_dim : lp_est_head_dim(arch);
    int64_t heads = arch->n_heads / d->tp;
    int64_t kv = arch->mla ? heads : lp_est_local_kv_heads(d, lp_est_layer_kv_heads(arch, 0));
    uint64_t row = (uint64_t)(2 * arch->hidden_size + heads * qk + kv * (qk + v) +
                              2 * local_ffn_width(arch, d, dev));
    uint64_t act, logits = 0;
    if (!lp_mul_u64(tokens, row, &act) || !lp_mul_u64(act, rep->act_dtype.block_bytes, &act))
        return false;
    if (dev->holds_lm_head && !arch->encoder_only &&
        !lp_mul_u64((uint64_t)rep->batch * 4, (uint64_t)arch->vocab_size, &logits))
        return false;
    return lp_add_u64(act, logits, bytes);
}

static lp_status fill_device(const lp_arch *arch, const lp_est_report *rep, lp_est_deploy *d,
                             int64_t stage, lp_error *err)
{
    lp_est_device *dev = &d->device[stage];
    memset(dev, 0, sizeof *dev);
    dev->pp_stage = stage;
    dev->n_devices = d->tp * d->dp;
    lp_est_stage_layers(arch->n_layers, d->pp, stage, &dev->first_layer, &dev->n_layers);
    dev->holds_embedding = stage == 0 || (stage == d->pp - 1 && arch->tied_embeddings &&
                                          !arch->encoder_only);
    dev->holds_lm_head = stage == d->pp - 1;
    dev->experts = arch->n_experts / d->ep;
    for (int64_t l = dev->first_layer; l < dev->first_layer + dev->n_layers && !arch->mla; l++) {
        int64_t k = lp_est_local_kv_heads(d, lp_est_layer_kv_heads(arch, l));
        dev->kv_heads = k > dev->kv_heads ? k : dev->kv_heads;
    }
    uint64_t kv_seq;
    if (!stage_weight_bytes(arch, d, dev, &rep->weight_dtypes[0], &dev->weights_bytes))
        return overflow(arch, "weight bytes", err);
    if (!lp_est_stage_kv_bytes(arch, d, dev, &rep->kv_dtype, 1, 0, &dev->kv_bytes_per_token) ||
        !lp_est_stage_kv_bytes(arch, d, dev, &rep->kv_dtype, rep->seq, 0, &kv_seq) ||
        !lp_mul_u64(kv_seq, (uint64_t)rep->batch, &dev->kv_cache_bytes))
        return lp_error_set(err, LP_ERR_RANGE,
                            "%s: KV cache per device for --batch %lld x --seq %lld overflows 64 "
                            "bits", source(arch), (long long)rep->batch, (long long)rep->seq);
    if (!stage_activation_bytes(arch, rep, d, dev, &dev->activations_bytes) ||
        !lp_add_u64(dev->weights_bytes, dev->kv_cache_bytes, &dev->total_bytes) ||
        !lp_add_u64(dev->total_bytes, dev->activations_bytes, &dev->total_bytes))
        return overflow(arch, "memory", err);
    return LP_OK;
}

/* ---- serving: the KV budget left on each device, and the sequences it holds -------------- */

static void fill_serving(const lp_arch *arch, const lp_est_report *rep,
                         const lp_est_options *opts, lp_est_deploy *d)
{
    const lp_est_deploy_options *o = &opts->deploy;
    d->gpu_memory_utilization = o->gpu_memory_utilization > 0 ? o->gpu_memory_utilization
                                                              : DEFAULT_GPU_MEMORY_UTILIZATION;
    d->device_memory = o->device_memory > 0 ? o->device_memory
                                            : (opts->hw_set ? opts->hw.memory_bytes : 0);
    d->max_model_len = o->max_model_len > 0 ? o->max_model_len : rep->seq;
    d->block_size = o->block_size;
    d->memory_known = d->device_memory > 0;
    if (!d->memory_known)
        return;
    /* vLLM: the engine may use utilization x total; weights and the profiled activation peak
     * come off it, the KV cache gets the rest */
    d->usable_bytes = (uint64_t)floor(d->gpu_memory_utilization * (double)d->device_memory);
    double concurrency = HUGE_VAL;
    int64_t blocks = INT64_MAX;
    for (int i = 0; i < d->n_devices; i++) {
        lp_est_device *dev = &d->device[i];
        uint64_t fixed = dev->weights_bytes + dev->activations_bytes; /* no overflow: totals fit */
        dev->kv_budget_bytes = d->usable_bytes > fixed ? d->usable_bytes - fixed : 0;
        dev->fits = dev->total_bytes <= d->usable_bytes;
        uint64_t per_seq = 0;
        if (!lp_est_stage_kv_bytes(arch, d, dev, &rep->kv_dtype, d->max_model_len,
                                   d->block_size, &per_seq))
            per_seq = UINT64_MAX;
        if (per_seq > d->kv_bytes_per_sequence)
            d->kv_bytes_per_sequence = per_seq;
        if (per_seq > 0 && (double)dev->kv_budget_bytes / (double)per_seq < concurrency)
            concurrency = (double)dev->kv_budget_bytes / (double)per_seq;
        uint64_t page = (uint64_t)d->block_size * dev->kv_bytes_per_token;
        if (page > 0 && (int64_t)(dev->kv_budget_bytes / page) < blocks)
            blocks = (int64_t)(dev->kv_budget_bytes / page);
    }
    d->kv_blocks = blocks == INT64_MAX ? 0 : blocks;
    d->max_concurrency = isfinite(concurrency) ? concurrency : -1.0;
    d->max_concurrent_sequences = isfinite(concurrency) ? (int64_t)floor(concurrency) : -1;
}

lp_status lp_est_deploy_compute(const lp_arch *arch, const lp_est_options *opts,
                                lp_est_report *rep, lp_error *err)
{
    lp_est_deploy *d = &rep->deploy;
    memset(d, 0, sizeof *d);
    if (!lp_est_deploy_requested(&opts->deploy))
        return LP_OK;
    d->present = true;
    lp_status st = resolve_mesh(arch, &opts->deploy, d, err);
    if (st == LP_OK)
        st = check_splits(arch, d, err);
    d->n_devices = (int)d->pp;
    for (int64_t s = 0; s < d->pp && st == LP_OK; s++)
        st = fill_device(arch, rep, d, s, err);
    if (st != LP_OK)
        return st;
    fill_serving(arch, rep, opts, d);
    d->link = opts->deploy.link;
    d->link_set = opts->deploy.link_set;
    /* the gates hold for every device */
    rep->gate_memory_exceeded = rep->gate_kv_exceeded = false;
    for (int i = 0; i < d->n_devices; i++) {
        const lp_est_device *dev = &d->device[i];
        rep->gate_memory_exceeded |= rep->limits.max_memory > 0 && dev->total_bytes > rep->limits.max_memory;
        rep->gate_kv_exceeded |= rep->limits.max_kv > 0 && dev->kv_cache_bytes > rep->limits.max_kv;
    }
    return LP_OK;
}
