/* --all DIR: every picture of a run, and an index.html that links them with their titles. */
#define _POSIX_C_SOURCE 200809L
#include "render/render.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "render/render_internal.h"

typedef struct gallery_item {
    char file[96];
    char caption[160];
    int section; /* 0 overview, 1 statistics, 2 leak, 3 layer grids, 4 single heads */
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

static void html_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f); break;
        }
    }
}

static lp_status write_index(const char *dir, const lp_store_run *run, const gallery *g,
                             const char *note, lp_error *err)
{
    char path[4096], tmp[4100];
    snprintf(path, sizeof path, "%s/index.html", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return lp_error_set(err, LP_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
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
    static const char *const sections[] = {"Overview", "Head statistics", "Leak check",
                                           "Layers", "Heads"};
    for (int sec = 0; sec < 5; sec++) {
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
            fputs("<figure><a href=\"", f);
            html_escape(f, g->items[i].file);
            fputs("\"><img src=\"", f);
            html_escape(f, g->items[i].file);
            fputs("\" alt=\"", f);
            html_escape(f, g->items[i].caption);
            fputs("\" loading=\"lazy\"></a><figcaption>", f);
            html_escape(f, g->items[i].caption);
            fputs("</figcaption></figure>\n", f);
        }
    }
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

lp_status lp_render_gallery(lp_store *db, const lp_store_run *run,
                            const lp_render_options *opt, const char *dir, int64_t *n_files,
                            lp_error *err)
{
    if (n_files)
        *n_files = 0;
    if (strlen(dir) > 3800)
        return lp_error_set(err, LP_ERR_RANGE, "%s: folder name longer than 3800 bytes", dir);
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return lp_error_set(err, LP_ERR_IO, "%s: exists and is not a folder", dir);
    } else if (mkdir(dir, 0777) != 0) {
        return lp_error_set(err, LP_ERR_IO, "%s: cannot create folder: %s", dir, strerror(errno));
    }
    gallery g = {0};
    char path[4096], file[96], caption[160];
    lp_status s = LP_OK;
    char note[200] = "";

    snprintf(file, sizeof file, "overview.png");
    snprintf(path, sizeof path, "%s/%s", dir, file);
    /* Maps may be stored for a selection of layers and heads, or not at all (--maps none):
     * draw what is there and skip the rest. */
    bool have_maps = true;
    s = lp_render_overview(db, run, opt, path, err);
    if (s == LP_OK) {
        s = add_item(&g, file, "all layers x heads", 0, -1, err);
    } else if (s == LP_ERR_NOT_FOUND) {
        have_maps = false;
        s = LP_OK;
        snprintf(note, sizeof note, "This run stored no attention maps (maps_dtype '%s').",
                 run->maps_dtype);
    }

    bool have_stats = true;
    for (int st_i = 0; st_i < LP_STAT_COUNT && s == LP_OK && have_stats; st_i++) {
        snprintf(file, sizeof file, "stat_%s.png", lp_head_stat_name((lp_head_stat)st_i));
        snprintf(path, sizeof path, "%s/%s", dir, file);
        lp_error stat_err = {0};
        lp_status ss = lp_render_stat_matrix(db, run, (lp_head_stat)st_i, opt, path, &stat_err);
        if (ss == LP_ERR_NOT_FOUND) {
            have_stats = false; /* a run without head_stats: the index says so */
            size_t len = strlen(note);
            snprintf(note + len, sizeof note - len, "%sThis run has no head statistics.",
                     len ? " " : "");
        } else if (ss) {
            s = ss;
            *err = stat_err;
        } else {
            snprintf(caption, sizeof caption, "%s per head", lp_head_stat_name((lp_head_stat)st_i));
            s = add_item(&g, file, caption, 1, -1, err);
        }
    }

    if (s == LP_OK) {
        snprintf(file, sizeof file, "leak.png");
        snprintf(path, sizeof path, "%s/%s", dir, file);
        lp_error leak_err = {0};
        lp_status ls = lp_render_leak_plot(db, run, opt, path, &leak_err);
        int64_t leak_run_id = run->id;
        if (ls == LP_ERR_NOT_FOUND) {
            /* `loupe leak` records its checks under a run of its own: show the latest one. */
            lp_store_run leak_run;
            bool incomplete;
            int64_t latest;
            if (lp_store_latest_leak_run(db, &latest, &leak_err) == LP_OK &&
                lp_store_read_run(db, latest, NULL, &leak_run, &incomplete, &leak_err) ==
                    LP_OK) {
                ls = lp_render_leak_plot(db, &leak_run, opt, path, &leak_err);
                leak_run_id = leak_run.id;
                lp_store_run_clear(&leak_run);
            }
        }
        if (ls == LP_OK) {
            snprintf(caption, sizeof caption, "leak check (run %lld): max |difference| per layer",
                     (long long)leak_run_id);
            s = add_item(&g, file, caption, 2, -1, err);
        } else if (ls != LP_ERR_NOT_FOUND) {
            s = ls;
            *err = leak_err;
        }
    }

    for (int64_t l = 0; l < run->n_layers && s == LP_OK && have_maps; l++) {
        snprintf(file, sizeof file, "layer_%lld_grid.png", (long long)l);
        snprintf(path, sizeof path, "%s/%s", dir, file);
        s = lp_render_layer_grid(db, run, l, opt, path, err);
        if (s == LP_OK) {
            snprintf(caption, sizeof caption, "layer %lld, all heads", (long long)l);
            s = add_item(&g, file, caption, 3, l, err);
        } else if (s == LP_ERR_NOT_FOUND) {
            s = LP_OK; /* no map of this layer was stored */
        }
    }
    for (int64_t l = 0; l < run->n_layers && s == LP_OK && have_maps; l++) {
        for (int64_t h = 0; h < run->n_heads && s == LP_OK; h++) {
            snprintf(file, sizeof file, "layer_%lld_head_%lld.png", (long long)l, (long long)h);
            snprintf(path, sizeof path, "%s/%s", dir, file);
            s = lp_render_head(db, run, l, h, opt, path, err);
            if (s == LP_OK) {
                snprintf(caption, sizeof caption, "layer %lld, head %lld", (long long)l,
                         (long long)h);
                s = add_item(&g, file, caption, 4, l, err);
            } else if (s == LP_ERR_NOT_FOUND) {
                s = LP_OK;
            }
        }
    }
    if (s == LP_OK)
        s = write_index(dir, run, &g, note, err);
    if (s == LP_OK && n_files)
        *n_files = g.n;
    free(g.items);
    return s;
}
