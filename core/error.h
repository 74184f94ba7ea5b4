/* Errors as values: every fallible call returns lp_status and fills an optional lp_error.
 *
 *   lp_error err = {0};
 *   if (lp_weights_open(path, &w, &err) != LP_OK) {
 *       fprintf(stderr, "loupe: %s\n", err.msg);   // only the CLI prints
 *       return 2;
 *   }
 *
 * Messages name the file, the field or byte offset, the bad value and the limit, in one line:
 *   "model.safetensors: tensor 'lm_head.weight': data_offsets [12, 8] end before start"
 */
#ifndef LP_CORE_ERROR_H
#define LP_CORE_ERROR_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum lp_status {
    LP_OK = 0,
    LP_ERR_NOMEM,       /* an allocation failed */
    LP_ERR_IO,          /* open/read/mmap/write failed; message carries strerror */
    LP_ERR_FORMAT,      /* the input is malformed */
    LP_ERR_UNSUPPORTED, /* valid input that loupe does not handle (yet) */
    LP_ERR_RANGE,       /* a value outside what can be computed (overflow, limits) */
    LP_ERR_SQLITE,      /* SQLite said no; message keeps sqlite3_errmsg */
    LP_ERR_CAIRO,       /* cairo said no; message keeps cairo_status_to_string */
    LP_ERR_USAGE,       /* the caller asked for something contradictory */
    LP_ERR_NOT_FOUND,   /* a named thing (file, tensor, card, key) does not exist */
    LP_STATUS_COUNT
} lp_status;

#define LP_ERROR_MSG_MAX 512

typedef struct lp_error {
    lp_status code;
    char msg[LP_ERROR_MSG_MAX];
} lp_error;

/* Record an error and return its code, so callers can write `return lp_error_set(...)`.
 * err may be NULL. Messages longer than the buffer are cut, never overflowed. */
lp_status lp_error_set(lp_error *err, lp_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
lp_status lp_error_setv(lp_error *err, lp_status code, const char *fmt, va_list ap);

/* Prepend context ("config.json: ") to an existing message, keeping its code. */
lp_status lp_error_prefix(lp_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

const char *lp_status_name(lp_status status);

/* Programmer misuse (never bad input) may abort; stays on in release builds. */
#define LP_ASSERT(cond)                                                                   \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

#endif
