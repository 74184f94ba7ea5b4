/* Binds the tensor catalogue to a runnable model: finds each family's tensors by role, checks
 * their shapes against the arch, and computes the RoPE frequencies. */
#include "trace/trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/checked.h"
#include "inspect/formats/quant.h"
#include "trace/forward/model_internal.h"

#define LP_PI 3.14159265358979323846

/* Find a tensor for (role, layer, expert). Falls back to a tensor stacked over layers
 * ([n_layers, ...], llama2.c style) or over experts (GGUF's fused *_exps); *slice is the index
 * into that outer dimension, or -1 when the tensor is the thing itself. */
static const lp_tensor *find_tensor(const lp_model *m, lp_role role, int layer, int expert,
                                    bool is_bias, int64_t *slice)
{
    *slice = -1;
    const lp_tensor *t = lp_weights_find(m->weights, role, layer, expert, is_bias);
    if (t)
        return t;
    if (expert >= 0) {
        t = lp_weights_find(m->weights, role, layer, -1, is_bias);
        if (t && t->n_dims >= 2 && t->shape[0] == m->arch.n_experts) {
            *slice = expert;
            return t;
        }
    }
    if (layer >= 0 && expert < 0) {
        t = lp_weights_find(m->weights, role, -1, -1, is_bias);
        if (t && t->n_dims >= 2 && t->shape[0] == m->arch.n_layers) {
            *slice = layer;
            return t;
        }
    }
    return NULL;
}

static const char *where(char *buf, size_t size, lp_role role, int layer, int expert)
{
    if (expert >= 0)
        snprintf(buf, size, "%s (layer %d, expert %d)", lp_role_name(role), layer, expert);
    else if (layer >= 0)
        snprintf(buf, size, "%s (layer %d)", lp_role_name(role), layer);
    else
        snprintf(buf, size, "%s", lp_role_name(role));
    return buf;
}

/* The dtypes lp_linear computes with; refused at binding so the message names the tensor. */
static lp_status check_matrix_dtype(const lp_model *m, const lp_tensor *t, lp_error *err)
{
    bool is_quant = lp_dtype_get(t->dtype)->is_quant;
    bool dtype_ok = t->dtype == LP_DTYPE_F32 || t->dtype == LP_DTYPE_F16 ||
                    t->dtype == LP_DTYPE_BF16 || (is_quant && lp_dequantize_supported(t->dtype));
    if (!dtype_ok)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: tensor '%s': dtype %s is not supported by the forward pass (f32, "
                            "f16, bf16 and GGUF block types)",
                            lp_weights_path(m->weights), t->name, lp_dtype_name(t->dtype));
    if (t->transposed && is_quant)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: tensor '%s': transposed %s weights",
                            lp_weights_path(m->weights), t->name, lp_dtype_name(t->dtype));
    return LP_OK;
}

/* Bytes of one stored row and where matrix `slice` of a stacked tensor starts (0 when the tensor
 * is the matrix itself), checked against the tensor's size. */
static lp_status locate_matrix(const lp_model *m, const lp_tensor *t, int64_t slice,
                               int64_t stored_rows, int64_t stored_cols, uint64_t *row_bytes,
                               uint64_t *offset, lp_error *err)
{
    uint64_t matrix_bytes;
    if (!lp_dtype_bytes_for(t->dtype, (uint64_t)stored_cols, row_bytes) ||
        !lp_mul_u64(*row_bytes, (uint64_t)stored_rows, &matrix_bytes))
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': rows of %lld %s values are not whole blocks",
                            lp_weights_path(m->weights), t->name, (long long)stored_cols,
                            lp_dtype_name(t->dtype));
    *offset = 0;
    if (slice >= 0 && !lp_mul_u64(matrix_bytes, (uint64_t)slice, offset))
        return lp_error_set(err, LP_ERR_RANGE, "%s: tensor '%s': slice offset overflows",
                            lp_weights_path(m->weights), t->name);
    if (*offset + matrix_bytes > t->n_bytes)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': %llu bytes, slice %lld needs %llu",
                            lp_weights_path(m->weights), t->name, (unsigned long long)t->n_bytes,
                            (long long)slice, (unsigned long long)(*offset + matrix_bytes));
    return LP_OK;
}

/* A weight matrix view [rows = out, cols = in]. rows/cols <= 0 means "any". */
static lp_status bind_matrix(lp_model *m, lp_role role, int layer, int expert, int64_t rows,
                             int64_t cols, bool required, lp_matrix *out, bool *found,
                             lp_error *err)
{
    char buf[96];
    int64_t slice;
    const lp_tensor *t = find_tensor(m, role, layer, expert, false, &slice);
    memset(out, 0, sizeof *out);
    if (found)
        *found = t != NULL;
    if (!t) {
        bool paired = false; /* gpt-oss's MXFP4 experts: a _blocks + _scales pair */
        lp_status st = lp_mxfp4_pair_bind(m, role, layer, expert, rows, cols, out, &paired, err);
        if (st == LP_OK && paired && !lp_block_list_adopt(&m->owned, (void *)out->data))
            st = lp_error_set(err, LP_ERR_NOMEM, "out of memory binding %s",
                              where(buf, sizeof buf, role, layer, expert));
        if (found)
            *found = paired;
        if (st != LP_OK || paired || !required)
            return st;
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor %s not found",
                            lp_weights_path(m->weights), where(buf, sizeof buf, role, layer, expert));
    }
    int inner = slice >= 0 ? 1 : 0; /* first matrix dim */
    if (t->n_dims != inner + 2)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': %d dimensions, expected %d",
                            lp_weights_path(m->weights), t->name, t->n_dims, inner + 2);
    int64_t stored_rows = t->shape[inner], stored_cols = t->shape[inner + 1];
    int64_t r = t->transposed ? stored_cols : stored_rows;
    int64_t c = t->transposed ? stored_rows : stored_cols;
    if ((rows > 0 && r != rows) || (cols > 0 && c != cols))
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': shape [%lld, %lld] (out, in), expected [%lld, %lld]",
                            lp_weights_path(m->weights), t->name, (long long)r, (long long)c,
                            (long long)rows, (long long)cols);
    uint64_t row_bytes = 0, offset = 0;
    lp_status st = check_matrix_dtype(m, t, err);
    if (st == LP_OK)
        st = locate_matrix(m, t, slice, stored_rows, stored_cols, &row_bytes, &offset, err);
    if (st != LP_OK)
        return st;
    /* Stride between stored rows: for a transposed (Conv1D) tensor these are input rows. */
    lp_matrix view = {t->dtype, (const uint8_t *)t->data + offset, r, c, row_bytes, t->transposed};
    *out = view;
    return LP_OK;
}

/* n floats the model owns, converted from rows [row, row + n_rows) of t; *out set on success. */
static lp_status own_rows_f32(lp_model *m, const lp_tensor *t, int64_t row, int64_t n_rows,
                              int64_t n, float **out, lp_error *err)
{
    float *v = lp_block_list_alloc(&m->owned, (size_t)n * sizeof *v);
    if (!v)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory binding '%s'", t->name);
    lp_status st = lp_tensor_rows_f32(t, row, n_rows, v, err);
    if (st == LP_OK)
        *out = v;
    return st;
}

/* A 1-D vector (norm weight, bias) of n floats, converted once. Stacked [n_layers, n] works. */
static lp_status bind_vector(lp_model *m, lp_role role, int layer, bool is_bias, int64_t n,
                             bool required, float **out, lp_error *err)
{
    char buf[96];
    int64_t slice;
    *out = NULL;
    const lp_tensor *t = find_tensor(m, role, layer, -1, is_bias, &slice);
    if (!t) {
        if (!required)
            return LP_OK;
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor %s%s not found",
                            lp_weights_path(m->weights), where(buf, sizeof buf, role, layer, -1),
                            is_bias ? " bias" : "");
    }
    /* A vector is one tensor of n values in any shape (per-head norms come as [heads,
     * head_dim]), or row `slice` of a stack of them. */
    int64_t len = t->shape[t->n_dims - 1];
    bool fits = slice >= 0 ? len == n && t->n_elements == len * t->shape[0]
                           : t->n_elements == n && len > 0;
    if (!fits)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': %lld values, expected %lld",
                            lp_weights_path(m->weights), t->name, (long long)t->n_elements,
                            (long long)n);
    return slice >= 0 ? own_rows_f32(m, t, slice, 1, n, out, err)
                      : own_rows_f32(m, t, 0, n / len, n, out, err);
}

static lp_status bind_norm(lp_model *m, lp_role role, int layer, int64_t n, bool required,
                           lp_norm_weights *out, lp_error *err)
{
    memset(out, 0, sizeof *out);
    lp_status st = bind_vector(m, role, layer, false, n, required, &out->weight, err);
    if (st != LP_OK)
        return st;
    out->present = out->weight != NULL;
    if (out->present && m->arch.norm_kind == LP_NORM_LAYER)
        st = bind_vector(m, role, layer, true, n, false, &out->bias, err);
    return st;
}

/* Families whose block shape is proven against the tests' reference forward; a new piece of the
 * block description stays refused for the others until their family is tested. */
static const char *const PARALLEL_TESTED[] = {"gpt_neox", "phi", "gptj", "stablelm", "falcon",
                                              NULL};
static const char *const ALIBI_TESTED[] = {"falcon", "bloom", "mpt", NULL};
static const char *const EMBED_NORM_TESTED[] = {"bloom", NULL};
static const char *const POST_NORM_TESTED[] = {"opt", NULL}; /* and projected embeddings */
static const char *const LONGROPE_TESTED[] = {"phi3", NULL};
static const char *const OLMO2_TESTED[] = {"olmo2", NULL}; /* output-only norms */
static const char *const QK_NORM_WHOLE_TESTED[] = {"olmo2", "mpt", NULL}; /* MPT qk_ln */

static bool family_tested(const char *family, const char *const *tested)
{
    for (size_t i = 0; tested[i]; i++)
        if (strcmp(family, tested[i]) == 0)
            return true;
    return false;
}

/* The first piece of the arch's graph this pass does not have, or NULL: refused rather than
 * computed wrong. */
static const char *missing_piece(const lp_arch *a)
{
    if (a->pos_kind == LP_POS_ALIBI && !family_tested(a->family, ALIBI_TESTED))
        return "ALiBi positions";
    if (a->parallel_block && !family_tested(a->family, PARALLEL_TESTED))
        return "parallel attention/MLP blocks";
    if ((a->no_input_norm && !family_tested(a->family, OLMO2_TESTED)) ||
        (a->qk_norm_full && !family_tested(a->family, QK_NORM_WHOLE_TESTED)) ||
        (a->embed_norm && !family_tested(a->family, EMBED_NORM_TESTED)) ||
        ((a->post_norm || a->embed_proj_dim > 0) && !family_tested(a->family, POST_NORM_TESTED)))
        return "this norm placement";
    if (a->pos_kind == LP_POS_ROPE && a->rope_scaling.kind == LP_ROPE_SCALING_LONGROPE &&
        !family_tested(a->family, LONGROPE_TESTED))
        return "longrope scaling";
    return NULL;
}

static lp_status check_supported(const lp_arch *a, const char *path, lp_error *err)
{
    /* Families that are not transformer decoders (state-space and recurrent layers), whatever
     * their flags say. */
    static const char *const refused[] = {"falcon_h1", "mamba", "rwkv", NULL};
    for (size_t i = 0; refused[i]; i++)
        if (strcmp(a->family, refused[i]) == 0)
            return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: family '%s' is not supported by trace",
                                path, a->family);
    const char *missing = missing_piece(a);
    if (missing)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: %s (%s): not supported by trace", path,
                            missing, a->family);
    if (a->pos_kind == LP_POS_ROPE && a->rope_scaling.kind == LP_ROPE_SCALING_LONGROPE &&
        a->rope_scaling.n_factors != a->rope_dim / 2)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: longrope needs short_factor and long_factor of rope_dim / 2 = %lld "
                            "values, has %lld",
                            path, (long long)(a->rope_dim / 2), (long long)a->rope_scaling.n_factors);
    if (a->pos_kind == LP_POS_ROPE && (a->rope_dim <= 0 || a->rope_dim % 2 != 0 ||
                                       a->rope_dim > a->head_dim))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: rope_dim %lld must be even and <= head_dim %lld",
                            path, (long long)a->rope_dim, (long long)a->head_dim);
    if (a->n_layers <= 0 || a->n_layers > LP_MAX_LAYERS || a->n_heads <= 0 || a->head_dim <= 0 ||
        a->hidden_size <= 0 || a->vocab_size <= 0)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: arch incomplete (layers %lld, heads %lld, head_dim %lld, hidden %lld, "
                            "vocab %lld)",
                            path, (long long)a->n_layers, (long long)a->n_heads,
                            (long long)a->head_dim, (long long)a->hidden_size,
                            (long long)a->vocab_size);
    return LP_OK;
}

lp_block_desc lp_block_of(const lp_arch *a)
{
    lp_block_desc b;
    memset(&b, 0, sizeof b);
    b.residual = a->post_norm        ? LP_RESIDUAL_POST_NORM
                 : a->parallel_block ? LP_RESIDUAL_PARALLEL
                                     : LP_RESIDUAL_SEQUENTIAL;
    b.input_norms = !a->no_input_norm && !a->post_norm;
    b.shared_input_norm = a->parallel_block && !a->parallel_two_norms;
    b.post_attn_norm = a->post_attn_norm;
    b.post_ffn_norm = a->post_ffn_norm;
    b.qk_norm = a->qk_norm_full       ? LP_QK_NORM_WHOLE
                : a->qk_norm_per_head ? LP_QK_NORM_EACH
                : a->qk_norm          ? LP_QK_NORM_SHARED
                                      : LP_QK_NORM_NONE;
    b.positions = a->pos_kind;
    /* Falcon adds the bias to q.k and scales the sum (modeling_falcon.py: (scores + alibi) *
     * inv_norm_factor); BLOOM and MPT add it to the scaled scores. */
    b.alibi_scale = strcmp(a->family, "falcon") == 0 && a->head_dim > 0
                        ? 1.0 / sqrt((double)a->head_dim)
                        : 1.0;
    b.qkv_clip = a->qkv_clip;
    b.embed_norm = a->embed_norm;
    b.embed_dim = a->embed_proj_dim > 0 ? a->embed_proj_dim : a->hidden_size;
    b.attn_sinks = a->attn_sinks;
    /* gpt-oss (modeling_gpt_oss.py GptOssExperts): alpha 1.702 is a constant there, the limit
     * its config's swiglu_limit */
    bool oss = strcmp(a->family, "gpt_oss") == 0;
    b.glu = a->swiglu_limit > 0 ? LP_GLU_CLAMPED_SWIGLU : LP_GLU_PLAIN;
    b.glu_alpha = b.glu == LP_GLU_CLAMPED_SWIGLU ? 1.702 : 0.0;
    b.glu_limit = a->swiglu_limit;
    b.gate_up_interleaved = oss;
    return b;
}

lp_qkv_layout lp_qkv_layout_of(const lp_arch *a, lp_weights_format format)
{
    /* Hugging Face's Falcon, GPT-NeoX and BLOOM (and InternLM2's wqkv) keep q, k and v of a kv
     * group together; llama.cpp's converters reorder them into q | k | v, as GPT-2 stores. */
    static const char *const grouped[] = {"falcon", "gpt_neox", "bloom", "internlm2", NULL};
    for (size_t i = 0; format == LP_FORMAT_SAFETENSORS && grouped[i]; i++)
        if (strcmp(a->family, grouped[i]) == 0)
            return LP_QKV_GROUPED;
    return LP_QKV_CONCAT;
}

void lp_alibi_slopes(int64_t n_heads, double max_bias, double *slopes)
{
    int64_t p = 1;
    while (p * 2 <= n_heads)
        p *= 2;
    for (int64_t h = 0; h < n_heads; h++)
        slopes[h] = h < p ? pow(2.0, -max_bias * (double)(h + 1) / (double)p)
                          : pow(2.0, -max_bias * (double)(2 * (h - p) + 1) / (double)(2 * p));
}

lp_layer_shape lp_layer_shape_of(const lp_arch *a, int l)
{
    lp_layer_shape ls;
    ls.n_kv_heads = a->layer_kv_heads[l] > 0 ? a->layer_kv_heads[l] : a->n_kv_heads;
    ls.q_dim = a->n_heads * a->head_dim;
    ls.kv_dim = ls.n_kv_heads * a->head_dim;
    if (a->mla) {
        /* every head has its own latent key and value; outputs are v_head_dim wide */
        ls.n_kv_heads = a->n_heads;
        ls.q_dim = a->n_heads * (a->v_head_dim > a->head_dim ? a->v_head_dim : a->head_dim);
        ls.kv_dim = a->n_heads * a->head_dim;
    }
    ls.moe = a->n_experts > 0 && a->layer_moe[l];
    ls.shared_ffn = 0;
    if (ls.moe) {
        ls.ffn_hidden = a->expert_ffn_hidden > 0 ? a->expert_ffn_hidden : a->ffn_hidden;
        /* Qwen MoE: one shared expert of its own width; DeepSeek: n_shared_experts of the
         * routed width, one MLP as transformers builds it */
        ls.shared_ffn = a->shared_expert_ffn_hidden > 0 ? a->shared_expert_ffn_hidden
                                                        : a->n_shared_experts * ls.ffn_hidden;
    } else
        ls.ffn_hidden = a->layer_ffn_hidden[l] > 0 ? a->layer_ffn_hidden[l] : a->ffn_hidden;
    return ls;
}

/* A q or k norm of n values (see lp_qk_norm_kind): one tensor of n values, or, for one norm per
 * head, one [head_dim] tensor per head (Hugging Face's StableLM keeps them as norms.H, which the
 * catalogue gives the head as its expert index). */
static lp_status bind_qk_norm(lp_model *m, lp_role role, int l, int64_t n, int64_t n_heads,
                              float **weight, float **bias, lp_error *err)
{
    const lp_arch *a = &m->arch;
    int64_t hd = a->head_dim;
    bool each = m->block.qk_norm == LP_QK_NORM_EACH;
    bool has_bias = a->norm_kind == LP_NORM_LAYER;
    if (!each || lp_weights_find(m->weights, role, l, -1, false)) {
        lp_status st = bind_vector(m, role, l, false, n, true, weight, err);
        if (st == LP_OK && has_bias)
            st = bind_vector(m, role, l, true, n, false, bias, err);
        return st;
    }
    *weight = lp_block_list_alloc(&m->owned, (size_t)n * sizeof **weight);
    if (!*weight)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory binding %s", lp_role_name(role));
    for (int h = 0; h < n_heads; h++) {
        char buf[96];
        int64_t slice;
        const lp_tensor *t = find_tensor(m, role, l, h, false, &slice);
        if (!t || t->n_elements != hd || slice >= 0)
            return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor %s of %lld values not found",
                                lp_weights_path(m->weights), where(buf, sizeof buf, role, l, h),
                                (long long)hd);
        lp_status st = lp_tensor_rows_f32(t, 0, 1, *weight + h * hd, err);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

/* The q and k norms the block description asks for. */
static lp_status bind_qk_norms(lp_model *m, int l, lp_layer_weights *L, lp_error *err)
{
    int64_t hd = m->arch.head_dim, nq = hd, nk = hd;
    if (m->block.qk_norm == LP_QK_NORM_NONE)
        return LP_OK;
    if (m->block.qk_norm != LP_QK_NORM_SHARED) {
        nq = L->q_dim;
        nk = L->kv_dim;
    }
    lp_status st = bind_qk_norm(m, LP_ROLE_ATTN_Q_NORM, l, nq, m->arch.n_heads, &L->q_norm,
                                &L->q_norm_bias, err);
    if (st != LP_OK)
        return st;
    return bind_qk_norm(m, LP_ROLE_ATTN_K_NORM, l, nk, L->n_kv_heads, &L->k_norm,
                        &L->k_norm_bias, err);
}

/* q, k, v (or the fused qkv, in the layout its format stores) with their biases, the q/k norms,
 * o. */
static lp_status bind_attention(lp_model *m, int l, lp_layer_weights *L, lp_error *err)
{
    const lp_arch *a = &m->arch;
    int64_t hidden = a->hidden_size;
    bool found;
    lp_status st;
    if ((st = bind_matrix(m, LP_ROLE_ATTN_Q, l, -1, L->q_dim, hidden, false, &L->q, &found, err)))
        return st;
    if (found) {
        L->qkv_layout = LP_QKV_SEPARATE;
        if ((st = bind_matrix(m, LP_ROLE_ATTN_K, l, -1, L->kv_dim, hidden, true, &L->k, NULL, err)) ||
            (st = bind_matrix(m, LP_ROLE_ATTN_V, l, -1, L->kv_dim, hidden, true, &L->v, NULL, err)) ||
            (st = bind_vector(m, LP_ROLE_ATTN_Q, l, true, L->q_dim, false, &L->q_bias, err)) ||
            (st = bind_vector(m, LP_ROLE_ATTN_K, l, true, L->kv_dim, false, &L->k_bias, err)) ||
            (st = bind_vector(m, LP_ROLE_ATTN_V, l, true, L->kv_dim, false, &L->v_bias, err)))
            return st;
    } else {
        L->qkv_layout = lp_qkv_layout_of(a, lp_weights_format_of(m->weights));
        int64_t n = L->q_dim + 2 * L->kv_dim;
        if ((st = bind_matrix(m, LP_ROLE_ATTN_QKV, l, -1, n, hidden, true, &L->qkv, NULL, err)) ||
            (st = bind_vector(m, LP_ROLE_ATTN_QKV, l, true, n, false, &L->qkv_bias, err)))
            return st;
    }
    if ((st = bind_qk_norms(m, l, L, err)) ||
        (st = bind_matrix(m, LP_ROLE_ATTN_O, l, -1, hidden, L->q_dim, true, &L->o, NULL, err)))
        return st;
    if (m->block.attn_sinks &&
        (st = bind_vector(m, LP_ROLE_ATTN_SINKS, l, false, a->n_heads, true, &L->sinks, err)))
        return st;
    return bind_vector(m, LP_ROLE_ATTN_O, l, true, hidden, false, &L->o_bias, err);
}

/* One [n_heads, a, b] tensor of layer l as n_heads matrices [out, in]: [b, a] read transposed
 * (attn_k_b's [kv_lora, nope] per head) or [a, b] as stored (attn_v_b's [v, kv_lora]). */
static lp_status bind_per_head(lp_model *m, lp_role role, int l, int64_t a_dim, int64_t b_dim,
                               bool transposed, lp_matrix **out, lp_error *err)
{
    int64_t nh = m->arch.n_heads;
    const lp_tensor *t = lp_weights_find(m->weights, role, l, -1, false);
    if (!t || t->n_dims != 3 || t->shape[0] != nh || t->shape[1] != a_dim || t->shape[2] != b_dim)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor %s (layer %d): want [%lld, %lld, %lld]",
                            lp_weights_path(m->weights), t ? t->name : lp_role_name(role), l,
                            (long long)nh, (long long)a_dim, (long long)b_dim);
    lp_status st = check_matrix_dtype(m, t, err);
    if (st == LP_OK && transposed && lp_dtype_get(t->dtype)->is_quant)
        st = lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: tensor '%s': %s per-head k_b is read "
                                                   "transposed, which quantized blocks do not allow",
                          lp_weights_path(m->weights), t->name, lp_dtype_name(t->dtype));
    *out = lp_block_list_alloc(&m->owned, (size_t)nh * sizeof **out);
    if (st == LP_OK && !*out)
        st = lp_error_set(err, LP_ERR_NOMEM, "out of memory binding '%s'", t->name);
    for (int64_t h = 0; st == LP_OK && h < nh; h++) {
        uint64_t row_bytes, offset;
        if ((st = locate_matrix(m, t, h, a_dim, b_dim, &row_bytes, &offset, err)) != LP_OK)
            break;
        lp_matrix view = {t->dtype, (const uint8_t *)t->data + offset,
                          transposed ? b_dim : a_dim, transposed ? a_dim : b_dim, row_bytes,
                          transposed};
        (*out)[h] = view;
    }
    return st;
}

/* llama.cpp's split kv_b: attn_k_b [n_heads, kv_lora, nope], attn_v_b [n_heads, v, kv_lora]. */
static lp_status bind_split_kv_b(lp_model *m, int l, lp_layer_weights *L, lp_error *err)
{
    const lp_arch *a = &m->arch;
    lp_status st = bind_per_head(m, LP_ROLE_ATTN_K_B, l, a->kv_lora_rank, a->qk_nope_head_dim,
                                 true, &L->k_b, err);
    if (st != LP_OK)
        return st;
    return bind_per_head(m, LP_ROLE_ATTN_V_B, l, a->v_head_dim, a->kv_lora_rank, false, &L->v_b,
                         err);
}

/* DeepSeek's latent attention: q (with or without its low-rank pair and their norm), the
 * latent kv projection, its norm, the per-head expansion and o. */
static lp_status bind_mla(lp_model *m, int l, lp_layer_weights *L, lp_error *err)
{
    const lp_arch *a = &m->arch;
    int64_t H = a->hidden_size, nh = a->n_heads, hd = a->head_dim, rope = a->qk_rope_head_dim;
    int64_t nope = a->qk_nope_head_dim, v = a->v_head_dim, qr = a->q_lora_rank;
    int64_t kvr = a->kv_lora_rank;
    lp_status st;
    if (nope + rope != hd || v <= 0 || kvr <= 0 || rope != a->rope_dim)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: MLA head dims: qk_nope_head_dim %lld + qk_rope_head_dim %lld must "
                            "be head_dim %lld (rope_dim %lld), v_head_dim %lld and kv_lora_rank "
                            "%lld positive",
                            a->source, (long long)nope, (long long)rope, (long long)hd,
                            (long long)a->rope_dim, (long long)v, (long long)kvr);
    if (qr > 0) {
        if ((st = bind_matrix(m, LP_ROLE_ATTN_Q_A, l, -1, qr, H, true, &L->q_a, NULL, err)) ||
            (st = bind_vector(m, LP_ROLE_ATTN_Q_A_NORM, l, false, qr, true, &L->q_a_norm, err)) ||
            (st = bind_matrix(m, LP_ROLE_ATTN_Q_B, l, -1, nh * hd, qr, true, &L->q_b, NULL, err)))
            return st;
    } else if ((st = bind_matrix(m, LP_ROLE_ATTN_Q, l, -1, nh * hd, H, true, &L->q, NULL, err))) {
        return st;
    }
    if ((st = bind_matrix(m, LP_ROLE_ATTN_KV_A, l, -1, kvr + rope, H, true, &L->kv_a, NULL, err)) ||
        (st = bind_vector(m, LP_ROLE_ATTN_KV_A_NORM, l, false, kvr, true, &L->kv_a_norm, err)) ||
        (st = bind_matrix(m, LP_ROLE_ATTN_O, l, -1, H, nh * v, true, &L->o, NULL, err)))
        return st;
    if (lp_weights_find(m->weights, LP_ROLE_ATTN_K_B, l, -1, false))
        return bind_split_kv_b(m, l, L, err);
    return bind_matrix(m, LP_ROLE_ATTN_KV_B, l, -1, nh * (nope + v), kvr, true, &L->kv_b, NULL,
                       err);
}

/* The shared expert's gate, up and down, and its sigmoid gate ([1, hidden] in Hugging Face's
 * files, [hidden] in llama.cpp's ffn_gate_inp_shexp: one vector either way). */
static lp_status bind_shared_expert(lp_model *m, int l, lp_layer_weights *L, lp_error *err)
{
    const lp_arch *a = &m->arch;
    int64_t S = lp_layer_shape_of(a, l).shared_ffn, hidden = a->hidden_size;
    lp_expert_weights *X = &L->shared;
    lp_status st;
    L->shared_ffn = S;
    if (S <= 0)
        return LP_OK;
    if ((st = bind_matrix(m, LP_ROLE_SHARED_GATE, l, -1, S, hidden, true, &X->gate, NULL, err)) ||
        (st = bind_matrix(m, LP_ROLE_SHARED_UP, l, -1, S, hidden, true, &X->up, NULL, err)) ||
        (st = bind_matrix(m, LP_ROLE_SHARED_DOWN, l, -1, hidden, S, true, &X->down, NULL, err)))
        return st;
    if (!a->shared_expert_gate)
        return LP_OK;
    return bind_vector(m, LP_ROLE_SHARED_EXPERT_GATE, l, false, hidden, true, &L->shared_gate,
                       err);
}

/* Row `expert` of a layer's [n_experts, n] bias (gpt-oss's gate_up_proj_bias, llama.cpp's
 * ffn_*_exps.bias), or an expert's own [n] one; NULL when there is none. */
static lp_status bind_expert_vector(lp_model *m, lp_role role, int l, int expert, int64_t n,
                                    float **out, lp_error *err)
{
    *out = NULL;
    const lp_tensor *t = lp_weights_find(m->weights, role, l, expert, true);
    int64_t row = 0;
    if (!t) {
        t = lp_weights_find(m->weights, role, l, -1, true);
        row = expert;
        if (!t)
            return LP_OK;
        if (t->n_dims != 2 || t->shape[0] != m->arch.n_experts || t->shape[1] != n)
            return lp_error_set(err, LP_ERR_FORMAT,
                                "%s: tensor '%s': want [%lld experts, %lld] expert biases",
                                lp_weights_path(m->weights), t->name,
                                (long long)m->arch.n_experts, (long long)n);
    } else if (t->n_elements != n) {
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': %lld values, expected %lld",
                            lp_weights_path(m->weights), t->name, (long long)t->n_elements,
                            (long long)n);
    }
    return own_rows_f32(m, t, row, 1, n, out, err);
}

/* An expert's biases: gate and up apart or the fused gate_up's, and down's. */
static lp_status bind_expert_biases(lp_model *m, int l, int e, bool apart, int64_t F,
                                    lp_expert_weights *X, lp_error *err)
{
    lp_status st;
    if (apart) {
        if ((st = bind_expert_vector(m, LP_ROLE_EXPERT_GATE, l, e, F, &X->gate_bias, err)) ||
            (st = bind_expert_vector(m, LP_ROLE_EXPERT_UP, l, e, F, &X->up_bias, err)))
            return st;
    } else if ((st = bind_expert_vector(m, LP_ROLE_EXPERT_GATE_UP, l, e, 2 * F, &X->gate_up_bias,
                                        err))) {
        return st;
    }
    return bind_expert_vector(m, LP_ROLE_EXPERT_DOWN, l, e, m->arch.hidden_size, &X->down_bias,
                              err);
}

/* The router and every expert's gate, up and down. */
static lp_status bind_experts(lp_model *m, int l, lp_layer_weights *L, lp_error *err)
{
    const lp_arch *a = &m->arch;
    int64_t E = a->n_experts, F = L->ffn_hidden, hidden = a->hidden_size;
    lp_status st;
    if (a->n_experts_per_tok <= 0 || a->n_experts_per_tok > E)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: %lld experts per token of %lld experts",
                            a->source, (long long)a->n_experts_per_tok, (long long)E);
    if (a->n_expert_groups > LP_FW_MAX_GROUPS || a->topk_groups > a->n_expert_groups ||
        (a->n_expert_groups > 1 && E % a->n_expert_groups != 0))
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: %lld experts in %lld groups, %lld of them searched (at most %d "
                            "groups that divide the experts)",
                            a->source, (long long)E, (long long)a->n_expert_groups,
                            (long long)a->topk_groups, LP_FW_MAX_GROUPS);
    if ((st = bind_matrix(m, LP_ROLE_ROUTER, l, -1, E, hidden, true, &L->router, NULL, err)) ||
        (st = bind_vector(m, LP_ROLE_ROUTER, l, true, E, false, &L->router_bias, err)))
        return st;
    if (a->router_score_bias) {
        /* HF's e_score_correction_bias has no .bias suffix, llama.cpp's exp_probs_b.bias has */
        bool gguf_name = lp_weights_find(m->weights, LP_ROLE_ROUTER_BIAS, l, -1, true) != NULL;
        if ((st = bind_vector(m, LP_ROLE_ROUTER_BIAS, l, gguf_name, E, true, &L->score_bias, err)))
            return st;
    }
    L->experts = lp_block_list_alloc(&m->owned, (size_t)E * sizeof *L->experts);
    if (!L->experts)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory binding %lld experts", (long long)E);
    memset(L->experts, 0, (size_t)E * sizeof *L->experts);
    for (int e = 0; e < E; e++) {
        lp_expert_weights *X = &L->experts[e];
        bool apart;
        if ((st = bind_matrix(m, LP_ROLE_EXPERT_GATE, l, e, F, hidden, false, &X->gate, &apart,
                              err)))
            return st;
        if (apart)
            st = bind_matrix(m, LP_ROLE_EXPERT_UP, l, e, F, hidden, true, &X->up, NULL, err);
        else
            st = bind_matrix(m, LP_ROLE_EXPERT_GATE_UP, l, e, 2 * F, hidden, true, &X->gate_up,
                             NULL, err);
        if (st || (st = bind_matrix(m, LP_ROLE_EXPERT_DOWN, l, e, hidden, F, true, &X->down, NULL,
                                    err)))
            return st;
        if (a->bias_mlp && (st = bind_expert_biases(m, l, e, apart, F, X, err)))
            return st;
    }
    return bind_shared_expert(m, l, L, err);
}

/* A gated FFN's gate and up: apart (with their biases), fused as gate_up, or fused and stored
 * as ffn_up of 2 ffn rows (llama.cpp's phi3). */
static lp_status bind_gate_up(lp_model *m, int l, lp_layer_weights *L, lp_error *err)
{
    int64_t F = L->ffn_hidden, hidden = m->arch.hidden_size;
    bool found;
    lp_status st;
    if ((st = bind_matrix(m, LP_ROLE_FFN_GATE, l, -1, F, hidden, false, &L->gate, &found, err)))
        return st;
    if (found) {
        if ((st = bind_matrix(m, LP_ROLE_FFN_UP, l, -1, F, hidden, true, &L->up, NULL, err)) ||
            (st = bind_vector(m, LP_ROLE_FFN_GATE, l, true, F, false, &L->gate_bias, err)))
            return st;
        return bind_vector(m, LP_ROLE_FFN_UP, l, true, F, false, &L->up_bias, err);
    }
    L->fused_gate_up = true;
    if ((st = bind_matrix(m, LP_ROLE_FFN_GATE_UP, l, -1, 2 * F, hidden, false, &L->gate_up,
                          &found, err)) ||
        found)
        return st;
    return bind_matrix(m, LP_ROLE_FFN_UP, l, -1, 2 * F, hidden, true, &L->gate_up, NULL, err);
}

/* A dense FFN: up alone (MLP) or gate and up; then down. */
static lp_status bind_dense_ffn(lp_model *m, int l, lp_layer_weights *L, lp_error *err)
{
    int64_t F = L->ffn_hidden, hidden = m->arch.hidden_size;
    lp_status st;
    if (m->arch.ffn_kind == LP_FFN_MLP) {
        if ((st = bind_matrix(m, LP_ROLE_FFN_UP, l, -1, F, hidden, true, &L->up, NULL, err)) ||
            (st = bind_vector(m, LP_ROLE_FFN_UP, l, true, F, false, &L->up_bias, err)))
            return st;
    } else if ((st = bind_gate_up(m, l, L, err))) {
        return st;
    }
    if ((st = bind_matrix(m, LP_ROLE_FFN_DOWN, l, -1, hidden, F, true, &L->down, NULL, err)))
        return st;
    return bind_vector(m, LP_ROLE_FFN_DOWN, l, true, hidden, false, &L->down_bias, err);
}

/* Layer l's four norms, each bound where the block description has it: the input norms (also
 * the post-add norms of a post-norm block; the FFN's own unless a parallel block shares one)
 * and the output norms. */
static lp_status bind_layer_norms(lp_model *m, int l, lp_layer_weights *L, lp_error *err)
{
    const lp_block_desc *b = &m->block;
    int64_t hidden = m->arch.hidden_size;
    bool inputs = b->input_norms || b->residual == LP_RESIDUAL_POST_NORM;
    lp_status st;
    if (inputs && (st = bind_norm(m, LP_ROLE_ATTN_NORM, l, hidden, true, &L->attn_norm, err)))
        return st;
    if (inputs && !b->shared_input_norm &&
        (st = bind_norm(m, LP_ROLE_FFN_NORM, l, hidden, true, &L->ffn_norm, err)))
        return st;
    if (b->post_attn_norm &&
        (st = bind_norm(m, LP_ROLE_ATTN_POST_NORM, l, hidden, true, &L->post_attn_norm, err)))
        return st;
    if (b->post_ffn_norm &&
        (st = bind_norm(m, LP_ROLE_FFN_POST_NORM, l, hidden, true, &L->post_ffn_norm, err)))
        return st;
    return LP_OK;
}

static lp_status bind_layer(lp_model *m, int l, lp_error *err)
{
    const lp_arch *a = &m->arch;
    lp_layer_weights *L = &m->layers[l];
    lp_layer_shape ls = lp_layer_shape_of(a, l);
    if (ls.n_kv_heads <= 0 || a->n_heads % ls.n_kv_heads != 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: layer %d: %lld kv heads do not divide %lld heads",
                            a->source, l, (long long)ls.n_kv_heads, (long long)a->n_heads);
    L->n_kv_heads = ls.n_kv_heads;
    L->q_dim = ls.q_dim;
    L->kv_dim = ls.kv_dim;
    L->ffn_hidden = ls.ffn_hidden;
    L->moe = ls.moe;
    L->window = a->layer_window[l];
    lp_status st;
    if ((st = bind_layer_norms(m, l, L, err)) ||
        (st = a->mla ? bind_mla(m, l, L, err) : bind_attention(m, l, L, err)))
        return st;
    return L->moe ? bind_experts(m, l, L, err) : bind_dense_ffn(m, l, L, err);
}

/* The token embedding ([vocab, embed_dim] at least), OPT's projections to and from it, the
 * learned position table and BLOOM's embedding norm. */
static lp_status bind_embeddings(lp_model *m, lp_error *err)
{
    const lp_arch *a = &m->arch;
    int64_t hidden = a->hidden_size, E = m->block.embed_dim;
    lp_status st;
    m->tok_embd = lp_weights_find(m->weights, LP_ROLE_TOKEN_EMBD, -1, -1, false);
    if (!m->tok_embd || m->tok_embd->n_dims != 2 || m->tok_embd->shape[1] != E ||
        m->tok_embd->shape[0] < a->vocab_size)
        return lp_error_set(err, LP_ERR_FORMAT,
                            m->tok_embd ? "%s: token embedding '%s' is not [vocab %lld, %lld]"
                                        : "%s: no token embedding tensor%s (vocab %lld, width %lld)",
                            lp_weights_path(m->weights), m->tok_embd ? m->tok_embd->name : "",
                            (long long)a->vocab_size, (long long)E);
    m->has_proj = E != hidden;
    if (m->has_proj &&
        ((st = bind_matrix(m, LP_ROLE_EMBD_PROJ_IN, -1, -1, hidden, E, true, &m->project_in, NULL,
                           err)) ||
         (st = bind_matrix(m, LP_ROLE_EMBD_PROJ_OUT, -1, -1, E, hidden, true, &m->project_out,
                           NULL, err))))
        return st;
    if (m->block.embed_norm &&
        (st = bind_norm(m, LP_ROLE_EMBD_NORM, -1, hidden, true, &m->embed_norm, err)))
        return st;
    if (a->pos_kind != LP_POS_LEARNED)
        return LP_OK;
    m->pos_embd = lp_weights_find(m->weights, LP_ROLE_POS_EMBD, -1, -1, false);
    if (!m->pos_embd || m->pos_embd->n_dims != 2 || m->pos_embd->shape[1] != hidden)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: learned position table missing or not "
                                                "[n, hidden %lld]",
                            lp_weights_path(m->weights), (long long)hidden);
    return LP_OK;
}

/* The final norm and the classifier (the embedding itself when tied) with its bias. */
static lp_status bind_output(lp_model *m, lp_error *err)
{
    const lp_arch *a = &m->arch;
    int64_t hidden = a->hidden_size, E = m->block.embed_dim;
    bool found;
    lp_status st;
    if ((st = bind_norm(m, LP_ROLE_OUTPUT_NORM, -1, hidden, a->final_norm, &m->out_norm, err)) ||
        (st = bind_matrix(m, LP_ROLE_LM_HEAD, -1, -1, a->vocab_size, E, false, &m->lm_head,
                          &found, err)))
        return st;
    if (!found) {
        /* Tied classifier: the embedding table itself (first vocab_size rows). */
        if ((st = bind_matrix(m, LP_ROLE_TOKEN_EMBD, -1, -1, -1, E, true, &m->lm_head, NULL,
                              err)))
            return st;
        m->lm_head.rows = a->vocab_size;
    }
    if (a->bias_lm_head)
        return bind_vector(m, LP_ROLE_LM_HEAD, -1, true, a->vocab_size, false, &m->lm_head_bias,
                           err);
    return LP_OK;
}

/* Each head's ALiBi slope, scaled as the family adds the bias. */
static lp_status bind_alibi(lp_model *m, lp_error *err)
{
    const lp_arch *a = &m->arch;
    if (m->block.positions != LP_POS_ALIBI)
        return LP_OK;
    double *slopes = lp_block_list_alloc(&m->owned, (size_t)a->n_heads * sizeof *slopes);
    m->alibi_slopes = lp_block_list_alloc(&m->owned, (size_t)a->n_heads * sizeof *m->alibi_slopes);
    if (!slopes || !m->alibi_slopes)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory for %lld ALiBi slopes",
                            (long long)a->n_heads);
    lp_alibi_slopes(a->n_heads, a->alibi_max_bias, slopes);
    for (int64_t h = 0; h < a->n_heads; h++)
        m->alibi_slopes[h] = (float)(slopes[h] * m->block.alibi_scale);
    return LP_OK;
}

/* The model over weights; owned_weights (the same weights, or NULL when the caller keeps them)
 * is the model's from the start, so every failure closes it with the model. */
static lp_status model_build(const lp_weights *weights, const lp_arch *arch,
                             lp_weights *owned_weights, lp_model **out, lp_error *err)
{
    *out = NULL;
    lp_model *m = calloc(1, sizeof *m);
    if (!m) {
        if (owned_weights)
            lp_weights_close(owned_weights);
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    }
    m->owned_weights = owned_weights;
    m->weights = weights;
    if (!arch)
        arch = lp_weights_arch(weights);
    lp_status st;
    if (arch)
        st = check_supported(arch, lp_weights_path(weights), err);
    else
        st = lp_error_set(err, LP_ERR_FORMAT,
                          "%s: no architecture found with the weights (config.json, GGUF "
                          "metadata or llama2.c header)",
                          lp_weights_path(weights));
    if (st != LP_OK) {
        lp_model_close(m);
        return st;
    }
    m->arch = *arch;
    m->block = lp_block_of(arch);
    m->layers = lp_block_list_alloc(&m->owned, (size_t)m->arch.n_layers * sizeof *m->layers);
    if (!m->layers)
        st = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    else
        memset(m->layers, 0, (size_t)m->arch.n_layers * sizeof *m->layers);
    if (st == LP_OK)
        st = bind_embeddings(m, err);
    for (int l = 0; l < m->arch.n_layers && st == LP_OK; l++)
        st = bind_layer(m, l, err);
    if (st == LP_OK)
        st = bind_output(m, err);
    if (st == LP_OK)
        st = bind_alibi(m, err);
    if (st != LP_OK) {
        lp_model_close(m);
        return st;
    }
    m->renorm_topk = m->arch.norm_topk_prob || strcmp(m->arch.family, "mixtral") == 0;
    *out = m;
    return LP_OK;
}

lp_status lp_model_from_weights(const lp_weights *weights, const lp_arch *arch, lp_model **out,
                                lp_error *err)
{
    return model_build(weights, arch, NULL, out, err);
}

lp_status lp_model_open(const char *path, lp_model **out, lp_error *err)
{
    lp_weights *weights;
    *out = NULL;
    lp_status st = lp_weights_open(path, &weights, err);
    if (st != LP_OK)
        return st;
    return model_build(weights, NULL, weights, out, err);
}

void lp_model_close(lp_model *model)
{
    if (!model)
        return;
    lp_block_list_free(&model->owned);
    if (model->owned_weights)
        lp_weights_close(model->owned_weights);
    free(model);
}

const lp_arch *lp_model_arch(const lp_model *model) { return &model->arch; }
const lp_weights *lp_model_weights(const lp_model *model) { return model->weights; }

/* HF's _compute_yarn_parameters helpers. */
static double yarn_get_mscale(double scale) { return scale <= 1.0 ? 1.0 : 0.1 * log(scale) + 1.0; }

static double yarn_correction_dim(double n_rot, double dim, double base, double max_pos)
{
    return dim * log(max_pos / (n_rot * 2.0 * LP_PI)) / (2.0 * log(base));
}

/* What scaling one call applies: the kind, factor and base, YaRN's ramp bounds. */
typedef struct rope_plan {
    lp_rope_scaling_kind kind;
    double base, factor, orig; /* orig: the context the scaling is measured against */
    double low, high;          /* YaRN: pairs below low extrapolate, above high interpolate */
    const double *ext;         /* longrope: the divisor of each pair's frequency */
} rope_plan;

/* Dynamic NTK: grow the base once the sequence outruns the context. HF measures against
 * max_position_embeddings here, not original_max_position_embeddings. */
static double dynamic_base(const lp_arch *a, const rope_plan *r, int64_t n_tokens)
{
    double ctx = a->n_ctx > 0 ? (double)a->n_ctx : r->orig, dim = (double)a->rope_dim;
    if (ctx <= 0)
        ctx = (double)n_tokens;
    double seq = (double)n_tokens > ctx ? (double)n_tokens : ctx;
    return r->base * pow(r->factor * seq / ctx - (r->factor - 1.0),
                         dim / (double)(a->rope_dim - 2 > 0 ? a->rope_dim - 2 : 1));
}

/* Longrope as transformers' _compute_longrope_parameters: the short factors while the call's
 * longest sequence fits the original context, the long ones beyond it; the attention factor as
 * given, else sqrt(1 + ln s / ln original) with s = max_position_embeddings / original (Phi-3
 * measures s so whenever it states original_max_position_embeddings), else the config's
 * factor. */
static lp_status plan_longrope(const lp_arch *a, int64_t n_tokens, rope_plan *r,
                               float *attn_factor)
{
    const lp_rope_scaling *s = &a->rope_scaling;
    double orig = s->original_ctx > 0 ? (double)s->original_ctx : (double)a->n_ctx;
    double scale = s->original_ctx > 0 && a->n_ctx > 0 ? (double)a->n_ctx / orig : s->factor;
    r->ext = (double)n_tokens > orig ? s->long_factor : s->short_factor;
    if (s->attention_factor > 0)
        *attn_factor = (float)s->attention_factor;
    else if (scale > 1.0 && orig > 1.0)
        *attn_factor = (float)sqrt(1.0 + log(scale) / log(orig));
    return LP_OK;
}

static lp_status plan_rope(const lp_arch *a, int64_t n_tokens, bool local, rope_plan *r,
                           float *attn_factor, lp_error *err)
{
    const lp_rope_scaling *s = &a->rope_scaling;
    r->base = local && a->rope_local_theta > 0 ? a->rope_local_theta : a->rope_theta;
    r->orig = s->original_ctx > 0 ? (double)s->original_ctx : (double)a->n_ctx;
    r->kind = local ? LP_ROPE_SCALING_NONE : s->kind;
    r->factor = s->factor;
    r->low = r->high = 0;
    *attn_factor = 1.0f;
    if (r->base <= 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: rope_theta %g must be positive", a->source,
                            r->base);
    r->ext = NULL;
    if (r->kind == LP_ROPE_SCALING_LONGROPE)
        return plan_longrope(a, n_tokens, r, attn_factor);
    /* YaRN without a factor: the ratio of the context to the original one (HF's fallback). */
    if (r->kind == LP_ROPE_SCALING_YARN && !(r->factor > 0) && s->original_ctx > 0 && a->n_ctx > 0)
        r->factor = (double)a->n_ctx / (double)s->original_ctx;
    if (r->kind != LP_ROPE_SCALING_NONE && !(r->factor > 0))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: rope_scaling.factor %g must be positive",
                            a->source, r->factor);
    if (r->kind == LP_ROPE_SCALING_DYNAMIC)
        r->base = dynamic_base(a, r, n_tokens);
    if (r->kind == LP_ROPE_SCALING_YARN) {
        double dim = (double)a->rope_dim;
        double beta_fast = s->beta_fast > 0 ? s->beta_fast : 32.0;
        double beta_slow = s->beta_slow > 0 ? s->beta_slow : 1.0;
        r->low = yarn_correction_dim(beta_fast, dim, r->base, r->orig);
        r->high = yarn_correction_dim(beta_slow, dim, r->base, r->orig);
        if (!s->yarn_unrounded) { /* transformers' truncate (default true), ggml always */
            r->low = floor(r->low);
            r->high = ceil(r->high);
        }
        if (r->low < 0) r->low = 0;
        if (r->high > dim - 1) r->high = dim - 1;
        if (r->low == r->high) r->high += 0.001;
        *attn_factor = (float)(s->attention_factor > 0 ? s->attention_factor
                                                       : yarn_get_mscale(r->factor));
    }
    return LP_OK;
}

/* Llama 3.1's scaling of one frequency: high frequencies unchanged, low ones divided by the
 * factor, a smooth blend between. */
static double llama3_freq(const lp_rope_scaling *s, double orig, double factor, double f)
{
    double low_f = s->low_freq_factor > 0 ? s->low_freq_factor : 1.0;
    double high_f = s->high_freq_factor > 0 ? s->high_freq_factor : 4.0;
    double low_wavelen = orig / low_f, high_wavelen = orig / high_f;
    double wavelen = 2.0 * LP_PI / f;
    if (wavelen < high_wavelen)
        return f;
    if (wavelen > low_wavelen)
        return f / factor;
    double smooth = (orig / wavelen - low_f) / (high_f - low_f);
    return (1.0 - smooth) * f / factor + smooth * f;
}

/* The inverse frequency of pair i under the plan. */
static double scaled_freq(const lp_arch *a, const rope_plan *r, int64_t i)
{
    double f = 1.0 / pow(r->base, (double)(2 * i) / (double)a->rope_dim);
    switch (r->kind) {
    case LP_ROPE_SCALING_LINEAR:
        return f / r->factor;
    case LP_ROPE_SCALING_LLAMA3:
        return llama3_freq(&a->rope_scaling, r->orig, r->factor, f);
    case LP_ROPE_SCALING_YARN: {
        double ramp = ((double)i - r->low) / (r->high - r->low);
        ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
        double extrapolation = 1.0 - ramp;
        return (f / r->factor) * (1.0 - extrapolation) + f * extrapolation;
    }
    case LP_ROPE_SCALING_LONGROPE:
        return f / r->ext[i];
    default:
        return f;
    }
}

lp_status lp_model_rope_freqs(const lp_model *model, int64_t n_tokens, bool local, float *inv_freq,
                              float *attn_factor, lp_error *err)
{
    const lp_arch *a = &model->arch;
    rope_plan r;
    lp_status st = plan_rope(a, n_tokens, local, &r, attn_factor, err);
    if (st != LP_OK)
        return st;
    for (int64_t i = 0; i < a->rope_dim / 2; i++)
        inv_freq[i] = (float)scaled_freq(a, &r, i);
    return LP_OK;
}
