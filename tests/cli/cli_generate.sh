#!/usr/bin/env bash
# CLI: `loupe trace --generate` on stories260K: the stored sequence (tokens.generated, maps over
# all T+N positions, predictions and full logits for every position), greedy decoding equal to
# a prefill of the same sequence, repeatable sampling, runs.kv_bytes equal to loupe estimate's
# KV figure for every cache dtype, --matvec on quantized weights, and the migration of a
# version-1 database.
source "$(dirname "$0")/cli_lib.sh"

expect_one_line_error "$LOUPE" trace "$TMP/x.gguf" --tokens 1,2 --generate 2 --kv-dtype q4_k
expect_one_line_error "$LOUPE" trace "$TMP/x.gguf" --tokens 1,2 --generate -1
expect_one_line_error "$LOUPE" trace "$TMP/x.gguf" --tokens 1,2 --generate 2 --top-p 0

require_shared
command -v sqlite3 >/dev/null || { echo "note: sqlite3 CLI not found; generation checks skipped"; finish; }
M="$SHARED/models/stories260K/stories260K.gguf"
DB="$TMP/g.db"
q() { sqlite3 "$DB" "$1"; }
expect_eq() { if [ "$1" = "$2" ]; then ok; else bad "$3: got '$2', want '$1'"; fi; }

# Greedy: 5 prompt tokens + 12 generated, every position processed.
expect_stdout_contains "generated 12 tokens:" "$LOUPE" trace "$M" --prompt "Once upon a time" --generate 12 --logits full --db "$DB"
expect_eq "17|12|5" "$(q "SELECT count(*), sum(generated), min(pos) FILTER (WHERE generated = 1) FROM tokens WHERE run_id = 1")" "tokens"
expect_eq "17|40|40" "$(q "SELECT n_tokens, (SELECT count(*) FROM attention WHERE run_id = 1 AND n_q = 17 AND n_k = 17 AND length(probs) = 578), (SELECT count(*) FROM head_stats WHERE run_id = 1) FROM runs WHERE id = 1")" "maps [T+N, T+N]"
expect_eq "17|17" "$(q "SELECT count(DISTINCT pos), (SELECT count(*) FROM logits WHERE run_id = 1) FROM predictions WHERE run_id = 1")" "a prediction and logits row per position"
# the decode rows sit in the lower triangle: the last row's last key (itself) is filled, the
# first row sees key 0 only
expect_eq "0" "$(q "SELECT count(*) FROM attention WHERE run_id = 1 AND (substr(probs, 1 + 2 * (16 * 17 + 16), 2) = x'0000' OR substr(probs, 3, 32) != zeroblob(32))")" "rows of the decode steps stored"

# The same 17 tokens as one prefill: the greedy chain is the prefill's argmax at each position.
ids=$(q "SELECT group_concat(token_id) FROM (SELECT token_id FROM tokens WHERE run_id = 1 ORDER BY pos)")
expect_status 0 "$LOUPE" trace "$M" --tokens "$ids" --logits full --db "$DB"
expect_eq "12" "$(q "SELECT count(*) FROM tokens t JOIN predictions p ON p.run_id = 2 AND p.pos = t.pos - 1 AND p.rank = 0 WHERE t.run_id = 1 AND t.generated = 1 AND p.token_id = t.token_id")" "greedy = prefill argmax"
expect_eq "1" "$(q "SELECT max(abs(a.prob - b.prob)) < 1e-5 FROM predictions a JOIN predictions b ON a.pos = b.pos AND a.rank = b.rank AND a.run_id = 1 AND b.run_id = 2")" "decode probabilities = prefill's"
expect_eq "1" "$(q "SELECT max(abs(a.entropy - b.entropy)) < 1e-5 AND max(abs(a.output_norm - b.output_norm)) < 1e-4 FROM head_stats a JOIN head_stats b ON a.layer = b.layer AND a.head = b.head AND a.run_id = 1 AND b.run_id = 2")" "head statistics over the whole sequence"

# render marks the prompt/generation boundary: a dashed line before query row 5 and key 5 of
# the 17 x 17 map; the prefill-only run of the same tokens has none.
expect_status 0 "$LOUPE" render "$DB" --run 1 --layer 1 --head 2 -o "$TMP/gen.svg"
expect_status 0 "$LOUPE" render "$DB" --run 2 --layer 1 --head 2 -o "$TMP/prefill.svg"
expect_eq "1 0" "$(grep -c stroke-dasharray "$TMP/gen.svg") $(grep -c stroke-dasharray "$TMP/prefill.svg")" "boundary drawn for generation only"
expect_eq "1" "$(grep -c 'generated from 5' "$TMP/gen.svg")" "subtitle names the boundary"

# Seeded sampling repeats itself.
a=$("$LOUPE" trace "$M" --prompt "Once upon a time" --generate 10 --temperature 0.9 --top-k 20 --top-p 0.95 --seed 7 --db "$DB" --maps none | grep generated)
b=$("$LOUPE" trace "$M" --prompt "Once upon a time" --generate 10 --temperature 0.9 --top-k 20 --top-p 0.95 --seed 7 --db "$DB" --maps none | grep generated)
expect_eq "$a" "$b" "same seed, same tokens"
expect_eq "5" "$(q "SELECT count(*) FROM predictions WHERE run_id = 4 AND pos = 0")" "--top-k with --generate filters sampling; 5 predictions stay"

# runs.kv_bytes = loupe estimate's KV cache bytes for that context and dtype.
for dt in f32 f16 bf16 q8_0; do
  out=$("$LOUPE" trace "$M" --tokens 1,403,407 --generate 6 --kv-dtype "$dt" --db "$DB" --maps none)
  want=$("$LOUPE" estimate "$M" --seq 9 --kv-dtype "$dt" --json | sed -n 's/.*"kv_cache": *{[^}]*"bytes": *\([0-9]*\).*/\1/p' | head -1)
  [ -n "$want" ] || want=$("$LOUPE" estimate "$M" --seq 9 --kv-dtype "$dt" --json | tr -d ' \n' | sed -n 's/.*"kv_cache":{[^}]*"bytes":\([0-9]*\).*/\1/p')
  got=$(q "SELECT kv_bytes FROM runs WHERE id = (SELECT max(id) FROM runs) AND kv_dtype = '$dt'")
  expect_eq "$want" "$got" "kv_bytes $dt"
  case "$out" in *"kv cache $dt: $got bytes"*"loupe estimate: $want bytes"*) ok ;; *) bad "summary for $dt: $out" ;; esac
done

# DeepSeek's MLA caches one [latent | k_rope] row per layer and position: kv_bytes = n_layers x
# positions x row bytes (q8_0 pads the 16 + 4 wide row to one 34-byte block), as estimate says.
DS="$TMP/ds"
"$LOUPE" synth "$DS" --like "$(dirname "$0")/../../configs/deepseek-v3.yaml" >/dev/null
for dt in f32 f16 q8_0; do
  out=$("$LOUPE" trace "$DS" --tokens 1,5,9 --generate 6 --kv-dtype "$dt" --db "$DB" --maps none)
  want=$("$LOUPE" estimate "$DS" --seq 9 --kv-dtype "$dt" --json | tr -d ' \n' | sed -n 's/.*"kv_cache":{[^}]*"bytes":\([0-9]*\).*/\1/p')
  got=$(q "SELECT kv_bytes FROM runs WHERE id = (SELECT max(id) FROM runs) AND kv_dtype = '$dt'")
  expect_eq "$want" "$got" "deepseek kv_bytes $dt"
  case "$out" in *"generated 6 tokens"*"kv cache $dt: $got bytes"*"loupe estimate: $want bytes"*) ok ;; *) bad "deepseek summary for $dt: $out" ;; esac
done

# Longrope past its original context (8 here): the cache is rebuilt once, at 8 positions, and the
# run says so; a run that stays inside it records NULL.
PH="$TMP/phi3"
"$LOUPE" synth "$PH" --like "$(dirname "$0")/../../configs/phi-3-mini-4k-instruct.yaml" >/dev/null
python3 -c "import json,sys; p=sys.argv[1]+'/config.json'; c=json.load(open(p)); c['original_max_position_embeddings']=8; c['rope_scaling']={'type':'longrope','short_factor':[1.0,1.2,1.5,2.0],'long_factor':[1.5,3.0,6.0,9.0]}; json.dump(c,open(p,'w'))" "$PH"
expect_stdout_contains "rebuilt at 8 positions" "$LOUPE" trace "$PH" --tokens 1,5,9,13,5 --generate 10 --db "$DB" --maps none
expect_eq "8" "$(q "SELECT kv_rebuilt_at FROM runs WHERE id = (SELECT max(id) FROM runs)")" "kv_rebuilt_at past the switch"
"$LOUPE" trace "$PH" --tokens 1,5,9 --generate 3 --db "$DB" --maps none >/dev/null
expect_eq "" "$(q "SELECT kv_rebuilt_at FROM runs WHERE id = (SELECT max(id) FROM runs)")" "kv_rebuilt_at inside the original context"

# Quantized weights: the decode steps read x as int8 by default and the summary says so;
# --matvec float keeps the prefill's arithmetic; f32 weights print no matvec line.
QM="$SHARED/models/stories260K/quant/stories260K-Q4_K_M.gguf"
expect_one_line_error "$LOUPE" trace "$QM" --tokens 1,2 --generate 2 --matvec int4
expect_stdout_contains "matvec: int8 activations" "$LOUPE" trace "$QM" --prompt "Once upon a time" --generate 4 --maps none --db "$TMP/q.db"
expect_stdout_contains "matvec: float activations" "$LOUPE" trace "$QM" --prompt "Once upon a time" --generate 4 --maps none --matvec float --db "$TMP/q.db"
"$LOUPE" trace "$M" --prompt "Once upon a time" --generate 2 --maps none --db "$TMP/q.db" >"$TMP/out" 2>&1
if grep -q "^matvec:" "$TMP/out"; then bad "f32 weights: a matvec line"; else ok; fi

# A version-1 database (no generated, kv_bytes, kv_dtype) is migrated by the next trace.
OLD="$TMP/old.db"
expect_status 0 "$LOUPE" trace "$M" --tokens 1,403 --db "$OLD" --maps none
sqlite3 "$OLD" "ALTER TABLE tokens DROP COLUMN generated; ALTER TABLE runs DROP COLUMN kv_bytes; ALTER TABLE runs DROP COLUMN kv_dtype; UPDATE meta SET value = '1' WHERE key = 'schema_version';" 2>/dev/null
expect_status 0 "$LOUPE" trace "$M" --tokens 1,403 --generate 2 --db "$OLD" --maps none
expect_eq "2|2|0" "$(sqlite3 "$OLD" "SELECT (SELECT value FROM meta WHERE key = 'schema_version'), (SELECT sum(generated) FROM tokens WHERE run_id = 2), (SELECT sum(generated) FROM tokens WHERE run_id = 1)")" "migrated to version 2"

finish
