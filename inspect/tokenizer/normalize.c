/* Normalizers and pre-tokenizers of the encode pipeline, and the regexes they run (PCRE2 with
 * Oniguruma's nested classes flattened; literal patterns without a regex). */
#include "inspect/tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- regexes --------------------------------------------------------------------------------- */

/* GPT-2's pattern, which ByteLevel(use_regex: true) implies. */
const char lp_tok_regex_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char lp_tok_regex_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char lp_tok_regex_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* The end of the POSIX class "[:name:]" starting at p[i] (len when it does not close). */
static size_t posix_class_end(const char *p, size_t len, size_t i)
{
    for (size_t k = i + 2; k + 1 < len; k++)
        if (p[k] == ':' && p[k + 1] == ']')
            return k + 2;
    return len;
}

/* Outside a class: copy p[i]; a '[' opens one (its '^' and a leading literal ']' are copied
 * with it). Returns the next position. */
static size_t copy_outside_class(const char *p, size_t len, size_t i, char *out, size_t *n,
                                 int *depth)
{
    char c = p[i++];
    out[(*n)++] = c;
    if (c != '[')
        return i;
    *depth = 1;
    if (i < len && p[i] == '^')
        out[(*n)++] = p[i++];
    if (i < len && p[i] == ']') /* a leading ']' is a literal */
        out[(*n)++] = p[i++];
    return i;
}

/* Oniguruma (the Rust tokenizers' engine) reads "[" inside a character class as a nested class
 * and unites it with the outer one; PCRE2 reads it as a literal "[" and then trips over the
 * rest (BLOOM's " ?[^(\s|[.,!?...])]+"). Flatten nested, non-negated classes into the outer
 * class; anything else (a negated nested class, "&&") is left for PCRE2 to refuse. Returns a
 * malloc'd copy, or NULL when the pattern needs no change or cannot be flattened. */
static char *flatten_nested_classes(const char *p, size_t len, size_t *out_len)
{
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t n = 0, i = 0;
    int depth = 0;
    bool changed = false;
    while (i < len) {
        char c = p[i];
        if (c == '\\') {
            out[n++] = c;
            if (i + 1 < len)
                out[n++] = p[i + 1];
            i += 2;
            continue;
        }
        if (depth == 0) {
            i = copy_outside_class(p, len, i, out, &n, &depth);
            continue;
        }
        if (c == '[' && i + 1 < len && p[i + 1] == ':') { /* POSIX [:alpha:] stays */
            size_t stop = posix_class_end(p, len, i);
            memcpy(out + n, p + i, stop - i);
            n += stop - i;
            i = stop;
            continue;
        }
        if (c == '[') {
            if (i + 1 < len && p[i + 1] == '^')
                break; /* a negated nested class: no flat equivalent */
            depth++;
            i++;
            changed = true;
            continue;
        }
        if (c == '&' && i + 1 < len && p[i + 1] == '&')
            break; /* class intersection */
        if (c == ']') {
            depth--;
            i++;
            if (depth == 0)
                out[n++] = c;
            continue;
        }
        out[n++] = c;
        i++;
    }
    if (i < len || !changed) {
        free(out);
        return NULL;
    }
    out[n] = '\0';
    *out_len = n;
    return out;
}

lp_status lp_tok_compile_regex(const char *pattern, size_t len, pcre2_code **out,
                               const char *where, lp_error *err)
{
    int code;
    PCRE2_SIZE offset;
    size_t flat_len = 0;
    char *flat = flatten_nested_classes(pattern, len, &flat_len);
    /* UCP makes \s \w \d Unicode-aware like Rust's regex/onig; MATCH_INVALID_UTF lets raw
     * bytes that are not UTF-8 through (they match nothing and fall into the gaps). */
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(flat ? flat : pattern), flat ? flat_len : len,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code,
                                   &offset, NULL);
    free(flat);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: regex '%.*s': %s at offset %zu", where,
                            (int)(len > 120 ? 120 : len), pattern, (const char *)msg,
                            (size_t)offset);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional speed-up; failure is harmless */
    *out = re;
    return LP_OK;
}

typedef struct span {
    size_t start, end;
    bool match;
} span;

typedef struct span_vec {
    span *v;
    size_t n, cap;
    bool failed;
} span_vec;

static void span_push(span_vec *s, size_t start, size_t end, bool match)
{
    if (s->n == s->cap && !lp_tok_reserve((void **)&s->v, &s->cap, sizeof *s->v, 32))
        s->failed = true;
    if (s->failed || start == end)
        return;
    s->v[s->n++] = (span){start, end, match};
}

/* Cover s[0, len) with match and gap spans of re (or of a literal when re is NULL). */
static lp_status find_spans(const pcre2_code *re, const char *lit, size_t lit_len,
                            const char *s, size_t len, span_vec *out)
{
    out->n = 0;
    size_t prev = 0;
    if (re) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        if (!md)
            return LP_ERR_NOMEM;
        size_t off = 0;
        while (off <= len) {
            int rc = pcre2_match(re, (PCRE2_SPTR)s, len, off, 0, md, NULL);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* the interpreter keeps its stack on the heap */
                rc = pcre2_match(re, (PCRE2_SPTR)s, len, off, PCRE2_NO_JIT, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc < 0) {
                pcre2_match_data_free(md);
                return LP_ERR_RANGE; /* match limits: pathological input */
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t start = ov[0], end = ov[1];
            if (end == start) {
                if (start >= len)
                    break;
                off = start + lp_utf8_seq_len(s, len, start);
                continue;
            }
            span_push(out, prev, start, false);
            span_push(out, start, end, true);
            prev = off = end;
        }
        pcre2_match_data_free(md);
    } else if (lit_len > 0) {
        size_t i = 0;
        while (i + lit_len <= len) {
            if (memcmp(s + i, lit, lit_len) == 0) {
                span_push(out, prev, i, false);
                span_push(out, i, i + lit_len, true);
                i += lit_len;
                prev = i;
            } else {
                i++;
            }
        }
    }
    span_push(out, prev, len, false);
    return out->failed ? LP_ERR_NOMEM : LP_OK;
}

lp_status lp_tok_replace_all(const pcre2_code *re, const char *lit, size_t lit_len,
                             const char *content, size_t content_len, const char *s, size_t len,
                             lp_bytes *out)
{
    span_vec spans = {0};
    lp_status st = find_spans(re, lit, lit_len, s, len, &spans);
    if (st == LP_OK)
        for (size_t k = 0; k < spans.n; k++) {
            if (spans.v[k].match)
                lp_bytes_append(out, content, content_len);
            else
                lp_bytes_append(out, s + spans.v[k].start, spans.v[k].end - spans.v[k].start);
        }
    free(spans.v);
    if (st == LP_OK && out->failed)
        st = LP_ERR_NOMEM;
    return st;
}

/* ---- normalizers ----------------------------------------------------------------------------- */

/* Strip: Unicode whitespace off either end. */
static lp_status norm_strip(const lp_tok_norm *n, const char *cur, size_t cur_len, lp_bytes *b)
{
    size_t a = 0, e = cur_len;
    while (n->strip_left && a < e) {
        size_t j = a;
        if (!lp_uc_is_space(lp_utf8_next(cur, e, &j)))
            break;
        a = j;
    }
    while (n->strip_right && e > a) {
        size_t j;
        if (!lp_uc_is_space(lp_utf8_prev(cur, e, &j)) || j < a)
            break;
        e = j;
    }
    lp_bytes_append(b, cur + a, e - a);
    return LP_OK;
}

/* One normalizer over cur into b (which starts empty); *skip when it leaves cur as it is. */
/* sentencepiece's precompiled charsmap: a u32 byte size, that many bytes of XOR-compressed
 * double-array trie nodes (BASE in bits 10-30, shifted by 8 when bit 9 is set; LCHECK in bits
 * 0-7 plus bit 31, so that value nodes never match; LEAF in bit 8; a value node holds an offset
 * into the NUL-terminated replacement strings that follow). The longest key at s[0, len), as
 * llama.cpp walks it, or the shortest (as spm_precompiled's common_prefix_search lists it
 * first); 0 when none. The map comes from a stranger: every node index, offset and string end
 * is checked, and what is out of bounds ends the match. */
static size_t charsmap_match(const char *map, size_t map_len, const char *s, size_t len,
                             bool shortest, const char **repl, size_t *repl_len)
{
    uint32_t xcda_size;
    memcpy(&xcda_size, map, 4);
    size_t n_nodes = xcda_size / 4;
    const char *strings = map + 4 + xcda_size;
    size_t strings_len = map_len - 4 - xcda_size;
#define NODE(i, out) ((i) < n_nodes && (memcpy(&(out), map + 4 + (size_t)(i) * 4, 4), true))
#define BASE(v) (((v) >> 10) << (((v) & (1u << 9)) >> 6))
    uint32_t v, idx, best = 0, best_offset = 0;
    if (!NODE(0, v))
        return 0;
    idx = BASE(v);
    for (size_t k = 0; k < len && s[k] != 0; k++) {
        unsigned char c = (unsigned char)s[k];
        idx ^= c;
        if (!NODE(idx, v) || (v & (0x800000FFu)) != c)
            break;
        bool leaf = (v >> 8) & 1;
        idx ^= BASE(v);
        if (leaf) {
            if (!NODE(idx, v))
                break;
            best = (uint32_t)k + 1;
            best_offset = v & 0x7FFFFFFFu;
            if (shortest)
                break;
        }
    }
#undef NODE
#undef BASE
    if (best == 0 || best_offset >= strings_len)
        return 0;
    const char *end = memchr(strings + best_offset, 0, strings_len - best_offset);
    if (!end)
        return 0;
    *repl = strings + best_offset;
    *repl_len = (size_t)(end - *repl);
    return best;
}

bool lp_tok_charsmap_fits(const char *map, size_t len)
{
    uint32_t xcda_size = 0;
    if (len >= 4)
        memcpy(&xcda_size, map, 4);
    return len >= 4 && (uint64_t)xcda_size + 4 < len;
}

/* One character of s at *j through the charsmap (a key of its own: its replacement), else as it
 * is, else (a byte that is not UTF-8) U+FFFD for that byte. */
static void charsmap_char(const lp_tok_norm *n, const char *s, size_t len, size_t *j,
                          lp_bytes *b)
{
    const char *repl;
    size_t repl_len, at = *j;
    if (lp_utf8_next(s, len, j) < 0) {
        lp_bytes_append(b, "\xEF\xBF\xBD", 3);
        return;
    }
    if (charsmap_match(n->pattern, n->pattern_len, s + at, *j - at, true, &repl, &repl_len) ==
        *j - at)
        lp_bytes_append(b, repl, repl_len);
    else
        lp_bytes_append(b, s + at, *j - at);
}

/* The charsmap over the text. llama.cpp's walk (n->re NULL): at each position the longest key's
 * replacement, else one character as charsmap_char. Hugging Face's (n->re is \X, the extended
 * grapheme cluster), as spm_precompiled does it: a cluster shorter than 6 bytes that starts with
 * a key is replaced whole by the shortest such key's replacement (so a mark after a mapped base
 * goes with it: Vietnamese is where this shows); any other cluster, character by character. */
static lp_status normalize_precompiled(const lp_tok_norm *n, const char *s, size_t len,
                                       lp_bytes *b)
{
    pcre2_match_data *md = n->re ? pcre2_match_data_create_from_pattern(n->re, NULL) : NULL;
    if (n->re && !md)
        return LP_ERR_NOMEM;
    for (size_t j = 0; j < len;) {
        const char *repl;
        size_t repl_len, end = j;
        if (md && pcre2_match(n->re, (PCRE2_SPTR)s, len, j, PCRE2_ANCHORED, md, NULL) > 0)
            end = pcre2_get_ovector_pointer(md)[1];
        if (!md) {
            size_t m = charsmap_match(n->pattern, n->pattern_len, s + j, len - j, false, &repl,
                                      &repl_len);
            if (m) {
                lp_bytes_append(b, repl, repl_len);
                j += m;
            } else {
                charsmap_char(n, s, len, &j, b);
            }
        } else if (end > j && end - j < 6 &&
                   charsmap_match(n->pattern, n->pattern_len, s + j, end - j, true, &repl,
                                  &repl_len)) {
            lp_bytes_append(b, repl, repl_len);
            j = end;
        } else {
            do
                charsmap_char(n, s, len, &j, b);
            while (j < end);
        }
    }
    pcre2_match_data_free(md);
    return b->failed ? LP_ERR_NOMEM : LP_OK;
}

static lp_status normalize_step(const lp_tok_norm *n, const char *cur, size_t cur_len,
                                lp_bytes *b, bool *skip)
{
    static const lp_uc_form forms[] = {[LP_TOK_NORM_NFC] = LP_UC_NFC,
                                       [LP_TOK_NORM_NFD] = LP_UC_NFD,
                                       [LP_TOK_NORM_NFKC] = LP_UC_NFKC,
                                       [LP_TOK_NORM_NFKD] = LP_UC_NFKD};
    *skip = false;
    switch (n->kind) {
    case LP_TOK_NORM_NFC:
    case LP_TOK_NORM_NFD:
    case LP_TOK_NORM_NFKC:
    case LP_TOK_NORM_NFKD:
        return lp_uc_normalize(forms[n->kind], cur, cur_len, &b->data, &b->len);
    case LP_TOK_NORM_LOWERCASE: return lp_uc_lowercase(cur, cur_len, &b->data, &b->len);
    case LP_TOK_NORM_PREPEND:
        *skip = cur_len == 0; /* Hugging Face prepends only to non-empty text */
        lp_bytes_append(b, n->pattern, n->pattern_len);
        lp_bytes_append(b, cur, cur_len);
        return LP_OK;
    case LP_TOK_NORM_REPLACE:
        return lp_tok_replace_all(n->re, n->pattern, n->pattern_len, n->content, n->content_len,
                                  cur, cur_len, b);
    case LP_TOK_NORM_STRIP: return norm_strip(n, cur, cur_len, b);
    case LP_TOK_NORM_BYTELEVEL:
        for (size_t j = 0; j < cur_len; j++) {
            char u[4];
            lp_bytes_append(b, u, lp_utf8_put(lp_tok_byte_cps()[(unsigned char)cur[j]], u));
        }
        return LP_OK;
    case LP_TOK_NORM_CJK_SPACES:
        for (size_t j = 0; j < cur_len;) {
            size_t at = j;
            bool cjk = lp_uc_is_cjk_ideograph(lp_utf8_next(cur, cur_len, &j));
            if (cjk)
                lp_bytes_append_char(b, ' ');
            lp_bytes_append(b, cur + at, j - at);
            if (cjk)
                lp_bytes_append_char(b, ' ');
        }
        return LP_OK;
    case LP_TOK_NORM_PRECOMPILED: return normalize_precompiled(n, cur, cur_len, b);
    case LP_TOK_NORM_COUNT: break;
    }
    *skip = true;
    return LP_OK;
}

lp_status lp_tok_normalize(const lp_tokenizer *tok, const char *s, size_t len, char **out,
                           size_t *out_len)
{
    char *cur = lp_tok_strndup(s, len);
    if (!cur)
        return LP_ERR_NOMEM;
    size_t cur_len = len;
    for (size_t k = 0; k < tok->n_norms; k++) {
        lp_bytes next = {0};
        bool skip;
        lp_status st = normalize_step(&tok->norms[k], cur, cur_len, &next, &skip);
        if (st == LP_OK && !skip && !next.data)
            lp_bytes_append(&next, "", 0); /* an empty result is still a string */
        if (st == LP_OK && next.failed)
            st = LP_ERR_NOMEM;
        if (st != LP_OK || skip) {
            lp_bytes_free(&next);
            if (st != LP_OK) {
                free(cur);
                return st;
            }
            continue;
        }
        free(cur);
        cur = next.data;
        cur_len = next.len;
    }
    *out = cur;
    *out_len = cur_len;
    return LP_OK;
}

static void splits_push(lp_tok_splits *s, const char *bytes, size_t len)
{
    if (len == 0 || s->failed)
        return;
    if (s->n == s->cap) {
        /* off and len grow together: len is grown to off's new capacity */
        size_t cap = s->cap, len_cap = s->cap;
        if (!lp_tok_reserve((void **)&s->off, &cap, sizeof *s->off, 32) ||
            !lp_tok_reserve((void **)&s->len, &len_cap, sizeof *s->len, 32)) {
            s->failed = true;
            return;
        }
        s->cap = cap;
    }
    s->off[s->n] = s->buf.len;
    s->len[s->n] = len;
    s->n++;
    lp_bytes_append(&s->buf, bytes, len);
    if (s->buf.failed)
        s->failed = true;
}

void lp_tok_splits_free(lp_tok_splits *s)
{
    lp_bytes_free(&s->buf);
    free(s->off);
    free(s->len);
    memset(s, 0, sizeof *s);
}

/* MergedWithNext: walking backwards, a match joins the span after it. */
static void merge_with_next(lp_tok_splits *out, const char *s, span *sp, size_t n)
{
    size_t r = n;
    bool previous_match = false;
    for (size_t k = n; k-- > 0;) {
        bool m = sp[k].match;
        if (m && !previous_match && r < n)
            sp[r].start = sp[k].start;
        else
            sp[--r] = sp[k];
        previous_match = m;
    }
    /* live spans are sp[r..n) */
    for (size_t k = r; k < n; k++)
        splits_push(out, s + sp[k].start, sp[k].end - sp[k].start);
}

/* Hugging Face's SplitDelimiterBehavior over the spans of one piece. */
static void apply_behavior(lp_tok_splits *out, const char *s, span *sp, size_t n,
                           lp_tok_split_behavior behavior, bool invert)
{
    if (invert)
        for (size_t k = 0; k < n; k++)
            sp[k].match = !sp[k].match;
    size_t w = 0; /* merged spans are written back into sp[0..w) */
    bool previous_match = false;
    switch (behavior) {
    case LP_TOK_SPLIT_REMOVED:
        for (size_t k = 0; k < n; k++)
            if (!sp[k].match)
                sp[w++] = sp[k];
        break;
    case LP_TOK_SPLIT_ISOLATED:
        w = n;
        break;
    case LP_TOK_SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t k = 0; k < n; k++) {
            bool m = sp[k].match;
            if (m && !previous_match && w > 0)
                sp[w - 1].end = sp[k].end;
            else
                sp[w++] = sp[k];
            previous_match = m;
        }
        break;
    case LP_TOK_SPLIT_MERGED_WITH_NEXT: merge_with_next(out, s, sp, n); return;
    case LP_TOK_SPLIT_CONTIGUOUS:
        for (size_t k = 0; k < n; k++) {
            bool m = sp[k].match;
            if (m == previous_match && w > 0)
                sp[w - 1].end = sp[k].end;
            else
                sp[w++] = sp[k];
            previous_match = m;
        }
        break;
    case LP_TOK_SPLIT_COUNT: break;
    }
    for (size_t k = 0; k < w; k++)
        splits_push(out, s + sp[k].start, sp[k].end - sp[k].start);
}

/* ByteLevel over one piece: the prefix space, GPT-2's regex (when use_regex), then every byte
 * mapped to its printable stand-in. */
static lp_status pre_bytelevel(const lp_tok_pre *p, const char *s, size_t len, lp_bytes *tmp,
                               span_vec *spans, lp_tok_splits *out)
{
    tmp->len = 0;
    if (p->add_prefix_space && s[0] != ' ')
        lp_bytes_append_char(tmp, ' ');
    lp_bytes_append(tmp, s, len);
    if (tmp->failed)
        return LP_ERR_NOMEM;
    lp_tok_splits parts = {0};
    lp_status st = LP_OK;
    if (p->use_regex) {
        st = find_spans(p->re, NULL, 0, tmp->data, tmp->len, spans);
        if (st == LP_OK)
            apply_behavior(&parts, tmp->data, spans->v, spans->n, LP_TOK_SPLIT_ISOLATED, false);
    } else {
        splits_push(&parts, tmp->data, tmp->len);
    }
    if (parts.failed)
        st = LP_ERR_NOMEM;
    const uint32_t *bcp = lp_tok_byte_cps();
    for (size_t q = 0; q < parts.n && st == LP_OK; q++) {
        lp_bytes mapped = {0};
        const unsigned char *b = (const unsigned char *)parts.buf.data + parts.off[q];
        for (size_t j = 0; j < parts.len[q]; j++) {
            char u[4];
            lp_bytes_append(&mapped, u, lp_utf8_put(bcp[b[j]], u));
        }
        if (mapped.failed)
            st = LP_ERR_NOMEM;
        else
            splits_push(out, mapped.data, mapped.len);
        lp_bytes_free(&mapped);
    }
    lp_tok_splits_free(&parts);
    return st;
}

/* Metaspace over one piece (the k-th): spaces become the replacement, prepended per the scheme,
 * then split before each replacement. */
static lp_status pre_metaspace(const lp_tok_pre *p, const char *s, size_t len, bool first,
                               lp_bytes *tmp, span_vec *spans, lp_tok_splits *out)
{
    tmp->len = 0;
    bool starts = len >= p->replacement_len && memcmp(s, p->replacement, p->replacement_len) == 0;
    /* the replacement of a leading space counts as a leading replacement */
    bool starts_space = len > 0 && s[0] == ' ';
    if (!starts && !starts_space &&
        (p->prepend_scheme == LP_TOK_PREPEND_ALWAYS ||
         (p->prepend_scheme == LP_TOK_PREPEND_FIRST && first)))
        lp_bytes_append(tmp, p->replacement, p->replacement_len);
    lp_status st = lp_tok_replace_all(NULL, " ", 1, p->replacement, p->replacement_len, s, len,
                                      tmp);
    if (st != LP_OK || !tmp->data)
        return st;
    if (!p->split) {
        splits_push(out, tmp->data, tmp->len);
        return LP_OK;
    }
    st = find_spans(NULL, p->replacement, p->replacement_len, tmp->data, tmp->len, spans);
    if (st == LP_OK)
        apply_behavior(out, tmp->data, spans->v, spans->n, LP_TOK_SPLIT_MERGED_WITH_NEXT, false);
    return st;
}

static lp_status pretokenize_step(const lp_tok_pre *p, const lp_tok_splits *in,
                                  bool at_text_start, lp_tok_splits *out)
{
    span_vec spans = {0};
    lp_bytes tmp = {0};
    lp_status st = LP_OK;
    for (size_t k = 0; k < in->n && st == LP_OK; k++) {
        const char *s = in->buf.data + in->off[k];
        size_t len = in->len[k];
        switch (p->kind) {
        case LP_TOK_PRE_SPLIT:
        case LP_TOK_PRE_WHITESPACE:
        case LP_TOK_PRE_WHITESPACE_SPLIT:
        case LP_TOK_PRE_DIGITS:
        case LP_TOK_PRE_PUNCTUATION:
            st = find_spans(p->re, p->pattern, p->pattern_len, s, len, &spans);
            if (st == LP_OK)
                apply_behavior(out, s, spans.v, spans.n, p->behavior, p->invert);
            break;
        case LP_TOK_PRE_BYTELEVEL: st = pre_bytelevel(p, s, len, &tmp, &spans, out); break;
        case LP_TOK_PRE_METASPACE:
            st = pre_metaspace(p, s, len, at_text_start && k == 0, &tmp, &spans, out);
            break;
        case LP_TOK_PRE_COUNT: break;
        }
    }
    free(spans.v);
    lp_bytes_free(&tmp);
    if (st == LP_OK && out->failed)
        st = LP_ERR_NOMEM;
    return st;
}

lp_status lp_tok_pretokenize(const lp_tokenizer *tok, const char *s, size_t len,
                             bool at_text_start, lp_tok_splits *out)
{
    lp_tok_splits cur = {0};
    splits_push(&cur, s, len);
    lp_status st = cur.failed ? LP_ERR_NOMEM : LP_OK;
    for (size_t k = 0; k < tok->n_pres && st == LP_OK; k++) {
        lp_tok_splits next = {0};
        st = pretokenize_step(&tok->pres[k], &cur, at_text_start, &next);
        lp_tok_splits_free(&cur);
        cur = next;
    }
    if (st != LP_OK) {
        lp_tok_splits_free(&cur);
        return st;
    }
    *out = cur;
    return LP_OK;
}
