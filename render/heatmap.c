/* One head's attention map: cells, token labels on both axes, colorbar, title. */
#include "render/render.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "render/render_internal.h"

/* Cells bigger than this look like a spreadsheet, not a picture. */
#define MAX_AUTO_CELL 24
/* Height of one label line; labels closer than this are thinned. */
#define LABEL_PITCH 14
/* Maps flatter than this many pixels get taller rows. */
#define MIN_FLAT_MAP_HEIGHT 48

lp_status lp_render_heatmap_layout(int64_t n_q, int64_t n_k, const lp_render_options *opt,
                                   lp_heatmap_layout *layout, lp_error *err)
{
    memset(layout, 0, sizeof *layout);
    if (n_q < 1 || n_k < 1)
        return lp_error_set(err, LP_ERR_RANGE, "map of %lld x %lld cells: both sides must be >= 1",
                            (long long)n_q, (long long)n_k);
    if (opt->size < 16 || opt->size > 4096)
        return lp_error_set(err, LP_ERR_RANGE, "--size %d: must be in [16, 4096] pixels",
                            opt->size);
    if (opt->cell < 0 || opt->cell > 256)
        return lp_error_set(err, LP_ERR_RANGE, "--cell %d: must be in [1, 256] pixels",
                            opt->cell);
    int64_t longest = n_q > n_k ? n_q : n_k;
    int64_t block = (longest + opt->size - 1) / opt->size;
    int64_t rows = (n_q + block - 1) / block, cols = (n_k + block - 1) / block;
    int64_t disp = rows > cols ? rows : cols;
    int64_t fit = opt->size / disp; /* >= 1 since disp <= size */
    int64_t cell = opt->cell > 0 ? opt->cell : (fit > MAX_AUTO_CELL ? MAX_AUTO_CELL : fit);
    if (cell > fit)
        cell = fit;
    if (cell < 1)
        cell = 1;
    layout->block = block;
    layout->rows = rows;
    layout->cols = cols;
    /* A few queries over many keys would be a hairline: stretch the rows to stay readable. */
    int64_t cell_h = cell;
    if (rows * cell_h < MIN_FLAT_MAP_HEIGHT) {
        cell_h = (MIN_FLAT_MAP_HEIGHT + rows - 1) / rows;
        if (cell_h > MAX_AUTO_CELL)
            cell_h = MAX_AUTO_CELL;
        if (cell_h < cell)
            cell_h = cell;
    }
    layout->cell = (int)cell;
    layout->cell_h = (int)cell_h;
    layout->map_x = LP_RENDER_MARGIN_LEFT;
    layout->map_y = LP_RENDER_MARGIN_TOP;
    int64_t map_w = cols * cell, map_h = rows * cell_h;
    layout->width = (int)(LP_RENDER_MARGIN_LEFT +
                          (map_w > LP_RENDER_MIN_MAP ? map_w : LP_RENDER_MIN_MAP) +
                          LP_RENDER_MARGIN_RIGHT);
    layout->height = (int)(LP_RENDER_MARGIN_TOP +
                           (map_h > LP_RENDER_MIN_MAP ? map_h : LP_RENDER_MIN_MAP) +
                           LP_RENDER_MARGIN_BOTTOM);
    return LP_OK;
}

/* Label for the token at pos: the piece alone when every position is labelled, else prefixed
 * with its position so thinned axes can still be read. */
static void axis_label(char *buf, size_t size, char **pieces, int64_t n_pieces, int64_t pos,
                       bool with_pos)
{
    const char *piece = pos >= 0 && pos < n_pieces && pieces[pos] ? pieces[pos] : "?";
    if (with_pos)
        snprintf(buf, size, "%lld %s", (long long)pos, piece);
    else
        snprintf(buf, size, "%s", piece);
}

/* The smallest of 1, 2, 5 x 10^k tokens that is at least `min_tokens`. */
static int64_t label_step(int64_t min_tokens)
{
    if (min_tokens <= 1)
        return 1;
    for (int64_t p = 1;; p *= 10) {
        if (p >= min_tokens)
            return p;
        if (2 * p >= min_tokens)
            return 2 * p;
        if (5 * p >= min_tokens)
            return 5 * p;
    }
}

/* The first multiple of step at or after from (from >= 0). */
static int64_t first_multiple(int64_t from, int64_t step)
{
    return (from + step - 1) / step * step;
}

static void scale_caption(const lp_render_options *opt, double vmax, char *buf, size_t size)
{
    switch (opt->scale) {
    case LP_SCALE_LOG:
        snprintf(buf, size, "log scale [%g, %.3g]", opt->log_floor, vmax);
        break;
    case LP_SCALE_POWER:
        snprintf(buf, size, "power scale (gamma %g) [0, %.3g]", opt->gamma, vmax);
        break;
    default:
        snprintf(buf, size, "linear scale [0, %.3g]", vmax);
        break;
    }
}

/* The map, its picture's geometry and the token labels of one head. */
typedef struct head_picture {
    lp_pooled_map map;
    lp_heatmap_layout lay;
    char **pieces;
    int64_t n_pieces;
    int64_t first_generated; /* position of the first generated token, -1 = none */
} head_picture;

static void head_picture_free(head_picture *hp)
{
    lp_pooled_map_free(&hp->map);
    lp_store_free_texts(hp->pieces, hp->n_pieces);
}

static lp_status read_head(lp_store *db, const lp_store_run *run, int64_t layer, int64_t head,
                           const lp_render_options *opt, head_picture *hp, lp_error *err)
{
    memset(hp, 0, sizeof *hp);
    lp_status s = lp_render_heatmap_layout(1, 1, opt, &hp->lay, err); /* validates the options */
    if (s)
        return s;
    s = lp_render_read_map(db, run, layer, head, opt->size, opt->leak_threshold, opt->range_lo,
                           opt->range_hi, &hp->map, err);
    if (s)
        return s;
    s = lp_render_heatmap_layout(hp->map.shown_q, hp->map.shown_k, opt, &hp->lay, err);
    if (s == LP_OK)
        s = lp_render_read_labels(db, run->id, &hp->pieces, &hp->n_pieces, err);
    if (s == LP_OK)
        s = lp_store_read_first_generated(db, run->id, &hp->first_generated, err);
    if (s)
        head_picture_free(hp);
    return s;
}

/* Generation: a line before the first generated query row and one before its key column, so the
 * prompt's square and the generated rows below it are told apart (when they are shown). */
static void draw_generation_boundary(lp_canvas *c, const head_picture *hp)
{
    const lp_pooled_map *map = &hp->map;
    const lp_heatmap_layout *lay = &hp->lay;
    int64_t g = hp->first_generated;
    if (g <= 0)
        return;
    int64_t q_first = map->n_k - map->n_q + map->row0;
    double map_w = (double)map->cols * lay->cell, map_h = (double)map->rows * lay->cell_h;
    cairo_t *cr = c->cr;
    cairo_save(cr);
    lp_set_rgb(cr, (lp_rgb){0xff, 0x8c, 0x00});
    cairo_set_line_width(cr, 1.5);
    double dash[] = {4.0, 3.0};
    cairo_set_dash(cr, dash, 2, 0);
    if (g > q_first && g < q_first + map->shown_q) {
        double y = lay->map_y + (double)(g - q_first) / (double)map->block * lay->cell_h;
        cairo_move_to(cr, lay->map_x, y);
        cairo_line_to(cr, lay->map_x + map_w, y);
    }
    if (g > map->col0 && g < map->col0 + map->shown_k) {
        double x = lay->map_x + (double)(g - map->col0) / (double)map->block * lay->cell;
        cairo_move_to(cr, x, lay->map_y);
        cairo_line_to(cr, x, lay->map_y + map_h);
    }
    cairo_stroke(cr);
    cairo_restore(cr);
}

/* "N queries x M keys, showing ..., max-pooled ..., window ..., scale, colormap, masked #rgb". */
static void head_subtitle(const lp_store_run *run, int64_t layer, const head_picture *hp,
                          const lp_render_options *opt, double vmax, char *buf, size_t size)
{
    const lp_pooled_map *map = &hp->map;
    char scale_text[96], pooled[64] = "", window_text[80] = "", shown[96] = "";
    scale_caption(opt, vmax, scale_text, sizeof scale_text);
    lp_rgb masked = lp_render_masked_rgb(opt);
    if (map->block > 1)
        snprintf(pooled, sizeof pooled, ", max-pooled %lldx%lld", (long long)map->block,
                 (long long)map->block);
    int64_t window = lp_store_run_window(run, layer);
    if (window > 0)
        snprintf(window_text, sizeof window_text, ", window %lld", (long long)window);
    if (hp->first_generated > 0) {
        size_t used = strlen(window_text);
        snprintf(window_text + used, sizeof window_text - used,
                 ", generated from %lld (dashed)", (long long)hp->first_generated);
    }
    if (map->shown_q != map->n_q || map->shown_k != map->n_k)
        snprintf(shown, sizeof shown, ", showing positions %lld:%lld", (long long)map->col0,
                 (long long)(map->col0 + map->shown_k));
    snprintf(buf, size, "%lld queries x %lld keys%s%s%s, %s, %s, masked #%02x%02x%02x",
             (long long)map->n_q, (long long)map->n_k, shown, pooled, window_text, scale_text,
             lp_colormap_name(opt->colormap), masked.r, masked.g, masked.b);
}

/* Labels: one per display cell, thinned so lines never overlap. Thinned or pooled axes label
 * round positions (every 1, 2, 5 x 10^k tokens), each at the display cell that holds it; whole
 * axes label every cell. */
void lp_draw_token_axes(lp_canvas *c, const lp_pooled_map *map, const lp_heatmap_layout *lay,
                        char **pieces, int64_t n_pieces)
{
    int64_t stride = (LABEL_PITCH + lay->cell - 1) / lay->cell;
    int64_t row_stride = (LABEL_PITCH + lay->cell_h - 1) / lay->cell_h;
    bool with_pos = stride > 1 || row_stride > 1 || map->block > 1 || map->col0 > 0;
    lp_text_style st = lp_text_style_default(lay->cell >= LABEL_PITCH ? 11 : 10);
    st.halign = LP_ALIGN_END;
    st.valign = LP_ALIGN_CENTER;
    st.max_width = LP_RENDER_MARGIN_LEFT - 16;
    char label[160];
    int64_t q_first = map->n_k - map->n_q + map->row0; /* position of the first row shown */
    int64_t row_step = label_step(row_stride * map->block);
    for (int64_t p = first_multiple(q_first, row_step); p < q_first + map->shown_q; p += row_step) {
        int64_t r = (p - q_first) / map->block;
        axis_label(label, sizeof label, pieces, n_pieces, p, with_pos);
        lp_draw_text(c, label, lay->map_x - 6, lay->map_y + (r + 0.5) * lay->cell_h, &st);
    }
    st.angle = -LP_RENDER_PI / 2;
    st.max_width = LP_RENDER_MARGIN_BOTTOM - 14;
    int64_t col_step = label_step(stride * map->block);
    int map_h = (int)map->rows * lay->cell_h;
    for (int64_t p = first_multiple(map->col0, col_step); p < map->col0 + map->shown_k;
         p += col_step) {
        int64_t k = (p - map->col0) / map->block;
        axis_label(label, sizeof label, pieces, n_pieces, p, with_pos);
        lp_draw_text(c, label, lay->map_x + (k + 0.5) * lay->cell, lay->map_y + map_h + 6, &st);
    }
    lp_text_style axis = lp_text_style_default(11);
    axis.rgb = (lp_rgb){0x66, 0x66, 0x66};
    axis.halign = LP_ALIGN_END;
    axis.valign = LP_ALIGN_END;
    lp_draw_text(c, "query \xe2\x86\x93  key \xe2\x86\x92", lay->map_x - 6, lay->map_y - 4, &axis);
}

static lp_status draw_head(const lp_store_run *run, int64_t layer, int64_t head,
                           const head_picture *hp, const lp_render_options *opt,
                           const char *out_path, lp_error *err)
{
    const lp_pooled_map *map = &hp->map;
    const lp_heatmap_layout *lay = &hp->lay;
    char caption[320], title[400], subtitle[400], warning[160] = "";
    double vmax = lp_render_vmax(opt, (double)map->max_value);
    lp_render_run_caption(run, caption, sizeof caption);
    snprintf(title, sizeof title, "layer %lld, head %lld: %s", (long long)layer, (long long)head,
             caption);
    head_subtitle(run, layer, hp, opt, vmax, subtitle, sizeof subtitle);
    if (map->n_leak_cells > 0)
        snprintf(warning, sizeof warning, "LEAK: %lld masked cells hold probability > %g",
                 (long long)map->n_leak_cells, opt->leak_threshold);
    else if (map->n_bad_cells > 0)
        snprintf(warning, sizeof warning, "%lld cells are NaN or negative (magenta)",
                 (long long)map->n_bad_cells);
    lp_canvas c;
    lp_status s = lp_canvas_begin(&c, out_path, lay->width, lay->height, opt->zoom, title, err);
    if (s)
        return s;
    lp_draw_title(&c, title, subtitle, warning);
    s = lp_draw_map(&c, map, opt, vmax, lay->map_x, lay->map_y, lay->cell, lay->cell_h, err);
    if (s) {
        lp_canvas_abort(&c);
        return s;
    }
    lp_draw_token_axes(&c, map, lay, hp->pieces, hp->n_pieces);
    draw_generation_boundary(&c, hp);
    int map_w = (int)map->cols * lay->cell, map_h = (int)map->rows * lay->cell_h;
    double bar_h = map_h > 200 ? map_h : 200;
    lp_draw_colorbar(&c, lay->map_x + map_w + 24, lay->map_y, 16, bar_h, opt, vmax, "probability");
    return lp_canvas_end(&c, err);
}

lp_status lp_render_head(lp_store *db, const lp_store_run *run, int64_t layer, int64_t head,
                         const lp_render_options *opt, const char *out_path, lp_error *err)
{
    if (layer < 0 || layer >= run->n_layers)
        return lp_error_set(err, LP_ERR_RANGE, "--layer %lld: run %lld has layers 0..%lld",
                            (long long)layer, (long long)run->id, (long long)run->n_layers - 1);
    if (head < 0 || head >= run->n_heads)
        return lp_error_set(err, LP_ERR_RANGE, "--head %lld: run %lld has heads 0..%lld",
                            (long long)head, (long long)run->id, (long long)run->n_heads - 1);
    head_picture hp;
    lp_status s = lp_render_check_path(out_path, err);
    if (s == LP_OK)
        s = read_head(db, run, layer, head, opt, &hp, err);
    if (s)
        return s;
    s = draw_head(run, layer, head, &hp, opt, out_path, err);
    head_picture_free(&hp);
    return s;
}
