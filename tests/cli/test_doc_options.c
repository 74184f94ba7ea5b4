/* Unit tests of the man page and completion generators' option lists (core/cli/doc_options.c)
 * and completion scripts (core/cli/gen_completions.c): from a table, from a legacy usage text,
 * and the limits. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include "core/cli/gen_docs_internal.h"

typedef struct demo_opts {
    bool check;
    const char *db;
    int maps;
    struct {
        const char *prompt;
    } input;
} demo_opts;

static const char *const maps_choices[] = {"f16", "f32", "none", NULL};

static const lp_option input_table[] = {
    {LP_OPT_STRING, "prompt", 0, "TEXT", "text to tokenize", 0, 0, NULL, NULL, 0},
    LP_OPT_END_OF_TABLE,
};

static const lp_option demo_table[] = {
    LP_OPT_FLAG_OF(demo_opts, check, "check", "then run the model\nand check it"),
    LP_OPT_STRING_OF(demo_opts, db, "db", "FILE", "database (default loupe.db)"),
    LP_OPT_ENUM_OF(demo_opts, maps, "maps", maps_choices, "map precision; it's [f16] by default"),
    LP_OPT_TABLE_OF(demo_opts, input, input_table),
    LP_OPT_END_OF_TABLE,
};

static const lp_doc_option *find(const lp_doc_command *c, const char *name)
{
    for (int i = 0; i < c->n_options; i++)
        if (strcmp(c->options[i].name, name) == 0)
            return &c->options[i];
    return NULL;
}

static lp_doc_command *collect(const lp_cli_spec *spec, lp_status want)
{
    lp_doc_command *c = calloc(1, sizeof *c);
    assert_non_null(c);
    lp_error err = {0};
    assert_int_equal(lp_doc_collect(spec, c, &err), want);
    return c;
}

static void test_from_table(void **state)
{
    (void)state;
    lp_cli_spec spec = {.name = "demo", .summary = "s", .options = demo_table};
    lp_doc_command *c = collect(&spec, LP_OK);
    assert_int_equal(c->n_options, 5); /* check db maps prompt help, in table order */
    const char *order[] = {"check", "db", "maps", "prompt", "help"};
    for (int i = 0; i < 5; i++)
        assert_string_equal(c->options[i].name, order[i]);
    assert_string_equal(find(c, "check")->metavar, "");
    assert_string_equal(find(c, "check")->help, "then run the model and check it"); /* one line */
    assert_string_equal(find(c, "check")->full_help, "then run the model\nand check it");
    assert_string_equal(find(c, "db")->metavar, "FILE");
    assert_true(lp_doc_value_is_path(find(c, "db")));
    assert_string_equal(find(c, "maps")->metavar, "f16|f32|none");
    assert_string_equal(find(c, "maps")->choices, "f16 f32 none");
    assert_string_equal(find(c, "prompt")->metavar, "TEXT"); /* from the nested table */
    assert_false(lp_doc_value_is_path(find(c, "prompt")));
    free(c);
}

/* A table ends where its array ends: n_options rows are read and no end row is looked for past
 * them (these three rows have none). */
static void test_counted_table(void **state)
{
    (void)state;
    static const lp_option counted[] = {
        LP_OPT_FLAG_OF(demo_opts, check, "check", "then run the model"),
        LP_OPT_STRING_OF(demo_opts, db, "db", "FILE", "database"),
        LP_OPT_ENUM_OF(demo_opts, maps, "maps", maps_choices, "map precision"),
    };
    lp_cli_spec spec = {.name = "demo", .summary = "s", .options = counted, .n_options = 2};
    lp_doc_command *c = collect(&spec, LP_OK);
    assert_int_equal(c->n_options, 3); /* check db help */
    assert_null(find(c, "maps"));
    free(c);
    spec.n_options = LP_CLI_LEN(counted);
    c = collect(&spec, LP_OK);
    assert_int_equal(c->n_options, 4);
    assert_non_null(find(c, "maps"));
    free(c);
    assert_int_equal(lp_cli_table_rows(demo_table, 0), 4); /* up to the end row */
    assert_int_equal(lp_cli_table_rows(demo_table, 2), 2);
    assert_int_equal(lp_cli_table_rows(NULL, 3), 0);
}

static void test_limits(void **state)
{
    (void)state;
    /* A name that is not a shell-safe word is refused, not written into a script. */
    static const lp_option bad_name[] = {
        {LP_OPT_FLAG, "x;rm", 0, NULL, "h", 0, 0, NULL, NULL, 0},
        LP_OPT_END_OF_TABLE,
    };
    lp_cli_spec spec = {.name = "demo", .summary = "s", .options = bad_name};
    free(collect(&spec, LP_ERR_RANGE));
    lp_cli_spec bad_command = {.name = "de mo", .summary = "s", .options = demo_table};
    free(collect(&bad_command, LP_ERR_RANGE));

    /* More options than the list holds: an error naming the limit, not a silent cut. */
    static lp_option many[LP_DOC_MAX_OPTIONS + 2];
    static char names[LP_DOC_MAX_OPTIONS + 1][16];
    for (int i = 0; i <= LP_DOC_MAX_OPTIONS; i++) {
        snprintf(names[i], sizeof names[i], "opt%d", i);
        many[i] = (lp_option){LP_OPT_FLAG, names[i], 0, NULL, "h", 0, 0, NULL, NULL, 0};
    }
    many[LP_DOC_MAX_OPTIONS + 1] = (lp_option)LP_OPT_END_OF_TABLE;
    lp_cli_spec too_many = {.name = "many", .summary = "s", .options = many};
    free(collect(&too_many, LP_ERR_RANGE));

    /* A long help is cut at a word with " ..." to fit one completion line. */
    static char long_help[400];
    for (size_t i = 0; i + 1 < sizeof long_help; i++)
        long_help[i] = i % 6 == 5 ? ' ' : 'w';
    static const lp_option long_table[] = {
        {LP_OPT_FLAG, "long", 0, NULL, long_help, 0, 0, NULL, NULL, 0},
        LP_OPT_END_OF_TABLE,
    };
    lp_cli_spec long_spec = {.name = "demo", .summary = "s", .options = long_table};
    lp_doc_command *c = collect(&long_spec, LP_OK);
    const char *h = find(c, "long")->help;
    size_t n = strlen(h);
    assert_true(n < sizeof c->options[0].help);
    assert_string_equal(h + n - 4, " ...");
    assert_true(h[n - 5] == 'w'); /* whole words before the cut */
    free(c);
}

/* The scripts for one command, as text. */
static char *script(void (*writer)(FILE *, const lp_doc_command *, size_t), const lp_doc_command *c)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    assert_non_null(f);
    writer(f, c, 1);
    assert_int_equal(fclose(f), 0);
    return text;
}

static void test_completion_scripts(void **state)
{
    (void)state;
    lp_cli_spec spec = {.name = "demo", .summary = "the demo's summary", .options = demo_table};
    lp_doc_command *c = collect(&spec, LP_OK);
    char *bash = script(lp_doc_write_bash, c);
    assert_non_null(strstr(bash, "options=\"--check --db --maps --prompt --help\""));
    assert_non_null(strstr(bash, "--maps) values=\"f16 f32 none\" ;;"));
    assert_non_null(strstr(bash, "--db|--prompt) return ;;"));
    char *zsh = script(lp_doc_write_zsh, c);
    assert_non_null(strstr(zsh, "'demo:the demo'\\''s summary'"));
    assert_non_null(strstr(zsh, "'--maps=[map precision; it'\\''s \\[f16\\] by default]:f16|f32|none:(f16 f32 none)'"));
    assert_non_null(strstr(zsh, "'--db=[database (default loupe.db)]:FILE:_files'"));
    char *fish = script(lp_doc_write_fish, c);
    assert_non_null(strstr(fish, "-l maps -x -a 'f16 f32 none' -d 'map precision; it\\'s [f16] by default'"));
    assert_non_null(strstr(fish, "-l db -r -d"));
    free(bash);
    free(zsh);
    free(fish);
    free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_from_table),
        cmocka_unit_test(test_counted_table),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_completion_scripts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
