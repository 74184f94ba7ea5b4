/* Fuzz entry point for the llama2.c readers: the checkpoint header (lp_arch_from_llama2c), the
 * tensor catalogue over it (lp_weights_open + loupe inspect's report, with --stats on small
 * inputs) and the tokenizer.bin reader reached through lp_tokenizer_open.
 *
 * These readers take a path and mmap it, so each input is written to one scratch file
 * ($LOUPE_TEST_TMP or /tmp, fuzz_llama2c.XXXXXX/model.bin, removed at exit). Beyond "no crash":
 * a header that parses must describe a model whose weights fit in the file (the reader checks the
 * size exactly), every failure must explain itself, and tokenizer ids must stay in the vocabulary.
 *
 * With LOUPE_FUZZ=ON (clang):  build-fuzz/tests/fuzz_llama2c_libfuzzer -max_len=8192 tests/fuzz/llama2c
 * Replay (every build):        build/tests/fuzz_llama2c tests/fuzz/llama2c tests/fuzz/llama2c/regress
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "inspect/arch/arch_json.h"
#include "inspect/inspect.h"
#include "inspect/tokenizer/tokenizer.h"
#include "inspect/weights/report_internal.h"

#include "fuzz_scratch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require_message(const lp_error *err)
{
    if (!err->msg[0]) {
        fprintf(stderr, "fuzz_llama2c: an error without a message\n");
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = lp_fuzz_scratch_path("fuzz_llama2c", "model.bin");
    FILE *f = fopen(path, "wb");
    if (!f || (size > 0 && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror("fuzz_llama2c: writing the scratch file");
        abort();
    }

    lp_error err = {0};
    lp_arch *arch = malloc(sizeof *arch);
    if (!arch)
        return 0;
    if (lp_arch_from_llama2c(path, arch, &err) == LP_OK) {
        json_t *j = lp_arch_to_json(arch);
        if (!j)
            abort();
        json_decref(j);
        /* the header's dims must be consistent with a model that fits in the file */
        if (arch->n_layers <= 0 || arch->hidden_size <= 0 || arch->n_heads <= 0 || arch->vocab_size <= 0)
            abort();
    } else {
        require_message(&err);
    }
    free(arch);

    memset(&err, 0, sizeof err);
    lp_weights *w = NULL;
    if (lp_weights_open(path, &w, &err) == LP_OK) {
        uint64_t total = 0;
        for (size_t t = 0; t < lp_weights_count(w); t++) {
            const lp_tensor *tensor = lp_weights_tensor(w, t);
            if (tensor->file_offset + tensor->n_bytes > size) /* a view past the file */
                abort();
            total += tensor->n_bytes;
        }
        if (total > size)
            abort();
        json_t *report = NULL;
        if (lp_inspect_report(w, size <= (1u << 16), &report, &err) == LP_OK)
            json_decref(report);
        else
            require_message(&err);
        lp_weights_close(w);
    } else {
        require_message(&err);
    }

    memset(&err, 0, sizeof err);
    lp_tokenizer *tok = NULL;
    if (lp_tokenizer_open(path, &tok, &err) == LP_OK) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (lp_tokenizer_encode(tok, "Once upon a time\xff", 17, true, &ids, &n, &err) == LP_OK) {
            for (size_t k = 0; k < n; k++)
                if (ids[k] < 0 || ids[k] >= lp_tokenizer_vocab_size(tok))
                    abort();
            char *text = NULL;
            if (lp_tokenizer_decode(tok, ids, n, false, &text, &err) == LP_OK)
                free(text);
        }
        free(ids);
        lp_tokenizer_close(tok);
    } else {
        require_message(&err);
    }
    return 0;
}

#include "fuzz_replay.h"
LP_FUZZ_REPLAY_MAIN("fuzz_llama2c")
