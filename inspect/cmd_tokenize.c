/* `loupe tokenize`: encode text (or decode ids) with a model's tokenizer and show ids, pieces
 * and readable labels. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli/cli.h"
#include "core/mapfile.h"
#include "inspect/tokenizer/tokenizer.h"

#define TOKENIZE_USAGE                                                                          \
    "usage: loupe tokenize TOKENIZER_OR_MODEL (--text TEXT | --prompt-file FILE | --tokens IDS)\n" \
    "                      [--tokenizer FILE] [--no-special] [--json]\n"                        \
    "\n"                                                                                        \
    "Encode text with a model's tokenizer (ids equal Hugging Face's), or decode ids.\n"         \
    "\n"                                                                                        \
    "TOKENIZER_OR_MODEL  tokenizer.json, a llama2.c tokenizer .bin, a .gguf, or a model folder\n" \
    "                    or file with a tokenizer.json (or tokenizer.bin, tok*.bin, .gguf)\n"   \
    "                    beside it\n"                                                           \
    "--tokenizer FILE    use this tokenizer instead (needed for llama2.c checkpoints)\n"        \
    "--text TEXT         the text to encode (--prompt is the same)\n"                           \
    "--prompt-file FILE  encode the file's bytes (one final \\n or \\r\\n is dropped, as in trace)\n" \
    "--tokens 1,2,3      decode these ids instead: pieces, labels and the decoded text\n"       \
    "--no-special        do not add the post-processor's tokens (BOS ...); when decoding,\n"    \
    "                    skip special tokens\n"                                                 \
    "--json              {\"ids\": [...], \"pieces\": [...]} (with --tokens also \"text\")\n"  \
    "\n"                                                                                        \
    "Text output: one row per token: position, id, label (the text the token stands for,\n"     \
    "quoted; newline as \\n, tab as \\t, bytes that are not UTF-8 as \\xNN) and the stored\n"   \
    "piece. Exit status: 0 ok, 2 bad usage or unreadable input.\n"


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

static int run_tokenize(int argc, char **argv)
{
    const char *cmd = "tokenize";
    const char *source = NULL, *tokenizer_path = NULL, *text = NULL, *prompt_file = NULL;
    const char *tokens = NULL;
    bool no_special = false, json = false;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if (lp_cli_flag(argv[i], "--help") || lp_cli_flag(argv[i], "-h")) {
            fputs(TOKENIZE_USAGE, stdout);
            return LP_EXIT_OK;
        }
        if (lp_cli_flag(argv[i], "--no-special")) {
            no_special = true;
            continue;
        }
        if (lp_cli_flag(argv[i], "--json")) {
            json = true;
            continue;
        }
        if ((r = lp_cli_option(cmd, argc, argv, &i, "--text", &v)) != 0 ||
            (r = lp_cli_option(cmd, argc, argv, &i, "--prompt", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            if (text || prompt_file || tokens)
                return lp_cli_usage_error(cmd, "give only one of --text, --prompt-file, --tokens");
            text = v;
            continue;
        }
        if ((r = lp_cli_option(cmd, argc, argv, &i, "--prompt-file", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            if (text || prompt_file || tokens)
                return lp_cli_usage_error(cmd, "give only one of --text, --prompt-file, --tokens");
            prompt_file = v;
            continue;
        }
        if ((r = lp_cli_option(cmd, argc, argv, &i, "--tokens", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            if (text || prompt_file || tokens)
                return lp_cli_usage_error(cmd, "give only one of --text, --prompt-file, --tokens");
            tokens = v;
            continue;
        }
        if ((r = lp_cli_option(cmd, argc, argv, &i, "--tokenizer", &v)) != 0) {
            if (r < 0)
                return LP_EXIT_USAGE;
            tokenizer_path = v;
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1] != '\0')
            return lp_cli_usage_error(cmd, "unknown option '%s' (see loupe help tokenize)",
                                      argv[i]);
        if (source)
            return lp_cli_usage_error(cmd, "more than one TOKENIZER_OR_MODEL: '%s' and '%s'",
                                      source, argv[i]);
        source = argv[i];
    }
    if (!source && !tokenizer_path)
        return lp_cli_usage_error(cmd, "no TOKENIZER_OR_MODEL given (see loupe help tokenize)");
    if (!text && !prompt_file && !tokens)
        return lp_cli_usage_error(cmd, "nothing to do: give --text TEXT, --prompt-file FILE or "
                                  "--tokens IDS");

    lp_error err = {0};
    char *file_text = NULL;
    size_t text_len = text ? strlen(text) : 0;
    if (prompt_file) {
        if (lp_read_prompt_file(prompt_file, &file_text, &text_len, &err) != LP_OK)
            return lp_cli_fail(cmd, &err);
        text = file_text;
    }
    lp_tokenizer *tok;
    if (lp_tokenizer_open(tokenizer_path ? tokenizer_path : source, &tok, &err) != LP_OK) {
        free(file_text);
        return lp_cli_fail(cmd, &err);
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    char *decoded = NULL;
    int status = LP_EXIT_OK;
    if (tokens) {
        int64_t n_vocab = lp_tokenizer_vocab_size(tok);
        size_t bad = 0;
        if (lp_parse_token_ids(tokens, &ids, &n_ids, &err) != LP_OK) {
            status = lp_cli_fail(cmd, &err);
        } else if (first_out_of_range(ids, n_ids, n_vocab, &bad)) {
            status = lp_cli_usage_error(cmd, "--tokens: id %d (entry %zu) is outside the "
                                        "vocabulary [0, %lld)", (int)ids[bad], bad,
                                        (long long)n_vocab);
        } else if (lp_tokenizer_decode(tok, ids, n_ids, no_special, &decoded, &err) != LP_OK) {
            status = lp_cli_fail(cmd, &err);
        }
    } else if (lp_tokenizer_encode(tok, text, text_len, !no_special, &ids, &n_ids, &err) !=
               LP_OK) {
        status = lp_cli_fail(cmd, &err);
    }
    if (status == LP_EXIT_OK && json) {
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
    } else if (status == LP_EXIT_OK) {
        printf("tokenizer: %s (%s, %lld ids)\n", tokenizer_path ? tokenizer_path : source,
               lp_tokenizer_kind(tok), (long long)lp_tokenizer_vocab_size(tok));
        printf("%zu tokens\n", n_ids);
        /* labels padded to the widest (in code points, up to 24) so pieces line up */
        size_t width = 5;
        for (size_t k = 0; k < n_ids; k++) {
            char *label = lp_tokenizer_label(tok, ids[k]);
            size_t w = label ? display_width(label) + 2 : 3;
            if (w > width)
                width = w > 24 ? 24 : w;
            free(label);
        }
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
        } else {
            printf("ids:");
            for (size_t k = 0; k < n_ids; k++)
                printf(" %d", ids[k]);
            putchar('\n');
        }
    }
    free(decoded);
    free(ids);
    free(file_text);
    lp_tokenizer_close(tok);
    return status;
}

static const lp_cli_spec tokenize_spec = {
    .name = "tokenize",
    .summary = "tokenize text with a model's tokenizer",
    .legacy_usage = TOKENIZE_USAGE,
};

const lp_command lp_command_tokenize = {&tokenize_spec, run_tokenize};
