/* The HTML viewer: one self-contained page per run. The template (render/viewer/template.html,
 * viewer.css, viewer.js, embedded at build time) is copied with the run's data put in: every map
 * as a base64 block of 1-byte cells, then one JSON document with everything else (viewer_data.c).
 *
 * Page layout written, in this order (nothing in it asks for another file):
 *   the template up to @LOUPE_CSS@, the CSS, the template up to @LOUPE_DATA@,
 *   per embedded head i:  <script type="application/x-loupe-map" id="m{i}">BASE64</script>
 *                         (+ "x{i}": leak/bad plane when the head has any, "t{i}": thumbnail)
 *   <script type="application/json" id="loupe-data">JSON</script>   ('<' '>' '&' as \u00XX)
 *   the template up to @LOUPE_SCRIPT@, the JS, the rest of the template.
 * Cell codes (viewer.js decodes them): 0..254 an allowed cell's value v = vmax * (code/254)^2,
 * 255 a cell the mask forbids; the x plane: 0 nothing, 1..254 a leak of that value, 255 NaN or
 * negative. The square root keeps both scales readable: linear colours are within one of the
 * colormap's 256 entries, and the log scale resolves values down to ~1e-4 of the head's max. */
#define _POSIX_C_SOURCE 200809L
#include "render/render.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/text.h"
#include "render/render_internal.h"
#include "render/viewer_internal.h"

/* Overview thumbnails: a head whose embedded map is larger gets a max-pooled copy this big. */
#define THUMB_CELLS 48
/* Longest side a map may be embedded at (the stored maps' own limit is far below). */
#define MAX_SIDE ((int64_t)1 << 20)

void lp_viewer_options_default(lp_viewer_options *vopt)
{
    vopt->max_map_bytes = (uint64_t)64 << 20;
    vopt->layer = -1;
    vopt->db_path = NULL;
}

static lp_status out_of_memory(lp_error *err)
{
    return lp_error_set(err, LP_ERR_NOMEM, "viewer: out of memory (the page's JSON)");
}

/* ---- writing bytes ---------------------------------------------------------------------------- */

static void write_base64(FILE *f, const uint8_t *data, size_t n)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char line[1028];
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)data[i + 1] << 8;
        if (i + 2 < n)
            v |= data[i + 2];
        line[o++] = alphabet[(v >> 18) & 63];
        line[o++] = alphabet[(v >> 12) & 63];
        line[o++] = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
        line[o++] = i + 2 < n ? alphabet[v & 63] : '=';
        if (o == 1024) { /* line breaks keep editors happy; atob skips them */
            line[o++] = '\n';
            fwrite(line, 1, o, f);
            o = 0;
        }
    }
    fwrite(line, 1, o, f);
}

/* A named block of cells as a non-executed script element. */
static void write_block(FILE *f, char kind, int64_t index, const uint8_t *cells, size_t n)
{
    fprintf(f, "<script type=\"application/x-loupe-map\" id=\"%c%lld\">", kind, (long long)index);
    write_base64(f, cells, n);
    fputs("</script>\n", f);
}

/* JSON into a script element: '<', '>' and '&' only occur inside strings there, where \u00XX
 * means the same, so no token text can close the element or open a comment. */
static void write_json_script(FILE *f, const char *json)
{
    fputs("<script type=\"application/json\" id=\"loupe-data\">", f);
    for (const char *p = json; *p; p++) {
        if (*p == '<' || *p == '>' || *p == '&')
            fprintf(f, "\\u%04x", (unsigned)*p);
        else
            fputc(*p, f);
    }
    fputs("</script>\n", f);
}

/* The template from *pos up to the marker (or to the end when marker is NULL). */
static void write_template_until(FILE *f, const char **pos, const char *marker)
{
    const char *end = marker ? strstr(*pos, marker) : NULL;
    size_t n = end ? (size_t)(end - *pos) : strlen(*pos);
    fwrite(*pos, 1, n, f);
    *pos += n + (end ? strlen(marker) : 0);
}

/* ---- choosing the resolution ------------------------------------------------------------------ */

typedef struct head_shape {
    int64_t layer, head, n_q, n_k;
} head_shape;

/* Display cells of an n_q x n_k map pooled to at most `side` cells per side (pooled_map.c's rule). */
static uint64_t pooled_cells(const head_shape *h, int64_t side)
{
    int64_t longest = h->n_q > h->n_k ? h->n_q : h->n_k;
    int64_t block = (longest + side - 1) / side;
    return (uint64_t)((h->n_q + block - 1) / block) * (uint64_t)((h->n_k + block - 1) / block);
}

static uint64_t total_cells(const head_shape *heads, int64_t n, int64_t side)
{
    uint64_t sum = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t cells = pooled_cells(&heads[i], side);
        sum += cells;
        if (cells > (uint64_t)THUMB_CELLS * THUMB_CELLS) /* the thumbnail beside it */
            sum += pooled_cells(&heads[i], THUMB_CELLS);
    }
    return sum;
}

/* The largest side every head can be embedded at within the budget (cells grow with the side). */
static lp_status choose_side(const head_shape *heads, int64_t n, uint64_t budget, int64_t *side,
                             lp_error *err)
{
    int64_t hi = 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t longest = heads[i].n_q > heads[i].n_k ? heads[i].n_q : heads[i].n_k;
        hi = longest > hi ? longest : hi;
    }
    hi = hi < MAX_SIDE ? hi : MAX_SIDE;
    if (total_cells(heads, n, 1) > budget) {
        char limit[32];
        return lp_error_set(err, LP_ERR_RANGE,
                            "%lld maps need at least %llu bytes even pooled to one cell each, "
                            "over --max-map-bytes %s",
                            (long long)n, (unsigned long long)total_cells(heads, n, 1),
                            lp_format_bytes(budget, limit, sizeof limit));
    }
    int64_t lo = 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (total_cells(heads, n, mid) <= budget)
            lo = mid;
        else
            hi = mid - 1;
    }
    *side = lo;
    return LP_OK;
}

/* Which heads have maps, and their shapes (a map is found by opening it; absent ones are skipped). */
static lp_status list_heads(lp_store *db, const lp_store_run *run, int64_t only_layer,
                            head_shape **out, int64_t *n_out, lp_error *err)
{
    *out = NULL;
    *n_out = 0;
    size_t cap = (size_t)(run->n_layers * run->n_heads); /* both bounded by lp_store_read_run */
    head_shape *heads = malloc(cap * sizeof *heads);
    if (!heads)
        return lp_error_set(err, LP_ERR_NOMEM, "viewer: out of memory (%zu heads)", cap);
    int64_t n = 0;
    lp_status st = LP_OK;
    for (int64_t l = 0; l < run->n_layers && st == LP_OK; l++) {
        for (int64_t h = 0; h < run->n_heads && st == LP_OK && (only_layer < 0 || l == only_layer);
             h++) {
            lp_store_map *m;
            st = lp_store_map_open(db, run, l, h, &m, err);
            if (st == LP_ERR_NOT_FOUND) {
                st = LP_OK;
                continue;
            }
            if (st == LP_OK) {
                heads[n] = (head_shape){l, h, 0, 0};
                lp_store_map_shape(m, &heads[n].n_q, &heads[n].n_k);
                lp_store_map_close(m);
                n++;
            }
        }
    }
    if (st != LP_OK) {
        free(heads);
        return st;
    }
    *out = heads;
    *n_out = n;
    return LP_OK;
}

/* ---- one head --------------------------------------------------------------------------------- */

static uint8_t value_code(float v, float vmax)
{
    if (!(v > 0.0f))
        return 0;
    double t = sqrt((double)v / (double)vmax);
    return (uint8_t)lrint(254.0 * (t < 1.0 ? t : 1.0));
}

/* The pooled map as cell codes, and the x plane (*has_x: any leak or bad cell). */
static void encode_cells(const lp_pooled_map *map, float vmax, uint8_t *cells, uint8_t *x,
                         bool *has_x)
{
    *has_x = false;
    for (int64_t i = 0; i < map->rows * map->cols; i++) {
        uint8_t f = map->flags[i];
        cells[i] = f & LP_CELL_ALLOWED ? value_code(map->allowed_max[i], vmax) : 255;
        uint8_t leak = value_code(map->masked_max[i], vmax);
        x[i] = f & LP_CELL_NAN ? 255 : f & LP_CELL_LEAK ? (leak ? leak : 1) : 0;
        *has_x |= x[i] != 0;
    }
}

/* One pooled grid of a head as blocks (kind 'm' or 't', plus 'x' for the main map) and its JSON
 * description {block, rows, cols, vmax}. */
static lp_status embed_grid(FILE *f, const lp_pooled_map *map, char kind, int64_t index,
                            json_t *desc, uint64_t *cells_written, lp_error *err)
{
    size_t n = (size_t)(map->rows * map->cols);
    uint8_t *cells = calloc(n, 1), *x = calloc(n, 1);
    if (!cells || !x) {
        free(cells);
        free(x);
        return lp_error_set(err, LP_ERR_NOMEM, "viewer: out of memory (%zu cells)", n);
    }
    float vmax = map->max_value > 0.0f ? map->max_value : 1.0f;
    bool has_x;
    encode_cells(map, vmax, cells, x, &has_x);
    write_block(f, kind, index, cells, n);
    if (has_x && kind == 'm')
        write_block(f, 'x', index, x, n);
    *cells_written += n * (has_x && kind == 'm' ? 2 : 1);
    free(cells);
    free(x);
    bool ok = true;
    lp_render_json_set(&ok, desc, "block", json_integer(map->block));
    lp_render_json_set(&ok, desc, "rows", json_integer(map->rows));
    lp_render_json_set(&ok, desc, "cols", json_integer(map->cols));
    lp_render_json_set(&ok, desc, "vmax", json_real(vmax));
    lp_render_json_set(&ok, desc, "x", json_boolean(has_x && kind == 'm'));
    return ok ? LP_OK : out_of_memory(err);
}

/* Head i: its map at `side`, a thumbnail when that is large, and its entry in `list`. */
static lp_status embed_head(FILE *f, lp_store *db, const lp_store_run *run, const head_shape *h,
                            int64_t index, int64_t side, double leak_threshold, json_t *list,
                            uint64_t *cells, int64_t *max_block, lp_error *err)
{
    lp_pooled_map map;
    lp_status st = lp_render_read_map(db, run, h->layer, h->head, side, leak_threshold, 0, 0,
                                      &map, err);
    if (st != LP_OK)
        return st;
    json_t *e = json_object();
    bool ok = true;
    lp_render_json_set(&ok, e, "layer", json_integer(h->layer));
    lp_render_json_set(&ok, e, "head", json_integer(h->head));
    lp_render_json_set(&ok, e, "n_q", json_integer(map.n_q));
    lp_render_json_set(&ok, e, "n_k", json_integer(map.n_k));
    lp_render_json_set(&ok, e, "n_leak_cells", json_integer(map.n_leak_cells));
    lp_render_json_set(&ok, e, "n_bad_cells", json_integer(map.n_bad_cells));
    lp_render_json_set(&ok, e, "id", json_integer(index));
    st = embed_grid(f, &map, 'm', index, e, cells, err);
    *max_block = map.block > *max_block ? map.block : *max_block;
    bool thumb = map.rows * map.cols > THUMB_CELLS * THUMB_CELLS;
    lp_pooled_map_free(&map);
    if (st == LP_OK && thumb) {
        st = lp_render_read_map(db, run, h->layer, h->head, THUMB_CELLS, leak_threshold, 0, 0,
                                &map, err);
        json_t *t = json_object();
        if (st == LP_OK)
            st = embed_grid(f, &map, 't', index, t, cells, err);
        lp_render_json_set(&ok, e, "thumb", t);
        lp_pooled_map_free(&map);
    }
    lp_render_json_push(&ok, list, e);
    return st == LP_OK && !ok ? out_of_memory(err) : st;
}

/* Every listed head's blocks, and the "maps" member of the data. */
static lp_status embed_maps(FILE *f, lp_store *db, const lp_store_run *run,
                            const lp_render_options *opt, const lp_viewer_options *vopt,
                            json_t *root, lp_viewer_report *rep, lp_error *err)
{
    head_shape *heads;
    int64_t n, side = 1;
    lp_status st = list_heads(db, run, vopt->layer, &heads, &n, err);
    if (st != LP_OK)
        return st;
    if (n > 0)
        st = choose_side(heads, n, vopt->max_map_bytes, &side, err);
    json_t *maps = json_object(), *list = json_array();
    bool ok = true;
    lp_render_json_set(&ok, maps, "encoding", json_string("sqrt8"));
    lp_render_json_set(&ok, maps, "budget_bytes", json_integer((json_int_t)vopt->max_map_bytes));
    lp_render_json_set(&ok, maps, "heads", list);
    lp_render_json_set(&ok, root, "maps", maps);
    for (int64_t i = 0; i < n && st == LP_OK; i++)
        st = embed_head(f, db, run, &heads[i], i, side, opt->leak_threshold, list,
                        &rep->map_cells, &rep->max_block, err);
    rep->n_maps = st == LP_OK ? n : 0;
    lp_render_json_set(&ok, maps, "embedded_bytes", json_integer((json_int_t)rep->map_cells));
    lp_render_json_set(&ok, maps, "max_block", json_integer(rep->max_block));
    free(heads);
    return st == LP_OK && !ok ? out_of_memory(err) : st;
}

/* ---- the page --------------------------------------------------------------------------------- */

static lp_status write_page(FILE *f, lp_store *db, const lp_store_run *run,
                            const lp_render_options *opt, const lp_viewer_options *vopt,
                            lp_viewer_report *rep, lp_error *err)
{
    const char *pos = (const char *)lp_viewer_template_html;
    write_template_until(f, &pos, "@LOUPE_CSS@");
    fputs((const char *)lp_viewer_css, f);
    write_template_until(f, &pos, "@LOUPE_DATA@");
    json_t *root = json_object();
    if (!root)
        return lp_error_set(err, LP_ERR_NOMEM, "viewer: out of memory");
    rep->max_block = 1;
    lp_status st = embed_maps(f, db, run, opt, vopt, root, rep, err);
    if (st == LP_OK)
        st = lp_viewer_describe_run(db, run, opt, vopt, root, err);
    char *json = st == LP_OK ? json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(root);
    if (st == LP_OK && !json)
        st = lp_error_set(err, LP_ERR_NOMEM, "viewer: out of memory (JSON)");
    if (st != LP_OK)
        return st;
    write_json_script(f, json);
    free(json);
    write_template_until(f, &pos, "@LOUPE_SCRIPT@");
    fputs((const char *)lp_viewer_js, f);
    write_template_until(f, &pos, NULL);
    return LP_OK;
}

lp_status lp_render_viewer(lp_store *db, const lp_store_run *run, const lp_render_options *opt,
                           const lp_viewer_options *vopt, const char *out_path,
                           lp_viewer_report *report, lp_error *err)
{
    lp_viewer_report rep = {0};
    lp_viewer_options defaults;
    if (!vopt) {
        lp_viewer_options_default(&defaults);
        vopt = &defaults;
    }
    if (vopt->layer >= run->n_layers)
        return lp_error_set(err, LP_ERR_RANGE, "--layer %lld: run %lld has layers 0..%lld",
                            (long long)vopt->layer, (long long)run->id,
                            (long long)(run->n_layers - 1));
    size_t len = strlen(out_path);
    char *tmp = malloc(len + 5);
    if (!tmp)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", out_path);
    memcpy(tmp, out_path, len);
    memcpy(tmp + len, ".tmp", 5);
    FILE *f = fopen(tmp, "w");
    lp_status st = f ? LP_OK
                     : lp_error_set(err, LP_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    if (st == LP_OK)
        st = write_page(f, db, run, opt, vopt, &rep, err);
    if (f) {
        long size = ftell(f);
        bool bad = ferror(f) != 0;
        if ((fclose(f) != 0 || bad) && st == LP_OK)
            st = lp_error_set(err, LP_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
        rep.file_bytes = size > 0 ? (uint64_t)size : 0;
    }
    if (st == LP_OK && rename(tmp, out_path) != 0)
        st = lp_error_set(err, LP_ERR_IO, "%s: cannot rename: %s", out_path, strerror(errno));
    if (st != LP_OK)
        unlink(tmp);
    free(tmp);
    if (report && st == LP_OK)
        *report = rep;
    return st;
}
