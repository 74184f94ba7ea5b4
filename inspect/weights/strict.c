/* `loupe inspect --strict`: the config.json keys loupe's reader never looks up, as a check. A
 * config with keys loupe does not know is valid (transformers ignores them too); --strict lists
 * them so that a description that silently misses a setting can be noticed. */
#include "inspect/weights/report_internal.h"

#include <stdio.h>
#include <string.h>

#include "inspect/arch/arch_internal.h"
#include "inspect/weights/weights_internal.h"

#define KEYS_SHOWN 24 /* keys named in the detail before "and N more" */

lp_status lp_inspect_config_keys_check(const char *config_path, json_t *checks, lp_error *err)
{
    json_t *keys;
    lp_status st = lp_hf_config_unread_keys(config_path, &keys, err);
    if (st != LP_OK)
        return st;
    char detail[2048];
    size_t n = json_array_size(keys), used = 0;
    if (n == 0)
        snprintf(detail, sizeof detail, "every key of %s is read", config_path);
    else
        used = (size_t)snprintf(detail, sizeof detail, "%zu key%s of %s not read by loupe: ", n,
                                n == 1 ? "" : "s", config_path);
    for (size_t i = 0; i < n && i < KEYS_SHOWN && used < sizeof detail; i++)
        used += (size_t)snprintf(detail + used, sizeof detail - used, "%s%s", i ? ", " : "",
                                 json_string_value(json_array_get(keys, i)));
    if (n > KEYS_SHOWN && used < sizeof detail)
        snprintf(detail + used, sizeof detail - used, " and %zu more", n - KEYS_SHOWN);
    json_decref(keys);
    json_t *c = json_object();
    if (!c || json_array_append_new(checks, c) != 0)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    json_object_set_new(c, "name", json_string("config_keys"));
    json_object_set_new(c, "passed", json_boolean(n == 0));
    json_object_set_new(c, "detail", json_string(detail));
    return LP_OK;
}

const char *lp_weights_config_path(const lp_weights *w) { return w->config_path; }
