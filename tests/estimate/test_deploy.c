/* Deployments: per-device weights, KV cache and totals, concurrency and communication under
 * vLLM's placement, each figure derived by hand beside its check (the rules are in
 * estimate/deploy.c and estimate/README.md); the refusals of impossible splits; the predicted
 * times that trace and bench print; --hw local's measurement.
 *
 * Common to the serving figures: an H100 80GB reports 81,559 MiB = 85,520,809,984 B; vLLM's
 * default --gpu-memory-utilization 0.9 leaves floor(0.9 x that) = 76,968,728,985 B per device.
 * Activations (estimate.c's model, per device): min(batch x seq, 2048) tokens x (2h + heads d +
 * kv_heads 2d + 2 x FFN rows held) x 2 bytes (bf16), plus 4 x vocab bytes of logits on the last
 * stage. */
#include "test_util.h"

#include <math.h>
#include <unistd.h>

#include "estimate/estimate.h"
#include "inspect/inspect.h"

#define H100_USABLE 76968728985ull

static lp_arch *card(const char *name)
{
    lp_arch *a = malloc(sizeof *a);
    assert_non_null(a);
    lp_error err = {0};
    if (lp_arch_load(name, a, &err) != LP_OK)
        fail_msg("%s: %s", name, err.msg);
    return a;
}

static lp_est_dtype dtype(const char *name)
{
    lp_est_dtype d;
    assert_true(lp_est_dtype_parse(name, &d));
    return d;
}

/* Options of a serving audit: weights and KV at the given types, one sequence of `len` tokens
 * (seq and max-model-len alike), on H100s. */
static lp_est_options serving(const char *weights, const char *kv, int64_t len)
{
    lp_est_options o;
    lp_est_options_init(&o);
    o.weight_dtypes[0] = dtype(weights);
    o.n_weight_dtypes = 1;
    o.kv_dtype = dtype(kv);
    o.kv_dtype_set = true;
    o.seq = len;
    o.deploy.max_model_len = len;
    assert_true(lp_est_hw_parse("h100-sxm", &o.hw));
    o.hw_set = true;
    return o;
}

static lp_est_report *run(const lp_arch *arch, const lp_est_options *opts)
{
    lp_est_report *rep = malloc(sizeof *rep);
    assert_non_null(rep);
    lp_error err = {0};
    if (lp_estimate(arch, opts, rep, &err) != LP_OK)
        fail_msg("lp_estimate: %s", err.msg);
    assert_true(rep->deploy.present);
    return rep;
}

static void expect_refusal(const lp_arch *arch, const lp_est_options *opts, const char *word)
{
    lp_est_report *rep = malloc(sizeof *rep);
    assert_non_null(rep);
    lp_error err = {0};
    lp_status st = lp_estimate(arch, opts, rep, &err);
    if (st == LP_OK || !strstr(err.msg, word))
        fail_msg("want a refusal naming '%s', got status %d: %s", word, (int)st, err.msg);
    free(rep);
}

/* Llama-3.1-405B, fp8 weights and KV, TP 8 on one node of H100s at 128k context.
 * h 16384, 126 layers, 128 heads / 8 kv heads of 128, SwiGLU 53248, vocab 128256 (already a
 * multiple of 64: 16,032 rows per rank), untied. Per rank and layer:
 *   q 16 heads x 128 = 2048 rows x 16384 = 33,554,432; k, v one kv head each 128 x 16384 =
 *   2 x 2,097,152; o 16384 x 2048 = 33,554,432; gate, up, down 3 x 6656 x 16384 = 327,155,712;
 *   two norms, whole, 32,768: 398,491,648; x 126 = 50,209,947,648
 *   embedding and head 2 x 16,032 x 16,384 = 525,336,576; final norm 16,384
 *   = 50,735,300,608 values, 1 byte each (fp8). (x 8 = the model's 405,853,388,800 plus the
 *   norms each rank repeats, 7 x (126 x 32,768 + 16,384) = 29,016,064.)
 * KV per token: 126 layers x 1 head x (128 + 128) x 1 B = 32,256; x 131,072 = 4,227,858,432.
 * Activations: 2048 x (32768 + 16 x 128 + 256 + 2 x 6656) x 2 = 198,180,864 + logits 513,024.
 * KV budget: 76,968,728,985 - 50,735,300,608 - 198,693,888 = 26,034,734,489 B; one sequence
 * needs 4,227,858,432: 6.158 -> 6 concurrent sequences. With 16-token blocks a block holds
 * 16 x 32,256 = 516,096 B: 50,445 blocks; a sequence takes 8,192 of them: 6 again. */
static void test_llama_405b_tp8(void **state)
{
    (void)state;
    lp_arch *a = card("llama-3.1-405b");
    lp_est_options o = serving("fp8", "fp8", 131072);
    o.deploy.tp = 8;
    o.deploy.block_size = 16;
    lp_est_report *rep = run(a, &o);
    const lp_est_deploy *d = &rep->deploy;
    assert_int_equal(d->devices, 8);
    assert_int_equal(d->n_devices, 1);
    assert_int_equal(d->vocab_per_rank, 16032);
    const lp_est_device *dev = &d->device[0];
    assert_int_equal(dev->n_devices, 8);
    assert_int_equal(dev->kv_heads, 1);
    assert_int_equal(dev->weights_bytes, 50735300608ull);
    assert_int_equal(dev->kv_bytes_per_token, 32256);
    assert_int_equal(dev->kv_cache_bytes, 4227858432ull);
    assert_int_equal(dev->activations_bytes, 198693888);
    assert_int_equal(dev->total_bytes, 50735300608ull + 4227858432ull + 198693888ull);
    assert_int_equal(d->usable_bytes, H100_USABLE);
    assert_int_equal(dev->kv_budget_bytes, 26034734489ull);
    assert_int_equal(d->kv_blocks, 50445);
    assert_int_equal(d->max_concurrent_sequences, 6);
    assert_true(dev->fits);
    /* TP 8: two all-reduces of 16,384 x 2 B per layer, each sending 2 x 7/8 x 32,768 = 57,344 B
     * from a device: a decode step of one token sends 126 x 2 x 57,344 = 14,450,688 B */
    assert_true(d->tp_allreduce_bytes == 32768.0 && d->tp_allreduces_per_layer == 2);
    assert_true(fabs(dev->decode.link_bytes - 14450688.0) < 1e-3);
    /* decode reads every weight and the sequence's whole cache: 50.7 GB + 4.2 GB over 3.35 TB/s */
    assert_true(fabs(dev->decode.bytes - (50735300608.0 + 4227858432.0)) < 1.0);
    assert_int_equal(dev->decode.bound, LP_EST_BOUND_MEMORY);
    assert_true(fabs(dev->decode.memory_seconds - dev->decode.bytes / 3.35e12) < 1e-12);
    free(rep);
    free(a);
}

/* TP 16 (two nodes): 128 / 16 = 8 query heads per rank, but only 8 kv heads for 16 ranks, so
 * each rank keeps one whole kv head, held by two ranks (vLLM's num_kv_head_replicas 2): the KV
 * cache per device does not shrink from TP 8. Per rank and layer: q, o 2 x 1024 x 16384 =
 * 33,554,432; k, v 2 x 128 x 16384 = 4,194,304; FFN 3 x 3328 x 16384 = 163,577,856; norms
 * 32,768: 201,359,360; x 126 = 25,371,279,360; embedding and head 2 x 8016 x 16384 =
 * 262,668,288; final norm 16,384: 25,633,964,032 B in fp8. KV per token 32,256 as at TP 8.
 * Activations 2048 x (32768 + 8 x 128 + 256 + 2 x 3328) x 2 + 513,024 = 167,236,608. Budget
 * 76,968,728,985 - 25,633,964,032 - 167,236,608 = 51,167,528,345: 12.10 -> 12 sequences. */
static void test_llama_405b_tp16_kv_replicated(void **state)
{
    (void)state;
    lp_arch *a = card("llama-3.1-405b");
    lp_est_options o = serving("fp8", "fp8", 131072);
    o.deploy.tp = 16;
    lp_est_report *rep = run(a, &o);
    const lp_est_device *dev = &rep->deploy.device[0];
    assert_int_equal(rep->deploy.kv_head_replicas, 2);
    assert_int_equal(dev->kv_heads, 1);
    assert_int_equal(dev->weights_bytes, 25633964032ull);
    assert_int_equal(dev->kv_bytes_per_token, 32256);
    assert_int_equal(dev->kv_cache_bytes, 4227858432ull);
    assert_int_equal(dev->activations_bytes, 167236608);
    assert_int_equal(dev->kv_budget_bytes, 51167528345ull);
    assert_int_equal(rep->deploy.max_concurrent_sequences, 12);
    free(rep);
    free(a);
}

/* PP 2 x TP 8: 126 layers split 63 + 63 (vLLM's get_pp_indices). Stage 0 holds layers 0-62 and
 * the embedding: 63 x 398,491,648 + 262,668,288 = 25,367,642,112 B; stage 1 layers 63-125, the
 * final norm and the head: + 262,668,288 + 16,384 = 25,367,658,496. KV per token and device:
 * 63 x 256 = 16,128 B, one 131,072-token sequence 2,113,929,216. Activations: stage 0
 * 198,180,864 (no logits), stage 1 198,693,888. Budgets: 51,402,906,009 and 51,402,376,601;
 * the smaller decides: 51,402,376,601 / 2,113,929,216 = 24.32 -> 24 sequences. A token's
 * hand-off between the stages is its hidden state and residual, 2 x 16,384 x 2 = 65,536 B. */
static void test_llama_405b_pp2_tp8(void **state)
{
    (void)state;
    lp_arch *a = card("llama-3.1-405b");
    lp_est_options o = serving("fp8", "fp8", 131072);
    o.deploy.tp = 8;
    o.deploy.pp = 2;
    lp_est_report *rep = run(a, &o);
    const lp_est_deploy *d = &rep->deploy;
    assert_int_equal(d->devices, 16);
    assert_int_equal(d->n_devices, 2);
    assert_int_equal(d->device[0].first_layer, 0);
    assert_int_equal(d->device[0].n_layers, 63);
    assert_int_equal(d->device[1].first_layer, 63);
    assert_true(d->device[0].holds_embedding && !d->device[0].holds_lm_head);
    assert_true(d->device[1].holds_lm_head && !d->device[1].holds_embedding);
    assert_int_equal(d->device[0].weights_bytes, 25367642112ull);
    assert_int_equal(d->device[1].weights_bytes, 25367658496ull);
    assert_int_equal(d->device[0].kv_bytes_per_token, 16128);
    assert_int_equal(d->device[1].kv_cache_bytes, 2113929216ull);
    assert_int_equal(d->device[0].activations_bytes, 198180864);
    assert_int_equal(d->device[1].activations_bytes, 198693888);
    assert_int_equal(d->device[0].kv_budget_bytes, 51402906009ull);
    assert_int_equal(d->device[1].kv_budget_bytes, 51402376601ull);
    assert_int_equal(d->max_concurrent_sequences, 24);
    assert_true(d->pp_handoff_bytes == 65536.0);
    free(rep);
    free(a);
}

/* Mixtral-8x22B's config.json (mistral-community/Mixtral-8x22B-v0.1, as in cli_estimate.sh). */
static const char MIXTRAL_8X22B[] =
    "{\"architectures\":[\"MixtralForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":1,"
    "\"eos_token_id\":2,\"hidden_act\":\"silu\",\"hidden_size\":6144,\"initializer_range\":0.02,"
    "\"intermediate_size\":16384,\"max_position_embeddings\":65536,\"model_type\":\"mixtral\","
    "\"num_attention_heads\":48,\"num_experts_per_tok\":2,\"num_hidden_layers\":56,"
    "\"num_key_value_heads\":8,\"num_local_experts\":8,\"rms_norm_eps\":1e-05,\"rope_theta\":"
    "1000000,\"router_aux_loss_coef\":0.001,\"router_jitter_noise\":0.0,\"torch_dtype\":"
    "\"bfloat16\",\"transformers_version\":\"4.40.0.dev0\",\"vocab_size\":32000}";

static lp_arch *mixtral(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/deploy_mixtral_%d.json", lp_test_tmp_dir(), (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(MIXTRAL_8X22B, f);
    fclose(f);
    lp_arch *a = malloc(sizeof *a);
    assert_non_null(a);
    lp_error err = {0};
    if (lp_arch_from_hf_config(path, a, &err) != LP_OK)
        fail_msg("%s", err.msg);
    unlink(path);
    return a;
}

/* Mixtral-8x22B, bf16, TP 8 with EP 8 (vLLM -tp 8 --enable-expert-parallel): each rank holds one
 * of the 8 experts whole. h 6144, 56 layers, 48 heads / 8 kv heads of 128, experts of 16384,
 * top-2, vocab 32000 (4,000 rows per rank). Per rank and layer: q 6 heads 768 x 6144 =
 * 4,718,592; k, v 2 x 128 x 6144 = 1,572,864; o 4,718,592; norms 12,288; router 8 x 6144 =
 * 49,152 (whole); one expert 3 x 16384 x 6144 = 301,989,888: 313,061,376; x 56 =
 * 17,531,437,056; embedding and head 2 x 4,000 x 6,144 = 49,152,000; final norm 6,144:
 * 17,580,595,200 values = 35,161,190,400 B. KV per token 56 x 1 x 256 x 2 = 28,672 B; a 65,536-
 * token sequence 1,879,048,192. Activations 2048 x (12288 + 768 + 256 + 2 x 16384) x 2 + 4 x
 * 32,000 = 188,871,680. Budget 76,968,728,985 - 35,161,190,400 - 188,871,680 = 41,618,666,905:
 * 22.15 -> 22 sequences. Without --ep each rank holds an eighth of every expert: the same
 * bytes, but the MoE output is all-reduced instead of sent to and from the experts: with EP a
 * token's 2 experts get and return 2 x 2 x 6144 x 2 x 7/8 = 43,008 B, sent from the 8 TP ranks
 * in turn, 5,376 B per device per layer. */
static void test_mixtral_8x22b_ep8(void **state)
{
    (void)state;
    lp_arch *a = mixtral();
    lp_est_options o = serving("bf16", "bf16", 65536);
    o.deploy.tp = 8;
    o.deploy.ep = 8;
    lp_est_report *rep = run(a, &o);
    const lp_est_deploy *d = &rep->deploy;
    assert_int_equal(d->dp, 1);
    assert_int_equal(d->moe_tp, 1);
    const lp_est_device *dev = &d->device[0];
    assert_int_equal(dev->experts, 1);
    assert_int_equal(dev->weights_bytes, 35161190400ull);
    assert_int_equal(dev->kv_bytes_per_token, 28672);
    assert_int_equal(dev->kv_cache_bytes, 1879048192ull);
    assert_int_equal(dev->activations_bytes, 188871680);
    assert_int_equal(dev->kv_budget_bytes, 41618666905ull);
    assert_int_equal(d->max_concurrent_sequences, 22);
    assert_true(d->ep_alltoall_bytes == 43008.0);
    /* per decode token: attention all-reduce 57 x ... : 56 x (2 x 7/8 x 12,288 + 43,008 / 8) */
    assert_true(fabs(dev->decode.link_bytes - 56.0 * (21504.0 + 5376.0)) < 1e-6);
    uint64_t with_ep = dev->weights_bytes;
    free(rep);
    o.deploy.ep = 0;
    rep = run(a, &o);
    assert_int_equal(rep->deploy.moe_tp, 8);
    assert_int_equal(rep->deploy.device[0].weights_bytes, with_ep);
    assert_true(fabs(rep->deploy.device[0].decode.link_bytes - 56.0 * 2 * 21504.0) < 1e-6);
    free(rep);
    free(a);
}

/* DeepSeek-V3, fp8 weights, bf16 KV, on 8 H200s as data parallel attention with EP 8 (vLLM -dp 8
 * --enable-expert-parallel): tp 1, so every device holds the whole MLA attention, the latent
 * cache and the shared expert (replicated), and 256 / 8 = 32 routed experts per MoE layer.
 * h 7168, 61 layers (3 dense), 128 heads, q_lora 1536, kv_lora 512, rope 64, nope 128, v 128.
 *   attention per layer: q_a 1536 x 7168 = 11,010,048; its norm 1,536; q_b 128 x 192 x 1536 =
 *   37,748,736; kv_a 576 x 7168 = 4,128,768; its norm 512; kv_b 128 x 256 x 512 = 16,777,216;
 *   o 7168 x 16384 = 117,440,512: 187,107,328; block norms 14,336
 *   dense layer: + 3 x 7168 x 18432 = 396,361,728: 583,483,392; x 3 = 1,750,450,176
 *   MoE layer: router 256 x 7168 = 1,835,008 + 256 score biases; 32 experts x 3 x 7168 x 2048 =
 *   1,409,286,144; shared expert 44,040,192: 1,642,283,264; x 58 = 95,252,429,312
 *   embedding and head 2 x 129,280 x 7,168 = 1,853,358,080; final norm 7,168
 *   = 98,856,244,736 B. KV: the 576-value latent x 2 B x 61 layers = 70,272 B per token,
 *   2,302,672,896 for 32,768 tokens. Activations 2048 x (14336 + 128 x 192 + 128 x 320 +
 *   2 x 18432) x 2 + 4 x 129,280 = 478,667,776. An H200 reports 143,771 MiB: 0.9 x that =
 *   135,679,338,086 B; budget 36,344,425,574: 15.78 -> 15 sequences per replica, 8 replicas. */
static void test_deepseek_v3_ep8(void **state)
{
    (void)state;
    lp_arch *a = card("deepseek-v3");
    lp_est_options o = serving("fp8", "bf16", 32768);
    assert_true(lp_est_hw_parse("h200", &o.hw));
    o.deploy.dp = 8;
    o.deploy.ep = 8;
    lp_est_report *rep = run(a, &o);
    const lp_est_deploy *d = &rep->deploy;
    assert_int_equal(d->tp, 1);
    assert_int_equal(d->devices, 8);
    const lp_est_device *dev = &d->device[0];
    assert_int_equal(dev->experts, 32);
    assert_int_equal(dev->weights_bytes, 98856244736ull);
    assert_int_equal(dev->kv_bytes_per_token, 70272);
    assert_int_equal(dev->kv_cache_bytes, 2302672896ull);
    assert_int_equal(dev->activations_bytes, 478667776);
    assert_int_equal(d->usable_bytes, 135679338086ull);
    assert_int_equal(dev->kv_budget_bytes, 36344425574ull);
    assert_int_equal(d->max_concurrent_sequences, 15);
    free(rep);
    /* --ep 8 alone means the same: vLLM's expert parallelism spans tp x dp */
    o.deploy.dp = 0;
    rep = run(a, &o);
    assert_int_equal(rep->deploy.dp, 8);
    assert_int_equal(rep->deploy.device[0].weights_bytes, 98856244736ull);
    free(rep);
    /* TP 8 with EP 8 instead: the latent stays whole on every rank (70,272 B per token), while
     * q_b, kv_b and o split by heads and the shared expert by rows */
    o.deploy.tp = 8;
    rep = run(a, &o);
    assert_int_equal(rep->deploy.device[0].kv_bytes_per_token, 70272);
    free(rep);
    free(a);
}

/* Qwen3-30B-A3B, bf16, TP 4 (no EP: every expert split 4 ways). h 2048, 48 layers, 32 heads /
 * 4 kv heads of 128 (head_dim given), 128 experts of 768, top-8, vocab 151936 (37,984 rows per
 * rank). Per rank and layer: q 8 heads 1024 x 2048 = 2,097,152; k, v 2 x 128 x 2048 = 524,288;
 * o 2,097,152; q and k norms (one 128 vector each, whole) 256; block norms 4,096; router
 * 128 x 2048 = 262,144; experts 128 x 3 x 192 x 2048 = 150,994,944: 155,980,032; x 48 =
 * 7,487,041,536; embedding and head 2 x 37,984 x 2,048 = 155,582,464; final norm 2,048:
 * 7,642,626,048 values = 15,285,252,096 B. KV per token 48 x 1 x 256 x 2 = 24,576 B; 40,960
 * tokens (the trained context) 1,006,632,960. Activations 2048 x (4096 + 1024 + 256 + 2 x
 * 8 x 768 / 4) x 2 + 4 x 151,936 = 35,210,752. Budget 61,648,266,137: 61.24 -> 61. */
static void test_qwen3_30b_a3b_tp4(void **state)
{
    (void)state;
    lp_arch *a = card("qwen3-30b-a3b");
    lp_est_options o = serving("bf16", "bf16", 40960);
    o.deploy.tp = 4;
    lp_est_report *rep = run(a, &o);
    const lp_est_device *dev = &rep->deploy.device[0];
    assert_int_equal(rep->deploy.moe_tp, 4);
    assert_int_equal(dev->experts, 128);
    assert_int_equal(dev->weights_bytes, 15285252096ull);
    assert_int_equal(dev->kv_bytes_per_token, 24576);
    assert_int_equal(dev->kv_cache_bytes, 1006632960ull);
    assert_int_equal(dev->activations_bytes, 35210752);
    assert_int_equal(dev->kv_budget_bytes, 61648266137ull);
    assert_int_equal(rep->deploy.max_concurrent_sequences, 61);
    free(rep);
    free(a);
}

/* gpt-oss-20b, bf16, TP 2. h 2880, 24 layers alternating a 128-token window and full attention,
 * 64 heads / 8 kv heads of 64, sinks, q/k/v/o biases, 32 experts of 2880 with biases, top-4,
 * router bias, vocab 201088 (100,544 rows per rank). Per rank and layer:
 *   q 32 heads 2048 x 2880 = 5,898,240 + bias 2,048; k, v 4 heads 2 x (256 x 2880 + 256) =
 *   1,475,072; o 2880 x 2048 = 5,898,240 + its whole bias 2,880; 32 sinks: 13,276,512
 *   norms 5,760; router 32 x 2880 + 32 = 92,192
 *   experts split 2 ways: 32 x (3 x 1440 x 2880 + 2 x 1440 + 2880) = 398,315,520
 *   = 411,689,984; x 24 = 9,880,559,616; embedding and head 2 x 100,544 x 2,880 =
 *   579,133,440; final norm 2,880: 10,459,695,936 values = 20,919,391,872 B (x 2 = the model's
 *   20,914,757,184 plus 4,634,688 repeated: per layer the o bias, norms, router and expert down
 *   biases, 192,992, x 24, and the final norm).
 * KV per token and layer 4 heads x 128 x 2 B = 1,024; a 131,072-token sequence holds 131,072
 * tokens in the 12 full layers and 128 in the 12 windowed ones: 12 x 1,024 x 131,200 =
 * 1,612,185,600 B. Activations 2048 x (5760 + 2048 + 512 + 2 x 4 x 2880 / 2) x 2 + 4 x 201,088 =
 * 82,068,992. Budget 76,968,728,985 - 20,919,391,872 - 82,068,992 = 55,967,268,121: 34.72 -> 34
 * sequences. */
static void test_gpt_oss_20b_tp2(void **state)
{
    (void)state;
    lp_arch *a = card("gpt-oss-20b");
    lp_est_options o = serving("bf16", "bf16", 131072);
    o.deploy.tp = 2;
    o.deploy.block_size = 16; /* 131,072 and 128 are whole blocks: the same bytes */
    lp_est_report *rep = run(a, &o);
    const lp_est_device *dev = &rep->deploy.device[0];
    assert_int_equal(dev->weights_bytes, 20919391872ull);
    assert_int_equal(dev->kv_bytes_per_token, 24 * 1024);
    assert_int_equal(dev->kv_cache_bytes, 1612185600ull);
    assert_int_equal(rep->deploy.kv_bytes_per_sequence, 1612185600ull);
    assert_int_equal(dev->activations_bytes, 82068992);
    assert_int_equal(dev->kv_budget_bytes, 55967268121ull);
    assert_int_equal(rep->deploy.max_concurrent_sequences, 34);
    free(rep);
    free(a);
}

/* Splits that cannot be made are refused with one message naming what does not divide. */
static void test_refusals(void **state)
{
    (void)state;
    lp_arch *a = card("llama-3.1-405b");
    lp_est_options o = serving("bf16", "bf16", 8192);
    o.deploy.tp = 3;
    expect_refusal(a, &o, "128 attention heads");
    o.deploy.tp = 32; /* divides the heads, but 32 ranks for 8 kv heads: 4 replicas, fine */
    lp_est_report *rep = run(a, &o);
    assert_int_equal(rep->deploy.kv_head_replicas, 4);
    free(rep);
    o.deploy.tp = 1;
    o.deploy.pp = 127;
    expect_refusal(a, &o, "126 layers");
    o.deploy.pp = 0;
    o.deploy.ep = 8;
    expect_refusal(a, &o, "no experts");
    o.deploy.ep = 0;
    o.deploy.tp = 8;
    o.deploy.devices = 12;
    expect_refusal(a, &o, "not a multiple");
    free(a);
    a = mixtral();
    o.deploy.devices = 0;
    o.deploy.ep = 3;
    o.deploy.tp = 0;
    expect_refusal(a, &o, "8 experts");
    o.deploy.ep = 4;
    o.deploy.tp = 8; /* vLLM's EP spans all of tp x dp = 8 ranks */
    expect_refusal(a, &o, "tp x dp = 8");
    free(a);
}

/* Without a device view nothing changes; memory unknown leaves serving open; a device that does
 * not fit has no budget; the gates apply to the busiest device. */
static void test_defaults_and_gates(void **state)
{
    (void)state;
    lp_arch *a = card("llama-3.1-405b");
    lp_est_options o;
    lp_est_options_init(&o);
    lp_est_report *rep = malloc(sizeof *rep);
    assert_non_null(rep);
    lp_error err = {0};
    assert_int_equal(lp_estimate(a, &o, rep, &err), LP_OK);
    assert_false(rep->deploy.present);
    free(rep);
    o = serving("bf16", "bf16", 8192);
    o.hw_set = false;
    o.deploy.tp = 8;
    rep = run(a, &o);
    assert_false(rep->deploy.memory_known);
    free(rep);
    /* bf16 at TP 8: 2 x 50,735,300,608 B per device, more than an 80 GB H100 */
    o = serving("bf16", "bf16", 8192);
    o.deploy.tp = 8;
    o.limits.max_memory = 101470601216ull; /* exactly the weights: exceeded once KV is added */
    rep = run(a, &o);
    assert_int_equal(rep->deploy.device[0].weights_bytes, 101470601216ull);
    assert_false(rep->deploy.device[0].fits);
    assert_int_equal(rep->deploy.device[0].kv_budget_bytes, 0);
    assert_int_equal(rep->deploy.max_concurrent_sequences, 0);
    assert_true(rep->gate_memory_exceeded);
    /* the single-device total is far above, but the gate is per device */
    o.limits.max_memory = rep->deploy.device[0].total_bytes;
    free(rep);
    rep = run(a, &o);
    assert_false(rep->gate_memory_exceeded);
    json_t *doc = lp_est_to_json(a, rep, 0);
    assert_non_null(doc);
    json_t *devices = json_object_get(doc, "devices");
    assert_int_equal(json_array_size(devices), 1);
    json_t *dev = json_array_get(devices, 0);
    assert_int_equal(json_integer_value(json_object_get(dev, "weights_bytes")), 101470601216);
    assert_non_null(json_object_get(dev, "kv_cache_bytes"));
    assert_non_null(json_object_get(dev, "total_bytes"));
    assert_int_equal(json_integer_value(json_object_get(dev, "pp_stage")), 0);
    assert_true(json_is_integer(json_object_get(json_object_get(doc, "serving"),
                                                "max_concurrent_sequences")));
    json_decref(doc);
    free(rep);
    free(a);
}

/* The times trace and bench print: one device, a prefill of T tokens and a decode step at
 * context T. The tiny Llama of test_estimate.c (267,840 parameters, 416,768 FLOPs per decoded
 * token at context 10; 2 x 64,000 of them the head) at f32 on 1 GFLOP/s and 1 MB/s:
 *   prefill 10 tokens with the head for the last one only: 10 x (81,920 + 196,608) + 128,000 +
 *   attention 256 x 55 x 4 = 2,969,600 FLOPs; bytes 4 x 267,840 weights + 10 x 512 KV written
 *   = 1,076,480: 1.0765 s, memory-bound.
 *   decode: 416,768 FLOPs; 1,071,360 + 10 x 512 KV read = 1,076,480 bytes: memory-bound. */
static void test_predict_times(void **state)
{
    (void)state;
    lp_arch a;
    memset(&a, 0, sizeof a);
    lp_arch_init(&a);
    snprintf(a.family, sizeof a.family, "llama");
    a.vocab_size = 1000;
    a.hidden_size = 64;
    a.n_layers = 4;
    a.n_heads = 8;
    a.n_kv_heads = 2;
    a.head_dim = 8;
    a.ffn_hidden = 128;
    a.ffn_kind = LP_FFN_SWIGLU;
    a.n_ctx = 256;
    lp_error err = {0};
    assert_int_equal(lp_arch_finish(&a, &err), LP_OK);
    lp_est_hw hw;
    assert_true(lp_est_hw_parse("1G,1M", &hw));
    lp_est_dtype f32 = dtype("f32");
    lp_est_times t;
    assert_int_equal(lp_est_predict_times(&a, &f32, 10, true, &hw, &t, &err), LP_OK);
    assert_true(t.prefill_flops == 2969600.0);
    assert_true(fabs(t.prefill_bytes - 1076480.0) < 1e-6);
    assert_false(t.prefill_compute_bound);
    assert_true(fabs(t.prefill_seconds - 1.07648) < 1e-9);
    assert_true(t.decode_flops == 416768.0);
    assert_true(fabs(t.decode_bytes - 1076480.0) < 1e-6);
    /* every position's logits: 9 x 128,000 more */
    assert_int_equal(lp_est_predict_times(&a, &f32, 10, false, &hw, &t, &err), LP_OK);
    assert_true(t.prefill_flops == 2969600.0 + 9 * 128000.0);
    assert_int_equal(lp_est_predict_times(&a, &f32, 0, true, &hw, &t, &err), LP_ERR_USAGE);
}

/* --hw local on a small read: positive, finite figures and the machine's memory. What they are
 * depends on the machine; that they are measured (not 0, not a constant) is what is checked. */
static void test_measure_local(void **state)
{
    (void)state;
    lp_est_hw hw;
    lp_error err = {0};
    assert_int_equal(lp_est_hw_measure(1, 16u << 20, &hw, &err), LP_OK);
    assert_true(isfinite(hw.flops_per_s) && hw.flops_per_s > 1e8);
    assert_true(isfinite(hw.bytes_per_s) && hw.bytes_per_s > 1e7);
    assert_true(hw.memory_bytes > (64u << 20));
    assert_non_null(strstr(hw.label, "measured"));
    printf("# local: %.1f GFLOP/s, %.1f GB/s (1 thread, 16 MiB read)\n", hw.flops_per_s * 1e-9,
           hw.bytes_per_s * 1e-9);
}

/* The streaming-read yardstick on 2 threads (its barrier and per-thread clocks), on a buffer of
 * its own and on the caller's: a positive, finite rate, the caller's bytes unchanged; a read
 * too small to split into 128-byte steps per thread is refused, naming it. */
static void test_read_bandwidth(void **state)
{
    (void)state;
    double bps = 0.0;
    lp_error err = {0};
    assert_int_equal(lp_est_read_bandwidth(2, 8u << 20, &bps, &err), LP_OK);
    assert_true(isfinite(bps) && bps > 1e7);
    assert_int_equal(lp_est_read_bandwidth(2, 200, &bps, &err), LP_ERR_RANGE);
    assert_non_null(strstr(err.msg, "200 bytes"));
    /* over the caller's buffer, from an odd address (aligned inside it), never past its end
     * (the sanitizer build would see an over-read); it is read, never written */
    size_t n = (4u << 20) + 64;
    unsigned char *buf = malloc(n + 64);
    assert_non_null(buf);
    memset(buf, 7, n + 64);
    bps = 0.0;
    assert_int_equal(lp_est_read_bandwidth_of(2, buf + 3, n - 3, 2, &bps, &err), LP_OK);
    assert_true(isfinite(bps) && bps > 1e7);
    for (size_t i = 0; i < n + 64; i++)
        assert_int_equal(buf[i], 7); /* read only */
    assert_int_equal(lp_est_read_bandwidth_of(2, buf + 3, 250, 0, &bps, &err), LP_ERR_RANGE);
    assert_non_null(strstr(err.msg, "250 bytes"));
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_405b_tp8),
        cmocka_unit_test(test_read_bandwidth),
        cmocka_unit_test(test_llama_405b_tp16_kv_replicated),
        cmocka_unit_test(test_llama_405b_pp2_tp8),
        cmocka_unit_test(test_mixtral_8x22b_ep8),
        cmocka_unit_test(test_deepseek_v3_ep8),
        cmocka_unit_test(test_qwen3_30b_a3b_tp4),
        cmocka_unit_test(test_gpt_oss_20b_tp2),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_defaults_and_gates),
        cmocka_unit_test(test_predict_times),
        cmocka_unit_test(test_measure_local),
    };
    return cmocka_run_group_tests_name("estimate deploy", tests, NULL, NULL);
}
