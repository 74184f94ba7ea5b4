/* TEMPORARY placeholder until this command lands; replaced by its module's real implementation. */
#include <stdio.h>

#include "core/cli.h"

static int run_leak(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "loupe leak: not built yet\n");
    return LP_EXIT_USAGE;
}

const lp_command lp_command_leak = {"leak", "prove that no position sees the future", "usage: loupe leak ...\n", run_leak};
