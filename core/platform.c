/* What loupe asks of the machine it runs on: CPU count, where the shipped model cards are. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "core/platform.h"

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef LP_CONFIGS_FROM_BINDIR /* set by core/CMakeLists.txt from GNUInstallDirs */
#define LP_CONFIGS_FROM_BINDIR "../share/loupe/configs"
#endif
/* Where a build tree (or a folder with the binary at its top) keeps the cards. */
#define CONFIGS_BESIDE_BINARY "share/loupe/configs"

int lp_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static char found_configs[PATH_MAX];
static pthread_once_t found_once = PTHREAD_ONCE_INIT;

/* The folder holding the running binary, resolved; false when /proc/self/exe cannot be read. */
static bool binary_dir(char *out, size_t size)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return false;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return false;
    *slash = '\0';
    int len = snprintf(out, size, "%s", exe[0] ? exe : "/");
    return len > 0 && (size_t)len < size;
}

/* dir/rel resolved into out when it is a folder. */
static bool resolve_folder(const char *dir, const char *rel, char *out)
{
    char path[PATH_MAX];
    int len = snprintf(path, sizeof path, "%s/%s", dir, rel);
    struct stat st;
    if (len <= 0 || (size_t)len >= sizeof path || stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return false;
    return realpath(path, out) != NULL;
}

/* dir/rel with rel's leading "../" folded into dir, for a message about a folder that does not
 * exist (so realpath cannot do it). Cut at size, which only shortens a message. */
static void join_folded(const char *dir, const char *rel, char *out, size_t size)
{
    size_t n = strlen(dir);
    while (strncmp(rel, "../", 3) == 0) { /* the root's parent is the root */
        while (n > 1 && dir[n - 1] != '/')
            n--;
        if (n > 1)
            n--; /* the slash itself, unless it is the root */
        rel += 3;
    }
    if (n >= size)
        n = size - 1;
    memcpy(out, dir, n);
    size_t used = n;
    if (used + 1 < size && (used == 0 || out[used - 1] != '/'))
        out[used++] = '/';
    size_t rest = strlen(rel);
    if (rest > size - 1 - used)
        rest = size - 1 - used;
    memcpy(out + used, rel, rest);
    out[used + rest] = '\0';
}

static void find_configs(void)
{
    char dir[PATH_MAX];
    if (!binary_dir(dir, sizeof dir)) {
        snprintf(found_configs, sizeof found_configs, "configs");
        return;
    }
    if (resolve_folder(dir, LP_CONFIGS_FROM_BINDIR, found_configs) ||
        resolve_folder(dir, CONFIGS_BESIDE_BINARY, found_configs))
        return;
    join_folded(dir, LP_CONFIGS_FROM_BINDIR, found_configs, sizeof found_configs);
}

const char *lp_configs_dir(void)
{
    const char *env = getenv("LOUPE_CONFIGS");
    if (env && *env)
        return env;
    pthread_once(&found_once, find_configs);
    return found_configs;
}
