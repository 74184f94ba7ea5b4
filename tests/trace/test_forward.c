/* Tests of the forward pass: stories260K in three formats against llama2.c's reference arrays,
 * the quantized GGUFs' greedy agreement, random GPT-2/Mixtral/Gemma-2/Qwen2-shaped models against
 * tests/support/ref_forward.c, padding, mask faults, determinism, and the safetensors writer. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <math.h>
#include <unistd.h>

#include "core/dtype.h"
#include "core/mapfile.h"
#include "inspect/inspect.h"
#include "inspect/formats/gguf.h"
#include "inspect/formats/npy.h"
#include "inspect/formats/quant.h"
#include "inspect/formats/safetensors_write.h"
#include "forward_capture.h"
#include "gguf_writer.h"
#include "ref_forward.h"
#include "trace/forward/model_internal.h"
#include "trace/trace.h"

static uint64_t rng_next(uint64_t *s);

/* ---- golden: stories260K ---- */

static const char *const prompts[] = {"lily", "cat_mat", "tom_sue_park"};
static const char *const formats[] = {"stories260K.bin", "hf", "stories260K.gguf"};

static float *load_npy(const char *prompt, const char *file, int64_t expect_elems, int32_t **ids)
{
    char rel[256], path[512];
    snprintf(rel, sizeof rel, "models/stories260K/reference/%s/%s", prompt, file);
    lp_test_shared_path(path, sizeof path, rel);
    lp_npy npy;
    lp_error err = {0};
    if (lp_npy_open(path, &npy, &err) != LP_OK)
        fail_msg("%s", err.msg);
    if (expect_elems >= 0)
        assert_int_equal(npy.n_elements, expect_elems);
    float *out = malloc((size_t)npy.n_elements * sizeof(float));
    assert_non_null(out);
    if (ids) {
        assert_int_equal(npy.dtype, LP_DTYPE_I32);
        *ids = malloc((size_t)npy.n_elements * sizeof(int32_t));
        assert_non_null(*ids);
        memcpy(*ids, npy.data, (size_t)npy.n_elements * sizeof(int32_t));
    } else {
        assert_int_equal(lp_npy_to_f32(&npy, out, &err), LP_OK);
    }
    lp_npy_close(&npy);
    return out;
}

static lp_model *open_model(const char *rel)
{
    char path[512];
    lp_test_shared_path(path, sizeof path, rel);
    lp_model *m;
    lp_error err = {0};
    if (lp_model_open(path, &m, &err) != LP_OK)
        fail_msg("lp_model_open(%s): %s", path, err.msg);
    return m;
}

static void stories_golden_isa(lp_isa isa)
{
    double worst_logits = 0, worst_attn = 0, worst_resid = 0;
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
        char rel[256];
        snprintf(rel, sizeof rel, "models/stories260K/%s", formats[f]);
        lp_model *model = open_model(rel);
        const lp_arch *a = lp_model_arch(model);
        assert_int_equal(a->n_layers, 5);
        assert_int_equal(a->n_kv_heads, 4);
        for (size_t p = 0; p < sizeof prompts / sizeof prompts[0]; p++) {
            int32_t *ids;
            free(load_npy(prompts[p], "tokens.npy", -1, &ids));
            char rel2[256], path[512];
            snprintf(rel2, sizeof rel2, "models/stories260K/reference/%s/tokens.npy", prompts[p]);
            lp_npy tok_npy;
            lp_error err = {0};
            assert_int_equal(lp_npy_open(lp_test_shared_path(path, sizeof path, rel2), &tok_npy, &err), LP_OK);
            int64_t T = tok_npy.n_elements;
            lp_npy_close(&tok_npy);
            float *ref_logits = load_npy(prompts[p], "logits.npy", T * 512, NULL);
            float *ref_attn = load_npy(prompts[p], "attn.npy", 5 * 8 * T * T, NULL);
            float *ref_resid = load_npy(prompts[p], "resid.npy", 5 * T * 64, NULL);
            capture cap;
            run_capture(model, ids, T, NULL, &cap);
            double dl = max_abs_diff(cap.logits, ref_logits, T * 512);
            double da = max_abs_diff(cap.probs, ref_attn, 5 * 8 * T * T);
            double dr = max_abs_diff(cap.resid, ref_resid, 5 * T * 64);
            printf("  %-4s %-18s %-13s T=%2lld  logits %.2e  attn %.2e  resid %.2e\n",
                   lp_isa_name(isa), formats[f], prompts[p], (long long)T, dl, da, dr);
            worst_logits = fmax(worst_logits, dl);
            worst_attn = fmax(worst_attn, da);
            worst_resid = fmax(worst_resid, dr);
            /* Budget: 1e-4 (the README's tolerance for an independent f32 implementation). */
            assert_true(dl <= 1e-4);
            assert_true(da <= 1e-4);
            assert_true(dr <= 1e-4);
            capture_free(&cap);
            free(ref_logits);
            free(ref_attn);
            free(ref_resid);
            free(ids);
        }
        lp_model_close(model);
    }
    printf("  %s worst: logits %.2e, attn %.2e, resid %.2e (budget 1e-4)\n", lp_isa_name(isa),
           worst_logits, worst_attn, worst_resid);
}

static void test_stories_golden(void **state)
{
    (void)state;
    lp_isa chosen = lp_kernels_isa();
    for (int isa = 0; isa < LP_ISA_COUNT; isa++)
        if (lp_kernels_set_isa((lp_isa)isa))
            stories_golden_isa((lp_isa)isa);
    assert_true(lp_kernels_set_isa(chosen));
}

/* Prompts nobody wrote a reference for: the three formats must agree with each other up to the
 * model's full context (512), where a RoPE layout or position bug would grow. */
static void test_stories_formats_agree_long(void **state)
{
    (void)state;
    const int64_t T = 512;
    int32_t *ids = malloc((size_t)T * sizeof *ids);
    assert_non_null(ids);
    uint64_t seed = 2024;
    ids[0] = 1;
    for (int64_t t = 1; t < T; t++)
        ids[t] = (int32_t)(3 + rng_next(&seed) % 509);
    capture caps[3];
    for (int f = 0; f < 3; f++) {
        char rel[256];
        snprintf(rel, sizeof rel, "models/stories260K/%s", formats[f]);
        lp_model *model = open_model(rel);
        run_capture(model, ids, T, NULL, &caps[f]);
        lp_model_close(model);
    }
    double d_hf = max_abs_diff(caps[1].logits, caps[0].logits, T * 512);
    double d_gguf = max_abs_diff(caps[2].logits, caps[0].logits, T * 512);
    double p_hf = max_abs_diff(caps[1].probs, caps[0].probs, 5 * 8 * T * T);
    printf("  T=512 random ids: hf vs bin logits %.2e (probs %.2e), gguf vs bin %.2e\n", d_hf,
           p_hf, d_gguf);
    assert_true(d_hf <= 1e-4);
    assert_true(p_hf <= 1e-4);
    assert_true(d_gguf <= 1e-4);
    for (int f = 0; f < 3; f++)
        capture_free(&caps[f]);
    free(ids);
}

static int64_t argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static void test_stories_quant_greedy(void **state)
{
    (void)state;
    static const char *const quants[] = {"quant/stories260K-Q6_K.gguf",
                                         "quant/stories260K-Q4_K_M.gguf",
                                         "quant/stories260K-TQ2_0.gguf"};
    lp_model *f32 = open_model("models/stories260K/stories260K.gguf");
    for (size_t q = 0; q < 3; q++) {
        char rel[256];
        snprintf(rel, sizeof rel, "models/stories260K/%s", quants[q]);
        lp_model *model = open_model(rel);
        int64_t agree = 0, total = 0;
        double worst = 0;
        for (size_t p = 0; p < 3; p++) {
            int32_t *ids;
            char rel2[256], path[512];
            free(load_npy(prompts[p], "tokens.npy", -1, &ids));
            snprintf(rel2, sizeof rel2, "models/stories260K/reference/%s/tokens.npy", prompts[p]);
            lp_npy tok_npy;
            lp_error err = {0};
            assert_int_equal(lp_npy_open(lp_test_shared_path(path, sizeof path, rel2), &tok_npy, &err), LP_OK);
            int64_t T = tok_npy.n_elements;
            lp_npy_close(&tok_npy);
            capture a, b;
            run_capture(f32, ids, T, NULL, &a);
            run_capture(model, ids, T, NULL, &b);
            for (int64_t t = 0; t < T; t++) {
                agree += argmax(a.logits + t * 512, 512) == argmax(b.logits + t * 512, 512);
                total++;
            }
            worst = fmax(worst, max_abs_diff(a.logits, b.logits, T * 512));
            capture_free(&a);
            capture_free(&b);
            free(ids);
        }
        printf("  %-32s greedy argmax equals F32 at %lld/%lld positions, max |dlogit| %.3f\n",
               quants[q], (long long)agree, (long long)total, worst);
        /* Quantized weights differ by up to 0.13 (Q4_0): most, not all, positions must agree,
         * and the logits must actually differ (the quant path is really taken). */
        assert_true(agree * 10 >= total * 7);
        assert_true(worst > 1e-4);
        lp_model_close(model);
    }
    lp_model_close(f32);
}

/* ---- random models written by the test ---- */

/* A family written by the family writer in each of its matrix dtypes and run on T seeded
 * tokens: the real pass must match the double-precision reference within the budget, for every
 * ISA (logits, attention probabilities, residual stream, head outputs; MoE: the same experts). */
typedef struct random_case {
    const char *name;
    ref_config cfg;
    int64_t T;
    lp_dtype dtypes[2]; /* the matrix dtypes it is written in */
    int n_dtypes;
    double budget;      /* expected: max |real - reference| */
} random_case;

static const random_case random_cases[] = {
    {"gpt2", {.family = REF_GPT2, .vocab = 97, .hidden = 48, .n_layers = 2, .n_heads = 4,
              .n_kv_heads = 4, .head_dim = 12, .ffn = 192, .n_positions = 64, .eps = 1e-5,
              .tied = true, .scale = 0.15},
     19, {LP_DTYPE_F32, LP_DTYPE_F16}, 2, 1e-4},
    {"mixtral", {.family = REF_MIXTRAL, .vocab = 101, .hidden = 32, .n_layers = 2, .n_heads = 4,
                 .n_kv_heads = 2, .head_dim = 8, .ffn = 40, .eps = 1e-5, .theta = 10000,
                 .n_experts = 4, .top_k = 2, .scale = 0.2},
     23, {LP_DTYPE_F32, LP_DTYPE_BF16}, 2, 1e-4},
    {"gemma2", {.family = REF_GEMMA2, .vocab = 89, .hidden = 32, .n_layers = 3, .n_heads = 4,
                .n_kv_heads = 1, .head_dim = 16, .ffn = 48, .eps = 1e-6, .theta = 10000,
                .tied = true, .window = 5, .query_pre_attn_scalar = 24, .attn_softcap = 5.0,
                .final_softcap = 3.0, .scale = 0.2},
     17, {LP_DTYPE_F32}, 1, 1e-4},
    {"qwen2", {.family = REF_LLAMA, .vocab = 83, .hidden = 32, .n_layers = 2, .n_heads = 4,
               .n_kv_heads = 2, .head_dim = 8, .ffn = 56, .eps = 1e-6, .theta = 1000000,
               .qkv_bias = true, .scale = 0.2},
     15, {LP_DTYPE_F32, LP_DTYPE_BF16}, 2, 1e-4},
    {"mistral", {.family = REF_LLAMA, .vocab = 71, .hidden = 32, .n_layers = 2, .n_heads = 4,
                 .n_kv_heads = 1, .head_dim = 8, .ffn = 44, .eps = 1e-5, .theta = 10000,
                 .window = 4, .scale = 0.2},
     13, {LP_DTYPE_F16}, 1, 1e-4},
    {"gemma", {.family = REF_GEMMA, .vocab = 79, .hidden = 32, .n_layers = 2, .n_heads = 4,
               .n_kv_heads = 1, .head_dim = 16, .ffn = 48, .eps = 1e-6, .theta = 10000,
               .tied = true, .scale = 0.2},
     12, {LP_DTYPE_BF16}, 1, 1e-4},
    {"qwen3", {.family = REF_LLAMA, .vocab = 73, .hidden = 32, .n_layers = 2, .n_heads = 4,
               .n_kv_heads = 2, .head_dim = 16, .ffn = 40, .eps = 1e-6, .theta = 1000000,
               .qk_norm = true, .scale = 0.2},
     11, {LP_DTYPE_F32}, 1, 1e-4},
    {"partial", {.family = REF_LLAMA, .vocab = 59, .hidden = 32, .n_layers = 2, .n_heads = 4,
                 .n_kv_heads = 4, .head_dim = 8, .ffn = 40, .eps = 1e-5, .theta = 10000,
                 .rope_dim = 4, .scale = 0.3},
     16, {LP_DTYPE_F32}, 1, 1e-4},
    {"gemma3", {.family = REF_GEMMA3, .vocab = 67, .hidden = 32, .n_layers = 6, .n_heads = 4,
                .n_kv_heads = 2, .head_dim = 16, .ffn = 40, .eps = 1e-6, .theta = 1000000,
                .tied = true, .window = 3, .sliding_pattern = 3, .local_theta = 10000,
                .query_pre_attn_scalar = 16, .qk_norm = true, .scale = 0.2},
     14, {LP_DTYPE_BF16}, 1, 1e-4},
    /* longer than one 256-row FFN chunk, so chunked dense and expert FFNs are compared too */
    {"moe-long", {.family = REF_MIXTRAL, .vocab = 61, .hidden = 16, .n_layers = 1, .n_heads = 2,
                  .n_kv_heads = 1, .head_dim = 8, .ffn = 24, .eps = 1e-5, .theta = 10000,
                  .n_experts = 3, .top_k = 2, .scale = 0.3},
     450, {LP_DTYPE_F32}, 1, 1e-4}, /* T = 450: some expert gets >= 300 */
    {"gpt2-long", {.family = REF_GPT2, .vocab = 53, .hidden = 16, .n_layers = 1, .n_heads = 2,
                   .n_kv_heads = 2, .head_dim = 8, .ffn = 32, .n_positions = 400, .eps = 1e-5,
                   .tied = true, .scale = 0.2},
     333, {LP_DTYPE_F32}, 1, 1e-4},
    /* the dense families with parallel blocks, on odd shapes: head_dim 12 or 10 (not a multiple
     * of 8), vocabularies not a multiple of 16, partial rotary */
    {"neox", {.family = REF_NEOX, .vocab = 61, .hidden = 36, .n_layers = 2, .n_heads = 3,
              .n_kv_heads = 3, .head_dim = 12, .ffn = 72, .eps = 1e-5, .theta = 10000,
              .rope_dim = 6, .parallel = true, .scale = 0.2},
     21, {LP_DTYPE_F32, LP_DTYPE_BF16}, 2, 1e-4},
    {"neox-sequential", {.family = REF_NEOX, .vocab = 45, .hidden = 36, .n_layers = 2,
                         .n_heads = 3, .n_kv_heads = 3, .head_dim = 12, .ffn = 40, .eps = 1e-5,
                         .theta = 10000, .rope_dim = 4, .parallel = false, .scale = 0.2},
     17, {LP_DTYPE_F16}, 1, 1e-4},
    {"neox-long", {.family = REF_NEOX, .vocab = 37, .hidden = 20, .n_layers = 1, .n_heads = 2,
                   .n_kv_heads = 2, .head_dim = 10, .ffn = 24, .eps = 1e-5, .theta = 10000,
                   .rope_dim = 2, .parallel = true, .scale = 0.3},
     300, {LP_DTYPE_F32}, 1, 1e-4}, /* past one 256-row FFN chunk */
    {"phi", {.family = REF_PHI, .vocab = 77, .hidden = 40, .n_layers = 2, .n_heads = 4,
             .n_kv_heads = 2, .head_dim = 10, .ffn = 56, .eps = 1e-5, .theta = 10000,
             .rope_dim = 4, .scale = 0.2},
     19, {LP_DTYPE_F32, LP_DTYPE_F16}, 2, 1e-4},
    {"gptj", {.family = REF_GPTJ, .vocab = 83, .hidden = 36, .n_layers = 2, .n_heads = 3,
              .n_kv_heads = 3, .head_dim = 12, .ffn = 48, .eps = 1e-5, .theta = 10000,
              .rope_dim = 4, .rope_adjacent = true, .scale = 0.2},
     18, {LP_DTYPE_F32, LP_DTYPE_BF16}, 2, 1e-4},
    /* StableLM 2 (12B's layout: parallel, per-head q/k LayerNorms; 1.6B's q/k/v biases) and
     * StableLM-3B-4E1T's sequential block */
    {"stablelm2", {.family = REF_STABLELM, .vocab = 69, .hidden = 40, .n_layers = 2,
                   .n_heads = 4, .n_kv_heads = 2, .head_dim = 10, .ffn = 52, .eps = 1e-5,
                   .theta = 10000, .rope_dim = 2, .parallel = true, .qk_norm = true,
                   .qkv_bias = true, .scale = 0.2},
     16, {LP_DTYPE_F32, LP_DTYPE_BF16}, 2, 1e-4},
    {"stablelm-3b", {.family = REF_STABLELM, .vocab = 59, .hidden = 36, .n_layers = 2,
                     .n_heads = 3, .n_kv_heads = 3, .head_dim = 12, .ffn = 40, .eps = 1e-5,
                     .theta = 10000, .rope_dim = 4, .scale = 0.2},
     15, {LP_DTYPE_F16}, 1, 1e-4},
    /* Falcon-7B (multi-query, one norm, parallel, tied, no biases; no num_kv_heads,
     * ffn_hidden_size or activation in its config), 40B/180B (new decoder architecture: ln_attn
     * and ln_mlp, query_key_value grouped per kv head) and RefinedWeb-1B's ALiBi variant
     * (sequential, biases, 6 heads: not a power of two) */
    {"falcon-7b", {.family = REF_FALCON, .vocab = 63, .hidden = 36, .n_layers = 2, .n_heads = 3,
                   .n_kv_heads = 1, .head_dim = 12, .ffn = 144, .eps = 1e-5, .theta = 10000,
                   .parallel = true, .tied = true, .scale = 0.2},
     17, {LP_DTYPE_F32, LP_DTYPE_BF16}, 2, 1e-4},
    {"falcon-40b", {.family = REF_FALCON, .vocab = 67, .hidden = 60, .n_layers = 2, .n_heads = 6,
                    .n_kv_heads = 2, .head_dim = 10, .ffn = 64, .eps = 1e-5, .theta = 10000,
                    .parallel = true, .new_arch = true, .scale = 0.2},
     16, {LP_DTYPE_F32}, 1, 1e-4},
    {"falcon-alibi", {.family = REF_FALCON, .vocab = 71, .hidden = 36, .n_layers = 2,
                      .n_heads = 6, .n_kv_heads = 6, .head_dim = 6, .ffn = 144, .eps = 1e-5,
                      .theta = 10000, .alibi = true, .qkv_bias = true, .tied = true,
                      .scale = 0.3},
     20, {LP_DTYPE_F32}, 1, 1e-4},
    /* StarCoder2 (3B's layout: GQA, use_bias, tied; and untied with use_bias false) on odd
     * shapes, prompts longer than the window on every layer */
    {"starcoder2", {.family = REF_STARCODER2, .vocab = 73, .hidden = 36, .n_layers = 2,
                    .n_heads = 6, .n_kv_heads = 2, .head_dim = 6, .ffn = 52, .eps = 1e-5,
                    .theta = 999999.4420358813, .window = 5, .qkv_bias = true, .tied = true,
                    .scale = 0.25},
     19, {LP_DTYPE_F32, LP_DTYPE_BF16}, 2, 1e-4},
    {"starcoder2-nobias", {.family = REF_STARCODER2, .vocab = 61, .hidden = 40, .n_layers = 2,
                           .n_heads = 4, .n_kv_heads = 1, .head_dim = 10, .ffn = 44, .eps = 1e-5,
                           .theta = 10000, .window = 7, .scale = 0.25},
     17, {LP_DTYPE_F16}, 1, 1e-4},
    /* and without a window (sliding_window null), untied: its GGUF form is checked too */
    {"starcoder2-full", {.family = REF_STARCODER2, .vocab = 59, .hidden = 36, .n_layers = 2,
                         .n_heads = 6, .n_kv_heads = 3, .head_dim = 6, .ffn = 40, .eps = 1e-5,
                         .theta = 100000, .qkv_bias = true, .scale = 0.25},
     15, {LP_DTYPE_F32}, 1, 1e-4},
    /* BLOOM: embedding LayerNorm, per-head query_key_value, ALiBi after the scale on 5 heads
     * (not a power of two: the odd slopes of the next power) and on 8 */
    {"bloom", {.family = REF_BLOOM, .vocab = 79, .hidden = 30, .n_layers = 2, .n_heads = 5,
               .n_kv_heads = 5, .head_dim = 6, .ffn = 120, .eps = 1e-5, .alibi = true,
               .qkv_bias = true, .tied = true, .scale = 0.3},
     22, {LP_DTYPE_F32, LP_DTYPE_BF16}, 2, 1e-4},
    {"bloom-8-heads", {.family = REF_BLOOM, .vocab = 51, .hidden = 80, .n_layers = 1,
                       .n_heads = 8, .n_kv_heads = 8, .head_dim = 10, .ffn = 320, .eps = 1e-5,
                       .alibi = true, .qkv_bias = true, .tied = true, .scale = 0.3},
     14, {LP_DTYPE_F16}, 1, 1e-4},
    /* MPT: fused Wqkv, exact GELU, ALiBi after the scale; mpt-7b's no_bias on 5 heads of 6
     * (not a power of two, head_dim not a multiple of 8); then every switch turned: biases
     * everywhere, clip_qkv that clamps (scale 0.3 gives |q| up to ~2), qk_ln over the whole q and
     * k with their biases, alibi_bias_max 16, logit_scale; qk_ln without biases on 3 heads
     * sharing one kv head (llm-foundry's multiquery_attention) */
    {"mpt", {.family = REF_MPT, .vocab = 79, .hidden = 30, .n_layers = 2, .n_heads = 5,
             .n_kv_heads = 5, .head_dim = 6, .ffn = 120, .eps = 1e-5, .alibi = true,
             .tied = true, .scale = 0.3},
     22, {LP_DTYPE_F32, LP_DTYPE_BF16}, 2, 1e-4},
    {"mpt-all-switches", {.family = REF_MPT, .vocab = 53, .hidden = 42, .n_layers = 2,
                          .n_heads = 6, .n_kv_heads = 6, .head_dim = 7, .ffn = 84, .eps = 1e-5,
                          .alibi = true, .alibi_max = 16, .qkv_bias = true, .qk_norm = true,
                          .qkv_clip = 0.25, .logit_scale = 0.5, .tied = true, .scale = 0.3},
     19, {LP_DTYPE_F32, LP_DTYPE_F16}, 2, 1e-4},
    {"mpt-qk-ln-gqa", {.family = REF_MPT, .vocab = 61, .hidden = 30, .n_layers = 3, .n_heads = 3,
                   .n_kv_heads = 1, .head_dim = 10, .ffn = 90, .eps = 1e-5, .alibi = true,
                   .qk_norm = true, .qkv_clip = 0.6, .tied = true, .scale = 0.3},
     17, {LP_DTYPE_F32}, 1, 1e-4},
    /* MPT with attn_config.alibi false: transformer.wpe's learned positions added to the
     * embeddings, no positional term in attention; the whole table in use (T = n_positions),
     * and with biases, clip_qkv and qk_ln */
    {"mpt-learned", {.family = REF_MPT, .vocab = 67, .hidden = 30, .n_layers = 2, .n_heads = 5,
                     .n_kv_heads = 5, .head_dim = 6, .ffn = 60, .n_positions = 21, .eps = 1e-5,
                     .tied = true, .scale = 0.3},
     21, {LP_DTYPE_F32, LP_DTYPE_BF16}, 2, 1e-4},
    {"mpt-learned-switches", {.family = REF_MPT, .vocab = 45, .hidden = 42, .n_layers = 2,
                              .n_heads = 6, .n_kv_heads = 2, .head_dim = 7, .ffn = 84,
                              .n_positions = 32, .eps = 1e-5, .qkv_bias = true, .qk_norm = true,
                              .qkv_clip = 0.4, .tied = true, .scale = 0.3},
     18, {LP_DTYPE_F16}, 1, 1e-4},
    /* OPT-125m (pre-norm) and OPT-350m (post-norm, word_embed_proj_dim 512 of 1024: project_in
     * and project_out, no final norm); learned positions at pos + 2, ReLU */
    {"opt-125m", {.family = REF_OPT, .vocab = 87, .hidden = 36, .n_layers = 2, .n_heads = 3,
                  .n_kv_heads = 3, .head_dim = 12, .ffn = 72, .n_positions = 40, .eps = 1e-5,
                  .tied = true, .scale = 0.2},
     23, {LP_DTYPE_F32, LP_DTYPE_F16}, 2, 1e-4},
    {"opt-350m", {.family = REF_OPT, .vocab = 61, .hidden = 40, .n_layers = 2, .n_heads = 4,
                  .n_kv_heads = 4, .head_dim = 10, .ffn = 80, .n_positions = 30, .eps = 1e-5,
                  .tied = true, .post_norm = true, .embed_dim = 20, .scale = 0.2},
     30, {LP_DTYPE_F32}, 1, 1e-4}, /* the whole position table */
    /* Phi-3 / Phi-4-mini: fused qkv_proj and gate_up_proj, partial rotary 0.6 of 10, longrope
     * (original context 16 of 64: the short factors up to 16 tokens, the long ones beyond,
     * cos/sin times sqrt(1 + ln 4 / ln 16)); and Phi-3-mini-4k without scaling */
    {"phi3-longrope-short", {.family = REF_PHI3, .vocab = 67, .hidden = 40, .n_layers = 2,
                             .n_heads = 4, .n_kv_heads = 2, .head_dim = 10, .ffn = 36,
                             .eps = 1e-5, .theta = 10000, .rope_dim = 6, .longrope_orig = 16,
                             .n_ctx = 64, .short_factor = {1.0, 1.25, 2.5},
                             .long_factor = {1.5, 4.0, 9.0}, .scale = 0.3},
     16, {LP_DTYPE_F32, LP_DTYPE_BF16}, 2, 1e-4},
    {"phi3-longrope-long", {.family = REF_PHI3, .vocab = 67, .hidden = 40, .n_layers = 2,
                            .n_heads = 4, .n_kv_heads = 2, .head_dim = 10, .ffn = 36,
                            .eps = 1e-5, .theta = 10000, .rope_dim = 6, .longrope_orig = 16,
                            .n_ctx = 64, .short_factor = {1.0, 1.25, 2.5},
                            .long_factor = {1.5, 4.0, 9.0}, .scale = 0.3},
     40, {LP_DTYPE_F32}, 1, 1e-4},
    {"phi3-4k", {.family = REF_PHI3, .vocab = 53, .hidden = 36, .n_layers = 2, .n_heads = 3,
                 .n_kv_heads = 3, .head_dim = 12, .ffn = 40, .eps = 1e-5, .theta = 10000,
                 .scale = 0.3},
     19, {LP_DTYPE_F16}, 1, 1e-4},
    /* OLMo 2: output norms only, q/k norms over the whole projection (GQA: [q_dim], [kv_dim]) */
    {"olmo2", {.family = REF_OLMO2, .vocab = 73, .hidden = 36, .n_layers = 2, .n_heads = 3,
               .n_kv_heads = 1, .head_dim = 12, .ffn = 44, .eps = 1e-6, .theta = 500000,
               .qk_norm = true, .scale = 0.2},
     18, {LP_DTYPE_F32, LP_DTYPE_BF16}, 2, 1e-4},
};

/* What the case's GGUF form leaves out that the reference computes (llama.cpp has no key for
 * it), or NULL. */
static const char *lost_in_gguf(const ref_config *c)
{
    if (c->window > 0 && (c->family == REF_STARCODER2 ||
                          (c->family == REF_LLAMA && !c->qkv_bias && !c->qk_norm)))
        return "window"; /* the "llama" (Mistral) and "starcoder2" architectures */
    if (c->logit_scale > 0)
        return "MPT's logit_scale";
    if ((c->family == REF_GEMMA2 || c->family == REF_GEMMA3) && c->query_pre_attn_scalar > 0 &&
        c->query_pre_attn_scalar != (double)c->head_dim)
        return "query_pre_attn_scalar";
    return NULL;
}

/* The case's GGUF form (lp_synth_write_family_gguf, the converter's names and layouts) against
 * the same reference; skipped where there is none (OPT, Falcon's ALiBi variant) and where the
 * GGUF leaves out what the reference computes. */
static void check_gguf_form(const random_case *rc, const ref_model *m, const int32_t *ids,
                            const ref_outputs *ref, lp_dtype matrix_dtype)
{
    const ref_config *c = &rc->cfg;
    const char *lost = lost_in_gguf(c);
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/forward_gguf_%s_%ld", lp_test_tmp_dir(), rc->name,
             (long)getpid());
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    bool expressible = true;
    if (lost || !ref_model_write_gguf_as(m, dir, matrix_dtype, &expressible)) {
        if (!lost && expressible)
            fail_msg("%s: the GGUF form could not be written", rc->name);
        printf("  %-18s gguf: %s%s\n", rc->name, lost ? "skipped, it keeps no " : "none",
               lost ? lost : "");
        return;
    }
    lp_model *model;
    lp_error err = {0};
    if (lp_model_open(path, &model, &err) != LP_OK)
        fail_msg("%s gguf: %s", rc->name, err.msg);
    char label[64];
    snprintf(label, sizeof label, "%s gguf", rc->name);
    compare_with_ref(label, model, ids, rc->T, c, ref, rc->budget);
    lp_model_close(model);
    remove(path);
    rmdir(dir);
}

static void check_random_case(const random_case *rc, lp_dtype matrix_dtype)
{
    ref_model m;
    assert_true(ref_model_random(&rc->cfg, 0x5eed + (uint64_t)rc->cfg.family, &m));
    ref_model_round_matrices(&m, matrix_dtype);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/forward_%s_%ld", lp_test_tmp_dir(), rc->name, (long)getpid());
    assert_true(ref_model_write_hf_as(&m, dir, matrix_dtype));
    int32_t ids[512];
    assert_true(rc->T <= 512);
    case_tokens(ids, rc->T, rc->cfg.vocab);
    ref_outputs ref;
    assert_true(ref_forward(&m, ids, rc->T, &ref));
    lp_model *model;
    lp_error err = {0};
    if (lp_model_open(dir, &model, &err) != LP_OK)
        fail_msg("%s: %s", rc->name, err.msg);
    const lp_arch *a = lp_model_arch(model);
    assert_int_equal(a->n_layers, rc->cfg.n_layers);
    assert_int_equal(a->head_dim, rc->cfg.head_dim);
    char label[64];
    snprintf(label, sizeof label, "%s %s", rc->name, lp_dtype_name(matrix_dtype));
    compare_with_ref(label, model, ids, rc->T, &rc->cfg, &ref, rc->budget);
    assert_true(logit_spread(&ref, rc->cfg.vocab) > 1e-2);
    lp_model_close(model);
    if (matrix_dtype == rc->dtypes[0])
        check_gguf_form(rc, &m, ids, &ref, matrix_dtype);
    ref_outputs_free(&ref);
    ref_model_free(&m);
    remove_dir(dir);
}

static void test_random_case(void **state)
{
    const random_case *rc = *state;
    for (int i = 0; i < rc->n_dtypes; i++)
        check_random_case(rc, rc->dtypes[i]);
}

/* ---- a GGUF llama whose matrices are Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, MXFP4 and F16 ---- */

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 29;
}

/* Random blocks of dtype for rows x cols with a sane scale written into every block's f16 d (and
 * dmin); returns the bytes and their dequantized values in *deq (through inspect/formats/quant.h). */
static uint8_t *random_quant(lp_dtype dtype, int64_t rows, int64_t cols, uint64_t *seed,
                             float **deq, uint64_t *n_bytes)
{
    const lp_dtype_info *info = lp_dtype_get(dtype);
    int64_t n = rows * cols;
    uint64_t bytes;
    assert_true(lp_dtype_bytes_for(dtype, (uint64_t)n, &bytes));
    uint8_t *buf = malloc(bytes);
    assert_non_null(buf);
    for (uint64_t i = 0; i < bytes; i++)
        buf[i] = (uint8_t)rng_next(seed);
    int64_t n_blocks = n / info->block_elems;
    for (int64_t b = 0; b < n_blocks; b++) {
        uint8_t *blk = buf + b * info->block_bytes;
        uint16_t d, dmin = lp_f32_to_f16(0.0003f);
        switch (dtype) {
        case LP_DTYPE_Q8_0: d = lp_f32_to_f16(0.001f); memcpy(blk, &d, 2); break;
        case LP_DTYPE_Q4_0: d = lp_f32_to_f16(0.01f); memcpy(blk, &d, 2); break;
        case LP_DTYPE_Q5_0: d = lp_f32_to_f16(0.005f); memcpy(blk, &d, 2); break;
        case LP_DTYPE_Q4_K:
            d = lp_f32_to_f16(0.0002f);
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &dmin, 2);
            break;
        case LP_DTYPE_Q6_K: d = lp_f32_to_f16(0.00003f); memcpy(blk + 208, &d, 2); break;
        case LP_DTYPE_MXFP4: blk[0] = (uint8_t)(117 + b % 4); break; /* E8M0: 2^-10 .. 2^-7 */
        case LP_DTYPE_F16:
            d = lp_f32_to_f16((float)((double)(rng_next(seed) % 2001) / 1000.0 - 1.0) * 0.1f);
            memcpy(blk, &d, 2);
            break;
        default: fail_msg("unexpected dtype %s", lp_dtype_name(dtype));
        }
    }
    *deq = malloc((size_t)n * sizeof(float));
    assert_non_null(*deq);
    lp_error err = {0};
    if (lp_dequantize(dtype, buf, n, *deq, &err) != LP_OK)
        fail_msg("%s", err.msg);
    *n_bytes = bytes;
    return buf;
}

/* lp_gw copies tensor data only at lp_gw_finish: keep the buffers until then. */
static uint8_t *gguf_data[64];
static int n_gguf_data;

static void gguf_tensor(lp_gw *w, const char *name, lp_dtype dtype, int64_t rows, int64_t cols,
                        uint64_t *seed, float *dst)
{
    float *deq;
    uint64_t bytes;
    uint8_t *data = random_quant(dtype, rows, cols, seed, &deq, &bytes);
    memcpy(dst, deq, (size_t)(rows * cols) * sizeof(float));
    int64_t ne[2] = {cols, rows};
    lp_gw_tensor(w, name, 2, ne, (uint32_t)lp_gguf_dtype_to_id(dtype), data, bytes);
    free(deq);
    assert_true(n_gguf_data < 64);
    gguf_data[n_gguf_data++] = data;
}

/* The GGUF hyperparameters of a reference config under arch's prefix: the keys llama.cpp's
 * converter writes for it (GPT-2: LayerNorm epsilon and no kv head count; Gemma: key and value
 * lengths; experts when there are any). */
static void gguf_hparams(lp_gw *w, const char *arch, const ref_config *c, uint32_t n_ctx)
{
    char key[96];
#define KV(name, value) \
    (snprintf(key, sizeof key, "%s." name, arch), lp_gw_kv_u32(w, key, (uint32_t)(value)))
    lp_gw_kv_str(w, "general.architecture", arch);
    KV("block_count", c->n_layers);
    KV("context_length", n_ctx);
    KV("embedding_length", c->hidden);
    KV("feed_forward_length", c->ffn);
    KV("attention.head_count", c->n_heads);
    /* llama.cpp's gpt2, gptneox and gptj converters write no kv head count */
    bool layer_norm = c->family == REF_GPT2 || c->family == REF_NEOX || c->family == REF_PHI ||
                      c->family == REF_GPTJ || c->family == REF_STABLELM ||
                      c->family == REF_FALCON || c->family == REF_BLOOM || c->family == REF_MPT;
    if (c->family != REF_GPT2 && c->family != REF_NEOX && c->family != REF_GPTJ)
        KV("attention.head_count_kv", c->n_kv_heads);
    if (c->rope_dim > 0)
        KV("rope.dimension_count", c->rope_dim);
    if (c->theta > 0 && c->theta != 10000) {
        snprintf(key, sizeof key, "%s.rope.freq_base", arch);
        lp_gw_kv_f32(w, key, (float)c->theta);
    }
    if (c->n_experts > 0) {
        KV("expert_count", c->n_experts);
        KV("expert_used_count", c->top_k);
    }
    if (c->family == REF_GEMMA) {
        KV("attention.key_length", c->head_dim);
        KV("attention.value_length", c->head_dim);
    }
    KV("vocab_size", c->vocab);
#undef KV
    snprintf(key, sizeof key, "%s.attention.%s", arch,
             layer_norm ? "layer_norm_epsilon" : "layer_norm_rms_epsilon");
    lp_gw_kv_f32(w, key, (float)c->eps);
    if (c->family == REF_NEOX || c->family == REF_STABLELM) {
        snprintf(key, sizeof key, "%s.use_parallel_residual", arch);
        lp_gw_kv_bool(w, key, c->parallel);
    }
    if (c->family == REF_MPT) { /* convert_hf_to_gguf's MPTModel */
        /* 0: learned positions (position_embd) */
        lp_gw_kv_f32(w, "mpt.attention.max_alibi_bias",
                     (float)(!c->alibi ? 0 : c->alibi_max > 0 ? c->alibi_max : 8));
        if (c->qkv_clip > 0)
            lp_gw_kv_f32(w, "mpt.attention.clamp_kqv", (float)c->qkv_clip);
    }
}

/* Every matrix type the issue names, one per tensor: Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, MXFP4 (gpt-oss's
 * expert format, here a dense ffn_up) and F16. */
static void write_gguf_quant(lp_gw *w, ref_model *m)
{
    gguf_hparams(w, "llama", &m->cfg, 128);
    uint64_t seed = 99;
    /* Every matrix type the issue names, one per tensor. */
    gguf_tensor(w, "token_embd.weight", LP_DTYPE_Q8_0, 48, 256, &seed, m->embed);
    char name[64];
    for (int l = 0; l < 2; l++) {
        ref_layer *L = &m->layers[l];
        int64_t ne1[1] = {256};
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        lp_gw_tensor(w, name, 1, ne1, 0, L->attn_norm, 256 * 4);
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        lp_gw_tensor(w, name, 1, ne1, 0, L->ffn_norm, 256 * 4);
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
        gguf_tensor(w, name, LP_DTYPE_Q4_K, 256, 256, &seed, L->wq);
        snprintf(name, sizeof name, "blk.%d.attn_k.weight", l);
        gguf_tensor(w, name, LP_DTYPE_Q6_K, 128, 256, &seed, L->wk);
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
        gguf_tensor(w, name, LP_DTYPE_Q8_0, 128, 256, &seed, L->wv);
        snprintf(name, sizeof name, "blk.%d.attn_output.weight", l);
        gguf_tensor(w, name, LP_DTYPE_Q4_0, 256, 256, &seed, L->wo);
        snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", l);
        gguf_tensor(w, name, LP_DTYPE_Q5_0, 256, 256, &seed, L->w_gate);
        snprintf(name, sizeof name, "blk.%d.ffn_up.weight", l);
        gguf_tensor(w, name, l == 0 ? LP_DTYPE_Q4_K : LP_DTYPE_MXFP4, 256, 256, &seed, L->w_up);
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
        gguf_tensor(w, name, LP_DTYPE_Q6_K, 256, 256, &seed, L->w_down);
    }
    int64_t ne1[1] = {256};
    lp_gw_tensor(w, "output_norm.weight", 1, ne1, 0, m->out_norm, 256 * 4);
    gguf_tensor(w, "output.weight", LP_DTYPE_F16, 48, 256, &seed, m->lm_head);
}

/* ---- batch, padding, faults, determinism, errors (on a random llama) ---- */

static lp_model *small_llama(ref_model *m, char *dir, size_t dir_size)
{
    ref_config cfg = {.family = REF_LLAMA, .vocab = 61, .hidden = 32, .n_layers = 2, .n_heads = 4,
                      .n_kv_heads = 2, .head_dim = 8, .ffn = 40, .eps = 1e-5, .theta = 10000,
                      .scale = 0.2};
    assert_true(ref_model_random(&cfg, 77, m));
    snprintf(dir, dir_size, "%s/forward_llama_%ld", lp_test_tmp_dir(), (long)getpid());
    assert_true(ref_model_write_hf(m, dir));
    lp_model *model;
    lp_error err = {0};
    if (lp_model_open(dir, &model, &err) != LP_OK)
        fail_msg("%s", err.msg);
    return model;
}

static void test_padding_batch(void **state)
{
    (void)state;
    ref_model m;
    char dir[512];
    lp_model *model = small_llama(&m, dir, sizeof dir);
    const int64_t n = 9, pad = 3, T = n + pad, V = 61;
    int32_t ids[9] = {5, 17, 3, 44, 2, 9, 31, 60, 12};
    capture plain;
    run_capture(model, ids, n, NULL, &plain);

    /* Three sequences of T: left-padded, right-padded, and a different prompt. */
    int32_t batch_ids[3 * 12];
    int64_t pl[3] = {pad, 0, 0}, pr[3] = {0, pad, 0};
    for (int64_t t = 0; t < T; t++) {
        batch_ids[t] = t < pad ? 0 : ids[t - pad];
        batch_ids[T + t] = t < n ? ids[t] : 0;
        batch_ids[2 * T + t] = (int32_t)((t * 7 + 1) % V);
    }
    for (int64_t b = 0; b < 2; b++) {
        capture cap;
        capture_init(&cap, lp_model_arch(model), T);
        cap.batch = b;
        lp_observer obs = {&cap, cap_want, cap_observe};
        lp_forward_opts opts;
        lp_forward_opts_init(&opts);
        opts.observer = &obs;
        lp_batch batch = {3, T, batch_ids, pl, pr};
        lp_error err = {0};
        assert_int_equal(lp_forward(model, &batch, &opts, &err), LP_OK);
        int64_t off = b == 0 ? pad : 0;
        double d = max_abs_diff(cap.logits + off * V, plain.logits, n * V);
        printf("  %s padding: real-token logits differ from the unpadded run by %.2e\n",
               b == 0 ? "left " : "right", d);
        assert_true(d <= 1e-5);
        /* padded query rows see nothing */
        int64_t pad_row = b == 0 ? 0 : T - 1;
        for (int64_t s = 0; s < T; s++)
            assert_true(cap.probs[pad_row * T + s] == 0.0f);
        capture_free(&cap);
    }

    /* Causality: changing the last token changes nothing before it. */
    int32_t changed[9];
    memcpy(changed, ids, sizeof changed);
    changed[8] = (ids[8] + 1) % V;
    capture later;
    run_capture(model, changed, n, NULL, &later);
    double before = max_abs_diff(later.logits, plain.logits, (n - 1) * V);
    double at = max_abs_diff(later.logits + (n - 1) * V, plain.logits + (n - 1) * V, V);
    printf("  last token changed: earlier logits move %.2e, the last %.2e\n", before, at);
    assert_true(before <= 1e-6);
    assert_true(at > 1e-4);
    capture_free(&later);

    /* A broken mask must change what earlier positions compute. */
    capture faulty;
    capture_init(&faulty, lp_model_arch(model), n);
    lp_observer obs = {&faulty, cap_want, cap_observe};
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.observer = &obs;
    opts.mask_fault = LP_MASK_FAULT_NO_MASK;
    lp_batch single = lp_batch_single(ids, n);
    lp_error err = {0};
    assert_int_equal(lp_forward(model, &single, &opts, &err), LP_OK);
    assert_true(max_abs_diff(faulty.logits, plain.logits, V) > 1e-3);
    assert_true(faulty.probs[1] > 0.0f); /* layer 0 head 0: row 0 sees key 1 */
    capture_free(&faulty);
    capture_free(&plain);
    lp_model_close(model);
    ref_model_free(&m);
    remove_dir(dir);
}

static void test_determinism_threads(void **state)
{
    (void)state;
    ref_model m;
    char dir[512];
    lp_model *model = small_llama(&m, dir, sizeof dir);
    int32_t ids[20];
    for (int i = 0; i < 20; i++)
        ids[i] = (i * 13 + 5) % 61;
    lp_pool *pool;
    lp_error err = {0};
    assert_int_equal(lp_pool_create(2, &pool, &err), LP_OK);
    capture a, b, c;
    run_capture(model, ids, 20, pool, &a);
    run_capture(model, ids, 20, pool, &b);
    run_capture(model, ids, 20, NULL, &c);
    assert_memory_equal(a.logits, b.logits, 20 * 61 * sizeof(float));
    assert_memory_equal(a.probs, b.probs, (size_t)(2 * 4 * 20 * 20) * sizeof(float));
    double d = max_abs_diff(a.logits, c.logits, 20 * 61);
    printf("  2 threads twice: bit-identical; 1 vs 2 threads: %.2e\n", d);
    assert_true(d <= 1e-5);
    capture_free(&a);
    capture_free(&b);
    capture_free(&c);
    lp_pool_destroy(pool);
    lp_model_close(model);
    ref_model_free(&m);
    remove_dir(dir);
}

/* ---- a stacked batch computes what each sequence computes alone ---- */

/* The largest difference between sequence b's capture from a batch (its real tokens at rows
 * pad .. pad + n of T) and the same tokens run alone, over logits, residual streams, head
 * outputs and attention maps (keys shifted by the padding); *experts_differ when a MoE layer
 * routed some real token elsewhere. */
static double batch_vs_alone(const capture *in_batch, const capture *alone, int64_t pad, int64_t n,
                             bool *experts_differ)
{
    int64_t T = in_batch->T, V = alone->V, H = alone->H, NH = alone->NH, W = NH * alone->HD;
    double d = max_abs_diff(in_batch->logits + pad * V, alone->logits, n * V);
    for (int64_t l = 0; l < alone->L; l++) {
        double r = max_abs_diff(in_batch->resid + (l * T + pad) * H, alone->resid + l * n * H,
                                n * H);
        double o = max_abs_diff(in_batch->head_out + (l * T + pad) * W,
                                alone->head_out + l * n * W, n * W);
        d = r > d ? r : d;
        d = o > d ? o : d;
        for (int64_t h = 0; h < NH; h++)
            for (int64_t i = 0; i < n; i++) {
                const float *row = in_batch->probs + ((l * NH + h) * T + pad + i) * T + pad;
                double m = max_abs_diff(row, alone->probs + ((l * NH + h) * n + i) * n, n);
                d = m > d ? m : d;
            }
        for (int64_t t = 0; t < n * alone->K; t++)
            if (in_batch->experts[(l * T + pad) * alone->K + t] != alone->experts[l * n * alone->K + t])
                *experts_differ = true;
    }
    return d;
}

enum { STACK_SEQS = 4 };

/* With logits for the last position only, a batch's last rows go through the LM head together
 * (one read of the weights, each row as lp_matvec computes it): on a dense model an unpadded
 * sequence's logits equal its own last-position logits alone bit for bit; a left-padded one's
 * (its attention), and any with experts (their row counts), within 1e-5. Right-padded
 * sequences end on padding and are skipped. */
static void check_last_logits(const char *name, const lp_model *model, const lp_forward_opts *base,
                              const int32_t *ids, int64_t T, const int64_t *pl, const int64_t *pr,
                              const int64_t *lens, bool dense)
{
    const lp_arch *a = lp_model_arch(model);
    int64_t V = a->vocab_size;
    lp_forward_opts opts = *base;
    opts.logits_last_only = true;
    capture in_batch[STACK_SEQS], alone;
    lp_error err = {0};
    for (int64_t b = 0; b < STACK_SEQS; b++) {
        capture_init(&in_batch[b], a, T);
        in_batch[b].batch = b;
    }
    for (int64_t b = 0; b < STACK_SEQS; b++) {
        lp_observer obs = {&in_batch[b], cap_want, cap_observe};
        opts.observer = &obs;
        lp_batch batch = {STACK_SEQS, T, ids, pl, pr};
        if (lp_forward(model, &batch, &opts, &err) != LP_OK)
            fail_msg("%s: batch, last logits: %s", name, err.msg);
        assert_int_equal(in_batch[b].n_logit_calls, 1);
    }
    for (int64_t b = 0; b < STACK_SEQS; b++) {
        if (pr[b] > 0)
            continue;
        capture_init(&alone, a, lens[b]);
        lp_observer obs = {&alone, cap_want, cap_observe};
        opts.observer = &obs;
        lp_batch single = lp_batch_single(ids + b * T + pl[b], lens[b]);
        if (lp_forward(model, &single, &opts, &err) != LP_OK)
            fail_msg("%s: alone, last logits: %s", name, err.msg);
        double d = max_abs_diff(in_batch[b].logits + (T - 1) * V,
                                alone.logits + (lens[b] - 1) * V, V);
        printf("  %s: sequence %lld's last-position logits differ from its own alone by %.2e\n",
               name, (long long)b, d);
        assert_true(pl[b] > 0 || !dense ? d <= 1e-5 : d == 0.0);
        capture_free(&alone);
    }
    for (int64_t b = 0; b < STACK_SEQS; b++)
        capture_free(&in_batch[b]);
}

/* Sequences of 1, 6, window + 5 and 9 real tokens in one batch of T = window + 5 (the second
 * left-padded, the others right-padded), each against itself alone, single-threaded and on two
 * threads. On a dense model, right-padded sequences of 3 or more tokens are expected bit for
 * bit: every GEMM row sums in the same order however many rows are stacked (kc blocks, the
 * micro-kernel's k loop) and activations run row by row. One or two rows alone go through the
 * matrix-vector path instead (the length-1 sequence; with experts, an expert routed one or two
 * tokens of a sequence but more of the batch), and left padding moves where the keys sit in
 * attention's blocks: those are held to 1e-5. */
static void check_stacked_batch(const char *name, const ref_config *cfg, int64_t window,
                                bool dense)
{
    hf_model h;
    hf_model_open(&h, cfg, 31, "forward_stack", name);
    const lp_arch *a = lp_model_arch(h.model);
    const int64_t T = window + 5, lens[STACK_SEQS] = {1, 6, window + 5, 9};
    int64_t pl[STACK_SEQS], pr[STACK_SEQS];
    int32_t ids[STACK_SEQS * 16], alone_ids[16];
    assert_true(T <= 16);
    for (int64_t b = 0; b < STACK_SEQS; b++) {
        pl[b] = b == 1 ? T - lens[b] : 0;
        pr[b] = T - lens[b] - pl[b];
        for (int64_t t = 0; t < T; t++) /* padding cells hold some other valid id */
            ids[b * T + t] = (int32_t)((t * 5 + b * 11 + 3) % cfg->vocab);
    }
    lp_pool *pool;
    lp_error err = {0};
    assert_int_equal(lp_pool_create(2, &pool, &err), LP_OK);
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.window_override = window;
    for (int threads = 1; threads <= 2; threads++) {
        opts.pool = threads == 2 ? pool : NULL;
        double worst_exact = 0.0, worst = 0.0;
        for (int64_t b = 0; b < STACK_SEQS; b++) {
            capture in_batch, alone;
            capture_init(&in_batch, a, T);
            in_batch.batch = b;
            lp_observer obs = {&in_batch, cap_want, cap_observe};
            opts.observer = &obs;
            lp_batch batch = {STACK_SEQS, T, ids, pl, pr};
            if (lp_forward(h.model, &batch, &opts, &err) != LP_OK)
                fail_msg("%s: batch: %s", name, err.msg);
            memcpy(alone_ids, ids + b * T + pl[b], (size_t)lens[b] * sizeof *ids);
            capture_init(&alone, a, lens[b]);
            lp_observer alone_obs = {&alone, cap_want, cap_observe};
            opts.observer = &alone_obs;
            lp_batch single = lp_batch_single(alone_ids, lens[b]);
            if (lp_forward(h.model, &single, &opts, &err) != LP_OK)
                fail_msg("%s: alone: %s", name, err.msg);
            bool experts_differ = false;
            double d = batch_vs_alone(&in_batch, &alone, pl[b], lens[b], &experts_differ);
            printf("  %s, %d thread%s: sequence %lld (%lld tokens, padding %lld left %lld right) "
                   "differs from itself alone by %.2e%s\n",
                   name, threads, threads > 1 ? "s" : "", (long long)b, (long long)lens[b],
                   (long long)pl[b], (long long)pr[b], d, experts_differ ? ", experts differ" : "");
            assert_false(experts_differ);
            bool exact_expected = dense && pl[b] == 0 && lens[b] >= 3;
            if (exact_expected && d > worst_exact)
                worst_exact = d;
            worst = d > worst ? d : worst;
            capture_free(&in_batch);
            capture_free(&alone);
        }
        assert_true(worst_exact == 0.0);
        assert_true(worst <= 1e-5);
        check_last_logits(name, h.model, &opts, ids, T, pl, pr, lens, dense);
    }
    lp_pool_destroy(pool);
    hf_model_close(&h);
}

static void test_stacked_batch(void **state)
{
    (void)state;
    const ref_config mistral = {.family = REF_LLAMA, .vocab = 71, .hidden = 32, .n_layers = 2,
                                .n_heads = 4, .n_kv_heads = 2, .head_dim = 8, .ffn = 44,
                                .eps = 1e-5, .theta = 10000, .window = 4, .scale = 0.2};
    const ref_config mixtral = {.family = REF_MIXTRAL, .vocab = 101, .hidden = 32,
                                .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 8,
                                .ffn = 40, .eps = 1e-5, .theta = 10000, .n_experts = 4,
                                .top_k = 2, .scale = 0.2};
    check_stacked_batch("mistral", &mistral, 4, true);
    check_stacked_batch("mixtral", &mixtral, 4, false);
}

static bool fail_want(void *ctx, const lp_site *site)
{
    (void)ctx;
    return site->kind == LP_SITE_RESID;
}

static lp_status fail_observe(void *ctx, const lp_site *site, const lp_view *view, lp_error *err)
{
    int *calls = ctx;
    (void)view;
    ++*calls;
    if (site->layer == 1)
        return lp_error_set(err, LP_ERR_IO, "observer: disk full at layer %d", site->layer);
    return LP_OK;
}

static void test_errors(void **state)
{
    (void)state;
    ref_model m;
    char dir[512];
    lp_model *model = small_llama(&m, dir, sizeof dir);
    lp_error err = {0};
    int32_t bad[3] = {1, 61, 2};
    lp_batch batch = lp_batch_single(bad, 3);
    assert_int_equal(lp_forward(model, &batch, NULL, &err), LP_ERR_RANGE);
    assert_non_null(strstr(err.msg, "61"));
    int64_t pl = 5;
    int32_t ok_ids[3] = {1, 2, 3};
    lp_batch padded = {1, 3, ok_ids, &pl, NULL};
    assert_int_equal(lp_forward(model, &padded, NULL, &err), LP_ERR_RANGE);
    /* An observer's error stops the pass and comes back unchanged. */
    int calls = 0;
    lp_observer failing = {&calls, fail_want, fail_observe};
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.observer = &failing;
    lp_batch good = lp_batch_single(ok_ids, 3);
    memset(&err, 0, sizeof err);
    assert_int_equal(lp_forward(model, &good, &opts, &err), LP_ERR_IO);
    assert_string_equal(err.msg, "observer: disk full at layer 1");
    assert_int_equal(calls, 2);
    lp_model_close(model);

    /* A model missing a tensor is refused with its role and layer named. */
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    lp_st_writer *w;
    assert_int_equal(lp_st_writer_create(&w, &err), LP_OK);
    int64_t embed_shape[2] = {61, 32}, norm_shape[1] = {32};
    assert_int_equal(lp_st_writer_add(w, "model.embed_tokens.weight", LP_DTYPE_F32, 2, embed_shape,
                                      m.embed, &err), LP_OK);
    assert_int_equal(lp_st_writer_add(w, "model.norm.weight", LP_DTYPE_F32, 1, norm_shape,
                                      m.out_norm, &err), LP_OK);
    assert_int_equal(lp_st_writer_write(w, path, &err), LP_OK);
    lp_st_writer_destroy(w);
    memset(&err, 0, sizeof err);
    assert_int_not_equal(lp_model_open(dir, &model, &err), LP_OK);
    printf("  missing tensor: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "layer 0"));

    /* A config that disagrees with the tensors: 4 kv heads declared, 2 stored. */
    assert_true(ref_model_write_hf(&m, dir));
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *config;
    size_t size;
    assert_int_equal(lp_read_file(path, 1 << 20, &config, &size, &err), LP_OK);
    char *kv = strstr(config, "\"num_key_value_heads\": 2");
    assert_non_null(kv);
    kv[strlen("\"num_key_value_heads\": ")] = '4';
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(config, fp);
    fclose(fp);
    free(config);
    memset(&err, 0, sizeof err);
    assert_int_equal(lp_model_open(dir, &model, &err), LP_ERR_FORMAT);
    printf("  shape mismatch: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "k_proj"));
    assert_non_null(strstr(err.msg, "[16, 32]"));
    ref_model_free(&m);
    remove_dir(dir);
}


/* ---- a GGUF Mixtral: llama arch with expert_count, experts fused in 3-D tensors ---- */

static void gguf_experts(lp_gw *w, const char *name, int64_t n_experts, int64_t rows,
                         int64_t cols, uint64_t *seed, float **per_expert)
{
    float *deq;
    uint64_t bytes;
    uint8_t *data = random_quant(LP_DTYPE_Q8_0, n_experts * rows, cols, seed, &deq, &bytes);
    for (int64_t e = 0; e < n_experts; e++)
        memcpy(per_expert[e], deq + e * rows * cols, (size_t)(rows * cols) * sizeof(float));
    int64_t ne[3] = {cols, rows, n_experts};
    lp_gw_tensor(w, name, 3, ne, (uint32_t)lp_gguf_dtype_to_id(LP_DTYPE_Q8_0), data, bytes);
    free(deq);
    assert_true(n_gguf_data < 64);
    gguf_data[n_gguf_data++] = data;
}

/* llama arch with expert_count; experts fused in 3-D Q8_0 tensors. */
static void write_gguf_moe(lp_gw *w, ref_model *m)
{
    gguf_hparams(w, "llama", &m->cfg, 64); /* with expert_count: Mixtral */
    uint64_t seed = 5;
    int64_t ne_h[1] = {64}, ne_emb[2] = {64, 40};
    lp_gw_tensor(w, "token_embd.weight", 2, ne_emb, 0, m->embed, 40 * 64 * 4);
    lp_gw_tensor(w, "output.weight", 2, ne_emb, 0, m->lm_head, 40 * 64 * 4);
    lp_gw_tensor(w, "output_norm.weight", 1, ne_h, 0, m->out_norm, 64 * 4);
    char name[64];
    for (int l = 0; l < 2; l++) {
        ref_layer *L = &m->layers[l];
        int64_t ne_q[2] = {64, 64}, ne_kv[2] = {64, 32}, ne_r[2] = {64, 4};
#define T2(fmt, ne, data, bytes) \
    (snprintf(name, sizeof name, fmt, l), lp_gw_tensor(w, name, 2, ne, 0, data, bytes))
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        lp_gw_tensor(w, name, 1, ne_h, 0, L->attn_norm, 64 * 4);
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        lp_gw_tensor(w, name, 1, ne_h, 0, L->ffn_norm, 64 * 4);
        T2("blk.%d.attn_q.weight", ne_q, L->wq, 64 * 64 * 4);
        T2("blk.%d.attn_k.weight", ne_kv, L->wk, 32 * 64 * 4);
        T2("blk.%d.attn_v.weight", ne_kv, L->wv, 32 * 64 * 4);
        T2("blk.%d.attn_output.weight", ne_q, L->wo, 64 * 64 * 4);
        T2("blk.%d.ffn_gate_inp.weight", ne_r, L->router, 4 * 64 * 4);
#undef T2
        snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
        gguf_experts(w, name, 4, 32, 64, &seed, L->e_gate);
        snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", l);
        gguf_experts(w, name, 4, 32, 64, &seed, L->e_up);
        snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", l);
        gguf_experts(w, name, 4, 64, 32, &seed, L->e_down);
    }
}

/* ---- a GGUF Gemma as llama.cpp's converter writes it: norm weights stored as 1 + w ---- */

static float *plus_one(const float *w, int64_t n)
{
    float *out = malloc((size_t)n * sizeof *out);
    assert_non_null(out);
    for (int64_t i = 0; i < n; i++)
        out[i] = 1.0f + w[i];
    assert_true(n_gguf_data < 64);
    gguf_data[n_gguf_data++] = (uint8_t *)out;
    return out;
}

/* Gemma as llama.cpp's converter writes it: norm weights stored as 1 + w. */
static void write_gguf_gemma(lp_gw *w, ref_model *m)
{
    gguf_hparams(w, "gemma", &m->cfg, 64);
    int64_t ne_h[1] = {32}, ne_emb[2] = {32, 40}, ne_q[2] = {32, 64}, ne_kv[2] = {32, 16},
            ne_o[2] = {64, 32}, ne_up[2] = {32, 48}, ne_down[2] = {48, 32};
    lp_gw_tensor(w, "token_embd.weight", 2, ne_emb, 0, m->embed, 40 * 32 * 4);
    lp_gw_tensor(w, "output_norm.weight", 1, ne_h, 0, plus_one(m->out_norm, 32), 32 * 4);
    char name[64];
    for (int l = 0; l < 2; l++) {
        ref_layer *L = &m->layers[l];
#define T2(fmt, ne, data, bytes) \
    (snprintf(name, sizeof name, fmt, l), lp_gw_tensor(w, name, 2, ne, 0, data, bytes))
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        lp_gw_tensor(w, name, 1, ne_h, 0, plus_one(L->attn_norm, 32), 32 * 4);
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        lp_gw_tensor(w, name, 1, ne_h, 0, plus_one(L->ffn_norm, 32), 32 * 4);
        T2("blk.%d.attn_q.weight", ne_q, L->wq, 64 * 32 * 4);
        T2("blk.%d.attn_k.weight", ne_kv, L->wk, 16 * 32 * 4);
        T2("blk.%d.attn_v.weight", ne_kv, L->wv, 16 * 32 * 4);
        T2("blk.%d.attn_output.weight", ne_o, L->wo, 32 * 64 * 4);
        T2("blk.%d.ffn_gate.weight", ne_up, L->w_gate, 48 * 32 * 4);
        T2("blk.%d.ffn_up.weight", ne_up, L->w_up, 48 * 32 * 4);
        T2("blk.%d.ffn_down.weight", ne_down, L->w_down, 32 * 48 * 4);
#undef T2
    }
}

/* ---- a GGUF GPT-2: learned positions, fused qkv stored [out, in] (the converter transposes
 * Conv1D back), LayerNorm biases ---- */

/* Learned positions, fused qkv stored [out, in] (the converter transposes Conv1D back),
 * LayerNorm biases. */
static void write_gguf_gpt2(lp_gw *w, ref_model *m)
{
    gguf_hparams(w, "gpt2", &m->cfg, 24);
    int64_t ne_h[1] = {32}, ne_emb[2] = {32, 50}, ne_pos[2] = {32, 24}, ne_qkv[2] = {32, 96},
            ne_b3[1] = {96}, ne_o[2] = {32, 32}, ne_up[2] = {32, 64}, ne_b64[1] = {64},
            ne_down[2] = {64, 32};
    lp_gw_tensor(w, "token_embd.weight", 2, ne_emb, 0, m->embed, 50 * 32 * 4);
    lp_gw_tensor(w, "position_embd.weight", 2, ne_pos, 0, m->pos, 24 * 32 * 4);
    lp_gw_tensor(w, "output_norm.weight", 1, ne_h, 0, m->out_norm, 32 * 4);
    lp_gw_tensor(w, "output_norm.bias", 1, ne_h, 0, m->out_norm_b, 32 * 4);
    char name[64];
    for (int l = 0; l < 2; l++) {
        ref_layer *L = &m->layers[l];
        float *qkv = malloc(96 * 32 * sizeof(float)), *bqkv = malloc(96 * sizeof(float));
        assert_non_null(qkv);
        assert_non_null(bqkv);
        memcpy(qkv, L->wq, 32 * 32 * 4);
        memcpy(qkv + 32 * 32, L->wk, 32 * 32 * 4);
        memcpy(qkv + 2 * 32 * 32, L->wv, 32 * 32 * 4);
        memcpy(bqkv, L->bq, 32 * 4);
        memcpy(bqkv + 32, L->bk, 32 * 4);
        memcpy(bqkv + 64, L->bv, 32 * 4);
        gguf_data[n_gguf_data++] = (uint8_t *)qkv;
        gguf_data[n_gguf_data++] = (uint8_t *)bqkv;
#define T(fmt, nd, ne, data, bytes) \
    (snprintf(name, sizeof name, fmt, l), lp_gw_tensor(w, name, nd, ne, 0, data, bytes))
        T("blk.%d.attn_norm.weight", 1, ne_h, L->attn_norm, 32 * 4);
        T("blk.%d.attn_norm.bias", 1, ne_h, L->attn_norm_b, 32 * 4);
        T("blk.%d.attn_qkv.weight", 2, ne_qkv, qkv, 96 * 32 * 4);
        T("blk.%d.attn_qkv.bias", 1, ne_b3, bqkv, 96 * 4);
        T("blk.%d.attn_output.weight", 2, ne_o, L->wo, 32 * 32 * 4);
        T("blk.%d.attn_output.bias", 1, ne_h, L->bo, 32 * 4);
        T("blk.%d.ffn_norm.weight", 1, ne_h, L->ffn_norm, 32 * 4);
        T("blk.%d.ffn_norm.bias", 1, ne_h, L->ffn_norm_b, 32 * 4);
        T("blk.%d.ffn_up.weight", 2, ne_up, L->w_up, 64 * 32 * 4);
        T("blk.%d.ffn_up.bias", 1, ne_b64, L->b_up, 64 * 4);
        T("blk.%d.ffn_down.weight", 2, ne_down, L->w_down, 32 * 64 * 4);
        T("blk.%d.ffn_down.bias", 1, ne_h, L->b_down, 32 * 4);
#undef T
    }
}

/* ---- GGUF GPT-NeoX, Phi-2 and GPT-J as llama.cpp names them: f32 tensors straight from the
 * reference model's arrays, q | k | v fused where the converter fuses them ---- */

/* One f32 tensor of [rows, cols] (cols 0: a vector), named after layer l when the name has %d. */
static void gguf_f32(lp_gw *w, const char *fmt, int l, int64_t rows, int64_t cols,
                     const float *data)
{
    char name[64];
    snprintf(name, sizeof name, fmt, l);
    assert_non_null(data);
    int64_t ne[2] = {cols > 0 ? cols : rows, rows};
    lp_gw_tensor(w, name, cols > 0 ? 2 : 1, ne, 0, data, (size_t)(rows * (cols > 0 ? cols : 1)) * 4);
}

/* q | k | v rows (or biases) of one layer in one kept buffer. */
static const float *gguf_concat3(const float *q, const float *k, const float *v, int64_t nq,
                                 int64_t nkv)
{
    float *out = malloc((size_t)(nq + 2 * nkv) * sizeof *out);
    assert_non_null(out);
    memcpy(out, q, (size_t)nq * sizeof *out);
    memcpy(out + nq, k, (size_t)nkv * sizeof *out);
    memcpy(out + nq + nkv, v, (size_t)nkv * sizeof *out);
    assert_true(n_gguf_data < 64);
    gguf_data[n_gguf_data++] = (uint8_t *)out;
    return out;
}

/* The norms, MLP and output every LayerNorm family shares; the attention is the caller's. */
static void gguf_layernorm_model(lp_gw *w, ref_model *m, const char *arch, bool fused_qkv)
{
    const ref_config *c = &m->cfg;
    int64_t H = c->hidden, F = c->ffn, Q = c->n_heads * c->head_dim, KV = c->n_kv_heads * c->head_dim;
    gguf_hparams(w, arch, c, 64);
    gguf_f32(w, "token_embd.weight", -1, c->vocab, H, m->embed);
    if (m->pos) /* MPT without ALiBi */
        gguf_f32(w, "position_embd.weight", -1, c->n_positions, H, m->pos);
    if (m->embed_norm) {
        gguf_f32(w, "token_embd_norm.weight", -1, H, 0, m->embed_norm);
        gguf_f32(w, "token_embd_norm.bias", -1, H, 0, m->embed_norm_b);
    }
    for (int l = 0; l < c->n_layers; l++) {
        const ref_layer *L = &m->layers[l];
        gguf_f32(w, "blk.%d.attn_norm.weight", l, H, 0, L->attn_norm);
        if (L->attn_norm_b) /* not with MPT's no_bias */
            gguf_f32(w, "blk.%d.attn_norm.bias", l, H, 0, L->attn_norm_b);
        if (fused_qkv) {
            gguf_f32(w, "blk.%d.attn_qkv.weight", l, Q + 2 * KV, H,
                     gguf_concat3(L->wq, L->wk, L->wv, Q * H, KV * H));
            if (L->bq)
                gguf_f32(w, "blk.%d.attn_qkv.bias", l, Q + 2 * KV, 0,
                         gguf_concat3(L->bq, L->bk, L->bv, Q, KV));
        } else {
            gguf_f32(w, "blk.%d.attn_q.weight", l, Q, H, L->wq);
            gguf_f32(w, "blk.%d.attn_k.weight", l, KV, H, L->wk);
            gguf_f32(w, "blk.%d.attn_v.weight", l, KV, H, L->wv);
            if (L->bq) {
                gguf_f32(w, "blk.%d.attn_q.bias", l, Q, 0, L->bq);
                gguf_f32(w, "blk.%d.attn_k.bias", l, KV, 0, L->bk);
                gguf_f32(w, "blk.%d.attn_v.bias", l, KV, 0, L->bv);
            }
        }
        if (L->q_norm && c->family == REF_MPT) { /* qk_ln: [q_dim], [kv_dim] */
            gguf_f32(w, "blk.%d.attn_q_norm.weight", l, Q, 0, L->q_norm);
            gguf_f32(w, "blk.%d.attn_k_norm.weight", l, KV, 0, L->k_norm);
            if (L->q_norm_b) {
                gguf_f32(w, "blk.%d.attn_q_norm.bias", l, Q, 0, L->q_norm_b);
                gguf_f32(w, "blk.%d.attn_k_norm.bias", l, KV, 0, L->k_norm_b);
            }
        } else if (L->q_norm) { /* StableLM: the per-head norms stacked [heads, head_dim] */
            gguf_f32(w, "blk.%d.attn_q_norm.weight", l, c->n_heads, c->head_dim, L->q_norm);
            gguf_f32(w, "blk.%d.attn_k_norm.weight", l, c->n_kv_heads, c->head_dim, L->k_norm);
        }
        gguf_f32(w, "blk.%d.attn_output.weight", l, H, Q, L->wo);
        if (L->bo)
            gguf_f32(w, "blk.%d.attn_output.bias", l, H, 0, L->bo);
        if (L->ffn_norm && c->family == REF_FALCON) { /* ln_mlp */
            gguf_f32(w, "blk.%d.attn_norm_2.weight", l, H, 0, L->ffn_norm);
            gguf_f32(w, "blk.%d.attn_norm_2.bias", l, H, 0, L->ffn_norm_b);
        } else if (L->ffn_norm) {
            gguf_f32(w, "blk.%d.ffn_norm.weight", l, H, 0, L->ffn_norm);
            if (L->ffn_norm_b)
                gguf_f32(w, "blk.%d.ffn_norm.bias", l, H, 0, L->ffn_norm_b);
        }
        if (L->w_gate)
            gguf_f32(w, "blk.%d.ffn_gate.weight", l, F, H, L->w_gate);
        gguf_f32(w, "blk.%d.ffn_up.weight", l, F, H, L->w_up);
        gguf_f32(w, "blk.%d.ffn_down.weight", l, H, F, L->w_down);
        if (L->b_up) {
            gguf_f32(w, "blk.%d.ffn_up.bias", l, F, 0, L->b_up);
            gguf_f32(w, "blk.%d.ffn_down.bias", l, H, 0, L->b_down);
        }
    }
    gguf_f32(w, "output_norm.weight", -1, H, 0, m->out_norm);
    if (m->out_norm_b)
        gguf_f32(w, "output_norm.bias", -1, H, 0, m->out_norm_b);
    if (!c->tied)
        gguf_f32(w, "output.weight", -1, c->vocab, H, m->lm_head);
    if (m->lm_head_b)
        gguf_f32(w, "output.bias", -1, c->vocab, 0, m->lm_head_b);
}

/* gptneox: the converter reorders query_key_value's per-head [q_h, k_h, v_h] into q | k | v */
static void write_gguf_neox(lp_gw *w, ref_model *m) { gguf_layernorm_model(w, m, "gptneox", true); }
/* phi2: q, k, v apart (transformers' PhiForCausalLM), biased output */
static void write_gguf_phi2(lp_gw *w, ref_model *m) { gguf_layernorm_model(w, m, "phi2", false); }
static void write_gguf_gptj(lp_gw *w, ref_model *m) { gguf_layernorm_model(w, m, "gptj", false); }
/* falcon: query_key_value reordered into q | k | v (7B's multi-query layout already is) */
static void write_gguf_falcon(lp_gw *w, ref_model *m) { gguf_layernorm_model(w, m, "falcon", true); }
/* bloom: query_key_value reordered into q | k | v; tied */
static void write_gguf_bloom(lp_gw *w, ref_model *m) { gguf_layernorm_model(w, m, "bloom", true); }
/* mpt: Wqkv is already q | k | v; tied; biases and norm biases only without no_bias */
static void write_gguf_mpt(lp_gw *w, ref_model *m) { gguf_layernorm_model(w, m, "mpt", true); }
static void write_gguf_stablelm(lp_gw *w, ref_model *m)
{
    gguf_layernorm_model(w, m, "stablelm", false);
}

/* olmo2: no input norms; post_attention_norm and post_ffw_norm; q/k norms [q_dim], [kv_dim] */
static void write_gguf_olmo2(lp_gw *w, ref_model *m)
{
    const ref_config *c = &m->cfg;
    int64_t H = c->hidden, F = c->ffn, Q = c->n_heads * c->head_dim, KV = c->n_kv_heads * c->head_dim;
    gguf_hparams(w, "olmo2", c, 64);
    gguf_f32(w, "token_embd.weight", -1, c->vocab, H, m->embed);
    for (int l = 0; l < c->n_layers; l++) {
        const ref_layer *L = &m->layers[l];
        gguf_f32(w, "blk.%d.attn_q.weight", l, Q, H, L->wq);
        gguf_f32(w, "blk.%d.attn_k.weight", l, KV, H, L->wk);
        gguf_f32(w, "blk.%d.attn_v.weight", l, KV, H, L->wv);
        gguf_f32(w, "blk.%d.attn_q_norm.weight", l, Q, 0, L->q_norm);
        gguf_f32(w, "blk.%d.attn_k_norm.weight", l, KV, 0, L->k_norm);
        gguf_f32(w, "blk.%d.attn_output.weight", l, H, Q, L->wo);
        gguf_f32(w, "blk.%d.post_attention_norm.weight", l, H, 0, L->post_attn_norm);
        gguf_f32(w, "blk.%d.ffn_gate.weight", l, F, H, L->w_gate);
        gguf_f32(w, "blk.%d.ffn_up.weight", l, F, H, L->w_up);
        gguf_f32(w, "blk.%d.ffn_down.weight", l, H, F, L->w_down);
        gguf_f32(w, "blk.%d.post_ffw_norm.weight", l, H, 0, L->post_ffn_norm);
    }
    gguf_f32(w, "output_norm.weight", -1, H, 0, m->out_norm);
    gguf_f32(w, "output.weight", -1, c->vocab, H, m->lm_head);
}

/* phi3: attn_qkv (q | k | v) and gate | up fused as one ffn_up of 2 x ffn rows */
static void write_gguf_phi3(lp_gw *w, ref_model *m)
{
    const ref_config *c = &m->cfg;
    int64_t H = c->hidden, F = c->ffn, Q = c->n_heads * c->head_dim, KV = c->n_kv_heads * c->head_dim;
    gguf_hparams(w, "phi3", c, c->n_ctx > 0 ? (uint32_t)c->n_ctx : 64);
    if (c->longrope_orig > 0) {
        /* as convert_hf_to_gguf.py's Phi3MiniModel: the original context and the attention
         * factor it derives as keys, the factors as F32 tensors of rope_dim / 2 */
        double scale = (double)c->n_ctx / (double)c->longrope_orig;
        lp_gw_kv_u32(w, "phi3.rope.scaling.original_context_length", (uint32_t)c->longrope_orig);
        lp_gw_kv_f32(w, "phi3.rope.scaling.attn_factor",
                     (float)sqrt(1.0 + log(scale) / log((double)c->longrope_orig)));
        static float factors[2][LP_MAX_ROPE_FACTORS];
        const int64_t ne[1] = {c->rope_dim / 2};
        for (int64_t i = 0; i < c->rope_dim / 2; i++) {
            factors[0][i] = (float)c->long_factor[i];
            factors[1][i] = (float)c->short_factor[i];
        }
        lp_gw_tensor(w, "rope_factors_long.weight", 1, ne, 0, factors[0],
                     (size_t)ne[0] * sizeof(float));
        lp_gw_tensor(w, "rope_factors_short.weight", 1, ne, 0, factors[1],
                     (size_t)ne[0] * sizeof(float));
    }
    gguf_f32(w, "token_embd.weight", -1, c->vocab, H, m->embed);
    for (int l = 0; l < c->n_layers; l++) {
        const ref_layer *L = &m->layers[l];
        gguf_f32(w, "blk.%d.attn_norm.weight", l, H, 0, L->attn_norm);
        gguf_f32(w, "blk.%d.attn_qkv.weight", l, Q + 2 * KV, H,
                 gguf_concat3(L->wq, L->wk, L->wv, Q * H, KV * H));
        gguf_f32(w, "blk.%d.attn_output.weight", l, H, Q, L->wo);
        gguf_f32(w, "blk.%d.ffn_norm.weight", l, H, 0, L->ffn_norm);
        float *gate_up = malloc((size_t)(2 * F * H) * sizeof *gate_up);
        assert_non_null(gate_up);
        memcpy(gate_up, L->w_gate, (size_t)(F * H) * sizeof *gate_up);
        memcpy(gate_up + F * H, L->w_up, (size_t)(F * H) * sizeof *gate_up);
        assert_true(n_gguf_data < 64);
        gguf_data[n_gguf_data++] = (uint8_t *)gate_up;
        gguf_f32(w, "blk.%d.ffn_up.weight", l, 2 * F, H, gate_up);
        gguf_f32(w, "blk.%d.ffn_down.weight", l, H, F, L->w_down);
    }
    gguf_f32(w, "output_norm.weight", -1, H, 0, m->out_norm);
    gguf_f32(w, "output.weight", -1, c->vocab, H, m->lm_head);
}

/* ---- GGUF files the test writes, against the reference: one row per family ---- */

typedef struct gguf_case {
    const char *name;
    ref_config cfg;
    uint64_t seed;
    void (*write)(lp_gw *w, ref_model *m); /* metadata and tensors; m takes the stored values */
    int64_t T;
    int32_t ids[24];
    const char *family;  /* expected: lp_arch.family */
    double min_spread;   /* expected: the logits carry at least this much signal */
    double budget;       /* expected: max |real - reference| */
} gguf_case;

static const gguf_case gguf_cases[] = {
    {"gguf-quant",
     {.family = REF_LLAMA, .vocab = 48, .hidden = 256, .n_layers = 2, .n_heads = 4,
      .n_kv_heads = 2, .head_dim = 64, .ffn = 256, .eps = 1e-5, .theta = 10000,
      .rope_adjacent = true, .scale = 0.05},
     4242, write_gguf_quant, 12, {1, 7, 33, 2, 47, 0, 19, 19, 5, 40, 11, 3}, "llama", 0.1, 1e-4},
    {"gguf-moe",
     {.family = REF_MIXTRAL, .vocab = 40, .hidden = 64, .n_layers = 2, .n_heads = 4,
      .n_kv_heads = 2, .head_dim = 16, .ffn = 32, .eps = 1e-5, .theta = 10000,
      .rope_adjacent = true, .n_experts = 4, .top_k = 2, .scale = 0.2},
     777, write_gguf_moe, 15, {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 39}, "mixtral", 1e-2, 1e-4},
    {"gguf-gemma-norms",
     {.family = REF_GEMMA, .vocab = 40, .hidden = 32, .n_layers = 2, .n_heads = 4,
      .n_kv_heads = 1, .head_dim = 16, .ffn = 48, .eps = 1e-6, .theta = 10000, .tied = true,
      .scale = 0.2},
     31, write_gguf_gemma, 10, {2, 17, 5, 39, 0, 11, 11, 23, 8, 30}, "gemma", 1e-2, 1e-4},
    {"gguf-gpt2",
     {.family = REF_GPT2, .vocab = 50, .hidden = 32, .n_layers = 2, .n_heads = 4,
      .n_kv_heads = 4, .head_dim = 8, .ffn = 64, .n_positions = 24, .eps = 1e-5, .tied = true,
      .scale = 0.2},
     8, write_gguf_gpt2, 24, /* (t * 17 + 3) % 50: the whole learned position table */
     {3, 20, 37, 4, 21, 38, 5, 22, 39, 6, 23, 40, 7, 24, 41, 8, 25, 42, 9, 26, 43, 10, 27, 44},
     "gpt2", 1e-2, 1e-4},
    {"gguf-neox",
     {.family = REF_NEOX, .vocab = 47, .hidden = 36, .n_layers = 2, .n_heads = 3,
      .n_kv_heads = 3, .head_dim = 12, .ffn = 40, .eps = 1e-5, .theta = 10000, .rope_dim = 6,
      .parallel = true, .scale = 0.2},
     5, write_gguf_neox, 14, {1, 46, 3, 3, 17, 0, 22, 9, 30, 41, 8, 8, 2, 45}, "gpt_neox", 1e-2,
     1e-4},
    {"gguf-neox-sequential",
     {.family = REF_NEOX, .vocab = 47, .hidden = 36, .n_layers = 2, .n_heads = 3,
      .n_kv_heads = 3, .head_dim = 12, .ffn = 40, .eps = 1e-5, .theta = 10000, .rope_dim = 4,
      .parallel = false, .scale = 0.2},
     6, write_gguf_neox, 12, {4, 40, 12, 7, 7, 33, 1, 0, 19, 28, 46, 5}, "gpt_neox", 1e-2, 1e-4},
    {"gguf-phi2",
     {.family = REF_PHI, .vocab = 53, .hidden = 40, .n_layers = 2, .n_heads = 4,
      .n_kv_heads = 4, .head_dim = 10, .ffn = 48, .eps = 1e-5, .theta = 10000, .rope_dim = 4,
      .scale = 0.2},
     9, write_gguf_phi2, 13, {2, 52, 11, 11, 30, 7, 44, 0, 19, 38, 25, 6, 13}, "phi", 1e-2, 1e-4},
    {"gguf-gptj",
     {.family = REF_GPTJ, .vocab = 43, .hidden = 36, .n_layers = 2, .n_heads = 3,
      .n_kv_heads = 3, .head_dim = 12, .ffn = 48, .eps = 1e-5, .theta = 10000, .rope_dim = 6,
      .rope_adjacent = true, .scale = 0.2},
     10, write_gguf_gptj, 11, {0, 42, 17, 17, 5, 29, 33, 1, 8, 40, 21}, "gptj", 1e-2, 1e-4},
    {"gguf-stablelm2",
     {.family = REF_STABLELM, .vocab = 51, .hidden = 40, .n_layers = 2, .n_heads = 4,
      .n_kv_heads = 2, .head_dim = 10, .ffn = 44, .eps = 1e-5, .theta = 10000, .rope_dim = 2,
      .parallel = true, .qk_norm = true, .qkv_bias = true, .scale = 0.2},
     12, write_gguf_stablelm, 13, {7, 50, 3, 3, 21, 0, 14, 36, 9, 44, 2, 27, 19}, "stablelm", 1e-2,
     1e-4},
    {"gguf-stablelm-3b",
     {.family = REF_STABLELM, .vocab = 51, .hidden = 36, .n_layers = 2, .n_heads = 3,
      .n_kv_heads = 3, .head_dim = 12, .ffn = 44, .eps = 1e-5, .theta = 10000, .rope_dim = 4,
      .scale = 0.2},
     13, write_gguf_stablelm, 10, {1, 49, 30, 30, 8, 17, 0, 42, 23, 5}, "stablelm", 1e-2, 1e-4},
    {"gguf-falcon-7b",
     {.family = REF_FALCON, .vocab = 57, .hidden = 36, .n_layers = 2, .n_heads = 3,
      .n_kv_heads = 1, .head_dim = 12, .ffn = 144, .eps = 1e-5, .theta = 10000, .parallel = true,
      .tied = true, .scale = 0.2},
     14, write_gguf_falcon, 12, {3, 56, 20, 20, 1, 44, 9, 0, 31, 12, 50, 7}, "falcon", 1e-2, 1e-4},
    {"gguf-falcon-40b",
     {.family = REF_FALCON, .vocab = 57, .hidden = 40, .n_layers = 2, .n_heads = 4,
      .n_kv_heads = 2, .head_dim = 10, .ffn = 48, .eps = 1e-5, .theta = 10000, .parallel = true,
      .new_arch = true, .scale = 0.2},
     15, write_gguf_falcon, 11, {5, 2, 40, 40, 17, 33, 0, 56, 8, 21, 13}, "falcon", 1e-2, 1e-4},
    {"gguf-bloom",
     {.family = REF_BLOOM, .vocab = 41, .hidden = 36, .n_layers = 2, .n_heads = 6,
      .n_kv_heads = 6, .head_dim = 6, .ffn = 144, .eps = 1e-5, .alibi = true, .qkv_bias = true,
      .tied = true, .scale = 0.3},
     17, write_gguf_bloom, 13, {0, 40, 12, 12, 5, 33, 21, 8, 1, 39, 26, 14, 3}, "bloom", 1e-2,
     1e-4},
    /* mpt: max_alibi_bias, clamp_kqv and attn_q_norm/attn_k_norm as llama.cpp names them; the
     * GGUF has no logit_scale */
    {"gguf-mpt",
     {.family = REF_MPT, .vocab = 47, .hidden = 36, .n_layers = 2, .n_heads = 6,
      .n_kv_heads = 6, .head_dim = 6, .ffn = 72, .eps = 1e-5, .alibi = true, .alibi_max = 12,
      .qkv_bias = true, .qk_norm = true, .qkv_clip = 0.3, .tied = true, .scale = 0.3},
     19, write_gguf_mpt, 13, {0, 46, 12, 12, 5, 33, 21, 8, 1, 39, 26, 14, 3}, "mpt", 1e-2, 1e-4},
    {"gguf-mpt-no-bias",
     {.family = REF_MPT, .vocab = 41, .hidden = 42, .n_layers = 2, .n_heads = 6,
      .n_kv_heads = 2, .head_dim = 7, .ffn = 168, .eps = 1e-5, .alibi = true, .tied = true,
      .scale = 0.3},
     20, write_gguf_mpt, 12, {3, 40, 20, 20, 1, 34, 9, 0, 31, 12, 38, 7}, "mpt", 1e-2, 1e-4},
    {"gguf-mpt-learned",
     {.family = REF_MPT, .vocab = 43, .hidden = 36, .n_layers = 2, .n_heads = 6,
      .n_kv_heads = 6, .head_dim = 6, .ffn = 72, .n_positions = 40, .eps = 1e-5, .tied = true,
      .scale = 0.3},
     21, write_gguf_mpt, 14, {2, 42, 11, 11, 6, 30, 19, 7, 0, 37, 25, 13, 4, 9}, "mpt", 1e-2, 1e-4},
    {"gguf-phi3",
     {.family = REF_PHI3, .vocab = 45, .hidden = 40, .n_layers = 2, .n_heads = 4,
      .n_kv_heads = 2, .head_dim = 10, .ffn = 36, .eps = 1e-5, .theta = 10000, .rope_dim = 6,
      .scale = 0.3},
     18, write_gguf_phi3, 12, {2, 44, 30, 30, 7, 11, 0, 39, 16, 25, 3, 41}, "phi3", 1e-2, 1e-4},
    /* Phi-3 longrope as llama.cpp writes it (factors as tensors, original context 16 of 64):
     * 12 tokens take the short factors, 22 the long ones, as the safetensors form does */
    {"gguf-phi3-longrope-short",
     {.family = REF_PHI3, .vocab = 67, .hidden = 40, .n_layers = 2, .n_heads = 4,
      .n_kv_heads = 2, .head_dim = 10, .ffn = 36, .eps = 1e-5, .theta = 10000, .rope_dim = 6,
      .longrope_orig = 16, .n_ctx = 64, .short_factor = {1.0, 1.25, 2.5},
      .long_factor = {1.5, 4.0, 9.0}, .scale = 0.3},
     16, write_gguf_phi3, 12, {2, 44, 30, 30, 7, 11, 0, 39, 16, 25, 3, 41}, "phi3", 1e-2, 1e-4},
    {"gguf-phi3-longrope-long",
     {.family = REF_PHI3, .vocab = 67, .hidden = 40, .n_layers = 2, .n_heads = 4,
      .n_kv_heads = 2, .head_dim = 10, .ffn = 36, .eps = 1e-5, .theta = 10000, .rope_dim = 6,
      .longrope_orig = 16, .n_ctx = 64, .short_factor = {1.0, 1.25, 2.5},
      .long_factor = {1.5, 4.0, 9.0}, .scale = 0.3},
     16, write_gguf_phi3, 22,
     {2, 44, 30, 30, 7, 11, 0, 39, 16, 25, 3, 41, 60, 5, 5, 18, 66, 9, 33, 1, 50, 27}, "phi3",
     1e-2, 1e-4},
    {"gguf-olmo2",
     {.family = REF_OLMO2, .vocab = 45, .hidden = 40, .n_layers = 2, .n_heads = 4,
      .n_kv_heads = 2, .head_dim = 10, .ffn = 36, .eps = 1e-6, .theta = 500000, .qk_norm = true,
      .scale = 0.2},
     16, write_gguf_olmo2, 12, {1, 44, 22, 22, 9, 0, 35, 17, 4, 28, 40, 13}, "olmo2", 1e-2, 1e-4},
};

static void test_gguf_case(void **state)
{
    const gguf_case *gc = *state;
    ref_model m;
    assert_true(ref_model_random(&gc->cfg, gc->seed, &m));
    lp_gw w;
    lp_gw_init(&w, 3);
    gc->write(&w, &m);
    assert_true(lp_gw_finish(&w));
    char path[512];
    snprintf(path, sizeof path, "%s/forward_%s_%ld.gguf", lp_test_tmp_dir(), gc->name,
             (long)getpid());
    assert_true(lp_gw_write(&w, path));
    lp_gw_free(&w);
    while (n_gguf_data > 0)
        free(gguf_data[--n_gguf_data]);
    ref_outputs ref;
    assert_true(ref_forward(&m, gc->ids, gc->T, &ref));
    lp_model *model;
    lp_error err = {0};
    if (lp_model_open(path, &model, &err) != LP_OK)
        fail_msg("%s: %s", gc->name, err.msg);
    assert_string_equal(lp_model_arch(model)->family, gc->family);
    compare_with_ref(gc->name, model, gc->ids, gc->T, &gc->cfg, &ref, gc->budget);
    double spread = logit_spread(&ref, gc->T * gc->cfg.vocab);
    printf("  %-18s logits spread %.3f (at least %.2f)\n", gc->name, spread, gc->min_spread);
    assert_true(spread > gc->min_spread);
    if (gc->cfg.n_positions > 0) {
        /* one position past the learned table is refused before anything runs */
        int32_t more[64] = {0};
        lp_batch too_long = lp_batch_single(more, gc->cfg.n_positions + 1);
        char want[64];
        snprintf(want, sizeof want, "%lld positions", (long long)gc->cfg.n_positions);
        assert_int_equal(lp_forward_check(model, &too_long, &err), LP_ERR_RANGE);
        assert_non_null(strstr(err.msg, want));
    }
    lp_model_close(model);
    ref_outputs_free(&ref);
    ref_model_free(&m);
    remove(path);
}

/* ---- ALiBi slopes: MPT's rule against BLOOM's ---- */

/* MPT's gen_slopes (modeling_mpt.py), written as it is: slopes 2^(-max (i + 1) / P) for the next
 * power of two P >= n, then for n < P the odd-indexed ones followed by the even-indexed ones, cut
 * to n. lp_alibi_slopes follows BLOOM's build_alibi_tensor (the largest power of two p <= n, then
 * extra slopes interleaved at half steps) with MPT's alibi_bias_max in place of BLOOM's fixed 8:
 * the two constructions agree for every head count, power of two or not. */
static void test_alibi_slopes_mpt(void **state)
{
    (void)state;
    static const int64_t counts[] = {1, 2, 3, 5, 6, 7, 12, 16, 40, 71};
    static const double max_biases[] = {8.0, 16.0, 3.0};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
        for (size_t mi = 0; mi < sizeof max_biases / sizeof max_biases[0]; mi++) {
            int64_t n = counts[ci], P = 1;
            double max_bias = max_biases[mi], mine[128], mpt[256], ordered[256];
            while (P < n)
                P *= 2;
            for (int64_t i = 0; i < P; i++)
                mpt[i] = 1.0 / pow(2.0, (double)(i + 1) * (max_bias / (double)P));
            int64_t k = 0;
            for (int64_t i = P != n ? 1 : 0; i < P; i += P != n ? 2 : 1)
                ordered[k++] = mpt[i];
            for (int64_t i = 0; P != n && i < P; i += 2)
                ordered[k++] = mpt[i];
            lp_alibi_slopes(n, max_bias, mine);
            for (int64_t h = 0; h < n; h++)
                if (fabs(mine[h] - ordered[h]) > 1e-15 * ordered[h])
                    fail_msg("%lld heads, alibi_bias_max %g: head %lld slope %.17g, MPT %.17g",
                             (long long)n, max_bias, (long long)h, mine[h], ordered[h]);
        }
}

/* ---- the scratch size a config needs (what loupe estimate can print) ---- */

static void test_scratch_bytes(void **state)
{
    (void)state;
    ref_model m;
    char dir[512];
    lp_model *model = small_llama(&m, dir, sizeof dir);
    const lp_arch *a = lp_model_arch(model); /* 4 heads, hidden 32, vocab 61 */
    const int64_t T = 20;
    uint64_t bare = lp_forward_scratch_bytes(a, T, 1, false);
    uint64_t one_map = lp_forward_scratch_bytes(a, T, 1, true);
    uint64_t two_maps = lp_forward_scratch_bytes(a, T, 2, true);
    printf("  scratch for T=20: %llu bytes bare, %llu with maps on 1 thread, %llu on 2\n",
           (unsigned long long)bare, (unsigned long long)one_map, (unsigned long long)two_maps);
    /* at least the residual stream, the normed input, the sublayer output and the logits */
    assert_true(bare >= (uint64_t)(3 * T * 32 + T * 61) * 4);
    /* each thread's probability slot is one [T, T] f32 map (T*T*4 = 1600: no rounding) */
    assert_int_equal(two_maps - one_map, T * T * 4);
    assert_true(one_map > bare + T * T * 4 - 128 && one_map <= bare + T * T * 4 + 128);
    /* no maps: threads cost nothing; maps: never more slots than heads */
    assert_int_equal(lp_forward_scratch_bytes(a, T, 8, false), bare);
    assert_int_equal(lp_forward_scratch_bytes(a, T, 100, true), lp_forward_scratch_bytes(a, T, 4, true));
    assert_true(lp_forward_scratch_bytes(a, 2 * T, 1, false) > bare);
    /* nothing to size */
    lp_arch empty;
    memset(&empty, 0, sizeof empty);
    assert_int_equal(lp_forward_scratch_bytes(&empty, T, 1, true), 0);
    assert_int_equal(lp_forward_scratch_bytes(a, 0, 1, true), 0);
    assert_int_equal(lp_forward_scratch_bytes(a, T, 0, true), 0);
    assert_int_equal(lp_forward_scratch_bytes(NULL, T, 1, true), 0);
    lp_model_close(model);
    ref_model_free(&m);
    remove_dir(dir);
}

/* ---- RoPE frequencies with scaling (Hugging Face's _compute_*_parameters) ---- */

static void test_rope_scaling(void **state)
{
    (void)state;
    ref_model m;
    char dir[512];
    lp_model *base = small_llama(&m, dir, sizeof dir);
    lp_arch a = *lp_model_arch(base);
    a.rope_theta = 500000.0;
    a.head_dim = 8;
    a.rope_dim = 8;
    a.n_ctx = 131072;
    float f[4], attn;
    lp_error err = {0};
    lp_model *model;

    /* llama3 (Llama 3.1: factor 8, low 1, high 4, original 8192) */
    a.rope_scaling.kind = LP_ROPE_SCALING_LLAMA3;
    a.rope_scaling.factor = 8.0;
    a.rope_scaling.low_freq_factor = 1.0;
    a.rope_scaling.high_freq_factor = 4.0;
    a.rope_scaling.original_ctx = 8192;
    assert_int_equal(lp_model_from_weights(lp_model_weights(base), &a, &model, &err), LP_OK);
    assert_int_equal(lp_model_rope_freqs(model, 16, false, f, &attn, &err), LP_OK);
    double pi = 3.14159265358979323846;
    for (int i = 0; i < 4; i++) {
        double inv = pow(500000.0, -(double)(2 * i) / 8.0);
        double wavelen = 2 * pi / inv, want;
        if (wavelen < 8192.0 / 4.0)
            want = inv;
        else if (wavelen > 8192.0 / 1.0)
            want = inv / 8.0;
        else {
            double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
            want = (1 - smooth) * inv / 8.0 + smooth * inv;
        }
        assert_true(fabs((double)f[i] - want) <= 1e-6 * want);
    }
    /* with d = 8 and theta 5e5: wavelengths 6.3, 167, 4397 (blended), 1.2e5 (divided) */
    assert_true(fabs((double)f[0] - 1.0) < 1e-7);
    assert_true(fabs((double)f[3] - pow(500000.0, -0.75) / 8.0) < 1e-12);
    assert_true((double)f[2] < pow(500000.0, -0.5) && (double)f[2] > pow(500000.0, -0.5) / 8.0);
    assert_true(attn == 1.0f);
    lp_model_close(model);

    /* linear */
    a.rope_scaling.kind = LP_ROPE_SCALING_LINEAR;
    a.rope_scaling.factor = 4.0;
    assert_int_equal(lp_model_from_weights(lp_model_weights(base), &a, &model, &err), LP_OK);
    assert_int_equal(lp_model_rope_freqs(model, 16, false, f, &attn, &err), LP_OK);
    for (int i = 0; i < 4; i++)
        assert_true(fabs((double)f[i] - pow(500000.0, -(double)(2 * i) / 8.0) / 4.0) < 1e-7);
    lp_model_close(model);

    /* dynamic NTK: unchanged up to the original context, then base * 3^(8/6) at twice it */
    a.rope_scaling.kind = LP_ROPE_SCALING_DYNAMIC;
    a.rope_scaling.factor = 2.0;
    a.rope_scaling.original_ctx = 0;
    a.n_ctx = 64; /* HF's dynamic NTK measures against max_position_embeddings */
    assert_int_equal(lp_model_from_weights(lp_model_weights(base), &a, &model, &err), LP_OK);
    assert_int_equal(lp_model_rope_freqs(model, 64, false, f, &attn, &err), LP_OK);
    assert_true(fabs((double)f[1] - pow(500000.0, -0.25)) < 1e-9);
    assert_int_equal(lp_model_rope_freqs(model, 128, false, f, &attn, &err), LP_OK);
    double grown = 500000.0 * pow(3.0, 8.0 / 6.0);
    assert_true(fabs((double)f[1] - pow(grown, -0.25)) <= 1e-6 * pow(grown, -0.25));
    lp_model_close(model);

    /* YaRN: factor 4, original 64: the fastest pair extrapolates (unchanged), the slowest
     * interpolates (divided by 4), cos/sin scaled by 0.1 ln 4 + 1. */
    a.rope_scaling.kind = LP_ROPE_SCALING_YARN;
    a.rope_scaling.factor = 0.0; /* absent: n_ctx / original = 256 / 64 */
    a.rope_scaling.original_ctx = 64;
    a.n_ctx = 256;
    a.rope_theta = 10000.0;
    assert_int_equal(lp_model_from_weights(lp_model_weights(base), &a, &model, &err), LP_OK);
    assert_int_equal(lp_model_rope_freqs(model, 16, false, f, &attn, &err), LP_OK);
    assert_true(fabs((double)attn - (0.1 * log(4.0) + 1.0)) < 1e-6);
    assert_true(fabs((double)f[0] - 1.0) < 1e-7);
    assert_true(fabs((double)f[3] - pow(10000.0, -0.75) / 4.0) < 1e-9);
    lp_model_close(model);

    /* YaRN's ramp between correction dims lo = 8 ln(64 / (32 2 pi)) / (2 ln 1e4) < 0 (clamped
     * to 0) and hi = 8 ln(64 / (2 pi)) / (2 ln 1e4) = 1.008: truncated (transformers' default)
     * hi is ceiled to 2 and pair 1 blends half and half; with truncate false (gpt-oss) it keeps
     * 1 / 1.008 of the interpolated frequency. */
    double hi = 8.0 * log(64.0 / (2.0 * pi)) / (2.0 * log(10000.0));
    double f1 = pow(10000.0, -0.25);
    for (int unrounded = 0; unrounded < 2; unrounded++) {
        a.rope_scaling.yarn_unrounded = unrounded != 0;
        assert_int_equal(lp_model_from_weights(lp_model_weights(base), &a, &model, &err), LP_OK);
        assert_int_equal(lp_model_rope_freqs(model, 16, false, f, &attn, &err), LP_OK);
        double ramp = unrounded ? 1.0 / hi : 0.5;
        double want = (f1 / 4.0) * ramp + f1 * (1.0 - ramp);
        assert_true(fabs((double)f[1] - want) <= 1e-6 * want);
        assert_true(fabs((double)f[0] - 1.0) < 1e-7);
        lp_model_close(model);
    }
    a.rope_scaling.yarn_unrounded = false;

    lp_model_close(base);
    ref_model_free(&m);
    remove_dir(dir);
}

/* ---- the safetensors writer, read back through the catalogue ---- */

static void test_safetensors_writer(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/writer_%ld.safetensors", lp_test_tmp_dir(), (long)getpid());
    lp_st_writer *w;
    lp_error err = {0};
    assert_int_equal(lp_st_writer_create(&w, &err), LP_OK);
    float a[6] = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, 65504.0f};
    int64_t s23[2] = {2, 3}, s3[1] = {3};
    assert_int_equal(lp_st_writer_add(w, "a.weight", LP_DTYPE_F32, 2, s23, a, &err), LP_OK);
    assert_int_equal(lp_st_writer_add_f32_as(w, "b.weight", LP_DTYPE_BF16, 2, s23, a, &err), LP_OK);
    assert_int_equal(lp_st_writer_add_f32_as(w, "c", LP_DTYPE_F16, 1, s3, a, &err), LP_OK);
    assert_int_equal(lp_st_writer_add(w, "a.weight", LP_DTYPE_F32, 2, s23, a, &err), LP_ERR_USAGE);
    assert_int_equal(lp_st_writer_add(w, "q", LP_DTYPE_Q4_0, 1, s3, a, &err), LP_ERR_UNSUPPORTED);
    int64_t neg[1] = {-1};
    assert_int_equal(lp_st_writer_add(w, "n", LP_DTYPE_F32, 1, neg, a, &err), LP_ERR_RANGE);
    assert_int_equal(lp_st_writer_set_metadata(w, "format", "pt", &err), LP_OK);
    assert_int_equal(lp_st_writer_write(w, path, &err), LP_OK);
    lp_st_writer_destroy(w);

    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t len[8];
    assert_int_equal(fread(len, 1, 8, f), 8);
    fclose(f);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)len[i] << (8 * i);
    assert_int_equal((8 + n) % 8, 0); /* data starts 8-aligned */

    lp_weights *wts;
    if (lp_weights_open(path, &wts, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(lp_weights_count(wts), 3);
    const lp_tensor *ta = lp_weights_find_name(wts, "a.weight");
    const lp_tensor *tb = lp_weights_find_name(wts, "b.weight");
    const lp_tensor *tc = lp_weights_find_name(wts, "c");
    assert_non_null(ta);
    assert_non_null(tb);
    assert_non_null(tc);
    assert_int_equal(ta->dtype, LP_DTYPE_F32);
    assert_int_equal(tb->dtype, LP_DTYPE_BF16);
    assert_int_equal(tc->dtype, LP_DTYPE_F16);
    assert_int_equal(tb->shape[0], 2);
    assert_int_equal(tb->shape[1], 3);
    float back[6];
    assert_int_equal(lp_tensor_rows_f32(ta, 0, 2, back, &err), LP_OK);
    assert_memory_equal(back, a, sizeof a);
    assert_int_equal(lp_tensor_rows_f32(tb, 0, 2, back, &err), LP_OK);
    for (int i = 0; i < 6; i++)
        assert_true(back[i] == lp_bf16_to_f32(lp_f32_to_bf16(a[i])));
    assert_int_equal(lp_tensor_rows_f32(tc, 0, 1, back, &err), LP_OK);
    for (int i = 0; i < 3; i++)
        assert_true(back[i] == a[i]); /* exactly representable in f16 */
    lp_weights_close(wts);
    remove(path);
}

int main(void)
{
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_safetensors_writer),
        cmocka_unit_test(test_padding_batch),
        cmocka_unit_test(test_stacked_batch),
        cmocka_unit_test(test_determinism_threads),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_rope_scaling),
        cmocka_unit_test(test_scratch_bytes),
        cmocka_unit_test(test_alibi_slopes_mpt),
    };
    /* one test per table row, named after it, with the row as its state */
    enum { N_FIXED = sizeof fixed / sizeof fixed[0],
           N_RANDOM = sizeof random_cases / sizeof random_cases[0],
           N_GGUF = sizeof gguf_cases / sizeof gguf_cases[0] };
    struct CMUnitTest unit[N_FIXED + N_RANDOM + N_GGUF];
    size_t n = 0;
    for (size_t i = 0; i < N_FIXED; i++)
        unit[n++] = fixed[i];
    for (size_t i = 0; i < N_RANDOM; i++)
        unit[n++] = (struct CMUnitTest){random_cases[i].name, test_random_case, NULL, NULL,
                                        (void *)&random_cases[i]};
    for (size_t i = 0; i < N_GGUF; i++)
        unit[n++] = (struct CMUnitTest){gguf_cases[i].name, test_gguf_case, NULL, NULL,
                                        (void *)&gguf_cases[i]};
    /* _cmocka_run_group_tests is what cmocka_run_group_tests_name expands to, with the count
     * given instead of taken from an array's size */
    int failed = _cmocka_run_group_tests("forward", unit, n, NULL, NULL);
    if (!lp_test_shared_dir()) {
        printf("SKIP golden stories260K tests: ../shared not found (set LOUPE_SHARED)\n");
        return failed;
    }
    const struct CMUnitTest golden[] = {
        cmocka_unit_test(test_stories_golden),
        cmocka_unit_test(test_stories_quant_greedy),
        cmocka_unit_test(test_stories_formats_agree_long),
    };
    return failed | cmocka_run_group_tests_name("forward_golden", golden, NULL, NULL);
}
