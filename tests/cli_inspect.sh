#!/usr/bin/env bash
# CLI: loupe inspect on generated files (malformed ones exit 2 with one line; a multi-GiB sparse
# file is inspected from its header alone) and on ../shared's stories260K in all its formats.
source "$(dirname "$0")/cli_lib.sh"

# le64 N: N as 8 little-endian bytes on stdout
le64() {
  local n=$1 i
  for i in 0 1 2 3 4 5 6 7; do
    printf "\\$(printf '%03o' $(((n >> (8 * i)) & 255)))"
  done
}

# write_st FILE HEADER DATA_BYTES: a raw safetensors file with zeroed data
write_st() {
  { le64 "${#2}"; printf '%s' "$2"; } >"$1"
  head -c "$3" /dev/zero >>"$1"
}

# json_total: params.total of the last --json run
json_total() { grep -m1 -F '"total":' "$TMP/out" | tr -dc '0-9'; }

# --- usage --------------------------------------------------------------------------------------
expect_status 0 "$LOUPE" inspect --help
expect_stdout_contains "usage: loupe inspect" "$LOUPE" inspect --help
expect_one_line_error "$LOUPE" inspect
expect_one_line_error "$LOUPE" inspect --frobnicate x.safetensors
expect_one_line_error "$LOUPE" inspect "$TMP/does-not-exist.safetensors"
expect_one_line_error "$LOUPE" inspect "$TMP/a.safetensors" "$TMP/b.safetensors"

# --- generated safetensors ----------------------------------------------------------------------
F="$TMP/ok.safetensors"
write_st "$F" '{"w": {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 12]}, "b": {"dtype": "I8", "shape": [4], "data_offsets": [12, 16]}}' 16
expect_status 0 "$LOUPE" inspect "$F"
expect_stdout_contains "params.total  10" "$LOUPE" inspect "$F"
"$LOUPE" inspect --json --stats "$F" >"$TMP/out" 2>"$TMP/err"
if [ "$(json_total)" = "10" ]; then ok; else bad "--json params.total of ok.safetensors: $(json_total)"; fi
if grep -q '"absmax": 0' "$TMP/out" && grep -q '"nan": 0' "$TMP/out"; then ok; else bad "--stats of zeros"; fi

B="$TMP/bad.safetensors"
printf '\x10\x00\x00' >"$B"
expect_one_line_error "$LOUPE" inspect "$B"
expect_stderr_contains "too short" "$LOUPE" inspect "$B"
{ le64 4096; printf '{}      '; } >"$B"
expect_one_line_error "$LOUPE" inspect "$B"
expect_stderr_contains "header length 4096 at byte 0 runs past the end" "$LOUPE" inspect "$B"
write_st "$B" '{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}' 12
expect_one_line_error "$LOUPE" inspect "$B"
expect_stderr_contains "overlap" "$LOUPE" inspect "$B"
write_st "$B" '{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}' 8
expect_one_line_error "$LOUPE" inspect "$B"
expect_stderr_contains "past the end of the file" "$LOUPE" inspect "$B"
write_st "$B" '{"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}' 8
expect_one_line_error "$LOUPE" inspect "$B"
expect_stderr_contains "needs 12" "$LOUPE" inspect "$B"
write_st "$B" '{"a": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}}' 1
expect_one_line_error "$LOUPE" inspect "$B"
write_st "$B" '{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}' 8
expect_one_line_error "$LOUPE" inspect "$B"
expect_stderr_contains "duplicate" "$LOUPE" inspect "$B"

# a PyTorch checkpoint where a llama2.c .bin is expected (zip magic)
printf 'PK\x03\x04rest-of-a-zip-archive...' >"$TMP/pytorch_model.bin"
expect_one_line_error "$LOUPE" inspect "$TMP/pytorch_model.bin"
expect_stderr_contains "a PyTorch checkpoint" "$LOUPE" inspect "$TMP/pytorch_model.bin"

# --- a 4 GiB sparse file: header only ------------------------------------------------------------
# The data region is a hole; inspect (no --stats) must succeed from the header alone. The
# resident-page measurement (mincore) is in test_weights: test_sparse_header_only.
S="$TMP/sparse.safetensors"
H='{"model.embed_tokens.weight": {"dtype": "BF16", "shape": [262144, 4096], "data_offsets": [0, 2147483648]}, "lm_head.weight": {"dtype": "BF16", "shape": [262144, 4096], "data_offsets": [2147483648, 4294967296]}}'
{ le64 "${#H}"; printf '%s' "$H"; } >"$S"
if truncate -s $((8 + ${#H} + 4294967296)) "$S" 2>/dev/null; then
  start=$(date +%s)
  expect_status 0 "$LOUPE" inspect "$S"
  expect_stdout_contains "params.total  2,147,483,648" "$LOUPE" inspect "$S"
  expect_stdout_contains "16 sampled 4 KiB windows" "$LOUPE" inspect "$S"
  elapsed=$(($(date +%s) - start))
  if [ "$elapsed" -le 10 ]; then ok; else bad "inspect of a sparse 4 GiB file took ${elapsed}s"; fi
  rm -f "$S"
fi

# --- stories260K ---------------------------------------------------------------------------------
if [ -z "$SHARED" ] || [ ! -d "$SHARED" ]; then
  echo "SKIP (partly): ../shared not found (set LOUPE_SHARED); golden cases not run"
  finish
  exit $?
fi
M="$SHARED/models/stories260K"
expect_status 0 "$LOUPE" inspect "$M/hf"
expect_status 0 "$LOUPE" inspect "$M/hf/model.safetensors"
expect_status 0 "$LOUPE" inspect "$M/stories260K.bin"
expect_status 0 "$LOUPE" inspect "$M/stories260K.gguf"
for f in "$M/hf --json:260032" "$M/stories260K.bin --json:260032" "$M/stories260K.gguf --json:292800"; do
  args=${f%%:*}
  want=${f##*:}
  # shellcheck disable=SC2086
  "$LOUPE" inspect $args >"$TMP/out" 2>"$TMP/err"
  if [ "$(json_total)" = "$want" ]; then ok; else bad "params.total of $args: $(json_total), want $want"; fi
done
expect_stdout_contains "PASS  expected_tensors     all 47 expected tensors present" "$LOUPE" inspect "$M/hf"
expect_stdout_contains "is a byte copy of the embedding" "$LOUPE" inspect "$M/stories260K.gguf"
expect_stdout_contains "config: tied" "$LOUPE" inspect "$M/stories260K.bin"
expect_stdout_contains '"name": "layers.3.wq"' "$LOUPE" inspect --json "$M/stories260K.bin"
expect_stdout_contains '"role": "attn_q"' "$LOUPE" inspect --json "$M/stories260K.bin"
expect_stdout_contains "format        config (no weights)" "$LOUPE" inspect "$M/hf/config.json"
for q in Q4_K_M Q6_K TQ2_0; do
  expect_status 0 "$LOUPE" inspect --stats "$M/quant/stories260K-$q.gguf"
done
expect_stdout_contains '"absmax":' "$LOUPE" inspect --stats --json "$M/quant/stories260K-TQ2_0.gguf"
expect_stdout_contains "q4_0" "$LOUPE" inspect "$M/quant/stories260K-TQ2_0.gguf"
expect_stdout_contains "(q8_0) is a re-quantized copy of the embedding (q5_0)" "$LOUPE" inspect "$M/quant/stories260K-Q4_K_M.gguf"

# a config that disagrees with the weights: exit 1
mkdir -p "$TMP/untied"
sed 's/"tie_word_embeddings": true/"tie_word_embeddings": false/' "$M/hf/config.json" >"$TMP/untied/config.json"
ln -s "$M/hf/model.safetensors" "$TMP/untied/model.safetensors"
expect_status 1 "$LOUPE" inspect "$TMP/untied"
expect_stdout_contains "FAIL  expected_tensors" "$LOUPE" inspect "$TMP/untied"
expect_stdout_contains '"passed": false' "$LOUPE" inspect --json "$TMP/untied"
mkdir -p "$TMP/wide"
sed 's/"intermediate_size": 172/"intermediate_size": 176/' "$M/hf/config.json" >"$TMP/wide/config.json"
ln -s "$M/hf/model.safetensors" "$TMP/wide/model.safetensors"
expect_status 1 "$LOUPE" inspect "$TMP/wide"
expect_stdout_contains "is [172, 64], expected [176, 64]" "$LOUPE" inspect "$TMP/wide"

# a tokenizer where a checkpoint is expected
expect_one_line_error "$LOUPE" inspect "$M/tok512.bin"
expect_stderr_contains "llama2.c tokenizer.bin" "$LOUPE" inspect "$M/tok512.bin"

# truncated and patched copies of the real files: exit 2, one line
head -c 5000 "$M/hf/model.safetensors" >"$TMP/cut.safetensors"
expect_one_line_error "$LOUPE" inspect "$TMP/cut.safetensors"
head -c 100000 "$M/stories260K.bin" >"$TMP/cut.bin"
expect_one_line_error "$LOUPE" inspect "$TMP/cut.bin"
head -c 100000 "$M/stories260K.gguf" >"$TMP/cut.gguf"
expect_one_line_error "$LOUPE" inspect "$TMP/cut.gguf"
# GGUF v3: magic, version, then u64 tensor count at byte 8: claim 2^40 tensors
cp "$M/stories260K.gguf" "$TMP/count.gguf" && chmod u+w "$TMP/count.gguf"
le64 1099511627776 | dd of="$TMP/count.gguf" bs=1 seek=8 conv=notrunc status=none
expect_one_line_error "$LOUPE" inspect "$TMP/count.gguf"
# the first metadata key's string length (u64 at byte 24) far past the end of the file
cp "$M/stories260K.gguf" "$TMP/strlen.gguf" && chmod u+w "$TMP/strlen.gguf"
le64 1152921504606846976 | dd of="$TMP/strlen.gguf" bs=1 seek=24 conv=notrunc status=none
expect_one_line_error "$LOUPE" inspect "$TMP/strlen.gguf"
# an unknown quant type: token_embd.weight's type field follows its name, n_dims and 2 dims
cp "$M/stories260K.gguf" "$TMP/type.gguf" && chmod u+w "$TMP/type.gguf"
name_at=$(grep -obUa "token_embd.weight" "$TMP/type.gguf" | head -1 | cut -d: -f1)
if [ -n "$name_at" ]; then
  printf '\x63\x00\x00\x00' | dd of="$TMP/type.gguf" bs=1 seek=$((name_at + 17 + 4 + 16)) conv=notrunc status=none
  expect_one_line_error "$LOUPE" inspect "$TMP/type.gguf"
else
  bad "token_embd.weight not found in the GGUF"
fi
finish
