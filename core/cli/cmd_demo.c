/* `loupe demo`: the whole tour on a model loupe writes itself, so it runs offline on a fresh
 * machine: estimate a shipped card, synthesize a model with planted heads, inspect it, trace it,
 * check it for leaks and render every picture. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/cli/cli.h"

#define DEMO_USAGE                                                                               \
    "usage: loupe demo [OUT_DIR] [--card NAME] [--threads N]\n"                                  \
    "\n"                                                                                         \
    "Runs the main job end to end without any download and writes everything into OUT_DIR\n"    \
    "(default: demo-out):\n"                                                                     \
    "  1. loupe estimate NAME            (a shipped card, default llama-3-8b)\n"               \
    "  2. loupe synth OUT_DIR/model --check  (a small Llama-style model with planted heads)\n"      \
    "  3. loupe inspect OUT_DIR/model\n"                                                         \
    "  4. loupe trace OUT_DIR/model --prompt TEXT --db OUT_DIR/trace.db\n"                      \
    "  5. loupe leak OUT_DIR/model --db OUT_DIR/trace.db\n"                                     \
    "  6. loupe render OUT_DIR/trace.db --all OUT_DIR/pictures\n"                               \
    "and names the gallery (OUT_DIR/pictures/index.html) at the end.\n"

/* A repeated sentence, so the induction head has something to find. */
static const char demo_prompt[] = "the cat sat on the mat and the dog ran to the park . "
                                  "the cat sat on the mat and the dog ran to the park .";

static bool demo_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int run_step(const lp_command *cmd, int argc, char **argv)
{
    printf("\n$ loupe");
    for (int i = 0; i < argc; i++)
        printf(strchr(argv[i], ' ') ? " \"%s\"" : " %s", argv[i]);
    printf("\n");
    fflush(stdout);
    int status = cmd->run(argc, argv);
    fflush(stdout);
    fflush(stderr);
    return status;
}

static int demo_main(int argc, char **argv)
{
    const char *out_dir = "demo-out";
    const char *card = "llama-3-8b";
    const char *threads = NULL;
    bool have_dir = false;
    for (int i = 1; i < argc; i++) {
        const char *value;
        int r;
        if ((r = lp_cli_option("demo", argc, argv, &i, "--card", &value)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            card = value;
        } else if ((r = lp_cli_option("demo", argc, argv, &i, "--threads", &value)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            threads = value;
        } else if (argv[i][0] == '-') {
            return lp_cli_usage_error("demo", "unknown option '%s'", argv[i]);
        } else if (!have_dir) {
            out_dir = argv[i];
            have_dir = true;
        } else {
            return lp_cli_usage_error("demo", "unexpected argument '%s'", argv[i]);
        }
    }
    if (mkdir(out_dir, 0755) != 0 && !demo_is_dir(out_dir))
        return lp_cli_usage_error("demo", "%s: cannot create the output folder", out_dir);

    char model_dir[4096], db_path[4096], pictures[4096];
    snprintf(model_dir, sizeof model_dir, "%s/model", out_dir);
    snprintf(db_path, sizeof db_path, "%s/trace.db", out_dir);
    snprintf(pictures, sizeof pictures, "%s/pictures", out_dir);
    remove(db_path); /* each demo starts a fresh database */

    char *estimate_argv[] = {"estimate", (char *)card, "--batch", "8", "--seq", "8192",
                             "--weight-dtype", "bf16", "--kv-dtype", "fp8"};
    int status = run_step(&lp_command_estimate, 10, estimate_argv);
    if (status != 0)
        return status;

    /* --check runs the model once and shows each planted head tops its statistic. */
    char *synth_argv[] = {"synth", model_dir, "--check"};
    if ((status = run_step(&lp_command_synth, 3, synth_argv)) != 0)
        return status;

    char *inspect_argv[] = {"inspect", model_dir};
    if ((status = run_step(&lp_command_inspect, 2, inspect_argv)) != 0)
        return status;

    char *trace_argv[] = {"trace", model_dir, "--prompt", (char *)demo_prompt, "--db", db_path,
                          "--threads", (char *)(threads ? threads : "0")};
    if ((status = run_step(&lp_command_trace, threads ? 8 : 6, trace_argv)) != 0)
        return status;

    char *leak_argv[] = {"leak", model_dir, "--prompt", (char *)demo_prompt, "--db", db_path};
    if ((status = run_step(&lp_command_leak, 6, leak_argv)) != 0)
        return status;

    char *render_argv[] = {"render", db_path, "--all", pictures};
    if ((status = run_step(&lp_command_render, 4, render_argv)) != 0)
        return status;

    printf("\ndemo complete: open %s/index.html (trace database: %s)\n", pictures, db_path);
    return LP_EXIT_OK;
}

static const lp_cli_spec demo_spec = {
    .name = "demo",
    .summary = "the whole tour on a synthetic model, no download needed",
    .legacy_usage = DEMO_USAGE,
};

const lp_command lp_command_demo = {&demo_spec, demo_main};
