/* TEMPORARY placeholder until this command lands; replaced by its module's real implementation. */
#include <stdio.h>

#include "core/cli.h"

static int run_synth(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "loupe synth: not built yet\n");
    return LP_EXIT_USAGE;
}

const lp_command lp_command_synth = {"synth", "write a small model with planted attention heads", "usage: loupe synth ...\n", run_synth};
