/* Attention tests: every ISA's kernel and the reference against a naive softmax(QK^T)V written
 * here (double precision, masks cell by cell from the definition), on causal, window, padding,
 * decode (queries at q_pos0 > 0 against a longer key range), softcap, ALiBi, learned sinks, f16 and
 * bf16 K/V and v_dim != head_dim; NaN-prefilled outputs; NaN poisoning; thread determinism.
 *
 * Error budgets are stated next to each check and the observed worst value is printed. */
#include "kernels_test_util.h"

#include <unistd.h>

#include "core/dtype.h"
#include "trace/kernels/kernels_internal.h"
#include "trace/kernels/mask.h"
#include "trace/synth/synth.h"
#include "trace/trace.h"

/* ---- the naive version */

/* Masks cell by cell with lp_mask_allows_reference (the definition, not the interval code the
 * kernels use), softmax in double, the learned sink as one more logit without a value. k and v
 * are f32 (the values the kernel's f16/bf16 storage decodes to). */
static void naive_attention(const lp_attn_args *a, const float *k, const float *v, double *out,
                            double *probs, double *sink_p)
{
    double *s = malloc((size_t)(a->n_k > 0 ? a->n_k : 1) * sizeof(double));
    assert_non_null(s);
    for (int64_t i = 0; i < a->n_q; i++) {
        double max = a->has_sink ? (double)a->sink_logit : -HUGE_VAL;
        int64_t pos = a->mask->q_pos0 + i;
        for (int64_t j = 0; j < a->n_k; j++) {
            s[j] = -HUGE_VAL;
            if (!lp_mask_allows_reference(a->mask, a->batch, i, j))
                continue;
            double dot = 0.0;
            for (int64_t d = 0; d < a->head_dim; d++)
                dot += (double)a->q[i * a->q_stride + d] * (double)k[j * a->k_stride + d];
            dot *= (double)a->scale;
            if (a->softcap > 0.0f)
                dot = (double)a->softcap * tanh(dot / (double)a->softcap);
            dot += (double)a->alibi_slope * (double)(j - pos);
            s[j] = dot;
            if (dot > max)
                max = dot;
        }
        double sink_w = a->has_sink ? exp((double)a->sink_logit - max) : 0.0, sum = sink_w;
        for (int64_t j = 0; j < a->n_k; j++) {
            s[j] = isinf(max) ? 0.0 : exp(s[j] - max);
            sum += s[j];
        }
        sink_p[i] = sum > 0.0 ? sink_w / sum : 0.0;
        for (int64_t j = 0; j < a->n_k; j++)
            probs[i * a->n_k + j] = sum > 0.0 ? s[j] / sum : 0.0;
        for (int64_t d = 0; d < a->v_dim; d++) {
            double o = 0.0;
            for (int64_t j = 0; j < a->n_k; j++)
                o += probs[i * a->n_k + j] * (double)v[j * a->v_stride + d];
            out[i * a->v_dim + d] = o;
        }
    }
    free(s);
}

/* ---- cases */

typedef struct attn_case {
    const char *name;
    int64_t n_q, n_k, head_dim, v_dim, window;
    bool causal;
    int64_t pad_left, pad_right;
    float softcap, scale;
    int64_t q_pos0;  /* -1: bottom-right (n_k - n_q) */
    float alibi;     /* slope, 0 = none */
    bool has_sink;
    float sink;
    lp_dtype kv;     /* 0 = f32 */
} attn_case;

/* K or V storage in the case's dtype, and the f32 values it decodes to (what naive sees). */
typedef struct kv_store {
    void *data;
    float *decoded;
} kv_store;

static kv_store make_kv(lp_dtype dt, int64_t n)
{
    kv_store s = {NULL, rnd_array(n)};
    if (dt == LP_DTYPE_INVALID || dt == LP_DTYPE_F32) {
        s.data = s.decoded;
        return s;
    }
    uint16_t *h = malloc((size_t)(n > 0 ? n : 1) * 2);
    assert_non_null(h);
    for (int64_t i = 0; i < n; i++) {
        h[i] = dt == LP_DTYPE_F16 ? lp_f32_to_f16(s.decoded[i]) : lp_f32_to_bf16(s.decoded[i]);
        s.decoded[i] = dt == LP_DTYPE_F16 ? lp_f16_to_f32(h[i]) : lp_bf16_to_f32(h[i]);
    }
    s.data = h;
    return s;
}

static void free_kv(kv_store *s)
{
    if (s->data != s->decoded)
        free(s->data);
    free(s->decoded);
}

/* What naive says for one case: outputs, probabilities, sink mass. */
typedef struct attn_want {
    double *out, *p, *sink;
} attn_want;

/* The worst differences of one run from naive's. */
typedef struct attn_errors {
    double out, p, stat;
} attn_errors;

/* Compare the statistics of row i with those computed here from naive's probabilities. */
static double stats_error(const attn_case *tc, const lp_mask_spec *mask, const attn_want *w,
                          const lp_attn_row_stats *st, int64_t i, int64_t local_window)
{
    double pos = (double)(mask->q_pos0 + i), sum = 0.0, entropy = 0.0, maxp = 0.0, dist = 0.0;
    double local = 0.0;
    const double *prow = w->p + i * tc->n_k;
    for (int64_t j = 0; j < tc->n_k; j++) {
        double p = prow[j];
        sum += p;
        if (p > 0.0)
            entropy -= p * log(p);
        if (p > maxp)
            maxp = p;
        dist += p * (pos - (double)j);
        if (pos - (double)j < (double)local_window)
            local += p;
    }
    if (w->sink[i] > 0.0)
        entropy -= w->sink[i] * log(w->sink[i]);
    double self = pos >= 0.0 && pos < (double)tc->n_k ? prow[(int64_t)pos] : 0.0;
    double prev = pos >= 1.0 && pos - 1.0 < (double)tc->n_k ? prow[(int64_t)pos - 1] : 0.0;
    double diffs[9] = {(double)st->row_sum - sum,
                       (double)st->entropy - entropy,
                       (double)st->max_prob - maxp,
                       ((double)st->distance - dist) / (1.0 + fabs(dist)),
                       (double)st->local - local,
                       (double)st->sink - (tc->n_k > 0 ? prow[0] : 0.0),
                       (double)st->self - self,
                       (double)st->prev - prev,
                       (double)st->learned_sink - w->sink[i]};
    double worst = 0.0;
    for (int d = 0; d < 9; d++)
        if (!(fabs(diffs[d]) <= worst))
            worst = fabs(diffs[d]); /* NaN sticks */
    return worst;
}

/* Compare one run's output, probabilities (optional) and statistics with naive's. */
static attn_errors compare_run(const attn_case *tc, const lp_attn_args *a, const attn_want *w)
{
    attn_errors e = {0.0, 0.0, 0.0};
    for (int64_t i = 0; i < tc->n_q; i++) {
        for (int64_t d = 0; d < tc->v_dim; d++) {
            double diff = fabs((double)a->out[i * a->out_stride + d] - w->out[i * tc->v_dim + d]);
            if (!(diff <= e.out))
                e.out = diff;
        }
        for (int64_t d = tc->v_dim; d < a->out_stride; d++)
            assert_true(isnan(a->out[i * a->out_stride + d])); /* padding columns untouched */
        double row = 0.0;
        for (int64_t j = 0; a->probs && j < tc->n_k; j++) {
            double p = w->p[i * tc->n_k + j], got = (double)a->probs[i * tc->n_k + j];
            if (!(fabs(got - p) <= e.p))
                e.p = fabs(got - p);
            if (p == 0.0) /* masked cells are exactly zero (above the diagonal, ...) */
                assert_true(got == 0.0);
            row += got;
        }
        if (a->probs) /* 1 for visible rows (less the sink's mass), 0 when fully masked */
            assert_true(fabs(row + w->sink[i] - (w->sink[i] > 0.0 || row > 0.0 ? 1.0 : 0.0)) <= 1e-5);
        double se = a->row_stats ? stats_error(tc, a->mask, w, &a->row_stats[i], i,
                                               a->local_window)
                                 : 0.0;
        if (!(se <= e.stat))
            e.stat = se;
    }
    return e;
}

static void run_attention_case(const attn_case *tc, void (*fn)(const lp_attn_args *),
                               const char *fn_name)
{
    const int64_t q_stride = tc->head_dim + 3, k_stride = tc->head_dim + 5,
                  v_stride = tc->v_dim + 1, out_stride = tc->v_dim + 2;
    float *q = rnd_array(tc->n_q * q_stride);
    kv_store k = make_kv(tc->kv, tc->n_k * k_stride), v = make_kv(tc->kv, tc->n_k * v_stride);
    /* batch item 1 carries the padding, item 0 none: checks the batch index is honoured */
    int64_t pad_left[2] = {0, tc->pad_left}, pad_right[2] = {0, tc->pad_right};
    lp_mask_spec mask = lp_mask_causal(tc->n_q, tc->n_k);
    mask.causal = tc->causal;
    mask.window = tc->window;
    mask.pad_left = pad_left;
    mask.pad_right = pad_right;
    if (tc->q_pos0 >= 0)
        mask.q_pos0 = tc->q_pos0;
    lp_attn_args a = {
        .q = q, .k = k.data, .v = v.data, .n_q = tc->n_q, .n_k = tc->n_k,
        .head_dim = tc->head_dim, .v_dim = tc->v_dim, .q_stride = q_stride, .k_stride = k_stride,
        .v_stride = v_stride, .out_stride = out_stride, .scale = tc->scale,
        .softcap = tc->softcap, .mask = &mask, .batch = 1, .local_window = 4,
        .alibi_slope = tc->alibi, .has_sink = tc->has_sink, .sink_logit = tc->sink,
        .kv_dtype = tc->kv,
    };
    attn_want w = {malloc((size_t)(tc->n_q * tc->v_dim + 1) * sizeof(double)),
                   malloc((size_t)(tc->n_q * tc->n_k + 1) * sizeof(double)),
                   malloc((size_t)(tc->n_q + 1) * sizeof(double))};
    assert_true(w.out && w.p && w.sink);
    naive_attention(&a, k.decoded, v.decoded, w.out, w.p, w.sink);
    /* probes 0: output only (heads of n_q <= LP_ATTN_DECODE_MAX_ROWS take the decode path),
     * 1: with statistics, 2: with probabilities too */
    for (int probes = 0; probes < 3; probes++) {
        a.out = nan_array(tc->n_q * out_stride);
        a.probs = probes == 2 ? nan_array(tc->n_q * tc->n_k) : NULL;
        a.row_stats = probes ? malloc((size_t)(tc->n_q + 1) * sizeof *a.row_stats) : NULL;
        assert_true(!probes || a.row_stats);
        fn(&a);
        attn_errors e = compare_run(tc, &a, &w);
        printf("attention %-16s %-5s %-4s probes=%d: worst |out| %.1e (budget 2e-6), |p| %.1e "
               "(1e-6), stats %.1e (5e-5)\n",
               tc->name, fn_name, lp_isa_name(lp_kernels_isa()), probes, e.out, e.p, e.stat);
        assert_true(e.out <= 2e-6);
        assert_true(e.p <= 1e-6);
        assert_true(e.stat <= 5e-5);
        free(a.out);
        free(a.probs);
        free(a.row_stats);
    }
    free(q);
    free_kv(&k);
    free_kv(&v);
    free(w.out);
    free(w.p);
    free(w.sink);
}

#define F16 LP_DTYPE_F16
#define BF16 LP_DTYPE_BF16

/* The mask and argument cases every attention path must get right. */
static const attn_case basic_cases[] = {
    /* name              n_q  n_k  hd  vd  W   causal pl pr softcap scale  q_pos0 alibi sink  kv */
    {"causal",           37,  37,  24, 20, 0,  true,  0, 0, 0.0f, 0.2041f, -1, 0.0f, false, 0, 0},
    {"causal-long",      150, 150, 16, 16, 0,  true,  0, 0, 0.0f, 0.9f,    -1, 0.0f, false, 0, 0},
    {"window5",          40,  40,  8,  12, 5,  true,  0, 0, 0.0f, 0.35f,   -1, 0.0f, false, 0, 0},
    {"window1",          9,   9,   8,  8,  1,  true,  0, 0, 0.0f, 0.35f,   -1, 0.0f, false, 0, 0},
    {"decode-br",        7,   140, 12, 10, 0,  true,  0, 0, 0.0f, 0.3f,    -1, 0.0f, false, 0, 0},
    {"decode-1",         1,   77,  16, 24, 0,  true,  0, 0, 0.0f, 0.3f,    -1, 0.0f, false, 0, 0},
    {"decode-window",    3,   90,  12, 10, 16, true,  0, 0, 0.0f, 0.3f,    -1, 0.0f, false, 0, 0},
    {"chunk-middle",     20,  80,  16, 16, 0,  true,  0, 0, 0.0f, 0.3f,    50, 0.0f, false, 0, 0},
    {"padding",          30,  30,  16, 16, 0,  true,  4, 3, 0.0f, 0.25f,   -1, 0.0f, false, 0, 0},
    {"softcap",          33,  33,  16, 16, 0,  true,  0, 0, 3.0f, 2.0f,    -1, 0.0f, false, 0, 0},
    {"full",             20,  26,  16, 8,  0,  false, 0, 0, 0.0f, 0.25f,   -1, 0.0f, false, 0, 0},
    {"full-pad",         26,  26,  16, 8,  0,  false, 2, 5, 0.0f, 0.25f,   -1, 0.0f, false, 0, 0},
    {"wide-head",        70,  70,  64, 80, 0,  true,  0, 0, 0.0f, 0.125f,  -1, 0.0f, false, 0, 0},
    {"mla-dims",         45,  45,  96, 64, 0,  true,  0, 0, 0.0f, 0.1f,    -1, 0.0f, false, 0, 0},
    {"alibi",            41,  41,  16, 16, 0,  true,  0, 0, 0.0f, 0.25f,   -1, 0.25f, false, 0, 0},
    {"alibi-full",       23,  23,  16, 16, 0,  false, 0, 0, 0.0f, 0.25f,   -1, 0.0625f, false, 0, 0},
    {"alibi-decode",     2,   70,  16, 16, 0,  true,  0, 0, 0.0f, 0.25f,   -1, 0.125f, false, 0, 0},
    {"sink",             36,  36,  16, 16, 0,  true,  0, 0, 0.0f, 0.25f,   -1, 0.0f, true, 1.5f, 0},
    {"sink-window",      36,  36,  16, 16, 6,  true,  0, 0, 0.0f, 0.25f,   -1, 0.0f, true, 3.0f, 0},
    {"sink-pad",         20,  20,  16, 16, 0,  true,  3, 2, 0.0f, 0.25f,   -1, 0.0f, true, -1.0f, 0},
    {"f16-kv",           50,  50,  32, 24, 0,  true,  0, 0, 0.0f, 0.2f,    -1, 0.0f, false, 0, F16},
    {"bf16-kv",          50,  50,  32, 24, 0,  true,  0, 0, 0.0f, 0.2f,    -1, 0.0f, false, 0, BF16},
    {"f16-decode",       1,   130, 64, 64, 0,  true,  0, 0, 0.0f, 0.125f,  -1, 0.0f, false, 0, F16},
    {"bf16-everything",  19,  83,  20, 12, 9,  true,  0, 0, 2.0f, 0.5f,    -1, 0.1f, true, 0.5f, BF16},
    /* the blocked kernel's shapes: real head dims, T not a multiple of the 6-row tile or the
     * 64-key block, windows and chunks that cut blocks in the middle */
    {"hd64-203",         203, 203, 64, 64, 0,  true,  0, 0, 0.0f, 0.125f,  -1, 0.0f, false, 0, 0},
    {"hd80-131",         131, 131, 80, 80, 0,  true,  0, 0, 0.0f, 0.1118f, -1, 0.0f, false, 0, 0},
    {"hd96-win37",       100, 100, 96, 96, 37, true,  0, 0, 0.0f, 0.102f,  -1, 0.0f, false, 0, 0},
    {"hd128-150",        150, 150, 128, 128, 0, true, 0, 0, 0.0f, 0.0884f, -1, 0.0f, false, 0, 0},
    {"hd256-77",         77,  77,  256, 256, 0, true, 0, 0, 0.0f, 0.0625f, -1, 0.0f, false, 0, 0},
    {"hd128-chunk-f16",  29,  157, 128, 128, 0, true, 0, 0, 0.0f, 0.0884f, 101, 0.0f, false, 0, F16},
    {"hd64-all-bf16",    70,  70,  64, 64, 20, true,  5, 3, 30.0f, 0.125f, -1, 0.05f, true, 2.0f, BF16},
    /* the decode path's shapes (n_q <= LP_ATTN_DECODE_MAX_ROWS without probes): keys past one
     * chunk (4096 / head_dim keys), chunks cut by the window, padding, MLA's widths */
    {"dec-hd128-f16",    1,   700, 128, 128, 0, true, 0, 0, 0.0f, 0.0884f, -1, 0.0f, false, 0, F16},
    {"dec-hd256-bf16",   2,   300, 256, 256, 0, true, 0, 0, 30.0f, 0.0625f, -1, 0.0f, true, 1.0f, BF16},
    {"dec-hd80-window",  4,   500, 80, 80, 70, true,  0, 0, 0.0f, 0.1118f, -1, 0.05f, false, 0, 0},
    {"dec-hd96-chunk",   3,   260, 96, 96, 0,  true,  0, 0, 0.0f, 0.102f,  180, 0.0f, false, 0, F16},
    {"dec-pad",          3,   40,  16, 16, 0,  true,  5, 2, 0.0f, 0.25f,   -1, 0.0f, false, 0, 0},
    {"dec-pad-sink",     2,   12,  16, 16, 0,  true,  3, 0, 0.0f, 0.25f,   -1, 0.0f, true, -0.5f, 0},
    {"dec-empty-sink",   2,   12,  16, 16, 0,  true,  3, 2, 0.0f, 0.25f,   -1, 0.0f, true, -0.5f, 0},
    {"dec-mla",          1,   150, 576, 512, 0, true, 0, 0, 0.0f, 0.0417f, -1, 0.0f, false, 0, BF16},
    {"dec-odd-dim",      1,   99,  20, 12, 9,  true,  0, 0, 2.0f, 0.5f,    -1, 0.1f, true, 0.5f, F16},
};

static void test_attention_cases(void **state)
{
    (void)state;
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    for (int s = 0; s < n_isas; s++) {
        assert_true(lp_kernels_set_isa(isas[s]));
        for (size_t c = 0; c < sizeof basic_cases / sizeof basic_cases[0]; c++) {
            run_attention_case(&basic_cases[c], lp_attention, "tiled");
            if (s == 0)
                run_attention_case(&basic_cases[c], lp_attention_ref, "ref");
        }
    }
}

/* The tile micro-kernels of every ISA against ref's: attn_qk on head dims 1..33 and 64..256,
 * attn_pv on 1..6 rows, 1..64 keys and v_dims with 16-, 8- and 1-wide tails, block_max with
 * and without non-finite values. Budget: |err| <= 1e-6 x sum |terms| (float sums in another
 * order); outputs NaN-prefilled, rows past `rows` must stay NaN. */
static void test_attention_tiles(void **state)
{
    (void)state;
    const lp_kernel_table *ref = lp_kernels_table_for(LP_ISA_REF);
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    static const int64_t dims[] = {1, 7, 33, 64, 80, 96, 128, 256};
    static const int64_t v_dims[] = {1, 8, 12, 16, 20, 64, 80, 100};
    for (int si = 0; si < n_isas; si++) {
        const lp_kernel_table *kt = lp_kernels_table_for(isas[si]);
        double worst_qk = 0.0, worst_pv = 0.0;
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (int rows = 1; rows <= LP_ATTN_MR; rows++) {
                int64_t hd = dims[di];
                float *q = aligned_alloc(64, (size_t)((hd * LP_ATTN_MR * 4 + 63) / 64 * 64));
                assert_non_null(q);
                for (int64_t i = 0; i < hd * LP_ATTN_MR; i++)
                    q[i] = rnd();
                float *kp = aligned_alloc(64, (size_t)((hd * LP_ATTN_NR * 4 + 63) / 64 * 64));
                assert_non_null(kp);
                for (int64_t i = 0; i < hd * LP_ATTN_NR; i++)
                    kp[i] = rnd();
                float s[LP_ATTN_MR * 20], s_ref[LP_ATTN_MR * 20];
                for (int i = 0; i < LP_ATTN_MR * 20; i++)
                    s[i] = s_ref[i] = NAN;
                kt->attn_qk(q, rows, kp, hd, 0.3f, s, 20);
                ref->attn_qk(q, rows, kp, hd, 0.3f, s_ref, 20);
                for (int r = 0; r < LP_ATTN_MR; r++)
                    for (int c = 0; c < LP_ATTN_NR; c++) {
                        if (r >= rows) {
                            assert_true(isnan(s[r * 20 + c]));
                            continue;
                        }
                        double mag = 0.0;
                        for (int64_t d = 0; d < hd; d++)
                            mag += fabs(0.3 * (double)q[d * LP_ATTN_MR + r] * (double)kp[d * LP_ATTN_NR + c]);
                        double e = fabs((double)s[r * 20 + c] - (double)s_ref[r * 20 + c]) /
                                   (mag + 1e-30);
                        assert_false(isnan(s[r * 20 + c]));
                        worst_qk = e > worst_qk ? e : worst_qk;
                    }
                free(q);
                free(kp);
            }
        for (size_t vi = 0; vi < sizeof v_dims / sizeof v_dims[0]; vi++)
            for (int rows = 1; rows <= LP_ATTN_MR; rows++)
                for (int64_t nk = 1; nk <= 64; nk += 21) {
                    int64_t vd = v_dims[vi], vs = vd + 1, os = vd + 2;
                    float *p = rnd_array(LP_ATTN_MR * 64), *v = rnd_array(nk * vs);
                    float *o = rnd_array(LP_ATTN_MR * os), *o_ref = malloc(sizeof(float) *
                                                                          (size_t)(LP_ATTN_MR * os));
                    assert_non_null(o_ref);
                    for (int64_t i = rows * os; i < LP_ATTN_MR * os; i++)
                        o[i] = NAN;
                    memcpy(o_ref, o, sizeof(float) * (size_t)(LP_ATTN_MR * os));
                    /* the online softmax's rescale: 0 (first block), 1 (max kept), between */
                    float alpha[LP_ATTN_MR] = {0.0f, 1.0f, 0.25f, 0.5f, 0.9f, 1.0f};
                    float *o_in = malloc(sizeof(float) * (size_t)(LP_ATTN_MR * os));
                    assert_non_null(o_in);
                    memcpy(o_in, o, sizeof(float) * (size_t)(LP_ATTN_MR * os));
                    kt->attn_pv(p, 64, rows, nk, v, vs, alpha, o, os, vd);
                    ref->attn_pv(p, 64, rows, nk, v, vs, alpha, o_ref, os, vd);
                    for (int r = 0; r < LP_ATTN_MR; r++)
                        for (int64_t d = 0; d < vd; d++) {
                            if (r >= rows) {
                                assert_true(isnan(o[r * os + d]));
                                continue;
                            }
                            double mag = 1.0 + fabs((double)alpha[r] * (double)o_in[r * os + d]);
                            for (int64_t j = 0; j < nk; j++)
                                mag += fabs((double)p[r * 64 + j] * (double)v[j * vs + d]);
                            double e = fabs((double)o[r * os + d] - (double)o_ref[r * os + d]) / mag;
                            assert_false(isnan(o[r * os + d]));
                            worst_pv = e > worst_pv ? e : worst_pv;
                        }
                    free(p);
                    free(v);
                    free(o);
                    free(o_in);
                    free(o_ref);
                }
        for (int64_t n = 0; n <= 19; n++) {
            float x[19];
            float want = -INFINITY;
            for (int64_t i = 0; i < n; i++) {
                x[i] = rnd();
                want = x[i] > want ? x[i] : want;
            }
            bool finite = false;
            assert_true(kt->block_max(x, n, &finite) == want && finite);
            for (int64_t bad = 0; bad < n; bad++) {
                float saved = x[bad];
                x[bad] = bad % 2 ? NAN : INFINITY;
                kt->block_max(x, n, &finite);
                assert_false(finite);
                x[bad] = saved;
            }
        }
        printf("attention tiles %s: attn_qk worst |err|/sum|qk| %.1e (budget 1e-6), attn_pv "
               "worst |err|/(1+sum|pv|) %.1e (budget 1e-6)\n",
               lp_isa_name(isas[si]), worst_qk, worst_pv);
        assert_true(worst_qk <= 1e-6);
        assert_true(worst_pv <= 1e-6);
    }
}

/* GQA and MQA: one call for the n_group query heads of a KV group (q interleaved per row as the
 * forward pass stores it, outputs, maps and statistics per head) against naive per head (budgets
 * as the basic cases') and against one call per head, bit for bit (same ISA, same sums). */
typedef struct gqa_case {
    const char *name;
    int64_t n_q, n_k, head_dim, group, window;
    bool per_head_alibi, has_sink;
    lp_dtype kv;
    bool per_head_sink; /* with has_sink: each head its own logit (gpt-oss), else one for all */
} gqa_case;

static const gqa_case gqa_cases[] = {
    {"gqa4-hd64-133", 133, 133, 64, 4, 0, false, false, 0, false},
    {"gqa8-hd128-f16", 70, 70, 128, 8, 20, false, false, F16, false},
    {"gqa4-hd96-bf16", 9, 100, 96, 4, 0, true, true, BF16, false},
    {"mqa16-hd80", 47, 47, 80, 16, 0, true, false, 0, false},
    /* decode steps (the decode path when unprobed): one row of 8 or 16 heads over a cache */
    {"dec-gqa8-hd64-f16", 1, 530, 64, 8, 0, false, false, F16, false},
    {"dec-gqa4-hd128-sink", 2, 333, 128, 4, 100, true, true, BF16, false},
    {"dec-mqa16-hd80", 1, 95, 80, 16, 0, true, false, 0, false},
    /* gpt-oss's shape: a sink logit per query head, sliding window, prefill and decode */
    {"gqa8-sinks-hd64", 90, 90, 64, 8, 32, false, true, BF16, true},
    {"dec-gqa8-sinks", 1, 200, 64, 8, 128, false, true, BF16, true},
};

static void run_gqa_case(const gqa_case *gc)
{
    const int64_t G = gc->group, hd = gc->head_dim, q_stride = G * hd + 3, out_stride = hd + 2;
    float *q = rnd_array(gc->n_q * q_stride);
    kv_store k = make_kv(gc->kv, gc->n_k * hd), v = make_kv(gc->kv, gc->n_k * hd);
    float slopes[16], sinks[16];
    for (int64_t g = 0; g < G; g++) {
        slopes[g] = 0.5f / (float)(g + 1);
        sinks[g] = 2.0f - 0.6f * (float)g; /* from above the scores to below them */
    }
    lp_mask_spec mask = lp_mask_causal(gc->n_q, gc->n_k);
    mask.window = gc->window;
    attn_case tc = {gc->name, gc->n_q, gc->n_k, hd, hd, gc->window, true, 0, 0, 0.0f, 0.1f,
                    -1, 0.0f, gc->has_sink, 0.75f, gc->kv};
    lp_attn_args a = {
        .q = q, .k = k.data, .v = v.data, .n_q = gc->n_q, .n_k = gc->n_k, .head_dim = hd,
        .v_dim = hd, .q_stride = q_stride, .k_stride = hd, .v_stride = hd,
        .out_stride = out_stride, .scale = tc.scale, .mask = &mask, .local_window = 4,
        .has_sink = gc->has_sink, .sink_logit = tc.sink, .kv_dtype = gc->kv, .n_group = G,
        .q_head_stride = hd, .out_head_stride = gc->n_q * out_stride,
        .probs_head_stride = gc->n_q * gc->n_k, .stats_head_stride = gc->n_q,
        .alibi_slopes = gc->per_head_alibi ? slopes : NULL,
        .sink_logits = gc->per_head_sink ? sinks : NULL,
    };
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    for (int si = 0; si < n_isas; si++) {
        assert_true(lp_kernels_set_isa(isas[si]));
        for (int fi = 0; fi < 4; fi++) { /* tiled, ref; each probed (1, 0) and unprobed (3, 2) */
            void (*fn)(const lp_attn_args *) = fi % 2 ? lp_attention_ref : lp_attention;
            bool probed = fi < 2;
            float *outs[2], *probs[2];
            lp_attn_row_stats *st[2];
            for (int split = 0; split < 2; split++) { /* 0: the group in one call, 1: per head */
                outs[split] = nan_array(G * gc->n_q * out_stride);
                probs[split] = nan_array(G * gc->n_q * gc->n_k);
                st[split] = malloc((size_t)(G * gc->n_q) * sizeof **st);
                assert_non_null(st[split]);
                lp_attn_args call = a;
                call.out = outs[split];
                call.probs = probed ? probs[split] : NULL;
                call.row_stats = probed ? st[split] : NULL;
                if (!split) {
                    fn(&call);
                    continue;
                }
                for (int64_t g = 0; g < G; g++) {
                    lp_attn_args head = lp_attn_group_head(&call, g);
                    fn(&head);
                }
            }
            attn_errors worst = {0.0, 0.0, 0.0};
            for (int64_t g = 0; g < G; g++) {
                lp_attn_args call = a;
                call.out = outs[0];
                call.probs = probed ? probs[0] : NULL;
                call.row_stats = probed ? st[0] : NULL;
                lp_attn_args head = lp_attn_group_head(&call, g);
                tc.alibi = head.alibi_slope;
                /* naive's sink from the case itself, not from lp_attn_group_head */
                head.sink_logit = gc->per_head_sink ? sinks[g] : tc.sink;
                attn_want w = {malloc((size_t)(gc->n_q * hd) * sizeof(double)),
                               malloc((size_t)(gc->n_q * gc->n_k) * sizeof(double)),
                               malloc((size_t)gc->n_q * sizeof(double))};
                assert_true(w.out && w.p && w.sink);
                naive_attention(&head, k.decoded, v.decoded, w.out, w.p, w.sink);
                attn_errors e = compare_run(&tc, &head, &w);
                worst.out = e.out > worst.out || isnan(e.out) ? e.out : worst.out;
                worst.p = e.p > worst.p || isnan(e.p) ? e.p : worst.p;
                worst.stat = e.stat > worst.stat || isnan(e.stat) ? e.stat : worst.stat;
                free(w.out);
                free(w.p);
                free(w.sink);
            }
            printf("attention %-19s %-5s %-4s group %2lld probes=%d: worst |out| %.1e (budget "
                   "2e-6), |p| %.1e (1e-6), stats %.1e (5e-5); equal to one call per head\n",
                   gc->name, fi % 2 ? "ref" : "tiled", lp_isa_name(lp_kernels_isa()),
                   (long long)G, probed, worst.out, worst.p, worst.stat);
            assert_true(worst.out <= 2e-6);
            assert_true(worst.p <= 1e-6);
            assert_true(worst.stat <= 5e-5);
            assert_memory_equal(outs[0], outs[1], (size_t)(G * gc->n_q * out_stride) * sizeof(float));
            if (probed) {
                assert_memory_equal(probs[0], probs[1],
                                    (size_t)(G * gc->n_q * gc->n_k) * sizeof(float));
                assert_memory_equal(st[0], st[1], (size_t)(G * gc->n_q) * sizeof **st);
            }
            for (int t = 0; t < 2; t++) {
                free(outs[t]);
                free(probs[t]);
                free(st[t]);
            }
        }
    }
    free(q);
    free_kv(&k);
    free_kv(&v);
}

static void test_attention_gqa(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof gqa_cases / sizeof gqa_cases[0]; c++)
        run_gqa_case(&gqa_cases[c]);
}

/* A head computed in row ranges (as the forward pass splits it across threads) equals the
 * whole call bit for bit: outputs, probabilities and statistics, every ISA. */
static void row_ranges_draw(const float *q, const float *k, const float *v, int64_t n,
                            int64_t hd)
{
    lp_mask_spec mask = lp_mask_causal(n, n);
    static const int64_t cuts[] = {0, 1, 50, 149, 150, 211};
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    for (int si = 0; si < n_isas; si++) {
        assert_true(lp_kernels_set_isa(isas[si]));
        float *out[2] = {nan_array(n * hd), nan_array(n * hd)};
        float *probs[2] = {nan_array(n * n), nan_array(n * n)};
        lp_attn_row_stats *st[2] = {calloc((size_t)n, sizeof **st), calloc((size_t)n, sizeof **st)};
        assert_true(st[0] && st[1]);
        for (int split = 0; split < 2; split++) {
            lp_attn_args a = {.q = q, .k = k, .v = v, .out = out[split], .n_q = n, .n_k = n,
                              .head_dim = hd, .v_dim = hd, .q_stride = hd, .k_stride = hd,
                              .v_stride = hd, .out_stride = hd, .scale = 0.125f, .mask = &mask,
                              .probs = probs[split], .row_stats = st[split], .local_window = 8};
            if (!split) {
                lp_attention(&a);
                continue;
            }
            for (size_t c = 0; c + 1 < sizeof cuts / sizeof cuts[0]; c++) {
                a.row_begin = cuts[c];
                a.row_end = cuts[c + 1];
                lp_attention(&a);
            }
        }
        assert_memory_equal(out[0], out[1], (size_t)(n * hd) * sizeof(float));
        assert_memory_equal(probs[0], probs[1], (size_t)(n * n) * sizeof(float));
        assert_memory_equal(st[0], st[1], (size_t)n * sizeof **st);
        for (int t = 0; t < 2; t++) {
            free(out[t]);
            free(probs[t]);
            free(st[t]);
        }
    }
}

/* Over 40 random draws: a row whose tile changes with the range (its block fused in one tiling,
 * row by row in the other) must still rescale by the same exp (lp_attn_rescale); with libm's
 * expf on the row-by-row side about one draw in eight differed in the last bit. */
static void test_attention_row_ranges(void **state)
{
    (void)state;
    const int64_t n = 211, hd = 64;
    for (int draw = 0; draw < 40; draw++) {
        float *q = rnd_array(n * hd), *k = rnd_array(n * hd), *v = rnd_array(n * hd);
        for (int64_t i = 0; i < n * hd; i++) { /* scores of a few units: the max often rises */
            q[i] *= 2.0f;
            k[i] *= 2.0f;
        }
        row_ranges_draw(q, k, v, n, hd);
        free(q);
        free(k);
        free(v);
    }
}

/* Which heads the decode path serves: a few query rows over a longer key range (a cache),
 * with or without probes, head sizes up to 1024; a prompt of a few tokens (n_q = n_k) and 5 or
 * more rows stay blocked. Without this rule the dec-* cases above would pass on the blocked path
 * and a decode step would silently pack its whole cache again. */
static void test_attention_decode_rule(void **state)
{
    (void)state;
    lp_mask_spec mask = lp_mask_causal(1, 512);
    float probs[1];
    lp_attn_args a = {.n_q = 1, .n_k = 512, .head_dim = 64, .v_dim = 64, .mask = &mask};
    assert_true(lp_attention_decode_applies(&a));
    a.probs = probs; /* observed steps too */
    assert_true(lp_attention_decode_applies(&a));
    a.n_q = LP_ATTN_DECODE_MAX_ROWS;
    assert_true(lp_attention_decode_applies(&a));
    a.n_q = LP_ATTN_DECODE_MAX_ROWS + 1;
    assert_false(lp_attention_decode_applies(&a));
    a.n_q = a.n_k = 3; /* a short prompt's prefill */
    assert_false(lp_attention_decode_applies(&a));
    a.n_q = 1;
    a.n_k = 512;
    a.head_dim = 576; /* MLA's latent keys */
    a.v_dim = 512;
    assert_true(lp_attention_decode_applies(&a));
    a.head_dim = 2048;
    assert_false(lp_attention_decode_applies(&a));
}

/* Same inputs, same bits: the attention of every head run on pools of 1 and 2 threads. */
typedef struct heads_ctx {
    lp_attn_args base;
    float *out;   /* [n_heads, n_q, v_dim] */
    float *probs; /* [n_heads, n_q, n_k] */
    const float *q_all;
} heads_ctx;

static void run_one_head(void *ctx, int64_t head)
{
    heads_ctx *h = ctx;
    lp_attn_args a = h->base;
    a.q = h->q_all + head * a.n_q * a.q_stride;
    a.out = h->out + head * a.n_q * a.v_dim;
    a.probs = h->probs + head * a.n_q * a.n_k;
    a.row_stats = NULL;
    lp_attention(&a);
}

static void test_attention_threads(void **state)
{
    (void)state;
    const int64_t n_heads = 5, n = 90, hd = 16;
    float *q = rnd_array(n_heads * n * hd), *k = rnd_array(n * hd), *v = rnd_array(n * hd);
    lp_mask_spec mask = lp_mask_causal(n, n);
    float *outs[2], *probs[2];
    for (int t = 0; t < 2; t++) {
        lp_pool *pool;
        assert_int_equal(lp_pool_create(t + 1, &pool, NULL), LP_OK);
        outs[t] = nan_array(n_heads * n * hd);
        probs[t] = nan_array(n_heads * n * n);
        heads_ctx h = {{.k = k, .v = v, .n_q = n, .n_k = n, .head_dim = hd, .v_dim = hd,
                        .q_stride = hd, .k_stride = hd, .v_stride = hd, .out_stride = hd,
                        .scale = 0.25f, .mask = &mask},
                       outs[t], probs[t], q};
        lp_pool_run(pool, n_heads, run_one_head, &h);
        lp_pool_destroy(pool);
    }
    assert_memory_equal(outs[0], outs[1], (size_t)(n_heads * n * hd) * sizeof(float));
    assert_memory_equal(probs[0], probs[1], (size_t)(n_heads * n * n) * sizeof(float));
    for (int t = 0; t < 2; t++) {
        free(outs[t]);
        free(probs[t]);
    }
    free(q);
    free(k);
    free(v);
}

/* Check one poisoned run against the clean one: rows in `bad` NaN in output, visible
 * probabilities and statistics; the others bit for bit as before. */
static void check_poisoned(const float *out, const float *clean_out, const float *probs,
                           const float *clean_p, const lp_attn_row_stats *stats, int64_t n,
                           int64_t hd, int64_t window, bool (*bad)(int64_t row, int which),
                           int which)
{
    for (int64_t i = 0; i < n; i++) {
        bool is_bad = bad(i, which);
        for (int64_t d = 0; d < hd; d++)
            assert_true(is_bad ? isnan(out[i * hd + d]) : out[i * hd + d] == clean_out[i * hd + d]);
        for (int64_t j = 0; j < n; j++) {
            bool visible = j <= i && i - j < window;
            if (is_bad && visible)
                assert_true(isnan(probs[i * n + j]));
            else
                assert_true(probs[i * n + j] == clean_p[i * n + j]);
        }
        assert_true(is_bad ? isnan(stats[i].row_sum) && isnan(stats[i].entropy)
                           : stats[i].row_sum == 1.0f);
    }
}

/* which 0: NaN in q row 3; 1: NaN in key 7 (rows 7..11 see it with causal window 5); 2: a NaN
 * sink logit (every row). */
static bool poisoned_row(int64_t i, int which)
{
    return which == 0 ? i == 3 : which == 1 ? (i >= 7 && i < 12) : true;
}

/* A NaN in q row 3 poisons that row only; a NaN in key 7 poisons exactly the rows that see key 7;
 * a NaN sink logit poisons every row. Poisoned rows are NaN in output, visible probabilities and
 * statistics, never a plausible distribution; the other rows are untouched. */
static void test_attention_nan(void **state)
{
    (void)state;
    enum { N = 20, HD = 8 };
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    float *q = rnd_array(N * HD), *k = rnd_array(N * HD), *v = rnd_array(N * HD);
    lp_mask_spec mask = lp_mask_causal(N, N);
    mask.window = 5;
    void (*fns[2])(const lp_attn_args *) = {lp_attention, lp_attention_ref};
    for (int si = 0; si < n_isas; si++) {
        assert_true(lp_kernels_set_isa(isas[si]));
        for (int f = 0; f < 2; f++) {
            float clean_out[N * HD], out[N * HD], clean_p[N * N], probs[N * N];
            lp_attn_row_stats stats[N];
            lp_attn_args a = {.q = q, .k = k, .v = v, .out = clean_out, .n_q = N, .n_k = N,
                              .head_dim = HD, .v_dim = HD, .q_stride = HD, .k_stride = HD,
                              .v_stride = HD, .out_stride = HD, .scale = 0.3f, .mask = &mask,
                              .probs = clean_p, .row_stats = stats, .local_window = 4};
            fns[f](&a);
            for (int which = 0; which < 3; which++) {
                float *poisoned = which == 0 ? q + 3 * HD : k + 7 * HD;
                float saved = poisoned[2];
                if (which < 2)
                    poisoned[2] = NAN;
                a.out = out;
                a.probs = probs;
                a.has_sink = which == 2;
                a.sink_logit = NAN;
                fns[f](&a);
                poisoned[2] = saved;
                a.has_sink = false;
                check_poisoned(out, clean_out, probs, clean_p, stats, N, HD, 5, poisoned_row,
                               which);
            }
        }
        /* NaN propagates through the vector kernels too */
        float x[11];
        for (int i = 0; i < 11; i++)
            x[i] = (float)i;
        x[9] = NAN;
        lp_softmax(x, 11);
        for (int i = 0; i < 11; i++)
            assert_true(isnan(x[i]));
        float g[9] = {1, 2, 3, 4, 5, 6, NAN, 8, 9}, u[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
        lp_silu_mul(g, u, 9);
        assert_true(isnan(g[6]) && !isnan(g[5]));
    }
    free(q);
    free(k);
    free(v);
}

/* The window boundary both ways: with W = 5 query p sees p-4 .. p and not p-5. */
static void test_attention_window_boundary(void **state)
{
    (void)state;
    enum { N = 12, HD = 4, W = 5 };
    float *q = rnd_array(N * HD), *k = rnd_array(N * HD), *v = rnd_array(N * HD);
    float out[N * HD], probs[N * N];
    lp_mask_spec mask = lp_mask_causal(N, N);
    mask.window = W;
    lp_attn_args a = {.q = q, .k = k, .v = v, .out = out, .n_q = N, .n_k = N, .head_dim = HD,
                      .v_dim = HD, .q_stride = HD, .k_stride = HD, .v_stride = HD,
                      .out_stride = HD, .scale = 0.5f, .mask = &mask, .probs = probs};
    lp_attention(&a);
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < N; j++) {
            bool visible = j <= i && i - j < W;
            if (visible)
                assert_true(probs[i * N + j] > 0.0f);
            else
                assert_true(probs[i * N + j] == 0.0f);
        }
    free(q);
    free(k);
    free(v);
}

/* ---- sparsity statistics */

/* One query row at the last position of n keys, head_dim 1, q = 1: its scores are the k values. */
static void sparsity_of_scores(void (*fn)(const lp_attn_args *), const float *scores, int64_t n,
                               lp_attn_row_stats *st)
{
    float q = 1.0f, out = 0.0f, v[16] = {0};
    lp_mask_spec mask = lp_mask_causal(1, n);
    lp_attn_args a = {.q = &q, .k = scores, .v = v, .out = &out, .n_q = 1, .n_k = n,
                      .head_dim = 1, .v_dim = 1, .q_stride = 1, .k_stride = 1, .v_stride = 1,
                      .out_stride = 1, .scale = 1.0f, .mask = &mask, .row_stats = st,
                      .local_window = 4};
    fn(&a);
}

static void check_sparsity(const lp_attn_row_stats *st, float k50, float k90, float k99,
                           double low)
{
    assert_true(st->keys50 == k50);
    assert_true(st->keys90 == k90);
    assert_true(st->keys99 == k99);
    assert_true(fabs((double)st->low_mass - low) <= 1e-7);
}

/* Rows with known answers, through the spec function and both kernels on every ISA: uniform over
 * 8 keys (4 / 8 / 8 keys, nothing below 1e-3), one-hot (1 / 1 / 1), and a geometric row
 * p_j proportional to 2^-j over 10 keys (1 / 4 / 7 keys; only p_9 = 2^-9 / (2 - 2^-9) is below
 * 1e-3). */
static void test_attention_sparsity_known_rows(void **state)
{
    (void)state;
    /* exact binary fractions summing to 1: sorted .5 .375 .0625 .0615234375 2^-10 */
    float shuffled[5] = {0.0625f, 0.5f, 0.0009765625f, 0.375f, 0.0615234375f};
    lp_attn_row_stats st;
    float copy[5];
    memcpy(copy, shuffled, sizeof copy);
    lp_attn_row_sparsity(copy, 5, &st);
    check_sparsity(&st, 1, 3, 4, 0.0009765625);
    lp_attn_row_sparsity_sorted(shuffled, 5, &st);
    check_sparsity(&st, 1, 3, 4, 0.0009765625);
    assert_true(shuffled[0] == 0.5f && shuffled[4] == 0.0009765625f);

    float uniform[8] = {0}, one_hot[8] = {0}, geometric[10];
    one_hot[3] = 100.0f;
    for (int j = 0; j < 10; j++)
        geometric[j] = -(float)j * logf(2.0f);
    double low_geo = ldexp(1.0, -9) / (2.0 - ldexp(1.0, -9));
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    void (*fns[2])(const lp_attn_args *) = {lp_attention, lp_attention_ref};
    for (int si = 0; si < n_isas; si++) {
        assert_true(lp_kernels_set_isa(isas[si]));
        for (int f = 0; f < 2; f++) {
            sparsity_of_scores(fns[f], uniform, 8, &st);
            check_sparsity(&st, 4, 8, 8, 0.0);
            sparsity_of_scores(fns[f], one_hot, 8, &st);
            check_sparsity(&st, 1, 1, 1, 0.0);
            sparsity_of_scores(fns[f], geometric, 10, &st);
            check_sparsity(&st, 1, 4, 7, low_geo);
        }
    }
}

/* A row of kind `kind` (0 random, 1 ties from a few values, 2 geometric with ratio r, 3 one-hot
 * among zeros, 4 uniform, 5 sharp softmax reaching denormals, 6 random with zeros and denormals,
 * 7 two-level ties around each threshold) of n values, normalized to about 1. */
static void sparsity_row(int kind, int64_t n, float *p)
{
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double u = 0.5 + 0.5 * (double)rnd(); /* [0, 1) */
        int pick = (int)(u * 1e6) % 12;
        double x = 0.0;
        switch (kind) {
        case 0: x = u; break;
        case 1: x = (double)(1 + pick % 3); break;
        case 2: x = pow(0.5 + 0.49 * u, (double)j); break;
        case 3: x = j == n / 2 ? 1.0 : 0.0; break;
        case 4: x = 1.0; break;
        case 5: x = exp(-100.0 * u); break;
        case 6: x = pick % 4 == 0 ? 0.0 : pick % 3 == 0 ? ldexp(u, -140) : u; break;
        default: x = j % 10 == 0 ? 5.0 : 1.0; break;
        }
        p[j] = (float)x;
        sum += x;
    }
    for (int64_t j = 0; sum > 0.0 && j < n; j++)
        p[j] = (float)((double)p[j] / sum);
    if (kind == 6 && n > 2) { /* denormals that survive the normalization */
        p[0] = 0x1p-149f;
        p[1] = 0x1p-130f;
    }
}

/* The radix selection against the sorted definition: every field bit-identical on rows of odd
 * lengths (1 .. 4099) and every kind, shuffled as they come. */
static void test_attention_sparsity_selection(void **state)
{
    (void)state;
    enum { MAX_N = 4099 };
    float *row = malloc(MAX_N * sizeof *row), *a = malloc(MAX_N * sizeof *a),
          *b = malloc(MAX_N * sizeof *b);
    assert_true(row && a && b);
    static const int64_t lengths[] = {1, 2, 3, 7, 16, 17, 33, 150, 511, 1031, 4099};
    int rows = 0;
    for (int kind = 0; kind < 8; kind++)
        for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++)
            for (int rep = 0; rep < 6; rep++) {
                int64_t n = lengths[li];
                sparsity_row(kind, n, row);
                memcpy(a, row, (size_t)n * sizeof *a);
                memcpy(b, row, (size_t)n * sizeof *b);
                lp_attn_row_stats fast, sorted;
                memset(&fast, 0xff, sizeof fast);
                memset(&sorted, 0, sizeof sorted);
                lp_attn_row_sparsity(a, n, &fast);
                lp_attn_row_sparsity_sorted(b, n, &sorted);
                assert_true(fast.keys50 == sorted.keys50);
                assert_true(fast.keys90 == sorted.keys90);
                assert_true(fast.keys99 == sorted.keys99);
                assert_memory_equal(&fast.low_mass, &sorted.low_mass, sizeof fast.low_mass);
                assert_true(fast.keys50 <= fast.keys90 && fast.keys90 <= fast.keys99 &&
                            fast.keys99 <= (float)n);
                rows++;
            }
    float zeros[5] = {0};
    lp_attn_row_stats st;
    lp_attn_row_sparsity(zeros, 5, &st);
    check_sparsity(&st, 0, 0, 0, 0.0);
    float bad[3] = {0.5f, NAN, 0.5f}, negative[2] = {1.5f, -0.5f};
    lp_attn_row_sparsity(bad, 3, &st);
    assert_true(isnan(st.keys50) && isnan(st.keys99) && isnan(st.low_mass));
    lp_attn_row_sparsity_sorted(negative, 2, &st);
    assert_true(isnan(st.keys90));
    printf("sparsity selection: %d rows equal the sorted definition exactly\n", rows);
    free(row);
    free(a);
    free(b);
}

/* On random causal heads every ISA's blocked kernel, with and without probabilities, gives the
 * reference's key counts exactly and its low mass to 1e-6. */
static void test_attention_sparsity_isas(void **state)
{
    (void)state;
    enum { N = 150, HD = 16 };
    float *q = rnd_array(N * HD), *k = rnd_array(N * HD), *v = rnd_array(N * HD);
    float *out = malloc(N * HD * sizeof *out), *probs = malloc(N * N * sizeof *probs);
    lp_attn_row_stats *want = malloc(N * sizeof *want), *got = malloc(N * sizeof *got);
    assert_true(out && probs && want && got);
    lp_mask_spec mask = lp_mask_causal(N, N);
    lp_attn_args a = {.q = q, .k = k, .v = v, .out = out, .n_q = N, .n_k = N, .head_dim = HD,
                      .v_dim = HD, .q_stride = HD, .k_stride = HD, .v_stride = HD,
                      .out_stride = HD, .scale = 2.0f, .mask = &mask, .row_stats = want,
                      .local_window = 4};
    lp_attention_ref(&a);
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    for (int si = 0; si < n_isas; si++) {
        assert_true(lp_kernels_set_isa(isas[si]));
        for (int with_probs = 0; with_probs < 2; with_probs++) {
            a.row_stats = got;
            a.probs = with_probs ? probs : NULL;
            lp_attention(&a);
            double worst = 0.0;
            for (int i = 0; i < N; i++) {
                assert_true(got[i].keys50 == want[i].keys50);
                assert_true(got[i].keys90 == want[i].keys90);
                assert_true(got[i].keys99 == want[i].keys99);
                double d = fabs((double)got[i].low_mass - (double)want[i].low_mass);
                worst = d > worst ? d : worst;
            }
            printf("sparsity %-5s probs=%d: key counts equal the reference, worst |low_mass| %.1e "
                   "(1e-6)\n", lp_isa_name(isas[si]), with_probs, worst);
            assert_true(worst <= 1e-6);
        }
        /* skip_sparsity: the same statistics but the four sparsity fields, left 0 */
        lp_attn_row_stats *skipped = malloc(N * sizeof *skipped);
        assert_non_null(skipped);
        a.row_stats = skipped;
        a.probs = NULL;
        a.skip_sparsity = true;
        lp_attention(&a);
        a.skip_sparsity = false;
        for (int i = 0; i < N; i++) {
            assert_true(skipped[i].keys50 == 0.0f && skipped[i].keys99 == 0.0f &&
                        skipped[i].low_mass == 0.0f);
            assert_true(skipped[i].entropy == got[i].entropy &&
                        skipped[i].distance == got[i].distance);
        }
        free(skipped);
    }
    free(q);
    free(k);
    free(v);
    free(out);
    free(probs);
    free(want);
    free(got);
}

/* ---- the fused softmax step and its exp (attention_avx2.c against ref.c and expf) */

/* Units in the last place between got and want (want's spacing; 0 when both are equal). */
static double ulps(float got, float want)
{
    if (got == want)
        return 0.0;
    float spacing = nextafterf(fabsf(want), INFINITY) - fabsf(want);
    return fabs((double)got - (double)want) / (double)spacing;
}

/* The vector exp of the softmax weights against expf over the whole range its callers use:
 * x = s - m in [LP_ATTN_EXP_MIN, 0] on a grid of 2^22 steps plus the exact ends, exactly 0 below
 * the flush threshold (and for -inf). Budget 2 ulp. */
static void test_attention_exp(void **state)
{
    (void)state;
    if (!lp_kernels_set_isa(LP_ISA_AVX2)) {
        printf("SKIP: this CPU has no AVX2/FMA; the vector exp is not used here\n");
        return;
    }
    enum { STEPS = 1 << 22, CHUNK = 4096 };
    float x[CHUNK], want[CHUNK];
    double worst = 0.0, worst_at = 0.0;
    for (int64_t i0 = 0; i0 <= STEPS; i0 += CHUNK) {
        int64_t n = STEPS + 1 - i0 < CHUNK ? STEPS + 1 - i0 : CHUNK;
        for (int64_t i = 0; i < n; i++) {
            x[i] = LP_ATTN_EXP_MIN * (float)((double)(i0 + i) / STEPS);
            want[i] = expf(x[i]);
        }
        lp_attn_exp_avx2(x, n);
        for (int64_t i = 0; i < n; i++) {
            double e = ulps(x[i], want[i]);
            if (e > worst) {
                worst = e;
                worst_at = (double)LP_ATTN_EXP_MIN * (double)(i0 + i) / STEPS;
            }
        }
    }
    float edges[7] = {0.0f, -0.0f, LP_ATTN_EXP_MIN, nextafterf(LP_ATTN_EXP_MIN, -INFINITY),
                      -87.5f, -1000.0f, -INFINITY};
    lp_attn_exp_avx2(edges, 7);
    assert_true(edges[0] == 1.0f && edges[1] == 1.0f);
    assert_true(edges[2] > 0.0f && ulps(edges[2], expf(LP_ATTN_EXP_MIN)) <= 2.0);
    for (int i = 3; i < 7; i++)
        assert_true(edges[i] == 0.0f); /* flushed, not a denormal or garbage */
    printf("attention exp avx2: worst %.2f ulp of expf at x = %.4f on [%.0f, 0] (budget 2)\n",
           worst, worst_at, (double)LP_ATTN_EXP_MIN);
    assert_true(worst <= 2.0);
}

/* attn_softmax of every ISA against ref's twin (expf) on score tiles of 1..6 rows and 1..64 keys
 * (odd widths for the masked tails), row by row starting from nothing (m = -inf), from a max
 * below the block's and from one above it, with scores reaching the flush range; a row holding
 * inf or NaN is flagged and left as it was. NaN-prefilled: columns past n and rows past `rows`
 * stay NaN. Budgets: weights and alpha 2 ulp of ref's (the exp's own), l 1e-6 relative (sums in
 * another order). */
static void test_attention_softmax_step(void **state)
{
    (void)state;
    enum { LD = 67 };
    const lp_kernel_table *ref = lp_kernels_table_for(LP_ISA_REF);
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    static const int64_t widths[] = {1, 3, 8, 9, 16, 31, 63, 64};
    for (int si = 0; si < n_isas; si++) {
        const lp_kernel_table *kt = lp_kernels_table_for(isas[si]);
        double worst_w = 0.0, worst_l = 0.0;
        for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++)
            for (int rows = 1; rows <= LP_ATTN_MR; rows++)
                for (int start = 0; start < 3; start++) {
                    int64_t n = widths[wi];
                    float s[LP_ATTN_MR * LD], s_ref[LP_ATTN_MR * LD], given[LP_ATTN_MR * LD];
                    float m[LP_ATTN_MR], l[LP_ATTN_MR], a[LP_ATTN_MR];
                    float m_ref[LP_ATTN_MR], l_ref[LP_ATTN_MR], a_ref[LP_ATTN_MR];
                    for (int i = 0; i < LP_ATTN_MR * LD; i++)
                        given[i] = (int64_t)(i % LD) < n ? 30.0f * rnd() : NAN;
                    int bad_row = rows > 2 ? rows - 1 : -1; /* one poisoned row per tile */
                    if (bad_row >= 0)
                        given[bad_row * LD + n / 2] = start == 1 ? NAN : INFINITY;
                    for (int r = 0; r < LP_ATTN_MR; r++) {
                        m[r] = start == 0 ? -INFINITY : start == 1 ? -5.0f : 45.0f;
                        l[r] = start == 0 ? 0.0f : 1.7f;
                        a[r] = NAN;
                        for (int64_t j = r < rows ? n : 0; j < LD; j++)
                            given[r * LD + j] = NAN;
                    }
                    memcpy(s, given, sizeof s);
                    memcpy(s_ref, given, sizeof s);
                    memcpy(m_ref, m, sizeof m);
                    memcpy(l_ref, l, sizeof l);
                    memcpy(a_ref, a, sizeof a);
                    unsigned bad = kt->attn_softmax(s, LD, rows, n, m, l, a);
                    unsigned bad_ref = ref->attn_softmax(s_ref, LD, rows, n, m_ref, l_ref, a_ref);
                    assert_int_equal(bad, bad_ref);
                    assert_int_equal(bad, bad_row >= 0 ? 1u << bad_row : 0u);
                    for (int r = 0; r < LP_ATTN_MR; r++) {
                        bool untouched = r >= rows || r == bad_row;
                        if (untouched) {
                            assert_memory_equal(s + r * LD, given + r * LD, LD * sizeof *s);
                            assert_true(isnan(a[r]));
                            continue;
                        }
                        for (int64_t j = 0; j < LD; j++) {
                            if (j >= n) {
                                assert_true(isnan(s[r * LD + j]));
                                continue;
                            }
                            double e = ulps(s[r * LD + j], s_ref[r * LD + j]);
                            worst_w = e > worst_w ? e : worst_w;
                        }
                        assert_true(m[r] == m_ref[r]);
                        double ea = ulps(a[r], a_ref[r]);
                        worst_w = ea > worst_w ? ea : worst_w;
                        double el = fabs((double)l[r] - (double)l_ref[r]) / (double)l_ref[r];
                        worst_l = el > worst_l ? el : worst_l;
                    }
                }
        printf("attention softmax step %s: weights and alpha worst %.2f ulp of ref's (budget 2), "
               "l worst %.1e relative (1e-6)\n", lp_isa_name(isas[si]), worst_w, worst_l);
        assert_true(worst_w <= 2.0);
        assert_true(worst_l <= 1e-6);
    }
}

/* attn_row_probs of every ISA against ref's: rows of 0..1000 kept scores at or below m (some in
 * the flush range), keys starting anywhere, windows cutting the row. Budgets: p 2 ulp (exp) +
 * 1 (scale); the sums 4e-6 of the sum of their terms' sizes (float sums of up to 1000 terms in
 * another order: the rounding grows like sqrt(n) ulp, 1.8e-6 seen on one draw of the inputs);
 * max_prob exact to 3 ulp. */
static void test_attention_row_probs(void **state)
{
    (void)state;
    const lp_kernel_table *ref = lp_kernels_table_for(LP_ISA_REF);
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    static const int64_t lengths[] = {0, 1, 7, 8, 9, 64, 100, 1000};
    for (int si = 0; si < n_isas; si++) {
        const lp_kernel_table *kt = lp_kernels_table_for(isas[si]);
        double worst_p = 0.0, worst_sum = 0.0;
        for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++)
            for (int shape = 0; shape < 3; shape++) {
                int64_t n = lengths[li], j0 = shape * 37, pos = j0 + n - 1 + shape;
                int64_t window = shape == 0 ? 4 : shape == 1 ? n / 2 + 1 : 1 << 30;
                float *s = nan_array(n + 1), *s_ref = nan_array(n + 1);
                float m = 2.5f, inv_l = 1.0f / (1.0f + (float)n);
                for (int64_t j = 0; j < n; j++)
                    s[j] = s_ref[j] = m - (shape == 2 ? 100.0f : 8.0f) * (0.5f + 0.5f * rnd());
                if (n > 0)
                    s[n / 3] = s_ref[n / 3] = m; /* the row's max */
                lp_attn_row_sums got, want;
                kt->attn_row_probs(s, n, m, inv_l, j0, pos, window, &got);
                ref->attn_row_probs(s_ref, n, m, inv_l, j0, pos, window, &want);
                assert_true(isnan(s[n])); /* nothing written past the row */
                double size_e = 0.0, size_d = 0.0, size_l = 0.0;
                for (int64_t j = 0; j < n; j++) {
                    double e = ulps(s[j], s_ref[j]);
                    worst_p = e > worst_p ? e : worst_p;
                    double p = (double)s_ref[j];
                    size_e += fabs(p * 100.0);
                    size_d += fabs(p * (double)(pos - j0 - j));
                    size_l += p;
                }
                double diffs[3] = {
                    fabs((double)got.entropy_part - (double)want.entropy_part) / (size_e + 1e-30),
                    fabs((double)got.distance - (double)want.distance) / (size_d + 1e-30),
                    fabs((double)got.local - (double)want.local) / (size_l + 1e-30)};
                for (int d = 0; d < 3; d++)
                    worst_sum = diffs[d] > worst_sum ? diffs[d] : worst_sum;
                assert_true(ulps(got.max_prob, want.max_prob) <= 3.0);
                /* the sparsity's range is taken from these two: exactly the stored p */
                float top = 0.0f, bottom = INFINITY;
                for (int64_t j = 0; j < n; j++) {
                    top = s[j] > top ? s[j] : top;
                    bottom = s[j] > 0.0f && s[j] < bottom ? s[j] : bottom;
                }
                assert_true(got.max_prob == top && got.min_positive == bottom);
                if (n == 0)
                    assert_true(got.max_prob == 0.0f && got.local == 0.0f);
                free(s);
                free(s_ref);
            }
        printf("attention row probs %s: p worst %.2f ulp of ref's (budget 3), sums worst %.1e of "
               "their terms (4e-6)\n", lp_isa_name(isas[si]), worst_p, worst_sum);
        assert_true(worst_p <= 3.0);
        assert_true(worst_sum <= 4e-6);
    }
}

/* The sparsity histogram's sweeps of every ISA against ref's on rows with zeros, -0, denormals,
 * ties and values at 1e-3: the same range, the same bucket counts and mantissa sums, the same
 * low part and the same gathered front (in the same order). */
static void test_attention_sparsity_sweeps(void **state)
{
    (void)state;
    enum { MAX_N = 1031, BUCKETS = 2048 };
    const lp_kernel_table *ref = lp_kernels_table_for(LP_ISA_REF);
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    static const int64_t lengths[] = {0, 1, 7, 8, 63, 64, 65, 200, 1031};
    float *row = malloc(MAX_N * sizeof *row), *a = malloc(MAX_N * sizeof *a),
          *b = malloc(MAX_N * sizeof *b);
    uint64_t *hist = malloc(BUCKETS * sizeof *hist), *hist_ref = malloc(BUCKETS * sizeof *hist);
    assert_true(row && a && b && hist && hist_ref);
    for (int si = 0; si < n_isas; si++) {
        const lp_kernel_table *kt = lp_kernels_table_for(isas[si]);
        for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++)
            for (int kind = 0; kind < 8; kind++) {
                int64_t n = lengths[li];
                sparsity_row(kind, n, row);
                for (int64_t j = 0; j < n; j += 11)
                    row[j] = j % 2 ? -0.0f : 1e-3f;
                uint32_t lo, hi, lo_ref, hi_ref;
                kt->sparsity_range(row, n, &lo, &hi);
                ref->sparsity_range(row, n, &lo_ref, &hi_ref);
                assert_true(lo == lo_ref && hi == hi_ref);
                if (hi == 0)
                    continue;
                /* a layout as ref.c's would pick: one bucket per 2^shift bits from lo down */
                int shift = 0;
                while (((hi - (lo & ~((1u << shift) - 1u))) >> shift) + 2 >= BUCKETS)
                    shift++;
                uint32_t base = lo & ~((1u << shift) - 1u), low_bits = 0x3a83126fu; /* 1e-3f */
                uint32_t low_key = low_bits > lo && low_bits <= hi
                                       ? ((low_bits - base) >> shift) + 1u : 0u;
                memset(hist, 0, BUCKETS * sizeof *hist);
                memset(hist_ref, 0, BUCKETS * sizeof *hist);
                uint64_t part = kt->sparsity_histogram(row, n, base, shift, low_key, low_bits,
                                                       hist);
                uint64_t part_ref = ref->sparsity_histogram(row, n, base, shift, low_key,
                                                            low_bits, hist_ref);
                assert_true(part == part_ref);
                assert_memory_equal(hist, hist_ref, BUCKETS * sizeof *hist);
                /* low_key 0 (a row wholly on one side of 1e-3) takes a sweep of its own */
                memset(hist, 0, BUCKETS * sizeof *hist);
                memset(hist_ref, 0, BUCKETS * sizeof *hist);
                part = kt->sparsity_histogram(row, n, base, shift, 0, low_bits, hist);
                part_ref = ref->sparsity_histogram(row, n, base, shift, 0, low_bits, hist_ref);
                assert_true(part == part_ref && part == 0);
                assert_memory_equal(hist, hist_ref, BUCKETS * sizeof *hist);
                uint64_t total = 0;
                for (int k = 0; k < BUCKETS; k++)
                    total += hist[k] >> 40;
                assert_true(total == (uint64_t)n); /* every value counted once */
                uint32_t keys[3] = {0, low_key, ((hi - base) >> shift) + 1u};
                memcpy(a, row, (size_t)n * sizeof *a);
                memcpy(b, row, (size_t)n * sizeof *b);
                int64_t front = kt->sparsity_gather(a, n, base, shift, keys);
                assert_true(front == ref->sparsity_gather(b, n, base, shift, keys));
                assert_memory_equal(a, b, (size_t)n * sizeof *a);
            }
    }
    printf("sparsity sweeps: range, histogram and gather equal ref's on every ISA\n");
    free(row);
    free(a);
    free(b);
    free(hist);
    free(hist_ref);
}

/* ---- a bare pass computes no row statistics */

static bool want_attn_stats(void *ctx, const lp_site *site)
{
    (void)ctx;
    return site->kind == LP_SITE_ATTN_STATS;
}

static lp_status observe_ignore(void *ctx, const lp_site *site, const lp_view *view, lp_error *err)
{
    (void)ctx;
    (void)site;
    (void)view;
    (void)err;
    return LP_OK;
}

/* A tiny Llama through lp_forward: with no observer (and with one that wants nothing) the
 * kernels' pass 2 runs for no row; with one that wants the head statistics it runs for every
 * (layer, head, position). */
static void test_attention_bare_pass(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/attn-bare-%ld", lp_test_tmp_dir(), (long)getpid());
    lp_synth_spec spec;
    lp_synth_spec_init(&spec, LP_SYNTH_LLAMA);
    lp_error err = {0};
    if (lp_synth_write_family(dir, &spec, &err) != LP_OK)
        fail_msg("lp_synth_write_family: %s", err.msg);
    lp_model *model;
    if (lp_model_open(dir, &model, &err) != LP_OK)
        fail_msg("lp_model_open: %s", err.msg);
    const lp_arch *arch = lp_model_arch(model);
    enum { T = 70 };
    int32_t tokens[T];
    for (int t = 0; t < T; t++)
        tokens[t] = (int32_t)((t * 7 + 3) % spec.vocab);
    lp_batch batch = lp_batch_single(tokens, T);
    lp_forward_opts opts;
    lp_forward_opts_init(&opts);
    const lp_observer nothing = {NULL, NULL, observe_ignore};
    const lp_observer stats = {NULL, want_attn_stats, observe_ignore};
    const lp_observer *observers[3] = {NULL, &nothing, &stats};
    for (int o = 0; o < 3; o++) {
        opts.observer = observers[o];
        uint64_t before = lp_attn_rows_probed();
        assert_int_equal(lp_forward(model, &batch, &opts, &err), LP_OK);
        uint64_t probed = lp_attn_rows_probed() - before;
        uint64_t want = o < 2 ? 0 : (uint64_t)arch->n_layers * (uint64_t)arch->n_heads * T;
        printf("attention bare pass: observer %d, %llu rows with probabilities or statistics "
               "(want %llu)\n", o, (unsigned long long)probed, (unsigned long long)want);
        assert_true(probed == want);
    }
    lp_model_close(model);
    static const char *const files[] = {"model.safetensors", "config.json", "tokenizer.json",
                                        "planted_heads.json"};
    char path[1024];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        remove(path);
    }
    rmdir(dir);
}

/* attn_pack_k of every ISA against ref's twin, bit for bit: head_dim 1..9 and the model sizes
 * 64, 80, 96, 128, 256 (8 x 8 blocks and every scalar tail), 0..16 keys (query tiles of 1..6
 * rows are packed by it too), rows far apart (a projection's stride). NaN-prefilled panels are
 * fully written (keys past n are 0); guard values after each panel stay. */
static void test_attention_pack(void **state)
{
    (void)state;
    enum { STRIDE = 1031, MAX_HD = 256, GUARD = 16 };
    static const int64_t dims[] = {1, 2, 7, 8, 9, 64, 80, 96, 128, 256};
    const lp_kernel_table *ref = lp_kernels_table_for(LP_ISA_REF);
    float *src = malloc(LP_ATTN_NR * STRIDE * sizeof *src);
    float *got = aligned_alloc(64, (LP_ATTN_NR * MAX_HD + GUARD) * sizeof *got);
    float *want = aligned_alloc(64, (LP_ATTN_NR * MAX_HD + GUARD) * sizeof *want);
    assert_true(src && got && want);
    for (int64_t i = 0; i < LP_ATTN_NR * STRIDE; i++)
        src[i] = (float)((i * 7919) % 2003) / 1001.0f - 1.0f;
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    int64_t cases = 0;
    for (int si = 0; si < n_isas; si++) {
        const lp_kernel_table *kt = lp_kernels_table_for(isas[si]);
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
            for (int64_t n = 0; n <= LP_ATTN_NR; n++, cases++) {
                int64_t hd = dims[di], size = LP_ATTN_NR * hd;
                for (int64_t i = 0; i < size + GUARD; i++)
                    got[i] = i < size ? NAN : -7.0f;
                kt->attn_pack_k(src + 5, STRIDE, n, hd, got);
                ref->attn_pack_k(src + 5, STRIDE, n, hd, want);
                assert_memory_equal(got, want, (size_t)size * sizeof *got);
                for (int64_t i = size; i < size + GUARD; i++)
                    assert_true(got[i] == -7.0f);
            }
    }
    /* the spec itself: a value from its row and column */
    ref->attn_pack_k(src, STRIDE, 3, 9, want);
    assert_true(want[5 * LP_ATTN_NR + 2] == src[2 * STRIDE + 5]);
    assert_true(want[5 * LP_ATTN_NR + 3] == 0.0f);
    printf("attention packing: %lld panels of %d ISAs bit-equal to ref's (budget 0)\n",
           (long long)cases, n_isas);
    free(src);
    free(got);
    free(want);
}

/* The f16 maps' conversion of every ISA against lp_f32_to_f16 (the spec) bit for bit, on every
 * rounding case a probability or a stray value can hit: halfway mantissas (ties to even),
 * values that round up into the next exponent, f16 subnormals and their halfway points, the
 * underflow edge, overflow to infinity, signed zeros, infinities; lengths that leave every
 * tail. A NaN stays a NaN of the same sign (its payload is not specified). Outputs prefilled
 * with 0xffff past n stay so. */
static void test_attention_f16_maps(void **state)
{
    (void)state;
    enum { N = 4099 };
    static const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x3f800000u, 0x3f801000u, 0x3f803000u, 0x3f800fffu,
        0x3f801001u, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0x7f800000u, 0xff800000u,
        0x38800000u, 0x387fe000u, 0x33000000u, 0x33000001u, 0x32ffffffu, 0x33800000u,
        0x35000000u, 0x34c00000u, 0x3a83126fu, 0x387fffffu, 0x00000001u, 0x3fffffffu};
    enum { N_SPECIAL = sizeof special / sizeof *special };
    float *x = malloc(N * sizeof *x);
    uint16_t *buf = malloc((N + 24) * sizeof *buf), *want = malloc(N * sizeof *want);
    assert_true(x && buf && want);
    uint64_t state_bits = 99;
    for (int64_t i = 0; i < N; i++) {
        uint32_t u;
        state_bits = state_bits * 6364136223846793005ull + 1442695040888963407ull;
        u = (uint32_t)(state_bits >> 32);
        if (i < N_SPECIAL)
            u = special[i];
        else if (i % 3 == 0) /* probabilities: [0, 2) with every exponent an f16 can hold */
            u = 0x33000000u + u % (0x40000000u - 0x33000000u);
        else if (i % 3 == 1) /* exact halfway and near-halfway mantissas */
            u = (u & 0xffffe000u) | 0x1000u | (u & 1u);
        memcpy(&x[i], &u, sizeof u);
    }
    x[N - 1] = NAN;
    x[N - 2] = -NAN;
    for (int64_t i = 0; i < N; i++)
        want[i] = lp_f32_to_f16(x[i]);
    lp_isa isas[LP_ISA_COUNT];
    int n_isas = available_isas(isas);
    static const int64_t lengths[] = {0, 1, 7, 15, 16, 17, 31, 4099};
    for (int si = 0; si < n_isas; si++) {
        const lp_kernel_table *kt = lp_kernels_table_for(isas[si]);
        for (size_t li = 0; li < 2 * sizeof lengths / sizeof *lengths; li++) {
            int64_t n = lengths[li / 2];
            /* the second pass shifts the output off its alignment: the streaming stores start
             * at the first 32-byte boundary */
            uint16_t *got = buf + (li % 2 ? 7 : 0);
            memset(buf, 0xff, (N + 24) * sizeof *buf);
            const float *src = n == N ? x : x + N_SPECIAL - 1; /* short rows: random values */
            kt->f32_to_f16(src, got, n);
            int64_t mismatches = 0;
            for (int64_t i = 0; i < n; i++) {
                uint16_t w = want[src - x + i], g = got[i];
                bool nan_ok = (w & 0x7fffu) > 0x7c00u && (g & 0x7fffu) > 0x7c00u &&
                              (w & 0x8000u) == (g & 0x8000u);
                mismatches += g != w && !nan_ok;
            }
            for (int64_t i = n; i < n + 8; i++)
                assert_true(got[i] == 0xffffu);
            if (mismatches)
                printf("f32_to_f16 %s n=%lld: %lld values differ from lp_f32_to_f16\n",
                       lp_isa_name(isas[si]), (long long)n, (long long)mismatches);
            assert_true(mismatches == 0);
        }
        printf("attention f16 maps %s: every value bit-equal to lp_f32_to_f16 (budget 0)\n",
               lp_isa_name(isas[si]));
    }
    free(x);
    free(buf);
    free(want);
}

/* lp_f32_to_f16_rows (a map converted by the pool's threads, as the store does): a strided
 * source of rows x cols, row counts below, at and past the thread count and not a multiple of
 * it, each element the bits lp_f32_to_f16 gives and nothing written past rows x cols. */
static void test_attention_f16_map_rows(void **state)
{
    (void)state;
    enum { COLS = 37, STRIDE = 41, MAX_ROWS = 11 };
    float *src = malloc(MAX_ROWS * STRIDE * sizeof *src);
    uint16_t *got = malloc((MAX_ROWS * COLS + 8) * sizeof *got);
    assert_true(src && got);
    for (int64_t i = 0; i < MAX_ROWS * STRIDE; i++)
        src[i] = (i % STRIDE) < COLS ? (float)(i % 97) / 96.0f - 0.01f : NAN;
    for (int threads = 1; threads <= 3; threads++) {
        lp_pool *pool = NULL;
        if (threads > 1)
            assert_int_equal(lp_pool_create(threads, &pool, NULL), LP_OK);
        static const int64_t row_counts[] = {0, 1, 2, 3, 7, MAX_ROWS};
        for (size_t ri = 0; ri < sizeof row_counts / sizeof *row_counts; ri++) {
            int64_t rows = row_counts[ri];
            memset(got, 0xff, (MAX_ROWS * COLS + 8) * sizeof *got);
            lp_f32_to_f16_rows(src, STRIDE, rows, COLS, got, pool);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < COLS; c++)
                    assert_int_equal(got[r * COLS + c], lp_f32_to_f16(src[r * STRIDE + c]));
            for (int64_t i = rows * COLS; i < MAX_ROWS * COLS + 8; i++)
                assert_true(got[i] == 0xffffu);
        }
        lp_pool_destroy(pool);
    }
    free(src);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_cases),
        cmocka_unit_test(test_attention_window_boundary),
        cmocka_unit_test(test_attention_threads),
        cmocka_unit_test(test_attention_tiles),
        cmocka_unit_test(test_attention_row_ranges),
        cmocka_unit_test(test_attention_gqa),
        cmocka_unit_test(test_attention_decode_rule),
        cmocka_unit_test(test_attention_nan),
        cmocka_unit_test(test_attention_sparsity_known_rows),
        cmocka_unit_test(test_attention_sparsity_isas),
        cmocka_unit_test(test_attention_sparsity_selection),
        cmocka_unit_test(test_attention_exp),
        cmocka_unit_test(test_attention_softmax_step),
        cmocka_unit_test(test_attention_row_probs),
        cmocka_unit_test(test_attention_sparsity_sweeps),
        cmocka_unit_test(test_attention_bare_pass),
        cmocka_unit_test(test_attention_f16_maps),
        cmocka_unit_test(test_attention_f16_map_rows),
        cmocka_unit_test(test_attention_pack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
