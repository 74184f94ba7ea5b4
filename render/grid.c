/* Small multiples: all heads of one layer (--grid), and every layer x head on one sheet
 * (--overview), each with one shared scale. */
#include "render/render.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "render/render_internal.h"

/* The overview's sheet is kept under about this many pixels a side by shrinking thumbnails. */
#define OVERVIEW_MAX_SIDE 3600
#define OVERVIEW_MIN_THUMB 12

static void free_maps(lp_pooled_map *maps, int64_t n)
{
    if (!maps)
        return;
    for (int64_t i = 0; i < n; i++)
        lp_pooled_map_free(&maps[i]);
    free(maps);
}

/* Read maps[(l - layer0) * n_heads + h] for layers [layer0, layer0 + n_layers) and every head,
 * pooled to at most `cells` a side. */
static lp_status read_maps(lp_store *db, const lp_store_run *run, int64_t layer0,
                           int64_t n_layers, int64_t cells, double threshold, lp_pooled_map **out,
                           lp_error *err)
{
    int64_t n = n_layers * run->n_heads;
    lp_pooled_map *maps = calloc((size_t)n, sizeof *maps);
    if (!maps)
        return lp_error_set(err, LP_ERR_NOMEM, "%lld maps: out of memory", (long long)n);
    /* `loupe trace --layers/--heads` stores maps for a selection: the others are drawn as
     * empty panels, and only a sheet with no map at all is an error. */
    int64_t present = 0;
    lp_error first_missing = {0};
    for (int64_t i = 0; i < n; i++) {
        lp_error one = {0};
        lp_status s = lp_render_read_map(db, run, layer0 + i / run->n_heads, i % run->n_heads,
                                         cells, threshold, 0, 0, &maps[i], &one);
        if (s == LP_ERR_NOT_FOUND) {
            if (!first_missing.code)
                first_missing = one;
            continue;
        }
        if (s) {
            if (err)
                *err = one;
            free_maps(maps, n);
            return s;
        }
        present++;
    }
    if (present == 0) {
        if (err)
            *err = first_missing;
        free_maps(maps, n);
        return LP_ERR_NOT_FOUND;
    }
    *out = maps;
    return LP_OK;
}

/* The first map that is there (read_maps guarantees one). */
static const lp_pooled_map *first_present(const lp_pooled_map *maps, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (maps[i].rows > 0)
            return &maps[i];
    return &maps[0];
}

/* An empty panel where a map was not stored. */
static void draw_missing(lp_canvas *c, double x, double y, double side)
{
    cairo_set_source_rgb(c->cr, 0.96, 0.96, 0.96);
    cairo_rectangle(c->cr, x, y, side, side);
    cairo_fill(c->cr);
    cairo_set_source_rgb(c->cr, 0.75, 0.75, 0.75);
    cairo_set_line_width(c->cr, 1);
    cairo_rectangle(c->cr, x + 0.5, y + 0.5, side - 1, side - 1);
    cairo_stroke(c->cr);
    if (side >= 40) {
        lp_text_style st = lp_text_style_default(side >= 80 ? 11 : 9);
        st.rgb = (lp_rgb){0x88, 0x88, 0x88};
        st.halign = LP_ALIGN_CENTER;
        st.valign = LP_ALIGN_CENTER;
        lp_draw_text(c, "not stored", x + side / 2, y + side / 2, &st);
    }
}

/* Largest cell size that fits a map of these display cells into a thumb x thumb box. */
static int thumb_cell(const lp_pooled_map *m, int thumb)
{
    int64_t disp = m->rows > m->cols ? m->rows : m->cols;
    int64_t cell = thumb / (disp > 0 ? disp : 1);
    return cell < 1 ? 1 : (int)cell;
}

/* The side the panels really take once whole cells are fitted (<= thumb), so the sheet has no
 * uneven gaps. */
static int fitted_slot(const lp_pooled_map *maps, int64_t n, int thumb)
{
    int64_t slot = 1;
    for (int64_t i = 0; i < n; i++) {
        if (maps[i].rows == 0)
            continue; /* not stored */
        int64_t disp = maps[i].rows > maps[i].cols ? maps[i].rows : maps[i].cols;
        int64_t side = thumb_cell(&maps[i], thumb) * disp;
        if (side > slot)
            slot = side;
    }
    return (int)slot;
}

/* The maps of a sheet with their shared scale, and the panel side they fit. */
typedef struct sheet {
    lp_pooled_map *maps;
    int64_t n;
    int64_t leaks, leaky; /* leaking cells, and maps holding any */
    double vmax;
    int thumb_asked, thumb; /* the panel side asked for, and the side whole cells take */
} sheet;

static lp_status read_sheet(lp_store *db, const lp_store_run *run, int64_t layer0,
                            int64_t n_layers, int thumb, const lp_render_options *opt, sheet *sh,
                            lp_error *err)
{
    memset(sh, 0, sizeof *sh);
    sh->n = n_layers * run->n_heads;
    lp_status s = read_maps(db, run, layer0, n_layers, thumb, opt->leak_threshold, &sh->maps, err);
    if (s)
        return s;
    float max_value = 0;
    for (int64_t i = 0; i < sh->n; i++) {
        if (sh->maps[i].max_value > max_value)
            max_value = sh->maps[i].max_value;
        sh->leaks += sh->maps[i].n_leak_cells;
        sh->leaky += sh->maps[i].n_leak_cells > 0;
    }
    sh->vmax = lp_render_vmax(opt, (double)max_value);
    sh->thumb_asked = thumb;
    sh->thumb = fitted_slot(sh->maps, sh->n, thumb);
    return LP_OK;
}

/* The canvas with its title lines; a sheet that leaks says so, counting its `unit`s. */
static lp_status begin_sheet(lp_canvas *c, const sheet *sh, const lp_render_options *opt,
                             const char *out_path, int64_t width, int64_t height,
                             const char *title, const char *subtitle, const char *unit,
                             const char *suffix, lp_error *err)
{
    char warning[160] = "";
    if (sh->leaks > 0)
        snprintf(warning, sizeof warning,
                 "LEAK: %lld masked cells hold probability > %g, in %lld %s%s%s",
                 (long long)sh->leaks, opt->leak_threshold, (long long)sh->leaky, unit,
                 sh->leaky == 1 ? "" : "s", suffix);
    lp_status s = lp_canvas_begin_titled(c, out_path, width, height, opt->zoom, title, err);
    if (s == LP_OK)
        lp_draw_title(c, title, subtitle, warning);
    return s;
}

/* ---- one layer's heads ------------------------------------------------------------------------ */

enum { GRID_GAP = 14, GRID_LABEL_H = 20, GRID_LEFT = 24, GRID_TOP = 84, GRID_RIGHT = 120,
       GRID_BOTTOM = 24 };

static void draw_grid_panels(lp_canvas *c, const sheet *sh, int64_t cols,
                             const lp_render_options *opt, lp_status *s, lp_error *err)
{
    lp_text_style st = lp_text_style_default(12);
    for (int64_t h = 0; h < sh->n && *s == LP_OK; h++) {
        const lp_pooled_map *m = &sh->maps[h];
        double x = GRID_LEFT + (h % cols) * (sh->thumb + GRID_GAP);
        double y = GRID_TOP + (h / cols) * (sh->thumb + GRID_LABEL_H + GRID_GAP);
        char label[64];
        snprintf(label, sizeof label, "head %lld%s", (long long)h,
                 m->n_leak_cells > 0 ? "  LEAK" : "");
        st.rgb = m->n_leak_cells > 0 ? lp_render_leak_rgb : (lp_rgb){0x22, 0x22, 0x22};
        st.bold = m->n_leak_cells > 0;
        lp_draw_text(c, label, x, y, &st);
        int cell = thumb_cell(m, sh->thumb_asked);
        if (m->rows == 0)
            draw_missing(c, x, y + GRID_LABEL_H, sh->thumb);
        else
            *s = lp_draw_map(c, m, opt, sh->vmax, x, y + GRID_LABEL_H, cell, cell, err);
    }
}

static lp_status draw_grid(const lp_store_run *run, int64_t layer, const sheet *sh,
                           const lp_render_options *opt, const char *out_path, lp_error *err)
{
    int64_t n = sh->n, thumb = sh->thumb;
    int64_t cols = (int64_t)ceil(sqrt((double)n));
    int64_t rows = (n + cols - 1) / cols;
    int64_t sheet_w = cols * (thumb + GRID_GAP) - GRID_GAP;
    int64_t width = GRID_LEFT + sheet_w + GRID_RIGHT;
    int64_t height = GRID_TOP + rows * (thumb + GRID_LABEL_H + GRID_GAP) + GRID_BOTTOM;
    if (width < 520)
        width = 520; /* room for the title */
    if (height < GRID_TOP + 200 + GRID_BOTTOM)
        height = GRID_TOP + 200 + GRID_BOTTOM;
    if (width > 16384 || height > 16384)
        return lp_error_set(err, LP_ERR_RANGE,
                            "grid of %lld heads at --thumb %d is %lld x %lld pixels, over "
                            "16384: use a smaller --thumb",
                            (long long)n, sh->thumb, (long long)width, (long long)height);
    char caption[320], title[400], subtitle[200];
    lp_render_run_caption(run, caption, sizeof caption);
    snprintf(title, sizeof title, "layer %lld, all %lld heads: %s", (long long)layer,
             (long long)n, caption);
    snprintf(subtitle, sizeof subtitle, "%lld queries x %lld keys, shared %s scale up to %.3g, %s",
             (long long)first_present(sh->maps, n)->n_q, (long long)first_present(sh->maps, n)->n_k,
             lp_scale_name(opt->scale), sh->vmax, lp_colormap_name(opt->colormap));
    lp_canvas c;
    lp_status s = begin_sheet(&c, sh, opt, out_path, width, height, title, subtitle, "head", "",
                              err);
    if (s)
        return s;
    draw_grid_panels(&c, sh, cols, opt, &s, err);
    if (s) {
        lp_canvas_abort(&c);
        return s;
    }
    double bar_h = rows * (thumb + GRID_LABEL_H + GRID_GAP) - GRID_GAP - GRID_LABEL_H;
    bar_h = bar_h > 400 ? 400 : (bar_h < 160 ? 160 : bar_h);
    lp_draw_colorbar(&c, GRID_LEFT + sheet_w + 28, GRID_TOP + GRID_LABEL_H, 16, bar_h, opt,
                     sh->vmax, "probability");
    return lp_canvas_end(&c, err);
}

lp_status lp_render_layer_grid(lp_store *db, const lp_store_run *run, int64_t layer,
                               const lp_render_options *opt, const char *out_path, lp_error *err)
{
    if (layer < 0 || layer >= run->n_layers)
        return lp_error_set(err, LP_ERR_RANGE, "--layer %lld: run %lld has layers 0..%lld",
                            (long long)layer, (long long)run->id, (long long)run->n_layers - 1);
    lp_status s = lp_render_check_path(out_path, err);
    if (s)
        return s;
    int thumb = opt->thumb > 0 ? opt->thumb : 160;
    if (thumb < 8 || thumb > 2048)
        return lp_error_set(err, LP_ERR_RANGE, "--thumb %d: must be in [8, 2048] pixels", thumb);
    sheet sh;
    s = read_sheet(db, run, layer, 1, thumb, opt, &sh, err);
    if (s == LP_ERR_NOT_FOUND)
        return lp_error_set(err, s, "run %lld stored no attention map for any head of layer %lld",
                            (long long)run->id, (long long)layer);
    if (s)
        return s;
    s = draw_grid(run, layer, &sh, opt, out_path, err);
    free_maps(sh.maps, sh.n);
    return s;
}

/* ---- every layer x head ----------------------------------------------------------------------- */

enum { OVERVIEW_LEFT = 64, OVERVIEW_TOP = 104, OVERVIEW_RIGHT = 110, OVERVIEW_BOTTOM = 24 };

/* Row and column labels, thinned like the token axes. */
static void draw_overview_labels(lp_canvas *c, const lp_store_run *run, int thumb, int gap)
{
    int64_t stride = (16 + thumb + gap - 1) / (thumb + gap);
    lp_text_style st = lp_text_style_default(11);
    st.halign = LP_ALIGN_END;
    st.valign = LP_ALIGN_CENTER;
    for (int64_t l = 0; l < run->n_layers; l += stride) {
        char label[32];
        snprintf(label, sizeof label, "L%lld", (long long)l);
        lp_draw_text(c, label, OVERVIEW_LEFT - 8, OVERVIEW_TOP + l * (thumb + gap) + thumb / 2.0,
                     &st);
    }
    int64_t col_stride = (28 + thumb + gap - 1) / (thumb + gap);
    st.halign = LP_ALIGN_CENTER;
    st.valign = LP_ALIGN_END;
    for (int64_t h = 0; h < run->n_heads; h += col_stride) {
        char label[32];
        snprintf(label, sizeof label, "H%lld", (long long)h);
        lp_draw_text(c, label, OVERVIEW_LEFT + h * (thumb + gap) + thumb / 2.0, OVERVIEW_TOP - 6,
                     &st);
    }
}

static lp_status draw_overview_panels(lp_canvas *c, const sheet *sh, int64_t n_h, int gap,
                                      const lp_render_options *opt, lp_error *err)
{
    for (int64_t i = 0; i < sh->n; i++) {
        const lp_pooled_map *m = &sh->maps[i];
        double x = OVERVIEW_LEFT + (i % n_h) * (sh->thumb + gap);
        double y = OVERVIEW_TOP + (i / n_h) * (sh->thumb + gap);
        if (m->rows == 0) {
            draw_missing(c, x, y, sh->thumb);
            continue;
        }
        int cell = thumb_cell(m, sh->thumb_asked);
        lp_status s = lp_draw_map(c, m, opt, sh->vmax, x, y, cell, cell, err);
        if (s)
            return s;
        if (m->n_leak_cells > 0) {
            /* a whole thumbnail is too small for cell outlines to be seen: frame it */
            cairo_save(c->cr);
            lp_set_rgb(c->cr, lp_render_leak_rgb);
            cairo_set_line_width(c->cr, 2);
            cairo_rectangle(c->cr, x - 2, y - 2, cell * m->cols + 4, cell * m->rows + 4);
            cairo_stroke(c->cr);
            cairo_restore(c->cr);
        }
    }
    return LP_OK;
}

static lp_status draw_overview(const lp_store_run *run, const sheet *sh,
                               const lp_render_options *opt, const char *out_path, lp_error *err)
{
    int64_t n_l = run->n_layers, n_h = run->n_heads;
    const int gap = sh->thumb >= 32 ? 6 : 3;
    int64_t sheet_w = n_h * (sh->thumb + gap) - gap, sheet_h = n_l * (sh->thumb + gap) - gap;
    int64_t width = OVERVIEW_LEFT + sheet_w + OVERVIEW_RIGHT;
    int64_t height = OVERVIEW_TOP + (sheet_h > 140 ? sheet_h : 140) + OVERVIEW_BOTTOM;
    if (width < 560)
        width = 560; /* room for the title */
    char caption[320], title[400], subtitle[200];
    lp_render_run_caption(run, caption, sizeof caption);
    snprintf(title, sizeof title, "all layers x heads: %s", caption);
    snprintf(subtitle, sizeof subtitle, "%lld layers x %lld heads, %lld tokens, shared %s scale up "
             "to %.3g, %s",
             (long long)n_l, (long long)n_h, (long long)first_present(sh->maps, sh->n)->n_k,
             lp_scale_name(opt->scale), sh->vmax, lp_colormap_name(opt->colormap));
    lp_canvas c;
    lp_status s = begin_sheet(&c, sh, opt, out_path, width, height, title, subtitle, "map",
                              " (framed red)", err);
    if (s)
        return s;
    draw_overview_labels(&c, run, sh->thumb, gap);
    if ((s = draw_overview_panels(&c, sh, n_h, gap, opt, err)) != LP_OK) {
        lp_canvas_abort(&c);
        return s;
    }
    double bar_h = n_l * (sh->thumb + gap) - gap;
    bar_h = bar_h > 400 ? 400 : (bar_h < 120 ? 120 : bar_h);
    lp_draw_colorbar(&c, OVERVIEW_LEFT + sheet_w + 28, OVERVIEW_TOP, 16, bar_h, opt, sh->vmax,
                     "probability");
    return lp_canvas_end(&c, err);
}

lp_status lp_render_overview(lp_store *db, const lp_store_run *run,
                             const lp_render_options *opt, const char *out_path, lp_error *err)
{
    lp_status s = lp_render_check_path(out_path, err);
    if (s)
        return s;
    int64_t longest = run->n_layers > run->n_heads ? run->n_layers : run->n_heads;
    int thumb = opt->thumb > 0 ? opt->thumb : 64;
    if (thumb < 4 || thumb > 1024)
        return lp_error_set(err, LP_ERR_RANGE, "--thumb %d: must be in [4, 1024] pixels", thumb);
    /* Big models: shrink the thumbnails so the sheet stays a sheet, not a poster. */
    if (longest * (thumb + 4) > OVERVIEW_MAX_SIDE) {
        int64_t fit = OVERVIEW_MAX_SIDE / longest - 4;
        thumb = (int)(fit < OVERVIEW_MIN_THUMB ? OVERVIEW_MIN_THUMB : fit);
    }
    sheet sh;
    s = read_sheet(db, run, 0, run->n_layers, thumb, opt, &sh, err);
    if (s == LP_ERR_NOT_FOUND)
        return lp_error_set(err, s, "run %lld stored no attention maps (maps_dtype '%s')",
                            (long long)run->id, run->maps_dtype);
    if (s)
        return s;
    s = draw_overview(run, &sh, opt, out_path, err);
    free_maps(sh.maps, sh.n);
    return s;
}
