/* `loupe inspect`'s report on open weights (report.c): architecture, tensor table, totals,
 * tied-embedding detection, checks of the config against the weights, optional per-tensor
 * statistics; as a JSON tree, or written as the JSON document with the tensors streamed.
 *
 *   json_t *report;
 *   lp_tensor_stats *stats = NULL;                       // one per tensor with --stats
 *   lp_inspect_build_report(w, true, false, &report, &stats, &err);
 *   ... print from the report and the catalogue, or:
 *   lp_inspect_write_report_json(stdout, report, w, stats, &err);
 *   json_decref(report);
 *   free(stats);
 */
#ifndef LP_INSPECT_REPORT_INTERNAL_H
#define LP_INSPECT_REPORT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "inspect/inspect.h"

typedef struct lp_tensor_stats {
    double min, max, mean, m2; /* over finite values; m2 = sum of squared deviations */
    int64_t n_finite, n_nan, n_inf;
} lp_tensor_stats;

/* The report (embed_tensors false leaves the tensors out of the document; *stats_out gets one
 * lp_tensor_stats per tensor when stats, caller frees). Without stats no tensor data is read
 * except the embedding/classifier comparison, which is sampled above 64 MiB. Caller
 * json_decref()s *out. */
lp_status lp_inspect_build_report(const lp_weights *w, bool stats, bool embed_tensors, json_t **out,
                                  lp_tensor_stats **stats_out, lp_error *err);

/* The whole report as one JSON tree, tensors included (tests and fuzzing; the command streams). */
lp_status lp_inspect_report(const lp_weights *weights, bool stats, json_t **out, lp_error *err);

/* Write a report built without its tensors as the document json_dumps(lp_inspect_report(...),
 * JSON_INDENT(2) | JSON_REAL_PRECISION(9)) gives, plus a newline, byte for byte, with the tensors
 * array streamed (one tensor object alive at a time) so that memory stays a small multiple of
 * the file even with 300,000 tensors. stats may be NULL. */
lp_status lp_inspect_write_report_json(FILE *f, json_t *report, const lp_weights *w,
                                       const lp_tensor_stats *stats, lp_error *err);

/* lp_inspect_build_report + lp_inspect_write_report_json: `loupe inspect --json`. */
lp_status lp_inspect_write_json(const lp_weights *weights, bool stats, FILE *out, lp_error *err);

/* A GGUF's key/values as one JSON object (scalars as values, arrays as {"array": element type,
 * "length", "head": first elements}); an empty object for other formats, NULL out of memory. */
json_t *lp_gguf_metadata_json(const lp_weights *w);

/* --strict: append the check "config_keys" to checks, failing when config_path (a config.json)
 * has top-level keys the reader never looks up, and naming them. */
lp_status lp_inspect_config_keys_check(const char *config_path, json_t *checks, lp_error *err);

/* The config.json the weights' description came from, or NULL (GGUF, llama2.c, none beside). */
const char *lp_weights_config_path(const lp_weights *w);

/* "[4096, 11008]" */
void lp_format_shape(char *buf, size_t size, const int64_t *shape, int n_dims);

#endif
