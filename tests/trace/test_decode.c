/* The KV cache and generation: incremental decoding (a prefix's prefill, then one token at a
 * time) against one full prefill, for every family the reference forward writes, past sliding
 * windows, with f32/f16/bf16/q8_0 caches; greedy generation against the float64 reference's
 * argmax chain; seeded sampling; the cache's bytes against lp_est_kv_bytes; the injected faults. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <math.h>
#include <unistd.h>

#include "estimate/estimate.h"
#include "trace/leak/leak.h"
#include "ref_forward.h"
#include "store_test_util.h"
#include "trace/store/store.h"
#include "trace/trace.h"

/* Logits and the last layer's residual stream by absolute position. */
typedef struct keep {
    int64_t n, V, H, L;
    float *logits; /* [n, V] */
    float *resid;  /* [n, H] of the last layer */
} keep;

static bool keep_want(void *ctx, const lp_site *site)
{
    const keep *k = ctx;
    return site->batch == 0 && (site->kind == LP_SITE_LOGITS ||
                                (site->kind == LP_SITE_RESID && site->layer == k->L - 1));
}

static lp_status keep_observe(void *ctx, const lp_site *site, const lp_view *v, lp_error *err)
{
    keep *k = ctx;
    (void)err;
    bool lg = site->kind == LP_SITE_LOGITS;
    int64_t w = lg ? k->V : k->H;
    for (int64_t r = 0; r < v->rows; r++) {
        assert_true(v->row0 + r < k->n);
        memcpy((lg ? k->logits : k->resid) + (v->row0 + r) * w, v->data + r * v->stride,
               (size_t)w * sizeof(float));
    }
    return LP_OK;
}

static void keep_init(keep *k, const lp_arch *a, int64_t n)
{
    k->n = n;
    k->V = a->vocab_size;
    k->H = a->hidden_size;
    k->L = a->n_layers;
    k->logits = calloc((size_t)(n * k->V), sizeof(float));
    k->resid = calloc((size_t)(n * k->H), sizeof(float));
    assert_non_null(k->logits);
    assert_non_null(k->resid);
}

static void keep_free(keep *k)
{
    free(k->logits);
    free(k->resid);
}

static double max_abs_diff(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m))
            m = isnan(d) ? (double)INFINITY : d;
    }
    return m;
}

static void full_prefill(const lp_model *model, const int32_t *ids, int64_t T, keep *k)
{
    keep_init(k, lp_model_arch(model), T);
    lp_observer obs = {k, keep_want, keep_observe};
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.observer = &obs;
    lp_batch b = lp_batch_single(ids, T);
    lp_error err = {0};
    if (lp_forward(model, &b, &opts, &err) != LP_OK)
        fail_msg("%s", err.msg);
}

/* Prefill of `prefix` tokens, then one at a time, into a cache of dtype; int8: the steps'
 * one-row products with int8 activations (lp_forward_opts.int8_activations). */
static void incremental_as(const lp_model *model, const int32_t *ids, int64_t T, int64_t prefix,
                           lp_dtype dtype, lp_kv_fault fault, bool int8, keep *k)
{
    keep_init(k, lp_model_arch(model), T);
    lp_observer obs = {k, keep_want, keep_observe};
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.observer = &obs;
    opts.int8_activations = int8;
    lp_kv_cache *kv;
    lp_error err = {0};
    if (lp_kv_cache_create(model, T, dtype, &opts, fault, &kv, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(lp_forward_cached(model, kv, ids, prefix, &opts, &err), LP_OK);
    for (int64_t t = prefix; t < T; t++)
        if (lp_forward_cached(model, kv, ids + t, 1, &opts, &err) != LP_OK)
            fail_msg("%s", err.msg);
    assert_int_equal(lp_kv_cache_len(kv), T);
    /* one more does not fit */
    assert_int_equal(lp_forward_cached(model, kv, ids, 1, &opts, &err), LP_ERR_RANGE);
    lp_kv_cache_destroy(kv);
}

static void incremental(const lp_model *model, const int32_t *ids, int64_t T, int64_t prefix,
                        lp_dtype dtype, lp_kv_fault fault, keep *k)
{
    incremental_as(model, ids, T, prefix, dtype, fault, false, k);
}

typedef struct decode_case {
    const char *name;
    ref_config cfg;
    int64_t T, prefix;
} decode_case;

/* Windows of 3..5 with T well past them: the rings wrap several times. */
static const decode_case cases[] = {
    {"llama-gqa", {.family = REF_LLAMA, .vocab = 83, .hidden = 32, .n_layers = 2, .n_heads = 4,
                   .n_kv_heads = 2, .head_dim = 8, .ffn = 56, .eps = 1e-6, .theta = 10000,
                   .scale = 0.25}, 21, 5},
    {"qwen2", {.family = REF_LLAMA, .vocab = 83, .hidden = 32, .n_layers = 2, .n_heads = 4,
               .n_kv_heads = 2, .head_dim = 8, .ffn = 56, .eps = 1e-6, .theta = 1000000,
               .qkv_bias = true, .scale = 0.2}, 15, 1},
    {"qwen3", {.family = REF_LLAMA, .vocab = 73, .hidden = 32, .n_layers = 2, .n_heads = 4,
               .n_kv_heads = 2, .head_dim = 16, .ffn = 40, .eps = 1e-6, .theta = 1000000,
               .qk_norm = true, .scale = 0.2}, 14, 4},
    {"mistral-swa", {.family = REF_LLAMA, .vocab = 71, .hidden = 32, .n_layers = 2, .n_heads = 4,
                     .n_kv_heads = 1, .head_dim = 8, .ffn = 44, .eps = 1e-5, .theta = 10000,
                     .window = 4, .scale = 0.25}, 19, 6},
    {"gpt2", {.family = REF_GPT2, .vocab = 97, .hidden = 48, .n_layers = 2, .n_heads = 4,
              .n_kv_heads = 4, .head_dim = 12, .ffn = 192, .n_positions = 64, .eps = 1e-5,
              .tied = true, .scale = 0.15}, 17, 3},
    {"gemma2-swa", {.family = REF_GEMMA2, .vocab = 89, .hidden = 32, .n_layers = 3, .n_heads = 4,
                    .n_kv_heads = 1, .head_dim = 16, .ffn = 48, .eps = 1e-6, .theta = 10000,
                    .tied = true, .window = 5, .query_pre_attn_scalar = 24, .attn_softcap = 5.0,
                    .final_softcap = 3.0, .scale = 0.2}, 18, 2},
    {"gemma3-swa", {.family = REF_GEMMA3, .vocab = 67, .hidden = 32, .n_layers = 6, .n_heads = 4,
                    .n_kv_heads = 2, .head_dim = 16, .ffn = 40, .eps = 1e-6, .theta = 1000000,
                    .tied = true, .window = 3, .sliding_pattern = 3, .local_theta = 10000,
                    .query_pre_attn_scalar = 16, .qk_norm = true, .scale = 0.2}, 16, 7},
    {"mixtral", {.family = REF_MIXTRAL, .vocab = 101, .hidden = 32, .n_layers = 2, .n_heads = 4,
                 .n_kv_heads = 2, .head_dim = 8, .ffn = 40, .eps = 1e-5, .theta = 10000,
                 .n_experts = 4, .top_k = 2, .scale = 0.2}, 13, 4},
    {"gemma", {.family = REF_GEMMA, .vocab = 79, .hidden = 32, .n_layers = 2, .n_heads = 4,
               .n_kv_heads = 1, .head_dim = 16, .ffn = 48, .eps = 1e-6, .theta = 10000,
               .tied = true, .scale = 0.2}, 12, 3},
    /* MPT: ALiBi on 5 heads with clip_qkv, qk_ln and biases (the slopes see cached keys) */
    {"mpt", {.family = REF_MPT, .vocab = 79, .hidden = 30, .n_layers = 2, .n_heads = 5,
             .n_kv_heads = 5, .head_dim = 6, .ffn = 60, .eps = 1e-5, .alibi = true,
             .alibi_max = 16, .qkv_bias = true, .qk_norm = true, .qkv_clip = 0.3,
             .logit_scale = 0.5, .tied = true, .scale = 0.3}, 15, 4},
    /* MLA: the cache holds [latent | k_rope]; V2-Lite's plain q, V2's q_lora and group routing,
     * V3's sigmoid router, and YaRN with mscale (test_moe's shapes) */
    {"dsv2-lite", {.family = REF_DEEPSEEK, .vocab = 89, .hidden = 32, .n_layers = 3, .n_heads = 3,
                   .n_kv_heads = 3, .head_dim = 14, .rope_dim = 4, .ffn = 44, .eps = 1e-6,
                   .theta = 10000, .rope_adjacent = true, .kv_lora = 12, .v_dim = 9,
                   .first_dense = 1, .n_experts = 6, .top_k = 2, .expert_ffn = 14, .n_shared = 2,
                   .scale = 0.2}, 17, 5},
    {"dsv2-yarn", {.family = REF_DEEPSEEK, .vocab = 89, .hidden = 32, .n_layers = 2, .n_heads = 3,
                   .n_kv_heads = 3, .head_dim = 14, .rope_dim = 6, .ffn = 44, .eps = 1e-6,
                   .theta = 10000, .rope_adjacent = true, .kv_lora = 12, .v_dim = 9,
                   .first_dense = 1, .n_experts = 6, .top_k = 2, .expert_ffn = 14, .n_shared = 2,
                   .yarn_factor = 4, .yarn_orig = 8, .yarn_mscale = 0.9, .yarn_mscale_all = 0.7,
                   .scale = 0.3}, 14, 1},
    {"dsv2", {.family = REF_DEEPSEEK, .vocab = 77, .hidden = 32, .n_layers = 3, .n_heads = 4,
              .n_kv_heads = 4, .head_dim = 10, .rope_dim = 6, .ffn = 36, .eps = 1e-6,
              .theta = 10000, .rope_adjacent = true, .q_lora = 10, .kv_lora = 14, .v_dim = 11,
              .first_dense = 1, .n_experts = 6, .top_k = 3, .expert_ffn = 12, .n_shared = 1,
              .n_groups = 3, .topk_groups = 2, .routed_scaling = 1.5, .scale = 0.2}, 15, 4},
    {"dsv3", {.family = REF_DEEPSEEK, .vocab = 67, .hidden = 32, .n_layers = 3, .n_heads = 2,
              .n_kv_heads = 2, .head_dim = 12, .rope_dim = 4, .ffn = 40, .eps = 1e-6,
              .theta = 10000, .rope_adjacent = true, .q_lora = 12, .kv_lora = 10, .v_dim = 12,
              .first_dense = 1, .n_experts = 8, .top_k = 3, .expert_ffn = 10, .n_shared = 1,
              .n_groups = 4, .topk_groups = 2, .routed_scaling = 2.5, .v3 = true,
              .norm_topk = true, .scale = 0.2}, 16, 3},
    /* gpt-oss: sinks, the rolling cache on layers 0 and 2 (window 4) beside the full layer 1,
     * YaRN, the clamped experts */
    {"gpt-oss", {.family = REF_GPT_OSS, .vocab = 97, .hidden = 36, .n_layers = 3, .n_heads = 4,
                 .n_kv_heads = 2, .head_dim = 10, .ffn = 20, .eps = 1e-5, .theta = 150000,
                 .n_experts = 5, .top_k = 2, .norm_topk = true, .window = 4, .yarn_factor = 4,
                 .yarn_orig = 64, .n_ctx = 256, .swiglu_limit = 0.4, .scale = 0.2}, 19, 3},
};

static void case_tokens(int32_t *ids, int64_t T, int64_t vocab)
{
    uint64_t s = 777;
    for (int64_t t = 0; t < T; t++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        ids[t] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
}

static void remove_dir(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static lp_model *open_case(const decode_case *dc, ref_model *m, char *dir, size_t size)
{
    assert_true(ref_model_random(&dc->cfg, 0xdec0de + (uint64_t)dc->cfg.family, m));
    snprintf(dir, size, "%s/decode_%s_%ld", lp_test_tmp_dir(), dc->name, (long)getpid());
    assert_true(ref_model_write_hf_as(m, dir, LP_DTYPE_F32));
    lp_model *model;
    lp_error err = {0};
    if (lp_model_open(dir, &model, &err) != LP_OK)
        fail_msg("%s: %s", dc->name, err.msg);
    return model;
}

/* The case's model and its T tokens (ids holds at least T). */
static lp_model *open_case_tokens(const decode_case *dc, ref_model *m, char *dir, size_t size,
                                  int32_t *ids)
{
    case_tokens(ids, dc->T, dc->cfg.vocab);
    return open_case(dc, m, dir, size);
}

/* f32 cache: incremental equals prefill within F32_TOL (summation order differs: the new row's
 * GEMM has one row). f16/bf16/q8_0 caches round K and V: their figures are printed and bounded
 * loosely, and must differ from f32's (the rounding is really applied). */
#define F32_TOL 2e-5

static void test_decode_equals_prefill(void **state)
{
    const decode_case *dc = *state;
    ref_model m;
    char dir[512];
    int32_t ids[64];
    lp_model *model = open_case_tokens(dc, &m, dir, sizeof dir, ids);
    keep full;
    full_prefill(model, ids, dc->T, &full);
    static const lp_dtype dtypes[] = {LP_DTYPE_F32, LP_DTYPE_F16, LP_DTYPE_BF16, LP_DTYPE_Q8_0};
    static const double tol[] = {F32_TOL, 2e-2, 1.5e-1, 1.5e-1};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        keep inc;
        incremental(model, ids, dc->T, dc->prefix, dtypes[d], LP_KV_FAULT_NONE, &inc);
        double dl = max_abs_diff(full.logits, inc.logits, dc->T * full.V);
        double dr = max_abs_diff(full.resid, inc.resid, dc->T * full.H);
        printf("  %-12s cache %-5s T=%2lld prefix %lld: max |dlogit| %.2e  |dhidden| %.2e "
               "(tolerance %.0e)\n",
               dc->name, lp_dtype_name(dtypes[d]), (long long)dc->T, (long long)dc->prefix, dl,
               dr, tol[d]);
        assert_true(dl <= tol[d]);
        assert_true(dr <= tol[d] * 10);
        if (dtypes[d] != LP_DTYPE_F32)
            assert_true(dl > 0.0);
        keep_free(&inc);
    }
    keep_free(&full);
    lp_model_close(model);
    ref_model_free(&m);
    remove_dir(dir);
}

/* Whether fault f can change what the model computes: a stale query position cannot under
 * ALiBi (no RoPE; the bias slope (j - i) moves a whole row by one constant, which the softmax
 * ignores), so an ALiBi model decodes correctly through it. */
static bool fault_bites(const decode_case *dc, int f)
{
    return !(f == LP_KV_FAULT_ROPE_STALE && dc->cfg.alibi);
}

/* Each fault moves the logits of the decoded positions far beyond F32_TOL. */
static void test_decode_faults(void **state)
{
    const decode_case *dc = *state;
    ref_model m;
    char dir[512];
    int32_t ids[64];
    lp_model *model = open_case_tokens(dc, &m, dir, sizeof dir, ids);
    keep full;
    full_prefill(model, ids, dc->T, &full);
    for (int f = 1; f < LP_KV_FAULT_COUNT; f++) {
        keep inc;
        incremental(model, ids, dc->T, dc->prefix, LP_DTYPE_F32, (lp_kv_fault)f, &inc);
        double dl = max_abs_diff(full.logits, inc.logits, dc->T * full.V);
        /* the prefill part is untouched by every fault */
        double d_prefix = max_abs_diff(full.logits, inc.logits, dc->prefix * full.V);
        printf("  %-12s fault %-16s max |dlogit| %.2e (prefix %.2e)\n", dc->name,
               lp_kv_fault_name((lp_kv_fault)f), dl, d_prefix);
        assert_true(fault_bites(dc, f) ? dl > 100 * F32_TOL : dl <= F32_TOL);
        assert_true(d_prefix <= F32_TOL);
        keep_free(&inc);
    }
    assert_int_equal(lp_kv_fault_from_name("rope-stale"), LP_KV_FAULT_ROPE_STALE);
    assert_int_equal(lp_kv_fault_from_name("nope"), LP_KV_FAULT_COUNT);
    keep_free(&full);
    lp_model_close(model);
    ref_model_free(&m);
    remove_dir(dir);
}

/* loupe leak's decode check: a clean model passes with figures inside the tolerances, each
 * injected fault fails and is named. */
static void test_leak_decode(void **state)
{
    const decode_case *dc = *state;
    ref_model m;
    char dir[512];
    int32_t ids[64];
    lp_model *model = open_case_tokens(dc, &m, dir, sizeof dir, ids);
    lp_error err = {0};
    for (int f = 0; f < LP_KV_FAULT_COUNT; f++) {
        lp_leak_decode_opts o = {.fault = (lp_kv_fault)f};
        lp_leak_decode_report r;
        if (lp_leak_check_decode(model, ids, dc->T, &o, &r, &err) != LP_OK)
            fail_msg("%s", err.msg);
        printf("  %-12s leak decode, inject %-16s -> %s (f32 %.1e/%.1e, f16 %.1e/%.1e, "
               "window %lld)\n",
               dc->name, lp_kv_fault_name((lp_kv_fault)f), r.diagnosis, r.logit_diff,
               r.hidden_diff, r.f16_logit_diff, r.f16_hidden_diff, (long long)r.window);
        assert_string_equal(r.checks[0].name, "decode");
        assert_false(r.int8); /* f32 weights: no int8-activation row */
        assert_int_equal(r.n_checks, 2);
        bool clean = f == LP_KV_FAULT_NONE || !fault_bites(dc, f);
        assert_int_equal(r.passed, clean);
        assert_string_equal(r.diagnosis, clean ? "none" : lp_kv_fault_name((lp_kv_fault)f));
        if (f == LP_KV_FAULT_NONE) {
            assert_true(r.checks[0].passed && r.checks[1].passed);
            assert_true(r.logit_diff <= LP_LEAK_DECODE_TOLERANCE);
            assert_true(r.f16_logit_diff > 0.0);
            if (dc->cfg.window > 0)
                assert_true(dc->T > r.window && r.window > 0);
        }
    }
    lp_model_close(model);
    ref_model_free(&m);
    remove_dir(dir);
}

static int64_t argmax_f(const float *x, int64_t n)
{
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* Greedy generation equals the float64 reference's argmax chain: the reference runs the whole
 * sequence so far and picks the argmax of its last row, step by step; the generated ids must be
 * the same and the logits of every position within the reference budget. */
static void test_greedy_equals_reference(void **state)
{
    const decode_case *dc = *state;
    ref_model m;
    char dir[512];
    lp_model *model = open_case(dc, &m, dir, sizeof dir);
    int64_t P = dc->prefix > 1 ? dc->prefix : 2, N = 8, V = dc->cfg.vocab;
    int32_t ids[64], out[64];
    case_tokens(ids, P, V);
    keep k;
    keep_init(&k, lp_model_arch(model), P + N);
    lp_observer obs = {&k, keep_want, keep_observe};
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.observer = &obs;
    lp_generate_opts gen;
    lp_generate_opts_init(&gen);
    gen.n_new = N;
    gen.kv_dtype = LP_DTYPE_F32;
    int64_t n_out;
    uint64_t kv_bytes;
    lp_error err = {0};
    if (lp_generate(model, ids, P, &gen, &opts, out, &n_out, &kv_bytes, NULL, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(n_out, P + N);
    memcpy(ids + P, out + P, (size_t)N * sizeof(int32_t));
    ref_outputs ref;
    assert_true(ref_forward(&m, ids, P + N, &ref));
    double worst = 0;
    for (int64_t t = P - 1; t < P + N - 1; t++) {
        int64_t want = argmax_f(ref.logits + t * V, V);
        /* a near tie may go either way in f32; the reference's margin says whether it is one */
        float best = ref.logits[t * V + want];
        float second = -INFINITY;
        for (int64_t i = 0; i < V; i++)
            if (i != want && ref.logits[t * V + i] > second)
                second = ref.logits[t * V + i];
        if (best - second > 1e-3f)
            assert_int_equal(out[t + 1], want);
    }
    worst = max_abs_diff(k.logits, ref.logits, (P + N) * V);
    printf("  %-12s greedy %lld tokens after %lld: ids = reference argmax chain, max |dlogit| "
           "%.2e\n",
           dc->name, (long long)N, (long long)P, worst);
    assert_true(worst <= 1e-4);
    ref_outputs_free(&ref);
    keep_free(&k);
    lp_model_close(model);
    ref_model_free(&m);
    remove_dir(dir);
}

/* A generation that stops at a token: the run ends there, its maps are cut to [n, n] and equal
 * (f32 maps) a prefill's of the same tokens within 1e-5; head statistics cover those n rows. */
static void test_stop_and_store(void **state)
{
    const decode_case *dc = *state;
    ref_model m;
    char dir[512], db[600];
    lp_model *model = open_case(dc, &m, dir, sizeof dir);
    snprintf(db, sizeof db, "%s/decode_%s_%ld.db", lp_test_tmp_dir(), dc->name, (long)getpid());
    remove(db);
    int64_t P = 4, N = 6;
    int32_t ids[64], out[64];
    case_tokens(ids, P, dc->cfg.vocab);
    lp_generate_opts gen;
    lp_generate_opts_init(&gen);
    gen.n_new = N;
    gen.kv_dtype = LP_DTYPE_F32;
    int64_t n_out;
    uint64_t kv_bytes;
    lp_error err = {0};
    assert_int_equal(lp_generate(model, ids, P, &gen, NULL, out, &n_out, &kv_bytes, NULL, &err), LP_OK);
    /* stop at the second generated token, unless it repeats the first */
    int64_t stop_at = out[P + 1] != out[P] ? P + 1 : P;
    gen.stop_id = out[stop_at];
    int64_t want = stop_at + 1;
    lp_store *store;
    assert_int_equal(lp_store_open(db, &store, &err), LP_OK);
    lp_store_opts so;
    lp_store_opts_init(&so);
    so.maps = LP_MAPS_F32;
    so.seq_len = P + N;
    lp_run_info info = lp_run_info_for_model("trace", dir, model, NULL, ids, P, NULL, 1);
    int64_t run;
    assert_int_equal(lp_store_begin_run(store, &info, &so, &run, &err), LP_OK);
    lp_forward_opts fo;
    lp_forward_opts_init(&fo);
    fo.observer = lp_store_observer(store);
    if (lp_generate(model, ids, P, &gen, &fo, out, &n_out, &kv_bytes, NULL, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(n_out, want);
    assert_int_equal(lp_store_set_generated(store, out, P, n_out, kv_bytes, "f32", &err), LP_OK);
    assert_int_equal(lp_store_end_run(store, 0.0, &err), LP_OK);
    /* the same tokens as one prefill, into run 2 */
    so.seq_len = 0;
    info.tokens = out;
    info.n_tokens = n_out;
    assert_int_equal(lp_store_begin_run(store, &info, &so, &run, &err), LP_OK);
    lp_batch b = lp_batch_single(out, n_out);
    assert_int_equal(lp_forward(model, &b, &fo, &err), LP_OK);
    assert_int_equal(lp_store_end_run(store, 0.0, &err), LP_OK);
    lp_store_close(store);
    int64_t L = dc->cfg.n_layers, H = dc->cfg.n_heads;
    assert_int_equal(lp_test_sql_int(db, "SELECT count(*) FROM attention WHERE run_id = 1 AND "
                                         "n_q = %lld AND n_k = %lld AND length(probs) = %lld",
                                     (long long)want, (long long)want,
                                     (long long)(want * want * 4)),
                     L * H);
    assert_int_equal(lp_test_sql_int(db, "SELECT n_tokens FROM runs WHERE id = 1"), want);
    assert_int_equal(lp_test_sql_int(db, "SELECT sum(generated) FROM tokens WHERE run_id = 1"),
                     want - P);
    assert_int_equal(lp_test_sql_int(db, "SELECT count(*) FROM head_stats a JOIN head_stats b ON "
                                         "a.layer = b.layer AND a.head = b.head AND a.run_id = 1 "
                                         "AND b.run_id = 2 WHERE abs(a.entropy - b.entropy) < 1e-5 "
                                         "AND abs(a.sink - b.sink) < 1e-5 AND abs(a.output_norm - "
                                         "b.output_norm) < 1e-4"),
                     L * H);
    /* the maps, value by value */
    lp_store *rd;
    assert_int_equal(lp_store_open_read(db, &rd, &err), LP_OK);
    double worst = 0;
    lp_store_run r1, r2;
    bool inc;
    assert_int_equal(lp_store_read_run(rd, 1, NULL, &r1, &inc, &err), LP_OK);
    assert_int_equal(lp_store_read_run(rd, 2, NULL, &r2, &inc, &err), LP_OK);
    for (int64_t l = 0; l < L; l++)
        for (int64_t h = 0; h < H; h++) {
            lp_store_map *a, *c;
            assert_int_equal(lp_store_map_open(rd, &r1, l, h, &a, &err), LP_OK);
            assert_int_equal(lp_store_map_open(rd, &r2, l, h, &c, &err), LP_OK);
            float ra[64], rc[64];
            for (int64_t q = 0; q < want; q++) {
                assert_int_equal(lp_store_map_read(a, q, 0, want, ra, &err), LP_OK);
                assert_int_equal(lp_store_map_read(c, q, 0, want, rc, &err), LP_OK);
                double d = max_abs_diff(ra, rc, want);
                worst = d > worst ? d : worst;
            }
            lp_store_map_close(a);
            lp_store_map_close(c);
        }
    lp_store_run_clear(&r1);
    lp_store_run_clear(&r2);
    lp_store_close(rd);
    printf("  %-12s stop after %lld tokens: maps [%lld, %lld] = prefill's within %.1e\n",
           dc->name, (long long)(want - P), (long long)want, (long long)want, worst);
    assert_true(worst <= 1e-5);
    remove(db);
    lp_model_close(model);
    ref_model_free(&m);
    remove_dir(dir);
}

/* The cache's allocated bytes are what loupe estimate predicts for the same context and dtype. */
static void test_kv_bytes_match_estimate(void **state)
{
    const decode_case *dc = *state;
    ref_model m;
    char dir[512];
    lp_model *model = open_case(dc, &m, dir, sizeof dir);
    static const char *const names[] = {"f32", "f16", "bf16", "q8_0"};
    for (int64_t ctx = 1; ctx <= 40; ctx += 13) {
        for (size_t d = 0; d < 4; d++) {
            lp_kv_cache *kv;
            lp_error err = {0};
            assert_int_equal(lp_kv_cache_create(model, ctx, lp_dtype_from_name(names[d]), NULL,
                                                LP_KV_FAULT_NONE, &kv, &err),
                             LP_OK);
            lp_est_dtype ed;
            assert_true(lp_est_dtype_parse(names[d], &ed));
            uint64_t want;
            assert_int_equal(lp_est_kv_bytes(lp_model_arch(model), &ed, 1, ctx, &want, &err),
                             LP_OK);
            assert_int_equal(lp_kv_cache_bytes(kv), want);
            lp_kv_cache_destroy(kv);
        }
    }
    lp_error err = {0};
    lp_kv_cache *kv;
    assert_int_equal(lp_kv_cache_create(model, 8, LP_DTYPE_Q4_K, NULL, LP_KV_FAULT_NONE, &kv,
                                        &err),
                     LP_ERR_UNSUPPORTED);
    assert_int_equal(lp_kv_default_dtype(model), LP_DTYPE_F32);
    lp_model_close(model);
    ref_model_free(&m);
    remove_dir(dir);
}

/* Longrope (original context 8 of 32): a prompt of 5, decoding to 14. Position t's logits equal
 * a prefill of the first t + 1 tokens, as Phi-3's generation computes them: short factors while
 * t + 1 <= 8, and at the switch (length 9) the cache rebuilt with the long factors, so every later
 * position equals a prefill of its length, all of whose positions rotate with the long ones.
 * Without the rebuild the cached keys of positions 0..7 keep the short factors. */
static void test_longrope_rebuild(void **state)
{
    (void)state;
    enum { ORIG = 8, T = 14, P = 5 };
    decode_case dc = {"phi3-longrope",
                      {.family = REF_PHI3, .vocab = 67, .hidden = 40, .n_layers = 2, .n_heads = 4,
                       .n_kv_heads = 2, .head_dim = 10, .ffn = 36, .eps = 1e-5, .theta = 10000,
                       .rope_dim = 6, .longrope_orig = ORIG, .n_ctx = 32,
                       .short_factor = {1.0, 1.25, 2.5}, .long_factor = {1.5, 4.0, 9.0},
                       .scale = 0.3},
                      T, P};
    ref_model m;
    char dir[512];
    lp_model *model = open_case(&dc, &m, dir, sizeof dir);
    int32_t ids[T];
    case_tokens(ids, T, dc.cfg.vocab);
    keep inc;
    keep_init(&inc, lp_model_arch(model), T);
    lp_observer obs = {&inc, keep_want, keep_observe};
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    opts.observer = &obs;
    lp_kv_cache *kv;
    lp_error err = {0};
    assert_int_equal(lp_kv_cache_create(model, T, LP_DTYPE_F32, &opts, LP_KV_FAULT_NONE, &kv, &err),
                     LP_OK);
    assert_int_equal(lp_forward_cached(model, kv, ids, P, &opts, &err), LP_OK);
    for (int64_t t = P; t < T; t++) {
        assert_int_equal(lp_forward_cached(model, kv, ids + t, 1, &opts, &err), LP_OK);
        assert_int_equal(lp_kv_cache_rebuilt_at(kv), t + 1 > ORIG ? ORIG : -1);
    }
    double worst = 0, long_vs_short = 0;
    for (int64_t t = 0; t < T; t++) {
        keep pre;
        full_prefill(model, ids, t + 1, &pre);
        double d = max_abs_diff(pre.logits + t * pre.V, inc.logits + t * inc.V, pre.V);
        worst = d > worst ? d : worst;
        keep_free(&pre);
    }
    /* the factors matter: a prefill of all T positions differs at the short-factor ones */
    keep all;
    full_prefill(model, ids, T, &all);
    long_vs_short = max_abs_diff(all.logits, inc.logits, P * all.V);
    printf("  phi3-longrope prompt %d, decoded to %d past original %d: rebuilt at %lld, max "
           "|dlogit| vs prefill of each length %.2e (long vs short factors %.2e)\n",
           P, T, ORIG, (long long)lp_kv_cache_rebuilt_at(kv), worst, long_vs_short);
    assert_true(worst <= F32_TOL);
    assert_true(long_vs_short > 100 * F32_TOL);
    /* loupe leak's decode check agrees with that rule: prefix 7 <= 8 < 14, so positions 0..7 are
     * compared with a prefill of 8 (against the one prefill of 14 they differ by long_vs_short),
     * and each injected fault is still caught and named */
    for (int f = 0; f < LP_KV_FAULT_COUNT; f++) {
        lp_leak_decode_opts o = {.fault = (lp_kv_fault)f};
        lp_leak_decode_report r;
        assert_int_equal(lp_leak_check_decode(model, ids, T, &o, &r, &err), LP_OK);
        printf("  phi3-longrope leak decode, inject %-16s -> %s (f32 %.1e/%.1e, f16 %.1e/%.1e, "
               "short prefill %lld)\n",
               lp_kv_fault_name((lp_kv_fault)f), r.diagnosis, r.logit_diff, r.hidden_diff,
               r.f16_logit_diff, r.f16_hidden_diff, (long long)r.short_prefill);
        assert_int_equal(r.short_prefill, ORIG);
        assert_int_equal(r.passed, f == LP_KV_FAULT_NONE);
        assert_string_equal(r.diagnosis, f == LP_KV_FAULT_NONE ? "none"
                                                               : lp_kv_fault_name((lp_kv_fault)f));
        if (f == LP_KV_FAULT_NONE)
            assert_true(r.logit_diff <= LP_LEAK_DECODE_TOLERANCE &&
                        r.f16_logit_diff <= LP_LEAK_DECODE_F16_TOLERANCE);
    }
    keep_free(&all);
    keep_free(&inc);
    lp_kv_cache_destroy(kv);
    lp_model_close(model);
    ref_model_free(&m);
    remove_dir(dir);
}

/* The decode step through a 2-thread pool: the same logits bit for bit as without a pool, and
 * the workers woken once per group of matrices that share an input (q|k|v, gate|up), not once
 * per matrix: per layer q|k|v, the attention heads, o, gate|up and down, then the logits. */
static void test_decode_pool_runs(void **state)
{
    (void)state;
    const decode_case *dc = &cases[0]; /* llama-gqa: separate q, k, v, gate and up */
    ref_model m;
    char dir[512];
    int32_t ids[64];
    lp_model *model = open_case_tokens(dc, &m, dir, sizeof dir, ids);
    lp_error err = {0};
    lp_pool *pool;
    assert_int_equal(lp_pool_create(2, &pool, &err), LP_OK);
    keep serial, pooled;
    uint64_t runs_per_step = 0;
    for (int with_pool = 0; with_pool < 2; with_pool++) {
        keep *k = with_pool ? &pooled : &serial;
        keep_init(k, lp_model_arch(model), dc->T);
        lp_observer obs = {k, keep_want, keep_observe};
        lp_forward_opts opts;
        lp_forward_opts_init(&opts);
        opts.observer = &obs;
        opts.pool = with_pool ? pool : NULL;
        lp_kv_cache *kv;
        assert_int_equal(lp_kv_cache_create(model, dc->T, LP_DTYPE_F32, &opts, LP_KV_FAULT_NONE,
                                            &kv, &err),
                         LP_OK);
        assert_int_equal(lp_forward_cached(model, kv, ids, dc->prefix, &opts, &err), LP_OK);
        for (int64_t t = dc->prefix; t < dc->T; t++) {
            lp_pool_counts before, after;
            lp_pool_get_counts(opts.pool, &before);
            assert_int_equal(lp_forward_cached(model, kv, ids + t, 1, &opts, &err), LP_OK);
            lp_pool_get_counts(opts.pool, &after);
            uint64_t runs = after.runs - before.runs;
            if (with_pool && t > dc->prefix)
                assert_int_equal(runs, runs_per_step); /* every step the same */
            runs_per_step = runs;
        }
        lp_kv_cache_destroy(kv);
    }
    printf("  llama-gqa decode step on 2 threads: %llu pool runs for %lld layers\n",
           (unsigned long long)runs_per_step, (long long)dc->cfg.n_layers);
    assert_int_equal(runs_per_step, 5 * (uint64_t)dc->cfg.n_layers + 1);
    assert_memory_equal(serial.logits, pooled.logits, (size_t)(dc->T * serial.V) * sizeof(float));
    assert_memory_equal(serial.resid, pooled.resid, (size_t)(dc->T * serial.H) * sizeof(float));
    keep_free(&serial);
    keep_free(&pooled);
    lp_pool_destroy(pool);
    lp_model_close(model);
    ref_model_free(&m);
    remove_dir(dir);
}

/* Sampling: the same seed draws the same tokens, top_k = 1 is greedy, a tiny top_p is greedy,
 * and a high temperature over a flat distribution spreads its draws. */
static void test_sampling(void **state)
{
    (void)state;
    float logits[6] = {1.0f, 3.0f, 3.0f, 0.5f, -1.0f, 2.9f};
    lp_generate_opts g;
    lp_generate_opts_init(&g);
    lp_error err = {0};
    uint64_t rng = 1;
    int32_t id;
    assert_int_equal(lp_sample_token(logits, 6, &g, &rng, &id, &err), LP_OK);
    assert_int_equal(id, 1); /* greedy: tie between 1 and 2 goes to the lower id */
    g.temperature = 1.0;
    g.top_k = 1;
    assert_int_equal(lp_sample_token(logits, 6, &g, &rng, &id, &err), LP_OK);
    assert_int_equal(id, 1);
    g.top_k = 0;
    g.top_p = 1e-6;
    assert_int_equal(lp_sample_token(logits, 6, &g, &rng, &id, &err), LP_OK);
    assert_int_equal(id, 1);
    g.top_p = 1.0;
    g.temperature = 50.0;
    int32_t a[64], b[64];
    int seen[6] = {0};
    uint64_t r1 = 42, r2 = 42;
    for (int i = 0; i < 64; i++) {
        assert_int_equal(lp_sample_token(logits, 6, &g, &r1, &a[i], &err), LP_OK);
        assert_int_equal(lp_sample_token(logits, 6, &g, &r2, &b[i], &err), LP_OK);
        assert_int_equal(a[i], b[i]);
        seen[a[i]]++;
    }
    int distinct = 0;
    for (int i = 0; i < 6; i++)
        distinct += seen[i] > 0;
    assert_true(distinct >= 4);
    /* top_k = 2 keeps ids 1 and 2 only */
    g.top_k = 2;
    for (int i = 0; i < 32; i++) {
        assert_int_equal(lp_sample_token(logits, 6, &g, &r1, &id, &err), LP_OK);
        assert_true(id == 1 || id == 2);
    }
}

/* The largest |a - b| over the logits of every position, relative to that row's largest |a|
 * (the leak check's measure). */
static double logits_rel_diff(const keep *a, const keep *b)
{
    double worst = 0.0;
    for (int64_t p = 0; p < a->n; p++) {
        const float *ra = a->logits + p * a->V, *rb = b->logits + p * a->V;
        double top = 1e-6, d = 0.0;
        for (int64_t i = 0; i < a->V; i++) {
            top = fmax(top, fabs((double)ra[i]));
            d = fmax(d, fabs((double)ra[i] - (double)rb[i]));
        }
        worst = fmax(worst, d / top);
    }
    return worst;
}

/* int8 activations change nothing without Q8_0/Q4_K/MXFP4 weights: the steps are bit-equal. */
static void test_int8_noop_on_f32(void **state)
{
    (void)state;
    const decode_case *dc = &cases[0];
    ref_model m;
    char dir[512];
    int32_t ids[64];
    lp_model *model = open_case_tokens(dc, &m, dir, sizeof dir, ids);
    assert_false(lp_model_int8_matvec(model));
    keep flt, i8;
    incremental_as(model, ids, dc->T, dc->prefix, LP_DTYPE_F32, LP_KV_FAULT_NONE, false, &flt);
    incremental_as(model, ids, dc->T, dc->prefix, LP_DTYPE_F32, LP_KV_FAULT_NONE, true, &i8);
    assert_true(max_abs_diff(flt.logits, i8.logits, dc->T * flt.V) == 0.0);
    keep_free(&flt);
    keep_free(&i8);
    lp_model_close(model);
    ref_model_free(&m);
    remove_dir(dir);
}

/* stories260K Q4_K_M (Q8_0 attn_v in two layers, q5_0 elsewhere): decode with float
 * activations equals prefill to the f32 tolerance; with int8 activations it differs (the path
 * ran) within LP_LEAK_DECODE_INT8_TOLERANCE; the leak check runs the int8 row beside the two
 * cache rows, passes clean and still names an injected fault. */
static void test_int8_decode_quantized(void **state)
{
    (void)state;
    char path[600];
    lp_test_shared_path(path, sizeof path, "models/stories260K/quant/stories260K-Q4_K_M.gguf");
    lp_model *model;
    lp_error err = {0};
    if (lp_model_open(path, &model, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_true(lp_model_int8_matvec(model));
    enum { T = 24, PREFIX = 6 };
    int32_t ids[T];
    case_tokens(ids, T, lp_model_arch(model)->vocab_size);
    keep full, flt, i8;
    full_prefill(model, ids, T, &full);
    incremental_as(model, ids, T, PREFIX, LP_DTYPE_F32, LP_KV_FAULT_NONE, false, &flt);
    incremental_as(model, ids, T, PREFIX, LP_DTYPE_F32, LP_KV_FAULT_NONE, true, &i8);
    double d_flt = logits_rel_diff(&full, &flt), d_i8 = logits_rel_diff(&full, &i8);
    printf("  stories260K Q4_K_M decode vs prefill, relative |dlogit|: float activations %.2e "
           "(budget %.0e), int8 %.2e (budget %.0e)\n",
           d_flt, LP_LEAK_DECODE_TOLERANCE, d_i8, LP_LEAK_DECODE_INT8_TOLERANCE);
    assert_true(d_flt <= LP_LEAK_DECODE_TOLERANCE);
    assert_true(d_i8 > d_flt && d_i8 <= LP_LEAK_DECODE_INT8_TOLERANCE);
    keep_free(&full);
    keep_free(&flt);
    keep_free(&i8);
    for (int f = 0; f < LP_KV_FAULT_COUNT; f++) {
        lp_leak_decode_opts o = {.fault = (lp_kv_fault)f};
        lp_leak_decode_report r;
        if (lp_leak_check_decode(model, ids, T, &o, &r, &err) != LP_OK)
            fail_msg("%s", err.msg);
        printf("  stories260K Q4_K_M leak decode, inject %-16s -> %s (int8 row %.1e/%.1e)\n",
               lp_kv_fault_name((lp_kv_fault)f), r.diagnosis, r.int8_logit_diff,
               r.int8_hidden_diff);
        assert_true(r.int8);
        assert_int_equal(r.n_checks, 3);
        assert_string_equal(r.checks[2].name, "decode");
        assert_non_null(strstr(r.checks[2].detail, "int8 activations"));
        assert_string_equal(r.diagnosis, lp_kv_fault_name((lp_kv_fault)f));
        if (f == LP_KV_FAULT_NONE)
            assert_true(r.passed && r.checks[2].passed && r.int8_logit_diff > 0.0);
    }
    lp_model_close(model);
}

int main(void)
{
    enum { N = sizeof cases / sizeof cases[0] };
    struct CMUnitTest tests[6 * N + 4];
    size_t n = 0;
    for (size_t i = 0; i < N; i++) {
        tests[n++] = (struct CMUnitTest){cases[i].name, test_decode_equals_prefill, NULL, NULL,
                                         (void *)&cases[i]};
        tests[n++] = (struct CMUnitTest){cases[i].name, test_decode_faults, NULL, NULL,
                                         (void *)&cases[i]};
        tests[n++] = (struct CMUnitTest){cases[i].name, test_greedy_equals_reference, NULL,
                                         NULL, (void *)&cases[i]};
        tests[n++] = (struct CMUnitTest){cases[i].name, test_kv_bytes_match_estimate, NULL,
                                         NULL, (void *)&cases[i]};
        tests[n++] = (struct CMUnitTest){cases[i].name, test_leak_decode, NULL, NULL,
                                         (void *)&cases[i]};
        tests[n++] = (struct CMUnitTest){cases[i].name, test_stop_and_store, NULL, NULL,
                                         (void *)&cases[i]};
    }
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_sampling);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_longrope_rebuild);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_decode_pool_runs);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_int8_noop_on_f32);
    int failed = _cmocka_run_group_tests("decode", tests, n, NULL, NULL);
    if (!lp_test_shared_dir()) {
        printf("SKIP test_int8_decode_quantized: ../shared not found (set LOUPE_SHARED)\n");
        return failed;
    }
    const struct CMUnitTest golden[] = {cmocka_unit_test(test_int8_decode_quantized)};
    return failed | cmocka_run_group_tests_name("decode_golden", golden, NULL, NULL);
}
