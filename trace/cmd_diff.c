/* `loupe diff A.db[:RUN] B.db[:RUN]`: what changed between two runs over the same tokens. */
#define _POSIX_C_SOURCE 200809L
#include "trace/trace.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli/cli.h"
#include "core/text.h"
#include "trace/analysis/analysis.h"
#include "trace/store/store.h"

#define CMD "diff"

typedef struct diff_opts {
    bool json;
    const char *db;
} diff_opts;

static const lp_option diff_options[] = {
    LP_OPT_JSON_OF(diff_opts, json),
    LP_OPT_STRING_OF(diff_opts, db, "db", "FILE",
                     "database the diff is stored in (default: A's database)"),
};

LP_CLI_COMMAND(diff, run_diff, diff_options, 2, 2,
               "compare two runs over the same tokens: maps, predictions, statistics",
               "A.db[:RUN] B.db[:RUN] [--json] [--db DB]",
    .description =
        "Per head the mean Jensen-Shannon divergence (nats) of the attention rows and the\n"
        "largest |difference| of the maps (heads both runs stored), per position the KL\n"
        "divergence KL(A || B) of the next-token distributions (both runs traced with --logits\n"
        "full) and whether the argmax agrees, per head the change B - A of every statistic.\n"
        "RUN defaults to the database's latest complete trace run. Runs over different tokens\n"
        "are refused, naming the first differing position. A run against itself is exactly 0.\n"
        "The result is stored in one transaction as a diffs row with its diff_heads and\n"
        "diff_positions rows (see trace/README.md); `loupe render DB --diff` draws it.",
    .notes = "Exit status: 0 ok, 2 bad usage or input.");

typedef struct side {
    char path[4096];
    int64_t run_id;
    lp_store *store;
    lp_store_run run;
    bool have_run;
} side;

/* "file.db:7" -> file.db, run 7; "file.db" -> latest complete trace run. */
static lp_status open_side(const char *arg, side *s, lp_error *err)
{
    snprintf(s->path, sizeof s->path, "%s", arg);
    s->run_id = 0;
    char *colon = strrchr(s->path, ':');
    int64_t id;
    if (colon && lp_parse_i64(colon + 1, &id) && id > 0) {
        *colon = '\0';
        s->run_id = id;
    }
    lp_status st = lp_store_open_read(s->path, &s->store, err);
    bool incomplete = false;
    if (st == LP_OK)
        st = lp_store_read_run(s->store, s->run_id, "trace", &s->run, &incomplete, err);
    s->have_run = st == LP_OK;
    if (st == LP_OK)
        s->run_id = s->run.id; /* kept after close_side */
    if (st == LP_OK && incomplete)
        st = lp_error_set(err, LP_ERR_USAGE, "%s: run %lld is '%s', not complete", s->path,
                          (long long)s->run.id, s->run.status);
    return st;
}

static void close_side(side *s)
{
    if (s->have_run)
        lp_store_run_clear(&s->run);
    lp_store_close(s->store);
}

typedef struct summary {
    double max_js, mean_js, max_abs, mean_kl, max_kl, agree;
    int64_t js_at, n_kl;
} summary;

static summary summarize(const lp_run_diff *d)
{
    summary s = {0};
    int64_t n = 0;
    s.js_at = -1;
    for (int64_t i = 0; i < d->n_layers * d->n_heads; i++) {
        if (isnan(d->js[i]))
            continue;
        if (s.js_at < 0 || d->js[i] > s.max_js) {
            s.max_js = d->js[i];
            s.js_at = i;
        }
        s.mean_js += d->js[i];
        s.max_abs = fmax(s.max_abs, d->max_abs[i]);
        n++;
    }
    s.mean_js = n > 0 ? s.mean_js / (double)n : 0;
    int64_t agree = 0;
    for (int64_t p = 0; p < d->T; p++) {
        agree += d->argmax_agree[p];
        if (!isnan(d->kl[p])) {
            s.mean_kl += d->kl[p];
            s.max_kl = fmax(s.max_kl, d->kl[p]);
            s.n_kl++;
        }
    }
    s.mean_kl = s.n_kl > 0 ? s.mean_kl / (double)s.n_kl : (double)NAN;
    s.agree = d->T > 0 ? (double)agree / (double)d->T : 1.0;
    return s;
}

static json_t *real_or_null(double v) { return isnan(v) ? json_null() : json_real(v); }

static lp_status store_diff(const char *db, const side *a, const side *b, const lp_run_diff *d,
                            int64_t *diff_id, lp_error *err)
{
    lp_store *store = NULL;
    lp_store_diff row = {.a_db = a->path, .b_db = b->path, .a_run = a->run_id,
                         .b_run = b->run_id, .n_tokens = d->T, .n_layers = d->n_layers,
                         .n_heads = d->n_heads, .has_kl = d->has_kl, .js = d->js,
                         .max_abs = d->max_abs, .kl = d->kl, .stat_delta = d->stat_delta,
                         .argmax_agree = d->argmax_agree};
    lp_status st = lp_store_open(db, &store, err);
    if (st == LP_OK)
        st = lp_store_add_diff(store, &row, diff_id, err);
    lp_store_close(store);
    return st;
}

static int print_json(const side *a, const side *b, const lp_run_diff *d, const summary *s,
                       const char *db, int64_t diff_id)
{
    json_t *root = json_object(), *heads = json_array(), *pos = json_array();
    json_object_set_new(root, "diff_id", json_integer(diff_id));
    json_object_set_new(root, "db", json_string(db));
    json_object_set_new(root, "a", json_pack("{s:s,s:I}", "db", a->path, "run", (json_int_t)a->run_id));
    json_object_set_new(root, "b", json_pack("{s:s,s:I}", "db", b->path, "run", (json_int_t)b->run_id));
    json_object_set_new(root, "n_tokens", json_integer(d->T));
    json_object_set_new(root, "max_js", json_real(s->max_js));
    json_object_set_new(root, "mean_js", json_real(s->mean_js));
    json_object_set_new(root, "max_abs_diff", json_real(s->max_abs));
    json_object_set_new(root, "mean_kl", real_or_null(s->mean_kl));
    json_object_set_new(root, "argmax_agreement", json_real(s->agree));
    for (int64_t i = 0; i < d->n_layers * d->n_heads; i++) {
        json_t *h = json_object(), *st = json_object();
        json_object_set_new(h, "layer", json_integer(i / d->n_heads));
        json_object_set_new(h, "head", json_integer(i % d->n_heads));
        json_object_set_new(h, "js", real_or_null(d->js[i]));
        json_object_set_new(h, "max_abs_diff", real_or_null(d->max_abs[i]));
        for (int k = 0; k < LP_STAT_COUNT; k++)
            if (!lp_head_stat_absent(d->stat_delta, d->n_layers * d->n_heads, (lp_head_stat)k))
                json_object_set_new(st, lp_head_stat_name((lp_head_stat)k),
                                real_or_null(d->stat_delta[i * LP_STAT_COUNT + k]));
        json_object_set_new(h, "stat_delta", st);
        json_array_append_new(heads, h);
    }
    for (int64_t p = 0; p < d->T; p++)
        json_array_append_new(pos, json_pack("{s:I,s:o,s:b}", "pos", (json_int_t)p, "kl",
                                             real_or_null(d->kl[p]), "argmax_agree",
                                             d->argmax_agree[p]));
    json_object_set_new(root, "heads", heads);
    json_object_set_new(root, "positions", pos);
    return lp_cli_print_json(CMD, root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
}

static void print_text(const side *a, const side *b, const lp_run_diff *d, const summary *s,
                       const char *db, int64_t diff_id)
{
    printf("%s run %lld vs %s run %lld: %lld tokens, %lld heads with both maps\n", a->path,
           (long long)a->run_id, b->path, (long long)b->run_id, (long long)d->T,
           (long long)d->n_maps);
    if (s->js_at >= 0)
        printf("attention: mean JS %.3g nats, max %.3g (layer %lld head %lld), max |diff| %.3g\n",
               s->mean_js, s->max_js, (long long)(s->js_at / d->n_heads),
               (long long)(s->js_at % d->n_heads), s->max_abs);
    if (s->n_kl > 0)
        printf("next token: mean KL(A||B) %.3g nats, max %.3g; argmax agrees at %.1f%% of "
               "positions\n", s->mean_kl, s->max_kl, 100 * s->agree);
    else
        printf("next token: argmax agrees at %.1f%% of positions (trace with --logits full for "
               "KL)\n", 100 * s->agree);
    printf("  (diff %lld in %s)\n", (long long)diff_id, db);
}

static int run_diff(int argc, char **argv)
{
    diff_opts o = {0};
    const char *pos[LP_CLI_MAX_POSITIONAL];
    LP_CLI_PARSE_OR_RETURN(&diff_spec, argc, argv, &o, pos, NULL);
    lp_error err = {0};
    side a = {0}, b = {0};
    lp_run_diff *d = NULL;
    lp_status st = open_side(pos[0], &a, &err);
    if (st == LP_OK)
        st = open_side(pos[1], &b, &err);
    if (st == LP_OK)
        st = lp_diff_runs(a.store, &a.run, b.store, &b.run, &d, &err);
    close_side(&a);
    close_side(&b);
    const char *db = o.db ? o.db : a.path;
    int64_t diff_id = 0;
    if (st == LP_OK)
        st = store_diff(db, &a, &b, d, &diff_id, &err);
    int rc = LP_EXIT_OK;
    if (st == LP_OK) {
        summary s = summarize(d);
        if (o.json)
            rc = print_json(&a, &b, d, &s, db, diff_id);
        else
            print_text(&a, &b, d, &s, db, diff_id);
    }
    lp_run_diff_free(d);
    return st == LP_OK ? rc : lp_cli_fail(CMD, &err);
}
