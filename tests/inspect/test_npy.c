/* Tests of the .npy reader: versions, dtypes, shapes, and every malformation it must refuse,
 * plus the real reference arrays of stories260K. */
#include "test_util.h"

#include <math.h>

#include "inspect/formats/npy.h"

/* Build an .npy in memory: magic, version, header dict padded to 64 bytes, then data. */
static size_t make_npy(uint8_t *buf, size_t cap, int major, const char *dict, const void *data,
                       size_t data_len)
{
    size_t prefix = major == 1 ? 10 : 12;
    size_t dl = strlen(dict);
    size_t total_header = prefix + dl + 1;
    size_t padded = (total_header + 63) / 64 * 64;
    size_t header_len = padded - prefix;
    assert_true(padded + data_len <= cap);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major;
    buf[7] = 0;
    if (major == 1) {
        uint16_t hl = (uint16_t)header_len;
        memcpy(buf + 8, &hl, 2);
    } else {
        uint32_t hl = (uint32_t)header_len;
        memcpy(buf + 8, &hl, 4);
    }
    memcpy(buf + prefix, dict, dl);
    memset(buf + prefix + dl, ' ', header_len - dl - 1);
    buf[padded - 1] = '\n';
    if (data_len)
        memcpy(buf + padded, data, data_len);
    return padded + data_len;
}

static void test_versions_and_dtypes(void **state)
{
    (void)state;
    uint8_t buf[1024];
    lp_npy npy;
    lp_error err = {0};
    float f[6] = {1, 2, 3, 4, 5, -6.5f};
    for (int major = 1; major <= 3; major++) {
        size_t n = make_npy(buf, sizeof buf, major,
                            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f,
                            sizeof f);
        assert_int_equal(lp_npy_parse(buf, n, "t.npy", &npy, &err), LP_OK);
        assert_int_equal(npy.version_major, major);
        assert_int_equal(npy.dtype, LP_DTYPE_F32);
        assert_int_equal(npy.n_dims, 2);
        assert_int_equal(npy.shape[0], 2);
        assert_int_equal(npy.shape[1], 3);
        assert_int_equal(npy.n_elements, 6);
        assert_int_equal(npy.data_offset % 64, 0);
        float got[6];
        assert_int_equal(lp_npy_to_f32(&npy, got, &err), LP_OK);
        assert_memory_equal(got, f, sizeof f);
    }
    static const struct {
        const char *descr;
        lp_dtype dtype;
        uint8_t bytes[8];
        size_t size;
        float want0;
    } cases[] = {
        {"'<i4'", LP_DTYPE_I32, {0xfe, 0xff, 0xff, 0xff}, 4, -2.0f},
        {"'<i8'", LP_DTYPE_I64, {7, 0, 0, 0, 0, 0, 0, 0}, 8, 7.0f},
        {"'|u1'", LP_DTYPE_U8, {200}, 1, 200.0f},
        {"'|b1'", LP_DTYPE_BOOL, {1}, 1, 1.0f},
        {"'|i1'", LP_DTYPE_I8, {0x80}, 1, -128.0f},
        {"'<f2'", LP_DTYPE_F16, {0x00, 0x3c}, 2, 1.0f},
        {"\"<f8\"", LP_DTYPE_F64, {0, 0, 0, 0, 0, 0, 0xe0, 0x3f}, 8, 0.5f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dict[128];
        snprintf(dict, sizeof dict, "{'descr': %s, 'fortran_order': False, 'shape': (1,), }",
                 cases[i].descr);
        size_t n = make_npy(buf, sizeof buf, 1, dict, cases[i].bytes, cases[i].size);
        if (lp_npy_parse(buf, n, "t.npy", &npy, &err) != LP_OK)
            fail_msg("%s: %s", cases[i].descr, err.msg);
        assert_int_equal(npy.dtype, cases[i].dtype);
        float got;
        assert_int_equal(lp_npy_to_f32(&npy, &got, &err), LP_OK);
        assert_true(got == cases[i].want0);
    }
    /* a scalar, keys in another order, no trailing comma */
    float one = 3.0f;
    size_t n = make_npy(buf, sizeof buf, 1, "{'shape': (), 'fortran_order': False, 'descr': '<f4'}",
                        &one, 4);
    assert_int_equal(lp_npy_parse(buf, n, "t.npy", &npy, &err), LP_OK);
    assert_int_equal(npy.n_dims, 0);
    assert_int_equal(npy.n_elements, 1);
    /* an empty array */
    n = make_npy(buf, sizeof buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }",
                 NULL, 0);
    assert_int_equal(lp_npy_parse(buf, n, "t.npy", &npy, &err), LP_OK);
    assert_int_equal(npy.n_elements, 0);
}

static void test_malformed(void **state)
{
    (void)state;
    uint8_t buf[1024];
    lp_npy npy;
    lp_error err = {0};
    float f[4] = {0};
    static const struct {
        const char *dict;
        size_t data_len;
        lp_status code;
        const char *needle;
    } cases[] = {
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (4,), }", 16, LP_ERR_UNSUPPORTED, "fortran_order"},
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", 16, LP_ERR_UNSUPPORTED, "big-endian"},
        {"{'descr': '<c8', 'fortran_order': False, 'shape': (4,), }", 16, LP_ERR_UNSUPPORTED, "'<c8'"},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }", 16, LP_ERR_UNSUPPORTED, "structured"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 12, LP_ERR_FORMAT, "needs 16"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 4, LP_ERR_FORMAT, "needs 16"},
        {"{'descr': '<f4', 'fortran_order': False}", 16, LP_ERR_FORMAT, "shape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", 16, LP_ERR_FORMAT, "'x'"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", 16, LP_ERR_FORMAT, "repeated"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4, x), }", 16, LP_ERR_FORMAT, "header byte"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 99999999999), }", 16, LP_ERR_FORMAT, "overflow"},
        {"{'descr': '|f4', 'fortran_order': False, 'shape': (4,), }", 16, LP_ERR_FORMAT, "byte order"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,) ", 16, LP_ERR_FORMAT, "header byte"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = make_npy(buf, sizeof buf, 1, cases[i].dict, f, cases[i].data_len);
        lp_status st = lp_npy_parse(buf, n, "bad.npy", &npy, &err);
        if (st != cases[i].code || !strstr(err.msg, cases[i].needle))
            fail_msg("case %zu: status %d '%s', want %d with '%s'", i, st, err.msg, cases[i].code,
                     cases[i].needle);
        assert_null(strchr(err.msg, '\n'));
    }
    /* bad magic, unknown version, header length past the end, truncation at every byte */
    size_t n = make_npy(buf, sizeof buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }",
                        f, 16);
    uint8_t copy[1024];
    memcpy(copy, buf, n);
    copy[1] = 'X';
    assert_int_equal(lp_npy_parse(copy, n, "bad.npy", &npy, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "magic"));
    memcpy(copy, buf, n);
    copy[6] = 4;
    assert_int_equal(lp_npy_parse(copy, n, "bad.npy", &npy, &err), LP_ERR_UNSUPPORTED);
    memcpy(copy, buf, n);
    copy[8] = 0xff;
    copy[9] = 0xff;
    assert_int_equal(lp_npy_parse(copy, n, "bad.npy", &npy, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "past the end"));
    for (size_t cut = 0; cut < n; cut++)
        assert_int_not_equal(lp_npy_parse(buf, cut, "cut.npy", &npy, &err), LP_OK);
}

static void test_golden_reference(void **state)
{
    (void)state;
    if (!lp_test_shared_dir())
        skip();
    char path[600];
    lp_npy npy;
    lp_error err = {0};
    lp_test_shared_path(path, sizeof path, "models/stories260K/reference/lily/tokens.npy");
    if (lp_npy_open(path, &npy, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(npy.dtype, LP_DTYPE_I32);
    assert_int_equal(npy.n_dims, 1);
    assert_int_equal(npy.shape[0], 16);
    int32_t first[2];
    memcpy(first, npy.data, sizeof first);
    assert_int_equal(first[0], 1); /* BOS */
    assert_int_equal(first[1], 403); /* " Once" per the README's "Once upon a time" ids */
    lp_npy_close(&npy);
    lp_test_shared_path(path, sizeof path, "models/stories260K/reference/lily/attn.npy");
    assert_int_equal(lp_npy_open(path, &npy, &err), LP_OK);
    assert_int_equal(npy.dtype, LP_DTYPE_F32);
    assert_int_equal(npy.n_dims, 4);
    assert_int_equal(npy.shape[0], 5);
    assert_int_equal(npy.shape[1], 8);
    assert_int_equal(npy.shape[2], 16);
    assert_int_equal(npy.shape[3], 16);
    float *v = malloc((size_t)npy.n_elements * sizeof *v);
    assert_non_null(v);
    assert_int_equal(lp_npy_to_f32(&npy, v, &err), LP_OK);
    /* every attention row sums to 1 over s <= t and is exactly 0 above the diagonal */
    for (int64_t row = 0; row < 5 * 8 * 16; row++) {
        int64_t t = row % 16;
        double sum = 0;
        for (int64_t s = 0; s < 16; s++) {
            float x = v[row * 16 + s];
            if (s > t)
                assert_true(x == 0.0f);
            sum += (double)x;
        }
        assert_float_equal(sum, 1.0, 1e-5);
    }
    free(v);
    lp_npy_close(&npy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_versions_and_dtypes),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_golden_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
