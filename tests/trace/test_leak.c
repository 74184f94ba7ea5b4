/* Tests of the leak checker: definitions and window inclusivity, the engine's masks cell by cell
 * with every fault named, decode alignment through the attention kernel, crafted mask tensors
 * (npy and safetensors, bool and additive, good and bad), and stories260K with each injected
 * fault. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "inspect/formats/safetensors_write.h"
#include "forward_capture.h"
#include "ref_forward.h"
#include "trace/leak/leak.h"
#include "trace/trace.h"

/* ---- writing masks ---- */

typedef enum cell_rule {
    RULE_CAUSAL,     /* k <= q */
    RULE_OFF_BY_ONE, /* k <= q + 1 */
    RULE_TRANSPOSED, /* k >= q */
    RULE_ALL,        /* every cell */
    RULE_WINDOW,     /* k <= q && q - k < w */
    RULE_DOC,        /* k <= q && doc[k] == doc[q] */
} cell_rule;

static const int64_t docs[12] = {0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 3};

static bool rule_allows(cell_rule rule, int64_t w, int64_t q, int64_t k)
{
    switch (rule) {
    case RULE_CAUSAL: return k <= q;
    case RULE_OFF_BY_ONE: return k <= q + 1;
    case RULE_TRANSPOSED: return k >= q;
    case RULE_ALL: return true;
    case RULE_WINDOW: return k <= q && q - k < w;
    case RULE_DOC: return k <= q && docs[k] == docs[q];
    }
    return false;
}

static char *tmp_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/leak_%d_%s", lp_test_tmp_dir(), (int)getpid(), name);
    return buf;
}

/* A .npy with the given descr and shape; data of n_bytes (n_bytes may be short: truncated). */
static void write_npy(const char *path, const char *descr, int n_dims, const int64_t *shape,
                      const void *data, size_t n_bytes)
{
    char dict[256], shape_text[128] = "";
    size_t used = 0;
    for (int d = 0; d < n_dims; d++)
        used += (size_t)snprintf(shape_text + used, sizeof shape_text - used, "%lld,%s",
                                 (long long)shape[d], d + 1 < n_dims ? " " : "");
    int len = snprintf(dict, sizeof dict,
                       "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                       descr, shape_text);
    size_t total = 10 + (size_t)len + 1;
    size_t padded = (total + 63) / 64 * 64;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    uint16_t hlen = (uint16_t)(padded - 10);
    head[8] = (unsigned char)(hlen & 0xff);
    head[9] = (unsigned char)(hlen >> 8);
    fwrite(head, 1, 10, f);
    fwrite(dict, 1, (size_t)len, f);
    for (size_t i = total; i < padded; i++)
        fputc(' ', f);
    fputc('\n', f);
    if (n_bytes)
        fwrite(data, 1, n_bytes, f);
    fclose(f);
}

/* Bool [B, H, T, T] (or [T, T] when n_dims == 2) from a rule; bad_b/bad_h get bad_rule. */
static uint8_t *bool_mask(int64_t B, int64_t H, int64_t T, cell_rule rule, int64_t w,
                          int64_t bad_b, int64_t bad_h, cell_rule bad_rule)
{
    uint8_t *m = malloc((size_t)(B * H * T * T));
    assert_non_null(m);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t q = 0; q < T; q++)
                for (int64_t k = 0; k < T; k++) {
                    cell_rule r = b == bad_b && h == bad_h ? bad_rule : rule;
                    m[((b * H + h) * T + q) * T + k] = rule_allows(r, w, q, k);
                }
    return m;
}

static lp_status check_npy(const char *name, const char *descr, int n_dims, const int64_t *shape,
                           const void *data, size_t n_bytes, const char *kind,
                           lp_leak_mask_report *rep, lp_error *err)
{
    char path[512];
    tmp_path(path, sizeof path, name);
    write_npy(path, descr, n_dims, shape, data, n_bytes);
    lp_leak_mask_opts mo;
    lp_leak_mask_opts_init(&mo);
    lp_status st = lp_leak_def_parse(kind, &mo.def, err);
    if (st == LP_OK)
        st = lp_leak_check_mask_file(path, &mo, rep, err);
    lp_leak_def_free(&mo.def);
    unlink(path);
    return st;
}

/* ---- definitions and the engine's masks ---- */

static void test_definitions(void **state)
{
    (void)state;
    lp_error err = {0};
    lp_leak_def d;
    assert_int_equal(lp_leak_def_parse("causal", &d, &err), LP_OK);
    assert_true(lp_leak_def_allows(&d, 0, 5, 5));
    assert_false(lp_leak_def_allows(&d, 0, 5, 6));
    /* window:4 = 4 keys including the query: q-3 .. q; q-4 is out (both sides of the boundary) */
    assert_int_equal(lp_leak_def_parse("window:4", &d, &err), LP_OK);
    assert_int_equal(d.window, 4);
    assert_true(lp_leak_def_allows(&d, 0, 10, 7));
    assert_false(lp_leak_def_allows(&d, 0, 10, 6));
    assert_true(lp_leak_def_allows(&d, 0, 10, 10));
    assert_int_not_equal(lp_leak_def_parse("window:0", &d, &err), LP_OK);
    assert_non_null(strstr(err.msg, "window:0"));
    assert_int_not_equal(lp_leak_def_parse("window:x", &d, &err), LP_OK);
    assert_int_not_equal(lp_leak_def_parse("lower", &d, &err), LP_OK);
    assert_int_not_equal(lp_leak_def_parse("doc:/no/such/ids.txt", &d, &err), LP_OK);

    /* The engine's spec says the same at the window boundary. */
    lp_mask_spec spec = lp_mask_causal(16, 16);
    spec.window = 4;
    int64_t lo, hi;
    lp_mask_row_range(&spec, 0, 10, &lo, &hi);
    assert_int_equal(lo, 7);
    assert_int_equal(hi, 11);
    assert_true(lp_mask_allows_reference(&spec, 0, 10, 7));
    assert_false(lp_mask_allows_reference(&spec, 0, 10, 6));
}

static void test_decode_alignment(void **state)
{
    (void)state;
    /* One query over 13 keys sits at position 12: it sees everything (bottom-right aligned). */
    lp_mask_spec spec = lp_mask_causal(1, 13);
    int64_t lo, hi;
    lp_mask_row_range(&spec, 0, 0, &lo, &hi);
    assert_int_equal(lo, 0);
    assert_int_equal(hi, 13);
    spec.window = 4;
    lp_mask_row_range(&spec, 0, 0, &lo, &hi);
    assert_int_equal(lo, 9);
    assert_int_equal(hi, 13);
    /* Chunked prefill: 5 queries over 13 keys are positions 8..12. */
    spec = lp_mask_causal(5, 13);
    lp_mask_row_range(&spec, 0, 0, &lo, &hi);
    assert_int_equal(hi, 9);
    lp_leak_cell_stats st;
    memset(&st, 0, sizeof st);
    lp_leak_check_mask_spec(&spec, 1, &st);
    assert_int_equal(st.leak_count, 0);
    assert_int_equal(st.blocked_count, 0);

    /* Through the attention kernel: 3 queries over 20 keys, window 5: probabilities are zero
     * exactly outside keys pos-4 .. pos, with pos = 17 + row, and each row sums to 1. */
    enum { NQ = 3, NK = 20, HD = 8 };
    float q[NQ * HD], k[NK * HD], v[NK * HD], out[NQ * HD], probs[NQ * NK];
    uint32_t s = 12345;
    for (int i = 0; i < NK * HD; i++) {
        s = s * 1664525u + 1013904223u;
        k[i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
        s = s * 1664525u + 1013904223u;
        v[i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
        if (i < NQ * HD)
            q[i] = k[i] * 2.0f;
    }
    spec = lp_mask_causal(NQ, NK);
    spec.window = 5;
    for (int pass = 0; pass < 2; pass++) {
        lp_attn_args args;
        memset(&args, 0, sizeof args);
        args.q = q;
        args.k = k;
        args.v = v;
        args.out = out;
        args.n_q = NQ;
        args.n_k = NK;
        args.head_dim = HD;
        args.v_dim = HD;
        args.q_stride = HD;
        args.k_stride = HD;
        args.v_stride = HD;
        args.out_stride = HD;
        args.scale = 0.35f;
        args.mask = &spec;
        args.probs = probs;
        for (int i = 0; i < NQ * NK; i++)
            probs[i] = NAN;
        if (pass == 0)
            lp_attention(&args);
        else
            lp_attention_ref(&args);
        memset(&st, 0, sizeof st);
        for (int r = 0; r < NQ; r++) {
            double sum = 0.0;
            for (int j = 0; j < NK; j++) {
                lp_leak_cell_add(&st, &spec, 0, 0, r, j, probs[r * NK + j] != 0.0f);
                sum += (double)probs[r * NK + j];
            }
            assert_true(fabs(sum - 1.0) < LP_LEAK_ROW_SUM_TOL);
        }
        assert_int_equal(st.leak_count, 0);
        assert_int_equal(st.blocked_count, 0);
        assert_true(probs[0 * NK + 13] > 0.0f && probs[0 * NK + 12] == 0.0f); /* pos 17: 13..17 */
    }
}

/* Every fault, in the configuration that exposes it, is caught and named; the clean engine has
 * no leak or blocked cell anywhere. */
static void test_engine_faults(void **state)
{
    (void)state;
    static const int64_t pl[3] = {0, 3, 0}, pr[3] = {0, 0, 4};
    struct {
        lp_mask_fault fault;
        int64_t window;
        bool padded;
        int64_t first_q, first_k, first_b;
    } cases[] = {
        {LP_MASK_FAULT_OFF_BY_ONE, 0, false, 0, 1, 0},
        {LP_MASK_FAULT_TRANSPOSED, 0, false, 0, 1, 0},
        {LP_MASK_FAULT_NO_MASK, 0, false, 0, 1, 0},
        {LP_MASK_FAULT_WINDOW_PLUS_ONE, 4, false, 4, 0, 0},
        {LP_MASK_FAULT_PAD_AXIS, 0, true, 3, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lp_mask_spec spec = lp_mask_causal(13, 13);
        spec.window = cases[i].window;
        if (cases[i].padded) {
            spec.pad_left = pl;
            spec.pad_right = pr;
        }
        lp_leak_cell_stats st;
        memset(&st, 0, sizeof st);
        lp_leak_check_mask_spec(&spec, 3, &st);
        assert_int_equal(st.leak_count, 0);
        assert_int_equal(st.blocked_count, 0);
        assert_string_equal(lp_leak_diagnose(&st), "none");
        spec.fault = cases[i].fault;
        memset(&st, 0, sizeof st);
        lp_leak_check_mask_spec(&spec, 3, &st);
        assert_true(st.leak_count > 0);
        assert_string_equal(lp_leak_diagnose(&st), lp_mask_fault_name(cases[i].fault));
        assert_int_equal(st.first_leak.batch, cases[i].first_b);
        assert_int_equal(st.first_leak.query, cases[i].first_q);
        assert_int_equal(st.first_leak.key, cases[i].first_k);
    }
    /* off-by-one on 13 tokens of 3 unpadded items: exactly one leak per row but the last */
    lp_mask_spec spec = lp_mask_causal(13, 13);
    spec.fault = LP_MASK_FAULT_OFF_BY_ONE;
    lp_leak_cell_stats st;
    memset(&st, 0, sizeof st);
    lp_leak_check_mask_spec(&spec, 3, &st);
    assert_int_equal(st.leak_count, 3 * 12);
    assert_int_equal(st.leak_next, 3 * 12);
}

/* The alignment check on crafted logits: a model peaked on the current token is flagged, one
 * peaked on the next passes, a uniform one and one barely tipped toward the current token (what
 * a random tied model does) are inconclusive: no signal to judge the labels by. */
static void test_alignment(void **state)
{
    (void)state;
    enum { N = 6, V = 16 };
    int32_t ids[N] = {3, 7, 1, 12, 5, 9};
    float logits[N * V];
    double next, same;
    for (int mode = 0; mode < 4; mode++) {
        for (int t = 0; t < N; t++)
            for (int v = 0; v < V; v++) {
                int target = mode == 0 || mode == 3 ? ids[t]
                             : mode == 1             ? (t + 1 < N ? ids[t + 1] : 0)
                                                     : -1;
                float peak = mode == 3 ? 0.5f : 5.0f;
                logits[t * V + v] = v == target ? peak : 0.0f;
            }
        lp_leak_alignment_verdict verdict = lp_leak_alignment(logits, V, ids, N, &next, &same);
        if (mode == 0) {
            assert_int_equal(verdict, LP_ALIGNMENT_FLAGGED);
            assert_true(same < next);
            /* peaked: p = e^5 / (e^5 + 15) */
            assert_true(fabs(same - log1p(15.0 / exp(5.0))) < 1e-9);
        } else if (mode == 1) {
            assert_int_equal(verdict, LP_ALIGNMENT_OK);
            assert_true(next < same);
        } else if (mode == 2) {
            assert_int_equal(verdict, LP_ALIGNMENT_INCONCLUSIVE);
            assert_true(fabs(same - log((double)V)) < 1e-9 && fabs(next - same) < 1e-9);
        } else {
            /* current token favoured, but by 0.47 nats over uniform: not judged */
            assert_int_equal(verdict, LP_ALIGNMENT_INCONCLUSIVE);
            assert_true(same < next && log((double)V) - same < LP_LEAK_ALIGNMENT_MIN_SIGNAL);
        }
    }
    /* one token has no next one to predict */
    assert_int_equal(lp_leak_alignment(logits, V, ids, 1, &next, &same),
                     LP_ALIGNMENT_INCONCLUSIVE);
}

/* ---- mask tensors ---- */

enum { T = 12 };

/* A few future cells shown are "stray cells" with their coordinates; "no-mask" and
 * "off-by-one" need their whole pattern (every future cell, every (q, q + 1)). */
static void test_mask_stray_cells(void **state)
{
    (void)state;
    lp_error err = {0};
    lp_leak_mask_report rep;
    int64_t shape2[2] = {T, T}, shape4[4] = {2, 3, T, T};
    struct {
        const char *name;
        cell_rule rule;
        int64_t q, k; /* one more cell allowed (q < 0: none) */
        int64_t clear_q, clear_k; /* one cell hidden (clear_q < 0: none) */
        int64_t leaks;
        const char *diagnosis;
    } cases[] = {
        {"stray_far.npy", RULE_CAUSAL, 2, 7, -1, -1, 1, "stray cells"},
        {"stray_next.npy", RULE_CAUSAL, 4, 5, -1, -1, 1, "stray cells"},
        {"stray_last.npy", RULE_CAUSAL, 0, T - 1, -1, -1, 1, "stray cells"},
        /* all of the upper triangle but one cell: not no-mask */
        {"almost_ones.npy", RULE_ALL, -1, -1, 3, 9, T * (T - 1) / 2 - 1, "stray cells"},
        /* the super-diagonal but one cell: not off-by-one */
        {"almost_obo.npy", RULE_OFF_BY_ONE, -1, -1, 6, 7, T - 2, "stray cells"},
        {"ones.npy", RULE_ALL, -1, -1, -1, -1, T * (T - 1) / 2, "no-mask"},
        {"obo.npy", RULE_OFF_BY_ONE, -1, -1, -1, -1, T - 1, "off-by-one"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t *m = bool_mask(1, 1, T, cases[i].rule, 0, -1, -1, RULE_CAUSAL);
        if (cases[i].q >= 0)
            m[cases[i].q * T + cases[i].k] = 1;
        if (cases[i].clear_q >= 0)
            m[cases[i].clear_q * T + cases[i].clear_k] = 0;
        assert_int_equal(check_npy(cases[i].name, "|b1", 2, shape2, m, T * T, "causal", &rep,
                                   &err),
                         LP_OK);
        if (strcmp(rep.diagnosis, cases[i].diagnosis) != 0)
            print_error("case %s: %s\n", cases[i].name, rep.diagnosis);
        assert_string_equal(rep.diagnosis, cases[i].diagnosis);
        assert_int_equal(rep.leak_count, cases[i].leaks);
        if (cases[i].q >= 0) {
            assert_int_equal(rep.n_leaks_listed, 1);
            assert_int_equal(rep.leaks[0].query, cases[i].q);
            assert_int_equal(rep.leaks[0].key, cases[i].k);
        }
        lp_leak_mask_report_free(&rep);
        free(m);
    }
    /* [B, H, T, T]: one stray cell in item 1, head 2 */
    uint8_t *m = bool_mask(2, 3, T, RULE_CAUSAL, 0, -1, -1, RULE_CAUSAL);
    m[((1 * 3 + 2) * T + 1) * T + 8] = 1;
    assert_int_equal(check_npy("stray4.npy", "|b1", 4, shape4, m, 2 * 3 * T * T, "causal", &rep,
                               &err),
                     LP_OK);
    assert_string_equal(rep.diagnosis, "stray cells");
    assert_int_equal(rep.leak_count, 1);
    assert_int_equal(rep.leaks[0].batch, 1);
    assert_int_equal(rep.leaks[0].head, 2);
    assert_int_equal(rep.leaks[0].query, 1);
    assert_int_equal(rep.leaks[0].key, 8);
    lp_leak_mask_report_free(&rep);
    free(m);
}

static void test_mask_bool_npy(void **state)
{
    (void)state;
    lp_error err = {0};
    lp_leak_mask_report rep;
    int64_t shape2[2] = {T, T};
    struct {
        const char *name;
        cell_rule rule;
        int64_t w;
        const char *kind;
        int64_t leaks, blocked;
        const char *diagnosis;
    } cases[] = {
        {"causal.npy", RULE_CAUSAL, 0, "causal", 0, 0, "none"},
        {"offbyone.npy", RULE_OFF_BY_ONE, 0, "causal", T - 1, 0, "off-by-one"},
        {"transposed.npy", RULE_TRANSPOSED, 0, "causal", T * (T - 1) / 2, T * (T - 1) / 2,
         "transposed"},
        {"ones.npy", RULE_ALL, 0, "causal", T * (T - 1) / 2, 0, "no-mask"},
        /* window 4 as causal: blocked only, sum over q of max(0, q - 3) = 0+..+8 = 36 */
        {"w4_causal.npy", RULE_WINDOW, 4, "causal", 0, 36, "blocked"},
        {"w4_w4.npy", RULE_WINDOW, 4, "window:4", 0, 0, "none"},
        /* q - k == 3 for q >= 3: the mask's window is one wider than window:3 */
        {"w4_w3.npy", RULE_WINDOW, 4, "window:3", T - 3, 0, "window+1"},
        {"w4_w5.npy", RULE_WINDOW, 4, "window:5", 0, T - 4, "blocked"}, /* q - k == 4, q >= 4 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t *m = bool_mask(1, 1, T, cases[i].rule, cases[i].w, -1, -1, RULE_CAUSAL);
        assert_int_equal(check_npy(cases[i].name, "|b1", 2, shape2, m, T * T, cases[i].kind, &rep,
                                   &err),
                         LP_OK);
        if (rep.leak_count != cases[i].leaks || rep.blocked_count != cases[i].blocked)
            print_error("case %s: %lld leaks, %lld blocked\n", cases[i].name,
                        (long long)rep.leak_count, (long long)rep.blocked_count);
        assert_int_equal(rep.leak_count, cases[i].leaks);
        assert_int_equal(rep.blocked_count, cases[i].blocked);
        assert_int_equal(rep.encoding, LP_MASK_ENC_BOOL);
        assert_int_equal(rep.nan_rows, 0);
        assert_string_equal(rep.diagnosis, cases[i].diagnosis);
        assert_int_equal(lp_leak_mask_passed(&rep), cases[i].leaks == 0 && cases[i].blocked == 0);
        if (cases[i].rule == RULE_OFF_BY_ONE) {
            /* every leak is (q, q + 1), listed in row-major order */
            assert_int_equal(rep.n_leaks_listed, T - 1);
            for (int64_t j = 0; j < rep.n_leaks_listed; j++) {
                assert_int_equal(rep.leaks[j].query, j);
                assert_int_equal(rep.leaks[j].key, j + 1);
                assert_int_equal(rep.leaks[j].batch, 0);
                assert_int_equal(rep.leaks[j].head, 0);
            }
        }
        if (cases[i].rule == RULE_TRANSPOSED) {
            assert_int_equal(rep.leaks[0].query, 0);
            assert_int_equal(rep.leaks[0].key, 1);
            assert_int_equal(rep.blocked[0].query, 1);
            assert_int_equal(rep.blocked[0].key, 0);
        }
        if (strcmp(cases[i].name, "w4_w3.npy") == 0) {
            assert_int_equal(rep.leaks[0].query, 3);
            assert_int_equal(rep.leaks[0].key, 0);
        }
        if (strcmp(cases[i].name, "w4_w5.npy") == 0) {
            assert_int_equal(rep.blocked[0].query, 4);
            assert_int_equal(rep.blocked[0].key, 0);
        }
        lp_leak_mask_report_free(&rep);
        free(m);
    }

    /* --true-means masked: the upper triangle set. Read with the wrong polarity every cell
     * flips. */
    uint8_t *upper = bool_mask(1, 1, T, RULE_TRANSPOSED, 0, -1, -1, RULE_CAUSAL);
    for (int i = 0; i < T; i++)
        upper[i * T + i] = 0; /* strictly above the diagonal */
    char path[512];
    tmp_path(path, sizeof path, "upper.npy");
    write_npy(path, "|u1", 2, shape2, upper, T * T);
    lp_leak_mask_opts mo;
    lp_leak_mask_opts_init(&mo);
    mo.true_means_masked = true;
    assert_int_equal(lp_leak_check_mask_file(path, &mo, &rep, &err), LP_OK);
    assert_true(lp_leak_mask_passed(&rep));
    lp_leak_mask_report_free(&rep);
    mo.true_means_masked = false;
    assert_int_equal(lp_leak_check_mask_file(path, &mo, &rep, &err), LP_OK);
    assert_int_equal(rep.leak_count, T * (T - 1) / 2);
    assert_int_equal(rep.blocked_count, T * (T + 1) / 2);
    assert_int_equal(rep.fully_masked_rows, 1); /* the last row: only its future is set */
    assert_int_equal(rep.masked_rows[0].query, T - 1);
    lp_leak_mask_report_free(&rep);
    unlink(path);
    free(upper);
}

static void test_mask_heads_and_docs(void **state)
{
    (void)state;
    lp_error err = {0};
    lp_leak_mask_report rep;
    /* [2, 3, T, T] with one off-by-one head (batch 1, head 2) */
    int64_t shape4[4] = {2, 3, T, T};
    uint8_t *m = bool_mask(2, 3, T, RULE_CAUSAL, 0, 1, 2, RULE_OFF_BY_ONE);
    assert_int_equal(check_npy("heads.npy", "|b1", 4, shape4, m, 2 * 3 * T * T, "causal", &rep,
                               &err),
                     LP_OK);
    assert_int_equal(rep.n_batch, 2);
    assert_int_equal(rep.n_heads, 3);
    assert_int_equal(rep.leak_count, T - 1);
    for (int64_t j = 0; j < rep.n_leaks_listed; j++) {
        assert_int_equal(rep.leaks[j].batch, 1);
        assert_int_equal(rep.leaks[j].head, 2);
        assert_int_equal(rep.leaks[j].key, rep.leaks[j].query + 1);
    }
    lp_leak_mask_report_free(&rep);
    free(m);
    /* [B, 1, T, T] broadcast over heads */
    int64_t shape_b1[4] = {2, 1, T, T};
    m = bool_mask(2, 1, T, RULE_CAUSAL, 0, -1, -1, RULE_CAUSAL);
    assert_int_equal(check_npy("b1.npy", "|b1", 4, shape_b1, m, 2 * T * T, "causal", &rep, &err),
                     LP_OK);
    assert_true(lp_leak_mask_passed(&rep));
    lp_leak_mask_report_free(&rep);
    free(m);

    /* packed documents */
    char ids_path[512], kind[600];
    tmp_path(ids_path, sizeof ids_path, "docs.txt");
    FILE *f = fopen(ids_path, "w");
    assert_non_null(f);
    for (int i = 0; i < T; i++)
        fprintf(f, "%s%lld", i ? "," : "", (long long)docs[i]);
    fprintf(f, "\n");
    fclose(f);
    snprintf(kind, sizeof kind, "doc:%s", ids_path);
    int64_t shape2[2] = {T, T};
    m = bool_mask(1, 1, T, RULE_DOC, 0, -1, -1, RULE_CAUSAL);
    assert_int_equal(check_npy("doc.npy", "|b1", 2, shape2, m, T * T, kind, &rep, &err), LP_OK);
    assert_true(lp_leak_mask_passed(&rep));
    lp_leak_mask_report_free(&rep);
    /* the same mask read as plain causal: blocked cells across documents, no leak */
    assert_int_equal(check_npy("doc.npy", "|b1", 2, shape2, m, T * T, "causal", &rep, &err), LP_OK);
    assert_int_equal(rep.leak_count, 0);
    assert_true(rep.blocked_count > 0);
    lp_leak_mask_report_free(&rep);
    free(m);
    /* a plain causal mask on packed documents leaks across every boundary: first at query 3
     * (document 1) seeing key 0 (document 0) */
    m = bool_mask(1, 1, T, RULE_CAUSAL, 0, -1, -1, RULE_CAUSAL);
    assert_int_equal(check_npy("causal_doc.npy", "|b1", 2, shape2, m, T * T, kind, &rep, &err),
                     LP_OK);
    /* causal cells minus same-document cells: 78 - (6 + 10 + 3 + 6) = 53 */
    assert_int_equal(rep.leak_count, 53);
    assert_int_equal(rep.blocked_count, 0);
    assert_int_equal(rep.leaks[0].query, 3);
    assert_int_equal(rep.leaks[0].key, 0);
    assert_string_equal(rep.diagnosis, "cross-document");
    lp_leak_mask_report_free(&rep);
    free(m);
    /* per-item documents: [2, 1, T, T] whose item 1 packs other documents, ids as .npy [2, T] */
    static const int64_t docs1[T] = {0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
    int64_t ids2[2 * T];
    uint8_t m2[2 * T * T];
    for (int b = 0; b < 2; b++)
        for (int q = 0; q < T; q++) {
            ids2[b * T + q] = b ? docs1[q] : docs[q];
            for (int k = 0; k < T; k++)
                m2[(b * T + q) * T + k] = k <= q && (b ? docs1[k] == docs1[q] : docs[k] == docs[q]);
        }
    char ids_npy[512], kind_npy[600];
    int64_t ids_shape[2] = {2, T};
    tmp_path(ids_npy, sizeof ids_npy, "docs2.npy");
    write_npy(ids_npy, "<i8", 2, ids_shape, ids2, sizeof ids2);
    snprintf(kind_npy, sizeof kind_npy, "doc:%s", ids_npy);
    int64_t shape_b2[4] = {2, 1, T, T};
    assert_int_equal(check_npy("doc2.npy", "|b1", 4, shape_b2, m2, sizeof m2, kind_npy, &rep, &err),
                     LP_OK);
    assert_true(lp_leak_mask_passed(&rep));
    lp_leak_mask_report_free(&rep);
    /* item 0's documents applied to both items: item 1's mask differs */
    assert_int_equal(check_npy("doc2.npy", "|b1", 4, shape_b2, m2, sizeof m2, kind, &rep, &err),
                     LP_OK);
    assert_false(lp_leak_mask_passed(&rep));
    assert_int_equal(rep.leak_count + rep.blocked_count > 0, 1);
    assert_true(rep.n_leaks_listed == 0 || rep.leaks[0].batch == 1);
    lp_leak_mask_report_free(&rep);
    unlink(ids_npy);
    /* ids of the wrong length are bad input */
    int64_t shape_small[2] = {5, 5};
    m = bool_mask(1, 1, 5, RULE_CAUSAL, 0, -1, -1, RULE_CAUSAL);
    assert_int_not_equal(check_npy("doc5.npy", "|b1", 2, shape_small, m, 25, kind, &rep, &err),
                         LP_OK);
    assert_non_null(strstr(err.msg, "document ids"));
    free(m);
    unlink(ids_path);
}

/* Padded batches: [3, 1, T, T] for an unpadded item, 3 left-padding and 4 right-padding
 * tokens. The correct mask passes with the padding given; the padding on the wrong axis leaks
 * the left padding to real queries; Hugging Face's unmasked padding rows are not compared. */
/* Three items of T tokens: unpadded, 3 padding tokens on the left, 4 on the right. */
enum { PAD_B = 3 };

static void padding_real(uint8_t *real)
{
    static const int64_t pl[PAD_B] = {0, 3, 0}, pr[PAD_B] = {0, 0, 4};
    for (int b = 0; b < PAD_B; b++)
        for (int t = 0; t < T; t++)
            real[b * T + t] = t >= pl[b] && t < T - pr[b];
}

static void test_mask_padding(void **state)
{
    (void)state;
    enum { B = PAD_B };
    uint8_t real[B * T];
    padding_real(real);
    uint8_t good[B * T * T], axis[B * T * T], unmasked_rows[B * T * T];
    for (int b = 0; b < B; b++)
        for (int q = 0; q < T; q++)
            for (int k = 0; k < T; k++) {
                int i = (b * T + q) * T + k;
                good[i] = k <= q && real[b * T + k] && real[b * T + q];
                axis[i] = k <= q && real[b * T + q];        /* padding on the query axis */
                unmasked_rows[i] = real[b * T + q] ? good[i] : 1; /* HF: padded rows see all */
            }
    int64_t shape[4] = {B, 1, T, T};
    lp_error err = {0};
    lp_leak_mask_opts mo;
    lp_leak_mask_opts_init(&mo);
    mo.real = real;
    mo.n_real_batch = B;
    mo.real_len = T;
    lp_leak_mask_report rep;
    assert_int_equal(lp_leak_check_mask(good, LP_DTYPE_BOOL, 4, shape, "good", &mo, &rep, &err),
                     LP_OK);
    assert_true(lp_leak_mask_passed(&rep));
    assert_int_equal(rep.padding_rows, 3 + 4);
    assert_int_equal(rep.fully_masked_rows, 0);
    lp_leak_mask_report_free(&rep);
    assert_int_equal(lp_leak_check_mask(unmasked_rows, LP_DTYPE_BOOL, 4, shape, "hf", &mo, &rep,
                                        &err),
                     LP_OK);
    assert_true(lp_leak_mask_passed(&rep));
    lp_leak_mask_report_free(&rep);
    assert_int_equal(lp_leak_check_mask(axis, LP_DTYPE_BOOL, 4, shape, "axis", &mo, &rep, &err),
                     LP_OK);
    /* item 1: real queries 3..11 each see padding keys 0..2 */
    assert_int_equal(rep.leak_count, 9 * 3);
    assert_int_equal(rep.blocked_count, 0);
    assert_int_equal(rep.leaks[0].batch, 1);
    assert_int_equal(rep.leaks[0].query, 3);
    assert_int_equal(rep.leaks[0].key, 0);
    assert_string_equal(rep.diagnosis, "pad-axis");
    lp_leak_mask_report_free(&rep);
    /* without the padding, the correct mask is blind to padding: blocked cells, not leaks */
    mo.real = NULL;
    assert_int_equal(lp_leak_check_mask(good, LP_DTYPE_BOOL, 4, shape, "good", &mo, &rep, &err),
                     LP_OK);
    assert_int_equal(rep.leak_count, 0);
    assert_true(rep.blocked_count > 0);
    assert_int_equal(rep.fully_masked_rows, 3 + 4);
    lp_leak_mask_report_free(&rep);
    /* a shared padding row and a wrong length */
    mo.real = real + T; /* item 1's padding for every item */
    mo.n_real_batch = 1;
    assert_int_equal(lp_leak_check_mask(good, LP_DTYPE_BOOL, 4, shape, "good", &mo, &rep, &err),
                     LP_OK);
    assert_false(lp_leak_mask_passed(&rep)); /* items 0 and 2 show keys 0..2 */
    lp_leak_mask_report_free(&rep);
    mo.real_len = T - 1;
    assert_int_equal(lp_leak_check_mask(good, LP_DTYPE_BOOL, 4, shape, "good", &mo, &rep, &err),
                     LP_ERR_USAGE);
}

/* The padding file readers: text lines and .npy. */
static void test_padding_files(void **state)
{
    (void)state;
    enum { B = PAD_B };
    uint8_t real[B * T];
    padding_real(real);
    lp_error err = {0};
    char path[512];
    tmp_path(path, sizeof path, "pad.txt");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "1,1,1,1\n0 0 1 1\n\n1,1,1,0\n");
    fclose(f);
    uint8_t *got;
    int64_t nb, len;
    assert_int_equal(lp_leak_read_padding(path, &got, &nb, &len, &err), LP_OK);
    assert_int_equal(nb, 3);
    assert_int_equal(len, 4);
    assert_int_equal(got[4], 0);
    assert_int_equal(got[6], 1);
    assert_int_equal(got[11], 0);
    free(got);
    f = fopen(path, "w");
    fprintf(f, "1,1,1\n1,1\n");
    fclose(f);
    assert_int_equal(lp_leak_read_padding(path, &got, &nb, &len, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "line 2 has 2 values"));
    f = fopen(path, "w");
    fprintf(f, "1,2\n");
    fclose(f);
    assert_int_equal(lp_leak_read_padding(path, &got, &nb, &len, &err), LP_ERR_FORMAT);
    unlink(path);
    tmp_path(path, sizeof path, "pad.npy");
    int64_t pshape[2] = {B, T};
    int64_t wide[B * T];
    for (int i = 0; i < B * T; i++)
        wide[i] = real[i];
    write_npy(path, "<i8", 2, pshape, wide, sizeof wide);
    assert_int_equal(lp_leak_read_padding(path, &got, &nb, &len, &err), LP_OK);
    assert_int_equal(nb, B);
    assert_int_equal(len, T);
    assert_memory_equal(got, real, sizeof real);
    free(got);
    unlink(path);
}

/* Additive f32 masks: the fill value in fp32, fp16 and bf16. */
static float *additive_mask(float fill, bool blind_row0)
{
    float *m = malloc(T * T * sizeof(float));
    assert_non_null(m);
    for (int q = 0; q < T; q++)
        for (int k = 0; k < T; k++)
            m[q * T + k] = k <= q && !(blind_row0 && q == 0) ? 0.0f : fill;
    return m;
}

/* Additive fills, as a causal [T, T] f32 mask, and what each becomes in f32, f16 and bf16. */
typedef struct fill_case {
    const char *name;
    float fill;
    bool blind_row0;     /* row 0 fully masked too */
    bool passed, weak;
    int64_t nan_rows;    /* softmax NaN as given (f32) */
    int64_t leaks;
    bool overflows[3];   /* f32, f16, bf16: a finite fill that rounds to -inf */
    int64_t nan_rows_in[3];
} fill_case;

static const fill_case fill_cases[] = {
    /* -inf is exact; fp16 and bf16 keep it; no fully masked row, so no NaN */
    {"-inf", -INFINITY, false, true, false, 0, 0, {false, false, false}, {0, 0, 0}},
    /* with a fully masked row: NaN in every dtype, and that row's key 0 is blocked */
    {"-inf, row 0 blind", -INFINITY, true, false, false, 1, 0, {false, false, false}, {1, 1, 1}},
    /* fine in fp32 and bf16, -inf in fp16: the blind row is NaN only in fp16 */
    {"-1e9, row 0 blind", -1e9f, true, false, false, 0, 0, {false, true, false}, {0, 1, 0}},
    /* representable in fp16 */
    {"-1e4", -1e4f, false, true, false, 0, 0, {false, false, false}, {0, 0, 0}},
    /* too weak: its cells count as visible, so the whole future leaks */
    {"-100", -100.0f, false, false, true, 0, T * (T - 1) / 2, {false, false, false}, {0, 0, 0}},
    /* torch.finfo(float32).min: exact in fp32, -inf in fp16 and bf16 (bf16's largest finite
     * value is below it) */
    {"finfo(f32).min", -3.4028234663852886e38f, false, true, false, 0, 0, {false, true, true},
     {0, 0, 0}},
};

static void check_fill_case(const fill_case *c, lp_leak_mask_report *rep, lp_error *err)
{
    int64_t shape2[2] = {T, T};
    float *m = additive_mask(c->fill, c->blind_row0);
    assert_int_equal(check_npy("fill.npy", "<f4", 2, shape2, m, T * T * 4, "causal", rep, err),
                     LP_OK);
    free(m);
    assert_int_equal(rep->encoding, LP_MASK_ENC_ADDITIVE);
    assert_true(rep->has_fill && rep->fill == c->fill);
    if (lp_leak_mask_passed(rep) != c->passed || rep->weak_fill != c->weak ||
        rep->nan_rows != c->nan_rows || rep->leak_count != c->leaks)
        fail_msg("%s: passed %d weak %d nan_rows %lld leaks %lld", c->name,
                 lp_leak_mask_passed(rep), rep->weak_fill, (long long)rep->nan_rows,
                 (long long)rep->leak_count);
    for (int d = 0; d < 3; d++)
        if (rep->fills[d].overflows != c->overflows[d] ||
            rep->fills[d].nan_rows != c->nan_rows_in[d])
            fail_msg("%s: %s overflows %d, nan rows %lld", c->name,
                     lp_dtype_name(rep->fills[d].dtype), rep->fills[d].overflows,
                     (long long)rep->fills[d].nan_rows);
    assert_int_equal(rep->fully_masked_rows, c->blind_row0);
    assert_int_equal(rep->blocked_count, c->blind_row0);
}

/* Score gaps: how far above a visible key a masked one must score to get weight. */
static void test_mask_fill_gaps(void **state)
{
    (void)state;
    lp_error err = {0};
    lp_leak_mask_report rep;
    for (size_t i = 0; i < sizeof fill_cases / sizeof fill_cases[0]; i++) {
        check_fill_case(&fill_cases[i], &rep, &err);
        const fill_case *c = &fill_cases[i];
        if (c->fill == -1e4f) { /* score + fill overflows fp16 only below about -55520 */
            assert_true(rep.fills[1].value == -10000.0f);
            assert_true(fabs(rep.fills[1].overflow_score - -55520.0) < 1.0);
            assert_true(fabs(rep.leak_gap - (1e4 - 20.72)) < 0.01);
        }
        if (c->fill == -100.0f) /* the report says the score gap at which it leaks */
            assert_true(fabs(rep.leak_gap - 79.28) < 0.01);
        if (isinf(c->fill))
            assert_true(isinf(rep.fills[1].value) && isinf(rep.leak_gap));
        if (isfinite(c->fill) && c->fill < -1e38f) /* any negative score overflows it in f32 */
            assert_true(rep.fills[0].overflow_score < -1e30 &&
                        rep.fills[0].overflow_score > -1e32);
        lp_leak_mask_report_free(&rep);
    }
}

/* NaN and +inf cells; a mask stored as f16. */
static void test_mask_additive(void **state)
{
    (void)state;
    lp_error err = {0};
    lp_leak_mask_report rep;
    int64_t shape2[2] = {T, T};
    /* a NaN and a +inf cell: both rows give NaN; NaN cells count as visible (leaks above the
     * diagonal) */
    float *m = additive_mask(-INFINITY, false);
    m[2 * T + 5] = NAN;
    m[4 * T + 1] = INFINITY;
    assert_int_equal(check_npy("nan.npy", "<f4", 2, shape2, m, T * T * 4, "causal", &rep, &err),
                     LP_OK);
    assert_int_equal(rep.nan_cells, 2);
    assert_int_equal(rep.nan_rows, 2);
    assert_int_equal(rep.leak_count, 1);
    assert_int_equal(rep.leaks[0].query, 2);
    assert_int_equal(rep.leaks[0].key, 5);
    assert_false(lp_leak_mask_passed(&rep));
    lp_leak_mask_report_free(&rep);
    free(m);

    /* f16 storage of -65504 (finfo(float16).min): in range, but any negative score overflows */
    uint16_t h[T * T];
    for (int q = 0; q < T; q++)
        for (int k = 0; k < T; k++)
            h[q * T + k] = k <= q ? 0 : lp_f32_to_f16(-65504.0f);
    assert_int_equal(check_npy("f16.npy", "<f2", 2, shape2, h, sizeof h, "causal", &rep, &err),
                     LP_OK);
    assert_true(lp_leak_mask_passed(&rep));
    assert_true(rep.fill == -65504.0f);
    assert_true(rep.fills[1].overflow_score > -20.0 && rep.fills[1].overflow_score < 0.0);
    lp_leak_mask_report_free(&rep);
}

/* One causal [T, T] bool tensor named "mask" in a .safetensors file. */
static void write_causal_safetensors(const char *path)
{
    lp_error err = {0};
    lp_st_writer *w;
    assert_int_equal(lp_st_writer_create(&w, &err), LP_OK);
    uint8_t *c = bool_mask(1, 1, T, RULE_CAUSAL, 0, -1, -1, RULE_CAUSAL);
    int64_t shape_tt[2] = {T, T};
    assert_int_equal(lp_st_writer_add(w, "mask", LP_DTYPE_BOOL, 2, shape_tt, c, &err), LP_OK);
    assert_int_equal(lp_st_writer_write(w, path, &err), LP_OK);
    lp_st_writer_destroy(w);
    free(c);
}

/* Corrupt headers of a mask file: each an error naming the problem, never a read past the
 * file. */
static void check_corrupt_headers(const char *inner)
{
    lp_error err = {0};
    lp_leak_mask_report rep;
    lp_leak_mask_opts mo;
    lp_leak_mask_opts_init(&mo);
    write_causal_safetensors(inner);
    FILE *f, *g = fopen(inner, "rb");
    assert_non_null(g);
    uint8_t image[4096];
    size_t size = fread(image, 1, sizeof image, g);
    fclose(g);
    assert_true(size > 8 && size < sizeof image);
    struct {
        const char *what;
        size_t at;
        const char *bytes;
        size_t n;
        size_t cut; /* 0 = keep the size */
        const char *msg;
    } bad[] = {
        {"length past the end", 0, "\xff\xff\x00\x00\x00\x00\x00\x00", 8, 0, "exceeds the file"},
        {"truncated data", 0, NULL, 0, 0, "outside the"},
        {"not JSON", 8, "[", 1, 0, "header byte"},
        {"short file", 0, NULL, 0, 5, "shorter than"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t copy[4096];
        memcpy(copy, image, size);
        size_t n = size;
        if (bad[i].bytes)
            memcpy(copy + bad[i].at, bad[i].bytes, bad[i].n);
        if (i == 1)
            n = size - 7; /* the data offsets now point past the end */
        if (bad[i].cut)
            n = bad[i].cut;
        f = fopen(inner, "wb");
        assert_non_null(f);
        fwrite(copy, 1, n, f);
        fclose(f);
        lp_status st = lp_leak_check_mask_file(inner, &mo, &rep, &err);
        if (st == LP_OK || !strstr(err.msg, bad[i].msg))
            fail_msg("%s: status %d, '%s'", bad[i].what, (int)st, err.msg);
    }
}

static void test_mask_safetensors(void **state)
{
    (void)state;
    lp_error err = {0};
    lp_leak_mask_report rep;
    char path[512];
    tmp_path(path, sizeof path, "mask.safetensors");
    lp_st_writer *w;
    assert_int_equal(lp_st_writer_create(&w, &err), LP_OK);
    int64_t shape4[4] = {1, 2, T, T};
    uint8_t *m = bool_mask(1, 2, T, RULE_WINDOW, 3, 0, 1, RULE_ALL);
    assert_int_equal(lp_st_writer_add(w, "attention_mask", LP_DTYPE_BOOL, 4, shape4, m, &err),
                     LP_OK);
    assert_int_equal(lp_st_writer_write(w, path, &err), LP_OK);
    lp_st_writer_destroy(w);
    lp_leak_mask_opts mo;
    lp_leak_mask_opts_init(&mo);
    assert_int_equal(lp_leak_def_parse("window:3", &mo.def, &err), LP_OK);
    assert_int_equal(lp_leak_check_mask_file(path, &mo, &rep, &err), LP_OK);
    /* head 1 sees everything: 144 - (3 + 2 + 1 + 3*9... ) -> all cells outside the window */
    int64_t window_cells = 1 + 2 + 3 * (T - 2);
    assert_int_equal(rep.leak_count, T * T - window_cells);
    assert_int_equal(rep.blocked_count, 0);
    assert_int_equal(rep.leaks[0].head, 1);
    assert_int_equal(rep.leaks[0].query, 0);
    assert_int_equal(rep.leaks[0].key, 1);
    lp_leak_mask_report_free(&rep);
    free(m);

    /* two tensors: the name must be given */
    assert_int_equal(lp_st_writer_create(&w, &err), LP_OK);
    float *a = additive_mask(-INFINITY, false);
    int64_t shape2[2] = {T, T};
    assert_int_equal(lp_st_writer_add_f32_as(w, "causal_bf16", LP_DTYPE_BF16, 2, shape2, a, &err),
                     LP_OK);
    assert_int_equal(lp_st_writer_add_f32_as(w, "other", LP_DTYPE_F32, 2, shape2, a, &err), LP_OK);
    uint8_t f8[T * T] = {0};
    assert_int_equal(lp_st_writer_add(w, "fp8", LP_DTYPE_F8_E4M3, 2, shape2, f8, &err), LP_OK);
    assert_int_equal(lp_st_writer_write(w, path, &err), LP_OK);
    lp_st_writer_destroy(w);
    assert_int_equal(lp_leak_check_mask_file(path, &mo, &rep, &err), LP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--tensor"));
    mo.tensor_name = "causal_bf16";
    lp_leak_def_free(&mo.def);
    assert_int_equal(lp_leak_def_parse("causal", &mo.def, &err), LP_OK);
    assert_int_equal(lp_leak_check_mask_file(path, &mo, &rep, &err), LP_OK);
    assert_true(lp_leak_mask_passed(&rep));
    assert_int_equal(rep.dtype, LP_DTYPE_BF16);
    lp_leak_mask_report_free(&rep);
    mo.tensor_name = "fp8"; /* unsupported dtype */
    assert_int_equal(lp_leak_check_mask_file(path, &mo, &rep, &err), LP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "f8_e4m3"));
    mo.tensor_name = "missing";
    assert_int_equal(lp_leak_check_mask_file(path, &mo, &rep, &err), LP_ERR_NOT_FOUND);
    lp_leak_def_free(&mo.def);
    free(a);
    unlink(path);

    /* A mask dumped beside a config.json loupe cannot read (a model it does not know) is still
     * just a mask: the header is read directly, no config is looked for. */
    char dir[512], cfg[600], inner[600];
    tmp_path(dir, sizeof dir, "ckpt");
    mkdir(dir, 0755);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(inner, sizeof inner, "%s/mask.safetensors", dir);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fprintf(f, "{\"model_type\": \"my-own-arch\", \"broken");
    fclose(f);
    write_causal_safetensors(inner);
    lp_leak_mask_opts_init(&mo);
    assert_int_equal(lp_leak_check_mask_file(inner, &mo, &rep, &err), LP_OK);
    assert_true(lp_leak_mask_passed(&rep));
    lp_leak_mask_report_free(&rep);
    check_corrupt_headers(inner);
    unlink(inner);
    unlink(cfg);
    rmdir(dir);
}

static void test_mask_bad_files(void **state)
{
    (void)state;
    lp_error err = {0};
    lp_leak_mask_report rep;
    uint8_t cells[2 * T * T] = {0};
    int64_t rank3[3] = {2, T, T}, rank1[1] = {T}, nonsquare[2] = {T, T + 1}, sq[2] = {T, T};
    assert_int_equal(check_npy("r3.npy", "|b1", 3, rank3, cells, 2 * T * T, "causal", &rep, &err),
                     LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "rank 3"));
    assert_int_equal(check_npy("r1.npy", "|b1", 1, rank1, cells, T, "causal", &rep, &err),
                     LP_ERR_FORMAT);
    assert_int_equal(check_npy("ns.npy", "|b1", 2, nonsquare, cells, T * (T + 1), "causal", &rep,
                               &err),
                     LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "12 queries x 13 keys"));
    /* complex64 is no mask dtype (the npy reader refuses it) */
    assert_int_not_equal(check_npy("c8.npy", "<c8", 2, sq, cells, sizeof cells, "causal", &rep,
                                   &err),
                         LP_OK);
    /* truncated: the header promises 144 f32 values, the file holds 10 */
    float few[10] = {0};
    assert_int_not_equal(check_npy("trunc.npy", "<f4", 2, sq, few, sizeof few, "causal", &rep,
                                   &err),
                         LP_OK);
    /* a .npy is known by its magic (lp_detect_format), not its name: a causal mask saved as
     * "mask.data" is checked, and passes */
    uint8_t *causal = bool_mask(1, 1, T, RULE_CAUSAL, 0, 0, 0, RULE_CAUSAL);
    assert_int_equal(check_npy("mask.data", "|b1", 2, sq, causal, T * T, "causal", &rep, &err),
                     LP_OK);
    assert_true(lp_leak_mask_passed(&rep));
    lp_leak_mask_report_free(&rep);
    free(causal);
    /* not a mask file at all */
    lp_leak_mask_opts mo;
    lp_leak_mask_opts_init(&mo);
    assert_int_equal(lp_leak_check_mask_file("mask.txt", &mo, &rep, &err), LP_ERR_UNSUPPORTED);
    assert_int_not_equal(lp_leak_check_mask_file("/no/such/mask.npy", &mo, &rep, &err), LP_OK);
}

/* ---- random models of other families (tests/support/ref_forward.c writes them) ---- */

typedef struct family_case {
    const char *name;
    ref_config cfg;
    int64_t T;
    /* clean: bit for bit (dense), or within the MoE tolerance with at most this |diff| */
    bool bitwise;
    double max_diff;
} family_case;

static const family_case family_cases[] = {
    {"gpt2", {.family = REF_GPT2, .vocab = 97, .hidden = 48, .n_layers = 2, .n_heads = 4,
              .n_kv_heads = 4, .head_dim = 12, .ffn = 192, .n_positions = 64, .eps = 1e-5,
              .tied = true, .scale = 0.15}, 19, true, 0.0},
    {"mixtral", {.family = REF_MIXTRAL, .vocab = 101, .hidden = 32, .n_layers = 2, .n_heads = 4,
                 .n_kv_heads = 2, .head_dim = 8, .ffn = 40, .eps = 1e-5, .theta = 10000,
                 .n_experts = 4, .top_k = 2, .scale = 0.2}, 23, false, 1e-4},
    {"gemma2", {.family = REF_GEMMA2, .vocab = 89, .hidden = 32, .n_layers = 3, .n_heads = 4,
                .n_kv_heads = 1, .head_dim = 16, .ffn = 48, .eps = 1e-6, .theta = 10000,
                .tied = true, .window = 5, .query_pre_attn_scalar = 24, .attn_softcap = 5.0,
                .final_softcap = 3.0, .scale = 0.2}, 17, true, 0.0},
    {"mistral", {.family = REF_LLAMA, .vocab = 71, .hidden = 32, .n_layers = 2, .n_heads = 4,
                 .n_kv_heads = 1, .head_dim = 8, .ffn = 44, .eps = 1e-5, .theta = 10000,
                 .window = 4, .scale = 0.2}, 13, true, 0.0},
    {"gemma3", {.family = REF_GEMMA3, .vocab = 67, .hidden = 32, .n_layers = 6, .n_heads = 4,
                .n_kv_heads = 2, .head_dim = 16, .ffn = 40, .eps = 1e-6, .theta = 1000000,
                .tied = true, .window = 3, .sliding_pattern = 3, .local_theta = 10000,
                .query_pre_attn_scalar = 16, .qk_norm = true, .scale = 0.2}, 14, true, 0.0},
    /* rows sum to 1 minus the sink's mass; layers 0 and 2 slide over 4 keys */
    {"gpt-oss", {.family = REF_GPT_OSS, .vocab = 97, .hidden = 36, .n_layers = 3, .n_heads = 4,
                 .n_kv_heads = 2, .head_dim = 10, .ffn = 20, .eps = 1e-5, .theta = 150000,
                 .n_experts = 5, .top_k = 2, .norm_topk = true, .window = 4,
                 .swiglu_limit = 0.4, .scale = 0.2}, 14, false, 1e-4},
};

/* Every family is clean (the alignment check included: a random model's tip toward its current
 * token is inconclusive, not flagged) and every fault is caught; the native sliding windows of Mistral,
 * Gemma 2 and Gemma 3 are the definition the maps are checked against. */
static void test_model_families(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof family_cases / sizeof family_cases[0]; c++) {
        const family_case *fc = &family_cases[c];
        ref_model rm;
        assert_true(ref_model_random(&fc->cfg, 0x1ea4 + c, &rm));
        char dir[512];
        snprintf(dir, sizeof dir, "%s/leak_%s_%d", lp_test_tmp_dir(), fc->name, (int)getpid());
        assert_true(ref_model_write_hf(&rm, dir));
        ref_model_free(&rm);
        lp_model *model;
        lp_error err = {0};
        if (lp_model_open(dir, &model, &err) != LP_OK)
            fail_msg("%s: %s", fc->name, err.msg);
        int32_t ids[64];
        uint64_t s = 99;
        for (int64_t t = 0; t < fc->T; t++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            ids[t] = (int32_t)((s >> 33) % (uint64_t)fc->cfg.vocab);
        }
        for (int f = LP_MASK_FAULT_NONE; f < LP_MASK_FAULT_COUNT; f++) {
            lp_leak_model_opts opts;
            lp_leak_model_opts_init(&opts);
            opts.fault = (lp_mask_fault)f;
            lp_leak_model_report r;
            assert_int_equal(lp_leak_check_model(model, ids, fc->T, &opts, &r, &err), LP_OK);
            bool clean = true;
            for (int64_t i = 0; i < r.n_checks; i++)
                if (!r.checks[i].passed) {
                    clean = false;
                    if (f == LP_MASK_FAULT_NONE)
                        print_error("%s: %s layer %d: %s\n", fc->name, r.checks[i].name,
                                    r.checks[i].layer, r.checks[i].detail);
                }
            printf("  %-8s inject %-10s: %s, diagnosis %s, max |diff| layer 0 %.3g, bitwise %d\n",
                   fc->name, lp_mask_fault_name(opts.fault), clean ? "clean" : "caught",
                   r.diagnosis, r.layer_max_diff[0], r.bitwise);
            if (f == LP_MASK_FAULT_NONE) {
                assert_true(clean);
                assert_int_equal(r.leak_count, 0);
                /* dense: bit for bit; MoE: within the stated tolerance, and not hidden */
                double worst = 0.0;
                for (int l = 0; l <= r.n_layers; l++)
                    worst = fmax(worst, r.layer_max_diff[l]);
                printf("  %-8s perturbation: bitwise %d, max |diff| %.3g (budget %.0e)\n",
                       fc->name, r.bitwise, worst, fc->max_diff);
                assert_true(worst <= fc->max_diff);
                if (fc->bitwise)
                    assert_true(r.bitwise && r.tolerance == 0.0);
                else
                    assert_true(r.tolerance > 0.0);
            } else {
                assert_false(clean);
                assert_string_equal(r.diagnosis, lp_mask_fault_name(opts.fault));
            }
            lp_leak_model_report_free(&r);
        }
        lp_model_close(model);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        assert_int_equal(system(cmd), 0);
    }
}

/* ---- stories260K ---- */

static lp_model *stories(void)
{
    char path[512];
    lp_test_shared_path(path, sizeof path, "models/stories260K/stories260K.gguf");
    lp_model *m = NULL;
    lp_error err = {0};
    if (lp_model_open(path, &m, &err) != LP_OK)
        fail_msg("%s", err.msg);
    return m;
}

/* "Once upon a time, there was a little girl named Lily. She" in stories260K's vocabulary:
 * natural text, so the next token is predictable (the alignment check needs that). */
static const int32_t prompt_ids[20] = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376,
                                       298, 315, 421, 395, 317, 426, 338, 401, 396, 267};

/* The alignment rule on the real trained model, both directions: its logits against the prompt
 * are judged OK; against labels shifted by one (label[t] = token[t + 1], the classic off-by-one
 * of a loss that shifts twice, or a mask that shows the next token) they are flagged, with
 * signal to spare: the rule that calls random models inconclusive still catches the fault. */
static void test_alignment_stories(void **state)
{
    (void)state;
    lp_model *m = stories();
    capture cap;
    run_capture(m, prompt_ids, 20, NULL, &cap);
    double next, same, V = (double)lp_model_arch(m)->vocab_size;
    assert_int_equal(lp_leak_alignment(cap.logits, (int64_t)V, prompt_ids, 20, &next, &same),
                     LP_ALIGNMENT_OK);
    assert_true(log(V) - next > 3.0 * LP_LEAK_ALIGNMENT_MIN_SIGNAL);
    assert_int_equal(lp_leak_alignment(cap.logits, (int64_t)V, prompt_ids + 1, 19, &next, &same),
                     LP_ALIGNMENT_FLAGGED);
    print_message("  stories260K: shifted labels %.3f nats vs %.3f, uniform %.3f\n", same, next,
                  log(V));
    capture_free(&cap);
    lp_model_close(m);
}

static void test_model_clean(void **state)
{
    (void)state;
    lp_model *m = stories();
    lp_error err = {0};
    lp_leak_model_opts opts;
    lp_leak_model_opts_init(&opts);
    for (int threads = 1; threads <= 2; threads++) {
        lp_pool *pool = NULL;
        if (threads > 1)
            assert_int_equal(lp_pool_create(threads, &pool, &err), LP_OK);
        opts.pool = pool;
        lp_leak_model_report r;
        assert_int_equal(lp_leak_check_model(m, prompt_ids, 20, &opts, &r, &err), LP_OK);
        for (int64_t i = 0; i < r.n_checks; i++)
            if (!r.checks[i].passed)
                print_error("%s layer %d: %s\n", r.checks[i].name, r.checks[i].layer,
                            r.checks[i].detail);
        assert_true(r.passed);
        assert_true(r.bitwise);
        assert_int_equal(r.first_diff_layer, -2);
        assert_int_equal(r.leak_count, 0);
        assert_int_equal(r.blocked_count, 0);
        assert_int_equal(r.nan_rows, 0);
        assert_true(r.attn_max_row_err < LP_LEAK_ROW_SUM_TOL);
        assert_true(r.n_cuts >= 3);
        assert_int_equal(r.cuts[0], 0);
        assert_int_equal(r.cuts[r.n_cuts - 1], 18);
        for (int l = 0; l <= r.n_layers; l++)
            assert_true(r.layer_max_diff[l] == 0.0);
        assert_false(r.alignment_flagged);
        assert_false(r.alignment_inconclusive); /* a trained model on its own kind of text */
        assert_string_equal(r.diagnosis, "none");
        lp_leak_model_report_free(&r);
        if (pool)
            lp_pool_destroy(pool);
    }
    /* a forced window of 4 keys is clean too */
    opts.pool = NULL;
    opts.window = 4;
    lp_leak_model_report r;
    assert_int_equal(lp_leak_check_model(m, prompt_ids, 20, &opts, &r, &err), LP_OK);
    assert_true(r.passed);
    lp_leak_model_report_free(&r);
    /* too few tokens and bad ids are errors, not verdicts */
    assert_int_equal(lp_leak_check_model(m, prompt_ids, 1, &opts, &r, &err), LP_ERR_USAGE);
    int32_t bad[3] = {1, 2, 99999};
    assert_int_equal(lp_leak_check_model(m, bad, 3, &opts, &r, &err), LP_ERR_RANGE);
    lp_model_close(m);
}

/* Each fault, without and with a forced window, and where its first sign shows. */
typedef struct fault_case {
    lp_mask_fault fault;
    int64_t window;
    int first_diff_layer; /* perturbation: -2 = nothing from the future reaches the past */
    int64_t leak_batch, leak_query, leak_key; /* the first listed leaking cell; -1 = none listed
                                                 or not checked */
} fault_case;

static const fault_case fault_cases[] = {
    {LP_MASK_FAULT_OFF_BY_ONE, 0, 0, 0, 0, 1},       {LP_MASK_FAULT_OFF_BY_ONE, 4, 0, 0, 0, 1},
    {LP_MASK_FAULT_TRANSPOSED, 0, 0, 0, 0, 1},       {LP_MASK_FAULT_TRANSPOSED, 4, 0, 0, 0, 1},
    {LP_MASK_FAULT_NO_MASK, 0, 0, 0, 0, 1},          {LP_MASK_FAULT_NO_MASK, 4, 0, 0, 0, 1},
    {LP_MASK_FAULT_WINDOW_PLUS_ONE, 0, -2, -1, -1, -1},
    {LP_MASK_FAULT_WINDOW_PLUS_ONE, 4, -2, 0, 4, 0}, /* key q-4 visible to query q */
    {LP_MASK_FAULT_PAD_AXIS, 0, -2, 1, -1, -1},      {LP_MASK_FAULT_PAD_AXIS, 4, -2, 1, -1, -1},
};

/* pad-axis: a real query of the left-padded item sees a padding key; the kernel on the padded
 * spec lets real queries 3..12 of item 1 each see its 3 padding keys; and the left-padded item's
 * real tokens no longer compute what the unpadded ones do, from layer 0 on, at its first real
 * position (5 = 20 / 4). */
static void check_pad_axis(const lp_leak_model_report *r)
{
    assert_true(r->structural.leak_padding_key > 0);
    assert_true(r->leaks[0].key < 5);
    bool kernel = false, padded = false;
    const char *want = "left/right padding: 30 leaking, 0 blocked cells (kernel: 30 ";
    for (int64_t i = 0; i < r->n_checks; i++) {
        const lp_leak_check *c = &r->checks[i];
        kernel = kernel || strstr(c->detail, want) != NULL;
        if (strstr(c->detail, "padded batch: hidden states of") && c->layer == 0) {
            assert_false(c->passed);
            assert_int_equal(c->position, 5);
            assert_true(c->max_abs_diff > 1e-3);
            assert_non_null(strstr(c->detail, "item 1 (left-padded)"));
            padded = true;
        }
    }
    assert_true(kernel && padded);
}

static void check_fault(const fault_case *fc, const lp_leak_model_report *r)
{
    assert_false(r->passed);
    assert_true(r->leak_count > 0);
    if (strcmp(r->diagnosis, lp_mask_fault_name(fc->fault)) != 0)
        print_error("inject %s window %lld: diagnosed %s\n", lp_mask_fault_name(fc->fault),
                    (long long)fc->window, r->diagnosis);
    assert_string_equal(r->diagnosis, lp_mask_fault_name(fc->fault));
    assert_int_equal(r->first_diff_layer, fc->first_diff_layer);
    if (fc->first_diff_layer == 0) {
        /* the perturbation test sees it at the first cut, and the maps show the future */
        assert_int_equal(r->first_diff_cut, 0);
        assert_int_equal(r->first_diff_position, 0);
        assert_false(r->bitwise);
        assert_true(r->layer_max_diff[0] > 0.0);
        assert_true(r->attn.leak_count > 0);
    }
    if (fc->leak_batch >= 0)
        assert_int_equal(r->leaks[0].batch, fc->leak_batch);
    if (fc->leak_query >= 0) {
        assert_int_equal(r->leaks[0].query, fc->leak_query);
        assert_int_equal(r->leaks[0].key, fc->leak_key);
    }
    if (fc->fault == LP_MASK_FAULT_OFF_BY_ONE)
        assert_int_equal(r->attn.leak_future, 0);
    if (fc->fault == LP_MASK_FAULT_WINDOW_PLUS_ONE && fc->window > 0)
        assert_int_equal(r->attn.leak_window_edge, r->attn.leak_count);
    if (fc->fault == LP_MASK_FAULT_PAD_AXIS)
        check_pad_axis(r);
}

static void test_model_faults(void **state)
{
    (void)state;
    lp_model *m = stories();
    lp_error err = {0};
    for (size_t i = 0; i < sizeof fault_cases / sizeof fault_cases[0]; i++) {
        lp_leak_model_opts opts;
        lp_leak_model_opts_init(&opts);
        opts.fault = fault_cases[i].fault;
        opts.window = fault_cases[i].window;
        lp_leak_model_report r;
        assert_int_equal(lp_leak_check_model(m, prompt_ids, 20, &opts, &r, &err), LP_OK);
        check_fault(&fault_cases[i], &r);
        lp_leak_model_report_free(&r);
    }
    lp_model_close(m);
}

int main(void)
{
    const struct CMUnitTest unit[] = {
        cmocka_unit_test(test_definitions),       cmocka_unit_test(test_decode_alignment),
        cmocka_unit_test(test_engine_faults),     cmocka_unit_test(test_mask_bool_npy),
        cmocka_unit_test(test_mask_stray_cells),
        cmocka_unit_test(test_mask_heads_and_docs), cmocka_unit_test(test_mask_fill_gaps),
        cmocka_unit_test(test_mask_additive),
        cmocka_unit_test(test_mask_padding),     cmocka_unit_test(test_padding_files),
        cmocka_unit_test(test_mask_safetensors),  cmocka_unit_test(test_mask_bad_files),
        cmocka_unit_test(test_alignment),         cmocka_unit_test(test_model_families),
    };
    int failed = cmocka_run_group_tests_name("leak", unit, NULL, NULL);
    if (!lp_test_shared_dir()) {
        printf("SKIP: ../shared not found (set LOUPE_SHARED): stories260K leak checks skipped\n");
        return failed ? 1 : 0;
    }
    const struct CMUnitTest golden[] = {
        cmocka_unit_test(test_model_clean),
        cmocka_unit_test(test_alignment_stories),
        cmocka_unit_test(test_model_faults),
    };
    failed += cmocka_run_group_tests_name("leak_stories260K", golden, NULL, NULL);
    return failed ? 1 : 0;
}
