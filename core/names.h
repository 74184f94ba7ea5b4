/* Enum values and the words loupe prints and accepts for them, as one {value, name} table per
 * enum read by one pair of functions:
 *
 *   static const lp_name_entry scale_names[] = {
 *       {LP_SCALE_LINEAR, "linear"},
 *       {LP_SCALE_LOG, "log"},
 *   };
 *   lp_names_word(scale_names, LP_NAMES_LEN(scale_names), LP_SCALE_LOG, "?");     // "log"
 *   int v;
 *   lp_names_value(scale_names, LP_NAMES_LEN(scale_names), "LOG", true, &v);     // true, 1
 *
 * An enum's public pair is then one line beside its table, so every enum reads its names the
 * same way:
 *
 *   LP_NAMES_DEFINE(lp_scale_name, lp_scale_from_name, lp_scale, scale_names, "?", true,
 *                   LP_SCALE_COUNT)
 *
 * A table may give one value several names (aliases): the first row of a value is the word it is
 * printed as; every row is accepted when parsing. Tables are tens of rows, so a scan is enough. */
#ifndef LP_CORE_NAMES_H
#define LP_CORE_NAMES_H

#include <stdbool.h>
#include <stddef.h>

typedef struct lp_name_entry {
    int value;
    const char *name;
} lp_name_entry;

#define LP_NAMES_LEN(table) (sizeof(table) / sizeof((table)[0]))

/* The first name of value, or fallback when the table has none. */
const char *lp_names_word(const lp_name_entry *table, size_t n, int value, const char *fallback);

/* The value named name (compared ignoring ASCII case when ignore_case); false, *value untouched,
 * when no row has that name or name is NULL. */
bool lp_names_value(const lp_name_entry *table, size_t n, const char *name, bool ignore_case,
                    int *value);

/* Defines `const char *word_fn(type value)`: value's first name, fallback without a row. */
#define LP_NAMES_DEFINE_WORD(word_fn, type, table, fallback)                  \
    const char *word_fn(type value)                                            \
    {                                                                          \
        return lp_names_word(table, LP_NAMES_LEN(table), (int)value, fallback); \
    }

/* Defines word_fn as above and `type value_fn(const char *name)`: the value named name, not_found
 * when no row has that name (or name is NULL). */
#define LP_NAMES_DEFINE(word_fn, value_fn, type, table, fallback, ignore_case, not_found)  \
    LP_NAMES_DEFINE_WORD(word_fn, type, table, fallback)                                  \
    type value_fn(const char *name)                                                       \
    {                                                                                     \
        int found;                                                                        \
        if (lp_names_value(table, LP_NAMES_LEN(table), name, ignore_case, &found))        \
            return (type)found;                                                           \
        return not_found;                                                                 \
    }

#endif
