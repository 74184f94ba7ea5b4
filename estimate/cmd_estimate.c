/* `loupe estimate`: parameters, memory, KV cache, FLOPs and fit from configs alone. */
#define _POSIX_C_SOURCE 200809L
#include "estimate/estimate.h"

#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/cli/cli.h"
#include "core/mapfile.h"

#define CMD "estimate"
#define MAX_INPUTS 16

static const char usage[] =
    "usage: loupe estimate MODEL... [options]\n"
    "\n"
    "Exact parameter counts, weight memory, KV cache, FLOPs, roofline and memory fit from a\n"
    "config alone (no weights are read). MODEL is a YAML card, a Hugging Face config.json or\n"
    "model folder, a GGUF file (metadata only), or the name of a card in configs/\n"
    "(loupe estimate llama-3-8b). Several models print side by side.\n"
    "\n"
    "options:\n"
    "  --batch B             sequences (default 1)\n"
    "  --seq T               tokens per sequence (default: the trained context, else 4096);\n"
    "                        suffixes k = 1000, Ki = 1024\n"
    "  --context C           decode context for the per-token decode cost (default: T)\n"
    "  --weight-dtype D[,D]  f32|bf16|f16|fp8|int8|int4|q8_0|q4_k|... (repeatable; default:\n"
    "                        the config's torch_dtype, else bf16); the first one is used for\n"
    "                        totals, fit and gates\n"
    "  --kv-dtype D          KV cache type (default: the weight dtype; f16 for quantized weights)\n"
    "  --chunk N             tokens whose activations are live at once (default 2048)\n"
    "  --hw NAME|FLOPS,BPS   roofline hardware: h100-sxm h100-pcie h200 a100-80gb a100-40gb\n"
    "                        rtx-4090 mi300x, or peak FLOP/s and bytes/s (\"989T,3.35T\")\n"
    "  --budget SIZE         largest seq and batch fitting weights + KV + activations (24GiB)\n"
    "  --max-memory SIZE     exit 1 when weights + KV + activations exceed SIZE\n"
    "  --max-kv SIZE         exit 1 when the KV cache exceeds SIZE\n"
    "  --per-layer           per-layer table (params, window, KV)\n"
    "  --rope                per-frequency RoPE wavelength table\n"
    "  --json                one JSON document per model; an array of them for several models\n"
    "\n"
    "exit status: 0 ok, 1 a --max-memory/--max-kv gate was exceeded, 2 bad usage or input\n";

typedef struct estimate_args {
    const char *inputs[MAX_INPUTS];
    int n_inputs;
    lp_est_options opts;
    bool json;
    int flags;
} estimate_args;

static int parse_positive(const char *name, const char *value, int64_t *out)
{
    int64_t v;
    if (!lp_parse_count(value, &v) || v <= 0)
        return lp_cli_usage_error(CMD, "%s '%s': want a positive whole number", name, value);
    /* 2^40 tokens or sequences is far beyond any real deployment; above it byte counts overflow */
    if (v > ((int64_t)1 << 40))
        return lp_cli_usage_error(CMD, "%s %s is too large (limit 2^40 = 1099511627776)", name,
                                  value);
    *out = v;
    return 0;
}

static int parse_size(const char *name, const char *value, uint64_t *out)
{
    if (!lp_parse_size(value, out) || *out == 0)
        return lp_cli_usage_error(CMD, "%s '%s': want a size such as 24GiB, 80GB or 512MiB", name,
                                  value);
    return 0;
}

static int add_weight_dtypes(estimate_args *a, const char *value)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", value);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (a->opts.n_weight_dtypes >= LP_EST_MAX_DTYPES)
            return lp_cli_usage_error(CMD, "--weight-dtype: at most %d types", LP_EST_MAX_DTYPES);
        if (!lp_est_dtype_parse(tok, &a->opts.weight_dtypes[a->opts.n_weight_dtypes]))
            return lp_cli_usage_error(CMD,
                                      "--weight-dtype '%s': unknown type (f32, bf16, f16, fp8, "
                                      "int8, int4, q8_0, q4_0, q4_k, q6_k, ...)",
                                      tok);
        a->opts.n_weight_dtypes++;
    }
    if (a->opts.n_weight_dtypes == 0)
        return lp_cli_usage_error(CMD, "--weight-dtype '%s': no type given", value);
    return 0;
}

static int parse_args(int argc, char **argv, estimate_args *a)
{
    memset(a, 0, sizeof *a);
    lp_est_options_init(&a->opts);
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r, rc = 0;
        const char *arg = argv[i];
        if (lp_cli_flag(arg, "--json")) {
            a->json = true;
        } else if (lp_cli_flag(arg, "--per-layer")) {
            a->flags |= LP_EST_PRINT_PER_LAYER;
        } else if (lp_cli_flag(arg, "--rope")) {
            a->flags |= LP_EST_PRINT_ROPE;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--batch", &v)) != 0) {
            rc = r < 0 ? LP_EXIT_USAGE : parse_positive("--batch", v, &a->opts.batch);
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--seq", &v)) != 0) {
            rc = r < 0 ? LP_EXIT_USAGE : parse_positive("--seq", v, &a->opts.seq);
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--context", &v)) != 0) {
            rc = r < 0 ? LP_EXIT_USAGE : parse_positive("--context", v, &a->opts.context);
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--chunk", &v)) != 0) {
            rc = r < 0 ? LP_EXIT_USAGE : parse_positive("--chunk", v, &a->opts.prefill_chunk);
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--weight-dtype", &v)) != 0) {
            rc = r < 0 ? LP_EXIT_USAGE : add_weight_dtypes(a, v);
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--kv-dtype", &v)) != 0) {
            if (r < 0)
                rc = LP_EXIT_USAGE;
            else if (!lp_est_dtype_parse(v, &a->opts.kv_dtype))
                rc = lp_cli_usage_error(CMD, "--kv-dtype '%s': unknown type (f32, bf16, f16, "
                                             "fp8, int8, q8_0, q4_0, ...)", v);
            else
                a->opts.kv_dtype_set = true;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--hw", &v)) != 0) {
            if (r < 0)
                rc = LP_EXIT_USAGE;
            else if (!lp_est_hw_parse(v, &a->opts.hw))
                rc = lp_cli_usage_error(CMD, "--hw '%s': want a preset (h100-sxm, h100-pcie, "
                                             "h200, a100-80gb, a100-40gb, rtx-4090, mi300x) or "
                                             "FLOPS,BYTES_PER_S such as 989T,3.35T", v);
            else
                a->opts.hw_set = true;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--budget", &v)) != 0) {
            rc = r < 0 ? LP_EXIT_USAGE : parse_size("--budget", v, &a->opts.budget);
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--max-memory", &v)) != 0) {
            rc = r < 0 ? LP_EXIT_USAGE : parse_size("--max-memory", v, &a->opts.max_memory);
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--max-kv", &v)) != 0) {
            rc = r < 0 ? LP_EXIT_USAGE : parse_size("--max-kv", v, &a->opts.max_kv);
        } else if (arg[0] == '-' && arg[1] != '\0') {
            rc = lp_cli_usage_error(CMD, "unknown option '%s' (see loupe help estimate)", arg);
        } else {
            if (a->n_inputs >= MAX_INPUTS)
                rc = lp_cli_usage_error(CMD, "at most %d models at once", MAX_INPUTS);
            else
                a->inputs[a->n_inputs++] = arg;
        }
        if (rc != 0)
            return rc;
    }
    if (a->n_inputs == 0)
        return lp_cli_usage_error(CMD, "no model given (a card name, config.json, folder, .yaml "
                                       "or .gguf; see loupe help estimate)");
    return 0;
}

/* What the weights beside the config say, when there are any: whether they hold a separate
 * output matrix (-1 unknown), and their stored bytes and values. Only headers are read
 * (safetensors JSON header, GGUF metadata). */
static void inspect_weights(const char *input, lp_est_options *opts)
{
    bool has_weights = lp_ends_with(input, ".gguf");
    if (!has_weights && lp_path_is_dir(input) == 1) {
        char *single = lp_path_join(input, "model.safetensors");
        char *index = lp_path_join(input, "model.safetensors.index.json");
        has_weights = (single && lp_path_exists(single) == 1) || (index && lp_path_exists(index) == 1);
        free(single);
        free(index);
    }
    if (!has_weights)
        return;
    lp_weights *w = NULL;
    lp_error err = {0};
    if (lp_weights_open(input, &w, &err) != LP_OK)
        return; /* the config reader reports real problems; this is only an audit */
    opts->lm_head_tensor_present = lp_weights_find(w, LP_ROLE_LM_HEAD, -1, -1, false) != NULL;
    uint64_t bytes = 0;
    int64_t values = 0;
    bool ok = true;
    for (size_t i = 0; i < lp_weights_count(w) && ok; i++) {
        const lp_tensor *t = lp_weights_tensor(w, i);
        ok = lp_add_u64(bytes, t->n_bytes, &bytes) && lp_add_i64(values, t->n_elements, &values);
    }
    if (ok) {
        opts->stored_weight_bytes = bytes;
        opts->stored_params = values;
    }
    lp_weights_close(w);
}

static int run_estimate(int argc, char **argv)
{
    estimate_args args;
    int rc = parse_args(argc, argv, &args);
    if (rc != 0)
        return rc;
    int n = args.n_inputs;
    lp_arch *archs = calloc((size_t)n, sizeof *archs);
    lp_est_report *reps = calloc((size_t)n, sizeof *reps);
    if (!archs || !reps) {
        free(archs);
        free(reps);
        fprintf(stderr, "loupe %s: out of memory for %d reports\n", CMD, n);
        return LP_EXIT_USAGE;
    }
    lp_error err = {0};
    rc = LP_EXIT_OK;
    /* everything is computed before anything is printed: no half results */
    for (int i = 0; i < n && rc == LP_EXIT_OK; i++) {
        if (lp_arch_load(args.inputs[i], &archs[i], &err) != LP_OK) {
            rc = lp_cli_fail(CMD, &err);
            break;
        }
        lp_est_options opts = args.opts;
        inspect_weights(args.inputs[i], &opts);
        if (lp_estimate(&archs[i], &opts, &reps[i], &err) != LP_OK)
            rc = lp_cli_fail(CMD, &err);
    }
    if (rc == LP_EXIT_OK && args.json) {
        json_t *out = n == 1 ? NULL : json_array();
        bool ok = n == 1 || out != NULL;
        for (int i = 0; i < n && ok; i++) {
            json_t *doc = lp_est_to_json(&archs[i], &reps[i], args.flags);
            if (!doc)
                ok = false;
            else if (n == 1)
                out = doc;
            else if (json_array_append_new(out, doc) != 0)
                ok = false;
        }
        char *text = ok ? json_dumps(out, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        json_decref(out);
        if (!text) {
            fprintf(stderr, "loupe %s: out of memory while writing JSON\n", CMD);
            rc = LP_EXIT_USAGE;
        } else {
            fputs(text, stdout);
            fputc('\n', stdout);
            free(text);
        }
    } else if (rc == LP_EXIT_OK && n == 1) {
        lp_est_print_text(stdout, &archs[0], &reps[0], args.flags);
    } else if (rc == LP_EXIT_OK) {
        const lp_arch *ap[MAX_INPUTS];
        const lp_est_report *rp[MAX_INPUTS];
        for (int i = 0; i < n; i++) {
            ap[i] = &archs[i];
            rp[i] = &reps[i];
        }
        lp_est_print_side_by_side(stdout, ap, rp, n);
        if (args.flags)
            for (int i = 0; i < n; i++) {
                fputc('\n', stdout);
                lp_est_print_text(stdout, &archs[i], &reps[i], args.flags);
            }
    }
    if (rc == LP_EXIT_OK)
        for (int i = 0; i < n; i++)
            if (reps[i].gate_memory_exceeded || reps[i].gate_kv_exceeded)
                rc = LP_EXIT_CHECK_FAILED;
    free(archs);
    free(reps);
    return rc;
}

static const lp_cli_spec estimate_spec = {
    .name = "estimate",
    .summary = "exact parameters, memory, KV cache and FLOPs from a config",
    .legacy_usage = usage,
};

const lp_command lp_command_estimate = {&estimate_spec, run_estimate};
