/* The metadata of a GGUF as JSON, for `loupe inspect` on files that carry no usable description
 * (a vocabulary-only GGUF, an unknown architecture): what gguf-dump lists. */
#include "inspect/weights/report_internal.h"

#include <string.h>

#include "inspect/formats/gguf.h"
#include "inspect/weights/weights_internal.h"

#define ARRAY_HEAD 8 /* array elements shown before only the length is given */

static const char *type_name(lp_gguf_type t)
{
    static const char *const names[LP_GGUF_TYPE_COUNT] = {
        "uint8", "int8",   "uint16", "int16", "uint32", "int32",  "float32",
        "bool",  "string", "array",  "uint64", "int64", "float64"};
    return (unsigned)t < LP_GGUF_TYPE_COUNT ? names[t] : "unknown";
}

/* Strings as JSON strings; bytes that are not UTF-8 cannot be one, so say so instead. */
static json_t *text(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);
    return j ? j : json_string("(not valid UTF-8)");
}

static bool is_float(lp_gguf_type t) { return t == LP_GGUF_FLOAT32 || t == LP_GGUF_FLOAT64; }

static json_t *scalar(const lp_gguf *g, int64_t kv, lp_gguf_type t)
{
    const char *key = lp_gguf_key_name(g, kv);
    const char *s;
    size_t len;
    int64_t i;
    double d;
    bool b;
    if (t == LP_GGUF_STRING && lp_gguf_get_str(g, key, &s, &len))
        return text(s, len);
    if (t == LP_GGUF_BOOL && lp_gguf_get_bool(g, key, &b))
        return json_boolean(b);
    if (is_float(t) && lp_gguf_get_float(g, key, &d))
        return json_real(d);
    if (t == LP_GGUF_UINT64 && lp_gguf_get_int(g, key, &i))
        return json_integer(i); /* values past 2^63 read as the getter gives them */
    if (lp_gguf_get_int(g, key, &i))
        return json_integer(i);
    return json_null();
}

static json_t *element(const lp_gguf *g, int64_t kv, lp_gguf_type t, uint64_t k)
{
    const char *s;
    size_t len;
    int64_t i;
    double d;
    if (t == LP_GGUF_STRING && lp_gguf_arr_str(g, kv, k, &s, &len))
        return text(s, len);
    if (is_float(t) && lp_gguf_arr_float(g, kv, k, &d))
        return json_real(d);
    if (t != LP_GGUF_ARRAY && lp_gguf_arr_int(g, kv, k, &i))
        return t == LP_GGUF_BOOL ? json_boolean(i != 0) : json_integer(i);
    return json_null();
}

/* Arrays: {"array": element type, "length": n, "head": the first ARRAY_HEAD elements}. */
static json_t *array(const lp_gguf *g, int64_t kv)
{
    lp_gguf_type t = lp_gguf_arr_type(g, kv);
    uint64_t n = lp_gguf_arr_len(g, kv);
    json_t *o = json_object(), *head = json_array();
    if (!o || !head) {
        json_decref(o);
        json_decref(head);
        return NULL;
    }
    json_object_set_new(o, "array", json_string(type_name(t)));
    json_object_set_new(o, "length", json_integer((json_int_t)n));
    for (uint64_t k = 0; k < n && k < ARRAY_HEAD; k++)
        json_array_append_new(head, element(g, kv, t, k));
    json_object_set_new(o, "head", head);
    return o;
}

json_t *lp_gguf_metadata_json(const lp_weights *w)
{
    const lp_gguf *g = w->gguf;
    json_t *meta = json_object();
    if (!g || !meta)
        return meta;
    for (int64_t kv = 0; kv < lp_gguf_n_kv(g); kv++) {
        lp_gguf_type t = lp_gguf_kv_type(g, kv);
        json_t *v = t == LP_GGUF_ARRAY ? array(g, kv) : scalar(g, kv, t);
        if (!v || json_object_set_new(meta, lp_gguf_key_name(g, kv), v) != 0) {
            json_decref(meta);
            return NULL;
        }
    }
    return meta;
}
