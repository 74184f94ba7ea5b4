/* Unit tests of core/: dtype conversions and sizes, arena, byte buffer, checked math, CLI parsing
 * helpers. */
#include "test_util.h"

#include <math.h>

#include "core/arena.h"
#include "core/bytes.h"
#include "core/checked.h"
#include "core/text.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/mapfile.h"
#include "core/names.h"

static void test_f16_round_trip(void **state)
{
    (void)state;
    /* Every finite half converts to float and back unchanged. */
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t half = (uint16_t)h;
        if ((half & 0x7c00) == 0x7c00 && (half & 0x3ff))
            continue; /* NaN payloads are not preserved bit for bit */
        assert_int_equal(lp_f32_to_f16(lp_f16_to_f32(half)), half);
    }
    assert_true(lp_f16_to_f32(0x3c00) == 1.0f);
    assert_true(lp_f16_to_f32(0xc000) == -2.0f);
    assert_true(lp_f16_to_f32(0x0001) == ldexpf(1.0f, -24)); /* smallest subnormal */
    assert_true(lp_f16_to_f32(0x7bff) == 65504.0f);
    assert_int_equal(lp_f32_to_f16(65520.0f), 0x7c00);   /* rounds to inf */
    assert_int_equal(lp_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(lp_f32_to_f16(-1e9f), 0xfc00);      /* the fp16 mask-fill overflow */
    /* ties to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 */
    assert_int_equal(lp_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);
    assert_int_equal(lp_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02);
}

static void test_bf16_and_fp8(void **state)
{
    (void)state;
    assert_true(lp_bf16_to_f32(0x3f80) == 1.0f);
    assert_int_equal(lp_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(lp_f32_to_bf16(-1e9f), 0xce6e);
    assert_true(isnan(lp_bf16_to_f32(lp_f32_to_bf16(NAN))));
    assert_true(lp_f8_e4m3_to_f32(0x38) == 1.0f);  /* 0.0111.000 */
    assert_true(lp_f8_e4m3_to_f32(0x7e) == 448.0f); /* the largest E4M3 */
    assert_true(isnan(lp_f8_e4m3_to_f32(0x7f)));
    assert_true(lp_f8_e4m3_to_f32(0x01) == ldexpf(1.0f, -9));
    assert_true(lp_f8_e5m2_to_f32(0x3c) == 1.0f);
    assert_true(lp_f8_e5m2_to_f32(0x7b) == 57344.0f);
}

static void test_dtype_sizes(void **state)
{
    (void)state;
    uint64_t bytes;
    assert_true(lp_dtype_bytes_for(LP_DTYPE_F32, 10, &bytes));
    assert_int_equal(bytes, 40);
    assert_true(lp_dtype_bytes_for(LP_DTYPE_Q8_0, 64, &bytes));
    assert_int_equal(bytes, 68);
    assert_false(lp_dtype_bytes_for(LP_DTYPE_Q8_0, 65, &bytes)); /* partial block */
    assert_true(lp_dtype_bytes_for(LP_DTYPE_Q4_K, 256, &bytes));
    assert_int_equal(bytes, 144);
    assert_false(lp_dtype_bytes_for(LP_DTYPE_F64, UINT64_MAX / 4, &bytes)); /* overflow */
    assert_true(fabs(lp_dtype_bits_per_weight(LP_DTYPE_Q4_K) - 4.5) < 1e-12);
    assert_true(fabs(lp_dtype_bits_per_weight(LP_DTYPE_Q8_0) - 8.5) < 1e-12);
    assert_true(fabs(lp_dtype_bits_per_weight(LP_DTYPE_Q6_K) - 6.5625) < 1e-12);
    assert_int_equal(lp_dtype_from_name("BF16"), LP_DTYPE_BF16);
    assert_int_equal(lp_dtype_from_name("fp8"), LP_DTYPE_F8_E4M3);
    assert_int_equal(lp_dtype_from_name("q4_k"), LP_DTYPE_Q4_K);
    assert_int_equal(lp_dtype_from_name("nonsense"), LP_DTYPE_INVALID);
}

static void test_arena(void **state)
{
    (void)state;
    lp_arena *arena;
    lp_error err = {0};
    assert_int_equal(lp_arena_create(1000, &arena, &err), LP_OK);
    void *a = lp_arena_alloc(arena, 10);
    void *b = lp_arena_alloc(arena, 10);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal((uintptr_t)a % 64, 0);
    assert_int_equal((uintptr_t)b % 64, 0);
    size_t mark = lp_arena_mark(arena);
    assert_null(lp_arena_alloc(arena, 5000)); /* full: NULL, not a crash */
    assert_int_equal(lp_arena_mark(arena), mark);
    lp_arena_reset_to(arena, 0);
    assert_ptr_equal(lp_arena_alloc(arena, 1), a);
    assert_null(lp_arena_calloc(arena, SIZE_MAX / 2, 4)); /* overflowing count x size */
    lp_arena_destroy(arena);
}

/* Appends across several doublings keep every byte and the '\0' after them; a size that would
 * overflow fails, sticks, and leaves what was written. */
static void test_bytes(void **state)
{
    (void)state;
    lp_bytes b = {0};
    lp_bytes_append(&b, "", 0);
    assert_non_null(b.data); /* an empty append still makes an empty C string */
    assert_string_equal(b.data, "");
    for (int i = 0; i < 1000; i++)
        lp_bytes_append_char(&b, (char)('a' + i % 26));
    lp_bytes_append_zeros(&b, 3);
    lp_bytes_append(&b, "end", 3);
    assert_false(b.failed);
    assert_int_equal(b.len, 1006);
    assert_true(b.cap > b.len);
    assert_int_equal(b.data[999], 'a' + 999 % 26);
    assert_memory_equal(b.data + 1000, "\0\0\0end", 7);
    assert_int_equal(b.data[b.len], '\0');
    assert_false(lp_bytes_reserve(&b, SIZE_MAX - 2));
    assert_true(b.failed);
    lp_bytes_append(&b, "x", 1);
    lp_bytes_append_zeros(&b, 1);
    assert_int_equal(b.len, 1006);
    assert_memory_equal(b.data + 1003, "end", 4);
    lp_bytes_free(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_false(b.failed);
    lp_bytes_append(&b, "again", 5); /* freed is empty, not failed */
    assert_string_equal(b.data, "again");
    lp_bytes_free(&b);
}

/* Blocks made or adopted stay usable until the list is freed (ASan and the leak checker see
 * every one freed once); a NULL block is refused, and the list grows past its first array. */
static void test_block_list(void **state)
{
    (void)state;
    lp_block_list owned = {0};
    int64_t *first = lp_block_list_alloc(&owned, sizeof *first);
    assert_non_null(first);
    *first = 7;
    assert_non_null(lp_block_list_alloc(&owned, 0)); /* no bytes still gets a block */
    for (int i = 0; i < 100; i++) {
        char *copy = malloc(8);
        assert_non_null(copy);
        snprintf(copy, 8, "b%d", i);
        assert_ptr_equal(lp_block_list_adopt(&owned, copy), copy);
    }
    assert_null(lp_block_list_adopt(&owned, NULL));
    assert_int_equal(owned.n, 102);
    assert_int_equal(*first, 7);
    assert_string_equal(owned.blocks[101], "b99");
    lp_block_list_free(&owned);
    assert_null(owned.blocks);
    assert_int_equal(owned.n, 0);
    assert_non_null(lp_block_list_alloc(&owned, 16)); /* freed is empty and usable again */
    lp_block_list_free(&owned);
}

/* A report with arrays of several element types, as trace/analysis makes them. */
typedef struct owner {
    int64_t n;
    double *d;
    char *c;
    int32_t *i;
} owner;

static void test_alloc_with_arrays(void **state)
{
    (void)state;
    const lp_owned_array arrays[] = {
        LP_OWNED_ARRAY(owner, d, 5),
        LP_OWNED_ARRAY(owner, c, 3),
        LP_OWNED_ARRAY(owner, i, 0),
    };
    owner *o = lp_alloc_with_arrays(sizeof *o, arrays, 3);
    assert_non_null(o);
    assert_int_equal(o->n, 0);
    /* each array after the struct and its predecessor, on a 64-byte boundary, zero-filled */
    assert_true((char *)o->d >= (char *)(o + 1) && (uintptr_t)o->d % 64 == 0);
    assert_true((char *)o->c >= (char *)(o->d + 5) && (uintptr_t)o->c % 64 == 0);
    assert_true((char *)o->i >= o->c + 3 && (uintptr_t)o->i % 64 == 0);
    for (int k = 0; k < 5; k++)
        assert_true(o->d[k] == 0.0);
    o->d[4] = 1.5;
    o->c[2] = 'x';
    assert_true(o->d[4] == 1.5 && o->c[2] == 'x');
    free(o);

    /* a struct the caller holds: the block is its first array */
    owner held = {7, NULL, NULL, NULL};
    void *block = lp_alloc_arrays_of(&held, arrays, 3);
    assert_ptr_equal(block, held.d);
    assert_true(held.n == 7 && (uintptr_t)held.c % 64 == 0 && held.c >= (char *)(held.d + 5));
    assert_true(held.c[0] == 0 && held.c[2] == 0);
    free(held.d);

    const lp_owned_array negative[] = {LP_OWNED_ARRAY(owner, d, -1)};
    owner untouched = {0};
    assert_null(lp_alloc_arrays_of(&untouched, negative, 1));
    assert_null(untouched.d);
    assert_null(lp_alloc_with_arrays(sizeof(owner), negative, 1));
    const lp_owned_array overflowing[] = {LP_OWNED_ARRAY(owner, d, INT64_MAX / 2)};
    assert_null(lp_alloc_with_arrays(sizeof(owner), overflowing, 1));
}

static void test_checked_and_parsing(void **state)
{
    (void)state;
    uint64_t u;
    assert_false(lp_mul_u64(UINT64_MAX / 2 + 1, 2, &u));
    assert_true(lp_mul_u64(1u << 20, 1u << 20, &u));
    assert_int_equal(u, 1ull << 40);
    assert_true(lp_parse_size("24GiB", &u));
    assert_int_equal(u, 24ull << 30);
    assert_true(lp_parse_size("16GB", &u));
    assert_int_equal(u, 16000000000ull);
    assert_true(lp_parse_size("1.5 KiB", &u));
    assert_int_equal(u, 1536);
    assert_false(lp_parse_size("12 parsecs", &u));
    assert_false(lp_parse_size("-1GB", &u));
    int64_t n;
    assert_true(lp_parse_count("8k", &n));
    assert_int_equal(n, 8000);
    assert_true(lp_parse_count("8Ki", &n));
    assert_int_equal(n, 8192);
    assert_false(lp_parse_i64("12x", &n));
    char buf[64];
    assert_string_equal(lp_format_int(8030261248, buf, sizeof buf), "8,030,261,248");
    assert_string_equal(lp_format_int(-1234, buf, sizeof buf), "-1,234");
    assert_string_equal(lp_format_bytes(1536, buf, sizeof buf), "1.50 KiB");
    assert_string_equal(lp_format_flops(2.5e12, buf, sizeof buf), "2.50 TFLOP");
}

static void test_token_ids(void **state)
{
    (void)state;
    int32_t *ids = NULL;
    size_t n = 0;
    lp_error err = {0};
    assert_int_equal(lp_parse_token_ids("1, 403 ,407", &ids, &n, &err), LP_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 403);
    assert_int_equal(ids[2], 407);
    free(ids);
    assert_int_equal(lp_parse_token_ids("1,,2", &ids, &n, &err), LP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "offset 2"));
    assert_int_equal(lp_parse_token_ids("", &ids, &n, &err), LP_ERR_USAGE);
    assert_int_equal(lp_parse_token_ids("-1", &ids, &n, &err), LP_ERR_USAGE);
    assert_int_equal(lp_parse_token_ids("5,x", &ids, &n, &err), LP_ERR_USAGE);
    assert_int_equal(lp_parse_token_ids("2147483648", &ids, &n, &err), LP_ERR_USAGE);
    assert_int_equal(lp_parse_token_ids("2147483647", &ids, &n, &err), LP_OK);
    assert_int_equal(ids[0], INT32_MAX);
    free(ids);
}

static const char *write_prompt(const char *name, const char *bytes, size_t n)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", lp_test_tmp_dir(), name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
    return path;
}

static void test_prompt_file(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    lp_error err = {0};
    /* one final line break is the file's; a second one is the prompt's */
    assert_int_equal(lp_read_prompt_file(write_prompt("p1.txt", "hi\n\n", 4), &text, &len, &err),
                     LP_OK);
    assert_string_equal(text, "hi\n");
    assert_int_equal(len, 3);
    free(text);
    assert_int_equal(lp_read_prompt_file(write_prompt("p2.txt", "hi\r\n", 4), &text, &len, &err),
                     LP_OK);
    assert_string_equal(text, "hi");
    free(text);
    const char *path = write_prompt("p3.txt", "a\0b", 3);
    assert_int_equal(lp_read_prompt_file(path, &text, &len, &err), LP_ERR_FORMAT);
    assert_null(text);
    assert_non_null(strstr(err.msg, "NUL byte at offset 1"));
    assert_non_null(strstr(err.msg, path));
}

static void test_error_messages(void **state)
{
    (void)state;
    lp_error err = {0};
    assert_int_equal(lp_error_set(&err, LP_ERR_FORMAT, "field '%s' is %d", "x", 3), LP_ERR_FORMAT);
    assert_string_equal(err.msg, "field 'x' is 3");
    lp_error_prefix(&err, "%s: ", "config.json");
    assert_string_equal(err.msg, "config.json: field 'x' is 3");
    assert_int_equal(err.code, LP_ERR_FORMAT);
    assert_int_equal(lp_error_set(NULL, LP_ERR_IO, "ignored"), LP_ERR_IO);
    char long_text[2000];
    memset(long_text, 'a', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = '\0';
    lp_error_set(&err, LP_ERR_RANGE, "%s", long_text); /* cut, not overflowed */
    assert_int_equal(strlen(err.msg), LP_ERROR_MSG_MAX - 1);
    /* text quoted from a hostile file cannot break the one-line rule, through either call */
    lp_error_set(&err, LP_ERR_FORMAT, "dtype '%s' is not f16", "o\n\r\x7f\tn");
    assert_string_equal(err.msg, "dtype 'o????n' is not f16");
    lp_error_prefix(&err, "%s: ", "a\nb.db");
    assert_string_equal(err.msg, "a?b.db: dtype 'o????n' is not f16");
}

/* One table serves printing and parsing: the first row of a value is its word, every row parses,
 * and what has no row falls back instead of reading past the table. */
static void test_name_tables(void **state)
{
    (void)state;
    static const lp_name_entry colours[] = {
        {0, "gray"},
        {0, "grey"},
        {2, "red"},
    };
    const size_t n = LP_NAMES_LEN(colours);
    assert_int_equal(n, 3);
    assert_string_equal(lp_names_word(colours, n, 0, "?"), "gray");
    assert_string_equal(lp_names_word(colours, n, 2, "?"), "red");
    assert_string_equal(lp_names_word(colours, n, 1, "?"), "?");
    assert_string_equal(lp_names_word(colours, n, -1, "?"), "?");
    int v = 7;
    assert_true(lp_names_value(colours, n, "grey", false, &v));
    assert_int_equal(v, 0);
    assert_true(lp_names_value(colours, n, "RED", true, &v));
    assert_int_equal(v, 2);
    v = 7;
    assert_false(lp_names_value(colours, n, "RED", false, &v));
    assert_false(lp_names_value(colours, n, NULL, true, &v));
    assert_false(lp_names_value(colours, n, "blue", true, &v));
    assert_int_equal(v, 7);
    /* the library's tables through their public functions */
    assert_string_equal(lp_status_name(LP_ERR_NOT_FOUND), "not found");
    assert_string_equal(lp_status_name((lp_status)LP_STATUS_COUNT), "unknown status");
    assert_int_equal(lp_dtype_from_name("BFloat16"), LP_DTYPE_BF16);
    assert_int_equal(lp_dtype_from_name("half"), LP_DTYPE_F16);
    assert_int_equal(lp_dtype_from_name("float128"), LP_DTYPE_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_round_trip),  cmocka_unit_test(test_bf16_and_fp8),
        cmocka_unit_test(test_dtype_sizes),     cmocka_unit_test(test_arena),
        cmocka_unit_test(test_checked_and_parsing), cmocka_unit_test(test_error_messages),
        cmocka_unit_test(test_token_ids),       cmocka_unit_test(test_prompt_file),
        cmocka_unit_test(test_name_tables),     cmocka_unit_test(test_alloc_with_arrays),
        cmocka_unit_test(test_bytes),           cmocka_unit_test(test_block_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
