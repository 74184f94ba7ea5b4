/* Fuzz entry point for the prompt tokenizer: arbitrary bytes encoded (and decoded back) by the real
 * tokenizers loupe meets, as `loupe trace --prompt` and `loupe tokenize` would.
 *
 * The first input byte picks the tokenizer (mod the number loaded), the rest is the prompt:
 *   0  a llama2.c tokenizer.bin generated here (byte tokens, scored merges): always present
 *   1  ../shared/tokenizers/gpt2/tokenizer.json        byte-level BPE, GPT-2 regex
 *   2  ../shared/tokenizers/qwen3/tokenizer.json       byte-level BPE, NFC, Qwen2 regex, added tokens
 *   3  ../shared/tokenizers/tinyllama/tokenizer.json   SentencePiece-style BPE with byte fallback
 *   4  ../shared/models/stories260K/tok512.bin         llama2.c tokenizer
 * (the shared ones only when $LOUPE_SHARED holds them; without it every input goes to 0).
 *
 * Checks beyond "no crash": every id is in the vocabulary and has a piece; at most one token per
 * input byte plus a few specials (so a prompt cannot make the encoder allocate without bound);
 * decode succeeds; and GPT-2's byte-level BPE gives back exactly the bytes of valid UTF-8 text.
 *
 * With LOUPE_FUZZ=ON (clang):  LOUPE_SHARED=../shared build-fuzz/tests/fuzz_encode_libfuzzer \
 *                                  -max_len=4096 CORPUS_DIR tests/fuzz/encode
 * Replay (every build):        build/tests/fuzz_encode tests/fuzz/encode tests/fuzz/encode/regress
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect/tokenizer/tokenizer.h"
#include "inspect/tokenizer/tokenizer_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { GENERATED, GPT2, QWEN3, TINYLLAMA, STORIES, N_TOKENIZERS };

static lp_tokenizer *tokenizers[N_TOKENIZERS];
static int n_loaded;
static int loaded_kind[N_TOKENIZERS]; /* loaded slot -> enum value */

static void put_token(uint8_t *buf, size_t *n, float score, const char *piece, size_t len)
{
    int32_t l = (int32_t)len;
    memcpy(buf + *n, &score, 4);
    memcpy(buf + *n + 4, &l, 4);
    memcpy(buf + *n + 8, piece, len);
    *n += 8 + len;
}

/* run.c's layout: <unk> <s> </s>, 256 byte tokens <0xXX>, then merged pieces with scores. */
static lp_tokenizer *generated_tokenizer(void)
{
    static const char *const pieces[] = {"\xe2\x96\x81", "\xe2\x96\x81t", "th", "he", "\xe2\x96\x81the",
                                         "in", "\xe2\x96\x81" "a", "an", "\xe2\x96\x81" "an", "e",
                                         "t", "h", "a", "n", "i", "o", "\xe2\x96\x81o", "on", "ce",
                                         "\xe2\x96\x81once", "\xe4\xbd\xa0"};
    size_t n_pieces = sizeof pieces / sizeof pieces[0];
    uint8_t *buf = malloc(4 + (3 + 256 + n_pieces) * 24);
    if (!buf)
        abort();
    size_t n = 4;
    int32_t max_len = 16;
    memcpy(buf, &max_len, 4);
    put_token(buf, &n, 0.0f, "<unk>", 5);
    put_token(buf, &n, 0.0f, "\n<s>\n", 5);
    put_token(buf, &n, 0.0f, "\n</s>\n", 6);
    for (int b = 0; b < 256; b++) {
        char piece[8];
        snprintf(piece, sizeof piece, "<0x%02X>", b);
        put_token(buf, &n, 0.0f, piece, 6);
    }
    for (size_t i = 0; i < n_pieces; i++)
        put_token(buf, &n, -(float)i, pieces[i], strlen(pieces[i]));
    lp_tokenizer *tok = NULL;
    lp_error err = {0};
    if (lp_tok_load_llama2c("generated.bin", buf, n, &tok, &err) != LP_OK) {
        fprintf(stderr, "fuzz_encode: generated tokenizer: %s\n", err.msg);
        abort(); /* a bug in this harness, not a finding */
    }
    free(buf);
    return tok;
}

static void load_all(void)
{
    if (n_loaded > 0)
        return;
    tokenizers[GENERATED] = generated_tokenizer();
    loaded_kind[n_loaded++] = GENERATED;
    static const char *const rel[N_TOKENIZERS] = {
        NULL, "tokenizers/gpt2/tokenizer.json", "tokenizers/qwen3/tokenizer.json",
        "tokenizers/tinyllama/tokenizer.json", "models/stories260K/tok512.bin"};
    const char *shared = getenv("LOUPE_SHARED");
    if (!shared || !*shared)
        return;
    for (int k = GPT2; k < N_TOKENIZERS; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", shared, rel[k]);
        FILE *probe = fopen(path, "rb");
        if (!probe)
            continue;
        fclose(probe);
        lp_error err = {0};
        if (lp_tokenizer_open(path, &tokenizers[k], &err) != LP_OK) {
            fprintf(stderr, "fuzz_encode: %s\n", err.msg);
            abort(); /* a real tokenizer that no longer loads is a regression, not noise */
        }
        loaded_kind[n_loaded++] = k;
    }
}

static bool valid_utf8_without_nul(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        size_t n;
        uint32_t cp;
        if (c == 0)
            return false;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 2;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 3;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + n > len)
            return false;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += n;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    load_all();
    if (size == 0)
        return 0;
    int kind = loaded_kind[data[0] % n_loaded];
    const lp_tokenizer *tok = tokenizers[kind];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    int32_t *ids = NULL;
    size_t n_ids = 0;
    lp_error err = {0};
    if (lp_tokenizer_encode(tok, text, len, true, &ids, &n_ids, &err) != LP_OK) {
        if (!err.msg[0])
            abort(); /* every failure explains itself */
        return 0;
    }
    /* one token per byte at most (byte-level and byte fallback), plus BOS/EOS and a dummy prefix */
    if (n_ids > len + 4) {
        fprintf(stderr, "fuzz_encode: %zu ids for %zu bytes\n", n_ids, len);
        abort();
    }
    int64_t vocab = lp_tokenizer_vocab_size(tok);
    for (size_t k = 0; k < n_ids; k++) {
        if (ids[k] < 0 || ids[k] >= vocab || !lp_tokenizer_piece(tok, ids[k]))
            abort();
        free(lp_tokenizer_label(tok, ids[k]));
    }
    char *back = NULL;
    if (lp_tokenizer_decode(tok, ids, n_ids, false, &back, &err) != LP_OK) {
        fprintf(stderr, "fuzz_encode: decode of our own ids failed: %s\n", err.msg);
        abort();
    }
    if (kind == GPT2 && valid_utf8_without_nul(data + 1, len) &&
        (strlen(back) != len || memcmp(back, text, len) != 0)) {
        fprintf(stderr, "fuzz_encode: GPT-2 round trip changed the text\n");
        abort();
    }
    free(back);
    free(ids);
    return 0;
}

#include "fuzz_replay.h"
LP_FUZZ_REPLAY_MAIN("fuzz_encode")
