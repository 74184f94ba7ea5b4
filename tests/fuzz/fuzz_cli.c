/* Fuzz entry point for the option parser (lp_cli_parse, core/cli/cli.c): the input is an argv,
 * arguments separated by NUL or newline bytes, parsed against a table with every option kind
 * (flag, string, int and count with ranges, number, size, enum, an included table) and aliases.
 *
 * Beyond "no crash": a parse either succeeds with every value inside its declared range (finite
 * numbers, enum indexes inside the choices, strings pointing into argv, positional count inside
 * [min, max]) or returns the usage exit status 2 with one line on stderr.
 *
 * With LOUPE_FUZZ=ON (clang):  build-fuzz/tests/fuzz/fuzz_cli_libfuzzer -close_fd_mask=2 tests/fuzz/cli
 * Replay (every build):        build/tests/fuzz/fuzz_cli tests/fuzz/cli tests/fuzz/cli/regress
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct group_opts {
    const char *prompt_file;
    int64_t max_tokens;
} group_opts;

typedef struct fuzz_opts {
    bool flag;
    const char *out;
    int64_t threads;
    int64_t seq;
    double temperature;
    uint64_t memory;
    int maps;
    group_opts group;
} fuzz_opts;

static const char *const maps_choices[] = {"none", "f16", "f32", NULL};

static const lp_option group_options[] = {
    LP_OPT_STRING_OF(group_opts, prompt_file, "prompt-file", "FILE", "a file"),
    LP_OPT_COUNT_OF(group_opts, max_tokens, "max-tokens", "N", 1, 1e6, "tokens"),
    LP_OPT_END_OF_TABLE,
};

static const lp_option fuzz_options[] = {
    LP_OPT_FLAG_OF(fuzz_opts, flag, "json", "a flag"),
    LP_OPT_STRING_OF(fuzz_opts, out, "output", "FILE", "a string"),
    LP_OPT_INT_OF(fuzz_opts, threads, "threads", "N", 1, 256, "an int in a range"),
    LP_OPT_COUNT_OF(fuzz_opts, seq, "seq", "N", 1, 1099511627776.0, "a count"),
    LP_OPT_NUMBER_OF(fuzz_opts, temperature, "temperature", "T", 0, 100, "a number"),
    LP_OPT_SIZE_OF(fuzz_opts, memory, "memory", "BYTES", "a size"),
    LP_OPT_ENUM_OF(fuzz_opts, maps, "maps", maps_choices, "an enum"),
    LP_OPT_TABLE_OF(fuzz_opts, group, group_options),
    LP_OPT_END_OF_TABLE,
};

static const lp_cli_alias fuzz_aliases[] = {{"o", "output"}, {"t", "threads"}, {NULL, NULL}};

static const lp_cli_spec fuzz_spec = {
    .name = "fuzz",
    .summary = "the option parser under fuzzing",
    .synopsis = "A [B]",
    .options = fuzz_options,
    .min_positional = 1,
    .max_positional = 2,
    .aliases = fuzz_aliases,
};

#define MAX_ARGS 64

static void require(bool cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_cli: broken invariant: %s\n", what);
        abort();
    }
}

static bool inside(const char *p, const char *buf, size_t size)
{
    return p >= buf && p < buf + size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = "fuzz";
    for (char *p = buf; argc < MAX_ARGS && p <= buf + size;) {
        char *end = p;
        while (end < buf + size && *end != '\0' && *end != '\n')
            end++;
        *end = '\0';
        argv[argc++] = p;
        p = end + 1;
    }
    argv[argc] = NULL;
    fuzz_opts o;
    memset(&o, 0, sizeof o);
    o.threads = 1;
    o.seq = 1;
    o.group.max_tokens = 1;
    const char *pos[LP_CLI_MAX_POSITIONAL];
    int n_pos = -1;
    int rc = lp_cli_parse(&fuzz_spec, argc, argv, &o, pos, &n_pos);
    if (rc != LP_CLI_PARSED) {
        require(rc == LP_EXIT_USAGE, "a refusal is the usage exit status");
    } else {
        require(n_pos >= 1 && n_pos <= 2, "positional count in [min, max]");
        for (int i = 0; i < n_pos; i++)
            require(inside(pos[i], buf, size + 1), "positionals point into argv");
        require(o.threads >= 1 && o.threads <= 256, "--threads in its range");
        require(o.seq >= 1 && o.seq <= 1099511627776LL, "--seq in its range");
        require(isfinite(o.temperature) && o.temperature >= 0 && o.temperature <= 100,
                "--temperature finite and in its range");
        require(o.maps >= 0 && o.maps < 3, "--maps one of its choices");
        require(o.group.max_tokens >= 1 && o.group.max_tokens <= 1000000, "--max-tokens in range");
        require(!o.out || inside(o.out, buf, size + 1), "--output points into argv");
        require(!o.group.prompt_file || inside(o.group.prompt_file, buf, size + 1),
                "--prompt-file points into argv");
    }
    free(buf);
    return 0;
}

#include "fuzz_replay.h"
LP_FUZZ_REPLAY_MAIN("fuzz_cli")
