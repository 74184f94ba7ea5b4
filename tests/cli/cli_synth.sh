# `loupe synth`: writes a model the other commands accept, whose planted heads `loupe trace`
# finds (head_stats queried with SQL), refuses foreign folders, and is deterministic.
source "$(dirname "$0")/cli_lib.sh"

PROMPT="the cat sat on the mat and the dog ran to the park . the cat sat on the mat and the dog ran to the park ."
M="$TMP/model"

expect_status 0 "$LOUPE" synth "$M"
cp "$TMP/out" "$TMP/synth.out"
expect_stdout_contains "previous_token" cat "$TMP/synth.out"
expect_stdout_contains "induction" cat "$TMP/synth.out"
for f in config.json model.safetensors tokenizer.json planted_heads.json; do
  if [ -s "$M/$f" ]; then ok; else bad "synth did not write $f"; fi
done
expect_status 0 "$LOUPE" inspect "$M"
expect_stdout_contains "PASS  tensor_shapes" "$LOUPE" inspect "$M"
expect_status 0 "$LOUPE" inspect "$M" --stats
expect_stdout_contains "PASS  finite_values" "$LOUPE" inspect "$M" --stats

# Whole words: " cat" is one token, and the prompt is <s> + one token per word.
expect_stdout_contains '" cat"' "$LOUPE" tokenize "$M" --text "the cat sat"
expect_stdout_contains "29 tokens" "$LOUPE" tokenize "$M" --text "$PROMPT"

# Planted head (layer, head) as synth printed it: "    layer 0 head 1  previous_token".
planted() { awk -v b="$1" '$1 == "layer" && $5 == b { print $2, $4 }' "$TMP/synth.out"; }

# Top head by a head_stats column (optionally restricted by an SQL condition): "layer head".
top_head() {
  sqlite3 "$2" "SELECT layer || ' ' || head FROM head_stats WHERE ${3:-1} ORDER BY $1 DESC LIMIT 1"
}

# check_top BEHAVIOUR COLUMN DB [WHERE]: the planted head tops COLUMN.
check_top() {
  local want got
  want=$(planted "$1")
  got=$(top_head "$2" "$3" "${4:-1}")
  if [ -n "$want" ] && [ "$want" = "$got" ]; then ok; else bad "$1: top $2 is head '$got', planted '$want' ($3)"; fi
}

if command -v sqlite3 >/dev/null; then
  DB="$TMP/trace.db"
  expect_status 0 "$LOUPE" trace "$M" --prompt "$PROMPT" --db "$DB" --threads 1 --maps none
  check_top previous_token prev_token "$DB"
  check_top sink sink "$DB"
  check_top uniform entropy "$DB" "layer = 0"
  check_top local local_frac "$DB" "prev_token < 0.5 AND self < 0.5"
  read -r pl ph <<<"$(planted previous_token)"
  v=$(sqlite3 "$DB" "SELECT prev_token > 0.9 FROM head_stats WHERE layer = $pl AND head = $ph")
  if [ "$v" = 1 ]; then ok; else bad "previous-token head's prev_token is not above 0.9"; fi
  read -r sl sh <<<"$(planted sink)"
  v=$(sqlite3 "$DB" "SELECT sink > 0.9 FROM head_stats WHERE layer = $sl AND head = $sh")
  if [ "$v" = 1 ]; then ok; else bad "sink head's sink is not above 0.9"; fi
  # The second copy (positions 15..27 predict 16..28) is predicted by the induction head: every
  # word but the ambiguous "the" (followed by four different words) comes out top-1.
  v=$(sqlite3 "$DB" "SELECT count(*) FROM predictions p JOIN tokens t ON t.run_id = p.run_id
        AND t.pos = p.pos + 1 WHERE p.rank = 0 AND p.pos >= 15 AND p.token_id = t.token_id")
  if [ "${v:-0}" -ge 9 ]; then ok; else bad "only ${v:-0} of 13 second-copy predictions right"; fi

  # A broken planting must fail the same check: without its phase, head 1 attends to itself.
  expect_status 0 "$LOUPE" synth "$TMP/broken" --fault prev-no-phase
  expect_status 0 "$LOUPE" trace "$TMP/broken" --prompt "$PROMPT" --db "$TMP/broken.db" --threads 1 --maps none
  got=$(top_head prev_token "$TMP/broken.db")
  if [ "$got" != "$(planted previous_token)" ]; then ok; else bad "check passes on a broken previous-token head"; fi
  v=$(sqlite3 "$TMP/broken.db" "SELECT count(*) FROM predictions p JOIN tokens t ON t.run_id = p.run_id
        AND t.pos = p.pos + 1 WHERE p.rank = 0 AND p.pos >= 15 AND p.token_id = t.token_id")
  if [ "${v:-0}" -lt 9 ]; then ok; else bad "broken model still predicts the second copy ($v)"; fi
else
  echo "note: sqlite3 shell not found; head_stats checks skipped (test_synth covers them)"
fi

# --check: the library's own verdict, exit 1 when a planted head is not found.
expect_status 0 "$LOUPE" synth "$TMP/checked" --check
expect_stdout_contains "PASS  layer 1 head 5  induction" "$LOUPE" synth "$TMP/checked" --check
expect_status 1 "$LOUPE" synth "$TMP/checked" --check --fault prev-no-phase
expect_stdout_contains "FAIL  layer 0 head 1  previous_token" "$LOUPE" synth "$TMP/checked" --check --fault prev-no-phase
expect_status 1 "$LOUPE" synth "$TMP/checked" --check --fault no-prev-write

# Deterministic: same seed, same bytes; another seed, other bytes. Rewriting our own output is fine.
expect_status 0 "$LOUPE" synth "$TMP/again"
if cmp -s "$M/model.safetensors" "$TMP/again/model.safetensors"; then ok; else bad "same seed, different weights"; fi
expect_status 0 "$LOUPE" synth "$TMP/again" --seed 2 --dtype bf16
if cmp -s "$M/model.safetensors" "$TMP/again/model.safetensors"; then bad "seed 2 gave the same weights"; else ok; fi
expect_stdout_contains "bf16" "$LOUPE" synth "$TMP/again" --dtype bf16

# A folder that is not ours: one line, exit 2, the folder untouched.
mkdir -p "$TMP/foreign"
echo "precious" >"$TMP/foreign/notes.txt"
expect_one_line_error "$LOUPE" synth "$TMP/foreign"
expect_stderr_contains "refusing to overwrite" "$LOUPE" synth "$TMP/foreign"
if [ "$(ls "$TMP/foreign")" = "notes.txt" ] && grep -q precious "$TMP/foreign/notes.txt"; then ok; else bad "foreign folder was touched"; fi

# Leftovers of an interrupted run (temporary files only) do not make a folder foreign.
mkdir -p "$TMP/interrupted"
touch "$TMP/interrupted/.model.safetensors.synth-tmp.12345"
expect_status 0 "$LOUPE" synth "$TMP/interrupted"

# Usage errors.
expect_one_line_error "$LOUPE" synth
expect_one_line_error "$LOUPE" synth ""
expect_one_line_error "$LOUPE" synth "$TMP/x" --dtype q4_0
expect_one_line_error "$LOUPE" synth "$TMP/x" --seed -3
expect_one_line_error "$LOUPE" synth "$TMP/x" --seed
expect_one_line_error "$LOUPE" synth "$TMP/x" "$TMP/y"
expect_one_line_error "$LOUPE" synth "$TMP/x" --bogus
expect_one_line_error "$LOUPE" synth "$TMP/foreign/notes.txt"
if [ ! -e "$TMP/x" ]; then ok; else bad "a usage error created the output folder"; fi
expect_stdout_contains "usage: loupe synth" "$LOUPE" synth --help

finish
