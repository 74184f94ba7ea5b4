/* Shared by the estimate module's .c files: the list of weight tensors an lp_arch implies. */
#ifndef LP_ESTIMATE_ESTIMATE_INTERNAL_H
#define LP_ESTIMATE_ESTIMATE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "estimate/estimate.h"

/* How tensor parallelism divides a weight, as vLLM's layers do (deploy.c applies it). */
typedef enum lp_est_split {
    LP_EST_SPLIT_NONE,  /* whole on every rank: norms, routers, MLA's q_a and kv_a
                           (ReplicatedLinear), the bias of a row-parallel layer */
    LP_EST_SPLIT_ROWS,  /* column-parallel: the output features (rows) are divided */
    LP_EST_SPLIT_COLS,  /* row-parallel: the input features (cols) are divided */
    LP_EST_SPLIT_KV,    /* k/v rows by kv head; when tp exceeds the kv heads each rank holds one
                           (QKVParallelLinear replicates it) */
    LP_EST_SPLIT_VOCAB, /* vocab-parallel: rows padded to a multiple of 64, then divided */
} lp_est_split;

/* One weight tensor kind: a matrix [rows = out features, cols = in features] or a vector of
 * rows values (cols = 1), repeated `copies` times (experts), of which `active_copies` are used
 * per token. split_groups is what the split dimension is made of (heads, or single rows): a
 * split must not cut one. head_side marks global tensors the last pipeline stage holds. */
typedef struct lp_est_part {
    lp_est_component comp;
    const char *name;
    int64_t rows;
    int64_t cols;
    int64_t copies;
    int64_t active_copies;
    bool is_matrix;
    lp_est_split split;
    int64_t split_groups;
    bool head_side;
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

/* The device view (deploy.c, deploy_time.c): the placement, memory and serving figures per
 * device, then the communication and roofline times per device; rep needs everything else. */
bool lp_est_deploy_requested(const lp_est_deploy_options *opts);
lp_status lp_est_deploy_compute(const lp_arch *arch, const lp_est_options *opts,
                                lp_est_report *rep, lp_error *err);
void lp_est_deploy_times(const lp_arch *arch, lp_est_report *rep);
/* vLLM's get_pp_indices: the layers of pipeline stage `stage` of pp. */
void lp_est_stage_layers(int64_t n_layers, int64_t pp, int64_t stage, int64_t *first,
                         int64_t *count);
/* A part as one device of the mesh holds it (rows, cols and copies divided). */
void lp_est_local_part(const lp_est_part *part, const lp_est_deploy *d, lp_est_part *out);
int64_t lp_est_local_kv_heads(const lp_est_deploy *d, int64_t kv_heads);
/* KV bytes on a device for one sequence of `tokens` (windows applied; whole blocks of `block`
 * tokens when block > 0); false on overflow. */
bool lp_est_stage_kv_bytes(const lp_arch *arch, const lp_est_deploy *d, const lp_est_device *dev,
                           const lp_est_dtype *dtype, int64_t tokens, int64_t block,
                           uint64_t *bytes);

/* Printing (report.c, report_json.c, report_deploy.c). */
const char *lp_est_format_seconds(double seconds, char *buf); /* buf: 48 bytes; "6.08 ms" */
const char *lp_est_model_name(const lp_arch *arch);
void lp_est_print_deploy(FILE *out, const lp_arch *arch, const lp_est_report *rep);
/* Set key to value in obj (value released either way); a failure clears *ok. */
void lp_est_json_put(json_t *obj, const char *key, json_t *value, bool *ok);
void lp_est_json_append(json_t *array, json_t *value, bool *ok);
json_t *lp_est_json_u64(uint64_t v);
/* "deployment", "devices" and "serving" into doc (null when no device view was asked). */
void lp_est_deploy_json(json_t *doc, const lp_arch *arch, const lp_est_report *rep, bool *ok);

/* The measuring loops of measure.c with AVX2+FMA (measure_avx2.c; only after a CPU check): the
 * FMA loop does iters x 12 x 8 fused multiply-adds and returns a sum to keep; the read sums
 * bytes (a multiple of 128, 32-byte aligned) as 64-bit words. */
double lp_est_fma_loop_avx2(int64_t iters);
uint64_t lp_est_read_avx2(const void *buf, size_t bytes);

/* FLOPs, intensity and roofline (flops.c); needs params, kv and weight bytes filled. */
void lp_est_compute_flops(const lp_arch *arch, lp_est_report *rep);

#endif
