/* Fuzz entry point for the mask-tensor checker: bytes starting with the .npy magic as a .npy,
 * checked against each definition and encoding; anything else as a .safetensors image. Bad input must give an error, never a crash or a read past the data.
 *
 * With LOUPE_FUZZ=ON (clang) this links against libFuzzer:
 *   build/tests/fuzz_leak_mask_libfuzzer -max_len=8192 CORPUS_DIR
 * Without it, main() replays the files given on the command line:
 *   build/tests/fuzz_leak_mask mask1.npy mask2.npy ...
 * The ctest `fuzz_leak_mask_replay` replays good, bad and truncated masks written by the test.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect/formats/npy.h"
#include "trace/leak/leak.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static long n_checked; /* inputs the checker accepted at least once (replay prints it) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lp_npy npy;
    lp_error err = {0};
    if (size < 6 || memcmp(data, "\x93NUMPY", 6) != 0) {
        /* anything else is read as a safetensors image */
        lp_leak_mask_opts mo;
        lp_leak_mask_opts_init(&mo);
        lp_leak_mask_report rep;
        if (lp_leak_check_mask_safetensors(data, size, "fuzz.safetensors", &mo, &rep, &err) ==
            LP_OK) {
            if (rep.leak_count + rep.blocked_count > rep.n_cells)
                abort();
            n_checked++;
            lp_leak_mask_report_free(&rep);
        }
        return 0;
    }
    if (lp_npy_parse(data, size, "fuzz.npy", &npy, &err) != LP_OK)
        return 0;
    static const char *const kinds[] = {"causal", "window:1", "window:3"};
    bool checked = false;
    int64_t shape[LP_NPY_MAX_DIMS];
    memcpy(shape, npy.shape, sizeof shape);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int enc = LP_MASK_ENC_AUTO; enc < LP_MASK_ENC_COUNT; enc++) {
            lp_leak_mask_opts mo;
            lp_leak_mask_opts_init(&mo);
            if (lp_leak_def_parse(kinds[k], &mo.def, &err) != LP_OK)
                abort(); /* the built-in definitions always parse */
            mo.encoding = (lp_mask_encoding)enc;
            mo.true_means_masked = (k & 1) != 0;
            mo.max_listed = 3;
            lp_leak_mask_report rep;
            if (lp_leak_check_mask(npy.data, npy.dtype, npy.n_dims, shape, "fuzz.npy", &mo, &rep,
                                   &err) == LP_OK) {
                /* the counts must add up */
                if (rep.leak_count < 0 || rep.blocked_count < 0 ||
                    rep.leak_count + rep.blocked_count > rep.n_cells ||
                    rep.n_leaks_listed > 3 || rep.n_leaks_listed > rep.leak_count)
                    abort();
                checked = true;
                lp_leak_mask_report_free(&rep);
            }
            lp_leak_def_free(&mo.def);
        }
    n_checked += checked;
    return 0;
}

#include "fuzz_replay.h"
#ifndef LP_FUZZ_LIBFUZZER
int main(int argc, char **argv)
{
    int rc = lp_fuzz_replay("fuzz_leak_mask", argc, argv);
    printf("fuzz_leak_mask: %ld checked as masks\n", n_checked);
    return rc;
}
#endif
