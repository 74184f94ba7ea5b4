/* Head statistics as a layers x heads matrix with values written in, and the leak checker's
 * per-layer max difference as bars on a log axis. */
#include "render/render.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "render/render_internal.h"

/* Statistics that are fractions of probability mass get a fixed [0, 1] scale so matrices of
 * different runs compare at a glance; the others run from 0 to their largest value. */
static bool stat_is_fraction(lp_head_stat stat)
{
    return stat == LP_STAT_MAX_PROB || stat == LP_STAT_SINK || stat == LP_STAT_PREV_TOKEN ||
           stat == LP_STAT_SELF || stat == LP_STAT_LOCAL_FRAC || stat == LP_STAT_LOW_MASS ||
           stat == LP_STAT_LEARNED_SINK;
}

static const char *stat_unit(lp_head_stat stat)
{
    switch (stat) {
    case LP_STAT_ENTROPY: return "entropy (nats)";
    case LP_STAT_DISTANCE: return "distance (tokens)";
    case LP_STAT_OUTPUT_NORM: return "output L2 norm";
    case LP_STAT_KEYS50: return "keys holding 50% of the mass";
    case LP_STAT_KEYS90: return "keys holding 90% of the mass";
    case LP_STAT_KEYS99: return "keys holding 99% of the mass";
    default: return "mass fraction";
    }
}

static void format_value(double v, char *buf, size_t size)
{
    double a = fabs(v);
    if (a < 10)
        snprintf(buf, size, "%.2f", v);
    else if (a < 100)
        snprintf(buf, size, "%.1f", v);
    else
        snprintf(buf, size, "%.0f", v);
}

/* Relative luminance decides black or white text on a cell. */
static lp_rgb text_on(lp_rgb bg)
{
    double y = 0.2126 * bg.r + 0.7152 * bg.g + 0.0722 * bg.b;
    return y > 140 ? (lp_rgb){0x11, 0x11, 0x11} : (lp_rgb){0xff, 0xff, 0xff};
}

/* The matrix's geometry: cells sized to fit about 1400 x 1000 px, values written in when they
 * fit. */
typedef struct stat_sheet {
    int64_t n_l, n_h, cell_w, cell_h, width, height;
    bool annotate;
} stat_sheet;

enum { STAT_LEFT = 64, STAT_TOP = 104, STAT_RIGHT = 140, STAT_BOTTOM = 30 };

static stat_sheet stat_layout(int64_t n_layers, int64_t n_heads)
{
    stat_sheet g = {n_layers, n_heads, 1400 / n_heads, 1000 / n_layers, 0, 0, false};
    g.cell_w = g.cell_w > 56 ? 56 : (g.cell_w < 8 ? 8 : g.cell_w);
    g.cell_h = g.cell_h > 30 ? 30 : (g.cell_h < 6 ? 6 : g.cell_h);
    g.annotate = g.cell_w >= 34 && g.cell_h >= 14;
    g.width = STAT_LEFT + g.n_h * g.cell_w + STAT_RIGHT;
    g.height = STAT_TOP + g.n_l * g.cell_h + STAT_BOTTOM;
    if (g.width < 520)
        g.width = 520;
    if (g.height < STAT_TOP + 130 + STAT_BOTTOM)
        g.height = STAT_TOP + 130 + STAT_BOTTOM;
    return g;
}

/* The top of the scale: fractions of mass on [0, 1], the rest up to their largest value. */
static double stat_vmax(lp_head_stat stat, const double *values, int64_t n,
                        const lp_render_options *opt)
{
    double vmax = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(values[i]) && values[i] > vmax)
            vmax = values[i];
    if (stat_is_fraction(stat) && vmax <= 1)
        vmax = 1;
    if (opt->vmax > 0)
        vmax = opt->vmax;
    return vmax > 0 ? vmax : 1;
}

static void draw_stat_cells(lp_canvas *c, const stat_sheet *g, const double *values,
                            const lp_render_options *lin, const lp_render_options *opt,
                            double vmax)
{
    lp_rgb missing = lp_render_masked_rgb(opt);
    lp_text_style vs = lp_text_style_in_cell(g->cell_h >= 24 ? 11 : 10, (double)g->cell_w);
    for (int64_t l = 0; l < g->n_l; l++) {
        for (int64_t h = 0; h < g->n_h; h++) {
            double v = values[l * g->n_h + h];
            double x = STAT_LEFT + h * g->cell_w, y = STAT_TOP + l * g->cell_h;
            lp_rgb bg = isfinite(v) ? lp_colormap_rgb(opt->colormap, lp_scale_apply(lin, vmax, v))
                                    : missing;
            lp_set_rgb(c->cr, bg);
            cairo_rectangle(c->cr, x, y, g->cell_w, g->cell_h);
            cairo_fill(c->cr);
            if (g->annotate) {
                char buf[32];
                if (isfinite(v))
                    format_value(v, buf, sizeof buf);
                else
                    snprintf(buf, sizeof buf, "-");
                vs.rgb = text_on(bg);
                lp_draw_text(c, buf, x + g->cell_w / 2.0, y + g->cell_h / 2.0, &vs);
            }
        }
    }
}

/* Frame, row labels L0.. and column labels H0.., thinned to fit. */
static void draw_stat_axes(lp_canvas *c, const stat_sheet *g)
{
    cairo_set_source_rgb(c->cr, LP_INK_R, LP_INK_G, LP_INK_B);
    cairo_set_line_width(c->cr, 1);
    cairo_rectangle(c->cr, STAT_LEFT - 0.5, STAT_TOP - 0.5, g->n_h * g->cell_w + 1,
                    g->n_l * g->cell_h + 1);
    cairo_stroke(c->cr);
    lp_text_style st = lp_text_style_default(11);
    st.halign = LP_ALIGN_END;
    st.valign = LP_ALIGN_CENTER;
    int64_t stride = (14 + g->cell_h - 1) / g->cell_h;
    for (int64_t l = 0; l < g->n_l; l += stride) {
        char label[32];
        snprintf(label, sizeof label, "L%lld", (long long)l);
        lp_draw_text(c, label, STAT_LEFT - 6, STAT_TOP + (l + 0.5) * g->cell_h, &st);
    }
    st.halign = LP_ALIGN_CENTER;
    st.valign = LP_ALIGN_END;
    stride = (28 + g->cell_w - 1) / g->cell_w;
    for (int64_t h = 0; h < g->n_h; h += stride) {
        char label[32];
        snprintf(label, sizeof label, "H%lld", (long long)h);
        lp_draw_text(c, label, STAT_LEFT + (h + 0.5) * g->cell_w, STAT_TOP - 6, &st);
    }
}

/* The sheet of a statistic's values [n_l * n_h] under a title; subtitle_tail ends its line. */
static lp_status draw_stat_sheet(const double *values, int64_t n_l, int64_t n_h, lp_head_stat stat,
                                 const char *title, const char *subtitle_tail,
                                 const lp_render_options *opt, const char *out_path, lp_error *err)
{
    stat_sheet g = stat_layout(n_l, n_h);
    double vmax = stat_vmax(stat, values, g.n_l * g.n_h, opt);
    /* a stat matrix is always linear: its values are not probabilities of one row */
    lp_render_options lin = *opt;
    lin.scale = LP_SCALE_LINEAR;
    char subtitle[400];
    snprintf(subtitle, sizeof subtitle, "%lld layers x %lld heads, %s, linear [0, %.3g], %s%s%s",
             (long long)g.n_l, (long long)g.n_h, stat_unit(stat), vmax,
             lp_colormap_name(opt->colormap), g.annotate ? "" : " (too many heads to write values)",
             subtitle_tail);
    lp_canvas c;
    lp_status s = lp_canvas_begin_titled(&c, out_path, g.width, g.height, opt->zoom, title, err);
    if (s)
        return s;
    lp_draw_title(&c, title, subtitle, NULL);
    draw_stat_cells(&c, &g, values, &lin, opt, vmax);
    draw_stat_axes(&c, &g);
    double bar_h = g.n_l * g.cell_h;
    if (bar_h < 130)
        bar_h = 130;
    if (bar_h > 400)
        bar_h = 400;
    lp_draw_colorbar(&c, STAT_LEFT + g.n_h * g.cell_w + 24, STAT_TOP, 16, bar_h, &lin, vmax,
                     lp_head_stat_name(stat));
    return lp_canvas_end(&c, err);
}

lp_status lp_render_stat_matrix(lp_store *db, const lp_store_run *run, lp_head_stat stat,
                                const lp_render_options *opt, const char *out_path, lp_error *err)
{
    double *values;
    lp_status s = lp_render_check_path(out_path, err);
    if (s == LP_OK)
        s = lp_store_read_head_stat(db, run, stat, &values, err);
    if (s)
        return s;
    char caption[320], title[400];
    lp_render_run_caption(run, caption, sizeof caption);
    snprintf(title, sizeof title, "%s per head: %s", lp_head_stat_name(stat), caption);
    s = draw_stat_sheet(values, run->n_layers, run->n_heads, stat, title, "", opt, out_path, err);
    free(values);
    return s;
}

lp_status lp_render_dataset_stat(lp_store *db, const char *dataset, lp_head_stat stat,
                                 const lp_render_options *opt, const char *out_path, lp_error *err)
{
    double *mean = NULL, *std = NULL;
    int64_t n_l, n_h, n_runs;
    lp_status s = lp_render_check_path(out_path, err);
    if (s == LP_OK)
        s = lp_store_read_dataset_stat(db, dataset, stat, &n_l, &n_h, &mean, &std, &n_runs, err);
    if (s)
        return s;
    double top_std = 0;
    for (int64_t i = 0; i < n_l * n_h; i++)
        top_std = isfinite(std[i]) && std[i] > top_std ? std[i] : top_std;
    char title[400], tail[160];
    snprintf(title, sizeof title, "%s per head: dataset %s, mean over %lld runs",
             lp_head_stat_name(stat), dataset, (long long)n_runs);
    snprintf(tail, sizeof tail, "; std over runs up to %.3g", top_std);
    s = draw_stat_sheet(mean, n_l, n_h, stat, title, tail, opt, out_path, err);
    free(mean);
    free(std);
    return s;
}

/* ---- the leak plot ---------------------------------------------------------------------------- */

/* The per-layer differences of a leak run, the logits (layer -1) last after the deepest layer
 * they come from, and the plot's log axis and geometry. */
typedef struct leak_plot {
    int64_t *layers;
    double *diffs;
    bool *failed;
    int64_t *order; /* [n] drawing order */
    int64_t n, n_failed;
    double max_v;
    int e_lo, e_hi;      /* decades of the axis */
    int64_t plot_w, width, height;
    double slot_w, bar_w;
} leak_plot;

enum { LEAK_LEFT = 84, LEAK_TOP = 92, LEAK_PLOT_H = 320, LEAK_BOTTOM = 64, LEAK_RIGHT = 40 };

static void leak_plot_free(leak_plot *p)
{
    free(p->order);
    free(p->layers);
    free(p->diffs);
    free(p->failed);
}

/* Decades that hold every nonzero value, at least [1e-8, 1]; one slot per layer. */
static void leak_plot_layout(leak_plot *p)
{
    double min_pos = (double)INFINITY;
    for (int64_t i = 0; i < p->n; i++) {
        if (isfinite(p->diffs[i]) && p->diffs[i] > 0 && p->diffs[i] < min_pos)
            min_pos = p->diffs[i];
        if (isfinite(p->diffs[i]) && p->diffs[i] > p->max_v)
            p->max_v = p->diffs[i];
        p->n_failed += p->failed[i];
    }
    p->e_lo = isfinite(min_pos) ? (int)floor(log10(min_pos)) : -8;
    p->e_hi = p->max_v > 0 ? (int)ceil(log10(p->max_v)) : 0;
    if (p->e_lo > -8)
        p->e_lo = -8;
    if (p->e_hi < 0)
        p->e_hi = 0;
    if (p->e_hi <= p->e_lo)
        p->e_hi = p->e_lo + 1;
    /* bars a little narrower than their slot */
    int64_t slot = 640 / (p->n > 0 ? p->n : 1);
    slot = slot > 64 ? 64 : (slot < 6 ? 6 : slot);
    p->plot_w = p->n * slot < 420 ? 420 : p->n * slot;
    p->slot_w = (double)p->plot_w / (double)p->n;
    p->bar_w = p->slot_w > 52 ? 44 : p->slot_w - (p->slot_w >= 8 ? 2 : 1);
    p->width = LEAK_LEFT + p->plot_w + LEAK_RIGHT;
    if (p->width < 640)
        p->width = 640;
    p->height = LEAK_TOP + LEAK_PLOT_H + LEAK_BOTTOM;
}

static lp_status leak_plot_read(lp_store *db, int64_t run_id, leak_plot *p, lp_error *err)
{
    memset(p, 0, sizeof *p);
    lp_status s = lp_store_read_leak_diffs(db, run_id, &p->layers, &p->diffs, &p->failed, &p->n,
                                           err);
    if (s)
        return s;
    p->order = malloc((size_t)p->n * sizeof *p->order);
    if (!p->order) {
        leak_plot_free(p);
        return lp_error_set(err, LP_ERR_NOMEM, "leak plot: out of memory");
    }
    int64_t k = 0;
    for (int64_t i = 0; i < p->n; i++)
        if (p->layers[i] >= 0)
            p->order[k++] = i;
    for (int64_t i = 0; i < p->n; i++)
        if (p->layers[i] < 0)
            p->order[k++] = i;
    leak_plot_layout(p);
    return LP_OK;
}

/* Grid lines and labels at every decade (every other one past ten). */
static void draw_decades(lp_canvas *cv, const leak_plot *p)
{
    cairo_t *cr = cv->cr;
    double y0 = LEAK_TOP + LEAK_PLOT_H;
    lp_text_style st = lp_text_style_default(11);
    st.halign = LP_ALIGN_END;
    st.valign = LP_ALIGN_CENTER;
    int e_step = (p->e_hi - p->e_lo) > 10 ? 2 : 1;
    for (int e = p->e_lo; e <= p->e_hi; e += e_step) {
        double y = y0 - (double)(e - p->e_lo) / (p->e_hi - p->e_lo) * LEAK_PLOT_H;
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_set_line_width(cr, 1);
        cairo_move_to(cr, LEAK_LEFT, floor(y) + 0.5);
        cairo_line_to(cr, LEAK_LEFT + p->plot_w, floor(y) + 0.5);
        cairo_stroke(cr);
        char buf[16];
        snprintf(buf, sizeof buf, "1e%d", e);
        lp_draw_text(cv, buf, LEAK_LEFT - 6, y, &st);
    }
}

/* One layer's bar at slot j, its value above it and its layer below. */
static void draw_leak_bar(lp_canvas *cv, const leak_plot *p, int64_t j)
{
    cairo_t *cr = cv->cr;
    int64_t i = p->order[j];
    double v = p->diffs[i], y0 = LEAK_TOP + LEAK_PLOT_H;
    double cx = LEAK_LEFT + (j + 0.5) * p->slot_w, bar_top = y0;
    if (isfinite(v) && v > 0) {
        double t = (log10(v) - p->e_lo) / (p->e_hi - p->e_lo);
        t = t < 0 ? 0 : (t > 1 ? 1 : t);
        bar_top = y0 - t * LEAK_PLOT_H;
        lp_set_rgb(cr, p->failed[i] ? lp_render_leak_rgb : (lp_rgb){0x3b, 0x52, 0x8b});
        cairo_rectangle(cr, cx - p->bar_w / 2, bar_top, p->bar_w, t * LEAK_PLOT_H);
        cairo_fill(cr);
    } else if (p->failed[i]) {
        /* failed with no number: outline the full height */
        lp_set_rgb(cr, lp_render_leak_rgb);
        cairo_rectangle(cr, cx - p->bar_w / 2, y0 - LEAK_PLOT_H, p->bar_w, LEAK_PLOT_H);
        cairo_stroke(cr);
    }
    char buf[32];
    if (p->slot_w >= 36) {
        lp_text_style vs = lp_text_style_default(10);
        vs.halign = LP_ALIGN_CENTER;
        vs.valign = LP_ALIGN_END;
        if (!isfinite(v))
            snprintf(buf, sizeof buf, "?");
        else if (v == 0)
            snprintf(buf, sizeof buf, "0");
        else
            snprintf(buf, sizeof buf, "%.2g", v);
        vs.rgb = p->failed[i] ? lp_render_leak_rgb : (lp_rgb){0x33, 0x33, 0x33};
        lp_draw_text(cv, buf, cx, (bar_top < LEAK_TOP + 14 ? LEAK_TOP + 14 : bar_top) - 2, &vs);
    }
    if (p->layers[i] < 0)
        snprintf(buf, sizeof buf, "logits");
    else
        snprintf(buf, sizeof buf, "%lld", (long long)p->layers[i]);
    lp_text_style ls = lp_text_style_default(10);
    ls.halign = p->slot_w < 36 ? LP_ALIGN_END : LP_ALIGN_CENTER;
    ls.valign = p->slot_w < 36 ? LP_ALIGN_CENTER : LP_ALIGN_START;
    ls.angle = p->slot_w < 36 ? -LP_RENDER_PI / 2 : 0;
    lp_draw_text(cv, buf, cx, y0 + 4, &ls);
}

/* The verdict of an empty plot, the frame and the axis titles. */
static void draw_leak_frame(lp_canvas *cv, const leak_plot *p)
{
    cairo_t *cr = cv->cr;
    if (p->n_failed == 0 && p->max_v == 0) {
        /* an empty log plot could pass for a broken one: say what it means */
        lp_text_style ok = lp_text_style_default(14);
        ok.bold = true;
        ok.rgb = (lp_rgb){0x1a, 0x7f, 0x37};
        ok.halign = LP_ALIGN_CENTER;
        ok.valign = LP_ALIGN_CENTER;
        lp_draw_text(cv, "no leak: every difference is exactly 0", LEAK_LEFT + p->plot_w / 2.0,
                     LEAK_TOP + LEAK_PLOT_H / 2.0, &ok);
    }
    cairo_set_source_rgb(cr, LP_INK_R, LP_INK_G, LP_INK_B);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, LEAK_LEFT - 0.5, LEAK_TOP - 0.5, p->plot_w + 1, LEAK_PLOT_H + 1);
    cairo_stroke(cr);
    lp_text_style at = lp_text_style_default(11);
    at.rgb = (lp_rgb){0x55, 0x55, 0x55};
    at.halign = LP_ALIGN_CENTER;
    at.valign = LP_ALIGN_END;
    lp_draw_text(cv, "layer", LEAK_LEFT + p->plot_w / 2.0, p->height - 10, &at);
    at.angle = -LP_RENDER_PI / 2;
    at.valign = LP_ALIGN_START;
    lp_draw_text(cv, "max |difference|", 14, LEAK_TOP + LEAK_PLOT_H / 2.0, &at);
}

lp_status lp_render_leak_plot(lp_store *db, const lp_store_run *run,
                              const lp_render_options *opt, const char *out_path, lp_error *err)
{
    leak_plot p;
    lp_status s = lp_render_check_path(out_path, err);
    if (s == LP_OK)
        s = leak_plot_read(db, run->id, &p, err);
    if (s)
        return s;
    char caption[320], title[400], subtitle[200], warning[128] = "";
    lp_render_run_caption(run, caption, sizeof caption);
    snprintf(title, sizeof title, "leak check, max |difference| per layer: %s", caption);
    snprintf(subtitle, sizeof subtitle,
             "changing future tokens must not move past outputs; max over positions, log axis");
    if (p.n_failed > 0)
        snprintf(warning, sizeof warning, "LEAK: %lld of %lld layers failed (red)",
                 (long long)p.n_failed, (long long)p.n);
    lp_canvas cv;
    s = lp_canvas_begin_titled(&cv, out_path, p.width, p.height, opt->zoom, title, err);
    if (s == LP_OK) {
        lp_draw_title(&cv, title, subtitle, warning);
        draw_decades(&cv, &p);
        for (int64_t j = 0; j < p.n; j++)
            draw_leak_bar(&cv, &p, j);
        draw_leak_frame(&cv, &p);
        s = lp_canvas_end(&cv, err);
    }
    leak_plot_free(&p);
    return s;
}
