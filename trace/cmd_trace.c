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
#include "core/mapfile.h"
#include "inspect/tokenizer/tokenizer.h"
#include "trace/store/store.h"

#define CMD "trace"
#define SUMMARY_TOP 5

static const char usage[] =
    "usage: loupe trace MODEL (--prompt TEXT | --prompt-file FILE | --tokens IDS) [options]\n"
    "\n"
    "Run the model's forward pass on the CPU and record what every head did into a SQLite\n"
    "database (schema: see README, \"The trace database\").\n"
    "\n"
    "  MODEL                model folder, .safetensors, .gguf or llama2.c .bin\n"
    "  --prompt TEXT        text to tokenize (special tokens such as BOS are added)\n"
    "  --prompt-file FILE   read the text from FILE (one trailing newline is dropped)\n"
    "  --tokens IDS         token ids, comma separated: 1,403,407\n"
    "  --tokenizer FILE     tokenizer.json, llama2.c tokenizer .bin or .gguf (default: beside\n"
    "                       the model; llama2.c checkpoints need it)\n"
    "  --db FILE            database, created if missing, runs appended (default loupe.db)\n"
    "  --layers LIST        layers whose attention maps are stored: 0,2-4 or all (default)\n"
    "  --heads LIST         heads whose maps are stored (default all)\n"
    "  --maps f16|f32|none  map precision (default f16); head statistics are always stored\n"
    "  --logits topk|full   top-k predictions per position (default) or full f32 logits too\n"
    "  --top-k K            predictions per position (default 5)\n"
    "  --threads N          worker threads (default: all CPUs); results are repeatable per N\n"
    "  --local-window W     head_stats.local_frac counts keys within W positions (default 8)\n"
    "  --max-map-bytes SIZE refuse a run whose stored maps would exceed SIZE (default 4GiB;\n"
    "                       maps grow with tokens squared: narrow --layers/--heads or --maps none)\n"
    "\n"
    "Prints the run id, token count, time and the last position's top predictions.\n"
    "Exit status: 0 ok, 2 bad usage or input.\n";

typedef struct trace_args {
    const char *model;
    const char *prompt;
    const char *prompt_file;
    const char *tokens;
    const char *tokenizer;
    const char *db;
    const char *layers;
    const char *heads;
    lp_maps_dtype maps;
    lp_logits_mode logits;
    int64_t top_k;
    int64_t threads;
    int64_t local_window;
    uint64_t max_map_bytes;
} trace_args;

static int parse_args(int argc, char **argv, trace_args *a)
{
    memset(a, 0, sizeof *a);
    a->db = "loupe.db";
    a->maps = LP_MAPS_F16;
    a->logits = LP_LOGITS_TOPK;
    a->top_k = 5;
    a->threads = lp_cpu_count();
    a->local_window = 8;
    a->max_map_bytes = 4ull << 30;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if ((r = lp_cli_option(CMD, argc, argv, &i, "--max-map-bytes", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            if (!lp_parse_size(v, &a->max_map_bytes))
                return lp_cli_usage_error(CMD, "--max-map-bytes '%s': expected a size such as 4GiB",
                                          v);
            continue;
        }
#define OPT(name, field)                                              \
    if ((r = lp_cli_option(CMD, argc, argv, &i, name, &v)) != 0) {    \
        if (r < 0)                                                    \
            return LP_EXIT_USAGE;                                     \
        a->field = v;                                                 \
        continue;                                                     \
    }
        OPT("--prompt", prompt)
        OPT("--prompt-file", prompt_file)
        OPT("--tokens", tokens)
        OPT("--tokenizer", tokenizer)
        OPT("--db", db)
        OPT("--layers", layers)
        OPT("--heads", heads)
#undef OPT
        if ((r = lp_cli_option(CMD, argc, argv, &i, "--maps", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            if (strcmp(v, "f16") == 0) a->maps = LP_MAPS_F16;
            else if (strcmp(v, "f32") == 0) a->maps = LP_MAPS_F32;
            else if (strcmp(v, "none") == 0) a->maps = LP_MAPS_NONE;
            else return lp_cli_usage_error(CMD, "--maps '%s': expected f16, f32 or none", v);
            continue;
        }
        if ((r = lp_cli_option(CMD, argc, argv, &i, "--logits", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            if (strcmp(v, "topk") == 0) a->logits = LP_LOGITS_TOPK;
            else if (strcmp(v, "full") == 0) a->logits = LP_LOGITS_FULL;
            else return lp_cli_usage_error(CMD, "--logits '%s': expected topk or full", v);
            continue;
        }
        struct { const char *name; int64_t *field; int64_t lo, hi; } nums[] = {
            {"--top-k", &a->top_k, 1, 1000},
            {"--threads", &a->threads, 1, 256},
            {"--local-window", &a->local_window, 1, INT64_MAX / 2},
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
            return lp_cli_usage_error(CMD, "unknown option '%s' (see loupe help trace)", argv[i]);
        if (a->model)
            return lp_cli_usage_error(CMD, "unexpected argument '%s' (one MODEL only)", argv[i]);
        a->model = argv[i];
    }
    if (!a->model)
        return lp_cli_usage_error(CMD, "missing MODEL (see loupe help trace)");
    int n_inputs = (a->prompt != NULL) + (a->prompt_file != NULL) + (a->tokens != NULL);
    if (n_inputs != 1)
        return lp_cli_usage_error(CMD, "give exactly one of --prompt, --prompt-file, --tokens "
                                       "(got %d)", n_inputs);
    return LP_EXIT_OK;
}

/* Maps grow with tokens squared: a long prompt with every head selected would fill the disk (and
 * the store's memory) long before the pass ends, so the run is refused before it starts. */
static lp_status check_map_budget(const trace_args *a, const lp_arch *arch, const bool *layer_sel,
                                  const bool *head_sel, int64_t n_tokens, lp_error *err)
{
    if (a->maps == LP_MAPS_NONE)
        return LP_OK;
    uint64_t n_maps = 0;
    for (int64_t l = 0; l < arch->n_layers; l++)
        for (int64_t h = 0; h < arch->n_heads; h++)
            n_maps += layer_sel[l] && head_sel[h];
    uint64_t cells = 0, bytes = 0;
    uint64_t elem = a->maps == LP_MAPS_F32 ? 4 : 2;
    bool overflow = !lp_mul_u64((uint64_t)n_tokens, (uint64_t)n_tokens, &cells) ||
                    !lp_mul_u64(cells, elem, &bytes) || !lp_mul_u64(bytes, n_maps, &bytes);
    if (overflow || bytes > a->max_map_bytes) {
        char want[32], limit[32];
        return lp_error_set(err, LP_ERR_RANGE,
                            "%lld tokens x %llu maps would store %s of attention maps, over "
                            "--max-map-bytes %s; narrow --layers/--heads, use --maps none, or "
                            "raise the limit",
                            (long long)n_tokens, (unsigned long long)n_maps,
                            overflow ? "more than 2^64 bytes"
                                     : lp_format_bytes(bytes, want, sizeof want),
                            lp_format_bytes(a->max_map_bytes, limit, sizeof limit));
    }
    return LP_OK;
}

/* The tokenizer: --tokenizer, else the GGUF vocabulary, else tokenizer.json beside the model. */
static lp_status find_tokenizer(const trace_args *a, const lp_weights *w, lp_tokenizer **tok,
                                lp_error *err)
{
    if (a->tokenizer)
        return lp_tokenizer_open(a->tokenizer, tok, err);
    return lp_tokenizer_for_model(a->model, lp_weights_gguf(w),
                                  lp_weights_format_of(w) == LP_FORMAT_LLAMA2C, tok, err);
}

/* Passes everything to the store and keeps the last position's logits for the summary. */
typedef struct tee_ctx {
    const lp_observer *store;
    int64_t last_pos;
    lp_prediction top[SUMMARY_TOP];
    int64_t n_top;
    double t0;
    int64_t n_tokens;
    bool tty;
} tee_ctx;

static bool tee_want(void *ctx, const lp_site *site)
{
    tee_ctx *t = ctx;
    return site->kind == LP_SITE_LOGITS || t->store->want(t->store->ctx, site);
}

static lp_status tee_observe(void *ctx, const lp_site *site, const lp_view *view, lp_error *err)
{
    tee_ctx *t = ctx;
    if (site->kind == LP_SITE_LOGITS && site->batch == 0 && view->row0 + view->rows - 1 == t->last_pos)
        t->n_top = lp_top_k(view->data + (view->rows - 1) * view->stride, view->cols, SUMMARY_TOP,
                            t->top);
    if (t->store->want(t->store->ctx, site))
        return t->store->observe(t->store->ctx, site, view, err);
    return LP_OK;
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

static int run_trace(int argc, char **argv)
{
    trace_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != LP_EXIT_OK)
        return rc;
    lp_error err = {0};
    lp_model *model = NULL;
    lp_tokenizer *tok = NULL;
    lp_store *store = NULL;
    lp_pool *pool = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *prompt_buf = NULL;
    bool *layer_sel = NULL, *head_sel = NULL;
    const char *prompt = a.prompt;
    rc = LP_EXIT_USAGE;

    if (a.tokens && lp_parse_token_ids(a.tokens, &ids, &n_ids, &err) != LP_OK)
        goto fail;
    if (a.prompt_file) {
        if (lp_read_prompt_file(a.prompt_file, &prompt_buf, NULL, &err) != LP_OK)
            goto fail;
        prompt = prompt_buf;
    }
    if (lp_model_open(a.model, &model, &err) != LP_OK)
        goto fail;
    const lp_arch *arch = lp_model_arch(model);
    const lp_weights *w = lp_model_weights(model);
    if (find_tokenizer(&a, w, &tok, &err) != LP_OK) {
        /* A tokenizer is only needed for --prompt; for --tokens the pieces become "<id>". */
        if (prompt || a.tokenizer)
            goto fail;
        tok = NULL;
        memset(&err, 0, sizeof err);
    }
    if (prompt) {
        if (lp_tokenizer_encode(tok, prompt, strlen(prompt), true, &ids, &n_ids, &err) != LP_OK)
            goto fail;
        if (n_ids == 0) {
            lp_error_set(&err, LP_ERR_USAGE, "the prompt encodes to no tokens");
            goto fail;
        }
    }
    /* Checked before a run row exists, so bad ids never leave a failed run behind. */
    lp_batch batch = lp_batch_single(ids, (int64_t)n_ids);
    if (lp_forward_check(model, &batch, &err) != LP_OK)
        goto fail;
    layer_sel = malloc((size_t)arch->n_layers * sizeof(bool));
    head_sel = malloc((size_t)arch->n_heads * sizeof(bool));
    if (!layer_sel || !head_sel) {
        lp_error_set(&err, LP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (lp_parse_index_list(a.layers, arch->n_layers, layer_sel, &err) != LP_OK) {
        lp_error_prefix(&err, "--layers ");
        goto fail;
    }
    if (lp_parse_index_list(a.heads, arch->n_heads, head_sel, &err) != LP_OK) {
        lp_error_prefix(&err, "--heads ");
        goto fail;
    }
    if (check_map_budget(&a, arch, layer_sel, head_sel, (int64_t)n_ids, &err) != LP_OK)
        goto fail;
    if (a.threads > 1 && lp_pool_create((int)a.threads, &pool, &err) != LP_OK)
        goto fail;
    if (lp_store_open(a.db, &store, &err) != LP_OK)
        goto fail;

    lp_store_opts sopts;
    lp_store_opts_init(&sopts);
    sopts.maps = a.maps;
    sopts.layers = layer_sel;
    sopts.heads = head_sel;
    sopts.logits = a.logits;
    sopts.top_k = a.top_k;
    sopts.local_window = a.local_window;
    lp_run_info info;
    memset(&info, 0, sizeof info);
    info.kind = "trace";
    info.model_path = a.model;
    info.model_format = lp_weights_format_name(lp_weights_format_of(w));
    info.arch = arch;
    info.prompt = prompt;
    info.tokens = ids;
    info.n_tokens = (int64_t)n_ids;
    info.tokenizer = tok;
    info.n_threads = (int)a.threads;
    int64_t run_id;
    if (lp_store_begin_run(store, &info, &sopts, &run_id, &err) != LP_OK)
        goto fail;

    tee_ctx tee = {lp_store_observer(store), (int64_t)n_ids - 1, {{0, 0, 0}}, 0, now_seconds(),
                   (int64_t)n_ids, isatty(STDERR_FILENO) != 0};
    lp_observer obs = {&tee, tee_want, tee_observe};
    lp_forward_opts fopts;
    lp_forward_opts_init(&fopts);
    fopts.observer = &obs;
    fopts.pool = pool;
    fopts.local_window = a.local_window;
    if (tee.tty) {
        fopts.progress = progress;
        fopts.progress_ctx = &tee;
    }
    if (lp_forward(model, &batch, &fopts, &err) != LP_OK) {
        lp_store_abort_run(store);
        goto fail;
    }
    double seconds = now_seconds() - tee.t0;
    if (lp_store_end_run(store, seconds, &err) != LP_OK)
        goto fail;

    printf("run %lld in %s: %zu token%s, %lld layers x %lld heads, %.3f s (%.0f tokens/s), %lld "
           "thread%s, isa %s\n",
           (long long)run_id, a.db, n_ids, n_ids == 1 ? "" : "s", (long long)arch->n_layers,
           (long long)arch->n_heads,
           seconds, seconds > 0 ? (double)n_ids / seconds : 0.0, (long long)a.threads,
           a.threads == 1 ? "" : "s", lp_isa_name(lp_kernels_isa()));
    printf("next token after position %zu:", n_ids - 1);
    for (int64_t k = 0; k < tee.n_top; k++) {
        printf(" ");
        print_piece(tok, tee.top[k].token_id);
        printf(" %.3f", (double)tee.top[k].prob);
    }
    printf("\n");
    rc = LP_EXIT_OK;
    goto done;
fail:
    rc = lp_cli_fail(CMD, &err);
done:
    lp_store_close(store);
    if (pool)
        lp_pool_destroy(pool);
    if (tok)
        lp_tokenizer_close(tok);
    lp_model_close(model);
    free(ids);
    free(prompt_buf);
    free(layer_sel);
    free(head_sel);
    return rc;
}

static const lp_cli_spec trace_spec = {
    .name = "trace",
    .summary = "run the forward pass and record attention into SQLite",
    .legacy_usage = usage,
};

const lp_command lp_command_trace = {&trace_spec, run_trace};
