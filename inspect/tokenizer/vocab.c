/* The tokenizer handle: construction (what every loader calls), the vocabulary and its string
 * -> id map, the merge table, accessors and close; plus the small growable arrays the pipeline
 * shares. */
#include "inspect/tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/mapfile.h"

/* ---- growable buffers ------------------------------------------------------------------------ */

bool lp_tok_reserve(void **items, size_t *cap, size_t elem_size, size_t first)
{
    size_t new_cap = *cap ? *cap * 2 : first;
    if (new_cap < *cap || new_cap > SIZE_MAX / elem_size)
        return false;
    void *grown = realloc(*items, new_cap * elem_size);
    if (!grown)
        return false;
    *items = grown;
    *cap = new_cap;
    return true;
}

void *lp_tok_append(void **items, size_t *n, size_t elem_size)
{
    void *p = realloc(*items, (*n + 1) * elem_size);
    if (!p)
        return NULL;
    *items = p;
    void *slot = (char *)p + *n * elem_size;
    memset(slot, 0, elem_size);
    (*n)++;
    return slot;
}

char *lp_tok_strndup(const char *s, size_t len)
{
    char *copy = malloc(len + 1);
    if (!copy)
        return NULL;
    if (len)
        memcpy(copy, s, len);
    copy[len] = '\0';
    return copy;
}

void lp_tok_ids_push(lp_tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap && !lp_tok_reserve((void **)&ids->v, &ids->cap, sizeof *ids->v, 64))
        ids->failed = true;
    if (ids->failed)
        return;
    ids->v[ids->n++] = id;
}

/* ---- vocabulary and merges ------------------------------------------------------------------- */

lp_tokenizer *lp_tok_new(const char *path, const char *kind)
{
    lp_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok)
        return NULL;
    tok->path = lp_tok_strndup(path, strlen(path));
    if (!tok->path) {
        free(tok);
        return NULL;
    }
    tok->kind = kind;
    tok->unk_id = -1;
    for (int b = 0; b < 256; b++)
        tok->byte_ids[b] = -1;
    return tok;
}

lp_status lp_tok_alloc_vocab(lp_tokenizer *tok, int64_t n_vocab, lp_error *err)
{
    if (n_vocab <= 0 || n_vocab > INT32_MAX)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: vocabulary size %lld outside [1, %d]",
                            lp_path_basename(tok->path), (long long)n_vocab, INT32_MAX);
    tok->pieces = calloc((size_t)n_vocab, sizeof *tok->pieces);
    tok->piece_len = calloc((size_t)n_vocab, sizeof *tok->piece_len);
    tok->flags = calloc((size_t)n_vocab, 1);
    if (!tok->pieces || !tok->piece_len || !tok->flags)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for %lld vocabulary entries",
                            lp_path_basename(tok->path), (long long)n_vocab);
    tok->n_vocab = n_vocab;
    return LP_OK;
}

/* Copy len bytes plus a NUL into the piece pool. */
static char *pool_copy(lp_tokenizer *tok, const char *s, size_t len)
{
    if (len + 1 > tok->pool_left) {
        size_t size = len + 1 > (1u << 20) ? len + 1 : (1u << 20);
        char *block = lp_block_list_alloc(&tok->pool, size);
        if (!block)
            return NULL;
        tok->pool_cur = block;
        tok->pool_left = size;
    }
    char *copy = tok->pool_cur;
    if (len)
        memcpy(copy, s, len);
    copy[len] = '\0';
    tok->pool_cur += len + 1;
    tok->pool_left -= len + 1;
    return copy;
}

lp_status lp_tok_set_piece(lp_tokenizer *tok, int32_t id, const char *s, size_t len, lp_error *err)
{
    LP_ASSERT(id >= 0 && id < tok->n_vocab);
    if (len > UINT32_MAX - 1)
        return lp_error_set(err, LP_ERR_FORMAT, "%s: token %d is %zu bytes long",
                            lp_path_basename(tok->path), id, len);
    char *copy = pool_copy(tok, s, len);
    if (!copy)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory", lp_path_basename(tok->path));
    tok->pieces[id] = copy; /* a replaced piece stays in the pool until close */
    tok->piece_len[id] = (uint32_t)len;
    return LP_OK;
}

/* The string BPE knows id by: the model's, also where an added token renamed the id. */
static const char *model_key(const lp_tokenizer *tok, int32_t id, uint32_t *len)
{
    if (tok->model_pieces && tok->model_pieces[id]) {
        *len = tok->model_piece_len[id];
        return tok->model_pieces[id];
    }
    *len = tok->piece_len[id];
    return tok->pieces[id];
}

lp_status lp_tok_override_piece(lp_tokenizer *tok, int32_t id, const char *s, size_t len,
                                lp_error *err)
{
    LP_ASSERT(id >= 0 && id < tok->n_vocab && tok->pieces[id]);
    if (!tok->model_pieces) {
        tok->model_pieces = calloc((size_t)tok->n_vocab, sizeof *tok->model_pieces);
        tok->model_piece_len = calloc((size_t)tok->n_vocab, sizeof *tok->model_piece_len);
        if (!tok->model_pieces || !tok->model_piece_len)
            return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory",
                                lp_path_basename(tok->path));
    }
    if (!tok->model_pieces[id]) {
        tok->model_pieces[id] = tok->pieces[id]; /* still in the pool */
        tok->model_piece_len[id] = tok->piece_len[id];
    }
    return lp_tok_set_piece(tok, id, s, len, err);
}

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

int32_t lp_tok_vocab_find(const lp_tokenizer *tok, const char *s, size_t len)
{
    if (!tok->vocab.slots)
        return -1;
    size_t i = (size_t)hash_bytes(s, len) & tok->vocab.mask;
    for (;;) {
        int32_t slot = tok->vocab.slots[i];
        if (slot == 0)
            return -1;
        int32_t id = slot - 1;
        uint32_t key_len;
        const char *key = model_key(tok, id, &key_len);
        if (key_len == len && memcmp(key, s, len) == 0)
            return id;
        i = (i + 1) & tok->vocab.mask;
    }
}

bool lp_tok_byte_piece(const char *p, size_t len, bool lowercase_ok, unsigned *value)
{
    if (len != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>')
        return false;
    unsigned v = 0;
    for (int k = 3; k < 5; k++) {
        char c = p[k];
        int digit = c >= '0' && c <= '9'                   ? c - '0'
                    : c >= 'A' && c <= 'F'                 ? c - 'A' + 10
                    : lowercase_ok && c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                           : -1;
        if (digit < 0)
            return false;
        v = v * 16 + (unsigned)digit;
    }
    *value = v;
    return true;
}

lp_status lp_tok_build_vocab_map(lp_tokenizer *tok, lp_error *err)
{
    size_t cap = 16;
    while (cap < (size_t)tok->n_vocab * 2)
        cap *= 2;
    free(tok->vocab.slots);
    tok->vocab.slots = calloc(cap, sizeof *tok->vocab.slots);
    if (!tok->vocab.slots)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for the vocabulary map",
                            lp_path_basename(tok->path));
    tok->vocab.mask = cap - 1;
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        if (!tok->pieces[id] || (tok->flags[id] & LP_TOK_FLAG_ADDED))
            continue;
        uint32_t len, other_len;
        const char *key = model_key(tok, id, &len);
        size_t i = (size_t)hash_bytes(key, len) & tok->vocab.mask;
        bool dup = false;
        while (tok->vocab.slots[i]) {
            const char *other = model_key(tok, tok->vocab.slots[i] - 1, &other_len);
            if (other_len == len && memcmp(other, key, len) == 0) {
                dup = true; /* keep the lowest id for a repeated string */
                break;
            }
            i = (i + 1) & tok->vocab.mask;
        }
        if (!dup)
            tok->vocab.slots[i] = id + 1;
        unsigned byte;
        if (lp_tok_byte_piece(key, len, false, &byte) && tok->byte_ids[byte] < 0)
            tok->byte_ids[byte] = id;
    }
    return LP_OK;
}

lp_status lp_tok_merges_init(lp_tokenizer *tok, size_t n_expected, lp_error *err)
{
    size_t cap = 16;
    while (cap < n_expected * 2)
        cap *= 2;
    tok->merges = calloc(cap, sizeof *tok->merges);
    if (!tok->merges)
        return lp_error_set(err, LP_ERR_NOMEM, "%s: out of memory for %zu merges",
                            lp_path_basename(tok->path), n_expected);
    tok->merges_mask = cap - 1;
    return LP_OK;
}

const lp_tok_merge_slot *lp_tok_merges_find(const lp_tokenizer *tok, int32_t left,
                                            int32_t right)
{
    if (!tok->merges)
        return NULL;
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    size_t i = (size_t)hash_u64(key) & tok->merges_mask;
    while (tok->merges[i].key) {
        if (tok->merges[i].key == key)
            return &tok->merges[i];
        i = (i + 1) & tok->merges_mask;
    }
    return NULL;
}

bool lp_tok_merges_add(lp_tokenizer *tok, int32_t left, int32_t right, int32_t rank, int32_t new_id)
{
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    size_t i = (size_t)hash_u64(key) & tok->merges_mask;
    while (tok->merges[i].key) {
        if (tok->merges[i].key == key)
            return false;
        i = (i + 1) & tok->merges_mask;
    }
    tok->merges[i] = (lp_tok_merge_slot){key, rank, new_id};
    tok->n_merges++;
    return true;
}

/* ---- accessors and close --------------------------------------------------------------------- */

const char *lp_tokenizer_piece(const lp_tokenizer *tok, int32_t id)
{
    if (!tok || id < 0 || id >= tok->n_vocab)
        return NULL;
    return tok->pieces[id];
}

int64_t lp_tokenizer_vocab_size(const lp_tokenizer *tok)
{
    return tok ? tok->n_vocab : 0;
}

const char *lp_tokenizer_kind(const lp_tokenizer *tok)
{
    return tok ? tok->kind : NULL;
}

void lp_tokenizer_close(lp_tokenizer *tok)
{
    if (!tok)
        return;
    lp_block_list_free(&tok->pool);
    free(tok->pieces);
    free(tok->piece_len);
    free(tok->flags);
    free(tok->vocab.slots);
    free(tok->model_pieces);
    free(tok->model_piece_len);
    pcre2_code_free(tok->word_re);
    free(tok->scores);
    free(tok->merges);
    free(tok->cont_prefix);
    free(tok->word_prefix);
    free(tok->unigram_scores);
    free(tok->eow_suffix);
    for (size_t k = 0; k < tok->n_added; k++) {
        free(tok->added[k].content);
        free(tok->added[k].pattern);
    }
    free(tok->added);
    for (size_t k = 0; k < tok->n_norms; k++) {
        free(tok->norms[k].pattern);
        free(tok->norms[k].content);
        pcre2_code_free(tok->norms[k].re);
    }
    free(tok->norms);
    for (size_t k = 0; k < tok->n_pres; k++) {
        free(tok->pres[k].pattern);
        pcre2_code_free(tok->pres[k].re);
    }
    free(tok->pres);
    for (size_t k = 0; k < tok->n_post; k++)
        free(tok->post[k].ids);
    free(tok->post);
    for (size_t k = 0; k < tok->n_decs; k++) {
        free(tok->decs[k].pattern);
        free(tok->decs[k].content);
    }
    free(tok->decs);
    free(tok->path);
    free(tok);
}
