/* --all DIR: every picture of a run, and an index.html that links them with their titles. */
#define _POSIX_C_SOURCE 200809L
#include "render/render.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "render/render_internal.h"

typedef struct gallery_item {
    char file[96];
    char caption[160];
    int section; /* 0 overview, 1 statistics, 2 leak, 3 layer grids, 4 single heads, 5 which
                    heads matter (importance, logit lens; shown after the statistics), 6 the
                    database's diffs (after those) */
    int64_t layer; /* single heads: grouped under a heading per layer */
} gallery_item;

typedef struct gallery {
    gallery_item *items;
    int64_t n, cap;
} gallery;

static lp_status add_item(gallery *g, const char *file, const char *caption, int section,
                          int64_t layer, lp_error *err)
{
    if (g->n == g->cap) {
        int64_t cap = g->cap ? 2 * g->cap : 64;
        gallery_item *grown = realloc(g->items, (size_t)cap * sizeof *grown);
        if (!grown)
            return lp_error_set(err, LP_ERR_NOMEM, "gallery: out of memory");
        g->items = grown;
        g->cap = cap;
    }
    gallery_item *it = &g->items[g->n++];
    snprintf(it->file, sizeof it->file, "%s", file);
    snprintf(it->caption, sizeof it->caption, "%s", caption);
    it->section = section;
    it->layer = layer;
    return LP_OK;
}

static void html_escape(FILE *f, const char *s) { lp_render_escape(f, s, true); }

/* The page's head, its title, the line about the run and the link to the viewer. */
static void write_index_head(FILE *f, const lp_store_run *run, const char *note, bool viewer)
{
    char caption[320];
    lp_render_run_caption(run, caption, sizeof caption);
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>loupe: ",
          f);
    html_escape(f, caption);
    fputs("</title>\n<style>\nbody{font-family:sans-serif;margin:2em;color:#222}\n"
          "figure{display:inline-block;margin:0 1em 1.5em 0;vertical-align:top}\n"
          "figure img{max-width:420px;border:1px solid #ddd}\n"
          "figcaption{font-size:0.9em;color:#555}\n</style>\n</head>\n<body>\n<h1>",
          f);
    html_escape(f, caption);
    fprintf(f, "</h1>\n<p>%lld layers x %lld heads, %lld tokens, status ",
            (long long)run->n_layers, (long long)run->n_heads, (long long)run->n_tokens);
    html_escape(f, run->status);
    fputs(".", f);
    if (note && *note) {
        fputs(" ", f);
        html_escape(f, note);
    }
    fputs("</p>\n", f);
    if (run->prompt[0]) {
        fputs("<p>Prompt: <q>", f);
        html_escape(f, run->prompt);
        fputs("</q></p>\n", f);
    }
    if (viewer)
        fputs("<p><a href=\"viewer.html\">Open the interactive viewer</a> (one file, works "
              "offline): zoom into any head, hover for tokens and probabilities, the text view, "
              "sortable statistics.</p>\n",
              f);
}

static void write_figure(FILE *f, const gallery_item *it)
{
    fputs("<figure><a href=\"", f);
    html_escape(f, it->file);
    fputs("\"><img src=\"", f);
    html_escape(f, it->file);
    fputs("\" alt=\"", f);
    html_escape(f, it->caption);
    fputs("\" loading=\"lazy\"></a><figcaption>", f);
    html_escape(f, it->caption);
    fputs("</figcaption></figure>\n", f);
}

/* The pictures by section, single heads under a heading per layer. */
static void write_sections(FILE *f, const gallery *g)
{
    static const char *const sections[] = {"Overview", "Head statistics", "Leak check",
                                           "Layers", "Heads", "Which heads matter",
                                           "What changed (loupe diff)"};
    static const int order[] = {0, 1, 5, 6, 2, 3, 4};
    for (int o = 0; o < 7; o++) {
        int sec = order[o];
        bool any = false;
        int64_t layer = -1;
        for (int64_t i = 0; i < g->n; i++) {
            if (g->items[i].section != sec)
                continue;
            if (!any)
                fprintf(f, "<h2>%s</h2>\n", sections[sec]);
            any = true;
            if (sec == 4 && g->items[i].layer != layer) {
                layer = g->items[i].layer;
                fprintf(f, "<h3 id=\"layer-%lld\">Layer %lld</h3>\n", (long long)layer,
                        (long long)layer);
            }
            write_figure(f, &g->items[i]);
        }
    }
}

/* index.html, written to a temporary file and renamed. */
static lp_status write_index(const char *dir, const lp_store_run *run, const gallery *g,
                             const char *note, bool viewer, lp_error *err)
{
    char path[4096], tmp[4100];
    snprintf(path, sizeof path, "%s/index.html", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return lp_error_set(err, LP_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    write_index_head(f, run, note, viewer);
    write_sections(f, g);
    fputs("</body>\n</html>\n", f);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) {
        unlink(tmp);
        return lp_error_set(err, LP_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    }
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        return lp_error_set(err, LP_ERR_IO, "%s: cannot rename: %s", path, strerror(errno));
    }
    return LP_OK;
}

/* ---- the pictures ----------------------------------------------------------------------------- */

/* What the gallery is writing: where, what it has, and what the index should say is missing. */
typedef struct gallery_job {
    lp_store *db;
    const lp_store_run *run;
    const lp_render_options *opt;
    const char *dir;
    gallery g;
    char note[200];
    bool have_maps;
} gallery_job;

static void add_note(gallery_job *j, const char *text)
{
    size_t len = strlen(j->note);
    snprintf(j->note + len, sizeof j->note - len, "%s%s", len ? " " : "", text);
}

static void picture_path(const gallery_job *j, const char *file, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", j->dir, file);
}

/* Maps may be stored for a selection of layers and heads, or not at all (--maps none): draw what
 * is there and skip the rest. */
static lp_status add_overview(gallery_job *j, lp_error *err)
{
    char path[4096];
    picture_path(j, "overview.png", path, sizeof path);
    lp_status s = lp_render_overview(j->db, j->run, j->opt, path, err);
    j->have_maps = s != LP_ERR_NOT_FOUND;
    if (s == LP_OK)
        return add_item(&j->g, "overview.png", "all layers x heads", 0, -1, err);
    if (s != LP_ERR_NOT_FOUND)
        return s;
    snprintf(j->note, sizeof j->note, "This run stored no attention maps (maps_dtype '%s').",
             j->run->maps_dtype);
    return LP_OK;
}

static lp_status add_stats(gallery_job *j, lp_error *err)
{
    char path[4096], file[96], caption[160];
    for (int st_i = 0; st_i < LP_STAT_COUNT; st_i++) {
        snprintf(file, sizeof file, "stat_%s.png", lp_head_stat_name((lp_head_stat)st_i));
        picture_path(j, file, path, sizeof path);
        lp_error stat_err = {0};
        lp_status ss = lp_render_stat_matrix(j->db, j->run, (lp_head_stat)st_i, j->opt, path,
                                             &stat_err);
        if (ss == LP_ERR_NOT_FOUND && st_i == LP_STAT_LEARNED_SINK)
            return LP_OK; /* a model without learned sinks */
        if (ss == LP_ERR_NOT_FOUND && st_i >= LP_STAT_KEYS50) {
            add_note(j, "This run was traced before loupe recorded attention sparsity.");
            return LP_OK; /* the sparsity columns come last */
        }
        if (ss == LP_ERR_NOT_FOUND) {
            add_note(j, "This run has no head statistics."); /* a run without head_stats */
            return LP_OK;
        }
        if (ss) {
            *err = stat_err;
            return ss;
        }
        snprintf(caption, sizeof caption, "%s per head", lp_head_stat_name((lp_head_stat)st_i));
        if ((ss = add_item(&j->g, file, caption, 1, -1, err)) != LP_OK)
            return ss;
    }
    return LP_OK;
}

/* The run's own leak checks, else those of the latest leak run (`loupe leak` records its checks
 * under a run of its own). */
static lp_status add_leak(gallery_job *j, lp_error *err)
{
    char path[4096], caption[160];
    picture_path(j, "leak.png", path, sizeof path);
    lp_error leak_err = {0};
    lp_status ls = lp_render_leak_plot(j->db, j->run, j->opt, path, &leak_err);
    int64_t leak_run_id = j->run->id;
    if (ls == LP_ERR_NOT_FOUND) {
        lp_store_run leak_run;
        bool incomplete;
        int64_t latest;
        if (lp_store_latest_leak_run(j->db, &latest, &leak_err) == LP_OK &&
            lp_store_read_run(j->db, latest, NULL, &leak_run, &incomplete, &leak_err) == LP_OK) {
            ls = lp_render_leak_plot(j->db, &leak_run, j->opt, path, &leak_err);
            leak_run_id = leak_run.id;
            lp_store_run_clear(&leak_run);
        }
    }
    if (ls == LP_ERR_NOT_FOUND)
        return LP_OK;
    if (ls != LP_OK) {
        *err = leak_err;
        return ls;
    }
    snprintf(caption, sizeof caption, "leak check (run %lld): max |difference| per layer",
             (long long)leak_run_id);
    return add_item(&j->g, "leak.png", caption, 2, -1, err);
}

/* The importance matrix of the run's own ablation, else of the latest ablate run (`loupe ablate`
 * records under a run of its own); the run's logit lens. Either is left out when missing. */
static lp_status add_heads_matter(gallery_job *j, lp_error *err)
{
    char path[4096], caption[160];
    lp_error local = {0};
    picture_path(j, "importance.png", path, sizeof path);
    lp_status s = lp_render_importance(j->db, j->run, j->opt, path, &local);
    int64_t run_id = j->run->id;
    if (s == LP_ERR_NOT_FOUND) {
        lp_store_run ab;
        bool incomplete;
        if (lp_store_latest_run_of_kind(j->db, "ablate", &run_id, &local) == LP_OK &&
            lp_store_read_run(j->db, run_id, NULL, &ab, &incomplete, &local) == LP_OK) {
            s = lp_render_importance(j->db, &ab, j->opt, path, &local);
            lp_store_run_clear(&ab);
        }
    }
    if (s == LP_OK) {
        snprintf(caption, sizeof caption, "head importance (run %lld): NLL delta when ablated",
                 (long long)run_id);
        s = add_item(&j->g, "importance.png", caption, 5, -1, err);
    } else if (s != LP_ERR_NOT_FOUND) {
        *err = local;
        return s;
    }
    if (s != LP_OK && s != LP_ERR_NOT_FOUND)
        return s;
    picture_path(j, "logit_lens.png", path, sizeof path);
    s = lp_render_logit_lens(j->db, j->run, j->opt, path, &local);
    if (s == LP_ERR_NOT_FOUND)
        return LP_OK;
    if (s != LP_OK) {
        *err = local;
        return s;
    }
    return add_item(&j->g, "logit_lens.png", "logit lens: top token per layer and position", 5,
                    -1, err);
}

/* Every diff the database stores: its JS matrix, and the difference map of its most changed
 * head when both runs' maps can be reached (else the index says why not). */
static lp_status add_diffs(gallery_job *j, const char *db_path, lp_error *err)
{
    int64_t *ids = NULL, n = 0;
    lp_status s = lp_store_list_diffs(j->db, &ids, &n, err);
    char path[4096], file[96], caption[160];
    for (int64_t i = 0; s == LP_OK && i < n; i++) {
        snprintf(file, sizeof file, "diff_%lld_js.png", (long long)ids[i]);
        picture_path(j, file, path, sizeof path);
        if ((s = lp_render_diff_matrix(j->db, ids[i], j->opt, path, err)) != LP_OK)
            break;
        snprintf(caption, sizeof caption, "diff %lld: mean JS divergence per head",
                 (long long)ids[i]);
        if ((s = add_item(&j->g, file, caption, 6, -1, err)) != LP_OK)
            break;
        lp_store_diff_rows d;
        if ((s = lp_store_read_diff(j->db, ids[i], &d, err)) != LP_OK)
            break;
        int64_t top = -1;
        for (int64_t h = 0; h < d.n_layers * d.n_heads; h++)
            if (isfinite(d.js[h]) && (top < 0 || d.js[h] > d.js[top]))
                top = h;
        int64_t l = top / d.n_heads, hh = top % d.n_heads;
        lp_store_diff_rows_clear(&d);
        if (top < 0)
            continue; /* neither run stored maps */
        snprintf(file, sizeof file, "diff_%lld_layer_%lld_head_%lld.png", (long long)ids[i],
                 (long long)l, (long long)hh);
        picture_path(j, file, path, sizeof path);
        lp_error local = {0};
        s = lp_render_diff_head(j->db, db_path, ids[i], l, hh, j->opt, path, &local);
        if (s == LP_ERR_NOT_FOUND) {
            char note[160];
            snprintf(note, sizeof note, "Diff %lld's runs are not reachable from here: no "
                     "difference map.", (long long)ids[i]);
            add_note(j, note);
            s = LP_OK;
            continue;
        }
        if (s != LP_OK) {
            *err = local;
            break;
        }
        snprintf(caption, sizeof caption, "diff %lld: layer %lld head %lld (largest JS), B - A",
                 (long long)ids[i], (long long)l, (long long)hh);
        s = add_item(&j->g, file, caption, 6, -1, err);
    }
    free(ids);
    return s;
}

/* A grid per layer, then every head; a layer or head whose maps were not stored is skipped. */
static lp_status add_maps(gallery_job *j, lp_error *err)
{
    char path[4096], file[96], caption[160];
    lp_status s = LP_OK;
    for (int64_t l = 0; l < j->run->n_layers && s == LP_OK; l++) {
        snprintf(file, sizeof file, "layer_%lld_grid.png", (long long)l);
        picture_path(j, file, path, sizeof path);
        s = lp_render_layer_grid(j->db, j->run, l, j->opt, path, err);
        snprintf(caption, sizeof caption, "layer %lld, all heads", (long long)l);
        s = s == LP_OK ? add_item(&j->g, file, caption, 3, l, err) : s;
        s = s == LP_ERR_NOT_FOUND ? LP_OK : s;
    }
    for (int64_t i = 0; i < j->run->n_layers * j->run->n_heads && s == LP_OK; i++) {
        int64_t l = i / j->run->n_heads, h = i % j->run->n_heads;
        snprintf(file, sizeof file, "layer_%lld_head_%lld.png", (long long)l, (long long)h);
        picture_path(j, file, path, sizeof path);
        s = lp_render_head(j->db, j->run, l, h, j->opt, path, err);
        snprintf(caption, sizeof caption, "layer %lld, head %lld", (long long)l, (long long)h);
        s = s == LP_OK ? add_item(&j->g, file, caption, 4, l, err) : s;
        s = s == LP_ERR_NOT_FOUND ? LP_OK : s;
    }
    return s;
}

static lp_status make_dir(const char *dir, lp_error *err)
{
    if (strlen(dir) > 3800)
        return lp_error_set(err, LP_ERR_RANGE, "%s: folder name longer than 3800 bytes", dir);
    struct stat st;
    if (stat(dir, &st) == 0)
        return S_ISDIR(st.st_mode)
                   ? LP_OK
                   : lp_error_set(err, LP_ERR_IO, "%s: exists and is not a folder", dir);
    if (mkdir(dir, 0777) != 0)
        return lp_error_set(err, LP_ERR_IO, "%s: cannot create folder: %s", dir, strerror(errno));
    return LP_OK;
}

/* The viewer beside the pictures. */
static lp_status add_viewer(const gallery_job *j, const lp_viewer_options *vopt, lp_error *err)
{
    char path[4096];
    picture_path(j, "viewer.html", path, sizeof path);
    return lp_render_viewer(j->db, j->run, j->opt, vopt, path, NULL, err);
}

lp_status lp_render_gallery(lp_store *db, const lp_store_run *run,
                            const lp_render_options *opt, const lp_viewer_options *vopt,
                            const char *dir, int64_t *n_files, lp_error *err)
{
    if (n_files)
        *n_files = 0;
    lp_status s = make_dir(dir, err);
    if (s)
        return s;
    gallery_job j = {db, run, opt, dir, {0}, "", true};
    s = add_overview(&j, err);
    if (s == LP_OK)
        s = add_stats(&j, err);
    if (s == LP_OK)
        s = add_leak(&j, err);
    if (s == LP_OK)
        s = add_heads_matter(&j, err);
    if (s == LP_OK)
        s = add_diffs(&j, vopt ? vopt->db_path : NULL, err);
    if (s == LP_OK && j.have_maps)
        s = add_maps(&j, err);
    if (s == LP_OK)
        s = add_viewer(&j, vopt, err);
    if (s == LP_OK)
        s = write_index(dir, run, &j.g, j.note, true, err);
    if (s == LP_OK && n_files)
        *n_files = j.g.n;
    free(j.g.items);
    return s;
}
