/* `loupe ablate`: what each attention head is worth, measured by running the model without it;
 * pruning plans and activation patching on top. */
#define _POSIX_C_SOURCE 200809L
#include "trace/trace.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cli/cli.h"
#include "core/cli/input.h"
#include "trace/analysis/analysis.h"
#include "trace/store/store.h"

#define CMD "ablate"

typedef struct ablate_opts {
    lp_input_opts input;
    int method;
    int64_t prune;
    bool iterative;
    const char *patch_tokens;
    const char *patch_prompt;
    const char *db;
    bool json;
    int64_t threads;
} ablate_opts;

static const char *const method_names[] = {"zero", "mean", NULL};

static const lp_option ablate_options[] = {
    LP_OPT_TABLE_OF(ablate_opts, input, lp_input_options),
    LP_OPT_ENUM_OF(ablate_opts, method, "method", method_names,
                   "replace a head's output by zeros (default) or by its mean over the\n"
                   "clean run's positions"),
    LP_OPT_INT_OF(ablate_opts, prune, "prune", "K", 1, 1 << 20,
                  "a pruning plan: the K heads with the smallest delta removed together"),
    LP_OPT_FLAG_OF(ablate_opts, iterative, "iterative",
                   "--prune re-scores every remaining head after each removal"),
    LP_OPT_STRING_OF(ablate_opts, patch_tokens, "patch-from-tokens", "IDS",
                     "activation patching: each head's output from this corrupted prompt\n"
                     "(token ids, same length) instead of zeros"),
    LP_OPT_STRING_OF(ablate_opts, patch_prompt, "patch-from", "TEXT",
                     "activation patching from a corrupted text prompt (same token count)"),
    LP_OPT_RUN_DB_OF(ablate_opts, db),
    LP_OPT_JSON_OF(ablate_opts, json),
    LP_OPT_THREADS_OF(ablate_opts, threads),
};

LP_CLI_COMMAND(ablate, run_ablate, ablate_options, 1, 1,
               "what each head is worth: ablation, pruning plans, activation patching",
               "MODEL (--prompt TEXT | --prompt-file FILE | --tokens IDS) [options]",
    .description =
        "For every (layer, query head), replace that head's attention output (its head_dim\n"
        "slice entering the output projection) at every position and recompute everything\n"
        "after it; record the mean next-token NLL and its delta from the clean run. Under GQA\n"
        "the shared K/V head is untouched; o_proj's bias stays. Ablating a head of layer l\n"
        "resumes from the clean residual entering l, so earlier layers are not recomputed:\n"
        "the work done is printed against the naive L x H full passes.",
    .notes = "Stored as a run of kind 'ablate' (head_importance, pruning_plan, token_nll).\n"
             "Exit status: 0 ok, 2 bad usage or input.");

typedef struct plan {
    int64_t k;
    int64_t *layers, *heads;
    double *nll;
    lp_prune_savings save;
} plan;

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* The corrupted prompt for patching: ids or text, the same length as the clean one. */
static lp_status load_patch(const ablate_opts *o, const char *model_path, const lp_model *model,
                            const lp_input *clean, lp_input *patch, lp_error *err)
{
    lp_input_opts po = {0};
    po.tokens = o->patch_tokens;
    po.prompt = o->patch_prompt;
    po.tokenizer = o->input.tokenizer;
    lp_status st = lp_input_load_for_weights(&po, model_path, lp_model_weights(model), NULL,
                                             patch, err);
    if (st != LP_OK)
        return lp_error_prefix(err, "--patch-from: ");
    if (patch->n_ids != clean->n_ids)
        return lp_error_set(err, LP_ERR_USAGE,
                            "--patch-from: the corrupted prompt has %zu tokens, the clean one %zu "
                            "(patching needs the same length)",
                            patch->n_ids, clean->n_ids);
    lp_batch b = lp_batch_single(patch->ids, (int64_t)patch->n_ids);
    return lp_forward_check(model, &b, err);
}

static lp_status store_results(lp_store *store, const lp_ablation *ab, const plan *pl,
                               const ablate_opts *o, const int32_t *ids, lp_error *err)
{
    lp_status st = lp_store_add_token_nll(store, ids, ab->clean_pos, ab->T, err);
    if (st == LP_OK)
        st = lp_store_add_head_importance(store, lp_ablate_method_name(ab->method), ab->n_layers,
                                          ab->n_heads, ab->nll, ab->clean_nll, err);
    if (st == LP_OK && pl->k > 0)
        st = lp_store_add_pruning_plan(store, pl->layers, pl->heads, pl->nll, pl->k,
                                       o->iterative, err);
    return st;
}

static int print_json(const lp_ablation *ab, const plan *pl, int64_t run_id)
{
    json_t *root = json_object();
    json_object_set_new(root, "run_id", json_integer(run_id));
    json_object_set_new(root, "n_tokens", json_integer(ab->T));
    json_object_set_new(root, "clean_nll", json_real(ab->clean_nll));
    json_object_set_new(root, "method", json_string(lp_ablate_method_name(ab->method)));
    json_t *heads = json_array();
    for (int64_t i = 0; i < ab->n_layers * ab->n_heads; i++) {
        json_t *h = json_object();
        json_object_set_new(h, "layer", json_integer(i / ab->n_heads));
        json_object_set_new(h, "head", json_integer(i % ab->n_heads));
        json_object_set_new(h, "nll", json_real(ab->nll[i]));
        json_object_set_new(h, "delta", json_real(ab->nll[i] - ab->clean_nll));
        if (ab->method == LP_ABLATE_PATCH) {
            double span = ab->clean_diff - ab->corrupt_diff;
            json_object_set_new(h, "logit_diff", json_real(ab->patch_diff[i]));
            json_object_set_new(h, "restored",
                                span != 0 ? json_real((ab->clean_diff - ab->patch_diff[i]) / span)
                                          : json_null());
        }
        json_array_append_new(heads, h);
    }
    json_object_set_new(root, "heads", heads);
    if (pl->k > 0) {
        json_t *p = json_object(), *list = json_array(), *curve = json_array();
        for (int64_t k = 0; k < pl->k; k++) {
            json_t *pair = json_array();
            json_array_append_new(pair, json_integer(pl->layers[k]));
            json_array_append_new(pair, json_integer(pl->heads[k]));
            json_array_append_new(list, pair);
            json_array_append_new(curve, json_real(pl->nll[k]));
        }
        json_object_set_new(p, "heads", list);
        json_object_set_new(p, "nll", json_real(pl->nll[pl->k - 1]));
        json_object_set_new(p, "curve", curve);
        json_object_set_new(p, "params", json_integer(pl->save.params));
        json_object_set_new(p, "flops_per_token", json_real(pl->save.flops_per_token));
        json_object_set_new(p, "kv_groups", json_integer(pl->save.kv_groups));
        json_object_set_new(p, "kv_bytes_per_token", json_integer(pl->save.kv_bytes_per_token));
        json_object_set_new(root, "pruned", p);
    }
    json_object_set_new(root, "work_ratio", json_real(ab->work_flops / ab->naive_flops));
    return lp_cli_print_json(CMD, root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
}

static void print_text(const lp_ablation *ab, const plan *pl, const ablate_opts *o,
                       int64_t run_id, int64_t context)
{
    printf("clean nll %.6f over %lld tokens; %s ablation of %lld heads (run %lld in %s)\n",
           ab->clean_nll, (long long)ab->T, lp_ablate_method_name(ab->method),
           (long long)(ab->n_layers * ab->n_heads), (long long)run_id, o->db);
    printf("layer head        nll      delta%s\n",
           ab->method == LP_ABLATE_PATCH ? "   restored" : "");
    double span = ab->clean_diff - ab->corrupt_diff;
    for (int64_t i = 0; i < ab->n_layers * ab->n_heads; i++) {
        printf("%5lld %4lld %10.6f %+10.6f", (long long)(i / ab->n_heads),
               (long long)(i % ab->n_heads), ab->nll[i], ab->nll[i] - ab->clean_nll);
        if (ab->method == LP_ABLATE_PATCH && span != 0)
            printf(" %10.4f", (ab->clean_diff - ab->patch_diff[i]) / span);
        printf("\n");
    }
    printf("work: %.4g FLOPs, %.3f x the naive %lld full passes (%.4g FLOPs; one pass %.4g)\n",
           ab->work_flops, ab->work_flops / ab->naive_flops,
           (long long)(ab->n_layers * ab->n_heads), ab->naive_flops, ab->pass_flops);
    if (pl->k == 0)
        return;
    printf("pruning plan (%s): remove", o->iterative ? "iterative" : "by delta");
    for (int64_t k = 0; k < pl->k; k++)
        printf(" %lld.%lld", (long long)pl->layers[k], (long long)pl->heads[k]);
    printf("\nnll curve:");
    for (int64_t k = 0; k < pl->k; k++)
        printf(" %.6f", pl->nll[k]);
    printf("\nsaves %lld parameters (q and o of %lld heads, k and v of %lld whole KV groups), "
           "%.4g FLOPs per token at context %lld, %lld KV cache bytes per token (f16)\n",
           (long long)pl->save.params, (long long)pl->k, (long long)pl->save.kv_groups,
           pl->save.flops_per_token, (long long)context, (long long)pl->save.kv_bytes_per_token);
}

static void plan_free(plan *p)
{
    free(p->layers);
    free(p->heads);
    free(p->nll);
}

static int run_ablate(int argc, char **argv)
{
    ablate_opts o = {.db = "loupe.db", .method = LP_ABLATE_ZERO, .threads = lp_cpu_count()};
    const char *pos[LP_CLI_MAX_POSITIONAL];
    LP_CLI_PARSE_OR_RETURN(&ablate_spec, argc, argv, &o, pos, NULL);
    lp_error err = {0};
    lp_model *model = NULL;
    lp_pool *pool = NULL;
    lp_store *store = NULL;
    lp_input in = {0}, patch = {0};
    lp_ablation *ab = NULL;
    plan pl = {0};
    int64_t run_id = 0;
    bool patching = o.patch_tokens || o.patch_prompt;
    lp_status st = LP_OK;
    if (o.patch_tokens && o.patch_prompt)
        st = lp_error_set(&err, LP_ERR_USAGE, "give one of --patch-from, --patch-from-tokens");
    if (st == LP_OK && o.iterative && o.prune == 0)
        st = lp_error_set(&err, LP_ERR_USAGE, "--iterative needs --prune K");
    if (st == LP_OK)
        st = lp_model_open(pos[0], &model, &err);
    if (st == LP_OK)
        st = lp_input_load_for_weights(&o.input, pos[0], lp_model_weights(model), NULL, &in, &err);
    lp_batch batch = lp_batch_single(in.ids, (int64_t)in.n_ids);
    if (st == LP_OK)
        st = lp_forward_check(model, &batch, &err);
    if (st == LP_OK && patching)
        st = load_patch(&o, pos[0], model, &in, &patch, &err);
    const lp_arch *arch = model ? lp_model_arch(model) : NULL;
    if (st == LP_OK && o.prune > arch->n_layers * arch->n_heads)
        st = lp_error_set(&err, LP_ERR_RANGE, "--prune %lld: the model has %lld heads",
                          (long long)o.prune, (long long)(arch->n_layers * arch->n_heads));
    if (st == LP_OK && in.n_ids < 2)
        st = lp_error_set(&err, LP_ERR_USAGE, "the prompt is 1 token: need 2 to score one");
    if (st == LP_OK && o.threads > 1)
        st = lp_pool_create((int)o.threads, &pool, &err);
    if (st == LP_OK)
        st = lp_store_open(o.db, &store, &err);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    lp_store_opts sopts;
    lp_store_opts_init(&sopts);
    sopts.maps = LP_MAPS_NONE;
    if (st == LP_OK) {
        lp_run_info info = lp_run_info_for_model("ablate", pos[0], model, in.text, in.ids,
                                                 (int64_t)in.n_ids, in.tokenizer, (int)o.threads);
        st = lp_store_begin_run(store, &info, &sopts, &run_id, &err);
    }
    if (st == LP_OK) {
        lp_ablation_opts ao = {patching ? LP_ABLATE_PATCH : (lp_ablate_method)o.method, pool,
                               patching ? NULL : lp_store_observer(store), patch.ids};
        st = lp_ablate_heads(model, in.ids, (int64_t)in.n_ids, &ao, &ab, &err);
    }
    if (st == LP_OK && o.prune > 0) {
        pl.k = o.prune;
        pl.layers = malloc((size_t)pl.k * sizeof(int64_t));
        pl.heads = malloc((size_t)pl.k * sizeof(int64_t));
        pl.nll = malloc((size_t)pl.k * sizeof(double));
        st = pl.layers && pl.heads && pl.nll
                 ? lp_prune_plan(model, in.ids, ab, pl.k, o.iterative, pool, pl.layers, pl.heads,
                                 pl.nll, &err)
                 : lp_error_set(&err, LP_ERR_NOMEM, "out of memory");
        if (st == LP_OK)
            lp_prune_savings_of(arch, pl.layers, pl.heads, pl.k, (int64_t)in.n_ids, 2, &pl.save);
    }
    if (st == LP_OK)
        st = store_results(store, ab, &pl, &o, in.ids, &err);
    if (st == LP_OK)
        st = lp_store_end_run(store, seconds_since(&t0), &err);
    else if (run_id > 0)
        lp_store_abort_run(store);
    int rc = LP_EXIT_OK;
    if (st == LP_OK && o.json)
        rc = print_json(ab, &pl, run_id);
    else if (st == LP_OK)
        print_text(ab, &pl, &o, run_id, (int64_t)in.n_ids);
    plan_free(&pl);
    lp_ablation_free(ab);
    lp_store_close(store);
    if (pool)
        lp_pool_destroy(pool);
    lp_input_free(&patch);
    lp_input_free(&in);
    lp_model_close(model);
    return st == LP_OK ? rc : lp_cli_fail(CMD, &err);
}
