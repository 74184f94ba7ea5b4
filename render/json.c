/* Building JSON with jansson when memory may run out: jansson reports a failed allocation only
 * by returning NULL or -1, and a NULL value handed on is silently dropped, so these remember any
 * failure in *ok; the viewer and export then refuse the file instead of writing one with holes. */
#include "render/render_internal.h"

#include <stdlib.h>

void lp_render_json_set(bool *ok, json_t *obj, const char *key, json_t *value)
{
    if (json_object_set_new(obj, key, value) != 0) /* also -1 for a NULL obj or value */
        *ok = false;
}

void lp_render_json_push(bool *ok, json_t *array, json_t *value)
{
    if (json_array_append_new(array, value) != 0)
        *ok = false;
}

json_t *lp_render_json_text(const char *s)
{
    json_t *j = json_string(s ? s : "");
    if (j)
        return j;
    char *visible = lp_render_visible_piece(s, 1 << 20);
    j = json_string(visible ? visible : "?");
    free(visible);
    return j;
}
