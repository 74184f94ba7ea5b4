/* The command table and the small helpers every subcommand's argument parser shares.
 *
 * A subcommand lives in its module (inspect/cmd_inspect.c, ...) and exports one lp_command:
 *
 *   const lp_command lp_command_inspect = {
 *       "inspect", "read a model's config and weights", INSPECT_USAGE, cmd_inspect_main,
 *   };
 *
 * main() dispatches on argv[1]; the command's run() gets argv with argv[0] = the command name and
 * returns the process exit status: 0 ok, 1 a check failed, 2 bad usage or input. Only commands
 * print; the libraries below them return lp_status and lp_error.
 */
#ifndef LP_CORE_CLI_H
#define LP_CORE_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"

#define LP_VERSION "0.1.0"

enum { LP_EXIT_OK = 0, LP_EXIT_CHECK_FAILED = 1, LP_EXIT_USAGE = 2 };

typedef struct lp_command {
    const char *name;
    const char *summary; /* one line for `loupe --help` */
    const char *usage;   /* full text for `loupe help NAME` and `loupe NAME --help` */
    int (*run)(int argc, char **argv);
} lp_command;

extern const lp_command lp_command_inspect;
extern const lp_command lp_command_tokenize;
extern const lp_command lp_command_estimate;
extern const lp_command lp_command_trace;
extern const lp_command lp_command_leak;
extern const lp_command lp_command_render;
extern const lp_command lp_command_synth;
extern const lp_command lp_command_bench;
extern const lp_command lp_command_demo;

/* Match option `name` at argv[*i], in either "--name VALUE" or "--name=VALUE" form. On a match,
 * sets *value, advances *i past a separate value and returns 1. Returns 0 if argv[*i] is not this
 * option, -1 (after printing "loupe CMD: option --name needs a value") when the value is
 * missing. */
int lp_cli_option(const char *cmd, int argc, char **argv, int *i, const char *name,
                  const char **value);

/* True when argv[i] is exactly the flag `name` (no value). */
bool lp_cli_flag(const char *arg, const char *name);

/* Print "loupe CMD: message" on stderr and return LP_EXIT_USAGE. */
int lp_cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Print "loupe CMD: <err->msg>" and return the exit status an error of this kind deserves (2). */
int lp_cli_fail(const char *cmd, const lp_error *err);

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

/* Number of online CPUs (at least 1). */
int lp_cpu_count(void);

/* Folder of the shipped YAML cards: $LOUPE_CONFIGS if set, else the source tree's configs/. */
const char *lp_configs_dir(void);

#endif
