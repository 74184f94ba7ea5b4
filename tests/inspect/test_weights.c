/* Tests of the tensor catalogue: safetensors (valid, malformed, sharded, sparse), llama2.c,
 * GGUF through lp_weights, role mapping, inspect checks and statistics, and golden comparisons
 * of the three stories260K formats and its quantized GGUFs. */
#define _DEFAULT_SOURCE /* mincore */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"
#include "weights_test_util.h"

#include <fcntl.h>
#include <math.h>
#include <sys/mman.h>
#include <unistd.h>

#include <jansson.h>

#include "core/bytes.h"
#include "core/dtype.h"
#include "gguf_writer.h"
#include "gguf_gpt_oss.h"
#include "inspect/formats/quant.h"
#include "ref_forward.h"
#include "inspect/inspect.h"
#include "inspect/formats/safetensors_write.h"
#include "inspect/weights/report_internal.h"
#include "inspect/weights/weights_internal.h"

/* ---- helpers ------------------------------------------------------------------------------ */

/* cmocka's assert_float_equal compares in float; these checks need double. */
#define assert_close(got, want, tol) check_close((double)(got), (double)(want), (double)(tol), \
                                                 #got, __FILE__, __LINE__)
static void check_close(double got, double want, double tol, const char *expr, const char *file,
                        int line)
{
    if (!(fabs(got - want) <= tol))
        fail_msg("%s:%d: %s = %.17g, want %.17g (tolerance %g)", file, line, expr, got, want, tol);
}

static void write_text(const char *path, const char *text) { write_bytes(path, text, strlen(text)); }

static const char *tiny_config =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 8,"
    " \"intermediate_size\": 12, \"num_hidden_layers\": 2, \"num_attention_heads\": 2,"
    " \"num_key_value_heads\": 1, \"vocab_size\": 16, \"max_position_embeddings\": 32,"
    " \"rms_norm_eps\": 1e-5, \"tie_word_embeddings\": %s, \"torch_dtype\": \"float32\"}";

/* A complete tiny llama (hidden 8, 2 heads of 4, 1 kv head, ffn 12, 2 layers, vocab 16) with
 * value v = index * 0.01 + tensor number; skip names a tensor to leave out, extra adds one. */
static void write_tiny_llama(const char *dir, bool tied, bool with_lm_head, const char *skip,
                             const char *wrong_shape, const char *extra)
{
    char path[600], name[128];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char config[1024];
    snprintf(config, sizeof config, tiny_config, tied ? "true" : "false");
    write_text(path, config);
    lp_st_writer *st;
    lp_error err = {0};
    assert_int_equal(lp_st_writer_create(&st, &err), LP_OK);
    float data[16 * 12];
    int serial = 0;
#define ADD(NAME, ND, ...)                                                                      \
    do {                                                                                        \
        int64_t shape_[] = {__VA_ARGS__};                                                       \
        int64_t n_ = 1;                                                                         \
        for (int d_ = 0; d_ < (ND); d_++)                                                       \
            n_ *= shape_[d_];                                                                   \
        if (wrong_shape && strcmp(wrong_shape, (NAME)) == 0)                                    \
            shape_[0] += 1, n_ += n_ / (shape_[0] - 1);                                         \
        for (int64_t i_ = 0; i_ < n_; i_++)                                                     \
            data[i_] = (float)serial + 0.01f * (float)i_;                                       \
        serial++;                                                                               \
        if (!skip || strcmp(skip, (NAME)) != 0)                                                 \
            assert_int_equal(lp_st_writer_add(st, (NAME), LP_DTYPE_F32, (ND), shape_, data, &err), \
                             LP_OK);                                                            \
    } while (0)
    ADD("model.embed_tokens.weight", 2, 16, 8);
    for (int l = 0; l < 2; l++) {
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        ADD(name, 1, 8);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.q_proj.weight", l);
        ADD(name, 2, 8, 8);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.k_proj.weight", l);
        ADD(name, 2, 4, 8);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.v_proj.weight", l);
        ADD(name, 2, 4, 8);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.o_proj.weight", l);
        ADD(name, 2, 8, 8);
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        ADD(name, 1, 8);
        snprintf(name, sizeof name, "model.layers.%d.mlp.gate_proj.weight", l);
        ADD(name, 2, 12, 8);
        snprintf(name, sizeof name, "model.layers.%d.mlp.up_proj.weight", l);
        ADD(name, 2, 12, 8);
        snprintf(name, sizeof name, "model.layers.%d.mlp.down_proj.weight", l);
        ADD(name, 2, 8, 12);
    }
    ADD("model.norm.weight", 1, 8);
    if (with_lm_head)
        ADD("lm_head.weight", 2, 16, 8);
    if (extra)
        ADD(extra, 1, 3);
#undef ADD
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(lp_st_writer_write(st, path, &err), LP_OK);
    lp_st_writer_destroy(st);
}

static void make_dir(char *buf, size_t size, const char *name)
{
    tmp_path(buf, size, name);
    mkdir(buf, 0755);
}

static const char *shared(char *buf, size_t size, const char *rel)
{
    if (!lp_test_shared_dir())
        return NULL;
    return lp_test_shared_path(buf, size, rel);
}

static json_t *report_of(const lp_weights *w, bool stats)
{
    json_t *r = NULL;
    lp_error err = {0};
    if (lp_inspect_report(w, stats, &r, &err) != LP_OK)
        fail_msg("lp_inspect_report: %s", err.msg);
    return r;
}

static json_t *find_check(json_t *report, const char *name)
{
    json_t *checks = json_object_get(report, "checks");
    for (size_t i = 0; i < json_array_size(checks); i++)
        if (strcmp(json_string_value(json_object_get(json_array_get(checks, i), "name")), name) == 0)
            return json_array_get(checks, i);
    fail_msg("no check '%s'", name);
    return NULL;
}

static bool check_passed(json_t *report, const char *name)
{
    return json_is_true(json_object_get(find_check(report, name), "passed"));
}

/* ---- safetensors -------------------------------------------------------------------------- */

static void test_safetensors_valid(void **state)
{
    (void)state;
    char dir[600];
    make_dir(dir, sizeof dir, "tiny_llama");
    write_tiny_llama(dir, true, false, NULL, NULL, NULL);
    lp_weights *w = open_ok(dir);
    assert_int_equal(lp_weights_format_of(w), LP_FORMAT_SAFETENSORS);
    assert_int_equal(lp_weights_count(w), 1 + 2 * 9 + 1);
    assert_non_null(lp_weights_arch(w));
    assert_int_equal(lp_weights_arch(w)->rope_layout, LP_ROPE_HALVES);
    const lp_tensor *k1 = lp_weights_find(w, LP_ROLE_ATTN_K, 1, -1, false);
    assert_non_null(k1);
    assert_string_equal(k1->name, "model.layers.1.self_attn.k_proj.weight");
    assert_int_equal(k1->shape[0], 4);
    assert_int_equal(k1->shape[1], 8);
    assert_ptr_equal(lp_weights_find_name(w, k1->name), k1);
    assert_null(lp_weights_find(w, LP_ROLE_LM_HEAD, -1, -1, false));
    assert_null(lp_weights_find_name(w, "model.layers.7.self_attn.k_proj.weight"));
    /* serial numbers: embed 0, layer l tensors 1 + 9l .. ; k_proj of layer 1 is 1 + 9 + 2 */
    float row[8];
    lp_error err = {0};
    assert_int_equal(lp_tensor_rows_f32(k1, 2, 1, row, &err), LP_OK);
    for (int i = 0; i < 8; i++)
        assert_close(row[i], 12.0f + 0.01f * (float)(16 + i), 1e-6);
    assert_int_equal(lp_tensor_rows_f32(k1, 3, 2, row, &err), LP_ERR_RANGE);
    /* the data pointer is the file offset inside the mapping */
    assert_true(k1->file_offset % 8 == 0);
    json_t *r = report_of(w, false);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "params"), "total")),
                     16 * 8 + 2 * (8 + 64 + 32 + 32 + 64 + 8 + 96 * 3) + 8);
    assert_true(check_passed(r, "expected_tensors"));
    assert_true(check_passed(r, "tensor_shapes"));
    assert_true(check_passed(r, "unexpected_tensors"));
    assert_true(check_passed(r, "tied_embeddings"));
    json_decref(r);
    lp_weights_close(w);
}

static void test_safetensors_dtypes(void **state)
{
    (void)state;
    char path[600];
    tmp_path(path, sizeof path, "dtypes.safetensors");
    lp_st_writer *st;
    lp_error err = {0};
    assert_int_equal(lp_st_writer_create(&st, &err), LP_OK);
    int64_t shape[1] = {4};
    uint16_t f16[4] = {0x3c00, 0xc000, 0x7c00, 0x0001};   /* 1, -2, inf, 2^-24 */
    uint16_t bf16[4] = {0x3f80, 0xbf80, 0x4000, 0x0000};  /* 1, -1, 2, 0 */
    int8_t i8[4] = {-128, -1, 0, 127};
    uint8_t b[4] = {0, 1, 0, 1};
    int64_t i64[4] = {-5, 0, 7, 1 << 20};
    double f64[4] = {0.5, -0.25, 1e30, -3.0};
    uint8_t e4m3[4] = {0x38, 0x7e, 0xb8, 0x00}; /* 1, 448, -1, 0 */
    uint8_t f4[2] = {0x21, 0xF9};               /* 0.5, 1 | -0.5, -6: low nibble first */
    uint8_t e8m0[4] = {127, 128, 0, 120};       /* 1, 2, 2^-127, 2^-7 */
    assert_int_equal(lp_st_writer_add(st, "f16", LP_DTYPE_F16, 1, shape, f16, &err), LP_OK);
    assert_int_equal(lp_st_writer_add(st, "bf16", LP_DTYPE_BF16, 1, shape, bf16, &err), LP_OK);
    assert_int_equal(lp_st_writer_add(st, "i8", LP_DTYPE_I8, 1, shape, i8, &err), LP_OK);
    assert_int_equal(lp_st_writer_add(st, "bool", LP_DTYPE_BOOL, 1, shape, b, &err), LP_OK);
    assert_int_equal(lp_st_writer_add(st, "i64", LP_DTYPE_I64, 1, shape, i64, &err), LP_OK);
    assert_int_equal(lp_st_writer_add(st, "f64", LP_DTYPE_F64, 1, shape, f64, &err), LP_OK);
    assert_int_equal(lp_st_writer_add(st, "e4m3", LP_DTYPE_F8_E4M3, 1, shape, e4m3, &err), LP_OK);
    assert_int_equal(lp_st_writer_add(st, "f4", LP_DTYPE_F4_E2M1, 1, shape, f4, &err), LP_OK);
    assert_int_equal(lp_st_writer_add(st, "e8m0", LP_DTYPE_F8_E8M0, 1, shape, e8m0, &err), LP_OK);
    assert_int_equal(lp_st_writer_write(st, path, &err), LP_OK);
    lp_st_writer_destroy(st);
    lp_weights *w = open_ok(path);
    assert_null(lp_weights_arch(w)); /* no config.json beside it */
    static const struct {
        const char *name;
        float want[4];
    } cases[] = {
        {"f16", {1.0f, -2.0f, INFINITY, 5.9604644775390625e-08f}},
        {"bf16", {1.0f, -1.0f, 2.0f, 0.0f}},
        {"i8", {-128.0f, -1.0f, 0.0f, 127.0f}},
        {"bool", {0.0f, 1.0f, 0.0f, 1.0f}},
        {"i64", {-5.0f, 0.0f, 7.0f, 1048576.0f}},
        {"f64", {0.5f, -0.25f, 1e30f, -3.0f}},
        {"e4m3", {1.0f, 448.0f, -1.0f, 0.0f}},
        {"f4", {0.5f, 1.0f, -0.5f, -6.0f}},
        {"e8m0", {1.0f, 2.0f, 0x1p-127f, 0x1p-7f}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const lp_tensor *t = lp_weights_find_name(w, cases[c].name);
        assert_non_null(t);
        float got[4];
        assert_int_equal(lp_tensor_rows_f32(t, 0, 1, got, &err), LP_OK);
        for (int i = 0; i < 4; i++)
            if (got[i] != cases[c].want[i])
                fail_msg("%s[%d] = %g, want %g", cases[c].name, i, (double)got[i],
                         (double)cases[c].want[i]);
    }
    /* stats over the f16 tensor: the inf is counted, not averaged */
    json_t *r = report_of(w, true);
    json_t *tensors = json_object_get(r, "tensors");
    json_t *s = NULL;
    for (size_t i = 0; i < json_array_size(tensors); i++)
        if (strcmp(json_string_value(json_object_get(json_array_get(tensors, i), "name")), "f16") == 0)
            s = json_object_get(json_array_get(tensors, i), "stats");
    assert_non_null(s);
    assert_int_equal(json_integer_value(json_object_get(s, "inf")), 1);
    assert_int_equal(json_integer_value(json_object_get(s, "nan")), 0);
    assert_close(json_real_value(json_object_get(s, "min")), -2.0, 0);
    assert_close(json_real_value(json_object_get(s, "max")), 1.0, 0);
    assert_close(json_real_value(json_object_get(s, "absmax")), 2.0, 0);
    double mean = (1.0 - 2.0 + 5.9604644775390625e-08) / 3.0;
    assert_close(json_real_value(json_object_get(s, "mean")), mean, 1e-12);
    assert_false(check_passed(r, "finite_values"));
    json_decref(r);
    lp_weights_close(w);
}

/* Statistics over a tensor larger than one conversion chunk, with NaNs, against a two-pass
 * double-precision computation. */
static void test_stats_chunks(void **state)
{
    (void)state;
    char path[600];
    tmp_path(path, sizeof path, "stats.safetensors");
    const int64_t n = 3 * 65536 + 77;
    float *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    uint32_t x = 12345;
    for (int64_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        v[i] = (float)(x >> 8) / 16777216.0f * 6.0f - 2.0f + 100.0f; /* offset: tests cancellation */
    }
    v[5] = NAN;
    v[70000] = NAN;
    v[n - 1] = -INFINITY;
    double sum = 0, mn = INFINITY, mx = -INFINITY;
    int64_t cnt = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(v[i])) {
            sum += (double)v[i];
            mn = fmin(mn, (double)v[i]);
            mx = fmax(mx, (double)v[i]);
            cnt++;
        }
    double mean = sum / (double)cnt, m2 = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(v[i]))
            m2 += ((double)v[i] - mean) * ((double)v[i] - mean);
    lp_st_writer *st;
    lp_error err = {0};
    assert_int_equal(lp_st_writer_create(&st, &err), LP_OK);
    int64_t shape[2] = {n, 1};
    assert_int_equal(lp_st_writer_add(st, "big", LP_DTYPE_F32, 2, shape, v, &err), LP_OK);
    assert_int_equal(lp_st_writer_write(st, path, &err), LP_OK);
    lp_st_writer_destroy(st);
    free(v);
    lp_weights *w = open_ok(path);
    json_t *r = report_of(w, true);
    json_t *s = json_object_get(json_array_get(json_object_get(r, "tensors"), 0), "stats");
    assert_int_equal(json_integer_value(json_object_get(s, "nan")), 2);
    assert_int_equal(json_integer_value(json_object_get(s, "inf")), 1);
    assert_close(json_real_value(json_object_get(s, "min")), mn, 0);
    assert_close(json_real_value(json_object_get(s, "max")), mx, 0);
    assert_close(json_real_value(json_object_get(s, "mean")), mean, 1e-9);
    assert_close(json_real_value(json_object_get(s, "std")), sqrt(m2 / (double)cnt), 1e-9);
    json_decref(r);
    lp_weights_close(w);
}

static void test_safetensors_malformed(void **state)
{
    (void)state;
    char path[600];
    tmp_path(path, sizeof path, "bad.safetensors");
    /* too short for the length field */
    write_bytes(path, "\x10\x00\x00", 3);
    expect_open_error(path, LP_ERR_FORMAT, "too short", NULL);
    /* header length past the end */
    {
        uint8_t buf[16] = {0};
        uint64_t len = 1000;
        memcpy(buf, &len, 8);
        memcpy(buf + 8, "{}      ", 8);
        write_bytes(path, buf, sizeof buf);
        expect_open_error(path, LP_ERR_FORMAT, "header length 1000 at byte 0", "past the end");
        len = 100000001;
        memcpy(buf, &len, 8);
        write_bytes(path, buf, sizeof buf);
        expect_open_error(path, LP_ERR_FORMAT, "exceeds the limit of 100000000", NULL);
        len = UINT64_MAX; /* must not wrap around when added to 8 */
        memcpy(buf, &len, 8);
        write_bytes(path, buf, sizeof buf);
        expect_open_error(path, LP_ERR_FORMAT, "exceeds the limit", NULL);
    }
    static const struct {
        const char *header;
        size_t data_len;
        const char *needle1, *needle2;
    } cases[] = {
        {"[1, 2]", 0, "does not start with '{'", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}", 4, "byte", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
         "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
         8, "duplicate", NULL},
        {"{\"a\xff\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "byte",
         NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [12, 8]}}", 16,
         "data_offsets [12, 8] end before start", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 4,
         "past the end of the file", "tensor 'a'"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
         "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
         12, "overlap", "'b'"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
         "\"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}",
         12, "gap", "'b'"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8,
         "hold 8 bytes but dtype F32 x shape needs 12", NULL},
        {"{\"a\": {\"dtype\": \"F33\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         "unknown dtype 'F33'", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4], "
         "\"data_offsets\": [0, 4]}}",
         4, "overflows", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4,
         "shape[0] is not a non-negative integer", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 8,
         "cover 4 bytes", "holds 8"},
        {"{\"__metadata__\": {\"format\": 1}}", 0, "'__metadata__'", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "data_offsets", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_raw_st(path, cases[i].header, cases[i].data_len);
        expect_open_error(path, LP_ERR_FORMAT, cases[i].needle1, cases[i].needle2);
    }
    /* an empty but valid file: no tensors */
    write_raw_st(path, "{}", 0);
    lp_weights *w = open_ok(path);
    assert_int_equal(lp_weights_count(w), 0);
    lp_weights_close(w);
    /* a dtype of a later safetensors version is unsupported, not malformed */
    write_raw_st(path, "{\"a\": {\"dtype\": \"F6_E2M3\", \"shape\": [4], \"data_offsets\": [0, 3]}}", 3);
    expect_open_error(path, LP_ERR_UNSUPPORTED, "F6_E2M3", NULL);
    /* F4 packs two values a byte: a shape that ends mid-byte is refused as the reference does */
    write_raw_st(path, "{\"a\": {\"dtype\": \"F4\", \"shape\": [3], \"data_offsets\": [0, 2]}}", 2);
    expect_open_error(path, LP_ERR_FORMAT, "tensor 'a': 3 values of F4 do not fill whole bytes", NULL);
    write_raw_st(path, "{\"a\": {\"dtype\": \"F4\", \"shape\": [2, 3], \"data_offsets\": [0, 4]}}", 4);
    expect_open_error(path, LP_ERR_FORMAT, "hold 4 bytes but dtype F4 x shape needs 3", NULL);
    /* the reference loader (serde_json) skips whitespace before the object */
    write_raw_st(path, " \t\r\n{\"a\": {\"dtype\": \"F4\", \"shape\": [2, 3], \"data_offsets\": [0, 3]}}", 3);
    w = open_ok(path);
    assert_int_equal(lp_weights_count(w), 1);
    assert_int_equal(lp_weights_find_name(w, "a")->dtype, LP_DTYPE_F4_E2M1);
    lp_weights_close(w);
    write_raw_st(path, "   \n", 0);
    expect_open_error(path, LP_ERR_FORMAT, "header of 4 bytes at byte 8 holds only whitespace", NULL);
    write_raw_st(path, "  x{}", 0);
    expect_open_error(path, LP_ERR_FORMAT, "header does not start with '{' (byte 10 is 0x78)", NULL);
    /* truncation of a real file, at every 97th byte: always an error, never a crash */
    char dir[600];
    make_dir(dir, sizeof dir, "trunc_src");
    write_tiny_llama(dir, true, false, NULL, NULL, NULL);
    char src[700];
    snprintf(src, sizeof src, "%s/model.safetensors", dir);
    lp_mapped_file map;
    lp_error err = {0};
    assert_int_equal(lp_map_file(src, &map, &err), LP_OK);
    for (size_t cut = 0; cut < map.size; cut += 97) {
        write_bytes(path, map.data, cut);
        lp_weights *tw = NULL;
        assert_int_not_equal(lp_weights_open(path, &tw, &err), LP_OK);
        assert_null(tw);
    }
    lp_unmap_file(&map);
}

static void test_sharded(void **state)
{
    (void)state;
    char dir[600], path[700];
    make_dir(dir, sizeof dir, "sharded");
    lp_error err = {0};
    float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t shape[1] = {8};
    for (int s = 0; s < 2; s++) {
        lp_st_writer *st;
        assert_int_equal(lp_st_writer_create(&st, &err), LP_OK);
        char name[64];
        snprintf(name, sizeof name, "t%d", 2 * s);
        assert_int_equal(lp_st_writer_add(st, name, LP_DTYPE_F32, 1, shape, data, &err), LP_OK);
        snprintf(name, sizeof name, "t%d", 2 * s + 1);
        assert_int_equal(lp_st_writer_add(st, name, LP_DTYPE_F32, 1, shape, data, &err), LP_OK);
        snprintf(path, sizeof path, "%s/model-0000%d-of-00002.safetensors", dir, s + 1);
        assert_int_equal(lp_st_writer_write(st, path, &err), LP_OK);
        lp_st_writer_destroy(st);
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_text(path, "{\"metadata\": {\"total_size\": 128}, \"weight_map\": {"
                     "\"t0\": \"model-00001-of-00002.safetensors\","
                     "\"t1\": \"model-00001-of-00002.safetensors\","
                     "\"t2\": \"model-00002-of-00002.safetensors\","
                     "\"t3\": \"model-00002-of-00002.safetensors\"}}");
    lp_weights *w = open_ok(dir);
    assert_int_equal(lp_weights_count(w), 4);
    assert_int_equal(lp_weights_find_name(w, "t3")->file_index, 1);
    assert_int_equal(lp_weights_find_name(w, "t0")->file_index, 0);
    float got[8];
    assert_int_equal(lp_tensor_rows_f32(lp_weights_find_name(w, "t3"), 0, 1, got, &err), LP_OK);
    assert_close(got[7], 8.0f, 0);
    lp_weights_close(w);
    /* listed in the wrong shard */
    write_text(path, "{\"weight_map\": {"
                     "\"t0\": \"model-00002-of-00002.safetensors\","
                     "\"t1\": \"model-00001-of-00002.safetensors\","
                     "\"t2\": \"model-00002-of-00002.safetensors\","
                     "\"t3\": \"model-00002-of-00002.safetensors\"}}");
    expect_open_error(dir, LP_ERR_FORMAT, "'t0'", "stored in 'model-00001-of-00002.safetensors'");
    /* a shard holds a tensor the index does not list */
    write_text(path, "{\"weight_map\": {"
                     "\"t0\": \"model-00001-of-00002.safetensors\","
                     "\"t2\": \"model-00002-of-00002.safetensors\","
                     "\"t3\": \"model-00002-of-00002.safetensors\"}}");
    expect_open_error(dir, LP_ERR_FORMAT, "'t1'", "does not list");
    /* the index names a missing shard */
    write_text(path, "{\"weight_map\": {\"t0\": \"model-00009-of-00002.safetensors\"}}");
    expect_open_error(dir, LP_ERR_NOT_FOUND, "model-00009-of-00002.safetensors", NULL);
    /* path traversal in a shard name */
    write_text(path, "{\"weight_map\": {\"t0\": \"../x.safetensors\"}}");
    expect_open_error(dir, LP_ERR_FORMAT, "shard file name", NULL);
    /* the same tensor in two shards */
    {
        lp_st_writer *st;
        assert_int_equal(lp_st_writer_create(&st, &err), LP_OK);
        assert_int_equal(lp_st_writer_add(st, "t0", LP_DTYPE_F32, 1, shape, data, &err), LP_OK);
        assert_int_equal(lp_st_writer_add(st, "t2", LP_DTYPE_F32, 1, shape, data, &err), LP_OK);
        char p2[700];
        snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", dir);
        assert_int_equal(lp_st_writer_write(st, p2, &err), LP_OK);
        lp_st_writer_destroy(st);
    }
    write_text(path, "{\"weight_map\": {"
                     "\"t0\": \"model-00001-of-00002.safetensors\","
                     "\"t1\": \"model-00001-of-00002.safetensors\","
                     "\"t2\": \"model-00002-of-00002.safetensors\"}}");
    expect_open_error(dir, LP_ERR_FORMAT, "tensor 't0' appears in both", NULL);
}

/* A multi-GiB sparse safetensors file: opening and inspecting it without --stats must leave
 * its data pages untouched. mincore() reports which pages of our own mapping are resident:
 * the data region is a hole that was never in the page cache, so any page found resident there
 * was faulted in by us (kernel read-around can add a few neighbours of the header page). */
static void test_sparse_header_only(void **state)
{
    (void)state;
    char path[600];
    tmp_path(path, sizeof path, "sparse.safetensors");
    const uint64_t rows = 131072, cols = 8192; /* 1 GiB of f32 per tensor, 4 tensors */
    char header[1024];
    uint64_t one = rows * cols * 4;
    int n = snprintf(header, sizeof header,
                     "{\"__metadata__\": {\"format\": \"pt\"},"
                     " \"model.embed_tokens.weight\": {\"dtype\": \"F32\", \"shape\": [%llu, %llu],"
                     " \"data_offsets\": [0, %llu]},"
                     " \"lm_head.weight\": {\"dtype\": \"F32\", \"shape\": [%llu, %llu],"
                     " \"data_offsets\": [%llu, %llu]},"
                     " \"a\": {\"dtype\": \"F32\", \"shape\": [%llu, %llu], \"data_offsets\": [%llu, %llu]},"
                     " \"b\": {\"dtype\": \"F32\", \"shape\": [%llu, %llu], \"data_offsets\": [%llu, %llu]}}",
                     (unsigned long long)rows, (unsigned long long)cols, (unsigned long long)one,
                     (unsigned long long)rows, (unsigned long long)cols, (unsigned long long)one,
                     (unsigned long long)(2 * one), (unsigned long long)rows,
                     (unsigned long long)cols, (unsigned long long)(2 * one),
                     (unsigned long long)(3 * one), (unsigned long long)rows,
                     (unsigned long long)cols, (unsigned long long)(3 * one),
                     (unsigned long long)(4 * one));
    while (n % 8)
        header[n++] = ' ';
    header[n] = '\0';
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    assert_true(fd >= 0);
    uint64_t len = (uint64_t)n;
    assert_int_equal(write(fd, &len, 8), 8);
    assert_int_equal(write(fd, header, (size_t)n), n);
    if (ftruncate(fd, (off_t)(8 + (uint64_t)n + 4 * one)) != 0) {
        close(fd);
        unlink(path);
        skip(); /* a filesystem without sparse files or a 4 GiB limit */
    }
    close(fd);
    lp_weights *w = open_ok(path);
    assert_int_equal(lp_weights_count(w), 4);
    json_t *r = report_of(w, false);
    json_t *params = json_object_get(r, "params");
    assert_int_equal(json_integer_value(json_object_get(params, "total")), 4 * rows * cols);
    json_t *tied = json_object_get(r, "tied_embeddings");
    assert_true(json_is_true(json_object_get(tied, "sampled")));
    assert_true(json_is_true(json_object_get(tied, "tied"))); /* both all zeros */
    json_decref(r);
    /* count resident pages over the whole data region */
    const lp_tensor *first = lp_weights_tensor(w, 0);
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t begin = ((uintptr_t)first->data) & ~(uintptr_t)(page - 1);
    size_t span = (size_t)(4 * one) + ((uintptr_t)first->data - begin);
    size_t n_pages = (span + (size_t)page - 1) / (size_t)page;
    unsigned char *vec = malloc(n_pages);
    assert_non_null(vec);
    assert_int_equal(mincore((void *)begin, span, vec), 0);
    size_t resident = 0;
    for (size_t i = 0; i < n_pages; i++)
        resident += vec[i] & 1;
    free(vec);
    /* the sampled classifier comparison reads 2 x 16 windows of 4 KiB (with random-access
     * advice, so no read-ahead around them); allow 1 MiB of the 4 GiB. */
    uint64_t resident_bytes = (uint64_t)resident * (uint64_t)page;
    print_message("sparse 4 GiB data region: %zu resident pages (%llu KiB) after inspect\n",
                  resident, (unsigned long long)(resident_bytes >> 10));
    assert_true(resident_bytes <= (1u << 20));
    lp_weights_close(w);
    unlink(path);
}

/* The same for GGUF: a 2 GiB F32 embedding whose data is a hole; open + report must leave it
 * untouched (mincore, as above). */
static void test_sparse_gguf_header_only(void **state)
{
    (void)state;
    char path[600];
    tmp_path(path, sizeof path, "sparse.gguf");
    lp_gw g;
    lp_gw_init(&g, 3);
    lp_gw_kv_str(&g, "general.architecture", "llama");
    lp_gw_kv_u32(&g, "llama.block_count", 1);
    lp_gw_kv_u32(&g, "llama.embedding_length", 4096);
    lp_gw_kv_u32(&g, "llama.feed_forward_length", 11008);
    lp_gw_kv_u32(&g, "llama.attention.head_count", 32);
    lp_gw_kv_u32(&g, "llama.context_length", 4096);
    lp_gw_kv_u32(&g, "llama.vocab_size", 131072);
    lp_gw_kv_f32(&g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    int64_t ne[2] = {4096, 131072};
    const uint64_t data_bytes = 4096ull * 131072ull * 4ull;
    lp_gw_tensor(&g, "token_embd.weight", 2, ne, 0, NULL, 0); /* data written as a hole below */
    assert_true(lp_gw_finish(&g));
    assert_true(lp_gw_write(&g, path));
    size_t data_start = g.data_start;
    lp_gw_free(&g);
    if (truncate(path, (off_t)(data_start + data_bytes)) != 0) {
        unlink(path);
        skip();
    }
    lp_weights *w = open_ok(path);
    const lp_tensor *t = lp_weights_find(w, LP_ROLE_TOKEN_EMBD, -1, -1, false);
    assert_non_null(t);
    assert_int_equal(t->n_bytes, data_bytes);
    json_t *r = report_of(w, false);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "params"), "total")),
                     4096ll * 131072ll);
    json_decref(r);
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t begin = ((uintptr_t)t->data + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    size_t span = (size_t)((uintptr_t)t->data + data_bytes - begin);
    size_t n_pages = span / (size_t)page;
    unsigned char *vec = malloc(n_pages);
    assert_non_null(vec);
    assert_int_equal(mincore((void *)begin, n_pages * (size_t)page, vec), 0);
    size_t resident = 0;
    for (size_t i = 0; i < n_pages; i++)
        resident += vec[i] & 1;
    free(vec);
    print_message("sparse 2 GiB GGUF tensor: %zu resident pages after open + inspect\n", resident);
    assert_true(resident <= 64); /* read-around of the header page at most */
    lp_weights_close(w);
    unlink(path);
}

/* ---- llama2.c ------------------------------------------------------------------------------- */

/* dim 8, hidden 12, 2 layers, 2 heads, 1 kv head, vocab +-16, seq 4: value = running index. */
static size_t write_llama2c(const char *path, int32_t vocab, size_t cut, size_t extra)
{
    int32_t hdr[7] = {8, 12, 2, 2, 1, vocab, 4};
    int32_t v = vocab < 0 ? -vocab : vocab;
    size_t n_floats = (size_t)v * 8 + 2 * 8 + 2 * 64 + 2 * 32 + 2 * 32 + 2 * 64 + 2 * 8 +
                      3 * 2 * 96 + 8 + 2 * 4 * 2 + (vocab < 0 ? (size_t)v * 8 : 0) + extra;
    size_t size = 28 + 4 * n_floats;
    uint8_t *buf = malloc(size);
    assert_non_null(buf);
    memcpy(buf, hdr, 28);
    for (size_t i = 0; i < n_floats; i++) {
        float f = (float)i;
        memcpy(buf + 28 + 4 * i, &f, 4);
    }
    write_bytes(path, buf, cut ? cut : size);
    free(buf);
    return size;
}

static void test_llama2c(void **state)
{
    (void)state;
    char path[600];
    tmp_path(path, sizeof path, "tiny.bin");
    write_llama2c(path, 16, 0, 0);
    lp_weights *w = open_ok(path);
    assert_int_equal(lp_weights_format_of(w), LP_FORMAT_LLAMA2C);
    assert_int_equal(lp_weights_count(w), 1 + 2 * 9 + 1); /* freq_cis skipped, no wcls */
    assert_int_equal(lp_weights_arch(w)->rope_layout, LP_ROPE_ADJACENT);
    const lp_tensor *wk1 = lp_weights_find(w, LP_ROLE_ATTN_K, 1, -1, false);
    assert_non_null(wk1);
    assert_string_equal(wk1->name, "layers.1.wk");
    assert_int_equal(wk1->shape[0], 4);
    assert_int_equal(wk1->shape[1], 8);
    /* embed 128 + att norms 16 + wq 128 + wk layer 0 32 = float index 304 */
    assert_int_equal(wk1->file_offset, 28 + 4 * 304);
    float row[8];
    lp_error err = {0};
    assert_int_equal(lp_tensor_rows_f32(wk1, 1, 1, row, &err), LP_OK);
    assert_close(row[0], 312.0f, 0);
    const lp_tensor *w2 = lp_weights_find(w, LP_ROLE_FFN_DOWN, 0, -1, false);
    assert_int_equal(w2->shape[0], 8);
    assert_int_equal(w2->shape[1], 12);
    json_t *r = report_of(w, false);
    assert_true(check_passed(r, "expected_tensors"));
    assert_true(check_passed(r, "tensor_shapes"));
    assert_true(check_passed(r, "tied_embeddings"));
    json_decref(r);
    lp_weights_close(w);
    /* negative vocab: an unshared classifier after the legacy RoPE tables */
    write_llama2c(path, -16, 0, 0);
    w = open_ok(path);
    const lp_tensor *cls = lp_weights_find(w, LP_ROLE_LM_HEAD, -1, -1, false);
    assert_non_null(cls);
    assert_string_equal(cls->name, "wcls");
    size_t body = 128 + 16 + 128 + 64 + 64 + 128 + 16 + 576 + 8 + 16;
    assert_int_equal(cls->file_offset, 28 + 4 * body);
    r = report_of(w, false);
    assert_true(check_passed(r, "expected_tensors"));
    assert_true(check_passed(r, "tied_embeddings"));
    json_decref(r);
    lp_weights_close(w);
    /* truncated and over-long files, and impossible headers */
    size_t full = write_llama2c(path, 16, 0, 0);
    write_llama2c(path, 16, full - 4, 0);
    expect_open_error(path, LP_ERR_FORMAT, NULL, NULL);
    write_llama2c(path, 16, 0, 3);
    expect_open_error(path, LP_ERR_FORMAT, "ends at byte", NULL);
    write_llama2c(path, 16, 20, 0);
    expect_open_error(path, LP_ERR_FORMAT, "28-byte", NULL);
    int32_t bad[7] = {8, 12, 2, 3, 1, 16, 4}; /* 3 heads do not divide 8 */
    write_bytes(path, bad, sizeof bad);
    expect_open_error(path, LP_ERR_FORMAT, "n_heads", NULL);
    int32_t huge[7] = {0x7fffffff, 0x7fffffff, 512, 1, 1, 0x7fffffff, 4};
    write_bytes(path, huge, sizeof huge);
    expect_open_error(path, LP_ERR_FORMAT, NULL, NULL);
}

/* ---- GGUF through the catalogue --------------------------------------------------------- */

static void test_gguf_generated(void **state)
{
    (void)state;
    char path[600];
    tmp_path(path, sizeof path, "tiny.gguf");
    lp_gw g;
    lp_gw_init(&g, 3);
    lp_gw_kv_str(&g, "general.architecture", "llama");
    lp_gw_kv_u32(&g, "llama.block_count", 1);
    lp_gw_kv_u32(&g, "llama.embedding_length", 32);
    lp_gw_kv_u32(&g, "llama.feed_forward_length", 64);
    lp_gw_kv_u32(&g, "llama.attention.head_count", 4);
    lp_gw_kv_u32(&g, "llama.attention.head_count_kv", 4);
    lp_gw_kv_u32(&g, "llama.context_length", 64);
    lp_gw_kv_u32(&g, "llama.vocab_size", 32);
    lp_gw_kv_f32(&g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    /* one Q8_0 tensor [2 rows, 32]: block = f16 d + 32 int8 */
    uint8_t q8[2 * 34];
    for (int b = 0; b < 2; b++) {
        uint16_t d = lp_f32_to_f16(b ? 0.5f : 0.25f);
        memcpy(q8 + 34 * b, &d, 2);
        for (int j = 0; j < 32; j++)
            q8[34 * b + 2 + j] = (uint8_t)(int8_t)(j - 16);
    }
    int64_t ne[2] = {32, 2};
    lp_gw_tensor(&g, "blk.0.attn_q.weight", 2, ne, 8 /* Q8_0 */, q8, sizeof q8);
    float f[32];
    for (int i = 0; i < 32; i++)
        f[i] = (float)i;
    int64_t ne1[1] = {32};
    lp_gw_tensor(&g, "output_norm.weight", 1, ne1, 0, f, sizeof f);
    assert_true(lp_gw_finish(&g));
    assert_int_equal(lp_gw_write(&g, path), true);
    lp_weights *w = open_ok(path);
    assert_int_equal(lp_weights_format_of(w), LP_FORMAT_GGUF);
    const lp_tensor *q = lp_weights_find(w, LP_ROLE_ATTN_Q, 0, -1, false);
    assert_non_null(q);
    assert_int_equal(q->dtype, LP_DTYPE_Q8_0);
    assert_int_equal(q->shape[0], 2); /* reversed from ne */
    assert_int_equal(q->shape[1], 32);
    float row[32];
    lp_error err = {0};
    assert_int_equal(lp_tensor_rows_f32(q, 1, 1, row, &err), LP_OK);
    for (int j = 0; j < 32; j++)
        assert_close(row[j], 0.5f * (float)(j - 16), 0);
    lp_weights_close(w);
    /* one file of a split GGUF is refused, not inspected as if it were the whole model */
    {
        char split_path[600];
        tmp_path(split_path, sizeof split_path, "split.gguf");
        lp_gw sg;
        lp_gw_init(&sg, 3);
        lp_gw_kv_str(&sg, "general.architecture", "llama");
        lp_gw_kv_u32(&sg, "split.count", 3);
        lp_gw_tensor(&sg, "output_norm.weight", 1, ne1, 0, f, sizeof f);
        assert_true(lp_gw_finish(&sg));
        assert_true(lp_gw_write(&sg, split_path));
        lp_gw_free(&sg);
        expect_open_error(split_path, LP_ERR_UNSUPPORTED, "one of 3 split GGUF files", NULL);
    }
    /* corruptions: a tensor count beyond the file, an unknown type, a name length past EOF */
    lp_gw_put_u64(&g, g.count_pos[0], 1ull << 40);
    assert_true(lp_gw_write(&g, path));
    expect_open_error(path, LP_ERR_FORMAT, NULL, NULL);
    lp_gw_put_u64(&g, g.count_pos[0], 2);
    lp_gw_put_u32(&g, g.tensors[0].type_pos, 77);
    assert_true(lp_gw_write(&g, path));
    lp_weights *bad = NULL;
    assert_int_not_equal(lp_weights_open(path, &bad, &err), LP_OK);
    assert_null(bad);
    lp_gw_put_u32(&g, g.tensors[0].type_pos, 8);
    lp_gw_put_u64(&g, g.tensors[0].info_pos, 1ull << 50);
    assert_true(lp_gw_write(&g, path));
    expect_open_error(path, LP_ERR_FORMAT, NULL, NULL);
    lp_gw_free(&g);
}

/* A tiny Mixtral-style GGUF: all experts of a layer in one 3-D tensor per kind (GGUF order
 * ne = [in, out, n_experts]); the catalogue shows [n_experts, out, in] and the checks pass;
 * a missing expert tensor is reported. */
static void write_gguf_moe(const char *path, bool with_up, bool qwen)
{
    enum { H = 32, EF = 64, E = 4, V = 16 };
    static float zeros[H * EF * E];
    lp_gw g;
    lp_gw_init(&g, 3);
    /* qwen: Qwen2-MoE's shared expert (SF wide) and its sigmoid gate, a 1-D [hidden] in GGUF */
    enum { SF = 96 };
    const char *arch = qwen ? "qwen2moe" : "llama";
    char key[96];
    lp_gw_kv_str(&g, "general.architecture", arch);
#define KV(NAME, V_) (snprintf(key, sizeof key, "%s." NAME, arch), lp_gw_kv_u32(&g, key, (V_)))
    KV("block_count", 1);
    KV("embedding_length", H);
    KV("feed_forward_length", EF);
    KV("attention.head_count", 4);
    KV("attention.head_count_kv", 2);
    KV("context_length", 64);
    KV("vocab_size", V);
    KV("expert_count", E);
    KV("expert_used_count", 2);
    if (qwen) {
        KV("expert_feed_forward_length", EF);
        KV("expert_shared_feed_forward_length", SF);
    }
#undef KV
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    lp_gw_kv_f32(&g, key, 1e-5f);
    int64_t ne_embd[2] = {H, V}, ne_norm[1] = {H}, ne_q[2] = {H, H}, ne_kv[2] = {H, 16};
    int64_t ne_router[2] = {H, E}, ne_up[3] = {H, EF, E}, ne_down[3] = {EF, H, E};
    lp_gw_tensor(&g, "token_embd.weight", 2, ne_embd, 0, zeros, sizeof(float) * H * V);
    lp_gw_tensor(&g, "output.weight", 2, ne_embd, 0, zeros, sizeof(float) * H * V);
    lp_gw_tensor(&g, "output_norm.weight", 1, ne_norm, 0, zeros, sizeof(float) * H);
    lp_gw_tensor(&g, "blk.0.attn_norm.weight", 1, ne_norm, 0, zeros, sizeof(float) * H);
    lp_gw_tensor(&g, "blk.0.ffn_norm.weight", 1, ne_norm, 0, zeros, sizeof(float) * H);
    lp_gw_tensor(&g, "blk.0.attn_q.weight", 2, ne_q, 0, zeros, sizeof(float) * H * H);
    lp_gw_tensor(&g, "blk.0.attn_k.weight", 2, ne_kv, 0, zeros, sizeof(float) * H * 16);
    lp_gw_tensor(&g, "blk.0.attn_v.weight", 2, ne_kv, 0, zeros, sizeof(float) * H * 16);
    lp_gw_tensor(&g, "blk.0.attn_output.weight", 2, ne_q, 0, zeros, sizeof(float) * H * H);
    lp_gw_tensor(&g, "blk.0.ffn_gate_inp.weight", 2, ne_router, 0, zeros, sizeof(float) * H * E);
    lp_gw_tensor(&g, "blk.0.ffn_gate_exps.weight", 3, ne_up, 0, zeros, sizeof zeros);
    if (with_up)
        lp_gw_tensor(&g, "blk.0.ffn_up_exps.weight", 3, ne_up, 0, zeros, sizeof zeros);
    lp_gw_tensor(&g, "blk.0.ffn_down_exps.weight", 3, ne_down, 0, zeros, sizeof zeros);
    if (qwen) {
        int64_t ne_sh[2] = {H, SF}, ne_shd[2] = {SF, H};
        lp_gw_tensor(&g, "blk.0.ffn_gate_shexp.weight", 2, ne_sh, 0, zeros, sizeof(float) * H * SF);
        lp_gw_tensor(&g, "blk.0.ffn_up_shexp.weight", 2, ne_sh, 0, zeros, sizeof(float) * H * SF);
        lp_gw_tensor(&g, "blk.0.ffn_down_shexp.weight", 2, ne_shd, 0, zeros, sizeof(float) * H * SF);
        lp_gw_tensor(&g, "blk.0.ffn_gate_inp_shexp.weight", 1, ne_norm, 0, zeros, sizeof(float) * H);
        /* qwen2 attention has q/k/v biases */
        int64_t ne_b[1] = {H}, ne_kb[1] = {16};
        lp_gw_tensor(&g, "blk.0.attn_q.bias", 1, ne_b, 0, zeros, sizeof(float) * H);
        lp_gw_tensor(&g, "blk.0.attn_k.bias", 1, ne_kb, 0, zeros, sizeof(float) * 16);
        lp_gw_tensor(&g, "blk.0.attn_v.bias", 1, ne_kb, 0, zeros, sizeof(float) * 16);
    }
    assert_true(lp_gw_finish(&g));
    assert_true(lp_gw_write(&g, path));
    lp_gw_free(&g);
}

static void test_gguf_moe(void **state)
{
    (void)state;
    char path[600];
    tmp_path(path, sizeof path, "moe.gguf");
    write_gguf_moe(path, true, false);
    lp_weights *w = open_ok(path);
    assert_int_equal(lp_weights_arch(w)->n_experts, 4);
    const lp_tensor *down = lp_weights_find(w, LP_ROLE_EXPERT_DOWN, 0, -1, false);
    assert_non_null(down);
    assert_int_equal(down->n_dims, 3);
    assert_int_equal(down->shape[0], 4);
    assert_int_equal(down->shape[1], 32);
    assert_int_equal(down->shape[2], 64);
    json_t *r = report_of(w, false);
    json_t *checks = json_object_get(r, "checks");
    for (size_t c = 0; c < json_array_size(checks); c++)
        if (!json_is_true(json_object_get(json_array_get(checks, c), "passed")))
            fail_msg("moe.gguf: %s: %s",
                     json_string_value(json_object_get(json_array_get(checks, c), "name")),
                     json_string_value(json_object_get(json_array_get(checks, c), "detail")));
    json_decref(r);
    lp_weights_close(w);
    write_gguf_moe(path, false, false);
    w = open_ok(path);
    r = report_of(w, false);
    assert_false(check_passed(r, "expected_tensors"));
    assert_non_null(strstr(json_string_value(json_object_get(find_check(r, "expected_tensors"), "detail")),
                           "expert_up layer 0 expert 0"));
    json_decref(r);
    lp_weights_close(w);
    /* Qwen2-MoE: shared expert and its 1-D gate */
    write_gguf_moe(path, true, true);
    w = open_ok(path);
    assert_true(lp_weights_arch(w)->shared_expert_gate);
    r = report_of(w, false);
    checks = json_object_get(r, "checks");
    for (size_t c = 0; c < json_array_size(checks); c++)
        if (!json_is_true(json_object_get(json_array_get(checks, c), "passed")))
            fail_msg("qwen2moe gguf: %s: %s",
                     json_string_value(json_object_get(json_array_get(checks, c), "name")),
                     json_string_value(json_object_get(json_array_get(checks, c), "detail")));
    json_decref(r);
    lp_weights_close(w);
}

/* ---- gpt-oss as llama.cpp's converter writes it --------------------------------------------- */

static float *gpt_oss_floats(float **keep, int *n_keep, int64_t n, uint64_t *seed)
{
    float *p = malloc((size_t)n * sizeof *p);
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] = (float)((double)(*seed >> 40) / (double)(1 << 24) - 0.5);
    }
    keep[(*n_keep)++] = p;
    return p;
}

/* The writer's GGUF reads back as gpt-oss (sinks, biases, windows on even layers, yarn), its
 * tensors get their roles, and its MXFP4 experts hold the even (gate) and odd (up) rows of the
 * split safetensors pair exactly, biases likewise. */
static void test_gguf_gpt_oss(void **state)
{
    (void)state;
    enum { V = 45, H = 64, NH = 4, NKV = 2, HD = 12, E = 3, F = 32, NL = 3 };
    float *keep[64];
    int n_keep = 0;
    uint64_t seed = 0x6f55;
    gw_gpt_oss g = {.vocab = V, .hidden = H, .n_layers = NL, .n_heads = NH, .n_kv_heads = NKV,
                    .head_dim = HD, .n_experts = E, .top_k = 2, .expert_ffn = F, .window = 8,
                    .n_ctx = 256, .yarn_orig = 16, .yarn_factor = 4, .theta = 150000, .eps = 1e-5};
    g.embed = gpt_oss_floats(keep, &n_keep, V * H, &seed);
    g.out_norm = gpt_oss_floats(keep, &n_keep, H, &seed);
    g.lm_head = gpt_oss_floats(keep, &n_keep, V * H, &seed);
    uint8_t *gu_blocks = malloc((size_t)E * 2 * F * (H / 32) * 16);
    uint8_t *gu_scales = malloc((size_t)E * 2 * F * (H / 32));
    uint8_t *dn_blocks = malloc((size_t)E * H * (F / 32) * 16);
    uint8_t *dn_scales = malloc((size_t)E * H * (F / 32));
    assert_true(gu_blocks && gu_scales && dn_blocks && dn_scales);
    for (size_t i = 0; i < (size_t)E * 2 * F * (H / 32) * 16; i++)
        gu_blocks[i] = (uint8_t)(i * 37 + 11);
    for (size_t i = 0; i < (size_t)E * 2 * F * (H / 32); i++)
        gu_scales[i] = (uint8_t)(118 + i % 7);
    for (size_t i = 0; i < (size_t)E * H * (F / 32) * 16; i++)
        dn_blocks[i] = (uint8_t)(i * 53 + 5);
    for (size_t i = 0; i < (size_t)E * H * (F / 32); i++)
        dn_scales[i] = (uint8_t)(120 + i % 5);
    for (int l = 0; l < NL; l++) {
        gw_gpt_oss_layer *L = &g.layers[l];
        L->attn_norm = gpt_oss_floats(keep, &n_keep, H, &seed);
        L->ffn_norm = gpt_oss_floats(keep, &n_keep, H, &seed);
        L->wq = gpt_oss_floats(keep, &n_keep, NH * HD * H, &seed);
        L->bq = gpt_oss_floats(keep, &n_keep, NH * HD, &seed);
        L->wk = gpt_oss_floats(keep, &n_keep, NKV * HD * H, &seed);
        L->bk = gpt_oss_floats(keep, &n_keep, NKV * HD, &seed);
        L->wv = gpt_oss_floats(keep, &n_keep, NKV * HD * H, &seed);
        L->bv = gpt_oss_floats(keep, &n_keep, NKV * HD, &seed);
        L->wo = gpt_oss_floats(keep, &n_keep, H * NH * HD, &seed);
        L->bo = gpt_oss_floats(keep, &n_keep, H, &seed);
        L->sinks = gpt_oss_floats(keep, &n_keep, NH, &seed);
        L->router = gpt_oss_floats(keep, &n_keep, E * H, &seed);
        L->router_bias = gpt_oss_floats(keep, &n_keep, E, &seed);
        L->gate_up_bias = gpt_oss_floats(keep, &n_keep, E * 2 * F, &seed);
        L->down_bias = gpt_oss_floats(keep, &n_keep, E * H, &seed);
        L->gate_up_blocks = gu_blocks;
        L->gate_up_scales = gu_scales;
        L->down_blocks = dn_blocks;
        L->down_scales = dn_scales;
    }
    char path[600];
    tmp_path(path, sizeof path, "gpt_oss.gguf");
    assert_true(lp_gw_write_gpt_oss(path, &g));
    lp_weights *w = open_ok(path);
    const lp_arch *a = lp_weights_arch(w);
    assert_non_null(a);
    assert_string_equal(a->family, "gpt_oss");
    assert_true(a->attn_sinks && a->router_bias && a->bias_mlp);
    assert_int_equal(a->n_experts, E);
    assert_int_equal(a->n_experts_per_tok, 2);
    assert_int_equal(a->expert_ffn_hidden, F);
    assert_int_equal(a->head_dim, HD);
    assert_true(a->norm_topk_prob);
    /* llama.cpp's set_swa_pattern(2): even layers slide */
    assert_int_equal(a->layer_window[0], 8);
    assert_int_equal(a->layer_window[1], 0);
    assert_int_equal(a->layer_window[2], 8);
    assert_int_equal(a->rope_scaling.kind, LP_ROPE_SCALING_YARN);
    assert_int_equal(a->rope_scaling.original_ctx, 16);
    assert_false(a->rope_scaling.yarn_unrounded); /* no truncate key: ggml's rounded ramp */
    const lp_tensor *ffn_norm = lp_weights_find(w, LP_ROLE_FFN_NORM, 1, -1, false);
    assert_non_null(ffn_norm);
    assert_string_equal(ffn_norm->name, "blk.1.post_attention_norm.weight");
    assert_null(lp_weights_find(w, LP_ROLE_ATTN_POST_NORM, 1, -1, false));
    assert_non_null(lp_weights_find(w, LP_ROLE_ROUTER, 2, -1, true));
    /* the experts: rows 2r (gate) and 2r + 1 (up) of the split pair, dequantized exactly */
    float *want = malloc((size_t)E * 2 * F * H * sizeof *want);
    float *got = malloc((size_t)E * F * H * sizeof *got);
    assert_true(want && got);
    assert_int_equal(lp_dequantize_mxfp4(gu_blocks, gu_scales, E * 2 * F * (H / 32), want, NULL),
                     LP_OK);
    for (int half = 0; half < 2; half++) {
        const lp_tensor *t =
            lp_weights_find(w, half ? LP_ROLE_EXPERT_UP : LP_ROLE_EXPERT_GATE, 1, -1, false);
        assert_non_null(t);
        assert_int_equal(t->dtype, LP_DTYPE_MXFP4);
        assert_int_equal(t->n_dims, 3);
        assert_true(t->shape[0] == E && t->shape[1] == F && t->shape[2] == H);
        assert_int_equal(lp_tensor_rows_f32(t, 0, E * F, got, NULL), LP_OK);
        for (int64_t r = 0; r < E * F; r++)
            for (int64_t c = 0; c < H; c++)
                if (got[r * H + c] != want[(2 * r + half) * H + c])
                    fail_msg("%s row %lld col %lld: %g, want %g", t->name, (long long)r,
                             (long long)c, (double)got[r * H + c], (double)want[(2 * r + half) * H + c]);
        const lp_tensor *b =
            lp_weights_find(w, half ? LP_ROLE_EXPERT_UP : LP_ROLE_EXPERT_GATE, 1, -1, true);
        assert_non_null(b);
        assert_int_equal(lp_tensor_rows_f32(b, 0, E, got, NULL), LP_OK);
        for (int64_t i = 0; i < E * F; i++)
            assert_true(got[i] == g.layers[1].gate_up_bias[2 * i + half]);
    }
    const lp_tensor *down = lp_weights_find(w, LP_ROLE_EXPERT_DOWN, 0, -1, false);
    assert_non_null(down);
    assert_true(down->shape[0] == E && down->shape[1] == H && down->shape[2] == F);
    assert_int_equal(lp_dequantize_mxfp4(dn_blocks, dn_scales, E * H * (F / 32), want, NULL), LP_OK);
    assert_int_equal(lp_tensor_rows_f32(down, 0, E * H, got, NULL), LP_OK);
    for (int64_t i = 0; i < E * H * F; i++) /* ==: ggml's level table has +0 where E2M1 has -0 */
        assert_true(got[i] == want[i]);
    lp_weights_close(w);
    unlink(path);
    free(want);
    free(got);
    free(gu_blocks);
    free(gu_scales);
    free(dn_blocks);
    free(dn_scales);
    while (n_keep > 0)
        free(keep[--n_keep]);
}

/* ---- roles -------------------------------------------------------------------------------- */

static void test_roles(void **state)
{
    (void)state;
    static const struct {
        const char *name, *family;
        lp_weights_format format;
        lp_role role;
        int layer, expert;
        bool bias, transposed;
    } cases[] = {
        {"model.layers.3.self_attn.q_proj.weight", "llama", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_Q, 3, -1, false, false},
        {"model.layers.3.self_attn.q_proj.bias", "qwen2", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_Q, 3, -1, true, false},
        {"model.layers.0.post_attention_layernorm.weight", "llama", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_NORM, 0, -1, false, false},
        {"model.layers.0.post_attention_layernorm.weight", "gemma2", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_POST_NORM, 0, -1, false, false},
        {"model.layers.0.pre_feedforward_layernorm.weight", "gemma2", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_NORM, 0, -1, false, false},
        {"model.layers.0.post_feedforward_layernorm.weight", "gemma2", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_POST_NORM, 0, -1, false, false},
        {"model.embed_tokens.weight", "llama", LP_FORMAT_SAFETENSORS, LP_ROLE_TOKEN_EMBD, -1, -1, false, false},
        {"model.norm.weight", "llama", LP_FORMAT_SAFETENSORS, LP_ROLE_OUTPUT_NORM, -1, -1, false, false},
        {"lm_head.weight", "llama", LP_FORMAT_SAFETENSORS, LP_ROLE_LM_HEAD, -1, -1, false, false},
        {"model.layers.2.self_attn.rotary_emb.inv_freq", "llama", LP_FORMAT_SAFETENSORS, LP_ROLE_ROPE_FREQS, 2, -1, false, false},
        {"model.layers.1.self_attn.qkv_proj.weight", "phi3", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_QKV, 1, -1, false, false},
        {"model.layers.1.mlp.gate_up_proj.weight", "phi3", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_GATE_UP, 1, -1, false, false},
        {"model.layers.1.self_attn.dense.bias", "phi", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_O, 1, -1, true, false},
        {"model.layers.1.mlp.fc1.weight", "phi", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_UP, 1, -1, false, false},
        {"model.final_layernorm.bias", "phi", LP_FORMAT_SAFETENSORS, LP_ROLE_OUTPUT_NORM, -1, -1, true, false},
        {"h.4.attn.c_attn.weight", "gpt2", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_QKV, 4, -1, false, true},
        {"h.4.attn.c_attn.bias", "gpt2", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_QKV, 4, -1, true, false},
        /* same names, ordinary Linear layers: not transposed */
        {"transformer.h.4.attn.c_attn.weight", "gpt_bigcode", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_QKV, 4, -1, false, false},
        {"transformer.h.4.mlp.c_fc.weight", "gpt_bigcode", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_UP, 4, -1, false, false},
        {"h.4.attn.bias", "gpt2", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_MASK_BUFFER, 4, -1, false, false},
        {"transformer.h.4.mlp.c_proj.weight", "gpt2", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_DOWN, 4, -1, false, true},
        {"wpe.weight", "gpt2", LP_FORMAT_SAFETENSORS, LP_ROLE_POS_EMBD, -1, -1, false, false},
        {"transformer.ln_f.weight", "gpt2", LP_FORMAT_SAFETENSORS, LP_ROLE_OUTPUT_NORM, -1, -1, false, false},
        {"transformer.word_embeddings_layernorm.bias", "bloom", LP_FORMAT_SAFETENSORS, LP_ROLE_EMBD_NORM, -1, -1, true, false},
        {"transformer.h.0.self_attention.query_key_value.weight", "bloom", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_QKV, 0, -1, false, false},
        /* MPT, with and without the transformer. prefix */
        {"transformer.blocks.3.attn.Wqkv.weight", "mpt", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_QKV, 3, -1, false, false},
        {"blocks.3.attn.Wqkv.bias", "mpt", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_QKV, 3, -1, true, false},
        {"transformer.blocks.0.norm_1.weight", "mpt", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_NORM, 0, -1, false, false},
        {"blocks.1.norm_2.bias", "mpt", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_NORM, 1, -1, true, false},
        {"transformer.blocks.2.attn.q_ln.weight", "mpt", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_Q_NORM, 2, -1, false, false},
        {"blocks.2.attn.k_ln.bias", "mpt", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_K_NORM, 2, -1, true, false},
        {"transformer.blocks.2.attn.out_proj.weight", "mpt", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_O, 2, -1, false, false},
        {"blocks.0.ffn.up_proj.weight", "mpt", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_UP, 0, -1, false, false},
        {"transformer.blocks.0.ffn.down_proj.weight", "mpt", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_DOWN, 0, -1, false, false},
        {"transformer.norm_f.weight", "mpt", LP_FORMAT_SAFETENSORS, LP_ROLE_OUTPUT_NORM, -1, -1, false, false},
        {"norm_f.weight", "mpt", LP_FORMAT_SAFETENSORS, LP_ROLE_OUTPUT_NORM, -1, -1, false, false},
        {"wte.weight", "mpt", LP_FORMAT_SAFETENSORS, LP_ROLE_TOKEN_EMBD, -1, -1, false, false},
        {"transformer.h.0.mlp.dense_4h_to_h.weight", "falcon", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_DOWN, 0, -1, false, false},
        {"transformer.h.0.ln_mlp.weight", "falcon", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_NORM, 0, -1, false, false},
        {"model.decoder.layers.5.fc2.weight", "opt", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_DOWN, 5, -1, false, false},
        {"model.decoder.layers.5.final_layer_norm.weight", "opt", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_NORM, 5, -1, false, false},
        {"model.decoder.final_layer_norm.weight", "opt", LP_FORMAT_SAFETENSORS, LP_ROLE_OUTPUT_NORM, -1, -1, false, false},
        {"model.decoder.embed_positions.weight", "opt", LP_FORMAT_SAFETENSORS, LP_ROLE_POS_EMBD, -1, -1, false, false},
        {"model.decoder.layers.5.self_attn.out_proj.bias", "opt", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_O, 5, -1, true, false},
        {"model.layers.7.block_sparse_moe.gate.weight", "mixtral", LP_FORMAT_SAFETENSORS, LP_ROLE_ROUTER, 7, -1, false, false},
        {"model.layers.7.block_sparse_moe.experts.6.w2.weight", "mixtral", LP_FORMAT_SAFETENSORS, LP_ROLE_EXPERT_DOWN, 7, 6, false, false},
        {"model.layers.7.block_sparse_moe.experts.6.w1.weight", "mixtral", LP_FORMAT_SAFETENSORS, LP_ROLE_EXPERT_GATE, 7, 6, false, false},
        {"model.layers.3.mlp.experts.59.up_proj.weight", "qwen2_moe", LP_FORMAT_SAFETENSORS, LP_ROLE_EXPERT_UP, 3, 59, false, false},
        {"model.layers.3.mlp.shared_expert.down_proj.weight", "qwen2_moe", LP_FORMAT_SAFETENSORS, LP_ROLE_SHARED_DOWN, 3, -1, false, false},
        {"model.layers.3.mlp.shared_expert_gate.weight", "qwen2_moe", LP_FORMAT_SAFETENSORS, LP_ROLE_SHARED_EXPERT_GATE, 3, -1, false, false},
        {"model.layers.3.mlp.gate.weight", "qwen2_moe", LP_FORMAT_SAFETENSORS, LP_ROLE_ROUTER, 3, -1, false, false},
        {"model.layers.3.self_attn.q_norm.weight", "qwen3", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_Q_NORM, 3, -1, false, false},
        {"model.layers.9.self_attn.kv_a_proj_with_mqa.weight", "deepseek_v2", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_KV_A, 9, -1, false, false},
        {"model.layers.9.self_attn.kv_a_layernorm.weight", "deepseek_v2", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_KV_A_NORM, 9, -1, false, false},
        {"model.layers.9.self_attn.q_b_proj.weight", "deepseek_v3", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_Q_B, 9, -1, false, false},
        {"model.layers.9.mlp.shared_experts.gate_proj.weight", "deepseek_v2", LP_FORMAT_SAFETENSORS, LP_ROLE_SHARED_GATE, 9, -1, false, false},
        {"model.layers.9.mlp.gate.e_score_correction_bias", "deepseek_v3", LP_FORMAT_SAFETENSORS, LP_ROLE_ROUTER_BIAS, 9, -1, false, false},
        {"model.layers.9.mlp.experts.255.down_proj.weight", "deepseek_v3", LP_FORMAT_SAFETENSORS, LP_ROLE_EXPERT_DOWN, 9, 255, false, false},
        /* GPT-NeoX with and without its class prefix, and its buffers */
        {"gpt_neox.embed_in.weight", "gpt_neox", LP_FORMAT_SAFETENSORS, LP_ROLE_TOKEN_EMBD, -1, -1, false, false},
        {"embed_in.weight", "gpt_neox", LP_FORMAT_SAFETENSORS, LP_ROLE_TOKEN_EMBD, -1, -1, false, false},
        {"embed_out.weight", "gpt_neox", LP_FORMAT_SAFETENSORS, LP_ROLE_LM_HEAD, -1, -1, false, false},
        {"gpt_neox.layers.3.attention.query_key_value.bias", "gpt_neox", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_QKV, 3, -1, true, false},
        {"layers.3.attention.query_key_value.weight", "gpt_neox", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_QKV, 3, -1, false, false},
        {"gpt_neox.layers.3.attention.dense.weight", "gpt_neox", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_O, 3, -1, false, false},
        {"gpt_neox.layers.3.post_attention_layernorm.bias", "gpt_neox", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_NORM, 3, -1, true, false},
        {"gpt_neox.final_layer_norm.weight", "gpt_neox", LP_FORMAT_SAFETENSORS, LP_ROLE_OUTPUT_NORM, -1, -1, false, false},
        {"gpt_neox.layers.3.attention.bias", "gpt_neox", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_MASK_BUFFER, 3, -1, false, false},
        {"gpt_neox.layers.3.attention.masked_bias", "gpt_neox", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_MASK_BUFFER, 3, -1, false, false},
        {"gpt_neox.layers.3.attention.rotary_emb.inv_freq", "gpt_neox", LP_FORMAT_SAFETENSORS, LP_ROLE_ROPE_FREQS, 3, -1, false, false},
        /* GPT-J, with and without "transformer." */
        {"transformer.h.2.attn.q_proj.weight", "gptj", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_Q, 2, -1, false, false},
        {"h.2.attn.out_proj.weight", "gptj", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_O, 2, -1, false, false},
        {"transformer.h.2.mlp.fc_in.bias", "gptj", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_UP, 2, -1, true, false},
        {"h.2.mlp.fc_out.weight", "gptj", LP_FORMAT_SAFETENSORS, LP_ROLE_FFN_DOWN, 2, -1, false, false},
        {"transformer.h.2.attn.bias", "gptj", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_MASK_BUFFER, 2, -1, false, false},
        {"wte.weight", "gptj", LP_FORMAT_SAFETENSORS, LP_ROLE_TOKEN_EMBD, -1, -1, false, false},
        /* StableLM's per-head q/k LayerNorms: the head as the expert index */
        {"model.layers.2.self_attn.q_layernorm.norms.7.weight", "stablelm", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_Q_NORM, 2, 7, false, false},
        {"layers.2.self_attn.k_layernorm.norms.1.weight", "stablelm", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_K_NORM, 2, 1, false, false},
        {"model.layers.2.mlp.norms.1.weight", "stablelm", LP_FORMAT_SAFETENSORS, LP_ROLE_UNKNOWN, -1, -1, false, false},
        {"model.decoder.project_in.weight", "opt", LP_FORMAT_SAFETENSORS, LP_ROLE_EMBD_PROJ_IN, -1, -1, false, false},
        {"decoder.project_out.weight", "opt", LP_FORMAT_SAFETENSORS, LP_ROLE_EMBD_PROJ_OUT, -1, -1, false, false},
        /* Phi without "model." */
        {"layers.1.self_attn.dense.weight", "phi", LP_FORMAT_SAFETENSORS, LP_ROLE_ATTN_O, 1, -1, false, false},
        {"final_layernorm.weight", "phi", LP_FORMAT_SAFETENSORS, LP_ROLE_OUTPUT_NORM, -1, -1, false, false},
        {"model.layers.9.something_new.weight", "llama", LP_FORMAT_SAFETENSORS, LP_ROLE_UNKNOWN, -1, -1, false, false},
        /* GGUF */
        {"token_embd.weight", "", LP_FORMAT_GGUF, LP_ROLE_TOKEN_EMBD, -1, -1, false, false},
        {"output.weight", "", LP_FORMAT_GGUF, LP_ROLE_LM_HEAD, -1, -1, false, false},
        {"blk.12.attn_output.weight", "", LP_FORMAT_GGUF, LP_ROLE_ATTN_O, 12, -1, false, false},
        {"blk.12.attn_q.bias", "", LP_FORMAT_GGUF, LP_ROLE_ATTN_Q, 12, -1, true, false},
        {"blk.12.ffn_gate_exps.weight", "", LP_FORMAT_GGUF, LP_ROLE_EXPERT_GATE, 12, -1, false, false},
        {"blk.12.ffn_down_shexp.weight", "", LP_FORMAT_GGUF, LP_ROLE_SHARED_DOWN, 12, -1, false, false},
        {"blk.12.ffn_gate_inp.weight", "", LP_FORMAT_GGUF, LP_ROLE_ROUTER, 12, -1, false, false},
        {"blk.12.ffn_up.3.weight", "", LP_FORMAT_GGUF, LP_ROLE_EXPERT_UP, 12, 3, false, false},
        {"blk.12.attn_kv_a_mqa.weight", "", LP_FORMAT_GGUF, LP_ROLE_ATTN_KV_A, 12, -1, false, false},
        {"blk.12.post_ffw_norm.weight", "", LP_FORMAT_GGUF, LP_ROLE_FFN_POST_NORM, 12, -1, false, false},
        {"blk.12.exp_probs_b.bias", "", LP_FORMAT_GGUF, LP_ROLE_ROUTER_BIAS, 12, -1, true, false},
        {"blk.3.attn_norm_2.weight", "", LP_FORMAT_GGUF, LP_ROLE_FFN_NORM, 3, -1, false, false},
        {"position_embd.weight", "", LP_FORMAT_GGUF, LP_ROLE_POS_EMBD, -1, -1, false, false},
        {"blk.0.attn_q_norm.weight", "", LP_FORMAT_GGUF, LP_ROLE_ATTN_Q_NORM, 0, -1, false, false},
        /* gpt-oss as convert_hf_to_gguf writes it: post_attention_norm is the FFN's input norm
         * (Gemma 2's is a true post norm), experts de-interleaved into gate and up, biased */
        {"blk.5.post_attention_norm.weight", "gpt_oss", LP_FORMAT_GGUF, LP_ROLE_FFN_NORM, 5, -1, false, false},
        {"blk.5.post_attention_norm.weight", "gemma2", LP_FORMAT_GGUF, LP_ROLE_ATTN_POST_NORM, 5, -1, false, false},
        {"blk.5.ffn_gate_exps.bias", "gpt_oss", LP_FORMAT_GGUF, LP_ROLE_EXPERT_GATE, 5, -1, true, false},
        {"blk.5.ffn_up_exps.weight", "gpt_oss", LP_FORMAT_GGUF, LP_ROLE_EXPERT_UP, 5, -1, false, false},
        {"blk.5.ffn_down_exps.bias", "gpt_oss", LP_FORMAT_GGUF, LP_ROLE_EXPERT_DOWN, 5, -1, true, false},
        {"blk.5.ffn_gate_inp.bias", "gpt_oss", LP_FORMAT_GGUF, LP_ROLE_ROUTER, 5, -1, true, false},
        {"blk.5.attn_v.bias", "gpt_oss", LP_FORMAT_GGUF, LP_ROLE_ATTN_V, 5, -1, true, false},
        /* llama2.c */
        {"layers.3.wq", "", LP_FORMAT_LLAMA2C, LP_ROLE_ATTN_Q, 3, -1, false, false},
        {"layers.3.w2", "", LP_FORMAT_LLAMA2C, LP_ROLE_FFN_DOWN, 3, -1, false, false},
        {"rms_final_weight", "", LP_FORMAT_LLAMA2C, LP_ROLE_OUTPUT_NORM, -1, -1, false, false},
        {"wcls", "", LP_FORMAT_LLAMA2C, LP_ROLE_LM_HEAD, -1, -1, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lp_tensor t = {0};
        t.name = cases[i].name;
        lp_role_assign(&t, cases[i].family, cases[i].format);
        if (t.role != cases[i].role || t.layer != cases[i].layer || t.expert != cases[i].expert ||
            t.is_bias != cases[i].bias || t.transposed != cases[i].transposed)
            fail_msg("%s (%s): got %s layer %d expert %d bias %d transposed %d", cases[i].name,
                     cases[i].family, lp_role_name(t.role), t.layer, t.expert, t.is_bias,
                     t.transposed);
    }
    assert_string_equal(lp_role_name(LP_ROLE_EXPERT_GATE_UP), "expert_gate_up");
    for (int r = 0; r < LP_ROLE_COUNT; r++)
        assert_string_not_equal(lp_role_name((lp_role)r), "");
}

/* ---- checks ------------------------------------------------------------------------------- */

static void test_checks_fail(void **state)
{
    (void)state;
    char dir[600];
    /* untied config, no lm_head: missing */
    make_dir(dir, sizeof dir, "check_untied");
    write_tiny_llama(dir, false, false, NULL, NULL, NULL);
    lp_weights *w = open_ok(dir);
    json_t *r = report_of(w, false);
    assert_false(check_passed(r, "expected_tensors"));
    assert_non_null(strstr(json_string_value(json_object_get(find_check(r, "expected_tensors"), "detail")),
                           "lm_head"));
    assert_false(check_passed(r, "tied_embeddings"));
    json_decref(r);
    lp_weights_close(w);
    /* missing k_proj of layer 1 */
    make_dir(dir, sizeof dir, "check_missing");
    write_tiny_llama(dir, true, false, "model.layers.1.self_attn.k_proj.weight", NULL, NULL);
    w = open_ok(dir);
    r = report_of(w, false);
    assert_false(check_passed(r, "expected_tensors"));
    assert_non_null(strstr(json_string_value(json_object_get(find_check(r, "expected_tensors"), "detail")),
                           "attn_k layer 1"));
    assert_true(check_passed(r, "tensor_shapes"));
    json_decref(r);
    lp_weights_close(w);
    /* wrong shape of q_proj of layer 0 */
    make_dir(dir, sizeof dir, "check_shape");
    write_tiny_llama(dir, true, false, NULL, "model.layers.0.self_attn.q_proj.weight", NULL);
    w = open_ok(dir);
    r = report_of(w, false);
    assert_true(check_passed(r, "expected_tensors"));
    assert_false(check_passed(r, "tensor_shapes"));
    assert_non_null(strstr(json_string_value(json_object_get(find_check(r, "tensor_shapes"), "detail")),
                           "is [9, 8], expected [8, 8]"));
    json_decref(r);
    lp_weights_close(w);
    /* an unexpected tensor, and a layer beyond n_layers */
    make_dir(dir, sizeof dir, "check_extra");
    write_tiny_llama(dir, true, false, NULL, NULL, "model.layers.2.input_layernorm.weight");
    w = open_ok(dir);
    r = report_of(w, false);
    assert_false(check_passed(r, "unexpected_tensors"));
    json_decref(r);
    lp_weights_close(w);
    /* tied config with a stored copy of the embedding passes; a different classifier fails */
    make_dir(dir, sizeof dir, "check_copy");
    write_tiny_llama(dir, true, true, NULL, NULL, NULL);
    w = open_ok(dir);
    r = report_of(w, false);
    json_t *tied = json_object_get(r, "tied_embeddings");
    assert_false(json_is_true(json_object_get(tied, "stored_copy"))); /* values differ (serial) */
    assert_false(check_passed(r, "tied_embeddings"));
    json_decref(r);
    lp_weights_close(w);
}

/* Random models of other families written by the forward tests' reference writer (HF names,
 * GPT-2 Conv1D [in, out], Gemma 2 post norms, Mixtral experts, Qwen2 q/k/v biases): every
 * inspect check passes, and a removed tensor or a changed config is caught. */
static void test_families(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        ref_config cfg;
        const char *probe;   /* a tensor whose role is checked */
        lp_role role;
        bool transposed;
    } cases[] = {
        {"gpt2", {.family = REF_GPT2, .vocab = 97, .hidden = 48, .n_layers = 2, .n_heads = 4,
                  .n_kv_heads = 4, .head_dim = 12, .ffn = 192, .n_positions = 64, .eps = 1e-5,
                  .tied = true, .scale = 0.15},
         "h.1.attn.c_attn.weight", LP_ROLE_ATTN_QKV, true},
        {"mixtral", {.family = REF_MIXTRAL, .vocab = 101, .hidden = 32, .n_layers = 2,
                     .n_heads = 4, .n_kv_heads = 2, .head_dim = 8, .ffn = 40, .eps = 1e-5,
                     .theta = 10000, .n_experts = 4, .top_k = 2, .scale = 0.2},
         "model.layers.1.block_sparse_moe.experts.3.w2.weight", LP_ROLE_EXPERT_DOWN, false},
        {"gemma2", {.family = REF_GEMMA2, .vocab = 89, .hidden = 32, .n_layers = 3, .n_heads = 4,
                    .n_kv_heads = 1, .head_dim = 16, .ffn = 48, .eps = 1e-6, .theta = 10000,
                    .tied = true, .window = 5, .query_pre_attn_scalar = 24, .attn_softcap = 5.0,
                    .final_softcap = 3.0, .scale = 0.2},
         "model.layers.2.post_attention_layernorm.weight", LP_ROLE_ATTN_POST_NORM, false},
        {"qwen2", {.family = REF_LLAMA, .vocab = 83, .hidden = 32, .n_layers = 2, .n_heads = 4,
                   .n_kv_heads = 2, .head_dim = 8, .ffn = 56, .eps = 1e-6, .theta = 1000000,
                   .qkv_bias = true, .scale = 0.2},
         "model.layers.0.self_attn.k_proj.bias", LP_ROLE_ATTN_K, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[600], name[64];
        snprintf(name, sizeof name, "family_%s", cases[i].name);
        tmp_path(dir, sizeof dir, name);
        ref_model m;
        assert_true(ref_model_random(&cases[i].cfg, 99 + i, &m));
        assert_true(ref_model_write_hf(&m, dir));
        ref_model_free(&m);
        lp_weights *w = open_ok(dir);
        const lp_tensor *t = lp_weights_find_name(w, cases[i].probe);
        if (!t)
            fail_msg("%s: no tensor %s", cases[i].name, cases[i].probe);
        assert_int_equal(t->role, cases[i].role);
        assert_int_equal(t->transposed, cases[i].transposed);
        json_t *r = report_of(w, false);
        json_t *checks = json_object_get(r, "checks");
        for (size_t c = 0; c < json_array_size(checks); c++) {
            json_t *ch = json_array_get(checks, c);
            if (!json_is_true(json_object_get(ch, "passed")))
                fail_msg("%s: check %s failed: %s", cases[i].name,
                         json_string_value(json_object_get(ch, "name")),
                         json_string_value(json_object_get(ch, "detail")));
        }
        assert_true(json_array_size(checks) >= 4);
        json_decref(r);
        lp_weights_close(w);
    }
}

/* ---- real configs: header-only checkpoints with every published shape -------------------- */

typedef struct gen_list {
    json_t *header;    /* the safetensors header being built */
    uint64_t offset;   /* bytes so far (BF16) */
    int64_t learnable; /* parameters, buffers excluded */
    int64_t stored;    /* everything */
} gen_list;

static void gen_add(gen_list *g, bool buffer, const char *fmt_name, int n_dims, int64_t d0,
                    int64_t d1, int64_t d2, int64_t d3, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, d3);
    vsnprintf(name, sizeof name, fmt_name, ap);
    va_end(ap);
    int64_t dims[4] = {d0, d1, d2, d3}, n = 1;
    json_t *shape = json_array();
    for (int d = 0; d < n_dims; d++) {
        json_array_append_new(shape, json_integer(dims[d]));
        n *= dims[d];
    }
    json_t *entry = json_object();
    json_object_set_new(entry, "dtype", json_string("BF16"));
    json_object_set_new(entry, "shape", shape);
    json_t *offsets = json_array();
    json_array_append_new(offsets, json_integer((json_int_t)g->offset));
    g->offset += (uint64_t)n * 2;
    json_array_append_new(offsets, json_integer((json_int_t)g->offset));
    json_object_set_new(entry, "data_offsets", offsets);
    if (json_object_get(g->header, name))
        fail_msg("generator wrote %s twice", name);
    json_object_set_new(g->header, name, entry);
    g->stored += n;
    if (!buffer)
        g->learnable += n;
}

/* A linear layer [out, in] with an optional bias [out]. */
static void gen_linear(gen_list *g, const char *base, int64_t out, int64_t in, bool bias)
{
    gen_add(g, false, "%s.weight", 2, out, in, 0, 0, base);
    if (bias)
        gen_add(g, false, "%s.bias", 1, out, 0, 0, 0, base);
}

static void gen_norm(gen_list *g, const lp_arch *a, const char *base, int64_t n)
{
    gen_add(g, false, "%s.weight", 1, n, 0, 0, 0, base);
    if (a->norm_kind == LP_NORM_LAYER && a->bias_norm)
        gen_add(g, false, "%s.bias", 1, n, 0, 0, 0, base);
}

/* The tensor names and shapes of the family's Hugging Face checkpoint, written from the modeling
 * code's module names; the learnable total is checked against truth.json, an independent count. */
static void gen_checkpoint(gen_list *g, const lp_arch *a, bool rope_buffers)
{
    const char *f = a->family;
    int64_t V = a->vocab_size, H = a->hidden_size, hd = a->head_dim, nh = a->n_heads;
    char b[160];
    if (strcmp(f, "gpt2") == 0) {
        gen_add(g, false, "wte.weight", 2, V, H, 0, 0);
        gen_add(g, false, "wpe.weight", 2, a->pos_table_rows, H, 0, 0);
        for (int l = 0; l < a->n_layers; l++) {
            snprintf(b, sizeof b, "h.%d.ln_1", l);
            gen_norm(g, a, b, H);
            gen_add(g, false, "h.%d.attn.c_attn.weight", 2, H, 3 * H, 0, 0, l);
            gen_add(g, false, "h.%d.attn.c_attn.bias", 1, 3 * H, 0, 0, 0, l);
            gen_add(g, false, "h.%d.attn.c_proj.weight", 2, H, H, 0, 0, l);
            gen_add(g, false, "h.%d.attn.c_proj.bias", 1, H, 0, 0, 0, l);
            gen_add(g, true, "h.%d.attn.bias", 4, 1, 1, a->n_ctx, a->n_ctx, l);
            snprintf(b, sizeof b, "h.%d.ln_2", l);
            gen_norm(g, a, b, H);
            gen_add(g, false, "h.%d.mlp.c_fc.weight", 2, H, a->ffn_hidden, 0, 0, l);
            gen_add(g, false, "h.%d.mlp.c_fc.bias", 1, a->ffn_hidden, 0, 0, 0, l);
            gen_add(g, false, "h.%d.mlp.c_proj.weight", 2, a->ffn_hidden, H, 0, 0, l);
            gen_add(g, false, "h.%d.mlp.c_proj.bias", 1, H, 0, 0, 0, l);
        }
        gen_norm(g, a, "ln_f", H);
        return;
    }
    if (strcmp(f, "bloom") == 0) {
        gen_add(g, false, "transformer.word_embeddings.weight", 2, V, H, 0, 0);
        gen_norm(g, a, "transformer.word_embeddings_layernorm", H);
        for (int l = 0; l < a->n_layers; l++) {
            snprintf(b, sizeof b, "transformer.h.%d.input_layernorm", l);
            gen_norm(g, a, b, H);
            snprintf(b, sizeof b, "transformer.h.%d.self_attention.query_key_value", l);
            gen_linear(g, b, 3 * H, H, true);
            snprintf(b, sizeof b, "transformer.h.%d.self_attention.dense", l);
            gen_linear(g, b, H, H, true);
            snprintf(b, sizeof b, "transformer.h.%d.post_attention_layernorm", l);
            gen_norm(g, a, b, H);
            snprintf(b, sizeof b, "transformer.h.%d.mlp.dense_h_to_4h", l);
            gen_linear(g, b, a->ffn_hidden, H, true);
            snprintf(b, sizeof b, "transformer.h.%d.mlp.dense_4h_to_h", l);
            gen_linear(g, b, H, a->ffn_hidden, true);
        }
        gen_norm(g, a, "transformer.ln_f", H);
        return;
    }
    bool opt = strcmp(f, "opt") == 0, phi = strcmp(f, "phi") == 0;
    const char *top = opt ? "model.decoder" : "model";
    gen_add(g, false, "%s.embed_tokens.weight", 2, V, H, 0, 0, top);
    if (opt)
        gen_add(g, false, "model.decoder.embed_positions.weight", 2, a->pos_table_rows, H, 0, 0);
    for (int l = 0; l < a->n_layers; l++) {
        int64_t kv = a->layer_kv_heads[l];
        char p[96];
        snprintf(p, sizeof p, "%s.layers.%d", top, l);
        snprintf(b, sizeof b, "%s.%s", p, opt ? "self_attn_layer_norm" : "input_layernorm");
        gen_norm(g, a, b, H);
        if (a->mla) {
            int64_t qk = a->qk_nope_head_dim + a->qk_rope_head_dim;
            if (a->q_lora_rank > 0) {
                snprintf(b, sizeof b, "%s.self_attn.q_a_proj", p);
                gen_linear(g, b, a->q_lora_rank, H, false);
                snprintf(b, sizeof b, "%s.self_attn.q_a_layernorm", p);
                gen_norm(g, a, b, a->q_lora_rank);
                snprintf(b, sizeof b, "%s.self_attn.q_b_proj", p);
                gen_linear(g, b, nh * qk, a->q_lora_rank, false);
            } else {
                snprintf(b, sizeof b, "%s.self_attn.q_proj", p);
                gen_linear(g, b, nh * qk, H, false);
            }
            snprintf(b, sizeof b, "%s.self_attn.kv_a_proj_with_mqa", p);
            gen_linear(g, b, a->kv_lora_rank + a->qk_rope_head_dim, H, false);
            snprintf(b, sizeof b, "%s.self_attn.kv_a_layernorm", p);
            gen_norm(g, a, b, a->kv_lora_rank);
            snprintf(b, sizeof b, "%s.self_attn.kv_b_proj", p);
            gen_linear(g, b, nh * (a->qk_nope_head_dim + a->v_head_dim), a->kv_lora_rank, false);
            snprintf(b, sizeof b, "%s.self_attn.o_proj", p);
            gen_linear(g, b, H, nh * a->v_head_dim, false);
        } else {
            if (strcmp(f, "phi3") == 0) {
                snprintf(b, sizeof b, "%s.self_attn.qkv_proj", p);
                gen_linear(g, b, (nh + 2 * kv) * hd, H, a->bias_qkv);
            } else {
                static const char *const qkv[3] = {"q_proj", "k_proj", "v_proj"};
                for (int i = 0; i < 3; i++) {
                    snprintf(b, sizeof b, "%s.self_attn.%s", p, qkv[i]);
                    gen_linear(g, b, (i == 0 ? nh : kv) * hd, H, a->bias_qkv);
                }
            }
            snprintf(b, sizeof b, "%s.self_attn.%s", p,
                     opt ? "out_proj" : phi ? "dense" : "o_proj");
            gen_linear(g, b, H, nh * hd, a->bias_o);
            if (rope_buffers)
                gen_add(g, true, "%s.self_attn.rotary_emb.inv_freq", 1, hd / 2, 0, 0, 0, p);
        }
        if (a->qk_norm) {
            snprintf(b, sizeof b, "%s.self_attn.q_norm", p);
            gen_norm(g, a, b, hd);
            snprintf(b, sizeof b, "%s.self_attn.k_norm", p);
            gen_norm(g, a, b, hd);
        }
        if (!phi) {
            snprintf(b, sizeof b, "%s.%s", p, opt ? "final_layer_norm" : "post_attention_layernorm");
            gen_norm(g, a, b, H);
        }
        int64_t F = a->layer_ffn_hidden[l], EF = a->expert_ffn_hidden;
        if (a->layer_moe[l]) {
            bool mixtral = strcmp(f, "mixtral") == 0;
            snprintf(b, sizeof b, "%s.%s.gate", p, mixtral ? "block_sparse_moe" : "mlp");
            gen_linear(g, b, a->n_experts, H, false);
            for (int e = 0; e < a->n_experts; e++) {
                snprintf(b, sizeof b, "%s.%s.experts.%d.%s", p, mixtral ? "block_sparse_moe" : "mlp",
                         e, mixtral ? "w1" : "gate_proj");
                gen_linear(g, b, EF, H, false);
                snprintf(b, sizeof b, "%s.%s.experts.%d.%s", p, mixtral ? "block_sparse_moe" : "mlp",
                         e, mixtral ? "w3" : "up_proj");
                gen_linear(g, b, EF, H, false);
                snprintf(b, sizeof b, "%s.%s.experts.%d.%s", p, mixtral ? "block_sparse_moe" : "mlp",
                         e, mixtral ? "w2" : "down_proj");
                gen_linear(g, b, H, EF, false);
            }
            int64_t SF = a->shared_expert_ffn_hidden > 0 ? a->shared_expert_ffn_hidden
                                                         : a->n_shared_experts * EF;
            if (SF > 0) {
                const char *sh = a->shared_expert_ffn_hidden > 0 ? "shared_expert" : "shared_experts";
                snprintf(b, sizeof b, "%s.mlp.%s.gate_proj", p, sh);
                gen_linear(g, b, SF, H, false);
                snprintf(b, sizeof b, "%s.mlp.%s.up_proj", p, sh);
                gen_linear(g, b, SF, H, false);
                snprintf(b, sizeof b, "%s.mlp.%s.down_proj", p, sh);
                gen_linear(g, b, H, SF, false);
            }
            if (a->shared_expert_gate) {
                snprintf(b, sizeof b, "%s.mlp.shared_expert_gate", p);
                gen_linear(g, b, 1, H, false);
            }
        } else if (a->ffn_kind == LP_FFN_MLP) {
            snprintf(b, sizeof b, "%s.%s", p, opt ? "fc1" : "mlp.fc1");
            gen_linear(g, b, F, H, a->bias_mlp);
            snprintf(b, sizeof b, "%s.%s", p, opt ? "fc2" : "mlp.fc2");
            gen_linear(g, b, H, F, a->bias_mlp);
        } else if (strcmp(f, "phi3") == 0) {
            snprintf(b, sizeof b, "%s.mlp.gate_up_proj", p);
            gen_linear(g, b, 2 * F, H, a->bias_mlp);
            snprintf(b, sizeof b, "%s.mlp.down_proj", p);
            gen_linear(g, b, H, F, a->bias_mlp);
        } else {
            snprintf(b, sizeof b, "%s.mlp.gate_proj", p);
            gen_linear(g, b, F, H, a->bias_mlp);
            snprintf(b, sizeof b, "%s.mlp.up_proj", p);
            gen_linear(g, b, F, H, a->bias_mlp);
            snprintf(b, sizeof b, "%s.mlp.down_proj", p);
            gen_linear(g, b, H, F, a->bias_mlp);
        }
    }
    snprintf(b, sizeof b, "%s.%s", top, opt ? "final_layer_norm" : phi ? "final_layernorm" : "norm");
    gen_norm(g, a, b, H);
    if (!a->tied_embeddings)
        gen_linear(g, "lm_head", V, H, a->bias_lm_head);
}

/* For each real config in ../shared/configs: a sparse BF16 checkpoint with the published tensor
 * names and shapes (data a hole). Its learnable count must equal truth.json's params_total and
 * inspect's params.total its checkpoint_stored_params; every check must pass; and dropping or
 * reshaping one tensor must be caught. */
static void test_real_configs(void **state)
{
    (void)state;
    char root[600];
    if (!shared(root, sizeof root, "configs"))
        skip();
    static const char *const models[] = {
        "DeepSeek-V2-Lite", "Llama-2-7b-hf", "Llama-3.1-8B", "Llama-3.2-1B", "Mistral-7B-v0.1",
        "Mixtral-8x7B-v0.1", "Phi-3-mini-4k-instruct", "Qwen2.5-0.5B-Instruct", "Qwen3-30B-A3B",
        "Qwen3-8B", "SmolLM2-135M", "bloomz-560m", "gemma-2b", "gpt2", "opt-125m", "phi-2",
        "stablelm-3b-4e1t",
    };
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        char src[800], dir[700], path[800];
        snprintf(src, sizeof src, "%s/%s/truth.json", root, models[m]);
        json_error_t jerr;
        json_t *truth = json_load_file(src, 0, &jerr);
        assert_non_null(truth);
        int64_t want_total = json_integer_value(json_object_get(truth, "params_total"));
        int64_t want_stored = json_integer_value(json_object_get(truth, "checkpoint_stored_params"));
        json_decref(truth);
        snprintf(src, sizeof src, "%s/%s/config.json", root, models[m]);
        lp_arch *a = malloc(sizeof *a);
        lp_error err = {0};
        assert_non_null(a);
        if (lp_arch_from_hf_config(src, a, &err) != LP_OK)
            fail_msg("%s: %s", models[m], err.msg);
        gen_list g = {json_object(), 0, 0, 0};
        json_object_set_new(g.header, "__metadata__", json_pack("{s:s}", "format", "pt"));
        gen_checkpoint(&g, a, strcmp(models[m], "Llama-2-7b-hf") == 0);
        free(a);
        if (g.learnable != want_total || g.stored != want_stored)
            fail_msg("%s: generated %lld learnable / %lld stored, truth %lld / %lld", models[m],
                     (long long)g.learnable, (long long)g.stored, (long long)want_total,
                     (long long)want_stored);
        snprintf(dir, sizeof dir, "%s/real_%s", tmp_root, models[m]);
        mkdir(dir, 0755);
        snprintf(path, sizeof path, "%s/config.json", dir);
        char *config_text = NULL;
        size_t config_size = 0;
        assert_int_equal(lp_read_file(src, 1 << 20, &config_text, &config_size, &err), LP_OK);
        write_bytes(path, config_text, config_size);
        free(config_text);
        for (int variant = 0; variant < 2; variant++) {
            if (variant == 1) {
                /* drop the last layer's o_proj-like tensor: any tensor of the last layer works;
                 * reshape the embedding instead of dropping where names vary */
                json_t *emb = NULL;
                const char *key;
                json_t *v;
                json_object_foreach(g.header, key, v)
                {
                    if (strstr(key, "embed_tokens.weight") || strcmp(key, "wte.weight") == 0 ||
                        strstr(key, "word_embeddings.weight"))
                        emb = v;
                }
                assert_non_null(emb);
                /* [V, H] -> [V, H] stored as [V*2, H/2]: same bytes, wrong shape */
                json_t *shape = json_object_get(emb, "shape");
                json_int_t v0 = json_integer_value(json_array_get(shape, 0));
                json_int_t v1 = json_integer_value(json_array_get(shape, 1));
                json_array_set_new(shape, 0, json_integer(v0 * 2));
                json_array_set_new(shape, 1, json_integer(v1 / 2));
            }
            char *text = json_dumps(g.header, JSON_COMPACT);
            assert_non_null(text);
            size_t n = strlen(text);
            snprintf(path, sizeof path, "%s/model.safetensors", dir);
            int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
            assert_true(fd >= 0);
            uint64_t len = n;
            assert_int_equal(write(fd, &len, 8), 8);
            assert_int_equal(write(fd, text, n), (ssize_t)n);
            free(text);
            if (ftruncate(fd, (off_t)(8 + n + g.offset)) != 0) {
                close(fd);
                fail_msg("%s: cannot make a sparse file of %llu bytes", models[m],
                         (unsigned long long)(8 + n + g.offset));
            }
            close(fd);
            lp_weights *w = open_ok(dir);
            json_t *r = report_of(w, false);
            int64_t total = json_integer_value(json_object_get(json_object_get(r, "params"), "total"));
            assert_int_equal(total, want_stored);
            json_t *checks = json_object_get(r, "checks");
            bool all = true;
            for (size_t c = 0; c < json_array_size(checks); c++) {
                json_t *ch = json_array_get(checks, c);
                bool passed = json_is_true(json_object_get(ch, "passed"));
                if (variant == 0 && !passed)
                    fail_msg("%s: check %s failed: %s", models[m],
                             json_string_value(json_object_get(ch, "name")),
                             json_string_value(json_object_get(ch, "detail")));
                all = all && passed;
            }
            if (variant == 1 && (all || check_passed(r, "tensor_shapes")))
                fail_msg("%s: a reshaped embedding went unnoticed", models[m]);
            json_decref(r);
            lp_weights_close(w);
            unlink(path);
        }
        json_decref(g.header);
    }
}

/* A classifier stored in another dtype than the embedding: compared by value. */
static void test_requantized_classifier(void **state)
{
    (void)state;
    char dir[600], path[700];
    make_dir(dir, sizeof dir, "requant");
    snprintf(path, sizeof path, "%s/config.json", dir);
    char config[1024];
    snprintf(config, sizeof config, tiny_config, "true");
    write_text(path, config);
    float embd[16 * 8], other[16 * 8];
    for (int i = 0; i < 16 * 8; i++) {
        embd[i] = sinf((float)i * 0.37f);
        other[i] = cosf((float)i * 1.91f);
    }
    for (int variant = 0; variant < 2; variant++) {
        lp_st_writer *st;
        lp_error err = {0};
        assert_int_equal(lp_st_writer_create(&st, &err), LP_OK);
        int64_t shape[2] = {16, 8};
        assert_int_equal(lp_st_writer_add(st, "model.embed_tokens.weight", LP_DTYPE_F32, 2, shape,
                                          embd, &err), LP_OK);
        assert_int_equal(lp_st_writer_add_f32_as(st, "lm_head.weight", LP_DTYPE_F16, 2, shape,
                                                 variant ? other : embd, &err), LP_OK);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        assert_int_equal(lp_st_writer_write(st, path, &err), LP_OK);
        lp_st_writer_destroy(st);
        lp_weights *w = open_ok(dir);
        json_t *r = report_of(w, false);
        json_t *tied = json_object_get(r, "tied_embeddings");
        assert_int_equal(json_is_true(json_object_get(tied, "requantized")), variant == 0);
        assert_int_equal(json_is_true(json_object_get(tied, "tied")), variant == 0);
        assert_int_equal(check_passed(r, "tied_embeddings"), variant == 0);
        json_decref(r);
        lp_weights_close(w);
    }
}

/* ---- golden: stories260K ------------------------------------------------------------------ */

static int64_t total_params(const lp_weights *w)
{
    int64_t n = 0;
    for (size_t i = 0; i < lp_weights_count(w); i++)
        n += lp_weights_tensor(w, i)->n_elements;
    return n;
}

/* All rows of t as float32; caller frees. */
static float *all_rows(const lp_tensor *t)
{
    float *v = malloc((size_t)t->n_elements * sizeof *v);
    assert_non_null(v);
    lp_error err = {0};
    int64_t rows = t->n_dims ? t->n_elements / t->shape[t->n_dims - 1] : 1;
    if (lp_tensor_rows_f32(t, 0, rows, v, &err) != LP_OK)
        fail_msg("%s: %s", t->name, err.msg);
    return v;
}

static void test_golden_three_formats(void **state)
{
    (void)state;
    char p_bin[600], p_hf[600], p_gguf[600];
    if (!shared(p_bin, sizeof p_bin, "models/stories260K/stories260K.bin"))
        skip();
    shared(p_hf, sizeof p_hf, "models/stories260K/hf");
    shared(p_gguf, sizeof p_gguf, "models/stories260K/stories260K.gguf");
    lp_weights *bin = open_ok(p_bin), *hf = open_ok(p_hf), *gg = open_ok(p_gguf);
    assert_int_equal(total_params(bin), 260032);
    assert_int_equal(total_params(hf), 260032);
    assert_int_equal(total_params(gg), 292800);
    assert_int_equal(lp_weights_count(bin), 47);
    assert_int_equal(lp_weights_count(hf), 47);
    assert_int_equal(lp_weights_count(gg), 48);
    const int head_dim = 8;
    size_t compared = 0;
    for (size_t i = 0; i < lp_weights_count(bin); i++) {
        const lp_tensor *tb = lp_weights_tensor(bin, i);
        const lp_tensor *th = lp_weights_find(hf, tb->role, tb->layer, tb->expert, tb->is_bias);
        const lp_tensor *tg = lp_weights_find(gg, tb->role, tb->layer, tb->expert, tb->is_bias);
        if (!th || !tg)
            fail_msg("%s (%s layer %d) missing in hf or gguf", tb->name, lp_role_name(tb->role),
                     tb->layer);
        assert_int_equal(th->n_elements, tb->n_elements);
        assert_int_equal(tg->n_elements, tb->n_elements);
        for (int d = 0; d < tb->n_dims; d++) {
            assert_int_equal(th->shape[d], tb->shape[d]);
            assert_int_equal(tg->shape[d], tb->shape[d]);
        }
        float *vb = all_rows(tb), *vh = all_rows(th), *vg = all_rows(tg);
        int64_t cols = tb->n_dims == 2 ? tb->shape[1] : tb->n_elements;
        int64_t rows = tb->n_elements / cols;
        bool permuted = tb->role == LP_ROLE_ATTN_Q || tb->role == LP_ROLE_ATTN_K;
        for (int64_t r = 0; r < rows; r++) {
            /* HF row h*hd + a*(hd/2) + i holds original row h*hd + 2i + a (rotate_half order) */
            int64_t hr = r;
            if (permuted) {
                int64_t h = r / head_dim, within = r % head_dim;
                int64_t pair = within / 2, a = within % 2;
                hr = h * head_dim + a * (head_dim / 2) + pair;
            }
            for (int64_t c = 0; c < cols; c++) {
                float b = vb[r * cols + c];
                if (memcmp(&b, &vg[r * cols + c], 4) != 0 || memcmp(&b, &vh[hr * cols + c], 4) != 0)
                    fail_msg("%s row %lld col %lld: bin %g gguf %g hf %g", tb->name, (long long)r,
                             (long long)c, (double)b, (double)vg[r * cols + c],
                             (double)vh[hr * cols + c]);
            }
        }
        compared += (size_t)tb->n_elements;
        free(vb);
        free(vh);
        free(vg);
    }
    assert_int_equal(compared, 260032);
    /* GGUF's classifier is a copy of the embedding; HF and .bin share it */
    const lp_tensor *out = lp_weights_find(gg, LP_ROLE_LM_HEAD, -1, -1, false);
    const lp_tensor *emb = lp_weights_find(gg, LP_ROLE_TOKEN_EMBD, -1, -1, false);
    assert_non_null(out);
    assert_int_equal(memcmp(out->data, emb->data, emb->n_bytes), 0);
    json_t *r = report_of(gg, false);
    assert_true(json_is_true(json_object_get(json_object_get(r, "tied_embeddings"), "stored_copy")));
    json_decref(r);
    assert_null(lp_weights_find(bin, LP_ROLE_LM_HEAD, -1, -1, false));
    assert_null(lp_weights_find(hf, LP_ROLE_LM_HEAD, -1, -1, false));
    lp_weights_close(bin);
    lp_weights_close(hf);
    lp_weights_close(gg);
}

/* Hand decoding of one block of each type that occurs, straight from ggml-common.h's layouts
 * (independent of lp_dequantize). */
static float hand_decode(lp_dtype dtype, const uint8_t *block, int j)
{
    float d = lp_f16_to_f32(lp_load_u16(block));
    switch (dtype) {
    case LP_DTYPE_Q8_0: return d * (float)(int8_t)block[2 + j];
    case LP_DTYPE_Q4_0: {
        const uint8_t *qs = block + 2;
        int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
        return d * (float)(q - 8);
    }
    case LP_DTYPE_Q5_0: {
        uint32_t qh = lp_load_u32(block + 2);
        const uint8_t *qs = block + 6;
        int lo = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
        int hi = (int)((qh >> j) & 1u) << 4;
        return d * (float)((lo | hi) - 16);
    }
    case LP_DTYPE_F16: return lp_f16_to_f32(lp_load_u16(block + 2 * j));
    default: fail_msg("no hand decoder for %s", lp_dtype_name(dtype));
    }
    return 0;
}

static void test_golden_quant(void **state)
{
    (void)state;
    char p_f32[600];
    if (!shared(p_f32, sizeof p_f32, "models/stories260K/stories260K.gguf"))
        skip();
    static const char *const files[] = {"stories260K-Q4_K_M.gguf", "stories260K-Q6_K.gguf",
                                        "stories260K-TQ2_0.gguf"};
    /* the quant README's largest |dequantized - f32| per stored type, given to two digits: 5%
     * headroom for that rounding (observed F16: 2.407e-4 against the stated 2.4e-4) */
    struct {
        lp_dtype dtype;
        double max_diff;
        int seen;
        double observed;
    } tol[] = {{LP_DTYPE_Q8_0, 7.2e-3, 0, 0}, {LP_DTYPE_Q5_0, 5.8e-2, 0, 0},
               {LP_DTYPE_Q4_0, 0.13, 0, 0},   {LP_DTYPE_F16, 2.4e-4, 0, 0},
               {LP_DTYPE_F32, 0.0, 0, 0}};
    lp_weights *ref = open_ok(p_f32);
    for (size_t f = 0; f < 3; f++) {
        char rel[256], path[600];
        snprintf(rel, sizeof rel, "models/stories260K/quant/%s", files[f]);
        lp_weights *q = open_ok(shared(path, sizeof path, rel));
        assert_int_equal(lp_weights_count(q), 48);
        assert_int_equal(total_params(q), 292800);
        json_t *rep = report_of(q, true);
        json_t *jt = json_object_get(rep, "tensors");
        for (size_t i = 0; i < lp_weights_count(q); i++) {
            const lp_tensor *tq = lp_weights_tensor(q, i);
            const lp_tensor *tr = lp_weights_find_name(ref, tq->name);
            assert_non_null(tr);
            size_t k = 0;
            while (k < 5 && tol[k].dtype != tq->dtype)
                k++;
            if (k == 5)
                fail_msg("%s: %s stores unexpected type %s", files[f], tq->name,
                         lp_dtype_name(tq->dtype));
            tol[k].seen++;
            float *vq = all_rows(tq), *vr = all_rows(tr);
            double worst = 0, mn = INFINITY, mx = -INFINITY, sum = 0;
            for (int64_t e = 0; e < tq->n_elements; e++) {
                worst = fmax(worst, fabs((double)vq[e] - (double)vr[e]));
                mn = fmin(mn, (double)vq[e]);
                mx = fmax(mx, (double)vq[e]);
                sum += (double)vq[e];
            }
            tol[k].observed = fmax(tol[k].observed, worst);
            if (worst > tol[k].max_diff * 1.05)
                fail_msg("%s: %s (%s) max |diff| %g > %g", files[f], tq->name,
                         lp_dtype_name(tq->dtype), worst, tol[k].max_diff);
            /* the first and last block decoded by hand */
            const lp_dtype_info *info = lp_dtype_get(tq->dtype);
            int64_t n_blocks = tq->n_elements / info->block_elems;
            int64_t picks[2] = {0, n_blocks - 1};
            for (int p = 0; p < 2 && tq->dtype != LP_DTYPE_F32; p++) {
                const uint8_t *blk = (const uint8_t *)tq->data + (uint64_t)picks[p] * info->block_bytes;
                for (uint32_t j = 0; j < info->block_elems; j++) {
                    float want = hand_decode(tq->dtype, blk, (int)j);
                    float got = vq[picks[p] * info->block_elems + j];
                    if (memcmp(&want, &got, 4) != 0)
                        fail_msg("%s: %s block %lld value %u: %g, hand-decoded %g", files[f],
                                 tq->name, (long long)picks[p], j, (double)got, (double)want);
                }
            }
            /* --stats agrees with the values */
            json_t *s = json_object_get(json_array_get(jt, i), "stats");
            assert_close(json_real_value(json_object_get(s, "min")), mn, 0);
            assert_close(json_real_value(json_object_get(s, "max")), mx, 0);
            assert_close(json_real_value(json_object_get(s, "mean")),
                               sum / (double)tq->n_elements, 1e-9);
            free(vq);
            free(vr);
        }
        json_decref(rep);
        lp_weights_close(q);
    }
    for (size_t k = 0; k < 5; k++) {
        if (!tol[k].seen)
            fail_msg("no %s tensor met", lp_dtype_name(tol[k].dtype));
        print_message("%-5s %2d tensors, max |dequantized - f32| %.3g (README: %.2g)\n",
                      lp_dtype_name(tol[k].dtype), tol[k].seen, tol[k].observed,
                      tol[k].max_diff);
    }
    lp_weights_close(ref);
}

/* ---- golden: llama2.c export versions 1 and 2 ---------------------------------------------- */

/* export.py's quantize_q80 over one flattened matrix: groups of gs values, scale = absmax/127,
 * code = round-half-even(w / scale); the codes, then the scales. */
static void put_q80(lp_bytes *b, const float *w, int64_t n, int gs)
{
    int64_t n_groups = n / gs;
    float *scales = malloc((size_t)n_groups * sizeof *scales);
    int8_t *codes = malloc((size_t)n);
    assert_true(scales && codes);
    for (int64_t g = 0; g < n_groups; g++) {
        float wmax = 0;
        for (int i = 0; i < gs; i++)
            wmax = fmaxf(wmax, fabsf(w[g * gs + i]));
        float scale = wmax / 127.0f;
        scales[g] = scale;
        for (int i = 0; i < gs; i++)
            codes[g * gs + i] = scale > 0 ? (int8_t)nearbyintf(w[g * gs + i] / scale) : 0;
    }
    lp_bytes_append(b, codes, (size_t)n);
    lp_bytes_append(b, scales, (size_t)n_groups * sizeof *scales);
    free(scales);
    free(codes);
}

/* The legacy file v0 rewritten as export.py --version 1 or 2 (unshared: wcls = the embedding,
 * stored, flag 0). */
static void write_llama2c_version(const lp_weights *v0, const char *path, int version, int gs,
                                  bool unshared)
{
    const lp_arch *a = lp_weights_arch(v0);
    lp_bytes b = {0};
    uint8_t header[256] = {0};
    uint32_t magic = 0x616b3432u;
    int32_t fields[9] = {version,       (int32_t)a->hidden_size, (int32_t)a->ffn_hidden,
                         (int32_t)a->n_layers, (int32_t)a->n_heads, (int32_t)a->n_kv_heads,
                         (int32_t)a->vocab_size, (int32_t)a->n_ctx, 0};
    memcpy(header, &magic, 4);
    memcpy(header + 4, fields, 8 * 4);
    header[36] = unshared ? 0 : 1;
    if (version == 2)
        memcpy(header + 37, &gs, 4);
    lp_bytes_append(&b, header, sizeof header);
    static const char *const per_layer_norms[2] = {"rms_att_weight", "rms_ffn_weight"};
    static const char *const matrices[7] = {"wq", "wk", "wv", "wo", "w1", "w2", "w3"};
    char name[64];
    for (int k = 0; k < 2; k++)
        for (int l = 0; l < a->n_layers; l++) {
            snprintf(name, sizeof name, "layers.%d.%s", l, per_layer_norms[k]);
            const lp_tensor *t = lp_weights_find_name(v0, name);
            assert_non_null(t);
            lp_bytes_append(&b, t->data, t->n_bytes);
        }
    const lp_tensor *final_norm = lp_weights_find_name(v0, "rms_final_weight");
    lp_bytes_append(&b, final_norm->data, final_norm->n_bytes);
    const lp_tensor *emb = lp_weights_find_name(v0, "token_embedding_table");
    const lp_tensor *order[1 + 7 * LP_MAX_LAYERS + 1];
    size_t n_order = 0;
    order[n_order++] = emb;
    for (int k = 0; k < 7; k++)
        for (int l = 0; l < a->n_layers; l++) {
            snprintf(name, sizeof name, "layers.%d.%s", l, matrices[k]);
            order[n_order] = lp_weights_find_name(v0, name);
            assert_non_null(order[n_order]);
            n_order++;
        }
    if (unshared)
        order[n_order++] = emb;
    for (size_t i = 0; i < n_order; i++) {
        if (version == 1) {
            lp_bytes_append(&b, order[i]->data, order[i]->n_bytes);
        } else {
            float *w = all_rows(order[i]);
            put_q80(&b, w, order[i]->n_elements, gs);
            free(w);
        }
    }
    assert_false(b.failed);
    write_bytes(path, b.data, b.len);
    lp_bytes_free(&b);
}

static void patch_i32(const char *path, long offset, int32_t value)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, offset, SEEK_SET), 0);
    assert_int_equal(fwrite(&value, 4, 1, f), 1);
    assert_int_equal(fclose(f), 0);
}

static void test_golden_llama2c_versions(void **state)
{
    (void)state;
    char p_bin[600], p_v1[600], p_v2[600], p_bad[600];
    if (!shared(p_bin, sizeof p_bin, "models/stories260K/stories260K.bin"))
        skip();
    lp_weights *v0 = open_ok(p_bin);
    tmp_path(p_v1, sizeof p_v1, "stories_v1.bin");
    tmp_path(p_v2, sizeof p_v2, "stories_v2.bin");
    tmp_path(p_bad, sizeof p_bad, "stories_bad.bin");
    const int gs = 64;
    write_llama2c_version(v0, p_v1, 1, 0, false);
    write_llama2c_version(v0, p_v2, 2, gs, false);
    lp_weights *v1 = open_ok(p_v1), *v2 = open_ok(p_v2);
    assert_int_equal(lp_weights_count(v1), 47);
    assert_int_equal(lp_weights_count(v2), 47);
    assert_int_equal(total_params(v1), 260032);
    assert_int_equal(total_params(v2), 260032);
    double worst = 0; /* largest |w - dequantized| / scale seen */
    int64_t inexact = 0;
    for (size_t i = 0; i < lp_weights_count(v0); i++) {
        const lp_tensor *t0 = lp_weights_tensor(v0, i);
        const lp_tensor *t1 = lp_weights_find_name(v1, t0->name);
        const lp_tensor *t2 = lp_weights_find_name(v2, t0->name);
        if (!t1 || !t2)
            fail_msg("%s missing in version 1 or 2", t0->name);
        assert_int_equal(t1->role, t0->role);
        assert_int_equal(t2->role, t0->role);
        assert_int_equal(t1->layer, t0->layer);
        assert_int_equal(t2->n_elements, t0->n_elements);
        for (int d = 0; d < t0->n_dims; d++)
            assert_int_equal(t2->shape[d], t0->shape[d]);
        /* version 1: the same float32 bytes */
        assert_int_equal(t1->dtype, LP_DTYPE_F32);
        assert_int_equal(t1->n_bytes, t0->n_bytes);
        if (memcmp(t1->data, t0->data, t0->n_bytes) != 0)
            fail_msg("%s: version 1 values differ from the legacy file", t0->name);
        if (t0->n_dims == 1) { /* norms stay float32 in version 2 */
            assert_int_equal(t2->dtype, LP_DTYPE_F32);
            assert_int_equal(memcmp(t2->data, t0->data, t0->n_bytes), 0);
            continue;
        }
        /* version 2: codes as i8, the group scales right behind them; |w - code * scale| is at
         * most scale/2 (rounding to the nearest code), plus float rounding of w / scale */
        assert_int_equal(t2->dtype, LP_DTYPE_I8);
        assert_int_equal(t2->n_bytes, (uint64_t)t0->n_elements);
        const int8_t *codes = t2->data;
        const uint8_t *scales = (const uint8_t *)t2->data + t2->n_bytes;
        float *w = all_rows(t0);
        for (int64_t j = 0; j < t0->n_elements; j++) {
            float scale = lp_load_f32(scales + 4 * (j / gs));
            double diff = fabs((double)w[j] - (double)codes[j] * (double)scale);
            if (!(diff <= (double)scale * (0.5 + 1e-5)))
                fail_msg("%s[%lld]: legacy %g, version 2 %d * %g (error %g > scale/2)", t0->name,
                         (long long)j, (double)w[j], codes[j], (double)scale, diff);
            if (scale > 0 && diff / (double)scale > worst)
                worst = diff / (double)scale;
            inexact += diff > 0;
        }
        free(w);
    }
    print_message("llama2.c version 2: max |w - dequantized| = %.6f x scale over 260,032 "
                  "weights, %lld not exact\n", worst, (long long)inexact);
    assert_true(worst <= 0.5 + 1e-5);
    assert_true(inexact > 0); /* int8 really lost precision: the check above compared values */
    /* tied: the flag says shared and no classifier is stored */
    for (int v = 0; v < 2; v++) {
        const lp_weights *w = v ? v2 : v1;
        assert_true(lp_weights_arch(w)->tied_embeddings);
        assert_null(lp_weights_find(w, LP_ROLE_LM_HEAD, -1, -1, false));
        json_t *r = report_of(w, v == 1);
        assert_true(check_passed(r, "expected_tensors"));
        assert_true(check_passed(r, "tensor_shapes"));
        assert_true(check_passed(r, "tied_embeddings"));
        json_decref(r);
    }
    assert_int_equal(lp_weights_arch(v2)->storage_dtype, LP_DTYPE_I8);
    lp_weights_close(v1);
    lp_weights_close(v2);

    /* unshared classifiers: stored last, in both versions */
    for (int version = 1; version <= 2; version++) {
        write_llama2c_version(v0, p_bad, version, gs, true);
        lp_weights *w = open_ok(p_bad);
        assert_false(lp_weights_arch(w)->tied_embeddings);
        const lp_tensor *cls = lp_weights_find(w, LP_ROLE_LM_HEAD, -1, -1, false);
        const lp_tensor *emb = lp_weights_find(w, LP_ROLE_TOKEN_EMBD, -1, -1, false);
        assert_non_null(cls);
        assert_string_equal(cls->name, "wcls");
        uint64_t stored = version == 1 ? cls->n_bytes : cls->n_bytes + cls->n_bytes / gs * 4;
        struct stat st;
        assert_int_equal(stat(p_bad, &st), 0);
        assert_int_equal(cls->file_offset + stored, (uint64_t)st.st_size);
        assert_int_equal(memcmp(cls->data, emb->data, emb->n_bytes), 0);
        assert_int_equal(total_params(w), 260032 + 32768);
        lp_weights_close(w);
    }

    /* corrupted headers: one-line format errors naming the field */
    write_llama2c_version(v0, p_bad, 1, 0, false);
    patch_i32(p_bad, 4, 3);
    expect_open_error(p_bad, LP_ERR_FORMAT, "version at byte 4 is 3", NULL);
    write_llama2c_version(v0, p_bad, 2, gs, false);
    patch_i32(p_bad, 37, 0);
    expect_open_error(p_bad, LP_ERR_FORMAT, "group_size at byte 37 is 0", NULL);
    patch_i32(p_bad, 37, 48); /* does not divide dim 64 */
    expect_open_error(p_bad, LP_ERR_FORMAT, "group_size at byte 37 is 48", "dim 64");
    patch_i32(p_bad, 37, 32); /* divides dim, but twice the scales no longer fit the file */
    expect_open_error(p_bad, LP_ERR_FORMAT, NULL, NULL);
    write_llama2c_version(v0, p_bad, 1, 0, false);
    patch_i32(p_bad, 8 + 5 * 4, -512); /* negative vocab_size means nothing after version 0 */
    expect_open_error(p_bad, LP_ERR_FORMAT, "vocab_size at byte 28 is -512", NULL);
    write_llama2c_version(v0, p_bad, 1, 0, false);
    patch_i32(p_bad, 36, 2); /* the flag byte (and three padding bytes) */
    expect_open_error(p_bad, LP_ERR_FORMAT, "shared_classifier at byte 36 is 2", NULL);
    write_llama2c_version(v0, p_bad, 1, 0, false);
    patch_i32(p_bad, 36, 0); /* claims a classifier the file does not hold */
    expect_open_error(p_bad, LP_ERR_FORMAT, NULL, NULL);
    for (int version = 1; version <= 2; version++) {
        write_llama2c_version(v0, p_bad, version, gs, false);
        struct stat st;
        assert_int_equal(stat(p_bad, &st), 0);
        assert_int_equal(truncate(p_bad, st.st_size - 1), 0);
        expect_open_error(p_bad, LP_ERR_FORMAT, NULL, NULL);
        assert_int_equal(truncate(p_bad, 200), 0); /* inside the 256-byte header */
        expect_open_error(p_bad, LP_ERR_FORMAT, NULL, NULL);
    }
    lp_weights_close(v0);
}

/* ---- lp_detect_format ------------------------------------------------------------------------ */

/* A legacy llama2.c checkpoint whose header fits its size exactly: dim 8, hidden 16, 1 layer, 2
 * heads, 2 kv heads, vocab 4, seq 2; 4*8 + 8 + 64*4 + 8 + 3*128 + 8 + 2*2 + 0 floats, shared. */
static size_t legacy_llama2c(uint8_t *buf)
{
    int32_t h[7] = {8, 16, 1, 2, 2, 4, 2};
    size_t floats = 4 * 8 + 8 + 4 * 64 + 8 + 3 * 128 + 8 + 2 * 4;
    memset(buf, 0, 28 + floats * 4);
    memcpy(buf, h, sizeof h);
    return 28 + floats * 4;
}

/* tokenizer.bin: max_token_length 4, then three {score, len, bytes} records. */
static size_t llama2c_tokenizer(uint8_t *buf)
{
    static const char *const pieces[3] = {"<u>", "a", "bc"};
    int32_t max_len = 4;
    size_t n = 0;
    memcpy(buf, &max_len, 4);
    n = 4;
    for (int k = 0; k < 3; k++) {
        float score = -(float)k;
        int32_t len = (int32_t)strlen(pieces[k]);
        memcpy(buf + n, &score, 4);
        memcpy(buf + n + 4, &len, 4);
        memcpy(buf + n + 8, pieces[k], (size_t)len);
        n += 8 + (size_t)len;
    }
    return n;
}

/* {file name, content ("" = empty, NULL = no file; LEGACY/TOKBIN = the builders above), its
 * size (0: strlen), what lp_detect_format must say}: bytes first, then the name, then JSON. */
#define LEGACY "\x01legacy"
#define TOKBIN "\x01tokbin"
static const struct {
    const char *name, *content;
    size_t size;
    lp_file_kind kind;
} DETECT_CASES[] = {
    {"model.bin", "GGUF\x03\0\0\0", 8, LP_FILE_GGUF},                /* magic beats the name */
    {"weights.safetensors", "\x93NUMPY\x01\0", 8, LP_FILE_NPY},
    {"x", "\x32\x34\x6b\x61\x01\0\0\0", 8, LP_FILE_LLAMA2C},         /* "ak42", version 1 */
    {"noname", "\x02\0\0\0\0\0\0\0{}", 10, LP_FILE_SAFETENSORS},     /* u64 length, then '{' */
    {"stories.dat", LEGACY, 0, LP_FILE_LLAMA2C},                     /* a header that fits */
    {"tok.dat", TOKBIN, 0, LP_FILE_LLAMA2C_TOKENIZER},
    {"tok512.bin", TOKBIN, 0, LP_FILE_LLAMA2C_TOKENIZER},            /* not the name's .bin */
    {"config.json", "{\"model_type\": \"llama\"}", 0, LP_FILE_CONFIG_JSON},
    {"tokenizer.json", "{\"model\": {}}", 0, LP_FILE_TOKENIZER_JSON},
    {"gpt2-tokenizer.json", "{}", 0, LP_FILE_TOKENIZER_JSON},
    {"model.safetensors.index.json", "{\"weight_map\": {}}", 0, LP_FILE_SAFETENSORS_INDEX},
    {"params", "  {\"dim\": 4}", 0, LP_FILE_CONFIG_JSON},            /* JSON where no name says */
    {"cut.safetensors", "\xff\xff\xff\xff", 0, LP_FILE_SAFETENSORS}, /* damaged: for its reader */
    {"cut.gguf", "GGU", 0, LP_FILE_GGUF},
    {"pytorch_model.bin", "PK\x03\x04 zip", 0, LP_FILE_LLAMA2C},     /* its reader says zip */
    {"card.yaml", "model:\n  name: x\n", 0, LP_FILE_YAML_CARD},
    {"card.yml", "", 0, LP_FILE_YAML_CARD},
    {"mask.npy", "", 0, LP_FILE_NPY},
    {"missing.gguf", NULL, 0, LP_FILE_GGUF},                         /* no file: the name */
    {"missing", NULL, 0, LP_FILE_UNKNOWN},
    {"README.md", "# notes\n", 0, LP_FILE_UNKNOWN},
};

static void test_detect_format(void **state)
{
    (void)state;
    static uint8_t buf[4096];
    char dir[600], path[700];
    tmp_path(dir, sizeof dir, "detect"); /* apart: a config.json here would describe the rest */
    mkdir(dir, 0755);
    for (size_t i = 0; i < sizeof DETECT_CASES / sizeof DETECT_CASES[0]; i++) {
        const char *content = DETECT_CASES[i].content;
        snprintf(path, sizeof path, "%s/%s", dir, DETECT_CASES[i].name);
        unlink(path);
        size_t size = DETECT_CASES[i].size ? DETECT_CASES[i].size : content ? strlen(content) : 0;
        if (content && strcmp(content, LEGACY) == 0)
            write_bytes(path, buf, legacy_llama2c(buf));
        else if (content && strcmp(content, TOKBIN) == 0)
            write_bytes(path, buf, llama2c_tokenizer(buf));
        else if (content)
            write_bytes(path, content, size);
        lp_file_kind got = lp_detect_format(path);
        if (got != DETECT_CASES[i].kind)
            fail_msg("%s: detected %s, want %s", DETECT_CASES[i].name, lp_file_kind_name(got),
                     lp_file_kind_name(DETECT_CASES[i].kind));
    }
    assert_int_equal(lp_detect_format(dir), LP_FILE_FOLDER);
    assert_string_equal(lp_file_kind_name(LP_FILE_LLAMA2C_TOKENIZER), "llama2.c tokenizer");
}

int main(void)
{
    tmp_root_make("weights");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect_format),
        cmocka_unit_test(test_safetensors_valid),   cmocka_unit_test(test_safetensors_dtypes),
        cmocka_unit_test(test_stats_chunks),        cmocka_unit_test(test_safetensors_malformed),
        cmocka_unit_test(test_sharded),             cmocka_unit_test(test_sparse_header_only),
        cmocka_unit_test(test_sparse_gguf_header_only),
        cmocka_unit_test(test_llama2c),             cmocka_unit_test(test_gguf_generated),
        cmocka_unit_test(test_gguf_moe),            cmocka_unit_test(test_gguf_gpt_oss),
        cmocka_unit_test(test_roles),               cmocka_unit_test(test_checks_fail),
        cmocka_unit_test(test_families),            cmocka_unit_test(test_requantized_classifier),            cmocka_unit_test(test_real_configs),
        cmocka_unit_test(test_golden_three_formats), cmocka_unit_test(test_golden_quant),
        cmocka_unit_test(test_golden_llama2c_versions),
    };
    return tmp_root_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
