/* The shared input step of every command that runs a model on text: --prompt, --prompt-file,
 * --tokens and --tokenizer, parsed from one option table and turned into token ids one way.
 *
 *   typedef struct trace_opts { lp_input_opts input; int64_t threads; ... } trace_opts;
 *   static const lp_option trace_options[] = {
 *       LP_OPT_TABLE_OF(trace_opts, input, lp_input_options), ...
 *   };
 *   lp_input in;
 *   if (lp_input_load(&o.input, model_path, lp_weights_gguf(w), NULL, &in, &err) != LP_OK)
 *       return lp_cli_fail("trace", &err);
 *   ... in.ids[0 .. in.n_ids), in.text (NULL for --tokens), in.tokenizer (may be NULL) ...
 *   lp_input_free(&in);
 */
#ifndef LP_CORE_CLI_INPUT_H
#define LP_CORE_CLI_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "core/cli/cli.h"
#include "inspect/tokenizer/tokenizer.h"

typedef struct lp_input_opts {
    const char *prompt;      /* --prompt TEXT */
    const char *prompt_file; /* --prompt-file FILE */
    const char *tokens;      /* --tokens IDS */
    const char *tokenizer;   /* --tokenizer FILE */
} lp_input_opts;

/* --prompt, --prompt-file, --tokens, --tokenizer; include with LP_OPT_TABLE_OF (the length is
 * part of the declaration so LP_OPT_TABLE_OF can count the rows where it is included). */
#define LP_INPUT_N_OPTIONS 4
extern const lp_option lp_input_options[LP_INPUT_N_OPTIONS];

typedef struct lp_input {
    const char *text;        /* the prompt (NULL for --tokens); borrowed from argv or text_buf */
    char *text_buf;          /* owned: --prompt-file's contents */
    int32_t *ids;            /* owned: [n_ids] */
    size_t n_ids;
    lp_tokenizer *tokenizer; /* owned; NULL when none was found and none was needed */
} lp_input;

/* Exactly one of --prompt, --prompt-file, --tokens (or none when default_text is given, which is
 * then encoded). The tokenizer is --tokenizer, else the one that goes with the model
 * (lp_tokenizer_for_model on model_path and gguf, which may be NULL); it must exist to encode
 * text, and is optional for --tokens (labels become "<id>"). Text is encoded with the
 * post-processor's special tokens (BOS ...). Vocabulary range checks are the caller's. On error
 * *out is left empty. */
lp_status lp_input_load(const lp_input_opts *opts, const char *model_path,
                        const struct lp_gguf *gguf, bool is_llama2c, const char *default_text,
                        lp_input *out, lp_error *err);
struct lp_weights;

/* lp_input_load with the tokenizer that goes with open weights (their GGUF vocabulary, a
 * llama2.c tokenizer beside the checkpoint, tokenizer.json beside the model). */
lp_status lp_input_load_for_weights(const lp_input_opts *opts, const char *model_path,
                                    const struct lp_weights *weights, const char *default_text,
                                    lp_input *out, lp_error *err);
void lp_input_free(lp_input *in);

#endif
