/* `loupe inspect PATH`: parse options, open the model or config, print the report. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/cli/cli.h"
#include "core/mapfile.h"
#include "inspect/arch/arch_json.h"
#include "inspect/inspect.h"
#include "inspect/weights/report_internal.h"

typedef struct inspect_opts {
    bool stats;
    bool json;
    bool strict;
} inspect_opts;

static const lp_option inspect_options[] = {
    LP_OPT_FLAG_OF(inspect_opts, stats, "stats",
                   "per-tensor min, max, mean, std, absmax and NaN/Inf counts over the\n"
                   "(dequantized) values; reads every tensor"),
    LP_OPT_FLAG_OF(inspect_opts, json, "json",
                   "one JSON document: format, architecture, params.total, tensors[], checks[]"),
    LP_OPT_FLAG_OF(inspect_opts, strict, "strict",
                   "also check that loupe reads every top-level key of config.json: the\n"
                   "check config_keys lists the keys it does not (and fails)"),
};

LP_CLI_COMMAND(inspect, run_inspect, inspect_options, 1, 1,
               "read a model's config and weights: architecture, tensors, checks",
               "PATH [--stats] [--json] [--strict]",
    .description =
        "Read a model's description and weights without running it.\n"
        "\n"
        "PATH is a model folder (config.json + model.safetensors or model.safetensors.index.json,\n"
        "or one .gguf / llama2.c .bin), a .safetensors, .safetensors.index.json, .gguf or .bin\n"
        "file, or a config file (config.json, *.yaml card): then only the architecture.",
    .notes =
        "Checks: every tensor the architecture expects is present with the expected shape, no\n"
        "unexpected tensors, tied embeddings consistent with the config (with --stats: all values\n"
        "finite). Exit status: 0 all checks pass, 1 a check failed, 2 unreadable or invalid input.");

/* ---- text output ---------------------------------------------------------------------------- */

static int64_t jint(json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

static void print_arch(const lp_arch *a)
{
    printf("architecture  %s%s%s\n", a->family, a->name[0] ? "  " : "", a->name);
    printf("  vocab %" PRId64 ", hidden %" PRId64 ", layers %" PRId64 ", heads %" PRId64
           " (kv %" PRId64 ", head_dim %" PRId64 ")\n",
           a->vocab_size, a->hidden_size, a->n_layers, a->n_heads, a->n_kv_heads, a->head_dim);
    printf("  ffn %s %s, width %" PRId64, lp_ffn_kind_name(a->ffn_kind),
           lp_activation_name(a->act), a->ffn_hidden);
    if (a->n_experts > 0)
        printf("; %" PRId64 " experts (top %" PRId64 ") of width %" PRId64, a->n_experts,
               a->n_experts_per_tok, a->expert_ffn_hidden);
    printf("\n  norm %s eps %g; positions %s", lp_norm_kind_name(a->norm_kind), a->norm_eps,
           lp_pos_kind_name(a->pos_kind));
    if (a->pos_kind == LP_POS_ROPE)
        printf(" (theta %g, %" PRId64 " dims, %s pairs)", a->rope_theta, a->rope_dim,
               a->rope_layout == LP_ROPE_ADJACENT ? "adjacent" : "halves");
    printf("; context %" PRId64 "; embeddings %s\n", a->n_ctx,
           a->tied_embeddings ? "tied" : "untied");
}

static void format_role(char *buf, size_t size, const lp_tensor *t)
{
    int n = snprintf(buf, size, "%s", lp_role_name(t->role));
    if (t->layer >= 0 && n >= 0 && (size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, " L%d", t->layer);
    if (t->expert >= 0 && n >= 0 && (size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, " E%d", t->expert);
    if (t->is_bias && n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, " bias");
}

static void print_totals(const char *title, json_t *by)
{
    printf("\n%s\n", title);
    const char *key;
    json_t *v;
    char p[32], b[32];
    json_object_foreach(by, key, v)
    {
        printf("  %-22s %6" PRId64 " tensors %16s params %12s\n", key, jint(v, "tensors"),
               lp_format_int(jint(v, "params"), p, sizeof p),
               lp_format_bytes((uint64_t)jint(v, "bytes"), b, sizeof b));
    }
}

/* The name column: the longest name, at least 4 and at most 60 wide. */
static int name_width(const lp_weights *w)
{
    size_t width = 4;
    for (size_t i = 0; i < lp_weights_count(w); i++) {
        size_t len = strlen(lp_weights_tensor(w, i)->name);
        width = len > width ? len : width;
    }
    return width > 60 ? 60 : (int)width;
}

static void print_stats(const lp_tensor_stats *s)
{
    if (s->n_finite > 0) {
        double absmax = fabs(s->min) > fabs(s->max) ? fabs(s->min) : fabs(s->max);
        double values[5] = {s->min, s->max, s->mean, sqrt(s->m2 / (double)s->n_finite), absmax};
        for (int k = 0; k < 5; k++)
            printf(" %11.4g", values[k]);
    } else {
        for (int k = 0; k < 5; k++)
            printf(" %11s", "-");
    }
    printf(" %6" PRId64 " %6" PRId64, s->n_nan, s->n_inf);
}

/* The table straight from the catalogue and the stats array (NULL without --stats). */
static void print_tensors(const lp_weights *w, const lp_tensor_stats *stats)
{
    int name_w = name_width(w);
    printf("\ntensors (%zu)\n", lp_weights_count(w));
    printf("  %-*s  %-22s %-8s %-20s %12s %12s", name_w, "name", "role", "dtype", "shape",
           "params", "bytes");
    if (stats)
        printf(" %11s %11s %11s %11s %11s %6s %6s", "min", "max", "mean", "std", "absmax", "nan",
               "inf");
    printf("\n");
    for (size_t i = 0; i < lp_weights_count(w); i++) {
        const lp_tensor *t = lp_weights_tensor(w, i);
        char role[64], shape[96], p[32];
        lp_format_shape(shape, sizeof shape, t->shape, t->n_dims);
        if (t->transposed) /* GPT-2 Conv1D */
            strncat(shape, " in,out", sizeof shape - strlen(shape) - 1);
        format_role(role, sizeof role, t);
        printf("  %-*s  %-22s %-8s %-20s %12s %12" PRId64, name_w, t->name, role,
               lp_dtype_name(t->dtype), shape, lp_format_int(t->n_elements, p, sizeof p),
               (int64_t)t->n_bytes);
        if (stats)
            print_stats(&stats[i]);
        printf("\n");
    }
}

/* One line a check: PASS or FAIL, its name and what it found. */
static void print_checks(json_t *checks)
{
    for (size_t i = 0; i < json_array_size(checks); i++) {
        json_t *c = json_array_get(checks, i);
        printf("  %s  %-20s %s\n", json_is_true(json_object_get(c, "passed")) ? "PASS" : "FAIL",
               json_string_value(json_object_get(c, "name")),
               json_string_value(json_object_get(c, "detail")));
    }
}

/* Totals, tied embeddings and the checks, from the report. */
static void print_summary(json_t *r)
{
    json_t *params = json_object_get(r, "params");
    print_totals("totals by dtype", json_object_get(params, "by_dtype"));
    print_totals("totals by role", json_object_get(params, "by_role"));
    char p[32], b[32];
    printf("\nparams.total  %s (%s)\n", lp_format_int(jint(params, "total"), p, sizeof p),
           lp_format_bytes((uint64_t)jint(params, "bytes"), b, sizeof b));
    json_t *tied = json_object_get(r, "tied_embeddings");
    printf("tied          %s: %s\n", json_is_true(json_object_get(tied, "tied")) ? "yes" : "no",
           json_string_value(json_object_get(tied, "detail")));
    json_t *checks = json_object_get(r, "checks");
    printf("\nchecks\n");
    if (json_array_size(checks) == 0)
        printf("  (none: no architecture description to check against)\n");
    print_checks(checks);
}

/* A GGUF without a usable description: its key/values, one a line, long values cut. */
static void print_metadata(json_t *meta)
{
    const char *key;
    json_t *v;
    printf("\nmetadata      %zu keys\n", json_object_size(meta));
    json_object_foreach (meta, key, v) {
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(9));
        size_t len = text ? strlen(text) : 0;
        printf("  %-40s %.*s%s\n", key, len > 96 ? 96 : (int)len, text ? text : "?",
               len > 96 ? "..." : "");
        free(text);
    }
    printf("\n");
}

static void print_text(json_t *r, const lp_weights *w, const lp_tensor_stats *stats)
{
    size_t n_files = json_array_size(json_object_get(r, "files"));
    printf("path          %s\n", json_string_value(json_object_get(r, "path")));
    printf("format        %s (%zu file%s)\n", json_string_value(json_object_get(r, "format")),
           n_files, n_files == 1 ? "" : "s");
    const lp_arch *arch = lp_weights_arch(w);
    const char *note = lp_weights_arch_note(w);
    if (arch)
        print_arch(arch);
    else
        printf("architecture  none found%s%s\n", note[0] ? ": " : "", note);
    json_t *meta = json_object_get(r, "metadata");
    if (meta)
        print_metadata(meta);
    print_tensors(w, stats);
    print_summary(r);
}

/* ---- the command ---------------------------------------------------------------------------- */

/* A description without weights (config.json, a card), by lp_detect_format. */
static bool is_config_path(const char *path)
{
    lp_file_kind kind = lp_detect_format(path);
    return kind == LP_FILE_CONFIG_JSON || kind == LP_FILE_TOKENIZER_JSON ||
           kind == LP_FILE_YAML_CARD;
}

/* --json of a description without weights: the members a weights report has, empty. */
static int print_config_json(const char *path, const lp_arch *arch, json_t *checks)
{
    json_t *r = json_object();
    json_t *params = json_object();
    if (r && params) {
        json_object_set_new(r, "path", json_string(path));
        json_object_set_new(r, "format", json_string("config"));
        json_object_set_new(r, "architecture", lp_arch_to_json(arch));
        json_object_set_new(params, "total", json_integer(0));
        json_object_set_new(r, "params", params);
        json_object_set_new(r, "tensors", json_array());
        json_object_set(r, "checks", checks);
    } else {
        json_decref(params);
    }
    return lp_cli_print_json("inspect", r, JSON_INDENT(2));
}

static bool any_failed(json_t *checks)
{
    for (size_t i = 0; i < json_array_size(checks); i++)
        if (!json_is_true(json_object_get(json_array_get(checks, i), "passed")))
            return true;
    return false;
}

/* --strict on a description without weights: config_keys for a config.json (a folder's, or the
 * file itself); YAML cards already refuse unknown keys. */
static lp_status config_checks(const char *path, bool strict, json_t *checks, lp_error *err)
{
    if (!strict)
        return LP_OK;
    char *config = lp_path_is_dir(path) ? lp_path_join(path, "config.json") : strdup(path);
    if (!config)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    lp_status st = LP_OK;
    if (lp_detect_format(config) == LP_FILE_CONFIG_JSON)
        st = lp_inspect_config_keys_check(config, checks, err);
    free(config);
    return st;
}

/* A config file (or a folder with config.json and no weights): the architecture alone. */
static int inspect_config(const char *path, bool json, bool strict)
{
    lp_arch *arch = malloc(sizeof *arch);
    json_t *checks = json_array();
    lp_error err = {0};
    if (!arch || !checks) {
        free(arch);
        json_decref(checks);
        lp_error_set(&err, LP_ERR_NOMEM, "out of memory");
        return lp_cli_fail("inspect", &err);
    }
    int rc = LP_EXIT_OK;
    if (lp_arch_load(path, arch, &err) != LP_OK ||
        config_checks(path, strict, checks, &err) != LP_OK) {
        rc = lp_cli_fail("inspect", &err);
    } else if (json) {
        rc = print_config_json(path, arch, checks);
    } else {
        printf("path          %s\nformat        config (no weights)\n", path);
        print_arch(arch);
        if (json_array_size(checks))
            printf("\nchecks\n");
        print_checks(checks);
    }
    if (rc == LP_EXIT_OK && any_failed(checks))
        rc = LP_EXIT_CHECK_FAILED;
    json_decref(checks);
    free(arch);
    return rc;
}

static int run_inspect(int argc, char **argv)
{
    inspect_opts o = {0};
    const char *pos[LP_CLI_MAX_POSITIONAL];
    LP_CLI_PARSE_OR_RETURN(&inspect_spec, argc, argv, &o, pos, NULL);
    const char *path = pos[0];
    bool stats = o.stats, json = o.json;
    if (is_config_path(path))
        return inspect_config(path, json, o.strict);
    lp_weights *w;
    lp_error err = {0};
    lp_status status = lp_weights_open(path, &w, &err);
    if (status == LP_ERR_NOT_FOUND && lp_path_is_dir(path)) {
        char *config = lp_path_join(path, "config.json");
        bool has_config = config && lp_path_exists(config);
        free(config);
        if (has_config)
            return inspect_config(path, json, o.strict);
    }
    if (status != LP_OK)
        return lp_cli_fail("inspect", &err);
    json_t *report = NULL;
    lp_tensor_stats *all_stats = NULL;
    if ((status = lp_inspect_build_report(w, stats, false, &report, &all_stats, &err)) != LP_OK ||
        (o.strict && lp_weights_config_path(w) &&
         (status = lp_inspect_config_keys_check(lp_weights_config_path(w),
                                                json_object_get(report, "checks"), &err)) !=
             LP_OK)) {
        json_decref(report);
        free(all_stats);
        lp_weights_close(w);
        return lp_cli_fail("inspect", &err);
    }
    bool failed = any_failed(json_object_get(report, "checks"));
    if (json)
        status = lp_inspect_write_report_json(stdout, report, w, all_stats, &err);
    else
        print_text(report, w, all_stats);
    json_decref(report);
    free(all_stats);
    lp_weights_close(w);
    if (status != LP_OK)
        return lp_cli_fail("inspect", &err);
    return failed ? LP_EXIT_CHECK_FAILED : LP_EXIT_OK;
}
