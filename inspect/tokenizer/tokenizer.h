/* Tokenizers: Hugging Face tokenizer.json (BPE, byte-level BPE with its pre-tokenizer regex,
 * SentencePiece-style BPE with byte fallback), llama2.c tokenizer.bin and GGUF vocabularies.
 * Token ids equal Hugging Face's.
 *
 *   lp_tokenizer *tok;
 *   if (lp_tokenizer_open("model_dir/", &tok, &err) != LP_OK) ...  // tokenizer.json, .bin, .gguf
 *   int32_t *ids; size_t n;
 *   lp_tokenizer_encode(tok, "Hello world", 11, true, &ids, &n, &err);  // caller frees ids
 *   printf("%s\n", lp_tokenizer_piece(tok, ids[0]));                    // vocabulary string
 *   lp_tokenizer_close(tok);
 */
#ifndef LP_INSPECT_TOKENIZER_H
#define LP_INSPECT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

struct lp_gguf;
typedef struct lp_tokenizer lp_tokenizer;

/* PATH: tokenizer.json, llama2.c tokenizer .bin, a .gguf, or a model folder holding one. */
lp_status lp_tokenizer_open(const char *path, lp_tokenizer **out, lp_error *err);
lp_status lp_tokenizer_from_gguf(const struct lp_gguf *gguf, lp_tokenizer **out, lp_error *err);
void lp_tokenizer_close(lp_tokenizer *tok);

/* The tokenizer that goes with a model, as `loupe trace`/`loupe leak` look for it: the GGUF's own
 * vocabulary (gguf may be NULL), else tokenizer.json beside model_path (in it, if a folder), else
 * for a llama2.c checkpoint (is_llama2c) a tokenizer .bin beside it (tokenizer.bin, tok*.bin).
 * LP_ERR_NOT_FOUND names what was looked for. */
lp_status lp_tokenizer_for_model(const char *model_path, const struct lp_gguf *gguf,
                                 bool is_llama2c, lp_tokenizer **out, lp_error *err);

/* add_special: add the tokens the post-processor says (e.g. BOS for Llama). *ids is malloc'd. */
lp_status lp_tokenizer_encode(const lp_tokenizer *tok, const char *text, size_t len,
                              bool add_special, int32_t **ids, size_t *n_ids, lp_error *err);
/* The vocabulary string of id, as stored ("Ġthe", "▁the", "<0x0A>"); NULL if out of range. */
const char *lp_tokenizer_piece(const lp_tokenizer *tok, int32_t id);
/* A readable label for axis text: the piece decoded to the text it stands for (byte-level
 * symbols mapped back, "▁" -> " ", byte tokens as \xNN where not valid UTF-8). Caller frees. */
char *lp_tokenizer_label(const lp_tokenizer *tok, int32_t id);
/* Decode ids to text with the tokenizer's decoder; caller frees *text. */
lp_status lp_tokenizer_decode(const lp_tokenizer *tok, const int32_t *ids, size_t n_ids,
                              bool skip_special, char **text, lp_error *err);
int64_t lp_tokenizer_vocab_size(const lp_tokenizer *tok);
const char *lp_tokenizer_kind(const lp_tokenizer *tok); /* "bpe-bytelevel", "bpe-sentencepiece",
                                                           "wordpiece", "llama2c", ... */

/* ---- prompt files: JSON lines (prompts.c) ----
 * One JSON object per line, {"text": "..."} or {"tokens": [1, 403, 407]}, each with an optional
 * "id" (a string, or an integer kept as its decimal text):
 *
 *   {"id": "cat", "text": "The cat sat on the mat."}
 *   {"tokens": [1, 450, 6635]}
 *
 *   lp_prompts p;
 *   if (lp_prompts_read("prompts.jsonl", &p, &err) != LP_OK) ...  // "prompts.jsonl:3:14: ..."
 *   for (size_t i = 0; i < p.n; i++) ... p.items[i].text or p.items[i].tokens ...
 *   lp_prompts_free(&p);
 *
 * Strict: exactly one of "text" and "tokens"; no other key; no key twice; ids unique in the file;
 * text non-empty, valid UTF-8 without NUL (escapes \uXXXX included, surrogates paired); tokens a
 * non-empty array of integers in [0, 2^31 - 1]. Lines are split at "\n"; "\r\n" ends a line too;
 * empty and blank lines are skipped; a UTF-8 byte order mark opening the file is skipped. A file
 * without any prompt is an error. Each error is LP_ERR_FORMAT (LP_ERR_IO, LP_ERR_NOMEM) with one
 * line "file:line:col: what", col counting bytes from 1. Vocabulary range checks are the
 * caller's. */
typedef struct lp_prompt {
    char *id;        /* NULL when the line has none */
    char *text;      /* NUL-terminated UTF-8; NULL for a "tokens" line */
    size_t text_len;
    int32_t *tokens; /* [n_tokens]; NULL for a "text" line */
    size_t n_tokens;
    int64_t line;    /* where it stands in the file, from 1 */
} lp_prompt;

typedef struct lp_prompts {
    lp_prompt *items; /* [n], in file order; owned, freed by lp_prompts_free */
    size_t n;
} lp_prompts;

lp_status lp_prompts_read(const char *path, lp_prompts *out, lp_error *err);
/* The same over data[0, size) in memory; name stands for the file in messages. */
lp_status lp_prompts_parse(const char *name, const char *data, size_t size, lp_prompts *out,
                           lp_error *err);
void lp_prompts_free(lp_prompts *prompts);

#endif
