/* Tests of inspect/arch/gguf_arch.c: GGUF metadata -> lp_arch on generated files for each kind of key
 * (scalar or per-layer, MoE, MLA, windows) and on the real stories260K GGUF, compared with the
 * same model's Hugging Face config.json. */
#include "test_util.h"

#include <math.h>

#include "gguf_writer.h"
#include "inspect/formats/gguf.h"
#include "inspect/inspect.h"
#include "arch_expect.h"

static lp_gguf *open_gw(lp_gw *w)
{
    assert_true(lp_gw_finish(w));
    lp_gguf *g = NULL;
    lp_error err = {0};
    lp_status st = lp_gguf_open_memory(w->file.data, w->file.len, "gen.gguf", &g, &err);
    if (st != LP_OK)
        print_error("%s\n", err.msg);
    assert_int_equal(st, LP_OK);
    return g;
}

/* Arch from w's metadata; *status_out gets the status; on success the caller reads *a. */
static lp_status arch_of(lp_gw *w, lp_arch *a, lp_error *err)
{
    lp_gguf *g = open_gw(w);
    lp_status st = lp_arch_from_gguf(g, a, err);
    lp_gguf_close(g);
    lp_gw_free(w);
    return st;
}

/* A minimal dense model: 4 layers, hidden 64, 8 heads. */
static void base_kvs(lp_gw *w, const char *arch)
{
    char key[128];
    lp_gw_init(w, 3);
    lp_gw_kv_str(w, "general.architecture", arch);
    snprintf(key, sizeof key, "%s.block_count", arch);
    lp_gw_kv_u32(w, key, 4);
    snprintf(key, sizeof key, "%s.embedding_length", arch);
    lp_gw_kv_u32(w, key, 64);
    snprintf(key, sizeof key, "%s.attention.head_count", arch);
    lp_gw_kv_u32(w, key, 8);
    snprintf(key, sizeof key, "%s.context_length", arch);
    lp_gw_kv_u32(w, key, 2048);
    snprintf(key, sizeof key, "%s.vocab_size", arch);
    lp_gw_kv_u32(w, key, 1000);
}

static void test_llama_scalars(void **state)
{
    (void)state;
    lp_gw w;
    base_kvs(&w, "llama");
    lp_gw_kv_u32(&w, "llama.attention.head_count_kv", 2);
    lp_gw_kv_u32(&w, "llama.feed_forward_length", 172);
    lp_gw_kv_f32(&w, "llama.rope.freq_base", 500000.0f);
    lp_gw_kv_f32(&w, "llama.attention.layer_norm_rms_epsilon", 1e-6f);
    lp_gw_kv_u32(&w, "tokenizer.ggml.bos_token_id", 1);
    lp_gw_kv_u32(&w, "tokenizer.ggml.eos_token_id", 2);
    lp_gw_kv_str(&w, "general.name", "Tiny Llama Test");
    static float emb[1000 * 64];
    const int64_t ne[2] = {64, 1000};
    lp_gw_tensor(&w, "token_embd.weight", 2, ne, 0, emb, sizeof emb);
    lp_arch a;
    lp_error err = {0};
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    assert_string_equal(a.family, "llama");
    assert_string_equal(a.name, "Tiny Llama Test");
    assert_int_equal(a.n_layers, 4);
    assert_int_equal(a.hidden_size, 64);
    assert_int_equal(a.n_heads, 8);
    assert_int_equal(a.n_kv_heads, 2);
    assert_int_equal(a.head_dim, 8);
    assert_false(a.head_dim_explicit);
    assert_int_equal(a.vocab_size, 1000);
    assert_int_equal(a.ffn_hidden, 172);
    assert_int_equal(a.layer_ffn_hidden[3], 172);
    assert_int_equal(a.layer_kv_heads[0], 2);
    assert_int_equal(a.n_ctx, 2048);
    assert_true(a.rope_theta == 500000.0);
    assert_true(fabs(a.norm_eps - 1e-6) < 1e-12);
    assert_int_equal(a.rope_layout, LP_ROPE_ADJACENT); /* llama.cpp's NORM rope */
    assert_int_equal(a.ffn_kind, LP_FFN_SWIGLU);
    assert_int_equal(a.norm_kind, LP_NORM_RMS);
    assert_int_equal(a.rope_dim, 8);
    assert_true(a.tied_embeddings); /* no output.weight */
    assert_int_equal(a.bos_token_id, 1);
    assert_int_equal(a.eos_token_id, 2);
    assert_int_equal(a.storage_dtype, LP_DTYPE_F32);
}

static void test_per_layer_arrays(void **state)
{
    (void)state;
    lp_gw w;
    base_kvs(&w, "llama");
    const uint32_t kv[4] = {2, 4, 8, 2};
    const int32_t ffn[4] = {100, 200, 300, 400};
    lp_gw_kv_arr_u32(&w, "llama.attention.head_count_kv", kv, 4);
    lp_gw_kv_arr_i32(&w, "llama.feed_forward_length", ffn, 4);
    lp_arch a;
    lp_error err = {0};
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    for (int l = 0; l < 4; l++) {
        assert_int_equal(a.layer_kv_heads[l], kv[l]);
        assert_int_equal(a.layer_ffn_hidden[l], ffn[l]);
    }
    assert_int_equal(a.n_kv_heads, 8);
    assert_int_equal(a.ffn_hidden, 400);

    /* an array must have one entry per layer */
    base_kvs(&w, "llama");
    lp_gw_kv_arr_u32(&w, "llama.attention.head_count_kv", kv, 3);
    lp_gw_kv_u32(&w, "llama.feed_forward_length", 64);
    assert_int_equal(arch_of(&w, &a, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "llama.attention.head_count_kv"));
    assert_non_null(strstr(err.msg, "3 entries"));
}

static void test_errors(void **state)
{
    (void)state;
    lp_gw w;
    lp_arch a;
    lp_error err = {0};
    base_kvs(&w, "mamba");
    assert_int_equal(arch_of(&w, &a, &err), LP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "\"mamba\""));

    lp_gw_init(&w, 3);
    lp_gw_kv_str(&w, "general.architecture", "llama");
    lp_gw_kv_u32(&w, "llama.embedding_length", 64);
    assert_int_equal(arch_of(&w, &a, &err), LP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "gen.gguf: missing required key 'llama.block_count'"));

    base_kvs(&w, "llama");
    lp_gw_kv_str(&w, "llama.feed_forward_length", "wide");
    assert_int_equal(arch_of(&w, &a, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "llama.feed_forward_length"));

    base_kvs(&w, "llama");
    lp_gw_kv_u64(&w, "llama.feed_forward_length", UINT64_MAX);
    assert_int_equal(arch_of(&w, &a, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "'llama.feed_forward_length': 18446744073709551616 is too large"));

    lp_gw_init(&w, 3);
    assert_int_equal(arch_of(&w, &a, &err), LP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "general.architecture"));

    /* a later shard of a split file: no metadata, by design */
    lp_gw_init(&w, 3);
    lp_gw_key(&w, "split.no", LP_GW_UINT16);
    uint16_t one = 1, three = 3;
    lp_gw_bytes(&w, &one, 2);
    lp_gw_key(&w, "split.count", LP_GW_UINT16);
    lp_gw_bytes(&w, &three, 2);
    assert_int_equal(arch_of(&w, &a, &err), LP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "shard 2 of 3"));

    /* no vocab_size and no tokens */
    lp_gw_init(&w, 3);
    lp_gw_kv_str(&w, "general.architecture", "qwen2");
    lp_gw_kv_u32(&w, "qwen2.block_count", 2);
    lp_gw_kv_u32(&w, "qwen2.embedding_length", 64);
    lp_gw_kv_u32(&w, "qwen2.attention.head_count", 4);
    lp_gw_kv_u32(&w, "qwen2.feed_forward_length", 128);
    assert_int_equal(arch_of(&w, &a, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "vocabulary"));
}

static void test_qwen_family(void **state)
{
    (void)state;
    lp_gw w;
    lp_gw_init(&w, 3);
    lp_gw_kv_str(&w, "general.architecture", "qwen3");
    lp_gw_kv_u32(&w, "qwen3.block_count", 2);
    lp_gw_kv_u32(&w, "qwen3.embedding_length", 64);
    lp_gw_kv_u32(&w, "qwen3.attention.head_count", 4);
    lp_gw_kv_u32(&w, "qwen3.attention.head_count_kv", 2);
    lp_gw_kv_u32(&w, "qwen3.attention.key_length", 32); /* heads * head_dim != hidden */
    lp_gw_kv_u32(&w, "qwen3.feed_forward_length", 96);
    const char *tokens[5] = {"a", "b", "c", "d", "e"};
    lp_gw_kv_arr_str(&w, "tokenizer.ggml.tokens", tokens, 5);
    lp_arch a;
    lp_error err = {0};
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    assert_string_equal(a.family, "qwen3");
    assert_int_equal(a.vocab_size, 5); /* from the token list */
    assert_int_equal(a.head_dim, 32);
    assert_true(a.head_dim_explicit);
    assert_true(a.qk_norm);
    assert_int_equal(a.rope_layout, LP_ROPE_HALVES); /* NEOX */

    /* qwen2moe: shared expert; biases from the tensor names */
    lp_gw_init(&w, 3);
    lp_gw_kv_str(&w, "general.architecture", "qwen2moe");
    lp_gw_kv_u32(&w, "qwen2moe.block_count", 2);
    lp_gw_kv_u32(&w, "qwen2moe.embedding_length", 64);
    lp_gw_kv_u32(&w, "qwen2moe.attention.head_count", 4);
    lp_gw_kv_u32(&w, "qwen2moe.vocab_size", 10);
    lp_gw_kv_u32(&w, "qwen2moe.feed_forward_length", 96);
    lp_gw_kv_u32(&w, "qwen2moe.expert_count", 8);
    lp_gw_kv_u32(&w, "qwen2moe.expert_used_count", 2);
    lp_gw_kv_u32(&w, "qwen2moe.expert_feed_forward_length", 32);
    lp_gw_kv_u32(&w, "qwen2moe.expert_shared_feed_forward_length", 128);
    static float bias[64];
    const int64_t ne[1] = {64};
    lp_gw_tensor(&w, "blk.0.attn_q.bias", 1, ne, 0, bias, sizeof bias);
    lp_gw_tensor(&w, "output.weight", 1, ne, 0, bias, sizeof bias);
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    assert_string_equal(a.family, "qwen2_moe");
    assert_int_equal(a.n_experts, 8);
    assert_int_equal(a.n_experts_per_tok, 2);
    assert_int_equal(a.expert_ffn_hidden, 32);
    assert_int_equal(a.shared_expert_ffn_hidden, 128);
    assert_true(a.shared_expert_gate);
    assert_true(a.layer_moe[0] && a.layer_moe[1]);
    assert_int_equal(a.layer_ffn_hidden[0], 0);
    assert_true(a.bias_qkv);
    assert_false(a.bias_o);
    assert_false(a.tied_embeddings);
}

static void test_mixtral(void **state)
{
    (void)state;
    lp_gw w;
    base_kvs(&w, "llama");
    lp_gw_kv_u32(&w, "llama.feed_forward_length", 224);
    lp_gw_kv_u32(&w, "llama.expert_count", 8);
    lp_gw_kv_u32(&w, "llama.expert_used_count", 2);
    lp_arch a;
    lp_error err = {0};
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    assert_string_equal(a.family, "mixtral");
    assert_int_equal(a.expert_ffn_hidden, 224);
    assert_true(a.norm_topk_prob);
    for (int l = 0; l < 4; l++)
        assert_true(a.layer_moe[l]);

    base_kvs(&w, "llama");
    lp_gw_kv_u32(&w, "llama.feed_forward_length", 224);
    lp_gw_kv_u32(&w, "llama.expert_count", 8);
    assert_int_equal(arch_of(&w, &a, &err), LP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "llama.expert_used_count"));
}

static void test_deepseek2_mla(void **state)
{
    (void)state;
    /* DeepSeek-V2-Lite's numbers */
    lp_gw w;
    lp_gw_init(&w, 3);
    lp_gw_kv_str(&w, "general.architecture", "deepseek2");
    lp_gw_kv_u32(&w, "deepseek2.block_count", 27);
    lp_gw_kv_u32(&w, "deepseek2.embedding_length", 2048);
    lp_gw_kv_u32(&w, "deepseek2.attention.head_count", 16);
    lp_gw_kv_u32(&w, "deepseek2.attention.head_count_kv", 16);
    lp_gw_kv_u32(&w, "deepseek2.vocab_size", 102400);
    lp_gw_kv_u32(&w, "deepseek2.context_length", 163840);
    lp_gw_kv_u32(&w, "deepseek2.feed_forward_length", 10944);
    lp_gw_kv_u32(&w, "deepseek2.attention.kv_lora_rank", 512);
    lp_gw_kv_u32(&w, "deepseek2.attention.key_length", 192);
    lp_gw_kv_u32(&w, "deepseek2.attention.value_length", 128);
    lp_gw_kv_u32(&w, "deepseek2.rope.dimension_count", 64);
    lp_gw_kv_u32(&w, "deepseek2.expert_count", 64);
    lp_gw_kv_u32(&w, "deepseek2.expert_used_count", 6);
    lp_gw_kv_u32(&w, "deepseek2.expert_shared_count", 2);
    lp_gw_kv_u32(&w, "deepseek2.expert_feed_forward_length", 1408);
    lp_gw_kv_u32(&w, "deepseek2.leading_dense_block_count", 1);
    lp_gw_kv_str(&w, "deepseek2.rope.scaling.type", "yarn");
    lp_gw_kv_f32(&w, "deepseek2.rope.scaling.factor", 40.0f);
    lp_gw_kv_u32(&w, "deepseek2.rope.scaling.original_context_length", 4096);
    lp_gw_kv_f32(&w, "deepseek2.rope.scaling.yarn_log_multiplier", 0.0707f);
    lp_arch a;
    lp_error err = {0};
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    assert_string_equal(a.family, "deepseek_v2");
    assert_true(a.mla);
    assert_int_equal(a.q_lora_rank, 0);
    assert_int_equal(a.kv_lora_rank, 512);
    assert_int_equal(a.qk_rope_head_dim, 64);
    assert_int_equal(a.qk_nope_head_dim, 128);
    assert_int_equal(a.v_head_dim, 128);
    assert_int_equal(a.head_dim, 192);
    assert_int_equal(a.rope_dim, 64);
    assert_int_equal(a.rope_layout, LP_ROPE_ADJACENT);
    assert_false(a.layer_moe[0]);
    assert_int_equal(a.layer_ffn_hidden[0], 10944);
    assert_true(a.layer_moe[1] && a.layer_moe[26]);
    assert_int_equal(a.n_shared_experts, 2);
    assert_int_equal(a.expert_ffn_hidden, 1408);
    assert_int_equal(a.rope_scaling.kind, LP_ROPE_SCALING_YARN);
    assert_true(a.rope_scaling.factor == 40.0);
    assert_int_equal(a.rope_scaling.original_ctx, 4096);
    /* mscale = 1 + 0.0707 ln 40 = 1.2608; scale = mscale^2 / sqrt(192) */
    double m = 1.0 + (double)0.0707f * log(40.0);
    assert_true(fabs(a.query_scale - m * m / sqrt(192.0)) < 1e-9);

    /* without key/value lengths the head is hidden / heads wide */
    base_kvs(&w, "deepseek2");
    lp_gw_kv_u32(&w, "deepseek2.feed_forward_length", 128);
    lp_gw_kv_u32(&w, "deepseek2.attention.kv_lora_rank", 16);
    lp_gw_kv_u32(&w, "deepseek2.rope.dimension_count", 2);
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    assert_true(a.mla);
    assert_int_equal(a.head_dim, 8);
    assert_int_equal(a.qk_rope_head_dim, 2);
    assert_int_equal(a.qk_nope_head_dim, 6);
    assert_int_equal(a.v_head_dim, 8);

    /* kv_lora_rank means nothing to other architectures */
    base_kvs(&w, "llama");
    lp_gw_kv_u32(&w, "llama.feed_forward_length", 128);
    lp_gw_kv_u32(&w, "llama.attention.kv_lora_rank", 16);
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    assert_false(a.mla);
    assert_int_equal(a.head_dim, 8);
}

static void test_gemma_windows(void **state)
{
    (void)state;
    lp_gw w;
    lp_gw_init(&w, 3);
    lp_gw_kv_str(&w, "general.architecture", "gemma2");
    lp_gw_kv_u32(&w, "gemma2.block_count", 4);
    lp_gw_kv_u32(&w, "gemma2.embedding_length", 64);
    lp_gw_kv_u32(&w, "gemma2.attention.head_count", 4);
    lp_gw_kv_u32(&w, "gemma2.attention.key_length", 32);
    lp_gw_kv_u32(&w, "gemma2.feed_forward_length", 128);
    lp_gw_kv_u32(&w, "gemma2.vocab_size", 100);
    lp_gw_kv_u32(&w, "gemma2.attention.sliding_window", 4096);
    lp_gw_kv_f32(&w, "gemma2.attn_logit_softcapping", 50.0f);
    lp_gw_kv_f32(&w, "gemma2.final_logit_softcapping", 30.0f);
    lp_arch a;
    lp_error err = {0};
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    assert_string_equal(a.family, "gemma2");
    assert_int_equal(a.layer_window[0], 4096); /* even layers slide */
    assert_int_equal(a.layer_window[1], 0);
    assert_int_equal(a.layer_window[2], 4096);
    assert_int_equal(a.sliding_window, 4096);
    assert_true(a.attn_logit_softcap == 50.0 && a.final_logit_softcap == 30.0);
    /* GGUF norms already hold 1 + w (llama.cpp's converter adds it): no second +1. */
    assert_false(a.norm_weight_plus_one);
    assert_true(a.post_attn_norm && a.post_ffn_norm);
    assert_true(fabs(a.embed_scale - 8.0) < 1e-12);
    assert_int_equal(a.ffn_kind, LP_FFN_GEGLU);
    assert_true(a.tied_embeddings);

    /* gemma3: 5 sliding, 1 global; an explicit per-layer flag array wins */
    lp_gw_init(&w, 3);
    lp_gw_kv_str(&w, "general.architecture", "gemma3");
    lp_gw_kv_u32(&w, "gemma3.block_count", 7);
    lp_gw_kv_u32(&w, "gemma3.embedding_length", 64);
    lp_gw_kv_u32(&w, "gemma3.attention.head_count", 4);
    lp_gw_kv_u32(&w, "gemma3.feed_forward_length", 128);
    lp_gw_kv_u32(&w, "gemma3.vocab_size", 100);
    lp_gw_kv_u32(&w, "gemma3.attention.sliding_window", 512);
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    for (int l = 0; l < 7; l++)
        assert_int_equal(a.layer_window[l], l == 5 ? 0 : 512);
    assert_true(a.qk_norm);
    assert_true(a.rope_local_theta == 10000.0);

    lp_gw_init(&w, 3);
    lp_gw_kv_str(&w, "general.architecture", "gemma3");
    lp_gw_kv_u32(&w, "gemma3.block_count", 3);
    lp_gw_kv_u32(&w, "gemma3.embedding_length", 64);
    lp_gw_kv_u32(&w, "gemma3.attention.head_count", 4);
    lp_gw_kv_u32(&w, "gemma3.feed_forward_length", 128);
    lp_gw_kv_u32(&w, "gemma3.vocab_size", 100);
    lp_gw_kv_u32(&w, "gemma3.attention.sliding_window", 512);
    const bool pattern[3] = {false, true, false};
    lp_gw_kv_arr_bool(&w, "gemma3.attention.sliding_window_pattern", pattern, 3);
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    assert_int_equal(a.layer_window[0], 0);
    assert_int_equal(a.layer_window[1], 512);
    assert_int_equal(a.layer_window[2], 0);
}

/* What llama.cpp's graph of each architecture hard-codes, on base_kvs plus feed_forward_length
 * (0: left out) and one more key: {general.architecture, ffn width, key (after the prefix) or
 * NULL, its value, whether it is a bool, what the description must say (arch_expect.h)}. No
 * tensors: only the metadata speaks. */
static const struct {
    const char *arch;
    uint32_t ffn;
    const char *key;
    uint32_t value;
    bool is_bool;
    const char *expected;
} FAMILY_DEFAULTS[] = {
    {"llama", 128, NULL, 0, false,
     "family=llama ffn_kind=swiglu norm_kind=rms rope_layout=adjacent"},
    {"qwen2", 128, NULL, 0, false, "family=qwen2 rope_layout=halves bias_qkv=true bias_o=false"},
    {"qwen2moe", 128, NULL, 0, false, "family=qwen2_moe bias_qkv=true"},
    {"qwen3", 128, NULL, 0, false, "family=qwen3 qk_norm=true bias_qkv=false"},
    {"qwen3moe", 128, NULL, 0, false, "family=qwen3_moe qk_norm=true"},
    /* the converter folds Gemma's +1 into the stored norm weights */
    {"gemma", 128, NULL, 0, false,
     "family=gemma ffn_kind=geglu act=gelu_tanh embed_scale=8 tied_embeddings=true"
     " norm_weight_plus_one=false post_attn_norm=false"},
    {"gemma2", 128, NULL, 0, false,
     "family=gemma2 post_attn_norm=true post_ffn_norm=true qk_norm=false"},
    {"gemma3", 128, NULL, 0, false,
     "family=gemma3 qk_norm=true post_ffn_norm=true rope_local_theta=10000"},
    {"phi2", 128, "rope.dimension_count", 4, false,
     "family=phi norm_kind=layer parallel_block=true bias_lm_head=true rope_dim=4"
     " partial_rotary=0.5 rope_layout=halves"},
    {"phi3", 128, NULL, 0, false, "family=phi3 ffn_kind=swiglu norm_kind=rms"},
    {"gpt2", 0, NULL, 0, false, /* an MLP without a width: 4 x hidden */
     "family=gpt2 pos_kind=learned pos_table_rows=2048 ffn_hidden=256 norm_kind=layer"
     " bias_qkv=true bias_mlp=true rope_dim=0"},
    {"falcon", 128, NULL, 0, false,
     "family=falcon act=gelu parallel_block=true tied_embeddings=true"},
    {"deepseek2", 128, NULL, 0, false, "family=deepseek_v2 rope_layout=adjacent mla=false"},
    {"starcoder2", 128, NULL, 0, false,
     "family=starcoder2 norm_kind=layer bias_qkv=true tied_embeddings=true"},
    {"stablelm", 128, NULL, 0, false, "family=stablelm ffn_kind=swiglu norm_kind=layer"},
    {"gptneox", 128, NULL, 0, false, "family=gpt_neox parallel_block=true parallel_two_norms=true"},
    {"gptneox", 128, "use_parallel_residual", 0, true,
     "parallel_block=false parallel_two_norms=false"},
    {"bloom", 128, NULL, 0, false, "family=bloom pos_kind=alibi embed_norm=true bias_norm=true"},
    {"olmo2", 128, NULL, 0, false,
     "family=olmo2 qk_norm_full=true no_input_norm=true post_attn_norm=true"},
    /* a dense gpt-oss keeps its sinks; the router's bias goes with the experts */
    {"gpt-oss", 128, NULL, 0, false,
     "family=gpt_oss attn_sinks=true bias_mlp=true router_bias=false"},
};

static void test_family_defaults(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof FAMILY_DEFAULTS / sizeof FAMILY_DEFAULTS[0]; i++) {
        const char *arch = FAMILY_DEFAULTS[i].arch;
        char key[128];
        lp_gw w;
        base_kvs(&w, arch);
        if (FAMILY_DEFAULTS[i].ffn) {
            snprintf(key, sizeof key, "%s.feed_forward_length", arch);
            lp_gw_kv_u32(&w, key, FAMILY_DEFAULTS[i].ffn);
        }
        const char *extra = FAMILY_DEFAULTS[i].key;
        snprintf(key, sizeof key, "%s.%s", arch, extra ? extra : "");
        if (extra && FAMILY_DEFAULTS[i].is_bool)
            lp_gw_kv_bool(&w, key, FAMILY_DEFAULTS[i].value != 0);
        else if (extra)
            lp_gw_kv_u32(&w, key, FAMILY_DEFAULTS[i].value);
        lp_arch a;
        lp_error err = {0};
        char why[256];
        if (arch_of(&w, &a, &err) != LP_OK)
            fail_msg("%s: %s", arch, err.msg);
        if (!arch_expect(&a, FAMILY_DEFAULTS[i].expected, why, sizeof why))
            fail_msg("%s (row %zu): %s", arch, i, why);
    }
}

static void test_gpt_oss(void **state)
{
    (void)state;
    lp_gw w;
    base_kvs(&w, "gpt-oss");
    lp_gw_kv_u32(&w, "gpt-oss.feed_forward_length", 96);
    lp_gw_kv_u32(&w, "gpt-oss.expert_count", 4);
    lp_gw_kv_u32(&w, "gpt-oss.expert_used_count", 2);
    lp_gw_kv_u32(&w, "gpt-oss.expert_feed_forward_length", 96);
    lp_gw_kv_u32(&w, "gpt-oss.attention.sliding_window", 128);
    static float sinks[8];
    const int64_t ne[1] = {8};
    lp_gw_tensor(&w, "blk.0.attn_sinks.weight", 1, ne, 0, sinks, sizeof sinks);
    lp_gw_tensor(&w, "blk.0.ffn_gate_inp.bias", 1, ne, 0, sinks, sizeof sinks);
    lp_gw_tensor(&w, "blk.0.ffn_up_exps.bias", 1, ne, 0, sinks, sizeof sinks);
    lp_arch a;
    lp_error err = {0};
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    assert_string_equal(a.family, "gpt_oss");
    assert_true(a.attn_sinks && a.router_bias && a.bias_mlp);
    assert_true(a.norm_topk_prob);
    assert_int_equal(a.layer_window[0], 128);
    assert_int_equal(a.layer_window[1], 0);
    assert_int_equal(a.rope_layout, LP_ROPE_HALVES);
    assert_true(a.layer_moe[3]);
}

/* mpt: convert_hf_to_gguf's MPTModel keys; max_alibi_bias 0 is a model with learned positions;
 * qk_ln shows as attn_q_norm tensors; no output.weight: tied */
static void test_mpt(void **state)
{
    (void)state;
    lp_gw w;
    base_kvs(&w, "mpt");
    lp_gw_kv_u32(&w, "mpt.feed_forward_length", 256);
    lp_gw_kv_f32(&w, "mpt.attention.max_alibi_bias", 16.0f);
    lp_gw_kv_f32(&w, "mpt.attention.clamp_kqv", 6.0f);
    static float norm[64];
    const int64_t ne[1] = {64};
    lp_gw_tensor(&w, "blk.0.attn_q_norm.weight", 1, ne, 0, norm, sizeof norm);
    lp_gw_tensor(&w, "blk.0.attn_norm.weight", 1, ne, 0, norm, sizeof norm);
    lp_arch a;
    lp_error err = {0};
    char why[256];
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    if (!arch_expect(&a, "family=mpt pos_kind=alibi alibi_max_bias=16 qkv_clip=6 qk_norm_full=true"
                         " act=gelu norm_kind=layer tied_embeddings=true bias_qkv=false"
                         " bias_norm=false ffn_hidden=256", why, sizeof why))
        fail_msg("mpt: %s", why);
    base_kvs(&w, "mpt");
    lp_gw_kv_f32(&w, "mpt.attention.max_alibi_bias", 0.0f);
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    if (!arch_expect(&a, "pos_kind=learned pos_table_rows=2048 qk_norm_full=false", why,
                     sizeof why))
        fail_msg("mpt learned: %s", why);
}

static void test_phi3_longrope(void **state)
{
    (void)state;
    lp_gw w;
    base_kvs(&w, "phi3"); /* context_length 2048 */
    lp_gw_kv_u32(&w, "phi3.feed_forward_length", 128);
    lp_gw_kv_u32(&w, "phi3.rope.scaling.original_context_length", 512);
    lp_gw_kv_f32(&w, "phi3.rope.scaling.attn_factor", 1.25f);
    lp_gw_kv_u32(&w, "phi3.attention.sliding_window", 262);
    /* head_dim 64 / 8 = 8: four rotated pairs, one factor each */
    static const float long_factors[4] = {1.5f, 3.0f, 6.5f, 12.0f};
    static const float short_factors[4] = {1.0f, 1.25f, 2.0f, 2.5f};
    const int64_t ne[1] = {4};
    lp_gw_tensor(&w, "rope_factors_long.weight", 1, ne, 0, long_factors, sizeof long_factors);
    lp_gw_tensor(&w, "rope_factors_short.weight", 1, ne, 0, short_factors, sizeof short_factors);
    lp_arch a;
    lp_error err = {0};
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    assert_int_equal(a.rope_scaling.kind, LP_ROPE_SCALING_LONGROPE);
    assert_int_equal(a.rope_scaling.original_ctx, 512);
    assert_true(a.rope_scaling.factor == 4.0); /* 2048 / 512 */
    assert_true(a.rope_scaling.attention_factor == 1.25);
    assert_int_equal(a.rope_scaling.n_factors, 4);
    for (int i = 0; i < 4; i++) {
        assert_true(a.rope_scaling.long_factor[i] == (double)long_factors[i]);
        assert_true(a.rope_scaling.short_factor[i] == (double)short_factors[i]);
    }
    for (int l = 0; l < 4; l++)
        assert_int_equal(a.layer_window[l], 262); /* every layer slides */

    /* one list without the other, a zero factor, and a wrong count are refused by name */
    base_kvs(&w, "phi3");
    lp_gw_tensor(&w, "rope_factors_long.weight", 1, ne, 0, long_factors, sizeof long_factors);
    assert_int_equal(arch_of(&w, &a, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "tensor 'rope_factors_short.weight' is missing"));
    static const float zero_factors[4] = {1.0f, 0.0f, 1.0f, 1.0f};
    base_kvs(&w, "phi3");
    lp_gw_tensor(&w, "rope_factors_long.weight", 1, ne, 0, long_factors, sizeof long_factors);
    lp_gw_tensor(&w, "rope_factors_short.weight", 1, ne, 0, zero_factors, sizeof zero_factors);
    assert_int_equal(arch_of(&w, &a, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "'rope_factors_short.weight' value 1 is 0"));
    const int64_t ne3[1] = {3};
    base_kvs(&w, "phi3");
    lp_gw_tensor(&w, "rope_factors_long.weight", 1, ne3, 0, long_factors, 3 * sizeof(float));
    lp_gw_tensor(&w, "rope_factors_short.weight", 1, ne3, 0, short_factors, 3 * sizeof(float));
    assert_int_equal(arch_of(&w, &a, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "want rope_dim / 2 = 4"));

    /* without the factor tensors: no scaling */
    base_kvs(&w, "phi3");
    lp_gw_kv_u32(&w, "phi3.feed_forward_length", 128);
    lp_gw_kv_u32(&w, "phi3.rope.scaling.original_context_length", 512);
    assert_int_equal(arch_of(&w, &a, &err), LP_OK);
    assert_int_equal(a.rope_scaling.kind, LP_ROPE_SCALING_NONE);
}

/* ---- golden ------------------------------------------------------------------------------------ */

static void test_golden_stories(void **state)
{
    (void)state;
    char path[1024], config[1024];
    lp_test_shared_path(path, sizeof path, "models/stories260K/stories260K.gguf");
    lp_test_shared_path(config, sizeof config, "models/stories260K/hf/config.json");
    lp_gguf *g;
    lp_error err = {0};
    assert_int_equal(lp_gguf_open(path, &g, &err), LP_OK);
    lp_arch a, hf;
    lp_status st = lp_arch_from_gguf(g, &a, &err);
    if (st != LP_OK)
        print_error("%s\n", err.msg);
    assert_int_equal(st, LP_OK);
    lp_gguf_close(g);
    st = lp_arch_from_hf_config(config, &hf, &err);
    if (st != LP_OK)
        print_error("%s\n", err.msg);
    assert_int_equal(st, LP_OK);

    assert_string_equal(a.family, "llama");
    assert_int_equal(a.vocab_size, 512);
    assert_int_equal(a.hidden_size, 64);
    assert_int_equal(a.n_layers, 5);
    assert_int_equal(a.n_heads, 8);
    assert_int_equal(a.n_kv_heads, 4);
    assert_int_equal(a.head_dim, 8);
    assert_int_equal(a.ffn_hidden, 172);
    assert_int_equal(a.n_ctx, 512);
    assert_true(a.rope_theta == 10000.0); /* freq_base absent: the default */
    assert_int_equal(a.rope_layout, LP_ROPE_ADJACENT);
    assert_false(a.tied_embeddings); /* the converter stored output.weight */
    assert_int_equal(a.bos_token_id, 1);
    assert_int_equal(a.eos_token_id, 2);

    /* the same model as config.json describes it, except what the formats differ in */
    assert_int_equal(hf.rope_layout, LP_ROPE_HALVES);
    assert_true(hf.tied_embeddings);
    hf.rope_layout = a.rope_layout;
    hf.tied_embeddings = a.tied_embeddings;
    memcpy(hf.name, a.name, sizeof a.name);
    memcpy(hf.source, a.source, sizeof a.source);
    hf.storage_dtype = a.storage_dtype;
    hf.head_dim_explicit = a.head_dim_explicit;
    assert_true(fabs(a.norm_eps - hf.norm_eps) < 1e-11); /* f32 in GGUF, double in JSON */
    hf.norm_eps = a.norm_eps;
    assert_memory_equal(&a, &hf, sizeof a);

    /* llama-quantize keeps the metadata: the quantized files describe the same model */
    static const char *files[3] = {"Q4_K_M", "Q6_K", "TQ2_0"};
    static const lp_dtype mostly[3] = {LP_DTYPE_Q5_0, LP_DTYPE_Q8_0, LP_DTYPE_Q4_0};
    for (int f = 0; f < 3; f++) {
        char rel[256];
        snprintf(rel, sizeof rel, "models/stories260K/quant/stories260K-%s.gguf", files[f]);
        lp_test_shared_path(path, sizeof path, rel);
        assert_int_equal(lp_gguf_open(path, &g, &err), LP_OK);
        lp_arch q;
        assert_int_equal(lp_arch_from_gguf(g, &q, &err), LP_OK);
        lp_gguf_close(g);
        assert_int_equal(q.storage_dtype, mostly[f]); /* the type holding most elements */
        q.storage_dtype = a.storage_dtype;
        memcpy(q.name, a.name, sizeof a.name);
        memcpy(q.source, a.source, sizeof a.source);
        assert_memory_equal(&a, &q, sizeof a);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "golden") == 0) {
        LP_TEST_REQUIRE_SHARED();
        const struct CMUnitTest golden[] = {cmocka_unit_test(test_golden_stories)};
        return cmocka_run_group_tests_name("gguf_arch_golden", golden, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_scalars), cmocka_unit_test(test_per_layer_arrays),
        cmocka_unit_test(test_errors),        cmocka_unit_test(test_qwen_family),
        cmocka_unit_test(test_mixtral),       cmocka_unit_test(test_deepseek2_mla),
        cmocka_unit_test(test_gemma_windows), cmocka_unit_test(test_family_defaults),
        cmocka_unit_test(test_gpt_oss),       cmocka_unit_test(test_phi3_longrope),
        cmocka_unit_test(test_mpt),
    };
    return cmocka_run_group_tests_name("gguf_arch", tests, NULL, NULL);
}
