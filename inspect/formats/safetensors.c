/* safetensors reader: validates the JSON header at least as strictly as the format's own loader
 * and then reports one tensor per entry, in file order, to a sink (formats_internal.h).
 *
 * Byte layout (all little-endian):
 *
 *   offset 0        u64 N            length of the JSON header, at most 100,000,000
 *   offset 8        N bytes          UTF-8 JSON object, usually padded with spaces:
 *                                      { "__metadata__": {"format": "pt", ...},   (optional,
 *                                        "name": {"dtype": "F32",                  string values)
 *                                                 "shape": [512, 64],
 *                                                 "data_offsets": [begin, end]}, ... }
 *   offset 8 + N    data section     tensors back to back; [begin, end) are relative to its start
 *
 * Rules (as the reference Rust loader enforces them, plus duplicate keys): the header starts with
 * '{' after optional JSON whitespace and lies inside the file; the JSON is valid UTF-8 with no duplicate keys; every tensor's
 * end - begin equals dtype size x product(shape) (64-bit, overflow-checked; F4 holds two values
 * a byte, and a shape that ends mid-byte is refused); sorted by begin, the
 * ranges are contiguous, start at 0, never overlap, and end exactly at the end of the file.
 *
 * The header is read by a strict single-pass scanner written for this one shape of JSON rather
 * than a general DOM parser: a DOM of a 100 MB header of tiny tensors costs 20x the file (one heap
 * node per object, string and array). Here each entry is a compact record (offsets, dtype, where
 * its name and dims are) in three growing arrays, plus a hash set of indexes for duplicates; only
 * a file that passed every check is handed to the sink.
 * Accepted grammar (RFC 8259 otherwise): top-level object; "__metadata__" maps strings to
 * strings; a tensor is an object with exactly the keys dtype (string), shape (array of integers
 * >= 0) and data_offsets (array of two integers >= 0); integers have no fraction, exponent,
 * leading zero or '+' and are at most 2^63 - 1; only JSON whitespace (the writers' space padding)
 * may follow the object. Strings: full escape syntax, surrogate pairs decoded to UTF-8; raw
 * control characters, invalid UTF-8, lone surrogates and \u0000 are refused.
 */
#include "inspect/formats/formats_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"

#define ST_MAX_HEADER 100000000ull
/* The shortest tensor entry, `"":{"dtype":"I8","shape":[],"data_offsets":[0,0]},` is 50 bytes;
 * a metadata pair `"":"",` is 6. Counts are checked against header_len / these. */
#define ST_MIN_ENTRY_BYTES 50u
#define ST_MIN_META_BYTES 6u

/* A growable byte buffer for one decoded string (scratch, reused). */
typedef struct st_buf {
    char *data;
    size_t len, cap;
} st_buf;

/* Open-addressing hash set of ids (slot value id + 1; 0 is empty). The strings live elsewhere:
 * name_of maps an id to its NUL-terminated string. */
typedef struct st_keyset {
    size_t *slots; /* [cap], cap a power of two, load <= 1/2 */
    size_t cap, count;
    const char *(*name_of)(const void *ctx, size_t id);
    const void *ctx;
} st_keyset;

/* One tensor entry as scanned: where its name and dims are, not a full descriptor, so that a
 * header of 300,000 tiny tensors stays a small multiple of the file. */
typedef struct st_entry {
    uint64_t begin, end;     /* data_offsets, relative to the data section */
    size_t name_at;          /* into st_scan.names */
    const char *name;        /* set once the scan is over (names no longer moves) */
    size_t dims_at;          /* into st_scan.dims */
    int64_t n_elements;
    lp_dtype dtype;
    int n_dims;
} st_entry;

typedef struct st_scan {
    const char *file;      /* name for messages */
    const uint8_t *text;   /* the header, [len] */
    size_t len, pos;
    lp_error *err;
    st_buf name;           /* the current top-level key */
    st_buf str;            /* any other string */
    st_buf meta_keys;      /* "__metadata__" keys, back to back with their NULs */
    st_buf names;          /* tensor names, back to back with their NULs */
    uint64_t *dims;        /* every entry's shape, back to back */
    size_t n_dims, cap_dims;
    st_entry *entries;
    size_t n_entries, cap_entries;
} st_scan;

static lp_dtype dtype_from_st(const char *s, bool *known_unsupported)
{
    static const struct {
        const char *name;
        lp_dtype dtype;
    } table[] = {
        {"F64", LP_DTYPE_F64},         {"F32", LP_DTYPE_F32},         {"F16", LP_DTYPE_F16},
        {"BF16", LP_DTYPE_BF16},       {"F8_E4M3", LP_DTYPE_F8_E4M3}, {"F8_E5M2", LP_DTYPE_F8_E5M2},
        {"I64", LP_DTYPE_I64},         {"I32", LP_DTYPE_I32},         {"I16", LP_DTYPE_I16},
        {"I8", LP_DTYPE_I8},           {"U64", LP_DTYPE_U64},         {"U32", LP_DTYPE_U32},
        {"U16", LP_DTYPE_U16},         {"U8", LP_DTYPE_U8},           {"BOOL", LP_DTYPE_BOOL},
        {"F8_E8M0", LP_DTYPE_F8_E8M0}, {"F4", LP_DTYPE_F4_E2M1},
    };
    /* Newer safetensors dtypes that loupe has no lp_dtype for (yet). */
    static const char *const later[] = {"F6_E2M3", "F6_E3M2", "C64", NULL};
    *known_unsupported = false;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, s) == 0)
            return table[i].dtype;
    for (size_t i = 0; later[i]; i++)
        if (strcmp(later[i], s) == 0)
            *known_unsupported = true;
    return LP_DTYPE_INVALID;
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 1099511628211ull;
    }
    return h;
}

/* Insert id (whose string is key); *duplicate is set when an equal string is present. */
static bool keyset_insert(st_keyset *set, const char *key, size_t id, bool *duplicate)
{
    *duplicate = false;
    if (2 * (set->count + 1) > set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 64;
        size_t *slots = calloc(cap, sizeof *slots);
        if (!slots)
            return false;
        for (size_t i = 0; i < set->cap; i++) {
            if (!set->slots[i])
                continue;
            size_t j = (size_t)hash_str(set->name_of(set->ctx, set->slots[i] - 1)) & (cap - 1);
            while (slots[j])
                j = (j + 1) & (cap - 1);
            slots[j] = set->slots[i];
        }
        free(set->slots);
        set->slots = slots;
        set->cap = cap;
    }
    size_t j = (size_t)hash_str(key) & (set->cap - 1);
    while (set->slots[j]) {
        if (strcmp(set->name_of(set->ctx, set->slots[j] - 1), key) == 0) {
            *duplicate = true;
            return true;
        }
        j = (j + 1) & (set->cap - 1);
    }
    set->slots[j] = id + 1;
    set->count++;
    return true;
}

static const char *tensor_name_of(const void *ctx, size_t id)
{
    const st_scan *s = ctx;
    return s->names.data + s->entries[id].name_at;
}

static const char *meta_key_of(const void *ctx, size_t id)
{
    return ((const st_scan *)ctx)->meta_keys.data + id;
}

static bool buf_reserve(st_buf *b, size_t extra)
{
    if (b->len + extra <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra)
        cap *= 2;
    char *data = realloc(b->data, cap);
    if (!data)
        return false;
    b->data = data;
    b->cap = cap;
    return true;
}

/* A syntax error at header position at: "FILE: header JSON at byte N: ...". */
static lp_status syntax_error(st_scan *s, size_t at, const char *fmt, ...)
{
    char msg[LP_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lp_error_set(s->err, LP_ERR_FORMAT, "%s: header JSON at byte %zu: %s", s->file, 8 + at,
                        msg);
}

/* An error about the tensor whose key starts at header position key_at; says where it is. */
static lp_status entry_error(st_scan *s, size_t key_at, lp_status code, const char *fmt, ...)
{
    char msg[LP_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return lp_error_set(s->err, code, "%s: %s (header entry at file byte %zu)", s->file, msg,
                        8 + key_at);
}

static lp_status nomem(st_scan *s, const char *what)
{
    return lp_error_set(s->err, LP_ERR_NOMEM, "%s: out of memory for %s", s->file, what);
}

static void skip_ws(st_scan *s)
{
    while (s->pos < s->len) {
        uint8_t c = s->text[s->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        s->pos++;
    }
}

/* The next non-whitespace byte, or -1 at the end of the header. */
static int peek(st_scan *s)
{
    skip_ws(s);
    return s->pos < s->len ? s->text[s->pos] : -1;
}

static lp_status unexpected(st_scan *s, const char *wanted)
{
    int c = peek(s);
    if (c < 0)
        return syntax_error(s, s->pos, "expected %s, found the end of the header", wanted);
    if (c >= 0x20 && c < 0x7f)
        return syntax_error(s, s->pos, "expected %s, found '%c'", wanted, c);
    return syntax_error(s, s->pos, "expected %s, found byte 0x%02x", wanted, c);
}

static lp_status expect_char(st_scan *s, char c, const char *wanted)
{
    if (peek(s) != (uint8_t)c)
        return unexpected(s, wanted);
    s->pos++;
    return LP_OK;
}

static int hex_value(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Four hex digits at s->pos (after "\u"). */
static lp_status read_hex4(st_scan *s, size_t esc_at, uint32_t *out)
{
    if (s->len - s->pos < 4)
        return syntax_error(s, esc_at, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_value(s->text[s->pos + (size_t)i]);
        if (h < 0)
            return syntax_error(s, esc_at, "invalid \\u escape (4 hex digits expected)");
        v = v << 4 | (uint32_t)h;
    }
    s->pos += 4;
    *out = v;
    return LP_OK;
}

static void put_utf8(st_buf *b, uint32_t cp)
{
    char *p = b->data + b->len;
    if (cp < 0x80) {
        p[0] = (char)cp;
        b->len += 1;
    } else if (cp < 0x800) {
        p[0] = (char)(0xC0 | cp >> 6);
        p[1] = (char)(0x80 | (cp & 0x3F));
        b->len += 2;
    } else if (cp < 0x10000) {
        p[0] = (char)(0xE0 | cp >> 12);
        p[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        p[2] = (char)(0x80 | (cp & 0x3F));
        b->len += 3;
    } else {
        p[0] = (char)(0xF0 | cp >> 18);
        p[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        p[2] = (char)(0x80 | (cp >> 6 & 0x3F));
        p[3] = (char)(0x80 | (cp & 0x3F));
        b->len += 4;
    }
}

/* Length of the valid UTF-8 sequence (RFC 3629: no overlong forms, no surrogates, at most
 * U+10FFFF) starting at p[0] >= 0x80 with n bytes available; 0 when invalid. */
static size_t utf8_sequence(const uint8_t *p, size_t n)
{
    uint8_t c = p[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (n < need || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < need; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return need;
}

/* One escape at s->pos (the backslash), decoded into *b: the plain ones, or \uXXXX with
 * surrogate pairs joined; lone surrogates and \u0000 are refused. */
static lp_status read_escape(st_scan *s, st_buf *b)
{
    size_t esc_at = s->pos;
    if (s->len - s->pos < 2)
        return syntax_error(s, esc_at, "unterminated string");
    uint8_t e = s->text[s->pos + 1];
    s->pos += 2;
    static const char plain_in[] = "\"\\/bfnrt", plain_out[] = "\"\\/\b\f\n\r\t";
    const char *hit = e ? strchr(plain_in, e) : NULL;
    if (hit) {
        b->data[b->len++] = plain_out[hit - plain_in];
        return LP_OK;
    }
    if (e != 'u')
        return syntax_error(s, esc_at, "invalid escape '\\%c'",
                            e >= 0x20 && e < 0x7f ? (char)e : '?');
    uint32_t cp;
    lp_status st = read_hex4(s, esc_at, &cp);
    if (st != LP_OK)
        return st;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return syntax_error(s, esc_at, "lone low surrogate \\u%04X", (unsigned)cp);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (s->len - s->pos < 6 || s->text[s->pos] != '\\' || s->text[s->pos + 1] != 'u')
            return syntax_error(s, esc_at, "lone high surrogate \\u%04X", (unsigned)cp);
        s->pos += 2;
        uint32_t low;
        if ((st = read_hex4(s, esc_at, &low)) != LP_OK)
            return st;
        if (low < 0xDC00 || low > 0xDFFF)
            return syntax_error(s, esc_at, "lone high surrogate \\u%04X", (unsigned)cp);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    if (cp == 0)
        return syntax_error(s, esc_at, "\\u0000 is not allowed in a string");
    put_utf8(b, cp);
    return LP_OK;
}

/* A JSON string at s->pos (after whitespace), decoded into *b (NUL-terminated). */
static lp_status read_string(st_scan *s, st_buf *b)
{
    if (peek(s) != '"')
        return unexpected(s, "a string");
    size_t start = s->pos++;
    b->len = 0;
    for (;;) {
        if (s->pos >= s->len)
            return syntax_error(s, start, "unterminated string");
        /* Decoding never grows the text (an escape of n bytes gives at most n bytes of UTF-8),
         * so 4 bytes of room per step suffice. */
        if (!buf_reserve(b, 5))
            return nomem(s, "a header string");
        uint8_t c = s->text[s->pos];
        if (c == '"') {
            s->pos++;
            break;
        }
        if (c < 0x20)
            return syntax_error(s, s->pos, "control character 0x%02x in a string", c);
        if (c >= 0x80) {
            size_t n = utf8_sequence(s->text + s->pos, s->len - s->pos);
            if (!n)
                return syntax_error(s, s->pos, "invalid UTF-8 byte 0x%02x in a string", c);
            memcpy(b->data + b->len, s->text + s->pos, n);
            b->len += n;
            s->pos += n;
            continue;
        }
        if (c != '\\') {
            b->data[b->len++] = (char)c;
            s->pos++;
            continue;
        }
        lp_status st = read_escape(s, b);
        if (st != LP_OK)
            return st;
    }
    b->data[b->len] = '\0';
    return LP_OK;
}

typedef enum { ST_NUM_OK, ST_NUM_NOT_UINT } st_num_kind;

/* A JSON number at s->pos. *kind says whether it is an integer in [0, 2^63 - 1] (value in *out)
 * or another valid number (negative, fraction, exponent). Bad syntax and integers past 2^63 - 1
 * are errors, as in the DOM parser this replaces. */
static lp_status read_number(st_scan *s, st_num_kind *kind, uint64_t *out)
{
    skip_ws(s);
    size_t start = s->pos;
    const uint8_t *t = s->text;
    size_t i = s->pos, n = s->len;
    bool negative = false, integer = true;
    if (i < n && t[i] == '-') {
        negative = true;
        i++;
    }
    if (i >= n || t[i] < '0' || t[i] > '9')
        return unexpected(s, "a number");
    uint64_t v = 0;
    bool too_big = false;
    if (t[i] == '0') {
        i++;
        if (i < n && t[i] >= '0' && t[i] <= '9')
            return syntax_error(s, start, "number with a leading zero");
    } else {
        for (; i < n && t[i] >= '0' && t[i] <= '9'; i++)
            if (!lp_mul_u64(v, 10, &v) || !lp_add_u64(v, (uint64_t)(t[i] - '0'), &v) ||
                v > (uint64_t)INT64_MAX)
                too_big = true;
    }
    if (i < n && t[i] == '.') {
        integer = false;
        i++;
        if (i >= n || t[i] < '0' || t[i] > '9')
            return syntax_error(s, start, "number without digits after '.'");
        while (i < n && t[i] >= '0' && t[i] <= '9')
            i++;
    }
    if (i < n && (t[i] == 'e' || t[i] == 'E')) {
        integer = false;
        i++;
        if (i < n && (t[i] == '+' || t[i] == '-'))
            i++;
        if (i >= n || t[i] < '0' || t[i] > '9')
            return syntax_error(s, start, "number without digits in its exponent");
        while (i < n && t[i] >= '0' && t[i] <= '9')
            i++;
    }
    if (integer && too_big)
        return syntax_error(s, start, "integer %.*s is too big (limit %" PRId64 ")",
                            (int)(i - start > 40 ? 40 : i - start), (const char *)t + start,
                            INT64_MAX);
    s->pos = i;
    *kind = integer && (!negative || v == 0) ? ST_NUM_OK : ST_NUM_NOT_UINT;
    *out = v;
    return LP_OK;
}

/* An array of numbers; the first max values go to out[], *count gets the length. A non-number
 * element sets *all_uint = false and stops (the caller reports it by meaning, not syntax). */
static lp_status read_uint_array(st_scan *s, uint64_t *out, size_t max, size_t *count,
                                 bool *all_uint, size_t *bad_index)
{
    *count = 0;
    *all_uint = true;
    s->pos++; /* '[' */
    if (peek(s) == ']') {
        s->pos++;
        return LP_OK;
    }
    for (;;) {
        int c = peek(s);
        if (c != '-' && !(c >= '0' && c <= '9')) {
            *all_uint = false;
            *bad_index = *count;
            return LP_OK;
        }
        st_num_kind kind = ST_NUM_NOT_UINT;
        uint64_t v = 0;
        lp_status st = read_number(s, &kind, &v);
        if (st != LP_OK)
            return st;
        if (kind != ST_NUM_OK) {
            *all_uint = false;
            *bad_index = *count;
            return LP_OK;
        }
        if (*count < max)
            out[*count] = v;
        (*count)++;
        c = peek(s);
        if (c == ']') {
            s->pos++;
            return LP_OK;
        }
        if (c != ',')
            return unexpected(s, "',' or ']'");
        s->pos++;
    }
}

/* ---- objects --------------------------------------------------------------------------------- */

/* The members of an object whose '{' is at s->pos: each key is read into *key, then member()
 * reads its value. Stops at the first error. */
typedef lp_status (*st_member_fn)(st_scan *s, size_t key_at, void *ctx);

static lp_status read_members(st_scan *s, st_buf *key, st_member_fn member, void *ctx)
{
    s->pos++; /* '{' */
    if (peek(s) == '}') {
        s->pos++;
        return LP_OK;
    }
    for (;;) {
        size_t key_at = (skip_ws(s), s->pos);
        lp_status st = read_string(s, key);
        if (st != LP_OK || (st = member(s, key_at, ctx)) != LP_OK)
            return st;
        int c = peek(s);
        if (c == '}') {
            s->pos++;
            return LP_OK;
        }
        if (c != ',')
            return unexpected(s, "',' or '}'");
        s->pos++;
    }
}

/* ---- one tensor entry ------------------------------------------------------------------------ */

/* What read_entry has seen of one entry so far. */
typedef struct st_fields {
    const char *key;   /* the tensor's name, for messages */
    size_t key_at;     /* where its key starts in the header */
    bool have_dtype, have_shape, have_offsets;
    char dtype_name[32];
    lp_dtype dtype;
    uint64_t dims[LP_TENSOR_DESC_MAX_DIMS], offsets[2];
    size_t n_dims;
} st_fields;

static lp_status read_dtype_field(st_scan *s, st_fields *f)
{
    if (peek(s) != '"')
        return entry_error(s, f->key_at, LP_ERR_FORMAT,
                           "tensor '%s': missing or non-string 'dtype'", f->key);
    lp_status st = read_string(s, &s->str);
    if (st != LP_OK)
        return st;
    bool later = false;
    snprintf(f->dtype_name, sizeof f->dtype_name, "%s", s->str.data);
    f->dtype = s->str.len < sizeof f->dtype_name ? dtype_from_st(s->str.data, &later)
                                                 : LP_DTYPE_INVALID;
    if (f->dtype == LP_DTYPE_INVALID)
        return entry_error(s, f->key_at, later ? LP_ERR_UNSUPPORTED : LP_ERR_FORMAT,
                           "tensor '%s': %s dtype '%.64s'", f->key,
                           later ? "unsupported" : "unknown", s->str.data);
    return LP_OK;
}

static lp_status read_shape_field(st_scan *s, st_fields *f)
{
    if (peek(s) != '[')
        return entry_error(s, f->key_at, LP_ERR_FORMAT, "tensor '%s': missing or non-array 'shape'",
                           f->key);
    bool all_uint;
    size_t bad = 0;
    lp_status st = read_uint_array(s, f->dims, LP_TENSOR_DESC_MAX_DIMS, &f->n_dims, &all_uint,
                                   &bad);
    if (st != LP_OK)
        return st;
    if (!all_uint)
        return entry_error(s, f->key_at, LP_ERR_FORMAT,
                           "tensor '%s': shape[%zu] is not a non-negative integer", f->key, bad);
    if (f->n_dims > LP_TENSOR_DESC_MAX_DIMS)
        return entry_error(s, f->key_at, LP_ERR_UNSUPPORTED,
                           "tensor '%s': %zu dimensions exceed the limit of %d", f->key, f->n_dims,
                           LP_TENSOR_DESC_MAX_DIMS);
    return LP_OK;
}

static lp_status read_offsets_field(st_scan *s, st_fields *f)
{
    size_t n_offsets = 0, bad = 0;
    bool all_uint = true;
    bool array = peek(s) == '[';
    lp_status st;
    if (array && (st = read_uint_array(s, f->offsets, 2, &n_offsets, &all_uint, &bad)) != LP_OK)
        return st;
    if (!array || (all_uint && n_offsets != 2))
        return entry_error(s, f->key_at, LP_ERR_FORMAT,
                           "tensor '%s': 'data_offsets' must be an array [begin, end]", f->key);
    if (!all_uint)
        return entry_error(s, f->key_at, LP_ERR_FORMAT,
                           "tensor '%s': data_offsets are not non-negative integers", f->key);
    return LP_OK;
}

/* One "field": value of an entry (the field name just read into s->str); each of dtype, shape
 * and data_offsets exactly once. */
static lp_status read_entry_field(st_scan *s, size_t field_at, void *ctx)
{
    st_fields *f = ctx;
    lp_status st = expect_char(s, ':', "':'");
    if (st != LP_OK)
        return st;
    const char *field = s->str.data;
    bool *seen = strcmp(field, "dtype") == 0          ? &f->have_dtype
                 : strcmp(field, "shape") == 0        ? &f->have_shape
                 : strcmp(field, "data_offsets") == 0 ? &f->have_offsets
                                                      : NULL;
    if (!seen)
        return entry_error(s, f->key_at, LP_ERR_FORMAT,
                           "tensor '%s': unknown key '%.64s' at file byte %zu (expected dtype, "
                           "shape, data_offsets)",
                           f->key, field, 8 + field_at);
    if (*seen)
        return entry_error(s, f->key_at, LP_ERR_FORMAT,
                           "tensor '%s': duplicate key '%s' at file byte %zu", f->key, field,
                           8 + field_at);
    *seen = true;
    if (seen == &f->have_dtype)
        return read_dtype_field(s, f);
    if (seen == &f->have_shape)
        return read_shape_field(s, f);
    return read_offsets_field(s, f);
}

/* The entry's sizes: shape product, offsets in order and holding exactly dtype x shape. */
static lp_status check_entry(st_scan *s, const st_fields *f, st_entry *e)
{
    const char *key = f->key;
    if (!f->have_dtype)
        return entry_error(s, f->key_at, LP_ERR_FORMAT,
                           "tensor '%s': missing or non-string 'dtype'", key);
    if (!f->have_shape)
        return entry_error(s, f->key_at, LP_ERR_FORMAT,
                           "tensor '%s': missing or non-array 'shape'", key);
    if (!f->have_offsets)
        return entry_error(s, f->key_at, LP_ERR_FORMAT,
                           "tensor '%s': 'data_offsets' must be an array [begin, end]", key);
    uint64_t n_elements = 1;
    for (size_t d = 0; d < f->n_dims; d++)
        if (!lp_mul_u64(n_elements, f->dims[d], &n_elements) || n_elements > (uint64_t)INT64_MAX)
            return entry_error(s, f->key_at, LP_ERR_FORMAT,
                               "tensor '%s': shape product overflows 64 bits at shape[%zu] = "
                               "%" PRIu64,
                               key, d, f->dims[d]);
    uint64_t begin = f->offsets[0], end = f->offsets[1], bytes;
    if (end < begin)
        return entry_error(s, f->key_at, LP_ERR_FORMAT,
                           "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before start",
                           key, begin, end);
    /* F4 packs two values a byte; the reference loader refuses a shape that ends mid-byte */
    if (n_elements % lp_dtype_get(f->dtype)->block_elems != 0)
        return entry_error(s, f->key_at, LP_ERR_FORMAT,
                           "tensor '%s': %" PRIu64 " values of %s do not fill whole bytes (%u a "
                           "byte)",
                           key, n_elements, f->dtype_name, lp_dtype_get(f->dtype)->block_elems);
    if (!lp_dtype_bytes_for(f->dtype, n_elements, &bytes))
        return entry_error(s, f->key_at, LP_ERR_FORMAT,
                           "tensor '%s': byte size of %" PRIu64 " x %s overflows 64 bits", key,
                           n_elements, lp_dtype_name(f->dtype));
    if (end - begin != bytes)
        return entry_error(s, f->key_at, LP_ERR_FORMAT,
                           "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                           " bytes but dtype %s x shape needs %" PRIu64,
                           key, begin, end, end - begin, f->dtype_name, bytes);
    e->begin = begin;
    e->end = end;
    e->dtype = f->dtype;
    e->n_dims = (int)f->n_dims;
    e->n_elements = (int64_t)n_elements;
    return LP_OK;
}

/* One tensor entry (the value after its key, s->name) into *e; its dims go to s->dims. */
static lp_status read_entry(st_scan *s, size_t key_at, st_entry *e)
{
    st_fields f = {.key = s->name.data, .key_at = key_at};
    if (peek(s) != '{')
        return entry_error(s, key_at, LP_ERR_FORMAT, "tensor '%s': header entry is not an object",
                           f.key);
    lp_status st = read_members(s, &s->str, read_entry_field, &f);
    if (st != LP_OK || (st = check_entry(s, &f, e)) != LP_OK)
        return st;
    if (s->n_dims + f.n_dims > s->cap_dims) {
        size_t cap = s->cap_dims ? 2 * s->cap_dims : 256;
        uint64_t *dims = realloc(s->dims, cap * sizeof *dims);
        if (!dims)
            return nomem(s, "tensor shapes");
        s->dims = dims;
        s->cap_dims = cap;
    }
    e->dims_at = s->n_dims;
    if (f.n_dims > 0) /* a scalar has none, and s->dims may still be NULL */
        memcpy(s->dims + s->n_dims, f.dims, f.n_dims * sizeof *f.dims);
    s->n_dims += f.n_dims;
    return LP_OK;
}

/* ---- metadata and the top level -------------------------------------------------------------- */

/* One "__metadata__" pair: a unique key (just read into s->str) and a string value. */
static lp_status read_metadata_pair(st_scan *s, size_t key_at, void *ctx)
{
    st_keyset *keys = ctx;
    if (keys->count >= s->len / ST_MIN_META_BYTES + 1) /* cannot happen in a header this long */
        return syntax_error(s, key_at, "more than %zu metadata keys",
                            s->len / ST_MIN_META_BYTES + 1);
    size_t id = s->meta_keys.len;
    if (!buf_reserve(&s->meta_keys, s->str.len + 1))
        return nomem(s, "'__metadata__' keys");
    memcpy(s->meta_keys.data + id, s->str.data, s->str.len + 1);
    s->meta_keys.len += s->str.len + 1;
    bool duplicate;
    if (!keyset_insert(keys, s->meta_keys.data + id, id, &duplicate))
        return nomem(s, "'__metadata__' keys");
    if (duplicate)
        return syntax_error(s, key_at, "duplicate key '%.64s' in '__metadata__'",
                            s->meta_keys.data + id);
    lp_status st = expect_char(s, ':', "':'");
    if (st != LP_OK)
        return st;
    if (peek(s) != '"')
        return lp_error_set(s->err, LP_ERR_FORMAT,
                            "%s: '__metadata__' value of '%.64s' is not a string (header JSON at "
                            "byte %zu)",
                            s->file, s->meta_keys.data + id, 8 + s->pos);
    return read_string(s, &s->str);
}

/* The "__metadata__" value: an object of string to string, keys unique. */
static lp_status read_metadata(st_scan *s)
{
    if (peek(s) != '{')
        return lp_error_set(s->err, LP_ERR_FORMAT,
                            "%s: '__metadata__' is not an object (header JSON at byte %zu)",
                            s->file, 8 + s->pos);
    st_keyset keys = {.name_of = meta_key_of, .ctx = s};
    s->meta_keys.len = 0;
    lp_status st = read_members(s, &s->str, read_metadata_pair, &keys);
    free(keys.slots);
    return st;
}

/* The state of the top-level walk. */
typedef struct st_top {
    st_keyset names;
    bool have_metadata;
} st_top;

/* Append the entry whose key (s->name) starts at key_at, refusing a second one of that name. */
static lp_status add_entry(st_scan *s, size_t key_at, st_keyset *names)
{
    if (s->n_entries >= s->len / ST_MIN_ENTRY_BYTES + 1) /* cannot happen; a guard */
        return syntax_error(s, key_at, "more than %zu tensors", s->len / ST_MIN_ENTRY_BYTES + 1);
    if (s->n_entries == s->cap_entries) {
        size_t cap = s->cap_entries ? 2 * s->cap_entries : 64;
        st_entry *entries = realloc(s->entries, cap * sizeof *entries);
        if (!entries)
            return nomem(s, "the tensor entries");
        s->entries = entries;
        s->cap_entries = cap;
    }
    st_entry *e = &s->entries[s->n_entries];
    memset(e, 0, sizeof *e);
    lp_status st = read_entry(s, key_at, e);
    if (st != LP_OK)
        return st;
    e->name_at = s->names.len;
    if (!buf_reserve(&s->names, s->name.len + 1))
        return nomem(s, "the tensor names");
    memcpy(s->names.data + e->name_at, s->name.data, s->name.len + 1);
    s->names.len += s->name.len + 1;
    bool duplicate;
    if (!keyset_insert(names, s->names.data + e->name_at, s->n_entries, &duplicate))
        return nomem(s, "the tensor name index");
    if (duplicate)
        return syntax_error(s, key_at, "duplicate key '%.200s'", s->name.data);
    s->n_entries++;
    return LP_OK;
}

/* One top-level member (its key in s->name): "__metadata__" once, else a tensor. */
static lp_status read_top_member(st_scan *s, size_t key_at, void *ctx)
{
    st_top *top = ctx;
    lp_status st = expect_char(s, ':', "':'");
    if (st != LP_OK)
        return st;
    if (strcmp(s->name.data, "__metadata__") != 0)
        return add_entry(s, key_at, &top->names);
    if (top->have_metadata)
        return syntax_error(s, key_at, "duplicate key '__metadata__'");
    top->have_metadata = true;
    return read_metadata(s);
}

/* Scan the whole header into s->entries. */
static lp_status scan_header(st_scan *s)
{
    st_top top = {.names = {.name_of = tensor_name_of, .ctx = s}};
    if (peek(s) != '{')
        return unexpected(s, "'{'");
    lp_status st = read_members(s, &s->name, read_top_member, &top);
    free(top.names.slots);
    if (st != LP_OK)
        return st;
    /* The format's writers pad the header with spaces to an 8-byte boundary; serde_json (and
     * jansson before) accept any JSON whitespace there, and nothing else. */
    if (peek(s) >= 0)
        return syntax_error(s, s->pos, "data after the header object");
    return LP_OK;
}

/* ---- the data section ------------------------------------------------------------------------ */

/* File order: by begin, then end (zero-byte tensors share a begin), then name. */
static int compare_entries(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* On an error found after the scan (offsets across entries), say where the entry is: the byte
 * offset of its quoted name in the header (a plain search; names with JSON escapes are not
 * found and get no location). Runs only on the error path. */
static void add_entry_location(lp_error *err, const char *header, size_t header_len,
                               const char *key)
{
    if (!err)
        return;
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl + 2 <= header_len; i++) {
        if (header[i] != '"' || memcmp(header + i + 1, key, kl) != 0 || header[i + 1 + kl] != '"')
            continue;
        size_t j = i + kl + 2;
        while (j < header_len && (header[j] == ' ' || header[j] == '\t' || header[j] == '\n' ||
                                  header[j] == '\r'))
            j++;
        if (j < header_len && header[j] == ':') {
            size_t used = strlen(err->msg);
            snprintf(err->msg + used, sizeof err->msg - used, " (header entry at file byte %zu)",
                     8 + i);
            return;
        }
    }
}

/* Sorted by begin, the ranges must tile the data section exactly: no gap, no overlap, nothing
 * past the end of the file. */
static lp_status check_tiling(const st_scan *s, uint64_t data_start, uint64_t data_size,
                              size_t file_size, lp_error *err)
{
    const char *header = (const char *)s->text;
    uint64_t expected = 0;
    for (size_t i = 0; i < s->n_entries; i++) {
        const st_entry *e = &s->entries[i];
        lp_status status = LP_OK;
        if (e->begin < expected)
            status = lp_error_set(err, LP_ERR_FORMAT,
                                  "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                                  "] overlap tensor '%s' ending at %" PRIu64
                                  " (file byte %" PRIu64 ")",
                                  s->file, e->name, e->begin, e->end, s->entries[i - 1].name,
                                  expected, data_start + e->begin);
        else if (e->begin > expected)
            status = lp_error_set(err, LP_ERR_FORMAT,
                                  "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                                  "] leave a gap after offset %" PRIu64 " (file byte %" PRIu64 ")",
                                  s->file, e->name, e->begin, e->end, expected,
                                  data_start + expected);
        else if (e->end > data_size)
            status = lp_error_set(err, LP_ERR_FORMAT,
                                  "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                                  "] end at byte %" PRIu64 ", past the end of the file (%zu bytes)",
                                  s->file, e->name, e->begin, e->end, data_start + e->end,
                                  file_size);
        if (status != LP_OK) {
            add_entry_location(err, header, s->len, e->name);
            return status;
        }
        expected = e->end;
    }
    if (expected != data_size)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensors cover %" PRIu64 " bytes of the data section at byte "
                            "%" PRIu64 ", but it holds %" PRIu64 " (file %zu bytes)",
                            s->file, expected, data_start, data_size, file_size);
    return LP_OK;
}

/* Hand every entry to the sink, in file order, pointing into data. */
static lp_status emit_entries(const st_scan *s, const uint8_t *data, uint64_t data_start,
                              const lp_tensor_sink *sink, lp_error *err)
{
    for (size_t i = 0; i < s->n_entries; i++) {
        const st_entry *e = &s->entries[i];
        lp_tensor_desc t = {0};
        t.name = e->name;
        t.dtype = e->dtype;
        t.n_dims = e->n_dims;
        for (int d = 0; d < e->n_dims; d++)
            t.shape[d] = (int64_t)s->dims[e->dims_at + (size_t)d];
        t.n_elements = e->n_elements;
        t.n_bytes = e->end - e->begin;
        /* begin <= 2^63 - 1 and data_start <= 10^8 + 8: no wrap-around */
        t.file_offset = data_start + e->begin;
        t.data = data + t.file_offset;
        lp_status st = sink->add(sink->ctx, &t, err);
        if (st != LP_OK)
            return st;
    }
    return LP_OK;
}

/* The 8-byte length and the header's place in the file. */
static lp_status check_header_length(const uint8_t *data, size_t size, const char *name,
                                     uint64_t *header_len, lp_error *err)
{
    if (size < 8)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: file is %zu bytes, too short for the 8-byte header length", name,
                            size);
    *header_len = lp_load_u64(data);
    if (*header_len > ST_MAX_HEADER)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header length %" PRIu64 " at byte 0 exceeds the limit of %llu",
                            name, *header_len, ST_MAX_HEADER);
    if (*header_len > size - 8)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header length %" PRIu64
                            " at byte 0 runs past the end of the file (%zu bytes)",
                            name, *header_len, size);
    /* The reference loader (serde_json) skips JSON whitespace before the object, and so do we. */
    size_t at = 8;
    while (at < 8 + *header_len &&
           (data[at] == ' ' || data[at] == '\t' || data[at] == '\n' || data[at] == '\r'))
        at++;
    if (*header_len == 0 || at == 8 + *header_len)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: header of %" PRIu64 " bytes at byte 8 %s",
                            name, *header_len, *header_len ? "holds only whitespace" : "is empty");
    if (data[at] != '{')
        return lp_error_set(err, LP_ERR_FORMAT, "%s: header does not start with '{' (byte %zu is "
                            "0x%02X)",
                            name, at, data[at]);
    return LP_OK;
}

lp_status lp_safetensors_read(const uint8_t *data, size_t size, const char *name,
                              const lp_tensor_sink *sink, lp_error *err)
{
    uint64_t header_len = 0;
    lp_status status = check_header_length(data, size, name, &header_len, err);
    if (status != LP_OK)
        return status;
    uint64_t data_start = 8 + header_len, data_size = size - data_start;
    st_scan s = {.file = name, .text = data + 8, .len = (size_t)header_len, .err = err};
    status = scan_header(&s);
    if (status == LP_OK) {
        for (size_t i = 0; i < s.n_entries; i++)
            s.entries[i].name = s.names.data + s.entries[i].name_at;
        if (s.n_entries > 1)
            qsort(s.entries, s.n_entries, sizeof *s.entries, compare_entries);
        status = check_tiling(&s, data_start, data_size, size, err);
    }
    /* Only now, with every range inside the file, are the tensors handed over. */
    if (status == LP_OK)
        status = emit_entries(&s, data, data_start, sink, err);
    free(s.name.data);
    free(s.str.data);
    free(s.meta_keys.data);
    free(s.names.data);
    free(s.dims);
    free(s.entries);
    return status;
}
