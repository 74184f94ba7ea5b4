/* Binds the tensor catalogue to a runnable model: finds each family's tensors by role, checks
 * their shapes against the arch, and computes the RoPE frequencies. */
#include "trace/trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "inspect/formats/quant.h"
#include "trace/forward/model_internal.h"

#define LP_PI 3.14159265358979323846

static void *model_alloc(lp_model *m, size_t bytes)
{
    if (m->n_owned == m->cap_owned) {
        size_t cap = m->cap_owned ? m->cap_owned * 2 : 64;
        void **grown = realloc(m->owned, cap * sizeof *grown);
        if (!grown)
            return NULL;
        m->owned = grown;
        m->cap_owned = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p)
        m->owned[m->n_owned++] = p;
    return p;
}

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
        if (!required)
            return LP_OK;
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
    /* The dtypes lp_linear computes with; refused here so the message names the tensor. */
    bool dtype_ok = t->dtype == LP_DTYPE_F32 || t->dtype == LP_DTYPE_F16 ||
                    t->dtype == LP_DTYPE_BF16 ||
                    (lp_dtype_get(t->dtype)->is_quant && lp_dequantize_supported(t->dtype));
    if (!dtype_ok)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: tensor '%s': dtype %s is not supported by the forward pass (f32, "
                            "f16, bf16 and GGUF block types)",
                            lp_weights_path(m->weights), t->name, lp_dtype_name(t->dtype));
    if (t->transposed && lp_dtype_get(t->dtype)->is_quant)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: tensor '%s': transposed %s weights",
                            lp_weights_path(m->weights), t->name, lp_dtype_name(t->dtype));
    uint64_t row_bytes, matrix_bytes;
    if (!lp_dtype_bytes_for(t->dtype, (uint64_t)stored_cols, &row_bytes) ||
        !lp_mul_u64(row_bytes, (uint64_t)stored_rows, &matrix_bytes))
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensor '%s': rows of %lld %s values are not whole blocks",
                            lp_weights_path(m->weights), t->name, (long long)stored_cols,
                            lp_dtype_name(t->dtype));
    uint64_t offset = 0;
    if (slice >= 0 && !lp_mul_u64(matrix_bytes, (uint64_t)slice, &offset))
        return lp_error_set(err, LP_ERR_RANGE, "%s: tensor '%s': slice offset overflows",
                            lp_weights_path(m->weights), t->name);
    if (offset + matrix_bytes > t->n_bytes)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': %llu bytes, slice %lld needs %llu",
                            lp_weights_path(m->weights), t->name, (unsigned long long)t->n_bytes,
                            (long long)slice, (unsigned long long)(offset + matrix_bytes));
    out->dtype = t->dtype;
    out->data = (const uint8_t *)t->data + offset;
    out->rows = r;
    out->cols = c;
    /* Stride between stored rows: for a transposed (Conv1D) tensor these are input rows. */
    out->row_bytes = row_bytes;
    out->transposed = t->transposed;
    return LP_OK;
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
    int64_t len = t->shape[t->n_dims - 1];
    int64_t expect_elems = slice >= 0 ? len * t->shape[0] : len;
    if (len != n || t->n_elements != expect_elems)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tensor '%s': %lld values, expected %lld",
                            lp_weights_path(m->weights), t->name, (long long)t->n_elements,
                            (long long)n);
    float *v = model_alloc(m, (size_t)n * sizeof *v);
    if (!v)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory binding '%s'", t->name);
    lp_status st = lp_tensor_rows_f32(t, slice >= 0 ? slice : 0, 1, v, err);
    if (st != LP_OK)
        return st;
    *out = v;
    return LP_OK;
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

static lp_status check_supported(const lp_arch *a, const char *path, lp_error *err)
{
    /* Families whose graphs need pieces this pass does not have (attention sinks, clamped
     * SwiGLU, biased top-k softmax); refused rather than computed wrong. */
    static const char *const refused[] = {"gpt_oss", "gpt-oss", "falcon_h1", "mamba", "rwkv", NULL};
    for (size_t i = 0; refused[i]; i++)
        if (strcmp(a->family, refused[i]) == 0)
            return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: family '%s' is not supported by trace",
                                path, a->family);
    if (a->mla)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: multi-head latent attention (%s) is not supported by trace", path,
                            a->family);
    if (a->pos_kind == LP_POS_ALIBI)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: ALiBi positions (%s) are not supported",
                            path, a->family);
    if (a->parallel_block)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: parallel attention/MLP blocks (%s) are not supported", path,
                            a->family);
    if (a->n_shared_experts > 0 || a->shared_expert_ffn_hidden > 0 || a->router_score_bias)
        return lp_error_set(err, LP_ERR_UNSUPPORTED,
                            "%s: shared experts / biased routers (%s) are not supported", path,
                            a->family);
    if (a->no_input_norm || a->qk_norm_full || a->embed_norm || a->post_norm ||
        a->embed_proj_dim > 0)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: %s's norm placement is not supported",
                            path, a->family);
    if (a->pos_kind == LP_POS_ROPE && a->rope_scaling.kind == LP_ROPE_SCALING_LONGROPE)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: longrope scaling is not supported", path);
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

static lp_status bind_layer(lp_model *m, int l, lp_error *err)
{
    const lp_arch *a = &m->arch;
    lp_layer_weights *L = &m->layers[l];
    int64_t hidden = a->hidden_size;
    L->n_kv_heads = a->layer_kv_heads[l] > 0 ? a->layer_kv_heads[l] : a->n_kv_heads;
    if (L->n_kv_heads <= 0 || a->n_heads % L->n_kv_heads != 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: layer %d: %lld kv heads do not divide %lld heads",
                            a->source, l, (long long)L->n_kv_heads, (long long)a->n_heads);
    L->q_dim = a->n_heads * a->head_dim;
    L->kv_dim = L->n_kv_heads * a->head_dim;
    L->window = a->layer_window[l];
    lp_status st;

    if ((st = bind_norm(m, LP_ROLE_ATTN_NORM, l, hidden, true, &L->attn_norm, err)) != LP_OK)
        return st;
    bool found;
    if ((st = bind_matrix(m, LP_ROLE_ATTN_Q, l, -1, L->q_dim, hidden, false, &L->q, &found, err)) != LP_OK)
        return st;
    if (found) {
        if ((st = bind_matrix(m, LP_ROLE_ATTN_K, l, -1, L->kv_dim, hidden, true, &L->k, NULL, err)) ||
            (st = bind_matrix(m, LP_ROLE_ATTN_V, l, -1, L->kv_dim, hidden, true, &L->v, NULL, err)) ||
            (st = bind_vector(m, LP_ROLE_ATTN_Q, l, true, L->q_dim, false, &L->q_bias, err)) ||
            (st = bind_vector(m, LP_ROLE_ATTN_K, l, true, L->kv_dim, false, &L->k_bias, err)) ||
            (st = bind_vector(m, LP_ROLE_ATTN_V, l, true, L->kv_dim, false, &L->v_bias, err)))
            return st;
    } else {
        L->fused_qkv = true;
        int64_t n = L->q_dim + 2 * L->kv_dim;
        if ((st = bind_matrix(m, LP_ROLE_ATTN_QKV, l, -1, n, hidden, true, &L->qkv, NULL, err)) ||
            (st = bind_vector(m, LP_ROLE_ATTN_QKV, l, true, n, false, &L->qkv_bias, err)))
            return st;
    }
    if (a->qk_norm) {
        if ((st = bind_vector(m, LP_ROLE_ATTN_Q_NORM, l, false, a->head_dim, true, &L->q_norm, err)) ||
            (st = bind_vector(m, LP_ROLE_ATTN_K_NORM, l, false, a->head_dim, true, &L->k_norm, err)))
            return st;
    }
    if ((st = bind_matrix(m, LP_ROLE_ATTN_O, l, -1, hidden, L->q_dim, true, &L->o, NULL, err)) ||
        (st = bind_vector(m, LP_ROLE_ATTN_O, l, true, hidden, false, &L->o_bias, err)))
        return st;
    if (a->post_attn_norm &&
        (st = bind_norm(m, LP_ROLE_ATTN_POST_NORM, l, hidden, true, &L->post_attn_norm, err)))
        return st;
    if ((st = bind_norm(m, LP_ROLE_FFN_NORM, l, hidden, true, &L->ffn_norm, err)))
        return st;
    if (a->post_ffn_norm &&
        (st = bind_norm(m, LP_ROLE_FFN_POST_NORM, l, hidden, true, &L->post_ffn_norm, err)))
        return st;

    L->moe = a->n_experts > 0 && a->layer_moe[l];
    if (L->moe) {
        int64_t E = a->n_experts, F = a->expert_ffn_hidden > 0 ? a->expert_ffn_hidden : a->ffn_hidden;
        if (a->n_experts_per_tok <= 0 || a->n_experts_per_tok > E)
            return lp_error_set(err, LP_ERR_FORMAT, "%s: %lld experts per token of %lld experts",
                                a->source, (long long)a->n_experts_per_tok, (long long)E);
        L->ffn_hidden = F;
        if ((st = bind_matrix(m, LP_ROLE_ROUTER, l, -1, E, hidden, true, &L->router, NULL, err)) ||
            (st = bind_vector(m, LP_ROLE_ROUTER, l, true, E, false, &L->router_bias, err)))
            return st;
        L->experts = model_alloc(m, (size_t)E * sizeof *L->experts);
        if (!L->experts)
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory binding %lld experts", (long long)E);
        for (int e = 0; e < E; e++) {
            lp_expert_weights *X = &L->experts[e];
            if ((st = bind_matrix(m, LP_ROLE_EXPERT_GATE, l, e, F, hidden, true, &X->gate, NULL, err)) ||
                (st = bind_matrix(m, LP_ROLE_EXPERT_UP, l, e, F, hidden, true, &X->up, NULL, err)) ||
                (st = bind_matrix(m, LP_ROLE_EXPERT_DOWN, l, e, hidden, F, true, &X->down, NULL, err)))
                return st;
        }
        return LP_OK;
    }
    int64_t F = a->layer_ffn_hidden[l] > 0 ? a->layer_ffn_hidden[l] : a->ffn_hidden;
    L->ffn_hidden = F;
    if (a->ffn_kind == LP_FFN_MLP) {
        if ((st = bind_matrix(m, LP_ROLE_FFN_UP, l, -1, F, hidden, true, &L->up, NULL, err)) ||
            (st = bind_vector(m, LP_ROLE_FFN_UP, l, true, F, false, &L->up_bias, err)))
            return st;
    } else {
        if ((st = bind_matrix(m, LP_ROLE_FFN_GATE, l, -1, F, hidden, false, &L->gate, &found, err)))
            return st;
        if (found) {
            if ((st = bind_matrix(m, LP_ROLE_FFN_UP, l, -1, F, hidden, true, &L->up, NULL, err)) ||
                (st = bind_vector(m, LP_ROLE_FFN_GATE, l, true, F, false, &L->gate_bias, err)) ||
                (st = bind_vector(m, LP_ROLE_FFN_UP, l, true, F, false, &L->up_bias, err)))
                return st;
        } else {
            L->fused_gate_up = true;
            if ((st = bind_matrix(m, LP_ROLE_FFN_GATE_UP, l, -1, 2 * F, hidden, true, &L->gate_up, NULL, err)))
                return st;
        }
    }
    if ((st = bind_matrix(m, LP_ROLE_FFN_DOWN, l, -1, hidden, F, true, &L->down, NULL, err)) ||
        (st = bind_vector(m, LP_ROLE_FFN_DOWN, l, true, hidden, false, &L->down_bias, err)))
        return st;
    return LP_OK;
}

lp_status lp_model_from_weights(const lp_weights *weights, const lp_arch *arch, lp_model **out,
                                lp_error *err)
{
    *out = NULL;
    if (!arch)
        arch = lp_weights_arch(weights);
    if (!arch)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: no architecture found with the weights (config.json, GGUF "
                            "metadata or llama2.c header)",
                            lp_weights_path(weights));
    lp_status st = check_supported(arch, lp_weights_path(weights), err);
    if (st != LP_OK)
        return st;
    lp_model *m = calloc(1, sizeof *m);
    if (!m)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    m->arch = *arch;
    m->weights = weights;
    const lp_arch *a = &m->arch;
    int64_t hidden = a->hidden_size;

    m->layers = model_alloc(m, (size_t)a->n_layers * sizeof *m->layers);
    if (!m->layers) {
        st = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    memset(m->layers, 0, (size_t)a->n_layers * sizeof *m->layers);

    m->tok_embd = lp_weights_find(weights, LP_ROLE_TOKEN_EMBD, -1, -1, false);
    if (!m->tok_embd || m->tok_embd->n_dims != 2 || m->tok_embd->shape[1] != hidden ||
        m->tok_embd->shape[0] < a->vocab_size) {
        st = lp_error_set(err, LP_ERR_FORMAT,
                          m->tok_embd ? "%s: token embedding '%s' is not [vocab %lld, hidden %lld]"
                                      : "%s: no token embedding tensor%s (vocab %lld, hidden %lld)",
                          lp_weights_path(weights), m->tok_embd ? m->tok_embd->name : "",
                          (long long)a->vocab_size, (long long)hidden);
        goto fail;
    }
    if (a->pos_kind == LP_POS_LEARNED) {
        m->pos_embd = lp_weights_find(weights, LP_ROLE_POS_EMBD, -1, -1, false);
        if (!m->pos_embd || m->pos_embd->n_dims != 2 || m->pos_embd->shape[1] != hidden) {
            st = lp_error_set(err, LP_ERR_FORMAT, "%s: learned position table missing or not "
                                                  "[n, hidden %lld]",
                              lp_weights_path(weights), (long long)hidden);
            goto fail;
        }
    }
    for (int l = 0; l < a->n_layers; l++) {
        if ((st = bind_layer(m, l, err)) != LP_OK)
            goto fail;
        lp_layer_weights *L = &m->layers[l];
        if (L->q_dim > m->max_q_dim) m->max_q_dim = L->q_dim;
        if (L->kv_dim > m->max_kv_dim) m->max_kv_dim = L->kv_dim;
        if (L->ffn_hidden > m->max_ffn) m->max_ffn = L->ffn_hidden;
    }
    if ((st = bind_norm(m, LP_ROLE_OUTPUT_NORM, -1, hidden, a->final_norm, &m->out_norm, err)))
        goto fail;
    bool found;
    if ((st = bind_matrix(m, LP_ROLE_LM_HEAD, -1, -1, a->vocab_size, hidden, false, &m->lm_head,
                          &found, err)))
        goto fail;
    if (!found) {
        /* Tied classifier: the embedding table itself (first vocab_size rows). */
        if ((st = bind_matrix(m, LP_ROLE_TOKEN_EMBD, -1, -1, -1, hidden, true, &m->lm_head, NULL,
                              err)))
            goto fail;
        m->lm_head.rows = a->vocab_size;
    }
    if (a->bias_lm_head &&
        (st = bind_vector(m, LP_ROLE_LM_HEAD, -1, true, a->vocab_size, false, &m->lm_head_bias, err)))
        goto fail;
    m->renorm_topk = a->norm_topk_prob || strcmp(a->family, "mixtral") == 0;
    *out = m;
    return LP_OK;
fail:
    lp_model_close(m);
    return st;
}

lp_status lp_model_open(const char *path, lp_model **out, lp_error *err)
{
    lp_weights *w;
    *out = NULL;
    lp_status st = lp_weights_open(path, &w, err);
    if (st != LP_OK)
        return st;
    st = lp_model_from_weights(w, NULL, out, err);
    if (st != LP_OK) {
        lp_weights_close(w);
        return st;
    }
    (*out)->owned_weights = w;
    return LP_OK;
}

void lp_model_close(lp_model *model)
{
    if (!model)
        return;
    for (size_t i = 0; i < model->n_owned; i++)
        free(model->owned[i]);
    free(model->owned);
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

lp_status lp_model_rope_freqs(const lp_model *model, int64_t n_tokens, bool local, float *inv_freq,
                              float *attn_factor, lp_error *err)
{
    const lp_arch *a = &model->arch;
    const lp_rope_scaling *s = &a->rope_scaling;
    int64_t dim = a->rope_dim;
    int64_t half = dim / 2;
    double base = local && a->rope_local_theta > 0 ? a->rope_local_theta : a->rope_theta;
    double orig = s->original_ctx > 0 ? (double)s->original_ctx : (double)a->n_ctx;
    lp_rope_scaling_kind kind = local ? LP_ROPE_SCALING_NONE : s->kind;
    double factor = s->factor;
    *attn_factor = 1.0f;
    if (base <= 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: rope_theta %g must be positive", a->source, base);
    /* YaRN without a factor: the ratio of the context to the original one (HF's fallback). */
    if (kind == LP_ROPE_SCALING_YARN && !(factor > 0) && s->original_ctx > 0 && a->n_ctx > 0)
        factor = (double)a->n_ctx / (double)s->original_ctx;
    if (kind != LP_ROPE_SCALING_NONE && !(factor > 0))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: rope_scaling.factor %g must be positive",
                            a->source, factor);
    if (kind == LP_ROPE_SCALING_DYNAMIC) {
        /* Dynamic NTK: grow the base once the sequence outruns the context. HF measures against
         * max_position_embeddings here, not original_max_position_embeddings. */
        double ctx = a->n_ctx > 0 ? (double)a->n_ctx : orig;
        if (ctx <= 0)
            ctx = (double)n_tokens;
        double seq = (double)n_tokens > ctx ? (double)n_tokens : ctx;
        base = base * pow(factor * seq / ctx - (factor - 1.0),
                          (double)dim / (double)(dim - 2 > 0 ? dim - 2 : 1));
    }
    double low = 0, high = 0;
    if (kind == LP_ROPE_SCALING_YARN) {
        double beta_fast = s->beta_fast > 0 ? s->beta_fast : 32.0;
        double beta_slow = s->beta_slow > 0 ? s->beta_slow : 1.0;
        low = floor(yarn_correction_dim(beta_fast, (double)dim, base, orig));
        high = ceil(yarn_correction_dim(beta_slow, (double)dim, base, orig));
        if (low < 0) low = 0;
        if (high > (double)(dim - 1)) high = (double)(dim - 1);
        if (low == high) high += 0.001;
        *attn_factor = (float)(s->attention_factor > 0 ? s->attention_factor
                                                       : yarn_get_mscale(factor));
    }
    for (int64_t i = 0; i < half; i++) {
        double f = 1.0 / pow(base, (double)(2 * i) / (double)dim);
        switch (kind) {
        case LP_ROPE_SCALING_LINEAR:
            f /= factor;
            break;
        case LP_ROPE_SCALING_LLAMA3: {
            double low_f = s->low_freq_factor > 0 ? s->low_freq_factor : 1.0;
            double high_f = s->high_freq_factor > 0 ? s->high_freq_factor : 4.0;
            double low_wavelen = orig / low_f, high_wavelen = orig / high_f;
            double wavelen = 2.0 * LP_PI / f;
            if (wavelen < high_wavelen) {
                /* high frequencies: unchanged */
            } else if (wavelen > low_wavelen) {
                f /= factor;
            } else {
                double smooth = (orig / wavelen - low_f) / (high_f - low_f);
                f = (1.0 - smooth) * f / factor + smooth * f;
            }
            break;
        }
        case LP_ROPE_SCALING_YARN: {
            double ramp = ((double)i - low) / (high - low);
            ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
            double extrapolation = 1.0 - ramp;
            f = (f / factor) * (1.0 - extrapolation) + f * extrapolation;
            break;
        }
        default:
            break;
        }
        inv_freq[i] = (float)f;
    }
    return LP_OK;
}
