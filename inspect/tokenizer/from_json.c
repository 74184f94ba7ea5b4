/* Hugging Face tokenizer.json: reads the model (BPE), added tokens, normalizer, pre-tokenizer,
 * post-processor and decoder into the shared pipeline of tokenizer_internal.h. */
#include "inspect/tokenizer/tokenizer_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"
#include "core/names.h"

typedef struct jctx {
    const char *name; /* file name for messages */
    lp_error *err;
    lp_tokenizer *tok;
} jctx;

static lp_status nomem(jctx *c)
{
    return lp_error_set(c->err, LP_ERR_NOMEM, "%s: out of memory", c->name);
}

static const char *jstr(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool jbool(const json_t *obj, const char *key, bool dflt)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* A {"String": s} or {"Regex": r} pattern into a literal or a compiled regex. */
static lp_status read_pattern(jctx *c, const json_t *pattern, const char *where, char **lit,
                              size_t *lit_len, pcre2_code **re)
{
    const json_t *s = json_object_get(pattern, "String");
    const json_t *r = json_object_get(pattern, "Regex");
    if (json_is_string(s)) {
        *lit = lp_tok_strndup(json_string_value(s), json_string_length(s));
        *lit_len = json_string_length(s);
        return *lit ? LP_OK : nomem(c);
    }
    if (json_is_string(r)) {
        char buf[200];
        snprintf(buf, sizeof buf, "%s: %s", c->name, where);
        return lp_tok_compile_regex(json_string_value(r), json_string_length(r), re, buf, c->err);
    }
    return lp_error_set(c->err, LP_ERR_FORMAT, "%s: %s.pattern: want {\"String\": ...} or "
                        "{\"Regex\": ...}", c->name, where);
}

/* ---- the pipeline steps ---- */

typedef lp_status (*step_reader)(jctx *c, const json_t *n, const char *where);

/* What every step reader (normalizer, pre-tokenizer, post-processor, decoder) starts with: none
 * (absent or null), an object with a "type", or a Sequence whose list (list_key) is read item by
 * item with read. *type is NULL when nothing is left to read. */
static lp_status read_step(jctx *c, const json_t *n, const char *where, const char *list_key,
                           step_reader read, const char **type)
{
    *type = NULL;
    if (json_is_null(n) || !n)
        return LP_OK;
    const char *t = jstr(n, "type");
    if (!json_is_object(n) || !t)
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: %s: an object with a \"type\" expected",
                            c->name, where);
    if (strcmp(t, "Sequence") != 0) {
        *type = t;
        return LP_OK;
    }
    size_t i;
    const json_t *item;
    json_array_foreach(json_object_get(n, list_key), i, item)
    {
        char sub[160];
        snprintf(sub, sizeof sub, "%s.%s[%zu]", where, list_key, i);
        lp_status st = read(c, item, sub);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

/* A step's "type" among its kinds (-1 when unknown). */
typedef struct kind_name {
    const char *name;
    int kind;
} kind_name;

static int kind_of(const char *type, const kind_name *names, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (strcmp(type, names[k].name) == 0)
            return names[k].kind;
    return -1;
}

/* The refusal of a step type that is none of names (nor of also: the types the caller reads
 * before it looks in names), listing what is read from the table itself. */
static lp_status unsupported_kind(jctx *c, const char *step, const char *where, const char *type,
                                  const kind_name *names, size_t n, const char *also)
{
    char list[256] = "";
    for (size_t k = 0; k < n; k++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s, ", names[k].name);
    return lp_error_set(c->err, LP_ERR_UNSUPPORTED, "%s: %s: %s type '%s' is not supported "
                        "(%s%s are)", c->name, where, step, type, list, also);
}

/* ---- normalizers ---- */

/* The options of Prepend (the prefix), Replace (content and pattern) and Strip. */
static lp_status read_norm_options(jctx *c, const json_t *n, const char *where, lp_tok_norm *norm)
{
    if (norm->kind == LP_TOK_NORM_PREPEND) {
        const json_t *p = json_object_get(n, "prepend");
        if (!json_is_string(p))
            return lp_error_set(c->err, LP_ERR_FORMAT, "%s: %s.prepend: a string expected",
                                c->name, where);
        norm->pattern = lp_tok_strndup(json_string_value(p), json_string_length(p));
        norm->pattern_len = json_string_length(p);
        return norm->pattern ? LP_OK : nomem(c);
    }
    if (norm->kind == LP_TOK_NORM_REPLACE) {
        const json_t *content = json_object_get(n, "content");
        if (!json_is_string(content))
            return lp_error_set(c->err, LP_ERR_FORMAT, "%s: %s.content: a string expected",
                                c->name, where);
        norm->content = lp_tok_strndup(json_string_value(content), json_string_length(content));
        norm->content_len = json_string_length(content);
        if (!norm->content)
            return nomem(c);
        return read_pattern(c, json_object_get(n, "pattern"), where, &norm->pattern,
                            &norm->pattern_len, &norm->re);
    }
    if (norm->kind == LP_TOK_NORM_STRIP) {
        norm->strip_left = jbool(n, "strip_left", true);
        norm->strip_right = jbool(n, "strip_right", true);
    }
    return LP_OK;
}

static lp_tok_norm *add_norm(jctx *c, lp_tok_norm_kind kind)
{
    lp_tok_norm *norm = lp_tok_append((void **)&c->tok->norms, &c->tok->n_norms, sizeof *norm);
    if (norm)
        norm->kind = kind;
    return norm;
}

/* A Replace of every match of regex by content (BertNormalizer's steps). */
static lp_status add_regex_norm(jctx *c, const char *regex, const char *content, const char *where)
{
    lp_tok_norm *norm = add_norm(c, LP_TOK_NORM_REPLACE);
    if (!norm || !(norm->content = lp_tok_strndup(content, strlen(content))))
        return nomem(c);
    norm->content_len = strlen(content);
    char buf[200];
    snprintf(buf, sizeof buf, "%s: %s", c->name, where);
    return lp_tok_compile_regex(regex, strlen(regex), &norm->re, buf, c->err);
}

/* BertNormalizer as the steps it is made of, in Hugging Face's order: clean_text drops NUL,
 * U+FFFD and the other (C*) characters but tab, LF and CR, then turns whitespace into " ";
 * handle_chinese_chars spaces ideographs apart; strip_accents (null: as lowercase) is NFD
 * without the nonspacing marks (Mn); then lowercase. */
static lp_status bert_normalizer(jctx *c, const json_t *n, const char *where)
{
    bool lowercase = jbool(n, "lowercase", true);
    const json_t *strip = json_object_get(n, "strip_accents");
    bool strip_accents = json_is_boolean(strip) ? json_is_true(strip) : lowercase;
    lp_status st;
    if (jbool(n, "clean_text", true) &&
        ((st = add_regex_norm(c, "(?![\\t\\n\\r])[\\x{FFFD}\\p{C}]", "", where)) != LP_OK ||
         (st = add_regex_norm(c, "\\s", " ", where)) != LP_OK))
        return st;
    if (jbool(n, "handle_chinese_chars", true) && !add_norm(c, LP_TOK_NORM_CJK_SPACES))
        return nomem(c);
    if (strip_accents) {
        if (!add_norm(c, LP_TOK_NORM_NFD))
            return nomem(c);
        if ((st = add_regex_norm(c, "\\p{Mn}", "", where)) != LP_OK)
            return st;
    }
    if (lowercase && !add_norm(c, LP_TOK_NORM_LOWERCASE))
        return nomem(c);
    return LP_OK;
}

/* Standard base64 (padding optional) into out, which holds len * 3 / 4 + 3 bytes; false at a
 * byte outside the alphabet. */
static bool base64_decode(const char *s, size_t len, unsigned char *out, size_t *out_len)
{
    uint32_t acc = 0;
    int bits = 0;
    size_t n = 0;
    for (size_t i = 0; i < len && s[i] != '='; i++) {
        const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const char *at = s[i] ? strchr(alphabet, s[i]) : NULL;
        if (!at)
            return false;
        acc = (acc << 6) | (uint32_t)(at - alphabet);
        if ((bits += 6) >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(acc >> bits);
        }
    }
    *out_len = n;
    return true;
}

/* SentencePiece's compiled normalization rules, base64 in precompiled_charsmap: an empty map
 * changes nothing; any other is walked by grapheme cluster as Hugging Face does. */
static lp_status precompiled_normalizer(jctx *c, const json_t *n, const char *where)
{
    const json_t *map = json_object_get(n, "precompiled_charsmap");
    if (json_is_null(map) || !map || (json_is_string(map) && json_string_length(map) == 0))
        return LP_OK;
    if (!json_is_string(map))
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: %s.precompiled_charsmap: a base64 "
                            "string expected", c->name, where);
    size_t len = json_string_length(map), blob_len;
    lp_tok_norm *norm = add_norm(c, LP_TOK_NORM_PRECOMPILED);
    if (!norm || !(norm->pattern = malloc(len / 4 * 3 + 3)))
        return nomem(c);
    if (!base64_decode(json_string_value(map), len, (unsigned char *)norm->pattern, &blob_len))
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: %s.precompiled_charsmap: not base64",
                            c->name, where);
    norm->pattern_len = blob_len;
    if (!lp_tok_charsmap_fits(norm->pattern, blob_len))
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: %s.precompiled_charsmap: %zu bytes "
                            "cannot hold the trie their first 4 bytes announce and the strings "
                            "after it", c->name, where, blob_len);
    char buf[200];
    snprintf(buf, sizeof buf, "%s: %s", c->name, where);
    return lp_tok_compile_regex("\\X", 2, &norm->re, buf, c->err);
}

static lp_status read_normalizer(jctx *c, const json_t *n, const char *where)
{
    const char *type;
    lp_status st = read_step(c, n, where, "normalizers", read_normalizer, &type);
    if (st != LP_OK || !type)
        return st;
    lp_tokenizer *tok = c->tok;
    if (strcmp(type, "BertNormalizer") == 0)
        return bert_normalizer(c, n, where);
    if (strcmp(type, "Precompiled") == 0)
        return precompiled_normalizer(c, n, where);
    static const kind_name simple[] = {
        {"NFC", LP_TOK_NORM_NFC},           {"NFD", LP_TOK_NORM_NFD},
        {"NFKC", LP_TOK_NORM_NFKC},         {"NFKD", LP_TOK_NORM_NFKD},
        {"Lowercase", LP_TOK_NORM_LOWERCASE}, {"Prepend", LP_TOK_NORM_PREPEND},
        {"Replace", LP_TOK_NORM_REPLACE},   {"Strip", LP_TOK_NORM_STRIP},
        {"ByteLevel", LP_TOK_NORM_BYTELEVEL}};
    int kind = kind_of(type, simple, sizeof simple / sizeof simple[0]);
    if (kind < 0)
        return unsupported_kind(c, "normalizer", where, type, simple,
                                sizeof simple / sizeof simple[0],
                                "BertNormalizer, Precompiled, Sequence");
    lp_tok_norm *norm = lp_tok_append((void **)&tok->norms, &tok->n_norms, sizeof *norm);
    if (!norm)
        return nomem(c);
    norm->kind = (lp_tok_norm_kind)kind;
    return read_norm_options(c, n, where, norm);
}

/* ---- pre-tokenizers ---- */

static int behavior_of(const char *s)
{
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                        "MergedWithNext", "Contiguous"};
    for (int k = 0; k < LP_TOK_SPLIT_COUNT; k++)
        if (s && strcmp(s, names[k]) == 0)
            return k;
    return -1;
}

static int prepend_scheme_of(const json_t *obj)
{
    const char *scheme = jstr(obj, "prepend_scheme");
    if (scheme) {
        static const lp_name_entry schemes[] = {
            {LP_TOK_PREPEND_ALWAYS, "always"},
            {LP_TOK_PREPEND_FIRST, "first"},
            {LP_TOK_PREPEND_NEVER, "never"},
        };
        int prepend;
        return lp_names_value(schemes, LP_NAMES_LEN(schemes), scheme, false, &prepend) ? prepend
                                                                                       : -1;
    }
    /* the older serialization: add_prefix_space */
    return jbool(obj, "add_prefix_space", true) ? LP_TOK_PREPEND_ALWAYS : LP_TOK_PREPEND_NEVER;
}

static lp_status add_regex_pre(jctx *c, lp_tok_pre_kind kind, const char *regex,
                               lp_tok_split_behavior behavior, bool invert, const char *where)
{
    lp_tokenizer *tok = c->tok;
    lp_tok_pre *p = lp_tok_append((void **)&tok->pres, &tok->n_pres, sizeof *p);
    if (!p)
        return nomem(c);
    p->kind = kind;
    p->behavior = behavior;
    p->invert = invert;
    char buf[200];
    snprintf(buf, sizeof buf, "%s: %s", c->name, where);
    return lp_tok_compile_regex(regex, strlen(regex), &p->re, buf, c->err);
}

static lp_status pre_bytelevel(jctx *c, const json_t *n, const char *where)
{
    lp_tok_pre *p = lp_tok_append((void **)&c->tok->pres, &c->tok->n_pres, sizeof *p);
    if (!p)
        return nomem(c);
    p->kind = LP_TOK_PRE_BYTELEVEL;
    p->add_prefix_space = jbool(n, "add_prefix_space", true); /* HF defaults */
    p->use_regex = jbool(n, "use_regex", true);
    if (!p->use_regex)
        return LP_OK;
    char buf[200];
    snprintf(buf, sizeof buf, "%s: %s", c->name, where);
    return lp_tok_compile_regex(lp_tok_regex_gpt2, strlen(lp_tok_regex_gpt2), &p->re, buf, c->err);
}

static lp_status pre_split(jctx *c, const json_t *n, const char *where)
{
    int behavior = behavior_of(jstr(n, "behavior"));
    if (behavior < 0)
        return lp_error_set(c->err, LP_ERR_UNSUPPORTED, "%s: %s.behavior: '%s' is not one of "
                            "Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                            "Contiguous", c->name, where,
                            jstr(n, "behavior") ? jstr(n, "behavior") : "(missing)");
    lp_tok_pre *p = lp_tok_append((void **)&c->tok->pres, &c->tok->n_pres, sizeof *p);
    if (!p)
        return nomem(c);
    p->kind = LP_TOK_PRE_SPLIT;
    p->behavior = (lp_tok_split_behavior)behavior;
    p->invert = jbool(n, "invert", false);
    return read_pattern(c, json_object_get(n, "pattern"), where, &p->pattern, &p->pattern_len,
                        &p->re);
}

static lp_status pre_metaspace(jctx *c, const json_t *n, const char *where)
{
    int scheme = prepend_scheme_of(n);
    if (scheme < 0)
        return lp_error_set(c->err, LP_ERR_UNSUPPORTED, "%s: %s.prepend_scheme: '%s' is not "
                            "always, first or never", c->name, where, jstr(n, "prepend_scheme"));
    lp_tok_pre *p = lp_tok_append((void **)&c->tok->pres, &c->tok->n_pres, sizeof *p);
    if (!p)
        return nomem(c);
    p->kind = LP_TOK_PRE_METASPACE;
    const char *rep = jstr(n, "replacement");
    if (!rep)
        rep = "\xE2\x96\x81"; /* U+2581 */
    size_t rl = strlen(rep);
    if (rl == 0 || rl >= sizeof p->replacement)
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: %s.replacement: '%s' is not one "
                            "character", c->name, where, rep);
    memcpy(p->replacement, rep, rl);
    p->replacement_len = rl;
    p->prepend_scheme = (lp_tok_prepend_scheme)scheme;
    p->split = jbool(n, "split", true);
    return LP_OK;
}

static const char PUNCTUATION[] = "[\\p{P}!-/:-@\\[-`{-~]";

/* Punctuation (with its behavior) and BertPreTokenizer (whitespace, then punctuation). */
static lp_status pre_punctuation(jctx *c, const json_t *n, const char *where, bool bert)
{
    lp_status st;
    if (bert && (st = add_regex_pre(c, LP_TOK_PRE_WHITESPACE_SPLIT, "\\s+", LP_TOK_SPLIT_REMOVED,
                                    false, where)) != LP_OK)
        return st;
    const char *b = bert ? NULL : jstr(n, "behavior");
    int behavior = b ? behavior_of(b) : LP_TOK_SPLIT_ISOLATED;
    if (behavior < 0)
        return lp_error_set(c->err, LP_ERR_UNSUPPORTED, "%s: %s.behavior: '%s' unknown", c->name,
                            where, b);
    return add_regex_pre(c, LP_TOK_PRE_PUNCTUATION, PUNCTUATION, (lp_tok_split_behavior)behavior,
                         false, where);
}

static lp_status read_pre(jctx *c, const json_t *n, const char *where)
{
    const char *type;
    lp_status st = read_step(c, n, where, "pretokenizers", read_pre, &type);
    if (st != LP_OK || !type)
        return st;
    if (strcmp(type, "ByteLevel") == 0)
        return pre_bytelevel(c, n, where);
    if (strcmp(type, "Split") == 0)
        return pre_split(c, n, where);
    if (strcmp(type, "Metaspace") == 0)
        return pre_metaspace(c, n, where);
    if (strcmp(type, "Whitespace") == 0)
        return add_regex_pre(c, LP_TOK_PRE_WHITESPACE, "\\w+|[^\\w\\s]+", LP_TOK_SPLIT_REMOVED,
                             true, where);
    if (strcmp(type, "WhitespaceSplit") == 0)
        return add_regex_pre(c, LP_TOK_PRE_WHITESPACE_SPLIT, "\\s+", LP_TOK_SPLIT_REMOVED, false,
                             where);
    if (strcmp(type, "Digits") == 0)
        return add_regex_pre(c, LP_TOK_PRE_DIGITS, "\\p{N}",
                             jbool(n, "individual_digits", false) ? LP_TOK_SPLIT_ISOLATED
                                                                  : LP_TOK_SPLIT_CONTIGUOUS,
                             false, where);
    if (strcmp(type, "Punctuation") == 0 || strcmp(type, "BertPreTokenizer") == 0)
        return pre_punctuation(c, n, where, strcmp(type, "BertPreTokenizer") == 0);
    return lp_error_set(c->err, LP_ERR_UNSUPPORTED, "%s: %s: pre-tokenizer type '%s' is not "
                        "supported (ByteLevel, Split, Metaspace, Whitespace, WhitespaceSplit, "
                        "Digits, Punctuation, BertPreTokenizer, Sequence are)", c->name, where,
                        type);
}

/* ---- post-processors ---- */

static lp_status add_post_ids(jctx *c, const int32_t *ids, size_t n, bool is_sequence)
{
    lp_tokenizer *tok = c->tok;
    lp_tok_post_item *item = lp_tok_append((void **)&tok->post, &tok->n_post, sizeof *item);
    if (!item)
        return nomem(c);
    item->is_sequence = is_sequence;
    if (n) {
        item->ids = malloc(n * sizeof *item->ids);
        if (!item->ids)
            return nomem(c);
        memcpy(item->ids, ids, n * sizeof *ids);
        item->n_ids = n;
    }
    return LP_OK;
}

static lp_status check_id(jctx *c, json_int_t id, const char *where)
{
    if (id < 0 || id >= c->tok->n_vocab)
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: %s: token id %lld outside the "
                            "vocabulary [0, %lld)", c->name, where, (long long)id,
                            (long long)c->tok->n_vocab);
    return LP_OK;
}

/* One item of TemplateProcessing's "single": the sequence, or a special token's ids. */
static lp_status post_template_item(jctx *c, const json_t *item, const json_t *specials,
                                    size_t i, const char *where)
{
    const json_t *sp = json_object_get(item, "SpecialToken");
    if (json_object_get(item, "Sequence"))
        return add_post_ids(c, NULL, 0, true);
    if (!sp)
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: %s.single[%zu]: neither "
                            "SpecialToken nor Sequence", c->name, where, i);
    const char *name = jstr(sp, "id");
    const json_t *def = name ? json_object_get(specials, name) : NULL;
    const json_t *ids = json_object_get(def, "ids");
    if (!json_is_array(ids))
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: %s.single[%zu]: special token '%s' has "
                            "no ids in special_tokens", c->name, where, i,
                            name ? name : "(missing)");
    size_t n_ids = json_array_size(ids);
    int32_t *buf = malloc((n_ids ? n_ids : 1) * sizeof *buf);
    if (!buf)
        return nomem(c);
    lp_status st = LP_OK;
    for (size_t q = 0; q < n_ids && st == LP_OK; q++) {
        json_int_t id = json_integer_value(json_array_get(ids, q));
        st = check_id(c, id, where);
        buf[q] = (int32_t)id;
    }
    if (st == LP_OK)
        st = add_post_ids(c, buf, n_ids, false);
    free(buf);
    return st;
}

static lp_status post_template(jctx *c, const json_t *n, const char *where)
{
    const json_t *single = json_object_get(n, "single");
    if (!json_is_array(single))
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: %s.single: an array expected", c->name,
                            where);
    size_t i;
    const json_t *item;
    json_array_foreach(single, i, item)
    {
        lp_status st = post_template_item(c, item, json_object_get(n, "special_tokens"), i, where);
        if (st != LP_OK)
            return st;
    }
    c->tok->has_template = true;
    return LP_OK;
}

/* BertProcessing and RobertaProcessing: "cls": [token, id], "sep": [token, id]: [CLS] A [SEP] */
static lp_status post_bert(jctx *c, const json_t *n, const char *where)
{
    const json_t *cls = json_array_get(json_object_get(n, "cls"), 1);
    const json_t *sep = json_array_get(json_object_get(n, "sep"), 1);
    if (!json_is_integer(cls) || !json_is_integer(sep))
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: %s: cls/sep: [token, id] expected",
                            c->name, where);
    json_int_t cls_id = json_integer_value(cls), sep_id = json_integer_value(sep);
    lp_status st = check_id(c, cls_id, where);
    if (st == LP_OK)
        st = check_id(c, sep_id, where);
    int32_t a = (int32_t)cls_id, b = (int32_t)sep_id;
    if (st == LP_OK)
        st = add_post_ids(c, &a, 1, false);
    if (st == LP_OK)
        st = add_post_ids(c, NULL, 0, true);
    if (st == LP_OK)
        st = add_post_ids(c, &b, 1, false);
    c->tok->has_template = true;
    return st;
}

static lp_status read_post(jctx *c, const json_t *n, const char *where)
{
    const char *type;
    lp_status st = read_step(c, n, where, "processors", read_post, &type);
    if (st != LP_OK || !type || strcmp(type, "ByteLevel") == 0) /* ByteLevel: offsets only */
        return st;
    if (c->tok->has_template)
        return lp_error_set(c->err, LP_ERR_UNSUPPORTED, "%s: %s: a second post-processor that "
                            "adds tokens", c->name, where);
    if (strcmp(type, "TemplateProcessing") == 0)
        return post_template(c, n, where);
    if (strcmp(type, "BertProcessing") == 0 || strcmp(type, "RobertaProcessing") == 0)
        return post_bert(c, n, where);
    return lp_error_set(c->err, LP_ERR_UNSUPPORTED, "%s: %s: post-processor type '%s' is not "
                        "supported (TemplateProcessing, ByteLevel, BertProcessing, "
                        "RobertaProcessing, Sequence are)", c->name, where, type);
}

/* ---- decoders ---- */

static lp_status set_str(jctx *c, const json_t *v, char **out, size_t *out_len, const char *dflt)
{
    const char *s = json_is_string(v) ? json_string_value(v) : dflt;
    size_t len = json_is_string(v) ? json_string_length(v) : strlen(dflt);
    *out = lp_tok_strndup(s, len);
    *out_len = len;
    return *out ? LP_OK : nomem(c);
}

/* The options of Metaspace, Replace (literal patterns only), Strip, BPEDecoder, WordPiece. */
static lp_status read_decoder_options(jctx *c, const json_t *n, const char *where, lp_tok_dec *d)
{
    lp_status st;
    switch (d->kind) {
    case LP_TOK_DEC_METASPACE: {
        int scheme = prepend_scheme_of(n);
        d->prepend_scheme = scheme < 0 ? LP_TOK_PREPEND_ALWAYS : (lp_tok_prepend_scheme)scheme;
        return set_str(c, json_object_get(n, "replacement"), &d->pattern, &d->pattern_len,
                       "\xE2\x96\x81");
    }
    case LP_TOK_DEC_REPLACE: {
        const json_t *pat = json_object_get(n, "pattern");
        const json_t *lit = json_object_get(pat, "String");
        if (!json_is_string(lit))
            return lp_error_set(c->err, LP_ERR_UNSUPPORTED, "%s: %s.pattern: only {\"String\": "
                                "...} patterns are supported in decoders", c->name, where);
        st = set_str(c, lit, &d->pattern, &d->pattern_len, "");
        if (st == LP_OK)
            st = set_str(c, json_object_get(n, "content"), &d->content, &d->content_len, "");
        return st;
    }
    case LP_TOK_DEC_STRIP: {
        const json_t *start = json_object_get(n, "start"), *stop = json_object_get(n, "stop");
        d->start = json_is_integer(start) ? json_integer_value(start) : 0;
        d->stop = json_is_integer(stop) ? json_integer_value(stop) : 0;
        return set_str(c, json_object_get(n, "content"), &d->content, &d->content_len, " ");
    }
    case LP_TOK_DEC_BPE_SUFFIX:
        return set_str(c, json_object_get(n, "suffix"), &d->pattern, &d->pattern_len, "</w>");
    case LP_TOK_DEC_WORDPIECE:
        d->cleanup = jbool(n, "cleanup", true);
        return set_str(c, json_object_get(n, "prefix"), &d->pattern, &d->pattern_len, "##");
    default:
        return LP_OK;
    }
}

static lp_status read_decoder(jctx *c, const json_t *n, const char *where)
{
    const char *type;
    lp_status st = read_step(c, n, where, "decoders", read_decoder, &type);
    if (st != LP_OK || !type)
        return st;
    lp_tokenizer *tok = c->tok;
    static const kind_name kinds[] = {
        {"ByteLevel", LP_TOK_DEC_BYTELEVEL},   {"Metaspace", LP_TOK_DEC_METASPACE},
        {"Replace", LP_TOK_DEC_REPLACE},       {"ByteFallback", LP_TOK_DEC_BYTEFALLBACK},
        {"Fuse", LP_TOK_DEC_FUSE},             {"Strip", LP_TOK_DEC_STRIP},
        {"BPEDecoder", LP_TOK_DEC_BPE_SUFFIX}, {"WordPiece", LP_TOK_DEC_WORDPIECE}};
    int kind = kind_of(type, kinds, sizeof kinds / sizeof kinds[0]);
    if (kind < 0)
        return unsupported_kind(c, "decoder", where, type, kinds, sizeof kinds / sizeof kinds[0],
                                "Sequence");
    lp_tok_dec *d = lp_tok_append((void **)&tok->decs, &tok->n_decs, sizeof *d);
    if (!d)
        return nomem(c);
    d->kind = (lp_tok_dec_kind)kind;
    return read_decoder_options(c, n, where, d);
}

/* ---- model and added tokens ---- */

static lp_status read_merge(jctx *c, const json_t *m, size_t index, const char **a,
                            size_t *a_len, const char **b, size_t *b_len)
{
    if (json_is_string(m)) {
        /* "a b": the first space after the first byte separates (pieces almost never hold a
         * plain space; a first piece that is one is still read right) */
        const char *s = json_string_value(m);
        size_t len = json_string_length(m);
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp)
            return lp_error_set(c->err, LP_ERR_FORMAT, "%s: model.merges[%zu]: '%.60s' has no "
                                "space between its two tokens", c->name, index, s);
        *a = s, *a_len = (size_t)(sp - s);
        *b = sp + 1, *b_len = len - *a_len - 1;
        return LP_OK;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *a_len = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *b_len = json_string_length(json_array_get(m, 1));
        return LP_OK;
    }
    return lp_error_set(c->err, LP_ERR_FORMAT, "%s: model.merges[%zu]: want \"a b\" or "
                        "[\"a\", \"b\"]", c->name, index);
}

/* model.type, or for old files without one what Hugging Face's untagged reading settles on: a
 * vocab with merges is BPE (GPT-2's), a vocab array Unigram, a vocab object without merges
 * WordPiece (bert-base-uncased's). NULL when model is not an object. */
static const char *model_type(const json_t *model)
{
    if (!json_is_object(model))
        return NULL;
    const char *type = jstr(model, "type");
    if (type)
        return type;
    if (json_is_array(json_object_get(model, "merges")))
        return "BPE";
    if (json_is_array(json_object_get(model, "vocab")))
        return "Unigram";
    return json_is_object(json_object_get(model, "vocab")) ? "WordPiece" : NULL;
}

/* A BPE or WordPiece model. */
static lp_status check_model(jctx *c, const json_t *model)
{
    if (!json_is_object(model))
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: model: an object expected", c->name);
    const char *type = model_type(model);
    if (type && strcmp(type, "BPE") != 0 && strcmp(type, "WordPiece") != 0)
        return lp_error_set(c->err, LP_ERR_UNSUPPORTED, "%s: model.type '%s' is not supported "
                            "(BPE, WordPiece and Unigram are)", c->name, type);
    if (!json_is_object(json_object_get(model, "vocab")))
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: model.vocab: an object expected",
                            c->name);
    return LP_OK;
}

/* Ids a vocabulary may use beyond its file size: Hugging Face's vocab is a map, so ids may leave
 * holes (a vocabulary cut down for tests keeps 900 of Llama 3's 128,256 ids in 90 KB); 2^20 ids
 * cost at most ~16 MB of tables. */
#define SPARSE_ID_LIMIT ((size_t)1 << 20)

/* The vocabulary's size: the largest id of the vocab and the added tokens, each bounded by the
 * file size (or SPARSE_ID_LIMIT) before anything is allocated. */
static lp_status vocab_size(jctx *c, const json_t *vocab, const json_t *added, size_t file_size,
                            int64_t *n_vocab)
{
    if (file_size < SPARSE_ID_LIMIT)
        file_size = SPARSE_ID_LIMIT;
    json_int_t max_id = -1;
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)vocab, key, value)
    {
        json_int_t id = json_integer_value(value);
        if (!json_is_integer(value) || id < 0 || (uint64_t)id >= file_size)
            return lp_error_set(c->err, LP_ERR_FORMAT, "%s: model.vocab['%.60s']: id %lld is not "
                                "an integer in [0, %zu)", c->name, key, (long long)id, file_size);
        max_id = id > max_id ? id : max_id;
    }
    size_t i;
    const json_t *item;
    json_array_foreach(added, i, item)
    {
        const json_t *id = json_object_get(item, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            (uint64_t)json_integer_value(id) >= file_size ||
            !json_is_string(json_object_get(item, "content")))
            return lp_error_set(c->err, LP_ERR_FORMAT, "%s: added_tokens[%zu]: want an integer "
                                "id in [0, %zu) and a string content", c->name, i, file_size);
        max_id = json_integer_value(id) > max_id ? json_integer_value(id) : max_id;
    }
    *n_vocab = (int64_t)max_id + 1;
    return LP_OK;
}

static lp_status read_vocab(jctx *c, const json_t *vocab)
{
    lp_tokenizer *tok = c->tok;
    for (void *iter = json_object_iter((json_t *)vocab); iter;
         iter = json_object_iter_next((json_t *)vocab, iter)) {
        const char *k = json_object_iter_key(iter);
        size_t klen = json_object_iter_key_len(iter);
        int32_t id = (int32_t)json_integer_value(json_object_iter_value(iter));
        if (tok->pieces[id])
            return lp_error_set(c->err, LP_ERR_FORMAT, "%s: model.vocab: id %d is given to both "
                                "'%.60s' and '%.60s'", c->name, id, tok->pieces[id], k);
        lp_status st = lp_tok_set_piece(tok, id, k, klen, c->err);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

/* One added token: matched in text before the model; one outside the vocab gets a piece (only
 * the added-token pass yields it, Qwen3's), one with other content renames its id. */
static lp_status read_added_token(jctx *c, const json_t *item)
{
    lp_tokenizer *tok = c->tok;
    const json_t *content = json_object_get(item, "content");
    int32_t id = (int32_t)json_integer_value(json_object_get(item, "id"));
    lp_tok_added *a = &tok->added[tok->n_added++];
    a->len = json_string_length(content);
    if (!(a->content = lp_tok_strndup(json_string_value(content), a->len)))
        return nomem(c);
    a->id = id;
    a->special = jbool(item, "special", false);
    a->lstrip = jbool(item, "lstrip", false);
    a->rstrip = jbool(item, "rstrip", false);
    a->single_word = jbool(item, "single_word", false);
    a->normalized = jbool(item, "normalized", !a->special);
    lp_status st = LP_OK;
    if (!tok->pieces[id]) {
        st = lp_tok_set_piece(tok, id, a->content, a->len, c->err);
        tok->flags[id] |= LP_TOK_FLAG_ADDED;
    } else if (tok->piece_len[id] != a->len ||
               memcmp(tok->pieces[id], a->content, a->len) != 0) {
        st = lp_tok_override_piece(tok, id, a->content, a->len, c->err);
    }
    if (a->special)
        tok->flags[id] |= LP_TOK_FLAG_SPECIAL;
    return st;
}

static lp_status read_added(jctx *c, const json_t *added)
{
    size_t n_added = json_array_size(added);
    if (n_added && !(c->tok->added = calloc(n_added, sizeof *c->tok->added)))
        return nomem(c);
    size_t i;
    const json_t *item;
    json_array_foreach(added, i, item)
    {
        lp_status st = read_added_token(c, item);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

/* A string option of the model ("" or absent: none); *out is a heap copy. */
static lp_status model_string(jctx *c, const json_t *model, const char *key, char **out,
                              size_t *out_len)
{
    const char *v = jstr(model, key);
    if (!v || !*v)
        return LP_OK;
    *out_len = strlen(v);
    return (*out = lp_tok_strndup(v, *out_len)) ? LP_OK : nomem(c);
}

/* model.unk_token (in the vocabulary or an added token), or -1 when absent. */
static lp_status read_unk(jctx *c, const char *unk)
{
    lp_tokenizer *tok = c->tok;
    tok->unk_id = lp_tok_vocab_find(tok, unk, strlen(unk));
    for (size_t k = 0; k < tok->n_added && tok->unk_id < 0; k++)
        if (strcmp(tok->added[k].content, unk) == 0)
            tok->unk_id = tok->added[k].id;
    if (tok->unk_id < 0)
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: model.unk_token '%.60s' is not in "
                            "the vocabulary", c->name, unk);
    return LP_OK;
}

/* WordPiece: unk_token ("[UNK]"), continuing_subword_prefix ("##"), max_input_chars_per_word
 * (100), as Hugging Face defaults them. */
static lp_status read_wordpiece_options(jctx *c, const json_t *model)
{
    lp_tokenizer *tok = c->tok;
    tok->model = LP_TOK_MODEL_WORDPIECE;
    const json_t *max = json_object_get(model, "max_input_chars_per_word");
    if (max && !json_is_null(max) && (!json_is_integer(max) || json_integer_value(max) < 0))
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: model.max_input_chars_per_word: a "
                            "non-negative integer expected", c->name);
    tok->max_input_chars = json_is_integer(max) ? (int64_t)json_integer_value(max) : 100;
    const char *unk = jstr(model, "unk_token");
    lp_status st = read_unk(c, unk ? unk : "[UNK]");
    if (st != LP_OK)
        return st;
    const char *prefix = jstr(model, "continuing_subword_prefix");
    tok->cont_prefix_len = strlen(prefix ? prefix : "##");
    tok->cont_prefix = lp_tok_strndup(prefix ? prefix : "##", tok->cont_prefix_len);
    return tok->cont_prefix ? LP_OK : nomem(c);
}

/* byte_fallback, fuse_unk, ignore_merges, unk_token (in the vocab or an added token), the
 * continuing-subword prefix and end-of-word suffix. */
static lp_status read_model_options(jctx *c, const json_t *model)
{
    lp_tokenizer *tok = c->tok;
    tok->model = LP_TOK_MODEL_BPE_MERGES;
    const char *type = model_type(model);
    if (type && strcmp(type, "WordPiece") == 0)
        return read_wordpiece_options(c, model);
    tok->byte_fallback = jbool(model, "byte_fallback", false);
    tok->fuse_unk = jbool(model, "fuse_unk", false);
    tok->ignore_merges = jbool(model, "ignore_merges", false);
    const char *unk = jstr(model, "unk_token");
    lp_status st = unk ? read_unk(c, unk) : LP_OK;
    if (st != LP_OK)
        return st;
    st = model_string(c, model, "continuing_subword_prefix", &tok->cont_prefix,
                                &tok->cont_prefix_len);
    if (st != LP_OK)
        return st;
    return model_string(c, model, "end_of_word_suffix", &tok->eow_suffix, &tok->eow_suffix_len);
}

/* model.merges, ranked by position; the merged token drops the right side's continuing-subword
 * prefix. */
static lp_status read_merges(jctx *c, const json_t *merges)
{
    lp_tokenizer *tok = c->tok;
    size_t n_merges = json_array_size(merges);
    if (n_merges > INT32_MAX)
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: model.merges: %zu merges, more than %d",
                            c->name, n_merges, INT32_MAX);
    lp_status st = lp_tok_merges_init(tok, n_merges, c->err);
    lp_bytes joined = {0};
    size_t i;
    const json_t *item;
    json_array_foreach(merges, i, item)
    {
        const char *a = "", *b = "";
        size_t a_len = 0, b_len = 0;
        if (st != LP_OK || (st = read_merge(c, item, i, &a, &a_len, &b, &b_len)) != LP_OK)
            break;
        int32_t left = lp_tok_vocab_find(tok, a, a_len), right = lp_tok_vocab_find(tok, b, b_len);
        size_t skip = tok->cont_prefix_len && b_len >= tok->cont_prefix_len &&
                              memcmp(b, tok->cont_prefix, tok->cont_prefix_len) == 0
                          ? tok->cont_prefix_len
                          : 0;
        joined.len = 0;
        lp_bytes_append(&joined, a, a_len);
        lp_bytes_append(&joined, b + skip, b_len - skip);
        if (joined.failed) {
            st = nomem(c);
            break;
        }
        int32_t merged = lp_tok_vocab_find(tok, joined.data, joined.len);
        if (left < 0 || right < 0 || merged < 0)
            st = lp_error_set(c->err, LP_ERR_FORMAT, "%s: model.merges[%zu]: '%.40s' + '%.40s': "
                              "'%.80s' is not in the vocabulary", c->name, i, a, b,
                              left < 0 ? a : right < 0 ? b : joined.data);
        else
            lp_tok_merges_add(tok, left, right, (int32_t)i, merged);
    }
    lp_bytes_free(&joined);
    return st;
}

/* Unigram: "vocab": [[piece, score], ...] (id = position), "unk_id", "byte_fallback". */
static lp_status read_unigram(jctx *c, const json_t *model, const json_t *added)
{
    const json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_array(vocab) || json_array_size(vocab) == 0)
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: model.vocab: a non-empty array of "
                            "[piece, score] expected", c->name);
    size_t n = json_array_size(vocab), i;
    const json_t *item;
    int64_t n_vocab = (int64_t)n;
    json_array_foreach(added, i, item)
    {
        const json_t *id = json_object_get(item, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= INT32_MAX || !json_is_string(json_object_get(item, "content")))
            return lp_error_set(c->err, LP_ERR_FORMAT, "%s: added_tokens[%zu]: want an integer "
                                "id and a string content", c->name, i);
        if (json_integer_value(id) >= n_vocab)
            n_vocab = json_integer_value(id) + 1;
    }
    if (n_vocab > INT32_MAX || n_vocab > (int64_t)n + (int64_t)json_array_size(added) + 1)
        return lp_error_set(c->err, LP_ERR_FORMAT, "%s: added_tokens: ids beyond the vocabulary "
                            "leave holes", c->name);
    lp_tokenizer *tok = c->tok;
    lp_status st = lp_tok_alloc_vocab(tok, n_vocab, c->err);
    if (st != LP_OK)
        return st;
    if (!(tok->unigram_scores = calloc((size_t)n_vocab, sizeof *tok->unigram_scores)))
        return nomem(c);
    double min_score = 0;
    json_array_foreach(vocab, i, item)
    {
        const json_t *piece = json_array_get(item, 0), *score = json_array_get(item, 1);
        if (json_array_size(item) != 2 || !json_is_string(piece) || !json_is_number(score))
            return lp_error_set(c->err, LP_ERR_FORMAT, "%s: model.vocab[%zu]: [piece, score] "
                                "expected", c->name, i);
        if ((st = lp_tok_set_piece(tok, (int32_t)i, json_string_value(piece),
                                   json_string_length(piece), c->err)) != LP_OK)
            return st;
        tok->unigram_scores[i] = json_number_value(score);
        if (i == 0 || tok->unigram_scores[i] < min_score)
            min_score = tok->unigram_scores[i];
        if (json_string_length(piece) > tok->max_piece_len)
            tok->max_piece_len = (uint32_t)json_string_length(piece);
    }
    if ((st = read_added(c, added)) != LP_OK || (st = lp_tok_build_vocab_map(tok, c->err)) != LP_OK)
        return st;
    tok->model = LP_TOK_MODEL_UNIGRAM;
    tok->unk_score = min_score - 10.0;
    tok->byte_fallback = jbool(model, "byte_fallback", false);
    const json_t *unk = json_object_get(model, "unk_id");
    /* Hugging Face fails on the first unknown character without one; loupe refuses the file */
    if (!json_is_integer(unk) || json_integer_value(unk) < 0 ||
        json_integer_value(unk) >= (json_int_t)n)
        return lp_error_set(c->err, LP_ERR_UNSUPPORTED, "%s: model.unk_id: a Unigram model "
                            "needs an unknown token id in [0, %zu)", c->name, n);
    tok->unk_id = (int32_t)json_integer_value(unk);
    return LP_OK;
}

static lp_status read_model(jctx *c, const json_t *model, const json_t *added, size_t file_size)
{
    const char *type = model_type(model);
    if (type && strcmp(type, "Unigram") == 0)
        return read_unigram(c, model, added);
    const json_t *vocab = json_object_get(model, "vocab");
    int64_t n_vocab = 0;
    lp_status st;
    if ((st = check_model(c, model)) != LP_OK ||
        (st = vocab_size(c, vocab, added, file_size, &n_vocab)) != LP_OK ||
        (st = lp_tok_alloc_vocab(c->tok, n_vocab, c->err)) != LP_OK ||
        (st = read_vocab(c, vocab)) != LP_OK || (st = read_added(c, added)) != LP_OK ||
        (st = lp_tok_build_vocab_map(c->tok, c->err)) != LP_OK ||
        (st = read_model_options(c, model)) != LP_OK)
        return st;
    if (c->tok->model == LP_TOK_MODEL_WORDPIECE)
        return LP_OK;
    return read_merges(c, json_object_get(model, "merges"));
}

static void set_kind(lp_tokenizer *tok)
{
    bool bytelevel = false, metaspace = tok->byte_fallback;
    for (size_t k = 0; k < tok->n_pres; k++) {
        bytelevel |= tok->pres[k].kind == LP_TOK_PRE_BYTELEVEL;
        metaspace |= tok->pres[k].kind == LP_TOK_PRE_METASPACE;
    }
    static const char meta[] = "\xE2\x96\x81"; /* U+2581, SentencePiece's space */
    for (size_t k = 0; k < tok->n_norms; k++) {
        const lp_tok_norm *n = &tok->norms[k];
        if (n->kind == LP_TOK_NORM_PREPEND || n->kind == LP_TOK_NORM_REPLACE)
            metaspace |= (n->pattern && strstr(n->pattern, meta)) ||
                         (n->content && strstr(n->content, meta));
    }
    tok->kind = tok->model == LP_TOK_MODEL_UNIGRAM     ? "unigram"
                : tok->model == LP_TOK_MODEL_WORDPIECE ? "wordpiece"
                : bytelevel                          ? "bpe-bytelevel"
                : metaspace                          ? "bpe-sentencepiece"
                                                     : "bpe";
}

lp_status lp_tok_load_json_buffer(const char *path, const char *data, size_t size,
                             lp_tokenizer **out, lp_error *err)
{
    const char *name = lp_path_basename(path);
    if (size == 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: empty file", name);
    json_error_t jerr;
    json_t *root = json_loadb(data, size, JSON_ALLOW_NUL, &jerr);
    if (!root)
        return lp_error_set(err, LP_ERR_FORMAT, "%s:%d:%d: %s", name, jerr.line, jerr.column,
                            jerr.text);
    lp_tokenizer *tok = lp_tok_new(path, "bpe");
    if (!tok) {
        json_decref(root);
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
    }
    jctx c = {name, err, tok};
    lp_status st = LP_OK;
    if (!json_is_object(root))
        st = lp_error_set(err, LP_ERR_FORMAT, "%s: the top level is not a JSON object", name);
    if (st == LP_OK && !json_object_get(root, "model"))
        st = lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no \"model\": not a tokenizer.json", name);
    const json_t *added = json_object_get(root, "added_tokens");
    if (st == LP_OK && added && !json_is_array(added) && !json_is_null(added))
        st = lp_error_set(err, LP_ERR_FORMAT, "%s: added_tokens: an array expected", name);
    if (st == LP_OK)
        st = read_model(&c, json_object_get(root, "model"), added, size);
    if (st == LP_OK)
        st = read_normalizer(&c, json_object_get(root, "normalizer"), "normalizer");
    if (st == LP_OK)
        st = read_pre(&c, json_object_get(root, "pre_tokenizer"), "pre_tokenizer");
    if (st == LP_OK)
        st = read_post(&c, json_object_get(root, "post_processor"), "post_processor");
    if (st == LP_OK)
        st = read_decoder(&c, json_object_get(root, "decoder"), "decoder");
    if (st == LP_OK)
        st = lp_tok_prepare_added(tok, err);
    json_decref(root);
    if (st != LP_OK) {
        lp_tokenizer_close(tok);
        return st;
    }
    set_kind(tok);
    *out = tok;
    return LP_OK;
}

lp_status lp_tok_load_json(const char *path, lp_tokenizer **out, lp_error *err)
{
    lp_mapped_file map;
    lp_status st = lp_map_file(path, &map, err);
    if (st != LP_OK)
        return st;
    st = lp_tok_load_json_buffer(path, (const char *)map.data, map.size, out, err);
    lp_unmap_file(&map);
    return st;
}
