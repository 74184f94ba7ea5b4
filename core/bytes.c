/* The growable byte buffer: doubling growth with checked sizes and a sticky failure. */
#include "core/bytes.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool lp_bytes_reserve(lp_bytes *b, size_t extra)
{
    if (b->failed)
        return false;
    if (extra > SIZE_MAX - 1 - b->len) {
        b->failed = true;
        return false;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            b->failed = true;
            return false;
        }
        cap *= 2;
    }
    char *grown = realloc(b->data, cap);
    if (!grown) {
        b->failed = true;
        return false;
    }
    b->data = grown;
    b->cap = cap;
    return true;
}

void lp_bytes_append(lp_bytes *b, const void *bytes, size_t n)
{
    if (!lp_bytes_reserve(b, n))
        return;
    if (n)
        memcpy(b->data + b->len, bytes, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void lp_bytes_append_char(lp_bytes *b, char c)
{
    lp_bytes_append(b, &c, 1);
}

void lp_bytes_append_zeros(lp_bytes *b, size_t n)
{
    if (!lp_bytes_reserve(b, n))
        return;
    memset(b->data + b->len, 0, n + 1);
    b->len += n;
}

void lp_bytes_free(lp_bytes *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}
