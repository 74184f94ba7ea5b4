/* `loupe demo`: the whole tour on a model loupe writes itself, so it runs offline on a fresh
 * machine: estimate a shipped card, synthesize a model with planted heads, inspect it, trace it,
 * check it for leaks and render every picture. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/cli/cli.h"
#include "trace/synth/synth.h"

typedef struct demo_opts {
    const char *card;
    int64_t threads; /* 0 = trace's default (every CPU) */
} demo_opts;

static const lp_option demo_options[] = {
    LP_OPT_STRING_OF(demo_opts, card, "card", "NAME",
                     "the shipped card step 1 estimates (default llama-3-8b)"),
    /* trace's own range for --threads, checked here so a bad value stops the tour at once */
    LP_OPT_INT_OF(demo_opts, threads, "threads", "N", 1, LP_CLI_MAX_THREADS,
                  "worker threads of the trace step (default: all CPUs)"),
};

LP_CLI_COMMAND(demo, demo_main, demo_options, 0, 1,
               "the whole tour on a synthetic model, no download needed",
               "[OUT_DIR] [--card NAME] [--threads N]",
    .description =
        "Runs the main job end to end without any download and writes everything into OUT_DIR\n"
        "(default: demo-out):\n"
        "  1. loupe estimate NAME            (a shipped card, default llama-3-8b)\n"
        "  2. loupe synth OUT_DIR/model --check  (a small Llama-style model with planted heads)\n"
        "  3. loupe inspect OUT_DIR/model\n"
        "  4. loupe trace OUT_DIR/model --prompt TEXT --db OUT_DIR/trace.db\n"
        "  5. loupe leak OUT_DIR/model --db OUT_DIR/trace.db\n"
        "  6. loupe ablate OUT_DIR/model --prompt TEXT --db OUT_DIR/trace.db  (which heads matter)\n"
        "  7. loupe render OUT_DIR/trace.db --all OUT_DIR/pictures\n"
        "and names the gallery (OUT_DIR/pictures/index.html) at the end.",);

static bool demo_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* One step of the tour: a command and its argv, run as if typed. */
typedef struct demo_step {
    const lp_command *cmd;
    int argc;
    char *argv[10];
} demo_step;

static int run_step(demo_step *step)
{
    printf("\n$ loupe");
    for (int i = 0; i < step->argc; i++)
        printf(strchr(step->argv[i], ' ') ? " \"%s\"" : " %s", step->argv[i]);
    printf("\n");
    fflush(stdout);
    int status = step->cmd->run(step->argc, step->argv);
    fflush(stdout);
    fflush(stderr);
    return status;
}

/* The folder's paths: the model, the trace database, the pictures. */
typedef struct demo_paths {
    char model[4096], db[4096], pictures[4096], threads[24];
} demo_paths;

static int run_tour(const demo_opts *o, demo_paths *p)
{
    /* A repeated sentence, so the induction head has something to find. */
    char *prompt = (char *)LP_SYNTH_DEMO_PROMPT;
    char *card = (char *)o->card;
    /* --check runs the model once and shows each planted head tops its statistic. */
    demo_step steps[] = {
        {&lp_command_estimate, 10, {"estimate", card, "--batch", "8", "--seq", "8192",
                                    "--weight-dtype", "bf16", "--kv-dtype", "fp8"}},
        {&lp_command_synth, 3, {"synth", p->model, "--check"}},
        {&lp_command_inspect, 2, {"inspect", p->model}},
        {&lp_command_trace, o->threads > 0 ? 8 : 6,
         {"trace", p->model, "--prompt", prompt, "--db", p->db, "--threads", p->threads}},
        {&lp_command_leak, 6, {"leak", p->model, "--prompt", prompt, "--db", p->db}},
        {&lp_command_ablate, 6, {"ablate", p->model, "--prompt", prompt, "--db", p->db}},
        {&lp_command_render, 4, {"render", p->db, "--all", p->pictures}},
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        int status = run_step(&steps[i]);
        if (status != 0)
            return status;
    }
    return LP_EXIT_OK;
}

static int demo_main(int argc, char **argv)
{
    demo_opts o = {"llama-3-8b", 0};
    const char *pos[LP_CLI_MAX_POSITIONAL];
    int n_pos = 0;
    LP_CLI_PARSE_OR_RETURN(&demo_spec, argc, argv, &o, pos, &n_pos);
    const char *out_dir = n_pos > 0 ? pos[0] : "demo-out";
    if (mkdir(out_dir, 0755) != 0 && !demo_is_dir(out_dir))
        return lp_cli_usage_error("demo", "%s: cannot create the output folder", out_dir);
    demo_paths p;
    snprintf(p.model, sizeof p.model, "%s/model", out_dir);
    snprintf(p.db, sizeof p.db, "%s/trace.db", out_dir);
    snprintf(p.pictures, sizeof p.pictures, "%s/pictures", out_dir);
    snprintf(p.threads, sizeof p.threads, "%lld", (long long)o.threads);
    remove(p.db); /* each demo starts a fresh database */
    int status = run_tour(&o, &p);
    if (status != 0)
        return status;
    printf("\ndemo complete: open %s/index.html (trace database: %s)\n", p.pictures, p.db);
    return LP_EXIT_OK;
}
