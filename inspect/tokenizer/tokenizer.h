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
                                                           "llama2c", ... */

#endif
