# `loupe synth --like CARD` for every decoder card in configs/: a small random model of the card's
# family -> `loupe trace` -> `loupe leak` (every causal check) -> `loupe render`. Cards whose family synth has
# no writer for, or that trace still refuses (one-line UNSUPPORTED), are listed, not failed.
# Each card's GGUF form (--format gguf, the same weights as llama.cpp's converter lays them out)
# -> `loupe inspect` (its checks pass) -> trace -> leak, and its last prediction is the
# safetensors form's; OPT, which llama.cpp has no architecture for, is refused in one line.
source "$(dirname "$0")/cli_lib.sh"

CONFIGS="$(dirname "$0")/../../configs"
IDS=1,5,9,13,5,9,20,33,41,2
ran=""
skipped=""
ran_gguf=""

# The GGUF form of card $1 beside its safetensors form $2 (already traced into $2/t.db).
gguf_form() {
  local name=$1 M=$2 G="$2-gguf"
  "$LOUPE" synth "$G" --like "$3" --format gguf >"$TMP/out" 2>"$TMP/err"
  local st=$?
  if [ $st -eq 2 ] && grep -q "no GGUF architecture" "$TMP/err"; then
    if [ "$(wc -l <"$TMP/err")" -eq 1 ]; then ok; else bad "gguf $name: refusal is not one line"; fi
    return
  fi
  if [ $st -ne 0 ]; then bad "synth --format gguf $name: exit $st: $(head -c 300 "$TMP/err")"; return; fi
  "$LOUPE" inspect "$G/model.gguf" >"$TMP/insp" 2>"$TMP/err"
  if [ $? -eq 0 ] && ! grep -q '^  FAIL' "$TMP/insp"; then ok; else
    bad "inspect gguf $name: $(grep FAIL "$TMP/insp" | head -2) $(head -c 200 "$TMP/err")"
  fi
  "$LOUPE" trace "$G/model.gguf" --tokens "$IDS" --db "$G/t.db" >"$TMP/gtrace" 2>"$TMP/err"
  if [ $? -ne 0 ]; then bad "trace gguf $name: $(head -c 300 "$TMP/err")"; return; fi
  # the same weights: the same top-5 probabilities after the last position as the safetensors
  # form (the pieces differ: only the GGUF has a vocabulary; test_synth compares every logit)
  probs() { grep '^next token' "$1" | grep -oE ' [0-9]\.[0-9]{3}' | tr -d '\n'; }
  a=$(probs "$M/trace.out"); b=$(probs "$TMP/gtrace")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then ok; else bad "gguf $name: '$b', safetensors '$a'"; fi
  "$LOUPE" leak "$G/model.gguf" --tokens "$IDS" --db "$G/t.db" >"$TMP/leak" 2>"$TMP/err"
  if grep -q '^verdict: PASS' "$TMP/leak"; then ok; else
    bad "leak gguf $name: $(grep -E 'FAIL|verdict' "$TMP/leak" | head -3) $(head -c 200 "$TMP/err")"
  fi
  ran_gguf="$ran_gguf $name"
}
for card in "$CONFIGS"/*.yaml; do
  name=$(basename "$card" .yaml)
  M="$TMP/$name"
  "$LOUPE" synth "$M" --like "$card" >"$TMP/out" 2>"$TMP/err"
  st=$?
  if [ $st -eq 2 ] && grep -q "has no synthetic writer" "$TMP/err"; then
    skipped="$skipped $name(synth)"
    continue
  fi
  if [ $st -ne 0 ]; then bad "synth --like $name: exit $st: $(head -c 300 "$TMP/err")"; continue; fi
  ok
  # the config.json written is the card's family as loupe reads it back
  fam=$(sed -n 's/^  *family: *//p' "$card" | head -1)
  expect_stdout_contains "$fam" "$LOUPE" inspect "$M"
  # and every check of inspect passes on it: the family's tensor names, roles and shapes
  "$LOUPE" inspect "$M" >"$TMP/insp" 2>"$TMP/err"
  if [ $? -eq 0 ] && ! grep -q '^  FAIL' "$TMP/insp"; then ok; else
    bad "inspect $name: $(grep FAIL "$TMP/insp" | head -2) $(head -c 200 "$TMP/err")"
  fi
  "$LOUPE" trace "$M" --tokens "$IDS" --db "$M/t.db" >"$M/trace.out" 2>"$TMP/err"
  st=$?
  if [ $st -eq 2 ] && grep -q "not supported" "$TMP/err"; then
    skipped="$skipped $name(trace)"
    continue
  fi
  if [ $st -ne 0 ]; then bad "trace $name: exit $st: $(head -c 300 "$TMP/err")"; continue; fi
  ok
  # every causal check passes and the verdict is PASS: on random weights the alignment heuristic
  # (loss against the next token versus the current one) has no signal to judge by and must say
  # inconclusive, not FAIL (a tied classifier tips random models toward the current token)
  "$LOUPE" leak "$M" --tokens "$IDS" --db "$M/t.db" >"$TMP/leak" 2>"$TMP/err"
  n_ok=$(grep -cE '^  (perturbation|attention_map|structural|decode) +ok ' "$TMP/leak")
  if [ "$n_ok" -eq 4 ] && grep -qE '^  alignment +(ok|-- +inconclusive:) ' "$TMP/leak" &&
     grep -q '^verdict: PASS' "$TMP/leak"; then
    ok
  else
    bad "leak $name: $(grep -E 'FAIL|verdict' "$TMP/leak" | head -3)"
  fi
  expect_status 0 "$LOUPE" render "$M/t.db" --run 1 --overview -o "$M/overview.png"
  if [ -s "$M/overview.png" ]; then ok; else bad "render $name wrote no picture"; fi
  gguf_form "$name" "$M" "$card"
  # MLA cards also generate through the latent KV cache, its bytes what loupe estimate predicts
  lora=$("$LOUPE" inspect "$M" --json 2>/dev/null | grep -o '"kv_lora_rank": *[0-9]*' | head -1 | grep -o '[0-9]*$')
  if [ "${lora:-0}" -gt 0 ]; then
    "$LOUPE" trace "$M" --tokens 1,5,9,13 --generate 6 --db "$M/g.db" >"$TMP/gen" 2>"$TMP/err"
    kv=$(sed -n 's/^kv cache [a-z0-9_]*: \([0-9]*\) bytes .*loupe estimate: \([0-9]*\) bytes$/\1 \2/p' "$TMP/gen")
    if grep -q '^generated 6 tokens' "$TMP/gen" && [ -n "$kv" ] && [ "${kv% *}" = "${kv#* }" ]; then
      ok
    else
      bad "generate $name: $(head -c 300 "$TMP/err") $(grep 'kv cache' "$TMP/gen")"
    fi
  fi
  # gpt-oss: every head's sink mass is stored (and only there) and render --stats draws it
  if [ "$fam" = gpt_oss ] && command -v sqlite3 >/dev/null 2>&1; then
    sinks=$(sqlite3 "$M/t.db" "SELECT count(*) FROM head_stats WHERE learned_sink > 0 AND learned_sink < 1")
    heads=$(sqlite3 "$M/t.db" "SELECT count(*) FROM head_stats")
    if [ "$sinks" -gt 0 ] && [ "$sinks" = "$heads" ]; then ok; else bad "$name: $sinks of $heads heads with a sink mass"; fi
    expect_status 0 "$LOUPE" render "$M/t.db" --run 1 --stats learned_sink -o "$M/sinks.svg"
  fi
  if [ "$name" = llama-3-8b ] && command -v sqlite3 >/dev/null 2>&1; then
    n=$(sqlite3 "$M/t.db" "SELECT count(*) FROM head_stats WHERE learned_sink IS NOT NULL")
    if [ "$n" = 0 ]; then ok; else bad "llama has $n learned_sink values"; fi
    expect_one_line_error "$LOUPE" render "$M/t.db" --run 1 --stats learned_sink -o "$M/sinks.svg"
  fi
  ran="$ran $name"
done
echo "traced, leak-checked and rendered:$ran"
echo "skipped (no synthetic writer, or trace refuses):$skipped"
echo "GGUF forms inspected, traced and leak-checked:$ran_gguf"
# the dense families this suite is about must all be in the first list
for want in pythia-70m phi-2 gpt-j-6b falcon-7b bloomz-560m opt-125m opt-350m olmo-2-0425-1b \
            stablelm-2-12b stablelm-3b-4e1t gpt2 llama-3-8b gemma-2-2b gemma-3-1b mixtral-8x7b-v0.1 \
            phi-3-mini-4k-instruct deepseek-v2-lite deepseek-v3 gpt-oss-20b mpt-7b starcoder2-3b; do
  case " $ran " in *" $want "*) ok ;; *) bad "$want was not traced" ;; esac
  case "$want" in opt-*) continue ;; esac
  case " $ran_gguf " in *" $want "*) ok ;; *) bad "$want's GGUF form was not traced" ;; esac
done
# the GGUF form's vocabulary encodes text; --format is for --like models only
G="$TMP/llama-3-8b-gguf/model.gguf"
expect_stdout_contains "ids: 23 11 8 3 6 4 23" "$LOUPE" tokenize "$G" --text "the cat"
expect_one_line_error "$LOUPE" synth "$TMP/planted-gguf" --format gguf
# MPT with learned positions (attn_config.alibi false): mpt-7b's config turned, synth writes
# transformer.wpe, and both forms trace and pass leak
M="$TMP/mpt-7b"
if [ -f "$M/config.json" ]; then
  sed 's/"alibi": true/"alibi": false/' "$M/config.json" >"$TMP/mpt-learned.json"
  L="$TMP/mpt-learned"
  expect_status 0 "$LOUPE" synth "$L" --like "$TMP/mpt-learned.json"
  expect_stdout_contains "transformer.wpe.weight" "$LOUPE" inspect "$L"
  expect_stdout_contains "learned" "$LOUPE" inspect "$L"
  "$LOUPE" trace "$L" --tokens "$IDS" --db "$L/t.db" >"$L/trace.out" 2>"$TMP/err"
  if [ $? -eq 0 ]; then ok; else bad "trace mpt-learned: $(head -c 300 "$TMP/err")"; fi
  "$LOUPE" leak "$L" --tokens "$IDS" --db "$L/t.db" >"$TMP/leak" 2>"$TMP/err"
  if grep -q '^verdict: PASS' "$TMP/leak"; then ok; else bad "leak mpt-learned: $(grep -E 'FAIL|verdict' "$TMP/leak" | head -3)"; fi
  gguf_form mpt-learned "$L" "$TMP/mpt-learned.json"
  case " $ran_gguf " in *" mpt-learned "*) ok ;; *) bad "mpt-learned's GGUF form was not traced" ;; esac
else
  bad "mpt-7b's synthetic model is missing"
fi
finish
