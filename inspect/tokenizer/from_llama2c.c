/* llama2.c tokenizer.bin: int32 max_token_length, then records {float32 score, int32 len, len
 * bytes} to the end of the file (the count is not stored: run.c takes it from the checkpoint;
 * lp_llama2c_is_tokenizer of inspect/formats/ checks the records), read into the shared
 * pipeline as run.c's model: scores over the stored piece strings, byte tokens at id byte + 3. */
#include "inspect/tokenizer/tokenizer_internal.h"

#include <stdlib.h>

#include "core/dtype.h"
#include "core/mapfile.h"
#include "inspect/formats/formats_internal.h"

lp_status lp_tok_load_llama2c(const char *path, const uint8_t *data, size_t size,
                          lp_tokenizer **out, lp_error *err)
{
    const char *name = lp_path_basename(path);
    int64_t n_tokens;
    if (!lp_llama2c_is_tokenizer(data, size, &n_tokens))
        return lp_error_set(err, LP_ERR_FORMAT, "%s: not a llama2.c tokenizer (records of "
                            "float32 score, int32 len, bytes do not fill the %zu-byte file)",
                            name, size);
    lp_tokenizer *tok = lp_tok_new(path, "llama2c");
    if (!tok)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
    lp_status st = lp_tok_alloc_vocab(tok, n_tokens, err);
    if (st == LP_OK) {
        tok->scores = malloc((size_t)n_tokens * sizeof *tok->scores);
        if (!tok->scores)
            st = lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
    }
    size_t off = 4;
    for (int64_t i = 0; i < n_tokens && st == LP_OK; i++) {
        tok->scores[i] = lp_load_f32(data + off);
        int32_t len = lp_load_i32(data + off + 4);
        st = lp_tok_set_piece(tok, (int32_t)i, (const char *)data + off + 8, (size_t)len, err);
        off += 8 + (size_t)len;
    }
    if (st == LP_OK)
        st = lp_tok_build_vocab_map(tok, err);
    if (st != LP_OK) {
        lp_tokenizer_close(tok);
        return st;
    }
    tok->model = LP_TOK_MODEL_LLAMA2C;
    for (int32_t i = 0; i < 3 && i < n_tokens; i++)
        tok->flags[i] |= LP_TOK_FLAG_SPECIAL; /* <unk>, BOS, EOS */
    /* run.c decodes <0xXX> to bytes and drops the space after BOS; Strip does the latter
     * once special tokens are skipped. */
    tok->decs = calloc(3, sizeof *tok->decs);
    if (!tok->decs || !(tok->decs[2].content = lp_tok_strndup(" ", 1))) {
        lp_tokenizer_close(tok);
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
    }
    tok->n_decs = 3;
    tok->decs[0].kind = LP_TOK_DEC_BYTEFALLBACK;
    tok->decs[1].kind = LP_TOK_DEC_FUSE;
    tok->decs[2].kind = LP_TOK_DEC_STRIP;
    tok->decs[2].content_len = 1;
    tok->decs[2].start = 1;
    *out = tok;
    return LP_OK;
}
