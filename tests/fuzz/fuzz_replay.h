/* The plain (non-libFuzzer) main of a fuzz target: replays files and folders of files through
 * LLVMFuzzerTestOneInput, each in an exactly sized heap copy so that ASan/UBSan builds catch a
 * read one byte past the end.
 *
 *   #include "fuzz_replay.h"          // after defining LLVMFuzzerTestOneInput
 *   LP_FUZZ_REPLAY_MAIN("fuzz_npy")   // expands to main() unless LP_FUZZ_LIBFUZZER is defined
 *
 *   fuzz_npy tests/fuzz/npy ../shared/models/stories260K/reference/cat_mat/tokens.npy
 *
 * A target with a main of its own (a --mutate mode, a summary line) includes this too and calls
 * lp_fuzz_replay() and lp_fuzz_read_file() from it.
 *
 * Folders are read one level deep (a corpus folder and its regress/ subfolder are two
 * arguments). Exit status 0 when at least one input ran, 2 when an argument cannot be read or
 * nothing was given; a crash is the sanitizer's or the target's abort().
 */
#ifndef LP_TESTS_FUZZ_REPLAY_H
#define LP_TESTS_FUZZ_REPLAY_H

#ifndef LP_FUZZ_LIBFUZZER
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The whole of a file in an exactly sized heap copy (1 byte for an empty file, so never NULL on
 * success), which the caller frees; NULL after a message on stderr. Reads at most 64 MiB: corpus
 * files are small, and a seed that large is a mistake. Also for targets with a main of their own
 * (a --mutate mode) that read seeds. */
static inline uint8_t *lp_fuzz_read_file(const char *prog, const char *path, size_t *size_out)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: %s: cannot open\n", prog, path);
        return NULL;
    }
    size_t cap = 1 << 16, size = 0, got;
    uint8_t *buf = malloc(cap);
    while (buf && (got = fread(buf + size, 1, cap - size, f)) > 0) {
        size += got;
        if (size == cap) {
            if (cap >= ((size_t)64 << 20)) {
                fprintf(stderr, "%s: %s: larger than 64 MiB, not a corpus file\n", prog, path);
                free(buf);
                fclose(f);
                return NULL;
            }
            uint8_t *grown = realloc(buf, cap * 2);
            if (!grown) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
            cap *= 2;
        }
    }
    fclose(f);
    uint8_t *exact = buf ? malloc(size ? size : 1) : NULL;
    if (!exact) {
        free(buf);
        fprintf(stderr, "%s: %s: out of memory\n", prog, path);
        return NULL;
    }
    memcpy(exact, buf, size);
    free(buf);
    *size_out = size;
    return exact;
}

static inline int lp_fuzz_replay_file(const char *prog, const char *path, long *n_run)
{
    size_t size;
    uint8_t *data = lp_fuzz_read_file(prog, path, &size);
    if (!data)
        return 2;
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    (*n_run)++;
    return 0;
}

static inline int lp_fuzz_replay(const char *prog, int argc, char **argv)
{
    long n_run = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "%s: %s: not found\n", prog, argv[i]);
            return 2;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (lp_fuzz_replay_file(prog, argv[i], &n_run))
                return 2;
            continue;
        }
        DIR *dir = opendir(argv[i]);
        if (!dir) {
            fprintf(stderr, "%s: %s: cannot open folder\n", prog, argv[i]);
            return 2;
        }
        struct dirent *e;
        while ((e = readdir(dir)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            size_t n = strlen(argv[i]) + strlen(e->d_name) + 2;
            char *path = malloc(n);
            if (!path) {
                closedir(dir);
                return 2;
            }
            snprintf(path, n, "%s/%s", argv[i], e->d_name);
            int rc = 0;
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
                rc = lp_fuzz_replay_file(prog, path, &n_run);
            free(path);
            if (rc) {
                closedir(dir);
                return 2;
            }
        }
        closedir(dir);
    }
    printf("%s: replayed %ld inputs, no crash\n", prog, n_run);
    return n_run > 0 ? 0 : 2;
}

/* A fixed xorshift64 sequence for --mutate modes: the same inputs on every run and machine. */
static uint64_t lp_fuzz_rand_state = 0x9e3779b97f4a7c15ull;

static inline uint64_t lp_fuzz_rand(void)
{
    lp_fuzz_rand_state ^= lp_fuzz_rand_state << 13;
    lp_fuzz_rand_state ^= lp_fuzz_rand_state >> 7;
    lp_fuzz_rand_state ^= lp_fuzz_rand_state << 17;
    return lp_fuzz_rand_state;
}

#define LP_FUZZ_REPLAY_MAIN(prog)                                                             \
    int main(int argc, char **argv) { return lp_fuzz_replay(prog, argc, argv); }
#else
#define LP_FUZZ_REPLAY_MAIN(prog)
#endif

#endif
