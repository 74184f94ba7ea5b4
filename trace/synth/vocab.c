/* The planted model's vocabulary: whole English words, each one token "▁word" reached by a chain of
 * BPE merges, in Llama's layout, and the tokenizer.json that encodes with it. */
#include "trace/synth/synth_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whole words of the vocabulary (each becomes "▁word" by a chain of merges). */
static const char *const WORDS[] = {
    "the",   "cat",   "sat",  "on",    "mat",  "and",   "dog",  "ran",   "to",     "park",
    ".",     ",",     "!",    "?",     "a",    "an",    "big",  "small", "red",    "blue",
    "green", "bird",  "tree", "house", "sun",  "day",   "night", "is",   "was",    "in",
    "of",    "it",    "he",   "she",   "they", "we",    "saw",  "little", "old",   "man",
    "girl",  "boy",   "ball", "with",  "his",  "her",   "went", "home",  "fish",   "ate",
    "at",    "one",   "two",  "hello", "world", "model", "head", "heads", "token", "next",
};
static const char CHARS[] = "abcdefghijklmnopqrstuvwxyz.,!?'-";
#define SPACE_MARK "\xe2\x96\x81" /* U+2581, SentencePiece's word-start mark */

const char *const *lp_synth_words(size_t *n_words)
{
    if (n_words)
        *n_words = sizeof WORDS / sizeof WORDS[0];
    return WORDS;
}


void lp_synth_vocab_free(lp_synth_vocab *v)
{
    for (int32_t i = 0; i < v->n; i++)
        free(v->pieces[i]);
    free(v->pieces);
    free(v->merges);
    free(v->is_text);
    memset(v, 0, sizeof *v);
}

static int32_t vocab_find(const lp_synth_vocab *v, const char *piece)
{
    for (int32_t i = 0; i < v->n; i++)
        if (strcmp(v->pieces[i], piece) == 0)
            return i;
    return -1;
}

static lp_status vocab_add(lp_synth_vocab *v, const char *piece, bool is_text, int32_t *id,
                           lp_error *err)
{
    int32_t found = vocab_find(v, piece);
    if (found >= 0) {
        *id = found;
        return LP_OK;
    }
    if (v->n == v->cap) {
        int32_t cap = v->cap ? v->cap * 2 : 512;
        char **p = realloc(v->pieces, (size_t)cap * sizeof *p);
        if (!p)
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory for the vocabulary");
        v->pieces = p;
        bool *t = realloc(v->is_text, (size_t)cap * sizeof *t);
        if (!t)
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory for the vocabulary");
        v->is_text = t;
        v->cap = cap;
    }
    size_t len = strlen(piece);
    char *copy = malloc(len + 1);
    if (!copy)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory for the vocabulary");
    memcpy(copy, piece, len + 1);
    v->pieces[v->n] = copy;
    v->is_text[v->n] = is_text;
    *id = v->n++;
    return LP_OK;
}

static lp_status vocab_add_merge(lp_synth_vocab *v, int32_t left, int32_t right, lp_error *err)
{
    for (int32_t i = 0; i < v->n_merges; i++)
        if (v->merges[i][0] == left && v->merges[i][1] == right)
            return LP_OK;
    if (v->n_merges == v->merges_cap) {
        int32_t cap = v->merges_cap ? v->merges_cap * 2 : 256;
        int32_t(*m)[2] = realloc(v->merges, (size_t)cap * sizeof *m);
        if (!m)
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory for the merges");
        v->merges = m;
        v->merges_cap = cap;
    }
    v->merges[v->n_merges][0] = left;
    v->merges[v->n_merges][1] = right;
    v->n_merges++;
    return LP_OK;
}

/* Llama's layout: <unk> <s> </s>, the 256 byte-fallback tokens, the word mark and characters,
 * then one token per merge. Every word's merges extend a "▁..." prefix by one character, and no
 * merge has a right side that starts with "▁", so a listed word always merges whole. */
lp_status lp_synth_vocab_build(lp_synth_vocab *v, lp_error *err)
{
    int32_t id;
    lp_status st;
    static const char *const specials[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++)
        if ((st = vocab_add(v, specials[i], false, &id, err)) != LP_OK)
            return st;
    for (int b = 0; b < 256; b++) {
        char piece[8];
        snprintf(piece, sizeof piece, "<0x%02X>", b);
        if ((st = vocab_add(v, piece, false, &id, err)) != LP_OK)
            return st;
    }
    if ((st = vocab_add(v, SPACE_MARK, true, &id, err)) != LP_OK)
        return st;
    for (const char *c = CHARS; *c; c++) {
        char piece[2] = {*c, 0};
        if ((st = vocab_add(v, piece, true, &id, err)) != LP_OK)
            return st;
    }
    for (size_t w = 0; w < sizeof WORDS / sizeof WORDS[0]; w++) {
        char prefix[64] = SPACE_MARK;
        for (const char *c = WORDS[w]; *c; c++) {
            char ch[2] = {*c, 0}, merged[64];
            size_t len = strlen(prefix);
            LP_ASSERT(len + 2 <= sizeof merged); /* WORDS are short */
            memcpy(merged, prefix, len);
            merged[len] = *c;
            merged[len + 1] = '\0';
            int32_t left = vocab_find(v, prefix), right = vocab_find(v, ch);
            LP_ASSERT(left >= 0 && right >= 0); /* WORDS only use CHARS */
            if ((st = vocab_add(v, merged, true, &id, err)) != LP_OK ||
                (st = vocab_add_merge(v, left, right, err)) != LP_OK)
                return st;
            memcpy(prefix, merged, sizeof prefix);
        }
    }
    return LP_OK;
}

static json_t *special_token(int32_t id, const char *content)
{
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", (int)id, "content",
                     content, "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
                     "special", 1);
}

/* The BPE model: the vocabulary and its merges by rank, with byte fallback. */
static json_t *bpe_model(const lp_synth_vocab *v, bool *ok)
{
    /* NULLs from jansson end in lp_synth_put or lp_synth_append, which clear *ok. */
    json_t *model = json_object(), *vmap = json_object(), *merges = json_array();
    lp_synth_put(model, "type", json_string("BPE"), ok);
    lp_synth_put(model, "dropout", json_null(), ok);
    lp_synth_put(model, "unk_token", json_string("<unk>"), ok);
    lp_synth_put(model, "continuing_subword_prefix", json_null(), ok);
    lp_synth_put(model, "end_of_word_suffix", json_null(), ok);
    lp_synth_put(model, "fuse_unk", json_true(), ok);
    lp_synth_put(model, "byte_fallback", json_true(), ok);
    lp_synth_put(model, "ignore_merges", json_false(), ok);
    for (int32_t i = 0; i < v->n; i++)
        lp_synth_put(vmap, v->pieces[i], json_integer(i), ok);
    for (int32_t i = 0; i < v->n_merges; i++) {
        const char *a = v->pieces[v->merges[i][0]], *b = v->pieces[v->merges[i][1]];
        size_t len = strlen(a) + strlen(b) + 2;
        char *pair = malloc(len);
        if (!pair) {
            *ok = false;
            break;
        }
        snprintf(pair, len, "%s %s", a, b);
        lp_synth_append(merges, json_string(pair), ok);
        free(pair);
    }
    lp_synth_put(model, "vocab", vmap, ok);
    lp_synth_put(model, "merges", merges, ok);
    return model;
}

json_t *lp_synth_tokenizer_json(const lp_synth_vocab *v, bool *ok)
{
    json_t *t = json_object();
    if (!t) {
        *ok = false;
        return NULL;
    }
    lp_synth_put(t, "version", json_string("1.0"), ok);
    lp_synth_put(t, "truncation", json_null(), ok);
    lp_synth_put(t, "padding", json_null(), ok);
    json_t *added = json_array();
    if (added) {
        lp_synth_append(added, special_token(LP_SYNTH_TOKEN_UNK, "<unk>"), ok);
        lp_synth_append(added, special_token(LP_SYNTH_TOKEN_BOS, "<s>"), ok);
        lp_synth_append(added, special_token(LP_SYNTH_TOKEN_EOS, "</s>"), ok);
    }
    lp_synth_put(t, "added_tokens", added, ok);
    /* SentencePiece without its model file: "▁" before the text and for every space. */
    lp_synth_put(t, "normalizer",
        json_pack("{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}", "type", "Sequence",
                  "normalizers", "type", "Prepend", "prepend", SPACE_MARK, "type", "Replace",
                  "pattern", "String", " ", "content", SPACE_MARK),
        ok);
    lp_synth_put(t, "pre_tokenizer", json_null(), ok);
    lp_synth_put(t, "post_processor",
        json_pack("{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}],"
                  " s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}}],"
                  " s:{s:{s:s, s:[i], s:[s]}}}",
                  "type", "TemplateProcessing", "single", "SpecialToken", "id", "<s>", "type_id",
                  0, "Sequence", "id", "A", "type_id", 0, "pair", "SpecialToken", "id", "<s>",
                  "type_id", 0, "Sequence", "id", "A", "type_id", 0, "SpecialToken", "id", "<s>",
                  "type_id", 1, "Sequence", "id", "B", "type_id", 1, "special_tokens", "<s>",
                  "id", "<s>", "ids", LP_SYNTH_TOKEN_BOS, "tokens", "<s>"),
        ok);
    lp_synth_put(t, "decoder",
        json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}, {s:s, s:s, s:i, s:i}]}", "type",
                  "Sequence", "decoders", "type", "Replace", "pattern", "String", SPACE_MARK,
                  "content", " ", "type", "ByteFallback", "type", "Fuse", "type", "Strip",
                  "content", " ", "start", 1, "stop", 0),
        ok);
    lp_synth_put(t, "model", bpe_model(v, ok), ok);
    return t;
}
