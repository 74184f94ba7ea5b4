/* The MoE families beyond Mixtral against tests/support's reference forward: Qwen2-MoE (shared
 * expert behind its sigmoid gate, raw top-k probabilities unless norm_topk_prob, dense layers by
 * decoder_sparse_step and mlp_only_layers), Qwen3-MoE (q/k norms, renormalized top-k) and
 * DeepSeek V2 / V2-Lite / V3 (latent attention with and without q_lora, greedy, group-limited
 * and noaux_tc routing, sigmoid scores with their correction, routed scaling), written
 * by the family writer as safetensors and by hand as llama.cpp's GGUF (fused ffn_*_exps, the
 * ffn_*_shexp shared expert, the 1-D ffn_gate_inp_shexp), on odd shapes; and the routing the
 * store records for them. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <math.h>
#include <unistd.h>

#include "forward_capture.h"
#include "gguf_writer.h"
#include "inspect/formats/gguf.h"
#include "inspect/formats/quant.h"
#include "ref_forward.h"
#include "store_test_util.h"
#include "trace/leak/leak.h"
#include "trace/store/store.h"
#include "trace/trace.h"

/* ---- safetensors, written by the family writer ---- */

typedef struct moe_case {
    const char *name;
    ref_config cfg;
    int64_t T;
    lp_dtype dtype;
    const char *family; /* expected: lp_arch.family */
    int n_routed;       /* expected: layers with experts */
} moe_case;

static const moe_case moe_cases[] = {
    /* head_dim 12, vocab 97, 3 heads on 1 kv head; layer 2 dense by mlp_only_layers */
    {"qwen2-moe", {.family = REF_QWEN_MOE, .vocab = 97, .hidden = 36, .n_layers = 3, .n_heads = 3,
                   .n_kv_heads = 1, .head_dim = 12, .ffn = 52, .eps = 1e-6, .theta = 1000000,
                   .qkv_bias = true, .n_experts = 5, .top_k = 2, .expert_ffn = 20,
                   .shared_ffn = 44, .mlp_only = 1u << 2, .scale = 0.2},
     19, LP_DTYPE_F32, "qwen2_moe", 2},
    {"qwen2-moe-bf16", {.family = REF_QWEN_MOE, .vocab = 83, .hidden = 32, .n_layers = 4,
                        .n_heads = 4, .n_kv_heads = 2, .head_dim = 10, .ffn = 40, .eps = 1e-6,
                        .theta = 1000000, .qkv_bias = true, .n_experts = 6, .top_k = 3,
                        .expert_ffn = 12, .shared_ffn = 28, .sparse_step = 2, .norm_topk = true,
                        .scale = 0.2},
     17, LP_DTYPE_BF16, "qwen2_moe", 2},
    {"qwen3-moe", {.family = REF_QWEN_MOE, .vocab = 71, .hidden = 32, .n_layers = 2, .n_heads = 4,
                   .n_kv_heads = 2, .head_dim = 14, .ffn = 40, .eps = 1e-6, .theta = 1000000,
                   .qk_norm = true, .n_experts = 7, .top_k = 3, .expert_ffn = 18,
                   .norm_topk = true, .scale = 0.2},
     15, LP_DTYPE_F32, "qwen3_moe", 2},
    /* DeepSeek-V2-Lite's shape: plain q, greedy softmax top-k, 2 shared experts, 1 dense layer;
     * heads of 10 nope + 4 rope dims, values 9 wide */
    {"deepseek-v2-lite", {.family = REF_DEEPSEEK, .vocab = 89, .hidden = 32, .n_layers = 3,
                          .n_heads = 3, .n_kv_heads = 3, .head_dim = 14, .rope_dim = 4,
                          .ffn = 44, .eps = 1e-6, .theta = 10000, .rope_adjacent = true,
                          .kv_lora = 12, .v_dim = 9, .first_dense = 1, .n_experts = 6, .top_k = 2,
                          .expert_ffn = 14, .n_shared = 2, .scale = 0.2},
     17, LP_DTYPE_F32, "deepseek_v2", 2},
    /* the same with YaRN as DeepSeek ships it (factor, original context 8 of 256, mscale and
     * mscale_all_dim apart so both the cos/sin magnitude and the softmax scale show) */
    {"deepseek-v2-yarn", {.family = REF_DEEPSEEK, .vocab = 89, .hidden = 32, .n_layers = 2,
                          .n_heads = 3, .n_kv_heads = 3, .head_dim = 14, .rope_dim = 6,
                          .ffn = 44, .eps = 1e-6, .theta = 10000, .rope_adjacent = true,
                          .kv_lora = 12, .v_dim = 9, .first_dense = 1, .n_experts = 6, .top_k = 2,
                          .expert_ffn = 14, .n_shared = 2, .yarn_factor = 4, .yarn_orig = 8,
                          .yarn_mscale = 0.9, .yarn_mscale_all = 0.7, .scale = 0.3},
     21, LP_DTYPE_F32, "deepseek_v2", 1},
    /* DeepSeek-V2's: q_lora, group-limited (3 groups of 2, the best 2 searched), scaled */
    {"deepseek-v2", {.family = REF_DEEPSEEK, .vocab = 77, .hidden = 32, .n_layers = 3,
                     .n_heads = 4, .n_kv_heads = 4, .head_dim = 10, .rope_dim = 6, .ffn = 36,
                     .eps = 1e-6, .theta = 10000, .rope_adjacent = true, .q_lora = 10,
                     .kv_lora = 14, .v_dim = 11, .first_dense = 1, .n_experts = 6, .top_k = 3,
                     .expert_ffn = 12, .n_shared = 1, .n_groups = 3, .topk_groups = 2,
                     .routed_scaling = 1.5, .scale = 0.2},
     15, LP_DTYPE_BF16, "deepseek_v2", 2},
    /* DeepSeek-V3's: sigmoid scores, score correction, 4 groups of 2 scored by their best two,
     * 2 searched, renormalized and scaled by 2.5 */
    {"deepseek-v3", {.family = REF_DEEPSEEK, .vocab = 67, .hidden = 32, .n_layers = 3,
                     .n_heads = 2, .n_kv_heads = 2, .head_dim = 12, .rope_dim = 4, .ffn = 40,
                     .eps = 1e-6, .theta = 10000, .rope_adjacent = true, .q_lora = 12,
                     .kv_lora = 10, .v_dim = 12, .first_dense = 1, .n_experts = 8, .top_k = 3,
                     .expert_ffn = 10, .n_shared = 1, .n_groups = 4, .topk_groups = 2,
                     .routed_scaling = 2.5, .v3 = true, .norm_topk = true, .scale = 0.2},
     19, LP_DTYPE_F32, "deepseek_v3", 2},
    /* gpt-oss: head_dim 10, vocab 97, 4 heads on 2 kv heads with their sinks, layers 0 and 2
     * sliding over 5 keys (19 tokens), a clamp of 0.4 that most gates and ups reach */
    {"gpt-oss", {.family = REF_GPT_OSS, .vocab = 97, .hidden = 36, .n_layers = 3, .n_heads = 4,
                 .n_kv_heads = 2, .head_dim = 10, .ffn = 20, .eps = 1e-5, .theta = 150000,
                 .n_experts = 5, .top_k = 2, .norm_topk = true, .window = 5,
                 .swiglu_limit = 0.4, .scale = 0.2},
     19, LP_DTYPE_F32, "gpt_oss", 3},
    /* bf16 as released unquantized, YaRN as gpt-oss ships it (truncate false; factor = n_ctx /
     * original context), head_dim 14, 6 heads on 2 kv heads */
    {"gpt-oss-bf16-yarn", {.family = REF_GPT_OSS, .vocab = 83, .hidden = 32, .n_layers = 2,
                           .n_heads = 6, .n_kv_heads = 2, .head_dim = 14, .ffn = 18, .eps = 1e-5,
                           .theta = 150000, .n_experts = 4, .top_k = 3, .norm_topk = true,
                           .window = 7, .yarn_factor = 4, .yarn_orig = 64, .n_ctx = 256,
                           .swiglu_limit = 0.5, .scale = 0.2},
     21, LP_DTYPE_BF16, "gpt_oss", 2},
    /* longer than one 256-row FFN chunk: the shared expert runs in two chunks */
    {"qwen2-moe-long", {.family = REF_QWEN_MOE, .vocab = 53, .hidden = 16, .n_layers = 1,
                        .n_heads = 2, .n_kv_heads = 1, .head_dim = 8, .ffn = 24, .eps = 1e-6,
                        .theta = 10000, .qkv_bias = true, .n_experts = 3, .top_k = 1,
                        .expert_ffn = 8, .shared_ffn = 20, .scale = 0.3},
     300, LP_DTYPE_F32, "qwen2_moe", 1},
};

static void remove_path(const char *path)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static int count_routed(const ref_config *c)
{
    int n = 0;
    for (int64_t l = 0; l < c->n_layers; l++)
        n += ref_layer_routed(c, l);
    return n;
}

static void test_moe_case(void **state)
{
    const moe_case *mc = *state;
    ref_model m;
    assert_true(ref_model_random(&mc->cfg, 0x3e + (uint64_t)mc->T, &m));
    ref_model_round_matrices(&m, mc->dtype);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/moe_%s_%ld", lp_test_tmp_dir(), mc->name, (long)getpid());
    assert_true(ref_model_write_hf_as(&m, dir, mc->dtype));
    int32_t ids[512];
    case_tokens(ids, mc->T, mc->cfg.vocab);
    ref_outputs ref;
    assert_true(ref_forward(&m, ids, mc->T, &ref));
    lp_model *model;
    lp_error err = {0};
    if (lp_model_open(dir, &model, &err) != LP_OK)
        fail_msg("%s: %s", mc->name, err.msg);
    const lp_arch *a = lp_model_arch(model);
    assert_string_equal(a->family, mc->family);
    int routed = 0;
    for (int64_t l = 0; l < a->n_layers; l++)
        routed += a->layer_moe[l];
    assert_int_equal(routed, mc->n_routed);
    assert_int_equal(count_routed(&mc->cfg), mc->n_routed);
    assert_int_equal(a->shared_expert_ffn_hidden, mc->cfg.shared_ffn);
    assert_int_equal(a->norm_topk_prob, mc->cfg.norm_topk);
    assert_int_equal(a->mla, mc->cfg.family == REF_DEEPSEEK);
    if (mc->cfg.family == REF_GPT_OSS) { /* sinks, the clamp, unrounded YaRN ramp bounds */
        assert_true(a->attn_sinks && a->router_bias && a->bias_qkv && a->bias_o);
        assert_true(fabs(a->swiglu_limit - mc->cfg.swiglu_limit) < 1e-12);
        assert_int_equal(a->rope_scaling.kind == LP_ROPE_SCALING_YARN, mc->cfg.yarn_factor > 0);
        for (int64_t l = 0; l < a->n_layers; l++)
            assert_int_equal(a->layer_window[l], l % 2 == 0 ? mc->cfg.window : 0);
    } else if (mc->cfg.yarn_factor > 0) /* DeepSeek's YaRN: mscale_all_dim squared in the softmax */
        assert_true(a->rope_scaling.kind == LP_ROPE_SCALING_YARN && a->query_scale > 0 &&
                    a->rope_scaling.attention_factor > 0);
    assert_int_equal(a->n_shared_experts, mc->cfg.n_shared);
    assert_int_equal(a->n_expert_groups, mc->cfg.n_groups > 1 ? mc->cfg.n_groups : 0);
    assert_int_equal(a->router_sigmoid, mc->cfg.v3);
    assert_int_equal(a->router_score_bias, mc->cfg.v3);
    assert_true(a->routed_scaling == (mc->cfg.routed_scaling == 1.0 ? 0.0 : mc->cfg.routed_scaling));
    char label[64];
    snprintf(label, sizeof label, "%s %s", mc->name, lp_dtype_name(mc->dtype));
    compare_with_ref(label, model, ids, mc->T, &mc->cfg, &ref, 1e-4);
    assert_true(logit_spread(&ref, mc->cfg.vocab) > 1e-2);
    if (mc->cfg.family == REF_GPT_OSS) {
        /* the kernel's per-row sink mass (what head_stats.learned_sink averages) is what the
         * reference's rows leave outside the keys */
        capture cap;
        run_capture(model, ids, mc->T, NULL, &cap);
        int64_t T = mc->T;
        double worst = 0, least = 1;
        for (int64_t r = 0; r < mc->cfg.n_layers * mc->cfg.n_heads * T; r++) {
            double keys = 0;
            for (int64_t s = 0; s < T; s++)
                keys += (double)ref.probs[r * T + s];
            worst = fmax(worst, fabs((double)cap.stats[r].learned_sink - (1.0 - keys)));
            least = fmin(least, (double)cap.stats[r].learned_sink);
        }
        printf("  %-18s sink mass vs 1 - the reference's row sums: %.2e (smallest %.3f)\n",
               label, worst, least);
        assert_true(worst <= 1e-5 && least > 1e-3);
        capture_free(&cap);
    }
    lp_model_close(model);
    ref_outputs_free(&ref);
    ref_model_free(&m);
    remove_path(dir);
}

/* The same model with the shared expert's gate or the renormalization flipped gives other
 * logits: both rules are visible to the comparison above. */
static void test_rules_matter(void **state)
{
    (void)state;
    ref_config c = moe_cases[0].cfg;
    ref_model m;
    assert_true(ref_model_random(&c, 5, &m));
    int32_t ids[19];
    case_tokens(ids, 19, c.vocab);
    ref_outputs base, flipped, ungated;
    assert_true(ref_forward(&m, ids, 19, &base));
    m.cfg.norm_topk = true;
    assert_true(ref_forward(&m, ids, 19, &flipped));
    m.cfg.norm_topk = false;
    for (int64_t l = 0; l < c.n_layers; l++)
        if (m.layers[l].s_gate_w)
            for (int64_t i = 0; i < c.hidden; i++)
                m.layers[l].s_gate_w[i] = 0.0f; /* sigmoid(0) = 1/2 on every token */
    assert_true(ref_forward(&m, ids, 19, &ungated));
    assert_true(max_abs_diff(base.logits, flipped.logits, 19 * c.vocab) > 1e-3);
    assert_true(max_abs_diff(base.logits, ungated.logits, 19 * c.vocab) > 1e-3);
    ref_outputs_free(&base);
    ref_outputs_free(&flipped);
    ref_outputs_free(&ungated);
    ref_model_free(&m);
}

/* gpt-oss's rules are visible to the comparison: without the sinks, with the usual clamp of 7
 * instead of 0.4, or without the expert biases, the logits move; and with the sinks each
 * probability row sums to less than 1. */
static void test_oss_rules_matter(void **state)
{
    (void)state;
    const moe_case *mc = NULL;
    for (size_t i = 0; i < sizeof moe_cases / sizeof moe_cases[0] && !mc; i++)
        if (moe_cases[i].cfg.family == REF_GPT_OSS)
            mc = &moe_cases[i];
    assert_non_null(mc);
    ref_config c = mc->cfg;
    int64_t T = mc->T, V = c.vocab;
    ref_model m;
    assert_true(ref_model_random(&c, 9, &m));
    int32_t ids[64];
    case_tokens(ids, T, V);
    ref_outputs base, other;
    assert_true(ref_forward(&m, ids, T, &base));
    for (int64_t r = 0; r < c.n_layers * c.n_heads * T; r++) {
        double sum = 0;
        for (int64_t s = 0; s < T; s++)
            sum += (double)base.probs[r * T + s];
        assert_true(sum < 1.0 - 1e-3);
    }
    float *sinks[8];
    for (int64_t l = 0; l < c.n_layers; l++) {
        sinks[l] = m.layers[l].sinks;
        m.layers[l].sinks = NULL;
    }
    assert_true(ref_forward(&m, ids, T, &other));
    assert_true(max_abs_diff(base.logits, other.logits, T * V) > 1e-3);
    ref_outputs_free(&other);
    for (int64_t l = 0; l < c.n_layers; l++)
        m.layers[l].sinks = sinks[l];
    m.cfg.swiglu_limit = 7.0;
    assert_true(ref_forward(&m, ids, T, &other));
    assert_true(max_abs_diff(base.logits, other.logits, T * V) > 1e-3);
    ref_outputs_free(&other);
    m.cfg.swiglu_limit = c.swiglu_limit;
    for (int64_t i = 0; i < c.n_experts * c.ffn; i++)
        m.layers[0].eb_gate[i] = 0.0f;
    assert_true(ref_forward(&m, ids, T, &other));
    assert_true(max_abs_diff(base.logits, other.logits, T * V) > 1e-3);
    ref_outputs_free(&other);
    ref_outputs_free(&base);
    ref_model_free(&m);
}

/* ---- GGUF as llama.cpp writes qwen2moe and qwen3moe ---- */

static uint8_t *kept[128];
static int n_kept;

static void *keep(void *p)
{
    assert_non_null(p);
    assert_true(n_kept < 128);
    kept[n_kept++] = p;
    return p;
}

static uint64_t next_seed(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* All experts of one role in a 3-D tensor [E, rows, cols] of Q8_0 or MXFP4 blocks; the reference
 * takes the dequantized values. */
static void gguf_experts_quant(lp_gw *w, lp_dtype dtype, const char *name, int64_t E, int64_t rows,
                               int64_t cols, uint64_t *seed, float **per_expert)
{
    int64_t n = E * rows * cols;
    float *deq = malloc((size_t)n * sizeof *deq);
    assert_non_null(deq);
    uint64_t bytes;
    assert_true(lp_dtype_bytes_for(dtype, (uint64_t)n, &bytes));
    uint8_t *data = keep(malloc((size_t)bytes));
    uint32_t block_bytes = lp_dtype_get(dtype)->block_bytes;
    for (int64_t b = 0; b < n / 32; b++) {
        uint8_t *blk = data + b * block_bytes;
        for (uint32_t i = 0; i < block_bytes; i++)
            blk[i] = (uint8_t)(next_seed(seed) & 0xff);
        if (dtype == LP_DTYPE_MXFP4) { /* E8M0 scale 2^-12 .. 2^-8, then 16 bytes of E2M1 pairs */
            blk[0] = (uint8_t)(115 + next_seed(seed) % 5);
        } else { /* Q8_0: an f16 scale, then 32 int8 values */
            uint16_t d = lp_f32_to_f16((float)(next_seed(seed) % 1000 + 500) * 1e-6f);
            memcpy(blk, &d, 2);
        }
    }
    lp_error err = {0};
    assert_int_equal(lp_dequantize(dtype, data, n, deq, &err), LP_OK);
    for (int64_t e = 0; e < E; e++)
        memcpy(per_expert[e], deq + e * rows * cols, (size_t)(rows * cols) * sizeof(float));
    int64_t ne[3] = {cols, rows, E};
    lp_gw_tensor(w, name, 3, ne, (uint32_t)lp_gguf_dtype_to_id(dtype), data, bytes);
    free(deq);
}

static void f32_tensor(lp_gw *w, const char *fmt, int l, int n_dims, int64_t d0, int64_t d1,
                       const float *data)
{
    char name[96];
    snprintf(name, sizeof name, fmt, l);
    int64_t ne[2] = {d0, d1};
    lp_gw_tensor(w, name, (uint32_t)n_dims, ne, 0, data,
                 (uint64_t)(d0 * (n_dims > 1 ? d1 : 1)) * sizeof(float));
}

static void write_gguf_qwen_moe(lp_gw *w, const ref_model *m, const char *arch,
                                lp_dtype expert_dtype)
{
    const ref_config *c = &m->cfg;
    int64_t H = c->hidden, V = c->vocab, QD = c->n_heads * c->head_dim;
    int64_t KVD = c->n_kv_heads * c->head_dim, EF = c->expert_ffn, SF = c->shared_ffn;
    char key[96];
    struct { const char *name; int64_t value; } kv[] = {
        {"block_count", c->n_layers}, {"context_length", 256}, {"embedding_length", H},
        {"feed_forward_length", c->ffn}, {"attention.head_count", c->n_heads},
        {"attention.head_count_kv", c->n_kv_heads}, {"attention.key_length", c->head_dim},
        {"attention.value_length", c->head_dim}, {"expert_count", c->n_experts},
        {"expert_used_count", c->top_k}, {"expert_feed_forward_length", EF},
        {"expert_shared_feed_forward_length", SF}, {"vocab_size", V},
    };
    lp_gw_kv_str(w, "general.architecture", arch);
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        if (SF == 0 && strstr(kv[i].name, "shared"))
            continue;
        snprintf(key, sizeof key, "%s.%s", arch, kv[i].name);
        lp_gw_kv_u32(w, key, (uint32_t)kv[i].value);
    }
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    lp_gw_kv_f32(w, key, (float)c->eps);
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    lp_gw_kv_f32(w, key, (float)c->theta);
    f32_tensor(w, "token_embd.weight", 0, 2, H, V, m->embed);
    f32_tensor(w, "output_norm.weight", 0, 1, H, 0, m->out_norm);
    f32_tensor(w, "output.weight", 0, 2, H, V, m->lm_head);
    uint64_t seed = 0x9e37;
    for (int l = 0; l < c->n_layers; l++) {
        const ref_layer *L = &m->layers[l];
        f32_tensor(w, "blk.%d.attn_norm.weight", l, 1, H, 0, L->attn_norm);
        f32_tensor(w, "blk.%d.attn_q.weight", l, 2, H, QD, L->wq);
        f32_tensor(w, "blk.%d.attn_k.weight", l, 2, H, KVD, L->wk);
        f32_tensor(w, "blk.%d.attn_v.weight", l, 2, H, KVD, L->wv);
        if (c->qkv_bias) {
            f32_tensor(w, "blk.%d.attn_q.bias", l, 1, QD, 0, L->bq);
            f32_tensor(w, "blk.%d.attn_k.bias", l, 1, KVD, 0, L->bk);
            f32_tensor(w, "blk.%d.attn_v.bias", l, 1, KVD, 0, L->bv);
        }
        if (c->qk_norm) {
            f32_tensor(w, "blk.%d.attn_q_norm.weight", l, 1, c->head_dim, 0, L->q_norm);
            f32_tensor(w, "blk.%d.attn_k_norm.weight", l, 1, c->head_dim, 0, L->k_norm);
        }
        f32_tensor(w, "blk.%d.attn_output.weight", l, 2, QD, H, L->wo);
        f32_tensor(w, "blk.%d.ffn_norm.weight", l, 1, H, 0, L->ffn_norm);
        f32_tensor(w, "blk.%d.ffn_gate_inp.weight", l, 2, H, c->n_experts, L->router);
        char name[96];
        snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
        gguf_experts_quant(w, expert_dtype, name, c->n_experts, EF, H, &seed, L->e_gate);
        snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", l);
        gguf_experts_quant(w, expert_dtype, name, c->n_experts, EF, H, &seed, L->e_up);
        snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", l);
        gguf_experts_quant(w, expert_dtype, name, c->n_experts, H, EF, &seed, L->e_down);
        if (SF > 0) {
            f32_tensor(w, "blk.%d.ffn_gate_shexp.weight", l, 2, H, SF, L->s_gate);
            f32_tensor(w, "blk.%d.ffn_up_shexp.weight", l, 2, H, SF, L->s_up);
            f32_tensor(w, "blk.%d.ffn_down_shexp.weight", l, 2, SF, H, L->s_down);
            f32_tensor(w, "blk.%d.ffn_gate_inp_shexp.weight", l, 1, H, 0, L->s_gate_w);
        }
    }
}

/* Every expert's matrix of one role in one 3-D F32 tensor [E, rows, cols] (fused as llama.cpp
 * stores them). */
static void gguf_experts_f32(lp_gw *w, const char *fmt, int l, int64_t E, int64_t rows,
                             int64_t cols, float *const *per_expert)
{
    char name[96];
    snprintf(name, sizeof name, fmt, l);
    float *data = keep(malloc((size_t)(E * rows * cols) * sizeof(float)));
    for (int64_t e = 0; e < E; e++)
        memcpy(data + e * rows * cols, per_expert[e], (size_t)(rows * cols) * sizeof(float));
    int64_t ne[3] = {cols, rows, E};
    lp_gw_tensor(w, name, 3, ne, 0, data, (uint64_t)(E * rows * cols) * sizeof(float));
}

/* DeepSeek as llama.cpp's deepseek2 converter writes it (the combined attn_kv_b form): MLA's
 * ranks and head sizes, the leading dense layers, shared experts, the router's gating function,
 * groups, normalization and scale, V3's exp_probs_b. */
static void write_gguf_deepseek2(lp_gw *w, const ref_model *m)
{
    const ref_config *c = &m->cfg;
    int64_t H = c->hidden, V = c->vocab, nh = c->n_heads, hd = c->head_dim, rot = c->rope_dim;
    int64_t nope = hd - rot, vd = c->v_dim, qr = c->q_lora, kvr = c->kv_lora;
    int64_t E = c->n_experts, EF = c->expert_ffn, SF = c->n_shared * EF;
    struct { const char *name; int64_t value; } kv[] = {
        {"block_count", c->n_layers}, {"context_length", 256}, {"embedding_length", H},
        {"feed_forward_length", c->ffn}, {"attention.head_count", nh},
        {"attention.head_count_kv", nh}, {"attention.key_length", hd},
        {"attention.value_length", vd}, {"attention.kv_lora_rank", kvr},
        {"attention.q_lora_rank", qr}, {"rope.dimension_count", rot}, {"expert_count", E},
        {"expert_used_count", c->top_k}, {"expert_feed_forward_length", EF},
        {"expert_shared_count", c->n_shared}, {"leading_dense_block_count", c->first_dense},
        {"expert_gating_func", c->v3 ? 2 : 1}, {"expert_group_count", c->n_groups},
        {"expert_group_used_count", c->topk_groups}, {"vocab_size", V},
    };
    char key[96];
    lp_gw_kv_str(w, "general.architecture", "deepseek2");
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) {
        snprintf(key, sizeof key, "deepseek2.%s", kv[i].name);
        lp_gw_kv_u32(w, key, (uint32_t)kv[i].value);
    }
    lp_gw_kv_f32(w, "deepseek2.attention.layer_norm_rms_epsilon", (float)c->eps);
    lp_gw_kv_f32(w, "deepseek2.rope.freq_base", (float)c->theta);
    lp_gw_kv_bool(w, "deepseek2.expert_weights_norm", c->norm_topk);
    lp_gw_kv_f32(w, "deepseek2.expert_weights_scale",
                 (float)(c->routed_scaling > 0 ? c->routed_scaling : 1.0));
    f32_tensor(w, "token_embd.weight", 0, 2, H, V, m->embed);
    f32_tensor(w, "output_norm.weight", 0, 1, H, 0, m->out_norm);
    f32_tensor(w, "output.weight", 0, 2, H, V, m->lm_head);
    for (int l = 0; l < c->n_layers; l++) {
        const ref_layer *L = &m->layers[l];
        f32_tensor(w, "blk.%d.attn_norm.weight", l, 1, H, 0, L->attn_norm);
        if (qr > 0) {
            f32_tensor(w, "blk.%d.attn_q_a.weight", l, 2, H, qr, L->q_a);
            f32_tensor(w, "blk.%d.attn_q_a_norm.weight", l, 1, qr, 0, L->q_a_norm);
            f32_tensor(w, "blk.%d.attn_q_b.weight", l, 2, qr, nh * hd, L->q_b);
        } else {
            f32_tensor(w, "blk.%d.attn_q.weight", l, 2, H, nh * hd, L->wq);
        }
        f32_tensor(w, "blk.%d.attn_kv_a_mqa.weight", l, 2, H, kvr + rot, L->kv_a);
        f32_tensor(w, "blk.%d.attn_kv_a_norm.weight", l, 1, kvr, 0, L->kv_a_norm);
        f32_tensor(w, "blk.%d.attn_kv_b.weight", l, 2, kvr, nh * (nope + vd), L->kv_b);
        f32_tensor(w, "blk.%d.attn_output.weight", l, 2, nh * vd, H, L->wo);
        f32_tensor(w, "blk.%d.ffn_norm.weight", l, 1, H, 0, L->ffn_norm);
        if (!ref_layer_routed(c, l)) {
            f32_tensor(w, "blk.%d.ffn_gate.weight", l, 2, H, c->ffn, L->w_gate);
            f32_tensor(w, "blk.%d.ffn_up.weight", l, 2, H, c->ffn, L->w_up);
            f32_tensor(w, "blk.%d.ffn_down.weight", l, 2, c->ffn, H, L->w_down);
            continue;
        }
        f32_tensor(w, "blk.%d.ffn_gate_inp.weight", l, 2, H, E, L->router);
        if (c->v3)
            f32_tensor(w, "blk.%d.exp_probs_b.bias", l, 1, E, 0, L->score_bias);
        gguf_experts_f32(w, "blk.%d.ffn_gate_exps.weight", l, E, EF, H, L->e_gate);
        gguf_experts_f32(w, "blk.%d.ffn_up_exps.weight", l, E, EF, H, L->e_up);
        gguf_experts_f32(w, "blk.%d.ffn_down_exps.weight", l, E, H, EF, L->e_down);
        f32_tensor(w, "blk.%d.ffn_gate_shexp.weight", l, 2, H, SF, L->s_gate);
        f32_tensor(w, "blk.%d.ffn_up_shexp.weight", l, 2, H, SF, L->s_up);
        f32_tensor(w, "blk.%d.ffn_down_shexp.weight", l, 2, SF, H, L->s_down);
    }
}

typedef struct gguf_moe_case {
    const char *name, *arch, *family;
    ref_config cfg;
    int64_t T;
    bool split_kv_b; /* deepseek2: attn_k_b / attn_v_b instead of attn_kv_b (trace/synth's form) */
    lp_dtype expert_dtype; /* qwen2moe/qwen3moe routed experts: Q8_0 when
                              LP_DTYPE_INVALID, or MXFP4 */
} gguf_moe_case;

/* Q8_0 rows need whole 32-value blocks: hidden and expert width are multiples of 32; the rest
 * stays odd (head_dim 12, vocab 45, shared width 40). */
static const gguf_moe_case gguf_moe_cases[] = {
    {"gguf-qwen2moe", "qwen2moe", "qwen2_moe",
     {.family = REF_QWEN_MOE, .vocab = 45, .hidden = 64, .n_layers = 2, .n_heads = 4,
      .n_kv_heads = 2, .head_dim = 12, .ffn = 40, .eps = 1e-6, .theta = 10000, .qkv_bias = true,
      .n_experts = 4, .top_k = 2, .expert_ffn = 32, .shared_ffn = 40, .scale = 0.2},
     13, false, LP_DTYPE_INVALID},
    {"gguf-qwen3moe", "qwen3moe", "qwen3_moe",
     {.family = REF_QWEN_MOE, .vocab = 45, .hidden = 64, .n_layers = 2, .n_heads = 4,
      .n_kv_heads = 2, .head_dim = 12, .ffn = 40, .eps = 1e-6, .theta = 10000, .qk_norm = true,
      .n_experts = 5, .top_k = 2, .expert_ffn = 32, .norm_topk = true, .scale = 0.2},
     11, false, LP_DTYPE_INVALID},
    /* the routed experts in MXFP4 blocks (gpt-oss's released form, on a family that has no
     * other novelty): the GEMM dequantizes them panel by panel, decode reads the blocks */
    {"gguf-qwen2moe-mxfp4", "qwen2moe", "qwen2_moe",
     {.family = REF_QWEN_MOE, .vocab = 45, .hidden = 96, .n_layers = 2, .n_heads = 4,
      .n_kv_heads = 2, .head_dim = 12, .ffn = 40, .eps = 1e-6, .theta = 10000, .qkv_bias = true,
      .n_experts = 4, .top_k = 2, .expert_ffn = 64, .shared_ffn = 40, .scale = 0.2},
     13, false, LP_DTYPE_MXFP4},
    /* DeepSeek-V2-Lite's layout (plain q, greedy) and V3's (q_lora, sigmoid, exp_probs_b,
     * groups, scale) with odd head sizes */
    {"gguf-deepseek2-lite", "deepseek2", "deepseek_v2",
     {.family = REF_DEEPSEEK, .vocab = 45, .hidden = 24, .n_layers = 2, .n_heads = 3,
      .n_kv_heads = 3, .head_dim = 14, .rope_dim = 4, .ffn = 36, .eps = 1e-6, .theta = 10000,
      .rope_adjacent = true, .kv_lora = 10, .v_dim = 9, .first_dense = 1, .n_experts = 4,
      .top_k = 2, .expert_ffn = 12, .n_shared = 2, .scale = 0.25},
     13, false, LP_DTYPE_INVALID},
    {"gguf-deepseek2-v3", "deepseek2", "deepseek_v2",
     {.family = REF_DEEPSEEK, .vocab = 45, .hidden = 24, .n_layers = 2, .n_heads = 2,
      .n_kv_heads = 2, .head_dim = 10, .rope_dim = 4, .ffn = 36, .eps = 1e-6, .theta = 10000,
      .rope_adjacent = true, .q_lora = 8, .kv_lora = 10, .v_dim = 11, .first_dense = 1,
      .n_experts = 8, .top_k = 3, .expert_ffn = 12, .n_shared = 1, .n_groups = 4,
      .topk_groups = 2, .routed_scaling = 2.5, .v3 = true, .norm_topk = true, .scale = 0.25},
     15, false, LP_DTYPE_INVALID},
    {"gguf-deepseek2-split", "deepseek2", "deepseek_v2",
     {.family = REF_DEEPSEEK, .vocab = 45, .hidden = 24, .n_layers = 2, .n_heads = 3,
      .n_kv_heads = 3, .head_dim = 14, .rope_dim = 4, .ffn = 36, .eps = 1e-6, .theta = 10000,
      .rope_adjacent = true, .kv_lora = 10, .v_dim = 9, .first_dense = 1, .n_experts = 4,
      .top_k = 2, .expert_ffn = 12, .n_shared = 2, .scale = 0.25},
     13, true, LP_DTYPE_INVALID},
};

/* The case's GGUF at path: the split kv_b form as trace/synth's GGUF writer writes DeepSeek
 * (llama.cpp's newer converter: attn_k_b / attn_v_b, into dir), the others tensor by tensor
 * here. */
static void write_case_gguf(const gguf_moe_case *gc, const ref_model *m, const char *dir,
                            const char *path)
{
    if (gc->split_kv_b) {
        bool expressible;
        assert_true(ref_model_write_gguf_as(m, dir, LP_DTYPE_F32, &expressible));
        return;
    }
    lp_gw w;
    lp_gw_init(&w, 3);
    if (strcmp(gc->arch, "deepseek2") == 0)
        write_gguf_deepseek2(&w, m);
    else
        write_gguf_qwen_moe(&w, m, gc->arch,
                            gc->expert_dtype != LP_DTYPE_INVALID ? gc->expert_dtype : LP_DTYPE_Q8_0);
    assert_true(lp_gw_finish(&w));
    assert_true(lp_gw_write(&w, path));
    lp_gw_free(&w);
    while (n_kept > 0)
        free(kept[--n_kept]);
}

static void test_gguf_moe_case(void **state)
{
    const gguf_moe_case *gc = *state;
    ref_model m;
    assert_true(ref_model_random(&gc->cfg, 0x6b + (uint64_t)gc->T, &m));
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/moe_%s_%ld", lp_test_tmp_dir(), gc->name, (long)getpid());
    if (gc->split_kv_b)
        snprintf(path, sizeof path, "%s/model.gguf", dir);
    else
        snprintf(path, sizeof path, "%s.gguf", dir);
    write_case_gguf(gc, &m, dir, path);
    int32_t ids[64];
    case_tokens(ids, gc->T, gc->cfg.vocab);
    ref_outputs ref;
    assert_true(ref_forward(&m, ids, gc->T, &ref));
    lp_model *model;
    lp_error err = {0};
    if (lp_model_open(path, &model, &err) != LP_OK)
        fail_msg("%s: %s", gc->name, err.msg);
    assert_string_equal(lp_model_arch(model)->family, gc->family);
    assert_int_equal(lp_model_arch(model)->head_dim, gc->cfg.head_dim);
    compare_with_ref(gc->name, model, ids, gc->T, &gc->cfg, &ref, 1e-4);
    assert_true(logit_spread(&ref, gc->T * gc->cfg.vocab) > 1e-2);
    /* decoding through the KV cache (MLA: the latent; split attn_k_b/attn_v_b re-expand it head
     * by head) equals the prefill on every GGUF MoE form, and a cache written one slot late is
     * caught */
    for (int f = 0; f < 2; f++) {
        lp_leak_decode_opts dopts = {f ? LP_KV_FAULT_CACHE_OFF_BY_ONE : LP_KV_FAULT_NONE, 0, NULL};
        lp_leak_decode_report rep;
        if (lp_leak_check_decode(model, ids, gc->T, &dopts, &rep, &err) != LP_OK)
            fail_msg("%s: decode: %s", gc->name, err.msg);
        printf("  %-22s decode (%s): f32 %.1e, f16 %.1e -> %s\n", gc->name,
               lp_kv_fault_name(dopts.fault), rep.logit_diff, rep.f16_logit_diff, rep.diagnosis);
        assert_int_equal(rep.passed, f == 0);
        assert_string_equal(rep.diagnosis, lp_kv_fault_name(dopts.fault));
    }
    lp_model_close(model);
    ref_outputs_free(&ref);
    ref_model_free(&m);
    remove(path);
    if (gc->split_kv_b)
        rmdir(dir);
}

/* ---- the store: routing of routed layers as Mixtral's, nothing for dense layers ---- */

static void test_store_routing(void **state)
{
    (void)state;
    const moe_case *mc = &moe_cases[0];
    const ref_config *c = &mc->cfg;
    ref_model m;
    assert_true(ref_model_random(c, 21, &m));
    char dir[512], db[600];
    snprintf(dir, sizeof dir, "%s/moe_store_%ld", lp_test_tmp_dir(), (long)getpid());
    snprintf(db, sizeof db, "%s.db", dir);
    remove(db);
    assert_true(ref_model_write_hf(&m, dir));
    int32_t ids[19];
    int64_t T = 19;
    case_tokens(ids, T, c->vocab);
    ref_outputs ref;
    assert_true(ref_forward(&m, ids, T, &ref));
    lp_model *model;
    lp_store *store;
    lp_error err = {0};
    if (lp_model_open(dir, &model, &err) != LP_OK || lp_store_open(db, &store, &err) != LP_OK)
        fail_msg("%s", err.msg);
    lp_run_info info;
    memset(&info, 0, sizeof info);
    info.model_path = dir;
    info.model_format = "safetensors";
    info.arch = lp_model_arch(model);
    info.prompt = "routing";
    info.tokens = ids;
    info.n_tokens = T;
    info.n_threads = 1;
    int64_t run_id;
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.observer = lp_store_observer(store);
    lp_batch batch = lp_batch_single(ids, T);
    if (lp_store_begin_run(store, &info, NULL, &run_id, &err) != LP_OK ||
        lp_forward(model, &batch, &opts, &err) != LP_OK ||
        lp_store_end_run(store, 0.1, &err) != LP_OK)
        fail_msg("%s", err.msg);
    lp_store_close(store);
    for (int64_t l = 0; l < c->n_layers; l++) {
        int64_t rows = lp_test_sql_int(db, "SELECT count(*) FROM router_stats WHERE run_id = %lld "
                                           "AND layer = %lld",
                                       (long long)run_id, (long long)l);
        assert_int_equal(rows, ref_layer_routed(c, l) ? 1 : 0);
        for (int64_t e = 0; ref_layer_routed(c, l) && e < c->n_experts; e++) {
            int64_t want = 0;
            for (int64_t i = 0; i < T * c->top_k; i++)
                want += ref.experts[l * T * c->top_k + i] == e;
            assert_int_equal(lp_test_sql_int(db, "SELECT tokens FROM expert_routing WHERE run_id "
                                                 "= %lld AND layer = %lld AND expert = %lld",
                                             (long long)run_id, (long long)l, (long long)e),
                             want);
        }
    }
    /* raw top-k probabilities (norm_topk_prob false): each token's two weights sum below 1 */
    assert_true(lp_test_sql_int(db, "SELECT count(*) FROM expert_routing WHERE run_id = %lld AND "
                                    "tokens > 0 AND mean_weight > 0 AND mean_weight < 1",
                                (long long)run_id) > 0);
    lp_model_close(model);
    ref_outputs_free(&ref);
    ref_model_free(&m);
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s-wal' '%s-shm'", dir, db, db, db);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    struct CMUnitTest tests[32];
    size_t n = 0;
    for (size_t i = 0; i < sizeof moe_cases / sizeof moe_cases[0]; i++) {
        struct CMUnitTest t = {moe_cases[i].name, test_moe_case, NULL, NULL,
                               (void *)&moe_cases[i]};
        tests[n++] = t;
    }
    for (size_t i = 0; i < sizeof gguf_moe_cases / sizeof gguf_moe_cases[0]; i++) {
        struct CMUnitTest t = {gguf_moe_cases[i].name, test_gguf_moe_case, NULL, NULL,
                               (void *)&gguf_moe_cases[i]};
        tests[n++] = t;
    }
    struct CMUnitTest rules = cmocka_unit_test(test_rules_matter);
    struct CMUnitTest oss_rules = cmocka_unit_test(test_oss_rules_matter);
    struct CMUnitTest routing = cmocka_unit_test(test_store_routing);
    tests[n++] = rules;
    tests[n++] = oss_rules;
    tests[n++] = routing;
    return _cmocka_run_group_tests("moe", tests, n, NULL, NULL);
}
