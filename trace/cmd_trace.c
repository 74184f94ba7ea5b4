/* TEMPORARY placeholder until this command lands; replaced by its module's real implementation. */
#include <stdio.h>

#include "core/cli.h"

static int run_trace(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "loupe trace: not built yet\n");
    return LP_EXIT_USAGE;
}

const lp_command lp_command_trace = {"trace", "run the forward pass and record attention into SQLite", "usage: loupe trace ...\n", run_trace};
