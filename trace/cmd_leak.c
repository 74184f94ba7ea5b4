/* `loupe leak`: prove that no position sees the future, in a model's forward pass or in a mask
 * tensor; exit 0 when clean, 1 when a check failed, 2 on bad input (a CI gate). */
#define _POSIX_C_SOURCE 200809L
#include "trace/leak/leak.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cli/cli.h"
#include "core/cli/input.h"
#include "core/mapfile.h"
#include "inspect/tokenizer/tokenizer.h"
#include "trace/store/store.h"

#define CMD "leak"

/* The built-in prompt: plain story text any small English model has seen the like of. */
static const char default_prompt[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
    "with her friends. One day, she saw a big red ball under a tree.";

typedef struct leak_opts {
    lp_input_opts input;
    const char *db, *mask, *kind, *tensor, *padding, *inject;
    bool json;
    int true_means; /* index in true_means_names: 1 = masked */
    int format;     /* index in format_names, -1 = from the dtype */
    double masked_below;
    int64_t window, cuts, seed, threads, max_listed;
    int maps; /* lp_maps_dtype */
} leak_opts;

static const char *const true_means_names[] = {"attend", "masked", NULL};
static const char *const format_names[] = {"bool", "additive", NULL};
static const char *const maps_names[] = {"f16", "f32", "none", NULL};

static const lp_option leak_options[] = {
    LP_OPT_TABLE_OF(leak_opts, input, lp_input_options),
    LP_OPT_STRING_OF(leak_opts, inject, "inject", "FAULT",
                     "model: build a broken mask (off-by-one, transposed, no-mask, window+1,\n"
                     "pad-axis) or KV cache (cache-off-by-one, rope-stale, mask-top-left)\n"
                     "to prove the checks catch it"),
    LP_OPT_INT_OF(leak_opts, window, "window", "W", 1, (double)(INT64_MAX / 4),
                  "model: force a sliding window of W keys (itself included) on every layer"),
    LP_OPT_INT_OF(leak_opts, cuts, "cuts", "N", 0, 1000,
                  "model: random cut points besides first, middle and last (default 2)"),
    LP_OPT_INT_OF(leak_opts, seed, "seed", "S", 0, (double)INT64_MAX,
                  "model: seed of the random cuts and replacement tokens (default 1)"),
    LP_OPT_INT_OF(leak_opts, threads, "threads", "N", 1, LP_CLI_MAX_THREADS,
                  "model: worker threads (default 1); results are bitwise repeatable per N"),
    LP_OPT_ENUM_OF(leak_opts, maps, "maps", maps_names,
                   "model, with --db: the unperturbed pass's attention maps, head statistics\n"
                   "and predictions are recorded as by loupe trace (default f16)"),
    LP_OPT_STRING_OF(leak_opts, mask, "mask", "FILE",
                     "the mask (.npy or .safetensors; [T,T], [B,1,T,T] or [B,H,T,T]): bool and\n"
                     "integer dtypes are boolean (true = may attend), float dtypes additive\n"
                     "(0 = attend, <= -1000 = masked)"),
    LP_OPT_STRING_OF(leak_opts, kind, "kind", "DEF",
                     "mask: causal (default), window:W (W keys including itself) or\n"
                     "doc:IDS_FILE (causal within each document): one id per position,\n"
                     ".npy [T] or [B, T] or text with one line per batch item"),
    LP_OPT_ENUM_OF(leak_opts, true_means, "true-means", true_means_names,
                   "mask: boolean polarity (default attend)"),
    LP_OPT_ENUM_OF(leak_opts, format, "format", format_names, "mask: override the dtype's encoding"),
    LP_OPT_NUMBER_OF(leak_opts, masked_below, "masked-below", "V", 0, 0,
                     "mask, additive: values <= V are masked (default -1000)"),
    LP_OPT_STRING_OF(leak_opts, tensor, "tensor", "NAME",
                     "mask: the tensor of a .safetensors file holding several"),
    LP_OPT_STRING_OF(leak_opts, padding, "padding", "FILE",
                     "mask: the padding (attention_mask): .npy [T] or [B, T], or text with one\n"
                     "line of 0/1 per batch item (1 = real token); padding keys are then\n"
                     "forbidden and padding query rows not compared"),
    LP_OPT_FLAG_OF(leak_opts, json, "json", "machine-readable report on stdout"),
    LP_OPT_STRING_OF(leak_opts, db, "db", "FILE",
                     "append a run (kind 'leak') and its leak_checks rows"),
    LP_OPT_INT_OF(leak_opts, max_listed, "max-listed", "N", 0, 1000000,
                  "coordinates listed (default 20; all are counted)"),
};

LP_CLI_COMMAND(leak, run_leak, leak_options, 0, 1,
               "prove that no position sees the future",
               "(MODEL [--prompt TEXT | --prompt-file FILE | --tokens IDS] | --mask FILE "
               "[--kind DEF]) [options]",
    .description =
        "Prove that no position sees the future.\n"
        "\n"
        "On a model (a real forward pass on the CPU; MODEL is a model folder, .safetensors,\n"
        ".gguf or llama2.c .bin; the prompt defaults to a built-in story sentence):\n"
        "  perturbation   for cut points t (first, middle, last, random) the tokens after t are\n"
        "                 replaced; hidden states of every layer and logits at positions <= t must\n"
        "                 stay identical bit for bit (MoE models: within 1e-5 relative)\n"
        "  attention_map  no probability outside the mask, rows sum to 1 within 1e-5, no NaN/Inf\n"
        "  structural     the engine's masks cell by cell against the definition (causal, window,\n"
        "                 decode alignment, left/right padding), and a padded batch through the model\n"
        "  alignment      loss with labels shifted by one versus unshifted\n"
        "  decode         a prefill of half the tokens then one at a time through the KV cache\n"
        "                 equals one prefill (hidden states and logits; f32 cache within 1e-4\n"
        "                 relative, f16 cache within 5e-2)\n"
        "\n"
        "On a mask tensor (--mask FILE): every cell against its definition (--kind).",
    .notes = "Exit status: 0 no leak, 1 a leak, blocked cells, NaN or a failed check, 2 bad input.");

/* The options of one mode given to the other. */
static int check_mode(const leak_opts *o, const char *model)
{
    if (o->mask && model)
        return lp_cli_usage_error(CMD, "give MODEL or --mask FILE, not both");
    if (!o->mask && !model)
        return lp_cli_usage_error(CMD, "missing MODEL or --mask FILE (see loupe help leak)");
    const lp_input_opts *in = &o->input;
    int n_inputs = (in->prompt != NULL) + (in->prompt_file != NULL) + (in->tokens != NULL);
    if (n_inputs > 1)
        return lp_cli_usage_error(CMD, "give at most one of --prompt, --prompt-file, --tokens "
                                       "(got %d)", n_inputs);
    if (!(o->masked_below < 0))
        return lp_cli_usage_error(CMD, "--masked-below %g: expected a negative number",
                                  o->masked_below);
    if (!o->mask && (o->padding || o->tensor || o->format >= 0 || o->true_means ||
                     strcmp(o->kind, "causal") != 0 || o->masked_below != LP_LEAK_MASKED_BELOW))
        return lp_cli_usage_error(CMD, "--kind, --padding, --tensor, --format, --true-means and "
                                       "--masked-below apply to --mask FILE, not to a MODEL");
    if (o->mask && (n_inputs > 0 || in->tokenizer || o->inject || o->window))
        return lp_cli_usage_error(CMD, "--prompt, --tokens, --tokenizer, --inject and --window "
                                       "apply to a MODEL, not to --mask");
    return LP_CLI_PARSED;
}

static int parse(int argc, char **argv, leak_opts *o, const char **model, lp_mask_fault *fault,
                 lp_kv_fault *kv_fault)
{
    *o = (leak_opts){.kind = "causal", .format = -1, .masked_below = LP_LEAK_MASKED_BELOW,
                     .cuts = 2, .seed = 1, .threads = 1, .max_listed = LP_LEAK_MAX_LISTED,
                     .maps = LP_MAPS_F16};
    const char *pos[LP_CLI_MAX_POSITIONAL];
    int n_pos = 0;
    LP_CLI_PARSE_OR_RETURN(&leak_spec, argc, argv, o, pos, &n_pos);
    *model = n_pos > 0 ? pos[0] : NULL;
    *fault = o->inject ? lp_mask_fault_from_name(o->inject) : LP_MASK_FAULT_NONE;
    *kv_fault = LP_KV_FAULT_NONE;
    if (*fault == LP_MASK_FAULT_COUNT) { /* a KV cache fault, then */
        *kv_fault = lp_kv_fault_from_name(o->inject);
        *fault = LP_MASK_FAULT_NONE;
    }
    if (*kv_fault == LP_KV_FAULT_COUNT ||
        (o->inject && *fault == LP_MASK_FAULT_NONE && *kv_fault == LP_KV_FAULT_NONE))
        return lp_cli_usage_error(CMD,
                                  "--inject '%s': expected off-by-one, transposed, no-mask, "
                                  "window+1, pad-axis, cache-off-by-one, rope-stale or "
                                  "mask-top-left",
                                  o->inject);
    return check_mode(o, *model);
}

static json_t *num_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* ---- mask mode: the report -------------------------------------------------------------------- */

static json_t *coords_json(const lp_leak_coord *c, int64_t n, bool with_key)
{
    json_t *list = json_array();
    for (int64_t i = 0; i < n; i++) {
        json_t *o = json_pack("{s:I, s:I, s:I}", "batch", (json_int_t)c[i].batch, "head",
                              (json_int_t)c[i].head, "query", (json_int_t)c[i].query);
        if (with_key)
            json_object_set_new(o, "key", json_integer(c[i].key));
        json_array_append_new(list, o);
    }
    return list;
}

/* Additive masks: the fill value and what it becomes in f32, f16 and bf16. */
static json_t *fill_json(const lp_leak_mask_report *rep, double masked_below)
{
    json_t *fill = json_object();
    json_object_set_new(fill, "value", rep->has_fill ? num_or_null((double)rep->fill) : json_null());
    json_object_set_new(fill, "is_neg_inf", json_boolean(rep->has_fill && isinf(rep->fill)));
    json_object_set_new(fill, "weak", json_boolean(rep->weak_fill));
    json_object_set_new(fill, "leak_gap", rep->has_fill ? num_or_null(rep->leak_gap) : json_null());
    json_object_set_new(fill, "masked_below", json_real(masked_below));
    for (int d = 0; d < 3 && rep->has_fill; d++) {
        const lp_fill_verdict *v = &rep->fills[d];
        json_t *o = json_object();
        json_object_set_new(o, "value", num_or_null((double)v->value));
        json_object_set_new(o, "is_neg_inf", json_boolean(isinf(v->value)));
        json_object_set_new(o, "overflows", json_boolean(v->overflows));
        json_object_set_new(o, "nan_rows", json_integer(v->nan_rows));
        json_object_set_new(o, "overflow_score", num_or_null(v->overflow_score));
        json_object_set_new(fill, lp_dtype_name(v->dtype), o);
    }
    return fill;
}

static int print_mask_json(const char *path, const lp_leak_mask_opts *mo,
                           const lp_leak_mask_report *rep)
{
    json_t *shape = json_array();
    for (int d = 0; d < rep->n_dims; d++)
        json_array_append_new(shape, json_integer(rep->shape[d]));
    json_t *root = json_pack(
        "{s:s, s:s, s:s, s:s, s:o, s:b, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o}", "mask",
        path, "kind", mo->def.text, "dtype", lp_dtype_name(rep->dtype), "encoding",
        lp_mask_encoding_name(rep->encoding), "shape", shape, "passed",
        (int)lp_leak_mask_passed(rep), "diagnosis", rep->diagnosis, "leak_count",
        (json_int_t)rep->leak_count, "blocked_count", (json_int_t)rep->blocked_count, "nan_rows",
        (json_int_t)rep->nan_rows, "fully_masked_rows", (json_int_t)rep->fully_masked_rows,
        "nan_cells", (json_int_t)rep->nan_cells, "padding_rows", (json_int_t)rep->padding_rows,
        "leaks", coords_json(rep->leaks, rep->n_leaks_listed, true), "blocked",
        coords_json(rep->blocked, rep->n_blocked_listed, true), "masked_rows",
        coords_json(rep->masked_rows, rep->n_masked_rows_listed, false));
    if (rep->encoding == LP_MASK_ENC_ADDITIVE)
        json_object_set_new(root, "fill", fill_json(rep, mo->masked_below));
    return lp_cli_print_json(CMD, root, JSON_INDENT(2));
}

static void print_fill_verdict(const lp_leak_mask_report *rep, const lp_fill_verdict *v)
{
    printf("    %-4s %-13g", lp_dtype_name(v->dtype), (double)v->value);
    if (v->overflows)
        printf(" overflows to -inf;");
    if (isinf(v->value))
        printf(" %lld fully masked row%s give%s NaN", (long long)v->nan_rows,
               v->nan_rows == 1 ? "" : "s", v->nan_rows == 1 ? "s" : "");
    else if (rep->fully_masked_rows > 0)
        printf(" finite: %lld fully masked row%s spread%s weight evenly over every key, "
               "future included; score + fill overflows below score %.4g",
               (long long)rep->fully_masked_rows, rep->fully_masked_rows == 1 ? "" : "s",
               rep->fully_masked_rows == 1 ? "s" : "", v->overflow_score);
    else
        printf(" finite; score + fill overflows to -inf below score %.4g", v->overflow_score);
    printf("\n");
}

static void print_fill(const lp_leak_mask_report *rep)
{
    if (!rep->has_fill) {
        printf("  fill: none (no negative value: nothing is masked)\n");
        return;
    }
    printf("  fill %g: ", (double)rep->fill);
    if (isinf(rep->fill))
        printf("-inf masks exactly");
    else if (rep->weak_fill)
        printf("WEAK: above the masked threshold, its cells count as visible; a masked key gets "
               "weight > 1e-9 of a visible one once its score exceeds it by %.1f",
               rep->leak_gap);
    else
        printf("a masked key gets weight > 1e-9 of a visible one once its score exceeds it by "
               "%.4g",
               rep->leak_gap);
    printf("\n");
    for (int d = 0; d < 3; d++)
        print_fill_verdict(rep, &rep->fills[d]);
}

/* "  leaks:   N cells the mask allows and DEF forbids", then the listed coordinates. */
static void print_cells(const char *title, const char *what, int64_t count,
                        const lp_leak_coord *c, int64_t n_listed)
{
    printf("  %s %lld cell%s %s\n", title, (long long)count, count == 1 ? "" : "s", what);
    for (int64_t i = 0; i < n_listed; i++)
        printf("    batch %lld head %lld query %lld key %lld\n", (long long)c[i].batch,
               (long long)c[i].head, (long long)c[i].query, (long long)c[i].key);
    if (count > n_listed)
        printf("    ... %lld more\n", (long long)(count - n_listed));
}

static void print_mask_text(const char *path, const leak_opts *o, const lp_leak_mask_opts *mo,
                            const lp_leak_mask_report *rep)
{
    const char *def = mo->def.text;
    char what[640];
    printf("%s: %s [", path, lp_dtype_name(rep->dtype));
    for (int d = 0; d < rep->n_dims; d++)
        printf("%s%lld", d ? ", " : "", (long long)rep->shape[d]);
    printf("], %s mask%s, checked as %s\n", lp_mask_encoding_name(rep->encoding),
           rep->encoding == LP_MASK_ENC_BOOL
               ? (mo->true_means_masked ? " (true = masked)" : " (true = may attend)")
               : "",
           def);
    snprintf(what, sizeof what, "the mask allows and %s forbids", def);
    print_cells("leaks:  ", what, rep->leak_count, rep->leaks, rep->n_leaks_listed);
    snprintf(what, sizeof what, "%s allows and the mask hides", def);
    print_cells("blocked:", what, rep->blocked_count, rep->blocked, rep->n_blocked_listed);
    printf("  fully masked rows: %lld", (long long)rep->fully_masked_rows);
    for (int64_t i = 0; i < rep->n_masked_rows_listed; i++)
        printf("%s(batch %lld head %lld query %lld)", i ? ", " : " ",
               (long long)rep->masked_rows[i].batch, (long long)rep->masked_rows[i].head,
               (long long)rep->masked_rows[i].query);
    printf("\n");
    if (o->padding)
        printf("  padding query rows: %lld (not compared: their outputs are discarded)\n",
               (long long)rep->padding_rows);
    if (rep->encoding == LP_MASK_ENC_ADDITIVE) {
        printf("  NaN rows: %lld (NaN cells %lld)\n", (long long)rep->nan_rows,
               (long long)rep->nan_cells);
        print_fill(rep);
    }
    if (lp_leak_mask_passed(rep))
        printf("verdict: PASS (the mask equals its definition)\n");
    else if (rep->leak_count > 0)
        printf("verdict: LEAK (%s)\n", rep->diagnosis);
    else if (rep->blocked_count > 0)
        printf("verdict: BLOCKED cells\n");
    else
        printf("verdict: NaN rows\n");
}

/* ---- mask mode: the check --------------------------------------------------------------------- */

/* --kind, --format, --true-means, ... into the checker's options; *real (padding) is owned. */
static lp_status mask_options(const leak_opts *o, lp_leak_mask_opts *mo, uint8_t **real,
                              lp_error *err)
{
    lp_leak_mask_opts_init(mo);
    *real = NULL;
    lp_status st = lp_leak_def_parse(o->kind, &mo->def, err);
    if (st != LP_OK)
        return st;
    mo->encoding = o->format < 0 ? LP_MASK_ENC_AUTO
                                 : o->format == 0 ? LP_MASK_ENC_BOOL : LP_MASK_ENC_ADDITIVE;
    mo->true_means_masked = o->true_means == 1;
    mo->masked_below = o->masked_below;
    mo->max_listed = o->max_listed;
    mo->tensor_name = o->tensor;
    if (o->padding &&
        (st = lp_leak_read_padding(o->padding, real, &mo->n_real_batch, &mo->real_len, err)))
        return st;
    mo->real = *real;
    return LP_OK;
}

/* The mask's check as a run of its own with one leak_checks row. */
static lp_status record_mask(const leak_opts *o, const lp_leak_mask_opts *mo,
                             const lp_leak_mask_report *rep, lp_error *err)
{
    lp_leak_check c = {.passed = lp_leak_mask_passed(rep), .layer = -1,
                       .position = rep->leak_count > 0 ? rep->leaks[0].query : -1,
                       .max_abs_diff = (double)NAN};
    snprintf(c.name, sizeof c.name, "mask");
    snprintf(c.detail, sizeof c.detail,
             "%.80s as %.100s: %lld leaking cells, %lld blocked, %lld fully masked rows, %lld NaN "
             "rows",
             lp_path_basename(o->mask), mo->def.text, (long long)rep->leak_count,
             (long long)rep->blocked_count, (long long)rep->fully_masked_rows,
             (long long)rep->nan_rows);
    lp_store *store = NULL;
    int64_t run_id;
    lp_status st = lp_store_open(o->db, &store, err);
    if (st == LP_OK)
        st = lp_store_add_mask_run(store, o->mask, rep->T, rep->n_heads, &c, &run_id, err);
    lp_store_close(store);
    return st;
}

static int run_mask(const leak_opts *o)
{
    lp_error err = {0};
    lp_leak_mask_opts mo;
    uint8_t *real = NULL;
    lp_leak_mask_report rep;
    memset(&rep, 0, sizeof rep);
    lp_status st = mask_options(o, &mo, &real, &err);
    if (st == LP_OK)
        st = lp_leak_check_mask_file(o->mask, &mo, &rep, &err);
    free(real);
    mo.real = NULL;
    if (st == LP_OK && o->db)
        st = record_mask(o, &mo, &rep, &err);
    int rc = st != LP_OK            ? lp_cli_fail(CMD, &err)
             : lp_leak_mask_passed(&rep) ? LP_EXIT_OK
                                         : LP_EXIT_CHECK_FAILED;
    if (st == LP_OK && o->json && print_mask_json(o->mask, &mo, &rep) != LP_EXIT_OK)
        rc = LP_EXIT_USAGE;
    else if (st == LP_OK && !o->json)
        print_mask_text(o->mask, o, &mo, &rep);
    lp_leak_mask_report_free(&rep);
    lp_leak_def_free(&mo.def);
    return rc;
}

/* ---- model mode: the check -------------------------------------------------------------------- */

typedef struct leak_job {
    const char *model_path;
    lp_mask_fault fault;
    lp_kv_fault kv_fault;
    lp_leak_decode_report decode;
    lp_model *model;
    lp_input in;
    lp_pool *pool;
    lp_store *store;
    int64_t run_id; /* 0 = not recorded */
    double seconds;
    lp_leak_model_report rep;
} leak_job;

static void job_free(leak_job *j)
{
    lp_leak_model_report_free(&j->rep);
    lp_store_close(j->store);
    if (j->pool)
        lp_pool_destroy(j->pool);
    lp_input_free(&j->in);
    lp_model_close(j->model);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Model, ids (the built-in prompt unless told otherwise), threads. */
static lp_status prepare(leak_job *j, const leak_opts *o, lp_error *err)
{
    lp_status st = lp_model_open(j->model_path, &j->model, err);
    if (st == LP_OK)
        st = lp_input_load_for_weights(&o->input, j->model_path, lp_model_weights(j->model),
                                       default_prompt, &j->in, err);
    if (st != LP_OK)
        return st;
    if (j->in.n_ids < 2)
        return lp_error_set(err, LP_ERR_USAGE,
                            "%zu token%s: the checks need at least 2 (a cut point and a future)",
                            j->in.n_ids, j->in.n_ids == 1 ? "" : "s");
    lp_batch batch = lp_batch_single(j->in.ids, (int64_t)j->in.n_ids);
    if ((st = lp_forward_check(j->model, &batch, err)))
        return st;
    if (o->threads > 1)
        return lp_pool_create((int)o->threads, &j->pool, err);
    return LP_OK;
}

/* --db: a run of kind 'leak' whose unperturbed pass the store records like a trace. */
static lp_status begin_record(leak_job *j, const leak_opts *o, lp_error *err)
{
    lp_status st = lp_store_open(o->db, &j->store, err);
    if (st != LP_OK)
        return st;
    lp_store_opts sopts;
    lp_store_opts_init(&sopts);
    sopts.maps = (lp_maps_dtype)o->maps;
    sopts.pool = j->pool;
    lp_run_info info = lp_run_info_for_model("leak", j->model_path, j->model, j->in.text,
                                             j->in.ids, (int64_t)j->in.n_ids, j->in.tokenizer,
                                             (int)o->threads);
    return lp_store_begin_run(j->store, &info, &sopts, &j->run_id, err);
}

/* The decode check's rows join the report's; its failure names the diagnosis when nothing else
 * failed. */
static lp_status add_decode_check(leak_job *j, const leak_opts *o, lp_error *err)
{
    lp_leak_decode_opts dopts = {.fault = j->kv_fault, .window = o->window, .pool = j->pool};
    lp_status st = lp_leak_check_decode(j->model, j->in.ids, (int64_t)j->in.n_ids, &dopts,
                                        &j->decode, err);
    if (st != LP_OK)
        return st;
    lp_leak_model_report *r = &j->rep;
    int add = j->decode.n_checks;
    lp_leak_check *grown = realloc(r->checks, (size_t)(r->n_checks + add + 1) * sizeof *grown);
    if (!grown)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    r->checks = grown;
    memcpy(r->checks + r->n_checks, j->decode.checks, (size_t)add * sizeof *grown);
    r->n_checks += add;
    if (!j->decode.passed && r->passed)
        r->diagnosis = j->decode.diagnosis;
    r->passed = r->passed && j->decode.passed;
    return LP_OK;
}

/* Every model check, and with --db its rows committed with the run. */
static lp_status check_model(leak_job *j, const leak_opts *o, lp_error *err)
{
    lp_status st = o->db ? begin_record(j, o, err) : LP_OK;
    if (st != LP_OK)
        return st;
    /* every field of the options, so no default is left */
    lp_leak_model_opts mo = {.fault = j->fault, .window = o->window, .pool = j->pool,
                             .n_random_cuts = o->cuts, .seed = (uint64_t)o->seed,
                             .max_listed = o->max_listed,
                             .record = j->store ? lp_store_observer(j->store) : NULL};
    double t0 = now_seconds();
    st = lp_leak_check_model(j->model, j->in.ids, (int64_t)j->in.n_ids, &mo, &j->rep, err);
    if (st == LP_OK)
        st = add_decode_check(j, o, err);
    j->seconds = now_seconds() - t0;
    if (st == LP_OK && j->store &&
        (st = lp_store_add_leak_checks(j->store, j->rep.checks, j->rep.n_checks, err)) == LP_OK)
        st = lp_store_end_run(j->store, j->seconds, err);
    if (st != LP_OK && j->store)
        lp_store_abort_run(j->store);
    return st;
}

/* ---- model mode: the report ------------------------------------------------------------------- */

static json_t *model_leak_json(const lp_leak_model_coord *c)
{
    return json_pack("{s:I, s:i, s:i, s:I, s:I, s:f}", "batch", (json_int_t)c->batch, "layer",
                     c->layer, "head", c->head, "query", (json_int_t)c->query, "key",
                     (json_int_t)c->key, "prob", (double)c->prob);
}

static json_t *check_json(const lp_leak_check *c)
{
    return json_pack("{s:s, s:b, s:i, s:I, s:o, s:s}", "check", c->name, "passed", (int)c->passed,
                     "layer", c->layer, "position", (json_int_t)c->position, "max_abs_diff",
                     num_or_null(c->max_abs_diff), "detail", c->detail);
}

static json_t *perturbation_json(const lp_leak_model_report *rep)
{
    json_t *pert = json_object();
    json_t *cuts = json_array(), *diffs = json_array();
    for (int64_t i = 0; i < rep->n_cuts; i++)
        json_array_append_new(cuts, json_integer(rep->cuts[i]));
    for (int l = 0; l <= rep->n_layers; l++)
        json_array_append_new(diffs, num_or_null(rep->layer_max_diff[l]));
    json_object_set_new(pert, "cuts", cuts);
    json_object_set_new(pert, "layer_max_abs_diff", diffs);
    json_object_set_new(pert, "bitwise", json_boolean(rep->bitwise));
    json_object_set_new(pert, "tolerance", json_real(rep->tolerance));
    if (rep->first_diff_layer != -2) {
        json_object_set_new(pert, "first_layer", json_integer(rep->first_diff_layer));
        json_object_set_new(pert, "first_position", json_integer(rep->first_diff_position));
        json_object_set_new(pert, "cut", json_integer(rep->first_diff_cut));
    }
    return pert;
}

static int print_model_json(const leak_job *j, const leak_opts *o)
{
    const lp_leak_model_report *rep = &j->rep;
    json_t *root = json_pack("{s:s, s:I, s:s, s:I, s:I, s:s}", "model", j->model_path, "n_tokens",
                             (json_int_t)j->in.n_ids, "inject", j->kv_fault != LP_KV_FAULT_NONE ? lp_kv_fault_name(j->kv_fault)
                                                       : lp_mask_fault_name(j->fault),
                             "window", (json_int_t)o->window, "threads", (json_int_t)o->threads,
                             "isa", lp_isa_name(lp_kernels_isa()));
    if (j->run_id)
        json_object_set_new(root, "run_id", json_integer(j->run_id));
    json_t *leaks = json_array(), *checks = json_array();
    for (int64_t i = 0; i < rep->n_leaks_listed; i++)
        json_array_append_new(leaks, model_leak_json(&rep->leaks[i]));
    for (int64_t i = 0; i < rep->n_checks; i++)
        json_array_append_new(checks, check_json(&rep->checks[i]));
    json_t *verdict = json_pack(
        "{s:b, s:s, s:I, s:I, s:I, s:o, s:o, s:{s:f, s:f, s:b, s:b}, s:o}", "passed", (int)rep->passed,
        "diagnosis", rep->diagnosis, "leak_count", (json_int_t)rep->leak_count, "blocked_count",
        (json_int_t)rep->blocked_count, "nan_rows", (json_int_t)rep->nan_rows, "leaks", leaks,
        "perturbation", perturbation_json(rep), "alignment", "loss_next", rep->loss_next,
        "loss_same", rep->loss_same, "flagged", (int)rep->alignment_flagged, "inconclusive",
        (int)rep->alignment_inconclusive, "checks", checks);
    json_object_update(root, verdict);
    json_decref(verdict);
    const lp_leak_decode_report *d = &j->decode;
    json_object_set_new(root, "decode",
                        json_pack("{s:b, s:b, s:s, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:f, s:f}",
                                  "passed", (int)d->passed, "skipped", (int)d->skipped, "diagnosis", d->diagnosis, "prefix",
                                  (json_int_t)d->prefix, "window", (json_int_t)d->window,
                                  "short_prefill", (json_int_t)d->short_prefill,
                                  "logit_diff", num_or_null(d->logit_diff), "hidden_diff",
                                  num_or_null(d->hidden_diff), "f16_logit_diff",
                                  num_or_null(d->f16_logit_diff), "f16_hidden_diff",
                                  num_or_null(d->f16_hidden_diff), "tolerance",
                                  LP_LEAK_DECODE_TOLERANCE, "f16_tolerance",
                                  LP_LEAK_DECODE_F16_TOLERANCE));
    if (d->int8) {
        json_t *dj = json_object_get(root, "decode");
        json_object_set_new(dj, "int8_logit_diff", num_or_null(d->int8_logit_diff));
        json_object_set_new(dj, "int8_hidden_diff", num_or_null(d->int8_hidden_diff));
        json_object_set_new(dj, "int8_tolerance", json_real(LP_LEAK_DECODE_INT8_TOLERANCE));
    }
    return lp_cli_print_json(CMD, root, JSON_INDENT(2));
}

/* One line per check family: passed or the first failing row. */
static void print_family(const lp_leak_model_report *r, const char *name, const char *ok_text)
{
    int64_t n = 0, failed = 0;
    const lp_leak_check *first_bad = NULL;
    for (int64_t i = 0; i < r->n_checks; i++) {
        if (strcmp(r->checks[i].name, name) != 0)
            continue;
        n++;
        if (!r->checks[i].passed) {
            failed++;
            if (!first_bad)
                first_bad = &r->checks[i];
        }
    }
    if (!first_bad) {
        printf("  %-14s ok    %s\n", name, ok_text);
        return;
    }
    printf("  %-14s FAIL  %lld of %lld checks; first: ", name, (long long)failed, (long long)n);
    if (first_bad->layer >= 0)
        printf("layer %d: ", first_bad->layer);
    printf("%s\n", first_bad->detail);
}

static void print_perturbation(const lp_leak_model_report *rep, int64_t n_layers)
{
    char text[256], cut_list[96] = "";
    size_t used = 0;
    for (int64_t i = 0; i < rep->n_cuts && used + 24 < sizeof cut_list; i++)
        used += (size_t)snprintf(cut_list + used, sizeof cut_list - used, "%s%lld", i ? ", " : "",
                                 (long long)rep->cuts[i]);
    double worst = 0.0;
    for (int l = 0; l <= rep->n_layers; l++)
        worst = rep->layer_max_diff[l] > worst ? rep->layer_max_diff[l] : worst;
    if (rep->bitwise)
        snprintf(text, sizeof text,
                 "cuts %s: hidden states of %lld layers and logits at positions <= cut identical "
                 "bit for bit",
                 cut_list, (long long)n_layers);
    else
        snprintf(text, sizeof text,
                 "cuts %s: hidden states of %lld layers and logits at positions <= cut within "
                 "%.0e relative (MoE: max |diff| %.3g, expert GEMMs resize with routing)",
                 cut_list, (long long)n_layers, rep->tolerance, worst);
    print_family(rep, "perturbation", text);
}

static void print_families(const lp_leak_model_report *rep, const lp_leak_decode_report *d,
                           int64_t n_layers)
{
    char text[384];
    print_perturbation(rep, n_layers);
    snprintf(text, sizeof text,
             "no probability outside the mask; rows sum to 1 (max error %.2g); %lld NaN/Inf; %lld "
             "fully masked rows",
             rep->attn_max_row_err, (long long)rep->attn_nonfinite,
             (long long)rep->attn_masked_rows);
    print_family(rep, "attention_map", text);
    print_family(rep, "structural",
                 "causal, window, decode and padded masks equal the definition cell by cell; "
                 "padded batch: clean maps, real tokens compute what the unpadded prompt does");
    snprintf(text, sizeof text, "loss with labels shifted %.3f nats, unshifted %.3f nats",
             rep->loss_next, rep->loss_same);
    if (rep->alignment_inconclusive)
        /* passes (no evidence of a bug) but is not called ok: nothing was judged */
        printf("  %-14s --    inconclusive: %s, neither beats a uniform guess by %.1f nat "
               "(random weights or unpredictable text: no signal to judge the labels by)\n",
               "alignment", text, LP_LEAK_ALIGNMENT_MIN_SIGNAL);
    else
        print_family(rep, "alignment", text);
    char longrope[128] = "";
    if (d->short_prefill > 0)
        snprintf(longrope, sizeof longrope,
                 "; longrope: positions < %lld against a prefill of %lld (short factors)",
                 (long long)d->short_prefill, (long long)d->short_prefill);
    char int8[96] = "";
    if (d->int8)
        snprintf(int8, sizeof int8, ", %.1e, %.1e (f32 cache, int8 activations)",
                 d->int8_logit_diff, d->int8_hidden_diff);
    snprintf(text, sizeof text,
             "prefill of %lld then one token at a time: relative |dlogit| %.1e, |dhidden| %.1e "
             "(f32 cache), %.1e, %.1e (f16)%s%s",
             (long long)d->prefix, d->logit_diff, d->hidden_diff, d->f16_logit_diff,
             d->f16_hidden_diff, int8, longrope);
    if (d->skipped)
        printf("  %-14s skip  multi-head latent attention: its latent cache is not built yet\n",
               "decode");
    else
        print_family(rep, "decode", text);
}

/* Where the first difference and the leaking cells are. */
static void print_findings(const lp_leak_model_report *rep)
{
    if (rep->first_diff_layer >= 0)
        printf("  first difference: layer %d, position %lld (cut %lld)\n", rep->first_diff_layer,
               (long long)rep->first_diff_position, (long long)rep->first_diff_cut);
    else if (rep->first_diff_layer == -1)
        printf("  first difference: logits, position %lld (cut %lld)\n",
               (long long)rep->first_diff_position, (long long)rep->first_diff_cut);
    if (rep->leak_count == 0)
        return;
    printf("  leaking cells: %lld (blocked %lld)\n", (long long)rep->leak_count,
           (long long)rep->blocked_count);
    for (int64_t i = 0; i < rep->n_leaks_listed; i++)
        printf("    batch %lld layer %d head %d query %lld key %lld p %.3g\n",
               (long long)rep->leaks[i].batch, rep->leaks[i].layer, rep->leaks[i].head,
               (long long)rep->leaks[i].query, (long long)rep->leaks[i].key,
               (double)rep->leaks[i].prob);
}

static void print_model_text(const leak_job *j, const leak_opts *o)
{
    const lp_arch *arch = lp_model_arch(j->model);
    printf("%s: %zu tokens, %lld layers x %lld heads, %.2f s, %lld thread%s, isa %s, inject %s%s",
           j->model_path, j->in.n_ids, (long long)arch->n_layers, (long long)arch->n_heads,
           j->seconds, (long long)o->threads, o->threads == 1 ? "" : "s",
           lp_isa_name(lp_kernels_isa()),
           j->kv_fault != LP_KV_FAULT_NONE ? lp_kv_fault_name(j->kv_fault)
                                           : lp_mask_fault_name(j->fault),
           j->run_id ? "" : "\n");
    if (j->run_id)
        printf(", run %lld in %s\n", (long long)j->run_id, o->db);
    print_families(&j->rep, &j->decode, arch->n_layers);
    print_findings(&j->rep);
    if (j->rep.passed)
        printf("verdict: PASS (no position sees the future)\n");
    else
        printf("verdict: FAIL (%s)\n", j->rep.diagnosis);
}

static int run_model(const char *model_path, lp_mask_fault fault, lp_kv_fault kv_fault,
                     const leak_opts *o)
{
    leak_job job = {.model_path = model_path, .fault = fault, .kv_fault = kv_fault};
    lp_error err = {0};
    int rc;
    if (prepare(&job, o, &err) != LP_OK || check_model(&job, o, &err) != LP_OK)
        rc = lp_cli_fail(CMD, &err);
    else if (o->json && print_model_json(&job, o) != LP_EXIT_OK)
        rc = LP_EXIT_USAGE;
    else {
        if (!o->json)
            print_model_text(&job, o);
        rc = job.rep.passed ? LP_EXIT_OK : LP_EXIT_CHECK_FAILED;
    }
    job_free(&job);
    return rc;
}

static int run_leak(int argc, char **argv)
{
    leak_opts o;
    const char *model;
    lp_mask_fault fault;
    lp_kv_fault kv_fault;
    int rc = parse(argc, argv, &o, &model, &fault, &kv_fault);
    if (rc != LP_CLI_PARSED)
        return rc;
    return o.mask ? run_mask(&o) : run_model(model, fault, kv_fault, &o);
}
