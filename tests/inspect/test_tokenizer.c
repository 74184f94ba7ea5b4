/* Tokenizer tests: the Hugging Face references in ../shared/tokenizers (ids, pieces, decode),
 * the stories260K prompts (llama2.c tokenizer.bin and GGUF vocabulary), rule checks on strings
 * of our own, Unicode normalization, labels and malformed input. */
#define _POSIX_C_SOURCE 200809L /* popen, for the bzip2'd NormalizationTest.txt */
#include "test_util.h"
#include "gguf_writer.h"

#include <jansson.h>

#include "core/bytes.h"
#include "core/error.h"
#include "inspect/formats/gguf.h"
#include "inspect/tokenizer/tokenizer.h"
#include "inspect/tokenizer/tokenizer_internal.h"

/* ---- helpers ---- */

static lp_tokenizer *open_shared(const char *rel)
{
    char path[1024];
    lp_test_shared_path(path, sizeof path, rel);
    lp_tokenizer *tok = NULL;
    lp_error err = {0};
    lp_status st = lp_tokenizer_open(path, &tok, &err);
    if (st != LP_OK)
        fail_msg("open %s: %s", path, err.msg);
    return tok;
}

static json_t *load_json_shared(const char *rel)
{
    char path[1024];
    lp_test_shared_path(path, sizeof path, rel);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        fail_msg("%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    return root;
}

static int32_t *encode(const lp_tokenizer *tok, const char *text, size_t len, bool special,
                       size_t *n)
{
    int32_t *ids = NULL;
    lp_error err = {0};
    if (lp_tokenizer_encode(tok, text, len, special, &ids, n, &err) != LP_OK)
        fail_msg("encode: %s", err.msg);
    return ids;
}

static char *decode(const lp_tokenizer *tok, const int32_t *ids, size_t n, bool skip)
{
    char *text = NULL;
    lp_error err = {0};
    if (lp_tokenizer_decode(tok, ids, n, skip, &text, &err) != LP_OK)
        fail_msg("decode: %s", err.msg);
    return text;
}

/* Compare ids and pieces with a reference {ids, tokens, decoded, decoded_skip_special}. */
static int check_variant(const lp_tokenizer *tok, const char *name, const char *text,
                         size_t len, bool special, const json_t *ref)
{
    int failures = 0;
    size_t n;
    int32_t *ids = encode(tok, text, len, special, &n);
    const json_t *want_ids = json_object_get(ref, "ids");
    const json_t *want_tokens = json_object_get(ref, "tokens");
    bool same = n == json_array_size(want_ids);
    for (size_t k = 0; same && k < n; k++)
        same = ids[k] == json_integer_value(json_array_get(want_ids, k));
    if (!same) {
        printf("FAIL %s (%s special): ids differ\n  got :", name, special ? "with" : "without");
        for (size_t k = 0; k < n; k++)
            printf(" %d", ids[k]);
        printf("\n  want:");
        for (size_t k = 0; k < json_array_size(want_ids); k++)
            printf(" %lld", (long long)json_integer_value(json_array_get(want_ids, k)));
        printf("\n");
        failures++;
    } else {
        for (size_t k = 0; k < n; k++) {
            const char *want = json_string_value(json_array_get(want_tokens, k));
            const char *got = lp_tokenizer_piece(tok, ids[k]);
            if (!got || strcmp(got, want) != 0) {
                printf("FAIL %s: token %zu is '%s', want '%s'\n", name, k, got ? got : "(null)",
                       want);
                failures++;
            }
        }
        /* decode the reference ids, both ways */
        static const char *const fields[2] = {"decoded", "decoded_skip_special"};
        for (int skip = 0; skip < 2; skip++) {
            char *got = decode(tok, ids, n, skip);
            const char *want = json_string_value(json_object_get(ref, fields[skip]));
            if (strcmp(got, want) != 0) {
                printf("FAIL %s: %s is '%s', want '%s'\n", name, fields[skip], got, want);
                failures++;
            }
            free(got);
        }
    }
    free(ids);
    return failures;
}

static void run_reference(const char *folder)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizers/%s/tokenizer.json", folder);
    lp_tokenizer *tok = open_shared(rel);
    snprintf(rel, sizeof rel, "tokenizers/%s/reference.json", folder);
    json_t *ref = load_json_shared(rel);
    const json_t *cases = json_object_get(ref, "cases");
    assert_true(json_array_size(cases) >= 12);
    int failures = 0;
    size_t i;
    const json_t *c;
    json_array_foreach(cases, i, c)
    {
        const json_t *text = json_object_get(c, "text");
        const char *name = json_string_value(json_object_get(c, "name"));
        failures += check_variant(tok, name, json_string_value(text), json_string_length(text),
                                  true, json_object_get(c, "with_special_tokens"));
        failures += check_variant(tok, name, json_string_value(text), json_string_length(text),
                                  false, json_object_get(c, "without_special_tokens"));
    }
    json_decref(ref);
    lp_tokenizer_close(tok);
    assert_int_equal(failures, 0);
}

static void test_reference_gpt2(void **state)
{
    (void)state;
    run_reference("gpt2");
}

static void test_reference_tinyllama(void **state)
{
    (void)state;
    run_reference("tinyllama");
}

static void test_reference_qwen3(void **state)
{
    (void)state;
    run_reference("qwen3");
}

/* ---- stories260K: llama2.c tokenizer.bin and the GGUF vocabulary ---- */

static void run_stories_prompts(const char *tokenizer_rel)
{
    lp_tokenizer *tok = open_shared(tokenizer_rel);
    json_t *ref = load_json_shared("models/stories260K/reference/prompts.json");
    const json_t *prompts = json_object_get(ref, "prompts");
    assert_true(json_array_size(prompts) >= 3);
    size_t i;
    const json_t *p;
    json_array_foreach(prompts, i, p)
    {
        const char *text = json_string_value(json_object_get(p, "text"));
        const json_t *want = json_object_get(p, "token_ids");
        size_t n;
        int32_t *ids = encode(tok, text, strlen(text), true, &n);
        assert_int_equal(n, json_array_size(want));
        for (size_t k = 0; k < n; k++)
            assert_int_equal(ids[k], json_integer_value(json_array_get(want, k)));
        /* decoding without specials gives the prompt back */
        char *back = decode(tok, ids, n, true);
        assert_string_equal(back, text);
        free(back);
        free(ids);
    }
    /* the README's example */
    size_t n;
    int32_t *ids = encode(tok, "Once upon a time", 16, true, &n);
    static const int32_t want[] = {1, 403, 407, 261, 378};
    assert_int_equal(n, 5);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(ids[k], want[k]);
    free(ids);
    json_decref(ref);
    lp_tokenizer_close(tok);
}

static void test_llama2c_prompts(void **state)
{
    (void)state;
    run_stories_prompts("models/stories260K/tok512.bin");
}

static void test_gguf_vocab_prompts(void **state)
{
    (void)state;
    run_stories_prompts("models/stories260K/stories260K.gguf");
}

/* GGUF and tok512.bin hold the same 512 pieces: their encodings must agree on any text. */
static void test_gguf_equals_llama2c(void **state)
{
    (void)state;
    lp_tokenizer *bin = open_shared("models/stories260K/tok512.bin");
    lp_tokenizer *gguf = open_shared("models/stories260K/stories260K.gguf");
    assert_int_equal(lp_tokenizer_vocab_size(bin), 512);
    assert_int_equal(lp_tokenizer_vocab_size(gguf), 512);
    static const char *const texts[] = {
        "Lily and Ben played in the garden. They saw a big dog!",
        "  two leading spaces and\nnewlines\n\nand tabs\t.",
        "numbers 12345 and unicode caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x99\x82",
        "x",
    };
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        size_t n1, n2;
        int32_t *a = encode(bin, texts[t], strlen(texts[t]), true, &n1);
        int32_t *b = encode(gguf, texts[t], strlen(texts[t]), true, &n2);
        assert_int_equal(n1, n2);
        for (size_t k = 0; k < n1; k++)
            assert_int_equal(a[k], b[k]);
        char *back = decode(gguf, b, n2, true);
        assert_string_equal(back, texts[t]);
        free(back);
        free(a);
        free(b);
    }
    lp_tokenizer_close(bin);
    lp_tokenizer_close(gguf);
}

/* ---- GGUF vocabularies built from the reference tokenizer.json files ----
 * A GGUF writer in a few lines: the vocabulary of a tokenizer.json written as tokenizer.ggml.*
 * metadata (no tensors) must encode the reference strings as the JSON does: byte-level BPE with
 * merges ("gpt2" model with the gpt2/qwen2 pre-tokenizer) and SentencePiece BPE by score ("llama"
 * model, with scores made from the merge ranks). */

static void g_u32(lp_bytes *b, uint32_t v) { lp_bytes_append(b, &v, 4); }
static void g_u64(lp_bytes *b, uint64_t v) { lp_bytes_append(b, &v, 8); }

static void g_str(lp_bytes *b, const char *s, size_t len)
{
    g_u64(b, len);
    lp_bytes_append(b, s, len);
}

static void g_key(lp_bytes *b, const char *key, uint32_t type)
{
    g_str(b, key, strlen(key));
    g_u32(b, type);
}

/* The piece written for an id a reduced test vocabulary leaves out (tests/inspect/vocab/
 * reduce_vocab.py), as an unused token: a space never occurs in a byte-level piece, so no text
 * and no merge reaches it. */
static void hole_piece(char *buf, size_t size, size_t id)
{
    snprintf(buf, size, "<hole %zu>", id);
}

static void build_gguf_from_json(const char *folder, const char *model, const char *pre,
                                 bool add_bos, lp_bytes *out)
{
    char rel[1024];
    json_t *root;
    if (strncmp(folder, "tests/", 6) == 0) {
        /* a tokenizer.json kept in the source tree beside its suite */
        const char *src = getenv("LOUPE_SOURCE");
        snprintf(rel, sizeof rel, "%s/%s/tokenizer.json", src ? src : ".", folder);
        json_error_t jerr;
        root = json_load_file(rel, 0, &jerr);
        if (!root)
            fail_msg("%s:%d:%d: %s", rel, jerr.line, jerr.column, jerr.text);
    } else {
        snprintf(rel, sizeof rel, "tokenizers/%s/tokenizer.json", folder);
        root = load_json_shared(rel);
    }
    const json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    const json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    const json_t *added = json_object_get(root, "added_tokens");
    size_t n = 0;
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)vocab, key, value)
        if ((size_t)json_integer_value(value) + 1 > n)
            n = (size_t)json_integer_value(value) + 1;
    size_t i;
    const json_t *item;
    json_array_foreach(added, i, item)
        if ((size_t)json_integer_value(json_object_get(item, "id")) + 1 > n)
            n = (size_t)json_integer_value(json_object_get(item, "id")) + 1;
    const char **tokens = calloc(n, sizeof *tokens);
    int32_t *types = calloc(n, sizeof *types);
    assert_non_null(tokens);
    assert_non_null(types);
    json_object_foreach((json_t *)vocab, key, value)
    {
        size_t id = (size_t)json_integer_value(value);
        tokens[id] = key;
        types[id] = strlen(key) == 6 && strncmp(key, "<0x", 3) == 0 ? 6 : 1;
    }
    json_array_foreach(added, i, item)
    {
        size_t id = (size_t)json_integer_value(json_object_get(item, "id"));
        tokens[id] = json_string_value(json_object_get(item, "content"));
        types[id] = json_is_true(json_object_get(item, "special")) ? 3 : 4;
        if (strcmp(tokens[id], "<unk>") == 0)
            types[id] = 2;
    }
    bool llama = strcmp(model, "llama") == 0;
    lp_bytes_append(out, "GGUF", 4);
    g_u32(out, 3);
    g_u64(out, 0);                    /* tensors */
    g_u64(out, llama ? 5 : 6);        /* key/values */
    g_key(out, "tokenizer.ggml.model", 8);
    g_str(out, model, strlen(model));
    g_key(out, "tokenizer.ggml.tokens", 9);
    g_u32(out, 8);
    g_u64(out, n);
    for (size_t k = 0; k < n; k++) {
        char hole[32];
        if (!tokens[k]) {
            hole_piece(hole, sizeof hole, k);
            types[k] = 5;
        }
        g_str(out, tokens[k] ? tokens[k] : hole, strlen(tokens[k] ? tokens[k] : hole));
    }
    g_key(out, "tokenizer.ggml.token_type", 9);
    g_u32(out, 5);
    g_u64(out, n);
    lp_bytes_append(out, types, n * sizeof *types);
    g_key(out, "tokenizer.ggml.add_bos_token", 7);
    unsigned char flag = add_bos;
    lp_bytes_append(out, &flag, 1);
    g_key(out, "tokenizer.ggml.bos_token_id", 4);
    g_u32(out, 1);
    if (llama) {
        g_key(out, "tokenizer.ggml.scores", 9);
        g_u32(out, 6);
        g_u64(out, n);
        /* SentencePiece scores that give the merges' order: a piece scores minus the rank of
         * the first merge that makes it; pieces no merge makes never win */
        float *scores = malloc(n * sizeof *scores);
        assert_non_null(scores);
        for (size_t k = 0; k < n; k++)
            scores[k] = -1e10f;
        json_array_foreach(merges, i, item)
        {
            char buf[2048]; /* NeoX merges 128 spaces with 128: 514 bytes */
            snprintf(buf, sizeof buf, "%s", json_string_value(item));
            char *sp = strchr(buf, ' ');
            assert_non_null(sp);
            memmove(sp, sp + 1, strlen(sp));
            const json_t *id = json_object_get(vocab, buf);
            assert_non_null(id);
            if (scores[json_integer_value(id)] == -1e10f)
                scores[json_integer_value(id)] = -(float)i;
        }
        lp_bytes_append(out, scores, n * sizeof *scores);
        free(scores);
        /* the count above says 5 key/values besides the model: fix it up */
        uint64_t n_kv = 6;
        memcpy(out->data + 16, &n_kv, 8);
    } else {
        g_key(out, "tokenizer.ggml.pre", 8);
        g_str(out, pre, strlen(pre));
        g_key(out, "tokenizer.ggml.merges", 9);
        g_u32(out, 8);
        g_u64(out, json_array_size(merges));
        json_array_foreach(merges, i, item)
        {
            char buf[2048]; /* NeoX merges 128 spaces with 128: 514 bytes */
            if (json_is_string(item))
                snprintf(buf, sizeof buf, "%s", json_string_value(item));
            else
                snprintf(buf, sizeof buf, "%s %s", json_string_value(json_array_get(item, 0)),
                         json_string_value(json_array_get(item, 1)));
            g_str(out, buf, strlen(buf));
        }
        uint64_t n_kv = 7;
        memcpy(out->data + 16, &n_kv, 8);
    }
    free(tokens);
    free(types);
    json_decref(root);
}

static void run_gguf_reference(const char *folder, const char *model, const char *pre,
                               bool add_bos)
{
    lp_bytes buf = {0};
    build_gguf_from_json(folder, model, pre, add_bos, &buf);
    lp_gguf *g = NULL;
    lp_error err = {0};
    if (lp_gguf_open_memory(buf.data, buf.len, "built.gguf", &g, &err) != LP_OK)
        fail_msg("%s", err.msg);
    lp_tokenizer *tok = NULL;
    if (lp_tokenizer_from_gguf(g, &tok, &err) != LP_OK)
        fail_msg("%s", err.msg);
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizers/%s/reference.json", folder);
    json_t *ref = load_json_shared(rel);
    int failures = 0, compared = 0;
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(ref, "cases"), i, c)
    {
        const json_t *text = json_object_get(c, "text");
        /* llama.cpp applies no NFC for qwen2; the JSON does, so decomposed input differs */
        char *nfc;
        size_t nfc_len;
        assert_int_equal(lp_uc_normalize(LP_UC_NFC, json_string_value(text),
                                         json_string_length(text), &nfc, &nfc_len), LP_OK);
        bool nfc_invariant = nfc_len == json_string_length(text) &&
                             memcmp(nfc, json_string_value(text), nfc_len) == 0;
        free(nfc);
        if (!nfc_invariant && strcmp(folder, "qwen3") == 0)
            continue;
        compared++;
        const json_t *want = json_object_get(c, "with_special_tokens");
        size_t n;
        int32_t *ids = encode(tok, json_string_value(text), json_string_length(text), true, &n);
        const json_t *want_ids = json_object_get(want, "ids");
        bool same = n == json_array_size(want_ids);
        for (size_t k = 0; same && k < n; k++)
            same = ids[k] == json_integer_value(json_array_get(want_ids, k));
        if (!same) {
            printf("FAIL gguf %s %s: ids differ\n", folder,
                   json_string_value(json_object_get(c, "name")));
            failures++;
        } else {
            char *back = decode(tok, ids, n, true);
            if (strcmp(back, json_string_value(json_object_get(want, "decoded_skip_special")))) {
                printf("FAIL gguf %s %s: decoded '%s'\n", folder,
                       json_string_value(json_object_get(c, "name")), back);
                failures++;
            }
            free(back);
        }
        free(ids);
    }
    json_decref(ref);
    lp_tokenizer_close(tok);
    lp_gguf_close(g);
    lp_bytes_free(&buf);
    assert_true(compared >= 11);
    assert_int_equal(failures, 0);
}

static void test_gguf_built_gpt2(void **state)
{
    (void)state;
    run_gguf_reference("gpt2", "gpt2", "gpt2", false);
}

static void test_gguf_built_qwen3(void **state)
{
    (void)state;
    run_gguf_reference("qwen3", "gpt2", "qwen2", false);
}

static void test_gguf_built_llama(void **state)
{
    (void)state;
    run_gguf_reference("tinyllama", "llama", "", true);
}

/* ---- llama.cpp's vocabulary conformance suites ----
 * models/ggml-vocab-NAME.gguf.inp (cases joined by "\n__ggml_vocab_test__\n") and .out (one line
 * of ids per case, as llama.cpp's test-tokenizer-0 writes them: no BOS, special tokens parsed in
 * the text), copied into tests/inspect/vocab/. The .gguf vocabularies themselves are not kept;
 * each is built from the tokenizer.json in ../shared that has the same vocabulary. */

static char *read_source_file(const char *rel, size_t *len)
{
    const char *src = getenv("LOUPE_SOURCE");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n + 4096 > cap) {
            cap = (n + 4096) * 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
    } while (got > 0);
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

static void build_bert_gguf(const char *path, bool add_cls_sep, lp_gw *w);

/* Writes into *w the GGUF of a reduced GGUF vocabulary (reduce_vocab.py's form: n_tokens, the
 * scalar tokenizer.ggml.* keys, [id, piece, type] for the ids kept, the merges kept in order);
 * the ids left out become unused tokens. */
static void build_gguf_reduced(const char *folder, const char *pre, lp_gw *w)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/vocab.json",
             getenv("LOUPE_SOURCE") ? getenv("LOUPE_SOURCE") : ".", folder);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        fail_msg("%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    size_t n = (size_t)json_integer_value(json_object_get(root, "n_tokens"));
    assert_true(n > 0 && n < (1u << 24));
    const json_t *kv = json_object_get(root, "kv");
    assert_string_equal(json_string_value(json_object_get(kv, "tokenizer.ggml.pre")), pre);
    const char **tokens = calloc(n, sizeof *tokens);
    char *holes = malloc(n * 32);
    int32_t *types = malloc(n * sizeof *types);
    assert_true(tokens && holes && types);
    size_t i;
    const json_t *item;
    json_array_foreach(json_object_get(root, "tokens"), i, item)
    {
        size_t id = (size_t)json_integer_value(json_array_get(item, 0));
        assert_true(id < n);
        tokens[id] = json_string_value(json_array_get(item, 1));
        types[id] = (int32_t)json_integer_value(json_array_get(item, 2));
    }
    for (size_t k = 0; k < n; k++)
        if (!tokens[k]) {
            hole_piece(holes + k * 32, 32, k);
            tokens[k] = holes + k * 32;
            types[k] = 5;
        }
    const json_t *merges = json_object_get(root, "merges");
    size_t n_merges = json_array_size(merges);
    const char **merge_strs = malloc((n_merges + 1) * sizeof *merge_strs);
    assert_non_null(merge_strs);
    json_array_foreach(merges, i, item)
        merge_strs[i] = json_string_value(item);
    lp_gw_init(w, 3);
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)kv, key, value)
    {
        if (json_is_string(value))
            lp_gw_kv_str(w, key, json_string_value(value));
        else if (json_is_boolean(value))
            lp_gw_kv_bool(w, key, json_is_true(value));
        else
            lp_gw_kv_u32(w, key, (uint32_t)json_integer_value(value));
    }
    lp_gw_kv_arr_str(w, "tokenizer.ggml.tokens", tokens, n);
    lp_gw_kv_arr_i32(w, "tokenizer.ggml.token_type", types, n);
    lp_gw_kv_arr_str(w, "tokenizer.ggml.merges", merge_strs, n_merges);
    assert_true(lp_gw_finish(w));
    free(merge_strs);
    free(types);
    free(holes);
    free(tokens);
    json_decref(root);
}

/* A suite's vocabulary: folder's tokenizer.json written as a GGUF of model ("gpt2", "llama",
 * "bert" with pre) or read as it is ("json"), or folder's vocab.json as a GGUF ("gguf"). */
static lp_tokenizer *suite_tokenizer(const char *folder, const char *model, const char *pre)
{
    lp_bytes buf = {0};
    lp_gw w = {0};
    char json_path[1024];
    if (strncmp(folder, "tests/", 6) == 0) {
        snprintf(json_path, sizeof json_path, "%s/%s/tokenizer.json",
                 getenv("LOUPE_SOURCE") ? getenv("LOUPE_SOURCE") : ".", folder);
    } else {
        char rel[256];
        snprintf(rel, sizeof rel, "tokenizers/%s/tokenizer.json", folder);
        lp_test_shared_path(json_path, sizeof json_path, rel);
    }
    lp_tokenizer *tok = NULL;
    lp_error err = {0};
    if (strcmp(model, "json") == 0) {
        if (lp_tokenizer_open(json_path, &tok, &err) != LP_OK)
            fail_msg("%s: %s", json_path, err.msg);
        return tok;
    }
    if (strcmp(model, "bert") == 0)
        build_bert_gguf(json_path, false, &w); /* test-tokenizer-0 adds no [CLS]/[SEP] */
    else if (strcmp(model, "gguf") == 0)
        build_gguf_reduced(folder, pre, &w);
    else
        build_gguf_from_json(folder, model, pre, false, &buf);
    lp_gguf *g = NULL;
    const void *bytes = w.file.data ? (const void *)w.file.data : buf.data;
    if (lp_gguf_open_memory(bytes, w.file.data ? w.file.len : buf.len, "built.gguf", &g, &err) !=
            LP_OK ||
        lp_tokenizer_from_gguf(g, &tok, &err) != LP_OK)
        fail_msg("%s (%s): %s", folder, model, err.msg);
    lp_gguf_close(g);
    if (w.file.data)
        lp_gw_free(&w);
    lp_bytes_free(&buf);
    return tok;
}

/* Cases of suite name that tok encodes exactly as llama.cpp; *total the number of cases. Each
 * is encoded as test-tokenizer-0 does: no BOS/EOS added, special tokens parsed in the text. */
static int run_suite_cases(const lp_tokenizer *tok, const char *name, const char *what,
                           bool round_trip, int *total)
{
    char rel[256];
    size_t inp_len, out_len;
    snprintf(rel, sizeof rel, "tests/inspect/vocab/ggml-vocab-%s.gguf.inp", name);
    char *inp = read_source_file(rel, &inp_len);
    snprintf(rel, sizeof rel, "tests/inspect/vocab/ggml-vocab-%s.gguf.out", name);
    char *out = read_source_file(rel, &out_len);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int exact = 0;
    *total = 0;
    char *text = inp, *line = out;
    for (char *end; (end = strstr(text, sep)) != NULL; text = end + strlen(sep)) {
        char *eol = strchr(line, '\n');
        assert_non_null(eol);
        *eol = '\0';
        size_t n;
        int32_t *ids = encode(tok, text, (size_t)(end - text), false, &n);
        bool same = true;
        size_t k = 0;
        for (char *p = line, *q; same; p = q) {
            long v = strtol(p, &q, 10);
            if (q == p)
                break;
            same = k < n && ids[k++] == v;
        }
        same = same && k == n;
        if (same && round_trip) {
            /* byte-level pieces (and user-defined tokens, copied) give the text back */
            char *back = decode(tok, ids, n, false);
            if (strlen(back) != (size_t)(end - text) || memcmp(back, text, strlen(back)) != 0) {
                printf("vocab %s case %d decodes to \"%s\"\n", name, *total, back);
                same = false;
            }
            free(back);
        }
        if (same) {
            exact++;
        } else {
            printf("vocab %s case %d differs: \"%.*s\"\n  want%s\n  got ", name, *total,
                   (int)(end - text > 60 ? 60 : end - text), text, line);
            for (size_t j = 0; j < n; j++)
                printf(" %d", ids[j]);
            printf("\n");
        }
        free(ids);
        (*total)++;
        line = eol + 1;
    }
    printf("vocab %s (%s): %d of %d cases exact\n", name, what, exact, *total);
    free(inp);
    free(out);
    return exact;
}

/* With LOUPE_VOCAB_FULL set, a suite runs on the full vocabulary too (full: its path under that
 * folder: llama.cpp's ggml-vocab-NAME.gguf, or the file a reduced one was cut from), and both
 * must give llama.cpp's ids. */
static int run_full_vocab(const char *name, const char *full, int *total)
{
    const char *dir = getenv("LOUPE_VOCAB_FULL");
    if (!dir || !full)
        return *total = 0;
    char path[1024], what[1100];
    snprintf(path, sizeof path, "%s/%s", dir, full);
    lp_tokenizer *tok = NULL;
    lp_error err = {0};
    if (lp_tokenizer_open(path, &tok, &err) != LP_OK)
        fail_msg("LOUPE_VOCAB_FULL: %s", err.msg);
    snprintf(what, sizeof what, "full vocabulary %s", path);
    int exact = run_suite_cases(tok, name, what, false, total);
    lp_tokenizer_close(tok);
    return exact;
}

/* One suite: its vocabulary (see suite_tokenizer), llama.cpp's own file of it or the one a
 * reduced vocabulary was cut from (run too when LOUPE_VOCAB_FULL names a folder holding them),
 * the number of cases, and whether decoding must give each text back. */
typedef struct vocab_suite {
    const char *name, *folder, *model, *pre, *full;
    int cases;
    bool round_trip;
} vocab_suite;

/* Cases that are not exact, over every suite of the table. */
static int run_vocab_suites(const vocab_suite *suites, size_t n)
{
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        lp_tokenizer *tok = suite_tokenizer(suites[i].folder, suites[i].model, suites[i].pre);
        char what[256];
        snprintf(what, sizeof what, "%s, pre '%s', from %s", suites[i].model, suites[i].pre,
                 suites[i].folder);
        int total;
        int exact = run_suite_cases(tok, suites[i].name, what, suites[i].round_trip, &total);
        lp_tokenizer_close(tok);
        assert_int_equal(total, suites[i].cases);
        failed += total - exact;
        exact = run_full_vocab(suites[i].name, suites[i].full, &total);
        failed += total - exact;
    }
    return failed;
}

/* The suites whose vocabulary is a tokenizer.json in ../shared/tokenizers/FOLDER. */
static void test_llama_vocab_suites(void **state)
{
    (void)state;
    static const vocab_suite suites[] = {
        {"gpt-2", "gpt2", "gpt2", "gpt-2", "ggml-vocab-gpt-2.gguf", 46, true},
        {"qwen2", "qwen3", "gpt2", "qwen2", NULL, 46, true},
        /* DeepSeek-R1-Distill-Qwen ships Qwen2's BPE vocabulary (its added tokens differ, none
         * in the suite's strings); its list is the older one, with "Führer" */
        {"deepseek-r1-qwen", "qwen3", "gpt2", "deepseek-r1-qwen", NULL, 46, true},
        {"llama-spm", "tinyllama", "llama", "", "ggml-vocab-llama-spm.gguf", 46, false},
        {"tinyllama", "tinyllama", "llama", "", NULL, 11, false},
    };
    assert_int_equal(run_vocab_suites(suites, sizeof suites / sizeof suites[0]), 0);
}

/* The suites whose vocabulary is kept in tests/inspect/vocab/KIND: whole tokenizer.json files,
 * or, for the large ones, cut by reduce_vocab.py to what the suite's strings reach. */
static void test_vocab_suites(void **state)
{
    (void)state;
    static const vocab_suite suites[] = {
        /* Phi-3's vocabulary is Llama 2's plus added tokens 32000-32063; its 46 cases add
         * "!!!!!!", "Cửa Việt" and " discards" to the 43 */
        {"phi-3", "tests/inspect/vocab/phi-3", "llama", "", "ggml-vocab-phi-3.gguf", 46, false},
        /* BGE-small-en-v1.5's WordPiece vocabulary is bert-base-uncased's */
        {"bert-bge", "tests/inspect/vocab/bert-bge", "bert", "", "ggml-vocab-bert-bge.gguf", 46,
         false},
        /* and the tokenizer.json itself (no model "type": WordPiece, as Hugging Face reads it) */
        {"bert-bge", "tests/inspect/vocab/bert-bge", "json", "", NULL, 46, false},
        /* MPT-7B's vocabulary is GPT-NeoX-20B's (tokenizer.json from RWKV's 20B_tokenizer.json,
         * re-serialized without indentation); the 46 cases of bert-bge, with llama.cpp's newer
         * "Äpfel" in place of "Führer" */
        {"mpt", "tests/inspect/vocab/mpt", "gpt2", "mpt", "ggml-vocab-mpt.gguf", 46, true},
        /* and the same file read as tokenizer.json (its NFC normalizer and ByteLevel split) */
        {"mpt", "tests/inspect/vocab/mpt", "json", "", NULL, 46, true},
        /* llama.cpp's own ggml-vocab-KIND.gguf files, cut to the suite's strings */
        {"deepseek-llm", "tests/inspect/vocab/deepseek-llm", "gguf", "deepseek-llm",
         "ggml-vocab-deepseek-llm.gguf", 46, true},
        {"deepseek-coder", "tests/inspect/vocab/deepseek-coder", "gguf", "deepseek-coder",
         "ggml-vocab-deepseek-coder.gguf", 46, true},
        {"falcon", "tests/inspect/vocab/falcon", "gguf", "falcon", "ggml-vocab-falcon.gguf", 46,
         true},
        /* and Falcon's tokenizer.json, cut the same way: Punctuation, ByteLevel, Digits and a
         * three-digit Split, read as it is */
        {"falcon", "tests/inspect/vocab/falcon", "json", "", "falcon/tokenizer.json", 46, true},
        {"starcoder", "tests/inspect/vocab/starcoder", "gguf", "starcoder",
         "ggml-vocab-starcoder.gguf", 46, true},
        {"refact", "tests/inspect/vocab/refact", "gguf", "refact", "ggml-vocab-refact.gguf", 46,
         true},
        /* Meta-Llama-3-8B's tokenizer.json, cut to the suite's strings: as a GGUF with the
         * llama-bpe pre-tokenizer and read as it is */
        {"llama-bpe", "tests/inspect/vocab/llama-bpe", "gpt2", "llama-bpe", NULL, 46, true},
        {"llama-bpe", "tests/inspect/vocab/llama-bpe", "json", "", "llama-bpe/tokenizer.json", 46,
         true},
        /* DBRX's vocabulary is cl100k_base: byte-level BPE from the tiktoken ranks (the merges as
         * Hugging Face derives them), the older 43-case list */
        {"dbrx", "tests/inspect/vocab/dbrx", "gguf", "dbrx", NULL, 43, true},
        /* roberta-base's tokenizer.json (llama.cpp's is stsb-roberta-base, the same vocabulary:
         * ids shifted from GPT-2's by <s> <pad> </s> <unk>); the older "Führer" list */
        {"roberta-bpe", "tests/inspect/vocab/roberta-bpe", "gpt2", "roberta-bpe", NULL, 46, true},
        {"roberta-bpe", "tests/inspect/vocab/roberta-bpe", "json", "", "roberta-bpe/tokenizer.json",
         46, true},
        /* Phi-2's: GPT-2's vocabulary plus CodeGen's added runs of 2-31 spaces and 2-9 tabs, which
         * are matched in the text before BPE (user-defined tokens in the GGUF) */
        {"phi-2", "tests/inspect/vocab/phi-2", "gpt2", "phi-2", NULL, 46, true},
        {"phi-2", "tests/inspect/vocab/phi-2", "json", "", "phi-2/tokenizer.json", 46, true},
    };
    assert_int_equal(run_vocab_suites(suites, sizeof suites / sizeof suites[0]), 0);
    /* beyond the suite: NeoX's tokenizer.json composes first (NFC), so a decomposed "Äpfel"
     * (A + U+0308) is the suite's precomposed one, 37515 18569 293 */
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/inspect/vocab/mpt/tokenizer.json",
             getenv("LOUPE_SOURCE") ? getenv("LOUPE_SOURCE") : ".");
    lp_tokenizer *tok = NULL;
    lp_error err = {0};
    if (lp_tokenizer_open(path, &tok, &err) != LP_OK)
        fail_msg("%s", err.msg);
    size_t n;
    int32_t *ids = encode(tok, "A\xCC\x88pfel", 7, false, &n);
    assert_int_equal(n, 3);
    assert_true(ids[0] == 37515 && ids[1] == 18569 && ids[2] == 293);
    free(ids);
    lp_tokenizer_close(tok);
}

/* Pieces that pre-tokenizers get wrong: runs and kinds of whitespace, digit runs, scripts with
 * and without case, marks, emoji sequences, contractions, punctuation and symbol runs. */
static const char *const split_atoms[] = {
    " ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\xC2\xA0",
    "\xE2\x80\x89", "\xE3\x80\x80", "\xE2\x80\x8B", "Hello", "world", "HELLO", "W\xC3\xB6rld",
    "caf\xC3\xA9", "cafe\xCC\x81", "na\xC3\xAFve", "\xC3\x84pfel", "stra\xC3\x9F" "e",
    "\xC4\xB0stanbul", "\xC7\x85", "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",
    "\xCE\x93\xCE\xB5\xCE\xB9\xCE\xAC", "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D",
    "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7",
    "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87",
    "\xE0\xB8\xAA\xE0\xB8\xA7\xE0\xB8\xB1\xE0\xB8\xAA\xE0\xB8\x94\xE0\xB8\xB5",
    "\xE1\x9E\x81\xE1\x9F\x92\xE1\x9E\x98\xE1\x9F\x82\xE1\x9E\x9A",
    "\xE1\x8F\xA3\xE1\x8E\xB3\xE1\x8E\xA9", "\xE1\x83\x90", "\xD4\xB1", "\xE4\xB8\xAD\xE6\x96\x87",
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", "\xE3\x81\xB2\xE3\x82\x89\xE3\x81\x8C\xE3\x81\xAA",
    "\xE3\x82\xAB\xE3\x82\xBF\xE3\x82\xAB\xE3\x83\x8A", "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
    "\xE7\xBF\x92", "\xF0\xA0\x80\x80", "\xF0\x9F\x98\x80", "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
    "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
    "\xF0\x9F\x87\xBA\xF0\x9F\x87\xB8", "\xE2\x9D\xA4\xEF\xB8\x8F", "0", "1", "12", "123", "1234",
    "12345", "123456789", "3.14", "1,000", "\xD9\xA3\xD9\xA4\xD9\xA5",
    "\xE0\xA5\xA7\xE0\xA5\xA8\xE0\xA5\xA9", "\xC2\xBD", "\xC2\xB2", "\xE2\x85\xAB", "'s", "'S",
    "'ll", "'LL", "'re", "'ve", "'m", "'d", "'t", "n't", "'", "\"", "''", "!", "!!!!!!", "?",
    "...", "\xE2\x80\xA6", "\xE2\x80\x94", "-", "_", "__", "(", ")", "[", "{", "<", ">>", "$",
    "\xE2\x82\xAC", "+", "==", "=>", "->", "|", "&&", "^", "~", "`", "```", "@", "#", "%", "*",
    "//", "\\", ":", ";", ",", ".", "def", "x=1", "a_b", "CamelCase", "http://x.y/z?a=1",
    "e-mail@host.com", "\xCC\x81", "\xCC\x88", "\xEF\xB8\x8F", "\xE2\x80\x8D", "\x07", "\x7F",
    "\xC2\xAD", "\xEF\xAC\x81", "\xEF\xBC\xA1", "\xEF\xBD\xB6",
};

/* The k-th string of a fixed pseudo-random sequence: 1 to 8 atoms (a 64-bit LCG, so every run
 * checks the same strings). */
static size_t split_string(uint64_t *lcg, char *buf, size_t cap)
{
    size_t len = 0, n_atoms = sizeof split_atoms / sizeof split_atoms[0];
    *lcg = *lcg * 6364136223846793005u + 1442695040888963407u;
    for (int k = 0, n = 1 + (int)((*lcg >> 33) % 8); k < n; k++) {
        *lcg = *lcg * 6364136223846793005u + 1442695040888963407u;
        const char *atom = split_atoms[(*lcg >> 33) % n_atoms];
        size_t a = strlen(atom);
        assert_true(len + a < cap);
        memcpy(buf + len, atom, a);
        len += a;
    }
    buf[len] = '\0';
    return len;
}

/* A GGUF's tokenizer.ggml.pre (pre "": a "llama" SentencePiece GGUF) splits as the tokenizer.json
 * of the same vocabulary does, on the first 3,000 generated strings less those NFC changes
 * (llama.cpp does not normalize, NeoX's tokenizer.json does). The reduced vocabularies miss most
 * of these strings' merges, so the ids are mostly byte pieces: a split in another place shows. */
static void check_splits_as_json(const char *folder, const char *pre)
{
    lp_tokenizer *g = suite_tokenizer(folder, *pre ? "gpt2" : "llama", pre);
    lp_tokenizer *j = suite_tokenizer(folder, "json", "");
    uint64_t lcg = 16;
    int compared = 0, differ = 0;
    for (int k = 0; k < 3000; k++) {
        char text[512];
        size_t len = split_string(&lcg, text, sizeof text), nfc_len, n_g, n_j;
        char *nfc;
        assert_int_equal(lp_uc_normalize(LP_UC_NFC, text, len, &nfc, &nfc_len), LP_OK);
        bool invariant = nfc_len == len && memcmp(nfc, text, len) == 0;
        free(nfc);
        if (!invariant)
            continue;
        int32_t *a = encode(g, text, len, false, &n_g), *b = encode(j, text, len, false, &n_j);
        compared++;
        if ((n_g != n_j || memcmp(a, b, n_g * sizeof *a) != 0) && differ++ < 5)
            printf("pre %s splits \"%s\" unlike its tokenizer.json\n", pre, text);
        free(a);
        free(b);
    }
    printf("pre %s: %d of %d strings split unlike tokenizer.json\n", *pre ? pre : "(llama)",
           differ, compared);
    assert_true(compared > 2000);
    assert_int_equal(differ, 0);
    lp_tokenizer_close(g);
    lp_tokenizer_close(j);
}

static void test_gguf_splits_as_json(void **state)
{
    (void)state;
    check_splits_as_json("tests/inspect/vocab/llama-bpe", "llama-bpe");
    check_splits_as_json("tests/inspect/vocab/falcon", "falcon");
    check_splits_as_json("tests/inspect/vocab/phi-2", "phi-2");
    check_splits_as_json("tests/inspect/vocab/roberta-bpe", "roberta-bpe");
    check_splits_as_json("tests/inspect/vocab/mpt", "mpt");
}

/* The same over the whole vocabularies of ../shared (Qwen3's with the qwen2 pre-tokenizer;
 * TinyLlama's as a SentencePiece GGUF scored by merge rank). */
static void test_gguf_splits_as_shared_json(void **state)
{
    (void)state;
    check_splits_as_json("gpt2", "gpt-2");
    check_splits_as_json("qwen3", "qwen2");
    check_splits_as_json("tinyllama", "");
}

/* A tokenizer.ggml.pre name over GPT-2's vocabulary; NULL with *st when refused. */
static lp_tokenizer *gpt2_with_pre(const char *pre, lp_status *st, lp_error *err)
{
    lp_bytes buf = {0};
    build_gguf_from_json("gpt2", "gpt2", pre, false, &buf);
    lp_gguf *g = NULL;
    assert_int_equal(lp_gguf_open_memory(buf.data, buf.len, "built.gguf", &g, err), LP_OK);
    lp_tokenizer *tok = NULL;
    *st = lp_tokenizer_from_gguf(g, &tok, err);
    lp_gguf_close(g);
    lp_bytes_free(&buf);
    return tok;
}

/* Every tokenizer.ggml.pre family compiles and splits as its regexes say (one name of each of
 * llama.cpp's pre-tokenizer types). */
static void test_gguf_pre_families(void **state)
{
    (void)state;
    static const char *const names[] = {
        "default", "llama-bpe", "dbrx", "chatglm-bpe", "jais-2", "deepseek-llm", "deepseek-v3",
        "spark2_5", "youtu", "deepseek-coder", "falcon", "starcoder", "smollm", "gpt-2", "mpt",
        "qwen2", "qwen35", "bloom", "viking", "tekken", "chameleon", "gpt-4o",
        "granite-embed-multi-97m", "tiny_aya", "bailingmoe", "seed-coder", "ufakzeka", "grok-2",
        "laguna", "exaone-moe", "minicpm5", "command-r", "refact", "poro-chat", "gpt3-finnish",
        "exaone", "minerva-7b", "codeshell", "olmo", "jais", "smaug-bpe", "stablelm2"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        lp_error err = {0};
        lp_status st;
        lp_tokenizer *tok = gpt2_with_pre(names[k], &st, &err);
        if (st != LP_OK)
            fail_msg("pre '%s': %s", names[k], err.msg);
        static const char text[] = "Hi 12345 you\n\n  x\xE4\xB8\xAD\xE6\x96\x87!";
        size_t n;
        int32_t *ids = encode(tok, text, strlen(text), false, &n);
        char *back = decode(tok, ids, n, false);
        assert_string_equal(back, text);
        const char *second = lp_tokenizer_piece(tok, ids[1]);
        /* GPT-2's regex keeps " 12345" together ("\u0120" "123" "45" after BPE); the
         * families that split digits apart from their space leave "\u0120" alone */
        bool lone_space = strcmp(second, "\xC4\xA0") == 0;
        static const char lone[] = " default deepseek-llm deepseek-coder falcon starcoder smollm "
                                   "viking qwen2 deepseek-v3 minicpm5 tiny_aya chameleon "
                                   "command-r refact ";
        static const char joined[] = " gpt-2 mpt bloom ";
        char key[64];
        snprintf(key, sizeof key, " %s ", names[k]);
        if ((strstr(lone, key) && !lone_space) || (strstr(joined, key) && lone_space))
            fail_msg("pre '%s': second piece '%s'", names[k], second);
        /* one digit each (command-r and refact split as starcoder does) */
        if (strcmp(names[k], "deepseek-coder") == 0 || strcmp(names[k], "starcoder") == 0 ||
            strcmp(names[k], "command-r") == 0 || strcmp(names[k], "refact") == 0)
            assert_string_equal(lp_tokenizer_piece(tok, ids[2]), "1");
        if (strcmp(names[k], "default") == 0 || strcmp(names[k], "deepseek-llm") == 0)
            assert_string_equal(lp_tokenizer_piece(tok, ids[2]), "123");
        free(back);
        free(ids);
        lp_tokenizer_close(tok);
    }
    /* what llama.cpp splits with code of its own is refused, naming it */
    static const char *const refused[] = {"kimi-k2", "superbpe", "gemma4", "afmoe"};
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        lp_error err = {0};
        lp_status st;
        assert_null(gpt2_with_pre(refused[k], &st, &err));
        assert_int_equal(st, LP_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.msg, refused[k]));
        assert_non_null(strstr(err.msg, "code of its own"));
    }
    /* an unknown name is refused, not guessed */
    lp_bytes buf = {0};
    build_gguf_from_json("gpt2", "gpt2", "no-such-pre", false, &buf);
    lp_gguf *g = NULL;
    lp_error err = {0};
    assert_int_equal(lp_gguf_open_memory(buf.data, buf.len, "built.gguf", &g, &err), LP_OK);
    lp_tokenizer *tok = NULL;
    assert_int_equal(lp_tokenizer_from_gguf(g, &tok, &err), LP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "no-such-pre"));
    lp_gguf_close(g);
    lp_bytes_free(&buf);
}

/* ---- rules on strings of our own ---- */

static void expect_pieces(const lp_tokenizer *tok, const char *text, bool special,
                          const char *const *want, size_t n_want)
{
    size_t n;
    int32_t *ids = encode(tok, text, strlen(text), special, &n);
    if (n != n_want) {
        printf("'%s': %zu tokens, want %zu:", text, n, n_want);
        for (size_t k = 0; k < n; k++)
            printf(" [%s]", lp_tokenizer_piece(tok, ids[k]));
        printf("\n");
    }
    assert_int_equal(n, n_want);
    for (size_t k = 0; k < n; k++)
        assert_string_equal(lp_tokenizer_piece(tok, ids[k]), want[k]);
    free(ids);
}

#define PIECES(...) (const char *const[]){__VA_ARGS__}, sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)

static void test_gpt2_rules(void **state)
{
    (void)state;
    lp_tokenizer *tok = open_shared("tokenizers/gpt2/tokenizer.json");
    assert_string_equal(lp_tokenizer_kind(tok), "bpe-bytelevel");
    assert_int_equal(lp_tokenizer_vocab_size(tok), 50257);
    /* \s+(?!\S) leaves one space to the word; GPT-2 has no "ĠĠ" */
    expect_pieces(tok, "a    b", false, PIECES("a", "Ġ", "Ġ", "Ġ", "Ġb"));
    /* \r\n is one whitespace pre-token, but GPT-2 has no merge for it: "č" "Ċ" */
    expect_pieces(tok, "x\r\ny", false, PIECES("x", "\xC4\x8D", "\xC4\x8A", "y"));
    /* digits in runs, with the space */
    expect_pieces(tok, " 12345", false, PIECES("Ġ123", "45"));
    /* the special token written in the text is one token, both ways */
    expect_pieces(tok, "a<|endoftext|>b", false, PIECES("a", "<|endoftext|>", "b"));
    /* a string equal to a vocabulary entry after byte mapping is that entry */
    expect_pieces(tok, " the", false, PIECES("Ġthe"));
    lp_tokenizer_close(tok);
}

/* Byte-level BPE is lossless on any bytes, including invalid UTF-8. */
static void test_gpt2_round_trip(void **state)
{
    (void)state;
    lp_tokenizer *tok = open_shared("tokenizers/gpt2/tokenizer.json");
    uint32_t seed = 12345;
    char text[300];
    for (int round = 0; round < 200; round++) {
        size_t len = (size_t)(round % 37) * 7 + 1;
        for (size_t k = 0; k < len; k++) {
            seed = seed * 1664525u + 1013904223u;
            unsigned r = seed >> 24;
            /* mostly text, some raw bytes (NUL excluded: decode returns a C string) */
            static const char alphabet[] = " abcXYZ0129.,'\n\t\r";
            text[k] = r < 160 ? alphabet[r % (sizeof alphabet - 1)] : (char)(r % 255 + 1);
        }
        text[len] = '\0';
        size_t n;
        int32_t *ids = encode(tok, text, len, false, &n);
        for (size_t k = 0; k < n; k++)
            assert_true(ids[k] >= 0 && ids[k] < lp_tokenizer_vocab_size(tok));
        char *back = decode(tok, ids, n, false);
        assert_int_equal(strlen(back), len);
        assert_memory_equal(back, text, len);
        free(back);
        free(ids);
    }
    lp_tokenizer_close(tok);
}

static void test_qwen3_rules(void **state)
{
    (void)state;
    lp_tokenizer *tok = open_shared("tokenizers/qwen3/tokenizer.json");
    assert_int_equal(lp_tokenizer_vocab_size(tok), 151669);
    /* Qwen3 has "ĠĠ": a run of three spaces before a word is ĠĠ + Ġword */
    expect_pieces(tok, "   three", false, PIECES("ĠĠ", "Ġthree"));
    /* every digit alone */
    expect_pieces(tok, "x 123", false, PIECES("x", "Ġ", "1", "2", "3"));
    /* added tokens, special or not, are matched in text; only special ones are skipped */
    size_t n;
    const char *text = "<|im_start|>hi<think>ok</think><|im_end|>";
    int32_t *ids = encode(tok, text, strlen(text), true, &n);
    assert_true(n >= 6);
    assert_int_equal(ids[0], 151644);
    assert_int_equal(ids[n - 1], 151645);
    char *skip = decode(tok, ids, n, true);
    assert_string_equal(skip, "hi<think>ok</think>");
    char *keep = decode(tok, ids, n, false);
    assert_string_equal(keep, text);
    free(skip);
    free(keep);
    free(ids);
    /* \r\n is one pre-token (\s*[\r\n]+) and Qwen3 has the merge: "čĊ" */
    expect_pieces(tok, "x\r\ny", false, PIECES("x", "\xC4\x8D\xC4\x8A", "y"));
    /* mixed scripts: letters of any script are one \p{L}+ run; the digits split one by one */
    size_t n_mixed;
    const char *mixed = "abc\xE4\xB8\xAD\xE6\x96\x87" "123";
    int32_t *mixed_ids = encode(tok, mixed, strlen(mixed), false, &n_mixed);
    assert_true(n_mixed >= 4);
    assert_string_equal(lp_tokenizer_piece(tok, mixed_ids[n_mixed - 3]), "1");
    assert_string_equal(lp_tokenizer_piece(tok, mixed_ids[n_mixed - 2]), "2");
    assert_string_equal(lp_tokenizer_piece(tok, mixed_ids[n_mixed - 1]), "3");
    char *mixed_back = decode(tok, mixed_ids, n_mixed, false);
    assert_string_equal(mixed_back, mixed);
    free(mixed_back);
    free(mixed_ids);
    /* NFC: "e" + U+0301 and the precomposed "é" encode the same */
    size_t n1, n2;
    int32_t *a = encode(tok, "cafe\xCC\x81", 6, false, &n1);
    int32_t *b = encode(tok, "caf\xC3\xA9", 5, false, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1 * sizeof *a);
    free(a);
    free(b);
    lp_tokenizer_close(tok);
}

static void test_tinyllama_rules(void **state)
{
    (void)state;
    lp_tokenizer *tok = open_shared("tokenizers/tinyllama/tokenizer.json");
    assert_string_equal(lp_tokenizer_kind(tok), "bpe-sentencepiece");
    /* <s> only with special tokens */
    size_t n;
    int32_t *ids = encode(tok, "Hello", 5, true, &n);
    assert_true(n >= 2);
    assert_int_equal(ids[0], 1);
    free(ids);
    ids = encode(tok, "Hello", 5, false, &n);
    assert_true(n >= 1 && ids[0] != 1);
    free(ids);
    /* byte fallback: a character outside the vocab becomes its UTF-8 bytes */
    expect_pieces(tok, "\xF0\x9F\x99\x82", false,
                  PIECES("\xE2\x96\x81", "<0xF0>", "<0x9F>", "<0x99>", "<0x82>"));
    /* "\r" is an ordinary piece, "\n" is not: it falls back to <0x0A>; digits stand alone */
    expect_pieces(tok, "a\r\nb 12", false,
                  PIECES("\xE2\x96\x81" "a", "\r", "<0x0A>", "b", "\xE2\x96\x81", "1", "2"));
    /* the empty string gives nothing (Prepend skips empty text), plus <s> when asked */
    ids = encode(tok, "", 0, true, &n);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 1);
    free(ids);
    lp_tokenizer_close(tok);
}

static void test_labels(void **state)
{
    (void)state;
    lp_tokenizer *gpt2 = open_shared("tokenizers/gpt2/tokenizer.json");
    lp_tokenizer *llama = open_shared("tokenizers/tinyllama/tokenizer.json");
    lp_tokenizer *bin = open_shared("models/stories260K/tok512.bin");
    char *s;
    s = lp_tokenizer_label(gpt2, 262); /* "Ġthe" */
    assert_string_equal(lp_tokenizer_piece(gpt2, 262), "Ġthe");
    assert_string_equal(s, " the");
    free(s);
    s = lp_tokenizer_label(gpt2, 198); /* "Ċ" */
    assert_string_equal(s, "\\n");
    free(s);
    s = lp_tokenizer_label(gpt2, 50256);
    assert_string_equal(s, "<|endoftext|>");
    free(s);
    s = lp_tokenizer_label(llama, 278); /* "▁the" */
    assert_string_equal(lp_tokenizer_piece(llama, 278), "\xE2\x96\x81the");
    assert_string_equal(s, " the");
    free(s);
    s = lp_tokenizer_label(llama, 13); /* "<0x0A>" */
    assert_string_equal(s, "\\n");
    free(s);
    s = lp_tokenizer_label(llama, 243); /* "<0xF0>": not UTF-8 on its own */
    assert_string_equal(s, "\\xF0");
    free(s);
    s = lp_tokenizer_label(bin, 1); /* stored as "\n<s>\n" */
    assert_string_equal(s, "<s>");
    free(s);
    s = lp_tokenizer_label(bin, 403);
    assert_string_equal(s, " Once");
    free(s);
    assert_null(lp_tokenizer_label(gpt2, 50257));
    assert_null(lp_tokenizer_piece(gpt2, -1));
    lp_tokenizer_close(gpt2);
    lp_tokenizer_close(llama);
    lp_tokenizer_close(bin);
}

/* ---- bad input ---- */

static const char *write_tmp(const char *name, const char *content)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", lp_test_tmp_dir(), name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(content, 1, strlen(content), f);
    fclose(f);
    return path;
}

static void test_bad_input(void **state)
{
    (void)state;
    lp_tokenizer *tok = NULL;
    lp_error err = {0};
    const char *p = write_tmp("tok_bad.json", "{\n  \"model\": {\"vocab\": {\"a\": 0,}\n}\n");
    assert_int_equal(lp_tokenizer_open(p, &tok, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "tok_bad.json:2:"));
    assert_null(tok);

    p = write_tmp("tok_unigram.json",
                  "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}");
    assert_int_equal(lp_tokenizer_open(p, &tok, &err), LP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "Unigram"));

    p = write_tmp("tok_merge.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, "
                                    "\"b\": 1}, \"merges\": [\"a b\"]}}");
    assert_int_equal(lp_tokenizer_open(p, &tok, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "merges[0]"));

    p = write_tmp("tok_bigid.json",
                  "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 2000000000}, \"merges\": []}}");
    assert_int_equal(lp_tokenizer_open(p, &tok, &err), LP_ERR_FORMAT);

    /* a file that is no tokenizer, alone in its folder: nothing to fall back on */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tok_garbage_dir", lp_test_tmp_dir());
    mkdir(dir, 0755);
    p = write_tmp("tok_garbage_dir/model.dat", "this is neither JSON nor a tokenizer");
    assert_int_equal(lp_tokenizer_open(p, &tok, &err), LP_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "--tokenizer"));
    assert_int_equal(lp_tokenizer_open(dir, &tok, &err), LP_ERR_NOT_FOUND);
    assert_int_equal(lp_tokenizer_open("/nonexistent/tokenizer.json", &tok, &err), LP_ERR_IO);

    /* a tiny valid file: merges in both serializations, unk, decode range check */
    p = write_tmp("tok_tiny.json",
                  "{\"model\": {\"type\": \"BPE\", \"unk_token\": \"?\", \"fuse_unk\": true,"
                  " \"vocab\": {\"?\": 0, \"a\": 1, \"b\": 2, \"ab\": 3, \"abb\": 4},"
                  " \"merges\": [\"a b\", [\"ab\", \"b\"]]}}");
    assert_int_equal(lp_tokenizer_open(p, &tok, &err), LP_OK);
    size_t n;
    int32_t *ids = encode(tok, "abbxyab", 7, true, &n);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 4);
    assert_int_equal(ids[1], 0); /* "xy" fused into one unk */
    assert_int_equal(ids[2], 3);
    free(ids);
    int32_t bad = 5;
    char *text = NULL;
    assert_int_equal(lp_tokenizer_decode(tok, &bad, 1, false, &text, &err), LP_ERR_RANGE);
    lp_tokenizer_close(tok);
}

/* ---- the rules, on tiny tokenizer.json files whose answers follow by hand ---- */

static lp_tokenizer *open_json(const char *name, const char *json)
{
    const char *path = write_tmp(name, json);
    lp_tokenizer *tok = NULL;
    lp_error err = {0};
    if (lp_tokenizer_open(path, &tok, &err) != LP_OK)
        fail_msg("%s: %s", name, err.msg);
    return tok;
}

static void expect_ids(const lp_tokenizer *tok, const char *text, bool special,
                       const int32_t *want, size_t n_want)
{
    size_t n;
    int32_t *ids = encode(tok, text, strlen(text), special, &n);
    if (n != n_want || memcmp(ids, want, n * sizeof *ids) != 0) {
        printf("'%s': got", text);
        for (size_t k = 0; k < n; k++)
            printf(" %d", ids[k]);
        printf(", want");
        for (size_t k = 0; k < n_want; k++)
            printf(" %d", want[k]);
        printf("\n");
        fail();
    }
    free(ids);
}

#define IDS(...) (const int32_t[]){__VA_ARGS__}, sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t)

/* vocab a b c - a- -b -- b- -c; merges ranked a-, -b, --, b-, -c */
#define DASH_MODEL                                                                            \
    "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"-\": 3, "     \
    "\"a-\": 4, \"-b\": 5, \"--\": 6, \"b-\": 7, \"-c\": 8}, "                                \
    "\"merges\": [\"a -\", \"- b\", \"- -\", \"b -\", \"- c\"]}"

static lp_tokenizer *dash_tokenizer(const char *behavior, bool invert)
{
    char json[1024];
    snprintf(json, sizeof json,
             "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"-\"}, "
             "\"behavior\": \"%s\", \"invert\": %s}, " DASH_MODEL "}",
             behavior, invert ? "true" : "false");
    return open_json("tok_dash.json", json);
}

static void test_split_behaviors(void **state)
{
    (void)state;
    /* "a-b--c": spans a | - | b | - | - | c (matches are the dashes) */
    struct {
        const char *behavior;
        bool invert;
        int32_t want[8];
        size_t n;
    } cases[] = {
        {"Removed", false, {0, 1, 2}, 3},                 /* a b c */
        {"Isolated", false, {0, 3, 1, 3, 3, 2}, 6},       /* a - b - - c */
        {"MergedWithPrevious", false, {4, 7, 3, 2}, 4},   /* a- b- - c */
        {"MergedWithNext", false, {0, 5, 3, 8}, 4},       /* a -b - -c */
        {"Contiguous", false, {0, 3, 1, 6, 2}, 5},        /* a - b -- c */
        {"Removed", true, {3, 3, 3}, 3},                  /* inverted: only the dashes stay */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        lp_tokenizer *tok = dash_tokenizer(cases[k].behavior, cases[k].invert);
        expect_ids(tok, "a-b--c", false, cases[k].want, cases[k].n);
        lp_tokenizer_close(tok);
    }
    /* no pre-tokenizer: one word; ranks decide: a- first, then --, and b- / -c are stale */
    lp_tokenizer *tok = open_json("tok_dash_word.json", "{" DASH_MODEL "}");
    expect_ids(tok, "a-b--c", false, IDS(4, 1, 6, 2));
    /* no decoder: Hugging Face joins the pieces with spaces */
    int32_t ids[] = {4, 1, 6, 2};
    char *text = decode(tok, ids, 4, false);
    assert_string_equal(text, "a- b -- c");
    free(text);
    lp_tokenizer_close(tok);
}

static void test_metaspace_and_added(void **state)
{
    (void)state;
    static const char fmt[] =
        "{\"added_tokens\": [{\"id\": 2, \"content\": \"<x>\", \"special\": true, "
        "\"normalized\": false}, {\"id\": 6, \"content\": \"<l>\", \"special\": false, "
        "\"lstrip\": true, \"rstrip\": true, \"normalized\": false}, {\"id\": 7, \"content\": "
        "\"ab\", \"single_word\": true, \"normalized\": false}],"
        " \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
        "\"prepend_scheme\": \"%s\", \"split\": true},"
        " \"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
        "\"prepend_scheme\": \"%s\"},"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"\\u2581a\": 0, \"\\u2581b\": 1, "
        "\"<x>\": 2, \"a\": 3, \"b\": 4, \"\\u2581\": 5}, "
        "\"merges\": [\"\\u2581 a\", \"\\u2581 b\"]}}";
    char json[2048];
    snprintf(json, sizeof json, fmt, "first", "first");
    lp_tokenizer *tok = open_json("tok_meta_first.json", json);
    /* "first": only the text's first segment gets the prefix, not the one after <x> */
    expect_ids(tok, "a b<x>b", false, IDS(0, 1, 2, 4));
    int32_t ids[] = {0, 1, 2, 4};
    char *text = decode(tok, ids, 4, false);
    assert_string_equal(text, "a b<x>b");
    free(text);
    text = decode(tok, ids, 4, true); /* <x> is special */
    assert_string_equal(text, "a bb");
    free(text);
    /* <l> strips the spaces around it: "a" <l> "b" */
    expect_ids(tok, "a  <l>  b", false, IDS(0, 6, 4));
    /* "ab" is single_word: inside "aab" it is not matched; standing alone it is */
    expect_ids(tok, "aab", false, IDS(0, 3, 4));
    expect_ids(tok, "ab", false, IDS(7));
    /* next to punctuation that is not a word character it is matched: "«" is not in the
     * vocabulary and, with no unk, dropped; the prefix "▁" stays */
    expect_ids(tok, "\xC2\xAB" "ab" "\xC2\xBB", false, IDS(5, 7));
    /* next to a non-ASCII letter it is not; the dropped "é" leaves "▁" next to "a",
     * so they merge */
    expect_ids(tok, "\xC3\xA9" "ab", false, IDS(0, 4));
    /* lstrip takes Unicode whitespace too (U+3000) */
    expect_ids(tok, "a\xE3\x80\x80<l>b", false, IDS(0, 6, 4));
    lp_tokenizer_close(tok);
    snprintf(json, sizeof json, fmt, "always", "always");
    tok = open_json("tok_meta_always.json", json);
    expect_ids(tok, "a b<x>b", false, IDS(0, 1, 2, 1));
    lp_tokenizer_close(tok);
    snprintf(json, sizeof json, fmt, "never", "never");
    tok = open_json("tok_meta_never.json", json);
    expect_ids(tok, "a b", false, IDS(3, 1));
    lp_tokenizer_close(tok);
}

static void test_model_options(void **state)
{
    (void)state;
    /* continuing_subword_prefix: "b" after the first character is looked up as "##b" and the
     * merge "a ##b" makes "ab" */
    lp_tokenizer *tok = open_json("tok_prefix.json",
        "{\"model\": {\"type\": \"BPE\", \"continuing_subword_prefix\": \"##\", \"vocab\": "
        "{\"a\": 0, \"##b\": 1, \"ab\": 2, \"b\": 3}, \"merges\": [\"a ##b\"]}}");
    expect_ids(tok, "ab", false, IDS(2));
    expect_ids(tok, "b", false, IDS(3));
    lp_tokenizer_close(tok);
    /* end_of_word_suffix: the last character carries "</w>" */
    tok = open_json("tok_suffix.json",
        "{\"decoder\": {\"type\": \"BPEDecoder\", \"suffix\": \"</w>\"}, \"pre_tokenizer\": "
        "{\"type\": \"WhitespaceSplit\"}, \"model\": {\"type\": \"BPE\", \"end_of_word_suffix\": "
        "\"</w>\", \"vocab\": {\"a\": 0, \"b</w>\": 1, \"ab</w>\": 2, \"a</w>\": 3}, \"merges\": "
        "[\"a b</w>\"]}}");
    expect_ids(tok, "ab a", false, IDS(2, 3));
    int32_t ids[] = {2, 3};
    char *text = decode(tok, ids, 2, false);
    assert_string_equal(text, "ab a");
    free(text);
    lp_tokenizer_close(tok);
    /* byte fallback, then unk when it is off */
    static const char fallback[] =
        "{\"model\": {\"type\": \"BPE\", \"byte_fallback\": %s, \"unk_token\": \"<unk>\", "
        "\"vocab\": {\"<0xC3>\": 0, \"<0xA9>\": 1, \"a\": 2, \"<unk>\": 3}, \"merges\": []},"
        " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, "
        "{\"type\": \"Fuse\"}]}}";
    char json[1024];
    snprintf(json, sizeof json, fallback, "true");
    tok = open_json("tok_fallback.json", json);
    expect_ids(tok, "a\xC3\xA9", false, IDS(2, 0, 1));
    int32_t bytes[] = {2, 0, 1};
    text = decode(tok, bytes, 3, false);
    assert_string_equal(text, "a\xC3\xA9");
    free(text);
    lp_tokenizer_close(tok);
    snprintf(json, sizeof json, fallback, "false");
    tok = open_json("tok_nofallback.json", json);
    expect_ids(tok, "a\xC3\xA9", false, IDS(2, 3));
    lp_tokenizer_close(tok);
    /* an added token that takes over a model id with other content: BPE still reaches the
     * id through the model string, and the id reads as the added content (Hugging Face) */
    tok = open_json("tok_override.json",
        "{\"added_tokens\": [{\"id\": 2, \"content\": \"<x>\", \"special\": true}],"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2},"
        " \"merges\": [\"a b\"]}}");
    expect_ids(tok, "ab<x>", false, IDS(2, 2));
    assert_string_equal(lp_tokenizer_piece(tok, 2), "<x>");
    lp_tokenizer_close(tok);
    /* ignore_merges: a word that is a vocabulary entry is taken whole */
    static const char ignore[] =
        "{\"model\": {\"type\": \"BPE\", \"ignore_merges\": %s, \"vocab\": {\"a\": 0, \"b\": 1, "
        "\"bb\": 2, \"abb\": 3}, \"merges\": [\"b b\"]}}";
    snprintf(json, sizeof json, ignore, "false");
    tok = open_json("tok_merges.json", json);
    expect_ids(tok, "abb", false, IDS(0, 2));
    lp_tokenizer_close(tok);
    snprintf(json, sizeof json, ignore, "true");
    tok = open_json("tok_ignore.json", json);
    expect_ids(tok, "abb", false, IDS(3));
    lp_tokenizer_close(tok);
}

static void test_normalizers_and_post(void **state)
{
    (void)state;
    /* NFKC folds the ligature, Lowercase, Strip trims, Replace (regex) squeezes digits */
    lp_tokenizer *tok = open_json("tok_norm.json",
        "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}, "
        "{\"type\": \"Lowercase\"}, {\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": "
        "true}, {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"[0-9]+\"}, \"content\": "
        "\"#\"}]}, \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
        "[{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
        "\"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}], "
        "\"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [0], \"tokens\": [\"<s>\"]}, "
        "\"</s>\": {\"id\": \"</s>\", \"ids\": [1], \"tokens\": [\"</s>\"]}}},"
        " \"added_tokens\": [{\"id\": 0, \"content\": \"<s>\", \"special\": true}, "
        "{\"id\": 1, \"content\": \"</s>\", \"special\": true}],"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"<s>\": 0, \"</s>\": 1, \"f\": 2, \"i\": 3, "
        "\"fi\": 4, \"#\": 5, \"x\": 6}, \"merges\": [\"f i\"]}}");
    /* "  \xEF\xAC\x81X123 " -> "fix#": fi x # between <s> and </s> */
    expect_ids(tok, "  \xEF\xAC\x81X123 ", true, IDS(0, 4, 6, 5, 1));
    expect_ids(tok, "  \xEF\xAC\x81X123 ", false, IDS(4, 6, 5));
    lp_tokenizer_close(tok);
    /* a `normalized` added token is matched by its normalized form in the normalized text */
    static const char added[] =
        "{\"normalizer\": {\"type\": \"Lowercase\"}, \"added_tokens\": [{\"id\": 4, "
        "\"content\": \"Yes\", \"normalized\": %s}], \"model\": {\"type\": \"BPE\", "
        "\"vocab\": {\"y\": 0, \"e\": 1, \"s\": 2, \"!\": 3}, \"merges\": []}}";
    char json[512];
    snprintf(json, sizeof json, added, "true");
    tok = open_json("tok_added_norm.json", json);
    expect_ids(tok, "YES!", false, IDS(4, 3));
    lp_tokenizer_close(tok);
    snprintf(json, sizeof json, added, "false");
    tok = open_json("tok_added_raw.json", json);
    expect_ids(tok, "YES!", false, IDS(0, 1, 2, 3));
    expect_ids(tok, "Yes!", false, IDS(4, 3));
    lp_tokenizer_close(tok);
    /* the ByteLevel normalizer maps bytes to the printable alphabet before the model */
    tok = open_json("tok_bytelevel_norm.json",
        "{\"normalizer\": {\"type\": \"ByteLevel\"}, \"decoder\": {\"type\": \"ByteLevel\"},"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"\\u0120\": 1, \"b\": 2,"
        " \"\\u0120b\": 3}, \"merges\": [\"\\u0120 b\"]}}");
    expect_ids(tok, "a b", false, IDS(0, 3));
    int32_t bl[] = {0, 3};
    char *bl_text = decode(tok, bl, 2, false);
    assert_string_equal(bl_text, "a b");
    free(bl_text);
    lp_tokenizer_close(tok);
    /* Oniguruma's nested class (BLOOM's pattern): "[^(\\s|[.,!?])]" is one flat class */
    tok = open_json("tok_bloom.json",
        "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": "
        "\" ?[^(\\\\s|[.,!?])]+\"}, \"behavior\": \"Isolated\", \"invert\": false},"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \",\": 1, \"b\": 2, \" \": 3, "
        "\"c\": 4, \" c\": 5, \"b,\": 6}, \"merges\": [\"  c\", \"b ,\"]}}");
    /* (the first merge is " " + "c": split after the first byte) */
    expect_ids(tok, "a,b, c", false, IDS(0, 1, 2, 1, 5));
    lp_tokenizer_close(tok);
    /* no decoder in the file: labels still undo the byte-level alphabet or U+2581 */
    tok = open_json("tok_nodec_bl.json",
        "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"\\u0120b\": 0, \"\\u010a\": 1}, "
        "\"merges\": []}}");
    char *label = lp_tokenizer_label(tok, 0);
    assert_string_equal(label, " b");
    free(label);
    label = lp_tokenizer_label(tok, 1);
    assert_string_equal(label, "\\n");
    free(label);
    lp_tokenizer_close(tok);
    tok = open_json("tok_nodec_sp.json",
        "{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\","
        " \"vocab\": {\"\\u2581a\": 0, \"<0x09>\": 1}, \"merges\": []}}");
    label = lp_tokenizer_label(tok, 0);
    assert_string_equal(label, " a");
    free(label);
    label = lp_tokenizer_label(tok, 1);
    assert_string_equal(label, "\\t");
    free(label);
    lp_tokenizer_close(tok);
    /* BertProcessing: [CLS] A [SEP] */
    tok = open_json("tok_bert_post.json",
        "{\"post_processor\": {\"type\": \"BertProcessing\", \"sep\": [\"[SEP]\", 1], \"cls\": "
        "[\"[CLS]\", 0]}, \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}, "
        "\"decoder\": {\"type\": \"WordPiece\", \"prefix\": \"##\", \"cleanup\": true},"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"[CLS]\": 0, \"[SEP]\": 1, \"a\": 2, "
        "\"b\": 3, \"!\": 4, \"##b\": 5}, \"merges\": []}}");
    /* whitespace removed, punctuation isolated */
    expect_ids(tok, "a  b!", true, IDS(0, 2, 3, 4, 1));
    /* WordPiece decoding: "##b" continues, others get a space, cleanup glues "!" */
    int32_t ids[] = {2, 5, 3, 4};
    char *text = decode(tok, ids, 4, false);
    assert_string_equal(text, "ab b!");
    free(text);
    lp_tokenizer_close(tok);
}

/* ---- damaged files: every outcome is a tokenizer or an error, never a crash ---- */

static unsigned char *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* If a damaged tokenizer opened, encode and decode a little text within its vocabulary. */
static int exercise(lp_tokenizer *tok, lp_status st, const lp_error *err)
{
    if (st != LP_OK) {
        assert_null(tok);
        assert_true(err->msg[0] != '\0');
        return 0;
    }
    static const char text[] = "Once upon a time \xE4\xBD\xA0 \xFF!";
    size_t n;
    int32_t *ids = encode(tok, text, sizeof text - 1, true, &n);
    for (size_t k = 0; k < n; k++)
        assert_true(ids[k] >= 0 && ids[k] < lp_tokenizer_vocab_size(tok));
    char *back = decode(tok, ids, n, false);
    free(back);
    free(ids);
    lp_tokenizer_close(tok);
    return 1;
}

/* Parse damaged copies in memory (no file writes): llama2.c records or a GGUF header. */
static int try_damaged_memory(const unsigned char *data, size_t size, bool gguf)
{
    lp_tokenizer *tok = NULL;
    lp_error err = {0};
    lp_status st;
    if (gguf) {
        lp_gguf *g = NULL;
        st = lp_gguf_open_memory(data, size, "damaged.gguf", &g, &err);
        if (st == LP_OK) {
            st = lp_tokenizer_from_gguf(g, &tok, &err);
            lp_gguf_close(g);
        }
    } else {
        st = lp_tok_load_llama2c("damaged.bin", data, size, &tok, &err);
    }
    return exercise(tok, st, &err);
}

static void damage_file(const char *shared_rel, bool gguf, size_t limit, size_t step)
{
    char src[1024];
    lp_test_shared_path(src, sizeof src, shared_rel);
    size_t size;
    unsigned char *orig = read_all(src, &size);
    unsigned char *copy = malloc(size);
    assert_non_null(copy);
    int opened = 0, tries = 0;
    if (limit > size)
        limit = size;
    /* truncations (the buffer is copied so that reading past the end is caught by ASan) */
    for (size_t len = 0; len <= limit; len += step, tries++) {
        unsigned char *cut = malloc(len ? len : 1);
        assert_non_null(cut);
        memcpy(cut, orig, len);
        opened += try_damaged_memory(cut, len, gguf);
        free(cut);
    }
    /* single bytes set to 0x00, 0x7F or 0xFF */
    uint32_t seed = 7;
    for (size_t at = 0; at < limit; at += step / 3 + 1, tries++) {
        memcpy(copy, orig, size);
        seed = seed * 1664525u + 1013904223u;
        copy[at] = (unsigned char)(seed >> 30 == 0 ? 0x00 : seed >> 30 == 1 ? 0x7F : 0xFF);
        opened += try_damaged_memory(copy, size, gguf);
    }
    printf("%s: %d of %d damaged copies still opened\n", shared_rel, opened, tries);
    assert_true(opened < tries);
    free(copy);
    free(orig);
}

static void test_damaged_files(void **state)
{
    (void)state;
    damage_file("models/stories260K/tok512.bin", false, SIZE_MAX, 13);
    /* the GGUF's vocabulary is in its first ~10 KB; past that only tensor data would change */
    damage_file("models/stories260K/stories260K.gguf", true, 16384, 29);
}

/* Mutated tiny tokenizer.json files. */
static void test_damaged_json(void **state)
{
    (void)state;
    static const char base[] =
        "{\"added_tokens\": [{\"id\": 2, \"content\": \"<x>\", \"special\": true}],"
        " \"normalizer\": {\"type\": \"NFC\"}, \"pre_tokenizer\": {\"type\": \"ByteLevel\","
        " \"add_prefix_space\": false}, \"decoder\": {\"type\": \"ByteLevel\"},"
        " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\":"
        " {\"id\": \"<x>\"}}, {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<x>\":"
        " {\"id\": \"<x>\", \"ids\": [2]}}},"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"<x>\": 2, \"ab\": 3},"
        " \"merges\": [\"a b\"]}}";
    size_t len = sizeof base - 1;
    unsigned char buf[sizeof base];
    static const char replacements[] = "0-9\"{}[],: x\\";
    int opened = 0, tries = 0;
    for (size_t at = 0; at < len; at++)
        for (size_t r = 0; r < sizeof replacements - 1; r += 3) {
            memcpy(buf, base, len);
            buf[at] = (unsigned char)replacements[r];
            lp_tokenizer *tok = NULL;
            lp_error err = {0};
            lp_status st = lp_tok_load_json_buffer("mutated.json", (const char *)buf, len, &tok, &err);
            opened += exercise(tok, st, &err);
            tries++;
        }
    printf("%d of %d mutated tokenizer.json files still opened\n", opened, tries);
    assert_true(opened > 0 && opened < tries);
}

/* run.c's encode() on a tokenizer.bin written here: ids 0..2 specials, 3..258 bytes, then
 * " ", "a", "b", "ab" (score -0.0), "ba" (+0.0), " a" (-1). */
/* tests/inspect/wordpiece/tokenizer.json: a BERT-style file (BertNormalizer with strip_accents
 * null, BertPreTokenizer, WordPiece with "##" and 100 characters a word, [CLS] A [SEP]); every
 * expected id follows from its 60-entry vocabulary by hand. */
static void test_wordpiece_rules(void **state)
{
    (void)state;
    const char *src = getenv("LOUPE_SOURCE");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/inspect/wordpiece/tokenizer.json", src ? src : ".");
    lp_tokenizer *tok = NULL;
    lp_error err = {0};
    if (lp_tokenizer_open(path, &tok, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(lp_tokenizer_kind(tok), "wordpiece");
    /* lowercase; punctuation split off; [CLS] (2) ... [SEP] (3) around the sequence */
    expect_ids(tok, "Hello, World!", true, IDS(2, 18, 11, 19, 13, 3));
    expect_ids(tok, "Hello, World!", false, IDS(18, 11, 19, 13));
    /* accents stripped because lowercase is on (NFD, then the Mn marks dropped), upper too */
    expect_ids(tok, "Caf\xC3\xA9 r\xC3\xA9sum\xC3\xA9 na\xC3\xAFve CAF\xC3\x89", false,
               IDS(6, 32, 31, 6));
    /* longest match first, then ## pieces: un ##aff ##able, play ##ing / ##ed / ##s */
    expect_ids(tok, "unaffable playing played plays", false, IDS(7, 8, 9, 21, 20, 21, 22, 21, 10));
    /* "50": no "50", so 5 ##0; $ and - are ASCII punctuation, ¿ is Unicode Po */
    expect_ids(tok, "$50-x \xC2\xBFok?", false, IDS(27, 28, 29, 30, 33, 36, 55, 45));
    /* ideographs get spaces around them even inside a word; one outside the vocab is [UNK] */
    expect_ids(tok, "hello\xE4\xB8\xAD\xE6\x96\x87world \xE6\x97\xA5", false,
               IDS(18, 16, 17, 19, 1));
    /* a word with a stretch no piece starts ("qqq"; "xyz": x, then no ##y) is one [UNK] */
    expect_ids(tok, "the qqq. xyz xx", false, IDS(5, 1, 12, 1, 33, 34));
    /* clean_text: control characters, U+FFFD and U+200B (Cf) go, tab and NBSP are spaces */
    expect_ids(tok, "hel\x01lo\tworld\xEF\xBF\xBD ok\xE2\x80\x8B" "ay\xC2\xA0" "ab", false,
               IDS(18, 19, 55, 56, 57));
    /* the special tokens are matched in the text before normalization */
    expect_ids(tok, "[CLS] hello [MASK]", true, IDS(2, 2, 18, 4, 3));
    /* other text is no special token: [ mask ] are three words, none in the vocabulary */
    expect_ids(tok, "[mask]", false, IDS(1, 1, 1));
    /* 100 characters are a word (a ##a ...), 101 are [UNK] */
    char word[102];
    memset(word, 'a', 101);
    word[100] = 0;
    size_t n;
    int32_t *ids = encode(tok, word, 100, false, &n);
    assert_int_equal(n, 100);
    assert_int_equal(ids[0], 23);
    for (size_t k = 1; k < n; k++)
        assert_int_equal(ids[k], 24);
    free(ids);
    word[100] = 'a';
    word[101] = 0;
    expect_ids(tok, word, false, IDS(1));
    /* the decoder: ## pieces join their word, others get a space, the space before , ! goes
     * (per token, as Hugging Face does: "' s" stays apart) */
    int32_t seq[] = {2, 7, 8, 9, 11, 18, 5, 6, 14, 15, 13, 3};
    char *text = decode(tok, seq, 12, true);
    assert_string_equal(text, "unaffable, hello the cafe ' s!");
    free(text);
    text = decode(tok, seq, 12, false);
    assert_string_equal(text, "[CLS] unaffable, hello the cafe ' s! [SEP]");
    free(text);
    lp_tokenizer_close(tok);

    /* the options: no lowercase keeps case and accents (strip_accents null follows it),
     * strip_accents true strips them anyway, handle_chinese_chars false keeps 中文 one word,
     * BertProcessing adds cls and sep, a small max_input_chars_per_word, another prefix */
    static const char fmt[] =
        "{\"normalizer\": {\"type\": \"BertNormalizer\", \"lowercase\": false, "
        "\"strip_accents\": %s, \"handle_chinese_chars\": false}, "
        "\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}, "
        "\"post_processor\": {\"type\": \"BertProcessing\", \"cls\": [\"<c>\", 5], "
        "\"sep\": [\"<s>\", 6]}, "
        "\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"?\", "
        "\"continuing_subword_prefix\": \"+\", \"max_input_chars_per_word\": 4, \"vocab\": "
        "{\"?\": 0, \"E\": 1, \"\xC3\x89\": 2, \"e\": 3, \"\xE4\xB8\xAD\": 4, \"<c>\": 5, "
        "\"<s>\": 6, \"+e\": 7, \"+\xE6\x96\x87\": 8}}}";
    char json[1024];
    snprintf(json, sizeof json, fmt, "null");
    tok = open_json("tok_wp_case.json", json);
    expect_ids(tok, "\xC3\x89 E e ee \xE4\xB8\xAD\xE6\x96\x87", true, IDS(5, 2, 1, 3, 3, 7, 4, 8, 6));
    expect_ids(tok, "eeeee", false, IDS(0)); /* 5 characters > 4 */
    expect_ids(tok, "eeee", false, IDS(3, 7, 7, 7));
    lp_tokenizer_close(tok);
    snprintf(json, sizeof json, fmt, "true");
    tok = open_json("tok_wp_strip.json", json);
    expect_ids(tok, "\xC3\x89", false, IDS(1));
    lp_tokenizer_close(tok);
    /* no [UNK] in the vocabulary: refused at load, naming the token */
    const char *bad_path = write_tmp("tok_wp_nounk.json",
                                     "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}");
    assert_int_equal(lp_tokenizer_open(bad_path, &tok, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "[UNK]"));
}

/* Writes into *w the GGUF "bert" vocabulary of a WordPiece tokenizer.json as llama.cpp's converter
 * writes BERT's (control tokens as they are, "##x" as "x", every other piece as "\u2581" + piece). */
static void build_bert_gguf(const char *path, bool add_cls_sep, lp_gw *w)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        fail_msg("%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    const json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    size_t n = json_object_size(vocab);
    char **tokens = calloc(n, sizeof *tokens);
    int32_t *types = calloc(n, sizeof *types);
    assert_non_null(tokens);
    assert_non_null(types);
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)vocab, key, value)
    {
        size_t id = (size_t)json_integer_value(value);
        assert_true(id < n);
        bool control = key[0] == '[' && key[strlen(key) - 1] == ']';
        types[id] = strcmp(key, "[UNK]") == 0 ? 2 : control ? 3 : 1;
        tokens[id] = malloc(strlen(key) + 4);
        assert_non_null(tokens[id]);
        if (control)
            strcpy(tokens[id], key);
        else if (strncmp(key, "##", 2) == 0)
            strcpy(tokens[id], key + 2);
        else
            sprintf(tokens[id], "\xE2\x96\x81%s", key);
    }
    const json_t *cls = json_object_get(vocab, "[CLS]"), *sep = json_object_get(vocab, "[SEP]");
    lp_gw_init(w, 3);
    lp_gw_kv_str(w, "tokenizer.ggml.model", "bert");
    lp_gw_kv_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tokens, n);
    lp_gw_kv_arr_i32(w, "tokenizer.ggml.token_type", types, n);
    /* llama.cpp's converter names [CLS] cls_token_id (its ggml-vocab-bert-bge.gguf has no bos) */
    lp_gw_kv_u32(w, "tokenizer.ggml.cls_token_id", cls ? (uint32_t)json_integer_value(cls) : 2);
    lp_gw_kv_u32(w, "tokenizer.ggml.seperator_token_id", sep ? (uint32_t)json_integer_value(sep) : 3);
    lp_gw_kv_bool(w, "tokenizer.ggml.add_bos_token", add_cls_sep);
    lp_gw_kv_bool(w, "tokenizer.ggml.add_sep_token", add_cls_sep);
    assert_true(lp_gw_finish(w));
    for (size_t k = 0; k < n; k++)
        free(tokens[k]);
    free(tokens);
    free(types);
    json_decref(root);
}

/* llama.cpp's WPM encodes every string as Hugging Face's BertTokenizer does, on the WordPiece
 * tokenizer.json fixture. */
static void test_gguf_bert(void **state)
{
    (void)state;
    const char *src = getenv("LOUPE_SOURCE");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/inspect/wordpiece/tokenizer.json", src ? src : ".");
    lp_gw w;
    build_bert_gguf(path, true, &w);
    lp_gguf *g = NULL;
    lp_error err = {0};
    assert_int_equal(lp_gguf_open_memory(w.file.data, w.file.len, "bert.gguf", &g, &err), LP_OK);
    lp_tokenizer *gtok = NULL, *jtok = NULL;
    if (lp_tokenizer_from_gguf(g, &gtok, &err) != LP_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(lp_tokenizer_open(path, &jtok, &err), LP_OK);
    assert_string_equal(lp_tokenizer_kind(gtok), "wordpiece");
    static const char *const texts[] = {
        "Hello, World!", "Caf\xC3\xA9 r\xC3\xA9sum\xC3\xA9 na\xC3\xAFve CAF\xC3\x89",
        "unaffable playing played plays", "$50-x \xC2\xBFok?",
        "hello\xE4\xB8\xAD\xE6\x96\x87world \xE6\x97\xA5", "the qqq. xyz xx",
        "hel\x01lo\tworld\xEF\xBF\xBD ok\xE2\x80\x8B" "ay\xC2\xA0" "ab", "[CLS] hello [MASK]",
        "[mask]", "  \n\n the\t\tcafe  ", ""};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++)
        for (int special = 0; special < 2; special++) {
            size_t n_g, n_j;
            int32_t *a = encode(gtok, texts[k], strlen(texts[k]), special, &n_g);
            int32_t *b = encode(jtok, texts[k], strlen(texts[k]), special, &n_j);
            if (n_g != n_j || (n_g && memcmp(a, b, n_g * sizeof *a) != 0))
                fail_msg("bert gguf differs from tokenizer.json on \"%s\"", texts[k]);
            free(a);
            free(b);
        }
    /* the vocabulary's pieces decode back to words: \u2581 starts one, others continue it */
    int32_t seq[] = {7, 8, 9, 11, 18};
    char *text = decode(gtok, seq, 5, true);
    assert_string_equal(text, "unaffable , hello");
    free(text);
    lp_tokenizer_close(gtok);
    lp_tokenizer_close(jtok);
    lp_gguf_close(g);
    lp_gw_free(&w);
}

/* Unigram (tokenizer.json): expected ids worked out by hand from the scores (Hugging Face's
 * rules: the highest total log-probability, ties to the piece found first, an uncovered
 * character as <unk> at the lowest score minus 10, unknown runs fused, byte fallback). */
#define UNIGRAM_JSON(byte_fallback)                                                              \
    "{\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "               \
    "\"prepend_scheme\": \"always\", \"split\": true},"                                          \
    " \"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "                     \
    "\"prepend_scheme\": \"always\", \"split\": true},"                                          \
    " \"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"byte_fallback\": " byte_fallback ", "  \
    "\"vocab\": [[\"<unk>\", 0.0], [\"\\u2581\", -1.0], [\"\\u2581a\", -2.0], [\"b\", -2.0],"     \
    " [\"\\u2581ab\", -5.0], [\"c\", -3.0], [\"bc\", -1.5], [\"d\", -1.0], [\"e\", -1.0],"       \
    " [\"de\", -2.0], [\"<0x21>\", -4.0]]}}"

static void test_unigram_rules(void **state)
{
    (void)state;
    lp_tokenizer *tok = open_json("unigram.json", UNIGRAM_JSON("false"));
    assert_string_equal(lp_tokenizer_kind(tok), "unigram");
    /* "\u2581abc": \u2581a + bc (-3.5) beats the longest first piece \u2581ab + c (-8) */
    expect_ids(tok, "abc", false, IDS(2, 6));
    expect_ids(tok, "abc abc", false, IDS(2, 6, 2, 6));
    /* x, y, z have no piece: three unknowns (-15 each) fused into one <unk> */
    expect_ids(tok, "xyz", false, IDS(1, 0));
    /* d + e and de both score -2: de, reached first, stays */
    expect_ids(tok, "de", false, IDS(1, 9));
    /* without byte fallback "!" is unknown */
    expect_ids(tok, "!", false, IDS(1, 0));
    int32_t seq[] = {2, 6, 2, 6, 1, 9};
    char *text = decode(tok, seq, 6, false);
    assert_string_equal(text, "abc abc de");
    free(text);
    lp_tokenizer_close(tok);
    tok = open_json("unigram_bytes.json", UNIGRAM_JSON("true"));
    /* byte fallback: "!" is <0x21>; "x!" is one unknown run whose bytes are not all byte
     * tokens, so it stays <unk> */
    expect_ids(tok, "!", false, IDS(1, 10));
    expect_ids(tok, "x!", false, IDS(1, 0));
    expect_ids(tok, "a!bc", false, IDS(2, 10, 6));
    lp_tokenizer_close(tok);
    /* no unk_id: refused at load, naming the field */
    const char *path = write_tmp("unigram_nounk.json",
                                 "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.0]]}}");
    lp_error err = {0};
    assert_int_equal(lp_tokenizer_open(path, &tok, &err), LP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "unk_id"));
    path = write_tmp("unigram_bad.json",
                     "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"a\"]]}}");
    assert_int_equal(lp_tokenizer_open(path, &tok, &err), LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "model.vocab[0]"));
}

/* A SentencePiece GGUF of nine tokens named as general.name says: "phi-3" gives its special
 * tokens llama.cpp's rstrip (but not <|endoftext|>); any other name none. */
static lp_tokenizer *strip_gguf(const char *name)
{
    static const char *const tokens[] = {"<unk>", "<s>", "</s>", "<|user|>", "<|endoftext|>",
                                         "\xE2\x96\x81", "a", "\xE2\x96\x81" "a", "<0x0A>"};
    static const int32_t types[] = {2, 3, 3, 3, 3, 1, 1, 1, 6};
    static const float scores[] = {0, 0, 0, 0, 0, -1, -2, -0.5f, 0};
    lp_gw w;
    lp_gw_init(&w, 3);
    lp_gw_kv_str(&w, "general.name", name);
    lp_gw_kv_str(&w, "tokenizer.ggml.model", "llama");
    lp_gw_kv_arr_str(&w, "tokenizer.ggml.tokens", tokens, 9);
    lp_gw_kv_arr_i32(&w, "tokenizer.ggml.token_type", types, 9);
    lp_gw_kv_arr_f32(&w, "tokenizer.ggml.scores", scores, 9);
    lp_gw_kv_bool(&w, "tokenizer.ggml.add_bos_token", false);
    assert_true(lp_gw_finish(&w));
    lp_gguf *g = NULL;
    lp_tokenizer *tok = NULL;
    lp_error err = {0};
    if (lp_gguf_open_memory(w.file.data, w.file.len, "strip.gguf", &g, &err) != LP_OK ||
        lp_tokenizer_from_gguf(g, &tok, &err) != LP_OK)
        fail_msg("%s", err.msg);
    lp_gguf_close(g);
    lp_gw_free(&w);
    return tok;
}

static void test_gguf_strip_by_name(void **state)
{
    (void)state;
    lp_tokenizer *phi3 = strip_gguf("Phi-3-mini-4k-instruct"), *other = strip_gguf("other");
    size_t n;
    /* the newline after <|user|> goes with it under phi-3's rules only */
    int32_t *ids = encode(phi3, "<|user|>\na", 10, false, &n);
    for (size_t k = 0; k < n; k++)
        assert_int_not_equal(ids[k], 8);
    assert_int_equal(ids[0], 3);
    free(ids);
    ids = encode(other, "<|user|>\na", 10, false, &n);
    assert_int_equal(ids[0], 3);
    bool newline = false;
    for (size_t k = 0; k < n; k++)
        newline |= ids[k] == 8;
    assert_true(newline);
    free(ids);
    /* <|endoftext|> keeps what follows; <unk> written in the text is the unknown token */
    ids = encode(phi3, "<|endoftext|>\n<unk>", 19, false, &n);
    assert_true(n >= 3 && ids[0] == 4 && ids[n - 1] == 0);
    newline = false;
    for (size_t k = 0; k < n; k++)
        newline |= ids[k] == 8;
    assert_true(newline);
    free(ids);
    lp_tokenizer_close(phi3);
    lp_tokenizer_close(other);
}

/* A GGUF "t5" vocabulary (llama.cpp's UGM) with a charsmap made by hand: a double-array trie
 * of two keys, "q" -> "k" and "qu" -> "K" (nodes: root BASE 1; 1^'q' = 112 a leaf with BASE 1,
 * its value at 113 = offset 0 and its child 113^'u' = 4 a leaf with BASE 1, value at 5 =
 * offset 2). Ids worked out by hand from the scores. */
enum { HAND_CHARSMAP_BYTES = 4 + 114 * 4 + 4 };

static void hand_charsmap(uint8_t map[HAND_CHARSMAP_BYTES], uint32_t xcda_bytes)
{
    uint32_t nodes[114] = {0};
    nodes[0] = 1u << 10;
    nodes[112] = (1u << 10) | 0x100 | 'q';
    nodes[113] = 0x80000000u | 0;
    nodes[4] = (1u << 10) | 0x100 | 'u';
    nodes[5] = 0x80000000u | 2;
    memcpy(map, &xcda_bytes, 4);
    memcpy(map + 4, nodes, sizeof nodes);
    memcpy(map + 4 + sizeof nodes, "k\0K\0", 4);
}

static lp_tokenizer *t5_gguf(lp_gw *w, bool merge_spaces, uint32_t xcda_bytes, lp_status *st,
                             lp_error *err, lp_gguf **g)
{
    static uint8_t map[HAND_CHARSMAP_BYTES];
    hand_charsmap(map, xcda_bytes);
    static const char *const tokens[] = {"<pad>", "</s>", "<unk>", "\xE2\x96\x81",
                                         "\xE2\x96\x81K", "iz", "\xE2\x96\x81k", "i", "z",
                                         "\xE2\x96\x81Kiz"};
    static const int32_t types[] = {3, 3, 2, 1, 1, 1, 1, 1, 1, 1};
    static const float scores[] = {0, 0, 0, -1, -2, -2, -2, -3, -3, -10};
    lp_gw_init(w, 3);
    lp_gw_kv_str(w, "tokenizer.ggml.model", "t5");
    lp_gw_kv_arr_str(w, "tokenizer.ggml.tokens", tokens, 10);
    lp_gw_kv_arr_i32(w, "tokenizer.ggml.token_type", types, 10);
    lp_gw_kv_arr_f32(w, "tokenizer.ggml.scores", scores, 10);
    lp_gw_kv_bool(w, "tokenizer.ggml.remove_extra_whitespaces", merge_spaces);
    lp_gw_key(w, "tokenizer.ggml.precompiled_charsmap", 9);
    lp_gw_u32(w, 0); /* uint8 elements */
    lp_gw_u64(w, sizeof map);
    lp_gw_bytes(w, map, sizeof map);
    assert_true(lp_gw_finish(w));
    assert_int_equal(lp_gguf_open_memory(w->file.data, w->file.len, "t5.gguf", g, err), LP_OK);
    lp_tokenizer *tok = NULL;
    *st = lp_tokenizer_from_gguf(*g, &tok, err);
    return tok;
}

static void test_gguf_t5(void **state)
{
    (void)state;
    for (int merge = 0; merge < 2; merge++) {
        lp_gw w;
        lp_gguf *g = NULL;
        lp_error err = {0};
        lp_status st;
        lp_tokenizer *tok = t5_gguf(&w, merge, 114 * 4, &st, &err, &g);
        if (st != LP_OK)
            fail_msg("%s", err.msg);
        assert_string_equal(lp_tokenizer_kind(tok), "unigram");
        /* "quiz q" -> "Kiz k" -> "\u2581Kiz\u2581k": \u2581K + iz (-4) beats \u2581Kiz (-10)
         * and \u2581K i z (-8); then \u2581k; EOS after */
        expect_ids(tok, "quiz q", true, IDS(4, 5, 6, 1));
        expect_ids(tok, "quiz q", false, IDS(4, 5, 6));
        /* a second space: its own \u2581, or merged away with remove_extra_whitespaces (the
         * ends' spaces go too) */
        if (merge)
            expect_ids(tok, "  quiz   q ", false, IDS(4, 5, 6));
        else
            expect_ids(tok, "quiz  q", false, IDS(4, 5, 3, 6));
        /* x is no piece: one <unk> for "xx"; a byte that is not UTF-8 is U+FFFD, unknown too */
        expect_ids(tok, "qxx", false, IDS(6, 2));
        expect_ids(tok, "q\xFF", false, IDS(6, 2));
        /* special tokens are cut out first */
        expect_ids(tok, "q</s>q", false, IDS(6, 1, 6));
        int32_t seq[] = {4, 5, 6};
        char *text = decode(tok, seq, 3, false);
        assert_string_equal(text, "Kiz k");
        free(text);
        lp_tokenizer_close(tok);
        lp_gguf_close(g);
        lp_gw_free(&w);
    }
    /* a charsmap whose trie size runs past its end is refused at load */
    lp_gw w;
    lp_gguf *g = NULL;
    lp_error err = {0};
    lp_status st;
    assert_null(t5_gguf(&w, false, 0xFFFFFFF0u, &st, &err, &g));
    assert_int_equal(st, LP_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "precompiled_charsmap"));
    lp_gguf_close(g);
    lp_gw_free(&w);
}

/* The same hand-made charsmap as a tokenizer.json Precompiled normalizer (base64), over a BPE
 * vocabulary of single characters without merges, so the ids spell the normalized text. Hugging
 * Face walks the map by grapheme cluster and takes a cluster's shortest key (spm_precompiled):
 * "qu" is two clusters, "q" -> "k" and "u" (llama.cpp's walk on the same map in the GGUF above
 * takes the longer key "qu" -> "K"); "q" + U+0301 is one cluster of 3 bytes that starts with the
 * key "q", replaced whole by "k" (the accent goes with it); with three accents (7 bytes, not
 * under 6) the cluster goes character by character and the accents stay. */
static void test_json_precompiled(void **state)
{
    (void)state;
    uint8_t map[HAND_CHARSMAP_BYTES];
    hand_charsmap(map, 114 * 4);
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char encoded[HAND_CHARSMAP_BYTES / 3 * 4 + 8], *e = encoded;
    for (size_t i = 0; i < sizeof map; i += 3) {
        uint32_t v = (uint32_t)map[i] << 16 | (i + 1 < sizeof map ? (uint32_t)map[i + 1] << 8 : 0) |
                     (i + 2 < sizeof map ? map[i + 2] : 0);
        for (int k = 0; k < 4; k++)
            *e++ = i + (size_t)k <= sizeof map ? b64[(v >> (18 - 6 * k)) & 63] : '=';
    }
    *e = '\0';
    char json[2048];
    snprintf(json, sizeof json,
             "{\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"%s\"},"
             " \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"merges\": [],"
             " \"vocab\": {\"k\": 0, \"u\": 1, \"K\": 2, \"\\u0301\": 3, \"i\": 4,"
             " \"z\": 5, \"<unk>\": 6}}}",
             encoded);
    lp_tokenizer *tok = NULL;
    lp_error err = {0};
    if (lp_tokenizer_open(write_tmp("precompiled.json", json), &tok, &err) != LP_OK)
        fail_msg("%s", err.msg);
    expect_ids(tok, "quiz", false, IDS(0, 1, 4, 5));
    expect_ids(tok, "Kq", false, IDS(2, 0));
    expect_ids(tok, "q\xCC\x81z", false, IDS(0, 5));
    expect_ids(tok, "q\xCC\x81\xCC\x81\xCC\x81", false, IDS(0, 3, 3, 3));
    expect_ids(tok, "u\xCC\x81", false, IDS(1, 3));
    lp_tokenizer_close(tok);
    /* a map that is not base64, and one too short for the trie it announces, are refused */
    const char *bad[] = {"{\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\":"
                         " \"AA*A\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                         "{\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\":"
                         " \"/////w==\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}"};
    const char *why[] = {"not base64", "cannot hold the trie"};
    for (int k = 0; k < 2; k++) {
        tok = NULL;
        assert_int_equal(lp_tokenizer_open(write_tmp("precompiled_bad.json", bad[k]), &tok, &err),
                         LP_ERR_FORMAT);
        assert_null(tok);
        if (!strstr(err.msg, why[k]) || !strstr(err.msg, "precompiled_charsmap"))
            fail_msg("%s", err.msg);
    }
}

static void test_llama2c_rules(void **state)
{
    (void)state;
    lp_bytes buf = {0};
    int32_t max_len = 6;
    lp_bytes_append(&buf, &max_len, 4);
    static const char *const specials[] = {"<unk>", "\n<s>\n", "\n</s>\n"};
    for (int k = 0; k < 3; k++) {
        float score = 0.0f;
        int32_t len = (int32_t)strlen(specials[k]);
        lp_bytes_append(&buf, &score, 4);
        lp_bytes_append(&buf, &len, 4);
        lp_bytes_append(&buf, specials[k], (size_t)len);
    }
    for (int b = 0; b < 256; b++) {
        char piece[8];
        snprintf(piece, sizeof piece, "<0x%02X>", b);
        float score = 0.0f;
        int32_t len = 6;
        lp_bytes_append(&buf, &score, 4);
        lp_bytes_append(&buf, &len, 4);
        lp_bytes_append(&buf, piece, 6);
    }
    static const struct {
        const char *piece;
        float score;
    } rest[] = {{" ", -5.0f}, {"a", -5.0f}, {"b", -5.0f}, {"ab", -0.0f}, {"ba", 0.0f},
                {" a", -1.0f}};
    for (size_t k = 0; k < sizeof rest / sizeof rest[0]; k++) {
        int32_t len = (int32_t)strlen(rest[k].piece);
        lp_bytes_append(&buf, &rest[k].score, 4);
        lp_bytes_append(&buf, &len, 4);
        lp_bytes_append(&buf, rest[k].piece, (size_t)len);
    }
    lp_tokenizer *tok = NULL;
    lp_error err = {0};
    const uint8_t *file = (const uint8_t *)buf.data;
    assert_int_equal(lp_tok_load_llama2c("tiny.bin", file, buf.len, &tok, &err), LP_OK);
    assert_int_equal(lp_tokenizer_vocab_size(tok), 3 + 256 + 6);
    /* BOS, the dummy prefix " ", then "ab" (-0.0) and "ba" (+0.0) tie: the leftmost wins;
     * " a" scores -1 and loses to both */
    expect_ids(tok, "aba", true, IDS(1, 259, 262, 260));
    /* no BOS without special tokens; "\xC3\xA9" is not a piece: bytes + 3 */
    expect_ids(tok, "\xC3\xA9", false, IDS(259, 0xC3 + 3, 0xA9 + 3));
    /* the empty text has no dummy prefix */
    expect_ids(tok, "", true, IDS(1));
    char *text = decode(tok, (const int32_t[]){1, 259, 262, 260}, 4, true);
    assert_string_equal(text, "aba");
    free(text);
    lp_tokenizer_close(tok);
    /* records that do not fill the file exactly are not a tokenizer */
    assert_int_equal(lp_tok_load_llama2c("tiny.bin", file, buf.len - 1, &tok, &err),
                     LP_ERR_FORMAT);
    lp_bytes_free(&buf);
}

/* ---- Unicode ---- */

static void test_unicode(void **state)
{
    (void)state;
    char *out;
    size_t len;
    /* compose, reorder marks, Hangul, exclusions, and raw bytes kept */
    assert_int_equal(lp_uc_normalize(LP_UC_NFC, "e\xCC\x81", 3, &out, &len), LP_OK);
    assert_string_equal(out, "\xC3\xA9");
    free(out);
    /* U+1E0B U+0323 -> U+1E0D U+0307 (NFC reorders dot below first) */
    assert_int_equal(lp_uc_normalize(LP_UC_NFC, "\xE1\xB8\x8B\xCC\xA3", 5, &out, &len), LP_OK);
    assert_string_equal(out, "\xE1\xB8\x8D\xCC\x87");
    free(out);
    /* Hangul L V T composes to one syllable (U+D4DB) */
    assert_int_equal(lp_uc_normalize(LP_UC_NFC, "\xE1\x84\x91\xE1\x85\xB1\xE1\x86\xB6", 9, &out,
                                     &len), LP_OK);
    assert_string_equal(out, "\xED\x93\x9B");
    free(out);
    /* U+0958 is excluded from composition: stays decomposed */
    assert_int_equal(lp_uc_normalize(LP_UC_NFC, "\xE0\xA5\x98", 3, &out, &len), LP_OK);
    assert_string_equal(out, "\xE0\xA4\x95\xE0\xA4\xBC");
    free(out);
    /* NFKC folds the "fi" ligature; invalid bytes pass through */
    assert_int_equal(lp_uc_normalize(LP_UC_NFKC, "\xEF\xAC\x81\xFF", 4, &out, &len), LP_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(out, "fi\xFF", 3);
    free(out);
    assert_int_equal(lp_uc_lowercase("\xC3\x85Ngstr\xC3\x96M", 10, &out, &len), LP_OK);
    assert_string_equal(out, "\xC3\xA5ngstr\xC3\xB6m");
    free(out);
    /* the byte-level alphabet: printable bytes map to themselves, space to U+0120 */
    assert_int_equal(lp_tok_byte_to_cp(' '), 0x120);
    assert_int_equal(lp_tok_byte_to_cp('\n'), 0x10A);
    assert_int_equal(lp_tok_byte_to_cp('a'), 'a');
    for (int b = 0; b < 256; b++)
        assert_int_equal(lp_tok_cp_to_byte(lp_tok_byte_to_cp((uint8_t)b)), b);
}


/* ---- Unicode's own conformance file ---- */

static size_t parse_cps(const char *field, char *out, size_t cap)
{
    size_t n = 0;
    const char *p = field;
    while (*p && *p != ';') {
        char *end;
        unsigned long cp = strtoul(p, &end, 16);
        if (end == p)
            break;
        char u[4];
        size_t k = lp_utf8_put((uint32_t)cp, u);
        if (n + k < cap) {
            memcpy(out + n, u, k);
            n += k;
        }
        p = end;
        while (*p == ' ')
            p++;
    }
    return n;
}

/* NormalizationTest.txt: c2 == NFC(c1..c3), c4 == NFC(c4, c5), c3 == NFD(c1..c3),
 * c5 == NFD(c4, c5), c4 == NFKC(c1..c5), c5 == NFKD(c1..c5). */
static int run_normalization_test(FILE *f)
{
    static const struct {
        lp_uc_form form;
        int want, n_src;
        int src[5];
    } rules[] = {
        {LP_UC_NFC, 1, 3, {0, 1, 2}},        {LP_UC_NFC, 3, 2, {3, 4}},
        {LP_UC_NFD, 2, 3, {0, 1, 2}},        {LP_UC_NFD, 4, 2, {3, 4}},
        {LP_UC_NFKC, 3, 5, {0, 1, 2, 3, 4}}, {LP_UC_NFKD, 4, 5, {0, 1, 2, 3, 4}},
    };
    char line[4096];
    long checks = 0, failures = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '@' || line[0] == '\n')
            continue;
        char col[5][256];
        size_t len[5];
        const char *p = line;
        int k;
        for (k = 0; k < 5 && p; k++) {
            len[k] = parse_cps(p, col[k], sizeof col[k]);
            p = strchr(p, ';');
            if (p)
                p++;
        }
        if (k < 5)
            continue;
        for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++)
            for (int s = 0; s < rules[r].n_src; s++) {
                int from = rules[r].src[s], want = rules[r].want;
                char *out;
                size_t out_len;
                assert_int_equal(lp_uc_normalize(rules[r].form, col[from], len[from], &out,
                                                 &out_len), LP_OK);
                checks++;
                if (out_len != len[want] || memcmp(out, col[want], out_len) != 0) {
                    if (failures < 10)
                        printf("FAIL form %d, column %d: %s", (int)rules[r].form, from + 1, line);
                    failures++;
                }
                free(out);
            }
    }
    printf("%ld of %ld normalization checks failed\n", failures, checks);
    return checks > 300000 && failures == 0 ? 0 : 1;
}

static int unicode_conformance(void)
{
    const char *dir = getenv("LOUPE_UCD") ? getenv("LOUPE_UCD") : "/usr/share/unicode";
    char path[1024], cmd[1100];
    snprintf(path, sizeof path, "%s/NormalizationTest.txt", dir);
    FILE *f = fopen(path, "r");
    if (f) {
        int rc = run_normalization_test(f);
        fclose(f);
        return rc;
    }
    snprintf(path, sizeof path, "%s/NormalizationTest.txt.bz2", dir);
    struct stat st;
    if (stat(path, &st) != 0) {
        printf("SKIP: %s not found (apt-get install unicode-data, or set LOUPE_UCD)\n", path);
        return LP_TEST_SKIP;
    }
    snprintf(cmd, sizeof cmd, "bzcat '%s' 2>/dev/null", path);
    f = popen(cmd, "r");
    if (!f) {
        printf("SKIP: cannot run bzcat\n");
        return LP_TEST_SKIP;
    }
    int rc = run_normalization_test(f);
    if (pclose(f) != 0) {
        printf("SKIP: bzcat failed on %s\n", path);
        return LP_TEST_SKIP;
    }
    return rc;
}

/* Three ctest entries share this program: no argument runs the unit tests, "golden" the tests
 * against ../shared (skipped when it is absent), "unicode" Unicode's NormalizationTest.txt. */
int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "unicode") == 0)
        return unicode_conformance();
    if (argc > 1 && strcmp(argv[1], "golden") == 0) {
        LP_TEST_REQUIRE_SHARED();
        const struct CMUnitTest golden[] = {
            cmocka_unit_test(test_reference_gpt2),
            cmocka_unit_test(test_reference_tinyllama),
            cmocka_unit_test(test_reference_qwen3),
            cmocka_unit_test(test_llama2c_prompts),
            cmocka_unit_test(test_gguf_vocab_prompts),
            cmocka_unit_test(test_gguf_equals_llama2c),
            cmocka_unit_test(test_gguf_built_gpt2),
            cmocka_unit_test(test_gguf_built_qwen3),
            cmocka_unit_test(test_gguf_built_llama),
            cmocka_unit_test(test_llama_vocab_suites),
            cmocka_unit_test(test_gguf_pre_families),
            cmocka_unit_test(test_gguf_splits_as_shared_json),
            cmocka_unit_test(test_gpt2_rules),
            cmocka_unit_test(test_gpt2_round_trip),
            cmocka_unit_test(test_qwen3_rules),
            cmocka_unit_test(test_tinyllama_rules),
            cmocka_unit_test(test_labels),
            cmocka_unit_test(test_damaged_files),
        };
        return cmocka_run_group_tests_name("tokenizer_golden", golden, NULL, NULL);
    }
    const struct CMUnitTest unit[] = {
        cmocka_unit_test(test_unicode),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_split_behaviors),
        cmocka_unit_test(test_metaspace_and_added),
        cmocka_unit_test(test_model_options),
        cmocka_unit_test(test_normalizers_and_post),
        cmocka_unit_test(test_damaged_json),
        cmocka_unit_test(test_llama2c_rules),
        cmocka_unit_test(test_wordpiece_rules),
        cmocka_unit_test(test_gguf_bert),
        cmocka_unit_test(test_unigram_rules),
        cmocka_unit_test(test_json_precompiled),
        cmocka_unit_test(test_gguf_t5),
        cmocka_unit_test(test_gguf_strip_by_name),
        cmocka_unit_test(test_vocab_suites),
        cmocka_unit_test(test_gguf_splits_as_json),
    };
    return cmocka_run_group_tests_name("tokenizer_unit", unit, NULL, NULL);
}
