/* JSON-lines prompt files (lp_prompts_parse/read): a table of files that read, each with what it
 * holds, and a table of files refused, each with its exact one-line message. */
#define _POSIX_C_SOURCE 200809L /* getpid */
#include "test_util.h"

#include <unistd.h>

#include "core/error.h"
#include "inspect/tokenizer/tokenizer.h"

/* ---- files that read ---- */

typedef struct good_case {
    const char *name;
    const char *data;
    size_t size; /* 0: strlen(data) */
    /* what the prompts hold, one line each: "id|text" or "id|#1,2,3" (id "-" for none) */
    const char *want;
} good_case;

static const good_case good_cases[] = {
    {"one text", "{\"text\": \"Hello world\"}\n", 0, "-|Hello world@1"},
    {"one tokens", "{\"tokens\": [1, 403, 407]}", 0, "-|#1,403,407@1"},
    {"ids string and integer", "{\"id\":\"a\",\"text\":\"x\"}\n{\"tokens\":[0],\"id\":7}\n", 0,
     "a|x@1\n7|#0@2"},
    {"blank lines and crlf", "\n  \r\n{\"text\": \"a\"}\r\n\t\n{\"text\": \"b\"}\r\n", 0,
     "-|a@3\n-|b@5"},
    {"byte order mark", "\xEF\xBB\xBF{\"text\": \"bom\"}", 0, "-|bom@1"},
    {"escapes", "{\"text\": \"q\\\" b\\\\ s\\/ \\b\\f\\n\\r\\t\"}", 0, "-|q\" b\\ s/ \b\f\n\r\t@1"},
    {"unicode escapes and surrogates", "{\"text\": \"\\u00e9\\u4E2D\\ud83d\\ude00\"}", 0,
     "-|\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80@1"},
    {"raw UTF-8 kept", "{\"text\": \"caf\xC3\xA9 \xF0\x9F\x90\x88\"}", 0,
     "-|caf\xC3\xA9 \xF0\x9F\x90\x88@1"},
    {"largest id", "{\"tokens\": [2147483647, 0]}", 0, "-|#2147483647,0@1"},
    {"negative integer id", "{\"id\": -3, \"text\": \"t\"}", 0, "-3|t@1"},
    {"spaces everywhere", " { \"tokens\" : [ 5 , 6 ] , \"id\" : \"s\" } \t", 0, "s|#5,6@1"},
};

/* The prompts written as good_case.want writes them. */
static void describe(const lp_prompts *p, char *out, size_t cap)
{
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < p->n && at < cap; i++) {
        const lp_prompt *q = &p->items[i];
        at += (size_t)snprintf(out + at, cap - at, "%s%s|", i ? "\n" : "", q->id ? q->id : "-");
        if (q->text) {
            assert_int_equal(strlen(q->text), q->text_len);
            at += (size_t)snprintf(out + at, cap - at, "%s", q->text);
        } else {
            assert_null(q->text);
            at += (size_t)snprintf(out + at, cap - at, "#");
            for (size_t k = 0; k < q->n_tokens && at < cap; k++)
                at += (size_t)snprintf(out + at, cap - at, "%s%d", k ? "," : "", q->tokens[k]);
        }
        if (at < cap)
            at += (size_t)snprintf(out + at, cap - at, "@%lld", (long long)q->line);
    }
}

static void test_good_files(void **state)
{
    (void)state;
    int failures = 0;
    for (size_t i = 0; i < sizeof good_cases / sizeof good_cases[0]; i++) {
        const good_case *c = &good_cases[i];
        size_t size = c->size ? c->size : strlen(c->data);
        lp_prompts p;
        lp_error err = {0};
        if (lp_prompts_parse("p.jsonl", c->data, size, &p, &err) != LP_OK) {
            printf("FAIL %s: refused: %s\n", c->name, err.msg);
            failures++;
            continue;
        }
        char got[512];
        describe(&p, got, sizeof got);
        if (strcmp(got, c->want) != 0) {
            printf("FAIL %s:\n  got : %s\n  want: %s\n", c->name, got, c->want);
            failures++;
        }
        lp_prompts_free(&p);
    }
    assert_int_equal(failures, 0);
}

/* ---- files refused: the message names file:line:col ---- */

typedef struct bad_case {
    const char *name;
    const char *data;
    size_t size; /* 0: strlen(data) */
    const char *message;
} bad_case;

static const bad_case bad_cases[] = {
    {"empty file", "", 0, "p.jsonl: no prompt in the file (it is empty)"},
    {"blank only", "\n \n", 0, "p.jsonl: no prompt in the file (only blank lines)"},
    {"not an object", "[1, 2]", 0,
     "p.jsonl:1:1: expected '{' (one JSON object per line), found '['"},
    {"empty object", "{}", 0, "p.jsonl:1:1: empty object: give \"text\" or \"tokens\""},
    {"both", "{\"text\": \"a\", \"tokens\": [1]}", 0,
     "p.jsonl:1:1: give exactly one of \"text\" and \"tokens\" (both given)"},
    {"neither", "{\"id\": \"a\"}", 0,
     "p.jsonl:1:1: give exactly one of \"text\" and \"tokens\" (neither given)"},
    {"unknown key", "{\"text\": \"a\", \"prompt\": \"b\"}", 0,
     "p.jsonl:1:15: unknown key \"prompt\" (expected \"text\", \"tokens\" or \"id\")"},
    {"duplicate key", "{\"text\": \"a\", \"text\": \"b\"}", 0,
     "p.jsonl:1:15: key \"text\" given twice"},
    {"text not a string", "{\"text\": 5}", 0, "p.jsonl:1:10: \"text\" must be a string"},
    {"empty text", "{\"text\": \"\"}", 0, "p.jsonl:1:10: \"text\" is empty"},
    {"tokens not an array", "{\"tokens\": \"1,2\"}", 0,
     "p.jsonl:1:12: \"tokens\" must be an array of token ids"},
    {"empty tokens", "{\"tokens\": [ ]}", 0, "p.jsonl:1:12: \"tokens\" is empty"},
    {"negative token", "{\"tokens\": [1, -2]}", 0, "p.jsonl:1:16: tokens[1]: -2 is negative"},
    {"fraction token", "{\"tokens\": [1.5]}", 0, "p.jsonl:1:13: tokens[0]: 1.5 is not an integer"},
    {"exponent token", "{\"tokens\": [1e3]}", 0, "p.jsonl:1:13: tokens[0]: 1e3 is not an integer"},
    {"token too large", "{\"tokens\": [2147483648]}", 0,
     "p.jsonl:1:13: tokens[0]: 2147483648 exceeds 2147483647"},
    {"token not a number", "{\"tokens\": [true]}", 0,
     "p.jsonl:1:13: expected a token id (an integer), found 't'"},
    {"trailing comma", "{\"tokens\": [1,]}", 0,
     "p.jsonl:1:15: expected a token id (an integer), found ']'"},
    {"leading zero", "{\"tokens\": [01]}", 0, "p.jsonl:1:13: number with a leading zero"},
    {"unclosed tokens", "{\"tokens\": [1 2]}", 0,
     "p.jsonl:1:15: expected ',' or ']' in \"tokens\", found '2'"},
    {"id fraction", "{\"id\": 1.5, \"text\": \"a\"}", 0,
     "p.jsonl:1:8: \"id\" must be a string or an integer"},
    {"id null", "{\"id\": null, \"text\": \"a\"}", 0,
     "p.jsonl:1:8: \"id\" must be a string or an integer"},
    {"duplicate ids", "{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": \"b\", \"text\": \"y\"}\n"
                      "{\"text\": \"z\", \"id\": \"a\"}\n", 0,
     "p.jsonl:3:21: id \"a\" already used on line 1"},
    {"integer id equals string id", "{\"id\": 1, \"text\": \"x\"}\n{\"id\": \"1\", \"text\": \"y\"}",
     0, "p.jsonl:2:8: id \"1\" already used on line 1"},
    {"trailing text", "{\"text\": \"a\"} x", 0,
     "p.jsonl:1:15: expected the end of the line after the object, found 'x'"},
    {"two objects on a line", "{\"text\": \"a\"}{\"text\": \"b\"}", 0,
     "p.jsonl:1:14: expected the end of the line after the object, found '{'"},
    {"object across lines", "{\"text\":\n \"a\"}", 0,
     "p.jsonl:1:9: expected a value, found the end of the line"},
    {"unclosed string", "{\"text\": \"abc}", 0,
     "p.jsonl:1:10: string not closed before the end of the line"},
    {"missing colon", "{\"text\" \"a\"}", 0, "p.jsonl:1:9: expected ':' after the key, found '\"'"},
    {"missing comma", "{\"text\": \"a\" \"id\": 1}", 0,
     "p.jsonl:1:14: expected ',' or '}', found '\"'"},
    {"unquoted key", "{text: \"a\"}", 0, "p.jsonl:1:2: expected a key in double quotes, found 't'"},
    {"control byte", "{\"text\": \"a\tb\"}", 0,
     "p.jsonl:1:12: control byte 0x09 in a string (write it as an escape)"},
    {"invalid UTF-8", "{\"text\": \"a\xC3(\"}", 0, "p.jsonl:1:12: invalid UTF-8 byte 0xC3 in a string"},
    {"overlong UTF-8", "{\"text\": \"\xC0\xAF\"}", 0,
     "p.jsonl:1:11: invalid UTF-8 byte 0xC0 in a string"},
    {"encoded surrogate", "{\"text\": \"\xED\xA0\x80\"}", 0,
     "p.jsonl:1:11: invalid UTF-8 byte 0xED in a string"},
    {"NUL byte", "{\"text\": \"a\0b\"}", 15, "p.jsonl:1:12: control byte 0x00 in a string (write it as an escape)"},
    {"NUL escape", "{\"text\": \"a\\u0000\"}", 0, "p.jsonl:1:12: NUL (\\u0000) in a string"},
    {"lone high surrogate", "{\"text\": \"\\ud83d x\"}", 0,
     "p.jsonl:1:11: high surrogate \\uD83D not followed by a low surrogate"},
    {"lone low surrogate", "{\"text\": \"\\ude00\"}", 0, "p.jsonl:1:11: lone low surrogate \\uDE00"},
    {"short unicode escape", "{\"text\": \"\\u12\"}", 0,
     "p.jsonl:1:11: \\u must be followed by four hex digits"},
    {"unknown escape", "{\"text\": \"\\x41\"}", 0, "p.jsonl:1:11: unknown escape \\'x'"},
    {"long unknown key cut", "{\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": 1}", 0,
     "p.jsonl:1:2: unknown key \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa... (expected \"text\", "
     "\"tokens\" or \"id\")"},
    {"error on a later line", "{\"text\": \"a\"}\n\n{\"tokens\": [x]}\n", 0,
     "p.jsonl:3:13: expected a token id (an integer), found 'x'"},
};

static void test_bad_files(void **state)
{
    (void)state;
    int failures = 0;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        size_t size = c->size ? c->size : strlen(c->data);
        lp_prompts p;
        lp_error err = {0};
        lp_status st = lp_prompts_parse("p.jsonl", c->data, size, &p, &err);
        if (st != LP_ERR_FORMAT || strcmp(err.msg, c->message) != 0) {
            printf("FAIL %s: status %s\n  got : %s\n  want: %s\n", c->name, lp_status_name(st),
                   err.msg, c->message);
            failures++;
        }
        if (st == LP_OK)
            lp_prompts_free(&p);
        else if (p.items || p.n) {
            printf("FAIL %s: a refused file left prompts behind\n", c->name);
            failures++;
        }
    }
    assert_int_equal(failures, 0);
}

/* The reader over a real file, and over none. */
static void test_read_file(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/loupe_test_prompts_%d.jsonl", lp_test_tmp_dir(), (int)getpid());
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("{\"id\": \"first\", \"text\": \"Once upon a time\"}\n{\"tokens\": [1, 2]}\n", f);
    fclose(f);
    lp_prompts p;
    lp_error err = {0};
    assert_int_equal(lp_prompts_read(path, &p, &err), LP_OK);
    assert_int_equal(p.n, 2);
    assert_string_equal(p.items[0].id, "first");
    assert_string_equal(p.items[0].text, "Once upon a time");
    assert_int_equal(p.items[1].n_tokens, 2);
    lp_prompts_free(&p);
    remove(path);
    assert_int_equal(lp_prompts_read(path, &p, &err), LP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "No such file"));
}

/* Ten thousand lines of one-token prompts with ids read; a 10,001st line re-using an id is
 * found (unique-id checking sorts, so this stays fast). */
static void test_many_lines(void **state)
{
    (void)state;
    size_t n = 10000, cap = (n + 1) * 40;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(buf + at, cap - at, "{\"id\": %zu, \"tokens\": [%zu]}\n", i, i);
    lp_prompts p;
    lp_error err = {0};
    assert_int_equal(lp_prompts_parse("many.jsonl", buf, at, &p, &err), LP_OK);
    assert_int_equal(p.n, n);
    assert_int_equal(p.items[n - 1].tokens[0], (int32_t)(n - 1));
    assert_int_equal(p.items[n - 1].line, (int64_t)n);
    lp_prompts_free(&p);
    at += (size_t)snprintf(buf + at, cap - at, "{\"tokens\": [1], \"id\": 17}\n");
    assert_int_equal(lp_prompts_parse("many.jsonl", buf, at, &p, &err), LP_ERR_FORMAT);
    assert_string_equal(err.msg, "many.jsonl:10001:23: id \"17\" already used on line 18");
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_files),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_read_file),
        cmocka_unit_test(test_many_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
