# `loupe inspect` of a valid safetensors file of 300,000 one-element tensors (a 28 MB file): the
# table, --json and --stats stay under 6x the file in peak RSS (issue 7; the report tree with one
# JSON object per tensor peaked at 23x for the table and 30x for --json), and the output is
# complete. Needs /usr/bin/time for the RSS part.
source "$(dirname "$0")/cli_lib.sh"

n=300000
many="$TMP/many.safetensors"
awk -v n=$n 'BEGIN { printf "{";
             for (i = 0; i < n; i++) { b = 4 * i;
               printf "%s\"model.layers.%06d.mlp.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}", (i ? "," : ""), i, b, b + 4 }
             printf "}" }' </dev/null >"$TMP/many.json"
hlen=$(wc -c <"$TMP/many.json")
{ for i in 0 1 2 3 4 5 6 7; do printf "\\$(printf '%03o' $(((hlen >> (8 * i)) & 255)))"; done
  cat "$TMP/many.json"; head -c $((4 * n)) /dev/zero; } >"$many"
rm -f "$TMP/many.json"
file_kb=$(( $(wc -c <"$many") / 1024 ))

# run_rss NAME ARGS...: runs loupe inspect with stdout to $TMP/NAME.out, checks exit 0 and the
# peak RSS against 6x the file
run_rss() {
  local name=$1; shift
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f "%M" -o "$TMP/rss" "$LOUPE" inspect "$many" "$@" >"$TMP/$name.out" 2>"$TMP/err"
    local rc=$?
    local rss
    rss=$(tail -n 1 "$TMP/rss")
    if [ "$rc" -eq 0 ]; then ok; else bad "inspect $* exit $rc: $(head -c 300 "$TMP/err")"; fi
    if [ "${LOUPE_SANITIZED:-0}" = 1 ]; then ok # ASan inflates RSS: reported, not asserted
    elif [ "${rss:-999999999}" -lt $((6 * file_kb)) ]; then ok; else
      bad "inspect $* of $n tensors ($file_kb KB) peaked at $rss KB (limit 6x = $((6 * file_kb)) KB)"; fi
    echo "inspect $*: file $file_kb KB, peak RSS $rss KB"
  else
    echo "no /usr/bin/time: RSS not measured"
    expect_status 0 "$LOUPE" inspect "$many" "$@"
    cp "$TMP/out" "$TMP/$name.out"
  fi
}

run_rss table
if grep -qx "tensors ($n)" "$TMP/table.out"; then ok; else bad "table lacks 'tensors ($n)'"; fi
rows=$(grep -c '^  model\.layers\.[0-9]*\.mlp\.weight ' "$TMP/table.out")
if [ "$rows" -eq $n ]; then ok; else bad "table has $rows tensor rows, want $n"; fi
if grep -q '^  model\.layers\.299999\.mlp\.weight .* f32 .*\[1\]' "$TMP/table.out"; then ok; else
  bad "table lacks the last tensor's row"; fi

run_rss json --json
names=$(grep -c '^      "name": "model\.layers\.' "$TMP/json.out")
if [ "$names" -eq $n ]; then ok; else bad "--json has $names tensor objects, want $n"; fi
if grep -q '^  "n_tensors": 300000,$' "$TMP/json.out"; then ok; else bad "--json lacks n_tensors"; fi
# the document closes properly: tensors array, then the summary members after it
if tail -n 1 "$TMP/json.out" | grep -qx '}'; then ok; else bad "--json does not end with '}'"; fi
if grep -q '^  "checks": \[\]$' "$TMP/json.out"; then ok; else bad "--json lacks the checks member after tensors"; fi
if command -v python3 >/dev/null 2>&1; then
  if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["tensors"])==300000 and d["tensors"][-1]["name"]=="model.layers.299999.mlp.weight"' "$TMP/json.out"; then ok; else
    bad "--json is not a valid document with $n tensors"; fi
fi
rm -f "$TMP/json.out" "$TMP/table.out"

run_rss stats --stats
if grep -q '^  model\.layers\.000007\.mlp\.weight .*           0           0           0           0           0      0      0$' "$TMP/stats.out"; then ok; else
  bad "--stats row of a zero tensor is not all zeros"; fi
if grep -q 'PASS  finite_values' "$TMP/stats.out" || ! grep -q 'finite_values' "$TMP/stats.out"; then ok; else bad "--stats finite check failed"; fi
rm -f "$TMP/stats.out"
finish
