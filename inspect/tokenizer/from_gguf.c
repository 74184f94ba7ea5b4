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
 * the pieces of the previous one, keeping matches and gaps), exactly as llama.cpp's
 * llama-vocab.cpp lists them per pre-tokenizer type, with the names its loader maps to each
 * type. ignore_merges: a pre-token that is a whole vocabulary string is taken as it is (the
 * families llama.cpp loads with ignore_merges = true, as their tokenizer.json says). */
#define MAX_PRE_REGEXES 6
typedef struct pre_family {
    const char *names; /* space-separated tokenizer.ggml.pre values */
    bool ignore_merges;
    const char *regexes[MAX_PRE_REGEXES];
} pre_family;

/* llama.cpp writes the contractions of the Hugging Face (?i:...) groups out by case */
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3 RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_BLOOM " ?[^(\\s|.,!?\xE2\x80\xA6\xE3\x80\x82\xEF\xBC\x8C\xE3\x80\x81\xE0\xA5\xA4\xDB\x94\xD8\x8C)]+"
#define RE_DEEPSEEK3 "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?" \
    "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* "uppercase-ish" runs: a letter not in a-z (tekken, gpt-4o) */
#define RE_UPPER "((?=[\\p{L}])([^a-z]))"
#define RE_LOWER "((?=[\\p{L}])([^A-Z]))"
#define RE_CJK_KANA "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+"
#define RE_CJK_HANGUL "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

static const pre_family pre_families[] = {
    {" default ", false, {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    {" llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano ", true,
     {RE_LLAMA3}},
    {" dbrx smaug-bpe glm4 chatglm-bpe ", false, {RE_LLAMA3}},
    {" jais-2 ", false,
     {RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|"
      "\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}"}},
    {" deepseek-llm ", false,
     {"[\\r\\n]",
      /* the Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, ... letter ranges of
       * DeepSeek LLM's tokenizer.json, as llama.cpp copies them */
      "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
      "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
      "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
      "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
      "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"
      "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
      "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"
      "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
      "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"
      "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"
      "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}"
      "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
      "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"
      "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"
      "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
      "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"
      "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
      "\\x{1E900}-\\x{1E943}]+",
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
      /* std::regex's "$" is the end of the piece only; PCRE2's would also match before a
       * final newline */
      "\\s+\\z", RE_CJK_HANGUL, "\\p{N}+"}},
    {" deepseek-v3 hunyuan-dense joyai-llm hy_v4 ", false, {"\\p{N}{1,3}", RE_CJK_KANA, RE_DEEPSEEK3}},
    {" spark2_5 ", false,
     {"\\p{N}{1,3}", RE_CJK_KANA,
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"
      "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\\r\\n]|\\s+(?!\\S)|\\s+", "\\p{N}"}},
    {" youtu ", true,
     {"[\\x{AC00}-\\x{D7A3}\\x{3131}-\\x{318E}]+|[\\x{FF01}\\x{2026}\\x{201C}\\x{201D}\\x{2018}"
      "\\x{2019}\\x{2014}\\x{FF1A}\\x{FF1B}\\x{FF0C}\\x{3001}-\\x{303F}\\x{FE30}-\\x{FE4F}]+|"
      "[\\x{3105}-\\x{312F}]+|" RE_CJK_KANA,
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:"
      RE_CONTRACTIONS ")?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}"
      "\\p{Lo}\\p{M}]*(?:" RE_CONTRACTIONS ")?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
      "\\s+(?!\\S)|\\s+"}},
    {" deepseek-coder ", false,
     {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK_HANGUL, "\\p{N}"}},
    {" falcon ", false, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}},
    {" starcoder refact command-r smollm codeshell exaone minerva-7b mellum2 ", false,
     {"\\p{N}", RE_GPT2}},
    {" gpt-2 gpt2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert "
     "jina-v1-en jina-v2-code roberta-bpe exaone4 mpt olmo jais trillion granite-docling ", false,
     {RE_GPT2}},
    {" qwen2 deepseek-r1-qwen kormo f2llmv2 stablelm2 megrez hunyuan solar-open ", false,
     {RE_QWEN2}},
    {" qwen35 ", false,
     {RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
      "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {" poro-chat bloom gpt3-finnish ", false, {RE_BLOOM}},
    {" viking ", false, {RE_BLOOM, "\\p{N}"}},
    {" tekken ", true,
     {"[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER
      "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {" chameleon ", false,
     {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
      "[\\p{P}!-/:-@\\[-`{-~]", RE_GPT2}},
    {" gpt-4o llama4 kanana2 talkie minimax-m2 ", false,
     {"[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+(?:" RE_CONTRACTIONS ")?|[^\\r\\n\\p{L}\\p{N}]?"
      RE_UPPER "+" RE_LOWER "*(?:" RE_CONTRACTIONS ")?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {" granite-embed-multi-97m ", true,
     {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:"
      RE_CONTRACTIONS ")?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])"
      "([^A-Z]))*(?:" RE_CONTRACTIONS ")?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
      "\\s+(?!\\S)|\\s+"}},
    {" tiny_aya cohere2moe ", false,
     {"\\d{1,3}(?=(?:\\d{3})*\\b)",
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:"
      RE_CONTRACTIONS ")?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}"
      "\\p{Lo}\\p{M}]*(?:" RE_CONTRACTIONS ")?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {" bailingmoe bailingmoe2 llada-moe ", false,
     {"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}"
      "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}},
    {" seed-coder ", false,
     {RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    {" ufakzeka ", false,
     {"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
      "\\s+(?!\\S)|\\s+"}},
    {" grok-2 ", false, {RE_QWEN2}},
    {" laguna ", false, {"[^\\n]+|[\\n]+", RE_QWEN2}},
    {" exaone-moe ", false,
     {RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s"
      "\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}},
    {" minicpm5 ", true,
     {"\\p{N}{1,3}", RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+"
      "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
};

/* Names llama.cpp knows whose splitting is not a regex sequence loupe can run: custom C++
 * code (kimi-k2's Han rules, afmoe's digit grouping), a zero-width split (superbpe), or BPE
 * on raw UTF-8 instead of bytes (gemma4, sarvam-moe, whitespace). */
static const char refused_pres[] =
    " kimi-k2 afmoe superbpe gemma4 granite-embed-multi-311m sarvam-moe whitespace ";

/* " name " in a space-separated list of names. */
static bool name_listed(const char *list, const char *name, size_t len)
{
    char key[80];
    if (len == 0 || len + 3 > sizeof key || memchr(name, ' ', len) || memchr(name, 0, len))
        return false;
    snprintf(key, sizeof key, " %.*s ", (int)len, name);
    return strstr(list, key) != NULL;
}

static const pre_family *find_pre(const char *pre, size_t len)
{
    for (size_t k = 0; k < sizeof pre_families / sizeof pre_families[0]; k++)
        if (name_listed(pre_families[k].names, pre, len))
            return &pre_families[k];
    return NULL;
}

/* What the loader keeps looking at: the file and its vocabulary arrays. */
typedef struct gguf_vocab {
    const lp_gguf *g;
    const char *name; /* file name for messages */
    lp_error *err;
    bool is_llama;    /* tokenizer.ggml.model "llama" */
    bool is_bert;     /* "bert" */
    bool is_t5;       /* "t5" (else "gpt2") */
    int64_t kv_tokens, kv_scores, kv_types; /* -1 when absent */
    uint64_t n;       /* tokens */
} gguf_vocab;

/* The model kind and the token arrays: present, of one length, the scores a llama vocabulary
 * needs. */
static lp_status check_vocab(gguf_vocab *v)
{
    const lp_gguf *g = v->g;
    const char *model;
    size_t model_len;
    if (!lp_gguf_get_str(g, "tokenizer.ggml.model", &model, &model_len))
        return lp_error_set(v->err, LP_ERR_NOT_FOUND, "%s: no tokenizer.ggml.model: the file has "
                            "no vocabulary", v->name);
    v->is_llama = model_len == 5 && memcmp(model, "llama", 5) == 0;
    v->is_bert = model_len == 4 && memcmp(model, "bert", 4) == 0;
    v->is_t5 = model_len == 2 && memcmp(model, "t5", 2) == 0;
    if (!v->is_llama && !v->is_bert && !v->is_t5 &&
        !(model_len == 4 && memcmp(model, "gpt2", 4) == 0))
        return lp_error_set(v->err, LP_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not "
                            "supported (llama, gpt2, bert, t5 are)", v->name,
                            (int)(model_len > 40 ? 40 : model_len), model);
    v->kv_tokens = lp_gguf_find_key(g, "tokenizer.ggml.tokens");
    if (v->kv_tokens < 0 || lp_gguf_kv_type(g, v->kv_tokens) != LP_GGUF_ARRAY ||
        lp_gguf_arr_type(g, v->kv_tokens) != LP_GGUF_STRING ||
        lp_gguf_arr_len(g, v->kv_tokens) == 0)
        return lp_error_set(v->err, LP_ERR_FORMAT, "%s: tokenizer.ggml.tokens: a non-empty string "
                            "array expected", v->name);
    v->n = lp_gguf_arr_len(g, v->kv_tokens);
    if (v->n > INT32_MAX)
        return lp_error_set(v->err, LP_ERR_FORMAT, "%s: tokenizer.ggml.tokens: %llu tokens, more "
                            "than %d", v->name, (unsigned long long)v->n, INT32_MAX);
    v->kv_scores = lp_gguf_find_key(g, "tokenizer.ggml.scores");
    v->kv_types = lp_gguf_find_key(g, "tokenizer.ggml.token_type");
    static const char *const arrays[2] = {"scores", "token_type"};
    const int64_t kvs[2] = {v->kv_scores, v->kv_types};
    for (int k = 0; k < 2; k++)
        if (kvs[k] >= 0 && lp_gguf_arr_len(g, kvs[k]) != v->n)
            return lp_error_set(v->err, LP_ERR_FORMAT, "%s: tokenizer.ggml.%s has %llu entries, "
                                "tokens %llu", v->name, arrays[k],
                                (unsigned long long)lp_gguf_arr_len(g, kvs[k]),
                                (unsigned long long)v->n);
    if ((v->is_llama || v->is_t5) && v->kv_scores < 0)
        return lp_error_set(v->err, LP_ERR_FORMAT, "%s: tokenizer.ggml.scores missing for a "
                            "%s vocabulary", v->name, v->is_t5 ? "t5" : "llama");
    return LP_OK;
}

/* Token i: its piece, score and type (control, user-defined and unknown tokens are matched in
 * text like Hugging Face's added tokens, as llama.cpp matches them with special parsing on). */
static lp_status read_token(const gguf_vocab *v, lp_tokenizer *tok, uint64_t i)
{
    const char *s;
    size_t len;
    if (!lp_gguf_arr_str(v->g, v->kv_tokens, i, &s, &len))
        return lp_error_set(v->err, LP_ERR_FORMAT, "%s: tokenizer.ggml.tokens[%llu] unreadable",
                            v->name, (unsigned long long)i);
    lp_status st = lp_tok_set_piece(tok, (int32_t)i, s, len, v->err);
    if (st != LP_OK)
        return st;
    int64_t type = GGUF_TOKEN_NORMAL;
    if (v->kv_types >= 0)
        lp_gguf_arr_int(v->g, v->kv_types, i, &type);
    if (tok->scores) {
        double score = 0;
        lp_gguf_arr_float(v->g, v->kv_scores, i, &score);
        tok->scores[i] = (float)score;
    }
    if (type == GGUF_TOKEN_CONTROL || type == GGUF_TOKEN_UNKNOWN)
        tok->flags[i] |= LP_TOK_FLAG_SPECIAL | LP_TOK_FLAG_CONTROL;
    if (type == GGUF_TOKEN_USER_DEFINED)
        tok->flags[i] |= LP_TOK_FLAG_TEXT;
    if (type == GGUF_TOKEN_CONTROL || type == GGUF_TOKEN_USER_DEFINED ||
        type == GGUF_TOKEN_UNKNOWN) {
        lp_tok_added *a = lp_tok_append((void **)&tok->added, &tok->n_added, sizeof *a);
        if (!a || !(a->content = lp_tok_strndup(s, len)))
            return nomem(v->name, v->err);
        a->len = len;
        a->id = (int32_t)i;
        a->special = type != GGUF_TOKEN_USER_DEFINED;
    }
    if (type == GGUF_TOKEN_UNKNOWN && tok->unk_id < 0)
        tok->unk_id = (int32_t)i;
    return LP_OK;
}

/* s[0, len) lowercased holds one of the space-separated words of list (llama.cpp's
 * _contains_any over general.name and the like). */
static bool contains_any(const char *s, size_t len, const char *list)
{
    char low[256];
    if (len >= sizeof low)
        len = sizeof low - 1;
    for (size_t k = 0; k < len; k++)
        low[k] = s[k] >= 'A' && s[k] <= 'Z' ? (char)(s[k] - 'A' + 'a') : s[k];
    low[len] = '\0';
    for (const char *w = list; *w;) {
        size_t n = strcspn(w, " ");
        char word[64];
        snprintf(word, sizeof word, "%.*s", (int)n, w);
        if (n && strstr(low, word))
            return true;
        w += n + (w[n] == ' ');
    }
    return false;
}

static bool added_is(const lp_tok_added *a, const char *text)
{
    return a->len == strlen(text) && memcmp(a->content, text, a->len) == 0;
}

/* The lstrip/rstrip a GGUF cannot store, set as llama.cpp sets them by name (its tokenizer.json
 * says so: Jina's <mask> takes the spaces before it; Phi-3's special tokens and </s> the spaces
 * after them, except <unk>, <s>, <|endoftext|>). */
static void set_strip_by_name(const gguf_vocab *v, lp_tokenizer *tok)
{
    const char *pre = "", *arch = "", *name = "";
    size_t pre_len = 0, arch_len = 0, name_len = 0;
    lp_gguf_get_str(v->g, "tokenizer.ggml.pre", &pre, &pre_len);
    lp_gguf_get_str(v->g, "general.architecture", &arch, &arch_len);
    lp_gguf_get_str(v->g, "general.name", &name, &name_len);
    bool jina = contains_any(pre, pre_len, "jina-v2-de jina-v2-es jina-v2-code") ||
                contains_any(arch, arch_len, "nomic-bert-moe jina-bert-v3");
    bool phi3 = !jina && contains_any(name, name_len, "phi-3 phi3");
    for (size_t k = 0; k < tok->n_added; k++) {
        lp_tok_added *a = &tok->added[k];
        if (jina && added_is(a, "<mask>"))
            a->lstrip = true;
        if (phi3)
            a->rstrip = !added_is(a, "<unk>") && !added_is(a, "<s>") &&
                        !added_is(a, "<|endoftext|>");
    }
}

static lp_status read_tokens(const gguf_vocab *v, lp_tokenizer *tok)
{
    lp_status st = lp_tok_alloc_vocab(tok, (int64_t)v->n, v->err);
    if (st == LP_OK && (v->is_llama || v->is_t5) &&
        !(tok->scores = calloc((size_t)v->n, sizeof *tok->scores)))
        st = nomem(v->name, v->err);
    for (uint64_t i = 0; i < v->n && st == LP_OK; i++)
        st = read_token(v, tok, i);
    if (st == LP_OK)
        st = lp_tok_build_vocab_map(tok, v->err);
    int64_t id;
    if (st == LP_OK && lp_gguf_get_int(v->g, "tokenizer.ggml.unknown_token_id", &id) && id >= 0 &&
        id < (int64_t)v->n)
        tok->unk_id = (int32_t)id;
    if (st == LP_OK)
        set_strip_by_name(v, tok);
    return st;
}

/* One post-processor item: the special token id alone. */
static lp_status push_special(lp_tokenizer *tok, int32_t id, const char *name, lp_error *err)
{
    lp_tok_post_item *item = &tok->post[tok->n_post];
    if (!(item->ids = malloc(sizeof *item->ids)))
        return nomem(name, err);
    item->ids[0] = id;
    item->n_ids = 1;
    tok->n_post++;
    return LP_OK;
}

/* BOS / EOS around the text per add_bos_token / add_eos_token (llama defaults to BOS on); bert
 * puts [CLS] (cls_token_id as llama.cpp's converter writes it, else bos_token_id, default id
 * 101) before and [SEP] (seperator_token_id, as llama.cpp spells the key, default 102) after,
 * per add_sep_token (default on), as llama.cpp loads it. */
static lp_status read_post(const gguf_vocab *v, lp_tokenizer *tok)
{
    bool add_bos = v->is_llama || v->is_bert, add_eos = v->is_bert || v->is_t5;
    int64_t bos = v->is_bert ? 101 : -1, eos = v->is_bert ? 102 : v->is_t5 ? 1 : -1;
    int64_t n = (int64_t)v->n;
    lp_gguf_get_bool(v->g, "tokenizer.ggml.add_bos_token", &add_bos);
    lp_gguf_get_bool(v->g, v->is_bert ? "tokenizer.ggml.add_sep_token"
                                      : "tokenizer.ggml.add_eos_token", &add_eos);
    lp_gguf_get_int(v->g, "tokenizer.ggml.bos_token_id", &bos);
    if (v->is_bert)
        lp_gguf_get_int(v->g, "tokenizer.ggml.cls_token_id", &bos);
    lp_gguf_get_int(v->g, v->is_bert ? "tokenizer.ggml.seperator_token_id"
                                     : "tokenizer.ggml.eos_token_id", &eos);
    if (!(tok->post = calloc(3, sizeof *tok->post)))
        return nomem(v->name, v->err);
    lp_status st = LP_OK;
    if (add_bos && bos >= 0 && bos < n)
        st = push_special(tok, (int32_t)bos, v->name, v->err);
    if (st == LP_OK)
        tok->post[tok->n_post++].is_sequence = true;
    if (st == LP_OK && add_eos && eos >= 0 && eos < n)
        st = push_special(tok, (int32_t)eos, v->name, v->err);
    tok->has_template = tok->n_post > 1;
    return st;
}

/* A normalizer or decoder step's strings (NULL for none); false when out of memory. */
static bool set_strings(char **pattern, size_t *pattern_len, const char *p, char **content,
                        size_t *content_len, const char *c)
{
    if (p && !(*pattern = lp_tok_strndup(p, strlen(p))))
        return false;
    if (p)
        *pattern_len = strlen(p);
    if (c && !(*content = lp_tok_strndup(c, strlen(c))))
        return false;
    if (c)
        *content_len = strlen(c);
    return true;
}

/* "llama": SentencePiece BPE by scores with byte fallback; spaces become U+2581, with a
 * leading one unless add_space_prefix is false, and the decoders undo it. */
static lp_status setup_sentencepiece(const gguf_vocab *v, lp_tokenizer *tok)
{
    static const char meta[] = "\xE2\x96\x81"; /* U+2581 */
    tok->model = LP_TOK_MODEL_BPE_SCORES;
    tok->byte_fallback = true;
    tok->kind = "bpe-sentencepiece";
    bool space_prefix = true;
    lp_gguf_get_bool(v->g, "tokenizer.ggml.add_space_prefix", &space_prefix);
    if (!(tok->norms = calloc(2, sizeof *tok->norms)))
        return nomem(v->name, v->err);
    bool ok = true;
    if (space_prefix) {
        lp_tok_norm *p = &tok->norms[tok->n_norms++];
        p->kind = LP_TOK_NORM_PREPEND;
        ok = set_strings(&p->pattern, &p->pattern_len, meta, NULL, NULL, NULL);
    }
    lp_tok_norm *r = &tok->norms[tok->n_norms++];
    r->kind = LP_TOK_NORM_REPLACE;
    ok = ok && set_strings(&r->pattern, &r->pattern_len, " ", &r->content, &r->content_len, meta);
    lp_tok_dec *d = ok ? add_dec(tok, LP_TOK_DEC_REPLACE) : NULL;
    ok = d && set_strings(&d->pattern, &d->pattern_len, meta, &d->content, &d->content_len, " ");
    ok = ok && add_dec(tok, LP_TOK_DEC_BYTEFALLBACK) && add_dec(tok, LP_TOK_DEC_FUSE);
    if (ok && space_prefix) {
        d = add_dec(tok, LP_TOK_DEC_STRIP);
        ok = d && set_strings(&d->pattern, &d->pattern_len, NULL, &d->content, &d->content_len,
                              " ");
        if (ok)
            d->start = 1;
    }
    return ok ? LP_OK : nomem(v->name, v->err);
}

/* tokenizer.ggml.merges: "left right" pieces, ranked by position. */
static lp_status read_merges(const gguf_vocab *v, lp_tokenizer *tok)
{
    int64_t kv = lp_gguf_find_key(v->g, "tokenizer.ggml.merges");
    uint64_t n = kv >= 0 ? lp_gguf_arr_len(v->g, kv) : 0;
    if (n > INT32_MAX)
        return lp_error_set(v->err, LP_ERR_FORMAT, "%s: tokenizer.ggml.merges: %llu merges",
                            v->name, (unsigned long long)n);
    lp_status st = lp_tok_merges_init(tok, (size_t)n, v->err);
    lp_bytes joined = {0};
    for (uint64_t i = 0; i < n && st == LP_OK; i++) {
        const char *s, *sp = NULL;
        size_t len;
        /* from the second byte, as llama.cpp does: a first piece may be a bare space */
        if (lp_gguf_arr_str(v->g, kv, i, &s, &len) && len > 1)
            sp = memchr(s + 1, ' ', len - 1);
        if (!sp) {
            st = lp_error_set(v->err, LP_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu]: not "
                              "\"a b\"", v->name, (unsigned long long)i);
            break;
        }
        size_t a_len = (size_t)(sp - s), b_len = len - a_len - 1;
        joined.len = 0;
        lp_bytes_append(&joined, s, a_len);
        lp_bytes_append(&joined, sp + 1, b_len);
        if (joined.failed) {
            st = nomem(v->name, v->err);
            break;
        }
        int32_t left = lp_tok_vocab_find(tok, s, a_len);
        int32_t right = lp_tok_vocab_find(tok, sp + 1, b_len);
        int32_t merged = lp_tok_vocab_find(tok, joined.data, joined.len);
        if (left < 0 || right < 0 || merged < 0)
            st = lp_error_set(v->err, LP_ERR_FORMAT, "%s: tokenizer.ggml.merges[%llu]: "
                              "'%.*s' is not in the vocabulary", v->name,
                              (unsigned long long)i, (int)(len > 80 ? 80 : len), s);
        else
            lp_tok_merges_add(tok, left, right, (int32_t)i, merged);
    }
    lp_bytes_free(&joined);
    return st;
}

/* "gpt2": byte-level BPE by merge rank, after the regexes tokenizer.ggml.pre names. */
static lp_status setup_bytelevel(const gguf_vocab *v, lp_tokenizer *tok)
{
    tok->model = LP_TOK_MODEL_BPE_MERGES;
    tok->kind = "bpe-bytelevel";
    const char *pre = "default";
    size_t pre_len = 7;
    lp_gguf_get_str(v->g, "tokenizer.ggml.pre", &pre, &pre_len);
    const pre_family *family = find_pre(pre, pre_len);
    if (!family && name_listed(refused_pres, pre, pre_len))
        return lp_error_set(v->err, LP_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%.*s' is not "
                            "supported (llama.cpp splits it with code of its own, not a regex "
                            "sequence)", v->name, (int)pre_len, pre);
    if (!family)
        return lp_error_set(v->err, LP_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%.*s' is not a "
                            "pre-tokenizer llama.cpp lists", v->name,
                            (int)(pre_len > 40 ? 40 : pre_len), pre);
    tok->ignore_merges = family->ignore_merges;
    size_t n_regexes = 0;
    while (n_regexes < MAX_PRE_REGEXES && family->regexes[n_regexes])
        n_regexes++;
    if (!(tok->pres = calloc(n_regexes + 1, sizeof *tok->pres)))
        return nomem(v->name, v->err);
    lp_status st = LP_OK;
    for (size_t k = 0; st == LP_OK && k < n_regexes; k++) {
        lp_tok_pre *p = &tok->pres[tok->n_pres++];
        p->kind = LP_TOK_PRE_SPLIT;
        p->behavior = LP_TOK_SPLIT_ISOLATED;
        st = lp_tok_compile_regex(family->regexes[k], strlen(family->regexes[k]), &p->re,
                                  v->name, v->err);
    }
    if (st != LP_OK)
        return st;
    tok->pres[tok->n_pres++].kind = LP_TOK_PRE_BYTELEVEL;
    if (!add_dec(tok, LP_TOK_DEC_BYTELEVEL))
        return nomem(v->name, v->err);
    return read_merges(v, tok);
}

/* A Replace of every match of regex by content. */
static lp_status add_regex_norm(const gguf_vocab *v, lp_tokenizer *tok, const char *regex,
                                const char *content)
{
    lp_tok_norm *norm = lp_tok_append((void **)&tok->norms, &tok->n_norms, sizeof *norm);
    if (!norm || !set_strings(&norm->pattern, &norm->pattern_len, NULL, &norm->content,
                              &norm->content_len, content))
        return nomem(v->name, v->err);
    norm->kind = LP_TOK_NORM_REPLACE;
    return lp_tok_compile_regex(regex, strlen(regex), &norm->re, v->name, v->err);
}

static lp_status add_split_pre(const gguf_vocab *v, lp_tokenizer *tok, lp_tok_pre_kind kind,
                               const char *regex, lp_tok_split_behavior behavior)
{
    lp_tok_pre *p = lp_tok_append((void **)&tok->pres, &tok->n_pres, sizeof *p);
    if (!p)
        return nomem(v->name, v->err);
    p->kind = kind;
    p->behavior = behavior;
    return lp_tok_compile_regex(regex, strlen(regex), &p->re, v->name, v->err);
}

/* "bert": llama.cpp's WPM. Its preprocess is BERT's basic tokenizer: NFD, NUL, U+FFFD and
 * control characters dropped, accents (Mn) dropped, lowercase, split at whitespace, each
 * punctuation character, ASCII symbol and CJK ideograph a word of its own. Then per word
 * "\u2581" + word, greedy longest vocabulary string from each position (the converter wrote
 * word-initial pieces with U+2581 and continuations without their "##"); a word with a position
 * no string starts is the unknown token (default id 100) alone. No length limit per word. */
static lp_status setup_wordpiece(const gguf_vocab *v, lp_tokenizer *tok)
{
    static const char meta[] = "\xE2\x96\x81"; /* U+2581 */
    tok->model = LP_TOK_MODEL_WORDPIECE;
    tok->kind = "wordpiece";
    tok->max_input_chars = INT64_MAX;
    if (tok->unk_id < 0 && v->n > 100)
        tok->unk_id = 100;
    if (tok->unk_id < 0)
        return lp_error_set(v->err, LP_ERR_FORMAT, "%s: a bert vocabulary needs an unknown "
                            "token (tokenizer.ggml.unknown_token_id or token type 2)", v->name);
    if (!set_strings(&tok->word_prefix, &tok->word_prefix_len, meta, &tok->cont_prefix,
                     &tok->cont_prefix_len, ""))
        return nomem(v->name, v->err);
    lp_status st;
    if ((st = add_regex_norm(v, tok, "(?![\\t\\n\\r])[\\x{FFFD}\\p{C}]", "")) != LP_OK ||
        (st = add_regex_norm(v, tok, "\\s", " ")) != LP_OK)
        return st;
    lp_tok_norm *n = lp_tok_append((void **)&tok->norms, &tok->n_norms, sizeof *n);
    if (!n)
        return nomem(v->name, v->err);
    n->kind = LP_TOK_NORM_CJK_SPACES;
    if (!(n = lp_tok_append((void **)&tok->norms, &tok->n_norms, sizeof *n)))
        return nomem(v->name, v->err);
    n->kind = LP_TOK_NORM_NFD;
    if ((st = add_regex_norm(v, tok, "\\p{Mn}", "")) != LP_OK)
        return st;
    if (!(n = lp_tok_append((void **)&tok->norms, &tok->n_norms, sizeof *n)))
        return nomem(v->name, v->err);
    n->kind = LP_TOK_NORM_LOWERCASE;
    if ((st = add_split_pre(v, tok, LP_TOK_PRE_WHITESPACE_SPLIT, "\\s+",
                            LP_TOK_SPLIT_REMOVED)) != LP_OK ||
        (st = add_split_pre(v, tok, LP_TOK_PRE_PUNCTUATION, "[\\p{P}!-/:-@\\[-`{-~]",
                            LP_TOK_SPLIT_ISOLATED)) != LP_OK)
        return st;
    /* "\u2581" is a space, but not before the first word (no clean-up of " ," as llama.cpp's
     * clean_spaces does, the same as for tokenizer.json) */
    lp_tok_dec *d = add_dec(tok, LP_TOK_DEC_METASPACE);
    bool ok = d && set_strings(&d->pattern, &d->pattern_len, meta, NULL, NULL, NULL);
    if (ok)
        d->prepend_scheme = LP_TOK_PREPEND_FIRST;
    return ok ? LP_OK : nomem(v->name, v->err);
}

/* "t5": llama.cpp's UGM. The text (each stretch between special tokens) goes through the
 * precompiled charsmap, spaces become U+2581 (one before the text unless add_space_prefix is
 * false; with remove_extra_whitespaces, runs of spaces are one and the ends lose theirs), then
 * one Viterbi over the whole of it: normal, user-defined (score 0) and unused tokens, the
 * unknown token (default id 2) at the lowest normal score minus 10; EOS (default 1) after. */
static lp_status setup_unigram(const gguf_vocab *v, lp_tokenizer *tok)
{
    static const char meta[] = "\xE2\x96\x81"; /* U+2581 */
    tok->model = LP_TOK_MODEL_UNIGRAM;
    tok->kind = "unigram";
    if (tok->unk_id < 0 && v->n > 2)
        tok->unk_id = 2;
    if (tok->unk_id < 0)
        return lp_error_set(v->err, LP_ERR_FORMAT, "%s: a t5 vocabulary needs an unknown token "
                            "(tokenizer.ggml.unknown_token_id or token type 2)", v->name);
    if (!(tok->unigram_scores = calloc((size_t)v->n, sizeof *tok->unigram_scores)))
        return nomem(v->name, v->err);
    double min_score = 0;
    bool any = false;
    for (uint64_t i = 0; i < v->n; i++) {
        int64_t type = GGUF_TOKEN_NORMAL;
        if (v->kv_types >= 0)
            lp_gguf_arr_int(v->g, v->kv_types, i, &type);
        tok->unigram_scores[i] = type == GGUF_TOKEN_USER_DEFINED ? 0.0 : (double)tok->scores[i];
        if (type == GGUF_TOKEN_NORMAL && (!any || (double)tok->scores[i] < min_score)) {
            min_score = (double)tok->scores[i];
            any = true;
        }
        if (tok->piece_len[i] > tok->max_piece_len)
            tok->max_piece_len = tok->piece_len[i];
    }
    tok->unk_score = min_score - 10.0;
    int64_t kv = lp_gguf_find_key(v->g, "tokenizer.ggml.precompiled_charsmap");
    if (kv >= 0) {
        uint64_t len = lp_gguf_arr_len(v->g, kv);
        lp_gguf_type type = lp_gguf_arr_type(v->g, kv);
        if (lp_gguf_kv_type(v->g, kv) != LP_GGUF_ARRAY ||
            (type != LP_GGUF_UINT8 && type != LP_GGUF_INT8))
            return lp_error_set(v->err, LP_ERR_FORMAT, "%s: tokenizer.ggml.precompiled_charsmap: "
                                "a byte array expected", v->name);
        lp_tok_norm *n = lp_tok_append((void **)&tok->norms, &tok->n_norms, sizeof *n);
        if (!n || !(n->pattern = malloc(len ? len : 1)))
            return nomem(v->name, v->err);
        n->kind = LP_TOK_NORM_PRECOMPILED;
        n->pattern_len = len;
        for (uint64_t i = 0; i < len; i++) {
            int64_t b = 0;
            lp_gguf_arr_int(v->g, kv, i, &b);
            n->pattern[i] = (char)(unsigned char)b;
        }
        if (!lp_tok_charsmap_fits(n->pattern, len))
            return lp_error_set(v->err, LP_ERR_FORMAT, "%s: tokenizer.ggml.precompiled_charsmap: "
                                "%llu bytes cannot hold the trie their first 4 bytes announce "
                                "and the strings after it", v->name, (unsigned long long)len);
    }
    bool space_prefix = true, merge_spaces = false;
    lp_gguf_get_bool(v->g, "tokenizer.ggml.add_space_prefix", &space_prefix);
    lp_gguf_get_bool(v->g, "tokenizer.ggml.remove_extra_whitespaces", &merge_spaces);
    lp_status st;
    if (merge_spaces && ((st = add_regex_norm(v, tok, "^ +| +$", "")) != LP_OK ||
                         (st = add_regex_norm(v, tok, " +", " ")) != LP_OK))
        return st;
    if (space_prefix || merge_spaces) {
        /* merged spaces put one U+2581 before every word, the first too */
        lp_tok_norm *p = lp_tok_append((void **)&tok->norms, &tok->n_norms, sizeof *p);
        if (!p || !set_strings(&p->pattern, &p->pattern_len, meta, NULL, NULL, NULL))
            return nomem(v->name, v->err);
        p->kind = LP_TOK_NORM_PREPEND;
    }
    if ((st = add_regex_norm(v, tok, " ", meta)) != LP_OK)
        return st;
    lp_tok_dec *d = add_dec(tok, LP_TOK_DEC_METASPACE);
    if (!d || !set_strings(&d->pattern, &d->pattern_len, meta, NULL, NULL, NULL))
        return nomem(v->name, v->err);
    d->prepend_scheme = space_prefix ? LP_TOK_PREPEND_FIRST : LP_TOK_PREPEND_NEVER;
    return LP_OK;
}

lp_status lp_tokenizer_from_gguf(const struct lp_gguf *g, lp_tokenizer **out, lp_error *err)
{
    LP_ASSERT(g && out);
    *out = NULL;
    const char *path = lp_gguf_path(g) ? lp_gguf_path(g) : "gguf";
    gguf_vocab v = {.g = g, .name = lp_path_basename(path), .err = err};
    lp_status st = check_vocab(&v);
    if (st != LP_OK)
        return st;
    lp_tokenizer *tok = lp_tok_new(path, v.is_llama  ? "gguf-llama"
                                         : v.is_bert ? "gguf-bert"
                                         : v.is_t5   ? "gguf-t5"
                                                     : "gguf-gpt2");
    if (!tok)
        return nomem(v.name, err);
    if ((st = read_tokens(&v, tok)) == LP_OK && (st = read_post(&v, tok)) == LP_OK)
        st = v.is_llama  ? setup_sentencepiece(&v, tok)
             : v.is_bert ? setup_wordpiece(&v, tok)
             : v.is_t5   ? setup_unigram(&v, tok)
                         : setup_bytelevel(&v, tok);
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
