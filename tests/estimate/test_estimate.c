/* Unit and golden tests of estimate/: exact counts, KV cache, FLOPs, fit, audits, RoPE report. */
#include "test_util.h"

#include <dirent.h>
#include <math.h>

#include <jansson.h>

#include "estimate/estimate.h"
#include "inspect/inspect.h"

#ifndef LP_EST_GOLDEN
/* A tiny Llama-style model whose every figure can be checked by hand:
 * vocab 1000, hidden 64, 4 layers, 8 query heads and 2 kv heads of 8, SwiGLU 128, RMSNorm,
 * untied. Per layer: q 64x64 + k 16x64 + v 16x64 + o 64x64 = 10,240; norms 2 x 64 = 128;
 * FFN 3 x 64 x 128 = 24,576; layer = 34,944. Total = 1000x64 (embed) + 1000x64 (lm_head) + 64
 * (final norm) + 4 x 34,944 = 267,840. */
static void tiny_arch(lp_arch *a)
{
    memset(a, 0, sizeof *a);
    snprintf(a->family, sizeof a->family, "llama");
    snprintf(a->source, sizeof a->source, "tiny.yaml");
    a->vocab_size = 1000;
    a->hidden_size = 64;
    a->n_layers = 4;
    a->n_heads = 8;
    a->n_kv_heads = 2;
    a->head_dim = 8;
    a->ffn_hidden = 128;
    a->ffn_kind = LP_FFN_SWIGLU;
    a->norm_kind = LP_NORM_RMS;
    a->final_norm = true;
    a->pos_kind = LP_POS_ROPE;
    a->rope_theta = 10000.0;
    a->partial_rotary = 1.0;
    a->rope_dim = 8;
    a->n_ctx = 256;
    a->storage_dtype = LP_DTYPE_BF16;
}

static lp_est_dtype dtype(const char *name)
{
    lp_est_dtype d;
    assert_true(lp_est_dtype_parse(name, &d));
    return d;
}

static lp_est_report *run(const lp_arch *arch, const lp_est_options *opts)
{
    lp_est_report *rep = malloc(sizeof *rep);
    assert_non_null(rep);
    lp_error err = {0};
    lp_status st = lp_estimate(arch, opts, rep, &err);
    if (st != LP_OK)
        fail_msg("lp_estimate: %s", err.msg);
    return rep;
}

static bool has_warning(const lp_est_report *rep, const char *code)
{
    for (int i = 0; i < rep->n_warnings; i++)
        if (strcmp(rep->warnings[i].code, code) == 0)
            return true;
    return false;
}

static void test_params_dense(void **state)
{
    (void)state;
    lp_arch a;
    tiny_arch(&a);
    lp_est_params *p = malloc(sizeof *p);
    lp_error err = {0};
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_OK);
    assert_int_equal(p->total, 267840);
    assert_int_equal(p->active, 267840);
    assert_int_equal(p->by_component[LP_EST_EMBED], 64000);
    assert_int_equal(p->by_component[LP_EST_LM_HEAD], 64000);
    assert_int_equal(p->by_component[LP_EST_ATTN], 4 * 10240);
    assert_int_equal(p->by_component[LP_EST_FFN], 4 * 24576);
    assert_int_equal(p->by_component[LP_EST_NORMS], 4 * 128 + 64);
    assert_int_equal(p->layers[2].params, 34944);

    /* tied: the lm_head disappears; biases on q/k/v only (Qwen2): + 64 + 16 + 16 per layer */
    a.tied_embeddings = true;
    a.bias_qkv = true;
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_OK);
    assert_int_equal(p->total, 267840 - 64000 + 4 * 96);
    /* LayerNorm with bias doubles every norm: 9 norms of 64 gain 64 each */
    a.norm_kind = LP_NORM_LAYER;
    a.bias_norm = true;
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_OK);
    assert_int_equal(p->total, 267840 - 64000 + 4 * 96 + 9 * 64);
    /* q/k norms: one head_dim vector each (Qwen3), or one per head without bias (StableLM 2) */
    int64_t before = p->total;
    a.qk_norm = true;
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_OK);
    assert_int_equal(p->total, before + 4 * 2 * (8 + 8)); /* LayerNorm here: weight and bias */
    a.qk_norm_per_head = true;
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_OK);
    assert_int_equal(p->total, before + 4 * (8 * 8 + 2 * 8));
    a.qk_norm = a.qk_norm_per_head = false;
    /* learned positions (OPT: 256 + 2 rows) */
    a.pos_kind = LP_POS_LEARNED;
    a.pos_table_rows = 258;
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_OK);
    assert_int_equal(p->by_component[LP_EST_POS_EMBED], 258 * 64);
    /* OPT-350m-style projected embeddings 32 wide (tied): the table shrinks to 1000 x 32 and
     * project_in/project_out add 2 x 32 x 64; without a final norm its 2 x 64 go */
    int64_t unprojected = p->total;
    a.embed_proj_dim = 32;
    a.final_norm = false;
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_OK);
    assert_int_equal(p->by_component[LP_EST_EMBED], 1000 * 32 + 2 * 32 * 64);
    assert_int_equal(p->total, unprojected - 64000 + 1000 * 32 + 2 * 32 * 64 - 2 * 64);
    /* untied, the lm_head is as narrow as the embedding */
    a.tied_embeddings = false;
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_OK);
    assert_int_equal(p->by_component[LP_EST_LM_HEAD], 1000 * 32);
    free(p);
}

static void test_params_moe_and_mla(void **state)
{
    (void)state;
    lp_arch a;
    tiny_arch(&a);
    a.n_experts = 4;
    a.n_experts_per_tok = 2;
    a.expert_ffn_hidden = 32;
    for (int l = 1; l < 4; l++) /* layer 0 dense, like DeepSeek's first_k_dense_replace */
        a.layer_moe[l] = true;
    lp_est_params *p = malloc(sizeof *p);
    lp_error err = {0};
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_OK);
    /* MoE layer: attn 10,240 + norms 128 + router 4x64 = 256 + experts 4 x 6,144 = 24,576 */
    assert_int_equal(p->layers[1].params, 10240 + 128 + 256 + 24576);
    assert_int_equal(p->layers[1].active_params, 10240 + 128 + 256 + 2 * 6144);
    assert_int_equal(p->layers[0].params, 34944);
    assert_int_equal(p->total, 128064 + 34944 + 3 * 35200);
    assert_int_equal(p->active, 128064 + 34944 + 3 * 22912);
    assert_int_equal(p->by_component[LP_EST_EXPERTS], 3 * 24576);
    assert_int_equal(p->active_by_component[LP_EST_EXPERTS], 3 * 12288);
    /* one shared expert of 48 (Qwen style) with its sigmoid gate 1 x 64 */
    a.shared_expert_ffn_hidden = 48;
    a.shared_expert_gate = true;
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_OK);
    assert_int_equal(p->by_component[LP_EST_SHARED_EXPERTS], 3 * (3 * 64 * 48 + 64));
    assert_int_equal(p->active - p->active_by_component[LP_EST_SHARED_EXPERTS],
                     128064 + 34944 + 3 * 22912);

    /* gpt-oss: router bias (4), expert biases (2 x 32 + 64 per expert) and one sink per head */
    a.shared_expert_ffn_hidden = 0;
    a.shared_expert_gate = false;
    a.router_bias = true;
    a.attn_sinks = true;
    a.bias_mlp = true;
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_OK);
    assert_int_equal(p->layers[1].params, 10240 + 8 + 128 + 256 + 4 + 4 * (6144 + 128));
    assert_int_equal(p->layers[1].active_params, 10240 + 8 + 128 + 256 + 4 + 2 * (6144 + 128));
    a.router_bias = a.attn_sinks = a.bias_mlp = false;

    /* MLA without q compression: q 64 -> 8 x (8 + 4); kv_a 64 -> 16 + 4; kv_a norm 16;
     * kv_b 16 -> 8 x (8 + 8); o 8 x 8 -> 64 */
    tiny_arch(&a);
    a.mla = true;
    a.kv_lora_rank = 16;
    a.qk_rope_head_dim = 4;
    a.qk_nope_head_dim = 8;
    a.v_head_dim = 8;
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_OK);
    int64_t attn = 64 * 96 + 64 * 20 + 16 + 16 * 128 + 64 * 64;
    assert_int_equal(p->by_component[LP_EST_ATTN], 4 * attn);
    /* with q_lora_rank 24: q_a 64 -> 24, its norm 24, q_b 24 -> 96 */
    a.q_lora_rank = 24;
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_OK);
    assert_int_equal(p->by_component[LP_EST_ATTN], 4 * (attn - 64 * 96 + 64 * 24 + 24 + 24 * 96));
    /* MTP: reported apart, never in the total */
    int64_t total = p->total;
    a.n_mtp_layers = 1;
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_OK);
    assert_int_equal(p->total, total);
    assert_int_equal(p->mtp, p->layers[3].params + 3 * 64 + 64 * 128);
    free(p);
}

static void test_kv_cache(void **state)
{
    (void)state;
    lp_arch a;
    tiny_arch(&a);
    lp_error err = {0};
    uint64_t bytes;
    lp_est_dtype bf16 = dtype("bf16");
    /* GQA: 2 kv heads x (8 + 8) x 2 bytes = 64 B per layer and token; 4 layers */
    assert_int_equal(lp_est_kv_bytes(&a, &bf16, 2, 100, &bytes, &err), LP_OK);
    assert_int_equal(bytes, 64 * 4 * 100 * 2);
    /* sliding windows on layers 1 and 3 (Gemma 2 style alternation): capped at 16 tokens */
    a.layer_window[1] = 16;
    a.layer_window[3] = 16;
    assert_int_equal(lp_est_kv_bytes(&a, &bf16, 2, 100, &bytes, &err), LP_OK);
    assert_int_equal(bytes, 64 * (100 + 16 + 100 + 16) * 2);
    /* a window larger than the sequence does not cap */
    assert_int_equal(lp_est_kv_bytes(&a, &bf16, 1, 10, &bytes, &err), LP_OK);
    assert_int_equal(bytes, 64 * 4 * 10);
    /* per-layer kv heads (OpenELM style) */
    memset(a.layer_window, 0, sizeof a.layer_window);
    a.layer_kv_heads[0] = 1;
    a.layer_kv_heads[3] = 4;
    assert_int_equal(lp_est_kv_bytes(&a, &bf16, 1, 1, &bytes, &err), LP_OK);
    assert_int_equal(bytes, 32 * (1 + 2 + 2 + 4));
    /* q8_0 pads each head row of 8 values to one 32-value block of 34 bytes */
    lp_est_dtype q8 = dtype("q8_0");
    memset(a.layer_kv_heads, 0, sizeof a.layer_kv_heads);
    assert_int_equal(lp_est_kv_bytes(&a, &q8, 1, 1, &bytes, &err), LP_OK);
    assert_int_equal(bytes, 4 * (2 * 2 * 34));
    /* MLA: one latent of kv_lora + rope = 20 values per layer, not 2 x heads x head_dim */
    a.mla = true;
    a.kv_lora_rank = 16;
    a.qk_rope_head_dim = 4;
    a.qk_nope_head_dim = 8;
    a.v_head_dim = 8;
    lp_est_dtype f16 = dtype("f16");
    assert_int_equal(lp_est_kv_bytes(&a, &f16, 3, 7, &bytes, &err), LP_OK);
    assert_int_equal(bytes, 20 * 2 * 4 * 7 * 3);
    /* overflow is an error, not a wrap */
    assert_int_equal(lp_est_kv_bytes(&a, &f16, (int64_t)1 << 40, (int64_t)1 << 40, &bytes, &err),
                     LP_ERR_RANGE);
}

static void test_report_kv_fields(void **state)
{
    (void)state;
    lp_arch a;
    tiny_arch(&a);
    a.layer_window[0] = 8;
    lp_est_options o;
    lp_est_options_init(&o);
    o.batch = 3;
    o.seq = 50;
    o.kv_dtype = dtype("fp8");
    o.kv_dtype_set = true;
    lp_est_report *rep = run(&a, &o);
    assert_int_equal(rep->kv.bytes_per_token, 4 * 32);
    assert_int_equal(rep->kv.bytes_per_token_full_layers, 3 * 32);
    assert_int_equal(rep->kv.bytes, 3 * 32 * (8 + 50 * 3));
    assert_int_equal(rep->params.layers[0].kv_tokens, 8);
    assert_int_equal(rep->params.layers[0].kv_bytes, 3 * 32 * 8);
    /* defaults: seq = n_ctx, batch 1, weights bf16 from the config, KV = weights */
    lp_est_options_init(&o);
    free(rep);
    rep = run(&a, &o);
    assert_int_equal(rep->seq, 256);
    assert_int_equal(rep->batch, 1);
    assert_true(rep->seq_defaulted && rep->batch_defaulted && rep->kv_dtype_defaulted);
    assert_string_equal(rep->weight_dtypes[0].name, "bf16");
    assert_string_equal(rep->kv_dtype.name, "bf16");
    free(rep);
}

static void test_weight_bytes(void **state)
{
    (void)state;
    lp_arch a;
    tiny_arch(&a);
    lp_error err = {0};
    uint64_t bytes, experts;
    lp_est_dtype d = dtype("bf16");
    assert_int_equal(lp_est_weight_bytes(&a, &d, &bytes, &experts, &err), LP_OK);
    assert_int_equal(bytes, 2 * 267840);
    assert_int_equal(experts, 0);
    /* q8_0: matrices in 34-byte blocks of 32; norms (9 x 64 values) stay f32 */
    int64_t vectors = 9 * 64, matrices = 267840 - vectors;
    d = dtype("q8_0");
    assert_int_equal(lp_est_weight_bytes(&a, &d, &bytes, NULL, &err), LP_OK);
    assert_int_equal(bytes, (uint64_t)(matrices / 32 * 34 + vectors * 4));
    /* q4_k: every row (64 or 128 values) pads to one 256-value block of 144 bytes.
     * Rows: embed 1000 + lm_head 1000 + per layer q 64 + k 16 + v 16 + o 64 + gate 128 + up 128
     * + down 64 = 480 */
    d = dtype("q4_k");
    assert_int_equal(lp_est_weight_bytes(&a, &d, &bytes, NULL, &err), LP_OK);
    assert_int_equal(bytes, (uint64_t)((2000 + 4 * 480) * 144 + vectors * 4));
    /* int4: half a byte per weight, 1-D tensors in f16 */
    d = dtype("int4");
    assert_int_equal(lp_est_weight_bytes(&a, &d, &bytes, NULL, &err), LP_OK);
    assert_int_equal(bytes, (uint64_t)(matrices / 2 + vectors * 2));
    assert_false(lp_est_dtype_parse("int3", &d));
    assert_false(lp_est_dtype_parse("bool", &d));
}

static void test_flops(void **state)
{
    (void)state;
    lp_arch a;
    tiny_arch(&a);
    lp_est_options o;
    lp_est_options_init(&o);
    o.seq = 10;
    lp_est_report *rep = run(&a, &o);
    /* decode at context 10: projections 2 x 10,240 x 4; FFN 2 x 24,576 x 4; lm_head 2 x 64,000;
     * scores 2 x 8 heads x (8 + 8) = 256 per key x 10 keys x 4 layers */
    assert_true(rep->flops.decode_attn_proj == 81920.0);
    assert_true(rep->flops.decode_ffn == 196608.0);
    assert_true(rep->flops.decode_lm_head == 128000.0);
    assert_true(rep->flops.decode_attn_scores == 10240.0);
    assert_true(rep->flops.decode_per_token == 416768.0);
    /* prefill of 10 tokens: causal pairs 55, dense 100 */
    assert_true(rep->flops.prefill_attn_scores_causal == 256.0 * 55 * 4);
    assert_true(rep->flops.prefill_attn_scores_dense == 256.0 * 100 * 4);
    assert_true(rep->flops.prefill == 10.0 * (81920 + 196608 + 128000) + 256.0 * 55 * 4);
    assert_true(rep->flops.training == 3.0 * rep->flops.prefill);
    free(rep);

    /* a window of 4 on every layer: prefill pairs 4x5/2 + 6x4 = 34, decode sees 4 keys */
    for (int l = 0; l < 4; l++)
        a.layer_window[l] = 4;
    o.batch = 2;
    rep = run(&a, &o);
    assert_true(rep->flops.prefill_attn_scores_causal == 2.0 * 256 * 34 * 4);
    assert_true(rep->flops.decode_attn_scores == 256.0 * 4 * 4);
    free(rep);

    /* MoE: only the top-2 experts and the router count */
    tiny_arch(&a);
    a.n_experts = 4;
    a.n_experts_per_tok = 2;
    a.expert_ffn_hidden = 32;
    for (int l = 0; l < 4; l++)
        a.layer_moe[l] = true;
    rep = run(&a, &o);
    assert_true(rep->flops.decode_ffn == 4.0 * 2 * (256 + 2 * 6144));
    free(rep);
}

static void test_roofline(void **state)
{
    (void)state;
    lp_arch a;
    tiny_arch(&a);
    lp_est_options o;
    lp_est_options_init(&o);
    o.seq = 10;
    assert_true(lp_est_hw_parse("1G,1M", &o.hw));
    o.hw_set = true;
    lp_est_report *rep = run(&a, &o);
    /* decode: 416,768 FLOP vs weights 535,680 B + KV 10 x 256 B read: memory-bound at 1 MB/s */
    double bytes = 2.0 * 267840 + 10 * 256;
    assert_true(fabs(rep->flops.decode_bytes - bytes) < 1e-6);
    assert_false(rep->flops.decode_compute_bound);
    assert_true(fabs(rep->flops.decode_seconds - bytes / 1e6) < 1e-9);
    assert_true(fabs(rep->flops.decode_intensity - 416768.0 / bytes) < 1e-9);
    free(rep);
    assert_true(lp_est_hw_parse("h100-sxm", &o.hw));
    assert_true(o.hw.flops_per_s == 989e12 && o.hw.bytes_per_s == 3.35e12);
    assert_false(lp_est_hw_parse("h100", &o.hw));
    assert_false(lp_est_hw_parse("1G,", &o.hw));
    assert_false(lp_est_hw_parse("-1,5", &o.hw));
}

static void test_fit(void **state)
{
    (void)state;
    lp_arch a;
    tiny_arch(&a);
    lp_est_options o;
    lp_est_options_init(&o);
    o.batch = 2;
    o.seq = 300;
    lp_est_report *rep = run(&a, &o);
    /* budget = exactly the memory of batch 2 x 1000 tokens: the search must land on 1000 */
    uint64_t at_1000, at_1001;
    assert_true(lp_est_memory_at(&a, rep, 2, 1000, &at_1000));
    assert_true(lp_est_memory_at(&a, rep, 2, 1001, &at_1001));
    assert_true(at_1001 > at_1000);
    free(rep);
    o.limits.budget = at_1000;
    rep = run(&a, &o);
    assert_int_equal(rep->fit_max_seq, 1000);
    /* largest batch at seq 300: fits at the answer, not one more */
    uint64_t m;
    assert_true(rep->fit_max_batch > 2);
    assert_true(lp_est_memory_at(&a, rep, rep->fit_max_batch, 300, &m) && m <= o.limits.budget);
    assert_true(lp_est_memory_at(&a, rep, rep->fit_max_batch + 1, 300, &m) && m > o.limits.budget);
    free(rep);
    /* a budget below the weights fits nothing */
    o.limits.budget = 1000;
    rep = run(&a, &o);
    assert_int_equal(rep->fit_max_seq, 0);
    assert_int_equal(rep->fit_max_batch, 0);
    free(rep);
    /* every layer windowed: the KV cache stops growing, so context is unbounded */
    for (int l = 0; l < 4; l++)
        a.layer_window[l] = 16;
    o.limits.budget = at_1000;
    rep = run(&a, &o);
    assert_int_equal(rep->fit_max_seq, -1);
    free(rep);
}

static void test_gates(void **state)
{
    (void)state;
    lp_arch a;
    tiny_arch(&a);
    lp_est_options o;
    lp_est_options_init(&o);
    o.seq = 100;
    o.limits.max_kv = 100 * 256;     /* exactly the KV cache: not exceeded */
    o.limits.max_memory = 2 * 267840; /* the weights alone: exceeded once KV is added */
    lp_est_report *rep = run(&a, &o);
    assert_int_equal(rep->kv.bytes, 100 * 256);
    assert_false(rep->gate_kv_exceeded);
    assert_true(rep->gate_memory_exceeded);
    free(rep);
    o.limits.max_kv = 100 * 256 - 1;
    rep = run(&a, &o);
    assert_true(rep->gate_kv_exceeded);
    free(rep);
}

static void test_warnings(void **state)
{
    (void)state;
    lp_arch a;
    tiny_arch(&a);
    a.vocab_size = 1024;
    lp_est_options o;
    lp_est_options_init(&o);
    lp_est_report *rep = run(&a, &o);
    assert_int_equal(rep->n_warnings, 0); /* a clean config is quiet */
    free(rep);

    a.vocab_size = 1000;
    a.n_kv_heads = 3;
    a.head_dim = 16;
    a.head_dim_explicit = true;
    a.sliding_window = 512;
    a.layer_window[0] = 512;
    a.tied_embeddings = true;
    o.lm_head_tensor_present = 1;
    o.seq = 300;
    rep = run(&a, &o);
    assert_true(has_warning(rep, "vocab_not_multiple_of_64"));
    assert_true(has_warning(rep, "kv_heads_not_dividing"));
    assert_true(has_warning(rep, "head_dim_times_heads_not_hidden"));
    assert_true(has_warning(rep, "sliding_window_exceeds_context"));
    assert_true(has_warning(rep, "tied_but_lm_head_present"));
    assert_true(has_warning(rep, "seq_exceeds_context"));
    free(rep);

    /* RoPE scaling: YaRN x4 from 64 to 256 is consistent; to 128 it is not */
    tiny_arch(&a);
    a.vocab_size = 1024;
    a.rope_scaling.kind = LP_ROPE_SCALING_YARN;
    a.rope_scaling.factor = 4;
    a.rope_scaling.original_ctx = 64;
    o.lm_head_tensor_present = -1;
    o.seq = 0;
    rep = run(&a, &o);
    assert_false(has_warning(rep, "rope_scaling_inconsistent"));
    free(rep);
    a.n_ctx = 128;
    rep = run(&a, &o);
    assert_true(has_warning(rep, "rope_scaling_inconsistent"));
    free(rep);
    /* llama3 scaling only stretches low frequencies: n_ctx > original is enough */
    a.rope_scaling.kind = LP_ROPE_SCALING_LLAMA3;
    a.rope_scaling.factor = 8;
    a.rope_scaling.low_freq_factor = 1;
    a.rope_scaling.high_freq_factor = 4;
    rep = run(&a, &o);
    assert_false(has_warning(rep, "rope_scaling_inconsistent"));
    free(rep);
    a.n_ctx = 64;
    rep = run(&a, &o);
    assert_true(has_warning(rep, "rope_scaling_inconsistent"));
    free(rep);
}

static void test_rope_report(void **state)
{
    (void)state;
    lp_arch a;
    tiny_arch(&a);
    /* rope_dim 8, theta 10^4: wavelengths 2 pi x 10^(4 i / 4) = 6.28, 62.8, 628, 6283 */
    lp_est_options o;
    lp_est_options_init(&o);
    lp_est_report *rep = run(&a, &o);
    assert_true(rep->rope.present);
    assert_int_equal(rep->rope.n_pairs, 4);
    assert_true(fabs(rep->rope.freqs[2].wavelength - 628.3185307) < 1e-4);
    assert_int_equal(rep->rope.trained_ctx, 256);
    assert_int_equal(rep->rope.pairs_no_rotation, 2);
    assert_int_equal(rep->rope.pairs_changed, 0);
    free(rep);
    /* linear x4 from 256 to 1024: every wavelength x4 (25.1 ... 25133): still 2 above 1024 */
    a.rope_scaling.kind = LP_ROPE_SCALING_LINEAR;
    a.rope_scaling.factor = 4;
    a.rope_scaling.original_ctx = 256;
    a.n_ctx = 1024;
    rep = run(&a, &o);
    assert_int_equal(rep->rope.target_ctx, 1024);
    assert_int_equal(rep->rope.pairs_changed, 4);
    assert_true(fabs(rep->rope.freqs[1].scaled_wavelength - 4 * 62.83185307) < 1e-4);
    assert_int_equal(rep->rope.pairs_no_rotation_scaled, 2);
    free(rep);
    /* llama3 (low 1, high 4, original 256): wavelength 6.28 and 62.8 < 256/4 stay, 628 and
     * 6283 > 256 are stretched x4 */
    a.rope_scaling.kind = LP_ROPE_SCALING_LLAMA3;
    a.rope_scaling.low_freq_factor = 1;
    a.rope_scaling.high_freq_factor = 4;
    rep = run(&a, &o);
    assert_int_equal(rep->rope.pairs_changed, 2);
    assert_true(fabs(rep->rope.freqs[3].scaled_wavelength - 4 * 6283.185307) < 1e-3);
    assert_true(fabs(rep->rope.freqs[0].scaled_wavelength - 6.283185307) < 1e-6);
    free(rep);
}

static void test_range_errors(void **state)
{
    (void)state;
    lp_arch a;
    tiny_arch(&a);
    a.vocab_size = (int64_t)1 << 40;
    a.hidden_size = (int64_t)1 << 30;
    a.head_dim = 0;
    lp_est_params *p = malloc(sizeof *p);
    lp_error err = {0};
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_ERR_RANGE);
    assert_non_null(strstr(err.msg, "overflows"));
    tiny_arch(&a);
    a.n_layers = 0;
    assert_int_equal(lp_est_count_params(&a, p, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "tiny.yaml"));
    free(p);
    /* batch x seq whose KV cache cannot be counted in 64 bits */
    tiny_arch(&a);
    lp_est_options o;
    lp_est_options_init(&o);
    o.batch = (int64_t)1 << 40;
    o.seq = (int64_t)1 << 40;
    lp_est_report *rep = malloc(sizeof *rep);
    assert_int_equal(lp_estimate(&a, &o, rep, &err), LP_ERR_RANGE);
    assert_non_null(strstr(err.msg, "--batch"));
    free(rep);
}

static void test_json_keys(void **state)
{
    (void)state;
    lp_arch a;
    tiny_arch(&a);
    lp_est_options o;
    lp_est_options_init(&o);
    lp_est_report *rep = run(&a, &o);
    json_t *doc = lp_est_to_json(&a, rep, 0);
    assert_non_null(doc);
    json_t *params = json_object_get(doc, "params");
    assert_int_equal(json_integer_value(json_object_get(params, "total")), 267840);
    assert_int_equal(json_integer_value(json_object_get(params, "active")), 267840);
    json_t *by = json_object_get(params, "by_component");
    json_int_t sum = 0;
    const char *key;
    json_t *value;
    json_object_foreach(by, key, value) sum += json_integer_value(value);
    assert_int_equal(sum, 267840);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "memory"),
                                                        "weights_bytes")),
                     2 * 267840);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(doc, "kv_cache"),
                                                        "bytes_per_token")),
                     256);
    assert_true(json_is_array(json_object_get(doc, "warnings")));
    assert_true(json_is_real(json_object_get(json_object_get(doc, "flops"), "prefill")));
    json_decref(doc);
    free(rep);
}

#endif

/* ---- golden: every real config in ../shared/configs ------------------------------------- */
#ifdef LP_EST_GOLDEN

static void test_shared_configs(void **state)
{
    (void)state;
    char dir[1024];
    lp_test_shared_path(dir, sizeof dir, "configs");
    DIR *d = opendir(dir);
    assert_non_null(d);
    int checked = 0, failures = 0;
    lp_arch *arch = malloc(sizeof *arch);
    lp_est_params *p = malloc(sizeof *p);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char config[1400], truth_path[1400];
        snprintf(config, sizeof config, "%s/%s/config.json", dir, e->d_name);
        snprintf(truth_path, sizeof truth_path, "%s/%s/truth.json", dir, e->d_name);
        json_error_t jerr;
        json_t *truth = json_load_file(truth_path, 0, &jerr);
        if (!truth)
            continue;
        lp_error err = {0};
        if (lp_arch_from_hf_config(config, arch, &err) != LP_OK) {
            printf("%s: %s\n", e->d_name, err.msg);
            failures++;
        } else if (lp_est_count_params(arch, p, &err) != LP_OK) {
            printf("%s: %s\n", e->d_name, err.msg);
            failures++;
        } else {
            json_int_t want = json_integer_value(json_object_get(truth, "params_total"));
            json_t *active = json_object_get(truth, "params_active");
            int64_t sum = 0;
            for (int c = 0; c < LP_EST_COMPONENT_COUNT; c++)
                sum += p->by_component[c];
            if (p->total != want || sum != p->total) {
                printf("%s: total %lld, truth %lld (breakdown sums to %lld)\n", e->d_name,
                       (long long)p->total, (long long)want, (long long)sum);
                failures++;
            }
            if (json_is_integer(active) && p->active != json_integer_value(active)) {
                printf("%s: active %lld, truth %lld\n", e->d_name, (long long)p->active,
                       (long long)json_integer_value(active));
                failures++;
            }
            if (!json_is_integer(active) && p->active != p->total) {
                printf("%s: dense model with active %lld != total %lld\n", e->d_name,
                       (long long)p->active, (long long)p->total);
                failures++;
            }
            checked++;
        }
        json_decref(truth);
    }
    closedir(d);
    free(arch);
    free(p);
    printf("checked %d shared configs, %d mismatches\n", checked, failures);
    assert_true(checked >= 10);
    assert_int_equal(failures, 0);
}

/* Built a second time as test_estimate_golden: the ../shared part, skipped when it is absent. */
int main(void)
{
    LP_TEST_REQUIRE_SHARED();
    const struct CMUnitTest golden[] = {cmocka_unit_test(test_shared_configs)};
    return cmocka_run_group_tests_name("estimate golden", golden, NULL, NULL);
}
#else
int main(void)
{
    const struct CMUnitTest unit[] = {
        cmocka_unit_test(test_params_dense),     cmocka_unit_test(test_params_moe_and_mla),
        cmocka_unit_test(test_kv_cache),         cmocka_unit_test(test_report_kv_fields),
        cmocka_unit_test(test_weight_bytes),     cmocka_unit_test(test_flops),
        cmocka_unit_test(test_roofline),         cmocka_unit_test(test_fit),
        cmocka_unit_test(test_gates),            cmocka_unit_test(test_warnings),
        cmocka_unit_test(test_rope_report),      cmocka_unit_test(test_range_errors),
        cmocka_unit_test(test_json_keys),
    };
    return cmocka_run_group_tests_name("estimate", unit, NULL, NULL);
}
#endif
