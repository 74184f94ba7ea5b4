/* Tests of the GGUF writer (inspect/formats/gguf_write.h): what it writes, the GGUF reader reads
 * back exactly (every value type, shapes reversed into ne, quant blocks, alignment), and the
 * misuse it refuses, naming the key or tensor. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include "inspect/formats/gguf.h"
#include "inspect/formats/gguf_write.h"

static void scratch_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/gguf-write-%s-%ld.gguf", lp_test_tmp_dir(), name, (long)getpid());
}

static lp_gguf_writer *new_writer(void)
{
    lp_gguf_writer *w;
    lp_error err = {0};
    assert_int_equal(lp_gguf_writer_create(&w, &err), LP_OK);
    return w;
}

static void write_and_open(lp_gguf_writer *w, const char *path, lp_gguf **g)
{
    lp_error err = {0};
    if (lp_gguf_writer_write(w, path, &err) != LP_OK || lp_gguf_open(path, g, &err) != LP_OK)
        fail_msg("%s: %s", path, err.msg);
}

static void test_metadata_round_trip(void **state)
{
    (void)state;
    char path[512];
    scratch_path(path, sizeof path, "kv");
    lp_gguf_writer *w = new_writer();
    lp_error err = {0};
    static const char *const tokens[] = {"<unk>", "a", "\xc4\xa0" "b"};
    static const int32_t types[] = {3, 1, 1};
    static const float scores[] = {0.0f, -1.5f, -2.25f};
    assert_int_equal(lp_gguf_writer_set_str(w, "general.architecture", "llama", &err), LP_OK);
    assert_int_equal(lp_gguf_writer_set_u32(w, "llama.block_count", 7, &err), LP_OK);
    assert_int_equal(lp_gguf_writer_set_f32(w, "llama.rope.freq_base", 500000.0f, &err), LP_OK);
    assert_int_equal(lp_gguf_writer_set_bool(w, "llama.use_parallel_residual", true, &err), LP_OK);
    assert_int_equal(lp_gguf_writer_set_strs(w, "tokenizer.ggml.tokens", tokens, 3, &err), LP_OK);
    assert_int_equal(lp_gguf_writer_set_strs(w, "tokenizer.ggml.merges", NULL, 0, &err), LP_OK);
    assert_int_equal(lp_gguf_writer_set_array(w, "tokenizer.ggml.token_type", LP_GGUF_INT32,
                                              types, 3, &err), LP_OK);
    assert_int_equal(lp_gguf_writer_set_array(w, "tokenizer.ggml.scores", LP_GGUF_FLOAT32,
                                              scores, 3, &err), LP_OK);
    lp_gguf *g;
    write_and_open(w, path, &g);
    assert_int_equal(lp_gguf_version(g), 3);
    assert_int_equal(lp_gguf_n_kv(g), 8);
    assert_int_equal(lp_gguf_n_tensors(g), 0);
    const char *s;
    size_t len;
    assert_true(lp_gguf_get_str(g, "general.architecture", &s, &len));
    assert_true(len == 5 && memcmp(s, "llama", 5) == 0);
    assert_string_equal(lp_gguf_key_name(g, 0), "general.architecture"); /* the order set */
    int64_t v;
    double f;
    bool b;
    assert_true(lp_gguf_get_int(g, "llama.block_count", &v) && v == 7);
    assert_true(lp_gguf_get_float(g, "llama.rope.freq_base", &f) && f == 500000.0);
    assert_true(lp_gguf_get_bool(g, "llama.use_parallel_residual", &b) && b);
    int64_t kv = lp_gguf_find_key(g, "tokenizer.ggml.tokens");
    assert_int_equal(lp_gguf_arr_len(g, kv), 3);
    assert_true(lp_gguf_arr_str(g, kv, 2, &s, &len) && len == 3 && memcmp(s, "\xc4\xa0" "b", 3) == 0);
    assert_int_equal(lp_gguf_arr_len(g, lp_gguf_find_key(g, "tokenizer.ggml.merges")), 0);
    kv = lp_gguf_find_key(g, "tokenizer.ggml.token_type");
    assert_true(lp_gguf_arr_int(g, kv, 0, &v) && v == 3);
    kv = lp_gguf_find_key(g, "tokenizer.ggml.scores");
    assert_true(lp_gguf_arr_float(g, kv, 2, &f) && f == -2.25);
    lp_gguf_close(g);
    lp_gguf_writer_destroy(w);
    remove(path);
}

static void test_tensors_round_trip(void **state)
{
    (void)state;
    char path[512];
    scratch_path(path, sizeof path, "tensors");
    lp_gguf_writer *w = new_writer();
    lp_error err = {0};
    assert_int_equal(lp_gguf_writer_set_u32(w, "general.alignment", 64, &err), LP_OK);
    float m[3 * 5], vec[3] = {0.5f, -1.0f, 3.0e-3f};
    for (int i = 0; i < 15; i++)
        m[i] = (float)i * 0.25f - 1.0f;
    int64_t shape2[2] = {3, 5}, shape1[1] = {3}, shape3[3] = {2, 1, 32};
    assert_int_equal(lp_gguf_writer_add_f32_as(w, "m.weight", LP_DTYPE_F32, 2, shape2, m, &err),
                     LP_OK);
    assert_int_equal(lp_gguf_writer_add_f32_as(w, "m16.weight", LP_DTYPE_F16, 2, shape2, m, &err),
                     LP_OK);
    assert_int_equal(lp_gguf_writer_add_f32_as(w, "v.bias", LP_DTYPE_BF16, 1, shape1, vec, &err),
                     LP_OK);
    uint8_t q8[2 * 34]; /* two Q8_0 blocks: an f16 scale, then 32 int8 values */
    for (size_t i = 0; i < sizeof q8; i++)
        q8[i] = (uint8_t)(i * 7 + 1);
    assert_int_equal(lp_gguf_writer_add(w, "e.weight", LP_DTYPE_Q8_0, 3, shape3, q8, &err), LP_OK);
    lp_gguf *g;
    write_and_open(w, path, &g);
    assert_int_equal(lp_gguf_n_tensors(g), 4);
    assert_string_equal(lp_gguf_tensor_name(g, 0), "m.weight");
    assert_int_equal(lp_gguf_tensor_n_dims(g, 0), 2);
    assert_int_equal(lp_gguf_tensor_ne(g, 0, 0), 5); /* innermost first */
    assert_int_equal(lp_gguf_tensor_ne(g, 0, 1), 3);
    assert_memory_equal(lp_gguf_tensor_data(g, 0), m, sizeof m);
    assert_int_equal(lp_gguf_tensor_dtype(g, 1), LP_DTYPE_F16);
    uint16_t h;
    memcpy(&h, (const uint8_t *)lp_gguf_tensor_data(g, 1) + 2 * 7, 2);
    assert_true(lp_f16_to_f32(h) == m[7]); /* 0.75 is exact in f16 */
    assert_int_equal(lp_gguf_tensor_dtype(g, 2), LP_DTYPE_BF16);
    memcpy(&h, lp_gguf_tensor_data(g, 2), 2);
    assert_true(lp_bf16_to_f32(h) == 0.5f);
    assert_int_equal(lp_gguf_tensor_dtype(g, 3), LP_DTYPE_Q8_0);
    assert_int_equal(lp_gguf_tensor_n_dims(g, 3), 3);
    assert_int_equal(lp_gguf_tensor_ne(g, 3, 0), 32);
    assert_int_equal(lp_gguf_tensor_ne(g, 3, 2), 2);
    assert_int_equal(lp_gguf_tensor_bytes(g, 3), sizeof q8);
    assert_memory_equal(lp_gguf_tensor_data(g, 3), q8, sizeof q8);
    for (int64_t i = 0; i < 4; i++) /* laid out by the declared alignment */
        assert_int_equal(lp_gguf_tensor_offset(g, i) % 64, 0);
    lp_gguf_close(g);
    lp_gguf_writer_destroy(w);
    remove(path);
}

/* Misuse is refused with the status and a message naming what is wrong; the writer stays usable. */
static void test_refusals(void **state)
{
    (void)state;
    lp_gguf_writer *w = new_writer();
    float data[64] = {0};
    int64_t ok_shape[1] = {4}, odd_q8[2] = {2, 31}, neg[2] = {2, -1}, five[5] = {1, 1, 1, 1, 2};
    struct {
        lp_status got, want;
        const char *message;
    } cases[6];
    lp_error errs[6];
    memset(errs, 0, sizeof errs);
    assert_int_equal(lp_gguf_writer_set_u32(w, "a.b", 1, &errs[0]), LP_OK);
    cases[0].got = lp_gguf_writer_set_str(w, "a.b", "again", &errs[0]);
    cases[0].want = LP_ERR_USAGE, cases[0].message = "key 'a.b' set twice";
    cases[1].got = lp_gguf_writer_set_u32(w, "", 1, &errs[1]);
    cases[1].want = LP_ERR_USAGE, cases[1].message = "empty metadata key";
    assert_int_equal(lp_gguf_writer_add(w, "t", LP_DTYPE_F32, 1, ok_shape, data, &errs[2]), LP_OK);
    cases[2].got = lp_gguf_writer_add(w, "t", LP_DTYPE_F32, 1, ok_shape, data, &errs[2]);
    cases[2].want = LP_ERR_USAGE, cases[2].message = "tensor 't' added twice";
    cases[3].got = lp_gguf_writer_add(w, "q", LP_DTYPE_Q8_0, 2, odd_q8, data, &errs[3]);
    cases[3].want = LP_ERR_USAGE, cases[3].message = "rows of 31 values do not hold whole q8_0";
    cases[4].got = lp_gguf_writer_add(w, "n", LP_DTYPE_F32, 2, neg, data, &errs[4]);
    cases[4].want = LP_ERR_RANGE, cases[4].message = "dimension 1 is -1";
    cases[5].got = lp_gguf_writer_add(w, "d", LP_DTYPE_F32, 5, five, data, &errs[5]);
    cases[5].want = LP_ERR_RANGE, cases[5].message = "5 dimensions";
    for (int i = 0; i < 6; i++) {
        print_message("  %s\n", errs[i].msg);
        assert_int_equal(cases[i].got, cases[i].want);
        if (!strstr(errs[i].msg, cases[i].message))
            fail_msg("case %d: '%s' does not say '%s'", i, errs[i].msg, cases[i].message);
    }
    lp_error err = {0};
    assert_int_equal(lp_gguf_writer_add_f32_as(w, "i", LP_DTYPE_Q4_0, 1, ok_shape, data, &err),
                     LP_ERR_UNSUPPORTED);
    assert_int_equal(lp_gguf_writer_set_array(w, "s", LP_GGUF_STRING, data, 1, &err), LP_ERR_USAGE);
    char path[512];
    scratch_path(path, sizeof path, "refusals");
    lp_gguf *g;
    write_and_open(w, path, &g); /* what was accepted is still a valid file */
    assert_int_equal(lp_gguf_n_tensors(g), 1);
    assert_int_equal(lp_gguf_n_kv(g), 1);
    lp_gguf_close(g);
    lp_gguf_writer_destroy(w);
    remove(path);
    lp_gguf_writer *empty = new_writer();
    assert_int_equal(lp_gguf_writer_write(empty, "/nonexistent-dir/x.gguf", &err), LP_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x.gguf"));
    lp_gguf_writer_destroy(empty);
}

/* A write that fails part way (a file-size limit stands in for a full disk) leaves no truncated
 * GGUF behind and says so in one line. */
static void test_failed_write_leaves_nothing(void **state)
{
    (void)state;
    lp_gguf_writer *w = new_writer();
    static float data[16384];
    int64_t shape[1] = {16384};
    lp_error err = {0};
    assert_int_equal(lp_gguf_writer_add(w, "big", LP_DTYPE_F32, 1, shape, data, &err), LP_OK);
    char path[512];
    scratch_path(path, sizeof path, "fsize");
    struct rlimit old, small;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    small = old;
    small.rlim_cur = 4096;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN); /* fwrite fails with EFBIG instead */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    lp_status st = lp_gguf_writer_write(w, path, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);
    print_message("  %s\n", err.msg);
    assert_int_equal(st, LP_ERR_IO);
    assert_non_null(strstr(err.msg, "write failed"));
    assert_null(strchr(err.msg, '\n'));
    assert_int_not_equal(access(path, F_OK), 0);
    lp_gguf_writer_destroy(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metadata_round_trip),
        cmocka_unit_test(test_tensors_round_trip),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_failed_write_leaves_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
