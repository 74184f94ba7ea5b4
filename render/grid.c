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

/* Read maps[i] for the given (layer, head) pairs, pooled to at most `cells` a side. */
static lp_status read_maps(lp_store *db, const lp_store_run *run, const int64_t *layers,
                           const int64_t *heads, int64_t n, int64_t cells, double threshold,
                           lp_pooled_map **out, lp_error *err)
{
    lp_pooled_map *maps = calloc((size_t)n, sizeof *maps);
    if (!maps)
        return lp_error_set(err, LP_ERR_NOMEM, "%lld maps: out of memory", (long long)n);
    /* `loupe trace --layers/--heads` stores maps for a selection: the others are drawn as
     * empty panels, and only a sheet with no map at all is an error. */
    int64_t present = 0;
    lp_error first_missing = {0};
    for (int64_t i = 0; i < n; i++) {
        lp_error one = {0};
        lp_status s = lp_render_read_map(db, run, layers[i], heads[i], cells, threshold, 0, 0,
                                          &maps[i], &one);
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

static void summarize(const lp_pooled_map *maps, int64_t n, float *max_value, int64_t *leaks,
                      int64_t *leaky_maps)
{
    *max_value = 0;
    *leaks = 0;
    *leaky_maps = 0;
    for (int64_t i = 0; i < n; i++) {
        if (maps[i].max_value > *max_value)
            *max_value = maps[i].max_value;
        *leaks += maps[i].n_leak_cells;
        *leaky_maps += maps[i].n_leak_cells > 0;
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

lp_status lp_render_layer_grid(lp_store *db, const lp_store_run *run, int64_t layer,
                               const lp_render_options *opt, const char *out_path, lp_error *err)
{
    if (layer < 0 || layer >= run->n_layers)
        return lp_error_set(err, LP_ERR_RANGE, "--layer %lld: run %lld has layers 0..%lld",
                            (long long)layer, (long long)run->id, (long long)run->n_layers - 1);
    if (lp_image_format_from_path(out_path) == LP_IMAGE_COUNT)
        return lp_error_set(err, LP_ERR_USAGE,
                            "%s: unknown picture format (the extension must be .png, .svg or "
                            ".pdf)",
                            out_path);
    int thumb = opt->thumb > 0 ? opt->thumb : 160;
    if (thumb < 8 || thumb > 2048)
        return lp_error_set(err, LP_ERR_RANGE, "--thumb %d: must be in [8, 2048] pixels", thumb);
    int64_t n = run->n_heads;
    int64_t *layers = malloc((size_t)n * sizeof *layers);
    int64_t *heads = malloc((size_t)n * sizeof *heads);
    if (!layers || !heads) {
        free(layers);
        free(heads);
        return lp_error_set(err, LP_ERR_NOMEM, "grid: out of memory");
    }
    for (int64_t h = 0; h < n; h++) {
        layers[h] = layer;
        heads[h] = h;
    }
    lp_pooled_map *maps = NULL;
    lp_status s = read_maps(db, run, layers, heads, n, thumb, opt->leak_threshold, &maps, err);
    free(layers);
    free(heads);
    if (s == LP_ERR_NOT_FOUND)
        return lp_error_set(err, s, "run %lld stored no attention map for any head of layer %lld",
                            (long long)run->id, (long long)layer);
    if (s)
        return s;
    float max_value;
    int64_t leaks, leaky;
    summarize(maps, n, &max_value, &leaks, &leaky);
    double vmax = lp_render_vmax(opt, (double)max_value);
    const int thumb_asked = thumb;
    thumb = fitted_slot(maps, n, thumb_asked);

    int64_t cols = (int64_t)ceil(sqrt((double)n));
    int64_t rows = (n + cols - 1) / cols;
    const int gap = 14, label_h = 20, left = 24, top = 84, right = 120, bottom = 24;
    int64_t sheet_w = cols * (thumb + gap) - gap;
    int64_t width = left + sheet_w + right;
    int64_t height = top + rows * (thumb + label_h + gap) + bottom;
    if (width < 520)
        width = 520; /* room for the title */
    if (height < top + 200 + bottom)
        height = top + 200 + bottom;
    if (width > 16384 || height > 16384) {
        free_maps(maps, n);
        return lp_error_set(err, LP_ERR_RANGE,
                            "grid of %lld heads at --thumb %d is %lld x %lld pixels, over "
                            "16384: use a smaller --thumb",
                            (long long)n, thumb, (long long)width, (long long)height);
    }
    char caption[320], title[400], subtitle[200], warning[160] = "";
    lp_render_run_caption(run, caption, sizeof caption);
    snprintf(title, sizeof title, "layer %lld, all %lld heads: %s", (long long)layer,
             (long long)n, caption);
    snprintf(subtitle, sizeof subtitle, "%lld queries x %lld keys, shared %s scale up to %.3g, %s",
             (long long)first_present(maps, n)->n_q, (long long)first_present(maps, n)->n_k,
             lp_scale_name(opt->scale), vmax,
             lp_colormap_name(opt->colormap));
    if (leaks > 0)
        snprintf(warning, sizeof warning, "LEAK: %lld masked cells hold probability > %g, in %lld head%s",
                 (long long)leaks, opt->leak_threshold, (long long)leaky, leaky == 1 ? "" : "s");
    lp_canvas c;
    int title_w = lp_title_width(title);
    if (width < title_w)
        width = title_w;
    s = lp_canvas_begin(&c, out_path, (int)width, (int)height, opt->zoom, title, err);
    if (s) {
        free_maps(maps, n);
        return s;
    }
    lp_draw_title(&c, title, subtitle, warning);
    lp_text_style st = lp_text_style_default(12);
    for (int64_t h = 0; h < n && s == LP_OK; h++) {
        double x = left + (h % cols) * (thumb + gap);
        double y = top + (h / cols) * (thumb + label_h + gap);
        char label[64];
        snprintf(label, sizeof label, "head %lld%s", (long long)h,
                 maps[h].n_leak_cells > 0 ? "  LEAK" : "");
        st.rgb = maps[h].n_leak_cells > 0 ? lp_render_leak_rgb : (lp_rgb){0x22, 0x22, 0x22};
        st.bold = maps[h].n_leak_cells > 0;
        lp_draw_text(&c, label, x, y, &st);
        if (maps[h].rows == 0)
            draw_missing(&c, x, y + label_h, thumb);
        else
            s = lp_draw_map(&c, &maps[h], opt, vmax, x, y + label_h,
                            thumb_cell(&maps[h], thumb_asked), thumb_cell(&maps[h], thumb_asked),
                            err);
    }
    if (s == LP_OK) {
        double bar_h = rows * (thumb + label_h + gap) - gap - label_h;
        if (bar_h > 400)
            bar_h = 400;
        if (bar_h < 160)
            bar_h = 160;
        lp_draw_colorbar(&c, left + sheet_w + 28, top + label_h, 16, bar_h, opt, vmax,
                         "probability");
    }
    free_maps(maps, n);
    if (s) {
        lp_canvas_abort(&c);
        return s;
    }
    return lp_canvas_end(&c, err);
}

lp_status lp_render_overview(lp_store *db, const lp_store_run *run,
                             const lp_render_options *opt, const char *out_path, lp_error *err)
{
    if (lp_image_format_from_path(out_path) == LP_IMAGE_COUNT)
        return lp_error_set(err, LP_ERR_USAGE,
                            "%s: unknown picture format (the extension must be .png, .svg or "
                            ".pdf)",
                            out_path);
    int64_t n_l = run->n_layers, n_h = run->n_heads;
    int64_t longest = n_l > n_h ? n_l : n_h;
    int thumb = opt->thumb > 0 ? opt->thumb : 64;
    if (thumb < 4 || thumb > 1024)
        return lp_error_set(err, LP_ERR_RANGE, "--thumb %d: must be in [4, 1024] pixels", thumb);
    /* Big models: shrink the thumbnails so the sheet stays a sheet, not a poster. */
    if (longest * (thumb + 4) > OVERVIEW_MAX_SIDE) {
        int64_t fit = OVERVIEW_MAX_SIDE / longest - 4;
        thumb = (int)(fit < OVERVIEW_MIN_THUMB ? OVERVIEW_MIN_THUMB : fit);
    }
    int64_t n = n_l * n_h;
    int64_t *layers = malloc((size_t)n * sizeof *layers);
    int64_t *heads = malloc((size_t)n * sizeof *heads);
    if (!layers || !heads) {
        free(layers);
        free(heads);
        return lp_error_set(err, LP_ERR_NOMEM, "overview: out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        layers[i] = i / n_h;
        heads[i] = i % n_h;
    }
    lp_pooled_map *maps = NULL;
    lp_status s = read_maps(db, run, layers, heads, n, thumb, opt->leak_threshold, &maps, err);
    free(layers);
    free(heads);
    if (s == LP_ERR_NOT_FOUND)
        return lp_error_set(err, s, "run %lld stored no attention maps (maps_dtype '%s')",
                            (long long)run->id, run->maps_dtype);
    if (s)
        return s;
    float max_value;
    int64_t leaks, leaky;
    summarize(maps, n, &max_value, &leaks, &leaky);
    double vmax = lp_render_vmax(opt, (double)max_value);
    const int thumb_asked = thumb;
    thumb = fitted_slot(maps, n, thumb_asked);

    const int gap = thumb >= 32 ? 6 : 3, left = 64, top = 104, right = 110, bottom = 24;
    int64_t sheet_w = n_h * (thumb + gap) - gap, sheet_h = n_l * (thumb + gap) - gap;
    int64_t width = left + sheet_w + right;
    int64_t height = top + (sheet_h > 140 ? sheet_h : 140) + bottom;
    if (width < 560)
        width = 560; /* room for the title */
    char caption[320], title[400], subtitle[200], warning[160] = "";
    lp_render_run_caption(run, caption, sizeof caption);
    snprintf(title, sizeof title, "all layers x heads: %s", caption);
    snprintf(subtitle, sizeof subtitle, "%lld layers x %lld heads, %lld tokens, shared %s scale up "
             "to %.3g, %s",
             (long long)n_l, (long long)n_h, (long long)first_present(maps, n)->n_k,
             lp_scale_name(opt->scale),
             vmax, lp_colormap_name(opt->colormap));
    if (leaks > 0)
        snprintf(warning, sizeof warning,
                 "LEAK: %lld masked cells hold probability > %g, in %lld map%s (framed red)",
                 (long long)leaks, opt->leak_threshold, (long long)leaky, leaky == 1 ? "" : "s");
    lp_canvas c;
    int title_w = lp_title_width(title);
    if (width < title_w)
        width = title_w;
    s = lp_canvas_begin(&c, out_path, (int)width, (int)height, opt->zoom, title, err);
    if (s) {
        free_maps(maps, n);
        return s;
    }
    lp_draw_title(&c, title, subtitle, warning);
    /* row and column labels, thinned like the token axes */
    int64_t stride = (16 + thumb + gap - 1) / (thumb + gap);
    lp_text_style st = lp_text_style_default(11);
    st.halign = LP_ALIGN_END;
    st.valign = LP_ALIGN_CENTER;
    for (int64_t l = 0; l < n_l; l += stride) {
        char label[32];
        snprintf(label, sizeof label, "L%lld", (long long)l);
        lp_draw_text(&c, label, left - 8, top + l * (thumb + gap) + thumb / 2.0, &st);
    }
    int64_t col_stride = (28 + thumb + gap - 1) / (thumb + gap);
    st.halign = LP_ALIGN_CENTER;
    st.valign = LP_ALIGN_END;
    for (int64_t h = 0; h < n_h; h += col_stride) {
        char label[32];
        snprintf(label, sizeof label, "H%lld", (long long)h);
        lp_draw_text(&c, label, left + h * (thumb + gap) + thumb / 2.0, top - 6, &st);
    }
    for (int64_t i = 0; i < n && s == LP_OK; i++) {
        double x = left + (i % n_h) * (thumb + gap);
        double y = top + (i / n_h) * (thumb + gap);
        if (maps[i].rows == 0) {
            draw_missing(&c, x, y, thumb);
            continue;
        }
        int cell = thumb_cell(&maps[i], thumb_asked);
        s = lp_draw_map(&c, &maps[i], opt, vmax, x, y, cell, cell, err);
        if (s == LP_OK && maps[i].n_leak_cells > 0) {
            /* a whole thumbnail is too small for cell outlines to be seen: frame it */
            cairo_save(c.cr);
            lp_set_rgb(c.cr, lp_render_leak_rgb);
            cairo_set_line_width(c.cr, 2);
            cairo_rectangle(c.cr, x - 2, y - 2, cell * maps[i].cols + 4, cell * maps[i].rows + 4);
            cairo_stroke(c.cr);
            cairo_restore(c.cr);
        }
    }
    if (s == LP_OK) {
        double bar_h = n_l * (thumb + gap) - gap;
        if (bar_h > 400)
            bar_h = 400;
        if (bar_h < 120)
            bar_h = 120;
        lp_draw_colorbar(&c, left + sheet_w + 28, top, 16, bar_h, opt, vmax, "probability");
    }
    free_maps(maps, n);
    if (s) {
        lp_canvas_abort(&c);
        return s;
    }
    return lp_canvas_end(&c, err);
}
