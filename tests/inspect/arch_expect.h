/* Expectations on an lp_arch written as one string of "member=value" words, checked against its
 * JSON (lp_arch_to_json), so that a table row of {input, expected} reads like the description:
 *
 *   if (!arch_expect(a, "n_kv_heads=8 norm_kind=layer layer_window[1]=0 rope_scaling.kind=yarn",
 *                    why, sizeof why))
 *       fail_msg("%s: %s", row->name, why);
 *
 * member is an lp_arch_to_json key, "key[i]" an array element, "key.sub" a nested member; value
 * is compared as the member's type: integers and numbers by value (32 matches 32.0), true/false,
 * strings as they are, null.
 */
#ifndef LP_TESTS_ARCH_EXPECT_H
#define LP_TESTS_ARCH_EXPECT_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "inspect/arch/arch_json.h"

/* The member a path names ("layer_window[1]", "rope_scaling.kind"), or NULL. */
static inline json_t *arch_expect_member(json_t *root, const char *path)
{
    char key[96];
    size_t n = strcspn(path, ".[");
    if (n >= sizeof key)
        return NULL;
    memcpy(key, path, n);
    key[n] = '\0';
    json_t *v = json_object_get(root, key);
    if (v && path[n] == '[')
        v = json_array_get(v, (size_t)strtoul(path + n + 1, NULL, 10));
    else if (v && path[n] == '.')
        v = arch_expect_member(v, path + n + 1);
    return v;
}

static inline bool arch_expect_value(const json_t *v, const char *want)
{
    char *end;
    switch (json_typeof(v)) {
    case JSON_STRING: return strcmp(json_string_value(v), want) == 0;
    case JSON_TRUE: return strcmp(want, "true") == 0;
    case JSON_FALSE: return strcmp(want, "false") == 0;
    case JSON_NULL: return strcmp(want, "null") == 0;
    case JSON_INTEGER:
    case JSON_REAL: {
        double d = strtod(want, &end);
        return *want && !*end && d == json_number_value(v);
    }
    default: return false;
    }
}

/* True when every word of expected holds; else false with why naming the first that does not. */
static inline bool arch_expect(const lp_arch *a, const char *expected, char *why, size_t size)
{
    json_t *root = lp_arch_to_json(a);
    bool ok = root != NULL;
    if (!ok)
        snprintf(why, size, "lp_arch_to_json failed");
    for (const char *p = expected; ok && *p;) {
        p += strspn(p, " ");
        size_t n = strcspn(p, " ");
        char word[160], *eq;
        snprintf(word, sizeof word, "%.*s", (int)(n < sizeof word ? n : sizeof word - 1), p);
        p += n;
        if (!*word)
            break;
        if (!(eq = strchr(word, '='))) {
            snprintf(why, size, "expectation '%s' has no '='", word);
            ok = false;
            break;
        }
        *eq = '\0';
        json_t *v = arch_expect_member(root, word);
        if (!v || !arch_expect_value(v, eq + 1)) {
            char *got = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
            snprintf(why, size, "%s is %s, expected %s", word, got ? got : "absent", eq + 1);
            free(got);
            ok = false;
        }
    }
    json_decref(root);
    return ok;
}

#endif
