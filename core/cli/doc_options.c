/* Every command's options as one flat list for the man page and completion generators: walked
 * from the option table, or read from a legacy usage text until that command is converted. */
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

static lp_status collect_table(lp_doc_command *c, const lp_option *table, lp_error *err)
{
    for (const lp_option *o = table; o && o->kind != LP_OPT_END; o++) {
        if (o->kind == LP_OPT_TABLE) {
            lp_status st = collect_table(c, o->table, err);
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

/* ---- from a legacy usage text ---------------------------------------------------------------- */

static bool next_token(const char **p, const char *end, span *tok)
{
    while (*p < end && **p == ' ')
        (*p)++;
    const char *start = *p;
    while (*p < end && **p != ' ')
        (*p)++;
    *tok = (span){start, (size_t)(*p - start)};
    return tok->n > 0;
}

/* "[--seed" -> "--seed", "N]" -> "N", "D[,D]" stays (its brackets balance). */
static span strip_brackets(span t)
{
    while (t.n && (t.p[0] == '[' || t.p[0] == '(')) {
        t.p++;
        t.n--;
    }
    int open = 0, close = 0;
    for (size_t i = 0; i < t.n; i++) {
        open += t.p[i] == '[';
        close += t.p[i] == ']';
    }
    while (t.n && (t.p[t.n - 1] == ')' || t.p[t.n - 1] == ',' ||
                   (t.p[t.n - 1] == ']' && close > open))) {
        close -= t.p[t.n - 1] == ']';
        t.n--;
    }
    return t;
}

static bool is_long_option(span t) { return t.n > 2 && t.p[0] == '-' && t.p[1] == '-'; }

/* "--name=VALUE" -> "name" */
static span option_name(span t)
{
    span name = {t.p + 2, t.n - 2};
    const char *eq = memchr(name.p, '=', name.n);
    if (eq)
        name.n = (size_t)(eq - name.p);
    return name;
}

/* A usage line: "usage: loupe trace MODEL (--prompt TEXT | --tokens IDS) [--db FILE]". */
static lp_status scan_usage_line(lp_doc_command *c, const char *p, const char *end, lp_error *err)
{
    span tok;
    while (next_token(&p, end, &tok)) {
        span t = strip_brackets(tok);
        if (!is_long_option(t) || !span_is_name(option_name(t)))
            continue;
        span metavar = {"", 0};
        char last = tok.p[tok.n - 1];
        const char *after = p;
        span next;
        if (last != ']' && last != ')' && next_token(&after, end, &next) &&
            !strchr("-|[(", next.p[0])) {
            metavar = strip_brackets(next);
            p = after;
        }
        lp_status st = add_option(c, option_name(t), metavar, (span){"", 0}, NULL, err);
        if (st)
            return st;
    }
    return LP_OK;
}

/* The help on an option line: after the label's two-space gap, up to a second option documented
 * on the same line ("--gemm-only   skip the prefill part;  --prefill-only  ..."). */
static span line_help(const char *p, const char *end)
{
    while (p < end && *p == ' ')
        p++;
    const char *stop = p;
    while (stop < end && !(stop + 3 < end && memcmp(stop, "  --", 4) == 0))
        stop++;
    while (stop > p && stop[-1] == ' ')
        stop--;
    return (span){p, (size_t)(stop - p)};
}

/* An option line: "  --db FILE            database ..." or "  --layer L --head H   ...". The
 * label ends at two spaces; a lone word after an option's metavar starts the help. */
static lp_status scan_option_line(lp_doc_command *c, const char *p, const char *end, lp_error *err)
{
    while (p < end && *p == ' ')
        p++;
    if (end - p > 4 && p[0] == '-' && p[1] != '-' && p[2] == ',' && p[3] == ' ')
        p += 4; /* "-o, --output OUT": the long form */
    if (end - p < 3 || memcmp(p, "--", 2) != 0)
        return LP_OK;
    const char *label_end = p;
    while (label_end < end && !(label_end + 1 < end && label_end[0] == ' ' && label_end[1] == ' '))
        label_end++;
    span names[8], metavars[8];
    int n = 0;
    const char *help_start = label_end;
    span tok;
    for (const char *q = p; next_token(&q, label_end, &tok);) {
        if (is_long_option(tok) && n < 8 && span_is_name(option_name(strip_brackets(tok)))) {
            names[n] = option_name(strip_brackets(tok));
            metavars[n++] = (span){"", 0};
        } else if (n > 0 && metavars[n - 1].n == 0 && !is_long_option(tok)) {
            metavars[n - 1] = tok;
        } else {
            help_start = tok.p;
            break;
        }
    }
    span help = line_help(help_start, end);
    for (int i = 0; i < n; i++) {
        lp_status st = add_option(c, names[i], metavars[i], help, NULL, err);
        if (st)
            return st;
    }
    return LP_OK;
}

/* The usage lines run up to the first blank line; the option lines follow. */
static lp_status collect_legacy(lp_doc_command *c, const char *usage, lp_error *err)
{
    bool in_usage = true;
    for (const char *line = usage; *line;) {
        const char *end = strchr(line, '\n');
        if (!end)
            end = line + strlen(line);
        lp_status st = LP_OK;
        if (end == line)
            in_usage = false;
        else if (in_usage)
            st = scan_usage_line(c, line, end, err);
        else
            st = scan_option_line(c, line, end, err);
        if (st)
            return st;
        line = *end ? end + 1 : end;
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
    lp_status st = spec->legacy_usage ? collect_legacy(out, spec->legacy_usage, err)
                                      : collect_table(out, spec->options, err);
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
