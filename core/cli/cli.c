/* Argument helpers shared by the subcommands. */
#define _POSIX_C_SOURCE 200809L
#include "core/cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int lp_cli_option(const char *cmd, int argc, char **argv, int *i, const char *name,
                  const char **value)
{
    const char *arg = argv[*i];
    size_t len = strlen(name);
    if (strncmp(arg, name, len) != 0)
        return 0;
    if (arg[len] == '=') {
        *value = arg + len + 1;
        return 1;
    }
    if (arg[len] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "loupe %s: option %s needs a value\n", cmd, name);
        return -1;
    }
    *i += 1;
    *value = argv[*i];
    return 1;
}

bool lp_cli_flag(const char *arg, const char *name) { return strcmp(arg, name) == 0; }

int lp_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "loupe %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return LP_EXIT_USAGE;
}

int lp_cli_fail(const char *cmd, const lp_error *err)
{
    fprintf(stderr, "loupe %s: %s\n", cmd, err && err->msg[0] ? err->msg : "failed");
    return LP_EXIT_USAGE;
}
