#!/usr/bin/env bash
# loupe inspect on corrupt GGUF files (one line on stderr, exit 2, the offset named) and on the
# real llama.cpp-quantized stories260K files. $1 = the test_gguf binary, which writes the files.
source "$(dirname "$0")/cli_lib.sh"
GEN=${1:?usage: cli_gguf.sh TEST_GGUF_BINARY}

# What needs no ../shared (LOUPE_PART=local runs only this, LOUPE_PART=shared skips it).
if local_part; then
  mkdir -p "$TMP/corrupt"
  if ! "$GEN" write-corrupt "$TMP/corrupt"; then
    bad "test_gguf write-corrupt failed"
  fi
  n_files=0
  for f in "$TMP"/corrupt/*.gguf; do
    n_files=$((n_files + 1))
    expect_one_line_error "$LOUPE" inspect "$f"
    if grep -q "^loupe inspect: .*$(basename "$f")" "$TMP/err" && grep -q "offset" "$TMP/err"; then
      ok
    else
      bad "$(basename "$f"): message lacks the command, the file or the offset: $(cat "$TMP/err")"
    fi
  done
  [ "$n_files" -ge 40 ] && ok || bad "only $n_files corrupt files were generated"

  expect_stderr_contains "tensor count 1000000000000000000 exceeds" "$LOUPE" inspect "$TMP/corrupt/huge_tensor_count.gguf"
  expect_stderr_contains "GGUF version 1 is not supported" "$LOUPE" inspect "$TMP/corrupt/gguf_v1.gguf"
  expect_stderr_contains "unknown ggml type id 999" "$LOUPE" inspect "$TMP/corrupt/unknown_type_999.gguf"
fi

require_shared
Q="$SHARED/models/stories260K/quant"
for t in Q4_K_M Q6_K TQ2_0; do
  expect_status 0 "$LOUPE" inspect "$Q/stories260K-$t.gguf"
  expect_status 0 "$LOUPE" inspect --stats "$Q/stories260K-$t.gguf"
done
expect_stdout_contains "q4_0" "$LOUPE" inspect "$Q/stories260K-TQ2_0.gguf"
expect_stdout_contains "adjacent" "$LOUPE" inspect "$SHARED/models/stories260K/stories260K.gguf"
finish
