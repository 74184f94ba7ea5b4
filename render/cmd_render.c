/* `loupe render`: pictures of a trace database (options from a table; the drawing is in render/,
 * the reading in trace/store/). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/cli/cli.h"
#include "render/render.h"

static const char *const CMD = "render";

typedef struct render_opts {
    int64_t run, layer, head; /* layer, head: -1 = not given */
    int64_t diff_id;          /* 0 = the latest diff */
    const char *output, *all, *stats, *html, *dataset;
    bool grid, overview, leak, importance, logit_lens, diff;
    uint64_t max_map_bytes;
    const char *colormap, *scale, *range, *masked_color;
    double gamma, log_floor, vmax, leak_threshold; /* vmax NAN = not given */
    int64_t size, cell, thumb, zoom;
} render_opts;

static const lp_option render_options[] = {
    LP_OPT_INT_OF(render_opts, layer, "layer", "L", 0, (double)INT64_MAX,
                  "the layer of --head or --grid"),
    LP_OPT_INT_OF(render_opts, head, "head", "H", 0, (double)INT64_MAX,
                  "with --layer L: one head's attention map, queries down, keys across"),
    LP_OPT_FLAG_OF(render_opts, grid, "grid",
                   "with --layer L: all heads of the layer as small multiples, one scale"),
    LP_OPT_FLAG_OF(render_opts, overview, "overview", "every layer x head as thumbnails"),
    LP_OPT_STRING_OF(render_opts, stats, "stats", "NAME",
                     "layers x heads matrix of a head statistic, values written in: entropy,\n"
                     "max_prob, sink, prev_token, self, distance, local_frac, output_norm, keys50,\n"
                     "keys90, keys99, low_mass, learned_sink (gpt-oss: the mass on the sink)"),
    LP_OPT_STRING_OF(render_opts, dataset, "dataset", "NAME",
                     "with --stats: the dataset's aggregate (loupe trace --prompts), each head's\n"
                     "mean over its runs, instead of one run"),
    LP_OPT_FLAG_OF(render_opts, leak, "leak",
                   "per-layer max |difference| of a `loupe leak` run (log axis)"),
    LP_OPT_FLAG_OF(render_opts, importance, "importance",
                   "layers x heads matrix of `loupe ablate`'s NLL deltas (default run: the\n"
                   "latest complete ablate run)"),
    LP_OPT_FLAG_OF(render_opts, logit_lens, "logit-lens",
                   "layers x positions grid of a `loupe trace --logit-lens` run's top tokens"),
    LP_OPT_FLAG_OF(render_opts, diff, "diff",
                   "a `loupe diff`: the layers x heads matrix of mean JS divergence; with\n"
                   "--layer L --head H that head's difference map B - A"),
    LP_OPT_INT_OF(render_opts, diff_id, "diff-id", "N", 1, (double)INT64_MAX,
                  "with --diff: which stored diff (default: the latest)"),
    LP_OPT_STRING_OF(render_opts, html, "html", "OUT.html",
                     "the interactive viewer: one self-contained HTML file (with --layer L:\n"
                     "that layer's heads only)"),
    LP_OPT_STRING_OF(render_opts, all, "all", "DIR",
                     "every picture of the run into DIR, plus DIR/index.html and\n"
                     "DIR/viewer.html"),
    LP_OPT_STRING_OF(render_opts, output, "output", "OUT", "the picture to write (not with --all)"),
    LP_OPT_INT_OF(render_opts, run, "run", "N", 1, (double)INT64_MAX,
                  "run id (default: the latest complete trace run; --leak: the latest\n"
                  "complete run with leak checks)"),
    LP_OPT_STRING_OF(render_opts, colormap, "colormap", "NAME", "viridis (default), magma, gray"),
    LP_OPT_STRING_OF(render_opts, scale, "scale", "NAME",
                     "linear (default, [0, max]), log (floor --floor), power (--gamma)"),
    LP_OPT_NUMBER_OF(render_opts, gamma, "gamma", "G", 0, 0, "power-scale exponent (default 0.5)"),
    LP_OPT_NUMBER_OF(render_opts, log_floor, "floor", "F", 0, 0, "log-scale floor (default 1e-4)"),
    LP_OPT_NUMBER_OF(render_opts, vmax, "vmax", "V", 0, 0,
                     "top of the scale (default: the largest value drawn)"),
    LP_OPT_NUMBER_OF(render_opts, leak_threshold, "leak-threshold", "T", 0, 0,
                     "masked cells above T are drawn as leaks (default 0)"),
    LP_OPT_INT_OF(render_opts, size, "size", "PX", 16, 4096,
                  "largest side of a single map (default 800); longer maps are\n"
                  "max-pooled in blocks"),
    LP_OPT_INT_OF(render_opts, cell, "cell", "PX", 1, 256,
                  "pixels per cell, lowered to fit --size (default: the largest that\n"
                  "fits, at most 24)"),
    LP_OPT_INT_OF(render_opts, thumb, "thumb", "PX", 8, 1024,
                  "panel side for --grid (default 160) and --overview (default 64)"),
    LP_OPT_STRING_OF(render_opts, range, "range", "A:B",
                     "one head: show positions A..B-1 only (keys, and the queries there)"),
    LP_OPT_INT_OF(render_opts, zoom, "zoom", "N", 1, 4,
                  "PNG: N device pixels per layout pixel (default 1; 2 for HiDPI)"),
    LP_OPT_STRING_OF(render_opts, masked_color, "masked-color", "HEX",
                     "colour of masked cells (default d9d9d9; f2e6d0 with gray)"),
    LP_OPT_SIZE_OF(render_opts, max_map_bytes, "max-map-bytes", "SIZE",
                   "--html, --all: map cells the viewer embeds, 1 byte each (default\n"
                   "64MiB); beyond it every map is max-pooled to the largest size that fits"),
};

static const lp_cli_alias render_aliases[] = {{"o", "output"}, {NULL, NULL}};

LP_CLI_COMMAND(render, run_render, render_options, 1, 1,
               "draw attention heatmaps, head statistics, leak plots and the HTML viewer",
               "DB [--run N] WHAT [options] -o OUT",
    .description =
        "Draw pictures of a trace database written by `loupe trace` / `loupe leak`. The format\n"
        "follows OUT's extension: .png, .svg or .pdf.\n"
        "\n"
        "WHAT is one of: --layer L --head H, --layer L --grid, --overview, --stats NAME, --leak,\n"
        "--importance, --logit-lens, --diff [--layer L --head H], --html OUT.html, --all DIR.\n"
        "\n"
        "--html writes one file that needs nothing else (no network, no other files): the head\n"
        "view (zoom, pan, hover), the text view, the overview, the statistics and the leak checks\n"
        "and predictions the run has.",
    .notes =
        "Masked cells (future keys, or outside the run's window) are drawn in the masked colour;\n"
        "a masked cell holding probability (a leak) keeps its colormap colour with a red outline.\n"
        "Exit status: 0 written, 2 bad usage or input (one line on stderr).",
    .aliases = render_aliases);

typedef enum what {
    WHAT_HEAD,
    WHAT_GRID,
    WHAT_OVERVIEW,
    WHAT_STATS,
    WHAT_LEAK,
    WHAT_IMPORTANCE,
    WHAT_LOGIT_LENS,
    WHAT_DIFF,      /* the JS matrix */
    WHAT_DIFF_HEAD, /* one head's difference map */
    WHAT_HTML,
    WHAT_ALL
} what;

/* ---- from options to a picture request -------------------------------------------------------- */

static bool parse_hex_rgb(const char *text, lp_rgb *out)
{
    if (text[0] == '#')
        text++;
    if (strlen(text) != 6)
        return false;
    unsigned v = 0;
    for (int i = 0; i < 6; i++) {
        char ch = text[i];
        unsigned d;
        if (ch >= '0' && ch <= '9')
            d = (unsigned)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            d = (unsigned)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F')
            d = (unsigned)(ch - 'A' + 10);
        else
            return false;
        v = v * 16 + d;
    }
    out->r = (uint8_t)(v >> 16);
    out->g = (uint8_t)(v >> 8);
    out->b = (uint8_t)v;
    return true;
}

/* "A:B" -> [A, B); "A:" -> [A, end). */
static bool parse_range(const char *text, int64_t *lo, int64_t *hi)
{
    const char *colon = strchr(text, ':');
    if (!colon || colon == text)
        return false;
    char first[32];
    size_t n = (size_t)(colon - text);
    if (n >= sizeof first)
        return false;
    memcpy(first, text, n);
    first[n] = '\0';
    if (!lp_parse_i64(first, lo) || *lo < 0)
        return false;
    if (colon[1] == '\0') {
        *hi = 0;
        return true;
    }
    return lp_parse_i64(colon + 1, hi) && *hi > *lo;
}

/* The drawing options from the command's: names, numbers with their own limits, colours. */
static int drawing_options(const render_opts *o, lp_render_options *opt)
{
    lp_render_options_default(opt);
    if (o->colormap && (opt->colormap = lp_colormap_from_name(o->colormap)) == LP_COLORMAP_COUNT)
        return lp_cli_usage_error(CMD, "--colormap '%s': want viridis, magma or gray", o->colormap);
    if (o->scale && (opt->scale = lp_scale_from_name(o->scale)) == LP_SCALE_COUNT)
        return lp_cli_usage_error(CMD, "--scale '%s': want linear, log or power", o->scale);
    const struct {
        const char *name;
        double value;
    } positive[] = {{"gamma", o->gamma}, {"floor", o->log_floor}, {"vmax", o->vmax}};
    for (size_t i = 0; i < sizeof positive / sizeof positive[0]; i++)
        if (!(positive[i].value > 0) && !isnan(positive[i].value))
            return lp_cli_usage_error(CMD, "--%s %g: want a number > 0", positive[i].name,
                                      positive[i].value);
    if (!(o->leak_threshold >= 0))
        return lp_cli_usage_error(CMD, "--leak-threshold %g: want a number >= 0",
                                  o->leak_threshold);
    opt->gamma = o->gamma;
    opt->log_floor = o->log_floor;
    opt->vmax = isnan(o->vmax) ? 0 : o->vmax;
    opt->leak_threshold = o->leak_threshold;
    opt->size = (int)o->size;
    opt->cell = (int)o->cell;
    opt->thumb = (int)o->thumb;
    opt->zoom = (int)o->zoom;
    if (o->range && !parse_range(o->range, &opt->range_lo, &opt->range_hi))
        return lp_cli_usage_error(CMD, "--range '%s': want A:B with 0 <= A < B", o->range);
    if (o->masked_color && !parse_hex_rgb(o->masked_color, &opt->masked_rgb))
        return lp_cli_usage_error(CMD, "--masked-color '%s': want RRGGBB hex", o->masked_color);
    opt->masked_rgb_set = o->masked_color != NULL;
    return LP_CLI_PARSED;
}

/* Exactly one thing to draw, with what it needs. --layer alone means one head (--head missing is
 * then the error); with --grid or --html it narrows those to the layer. */
static int choose_what(const render_opts *o, what *w)
{
    bool have_layer = o->layer >= 0, have_head = o->head >= 0;
    if (o->diff_id && !o->diff)
        return lp_cli_usage_error(CMD, "--diff-id N goes with --diff");
    if (o->diff && o->run)
        return lp_cli_usage_error(CMD, "--diff draws a stored diff, not a run: drop --run (name "
                                       "the diff with --diff-id N)");
    if (o->diff && have_layer != have_head)
        return lp_cli_usage_error(CMD, "--diff with one head needs both --layer L and --head H");
    int n_other = o->grid + o->overview + (o->stats != NULL) + o->leak + o->importance +
                  o->logit_lens + o->diff + (o->html != NULL) + (o->all != NULL);
    if (o->diff && have_head) /* the head's difference map */
        have_layer = have_head = false;
    bool head = have_head || (have_layer && n_other == 0);
    if (head + n_other != 1)
        return lp_cli_usage_error(CMD, head + n_other == 0
                                           ? "nothing to draw: give --layer L --head H, --layer "
                                             "L --grid, --overview, --stats NAME, --leak, "
                                             "--importance, --logit-lens, --diff, --html "
                                             "OUT.html or --all DIR"
                                           : "give only one of --head, --grid, --overview, "
                                             "--stats, --leak, --importance, --logit-lens, "
                                             "--diff, --html, --all");
    *w = head          ? WHAT_HEAD
         : o->grid     ? WHAT_GRID
         : o->overview ? WHAT_OVERVIEW
         : o->stats    ? WHAT_STATS
         : o->leak     ? WHAT_LEAK
         : o->importance ? WHAT_IMPORTANCE
         : o->logit_lens ? WHAT_LOGIT_LENS
         : o->diff     ? (o->head >= 0 ? WHAT_DIFF_HEAD : WHAT_DIFF)
         : o->html     ? WHAT_HTML
                       : WHAT_ALL;
    if (*w == WHAT_HEAD && (!have_layer || !have_head))
        return lp_cli_usage_error(CMD, "one head needs both --layer L and --head H");
    if (*w == WHAT_GRID && !have_layer)
        return lp_cli_usage_error(CMD, "--grid needs --layer L");
    if (have_layer && *w != WHAT_HEAD && *w != WHAT_GRID && *w != WHAT_HTML)
        return lp_cli_usage_error(CMD, "--layer goes with --head, --grid or --html only");
    if (o->range && *w != WHAT_HEAD)
        return lp_cli_usage_error(CMD, "--range goes with --layer L --head H only");
    if (o->dataset && *w != WHAT_STATS)
        return lp_cli_usage_error(CMD, "--dataset NAME goes with --stats only");
    if (o->dataset && o->run)
        return lp_cli_usage_error(CMD, "--dataset NAME draws all its runs: drop --run");
    if (o->max_map_bytes != 0 && *w != WHAT_HTML && *w != WHAT_ALL)
        return lp_cli_usage_error(CMD, "--max-map-bytes goes with --html or --all only");
    return LP_CLI_PARSED;
}

/* Where the picture goes: its own files for --all, else -o OUT with a known extension. */
static int check_output(const render_opts *o, what w)
{
    if (w == WHAT_ALL || w == WHAT_HTML)
        return o->output ? lp_cli_usage_error(CMD, "%s writes its own file%s: drop -o",
                                              w == WHAT_ALL ? "--all DIR" : "--html OUT.html",
                                              w == WHAT_ALL ? "s" : "")
                         : LP_CLI_PARSED;
    if (!o->output)
        return lp_cli_usage_error(CMD, "no output: give -o OUT.png|.svg|.pdf");
    if (lp_image_format_from_path(o->output) == LP_IMAGE_COUNT)
        return lp_cli_usage_error(CMD,
                                  "%s: unknown picture format (the extension must be .png, .svg "
                                  "or .pdf)",
                                  o->output);
    return LP_CLI_PARSED;
}

static int parse(int argc, char **argv, render_opts *o, const char **db_path, what *w,
                 lp_render_options *opt, lp_head_stat *stat)
{
    /* the drawing defaults of lp_render_options_default; vmax NAN: not given (0 = automatic) */
    *o = (render_opts){.layer = -1, .head = -1, .gamma = 0.5, .log_floor = 1e-4,
                       .vmax = (double)NAN, .size = 800, .zoom = 1};
    const char *pos[LP_CLI_MAX_POSITIONAL];
    int rc = lp_cli_parse(&render_spec, argc, argv, o, pos, NULL);
    if (rc == LP_CLI_PARSED)
        rc = choose_what(o, w);
    if (rc == LP_CLI_PARSED)
        rc = drawing_options(o, opt);
    if (rc == LP_CLI_PARSED)
        rc = check_output(o, *w);
    if (rc != LP_CLI_PARSED)
        return rc;
    *db_path = pos[0];
    *stat = *w == WHAT_STATS ? lp_head_stat_from_name(o->stats) : LP_STAT_COUNT;
    if (*w == WHAT_STATS && *stat == LP_STAT_COUNT)
        return lp_cli_usage_error(CMD,
                                  "--stats '%s': unknown statistic (want entropy, max_prob, sink, "
                                  "prev_token, self, distance, local_frac, output_norm, keys50, "
                                  "keys90, keys99, low_mass, learned_sink)",
                                  o->stats);
    return LP_CLI_PARSED;
}

/* ---- the command ------------------------------------------------------------------------------ */

/* The run to draw: the one named, else --leak's latest leak run; pictures of maps and statistics
 * prefer trace runs, and a database holding only other kinds falls back to its latest complete
 * run. */
static lp_status pick_run(lp_store *db, int64_t run_id, what w, lp_store_run *run,
                          bool *incomplete, lp_error *err)
{
    if (w == WHAT_LEAK && run_id == 0) {
        lp_status st = lp_store_latest_leak_run(db, &run_id, err);
        if (st != LP_OK)
            return st;
    }
    if (w == WHAT_IMPORTANCE && run_id == 0) {
        lp_status st = lp_store_latest_run_of_kind(db, "ablate", &run_id, err);
        if (st != LP_OK)
            return st;
    }
    lp_status st = lp_store_read_run(db, run_id, w == WHAT_LEAK ? NULL : "trace", run, incomplete,
                                     err);
    if (st == LP_ERR_NOT_FOUND && run_id == 0 && w != WHAT_LEAK)
        st = lp_store_read_run(db, 0, NULL, run, incomplete, err);
    return st;
}

static lp_status draw(lp_store *db, const char *db_path, const lp_store_run *run,
                      const render_opts *o, what w,
                      lp_head_stat stat, const lp_render_options *opt, int64_t *n_files,
                      lp_viewer_report *page, lp_error *err)
{
    lp_viewer_options vopt;
    lp_viewer_options_default(&vopt);
    if (o->max_map_bytes)
        vopt.max_map_bytes = o->max_map_bytes;
    vopt.layer = o->layer;
    vopt.db_path = db_path;
    switch (w) {
    case WHAT_HEAD: return lp_render_head(db, run, o->layer, o->head, opt, o->output, err);
    case WHAT_GRID: return lp_render_layer_grid(db, run, o->layer, opt, o->output, err);
    case WHAT_OVERVIEW: return lp_render_overview(db, run, opt, o->output, err);
    case WHAT_STATS: return lp_render_stat_matrix(db, run, stat, opt, o->output, err);
    case WHAT_LEAK: return lp_render_leak_plot(db, run, opt, o->output, err);
    case WHAT_IMPORTANCE: return lp_render_importance(db, run, opt, o->output, err);
    case WHAT_LOGIT_LENS: return lp_render_logit_lens(db, run, opt, o->output, err);
    case WHAT_DIFF: return lp_render_diff_matrix(db, o->diff_id, opt, o->output, err);
    case WHAT_DIFF_HEAD:
        return lp_render_diff_head(db, db_path, o->diff_id, o->layer, o->head, opt, o->output,
                                   err);
    case WHAT_HTML: return lp_render_viewer(db, run, opt, &vopt, o->html, page, err);
    default: return lp_render_gallery(db, run, opt, &vopt, o->all, n_files, err);
    }
}

static int run_render(int argc, char **argv)
{
    render_opts o;
    const char *db_path;
    what w = WHAT_ALL;
    lp_render_options opt;
    lp_head_stat stat;
    int rc = parse(argc, argv, &o, &db_path, &w, &opt, &stat);
    if (rc != LP_CLI_PARSED)
        return rc;
    lp_error err = {0};
    lp_store *db;
    lp_store_run run;
    bool incomplete = false;
    if (lp_store_open_read(db_path, &db, &err) != LP_OK)
        return lp_cli_fail(CMD, &err);
    if (o.dataset) {
        lp_status ds = lp_render_dataset_stat(db, o.dataset, stat, &opt, o.output, &err);
        lp_store_close(db);
        if (ds != LP_OK)
            return lp_cli_fail(CMD, &err);
        printf("wrote %s\n", o.output);
        return LP_EXIT_OK;
    }
    if (w == WHAT_DIFF || w == WHAT_DIFF_HEAD) { /* a diff is not a run */
        lp_status ds = draw(db, db_path, NULL, &o, w, stat, &opt, NULL, NULL, &err);
        lp_store_close(db);
        if (ds != LP_OK)
            return lp_cli_fail(CMD, &err);
        printf("wrote %s\n", o.output);
        return LP_EXIT_OK;
    }
    if (pick_run(db, o.run, w, &run, &incomplete, &err) != LP_OK) {
        lp_store_close(db);
        return lp_cli_fail(CMD, &err);
    }
    if (incomplete)
        fprintf(stderr, "loupe render: warning: run %lld is '%s', not complete: drawing what it "
                        "holds\n",
                (long long)run.id, run.status);
    int64_t n_files = 0;
    lp_viewer_report page = {0};
    lp_status s = draw(db, db_path, &run, &o, w, stat, &opt, &n_files, &page, &err);
    lp_store_run_clear(&run);
    lp_store_close(db);
    if (s != LP_OK)
        return lp_cli_fail(CMD, &err);
    char size[32];
    if (w == WHAT_ALL)
        printf("wrote %lld pictures, %s/viewer.html and %s/index.html\n", (long long)n_files,
               o.all, o.all);
    else if (w == WHAT_HTML)
        printf("wrote %s: %lld maps%s, %llu embedded bytes, %s\n", o.html, (long long)page.n_maps,
               page.max_block > 1 ? " (max-pooled to fit --max-map-bytes)" : "",
               (unsigned long long)page.map_cells, lp_format_bytes(page.file_bytes, size, sizeof size));
    else
        printf("wrote %s\n", o.output);
    return LP_EXIT_OK;
}
