/* loupe's entry point: the table of subcommands and the top-level flags. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "core/cli/cli.h"
#include "core/cli/gen_docs.h"

static const lp_command *const commands[] = {
    &lp_command_inspect, &lp_command_estimate, &lp_command_tokenize, &lp_command_trace,
    &lp_command_leak,    &lp_command_render,   &lp_command_synth,    &lp_command_demo,
    &lp_command_bench,   &lp_command_export,   &lp_command_merge,
    &lp_command_eval,    &lp_command_ablate,   &lp_command_diff,
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

const lp_command *const *lp_cli_commands(size_t *n_commands)
{
    *n_commands = N_COMMANDS;
    return commands;
}

static const lp_command *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i]->spec->name, name) == 0)
            return commands[i];
    return NULL;
}

static void print_help(FILE *out)
{
    fprintf(out, "loupe %s: " LP_CLI_TAGLINE "\n\n"
                 "usage: loupe COMMAND [ARGS...]\n"
                 "       loupe help COMMAND | loupe --help | loupe --version\n\ncommands:\n",
            LP_VERSION);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i]->spec->name, commands[i]->spec->summary);
    fprintf(out, "\nexit status: " LP_CLI_EXIT_STATUS "\n");
}

static int generate_docs(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "loupe: usage: loupe --generate-docs DIR\n");
        return LP_EXIT_USAGE;
    }
    lp_error err = {0};
    if (lp_cli_generate_docs(argv[2], &err) != LP_OK) {
        fprintf(stderr, "loupe: %s\n", err.msg);
        return LP_EXIT_USAGE;
    }
    return LP_EXIT_OK;
}

int main(int argc, char **argv)
{
#ifdef SIGXFSZ
    /* A file-size limit (ulimit -f) must turn into a failed write, which the store reports in one
     * line and marks the run failed, not into a signal that kills loupe mid-transaction. */
    signal(SIGXFSZ, SIG_IGN);
#endif
    if (argc < 2) {
        print_help(stderr);
        return LP_EXIT_USAGE;
    }
    const char *first = argv[1];
    if (strcmp(first, "--help") == 0 || strcmp(first, "-h") == 0) {
        print_help(stdout);
        return LP_EXIT_OK;
    }
    if (strcmp(first, "--version") == 0 || strcmp(first, "version") == 0) {
        printf("loupe %s (git %s)\n", lp_version(), lp_version_revision());
        return LP_EXIT_OK;
    }
    if (strcmp(first, "--generate-docs") == 0) /* hidden: the build's man pages and completions */
        return generate_docs(argc, argv);
    if (strcmp(first, "help") == 0) {
        if (argc < 3) {
            print_help(stdout);
            return LP_EXIT_OK;
        }
        const lp_command *cmd = find_command(argv[2]);
        if (!cmd) {
            fprintf(stderr, "loupe: unknown command '%s' (see loupe --help)\n", argv[2]);
            return LP_EXIT_USAGE;
        }
        lp_cli_print_help(cmd->spec, stdout);
        return LP_EXIT_OK;
    }
    if (first[0] == '-') {
        fprintf(stderr, "loupe: unknown option '%s' (see loupe --help)\n", first);
        return LP_EXIT_USAGE;
    }
    const lp_command *cmd = find_command(first);
    if (!cmd) {
        fprintf(stderr, "loupe: unknown command '%s' (see loupe --help)\n", first);
        return LP_EXIT_USAGE;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            lp_cli_print_help(cmd->spec, stdout);
            return LP_EXIT_OK;
        }
    }
    return cmd->run(argc - 1, argv + 1);
}
