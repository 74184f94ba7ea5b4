/* `loupe trace`: run the forward pass on a prompt and record every head into SQLite. */
#define _POSIX_C_SOURCE 200809L
#include "trace/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/checked.h"
#include "core/cli/cli.h"
#include "core/cli/input.h"
#include "core/mapfile.h"
#include "estimate/estimate.h"
#include "inspect/tokenizer/tokenizer.h"
#include "trace/analysis/analysis.h"
#include "trace/store/store.h"

#define CMD "trace"
#define SUMMARY_TOP 5

typedef struct trace_opts {
    lp_input_opts input;
    const char *db;
    const char *layers;
    const char *heads;
    int maps;   /* lp_maps_dtype: the index in maps_names */
    int logits; /* lp_logits_mode: the index in logits_names */
    int64_t top_k;
    int64_t predictions;
    int64_t threads;
    int64_t local_window;
    uint64_t max_map_bytes;
    /* generation */
    int64_t generate;
    double temperature;
    double top_p;
    int64_t seed;
    bool stop_at_eos;
    int kv_dtype; /* index in kv_dtype_names; 0 = the default */
    int matvec;   /* index in matvec_names: 0 int8 activations (the default), 1 float */
    bool logit_lens;
    /* datasets */
    const char *prompts;
    const char *dataset;
    const char *shard;
    int64_t batch_size;
    int padding; /* 0 right, 1 left */
} trace_opts;

static const char *const padding_names[] = {"right", "left", NULL};

static const char *const kv_dtype_names[] = {"auto", "f32", "f16", "bf16", "q8_0", NULL};
static const char *const matvec_names[] = {"int8", "float", NULL};

static const char *const maps_names[] = {"f16", "f32", "none", NULL};
static const char *const logits_names[] = {"topk", "full", NULL};

static const lp_option trace_options[] = {
    LP_OPT_TABLE_OF(trace_opts, input, lp_input_options),
    LP_OPT_RUN_DB_OF(trace_opts, db),
    LP_OPT_STRING_OF(trace_opts, layers, "layers", "LIST",
                     "layers whose attention maps are stored: 0,2-4 or all (default)"),
    LP_OPT_STRING_OF(trace_opts, heads, "heads", "LIST", "heads whose maps are stored (default all)"),
    LP_OPT_ENUM_OF(trace_opts, maps, "maps", maps_names,
                   "map precision (default f16); head statistics are always stored"),
    LP_OPT_ENUM_OF(trace_opts, logits, "logits", logits_names,
                   "top-k predictions per position (default) or full f32 logits too"),
    LP_OPT_INT_OF(trace_opts, top_k, "top-k", "K", 1, 1000,
                  "predictions per position (default 5); with --generate: sample\n"
                  "among the K most likely tokens only (predictions: --predictions)"),
    LP_OPT_INT_OF(trace_opts, predictions, "predictions", "K", 1, 1000,
                  "predictions stored per position (default 5, or --top-k without --generate)"),
    LP_OPT_INT_OF(trace_opts, generate, "generate", "N", 0, 1 << 20,
                  "after the prompt, generate N tokens with a KV cache (each fed through too)"),
    LP_OPT_NUMBER_OF(trace_opts, temperature, "temperature", "T", 0, 1000,
                     "sample from softmax(logits / T) (default 0: greedy argmax)"),
    LP_OPT_NUMBER_OF(trace_opts, top_p, "top-p", "P", 1e-9, 1,
                     "sample from the smallest set of tokens whose probability reaches P (default 1)"),
    LP_OPT_INT_OF(trace_opts, seed, "seed", "S", 0, 9007199254740992.0,
                  "sampling seed (default 0); the same seed draws the same tokens"),
    LP_OPT_FLAG_OF(trace_opts, stop_at_eos, "stop-at-eos",
                   "stop once the model's eos_token_id was generated (and fed through)"),
    LP_OPT_FLAG_OF(trace_opts, logit_lens, "logit-lens",
                   "also read every layer's residual through the final norm and LM head\n"
                   "(tables logit_lens, logit_lens_layers; not with --generate)"),
    LP_OPT_STRING_OF(trace_opts, prompts, "prompts", "FILE",
                     "JSON lines ({\"text\": ...} or {\"tokens\": [...]}, optional \"id\"): one\n"
                     "run per prompt, a named dataset with aggregated head statistics"),
    LP_OPT_STRING_OF(trace_opts, dataset, "dataset", "NAME",
                     "the dataset's name (default: the prompts file's name)"),
    LP_OPT_STRING_OF(trace_opts, shard, "shard", "I/N",
                     "with --prompts: only every N-th prompt from index I (0 <= I < N)"),
    LP_OPT_INT_OF(trace_opts, batch_size, "batch-size", "B", 1, 4096,
                  "with --prompts: run B prompts together, padded to the longest; each is\n"
                  "still stored as its own run"),
    LP_OPT_ENUM_OF(trace_opts, padding, "padding", padding_names,
                   "where a batch pads its shorter prompts (default right)"),
    LP_OPT_ENUM_OF(trace_opts, kv_dtype, "kv-dtype", kv_dtype_names,
                   "KV cache type (default auto: f16 for quantized weights, else theirs)"),
    LP_OPT_ENUM_OF(trace_opts, matvec, "matvec", matvec_names,
                   "with --generate: the one-token products of Q8_0/Q4_K/MXFP4 weights read\n"
                   "x as int8 (default, as llama.cpp) or float (the prefill's arithmetic)"),
    LP_OPT_INT_OF(trace_opts, threads, "threads", "N", 1, LP_CLI_MAX_THREADS,
                  "worker threads (default: all CPUs); results are repeatable per N"),
    LP_OPT_INT_OF(trace_opts, local_window, "local-window", "W", 1, (double)(INT64_MAX / 2),
                  "head_stats.local_frac counts keys within W positions (default 8)"),
    LP_OPT_SIZE_OF(trace_opts, max_map_bytes, "max-map-bytes", "SIZE",
                   "refuse a run whose stored maps would exceed SIZE (default 4GiB;\n"
                   "maps grow with tokens squared: narrow --layers/--heads or --maps none)"),
};

LP_CLI_COMMAND(trace, run_trace, trace_options, 1, 1,
               "run the forward pass and record attention into SQLite",
               "MODEL (--prompt TEXT | --prompt-file FILE | --tokens IDS) [options]",
    .description =
        "Run the model's forward pass on the CPU and record what every head did into a SQLite\n"
        "database (schema: trace/store/schema.sql).\n"
        "\n"
        "MODEL is a model folder, .safetensors, .gguf or llama2.c .bin (llama2.c checkpoints\n"
        "need a tokenizer beside them, or --tokenizer, for text).",
    .notes = "Prints the run id, token count, time and the last position's top predictions.\n"
             "Exit status: 0 ok, 2 bad usage or input.");

/* ---- checks before a run row exists ----------------------------------------------------------- */

/* Maps grow with tokens squared: a long prompt with every head selected would fill the disk (and
 * the store's memory) long before the pass ends, so the run is refused before it starts. */
static lp_status check_map_budget(const trace_opts *o, const lp_arch *arch, const bool *layer_sel,
                                  const bool *head_sel, int64_t n_tokens, lp_error *err)
{
    if (o->maps == LP_MAPS_NONE)
        return LP_OK;
    uint64_t n_maps = 0;
    for (int64_t l = 0; l < arch->n_layers; l++)
        for (int64_t h = 0; h < arch->n_heads; h++)
            n_maps += layer_sel[l] && head_sel[h];
    uint64_t cells = 0, bytes = 0;
    uint64_t elem = o->maps == LP_MAPS_F32 ? 4 : 2;
    bool overflow = !lp_mul_u64((uint64_t)n_tokens, (uint64_t)n_tokens, &cells) ||
                    !lp_mul_u64(cells, elem, &bytes) || !lp_mul_u64(bytes, n_maps, &bytes);
    if (overflow || bytes > o->max_map_bytes) {
        char want[32], limit[32];
        return lp_error_set(err, LP_ERR_RANGE,
                            "%lld tokens x %llu maps would store %s of attention maps, over "
                            "--max-map-bytes %s; narrow --layers/--heads, use --maps none, or "
                            "raise the limit",
                            (long long)n_tokens, (unsigned long long)n_maps,
                            overflow ? "more than 2^64 bytes"
                                     : lp_format_bytes(bytes, want, sizeof want),
                            lp_format_bytes(o->max_map_bytes, limit, sizeof limit));
    }
    return LP_OK;
}

/* What one run needs, gathered before anything is recorded. */
typedef struct trace_job {
    const char *model_path;
    lp_model *model;
    lp_input in;
    bool *layer_sel, *head_sel; /* [n_layers], [n_heads] */
    lp_pool *pool;
    lp_store *store;
    /* generation */
    int32_t *seq;     /* [prompt + generate] */
    int64_t n_seq;
    uint64_t kv_bytes;
    int64_t kv_rebuilt_at; /* longrope's switch: the length the cache was rebuilt at, or -1 */
    lp_dtype kv_dtype;
    /* --prompts: the run's dataset, prompt index and id */
    const char *dataset;
    int64_t prompt_index;
    const char *prompt_id;
} trace_job;

static void job_free(trace_job *j)
{
    lp_store_close(j->store);
    if (j->pool)
        lp_pool_destroy(j->pool);
    lp_input_free(&j->in);
    lp_model_close(j->model);
    free(j->layer_sel);
    free(j->head_sel);
    free(j->seq);
}

static lp_status select_maps(trace_job *j, const trace_opts *o, lp_error *err)
{
    const lp_arch *arch = lp_model_arch(j->model);
    j->layer_sel = malloc((size_t)arch->n_layers * sizeof(bool));
    j->head_sel = malloc((size_t)arch->n_heads * sizeof(bool));
    if (!j->layer_sel || !j->head_sel)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    if (lp_parse_index_list(o->layers, arch->n_layers, j->layer_sel, err) != LP_OK) {
        lp_error_prefix(err, "--layers ");
        return LP_ERR_USAGE;
    }
    if (lp_parse_index_list(o->heads, arch->n_heads, j->head_sel, err) != LP_OK) {
        lp_error_prefix(err, "--heads ");
        return LP_ERR_USAGE;
    }
    return check_map_budget(o, arch, j->layer_sel, j->head_sel, (int64_t)j->in.n_ids + o->generate,
                            err);
}

/* Model, tokens, selection, threads, database: every refusal happens here, before a run row. */
static lp_status prepare(trace_job *j, const trace_opts *o, lp_error *err)
{
    lp_status st = lp_model_open(j->model_path, &j->model, err);
    if (st == LP_OK)
        st = lp_input_load_for_weights(&o->input, j->model_path, lp_model_weights(j->model),
                                       NULL, &j->in, err);
    /* Checked before a run row exists, so bad ids never leave a failed run behind. */
    lp_batch batch = lp_batch_single(j->in.ids, (int64_t)j->in.n_ids);
    if (st || (st = lp_forward_check(j->model, &batch, err)) || (st = select_maps(j, o, err)))
        return st;
    if (o->generate > 0 && o->logit_lens)
        return lp_error_set(err, LP_ERR_USAGE, "--logit-lens reads one prefill: not with --generate");
    if (o->generate > 0 && o->stop_at_eos && lp_model_arch(j->model)->eos_token_id < 0)
        return lp_error_set(err, LP_ERR_USAGE, "--stop-at-eos: %s names no eos_token_id",
                            j->model_path);
    if (o->generate > 0) {
        j->kv_dtype = o->kv_dtype > 0 ? lp_dtype_from_name(kv_dtype_names[o->kv_dtype])
                                      : lp_kv_default_dtype(j->model);
        j->seq = malloc((j->in.n_ids + (size_t)o->generate) * sizeof *j->seq);
        if (!j->seq)
            return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    }
    if (o->threads > 1 && (st = lp_pool_create((int)o->threads, &j->pool, err)))
        return st;
    return lp_store_open(o->db, &j->store, err);
}

/* ---- the pass --------------------------------------------------------------------------------- */

/* Passes everything to the store and keeps the last position's logits for the summary. */
typedef struct tee_ctx {
    const lp_observer *store;
    int64_t last_pos;
    lp_prediction top[SUMMARY_TOP];
    int64_t n_top;
    double t0;
    int64_t n_tokens;
    int64_t latest;
    lp_logit_lens *lens; /* --logit-lens, else NULL */
} tee_ctx;

static bool tee_want(void *ctx, const lp_site *site)
{
    tee_ctx *t = ctx;
    const lp_observer *lens = t->lens ? lp_logit_lens_observer(t->lens) : NULL;
    return site->kind == LP_SITE_LOGITS || t->store->want(t->store->ctx, site) ||
           (lens && lens->want(lens->ctx, site));
}

static lp_status tee_observe(void *ctx, const lp_site *site, const lp_view *view, lp_error *err)
{
    tee_ctx *t = ctx;
    /* last_pos -1 (generation): the latest position seen */
    int64_t last = view->row0 + view->rows - 1;
    bool keep = last == t->last_pos || (t->last_pos < 0 && last > t->latest);
    if (site->kind == LP_SITE_LOGITS && site->batch == 0 && keep) {
        t->latest = last;
        t->n_top = lp_top_k(view->data + (view->rows - 1) * view->stride, view->cols, SUMMARY_TOP,
                            t->top);
    }
    const lp_observer *lens = t->lens ? lp_logit_lens_observer(t->lens) : NULL;
    lp_status st = LP_OK;
    if (lens && lens->want(lens->ctx, site))
        st = lens->observe(lens->ctx, site, view, err);
    if (st == LP_OK && t->store->want(t->store->ctx, site))
        st = t->store->observe(t->store->ctx, site, view, err);
    return st;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void progress(void *ctx, int64_t batch, int layer, int n_layers)
{
    tee_ctx *t = ctx;
    (void)batch;
    double elapsed = now_seconds() - t->t0;
    double done = (double)(layer + 1) / (double)n_layers;
    double tok_s = elapsed > 0 ? (double)t->n_tokens * done / elapsed : 0.0;
    double eta = done > 0 ? elapsed * (1.0 - done) / done : 0.0;
    fprintf(stderr, "\rloupe trace: layer %d/%d  %.0f tokens/s  ETA %.1f s   ", layer + 1, n_layers,
            tok_s, eta);
    if (layer + 1 == n_layers)
        fprintf(stderr, "\r%60s\r", "");
    fflush(stderr);
}

/* A generation: prefill and decode steps through the store, the generated tokens recorded. */
static lp_status record_generation(trace_job *j, const trace_opts *o, const lp_forward_opts *fopts,
                                   tee_ctx *tee, double *seconds, lp_error *err)
{
    lp_generate_opts gen;
    lp_generate_opts_init(&gen);
    gen.n_new = o->generate;
    gen.temperature = o->temperature;
    gen.top_k = o->top_k; /* 0 when not given: every token */
    gen.top_p = o->top_p;
    gen.seed = (uint64_t)o->seed;
    gen.stop_id = o->stop_at_eos ? (int32_t)lp_model_arch(j->model)->eos_token_id : -1;
    gen.kv_dtype = j->kv_dtype;
    lp_forward_opts gen_fopts = *fopts;
    gen_fopts.int8_activations = o->matvec == 0;
    lp_status st = lp_generate(j->model, j->in.ids, (int64_t)j->in.n_ids, &gen, &gen_fopts, j->seq,
                               &j->n_seq, &j->kv_bytes, &j->kv_rebuilt_at, err);
    if (st == LP_OK)
        st = lp_store_set_generated(j->store, j->seq, (int64_t)j->in.n_ids, j->n_seq, j->kv_bytes,
                                    lp_dtype_name(j->kv_dtype), err);
    if (st == LP_OK && j->kv_rebuilt_at >= 0)
        st = lp_store_set_kv_rebuilt(j->store, j->kv_rebuilt_at, err);
    if (st != LP_OK) {
        lp_store_abort_run(j->store);
        return st;
    }
    *seconds = now_seconds() - tee->t0;
    return lp_store_end_run(j->store, *seconds, err);
}

/* The run: its row, the pass through the store (and the summary's tee), the commit. */
static void store_opts_of(const trace_job *j, const trace_opts *o, lp_store_opts *sopts)
{
    lp_store_opts_init(sopts);
    sopts->maps = (lp_maps_dtype)o->maps;
    sopts->layers = j->layer_sel;
    sopts->heads = j->head_sel;
    sopts->logits = (lp_logits_mode)o->logits;
    sopts->top_k = o->predictions > 0                 ? o->predictions
                   : o->generate == 0 && o->top_k > 0 ? o->top_k
                                                      : 5;
    sopts->local_window = o->local_window;
    sopts->pool = j->pool;
}

static lp_status record(trace_job *j, const trace_opts *o, tee_ctx *tee, int64_t *run_id,
                        double *seconds, lp_error *err)
{
    lp_store_opts sopts;
    store_opts_of(j, o, &sopts);
    sopts.seq_len = o->generate > 0 ? (int64_t)j->in.n_ids + o->generate : 0;
    lp_run_info info = lp_run_info_for_model("trace", j->model_path, j->model, j->in.text,
                                             j->in.ids, (int64_t)j->in.n_ids, j->in.tokenizer,
                                             (int)o->threads);
    info.dataset = j->dataset;
    info.prompt_index = j->prompt_index;
    info.prompt_id = j->prompt_id;
    lp_status st = lp_store_begin_run(j->store, &info, &sopts, run_id, err);
    if (st != LP_OK)
        return st;
    lp_logit_lens *lens = NULL;
    if (o->logit_lens && (st = lp_logit_lens_create(j->model, j->in.ids, (int64_t)j->in.n_ids,
                                                    sopts.top_k, j->pool, &lens, err))) {
        lp_store_abort_run(j->store);
        return st;
    }
    *tee = (tee_ctx){lp_store_observer(j->store), o->generate > 0 ? -1 : (int64_t)j->in.n_ids - 1,
                     {{0, 0, 0}}, 0, now_seconds(), (int64_t)j->in.n_ids, -1, lens};
    lp_observer obs = {tee, tee_want, tee_observe};
    lp_forward_opts fopts;
    lp_forward_opts_init(&fopts);
    fopts.observer = &obs;
    fopts.pool = j->pool;
    fopts.local_window = o->local_window;
    if (isatty(STDERR_FILENO) && o->generate == 0) {
        fopts.progress = progress;
        fopts.progress_ctx = tee;
    }
    if (o->generate > 0)
        return record_generation(j, o, &fopts, tee, seconds, err);
    lp_batch batch = lp_batch_single(j->in.ids, (int64_t)j->in.n_ids);
    st = lp_forward(j->model, &batch, &fopts, err);
    if (st == LP_OK && lens)
        st = lp_store_add_logit_lens(j->store, lens->n_layers, lens->T, lens->k, lens->token,
                                     lens->prob, lens->layer_nll, err);
    lp_logit_lens_free(lens);
    tee->lens = NULL;
    if (st != LP_OK) {
        lp_store_abort_run(j->store);
        return st;
    }
    *seconds = now_seconds() - tee->t0;
    return lp_store_end_run(j->store, *seconds, err);
}

/* ---- the summary ------------------------------------------------------------------------------ */

/* A piece made printable for the one-line summary: quotes and control bytes escaped. */
static void print_piece(const lp_tokenizer *tok, int32_t id)
{
    char *label = tok ? lp_tokenizer_label(tok, id) : NULL;
    if (!label) {
        printf("<%ld>", (long)id);
        return;
    }
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)label; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\x%02x", *p);
        else
            putchar(*p);
    }
    putchar('"');
    free(label);
}

/* The generated tokens and the cache: its bytes beside what loupe estimate predicts. */
static void print_generation(const trace_job *j, const trace_opts *o)
{
    size_t n_ids = j->in.n_ids;
    printf("generated %lld token%s:", (long long)(j->n_seq - (int64_t)n_ids),
           j->n_seq - (int64_t)n_ids == 1 ? "" : "s");
    for (int64_t t = (int64_t)n_ids; t < j->n_seq; t++) {
        printf(" ");
        print_piece(j->in.tokenizer, j->seq[t]);
    }
    printf("\n");
    lp_est_dtype ed;
    uint64_t est = 0;
    lp_error err = {0};
    bool have = lp_est_dtype_parse(lp_dtype_name(j->kv_dtype), &ed) &&
                lp_est_kv_bytes(lp_model_arch(j->model), &ed, 1,
                                (int64_t)n_ids + o->generate, &est, &err) == LP_OK;
    char got[32], want[32];
    printf("kv cache %s: %llu bytes (%s) for %lld positions; loupe estimate: %s\n",
           lp_dtype_name(j->kv_dtype), (unsigned long long)j->kv_bytes,
           lp_format_bytes(j->kv_bytes, got, sizeof got), (long long)((int64_t)n_ids + o->generate),
           have ? (snprintf(want, sizeof want, "%llu bytes", (unsigned long long)est), want)
                : "unavailable");
    if (lp_model_int8_matvec(j->model))
        printf("matvec: %s activations for the one-token products of quantized weights (--matvec)\n",
               o->matvec == 0 ? "int8" : "float");
    if (j->kv_rebuilt_at >= 0)
        printf("longrope: past the original context the cache was rebuilt at %lld positions with "
               "the long factors\n",
               (long long)j->kv_rebuilt_at);
}

static void print_summary(const trace_job *j, const trace_opts *o, const tee_ctx *tee,
                          int64_t run_id, double seconds)
{
    const lp_arch *arch = lp_model_arch(j->model);
    size_t n_ids = o->generate > 0 ? (size_t)j->n_seq : j->in.n_ids;
    printf("run %lld in %s: %zu token%s, %lld layers x %lld heads, %.3f s (%.0f tokens/s), %lld "
           "thread%s, isa %s\n",
           (long long)run_id, o->db, n_ids, n_ids == 1 ? "" : "s", (long long)arch->n_layers,
           (long long)arch->n_heads, seconds, seconds > 0 ? (double)n_ids / seconds : 0.0,
           (long long)o->threads, o->threads == 1 ? "" : "s", lp_isa_name(lp_kernels_isa()));
    if (o->generate > 0)
        print_generation(j, o);
    printf("next token after position %lld:", (long long)(o->generate > 0 ? j->n_seq - 1
                                                                          : (int64_t)n_ids - 1));
    for (int64_t k = 0; k < tee->n_top; k++) {
        printf(" ");
        print_piece(j->in.tokenizer, tee->top[k].token_id);
        printf(" %.3f", (double)tee->top[k].prob);
    }
    printf("\n");
}

/* ---- datasets: --prompts FILE ---------------------------------------------------------------- */

typedef struct dataset_job {
    lp_prompts prompts;
    int64_t shard_i, shard_n;
    int32_t **ids;  /* [prompts.n]: the ids of the prompts this shard runs, else NULL */
    size_t *n_ids;
    char name[256];
} dataset_job;

static void dataset_free(dataset_job *d)
{
    for (size_t i = 0; d->ids && i < d->prompts.n; i++)
        free(d->ids[i]);
    free(d->ids);
    free(d->n_ids);
    lp_prompts_free(&d->prompts);
}

static lp_status parse_shard(const char *text, int64_t *i, int64_t *n, lp_error *err)
{
    *i = 0;
    *n = 1;
    if (!text)
        return LP_OK;
    long long a, b;
    char tail;
    if (sscanf(text, "%lld/%lld%c", &a, &b, &tail) != 2 || b < 1 || a < 0 || a >= b)
        return lp_error_set(err, LP_ERR_USAGE, "--shard '%s': expected I/N with 0 <= I < N", text);
    *i = a;
    *n = b;
    return LP_OK;
}

/* The file, the shard's prompts encoded and checked (ids, lengths, map budget) before any run
 * row exists; the model, tokenizer, pool and database as for one prompt. */
static lp_status prepare_dataset(trace_job *j, dataset_job *d, const trace_opts *o, lp_error *err)
{
    lp_status st = lp_prompts_read(o->prompts, &d->prompts, err);
    if (st == LP_OK)
        st = parse_shard(o->shard, &d->shard_i, &d->shard_n, err);
    if (st != LP_OK)
        return st;
    const char *base = lp_path_basename(o->prompts);
    snprintf(d->name, sizeof d->name, "%s", o->dataset ? o->dataset : base);
    const char *first_text = NULL;
    for (size_t i = 0; i < d->prompts.n && !first_text; i++)
        first_text = d->prompts.items[i].text;
    lp_input_opts in_opts = o->input;
    if (!first_text)
        in_opts.tokens = "0"; /* token lines only: a tokenizer is optional */
    if ((st = lp_model_open(j->model_path, &j->model, err)) ||
        (st = lp_input_load_for_weights(&in_opts, j->model_path, lp_model_weights(j->model),
                                        first_text, &j->in, err)))
        return st;
    d->ids = calloc(d->prompts.n, sizeof *d->ids);
    d->n_ids = calloc(d->prompts.n, sizeof *d->n_ids);
    if (!d->ids || !d->n_ids)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    size_t longest = 0;
    for (size_t i = (size_t)d->shard_i; i < d->prompts.n; i += (size_t)d->shard_n) {
        const lp_prompt *pr = &d->prompts.items[i];
        if (pr->text) {
            if ((st = lp_tokenizer_encode(j->in.tokenizer, pr->text, pr->text_len, true,
                                          &d->ids[i], &d->n_ids[i], err)))
                break;
        } else if ((d->ids[i] = malloc(pr->n_tokens * sizeof(int32_t)))) {
            memcpy(d->ids[i], pr->tokens, pr->n_tokens * sizeof(int32_t));
            d->n_ids[i] = pr->n_tokens;
        } else {
            st = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
            break;
        }
        lp_batch batch = lp_batch_single(d->ids[i], (int64_t)d->n_ids[i]);
        if ((st = lp_forward_check(j->model, &batch, err))) {
            lp_error_prefix(err, "%s:%lld: ", o->prompts, (long long)pr->line);
            break;
        }
        longest = d->n_ids[i] > longest ? d->n_ids[i] : longest;
    }
    if (st != LP_OK)
        return st;
    /* the selection and budget of the longest prompt bound every run's */
    size_t keep_n = j->in.n_ids;
    j->in.n_ids = longest > 0 ? longest : 1;
    st = select_maps(j, o, err);
    j->in.n_ids = keep_n;
    if (st == LP_OK && o->generate > 0) {
        j->kv_dtype = o->kv_dtype > 0 ? lp_dtype_from_name(kv_dtype_names[o->kv_dtype])
                                      : lp_kv_default_dtype(j->model);
        if (!(j->seq = malloc((longest + (size_t)o->generate) * sizeof *j->seq)))
            st = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    }
    if (st == LP_OK && o->threads > 1)
        st = lp_pool_create((int)o->threads, &j->pool, err);
    if (st == LP_OK)
        st = lp_store_open(o->db, &j->store, err);
    if (st == LP_OK)
        st = lp_store_add_dataset(j->store, d->name, o->prompts, (int64_t)d->prompts.n, err);
    return st;
}

/* "loupe trace: prompts 3/10  412 tokens/s  ETA 4.1 s": redrawn on a terminal, else a line at
 * every tenth of the shard. */
static void dataset_progress(int64_t done, int64_t total, int64_t tokens, double elapsed)
{
    bool tty = isatty(STDERR_FILENO);
    int64_t every = total / 10 > 0 ? total / 10 : 1;
    if (!tty && done % every != 0 && done != total)
        return;
    double eta = done > 0 ? elapsed * (double)(total - done) / (double)done : 0.0;
    fprintf(stderr, "%sloupe trace: prompts %lld/%lld  %.0f tokens/s  ETA %.1f s%s",
            tty ? "\r" : "", (long long)done, (long long)total,
            elapsed > 0 ? (double)tokens / elapsed : 0.0, eta, tty ? "   " : "\n");
    if (tty && done == total)
        fprintf(stderr, "\n");
    fflush(stderr);
}

/* Prompts sel[0 .. n) of the shard as one padded batch: every sequence its own run. */
static lp_status record_batch(trace_job *j, dataset_job *d, const trace_opts *o,
                              const size_t *sel, int64_t n, int64_t batch_id, int64_t *first_run,
                              lp_error *err)
{
    int64_t T = 0;
    for (int64_t b = 0; b < n; b++)
        T = (int64_t)d->n_ids[sel[b]] > T ? (int64_t)d->n_ids[sel[b]] : T;
    int32_t *tokens = calloc((size_t)(n * T), sizeof *tokens); /* padding: id 0 */
    int64_t *pl = calloc((size_t)n, sizeof *pl), *pr = calloc((size_t)n, sizeof *pr);
    lp_run_info *infos = calloc((size_t)n, sizeof *infos);
    int64_t *run_ids = calloc((size_t)n, sizeof *run_ids);
    lp_status st = tokens && pl && pr && infos && run_ids ? LP_OK
                                               : lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    for (int64_t b = 0; b < n && st == LP_OK; b++) {
        size_t i = sel[b];
        int64_t len = (int64_t)d->n_ids[i], pad = T - len;
        pl[b] = o->padding == 1 ? pad : 0;
        pr[b] = pad - pl[b];
        memcpy(tokens + b * T + pl[b], d->ids[i], (size_t)len * sizeof *tokens);
        infos[b] = lp_run_info_for_model("trace", j->model_path, j->model,
                                         d->prompts.items[i].text, d->ids[i], len,
                                         j->in.tokenizer, (int)o->threads);
        infos[b].dataset = d->name;
        infos[b].prompt_index = (int64_t)i;
        infos[b].prompt_id = d->prompts.items[i].id;
        infos[b].in_batch = true;
        infos[b].batch_id = batch_id;
        infos[b].batch_index = b;
        infos[b].pad_left = pl[b];
        infos[b].pad_right = pr[b];
    }
    lp_store_opts sopts;
    store_opts_of(j, o, &sopts);
    lp_store_batch *rec = NULL;
    double t0 = now_seconds();
    if (st == LP_OK)
        st = lp_store_batch_create(j->store, &sopts, infos, n, T, &rec, err);
    if (st == LP_OK) {
        lp_forward_opts fopts;
        lp_forward_opts_init(&fopts);
        fopts.observer = lp_store_batch_observer(rec);
        fopts.pool = j->pool;
        fopts.local_window = o->local_window;
        lp_batch batch = {n, T, tokens, pl, pr};
        st = lp_forward(j->model, &batch, &fopts, err);
        if (st == LP_OK)
            st = lp_store_batch_finish(rec, now_seconds() - t0, run_ids, err);
        if (st == LP_OK && *first_run == 0)
            *first_run = run_ids[0];
    }
    lp_store_batch_destroy(rec);
    free(tokens);
    free(pl);
    free(pr);
    free(infos);
    free(run_ids);
    return st;
}

static lp_status run_dataset_batches(trace_job *j, dataset_job *d, const trace_opts *o,
                                     int64_t *first_run, int64_t *n_runs, int64_t *n_tokens,
                                     lp_error *err)
{
    size_t *sel = malloc((size_t)o->batch_size * sizeof *sel);
    if (!sel)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    int64_t total = 0, n = 0, batch_id = 0;
    for (size_t i = (size_t)d->shard_i; i < d->prompts.n; i += (size_t)d->shard_n)
        total++;
    double t0 = now_seconds();
    lp_status st = LP_OK;
    for (size_t i = (size_t)d->shard_i; i < d->prompts.n && st == LP_OK; i += (size_t)d->shard_n) {
        sel[n++] = i;
        bool last = i + (size_t)d->shard_n >= d->prompts.n;
        if (n < o->batch_size && !last)
            continue;
        st = record_batch(j, d, o, sel, n, batch_id++, first_run, err);
        for (int64_t b = 0; b < n && st == LP_OK; b++)
            *n_tokens += (int64_t)d->n_ids[sel[b]];
        *n_runs += st == LP_OK ? n : 0;
        n = 0;
        if (st == LP_OK)
            dataset_progress(*n_runs, total, *n_tokens, now_seconds() - t0);
    }
    free(sel);
    return st;
}

static lp_status run_dataset_prompts(trace_job *j, dataset_job *d, const trace_opts *o,
                                     int64_t *first_run, int64_t *n_runs, int64_t *n_tokens,
                                     double *seconds, lp_error *err)
{
    int32_t *keep_ids = j->in.ids;
    size_t keep_n = j->in.n_ids;
    const char *keep_text = j->in.text;
    int64_t total = 0;
    for (size_t i = (size_t)d->shard_i; i < d->prompts.n; i += (size_t)d->shard_n)
        total++;
    double t0 = now_seconds();
    lp_status st = LP_OK;
    *first_run = 0;
    j->dataset = d->name;
    if (o->batch_size > 0) {
        st = run_dataset_batches(j, d, o, first_run, n_runs, n_tokens, err);
        *seconds = now_seconds() - t0;
        return st == LP_OK ? lp_store_update_dataset_stats(j->store, d->name, err) : st;
    }
    for (size_t i = (size_t)d->shard_i; i < d->prompts.n && st == LP_OK;
         i += (size_t)d->shard_n) {
        j->in.ids = d->ids[i];
        j->in.n_ids = d->n_ids[i];
        j->in.text = d->prompts.items[i].text;
        j->prompt_index = (int64_t)i;
        j->prompt_id = d->prompts.items[i].id;
        tee_ctx tee;
        int64_t run_id;
        double secs;
        st = record(j, o, &tee, &run_id, &secs, err);
        if (st != LP_OK)
            break;
        *first_run = *first_run ? *first_run : run_id;
        (*n_runs)++;
        *n_tokens += o->generate > 0 ? j->n_seq : (int64_t)j->in.n_ids;
        dataset_progress(*n_runs, total, *n_tokens, now_seconds() - t0);
    }
    j->in.ids = keep_ids;
    j->in.n_ids = keep_n;
    j->in.text = keep_text;
    *seconds = now_seconds() - t0;
    return st == LP_OK ? lp_store_update_dataset_stats(j->store, d->name, err) : st;
}

static int run_dataset(trace_job *j, const trace_opts *o)
{
    dataset_job d;
    memset(&d, 0, sizeof d);
    lp_error err = {0};
    int64_t first = 0, n_runs = 0, n_tokens = 0;
    double seconds = 0;
    if (prepare_dataset(j, &d, o, &err) != LP_OK ||
        run_dataset_prompts(j, &d, o, &first, &n_runs, &n_tokens, &seconds, &err) != LP_OK) {
        dataset_free(&d);
        job_free(j);
        return lp_cli_fail(CMD, &err);
    }
    printf("dataset %s in %s: %lld of %zu prompts (shard %lld/%lld), runs %lld..%lld, %lld tokens, "
           "%.3f s (%.0f tokens/s)\n",
           d.name, o->db, (long long)n_runs, d.prompts.n, (long long)d.shard_i,
           (long long)d.shard_n, (long long)first, (long long)(first + n_runs - 1),
           (long long)n_tokens, seconds, seconds > 0 ? (double)n_tokens / seconds : 0.0);
    dataset_free(&d);
    job_free(j);
    return LP_EXIT_OK;
}

static int run_trace(int argc, char **argv)
{
    trace_opts o = {.db = "loupe.db", .maps = LP_MAPS_F16, .logits = LP_LOGITS_TOPK, .top_p = 1.0,
                    .threads = lp_cpu_count(), .local_window = 8, .max_map_bytes = 4ull << 30};
    const char *pos[LP_CLI_MAX_POSITIONAL];
    LP_CLI_PARSE_OR_RETURN(&trace_spec, argc, argv, &o, pos, NULL);
    trace_job job = {.model_path = pos[0]};
    if (o.prompts && (o.input.prompt || o.input.prompt_file || o.input.tokens))
        return lp_cli_usage_error(CMD, "--prompts FILE replaces --prompt, --prompt-file, --tokens");
    if (!o.prompts && (o.dataset || o.shard || o.batch_size))
        return lp_cli_usage_error(CMD, "--dataset, --shard and --batch-size go with --prompts FILE");
    if (o.batch_size && o.generate)
        return lp_cli_usage_error(CMD, "--batch-size runs prefills only: drop --generate");
    if (o.prompts)
        return run_dataset(&job, &o);
    tee_ctx tee;
    int64_t run_id;
    double seconds;
    lp_error err = {0};
    if (prepare(&job, &o, &err) != LP_OK ||
        record(&job, &o, &tee, &run_id, &seconds, &err) != LP_OK) {
        job_free(&job);
        return lp_cli_fail(CMD, &err);
    }
    print_summary(&job, &o, &tee, run_id, seconds);
    job_free(&job);
    return LP_EXIT_OK;
}
