/* Prompt files in JSON lines: a strict reader of exactly the shape lp_prompts documents, written
 * by hand rather than over jansson so that every complaint can point at its line and column. */
#include "inspect/tokenizer/tokenizer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"
#include "inspect/tokenizer/tokenizer_internal.h"

/* One line being read: s[0, len) is the line without its "\n". */
typedef struct line_cursor {
    const char *name;
    const char *s;
    size_t len, pos;
    int64_t line;
    lp_error *err;
} line_cursor;

/* Per prompt, where its id stood, to name both lines of a duplicate. */
typedef struct id_ref {
    const char *id;
    size_t index;
    size_t col;
} id_ref;

static lp_status fail_at(const line_cursor *c, size_t at, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static lp_status fail_at(const line_cursor *c, size_t at, const char *fmt, ...)
{
    char what[LP_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return lp_error_set(c->err, LP_ERR_FORMAT, "%s:%lld:%zu: %s", c->name, (long long)c->line,
                        at + 1, what);
}

static lp_status no_memory(const line_cursor *c)
{
    return lp_error_set(c->err, LP_ERR_NOMEM, "%s:%lld: out of memory", c->name,
                        (long long)c->line);
}

/* A byte as the messages show it: 'x' when printable ASCII, else 0xNN. */
static const char *show_byte(unsigned char b, char buf[8])
{
    if (b >= 0x20 && b < 0x7F)
        snprintf(buf, 8, "'%c'", b);
    else
        snprintf(buf, 8, "0x%02X", b);
    return buf;
}

static lp_status unexpected(const line_cursor *c, const char *expected)
{
    if (c->pos >= c->len)
        return fail_at(c, c->pos, "expected %s, found the end of the line", expected);
    char b[8];
    return fail_at(c, c->pos, "expected %s, found %s", expected,
                   show_byte((unsigned char)c->s[c->pos], b));
}

/* JSON's whitespace; "\r" included, so "\r\n" line ends need no special case. */
static void skip_space(line_cursor *c)
{
    while (c->pos < c->len &&
           (c->s[c->pos] == ' ' || c->s[c->pos] == '\t' || c->s[c->pos] == '\r'))
        c->pos++;
}

static int hex_value(char h)
{
    if (h >= '0' && h <= '9')
        return h - '0';
    if (h >= 'a' && h <= 'f')
        return h - 'a' + 10;
    if (h >= 'A' && h <= 'F')
        return h - 'A' + 10;
    return -1;
}

/* The four hex digits of a \u escape at s[at]; -1 when they are not four hex digits. */
static int32_t hex4(const line_cursor *c, size_t at)
{
    if (c->len - at < 4)
        return -1;
    int32_t v = 0;
    for (int k = 0; k < 4; k++) {
        int d = hex_value(c->s[at + (size_t)k]);
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* A \uXXXX escape (c->pos at the backslash) as a code point, pairing surrogates. */
static lp_status unicode_escape(line_cursor *c, uint32_t *cp)
{
    size_t at = c->pos;
    int32_t hi = hex4(c, at + 2);
    if (hi < 0)
        return fail_at(c, at, "\\u must be followed by four hex digits");
    c->pos = at + 6;
    if (hi >= 0xDC00 && hi <= 0xDFFF)
        return fail_at(c, at, "lone low surrogate \\u%04X", (unsigned)hi);
    if (hi < 0xD800 || hi > 0xDBFF) {
        if (hi == 0)
            return fail_at(c, at, "NUL (\\u0000) in a string");
        *cp = (uint32_t)hi;
        return LP_OK;
    }
    int32_t lo = c->len - c->pos >= 6 && c->s[c->pos] == '\\' && c->s[c->pos + 1] == 'u'
                     ? hex4(c, c->pos + 2)
                     : -1;
    if (lo < 0xDC00 || lo > 0xDFFF)
        return fail_at(c, at, "high surrogate \\u%04X not followed by a low surrogate",
                       (unsigned)hi);
    c->pos += 6;
    *cp = 0x10000u + (((uint32_t)hi - 0xD800u) << 10) + ((uint32_t)lo - 0xDC00u);
    return LP_OK;
}

/* One escape sequence (c->pos at the backslash) appended to out. */
static lp_status escape(line_cursor *c, char *out, size_t *n)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    size_t at = c->pos;
    if (at + 1 >= c->len)
        return fail_at(c, at, "string ends inside an escape");
    char e = c->s[at + 1];
    const char *hit = e ? strchr(from, e) : NULL;
    if (hit) {
        out[(*n)++] = to[hit - from];
        c->pos = at + 2;
        return LP_OK;
    }
    if (e != 'u') {
        char b[8];
        return fail_at(c, at, "unknown escape \\%s", show_byte((unsigned char)e, b));
    }
    uint32_t cp = 0;
    lp_status st = unicode_escape(c, &cp);
    if (st != LP_OK)
        return st;
    *n += lp_utf8_put(cp, out + *n);
    return LP_OK;
}

/* A JSON string at c->pos (the opening quote) into a new NUL-terminated buffer. The decoded
 * string is never longer than its source, so one allocation of the rest of the line holds it. */
static lp_status parse_string(line_cursor *c, char **out, size_t *out_len)
{
    size_t open = c->pos++;
    char *buf = malloc(c->len - c->pos + 1);
    if (!buf)
        return no_memory(c);
    size_t n = 0;
    lp_status st = LP_OK;
    for (;;) {
        if (c->pos >= c->len) {
            st = fail_at(c, open, "string not closed before the end of the line");
            break;
        }
        unsigned char b = (unsigned char)c->s[c->pos];
        if (b == '"') {
            c->pos++;
            break;
        }
        if (b == '\\') {
            if ((st = escape(c, buf, &n)) != LP_OK)
                break;
            continue;
        }
        if (b < 0x20) {
            st = fail_at(c, c->pos, "control byte 0x%02X in a string (write it as an escape)", b);
            break;
        }
        size_t at = c->pos;
        if (lp_utf8_next(c->s, c->len, &c->pos) < 0) {
            st = fail_at(c, at, "invalid UTF-8 byte 0x%02X in a string", b);
            break;
        }
        memcpy(buf + n, c->s + at, c->pos - at);
        n += c->pos - at;
    }
    if (st != LP_OK) {
        free(buf);
        return st;
    }
    buf[n] = '\0';
    char *fit = realloc(buf, n + 1); /* the buffer was sized for the rest of the line */
    *out = fit ? fit : buf;
    *out_len = n;
    return LP_OK;
}

/* The extent of a JSON number at c->pos, with what it holds; false when it is not one. */
typedef struct number_span {
    size_t start, end;
    bool negative, fraction; /* fraction: has a '.' part or an exponent */
} number_span;

static bool digits(line_cursor *c)
{
    size_t start = c->pos;
    while (c->pos < c->len && c->s[c->pos] >= '0' && c->s[c->pos] <= '9')
        c->pos++;
    return c->pos > start;
}

static lp_status scan_number(line_cursor *c, number_span *num)
{
    memset(num, 0, sizeof *num);
    num->start = c->pos;
    if (c->pos < c->len && c->s[c->pos] == '-') {
        num->negative = true;
        c->pos++;
    }
    size_t int_start = c->pos;
    if (!digits(c))
        return fail_at(c, num->start, "malformed number");
    if (c->s[int_start] == '0' && c->pos - int_start > 1)
        return fail_at(c, num->start, "number with a leading zero");
    if (c->pos < c->len && c->s[c->pos] == '.') {
        c->pos++;
        num->fraction = true;
        if (!digits(c))
            return fail_at(c, num->start, "malformed number: no digit after '.'");
    }
    if (c->pos < c->len && (c->s[c->pos] == 'e' || c->s[c->pos] == 'E')) {
        c->pos++;
        num->fraction = true;
        if (c->pos < c->len && (c->s[c->pos] == '+' || c->s[c->pos] == '-'))
            c->pos++;
        if (!digits(c))
            return fail_at(c, num->start, "malformed number: no digit in the exponent");
    }
    num->end = c->pos;
    return LP_OK;
}

/* One element of "tokens": an integer in [0, INT32_MAX]. */
static lp_status parse_token_id(line_cursor *c, size_t index, int32_t *id)
{
    number_span num;
    if (c->pos >= c->len || (c->s[c->pos] != '-' && (c->s[c->pos] < '0' || c->s[c->pos] > '9')))
        return unexpected(c, "a token id (an integer)");
    lp_status st = scan_number(c, &num);
    if (st != LP_OK)
        return st;
    int width = (int)(num.end - num.start < 24 ? num.end - num.start : 24);
    const char *text = c->s + num.start;
    if (num.fraction)
        return fail_at(c, num.start, "tokens[%zu]: %.*s is not an integer", index, width, text);
    if (num.negative)
        return fail_at(c, num.start, "tokens[%zu]: %.*s is negative", index, width, text);
    int64_t v = 0;
    for (size_t k = num.start; k < num.end; k++) {
        v = v * 10 + (c->s[k] - '0');
        if (v > INT32_MAX)
            return fail_at(c, num.start, "tokens[%zu]: %.*s exceeds %d", index, width, text,
                           INT32_MAX);
    }
    *id = (int32_t)v;
    return LP_OK;
}

/* "tokens": [id, id, ...], non-empty. The count is bounded by the line (two bytes an id). */
static lp_status parse_tokens(line_cursor *c, lp_prompt *p)
{
    size_t open = c->pos;
    if (c->s[c->pos] != '[')
        return fail_at(c, c->pos, "\"tokens\" must be an array of token ids");
    c->pos++;
    p->tokens = malloc(((c->len - c->pos) / 2 + 1) * sizeof *p->tokens);
    if (!p->tokens)
        return no_memory(c);
    skip_space(c);
    if (c->pos < c->len && c->s[c->pos] == ']')
        return fail_at(c, open, "\"tokens\" is empty");
    for (;;) {
        skip_space(c);
        lp_status st = parse_token_id(c, p->n_tokens, &p->tokens[p->n_tokens]);
        if (st != LP_OK)
            return st;
        p->n_tokens++;
        skip_space(c);
        if (c->pos < c->len && c->s[c->pos] == ',') {
            c->pos++;
            continue;
        }
        if (c->pos < c->len && c->s[c->pos] == ']') {
            c->pos++;
            int32_t *fit = realloc(p->tokens, p->n_tokens * sizeof *fit);
            if (fit)
                p->tokens = fit;
            return LP_OK;
        }
        return unexpected(c, "',' or ']' in \"tokens\"");
    }
}

/* "id": a string, or an integer kept as written. */
static lp_status parse_id(line_cursor *c, lp_prompt *p)
{
    size_t len;
    if (c->s[c->pos] == '"')
        return parse_string(c, &p->id, &len);
    size_t at = c->pos;
    if (c->s[c->pos] == '-' || (c->s[c->pos] >= '0' && c->s[c->pos] <= '9')) {
        number_span num;
        lp_status st = scan_number(c, &num);
        if (st != LP_OK)
            return st;
        if (!num.fraction) {
            p->id = lp_tok_strndup(c->s + num.start, num.end - num.start);
            return p->id ? LP_OK : no_memory(c);
        }
    }
    return fail_at(c, at, "\"id\" must be a string or an integer");
}

typedef enum prompt_key { KEY_TEXT, KEY_TOKENS, KEY_ID, KEY_COUNT } prompt_key;
static const char *const key_names[KEY_COUNT] = {"text", "tokens", "id"};

/* A key (its string at c->pos) named by one of key_names; the name shown when it is not. */
static lp_status parse_key(line_cursor *c, prompt_key *key)
{
    size_t at = c->pos, len;
    char *name;
    if (c->pos >= c->len || c->s[c->pos] != '"')
        return unexpected(c, "a key in double quotes");
    lp_status st = parse_string(c, &name, &len);
    if (st != LP_OK)
        return st;
    for (int k = 0; k < KEY_COUNT; k++) {
        if (strlen(key_names[k]) == len && memcmp(name, key_names[k], len) == 0) {
            free(name);
            *key = (prompt_key)k;
            return LP_OK;
        }
    }
    /* The key as written, cut, so a hostile key cannot fill the message. */
    int width = (int)(c->pos - at < 40 ? c->pos - at : 40);
    free(name);
    return fail_at(c, at, "unknown key %.*s%s (expected \"text\", \"tokens\" or \"id\")", width,
                   c->s + at, c->pos - at > 40 ? "..." : "");
}

/* One member's value, the cursor at its first byte. */
static lp_status parse_value(line_cursor *c, prompt_key key, lp_prompt *p, size_t *id_col)
{
    if (c->pos >= c->len)
        return unexpected(c, "a value");
    if (key == KEY_ID) {
        *id_col = c->pos;
        return parse_id(c, p);
    }
    if (key == KEY_TOKENS)
        return parse_tokens(c, p);
    size_t at = c->pos;
    if (c->s[c->pos] != '"')
        return fail_at(c, at, "\"text\" must be a string");
    lp_status st = parse_string(c, &p->text, &p->text_len);
    if (st == LP_OK && p->text_len == 0)
        return fail_at(c, at, "\"text\" is empty");
    return st;
}

/* The members of the object after its '{', through its '}'. */
static lp_status parse_members(line_cursor *c, size_t open, lp_prompt *p, size_t *id_col)
{
    bool seen[KEY_COUNT] = {false, false, false};
    for (;;) {
        skip_space(c);
        size_t key_at = c->pos;
        prompt_key key = KEY_COUNT;
        lp_status st = parse_key(c, &key);
        if (st != LP_OK)
            return st;
        if (seen[key])
            return fail_at(c, key_at, "key \"%s\" given twice", key_names[key]);
        seen[key] = true;
        skip_space(c);
        if (c->pos >= c->len || c->s[c->pos] != ':')
            return unexpected(c, "':' after the key");
        c->pos++;
        skip_space(c);
        if ((st = parse_value(c, key, p, id_col)) != LP_OK)
            return st;
        skip_space(c);
        if (c->pos < c->len && c->s[c->pos] == ',') {
            c->pos++;
            continue;
        }
        if (c->pos < c->len && c->s[c->pos] == '}')
            break;
        return unexpected(c, "',' or '}'");
    }
    c->pos++;
    if (seen[KEY_TEXT] == seen[KEY_TOKENS])
        return fail_at(c, open, "give exactly one of \"text\" and \"tokens\" (%s)",
                       seen[KEY_TEXT] ? "both given" : "neither given");
    return LP_OK;
}

/* One non-blank line: an object and nothing after it. */
static lp_status parse_line(line_cursor *c, lp_prompt *p, size_t *id_col)
{
    skip_space(c);
    size_t open = c->pos;
    if (c->s[c->pos] != '{')
        return unexpected(c, "'{' (one JSON object per line)");
    c->pos++;
    skip_space(c);
    if (c->pos < c->len && c->s[c->pos] == '}')
        return fail_at(c, open, "empty object: give \"text\" or \"tokens\"");
    lp_status st = parse_members(c, open, p, id_col);
    if (st != LP_OK)
        return st;
    skip_space(c);
    if (c->pos < c->len)
        return unexpected(c, "the end of the line after the object");
    return LP_OK;
}

static void prompt_free(lp_prompt *p)
{
    free(p->id);
    free(p->text);
    free(p->tokens);
    memset(p, 0, sizeof *p);
}

void lp_prompts_free(lp_prompts *prompts)
{
    if (!prompts)
        return;
    for (size_t i = 0; i < prompts->n; i++)
        prompt_free(&prompts->items[i]);
    free(prompts->items);
    memset(prompts, 0, sizeof *prompts);
}

static int compare_id_refs(const void *a, const void *b)
{
    const id_ref *x = a, *y = b;
    int order = strcmp(x->id, y->id);
    return order ? order : (x->index > y->index) - (x->index < y->index);
}

/* Ids are unique: after sorting, equal neighbours are duplicates; the one named is the earliest
 * second use in the file, as a reader going top to bottom would meet it. */
static lp_status check_unique_ids(const char *name, const lp_prompts *p, id_ref *refs,
                                  size_t n_refs, lp_error *err)
{
    qsort(refs, n_refs, sizeof *refs, compare_id_refs);
    const id_ref *worst = NULL, *first = NULL;
    size_t group = 0; /* the first ref of the run of equal ids refs[i] belongs to */
    for (size_t i = 1; i < n_refs; i++) {
        if (strcmp(refs[i].id, refs[group].id) != 0) {
            group = i;
            continue;
        }
        /* within a run, refs are in file order: the second is the first re-use */
        if (i == group + 1 && (!worst || refs[i].index < worst->index)) {
            worst = &refs[i];
            first = &refs[group];
        }
    }
    if (!worst)
        return LP_OK;
    const lp_prompt *dup = &p->items[worst->index];
    return lp_error_set(err, LP_ERR_FORMAT, "%s:%lld:%zu: id \"%.40s\" already used on line %lld",
                        name, (long long)dup->line, worst->col + 1, dup->id,
                        (long long)p->items[first->index].line);
}

/* Grows items and refs together; refs keeps one slot a prompt. */
static bool grow(lp_prompts *p, id_ref **refs, size_t *cap)
{
    if (p->n < *cap)
        return true;
    size_t want = *cap ? *cap * 2 : 64;
    lp_prompt *items = realloc(p->items, want * sizeof *items);
    if (!items)
        return false;
    p->items = items;
    id_ref *r = realloc(*refs, want * sizeof *r);
    if (!r)
        return false;
    *refs = r;
    *cap = want;
    return true;
}

static bool is_blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

static lp_status parse_all(const char *name, const char *data, size_t size, lp_prompts *out,
                           id_ref **refs, size_t *n_refs, lp_error *err)
{
    size_t cap = 0, at = 0;
    line_cursor c = {.name = name, .err = err};
    if (size >= 3 && memcmp(data, "\xEF\xBB\xBF", 3) == 0)
        at = 3;
    while (at < size) {
        const char *nl = memchr(data + at, '\n', size - at);
        size_t end = nl ? (size_t)(nl - data) : size;
        c.line++;
        c.s = data + at;
        c.len = end - at;
        c.pos = 0;
        at = end + 1;
        if (is_blank(c.s, c.len))
            continue;
        if (!grow(out, refs, &cap))
            return no_memory(&c);
        lp_prompt *p = &out->items[out->n];
        memset(p, 0, sizeof *p);
        p->line = c.line;
        size_t id_col = 0;
        lp_status st = parse_line(&c, p, &id_col);
        out->n++; /* counted even when it failed, so lp_prompts_free frees its parts */
        if (st != LP_OK)
            return st;
        if (p->id)
            (*refs)[(*n_refs)++] = (id_ref){p->id, out->n - 1, id_col};
    }
    if (out->n == 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: no prompt in the file (%s)", name,
                            size == 0 ? "it is empty" : "only blank lines");
    return check_unique_ids(name, out, *refs, *n_refs, err);
}

lp_status lp_prompts_parse(const char *name, const char *data, size_t size, lp_prompts *out,
                           lp_error *err)
{
    lp_error local = {0};
    if (!err)
        err = &local;
    memset(out, 0, sizeof *out);
    id_ref *refs = NULL;
    size_t n_refs = 0;
    lp_status st = parse_all(name, data, size, out, &refs, &n_refs, err);
    free(refs);
    if (st != LP_OK)
        lp_prompts_free(out);
    return st;
}

lp_status lp_prompts_read(const char *path, lp_prompts *out, lp_error *err)
{
    memset(out, 0, sizeof *out);
    lp_mapped_file map;
    lp_status st = lp_map_file(path, &map, err);
    if (st != LP_OK)
        return st;
    st = lp_prompts_parse(path, (const char *)map.data, map.size, out, err);
    lp_unmap_file(&map);
    return st;
}
