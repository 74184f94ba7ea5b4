/* MXFP4 experts in safetensors as gpt-oss releases them: "<P>experts.<stem>_blocks" (U8 [E, rows,
 * G, 16]) + "_scales" (U8 [E, rows, G]) bound as one MXFP4 matrix per expert. A Qwen3-MoE-shaped
 * model is written twice, its experts once as f32 tensors of the exact MXFP4 values and once as
 * pairs (with and without the "model." prefix); both trace alike and as the reference forward,
 * and decoding through the KV cache equals the prefill.
 * Broken pairs (half missing, a wrong shape or dtype) are refused naming the tensor. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <math.h>
#include <unistd.h>

#include "forward_capture.h"
#include "inspect/formats/quant.h"
#include "inspect/formats/safetensors_write.h"
#include "inspect/inspect.h"
#include "ref_forward.h"
#include "trace/leak/leak.h"
#include "trace/trace.h"

/* hidden and expert width multiples of 32 (whole MXFP4 blocks); head_dim 12, vocab 45 odd */
static const ref_config moe_cfg = {
    .family = REF_QWEN_MOE, .vocab = 45, .hidden = 64, .n_layers = 2, .n_heads = 4,
    .n_kv_heads = 2, .head_dim = 12, .ffn = 40, .eps = 1e-6, .theta = 10000, .qk_norm = true,
    .n_experts = 5, .top_k = 2, .expert_ffn = 32, .norm_topk = true, .scale = 0.2};

static uint64_t next_seed(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* One stacked pair [E, rows, cols / 32, 16] + [E, rows, cols / 32] of random MXFP4 values; the
 * dequantized values go to per_expert[e] ([rows, cols] each) for the reference. */
typedef struct mx_pair {
    uint8_t *blocks, *scales;
    int64_t E, rows, G;
} mx_pair;

static void random_pair(mx_pair *p, int64_t E, int64_t rows, int64_t cols, uint64_t *seed,
                        float **per_expert)
{
    p->E = E;
    p->rows = rows;
    p->G = cols / 32;
    int64_t n_blocks = E * rows * p->G;
    p->blocks = malloc((size_t)n_blocks * 16);
    p->scales = malloc((size_t)n_blocks);
    assert_non_null(p->blocks);
    assert_non_null(p->scales);
    for (int64_t b = 0; b < n_blocks * 16; b++)
        p->blocks[b] = (uint8_t)(next_seed(seed) & 0xff);
    for (int64_t b = 0; b < n_blocks; b++) /* 2^-11 .. 2^-7 */
        p->scales[b] = (uint8_t)(116 + next_seed(seed) % 5);
    for (int64_t e = 0; e < E; e++) {
        int64_t per = rows * p->G;
        assert_int_equal(lp_dequantize_mxfp4(p->blocks + e * per * 16, p->scales + e * per, per,
                                             per_expert[e], NULL),
                         LP_OK);
    }
}

static void free_pair(mx_pair *p)
{
    free(p->blocks);
    free(p->scales);
}

typedef struct mx_model {
    ref_model m;
    mx_pair gate[8], up[8], down[8]; /* per layer */
} mx_model;

static void mx_model_make(mx_model *mm)
{
    assert_true(ref_model_random(&moe_cfg, 0x4f5 + 7, &mm->m));
    const ref_config *c = &moe_cfg;
    uint64_t seed = 0xa11ce;
    for (int64_t l = 0; l < c->n_layers; l++) {
        ref_layer *L = &mm->m.layers[l];
        random_pair(&mm->gate[l], c->n_experts, c->expert_ffn, c->hidden, &seed, L->e_gate);
        random_pair(&mm->up[l], c->n_experts, c->expert_ffn, c->hidden, &seed, L->e_up);
        random_pair(&mm->down[l], c->n_experts, c->hidden, c->expert_ffn, &seed, L->e_down);
    }
}

static void mx_model_free(mx_model *mm)
{
    for (int64_t l = 0; l < moe_cfg.n_layers; l++) {
        free_pair(&mm->gate[l]);
        free_pair(&mm->up[l]);
        free_pair(&mm->down[l]);
    }
    ref_model_free(&mm->m);
}

/* How a test breaks the pairs it writes. */
typedef enum pair_fault {
    FAULT_NONE,
    FAULT_NO_SCALES,     /* layer 1's down_proj_scales left out */
    FAULT_SHORT_ROWS,    /* layer 0's gate_proj_blocks with one row too few */
    FAULT_SCALES_DTYPE,  /* layer 0's up_proj_scales as F32 */
} pair_fault;

/* U8 blocks [E, rows, G, 16] + U8 scales as gpt-oss ships them, or (f4) the same bytes typed
 * F4 [E, rows, G, 32] + F8_E8M0, as a checkpoint re-saved with those dtypes holds them. */
static void add_pair(lp_st_writer *w, const char *prefix, int64_t l, const char *stem,
                     const mx_pair *p, pair_fault fault, bool f4)
{
    char name[256];
    lp_error err = {0};
    int64_t rows = p->rows - (fault == FAULT_SHORT_ROWS && l == 0 && strcmp(stem, "gate_proj") == 0);
    int64_t bshape[4] = {p->E, rows, p->G, f4 ? 32 : 16}, sshape[3] = {p->E, rows, p->G};
    snprintf(name, sizeof name, "%slayers.%lld.mlp.experts.%s_blocks", prefix, (long long)l, stem);
    assert_int_equal(lp_st_writer_add(w, name, f4 ? LP_DTYPE_F4_E2M1 : LP_DTYPE_U8, 4, bshape,
                                      p->blocks, &err),
                     LP_OK);
    if (fault == FAULT_NO_SCALES && l == 1 && strcmp(stem, "down_proj") == 0)
        return;
    snprintf(name, sizeof name, "%slayers.%lld.mlp.experts.%s_scales", prefix, (long long)l, stem);
    if (fault == FAULT_SCALES_DTYPE && l == 0 && strcmp(stem, "up_proj") == 0) {
        float *f = calloc((size_t)(p->E * rows * p->G), sizeof *f);
        assert_non_null(f);
        assert_int_equal(lp_st_writer_add(w, name, LP_DTYPE_F32, 3, sshape, f, &err), LP_OK);
        free(f);
        return;
    }
    assert_int_equal(lp_st_writer_add(w, name, f4 ? LP_DTYPE_F8_E8M0 : LP_DTYPE_U8, 3, sshape,
                                      p->scales, &err),
                     LP_OK);
}

/* dst: a copy of the f32 folder src whose per-expert tensors are replaced by the pairs; every
 * name loses its "model." prefix unless keep_prefix. */
static void write_paired(const mx_model *mm, const char *src, const char *dst, bool keep_prefix,
                         pair_fault fault, bool f4)
{
    char cmd[1200], path[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dst, src, dst);
    assert_int_equal(system(cmd), 0);
    lp_weights *in;
    lp_error err = {0};
    if (lp_weights_open(src, &in, &err) != LP_OK)
        fail_msg("%s: %s", src, err.msg);
    lp_st_writer *w;
    assert_int_equal(lp_st_writer_create(&w, &err), LP_OK);
    for (size_t i = 0; i < lp_weights_count(in); i++) {
        const lp_tensor *t = lp_weights_tensor(in, i);
        if (t->expert >= 0 && (t->role == LP_ROLE_EXPERT_GATE || t->role == LP_ROLE_EXPERT_UP ||
                               t->role == LP_ROLE_EXPERT_DOWN))
            continue;
        const char *name = t->name;
        if (!keep_prefix && strncmp(name, "model.", 6) == 0)
            name += 6;
        assert_int_equal(lp_st_writer_add(w, name, t->dtype, t->n_dims, t->shape, t->data, &err),
                         LP_OK);
    }
    const char *prefix = keep_prefix ? "model." : "";
    for (int64_t l = 0; l < moe_cfg.n_layers; l++) {
        add_pair(w, prefix, l, "gate_proj", &mm->gate[l], fault, f4);
        add_pair(w, prefix, l, "up_proj", &mm->up[l], fault, f4);
        add_pair(w, prefix, l, "down_proj", &mm->down[l], fault, f4);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    if (lp_st_writer_write(w, path, &err) != LP_OK)
        fail_msg("%s: %s", path, err.msg);
    lp_st_writer_destroy(w);
    lp_weights_close(in);
}

static void test_pairs_trace_as_dequantized(void **state)
{
    (void)state;
    mx_model mm;
    mx_model_make(&mm);
    char f32_dir[512], paired[512];
    snprintf(f32_dir, sizeof f32_dir, "%s/mxfp4_f32_%ld", lp_test_tmp_dir(), (long)getpid());
    assert_true(ref_model_write_hf_as(&mm.m, f32_dir, LP_DTYPE_F32));
    int64_t T = 13;
    int32_t ids[64];
    case_tokens(ids, T, moe_cfg.vocab);
    ref_outputs ref;
    assert_true(ref_forward(&mm.m, ids, T, &ref));
    lp_model *dense;
    lp_error err = {0};
    if (lp_model_open(f32_dir, &dense, &err) != LP_OK)
        fail_msg("%s: %s", f32_dir, err.msg);
    capture want;
    run_capture(dense, ids, T, NULL, &want);
    /* no prefix, "model.", and "model." with F4 / F8_E8M0 dtypes */
    for (int variant = 0; variant < 3; variant++) {
        bool keep_prefix = variant > 0, f4 = variant == 2;
        snprintf(paired, sizeof paired, "%s/mxfp4_pairs%d_%ld", lp_test_tmp_dir(), variant,
                 (long)getpid());
        write_paired(&mm, f32_dir, paired, keep_prefix, FAULT_NONE, f4);
        lp_model *model;
        if (lp_model_open(paired, &model, &err) != LP_OK)
            fail_msg("%s: %s", paired, err.msg);
        capture got;
        run_capture(model, ids, T, NULL, &got);
        double d = max_abs_diff(got.logits, want.logits, T * moe_cfg.vocab);
        printf("  mxfp4 pairs (%s prefix, %s) vs f32 experts: logits %.2e (budget 1e-5)\n",
               keep_prefix ? "model." : "no", f4 ? "F4 + F8_E8M0" : "U8 + U8", d);
        assert_true(d <= 1e-5);
        compare_with_ref(f4 ? "pairs f4" : keep_prefix ? "pairs model." : "pairs bare", model, ids, T, &moe_cfg, &ref,
                         1e-4);
        /* decode reads the repacked blocks in place (lp_matvec's MXFP4 rows) and equals prefill */
        lp_leak_decode_opts dopts = {LP_KV_FAULT_NONE, 0, NULL};
        lp_leak_decode_report rep;
        if (lp_leak_check_decode(model, ids, T, &dopts, &rep, &err) != LP_OK)
            fail_msg("decode: %s", err.msg);
        printf("  mxfp4 pairs decode vs prefill: f32 %.1e -> %s\n", rep.logit_diff, rep.diagnosis);
        assert_true(rep.passed);
        capture_free(&got);
        lp_model_close(model);
        remove_dir(paired);
    }
    assert_true(logit_spread(&ref, T * moe_cfg.vocab) > 1e-2);
    capture_free(&want);
    lp_model_close(dense);
    ref_outputs_free(&ref);
    remove_dir(f32_dir);
    mx_model_free(&mm);
}

static void test_broken_pairs(void **state)
{
    (void)state;
    static const struct {
        pair_fault fault;
        const char *names, *says;
    } cases[] = {
        {FAULT_NO_SCALES, "layers.1.mlp.experts.down_proj_blocks", "has no"},
        {FAULT_SHORT_ROWS, "layers.0.mlp.experts.gate_proj_blocks", "expected [5, 32, 2, 16]"},
        {FAULT_SCALES_DTYPE, "layers.0.mlp.experts.up_proj_scales", "dtype f32"},
    };
    mx_model mm;
    mx_model_make(&mm);
    char f32_dir[512], paired[512];
    snprintf(f32_dir, sizeof f32_dir, "%s/mxfp4_bad_f32_%ld", lp_test_tmp_dir(), (long)getpid());
    snprintf(paired, sizeof paired, "%s/mxfp4_bad_%ld", lp_test_tmp_dir(), (long)getpid());
    assert_true(ref_model_write_hf_as(&mm.m, f32_dir, LP_DTYPE_F32));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_paired(&mm, f32_dir, paired, true, cases[i].fault, false);
        lp_model *model = NULL;
        lp_error err = {0};
        assert_int_equal(lp_model_open(paired, &model, &err), LP_ERR_FORMAT);
        printf("  broken pair: %s\n", err.msg);
        assert_non_null(strstr(err.msg, cases[i].names));
        assert_non_null(strstr(err.msg, cases[i].says));
        assert_null(strchr(err.msg, '\n'));
    }
    remove_dir(paired);
    remove_dir(f32_dir);
    mx_model_free(&mm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairs_trace_as_dequantized),
        cmocka_unit_test(test_broken_pairs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
