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

# llama2.c export versions 1 and 2: the legacy file rewritten in export.py's layouts (version 2
# quantized like its quantize_q80: groups of 64 over each flattened matrix, scale = absmax/127)
if command -v python3 >/dev/null; then
  cat >"$TMP/conv.py" <<'PY'
import struct, sys
src, version, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3]
gs_arg = int(sys.argv[4]) if len(sys.argv) > 4 else 64
b = open(src, 'rb').read()
dim, hidden, L, heads, kv_heads, vocab, seq = struct.unpack('<7i', b[:28])
shared = vocab > 0
vocab = abs(vocab)
kv_dim = dim // heads * kv_heads
pos = 28
def take(n):
    global pos
    out = b[pos:pos + 4 * n]
    pos += 4 * n
    return out
emb = take(vocab * dim)
att = [take(dim) for _ in range(L)]
wq = [take(dim * dim) for _ in range(L)]
wk = [take(kv_dim * dim) for _ in range(L)]
wv = [take(kv_dim * dim) for _ in range(L)]
wo = [take(dim * dim) for _ in range(L)]
ffn = [take(dim) for _ in range(L)]
w1 = [take(hidden * dim) for _ in range(L)]
w2 = [take(dim * hidden) for _ in range(L)]
w3 = [take(hidden * dim) for _ in range(L)]
final = take(dim)
take(seq * (dim // heads))  # freq_cis real + imag
cls = [] if shared else [take(vocab * dim)]
def q80(raw, gs):
    w = struct.unpack('<%df' % (len(raw) // 4), raw)
    codes, scales = bytearray(), []
    for g in range(0, len(w), gs):
        grp = w[g:g + gs]
        s = max(abs(x) for x in grp) / 127.0
        scales.append(s)
        codes += bytes((round(x / s) if s else 0) & 0xff for x in grp)
    return bytes(codes) + struct.pack('<%df' % len(scales), *scales)
hdr = struct.pack('<Ii7iB', 0x616b3432, version, dim, hidden, L, heads, kv_heads, vocab, seq, int(shared))
if version == 2:
    hdr += struct.pack('<i', gs_arg)
hdr += b'\0' * (256 - len(hdr))
mats = [emb] + wq + wk + wv + wo + w1 + w2 + w3 + cls
body = b''.join(att + ffn + [final])
body += b''.join(q80(m, gs_arg) if version == 2 else m for m in mats)
open(dst, 'wb').write(hdr + body)
PY
  python3 "$TMP/conv.py" "$M/stories260K.bin" 1 "$TMP/v1.bin" && python3 "$TMP/conv.py" "$M/stories260K.bin" 2 "$TMP/v2.bin"
  for v in v1 v2; do
    expect_status 0 "$LOUPE" inspect "$TMP/$v.bin"
    expect_status 0 "$LOUPE" inspect --stats "$TMP/$v.bin"
    "$LOUPE" inspect --json "$TMP/$v.bin" >"$TMP/out" 2>"$TMP/err"
    if [ "$(json_total)" = 260032 ]; then ok; else bad "params.total of $v: $(json_total), want 260032"; fi
    expect_stdout_contains "config: tied; weights: no classifier tensor" "$LOUPE" inspect "$TMP/$v.bin"
    expect_stdout_contains "PASS  expected_tensors     all 47 expected tensors present" "$LOUPE" inspect "$TMP/$v.bin"
  done
  expect_stdout_contains "layers.4.w2              ffn_down L4            i8       [64, 172]" "$LOUPE" inspect "$TMP/v2.bin"
  # version 1 computes the same logits as the legacy file, bit for bit; version 2 is refused
  "$LOUPE" trace "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --tokens 1,403,407,261,378 --logits full --db "$TMP/v0.db" >"$TMP/t0" 2>&1
  "$LOUPE" trace "$TMP/v1.bin" --tokenizer "$M/tok512.bin" --tokens 1,403,407,261,378 --logits full --db "$TMP/v1.db" >"$TMP/t1" 2>&1
  if [ -s "$TMP/t1" ] && [ "$(tail -n +2 "$TMP/t0")" = "$(tail -n +2 "$TMP/t1")" ]; then ok; else bad "trace of v1 differs from v0: $(cat "$TMP/t1")"; fi
  if command -v sqlite3 >/dev/null; then
    l0=$(sqlite3 "$TMP/v0.db" "SELECT group_concat(hex(data), '') FROM (SELECT data FROM logits ORDER BY pos)")
    l1=$(sqlite3 "$TMP/v1.db" "SELECT group_concat(hex(data), '') FROM (SELECT data FROM logits ORDER BY pos)")
    if [ ${#l0} -eq $((5 * 512 * 8)) ] && [ "$l0" = "$l1" ]; then ok; else bad "v1 logits differ from v0 (${#l0} vs ${#l1} hex digits)"; fi
  fi
  expect_one_line_error "$LOUPE" trace "$TMP/v2.bin" --tokens 1,403 --db "$TMP/v2.db"
  expect_stderr_contains "dtype i8 is not supported by the forward pass" "$LOUPE" trace "$TMP/v2.bin" --tokens 1,403 --db "$TMP/v2.db"
  # corrupted headers: one line, exit 2
  patch_at() { # patch_at SRC DST OFFSET INT32
    cp "$1" "$2" && chmod u+w "$2"
    python3 -c "import struct,sys; f=open(sys.argv[1],'r+b'); f.seek(int(sys.argv[2])); f.write(struct.pack('<i', int(sys.argv[3])))" "$2" "$3" "$4"
  }
  patch_at "$TMP/v1.bin" "$TMP/ver3.bin" 4 3
  expect_one_line_error "$LOUPE" inspect "$TMP/ver3.bin"
  expect_stderr_contains "version at byte 4 is 3" "$LOUPE" inspect "$TMP/ver3.bin"
  patch_at "$TMP/v2.bin" "$TMP/gs0.bin" 37 0
  expect_one_line_error "$LOUPE" inspect "$TMP/gs0.bin"
  expect_stderr_contains "group_size at byte 37 is 0" "$LOUPE" inspect "$TMP/gs0.bin"
  patch_at "$TMP/v2.bin" "$TMP/gs48.bin" 37 48
  expect_one_line_error "$LOUPE" inspect "$TMP/gs48.bin"
  expect_stderr_contains "group_size at byte 37 is 48" "$LOUPE" inspect "$TMP/gs48.bin"
  patch_at "$TMP/v2.bin" "$TMP/gs32.bin" 37 32 # divides dim, but the scales no longer fit
  expect_one_line_error "$LOUPE" inspect "$TMP/gs32.bin"
  patch_at "$TMP/v1.bin" "$TMP/unshared.bin" 36 0 # claims a classifier the file lacks
  expect_one_line_error "$LOUPE" inspect "$TMP/unshared.bin"
  for v in v1 v2; do
    head -c 200000 "$TMP/$v.bin" >"$TMP/cut_$v.bin"
    expect_one_line_error "$LOUPE" inspect "$TMP/cut_$v.bin"
    head -c 100 "$TMP/$v.bin" >"$TMP/hdr_$v.bin"
    expect_one_line_error "$LOUPE" inspect "$TMP/hdr_$v.bin"
  done
else
  echo "SKIP (partly): python3 not found; llama2.c version 1/2 cases not run"
fi

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
