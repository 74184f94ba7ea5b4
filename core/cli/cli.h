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
#include "core/platform.h"
#include "core/text.h"
#include "core/version.h"

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

#endif
