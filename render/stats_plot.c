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
           stat == LP_STAT_SELF || stat == LP_STAT_LOCAL_FRAC;
}

static const char *stat_unit(lp_head_stat stat)
{
    switch (stat) {
    case LP_STAT_ENTROPY: return "entropy (nats)";
    case LP_STAT_DISTANCE: return "distance (tokens)";
    case LP_STAT_OUTPUT_NORM: return "output L2 norm";
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

lp_status lp_render_stat_matrix(lp_store *db, const lp_store_run *run, lp_head_stat stat,
                                const lp_render_options *opt, const char *out_path, lp_error *err)
{
    if (lp_image_format_from_path(out_path) == LP_IMAGE_COUNT)
        return lp_error_set(err, LP_ERR_USAGE,
                            "%s: unknown picture format (the extension must be .png, .svg or "
                            ".pdf)",
                            out_path);
    double *values;
    lp_status s = lp_store_read_head_stat(db, run, stat, &values, err);
    if (s)
        return s;
    int64_t n_l = run->n_layers, n_h = run->n_heads;
    double vmax = 0;
    for (int64_t i = 0; i < n_l * n_h; i++)
        if (isfinite(values[i]) && values[i] > vmax)
            vmax = values[i];
    if (stat_is_fraction(stat) && vmax <= 1)
        vmax = 1;
    if (opt->vmax > 0)
        vmax = opt->vmax;
    if (!(vmax > 0))
        vmax = 1;
    /* a stat matrix is always linear: its values are not probabilities of one row */
    lp_render_options lin = *opt;
    lin.scale = LP_SCALE_LINEAR;

    int64_t cell_w = 1400 / n_h, cell_h = 1000 / n_l;
    cell_w = cell_w > 56 ? 56 : (cell_w < 8 ? 8 : cell_w);
    cell_h = cell_h > 30 ? 30 : (cell_h < 6 ? 6 : cell_h);
    bool annotate = cell_w >= 34 && cell_h >= 14;
    const int left = 64, top = 104, right = 140, bottom = 30;
    int64_t width = left + n_h * cell_w + right, height = top + n_l * cell_h + bottom;
    if (width < 520)
        width = 520;
    if (height < top + 130 + bottom)
        height = top + 130 + bottom;
    char caption[320], title[400], subtitle[200];
    lp_render_run_caption(run, caption, sizeof caption);
    snprintf(title, sizeof title, "%s per head: %s", lp_head_stat_name(stat), caption);
    snprintf(subtitle, sizeof subtitle, "%lld layers x %lld heads, %s, linear [0, %.3g], %s%s",
             (long long)n_l, (long long)n_h, stat_unit(stat), vmax,
             lp_colormap_name(opt->colormap), annotate ? "" : " (too many heads to write values)");
    lp_canvas c;
    int title_w = lp_title_width(title);
    if (width < title_w)
        width = title_w;
    s = lp_canvas_begin(&c, out_path, (int)width, (int)height, opt->zoom, title, err);
    if (s) {
        free(values);
        return s;
    }
    lp_draw_title(&c, title, subtitle, NULL);
    lp_rgb missing = lp_render_masked_rgb(opt);
    lp_text_style vs = lp_text_style_default(cell_h >= 24 ? 11 : 10);
    vs.halign = LP_ALIGN_CENTER;
    vs.valign = LP_ALIGN_CENTER;
    vs.max_width = (double)cell_w - 2;
    for (int64_t l = 0; l < n_l; l++) {
        for (int64_t h = 0; h < n_h; h++) {
            double v = values[l * n_h + h];
            double x = left + h * cell_w, y = top + l * cell_h;
            lp_rgb bg = isfinite(v) ? lp_colormap_rgb(opt->colormap, lp_scale_apply(&lin, vmax, v))
                                    : missing;
            lp_set_rgb(c.cr, bg);
            cairo_rectangle(c.cr, x, y, cell_w, cell_h);
            cairo_fill(c.cr);
            if (annotate) {
                char buf[32];
                if (isfinite(v))
                    format_value(v, buf, sizeof buf);
                else
                    snprintf(buf, sizeof buf, "-");
                vs.rgb = text_on(bg);
                lp_draw_text(&c, buf, x + cell_w / 2.0, y + cell_h / 2.0, &vs);
            }
        }
    }
    cairo_set_source_rgb(c.cr, LP_INK_R, LP_INK_G, LP_INK_B);
    cairo_set_line_width(c.cr, 1);
    cairo_rectangle(c.cr, left - 0.5, top - 0.5, n_h * cell_w + 1, n_l * cell_h + 1);
    cairo_stroke(c.cr);

    lp_text_style st = lp_text_style_default(11);
    st.halign = LP_ALIGN_END;
    st.valign = LP_ALIGN_CENTER;
    int64_t stride = (14 + cell_h - 1) / cell_h;
    for (int64_t l = 0; l < n_l; l += stride) {
        char label[32];
        snprintf(label, sizeof label, "L%lld", (long long)l);
        lp_draw_text(&c, label, left - 6, top + (l + 0.5) * cell_h, &st);
    }
    st.halign = LP_ALIGN_CENTER;
    st.valign = LP_ALIGN_END;
    stride = (28 + cell_w - 1) / cell_w;
    for (int64_t h = 0; h < n_h; h += stride) {
        char label[32];
        snprintf(label, sizeof label, "H%lld", (long long)h);
        lp_draw_text(&c, label, left + (h + 0.5) * cell_w, top - 6, &st);
    }
    double bar_h = n_l * cell_h;
    if (bar_h < 130)
        bar_h = 130;
    if (bar_h > 400)
        bar_h = 400;
    lp_draw_colorbar(&c, left + n_h * cell_w + 24, top, 16, bar_h, &lin, vmax,
                     lp_head_stat_name(stat));
    free(values);
    return lp_canvas_end(&c, err);
}

lp_status lp_render_leak_plot(lp_store *db, const lp_store_run *run,
                              const lp_render_options *opt, const char *out_path, lp_error *err)
{
    if (lp_image_format_from_path(out_path) == LP_IMAGE_COUNT)
        return lp_error_set(err, LP_ERR_USAGE,
                            "%s: unknown picture format (the extension must be .png, .svg or "
                            ".pdf)",
                            out_path);
    int64_t *layers, n;
    double *diffs;
    bool *failed;
    lp_status s = lp_store_read_leak_diffs(db, run->id, &layers, &diffs, &failed, &n, err);
    if (s)
        return s;
    /* The logits (layer -1) go last, after the deepest layer they come from. */
    int64_t *order = malloc((size_t)n * sizeof *order);
    if (!order) {
        free(layers);
        free(diffs);
        free(failed);
        return lp_error_set(err, LP_ERR_NOMEM, "leak plot: out of memory");
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        if (layers[i] >= 0)
            order[k++] = i;
    for (int64_t i = 0; i < n; i++)
        if (layers[i] < 0)
            order[k++] = i;

    double min_pos = (double)INFINITY, max_v = 0;
    int64_t n_failed = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isfinite(diffs[i]) && diffs[i] > 0 && diffs[i] < min_pos)
            min_pos = diffs[i];
        if (isfinite(diffs[i]) && diffs[i] > max_v)
            max_v = diffs[i];
        n_failed += failed[i];
    }
    /* decades that hold every nonzero value, at least [1e-8, 1] */
    int e_lo = isfinite(min_pos) ? (int)floor(log10(min_pos)) : -8;
    int e_hi = max_v > 0 ? (int)ceil(log10(max_v)) : 0;
    if (e_lo > -8)
        e_lo = -8;
    if (e_hi < 0)
        e_hi = 0;
    if (e_hi <= e_lo)
        e_hi = e_lo + 1;

    /* one slot per layer, bars a little narrower than their slot */
    int64_t slot = 640 / (n > 0 ? n : 1);
    slot = slot > 64 ? 64 : (slot < 6 ? 6 : slot);
    int64_t plot_w = n * slot < 420 ? 420 : n * slot;
    double slot_w = (double)plot_w / (double)n;
    double bar_w = slot_w > 52 ? 44 : slot_w - (slot_w >= 8 ? 2 : 1);
    const int left = 84, top = 92, plot_h = 320, bottom = 64, right = 40;
    int64_t width = left + plot_w + right;
    if (width < 640)
        width = 640;
    int64_t height = top + plot_h + bottom;
    char caption[320], title[400], subtitle[200], warning[128] = "";
    lp_render_run_caption(run, caption, sizeof caption);
    snprintf(title, sizeof title, "leak check, max |difference| per layer: %s", caption);
    snprintf(subtitle, sizeof subtitle,
             "changing future tokens must not move past outputs; max over positions, log axis");
    if (n_failed > 0)
        snprintf(warning, sizeof warning, "LEAK: %lld of %lld layers failed (red)",
                 (long long)n_failed, (long long)n);
    lp_canvas cv;
    int title_w = lp_title_width(title);
    if (width < title_w)
        width = title_w;
    s = lp_canvas_begin(&cv, out_path, (int)width, (int)height, opt->zoom, title, err);
    if (s == LP_OK) {
        cairo_t *cr = cv.cr;
        lp_draw_title(&cv, title, subtitle, warning);
        double y0 = top + plot_h; /* the axis bottom, value 10^e_lo */
        lp_text_style st = lp_text_style_default(11);
        st.halign = LP_ALIGN_END;
        st.valign = LP_ALIGN_CENTER;
        int e_step = (e_hi - e_lo) > 10 ? 2 : 1;
        for (int e = e_lo; e <= e_hi; e += e_step) {
            double y = y0 - (double)(e - e_lo) / (e_hi - e_lo) * plot_h;
            cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
            cairo_set_line_width(cr, 1);
            cairo_move_to(cr, left, floor(y) + 0.5);
            cairo_line_to(cr, left + plot_w, floor(y) + 0.5);
            cairo_stroke(cr);
            char buf[16];
            snprintf(buf, sizeof buf, "1e%d", e);
            lp_draw_text(&cv, buf, left - 6, y, &st);
        }
        lp_text_style vs = lp_text_style_default(10);
        vs.halign = LP_ALIGN_CENTER;
        vs.valign = LP_ALIGN_END;
        for (int64_t j = 0; j < n; j++) {
            int64_t i = order[j];
            double v = diffs[i];
            double cx = left + (j + 0.5) * slot_w;
            double bar_top = y0;
            if (isfinite(v) && v > 0) {
                double t = (log10(v) - e_lo) / (e_hi - e_lo);
                t = t < 0 ? 0 : (t > 1 ? 1 : t);
                bar_top = y0 - t * plot_h;
                lp_set_rgb(cr, failed[i] ? lp_render_leak_rgb : (lp_rgb){0x3b, 0x52, 0x8b});
                cairo_rectangle(cr, cx - bar_w / 2, bar_top, bar_w, t * plot_h);
                cairo_fill(cr);
            } else if (failed[i]) {
                /* failed with no number: outline the full height */
                lp_set_rgb(cr, lp_render_leak_rgb);
                cairo_rectangle(cr, cx - bar_w / 2, y0 - plot_h, bar_w, plot_h);
                cairo_stroke(cr);
            }
            if (slot_w >= 36) {
                char buf[32];
                if (!isfinite(v))
                    snprintf(buf, sizeof buf, "?");
                else if (v == 0)
                    snprintf(buf, sizeof buf, "0");
                else
                    snprintf(buf, sizeof buf, "%.2g", v);
                vs.rgb = failed[i] ? lp_render_leak_rgb : (lp_rgb){0x33, 0x33, 0x33};
                lp_draw_text(&cv, buf, cx, (bar_top < top + 14 ? top + 14 : bar_top) - 2, &vs);
            }
            char label[32];
            if (layers[i] < 0)
                snprintf(label, sizeof label, "logits");
            else
                snprintf(label, sizeof label, "%lld", (long long)layers[i]);
            lp_text_style ls = lp_text_style_default(10);
            if (slot_w < 36) {
                ls.halign = LP_ALIGN_END;
                ls.valign = LP_ALIGN_CENTER;
                ls.angle = -LP_RENDER_PI / 2;
            } else {
                ls.halign = LP_ALIGN_CENTER;
                ls.valign = LP_ALIGN_START;
            }
            lp_draw_text(&cv, label, cx, y0 + 4, &ls);
        }
        if (n_failed == 0 && max_v == 0) {
            /* an empty log plot could pass for a broken one: say what it means */
            lp_text_style ok = lp_text_style_default(14);
            ok.bold = true;
            ok.rgb = (lp_rgb){0x1a, 0x7f, 0x37};
            ok.halign = LP_ALIGN_CENTER;
            ok.valign = LP_ALIGN_CENTER;
            lp_draw_text(&cv, "no leak: every difference is exactly 0",
                         left + plot_w / 2.0, top + plot_h / 2.0, &ok);
        }
        cairo_set_source_rgb(cr, LP_INK_R, LP_INK_G, LP_INK_B);
        cairo_set_line_width(cr, 1);
        cairo_rectangle(cr, left - 0.5, top - 0.5, plot_w + 1, plot_h + 1);
        cairo_stroke(cr);
        lp_text_style at = lp_text_style_default(11);
        at.rgb = (lp_rgb){0x55, 0x55, 0x55};
        at.halign = LP_ALIGN_CENTER;
        at.valign = LP_ALIGN_END;
        lp_draw_text(&cv, "layer", left + plot_w / 2.0, height - 10, &at);
        at.angle = -LP_RENDER_PI / 2;
        at.valign = LP_ALIGN_START;
        lp_draw_text(&cv, "max |difference|", 14, top + plot_h / 2.0, &at);
        s = lp_canvas_end(&cv, err);
    }
    free(order);
    free(layers);
    free(diffs);
    free(failed);
    return s;
}
