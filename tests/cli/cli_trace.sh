#!/usr/bin/env bash
# CLI: `loupe trace` on stories260K in its three formats, what lands in the database, and
# one-line errors with exit 2 for bad input.
source "$(dirname "$0")/cli_lib.sh"

DB="$TMP/t.db"

# What needs no ../shared (LOUPE_PART=local runs only this, LOUPE_PART=shared skips it).
if local_part; then
  # Usage errors need no model.
  expect_one_line_error "$LOUPE" trace
  expect_one_line_error "$LOUPE" trace "$TMP/no-such-model.gguf" --tokens 1,2
  expect_one_line_error "$LOUPE" trace "$TMP/x.gguf" --prompt hi --tokens 1,2
  expect_one_line_error "$LOUPE" trace "$TMP/x.gguf" --tokens 1,,2
  expect_one_line_error "$LOUPE" trace "$TMP/x.gguf" --tokens 1,2 --maps f8
  expect_one_line_error "$LOUPE" trace "$TMP/x.gguf" --tokens 1,2 --threads 0
  expect_one_line_error "$LOUPE" trace "$TMP/x.gguf" --tokens 1,2 --logits some
  expect_one_line_error "$LOUPE" trace "$TMP/x.gguf" --tokens 1,2 --frobnicate
  expect_stderr_contains "loupe trace: " "$LOUPE" trace "$TMP/no-such-model.gguf" --tokens 1,2
fi

require_shared
M="$SHARED/models/stories260K"
have_sqlite=0
command -v sqlite3 >/dev/null && have_sqlite=1
q() { sqlite3 "$DB" "$1"; }
expect_eq() { # expect_eq WANT GOT WHAT
  if [ "$1" = "$2" ]; then ok; else bad "$3: got '$2', want '$1'"; fi
}

# GGUF with its own vocabulary: the published next-token distribution for "Once upon a time".
expect_status 0 "$LOUPE" trace "$M/stories260K.gguf" --prompt "Once upon a time" --db "$DB" --threads 1
expect_stdout_contains '"," 0.969 " there" 0.029' "$LOUPE" trace "$M/stories260K.gguf" --prompt "Once upon a time" --db "$DB"
expect_stdout_contains "5 tokens, 5 layers x 8 heads" "$LOUPE" trace "$M/stories260K.gguf" --prompt "Once upon a time" --db "$DB"

# llama2.c: a checkpoint finds its tok*.bin beside it (own database, so the run ids below stay);
# alone in a folder it needs --tokenizer for text, not for ids.
expect_stdout_contains '"," 0.969' "$LOUPE" trace "$M/stories260K.bin" --prompt "Once upon a time" --db "$TMP/found_tok.db"
mkdir -p "$TMP/alone" && cp "$M/stories260K.bin" "$TMP/alone/"
expect_one_line_error "$LOUPE" trace "$TMP/alone/stories260K.bin" --prompt "Once upon a time" --db "$DB"
expect_stderr_contains "tok*.bin" "$LOUPE" trace "$TMP/alone/stories260K.bin" --prompt "Once upon a time" --db "$DB"
expect_stdout_contains '"," 0.969' "$LOUPE" trace "$M/stories260K.bin" --tokenizer "$M/tok512.bin" --prompt "Once upon a time" --db "$DB"
expect_status 0 "$LOUPE" trace "$M/stories260K.bin" --tokens 1,403,407,261,378 --db "$DB"
# HF folder (no tokenizer.json there): ids work, the summary shows ids.
expect_stdout_contains "<432> 0.969" "$LOUPE" trace "$M/hf" --tokens 1,403,407,261,378 --db "$DB"

# Bad input against a real model: one line, exit 2.
expect_one_line_error "$LOUPE" trace "$M/stories260K.gguf" --tokens 1,512 --db "$DB"
expect_stderr_contains "512" "$LOUPE" trace "$M/stories260K.gguf" --tokens 1,512 --db "$DB"
expect_one_line_error "$LOUPE" trace "$M/stories260K.gguf" --tokens 1,2 --layers 5 --db "$DB"
expect_one_line_error "$LOUPE" trace "$M/stories260K.gguf" --tokens 1,2 --heads 1-9 --db "$DB"
expect_one_line_error "$LOUPE" trace "$M/stories260K.gguf" --prompt-file "$TMP/none.txt" --db "$DB"
expect_one_line_error "$LOUPE" trace "$M/README.md" --tokens 1,2 --db "$DB"

if [ "$have_sqlite" -eq 1 ]; then
  expect_eq 0 "$(q "SELECT count(*) FROM runs WHERE status <> 'complete'")" "failed runs leave no incomplete rows"
  expect_eq 6 "$(q "SELECT count(*) FROM runs")" "runs appended"
  expect_eq "gguf|llama|5" "$(q "SELECT model_format, architecture, n_tokens FROM runs WHERE id = 1")" "runs row"
  expect_eq "llama2c" "$(q "SELECT model_format FROM runs WHERE id = 4")" "llama2.c format"
  expect_eq "safetensors" "$(q "SELECT model_format FROM runs WHERE id = 6")" "hf format"
  expect_eq "1,403,407,261,378" "$(q "SELECT group_concat(token_id) FROM (SELECT token_id FROM tokens WHERE run_id = 1 ORDER BY pos)")" "token ids"
  expect_eq "▁Once" "$(q "SELECT piece FROM tokens WHERE run_id = 1 AND pos = 1")" "piece"
  expect_eq 40 "$(q "SELECT count(*) FROM attention WHERE run_id = 1 AND dtype = 'f16' AND length(probs) = 50")" "40 f16 maps of 5x5"
  expect_eq 40 "$(q "SELECT count(*) FROM head_stats WHERE run_id = 1 AND entropy >= 0 AND max_prob <= 1.0000001")" "head stats"
  expect_eq 432 "$(q "SELECT token_id FROM predictions WHERE run_id = 1 AND pos = 4 AND rank = 0")" "top-1"
  # 1 vs 2 threads: the same predictions.
  expect_eq "$(q "SELECT group_concat(token_id || ':' || round(prob, 6)) FROM predictions WHERE run_id = 1")" \
            "$(q "SELECT group_concat(token_id || ':' || round(prob, 6)) FROM predictions WHERE run_id = 2")" "threads agree"

  # Selections, f32 maps, full logits.
  expect_status 0 "$LOUPE" trace "$M/stories260K.gguf" --tokens 1,403,407,261,378 --db "$DB" \
    --layers 1,3-4 --heads 0,7 --maps f32 --logits full --top-k 2
  expect_eq "6|6" "$(q "SELECT count(*), sum(dtype = 'f32' AND length(probs) = 100) FROM attention WHERE run_id = 7")" "selected f32 maps"
  expect_eq "1,3,4" "$(q "SELECT group_concat(DISTINCT layer) FROM (SELECT layer FROM attention WHERE run_id = 7 ORDER BY layer)")" "layers"
  expect_eq 5 "$(q "SELECT count(*) FROM logits WHERE run_id = 7 AND length(data) = 2048")" "full logits"
  expect_eq 10 "$(q "SELECT count(*) FROM predictions WHERE run_id = 7")" "top-2"
  expect_status 0 "$LOUPE" trace "$M/stories260K.gguf" --tokens 1,403 --db "$DB" --maps none
  expect_eq "0|40" "$(q "SELECT (SELECT count(*) FROM attention WHERE run_id = 8), (SELECT count(*) FROM head_stats WHERE run_id = 8)")" "maps none"

  # A database from a newer loupe is refused.
  q "UPDATE meta SET value = '99' WHERE key = 'schema_version'"
  expect_one_line_error "$LOUPE" trace "$M/stories260K.gguf" --tokens 1,2 --db "$DB"
  expect_stderr_contains "schema_version 99 is newer" "$LOUPE" trace "$M/stories260K.gguf" --tokens 1,2 --db "$DB"
else
  echo "note: sqlite3 CLI not found; database content checks skipped"
fi

# llama2.c's default tokenizer name beside the checkpoint is found on its own.
mkdir -p "$TMP/l2c"
cp "$M/stories260K.bin" "$TMP/l2c/" && cp "$M/tok512.bin" "$TMP/l2c/tokenizer.bin"
expect_stdout_contains '"," 0.969' "$LOUPE" trace "$TMP/l2c/stories260K.bin" --prompt "Once upon a time" --db "$TMP/l2c.db"

# A progress line only when stderr is a terminal (script(1) provides one).
if command -v script >/dev/null; then
  script -qc "'$LOUPE' trace '$M/stories260K.gguf' --tokens 1,403,407 --db '$TMP/tty.db'" /dev/null >"$TMP/tty.out" 2>&1
  if grep -q "layer 5/5" "$TMP/tty.out"; then ok; else bad "no progress line on a terminal"; fi
fi
"$LOUPE" trace "$M/stories260K.gguf" --tokens 1,403,407 --db "$TMP/tty.db" >"$TMP/out" 2>"$TMP/err"
if [ ! -s "$TMP/err" ]; then ok; else bad "stderr not empty without a terminal: $(head -c 200 "$TMP/err")"; fi

# --prompt: the ids stored are llama2.c's encoding of the reference prompts (GGUF vocabulary and
# tok512.bin).
if [ "$have_sqlite" -eq 1 ] && command -v python3 >/dev/null; then
  for name in lily cat_mat tom_sue_park; do
    text=$(python3 -c "import json,sys; print(next(p['text'] for p in json.load(open(sys.argv[1]))['prompts'] if p['name'] == sys.argv[2]))" "$M/reference/prompts.json" "$name")
    want=$(python3 -c "import json,sys; print(','.join(map(str, next(p['token_ids'] for p in json.load(open(sys.argv[1]))['prompts'] if p['name'] == sys.argv[2]))))" "$M/reference/prompts.json" "$name")
    for args in "$M/stories260K.gguf" "$M/stories260K.bin --tokenizer $M/tok512.bin"; do
      rm -f "$TMP/p.db"
      # shellcheck disable=SC2086
      "$LOUPE" trace $args --prompt "$text" --db "$TMP/p.db" >/dev/null 2>&1
      got=$(sqlite3 "$TMP/p.db" "SELECT group_concat(token_id) FROM (SELECT token_id FROM tokens WHERE run_id = 1 ORDER BY pos)")
      expect_eq "$want" "$got" "token ids of $name via ${args%% *}"
    done
  done
  rm -f "$TMP/p.db"
fi

# End to end: f32 maps and full logits in the database match llama2.c's reference arrays.
if command -v python3 >/dev/null; then
  expect_status 0 "$LOUPE" trace "$M/hf" --tokens 1,403,407,261,378,432,383,286,261,376,298,315,421,395,317,426 \
    --maps f32 --logits full --db "$TMP/ref.db"
  result=$(python3 - "$TMP/ref.db" "$M/reference/lily" <<'PY'
import sqlite3, struct, sys
def npy(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<H', b[8:10])[0]
    d = b[10 + n:]
    return struct.unpack('<%df' % (len(d) // 4), d)
logits, attn = npy(sys.argv[2] + '/logits.npy'), npy(sys.argv[2] + '/attn.npy')
db, T = sqlite3.connect(sys.argv[1]), 16
dl = max(abs(a - b) for pos, data in db.execute('SELECT pos, data FROM logits WHERE run_id = 1')
         for a, b in zip(struct.unpack('<512f', data), logits[pos * 512:(pos + 1) * 512]))
da = max(abs(a - b) for l, h, p in db.execute('SELECT layer, head, probs FROM attention WHERE run_id = 1')
         for a, b in zip(struct.unpack('<%df' % (T * T), p), attn[(l * 8 + h) * T * T:(l * 8 + h + 1) * T * T]))
print('ok' if dl <= 1e-4 and da <= 1e-4 else 'bad logits %.3g attn %.3g' % (dl, da))
PY
)
  if [ "$result" = ok ]; then ok; else bad "database vs reference: $result"; fi
fi

# --prompt-file: the same run as --prompt (one trailing newline dropped).
printf 'Once upon a time\n' >"$TMP/p.txt"
expect_stdout_contains '"," 0.969' "$LOUPE" trace "$M/stories260K.gguf" --prompt-file "$TMP/p.txt" --db "$TMP/p.db"
# trace, leak and tokenize read a prompt file alike: only the final line break is dropped.
printf 'Once upon a time\n\n' >"$TMP/p2.txt"
n_trace=$("$LOUPE" trace "$M/stories260K.gguf" --prompt-file "$TMP/p2.txt" --db "$TMP/p2.db" --maps none | sed -n 's/.*: \([0-9]*\) tokens,.*/\1/p')
n_leak=$("$LOUPE" leak "$M/stories260K.gguf" --prompt-file "$TMP/p2.txt" | sed -n 's/.*: \([0-9]*\) tokens,.*/\1/p' | head -n 1)
if [ "$n_trace" = 6 ] && [ "$n_leak" = 6 ]; then ok; else bad "prompt file with a kept newline: trace $n_trace tokens, leak $n_leak, want 6 each"; fi
# Stored maps grow with tokens squared: over --max-map-bytes the run is refused before it starts.
expect_one_line_error "$LOUPE" trace "$M/stories260K.gguf" --tokens 1,403,407,261,378 --db "$TMP/budget.db" --max-map-bytes 1KiB
expect_stderr_contains "40 maps would store 1.95 KiB" "$LOUPE" trace "$M/stories260K.gguf" --tokens 1,403,407,261,378 --db "$TMP/budget.db" --max-map-bytes 1KiB
expect_status 0 "$LOUPE" trace "$M/stories260K.gguf" --tokens 1,403,407,261,378 --db "$TMP/budget.db" --max-map-bytes 1KiB --maps none
expect_status 0 "$LOUPE" trace "$M/stories260K.gguf" --tokens 1,403,407,261,378 --db "$TMP/budget.db" --max-map-bytes 1KiB --layers 0 --heads 0
expect_one_line_error "$LOUPE" trace "$M/stories260K.gguf" --tokens 1 --db "$TMP/budget.db" --max-map-bytes lots

finish
