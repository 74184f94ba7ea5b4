/* Fuzz entry point for the JSON-lines prompt file (lp_prompts_parse, inspect/tokenizer/prompts.c).
 *
 * Beyond "no crash": a file that reads has at least one prompt; each has exactly one of text
 * (non-empty, valid UTF-8, no NUL inside its length) and tokens (non-empty, every id in
 * [0, 2^31 - 1]); lines increase; ids are unique; a refusal is one line "name:line:col: what".
 *
 * With LOUPE_FUZZ=ON (clang):  build-fuzz/tests/fuzz/fuzz_prompts_libfuzzer tests/fuzz/prompts
 * Replay (every build):        build/tests/fuzz/fuzz_prompts tests/fuzz/prompts tests/fuzz/prompts/regress
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect/tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_prompts: broken invariant: %s\n", what);
        abort();
    }
}

static int valid_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > n)
            return 0;
        uint32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000))
            return 0;
        i += len;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lp_prompts p;
    lp_error err = {0};
    lp_status st = lp_prompts_parse("f.jsonl", (const char *)data, size, &p, &err);
    if (st != LP_OK) {
        require(err.msg[0] != '\0', "a refusal carries a message");
        require(strchr(err.msg, '\n') == NULL, "the message is one line");
        require(strncmp(err.msg, "f.jsonl", 7) == 0, "the message names the file");
        return 0;
    }
    require(p.n > 0, "a file that reads holds a prompt");
    for (size_t i = 0; i < p.n; i++) {
        const lp_prompt *q = &p.items[i];
        require((q->text != NULL) != (q->tokens != NULL), "exactly one of text and tokens");
        if (q->text) {
            require(q->text_len > 0 && q->text[q->text_len] == '\0', "text is terminated");
            require(memchr(q->text, '\0', q->text_len) == NULL, "no NUL inside the text");
            require(valid_utf8((const unsigned char *)q->text, q->text_len), "text is UTF-8");
        } else {
            require(q->n_tokens > 0, "tokens are not empty");
            for (size_t k = 0; k < q->n_tokens; k++)
                require(q->tokens[k] >= 0, "token ids are not negative");
        }
        require(i == 0 || q->line > p.items[i - 1].line, "lines increase");
        require(q->line >= 1, "lines count from 1");
        for (size_t j = 0; q->id && j < i; j++)
            require(!p.items[j].id || strcmp(p.items[j].id, q->id) != 0, "ids are unique");
    }
    lp_prompts_free(&p);
    return 0;
}

#include "fuzz_replay.h"
LP_FUZZ_REPLAY_MAIN("fuzz_prompts")
