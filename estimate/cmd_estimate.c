/* `loupe estimate`: parameters, memory, KV cache, FLOPs and fit from configs alone. */
#define _POSIX_C_SOURCE 200809L
#include "estimate/estimate.h"

#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/cli/cli.h"
#include "core/mapfile.h"
#include "inspect/formats/detect.h"

#define CMD "estimate"
#define MAX_INPUTS 16

/* Options left at these values were not given. Counts are range-checked here, not by the table,
 * so that the message can name the limit; a size of 0 is refused (it would switch a gate off). */
#define COUNT_UNSET INT64_MIN
#define SIZE_UNSET UINT64_MAX
#define MAX_COUNT ((int64_t)1 << 40) /* beyond any deployment; above it byte counts overflow */

typedef struct estimate_opts {
    int64_t batch, seq, context, chunk;
    const char *weight_dtype, *kv_dtype, *hw;
    uint64_t budget, max_memory, max_kv;
    bool per_layer, rope, json, strict;
    /* deployment: the ranks, the utilization and the block size go straight to the library (0 =
     * not given, as it expects); these three are resolved first */
    lp_est_deploy_options deploy;
    int64_t max_model_len;
    uint64_t device_memory;
    const char *link;
} estimate_opts;

#define MAX_RANKS 65536

static const lp_option estimate_options[] = {
    LP_OPT_COUNT_OF(estimate_opts, batch, "batch", "B", 0, 0, "sequences (default 1)"),
    LP_OPT_COUNT_OF(estimate_opts, seq, "seq", "T", 0, 0,
                    "tokens per sequence (default: the trained context, else 4096);\n"
                    "suffixes k = 1000, Ki = 1024"),
    LP_OPT_COUNT_OF(estimate_opts, context, "context", "C", 0, 0,
                    "decode context for the per-token decode cost (default: T)"),
    LP_OPT_STRING_OF(estimate_opts, weight_dtype, "weight-dtype", "D[,D...]",
                     "f32|bf16|f16|fp8|int8|int4|q8_0|q4_k|... (default: the config's\n"
                     "torch_dtype, else bf16); the first one is used for totals, fit and gates"),
    LP_OPT_STRING_OF(estimate_opts, kv_dtype, "kv-dtype", "D",
                     "KV cache type (default: the weight dtype; f16 for quantized weights)"),
    LP_OPT_COUNT_OF(estimate_opts, chunk, "chunk", "N", 0, 0,
                    "tokens whose activations are live at once (default 2048)"),
    LP_OPT_STRING_OF(estimate_opts, hw, "hw", "NAME|local|FLOPS,BPS[,MEM]",
                     "roofline hardware: h100-sxm h100-pcie h200 a100-80gb a100-40gb\n"
                     "rtx-4090 mi300x; local (this machine, measured: f32 FMA peak and a\n"
                     "streaming read); or peak FLOP/s, bytes/s and optionally memory\n"
                     "(\"989T,3.35T\", \"989T,3.35T,80GiB\")"),
    LP_OPT_SIZE_OF(estimate_opts, budget, "budget", "SIZE",
                   "largest seq and batch fitting weights + KV + activations (24GiB)"),
    LP_OPT_SIZE_OF(estimate_opts, max_memory, "max-memory", "SIZE",
                   "exit 1 when weights + KV + activations exceed SIZE"),
    LP_OPT_SIZE_OF(estimate_opts, max_kv, "max-kv", "SIZE",
                   "exit 1 when the KV cache exceeds SIZE"),
    LP_OPT_FLAG_OF(estimate_opts, per_layer, "per-layer", "per-layer table (params, window, KV)"),
    LP_OPT_FLAG_OF(estimate_opts, rope, "rope", "per-frequency RoPE wavelength table"),
    LP_OPT_FLAG_OF(estimate_opts, json, "json",
                   "one JSON document per model; an array of them for several models"),
    LP_OPT_INT_OF(estimate_opts, deploy.tp, "tp", "N", 1, MAX_RANKS,
                  "tensor parallel ranks: column/row-split projections, vocab-parallel\n"
                  "embedding and head, kv heads split (one per rank, replicated, beyond them)"),
    LP_OPT_INT_OF(estimate_opts, deploy.pp, "pp", "N", 1, LP_EST_MAX_STAGES,
                  "pipeline stages of consecutive layers (embedding first, head last)"),
    LP_OPT_INT_OF(estimate_opts, deploy.dp, "dp", "N", 1, MAX_RANKS,
                  "data parallel replicas (default: --devices / (tp x pp), or --ep / tp)"),
    LP_OPT_INT_OF(estimate_opts, deploy.ep, "ep", "N", 1, MAX_RANKS,
                  "expert parallel ranks: whole experts spread over them; as in vLLM it\n"
                  "spans tp x dp ranks (shared experts stay split by tp)"),
    LP_OPT_INT_OF(estimate_opts, deploy.devices, "devices", "N", 1, MAX_RANKS,
                  "devices in all (alone: --tp N); must equal tp x pp x dp"),
    LP_OPT_NUMBER_OF(estimate_opts, deploy.gpu_memory_utilization, "gpu-memory-utilization", "U",
                     0.01, 1.0, "fraction of each device's memory the engine may use (default 0.9)"),
    LP_OPT_SIZE_OF(estimate_opts, device_memory, "device-memory", "SIZE",
                   "memory per device (default: the --hw preset's)"),
    LP_OPT_COUNT_OF(estimate_opts, max_model_len, "max-model-len", "L", 0, 0,
                    "tokens per sequence for the concurrency figure (default: T)"),
    LP_OPT_INT_OF(estimate_opts, deploy.block_size, "block-size", "B", 1, 1 << 20,
                  "paged-attention block in tokens: KV blocks and whole-block sequences"),
    LP_OPT_STRING_OF(estimate_opts, link, "link", "NVLink4|NVLink3|PCIe5|PCIe4|GBPS",
                     "link between devices, for the communication time (GB/s one way)"),
    LP_OPT_FLAG_OF(estimate_opts, strict, "strict",
                   "refuse a config whose model_type loupe does not know (default: count it\n"
                   "with Llama's rules and say so in a warning and in \"assumed_family\")"),
};

LP_CLI_COMMAND(estimate, run_estimate, estimate_options, 1, MAX_INPUTS,
               "exact parameters, memory, KV cache and FLOPs from a config",
               "MODEL... [options]",
    .description =
        "Exact parameter counts, weight memory, KV cache, FLOPs, roofline and memory fit from a\n"
        "config alone (no weights are read). MODEL is a YAML card, a Hugging Face config.json or\n"
        "model folder, a GGUF file (metadata only), or the name of a card in configs/\n"
        "(loupe estimate llama-3-8b). Several models print side by side.",
    .notes = "exit status: 0 ok, 1 a --max-memory/--max-kv gate was exceeded, 2 bad usage or input");

typedef struct estimate_args {
    const char *inputs[LP_CLI_MAX_POSITIONAL];
    int n_inputs;
    lp_est_options opts;
    bool json;
    int flags;
} estimate_args;

static int add_weight_dtypes(estimate_args *a, const char *value)
{
    char buf[256];
    if (strlen(value) >= sizeof buf)
        return lp_cli_usage_error(CMD, "--weight-dtype: list longer than %zu bytes",
                                  sizeof buf - 1);
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

/* A count option: COUNT_UNSET stays 0 (the library's default); others must be in 1..2^40. */
static int take_count(const char *name, int64_t value, int64_t *out)
{
    if (value == COUNT_UNSET) {
        *out = 0;
        return 0;
    }
    if (value <= 0)
        return lp_cli_usage_error(CMD, "--%s %lld: want a positive whole number", name,
                                  (long long)value);
    if (value > MAX_COUNT)
        return lp_cli_usage_error(CMD, "--%s %lld is too large (limit 2^40 = %lld)", name,
                                  (long long)value, (long long)MAX_COUNT);
    *out = value;
    return 0;
}

/* A size option: SIZE_UNSET stays off; an explicit 0 is refused. */
static int take_size(const char *name, uint64_t value, uint64_t *out)
{
    if (value == 0)
        return lp_cli_usage_error(CMD, "--%s 0: want a size such as 24GiB, 80GB or 512MiB", name);
    *out = value == SIZE_UNSET ? 0 : value;
    return 0;
}

/* The deployment options into opts->deploy (0 = not given, as the library expects). */
static int resolve_deploy(const estimate_opts *o, lp_est_options *opts)
{
    lp_est_deploy_options *d = &opts->deploy;
    *d = o->deploy;
    int rc;
    if ((rc = take_count("max-model-len", o->max_model_len, &d->max_model_len)) != 0 ||
        (rc = take_size("device-memory", o->device_memory, &d->device_memory)) != 0)
        return rc;
    if (o->link) {
        if (!lp_est_link_parse(o->link, &d->link))
            return lp_cli_usage_error(CMD, "--link '%s': want NVLink4, NVLink3, PCIe5, PCIe4 or "
                                           "GB/s one way such as 200", o->link);
        d->link_set = true;
    }
    return 0;
}

/* The parsed table values into the library's options: dtype and hardware names resolved. */
static int resolve_args(const estimate_opts *o, estimate_args *a)
{
    lp_est_options *opts = &a->opts;
    int rc;
    if ((rc = take_count("batch", o->batch, &opts->batch)) != 0 ||
        (rc = take_count("seq", o->seq, &opts->seq)) != 0 ||
        (rc = take_count("context", o->context, &opts->context)) != 0 ||
        (rc = take_count("chunk", o->chunk, &opts->prefill_chunk)) != 0)
        return rc;
    if (o->weight_dtype && (rc = add_weight_dtypes(a, o->weight_dtype)) != 0)
        return rc;
    if (o->kv_dtype) {
        if (!lp_est_dtype_parse(o->kv_dtype, &opts->kv_dtype))
            return lp_cli_usage_error(CMD, "--kv-dtype '%s': unknown type (f32, bf16, f16, fp8, "
                                           "int8, q8_0, q4_0, ...)", o->kv_dtype);
        opts->kv_dtype_set = true;
    }
    if (o->hw && strcmp(o->hw, "local") == 0) {
        lp_error err = {0};
        if (lp_est_hw_measure(0, 0, &opts->hw, &err) != LP_OK)
            return lp_cli_fail(CMD, &err);
        opts->hw_set = true;
    } else if (o->hw) {
        if (!lp_est_hw_parse(o->hw, &opts->hw))
            return lp_cli_usage_error(CMD, "--hw '%s': want a preset (h100-sxm, h100-pcie, "
                                           "h200, a100-80gb, a100-40gb, rtx-4090, mi300x) or "
                                           "FLOPS,BYTES_PER_S such as 989T,3.35T", o->hw);
        opts->hw_set = true;
    }
    if ((rc = take_size("budget", o->budget, &opts->limits.budget)) != 0 ||
        (rc = take_size("max-memory", o->max_memory, &opts->limits.max_memory)) != 0 ||
        (rc = take_size("max-kv", o->max_kv, &opts->limits.max_kv)) != 0)
        return rc;
    a->json = o->json;
    a->flags = (o->per_layer ? LP_EST_PRINT_PER_LAYER : 0) | (o->rope ? LP_EST_PRINT_ROPE : 0);
    opts->strict = o->strict;
    return resolve_deploy(o, opts);
}

static int parse_args(int argc, char **argv, estimate_args *a)
{
    memset(a, 0, sizeof *a);
    lp_est_options_init(&a->opts);
    estimate_opts o = {0};
    o.batch = o.seq = o.context = o.chunk = o.max_model_len = COUNT_UNSET;
    o.budget = o.max_memory = o.max_kv = o.device_memory = SIZE_UNSET;
    LP_CLI_PARSE_OR_RETURN(&estimate_spec, argc, argv, &o, a->inputs, &a->n_inputs);
    return resolve_args(&o, a);
}

/* What the weights beside the config say, when there are any: whether they hold a separate
 * output matrix (-1 unknown), and their stored bytes and values. Only headers are read
 * (safetensors JSON header, GGUF metadata). */
static void inspect_weights(const char *input, lp_est_options *opts)
{
    lp_file_kind kind = lp_detect_format(input);
    bool has_weights = kind == LP_FILE_GGUF;
    if (kind == LP_FILE_FOLDER) {
        char *single = lp_path_join(input, "model.safetensors");
        char *index = lp_path_join(input, "model.safetensors.index.json");
        has_weights = (single && lp_path_exists(single) == 1) ||
                      (index && lp_path_exists(index) == 1);
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

/* One JSON document, or an array of them for several models. */
static int print_json(const lp_arch *archs, const lp_est_report *reps, int n, int flags)
{
    json_t *out = n == 1 ? NULL : json_array();
    bool ok = n == 1 || out != NULL;
    for (int i = 0; i < n && ok; i++) {
        json_t *doc = lp_est_to_json(&archs[i], &reps[i], flags);
        if (!doc)
            ok = false;
        else if (n == 1)
            out = doc;
        else if (json_array_append_new(out, doc) != 0)
            ok = false;
    }
    if (!ok) {
        json_decref(out);
        out = NULL;
    }
    return lp_cli_print_json(CMD, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
}

static void print_reports(const lp_arch *archs, const lp_est_report *reps, int n, int flags)
{
    if (n == 1) {
        lp_est_print_text(stdout, &archs[0], &reps[0], flags);
        return;
    }
    const lp_arch *ap[MAX_INPUTS];
    const lp_est_report *rp[MAX_INPUTS];
    for (int i = 0; i < n; i++) {
        ap[i] = &archs[i];
        rp[i] = &reps[i];
    }
    lp_est_print_side_by_side(stdout, ap, rp, n);
    if (flags)
        for (int i = 0; i < n; i++) {
            fputc('\n', stdout);
            lp_est_print_text(stdout, &archs[i], &reps[i], flags);
        }
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
    if (rc == LP_EXIT_OK && args.json)
        rc = print_json(archs, reps, n, args.flags);
    else if (rc == LP_EXIT_OK)
        print_reports(archs, reps, n, args.flags);
    for (int i = 0; i < n && rc == LP_EXIT_OK; i++)
        if (reps[i].gate_memory_exceeded || reps[i].gate_kv_exceeded)
            rc = LP_EXIT_CHECK_FAILED;
    free(archs);
    free(reps);
    return rc;
}
