/* Fuzz entry point for the sharded-safetensors index (model.safetensors.index.json): the input is
 * the index, in a scratch folder ($LOUPE_TEST_TMP or /tmp, fuzz_st_index.XXXXXX/, removed at exit)
 * that also holds two valid shards, a.safetensors ("x" F32 [2, 2], "y" F16 [3]) and
 * b.safetensors ("z" BF16 [2]), and a config.json-free folder otherwise.
 *
 * Beyond "no crash": every failure explains itself; whatever opens holds at most the shards' three
 * tensors from at most two files, each view inside its file; --stats (lp_inspect_report with
 * stats) runs on it. Shard names leaving the folder ("../x", "/etc/passwd") must be refused.
 *
 * With LOUPE_FUZZ=ON (clang):  build-fuzz/tests/fuzz_st_index_libfuzzer -max_len=4096 tests/fuzz/st_index
 * Replay (every build):        build/tests/fuzz_st_index tests/fuzz/st_index tests/fuzz/st_index/regress
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "inspect/inspect.h"
#include "inspect/weights/report_internal.h"
#include "inspect/weights/weights_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char scratch_dir[4096];
static char index_path[4096 + 64];

static void scratch_file(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", scratch_dir, name);
}

static void remove_scratch(void)
{
    static const char *const names[] = {"a.safetensors", "b.safetensors",
                                        "model.safetensors.index.json"};
    char path[4096 + 64];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        scratch_file(path, sizeof path, names[i]);
        unlink(path);
    }
    rmdir(scratch_dir);
}

static void write_or_die(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || (size > 0 && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror("fuzz_st_index: writing a scratch file");
        abort(); /* the harness cannot run, not a finding */
    }
}

static void write_shard(const char *name, const char *header, size_t n_data)
{
    uint8_t buf[512];
    uint64_t n = strlen(header);
    memcpy(buf, &n, 8);
    memcpy(buf + 8, header, (size_t)n);
    for (size_t i = 0; i < n_data; i++)
        buf[8 + n + i] = (uint8_t)(0x3c + i % 3); /* finite f16/bf16/f32 bit patterns */
    char path[4096 + 64];
    scratch_file(path, sizeof path, name);
    write_or_die(path, buf, 8 + (size_t)n + n_data);
}

static void setup(void)
{
    if (index_path[0])
        return;
    const char *tmp = getenv("LOUPE_TEST_TMP");
    snprintf(scratch_dir, sizeof scratch_dir, "%s/fuzz_st_index.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(scratch_dir) == NULL) {
        perror("fuzz_st_index: scratch folder");
        abort();
    }
    atexit(remove_scratch);
    write_shard("a.safetensors",
                "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                "\"y\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]}}",
                22);
    write_shard("b.safetensors", "{\"z\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4);
    scratch_file(index_path, sizeof index_path, "model.safetensors.index.json");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    write_or_die(index_path, data, size);
    lp_weights *w = NULL;
    lp_error err = {0};
    if (lp_weights_open(index_path, &w, &err) != LP_OK) {
        if (!err.msg[0])
            abort(); /* every failure explains itself */
        return 0;
    }
    if (lp_weights_count(w) > 3 || lp_weights_file_count(w) > 2)
        abort(); /* only the two shards' three tensors exist */
    for (size_t t = 0; t < lp_weights_count(w); t++) {
        const lp_tensor *tensor = lp_weights_tensor(w, t);
        if (tensor->file_offset + tensor->n_bytes > 8 + 512)
            abort();
    }
    json_t *report = NULL;
    if (lp_inspect_report(w, true, &report, &err) == LP_OK)
        json_decref(report);
    else if (!err.msg[0])
        abort();
    lp_weights_close(w);
    return 0;
}

#include "fuzz_replay.h"
LP_FUZZ_REPLAY_MAIN("fuzz_st_index")
