/* The classifier on its own: any residual-stream rows through the final norm, OPT's
 * project_out, the LM head and the final soft-cap, exactly as the pass computes its logits (the
 * logit lens reads every layer this way). */
#include "trace/trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trace/forward/forward_internal.h"

/* MPT's logit_scale multiplies the LM head's output (llm-foundry: logits *= logit_scale), then
 * Gemma 2's final soft-cap applies. */
void lp_fw_finish_logits(const lp_arch *a, float *logits, int64_t n)
{
    if (a->logit_scale > 0) {
        float scale = (float)a->logit_scale;
        for (int64_t i = 0; i < n; i++)
            logits[i] *= scale;
    }
    if (a->final_logit_softcap > 0) {
        float cap = (float)a->final_logit_softcap;
        for (int64_t i = 0; i < n; i++)
            logits[i] = cap * tanhf(logits[i] / cap);
    }
}

lp_status lp_model_unembed(const lp_model *m, const float *x, int64_t rows, lp_pool *pool,
                           float *logits, lp_error *err)
{
    const lp_arch *a = &m->arch;
    int64_t H = a->hidden_size, V = a->vocab_size, E = m->block.embed_dim;
    float *xn = malloc((size_t)(rows * H) * sizeof *xn);
    float *proj = m->has_proj ? malloc((size_t)(rows * E) * sizeof *proj) : NULL;
    if (!xn || (m->has_proj && !proj)) {
        free(xn);
        free(proj);
        return lp_error_set(err, LP_ERR_NOMEM, "unembed: out of memory for %lld rows",
                            (long long)rows);
    }
    if (m->out_norm.present)
        lp_fw_norm_rows(a, m->out_norm.weight, m->out_norm.bias, xn, x, rows, H);
    else
        memcpy(xn, x, (size_t)(rows * H) * sizeof *xn);
    lp_status st = LP_OK;
    const float *in = xn;
    if (m->has_proj) {
        st = lp_linear(xn, rows, &m->project_out, NULL, proj, pool, err);
        in = proj;
    }
    if (st == LP_OK)
        st = lp_linear(in, rows, &m->lm_head, m->lm_head_bias, logits, pool, err);
    if (st == LP_OK)
        lp_fw_finish_logits(a, logits, rows * V);
    free(xn);
    free(proj);
    return st;
}
