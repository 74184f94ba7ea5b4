/* Error records: formatting, prefixing and status names. */
#define _POSIX_C_SOURCE 200809L
#include "core/error.h"

#include <string.h>

#include "core/names.h"

/* A message is one line whatever it quotes: a name or text read from a hostile file (a dtype
 * string holding a newline, found by fuzzing the trace database) must not break it, so control
 * characters become '?'. */
static void keep_one_line(char *msg)
{
    for (unsigned char *c = (unsigned char *)msg; *c; c++)
        if (*c < 0x20 || *c == 0x7f)
            *c = '?';
}

lp_status lp_error_setv(lp_error *err, lp_status code, const char *fmt, va_list ap)
{
    if (err) {
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        keep_one_line(err->msg);
    }
    return code;
}

lp_status lp_error_set(lp_error *err, lp_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lp_error_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

lp_status lp_error_prefix(lp_error *err, const char *fmt, ...)
{
    if (!err)
        return LP_OK;
    char prefix[LP_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Join by hand: the result is cut at the buffer size, which is what we want. */
    char joined[LP_ERROR_MSG_MAX];
    size_t prefix_len = strlen(prefix);
    size_t msg_len = strnlen(err->msg, sizeof err->msg);
    if (prefix_len > sizeof joined - 1)
        prefix_len = sizeof joined - 1;
    if (msg_len > sizeof joined - 1 - prefix_len)
        msg_len = sizeof joined - 1 - prefix_len;
    memcpy(joined, prefix, prefix_len);
    memcpy(joined + prefix_len, err->msg, msg_len);
    joined[prefix_len + msg_len] = '\0';
    keep_one_line(joined);
    memcpy(err->msg, joined, sizeof joined);
    return err->code;
}

static const lp_name_entry status_names[] = {
    {LP_OK, "ok"},
    {LP_ERR_NOMEM, "out of memory"},
    {LP_ERR_IO, "i/o error"},
    {LP_ERR_FORMAT, "format error"},
    {LP_ERR_UNSUPPORTED, "unsupported"},
    {LP_ERR_RANGE, "out of range"},
    {LP_ERR_SQLITE, "sqlite error"},
    {LP_ERR_CAIRO, "cairo error"},
    {LP_ERR_USAGE, "usage error"},
    {LP_ERR_NOT_FOUND, "not found"},
};

LP_NAMES_DEFINE_WORD(lp_status_name, lp_status, status_names, "unknown status")
