/* `loupe render`: pictures of a trace database (argument parsing; the drawing is in render/). */
#include <stdio.h>
#include <string.h>

#include "core/cli/cli.h"
#include "render/render.h"

#define RENDER_USAGE                                                                              \
    "usage: loupe render DB [--run N] WHAT [OPTIONS] -o OUT\n"                                    \
    "\n"                                                                                          \
    "Draw pictures of a trace database written by `loupe trace` / `loupe leak`. The format\n"    \
    "follows OUT's extension: .png, .svg or .pdf.\n"                                             \
    "\n"                                                                                          \
    "WHAT (one of):\n"                                                                            \
    "  --layer L --head H   one head's attention map: queries down, keys across, token labels\n" \
    "  --layer L --grid     all heads of layer L as small multiples with a shared scale\n"       \
    "  --overview           every layer x head as thumbnails on one sheet\n"                     \
    "  --stats NAME         layers x heads matrix of a head statistic, values written in:\n"     \
    "                       entropy, max_prob, sink, prev_token, self, distance, local_frac,\n"  \
    "                       output_norm\n"                                                        \
    "  --leak               per-layer max |difference| of a `loupe leak` run (log axis)\n"       \
    "  --all DIR            every picture of the run into DIR, plus DIR/index.html\n"            \
    "\n"                                                                                          \
    "OPTIONS:\n"                                                                                  \
    "  -o, --output OUT     the picture to write (not with --all)\n"                             \
    "  --run N              run id (default: the latest complete trace run; --leak: the latest\n"   \
    "                       complete run with leak checks)\n" \
    "  --colormap NAME      viridis (default), magma, gray\n"                                    \
    "  --scale NAME         linear (default, [0, max]), log (floor --floor), power (--gamma)\n"  \
    "  --gamma G            power-scale exponent (default 0.5)\n"                               \
    "  --floor F            log-scale floor (default 1e-4)\n"                                    \
    "  --vmax V             top of the scale (default: the largest value drawn)\n"              \
    "  --leak-threshold T   masked cells above T are drawn as leaks (default 0)\n"              \
    "  --size PX            largest side of a single map (default 800); longer maps are\n"       \
    "                       max-pooled in blocks\n"                                               \
    "  --cell PX            pixels per cell, lowered to fit --size (default: the largest\n"      \
    "                       that fits, at most 24)\n"                                           \
    "  --thumb PX           panel side for --grid (default 160) and --overview (default 64)\n"   \
    "  --range A:B          one head: show positions A..B-1 only (keys, and the queries there)\n" \
    "  --zoom N             PNG: N device pixels per layout pixel (1..4, default 1; 2 for HiDPI)\n" \
    "  --masked-color HEX   colour of masked cells (default d9d9d9; f2e6d0 with gray)\n"         \
    "\n"                                                                                          \
    "Masked cells (future keys, or outside the run's window) are drawn in the masked colour;\n"  \
    "a masked cell holding probability (a leak) keeps its colormap colour with a red outline.\n" \
    "Exit status: 0 written, 2 bad usage or input (one line on stderr).\n"

static const char *const CMD = "render";

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

typedef enum what { WHAT_NONE, WHAT_HEAD, WHAT_GRID, WHAT_OVERVIEW, WHAT_STATS, WHAT_LEAK, WHAT_ALL } what;

static int parse_int_option(const char *name, const char *value, int64_t lo, int64_t hi,
                            int64_t *out)
{
    if (!lp_parse_i64(value, out) || *out < lo || *out > hi)
        return lp_cli_usage_error(CMD, "%s '%s': want an integer in [%lld, %lld]", name, value,
                                  (long long)lo, (long long)hi);
    return 0;
}

static int parse_positive(const char *name, const char *value, double *out)
{
    if (!lp_parse_f64(value, out) || !(*out > 0))
        return lp_cli_usage_error(CMD, "%s '%s': want a number > 0", name, value);
    return 0;
}

static int run_render(int argc, char **argv)
{
    const char *db_path = NULL, *out = NULL, *all_dir = NULL, *stat_name = NULL;
    int64_t run_id = 0, layer = -1, head = -1;
    bool have_layer = false, have_head = false, grid = false, overview = false, leak = false;
    lp_render_options opt;
    lp_render_options_default(&opt);
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        int64_t n;
        double d;
        if ((r = lp_cli_option(CMD, argc, argv, &i, "--run", &v)) != 0) {
            if (r < 0 || parse_int_option("--run", v, 1, INT64_MAX, &run_id))
                return LP_EXIT_USAGE;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--layer", &v)) != 0) {
            if (r < 0 || parse_int_option("--layer", v, 0, INT64_MAX, &layer))
                return LP_EXIT_USAGE;
            have_layer = true;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--head", &v)) != 0) {
            if (r < 0 || parse_int_option("--head", v, 0, INT64_MAX, &head))
                return LP_EXIT_USAGE;
            have_head = true;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--output", &v)) != 0 ||
                   (r = lp_cli_option(CMD, argc, argv, &i, "-o", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            out = v;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--all", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            all_dir = v;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--stats", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            stat_name = v;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--colormap", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            opt.colormap = lp_colormap_from_name(v);
            if (opt.colormap == LP_COLORMAP_COUNT)
                return lp_cli_usage_error(CMD, "--colormap '%s': want viridis, magma or gray", v);
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--scale", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            opt.scale = lp_scale_from_name(v);
            if (opt.scale == LP_SCALE_COUNT)
                return lp_cli_usage_error(CMD, "--scale '%s': want linear, log or power", v);
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--gamma", &v)) != 0) {
            if (r < 0 || parse_positive("--gamma", v, &opt.gamma))
                return LP_EXIT_USAGE;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--floor", &v)) != 0) {
            if (r < 0 || parse_positive("--floor", v, &opt.log_floor))
                return LP_EXIT_USAGE;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--vmax", &v)) != 0) {
            if (r < 0 || parse_positive("--vmax", v, &opt.vmax))
                return LP_EXIT_USAGE;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--leak-threshold", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            if (!lp_parse_f64(v, &d) || d < 0)
                return lp_cli_usage_error(CMD, "--leak-threshold '%s': want a number >= 0", v);
            opt.leak_threshold = d;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--size", &v)) != 0) {
            if (r < 0 || parse_int_option("--size", v, 16, 4096, &n))
                return LP_EXIT_USAGE;
            opt.size = (int)n;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--cell", &v)) != 0) {
            if (r < 0 || parse_int_option("--cell", v, 1, 256, &n))
                return LP_EXIT_USAGE;
            opt.cell = (int)n;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--thumb", &v)) != 0) {
            if (r < 0 || parse_int_option("--thumb", v, 8, 1024, &n))
                return LP_EXIT_USAGE;
            opt.thumb = (int)n;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--zoom", &v)) != 0) {
            if (r < 0 || parse_int_option("--zoom", v, 1, 4, &n))
                return LP_EXIT_USAGE;
            opt.zoom = (int)n;
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--range", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            if (!parse_range(v, &opt.range_lo, &opt.range_hi))
                return lp_cli_usage_error(CMD, "--range '%s': want A:B with 0 <= A < B", v);
        } else if ((r = lp_cli_option(CMD, argc, argv, &i, "--masked-color", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            if (!parse_hex_rgb(v, &opt.masked_rgb))
                return lp_cli_usage_error(CMD, "--masked-color '%s': want RRGGBB hex", v);
            opt.masked_rgb_set = true;
        } else if (lp_cli_flag(argv[i], "--grid")) {
            grid = true;
        } else if (lp_cli_flag(argv[i], "--overview")) {
            overview = true;
        } else if (lp_cli_flag(argv[i], "--leak")) {
            leak = true;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return lp_cli_usage_error(CMD, "unknown option '%s' (see loupe help render)", argv[i]);
        } else if (!db_path) {
            db_path = argv[i];
        } else {
            return lp_cli_usage_error(CMD, "unexpected argument '%s' (one DB only)", argv[i]);
        }
    }
    if (!db_path)
        return lp_cli_usage_error(CMD, "no database given (usage: loupe render DB ... -o OUT)");

    /* exactly one thing to draw */
    what w = WHAT_NONE;
    int n_what = (have_head || (have_layer && !grid && !overview && !stat_name && !leak &&
                                !all_dir)) +
                 grid + overview + (stat_name != NULL) + leak + (all_dir != NULL);
    if (n_what != 1)
        return lp_cli_usage_error(CMD, n_what == 0
                                           ? "nothing to draw: give --layer L --head H, --layer "
                                             "L --grid, --overview, --stats NAME, --leak or "
                                             "--all DIR"
                                           : "give only one of --head, --grid, --overview, "
                                             "--stats, --leak, --all");
    if (have_head || (have_layer && !grid))
        w = WHAT_HEAD;
    else if (grid)
        w = WHAT_GRID;
    else if (overview)
        w = WHAT_OVERVIEW;
    else if (stat_name)
        w = WHAT_STATS;
    else if (leak)
        w = WHAT_LEAK;
    else
        w = WHAT_ALL;
    if (w == WHAT_HEAD && (!have_layer || !have_head))
        return lp_cli_usage_error(CMD, "one head needs both --layer L and --head H");
    if (w == WHAT_GRID && !have_layer)
        return lp_cli_usage_error(CMD, "--grid needs --layer L");
    if (have_layer && w != WHAT_HEAD && w != WHAT_GRID)
        return lp_cli_usage_error(CMD, "--layer goes with --head or --grid only");
    lp_head_stat stat = LP_STAT_COUNT;
    if (w == WHAT_STATS) {
        stat = lp_head_stat_from_name(stat_name);
        if (stat == LP_STAT_COUNT)
            return lp_cli_usage_error(CMD,
                                      "--stats '%s': unknown statistic (want entropy, max_prob, "
                                      "sink, prev_token, self, distance, local_frac, "
                                      "output_norm)",
                                      stat_name);
    }
    if ((opt.range_lo != 0 || opt.range_hi != 0) && w != WHAT_HEAD)
        return lp_cli_usage_error(CMD, "--range goes with --layer L --head H only");
    if (w == WHAT_ALL && out)
        return lp_cli_usage_error(CMD, "--all DIR writes its own files: drop -o");
    if (w != WHAT_ALL) {
        if (!out)
            return lp_cli_usage_error(CMD, "no output: give -o OUT.png|.svg|.pdf");
        if (lp_image_format_from_path(out) == LP_IMAGE_COUNT)
            return lp_cli_usage_error(CMD,
                                      "%s: unknown picture format (the extension must be .png, "
                                      ".svg or .pdf)",
                                      out);
    }

    lp_error err = {0};
    lp_store *db;
    if (lp_store_open_read(db_path, &db, &err) != LP_OK)
        return lp_cli_fail(CMD, &err);
    lp_store_run run;
    bool incomplete = false;
    if (w == WHAT_LEAK && run_id == 0 && lp_store_latest_leak_run(db, &run_id, &err) != LP_OK) {
        lp_store_close(db);
        return lp_cli_fail(CMD, &err);
    }
    /* Pictures of maps and statistics prefer trace runs; a database holding only other kinds
     * of runs falls back to its latest complete run. */
    lp_status picked = lp_store_read_run(db, run_id, w == WHAT_LEAK ? NULL : "trace",
                                                  &run, &incomplete, &err);
    if (picked == LP_ERR_NOT_FOUND && run_id == 0 && w != WHAT_LEAK)
        picked = lp_store_read_run(db, 0, NULL, &run, &incomplete, &err);
    if (picked != LP_OK) {
        lp_store_close(db);
        return lp_cli_fail(CMD, &err);
    }
    if (incomplete)
        fprintf(stderr, "loupe render: warning: run %lld is '%s', not complete: drawing what it "
                        "holds\n",
                (long long)run.id, run.status);
    lp_status s = LP_OK;
    int64_t n_files = 0;
    switch (w) {
    case WHAT_HEAD: s = lp_render_head(db, &run, layer, head, &opt, out, &err); break;
    case WHAT_GRID: s = lp_render_layer_grid(db, &run, layer, &opt, out, &err); break;
    case WHAT_OVERVIEW: s = lp_render_overview(db, &run, &opt, out, &err); break;
    case WHAT_STATS: s = lp_render_stat_matrix(db, &run, stat, &opt, out, &err); break;
    case WHAT_LEAK: s = lp_render_leak_plot(db, &run, &opt, out, &err); break;
    case WHAT_ALL: s = lp_render_gallery(db, &run, &opt, all_dir, &n_files, &err); break;
    default: break;
    }
    lp_store_run_clear(&run);
    lp_store_close(db);
    if (s != LP_OK)
        return lp_cli_fail(CMD, &err);
    if (w == WHAT_ALL)
        printf("wrote %lld pictures and %s/index.html\n", (long long)n_files, all_dir);
    else
        printf("wrote %s\n", out);
    return LP_EXIT_OK;
}

static const lp_cli_spec render_spec = {
    .name = "render",
    .summary = "draw attention heatmaps, head statistics and leak plots",
    .legacy_usage = RENDER_USAGE,
};

const lp_command lp_command_render = {&render_spec, run_render};
