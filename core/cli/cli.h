/* The command table and the declarative option parser every subcommand uses.
 *
 * A subcommand lives in its module (inspect/cmd_inspect.c, ...) and exports one lp_command whose
 * spec is static data: the options are a table (name, kind, where the value goes, help), parsed
 * by one function, and `--help`, `loupe help NAME` and (later) man pages and completions are
 * generated from the same table, so the usage text cannot drift from the parser.
 *
 *   typedef struct inspect_opts { bool stats, json; } inspect_opts;
 *   static const lp_option inspect_options[] = {
 *       LP_OPT_FLAG_OF(inspect_opts, stats, "stats", "per-tensor min, max, mean, ... (reads all)"),
 *       LP_OPT_FLAG_OF(inspect_opts, json, "json", "one JSON document"),
 *   };
 *   static const lp_cli_spec inspect_spec = {
 *       .name = "inspect", .summary = "read a model's config and weights",
 *       .synopsis = "PATH [options]", .options = inspect_options,
 *       .n_options = sizeof inspect_options / sizeof inspect_options[0],
 *       .min_positional = 1, .max_positional = 1,
 *   };
 *   static int run(int argc, char **argv) {
 *       inspect_opts o = {0};                       // defaults first
 *       const char *pos[LP_CLI_MAX_POSITIONAL]; int n_pos;
 *       int rc = lp_cli_parse(&inspect_spec, argc, argv, &o, pos, &n_pos);
 *       if (rc != LP_CLI_PARSED) return rc;         // usage error printed, exit status returned
 *       ...
 *   }
 *   const lp_command lp_command_inspect = {&inspect_spec, run};
 *
 * A table ends where its array ends (LP_CLI_COMMAND and LP_OPT_TABLE_OF take the length from
 * the array, so there is no end row to forget), or earlier at a row LP_OPT_END_OF_TABLE: a table
 * of no options is that one row, and a spec built by hand without n_options must end with it.
 *
 * main() dispatches on argv[1]; run() gets argv with argv[0] = the command name and returns the
 * process exit status: 0 ok, 1 a check failed, 2 bad usage or input. Only commands print; the
 * libraries below them return lp_status and lp_error.
 */
#ifndef LP_CORE_CLI_H
#define LP_CORE_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "core/platform.h"
#include "core/text.h"
#include "core/version.h"

enum { LP_EXIT_OK = 0, LP_EXIT_CHECK_FAILED = 1, LP_EXIT_USAGE = 2 };

/* ---------------------------------------------------------------------------------------------
 * Option tables.
 */

typedef enum lp_opt_kind {
    LP_OPT_END,    /* ends a table early (see the top of this file) */
    LP_OPT_FLAG,   /* bool: set to true; takes no value */
    LP_OPT_STRING, /* const char *: borrowed from argv */
    LP_OPT_INT,    /* int64_t: a whole number in [min, max] */
    LP_OPT_NUMBER, /* double: a finite number in [min, max] */
    LP_OPT_SIZE,   /* uint64_t bytes: "24GiB", "16GB", "4096" */
    LP_OPT_COUNT,  /* int64_t with k/M/Ki suffixes ("8k" = 8000) in [min, max] */
    LP_OPT_ENUM,   /* int: index of the value in choices */
    LP_OPT_TABLE,  /* the options of another table (a shared group, e.g. the prompt input) */
    LP_OPT_KIND_COUNT
} lp_opt_kind;

typedef struct lp_option {
    lp_opt_kind kind;
    const char *name;    /* without dashes: "threads" is --threads */
    size_t offset;       /* where the value goes in the command's options struct */
    const char *metavar; /* "N", "FILE"; ENUM shows its choices instead */
    const char *help;    /* says the default; may hold '\n' for more lines */
    double min, max;     /* INT, NUMBER, COUNT: allowed range when min < max */
    const char *const *choices;    /* ENUM: NULL-terminated */
    const struct lp_option *table; /* TABLE: included options (their offsets are its own) */
    size_t n_table;                /* TABLE: its rows */
} lp_option;

#define LP_OPT_END_OF_TABLE {LP_OPT_END, NULL, 0, NULL, NULL, 0, 0, NULL, NULL, 0}
#define LP_OPT_FLAG_OF(type, field, name, help) \
    {LP_OPT_FLAG, name, offsetof(type, field), NULL, help, 0, 0, NULL, NULL, 0}
#define LP_OPT_STRING_OF(type, field, name, metavar, help) \
    {LP_OPT_STRING, name, offsetof(type, field), metavar, help, 0, 0, NULL, NULL, 0}
#define LP_OPT_INT_OF(type, field, name, metavar, lo, hi, help) \
    {LP_OPT_INT, name, offsetof(type, field), metavar, help, lo, hi, NULL, NULL, 0}
#define LP_OPT_NUMBER_OF(type, field, name, metavar, lo, hi, help) \
    {LP_OPT_NUMBER, name, offsetof(type, field), metavar, help, lo, hi, NULL, NULL, 0}
#define LP_OPT_SIZE_OF(type, field, name, metavar, help) \
    {LP_OPT_SIZE, name, offsetof(type, field), metavar, help, 0, 0, NULL, NULL, 0}
#define LP_OPT_COUNT_OF(type, field, name, metavar, lo, hi, help) \
    {LP_OPT_COUNT, name, offsetof(type, field), metavar, help, lo, hi, NULL, NULL, 0}
#define LP_OPT_ENUM_OF(type, field, name, choices, help) \
    {LP_OPT_ENUM, name, offsetof(type, field), NULL, help, 0, 0, choices, NULL, 0}
/* Include `table` (an array whose length is visible here), whose offsets are relative to `field`
 * of type. */
#define LP_OPT_TABLE_OF(type, field, table) \
    {LP_OPT_TABLE, NULL, offsetof(type, field), NULL, NULL, 0, 0, NULL, table, LP_CLI_LEN(table)}

#define LP_CLI_LEN(array) (sizeof(array) / sizeof((array)[0]))

/* The rows of a table of n rows (n = 0: unbounded) before its first LP_OPT_END row. */
static inline size_t lp_cli_table_rows(const lp_option *table, size_t n)
{
    size_t rows = 0;
    while (table && (n == 0 || rows < n) && table[rows].kind != LP_OPT_END)
        rows++;
    return rows;
}

/* Rows several commands share word for word, written once so their help cannot drift apart. */
#define LP_OPT_RUN_DB_OF(type, field) \
    LP_OPT_STRING_OF(type, field, "db", "FILE", \
                     "database, created if missing, runs appended (default loupe.db)")
#define LP_OPT_JSON_OF(type, field) LP_OPT_FLAG_OF(type, field, "json", "one JSON document on stdout")
/* --threads takes 1..LP_CLI_MAX_THREADS in every command (the worker pool itself takes more). */
#define LP_CLI_MAX_THREADS 256
#define LP_OPT_THREADS_OF(type, field) \
    LP_OPT_INT_OF(type, field, "threads", "N", 1, LP_CLI_MAX_THREADS, \
                  "worker threads (default: all CPUs)")

#define LP_CLI_MAX_POSITIONAL 16

/* A single-dash spelling of a long option: {"o", "output"} makes "-o FILE" mean "--output FILE". */
typedef struct lp_cli_alias {
    const char *alias; /* without the dash */
    const char *name;  /* the long option's name */
} lp_cli_alias;

typedef struct lp_cli_spec {
    const char *name;        /* "trace" */
    const char *summary;     /* one line for `loupe --help` */
    const char *synopsis;    /* after "usage: loupe NAME ": "MODEL [options]" */
    const char *description; /* paragraphs between the usage line and the options */
    const lp_option *options;
    size_t n_options; /* rows of options; 0 = up to its LP_OPT_END row */
    int min_positional, max_positional;
    const char *notes; /* after the options: examples, exit status */
    const lp_cli_alias *aliases; /* ends with {NULL, NULL}; NULL = none */
} lp_cli_spec;

typedef struct lp_command {
    const lp_cli_spec *spec;
    int (*run)(int argc, char **argv);
} lp_command;

/* One command's spec and its lp_command, so a cmd_*.c states only what is its own:
 *
 *   LP_CLI_COMMAND(inspect, run_inspect, inspect_options, 1, 1,
 *                  "read a model's config and weights", "PATH [--stats] [--json]",
 *                  .description = "...", .notes = "...");
 *
 * defines `static const lp_cli_spec inspect_spec` (name "inspect", the option table and its
 * length, the range of positional arguments, summary, synopsis, then any further designated
 * fields) and
 * `const lp_command lp_command_inspect`. run_fn is declared static here, so it is defined below
 * and parses with &inspect_spec. */
#define LP_CLI_COMMAND(cmd, run_fn, options_, min_pos, max_pos, summary_, synopsis_, ...)        \
    static int run_fn(int argc, char **argv);                                                    \
    static const lp_cli_spec cmd##_spec = {.name = #cmd, .summary = summary_,                     \
                                           .synopsis = synopsis_, .options = options_,           \
                                           .n_options = LP_CLI_LEN(options_),                    \
                                           .min_positional = min_pos, .max_positional = max_pos, \
                                           __VA_ARGS__};                                         \
    const lp_command lp_command_##cmd = {&cmd##_spec, run_fn}

/* Parse into opts and the positional arguments, or return the exit status from the calling run
 * function (the usage error is printed already). */
#define LP_CLI_PARSE_OR_RETURN(spec, argc, argv, opts, positional, n_positional)                  \
    do {                                                                                          \
        int lp_cli_rc_ = lp_cli_parse(spec, argc, argv, opts, positional, n_positional);          \
        if (lp_cli_rc_ != LP_CLI_PARSED)                                                          \
            return lp_cli_rc_;                                                                    \
    } while (0)

/* Returned by lp_cli_parse when everything parsed; any other value is the exit status to return
 * (the one-line message was printed on stderr). */
#define LP_CLI_PARSED (-1)

/* Parse argv[1..argc-1] (argv[0] is the command name) into opts (the struct the table's offsets
 * point into; fill its defaults before) and the positional arguments (at most
 * LP_CLI_MAX_POSITIONAL). Options take "--name VALUE" or "--name=VALUE"; "--" ends them; the last
 * of a repeated option wins. Errors name the option, the value and what was allowed. */
int lp_cli_parse(const lp_cli_spec *spec, int argc, char **argv, void *opts,
                 const char **positional, int *n_positional);

/* The full help text: usage line, description, options with their help, notes. */
void lp_cli_print_help(const lp_cli_spec *spec, FILE *out);

/* The table of subcommands (core/cli/main.c), for help, man pages and completions. */
const lp_command *const *lp_cli_commands(size_t *n_commands);

/* Print "loupe CMD: message" on stderr and return LP_EXIT_USAGE. */
int lp_cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Print "loupe CMD: <err->msg>" and return the exit status an error of this kind deserves (2). */
int lp_cli_fail(const char *cmd, const lp_error *err);

struct json_t;
/* A command's --json output: doc on stdout as one document and a newline (flags: jansson's dump
 * flags, JSON_INDENT(2) ...), then released. A NULL doc or a failed dump is out of memory: one line
 * on stderr and LP_EXIT_USAGE; else LP_EXIT_OK. */
int lp_cli_print_json(const char *cmd, struct json_t *doc, size_t flags);

extern const lp_command lp_command_inspect;
extern const lp_command lp_command_tokenize;
extern const lp_command lp_command_estimate;
extern const lp_command lp_command_trace;
extern const lp_command lp_command_leak;
extern const lp_command lp_command_render;
extern const lp_command lp_command_export;
extern const lp_command lp_command_synth;
extern const lp_command lp_command_bench;
extern const lp_command lp_command_demo;
extern const lp_command lp_command_eval;
extern const lp_command lp_command_ablate;
extern const lp_command lp_command_diff;
extern const lp_command lp_command_merge;

#endif
