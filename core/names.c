/* The {value, name} table lookups behind every enum's name and from-name function. */
#include "core/names.h"

#include <string.h>
#include <strings.h>

const char *lp_names_word(const lp_name_entry *table, size_t n, int value, const char *fallback)
{
    for (size_t i = 0; i < n; i++)
        if (table[i].value == value)
            return table[i].name;
    return fallback;
}

bool lp_names_value(const lp_name_entry *table, size_t n, const char *name, bool ignore_case,
                    int *value)
{
    if (!name)
        return false;
    for (size_t i = 0; i < n; i++) {
        int differs = ignore_case ? strcasecmp(name, table[i].name) : strcmp(name, table[i].name);
        if (differs == 0) {
            *value = table[i].value;
            return true;
        }
    }
    return false;
}
