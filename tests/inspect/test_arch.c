/* Tests of the model description (lp_arch): HF config.json rules per family, bad configs, YAML
 * cards and their round trip, the llama2.c header and lp_arch_load's dispatch.
 *
 * Built three times (tests/arch.cmake): test_arch runs the cases that need nothing but the source
 * tree; test_arch_golden (LP_ARCH_GOLDEN) runs the ones that read ../shared: every real config,
 * every card against the config it was taken from, and stories260K's llama2.c header; fuzz_arch
 * (LP_ARCH_FUZZ, at the end) is the fuzz entry point for the config and card readers. */
#define _POSIX_C_SOURCE 200809L
#ifndef LP_ARCH_FUZZ
#include "test_util.h"

#include <dirent.h>
#include <stddef.h>
#include <math.h>
#include <unistd.h>

#include "core/platform.h"
#include "inspect/arch/arch_internal.h"
#include "inspect/arch/arch_json.h"
#include "inspect/inspect.h"
#include "arch_expect.h"

/* ---------------------------------------------------------------------------------------------
 * Helpers
 */

#ifndef LP_ARCH_GOLDEN
/* Write text to <tmp>/arch_<name> and return the path (static buffer per slot). */
static const char *write_tmp(const char *name, const char *text)
{
    static char paths[8][512];
    static int slot;
    char *path = paths[slot++ % 8];
    snprintf(path, 512, "%s/arch_%s", lp_test_tmp_dir(), name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static lp_arch *parse_hf_text(const char *name, const char *json)
{
    static lp_arch arch;
    lp_error err = {0};
    const char *path = write_tmp(name, json);
    lp_status st = lp_arch_from_hf_config(path, &arch, &err);
    if (st != LP_OK)
        fail_msg("%s: %s", name, err.msg);
    return &arch;
}

/* Expect LP_ERR_FORMAT from a config whose message names the file and every given word. */
static void expect_hf_error(const char *name, const char *json, lp_status want,
                            const char *word1, const char *word2)
{
    lp_arch arch;
    lp_error err = {0};
    const char *path = write_tmp(name, json);
    lp_status st = lp_arch_from_hf_config(path, &arch, &err);
    if (st != want)
        fail_msg("%s: status %s, want %s (%s)", name, lp_status_name(st), lp_status_name(want),
                 err.msg);
    if (!strstr(err.msg, path))
        fail_msg("%s: message does not name the file: %s", name, err.msg);
    if (word1 && !strstr(err.msg, word1))
        fail_msg("%s: message lacks '%s': %s", name, word1, err.msg);
    if (word2 && !strstr(err.msg, word2))
        fail_msg("%s: message lacks '%s': %s", name, word2, err.msg);
}

static void expect_card_error(const char *name, const char *yaml, const char *word1,
                              const char *word2)
{
    lp_arch arch;
    lp_error err = {0};
    const char *path = write_tmp(name, yaml);
    lp_status st = lp_arch_from_yaml(path, &arch, &err);
    if (st != LP_ERR_FORMAT)
        fail_msg("%s: status %s, want format error (%s)", name, lp_status_name(st), err.msg);
    if (!strstr(err.msg, path))
        fail_msg("%s: message does not name the file: %s", name, err.msg);
    if (word1 && !strstr(err.msg, word1))
        fail_msg("%s: message lacks '%s': %s", name, word1, err.msg);
    if (word2 && !strstr(err.msg, word2))
        fail_msg("%s: message lacks '%s': %s", name, word2, err.msg);
}

#endif

/* The first field where two descriptions differ (name and source excluded), or NULL. */
static const char *arch_diff(const lp_arch *a, const lp_arch *b, char *why, size_t why_size)
{
#define SAME_I(f)                                                                               \
    if (a->f != b->f) {                                                                         \
        snprintf(why, why_size, #f ": %lld vs %lld", (long long)a->f, (long long)b->f);         \
        return why;                                                                             \
    }
#define SAME_D(f)                                                                               \
    if (a->f != b->f) {                                                                         \
        snprintf(why, why_size, #f ": %.17g vs %.17g", (double)a->f, (double)b->f);             \
        return why;                                                                             \
    }
    if (strcmp(a->family, b->family) != 0) {
        snprintf(why, why_size, "family: %s vs %s", a->family, b->family);
        return why;
    }
    SAME_I(vocab_size) SAME_I(hidden_size) SAME_I(n_layers) SAME_I(n_heads) SAME_I(n_kv_heads)
    SAME_I(head_dim) SAME_I(head_dim_explicit) SAME_I(ffn_hidden) SAME_I(ffn_kind) SAME_I(act)
    SAME_I(norm_kind) SAME_D(norm_eps) SAME_I(norm_weight_plus_one) SAME_I(post_attn_norm)
    SAME_I(post_ffn_norm) SAME_I(qk_norm) SAME_I(qk_norm_full) SAME_I(no_input_norm)
    SAME_I(embed_norm) SAME_I(final_norm) SAME_I(pos_kind) SAME_I(pos_table_rows)
    SAME_I(pos_offset) SAME_D(rope_theta) SAME_D(partial_rotary) SAME_I(rope_dim)
    SAME_I(rope_layout) SAME_I(rope_scaling.kind) SAME_D(rope_scaling.factor)
    SAME_I(rope_scaling.original_ctx) SAME_D(rope_scaling.low_freq_factor)
    SAME_D(rope_scaling.high_freq_factor) SAME_D(rope_scaling.beta_fast)
    SAME_D(rope_scaling.beta_slow) SAME_D(rope_scaling.attention_factor)
    SAME_D(rope_local_theta) SAME_I(n_ctx) SAME_I(tied_embeddings) SAME_I(bias_qkv)
    SAME_I(bias_o) SAME_I(bias_mlp) SAME_I(bias_lm_head) SAME_I(bias_norm) SAME_I(sliding_window)
    SAME_I(n_experts) SAME_I(n_experts_per_tok) SAME_I(n_shared_experts)
    SAME_I(expert_ffn_hidden) SAME_I(shared_expert_ffn_hidden) SAME_I(shared_expert_gate)
    SAME_I(router_score_bias) SAME_I(norm_topk_prob) SAME_I(mla) SAME_I(q_lora_rank)
    SAME_I(kv_lora_rank) SAME_I(qk_rope_head_dim) SAME_I(qk_nope_head_dim) SAME_I(v_head_dim)
    SAME_I(parallel_block) SAME_I(parallel_two_norms) SAME_D(embed_scale)
    SAME_D(attn_logit_softcap) SAME_D(final_logit_softcap) SAME_D(query_scale)
    SAME_I(n_mtp_layers) SAME_I(storage_dtype) SAME_I(bos_token_id) SAME_I(eos_token_id)
    SAME_I(router_bias) SAME_I(attn_sinks) SAME_I(qk_norm_per_head)
    SAME_I(embed_proj_dim) SAME_I(post_norm) SAME_I(encoder_only) SAME_I(n_token_types)
    SAME_I(pooler) SAME_D(alibi_max_bias) SAME_D(qkv_clip) SAME_D(logit_scale) SAME_I(rope_scaling.n_factors)
    SAME_I(rope_scaling.yarn_unrounded)
    SAME_I(router_sigmoid) SAME_I(n_expert_groups) SAME_I(topk_groups) SAME_D(routed_scaling)
    SAME_D(swiglu_limit)
    for (int i = 0; i < LP_MAX_ROPE_FACTORS; i++) {
        SAME_D(rope_scaling.short_factor[i]) SAME_D(rope_scaling.long_factor[i])
    }
    if (strcmp(a->assumed_family, b->assumed_family) != 0) {
        snprintf(why, why_size, "assumed_family: '%s' vs '%s'", a->assumed_family,
                 b->assumed_family);
        return why;
    }
    for (int l = 0; l < LP_MAX_LAYERS; l++) {
        SAME_I(layer_kv_heads[l]) SAME_I(layer_ffn_hidden[l]) SAME_I(layer_window[l])
        SAME_I(layer_moe[l])
    }
    return NULL;
#undef SAME_I
#undef SAME_D
}

/* Cards whose source config.json is in ../shared/configs: card name, folder there. */
static const char *const SHARED_PAIRS[][2] = {
    {"gpt2", "gpt2"},
    {"opt-125m", "opt-125m"},
    {"bloomz-560m", "bloomz-560m"},
    {"llama-2-7b", "Llama-2-7b-hf"},
    {"llama-3.1-8b", "Llama-3.1-8B"},
    {"llama-3.2-1b", "Llama-3.2-1B"},
    {"smollm2-135m", "SmolLM2-135M"},
    {"mistral-7b-v0.1", "Mistral-7B-v0.1"},
    {"mixtral-8x7b-v0.1", "Mixtral-8x7B-v0.1"},
    {"qwen2.5-0.5b-instruct", "Qwen2.5-0.5B-Instruct"},
    {"qwen3-8b", "Qwen3-8B"},
    {"qwen3-30b-a3b", "Qwen3-30B-A3B"},
    {"gemma-2b", "gemma-2b"},
    {"phi-2", "phi-2"},
    {"phi-3-mini-4k-instruct", "Phi-3-mini-4k-instruct"},
    {"stablelm-3b-4e1t", "stablelm-3b-4e1t"},
    {"deepseek-v2-lite", "DeepSeek-V2-Lite"},
};

/* Write arch as a card, read it back, and require the same description. */
static void check_round_trip(const lp_arch *arch, const char *label)
{
    char path[512];
    snprintf(path, sizeof path, "%s/arch_roundtrip_%d.yaml", lp_test_tmp_dir(), (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    lp_error err = {0};
    assert_int_equal(lp_arch_write_yaml(arch, "https://example.invalid/config.json", f, &err),
                     LP_OK);
    fclose(f);
    lp_arch back;
    if (lp_arch_from_yaml(path, &back, &err) != LP_OK)
        fail_msg("%s: written card does not load: %s", label, err.msg);
    char why[256];
    if (arch_diff(arch, &back, why, sizeof why))
        fail_msg("%s: card round trip differs in %s", label, why);
    unlink(path);
}

/* ---------------------------------------------------------------------------------------------
 * Unit cases: configs written by the test
 */
#ifndef LP_ARCH_GOLDEN

static void test_defaults_and_names(void **state)
{
    (void)state;
    /* A tripwire: lp_arch grew or changed. Whoever adds a field must also add it to arch_diff
     * below, to the card schema (FIELDS in inspect/arch/yaml_card.c, configs/README.md), to
     * inspect/arch/arch_json.c and to the HF reader; then update these numbers and the field named
     * here (the last one). A bool that fits in the trailing padding slips past sizeof. */
    size_t end_of_fields = offsetof(lp_arch, swiglu_limit) + sizeof(double);
    if (end_of_fields != 17872 || sizeof(lp_arch) != 17872)
        fail_msg("lp_arch's fields end at byte %zu, not 17872 (or sizeof changed): see above",
                 end_of_fields);
    lp_arch a;
    lp_arch_init(&a);
    assert_true(a.norm_eps == 1e-5);
    assert_true(a.rope_theta == 10000.0);
    assert_true(a.partial_rotary == 1.0);
    assert_true(a.embed_scale == 1.0);
    assert_true(a.final_norm);
    assert_int_equal(a.bos_token_id, -1);
    assert_int_equal(a.eos_token_id, -1);
    lp_error err = {0};
    /* an empty description is refused, naming the first missing value */
    assert_int_equal(lp_arch_finish(&a, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "n_layers"));
    assert_string_equal(lp_ffn_kind_name(LP_FFN_GEGLU), "geglu");
    assert_string_equal(lp_norm_kind_name(LP_NORM_LAYER), "layer");
    assert_string_equal(lp_pos_kind_name(LP_POS_ALIBI), "alibi");
    assert_string_equal(lp_rope_scaling_name(LP_ROPE_SCALING_YARN), "yarn");
    assert_string_equal(lp_activation_name(LP_ACT_GELU_TANH), "gelu_tanh");
    assert_string_equal(lp_activation_name((lp_activation)99), "invalid");
}

/* MPT's refusals: what neither estimate nor trace can read, by name. */
static void test_mpt_config(void **state)
{
    (void)state;
    expect_hf_error("mpt_type.json", "{\"model_type\": \"mpt\", \"attn_config\": {\"attn_type\":"
                    " \"sliding\"}}", LP_ERR_UNSUPPORTED, "attn_config.attn_type", "sliding");
    expect_hf_error("mpt_norm.json", "{\"model_type\": \"mpt\", \"norm_type\": \"rmsnorm\"}",
                    LP_ERR_UNSUPPORTED, "norm_type", "rmsnorm");
    expect_hf_error("mpt_ratio.json", "{\"model_type\": \"mpt\", \"d_model\": 10,"
                    " \"n_heads\": 2, \"expansion_ratio\": 0.25}", LP_ERR_FORMAT,
                    "expansion_ratio", NULL);
    expect_hf_error("mpt_logit.json", "{\"model_type\": \"mpt\", \"logit_scale\": \"x\"}",
                    LP_ERR_FORMAT, "logit_scale", NULL);
    expect_hf_error("mpt_none.json", "{\"model_type\": \"mpt\", \"learned_pos_emb\": false,"
                    " \"attn_config\": {\"alibi\": false}}", LP_ERR_UNSUPPORTED,
                    "learned_pos_emb", NULL);
}

static void test_gemma2_alternating_windows(void **state)
{
    (void)state;
    lp_arch *a = parse_hf_text("gemma2.json",
        "{\"model_type\": \"gemma2\", \"vocab_size\": 256000, \"hidden_size\": 2304,"
        " \"num_hidden_layers\": 26, \"num_attention_heads\": 8, \"num_key_value_heads\": 4,"
        " \"head_dim\": 256, \"intermediate_size\": 9216, \"query_pre_attn_scalar\": 256,"
        " \"attn_logit_softcapping\": 50.0, \"final_logit_softcapping\": 30.0,"
        " \"sliding_window\": 4096, \"max_position_embeddings\": 8192, \"rms_norm_eps\": 1e-06}");
    assert_int_equal(a->head_dim, 256);
    assert_true(a->head_dim_explicit);
    /* layer 0 slides, layer 1 is global, and so on */
    for (int l = 0; l < 26; l++)
        assert_int_equal(a->layer_window[l], l % 2 == 0 ? 4096 : 0);
    assert_int_equal(a->layer_window[26], 0);
    assert_true(a->attn_logit_softcap == 50.0);
    assert_true(a->final_logit_softcap == 30.0);
    assert_true(a->query_scale == 1.0 / 16.0);
    assert_true(a->post_attn_norm && a->post_ffn_norm && a->norm_weight_plus_one);
    assert_true(fabs(a->embed_scale - sqrt(2304.0)) < 1e-12);
    assert_true(a->tied_embeddings); /* gemma2's default */
    assert_int_equal(a->ffn_kind, LP_FFN_GEGLU);
    assert_int_equal(a->act, LP_ACT_GELU_TANH);
    check_round_trip(a, "gemma2");
}

static void test_gemma3_pattern_and_text_config(void **state)
{
    (void)state;
    /* The multimodal wrapper keeps the language model in text_config. */
    lp_arch *a = parse_hf_text("gemma3.json",
        "{\"model_type\": \"gemma3\", \"torch_dtype\": \"bfloat16\", \"text_config\": {"
        " \"model_type\": \"gemma3_text\", \"vocab_size\": 262208, \"hidden_size\": 2560,"
        " \"num_hidden_layers\": 34, \"num_attention_heads\": 8, \"num_key_value_heads\": 4,"
        " \"head_dim\": 256, \"intermediate_size\": 10240, \"sliding_window\": 1024,"
        " \"rope_theta\": 1000000.0, \"rope_local_base_freq\": 10000.0,"
        " \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0},"
        " \"query_pre_attn_scalar\": 256, \"max_position_embeddings\": 131072}}");
    assert_string_equal(a->family, "gemma3_text");
    assert_int_equal(a->storage_dtype, LP_DTYPE_BF16);
    for (int l = 0; l < 34; l++) /* default pattern 6: every sixth layer is global */
        assert_int_equal(a->layer_window[l], (l + 1) % 6 == 0 ? 0 : 1024);
    assert_true(a->rope_local_theta == 10000.0);
    assert_true(a->rope_theta == 1e6);
    assert_int_equal(a->rope_scaling.kind, LP_ROPE_SCALING_LINEAR);
    assert_true(a->rope_scaling.factor == 8.0);
    assert_true(a->qk_norm);
    check_round_trip(a, "gemma3");
}

static void test_layer_types_and_qwen_windows(void **state)
{
    (void)state;
    lp_arch *a = parse_hf_text("layer_types.json",
        "{\"model_type\": \"qwen3\", \"vocab_size\": 1000, \"hidden_size\": 64,"
        " \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
        " \"intermediate_size\": 128, \"sliding_window\": 256, \"use_sliding_window\": true,"
        " \"layer_types\": [\"full_attention\", \"sliding_attention\", \"sliding_attention\","
        " \"full_attention\"]}");
    assert_int_equal(a->layer_window[0], 0);
    assert_int_equal(a->layer_window[1], 256);
    assert_int_equal(a->layer_window[2], 256);
    assert_int_equal(a->layer_window[3], 0);
    check_round_trip(a, "layer_types");

    /* Qwen2: layers from max_window_layers on slide, only when use_sliding_window */
    a = parse_hf_text("qwen2_sw.json",
        "{\"model_type\": \"qwen2\", \"vocab_size\": 1000, \"hidden_size\": 64,"
        " \"num_hidden_layers\": 6, \"num_attention_heads\": 4, \"intermediate_size\": 128,"
        " \"sliding_window\": 512, \"use_sliding_window\": true, \"max_window_layers\": 4}");
    for (int l = 0; l < 6; l++)
        assert_int_equal(a->layer_window[l], l >= 4 ? 512 : 0);
    assert_true(a->bias_qkv && !a->bias_o); /* qwen2's implicit q/k/v biases */
    a = parse_hf_text("qwen2_nosw.json",
        "{\"model_type\": \"qwen2\", \"vocab_size\": 1000, \"hidden_size\": 64,"
        " \"num_hidden_layers\": 6, \"num_attention_heads\": 4, \"intermediate_size\": 128,"
        " \"sliding_window\": 512, \"use_sliding_window\": false, \"max_window_layers\": 4}");
    for (int l = 0; l < 6; l++)
        assert_int_equal(a->layer_window[l], 0);
    assert_int_equal(a->sliding_window, 0);
    /* bad layer_types length */
    expect_hf_error("layer_types_len.json",
        "{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 8,"
        " \"num_hidden_layers\": 3, \"num_attention_heads\": 2, \"intermediate_size\": 8,"
        " \"layer_types\": [\"full_attention\"]}", LP_ERR_FORMAT, "layer_types", "3");
}

static void test_moe_layer_selection(void **state)
{
    (void)state;
    /* qwen2_moe: every second layer is MoE, except the ones listed in mlp_only_layers */
    lp_arch *a = parse_hf_text("qwen2_moe.json",
        "{\"model_type\": \"qwen2_moe\", \"vocab_size\": 1000, \"hidden_size\": 64,"
        " \"num_hidden_layers\": 6, \"num_attention_heads\": 4, \"intermediate_size\": 256,"
        " \"num_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32,"
        " \"shared_expert_intermediate_size\": 96, \"decoder_sparse_step\": 2,"
        " \"mlp_only_layers\": [3]}");
    bool want_moe[6] = {false, true, false, false, false, true};
    for (int l = 0; l < 6; l++) {
        assert_int_equal(a->layer_moe[l], want_moe[l]);
        assert_int_equal(a->layer_ffn_hidden[l], want_moe[l] ? 0 : 256);
    }
    assert_int_equal(a->expert_ffn_hidden, 32);
    assert_int_equal(a->shared_expert_ffn_hidden, 96);
    assert_true(a->shared_expert_gate);
    assert_int_equal(a->n_shared_experts, 0);
    check_round_trip(a, "qwen2_moe");

    /* keys left out take Qwen2MoeConfig's and Qwen3MoeConfig's defaults */
    a = parse_hf_text("qwen2_moe_defaults.json",
        "{\"model_type\": \"qwen2_moe\", \"vocab_size\": 1000, \"hidden_size\": 64,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 256}");
    assert_int_equal(a->n_experts, 60);
    assert_int_equal(a->n_experts_per_tok, 4);
    assert_int_equal(a->expert_ffn_hidden, 1408);
    assert_int_equal(a->shared_expert_ffn_hidden, 5632);
    assert_true(a->layer_moe[0] && a->layer_moe[1] && !a->norm_topk_prob);
    a = parse_hf_text("qwen3_moe_defaults.json",
        "{\"model_type\": \"qwen3_moe\", \"vocab_size\": 1000, \"hidden_size\": 64,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 256}");
    assert_int_equal(a->n_experts, 128);
    assert_int_equal(a->n_experts_per_tok, 8);
    assert_int_equal(a->expert_ffn_hidden, 768);
    assert_int_equal(a->shared_expert_ffn_hidden, 0);
    assert_false(a->shared_expert_gate);

    /* deepseek_v3: first_k_dense_replace dense layers, then MoE every moe_layer_freq */
    a = parse_hf_text("deepseek.json",
        "{\"model_type\": \"deepseek_v3\", \"vocab_size\": 1000, \"hidden_size\": 64,"
        " \"num_hidden_layers\": 7, \"num_attention_heads\": 4, \"num_key_value_heads\": 4,"
        " \"intermediate_size\": 256, \"n_routed_experts\": 16, \"num_experts_per_tok\": 4,"
        " \"n_shared_experts\": 1, \"moe_intermediate_size\": 32, \"first_k_dense_replace\": 2,"
        " \"moe_layer_freq\": 2, \"topk_method\": \"noaux_tc\", \"q_lora_rank\": 24,"
        " \"kv_lora_rank\": 16, \"qk_rope_head_dim\": 8, \"qk_nope_head_dim\": 16,"
        " \"v_head_dim\": 16, \"num_nextn_predict_layers\": 1,"
        " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40, \"mscale\": 1.0,"
        " \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096}}");
    bool want_ds[7] = {false, false, true, false, true, false, true};
    for (int l = 0; l < 7; l++)
        assert_int_equal(a->layer_moe[l], want_ds[l]);
    assert_true(a->router_score_bias);
    assert_true(a->mla);
    assert_int_equal(a->head_dim, 24);
    assert_int_equal(a->rope_dim, 8);
    assert_int_equal(a->n_mtp_layers, 1);
    assert_int_equal(a->n_shared_experts, 1);
    double m = 0.1 * log(40.0) + 1.0;
    assert_true(fabs(a->query_scale - m * m / sqrt(24.0)) < 1e-15);
    assert_true(a->rope_scaling.attention_factor == 1.0);
    check_round_trip(a, "deepseek_v3");

    expect_hf_error("moe_topk.json",
        "{\"model_type\": \"mixtral\", \"vocab_size\": 10, \"hidden_size\": 8,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"intermediate_size\": 8,"
        " \"num_local_experts\": 4, \"num_experts_per_tok\": 5}",
        LP_ERR_FORMAT, "num_experts_per_tok", "5");
}

/* Families and their quirks, one config each: {file name, config.json, what the description
 * must say (arch_expect.h), whether its card must round-trip}. */
static const struct {
    const char *name, *json, *expected;
    bool round_trip;
} FAMILY_CASES[] = {
    /* MPT: a key the file omits takes MptConfig's default (d_model 2048, 16 heads, 24 layers,
     * vocab 50368, max_seq_len 2048, expansion_ratio 4, no_bias, ALiBi with alibi_bias_max 8) */
    {"mpt_bare.json", "{\"model_type\": \"mpt\"}",
     "hidden_size=2048 n_heads=16 n_kv_heads=16 n_layers=24 vocab_size=50368 n_ctx=2048"
     " ffn_hidden=8192 act=gelu pos_kind=alibi alibi_max_bias=8"
     " tied_embeddings=true bias_qkv=false bias_o=false bias_mlp=false bias_norm=false"
     " qk_norm_full=false",
     true},
    /* attn_config's switches, grouped kv heads, logit_scale inv_sqrt_d_model */
    {"mpt_all.json",
     "{\"model_type\": \"mpt\", \"d_model\": 64, \"n_heads\": 4, \"n_layers\": 2,"
     " \"vocab_size\": 100, \"expansion_ratio\": 2, \"no_bias\": false,"
     " \"logit_scale\": \"inv_sqrt_d_model\", \"attn_config\": {\"alibi_bias_max\": 16,"
     " \"clip_qkv\": 6, \"qk_ln\": true, \"softmax_scale\": 0.5,"
     " \"attn_type\": \"grouped_query_attention\", \"kv_n_heads\": 2}}",
     "ffn_hidden=128 n_kv_heads=2 alibi_max_bias=16 qkv_clip=6 query_scale=0.5"
     " logit_scale=0.125 qk_norm_full=true bias_qkv=true bias_o=true bias_mlp=true bias_norm=true",
     true},
    {"mpt_mqa.json",
     "{\"model_type\": \"mpt\", \"logit_scale\": 0.25,"
     " \"attn_config\": {\"attn_type\": \"multiquery_attention\"}}",
     "n_kv_heads=1 logit_scale=0.25", true},
    /* alibi false: learned positions (wpe, max_seq_len rows) */
    {"mpt_learned.json", "{\"model_type\": \"mpt\", \"attn_config\": {\"alibi\": false}}",
     "pos_kind=learned pos_table_rows=2048", true},
    {"falcon40.json",
     "{\"model_type\": \"falcon\", \"vocab_size\": 65024, \"hidden_size\": 8192,"
     " \"num_hidden_layers\": 60, \"num_attention_heads\": 128, \"num_kv_heads\": 8,"
     " \"new_decoder_architecture\": true, \"parallel_attn\": true, \"bias\": false}",
     "n_kv_heads=8 parallel_block=true parallel_two_norms=true ffn_hidden=32768 norm_kind=layer"
     " bias_norm=true bias_qkv=false bias_mlp=false tied_embeddings=true act=gelu",
     true},
    {"falcon_old.json",
     "{\"model_type\": \"RefinedWebModel\", \"vocab_size\": 65024, \"hidden_size\": 4544,"
     " \"n_layer\": 32, \"n_head\": 71, \"multi_query\": true, \"parallel_attn\": true}",
     "family=falcon n_kv_heads=1 n_layers=32 head_dim=64", false},
    {"gpt2_inner.json",
     "{\"model_type\": \"gpt2\", \"vocab_size\": 50257, \"n_embd\": 1024, \"n_layer\": 24,"
     " \"n_head\": 16, \"n_positions\": 1024, \"n_inner\": null,"
     " \"activation_function\": \"gelu_new\", \"eos_token_id\": [50256, 7]}",
     "ffn_hidden=4096 pos_kind=learned pos_table_rows=1024 eos_token_id=50256 bias_qkv=true"
     " bias_o=true bias_mlp=true bias_norm=true act=gelu_tanh",
     true},
    /* StableLM 2 12B: a separate norm for every query and kv head, parallel residual */
    {"stablelm2.json",
     "{\"model_type\": \"stablelm\", \"vocab_size\": 100352, \"hidden_size\": 5120,"
     " \"num_hidden_layers\": 2, \"num_attention_heads\": 32, \"num_key_value_heads\": 8,"
     " \"intermediate_size\": 13824, \"qk_layernorm\": true, \"use_parallel_residual\": true,"
     " \"partial_rotary_factor\": 0.25, \"use_qkv_bias\": false}",
     "qk_norm=true qk_norm_per_head=true qk_norm_full=false parallel_block=true"
     " parallel_two_norms=false",
     true},
    /* GPT-NeoX (Pythia): parallel residual with a LayerNorm per branch, a quarter of each head
     * rotated, biases everywhere */
    {"neox.json",
     "{\"model_type\": \"gpt_neox\", \"vocab_size\": 50304, \"hidden_size\": 512,"
     " \"num_hidden_layers\": 6, \"num_attention_heads\": 8, \"intermediate_size\": 2048,"
     " \"rotary_pct\": 0.25, \"rotary_emb_base\": 10000, \"use_parallel_residual\": true,"
     " \"hidden_act\": \"gelu\", \"max_position_embeddings\": 2048}",
     "parallel_block=true parallel_two_norms=true rope_dim=16 bias_qkv=true bias_o=true"
     " bias_mlp=true tied_embeddings=false",
     true},
    /* gpt-oss: alternating windows from layer_types, biased experts and router, sinks */
    {"gpt_oss.json",
     "{\"model_type\": \"gpt_oss\", \"vocab_size\": 1000, \"hidden_size\": 64,"
     " \"num_hidden_layers\": 4, \"num_attention_heads\": 8, \"num_key_value_heads\": 2,"
     " \"head_dim\": 16, \"intermediate_size\": 64, \"num_local_experts\": 8,"
     " \"num_experts_per_tok\": 2, \"attention_bias\": true, \"sliding_window\": 128,"
     " \"layer_types\": [\"sliding_attention\", \"full_attention\", \"sliding_attention\","
     " \"full_attention\"]}",
     "router_bias=true attn_sinks=true bias_mlp=true norm_topk_prob=true expert_ffn_hidden=64"
     " layer_window[0]=128 layer_window[1]=0 layer_moe[3]=true swiglu_limit=7",
     true},
    /* gpt-oss with its own clamp */
    {"gpt_oss_limit.json",
     "{\"model_type\": \"gpt_oss\", \"vocab_size\": 1000, \"hidden_size\": 64,"
     " \"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"num_key_value_heads\": 2,"
     " \"head_dim\": 16, \"intermediate_size\": 64, \"num_local_experts\": 8,"
     " \"num_experts_per_tok\": 2, \"swiglu_limit\": 5.5}",
     "swiglu_limit=5.5 attn_sinks=true",
     true},
    /* OPT-350m: post-norm blocks, no final norm, 512-wide embeddings projected to hidden */
    {"opt350m.json",
     "{\"model_type\": \"opt\", \"vocab_size\": 50272, \"hidden_size\": 1024,"
     " \"num_hidden_layers\": 24, \"num_attention_heads\": 16, \"ffn_dim\": 4096,"
     " \"max_position_embeddings\": 2048, \"do_layer_norm_before\": false,"
     " \"word_embed_proj_dim\": 512}",
     "post_norm=true final_norm=false embed_proj_dim=512 pos_offset=2 pos_table_rows=2050", true},
    /* pre-norm OPT with equal widths: no projection; _remove_final_layer_norm drops the norm */
    {"opt_pre.json",
     "{\"model_type\": \"opt\", \"vocab_size\": 50272, \"hidden_size\": 768,"
     " \"num_hidden_layers\": 2, \"num_attention_heads\": 12, \"ffn_dim\": 3072,"
     " \"max_position_embeddings\": 2048, \"word_embed_proj_dim\": 768,"
     " \"_remove_final_layer_norm\": true}",
     "post_norm=false final_norm=false embed_proj_dim=0", false},
    /* Phi-3 long context: "su"/longrope with the original context at the top level; the
     * factor is derived from the two contexts when not given */
    {"phi3_long.json",
     "{\"model_type\": \"phi3\", \"vocab_size\": 32064, \"hidden_size\": 3072,"
     " \"num_hidden_layers\": 2, \"num_attention_heads\": 32, \"intermediate_size\": 8192,"
     " \"max_position_embeddings\": 131072, \"original_max_position_embeddings\": 4096,"
     " \"rope_scaling\": {\"type\": \"su\", \"short_factor\": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, "
     "1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.1],"
     " \"long_factor\": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, "
     "1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0]}, \"sliding_window\": 262144}",
     "rope_scaling.kind=longrope rope_scaling.original_ctx=4096 rope_scaling.factor=32", true},
    /* a DeepSeek-style MoE under another name (GLM-4.5 keeps first_k_dense_replace) */
    {"glm_moe.json",
     "{\"model_type\": \"glm4_moe\", \"vocab_size\": 1000, \"hidden_size\": 64,"
     " \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"intermediate_size\": 256,"
     " \"n_routed_experts\": 8, \"num_experts_per_tok\": 2, \"n_shared_experts\": 1,"
     " \"moe_intermediate_size\": 32, \"first_k_dense_replace\": 1}",
     "layer_moe[0]=false layer_moe[1]=true layer_moe[3]=true n_shared_experts=1", false},
    /* found by fuzzing: a dense gpt_oss (no experts) must not keep the router bias flag */
    {"gpt_oss_dense.json",
     "{\"model_type\": \"gpt_oss\", \"vocab_size\": 10, \"hidden_size\": 8,"
     " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"intermediate_size\": 8}",
     "router_bias=false", true},
    /* transformers v5 keeps theta and scaling in rope_parameters */
    {"rope_params.json",
     "{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 8,"
     " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"intermediate_size\": 8,"
     " \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0,"
     " \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
     " \"original_max_position_embeddings\": 8192}}",
     "rope_theta=500000 rope_scaling.kind=llama3 rope_scaling.original_ctx=8192", false},
    /* what each family's modeling file hard-codes, on one minimal config */
    {"gemma_min.json",
     "{\"model_type\": \"gemma\", \"vocab_size\": 10, \"hidden_size\": 16,"
     " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"intermediate_size\": 32}",
     "ffn_kind=geglu act=gelu_tanh norm_kind=rms norm_weight_plus_one=true embed_scale=4"
     " tied_embeddings=true post_attn_norm=false qk_norm=false",
     true},
    {"qwen2_min.json",
     "{\"model_type\": \"qwen2\", \"vocab_size\": 10, \"hidden_size\": 16,"
     " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"intermediate_size\": 32,"
     " \"attention_bias\": false}",
     "ffn_kind=swiglu act=silu bias_qkv=true bias_o=false tied_embeddings=false"
     " rope_layout=halves",
     true},
    {"olmo2_min.json",
     "{\"model_type\": \"olmo2\", \"vocab_size\": 10, \"hidden_size\": 16,"
     " \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"intermediate_size\": 32}",
     "qk_norm_full=true no_input_norm=true post_attn_norm=true post_ffn_norm=true", true},
    {"bloom_min.json",
     "{\"model_type\": \"bloom\", \"vocab_size\": 10, \"hidden_size\": 16, \"n_layer\": 2,"
     " \"n_head\": 2}",
     "pos_kind=alibi embed_norm=true ffn_hidden=64 act=gelu_tanh bias_qkv=true"
     " tied_embeddings=true",
     true},
    {"gptj_min.json",
     "{\"model_type\": \"gptj\", \"vocab_size\": 10, \"n_embd\": 16, \"n_layer\": 2,"
     " \"n_head\": 2, \"rotary_dim\": 4}",
     "rope_layout=adjacent rope_dim=4 bias_qkv=false bias_o=false bias_mlp=true"
     " bias_lm_head=true parallel_block=true",
     true},
};

static void test_family_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof FAMILY_CASES / sizeof FAMILY_CASES[0]; i++) {
        const lp_arch *a = parse_hf_text(FAMILY_CASES[i].name, FAMILY_CASES[i].json);
        char why[256];
        if (!arch_expect(a, FAMILY_CASES[i].expected, why, sizeof why))
            fail_msg("%s: %s", FAMILY_CASES[i].name, why);
        if (FAMILY_CASES[i].round_trip)
            check_round_trip(a, FAMILY_CASES[i].name);
    }
}

static void test_bad_configs(void **state)
{
    (void)state;
    expect_hf_error("no_layers.json",
        "{\"model_type\": \"llama\", \"vocab_size\": 32000, \"hidden_size\": 4096,"
        " \"num_attention_heads\": 32, \"intermediate_size\": 11008}",
        LP_ERR_FORMAT, "num_hidden_layers", "missing");
    expect_hf_error("zero_layers.json",
        "{\"model_type\": \"llama\", \"vocab_size\": 32000, \"hidden_size\": 4096,"
        " \"num_hidden_layers\": 0, \"num_attention_heads\": 32, \"intermediate_size\": 11008}",
        LP_ERR_FORMAT, "num_hidden_layers", "0");
    expect_hf_error("heads_hidden.json",
        "{\"model_type\": \"llama\", \"vocab_size\": 32000, \"hidden_size\": 4096,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 30, \"intermediate_size\": 11008}",
        LP_ERR_FORMAT, "num_attention_heads", "head_dim");
    expect_hf_error("kv_heads.json",
        "{\"model_type\": \"llama\", \"vocab_size\": 32000, \"hidden_size\": 4096,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 32, \"num_key_value_heads\": 5,"
        " \"intermediate_size\": 11008}",
        LP_ERR_FORMAT, "num_key_value_heads", "5");
    expect_hf_error("wrong_type.json",
        "{\"model_type\": \"llama\", \"vocab_size\": 32000, \"hidden_size\": 4096,"
        " \"num_hidden_layers\": \"32\", \"num_attention_heads\": 32,"
        " \"intermediate_size\": 11008}",
        LP_ERR_FORMAT, "num_hidden_layers", "integer");
    expect_hf_error("wrong_bool.json",
        "{\"model_type\": \"llama\", \"vocab_size\": 32000, \"hidden_size\": 4096,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 32, \"intermediate_size\": 11008,"
        " \"tie_word_embeddings\": 1}",
        LP_ERR_FORMAT, "tie_word_embeddings", "true or false");
    /* a missing comma on line 3: jansson's line and column come through as file:3:col */
    expect_hf_error("syntax.json",
        "{\n  \"model_type\": \"llama\",\n  \"vocab_size\": 32000\n  \"hidden_size\": 4096\n}\n",
        LP_ERR_FORMAT, "syntax.json:4:", NULL);
    expect_hf_error("no_model_type.json", "{\"vocab_size\": 10}", LP_ERR_FORMAT, "model_type",
                    NULL);
    /* without model_type, the class name in architectures decides the family */
    lp_arch *a = parse_hf_text("archs.json",
        "{\"architectures\": [\"Qwen2MoeForCausalLM\"], \"vocab_size\": 10, \"hidden_size\": 8,"
        " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"intermediate_size\": 8}");
    assert_string_equal(a->family, "qwen2_moe");
    assert_true(a->bias_qkv);
    expect_hf_error("too_many_layers.json",
        "{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 8,"
        " \"num_hidden_layers\": 100000, \"num_attention_heads\": 2, \"intermediate_size\": 8}",
        LP_ERR_FORMAT, "100000", "512");
    expect_hf_error("huge.json",
        "{\"model_type\": \"gpt2\", \"vocab_size\": 10, \"n_embd\": 4611686018427387904,"
        " \"n_layer\": 1, \"n_head\": 1, \"n_positions\": 8}",
        LP_ERR_FORMAT, "n_embd", "1099511627776");
    expect_hf_error("bad_act.json",
        "{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 8,"
        " \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"intermediate_size\": 8,"
        " \"hidden_act\": \"mish\"}",
        LP_ERR_UNSUPPORTED, "hidden_act", "mish");
    expect_hf_error("array_top.json", "[1, 2]", LP_ERR_FORMAT, "object", NULL);
    /* found by fuzz_arch_libfuzzer: a family name with a control byte could not be written back */
    expect_hf_error("del_type.json", "{\"model_type\": \"qwen2\x7fmoe\"}", LP_ERR_FORMAT,
                    "model_type", "0x7f");
    /* RoPE settings of a model without RoPE are normalized away (BLOOM with a stray theta) */
    lp_arch *alibi = parse_hf_text("alibi_theta.json",
        "{\"model_type\": \"bloom\", \"vocab_size\": 10, \"n_embed\": 8, \"n_layer\": 1,"
        " \"num_attention_heads\": 2, \"rope_theta\": -0.0,"
        " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4}}");
    assert_int_equal(alibi->pos_kind, LP_POS_ALIBI);
    assert_true(alibi->rope_theta == 10000.0);
    assert_int_equal(alibi->rope_scaling.kind, LP_ROPE_SCALING_NONE);
    check_round_trip(alibi, "alibi_theta");
    /* a missing file is not a format error */
    lp_arch arch;
    lp_error err = {0};
    assert_int_equal(lp_arch_from_hf_config("/nonexistent/config.json", &arch, &err),
                     LP_ERR_NOT_FOUND);
}

#define CARD_HEAD                                                                         \
    "model:\n  name: tiny\n  family: llama\n"                                             \
    "dims:\n  vocab_size: 100\n  hidden_size: 16\n  n_layers: 4\n  n_ctx: 64\n"
#define CARD_ATTN "attention:\n  n_heads: 4\n  n_kv_heads: 2\n"
#define CARD_FFN "ffn:\n  kind: swiglu\n  activation: silu\n  hidden: 32\n"

static void test_card_reader(void **state)
{
    (void)state;
    lp_arch a;
    lp_error err = {0};
    const char *path = write_tmp("minimal.yaml", CARD_HEAD CARD_ATTN CARD_FFN);
    if (lp_arch_from_yaml(path, &a, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(a.name, "tiny");
    assert_int_equal(a.head_dim, 4);
    assert_false(a.head_dim_explicit);
    assert_int_equal(a.rope_dim, 4);
    assert_int_equal(a.layer_kv_heads[3], 2);
    assert_int_equal(a.layer_ffn_hidden[3], 32);
    assert_int_equal(a.rope_layout, LP_ROPE_HALVES);
    assert_int_equal(a.storage_dtype, LP_DTYPE_INVALID);

    path = write_tmp("windows.yaml",
                     CARD_HEAD CARD_ATTN "  sliding_window: 8\n  window_pattern: [full, sliding]\n"
                     CARD_FFN "moe:\n  n_experts: 4\n  experts_per_token: 2\n  expert_hidden: 8\n"
                     "  dense_layers: [0]\n");
    if (lp_arch_from_yaml(path, &a, &err) != LP_OK)
        fail_msg("%s", err.msg);
    for (int l = 0; l < 4; l++) {
        assert_int_equal(a.layer_window[l], l % 2 ? 8 : 0);
        assert_int_equal(a.layer_moe[l], l != 0);
        assert_int_equal(a.layer_ffn_hidden[l], l == 0 ? 32 : 0);
    }
    check_round_trip(&a, "windows.yaml");

    path = write_tmp("gemma_like.yaml",
                     CARD_HEAD "attention:\n  n_heads: 2\n  head_dim: 16\n"
                     "  query_pre_attn_scalar: 144\n  window_layers: [1, 2]\n"
                     "  sliding_window: 32\n" CARD_FFN
                     "positions:\n  kind: rope\n  rope_theta: 5e5\n  partial_rotary: 0.5\n"
                     "  rope_scaling:\n    kind: yarn\n    factor: 4\n    mscale_all_dim: 1\n"
                     "norm:\n  kind: layer\n  eps: 1e-6\n  bias: false\n"
                     "model_notes:\n  anything: goes\n");
    if (lp_arch_from_yaml(path, &a, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_true(a.head_dim_explicit);
    assert_int_equal(a.rope_dim, 8);
    assert_true(a.rope_theta == 5e5);
    assert_false(a.bias_norm);
    /* without MLA, mscale_all_dim leaves the softmax scale alone (as in HF) */
    assert_true(a.query_scale == 1.0 / 12.0);
    assert_int_equal(a.layer_window[0], 0);
    assert_int_equal(a.layer_window[1], 32);
    assert_int_equal(a.layer_window[2], 32);
    assert_int_equal(a.layer_window[3], 0);
    check_round_trip(&a, "gemma_like.yaml");

    /* errors name file:line:col and the key */
    expect_card_error("kv3.yaml", CARD_HEAD "attention:\n  n_heads: 4\n  n_kv_heads: 3\n" CARD_FFN,
                      "n_kv_heads", "3");
    expect_card_error("kind.yaml", CARD_HEAD CARD_ATTN "ffn:\n  kind: swigl0\n  hidden: 32\n",
                      "swigl0", "swiglu");
    expect_card_error("type.yaml",
                      "model:\n  family: llama\ndims:\n  vocab_size: 100\n  hidden_size: 16\n"
                      "  n_layers: x\n" CARD_ATTN CARD_FFN,
                      ":6:", "n_layers");
    {
        /* unknown keys and sections are ignored: the card equals the one without them */
        lp_arch plain, noted;
        lp_error e1 = {0}, e2 = {0};
        assert_int_equal(lp_arch_from_yaml(write_tmp("plain.yaml", CARD_HEAD CARD_ATTN CARD_FFN),
                                           &plain, &e1),
                         LP_OK);
        assert_int_equal(
            lp_arch_from_yaml(write_tmp("unknown.yaml", CARD_HEAD CARD_ATTN
                                        "  flash_variant: 3\n" CARD_FFN
                                        "ffn_extra:\n  note: x\nffn2:\n  sub:\n    k: 1\n"),
                              &noted, &e2),
            LP_OK);
        char why[128];
        const char *diff = arch_diff(&plain, &noted, why, sizeof why);
        if (diff)
            fail_msg("unknown keys changed the description: %s", diff);
    }
    expect_card_error("twice.yaml", CARD_HEAD CARD_ATTN "  n_heads: 4\n" CARD_FFN, "twice", NULL);
    expect_card_error("nolayers.yaml",
                      "model:\n  family: llama\ndims:\n  vocab_size: 10\n  hidden_size: 8\n"
                      "attention:\n  n_heads: 2\nffn:\n  hidden: 8\n",
                      "n_layers", NULL);
    expect_card_error("heads.yaml", CARD_HEAD "attention:\n  n_heads: 3\n" CARD_FFN, "n_heads",
                      "head_dim");
    expect_card_error("mla_alone.yaml",
                      CARD_HEAD CARD_ATTN CARD_FFN "mla:\n  kv_lora_rank: ~\n  v_head_dim: 8\n",
                      "mla.v_head_dim", "kv_lora_rank");
    expect_card_error("moe_alone.yaml", CARD_HEAD CARD_ATTN CARD_FFN "moe:\n  expert_hidden: 8\n",
                      "moe.expert_hidden", "n_experts");
    expect_card_error("theta_learned.yaml",
                      CARD_HEAD CARD_ATTN CARD_FFN
                      "positions:\n  kind: learned\n  rope_theta: 500000\n",
                      "positions.rope_theta", "rope");
    expect_card_error("huge.yaml",
                      "model:\n  family: llama\ndims:\n  vocab_size: 9223372036854775807\n",
                      "vocab_size", "limit");
    expect_card_error("zero_heads.yaml", CARD_HEAD "attention:\n  n_heads: 0\n" CARD_FFN,
                      "n_heads", "at least 1");
    expect_card_error("syntax.yaml", "model:\n  name: [unclosed\ndims:\n", "syntax.yaml:", NULL);
    expect_card_error("wpl.yaml", CARD_HEAD CARD_ATTN "  window_per_layer: [1, 2]\n" CARD_FFN,
                      "window_per_layer", "one per layer");
    expect_card_error("dense.yaml",
                      CARD_HEAD CARD_ATTN CARD_FFN "moe:\n  n_experts: 4\n  experts_per_token: 2\n"
                      "  expert_hidden: 8\n  dense_layers: [9]\n",
                      "dense_layers", "9");
}

/* A llama2.c legacy checkpoint of the given header, with zeroed weights of the right size. */
static const char *write_llama2c(const char *name, const int32_t h[7], long extra_bytes)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/arch_%s", lp_test_tmp_dir(), name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(h, 4, 7, f);
    int64_t dim = h[0], hidden = h[1], layers = h[2], heads = h[3], kv = h[4];
    int64_t vocab = h[5] < 0 ? -h[5] : h[5], seq = h[6];
    int64_t head_dim = heads > 0 ? dim / heads : 0;
    int64_t floats = vocab * dim + layers * (2 * dim + 2 * dim * dim + 2 * head_dim * kv * dim +
                                             3 * hidden * dim) +
                     dim + seq * head_dim + (h[5] < 0 ? vocab * dim : 0);
    long bytes = (long)floats * 4 + extra_bytes;
    for (long i = 0; i < bytes; i++)
        fputc(0, f);
    fclose(f);
    return path;
}

static void test_llama2c_header(void **state)
{
    (void)state;
    lp_arch a;
    lp_error err = {0};
    int32_t untied[7] = {32, 48, 2, 4, 2, -100, 16};
    const char *path = write_llama2c("untied.bin", untied, 0);
    if (lp_arch_from_llama2c(path, &a, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(a.vocab_size, 100);
    assert_false(a.tied_embeddings);
    assert_int_equal(a.rope_layout, LP_ROPE_ADJACENT);
    assert_int_equal(a.head_dim, 8);
    assert_int_equal(a.n_kv_heads, 2);
    /* lp_arch_load picks the reader from the content of a .bin */
    assert_int_equal(lp_arch_load(path, &a, &err), LP_OK);
    assert_int_equal(a.ffn_hidden, 48);

    /* one float short of what the header promises */
    path = write_llama2c("short.bin", untied, -4);
    assert_int_equal(lp_arch_from_llama2c(path, &a, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "short.bin"));
    int32_t zero_layers[7] = {32, 48, 0, 4, 2, 100, 16};
    path = write_llama2c("zero.bin", zero_layers, 0);
    assert_int_equal(lp_arch_from_llama2c(path, &a, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "n_layers"));
    int32_t bad_kv[7] = {32, 48, 2, 4, 3, 100, 16};
    path = write_llama2c("badkv.bin", bad_kv, 0);
    assert_int_equal(lp_arch_from_llama2c(path, &a, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "n_kv_heads"));
    /* version 1: "ak42", version, the seven fields, shared flag, padding to 256 bytes */
    char v1_path[512];
    snprintf(v1_path, sizeof v1_path, "%s/arch_v1.bin", lp_test_tmp_dir());
    FILE *f = fopen(v1_path, "wb");
    assert_non_null(f);
    uint8_t header[256] = {0};
    uint32_t magic = 0x616b3432u;
    int32_t version = 1, fields[7] = {32, 48, 2, 4, 2, 100, 16};
    memcpy(header, &magic, 4);
    memcpy(header + 4, &version, 4);
    memcpy(header + 8, fields, sizeof fields);
    header[36] = 0; /* unshared classifier */
    fwrite(header, 1, sizeof header, f);
    /* weights without freq_cis, plus wcls: 100*32 + 2*(64 + 2*1024 + 2*512 + 3*1536) + 32 + 3200 */
    long floats = 100 * 32 + 2 * (64 + 2 * 1024 + 2 * 512 + 3 * 1536) + 32 + 100 * 32;
    for (long i = 0; i < floats * 4; i++)
        fputc(0, f);
    fclose(f);
    if (lp_arch_from_llama2c(v1_path, &a, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(a.vocab_size, 100);
    assert_false(a.tied_embeddings);
    assert_int_equal(a.n_layers, 2);
    /* version 2 (int8 codes + group scales of 16) is read; its storage is int8. The norms stay
     * float32 (2 layers x 2 x 32 + 32); the matrices (100*32 + 2*7680 + wcls 100*32 = 21760
     * values) are one byte a value plus a float32 scale per 16. */
    f = fopen(v1_path, "wb");
    assert_non_null(f);
    version = 2;
    int32_t group_size = 16;
    memcpy(header + 4, &version, 4);
    memcpy(header + 37, &group_size, 4);
    fwrite(header, 1, sizeof header, f);
    for (long i = 0; i < 160 * 4 + 21760 + 21760 / 16 * 4; i++)
        fputc(0, f);
    fclose(f);
    if (lp_arch_from_llama2c(v1_path, &a, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(a.storage_dtype, LP_DTYPE_I8);
    assert_int_equal(a.n_layers, 2);
    /* version 3 does not exist */
    f = fopen(v1_path, "r+b");
    assert_non_null(f);
    version = 3;
    fseek(f, 4, SEEK_SET);
    fwrite(&version, 4, 1, f);
    fclose(f);
    assert_int_equal(lp_arch_from_llama2c(v1_path, &a, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "version at byte 4 is 3"));

    path = write_tmp("pickle.bin", "\x80\x02}q\x00(X\x05\x00\x00\x00model_stateq\x01");
    assert_int_equal(lp_arch_from_llama2c(path, &a, &err), LP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "pickle"));
    path = write_tmp("text.bin", "# notes, not weights\n");
    assert_int_equal(lp_arch_from_llama2c(path, &a, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "text"));
    path = write_tmp("tiny.bin", "\x01\x02\x03");
    assert_int_equal(lp_arch_from_llama2c(path, &a, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "28-byte"));
}

/* Every prefix of a valid config or card is either valid or a clean error: never a crash. */
static void test_truncated_inputs(void **state)
{
    (void)state;
    static const char *const json =
        "{\"model_type\": \"deepseek_v3\", \"vocab_size\": 1000, \"hidden_size\": 64,"
        " \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"intermediate_size\": 256,"
        " \"n_routed_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32,"
        " \"kv_lora_rank\": 16, \"qk_rope_head_dim\": 8, \"qk_nope_head_dim\": 16,"
        " \"v_head_dim\": 16, \"layer_types\": [\"full_attention\", \"full_attention\","
        " \"full_attention\", \"full_attention\"], \"rope_scaling\": {\"type\": \"yarn\","
        " \"factor\": 4}, \"eos_token_id\": [1, 2]}";
    char buf[2048];
    size_t n = strlen(json);
    int n_ok = 0;
    for (size_t len = 0; len <= n; len++) {
        snprintf(buf, sizeof buf, "%.*s", (int)len, json);
        lp_arch a;
        lp_error err = {0};
        lp_status st = lp_arch_from_hf_config(write_tmp("trunc.json", buf), &a, &err);
        if (st == LP_OK)
            n_ok++;
        else if (st != LP_ERR_FORMAT || !err.msg[0])
            fail_msg("prefix of %zu bytes: status %s: %s", len, lp_status_name(st), err.msg);
    }
    assert_int_equal(n_ok, 1); /* only the whole text is a complete config */

    char card[4096];
    char path[1024];
    snprintf(path, sizeof path, "%s/deepseek-v3.yaml", lp_configs_dir());
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t card_len = fread(card, 1, sizeof card - 1, f);
    fclose(f);
    for (size_t len = 0; len <= card_len; len += 3) {
        snprintf(buf, sizeof buf, "%.*s", (int)len, card);
        lp_arch a;
        lp_error err = {0};
        lp_status st = lp_arch_from_yaml(write_tmp("trunc.yaml", buf), &a, &err);
        if (st != LP_OK && (st != LP_ERR_FORMAT || !err.msg[0]))
            fail_msg("card prefix of %zu bytes: status %s: %s", len, lp_status_name(st), err.msg);
    }
}

static void test_json_output(void **state)
{
    (void)state;
    lp_arch a;
    lp_error err = {0};
    if (lp_arch_load("deepseek-v3", &a, &err) != LP_OK)
        fail_msg("%s", err.msg);
    json_t *j = lp_arch_to_json(&a);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "family")), "deepseek_v3");
    assert_string_equal(json_string_value(json_object_get(j, "ffn_kind")), "swiglu");
    assert_string_equal(json_string_value(json_object_get(j, "pos_kind")), "rope");
    assert_string_equal(json_string_value(json_object_get(j, "storage_dtype")), "bf16");
    json_t *rs = json_object_get(j, "rope_scaling");
    assert_string_equal(json_string_value(json_object_get(rs, "kind")), "yarn");
    assert_true(json_real_value(json_object_get(rs, "factor")) == 40.0);
    json_t *moe = json_object_get(j, "layer_moe");
    assert_int_equal(json_array_size(moe), 61);
    assert_true(json_is_false(json_array_get(moe, 2)));
    assert_true(json_is_true(json_array_get(moe, 3)));
    assert_int_equal(json_integer_value(json_object_get(j, "kv_lora_rank")), 512);
    json_decref(j);

    lp_arch_init(&a); /* unknown dtype is null, not "invalid" */
    a.storage_dtype = LP_DTYPE_INVALID;
    j = lp_arch_to_json(&a);
    assert_non_null(j);
    assert_true(json_is_null(json_object_get(j, "storage_dtype")));
    assert_int_equal(json_array_size(json_object_get(j, "layer_window")), 0);
    json_decref(j);
}

/* The config.json of every shipped card whose config is not in ../shared (compact JSON of the
 * published file, torch_dtype left out where it was not verified; the URL is in each card's
 * model.config_url), so that every card is checked against its source, not only the 17 below. */
static const char *const CARD_SOURCES[][2] = {
    {"deepseek-v3",
     "{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"attention_bias\":false,\"attention"
     "_dropout\":0.0,\"aux_loss_alpha\":0.001,\"bos_token_id\":0,\"eos_token_id\":1,\"ep_s"
     "ize\":1,\"first_k_dense_replace\":3,\"hidden_act\":\"silu\",\"hidden_size\":7168,\"ini"
     "tializer_range\":0.02,\"intermediate_size\":18432,\"kv_lora_rank\":512,\"max_posit"
     "ion_embeddings\":163840,\"model_type\":\"deepseek_v3\",\"moe_intermediate_size\":20"
     "48,\"moe_layer_freq\":1,\"n_group\":8,\"n_routed_experts\":256,\"n_shared_experts\":"
     "1,\"norm_topk_prob\":true,\"num_attention_heads\":128,\"num_experts_per_tok\":8,\"n"
     "um_hidden_layers\":61,\"num_key_value_heads\":128,\"num_nextn_predict_layers\":1,"
     "\"pretraining_tp\":1,\"q_lora_rank\":1536,\"qk_nope_head_dim\":128,\"qk_rope_head_d"
     "im\":64,\"quantization_config\":{\"activation_scheme\":\"dynamic\",\"fmt\":\"e4m3\",\"qu"
     "ant_method\":\"fp8\",\"weight_block_size\":[128,128]},\"rms_norm_eps\":1e-06,\"rope_"
     "scaling\":{\"beta_fast\":32,\"beta_slow\":1,\"factor\":40,\"mscale\":1.0,\"mscale_all_"
     "dim\":1.0,\"original_max_position_embeddings\":4096,\"type\":\"yarn\"},\"rope_theta\""
     ":10000,\"routed_scaling_factor\":2.5,\"scoring_func\":\"sigmoid\",\"seq_aux\":true,\""
     "tie_word_embeddings\":false,\"topk_group\":4,\"topk_method\":\"noaux_tc\",\"torch_dt"
     "ype\":\"bfloat16\",\"transformers_version\":\"4.33.1\",\"use_cache\":true,\"v_head_dim"
     "\":128,\"vocab_size\":129280}"},
    {"falcon-7b",
     "{\"alibi\":false,\"apply_residual_connection_post_layernorm\":false,\"architectur"
     "es\":[\"FalconForCausalLM\"],\"attention_dropout\":0.0,\"bias\":false,\"bos_token_id"
     "\":11,\"eos_token_id\":11,\"hidden_dropout\":0.0,\"hidden_size\":4544,\"initializer_"
     "range\":0.02,\"layer_norm_epsilon\":1e-05,\"model_type\":\"falcon\",\"multi_query\":t"
     "rue,\"new_decoder_architecture\":false,\"num_attention_heads\":71,\"num_hidden_la"
     "yers\":32,\"parallel_attn\":true,\"torch_dtype\":\"bfloat16\",\"transformers_version"
     "\":\"4.27.4\",\"use_cache\":true,\"vocab_size\":65024}"},
    {"gemma-2-27b",
     "{\"architectures\":[\"Gemma2ForCausalLM\"],\"attention_bias\":false,\"attention_dro"
     "pout\":0.0,\"attn_logit_softcapping\":50.0,\"bos_token_id\":2,\"cache_implementati"
     "on\":\"hybrid\",\"eos_token_id\":1,\"final_logit_softcapping\":30.0,\"head_dim\":128,"
     "\"hidden_act\":\"gelu_pytorch_tanh\",\"hidden_activation\":\"gelu_pytorch_tanh\",\"hi"
     "dden_size\":4608,\"initializer_range\":0.02,\"intermediate_size\":36864,\"max_posi"
     "tion_embeddings\":8192,\"model_type\":\"gemma2\",\"num_attention_heads\":32,\"num_hi"
     "dden_layers\":46,\"num_key_value_heads\":16,\"pad_token_id\":0,\"query_pre_attn_sc"
     "alar\":144,\"rms_norm_eps\":1e-06,\"rope_theta\":10000.0,\"sliding_window\":4096,\"s"
     "liding_window_size\":4096,\"torch_dtype\":\"float32\",\"use_cache\":true,\"vocab_siz"
     "e\":256000}"},
    {"gemma-2-2b",
     "{\"architectures\":[\"Gemma2ForCausalLM\"],\"attention_bias\":false,\"attention_dro"
     "pout\":0.0,\"attn_logit_softcapping\":50.0,\"bos_token_id\":2,\"cache_implementati"
     "on\":\"hybrid\",\"eos_token_id\":1,\"final_logit_softcapping\":30.0,\"head_dim\":256,"
     "\"hidden_act\":\"gelu_pytorch_tanh\",\"hidden_activation\":\"gelu_pytorch_tanh\",\"hi"
     "dden_size\":2304,\"initializer_range\":0.02,\"intermediate_size\":9216,\"max_posit"
     "ion_embeddings\":8192,\"model_type\":\"gemma2\",\"num_attention_heads\":8,\"num_hidd"
     "en_layers\":26,\"num_key_value_heads\":4,\"pad_token_id\":0,\"query_pre_attn_scala"
     "r\":256,\"rms_norm_eps\":1e-06,\"rope_theta\":10000.0,\"sliding_window\":4096,\"use_"
     "cache\":true,\"vocab_size\":256000}"},
    {"gemma-2-9b",
     "{\"architectures\":[\"Gemma2ForCausalLM\"],\"attention_bias\":false,\"attention_dro"
     "pout\":0.0,\"attn_logit_softcapping\":50.0,\"bos_token_id\":2,\"cache_implementati"
     "on\":\"hybrid\",\"eos_token_id\":1,\"final_logit_softcapping\":30.0,\"head_dim\":256,"
     "\"hidden_act\":\"gelu_pytorch_tanh\",\"hidden_activation\":\"gelu_pytorch_tanh\",\"hi"
     "dden_size\":3584,\"initializer_range\":0.02,\"intermediate_size\":14336,\"max_posi"
     "tion_embeddings\":8192,\"model_type\":\"gemma2\",\"num_attention_heads\":16,\"num_hi"
     "dden_layers\":42,\"num_key_value_heads\":8,\"pad_token_id\":0,\"query_pre_attn_sca"
     "lar\":256,\"rms_norm_eps\":1e-06,\"rope_theta\":10000.0,\"sliding_window\":4096,\"sl"
     "iding_window_size\":4096,\"transformers_version\":\"4.42.0.dev0\",\"use_cache\":tru"
     "e,\"vocab_size\":256000}"},
    {"gemma-3-12b",
     "{\"architectures\":[\"Gemma3ForConditionalGeneration\"],\"boi_token_index\":255999"
     ",\"eoi_token_index\":256000,\"eos_token_id\":[1,106],\"image_token_index\":262144,"
     "\"initializer_range\":0.02,\"mm_tokens_per_image\":256,\"model_type\":\"gemma3\",\"te"
     "xt_config\":{\"attention_bias\":false,\"attention_dropout\":0.0,\"attn_logit_softc"
     "apping\":null,\"cache_implementation\":\"hybrid\",\"final_logit_softcapping\":null,"
     "\"head_dim\":256,\"hidden_activation\":\"gelu_pytorch_tanh\",\"hidden_size\":3840,\"i"
     "nitializer_range\":0.02,\"intermediate_size\":15360,\"max_position_embeddings\":1"
     "31072,\"model_type\":\"gemma3_text\",\"num_attention_heads\":16,\"num_hidden_layers"
     "\":48,\"num_key_value_heads\":8,\"query_pre_attn_scalar\":256,\"rms_norm_eps\":1e-0"
     "6,\"rope_local_base_freq\":10000.0,\"rope_scaling\":{\"factor\":8.0,\"rope_type\":\"l"
     "inear\"},\"rope_theta\":1000000.0,\"sliding_window\":1024,\"sliding_window_pattern"
     "\":6,\"use_cache\":true,\"vocab_size\":262208},\"torch_dtype\":\"bfloat16\",\"transfor"
     "mers_version\":\"4.50.0.dev0\",\"vision_config\":{\"hidden_size\":1152,\"image_size\""
     ":896,\"intermediate_size\":4304,\"model_type\":\"siglip_vision_model\",\"num_attent"
     "ion_heads\":16,\"num_hidden_layers\":27,\"patch_size\":14,\"vision_use_head\":false"
     "}}"},
    {"gemma-3-1b",
     "{\"architectures\":[\"Gemma3ForCausalLM\"],\"attention_bias\":false,\"attention_dro"
     "pout\":0.0,\"attn_logit_softcapping\":null,\"bos_token_id\":2,\"cache_implementati"
     "on\":\"hybrid\",\"eos_token_id\":[1,106],\"final_logit_softcapping\":null,\"head_dim"
     "\":256,\"hidden_activation\":\"gelu_pytorch_tanh\",\"hidden_size\":1152,\"initialize"
     "r_range\":0.02,\"intermediate_size\":6912,\"max_position_embeddings\":32768,\"mode"
     "l_type\":\"gemma3_text\",\"num_attention_heads\":4,\"num_hidden_layers\":26,\"num_ke"
     "y_value_heads\":1,\"pad_token_id\":0,\"query_pre_attn_scalar\":256,\"rms_norm_eps\""
     ":1e-06,\"rope_local_base_freq\":10000,\"rope_scaling\":null,\"rope_theta\":1000000"
     ",\"sliding_window\":512,\"sliding_window_pattern\":6,\"torch_dtype\":\"bfloat16\",\"t"
     "ransformers_version\":\"4.50.0.dev0\",\"use_cache\":true,\"vocab_size\":262144}"},
    {"mpt-7b",
     "{\"architectures\":[\"MPTForCausalLM\"],\"attn_config\":{\"alibi\":true,\"alibi_"
     "bias_max\":8,\"attn_impl\":\"torch\",\"attn_pdrop\":0,\"attn_type\":\"multihead_"
     "attention\",\"attn_uses_sequence_id\":false,\"clip_qkv\":null,\"prefix_lm\":fals"
     "e,\"qk_ln\":false,\"softmax_scale\":null},\"auto_map\":{\"AutoConfig\":\"configu"
     "ration_mpt.MPTConfig\",\"AutoModelForCausalLM\":\"modeling_mpt.MPTForCausalLM\"}"
     ",\"d_model\":4096,\"emb_pdrop\":0,\"embedding_fraction\":1.0,\"expansion_ratio\""
     ":4,\"init_config\":{\"emb_init_std\":null,\"emb_init_uniform_lim\":null,\"fan_mo"
     "de\":\"fan_in\",\"init_div_is_residual\":true,\"init_gain\":0,\"init_nonlinearit"
     "y\":\"relu\",\"init_std\":0.02,\"name\":\"kaiming_normal_\",\"verbose\":0},\"ini"
     "t_device\":\"cpu\",\"learned_pos_emb\":true,\"logit_scale\":null,\"max_seq_len\""
     ":2048,\"model_type\":\"mpt\",\"n_heads\":32,\"n_layers\":32,\"no_bias\":true,\"n"
     "orm_type\":\"low_precision_layernorm\",\"resid_pdrop\":0,\"tokenizer_name\":\"El"
     "eutherAI/gpt-neox-20b\",\"torch_dtype\":\"bfloat16\",\"transformers_version\":\""
     "4.28.1\",\"use_cache\":false,\"verbose\":0,\"vocab_size\":50432}"},
    {"gpt-j-6b",
     "{\"activation_function\":\"gelu_new\",\"architectures\":[\"GPTJForCausalLM\"],\"attn_"
     "pdrop\":0.0,\"bos_token_id\":50256,\"embd_pdrop\":0.0,\"eos_token_id\":50256,\"gradi"
     "ent_checkpointing\":false,\"initializer_range\":0.02,\"layer_norm_epsilon\":1e-05"
     ",\"model_type\":\"gptj\",\"n_embd\":4096,\"n_head\":16,\"n_inner\":null,\"n_layer\":28,\""
     "n_positions\":2048,\"resid_pdrop\":0.0,\"rotary\":true,\"rotary_dim\":64,\"tie_word_"
     "embeddings\":false,\"vocab_size\":50400}"},
    {"gpt-oss-20b",
     "{\"architectures\":[\"GptOssForCausalLM\"],\"attention_bias\":true,\"attention_drop"
     "out\":0.0,\"eos_token_id\":200002,\"experts_per_token\":4,\"head_dim\":64,\"hidden_a"
     "ct\":\"silu\",\"hidden_size\":2880,\"initial_context_length\":4096,\"initializer_ran"
     "ge\":0.02,\"intermediate_size\":2880,\"layer_types\":[\"sliding_attention\",\"full_a"
     "ttention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_att"
     "ention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_atten"
     "tion\",\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attenti"
     "on\",\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention"
     "\",\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\","
     "\"sliding_attention\",\"full_attention\"],\"max_position_embeddings\":131072,\"mode"
     "l_type\":\"gpt_oss\",\"num_attention_heads\":64,\"num_experts_per_tok\":4,\"num_hidd"
     "en_layers\":24,\"num_key_value_heads\":8,\"num_local_experts\":32,\"output_router_"
     "logits\":false,\"pad_token_id\":199999,\"rms_norm_eps\":1e-05,\"rope_scaling\":{\"be"
     "ta_fast\":32.0,\"beta_slow\":1.0,\"factor\":32.0,\"original_max_position_embedding"
     "s\":4096,\"rope_type\":\"yarn\",\"truncate\":false},\"rope_theta\":150000,\"router_aux"
     "_loss_coef\":0.9,\"sliding_window\":128,\"swiglu_limit\":7.0,\"tie_word_embeddings"
     "\":false,\"transformers_version\":\"4.55.0.dev0\",\"use_cache\":true,\"vocab_size\":2"
     "01088}"},
    {"llama-3-70b",
     "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_drop"
     "out\":0.0,\"bos_token_id\":128000,\"eos_token_id\":128001,\"hidden_act\":\"silu\",\"hi"
     "dden_size\":8192,\"initializer_range\":0.02,\"intermediate_size\":28672,\"max_posi"
     "tion_embeddings\":8192,\"model_type\":\"llama\",\"num_attention_heads\":64,\"num_hid"
     "den_layers\":80,\"num_key_value_heads\":8,\"pretraining_tp\":1,\"rms_norm_eps\":1e-"
     "05,\"rope_scaling\":null,\"rope_theta\":500000.0,\"tie_word_embeddings\":false,\"to"
     "rch_dtype\":\"bfloat16\",\"use_cache\":true,\"vocab_size\":128256}"},
    {"llama-3-8b",
     "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_drop"
     "out\":0.0,\"bos_token_id\":128000,\"eos_token_id\":128001,\"hidden_act\":\"silu\",\"hi"
     "dden_size\":4096,\"initializer_range\":0.02,\"intermediate_size\":14336,\"max_posi"
     "tion_embeddings\":8192,\"model_type\":\"llama\",\"num_attention_heads\":32,\"num_hid"
     "den_layers\":32,\"num_key_value_heads\":8,\"pretraining_tp\":1,\"rms_norm_eps\":1e-"
     "05,\"rope_scaling\":null,\"rope_theta\":500000.0,\"tie_word_embeddings\":false,\"to"
     "rch_dtype\":\"bfloat16\",\"transformers_version\":\"4.40.0.dev0\",\"use_cache\":true,"
     "\"vocab_size\":128256}"},
    {"llama-3.1-405b",
     "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_drop"
     "out\":0.0,\"bos_token_id\":128000,\"eos_token_id\":128001,\"hidden_act\":\"silu\",\"hi"
     "dden_size\":16384,\"initializer_range\":0.02,\"intermediate_size\":53248,\"max_pos"
     "ition_embeddings\":131072,\"mlp_bias\":false,\"model_type\":\"llama\",\"num_attentio"
     "n_heads\":128,\"num_hidden_layers\":126,\"num_key_value_heads\":8,\"pretraining_tp"
     "\":1,\"rms_norm_eps\":1e-05,\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,"
     "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192,\"rope_type\":\""
     "llama3\"},\"rope_theta\":500000.0,\"tie_word_embeddings\":false,\"torch_dtype\":\"bf"
     "loat16\",\"use_cache\":true,\"vocab_size\":128256}"},
    {"mistral-nemo-base-2407",
     "{\"architectures\":[\"MistralForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_i"
     "d\":1,\"eos_token_id\":2,\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":5120,"
     "\"initializer_range\":0.02,\"intermediate_size\":14336,\"max_position_embeddings\""
     ":1024000,\"model_type\":\"mistral\",\"num_attention_heads\":32,\"num_hidden_layers\""
     ":40,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-05,\"rope_theta\":1000000.0,\"sli"
     "ding_window\":null,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"voca"
     "b_size\":131072}"},
    {"olmo-2-0425-1b",
     "{\"architectures\":[\"Olmo2ForCausalLM\"],\"attention_bias\":false,\"attention_drop"
     "out\":0.0,\"eos_token_id\":100257,\"hidden_act\":\"silu\",\"hidden_size\":2048,\"initi"
     "alizer_range\":0.02,\"intermediate_size\":8192,\"max_position_embeddings\":4096,\""
     "model_type\":\"olmo2\",\"num_attention_heads\":16,\"num_hidden_layers\":16,\"num_key"
     "_value_heads\":16,\"pad_token_id\":100277,\"rms_norm_eps\":1e-06,\"rope_scaling\":n"
     "ull,\"rope_theta\":500000,\"tie_word_embeddings\":false,\"use_cache\":true,\"vocab_"
     "size\":100352}"},
    {"opt-350m",
     "{\"_name_or_path\":\"facebook/opt-350m\",\"activation_dropout\":0.0,\"activation"
     "_function\":\"relu\",\"architectures\":[\"OPTForCausalLM\"],\"attention_dropout"
     "\":0.0,\"bos_token_id\":2,\"do_layer_norm_before\":false,\"dropout\":0.1,\"eos_to"
     "ken_id\":2,\"ffn_dim\":4096,\"hidden_size\":1024,\"init_std\":0.02,\"layerdrop\""
     ":0.0,\"max_position_embeddings\":2048,\"model_type\":\"opt\",\"num_attention_hea"
     "ds\":16,\"num_hidden_layers\":24,\"pad_token_id\":1,\"prefix\":\"</s>\",\"torch_"
     "dtype\":\"float16\",\"transformers_version\":\"4.20.0.dev0\",\"use_cache\":true,"
     "\"vocab_size\":50272,\"word_embed_proj_dim\":512}"},
    {"pythia-70m",
     "{\"architectures\":[\"GPTNeoXForCausalLM\"],\"bos_token_id\":0,\"eos_token_id\":0,\"h"
     "idden_act\":\"gelu\",\"hidden_size\":512,\"initializer_range\":0.02,\"intermediate_s"
     "ize\":2048,\"layer_norm_eps\":1e-05,\"max_position_embeddings\":2048,\"model_type\""
     ":\"gpt_neox\",\"num_attention_heads\":8,\"num_hidden_layers\":6,\"rotary_emb_base\":"
     "10000,\"rotary_pct\":0.25,\"tie_word_embeddings\":false,\"use_cache\":true,\"use_pa"
     "rallel_residual\":true,\"vocab_size\":50304}"},
    {"qwen1.5-moe-a2.7b-chat",
     "{\"architectures\":[\"Qwen2MoeForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_"
     "id\":151643,\"eos_token_id\":151643,\"decoder_sparse_step\":1,\"hidden_act\":\"silu\""
     ",\"hidden_size\":2048,\"initializer_range\":0.02,\"intermediate_size\":5632,\"max_p"
     "osition_embeddings\":32768,\"max_window_layers\":21,\"model_type\":\"qwen2_moe\",\"m"
     "oe_intermediate_size\":1408,\"norm_topk_prob\":false,\"num_attention_heads\":16,\""
     "num_experts\":60,\"num_experts_per_tok\":4,\"num_hidden_layers\":24,\"num_key_valu"
     "e_heads\":16,\"output_router_logits\":false,\"rms_norm_eps\":1e-06,\"rope_theta\":1"
     "000000.0,\"router_aux_loss_coef\":0.001,\"shared_expert_intermediate_size\":5632"
     ",\"sliding_window\":32768,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\""
     ",\"transformers_version\":\"4.36.0.dev0\",\"use_cache\":true,\"use_sliding_window\":"
     "false,\"vocab_size\":151936}"},
    {"qwen3-4b",
     "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"attention_drop"
     "out\":0.0,\"bos_token_id\":151643,\"eos_token_id\":151645,\"head_dim\":128,\"hidden_"
     "act\":\"silu\",\"hidden_size\":2560,\"initializer_range\":0.02,\"intermediate_size\":"
     "9728,\"max_position_embeddings\":40960,\"max_window_layers\":36,\"model_type\":\"qw"
     "en3\",\"num_attention_heads\":32,\"num_hidden_layers\":36,\"num_key_value_heads\":8"
     ",\"rms_norm_eps\":1e-06,\"rope_scaling\":null,\"rope_theta\":1000000,\"sliding_wind"
     "ow\":null,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"transformers_v"
     "ersion\":\"4.51.0\",\"use_cache\":true,\"use_sliding_window\":false,\"vocab_size\":15"
     "1936}"},
    {"stablelm-2-12b",
     "{\"architectures\":[\"StableLmForCausalLM\"],\"bos_token_id\":100257,\"eos_token_id"
     "\":100257,\"hidden_act\":\"silu\",\"hidden_dropout\":0.0,\"hidden_size\":5120,\"initia"
     "lizer_range\":0.01,\"intermediate_size\":13824,\"layer_norm_eps\":1e-05,\"max_posi"
     "tion_embeddings\":4096,\"model_type\":\"stablelm\",\"num_attention_heads\":32,\"num_"
     "hidden_layers\":40,\"num_key_value_heads\":8,\"partial_rotary_factor\":0.25,\"qk_l"
     "ayernorm\":true,\"rope_theta\":10000,\"tie_word_embeddings\":false,\"torch_dtype\":"
     "\"bfloat16\",\"use_cache\":true,\"use_parallel_residual\":true,\"use_qkv_bias\":fals"
     "e,\"vocab_size\":100352}"},
    {"starcoder2-3b",
     "{\"architectures\":[\"Starcoder2ForCausalLM\"],\"attention_dropout\":0.1,\"bos_toke"
     "n_id\":0,\"embedding_dropout\":0.1,\"eos_token_id\":0,\"hidden_act\":\"gelu_pytorch_"
     "tanh\",\"hidden_size\":3072,\"initializer_range\":0.018042,\"intermediate_size\":12"
     "288,\"max_position_embeddings\":16384,\"mlp_type\":\"default\",\"model_type\":\"starc"
     "oder2\",\"norm_epsilon\":1e-05,\"norm_type\":\"layer_norm\",\"num_attention_heads\":2"
     "4,\"num_hidden_layers\":30,\"num_key_value_heads\":2,\"residual_dropout\":0.1,\"rop"
     "e_theta\":999999.4420358813,\"sliding_window\":4096,\"torch_dtype\":\"bfloat16\",\"u"
     "se_bias\":true,\"use_cache\":true,\"vocab_size\":49152}"},
    {"tinyllama-1.1b",
     "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"bos_token_id\":"
     "1,\"eos_token_id\":2,\"hidden_act\":\"silu\",\"hidden_size\":2048,\"initializer_range"
     "\":0.02,\"intermediate_size\":5632,\"max_position_embeddings\":2048,\"model_type\":"
     "\"llama\",\"num_attention_heads\":32,\"num_hidden_layers\":22,\"num_key_value_heads"
     "\":4,\"pretraining_tp\":1,\"rms_norm_eps\":1e-05,\"rope_scaling\":null,\"rope_theta\""
     ":10000.0,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"transformers_"
     "version\":\"4.35.0\",\"use_cache\":true,\"vocab_size\":32000}"},
};

static void test_cards_match_embedded_configs(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof CARD_SOURCES / sizeof CARD_SOURCES[0]; i++) {
        lp_arch card, config;
        lp_error err = {0};
        if (lp_arch_load(CARD_SOURCES[i][0], &card, &err) != LP_OK)
            fail_msg("card %s: %s", CARD_SOURCES[i][0], err.msg);
        if (lp_arch_from_hf_json(CARD_SOURCES[i][1], strlen(CARD_SOURCES[i][1]), "config.json",
                                 &config, &err) != LP_OK)
            fail_msg("config of %s: %s", CARD_SOURCES[i][0], err.msg);
        char why[256];
        if (arch_diff(&card, &config, why, sizeof why))
            fail_msg("card %s differs from its config.json in %s", CARD_SOURCES[i][0], why);
        /* gpt-oss's rope_scaling says truncate: false; every other yarn config leaves it */
        bool unrounded = strcmp(CARD_SOURCES[i][0], "gpt-oss-20b") == 0;
        if (config.rope_scaling.yarn_unrounded != unrounded)
            fail_msg("%s: yarn truncate read as %s", CARD_SOURCES[i][0],
                     config.rope_scaling.yarn_unrounded ? "false" : "true");
    }
}

static bool is_card(const char *name)
{
    size_t n = strlen(name);
    return n > 5 && strcmp(name + n - 5, ".yaml") == 0;
}

static void test_shipped_cards_load(void **state)
{
    (void)state;
    const char *dir = lp_configs_dir();
    DIR *d = opendir(dir);
    if (!d)
        fail_msg("configs folder %s not found (LOUPE_CONFIGS)", dir);
    int n_cards = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_card(e->d_name))
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        lp_arch a;
        lp_error err = {0};
        if (lp_arch_from_yaml(path, &a, &err) != LP_OK)
            fail_msg("%s", err.msg);
        /* and by bare name, as users type it */
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)strlen(e->d_name) - 5, e->d_name);
        lp_arch by_name;
        if (lp_arch_load(name, &by_name, &err) != LP_OK)
            fail_msg("lp_arch_load(\"%s\"): %s", name, err.msg);
        char why[256];
        if (arch_diff(&a, &by_name, why, sizeof why))
            fail_msg("%s: loading by name differs: %s", name, why);
        check_round_trip(&a, e->d_name);
        /* every card is checked against its source config somewhere */
        bool has_source = false;
        for (size_t i = 0; i < sizeof SHARED_PAIRS / sizeof SHARED_PAIRS[0]; i++)
            has_source |= strcmp(SHARED_PAIRS[i][0], name) == 0;
        for (size_t i = 0; i < sizeof CARD_SOURCES / sizeof CARD_SOURCES[0]; i++)
            has_source |= strcmp(CARD_SOURCES[i][0], name) == 0;
        if (!has_source)
            fail_msg("card %s has no source config in SHARED_PAIRS or CARD_SOURCES", name);
        json_t *j = lp_arch_to_json(&a);
        assert_non_null(j);
        assert_int_equal(json_integer_value(json_object_get(j, "n_layers")), a.n_layers);
        assert_int_equal((int64_t)json_array_size(json_object_get(j, "layer_window")),
                         a.n_layers);
        json_decref(j);
        n_cards++;
    }
    closedir(d);
    if (n_cards < 25)
        fail_msg("only %d cards in %s, want at least 25", n_cards, dir);

    lp_arch a;
    lp_error err = {0};
    assert_int_equal(lp_arch_load("no-such-model-xyz", &a, &err), LP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "no-such-model-xyz"));
    assert_int_equal(lp_arch_load("llama-3-8b", &a, &err), LP_OK);
    assert_int_equal(a.n_kv_heads, 8);
    assert_true(a.rope_theta == 500000.0);
    assert_int_equal(a.n_ctx, 8192);
    /* any case, and the Hugging Face id the card was taken from */
    lp_arch b;
    char why[256];
    assert_int_equal(lp_arch_load("Llama-3-8B", &b, &err), LP_OK);
    assert_null(arch_diff(&a, &b, why, sizeof why));
    if (lp_arch_load("meta-llama/Meta-Llama-3-8B", &b, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_null(arch_diff(&a, &b, why, sizeof why));
    assert_int_equal(lp_arch_load("qwen/qwen3-30b-a3b", &b, &err), LP_OK);
    assert_int_equal(b.n_experts, 128);
    /* a prefix of an id is not the id */
    assert_int_equal(lp_arch_load("meta-llama/Meta-Llama-3", &b, &err), LP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "Hugging Face"));
}

#else

/* ---------------------------------------------------------------------------------------------
 * Golden cases: ../shared
 */

static lp_arch *load_shared(const char *model)
{
    static lp_arch arch;
    char rel[256], path[1024];
    snprintf(rel, sizeof rel, "configs/%s/config.json", model);
    lp_test_shared_path(path, sizeof path, rel);
    lp_error err = {0};
    if (lp_arch_from_hf_config(path, &arch, &err) != LP_OK)
        fail_msg("%s: %s", model, err.msg);
    return &arch;
}

static void test_shared_configs(void **state)
{
    (void)state;
    lp_arch *a = load_shared("gemma-2b");
    assert_int_equal(a->head_dim, 256);
    assert_int_equal(a->n_kv_heads, 1);
    assert_true(a->tied_embeddings && a->norm_weight_plus_one);
    assert_int_equal(a->act, LP_ACT_GELU_TANH); /* hidden_act "gelu" is overridden */
    assert_true(fabs(a->embed_scale - sqrt(2048.0)) < 1e-12);
    assert_int_equal(a->layer_window[0], 0);

    a = load_shared("Qwen3-30B-A3B");
    assert_int_equal(a->n_experts, 128);
    assert_int_equal(a->n_experts_per_tok, 8);
    assert_int_equal(a->expert_ffn_hidden, 768);
    assert_true(a->norm_topk_prob && a->qk_norm);
    for (int l = 0; l < 48; l++)
        assert_true(a->layer_moe[l]);
    assert_int_equal(a->head_dim, 128);
    assert_int_equal(a->layer_kv_heads[47], 4);

    a = load_shared("DeepSeek-V2-Lite");
    assert_true(a->mla);
    assert_int_equal(a->q_lora_rank, 0);
    assert_int_equal(a->kv_lora_rank, 512);
    assert_int_equal(a->qk_rope_head_dim, 64);
    assert_int_equal(a->qk_nope_head_dim, 128);
    assert_int_equal(a->v_head_dim, 128);
    assert_int_equal(a->n_shared_experts, 2);
    assert_int_equal(a->expert_ffn_hidden, 1408);
    assert_false(a->layer_moe[0]);
    assert_int_equal(a->layer_ffn_hidden[0], 10944);
    for (int l = 1; l < 27; l++)
        assert_true(a->layer_moe[l]);
    assert_false(a->router_score_bias); /* topk_method greedy */
    assert_int_equal(a->rope_scaling.kind, LP_ROPE_SCALING_YARN);

    a = load_shared("gpt2");
    assert_true(a->tied_embeddings);
    assert_int_equal(a->pos_kind, LP_POS_LEARNED);
    assert_int_equal(a->pos_table_rows, 1024);
    assert_int_equal(a->ffn_hidden, 3072);
    assert_int_equal(a->norm_kind, LP_NORM_LAYER);

    a = load_shared("opt-125m");
    assert_int_equal(a->pos_table_rows, 2050);
    assert_int_equal(a->pos_offset, 2);
    assert_int_equal(a->act, LP_ACT_RELU);
    assert_true(a->tied_embeddings);

    a = load_shared("Mistral-7B-v0.1");
    for (int l = 0; l < 32; l++)
        assert_int_equal(a->layer_window[l], 4096);
    a = load_shared("Mixtral-8x7B-v0.1");
    assert_int_equal(a->sliding_window, 0); /* null */
    assert_int_equal(a->n_experts, 8);
    assert_int_equal(a->expert_ffn_hidden, 14336);
    a = load_shared("Qwen2.5-0.5B-Instruct");
    assert_true(a->bias_qkv && !a->bias_o && a->tied_embeddings);
    assert_int_equal(a->layer_window[23], 0); /* use_sliding_window false */
    a = load_shared("Llama-3.1-8B");
    assert_int_equal(a->rope_scaling.kind, LP_ROPE_SCALING_LLAMA3);
    assert_true(a->rope_scaling.factor == 8.0 && a->rope_scaling.high_freq_factor == 4.0);
    assert_int_equal(a->rope_scaling.original_ctx, 8192);
    assert_false(a->tied_embeddings);
    a = load_shared("phi-2");
    assert_int_equal(a->rope_dim, 32);
    assert_true(a->parallel_block && a->bias_lm_head && a->bias_qkv);
    a = load_shared("stablelm-3b-4e1t");
    assert_int_equal(a->rope_dim, 20);
    assert_false(a->bias_qkv);
    assert_int_equal(a->norm_kind, LP_NORM_LAYER);
    a = load_shared("bloomz-560m");
    assert_int_equal(a->pos_kind, LP_POS_ALIBI);
    assert_true(a->embed_norm && a->tied_embeddings);
    assert_int_equal(a->ffn_hidden, 4096);
    a = load_shared("Phi-3-mini-4k-instruct");
    assert_int_equal(a->layer_window[31], 2047);
    a = load_shared("Llama-3.2-1B");
    assert_true(a->head_dim_explicit && a->tied_embeddings);
    a = load_shared("Llama-2-7b-hf");
    assert_int_equal(a->storage_dtype, LP_DTYPE_F16);
    a = load_shared("SmolLM2-135M");
    assert_int_equal(a->n_kv_heads, 3);
    assert_true(a->rope_theta == 100000.0);
    a = load_shared("Qwen3-8B");
    assert_true(a->qk_norm && !a->tied_embeddings);

    /* Every shared config parses and survives a card round trip. */
    char dir_path[1024];
    lp_test_shared_path(dir_path, sizeof dir_path, "configs");
    DIR *d = opendir(dir_path);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "README.md") == 0)
            continue;
        a = load_shared(e->d_name);
        check_round_trip(a, e->d_name);
        n++;
    }
    closedir(d);
    assert_true(n >= 17);
}

/* Cards taken from a config in ../shared must describe exactly the same model. */
static void test_cards_match_configs(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof SHARED_PAIRS / sizeof SHARED_PAIRS[0]; i++) {
        lp_arch card;
        lp_error err = {0};
        if (lp_arch_load(SHARED_PAIRS[i][0], &card, &err) != LP_OK)
            fail_msg("card %s: %s", SHARED_PAIRS[i][0], err.msg);
        lp_arch *config = load_shared(SHARED_PAIRS[i][1]);
        char why[256];
        if (arch_diff(&card, config, why, sizeof why))
            fail_msg("card %s differs from %s/config.json in %s", SHARED_PAIRS[i][0],
                     SHARED_PAIRS[i][1], why);
    }
}

static void test_stories260k(void **state)
{
    (void)state;
    char path[1024];
    lp_test_shared_path(path, sizeof path, "models/stories260K/stories260K.bin");
    lp_arch a;
    lp_error err = {0};
    if (lp_arch_from_llama2c(path, &a, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(a.hidden_size, 64);
    assert_int_equal(a.n_layers, 5);
    assert_int_equal(a.n_heads, 8);
    assert_int_equal(a.n_kv_heads, 4);
    assert_int_equal(a.vocab_size, 512);
    assert_int_equal(a.ffn_hidden, 172);
    assert_int_equal(a.n_ctx, 512);
    assert_int_equal(a.head_dim, 8);
    assert_true(a.tied_embeddings);
    assert_int_equal(a.rope_layout, LP_ROPE_ADJACENT);

    /* the same model from its HF folder: same numbers, the other RoPE pairing */
    lp_arch hf;
    lp_test_shared_path(path, sizeof path, "models/stories260K/hf");
    if (lp_arch_load(path, &hf, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(hf.rope_layout, LP_ROPE_HALVES);
    hf.rope_layout = LP_ROPE_ADJACENT;
    hf.head_dim_explicit = false; /* config.json states head_dim 8; the .bin header cannot */
    char why[256];
    if (arch_diff(&a, &hf, why, sizeof why))
        fail_msg("stories260K .bin and hf/config.json differ in %s", why);

    /* a weights file stands for the config.json beside it */
    lp_test_shared_path(path, sizeof path, "models/stories260K/hf/model.safetensors");
    if (lp_arch_load(path, &hf, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(hf.hidden_size, 64);
    assert_int_equal(hf.rope_layout, LP_ROPE_HALVES);

    /* and from the GGUF converted from the .bin: lp_arch_load dispatches on the extension */
    lp_arch gguf;
    lp_test_shared_path(path, sizeof path, "models/stories260K/stories260K.gguf");
    if (lp_arch_load(path, &gguf, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(gguf.hidden_size, 64);
    assert_int_equal(gguf.n_layers, 5);
    assert_int_equal(gguf.n_heads, 8);
    assert_int_equal(gguf.n_kv_heads, 4);
    assert_int_equal(gguf.vocab_size, 512);
    assert_int_equal(gguf.ffn_hidden, 172);
    check_round_trip(&gguf, "stories260K.gguf");
    check_round_trip(&a, "stories260K.bin");
    /* the quantized GGUFs' descriptions (dtype q4_k, q6_k, tq2_0) survive a card as well */
    static const char *const quants[] = {"stories260K-Q4_K_M.gguf", "stories260K-Q6_K.gguf",
                                         "stories260K-TQ2_0.gguf"};
    for (size_t i = 0; i < sizeof quants / sizeof quants[0]; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "models/stories260K/quant/%s", quants[i]);
        lp_test_shared_path(path, sizeof path, rel);
        if (lp_arch_load(path, &gguf, &err) != LP_OK)
            fail_msg("%s", err.msg);
        check_round_trip(&gguf, quants[i]);
    }
}

#endif

int main(void)
{
#ifdef LP_ARCH_GOLDEN
    LP_TEST_REQUIRE_SHARED();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_configs),
        cmocka_unit_test(test_cards_match_configs),
        cmocka_unit_test(test_stories260k),
    };
#else
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_names),
        cmocka_unit_test(test_gemma2_alternating_windows),
        cmocka_unit_test(test_mpt_config),
        cmocka_unit_test(test_gemma3_pattern_and_text_config),
        cmocka_unit_test(test_layer_types_and_qwen_windows),
        cmocka_unit_test(test_moe_layer_selection),
        cmocka_unit_test(test_family_cases),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_card_reader),
        cmocka_unit_test(test_llama2c_header),
        cmocka_unit_test(test_shipped_cards_load),
        cmocka_unit_test(test_truncated_inputs),
        cmocka_unit_test(test_json_output),
        cmocka_unit_test(test_cards_match_embedded_configs),
    };
#endif
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif /* !LP_ARCH_FUZZ */

#ifdef LP_ARCH_FUZZ
/* ---------------------------------------------------------------------------------------------
 * Fuzz entry point for the config.json and card readers.
 *
 * With LOUPE_FUZZ=ON (clang) fuzz_arch_libfuzzer links against libFuzzer:
 *   build/tests/fuzz_arch_libfuzzer -max_len=8192 configs/ CORPUS_DIR
 * Without it, main() replays the files given on the command line and, for each, a deterministic
 * set of variants: every prefix at a stride and single-byte substitutions. The ctest
 * fuzz_arch_replay runs it over the shipped cards and ../shared's configs.
 *
 * Beyond "no crash": whatever parses must survive lp_arch_to_json and a card round trip to the
 * same description.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"
#include "inspect/arch/arch_internal.h"
#include "inspect/arch/arch_json.h"
#include "inspect/inspect.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_parsed(const lp_arch *arch)
{
    json_t *j = lp_arch_to_json(arch);
    if (!j)
        abort();
    json_decref(j);
    char *card = NULL;
    size_t card_len = 0;
    FILE *mem = open_memstream(&card, &card_len);
    if (!mem)
        abort();
    lp_error err = {0};
    if (lp_arch_write_yaml(arch, NULL, mem, &err) != LP_OK)
        abort();
    fclose(mem);
    lp_arch *back = malloc(sizeof *back);
    if (!back)
        abort();
    if (lp_arch_from_yaml_text(card, card_len, "roundtrip.yaml", back, &err) != LP_OK) {
        fprintf(stderr, "written card does not load: %s\n%s", err.msg, card);
        abort();
    }
    /* everything but name and source must come back */
    lp_arch a = *arch;
    memcpy(a.name, back->name, sizeof a.name);
    memcpy(a.source, back->source, sizeof a.source);
    if (memcmp(&a, back, sizeof a) != 0) {
        fprintf(stderr, "card round trip changed the description:\n%s", card);
        abort();
    }
    free(back);
    free(card);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lp_arch *arch = malloc(sizeof *arch);
    if (!arch)
        return 0;
    lp_error err = {0};
    if (lp_arch_from_hf_json((const char *)data, size, "fuzz.json", arch, &err) == LP_OK)
        check_parsed(arch);
    else if (!err.msg[0])
        abort(); /* every failure explains itself */
    memset(&err, 0, sizeof err);
    if (lp_arch_from_yaml_text((const char *)data, size, "fuzz.yaml", arch, &err) == LP_OK)
        check_parsed(arch);
    else if (!err.msg[0])
        abort();
    free(arch);
    return 0;
}

#ifndef LP_FUZZ_LIBFUZZER
int main(int argc, char **argv)
{
    static const uint8_t substitutes[] = {'0', '-', '"', ':', '\n', '{', '[', 0xff};
    long runs = 0;
    for (int i = 1; i < argc; i++) {
        char *text;
        size_t size;
        lp_error err = {0};
        if (lp_read_file(argv[i], 1u << 20, &text, &size, &err) != LP_OK) {
            fprintf(stderr, "fuzz_arch: %s\n", err.msg);
            return 2;
        }
        uint8_t *buf = malloc(size + 1);
        if (!buf)
            return 2;
        LLVMFuzzerTestOneInput((const uint8_t *)text, size);
        runs++;
        for (size_t len = 0; len < size; len += 7, runs++)
            LLVMFuzzerTestOneInput((const uint8_t *)text, len);
        for (size_t at = 0; at < size; at += 5) {
            memcpy(buf, text, size);
            buf[at] = substitutes[(at / 5) % sizeof substitutes];
            LLVMFuzzerTestOneInput(buf, size);
            runs++;
        }
        free(buf);
        free(text);
    }
    printf("fuzz_arch: %d files, %ld inputs, no crash\n", argc - 1, runs);
    return 0;
}
#endif
#endif /* LP_ARCH_FUZZ */
