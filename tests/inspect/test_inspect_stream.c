/* `loupe inspect --json` streams its tensors array (issue 7): lp_inspect_write_json() must give
 * byte for byte the document that dumping the whole lp_inspect_report() tree gives, for
 * synthetic safetensors images (many tensors, awkward names, NaN/Inf, failing checks absent:
 * no config) and for the real stories260K files in every format (skipped without ../shared). */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include "test_util.h"

#include <jansson.h>

#include "inspect/inspect.h"
#include "inspect/weights/report_internal.h"
#include "inspect/weights/weights_internal.h"

/* The reference: the whole tree dumped the way the CLI did before streaming. */
static char *tree_dump(const lp_weights *w, bool stats)
{
    json_t *report = NULL;
    lp_error err = {0};
    if (lp_inspect_report(w, stats, &report, &err) != LP_OK)
        fail_msg("lp_inspect_report: %s", err.msg);
    char *text = json_dumps(report, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    json_decref(report);
    assert_non_null(text);
    size_t len = strlen(text);
    char *with_newline = malloc(len + 2);
    assert_non_null(with_newline);
    memcpy(with_newline, text, len);
    memcpy(with_newline + len, "\n", 2);
    free(text);
    return with_newline;
}

static char *stream_dump(const lp_weights *w, bool stats)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    lp_error err = {0};
    lp_status status = lp_inspect_write_json(w, stats, f, &err);
    fclose(f);
    if (status != LP_OK)
        fail_msg("lp_inspect_write_json: %s", err.msg);
    assert_non_null(text);
    return text;
}

static void assert_same_document(const lp_weights *w, const char *what)
{
    for (int stats = 0; stats <= 1; stats++) {
        char *want = tree_dump(w, stats);
        char *got = stream_dump(w, stats);
        if (strcmp(want, got) != 0) {
            size_t i = 0;
            while (want[i] && want[i] == got[i])
                i++;
            fail_msg("%s%s: streamed JSON differs from the tree at byte %zu: got '%.40s', "
                     "want '%.40s'",
                     what, stats ? " --stats" : "", i, got + i, want + i);
        }
        free(want);
        free(got);
    }
}

/* A safetensors image: n tensors of f32 with shapes [1 + i % 3] or [2, 3]; value 0 of some
 * tensors is NaN or Inf; names include a quote, a backslash, a newline and non-ASCII (escaped
 * differently by jansson, and the newline must not be mistaken for formatting). */
static uint8_t *make_image(size_t n, size_t *size)
{
    size_t cap = 200 + n * 160, hlen = 0;
    char *header = malloc(cap);
    assert_non_null(header);
    hlen += (size_t)snprintf(header + hlen, cap - hlen, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t offset = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t elems = i % 5 == 4 ? 6 : 1 + i % 3;
        const char *shape = elems == 6 ? "[2,3]" : elems == 1 ? "[1]" : elems == 2 ? "[2]" : "[3]";
        const char *odd = i == 1 ? "q\\\"uote" : i == 2 ? "back\\\\slash" : i == 3 ? "new\\nline"
                        : i == 4 ? "caf\xc3\xa9" : "";
        hlen += (size_t)snprintf(header + hlen, cap - hlen,
                                 ",\"model.layers.%zu.mlp.%sweight\":{\"dtype\":\"F32\",\"shape\":%s,"
                                 "\"data_offsets\":[%llu,%llu]}",
                                 i, odd, shape, (unsigned long long)offset,
                                 (unsigned long long)(offset + 4 * elems));
        offset += 4 * elems;
        assert_true(hlen < cap);
    }
    hlen += (size_t)snprintf(header + hlen, cap - hlen, "}");
    *size = 8 + hlen + offset;
    uint8_t *image = calloc(1, *size);
    assert_non_null(image);
    for (int b = 0; b < 8; b++)
        image[b] = (uint8_t)((uint64_t)hlen >> (8 * b));
    memcpy(image + 8, header, hlen);
    free(header);
    uint64_t at = 8 + hlen;
    for (size_t i = 0; i < n; i++) {
        uint64_t elems = i % 5 == 4 ? 6 : 1 + i % 3;
        for (uint64_t e = 0; e < elems; e++) {
            float v = (float)i * 0.37f - (float)e * 1.5f + 1e-7f;
            uint32_t bits;
            memcpy(&bits, &v, 4);
            if (e == 0 && i % 97 == 5)
                bits = 0x7fc00000u; /* NaN */
            if (e == 0 && i % 89 == 7)
                bits = 0xff800000u; /* -Inf */
            memcpy(image + at + 4 * e, &bits, 4);
        }
        at += 4 * elems;
    }
    return image;
}

static void check_image(size_t n)
{
    size_t size;
    uint8_t *image = make_image(n, &size);
    lp_weights *w = NULL;
    lp_error err = {0};
    if (lp_weights_open_safetensors_memory(image, size, "many.safetensors", &w, &err) != LP_OK)
        fail_msg("open: %s", err.msg);
    assert_int_equal(lp_weights_count(w), n);
    char what[64];
    snprintf(what, sizeof what, "%zu synthetic tensors", n);
    assert_same_document(w, what);
    lp_weights_close(w);
    free(image);
}

static void test_synthetic_few(void **state)
{
    (void)state;
    check_image(1);
    check_image(7);
}

static void test_synthetic_many(void **state)
{
    (void)state;
    check_image(3000);
}

/* The streamed document must still be one valid JSON document with every tensor in order. */
static void test_stream_parses(void **state)
{
    (void)state;
    size_t size, n = 500;
    uint8_t *image = make_image(n, &size);
    lp_weights *w = NULL;
    lp_error err = {0};
    if (lp_weights_open_safetensors_memory(image, size, "many.safetensors", &w, &err) != LP_OK)
        fail_msg("open: %s", err.msg);
    char *text = stream_dump(w, true);
    json_error_t jerr;
    json_t *doc = json_loads(text, 0, &jerr);
    if (!doc)
        fail_msg("streamed JSON does not parse: %s at line %d", jerr.text, jerr.line);
    json_t *tensors = json_object_get(doc, "tensors");
    assert_int_equal(json_array_size(tensors), n);
    assert_string_equal(json_string_value(json_object_get(json_array_get(tensors, 3), "name")),
                        "model.layers.3.mlp.new\nlineweight");
    assert_true(json_is_null(json_object_get(json_object_get(json_array_get(tensors, 5), "stats"),
                                             "min")) == false);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_array_get(tensors, 5), "stats"), "nan")),
                     1);
    json_decref(doc);
    free(text);
    lp_weights_close(w);
    free(image);
}

static void test_shared_models(void **state)
{
    (void)state;
    if (!lp_test_shared_dir())
        skip();
    static const char *const rel[] = {
        "models/stories260K/stories260K.bin",
        "models/stories260K/hf",
        "models/stories260K/stories260K.gguf",
        "models/stories260K/quant/stories260K-Q4_K_M.gguf",
        "models/stories260K/quant/stories260K-Q6_K.gguf",
        "models/stories260K/quant/stories260K-TQ2_0.gguf",
    };
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char path[1024];
        lp_test_shared_path(path, sizeof path, rel[i]);
        lp_weights *w = NULL;
        lp_error err = {0};
        if (lp_weights_open(path, &w, &err) != LP_OK)
            fail_msg("open %s: %s", path, err.msg);
        assert_same_document(w, rel[i]);
        lp_weights_close(w);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthetic_few),
        cmocka_unit_test(test_synthetic_many),
        cmocka_unit_test(test_stream_parses),
        cmocka_unit_test(test_shared_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
