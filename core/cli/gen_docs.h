/* Man pages and shell completions generated from the command table (core/cli/main.c) and each
 * command's option table, so that they say what `--help` says and cannot drift from the parser.
 *
 *   lp_error err = {0};
 *   if (lp_cli_generate_docs("build/docs", &err) != LP_OK)
 *       fprintf(stderr, "loupe: %s\n", err.msg);
 *   // build/docs/man1/loupe.1, man1/loupe-inspect.1, ..., bash/loupe, zsh/_loupe, fish/loupe.fish
 *
 * The build runs it as `loupe --generate-docs DIR` (core/cli/gen_docs.cmake, which also gzips the
 * pages), a hidden entry of main().
 */
#ifndef LP_CORE_CLI_GEN_DOCS_H
#define LP_CORE_CLI_GEN_DOCS_H

#include "core/error.h"

/* What `loupe --help` and loupe(1) share. */
#define LP_CLI_TAGLINE "look inside transformer language models"
#define LP_CLI_EXIT_STATUS "0 ok, 1 a check failed, 2 bad usage or input"

/* Write the pages and completions into DIR (which must exist; its man1/, bash/, zsh/ and fish/
 * folders are created). LP_ERR_IO names the file; LP_ERR_RANGE an option too long to document. */
lp_status lp_cli_generate_docs(const char *dir, lp_error *err);

#endif
