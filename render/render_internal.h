/* What the render module's files share: colormap tables, the canvas (a cairo surface that ends in
 * a file written atomically), pango text helpers, the colorbar and the map painter. */
#ifndef LP_RENDER_RENDER_INTERNAL_H
#define LP_RENDER_RENDER_INTERNAL_H

#include <cairo.h>
#include <jansson.h>
#include <stdio.h>

#include "render/render.h"

#define LP_RENDER_PI 3.14159265358979323846

extern const float lp_render_viridis_table[256][3];
extern const float lp_render_magma_table[256][3];

/* Colours of the furniture (text, frames, leak marker). */
#define LP_INK_R 0.13
#define LP_INK_G 0.13
#define LP_INK_B 0.13
extern const lp_rgb lp_render_leak_rgb; /* outline of leak cells: #e8112d */
extern const lp_rgb lp_render_bad_rgb;  /* NaN / negative cells: #ff00ff */

/* A picture under construction. The SVG variant streams cairo's output through a filter that puts
 * <title> and <desc> (the plain text of every label drawn) right after the <svg> tag: cairo
 * writes pango text as glyph outlines, so without them the labels would not be searchable,
 * accessible or testable. */
typedef struct lp_canvas {
    lp_image_format format;
    int width, height;
    cairo_surface_t *surface;
    cairo_t *cr;
    char *path;     /* final name; one block with tmp_path and title */
    char *tmp_path; /* written first, renamed on success */
    FILE *file;     /* SVG stream target */
    int svg_state;  /* 0: before "<svg", 1: inside the tag, 2: injected */
    int svg_match;  /* bytes of "<svg" matched so far */
    bool write_failed;
    char *title;
    char *desc;     /* labels, one per line */
    size_t desc_len, desc_cap;
} lp_canvas;

/* width x height in layout pixels; a PNG is zoom times larger (1..4), drawn through a scale so
 * callers never see the zoom. */
lp_status lp_canvas_begin(lp_canvas *c, const char *path, int width, int height, int zoom,
                          const char *title, lp_error *err);
/* The same, widened to fit the title line (lp_title_width). */
lp_status lp_canvas_begin_titled(lp_canvas *c, const char *path, int64_t width, int64_t height,
                                 int zoom, const char *title, lp_error *err);
/* LP_ERR_USAGE unless the path ends in .png, .svg or .pdf. */
lp_status lp_render_check_path(const char *path, lp_error *err);
/* Text into XML or HTML: < > & " escaped, and ' too when apostrophe (HTML attributes). */
void lp_render_escape(FILE *f, const char *s, bool apostrophe);
/* Remember a label for the SVG <desc> (no-op for other formats). */
void lp_canvas_note(lp_canvas *c, const char *text);
/* Finish, write, rename; frees everything either way. */
lp_status lp_canvas_end(lp_canvas *c, lp_error *err);
/* Drop the picture: frees everything and removes the temporary file. */
void lp_canvas_abort(lp_canvas *c);

enum { LP_ALIGN_START = 0, LP_ALIGN_CENTER = 1, LP_ALIGN_END = 2 };

typedef struct lp_text_style {
    double px;        /* font size in pixels */
    bool bold;
    bool mono;
    lp_rgb rgb;
    int halign;       /* of the anchor: START = text starts at x */
    int valign;       /* START = top at y, CENTER, END = bottom at y */
    double max_width; /* ellipsize beyond this (0 = no limit) */
    double angle;     /* radians, rotation about the anchor; -pi/2 reads upwards */
} lp_text_style;

lp_text_style lp_text_style_default(double px);
/* A value written inside a cell: centred on (x, y), ellipsized to the cell's width less 2 px. */
lp_text_style lp_text_style_in_cell(double px, double cell_width);
/* Draw text at (x, y); also notes it for the SVG <desc>. Returns the drawn width in pixels. */
double lp_draw_text(lp_canvas *c, const char *text, double x, double y, const lp_text_style *st);
double lp_text_width(lp_canvas *c, const char *text, const lp_text_style *st);

/* A vertical colorbar at (x, y) of size w x h, ticks and labels to its right. */
void lp_draw_colorbar(lp_canvas *c, double x, double y, double w, double h,
                      const lp_render_options *opt, double vmax, const char *label);

/* Paint a pooled map with its top-left at (x, y), display cells cell_w x cell_h pixels. Leak
 * cells get a red outline when cells are at least 3 px; returns LP_ERR_RANGE / LP_ERR_CAIRO on
 * failure. */
lp_status lp_draw_map(lp_canvas *c, const lp_pooled_map *map, const lp_render_options *opt,
                      double vmax, double x, double y, int cell_w, int cell_h, lp_error *err);

/* A signed map (render/diff.c: allowed_max holds the value of largest |value| per display cell)
 * on the diverging colormap over [-vmax, vmax]; masked cells in masked_rgb, NaN magenta, masked
 * cells flagged LP_CELL_LEAK (they differ) outlined red. */
lp_status lp_draw_signed_map(lp_canvas *c, const lp_pooled_map *map, double vmax, lp_rgb masked,
                             double x, double y, int cell_w, int cell_h, lp_error *err);

/* True when both paths name one existing file (device and inode; NULL is never the same). */
bool lp_render_same_file(const char *a, const char *b);

/* A single head's token labels on both axes of a map drawn at lay (render/heatmap.c). */
void lp_draw_token_axes(lp_canvas *c, const lp_pooled_map *map, const lp_heatmap_layout *lay,
                        char **pieces, int64_t n_pieces);

/* A vertical bar of the diverging colormap, from -vmax (bottom) to +vmax (top), or from 0 to
 * vmax (white to red) when nonnegative; labels at the ends and the middle, `label` above. */
void lp_draw_diverging_bar(lp_canvas *c, double x, double y, double h, double vmax,
                           bool nonnegative, const char *label);

/* lp_render_value_matrix, or for values >= 0 (nonnegative: white at 0 to red at vmax, values
 * written with 2 significant digits); second (may be NULL) a panel beside it on its own scale
 * (opt->vmax is the first panel's), its bar labelled second_label. */
lp_status lp_render_matrix_picture(const double *values, int64_t n_layers, int64_t n_heads,
                                   const char *title, const char *subtitle, const char *bar_label,
                                   bool nonnegative, const double *second,
                                   const char *second_label, const lp_render_options *opt,
                                   const char *out_path, lp_error *err);

/* The top of the scale for maps whose largest value is max_value. */
double lp_render_vmax(const lp_render_options *opt, double max_value);

/* "model (arch), run N" into buf. */
void lp_render_run_caption(const lp_store_run *run, char *buf, size_t size);

/* Width a picture needs to show this title whole (margins included). */
int lp_title_width(const char *title);

/* Draw the title line and a grey subtitle line at the top-left margin. */
void lp_draw_title(lp_canvas *c, const char *title, const char *subtitle, const char *warning);

void lp_set_rgb(cairo_t *cr, lp_rgb rgb);

/* json_object_set_new / json_array_append_new that clear *ok when jansson runs out of memory
 * (render/json.c); a NULL value (a failed json_string, ...) counts as running out too. */
void lp_render_json_set(bool *ok, json_t *obj, const char *key, json_t *value);
void lp_render_json_push(bool *ok, json_t *array, json_t *value);
/* A string from the database as JSON text: itself when it is valid UTF-8, else its visible form
 * (bad bytes as U+FFFD), so one bad row never costs the file. NULL only when out of memory. */
json_t *lp_render_json_text(const char *s);

#endif
