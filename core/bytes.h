/* A growable byte buffer for encoders and text builders: append without checking every call,
 * look at one sticky flag at the end.
 *
 *   lp_bytes out = {0};                        // empty; nothing allocated yet
 *   lp_bytes_append(&out, "GGUF", 4);
 *   lp_bytes_append_zeros(&out, 28);           // padding
 *   if (out.failed) ...out of memory...
 *   fwrite(out.data, 1, out.len, f);           // out.data[out.len] is '\0': text is a C string
 *   lp_bytes_free(&out);
 */
#ifndef LP_CORE_BYTES_H
#define LP_CORE_BYTES_H

#include <stdbool.h>
#include <stddef.h>

typedef struct lp_bytes {
    char *data;  /* [cap]: len bytes, then a '\0' len does not count; NULL before any append */
    size_t len, cap;
    bool failed; /* an allocation failed or the size would overflow: appends since did nothing */
} lp_bytes;

/* Room for extra more bytes (and the '\0'), growing by doubling; false, and failed set, when the
 * size overflows or memory runs out (the bytes so far stay). */
bool lp_bytes_reserve(lp_bytes *b, size_t extra);
void lp_bytes_append(lp_bytes *b, const void *bytes, size_t n);
void lp_bytes_append_char(lp_bytes *b, char c);
void lp_bytes_append_zeros(lp_bytes *b, size_t n);
/* Frees the bytes and leaves b empty, ready for reuse. */
void lp_bytes_free(lp_bytes *b);

#endif
