/* The declarative option parser and the help text generated from the same tables. */
#include "core/cli/cli.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define HELP_NAME_COLUMN 28 /* option help starts here; longer names put it on the next line */

/* ---- finding an option ----------------------------------------------------------------------- */

/* An option found in a (possibly nested) table, with the offset of its value in the command's
 * struct. */
typedef struct found_option {
    const lp_option *opt;
    size_t offset;
} found_option;

static bool find_option(const lp_option *table, size_t n_rows, size_t base, const char *name,
                        size_t name_len, found_option *out)
{
    n_rows = lp_cli_table_rows(table, n_rows);
    for (const lp_option *o = table; o < table + n_rows; o++) {
        if (o->kind == LP_OPT_TABLE) {
            if (find_option(o->table, o->n_table, base + o->offset, name, name_len, out))
                return true;
        } else if (strlen(o->name) == name_len && strncmp(o->name, name, name_len) == 0) {
            out->opt = o;
            out->offset = base + o->offset;
            return true;
        }
    }
    return false;
}

/* ---- storing a value ------------------------------------------------------------------------- */

static bool in_range(const lp_option *o, double v) { return o->min >= o->max || (v >= o->min && v <= o->max); }

static void describe_range(const lp_option *o, char *buf, size_t size)
{
    if (o->min >= o->max)
        snprintf(buf, size, "%s", o->kind == LP_OPT_NUMBER ? "a number" : "a whole number");
    else if (o->kind == LP_OPT_NUMBER)
        snprintf(buf, size, "a number in [%g, %g]", o->min, o->max);
    else
        snprintf(buf, size, "a whole number in %.0f..%.0f", o->min, o->max);
}

static int bad_value(const char *cmd, const lp_option *o, const char *value, const char *wanted)
{
    return lp_cli_usage_error(cmd, "--%s: '%s' is not %s", o->name, value, wanted);
}

static int store_enum(const char *cmd, const lp_option *o, const char *value, int *dest)
{
    char wanted[256] = "one of";
    for (int i = 0; o->choices[i]; i++) {
        if (strcmp(o->choices[i], value) == 0) {
            *dest = i;
            return LP_CLI_PARSED;
        }
        size_t n = strlen(wanted);
        snprintf(wanted + n, sizeof wanted - n, "%s%s", i ? ", " : " ", o->choices[i]);
    }
    return bad_value(cmd, o, value, wanted);
}

static int store_value(const char *cmd, const found_option *f, const char *value, char *opts)
{
    const lp_option *o = f->opt;
    void *dest = opts + f->offset;
    char wanted[96];
    switch (o->kind) {
    case LP_OPT_STRING:
        *(const char **)dest = value;
        return LP_CLI_PARSED;
    case LP_OPT_INT:
    case LP_OPT_COUNT: {
        int64_t v;
        bool ok = o->kind == LP_OPT_INT ? lp_parse_i64(value, &v) : lp_parse_count(value, &v);
        if (!ok || !in_range(o, (double)v)) {
            describe_range(o, wanted, sizeof wanted);
            return bad_value(cmd, o, value, wanted);
        }
        *(int64_t *)dest = v;
        return LP_CLI_PARSED;
    }
    case LP_OPT_NUMBER: {
        double v;
        if (!lp_parse_f64(value, &v) || !isfinite(v) || !in_range(o, v)) {
            describe_range(o, wanted, sizeof wanted);
            return bad_value(cmd, o, value, wanted);
        }
        *(double *)dest = v;
        return LP_CLI_PARSED;
    }
    case LP_OPT_SIZE: {
        uint64_t v;
        if (!lp_parse_size(value, &v))
            return bad_value(cmd, o, value, "a size (4096, 512MiB, 24GiB, 16GB)");
        *(uint64_t *)dest = v;
        return LP_CLI_PARSED;
    }
    case LP_OPT_ENUM:
        return store_enum(cmd, o, value, (int *)dest);
    default:
        LP_ASSERT(!"option kind takes no value");
        return LP_EXIT_USAGE;
    }
}

/* ---- parsing --------------------------------------------------------------------------------- */

/* The option called name[0..name_len) (eq: its "=VALUE" part or NULL): take its value, store it. */
static int parse_named(const lp_cli_spec *spec, int argc, char **argv, int *i, const char *name,
                       size_t name_len, const char *eq, char *opts)
{
    found_option f;
    if (!find_option(spec->options, spec->n_options, 0, name, name_len, &f))
        return lp_cli_usage_error(spec->name, "unknown option '--%.*s' (see loupe %s --help)",
                                  (int)name_len, name, spec->name);
    if (f.opt->kind == LP_OPT_FLAG) {
        if (eq)
            return lp_cli_usage_error(spec->name, "--%s takes no value (got '%s')", f.opt->name,
                                      eq + 1);
        *(bool *)(opts + f.offset) = true;
        return LP_CLI_PARSED;
    }
    const char *value = eq ? eq + 1 : NULL;
    if (!value) {
        if (*i + 1 >= argc)
            return lp_cli_usage_error(spec->name, "option --%s needs a value", f.opt->name);
        value = argv[++*i];
    }
    return store_value(spec->name, &f, value, opts);
}

/* argv[*i] starts with "--": find the option, take its value, store it. */
static int parse_long(const lp_cli_spec *spec, int argc, char **argv, int *i, char *opts)
{
    const char *arg = argv[*i] + 2;
    const char *eq = strchr(arg, '=');
    return parse_named(spec, argc, argv, i, arg, eq ? (size_t)(eq - arg) : strlen(arg), eq, opts);
}

/* argv[*i] is "-X" or "-X=VALUE": the long option an alias stands for. */
static int parse_alias(const lp_cli_spec *spec, int argc, char **argv, int *i, char *opts)
{
    const char *arg = argv[*i] + 1;
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    for (const lp_cli_alias *a = spec->aliases; a && a->alias; a++)
        if (strlen(a->alias) == len && strncmp(a->alias, arg, len) == 0)
            return parse_named(spec, argc, argv, i, a->name, strlen(a->name), eq, opts);
    return lp_cli_usage_error(spec->name, "unknown option '%s' (see loupe %s --help)", argv[*i],
                              spec->name);
}

int lp_cli_parse(const lp_cli_spec *spec, int argc, char **argv, void *opts,
                 const char **positional, int *n_positional)
{
    int n_pos = 0;
    bool options_done = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!options_done && strcmp(arg, "--") == 0) {
            options_done = true;
            continue;
        }
        if (!options_done && arg[0] == '-' && arg[1] != '\0') {
            int rc = arg[1] == '-' ? parse_long(spec, argc, argv, &i, (char *)opts)
                                   : parse_alias(spec, argc, argv, &i, (char *)opts);
            if (rc != LP_CLI_PARSED)
                return rc;
            continue;
        }
        if (n_pos >= spec->max_positional || n_pos >= LP_CLI_MAX_POSITIONAL)
            return lp_cli_usage_error(spec->name, "unexpected argument '%s' (usage: loupe %s %s)",
                                      arg, spec->name, spec->synopsis ? spec->synopsis : "");
        positional[n_pos++] = arg;
    }
    if (n_pos < spec->min_positional)
        return lp_cli_usage_error(spec->name, "missing arguments (usage: loupe %s %s)",
                                  spec->name, spec->synopsis ? spec->synopsis : "");
    if (n_positional)
        *n_positional = n_pos;
    return LP_CLI_PARSED;
}

/* ---- help ------------------------------------------------------------------------------------ */

static void option_label(const lp_option *o, const lp_cli_alias *aliases, char *buf,
                         size_t size)
{
    const char *alias = NULL;
    for (const lp_cli_alias *a = aliases; a && a->alias; a++)
        if (strcmp(a->name, o->name) == 0)
            alias = a->alias;
    int n = alias ? snprintf(buf, size, "-%s, --%s", alias, o->name)
                  : snprintf(buf, size, "--%s", o->name);
    if (n < 0 || (size_t)n >= size || o->kind == LP_OPT_FLAG)
        return;
    if (o->kind == LP_OPT_ENUM) {
        size_t pos = (size_t)n;
        for (int i = 0; o->choices[i] && pos < size; i++)
            pos += (size_t)snprintf(buf + pos, size - pos, "%s%s", i ? "|" : " ", o->choices[i]);
        return;
    }
    snprintf(buf + n, size - (size_t)n, " %s", o->metavar ? o->metavar : "VALUE");
}

/* Help lines after the first are indented to the help column. */
static void print_help_text(FILE *out, const char *help)
{
    for (const char *p = help; *p; p++) {
        fputc(*p, out);
        if (*p == '\n' && p[1])
            fprintf(out, "%*s", HELP_NAME_COLUMN, "");
    }
    fputc('\n', out);
}

static void print_options(FILE *out, const lp_option *table, size_t n_rows,
                          const lp_cli_alias *aliases)
{
    n_rows = lp_cli_table_rows(table, n_rows);
    for (const lp_option *o = table; o < table + n_rows; o++) {
        if (o->kind == LP_OPT_TABLE) {
            print_options(out, o->table, o->n_table, aliases);
            continue;
        }
        char label[256];
        option_label(o, aliases, label, sizeof label);
        int width = fprintf(out, "  %s", label);
        if (width + 2 > HELP_NAME_COLUMN)
            fprintf(out, "\n%*s", HELP_NAME_COLUMN, "");
        else
            fprintf(out, "%*s", HELP_NAME_COLUMN - width, "");
        print_help_text(out, o->help ? o->help : "");
    }
}

void lp_cli_print_help(const lp_cli_spec *spec, FILE *out)
{
    fprintf(out, "usage: loupe %s %s\n", spec->name, spec->synopsis ? spec->synopsis : "");
    if (spec->description)
        fprintf(out, "\n%s\n", spec->description);
    if (lp_cli_table_rows(spec->options, spec->n_options) > 0) {
        fputs("\noptions:\n", out);
        print_options(out, spec->options, spec->n_options, spec->aliases);
    }
    if (spec->notes)
        fprintf(out, "\n%s\n", spec->notes);
}

/* ---- messages -------------------------------------------------------------------------------- */

int lp_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "loupe %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return LP_EXIT_USAGE;
}

int lp_cli_print_json(const char *cmd, json_t *doc, size_t flags)
{
    char *text = doc ? json_dumps(doc, flags) : NULL;
    json_decref(doc);
    if (!text)
        return lp_cli_usage_error(cmd, "out of memory writing JSON");
    printf("%s\n", text);
    free(text);
    return LP_EXIT_OK;
}

int lp_cli_fail(const char *cmd, const lp_error *err)
{
    fprintf(stderr, "loupe %s: %s\n", cmd, err && err->msg[0] ? err->msg : "failed");
    return LP_EXIT_USAGE;
}
