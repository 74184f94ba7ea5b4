/* Run-to-run differences read back from two trace databases: per head the Jensen-Shannon
 * divergence of the attention rows and the largest |difference|, per position the KL divergence
 * of the next-token distributions and whether the argmax agrees, per head every statistic's
 * change. */
#include "trace/analysis/analysis.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"

/* The report and its arrays are one block (lp_diff_runs). */
void lp_run_diff_free(lp_run_diff *d) { free(d); }

/* The two runs must be over the same tokens: the first differing position is named. */
static lp_status same_tokens(lp_store *a, const lp_store_run *ra, lp_store *b,
                             const lp_store_run *rb, int64_t *T, lp_error *err)
{
    int32_t *ia = NULL, *ib = NULL;
    int64_t na = 0, nb = 0;
    lp_status st = lp_store_read_token_ids(a, ra->id, &ia, &na, err);
    if (st == LP_OK)
        st = lp_store_read_token_ids(b, rb->id, &ib, &nb, err);
    for (int64_t p = 0; st == LP_OK && p < (na < nb ? na : nb); p++)
        if (ia[p] != ib[p])
            st = lp_error_set(err, LP_ERR_USAGE,
                              "the runs differ at token position %lld (run %lld has id %ld, "
                              "run %lld id %ld): diff needs the same tokens",
                              (long long)p, (long long)ra->id, (long)ia[p], (long long)rb->id,
                              (long)ib[p]);
    if (st == LP_OK && na != nb)
        st = lp_error_set(err, LP_ERR_USAGE,
                          "run %lld has %lld tokens, run %lld has %lld: they differ from "
                          "position %lld on",
                          (long long)ra->id, (long long)na, (long long)rb->id, (long long)nb,
                          (long long)(na < nb ? na : nb));
    if (st == LP_OK && (ra->n_layers != rb->n_layers || ra->n_heads != rb->n_heads))
        st = lp_error_set(err, LP_ERR_USAGE, "%lld x %lld heads against %lld x %lld",
                          (long long)ra->n_layers, (long long)ra->n_heads,
                          (long long)rb->n_layers, (long long)rb->n_heads);
    *T = na;
    free(ia);
    free(ib);
    return st;
}

static double xlogx_ratio(double p, double m) { return p > 0 ? p * log(p / m) : 0.0; }

/* One head: rows of both maps streamed; mean JS over rows with mass in either. */
static lp_status head_diff(lp_store *a, const lp_store_run *ra, lp_store *b,
                           const lp_store_run *rb, int64_t l, int64_t h, float *row_a,
                           float *row_b, double *js, double *max_abs, lp_error *err)
{
    lp_store_map *ma = NULL, *mb = NULL;
    lp_status st = lp_store_map_open(a, ra, l, h, &ma, err);
    if (st == LP_OK)
        st = lp_store_map_open(b, rb, l, h, &mb, err);
    int64_t qa = 0, ka = 0, qb = 0, kb = 0;
    if (st == LP_OK) {
        lp_store_map_shape(ma, &qa, &ka);
        lp_store_map_shape(mb, &qb, &kb);
        if (qa != qb || ka != kb)
            st = lp_error_set(err, LP_ERR_FORMAT, "diff: layer %lld head %lld: maps of %lldx%lld "
                              "and %lldx%lld", (long long)l, (long long)h, (long long)qa,
                              (long long)ka, (long long)qb, (long long)kb);
    }
    double sum = 0, mx = 0;
    int64_t rows = 0;
    for (int64_t q = 0; st == LP_OK && q < qa; q++) {
        if ((st = lp_store_map_read(ma, q, 0, ka, row_a, err)) ||
            (st = lp_store_map_read(mb, q, 0, ka, row_b, err)))
            break;
        double r = 0, mass = 0;
        for (int64_t k = 0; k < ka; k++) {
            double p = (double)row_a[k], pq = (double)row_b[k], m = 0.5 * (p + pq);
            mass += p + pq;
            mx = fmax(mx, fabs(p - pq));
            if (m > 0)
                r += 0.5 * xlogx_ratio(p, m) + 0.5 * xlogx_ratio(pq, m);
        }
        if (mass > 0) {
            sum += r;
            rows++;
        }
    }
    lp_store_map_close(ma);
    lp_store_map_close(mb);
    *js = rows > 0 ? sum / (double)rows : 0.0;
    *max_abs = mx;
    return st;
}

/* KL(A || B) of the next-token distributions at every position from full logits. */
static lp_status position_kl(lp_store *a, const lp_store_run *ra, lp_store *b,
                             const lp_store_run *rb, lp_run_diff *d, lp_error *err)
{
    int64_t na, va, nb, vb;
    lp_error local = {0};
    if (lp_store_logits_shape(a, ra, &na, &va, &local) != LP_OK ||
        lp_store_logits_shape(b, rb, &nb, &vb, &local) != LP_OK || va != vb || na == 0 ||
        nb == 0)
        return LP_OK; /* no full logits on one side: argmax from predictions only */
    float *la = malloc((size_t)va * sizeof *la), *lb = malloc((size_t)va * sizeof *lb);
    lp_status st = la && lb ? LP_OK : lp_error_set(err, LP_ERR_NOMEM, "diff: out of memory");
    for (int64_t p = 0; st == LP_OK && p < d->T; p++) {
        if ((st = lp_store_read_logits(a, ra, p, va, la, err)) ||
            (st = lp_store_read_logits(b, rb, p, va, lb, err)))
            break;
        if (isnan(la[0]) || isnan(lb[0]))
            continue;
        double ma = (double)la[0], mb = (double)lb[0], za = 0, zb = 0;
        int64_t aa = 0, ab = 0;
        for (int64_t v = 1; v < va; v++) {
            if (la[v] > la[aa])
                aa = v;
            if (lb[v] > lb[ab])
                ab = v;
        }
        ma = (double)la[aa];
        mb = (double)lb[ab];
        for (int64_t v = 0; v < va; v++) {
            za += exp((double)la[v] - ma);
            zb += exp((double)lb[v] - mb);
        }
        double kl = 0;
        for (int64_t v = 0; v < va; v++) {
            double lpa = (double)la[v] - ma - log(za), lpb = (double)lb[v] - mb - log(zb);
            kl += exp(lpa) * (lpa - lpb);
        }
        d->kl[p] = kl > 0 ? kl : 0.0; /* rounding never makes it negative */
        d->argmax_agree[p] = aa == ab;
        d->has_kl = true;
    }
    free(la);
    free(lb);
    return st;
}

/* Argmax agreement from the predictions' rank 0 when there are no full logits. */
static lp_status position_argmax(lp_store *a, const lp_store_run *ra, lp_store *b,
                                 const lp_store_run *rb, lp_run_diff *d, lp_error *err)
{
    lp_store_predictions pa = {0}, pb = {0};
    lp_status st = lp_store_read_predictions(a, ra, &pa, err);
    if (st == LP_OK)
        st = lp_store_read_predictions(b, rb, &pb, err);
    for (int64_t p = 0; st == LP_OK && p < d->T && p < pa.n_pos && p < pb.n_pos; p++)
        d->argmax_agree[p] = pa.token_id[p * pa.k] == pb.token_id[p * pb.k];
    lp_store_predictions_clear(&pa);
    lp_store_predictions_clear(&pb);
    return st;
}

lp_status lp_diff_runs(lp_store *a, const lp_store_run *ra, lp_store *b, const lp_store_run *rb,
                       lp_run_diff **out, lp_error *err)
{
    *out = NULL;
    int64_t T;
    lp_status st = same_tokens(a, ra, b, rb, &T, err);
    if (st != LP_OK)
        return st;
    int64_t LH = ra->n_layers * ra->n_heads;
    const lp_owned_array arrays[] = {
        LP_OWNED_ARRAY(lp_run_diff, js, LH),
        LP_OWNED_ARRAY(lp_run_diff, max_abs, LH),
        LP_OWNED_ARRAY(lp_run_diff, stat_delta, LH * LP_STAT_COUNT),
        LP_OWNED_ARRAY(lp_run_diff, kl, T),
        LP_OWNED_ARRAY(lp_run_diff, argmax_agree, T),
    };
    lp_run_diff *d = lp_alloc_with_arrays(sizeof *d, arrays, sizeof arrays / sizeof arrays[0]);
    float *row_a = malloc((size_t)(T > 0 ? T : 1) * sizeof *row_a);
    float *row_b = malloc((size_t)(T > 0 ? T : 1) * sizeof *row_b);
    if (!d || !row_a || !row_b) {
        free(row_a);
        free(row_b);
        lp_run_diff_free(d);
        return lp_error_set(err, LP_ERR_NOMEM, "diff: out of memory");
    }
    d->n_layers = ra->n_layers;
    d->n_heads = ra->n_heads;
    d->T = T;
    for (int64_t p = 0; p < T; p++)
        d->kl[p] = NAN;
    for (int64_t i = 0; st == LP_OK && i < LH; i++) {
        st = head_diff(a, ra, b, rb, i / d->n_heads, i % d->n_heads, row_a, row_b, &d->js[i],
                       &d->max_abs[i], err);
        if (st == LP_ERR_NOT_FOUND) { /* a map one run did not store */
            d->js[i] = d->max_abs[i] = NAN;
            st = LP_OK;
        } else if (st == LP_OK) {
            d->n_maps++;
        }
    }
    for (int s = 0; st == LP_OK && s < LP_STAT_COUNT; s++) {
        double *va = NULL, *vb = NULL;
        lp_error local = {0};
        if (lp_store_read_head_stat(a, ra, (lp_head_stat)s, &va, &local) == LP_OK &&
            lp_store_read_head_stat(b, rb, (lp_head_stat)s, &vb, &local) == LP_OK)
            for (int64_t i = 0; i < LH; i++)
                d->stat_delta[i * LP_STAT_COUNT + s] = vb[i] - va[i];
        else
            for (int64_t i = 0; i < LH; i++)
                d->stat_delta[i * LP_STAT_COUNT + s] = NAN;
        free(va);
        free(vb);
    }
    if (st == LP_OK)
        st = position_kl(a, ra, b, rb, d, err);
    if (st == LP_OK && !d->has_kl)
        st = position_argmax(a, ra, b, rb, d, err);
    free(row_a);
    free(row_b);
    if (st != LP_OK) {
        lp_run_diff_free(d);
        return st;
    }
    *out = d;
    return LP_OK;
}
