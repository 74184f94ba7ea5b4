/* The viewer's JSON: the run, its tokens, the drawing options and colormaps, and the optional
 * sections (head statistics, leak checks, predictions, head importance, logit lens, diffs), each
 * read through trace/store/store.h.
 *
 * Adding a section (a table another engineer adds to the store, say head importance):
 *   1. a function `static lp_status section_NAME(lp_store *, const lp_store_run *, json_t **out,
 *      lp_error *)` below that reads it through a typed store call and returns LP_ERR_NOT_FOUND
 *      when the run has none (the section is then left out of the page);
 *   2. a row in `sections[]`;
 *   3. a panel in render/viewer/viewer.js (`PANELS`) that draws data.sections.NAME.
 * Every string goes in as JSON text; the page inserts it with textContent, never as HTML. */
#include "render/viewer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "render/render_internal.h"

/* Longest token text kept for the page (labels are cut further when drawn). */
#define TOKEN_MAX_CHARS 200

static lp_status out_of_memory(lp_error *err)
{
    return lp_error_set(err, LP_ERR_NOMEM, "viewer: out of memory (the page's JSON)");
}

/* A number, or null for NaN and infinities (JSON has neither). */
static json_t *number(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *hex_rgb(lp_rgb c)
{
    char buf[8];
    snprintf(buf, sizeof buf, "#%02x%02x%02x", c.r, c.g, c.b);
    return json_string(buf);
}

/* ---- always there ----------------------------------------------------------------------------- */

static json_t *describe_run_row(const lp_store_run *run, bool *ok_out)
{
    bool ok = true;
    json_t *r = json_object();
    lp_render_json_set(&ok, r, "id", json_integer(run->id));
    lp_render_json_set(&ok, r, "status", lp_render_json_text(run->status));
    lp_render_json_set(&ok, r, "kind", lp_render_json_text(run->kind));
    lp_render_json_set(&ok, r, "model", lp_render_json_text(run->model));
    lp_render_json_set(&ok, r, "architecture", lp_render_json_text(run->architecture));
    lp_render_json_set(&ok, r, "n_tokens", json_integer(run->n_tokens));
    lp_render_json_set(&ok, r, "n_layers", json_integer(run->n_layers));
    lp_render_json_set(&ok, r, "n_heads", json_integer(run->n_heads));
    lp_render_json_set(&ok, r, "maps_dtype", lp_render_json_text(run->maps_dtype));
    lp_render_json_set(&ok, r, "prompt", lp_render_json_text(run->prompt));
    lp_render_json_set(&ok, r, "causal", json_boolean(run->causal));
    json_t *windows = json_array();
    for (int64_t l = 0; l < run->n_layers; l++)
        lp_render_json_push(&ok, windows, json_integer(lp_store_run_window(run, l)));
    lp_render_json_set(&ok, r, "window", windows);
    *ok_out &= ok;
    return r;
}

/* Token texts made visible (lp_render_visible_piece) with their ids, "generated": true on the
 * tokens `loupe trace --generate` produced, and root.first_generated, their first position
 * (both left out for a run without generated tokens). */
static lp_status describe_tokens(lp_store *db, const lp_store_run *run, json_t *root,
                                 lp_error *err)
{
    char **texts = NULL;
    int64_t n = 0, n_ids = 0;
    int32_t *ids = NULL;
    lp_status st = lp_store_read_tokens(db, run->id, &texts, &n, err);
    if (st != LP_OK)
        return st;
    lp_error ids_err = {0};
    if (lp_store_read_token_ids(db, run->id, &ids, &n_ids, &ids_err) != LP_OK)
        n_ids = 0; /* ids are a courtesy: texts alone still make the page */
    /* `--generate` appends its tokens after the prompt: every position from the first generated
     * one on was generated (-1: none was) */
    int64_t first_generated = -1;
    st = lp_store_read_first_generated(db, run->id, &first_generated, err);
    if (st != LP_OK) {
        lp_store_free_texts(texts, n);
        free(ids);
        return st;
    }
    json_t *list = json_array();
    bool ok = true;
    if (first_generated >= 0)
        lp_render_json_set(&ok, root, "first_generated", json_integer(first_generated));
    for (int64_t i = 0; i < n && st == LP_OK; i++) {
        char *visible = lp_render_visible_piece(texts[i] ? texts[i] : "?", TOKEN_MAX_CHARS);
        if (!visible) {
            st = lp_error_set(err, LP_ERR_NOMEM, "viewer: out of memory (tokens)");
            break;
        }
        json_t *t = json_object();
        lp_render_json_set(&ok, t, "text", lp_render_json_text(visible));
        lp_render_json_set(&ok, t, "id", json_integer(i < n_ids ? ids[i] : -1));
        if (first_generated >= 0 && i >= first_generated)
            lp_render_json_set(&ok, t, "generated", json_true());
        lp_render_json_push(&ok, list, t);
        free(visible);
    }
    lp_render_json_set(&ok, root, "tokens", list);
    lp_store_free_texts(texts, n);
    free(ids);
    return st == LP_OK && !ok ? out_of_memory(err) : st;
}

/* The 256 entries of each colormap as "rrggbb..." (entry i is lp_colormap_rgb at its centre), the
 * diverging map's (lp_diverging_rgb), the masked colour each uses, and the initial choices. */
static json_t *describe_options(const lp_render_options *opt, bool *ok_out)
{
    bool ok = true;
    json_t *o = json_object(), *maps = json_object(), *masked = json_object();
    for (int c = 0; c < LP_COLORMAP_COUNT; c++) {
        char table[256 * 6 + 1];
        for (int i = 0; i < 256; i++) {
            lp_rgb rgb = lp_colormap_rgb((lp_colormap)c, ((double)i + 0.5) / 256.0);
            snprintf(table + 6 * i, 7, "%02x%02x%02x", rgb.r, rgb.g, rgb.b);
        }
        lp_render_json_set(&ok, maps, lp_colormap_name((lp_colormap)c), json_string(table));
        lp_render_options each = *opt;
        each.colormap = (lp_colormap)c;
        lp_render_json_set(&ok, masked, lp_colormap_name((lp_colormap)c),
                            hex_rgb(lp_render_masked_rgb(&each)));
    }
    lp_render_json_set(&ok, o, "colormaps", maps);
    char diverging[256 * 6 + 1]; /* lp_diverging_rgb over [-1, 1], for signed matrices */
    for (int i = 0; i < 256; i++) {
        lp_rgb rgb = lp_diverging_rgb(-1.0 + 2.0 * ((double)i + 0.5) / 256.0);
        snprintf(diverging + 6 * i, 7, "%02x%02x%02x", rgb.r, rgb.g, rgb.b);
    }
    lp_render_json_set(&ok, o, "diverging", json_string(diverging));
    lp_render_json_set(&ok, o, "masked", masked);
    lp_render_json_set(&ok, o, "leak_rgb", hex_rgb(lp_render_leak_rgb));
    lp_render_json_set(&ok, o, "bad_rgb", hex_rgb(lp_render_bad_rgb));
    lp_render_json_set(&ok, o, "colormap", json_string(lp_colormap_name(opt->colormap)));
    lp_render_json_set(&ok, o, "scale", json_string(lp_scale_name(opt->scale)));
    lp_render_json_set(&ok, o, "log_floor", json_real(opt->log_floor));
    lp_render_json_set(&ok, o, "gamma", json_real(opt->gamma));
    lp_render_json_set(&ok, o, "leak_threshold", json_real(opt->leak_threshold));
    *ok_out &= ok;
    return o;
}

/* ---- optional sections ------------------------------------------------------------------------ */

/* head_stats: {"names": [...], "values": {"entropy": [n_layers * n_heads], ...}} */
static lp_status section_stats(lp_store *db, const lp_store_run *run, json_t **out,
                               lp_error *err)
{
    json_t *s = json_object(), *names = json_array(), *values = json_object();
    bool ok = true;
    lp_render_json_set(&ok, s, "names", names);
    lp_render_json_set(&ok, s, "values", values);
    *out = s;
    for (int i = 0; i < LP_STAT_COUNT; i++) {
        double *v;
        lp_status st = lp_store_read_head_stat(db, run, (lp_head_stat)i, &v, err);
        if (st == LP_ERR_NOT_FOUND && i >= LP_STAT_KEYS50)
            break; /* traced before the sparsity columns: the viewer shows the others */
        if (st != LP_OK)
            return st;
        json_t *list = json_array();
        for (int64_t j = 0; j < run->n_layers * run->n_heads; j++)
            lp_render_json_push(&ok, list, number(v[j]));
        free(v);
        lp_render_json_push(&ok, names, json_string(lp_head_stat_name((lp_head_stat)i)));
        lp_render_json_set(&ok, values, lp_head_stat_name((lp_head_stat)i), list);
    }
    return ok ? LP_OK : out_of_memory(err);
}

/* A section read from run `from`, which may be another run than the viewed one: {"run_id",
 * "own"} to which the section adds its members. */
static json_t *section_of_run(bool *ok, int64_t from, const lp_store_run *run)
{
    json_t *s = json_object();
    lp_render_json_set(ok, s, "run_id", json_integer(from));
    lp_render_json_set(ok, s, "own", json_boolean(from == run->id));
    return s;
}

/* leak_checks of this run, else of the latest leak run (`loupe leak` records its checks under a
 * run of its own): {"run_id", "own", "passed", "checks": [{name, passed, layer, position,
 * max_abs_diff, detail}]} */
static lp_status section_leak(lp_store *db, const lp_store_run *run, json_t **out, lp_error *err)
{
    int64_t leak_run = run->id, n;
    lp_leak_check *checks;
    lp_status st = lp_store_read_leak_checks(db, leak_run, &checks, &n, err);
    if (st == LP_ERR_NOT_FOUND && lp_store_latest_leak_run(db, &leak_run, err) == LP_OK)
        st = lp_store_read_leak_checks(db, leak_run, &checks, &n, err);
    if (st != LP_OK)
        return st;
    bool passed = true, ok = true;
    json_t *s = section_of_run(&ok, leak_run, run), *list = json_array();
    for (int64_t i = 0; i < n; i++) {
        json_t *c = json_object();
        lp_render_json_set(&ok, c, "name", lp_render_json_text(checks[i].name));
        lp_render_json_set(&ok, c, "passed", json_boolean(checks[i].passed));
        lp_render_json_set(&ok, c, "layer", json_integer(checks[i].layer));
        lp_render_json_set(&ok, c, "position", json_integer(checks[i].position));
        lp_render_json_set(&ok, c, "max_abs_diff", number(checks[i].max_abs_diff));
        lp_render_json_set(&ok, c, "detail", lp_render_json_text(checks[i].detail));
        lp_render_json_push(&ok, list, c);
        passed &= checks[i].passed;
    }
    free(checks);
    lp_render_json_set(&ok, s, "passed", json_boolean(passed));
    lp_render_json_set(&ok, s, "checks", list);
    *out = s;
    return ok ? LP_OK : out_of_memory(err);
}

/* predictions: {"k", "token_id": [n_pos * k], "prob": [...], "piece": [...]} (rank-major). */
static lp_status section_predictions(lp_store *db, const lp_store_run *run, json_t **out,
                                     lp_error *err)
{
    lp_store_predictions p;
    lp_status st = lp_store_read_predictions(db, run, &p, err);
    if (st != LP_OK)
        return st;
    json_t *s = json_object(), *ids = json_array(), *probs = json_array(), *pieces = json_array();
    bool ok = true;
    for (int64_t i = 0; i < p.n_pos * p.k && st == LP_OK; i++) {
        char *visible = p.piece[i] ? lp_render_visible_piece(p.piece[i], 48) : NULL;
        if (p.piece[i] && !visible)
            st = lp_error_set(err, LP_ERR_NOMEM, "viewer: out of memory (predictions)");
        lp_render_json_push(&ok, ids, json_integer(p.token_id[i]));
        lp_render_json_push(&ok, probs, number(p.prob[i]));
        lp_render_json_push(&ok, pieces, visible ? lp_render_json_text(visible) : json_null());
        free(visible);
    }
    lp_render_json_set(&ok, s, "k", json_integer(p.k));
    lp_render_json_set(&ok, s, "token_id", ids);
    lp_render_json_set(&ok, s, "prob", probs);
    lp_render_json_set(&ok, s, "piece", pieces);
    lp_store_predictions_clear(&p);
    *out = s;
    return st == LP_OK && !ok ? out_of_memory(err) : st;
}

/* importance (`loupe ablate`) of this run, else of the latest ablate run (which records its own
 * run, as `loupe render --importance` finds it): {"run_id", "own", "method", "delta": [n_layers *
 * n_heads]} (delta = ablated NLL - clean NLL, null where a head has no row). */
static lp_status section_importance(lp_store *db, const lp_store_run *run, json_t **out,
                                    lp_error *err)
{
    int64_t from = run->id;
    double *delta = NULL;
    char method[16];
    lp_status st = lp_store_read_importance(db, run, &delta, method, err);
    lp_store_run other = {0};
    bool incomplete;
    if (st == LP_ERR_NOT_FOUND && lp_store_latest_run_of_kind(db, "ablate", &from, err) == LP_OK &&
        from != run->id &&
        (st = lp_store_read_run(db, from, NULL, &other, &incomplete, err)) == LP_OK) {
        /* its heads must be this run's for the matrix to open them */
        st = other.n_layers == run->n_layers && other.n_heads == run->n_heads
                 ? lp_store_read_importance(db, &other, &delta, method, err)
                 : LP_ERR_NOT_FOUND;
        lp_store_run_clear(&other);
    }
    if (st != LP_OK)
        return st;
    bool ok = true;
    json_t *s = section_of_run(&ok, from, run), *list = json_array();
    for (int64_t i = 0; i < run->n_layers * run->n_heads; i++)
        lp_render_json_push(&ok, list, number(delta[i]));
    free(delta);
    lp_render_json_set(&ok, s, "method", lp_render_json_text(method));
    lp_render_json_set(&ok, s, "delta", list);
    *out = s;
    return ok ? LP_OK : out_of_memory(err);
}

/* logit_lens (`loupe trace --logit-lens`): {"n_layers", "n_pos", "piece": [layer * n_pos + pos]
 * (the readout's top token, null where none), "prob": [...], "layer_nll": [n_layers]}. */
static lp_status section_logit_lens(lp_store *db, const lp_store_run *run, json_t **out,
                                    lp_error *err)
{
    lp_store_logit_lens lens;
    lp_status st = lp_store_read_logit_lens(db, run, &lens, err);
    if (st != LP_OK)
        return st;
    json_t *s = json_object(), *pieces = json_array(), *probs = json_array(),
           *nll = json_array();
    bool ok = true;
    for (int64_t i = 0; i < lens.n_layers * lens.n_pos && st == LP_OK; i++) {
        char *visible = lens.piece[i] ? lp_render_visible_piece(lens.piece[i], 48) : NULL;
        if (lens.piece[i] && !visible)
            st = lp_error_set(err, LP_ERR_NOMEM, "viewer: out of memory (logit lens)");
        lp_render_json_push(&ok, pieces, visible ? lp_render_json_text(visible) : json_null());
        lp_render_json_push(&ok, probs, number(lens.prob[i]));
        free(visible);
    }
    for (int64_t l = 0; l < lens.n_layers; l++)
        lp_render_json_push(&ok, nll, number(lens.layer_nll[l]));
    lp_render_json_set(&ok, s, "n_layers", json_integer(lens.n_layers));
    lp_render_json_set(&ok, s, "n_pos", json_integer(lens.n_pos));
    lp_render_json_set(&ok, s, "piece", pieces);
    lp_render_json_set(&ok, s, "prob", probs);
    lp_render_json_set(&ok, s, "layer_nll", nll);
    lp_store_logit_lens_clear(&lens);
    *out = s;
    return st == LP_OK && !ok ? out_of_memory(err) : st;
}

/* Difference maps embedded per diff at most (floats as JSON numbers: a few MB of page). */
#define DIFF_MAX_CELLS (1 << 18)

/* One diff's B - A maps, [n_layers * n_heads] arrays of [n_q * n_k] (null where a run has no
 * map), when both its runs are in the page's database and the maps fit DIFF_MAX_CELLS; else
 * "maps_absent" says why. */
static lp_status diff_maps(lp_store *db, const char *db_path, const lp_store_diff_rows *d,
                           json_t *entry, bool *ok, lp_error *err)
{
    const char *why = NULL;
    lp_store_run ra = {0}, rb = {0};
    bool incomplete, have_a = false, have_b = false;
    if (!lp_render_same_file(d->a_db, db_path) || !lp_render_same_file(d->b_db, db_path))
        why = "the two runs are not both in this database";
    else if (!(have_a = lp_store_read_run(db, d->a_run, NULL, &ra, &incomplete, NULL) == LP_OK) ||
             !(have_b = lp_store_read_run(db, d->b_run, NULL, &rb, &incomplete, NULL) == LP_OK))
        why = "a run of the diff is no longer in this database";
    else if (d->n_layers * d->n_heads * d->n_tokens * d->n_tokens > DIFF_MAX_CELLS)
        why = "the difference maps are too large to embed (render them with loupe render --diff)";
    lp_status st = LP_OK;
    float *row_a = NULL, *row_b = NULL;
    json_t *maps = why ? NULL : json_array();
    if (maps) {
        row_a = malloc((size_t)(d->n_tokens > 0 ? d->n_tokens : 1) * sizeof *row_a);
        row_b = malloc((size_t)(d->n_tokens > 0 ? d->n_tokens : 1) * sizeof *row_b);
        if (!row_a || !row_b)
            st = out_of_memory(err);
    }
    for (int64_t i = 0; maps && st == LP_OK && i < d->n_layers * d->n_heads; i++) {
        lp_store_map *ma = NULL, *mb = NULL;
        int64_t qa = 0, ka = 0, qb = 0, kb = 0;
        if (lp_store_map_open(db, &ra, i / d->n_heads, i % d->n_heads, &ma, NULL) == LP_OK &&
            lp_store_map_open(db, &rb, i / d->n_heads, i % d->n_heads, &mb, NULL) == LP_OK) {
            lp_store_map_shape(ma, &qa, &ka);
            lp_store_map_shape(mb, &qb, &kb);
        }
        if (!ma || !mb || qa != qb || ka != kb || ka > d->n_tokens) {
            lp_render_json_push(ok, maps, json_null());
        } else {
            json_t *m = json_object(), *v = json_array();
            for (int64_t q = 0; st == LP_OK && q < qa; q++) {
                if ((st = lp_store_map_read(ma, q, 0, ka, row_a, err)) == LP_OK &&
                    (st = lp_store_map_read(mb, q, 0, ka, row_b, err)) == LP_OK)
                    for (int64_t k = 0; k < ka; k++)
                        lp_render_json_push(ok, v, number((double)(row_b[k] - row_a[k])));
            }
            lp_render_json_set(ok, m, "n_q", json_integer(qa));
            lp_render_json_set(ok, m, "n_k", json_integer(ka));
            lp_render_json_set(ok, m, "diff", v);
            lp_render_json_push(ok, maps, m);
        }
        lp_store_map_close(ma);
        lp_store_map_close(mb);
    }
    free(row_a);
    free(row_b);
    if (have_a)
        lp_store_run_clear(&ra);
    if (have_b)
        lp_store_run_clear(&rb);
    if (maps)
        lp_render_json_set(ok, entry, "maps", maps);
    else
        lp_render_json_set(ok, entry, "maps_absent", json_string(why));
    return st;
}

static json_t *number_list(const double *v, int64_t n, bool *ok)
{
    json_t *list = json_array();
    for (int64_t i = 0; i < n; i++)
        lp_render_json_push(ok, list, number(v[i]));
    return list;
}

/* diffs (`loupe diff`) stored in this database over this run's heads: [{"id", "a_db", "a_run",
 * "b_db", "b_run", "n_tokens", "js", "max_abs" ([n_layers * n_heads]), "kl" ([n_tokens], null
 * without full logits), "argmax_agree" ([n_tokens] 1/0, null where missing), and "maps" or
 * "maps_absent"}], newest last. */
static lp_status section_diffs(lp_store *db, const lp_store_run *run, const char *db_path,
                               json_t **out, lp_error *err)
{
    int64_t *ids = NULL, n = 0;
    lp_status st = lp_store_list_diffs(db, &ids, &n, err);
    json_t *list = json_array();
    bool ok = true;
    for (int64_t i = 0; st == LP_OK && i < n; i++) {
        lp_store_diff_rows d;
        if ((st = lp_store_read_diff(db, ids[i], &d, err)) != LP_OK)
            break;
        if (d.n_layers == run->n_layers && d.n_heads == run->n_heads) {
            json_t *e = json_object(), *agree = json_array();
            lp_render_json_set(&ok, e, "id", json_integer(d.id));
            lp_render_json_set(&ok, e, "a_db", lp_render_json_text(d.a_db));
            lp_render_json_set(&ok, e, "a_run", json_integer(d.a_run));
            lp_render_json_set(&ok, e, "b_db", lp_render_json_text(d.b_db));
            lp_render_json_set(&ok, e, "b_run", json_integer(d.b_run));
            lp_render_json_set(&ok, e, "n_tokens", json_integer(d.n_tokens));
            lp_render_json_set(&ok, e, "js", number_list(d.js, d.n_layers * d.n_heads, &ok));
            lp_render_json_set(&ok, e, "max_abs",
                               number_list(d.max_abs, d.n_layers * d.n_heads, &ok));
            lp_render_json_set(&ok, e, "kl", number_list(d.kl, d.n_tokens, &ok));
            for (int64_t p = 0; p < d.n_tokens; p++)
                lp_render_json_push(&ok, agree, d.argmax_agree[p] < 0
                                                    ? json_null()
                                                    : json_integer(d.argmax_agree[p]));
            lp_render_json_set(&ok, e, "argmax_agree", agree);
            st = diff_maps(db, db_path, &d, e, &ok, err);
            lp_render_json_push(&ok, list, e);
        }
        lp_store_diff_rows_clear(&d);
    }
    free(ids);
    if (st == LP_OK && json_array_size(list) == 0)
        st = LP_ERR_NOT_FOUND;
    *out = list;
    return st == LP_OK && !ok ? out_of_memory(err) : st;
}

typedef lp_status (*section_fn)(lp_store *db, const lp_store_run *run, json_t **out,
                                lp_error *err);

static const struct {
    const char *name;
    section_fn read;
} sections[] = {
    {"stats", section_stats},
    {"leak", section_leak},
    {"predictions", section_predictions},
    {"importance", section_importance},
    {"logit_lens", section_logit_lens},
};

static lp_status describe_sections(lp_store *db, const lp_store_run *run, const char *db_path,
                                   json_t *root, lp_error *err)
{
    json_t *all = json_object();
    bool ok = true;
    lp_render_json_set(&ok, root, "sections", all);
    /* the table's sections, then the diffs (which need the database's path) */
    const size_t n_sections = sizeof sections / sizeof sections[0] + 1;
    for (size_t i = 0; i < n_sections; i++) {
        json_t *s = NULL;
        lp_error section_err = {0};
        lp_status st = i + 1 < n_sections ? sections[i].read(db, run, &s, &section_err)
                                          : section_diffs(db, run, db_path, &s, &section_err);
        if (st == LP_OK) {
            lp_render_json_set(&ok, all, i + 1 < n_sections ? sections[i].name : "diffs", s);
            continue;
        }
        json_decref(s);
        if (st != LP_ERR_NOT_FOUND) {
            if (err)
                *err = section_err;
            return st;
        }
    }
    return ok ? LP_OK : out_of_memory(err);
}

lp_status lp_viewer_describe_run(lp_store *db, const lp_store_run *run,
                                 const lp_render_options *opt, const lp_viewer_options *vopt,
                                 json_t *root, lp_error *err)
{
    char caption[320];
    lp_render_run_caption(run, caption, sizeof caption);
    bool ok = true;
    lp_render_json_set(&ok, root, "format", json_string("loupe-viewer"));
    lp_render_json_set(&ok, root, "version", json_integer(1));
    lp_render_json_set(&ok, root, "title", lp_render_json_text(caption));
    lp_render_json_set(&ok, root, "run", describe_run_row(run, &ok));
    lp_render_json_set(&ok, root, "options", describe_options(opt, &ok));
    if (!ok)
        return out_of_memory(err);
    lp_status st = describe_tokens(db, run, root, err);
    if (st == LP_OK)
        st = describe_sections(db, run, vopt ? vopt->db_path : NULL, root, err);
    return st;
}
