/* TEMPORARY placeholder until this command lands; replaced by its module's real implementation. */
#include <stdio.h>

#include "core/cli.h"

static int run_tokenize(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "loupe tokenize: not built yet\n");
    return LP_EXIT_USAGE;
}

const lp_command lp_command_tokenize = {"tokenize", "tokenize text with a model's tokenizer", "usage: loupe tokenize ...\n", run_tokenize};
