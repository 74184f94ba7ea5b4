/* Unit tests of render/: colormaps and scales, label cleaning, database reading with planted
 * maps, pixels of rendered PNGs read back, SVG text, max-pooling of a 4096-token map, errors. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <cairo.h>
#include <math.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "render_test_db.h"
#include "trace/analysis/analysis.h"

/* 3 layers x 4 heads of 6 tokens, every map and statistic stored, and perturbation checks of
 * which layer 2 and the logits failed. */
static void multi_db(const char *db_path)
{
    new_db(db_path);
    const int64_t n_l = 3, n_h = 4, n = 6;
    add_run(db_path, 1, "complete", "trace", n, n_l, n_h, NULL);
    float v[36];
    causal_uniform(v, n, n);
    for (int64_t l = 0; l < n_l; l++)
        for (int64_t h = 0; h < n_h; h++)
            add_map(db_path, 1, l, h, n, n, v, true);
    add_stats(db_path, 1, n_l, n_h);
    lp_test_sql_exec(db_path, "INSERT INTO leak_checks (run_id, check_name, passed, layer, position, "
                  "max_abs_diff, detail) VALUES (1, 'perturbation', 1, 0, 3, 0.0, 'ok'),"
                  "(1, 'perturbation', 1, 1, 3, 1e-7, 'ok'),"
                  "(1, 'perturbation', 0, 2, 3, 0.25, 'leak'),"
                  "(1, 'perturbation', 0, -1, 3, 0.5, 'leak')");
}

/* ---- reading pictures back ---- */

typedef struct png_image {
    cairo_surface_t *surface;
    int width, height;
} png_image;

static png_image load_png(const char *path)
{
    png_image img;
    img.surface = cairo_image_surface_create_from_png(path);
    assert_int_equal(cairo_surface_status(img.surface), CAIRO_STATUS_SUCCESS);
    img.width = cairo_image_surface_get_width(img.surface);
    img.height = cairo_image_surface_get_height(img.surface);
    return img;
}

static lp_rgb pixel(const png_image *img, int x, int y)
{
    assert_true(x >= 0 && x < img->width && y >= 0 && y < img->height);
    const unsigned char *data = cairo_image_surface_get_data(img->surface);
    int stride = cairo_image_surface_get_stride(img->surface);
    uint32_t px;
    memcpy(&px, data + (size_t)y * (size_t)stride + 4 * (size_t)x, 4);
    return (lp_rgb){(uint8_t)(px >> 16), (uint8_t)(px >> 8), (uint8_t)px};
}

#define assert_rgb_equal(got, want)                                                       \
    do {                                                                                  \
        lp_rgb g_ = (got), w_ = (want);                                                   \
        if (g_.r != w_.r || g_.g != w_.g || g_.b != w_.b)                                 \
            fail_msg("colour #%02x%02x%02x, want #%02x%02x%02x", g_.r, g_.g, g_.b, w_.r, \
                     w_.g, w_.b);                                                         \
    } while (0)

/* Centre pixel of map cell (q, k) in a single-head picture. */
static lp_rgb cell_pixel(const png_image *img, const lp_heatmap_layout *lay, int64_t q, int64_t k)
{
    return pixel(img, lay->map_x + (int)(k * lay->cell) + lay->cell / 2,
                 lay->map_y + (int)(q * lay->cell_h) + lay->cell_h / 2);
}

/* One run of 1 layer x 2 heads over 4 tokens: head 0 with planted values, head 1 leaking. */
static void planted_db(const char *db_path)
{
    new_db(db_path);
    add_run(db_path, 1, "complete", "trace", 4, 1, 2, NULL);
    static const char *const pieces[] = {"<s>", " the", " cat", "\n"};
    add_tokens(db_path, 1, pieces, 4);
    /* head 0: row 3 holds 1, 0.5, 0 at keys 0..2; row 0 at key 0 holds 1 */
    float v[16] = {0};
    v[0 * 4 + 0] = 1.0f;
    v[3 * 4 + 0] = 1.0f;
    v[3 * 4 + 1] = 0.5f;
    v[3 * 4 + 2] = 0.0f;
    add_map(db_path, 1, 0, 0, 4, 4, v, false);
    /* head 1: a leak above the diagonal at (0, 2) */
    float w[16] = {0};
    w[0] = 1.0f;
    w[0 * 4 + 2] = 0.5f;
    add_map(db_path, 1, 0, 1, 4, 4, w, true);
}

/* The leak cell (head 1, query 0, key 2) keeps its colour inside a red outline, until a
 * threshold above it makes it an ordinary masked cell. */
static void check_leak_cell(lp_store *db, const lp_store_run *run, const lp_heatmap_layout *lay,
                            const char *png)
{
    lp_error err = {0};
    lp_render_options opt;
    lp_render_options_default(&opt);
    opt.cell = 60;
    lp_rgb masked = lp_render_masked_rgb(&opt);
    assert_int_equal(lp_render_head(db, run, 0, 1, &opt, png, &err), LP_OK);
    png_image img = load_png(png);
    lp_rgb leak = cell_pixel(&img, lay, 0, 2);
    assert_rgb_equal(leak, lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 0.5));
    assert_false(leak.r == masked.r && leak.g == masked.g && leak.b == masked.b);
    assert_rgb_equal(pixel(&img, lay->map_x + 2 * lay->cell, lay->map_y + lay->cell / 2),
                     ((lp_rgb){0xe8, 0x11, 0x2d}));
    assert_rgb_equal(cell_pixel(&img, lay, 0, 3), masked); /* its zero neighbour stays grey */
    cairo_surface_destroy(img.surface);
    opt.leak_threshold = 0.6;
    assert_int_equal(lp_render_head(db, run, 0, 1, &opt, png, &err), LP_OK);
    img = load_png(png);
    assert_rgb_equal(cell_pixel(&img, lay, 0, 2), masked);
    cairo_surface_destroy(img.surface);
}

/* ---- tests ---- */

static void test_colormaps_and_scales(void **state)
{
    (void)state;
    /* matplotlib's published end points: viridis #440154 .. #fde725, magma #000004 .. #fcfdbf */
    assert_rgb_equal(lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 0), ((lp_rgb){0x44, 0x01, 0x54}));
    assert_rgb_equal(lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 1), ((lp_rgb){0xfd, 0xe7, 0x25}));
    /* t = 0.5 is entry floor(0.5 * 256) = 128: (0.127568, 0.566949, 0.550556) -> #21918c */
    assert_rgb_equal(lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 0.5), ((lp_rgb){0x21, 0x91, 0x8c}));
    assert_rgb_equal(lp_colormap_rgb(LP_COLORMAP_MAGMA, 0), ((lp_rgb){0x00, 0x00, 0x04}));
    assert_rgb_equal(lp_colormap_rgb(LP_COLORMAP_MAGMA, 1), ((lp_rgb){0xfc, 0xfd, 0xbf}));
    assert_rgb_equal(lp_colormap_rgb(LP_COLORMAP_GRAY, 0.5), ((lp_rgb){128, 128, 128}));
    assert_rgb_equal(lp_colormap_rgb(LP_COLORMAP_VIRIDIS, (double)NAN), ((lp_rgb){0x44, 0x01, 0x54}));
    assert_rgb_equal(lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 7), ((lp_rgb){0xfd, 0xe7, 0x25}));
    /* viridis gets brighter monotonically (it is perceptually uniform in lightness) */
    double prev = -1;
    for (int i = 0; i < 256; i++) {
        lp_rgb c = lp_colormap_rgb(LP_COLORMAP_VIRIDIS, (i + 0.5) / 256);
        double y = 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b;
        assert_true(y >= prev - 1.0);
        prev = y;
    }

    lp_render_options opt;
    lp_render_options_default(&opt);
    assert_true(fabs(lp_scale_apply(&opt, 1.0, 0.25) - 0.25) < 1e-12);
    assert_true(fabs(lp_scale_apply(&opt, 0.5, 0.25) - 0.5) < 1e-12);
    opt.scale = LP_SCALE_LOG; /* floor 1e-4 */
    assert_true(fabs(lp_scale_apply(&opt, 1.0, 1e-2) - 0.5) < 1e-12);
    assert_true(lp_scale_apply(&opt, 1.0, 1e-9) == 0);
    assert_true(lp_scale_apply(&opt, 1.0, 0) == 0);
    opt.scale = LP_SCALE_POWER;
    opt.gamma = 0.5;
    assert_true(fabs(lp_scale_apply(&opt, 1.0, 0.25) - 0.5) < 1e-12);

    assert_int_equal(lp_colormap_from_name("MAGMA"), LP_COLORMAP_MAGMA);
    assert_int_equal(lp_colormap_from_name("jet"), LP_COLORMAP_COUNT);
    assert_int_equal(lp_scale_from_name("log"), LP_SCALE_LOG);
    assert_int_equal(lp_head_stat_from_name("prev_token"), LP_STAT_PREV_TOKEN);
    assert_int_equal(lp_head_stat_from_name("wisdom"), LP_STAT_COUNT);
    assert_int_equal(lp_image_format_from_path("a/b.PNG"), LP_IMAGE_PNG);
    assert_int_equal(lp_image_format_from_path("x.svg"), LP_IMAGE_SVG);
    assert_int_equal(lp_image_format_from_path("x.pdf"), LP_IMAGE_PDF);
    assert_int_equal(lp_image_format_from_path("x.jpg"), LP_IMAGE_COUNT);
    assert_int_equal(lp_image_format_from_path("dir.png/x"), LP_IMAGE_COUNT);
    /* the masked colour is not a colour of the gray ramp when the map is gray */
    lp_render_options_default(&opt);
    assert_rgb_equal(lp_render_masked_rgb(&opt), ((lp_rgb){0xd9, 0xd9, 0xd9}));
    opt.colormap = LP_COLORMAP_GRAY;
    lp_rgb m = lp_render_masked_rgb(&opt);
    assert_false(m.r == m.g && m.g == m.b);
}

static void test_visible_piece(void **state)
{
    (void)state;
    struct {
        const char *in;
        int max_chars;
        const char *want;
    } cases[] = {
        {" the", 24, "\xe2\x90\xa3the"},                     /* space -> open box */
        {"\xe2\x96\x81the", 24, "\xe2\x90\xa3the"},         /* sentencepiece U+2581 too */
        {"a\nb", 24, "a\xe2\x8f\x8e" "b"},                   /* newline -> return symbol */
        {"\t", 24, "\xe2\x87\xa5"},
        {"\x01", 24, "\xe2\x90\x81"},                        /* control picture */
        {"\xff" "a", 24, "\xef\xbf\xbd" "a"},                /* invalid byte -> U+FFFD */
        {"\xe4\xb8\x96\xe7\x95\x8c", 24, "\xe4\xb8\x96\xe7\x95\x8c"}, /* CJK kept */
        {"abcdef", 3, "abc\xe2\x80\xa6"},                    /* cut with an ellipsis */
        {"", 24, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = lp_render_visible_piece(cases[i].in, cases[i].max_chars);
        assert_non_null(got);
        if (strcmp(got, cases[i].want) != 0)
            fail_msg("case %zu: got '%s', want '%s'", i, got, cases[i].want);
        free(got);
    }
}

static void test_layout_sizes(void **state)
{
    (void)state;
    lp_render_options opt;
    lp_render_options_default(&opt);
    lp_heatmap_layout lay;
    lp_error err = {0};
    opt.cell = 20;
    assert_int_equal(lp_render_heatmap_layout(16, 16, &opt, &lay, &err), LP_OK);
    assert_int_equal(lay.block, 1);
    assert_int_equal(lay.cell, 20);
    assert_int_equal(lay.cell_h, 20);
    assert_int_equal(lay.width, LP_RENDER_MARGIN_LEFT + 320 + LP_RENDER_MARGIN_RIGHT);
    assert_int_equal(lay.height, LP_RENDER_MARGIN_TOP + 320 + LP_RENDER_MARGIN_BOTTOM);
    /* a small map keeps the minimum map area so title and colorbar fit */
    assert_int_equal(lp_render_heatmap_layout(4, 4, &opt, &lay, &err), LP_OK);
    assert_int_equal(lay.width, LP_RENDER_MARGIN_LEFT + LP_RENDER_MIN_MAP + LP_RENDER_MARGIN_RIGHT);
    /* --cell larger than --size allows shrinks to fit */
    opt.size = 100;
    assert_int_equal(lp_render_heatmap_layout(16, 16, &opt, &lay, &err), LP_OK);
    assert_int_equal(lay.cell, 6);
    /* longer than --size: pooled */
    opt.size = 512;
    opt.cell = 0;
    assert_int_equal(lp_render_heatmap_layout(4096, 4096, &opt, &lay, &err), LP_OK);
    assert_int_equal(lay.block, 8);
    assert_int_equal(lay.rows, 512);
    assert_int_equal(lay.cell, 1);
    assert_int_equal(lp_render_heatmap_layout(1000, 1000, &opt, &lay, &err), LP_OK);
    assert_int_equal(lay.block, 2);
    assert_int_equal(lay.rows, 500);
    /* decode-style map: fewer queries than keys */
    opt.size = 800;
    assert_int_equal(lp_render_heatmap_layout(3, 40, &opt, &lay, &err), LP_OK);
    assert_int_equal(lay.cols, 40);
    assert_int_equal(lay.rows, 3);
    assert_int_equal(lay.cell, 20);
    assert_int_equal(lay.cell_h, 20);
    /* one query over 4096 keys: pooled 6 wide, rows stretched from 1 px to 24 */
    assert_int_equal(lp_render_heatmap_layout(1, 4096, &opt, &lay, &err), LP_OK);
    assert_int_equal(lay.block, 6);
    assert_int_equal(lay.cols, 683);
    assert_int_equal(lay.cell, 1);
    assert_int_equal(lay.cell_h, 24);
    assert_int_equal(lay.height, LP_RENDER_MARGIN_TOP + LP_RENDER_MIN_MAP + LP_RENDER_MARGIN_BOTTOM);
    opt.size = 8;
    assert_int_equal(lp_render_heatmap_layout(3, 3, &opt, &lay, &err), LP_ERR_RANGE);
    assert_non_null(strstr(err.msg, "--size 8"));
}

/* Planted values at known cells give the colormap's colours there; masked cells the masked
 * colour; a leak keeps its colour and gets the red outline; the PNG has the expected size. */
static void test_planted_map_pixels(void **state)
{
    (void)state;
    scratch files;
    scratch_init(&files, "planted");
    planted_db(files.db);
    lp_error err = {0};
    lp_store_run run;
    lp_store *db = open_run(files.db, 0, &run);
    assert_string_equal(run.status, "complete");
    assert_int_equal(run.id, 1);
    assert_string_equal(run.model, "tiny-test");

    lp_render_options opt;
    lp_render_options_default(&opt);
    opt.cell = 60;
    lp_heatmap_layout lay;
    assert_int_equal(lp_render_heatmap_layout(4, 4, &opt, &lay, &err), LP_OK);
    assert_int_equal(lp_render_head(db, &run, 0, 0, &opt, files.png, &err), LP_OK);
    png_image img = load_png(files.png);
    assert_int_equal(img.width, lay.width);
    assert_int_equal(img.height, lay.height);
    assert_int_equal(img.width, LP_RENDER_MARGIN_LEFT + 240 + LP_RENDER_MARGIN_RIGHT);
    lp_rgb masked = lp_render_masked_rgb(&opt);
    assert_rgb_equal(cell_pixel(&img, &lay, 3, 0), lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 1.0));
    assert_rgb_equal(cell_pixel(&img, &lay, 3, 1), lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 0.5));
    assert_rgb_equal(cell_pixel(&img, &lay, 3, 2), lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 0.0));
    assert_rgb_equal(cell_pixel(&img, &lay, 3, 1), ((lp_rgb){0x21, 0x91, 0x8c}));
    /* every cell above the diagonal is masked */
    for (int q = 0; q < 4; q++)
        for (int k = q + 1; k < 4; k++)
            assert_rgb_equal(cell_pixel(&img, &lay, q, k), masked);
    cairo_surface_destroy(img.surface);

    /* --zoom 2: twice the pixels, the same colours at twice the coordinates */
    opt.zoom = 2;
    assert_int_equal(lp_render_head(db, &run, 0, 0, &opt, files.png, &err), LP_OK);
    img = load_png(files.png);
    assert_int_equal(img.width, 2 * lay.width);
    assert_int_equal(img.height, 2 * lay.height);
    assert_rgb_equal(pixel(&img, 2 * (lay.map_x + 1 * lay.cell) + 1, 2 * (lay.map_y + 3 * lay.cell) + 1),
                     lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 0.5));
    assert_rgb_equal(pixel(&img, 2 * (lay.map_x + 3 * lay.cell) - 2, 2 * (lay.map_y + 1 * lay.cell) + 2),
                     masked);
    cairo_surface_destroy(img.surface);
    opt.zoom = 1;

    /* magma, log scale: 0.5 sits at log(0.5/1e-4)/log(1/1e-4) */
    opt.colormap = LP_COLORMAP_MAGMA;
    opt.scale = LP_SCALE_LOG;
    assert_int_equal(lp_render_head(db, &run, 0, 0, &opt, files.png, &err), LP_OK);
    img = load_png(files.png);
    assert_rgb_equal(cell_pixel(&img, &lay, 3, 1),
                     lp_colormap_rgb(LP_COLORMAP_MAGMA, log(0.5 / 1e-4) / log(1 / 1e-4)));
    assert_rgb_equal(cell_pixel(&img, &lay, 0, 3), masked);
    cairo_surface_destroy(img.surface);

    check_leak_cell(db, &run, &lay, files.png);
    close_run(db, &run);
    scratch_remove(&files);
}

/* A 4096 x 4096 f16 map with one bright cell, drawn at 512 px: pooling keeps the cell. */
static void test_maxpool_long_map(void **state)
{
    (void)state;
    scratch files;
    scratch_init(&files, "long");
    new_db(files.db);
    const int64_t n = 4096;
    add_run(files.db, 1, "complete", "trace", n, 1, 1, NULL);
    /* The bright cell, and one leak far above the diagonal, in an otherwise zero blob. SQLite
     * builds the concatenation in memory (twice the blob), so a child process plants it: the
     * peak memory measured below is the render's alone. */
    uint16_t one = lp_f32_to_f16(1.0f), small = lp_f32_to_f16(0.01f);
    int64_t at_one = (3001 * n + 1234) * 2, at_small = (10 * n + 4000) * 2;
    char *one_hex = lp_test_sql_blob_literal(&one, 2), *small_hex = lp_test_sql_blob_literal(&small, 2);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        lp_error perr = {0};
        char sql[512];
        snprintf(sql, sizeof sql,
                 ATTN_INSERT "(1, 0, 0, 4096, 4096, 'f16', CAST(zeroblob(%lld) || %s || "
                 "zeroblob(%lld) || %s || zeroblob(%lld) AS BLOB))",
                 (long long)at_small, small_hex, (long long)(at_one - at_small - 2), one_hex,
                 (long long)(n * n * 2 - at_one - 2));
        _exit(lp_store_sql(files.db, sql, NULL, NULL, &perr) == LP_OK ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    free(one_hex);
    free(small_hex);
    assert_int_equal(lp_test_sql_int(files.db, "SELECT length(probs) FROM attention"), n * n * 2);

    lp_error err = {0};
    lp_store_run run;
    lp_store *db = open_run(files.db, 0, &run);
    lp_render_options opt;
    lp_render_options_default(&opt);
    opt.size = 512;
    lp_heatmap_layout lay;
    assert_int_equal(lp_render_heatmap_layout(n, n, &opt, &lay, &err), LP_OK);

    lp_pooled_map map;
    assert_int_equal(lp_render_read_map(db, &run, 0, 0, 512, 0, 0, 0, &map, &err), LP_OK);
    assert_int_equal(map.block, 8);
    assert_int_equal(map.rows, 512);
    assert_true(map.allowed_max[(3001 / 8) * 512 + 1234 / 8] == 1.0f);
    assert_true(map.allowed_max[(3001 / 8) * 512 + 1234 / 8 + 1] == 0.0f);
    assert_int_equal(map.n_leak_cells, 1);
    assert_true(map.flags[(10 / 8) * 512 + 4000 / 8] & LP_CELL_LEAK);
    lp_pooled_map_free(&map);

    struct timespec t0, t1;
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(lp_render_head(db, &run, 0, 0, &opt, files.png, &err), LP_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    getrusage(RUSAGE_SELF, &after);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    long grew_kib = after.ru_maxrss - before.ru_maxrss;
    printf("# 4096x4096 f16 map rendered at 512 px in %.3f s, peak RSS grew %ld KiB\n", seconds,
           grew_kib);
    assert_true(seconds < 10.0); /* generous: shared CI cores; typically well under 1 s */
    /* Streaming keeps memory to the canvas and one row: loading the 32 MiB blob (and its 64 MiB
     * of floats) would blow through this. Sanitizer builds pad allocations, hence the margin. */
    assert_true(grew_kib < 48 * 1024);

    png_image img = load_png(files.png);
    assert_int_equal(img.width, LP_RENDER_MARGIN_LEFT + 512 + LP_RENDER_MARGIN_RIGHT);
    assert_int_equal(img.height, LP_RENDER_MARGIN_TOP + 512 + LP_RENDER_MARGIN_BOTTOM);
    lp_rgb top = lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 1.0);
    lp_rgb bottom = lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 0.0);
    assert_rgb_equal(pixel(&img, lay.map_x + 1234 / 8, lay.map_y + 3001 / 8), top);
    assert_rgb_equal(pixel(&img, lay.map_x + 1234 / 8 + 1, lay.map_y + 3001 / 8), bottom);
    assert_rgb_equal(pixel(&img, lay.map_x + 400, lay.map_y + 20), lp_render_masked_rgb(&opt));
    /* the leak cell: colormap colour of 0.01, not masked grey */
    assert_rgb_equal(pixel(&img, lay.map_x + 4000 / 8, lay.map_y + 10 / 8),
                     lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 0.01));
    cairo_surface_destroy(img.surface);
    close_run(db, &run);
    scratch_remove(&files);
}

/* SVG carries the labels as text (in <desc>), escaped; PDF is a PDF; unknown extensions fail
 * without leaving a file. */
static void test_svg_pdf_and_formats(void **state)
{
    (void)state;
    char bad[512];
    scratch files;
    scratch_init(&files, "map");
    tmp_path(bad, sizeof bad, "map.jpg");
    new_db(files.db);
    add_run(files.db, 7, "complete", "trace", 5, 1, 1, NULL);
    static const char *const pieces[] = {"<s>", " the", "\xe4\xb8\x96\xe7\x95\x8c", "&amp", "\n"};
    add_tokens(files.db, 7, pieces, 5);
    float v[25];
    causal_uniform(v, 5, 5);
    add_map(files.db, 7, 0, 0, 5, 5, v, false);

    lp_error err = {0};
    lp_store_run run;
    lp_store *db = open_run(files.db, 7, &run);
    lp_render_options opt;
    lp_render_options_default(&opt);
    assert_int_equal(lp_render_head(db, &run, 0, 0, &opt, files.svg, &err), LP_OK);
    char *text = read_text_file(files.svg);
    assert_non_null(strstr(text, "<svg"));
    assert_non_null(strstr(text, "<title>layer 0, head 0: tiny-test (llama), run 7</title>"));
    assert_non_null(strstr(text, "&lt;s&gt;"));                      /* escaped */
    assert_non_null(strstr(text, "\xe2\x90\xa3the"));                 /* visible space */
    assert_non_null(strstr(text, "\xe4\xb8\x96\xe7\x95\x8c"));         /* CJK */
    assert_non_null(strstr(text, "&amp;amp"));
    assert_non_null(strstr(text, "\xe2\x8f\x8e"));                    /* newline symbol */
    /* the injected block sits inside the <svg> element, before any drawing */
    assert_true(strstr(text, "<title>") > strstr(text, "<svg"));
    free(text);

    assert_int_equal(lp_render_head(db, &run, 0, 0, &opt, files.pdf, &err), LP_OK);
    text = read_text_file(files.pdf);
    assert_int_equal(strncmp(text, "%PDF", 4), 0);
    free(text);

    assert_int_equal(lp_render_head(db, &run, 0, 0, &opt, bad, &err), LP_ERR_USAGE);
    assert_non_null(strstr(err.msg, ".png, .svg or .pdf"));
    assert_false(file_exists(bad));
    close_run(db, &run);
    scratch_remove(&files);
}

static void test_runs_and_errors(void **state)
{
    (void)state;
    char junk[512];
    scratch files;
    scratch_init(&files, "runs");
    tmp_path(junk, sizeof junk, "junk.db");
    new_db(files.db);
    add_run(files.db, 1, "complete", "trace", 3, 2, 2, NULL);
    add_run(files.db, 2, "complete", "leak", 3, 2, 2, NULL);
    add_run(files.db, 3, "running", "trace", 3, 2, 2, NULL);
    float v[9];
    causal_uniform(v, 3, 3);
    add_map(files.db, 1, 0, 0, 3, 3, v, false);
    /* a blob one byte short of n_q * n_k * 4 */
    lp_test_sql_exec(files.db, ATTN_INSERT "(1, 1, 0, 3, 3, 'f32', zeroblob(35))");
    lp_test_sql_exec(files.db, ATTN_INSERT "(1, 1, 1, 4, 3, 'f32', zeroblob(48))");

    lp_error err = {0};
    lp_store *db;
    assert_int_equal(lp_store_open_read(files.db, &db, &err), LP_OK);
    lp_store_run run;
    bool incomplete;
    /* latest complete trace run is 1, not the running 3 nor the leak run 2 */
    assert_int_equal(lp_store_read_run(db, 0, "trace", &run, &incomplete, &err), LP_OK);
    assert_int_equal(run.id, 1);
    lp_store_run_clear(&run);
    assert_int_equal(lp_store_read_run(db, 0, "leak", &run, &incomplete, &err), LP_OK);
    assert_int_equal(run.id, 2);
    lp_store_run_clear(&run);
    assert_int_equal(lp_store_read_run(db, 3, NULL, &run, &incomplete, &err), LP_OK);
    assert_true(incomplete);
    lp_store_run_clear(&run);
    assert_int_equal(lp_store_read_run(db, 99, NULL, &run, &incomplete, &err), LP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "no run with id 99"));

    assert_int_equal(lp_store_read_run(db, 1, NULL, &run, &incomplete, &err), LP_OK);
    lp_render_options opt;
    lp_render_options_default(&opt);
    assert_int_equal(lp_render_head(db, &run, 2, 0, &opt, files.png, &err), LP_ERR_RANGE);
    assert_non_null(strstr(err.msg, "--layer 2"));
    assert_int_equal(lp_render_head(db, &run, 0, 5, &opt, files.png, &err), LP_ERR_RANGE);
    assert_int_equal(lp_render_head(db, &run, 0, 1, &opt, files.png, &err), LP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "layer 0 head 1"));
    assert_int_equal(lp_render_head(db, &run, 1, 0, &opt, files.png, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "blob has 35"));
    assert_int_equal(lp_render_head(db, &run, 1, 1, &opt, files.png, &err), LP_ERR_FORMAT);
    assert_false(file_exists(files.png));
    /* no head_stats, no leak checks */
    assert_int_equal(lp_render_stat_matrix(db, &run, LP_STAT_SINK, &opt, files.png, &err),
                     LP_ERR_NOT_FOUND);
    assert_int_equal(lp_render_leak_plot(db, &run, &opt, files.png, &err), LP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "perturbation"));
    int64_t leak_run;
    assert_int_equal(lp_store_latest_leak_run(db, &leak_run, &err), LP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "no leak runs"));
    assert_false(file_exists(files.png));
    close_run(db, &run);

    /* a database from before head_stats and leak_checks existed: no rows, not an SQL error */
    lp_test_sql_exec(files.db, "DROP TABLE head_stats; DROP TABLE leak_checks");
    assert_int_equal(lp_store_open_read(files.db, &db, &err), LP_OK);
    assert_int_equal(lp_store_read_run(db, 1, NULL, &run, &incomplete, &err), LP_OK);
    assert_int_equal(lp_render_stat_matrix(db, &run, LP_STAT_SINK, &opt, files.png, &err),
                     LP_ERR_NOT_FOUND);
    assert_int_equal(lp_render_leak_plot(db, &run, &opt, files.png, &err), LP_ERR_NOT_FOUND);
    assert_int_equal(lp_store_latest_leak_run(db, &leak_run, &err), LP_ERR_NOT_FOUND);
    close_run(db, &run);

    /* not a database, and no file at all */
    FILE *f = fopen(junk, "wb");
    assert_non_null(f);
    for (int i = 0; i < 200; i++)
        fputs("this is not sqlite ", f);
    fclose(f);
    assert_int_not_equal(lp_store_open_read(junk, &db, &err), LP_OK);
    assert_non_null(strstr(err.msg, junk));
    unlink(junk);
    assert_int_equal(lp_store_open_read(junk, &db, &err), LP_ERR_IO);
    scratch_remove(&files);
}

/* A window recorded in arch_json masks the keys it leaves out. */
static void test_window_mask(void **state)
{
    (void)state;
    scratch files;
    scratch_init(&files, "window");
    new_db(files.db);
    add_run(files.db, 1, "complete", "trace", 4, 2, 1, "{\"sliding_window\": 0, \"layer_window\": [0, 2]}");
    float v[16];
    causal_uniform(v, 4, 4);
    add_map(files.db, 1, 0, 0, 4, 4, v, false);
    add_map(files.db, 1, 1, 0, 4, 4, v, false); /* mass outside the window of 2: leaks in layer 1 */
    lp_error err = {0};
    lp_store_run run;
    lp_store *db = open_run(files.db, 0, &run);
    assert_int_equal(lp_store_run_window(&run, 0), 0);
    assert_int_equal(lp_store_run_window(&run, 1), 2);
    lp_pooled_map map;
    assert_int_equal(lp_render_read_map(db, &run, 0, 0, 100, 0, 0, 0, &map, &err), LP_OK);
    assert_int_equal(map.n_leak_cells, 0);
    lp_pooled_map_free(&map);
    assert_int_equal(lp_render_read_map(db, &run, 1, 0, 100, 0, 0, 0, &map, &err), LP_OK);
    /* rows 2 and 3 see keys {1,2} and {2,3}: keys 0 (row 2) and 0, 1 (row 3) leak */
    assert_int_equal(map.n_leak_cells, 3);
    assert_true(map.flags[3 * 4 + 0] & LP_CELL_LEAK);
    assert_false(map.flags[3 * 4 + 2] & LP_CELL_MASKED);
    lp_pooled_map_free(&map);
    close_run(db, &run);
    scratch_remove(&files);
}

/* --all: every picture of the run, and an index.html whose every link exists. */
static void check_gallery(lp_store *db, const lp_store_run *run)
{
    lp_error err = {0};
    lp_render_options opt;
    lp_render_options_default(&opt);
    char dir[512], path[700];
    tmp_path(dir, sizeof dir, "gallery");
    int64_t n_files = 0;
    assert_int_equal(lp_render_gallery(db, run, &opt, NULL, dir, &n_files, &err), LP_OK);
    /* overview + 8 stats (the fixture's rows leave the sparsity columns NULL, as a run traced
     * before them) + leak + 3 grids + 12 heads */
    assert_int_equal(n_files, 1 + 8 + 1 + 3 + 12);
    snprintf(path, sizeof path, "%s/index.html", dir);
    char *text = read_text_file(path);
    int64_t links = 0;
    for (const char *p = strstr(text, "href=\""); p; p = strstr(p + 1, "href=\"")) {
        char name[128];
        const char *start = p + 6, *end = strchr(start, '"');
        assert_non_null(end);
        snprintf(name, sizeof name, "%.*s", (int)(end - start), start);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (!file_exists(path))
            fail_msg("index.html links %s, which does not exist", name);
        links++;
        unlink(path);
    }
    assert_int_equal(links, n_files + 1); /* the pictures and viewer.html */
    free(text);
    snprintf(path, sizeof path, "%s/index.html", dir);
    unlink(path);
    rmdir(dir);
}

/* Grid, overview, stat matrix (colour of a planted value) and leak plot all draw. */
static void test_grid_overview_stats_leak(void **state)
{
    (void)state;
    scratch files;
    scratch_init(&files, "multi");
    multi_db(files.db);
    lp_error err = {0};
    lp_store_run run;
    lp_store *db = open_run(files.db, 0, &run);
    lp_render_options opt;
    lp_render_options_default(&opt);

    assert_int_equal(lp_render_layer_grid(db, &run, 1, &opt, files.png, &err), LP_OK);
    png_image img = load_png(files.png);
    assert_true(img.width > 2 * 160 && img.height > 2 * 160);
    cairo_surface_destroy(img.surface);
    assert_int_equal(lp_render_layer_grid(db, &run, 3, &opt, files.png, &err), LP_ERR_RANGE);

    assert_int_equal(lp_render_overview(db, &run, &opt, files.png, &err), LP_OK);
    img = load_png(files.png);
    assert_true(img.width >= 4 * 64 && img.height >= 3 * 64);
    cairo_surface_destroy(img.surface);

    /* sink is 1 at L0 H0 and 0 elsewhere on a fixed [0, 1] scale: check a cell corner (the
     * centre carries the written value) */
    assert_int_equal(lp_render_stat_matrix(db, &run, LP_STAT_SINK, &opt, files.png, &err), LP_OK);
    img = load_png(files.png);
    int cell_w = 56, cell_h = 30, left = 64, top = 104;
    assert_rgb_equal(pixel(&img, left + 2, top + 2), lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 1.0));
    assert_rgb_equal(pixel(&img, left + cell_w + 2, top + 2),
                     lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 0.0));
    assert_rgb_equal(pixel(&img, left + 3 * cell_w + 2, top + 2 * cell_h + 2),
                     lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 0.0));
    cairo_surface_destroy(img.surface);
    assert_int_equal(lp_render_stat_matrix(db, &run, LP_STAT_ENTROPY, &opt, files.svg, &err),
                     LP_OK);
    char *text = read_text_file(files.svg);
    assert_non_null(strstr(text, "1.10")); /* entropy of L2 H3 = 0.1 * 11, written in */
    free(text);

    int64_t leak_run = 0;
    assert_int_equal(lp_store_latest_leak_run(db, &leak_run, &err), LP_OK);
    assert_int_equal(leak_run, 1); /* checks recorded under a trace run count too */
    int64_t *layers, count;
    double *diffs;
    bool *failed;
    assert_int_equal(lp_store_read_leak_diffs(db, 1, &layers, &diffs, &failed, &count, &err),
                     LP_OK);
    assert_int_equal(count, 4);
    assert_int_equal(layers[0], -1);
    assert_true(failed[0] && !failed[1] && failed[3]);
    assert_true(diffs[3] == 0.25);
    free(layers);
    free(diffs);
    free(failed);
    assert_int_equal(lp_render_leak_plot(db, &run, &opt, files.svg, &err), LP_OK);
    text = read_text_file(files.svg);
    assert_non_null(strstr(text, "logits"));
    assert_non_null(strstr(text, "2 of 4 layers failed"));
    free(text);
    check_gallery(db, &run);
    close_run(db, &run);
    scratch_remove(&files);
}

/* Decode-style maps (n_q < n_k) align the diagonal bottom-right; NaN cells are magenta; a grid
 * with maps for only some heads draws the rest as empty panels. */
static void test_decode_nan_and_selection(void **state)
{
    (void)state;
    scratch files;
    scratch_init(&files, "decode");
    new_db(files.db);
    add_run(files.db, 1, "complete", "trace", 5, 1, 3, NULL);
    /* 2 queries at positions 3 and 4 over 5 keys */
    float v[10] = {0};
    v[0 * 5 + 3] = 1.0f;     /* query at position 3 sees keys 0..3 */
    v[1 * 5 + 2] = 0.5f;
    v[1 * 5 + 1] = NAN;
    add_map(files.db, 1, 0, 0, 2, 5, v, false);
    add_map(files.db, 1, 0, 2, 2, 5, v, true); /* head 1 not stored */
    add_run(files.db, 2, "complete", "trace", 300, 1, 1, NULL);
    float strip[300] = {0};
    strip[299] = 1.0f;
    add_map(files.db, 2, 0, 0, 1, 300, strip, true);

    lp_error err = {0};
    lp_store_run run;
    lp_store *db = open_run(files.db, 1, &run);
    lp_render_options opt;
    lp_render_options_default(&opt);
    opt.cell = 40;
    lp_heatmap_layout lay;
    assert_int_equal(lp_render_heatmap_layout(2, 5, &opt, &lay, &err), LP_OK);
    assert_int_equal(lp_render_head(db, &run, 0, 0, &opt, files.png, &err), LP_OK);
    png_image img = load_png(files.png);
    lp_rgb masked = lp_render_masked_rgb(&opt);
    assert_rgb_equal(cell_pixel(&img, &lay, 0, 3), lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 1.0));
    assert_rgb_equal(cell_pixel(&img, &lay, 0, 4), masked); /* position 3 must not see key 4 */
    assert_rgb_equal(cell_pixel(&img, &lay, 1, 4), lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 0.0));
    assert_rgb_equal(cell_pixel(&img, &lay, 1, 2), lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 0.5));
    assert_rgb_equal(cell_pixel(&img, &lay, 1, 1), ((lp_rgb){0xff, 0x00, 0xff}));
    cairo_surface_destroy(img.surface);

    /* grid and overview draw heads 0 and 2 and leave head 1 empty; its own picture fails */
    assert_int_equal(lp_render_layer_grid(db, &run, 0, &opt, files.png, &err), LP_OK);
    assert_int_equal(lp_render_overview(db, &run, &opt, files.png, &err), LP_OK);
    assert_int_equal(lp_render_head(db, &run, 0, 1, &opt, files.png, &err), LP_ERR_NOT_FOUND);
    char dir[512], path[700];
    tmp_path(dir, sizeof dir, "selgallery");
    int64_t n_files;
    assert_int_equal(lp_render_gallery(db, &run, &opt, NULL, dir, &n_files, &err), LP_OK);
    assert_int_equal(n_files, 1 + 1 + 2); /* overview, one grid, two heads; no stats */
    snprintf(path, sizeof path, "%s/index.html", dir);
    char *text = read_text_file(path);
    assert_non_null(strstr(text, "no head statistics"));
    assert_null(strstr(text, "layer_0_head_1.png"));
    free(text);
    static const char *const names[] = {"index.html", "overview.png", "layer_0_grid.png",
                                        "layer_0_head_0.png", "layer_0_head_2.png",
                                        "viewer.html"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        assert_true(file_exists(path));
        unlink(path);
    }
    assert_int_equal(rmdir(dir), 0); /* nothing else was left there */
    lp_store_run_clear(&run);

    /* one query over 300 keys: rows stretched so the strip is readable */
    bool incomplete;
    assert_int_equal(lp_store_read_run(db, 2, NULL, &run, &incomplete, &err), LP_OK);
    lp_render_options_default(&opt);
    assert_int_equal(lp_render_heatmap_layout(1, 300, &opt, &lay, &err), LP_OK);
    assert_int_equal(lay.cell, 2);
    assert_int_equal(lay.cell_h, 24);
    assert_int_equal(lp_render_head(db, &run, 0, 0, &opt, files.png, &err), LP_OK);
    img = load_png(files.png);
    lp_rgb bright = lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 1.0);
    assert_rgb_equal(pixel(&img, lay.map_x + 299 * 2, lay.map_y + 1), bright);
    assert_rgb_equal(pixel(&img, lay.map_x + 299 * 2, lay.map_y + 22), bright);
    assert_rgb_equal(pixel(&img, lay.map_x + 298 * 2, lay.map_y + 12),
                     lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 0.0));
    cairo_surface_destroy(img.surface);
    close_run(db, &run);
    scratch_remove(&files);
}

/* --range A:B shows positions A..B-1 of both axes; cells keep their colours and masks. */
static void test_range_window(void **state)
{
    (void)state;
    scratch files;
    scratch_init(&files, "range");
    new_db(files.db);
    add_run(files.db, 1, "complete", "trace", 8, 1, 1, NULL);
    static const char *const pieces[] = {"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"};
    add_tokens(files.db, 1, pieces, 8);
    float v[64] = {0};
    v[5 * 8 + 3] = 1.0f;  /* inside the window */
    v[7 * 8 + 0] = 0.75f; /* outside it: must not set the scale */
    v[2 * 8 + 2] = 0.5f;
    add_map(files.db, 1, 0, 0, 8, 8, v, false);
    lp_error err = {0};
    lp_store_run run;
    lp_store *db = open_run(files.db, 0, &run);

    lp_pooled_map map;
    assert_int_equal(lp_render_read_map(db, &run, 0, 0, 100, 0, 2, 6, &map, &err), LP_OK);
    assert_int_equal(map.rows, 4);
    assert_int_equal(map.cols, 4);
    assert_int_equal(map.row0, 2);
    assert_int_equal(map.col0, 2);
    assert_true(map.max_value == 1.0f);
    assert_true(map.allowed_max[3 * 4 + 1] == 1.0f);  /* position 5, key 3 */
    assert_true(map.flags[0 * 4 + 3] == LP_CELL_MASKED); /* position 2, key 5 */
    lp_pooled_map_free(&map);
    assert_int_equal(lp_render_read_map(db, &run, 0, 0, 100, 0, 6, 9, &map, &err),
                     LP_ERR_RANGE);
    assert_non_null(strstr(err.msg, "--range 6:9"));

    lp_render_options opt;
    lp_render_options_default(&opt);
    opt.cell = 50;
    opt.range_lo = 2;
    opt.range_hi = 6;
    lp_heatmap_layout lay;
    assert_int_equal(lp_render_heatmap_layout(4, 4, &opt, &lay, &err), LP_OK);
    assert_int_equal(lp_render_head(db, &run, 0, 0, &opt, files.png, &err), LP_OK);
    png_image img = load_png(files.png);
    assert_rgb_equal(cell_pixel(&img, &lay, 3, 1), lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 1.0));
    assert_rgb_equal(cell_pixel(&img, &lay, 0, 0), lp_colormap_rgb(LP_COLORMAP_VIRIDIS, 0.5));
    assert_rgb_equal(cell_pixel(&img, &lay, 0, 3), lp_render_masked_rgb(&opt));
    cairo_surface_destroy(img.surface);
    assert_int_equal(lp_render_head(db, &run, 0, 0, &opt, files.svg, &err), LP_OK);
    char *text = read_text_file(files.svg);
    assert_non_null(strstr(text, "2 p2"));  /* labels carry their positions */
    assert_non_null(strstr(text, "5 p5"));
    assert_null(strstr(text, "p6"));
    assert_non_null(strstr(text, "showing positions 2:6"));
    free(text);
    close_run(db, &run);
    scratch_remove(&files);
}

/* Hostile attention rows: random shapes, dtypes and blob lengths. Reading must succeed exactly
 * when the row is consistent, and never touch memory it should not (run under LOUPE_SANITIZE). */
static void test_hostile_attention_rows(void **state)
{
    (void)state;
    scratch files;
    scratch_init(&files, "hostile");
    new_db(files.db);
    add_run(files.db, 1, "complete", "trace", 8, 1, 300, NULL);
    static const char *const dtypes[] = {"f16", "f32"};
    uint64_t seed = 12345;
    int64_t n_q[300], n_k[300], bytes[300];
    int dt[300];
    /* dtype outside the CHECK is refused by SQLite itself, so only sizes are hostile here */
    size_t sql_cap = 300 * 160 + 64, sql_len = 0;
    char *sql = malloc(sql_cap);
    assert_non_null(sql);
    sql_len += (size_t)snprintf(sql, sql_cap, "BEGIN;");
    for (int h = 0; h < 300; h++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        n_q[h] = (int64_t)((seed >> 33) % 43) - 2;
        n_k[h] = (int64_t)((seed >> 40) % 43) - 2;
        dt[h] = (int)((seed >> 50) & 1);
        int64_t honest = n_q[h] * n_k[h] * (dt[h] ? 4 : 2);
        /* half the rows honest (when the shape allows), the rest off by a little or a lot */
        bytes[h] = (seed >> 20) & 1 ? honest : (int64_t)((seed >> 8) % 4000) + 1;
        if (bytes[h] < 1)
            bytes[h] = 1;
        sql_len += (size_t)snprintf(sql + sql_len, sql_cap - sql_len,
                                    ATTN_INSERT "(1, 0, %d, %lld, %lld, '%s', randomblob(%lld));",
                                    h, (long long)n_q[h], (long long)n_k[h], dtypes[dt[h]],
                                    (long long)bytes[h]);
    }
    snprintf(sql + sql_len, sql_cap - sql_len, "COMMIT;");
    lp_test_sql_exec(files.db, "%s", sql);
    free(sql);

    lp_error err = {0};
    lp_store_run run;
    lp_store *db = open_run(files.db, 0, &run);
    int n_ok = 0;
    for (int h = 0; h < 300; h++) {
        bool consistent = n_q[h] >= 1 && n_k[h] >= 1 && n_q[h] <= n_k[h] &&
                          bytes[h] == n_q[h] * n_k[h] * (dt[h] ? 4 : 2);
        lp_pooled_map map;
        lp_status got = lp_render_read_map(db, &run, 0, h, 7, 0, 0, 0, &map, &err);
        if (consistent) {
            if (got != LP_OK)
                fail_msg("head %d (%lld x %lld %s, %lld bytes): %s", h, (long long)n_q[h],
                         (long long)n_k[h], dtypes[dt[h]], (long long)bytes[h], err.msg);
            assert_true(map.rows >= 1 && map.rows <= 7 && map.cols >= 1 && map.cols <= 7);
            lp_pooled_map_free(&map);
            n_ok++;
        } else {
            assert_int_equal(got, LP_ERR_FORMAT);
            assert_non_null(strstr(err.msg, "attention run 1 layer 0 head"));
        }
    }
    assert_true(n_ok > 20); /* the generator made both kinds */
    close_run(db, &run);
    scratch_remove(&files);
}

/* Two runs over the same 4 tokens (1 layer x 2 heads): head 0's last row moves a quarter of its
 * mass from key 0 to key 1, head 1 is stored for run 1 only. Diffed and stored, then drawn. */
static void test_diff_pictures(void **state)
{
    (void)state;
    scratch files;
    scratch_init(&files, "diff");
    new_db(files.db);
    static const char *const pieces[] = {"<s>", " the", " cat", " sat"};
    float v[16], w[16];
    causal_uniform(v, 4, 4);
    v[12] = 0.5f, v[13] = 0.25f, v[14] = 0.25f, v[15] = 0.0f;
    memcpy(w, v, sizeof w);
    w[12] = 0.25f, w[13] = 0.5f;
    for (int64_t r = 1; r <= 2; r++) {
        add_run(files.db, r, "complete", "trace", 4, 1, 2, NULL);
        add_tokens(files.db, r, pieces, 4);
        add_map(files.db, r, 0, 0, 4, 4, r == 1 ? v : w, false);
        add_stats(files.db, r, 1, 2);
        for (int64_t pos = 0; pos < 4; pos++) /* B's argmax differs at the last position */
            lp_test_sql_exec(files.db, "INSERT INTO predictions (run_id, pos, rank, token_id, "
                             "piece, prob, logit) VALUES (%lld, %lld, 0, %lld, 'x', 0.5, 1.0)",
                             (long long)r, (long long)pos, (long long)(pos == 3 ? r : 0));
    }
    add_map(files.db, 1, 0, 1, 4, 4, v, false);
    lp_error err = {0};
    lp_store_run ra, rb;
    lp_store *db = open_run(files.db, 1, &ra);
    bool incomplete;
    assert_int_equal(lp_store_read_run(db, 2, NULL, &rb, &incomplete, &err), LP_OK);
    /* a run against itself is exactly 0 wherever both sides have the data */
    lp_run_diff *self = NULL, *d = NULL;
    if (lp_diff_runs(db, &ra, db, &ra, &self, &err) != LP_OK)
        fail_msg("%s", err.msg);
    for (int64_t i = 0; i < 2; i++) {
        assert_true(self->js[i] == 0.0 && self->max_abs[i] == 0.0);
        for (int k = 0; k < LP_STAT_COUNT; k++)
            assert_true(self->stat_delta[i * LP_STAT_COUNT + k] == 0.0 ||
                        (k >= LP_STAT_KEYS50 && isnan(self->stat_delta[i * LP_STAT_COUNT + k])));
    }
    assert_int_equal(lp_diff_runs(db, &ra, db, &rb, &d, &err), LP_OK);
    assert_true(d->js[0] > 0 && fabs(d->max_abs[0] - 0.25) < 1e-7 && isnan(d->js[1]));
    assert_true(d->argmax_agree[2] && !d->argmax_agree[3] && self->argmax_agree[3]);
    lp_store *w_db;
    assert_int_equal(lp_store_open(files.db, &w_db, &err), LP_OK);
    int64_t id = 0;
    lp_store_diff row = {.a_db = files.db, .b_db = files.db, .a_run = 1, .b_run = 2,
                         .n_tokens = 4, .n_layers = 1, .n_heads = 2, .js = d->js,
                         .max_abs = d->max_abs, .kl = d->kl, .stat_delta = d->stat_delta,
                         .argmax_agree = d->argmax_agree};
    assert_int_equal(lp_store_add_diff(w_db, &row, &id, &err), LP_OK);
    /* a diff whose B is nowhere to be found */
    row.b_db = "/nonexistent/b.db";
    int64_t lost = 0;
    assert_int_equal(lp_store_add_diff(w_db, &row, &lost, &err), LP_OK);
    lp_store_close(w_db);
    close_run(db, &ra);
    lp_store_run_clear(&rb);
    db = open_run(files.db, 1, &ra);

    lp_store_diff_rows got;
    assert_int_equal(lp_store_read_diff(db, id, &got, &err), LP_OK);
    assert_true(got.js[0] == d->js[0] && isnan(got.js[1]) && got.max_abs[0] == d->max_abs[0]);
    assert_true(got.stat_delta[LP_STAT_ENTROPY] == 0.0 && isnan(got.stat_delta[LP_STAT_KEYS50]));
    assert_true(got.a_run == 1 && got.b_run == 2 && got.n_tokens == 4);
    assert_true(got.argmax_agree[0] == 1 && got.argmax_agree[3] == 0 && isnan(got.kl[0]));
    lp_store_diff_rows_clear(&got);
    assert_int_equal(lp_store_read_diff(db, 0, &got, &err), LP_OK); /* the latest */
    assert_int_equal(got.id, lost);
    lp_store_diff_rows_clear(&got);
    assert_int_equal(lp_store_read_diff(db, 99, &got, &err), LP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "no diff 99"));

    /* the difference map: -0.25 blue, +0.25 red at vmax 0.25, unchanged white, masked grey */
    lp_render_options opt;
    lp_render_options_default(&opt);
    opt.cell = 60;
    lp_heatmap_layout lay;
    assert_int_equal(lp_render_heatmap_layout(4, 4, &opt, &lay, &err), LP_OK);
    assert_int_equal(lp_render_diff_head(db, files.db, id, 0, 0, &opt, files.png, &err), LP_OK);
    png_image img = load_png(files.png);
    assert_rgb_equal(cell_pixel(&img, &lay, 3, 0), ((lp_rgb){0x21, 0x66, 0xac}));
    assert_rgb_equal(cell_pixel(&img, &lay, 3, 1), ((lp_rgb){0xb2, 0x18, 0x2b}));
    assert_rgb_equal(cell_pixel(&img, &lay, 3, 2), ((lp_rgb){0xff, 0xff, 0xff}));
    assert_rgb_equal(cell_pixel(&img, &lay, 1, 0), ((lp_rgb){0xff, 0xff, 0xff}));
    assert_rgb_equal(cell_pixel(&img, &lay, 0, 1), lp_render_masked_rgb(&opt));
    cairo_surface_destroy(img.surface);
    /* --vmax 0.5: the same cells at half strength */
    opt.vmax = 0.5;
    assert_int_equal(lp_render_diff_head(db, files.db, id, 0, 0, &opt, files.png, &err), LP_OK);
    img = load_png(files.png);
    assert_rgb_equal(cell_pixel(&img, &lay, 3, 1), lp_diverging_rgb(0.5));
    cairo_surface_destroy(img.surface);
    opt.vmax = 0;
    /* head 1 has no map in run 2; B of the lost diff cannot be opened; heads out of range */
    assert_int_equal(lp_render_diff_head(db, files.db, id, 0, 1, &opt, files.png, &err),
                     LP_ERR_NOT_FOUND);
    assert_int_equal(lp_render_diff_head(db, files.db, lost, 0, 0, &opt, files.png, &err),
                     LP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "'/nonexistent/b.db', which cannot be opened from here"));
    assert_int_equal(lp_render_diff_head(db, files.db, id, 0, 2, &opt, files.png, &err),
                     LP_ERR_RANGE);

    /* the JS matrix: head 0 at the top of the scale (red), head 1 missing (masked colour);
     * sampled by the cells' corners, away from the values written in */
    assert_int_equal(lp_render_diff_matrix(db, id, &opt, files.png, &err), LP_OK);
    img = load_png(files.png);
    assert_rgb_equal(pixel(&img, 64 + 3, 104 + 3), ((lp_rgb){0xb2, 0x18, 0x2b}));
    assert_rgb_equal(pixel(&img, 64 + 56 + 3, 104 + 3), lp_render_masked_rgb(&opt));
    /* the second panel, max |B - A| on its own scale, starts one panel (64 + 2 x 56 + 150) on;
     * the picture may be wider, to fit the title */
    assert_rgb_equal(pixel(&img, 326 + 64 + 3, 104 + 3), ((lp_rgb){0xb2, 0x18, 0x2b}));
    cairo_surface_destroy(img.surface);

    /* a database from before diff_head_stats: the statistic changes read as NaN */
    close_run(db, &ra);
    lp_test_sql_exec(files.db, "DROP TABLE diff_head_stats");
    db = open_run(files.db, 1, &ra);
    assert_int_equal(lp_store_read_diff(db, id, &got, &err), LP_OK);
    assert_true(got.js[0] == d->js[0] && isnan(got.stat_delta[LP_STAT_ENTROPY]));
    lp_store_diff_rows_clear(&got);
    close_run(db, &ra);
    /* ... and the next writer creates it again */
    assert_int_equal(lp_store_open(files.db, &w_db, &err), LP_OK);
    lp_store_close(w_db);
    db = open_run(files.db, 1, &ra);
    int64_t *ids = NULL, n_ids = 0;
    assert_int_equal(lp_store_list_diffs(db, &ids, &n_ids, &err), LP_OK);
    assert_int_equal(n_ids, 2);
    assert_true(ids[0] == id && ids[1] == lost);
    free(ids);
    close_run(db, &ra);
    lp_run_diff_free(self);
    lp_run_diff_free(d);
    scratch_remove(&files);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_colormaps_and_scales),
        cmocka_unit_test(test_visible_piece),
        cmocka_unit_test(test_layout_sizes),
        cmocka_unit_test(test_planted_map_pixels),
        cmocka_unit_test(test_maxpool_long_map),
        cmocka_unit_test(test_svg_pdf_and_formats),
        cmocka_unit_test(test_runs_and_errors),
        cmocka_unit_test(test_window_mask),
        cmocka_unit_test(test_grid_overview_stats_leak),
        cmocka_unit_test(test_decode_nan_and_selection),
        cmocka_unit_test(test_range_window),
        cmocka_unit_test(test_hostile_attention_rows),
        cmocka_unit_test(test_diff_pictures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
