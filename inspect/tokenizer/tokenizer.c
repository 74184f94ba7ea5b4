/* Tokenizers: format detection, the shared encode pipeline (added tokens, normalizers,
 * pre-tokenizers, BPE by merge rank or by score, post-processor), decoders and labels. The
 * tokenizer.json reader is tokenizer_json.c, the GGUF vocabulary reader tokenizer_gguf.c. */
#define _POSIX_C_SOURCE 200809L /* opendir: finding the tokenizer in a model folder */
#include "inspect/tokenizer/tokenizer.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/dtype.h"
#include "core/mapfile.h"
#include "inspect/tokenizer/tokenizer_internal.h"

/* ------------------------------------------------------------------------------------------ */
/* small helpers                                                                              */

void lp_tok_buf_put(tk_buf *b, const void *bytes, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->failed = true;
                return;
            }
            cap *= 2;
        }
        char *data = realloc(b->data, cap);
        if (!data) {
            b->failed = true;
            return;
        }
        b->data = data;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, bytes, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void lp_tok_buf_putc(tk_buf *b, char c)
{
    lp_tok_buf_put(b, &c, 1);
}

void lp_tok_buf_free(tk_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

char *lp_tok_strndup(const char *s, size_t len)
{
    char *copy = malloc(len + 1);
    if (!copy)
        return NULL;
    if (len)
        memcpy(copy, s, len);
    copy[len] = '\0';
    return copy;
}

typedef struct ids_vec {
    int32_t *v;
    size_t n, cap;
    bool failed;
} ids_vec;

static void ids_push(ids_vec *ids, int32_t id)
{
    if (ids->failed)
        return;
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v) {
            ids->failed = true;
            return;
        }
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
}

/* ------------------------------------------------------------------------------------------ */
/* the byte-level alphabet (GPT-2's bytes_to_unicode)                                         */

static bool byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t lp_tok_byte_to_cp(uint8_t b)
{
    if (byte_is_printable(b))
        return b;
    /* the others take 256, 257, ... in byte order */
    uint32_t n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!byte_is_printable(x))
            n++;
    return 256 + n;
}

int lp_tok_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    uint32_t n = cp - 256;
    for (unsigned x = 0; x < 256; x++)
        if (!byte_is_printable(x) && n-- == 0)
            return (int)x;
    return -1;
}

/* lp_tok_byte_to_cp for every byte, spelled out so that encoding needs no lazy (racy) init. */
static const uint32_t byte_cp_table[256] = {
    0x100, 0x101, 0x102, 0x103, 0x104, 0x105, 0x106, 0x107, 0x108, 0x109, 0x10A, 0x10B,
    0x10C, 0x10D, 0x10E, 0x10F, 0x110, 0x111, 0x112, 0x113, 0x114, 0x115, 0x116, 0x117,
    0x118, 0x119, 0x11A, 0x11B, 0x11C, 0x11D, 0x11E, 0x11F, 0x120, 0x021, 0x022, 0x023,
    0x024, 0x025, 0x026, 0x027, 0x028, 0x029, 0x02A, 0x02B, 0x02C, 0x02D, 0x02E, 0x02F,
    0x030, 0x031, 0x032, 0x033, 0x034, 0x035, 0x036, 0x037, 0x038, 0x039, 0x03A, 0x03B,
    0x03C, 0x03D, 0x03E, 0x03F, 0x040, 0x041, 0x042, 0x043, 0x044, 0x045, 0x046, 0x047,
    0x048, 0x049, 0x04A, 0x04B, 0x04C, 0x04D, 0x04E, 0x04F, 0x050, 0x051, 0x052, 0x053,
    0x054, 0x055, 0x056, 0x057, 0x058, 0x059, 0x05A, 0x05B, 0x05C, 0x05D, 0x05E, 0x05F,
    0x060, 0x061, 0x062, 0x063, 0x064, 0x065, 0x066, 0x067, 0x068, 0x069, 0x06A, 0x06B,
    0x06C, 0x06D, 0x06E, 0x06F, 0x070, 0x071, 0x072, 0x073, 0x074, 0x075, 0x076, 0x077,
    0x078, 0x079, 0x07A, 0x07B, 0x07C, 0x07D, 0x07E, 0x121, 0x122, 0x123, 0x124, 0x125,
    0x126, 0x127, 0x128, 0x129, 0x12A, 0x12B, 0x12C, 0x12D, 0x12E, 0x12F, 0x130, 0x131,
    0x132, 0x133, 0x134, 0x135, 0x136, 0x137, 0x138, 0x139, 0x13A, 0x13B, 0x13C, 0x13D,
    0x13E, 0x13F, 0x140, 0x141, 0x142, 0x0A1, 0x0A2, 0x0A3, 0x0A4, 0x0A5, 0x0A6, 0x0A7,
    0x0A8, 0x0A9, 0x0AA, 0x0AB, 0x0AC, 0x143, 0x0AE, 0x0AF, 0x0B0, 0x0B1, 0x0B2, 0x0B3,
    0x0B4, 0x0B5, 0x0B6, 0x0B7, 0x0B8, 0x0B9, 0x0BA, 0x0BB, 0x0BC, 0x0BD, 0x0BE, 0x0BF,
    0x0C0, 0x0C1, 0x0C2, 0x0C3, 0x0C4, 0x0C5, 0x0C6, 0x0C7, 0x0C8, 0x0C9, 0x0CA, 0x0CB,
    0x0CC, 0x0CD, 0x0CE, 0x0CF, 0x0D0, 0x0D1, 0x0D2, 0x0D3, 0x0D4, 0x0D5, 0x0D6, 0x0D7,
    0x0D8, 0x0D9, 0x0DA, 0x0DB, 0x0DC, 0x0DD, 0x0DE, 0x0DF, 0x0E0, 0x0E1, 0x0E2, 0x0E3,
    0x0E4, 0x0E5, 0x0E6, 0x0E7, 0x0E8, 0x0E9, 0x0EA, 0x0EB, 0x0EC, 0x0ED, 0x0EE, 0x0EF,
    0x0F0, 0x0F1, 0x0F2, 0x0F3, 0x0F4, 0x0F5, 0x0F6, 0x0F7, 0x0F8, 0x0F9, 0x0FA, 0x0FB,
    0x0FC, 0x0FD, 0x0FE, 0x0FF,
};

static const uint32_t *byte_cps(void)
{
    return byte_cp_table;
}

/* ------------------------------------------------------------------------------------------ */
/* regexes                                                                                    */

/* GPT-2's pattern, which ByteLevel(use_regex: true) implies. */
const char lp_tok_regex_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const char lp_tok_regex_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char lp_tok_regex_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

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
            out[n++] = c;
            i++;
            if (c == '[') {
                depth = 1;
                if (i < len && p[i] == '^')
                    out[n++] = p[i++];
                if (i < len && p[i] == ']') /* a leading ']' is a literal */
                    out[n++] = p[i++];
            }
            continue;
        }
        if (c == '[' && i + 1 < len && p[i + 1] == ':') { /* POSIX [:alpha:] stays */
            const char *end = NULL;
            for (size_t k = i + 2; k + 1 < len; k++)
                if (p[k] == ':' && p[k + 1] == ']') {
                    end = p + k + 2;
                    break;
                }
            size_t stop = end ? (size_t)(end - p) : len;
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
    if (s->failed || start == end)
        return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 32;
        span *v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            s->failed = true;
            return;
        }
        s->v = v;
        s->cap = cap;
    }
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

/* Replace every match of re (or literal) in s by content. */
static lp_status replace_all(const pcre2_code *re, const char *lit, size_t lit_len,
                             const char *content, size_t content_len, const char *s, size_t len,
                             tk_buf *out)
{
    span_vec spans = {0};
    lp_status st = find_spans(re, lit, lit_len, s, len, &spans);
    if (st == LP_OK)
        for (size_t k = 0; k < spans.n; k++) {
            if (spans.v[k].match)
                lp_tok_buf_put(out, content, content_len);
            else
                lp_tok_buf_put(out, s + spans.v[k].start, spans.v[k].end - spans.v[k].start);
        }
    free(spans.v);
    if (st == LP_OK && out->failed)
        st = LP_ERR_NOMEM;
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* vocabulary and merges                                                                      */

lp_tokenizer *lp_tok_new(const char *path, const char *kind)
{
    lp_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok)
        return NULL;
    tok->path = lp_tok_strndup(path, strlen(path));
    if (!tok->path) {
        free(tok);
        return NULL;
    }
    tok->kind = kind;
    tok->unk_id = -1;
    for (int b = 0; b < 256; b++)
        tok->byte_ids[b] = -1;
    return tok;
}

lp_status lp_tok_alloc_vocab(lp_tokenizer *tok, int64_t n_vocab, lp_error *err)
{
    if (n_vocab <= 0 || n_vocab > INT32_MAX)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: vocabulary size %lld outside [1, %d]",
                            lp_path_basename(tok->path), (long long)n_vocab, INT32_MAX);
    tok->pieces = calloc((size_t)n_vocab, sizeof *tok->pieces);
    tok->piece_len = calloc((size_t)n_vocab, sizeof *tok->piece_len);
    tok->flags = calloc((size_t)n_vocab, 1);
    if (!tok->pieces || !tok->piece_len || !tok->flags)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for %lld vocabulary entries",
                            lp_path_basename(tok->path), (long long)n_vocab);
    tok->n_vocab = n_vocab;
    return LP_OK;
}

/* Copy len bytes plus a NUL into the piece pool. */
static char *pool_copy(lp_tokenizer *tok, const char *s, size_t len)
{
    if (len + 1 > tok->pool_left) {
        size_t size = len + 1 > (1u << 20) ? len + 1 : (1u << 20);
        char **chunks = realloc(tok->pool_chunks, (tok->n_pool_chunks + 1) * sizeof *chunks);
        if (!chunks)
            return NULL;
        tok->pool_chunks = chunks;
        char *block = malloc(size);
        if (!block)
            return NULL;
        chunks[tok->n_pool_chunks++] = block;
        tok->pool_cur = block;
        tok->pool_left = size;
    }
    char *copy = tok->pool_cur;
    if (len)
        memcpy(copy, s, len);
    copy[len] = '\0';
    tok->pool_cur += len + 1;
    tok->pool_left -= len + 1;
    return copy;
}

lp_status lp_tok_set_piece(lp_tokenizer *tok, int32_t id, const char *s, size_t len, lp_error *err)
{
    LP_ASSERT(id >= 0 && id < tok->n_vocab);
    if (len > UINT32_MAX - 1)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: token %d is %zu bytes long",
                            lp_path_basename(tok->path), id, len);
    char *copy = pool_copy(tok, s, len);
    if (!copy)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", lp_path_basename(tok->path));
    tok->pieces[id] = copy; /* a replaced piece stays in the pool until close */
    tok->piece_len[id] = (uint32_t)len;
    return LP_OK;
}

/* The string BPE knows id by: the model's, also where an added token renamed the id. */
static const char *model_key(const lp_tokenizer *tok, int32_t id, uint32_t *len)
{
    if (tok->model_pieces && tok->model_pieces[id]) {
        *len = tok->model_piece_len[id];
        return tok->model_pieces[id];
    }
    *len = tok->piece_len[id];
    return tok->pieces[id];
}

lp_status lp_tok_override_piece(lp_tokenizer *tok, int32_t id, const char *s, size_t len,
                                lp_error *err)
{
    LP_ASSERT(id >= 0 && id < tok->n_vocab && tok->pieces[id]);
    if (!tok->model_pieces) {
        tok->model_pieces = calloc((size_t)tok->n_vocab, sizeof *tok->model_pieces);
        tok->model_piece_len = calloc((size_t)tok->n_vocab, sizeof *tok->model_piece_len);
        if (!tok->model_pieces || !tok->model_piece_len)
            return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory",
                                lp_path_basename(tok->path));
    }
    if (!tok->model_pieces[id]) {
        tok->model_pieces[id] = tok->pieces[id]; /* still in the pool */
        tok->model_piece_len[id] = tok->piece_len[id];
    }
    return lp_tok_set_piece(tok, id, s, len, err);
}

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

int32_t lp_tok_vocab_find(const lp_tokenizer *tok, const char *s, size_t len)
{
    if (!tok->vocab.slots)
        return -1;
    size_t i = (size_t)hash_bytes(s, len) & tok->vocab.mask;
    for (;;) {
        int32_t slot = tok->vocab.slots[i];
        if (slot == 0)
            return -1;
        int32_t id = slot - 1;
        uint32_t key_len;
        const char *key = model_key(tok, id, &key_len);
        if (key_len == len && memcmp(key, s, len) == 0)
            return id;
        i = (i + 1) & tok->vocab.mask;
    }
}

static void parse_byte_piece(lp_tokenizer *tok, int32_t id, const char *p, uint32_t len)
{
    if (len != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>')
        return;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = p[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return;
        v = v * 16 + d;
    }
    if (tok->byte_ids[v] < 0)
        tok->byte_ids[v] = id;
}

lp_status lp_tok_build_vocab_map(lp_tokenizer *tok, lp_error *err)
{
    size_t cap = 16;
    while (cap < (size_t)tok->n_vocab * 2)
        cap *= 2;
    free(tok->vocab.slots);
    tok->vocab.slots = calloc(cap, sizeof *tok->vocab.slots);
    if (!tok->vocab.slots)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for the vocabulary map",
                            lp_path_basename(tok->path));
    tok->vocab.mask = cap - 1;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        if (!tok->pieces[id] || (tok->flags[id] & TK_FLAG_ADDED))
            continue;
        uint32_t len, other_len;
        const char *key = model_key(tok, id, &len);
        size_t i = (size_t)hash_bytes(key, len) & tok->vocab.mask;
        bool dup = false;
        while (tok->vocab.slots[i]) {
            const char *other = model_key(tok, tok->vocab.slots[i] - 1, &other_len);
            if (other_len == len && memcmp(other, key, len) == 0) {
                dup = true; /* keep the lowest id for a repeated string */
                break;
            }
            i = (i + 1) & tok->vocab.mask;
        }
        if (!dup)
            tok->vocab.slots[i] = id + 1;
        parse_byte_piece(tok, id, key, len);
    }
    return LP_OK;
}

lp_status lp_tok_merges_init(lp_tokenizer *tok, size_t n_expected, lp_error *err)
{
    size_t cap = 16;
    while (cap < n_expected * 2)
        cap *= 2;
    tok->merges = calloc(cap, sizeof *tok->merges);
    if (!tok->merges)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for %zu merges",
                            lp_path_basename(tok->path), n_expected);
    tok->merges_mask = cap - 1;
    return LP_OK;
}

static const tk_merge_slot *merges_find(const lp_tokenizer *tok, int32_t left, int32_t right)
{
    if (!tok->merges)
        return NULL;
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    size_t i = (size_t)hash_u64(key) & tok->merges_mask;
    while (tok->merges[i].key) {
        if (tok->merges[i].key == key)
            return &tok->merges[i];
        i = (i + 1) & tok->merges_mask;
    }
    return NULL;
}

bool lp_tok_merges_add(lp_tokenizer *tok, int32_t left, int32_t right, int32_t rank, int32_t new_id)
{
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    size_t i = (size_t)hash_u64(key) & tok->merges_mask;
    while (tok->merges[i].key) {
        if (tok->merges[i].key == key)
            return false;
        i = (i + 1) & tok->merges_mask;
    }
    tok->merges[i] = (tk_merge_slot){key, rank, new_id};
    tok->n_merges++;
    return true;
}

/* ------------------------------------------------------------------------------------------ */
/* BPE                                                                                        */

typedef struct tk_sym {
    int32_t id;
    uint32_t start, len; /* bytes of the word; len 0 = merged away */
    int32_t prev, next;
} tk_sym;

typedef struct tk_cand {
    uint64_t key;   /* priority << 32 | left symbol index: the lowest pops first */
    uint32_t len;   /* left + right length when queued; any merge since changes it */
    int32_t new_id;
} tk_cand;

typedef struct cand_heap {
    tk_cand *v;
    size_t n, cap;
    bool failed;
} cand_heap;

static bool cand_before(const tk_cand *a, const tk_cand *b)
{
    return a->key < b->key;
}

/* Floats to unsigned keys in the same order, so that the best score (lowest -score) pops
 * first; -0 counts as +0, as the float comparison in run.c has it. */
static uint32_t score_key(float score)
{
    float v = -score;
    if (v == 0.0f)
        v = 0.0f;
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static void heap_push(cand_heap *h, tk_cand c)
{
    if (h->failed)
        return;
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        tk_cand *v = realloc(h->v, cap * sizeof *v);
        if (!v) {
            h->failed = true;
            return;
        }
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_before(&c, &h->v[parent]))
            break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = c;
}

static tk_cand heap_pop(cand_heap *h)
{
    tk_cand top = h->v[0];
    tk_cand last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->n)
            break;
        if (child + 1 < h->n && cand_before(&h->v[child + 1], &h->v[child]))
            child++;
        if (!cand_before(&h->v[child], &last))
            break;
        h->v[i] = h->v[child];
        i = child;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

/* The candidate merge of symbols a and b = a->next, if there is one. */
static bool pair_candidate(const lp_tokenizer *tok, const char *word, const tk_sym *syms,
                           int32_t a, tk_cand *out)
{
    int32_t b = syms[a].next;
    if (b < 0)
        return false;
    const tk_sym *l = &syms[a], *r = &syms[b];
    if (tok->model == TK_MODEL_BPE_MERGES) {
        if (l->id < 0 || r->id < 0)
            return false;
        const tk_merge_slot *m = merges_find(tok, l->id, r->id);
        if (!m)
            return false;
        *out = (tk_cand){((uint64_t)(uint32_t)m->rank << 32) | (uint32_t)a, l->len + r->len,
                         m->new_id};
        return true;
    }
    /* score models: the concatenated text must be a vocabulary string */
    int32_t id = lp_tok_vocab_find(tok, word + l->start, (size_t)l->len + r->len);
    if (id < 0)
        return false;
    *out = (tk_cand){((uint64_t)score_key(tok->scores[id]) << 32) | (uint32_t)a,
                     l->len + r->len, id};
    return true;
}

/* Merge the symbols of one word; syms are linked in order 0..n-1 on entry. */
static lp_status bpe_merge(const lp_tokenizer *tok, const char *word, tk_sym *syms, size_t n)
{
    cand_heap heap = {0};
    tk_cand c;
    for (size_t i = 0; i + 1 < n; i++)
        if (pair_candidate(tok, word, syms, (int32_t)i, &c))
            heap_push(&heap, c);
    while (heap.n > 0 && !heap.failed) {
        c = heap_pop(&heap);
        int32_t pos = (int32_t)(uint32_t)c.key;
        tk_sym *l = &syms[pos];
        /* Stale: merged away, or a side grew since this entry was queued. (A symbol's next
         * changes only when it absorbs it, so lengths tell everything.) */
        if (l->len == 0 || l->next < 0 || l->len + syms[l->next].len != c.len)
            continue;
        tk_sym *r = &syms[l->next];
        l->id = c.new_id;
        l->len += r->len;
        l->next = r->next;
        if (r->next >= 0)
            syms[r->next].prev = pos;
        r->len = 0;
        tk_cand nc;
        if (l->prev >= 0 && pair_candidate(tok, word, syms, l->prev, &nc))
            heap_push(&heap, nc);
        if (pair_candidate(tok, word, syms, pos, &nc))
            heap_push(&heap, nc);
    }
    bool failed = heap.failed;
    free(heap.v);
    return failed ? LP_ERR_NOMEM : LP_OK;
}

typedef struct sym_vec {
    tk_sym *v;
    size_t n, cap;
    bool failed;
} sym_vec;

static void sym_push(sym_vec *s, int32_t id, size_t start, size_t len)
{
    if (s->failed)
        return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        tk_sym *v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            s->failed = true;
            return;
        }
        s->v = v;
        s->cap = cap;
    }
    int32_t i = (int32_t)s->n++;
    s->v[i] = (tk_sym){id, (uint32_t)start, (uint32_t)len, i - 1, i + 1};
}

static void sym_link_end(sym_vec *s)
{
    if (s->n)
        s->v[s->n - 1].next = -1;
}

/* Hugging Face BPE on one pre-token: characters (with the continuing-subword prefix and
 * end-of-word suffix), byte fallback or unk, then merges by rank. */
static lp_status bpe_word_merges(const lp_tokenizer *tok, const char *w, size_t len,
                                 ids_vec *out)
{
    if (len == 0)
        return LP_OK;
    if (len > UINT32_MAX / 2)
        return LP_ERR_RANGE;
    if (tok->ignore_merges) {
        int32_t id = lp_tok_vocab_find(tok, w, len);
        if (id >= 0) {
            ids_push(out, id);
            return LP_OK;
        }
    }
    sym_vec syms = {0};
    tk_buf tmp = {0};
    int32_t unk_pending = -1; /* start of a run of unknown characters */
    size_t unk_len = 0;
    size_t i = 0;
    while (i < len) {
        size_t start = i;
        lp_utf8_next(w, len, &i);
        size_t clen = i - start;
        const char *key = w + start;
        size_t key_len = clen;
        if ((tok->cont_prefix_len && start > 0) || (tok->eow_suffix_len && i == len)) {
            tmp.len = 0;
            if (tok->cont_prefix_len && start > 0)
                lp_tok_buf_put(&tmp, tok->cont_prefix, tok->cont_prefix_len);
            lp_tok_buf_put(&tmp, w + start, clen);
            if (tok->eow_suffix_len && i == len)
                lp_tok_buf_put(&tmp, tok->eow_suffix, tok->eow_suffix_len);
            if (tmp.failed)
                break;
            key = tmp.data;
            key_len = tmp.len;
        }
        int32_t id = lp_tok_vocab_find(tok, key, key_len);
        if (id >= 0) {
            if (unk_pending >= 0) {
                sym_push(&syms, tok->unk_id, (size_t)unk_pending, unk_len);
                unk_pending = -1;
            }
            sym_push(&syms, id, start, clen);
            continue;
        }
        if (tok->byte_fallback) {
            bool all = true;
            for (size_t k = 0; k < key_len; k++)
                if (tok->byte_ids[(unsigned char)key[k]] < 0)
                    all = false;
            if (all) {
                /* One symbol per byte (lengths only matter as bookkeeping for the merge
                 * queue). Like Hugging Face, a pending unk is not flushed first: it lands
                 * after these bytes. */
                for (size_t k = 0; k < key_len; k++)
                    sym_push(&syms, tok->byte_ids[(unsigned char)key[k]],
                             start + (k < clen ? k : clen - 1), k < clen ? 1 : 0);
                continue;
            }
        }
        if (tok->unk_id >= 0) {
            if (unk_pending >= 0 && tok->fuse_unk) {
                unk_len += clen;
            } else {
                if (unk_pending >= 0)
                    sym_push(&syms, tok->unk_id, (size_t)unk_pending, unk_len);
                unk_pending = (int32_t)start;
                unk_len = clen;
            }
        }
        /* no unk token: the character is dropped, as Hugging Face does */
    }
    if (unk_pending >= 0)
        sym_push(&syms, tok->unk_id, (size_t)unk_pending, unk_len);
    lp_tok_buf_free(&tmp);
    if (syms.failed || tmp.failed) {
        free(syms.v);
        return LP_ERR_NOMEM;
    }
    sym_link_end(&syms);
    /* Zero-length symbols would look merged away; give them a length of 1 for bookkeeping.
     * (Only byte-fallback symbols of a prefixed/suffixed key can be empty.) */
    for (size_t k = 0; k < syms.n; k++)
        if (syms.v[k].len == 0)
            syms.v[k].len = 1;
    lp_status st = bpe_merge(tok, w, syms.v, syms.n);
    if (st == LP_OK)
        for (int32_t k = syms.n ? 0 : -1; k >= 0; k = syms.v[k].next)
            ids_push(out, syms.v[k].id);
    free(syms.v);
    return st;
}

/* SentencePiece BPE (GGUF "llama"): characters, merges of the best-scoring vocabulary string,
 * then byte fallback for what is left unknown. */
static lp_status bpe_word_scores(const lp_tokenizer *tok, const char *w, size_t len,
                                 ids_vec *out)
{
    if (len == 0)
        return LP_OK;
    if (len > UINT32_MAX / 2)
        return LP_ERR_RANGE;
    sym_vec syms = {0};
    size_t i = 0;
    while (i < len) {
        /* llama.cpp takes a character's length from its lead byte alone, valid or not */
        static const uint8_t lead_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
        size_t start = i;
        size_t n = lead_len[(unsigned char)w[i] >> 4];
        i += n < len - i ? n : len - i;
        sym_push(&syms, lp_tok_vocab_find(tok, w + start, i - start), start, i - start);
    }
    if (syms.failed) {
        free(syms.v);
        return LP_ERR_NOMEM;
    }
    sym_link_end(&syms);
    lp_status st = bpe_merge(tok, w, syms.v, syms.n);
    if (st == LP_OK)
        for (int32_t k = syms.n ? 0 : -1; k >= 0; k = syms.v[k].next) {
            const tk_sym *s = &syms.v[k];
            if (s->id >= 0) {
                ids_push(out, s->id);
                continue;
            }
            for (uint32_t b = 0; b < s->len; b++) {
                int32_t id = tok->byte_ids[(unsigned char)w[s->start + b]];
                if (id < 0)
                    id = tok->unk_id;
                if (id >= 0)
                    ids_push(out, id);
            }
        }
    free(syms.v);
    return st;
}

/* llama2.c run.c encode(): BOS, the dummy-prefix " ", each code point (or its bytes + 3),
 * then repeatedly merge the adjacent pair whose concatenated piece strings score best. */
static lp_status encode_llama2c(const lp_tokenizer *tok, const char *text, size_t len,
                                bool add_bos, ids_vec *out)
{
    tk_buf word = {0};
    sym_vec syms = {0};
    int32_t space = lp_tok_vocab_find(tok, " ", 1);
    lp_status st = LP_OK;
    if (add_bos && tok->n_vocab > 1) {
        sym_push(&syms, 1, word.len, tok->piece_len[1]);
        lp_tok_buf_put(&word, tok->pieces[1], tok->piece_len[1]);
    }
    if (len > 0 && space >= 0) {
        sym_push(&syms, space, word.len, 1);
        lp_tok_buf_put(&word, " ", 1);
    }
    size_t i = 0;
    while (i < len) {
        /* run.c groups a lead byte with up to three continuation bytes, valid or not */
        size_t start = i++;
        while (i < len && i - start < 4 && ((unsigned char)text[i] & 0xC0) == 0x80)
            i++;
        int32_t id = lp_tok_vocab_find(tok, text + start, i - start);
        if (id >= 0) {
            sym_push(&syms, id, word.len, i - start);
            lp_tok_buf_put(&word, text + start, i - start);
            continue;
        }
        for (size_t b = start; b < i; b++) {
            int32_t bid = (int32_t)(unsigned char)text[b] + 3;
            if (bid >= tok->n_vocab || !tok->pieces[bid])
                continue;
            sym_push(&syms, bid, word.len, tok->piece_len[bid]);
            lp_tok_buf_put(&word, tok->pieces[bid], tok->piece_len[bid]);
        }
    }
    if (word.failed || syms.failed || word.len > UINT32_MAX / 2) {
        st = word.failed || syms.failed ? LP_ERR_NOMEM : LP_ERR_RANGE;
        goto done;
    }
    sym_link_end(&syms);
    for (size_t k = 0; k < syms.n; k++)
        if (syms.v[k].len == 0)
            syms.v[k].len = 1; /* an empty stored piece; see bpe_word_merges */
    if (syms.n)
        st = bpe_merge(tok, word.data, syms.v, syms.n);
    if (st == LP_OK)
        for (int32_t k = syms.n ? 0 : -1; k >= 0; k = syms.v[k].next)
            ids_push(out, syms.v[k].id);
done:
    lp_tok_buf_free(&word);
    free(syms.v);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* normalizers and pre-tokenizers                                                             */

/* Apply the normalizers to s; *out is malloc'd (NUL-terminated). */
lp_status lp_tok_normalize(const lp_tokenizer *tok, const char *s, size_t len, char **out,
                       size_t *out_len)
{
    char *cur = lp_tok_strndup(s, len);
    if (!cur)
        return LP_ERR_NOMEM;
    size_t cur_len = len;
    for (size_t k = 0; k < tok->n_norms; k++) {
        const tk_norm *n = &tok->norms[k];
        char *next = NULL;
        size_t next_len = 0;
        lp_status st = LP_OK;
        switch (n->kind) {
        case TK_NORM_NFC: st = lp_uc_normalize(LP_UC_NFC, cur, cur_len, &next, &next_len); break;
        case TK_NORM_NFD: st = lp_uc_normalize(LP_UC_NFD, cur, cur_len, &next, &next_len); break;
        case TK_NORM_NFKC: st = lp_uc_normalize(LP_UC_NFKC, cur, cur_len, &next, &next_len); break;
        case TK_NORM_NFKD: st = lp_uc_normalize(LP_UC_NFKD, cur, cur_len, &next, &next_len); break;
        case TK_NORM_LOWERCASE: st = lp_uc_lowercase(cur, cur_len, &next, &next_len); break;
        case TK_NORM_PREPEND: {
            if (cur_len == 0)
                continue; /* Hugging Face prepends only to non-empty text */
            tk_buf b = {0};
            lp_tok_buf_put(&b, n->pattern, n->pattern_len);
            lp_tok_buf_put(&b, cur, cur_len);
            st = b.failed ? LP_ERR_NOMEM : LP_OK;
            next = b.data, next_len = b.len;
            break;
        }
        case TK_NORM_REPLACE: {
            tk_buf b = {0};
            st = replace_all(n->re, n->pattern, n->pattern_len, n->content, n->content_len, cur,
                             cur_len, &b);
            if (st == LP_OK && !b.data)
                lp_tok_buf_put(&b, "", 0);
            st = st == LP_OK && b.failed ? LP_ERR_NOMEM : st;
            next = b.data, next_len = b.len;
            break;
        }
        case TK_NORM_STRIP: {
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
            next = lp_tok_strndup(cur + a, e - a);
            next_len = e - a;
            st = next ? LP_OK : LP_ERR_NOMEM;
            break;
        }
        case TK_NORM_BYTELEVEL: {
            tk_buf b = {0};
            lp_tok_buf_put(&b, "", 0);
            for (size_t j = 0; j < cur_len; j++) {
                char u[4];
                lp_tok_buf_put(&b, u, lp_utf8_put(byte_cps()[(unsigned char)cur[j]], u));
            }
            st = b.failed ? LP_ERR_NOMEM : LP_OK;
            next = b.data, next_len = b.len;
            break;
        }
        case TK_NORM_COUNT: break;
        }
        if (st != LP_OK) {
            free(next);
            free(cur);
            return st;
        }
        free(cur);
        cur = next;
        cur_len = next_len;
    }
    *out = cur;
    *out_len = cur_len;
    return LP_OK;
}

/* The pre-tokenized pieces of one segment, stored back to back in buf. */
typedef struct tk_splits {
    tk_buf buf;
    size_t *off, *len;
    size_t n, cap;
    bool failed;
} tk_splits;

static void splits_push(tk_splits *s, const char *bytes, size_t len)
{
    if (len == 0 || s->failed)
        return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 32;
        size_t *off = realloc(s->off, cap * sizeof *off);
        if (!off) {
            s->failed = true;
            return;
        }
        s->off = off;
        size_t *ln = realloc(s->len, cap * sizeof *ln);
        if (!ln) {
            s->failed = true;
            return;
        }
        s->len = ln;
        s->cap = cap;
    }
    s->off[s->n] = s->buf.len;
    s->len[s->n] = len;
    s->n++;
    lp_tok_buf_put(&s->buf, bytes, len);
    if (s->buf.failed)
        s->failed = true;
}

static void splits_free(tk_splits *s)
{
    lp_tok_buf_free(&s->buf);
    free(s->off);
    free(s->len);
    memset(s, 0, sizeof *s);
}

/* Hugging Face's SplitDelimiterBehavior over the spans of one piece. */
static void apply_behavior(tk_splits *out, const char *s, span *sp, size_t n,
                           tk_split_behavior behavior, bool invert)
{
    if (invert)
        for (size_t k = 0; k < n; k++)
            sp[k].match = !sp[k].match;
    size_t w = 0; /* merged spans are written back into sp[0..w) */
    bool previous_match = false;
    switch (behavior) {
    case TK_SPLIT_REMOVED:
        for (size_t k = 0; k < n; k++)
            if (!sp[k].match)
                sp[w++] = sp[k];
        break;
    case TK_SPLIT_ISOLATED:
        w = n;
        break;
    case TK_SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t k = 0; k < n; k++) {
            bool m = sp[k].match;
            if (m && !previous_match && w > 0)
                sp[w - 1].end = sp[k].end;
            else
                sp[w++] = sp[k];
            previous_match = m;
        }
        break;
    case TK_SPLIT_MERGED_WITH_NEXT: {
        /* walk backwards, merging a match into the span after it */
        size_t r = n;
        w = n;
        for (size_t k = n; k-- > 0;) {
            bool m = sp[k].match;
            if (m && !previous_match && r < n) {
                sp[r].start = sp[k].start;
            } else {
                sp[--r] = sp[k];
            }
            previous_match = m;
        }
        /* live spans are sp[r..n) */
        for (size_t k = r; k < n; k++)
            splits_push(out, s + sp[k].start, sp[k].end - sp[k].start);
        return;
    }
    case TK_SPLIT_CONTIGUOUS:
        for (size_t k = 0; k < n; k++) {
            bool m = sp[k].match;
            if (m == previous_match && w > 0)
                sp[w - 1].end = sp[k].end;
            else
                sp[w++] = sp[k];
            previous_match = m;
        }
        break;
    case TK_SPLIT_COUNT: break;
    }
    for (size_t k = 0; k < w; k++)
        splits_push(out, s + sp[k].start, sp[k].end - sp[k].start);
}

static lp_status pretokenize_step(const tk_pre *p, const tk_splits *in, bool at_text_start,
                                  tk_splits *out)
{
    span_vec spans = {0};
    tk_buf tmp = {0};
    lp_status st = LP_OK;
    const uint32_t *bcp = byte_cps();
    for (size_t k = 0; k < in->n && st == LP_OK; k++) {
        const char *s = in->buf.data + in->off[k];
        size_t len = in->len[k];
        switch (p->kind) {
        case TK_PRE_SPLIT:
        case TK_PRE_WHITESPACE:
        case TK_PRE_WHITESPACE_SPLIT:
        case TK_PRE_DIGITS:
        case TK_PRE_PUNCTUATION:
            st = find_spans(p->re, p->pattern, p->pattern_len, s, len, &spans);
            if (st == LP_OK)
                apply_behavior(out, s, spans.v, spans.n, p->behavior, p->invert);
            break;
        case TK_PRE_BYTELEVEL: {
            tmp.len = 0;
            if (p->add_prefix_space && s[0] != ' ')
                lp_tok_buf_putc(&tmp, ' ');
            lp_tok_buf_put(&tmp, s, len);
            if (tmp.failed) {
                st = LP_ERR_NOMEM;
                break;
            }
            tk_splits parts = {0};
            if (p->use_regex) {
                st = find_spans(p->re, NULL, 0, tmp.data, tmp.len, &spans);
                if (st == LP_OK)
                    apply_behavior(&parts, tmp.data, spans.v, spans.n, TK_SPLIT_ISOLATED, false);
            } else {
                splits_push(&parts, tmp.data, tmp.len);
            }
            if (parts.failed)
                st = LP_ERR_NOMEM;
            /* map every byte to its printable stand-in */
            for (size_t q = 0; q < parts.n && st == LP_OK; q++) {
                tk_buf mapped = {0};
                const unsigned char *b = (const unsigned char *)parts.buf.data + parts.off[q];
                for (size_t j = 0; j < parts.len[q]; j++) {
                    char u[4];
                    lp_tok_buf_put(&mapped, u, lp_utf8_put(bcp[b[j]], u));
                }
                if (mapped.failed)
                    st = LP_ERR_NOMEM;
                else
                    splits_push(out, mapped.data, mapped.len);
                lp_tok_buf_free(&mapped);
            }
            splits_free(&parts);
            break;
        }
        case TK_PRE_METASPACE: {
            tmp.len = 0;
            bool starts = len >= p->replacement_len &&
                          memcmp(s, p->replacement, p->replacement_len) == 0;
            /* the replacement of a leading space counts as a leading replacement */
            bool starts_space = len > 0 && s[0] == ' ';
            bool prepend = false;
            if (!starts && !starts_space) {
                if (p->prepend_scheme == TK_PREPEND_ALWAYS)
                    prepend = true;
                else if (p->prepend_scheme == TK_PREPEND_FIRST && at_text_start && k == 0)
                    prepend = true;
            }
            if (prepend)
                lp_tok_buf_put(&tmp, p->replacement, p->replacement_len);
            st = replace_all(NULL, " ", 1, p->replacement, p->replacement_len, s, len, &tmp);
            if (st != LP_OK)
                break;
            if (!tmp.data)
                break;
            if (p->split) {
                st = find_spans(NULL, p->replacement, p->replacement_len, tmp.data, tmp.len,
                                &spans);
                if (st == LP_OK)
                    apply_behavior(out, tmp.data, spans.v, spans.n, TK_SPLIT_MERGED_WITH_NEXT,
                                   false);
            } else {
                splits_push(out, tmp.data, tmp.len);
            }
            break;
        }
        case TK_PRE_COUNT: break;
        }
    }
    free(spans.v);
    lp_tok_buf_free(&tmp);
    if (st == LP_OK && out->failed)
        st = LP_ERR_NOMEM;
    return st;
}

/* Pre-tokenize then run the model over each piece. */
static lp_status encode_segment(const lp_tokenizer *tok, const char *s, size_t len,
                                bool at_text_start, ids_vec *out)
{
    tk_splits cur = {0};
    splits_push(&cur, s, len);
    lp_status st = cur.failed ? LP_ERR_NOMEM : LP_OK;
    for (size_t k = 0; k < tok->n_pres && st == LP_OK; k++) {
        tk_splits next = {0};
        st = pretokenize_step(&tok->pres[k], &cur, at_text_start, &next);
        splits_free(&cur);
        cur = next;
    }
    for (size_t k = 0; k < cur.n && st == LP_OK; k++) {
        const char *w = cur.buf.data + cur.off[k];
        if (tok->model == TK_MODEL_BPE_MERGES)
            st = bpe_word_merges(tok, w, cur.len[k], out);
        else
            st = bpe_word_scores(tok, w, cur.len[k], out);
    }
    splits_free(&cur);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* added tokens                                                                               */

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

static bool is_space_byte(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
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
    if (s->failed || (len == 0 && added < 0))
        return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        seg *v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            s->failed = true;
            return;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (seg){start, len, added};
}

lp_status lp_tok_prepare_added(lp_tokenizer *tok, lp_error *err)
{
    bool word = false;
    for (size_t k = 0; k < tok->n_added; k++) {
        tk_added *a = &tok->added[k];
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
        const tk_added *best = NULL;
        for (size_t k = 0; k < tok->n_added; k++) {
            const tk_added *a = &tok->added[k];
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

/* ------------------------------------------------------------------------------------------ */
/* public API: encode                                                                         */

static lp_status encode_text(const lp_tokenizer *tok, const char *text, size_t len, ids_vec *out)
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
            ids_push(out, g->added);
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
                ids_push(out, sub.v[q].added);
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
    ids_vec out = {0};
    lp_status st = LP_OK;
    if (tok->model == TK_MODEL_LLAMA2C) {
        st = encode_llama2c(tok, text, len, add_special, &out);
    } else {
        size_t k = 0;
        if (add_special)
            for (; k < tok->n_post && !tok->post[k].is_sequence; k++)
                for (size_t q = 0; q < tok->post[k].n_ids; q++)
                    ids_push(&out, tok->post[k].ids[q]);
        st = encode_text(tok, text, len, &out);
        if (add_special)
            for (k = k < tok->n_post ? k + 1 : k; k < tok->n_post; k++)
                if (!tok->post[k].is_sequence)
                    for (size_t q = 0; q < tok->post[k].n_ids; q++)
                        ids_push(&out, tok->post[k].ids[q]);
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

/* ------------------------------------------------------------------------------------------ */
/* decode and labels                                                                          */

typedef struct str_vec {
    tk_buf *v;
    size_t n;
} str_vec;

static void strs_free(str_vec *s)
{
    for (size_t k = 0; k < s->n; k++)
        lp_tok_buf_free(&s->v[k]);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

static bool is_byte_token(const char *p, size_t len, unsigned *value)
{
    if (len != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>')
        return false;
    unsigned v = 0;
    for (int k = 3; k < 5; k++) {
        char c = p[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 :
                c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v * 16 + (unsigned)d;
    }
    *value = v;
    return true;
}

/* Hugging Face's clean_up_tokenization: drop the space before punctuation and contractions. */
static lp_status cleanup_spaces(tk_buf *b)
{
    static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's",
                                       " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    for (size_t k = 0; k < sizeof from / sizeof from[0]; k++) {
        tk_buf out = {0};
        lp_status st = replace_all(NULL, from[k], strlen(from[k]), to[k], strlen(to[k]),
                                   b->data ? b->data : "", b->len, &out);
        if (st != LP_OK) {
            lp_tok_buf_free(&out);
            return st;
        }
        if (!out.data)
            lp_tok_buf_put(&out, "", 0);
        lp_tok_buf_free(b);
        *b = out;
    }
    return LP_OK;
}

/* Run the decoder chain over strs in place. for_label skips the steps that only make sense for
 * a whole text (Strip, the first token's Metaspace prefix). */
static lp_status run_decoder_list(const tk_dec *decs, size_t n_decs, str_vec *strs,
                                  bool for_label)
{
    for (size_t d = 0; d < n_decs; d++) {
        const tk_dec *dec = &decs[d];
        switch (dec->kind) {
        case TK_DEC_BYTELEVEL: {
            tk_buf all = {0};
            for (size_t k = 0; k < strs->n; k++) {
                const char *s = strs->v[k].data ? strs->v[k].data : "";
                size_t len = strs->v[k].len;
                /* a token with a character outside the alphabet passes as it is */
                tk_buf bytes = {0};
                bool ok = true;
                size_t i = 0;
                while (i < len) {
                    int32_t cp = lp_utf8_next(s, len, &i);
                    int b = cp < 0 ? -1 : lp_tok_cp_to_byte((uint32_t)cp);
                    if (b < 0) {
                        ok = false;
                        break;
                    }
                    lp_tok_buf_putc(&bytes, (char)b);
                }
                if (ok)
                    lp_tok_buf_put(&all, bytes.data, bytes.len);
                else
                    lp_tok_buf_put(&all, s, len);
                lp_tok_buf_free(&bytes);
            }
            if (all.failed) {
                lp_tok_buf_free(&all);
                return LP_ERR_NOMEM;
            }
            strs_free(strs);
            strs->v = malloc(sizeof *strs->v);
            if (!strs->v) {
                lp_tok_buf_free(&all);
                return LP_ERR_NOMEM;
            }
            strs->v[0] = all;
            strs->n = 1;
            break;
        }
        case TK_DEC_METASPACE:
        case TK_DEC_REPLACE:
            for (size_t k = 0; k < strs->n; k++) {
                tk_buf out = {0};
                const char *s = strs->v[k].data ? strs->v[k].data : "";
                size_t len = strs->v[k].len;
                if (dec->kind == TK_DEC_METASPACE && k == 0 && !for_label &&
                    dec->prepend_scheme != TK_PREPEND_NEVER && len >= dec->pattern_len &&
                    memcmp(s, dec->pattern, dec->pattern_len) == 0) {
                    s += dec->pattern_len;
                    len -= dec->pattern_len;
                }
                lp_status st = replace_all(NULL, dec->pattern, dec->pattern_len,
                                           dec->kind == TK_DEC_METASPACE ? " " : dec->content,
                                           dec->kind == TK_DEC_METASPACE ? 1 : dec->content_len,
                                           s, len, &out);
                if (st != LP_OK) {
                    lp_tok_buf_free(&out);
                    return st;
                }
                lp_tok_buf_free(&strs->v[k]);
                strs->v[k] = out;
            }
            break;
        case TK_DEC_BYTEFALLBACK: {
            /* runs of <0xXX> tokens become their bytes */
            size_t w = 0;
            for (size_t k = 0; k < strs->n;) {
                unsigned v;
                if (!is_byte_token(strs->v[k].data, strs->v[k].len, &v)) {
                    strs->v[w++] = strs->v[k++];
                    continue;
                }
                tk_buf bytes = {0};
                while (k < strs->n && is_byte_token(strs->v[k].data, strs->v[k].len, &v)) {
                    lp_tok_buf_putc(&bytes, (char)v);
                    lp_tok_buf_free(&strs->v[k]);
                    k++;
                }
                if (bytes.failed) {
                    lp_tok_buf_free(&bytes);
                    strs->n = w;
                    return LP_ERR_NOMEM;
                }
                strs->v[w++] = bytes;
            }
            strs->n = w;
            break;
        }
        case TK_DEC_FUSE: {
            if (strs->n <= 1)
                break;
            for (size_t k = 1; k < strs->n; k++) {
                lp_tok_buf_put(&strs->v[0], strs->v[k].data, strs->v[k].len);
                lp_tok_buf_free(&strs->v[k]);
            }
            strs->n = 1;
            if (strs->v[0].failed)
                return LP_ERR_NOMEM;
            break;
        }
        case TK_DEC_STRIP:
            if (for_label)
                break;
            for (size_t k = 0; k < strs->n; k++) {
                tk_buf *b = &strs->v[k];
                size_t cl = dec->content_len;
                int64_t n = 0;
                size_t a = 0;
                while (n < dec->start && cl && b->len - a >= cl &&
                       memcmp(b->data + a, dec->content, cl) == 0)
                    a += cl, n++;
                size_t e = b->len;
                n = 0;
                while (n < dec->stop && cl && e - a >= cl &&
                       memcmp(b->data + e - cl, dec->content, cl) == 0)
                    e -= cl, n++;
                if (a || e != b->len) {
                    memmove(b->data, b->data + a, e - a);
                    b->len = e - a;
                    b->data[b->len] = '\0';
                }
            }
            break;
        case TK_DEC_BPE_SUFFIX:
            for (size_t k = 0; k < strs->n; k++) {
                tk_buf out = {0};
                bool last = k + 1 == strs->n && !for_label;
                lp_status st = replace_all(NULL, dec->pattern, dec->pattern_len, last ? "" : " ",
                                           last ? 0 : 1, strs->v[k].data ? strs->v[k].data : "",
                                           strs->v[k].len, &out);
                if (st != LP_OK) {
                    lp_tok_buf_free(&out);
                    return st;
                }
                lp_tok_buf_free(&strs->v[k]);
                strs->v[k] = out;
            }
            break;
        case TK_DEC_WORDPIECE:
            for (size_t k = 0; k < strs->n; k++) {
                tk_buf out = {0};
                const char *s = strs->v[k].data ? strs->v[k].data : "";
                size_t len = strs->v[k].len;
                /* after the first token: "##x" continues the word, anything else starts one */
                if (k > 0 || for_label) {
                    if (len >= dec->pattern_len && memcmp(s, dec->pattern, dec->pattern_len) == 0) {
                        s += dec->pattern_len;
                        len -= dec->pattern_len;
                    } else if (!for_label) {
                        lp_tok_buf_putc(&out, ' ');
                    }
                }
                lp_tok_buf_put(&out, s, len);
                if (!out.data)
                    lp_tok_buf_put(&out, "", 0);
                lp_status st = out.failed ? LP_ERR_NOMEM : LP_OK;
                if (st == LP_OK && dec->cleanup && !for_label)
                    st = cleanup_spaces(&out);
                if (st != LP_OK) {
                    lp_tok_buf_free(&out);
                    return st;
                }
                lp_tok_buf_free(&strs->v[k]);
                strs->v[k] = out;
            }
            break;
        case TK_DEC_COUNT: break;
        }
    }
    return LP_OK;
}

static lp_status run_decoders(const lp_tokenizer *tok, str_vec *strs, bool for_label)
{
    if (tok->n_decs > 0 || !for_label)
        return run_decoder_list(tok->decs, tok->n_decs, strs, for_label);
    /* A file without a decoder still deserves readable labels: undo what its pre-tokenizer
     * or normalizer visibly did (the byte-level alphabet, or U+2581 for spaces and <0xXX>). */
    char meta[] = "\xE2\x96\x81", space[] = " ";
    tk_dec implied[2];
    memset(implied, 0, sizeof implied);
    size_t n = 0;
    if (strcmp(tok->kind, "bpe-bytelevel") == 0) {
        implied[n++].kind = TK_DEC_BYTELEVEL;
    } else if (strcmp(tok->kind, "bpe-sentencepiece") == 0) {
        implied[n].kind = TK_DEC_REPLACE;
        implied[n].pattern = meta, implied[n].pattern_len = 3;
        implied[n].content = space, implied[n++].content_len = 1;
        implied[n++].kind = TK_DEC_BYTEFALLBACK;
    }
    return run_decoder_list(implied, n, strs, true);
}

lp_status lp_tokenizer_decode(const lp_tokenizer *tok, const int32_t *ids, size_t n_ids,
                              bool skip_special, char **text, lp_error *err)
{
    LP_ASSERT(tok && text && (ids || n_ids == 0));
    *text = NULL;
    str_vec strs = {calloc(n_ids ? n_ids : 1, sizeof(tk_buf)), 0};
    if (!strs.v)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory decoding %zu ids", n_ids);
    for (size_t k = 0; k < n_ids; k++) {
        int32_t id = ids[k];
        if (id < 0 || id >= tok->n_vocab || !tok->pieces[id]) {
            strs_free(&strs);
            return lp_error_set(err, LP_ERR_RANGE, "%s: token id %d at position %zu is not in "
                                "the vocabulary [0, %lld)", lp_path_basename(tok->path), id, k,
                                (long long)tok->n_vocab);
        }
        if (skip_special && (tok->flags[id] & TK_FLAG_SPECIAL))
            continue;
        tk_buf *b = &strs.v[strs.n++];
        lp_tok_buf_put(b, tok->pieces[id], tok->piece_len[id]);
        if (b->failed) {
            strs_free(&strs);
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        }
    }
    lp_status st = run_decoders(tok, &strs, false);
    tk_buf all = {0};
    lp_tok_buf_put(&all, "", 0);
    for (size_t k = 0; k < strs.n && st == LP_OK; k++) {
        if (k > 0 && tok->n_decs == 0)
            lp_tok_buf_putc(&all, ' '); /* no decoder: Hugging Face joins with spaces */
        lp_tok_buf_put(&all, strs.v[k].data, strs.v[k].len);
    }
    strs_free(&strs);
    if (st == LP_OK && all.failed)
        st = LP_ERR_NOMEM;
    if (st != LP_OK) {
        lp_tok_buf_free(&all);
        return lp_error_set(err, st, "%s: out of memory decoding %zu ids",
                            lp_path_basename(tok->path), n_ids);
    }
    *text = all.data;
    return LP_OK;
}

const char *lp_tokenizer_piece(const lp_tokenizer *tok, int32_t id)
{
    if (!tok || id < 0 || id >= tok->n_vocab)
        return NULL;
    return tok->pieces[id];
}

/* Escape for one-line display: control characters as \n \t \r \xNN, invalid UTF-8 as \xNN. */
static char *escape_label(const char *s, size_t len)
{
    tk_buf out = {0};
    lp_tok_buf_put(&out, "", 0);
    size_t i = 0;
    while (i < len) {
        size_t at = i;
        int32_t cp = lp_utf8_next(s, len, &i);
        char esc[8];
        if (cp == '\n')
            lp_tok_buf_put(&out, "\\n", 2);
        else if (cp == '\t')
            lp_tok_buf_put(&out, "\\t", 2);
        else if (cp == '\r')
            lp_tok_buf_put(&out, "\\r", 2);
        else if (cp == '\\')
            lp_tok_buf_put(&out, "\\\\", 2);
        else if (cp < 0 || cp < 0x20 || cp == 0x7F) {
            snprintf(esc, sizeof esc, "\\x%02X", (unsigned char)s[at]);
            lp_tok_buf_put(&out, esc, 4);
        } else {
            lp_tok_buf_put(&out, s + at, i - at);
        }
    }
    if (out.failed) {
        lp_tok_buf_free(&out);
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
    if (tok->flags[id] & (TK_FLAG_SPECIAL | TK_FLAG_ADDED | TK_FLAG_CONTROL)) {
        /* special tokens read best as written; llama2.c stores BOS as "\n<s>\n" */
        while (len && is_space_byte(*p))
            p++, len--;
        while (len && is_space_byte(p[len - 1]))
            len--;
        return escape_label(p, len);
    }
    str_vec strs = {calloc(1, sizeof(tk_buf)), 1};
    if (!strs.v)
        return NULL;
    lp_tok_buf_put(&strs.v[0], p, len);
    lp_status st = strs.v[0].failed ? LP_ERR_NOMEM : run_decoders(tok, &strs, true);
    tk_buf all = {0};
    for (size_t k = 0; k < strs.n && st == LP_OK; k++)
        lp_tok_buf_put(&all, strs.v[k].data, strs.v[k].len);
    strs_free(&strs);
    char *label = st == LP_OK && !all.failed ? escape_label(all.data ? all.data : "", all.len)
                                             : NULL;
    lp_tok_buf_free(&all);
    return label;
}

int64_t lp_tokenizer_vocab_size(const lp_tokenizer *tok)
{
    return tok ? tok->n_vocab : 0;
}

const char *lp_tokenizer_kind(const lp_tokenizer *tok)
{
    return tok ? tok->kind : NULL;
}

void lp_tokenizer_close(lp_tokenizer *tok)
{
    if (!tok)
        return;
    for (size_t k = 0; k < tok->n_pool_chunks; k++)
        free(tok->pool_chunks[k]);
    free(tok->pool_chunks);
    free(tok->pieces);
    free(tok->piece_len);
    free(tok->flags);
    free(tok->vocab.slots);
    free(tok->model_pieces);
    free(tok->model_piece_len);
    pcre2_code_free(tok->word_re);
    free(tok->scores);
    free(tok->merges);
    free(tok->cont_prefix);
    free(tok->eow_suffix);
    for (size_t k = 0; k < tok->n_added; k++) {
        free(tok->added[k].content);
        free(tok->added[k].pattern);
    }
    free(tok->added);
    for (size_t k = 0; k < tok->n_norms; k++) {
        free(tok->norms[k].pattern);
        free(tok->norms[k].content);
        pcre2_code_free(tok->norms[k].re);
    }
    free(tok->norms);
    for (size_t k = 0; k < tok->n_pres; k++) {
        free(tok->pres[k].pattern);
        pcre2_code_free(tok->pres[k].re);
    }
    free(tok->pres);
    for (size_t k = 0; k < tok->n_post; k++)
        free(tok->post[k].ids);
    free(tok->post);
    for (size_t k = 0; k < tok->n_decs; k++) {
        free(tok->decs[k].pattern);
        free(tok->decs[k].content);
    }
    free(tok->decs);
    free(tok->path);
    free(tok);
}

/* ------------------------------------------------------------------------------------------ */
/* llama2.c tokenizer.bin                                                                     */

/* Layout: int32 max_token_length, then records {float32 score, int32 len, len bytes} to the end
 * of the file; the count is not stored (run.c takes it from the checkpoint). */
static bool llama2c_plausible(const uint8_t *data, size_t size, int64_t *n_tokens)
{
    if (size < 4 + 8)
        return false;
    int32_t max_len = lp_load_i32(data);
    if (max_len <= 0 || max_len > 65536)
        return false;
    size_t off = 4;
    int64_t n = 0;
    while (off < size) {
        if (size - off < 8)
            return false;
        float score = lp_load_f32(data + off);
        int32_t len = lp_load_i32(data + off + 4);
        if (!isfinite(score) || len < 0 || len > max_len || (size_t)len > size - off - 8)
            return false;
        off += 8 + (size_t)len;
        n++;
    }
    *n_tokens = n;
    return n > 0;
}

lp_status lp_tok_load_llama2c(const char *path, const uint8_t *data, size_t size,
                          lp_tokenizer **out, lp_error *err)
{
    const char *name = lp_path_basename(path);
    int64_t n_tokens;
    if (!llama2c_plausible(data, size, &n_tokens))
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
    tok->model = TK_MODEL_LLAMA2C;
    for (int32_t i = 0; i < 3 && i < n_tokens; i++)
        tok->flags[i] |= TK_FLAG_SPECIAL; /* <unk>, BOS, EOS */
    /* run.c decodes <0xXX> to bytes and drops the space after BOS; Strip does the latter
     * once special tokens are skipped. */
    tok->decs = calloc(3, sizeof *tok->decs);
    if (!tok->decs || !(tok->decs[2].content = lp_tok_strndup(" ", 1))) {
        lp_tokenizer_close(tok);
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
    }
    tok->n_decs = 3;
    tok->decs[0].kind = TK_DEC_BYTEFALLBACK;
    tok->decs[1].kind = TK_DEC_FUSE;
    tok->decs[2].kind = TK_DEC_STRIP;
    tok->decs[2].content_len = 1;
    tok->decs[2].start = 1;
    *out = tok;
    return LP_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* open                                                                                       */

static lp_status open_file(const char *path, bool look_beside, lp_tokenizer **out,
                           lp_error *err);

static bool has_suffix(const char *name, const char *suffix)
{
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

/* The first name in dir (alphabetically) that want() accepts, or NULL; caller frees. */
static char *find_in_dir(const char *dir, bool (*want)(const char *name))
{
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char *best = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!want(e->d_name) || (best && strcmp(e->d_name, best) >= 0))
            continue;
        char *copy = lp_tok_strndup(e->d_name, strlen(e->d_name));
        if (copy) {
            free(best);
            best = copy;
        }
    }
    closedir(d);
    return best;
}

static bool is_tok_bin(const char *name)
{
    return strncmp(name, "tok", 3) == 0 && has_suffix(name, ".bin");
}

static bool is_gguf(const char *name)
{
    return has_suffix(name, ".gguf");
}

/* A model folder: tokenizer.json, tokenizer.bin, the first tok*.bin, then the first .gguf. */
static lp_status open_dir(const char *dir, lp_tokenizer **out, lp_error *err)
{
    char *candidates[4] = {lp_tok_strndup("tokenizer.json", 14),
                           lp_tok_strndup("tokenizer.bin", 13), find_in_dir(dir, is_tok_bin),
                           find_in_dir(dir, is_gguf)};
    lp_status st = LP_ERR_NOT_FOUND;
    for (size_t k = 0; k < 4 && st == LP_ERR_NOT_FOUND; k++) {
        if (!candidates[k])
            continue; /* no such name (or no memory for it: the search goes on) */
        char *p = lp_path_join(dir, candidates[k]);
        if (!p)
            st = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
        else if (lp_path_exists(p) && !lp_path_is_dir(p))
            st = open_file(p, false, out, err);
        free(p);
    }
    for (size_t k = 0; k < 4; k++)
        free(candidates[k]);
    if (st == LP_ERR_NOT_FOUND)
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no tokenizer.json, tokenizer.bin, "
                            "tok*.bin or .gguf in this folder (give one with --tokenizer FILE)",
                            dir);
    return st;
}

static lp_status open_file(const char *path, bool look_beside, lp_tokenizer **out,
                           lp_error *err)
{
    lp_mapped_file map;
    lp_status st = lp_map_file(path, &map, err);
    if (st != LP_OK)
        return st;
    const uint8_t *d = map.data;
    size_t size = map.size;
    size_t i = 0;
    while (i < size && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r'))
        i++;
    if (size >= 4 && memcmp(d, "GGUF", 4) == 0) {
        lp_unmap_file(&map);
        return lp_tok_load_gguf_path(path, out, err);
    }
    int64_t n;
    if (i < size && d[i] == '{') {
        lp_unmap_file(&map);
        st = lp_tok_load_json(path, out, err);
        /* other JSON (config.json, an index) names a model: look beside it */
        if (st != LP_ERR_NOT_FOUND || !look_beside)
            return st;
    } else if (llama2c_plausible(d, size, &n)) {
        st = lp_tok_load_llama2c(path, d, size, out, err);
        lp_unmap_file(&map);
        return st;
    } else {
        lp_unmap_file(&map);
    }
    if (!look_beside)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: not a tokenizer (tokenizer.json, llama2.c "
                            "tokenizer .bin or .gguf)", path);
    /* a model file (safetensors, llama2.c checkpoint): use the tokenizer in its folder */
    char *dir = lp_tok_strndup(path, strlen(path));
    if (!dir)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[slash == dir ? 1 : 0] = '\0';
    else
        strcpy(dir, ".");
    st = open_dir(dir, out, err);
    free(dir);
    if (st == LP_ERR_NOT_FOUND)
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: not a tokenizer (tokenizer.json, "
                            "llama2.c tokenizer .bin or .gguf) and none beside it; give one "
                            "with --tokenizer FILE", path);
    return st;
}

lp_status lp_tokenizer_open(const char *path, lp_tokenizer **out, lp_error *err)
{
    LP_ASSERT(path && out);
    *out = NULL;
    if (!lp_path_exists(path))
        return lp_error_set(err, LP_ERR_IO, "%s: no such file or folder", path);
    if (lp_path_is_dir(path))
        return open_dir(path, out, err);
    return open_file(path, true, out, err);
}
