/* Fuzz entry point for the safetensors reader (with loupe inspect's report and --stats over
 * whatever parses) and the .npy reader.
 *
 * With LOUPE_FUZZ=ON (clang) this links against libFuzzer:
 *   build/tests/fuzz_weights_libfuzzer -max_len=65536 CORPUS_DIR
 * Without it, main() replays files given on the command line, or with --mutate N mutates each
 * given file (and two built-in seeds) N times with a fixed seed: byte flips, digit changes
 * inside the header, truncations and length-field edits. ctest `fuzz_weights_mutate` runs the
 * latter; under LOUPE_SANITIZE=ON it is the corrupt-file check under ASan/UBSan.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "inspect/formats/npy.h"
#include "inspect/weights/report_internal.h"
#include "inspect/weights/weights_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lp_error err = {0};
    lp_weights *w = NULL;
    if (lp_weights_open_safetensors_memory(data, size, "fuzz.safetensors", &w, &err) == LP_OK) {
        json_t *report = NULL;
        /* stats read every value of every tensor: the reader's bounds must hold */
        if (lp_inspect_report(w, true, &report, &err) == LP_OK)
            json_decref(report);
        lp_weights_close(w);
    }
    lp_npy npy;
    if (lp_npy_parse(data, size, "fuzz.npy", &npy, &err) == LP_OK && npy.n_elements <= (1 << 20)) {
        float *v = malloc((size_t)(npy.n_elements ? npy.n_elements : 1) * sizeof *v);
        if (v)
            (void)lp_npy_to_f32(&npy, v, &err);
        free(v);
    }
    return 0;
}

#include "fuzz_replay.h"
#ifndef LP_FUZZ_LIBFUZZER
#define rng lp_fuzz_rand

/* One mutation of seed into buf (same capacity as seed); returns the new size. */
static size_t mutate(const uint8_t *seed, size_t size, uint8_t *buf)
{
    memcpy(buf, seed, size);
    if (size == 0)
        return 0;
    uint64_t header_end = size;
    if (size >= 8) {
        uint64_t n;
        memcpy(&n, seed, 8);
        if (n < size - 8)
            header_end = 8 + n; /* safetensors: aim at the JSON most of the time */
    }
    int edits = 1 + (int)(rng() % 4);
    for (int e = 0; e < edits; e++) {
        switch (rng() % 6) {
        case 0: buf[rng() % size] ^= (uint8_t)(1u << (rng() % 8)); break;
        case 1: buf[rng() % header_end] = (uint8_t)('0' + rng() % 10); break;
        case 2: buf[rng() % header_end] = (uint8_t)"{}[],:\"-9e "[rng() % 12]; break;
        case 3: return rng() % size; /* truncate */
        case 4: {                    /* a length field: 8 bytes at 0 (safetensors), 2 at 8 (npy) */
            uint64_t v = rng() >> (rng() % 64);
            memcpy(buf, &v, size < 8 ? size : 8);
            break;
        }
        default: buf[8 + rng() % 4 < size ? 8 + rng() % 4 : 0] = (uint8_t)rng(); break;
        }
    }
    return size;
}

/* Built-in seeds so the mutator has something to chew on without ../shared. */
static const char st_seed_header[] =
    "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F16\",\"shape\":[2,3],"
    "\"data_offsets\":[0,12]},\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[12,16]},"
    "\"c\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[16,20]}}";

static size_t make_st_seed(uint8_t *buf)
{
    uint64_t n = sizeof st_seed_header - 1;
    memcpy(buf, &n, 8);
    memcpy(buf + 8, st_seed_header, (size_t)n);
    for (int i = 0; i < 20; i++)
        buf[8 + n + (size_t)i] = (uint8_t)(i * 37);
    return 8 + (size_t)n + 20;
}

static size_t make_npy_seed(uint8_t *buf)
{
    const char *dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2), }";
    size_t dl = strlen(dict), header_len = 64 - 10;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    uint16_t hl = (uint16_t)header_len;
    memcpy(buf + 8, &hl, 2);
    memset(buf + 10, ' ', header_len);
    memcpy(buf + 10, dict, dl);
    buf[63] = '\n';
    for (int i = 0; i < 8; i++)
        buf[64 + i] = (uint8_t)(0x3c + i);
    return 72;
}

int main(int argc, char **argv)
{
    long rounds = 0;
    int first = 1;
    if (argc >= 3 && strcmp(argv[1], "--mutate") == 0) {
        rounds = strtol(argv[2], NULL, 10);
        first = 3;
    }
    int n_inputs = argc - first + 2;
    long runs = 0;
    for (int k = 0; k < n_inputs; k++) {
        uint8_t builtin[512];
        size_t size = 0;
        uint8_t *seed;
        if (k == 0 || k == 1) {
            if (rounds == 0)
                continue; /* replay mode: only the given files */
            size = k == 0 ? make_st_seed(builtin) : make_npy_seed(builtin);
            seed = malloc(size);
            if (seed)
                memcpy(seed, builtin, size);
        } else {
            seed = lp_fuzz_read_file("fuzz_weights", argv[first + k - 2], &size);
            if (!seed)
                return 2;
        }
        if (!seed)
            return 2;
        LLVMFuzzerTestOneInput(seed, size);
        runs++;
        uint8_t *buf = malloc(size ? size : 1);
        for (long r = 0; buf && r < rounds; r++) {
            size_t n = mutate(seed, size, buf);
            /* a fresh, exactly sized copy so ASan sees reads past the end */
            uint8_t *exact = malloc(n ? n : 1);
            if (!exact)
                break;
            memcpy(exact, buf, n);
            LLVMFuzzerTestOneInput(exact, n);
            free(exact);
            runs++;
        }
        free(buf);
        free(seed);
    }
    printf("fuzz_weights: %ld inputs ran without a crash\n", runs);
    return 0;
}
#endif
