/* Token labels: the store's token texts made visible (spaces, control bytes, bad UTF-8) and cut
 * to a label's length. */
#include "render/render.h"

#include <stdlib.h>
#include <string.h>

/* Longest label kept, in characters; longer pieces end in an ellipsis. */
#define PIECE_MAX_CHARS 24

/* Decode one UTF-8 sequence; returns its length, or 0 when invalid (overlong, surrogate, cut). */
static size_t get_utf8(const unsigned char *s, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

/* What a label shows for the character cp (len bytes of valid UTF-8; len 0 for an invalid byte):
 * a visible stand-in, or NULL for the character itself. */
static const char *stand_in(uint32_t cp, size_t len, char buf[4])
{
    if (len == 0)
        return "\xef\xbf\xbd"; /* U+FFFD */
    if (cp == ' ' || cp == 0x2581)
        return "\xe2\x90\xa3"; /* U+2423 open box */
    if (cp == '\n')
        return "\xe2\x8f\x8e"; /* U+23CE return symbol */
    if (cp == '\t')
        return "\xe2\x87\xa5"; /* U+21E5 */
    if (cp < 0x20) {            /* U+2400 + cp, the control pictures ('\r': U+240D) */
        buf[0] = '\xe2';
        buf[1] = '\x90';
        buf[2] = (char)(0x80 + cp);
        buf[3] = '\0';
        return buf;
    }
    if (cp == 0x7f)
        return "\xe2\x90\xa1"; /* U+2421 */
    return NULL;
}

char *lp_render_visible_piece(const char *piece, int max_chars)
{
    if (!piece)
        piece = "";
    size_t n = strlen(piece);
    if (max_chars < 1)
        max_chars = 1;
    /* each input byte becomes at most 3 output bytes (U+FFFD or a control picture) */
    char *out = malloc(3 * n + 8);
    if (!out)
        return NULL;
    const unsigned char *s = (const unsigned char *)piece;
    size_t o = 0, i = 0;
    for (int chars = 0; i < n; chars++) {
        if (chars == max_chars) {
            memcpy(out + o, "\xe2\x80\xa6", 3); /* ellipsis */
            o += 3;
            break;
        }
        uint32_t cp = 0;
        char buf[4];
        size_t len = get_utf8(s + i, &cp);
        const char *sub = stand_in(cp, len, buf);
        size_t sub_len = sub ? strlen(sub) : len;
        memcpy(out + o, sub ? sub : piece + i, sub_len);
        o += sub_len;
        i += len ? len : 1;
    }
    out[o] = '\0';
    return out;
}

lp_status lp_render_read_labels(lp_store *db, int64_t run_id, char ***labels, int64_t *n,
                                lp_error *err)
{
    lp_status st = lp_store_read_tokens(db, run_id, labels, n, err);
    for (int64_t i = 0; st == LP_OK && i < *n; i++) {
        if (!(*labels)[i])
            continue; /* a position without a row: drawn as "?" */
        char *visible = lp_render_visible_piece((*labels)[i], PIECE_MAX_CHARS);
        if (!visible) {
            st = lp_error_set(err, LP_ERR_NOMEM, "tokens: out of memory");
            lp_store_free_texts(*labels, *n);
            *labels = NULL;
            *n = 0;
            break;
        }
        free((*labels)[i]);
        (*labels)[i] = visible;
    }
    return st;
}
