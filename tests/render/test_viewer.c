/* Unit tests of the HTML viewer (render/viewer.c) and `loupe export` (render/export.c): the page's
 * data read back (colormaps, cell codes, leak plane, hostile token texts, the budget), and exported
 * files read back with loupe's own safetensors reader. The browser half is tests/render/browser. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <jansson.h>
#include <math.h>

#include "inspect/inspect.h"
#include "render_test_db.h"

/* ---- reading the page back ---- */

/* The text between `open` (the element's start tag, up to and including '>') and "</script>". */
static char *element_text(const char *html, const char *open)
{
    const char *start = strstr(html, open);
    if (!start)
        return NULL;
    start = strchr(start, '>') + 1;
    const char *end = strstr(start, "</script>");
    assert_non_null(end);
    char *out = malloc((size_t)(end - start) + 1);
    assert_non_null(out);
    memcpy(out, start, (size_t)(end - start));
    out[end - start] = '\0';
    return out;
}

static json_t *page_data(const char *html)
{
    char *text = element_text(html, "<script type=\"application/json\" id=\"loupe-data\"");
    assert_non_null(text);
    assert_null(strchr(text, '<')); /* nothing in the data can end the element */
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    if (!root)
        fail_msg("page data: %s at %d", jerr.text, jerr.position);
    free(text);
    return root;
}

/* Base64 (with line breaks) of block id into bytes; *n receives the length. */
static uint8_t *page_block(const char *html, const char *id, size_t *n)
{
    char open[64];
    snprintf(open, sizeof open, "id=\"%s\"", id);
    char *text = element_text(html, open);
    if (!text)
        return NULL;
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint8_t *out = malloc(strlen(text));
    assert_non_null(out);
    uint32_t acc = 0;
    int bits = 0;
    *n = 0;
    for (const char *p = text; *p && *p != '='; p++) {
        const char *k = strchr(alphabet, *p);
        if (!k || !*p)
            continue; /* line breaks */
        acc = acc << 6 | (uint32_t)(k - alphabet);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[(*n)++] = (uint8_t)(acc >> bits);
        }
    }
    free(text);
    return out;
}

static char *write_viewer(const char *db_path, int64_t run_id, uint64_t budget,
                          lp_viewer_report *rep, const char *name)
{
    lp_store_run run;
    lp_store *db = open_run(db_path, run_id, &run);
    lp_render_options opt;
    lp_render_options_default(&opt);
    lp_viewer_options vopt;
    lp_viewer_options_default(&vopt);
    if (budget)
        vopt.max_map_bytes = budget;
    char out[512];
    tmp_path(out, sizeof out, name);
    lp_error err = {0};
    if (lp_render_viewer(db, &run, &opt, &vopt, out, rep, &err) != LP_OK)
        fail_msg("%s", err.msg);
    close_run(db, &run);
    char *html = read_text_file(out);
    unlink(out);
    return html;
}

static uint8_t code_of(double p, double vmax)
{
    return p > 0 ? (uint8_t)lrint(254.0 * fmin(1.0, sqrt(p / vmax))) : 0;
}

/* ---- tests ---- */

static const char *const hostile[] = {"<s>", "</script><script>alert(1)</script>",
                                      "<!--<script>", "\"q'&amp;\x01", "cat"};

/* Head 0's map: uniform over the keys each query sees, and 0.0625 at query 4, key 1. */
static void planted_values(float v[25])
{
    causal_uniform(v, 5, 5);
    v[4 * 5 + 1] = 0.0625f;
}

/* 1 layer x 3 heads of 5 tokens: a planted head, a leaking head, head 2 not stored. */
static void planted_db(const char *db_path)
{
    new_db(db_path);
    add_run(db_path, 1, "complete", "trace", 5, 1, 3, NULL);
    add_tokens(db_path, 1, hostile, 5);
    float v[25];
    planted_values(v);
    add_map(db_path, 1, 0, 0, 5, 5, v, false);
    v[0 * 5 + 3] = 0.5f; /* query 0 sees key 3: a leak */
    add_map(db_path, 1, 0, 1, 5, 5, v, false);
    add_stats(db_path, 1, 1, 3);
}

/* The page's colormaps are render's own; cells carry the documented codes; masked cells 255; the
 * leaking head has its x plane; hostile token texts survive as data. */
static void test_viewer_data(void **state)
{
    (void)state;
    char db_path[512];
    tmp_path(db_path, sizeof db_path, "viewer.db");
    planted_db(db_path);
    lp_viewer_report rep;
    char *html = write_viewer(db_path, 1, 0, &rep, "viewer.html");
    assert_int_equal(rep.n_maps, 2);
    assert_int_equal(rep.max_block, 1);
    assert_int_equal(rep.map_cells, 2 * 25 + 25); /* two maps and one leak plane */
    assert_null(strstr(html, "@LOUPE_")); /* every template marker replaced */
    json_t *root = page_data(html);
    json_t *cmaps = json_object_get(json_object_get(root, "options"), "colormaps");
    for (int c = 0; c < LP_COLORMAP_COUNT; c++) {
        const char *table = json_string_value(json_object_get(cmaps, lp_colormap_name((lp_colormap)c)));
        assert_non_null(table);
        for (int i = 0; i < 256; i++) {
            lp_rgb want = lp_colormap_rgb((lp_colormap)c, i / 256.0);
            char hex[7];
            snprintf(hex, sizeof hex, "%02x%02x%02x", want.r, want.g, want.b);
            if (strncmp(table + 6 * i, hex, 6) != 0)
                fail_msg("%s entry %d: %.6s, render draws %s", lp_colormap_name((lp_colormap)c), i,
                         table + 6 * i, hex);
        }
    }
    json_t *tokens = json_object_get(root, "tokens");
    assert_int_equal(json_array_size(tokens), 5);
    assert_string_equal(json_string_value(json_object_get(json_array_get(tokens, 1), "text")),
                        hostile[1]);
    assert_string_equal(json_string_value(json_object_get(json_array_get(tokens, 3), "text")),
                        "\"q'&amp;\xe2\x90\x81"); /* the control byte as its picture */
    json_t *heads = json_object_get(json_object_get(root, "maps"), "heads");
    assert_int_equal(json_array_size(heads), 2);
    assert_false(json_is_true(json_object_get(json_array_get(heads, 0), "x")));
    assert_true(json_is_true(json_object_get(json_array_get(heads, 1), "x")));
    assert_int_equal(json_integer_value(json_object_get(json_array_get(heads, 1), "n_leak_cells")), 1);
    size_t n;
    uint8_t *cells = page_block(html, "m0", &n), *x = page_block(html, "x1", &n);
    assert_non_null(cells);
    assert_non_null(x);
    assert_int_equal(n, 25);
    assert_int_equal(cells[0], 254);                  /* 1.0, the head's max */
    assert_int_equal(cells[2 * 5 + 1], code_of(1.0 / 3, 1.0));
    assert_int_equal(cells[4 * 5 + 1], code_of(0.0625, 1.0));
    assert_int_equal(cells[1 * 5 + 2], 255);          /* masked */
    assert_int_equal(x[0 * 5 + 3], code_of(0.5, 1.0)); /* the leak's value */
    assert_int_equal(x[1 * 5 + 3], 0);
    assert_null(page_block(html, "m2", &n));           /* head 2 was not stored */
    json_t *sections = json_object_get(root, "sections");
    assert_non_null(json_object_get(sections, "stats"));
    assert_null(json_object_get(sections, "leak")); /* no leak checks anywhere */
    free(cells);
    free(x);
    json_decref(root);
    free(html);
    unlink(db_path);
}

/* Over the budget, every map is max-pooled to one side that fits; below one cell per map the
 * page is refused; a failed write leaves no file. */
static void test_viewer_budget(void **state)
{
    (void)state;
    char db_path[512];
    tmp_path(db_path, sizeof db_path, "budget.db");
    new_db(db_path);
    add_run(db_path, 1, "complete", "trace", 300, 1, 3, NULL);
    float *v = malloc(300 * 300 * sizeof *v);
    assert_non_null(v);
    causal_uniform(v, 300, 300);
    v[299 * 300 + 7] = 0.75f; /* one bright cell the pooling must keep */
    for (int h = 0; h < 3; h++)
        add_map(db_path, 1, 0, h, 300, 300, v, true);
    free(v);
    lp_viewer_report rep;
    char *html = write_viewer(db_path, 1, 30000, &rep, "budget.html");
    assert_true(rep.max_block > 1);
    assert_true(rep.map_cells <= 30000);
    json_t *root = page_data(html);
    json_t *h0 = json_array_get(json_object_get(json_object_get(root, "maps"), "heads"), 0);
    int64_t block = json_integer_value(json_object_get(h0, "block"));
    int64_t cols = json_integer_value(json_object_get(h0, "cols"));
    assert_int_equal(block, rep.max_block);
    assert_int_equal(cols, (300 + block - 1) / block);
    size_t n;
    uint8_t *cells = page_block(html, "m0", &n);
    assert_int_equal(n, (size_t)(cols * cols));
    /* the bright cell survives pooling (the head's max is row 0's 1.0) */
    assert_int_equal(cells[(299 / block) * cols + 7 / block], code_of(0.75, 1.0));
    free(cells);
    json_decref(root);
    free(html);

    lp_store_run run;
    lp_store *db = open_run(db_path, 1, &run);
    lp_render_options opt;
    lp_render_options_default(&opt);
    lp_viewer_options vopt;
    lp_viewer_options_default(&vopt);
    vopt.max_map_bytes = 2;
    lp_error err = {0};
    char out[512];
    tmp_path(out, sizeof out, "refused.html");
    assert_int_equal(lp_render_viewer(db, &run, &opt, &vopt, out, NULL, &err), LP_ERR_RANGE);
    assert_non_null(strstr(err.msg, "--max-map-bytes"));
    assert_false(file_exists(out));
    lp_viewer_options_default(&vopt);
    assert_int_equal(lp_render_viewer(db, &run, &opt, &vopt, "/nonexistent/dir/v.html", NULL, &err),
                     LP_ERR_IO);
    assert_false(file_exists("/nonexistent/dir/v.html.tmp"));
    close_run(db, &run);
    unlink(db_path);
}

/* Export to safetensors and read it back with loupe's own reader: the stacked maps, the per-head
 * names when a head is missing, statistics and token ids with their values. */
static void check_export(const char *db_path, int64_t run_id, const char *tensor, int n_dims,
                         const float *planted)
{
    lp_store_run run;
    lp_store *db = open_run(db_path, run_id, &run);
    char out[512];
    tmp_path(out, sizeof out, "export.safetensors");
    lp_error err = {0};
    lp_export_report rep;
    if (lp_render_export(db, &run, out, &rep, &err) != LP_OK)
        fail_msg("%s", err.msg);
    close_run(db, &run);
    lp_weights *w;
    if (lp_weights_open(out, &w, &err) != LP_OK)
        fail_msg("%s", err.msg);
    const lp_tensor *t = lp_weights_find_name(w, tensor);
    assert_non_null(t);
    assert_int_equal(t->n_dims, n_dims);
    assert_int_equal(t->shape[n_dims - 1], 5);
    float row[5];
    for (int64_t r = 0; r < 5; r++) {
        assert_int_equal(lp_tensor_rows_f32(t, r, 1, row, &err), LP_OK); /* head 0's rows first */
        for (int k = 0; k < 5; k++)
            assert_true(row[k] == planted[r * 5 + k]);
    }
    const lp_tensor *ids = lp_weights_find_name(w, "tokens");
    assert_non_null(ids);
    assert_int_equal(ids->dtype, LP_DTYPE_I32);
    int32_t id4;
    memcpy(&id4, (const char *)ids->data + 16, 4);
    assert_int_equal(id4, 104); /* add_tokens numbers them from 100 */
    const lp_tensor *ent = lp_weights_find_name(w, "head_stats.entropy");
    assert_non_null(ent);
    double e;
    memcpy(&e, (const char *)ent->data + 8, 8);
    assert_true(fabs(e - 0.1) < 1e-12); /* layer 0 head 1 */
    lp_weights_close(w);
    unlink(out);
}

static void test_export_safetensors(void **state)
{
    (void)state;
    char db_path[512];
    tmp_path(db_path, sizeof db_path, "export.db");
    planted_db(db_path);
    float v[25];
    planted_values(v);
    check_export(db_path, 1, "attention.layer_0.head_0", 2, v); /* head 2 missing: one per head */
    float w[25];
    causal_uniform(w, 5, 5);
    add_map(db_path, 1, 0, 2, 5, 5, w, false);
    lp_test_sql_exec(db_path, "DELETE FROM attention WHERE head = 1");
    add_map(db_path, 1, 0, 1, 5, 5, w, false);
    check_export(db_path, 1, "attention", 4, v); /* every head: one [1, 3, 5, 5] tensor */

    lp_store_run run;
    lp_store *db = open_run(db_path, 1, &run);
    lp_error err = {0};
    char out[512];
    tmp_path(out, sizeof out, "export.txt");
    assert_int_equal(lp_render_export(db, &run, out, NULL, &err), LP_ERR_USAGE);
    assert_int_equal(lp_render_export(db, &run, "/nonexistent/x.npz", NULL, &err), LP_ERR_IO);
    close_run(db, &run);
    unlink(db_path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_viewer_data),
        cmocka_unit_test(test_viewer_budget),
        cmocka_unit_test(test_export_safetensors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
