/* Decoding ids to text through the tokenizer's decoder chain, and readable labels of single
 * tokens for pictures and tables. */
#include "inspect/tokenizer/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"

typedef struct str_vec {
    lp_bytes *v;
    size_t n;
    bool *text; /* [n] or NULL: token k is LP_TOK_FLAG_TEXT, passed through ByteLevel as it is */
} str_vec;

static void strs_free(str_vec *s)
{
    for (size_t k = 0; k < s->n; k++)
        lp_bytes_free(&s->v[k]);
    free(s->v);
    free(s->text);
    s->v = NULL;
    s->text = NULL;
    s->n = 0;
}

/* Hugging Face's clean_up_tokenization: drop the space before punctuation and contractions. */
static lp_status cleanup_spaces(lp_bytes *b)
{
    static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's",
                                       " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    for (size_t k = 0; k < sizeof from / sizeof from[0]; k++) {
        lp_bytes out = {0};
        lp_status st = lp_tok_replace_all(NULL, from[k], strlen(from[k]), to[k], strlen(to[k]),
                                   b->data ? b->data : "", b->len, &out);
        if (st != LP_OK) {
            lp_bytes_free(&out);
            return st;
        }
        if (!out.data)
            lp_bytes_append(&out, "", 0);
        lp_bytes_free(b);
        *b = out;
    }
    return LP_OK;
}

/* ByteLevel: every token's characters back to the bytes they stand for, joined into one string
 * (a token with a character outside the alphabet passes as it is). */
static lp_status dec_bytelevel(str_vec *strs)
{
    lp_bytes all = {0};
    for (size_t k = 0; k < strs->n; k++) {
        const char *s = strs->v[k].data ? strs->v[k].data : "";
        size_t len = strs->v[k].len;
        lp_bytes bytes = {0};
        bool ok = !(strs->text && strs->text[k]);
        size_t i = 0;
        while (i < len && ok) {
            int32_t cp = lp_utf8_next(s, len, &i);
            int b = cp < 0 ? -1 : lp_tok_cp_to_byte((uint32_t)cp);
            ok = b >= 0;
            if (ok)
                lp_bytes_append_char(&bytes, (char)b);
        }
        lp_bytes_append(&all, ok ? bytes.data : s, ok ? bytes.len : len);
        lp_bytes_free(&bytes);
    }
    if (all.failed) {
        lp_bytes_free(&all);
        return LP_ERR_NOMEM;
    }
    strs_free(strs);
    strs->v = malloc(sizeof *strs->v);
    if (!strs->v) {
        lp_bytes_free(&all);
        return LP_ERR_NOMEM;
    }
    strs->v[0] = all;
    strs->n = 1;
    return LP_OK;
}

/* Replace token k of strs by out (which it takes over), or free out on failure. */
static lp_status replace_token(str_vec *strs, size_t k, lp_bytes *out, lp_status st)
{
    if (st != LP_OK) {
        lp_bytes_free(out);
        return st;
    }
    lp_bytes_free(&strs->v[k]);
    strs->v[k] = *out;
    return LP_OK;
}

/* Replace, and Metaspace (its replacement back to " ", the first token's prefix dropped). */
static lp_status dec_replace(const lp_tok_dec *dec, str_vec *strs, bool for_label)
{
    bool meta = dec->kind == LP_TOK_DEC_METASPACE;
    for (size_t k = 0; k < strs->n; k++) {
        lp_bytes out = {0};
        const char *s = strs->v[k].data ? strs->v[k].data : "";
        size_t len = strs->v[k].len;
        if (meta && k == 0 && !for_label && dec->prepend_scheme != LP_TOK_PREPEND_NEVER &&
            len >= dec->pattern_len && memcmp(s, dec->pattern, dec->pattern_len) == 0) {
            s += dec->pattern_len;
            len -= dec->pattern_len;
        }
        lp_status st = lp_tok_replace_all(NULL, dec->pattern, dec->pattern_len,
                                          meta ? " " : dec->content, meta ? 1 : dec->content_len,
                                          s, len, &out);
        if ((st = replace_token(strs, k, &out, st)) != LP_OK)
            return st;
    }
    return LP_OK;
}

/* ByteFallback: runs of <0xXX> tokens become their bytes. */
static lp_status dec_bytefallback(str_vec *strs)
{
    size_t w = 0;
    for (size_t k = 0; k < strs->n;) {
        unsigned v;
        if (!lp_tok_byte_piece(strs->v[k].data, strs->v[k].len, true, &v)) {
            strs->v[w++] = strs->v[k++];
            continue;
        }
        lp_bytes bytes = {0};
        while (k < strs->n && lp_tok_byte_piece(strs->v[k].data, strs->v[k].len, true, &v)) {
            lp_bytes_append_char(&bytes, (char)v);
            lp_bytes_free(&strs->v[k]);
            k++;
        }
        if (bytes.failed) {
            lp_bytes_free(&bytes);
            strs->n = w;
            return LP_ERR_NOMEM;
        }
        strs->v[w++] = bytes;
    }
    strs->n = w;
    return LP_OK;
}

static lp_status dec_fuse(str_vec *strs)
{
    if (strs->n <= 1)
        return LP_OK;
    for (size_t k = 1; k < strs->n; k++) {
        lp_bytes_append(&strs->v[0], strs->v[k].data, strs->v[k].len);
        lp_bytes_free(&strs->v[k]);
    }
    strs->n = 1;
    return strs->v[0].failed ? LP_ERR_NOMEM : LP_OK;
}

/* Strip: up to start copies of content from the front of each token, stop from the back. */
static void dec_strip(const lp_tok_dec *dec, str_vec *strs)
{
    size_t cl = dec->content_len;
    for (size_t k = 0; k < strs->n && cl; k++) {
        lp_bytes *b = &strs->v[k];
        size_t a = 0, e = b->len;
        for (int64_t n = 0; n < dec->start && b->len - a >= cl &&
                            memcmp(b->data + a, dec->content, cl) == 0;
             n++)
            a += cl;
        for (int64_t n = 0; n < dec->stop && e - a >= cl &&
                            memcmp(b->data + e - cl, dec->content, cl) == 0;
             n++)
            e -= cl;
        if (a || e != b->len) {
            memmove(b->data, b->data + a, e - a);
            b->len = e - a;
            b->data[b->len] = '\0';
        }
    }
}

/* BPEDecoder: the end-of-word suffix becomes a space (nothing after the last token). */
static lp_status dec_bpe_suffix(const lp_tok_dec *dec, str_vec *strs, bool for_label)
{
    for (size_t k = 0; k < strs->n; k++) {
        lp_bytes out = {0};
        bool last = k + 1 == strs->n && !for_label;
        lp_status st = lp_tok_replace_all(NULL, dec->pattern, dec->pattern_len, last ? "" : " ",
                                          last ? 0 : 1, strs->v[k].data ? strs->v[k].data : "",
                                          strs->v[k].len, &out);
        if ((st = replace_token(strs, k, &out, st)) != LP_OK)
            return st;
    }
    return LP_OK;
}

/* WordPiece: after the first token, "##x" continues the word and anything else starts one. */
static lp_status dec_wordpiece(const lp_tok_dec *dec, str_vec *strs, bool for_label)
{
    for (size_t k = 0; k < strs->n; k++) {
        lp_bytes out = {0};
        const char *s = strs->v[k].data ? strs->v[k].data : "";
        size_t len = strs->v[k].len;
        if ((k > 0 || for_label) && len >= dec->pattern_len &&
            memcmp(s, dec->pattern, dec->pattern_len) == 0) {
            s += dec->pattern_len;
            len -= dec->pattern_len;
        } else if (k > 0 && !for_label) {
            lp_bytes_append_char(&out, ' ');
        }
        lp_bytes_append(&out, s, len);
        if (!out.data)
            lp_bytes_append(&out, "", 0);
        lp_status st = out.failed ? LP_ERR_NOMEM : LP_OK;
        if (st == LP_OK && dec->cleanup && !for_label)
            st = cleanup_spaces(&out);
        if ((st = replace_token(strs, k, &out, st)) != LP_OK)
            return st;
    }
    return LP_OK;
}

/* Run the decoder chain over strs in place. for_label skips the steps that only make sense for
 * a whole text (Strip, the first token's Metaspace prefix). */
static lp_status run_decoder_list(const lp_tok_dec *decs, size_t n_decs, str_vec *strs,
                                  bool for_label)
{
    lp_status st = LP_OK;
    for (size_t d = 0; d < n_decs && st == LP_OK; d++) {
        const lp_tok_dec *dec = &decs[d];
        switch (dec->kind) {
        case LP_TOK_DEC_BYTELEVEL: st = dec_bytelevel(strs); break;
        case LP_TOK_DEC_METASPACE:
        case LP_TOK_DEC_REPLACE: st = dec_replace(dec, strs, for_label); break;
        case LP_TOK_DEC_BYTEFALLBACK: st = dec_bytefallback(strs); break;
        case LP_TOK_DEC_FUSE: st = dec_fuse(strs); break;
        case LP_TOK_DEC_STRIP:
            if (!for_label)
                dec_strip(dec, strs);
            break;
        case LP_TOK_DEC_BPE_SUFFIX: st = dec_bpe_suffix(dec, strs, for_label); break;
        case LP_TOK_DEC_WORDPIECE: st = dec_wordpiece(dec, strs, for_label); break;
        case LP_TOK_DEC_COUNT: break;
        }
    }
    return st;
}

static lp_status run_decoders(const lp_tokenizer *tok, str_vec *strs, bool for_label)
{
    if (tok->n_decs > 0 || !for_label)
        return run_decoder_list(tok->decs, tok->n_decs, strs, for_label);
    /* A file without a decoder still deserves readable labels: undo what its pre-tokenizer
     * or normalizer visibly did (the byte-level alphabet, or U+2581 for spaces and <0xXX>). */
    char meta[] = "\xE2\x96\x81", space[] = " ";
    lp_tok_dec implied[2];
    memset(implied, 0, sizeof implied);
    size_t n = 0;
    if (strcmp(tok->kind, "bpe-bytelevel") == 0) {
        implied[n++].kind = LP_TOK_DEC_BYTELEVEL;
    } else if (strcmp(tok->kind, "bpe-sentencepiece") == 0) {
        implied[n].kind = LP_TOK_DEC_REPLACE;
        implied[n].pattern = meta, implied[n].pattern_len = 3;
        implied[n].content = space, implied[n++].content_len = 1;
        implied[n++].kind = LP_TOK_DEC_BYTEFALLBACK;
    }
    return run_decoder_list(implied, n, strs, true);
}

lp_status lp_tokenizer_decode(const lp_tokenizer *tok, const int32_t *ids, size_t n_ids,
                              bool skip_special, char **text, lp_error *err)
{
    LP_ASSERT(tok && text && (ids || n_ids == 0));
    *text = NULL;
    str_vec strs = {calloc(n_ids ? n_ids : 1, sizeof(lp_bytes)), 0,
                    calloc(n_ids ? n_ids : 1, sizeof(bool))};
    if (!strs.v || !strs.text) {
        strs_free(&strs);
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory decoding %zu ids", n_ids);
    }
    for (size_t k = 0; k < n_ids; k++) {
        int32_t id = ids[k];
        if (id < 0 || id >= tok->n_vocab || !tok->pieces[id]) {
            strs_free(&strs);
            return lp_error_set(err, LP_ERR_RANGE, "%s: token id %d at position %zu is not in "
                                "the vocabulary [0, %lld)", lp_path_basename(tok->path), id, k,
                                (long long)tok->n_vocab);
        }
        if (skip_special && (tok->flags[id] & LP_TOK_FLAG_SPECIAL))
            continue;
        strs.text[strs.n] = (tok->flags[id] & LP_TOK_FLAG_TEXT) != 0;
        lp_bytes *b = &strs.v[strs.n++];
        lp_bytes_append(b, tok->pieces[id], tok->piece_len[id]);
        if (b->failed) {
            strs_free(&strs);
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        }
    }
    lp_status st = run_decoders(tok, &strs, false);
    lp_bytes all = {0};
    lp_bytes_append(&all, "", 0);
    for (size_t k = 0; k < strs.n && st == LP_OK; k++) {
        if (k > 0 && tok->n_decs == 0)
            lp_bytes_append_char(&all, ' '); /* no decoder: Hugging Face joins with spaces */
        lp_bytes_append(&all, strs.v[k].data, strs.v[k].len);
    }
    strs_free(&strs);
    if (st == LP_OK && all.failed)
        st = LP_ERR_NOMEM;
    if (st != LP_OK) {
        lp_bytes_free(&all);
        return lp_error_set(err, st, "%s: out of memory decoding %zu ids",
                            lp_path_basename(tok->path), n_ids);
    }
    *text = all.data;
    return LP_OK;
}

static bool is_space_byte(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Escape for one-line display: control characters as \n \t \r \xNN, invalid UTF-8 as \xNN. */
static char *escape_label(const char *s, size_t len)
{
    lp_bytes out = {0};
    lp_bytes_append(&out, "", 0);
    size_t i = 0;
    while (i < len) {
        size_t at = i;
        int32_t cp = lp_utf8_next(s, len, &i);
        char esc[8];
        if (cp == '\n')
            lp_bytes_append(&out, "\\n", 2);
        else if (cp == '\t')
            lp_bytes_append(&out, "\\t", 2);
        else if (cp == '\r')
            lp_bytes_append(&out, "\\r", 2);
        else if (cp == '\\')
            lp_bytes_append(&out, "\\\\", 2);
        else if (cp < 0 || cp < 0x20 || cp == 0x7F) {
            snprintf(esc, sizeof esc, "\\x%02X", (unsigned char)s[at]);
            lp_bytes_append(&out, esc, 4);
        } else {
            lp_bytes_append(&out, s + at, i - at);
        }
    }
    if (out.failed) {
        lp_bytes_free(&out);
        return NULL;
    }
    return out.data;
}

char *lp_tokenizer_label(const lp_tokenizer *tok, int32_t id)
{
    if (!tok || id < 0 || id >= tok->n_vocab || !tok->pieces[id])
        return NULL;
    const char *p = tok->pieces[id];
    size_t len = tok->piece_len[id];
    if (tok->flags[id] &
        (LP_TOK_FLAG_SPECIAL | LP_TOK_FLAG_ADDED | LP_TOK_FLAG_CONTROL | LP_TOK_FLAG_TEXT)) {
        /* special tokens read best as written; llama2.c stores BOS as "\n<s>\n" */
        while (len && is_space_byte(*p))
            p++, len--;
        while (len && is_space_byte(p[len - 1]))
            len--;
        return escape_label(p, len);
    }
    str_vec strs = {calloc(1, sizeof(lp_bytes)), 1, NULL};
    if (!strs.v)
        return NULL;
    lp_bytes_append(&strs.v[0], p, len);
    lp_status st = strs.v[0].failed ? LP_ERR_NOMEM : run_decoders(tok, &strs, true);
    lp_bytes all = {0};
    for (size_t k = 0; k < strs.n && st == LP_OK; k++)
        lp_bytes_append(&all, strs.v[k].data, strs.v[k].len);
    strs_free(&strs);
    char *label = st == LP_OK && !all.failed ? escape_label(all.data ? all.data : "", all.len)
                                             : NULL;
    lp_bytes_free(&all);
    return label;
}
