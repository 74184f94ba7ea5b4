/* TEMPORARY placeholder until this command lands; replaced by its module's real implementation. */
#include <stdio.h>

#include "core/cli.h"

static int run_demo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "loupe demo: not built yet\n");
    return LP_EXIT_USAGE;
}

const lp_command lp_command_demo = {"demo", "the whole tour on a synthetic model, no download needed", "usage: loupe demo ...\n", run_demo};
