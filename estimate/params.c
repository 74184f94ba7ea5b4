/* Exact parameter counts: the weight tensors an lp_arch implies, by component and by layer. */
#include "estimate/estimate.h"

#include <stdarg.h>
#include <string.h>
#include <strings.h>

#include "core/checked.h"
#include "core/names.h"
#include "estimate/estimate_internal.h"

static const lp_name_entry component_names[] = {
    {LP_EST_EMBED, "embeddings"},
    {LP_EST_POS_EMBED, "position_embeddings"},
    {LP_EST_ATTN, "attention"},
    {LP_EST_FFN, "ffn"},
    {LP_EST_EXPERTS, "experts"},
    {LP_EST_SHARED_EXPERTS, "shared_experts"},
    {LP_EST_ROUTER, "router"},
    {LP_EST_NORMS, "norms"},
    {LP_EST_LM_HEAD, "lm_head"},
    {LP_EST_POOLER, "pooler"},
};

LP_NAMES_DEFINE_WORD(lp_est_component_name, lp_est_component, component_names, "invalid")

/* ---- storage types ---------------------------------------------------------------------- */

bool lp_est_dtype_parse(const char *name, lp_est_dtype *out)
{
    memset(out, 0, sizeof *out);
    if (!name || !*name)
        return false;
    if (strcasecmp(name, "int4") == 0 || strcasecmp(name, "i4") == 0) {
        /* Plain packed 4-bit values; real int4 schemes (GPTQ, AWQ) add group scales: use a GGUF
         * type (q4_0, q4_k) to include them. */
        snprintf(out->name, sizeof out->name, "int4");
        out->block_elems = 2;
        out->block_bytes = 1;
        out->vector_bytes = 2;
        return true;
    }
    lp_dtype dtype = lp_dtype_from_name(name);
    if (dtype == LP_DTYPE_INVALID || dtype == LP_DTYPE_BOOL)
        return false;
    const lp_dtype_info *info = lp_dtype_get(dtype);
    if (info->block_bytes == 0 || info->block_elems == 0)
        return false;
    snprintf(out->name, sizeof out->name, "%s", info->name);
    out->block_elems = info->block_elems;
    out->block_bytes = info->block_bytes;
    out->is_block = info->is_quant;
    out->vector_bytes = info->is_quant ? 4 : 0;
    return true;
}

double lp_est_dtype_bits(const lp_est_dtype *dtype)
{
    if (dtype->block_elems == 0)
        return 0.0;
    return 8.0 * dtype->block_bytes / dtype->block_elems;
}

bool lp_est_dtype_bytes(const lp_est_dtype *dtype, uint64_t n_rows, uint64_t row_len,
                        uint64_t *bytes)
{
    if (dtype->block_elems == 0)
        return false;
    uint64_t blocks_per_row = row_len / dtype->block_elems + (row_len % dtype->block_elems != 0);
    uint64_t row_bytes, total;
    if (!lp_mul_u64(blocks_per_row, dtype->block_bytes, &row_bytes) ||
        !lp_mul_u64(row_bytes, n_rows, &total))
        return false;
    *bytes = total;
    return true;
}

/* ---- the per-layer view of an lp_arch ---------------------------------------------------- */

int64_t lp_est_head_dim(const lp_arch *arch)
{
    if (arch->head_dim > 0)
        return arch->head_dim;
    return arch->n_heads > 0 ? arch->hidden_size / arch->n_heads : 0;
}

int64_t lp_est_embed_dim(const lp_arch *arch)
{
    return arch->embed_proj_dim > 0 ? arch->embed_proj_dim : arch->hidden_size;
}

static bool layer_in_range(int64_t layer) { return layer >= 0 && layer < LP_MAX_LAYERS; }

int64_t lp_est_layer_kv_heads(const lp_arch *arch, int64_t layer)
{
    if (layer_in_range(layer) && arch->layer_kv_heads[layer] > 0)
        return arch->layer_kv_heads[layer];
    return arch->n_kv_heads > 0 ? arch->n_kv_heads : arch->n_heads;
}

int64_t lp_est_layer_ffn_hidden(const lp_arch *arch, int64_t layer)
{
    if (layer_in_range(layer) && arch->layer_ffn_hidden[layer] > 0)
        return arch->layer_ffn_hidden[layer];
    return arch->ffn_hidden;
}

int64_t lp_est_layer_window(const lp_arch *arch, int64_t layer)
{
    return layer_in_range(layer) && arch->layer_window[layer] > 0 ? arch->layer_window[layer] : 0;
}

bool lp_est_layer_is_moe(const lp_arch *arch, int64_t layer)
{
    return arch->n_experts > 0 && layer_in_range(layer) && arch->layer_moe[layer];
}

static int64_t layer_kv_values(const lp_arch *arch, int64_t layer)
{
    if (arch->mla)
        return arch->kv_lora_rank + arch->qk_rope_head_dim; /* one latent, shared by K and V */
    return lp_est_layer_kv_heads(arch, layer) * 2 * lp_est_head_dim(arch);
}

bool lp_est_layer_kv_bytes_per_token(const lp_arch *arch, int64_t layer, const lp_est_dtype *dtype,
                                     uint64_t *bytes)
{
    if (arch->encoder_only) { /* the whole sequence is processed at once: nothing is cached */
        *bytes = 0;
        return true;
    }
    /* Caches store one row per head (K and V separately), so block types pad per head row. */
    if (arch->mla)
        return lp_est_dtype_bytes(dtype, 1, (uint64_t)(arch->kv_lora_rank + arch->qk_rope_head_dim),
                                  bytes);
    uint64_t rows;
    if (!lp_mul_u64((uint64_t)lp_est_layer_kv_heads(arch, layer), 2, &rows))
        return false;
    return lp_est_dtype_bytes(dtype, rows, (uint64_t)lp_est_head_dim(arch), bytes);
}

double lp_est_causal_pairs(int64_t seq, int64_t window)
{
    double t = (double)seq;
    if (window <= 0 || window >= seq)
        return t * (t + 1.0) / 2.0;
    double w = (double)window;
    return w * (w + 1.0) / 2.0 + (t - w) * w;
}

/* ---- the tensor list --------------------------------------------------------------------- */

/* The parts being listed, and how tensor parallelism splits the next ones (set with
 * splitting(); deploy.c reads it, the counts ignore it). */
typedef struct part_list {
    lp_est_part *parts;
    int n;
    lp_est_split split;
    int64_t split_groups;
    bool head_side;
} part_list;

static void splitting(part_list *list, lp_est_split split, int64_t groups)
{
    list->split = split;
    list->split_groups = groups;
}

static void add_part(part_list *list, lp_est_component comp, const char *name, int64_t rows,
                     int64_t cols, int64_t copies, int64_t active_copies, bool is_matrix)
{
    if (rows <= 0 || cols <= 0 || copies <= 0)
        return;
    LP_ASSERT(list->n < LP_EST_MAX_PARTS);
    list->parts[list->n++] = (lp_est_part){
        .comp = comp, .name = name, .rows = rows, .cols = cols, .copies = copies,
        .active_copies = active_copies, .is_matrix = is_matrix, .split = list->split,
        .split_groups = list->split_groups, .head_side = list->head_side};
}

static void add_matrix(part_list *list, lp_est_component comp, const char *name, int64_t out,
                       int64_t in)
{
    add_part(list, comp, name, out, in, 1, 1, true);
}

static void add_vector(part_list *list, lp_est_component comp, const char *name, int64_t n)
{
    add_part(list, comp, name, n, 1, 1, 1, false);
}

/* A norm over n values: RMSNorm has a weight, LayerNorm a weight and (usually) a bias. */
static void add_norm(part_list *list, const lp_arch *arch, lp_est_component comp,
                     const char *name, int64_t n)
{
    add_vector(list, comp, name, n);
    if (arch->norm_kind == LP_NORM_LAYER && arch->bias_norm)
        add_vector(list, comp, "norm bias", n);
}

/* One feed-forward block of width f, `copies` times (active_copies used per token). */
static void add_ffn(part_list *list, const lp_arch *arch, lp_est_component comp, int64_t f,
                    int64_t copies, int64_t active_copies)
{
    int64_t h = arch->hidden_size;
    bool gated = arch->ffn_kind != LP_FFN_MLP;
    /* gate/up column-parallel, down row-parallel (its bias whole) */
    splitting(list, LP_EST_SPLIT_ROWS, f);
    if (gated)
        add_part(list, comp, "gate", f, h, copies, active_copies, true);
    add_part(list, comp, "up", f, h, copies, active_copies, true);
    if (arch->bias_mlp) {
        if (gated)
            add_part(list, comp, "gate bias", f, 1, copies, active_copies, false);
        add_part(list, comp, "up bias", f, 1, copies, active_copies, false);
    }
    splitting(list, LP_EST_SPLIT_COLS, f);
    add_part(list, comp, "down", h, f, copies, active_copies, true);
    splitting(list, LP_EST_SPLIT_NONE, 0);
    if (arch->bias_mlp)
        add_part(list, comp, "down bias", h, 1, copies, active_copies, false);
}

/* DeepSeek's multi-head latent attention. */
static void add_mla(part_list *list, const lp_arch *arch)
{
    int64_t h = arch->hidden_size;
    int64_t heads = arch->n_heads;
    /* vLLM: the down-projections q_a and kv_a and their norms are replicated; q_b (or q),
     * kv_b are split by heads, o by its input heads */
    int64_t qk_head = arch->qk_nope_head_dim + arch->qk_rope_head_dim;
    if (arch->q_lora_rank > 0) {
        splitting(list, LP_EST_SPLIT_NONE, 0);
        add_matrix(list, LP_EST_ATTN, "q_a", arch->q_lora_rank, h);
        if (arch->bias_qkv)
            add_vector(list, LP_EST_ATTN, "q_a bias", arch->q_lora_rank);
        add_vector(list, LP_EST_ATTN, "q_a norm", arch->q_lora_rank); /* RMSNorm */
        splitting(list, LP_EST_SPLIT_ROWS, heads);
        add_matrix(list, LP_EST_ATTN, "q_b", heads * qk_head, arch->q_lora_rank);
    } else {
        splitting(list, LP_EST_SPLIT_ROWS, heads);
        add_matrix(list, LP_EST_ATTN, "q", heads * qk_head, h);
    }
    splitting(list, LP_EST_SPLIT_NONE, 0);
    add_matrix(list, LP_EST_ATTN, "kv_a", arch->kv_lora_rank + arch->qk_rope_head_dim, h);
    if (arch->bias_qkv)
        add_vector(list, LP_EST_ATTN, "kv_a bias", arch->kv_lora_rank + arch->qk_rope_head_dim);
    add_vector(list, LP_EST_ATTN, "kv_a norm", arch->kv_lora_rank);
    splitting(list, LP_EST_SPLIT_ROWS, heads);
    add_matrix(list, LP_EST_ATTN, "kv_b", heads * (arch->qk_nope_head_dim + arch->v_head_dim),
               arch->kv_lora_rank);
    splitting(list, LP_EST_SPLIT_COLS, heads);
    add_matrix(list, LP_EST_ATTN, "o", h, heads * arch->v_head_dim);
    splitting(list, LP_EST_SPLIT_NONE, 0);
    if (arch->bias_o)
        add_vector(list, LP_EST_ATTN, "o bias", h);
}

static void add_attention(part_list *list, const lp_arch *arch, int64_t layer)
{
    int64_t h = arch->hidden_size;
    int64_t heads = arch->n_heads;
    if (arch->mla) {
        add_mla(list, arch);
        return;
    }
    int64_t head_dim = lp_est_head_dim(arch);
    int64_t q_dim = heads * head_dim;
    int64_t kv_heads = lp_est_layer_kv_heads(arch, layer);
    int64_t kv_dim = kv_heads * head_dim;
    /* q by heads, k/v by kv heads (QKVParallelLinear), o by its input heads; the o bias, and
     * norms shared by all heads, whole on every rank */
    splitting(list, LP_EST_SPLIT_ROWS, heads);
    add_matrix(list, LP_EST_ATTN, "q", q_dim, h);
    if (arch->bias_qkv)
        add_vector(list, LP_EST_ATTN, "q bias", q_dim);
    splitting(list, LP_EST_SPLIT_KV, kv_heads);
    add_matrix(list, LP_EST_ATTN, "k", kv_dim, h);
    add_matrix(list, LP_EST_ATTN, "v", kv_dim, h);
    if (arch->bias_qkv) {
        add_vector(list, LP_EST_ATTN, "k bias", kv_dim);
        add_vector(list, LP_EST_ATTN, "v bias", kv_dim);
    }
    splitting(list, LP_EST_SPLIT_COLS, heads);
    add_matrix(list, LP_EST_ATTN, "o", h, q_dim);
    splitting(list, LP_EST_SPLIT_NONE, 0);
    if (arch->bias_o)
        add_vector(list, LP_EST_ATTN, "o bias", h);
    splitting(list, LP_EST_SPLIT_ROWS, heads);
    if (arch->attn_sinks)
        add_vector(list, LP_EST_ATTN, "attention sinks", heads);
    if (arch->qk_norm_per_head) { /* StableLM 2, Cohere: one weight-only norm for every head */
        add_vector(list, LP_EST_ATTN, "q norms", q_dim);
        splitting(list, LP_EST_SPLIT_KV, kv_heads);
        add_vector(list, LP_EST_ATTN, "k norms", kv_dim);
    }
    splitting(list, LP_EST_SPLIT_NONE, 0);
    if (arch->qk_norm_per_head)
        return;
    if (arch->qk_norm_full) { /* OLMo 2: over all heads at once (vLLM all-gathers q, k) */
        add_norm(list, arch, LP_EST_ATTN, "q norm", q_dim);
        add_norm(list, arch, LP_EST_ATTN, "k norm", kv_dim);
    } else if (arch->qk_norm) { /* Qwen3, Gemma 3: one head_dim vector shared by all heads */
        add_norm(list, arch, LP_EST_ATTN, "q norm", head_dim);
        add_norm(list, arch, LP_EST_ATTN, "k norm", head_dim);
    }
}

static void add_layer_norms(part_list *list, const lp_arch *arch)
{
    int64_t h = arch->hidden_size;
    if (arch->parallel_block) {
        /* attention and FFN read the same normalized input: one norm, or two (Falcon 40B) */
        add_norm(list, arch, LP_EST_NORMS, "input norm", h);
        if (arch->parallel_two_norms)
            add_norm(list, arch, LP_EST_NORMS, "mlp input norm", h);
    } else if (!arch->no_input_norm) {
        add_norm(list, arch, LP_EST_NORMS, "input norm", h);
        add_norm(list, arch, LP_EST_NORMS, "ffn input norm", h);
    }
    if (arch->post_attn_norm)
        add_norm(list, arch, LP_EST_NORMS, "post-attention norm", h);
    if (arch->post_ffn_norm)
        add_norm(list, arch, LP_EST_NORMS, "post-ffn norm", h);
}

static void add_moe(part_list *list, const lp_arch *arch)
{
    int64_t h = arch->hidden_size;
    int64_t top_k = arch->n_experts_per_tok > 0 ? arch->n_experts_per_tok : 1;
    if (top_k > arch->n_experts)
        top_k = arch->n_experts;
    add_matrix(list, LP_EST_ROUTER, "router", arch->n_experts, h);
    if (arch->router_bias)
        add_vector(list, LP_EST_ROUTER, "router bias", arch->n_experts);
    if (arch->router_score_bias)
        add_vector(list, LP_EST_ROUTER, "router score bias", arch->n_experts);
    add_ffn(list, arch, LP_EST_EXPERTS, arch->expert_ffn_hidden, arch->n_experts, top_k);
    /* Qwen MoE: one shared expert of its own width; DeepSeek: n_shared_experts experts of the
     * routed width, stored as one MLP of n x that width (same count). */
    int64_t shared_width = arch->shared_expert_ffn_hidden > 0
                               ? arch->shared_expert_ffn_hidden
                               : arch->n_shared_experts * arch->expert_ffn_hidden;
    if (shared_width > 0)
        add_ffn(list, arch, LP_EST_SHARED_EXPERTS, shared_width, 1, 1);
    if (arch->shared_expert_gate)
        add_matrix(list, LP_EST_SHARED_EXPERTS, "shared expert gate", 1, h);
}

int lp_est_layer_parts(const lp_arch *arch, int64_t layer, lp_est_part *parts)
{
    part_list list = {parts, 0, LP_EST_SPLIT_NONE, 0, false};
    add_attention(&list, arch, layer);
    add_layer_norms(&list, arch);
    if (lp_est_layer_is_moe(arch, layer))
        add_moe(&list, arch);
    else
        add_ffn(&list, arch, LP_EST_FFN, lp_est_layer_ffn_hidden(arch, layer), 1, 1);
    return list.n;
}

int lp_est_global_parts(const lp_arch *arch, lp_est_part *parts)
{
    part_list list = {parts, 0, LP_EST_SPLIT_NONE, 0, false};
    int64_t h = arch->hidden_size;
    /* OPT-350m: the vocabulary tables are embed_proj_dim wide, with bias-free projections to
     * and from hidden at either end of the stack. The first pipeline stage holds what comes
     * before the layers, the last what comes after; vocabulary tables are vocab-parallel, the
     * rest replicated (vLLM's OPT projections are ReplicatedLinear). */
    int64_t embed_dim = lp_est_embed_dim(arch);
    splitting(&list, LP_EST_SPLIT_VOCAB, arch->vocab_size);
    add_matrix(&list, LP_EST_EMBED, "token embedding", arch->vocab_size, embed_dim);
    splitting(&list, LP_EST_SPLIT_NONE, 0);
    if (embed_dim != h)
        add_matrix(&list, LP_EST_EMBED, "project_in", h, embed_dim);
    if (arch->pos_kind == LP_POS_LEARNED) {
        int64_t rows = arch->pos_table_rows > 0 ? arch->pos_table_rows
                                                : arch->n_ctx + arch->pos_offset;
        add_matrix(&list, LP_EST_POS_EMBED, "position embedding", rows, h);
    }
    add_matrix(&list, LP_EST_EMBED, "token type embedding", arch->n_token_types, h);
    if (arch->embed_norm)
        add_norm(&list, arch, LP_EST_NORMS, "embedding norm", h);
    list.head_side = true;
    if (embed_dim != h)
        add_matrix(&list, LP_EST_EMBED, "project_out", embed_dim, h);
    if (arch->final_norm)
        add_norm(&list, arch, LP_EST_NORMS, "final norm", h);
    if (!arch->tied_embeddings && !arch->encoder_only) {
        splitting(&list, LP_EST_SPLIT_VOCAB, arch->vocab_size);
        add_matrix(&list, LP_EST_LM_HEAD, "lm_head", arch->vocab_size, embed_dim);
        if (arch->bias_lm_head)
            add_vector(&list, LP_EST_LM_HEAD, "lm_head bias", arch->vocab_size);
        splitting(&list, LP_EST_SPLIT_NONE, 0);
    }
    if (arch->pooler) {
        add_matrix(&list, LP_EST_POOLER, "pooler", h, h);
        add_vector(&list, LP_EST_POOLER, "pooler bias", h);
    }
    return list.n;
}

static int mtp_extra_parts(const lp_arch *arch, lp_est_part *parts)
{
    /* DeepSeek V3 MTP module: enorm, hnorm, eh_proj [hidden, 2 hidden], its decoder layer and a
     * final norm; the embedding and output head are shared with the main model. */
    part_list list = {parts, 0, LP_EST_SPLIT_NONE, 0, false};
    int64_t h = arch->hidden_size;
    add_norm(&list, arch, LP_EST_NORMS, "mtp enorm", h);
    add_norm(&list, arch, LP_EST_NORMS, "mtp hnorm", h);
    add_matrix(&list, LP_EST_ATTN, "mtp eh_proj", h, 2 * h);
    add_norm(&list, arch, LP_EST_NORMS, "mtp final norm", h);
    return list.n;
}

static bool part_elems(const lp_est_part *part, int64_t *elems, int64_t *active_elems)
{
    int64_t one, all, active;
    if (!lp_mul_i64(part->rows, part->cols, &one) || !lp_mul_i64(one, part->copies, &all) ||
        !lp_mul_i64(one, part->active_copies, &active))
        return false;
    *elems = all;
    *active_elems = active;
    return true;
}

bool lp_est_part_bytes(const lp_est_part *part, const lp_est_dtype *dtype, uint64_t *bytes)
{
    uint64_t one;
    if (part->is_matrix) {
        if (!lp_est_dtype_bytes(dtype, (uint64_t)part->rows, (uint64_t)part->cols, &one))
            return false;
    } else if (dtype->vector_bytes > 0) {
        /* llama.cpp keeps 1-D tensors (norms, biases) in f32, GPTQ in f16 */
        if (!lp_mul_u64((uint64_t)part->rows, dtype->vector_bytes, &one))
            return false;
    } else if (!lp_est_dtype_bytes(dtype, 1, (uint64_t)part->rows, &one)) {
        return false;
    }
    return lp_mul_u64(one, (uint64_t)part->copies, bytes);
}

/* ---- counting ---------------------------------------------------------------------------- */

static lp_status check_arch(const lp_arch *arch, lp_error *err)
{
    const char *src = arch->source[0] ? arch->source : "config";
    if (arch->n_layers <= 0 || arch->n_layers > LP_MAX_LAYERS)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: n_layers %lld outside 1..%d", src,
                            (long long)arch->n_layers, LP_MAX_LAYERS);
    if (arch->hidden_size <= 0 || arch->vocab_size <= 0 || arch->n_heads <= 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: hidden_size %lld, vocab_size %lld, n_heads %lld must be > 0",
                            src, (long long)arch->hidden_size, (long long)arch->vocab_size,
                            (long long)arch->n_heads);
    if (!arch->mla && lp_est_head_dim(arch) <= 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: head_dim is 0 (hidden %lld / heads %lld)",
                            src, (long long)arch->hidden_size, (long long)arch->n_heads);
    if (arch->mla && (arch->kv_lora_rank <= 0 || arch->v_head_dim <= 0 ||
                      arch->qk_nope_head_dim + arch->qk_rope_head_dim <= 0))
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: MLA needs kv_lora_rank, v_head_dim and qk head dims > 0 "
                            "(got %lld, %lld, %lld + %lld)",
                            src, (long long)arch->kv_lora_rank, (long long)arch->v_head_dim,
                            (long long)arch->qk_nope_head_dim, (long long)arch->qk_rope_head_dim);
    if (arch->n_experts > 0 && arch->expert_ffn_hidden <= 0)
        for (int64_t l = 0; l < arch->n_layers; l++)
            if (lp_est_layer_is_moe(arch, l))
                return lp_error_set(err, LP_ERR_FORMAT,
                                    "%s: %lld experts but expert_ffn_hidden is %lld", src,
                                    (long long)arch->n_experts, (long long)arch->expert_ffn_hidden);
    return LP_OK;
}

static lp_status overflow(const lp_arch *arch, const char *what, lp_error *err)
{
    return lp_error_set(err, LP_ERR_RANGE, "%s: %s overflows 64 bits",
                        arch->source[0] ? arch->source : "config", what);
}

/* Add the parts to totals; layer may be NULL. */
static lp_status sum_parts(const lp_arch *arch, const lp_est_part *parts, int n, int64_t *by_comp,
                           int64_t *active_by_comp, int64_t *matrix_params, lp_error *err)
{
    for (int i = 0; i < n; i++) {
        int64_t all, active;
        if (!part_elems(&parts[i], &all, &active) ||
            !lp_add_i64(by_comp[parts[i].comp], all, &by_comp[parts[i].comp]) ||
            !lp_add_i64(active_by_comp[parts[i].comp], active, &active_by_comp[parts[i].comp]))
            return overflow(arch, parts[i].name, err);
        if (parts[i].is_matrix && matrix_params &&
            !lp_add_i64(*matrix_params, all, matrix_params))
            return overflow(arch, "matrix parameters", err);
    }
    return LP_OK;
}

static lp_status total_of(const lp_arch *arch, const int64_t *by_comp, int64_t *total,
                          lp_error *err)
{
    int64_t sum = 0;
    for (int c = 0; c < LP_EST_COMPONENT_COUNT; c++)
        if (!lp_add_i64(sum, by_comp[c], &sum))
            return overflow(arch, "parameter total", err);
    *total = sum;
    return LP_OK;
}

lp_status lp_est_count_params(const lp_arch *arch, lp_est_params *out, lp_error *err)
{
    memset(out, 0, sizeof *out);
    lp_status st = check_arch(arch, err);
    if (st != LP_OK)
        return st;
    out->n_layers = arch->n_layers;
    lp_est_part parts[LP_EST_MAX_PARTS];
    for (int64_t l = 0; l < arch->n_layers && l < LP_MAX_LAYERS; l++) {
        lp_est_layer *layer = &out->layers[l];
        int64_t active_by_comp[LP_EST_COMPONENT_COUNT] = {0};
        int n = lp_est_layer_parts(arch, l, parts);
        st = sum_parts(arch, parts, n, layer->by_component, active_by_comp, &out->matrix_params,
                       err);
        if (st == LP_OK)
            st = total_of(arch, layer->by_component, &layer->params, err);
        if (st == LP_OK)
            st = total_of(arch, active_by_comp, &layer->active_params, err);
        if (st != LP_OK)
            return st;
        for (int c = 0; c < LP_EST_COMPONENT_COUNT; c++)
            if (!lp_add_i64(out->by_component[c], layer->by_component[c], &out->by_component[c]) ||
                !lp_add_i64(out->active_by_component[c], active_by_comp[c],
                            &out->active_by_component[c]))
                return overflow(arch, "parameter total", err);
        layer->moe = lp_est_layer_is_moe(arch, l);
        layer->window = lp_est_layer_window(arch, l);
        layer->kv_heads = arch->mla ? 1 : lp_est_layer_kv_heads(arch, l);
        layer->kv_values_per_token = layer_kv_values(arch, l);
        layer->n_heads = arch->n_heads;
        layer->attn_qk_dim = arch->mla ? arch->qk_nope_head_dim + arch->qk_rope_head_dim
                                       : lp_est_head_dim(arch);
        layer->attn_v_dim = arch->mla ? arch->v_head_dim : lp_est_head_dim(arch);
    }
    int n = lp_est_global_parts(arch, parts);
    st = sum_parts(arch, parts, n, out->by_component, out->active_by_component,
                   &out->matrix_params, err);
    if (st == LP_OK)
        st = total_of(arch, out->by_component, &out->total, err);
    if (st == LP_OK)
        st = total_of(arch, out->active_by_component, &out->active, err);
    if (st != LP_OK)
        return st;

    if (arch->n_mtp_layers > 0) {
        /* each module is a decoder layer like the last one plus its own glue */
        int64_t by_comp[LP_EST_COMPONENT_COUNT] = {0}, act[LP_EST_COMPONENT_COUNT] = {0};
        int64_t one = 0;
        int64_t last = arch->n_layers - 1 < LP_MAX_LAYERS ? arch->n_layers - 1 : 0;
        n = mtp_extra_parts(arch, parts);
        st = sum_parts(arch, parts, n, by_comp, act, NULL, err);
        if (st == LP_OK)
            st = total_of(arch, by_comp, &one, err);
        if (st != LP_OK)
            return st;
        if (!lp_add_i64(one, out->layers[last].params, &one) ||
            !lp_mul_i64(one, arch->n_mtp_layers, &out->mtp))
            return overflow(arch, "MTP parameters", err);
    }
    return LP_OK;
}

lp_status lp_est_weight_bytes(const lp_arch *arch, const lp_est_dtype *dtype, uint64_t *bytes,
                              uint64_t *experts_bytes, lp_error *err)
{
    lp_status st = check_arch(arch, err);
    if (st != LP_OK)
        return st;
    lp_est_part parts[LP_EST_MAX_PARTS];
    uint64_t total = 0, experts = 0;
    for (int64_t l = -1; l < arch->n_layers; l++) {
        int n = l < 0 ? lp_est_global_parts(arch, parts) : lp_est_layer_parts(arch, l, parts);
        for (int i = 0; i < n; i++) {
            uint64_t b;
            if (!lp_est_part_bytes(&parts[i], dtype, &b) || !lp_add_u64(total, b, &total))
                return overflow(arch, "weight bytes", err);
            if (parts[i].comp == LP_EST_EXPERTS && !lp_add_u64(experts, b, &experts))
                return overflow(arch, "weight bytes", err);
        }
    }
    *bytes = total;
    if (experts_bytes)
        *experts_bytes = experts;
    return LP_OK;
}

lp_status lp_est_kv_bytes(const lp_arch *arch, const lp_est_dtype *kv_dtype, int64_t batch,
                          int64_t seq, uint64_t *bytes, lp_error *err)
{
    lp_status st = check_arch(arch, err);
    if (st != LP_OK)
        return st;
    if (batch < 0 || seq < 0)
        return lp_error_set(err, LP_ERR_RANGE, "batch %lld and seq %lld must be >= 0",
                            (long long)batch, (long long)seq);
    uint64_t total = 0;
    for (int64_t l = 0; l < arch->n_layers; l++) {
        uint64_t per_token, layer_bytes;
        int64_t window = lp_est_layer_window(arch, l);
        uint64_t tokens = (uint64_t)(window > 0 && window < seq ? window : seq);
        if (!lp_est_layer_kv_bytes_per_token(arch, l, kv_dtype, &per_token) ||
            !lp_mul_u64(per_token, tokens, &layer_bytes) ||
            !lp_mul_u64(layer_bytes, (uint64_t)batch, &layer_bytes) ||
            !lp_add_u64(total, layer_bytes, &total))
            return lp_error_set(err, LP_ERR_RANGE,
                                "KV cache for batch %lld x seq %lld overflows 64 bits",
                                (long long)batch, (long long)seq);
    }
    *bytes = total;
    return LP_OK;
}

void lp_est_warn(lp_est_report *rep, const char *code, const char *fmt, ...)
{
    if (rep->n_warnings >= LP_EST_MAX_WARNINGS)
        return;
    lp_est_warning *w = &rep->warnings[rep->n_warnings++];
    snprintf(w->code, sizeof w->code, "%s", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->msg, sizeof w->msg, fmt, ap);
    va_end(ap);
}
