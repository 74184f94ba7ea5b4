/* `loupe tokenize`: encode text (or decode ids) with a model's tokenizer and show ids, pieces
 * and readable labels. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli/cli.h"
#include "core/cli/input.h"
#include "core/mapfile.h"
#include "inspect/tokenizer/tokenizer.h"

typedef struct tokenize_opts {
    lp_input_opts input; /* --prompt (also --text), --prompt-file, --tokens, --tokenizer */
    bool no_special;
    bool json;
} tokenize_opts;

static const lp_option tokenize_options[] = {
    LP_OPT_STRING_OF(tokenize_opts, input.prompt, "text", "TEXT",
                     "the text to encode (--prompt is the same)"),
    LP_OPT_TABLE_OF(tokenize_opts, input, lp_input_options),
    LP_OPT_FLAG_OF(tokenize_opts, no_special, "no-special",
                   "do not add the post-processor's tokens (BOS ...); when decoding, skip\n"
                   "special tokens"),
    LP_OPT_FLAG_OF(tokenize_opts, json, "json",
                   "{\"ids\": [...], \"pieces\": [...]} (with --tokens also \"text\")"),
};

LP_CLI_COMMAND(tokenize, run_tokenize, tokenize_options, 0, 1,
               "tokenize text with a model's tokenizer",
               "TOKENIZER_OR_MODEL (--text TEXT | --prompt-file FILE | --tokens IDS) [options]",
    .description =
        "Encode text with a model's tokenizer (ids equal Hugging Face's), or decode ids.\n"
        "\n"
        "TOKENIZER_OR_MODEL is tokenizer.json, a llama2.c tokenizer .bin, a .gguf, or a model\n"
        "folder or file with a tokenizer.json (or tokenizer.bin, tok*.bin, .gguf) beside it; it\n"
        "may be left out when --tokenizer names the tokenizer (needed for llama2.c checkpoints).\n"
        "--tokens decodes the ids instead: pieces, labels and the decoded text.",
    .notes =
        "Text output: one row per token: position, id, label (the text the token stands for,\n"
        "quoted; newline as \\n, tab as \\t, bytes that are not UTF-8 as \\xNN) and the stored\n"
        "piece. Exit status: 0 ok, 2 bad usage or unreadable input.");

static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strlen(s);
    size_t i = 0;
    while (i < len) {
        unsigned c = p[i];
        if (c == '"' || c == '\\') {
            fprintf(out, "\\%c", c);
            i++;
        } else if (c == '\n') {
            fputs("\\n", out), i++;
        } else if (c == '\t') {
            fputs("\\t", out), i++;
        } else if (c == '\r') {
            fputs("\\r", out), i++;
        } else if (c < 0x20 || c == 0x7F) {
            fprintf(out, "\\u%04x", c), i++;
        } else if (c < 0x80) {
            fputc((int)c, out), i++;
        } else {
            /* a valid UTF-8 sequence is copied; each maximal invalid subpart becomes one
             * U+FFFD (Unicode's recommended practice, as Rust's from_utf8_lossy does) */
            size_t need = c >= 0xF0 && c <= 0xF4 ? 3 : c >= 0xE0 && c <= 0xEF ? 2
                        : c >= 0xC2 && c <= 0xDF ? 1 : 0;
            unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
            unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
            size_t k = 1;
            while (need && k <= need && i + k < len) {
                unsigned cc = p[i + k];
                if (cc < (k == 1 ? lo : 0x80) || cc > (k == 1 ? hi : 0xBF))
                    break;
                k++;
            }
            if (need && k == need + 1) {
                fwrite(p + i, 1, k, out);
            } else {
                fputs("\\ufffd", out);
            }
            i += k;
        }
    }
    fputc('"', out);
}

/* The piece for the table: control bytes escaped so one token stays on one line. */
static void print_piece(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\n')
            fputs("\\n", out);
        else if (*p == '\t')
            fputs("\\t", out);
        else if (*p == '\r')
            fputs("\\r", out);
        else if (*p < 0x20 || *p == 0x7F)
            fprintf(out, "\\x%02X", *p);
        else
            fputc(*p, out);
    }
}

/* Code points, a fair stand-in for terminal columns in a table. */
static size_t display_width(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}


/* True (with *index) when an id falls outside [0, n_vocab). */
static bool first_out_of_range(const int32_t *ids, size_t n, int64_t n_vocab, size_t *index)
{
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= n_vocab) {
            *index = i;
            return true;
        }
    }
    return false;
}

/* The label column's width: the widest label in code points, quotes included, up to 24. */
static size_t label_width(const lp_tokenizer *tok, const int32_t *ids, size_t n_ids)
{
    size_t width = 5;
    for (size_t k = 0; k < n_ids; k++) {
        char *label = lp_tokenizer_label(tok, ids[k]);
        size_t w = label ? display_width(label) + 2 : 3;
        if (w > width)
            width = w > 24 ? 24 : w;
        free(label);
    }
    return width;
}

static void print_json(const lp_tokenizer *tok, const int32_t *ids, size_t n_ids,
                       const char *decoded)
{
    fputs("{\"ids\": [", stdout);
    for (size_t k = 0; k < n_ids; k++)
        printf("%s%d", k ? ", " : "", ids[k]);
    fputs("], \"pieces\": [", stdout);
    for (size_t k = 0; k < n_ids; k++) {
        fputs(k ? ", " : "", stdout);
        json_string(stdout, lp_tokenizer_piece(tok, ids[k]));
    }
    fputs("]", stdout);
    if (decoded) {
        fputs(", \"text\": ", stdout);
        json_string(stdout, decoded);
    }
    fputs("}\n", stdout);
}

/* One row per token (labels padded so the pieces line up), then the text or the ids. */
static void print_table(const lp_tokenizer *tok, const char *source, const int32_t *ids,
                        size_t n_ids, const char *decoded)
{
    printf("tokenizer: %s (%s, %lld ids)\n", source, lp_tokenizer_kind(tok),
           (long long)lp_tokenizer_vocab_size(tok));
    printf("%zu tokens\n", n_ids);
    size_t width = label_width(tok, ids, n_ids);
    if (n_ids)
        printf("%6s %8s  %-*s  %s\n", "pos", "id", (int)width, "label", "piece");
    for (size_t k = 0; k < n_ids; k++) {
        char *label = lp_tokenizer_label(tok, ids[k]);
        printf("%6zu %8d  \"%s\"", k, ids[k], label ? label : "?");
        for (size_t w = (label ? display_width(label) : 1) + 2; w < width; w++)
            putchar(' ');
        fputs("  ", stdout);
        print_piece(stdout, lp_tokenizer_piece(tok, ids[k]));
        putchar('\n');
        free(label);
    }
    if (decoded) {
        printf("text: ");
        print_piece(stdout, decoded);
        putchar('\n');
        return;
    }
    printf("ids:");
    for (size_t k = 0; k < n_ids; k++)
        printf(" %d", ids[k]);
    putchar('\n');
}

/* --tokens: parse, check against the vocabulary, decode. Returns an exit status. */
static int decode_ids(const lp_tokenizer *tok, const tokenize_opts *o, int32_t **ids,
                      size_t *n_ids, char **decoded)
{
    lp_error err = {0};
    int64_t n_vocab = lp_tokenizer_vocab_size(tok);
    size_t bad = 0;
    if (lp_parse_token_ids(o->input.tokens, ids, n_ids, &err) != LP_OK)
        return lp_cli_fail("tokenize", &err);
    if (first_out_of_range(*ids, *n_ids, n_vocab, &bad))
        return lp_cli_usage_error("tokenize", "--tokens: id %d (entry %zu) is outside the "
                                  "vocabulary [0, %lld)", (int)(*ids)[bad], bad,
                                  (long long)n_vocab);
    if (lp_tokenizer_decode(tok, *ids, *n_ids, o->no_special, decoded, &err) != LP_OK)
        return lp_cli_fail("tokenize", &err);
    return LP_EXIT_OK;
}

/* The text to encode: --text/--prompt, or --prompt-file's contents (*file_text, caller frees).
 * Returns an exit status. */
static int read_text(const tokenize_opts *o, const char **text, size_t *len, char **file_text)
{
    lp_error err = {0};
    *file_text = NULL;
    *text = o->input.prompt;
    *len = *text ? strlen(*text) : 0;
    if (!o->input.prompt_file)
        return LP_EXIT_OK;
    if (lp_read_prompt_file(o->input.prompt_file, file_text, len, &err) != LP_OK)
        return lp_cli_fail("tokenize", &err);
    *text = *file_text;
    return LP_EXIT_OK;
}

static int run_tokenize(int argc, char **argv)
{
    const char *cmd = "tokenize";
    tokenize_opts o = {0};
    const char *pos[LP_CLI_MAX_POSITIONAL];
    int n_pos = 0;
    LP_CLI_PARSE_OR_RETURN(&tokenize_spec, argc, argv, &o, pos, &n_pos);
    const char *source = n_pos ? pos[0] : NULL;
    int n_given = (o.input.prompt != NULL) + (o.input.prompt_file != NULL) +
                  (o.input.tokens != NULL);
    if (n_given > 1)
        return lp_cli_usage_error(cmd, "give only one of --text, --prompt-file, --tokens");
    if (!source && !o.input.tokenizer)
        return lp_cli_usage_error(cmd, "no TOKENIZER_OR_MODEL given (see loupe help tokenize)");
    if (n_given == 0)
        return lp_cli_usage_error(cmd, "nothing to do: give --text TEXT, --prompt-file FILE or "
                                  "--tokens IDS");
    /* the prompt file is read before the tokenizer is opened, so that its errors come first */
    const char *text;
    size_t text_len;
    char *file_text;
    int rc;
    if ((rc = read_text(&o, &text, &text_len, &file_text)) != LP_EXIT_OK)
        return rc;
    lp_error err = {0};
    lp_tokenizer *tok;
    const char *tok_path = o.input.tokenizer ? o.input.tokenizer : source;
    if (lp_tokenizer_open(tok_path, &tok, &err) != LP_OK) {
        free(file_text);
        return lp_cli_fail(cmd, &err);
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *decoded = NULL;
    int status = LP_EXIT_OK;
    if (o.input.tokens)
        status = decode_ids(tok, &o, &ids, &n_ids, &decoded);
    else if (lp_tokenizer_encode(tok, text, text_len, !o.no_special, &ids, &n_ids, &err) != LP_OK)
        status = lp_cli_fail(cmd, &err);
    if (status == LP_EXIT_OK && o.json)
        print_json(tok, ids, n_ids, decoded);
    else if (status == LP_EXIT_OK)
        print_table(tok, tok_path, ids, n_ids, decoded);
    free(decoded);
    free(ids);
    free(file_text);
    lp_tokenizer_close(tok);
    return status;
}
