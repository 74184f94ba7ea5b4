/* The tokenizer models: Hugging Face BPE by merge rank, SentencePiece BPE by score (GGUF
 * "llama"), and llama2.c's run.c encode(); one merge queue (a binary heap of candidate pairs)
 * serves all three. */
#include "inspect/tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct lp_tok_sym {
    int32_t id;
    uint32_t start, len; /* bytes of the word; len 0 = merged away */
    int32_t prev, next;
} lp_tok_sym;

typedef struct lp_tok_cand {
    uint64_t key;   /* priority << 32 | left symbol index: the lowest pops first */
    uint32_t len;   /* left + right length when queued; any merge since changes it */
    int32_t new_id;
} lp_tok_cand;

typedef struct cand_heap {
    lp_tok_cand *v;
    size_t n, cap;
    bool failed;
} cand_heap;

static bool cand_before(const lp_tok_cand *a, const lp_tok_cand *b)
{
    return a->key < b->key;
}

/* Floats to unsigned keys in the same order, so that the best score (lowest -score) pops
 * first; -0 counts as +0, as the float comparison in run.c has it. */
static uint32_t score_key(float score)
{
    float v = -score;
    if (v == 0.0f)
        v = 0.0f;
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static void heap_push(cand_heap *h, lp_tok_cand c)
{
    if (h->n == h->cap && !lp_tok_reserve((void **)&h->v, &h->cap, sizeof *h->v, 64))
        h->failed = true;
    if (h->failed)
        return;
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_before(&c, &h->v[parent]))
            break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = c;
}

static lp_tok_cand heap_pop(cand_heap *h)
{
    lp_tok_cand top = h->v[0];
    lp_tok_cand last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->n)
            break;
        if (child + 1 < h->n && cand_before(&h->v[child + 1], &h->v[child]))
            child++;
        if (!cand_before(&h->v[child], &last))
            break;
        h->v[i] = h->v[child];
        i = child;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

/* The candidate merge of symbols a and b = a->next, if there is one. */
static bool pair_candidate(const lp_tokenizer *tok, const char *word, const lp_tok_sym *syms,
                           int32_t a, lp_tok_cand *out)
{
    int32_t b = syms[a].next;
    if (b < 0)
        return false;
    const lp_tok_sym *l = &syms[a], *r = &syms[b];
    if (tok->model == LP_TOK_MODEL_BPE_MERGES) {
        if (l->id < 0 || r->id < 0)
            return false;
        const lp_tok_merge_slot *m = lp_tok_merges_find(tok, l->id, r->id);
        if (!m)
            return false;
        *out = (lp_tok_cand){((uint64_t)(uint32_t)m->rank << 32) | (uint32_t)a, l->len + r->len,
                         m->new_id};
        return true;
    }
    /* score models: the concatenated text must be a vocabulary string */
    int32_t id = lp_tok_vocab_find(tok, word + l->start, (size_t)l->len + r->len);
    if (id < 0)
        return false;
    *out = (lp_tok_cand){((uint64_t)score_key(tok->scores[id]) << 32) | (uint32_t)a,
                     l->len + r->len, id};
    return true;
}

/* Merge the symbols of one word; syms are linked in order 0..n-1 on entry. */
static lp_status bpe_merge(const lp_tokenizer *tok, const char *word, lp_tok_sym *syms, size_t n)
{
    cand_heap heap = {0};
    lp_tok_cand c;
    for (size_t i = 0; i + 1 < n; i++)
        if (pair_candidate(tok, word, syms, (int32_t)i, &c))
            heap_push(&heap, c);
    while (heap.n > 0 && !heap.failed) {
        c = heap_pop(&heap);
        int32_t pos = (int32_t)(uint32_t)c.key;
        lp_tok_sym *l = &syms[pos];
        /* Stale: merged away, or a side grew since this entry was queued. (A symbol's next
         * changes only when it absorbs it, so lengths tell everything.) */
        if (l->len == 0 || l->next < 0 || l->len + syms[l->next].len != c.len)
            continue;
        lp_tok_sym *r = &syms[l->next];
        l->id = c.new_id;
        l->len += r->len;
        l->next = r->next;
        if (r->next >= 0)
            syms[r->next].prev = pos;
        r->len = 0;
        lp_tok_cand nc;
        if (l->prev >= 0 && pair_candidate(tok, word, syms, l->prev, &nc))
            heap_push(&heap, nc);
        if (pair_candidate(tok, word, syms, pos, &nc))
            heap_push(&heap, nc);
    }
    bool failed = heap.failed;
    free(heap.v);
    return failed ? LP_ERR_NOMEM : LP_OK;
}

typedef struct sym_vec {
    lp_tok_sym *v;
    size_t n, cap;
    bool failed;
} sym_vec;

static void sym_push(sym_vec *s, int32_t id, size_t start, size_t len)
{
    if (s->n == s->cap && !lp_tok_reserve((void **)&s->v, &s->cap, sizeof *s->v, 64))
        s->failed = true;
    if (s->failed)
        return;
    int32_t i = (int32_t)s->n++;
    s->v[i] = (lp_tok_sym){id, (uint32_t)start, (uint32_t)len, i - 1, i + 1};
}

static void sym_link_end(sym_vec *s)
{
    if (s->n)
        s->v[s->n - 1].next = -1;
}

/* The unknown characters of a word so far: a run of them is one unk (when fuse_unk). */
typedef struct unk_run {
    int32_t start; /* -1: none pending */
    size_t len;
} unk_run;

static void unk_flush(const lp_tokenizer *tok, unk_run *u, sym_vec *syms)
{
    if (u->start >= 0)
        sym_push(syms, tok->unk_id, (size_t)u->start, u->len);
    u->start = -1;
}

/* One character of a word that is not in the vocabulary: its bytes' tokens with byte fallback
 * (one symbol a byte; lengths only matter as bookkeeping for the merge queue; like Hugging
 * Face, a pending unk is not flushed first and lands after them), else unk, else dropped (as
 * Hugging Face does without an unk token). key is the character with prefix/suffix. */
static void unknown_char(const lp_tokenizer *tok, const char *key, size_t key_len, size_t start,
                         size_t clen, unk_run *u, sym_vec *syms)
{
    bool all = tok->byte_fallback;
    for (size_t k = 0; k < key_len && all; k++)
        all = tok->byte_ids[(unsigned char)key[k]] >= 0;
    if (all) {
        for (size_t k = 0; k < key_len; k++)
            sym_push(syms, tok->byte_ids[(unsigned char)key[k]],
                     start + (k < clen ? k : clen - 1), k < clen ? 1 : 0);
        return;
    }
    if (tok->unk_id < 0)
        return;
    if (u->start >= 0 && tok->fuse_unk) {
        u->len += clen;
        return;
    }
    unk_flush(tok, u, syms);
    u->start = (int32_t)start;
    u->len = clen;
}

/* The symbols of one word: each character (with the continuing-subword prefix after the first
 * and the end-of-word suffix on the last) as its token, byte fallback or unk. */
static lp_status word_symbols(const lp_tokenizer *tok, const char *w, size_t len, sym_vec *syms)
{
    lp_bytes tmp = {0};
    unk_run u = {-1, 0};
    size_t i = 0;
    while (i < len && !tmp.failed) {
        size_t start = i;
        lp_utf8_next(w, len, &i);
        size_t clen = i - start, key_len = clen;
        const char *key = w + start;
        bool prefix = tok->cont_prefix_len && start > 0, suffix = tok->eow_suffix_len && i == len;
        if (prefix || suffix) {
            tmp.len = 0;
            if (prefix)
                lp_bytes_append(&tmp, tok->cont_prefix, tok->cont_prefix_len);
            lp_bytes_append(&tmp, w + start, clen);
            if (suffix)
                lp_bytes_append(&tmp, tok->eow_suffix, tok->eow_suffix_len);
            key = tmp.data;
            key_len = tmp.len;
        }
        int32_t id = tmp.failed ? -1 : lp_tok_vocab_find(tok, key, key_len);
        if (id >= 0) {
            unk_flush(tok, &u, syms);
            sym_push(syms, id, start, clen);
        } else if (!tmp.failed) {
            unknown_char(tok, key, key_len, start, clen, &u, syms);
        }
    }
    unk_flush(tok, &u, syms);
    bool failed = tmp.failed || syms->failed;
    lp_bytes_free(&tmp);
    return failed ? LP_ERR_NOMEM : LP_OK;
}

/* Hugging Face BPE on one pre-token: its symbols, then merges by rank. */
static lp_status bpe_word_merges(const lp_tokenizer *tok, const char *w, size_t len,
                                 lp_tok_ids *out)
{
    if (tok->ignore_merges) {
        int32_t id = lp_tok_vocab_find(tok, w, len);
        if (id >= 0) {
            lp_tok_ids_push(out, id);
            return LP_OK;
        }
    }
    sym_vec syms = {0};
    lp_status st = word_symbols(tok, w, len, &syms);
    if (st != LP_OK) {
        free(syms.v);
        return st;
    }
    sym_link_end(&syms);
    /* Zero-length symbols would look merged away; give them a length of 1 for bookkeeping.
     * (Only byte-fallback symbols of a prefixed/suffixed key can be empty.) */
    for (size_t k = 0; k < syms.n; k++)
        if (syms.v[k].len == 0)
            syms.v[k].len = 1;
    st = bpe_merge(tok, w, syms.v, syms.n);
    if (st == LP_OK)
        for (int32_t k = syms.n ? 0 : -1; k >= 0; k = syms.v[k].next)
            lp_tok_ids_push(out, syms.v[k].id);
    free(syms.v);
    return st;
}

/* SentencePiece BPE (GGUF "llama"): characters, merges of the best-scoring vocabulary string,
 * then byte fallback for what is left unknown. */
static lp_status bpe_word_scores(const lp_tokenizer *tok, const char *w, size_t len,
                                 lp_tok_ids *out)
{
    sym_vec syms = {0};
    size_t i = 0;
    while (i < len) {
        /* llama.cpp takes a character's length from its lead byte alone, valid or not */
        static const uint8_t lead_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
        size_t start = i;
        size_t n = lead_len[(unsigned char)w[i] >> 4];
        i += n < len - i ? n : len - i;
        sym_push(&syms, lp_tok_vocab_find(tok, w + start, i - start), start, i - start);
    }
    if (syms.failed) {
        free(syms.v);
        return LP_ERR_NOMEM;
    }
    sym_link_end(&syms);
    lp_status st = bpe_merge(tok, w, syms.v, syms.n);
    if (st == LP_OK)
        for (int32_t k = syms.n ? 0 : -1; k >= 0; k = syms.v[k].next) {
            const lp_tok_sym *s = &syms.v[k];
            if (s->id >= 0) {
                lp_tok_ids_push(out, s->id);
                continue;
            }
            for (uint32_t b = 0; b < s->len; b++) {
                int32_t id = tok->byte_ids[(unsigned char)w[s->start + b]];
                if (id < 0)
                    id = tok->unk_id;
                if (id >= 0)
                    lp_tok_ids_push(out, id);
            }
        }
    free(syms.v);
    return st;
}

/* llama2.c run.c encode(): BOS, the dummy-prefix " ", each code point (or its bytes + 3),
 * then repeatedly merge the adjacent pair whose concatenated piece strings score best. */
lp_status lp_tok_encode_llama2c(const lp_tokenizer *tok, const char *text, size_t len,
                                bool add_bos, lp_tok_ids *out)
{
    lp_bytes word = {0};
    sym_vec syms = {0};
    int32_t space = lp_tok_vocab_find(tok, " ", 1);
    lp_status st = LP_OK;
    if (add_bos && tok->n_vocab > 1) {
        sym_push(&syms, 1, word.len, tok->piece_len[1]);
        lp_bytes_append(&word, tok->pieces[1], tok->piece_len[1]);
    }
    if (len > 0 && space >= 0) {
        sym_push(&syms, space, word.len, 1);
        lp_bytes_append(&word, " ", 1);
    }
    size_t i = 0;
    while (i < len) {
        /* run.c groups a lead byte with up to three continuation bytes, valid or not */
        size_t start = i++;
        while (i < len && i - start < 4 && ((unsigned char)text[i] & 0xC0) == 0x80)
            i++;
        int32_t id = lp_tok_vocab_find(tok, text + start, i - start);
        if (id >= 0) {
            sym_push(&syms, id, word.len, i - start);
            lp_bytes_append(&word, text + start, i - start);
            continue;
        }
        for (size_t b = start; b < i; b++) {
            int32_t bid = (int32_t)(unsigned char)text[b] + 3;
            if (bid >= tok->n_vocab || !tok->pieces[bid])
                continue;
            sym_push(&syms, bid, word.len, tok->piece_len[bid]);
            lp_bytes_append(&word, tok->pieces[bid], tok->piece_len[bid]);
        }
    }
    if (word.failed || syms.failed || word.len > UINT32_MAX / 2) {
        st = word.failed || syms.failed ? LP_ERR_NOMEM : LP_ERR_RANGE;
        goto done;
    }
    sym_link_end(&syms);
    for (size_t k = 0; k < syms.n; k++)
        if (syms.v[k].len == 0)
            syms.v[k].len = 1; /* an empty stored piece; see bpe_word_merges */
    if (syms.n)
        st = bpe_merge(tok, word.data, syms.v, syms.n);
    if (st == LP_OK)
        for (int32_t k = syms.n ? 0 : -1; k >= 0; k = syms.v[k].next)
            lp_tok_ids_push(out, syms.v[k].id);
done:
    lp_bytes_free(&word);
    free(syms.v);
    return st;
}

/* Hugging Face's WordPiece: from the start of what is left, the longest vocabulary string (after
 * the first, with the continuing-subword prefix); a word with a stretch no string starts, or of
 * more than max_input_chars code points, is the unknown token alone. */
static lp_status wordpiece_word(const lp_tokenizer *tok, const char *w, size_t len,
                                lp_tok_ids *out)
{
    int64_t n_chars = 0;
    for (size_t i = 0; i < len; n_chars++)
        lp_utf8_next(w, len, &i);
    size_t mark = out->n;
    lp_bytes probe = {0};
    bool bad = n_chars > tok->max_input_chars;
    for (size_t start = 0; start < len && !bad;) {
        int32_t id = -1;
        size_t end = len;
        while (end > start) {
            probe.len = 0;
            if (start > 0)
                lp_bytes_append(&probe, tok->cont_prefix, tok->cont_prefix_len);
            lp_bytes_append(&probe, w + start, end - start);
            if (probe.failed)
                break;
            if ((id = lp_tok_vocab_find(tok, probe.data, probe.len)) >= 0)
                break;
            size_t prev = end;
            if (lp_utf8_prev(w, end, &prev) < 0 || prev < start)
                prev = end - 1; /* a raw byte steps back alone */
            end = prev;
        }
        if (probe.failed) {
            lp_bytes_free(&probe);
            return LP_ERR_NOMEM;
        }
        bad = id < 0;
        if (!bad)
            lp_tok_ids_push(out, id);
        start = end;
    }
    lp_bytes_free(&probe);
    if (bad) { /* the loader made sure the unknown token exists */
        out->n = mark;
        lp_tok_ids_push(out, tok->unk_id);
    }
    return out->failed ? LP_ERR_NOMEM : LP_OK;
}

/* The ids of one Unigram piece of the best path: an unknown stretch is unk_id, or with byte
 * fallback its bytes' <0xXX> tokens when all exist (Hugging Face's rule). */
static void unigram_emit(const lp_tokenizer *tok, const char *w, size_t start, size_t end,
                         int32_t id, lp_tok_ids *out)
{
    if (id != tok->unk_id || !tok->byte_fallback) {
        lp_tok_ids_push(out, id);
        return;
    }
    bool all = true;
    for (size_t b = start; b < end && all; b++)
        all = tok->byte_ids[(unsigned char)w[b]] >= 0;
    if (!all) {
        lp_tok_ids_push(out, id);
        return;
    }
    for (size_t b = start; b < end; b++)
        lp_tok_ids_push(out, tok->byte_ids[(unsigned char)w[b]]);
}

/* Hugging Face's Unigram encode_optimized: best[e] is the highest total score of pieces
 * covering w[0, e); every vocabulary string starting at a character boundary extends it
 * (a strictly higher score wins, so on ties the piece found first, from the earlier start,
 * stays); a character no one-character piece covers may be the unknown token at unk_score.
 * Back from the end, consecutive unknowns are one. */
static lp_status unigram_word(const lp_tokenizer *tok, const char *w, size_t len,
                              lp_tok_ids *out)
{
    typedef struct node {
        double score;
        int32_t id;    /* -1: not reached */
        uint32_t from; /* start of the piece ending here */
    } node;
    node *best = malloc((len + 1) * sizeof *best);
    if (!best)
        return LP_ERR_NOMEM;
    for (size_t i = 0; i <= len; i++)
        best[i] = (node){0, -1, 0};
    best[0].id = tok->unk_id; /* reached, score 0 */
    for (size_t start = 0; start < len;) {
        size_t char_end = start + lp_utf8_seq_len(w, len, start);
        bool single = false;
        if (best[start].id >= 0) {
            size_t end = char_end;
            while (end <= len && end - start <= tok->max_piece_len) {
                int32_t id = lp_tok_vocab_find(tok, w + start, end - start);
                if (id >= 0) {
                    single |= end == char_end;
                    double score = best[start].score + tok->unigram_scores[id];
                    if (best[end].id < 0 || score > best[end].score)
                        best[end] = (node){score, id, (uint32_t)start};
                }
                if (end == len)
                    break;
                end += lp_utf8_seq_len(w, len, end);
            }
            double score = best[start].score + tok->unk_score;
            if (!single && (best[char_end].id < 0 || score > best[char_end].score))
                best[char_end] = (node){score, tok->unk_id, (uint32_t)start};
        }
        start = char_end;
    }
    /* the path backwards, unknown runs fused, then emitted in order */
    size_t n_path = 0;
    for (size_t e = len; e > 0; e = best[e].from)
        n_path++;
    uint32_t *ends = malloc((n_path + 1) * sizeof *ends);
    if (!ends) {
        free(best);
        return LP_ERR_NOMEM;
    }
    size_t k = n_path;
    for (size_t e = len; e > 0; e = best[e].from)
        ends[--k] = (uint32_t)e;
    size_t start = 0;
    for (k = 0; k < n_path; k++) {
        int32_t id = best[ends[k]].id;
        size_t end = ends[k];
        while (id == tok->unk_id && k + 1 < n_path && best[ends[k + 1]].id == tok->unk_id)
            end = ends[++k];
        unigram_emit(tok, w, start, end, id, out);
        start = end;
    }
    free(ends);
    free(best);
    return out->failed ? LP_ERR_NOMEM : LP_OK;
}

lp_status lp_tok_bpe_word(const lp_tokenizer *tok, const char *w, size_t len, lp_tok_ids *out)
{
    if (tok->model == LP_TOK_MODEL_UNIGRAM)
        return len ? unigram_word(tok, w, len, out) : LP_OK;
    if (tok->model == LP_TOK_MODEL_WORDPIECE && len && tok->word_prefix_len) {
        lp_bytes word = {0};
        lp_bytes_append(&word, tok->word_prefix, tok->word_prefix_len);
        lp_bytes_append(&word, w, len);
        lp_status st = word.failed ? LP_ERR_NOMEM : wordpiece_word(tok, word.data, word.len, out);
        lp_bytes_free(&word);
        return st;
    }
    if (tok->model == LP_TOK_MODEL_WORDPIECE)
        return len ? wordpiece_word(tok, w, len, out) : LP_OK;
    if (len == 0)
        return LP_OK;
    if (len > UINT32_MAX / 2) /* symbol offsets and lengths are 32-bit */
        return LP_ERR_RANGE;
    if (tok->model == LP_TOK_MODEL_BPE_MERGES)
        return bpe_word_merges(tok, w, len, out);
    return bpe_word_scores(tok, w, len, out);
}
