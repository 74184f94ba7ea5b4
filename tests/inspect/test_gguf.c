/* Tests of inspect/formats/gguf.c: a generated file with every metadata type read back exactly; every
 * kind of corruption refused with a one-line error naming the offset; and (`test_gguf golden`)
 * the real stories260K GGUF files, F32 and llama.cpp-quantized, against each other. */
#include "test_util.h"

#include <math.h>

#include "core/dtype.h"
#include "gguf_writer.h"
#include "inspect/formats/gguf.h"
#include "inspect/formats/quant.h"

/* ---- a small valid file ----------------------------------------------------------------------- */

enum { KV_ARCH, KV_ALIGN, KV_TOKENS, KV_NESTED };

static float tensor_a[8] = {1, 2, 3, 4, 5, 6, 7, 8}; /* F32 [2, 4] (ne = {4, 2}) */
static uint8_t tensor_b[2 * 34];                      /* Q8_0 [2, 32] */
static uint16_t tensor_c[8];                          /* F16 [8] */

/* Build the reference file. kv indices: 0 arch, 1 alignment, 2 tokens, 3 nested array, then one
 * of every scalar type, int/float/bool arrays. Tensors: 0 "a", 1 "b", 2 "c". */
static void build_valid(lp_gw *w, uint32_t version)
{
    lp_gw_init(w, version);
    lp_gw_kv_str(w, "general.architecture", "llama");
    lp_gw_kv_u32(w, "general.alignment", 32);
    const char *tokens[] = {"<unk>", "<s>", "", "hello"};
    lp_gw_kv_arr_str(w, "tokenizer.ggml.tokens", tokens, 4);
    /* [[1, 2, 3], []] as an array of uint8 arrays */
    lp_gw_key(w, "test.nested", LP_GW_ARRAY);
    lp_gw_u32(w, LP_GW_ARRAY);
    lp_gw_u64(w, 2);
    lp_gw_u32(w, LP_GW_UINT8);
    lp_gw_u64(w, 3);
    lp_gw_u8(w, 1);
    lp_gw_u8(w, 2);
    lp_gw_u8(w, 3);
    lp_gw_u32(w, LP_GW_UINT8);
    lp_gw_u64(w, 0);

    lp_gw_key(w, "t.u8", LP_GW_UINT8);
    lp_gw_u8(w, 200);
    lp_gw_key(w, "t.i8", LP_GW_INT8);
    lp_gw_u8(w, 0xfe); /* -2 */
    lp_gw_key(w, "t.u16", LP_GW_UINT16);
    uint16_t u16 = 65000;
    lp_gw_bytes(w, &u16, 2);
    lp_gw_key(w, "t.i16", LP_GW_INT16);
    int16_t i16 = -30000;
    lp_gw_bytes(w, &i16, 2);
    lp_gw_kv_u32(w, "llama.block_count", 5);
    lp_gw_kv_i32(w, "t.i32", -7);
    lp_gw_kv_f32(w, "t.f32", 1e-5f);
    lp_gw_kv_bool(w, "t.bool", true);
    lp_gw_kv_u64(w, "t.u64", 1ull << 40);
    lp_gw_kv_u64(w, "t.u64big", UINT64_MAX);
    lp_gw_key(w, "t.i64", LP_GW_INT64);
    int64_t i64 = -(1ll << 50);
    lp_gw_bytes(w, &i64, 8);
    lp_gw_kv_f64(w, "t.f64", 0.1);
    const int32_t ints[3] = {4, -4, 8};
    lp_gw_kv_arr_i32(w, "t.arr_i32", ints, 3);
    const float floats[2] = {0.5f, -2.0f};
    lp_gw_kv_arr_f32(w, "t.arr_f32", floats, 2);
    const bool bools[2] = {true, false};
    lp_gw_kv_arr_bool(w, "t.arr_bool", bools, 2);

    for (int i = 0; i < 2; i++) {
        uint16_t d = lp_f32_to_f16(0.5f);
        memcpy(tensor_b + 34 * i, &d, 2);
        for (int j = 0; j < 32; j++)
            tensor_b[34 * i + 2 + j] = (uint8_t)(int8_t)(j - 16 + i);
    }
    for (int i = 0; i < 8; i++)
        tensor_c[i] = lp_f32_to_f16((float)i - 3.5f);
    const int64_t ne_a[2] = {4, 2}, ne_b[2] = {32, 2}, ne_c[1] = {8};
    lp_gw_tensor(w, "a", 2, ne_a, 0, tensor_a, sizeof tensor_a);
    lp_gw_tensor(w, "b", 2, ne_b, 8, tensor_b, sizeof tensor_b);
    lp_gw_tensor(w, "c", 1, ne_c, 1, tensor_c, sizeof tensor_c);
    assert_true(lp_gw_finish(w));
}

static void check_valid(const lp_gw *w, const lp_gguf *g)
{
    assert_int_equal(lp_gguf_version(g), w->version);
    assert_int_equal(lp_gguf_n_kv(g), (int64_t)w->n_kv);
    int64_t v;
    double f;
    bool b;
    const char *s;
    size_t len;
    assert_true(lp_gguf_get_str(g, "general.architecture", &s, &len));
    assert_int_equal(len, 5);
    assert_memory_equal(s, "llama", 5);
    assert_int_equal(lp_gguf_find_key(g, "general.architecture"), KV_ARCH);
    assert_int_equal(lp_gguf_find_key(g, "no.such.key"), -1);
    assert_string_equal(lp_gguf_key_name(g, KV_TOKENS), "tokenizer.ggml.tokens");

    assert_true(lp_gguf_get_int(g, "t.u8", &v) && v == 200);
    assert_true(lp_gguf_get_int(g, "t.i8", &v) && v == -2);
    assert_true(lp_gguf_get_int(g, "t.u16", &v) && v == 65000);
    assert_true(lp_gguf_get_int(g, "t.i16", &v) && v == -30000);
    assert_true(lp_gguf_get_int(g, "llama.block_count", &v) && v == 5);
    assert_true(lp_gguf_get_int(g, "t.i32", &v) && v == -7);
    assert_true(lp_gguf_get_int(g, "t.u64", &v) && v == (1ll << 40));
    assert_false(lp_gguf_get_int(g, "t.u64big", &v)); /* does not fit int64 */
    assert_true(lp_gguf_get_float(g, "t.u64big", &f) && f == 18446744073709551615.0);
    assert_true(lp_gguf_get_int(g, "t.i64", &v) && v == -(1ll << 50));
    assert_true(lp_gguf_get_int(g, "t.bool", &v) && v == 1);
    assert_false(lp_gguf_get_int(g, "t.f32", &v));           /* float is not an integer */
    assert_false(lp_gguf_get_int(g, "general.architecture", &v));
    assert_true(lp_gguf_get_float(g, "t.f32", &f) && f == (double)1e-5f);
    assert_true(lp_gguf_get_float(g, "t.f64", &f) && f == 0.1);
    assert_true(lp_gguf_get_float(g, "t.i32", &f) && f == -7.0);
    assert_true(lp_gguf_get_bool(g, "t.bool", &b) && b);
    assert_false(lp_gguf_get_bool(g, "t.i32", &b));
    assert_false(lp_gguf_get_str(g, "t.i32", &s, &len));
    assert_int_equal(lp_gguf_kv_type(g, lp_gguf_find_key(g, "t.f64")), LP_GGUF_FLOAT64);

    int64_t tok = lp_gguf_find_key(g, "tokenizer.ggml.tokens");
    assert_int_equal(lp_gguf_kv_type(g, tok), LP_GGUF_ARRAY);
    assert_int_equal(lp_gguf_arr_type(g, tok), LP_GGUF_STRING);
    assert_int_equal(lp_gguf_arr_len(g, tok), 4);
    assert_true(lp_gguf_arr_str(g, tok, 3, &s, &len) && len == 5 && memcmp(s, "hello", 5) == 0);
    assert_true(lp_gguf_arr_str(g, tok, 2, &s, &len) && len == 0);
    assert_true(lp_gguf_arr_str(g, tok, 0, &s, &len) && len == 5 && memcmp(s, "<unk>", 5) == 0);
    assert_false(lp_gguf_arr_str(g, tok, 4, &s, &len));
    assert_false(lp_gguf_arr_int(g, tok, 0, &v));
    assert_int_equal(lp_gguf_arr_len(g, -1), 0);
    assert_int_equal(lp_gguf_arr_len(g, KV_ARCH), 0);

    int64_t nested = lp_gguf_find_key(g, "test.nested");
    assert_int_equal(nested, KV_NESTED);
    assert_int_equal(lp_gguf_arr_type(g, nested), LP_GGUF_ARRAY);
    assert_int_equal(lp_gguf_arr_len(g, nested), 2);
    assert_false(lp_gguf_arr_int(g, nested, 0, &v));

    int64_t ints = lp_gguf_find_key(g, "t.arr_i32");
    assert_true(lp_gguf_arr_int(g, ints, 1, &v) && v == -4);
    assert_true(lp_gguf_arr_int(g, ints, 2, &v) && v == 8);
    assert_true(lp_gguf_arr_float(g, ints, 0, &f) && f == 4.0);
    assert_false(lp_gguf_arr_int(g, ints, 3, &v));
    int64_t floats = lp_gguf_find_key(g, "t.arr_f32");
    assert_true(lp_gguf_arr_float(g, floats, 1, &f) && f == -2.0);
    assert_false(lp_gguf_arr_int(g, floats, 1, &v));
    int64_t bools = lp_gguf_find_key(g, "t.arr_bool");
    assert_true(lp_gguf_arr_int(g, bools, 0, &v) && v == 1);
    assert_true(lp_gguf_arr_int(g, bools, 1, &v) && v == 0);

    assert_int_equal(lp_gguf_n_tensors(g), 3);
    assert_string_equal(lp_gguf_tensor_name(g, 1), "b");
    assert_int_equal(lp_gguf_tensor_dtype(g, 0), LP_DTYPE_F32);
    assert_int_equal(lp_gguf_tensor_dtype(g, 1), LP_DTYPE_Q8_0);
    assert_int_equal(lp_gguf_tensor_dtype(g, 2), LP_DTYPE_F16);
    assert_int_equal(lp_gguf_tensor_n_dims(g, 0), 2);
    assert_int_equal(lp_gguf_tensor_ne(g, 0, 0), 4);
    assert_int_equal(lp_gguf_tensor_ne(g, 0, 1), 2);
    assert_int_equal(lp_gguf_tensor_ne(g, 0, 2), 1);
    assert_int_equal(lp_gguf_tensor_bytes(g, 1), 68);
    assert_int_equal(lp_gguf_tensor_bytes(g, 2), 16);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(lp_gguf_tensor_offset(g, i), w->tensors[i].data_pos);
        assert_int_equal(lp_gguf_tensor_offset(g, i) % 32, 0);
    }
    assert_null(lp_gguf_tensor_name(g, 3));
    assert_null(lp_gguf_tensor_data(g, -1));
    assert_memory_equal(lp_gguf_tensor_data(g, 0), tensor_a, sizeof tensor_a);

    float out[64];
    lp_error err = {0};
    assert_int_equal(lp_dequantize(LP_DTYPE_Q8_0, lp_gguf_tensor_data(g, 1), 64, out, &err), LP_OK);
    assert_true(out[0] == -8.0f && out[33] == -7.0f);
    assert_int_equal(lp_dequantize(LP_DTYPE_F16, lp_gguf_tensor_data(g, 2), 8, out, &err), LP_OK);
    assert_true(out[0] == -3.5f && out[7] == 3.5f);
}

static void test_valid_v3_and_v2(void **state)
{
    (void)state;
    for (uint32_t version = 2; version <= 3; version++) {
        lp_gw w;
        build_valid(&w, version);
        lp_gguf *g = NULL;
        lp_error err = {0};
        lp_status st = lp_gguf_open_memory(w.file.data, w.file.len, "valid.gguf", &g, &err);
        if (st != LP_OK)
            print_error("%s\n", err.msg);
        assert_int_equal(st, LP_OK);
        check_valid(&w, g);
        lp_gguf_close(g);
        lp_gw_free(&w);
    }
}

static void test_open_file(void **state)
{
    (void)state;
    lp_gw w;
    build_valid(&w, 3);
    char path[512];
    snprintf(path, sizeof path, "%s/test_gguf_valid.gguf", lp_test_tmp_dir());
    assert_true(lp_gw_write(&w, path));
    lp_gguf *g = NULL;
    lp_error err = {0};
    assert_int_equal(lp_gguf_open(path, &g, &err), LP_OK);
    assert_string_equal(lp_gguf_path(g), path);
    check_valid(&w, g);
    lp_gguf_close(g);
    remove(path);
    lp_gw_free(&w);

    snprintf(path, sizeof path, "%s/test_gguf_missing.gguf", lp_test_tmp_dir());
    assert_int_equal(lp_gguf_open(path, &g, &err), LP_ERR_NOT_FOUND);
    assert_null(g);
}

static void test_dtype_ids(void **state)
{
    (void)state;
    assert_int_equal(lp_gguf_dtype_from_id(0), LP_DTYPE_F32);
    assert_int_equal(lp_gguf_dtype_from_id(8), LP_DTYPE_Q8_0);
    assert_int_equal(lp_gguf_dtype_from_id(12), LP_DTYPE_Q4_K);
    assert_int_equal(lp_gguf_dtype_from_id(30), LP_DTYPE_BF16);
    assert_int_equal(lp_gguf_dtype_from_id(35), LP_DTYPE_TQ2_0);
    assert_int_equal(lp_gguf_dtype_from_id(4), LP_DTYPE_INVALID); /* removed Q4_2 */
    assert_int_equal(lp_gguf_dtype_from_id(31), LP_DTYPE_INVALID);
    assert_int_equal(lp_gguf_dtype_from_id(999), LP_DTYPE_INVALID);
    for (uint32_t id = 0; id < 64; id++) {
        lp_dtype dt = lp_gguf_dtype_from_id(id);
        if (dt != LP_DTYPE_INVALID)
            assert_int_equal(lp_gguf_dtype_to_id(dt), (int)id);
    }
    assert_int_equal(lp_gguf_dtype_to_id(LP_DTYPE_F8_E4M3), -1);
    assert_int_equal(lp_gguf_dtype_to_id(LP_DTYPE_INVALID), -1);
}

/* ---- corrupt files ------------------------------------------------------------------------------ */

/* Opens buf[0..size) and checks the status, that the message is one line starting with the file
 * name, and that it contains `needle`. */
static void expect_error(const char *what, const void *buf, size_t size, lp_status want,
                         const char *needle)
{
    lp_gguf *g = (lp_gguf *)(uintptr_t)1; /* must be reset to NULL */
    lp_error err = {0};
    lp_status st = lp_gguf_open_memory(buf, size, "bad.gguf", &g, &err);
    if (st != want || g != NULL || strncmp(err.msg, "bad.gguf: ", 10) != 0 ||
        strchr(err.msg, '\n') || (needle && !strstr(err.msg, needle))) {
        print_error("%s: got %s '%s', want %s containing '%s'\n", what, lp_status_name(st),
                    err.msg, lp_status_name(want), needle ? needle : "");
        if (st == LP_OK)
            lp_gguf_close(g);
        fail();
    }
}

static void test_truncated_everywhere(void **state)
{
    (void)state;
    lp_gw w;
    build_valid(&w, 3);
    size_t end = w.tensors[2].data_pos + sizeof tensor_c; /* the rest is padding */
    for (size_t size = 0; size < end; size++) {
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu bytes", size);
        expect_error(what, w.file.data, size, LP_ERR_FORMAT, "offset");
    }
    /* padding after the last tensor may go */
    lp_gguf *g;
    lp_error err = {0};
    assert_int_equal(lp_gguf_open_memory(w.file.data, end, "x.gguf", &g, &err), LP_OK);
    lp_gguf_close(g);
    lp_gw_free(&w);
}

typedef struct corrupt_case {
    const char *name;
    void (*mutate)(lp_gw *w);
    lp_status want;
    const char *needle;
} corrupt_case;

static void m_magic(lp_gw *w) { w->file.data[0] = 'X'; }
static void m_v1(lp_gw *w) { lp_gw_put_u32(w, 4, 1); }
static void m_v4(lp_gw *w) { lp_gw_put_u32(w, 4, 4); }
static void m_big_endian(lp_gw *w) { lp_gw_put_u32(w, 4, 0x03000000u); }
static void m_tensor_count(lp_gw *w) { lp_gw_put_u64(w, w->count_pos[0], 1000000000000000000ull); }
static void m_kv_count(lp_gw *w) { lp_gw_put_u64(w, w->count_pos[1], 1ull << 62); }
static void m_kv_count_plus1(lp_gw *w) { lp_gw_put_u64(w, w->count_pos[1], w->n_kv + 1); }
static void m_kv_count_at_bound(lp_gw *w)
{
    /* as many keys as the file size allows: passes the up-front bound, fails while parsing */
    lp_gw_put_u64(w, w->count_pos[1], (w->file.len - 24 - 3 * 32) / 13);
}
static void m_key_len(lp_gw *w) { lp_gw_put_u64(w, w->kv_pos[KV_ARCH], 1ull << 62); }
static void m_str_len(lp_gw *w) { lp_gw_put_u64(w, w->kv_value_pos[KV_ARCH], UINT64_MAX); }
static void m_arr_len(lp_gw *w) { lp_gw_put_u64(w, w->kv_value_pos[KV_TOKENS] + 4, 1ull << 60); }
static void m_arr_len_small_elems(lp_gw *w)
{
    /* the uint8 sub-array of the nested array claims more bytes than remain */
    lp_gw_put_u64(w, w->kv_value_pos[KV_NESTED] + 12 + 4, 1ull << 40);
}
static void m_arr_elem_str_len(lp_gw *w)
{
    /* first token's length field */
    lp_gw_put_u64(w, w->kv_value_pos[KV_TOKENS] + 12, (uint64_t)w->file.len);
}
static void m_align3(lp_gw *w) { lp_gw_put_u32(w, w->kv_value_pos[KV_ALIGN], 3); }
static void m_align0(lp_gw *w) { lp_gw_put_u32(w, w->kv_value_pos[KV_ALIGN], 0); }
static void m_align_type(lp_gw *w) { lp_gw_put_u32(w, w->kv_value_pos[KV_ALIGN] - 4, LP_GW_INT32); }
static void m_value_type(lp_gw *w) { lp_gw_put_u32(w, w->kv_value_pos[KV_ARCH] - 4, 13); }
static void m_elem_type(lp_gw *w) { lp_gw_put_u32(w, w->kv_value_pos[KV_TOKENS], 99); }
static void m_zero_dim(lp_gw *w) { lp_gw_put_u64(w, w->tensors[1].ne_pos, 0); }
static void m_huge_dim(lp_gw *w) { lp_gw_put_u64(w, w->tensors[1].ne_pos + 8, UINT64_MAX); }
static void m_dims_overflow(lp_gw *w)
{
    lp_gw_put_u64(w, w->tensors[0].ne_pos, 1ull << 32);
    lp_gw_put_u64(w, w->tensors[0].ne_pos + 8, 1ull << 32);
}
static void m_bytes_overflow(lp_gw *w)
{
    /* 2^62 F32 elements fit int64 but 2^64 bytes do not */
    lp_gw_put_u64(w, w->tensors[0].ne_pos, 1ull << 61);
    lp_gw_put_u64(w, w->tensors[0].ne_pos + 8, 2);
}
static void m_n_dims0(lp_gw *w) { lp_gw_put_u32(w, w->tensors[0].n_dims_pos, 0); }
static void m_n_dims5(lp_gw *w) { lp_gw_put_u32(w, w->tensors[0].n_dims_pos, 5); }
static void m_offset_past_end(lp_gw *w) { lp_gw_put_u64(w, w->tensors[2].offset_pos, 1u << 20); }
static void m_offset_end_overflow(lp_gw *w)
{
    lp_gw_put_u64(w, w->tensors[2].offset_pos, UINT64_MAX - 31);
}
static void m_offset_misaligned(lp_gw *w)
{
    lp_gw_put_u64(w, w->tensors[1].offset_pos, w->tensors[1].rel_offset + 4);
}
static void m_overlap(lp_gw *w)
{
    lp_gw_put_u64(w, w->tensors[1].offset_pos, w->tensors[0].rel_offset);
}
static void m_overlap_partial(lp_gw *w)
{
    /* c's 16 bytes start in the middle of b's 68 */
    lp_gw_put_u64(w, w->tensors[2].offset_pos, w->tensors[1].rel_offset + 32);
}
static void m_type999(lp_gw *w) { lp_gw_put_u32(w, w->tensors[1].type_pos, 999); }
static void m_type_removed(lp_gw *w) { lp_gw_put_u32(w, w->tensors[1].type_pos, 4); }
static void m_partial_block(lp_gw *w)
{
    /* Q8_0 rows of 16 values are not whole 32-value blocks; keep the element count */
    lp_gw_put_u64(w, w->tensors[1].ne_pos, 16);
    lp_gw_put_u64(w, w->tensors[1].ne_pos + 8, 4);
}
static void m_bool_value(lp_gw *w)
{
    int64_t pos = -1;
    for (size_t i = 0; i + 6 < w->file.len; i++)
        if (memcmp(w->file.data + i, "t.bool", 6) == 0) {
            pos = (int64_t)i;
            break;
        }
    if (pos >= 0)
        w->file.data[pos + 6 + 4] = 2;
}
static void m_nul_in_key(lp_gw *w) { w->file.data[w->kv_pos[KV_ARCH] + 8 + 3] = 0; }
static void m_dup_tensor(lp_gw *w) { w->file.data[w->tensors[1].info_pos + 8] = 'a'; }
static void m_dup_key(lp_gw *w)
{
    /* "t.u16" -> "t.u8\0"? no: rename "t.i16" to "t.u16" */
    for (size_t i = 0; i + 5 < w->file.len; i++)
        if (memcmp(w->file.data + i, "t.i16", 5) == 0) {
            w->file.data[i + 2] = 'u';
            break;
        }
}

static const corrupt_case corrupt_cases[] = {
    {"bad magic", m_magic, LP_ERR_FORMAT, "offset 0: magic"},
    {"GGUF v1", m_v1, LP_ERR_UNSUPPORTED, "version 1"},
    {"GGUF v4", m_v4, LP_ERR_UNSUPPORTED, "version 4"},
    {"big-endian", m_big_endian, LP_ERR_UNSUPPORTED, "big-endian"},
    {"huge tensor count", m_tensor_count, LP_ERR_FORMAT, "offset 8: tensor count 1000000000000000000"},
    {"huge kv count", m_kv_count, LP_ERR_FORMAT, "offset 16: metadata key/value count"},
    {"kv count one too many", m_kv_count_plus1, LP_ERR_FORMAT, "offset"},
    {"kv count at the size bound", m_kv_count_at_bound, LP_ERR_FORMAT, "offset"},
    {"huge key length", m_key_len, LP_ERR_FORMAT, "key length 4611686018427387904"},
    {"huge string length", m_str_len, LP_ERR_FORMAT, "string value length 18446744073709551615"},
    {"huge array length", m_arr_len, LP_ERR_FORMAT, "array length 1152921504606846976"},
    {"huge nested array length", m_arr_len_small_elems, LP_ERR_FORMAT, "array length 1099511627776"},
    {"string element past end", m_arr_elem_str_len, LP_ERR_FORMAT, "string array element length"},
    {"alignment 3", m_align3, LP_ERR_FORMAT, "general.alignment 3 is not a power of two"},
    {"alignment 0", m_align0, LP_ERR_FORMAT, "general.alignment 0 is not a power of two"},
    {"alignment not u32", m_align_type, LP_ERR_FORMAT, "general.alignment has type int32"},
    {"bad value type", m_value_type, LP_ERR_FORMAT, "value type 13"},
    {"bad array element type", m_elem_type, LP_ERR_FORMAT, "array element type 99"},
    {"zero dimension", m_zero_dim, LP_ERR_FORMAT, "ne[0] = 0"},
    {"dimension above int64", m_huge_dim, LP_ERR_FORMAT, "ne[1] = 18446744073709551615"},
    {"dims product overflow", m_dims_overflow, LP_ERR_FORMAT, "overflows"},
    {"byte count overflow", m_bytes_overflow, LP_ERR_FORMAT, "overflow"},
    {"n_dims 0", m_n_dims0, LP_ERR_FORMAT, "n_dims 0"},
    {"n_dims 5", m_n_dims5, LP_ERR_FORMAT, "n_dims 5"},
    {"offset past end", m_offset_past_end, LP_ERR_FORMAT, "relative offset 1048576"},
    {"offset + size overflow", m_offset_end_overflow, LP_ERR_FORMAT, "past the end"},
    {"misaligned offset", m_offset_misaligned, LP_ERR_FORMAT, "not a multiple of the alignment"},
    {"overlapping tensors", m_overlap, LP_ERR_FORMAT, "overlaps"},
    {"partly overlapping tensors", m_overlap_partial, LP_ERR_FORMAT, "overlaps"},
    {"unknown type 999", m_type999, LP_ERR_UNSUPPORTED, "ggml type id 999"},
    {"removed type 4", m_type_removed, LP_ERR_UNSUPPORTED, "ggml type id 4"},
    {"row not whole blocks", m_partial_block, LP_ERR_FORMAT, "not a multiple of the q8_0 block size"},
    {"bool value 2", m_bool_value, LP_ERR_FORMAT, "bool value 2"},
    {"NUL in key", m_nul_in_key, LP_ERR_FORMAT, "NUL"},
    {"duplicate tensor", m_dup_tensor, LP_ERR_FORMAT, "duplicate tensor name 'a'"},
    {"duplicate key", m_dup_key, LP_ERR_FORMAT, "duplicate key 't.u16'"},
};

static void test_corrupt_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof corrupt_cases / sizeof corrupt_cases[0]; i++) {
        const corrupt_case *c = &corrupt_cases[i];
        lp_gw w;
        build_valid(&w, 3);
        c->mutate(&w);
        expect_error(c->name, w.file.data, w.file.len, c->want, c->needle);
        /* every error but the magic/version ones names a byte offset or a tensor */
        lp_error err = {0};
        lp_gguf *g;
        lp_gguf_open_memory(w.file.data, w.file.len, "bad.gguf", &g, &err);
        if (!strstr(err.msg, "offset")) {
            print_error("%s: message names no offset: %s\n", c->name, err.msg);
            fail();
        }
        lp_gw_free(&w);
    }
}

static void test_nesting_limit(void **state)
{
    (void)state;
    lp_gw w;
    lp_gw_init(&w, 3);
    lp_gw_key(&w, "deep", LP_GW_ARRAY);
    for (int depth = 0; depth < 20; depth++) {
        lp_gw_u32(&w, LP_GW_ARRAY);
        lp_gw_u64(&w, 1);
    }
    lp_gw_u32(&w, LP_GW_UINT8);
    lp_gw_u64(&w, 0);
    assert_true(lp_gw_finish(&w));
    expect_error("arrays nested 20 deep", w.file.data, w.file.len, LP_ERR_FORMAT,
                 "nested more than");
    lp_gw_free(&w);

    /* 4 deep is fine */
    lp_gw_init(&w, 3);
    lp_gw_key(&w, "deep", LP_GW_ARRAY);
    for (int depth = 0; depth < 3; depth++) {
        lp_gw_u32(&w, LP_GW_ARRAY);
        lp_gw_u64(&w, 1);
    }
    lp_gw_u32(&w, LP_GW_UINT8);
    lp_gw_u64(&w, 2);
    lp_gw_u8(&w, 7);
    lp_gw_u8(&w, 8);
    assert_true(lp_gw_finish(&w));
    lp_gguf *g;
    lp_error err = {0};
    assert_int_equal(lp_gguf_open_memory(w.file.data, w.file.len, "deep.gguf", &g, &err), LP_OK);
    assert_int_equal(lp_gguf_arr_len(g, 0), 1);
    lp_gguf_close(g);
    lp_gw_free(&w);
}

static void test_alignment_honoured(void **state)
{
    (void)state;
    /* general.alignment 64: the data section and offsets follow it */
    lp_gw w;
    lp_gw_init(&w, 3);
    lp_gw_kv_u32(&w, "general.alignment", 64);
    const int64_t ne[1] = {3};
    const float x[3] = {1, 2, 3}, y[3] = {4, 5, 6};
    lp_gw_tensor(&w, "x", 1, ne, 0, x, sizeof x);
    lp_gw_tensor(&w, "y", 1, ne, 0, y, sizeof y);
    assert_true(lp_gw_finish(&w));
    lp_gguf *g;
    lp_error err = {0};
    assert_int_equal(lp_gguf_open_memory(w.file.data, w.file.len, "a64.gguf", &g, &err), LP_OK);
    assert_int_equal(lp_gguf_tensor_offset(g, 1) % 64, 0);
    assert_memory_equal(lp_gguf_tensor_data(g, 1), y, sizeof y);
    lp_gguf_close(g);
    /* the same layout read with the default 32 would put y's offset 64 fine, but a declared 128
     * makes offset 64 misaligned */
    lp_gw_put_u32(&w, w.kv_value_pos[0], 128);
    expect_error("offset 64 under alignment 128", w.file.data, w.file.len, LP_ERR_FORMAT,
                 "not a multiple of the alignment 128");
    lp_gw_free(&w);
}

/* Random byte flips in the header region: anything may be refused, nothing may crash (run under
 * ASan/UBSan with LOUPE_SANITIZE=ON). */
static void test_random_corruption(void **state)
{
    (void)state;
    lp_gw w;
    build_valid(&w, 3);
    uint8_t *copy = malloc(w.file.len);
    assert_non_null(copy);
    uint32_t seed = 99;
    size_t header_end = w.data_start;
    int n_ok = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(copy, w.file.data, w.file.len);
        int flips = 1 + iter % 4;
        for (int k = 0; k < flips; k++) {
            seed = seed * 1664525u + 1013904223u;
            size_t pos = (seed >> 8) % header_end;
            seed = seed * 1664525u + 1013904223u;
            copy[pos] ^= (uint8_t)(1u << ((seed >> 8) % 8));
        }
        lp_gguf *g = NULL;
        lp_error err = {0};
        if (lp_gguf_open_memory(copy, w.file.len, "fuzz.gguf", &g, &err) == LP_OK) {
            n_ok++;
            /* whatever opened must be consistent */
            for (int64_t t = 0; t < lp_gguf_n_tensors(g); t++)
                assert_true(lp_gguf_tensor_offset(g, t) + lp_gguf_tensor_bytes(g, t) <= w.file.len);
            lp_gguf_close(g);
        } else {
            assert_null(g);
            assert_true(strlen(err.msg) > 0);
        }
    }
    /* flips anywhere plus a random truncation */
    for (int iter = 0; iter < 1000; iter++) {
        memcpy(copy, w.file.data, w.file.len);
        seed = seed * 1664525u + 1013904223u;
        size_t size = w.file.len - (seed >> 8) % 64;
        seed = seed * 1664525u + 1013904223u;
        copy[(seed >> 8) % size] ^= (uint8_t)(1u << (iter % 8));
        lp_gguf *g = NULL;
        lp_error err = {0};
        if (lp_gguf_open_memory(copy, size, "fuzz.gguf", &g, &err) == LP_OK) {
            for (int64_t t = 0; t < lp_gguf_n_tensors(g); t++)
                assert_true(lp_gguf_tensor_offset(g, t) + lp_gguf_tensor_bytes(g, t) <= size);
            lp_gguf_close(g);
        }
    }
    free(copy);
    lp_gw_free(&w);
    /* some flips (inside string bytes) leave a valid file: proves the loop did reach parsing */
    assert_true(n_ok > 0);
}

/* ---- golden: the real stories260K GGUF files ---------------------------------------------------- */

static lp_gguf *open_shared(const char *rel)
{
    char path[1024];
    lp_test_shared_path(path, sizeof path, rel);
    lp_gguf *g = NULL;
    lp_error err = {0};
    lp_status st = lp_gguf_open(path, &g, &err);
    if (st != LP_OK)
        print_error("%s\n", err.msg);
    assert_int_equal(st, LP_OK);
    return g;
}

static void test_golden_f32(void **state)
{
    (void)state;
    lp_gguf *g = open_shared("models/stories260K/stories260K.gguf");
    assert_int_equal(lp_gguf_version(g), 3);
    assert_int_equal(lp_gguf_n_tensors(g), 48);
    int64_t v;
    const char *s;
    size_t len;
    assert_true(lp_gguf_get_str(g, "general.architecture", &s, &len));
    assert_true(len == 5 && memcmp(s, "llama", 5) == 0);
    assert_true(lp_gguf_get_int(g, "llama.block_count", &v) && v == 5);
    assert_true(lp_gguf_get_int(g, "llama.embedding_length", &v) && v == 64);
    assert_true(lp_gguf_get_int(g, "llama.context_length", &v) && v == 512);
    assert_true(lp_gguf_get_int(g, "llama.attention.head_count", &v) && v == 8);
    assert_true(lp_gguf_get_int(g, "llama.attention.head_count_kv", &v) && v == 4);
    assert_true(lp_gguf_get_int(g, "llama.feed_forward_length", &v) && v == 172);
    int64_t tok = lp_gguf_find_key(g, "tokenizer.ggml.tokens");
    assert_true(tok >= 0);
    assert_int_equal(lp_gguf_arr_type(g, tok), LP_GGUF_STRING);
    assert_int_equal(lp_gguf_arr_len(g, tok), 512);
    /* byte-fallback pieces: id b + 3 is "<0xXX>" */
    assert_true(lp_gguf_arr_str(g, tok, 13, &s, &len));
    assert_true(len == 6 && memcmp(s, "<0x0A>", 6) == 0);
    int64_t emb = lp_gguf_find_tensor(g, "token_embd.weight");
    assert_true(emb >= 0);
    assert_int_equal(lp_gguf_find_tensor(g, "token_embd"), -1); /* whole names only */
    assert_int_equal(lp_gguf_tensor_ne(g, emb, 0), 64);
    assert_int_equal(lp_gguf_tensor_ne(g, emb, 1), 512);
    int64_t out = lp_gguf_find_tensor(g, "output.weight");
    /* the converter wrote the tied classifier as a byte copy */
    assert_memory_equal(lp_gguf_tensor_data(g, emb), lp_gguf_tensor_data(g, out), 64 * 512 * 4);
    for (int64_t i = 0; i < 48; i++)
        assert_int_equal(lp_gguf_tensor_dtype(g, i), LP_DTYPE_F32);
    lp_gguf_close(g);
}

/* The type llama-quantize stored for each tensor (quant/README.md). */
static lp_dtype expected_type(const char *file, const char *name)
{
    if (strstr(name, "norm"))
        return LP_DTYPE_F32;
    if (strstr(name, "ffn_down"))
        return LP_DTYPE_F16;
    if (strcmp(file, "Q4_K_M") == 0) {
        if (!strcmp(name, "output.weight") || !strcmp(name, "blk.2.attn_v.weight") ||
            !strcmp(name, "blk.4.attn_v.weight"))
            return LP_DTYPE_Q8_0;
        return LP_DTYPE_Q5_0;
    }
    if (strcmp(file, "Q6_K") == 0)
        return LP_DTYPE_Q8_0;
    /* TQ2_0 */
    if (!strcmp(name, "output.weight"))
        return LP_DTYPE_Q8_0;
    if (!strcmp(name, "token_embd.weight"))
        return LP_DTYPE_Q5_0;
    return LP_DTYPE_Q4_0;
}

static void test_golden_quant(void **state)
{
    (void)state;
    static const char *files[3] = {"Q4_K_M", "Q6_K", "TQ2_0"};
    /* README's largest abs differences; the stated figures are rounded to two digits, so allow
     * half a unit in the last digit. Index by dtype. */
    double limit[LP_DTYPE_COUNT] = {0};
    limit[LP_DTYPE_Q8_0] = 7.25e-3;
    limit[LP_DTYPE_Q5_0] = 5.85e-2;
    limit[LP_DTYPE_Q4_0] = 0.135;
    limit[LP_DTYPE_F16] = 2.45e-4;
    double max_seen[LP_DTYPE_COUNT] = {0};
    int n_seen[LP_DTYPE_COUNT] = {0};

    lp_gguf *ref = open_shared("models/stories260K/stories260K.gguf");
    float *a = malloc(512 * 64 * sizeof(float)), *b = malloc(512 * 64 * sizeof(float));
    assert_true(a && b);
    for (int f = 0; f < 3; f++) {
        char rel[256];
        snprintf(rel, sizeof rel, "models/stories260K/quant/stories260K-%s.gguf", files[f]);
        lp_gguf *g = open_shared(rel);
        assert_int_equal(lp_gguf_version(g), 3);
        assert_int_equal(lp_gguf_n_tensors(g), 48);
        int64_t v;
        assert_true(lp_gguf_get_int(g, "llama.block_count", &v) && v == 5);
        assert_int_equal(lp_gguf_arr_len(g, lp_gguf_find_key(g, "tokenizer.ggml.tokens")), 512);
        double file_max[LP_DTYPE_COUNT] = {0};
        for (int64_t i = 0; i < 48; i++) {
            const char *name = lp_gguf_tensor_name(g, i);
            lp_dtype dt = lp_gguf_tensor_dtype(g, i);
            if (dt != expected_type(files[f], name)) {
                print_error("%s: %s is %s, want %s\n", files[f], name, lp_dtype_name(dt),
                            lp_dtype_name(expected_type(files[f], name)));
                fail();
            }
            int64_t r = lp_gguf_find_tensor(ref, name);
            assert_true(r >= 0);
            int64_t n = 1;
            for (int d = 0; d < 4; d++) {
                assert_int_equal(lp_gguf_tensor_ne(g, i, d), lp_gguf_tensor_ne(ref, r, d));
                n *= lp_gguf_tensor_ne(g, i, d);
            }
            assert_true(n <= 512 * 64);
            lp_error err = {0};
            assert_int_equal(lp_dequantize(dt, lp_gguf_tensor_data(g, i), n, a, &err), LP_OK);
            assert_int_equal(lp_dequantize(LP_DTYPE_F32, lp_gguf_tensor_data(ref, r), n, b, &err),
                             LP_OK);
            double diff = 0;
            for (int64_t k = 0; k < n; k++)
                diff = fmax(diff, fabs((double)a[k] - (double)b[k]));
            if (dt == LP_DTYPE_F32) {
                assert_true(diff == 0.0);
                continue;
            }
            file_max[dt] = fmax(file_max[dt], diff);
            max_seen[dt] = fmax(max_seen[dt], diff);
            n_seen[dt]++;
            if (!(diff <= limit[dt])) {
                print_error("%s: %s (%s): max |diff| %.4g exceeds %.4g\n", files[f], name,
                            lp_dtype_name(dt), diff, limit[dt]);
                fail();
            }
        }
        for (int dt = 0; dt < LP_DTYPE_COUNT; dt++)
            if (file_max[dt] > 0)
                printf("# %s: %s max |dequantized - f32| = %.4g\n", files[f],
                       lp_dtype_name((lp_dtype)dt), file_max[dt]);
        lp_gguf_close(g);
    }
    /* every type occurred and was not a copy of the F32 data */
    const lp_dtype types[4] = {LP_DTYPE_Q8_0, LP_DTYPE_Q5_0, LP_DTYPE_Q4_0, LP_DTYPE_F16};
    for (int i = 0; i < 4; i++) {
        assert_true(n_seen[types[i]] > 0);
        assert_true(max_seen[types[i]] > 0);
        /* and not suspiciously small either: each is within 10x of the README figure */
        assert_true(max_seen[types[i]] > limit[types[i]] / 10);
    }
    free(a);
    free(b);
    lp_gguf_close(ref);
}

/* `test_gguf write-corrupt DIR`: write every corrupt case (and a few truncations) as DIR/NAME.gguf
 * for tests/cli/cli_gguf.sh, which runs `loupe inspect` on them. */
static int write_corrupt(const char *dir)
{
    char path[1024];
    for (size_t i = 0; i < sizeof corrupt_cases / sizeof corrupt_cases[0]; i++) {
        char slug[64];
        size_t n = 0;
        for (const char *p = corrupt_cases[i].name; *p && n < sizeof slug - 1; p++) {
            char ch = (*p >= 'A' && *p <= 'Z') ? (char)(*p - 'A' + 'a') : *p;
            slug[n++] = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ? ch : '_';
        }
        slug[n] = '\0';
        lp_gw w;
        build_valid(&w, 3);
        corrupt_cases[i].mutate(&w);
        snprintf(path, sizeof path, "%s/%s.gguf", dir, slug);
        bool ok = lp_gw_write(&w, path);
        lp_gw_free(&w);
        if (!ok)
            return 1;
    }
    const size_t cuts[] = {0, 3, 12, 40, 300, 700};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        lp_gw w;
        build_valid(&w, 3);
        snprintf(path, sizeof path, "%s/truncated_at_%zu.gguf", dir, cuts[i]);
        w.file.len = cuts[i] < w.file.len ? cuts[i] : w.file.len - 1;
        bool ok = lp_gw_write(&w, path);
        lp_gw_free(&w);
        if (!ok)
            return 1;
    }
    return 0;
}

/* `test_gguf write-seeds DIR`: small valid files with complete model metadata, fuzzing seeds that
 * reach lp_arch_from_gguf and the dequantizers. */
static int write_seeds(const char *dir)
{
    static const char *const archs[] = {"llama", "qwen2moe", "gemma2", "deepseek2", "gpt2"};
    static uint8_t q4k[2 * 144];
    static float f32[64];
    char path[1024], key[128];
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
        const char *arch = archs[a];
        lp_gw w;
        lp_gw_init(&w, 3);
        lp_gw_kv_str(&w, "general.architecture", arch);
#define SEED_KV(suffix, value)                              \
        snprintf(key, sizeof key, "%s." suffix, arch);     \
        lp_gw_kv_u32(&w, key, value)
        SEED_KV("block_count", 2);
        SEED_KV("embedding_length", 64);
        SEED_KV("attention.head_count", 4);
        SEED_KV("attention.head_count_kv", 2);
        SEED_KV("feed_forward_length", 128);
        SEED_KV("context_length", 256);
        SEED_KV("vocab_size", 32);
        SEED_KV("rope.dimension_count", 8);
        SEED_KV("expert_count", 4);
        SEED_KV("expert_used_count", 2);
        SEED_KV("attention.sliding_window", 64);
        SEED_KV("attention.kv_lora_rank", 8);
#undef SEED_KV
        const int64_t ne_q[2] = {256, 2}, ne_f[1] = {64};
        lp_gw_tensor(&w, "blk.0.attn_q.weight", 2, ne_q, 12, q4k, sizeof q4k);
        lp_gw_tensor(&w, "output_norm.weight", 1, ne_f, 0, f32, sizeof f32);
        bool ok = lp_gw_finish(&w);
        snprintf(path, sizeof path, "%s/seed_%s.gguf", dir, arch);
        ok = ok && lp_gw_write(&w, path);
        lp_gw_free(&w);
        if (!ok)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "write-corrupt") == 0)
        return write_corrupt(argv[2]);
    if (argc == 3 && strcmp(argv[1], "write-seeds") == 0)
        return write_seeds(argv[2]);
    if (argc > 1 && strcmp(argv[1], "golden") == 0) {
        LP_TEST_REQUIRE_SHARED();
        const struct CMUnitTest golden[] = {
            cmocka_unit_test(test_golden_f32),
            cmocka_unit_test(test_golden_quant),
        };
        return cmocka_run_group_tests_name("gguf_golden", golden, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_v3_and_v2),   cmocka_unit_test(test_open_file),
        cmocka_unit_test(test_dtype_ids),         cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_corrupt_cases),     cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_alignment_honoured), cmocka_unit_test(test_random_corruption),
    };
    return cmocka_run_group_tests_name("gguf", tests, NULL, NULL);
}
