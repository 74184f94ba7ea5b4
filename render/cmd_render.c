/* TEMPORARY placeholder until this command lands; replaced by its module's real implementation. */
#include <stdio.h>

#include "core/cli.h"

static int run_render(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "loupe render: not built yet\n");
    return LP_EXIT_USAGE;
}

const lp_command lp_command_render = {"render", "draw attention heatmaps and head statistics", "usage: loupe render ...\n", run_render};
