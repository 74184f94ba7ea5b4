#!/usr/bin/env bash
# CLI: `loupe tokenize` output formats, special tokens, decoding and one-line errors.
source "$(dirname "$0")/cli_lib.sh"

# What needs no ../shared (LOUPE_PART=local runs only this, LOUPE_PART=shared skips it).
if local_part; then
  # usage errors need no shared data
  expect_one_line_error "$LOUPE" tokenize
  expect_one_line_error "$LOUPE" tokenize "$TMP/nothing.json" --text hi
  expect_stderr_contains "no such file" "$LOUPE" tokenize "$TMP/nothing.json" --text hi
  printf '{\n "model": {"vocab": {"a": 0,,}}\n}\n' >"$TMP/bad.json"
  expect_one_line_error "$LOUPE" tokenize "$TMP/bad.json" --text hi
  expect_stderr_contains "bad.json:2:" "$LOUPE" tokenize "$TMP/bad.json" --text hi
  printf '{"model": {"type": "WordPiece", "vocab": {"a": 0}}}' >"$TMP/wp.json"
  expect_one_line_error "$LOUPE" tokenize "$TMP/wp.json" --text hi
  expect_stderr_contains "unk_token '[UNK]'" "$LOUPE" tokenize "$TMP/wp.json" --text hi

  # WordPiece (BERT): the tokenizer.json in tests/inspect/wordpiece, ids derived by hand
  WP="${LOUPE_SOURCE:-.}/tests/inspect/wordpiece/tokenizer.json"
  out=$("$LOUPE" tokenize "$WP" --text "Caf$(printf '\xc3\xa9') unaffable, $(printf '\xe4\xb8\xad')qqq!" --json)
  want='{"ids": [2, 6, 7, 8, 9, 11, 16, 1, 13, 3], "pieces": ["[CLS]", "cafe", "un", "##aff", "##able", ",", "中", "[UNK]", "!", "[SEP]"]}'
  if [ "$out" = "$want" ]; then ok; else bad "wordpiece json: got '$out', want '$want'"; fi
  out=$("$LOUPE" tokenize "$WP" --text "Hello World" --no-special --json)
  want='{"ids": [18, 19], "pieces": ["hello", "world"]}'
  if [ "$out" = "$want" ]; then ok; else bad "wordpiece --no-special: got '$out', want '$want'"; fi
  out=$("$LOUPE" tokenize "$WP" --tokens 2,7,8,9,11,18,3 --no-special --json)
  case "$out" in *'"text": "unaffable, hello"'*) ok ;; *) bad "wordpiece decode: got '$out'" ;; esac
  expect_stdout_contains "(wordpiece, 60 ids)" "$LOUPE" tokenize "$WP" --text hello
  # Unigram: a hand-made SentencePiece-style file, ids worked out from the scores by hand
  # ("\u2581a" + "bc" beats the longest first piece "\u2581ab" + "c"; x, y unknown: one <unk>)
  printf '%s' '{"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true}, "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true}, "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["\u2581", -1.0], ["\u2581a", -2.0], ["b", -2.0], ["\u2581ab", -5.0], ["c", -3.0], ["bc", -1.5]]}}' >"$TMP/unigram.json"
  out=$("$LOUPE" tokenize "$TMP/unigram.json" --text "abc xy" --json)
  want='{"ids": [2, 6, 1, 0], "pieces": ["▁a", "bc", "▁", "<unk>"]}'
  if [ "$out" = "$want" ]; then ok; else bad "unigram json: got '$out', want '$want'"; fi
  out=$("$LOUPE" tokenize "$TMP/unigram.json" --tokens 2,6,2,6 --json)
  case "$out" in *'"text": "abc abc"'*) ok ;; *) bad "unigram decode: got '$out'" ;; esac
  expect_stdout_contains "(unigram, 7 ids)" "$LOUPE" tokenize "$TMP/unigram.json" --text abc
  printf '%s' '{"model": {"type": "Unigram", "vocab": [["a", -1.0]]}}' >"$TMP/unigram_nounk.json"
  expect_one_line_error "$LOUPE" tokenize "$TMP/unigram_nounk.json" --text a
  expect_stderr_contains "model.unk_id" "$LOUPE" tokenize "$TMP/unigram_nounk.json" --text a
fi

require_shared
TOK="$SHARED/tokenizers"

# exact JSON output
out=$("$LOUPE" tokenize "$TOK/gpt2/tokenizer.json" --text "Hello world" --json)
want='{"ids": [15496, 995], "pieces": ["Hello", "Ġworld"]}'
if [ "$out" = "$want" ]; then ok; else bad "gpt2 json: got '$out', want '$want'"; fi

# the folder works as well as the file; Llama adds <s> unless --no-special
out=$("$LOUPE" tokenize "$TOK/tinyllama" --text "Hello world" --json)
want='{"ids": [1, 15043, 3186], "pieces": ["<s>", "▁Hello", "▁world"]}'
if [ "$out" = "$want" ]; then ok; else bad "tinyllama json: got '$out', want '$want'"; fi
out=$("$LOUPE" tokenize "$TOK/tinyllama" --text "Hello world" --json --no-special)
want='{"ids": [15043, 3186], "pieces": ["▁Hello", "▁world"]}'
if [ "$out" = "$want" ]; then ok; else bad "tinyllama --no-special: got '$out', want '$want'"; fi

# text table: labels quoted with the space shown, newline escaped
expect_stdout_contains '" world"' "$LOUPE" tokenize "$TOK/gpt2/tokenizer.json" --text "Hello world"
expect_stdout_contains '"\n"' "$LOUPE" tokenize "$TOK/gpt2/tokenizer.json" --text "a
b"
expect_stdout_contains "ids: 15496 995" "$LOUPE" tokenize "$TOK/gpt2/tokenizer.json" --text "Hello world"

# --prompt-file drops one final line break, as loupe trace does; a second one stays (id 198)
printf 'Hello world\r\n' >"$TMP/prompt.txt"
out=$("$LOUPE" tokenize "$TOK/gpt2/tokenizer.json" --prompt-file "$TMP/prompt.txt" --json)
want='{"ids": [15496, 995], "pieces": ["Hello", "Ġworld"]}'
if [ "$out" = "$want" ]; then ok; else bad "prompt-file: got '$out', want '$want'"; fi
printf 'Hello world\n\n' >"$TMP/prompt2.txt"
out=$("$LOUPE" tokenize "$TOK/gpt2/tokenizer.json" --prompt-file "$TMP/prompt2.txt" --json)
want='{"ids": [15496, 995, 198], "pieces": ["Hello", "Ġworld", "Ċ"]}'
if [ "$out" = "$want" ]; then ok; else bad "prompt-file: got '$out', want '$want'"; fi

# decoding ids; special tokens dropped with --no-special
out=$("$LOUPE" tokenize "$TOK/qwen3" --tokens 9707,1879,151645 --json)
want='{"ids": [9707, 1879, 151645], "pieces": ["Hello", "Ġworld", "<|im_end|>"], "text": "Hello world<|im_end|>"}'
if [ "$out" = "$want" ]; then ok; else bad "qwen3 --tokens: got '$out', want '$want'"; fi
out=$("$LOUPE" tokenize "$TOK/gpt2" --tokens 15496,995,50256 --no-special --json)
case "$out" in *'"text": "Hello world"}') ok ;; *) bad "--no-special decode: got '$out'" ;; esac
# a partial UTF-8 sequence (3 of the 4 bytes of U+1F389) is one U+FFFD in JSON, as in Rust
out=$("$LOUPE" tokenize "$TOK/gpt2" --tokens 12520,236 --json)
case "$out" in *'"text": " \ufffd"}') ok ;; *) bad "partial UTF-8: got '$out'" ;; esac
out=$("$LOUPE" tokenize "$TOK/gpt2" --tokens 12520,236,231 --json)
case "$out" in *'"text": " 🎉"}') ok ;; *) bad "whole emoji: got '$out'" ;; esac
expect_one_line_error "$LOUPE" tokenize "$TOK/gpt2" --tokens 9707,50257
expect_one_line_error "$LOUPE" tokenize "$TOK/gpt2" --tokens 12,abc
expect_one_line_error "$LOUPE" tokenize "$TOK/gpt2" --text a --tokens 1

# a config.json (or any model file) finds the tokenizer.json beside it
mkdir -p "$TMP/model"
printf '{"model_type": "gpt2"}\n' >"$TMP/model/config.json"
cp "$TOK/gpt2/tokenizer.json" "$TMP/model/tokenizer.json"
out=$("$LOUPE" tokenize "$TMP/model/config.json" --text "Hello world" --json)
want='{"ids": [15496, 995], "pieces": ["Hello", "Ġworld"]}'
if [ "$out" = "$want" ]; then ok; else bad "config.json beside tokenizer.json: got '$out'"; fi
rm "$TMP/model/tokenizer.json"
expect_one_line_error "$LOUPE" tokenize "$TMP/model/config.json" --text hi
expect_stderr_contains "--tokenizer FILE" "$LOUPE" tokenize "$TMP/model/config.json" --text hi

# llama2.c checkpoint: the tokenizer is given with --tokenizer; tok512.bin found in the folder
STORIES="$SHARED/models/stories260K"
out=$("$LOUPE" tokenize "$STORIES/stories260K.bin" --tokenizer "$STORIES/tok512.bin" --text "Once upon a time" --json)
case "$out" in '{"ids": [1, 403, 407, 261, 378], '*) ok ;; *) bad "tok512.bin: got '$out'" ;; esac
out=$("$LOUPE" tokenize "$STORIES/stories260K.gguf" --text "Once upon a time" --json)
case "$out" in '{"ids": [1, 403, 407, 261, 378], '*) ok ;; *) bad "gguf vocab: got '$out'" ;; esac
expect_status 0 "$LOUPE" tokenize "$STORIES" --text "Once upon a time"
expect_stdout_contains "ids: 1 403 407 261 378" "$LOUPE" tokenize "$STORIES" --text "Once upon a time"

finish
