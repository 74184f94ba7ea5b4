/* Which heads matter, drawn: the layers x heads matrix of `loupe ablate`'s NLL deltas on a
 * diverging colormap centred on 0 (red: removing the head hurts, blue: it helps), values
 * written in; and the logit lens's layers x positions grid with the top token in each cell. */
#include "render/render.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "render/render_internal.h"

static lp_rgb ink_on(lp_rgb bg)
{
    double y = 0.2126 * bg.r + 0.7152 * bg.g + 0.0722 * bg.b;
    return y > 140 ? (lp_rgb){0x11, 0x11, 0x11} : (lp_rgb){0xff, 0xff, 0xff};
}

enum { IMP_LEFT = 64, IMP_TOP = 104, IMP_RIGHT = 150, IMP_BOTTOM = 30 };

void lp_draw_diverging_bar(lp_canvas *c, double x, double y, double h, double vmax,
                           bool nonnegative, const char *label)
{
    double lo = nonnegative ? 0.0 : -1.0; /* t at the bottom */
    for (int i = 0; i < (int)h; i++) {
        lp_set_rgb(c->cr, lp_diverging_rgb(1.0 - (1.0 - lo) * (i + 0.5) / h));
        cairo_rectangle(c->cr, x, y + i, 16, 1);
        cairo_fill(c->cr);
    }
    lp_text_style st = lp_text_style_default(11);
    st.valign = LP_ALIGN_CENTER;
    char buf[32];
    snprintf(buf, sizeof buf, nonnegative ? "%.3g" : "+%.3g", vmax);
    lp_draw_text(c, buf, x + 22, y, &st);
    snprintf(buf, sizeof buf, "%.3g", nonnegative ? vmax / 2 : 0.0);
    lp_draw_text(c, buf, x + 22, y + h / 2, &st);
    snprintf(buf, sizeof buf, nonnegative ? "0" : "-%.3g", vmax);
    lp_draw_text(c, buf, x + 22, y + h, &st);
    st.valign = LP_ALIGN_END;
    lp_draw_text(c, label, x, y - 8, &st);
}

lp_status lp_render_value_matrix(const double *values, int64_t n_l, int64_t n_h,
                                 const char *title, const char *subtitle, const char *bar_label,
                                 const lp_render_options *opt, const char *out_path,
                                 lp_error *err)
{
    return lp_render_matrix_picture(values, n_l, n_h, title, subtitle, bar_label, false, NULL,
                                    NULL, opt, out_path, err);
}

/* One layers x heads panel with its left edge at x0: cells, values, frame, labels and its bar. */
static void draw_matrix_panel(lp_canvas *c, const double *values, int64_t n_l, int64_t n_h,
                              int64_t cw, int64_t ch, double x0, double vmax, bool nonnegative,
                              const char *bar_label, const lp_render_options *opt)
{
    if (vmax <= 0) /* the largest |value| */
        for (int64_t i = 0; i < n_l * n_h; i++)
            if (isfinite(values[i]) && fabs(values[i]) > vmax)
                vmax = fabs(values[i]);
    vmax = vmax > 0 ? vmax : 1;
    bool annotate = cw >= 34 && ch >= 14;
    lp_text_style vs = lp_text_style_in_cell(ch >= 24 ? 11 : 10, (double)cw);
    lp_rgb missing = lp_render_masked_rgb(opt);
    for (int64_t l = 0; l < n_l; l++)
        for (int64_t h = 0; h < n_h; h++) {
            double v = values[l * n_h + h], x = x0 + h * cw, y = IMP_TOP + l * ch;
            lp_rgb bg = isfinite(v) ? lp_diverging_rgb(v / vmax) : missing;
            lp_set_rgb(c->cr, bg);
            cairo_rectangle(c->cr, x, y, cw, ch);
            cairo_fill(c->cr);
            if (annotate) {
                char buf[32];
                if (isfinite(v) && nonnegative)
                    snprintf(buf, sizeof buf, "%.2g", v);
                else if (isfinite(v))
                    snprintf(buf, sizeof buf, fabs(v) < 10 ? "%+.2f" : "%+.0f", v);
                else
                    snprintf(buf, sizeof buf, "-");
                vs.rgb = ink_on(bg);
                lp_draw_text(c, buf, x + cw / 2.0, y + ch / 2.0, &vs);
            }
        }
    cairo_set_source_rgb(c->cr, LP_INK_R, LP_INK_G, LP_INK_B);
    cairo_set_line_width(c->cr, 1);
    cairo_rectangle(c->cr, x0 - 0.5, IMP_TOP - 0.5, n_h * cw + 1, n_l * ch + 1);
    cairo_stroke(c->cr);
    lp_text_style st = lp_text_style_default(11);
    st.halign = LP_ALIGN_END;
    st.valign = LP_ALIGN_CENTER;
    for (int64_t l = 0; l < n_l; l += (14 + ch - 1) / ch) {
        char label[32];
        snprintf(label, sizeof label, "L%lld", (long long)l);
        lp_draw_text(c, label, x0 - 6, IMP_TOP + (l + 0.5) * ch, &st);
    }
    st.halign = LP_ALIGN_CENTER;
    st.valign = LP_ALIGN_END;
    for (int64_t h = 0; h < n_h; h += (28 + cw - 1) / cw) {
        char label[32];
        snprintf(label, sizeof label, "H%lld", (long long)h);
        lp_draw_text(c, label, x0 + (h + 0.5) * cw, IMP_TOP - 6, &st);
    }
    double bar_h = n_l * ch < 160 ? 160 : (n_l * ch > 400 ? 400 : (double)(n_l * ch));
    lp_draw_diverging_bar(c, x0 + n_h * cw + 28, IMP_TOP + 8, bar_h - 16, vmax, nonnegative,
                          bar_label);
}

lp_status lp_render_matrix_picture(const double *values, int64_t n_l, int64_t n_h,
                                   const char *title, const char *subtitle, const char *bar_label,
                                   bool nonnegative, const double *second,
                                   const char *second_label, const lp_render_options *opt,
                                   const char *out_path, lp_error *err)
{
    int64_t cw = 1400 / n_h, ch = 1000 / n_l;
    cw = cw > 56 ? 56 : (cw < 8 ? 8 : cw);
    ch = ch > 30 ? 30 : (ch < 6 ? 6 : ch);
    int64_t panel = IMP_LEFT + n_h * cw + IMP_RIGHT, height = IMP_TOP + n_l * ch + IMP_BOTTOM;
    int64_t width = second ? 2 * panel : panel;
    width = width < 560 ? 560 : width;
    height = height < IMP_TOP + 160 + IMP_BOTTOM ? IMP_TOP + 160 + IMP_BOTTOM : height;
    lp_canvas c;
    lp_status s = lp_canvas_begin_titled(&c, out_path, width, height, opt->zoom, title, err);
    if (s)
        return s;
    lp_draw_title(&c, title, subtitle, NULL);
    draw_matrix_panel(&c, values, n_l, n_h, cw, ch, IMP_LEFT, opt->vmax, nonnegative, bar_label,
                      opt);
    if (second) /* its own scale: --vmax is the first panel's */
        draw_matrix_panel(&c, second, n_l, n_h, cw, ch, (double)(panel + IMP_LEFT), 0,
                          nonnegative, second_label, opt);
    return lp_canvas_end(&c, err);
}

lp_status lp_render_importance(lp_store *db, const lp_store_run *run,
                               const lp_render_options *opt, const char *out_path, lp_error *err)
{
    double *delta;
    char method[16];
    lp_status s = lp_render_check_path(out_path, err);
    if (s == LP_OK)
        s = lp_store_read_importance(db, run, &delta, method, err);
    if (s)
        return s;
    char caption[320], title[400], subtitle[240];
    lp_render_run_caption(run, caption, sizeof caption);
    snprintf(title, sizeof title, "head importance (%s ablation): %s", method, caption);
    snprintf(subtitle, sizeof subtitle,
             "%lld x %lld heads: NLL with the head ablated - clean NLL (nats; red: it matters)",
             (long long)run->n_layers, (long long)run->n_heads);
    s = lp_render_value_matrix(delta, run->n_layers, run->n_heads, title, subtitle, "delta NLL",
                               opt, out_path, err);
    free(delta);
    return s;
}

/* ---- the logit lens ---- */

enum { LENS_LEFT = 64, LENS_TOP = 104, LENS_RIGHT = 110, LENS_BOTTOM = 110 };

lp_status lp_render_logit_lens(lp_store *db, const lp_store_run *run,
                               const lp_render_options *opt, const char *out_path, lp_error *err)
{
    lp_store_logit_lens lens;
    char **labels = NULL;
    int64_t n_labels = 0;
    lp_status s = lp_render_check_path(out_path, err);
    if (s == LP_OK)
        s = lp_store_read_logit_lens(db, run, &lens, err);
    if (s)
        return s;
    if ((s = lp_render_read_labels(db, run->id, &labels, &n_labels, err)) != LP_OK) {
        lp_store_logit_lens_clear(&lens);
        return s;
    }
    int64_t L = lens.n_layers, T = lens.n_pos;
    int64_t cw = 1600 / (T > 0 ? T : 1), ch = 26;
    cw = cw > 64 ? 64 : (cw < 10 ? 10 : cw);
    bool annotate = cw >= 30;
    int64_t width = LENS_LEFT + T * cw + LENS_RIGHT, height = LENS_TOP + L * ch + LENS_BOTTOM;
    width = width < 560 ? 560 : width;
    char caption[320], title[400], subtitle[240];
    lp_render_run_caption(run, caption, sizeof caption);
    snprintf(title, sizeof title, "logit lens: %s", caption);
    snprintf(subtitle, sizeof subtitle,
             "each layer's residual through the final norm and LM head: top token per position, "
             "coloured by its probability (%s, [0, 1]); right: mean next-token NLL",
             lp_colormap_name(opt->colormap));
    lp_canvas c;
    s = lp_canvas_begin_titled(&c, out_path, width, height, opt->zoom, title, err);
    if (s == LP_OK) {
        lp_draw_title(&c, title, subtitle, NULL);
        lp_render_options lin = *opt;
        lin.scale = LP_SCALE_LINEAR;
        lp_text_style vs = lp_text_style_in_cell(10, (double)cw);
        lp_rgb missing = lp_render_masked_rgb(opt);
        for (int64_t l = 0; l < L; l++)
            for (int64_t p = 0; p < T; p++) {
                double v = lens.prob[l * T + p], x = LENS_LEFT + p * cw, y = LENS_TOP + l * ch;
                lp_rgb bg = isfinite(v) ? lp_colormap_rgb(opt->colormap,
                                                          lp_scale_apply(&lin, 1.0, v))
                                        : missing;
                lp_set_rgb(c.cr, bg);
                cairo_rectangle(c.cr, x, y, cw, ch);
                cairo_fill(c.cr);
                const char *piece = lens.piece[l * T + p];
                char *shown = annotate && piece ? lp_render_visible_piece(piece, 6) : NULL;
                if (shown) {
                    vs.rgb = ink_on(bg);
                    lp_draw_text(&c, shown, x + cw / 2.0, y + ch / 2.0, &vs);
                }
                free(shown);
            }
        lp_text_style st = lp_text_style_default(11);
        st.halign = LP_ALIGN_END;
        st.valign = LP_ALIGN_CENTER;
        lp_text_style nl = lp_text_style_default(10);
        nl.valign = LP_ALIGN_CENTER;
        for (int64_t l = 0; l < L; l++) {
            char label[32];
            snprintf(label, sizeof label, "L%lld", (long long)l);
            lp_draw_text(&c, label, LENS_LEFT - 6, LENS_TOP + (l + 0.5) * ch, &st);
            if (isfinite(lens.layer_nll[l])) {
                snprintf(label, sizeof label, "%.3f", lens.layer_nll[l]);
                lp_draw_text(&c, label, LENS_LEFT + T * cw + 8, LENS_TOP + (l + 0.5) * ch, &nl);
            }
        }
        /* the input tokens under the grid, reading upwards */
        st.angle = -1.5707963267948966; /* -pi/2: reads upwards */
        st.halign = LP_ALIGN_END;
        st.max_width = LENS_BOTTOM - 12;
        for (int64_t p = 0; p < T && p < n_labels; p += (12 + cw - 1) / cw)
            if (labels[p])
                lp_draw_text(&c, labels[p], LENS_LEFT + (p + 0.5) * cw, LENS_TOP + L * ch + 6,
                             &st);
        s = lp_canvas_end(&c, err);
    }
    lp_store_free_texts(labels, n_labels);
    lp_store_logit_lens_clear(&lens);
    return s;
}
