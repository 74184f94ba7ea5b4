#!/usr/bin/env bash
# CLI: `loupe render` on a database built here with the sqlite3 shell (planted f16 maps), then
# on a real `loupe trace` run when the tree has one: exit codes, one-line errors, files written.
source "$(dirname "$0")/cli_lib.sh"

if ! command -v sqlite3 >/dev/null 2>&1; then
  echo "SKIP: the sqlite3 shell is needed to build the test database"
  exit 77
fi
SCHEMA="${LOUPE_SOURCE:?LOUPE_SOURCE must point at the source tree}/trace/store/schema.sql"
DB="$TMP/t.db"

# f16 little-endian hex of the values used below
H1=003c  # 1.0
H5=0038  # 0.5
H0=0000
# 4 x 4 maps: head 0 attends to itself (diagonal), head 1 also puts 0.5 on a future key (leak)
diag=""; leaky=""
for q in 0 1 2 3; do
  for k in 0 1 2 3; do
    if [ "$q" -eq "$k" ]; then diag+=$H1; leaky+=$H1
    elif [ "$q" -eq 0 ] && [ "$k" -eq 3 ]; then diag+=$H0; leaky+=$H5
    else diag+=$H0; leaky+=$H0; fi
  done
done
{
  cat "$SCHEMA"
  cat <<EOF
INSERT INTO runs (id, status, kind, model_path, model_format, architecture, n_tokens, n_layers,
  n_heads, n_threads, isa, loupe_version, maps_dtype, started_at)
  VALUES (1, 'complete', 'trace', '/m/tiny', 'safetensors', 'llama', 4, 2, 2, 1, 'ref', '0.1.0',
          'f16', 'now'),
         (2, 'running', 'trace', '/m/tiny', 'safetensors', 'llama', 4, 2, 2, 1, 'ref', '0.1.0',
          'f16', 'now');
INSERT INTO tokens (run_id, pos, token_id, piece) VALUES (1, 0, 1, '<s>'), (1, 1, 2, ' the'), (1, 2, 3, ' cat'), (1, 3, 4, '世界');
INSERT INTO tokens (run_id, pos, token_id, piece) VALUES (2, 0, 1, '<s>'), (2, 1, 2, ' the'), (2, 2, 3, ' cat'), (2, 3, 4, '世界');
INSERT INTO attention (run_id, layer, head, n_q, n_k, dtype, probs) VALUES (1, 0, 0, 4, 4, 'f16', X'$diag'), (1, 0, 1, 4, 4, 'f16', X'$leaky'),
                             (1, 1, 0, 4, 4, 'f16', X'$diag'), (1, 1, 1, 4, 4, 'f16', X'$diag'),
                             (2, 0, 0, 4, 4, 'f16', X'$diag');
INSERT INTO head_stats (run_id, layer, head, entropy, max_prob, sink, prev_token, self,
  distance, local_frac, local_window, output_norm) VALUES (1, 0, 0, 0.0, 1.0, 0.25, 0.0, 1.0, 0.0, 1.0, 8, 1.5),
                              (1, 0, 1, 0.4, 1.0, 0.25, 0.0, 0.9, 0.5, 1.0, 8, 1.5),
                              (1, 1, 0, 0.0, 1.0, 0.25, 0.0, 1.0, 0.0, 1.0, 8, 1.5),
                              (1, 1, 1, 0.0, 1.0, 0.25, 0.0, 1.0, 0.0, 1.0, 8, 1.5);
EOF
} | sqlite3 "$DB" || { echo "FAIL: could not build the test database"; exit 1; }

is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; }

# one head, PNG
expect_status 0 "$LOUPE" render "$DB" --layer 0 --head 1 -o "$TMP/h.png"
if [ -f "$TMP/h.png" ] && is_png "$TMP/h.png"; then ok; else bad "h.png is not a PNG"; fi
expect_stdout_contains "wrote $TMP/h.png" "$LOUPE" render "$DB" --layer 0 --head 1 -o "$TMP/h.png"
# -o is --output; both spellings take "=VALUE" too; the generated help names both
expect_stdout_contains "wrote $TMP/h2.png" "$LOUPE" render "$DB" --layer 0 --head 1 --output "$TMP/h2.png"
expect_stdout_contains "wrote $TMP/h3.png" "$LOUPE" render "$DB" --layer 0 --head 1 -o="$TMP/h3.png"
expect_stdout_contains "-o, --output OUT" "$LOUPE" help render
expect_one_line_error "$LOUPE" render "$DB" --layer 0 --head 1 -x "$TMP/h.png"
# SVG carries the token labels as text
expect_status 0 "$LOUPE" render "$DB" --layer 0 --head 0 -o "$TMP/h.svg" --colormap magma --scale log
if grep -q '␣the' "$TMP/h.svg" && grep -q '世界' "$TMP/h.svg" && grep -q '&lt;s&gt;' "$TMP/h.svg"; then
  ok; else bad "h.svg lacks the token labels"; fi
expect_status 0 "$LOUPE" render "$DB" --layer 1 --head 1 -o "$TMP/h.pdf" --scale power --gamma 0.3
if [ "$(head -c 4 "$TMP/h.pdf")" = "%PDF" ]; then ok; else bad "h.pdf is not a PDF"; fi
expect_status 0 "$LOUPE" render "$DB" --layer 0 --head 1 -o "$TMP/r.png" --range 1:
# grid, overview, stats
expect_status 0 "$LOUPE" render "$DB" --layer 1 --grid -o "$TMP/g.png"
expect_status 0 "$LOUPE" render "$DB" --overview -o "$TMP/o.png" --thumb 32
expect_status 0 "$LOUPE" render "$DB" --stats prev_token -o "$TMP/s.png"
expect_status 0 "$LOUPE" render "$DB" --stats distance -o "$TMP/s.svg"
if grep -q '0.50' "$TMP/s.svg" && grep -q 'H1' "$TMP/s.svg"; then ok; else bad "s.svg lacks values"; fi

# the incomplete run: refused by default (run 1 is taken), drawn with a warning when named
expect_status 0 "$LOUPE" render "$DB" --run 2 --layer 0 --head 0 -o "$TMP/r2.png"
expect_stderr_contains "run 2 is 'running'" "$LOUPE" render "$DB" --run 2 --layer 0 --head 0 -o "$TMP/r2.png"

# default run choice: only a running run -> refused, naming it; only a leak-kind run -> drawn
DB2="$TMP/only.db"
{
  cat "$SCHEMA"
  cat <<EOF
INSERT INTO runs (id, status, kind, model_path, model_format, architecture, n_tokens, n_layers,
  n_heads, n_threads, isa, loupe_version, maps_dtype, started_at)
  VALUES (5, 'running', 'trace', '/m/tiny', 'safetensors', 'llama', 4, 1, 1, 1, 'ref', '0.1.0',
          'f16', 'now');
INSERT INTO attention (run_id, layer, head, n_q, n_k, dtype, probs) VALUES (5, 0, 0, 4, 4, 'f16', X'$diag');
EOF
} | sqlite3 "$DB2"
expect_one_line_error "$LOUPE" render "$DB2" --layer 0 --head 0 -o "$TMP/x.png"
expect_stderr_contains "run 5, is 'running'" "$LOUPE" render "$DB2" --layer 0 --head 0 -o "$TMP/x.png"
sqlite3 "$DB2" "UPDATE runs SET status = 'complete', kind = 'leak'"
expect_status 0 "$LOUPE" render "$DB2" --layer 0 --head 0 -o "$TMP/only.png"

# bad input: exit 2 and exactly one line on stderr, no picture left behind
expect_one_line_error "$LOUPE" render
expect_one_line_error "$LOUPE" render "$TMP/none.db" --overview -o "$TMP/x.png"
echo "not a database at all, just some text that is long enough to look like a header......" >"$TMP/junk.db"
expect_one_line_error "$LOUPE" render "$TMP/junk.db" --overview -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$DB" --layer 5 --head 0 -o "$TMP/x.png"
expect_stderr_contains "run 1 has layers 0..1" "$LOUPE" render "$DB" --layer 5 --head 0 -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$DB" --layer 0 --head 9 -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$DB" --run 99 --overview -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$DB" --stats wisdom -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$DB" --leak -o "$TMP/x.png"
expect_stderr_contains "no leak runs" "$LOUPE" render "$DB" --leak -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$DB" --layer 0 --head 0 -o "$TMP/x.jpg"
expect_one_line_error "$LOUPE" render "$DB" --layer 0 --head 0
expect_one_line_error "$LOUPE" render "$DB" --grid -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$DB" --overview --grid --layer 0 -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$DB" --overview -o "$TMP/x.png" --scale cubic
expect_one_line_error "$LOUPE" render "$DB" --overview -o "$TMP/x.png" --size 3
expect_one_line_error "$LOUPE" render "$DB" --overview -o "$TMP/x.png" --gamma 0
expect_one_line_error "$LOUPE" render "$DB" --overview -o "$TMP/x.png" --vmax -1
expect_one_line_error "$LOUPE" render "$DB" --overview -o "$TMP/x.png" --leak-threshold -0.5
expect_one_line_error "$LOUPE" render "$DB" --overview -o "$TMP/x.png" --masked-color 12345g
expect_one_line_error "$LOUPE" render "$DB" "$DB" --overview -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$DB" --overview -o "$TMP/x.png" --range 1:3
expect_one_line_error "$LOUPE" render "$DB" --layer 0 --head 0 -o "$TMP/x.png" --range 3:2
expect_one_line_error "$LOUPE" render "$DB" --layer 0 --head 0 -o "$TMP/x.png" --range 2:9
if [ ! -e "$TMP/x.png" ] && [ ! -e "$TMP/x.jpg" ]; then ok; else bad "a failed render left a file"; fi

# --all: index.html links pictures that exist, one per head at least
expect_status 0 "$LOUPE" render "$DB" --all "$TMP/gallery"
if [ -f "$TMP/gallery/index.html" ]; then
  links=$(grep -o 'href="[^"]*"' "$TMP/gallery/index.html" | sed 's/href="//; s/"$//')
  n_links=0; missing=0
  for f in $links; do
    n_links=$((n_links + 1))
    [ -f "$TMP/gallery/$f" ] || { missing=$((missing + 1)); echo "missing: $f" >&2; }
  done
  # overview + 8 stats (the rows above leave the sparsity columns NULL) + 2 grids + 4 heads (no
  # leak run in this database) + viewer.html
  if [ "$n_links" -eq 16 ] && [ "$missing" -eq 0 ]; then ok; else bad "index.html: $n_links links, $missing missing"; fi
  if grep -q 'layer_0_head_1.png' "$TMP/gallery/index.html"; then ok; else bad "no head picture linked"; fi
else
  bad "--all wrote no index.html"
fi
expect_one_line_error "$LOUPE" render "$DB" --all "$TMP/gallery" -o "$TMP/x.png"
if [ -s "$TMP/gallery/viewer.html" ] && grep -q 'href="viewer.html"' "$TMP/gallery/index.html"; then
  ok; else bad "--all wrote or linked no viewer.html"; fi

# --html: one file that asks for nothing outside itself; --layer narrows it; bad requests refused
# 4 maps of 4 x 4 cells, and the leak plane of layer 0 head 1
expect_stdout_contains "wrote $TMP/v.html: 4 maps, 80 embedded bytes" "$LOUPE" render "$DB" --html "$TMP/v.html"
if grep -q 'id="loupe-data"' "$TMP/v.html" && grep -q "default-src 'none'" "$TMP/v.html" &&
   ! grep -qiE '<(script|link|img|iframe)[^>]* (src|href)=' "$TMP/v.html"; then
  ok; else bad "v.html is not self-contained"; fi
expect_stdout_contains "2 maps" "$LOUPE" render "$DB" --layer 1 --html "$TMP/v1.html"
expect_stdout_contains "max-pooled" "$LOUPE" render "$DB" --html "$TMP/v2.html" --max-map-bytes 20
expect_one_line_error "$LOUPE" render "$DB" --html "$TMP/v.html" -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$DB" --overview -o "$TMP/x.png" --max-map-bytes 1MiB
expect_one_line_error "$LOUPE" render "$DB" --html "$TMP/v3.html" --max-map-bytes 3
expect_one_line_error "$LOUPE" render "$DB" --html "$TMP/no/such/dir/v.html"
expect_stderr_contains "--layer 2: run 1 has layers 0..1" "$LOUPE" render "$DB" --layer 2 --html "$TMP/v3.html"
if [ ! -e "$TMP/v3.html" ] && [ ! -e "$TMP/x.png" ]; then ok; else bad "a refused --html left a file"; fi

# a leak run of its own: --leak finds it, and --all of the trace run links its plot
sqlite3 "$DB" "INSERT INTO runs (id, status, kind, model_path, model_format, architecture, n_tokens,
  n_layers, n_heads, n_threads, isa, loupe_version, maps_dtype, started_at) VALUES (3, 'complete',
  'leak', '/m/tiny', 'safetensors', 'llama', 4, 2, 2, 1, 'ref', '0.1.0', 'none', 'now');
  INSERT INTO leak_checks (run_id, check_name, passed, layer, position, max_abs_diff, detail)
  VALUES (3, 'perturbation', 1, 0, 2, 0.0, 'ok'), (3, 'perturbation', 0, 1, 2, 0.125, 'leak'),
         (3, 'perturbation', 0, -1, 2, 0.5, 'leak');"
expect_status 0 "$LOUPE" render "$DB" --leak -o "$TMP/leak.svg"
if grep -q '2 of 3 layers failed' "$TMP/leak.svg" && grep -q 'logits' "$TMP/leak.svg"; then
  ok; else bad "leak.svg lacks its failure count or the logits bar"; fi
expect_status 0 "$LOUPE" render "$DB" --all "$TMP/gallery2"
if grep -q 'href="leak.png"' "$TMP/gallery2/index.html" && [ -f "$TMP/gallery2/leak.png" ] &&
   grep -q 'leak check (run 3)' "$TMP/gallery2/index.html"; then
  ok; else bad "--all did not link the leak run's plot"; fi


# End to end without ../shared: loupe synth's planted model, traced, then drawn.
SYN="$TMP/synth"
if "$LOUPE" synth "$SYN/model" >/dev/null 2>"$TMP/synth.err" &&
   "$LOUPE" trace "$SYN/model" --prompt "the cat sat on the mat . the cat sat on the mat ." \
     --db "$SYN/t.db" >/dev/null 2>"$TMP/strace.err"; then
  expect_status 0 "$LOUPE" render "$SYN/t.db" --all "$SYN/pics"
  n_png=$(find "$SYN/pics" -name '*.png' | wc -l)
  # 2 layers x 8 heads: overview + 12 statistics + 2 grids + 16 heads
  if [ "$n_png" -eq 31 ]; then ok; else bad "synth gallery: $n_png pictures, want 31"; fi
  expect_status 0 "$LOUPE" render "$SYN/t.db" --stats sink -o "$SYN/sink.svg"
  expect_status 0 "$LOUPE" render "$SYN/t.db" --stats keys90 -o "$SYN/keys90.svg"
  # a database from before the sparsity columns: --all draws the rest, --stats keys90 says why not
  if command -v sqlite3 >/dev/null 2>&1; then
    cp "$SYN/t.db" "$SYN/old.db"
    sqlite3 "$SYN/old.db" "ALTER TABLE head_stats DROP COLUMN keys50; ALTER TABLE head_stats DROP COLUMN keys90; ALTER TABLE head_stats DROP COLUMN keys99; ALTER TABLE head_stats DROP COLUMN low_mass"
    expect_status 0 "$LOUPE" render "$SYN/old.db" --all "$SYN/oldpics"
    n_old=$(find "$SYN/oldpics" -name '*.png' | wc -l)
    if [ "$n_old" -eq 27 ]; then ok; else bad "old database gallery: $n_old pictures, want 27"; fi
    expect_one_line_error "$LOUPE" render "$SYN/old.db" --stats keys90 -o "$SYN/old.svg"
  fi
  # the planted sink head (layer 0 head 3) puts (nearly) all its mass on <s>
  if grep -q '^1.00$\|^0.9[5-9]$' "$SYN/sink.svg"; then ok; else bad "sink.svg: no head near 1.00"; fi
elif grep -q "not built yet" "$TMP/synth.err" "$TMP/strace.err" 2>/dev/null; then
  echo "note: loupe synth or trace is not built yet: synth end to end skipped"
else
  bad "loupe synth + trace failed: $(head -c 300 "$TMP/synth.err" "$TMP/strace.err")"
fi

# End to end on the real model when ../shared is here: trace stories260K, then draw it.
if [ -n "$SHARED" ] && [ -d "$SHARED/models/stories260K" ]; then
  RDB="$TMP/real.db"
  M="$SHARED/models/stories260K"
  if "$LOUPE" trace "$M/stories260K.gguf" --prompt "Once upon a time" --db "$RDB" >/dev/null 2>"$TMP/trace.err"; then
    expect_status 0 "$LOUPE" render "$RDB" --layer 4 --head 7 -o "$TMP/real.svg"
    if grep -q '␣Once' "$TMP/real.svg" && grep -q 'stories260K.gguf (llama), run 1' "$TMP/real.svg"; then
      ok; else bad "real.svg lacks the token labels or the title"; fi
    expect_one_line_error "$LOUPE" render "$RDB" --layer 5 --head 0 -o "$TMP/x.png"
    expect_status 0 "$LOUPE" render "$RDB" --all "$TMP/real"
    # 5 layers x 8 heads: overview + 12 statistics + 5 grids + 40 heads, and the viewer
    n_links=$(grep -o 'href="[^"]*"' "$TMP/real/index.html" 2>/dev/null | wc -l)
    n_png=$(find "$TMP/real" -name '*.png' | wc -l)
    if [ "$n_links" -eq 59 ] && [ "$n_png" -eq 58 ] && [ -s "$TMP/real/viewer.html" ]; then ok; else bad "real gallery: $n_links links, $n_png pictures, want 59 and 58"; fi
    expect_stdout_contains "40 maps" "$LOUPE" render "$RDB" --html "$TMP/real.html"
    # the leak plot, once `loupe leak` records perturbation checks
    "$LOUPE" leak "$M/stories260K.gguf" --prompt "Once upon a time" --db "$RDB" >/dev/null 2>"$TMP/leak.err"
    if grep -q "not built yet" "$TMP/leak.err"; then
      echo "note: loupe leak is not built yet: leak plot end to end skipped"
    elif [ "$(sqlite3 "$RDB" "SELECT count(*) FROM leak_checks WHERE check_name = 'perturbation'")" -gt 0 ]; then
      expect_status 0 "$LOUPE" render "$RDB" --leak -o "$TMP/leak.png"
      if [ -f "$TMP/leak.png" ] && is_png "$TMP/leak.png"; then ok; else bad "no leak.png"; fi
      # the dense model's past is bit-identical under perturbation: the plot says so
      expect_status 0 "$LOUPE" render "$RDB" --leak -o "$TMP/clean.svg"
      if grep -q 'no leak: every difference is exactly 0' "$TMP/clean.svg"; then ok; else bad "clean.svg lacks its verdict"; fi
      # a deliberately broken mask: its run's maps show the leak, its plot the failed layers
      "$LOUPE" leak "$M/stories260K.gguf" --prompt "Once upon a time" --inject off-by-one \
        --db "$RDB" >/dev/null 2>&1
      bad_run=$(sqlite3 "$RDB" "SELECT max(id) FROM runs WHERE kind = 'leak' AND status = 'complete'")
      expect_status 0 "$LOUPE" render "$RDB" --run "$bad_run" --layer 0 --head 0 -o "$TMP/bad.svg"
      if grep -q 'LEAK: 4 masked cells' "$TMP/bad.svg"; then ok; else bad "bad.svg does not announce the 4 off-by-one leaks"; fi
      expect_status 0 "$LOUPE" render "$RDB" --leak -o "$TMP/bad_leak.svg"
      if grep -q 'layers failed' "$TMP/bad_leak.svg"; then ok; else bad "bad_leak.svg shows no failed layer"; fi
    else
      bad "loupe leak --db recorded no perturbation checks: $(head -c 300 "$TMP/leak.err")"
    fi
  else
    bad "loupe trace failed on stories260K: $(head -c 300 "$TMP/trace.err")"
  fi
else
  echo "note: ../shared not found: the end-to-end part is skipped"
fi

finish
