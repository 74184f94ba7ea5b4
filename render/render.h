/* Pictures of a trace database: attention heatmaps, small multiples, head-statistics matrices and
 * leak plots, drawn with cairo and pango into PNG, SVG or PDF (chosen by the output's extension);
 * the interactive viewer (one self-contained HTML file); a run exported as safetensors or npz.
 *
 *   lp_error err = {0};
 *   lp_store *db;                                      // trace/store/store.h reads the database
 *   lp_store_run run;
 *   bool incomplete;
 *   if (lp_store_open_read("trace.db", &db, &err) != LP_OK) ...
 *   if (lp_store_read_run(db, 0, "trace", &run, &incomplete, &err) != LP_OK) ... // latest complete
 *   lp_render_options opt;
 *   lp_render_options_default(&opt);
 *   opt.scale = LP_SCALE_LOG;
 *   if (lp_render_head(db, &run, 3, 1, &opt, "l3h1.png", &err) != LP_OK) ...
 *   lp_viewer_options vopt;
 *   lp_viewer_options_default(&vopt);                  // 64 MiB of map cells at most
 *   if (lp_render_viewer(db, &run, &opt, &vopt, "run.html", NULL, &err) != LP_OK) ... // one file
 *   if (lp_render_export(db, &run, "run.npz", NULL, &err) != LP_OK) ...  // or .safetensors
 *   lp_store_run_clear(&run);
 *   lp_store_close(db);
 *
 * Conventions (README, "loupe render"):
 *  - Maps are [n_q, n_k]: query positions down, key positions across. Query i sits at absolute
 *    position n_k - n_q + i (bottom-right aligned diagonal, as in trace/kernels/mask.h).
 *  - A masked cell is one the run's causal/window mask forbids; it is drawn in opt.masked_rgb
 *    (#d9d9d9 by default, #f2e6d0 with the gray colormap). A masked cell holding a probability above
 *    opt.leak_threshold (default 0: any nonzero value) is a leak: it keeps its colormap colour and
 *    gets a red outline, and the picture's subtitle counts the leak cells.
 *  - Maps larger than the canvas are reduced by max-pooling square blocks of block x block tokens,
 *    streamed row by row from the store (lp_store_map_read), so one bright cell is never lost
 *    and memory is O(canvas + one row).
 *  - Files are written to "OUT.tmp" and renamed on success: a failed render leaves no half file.
 */
#ifndef LP_RENDER_RENDER_H
#define LP_RENDER_RENDER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "trace/store/store.h"

typedef enum lp_colormap {
    LP_COLORMAP_VIRIDIS,
    LP_COLORMAP_MAGMA,
    LP_COLORMAP_GRAY,
    LP_COLORMAP_COUNT
} lp_colormap;

typedef enum lp_scale {
    LP_SCALE_LINEAR, /* t = v / vmax */
    LP_SCALE_LOG,    /* t = log(max(v, floor) / floor) / log(vmax / floor) */
    LP_SCALE_POWER,  /* t = (v / vmax)^gamma */
    LP_SCALE_COUNT
} lp_scale;

typedef enum lp_image_format {
    LP_IMAGE_PNG,
    LP_IMAGE_SVG,
    LP_IMAGE_PDF,
    LP_IMAGE_COUNT
} lp_image_format;

typedef struct lp_rgb {
    uint8_t r, g, b;
} lp_rgb;

typedef struct lp_render_options {
    lp_colormap colormap;
    lp_scale scale;
    double gamma;          /* power scale exponent, > 0 (default 0.5) */
    double log_floor;      /* log scale: values below are drawn as the floor (default 1e-4) */
    double vmax;           /* top of the scale; 0 = the largest value shown (default 0) */
    double leak_threshold; /* masked cells above this are leaks (default 0) */
    int size;              /* largest side of a single map in pixels (default 800) */
    int cell;              /* pixels per cell; 0 = the largest that fits size, at most 24 */
    int thumb;             /* side of one panel in --grid / --overview (0 = 160 / 64) */
    lp_rgb masked_rgb;     /* colour of masked cells */
    bool masked_rgb_set;   /* false: pick the default for the colormap */
    int64_t range_lo, range_hi; /* single-head maps: show positions [lo, hi) only; hi 0 = all */
    int zoom;              /* PNG only: device pixels per layout pixel, 1..4 (default 1); sizes,
                            * margins and cells are in layout pixels */
} lp_render_options;

void lp_render_options_default(lp_render_options *opt);

/* Names <-> enums; the from_name functions return _COUNT for unknown names. */
const char *lp_colormap_name(lp_colormap cmap);
lp_colormap lp_colormap_from_name(const char *name);
const char *lp_scale_name(lp_scale scale);
lp_scale lp_scale_from_name(const char *name);
/* From a path's extension (.png, .svg, .pdf; case-insensitive); COUNT if none of these. */
lp_image_format lp_image_format_from_path(const char *path);

/* t in [0, 1] (clamped; NaN gives 0) -> colour, matplotlib's convention: entry
 * min(255, floor(t * 256)) of the 256-entry table, each channel round(x * 255). */
lp_rgb lp_colormap_rgb(lp_colormap cmap, double t);
/* A value on the options' scale -> t in [0, 1], given the top of the scale. */
double lp_scale_apply(const lp_render_options *opt, double vmax, double value);
/* The masked-cell colour these options use. */
lp_rgb lp_render_masked_rgb(const lp_render_options *opt);

/* ---- maps and labels read from the trace store ---- */

/* A map reduced to rows x cols display cells, each the max over a block x block square.
 * Per cell: the largest allowed value, the largest masked value, and which kinds it covers. */
enum {
    LP_CELL_ALLOWED = 1, /* covers at least one cell the mask allows */
    LP_CELL_MASKED = 2,  /* covers at least one masked cell */
    LP_CELL_LEAK = 4,    /* a masked cell in it holds more than the leak threshold */
    LP_CELL_NAN = 8,     /* a NaN or negative value (bad data) */
};

typedef struct lp_pooled_map {
    int64_t n_q, n_k;     /* the original map */
    int64_t block;        /* tokens per display cell along each axis */
    int64_t rows, cols;   /* ceil(shown_q / block), ceil(shown_k / block) */
    float *allowed_max;   /* [rows * cols] */
    float *masked_max;    /* [rows * cols] */
    uint8_t *flags;       /* [rows * cols] LP_CELL_* */
    int64_t n_leak_cells; /* original (not pooled) masked cells above the threshold */
    int64_t n_bad_cells;  /* NaN or negative values */
    float max_value;      /* over allowed cells and leaks */
    int64_t row0, col0;   /* first query row and first key shown (0, 0 for the whole map) */
    int64_t shown_q, shown_k; /* query rows and keys shown (n_q, n_k for the whole map) */
} lp_pooled_map;

/* Read one head's map of the run, max-pooled so that neither side exceeds max_cells display
 * cells (block = ceil(longest shown side / max_cells)), for the positions [pos_lo, pos_hi) only
 * (pos_hi 0 = to the end; 0, 0 = the whole map): keys in that range, and the query rows at those
 * positions. Streams the map row by row through lp_store_map_read, so memory is the pooled grid
 * and one row. LP_ERR_NOT_FOUND when the run stored no such map; LP_ERR_RANGE when the range
 * misses it. */
lp_status lp_render_read_map(lp_store *db, const lp_store_run *run, int64_t layer, int64_t head,
                             int64_t max_cells, double leak_threshold, int64_t pos_lo,
                             int64_t pos_hi, lp_pooled_map *map, lp_error *err);
void lp_pooled_map_free(lp_pooled_map *map);

/* The token texts of a run, in position order, made visible for labels (see
 * lp_render_visible_piece). *labels is an array of n strings; free with lp_store_free_texts. */
lp_status lp_render_read_labels(lp_store *db, int64_t run_id, char ***labels, int64_t *n,
                                lp_error *err);

/* A token piece as a label: ' ' and U+2581 become U+2423 (open box), '\n' U+23CE, '\t' U+21E5,
 * '\r' U+240D, other control bytes their U+2400 control picture, invalid UTF-8 U+FFFD; cut to
 * max_chars characters with a trailing ellipsis. Returns a malloc'ed string or NULL (no memory). */
char *lp_render_visible_piece(const char *piece, int max_chars);

/* ---- pictures ---- */

/* The geometry of a single-head picture, so callers and tests know the image size up front. */
typedef struct lp_heatmap_layout {
    int64_t block;           /* tokens per display cell */
    int64_t rows, cols;      /* display cells */
    int cell;                /* pixels per display cell */
    int map_x, map_y;        /* top-left of the map in the picture */
    int width, height;       /* the whole picture */
    int cell_h;              /* pixels per display row: cell, or taller for very flat maps (a few
                              * queries over many keys) so they stay visible */
} lp_heatmap_layout;

/* Margins around the map: left for query labels, top for the title, right for the colorbar,
 * bottom for the (vertical) key labels. width = map + LEFT + RIGHT, height = map + TOP + BOTTOM,
 * and never less than LP_RENDER_MIN_MAP for the map part. */
enum {
    LP_RENDER_MARGIN_LEFT = 140,
    LP_RENDER_MARGIN_RIGHT = 120,
    LP_RENDER_MARGIN_TOP = 92,
    LP_RENDER_MARGIN_BOTTOM = 120,
    LP_RENDER_MIN_MAP = 240,
};

lp_status lp_render_heatmap_layout(int64_t n_q, int64_t n_k, const lp_render_options *opt,
                                   lp_heatmap_layout *layout, lp_error *err);

/* One head's map. */
lp_status lp_render_head(lp_store *db, const lp_store_run *run, int64_t layer, int64_t head,
                         const lp_render_options *opt, const char *out_path, lp_error *err);
/* All heads of a layer as small multiples with a shared scale. */
lp_status lp_render_layer_grid(lp_store *db, const lp_store_run *run, int64_t layer,
                               const lp_render_options *opt, const char *out_path, lp_error *err);
/* Every layer x head as thumbnails on one sheet, with a shared scale. */
lp_status lp_render_overview(lp_store *db, const lp_store_run *run,
                             const lp_render_options *opt, const char *out_path, lp_error *err);
/* A layers x heads matrix coloured by one statistic, annotated with the values. */
lp_status lp_render_stat_matrix(lp_store *db, const lp_store_run *run, lp_head_stat stat,
                                const lp_render_options *opt, const char *out_path,
                                lp_error *err);
/* `loupe ablate`'s head_importance deltas as a layers x heads matrix on a diverging colormap
 * centred on 0, values written in (render/importance.c). */
lp_status lp_render_importance(lp_store *db, const lp_store_run *run,
                               const lp_render_options *opt, const char *out_path, lp_error *err);
/* `loupe trace --logit-lens`: layers x positions, the top token's text in each cell coloured by
 * its probability, each layer's mean NLL at the right. */
lp_status lp_render_logit_lens(lp_store *db, const lp_store_run *run,
                               const lp_render_options *opt, const char *out_path, lp_error *err);
/* Any layers x heads matrix of signed values on the diverging colormap (|value| <= vmax, vmax
 * from opt or the largest |value|). */
lp_status lp_render_value_matrix(const double *values, int64_t n_layers, int64_t n_heads,
                                 const char *title, const char *subtitle, const char *bar_label,
                                 const lp_render_options *opt, const char *out_path,
                                 lp_error *err);
/* t in [-1, 1] -> blue .. white (0) .. red. */
lp_rgb lp_diverging_rgb(double t);

/* `loupe diff` (render/diff.c), diff_id 0 = the latest stored in db. The layers x heads matrix of
 * each head's mean Jensen-Shannon divergence (white at 0 to red, values written in), and one
 * head's difference map B - A on the diverging colormap over [-vmax, vmax] (vmax the largest
 * |difference| or opt->vmax), masked cells in the masked colour, A's token labels. The diff names
 * its runs by the database paths diff was given: a path that is db_path's file is db itself,
 * else it is opened as stored (relative to the current folder), else as the file of that name
 * beside db_path; when neither opens, or the run there is gone or changed shape,
 * LP_ERR_NOT_FOUND says which. */
lp_status lp_render_diff_matrix(lp_store *db, int64_t diff_id, const lp_render_options *opt,
                                const char *out_path, lp_error *err);
lp_status lp_render_diff_head(lp_store *db, const char *db_path, int64_t diff_id, int64_t layer,
                              int64_t head, const lp_render_options *opt, const char *out_path,
                              lp_error *err);

/* The same for a dataset's aggregate (loupe trace --prompts): each head's mean over the runs,
 * the largest standard deviation in the subtitle. */
lp_status lp_render_dataset_stat(lp_store *db, const char *dataset, lp_head_stat stat,
                                 const lp_render_options *opt, const char *out_path,
                                 lp_error *err);
/* The per-layer max difference of a leak run's perturbation checks, on a log axis. */
lp_status lp_render_leak_plot(lp_store *db, const lp_store_run *run,
                              const lp_render_options *opt, const char *out_path, lp_error *err);

/* ---- the interactive viewer: one self-contained HTML file ---- */

/* How much of the run the page embeds. The maps go in as 1 byte per display cell (a square-root
 * code, laid out in render/viewer.c), so max_map_bytes is the number of cells: when
 * the stored maps hold more, every head is max-pooled to the same largest side that fits. */
typedef struct lp_viewer_options {
    uint64_t max_map_bytes; /* default 64 MiB */
    int64_t layer;          /* only this layer's heads; -1 = every layer (default) */
    const char *db_path;    /* the database's file: a stored diff whose runs are both in it gets
                             * its difference maps (NULL, the default: none) */
} lp_viewer_options;

void lp_viewer_options_default(lp_viewer_options *vopt);

/* What the page holds, for the command's report and the tests. */
typedef struct lp_viewer_report {
    int64_t n_maps;          /* heads with an embedded map */
    int64_t max_block;       /* tokens per embedded cell (1 = every map at full resolution) */
    uint64_t map_cells;      /* embedded cells (bytes before base64), thumbnails included */
    uint64_t file_bytes;     /* the whole page */
} lp_viewer_report;

/* The viewer page of one run: head view, text view, overview, statistics and the run's other
 * sections (leak checks, predictions), written to out_path through OUT.tmp and a rename. opt gives
 * the initial colormap, scale and leak threshold; vopt NULL means the defaults. report may be
 * NULL. */
lp_status lp_render_viewer(lp_store *db, const lp_store_run *run, const lp_render_options *opt,
                           const lp_viewer_options *vopt, const char *out_path,
                           lp_viewer_report *report, lp_error *err);

/* Every picture of a run into dir (created if missing), the viewer as dir/viewer.html (vopt: its
 * options, NULL = the defaults), and index.html linking them. *n_files (may be NULL) receives how
 * many pictures were written (the viewer not counted). */
lp_status lp_render_gallery(lp_store *db, const lp_store_run *run,
                            const lp_render_options *opt, const lp_viewer_options *vopt,
                            const char *dir, int64_t *n_files, lp_error *err);

/* ---- leaving loupe for Python: a run as safetensors or npz ---- */

typedef enum lp_export_format { LP_EXPORT_SAFETENSORS, LP_EXPORT_NPZ, LP_EXPORT_COUNT } lp_export_format;

/* From a path's extension (.safetensors, .npz; case-insensitive); COUNT if neither. */
lp_export_format lp_export_format_from_path(const char *path);

typedef struct lp_export_report {
    int64_t n_tensors;
    uint64_t bytes;          /* the whole file */
    bool attention_stacked;  /* one [layers, heads, n_q, n_k] tensor rather than one per head */
} lp_export_report;

/* The run's maps (one tensor per stored head, or one stack when every head was stored with one
 * shape), head statistics, token ids, predictions and full logits, with the runs row and the token
 * texts as metadata, into path (format by extension; written to PATH.tmp and renamed). The
 * layout is in render/export.c. Memory: one map row plus the run's tables.
 * report may be NULL. */
lp_status lp_render_export(lp_store *db, const lp_store_run *run, const char *path,
                           lp_export_report *report, lp_error *err);

#endif
