/* What loupe asks of the machine it runs on: CPU count, where the shipped model cards are. */
#define _POSIX_C_SOURCE 200809L
#include "core/platform.h"

#include <stdlib.h>
#include <unistd.h>

int lp_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

const char *lp_configs_dir(void)
{
    const char *env = getenv("LOUPE_CONFIGS");
    if (env && *env)
        return env;
#ifdef LP_SOURCE_CONFIGS_DIR
    return LP_SOURCE_CONFIGS_DIR;
#else
    return "configs";
#endif
}
