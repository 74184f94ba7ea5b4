#!/usr/bin/env bash
# CLI: `loupe diff`: a run against itself is exactly 0, runs over different tokens are refused
# naming the position, and stories260K's F32 GGUF against its Q6_K, Q4_K_M and TQ2_0 forms
# differs more the coarser the quantization.
source "$(dirname "$0")/cli_lib.sh"

if local_part; then
expect_one_line_error "$LOUPE" diff
expect_one_line_error "$LOUPE" diff "$TMP/none.db" "$TMP/none.db"

# Without ../shared: loupe synth's model against its no-prev-write fault (same tokenizer, same
# tokens), both runs in one database; a self-diff stores exactly 0 in every column, render --diff
# draws the matrix and a head's map, the viewer embeds the maps and --all links the pictures.
SYN="$TMP/syn"
PS="the cat sat on the mat . the cat sat on the mat ."
expect_status 0 "$LOUPE" synth "$SYN/m"
expect_status 0 "$LOUPE" synth "$SYN/fault" --fault no-prev-write
for m in m fault; do
  expect_status 0 "$LOUPE" trace "$SYN/$m" --prompt "$PS" --db "$SYN/t.db" --maps f32 --logits full
done
expect_status 0 "$LOUPE" diff "$SYN/t.db:1" "$SYN/t.db:1"
expect_stdout_contains "(diff 2 in $SYN/t.db)" "$LOUPE" diff "$SYN/t.db:1" "$SYN/t.db:2"
if python3 -c '
import sqlite3,sys
c=sqlite3.connect(sys.argv[1])
assert c.execute("SELECT max(abs(js_mean)),max(max_abs),count(*) FROM diff_heads WHERE diff_id=1").fetchone()==(0.0,0.0,16)
assert c.execute("SELECT max(abs(delta)),count(delta),count(*) FROM diff_head_stats WHERE diff_id=1").fetchone()==(0.0,16*12,16*12)
assert c.execute("SELECT max(kl),min(argmax_agree) FROM diff_positions WHERE diff_id=1").fetchone()==(0.0,1)
assert c.execute("SELECT max(js_mean) FROM diff_heads WHERE diff_id=2").fetchone()[0]>0
assert c.execute("SELECT max(abs(delta)) FROM diff_head_stats WHERE diff_id=2 AND stat=\"prev_token\"").fetchone()[0]>0
' "$SYN/t.db"; then ok; else bad "synth: the self-diff is not exactly 0 in every column, or the fault changed nothing"; fi
expect_status 0 "$LOUPE" render "$SYN/t.db" --diff -o "$SYN/js.svg"
if grep -q "diff 2: $SYN/t.db run 1 vs $SYN/t.db run 2" "$SYN/js.svg"; then ok; else bad "render --diff drew another diff than the latest"; fi
expect_status 0 "$LOUPE" render "$SYN/t.db" --diff --diff-id 2 --layer 1 --head 5 -o "$SYN/h.png"
expect_one_line_error "$LOUPE" render "$SYN/t.db" --diff --layer 1 --head 8 -o "$SYN/x.png"
expect_one_line_error "$LOUPE" render "$SYN/t.db" --diff -o "$SYN/x.txt"
expect_status 0 "$LOUPE" render "$SYN/t.db" --html "$SYN/v.html"
if grep -q '"diffs":\[{"id":1' "$SYN/v.html" && grep -q '"maps":\[{"n_q"' "$SYN/v.html"; then
  ok; else bad "the viewer lacks the diffs or their maps"; fi
expect_status 0 "$LOUPE" render "$SYN/t.db" --all "$SYN/pics"
if [ "$(grep -c 'href="diff_' "$SYN/pics/index.html")" -eq 4 ]; then ok; else bad "--all: want 4 diff pictures linked"; fi
fi

require_shared
M="$SHARED/models/stories260K"
P="Once upon a time, there was a little girl named Lily. She loved to play outside in the park."
for f in stories260K.gguf quant/stories260K-Q6_K.gguf quant/stories260K-Q4_K_M.gguf quant/stories260K-TQ2_0.gguf; do
  n=$(basename "$f" .gguf)
  expect_status 0 "$LOUPE" trace "$M/$f" --prompt "$P" --db "$TMP/$n.db" --maps f32 --logits full --threads 1
done
expect_status 0 "$LOUPE" trace "$M/stories260K.gguf" --prompt "Once upon a time" --db "$TMP/other.db" --threads 1

out=$("$LOUPE" diff "$TMP/stories260K.db:1" "$TMP/stories260K.db" --json)
if python3 -c '
import json,sys
d=json.loads(sys.argv[1])
assert d["max_js"]==0 and d["max_abs_diff"]==0 and d["mean_kl"]==0 and d["argmax_agreement"]==1
assert len(d["heads"])==40 and all(h["js"]==0 and h["max_abs_diff"]==0 for h in d["heads"])
assert all(v==0 for h in d["heads"] for v in h["stat_delta"].values())
assert all(p["kl"]==0 and p["argmax_agree"] for p in d["positions"])
' "$out"; then ok; else bad "a run against itself is not exactly 0: $out"; fi
# the diff is stored in A's database (or --db): zeros for a run against itself, one
# diff_heads row per head and one diff_positions row per position
if python3 -c '
import json,sqlite3,sys
d=json.loads(sys.argv[1]); c=sqlite3.connect(sys.argv[2])
a=c.execute("SELECT a_run,b_run,n_tokens,n_layers,n_heads,has_kl FROM diffs WHERE id=?",(d["diff_id"],)).fetchone()
assert a==(1,1,d["n_tokens"],5,8,1), a
h=c.execute("SELECT count(*),max(abs(js_mean)),max(max_abs) FROM diff_heads WHERE diff_id=?",(d["diff_id"],)).fetchone()
assert h==(40,0.0,0.0), h
p=c.execute("SELECT count(*),max(kl),min(argmax_agree) FROM diff_positions WHERE diff_id=?",(d["diff_id"],)).fetchone()
assert p==(d["n_tokens"],0.0,1), p
s=c.execute("SELECT count(*),count(delta),max(abs(delta)),count(DISTINCT stat) FROM diff_head_stats WHERE diff_id=?",(d["diff_id"],)).fetchone()
assert s==(40*12,40*12,0.0,12), s
' "$out" "$TMP/stories260K.db"; then ok; else bad "the stored self-diff is not zeros: $out"; fi
out=$("$LOUPE" diff "$TMP/stories260K.db" "$TMP/stories260K-Q4_K_M.db" --db "$TMP/diffs.db" --json)
if python3 -c '
import json,sqlite3,sys
d=json.loads(sys.argv[1]); c=sqlite3.connect(sys.argv[2])
assert d["diff_id"]==1 and d["db"]==sys.argv[2]
js=[r[0] for r in c.execute("SELECT js_mean FROM diff_heads WHERE diff_id=1 ORDER BY layer,head")]
assert js==[h["js"] for h in d["heads"]] and max(js)>0, js
kl=[r[0] for r in c.execute("SELECT kl FROM diff_positions WHERE diff_id=1 ORDER BY pos")]
assert kl==[p["kl"] for p in d["positions"]], kl
assert c.execute("SELECT count(*) FROM runs").fetchone()[0]==0
st={(l,h,k):v for l,h,k,v in c.execute("SELECT layer,head,stat,delta FROM diff_head_stats WHERE diff_id=1")}
assert len(st)==40*12 and all(st[(x["layer"],x["head"],k)]==v for x in d["heads"] for k,v in x["stat_delta"].items()), "stat deltas"
assert any(v!=0 for v in st.values())
' "$out" "$TMP/diffs.db"; then ok; else bad "--db: the stored diff differs from the printed one: $out"; fi
expect_one_line_error "$LOUPE" diff "$TMP/stories260K.db" "$TMP/stories260K.db" --db "$TMP/no/such/d.db"
expect_one_line_error "$LOUPE" diff "$TMP/stories260K.db" "$TMP/other.db"
expect_stderr_contains "differ from position 5 on" "$LOUPE" diff "$TMP/stories260K.db" "$TMP/other.db"
expect_status 0 "$LOUPE" trace "$M/stories260K.gguf" --prompt "Once upon a day" --db "$TMP/other.db" --threads 1
expect_stderr_contains "differ at token position 4" "$LOUPE" diff "$TMP/other.db:1" "$TMP/other.db:2"

js() { "$LOUPE" diff "$TMP/stories260K.db" "$TMP/$1.db" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["mean_js"], d["mean_kl"], d["argmax_agreement"])'; }
q6=$(js stories260K-Q6_K); q4=$(js stories260K-Q4_K_M); t2=$(js stories260K-TQ2_0)
echo "mean JS, mean KL, argmax agreement: Q6_K $q6 | Q4_K_M $q4 | TQ2_0 $t2"
if python3 -c '
import sys
q6,q4,t2=[list(map(float,s.split())) for s in sys.argv[1:]]
assert 0 < q6[0] < q4[0] < t2[0] and 0 < q6[1] < q4[1] < t2[1]
assert q6[2] == 1.0 and t2[2] <= q4[2]
' "$q6" "$q4" "$t2"; then ok; else bad "quantization order: Q6_K $q6, Q4_K_M $q4, TQ2_0 $t2"; fi

# render --diff: the JS matrix and one head's difference map, from the diff's own database and
# from --db's, whose runs live in other files; errors are one line, exit 2
Q4="$TMP/stories260K-Q4_K_M.db"
expect_stdout_contains "wrote $TMP/js.svg" "$LOUPE" render "$TMP/diffs.db" --diff -o "$TMP/js.svg"
if grep -q 'mean JS per head' "$TMP/js.svg" && grep -q "diff 1: $TMP/stories260K.db run 1 vs $Q4 run 1" "$TMP/js.svg"; then
  ok; else bad "js.svg lacks its title or subtitle"; fi
top=$(python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print("%.2g" % c.execute("SELECT max(js_mean) FROM diff_heads WHERE diff_id=1").fetchone()[0])' "$TMP/diffs.db")
if grep -qx "$top" "$TMP/js.svg"; then ok; else bad "js.svg does not write the largest JS $top"; fi
expect_status 0 "$LOUPE" render "$TMP/diffs.db" --diff --diff-id 1 --layer 3 --head 6 -o "$TMP/h.svg"
if grep -q 'layer 3, head 6: B - A (diff 1' "$TMP/h.svg" && grep -q '␣Lily' "$TMP/h.svg"; then
  ok; else bad "h.svg lacks its title or the token labels"; fi
for ext in png pdf; do
  expect_status 0 "$LOUPE" render "$TMP/stories260K.db" --diff --layer 0 --head 0 -o "$TMP/self.$ext"
done
expect_one_line_error "$LOUPE" render "$TMP/diffs.db" --diff --diff-id 7 -o "$TMP/x.png"
expect_stderr_contains "no diff 7 (diffs 1..1 stored)" "$LOUPE" render "$TMP/diffs.db" --diff --diff-id 7 -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$TMP/diffs.db" --diff --layer 5 --head 0 -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$TMP/diffs.db" --diff --layer 1 -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$TMP/diffs.db" --diff-id 1 --overview -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$TMP/diffs.db" --diff --run 1 -o "$TMP/x.png"
expect_one_line_error "$LOUPE" render "$TMP/other.db" --diff -o "$TMP/x.png"
expect_stderr_contains "no diffs stored" "$LOUPE" render "$TMP/other.db" --diff -o "$TMP/x.png"
# --all: every stored diff's matrix and its most changed head's map, linked from index.html
expect_status 0 "$LOUPE" render "$TMP/stories260K.db" --all "$TMP/pics"
n_diff=$(grep -o 'href="diff_[0-9]*_[a-z0-9_]*\.png"' "$TMP/pics/index.html" | sort -u | wc -l)
if [ "$n_diff" -eq 8 ] && grep -q 'What changed (loupe diff)' "$TMP/pics/index.html" &&
   [ -f "$TMP/pics/diff_4_layer_2_head_2.png" ]; then
  ok; else bad "--all links $n_diff diff pictures, want 8 (4 diffs), TQ2_0's at layer 2 head 2"; fi
# B's database moved away: the matrix still draws (it is stored), the map says where B was
mv "$Q4" "$TMP/moved.db"
expect_status 0 "$LOUPE" render "$TMP/diffs.db" --diff -o "$TMP/js2.png"
expect_one_line_error "$LOUPE" render "$TMP/diffs.db" --diff --layer 0 --head 0 -o "$TMP/x.png"
expect_stderr_contains "B (run 1): the diff's run is in '$Q4', which cannot be opened" "$LOUPE" render "$TMP/diffs.db" --diff --layer 0 --head 0 -o "$TMP/x.png"
if [ ! -e "$TMP/x.png" ]; then ok; else bad "a failed render --diff left x.png"; fi
# ... and found again beside the database that stores the diff, as a copied folder would be
mkdir -p "$TMP/copy" && cp "$TMP/diffs.db" "$TMP/copy/" && cp "$TMP/moved.db" "$TMP/copy/stories260K-Q4_K_M.db"
expect_status 0 "$LOUPE" render "$TMP/copy/diffs.db" --diff --layer 0 --head 0 -o "$TMP/beside.png"

finish
