/* Shared by the estimate module's .c files: the list of weight tensors an lp_arch implies. */
#ifndef LP_ESTIMATE_ESTIMATE_INTERNAL_H
#define LP_ESTIMATE_ESTIMATE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "estimate/estimate.h"

/* One weight tensor kind: a matrix [rows = out features, cols = in features] or a vector of
 * rows values (cols = 1), repeated `copies` times (experts), of which `active_copies` are used
 * per token. */
typedef struct lp_est_part {
    lp_est_component comp;
    const char *name;
    int64_t rows;
    int64_t cols;
    int64_t copies;
    int64_t active_copies;
    bool is_matrix;
} lp_est_part;

#define LP_EST_MAX_PARTS 48

/* Tensors of layer l (0-based) and of the whole model outside the layers. */
int lp_est_layer_parts(const lp_arch *arch, int64_t layer, lp_est_part *parts);
int lp_est_global_parts(const lp_arch *arch, lp_est_part *parts);

/* Per-layer values with the fallbacks lp_arch_finish would apply. */
int64_t lp_est_head_dim(const lp_arch *arch);
int64_t lp_est_embed_dim(const lp_arch *arch); /* width of the vocabulary tables */
int64_t lp_est_layer_kv_heads(const lp_arch *arch, int64_t layer);
int64_t lp_est_layer_ffn_hidden(const lp_arch *arch, int64_t layer);
int64_t lp_est_layer_window(const lp_arch *arch, int64_t layer);
bool lp_est_layer_is_moe(const lp_arch *arch, int64_t layer);
/* Bytes cached per token by layer l at dtype (rows padded to blocks); false on overflow. */
bool lp_est_layer_kv_bytes_per_token(const lp_arch *arch, int64_t layer, const lp_est_dtype *dtype,
                                     uint64_t *bytes);
/* Number of keys each of the seq queries of a prefill sees in total, causal with window w
 * (0 = none): sum over i = 1..seq of min(i, w). */
double lp_est_causal_pairs(int64_t seq, int64_t window);

/* Bytes of one part at dtype (all copies); false on overflow. */
bool lp_est_part_bytes(const lp_est_part *part, const lp_est_dtype *dtype, uint64_t *bytes);

void lp_est_warn(lp_est_report *rep, const char *code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The audit and the RoPE report (audit.c). */
void lp_est_audit(const lp_arch *arch, const lp_est_options *opts, lp_est_report *rep);
void lp_est_rope_report(const lp_arch *arch, lp_est_rope *rope);
const char *lp_est_scaling_name(lp_rope_scaling_kind kind);

/* FLOPs, intensity and roofline (flops.c); needs params, kv and weight bytes filled. */
void lp_est_compute_flops(const lp_arch *arch, lp_est_report *rep);

#endif
