/* A program outside loupe that links the installed libloupe: open a model, print its estimate,
 * record a trace of a few tokens with the store (trace/store/store.h). CI builds it through pkg-config against an
 * installed and then moved prefix (tests/cli/cli_install.sh):
 *
 *   cc -std=c11 loupe_example.c $(pkg-config --cflags --libs loupe) -o loupe_example
 *   ./loupe_example MODEL trace.db
 *
 * MODEL is anything lp_model_open reads (a model folder, .safetensors, .gguf, llama2.c .bin).
 * The tokens are fixed ids (1..8, wrapped to the vocabulary), so no tokenizer is needed.
 * Exit status: 0 ok, 2 an error (one line on stderr).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/version.h"
#include "estimate/estimate.h"
#include "trace/store/store.h"
#include "trace/trace.h"

#define N_TOKENS 8

static int fail(const char *what, const lp_error *err)
{
    fprintf(stderr, "loupe_example: %s: %s\n", what, err->msg);
    return 2;
}

/* The analytic estimate for one sequence of the model's trained context. */
static int print_estimate(const lp_arch *arch)
{
    lp_error err = {0};
    lp_est_options opts;
    lp_est_options_init(&opts);
    lp_est_report *rep = malloc(sizeof *rep); /* large: per-layer tables inside */
    if (!rep) {
        fprintf(stderr, "loupe_example: out of memory\n");
        return 2;
    }
    int status = 0;
    if (lp_estimate(arch, &opts, rep, &err) != LP_OK)
        status = fail("estimate", &err);
    else
        lp_est_print_text(stdout, arch, rep, 0);
    free(rep);
    return status;
}

/* One forward pass over N_TOKENS ids with the store recording it as a run of DB. */
static int record_trace(const lp_model *model, const char *model_path, const char *db)
{
    const lp_arch *arch = lp_model_arch(model);
    int32_t ids[N_TOKENS];
    for (int i = 0; i < N_TOKENS; i++)
        ids[i] = (int32_t)((i + 1) % arch->vocab_size);
    lp_batch batch = lp_batch_single(ids, N_TOKENS);

    lp_error err = {0};
    lp_store *store;
    if (lp_store_open(db, &store, &err) != LP_OK)
        return fail(db, &err);
    lp_store_opts sopts;
    lp_store_opts_init(&sopts);
    lp_run_info info = {0};
    info.model_path = model_path;
    info.model_format = lp_weights_format_name(lp_weights_format_of(lp_model_weights(model)));
    info.arch = arch;
    info.tokens = ids;
    info.n_tokens = N_TOKENS;
    info.n_threads = 1;
    int64_t run_id;
    int status = 0;
    if (lp_store_begin_run(store, &info, &sopts, &run_id, &err) != LP_OK) {
        status = fail(db, &err);
    } else {
        lp_forward_opts fopts;
        lp_forward_opts_init(&fopts);
        fopts.observer = lp_store_observer(store);
        if (lp_forward(model, &batch, &fopts, &err) != LP_OK) {
            lp_store_abort_run(store);
            status = fail("forward pass", &err);
        } else if (lp_store_end_run(store, 0.0, &err) != LP_OK) {
            status = fail(db, &err);
        } else {
            printf("recorded run %lld: %d tokens, %lld layers x %lld heads into %s\n",
                   (long long)run_id, N_TOKENS, (long long)arch->n_layers,
                   (long long)arch->n_heads, db);
        }
    }
    lp_store_close(store);
    return status;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: loupe_example MODEL DB\n");
        return 2;
    }
    printf("built against loupe %s, running libloupe %s (git %s)\n", LP_VERSION, lp_version(),
           lp_version_revision());
    lp_error err = {0};
    lp_model *model;
    if (lp_model_open(argv[1], &model, &err) != LP_OK)
        return fail(argv[1], &err);
    int status = print_estimate(lp_model_arch(model));
    if (status == 0)
        status = record_trace(model, argv[1], argv[2]);
    lp_model_close(model);
    return status;
}
