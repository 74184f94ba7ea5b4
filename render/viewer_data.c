/* The viewer's JSON: the run, its tokens, the drawing options and colormaps, and the optional
 * sections (head statistics, leak checks, predictions), each read through trace/store/store.h.
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

/* A string from the database as JSON: itself when it is valid UTF-8, else its visible form (bad
 * bytes as U+FFFD), so one bad row never costs the page. */
static json_t *text(const char *s)
{
    json_t *j = json_string(s ? s : "");
    if (j)
        return j;
    char *visible = lp_render_visible_piece(s, TOKEN_MAX_CHARS);
    j = json_string(visible ? visible : "?");
    free(visible);
    return j;
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

static json_t *describe_run_row(const lp_store_run *run)
{
    json_t *r = json_object();
    json_object_set_new(r, "id", json_integer(run->id));
    json_object_set_new(r, "status", text(run->status));
    json_object_set_new(r, "kind", text(run->kind));
    json_object_set_new(r, "model", text(run->model));
    json_object_set_new(r, "architecture", text(run->architecture));
    json_object_set_new(r, "n_tokens", json_integer(run->n_tokens));
    json_object_set_new(r, "n_layers", json_integer(run->n_layers));
    json_object_set_new(r, "n_heads", json_integer(run->n_heads));
    json_object_set_new(r, "maps_dtype", text(run->maps_dtype));
    json_object_set_new(r, "prompt", text(run->prompt));
    json_object_set_new(r, "causal", json_boolean(run->causal));
    json_t *windows = json_array();
    for (int64_t l = 0; l < run->n_layers; l++)
        json_array_append_new(windows, json_integer(lp_store_run_window(run, l)));
    json_object_set_new(r, "window", windows);
    return r;
}

/* Token texts made visible (lp_render_visible_piece) with their ids. */
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
    json_t *list = json_array();
    for (int64_t i = 0; i < n && st == LP_OK; i++) {
        char *visible = lp_render_visible_piece(texts[i] ? texts[i] : "?", TOKEN_MAX_CHARS);
        if (!visible) {
            st = lp_error_set(err, LP_ERR_NOMEM, "viewer: out of memory (tokens)");
            break;
        }
        json_t *t = json_object();
        json_object_set_new(t, "text", text(visible));
        json_object_set_new(t, "id", json_integer(i < n_ids ? ids[i] : -1));
        json_array_append_new(list, t);
        free(visible);
    }
    json_object_set_new(root, "tokens", list);
    lp_store_free_texts(texts, n);
    free(ids);
    return st;
}

/* The 256 entries of each colormap as "rrggbb..." (entry i is lp_colormap_rgb at its centre), the
 * masked colour each uses, and the initial choices. */
static json_t *describe_options(const lp_render_options *opt)
{
    json_t *o = json_object(), *maps = json_object(), *masked = json_object();
    for (int c = 0; c < LP_COLORMAP_COUNT; c++) {
        char table[256 * 6 + 1];
        for (int i = 0; i < 256; i++) {
            lp_rgb rgb = lp_colormap_rgb((lp_colormap)c, ((double)i + 0.5) / 256.0);
            snprintf(table + 6 * i, 7, "%02x%02x%02x", rgb.r, rgb.g, rgb.b);
        }
        json_object_set_new(maps, lp_colormap_name((lp_colormap)c), json_string(table));
        lp_render_options each = *opt;
        each.colormap = (lp_colormap)c;
        json_object_set_new(masked, lp_colormap_name((lp_colormap)c),
                            hex_rgb(lp_render_masked_rgb(&each)));
    }
    json_object_set_new(o, "colormaps", maps);
    json_object_set_new(o, "masked", masked);
    json_object_set_new(o, "leak_rgb", hex_rgb(lp_render_leak_rgb));
    json_object_set_new(o, "bad_rgb", hex_rgb(lp_render_bad_rgb));
    json_object_set_new(o, "colormap", json_string(lp_colormap_name(opt->colormap)));
    json_object_set_new(o, "scale", json_string(lp_scale_name(opt->scale)));
    json_object_set_new(o, "log_floor", json_real(opt->log_floor));
    json_object_set_new(o, "gamma", json_real(opt->gamma));
    json_object_set_new(o, "leak_threshold", json_real(opt->leak_threshold));
    return o;
}

/* ---- optional sections ------------------------------------------------------------------------ */

/* head_stats: {"names": [...], "values": {"entropy": [n_layers * n_heads], ...}} */
static lp_status section_stats(lp_store *db, const lp_store_run *run, json_t **out,
                               lp_error *err)
{
    json_t *s = json_object(), *names = json_array(), *values = json_object();
    json_object_set_new(s, "names", names);
    json_object_set_new(s, "values", values);
    *out = s;
    for (int i = 0; i < LP_STAT_COUNT; i++) {
        double *v;
        lp_status st = lp_store_read_head_stat(db, run, (lp_head_stat)i, &v, err);
        if (st != LP_OK)
            return st;
        json_t *list = json_array();
        for (int64_t j = 0; j < run->n_layers * run->n_heads; j++)
            json_array_append_new(list, number(v[j]));
        free(v);
        json_array_append_new(names, json_string(lp_head_stat_name((lp_head_stat)i)));
        json_object_set_new(values, lp_head_stat_name((lp_head_stat)i), list);
    }
    return LP_OK;
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
    json_t *s = json_object(), *list = json_array();
    bool passed = true;
    for (int64_t i = 0; i < n; i++) {
        json_t *c = json_object();
        json_object_set_new(c, "name", text(checks[i].name));
        json_object_set_new(c, "passed", json_boolean(checks[i].passed));
        json_object_set_new(c, "layer", json_integer(checks[i].layer));
        json_object_set_new(c, "position", json_integer(checks[i].position));
        json_object_set_new(c, "max_abs_diff", number(checks[i].max_abs_diff));
        json_object_set_new(c, "detail", text(checks[i].detail));
        json_array_append_new(list, c);
        passed &= checks[i].passed;
    }
    free(checks);
    json_object_set_new(s, "run_id", json_integer(leak_run));
    json_object_set_new(s, "own", json_boolean(leak_run == run->id));
    json_object_set_new(s, "passed", json_boolean(passed));
    json_object_set_new(s, "checks", list);
    *out = s;
    return LP_OK;
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
    for (int64_t i = 0; i < p.n_pos * p.k && st == LP_OK; i++) {
        char *visible = p.piece[i] ? lp_render_visible_piece(p.piece[i], 48) : NULL;
        if (p.piece[i] && !visible)
            st = lp_error_set(err, LP_ERR_NOMEM, "viewer: out of memory (predictions)");
        json_array_append_new(ids, json_integer(p.token_id[i]));
        json_array_append_new(probs, number(p.prob[i]));
        json_array_append_new(pieces, visible ? text(visible) : json_null());
        free(visible);
    }
    json_object_set_new(s, "k", json_integer(p.k));
    json_object_set_new(s, "token_id", ids);
    json_object_set_new(s, "prob", probs);
    json_object_set_new(s, "piece", pieces);
    lp_store_predictions_clear(&p);
    *out = s;
    return st;
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
};

static lp_status describe_sections(lp_store *db, const lp_store_run *run, json_t *root,
                                   lp_error *err)
{
    json_t *all = json_object();
    json_object_set_new(root, "sections", all);
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        json_t *s = NULL;
        lp_error section_err = {0};
        lp_status st = sections[i].read(db, run, &s, &section_err);
        if (st == LP_OK) {
            json_object_set_new(all, sections[i].name, s);
            continue;
        }
        json_decref(s);
        if (st != LP_ERR_NOT_FOUND) {
            if (err)
                *err = section_err;
            return st;
        }
    }
    return LP_OK;
}

lp_status lp_viewer_describe_run(lp_store *db, const lp_store_run *run,
                                 const lp_render_options *opt, json_t *root, lp_error *err)
{
    char caption[320];
    lp_render_run_caption(run, caption, sizeof caption);
    json_object_set_new(root, "format", json_string("loupe-viewer"));
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "title", text(caption));
    json_object_set_new(root, "run", describe_run_row(run));
    json_object_set_new(root, "options", describe_options(opt));
    lp_status st = describe_tokens(db, run, root, err);
    if (st == LP_OK)
        st = describe_sections(db, run, root, err);
    return st;
}
