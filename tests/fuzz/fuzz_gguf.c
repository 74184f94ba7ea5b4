/* Fuzz entry point for the GGUF reader, GGUF -> lp_arch and the dequantizers.
 *
 * With LOUPE_FUZZ=ON (clang) this links against libFuzzer:
 *   build/tests/fuzz_gguf_libfuzzer -max_len=65536 CORPUS_DIR
 * Without it, main() replays files given on the command line (a corpus or crash reproducers):
 *   build/tests/fuzz_gguf file1.gguf file2.gguf ...
 * The ctest `fuzz_gguf_replay` replays the corrupt files test_gguf writes plus ../shared's GGUFs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect/formats/gguf.h"
#include "inspect/inspect.h"
#include "inspect/formats/quant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lp_gguf *g = NULL;
    lp_error err = {0};
    if (lp_gguf_open_memory(data, size, "fuzz.gguf", &g, &err) != LP_OK)
        return 0;
    /* Touch everything the handle hands out. */
    volatile size_t sink = 0;
    for (int64_t kv = 0; kv < lp_gguf_n_kv(g); kv++) {
        const char *key = lp_gguf_key_name(g, kv);
        int64_t i;
        double f;
        bool b;
        const char *s;
        size_t len;
        sink += lp_gguf_get_int(g, key, &i) + lp_gguf_get_float(g, key, &f) +
                lp_gguf_get_bool(g, key, &b);
        if (lp_gguf_get_str(g, key, &s, &len) && len > 0)
            sink += (uint8_t)s[len - 1];
        uint64_t n = lp_gguf_arr_len(g, kv);
        for (uint64_t e = 0; e < n && e < 4096; e++) {
            sink += lp_gguf_arr_int(g, kv, e, &i) + lp_gguf_arr_float(g, kv, e, &f);
            if (lp_gguf_arr_str(g, kv, e, &s, &len) && len > 0)
                sink += (uint8_t)s[len - 1];
        }
    }
    for (int64_t t = 0; t < lp_gguf_n_tensors(g); t++) {
        lp_dtype dt = lp_gguf_tensor_dtype(g, t);
        uint64_t n_elements = 1;
        for (int d = 0; d < lp_gguf_tensor_n_dims(g, t); d++)
            n_elements *= (uint64_t)lp_gguf_tensor_ne(g, t, d); /* validated at open */
        if (!lp_dequantize_supported(dt) || n_elements > (1u << 20))
            continue;
        float *out = malloc(n_elements * sizeof(float));
        if (!out)
            continue;
        if (lp_dequantize(dt, lp_gguf_tensor_data(g, t), (int64_t)n_elements, out, &err) == LP_OK)
            sink += (size_t)(out[n_elements - 1] != 0.0f);
        free(out);
    }
    lp_arch *arch = malloc(sizeof *arch);
    if (arch) {
        sink += lp_arch_from_gguf(g, arch, &err) == LP_OK;
        free(arch);
    }
    (void)sink;
    lp_gguf_close(g);
    return 0;
}

#include "fuzz_replay.h"
LP_FUZZ_REPLAY_MAIN("fuzz_gguf")
