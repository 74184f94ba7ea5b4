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
#include "core/mapfile.h"
#include "inspect/tokenizer/tokenizer.h"

#define CMD "leak"

/* The built-in prompt: plain story text any small English model has seen the like of. */
static const char default_prompt[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
    "with her friends. One day, she saw a big red ball under a tree.";

static const char usage[] =
    "usage: loupe leak MODEL [--prompt TEXT | --prompt-file FILE | --tokens IDS] [options]\n"
    "       loupe leak --mask FILE [--kind causal|window:W|doc:IDS_FILE] [options]\n"
    "\n"
    "Prove that no position sees the future.\n"
    "\n"
    "On a model (a real forward pass on the CPU):\n"
    "  perturbation   for cut points t (first, middle, last, random) the tokens after t are\n"
    "                 replaced; hidden states of every layer and logits at positions <= t must\n"
    "                 stay identical bit for bit (MoE models: within 1e-5 relative)\n"
    "  attention_map  no probability outside the mask, rows sum to 1 within 1e-5, no NaN/Inf\n"
    "  structural     the engine's masks cell by cell against the definition (causal, window,\n"
    "                 decode alignment, left/right padding), and a padded batch through the model\n"
    "  alignment      loss with labels shifted by one versus unshifted\n"
    "\n"
    "  MODEL                model folder, .safetensors, .gguf or llama2.c .bin\n"
    "  --prompt TEXT        text to tokenize (default: a built-in story sentence)\n"
    "  --prompt-file FILE   read the text from FILE\n"
    "  --tokens IDS         token ids, comma separated\n"
    "  --tokenizer FILE     tokenizer.json, llama2.c tokenizer .bin or .gguf\n"
    "  --inject FAULT       build a broken mask: off-by-one, transposed, no-mask, window+1,\n"
    "                       pad-axis (proves the checks catch it)\n"
    "  --window W           force a sliding window of W keys (itself included) on every layer\n"
    "  --cuts N             random cut points besides first, middle and last (default 2)\n"
    "  --seed S             seed of the random cuts and replacement tokens (default 1)\n"
    "  --threads N          worker threads (default 1); results are bitwise repeatable per N\n"
    "  --maps f16|f32|none  with --db: the unperturbed pass's attention maps, head statistics\n"
    "                       and predictions are recorded as by loupe trace (default f16)\n"
    "\n"
    "On a mask tensor (.npy or .safetensors; [T,T], [B,1,T,T] or [B,H,T,T]):\n"
    "  --mask FILE          the mask; bool/integer dtypes are boolean (true = may attend),\n"
    "                       float dtypes additive (0 = attend, <= -1000 = masked)\n"
    "  --kind DEF           causal (default), window:W (W keys including itself) or\n"
    "                       doc:IDS_FILE (causal within each document): one id per position,\n"
    "                       .npy [T] or [B, T] or text with one line per batch item\n"
    "  --true-means masked|attend   boolean polarity (default attend)\n"
    "  --format bool|additive       override the dtype's encoding\n"
    "  --masked-below V     additive: values <= V are masked (default -1000)\n"
    "  --tensor NAME        the tensor of a .safetensors file holding several\n"
    "  --padding FILE       the padding (attention_mask): .npy [T] or [B, T], or text with one\n"
    "                       line of 0/1 per batch item (1 = real token); padding keys are then\n"
    "                       forbidden and padding query rows not compared\n"
    "\n"
    "Both:\n"
    "  --json               machine-readable report on stdout\n"
    "  --db FILE            append a run (kind 'leak') and its leak_checks rows\n"
    "  --max-listed N       coordinates listed (default 20; all are counted)\n"
    "\n"
    "Exit status: 0 no leak, 1 a leak, blocked cells, NaN or a failed check, 2 bad input.\n";

typedef struct leak_args {
    const char *model;
    const char *prompt;
    const char *prompt_file;
    const char *tokens;
    const char *tokenizer;
    const char *db;
    const char *mask;
    const char *kind;
    const char *tensor;
    const char *padding;
    bool json;
    bool true_means_masked;
    lp_mask_encoding encoding;
    double masked_below;
    lp_mask_fault fault;
    int64_t window;
    int64_t cuts;
    int64_t seed;
    int64_t threads;
    int64_t max_listed;
    lp_maps_dtype maps;
} leak_args;

static int parse_args(int argc, char **argv, leak_args *a)
{
    memset(a, 0, sizeof *a);
    a->kind = "causal";
    a->encoding = LP_MASK_ENC_AUTO;
    a->masked_below = LP_LEAK_MASKED_BELOW;
    a->fault = LP_MASK_FAULT_NONE;
    a->cuts = 2;
    a->seed = 1;
    a->threads = 1;
    a->max_listed = LP_LEAK_MAX_LISTED;
    a->maps = LP_MAPS_F16;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (lp_cli_flag(argv[i], "--json")) {
            a->json = true;
            continue;
        }
#define OPT(name, field)                                           \
    if ((r = lp_cli_option(CMD, argc, argv, &i, name, &v)) != 0) { \
        if (r < 0)                                                 \
            return LP_EXIT_USAGE;                                  \
        a->field = v;                                              \
        continue;                                                  \
    }
        OPT("--prompt", prompt)
        OPT("--prompt-file", prompt_file)
        OPT("--tokens", tokens)
        OPT("--tokenizer", tokenizer)
        OPT("--db", db)
        OPT("--mask", mask)
        OPT("--kind", kind)
        OPT("--tensor", tensor)
        OPT("--padding", padding)
#undef OPT
        if ((r = lp_cli_option(CMD, argc, argv, &i, "--true-means", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            if (strcmp(v, "masked") == 0) a->true_means_masked = true;
            else if (strcmp(v, "attend") == 0) a->true_means_masked = false;
            else return lp_cli_usage_error(CMD, "--true-means '%s': expected masked or attend", v);
            continue;
        }
        if ((r = lp_cli_option(CMD, argc, argv, &i, "--format", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            if (strcmp(v, "bool") == 0) a->encoding = LP_MASK_ENC_BOOL;
            else if (strcmp(v, "additive") == 0) a->encoding = LP_MASK_ENC_ADDITIVE;
            else return lp_cli_usage_error(CMD, "--format '%s': expected bool or additive", v);
            continue;
        }
        if ((r = lp_cli_option(CMD, argc, argv, &i, "--maps", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            if (strcmp(v, "f16") == 0) a->maps = LP_MAPS_F16;
            else if (strcmp(v, "f32") == 0) a->maps = LP_MAPS_F32;
            else if (strcmp(v, "none") == 0) a->maps = LP_MAPS_NONE;
            else return lp_cli_usage_error(CMD, "--maps '%s': expected f16, f32 or none", v);
            continue;
        }
        if ((r = lp_cli_option(CMD, argc, argv, &i, "--inject", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            a->fault = lp_mask_fault_from_name(v);
            if (a->fault == LP_MASK_FAULT_COUNT || a->fault == LP_MASK_FAULT_NONE)
                return lp_cli_usage_error(CMD,
                                          "--inject '%s': expected off-by-one, transposed, "
                                          "no-mask, window+1 or pad-axis",
                                          v);
            continue;
        }
        if ((r = lp_cli_option(CMD, argc, argv, &i, "--masked-below", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            if (!lp_parse_f64(v, &a->masked_below) || !(a->masked_below < 0))
                return lp_cli_usage_error(CMD, "--masked-below '%s': expected a negative number",
                                          v);
            continue;
        }
        struct { const char *name; int64_t *field; int64_t lo, hi; } nums[] = {
            {"--window", &a->window, 1, INT64_MAX / 4},
            {"--cuts", &a->cuts, 0, 1000},
            {"--seed", &a->seed, 0, INT64_MAX},
            {"--threads", &a->threads, 1, 256},
            {"--max-listed", &a->max_listed, 0, 1000000},
        };
        bool matched = false;
        for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) {
            if ((r = lp_cli_option(CMD, argc, argv, &i, nums[k].name, &v)) != 0) {
                if (r < 0)
                    return LP_EXIT_USAGE;
                int64_t n;
                if (!lp_parse_i64(v, &n) || n < nums[k].lo || n > nums[k].hi)
                    return lp_cli_usage_error(CMD, "%s '%s': expected an integer in [%lld, %lld]",
                                              nums[k].name, v, (long long)nums[k].lo,
                                              (long long)nums[k].hi);
                *nums[k].field = n;
                matched = true;
                break;
            }
        }
        if (matched)
            continue;
        if (argv[i][0] == '-' && argv[i][1] != '\0')
            return lp_cli_usage_error(CMD, "unknown option '%s' (see loupe help leak)", argv[i]);
        if (a->model)
            return lp_cli_usage_error(CMD, "unexpected argument '%s' (one MODEL only)", argv[i]);
        a->model = argv[i];
    }
    if (a->mask && a->model)
        return lp_cli_usage_error(CMD, "give MODEL or --mask FILE, not both");
    if (!a->mask && !a->model)
        return lp_cli_usage_error(CMD, "missing MODEL or --mask FILE (see loupe help leak)");
    int n_inputs = (a->prompt != NULL) + (a->prompt_file != NULL) + (a->tokens != NULL);
    if (n_inputs > 1)
        return lp_cli_usage_error(CMD, "give at most one of --prompt, --prompt-file, --tokens "
                                       "(got %d)", n_inputs);
    if (!a->mask && (a->padding || a->tensor || a->encoding != LP_MASK_ENC_AUTO ||
                     a->true_means_masked || strcmp(a->kind, "causal") != 0 ||
                     a->masked_below != LP_LEAK_MASKED_BELOW))
        return lp_cli_usage_error(CMD, "--kind, --padding, --tensor, --format, --true-means and "
                                       "--masked-below apply to --mask FILE, not to a MODEL");
    if (a->mask && (n_inputs > 0 || a->tokenizer || a->fault != LP_MASK_FAULT_NONE || a->window))
        return lp_cli_usage_error(CMD, "--prompt, --tokens, --tokenizer, --inject and --window "
                                       "apply to a MODEL, not to --mask");
    return LP_EXIT_OK;
}

/* ---- mask mode ---- */

static void coord_json(json_t *list, const lp_leak_coord *c, int64_t n, bool with_key)
{
    for (int64_t i = 0; i < n; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "batch", json_integer(c[i].batch));
        json_object_set_new(o, "head", json_integer(c[i].head));
        json_object_set_new(o, "query", json_integer(c[i].query));
        if (with_key)
            json_object_set_new(o, "key", json_integer(c[i].key));
        json_array_append_new(list, o);
    }
}

static json_t *num_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
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
    for (int d = 0; d < 3; d++) {
        const lp_fill_verdict *v = &rep->fills[d];
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
}

static int run_mask(const leak_args *a)
{
    lp_error err = {0};
    lp_leak_mask_opts mo;
    lp_leak_mask_opts_init(&mo);
    if (lp_leak_def_parse(a->kind, &mo.def, &err) != LP_OK)
        return lp_cli_fail(CMD, &err);
    mo.encoding = a->encoding;
    mo.true_means_masked = a->true_means_masked;
    mo.masked_below = a->masked_below;
    mo.max_listed = a->max_listed;
    mo.tensor_name = a->tensor;
    uint8_t *real = NULL;
    if (a->padding) {
        if (lp_leak_read_padding(a->padding, &real, &mo.n_real_batch, &mo.real_len, &err) !=
            LP_OK) {
            lp_leak_def_free(&mo.def);
            return lp_cli_fail(CMD, &err);
        }
        mo.real = real;
    }
    lp_leak_mask_report rep;
    lp_status check_st = lp_leak_check_mask_file(a->mask, &mo, &rep, &err);
    free(real);
    mo.real = NULL;
    if (check_st != LP_OK) {
        lp_leak_def_free(&mo.def);
        return lp_cli_fail(CMD, &err);
    }
    bool passed = lp_leak_mask_passed(&rep);
    int rc = passed ? LP_EXIT_OK : LP_EXIT_CHECK_FAILED;

    if (a->db) {
        lp_store *store = NULL;
        lp_leak_check c;
        memset(&c, 0, sizeof c);
        snprintf(c.name, sizeof c.name, "mask");
        c.passed = passed;
        c.layer = -1;
        c.position = rep.leak_count > 0 ? rep.leaks[0].query : -1;
        c.max_abs_diff = (double)NAN;
        snprintf(c.detail, sizeof c.detail,
                 "%.80s as %.100s: %lld leaking cells, %lld blocked, %lld fully "
                 "masked rows, %lld NaN rows",
                 lp_path_basename(a->mask), mo.def.text, (long long)rep.leak_count,
                 (long long)rep.blocked_count, (long long)rep.fully_masked_rows,
                 (long long)rep.nan_rows);
        int64_t run_id;
        lp_status st = lp_store_open(a->db, &store, &err);
        if (st == LP_OK)
            st = lp_store_add_mask_run(store, a->mask, rep.T, rep.n_heads, &c, &run_id, &err);
        lp_store_close(store);
        if (st != LP_OK) {
            lp_leak_mask_report_free(&rep);
            lp_leak_def_free(&mo.def);
            return lp_cli_fail(CMD, &err);
        }
    }

    if (a->json) {
        json_t *root = json_object();
        json_object_set_new(root, "mask", json_string(a->mask));
        json_object_set_new(root, "kind", json_string(mo.def.text));
        json_object_set_new(root, "dtype", json_string(lp_dtype_name(rep.dtype)));
        json_object_set_new(root, "encoding", json_string(lp_mask_encoding_name(rep.encoding)));
        json_t *shape = json_array();
        for (int d = 0; d < rep.n_dims; d++)
            json_array_append_new(shape, json_integer(rep.shape[d]));
        json_object_set_new(root, "shape", shape);
        json_object_set_new(root, "passed", json_boolean(passed));
        json_object_set_new(root, "diagnosis", json_string(rep.diagnosis));
        json_object_set_new(root, "leak_count", json_integer(rep.leak_count));
        json_object_set_new(root, "blocked_count", json_integer(rep.blocked_count));
        json_object_set_new(root, "nan_rows", json_integer(rep.nan_rows));
        json_object_set_new(root, "fully_masked_rows", json_integer(rep.fully_masked_rows));
        json_object_set_new(root, "nan_cells", json_integer(rep.nan_cells));
        json_object_set_new(root, "padding_rows", json_integer(rep.padding_rows));
        json_t *leaks = json_array(), *blocked = json_array(), *rows = json_array();
        coord_json(leaks, rep.leaks, rep.n_leaks_listed, true);
        coord_json(blocked, rep.blocked, rep.n_blocked_listed, true);
        coord_json(rows, rep.masked_rows, rep.n_masked_rows_listed, false);
        json_object_set_new(root, "leaks", leaks);
        json_object_set_new(root, "blocked", blocked);
        json_object_set_new(root, "masked_rows", rows);
        if (rep.encoding == LP_MASK_ENC_ADDITIVE) {
            json_t *fill = json_object();
            json_object_set_new(fill, "value", rep.has_fill ? num_or_null((double)rep.fill)
                                                            : json_null());
            json_object_set_new(fill, "is_neg_inf", json_boolean(rep.has_fill && isinf(rep.fill)));
            json_object_set_new(fill, "weak", json_boolean(rep.weak_fill));
            json_object_set_new(fill, "leak_gap", rep.has_fill ? num_or_null(rep.leak_gap)
                                                               : json_null());
            json_object_set_new(fill, "masked_below", json_real(mo.masked_below));
            for (int d = 0; d < 3 && rep.has_fill; d++) {
                const lp_fill_verdict *v = &rep.fills[d];
                json_t *o = json_object();
                json_object_set_new(o, "value", num_or_null((double)v->value));
                json_object_set_new(o, "is_neg_inf", json_boolean(isinf(v->value)));
                json_object_set_new(o, "overflows", json_boolean(v->overflows));
                json_object_set_new(o, "nan_rows", json_integer(v->nan_rows));
                json_object_set_new(o, "overflow_score", num_or_null(v->overflow_score));
                json_object_set_new(fill, lp_dtype_name(v->dtype), o);
            }
            json_object_set_new(root, "fill", fill);
        }
        char *text = json_dumps(root, JSON_INDENT(2));
        json_decref(root);
        if (!text) {
            lp_leak_mask_report_free(&rep);
            lp_leak_def_free(&mo.def);
            return lp_cli_usage_error(CMD, "out of memory writing JSON");
        }
        printf("%s\n", text);
        free(text);
    } else {
        printf("%s: %s [", a->mask, lp_dtype_name(rep.dtype));
        for (int d = 0; d < rep.n_dims; d++)
            printf("%s%lld", d ? ", " : "", (long long)rep.shape[d]);
        printf("], %s mask%s, checked as %s\n", lp_mask_encoding_name(rep.encoding),
               rep.encoding == LP_MASK_ENC_BOOL
                   ? (a->true_means_masked ? " (true = masked)" : " (true = may attend)")
                   : "",
               mo.def.text);
        printf("  leaks:   %lld cell%s the mask allows and %s forbids\n",
               (long long)rep.leak_count, rep.leak_count == 1 ? "" : "s", mo.def.text);
        for (int64_t i = 0; i < rep.n_leaks_listed; i++)
            printf("    batch %lld head %lld query %lld key %lld\n", (long long)rep.leaks[i].batch,
                   (long long)rep.leaks[i].head, (long long)rep.leaks[i].query,
                   (long long)rep.leaks[i].key);
        if (rep.leak_count > rep.n_leaks_listed)
            printf("    ... %lld more\n", (long long)(rep.leak_count - rep.n_leaks_listed));
        printf("  blocked: %lld cell%s %s allows and the mask hides\n",
               (long long)rep.blocked_count, rep.blocked_count == 1 ? "" : "s", mo.def.text);
        for (int64_t i = 0; i < rep.n_blocked_listed; i++)
            printf("    batch %lld head %lld query %lld key %lld\n",
                   (long long)rep.blocked[i].batch, (long long)rep.blocked[i].head,
                   (long long)rep.blocked[i].query, (long long)rep.blocked[i].key);
        if (rep.blocked_count > rep.n_blocked_listed)
            printf("    ... %lld more\n", (long long)(rep.blocked_count - rep.n_blocked_listed));
        printf("  fully masked rows: %lld", (long long)rep.fully_masked_rows);
        for (int64_t i = 0; i < rep.n_masked_rows_listed; i++)
            printf("%s(batch %lld head %lld query %lld)", i ? ", " : " ",
                   (long long)rep.masked_rows[i].batch, (long long)rep.masked_rows[i].head,
                   (long long)rep.masked_rows[i].query);
        printf("\n");
        if (a->padding)
            printf("  padding query rows: %lld (not compared: their outputs are discarded)\n",
                   (long long)rep.padding_rows);
        if (rep.encoding == LP_MASK_ENC_ADDITIVE) {
            printf("  NaN rows: %lld (NaN cells %lld)\n", (long long)rep.nan_rows,
                   (long long)rep.nan_cells);
            print_fill(&rep);
        }
        if (passed)
            printf("verdict: PASS (the mask equals its definition)\n");
        else if (rep.leak_count > 0)
            printf("verdict: LEAK (%s)\n", rep.diagnosis);
        else if (rep.blocked_count > 0)
            printf("verdict: BLOCKED cells\n");
        else
            printf("verdict: NaN rows\n");
    }
    lp_leak_mask_report_free(&rep);
    lp_leak_def_free(&mo.def);
    return rc;
}

/* ---- model mode ---- */

/* --tokenizer, else the tokenizer that goes with the model (lp_tokenizer_for_model). */
static lp_status find_tokenizer(const leak_args *a, const lp_weights *w, lp_tokenizer **tok,
                                lp_error *err)
{
    if (a->tokenizer)
        return lp_tokenizer_open(a->tokenizer, tok, err);
    return lp_tokenizer_for_model(a->model, lp_weights_gguf(w),
                                  lp_weights_format_of(w) == LP_FORMAT_LLAMA2C, tok, err);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
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

static int run_model(const leak_args *a)
{
    lp_error err = {0};
    lp_model *model = NULL;
    lp_tokenizer *tok = NULL;
    lp_pool *pool = NULL;
    lp_store *store = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *prompt_buf = NULL;
    const char *prompt = a->prompt;
    lp_leak_model_report rep;
    memset(&rep, 0, sizeof rep);
    int rc = LP_EXIT_USAGE;

    if (a->tokens && lp_parse_token_ids(a->tokens, &ids, &n_ids, &err) != LP_OK)
        goto fail;
    if (a->prompt_file) {
        if (lp_read_prompt_file(a->prompt_file, &prompt_buf, NULL, &err) != LP_OK)
            goto fail;
        prompt = prompt_buf;
    }
    if (!a->tokens && !prompt)
        prompt = default_prompt;
    if (lp_model_open(a->model, &model, &err) != LP_OK)
        goto fail;
    const lp_arch *arch = lp_model_arch(model);
    const lp_weights *w = lp_model_weights(model);
    if (prompt) {
        if (find_tokenizer(a, w, &tok, &err) != LP_OK)
            goto fail;
        if (lp_tokenizer_encode(tok, prompt, strlen(prompt), true, &ids, &n_ids, &err) != LP_OK)
            goto fail;
    }
    if (n_ids < 2) {
        lp_error_set(&err, LP_ERR_USAGE,
                     "%zu token%s: the checks need at least 2 (a cut point and a future)", n_ids,
                     n_ids == 1 ? "" : "s");
        goto fail;
    }
    lp_batch batch = lp_batch_single(ids, (int64_t)n_ids);
    if (lp_forward_check(model, &batch, &err) != LP_OK)
        goto fail;
    if (a->threads > 1 && lp_pool_create((int)a->threads, &pool, &err) != LP_OK)
        goto fail;
    int64_t run_id = 0;
    if (a->db) {
        if (lp_store_open(a->db, &store, &err) != LP_OK)
            goto fail;
        lp_store_opts sopts;
        lp_store_opts_init(&sopts);
        sopts.maps = a->maps;
        lp_run_info info;
        memset(&info, 0, sizeof info);
        info.kind = "leak";
        info.model_path = a->model;
        info.model_format = lp_weights_format_name(lp_weights_format_of(w));
        info.arch = arch;
        info.prompt = prompt;
        info.tokens = ids;
        info.n_tokens = (int64_t)n_ids;
        info.tokenizer = tok;
        info.n_threads = (int)a->threads;
        if (lp_store_begin_run(store, &info, &sopts, &run_id, &err) != LP_OK)
            goto fail;
    }

    lp_leak_model_opts mo;
    lp_leak_model_opts_init(&mo);
    mo.fault = a->fault;
    mo.window = a->window;
    mo.pool = pool;
    mo.n_random_cuts = a->cuts;
    mo.seed = (uint64_t)a->seed;
    mo.max_listed = a->max_listed;
    mo.record = store ? lp_store_observer(store) : NULL;
    double t0 = now_seconds();
    if (lp_leak_check_model(model, ids, (int64_t)n_ids, &mo, &rep, &err) != LP_OK) {
        if (store)
            lp_store_abort_run(store);
        goto fail;
    }
    double seconds = now_seconds() - t0;
    if (store) {
        if (lp_store_add_leak_checks(store, rep.checks, rep.n_checks, &err) != LP_OK ||
            lp_store_end_run(store, seconds, &err) != LP_OK) {
            lp_store_abort_run(store);
            goto fail;
        }
    }

    if (a->json) {
        json_t *root = json_object();
        json_object_set_new(root, "model", json_string(a->model));
        json_object_set_new(root, "n_tokens", json_integer((json_int_t)n_ids));
        json_object_set_new(root, "inject", json_string(lp_mask_fault_name(a->fault)));
        json_object_set_new(root, "window", json_integer(a->window));
        json_object_set_new(root, "threads", json_integer(a->threads));
        json_object_set_new(root, "isa", json_string(lp_isa_name(lp_kernels_isa())));
        if (run_id)
            json_object_set_new(root, "run_id", json_integer(run_id));
        json_object_set_new(root, "passed", json_boolean(rep.passed));
        json_object_set_new(root, "diagnosis", json_string(rep.diagnosis));
        json_object_set_new(root, "leak_count", json_integer(rep.leak_count));
        json_object_set_new(root, "blocked_count", json_integer(rep.blocked_count));
        json_object_set_new(root, "nan_rows", json_integer(rep.nan_rows));
        json_t *leaks = json_array();
        for (int64_t i = 0; i < rep.n_leaks_listed; i++) {
            const lp_leak_model_coord *c = &rep.leaks[i];
            json_t *o = json_object();
            json_object_set_new(o, "batch", json_integer(c->batch));
            json_object_set_new(o, "layer", json_integer(c->layer));
            json_object_set_new(o, "head", json_integer(c->head));
            json_object_set_new(o, "query", json_integer(c->query));
            json_object_set_new(o, "key", json_integer(c->key));
            json_object_set_new(o, "prob", json_real((double)c->prob));
            json_array_append_new(leaks, o);
        }
        json_object_set_new(root, "leaks", leaks);
        json_t *pert = json_object();
        json_t *cuts = json_array(), *diffs = json_array();
        for (int64_t i = 0; i < rep.n_cuts; i++)
            json_array_append_new(cuts, json_integer(rep.cuts[i]));
        for (int l = 0; l <= rep.n_layers; l++)
            json_array_append_new(diffs, num_or_null(rep.layer_max_diff[l]));
        json_object_set_new(pert, "cuts", cuts);
        json_object_set_new(pert, "layer_max_abs_diff", diffs);
        json_object_set_new(pert, "bitwise", json_boolean(rep.bitwise));
        json_object_set_new(pert, "tolerance", json_real(rep.tolerance));
        if (rep.first_diff_layer != -2) {
            json_object_set_new(pert, "first_layer", json_integer(rep.first_diff_layer));
            json_object_set_new(pert, "first_position", json_integer(rep.first_diff_position));
            json_object_set_new(pert, "cut", json_integer(rep.first_diff_cut));
        }
        json_object_set_new(root, "perturbation", pert);
        json_t *align = json_object();
        json_object_set_new(align, "loss_next", json_real(rep.loss_next));
        json_object_set_new(align, "loss_same", json_real(rep.loss_same));
        json_object_set_new(align, "flagged", json_boolean(rep.alignment_flagged));
        json_object_set_new(root, "alignment", align);
        json_t *checks = json_array();
        for (int64_t i = 0; i < rep.n_checks; i++) {
            const lp_leak_check *c = &rep.checks[i];
            json_t *o = json_object();
            json_object_set_new(o, "check", json_string(c->name));
            json_object_set_new(o, "passed", json_boolean(c->passed));
            json_object_set_new(o, "layer", json_integer(c->layer));
            json_object_set_new(o, "position", json_integer(c->position));
            json_object_set_new(o, "max_abs_diff", num_or_null(c->max_abs_diff));
            json_object_set_new(o, "detail", json_string(c->detail));
            json_array_append_new(checks, o);
        }
        json_object_set_new(root, "checks", checks);
        char *text = json_dumps(root, JSON_INDENT(2));
        json_decref(root);
        if (!text) {
            lp_error_set(&err, LP_ERR_NOMEM, "out of memory writing JSON");
            goto fail;
        }
        printf("%s\n", text);
        free(text);
    } else {
        printf("%s: %zu tokens, %lld layers x %lld heads, %.2f s, %lld thread%s, isa %s, inject "
               "%s%s",
               a->model, n_ids, (long long)arch->n_layers, (long long)arch->n_heads, seconds,
               (long long)a->threads, a->threads == 1 ? "" : "s", lp_isa_name(lp_kernels_isa()),
               lp_mask_fault_name(a->fault), run_id ? "" : "\n");
        if (run_id)
            printf(", run %lld in %s\n", (long long)run_id, a->db);
        char text[256];
        char cut_list[96] = "";
        size_t used = 0;
        for (int64_t i = 0; i < rep.n_cuts && used + 24 < sizeof cut_list; i++)
            used += (size_t)snprintf(cut_list + used, sizeof cut_list - used, "%s%lld",
                                     i ? ", " : "", (long long)rep.cuts[i]);
        double worst = 0.0;
        for (int l = 0; l <= rep.n_layers; l++)
            worst = rep.layer_max_diff[l] > worst ? rep.layer_max_diff[l] : worst;
        if (rep.bitwise)
            snprintf(text, sizeof text,
                     "cuts %s: hidden states of %lld layers and logits at positions <= cut "
                     "identical bit for bit",
                     cut_list, (long long)arch->n_layers);
        else
            snprintf(text, sizeof text,
                     "cuts %s: hidden states of %lld layers and logits at positions <= cut within "
                     "%.0e relative (MoE: max |diff| %.3g, expert GEMMs resize with routing)",
                     cut_list, (long long)arch->n_layers, rep.tolerance, worst);
        print_family(&rep, "perturbation", text);
        snprintf(text, sizeof text,
                 "no probability outside the mask; rows sum to 1 (max error %.2g); %lld NaN/Inf; "
                 "%lld fully masked rows",
                 rep.attn_max_row_err, (long long)rep.attn_nonfinite,
                 (long long)rep.attn_masked_rows);
        print_family(&rep, "attention_map", text);
        print_family(&rep, "structural",
                     "causal, window, decode and padded masks equal the definition cell by cell; "
                     "padded batch: clean maps, real tokens compute what the unpadded prompt does");
        snprintf(text, sizeof text, "loss with labels shifted %.3f nats, unshifted %.3f nats%s",
                 rep.loss_next, rep.loss_same,
                 rep.loss_next <= rep.loss_same ? "" : " (neither beats a uniform guess)");
        print_family(&rep, "alignment", text);
        if (rep.first_diff_layer != -2) {
            if (rep.first_diff_layer >= 0)
                printf("  first difference: layer %d, position %lld (cut %lld)\n",
                       rep.first_diff_layer, (long long)rep.first_diff_position,
                       (long long)rep.first_diff_cut);
            else
                printf("  first difference: logits, position %lld (cut %lld)\n",
                       (long long)rep.first_diff_position, (long long)rep.first_diff_cut);
        }
        if (rep.leak_count > 0) {
            printf("  leaking cells: %lld (blocked %lld)\n", (long long)rep.leak_count,
                   (long long)rep.blocked_count);
            for (int64_t i = 0; i < rep.n_leaks_listed; i++)
                printf("    batch %lld layer %d head %d query %lld key %lld p %.3g\n",
                       (long long)rep.leaks[i].batch, rep.leaks[i].layer, rep.leaks[i].head,
                       (long long)rep.leaks[i].query, (long long)rep.leaks[i].key,
                       (double)rep.leaks[i].prob);
        }
        if (rep.passed)
            printf("verdict: PASS (no position sees the future)\n");
        else
            printf("verdict: FAIL (%s)\n", rep.diagnosis);
    }
    rc = rep.passed ? LP_EXIT_OK : LP_EXIT_CHECK_FAILED;
    goto done;
fail:
    rc = lp_cli_fail(CMD, &err);
done:
    lp_leak_model_report_free(&rep);
    lp_store_close(store);
    if (pool)
        lp_pool_destroy(pool);
    if (tok)
        lp_tokenizer_close(tok);
    lp_model_close(model);
    free(ids);
    free(prompt_buf);
    return rc;
}

static int run_leak(int argc, char **argv)
{
    leak_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != LP_EXIT_OK)
        return rc;
    return a.mask ? run_mask(&a) : run_model(&a);
}

static const lp_cli_spec leak_spec = {
    .name = "leak",
    .summary = "prove that no position sees the future",
    .legacy_usage = usage,
};

const lp_command lp_command_leak = {&leak_spec, run_leak};
