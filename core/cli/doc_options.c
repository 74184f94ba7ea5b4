/* Every command's options as one flat list for the man page and completion generators: walked
 * from the option table. */
#include "core/cli/gen_docs_internal.h"

#include <string.h>

/* A piece of a longer text: [p, p + n). */
typedef struct span {
    const char *p;
    size_t n;
} span;

static bool name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }

/* A character of an enumerated value ("f16", "q4_k", "off-by-one"): safe unquoted in shell code. */
static bool value_char(char c)
{
    return name_char(c) || c == '_' || c == '.' || c == '+' || c == ':';
}

static bool span_is_name(span s)
{
    if (s.n == 0)
        return false;
    for (size_t i = 0; i < s.n; i++)
        if (!name_char(s.p[i]))
            return false;
    return true;
}

static lp_status copy_span(char *dst, size_t size, span s, const lp_cli_spec *spec,
                           const char *what, lp_error *err)
{
    if (s.n >= size)
        return lp_error_set(err, LP_ERR_RANGE,
                            "loupe %s: %s '%.*s' is %zu bytes, more than the %zu the "
                            "documentation generator keeps",
                            spec->name, what, (int)s.n, s.p, s.n, size - 1);
    memcpy(dst, s.p, s.n);
    dst[s.n] = '\0';
    return LP_OK;
}

/* A help text on one line (its lines joined by single spaces), cut at a word with " ..." when it
 * does not fit: completions show one short line. */
static void copy_one_line(char *dst, size_t size, span help)
{
    size_t n = 0, i = 0;
    for (; i < help.n; i++) {
        char c = help.p[i] == '\n' ? ' ' : help.p[i];
        if (c == ' ' && (n == 0 || dst[n - 1] == ' '))
            continue;
        if (n + 1 >= size)
            break; /* more text than room */
        dst[n++] = c;
    }
    while (n > 0 && dst[n - 1] == ' ')
        n--;
    dst[n] = '\0';
    if (i == help.n)
        return;
    size_t keep = n < size - 5 ? n : size - 5;
    while (keep > 0 && dst[keep] != ' ')
        keep--;
    memcpy(dst + keep, " ...", 5);
}

/* "f16|f32|none" -> "f16 f32 none"; "" when an alternative is not a plain lowercase value
 * ("NAME|FLOPS,BPS" is a description, not a list). */
static void choices_from_metavar(const char *metavar, char *out, size_t size)
{
    out[0] = '\0';
    if (!strchr(metavar, '|') || strlen(metavar) >= size)
        return;
    bool word_start = true;
    for (const char *c = metavar; *c; c++) {
        bool bad = *c == '|' ? word_start || c[1] == '\0'
                             : !value_char(*c) || (word_start && (*c == '-' || *c == ':'));
        if (bad)
            return;
        word_start = *c == '|';
    }
    strcpy(out, metavar);
    for (char *c = out; *c; c++)
        if (*c == '|')
            *c = ' ';
}

/* Add an option, or fill what an earlier mention of the same name left empty. full_help is kept
 * as a pointer (static data of the command table). */
static lp_status add_option(lp_doc_command *c, span name, span metavar, span help,
                            const char *full_help, lp_error *err)
{
    lp_doc_option *o = NULL;
    for (int i = 0; i < c->n_options && !o; i++)
        if (strlen(c->options[i].name) == name.n && memcmp(c->options[i].name, name.p, name.n) == 0)
            o = &c->options[i];
    if (!o) {
        if (c->n_options >= LP_DOC_MAX_OPTIONS)
            return lp_error_set(err, LP_ERR_RANGE, "loupe %s: more than %d options to document",
                                c->spec->name, LP_DOC_MAX_OPTIONS);
        o = &c->options[c->n_options++];
        memset(o, 0, sizeof *o);
        lp_status st = copy_span(o->name, sizeof o->name, name, c->spec, "option name", err);
        if (st)
            return st;
    }
    if (!o->metavar[0] && metavar.n) {
        lp_status st = copy_span(o->metavar, sizeof o->metavar, metavar, c->spec, "metavar", err);
        if (st)
            return st;
        choices_from_metavar(o->metavar, o->choices, sizeof o->choices);
    }
    if (!o->help[0] && help.n)
        copy_one_line(o->help, sizeof o->help, help);
    if (!o->full_help)
        o->full_help = full_help;
    return LP_OK;
}

static span span_of(const char *s) { return (span){s ? s : "", s ? strlen(s) : 0}; }

/* ---- from an option table -------------------------------------------------------------------- */

static lp_status collect_table(lp_doc_command *c, const lp_option *table, size_t n_rows,
                               lp_error *err)
{
    n_rows = lp_cli_table_rows(table, n_rows);
    for (const lp_option *o = table; o < table + n_rows; o++) {
        if (o->kind == LP_OPT_TABLE) {
            lp_status st = collect_table(c, o->table, o->n_table, err);
            if (st)
                return st;
            continue;
        }
        if (!span_is_name(span_of(o->name)))
            return lp_error_set(err, LP_ERR_RANGE, "loupe %s: option name '%s' is not [a-z0-9-]+",
                                c->spec->name, o->name);
        char metavar[sizeof c->options[0].metavar + 1] = "";
        if (o->kind == LP_OPT_ENUM) {
            size_t used = 0;
            for (int i = 0; o->choices[i] && used < sizeof metavar; i++)
                used += (size_t)snprintf(metavar + used, sizeof metavar - used, "%s%s",
                                         i ? "|" : "", o->choices[i]);
        } else if (o->kind != LP_OPT_FLAG) {
            snprintf(metavar, sizeof metavar, "%s", o->metavar ? o->metavar : "VALUE");
        }
        lp_status st = add_option(c, span_of(o->name), span_of(metavar), span_of(o->help),
                                  o->help ? o->help : "", err);
        if (st)
            return st;
    }
    return LP_OK;
}

/* ---- the list ---------------------------------------------------------------------------------- */

lp_status lp_doc_collect(const lp_cli_spec *spec, lp_doc_command *out, lp_error *err)
{
    out->spec = spec;
    out->n_options = 0;
    if (!span_is_name(span_of(spec->name)))
        return lp_error_set(err, LP_ERR_RANGE, "command name '%s' is not [a-z0-9-]+", spec->name);
    lp_status st = collect_table(out, spec->options, spec->n_options, err);
    if (st)
        return st;
    /* main() answers --help for every command, before the command's own parser. */
    static const char help_help[] = "show this help and exit";
    return add_option(out, span_of("help"), span_of(""), span_of(help_help), help_help, err);
}

bool lp_doc_value_is_dir(const lp_doc_option *opt) { return strstr(opt->metavar, "DIR") != NULL; }

bool lp_doc_value_is_path(const lp_doc_option *opt)
{
    static const char *const words[] = {"FILE", "DIR", "PATH", "OUT", "DB"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strstr(opt->metavar, words[i]))
            return true;
    return false;
}
