/* TEMPORARY placeholder until this command lands; replaced by its module's real implementation. */
#include <stdio.h>

#include "core/cli.h"

static int run_inspect(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "loupe inspect: not built yet\n");
    return LP_EXIT_USAGE;
}

const lp_command lp_command_inspect = {"inspect", "read a model's config and weights: architecture, tensors, checks", "usage: loupe inspect ...\n", run_inspect};
