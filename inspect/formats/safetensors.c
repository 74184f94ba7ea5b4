/* safetensors reader: validates the JSON header at least as strictly as the format's own loader
 * and appends one lp_tensor per entry, pointing into the mapped file.
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
 * '{' and lies inside the file; the JSON is valid UTF-8 with no duplicate keys; every tensor's
 * end - begin equals dtype size x product(shape) (64-bit, overflow-checked); sorted by begin, the
 * ranges are contiguous, start at 0, never overlap, and end exactly at the end of the file.
 *
 * The header is read by a strict single-pass scanner written for this one shape of JSON rather
 * than a general DOM parser: a DOM of a 100 MB header of tiny tensors costs 20x the file (one heap
 * node per object, string and array). Here each tensor goes straight into the catalogue, so the
 * memory is one lp_tensor and one name per tensor, plus a hash set of indexes for duplicates.
 * Accepted grammar (RFC 8259 otherwise): top-level object; "__metadata__" maps strings to
 * strings; a tensor is an object with exactly the keys dtype (string), shape (array of integers
 * >= 0) and data_offsets (array of two integers >= 0); integers have no fraction, exponent,
 * leading zero or '+' and are at most 2^63 - 1; only JSON whitespace (the writers' space padding)
 * may follow the object. Strings: full escape syntax, surrogate pairs decoded to UTF-8; raw
 * control characters, invalid UTF-8, lone surrogates and \u0000 are refused.
 */
#include "inspect/weights/weights_internal.h"

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

typedef struct st_scan {
    const char *file;      /* base name for messages */
    const uint8_t *text;   /* the header, [len] */
    size_t len, pos;
    lp_error *err;
    st_buf name;           /* the current top-level key */
    st_buf str;            /* any other string */
    st_buf meta_keys;      /* "__metadata__" keys, back to back with their NULs */
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
    };
    /* Newer safetensors dtypes that loupe has no lp_dtype for (yet). */
    static const char *const later[] = {"F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64", NULL};
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
    return ((const lp_weights *)ctx)->tensors[id].name;
}

static const char *meta_key_of(const void *ctx, size_t id)
{
    return ((const st_buf *)ctx)->data + id;
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
        size_t esc_at = s->pos;
        if (s->len - s->pos < 2)
            return syntax_error(s, esc_at, "unterminated string");
        uint8_t e = s->text[s->pos + 1];
        s->pos += 2;
        static const char plain_in[] = "\"\\/bfnrt", plain_out[] = "\"\\/\b\f\n\r\t";
        const char *hit = e ? strchr(plain_in, e) : NULL;
        if (hit) {
            b->data[b->len++] = plain_out[hit - plain_in];
            continue;
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

/* One tensor entry (the value after its key, s->name) into *t; key_at locates it. */
static lp_status read_entry(st_scan *s, size_t key_at, lp_tensor *t, uint64_t *begin,
                            uint64_t *end)
{
    const char *key = s->name.data;
    if (peek(s) != '{')
        return entry_error(s, key_at, LP_ERR_FORMAT, "tensor '%s': header entry is not an object",
                           key);
    s->pos++;
    bool have_dtype = false, have_shape = false, have_offsets = false;
    bool later = false;
    char dtype_name[32] = "";
    uint64_t dims[LP_MAX_DIMS] = {0}, offsets[2] = {0};
    size_t n_dims = 0;
    if (peek(s) == '}') {
        s->pos++;
    } else {
        for (;;) {
            size_t field_at = (skip_ws(s), s->pos);
            lp_status st = read_string(s, &s->str);
            if (st != LP_OK)
                return st;
            if ((st = expect_char(s, ':', "':'")) != LP_OK)
                return st;
            const char *field = s->str.data;
            bool *seen = strcmp(field, "dtype") == 0          ? &have_dtype
                         : strcmp(field, "shape") == 0        ? &have_shape
                         : strcmp(field, "data_offsets") == 0 ? &have_offsets
                                                              : NULL;
            if (!seen)
                return entry_error(s, key_at, LP_ERR_FORMAT,
                                   "tensor '%s': unknown key '%.64s' at file byte %zu (expected "
                                   "dtype, shape, data_offsets)",
                                   key, field, 8 + field_at);
            if (*seen)
                return entry_error(s, key_at, LP_ERR_FORMAT,
                                   "tensor '%s': duplicate key '%s' at file byte %zu", key, field,
                                   8 + field_at);
            *seen = true;
            int c = peek(s);
            if (seen == &have_dtype) {
                if (c != '"')
                    return entry_error(s, key_at, LP_ERR_FORMAT,
                                       "tensor '%s': missing or non-string 'dtype'", key);
                if ((st = read_string(s, &s->str)) != LP_OK)
                    return st;
                snprintf(dtype_name, sizeof dtype_name, "%s", s->str.data);
                t->dtype = s->str.len < sizeof dtype_name ? dtype_from_st(s->str.data, &later)
                                                          : LP_DTYPE_INVALID;
                if (t->dtype == LP_DTYPE_INVALID)
                    return entry_error(s, key_at, later ? LP_ERR_UNSUPPORTED : LP_ERR_FORMAT,
                                       "tensor '%s': %s dtype '%.64s'", key,
                                       later ? "unsupported" : "unknown", s->str.data);
            } else if (seen == &have_shape) {
                if (c != '[')
                    return entry_error(s, key_at, LP_ERR_FORMAT,
                                       "tensor '%s': missing or non-array 'shape'", key);
                bool all_uint;
                size_t bad = 0;
                if ((st = read_uint_array(s, dims, LP_MAX_DIMS, &n_dims, &all_uint, &bad)) !=
                    LP_OK)
                    return st;
                if (!all_uint)
                    return entry_error(s, key_at, LP_ERR_FORMAT,
                                       "tensor '%s': shape[%zu] is not a non-negative integer",
                                       key, bad);
                if (n_dims > LP_MAX_DIMS)
                    return entry_error(s, key_at, LP_ERR_UNSUPPORTED,
                                       "tensor '%s': %zu dimensions exceed the limit of %d", key,
                                       n_dims, LP_MAX_DIMS);
            } else {
                size_t n_offsets = 0, bad = 0;
                bool all_uint = true;
                if (c == '[' &&
                    (st = read_uint_array(s, offsets, 2, &n_offsets, &all_uint, &bad)) != LP_OK)
                    return st;
                if (c != '[' || (all_uint && n_offsets != 2))
                    return entry_error(s, key_at, LP_ERR_FORMAT,
                                       "tensor '%s': 'data_offsets' must be an array [begin, end]",
                                       key);
                if (!all_uint)
                    return entry_error(s, key_at, LP_ERR_FORMAT,
                                       "tensor '%s': data_offsets are not non-negative integers",
                                       key);
            }
            c = peek(s);
            if (c == '}') {
                s->pos++;
                break;
            }
            if (c != ',')
                return unexpected(s, "',' or '}'");
            s->pos++;
        }
    }
    if (!have_dtype)
        return entry_error(s, key_at, LP_ERR_FORMAT, "tensor '%s': missing or non-string 'dtype'",
                           key);
    if (!have_shape)
        return entry_error(s, key_at, LP_ERR_FORMAT, "tensor '%s': missing or non-array 'shape'",
                           key);
    if (!have_offsets)
        return entry_error(s, key_at, LP_ERR_FORMAT,
                           "tensor '%s': 'data_offsets' must be an array [begin, end]", key);
    t->n_dims = (int)n_dims;
    uint64_t n_elements = 1;
    for (size_t d = 0; d < n_dims; d++) {
        t->shape[d] = (int64_t)dims[d];
        if (!lp_mul_u64(n_elements, dims[d], &n_elements) || n_elements > (uint64_t)INT64_MAX)
            return entry_error(s, key_at, LP_ERR_FORMAT,
                               "tensor '%s': shape product overflows 64 bits at shape[%zu] = "
                               "%" PRIu64,
                               key, d, dims[d]);
    }
    t->n_elements = (int64_t)n_elements;
    *begin = offsets[0];
    *end = offsets[1];
    if (*end < *begin)
        return entry_error(s, key_at, LP_ERR_FORMAT,
                           "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                           "] end before start",
                           key, *begin, *end);
    uint64_t bytes;
    if (!lp_dtype_bytes_for(t->dtype, n_elements, &bytes))
        return entry_error(s, key_at, LP_ERR_FORMAT,
                           "tensor '%s': byte size of %" PRIu64 " x %s overflows 64 bits", key,
                           n_elements, lp_dtype_name(t->dtype));
    if (*end - *begin != bytes)
        return entry_error(s, key_at, LP_ERR_FORMAT,
                           "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                           " bytes but dtype %s x shape needs %" PRIu64,
                           key, *begin, *end, *end - *begin, dtype_name, bytes);
    return LP_OK;
}

/* The "__metadata__" value: an object of string to string, keys unique. */
static lp_status read_metadata(st_scan *s)
{
    if (peek(s) != '{')
        return lp_error_set(s->err, LP_ERR_FORMAT,
                            "%s: '__metadata__' is not an object (header JSON at byte %zu)",
                            s->file, 8 + s->pos);
    s->pos++;
    if (peek(s) == '}') {
        s->pos++;
        return LP_OK;
    }
    st_keyset keys = {.name_of = meta_key_of, .ctx = &s->meta_keys};
    size_t max_pairs = s->len / ST_MIN_META_BYTES + 1;
    lp_status st = LP_OK;
    s->meta_keys.len = 0;
    for (;;) {
        size_t key_at = (skip_ws(s), s->pos);
        if ((st = read_string(s, &s->str)) != LP_OK)
            break;
        if (keys.count >= max_pairs) { /* cannot happen in a header of this length */
            st = syntax_error(s, key_at, "more than %zu metadata keys", max_pairs);
            break;
        }
        size_t id = s->meta_keys.len;
        if (!buf_reserve(&s->meta_keys, s->str.len + 1)) {
            st = nomem(s, "'__metadata__' keys");
            break;
        }
        memcpy(s->meta_keys.data + id, s->str.data, s->str.len + 1);
        s->meta_keys.len += s->str.len + 1;
        bool duplicate;
        if (!keyset_insert(&keys, s->meta_keys.data + id, id, &duplicate)) {
            st = nomem(s, "'__metadata__' keys");
            break;
        }
        if (duplicate) {
            st = syntax_error(s, key_at, "duplicate key '%.64s' in '__metadata__'",
                              s->meta_keys.data + id);
            break;
        }
        if ((st = expect_char(s, ':', "':'")) != LP_OK)
            break;
        if (peek(s) != '"') {
            st = lp_error_set(s->err, LP_ERR_FORMAT,
                              "%s: '__metadata__' value of '%.64s' is not a string (header JSON at "
                              "byte %zu)",
                              s->file, s->meta_keys.data + id, 8 + s->pos);
            break;
        }
        if ((st = read_string(s, &s->str)) != LP_OK)
            break;
        int c = peek(s);
        if (c == '}') {
            s->pos++;
            break;
        }
        if (c != ',') {
            st = unexpected(s, "',' or '}'");
            break;
        }
        s->pos++;
    }
    free(keys.slots);
    return st;
}

/* File order: by begin, then end (zero-byte tensors share a begin), then name. */
static int compare_tensors(const void *a, const void *b)
{
    const lp_tensor *x = a, *y = b;
    if (x->file_offset != y->file_offset)
        return x->file_offset < y->file_offset ? -1 : 1;
    if (x->n_bytes != y->n_bytes)
        return x->n_bytes < y->n_bytes ? -1 : 1;
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

/* Scan the whole header, appending one tensor per entry (data not yet set; file_offset holds
 * data_start + begin). */
static lp_status scan_header(st_scan *s, lp_weights *weights, int file_index, uint64_t data_start)
{
    size_t first = weights->n_tensors;
    size_t max_entries = s->len / ST_MIN_ENTRY_BYTES + 1;
    st_keyset names = {.name_of = tensor_name_of, .ctx = weights};
    bool have_metadata = false;
    lp_status st = expect_char(s, '{', "'{'");
    if (st == LP_OK && peek(s) == '}') {
        s->pos++;
    } else {
        while (st == LP_OK) {
            size_t key_at = (skip_ws(s), s->pos);
            if ((st = read_string(s, &s->name)) != LP_OK)
                break;
            if ((st = expect_char(s, ':', "':'")) != LP_OK)
                break;
            if (strcmp(s->name.data, "__metadata__") == 0) {
                if (have_metadata) {
                    st = syntax_error(s, key_at, "duplicate key '__metadata__'");
                    break;
                }
                have_metadata = true;
                if ((st = read_metadata(s)) != LP_OK)
                    break;
            } else {
                if (weights->n_tensors - first >= max_entries) { /* cannot happen; a guard */
                    st = syntax_error(s, key_at, "more than %zu tensors", max_entries);
                    break;
                }
                lp_tensor t = {0};
                uint64_t begin = 0, end = 0;
                if ((st = read_entry(s, key_at, &t, &begin, &end)) != LP_OK)
                    break;
                t.name = s->name.data;
                t.n_bytes = end - begin;
                t.file_index = file_index;
                /* begin <= 2^63 - 1 and data_start <= 10^8 + 8: no wrap-around */
                t.file_offset = data_start + begin;
                if ((st = lp_weights_add_tensor(weights, &t, s->err)) != LP_OK)
                    break;
                bool duplicate;
                size_t id = weights->n_tensors - 1;
                if (!keyset_insert(&names, weights->tensors[id].name, id, &duplicate)) {
                    st = nomem(s, "the tensor name index");
                    break;
                }
                if (duplicate) {
                    st = syntax_error(s, key_at, "duplicate key '%.200s'", s->name.data);
                    break;
                }
            }
            int c = peek(s);
            if (c == '}') {
                s->pos++;
                break;
            }
            if (c != ',') {
                st = unexpected(s, "',' or '}'");
                break;
            }
            s->pos++;
        }
    }
    free(names.slots);
    if (st != LP_OK)
        return st;
    /* The format's writers pad the header with spaces to an 8-byte boundary; serde_json (and
     * jansson before) accept any JSON whitespace there, and nothing else. */
    if (peek(s) >= 0)
        return syntax_error(s, s->pos, "data after the header object");
    return LP_OK;
}

lp_status lp_safetensors_parse(lp_weights *weights, int file_index, lp_error *err)
{
    const lp_mapped_file *map = &weights->files[file_index];
    const char *file = lp_path_basename(map->path);
    if (map->size < 8)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: file is %zu bytes, too short for the 8-byte header length", file,
                            map->size);
    uint64_t header_len = lp_load_u64(map->data);
    if (header_len > ST_MAX_HEADER)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header length %" PRIu64 " at byte 0 exceeds the limit of %llu",
                            file, header_len, ST_MAX_HEADER);
    if (header_len > map->size - 8)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: header length %" PRIu64
                            " at byte 0 runs past the end of the file (%zu bytes)",
                            file, header_len, map->size);
    const char *header = (const char *)map->data + 8;
    if (header_len == 0 || header[0] != '{')
        return lp_error_set(err, LP_ERR_FORMAT, "%s: header at byte 8 does not start with '{'",
                            file);
    uint64_t data_size = map->size - 8 - header_len;
    uint64_t data_start = 8 + header_len;
    st_scan s = {.file = file, .text = map->data + 8, .len = (size_t)header_len, .err = err};
    size_t first = weights->n_tensors;
    lp_status status = scan_header(&s, weights, file_index, data_start);
    free(s.name.data);
    free(s.str.data);
    free(s.meta_keys.data);
    if (status != LP_OK)
        return status;
    /* Sorted by begin, the ranges must tile the data section exactly. The catalogue is in file
     * order, so sorting this file's slice of it is also the order the tensors are kept in
     * (owned_names only records what to free, so it may stay in insertion order). */
    lp_tensor *entries = weights->tensors + first;
    size_t n = weights->n_tensors - first;
    if (n > 1)
        qsort(entries, n, sizeof *entries, compare_tensors);
    uint64_t expected = 0;
    for (size_t i = 0; i < n; i++) {
        const lp_tensor *e = &entries[i];
        uint64_t begin = e->file_offset - data_start, end = begin + e->n_bytes;
        if (begin != expected) {
            if (begin < expected)
                status = lp_error_set(err, LP_ERR_FORMAT,
                                      "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                                      "] overlap tensor '%s' ending at %" PRIu64
                                      " (file byte %" PRIu64 ")",
                                      file, e->name, begin, end, entries[i - 1].name, expected,
                                      data_start + begin);
            else
                status = lp_error_set(err, LP_ERR_FORMAT,
                                      "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                                      "] leave a gap after offset %" PRIu64
                                      " (file byte %" PRIu64 ")",
                                      file, e->name, begin, end, expected, data_start + expected);
            add_entry_location(err, header, (size_t)header_len, e->name);
            return status;
        }
        if (end > data_size) {
            status = lp_error_set(err, LP_ERR_FORMAT,
                                  "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                                  "] end at byte %" PRIu64 ", past the end of the file (%zu bytes)",
                                  file, e->name, begin, end, data_start + end, map->size);
            add_entry_location(err, header, (size_t)header_len, e->name);
            return status;
        }
        expected = end;
    }
    if (expected != data_size)
        return lp_error_set(err, LP_ERR_FORMAT,
                            "%s: tensors cover %" PRIu64 " bytes of the data section at byte %" PRIu64
                            ", but it holds %" PRIu64 " (file %zu bytes)",
                            file, expected, data_start, data_size, map->size);
    /* Only now, with every range inside the file, point the tensors at their data. */
    for (size_t i = 0; i < n; i++)
        entries[i].data = map->data + entries[i].file_offset;
    return LP_OK;
}
