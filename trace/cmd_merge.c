/* `loupe merge OUT.db IN.db...`: combine trace databases (shards of one --prompts file, or any
 * runs) into a new one: runs renumbered, datasets merged, aggregates recomputed. */
#include <stdio.h>

#include "core/cli/cli.h"
#include "trace/store/store.h"

#define CMD "merge"

typedef struct merge_opts {
    int unused;
} merge_opts;

static const lp_option merge_options[] = {
    LP_OPT_END_OF_TABLE,
};

LP_CLI_COMMAND(merge, run_merge, merge_options, 2, LP_CLI_MAX_POSITIONAL,
               "combine trace databases (shards) into one",
               "OUT.db IN.db...",
    .description =
        "Copy every run of each IN.db, in the order given, into OUT.db (a new file, or one\n"
        "without runs): run ids renumbered after the runs already copied, every row that names\n"
        "a run with it, datasets merged by name, dataset_stats recomputed over all their runs.\n"
        "Every IN.db must have this loupe's schema version (run loupe trace on an older one\n"
        "once to migrate it); nothing is written when one does not.",
    .notes = "Prints how many runs were merged. Exit status: 0 ok, 2 bad usage or input.");

static int run_merge(int argc, char **argv)
{
    merge_opts o = {0};
    const char *pos[LP_CLI_MAX_POSITIONAL];
    int n_pos = 0;
    LP_CLI_PARSE_OR_RETURN(&merge_spec, argc, argv, &o, pos, &n_pos);
    lp_error err = {0};
    int64_t n_runs = 0;
    if (lp_store_merge(pos[0], pos + 1, n_pos - 1, &n_runs, &err) != LP_OK)
        return lp_cli_fail(CMD, &err);
    printf("merged %lld run%s from %d database%s into %s\n", (long long)n_runs,
           n_runs == 1 ? "" : "s", n_pos - 1, n_pos == 2 ? "" : "s", pos[0]);
    return LP_EXIT_OK;
}
