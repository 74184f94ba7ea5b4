/* TEMPORARY placeholder until this command lands; replaced by its module's real implementation. */
#include <stdio.h>

#include "core/cli.h"

static int run_estimate(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "loupe estimate: not built yet\n");
    return LP_EXIT_USAGE;
}

const lp_command lp_command_estimate = {"estimate", "exact parameters, memory, KV cache and FLOPs from a config", "usage: loupe estimate ...\n", run_estimate};
