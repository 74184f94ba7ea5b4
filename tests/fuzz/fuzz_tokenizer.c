/* Fuzz entry point for the tokenizers: the tokenizer.json, llama2.c and GGUF vocabulary readers,
 * and the encode/decode pipeline on arbitrary bytes.
 *
 * The first input byte picks the target (mod 4): 0 parse the rest as tokenizer.json, 1 as a
 * llama2.c tokenizer.bin, 2 as a GGUF, 3 encode the rest as text with two built-in tokenizers
 * (byte-level with the Qwen2 regex, NFC and added tokens; SentencePiece-style with byte
 * fallback) and check the ids and, for the byte-level one on NFC-stable text, the round trip.
 *
 * With LOUPE_FUZZ=ON (clang) this links against libFuzzer:
 *   build/tests/fuzz_tokenizer_libfuzzer -max_len=4096 CORPUS_DIR
 * Without it, main() replays files given on the command line, or with `--mutate N` runs N
 * random inputs of its own (the ctest `fuzz_tokenizer_mutate`).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect/formats/gguf.h"
#include "inspect/tokenizer/tokenizer.h"
#include "inspect/tokenizer/tokenizer_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char bytelevel_json[] =
    "{\"added_tokens\": [{\"id\": 0, \"content\": \"<|x|>\", \"special\": true, "
    "\"normalized\": false}, {\"id\": 1, \"content\": \"<t>\", \"special\": false, "
    "\"lstrip\": true, \"rstrip\": true}],"
    " \"normalizer\": {\"type\": \"NFC\"},"
    " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\","
    " \"pattern\": {\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?"
    "\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+"
    "(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
    "\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]},"
    " \"decoder\": {\"type\": \"ByteLevel\"},"
    " \"model\": {\"vocab\": {BYTES}, \"merges\": [\"a b\", \"\\u0120 a\", \"ab c\"]}}";

static const char spm_json[] =
    "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\","
    " \"prepend\": \"\\u2581\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"},"
    " \"content\": \"\\u2581\"}]},"
    " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\":"
    " {\"id\": \"<s>\"}}, {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\":"
    " {\"id\": \"<s>\", \"ids\": [1]}}},"
    " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\":"
    " {\"String\": \"\\u2581\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\":"
    " \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},"
    " \"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true}, {\"id\": 1,"
    " \"content\": \"<s>\", \"special\": true}],"
    " \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"fuse_unk\": true, \"unk_token\":"
    " \"<unk>\", \"vocab\": {BYTES}, \"merges\": [\"a b\", \"\\u2581 a\", \"ab c\"]}}";

/* Fill {BYTES} with a vocabulary: the byte-level alphabet or <0xXX> tokens, plus a few merges'
 * pieces. */
static char *make_json(const char *tmpl, bool bytelevel)
{
    size_t cap = strlen(tmpl) + 256 * 24 + 256;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    const char *hole = strstr(tmpl, "{BYTES}");
    size_t n = (size_t)(hole - tmpl) + 1;
    memcpy(out, tmpl, n);
    int id = 0;
    if (!bytelevel)
        n += (size_t)snprintf(out + n, cap - n, "\"<unk>\": 0, \"<s>\": 1, ");
    int first = bytelevel ? 0 : 2;
    for (int b = 0; b < 256; b++) {
        if (bytelevel) {
            char u[5] = {0};
            lp_utf8_put(lp_tok_byte_to_cp((uint8_t)b), u);
            /* escape the two JSON-special printable bytes */
            n += (size_t)snprintf(out + n, cap - n, "\"%s%s\": %d, ",
                                  b == '"' || b == '\\' ? "\\" : "", u, first + b + 2);
        } else {
            n += (size_t)snprintf(out + n, cap - n, "\"<0x%02X>\": %d, ", b, first + b + 2);
        }
    }
    id = first + 256 + 2;
    if (bytelevel)
        n += (size_t)snprintf(out + n, cap - n, "\"<|x|>\": 0, \"<t>\": 1, \"ab\": %d, "
                              "\"\\u0120a\": %d, \"abc\": %d}", id, id + 1, id + 2);
    else
        n += (size_t)snprintf(out + n, cap - n, "\"a\": %d, \"b\": %d, \"c\": %d, "
                              "\"\\u2581\": %d, \"ab\": %d, \"\\u2581a\": %d, \"abc\": %d}",
                              id, id + 1, id + 2, id + 3, id + 4, id + 5, id + 6);
    snprintf(out + n, cap - n, "%s", hole + strlen("{BYTES}"));
    return out;
}

static lp_tokenizer *builtin(bool bytelevel)
{
    static lp_tokenizer *cache[2];
    if (!cache[bytelevel]) {
        char *json = make_json(bytelevel ? bytelevel_json : spm_json, bytelevel);
        lp_error err = {0};
        if (!json || lp_tok_load_json_buffer("builtin.json", json, strlen(json), &cache[bytelevel],
                                         &err) != LP_OK) {
            fprintf(stderr, "fuzz_tokenizer: built-in tokenizer: %s\n", err.msg);
            abort(); /* a bug in this harness, not in the input */
        }
        free(json);
    }
    return cache[bytelevel];
}

static void exercise(const lp_tokenizer *tok, const char *text, size_t len, bool round_trip)
{
    int32_t *ids = NULL;
    size_t n = 0;
    lp_error err = {0};
    if (lp_tokenizer_encode(tok, text, len, true, &ids, &n, &err) != LP_OK)
        return;
    for (size_t k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= lp_tokenizer_vocab_size(tok))
            abort();
        char *label = lp_tokenizer_label(tok, ids[k]);
        free(label);
    }
    char *back = NULL;
    if (lp_tokenizer_decode(tok, ids, n, false, &back, &err) == LP_OK && round_trip &&
        memchr(text, 0, len) == NULL) {
        if (strlen(back) != len || memcmp(back, text, len) != 0)
            abort(); /* byte-level BPE lost or changed bytes */
    }
    free(back);
    free(ids);
}

/* "<t>" strips the spaces around it, so text holding it does not round-trip. */
static bool contains(const uint8_t *s, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(s + i, needle, n) == 0)
            return true;
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const uint8_t *body = data + 1;
    size_t len = size - 1;
    lp_tokenizer *tok = NULL;
    lp_error err = {0};
    switch (data[0] % 4) {
    case 0:
        if (lp_tok_load_json_buffer("fuzz.json", (const char *)body, len, &tok, &err) == LP_OK)
            exercise(tok, "ab c\xE4\xBD\xA0<|x|>", 11, false);
        break;
    case 1:
        if (lp_tok_load_llama2c("fuzz.bin", body, len, &tok, &err) == LP_OK)
            exercise(tok, "Once upon \xFF", 11, false);
        break;
    case 2: {
        lp_gguf *g = NULL;
        if (lp_gguf_open_memory(body, len, "fuzz.gguf", &g, &err) == LP_OK) {
            if (lp_tokenizer_from_gguf(g, &tok, &err) == LP_OK)
                exercise(tok, "Once upon \xFF", 11, false);
            lp_gguf_close(g);
        }
        break;
    }
    default: {
        /* NFC may legitimately change the text; the round trip holds when it does not */
        char *nfc = NULL;
        size_t nfc_len = 0;
        bool stable = lp_uc_normalize(LP_UC_NFC, (const char *)body, len, &nfc, &nfc_len) ==
                          LP_OK &&
                      nfc_len == len && memcmp(nfc, body, len) == 0;
        free(nfc);
        exercise(builtin(true), (const char *)body, len, stable && !contains(body, len, "<t>"));
        exercise(builtin(false), (const char *)body, len, false);
        break;
    }
    }
    lp_tokenizer_close(tok);
    return 0;
}

#include "fuzz_replay.h"
#ifndef LP_FUZZ_LIBFUZZER
static uint32_t rng(void) { return (uint32_t)(lp_fuzz_rand() >> 32); }

/* --mutate N [SEEDS...]: N inputs, each a seed (a file, a built-in tokenizer.json, or random
 * text) with a few bytes changed and maybe cut short. */
static int mutate(long rounds, int n_files, char **files)
{
    uint8_t *seeds[16];
    size_t sizes[16];
    int n_seeds = 0;
    for (int i = 0; i < n_files && n_seeds < 14; i++) {
        size_t size;
        uint8_t *body = lp_fuzz_read_file("fuzz_tokenizer", files[i], &size);
        if (!body)
            return 2;
        uint8_t *seed = malloc(size + 1);
        if (!seed)
            return 2;
        seed[0] = size >= 4 && memcmp(body, "GGUF", 4) == 0 ? 2 : body[0] == '{' ? 0 : 1;
        memcpy(seed + 1, body, size);
        free(body);
        seeds[n_seeds] = seed;
        sizes[n_seeds++] = size + 1;
    }
    for (int b = 0; b < 2; b++) {
        char *json = make_json(b ? bytelevel_json : spm_json, b);
        if (!json)
            return 2;
        size_t size = strlen(json);
        uint8_t *seed = malloc(size + 1);
        if (!seed)
            return 2;
        seed[0] = 0;
        memcpy(seed + 1, json, size);
        free(json);
        seeds[n_seeds] = seed;
        sizes[n_seeds++] = size + 1;
    }
    static const char pool[] = " \t\r\n abcABC019'.,!<|x|><t>\xC3\xA9\xE4\xBD\xA0\xCC\x81\xF0\x9F"
                               "\x99\x82\xFF\x80";
    uint8_t text[512];
    for (long r = 0; r < rounds; r++) {
        if (r % 3 == 0) {
            size_t len = 1 + rng() % (sizeof text - 1);
            text[0] = 3;
            for (size_t k = 1; k < len; k++)
                text[k] = (uint8_t)pool[rng() % (sizeof pool - 1)];
            LLVMFuzzerTestOneInput(text, len);
            continue;
        }
        int s = (int)(rng() % (uint32_t)n_seeds);
        uint8_t *copy = malloc(sizes[s]);
        if (!copy)
            return 2;
        memcpy(copy, seeds[s], sizes[s]);
        size_t size = sizes[s];
        int edits = 1 + (int)(rng() % 4);
        for (int e = 0; e < edits; e++) {
            /* mostly early bytes: headers and counts live there */
            size_t at = 1 + (rng() % 2 ? rng() % (size < 64 ? size : 64) : rng() % size);
            if (at < size)
                copy[at] = (uint8_t)(rng() % 3 == 0 ? 0xFF : rng());
        }
        if (rng() % 4 == 0)
            size = 1 + rng() % size;
        LLVMFuzzerTestOneInput(copy, size);
        free(copy);
    }
    for (int i = 0; i < n_seeds; i++)
        free(seeds[i]);
    printf("fuzz_tokenizer: %ld inputs, no crash\n", rounds);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--mutate") == 0)
        return mutate(strtol(argv[2], NULL, 10), argc - 3, argv + 3);
    return lp_fuzz_replay("fuzz_tokenizer", argc, argv);
}
#endif
