#!/usr/bin/env bash
# CLI: `loupe leak`'s decode check on stories260K: a check named "decode" in --json's checks that
# passes on the clean model (also with a forced window the decode runs past), and the injected
# KV cache faults, each failing with exit 1 and named in the diagnosis.
source "$(dirname "$0")/cli_lib.sh"

expect_one_line_error "$LOUPE" leak "$TMP/x.gguf" --inject cache-off-by-two
require_shared
M="$SHARED/models/stories260K/stories260K.gguf"
expect_eq() { if [ "$1" = "$2" ]; then ok; else bad "$3: got '$2', want '$1'"; fi; }
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

out=$("$LOUPE" leak "$M" --json); rc=$?
expect_eq 0 "$rc" "clean model exit"
expect_eq "2 True none" "$(echo "$out" | field "sum(c['check'] == 'decode' for c in d['checks']), all(c['passed'] for c in d['checks'] if c['check'] == 'decode'), d['decode']['diagnosis']")" "decode rows"
expect_eq "True" "$(echo "$out" | field "d['decode']['logit_diff'] <= d['decode']['tolerance'] and d['decode']['f16_logit_diff'] <= d['decode']['f16_tolerance']")" "within tolerance"

# A window of 8 on every layer: the decode runs past it through the rolling cache.
out=$("$LOUPE" leak "$M" --window 8 --json); rc=$?
expect_eq "0 8 True" "$rc $(echo "$out" | field "d['decode']['window'], d['decode']['passed']")" "past the window"

for f in cache-off-by-one rope-stale mask-top-left; do
  out=$("$LOUPE" leak "$M" --inject "$f" --json); rc=$?
  expect_eq "1 $f $f False" "$rc $(echo "$out" | field "d['inject'], d['diagnosis'], d['decode']['passed']")" "--inject $f"
  expect_stdout_contains "verdict: FAIL ($f)" "$LOUPE" leak "$M" --inject "$f"
done

finish
