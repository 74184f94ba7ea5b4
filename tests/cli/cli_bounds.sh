#!/usr/bin/env bash
# Resource bounds (issue 7): absurd sizes are refused with one line and exit 2 before any work,
# crafted files whose headers claim huge sizes cost little memory, and nothing is written on a
# refusal. Caps tested: estimate's --seq/--batch (2^40 and 64-bit overflow of the products),
# trace's prompt file (16 MiB), prompt length (2^20 tokens, before a run row exists), ids past
# the vocabulary, --top-k and --threads ranges.
source "$(dirname "$0")/cli_lib.sh"

configs="${LOUPE_CONFIGS:-$(dirname "$0")/../../configs}"
card="$configs/llama-3-8b.yaml"

# --- estimate: sizes that would overflow 64-bit byte counts
for args in "--seq 9223372036854775807" "--seq 99999999999999999999" "--batch 18446744073709551616" \
            "--seq 4611686018427387904 --batch 4" "--seq 1099511627777" "--seq 1e30" "--seq -5" \
            "--seq 1000000000000 --batch 1000000000" "--context 9223372036854775807" "--chunk 0"; do
  # shellcheck disable=SC2086
  expect_one_line_error "$LOUPE" estimate "$card" $args
done
expect_stderr_contains "overflows 64 bits" "$LOUPE" estimate "$card" --seq 1000000000000 --batch 1000000000
expect_stderr_contains "limit 2^40" "$LOUPE" estimate "$card" --seq 1099511627777
# the largest allowed --seq still gives finite figures (no silent wrap-around into small numbers)
expect_status 0 "$LOUPE" estimate "$card" --seq 1099511627776 --json
if grep -Eiq '": -[0-9]|": (nan|inf|-inf)' "$TMP/out"; then bad "estimate at --seq 2^40 printed a negative or non-finite figure"; else ok; fi

# --- a card nested 500,000 flow levels deep (under the 1 MiB card limit): libyaml's scanner is
# quadratic in the nesting (200,000 levels took 140 s), so the reader refuses deep nesting first
deep_card() { local n=$1; printf 'model:\n  name: '; head -c "$n" /dev/zero | tr '\0' '['; head -c "$n" /dev/zero | tr '\0' ']'; printf '\n'; }
deep_card 500000 >"$TMP/deep.yaml"
start=$(date +%s%N)
expect_one_line_error "$LOUPE" estimate "$TMP/deep.yaml"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
if [ "$ms" -lt 5000 ]; then ok; else bad "a deeply nested card took $ms ms to refuse"; fi
expect_stderr_contains "nested deeper than 64 levels" "$LOUPE" estimate "$TMP/deep.yaml"
deep_card 1000 >"$TMP/deep.json"
mkdir -p "$TMP/deepdir" && mv "$TMP/deep.json" "$TMP/deepdir/config.json"
expect_one_line_error "$LOUPE" estimate "$TMP/deepdir/config.json"

# --- trace on a model of our own
model="$TMP/model"
synth_or_stop "$model"
db="$TMP/bounds.db"

# a prompt file over 16 MiB is refused before it is read
head -c $((16 * 1024 * 1024 + 1)) /dev/zero | tr '\0' 'a' >"$TMP/big.txt"
expect_one_line_error "$LOUPE" trace "$model" --prompt-file "$TMP/big.txt" --db "$db"
expect_stderr_contains "exceeds the limit of 16777216 bytes" "$LOUPE" trace "$model" --prompt-file "$TMP/big.txt" --db "$db"

# 2^20 + 1 bytes the tokenizer cannot merge: more than 2^20 tokens, refused before the run row
head -c $((1024 * 1024 + 1)) /dev/zero | tr '\0' '\001' >"$TMP/long.txt"
start=$(date +%s%N)
expect_one_line_error "$LOUPE" trace "$model" --prompt-file "$TMP/long.txt" --db "$db" --maps none
ms=$(( ($(date +%s%N) - start) / 1000000 ))
expect_stderr_contains "(limit 1048576)" "$LOUPE" trace "$model" --prompt-file "$TMP/long.txt" --db "$db" --maps none
# refused without running the pass: a pass over a million tokens would take hours
if [ "$ms" -lt 20000 ]; then ok; else bad "the over-long prompt took $ms ms to refuse"; fi
if [ ! -s "$db" ] || [ "$(sqlite3 "$db" "SELECT count(*) FROM runs" 2>/dev/null || echo 0)" = 0 ]; then ok; else
  bad "a refused prompt left a run row behind"; fi

# ids outside the vocabulary, and option ranges
vocab=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$model/config.json")
expect_one_line_error "$LOUPE" trace "$model" --tokens "1,2,$vocab" --db "$db"
expect_one_line_error "$LOUPE" trace "$model" --tokens "1,99999999999999999999" --db "$db"
expect_one_line_error "$LOUPE" trace "$model" --tokens "1,2" --top-k 1001 --db "$db"
expect_one_line_error "$LOUPE" trace "$model" --tokens "1,2" --threads 0 --db "$db"
expect_one_line_error "$LOUPE" trace "$model" --tokens "1,2" --threads 9999999999999999999 --db "$db"

# --- crafted files: a header that claims more than the file holds costs little memory
measure_rss() { # measure_rss CMD...: prints max RSS in KB (0 when /usr/bin/time is missing)
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f "%M" -o "$TMP/rss" "$@" >/dev/null 2>&1
    cat "$TMP/rss" 2>/dev/null | tail -n 1
  else
    "$@" >/dev/null 2>&1
    echo 0
  fi
}
# safetensors: the 8-byte header length says 2^40 bytes of JSON follow
printf '\x00\x00\x00\x00\x00\x01\x00\x00{}' >"$TMP/huge_header.safetensors"
expect_one_line_error "$LOUPE" inspect "$TMP/huge_header.safetensors"
expect_stderr_contains "header length 1099511627776 at byte 0 exceeds" "$LOUPE" inspect "$TMP/huge_header.safetensors"
# safetensors: one tensor with a shape whose product overflows 64 bits
json='{"t":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}}'
len=${#json}
printf "$(printf '\\x%02x' $((len & 255)) $((len >> 8 & 255)) 0 0 0 0 0 0)%s\x00\x00\x00\x00" "$json" >"$TMP/overflow.safetensors"
expect_one_line_error "$LOUPE" inspect "$TMP/overflow.safetensors"
expect_stderr_contains "shape product overflows 64 bits" "$LOUPE" inspect "$TMP/overflow.safetensors"
# llama2.c: dims whose table sizes overflow, in a 28-byte file
printf '\xff\xff\xff\x7f\xff\xff\xff\x7f\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\xff\xff\xff\x7f\x01\x00\x00\x00' >"$TMP/huge.bin"
expect_one_line_error "$LOUPE" inspect "$TMP/huge.bin"
expect_stderr_contains "overflow" "$LOUPE" inspect "$TMP/huge.bin"
for f in huge_header.safetensors overflow.safetensors huge.bin; do
  rss=$(measure_rss "$LOUPE" inspect "$TMP/$f")
  # 100 MB: the binary and its libraries take ~10-20 MB, sanitizer builds more
  if [ "${rss:-0}" -lt 100000 ]; then ok; else bad "inspect $f used $rss KB"; fi
done
# safetensors: 300,000 one-element tensors (a 29 MB file) whose last entry leaves a gap, so the
# whole header is scanned and sorted before the refusal. jansson's DOM of such a header cost 15x
# the file; the scanner keeps one lp_tensor and one name per entry (issue 7: limit 6x the file).
many="$TMP/many.safetensors"
awk 'BEGIN { n = 300000; printf "{";
             for (i = 0; i < n; i++) {
               b = 4 * i + (i == n - 1 ? 4 : 0);
               printf "%s\"model.layers.%06d.mlp.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}", (i ? "," : ""), i, b, b + 4 } 
             printf "}" }' </dev/null >"$TMP/many.json"
hlen=$(wc -c <"$TMP/many.json")
{ for i in 0 1 2 3 4 5 6 7; do printf "\\$(printf '%03o' $(((hlen >> (8 * i)) & 255)))"; done
  cat "$TMP/many.json"; head -c $((4 * 300000 + 4)) /dev/zero; } >"$many"
expect_one_line_error "$LOUPE" inspect "$many"
expect_stderr_contains "tensor 'model.layers.299999.mlp.weight': data_offsets [1200000, 1200004] leave a gap after offset 1199996" "$LOUPE" inspect "$many"
file_kb=$(( $(wc -c <"$many") / 1024 ))
rss=$(measure_rss "$LOUPE" inspect "$many")
if [ "${LOUPE_SANITIZED:-0}" = 1 ]; then echo "sanitizer build: the 6x limit is not asserted"; ok
elif [ "${rss:-0}" -lt $((6 * file_kb)) ]; then ok; else bad "inspect of a $file_kb KB header of 300,000 tensors used $rss KB (limit 6x)"; fi
echo "many tensors: file $file_kb KB, loupe inspect (refused after the full scan) peak $rss KB"
finish
