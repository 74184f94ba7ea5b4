#!/usr/bin/env bash
# CLI: `loupe leak` on mask files the test writes (exit 0 clean, 1 leak/blocked/NaN, 2 bad input)
# and on stories260K (clean passes; every --inject fault is caught and named), --json and --db.
source "$(dirname "$0")/cli_lib.sh"
source "$(dirname "$0")/../support/npy.sh"

# npy_mask FILE DESCR T EXPR: a [T, T] .npy whose cell (q, k) is EXPR (bash arithmetic, 0 or 1)
# as one byte (|b1, |u1) or as an f32 additive value (<f4: 1 -> 0.0, 0 -> FILL).
npy_mask() {
  local file=$1 descr=$2 T=$3 expr=$4 fill=${5:-}
  {
    npy_header "$descr" "$T, $T"
    local q k v
    for ((q = 0; q < T; q++)); do
      for ((k = 0; k < T; k++)); do
        v=$(( expr ))
        if [ "$descr" = "<f4" ]; then
          if [ "$v" -eq 1 ]; then printf '\x00\x00\x00\x00'; else printf "$fill"; fi
        else
          printf "\\x0$v"
        fi
      done
    done
  } >"$file"
}
expect_eq() { # expect_eq WANT GOT WHAT
  if [ "$1" = "$2" ]; then ok; else bad "$3: got '$2', want '$1'"; fi
}
json_field() { # json_field FILE KEY: the integer value of a top-level "KEY": N line
  sed -n "s/^  \"$2\": \\([0-9-]*\\),\\{0,1\\}$/\\1/p" "$1" | head -n 1
}

DB="$TMP/l.db"
have_sqlite=0
command -v sqlite3 >/dev/null && have_sqlite=1

# What needs no ../shared (LOUPE_PART=local runs only this, LOUPE_PART=shared skips it).
if local_part; then
  # Usage errors: one line, exit 2.
  expect_one_line_error "$LOUPE" leak
  expect_one_line_error "$LOUPE" leak --mask "$TMP/none.npy"
  expect_one_line_error "$LOUPE" leak --mask "$TMP/x.npy" --kind window:0
  expect_one_line_error "$LOUPE" leak --mask "$TMP/x.npy" --kind lower
  expect_one_line_error "$LOUPE" leak --mask "$TMP/x.npy" --true-means yes
  expect_one_line_error "$LOUPE" leak --mask "$TMP/x.npy" --tokens 1,2
  expect_one_line_error "$LOUPE" leak model.gguf --mask "$TMP/x.npy"
  expect_one_line_error "$LOUPE" leak "$TMP/no-model.gguf" --inject sideways
  expect_one_line_error "$LOUPE" leak "$TMP/no-model.gguf" --tokens 1,2
  expect_one_line_error "$LOUPE" leak "$TMP/no-model.gguf" --frobnicate
  expect_one_line_error "$LOUPE" leak "$TMP/no-model.gguf" --maps f8
  expect_one_line_error "$LOUPE" leak "$TMP/a.gguf" "$TMP/b.gguf"
  expect_one_line_error "$LOUPE" leak "$TMP/no-model.gguf" --prompt hi --tokens 1,2
  expect_one_line_error "$LOUPE" leak --mask "$TMP/x.npy" --masked-below 5
  expect_one_line_error "$LOUPE" leak --mask "$TMP/x.npy" --format sparse
  expect_one_line_error "$LOUPE" leak --mask "$TMP/x.npy" --window 3
  expect_stdout_contains "loupe leak" "$LOUPE" help leak
  expect_stderr_contains "loupe leak: " "$LOUPE" leak --mask "$TMP/none.npy"

  T=8
  npy_mask "$TMP/causal.npy" '|b1' $T 'k <= q ? 1 : 0'
  npy_mask "$TMP/obo.npy" '|b1' $T 'k <= q + 1 ? 1 : 0'
  npy_mask "$TMP/win3.npy" '|u1' $T 'k <= q && q - k < 3 ? 1 : 0'
  npy_mask "$TMP/upper.npy" '|b1' $T 'k > q ? 1 : 0'
  npy_mask "$TMP/add_inf.npy" '<f4' $T 'k <= q ? 1 : 0' '\x00\x00\x80\xff'
  npy_mask "$TMP/add_1e9.npy" '<f4' $T 'k <= q && q > 0 ? 1 : 0' '\x28\x6b\x6e\xce'
  npy_mask "$TMP/add_100.npy" '<f4' $T 'k <= q ? 1 : 0' '\x00\x00\xc8\xc2'

  expect_status 0 "$LOUPE" leak --mask "$TMP/causal.npy"
  expect_stdout_contains "verdict: PASS" "$LOUPE" leak --mask "$TMP/causal.npy"
  expect_status 1 "$LOUPE" leak --mask "$TMP/obo.npy"
  expect_stdout_contains "batch 0 head 0 query 0 key 1" "$LOUPE" leak --mask "$TMP/obo.npy"
  expect_stdout_contains "verdict: LEAK (off-by-one)" "$LOUPE" leak --mask "$TMP/obo.npy"
  "$LOUPE" leak --mask "$TMP/obo.npy" --json >"$TMP/obo.json"
  expect_eq 7 "$(json_field "$TMP/obo.json" leak_count)" "off-by-one leak_count"
  expect_eq 0 "$(json_field "$TMP/obo.json" blocked_count)" "off-by-one blocked_count"
  expect_eq 0 "$(json_field "$TMP/obo.json" nan_rows)" "off-by-one nan_rows"
  if grep -q '"leaks": \[' "$TMP/obo.json" && grep -q '"key": 7' "$TMP/obo.json"; then ok; else bad "off-by-one JSON lacks the leak list"; fi
  # one stray allowed cell above the diagonal is not no-mask: named with its coordinates
  npy_mask "$TMP/stray.npy" '|b1' $T 'k <= q || (q == 2 && k == 6) ? 1 : 0'
  npy_mask "$TMP/ones.npy" '|b1' $T '1'
  expect_status 1 "$LOUPE" leak --mask "$TMP/stray.npy"
  grep -qF "verdict: LEAK (stray cells)" "$TMP/out" && grep -qF "batch 0 head 0 query 2 key 6" "$TMP/out" && ok || bad "stray cell: $(cat "$TMP/out")"
  expect_stdout_contains "verdict: LEAK (no-mask)" "$LOUPE" leak --mask "$TMP/ones.npy"
  # a window of 3: blocked as causal, clean as window:3, leaking as window:2, blocked as window:4
  expect_status 1 "$LOUPE" leak --mask "$TMP/win3.npy"
  "$LOUPE" leak --mask "$TMP/win3.npy" --json >"$TMP/w.json"
  expect_eq 0 "$(json_field "$TMP/w.json" leak_count)" "window as causal: leaks"
  expect_eq 15 "$(json_field "$TMP/w.json" blocked_count)" "window as causal: blocked"
  expect_status 0 "$LOUPE" leak --mask "$TMP/win3.npy" --kind window:3
  expect_status 1 "$LOUPE" leak --mask "$TMP/win3.npy" --kind window:2
  expect_stdout_contains "batch 0 head 0 query 2 key 0" "$LOUPE" leak --mask "$TMP/win3.npy" --kind window:2
  expect_status 1 "$LOUPE" leak --mask "$TMP/win3.npy" --kind window:4
  # polarity
  expect_status 0 "$LOUPE" leak --mask "$TMP/upper.npy" --true-means masked
  expect_status 1 "$LOUPE" leak --mask "$TMP/upper.npy"
  # packed documents: 0 0 0 1 1 2 2 2
  printf '0,0,0,1,1,2,2,2\n' >"$TMP/docs.txt"
  npy_mask "$TMP/docmask.npy" '|b1' $T 'k <= q && ((q < 3 && k < 3) || (q >= 3 && q < 5 && k >= 3 && k < 5) || (q >= 5 && k >= 5)) ? 1 : 0'
  expect_status 0 "$LOUPE" leak --mask "$TMP/docmask.npy" --kind "doc:$TMP/docs.txt"
  expect_status 1 "$LOUPE" leak --mask "$TMP/causal.npy" --kind "doc:$TMP/docs.txt"
  expect_stdout_contains "batch 0 head 0 query 3 key 0" "$LOUPE" leak --mask "$TMP/causal.npy" --kind "doc:$TMP/docs.txt"
  printf '0 0 0 1 1 2 2 2\n0 0 0 0 0 0 0 0\n' >"$TMP/docs2.txt"
  expect_one_line_error "$LOUPE" leak --mask "$TMP/causal.npy" --kind "doc:$TMP/docs2.txt" # 2 rows, B = 1
  printf '0,0,1\n' >"$TMP/short.txt"
  expect_one_line_error "$LOUPE" leak --mask "$TMP/causal.npy" --kind "doc:$TMP/short.txt"
  # padding: the first two positions of the one item are padding
  printf '0,0,1,1,1,1,1,1\n' >"$TMP/pad.txt"
  npy_mask "$TMP/padded.npy" '|b1' $T 'k <= q && k >= 2 && q >= 2 ? 1 : 0'
  npy_mask "$TMP/padaxis.npy" '|b1' $T 'k <= q && q >= 2 ? 1 : 0'
  expect_status 0 "$LOUPE" leak --mask "$TMP/padded.npy" --padding "$TMP/pad.txt"
  expect_stdout_contains "padding query rows: 2" "$LOUPE" leak --mask "$TMP/padded.npy" --padding "$TMP/pad.txt"
  expect_status 1 "$LOUPE" leak --mask "$TMP/padaxis.npy" --padding "$TMP/pad.txt"
  expect_stdout_contains "batch 0 head 0 query 2 key 0" "$LOUPE" leak --mask "$TMP/padaxis.npy" --padding "$TMP/pad.txt"
  expect_one_line_error "$LOUPE" leak --mask "$TMP/padded.npy" --padding "$TMP/short.txt"
  expect_one_line_error "$LOUPE" leak model.gguf --padding "$TMP/pad.txt"
  # additive fills
  expect_status 0 "$LOUPE" leak --mask "$TMP/add_inf.npy"
  expect_stdout_contains "additive mask" "$LOUPE" leak --mask "$TMP/add_inf.npy"
  expect_status 1 "$LOUPE" leak --mask "$TMP/add_1e9.npy"   # row 0 fully masked: blocked
  expect_stdout_contains "overflows to -inf; 1 fully masked row gives NaN" "$LOUPE" leak --mask "$TMP/add_1e9.npy"
  "$LOUPE" leak --mask "$TMP/add_1e9.npy" --json >"$TMP/f.json"
  # f16 block: the fill becomes -inf (value null), overflows, and the blind row 0 gives NaN
  if tr -d ' \n' <"$TMP/f.json" | grep -q '"f16":{"value":null,"is_neg_inf":true,"overflows":true,"nan_rows":1' &&
     tr -d ' \n' <"$TMP/f.json" | grep -q '"f32":{"value":-1000000000.0,"is_neg_inf":false,"overflows":false,"nan_rows":0'; then
    ok; else bad "fill verdicts in JSON: $(tr -d ' \n' <"$TMP/f.json" | head -c 600)"; fi
  expect_eq 1 "$(json_field "$TMP/f.json" fully_masked_rows)" "-1e9 mask: fully masked rows"
  expect_status 1 "$LOUPE" leak --mask "$TMP/add_100.npy"
  expect_stdout_contains "WEAK" "$LOUPE" leak --mask "$TMP/add_100.npy"
  # bad files: truncated, wrong rank, not a mask
  head -c 100 "$TMP/add_inf.npy" >"$TMP/trunc.npy"
  expect_one_line_error "$LOUPE" leak --mask "$TMP/trunc.npy"
  # npy_raw FILE DESCR SHAPE BYTES: a header for any descr/shape, then BYTES zero bytes
  npy_raw() {
    { npy_header "$2" "$3"; head -c "$4" /dev/zero; } >"$1"
  }
  npy_raw "$TMP/rank3.npy" '|b1' '2, 4, 4' 32
  npy_raw "$TMP/rank1.npy" '|b1' '16,' 16
  npy_raw "$TMP/nonsq.npy" '|b1' '4, 5' 20
  npy_raw "$TMP/c8.npy" '<c8' '4, 4' 128
  npy_raw "$TMP/ok4.npy" '|b1' '4, 4' 16
  expect_one_line_error "$LOUPE" leak --mask "$TMP/rank3.npy"
  expect_stderr_contains "rank 3" "$LOUPE" leak --mask "$TMP/rank3.npy"
  expect_one_line_error "$LOUPE" leak --mask "$TMP/rank1.npy"
  expect_one_line_error "$LOUPE" leak --mask "$TMP/nonsq.npy"
  expect_stderr_contains "4 queries x 5 keys" "$LOUPE" leak --mask "$TMP/nonsq.npy"
  expect_one_line_error "$LOUPE" leak --mask "$TMP/c8.npy"
  expect_one_line_error "$LOUPE" leak --mask "$TMP/ok4.npy" --format additive
  # all zeros: every row fully masked, every causal cell blocked
  expect_status 1 "$LOUPE" leak --mask "$TMP/ok4.npy"
  expect_stdout_contains "fully masked rows: 4" "$LOUPE" leak --mask "$TMP/ok4.npy"
  printf 'hello' >"$TMP/mask.txt"
  expect_one_line_error "$LOUPE" leak --mask "$TMP/mask.txt"

  # The database: a run of kind 'leak' with its check row.
  expect_status 1 "$LOUPE" leak --mask "$TMP/obo.npy" --db "$DB"
  if [ $have_sqlite -eq 1 ]; then
    expect_eq "leak|mask|0" "$(sqlite3 "$DB" "SELECT r.kind, c.check_name, c.passed FROM leak_checks c JOIN runs r ON r.id = c.run_id")" "mask check row"
  fi

  # A model that needs no shared data: loupe synth's planted 2-layer Llama.
  if "$LOUPE" synth "$TMP/synth" >/dev/null 2>"$TMP/synth.err"; then
    expect_status 0 "$LOUPE" leak "$TMP/synth" --tokens 1,2,3,4,5,6,7,8,9,10,11,12
    expect_stdout_contains "verdict: PASS" "$LOUPE" leak "$TMP/synth"
    expect_stdout_contains "verdict: FAIL (off-by-one)" "$LOUPE" leak "$TMP/synth" --inject off-by-one
    expect_stdout_contains "verdict: FAIL (window+1)" "$LOUPE" leak "$TMP/synth" --window 3 --inject window+1
    expect_stdout_contains "batch 0 layer 0 head 0 query 3 key 0" "$LOUPE" leak "$TMP/synth" --window 3 --inject window+1
  else
    bad "loupe synth failed: $(head -c 300 "$TMP/synth.err")"
  fi
fi

require_shared
M="$SHARED/models/stories260K"
expect_status 0 "$LOUPE" leak "$M/stories260K.gguf"
expect_stdout_contains "verdict: PASS" "$LOUPE" leak "$M/stories260K.gguf" --prompt "Once upon a time"
expect_status 0 "$LOUPE" leak "$M/stories260K.bin" --tokens 1,403,407,261,378,432,383,286 --threads 2
expect_status 0 "$LOUPE" leak "$M/stories260K.gguf" --window 3
expect_status 0 "$LOUPE" leak "$M/hf" --tokens 1,403,407,261,378,432,383,286,261,376
expect_one_line_error "$LOUPE" leak "$M/stories260K.gguf" --tokens 1
expect_one_line_error "$LOUPE" leak "$M/stories260K.gguf" --tokens 1,2,99999
for fault in off-by-one transposed no-mask window+1 pad-axis; do
  expect_status 1 "$LOUPE" leak "$M/stories260K.gguf" --inject "$fault"
  expect_stdout_contains "verdict: FAIL ($fault)" "$LOUPE" leak "$M/stories260K.gguf" --inject "$fault"
done
expect_stdout_contains "first difference: layer 0, position 0 (cut 0)" "$LOUPE" leak "$M/stories260K.gguf" --inject off-by-one
"$LOUPE" leak "$M/stories260K.gguf" --inject off-by-one --json >"$TMP/m.json"
if grep -q '"diagnosis": "off-by-one"' "$TMP/m.json" && grep -q '"leak_count": [1-9]' "$TMP/m.json" &&
   grep -q '"nan_rows": 0' "$TMP/m.json"; then ok; else bad "model JSON: $(head -c 300 "$TMP/m.json")"; fi
expect_status 0 "$LOUPE" leak "$M/stories260K.gguf" --db "$DB"
if [ $have_sqlite -eq 1 ]; then
  # per-layer perturbation rows (5 layers + logits for every cut), all passed
  expect_eq 0 "$(sqlite3 "$DB" "SELECT count(*) FROM leak_checks c JOIN runs r ON r.id = c.run_id WHERE r.model_path LIKE '%gguf' AND c.passed = 0")" "failed rows of a clean run"
  expect_eq 6 "$(sqlite3 "$DB" "SELECT count(DISTINCT layer) FROM leak_checks WHERE check_name = 'perturbation'")" "perturbation layers"
  expect_eq complete "$(sqlite3 "$DB" "SELECT status FROM runs WHERE model_path LIKE '%gguf'")" "run status"
fi
# The unperturbed pass of an injected run is recorded like a trace: its maps show the leak.
DB2="$TMP/inj.db"
expect_status 1 "$LOUPE" leak "$M/stories260K.gguf" --inject off-by-one --prompt "Once upon a time" --db "$DB2"
expect_status 1 "$LOUPE" leak "$M/stories260K.gguf" --inject off-by-one --prompt "Once upon a time" --db "$DB2" --maps none
if [ $have_sqlite -eq 1 ]; then
  expect_eq "40|40|0" "$(sqlite3 "$DB2" "SELECT (SELECT count(*) FROM attention WHERE run_id = 1), (SELECT count(*) FROM head_stats WHERE run_id = 1), (SELECT count(*) FROM attention WHERE run_id = 2)")" "recorded maps"
  # layer 0 head 0, query 0: the off-by-one mask gives key 1 weight (f16 bytes 2..3 nonzero)
  expect_eq 1 "$(sqlite3 "$DB2" "SELECT hex(substr(probs, 3, 2)) != '0000' FROM attention WHERE run_id = 1 AND layer = 0 AND head = 0")" "leaking cell recorded"
fi
# --tokens goes through the same input step as trace: the model's own vocabulary labels the ids.
DB3="$TMP/ids.db"
expect_status 0 "$LOUPE" leak "$M/stories260K.gguf" --tokens 1,403,407,261,378 --db "$DB3"
if [ $have_sqlite -eq 1 ]; then
  expect_eq "▁Once" "$(sqlite3 "$DB3" "SELECT piece FROM tokens WHERE run_id = 1 AND pos = 1")" "leak --tokens piece"
fi

finish
