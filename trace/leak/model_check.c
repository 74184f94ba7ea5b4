/* The forward-pass checks of `loupe leak`: perturbation of the future, attention maps against the
 * definition, the engine's masks cell by cell (padded batches, windows, decode alignment), and
 * next-token alignment of the loss. An observer of lp_forward, like the store. */
#include "trace/leak/leak.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/checked.h"
#include "core/random.h"

/* max_abs_diff of checks that compare no values (NULL in leak_checks) */
#define NO_DIFF ((double)NAN)

void lp_leak_model_opts_init(lp_leak_model_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->fault = LP_MASK_FAULT_NONE;
    opts->n_random_cuts = 2;
    opts->seed = 1;
    opts->max_listed = LP_LEAK_MAX_LISTED;
}

void lp_leak_model_report_free(lp_leak_model_report *rep)
{
    if (!rep)
        return;
    free(rep->cuts); /* one block with layer_max_diff and leaks (setup) */
    free(rep->checks);
    memset(rep, 0, sizeof *rep);
}

static lp_status add_check(lp_leak_model_report *r, int64_t *cap, const char *name, bool passed,
                           int layer, int64_t position, double max_abs_diff, lp_error *err,
                           const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 9, 10)))
#endif
    ;

static lp_status add_check(lp_leak_model_report *r, int64_t *cap, const char *name, bool passed,
                           int layer, int64_t position, double max_abs_diff, lp_error *err,
                           const char *fmt, ...)
{
    if (r->n_checks == *cap) {
        int64_t new_cap = *cap ? *cap * 2 : 32;
        lp_leak_check *grown = realloc(r->checks, (size_t)new_cap * sizeof *grown);
        if (!grown)
            return lp_error_set(err, LP_ERR_NOMEM, "leak: out of memory for check results");
        r->checks = grown;
        *cap = new_cap;
    }
    lp_leak_check *c = &r->checks[r->n_checks++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->passed = passed;
    c->layer = layer;
    c->position = position;
    c->max_abs_diff = max_abs_diff;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof c->detail, fmt, ap);
    va_end(ap);
    return LP_OK;
}

/* ---- the observer ---- */

typedef enum obs_mode { MODE_BASELINE, MODE_PERTURBED, MODE_PADDED } obs_mode;

/* Per-layer outcome of the attention-map check. */
typedef struct layer_attn {
    int64_t leaks, bad_rows, nonfinite, masked_rows;
    int64_t zero_visible; /* visible cells whose probability underflowed to exactly 0 */
    int64_t first_bad_row; /* -1 = none */
    int first_bad_head;
    double max_row_err;
} layer_attn;

typedef struct leak_obs {
    const lp_model *model;
    const lp_leak_model_opts *opts;
    lp_leak_model_report *r;
    obs_mode mode;
    int64_t T, H, V;
    int n_layers;
    /* baseline: residual after each layer and the logits, every position */
    float *base_resid; /* [n_layers, T, H] */
    float *base_logits; /* [T, V] */
    /* perturbation of the current cut */
    int64_t cut;
    double *cut_max;   /* [n_layers + 1] this cut's max |diff| per layer; [n_layers] = logits */
    int64_t *cut_first_pos; /* [n_layers + 1] first position differing beyond the tolerance,
                               -1 = none */
    double tolerance;  /* 0 = bitwise; else relative (MoE, see lp_leak_model_report) */
    /* attention maps */
    const int64_t *pad_left, *pad_right;
    layer_attn *attn;  /* [n_layers]: main pass (MODE_BASELINE) */
    layer_attn *padded_attn; /* [n_layers]: padded batch (MODE_PADDED) */
    /* padded batch: item 0's rows, and how far the other items' real rows are from them */
    int64_t pad_T;
    float *pad_ref_resid;   /* [n_layers, pad_T, H] */
    float *pad_ref_logits;  /* [pad_T, V] */
    double *pad_max;        /* [n_layers + 1] */
    int64_t *pad_bad;       /* [n_layers + 1] rows beyond the tolerance */
    int64_t *pad_first_item, *pad_first_pos; /* [n_layers + 1], -1 = none */
} leak_obs;

static int64_t layer_window(const leak_obs *o, int layer)
{
    if (o->opts->window > 0)
        return o->opts->window;
    return lp_model_arch(o->model)->layer_window[layer];
}

static bool record_wants(const leak_obs *o, const lp_site *site)
{
    const lp_observer *rec = o->opts->record;
    return o->mode == MODE_BASELINE && rec && rec->want && rec->observe &&
           rec->want(rec->ctx, site);
}

static bool obs_want(void *ctx, const lp_site *site)
{
    const leak_obs *o = ctx;
    if (record_wants(o, site))
        return true;
    switch (o->mode) {
    case MODE_BASELINE:
        return site->kind == LP_SITE_RESID || site->kind == LP_SITE_LOGITS ||
               site->kind == LP_SITE_ATTN_PROBS;
    case MODE_PERTURBED:
        return site->kind == LP_SITE_RESID || site->kind == LP_SITE_LOGITS;
    case MODE_PADDED:
        return site->kind == LP_SITE_ATTN_PROBS || site->kind == LP_SITE_RESID ||
               site->kind == LP_SITE_LOGITS;
    }
    return false;
}

static void add_leak_coord(leak_obs *o, int64_t batch, int layer, int head, int64_t q, int64_t k,
                           float prob)
{
    lp_leak_model_report *r = o->r;
    if (r->n_leaks_listed < o->opts->max_listed) {
        lp_leak_model_coord c = {batch, layer, head, q, k, prob};
        r->leaks[r->n_leaks_listed++] = c;
    }
}

/* One row's cells: *sum of the finite probabilities, and whether any is NaN/Inf, any key is
 * allowed by the definition, any nonzero probability sits where it forbids. */
typedef struct row_scan {
    double sum;
    bool nonfinite, any_ref, leaks;
} row_scan;

static row_scan scan_row(leak_obs *o, const lp_site *site, const lp_mask_spec *spec,
                         lp_leak_cell_stats *st, layer_attn *la, const float *row, int64_t q,
                         int64_t n_keys)
{
    row_scan rs = {0.0, false, false, false};
    for (int64_t k = 0; k < n_keys; k++) {
        float p = row[k];
        if (!isfinite(p)) {
            rs.nonfinite = true;
            la->nonfinite++;
            continue;
        }
        rs.sum += (double)p;
        bool ref = lp_mask_allows_reference(spec, site->batch, q, k);
        rs.any_ref = rs.any_ref || ref;
        /* Only nonzero probabilities are evidence: an allowed key can legitimately get exactly 0
         * (its score ~104 below the row max underflows exp in fp32), so hidden keys are judged
         * by the row sums here and by the mask specs cell by cell. */
        if (p != 0.0f) {
            lp_leak_cell_add(st, spec, site->batch, site->head, q, k, true);
            if (!ref) {
                la->leaks++;
                rs.leaks = true;
                add_leak_coord(o, site->batch, site->layer, site->head, q, k, p);
            }
        } else if (ref) {
            la->zero_visible++;
        }
    }
    return rs;
}

/* One head's [T, T] probabilities against the definition: leaks (nonzero where forbidden), rows
 * that do not sum to 1 (0 for rows the definition leaves empty), NaN/Inf. */
static void check_probs(leak_obs *o, const lp_site *site, const lp_view *v)
{
    layer_attn *la = (o->mode == MODE_PADDED ? o->padded_attn : o->attn) + site->layer;
    lp_leak_cell_stats *st = o->mode == MODE_PADDED ? &o->r->structural : &o->r->attn;
    lp_mask_spec spec = lp_mask_causal(v->rows, v->cols);
    spec.window = layer_window(o, site->layer);
    spec.pad_left = o->mode == MODE_PADDED ? o->pad_left : NULL;
    spec.pad_right = o->mode == MODE_PADDED ? o->pad_right : NULL;
    for (int64_t q = 0; q < v->rows; q++) {
        row_scan rs = scan_row(o, site, &spec, st, la, v->data + q * v->stride, q, v->cols);
        bool bad = rs.nonfinite || rs.leaks;
        if (rs.nonfinite)
            o->r->nan_rows++;
        if (rs.sum == 0.0 && !rs.nonfinite)
            la->masked_rows++;
        /* a learned sink (gpt-oss) holds its share of the row outside the keys */
        double sink = v->row_stats && isfinite(v->row_stats[q].learned_sink)
                          ? (double)v->row_stats[q].learned_sink
                          : 0.0;
        double row_err = fabs(rs.sum - (rs.any_ref ? 1.0 - sink : 0.0));
        if (!rs.nonfinite && row_err > la->max_row_err)
            la->max_row_err = row_err;
        /* A fully masked row must be all zeros; any other row sums to 1 minus its sink's mass,
         * and a row gone blind where the definition allows keys fails here (with a sink too,
         * whose mass would otherwise explain the empty row). */
        bool blind = rs.any_ref && rs.sum == 0.0;
        if (!rs.nonfinite &&
            ((row_err > LP_LEAK_ROW_SUM_TOL && !(rs.sum == 0.0 && !rs.any_ref)) || blind)) {
            la->bad_rows++;
            bad = true;
        }
        if (bad && la->first_bad_row < 0) {
            la->first_bad_row = q;
            la->first_bad_head = site->head;
        }
    }
}

/* Max |a - b| over n values (NaN counts as infinite), and whether it exceeds the tolerance:
 * `tolerance` relative to the row's largest magnitude (at least 1); 0 = any difference. */
static bool row_differs(const float *a, const float *b, int64_t n, double tolerance,
                        double *max_diff)
{
    *max_diff = 0.0;
    if (memcmp(a, b, (size_t)n * sizeof(float)) == 0)
        return false;
    double m = 0.0, scale = 1.0;
    for (int64_t c = 0; c < n; c++) {
        double d = fabs((double)a[c] - (double)b[c]);
        if (!(d <= m))
            m = isnan(d) ? (double)INFINITY : d;
        if (fabs((double)a[c]) > scale)
            scale = fabs((double)a[c]);
    }
    *max_diff = m;
    return m > tolerance * scale || (tolerance == 0.0 && m == 0.0);
}

/* Perturbed run: rows 0..cut of the residual after each layer and of the logits must equal the
 * baseline bit for bit (MoE: within the tolerance). */
static void compare_rows(leak_obs *o, int slot, const float *base, int64_t base_stride,
                         const lp_view *v)
{
    for (int64_t r = 0; r < v->rows; r++) {
        int64_t pos = v->row0 + r;
        if (pos > o->cut)
            break;
        const float *a = base + pos * base_stride, *b = v->data + r * v->stride;
        double m;
        bool beyond = row_differs(a, b, v->cols, o->tolerance, &m);
        if (m > 0.0 || beyond)
            o->r->bitwise = false;
        if (m > o->cut_max[slot])
            o->cut_max[slot] = m;
        if (beyond && o->cut_first_pos[slot] < 0)
            o->cut_first_pos[slot] = pos;
    }
}

/* Padded batch: item 0 (unpadded) is the reference; every real row of items 1 and 2 must equal
 * item 0's row of the same position: padding must change nothing but where tokens sit. */
static void padded_rows(leak_obs *o, const lp_site *site, const lp_view *v)
{
    bool logits = site->kind == LP_SITE_LOGITS;
    int slot = logits ? o->n_layers : site->layer;
    int64_t width = logits ? o->V : o->H;
    float *ref = logits ? o->pad_ref_logits : o->pad_ref_resid + (int64_t)slot * o->pad_T * o->H;
    int64_t b = site->batch;
    for (int64_t r = 0; r < v->rows; r++) {
        int64_t t = v->row0 + r;
        const float *row = v->data + r * v->stride;
        if (b == 0) {
            memcpy(ref + t * width, row, (size_t)width * sizeof(float));
            continue;
        }
        if (t < o->pad_left[b] || t >= o->pad_T - o->pad_right[b])
            continue;
        double m;
        bool beyond = row_differs(ref + (t - o->pad_left[b]) * width, row, width,
                                  LP_LEAK_PAD_TOLERANCE, &m);
        if (m > o->pad_max[slot])
            o->pad_max[slot] = m;
        if (beyond) {
            o->pad_bad[slot]++;
            if (o->pad_first_item[slot] < 0) {
                o->pad_first_item[slot] = b;
                o->pad_first_pos[slot] = t;
            }
        }
    }
}

static lp_status obs_observe(void *ctx, const lp_site *site, const lp_view *v, lp_error *err)
{
    leak_obs *o = ctx;
    if (record_wants(o, site)) {
        lp_status st = o->opts->record->observe(o->opts->record->ctx, site, v, err);
        if (st != LP_OK)
            return st;
    }
    if (site->kind == LP_SITE_ATTN_PROBS) {
        check_probs(o, site, v);
        return LP_OK;
    }
    if (o->mode == MODE_PADDED) {
        if (site->kind == LP_SITE_RESID || site->kind == LP_SITE_LOGITS)
            padded_rows(o, site, v);
        return LP_OK;
    }
    if (site->batch != 0)
        return LP_OK;
    if (site->kind == LP_SITE_RESID) {
        float *base = o->base_resid + (int64_t)site->layer * o->T * o->H;
        if (o->mode == MODE_BASELINE) {
            for (int64_t r = 0; r < v->rows; r++)
                memcpy(base + r * o->H, v->data + r * v->stride, (size_t)o->H * sizeof(float));
        } else {
            compare_rows(o, site->layer, base, o->H, v);
        }
    } else if (site->kind == LP_SITE_LOGITS) {
        if (o->mode == MODE_BASELINE) {
            for (int64_t r = 0; r < v->rows; r++)
                memcpy(o->base_logits + (v->row0 + r) * o->V, v->data + r * v->stride,
                       (size_t)o->V * sizeof(float));
        } else {
            compare_rows(o, o->n_layers, o->base_logits, o->V, v);
        }
    }
    return LP_OK;
}

/* ---- alignment ---- */

/* -log softmax(logits)[id], in double. */
static double neg_log_prob(const float *logits, int64_t V, int32_t id)
{
    double m;
    double s = lp_softmax_sum(logits, V, &m);
    return log(s) + m - (double)logits[id];
}

lp_leak_alignment_verdict lp_leak_alignment(const float *logits, int64_t V, const int32_t *ids,
                                            int64_t n_ids, double *loss_next, double *loss_same)
{
    double next = 0.0, same = 0.0;
    for (int64_t t = 0; t < n_ids; t++) {
        const float *lg = logits + t * V;
        same += neg_log_prob(lg, V, ids[t]);
        if (t + 1 < n_ids)
            next += neg_log_prob(lg, V, ids[t + 1]);
    }
    *loss_next = n_ids > 1 ? next / (double)(n_ids - 1) : 0.0;
    *loss_same = n_ids > 0 ? same / (double)n_ids : 0.0;
    double best = *loss_same < *loss_next ? *loss_same : *loss_next;
    if (n_ids < 2 || log((double)V) - best < LP_LEAK_ALIGNMENT_MIN_SIGNAL)
        return LP_ALIGNMENT_INCONCLUSIVE;
    return *loss_same < *loss_next ? LP_ALIGNMENT_FLAGGED : LP_ALIGNMENT_OK;
}

/* ---- the structural test on mask specs ---- */

/* dst += src; the first coordinates stay dst's unless dst had none. */
static void merge_stats(lp_leak_cell_stats *dst, const lp_leak_cell_stats *src)
{
    if (dst->leak_count == 0 && src->leak_count > 0)
        dst->first_leak = src->first_leak;
    if (dst->blocked_count == 0 && src->blocked_count > 0)
        dst->first_blocked = src->first_blocked;
    dst->leak_count += src->leak_count;
    dst->blocked_count += src->blocked_count;
    dst->leak_next += src->leak_next;
    dst->leak_future += src->leak_future;
    dst->leak_window_edge += src->leak_window_edge;
    dst->leak_padding_key += src->leak_padding_key;
    dst->leak_padding_query += src->leak_padding_query;
    dst->blocked_past += src->blocked_past;
    dst->leak_cross_doc += src->leak_cross_doc;
}

/* The attention kernel itself on a spec: random q/k/v (fixed seed), exact probabilities; counts
 * nonzero probabilities on cells the definition forbids, and rows left blind (summing to 0) or
 * not summing to 1 where the definition allows keys. */
enum { KERNEL_MAX_KEYS = 16, KERNEL_HEAD_DIM = 8 };

static void kernel_check(const lp_mask_spec *spec, int64_t n_batch, int64_t *leaks,
                         int64_t *bad_rows)
{
    float q[KERNEL_MAX_KEYS * KERNEL_HEAD_DIM], k[KERNEL_MAX_KEYS * KERNEL_HEAD_DIM];
    float v[KERNEL_MAX_KEYS * KERNEL_HEAD_DIM], out[KERNEL_MAX_KEYS * KERNEL_HEAD_DIM];
    float probs[KERNEL_MAX_KEYS * KERNEL_MAX_KEYS];
    uint64_t rng = 7;
    for (int i = 0; i < KERNEL_MAX_KEYS * KERNEL_HEAD_DIM; i++) {
        q[i] = (float)(lp_splitmix64(&rng) % 2001) / 1000.0f - 1.0f;
        k[i] = (float)(lp_splitmix64(&rng) % 2001) / 1000.0f - 1.0f;
        v[i] = (float)(lp_splitmix64(&rng) % 2001) / 1000.0f - 1.0f;
    }
    *leaks = *bad_rows = 0;
    if (spec->n_q > KERNEL_MAX_KEYS || spec->n_k > KERNEL_MAX_KEYS)
        return;
    for (int64_t b = 0; b < n_batch; b++) {
        lp_attn_args args = {
            .q = q, .k = k, .v = v, .out = out, .n_q = spec->n_q, .n_k = spec->n_k,
            .head_dim = KERNEL_HEAD_DIM, .v_dim = KERNEL_HEAD_DIM, .q_stride = KERNEL_HEAD_DIM,
            .k_stride = KERNEL_HEAD_DIM, .v_stride = KERNEL_HEAD_DIM,
            .out_stride = KERNEL_HEAD_DIM, .scale = 0.35f, .mask = spec, .batch = b,
            .probs = probs};
        lp_attention(&args);
        for (int64_t r = 0; r < spec->n_q; r++) {
            double sum = 0.0;
            bool any_ref = false;
            for (int64_t j = 0; j < spec->n_k; j++) {
                float p = probs[r * spec->n_k + j];
                bool ref = lp_mask_allows_reference(spec, b, r, j);
                any_ref = any_ref || ref;
                sum += (double)p;
                if (p != 0.0f && !ref)
                    (*leaks)++;
            }
            if (!(fabs(sum - (any_ref ? 1.0 : 0.0)) <= LP_LEAK_ROW_SUM_TOL))
                (*bad_rows)++;
        }
    }
}

/* The row of one mask spec: the spec against the definition, then the kernel on it. */
static lp_status spec_check(lp_leak_model_report *r, int64_t *cap, const char *what,
                            const lp_leak_cell_stats *cs, int64_t kernel_leaks,
                            int64_t kernel_bad_rows, lp_error *err)
{
    if (cs->leak_count == 0 && cs->blocked_count == 0 && kernel_leaks == 0 && kernel_bad_rows == 0)
        return add_check(r, cap, "structural", true, -1, -1, NO_DIFF, err,
                         "mask spec %s: every cell equals the definition; the attention kernel "
                         "puts no probability outside it and every row sums to 1",
                         what);
    if (cs->leak_count == 0 && cs->blocked_count == 0)
        return add_check(r, cap, "structural", false, -1, -1, NO_DIFF, err,
                         "mask spec %s: the spec is right but the attention kernel puts "
                         "probability on %lld forbidden cells and %lld rows do not sum to 1",
                         what, (long long)kernel_leaks, (long long)kernel_bad_rows);
    if (cs->leak_count > 0)
        return add_check(r, cap, "structural", false, -1, cs->first_leak.query, NO_DIFF, err,
                         "mask spec %s: %lld leaking, %lld blocked cells (kernel: %lld nonzero "
                         "probabilities outside the definition); first leak batch %lld query "
                         "%lld key %lld (%s)",
                         what, (long long)cs->leak_count, (long long)cs->blocked_count,
                         (long long)kernel_leaks, (long long)cs->first_leak.batch,
                         (long long)cs->first_leak.query, (long long)cs->first_leak.key,
                         lp_leak_diagnose(cs));
    return add_check(r, cap, "structural", false, -1, cs->first_blocked.query, NO_DIFF, err,
                     "mask spec %s: %lld blocked cells; first batch %lld query %lld key %lld",
                     what, (long long)cs->blocked_count, (long long)cs->first_blocked.batch,
                     (long long)cs->first_blocked.query, (long long)cs->first_blocked.key);
}

static lp_status structural_specs(leak_obs *o, int64_t *cap, lp_error *err)
{
    /* Three items of 13 keys: unpadded, 3 left, 4 right; plus decode and chunked prefill. */
    static const int64_t pad_left[3] = {0, 3, 0}, pad_right[3] = {0, 0, 4};
    static const struct {
        const char *what;
        int64_t n_q, n_k, window, n_batch;
        bool padded;
    } cases[] = {
        {"prefill, causal", 13, 13, 0, 1, false},
        {"prefill, window 4", 13, 13, 4, 1, false},
        {"prefill, window 1", 13, 13, 1, 1, false},
        {"decode (1 query, 13 keys), bottom-right", 1, 13, 0, 1, false},
        {"decode (1 query, 13 keys), window 4", 1, 13, 4, 1, false},
        {"chunked prefill (5 queries, 13 keys), window 4", 5, 13, 4, 1, false},
        {"batch of 3, left/right padding", 13, 13, 0, 3, true},
        {"batch of 3, left/right padding, window 5", 13, 13, 5, 3, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lp_mask_spec spec = lp_mask_causal(cases[i].n_q, cases[i].n_k);
        spec.window = cases[i].window;
        spec.fault = o->opts->fault;
        if (cases[i].padded) {
            spec.pad_left = pad_left;
            spec.pad_right = pad_right;
        }
        lp_leak_cell_stats cs;
        memset(&cs, 0, sizeof cs);
        lp_leak_check_mask_spec(&spec, cases[i].n_batch, &cs);
        merge_stats(&o->r->structural, &cs);
        int64_t kernel_leaks, kernel_bad_rows;
        kernel_check(&spec, cases[i].n_batch, &kernel_leaks, &kernel_bad_rows);
        lp_status st = spec_check(o->r, cap, cases[i].what, &cs, kernel_leaks, kernel_bad_rows,
                                  err);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

/* ---- the whole check ---- */

static lp_status run_pass(const lp_model *model, const lp_batch *batch, leak_obs *o,
                          lp_error *err)
{
    lp_observer obs = {o, obs_want, obs_observe};
    lp_forward_opts fo;
    lp_forward_opts_init(&fo);
    fo.observer = &obs;
    fo.pool = o->opts->pool;
    fo.mask_fault = o->opts->fault;
    fo.window_override = o->opts->window;
    return lp_forward(model, batch, &fo, err);
}

static void *alloc_array(int64_t a, int64_t b, size_t size)
{
    int64_t n;
    uint64_t bytes;
    if (a < 0 || b < 0 || !lp_mul_i64(a, b, &n) || !lp_mul_u64((uint64_t)n, size, &bytes) ||
        bytes > SIZE_MAX)
        return NULL;
    return calloc((size_t)(bytes > 0 ? bytes : 1), 1);
}

static lp_status attention_checks(leak_obs *o, layer_attn *la, bool padded, int64_t *cap,
                                  lp_error *err)
{
    lp_leak_model_report *r = o->r;
    for (int l = 0; l < o->n_layers; l++) {
        layer_attn *a = &la[l];
        bool ok = a->leaks == 0 && a->bad_rows == 0 && a->nonfinite == 0;
        const char *where = padded ? "padded batch" : "prompt";
        lp_status st;
        const char *name = padded ? "structural" : "attention_map";
        const char *total = lp_model_arch(o->model)->attn_sinks ? "1 - the sink's mass" : "1";
        if (ok)
            st = add_check(r, cap, name, true, l, -1, NO_DIFF, err,
                           "%s, window %lld: no probability outside the mask, rows sum to %s "
                           "(max error %.2g), %lld fully masked rows, %lld visible cells "
                           "underflow to 0",
                           where, (long long)layer_window(o, l), total, a->max_row_err,
                           (long long)a->masked_rows, (long long)a->zero_visible);
        else
            st = add_check(r, cap, name, false, l,
                           a->first_bad_row, NO_DIFF, err,
                           "%s, window %lld: %lld leaking cells, %lld rows off %s by > %g (max "
                           "%.2g) or with no mass on visible keys, %lld NaN/Inf; first bad row "
                           "%lld head %d",
                           where, (long long)layer_window(o, l), (long long)a->leaks,
                           (long long)a->bad_rows, total, LP_LEAK_ROW_SUM_TOL,
                           a->max_row_err, (long long)a->nonfinite, (long long)a->first_bad_row,
                           a->first_bad_head);
        if (st != LP_OK)
            return st;
        if (!padded) {
            r->attn_bad_rows += a->bad_rows;
            if (a->max_row_err > r->attn_max_row_err)
                r->attn_max_row_err = a->max_row_err;
            r->attn_nonfinite += a->nonfinite;
            r->attn_masked_rows += a->masked_rows;
        }
    }
    return LP_OK;
}

/* The observer's buffers for a padded batch of T tokens per item (T <= 24). */
static lp_status alloc_padded(leak_obs *o, int64_t T, lp_error *err)
{
    int64_t resid_rows = (int64_t)o->n_layers * T; /* both bounded: T <= 24, layers <= 512 */
    int slots = o->n_layers + 1;
    o->pad_T = T;
    o->padded_attn = alloc_array(o->n_layers, 1, sizeof(layer_attn));
    o->pad_ref_resid = alloc_array(resid_rows, o->H, sizeof(float));
    o->pad_ref_logits = alloc_array(T, o->V, sizeof(float));
    o->pad_max = alloc_array(slots, 1, sizeof(double));
    o->pad_bad = alloc_array(slots, 1, sizeof(int64_t));
    o->pad_first_item = alloc_array(slots, 1, sizeof(int64_t));
    o->pad_first_pos = alloc_array(slots, 1, sizeof(int64_t));
    if (!o->padded_attn || !o->pad_ref_resid || !o->pad_ref_logits || !o->pad_max ||
        !o->pad_bad || !o->pad_first_item || !o->pad_first_pos)
        return lp_error_set(err, LP_ERR_NOMEM, "leak: out of memory for the padded batch");
    for (int l = 0; l < o->n_layers; l++)
        o->padded_attn[l].first_bad_row = -1;
    for (int i = 0; i < slots; i++)
        o->pad_first_item[i] = o->pad_first_pos[i] = -1;
    return LP_OK;
}

/* One row per layer (and the logits): the padded items' real rows against the unpadded item. */
static lp_status padded_checks(leak_obs *o, int64_t *cap, lp_error *err)
{
    lp_leak_model_report *r = o->r;
    for (int slot = 0; slot <= o->n_layers; slot++) {
        int layer = slot == o->n_layers ? -1 : slot;
        const char *what = layer < 0 ? "logits" : "hidden states";
        lp_status st;
        if (o->pad_bad[slot] == 0 && o->pad_max[slot] == 0.0)
            st = add_check(r, cap, "structural", true, layer, -1, 0.0, err,
                           "padded batch: %s of the real tokens of the left- and right-padded "
                           "items equal the unpadded item's bit for bit",
                           what);
        else if (o->pad_bad[slot] == 0)
            st = add_check(r, cap, "structural", true, layer, -1, o->pad_max[slot], err,
                           "padded batch: %s of the real tokens of the left- and right-padded "
                           "items equal the unpadded item's within %.0e relative (max |diff| "
                           "%.3g; SIMD tails of elementwise kernels depend on a row's index)",
                           what, LP_LEAK_PAD_TOLERANCE, o->pad_max[slot]);
        else
            st = add_check(r, cap, "structural", false, layer, o->pad_first_pos[slot],
                           o->pad_max[slot], err,
                           "padded batch: %s of %lld real rows differ from the unpadded item "
                           "(max |diff| %.3g); first: item %lld (%s-padded), position %lld",
                           what, (long long)o->pad_bad[slot], o->pad_max[slot],
                           (long long)o->pad_first_item[slot],
                           o->pad_first_item[slot] == 1 ? "left" : "right",
                           (long long)o->pad_first_pos[slot]);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

/* The padded batch of the structural test: three copies of (a prefix of) the prompt, one
 * unpadded, one left-padded, one right-padded. */
static lp_status padded_batch_check(const lp_model *model, const int32_t *ids, int64_t n_ids,
                                    leak_obs *o, int64_t *cap, lp_error *err)
{
    int64_t T = n_ids < 24 ? n_ids : 24;
    if (T < 4)
        return LP_OK; /* too short to pad meaningfully; the mask specs cover padding */
    /* three lengths: T, T - T/4 (left-padded), T - T/3 (right-padded) */
    int64_t pad = T / 4, pad2 = T / 3;
    int64_t pl[3] = {0, pad, 0}, pr[3] = {0, 0, pad2};
    int32_t *tokens = alloc_array(3, T, sizeof(int32_t));
    lp_status st = tokens ? alloc_padded(o, T, err)
                          : lp_error_set(err, LP_ERR_NOMEM, "leak: out of memory for the padded "
                                                            "batch");
    if (st == LP_OK) {
        /* item 0: the prompt; item 1: padding then the prompt's first T - pad tokens; item 2:
         * the first T - pad2 tokens then padding. Padding cells hold an id other than the first
         * token's (the mask must hide them whatever they hold; a copy of the first token would
         * hide a leak into the first real position). */
        int32_t pad_id = (int32_t)((ids[0] + 1) % o->V);
        for (int64_t t = 0; t < T; t++) {
            tokens[t] = ids[t];
            tokens[T + t] = t < pad ? pad_id : ids[t - pad];
            tokens[2 * T + t] = t < T - pad2 ? ids[t] : pad_id;
        }
        lp_batch batch = {3, T, tokens, pl, pr};
        o->mode = MODE_PADDED;
        o->pad_left = pl;
        o->pad_right = pr;
        st = run_pass(model, &batch, o, err);
    }
    if (st == LP_OK)
        st = attention_checks(o, o->padded_attn, true, cap, err);
    if (st == LP_OK)
        st = padded_checks(o, cap, err);
    o->pad_left = o->pad_right = NULL; /* the buffers go with the observer (free_obs) */
    free(tokens);
    return st;
}

/* The report's defaults, the observer's baseline and per-cut buffers, and the report's arrays. */
static lp_status setup(const lp_model *model, int64_t n_ids, const lp_leak_model_opts *opts,
                       leak_obs *o, lp_leak_model_report *r, int64_t max_cuts, lp_error *err)
{
    const lp_arch *arch = lp_model_arch(model);
    memset(o, 0, sizeof *o);
    o->model = model;
    o->opts = opts;
    o->r = r;
    o->T = n_ids;
    o->H = arch->hidden_size;
    o->V = arch->vocab_size;
    o->n_layers = (int)arch->n_layers;
    /* Dense models compute each position from its own rows in a fixed order: bitwise. An MoE
     * layer gathers the tokens routed to each expert into one GEMM whose row count therefore
     * depends on the other tokens (future ones included), and the kernel sums differently for
     * 1-2 rows (GEMV) than for more (packed GEMM): differences of a few ulps are legitimate. */
    o->tolerance = arch->n_experts > 0 ? LP_LEAK_MOE_TOLERANCE : 0.0;
    r->tolerance = o->tolerance;
    r->n_tokens = n_ids;
    r->n_layers = o->n_layers;
    int64_t resid_floats;
    if (!lp_mul_i64(arch->n_layers, n_ids, &resid_floats))
        resid_floats = -1;
    o->base_resid = alloc_array(resid_floats, o->H, sizeof(float));
    o->base_logits = alloc_array(n_ids, o->V, sizeof(float));
    o->cut_max = alloc_array(o->n_layers + 1, 1, sizeof(double));
    o->cut_first_pos = alloc_array(o->n_layers + 1, 1, sizeof(int64_t));
    o->attn = alloc_array(o->n_layers, 1, sizeof(layer_attn));
    const lp_owned_array report_arrays[] = {
        LP_OWNED_ARRAY(lp_leak_model_report, cuts, max_cuts),
        LP_OWNED_ARRAY(lp_leak_model_report, layer_max_diff, o->n_layers + 1),
        LP_OWNED_ARRAY(lp_leak_model_report, leaks, opts->max_listed > 0 ? opts->max_listed : 1),
    };
    void *report_block =
        lp_alloc_arrays_of(r, report_arrays, sizeof report_arrays / sizeof report_arrays[0]);
    if (!o->base_resid || !o->base_logits || !o->cut_max || !o->cut_first_pos || !o->attn ||
        !report_block)
        return lp_error_set(err, LP_ERR_NOMEM,
                            "leak: out of memory for the baseline of %lld tokens x %lld layers",
                            (long long)n_ids, (long long)arch->n_layers);
    for (int l = 0; l < o->n_layers; l++)
        o->attn[l].first_bad_row = -1;
    return LP_OK;
}

/* Every buffer of the observer: the baseline's, the cuts', the padded batch's. */
static void free_obs(leak_obs *o)
{
    void *owned[] = {o->base_resid,     o->base_logits,  o->cut_max,       o->cut_first_pos,
                     o->attn,           o->padded_attn,  o->pad_ref_resid, o->pad_ref_logits,
                     o->pad_max,        o->pad_bad,      o->pad_first_item, o->pad_first_pos};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        free(owned[i]);
    memset(o, 0, sizeof *o);
}

/* The loss with labels shifted by one against not shifted, from the baseline's logits. An
 * inconclusive order passes: it is no evidence of a bug, and the row says why it was not judged. */
static lp_status alignment_check(leak_obs *o, const int32_t *ids, int64_t n_ids, int64_t *cap,
                                 lp_error *err)
{
    lp_leak_model_report *r = o->r;
    double uniform = log((double)o->V);
    lp_leak_alignment_verdict v =
        lp_leak_alignment(o->base_logits, o->V, ids, n_ids, &r->loss_next, &r->loss_same);
    r->alignment_flagged = v == LP_ALIGNMENT_FLAGGED;
    r->alignment_inconclusive = v == LP_ALIGNMENT_INCONCLUSIVE;
    double signal = uniform - (r->loss_same < r->loss_next ? r->loss_same : r->loss_next);
    char why[224] = "";
    if (r->alignment_flagged)
        snprintf(why, sizeof why, ": the model predicts the current token better than the next "
                 "(label or mask bug)");
    else if (r->alignment_inconclusive)
        snprintf(why, sizeof why, ": inconclusive, the better loss beats uniform by %.2f nats "
                 "(< %.1f): random weights or unpredictable text, no signal to judge labels by", signal, LP_LEAK_ALIGNMENT_MIN_SIGNAL);
    return add_check(r, cap, "alignment", !r->alignment_flagged, -1, -1, NO_DIFF, err,
                     "loss with labels shifted by one %.4f nats, unshifted %.4f nats, uniform "
                     "%.4f%s",
                     r->loss_next, r->loss_same, uniform, why);
}

static bool has_cut(const lp_leak_model_report *r, int64_t c)
{
    for (int64_t j = 0; j < r->n_cuts; j++)
        if (r->cuts[j] == c)
            return true;
    return false;
}

/* First, middle, last and random cut points (distinct), in increasing order. */
static void choose_cuts(lp_leak_model_report *r, int64_t n_ids, int64_t max_cuts, uint64_t *rng)
{
    int64_t last = n_ids - 2;
    int64_t want[3] = {0, last / 2, last};
    for (int64_t i = 0; i < max_cuts; i++) {
        int64_t c = i < 3 ? want[i] : (int64_t)(lp_splitmix64(rng) % (uint64_t)(last + 1));
        bool seen = has_cut(r, c);
        /* a repeated random cut draws again (bounded: n_ids - 1 distinct cuts exist) */
        for (int tries = 0; seen && i >= 3 && tries < 64; tries++) {
            c = (int64_t)(lp_splitmix64(rng) % (uint64_t)(last + 1));
            seen = has_cut(r, c);
        }
        if (!seen)
            r->cuts[r->n_cuts++] = c;
    }
    for (int64_t i = 1; i < r->n_cuts; i++)
        for (int64_t j = i; j > 0 && r->cuts[j - 1] > r->cuts[j]; j--) {
            int64_t tmp = r->cuts[j];
            r->cuts[j] = r->cuts[j - 1];
            r->cuts[j - 1] = tmp;
        }
}

/* One row per layer (and the logits) of a cut's comparison with the baseline. */
static lp_status cut_checks(leak_obs *o, int64_t cut, int64_t n_ids, int64_t *cap, lp_error *err)
{
    lp_leak_model_report *r = o->r;
    for (int slot = 0; slot <= o->n_layers; slot++) {
        int layer = slot == o->n_layers ? -1 : slot;
        bool same = o->cut_first_pos[slot] < 0;
        double m = o->cut_max[slot];
        if (m > r->layer_max_diff[slot])
            r->layer_max_diff[slot] = m;
        if (!same && r->first_diff_layer == -2) {
            r->first_diff_layer = layer;
            r->first_diff_position = o->cut_first_pos[slot];
            r->first_diff_cut = cut;
        }
        const char *what = layer < 0 ? "logits" : "hidden state";
        lp_status st;
        if (same && m > 0.0)
            st = add_check(r, cap, "perturbation", true, layer, cut, m, err,
                           "cut %lld: %s at positions 0..%lld within %.0e relative (max |diff| "
                           "%.3g): MoE expert GEMMs change row count with routing, and with it "
                           "their summation order",
                           (long long)cut, what, (long long)cut, o->tolerance, m);
        else if (same)
            st = add_check(r, cap, "perturbation", true, layer, cut, 0.0, err,
                           "cut %lld: %s at positions 0..%lld identical bit for bit after "
                           "replacing the %lld later tokens",
                           (long long)cut, what, (long long)cut, (long long)(n_ids - 1 - cut));
        else
            st = add_check(r, cap, "perturbation", false, layer, o->cut_first_pos[slot], m, err,
                           "cut %lld: %s changes at position %lld <= cut when later tokens "
                           "change (max |diff| %.3g)",
                           (long long)cut, what, (long long)o->cut_first_pos[slot], m);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

/* Every token after the cut replaced by a different one; positions <= cut must not move. */
static lp_status perturb(const lp_model *model, const int32_t *ids, int64_t n_ids, int64_t cut,
                         leak_obs *o, int32_t *perturbed, uint64_t *rng, int64_t *cap,
                         lp_error *err)
{
    memcpy(perturbed, ids, (size_t)n_ids * sizeof(int32_t));
    for (int64_t t = cut + 1; t < n_ids; t++) {
        uint64_t others = (uint64_t)(o->V > 1 ? o->V - 1 : 1);
        int64_t shift = 1 + (int64_t)(lp_splitmix64(rng) % others);
        perturbed[t] = (int32_t)((ids[t] + shift) % o->V);
    }
    for (int l = 0; l <= o->n_layers; l++) {
        o->cut_max[l] = 0.0;
        o->cut_first_pos[l] = -1;
    }
    o->cut = cut;
    o->mode = MODE_PERTURBED;
    lp_batch pb = lp_batch_single(perturbed, n_ids);
    lp_status st = run_pass(model, &pb, o, err);
    return st != LP_OK ? st : cut_checks(o, cut, n_ids, cap, err);
}

static lp_status perturbation_checks(const lp_model *model, const int32_t *ids, int64_t n_ids,
                                     int64_t max_cuts, leak_obs *o, int64_t *cap, lp_error *err)
{
    uint64_t rng = o->opts->seed;
    choose_cuts(o->r, n_ids, max_cuts, &rng);
    int32_t *perturbed = alloc_array(n_ids, 1, sizeof(int32_t));
    if (!perturbed)
        return lp_error_set(err, LP_ERR_NOMEM, "leak: out of memory for %lld tokens",
                            (long long)n_ids);
    lp_status st = LP_OK;
    for (int64_t ci = 0; ci < o->r->n_cuts && st == LP_OK; ci++)
        st = perturb(model, ids, n_ids, o->r->cuts[ci], o, perturbed, &rng, cap, err);
    free(perturbed);
    return st;
}

/* The verdict and the bug's name, from every leak seen. */
static void verdict(lp_leak_model_report *r)
{
    lp_leak_cell_stats all = r->attn;
    merge_stats(&all, &r->structural);
    r->leak_count = all.leak_count;
    r->blocked_count = all.blocked_count;
    r->diagnosis = lp_leak_diagnose(&all);
    bool perturbation_ok = r->first_diff_layer == -2;
    if (r->leak_count == 0 && !perturbation_ok)
        r->diagnosis = "leak";
    else if (r->leak_count == 0 && r->blocked_count == 0 && r->alignment_flagged)
        r->diagnosis = "alignment";
    r->passed = true;
    for (int64_t i = 0; i < r->n_checks; i++)
        r->passed = r->passed && r->checks[i].passed;
}

lp_status lp_leak_check_model(const lp_model *model, const int32_t *ids, int64_t n_ids,
                              const lp_leak_model_opts *opts_in, lp_leak_model_report *r,
                              lp_error *err)
{
    lp_leak_model_opts defaults;
    if (!opts_in) {
        lp_leak_model_opts_init(&defaults);
        opts_in = &defaults;
    }
    memset(r, 0, sizeof *r);
    r->first_diff_layer = -2;
    r->first_diff_position = -1;
    r->first_diff_cut = -1;
    r->bitwise = true;
    if (n_ids < 2)
        return lp_error_set(err, LP_ERR_USAGE,
                            "leak: %lld tokens (need at least 2: a cut point and a future)",
                            (long long)n_ids);
    lp_batch single = lp_batch_single(ids, n_ids);
    lp_status st = lp_forward_check(model, &single, err);
    if (st != LP_OK)
        return st;
    int64_t cap = 0;
    int64_t max_cuts = 3 + (opts_in->n_random_cuts > 0 ? opts_in->n_random_cuts : 0);
    if (max_cuts > n_ids - 1)
        max_cuts = n_ids - 1;
    leak_obs o;
    st = setup(model, n_ids, opts_in, &o, r, max_cuts, err);
    /* 1. Baseline: keeps residuals and logits, checks every attention map; 2. alignment;
     * 3. perturbation of the future at each cut; 4. structural: the engine's masks cell by cell,
     * and a padded batch through the engine. */
    o.mode = MODE_BASELINE;
    if (st == LP_OK)
        st = run_pass(model, &single, &o, err);
    if (st == LP_OK)
        st = attention_checks(&o, o.attn, false, &cap, err);
    if (st == LP_OK)
        st = alignment_check(&o, ids, n_ids, &cap, err);
    if (st == LP_OK)
        st = perturbation_checks(model, ids, n_ids, max_cuts, &o, &cap, err);
    if (st == LP_OK)
        st = structural_specs(&o, &cap, err);
    if (st == LP_OK)
        st = padded_batch_check(model, ids, n_ids, &o, &cap, err);
    if (st == LP_OK)
        verdict(r);
    free_obs(&o);
    if (st != LP_OK)
        lp_leak_model_report_free(r);
    return st;
}
