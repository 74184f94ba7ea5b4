/* The shared input step: --prompt, --prompt-file, --tokens, --tokenizer into token ids. */
#include "core/cli/input.h"

#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"
#include "inspect/inspect.h"

const lp_option lp_input_options[] = {
    LP_OPT_STRING_OF(lp_input_opts, prompt, "prompt", "TEXT",
                     "text to tokenize (special tokens such as BOS are added)"),
    LP_OPT_STRING_OF(lp_input_opts, prompt_file, "prompt-file", "FILE",
                     "read the text from FILE (one final line break is dropped)"),
    LP_OPT_STRING_OF(lp_input_opts, tokens, "tokens", "IDS", "token ids, comma separated: 1,403,407"),
    LP_OPT_STRING_OF(lp_input_opts, tokenizer, "tokenizer", "FILE",
                     "tokenizer.json, llama2.c tokenizer .bin or .gguf (default: the model's\n"
                     "own vocabulary, or one beside the model)"),
};

static lp_status find_tokenizer(const lp_input_opts *o, const char *model_path,
                                const struct lp_gguf *gguf, bool is_llama2c, lp_tokenizer **tok,
                                lp_error *err)
{
    if (o->tokenizer)
        return lp_tokenizer_open(o->tokenizer, tok, err);
    return lp_tokenizer_for_model(model_path, gguf, is_llama2c, tok, err);
}

static lp_status load(const lp_input_opts *o, const char *model_path, const struct lp_gguf *gguf,
                      bool is_llama2c, const char *default_text, lp_input *in, lp_error *err)
{
    int n_given = (o->prompt != NULL) + (o->prompt_file != NULL) + (o->tokens != NULL);
    if (n_given > 1 || (n_given == 0 && !default_text))
        return lp_error_set(err, LP_ERR_USAGE, "give %s one of --prompt, --prompt-file, --tokens",
                            default_text ? "at most" : "exactly");
    in->text = o->prompt;
    if (o->prompt_file) {
        lp_status st = lp_read_prompt_file(o->prompt_file, &in->text_buf, NULL, err);
        if (st != LP_OK)
            return st;
        in->text = in->text_buf;
    }
    if (o->tokens) {
        lp_status st = lp_parse_token_ids(o->tokens, &in->ids, &in->n_ids, err);
        if (st != LP_OK)
            return st;
        /* Ids need no tokenizer; one found gives their labels, one asked for must open. */
        st = find_tokenizer(o, model_path, gguf, is_llama2c, &in->tokenizer, err);
        return st == LP_OK || !o->tokenizer ? LP_OK : st;
    }
    if (!in->text)
        in->text = default_text;
    lp_status st = find_tokenizer(o, model_path, gguf, is_llama2c, &in->tokenizer, err);
    if (st != LP_OK)
        return st;
    st = lp_tokenizer_encode(in->tokenizer, in->text, strlen(in->text), true, &in->ids, &in->n_ids,
                             err);
    if (st != LP_OK)
        return st;
    if (in->n_ids == 0)
        return lp_error_set(err, LP_ERR_USAGE, "the prompt encodes to no tokens");
    return LP_OK;
}

lp_status lp_input_load(const lp_input_opts *opts, const char *model_path,
                        const struct lp_gguf *gguf, bool is_llama2c, const char *default_text,
                        lp_input *out, lp_error *err)
{
    lp_error local = {0};
    if (!err)
        err = &local;
    memset(out, 0, sizeof *out);
    lp_status st = load(opts, model_path, gguf, is_llama2c, default_text, out, err);
    if (st != LP_OK) {
        lp_input_free(out);
        return st;
    }
    if (out->tokenizer == NULL)
        memset(err, 0, sizeof *err); /* a missing optional tokenizer is not an error */
    return LP_OK;
}

lp_status lp_input_load_for_weights(const lp_input_opts *opts, const char *model_path,
                                    const lp_weights *weights, const char *default_text,
                                    lp_input *out, lp_error *err)
{
    return lp_input_load(opts, model_path, lp_weights_gguf(weights),
                         lp_weights_format_of(weights) == LP_FORMAT_LLAMA2C, default_text, out,
                         err);
}

void lp_input_free(lp_input *in)
{
    if (!in)
        return;
    lp_tokenizer_close(in->tokenizer);
    free(in->text_buf);
    free(in->ids);
    memset(in, 0, sizeof *in);
}
