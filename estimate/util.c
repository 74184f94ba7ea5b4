/* The leaf helpers every estimate file shares (option defaults, time and JSON formatting): they
 * call nothing else of estimate/, so no two files of the module need each other. */
#include "estimate/estimate.h"

#include <stdio.h>
#include <string.h>

#include "estimate/estimate_internal.h"

void lp_est_options_init(lp_est_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->lm_head_tensor_present = -1;
}

const char *lp_est_format_seconds(double s, char *buf)
{
    if (s >= 1.0)
        snprintf(buf, 48, "%.3g s", s);
    else if (s >= 1e-3)
        snprintf(buf, 48, "%.3g ms", s * 1e3);
    else
        snprintf(buf, 48, "%.3g us", s * 1e6);
    return buf;
}

json_t *lp_est_json_u64(uint64_t v)
{
    return v <= (uint64_t)INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
}

void lp_est_json_put(json_t *obj, const char *key, json_t *value, bool *ok)
{
    if (!obj) {
        json_decref(value);
        *ok = false;
    } else if (json_object_set_new(obj, key, value) != 0) { /* it releases value; NULL fails */
        *ok = false;
    }
}

void lp_est_json_append(json_t *array, json_t *value, bool *ok)
{
    if (!array) {
        json_decref(value);
        *ok = false;
    } else if (json_array_append_new(array, value) != 0) {
        *ok = false;
    }
}
