/* Tests of the safetensors header scanner (inspect/formats/safetensors.c): JSON strings, numbers, the
 * strict entry grammar with the byte offsets its messages name, and the memory a header of many
 * tiny tensors costs (issue 7). The older malformed-file cases are in test_weights.c. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"
#include "weights_test_util.h"

#include <fcntl.h>
#include <stdbool.h>
#include <unistd.h>

#include "inspect/inspect.h"

/* The header scanner (safetensors.c): JSON string escapes, number syntax, strict entry keys and
 * what may follow the object, each with the byte offset the message must name. */
static void test_safetensors_json_strict(void **state)
{
    (void)state;
    char path[600];
    tmp_path(path, sizeof path, "strict.safetensors");
    /* escapes decode to UTF-8: \u00e9 (2 bytes), a surrogate pair (4 bytes), \/ \" \\ \t */
    write_raw_st(path,
                 "{\"a\\u00e9\\ud83d\\ude00\\/\\\"\\\\\\t\": {\"dtype\": \"F32\", \"shape\": [1],"
                 " \"data_offsets\": [0, 4]}, \"__metadata__\": {\"k\\n\": \"v\\u0041\"}}\n\t\r ",
                 4);
    lp_weights *w = open_ok(path);
    assert_int_equal(lp_weights_count(w), 1);
    assert_string_equal(lp_weights_tensor(w, 0)->name, "a\xc3\xa9\xf0\x9f\x98\x80/\"\\\t");
    lp_weights_close(w);
    /* raw UTF-8 in a name is kept as is; -0 is 0; keys in any order */
    write_raw_st(path,
                 "{\"b\xe2\x82\xac\": {\"data_offsets\": [-0, 8], \"shape\": [2, 1],"
                 " \"dtype\": \"F32\"}}",
                 8);
    w = open_ok(path);
    assert_string_equal(lp_weights_tensor(w, 0)->name, "b\xe2\x82\xac");
    assert_int_equal(lp_weights_tensor(w, 0)->shape[0], 2);
    lp_weights_close(w);
    static const struct {
        const char *header;
        size_t data_len;
        const char *needle1, *needle2;
    } cases[] = {
        /* header positions + 8 are file bytes */
        {"{\"a\\ud83d\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         "byte 11: lone high surrogate", NULL},
        {"{\"a\\ude00\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         "byte 11: lone low surrogate", NULL},
        {"{\"a\\ud83d\\u0041\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
         4, "lone high surrogate", NULL},
        {"{\"a\\u0000\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         "\\u0000", NULL},
        {"{\"a\\x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         "byte 11: invalid escape", NULL},
        {"{\"a\\u12G4\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         "invalid \\u escape", NULL},
        {"{\"a\tb\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         "byte 11: control character 0x09", NULL},
        /* overlong '/', an encoded surrogate, a truncated sequence */
        {"{\"a\xc0\xaf\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         "byte 11: invalid UTF-8 byte 0xc0", NULL},
        {"{\"a\xed\xa0\x80\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         "invalid UTF-8", NULL},
        {"{\"a\xe2\x82\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         "invalid UTF-8", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [01], \"data_offsets\": [0, 4]}}", 4,
         "byte 41: number with a leading zero", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [+1], \"data_offsets\": [0, 4]}}", 4,
         "shape[0] is not a non-negative integer", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1.0], \"data_offsets\": [0, 4]}}", 4,
         "shape[0] is not a non-negative integer", "header entry at file byte 9"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1e0], \"data_offsets\": [0, 4]}}", 4,
         "shape[0] is not a non-negative integer", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 1.]}}", 4,
         "without digits after '.'", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 9223372036854775808]}}",
         4, "is too big (limit 9223372036854775807)", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", 4,
         "must be an array [begin, end]", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, \"4\"]}}", 4,
         "data_offsets are not non-negative integers", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1,2,3,4,5,6,7,8,9], \"data_offsets\": [0, 4]}}",
         4, "9 dimensions exceed the limit of 8", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], \"extra\": 1}}", 4,
         "unknown key 'extra' at file byte 69", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"shape\": [1], \"data_offsets\": [0, 4]}}",
         4, "duplicate key 'shape'", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4],}}", 4,
         "byte 68: expected a string, found '}'", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}} x", 4,
         "byte 70: data after the header object", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}}", 4,
         "data after", NULL},
        {"{\"__metadata__\": {\"k\": \"v\", \"k\": \"w\"}}", 0,
         "byte 36: duplicate key 'k' in '__metadata__'", NULL},
        {"{\"__metadata__\": {}, \"__metadata__\": {}}", 0, "duplicate key '__metadata__'", NULL},
        {"{\"__metadata__\": [\"k\"]}", 0, "'__metadata__' is not an object", NULL},
        {"{\"a\": [1]}", 0, "tensor 'a': header entry is not an object", NULL},
        {"{\"a\": {}}", 0, "missing or non-string 'dtype'", NULL},
        {"{\"a\" {}}", 0, "byte 13: expected ':', found '{'", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}", 4,
         "found the end of the header", NULL},
        {"{\"a", 0, "byte 9: unterminated string", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_raw_st(path, cases[i].header, cases[i].data_len);
        lp_status want = strstr(cases[i].needle1, "dimensions") ? LP_ERR_UNSUPPORTED : LP_ERR_FORMAT;
        expect_open_error(path, want, cases[i].needle1, cases[i].needle2);
    }
    /* a NUL byte as padding is not JSON whitespace: refused, as by serde_json */
    static const char nul_pad[] = "{}\0     ";
    uint8_t buf[8 + sizeof nul_pad - 1];
    uint64_t len = sizeof nul_pad - 1;
    memcpy(buf, &len, 8);
    memcpy(buf + 8, nul_pad, sizeof nul_pad - 1);
    write_bytes(path, buf, sizeof buf);
    expect_open_error(path, LP_ERR_FORMAT, "byte 10: data after the header object", NULL);
}

static long proc_status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long kb = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, fl) == 0 && line[fl] == ':')
            kb = strtol(line + fl + 1, NULL, 10);
    fclose(f);
    return kb;
}

/* Issue 7: a header of 300,000 tiny tensors (a 29 MB file) must not cost a DOM of 20x the file.
 * The peak resident set while opening (file pages included) is measured with the kernel's
 * high-water mark, reset through /proc/self/clear_refs. */
static void test_header_memory(void **state)
{
    (void)state;
    char path[600];
    tmp_path(path, sizeof path, "many_tensors.safetensors");
    const size_t n = 300000;
    size_t cap = n * 100 + 64, hl = 1;
    char *header = malloc(cap);
    assert_non_null(header);
    header[0] = '{';
    for (size_t i = 0; i < n; i++)
        hl += (size_t)snprintf(header + hl, cap - hl,
                               "%s\"model.layers.%06zu.mlp.weight\":{\"dtype\":\"F32\",\"shape\":[1],"
                               "\"data_offsets\":[%zu,%zu]}",
                               i ? "," : "", i, 4 * i, 4 * i + 4);
    header[hl++] = '}';
    while (hl % 8)
        header[hl++] = ' ';
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t len = hl;
    assert_int_equal(fwrite(&len, 8, 1, f), 1);
    assert_int_equal(fwrite(header, 1, hl, f), hl);
    free(header);
    for (size_t i = 0; i < 4 * n; i++)
        fputc(0, f);
    assert_int_equal(fclose(f), 0);
    double file_mb = (double)(8 + hl + 4 * n) / 1e6;

    int fd = open("/proc/self/clear_refs", O_WRONLY);
    bool can_reset = fd >= 0 && write(fd, "5", 1) == 1;
    if (fd >= 0)
        close(fd);
    long before_kb = proc_status_kb("VmRSS");
    lp_weights *w = open_ok(path);
    long peak_kb = proc_status_kb("VmHWM");
    assert_int_equal(lp_weights_count(w), n);
    assert_string_equal(lp_weights_tensor(w, n - 1)->name, "model.layers.299999.mlp.weight");
    assert_int_equal(lp_weights_tensor(w, n - 1)->file_offset, 8 + hl + 4 * (n - 1));
    lp_weights_close(w);
    if (!can_reset || before_kb < 0 || peak_kb < 0) {
        fprintf(stderr, "test_header_memory: /proc/self/clear_refs unavailable, peak not checked\n");
        return;
    }
    double used_mb = (double)(peak_kb - before_kb) * 1024 / 1e6;
    fprintf(stderr, "test_header_memory: %zu tensors, file %.1f MB, open peaked %.1f MB above "
                    "the baseline (%.2fx the file; limit 6x)\n",
            n, file_mb, used_mb, used_mb / file_mb);
    if (lp_test_sanitized())
        fprintf(stderr, "test_header_memory: sanitizer build, the 6x limit is not asserted\n");
    else if (used_mb > 6 * file_mb)
        fail_msg("opening a %.1f MB file took %.1f MB (limit 6x)", file_mb, used_mb);
}

int main(void)
{
    tmp_root_make("st_json");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safetensors_json_strict),
        cmocka_unit_test(test_header_memory),
    };
    return tmp_root_finish(cmocka_run_group_tests(tests, NULL, NULL));
}
