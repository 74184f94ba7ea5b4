/* TEMPORARY placeholder until this command lands; replaced by its module's real implementation. */
#include <stdio.h>

#include "core/cli.h"

static int run_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "loupe bench: not built yet\n");
    return LP_EXIT_USAGE;
}

const lp_command lp_command_bench = {"bench", "benchmark the GEMM and the prefill", "usage: loupe bench ...\n", run_bench};
