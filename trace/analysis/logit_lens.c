/* The logit lens: every layer's residual stream read out by the model's own classifier. */
#include "trace/analysis/analysis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"

/* The pass computes logits in chunks of this many floats; the lens uses the same row chunks, so
 * the last layer's readout is the pass's own logits bit for bit. */
#define LENS_CHUNK_FLOATS (4u << 20)

static bool lens_want(void *ctx, const lp_site *s)
{
    (void)ctx;
    return s->kind == LP_SITE_RESID && s->batch == 0;
}

static lp_status lens_observe(void *ctx, const lp_site *s, const lp_view *v, lp_error *err)
{
    lp_logit_lens *lens = ctx;
    if (s->kind != LP_SITE_RESID || s->batch != 0 || s->layer < 0 || s->layer >= lens->n_layers)
        return LP_OK;
    int64_t V = lp_model_arch(lens->model)->vocab_size, T = lens->T, k = lens->k, l = s->layer;
    double sum = 0;
    for (int64_t r0 = 0; r0 < v->rows; r0 += lens->chunk) {
        int64_t rows = v->rows - r0 < lens->chunk ? v->rows - r0 : lens->chunk;
        /* the view may have a stride: the classifier takes packed rows */
        const float *x = v->data + r0 * v->stride;
        float *packed = NULL;
        if (v->stride != v->cols) {
            packed = malloc((size_t)(rows * v->cols) * sizeof *packed);
            if (!packed)
                return lp_error_set(err, LP_ERR_NOMEM, "logit lens: out of memory");
            for (int64_t r = 0; r < rows; r++)
                memcpy(packed + r * v->cols, x + r * v->stride, (size_t)v->cols * sizeof *x);
            x = packed;
        }
        lp_status st = lp_model_unembed(lens->model, x, rows, lens->pool, lens->logits, err);
        free(packed);
        if (st != LP_OK)
            return st;
        for (int64_t r = 0; r < rows; r++) {
            int64_t pos = v->row0 + r0 + r;
            const float *row = lens->logits + r * V;
            int64_t n = lp_top_k(row, V, k, lens->top);
            for (int64_t j = 0; j < k; j++) {
                lens->token[(l * T + pos) * k + j] = j < n ? lens->top[j].token_id : -1;
                lens->prob[(l * T + pos) * k + j] = j < n ? lens->top[j].prob : 0.0f;
            }
            if (pos + 1 < T) {
                double mx = (double)row[0], z = 0;
                for (int64_t c = 1; c < V; c++)
                    mx = fmax(mx, (double)row[c]);
                for (int64_t c = 0; c < V; c++)
                    z += exp((double)row[c] - mx);
                sum += log(z) + mx - (double)row[lens->ids[pos + 1]];
            }
        }
    }
    lens->layer_nll[l] = T > 1 ? sum / (double)(T - 1) : (double)NAN;
    lens->seen[l] = true;
    return LP_OK;
}

/* The lens and its arrays are one block (lp_logit_lens_create). */
void lp_logit_lens_free(lp_logit_lens *lens) { free(lens); }

lp_status lp_logit_lens_create(const lp_model *model, const int32_t *ids, int64_t T, int64_t k,
                               lp_pool *pool, lp_logit_lens **out, lp_error *err)
{
    const lp_arch *a = lp_model_arch(model);
    *out = NULL;
    if (T < 1 || k < 1)
        return lp_error_set(err, LP_ERR_USAGE, "logit lens: %lld tokens, top %lld",
                            (long long)T, (long long)k);
    k = k < a->vocab_size ? k : a->vocab_size;
    int64_t L = a->n_layers, chunk = (int64_t)(LENS_CHUNK_FLOATS / (uint64_t)a->vocab_size);
    chunk = chunk < 1 ? 1 : (chunk < T ? chunk : T);
    const lp_owned_array arrays[] = {
        LP_OWNED_ARRAY(lp_logit_lens, token, L * T * k),
        LP_OWNED_ARRAY(lp_logit_lens, prob, L * T * k),
        LP_OWNED_ARRAY(lp_logit_lens, layer_nll, L),
        LP_OWNED_ARRAY(lp_logit_lens, seen, L),
        LP_OWNED_ARRAY(lp_logit_lens, logits, chunk * a->vocab_size),
        LP_OWNED_ARRAY(lp_logit_lens, top, k),
    };
    lp_logit_lens *lens = lp_alloc_with_arrays(sizeof *lens, arrays,
                                               sizeof arrays / sizeof arrays[0]);
    if (!lens)
        return lp_error_set(err, LP_ERR_NOMEM, "logit lens: out of memory for %lld layers x %lld "
                            "tokens", (long long)L, (long long)T);
    lens->n_layers = L;
    lens->T = T;
    lens->k = k;
    lens->model = model;
    lens->ids = ids;
    lens->pool = pool;
    lens->chunk = chunk;
    lens->observer = (lp_observer){lens, lens_want, lens_observe};
    *out = lens;
    return LP_OK;
}

const lp_observer *lp_logit_lens_observer(lp_logit_lens *lens)
{
    return &lens->observer;
}
