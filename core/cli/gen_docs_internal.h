/* What the man page and completion generators share: every command's options as one flat list,
 * taken from its option table or, for a command not yet converted, from its usage text. */
#ifndef LP_CORE_CLI_GEN_DOCS_INTERNAL_H
#define LP_CORE_CLI_GEN_DOCS_INTERNAL_H

#include <stdbool.h>
#include <stdio.h>

#include "core/cli/cli.h"
#include "core/cli/gen_docs.h"

#define LP_DOC_MAX_OPTIONS 128 /* per command; more is LP_ERR_RANGE naming the command */

typedef struct lp_doc_option {
    char name[48];     /* without dashes; only [a-z0-9-], so it is safe in generated shell code */
    char metavar[96];  /* "" = a flag */
    char choices[192]; /* the allowed values, space separated ("f16 f32 none"); "" = any */
    char help[100];    /* the help on one line, cut at a word (completions show one line) */
    const char *full_help; /* the whole help (man pages) */
} lp_doc_option;

typedef struct lp_doc_command {
    const lp_cli_spec *spec;
    lp_doc_option options[LP_DOC_MAX_OPTIONS]; /* in the order --help lists them, then --help */
    int n_options;
} lp_doc_command;

/* Fill out from the spec's option table (nested tables included), then --help. */
lp_status lp_doc_collect(const lp_cli_spec *spec, lp_doc_command *out, lp_error *err);

/* The option's value names a file or folder (FILE, DIR, PATH, OUT, DB in its metavar). */
bool lp_doc_value_is_path(const lp_doc_option *opt);
bool lp_doc_value_is_dir(const lp_doc_option *opt);

/* Completion scripts for the whole command table. */
void lp_doc_write_bash(FILE *f, const lp_doc_command *cmds, size_t n_cmds);
void lp_doc_write_zsh(FILE *f, const lp_doc_command *cmds, size_t n_cmds);
void lp_doc_write_fish(FILE *f, const lp_doc_command *cmds, size_t n_cmds);

#endif
