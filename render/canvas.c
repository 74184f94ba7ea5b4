/* The drawing surface behind every picture (PNG, SVG or PDF, written atomically), pango text,
 * the colorbar and the map painter. */
#define _POSIX_C_SOURCE 200809L
#include "render/render_internal.h"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <errno.h>
#include <math.h>
#include <pango/pangocairo.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/checked.h"

/* Pictures above this many pixels are refused rather than allocated (8k x 8k, 256 MiB as RGB24). */
#define MAX_PIXELS (8192LL * 8192LL)

void lp_set_rgb(cairo_t *cr, lp_rgb rgb)
{
    cairo_set_source_rgb(cr, rgb.r / 255.0, rgb.g / 255.0, rgb.b / 255.0);
}

/* path, path + ".tmp" and the title as one block "path\0path.tmp\0title\0" that c->path owns. */
static bool own_names(lp_canvas *c, const char *path, const char *title)
{
    size_t n = strlen(path), t = strlen(title);
    char *names = malloc((n + 1) + (n + 5) + (t + 1));
    if (!names)
        return false;
    c->path = memcpy(names, path, n + 1);
    /* Keep the extension last in the temporary name: nothing else reads it, but it helps a user
     * who finds one after a crash. */
    c->tmp_path = names + n + 1;
    snprintf(c->tmp_path, n + 5, "%s.tmp", path);
    c->title = memcpy(c->tmp_path + n + 5, title, t + 1);
    return true;
}

void lp_render_escape(FILE *f, const char *s, bool apostrophe)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'':
            fputs(apostrophe ? "&#39;" : "'", f);
            break;
        default: fputc(*s, f); break;
        }
    }
}

static void svg_inject(lp_canvas *c)
{
    fputs("\n<title>", c->file);
    lp_render_escape(c->file, c->title ? c->title : "", false);
    fputs("</title>\n<desc>", c->file);
    lp_render_escape(c->file, c->desc ? c->desc : "", false);
    fputs("</desc>", c->file);
}

/* cairo's SVG output goes through here: copy it to the file, and right after the end of the
 * <svg ...> start tag add <title> and <desc>. */
static cairo_status_t svg_write(void *closure, const unsigned char *data, unsigned int length)
{
    lp_canvas *c = closure;
    static const char tag[] = "<svg";
    unsigned int start = 0;
    for (unsigned int i = 0; i < length && c->svg_state < 2; i++) {
        if (c->svg_state == 0) {
            c->svg_match = data[i] == (unsigned char)tag[c->svg_match]
                               ? c->svg_match + 1
                               : (data[i] == '<' ? 1 : 0);
            if (c->svg_match == 4)
                c->svg_state = 1;
        } else if (data[i] == '>') {
            if (fwrite(data + start, 1, i + 1 - start, c->file) != i + 1 - start)
                c->write_failed = true;
            start = i + 1;
            svg_inject(c);
            c->svg_state = 2;
        }
    }
    if (start < length && fwrite(data + start, 1, length - start, c->file) != length - start)
        c->write_failed = true;
    return c->write_failed ? CAIRO_STATUS_WRITE_ERROR : CAIRO_STATUS_SUCCESS;
}

static void canvas_free(lp_canvas *c)
{
    if (c->cr)
        cairo_destroy(c->cr);
    if (c->surface)
        cairo_surface_destroy(c->surface);
    if (c->file)
        fclose(c->file);
    free(c->path); /* and tmp_path and title (own_names) */
    free(c->desc);
    memset(c, 0, sizeof *c);
}

lp_status lp_render_check_path(const char *path, lp_error *err)
{
    if (lp_image_format_from_path(path) == LP_IMAGE_COUNT)
        return lp_error_set(err, LP_ERR_USAGE,
                            "%s: unknown picture format (the extension must be .png, .svg or "
                            ".pdf)",
                            path);
    return LP_OK;
}

/* The cairo surface of c->format, zoom times larger for PNG; the SVG one streams into
 * c->tmp_path through svg_write. */
static lp_status create_surface(lp_canvas *c, int zoom, lp_error *err)
{
    switch (c->format) {
    case LP_IMAGE_PNG:
        c->surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, c->width * zoom,
                                                c->height * zoom);
        break;
    case LP_IMAGE_SVG:
        c->file = fopen(c->tmp_path, "wb");
        if (!c->file)
            return lp_error_set(err, LP_ERR_IO, "%s: cannot write: %s", c->tmp_path,
                                strerror(errno));
        c->surface = cairo_svg_surface_create_for_stream(svg_write, c, c->width, c->height);
        break;
    case LP_IMAGE_PDF:
        c->surface = cairo_pdf_surface_create(c->tmp_path, c->width, c->height);
        if (cairo_surface_status(c->surface) == CAIRO_STATUS_SUCCESS)
            cairo_pdf_surface_set_metadata(c->surface, CAIRO_PDF_METADATA_TITLE, c->title);
        break;
    default:
        break;
    }
    return LP_OK;
}

lp_status lp_canvas_begin(lp_canvas *c, const char *path, int width, int height, int zoom,
                          const char *title, lp_error *err)
{
    memset(c, 0, sizeof *c);
    lp_status s = lp_render_check_path(path, err);
    if (s != LP_OK)
        return s;
    c->format = lp_image_format_from_path(path);
    if (zoom < 1 || zoom > 4 || c->format != LP_IMAGE_PNG)
        zoom = 1; /* vector formats have no pixels to multiply */
    if (width < 1 || height < 1 || (int64_t)width * height * zoom * zoom > MAX_PIXELS)
        return lp_error_set(err, LP_ERR_RANGE,
                            "%s: picture of %d x %d pixels (zoom %d) is beyond the limit of %lld "
                            "pixels",
                            path, width, height, zoom, (long long)MAX_PIXELS);
    c->width = width;
    c->height = height;
    if (!own_names(c, path, title ? title : ""))
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", path);
    if ((s = create_surface(c, zoom, err)) != LP_OK) {
        canvas_free(c);
        return s;
    }
    cairo_status_t cs = cairo_surface_status(c->surface);
    if (cs == CAIRO_STATUS_SUCCESS) {
        c->cr = cairo_create(c->surface);
        cs = cairo_status(c->cr);
    }
    if (cs != CAIRO_STATUS_SUCCESS) {
        s = lp_error_set(err, LP_ERR_CAIRO, "%s: cannot create a %d x %d picture: %s", path,
                         width, height, cairo_status_to_string(cs));
        lp_canvas_abort(c);
        return s;
    }
    cairo_set_source_rgb(c->cr, 1, 1, 1);
    cairo_paint(c->cr);
    if (zoom > 1)
        cairo_scale(c->cr, zoom, zoom); /* cells are painted NEAREST: an exact integer upscale */
    return LP_OK;
}

lp_status lp_canvas_begin_titled(lp_canvas *c, const char *path, int64_t width, int64_t height,
                                 int zoom, const char *title, lp_error *err)
{
    int title_w = lp_title_width(title);
    if (width < title_w)
        width = title_w;
    return lp_canvas_begin(c, path, (int)width, (int)height, zoom, title, err);
}

void lp_canvas_note(lp_canvas *c, const char *text)
{
    if (c->format != LP_IMAGE_SVG || !text)
        return;
    size_t n = strlen(text);
    if (c->desc_len + n + 2 > c->desc_cap) {
        size_t cap = c->desc_cap ? c->desc_cap : 256;
        while (cap < c->desc_len + n + 2)
            cap *= 2;
        char *grown = realloc(c->desc, cap);
        if (!grown)
            return; /* the picture is still right; only the searchable text is short */
        c->desc = grown;
        c->desc_cap = cap;
    }
    memcpy(c->desc + c->desc_len, text, n);
    c->desc_len += n;
    c->desc[c->desc_len++] = '\n';
    c->desc[c->desc_len] = '\0';
}

lp_status lp_canvas_end(lp_canvas *c, lp_error *err)
{
    lp_status s = LP_OK;
    cairo_status_t cs = cairo_status(c->cr);
    cairo_destroy(c->cr);
    c->cr = NULL;
    if (cs == CAIRO_STATUS_SUCCESS) {
        if (c->format == LP_IMAGE_PNG)
            cs = cairo_surface_write_to_png(c->surface, c->tmp_path);
        cairo_surface_finish(c->surface);
        if (cs == CAIRO_STATUS_SUCCESS)
            cs = cairo_surface_status(c->surface);
    }
    if (cs != CAIRO_STATUS_SUCCESS)
        s = lp_error_set(err, cs == CAIRO_STATUS_WRITE_ERROR ? LP_ERR_IO : LP_ERR_CAIRO,
                         "%s: cannot write the picture: %s", c->path, cairo_status_to_string(cs));
    if (s == LP_OK && c->file) {
        if (c->svg_state != 2 || c->write_failed)
            s = lp_error_set(err, LP_ERR_IO, "%s: cannot write the picture: %s", c->path,
                             c->write_failed ? strerror(errno) : "no <svg> tag from cairo");
        if (fclose(c->file) != 0 && s == LP_OK)
            s = lp_error_set(err, LP_ERR_IO, "%s: cannot write: %s", c->path, strerror(errno));
        c->file = NULL;
    }
    if (s == LP_OK && rename(c->tmp_path, c->path) != 0)
        s = lp_error_set(err, LP_ERR_IO, "%s: cannot rename from %s: %s", c->path, c->tmp_path,
                         strerror(errno));
    if (s != LP_OK)
        unlink(c->tmp_path);
    canvas_free(c);
    return s;
}

void lp_canvas_abort(lp_canvas *c)
{
    if (c->cr) {
        cairo_destroy(c->cr);
        c->cr = NULL;
    }
    if (c->surface) {
        cairo_surface_finish(c->surface);
    }
    if (c->file) {
        fclose(c->file);
        c->file = NULL;
    }
    if (c->tmp_path)
        unlink(c->tmp_path);
    canvas_free(c);
}

/* ---- text ---- */

lp_text_style lp_text_style_default(double px)
{
    lp_text_style st;
    memset(&st, 0, sizeof st);
    st.px = px;
    st.rgb = (lp_rgb){0x22, 0x22, 0x22};
    return st;
}

lp_text_style lp_text_style_in_cell(double px, double cell_width)
{
    lp_text_style st = lp_text_style_default(px);
    st.halign = LP_ALIGN_CENTER;
    st.valign = LP_ALIGN_CENTER;
    st.max_width = cell_width - 2;
    return st;
}

static PangoLayout *make_layout(lp_canvas *c, const char *text, const lp_text_style *st)
{
    PangoLayout *layout = pango_cairo_create_layout(c->cr);
    if (!layout)
        return NULL;
    /* Metrics that do not snap to the device grid keep PNG, SVG and PDF laid out alike. */
    cairo_font_options_t *fo = cairo_font_options_create();
    cairo_font_options_set_hint_metrics(fo, CAIRO_HINT_METRICS_OFF);
    pango_cairo_context_set_font_options(pango_layout_get_context(layout), fo);
    cairo_font_options_destroy(fo);
    pango_layout_context_changed(layout);
    PangoFontDescription *fd = pango_font_description_new();
    pango_font_description_set_family(fd, st->mono ? "DejaVu Sans Mono,monospace"
                                                   : "DejaVu Sans,Noto Sans CJK SC,sans-serif");
    pango_font_description_set_weight(fd, st->bold ? PANGO_WEIGHT_BOLD : PANGO_WEIGHT_NORMAL);
    pango_font_description_set_absolute_size(fd, st->px * PANGO_SCALE);
    pango_layout_set_font_description(layout, fd);
    pango_font_description_free(fd);
    pango_layout_set_text(layout, text, -1);
    pango_layout_set_single_paragraph_mode(layout, TRUE);
    if (st->max_width > 0) {
        pango_layout_set_width(layout, (int)(st->max_width * PANGO_SCALE));
        pango_layout_set_ellipsize(layout, PANGO_ELLIPSIZE_END);
    }
    return layout;
}

double lp_text_width(lp_canvas *c, const char *text, const lp_text_style *st)
{
    PangoLayout *layout = make_layout(c, text, st);
    if (!layout)
        return 0;
    PangoRectangle logical;
    pango_layout_get_pixel_extents(layout, NULL, &logical);
    g_object_unref(layout);
    return logical.width;
}

double lp_draw_text(lp_canvas *c, const char *text, double x, double y, const lp_text_style *st)
{
    if (!text || !*text)
        return 0;
    PangoLayout *layout = make_layout(c, text, st);
    if (!layout)
        return 0;
    PangoRectangle logical;
    pango_layout_get_pixel_extents(layout, NULL, &logical);
    double w = logical.width, h = logical.height;
    double dx = st->halign == LP_ALIGN_CENTER ? -w / 2 : (st->halign == LP_ALIGN_END ? -w : 0);
    double dy = st->valign == LP_ALIGN_CENTER ? -h / 2 : (st->valign == LP_ALIGN_END ? -h : 0);
    cairo_save(c->cr);
    cairo_translate(c->cr, x, y);
    if (st->angle != 0)
        cairo_rotate(c->cr, st->angle);
    cairo_move_to(c->cr, dx - logical.x, dy);
    lp_set_rgb(c->cr, st->rgb);
    pango_cairo_show_layout(c->cr, layout);
    cairo_restore(c->cr);
    g_object_unref(layout);
    lp_canvas_note(c, text);
    return w;
}

int lp_title_width(const char *title)
{
    /* measured on a scratch surface, before the picture's own size is known */
    cairo_surface_t *scratch = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
    lp_canvas tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.format = LP_IMAGE_PNG;
    tmp.cr = cairo_create(scratch);
    lp_text_style st = lp_text_style_default(17);
    st.bold = true;
    double w = cairo_status(tmp.cr) == CAIRO_STATUS_SUCCESS ? lp_text_width(&tmp, title, &st) : 0;
    cairo_destroy(tmp.cr);
    cairo_surface_destroy(scratch);
    return (int)ceil(w) + 32;
}

void lp_draw_title(lp_canvas *c, const char *title, const char *subtitle, const char *warning)
{
    lp_text_style st = lp_text_style_default(17);
    st.bold = true;
    st.max_width = c->width - 24;
    lp_draw_text(c, title, 16, 12, &st);
    if (subtitle && *subtitle) {
        lp_text_style sub = lp_text_style_default(12);
        sub.rgb = (lp_rgb){0x66, 0x66, 0x66};
        sub.max_width = c->width - 24;
        lp_draw_text(c, subtitle, 16, 37, &sub);
    }
    /* a line of its own, in the leak colour: the first thing a reader should see */
    if (warning && *warning) {
        lp_text_style warn = lp_text_style_default(12);
        warn.bold = true;
        warn.rgb = lp_render_leak_rgb;
        warn.max_width = c->width - 24;
        lp_draw_text(c, warning, 16, 55, &warn);
    }
}

void lp_render_run_caption(const lp_store_run *run, char *buf, size_t size)
{
    snprintf(buf, size, "%s (%s), run %lld", run->model[0] ? run->model : "?",
             run->architecture[0] ? run->architecture : "?", (long long)run->id);
}

/* ---- colorbar ---- */

static void format_tick(double v, char *buf, size_t size)
{
    if (v == 0) {
        snprintf(buf, size, "0");
    } else if (fabs(v) >= 1e-2 && fabs(v) < 1e4) {
        snprintf(buf, size, "%.3g", v);
    } else {
        /* "1e-4" and "5e-3", not printf's "1e-04" */
        int e = (int)floor(log10(fabs(v)));
        double m = v / pow(10, e);
        if (fabs(m) >= 9.5) {
            m /= 10;
            e++;
        }
        snprintf(buf, size, "%.0fe%d", m, e);
    }
}

/* A "nice" step (1, 2, 2.5 or 5 times a power of ten) giving about `want` intervals. */
static double nice_step(double range, int want)
{
    double raw = range / want;
    double p = pow(10, floor(log10(raw)));
    double m = raw / p;
    double nice = m <= 1 ? 1 : (m <= 2 ? 2 : (m <= 2.5 ? 2.5 : (m <= 5 ? 5 : 10)));
    return nice * p;
}

/* The values labelled on a colorbar, the top first (nearer ticks give way to it); ticks[64]. */
static int colorbar_ticks(const lp_render_options *opt, double vmax, double *ticks)
{
    int n_ticks = 0;
    ticks[n_ticks++] = vmax;
    if (opt->scale == LP_SCALE_LOG) {
        double floor_v = opt->log_floor > 0 ? opt->log_floor : 1e-4;
        for (int e = (int)ceil(log10(floor_v) - 1e-9); e <= (int)floor(log10(vmax) + 1e-9) &&
                                                       n_ticks < 60;
             e++)
            ticks[n_ticks++] = pow(10, e);
        if (n_ticks < 2)
            ticks[n_ticks++] = floor_v;
        return n_ticks;
    }
    double step = nice_step(vmax, 4);
    for (double v = 0; v <= vmax * (1 + 1e-9) && n_ticks < 40; v += step)
        ticks[n_ticks++] = v;
    if (opt->scale == LP_SCALE_POWER) {
        /* the power scale widens the bottom: label round values there (1, 2, 5 x 10^e below
         * the first linear step); the spacing filter keeps those that fit */
        int e_top = (int)floor(log10(step));
        for (int e = e_top; e >= e_top - 4 && n_ticks < 60; e--) {
            static const double mant[] = {5, 2, 1};
            for (size_t i = 0; i < 3 && n_ticks < 60; i++) {
                double v = mant[i] * pow(10, e);
                if (v < step * (1 - 1e-9))
                    ticks[n_ticks++] = v;
            }
        }
    }
    return n_ticks;
}

/* Place the ticks, dropping any label that would touch one already placed. */
static void draw_ticks(lp_canvas *c, double x, double y, double w, double h,
                       const lp_render_options *opt, double vmax, const double *ticks,
                       int n_ticks)
{
    cairo_t *cr = c->cr;
    lp_text_style st = lp_text_style_default(11);
    st.valign = LP_ALIGN_CENTER;
    double placed[64];
    int n_placed = 0;
    for (int i = 0; i < n_ticks; i++) {
        double t = lp_scale_apply(opt, vmax, ticks[i]);
        double ty = y + h - t * h;
        bool clash = false;
        for (int k = 0; k < n_placed; k++)
            if (fabs(placed[k] - ty) < 14)
                clash = true;
        if (clash)
            continue;
        placed[n_placed++] = ty;
        cairo_set_source_rgb(cr, LP_INK_R, LP_INK_G, LP_INK_B);
        cairo_move_to(cr, x + w, floor(ty) + 0.5);
        cairo_line_to(cr, x + w + 4, floor(ty) + 0.5);
        cairo_stroke(cr);
        char buf[32];
        format_tick(ticks[i], buf, sizeof buf);
        lp_draw_text(c, buf, x + w + 7, ty, &st);
    }
}

void lp_draw_colorbar(lp_canvas *c, double x, double y, double w, double h,
                      const lp_render_options *opt, double vmax, const char *label)
{
    cairo_t *cr = c->cr;
    /* 256 bands, one per table entry: the bar shows exactly the colours the map can use. */
    for (int i = 0; i < 256; i++) {
        double y0 = y + h - (i + 1) * h / 256.0;
        lp_set_rgb(cr, lp_colormap_rgb(opt->colormap, (i + 0.5) / 256.0));
        cairo_rectangle(cr, x, y0, w, h / 256.0 + 0.5);
        cairo_fill(cr);
    }
    cairo_set_source_rgb(cr, LP_INK_R, LP_INK_G, LP_INK_B);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, x + 0.5, y + 0.5, w - 1, h - 1);
    cairo_stroke(cr);
    double ticks[64];
    int n_ticks = colorbar_ticks(opt, vmax, ticks);
    draw_ticks(c, x, y, w, h, opt, vmax, ticks, n_ticks);
    if (label && *label) {
        lp_text_style ls = lp_text_style_default(11);
        ls.rgb = (lp_rgb){0x55, 0x55, 0x55};
        ls.halign = LP_ALIGN_START;
        ls.valign = LP_ALIGN_END;
        ls.max_width = 110;
        lp_draw_text(c, label, x, y - 6, &ls);
    }
}

/* ---- the map ---- */

/* A display cell's colour: bad data, a leak (the larger of its values), allowed, or masked. */
static lp_rgb cell_rgb(const lp_pooled_map *map, int64_t idx, const lp_render_options *opt,
                       double vmax, lp_rgb masked)
{
    uint8_t f = map->flags[idx];
    if (f & LP_CELL_NAN)
        return lp_render_bad_rgb;
    if (f & LP_CELL_LEAK) {
        double v = (double)map->masked_max[idx];
        if ((f & LP_CELL_ALLOWED) && (double)map->allowed_max[idx] > v)
            v = (double)map->allowed_max[idx];
        return lp_colormap_rgb(opt->colormap, lp_scale_apply(opt, vmax, v));
    }
    if (f & LP_CELL_ALLOWED)
        return lp_colormap_rgb(opt->colormap,
                               lp_scale_apply(opt, vmax, (double)map->allowed_max[idx]));
    return masked;
}

/* How a painter colours display cell idx: the options' colormap, or the diverging one. */
typedef struct cell_paint {
    const lp_render_options *opt; /* NULL: signed values on the diverging colormap */
    double vmax;
    lp_rgb masked;
} cell_paint;

static lp_rgb signed_cell_rgb(const lp_pooled_map *map, int64_t idx, double vmax, lp_rgb masked)
{
    uint8_t f = map->flags[idx];
    if (f & LP_CELL_NAN)
        return lp_render_bad_rgb;
    if (f & LP_CELL_ALLOWED)
        return lp_diverging_rgb((double)map->allowed_max[idx] / vmax);
    return masked;
}

/* The map's pixels, cell_w x cell_h per display cell (colours computed once per cell). */
static void fill_cells(cairo_surface_t *img, const lp_pooled_map *map, const cell_paint *paint,
                       int cell_w, int cell_h)
{
    cairo_surface_flush(img);
    unsigned char *data = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img);
    for (int64_t r = 0; r < map->rows; r++) {
        for (int64_t col = 0; col < map->cols; col++) {
            int64_t idx = r * map->cols + col;
            lp_rgb rgb = paint->opt ? cell_rgb(map, idx, paint->opt, paint->vmax, paint->masked)
                                    : signed_cell_rgb(map, idx, paint->vmax, paint->masked);
            uint32_t px = 0xff000000u | ((uint32_t)rgb.r << 16) | ((uint32_t)rgb.g << 8) | rgb.b;
            for (int dy = 0; dy < cell_h; dy++) {
                unsigned char *line = data + (size_t)(r * cell_h + dy) * (size_t)stride;
                for (int dx = 0; dx < cell_w; dx++)
                    memcpy(line + 4 * (size_t)(col * cell_w + dx), &px, 4);
            }
        }
    }
    cairo_surface_mark_dirty(img);
}

/* Leak marker: a red outline inside the cell, when cells are big enough to carry one; the caller
 * also counts leaks in the subtitle, so small cells still announce them. */
static void outline_leaks(lp_canvas *c, const lp_pooled_map *map, double x, double y,
                          int cell_w, int cell_h)
{
    int cell = cell_w < cell_h ? cell_w : cell_h;
    if (map->n_leak_cells == 0 || cell < 3)
        return;
    cairo_save(c->cr);
    lp_set_rgb(c->cr, lp_render_leak_rgb);
    double lw = cell >= 12 ? 2 : 1;
    cairo_set_line_width(c->cr, lw);
    for (int64_t r = 0; r < map->rows; r++)
        for (int64_t col = 0; col < map->cols; col++)
            if (map->flags[r * map->cols + col] & LP_CELL_LEAK)
                cairo_rectangle(c->cr, x + col * cell_w + lw / 2, y + r * cell_h + lw / 2,
                                cell_w - lw, cell_h - lw);
    cairo_stroke(c->cr);
    cairo_restore(c->cr);
}

static lp_status paint_map(lp_canvas *c, const lp_pooled_map *map, const cell_paint *paint,
                           double x, double y, int cell_w, int cell_h, lp_error *err)
{
    /* Built at the final pixel size and painted 1:1, so every viewer shows crisp cells whether
     * the picture is PNG, SVG (an embedded PNG) or PDF; memory is the map's own pixels. */
    int64_t w64, h64;
    if (!lp_mul_i64(map->cols, cell_w, &w64) || !lp_mul_i64(map->rows, cell_h, &h64) ||
        w64 > 16384 || h64 > 16384)
        return lp_error_set(err, LP_ERR_RANGE, "map of %lld x %lld cells at %d x %d px: too large",
                            (long long)map->rows, (long long)map->cols, cell_w, cell_h);
    int w = (int)w64, h = (int)h64;
    cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
    if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) {
        cairo_status_t cs = cairo_surface_status(img);
        cairo_surface_destroy(img);
        return lp_error_set(err, LP_ERR_CAIRO, "map image %d x %d: %s", w, h,
                            cairo_status_to_string(cs));
    }
    fill_cells(img, map, paint, cell_w, cell_h);
    cairo_save(c->cr);
    cairo_set_source_surface(c->cr, img, x, y);
    cairo_pattern_set_filter(cairo_get_source(c->cr), CAIRO_FILTER_NEAREST);
    cairo_rectangle(c->cr, x, y, w, h);
    cairo_fill(c->cr);
    cairo_restore(c->cr);
    cairo_surface_destroy(img);
    outline_leaks(c, map, x, y, cell_w, cell_h);
    /* frame */
    cairo_set_source_rgb(c->cr, LP_INK_R, LP_INK_G, LP_INK_B);
    cairo_set_line_width(c->cr, 1);
    cairo_rectangle(c->cr, x - 0.5, y - 0.5, w + 1, h + 1);
    cairo_stroke(c->cr);
    return LP_OK;
}

lp_status lp_draw_map(lp_canvas *c, const lp_pooled_map *map, const lp_render_options *opt,
                      double vmax, double x, double y, int cell_w, int cell_h, lp_error *err)
{
    cell_paint paint = {opt, vmax, lp_render_masked_rgb(opt)};
    return paint_map(c, map, &paint, x, y, cell_w, cell_h, err);
}

lp_status lp_draw_signed_map(lp_canvas *c, const lp_pooled_map *map, double vmax, lp_rgb masked,
                             double x, double y, int cell_w, int cell_h, lp_error *err)
{
    cell_paint paint = {NULL, vmax > 0 ? vmax : 1, masked};
    return paint_map(c, map, &paint, x, y, cell_w, cell_h, err);
}
