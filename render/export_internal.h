/* What export.c (the plan and the data) and export_write.c (the two file formats) share. */
#ifndef LP_RENDER_EXPORT_INTERNAL_H
#define LP_RENDER_EXPORT_INTERNAL_H

#include <jansson.h>
#include <stdio.h>

#include "core/dtype.h"
#include "render/render.h"

typedef enum lp_export_kind {
    LP_EXPORT_ATTN_STACK,   /* every head's map: [layers, heads, n_q, n_k] */
    LP_EXPORT_ATTN_HEAD,    /* one head's map: [n_q, n_k] */
    LP_EXPORT_STAT,         /* one head statistic: [layers, heads] */
    LP_EXPORT_TOKENS,       /* token ids: [n_tokens] */
    LP_EXPORT_PRED_ID,      /* predictions: [n_tokens, k] */
    LP_EXPORT_PRED_PROB,
    LP_EXPORT_PRED_LOGIT,
    LP_EXPORT_LOGITS,       /* full logits: [n_tokens, vocab] */
} lp_export_kind;

typedef struct lp_export_tensor {
    char name[64];
    lp_export_kind kind;
    lp_dtype dtype;          /* F16, F32, F64 or I32 */
    int n_dims;
    int64_t shape[4];
    uint64_t bytes;
    int64_t layer, head;     /* ATTN_HEAD */
    int stat;                /* STAT: an lp_head_stat */
} lp_export_tensor;

/* One export: the run, the plan, what was read for it and the output stream. */
typedef struct lp_export_job {
    lp_store *db;
    const lp_store_run *run;
    lp_export_tensor *t;     /* [n] in file order */
    int64_t n, cap;
    bool attention_stacked;
    double *stats[LP_STAT_COUNT];   /* [layers * heads] each */
    int32_t *token_ids;             /* [n_token_ids] */
    int64_t n_token_ids;
    lp_store_predictions pred;
    int64_t vocab;                  /* full logits' width, 0 = none */
    json_t *meta;                   /* string -> string */
    FILE *f;
    uint32_t crc;                   /* CRC-32 of what lp_export_out wrote since reset */
    uint64_t written;
    bool write_failed;
    /* One tensor's data, streamed through lp_export_out: the format writers call it for each
     * tensor (lp_export_emit), so they need nothing else of export.c. */
    lp_status (*emit)(struct lp_export_job *j, const lp_export_tensor *t, lp_error *err);
} lp_export_job;

/* Bytes to the file, counted and folded into j->crc. */
void lp_export_out(lp_export_job *j, const void *data, size_t n);
/* One tensor's data, streamed. */
lp_status lp_export_emit(lp_export_job *j, const lp_export_tensor *t, lp_error *err);
/* The zip CRC-32 (IEEE, reflected) of data, continuing from crc (0 to start). */
uint32_t lp_export_crc32(uint32_t crc, const void *data, size_t n);

/* The two formats: header, every tensor through j->emit, trailer. */
lp_status lp_export_write_safetensors(lp_export_job *j, lp_error *err);
lp_status lp_export_write_npz(lp_export_job *j, lp_error *err);

#endif
