/* Strict number, size and unit parsing, and human formatting of counts, bytes and FLOPs. */
#include "core/text.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool lp_parse_i64(const char *text, int64_t *out)
{
    if (!text || !*text)
        return false;
    errno = 0;
    char *end;
    long long v = strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

bool lp_parse_f64(const char *text, double *out)
{
    if (!text || !*text)
        return false;
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v))
        return false;
    *out = v;
    return true;
}

lp_status lp_parse_token_ids(const char *text, int32_t **out, size_t *n_out, lp_error *err)
{
    size_t cap = 1;
    for (const char *p = text; *p; p++)
        cap += *p == ',';
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    size_t n = 0;
    const char *p = text;
    for (;;) {
        const char *start = p;
        long long v = 0;
        bool digits = false;
        while (*p == ' ')
            p++;
        while (*p >= '0' && *p <= '9') {
            v = v * 10 + (*p - '0');
            digits = true;
            if (v > INT32_MAX) {
                free(ids);
                return lp_error_set(err, LP_ERR_USAGE, "--tokens: id at offset %d exceeds %d",
                                    (int)(start - text), INT32_MAX);
            }
            p++;
        }
        while (*p == ' ')
            p++;
        if (!digits || (*p != ',' && *p != '\0')) {
            free(ids);
            return lp_error_set(err, LP_ERR_USAGE,
                                "--tokens '%s': expected a non-negative integer at offset %d",
                                text, (int)(start - text));
        }
        ids[n++] = (int32_t)v;
        if (*p == '\0')
            break;
        p++;
    }
    *out = ids;
    *n_out = n;
    return LP_OK;
}

typedef struct unit_suffix {
    const char *suffix;
    double scale;
} unit_suffix;

static bool parse_scaled(const char *text, const unit_suffix *units, size_t n_units,
                         double max_value, double *out)
{
    if (!text || !*text)
        return false;
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || !isfinite(v) || v < 0)
        return false;
    while (*end == ' ')
        end++;
    double scale = 1;
    if (*end) {
        bool found = false;
        for (size_t i = 0; i < n_units; i++) {
            if (strcmp(end, units[i].suffix) == 0) {
                scale = units[i].scale;
                found = true;
                break;
            }
        }
        if (!found)
            return false;
    }
    v *= scale;
    if (v > max_value)
        return false;
    *out = v;
    return true;
}

bool lp_parse_size(const char *text, uint64_t *bytes)
{
    static const unit_suffix units[] = {
        {"B", 1},          {"k", 1e3},         {"K", 1e3},         {"kB", 1e3},
        {"KB", 1e3},       {"M", 1e6},         {"MB", 1e6},        {"G", 1e9},
        {"GB", 1e9},       {"T", 1e12},        {"TB", 1e12},       {"KiB", 1024.0},
        {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
        {"Ki", 1024.0},    {"Mi", 1048576.0},  {"Gi", 1073741824.0}, {"Ti", 1099511627776.0},
    };
    double v;
    if (!parse_scaled(text, units, sizeof units / sizeof units[0], 9.0e18, &v))
        return false;
    *bytes = (uint64_t)llround(v);
    return true;
}

bool lp_parse_count(const char *text, int64_t *out)
{
    static const unit_suffix units[] = {
        {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"Ki", 1024.0}, {"Mi", 1048576.0},
    };
    double v;
    if (!parse_scaled(text, units, sizeof units / sizeof units[0], 9.0e18, &v))
        return false;
    if (v != floor(v))
        return false;
    *out = (int64_t)v;
    return true;
}

const char *lp_format_bytes(uint64_t bytes, char *buf, int buf_size)
{
    static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    int unit = 0;
    while (v >= 1024.0 && unit < 6) {
        v /= 1024.0;
        unit++;
    }
    if (unit == 0)
        snprintf(buf, (size_t)buf_size, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, (size_t)buf_size, "%.2f %s", v, names[unit]);
    return buf;
}

const char *lp_format_flops(double flops, char *buf, int buf_size)
{
    static const char *const names[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP",
                                        "EFLOP"};
    double v = flops;
    int unit = 0;
    while (fabs(v) >= 1000.0 && unit < 6) {
        v /= 1000.0;
        unit++;
    }
    snprintf(buf, (size_t)buf_size, unit == 0 ? "%.0f %s" : "%.2f %s", v, names[unit]);
    return buf;
}

const char *lp_format_int(int64_t value, char *buf, int buf_size)
{
    char digits[32];
    snprintf(digits, sizeof digits, "%lld", (long long)(value < 0 ? -value : value));
    size_t n = strlen(digits);
    char out[48];
    size_t pos = 0;
    if (value < 0)
        out[pos++] = '-';
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            out[pos++] = ',';
        out[pos++] = digits[i];
    }
    out[pos] = '\0';
    snprintf(buf, (size_t)buf_size, "%s", out);
    return buf;
}


bool lp_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}
