/* Encoding: added tokens split off first (before and after normalizing), the normalized text
 * pre-tokenized and run through the model, the post-processor's special tokens around it. */
#include "inspect/tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"

/* ---- added tokens ---------------------------------------------------------------------------- */

/* Pre-tokenize then run the model over each piece. */
static lp_status encode_segment(const lp_tokenizer *tok, const char *s, size_t len,
                                bool at_text_start, lp_tok_ids *out)
{
    lp_tok_splits pieces = {0};
    lp_status st = lp_tok_pretokenize(tok, s, len, at_text_start, &pieces);
    for (size_t k = 0; k < pieces.n && st == LP_OK; k++)
        st = lp_tok_bpe_word(tok, pieces.buf.data + pieces.off[k], pieces.len[k], out);
    lp_tok_splits_free(&pieces);
    return st;
}

/* Is the character just before (or at) byte offset `at` a word character? */
static bool is_word_char(const lp_tokenizer *tok, const char *s, size_t len, size_t at,
                         bool before)
{
    size_t start = at;
    if (before) {
        if (lp_utf8_prev(s, at, &start) < 0)
            return false;
    } else if (at >= len) {
        return false;
    }
    size_t end = start;
    if (lp_utf8_next(s, len, &end) < 0 || !tok->word_re)
        return false;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(tok->word_re, NULL);
    if (!md)
        return false;
    int rc = pcre2_match(tok->word_re, (PCRE2_SPTR)s + start, end - start, 0, PCRE2_ANCHORED,
                         md, NULL);
    pcre2_match_data_free(md);
    return rc > 0;
}

typedef struct seg {
    size_t start, len;
    int32_t added; /* added-token id, or -1 for text */
} seg;

typedef struct seg_vec {
    seg *v;
    size_t n, cap;
    bool failed;
} seg_vec;

static void seg_push(seg_vec *s, size_t start, size_t len, int32_t added)
{
    if (len == 0 && added < 0)
        return;
    if (s->n == s->cap && !lp_tok_reserve((void **)&s->v, &s->cap, sizeof *s->v, 16))
        s->failed = true;
    if (s->failed)
        return;
    s->v[s->n++] = (seg){start, len, added};
}

lp_status lp_tok_prepare_added(lp_tokenizer *tok, lp_error *err)
{
    bool word = false;
    for (size_t k = 0; k < tok->n_added; k++) {
        lp_tok_added *a = &tok->added[k];
        free(a->pattern);
        a->pattern = NULL;
        lp_status st;
        if (a->normalized) {
            st = lp_tok_normalize(tok, a->content, a->len, &a->pattern, &a->pattern_len);
        } else {
            a->pattern = lp_tok_strndup(a->content, a->len);
            a->pattern_len = a->len;
            st = a->pattern ? LP_OK : LP_ERR_NOMEM;
        }
        if (st != LP_OK)
            return lp_error_set(err, st, "%s: added token '%.60s': cannot normalize it",
                                lp_path_basename(tok->path), a->content);
        word |= a->single_word;
    }
    if (word && !tok->word_re) {
        /* Rust regex's \w: Alphabetic, marks, decimal digits, connectors, joiners */
        static const char pattern[] = "[\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]";
        return lp_tok_compile_regex(pattern, strlen(pattern), &tok->word_re,
                                lp_path_basename(tok->path), err);
    }
    return LP_OK;
}

/* Split text at the added tokens whose `normalized` flag equals want_normalized, as Hugging
 * Face does: leftmost-longest matches, not overlapping; a single_word match inside a word is
 * passed over (the search goes on after it); lstrip/rstrip take the whitespace around along. */
static void split_added(const lp_tokenizer *tok, const char *text, size_t len,
                        bool want_normalized, seg_vec *out)
{
    size_t seg_start = 0, i = 0;
    while (i < len) {
        const lp_tok_added *best = NULL;
        for (size_t k = 0; k < tok->n_added; k++) {
            const lp_tok_added *a = &tok->added[k];
            if (a->normalized != want_normalized || a->pattern_len == 0 ||
                a->pattern_len > len - i || a->pattern[0] != text[i] ||
                memcmp(a->pattern, text + i, a->pattern_len) != 0)
                continue;
            if (!best || a->pattern_len > best->pattern_len)
                best = a;
        }
        if (!best) {
            i++;
            continue;
        }
        size_t start = i, end = i + best->pattern_len;
        if (best->single_word && (is_word_char(tok, text, len, start, true) ||
                                  is_word_char(tok, text, len, end, false))) {
            i = end;
            continue;
        }
        size_t at;
        if (best->lstrip)
            while (start > seg_start && lp_uc_is_space(lp_utf8_prev(text, start, &at)) &&
                   at >= seg_start)
                start = at;
        if (best->rstrip)
            while (end < len) {
                size_t next = end;
                if (!lp_uc_is_space(lp_utf8_next(text, len, &next)))
                    break;
                end = next;
            }
        seg_push(out, seg_start, start - seg_start, -1);
        seg_push(out, start, end - start, best->id);
        seg_start = i = end;
    }
    seg_push(out, seg_start, len - seg_start, -1);
}

/* ---- encode ---------------------------------------------------------------------------------- */

static lp_status encode_text(const lp_tokenizer *tok, const char *text, size_t len, lp_tok_ids *out)
{
    seg_vec raw = {0};
    split_added(tok, text, len, false, &raw);
    if (raw.failed) {
        free(raw.v);
        return LP_ERR_NOMEM;
    }
    lp_status st = LP_OK;
    for (size_t k = 0; k < raw.n && st == LP_OK; k++) {
        const seg *g = &raw.v[k];
        if (g->added >= 0) {
            lp_tok_ids_push(out, g->added);
            continue;
        }
        char *norm;
        size_t norm_len;
        st = lp_tok_normalize(tok, text + g->start, g->len, &norm, &norm_len);
        if (st != LP_OK)
            break;
        seg_vec sub = {0};
        split_added(tok, norm, norm_len, true, &sub);
        if (sub.failed)
            st = LP_ERR_NOMEM;
        for (size_t q = 0; q < sub.n && st == LP_OK; q++) {
            if (sub.v[q].added >= 0)
                lp_tok_ids_push(out, sub.v[q].added);
            else
                st = encode_segment(tok, norm + sub.v[q].start, sub.v[q].len,
                                    g->start == 0 && sub.v[q].start == 0, out);
        }
        free(sub.v);
        free(norm);
    }
    free(raw.v);
    return st;
}

lp_status lp_tokenizer_encode(const lp_tokenizer *tok, const char *text, size_t len,
                              bool add_special, int32_t **ids, size_t *n_ids, lp_error *err)
{
    LP_ASSERT(tok && ids && n_ids && (text || len == 0));
    *ids = NULL;
    *n_ids = 0;
    lp_tok_ids out = {0};
    lp_status st = LP_OK;
    if (tok->model == LP_TOK_MODEL_LLAMA2C) {
        st = lp_tok_encode_llama2c(tok, text, len, add_special, &out);
    } else {
        size_t k = 0;
        if (add_special)
            for (; k < tok->n_post && !tok->post[k].is_sequence; k++)
                for (size_t q = 0; q < tok->post[k].n_ids; q++)
                    lp_tok_ids_push(&out, tok->post[k].ids[q]);
        st = encode_text(tok, text, len, &out);
        if (add_special)
            for (k = k < tok->n_post ? k + 1 : k; k < tok->n_post; k++)
                if (!tok->post[k].is_sequence)
                    for (size_t q = 0; q < tok->post[k].n_ids; q++)
                        lp_tok_ids_push(&out, tok->post[k].ids[q]);
    }
    if (st == LP_OK && out.failed)
        st = LP_ERR_NOMEM;
    if (st != LP_OK) {
        free(out.v);
        if (st == LP_ERR_RANGE)
            return lp_error_set(err, st, "%s: text of %zu bytes is too long or pathological "
                                "for the tokenizer", lp_path_basename(tok->path), len);
        return lp_error_set(err, st, "%s: out of memory encoding %zu bytes",
                            lp_path_basename(tok->path), len);
    }
    if (!out.v) {
        out.v = malloc(sizeof *out.v); /* a valid pointer even for zero tokens */
        if (!out.v)
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    }
    *ids = out.v;
    *n_ids = out.n;
    return LP_OK;
}

