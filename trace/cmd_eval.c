/* `loupe eval`: next-token NLL, perplexity and bits per byte of a prompt (or a file of them),
 * long texts in Hugging Face's sliding windows; per-position NLL stored. */
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
#include "inspect/tokenizer/tokenizer.h"
#include "trace/analysis/analysis.h"
#include "trace/store/store.h"

#define CMD "eval"

typedef struct eval_opts {
    lp_input_opts input;
    const char *prompts;
    const char *db;
    bool json;
    int64_t context;
    int64_t stride;
    int64_t threads;
} eval_opts;

static const lp_option eval_options[] = {
    LP_OPT_TABLE_OF(eval_opts, input, lp_input_options),
    LP_OPT_STRING_OF(eval_opts, prompts, "prompts", "FILE",
                     "score every prompt of a JSON-lines file ({\"text\": ...} or\n"
                     "{\"tokens\": [...]}, optional \"id\"), one run each"),
    LP_OPT_RUN_DB_OF(eval_opts, db),
    LP_OPT_JSON_OF(eval_opts, json),
    LP_OPT_INT_OF(eval_opts, context, "context", "N", 2, 1 << 20,
                  "window length (default: the model's trained context)"),
    LP_OPT_INT_OF(eval_opts, stride, "stride", "N", 1, 1 << 20,
                  "tokens between window starts (default context / 2)"),
    LP_OPT_THREADS_OF(eval_opts, threads),
};

LP_CLI_COMMAND(eval, run_eval, eval_options, 1, 1,
               "score next-token prediction: NLL, perplexity, bits per byte",
               "MODEL (--prompt TEXT | --prompt-file FILE | --tokens IDS | --prompts FILE) "
               "[options]",
    .description =
        "Mean negative log-likelihood (natural log) of every next token: positions 0..T-2\n"
        "predicting tokens 1..T-1, perplexity = exp(NLL), and bits per byte of the text\n"
        "(total NLL / (ln 2 x UTF-8 bytes)) when the input is text. A prompt longer than\n"
        "--context is scored as Hugging Face's perplexity recipe does: windows of --context\n"
        "tokens every --stride tokens, each scoring only the targets the previous one did not.\n"
        "Each prompt is a run of kind 'eval' with eval_results and per-position token_nll rows.",
    .notes = "Exit status: 0 ok, 2 bad usage or input.");

/* One scored prompt. */
typedef struct scored {
    const char *id;
    int64_t run_id;
    lp_eval_result r;
    lp_eval_window win;
    int64_t n_bytes;
    double bpb;
} scored;

static lp_eval_window window_for(const eval_opts *o, const lp_model *model, int64_t T)
{
    const lp_arch *a = lp_model_arch(model);
    lp_eval_window w;
    w.context = o->context > 0 ? o->context : (a->n_ctx > 1 ? a->n_ctx : T);
    if (a->pos_table_rows > 1 && w.context > a->pos_table_rows)
        w.context = a->pos_table_rows; /* learned positions end there */
    if (w.context < 2)
        w.context = 2;
    w.stride = o->stride > 0 ? o->stride : (w.context / 2 > 0 ? w.context / 2 : 1);
    return w;
}

static lp_status score_one(const eval_opts *o, const char *model_path, lp_model *model,
                           lp_pool *pool, lp_store *store, const struct lp_tokenizer *tok,
                           const char *text, const int32_t *ids, int64_t T, scored *out,
                           lp_error *err)
{
    lp_batch batch = lp_batch_single(ids, T);
    lp_status st = lp_forward_check(model, &batch, err);
    if (st != LP_OK)
        return st;
    out->win = window_for(o, model, T);
    if (out->win.stride > out->win.context)
        return lp_error_set(err, LP_ERR_USAGE, "--stride %lld exceeds the context %lld",
                            (long long)out->win.stride, (long long)out->win.context);
    if (T < 2)
        return lp_error_set(err, LP_ERR_USAGE, "the prompt is %lld token: need 2 to score one",
                            (long long)T);
    double *nll = malloc((size_t)(T - 1) * sizeof *nll);
    if (!nll)
        return lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    lp_store_opts sopts;
    lp_store_opts_init(&sopts);
    sopts.maps = LP_MAPS_NONE;
    lp_run_info info = lp_run_info_for_model("eval", model_path, model, text, ids, T, tok,
                                             pool ? lp_pool_threads(pool) : 1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    st = lp_store_begin_run(store, &info, &sopts, &out->run_id, err);
    if (st == LP_OK)
        st = lp_eval_tokens(model, ids, T, &out->win, pool, lp_store_observer(store), nll,
                            &out->r, err);
    out->n_bytes = text ? (int64_t)strlen(text) : 0;
    out->bpb = text ? lp_bits_per_byte(out->r.nll_sum, out->n_bytes) : (double)NAN;
    lp_store_eval ev = {T, out->r.n_scored, out->r.n_windows, out->win.context, out->win.stride,
                        out->r.nll, out->r.ppl, out->n_bytes, out->bpb};
    if (st == LP_OK)
        st = lp_store_add_eval(store, &ev, ids, nll, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (st == LP_OK)
        st = lp_store_end_run(store, seconds, err);
    else if (out->run_id > 0)
        lp_store_abort_run(store);
    free(nll);
    return st;
}

static json_t *scored_json(const scored *s)
{
    json_t *o = json_object();
    if (s->id)
        json_object_set_new(o, "id", json_string(s->id));
    json_object_set_new(o, "run_id", json_integer(s->run_id));
    json_object_set_new(o, "n_tokens", json_integer(s->r.n_tokens));
    json_object_set_new(o, "n_scored", json_integer(s->r.n_scored));
    json_object_set_new(o, "nll", json_real(s->r.nll));
    json_object_set_new(o, "ppl", json_real(s->r.ppl));
    json_object_set_new(o, "bits_per_byte", isnan(s->bpb) ? json_null() : json_real(s->bpb));
    json_object_set_new(o, "windows", json_integer(s->r.n_windows));
    json_object_set_new(o, "context", json_integer(s->win.context));
    json_object_set_new(o, "stride", json_integer(s->win.stride));
    return o;
}

static void print_text(const scored *s, const char *db)
{
    printf("%s%s%lld tokens, %lld scored in %lld window%s (context %lld, stride %lld): nll %.6f  "
           "ppl %.4f",
           s->id ? s->id : "", s->id ? ": " : "", (long long)s->r.n_tokens,
           (long long)s->r.n_scored, (long long)s->r.n_windows, s->r.n_windows == 1 ? "" : "s",
           (long long)s->win.context, (long long)s->win.stride, s->r.nll, s->r.ppl);
    if (!isnan(s->bpb))
        printf("  bits/byte %.4f", s->bpb);
    printf("  (run %lld in %s)\n", (long long)s->run_id, db);
}

/* Every prompt of the file, in order; the pooled NLL weights each scored token alike. */
static lp_status score_file(const eval_opts *o, const char *model_path, lp_model *model,
                            lp_pool *pool, lp_store *store, scored **out, size_t *n_out,
                            lp_error *err)
{
    lp_prompts prompts;
    lp_status st = lp_prompts_read(o->prompts, &prompts, err);
    if (st != LP_OK)
        return st;
    lp_tokenizer *tok = NULL;
    const lp_weights *w = lp_model_weights(model);
    if (o->input.tokenizer)
        st = lp_tokenizer_open(o->input.tokenizer, &tok, err);
    else
        st = lp_tokenizer_for_model(model_path, lp_weights_gguf(w),
                                    lp_weights_format_of(w) == LP_FORMAT_LLAMA2C, &tok, err);
    bool need_tok = false;
    for (size_t i = 0; i < prompts.n; i++)
        need_tok = need_tok || prompts.items[i].text;
    if (st != LP_OK && !need_tok) {
        st = LP_OK;
        memset(err, 0, sizeof *err);
    }
    *out = st == LP_OK ? calloc(prompts.n, sizeof **out) : NULL;
    if (st == LP_OK && !*out)
        st = lp_error_set(err, LP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == LP_OK && i < prompts.n; i++) {
        const lp_prompt *p = &prompts.items[i];
        int32_t *ids = NULL;
        size_t n = p->n_tokens;
        if (p->text)
            st = lp_tokenizer_encode(tok, p->text, p->text_len, true, &ids, &n, err);
        if (st == LP_OK)
            st = score_one(o, model_path, model, pool, store, tok, p->text,
                           p->text ? ids : p->tokens, (int64_t)n, &(*out)[i], err);
        (*out)[i].id = p->id ? strdup(p->id) : NULL;
        free(ids);
        if (st != LP_OK)
            lp_error_prefix(err, "%s:%lld: ", o->prompts, (long long)p->line);
        *n_out = i + 1;
    }
    lp_tokenizer_close(tok);
    lp_prompts_free(&prompts);
    return st;
}

static int report(const eval_opts *o, const scored *s, size_t n)
{
    if (!o->json) {
        for (size_t i = 0; i < n; i++)
            print_text(&s[i], o->db);
        return LP_EXIT_OK;
    }
    json_t *root;
    if (!o->prompts) {
        root = scored_json(&s[0]);
    } else {
        double sum = 0;
        int64_t tokens = 0, n_scored = 0;
        json_t *rows = json_array();
        for (size_t i = 0; i < n; i++) {
            sum += s[i].r.nll_sum;
            tokens += s[i].r.n_tokens;
            n_scored += s[i].r.n_scored;
            json_array_append_new(rows, scored_json(&s[i]));
        }
        root = json_object();
        json_object_set_new(root, "n_tokens", json_integer(tokens));
        json_object_set_new(root, "n_scored", json_integer(n_scored));
        json_object_set_new(root, "nll", json_real(sum / (double)n_scored));
        json_object_set_new(root, "ppl", json_real(exp(sum / (double)n_scored)));
        json_object_set_new(root, "prompts", rows);
    }
    return lp_cli_print_json(CMD, root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
}

static int run_eval(int argc, char **argv)
{
    eval_opts o = {.db = "loupe.db", .threads = lp_cpu_count()};
    const char *pos[LP_CLI_MAX_POSITIONAL];
    LP_CLI_PARSE_OR_RETURN(&eval_spec, argc, argv, &o, pos, NULL);
    lp_error err = {0};
    lp_model *model = NULL;
    lp_pool *pool = NULL;
    lp_store *store = NULL;
    lp_input in = {0};
    scored *s = NULL;
    size_t n = 0;
    bool given = o.input.prompt || o.input.prompt_file || o.input.tokens;
    lp_status st = LP_OK;
    if (o.prompts && given)
        st = lp_error_set(&err, LP_ERR_USAGE, "give --prompts or one of --prompt, --prompt-file, "
                          "--tokens, not both");
    if (st == LP_OK)
        st = lp_model_open(pos[0], &model, &err);
    if (st == LP_OK && !o.prompts)
        st = lp_input_load_for_weights(&o.input, pos[0], lp_model_weights(model), NULL, &in, &err);
    if (st == LP_OK && o.threads > 1)
        st = lp_pool_create((int)o.threads, &pool, &err);
    if (st == LP_OK)
        st = lp_store_open(o.db, &store, &err);
    if (st == LP_OK && o.prompts) {
        st = score_file(&o, pos[0], model, pool, store, &s, &n, &err);
    } else if (st == LP_OK) {
        s = calloc(1, sizeof *s);
        n = 1;
        st = s ? score_one(&o, pos[0], model, pool, store, in.tokenizer, in.text, in.ids,
                           (int64_t)in.n_ids, s, &err)
               : lp_error_set(&err, LP_ERR_NOMEM, "out of memory");
    }
    int rc = st == LP_OK ? report(&o, s, n) : LP_EXIT_OK;
    for (size_t i = 0; s && i < n; i++)
        free((char *)s[i].id);
    free(s);
    lp_store_close(store);
    if (pool)
        lp_pool_destroy(pool);
    lp_input_free(&in);
    lp_model_close(model);
    return st == LP_OK ? rc : lp_cli_fail(CMD, &err);
}
