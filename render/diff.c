/* `loupe diff` drawn: one head's difference map B - A on a diverging colormap centred on 0, and
 * the layers x heads matrices of the mean Jensen-Shannon divergence and the largest |B - A|. The diff row names its two
 * runs by database path; the maps are read from there through the store's typed reads. */
#define _POSIX_C_SOURCE 200809L
#include "render/render.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "render/render_internal.h"
#include "trace/kernels/mask.h"

/* One run of the diff, in the rendered database or in the file the diff names. */
typedef struct diff_side {
    lp_store *store;
    bool owned; /* opened here (another file than the rendered database) */
    lp_store_run run;
    bool have_run;
    char path[4096]; /* where it was found */
} diff_side;

static void side_close(diff_side *s)
{
    if (s->have_run)
        lp_store_run_clear(&s->run);
    if (s->owned)
        lp_store_close(s->store);
    memset(s, 0, sizeof *s);
}

bool lp_render_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return a && b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* `stored` as diff was given it (relative to the folder diff ran in), else the file of that name
 * beside the rendered database (a folder copied whole). */
static lp_status open_side_store(lp_store *db, const char *db_path, const char *stored,
                                 diff_side *s, lp_error *err)
{
    if (lp_render_same_file(stored, db_path)) {
        s->store = db;
        snprintf(s->path, sizeof s->path, "%s", db_path);
        return LP_OK;
    }
    lp_error first = {0};
    snprintf(s->path, sizeof s->path, "%s", stored);
    if (lp_store_open_read(stored, &s->store, &first) == LP_OK) {
        s->owned = true;
        return LP_OK;
    }
    const char *slash = db_path ? strrchr(db_path, '/') : NULL;
    const char *base = strrchr(stored, '/') ? strrchr(stored, '/') + 1 : stored;
    if (slash) {
        snprintf(s->path, sizeof s->path, "%.*s/%s", (int)(slash - db_path), db_path, base);
        lp_error beside = {0};
        struct stat st;
        if (stat(s->path, &st) == 0 && lp_store_open_read(s->path, &s->store, &beside) == LP_OK) {
            s->owned = true;
            return LP_OK;
        }
    }
    return lp_error_set(err, LP_ERR_NOT_FOUND,
                        "the diff's run is in '%s', which cannot be opened from here (%s): "
                        "render from the folder `loupe diff` ran in, or keep that file beside "
                        "the database",
                        stored, first.msg);
}

static lp_status open_side(lp_store *db, const char *db_path, const lp_store_diff_rows *d,
                           bool is_b, diff_side *s, lp_error *err)
{
    memset(s, 0, sizeof *s);
    const char *name = is_b ? "B" : "A";
    int64_t run_id = is_b ? d->b_run : d->a_run;
    lp_error why = {0};
    lp_status st = open_side_store(db, db_path, is_b ? d->b_db : d->a_db, s, &why);
    bool incomplete = false;
    if (st == LP_OK && (st = lp_store_read_run(s->store, run_id, NULL, &s->run, &incomplete,
                                               &why)) == LP_OK)
        s->have_run = true;
    if (st == LP_OK && (s->run.n_tokens != d->n_tokens || s->run.n_layers != d->n_layers ||
                        s->run.n_heads != d->n_heads))
        st = lp_error_set(&why, LP_ERR_FORMAT,
                          "run %lld in '%s' has %lld tokens and %lld x %lld heads, the diff was "
                          "of %lld tokens and %lld x %lld heads: the database changed since",
                          (long long)run_id, s->path, (long long)s->run.n_tokens,
                          (long long)s->run.n_layers, (long long)s->run.n_heads,
                          (long long)d->n_tokens, (long long)d->n_layers, (long long)d->n_heads);
    if (st != LP_OK) {
        side_close(s);
        return lp_error_set(err, st == LP_ERR_NOMEM ? LP_ERR_NOMEM : LP_ERR_NOT_FOUND,
                            "diff %lld: %s (run %lld): %s", (long long)d->id, name,
                            (long long)run_id, why.msg);
    }
    return LP_OK;
}

/* Fold one row of B - A into the display grid: allowed cells keep the value of largest |value|
 * in their block, masked cells that differ (one run leaks there) are flagged. */
static void pool_difference(lp_pooled_map *map, const float *row_a, const float *row_b,
                            int64_t pooled_row, int64_t lo, int64_t hi)
{
    float *cell = map->allowed_max + pooled_row * map->cols;
    uint8_t *flags = map->flags + pooled_row * map->cols;
    for (int64_t k = 0; k < map->n_k; k++) {
        int64_t c = k / map->block;
        float v = row_b[k] - row_a[k];
        if (isnan(v)) {
            flags[c] |= LP_CELL_NAN;
            map->n_bad_cells++;
        } else if (k >= lo && k < hi) {
            if (!(flags[c] & LP_CELL_ALLOWED) || fabsf(v) > fabsf(cell[c]))
                cell[c] = v;
            flags[c] |= LP_CELL_ALLOWED;
            map->max_value = fmaxf(map->max_value, fabsf(v));
        } else {
            flags[c] |= LP_CELL_MASKED;
            if (v != 0) {
                flags[c] |= LP_CELL_LEAK;
                map->n_leak_cells++;
            }
        }
    }
}

/* Both maps streamed a row at a time into the signed grid laid out by lay. */
static lp_status read_difference(const diff_side *a, const diff_side *b, int64_t layer,
                                 int64_t head, const lp_render_options *opt, lp_pooled_map *map,
                                 lp_heatmap_layout *lay, lp_error *err)
{
    memset(map, 0, sizeof *map);
    lp_store_map *ma = NULL, *mb = NULL;
    lp_status st = lp_store_map_open(a->store, &a->run, layer, head, &ma, err);
    if (st == LP_OK)
        st = lp_store_map_open(b->store, &b->run, layer, head, &mb, err);
    int64_t n_q = 0, n_k = 0, qb = 0, kb = 0;
    if (st == LP_OK) {
        lp_store_map_shape(ma, &n_q, &n_k);
        lp_store_map_shape(mb, &qb, &kb);
        if (n_q != qb || n_k != kb)
            st = lp_error_set(err, LP_ERR_FORMAT,
                              "layer %lld head %lld: A's map is %lld x %lld, B's %lld x %lld",
                              (long long)layer, (long long)head, (long long)n_q, (long long)n_k,
                              (long long)qb, (long long)kb);
    }
    if (st == LP_OK)
        st = lp_render_heatmap_layout(n_q, n_k, opt, lay, err);
    float *row_a = NULL, *row_b = NULL;
    if (st == LP_OK) {
        *map = (lp_pooled_map){.n_q = n_q, .n_k = n_k, .block = lay->block, .rows = lay->rows,
                               .cols = lay->cols, .shown_q = n_q, .shown_k = n_k};
        size_t cells = (size_t)(lay->rows * lay->cols);
        map->allowed_max = calloc(cells, sizeof *map->allowed_max);
        map->masked_max = calloc(cells, sizeof *map->masked_max);
        map->flags = calloc(cells, 1);
        row_a = malloc((size_t)n_k * sizeof *row_a);
        row_b = malloc((size_t)n_k * sizeof *row_b);
        if (!map->allowed_max || !map->masked_max || !map->flags || !row_a || !row_b)
            st = lp_error_set(err, LP_ERR_NOMEM, "difference map: out of memory");
    }
    lp_mask_spec mask = lp_mask_causal(n_q, n_k);
    mask.causal = a->run.causal;
    mask.window = lp_store_run_window(&a->run, layer);
    for (int64_t q = 0; st == LP_OK && q < n_q; q++) {
        if ((st = lp_store_map_read(ma, q, 0, n_k, row_a, err)) ||
            (st = lp_store_map_read(mb, q, 0, n_k, row_b, err)))
            break;
        int64_t lo, hi;
        lp_mask_row_range(&mask, 0, q, &lo, &hi);
        pool_difference(map, row_a, row_b, q / map->block, lo, hi);
    }
    free(row_a);
    free(row_b);
    lp_store_map_close(ma);
    lp_store_map_close(mb);
    if (st != LP_OK)
        lp_pooled_map_free(map);
    return st;
}

static void side_caption(const char *name, const diff_side *s, char *buf, size_t size)
{
    snprintf(buf, size, "%s: %s run %lld", name, s->run.model, (long long)s->run.id);
}

static lp_status draw_difference(const lp_store_diff_rows *d, const diff_side *a,
                                 const diff_side *b, int64_t layer, int64_t head,
                                 const lp_pooled_map *map, const lp_heatmap_layout *lay,
                                 const lp_render_options *opt, const char *out_path,
                                 lp_error *err)
{
    char **pieces = NULL;
    int64_t n_pieces = 0;
    lp_status s = lp_render_read_labels(a->store, a->run.id, &pieces, &n_pieces, err);
    if (s)
        return s;
    double vmax = opt->vmax > 0 ? opt->vmax : (map->max_value > 0 ? (double)map->max_value : 1);
    char ca[320], cb[320], title[800], subtitle[400], warning[160] = "", pooled[96] = "";
    side_caption("A", a, ca, sizeof ca);
    side_caption("B", b, cb, sizeof cb);
    int64_t i = layer * d->n_heads + head;
    snprintf(title, sizeof title, "layer %lld, head %lld: B - A (diff %lld; %s, %s)",
             (long long)layer, (long long)head, (long long)d->id, ca, cb);
    if (map->block > 1)
        snprintf(pooled, sizeof pooled, ", largest |difference| per %lldx%lld block",
                 (long long)map->block, (long long)map->block);
    lp_rgb masked = lp_render_masked_rgb(opt);
    snprintf(subtitle, sizeof subtitle,
             "%lld queries x %lld keys%s; mean JS %.3g nats, max |diff| %.3g; red: B attends "
             "more, blue: less, [-%.3g, +%.3g]; masked #%02x%02x%02x",
             (long long)map->n_q, (long long)map->n_k, pooled, d->js[i], d->max_abs[i], vmax,
             vmax, masked.r, masked.g, masked.b);
    if (map->n_leak_cells > 0)
        snprintf(warning, sizeof warning, "%lld masked cells differ (a run leaks there)",
                 (long long)map->n_leak_cells);
    else if (map->n_bad_cells > 0)
        snprintf(warning, sizeof warning, "%lld cells are NaN (magenta)",
                 (long long)map->n_bad_cells);
    lp_canvas c;
    s = lp_canvas_begin_titled(&c, out_path, lay->width, lay->height, opt->zoom, title, err);
    if (s == LP_OK) {
        lp_draw_title(&c, title, subtitle, warning);
        s = lp_draw_signed_map(&c, map, vmax, masked, lay->map_x, lay->map_y, lay->cell,
                               lay->cell_h, err);
        if (s) {
            lp_canvas_abort(&c);
        } else {
            lp_draw_token_axes(&c, map, lay, pieces, n_pieces);
            int map_w = (int)map->cols * lay->cell, map_h = (int)map->rows * lay->cell_h;
            double bar_h = map_h > 200 ? map_h : 200;
            lp_draw_diverging_bar(&c, lay->map_x + map_w + 24, lay->map_y + 8, bar_h - 16, vmax,
                                  false, "B - A");
            s = lp_canvas_end(&c, err);
        }
    }
    lp_store_free_texts(pieces, n_pieces);
    return s;
}

/* The stored diff's rows, once out_path is known to be writable (cleared by the caller). */
static lp_status read_diff_for(lp_store *db, int64_t diff_id, const char *out_path,
                               lp_store_diff_rows *d, lp_error *err)
{
    lp_status s = lp_render_check_path(out_path, err);
    return s == LP_OK ? lp_store_read_diff(db, diff_id, d, err) : s;
}

lp_status lp_render_diff_head(lp_store *db, const char *db_path, int64_t diff_id, int64_t layer,
                              int64_t head, const lp_render_options *opt, const char *out_path,
                              lp_error *err)
{
    lp_store_diff_rows d;
    lp_status s = read_diff_for(db, diff_id, out_path, &d, err);
    if (s)
        return s;
    if (layer < 0 || layer >= d.n_layers || head < 0 || head >= d.n_heads) {
        s = lp_error_set(err, LP_ERR_RANGE, "--layer %lld --head %lld: diff %lld has layers "
                         "0..%lld and heads 0..%lld",
                         (long long)layer, (long long)head, (long long)d.id,
                         (long long)d.n_layers - 1, (long long)d.n_heads - 1);
        lp_store_diff_rows_clear(&d);
        return s;
    }
    diff_side a, b;
    memset(&b, 0, sizeof b);
    s = open_side(db, db_path, &d, false, &a, err);
    if (s == LP_OK)
        s = open_side(db, db_path, &d, true, &b, err);
    lp_pooled_map map = {0};
    lp_heatmap_layout lay;
    if (s == LP_OK)
        s = read_difference(&a, &b, layer, head, opt, &map, &lay, err);
    if (s == LP_OK)
        s = draw_difference(&d, &a, &b, layer, head, &map, &lay, opt, out_path, err);
    lp_pooled_map_free(&map);
    side_close(&a);
    side_close(&b);
    lp_store_diff_rows_clear(&d);
    return s;
}

lp_status lp_render_diff_matrix(lp_store *db, int64_t diff_id, const lp_render_options *opt,
                                const char *out_path, lp_error *err)
{
    lp_store_diff_rows d;
    lp_status s = read_diff_for(db, diff_id, out_path, &d, err);
    if (s)
        return s;
    double mean_kl = 0, agree = 0, max_abs = 0;
    int64_t n_kl = 0, n_agree = 0;
    for (int64_t p = 0; p < d.n_tokens; p++) {
        if (!isnan(d.kl[p])) {
            mean_kl += d.kl[p];
            n_kl++;
        }
        if (d.argmax_agree[p] >= 0) {
            agree += d.argmax_agree[p];
            n_agree++;
        }
    }
    for (int64_t i = 0; i < d.n_layers * d.n_heads; i++)
        if (isfinite(d.max_abs[i]))
            max_abs = fmax(max_abs, d.max_abs[i]);
    char title[800], subtitle[400], kl[64] = "no full logits";
    snprintf(title, sizeof title, "diff %lld: %s run %lld vs %s run %lld", (long long)d.id,
             d.a_db, (long long)d.a_run, d.b_db, (long long)d.b_run);
    if (n_kl > 0)
        snprintf(kl, sizeof kl, "mean KL %.3g", mean_kl / (double)n_kl);
    snprintf(subtitle, sizeof subtitle,
             "mean JS per head (nats), %lld tokens; max |diff| %.3g; next token: %s, argmax "
             "agrees %.1f%%",
             (long long)d.n_tokens, max_abs, kl,
             n_agree > 0 ? 100.0 * agree / (double)n_agree : 100.0);
    s = lp_render_matrix_picture(d.js, d.n_layers, d.n_heads, title, subtitle, "mean JS", true,
                                 d.max_abs, "max |B - A|", opt, out_path, err);
    lp_store_diff_rows_clear(&d);
    return s;
}
