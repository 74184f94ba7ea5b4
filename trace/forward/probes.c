/* Probes over the pass's outputs: per-head summaries, top-k predictions, index-list parsing. */
#include "trace/trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void lp_head_stats_from_rows(const lp_attn_row_stats *rows, int64_t n_rows, int64_t row_index0,
                             lp_head_stats *out)
{
    double entropy = 0, max_prob = 0, sink = 0, prev = 0, self = 0, distance = 0, local = 0;
    double keys50 = 0, keys90 = 0, keys99 = 0, low_mass = 0, learned_sink = 0;
    int64_t n = 0, n_prev = 0;
    for (int64_t i = 0; i < n_rows; i++) {
        const lp_attn_row_stats *r = &rows[i];
        if (!(r->row_sum > 0.0f))
            continue; /* a fully masked (padding) row has no distribution */
        n++;
        entropy += (double)r->entropy;
        max_prob += (double)r->max_prob;
        sink += (double)r->sink;
        self += (double)r->self;
        distance += (double)r->distance;
        local += (double)r->local;
        keys50 += (double)r->keys50;
        keys90 += (double)r->keys90;
        keys99 += (double)r->keys99;
        low_mass += (double)r->low_mass;
        learned_sink += (double)r->learned_sink;
        if (row_index0 + i >= 1) {
            /* Row 0 has no previous token; counting it would bias every head towards 0. */
            prev += (double)r->prev;
            n_prev++;
        }
    }
    double inv = n > 0 ? 1.0 / (double)n : 0.0;
    out->entropy = entropy * inv;
    out->max_prob = max_prob * inv;
    out->sink = sink * inv;
    out->self = self * inv;
    out->distance = distance * inv;
    out->local_frac = local * inv;
    out->prev_token = n_prev > 0 ? prev / (double)n_prev : 0.0;
    out->keys50 = keys50 * inv;
    out->keys90 = keys90 * inv;
    out->keys99 = keys99 * inv;
    out->low_mass = low_mass * inv;
    out->learned_sink = learned_sink * inv;
    out->output_norm = 0.0;
    out->n_rows = n;
}

double lp_mean_row_norm(const float *x, int64_t n_rows, int64_t n, int64_t stride)
{
    if (n_rows <= 0)
        return 0.0;
    double total = 0.0;
    for (int64_t r = 0; r < n_rows; r++) {
        double sq = 0.0;
        for (int64_t c = 0; c < n; c++)
            sq += (double)x[r * stride + c] * (double)x[r * stride + c];
        total += sqrt(sq);
    }
    return total / (double)n_rows;
}

/* Is candidate (logit a, id ia) ranked before (b, ib)? Higher logit first, then lower id. NaN
 * logits rank last. */
static int ranks_before(float a, int32_t ia, float b, int32_t ib)
{
    if (isnan(b) && !isnan(a))
        return 1;
    if (isnan(a))
        return 0;
    return a > b || (a == b && ia < ib);
}

double lp_softmax_sum(const float *logits, int64_t vocab, double *max)
{
    double top = -INFINITY;
    for (int64_t i = 0; i < vocab; i++)
        if ((double)logits[i] > top)
            top = (double)logits[i];
    double sum = 0.0;
    for (int64_t i = 0; i < vocab; i++)
        sum += exp((double)logits[i] - top);
    *max = top;
    return sum;
}

int64_t lp_top_k(const float *logits, int64_t vocab, int64_t k, lp_prediction *out)
{
    if (k > vocab)
        k = vocab;
    if (k <= 0)
        return 0;
    double max;
    double sum = lp_softmax_sum(logits, vocab, &max);
    int64_t n = 0;
    /* Insertion into a sorted list of k: O(vocab * k), fine for the small k we store. */
    for (int64_t i = 0; i < vocab; i++) {
        float v = logits[i];
        if (n == k && !ranks_before(v, (int32_t)i, out[n - 1].logit, out[n - 1].token_id))
            continue;
        int64_t pos = n < k ? n : k - 1;
        while (pos > 0 && ranks_before(v, (int32_t)i, out[pos - 1].logit, out[pos - 1].token_id)) {
            out[pos] = out[pos - 1];
            pos--;
        }
        out[pos].token_id = (int32_t)i;
        out[pos].logit = v;
        if (n < k)
            n++;
    }
    for (int64_t j = 0; j < n; j++)
        out[j].prob = sum > 0 ? (float)(exp((double)out[j].logit - max) / sum) : 0.0f;
    return n;
}

static bool parse_index(const char **p, int64_t *out)
{
    const char *s = *p;
    if (*s < '0' || *s > '9')
        return false;
    int64_t v = 0;
    while (*s >= '0' && *s <= '9') {
        if (v > (INT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (*s - '0');
        s++;
    }
    *p = s;
    *out = v;
    return true;
}

lp_status lp_parse_index_list(const char *text, int64_t limit, bool *mask, lp_error *err)
{
    bool all = !text || !*text || strcmp(text, "all") == 0;
    for (int64_t i = 0; i < limit; i++)
        mask[i] = all;
    if (all)
        return LP_OK;
    const char *p = text;
    for (;;) {
        int64_t lo, hi;
        const char *item = p;
        if (!parse_index(&p, &lo))
            return lp_error_set(err, LP_ERR_USAGE, "'%s': expected a number at offset %d", text,
                                (int)(item - text));
        hi = lo;
        if (*p == '-') {
            p++;
            if (!parse_index(&p, &hi))
                return lp_error_set(err, LP_ERR_USAGE, "'%s': expected a number after '-' at "
                                                       "offset %d", text, (int)(p - text));
            if (hi < lo)
                return lp_error_set(err, LP_ERR_USAGE, "'%s': range %lld-%lld runs backwards",
                                    text, (long long)lo, (long long)hi);
        }
        if (hi >= limit)
            return lp_error_set(err, LP_ERR_USAGE, "'%s': index %lld out of range (limit %lld)",
                                text, (long long)hi, (long long)limit);
        for (int64_t i = lo; i <= hi; i++)
            mask[i] = true;
        if (*p == '\0')
            return LP_OK;
        if (*p != ',')
            return lp_error_set(err, LP_ERR_USAGE, "'%s': unexpected '%c' at offset %d", text, *p,
                                (int)(p - text));
        p++;
    }
}
