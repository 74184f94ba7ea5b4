#!/usr/bin/env bash
# Valid files that are merely minimal: a GGUF without hyperparameters or without
# general.architecture, a vocabulary-only GGUF, safetensors with no config beside them. Each is
# listed (metadata, tensors); a description that lacks required keys is one failed check (exit 1).
source "$(dirname "$0")/cli_lib.sh"
MK="$(dirname "$0")/mkgguf.py"
for k in arch_only no_arch vocab_only vocab_bpe; do
  python3 "$MK" "$k" "$TMP/$k.gguf" || bad "mkgguf.py $k failed"
done

# general.architecture and block_count only: metadata and the tensor listed, the check fails
expect_status 1 "$LOUPE" inspect "$TMP/arch_only.gguf"
grep -qF "FAIL  architecture         incomplete: arch_only.gguf: missing required key 'llama.embedding_length'" "$TMP/out" && ok || bad "arch_only: no failed architecture check: $(cat "$TMP/out")"
grep -qE '^  llama.block_count +2$' "$TMP/out" && ok || bad "arch_only: metadata not listed"
grep -qE '^  token_embd.weight +token_embd +f32 +\[8\]' "$TMP/out" && ok || bad "arch_only: tensor not listed"
[ ! -s "$TMP/err" ] && ok || bad "arch_only: stderr not empty: $(cat "$TMP/err")"

expect_status 1 "$LOUPE" inspect --json "$TMP/arch_only.gguf"
python3 - "$TMP/out" <<'PY' && ok || bad "arch_only --json: wrong document"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["architecture"] is None
assert d["metadata"] == {"general.architecture": "llama", "llama.block_count": 2}, d["metadata"]
assert [t["name"] for t in d["tensors"]] == ["token_embd.weight"]
c = [c for c in d["checks"] if c["name"] == "architecture"]
assert len(c) == 1 and c[0]["passed"] is False and "llama.embedding_length" in c[0]["detail"]
PY

# no general.architecture at all
expect_status 1 "$LOUPE" inspect "$TMP/no_arch.gguf"
grep -qF "missing required key 'general.architecture'" "$TMP/out" && ok || bad "no_arch: check lacks the key"
grep -qE '^  general.name +"bare"$' "$TMP/out" && ok || bad "no_arch: metadata not listed"

# vocabulary only: inspect lists it, tokenize works (SentencePiece and byte-level BPE)
expect_status 1 "$LOUPE" inspect "$TMP/vocab_only.gguf"
grep -qF "missing required key 'llama.block_count'" "$TMP/out" && ok || bad "vocab_only: check lacks the key"
grep -qE '^  tokenizer.ggml.tokens +\{"array":"string","length":265' "$TMP/out" && ok || bad "vocab_only: array not summarized"
out=$("$LOUPE" tokenize "$TMP/vocab_only.gguf" --text "hi hi" --json)
[ "$out" = '{"ids": [1, 264, 264], "pieces": ["<s>", "▁hi", "▁hi"]}' ] && ok || bad "vocab_only tokenize: $out"
out=$("$LOUPE" tokenize "$TMP/vocab_only.gguf" --tokens 1,264,264 --no-special --json)
[ "$out" = '{"ids": [1, 264, 264], "pieces": ["<s>", "▁hi", "▁hi"], "text": "hi hi"}' ] && ok || bad "vocab_only decode: $out"
out=$("$LOUPE" tokenize "$TMP/vocab_bpe.gguf" --text "hi hi" --json)
[ "$out" = '{"ids": [96, 97], "pieces": ["hi", "Ġhi"]}' ] && ok || bad "vocab_bpe tokenize: $out"
# a user-defined token is matched in the text and decoded as its text, as llama.cpp does (the
# byte-level alphabet would make 'À' the lone byte 0xC0: invalid UTF-8)
out=$("$LOUPE" tokenize "$TMP/vocab_bpe.gguf" --text "hiÀ hi<|EOT|>" --json)
[ "$out" = '{"ids": [96, 98, 97, 99], "pieces": ["hi", "À", "Ġhi", "<|EOT|>"]}' ] && ok || bad "user-defined encode: $out"
out=$("$LOUPE" tokenize "$TMP/vocab_bpe.gguf" --tokens 96,98,97,99 --json)
[ "$out" = '{"ids": [96, 98, 97, 99], "pieces": ["hi", "À", "Ġhi", "<|EOT|>"], "text": "hiÀ hi<|EOT|>"}' ] && ok || bad "user-defined decode: $out"

# the models that need the description still refuse it, in one line
expect_one_line_error "$LOUPE" estimate "$TMP/arch_only.gguf"
grep -qF "missing required key 'llama.embedding_length'" "$TMP/err" && ok || bad "estimate: $(cat "$TMP/err")"

# safetensors with no config.json beside them: listed, no checks, exit 0
python3 - "$TMP/lonely.safetensors" <<'PY' || bad "could not write lonely.safetensors"
import json, struct, sys
h = json.dumps({"a.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<4f", 1, 2, 3, 4))
PY
expect_status 0 "$LOUPE" inspect "$TMP/lonely.safetensors"
grep -qE '^  a.weight +unknown +f32 +\[2, 2\]' "$TMP/out" && ok || bad "lonely: tensor not listed"
grep -qF "architecture  none found" "$TMP/out" && ok || bad "lonely: architecture line"
mkdir "$TMP/lonely" && cp "$TMP/lonely.safetensors" "$TMP/lonely/model.safetensors"
expect_status 0 "$LOUPE" inspect "$TMP/lonely"
# configs with keys loupe does not read: valid; --strict lists them in a failed check
mkdir "$TMP/cfg"
cat >"$TMP/cfg/config.json" <<'JSON'
{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
 "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 128,
 "use_cache": true, "attention_dropout": 0.0, "frobnicate_heads": 3, "text_config_like": {},
 "transformers_version": "4.40.0"}
JSON
expect_status 0 "$LOUPE" inspect "$TMP/cfg/config.json"
grep -qF config_keys "$TMP/out" && bad "config_keys listed without --strict" || ok
expect_status 1 "$LOUPE" inspect --strict "$TMP/cfg/config.json"
grep -qF "FAIL  config_keys          2 keys of $TMP/cfg/config.json not read by loupe: frobnicate_heads, text_config_like" "$TMP/out" && ok || bad "--strict: $(cat "$TMP/out")"
expect_status 1 "$LOUPE" inspect --strict --json "$TMP/cfg"
python3 - "$TMP/out" <<'PY' && ok || bad "--strict --json: wrong checks"
import json, sys
c = json.load(open(sys.argv[1]))["checks"]
assert len(c) == 1 and c[0]["name"] == "config_keys" and c[0]["passed"] is False, c
assert "frobnicate_heads, text_config_like" in c[0]["detail"], c
PY
# beside weights: the check joins the others
cp "$TMP/lonely.safetensors" "$TMP/cfg/model.safetensors"
expect_status 1 "$LOUPE" inspect --strict "$TMP/cfg"
grep -qF "FAIL  config_keys" "$TMP/out" && ok || bad "--strict with weights: no config_keys check"
python3 - "$TMP/cfg/config.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
del d["frobnicate_heads"], d["text_config_like"]
json.dump(d, open(sys.argv[1], "w"))
PY
expect_stdout_contains "PASS  config_keys          every key of $TMP/cfg/config.json is read" "$LOUPE" inspect --strict "$TMP/cfg/config.json"
finish
