/* Parsing and formatting helpers for option values and reports:
 *
 *   int64_t n;  lp_parse_count("8k", &n);            // 8000
 *   char buf[32]; lp_format_bytes(16060522496, buf, sizeof buf);   // "14.96 GiB"
 */
#ifndef LP_CORE_TEXT_H
#define LP_CORE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* Strict number parsing for option values: the whole string must be the number. */
bool lp_parse_i64(const char *text, int64_t *out);
bool lp_parse_f64(const char *text, double *out);
/* Sizes with units: "24GiB", "16GB", "512MiB", "1.5TiB", "4096" (bytes). SI (GB) and binary
 * (GiB) multipliers are both honoured. */
bool lp_parse_size(const char *text, uint64_t *bytes);
/* Counts with optional suffixes: "8k" = 8000, "128K" = 128000, "8Ki" = 8192, "1M" = 10^6. */
bool lp_parse_count(const char *text, int64_t *out);

/* "1,403,407" -> token ids (malloc'd, caller frees) for --tokens options. Spaces around ids are
 * allowed; an empty list, a negative or non-numeric entry or one above INT32_MAX is
 * LP_ERR_USAGE naming the byte offset. Range checks against a vocabulary are the caller's. */
lp_status lp_parse_token_ids(const char *text, int32_t **ids, size_t *n_ids, lp_error *err);

/* Human formatting into caller buffers (at least 32 bytes): "14.96 GiB", "1.23 TFLOP". */
const char *lp_format_bytes(uint64_t bytes, char *buf, int buf_size);
const char *lp_format_flops(double flops, char *buf, int buf_size);
/* 8030261248 -> "8,030,261,248" */
const char *lp_format_int(int64_t value, char *buf, int buf_size);

/* True when s ends with suffix, compared byte for byte ("model.GGUF" does not end with ".gguf"). */
bool lp_ends_with(const char *s, const char *suffix);

#endif
