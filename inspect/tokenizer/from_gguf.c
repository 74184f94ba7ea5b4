/* GGUF vocabularies (tokenizer.ggml.*): "llama" (SentencePiece BPE by scores with byte
 * fallback) and "gpt2" (byte-level BPE with merges and the pre-tokenizer regex named by
 * tokenizer.ggml.pre), turned into the shared pipeline of tokenizer_internal.h. */
#include "inspect/tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"
#include "inspect/formats/gguf.h"

/* llama.cpp's token types */
enum { GGUF_TOKEN_NORMAL = 1, GGUF_TOKEN_UNKNOWN = 2, GGUF_TOKEN_CONTROL = 3,
       GGUF_TOKEN_USER_DEFINED = 4, GGUF_TOKEN_UNUSED = 5, GGUF_TOKEN_BYTE = 6 };

static lp_status nomem(const char *name, lp_error *err)
{
    return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", name);
}

static lp_tok_dec *add_dec(lp_tokenizer *tok, lp_tok_dec_kind kind)
{
    lp_tok_dec *d = lp_tok_append((void **)&tok->decs, &tok->n_decs, sizeof *d);
    if (d)
        d->kind = kind;
    return d;
}

/* The regexes a tokenizer.ggml.pre name stands for, applied one after the other (each splits
 * the pieces of the previous one, keeping matches and gaps), as llama.cpp's llama-vocab.cpp
 * lists them; the single-regex families use the Hugging Face patterns they were converted from. */
#define MAX_PRE_REGEXES 5
typedef struct pre_family {
    const char *names; /* space-separated tokenizer.ggml.pre values */
    const char *regexes[MAX_PRE_REGEXES];
} pre_family;

static const char regex_digit[] = "\\p{N}";
static const char regex_gpt2_no_tail[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

static const pre_family pre_families[] = {
    {" default gpt2 gpt-2 mpt olmo jais trillion ", {lp_tok_regex_gpt2}},
    {" llama3 llama-v3 llama-bpe falcon3 pixtral dbrx smaug-bpe ", {lp_tok_regex_llama3}},
    {" qwen2 qwen stablelm2 deepseek-r1-qwen megrez ", {lp_tok_regex_qwen2}},
    {" starcoder refact command-r smollm codeshell exaone minerva-7b ",
     {regex_digit, regex_gpt2_no_tail}},
    {" deepseek-coder ",
     {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}"
      "\\x{AC00}-\\x{D7FF}]+", "\\p{N}"}},
    {" deepseek-v3 ",
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"
      "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {" falcon ",
     {"[\\p{P}\\$\\+<=>\\^~\\|`]+", regex_gpt2_no_tail, "[0-9][0-9][0-9]"}},
};

static const pre_family *find_pre(const char *pre, size_t len)
{
    char key[80];
    if (len == 0 || len + 3 > sizeof key || memchr(pre, ' ', len))
        return NULL;
    snprintf(key, sizeof key, " %.*s ", (int)len, pre);
    for (size_t k = 0; k < sizeof pre_families / sizeof pre_families[0]; k++)
        if (strstr(pre_families[k].names, key))
            return &pre_families[k];
    return NULL;
}

lp_status lp_tokenizer_from_gguf(const struct lp_gguf *g, lp_tokenizer **out, lp_error *err)
{
    LP_ASSERT(g && out);
    *out = NULL;
    const char *path = lp_gguf_path(g) ? lp_gguf_path(g) : "gguf";
    const char *name = lp_path_basename(path);
    const char *model;
    size_t model_len;
    if (!lp_gguf_get_str(g, "tokenizer.ggml.model", &model, &model_len))
        return lp_error_set(err, LP_ERR_NOT_FOUND, "%s: no tokenizer.ggml.model: the file has "
                            "no vocabulary", name);
    bool is_llama = model_len == 5 && memcmp(model, "llama", 5) == 0;
    bool is_gpt2 = model_len == 4 && memcmp(model, "gpt2", 4) == 0;
    if (!is_llama && !is_gpt2)
        return lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not "
                            "supported (llama, gpt2 are)", name,
                            (int)(model_len > 40 ? 40 : model_len),
                            model);
    int64_t kv_tokens = lp_gguf_find_key(g, "tokenizer.ggml.tokens");
    if (kv_tokens < 0 || lp_gguf_kv_type(g, kv_tokens) != LP_GGUF_ARRAY ||
        lp_gguf_arr_type(g, kv_tokens) != LP_GGUF_STRING || lp_gguf_arr_len(g, kv_tokens) == 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tokenizer.ggml.tokens: a non-empty string "
                            "array expected", name);
    uint64_t n = lp_gguf_arr_len(g, kv_tokens);
    if (n > INT32_MAX)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tokenizer.ggml.tokens: %llu tokens, more "
                            "than %d", name, (unsigned long long)n, INT32_MAX);
    int64_t kv_scores = lp_gguf_find_key(g, "tokenizer.ggml.scores");
    int64_t kv_types = lp_gguf_find_key(g, "tokenizer.ggml.token_type");
    if (kv_scores >= 0 && lp_gguf_arr_len(g, kv_scores) != n)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tokenizer.ggml.scores has %llu entries, "
                            "tokens %llu", name, (unsigned long long)lp_gguf_arr_len(g, kv_scores),
                            (unsigned long long)n);
    if (kv_types >= 0 && lp_gguf_arr_len(g, kv_types) != n)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tokenizer.ggml.token_type has %llu "
                            "entries, tokens %llu", name,
                            (unsigned long long)lp_gguf_arr_len(g, kv_types),
                            (unsigned long long)n);
    if (is_llama && kv_scores < 0)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: tokenizer.ggml.scores missing for a "
                            "llama vocabulary", name);

    lp_tokenizer *tok = lp_tok_new(path, is_llama ? "gguf-llama" : "gguf-gpt2");
    if (!tok)
        return nomem(name, err);
    lp_status st = lp_tok_alloc_vocab(tok, (int64_t)n, err);
    if (st == LP_OK && is_llama) {
        tok->scores = calloc((size_t)n, sizeof *tok->scores);
        if (!tok->scores)
            st = nomem(name, err);
    }
    for (uint64_t i = 0; i < n && st == LP_OK; i++) {
        const char *s;
        size_t len;
        if (!lp_gguf_arr_str(g, kv_tokens, i, &s, &len)) {
            st = lp_error_set(err, LP_ERR_FORMAT, "%s: tokenizer.ggml.tokens[%llu] unreadable",
                              name, (unsigned long long)i);
            break;
        }
        st = lp_tok_set_piece(tok, (int32_t)i, s, len, err);
        if (st != LP_OK)
            break;
        int64_t type = GGUF_TOKEN_NORMAL;
        if (kv_types >= 0)
            lp_gguf_arr_int(g, kv_types, i, &type);
        if (tok->scores) {
            double score = 0;
            lp_gguf_arr_float(g, kv_scores, i, &score);
            tok->scores[i] = (float)score;
        }
        if (type == GGUF_TOKEN_CONTROL)
            tok->flags[i] |= LP_TOK_FLAG_SPECIAL | LP_TOK_FLAG_CONTROL;
        if (type == GGUF_TOKEN_CONTROL || type == GGUF_TOKEN_USER_DEFINED) {
            /* matched in text like Hugging Face's added tokens */
            lp_tok_added *a = lp_tok_append((void **)&tok->added, &tok->n_added, sizeof *a);
            if (!a || !(a->content = lp_tok_strndup(s, len))) {
                st = nomem(name, err);
                break;
            }
            a->len = len;
            a->id = (int32_t)i;
            a->special = type == GGUF_TOKEN_CONTROL;
        }
        if (type == GGUF_TOKEN_UNKNOWN && tok->unk_id < 0)
            tok->unk_id = (int32_t)i;
    }
    if (st == LP_OK)
        st = lp_tok_build_vocab_map(tok, err);
    int64_t v;
    if (st == LP_OK && lp_gguf_get_int(g, "tokenizer.ggml.unknown_token_id", &v) && v >= 0 &&
        v < (int64_t)n)
        tok->unk_id = (int32_t)v;

    /* BOS/EOS per add_bos_token / add_eos_token (llama defaults to BOS on) */
    bool add_bos = is_llama, add_eos = false;
    lp_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos);
    lp_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &add_eos);
    int64_t bos = -1, eos = -1;
    lp_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &bos);
    lp_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &eos);
    if (st == LP_OK) {
        tok->post = calloc(3, sizeof *tok->post);
        if (!tok->post)
            st = nomem(name, err);
    }
    if (st == LP_OK) {
        if (add_bos && bos >= 0 && bos < (int64_t)n) {
            tok->post[tok->n_post].ids = malloc(sizeof(int32_t));
            if (!tok->post[tok->n_post].ids)
                st = nomem(name, err);
            else
                tok->post[tok->n_post].ids[0] = (int32_t)bos, tok->post[tok->n_post++].n_ids = 1;
        }
        tok->post[tok->n_post++].is_sequence = true;
        if (st == LP_OK && add_eos && eos >= 0 && eos < (int64_t)n) {
            tok->post[tok->n_post].ids = malloc(sizeof(int32_t));
            if (!tok->post[tok->n_post].ids)
                st = nomem(name, err);
            else
                tok->post[tok->n_post].ids[0] = (int32_t)eos, tok->post[tok->n_post++].n_ids = 1;
        }
        tok->has_template = tok->n_post > 1;
    }

    if (st == LP_OK && is_llama) {
        tok->model = LP_TOK_MODEL_BPE_SCORES;
        tok->byte_fallback = true;
        bool space_prefix = true;
        lp_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &space_prefix);
        static const char meta[] = "\xE2\x96\x81"; /* U+2581 */
        tok->norms = calloc(2, sizeof *tok->norms);
        if (!tok->norms) {
            st = nomem(name, err);
        } else {
            if (space_prefix) {
                lp_tok_norm *p = &tok->norms[tok->n_norms++];
                p->kind = LP_TOK_NORM_PREPEND;
                p->pattern = lp_tok_strndup(meta, 3);
                p->pattern_len = 3;
            }
            lp_tok_norm *r = &tok->norms[tok->n_norms++];
            r->kind = LP_TOK_NORM_REPLACE;
            r->pattern = lp_tok_strndup(" ", 1);
            r->pattern_len = 1;
            r->content = lp_tok_strndup(meta, 3);
            r->content_len = 3;
            if (!r->pattern || !r->content || (space_prefix && !tok->norms[0].pattern))
                st = nomem(name, err);
        }
        lp_tok_dec *d;
        if (st == LP_OK && (d = add_dec(tok, LP_TOK_DEC_REPLACE)) != NULL) {
            d->pattern = lp_tok_strndup(meta, 3);
            d->pattern_len = 3;
            d->content = lp_tok_strndup(" ", 1);
            d->content_len = 1;
            if (!d->pattern || !d->content)
                st = nomem(name, err);
        } else if (st == LP_OK) {
            st = nomem(name, err);
        }
        if (st == LP_OK && (!add_dec(tok, LP_TOK_DEC_BYTEFALLBACK) || !add_dec(tok, LP_TOK_DEC_FUSE)))
            st = nomem(name, err);
        if (st == LP_OK && space_prefix) {
            d = add_dec(tok, LP_TOK_DEC_STRIP);
            if (!d || !(d->content = lp_tok_strndup(" ", 1)))
                st = nomem(name, err);
            else
                d->content_len = 1, d->start = 1;
        }
        tok->kind = "bpe-sentencepiece";
    } else if (st == LP_OK) {
        tok->model = LP_TOK_MODEL_BPE_MERGES;
        const char *pre = "default";
        size_t pre_len = 7;
        lp_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pre_len);
        const pre_family *family = find_pre(pre, pre_len);
        if (!family)
            st = lp_error_set(err, LP_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%.*s' is not a "
                              "pre-tokenizer loupe knows (gpt2, llama3, qwen2, starcoder, "
                              "deepseek-coder, deepseek-v3, falcon families)", name,
                              (int)(pre_len > 40 ? 40 : pre_len), pre);
        size_t n_regexes = 0;
        while (family && n_regexes < MAX_PRE_REGEXES && family->regexes[n_regexes])
            n_regexes++;
        if (st == LP_OK && !(tok->pres = calloc(n_regexes + 1, sizeof *tok->pres)))
            st = nomem(name, err);
        for (size_t k = 0; st == LP_OK && k < n_regexes; k++) {
            lp_tok_pre *p = &tok->pres[tok->n_pres++];
            p->kind = LP_TOK_PRE_SPLIT;
            p->behavior = LP_TOK_SPLIT_ISOLATED;
            st = lp_tok_compile_regex(family->regexes[k], strlen(family->regexes[k]), &p->re, name,
                                  err);
        }
        if (st == LP_OK)
            tok->pres[tok->n_pres++].kind = LP_TOK_PRE_BYTELEVEL;
        if (st == LP_OK && !add_dec(tok, LP_TOK_DEC_BYTELEVEL))
            st = nomem(name, err);
        int64_t kv_merges = lp_gguf_find_key(g, "tokenizer.ggml.merges");
        uint64_t n_merges = kv_merges >= 0 ? lp_gguf_arr_len(g, kv_merges) : 0;
        if (st == LP_OK && n_merges > INT32_MAX)
            st = lp_error_set(err, LP_ERR_FORMAT, "%s: tokenizer.ggml.merges: %llu merges",
                              name, (unsigned long long)n_merges);
        if (st == LP_OK)
            st = lp_tok_merges_init(tok, (size_t)n_merges, err);
        lp_tok_buf joined = {0};
        for (uint64_t i = 0; i < n_merges && st == LP_OK; i++) {
            const char *s;
            size_t len;
            const char *sp = NULL;
            /* from the second byte, as llama.cpp does: a first piece may be a bare space */
            if (lp_gguf_arr_str(g, kv_merges, i, &s, &len) && len > 1)
                sp = memchr(s + 1, ' ', len - 1);
            if (!sp) {
                st = lp_error_set(err, LP_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu]: not "
                                  "\"a b\"", name, (unsigned long long)i);
                break;
            }
            size_t a_len = (size_t)(sp - s);
            int32_t left = lp_tok_vocab_find(tok, s, a_len);
            int32_t right = lp_tok_vocab_find(tok, sp + 1, len - a_len - 1);
            joined.len = 0;
            lp_tok_buf_put(&joined, s, a_len);
            lp_tok_buf_put(&joined, sp + 1, len - a_len - 1);
            if (joined.failed) {
                st = nomem(name, err);
                break;
            }
            int32_t merged = lp_tok_vocab_find(tok, joined.data, joined.len);
            if (left < 0 || right < 0 || merged < 0) {
                st = lp_error_set(err, LP_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu]: "
                                  "'%.*s' is not in the vocabulary", name,
                                  (unsigned long long)i, (int)(len > 80 ? 80 : len), s);
                break;
            }
            lp_tok_merges_add(tok, left, right, (int32_t)i, merged);
        }
        lp_tok_buf_free(&joined);
        tok->kind = "bpe-bytelevel";
    }
    if (st == LP_OK)
        st = lp_tok_prepare_added(tok, err);
    if (st != LP_OK) {
        lp_tokenizer_close(tok);
        return st;
    }
    *out = tok;
    return LP_OK;
}

lp_status lp_tok_load_gguf_path(const char *path, lp_tokenizer **out, lp_error *err)
{
    lp_gguf *g;
    lp_status st = lp_gguf_open(path, &g, err);
    if (st != LP_OK)
        return st;
    st = lp_tokenizer_from_gguf(g, out, err);
    lp_gguf_close(g);
    return st;
}
