#!/usr/bin/env bash
# CLI: `loupe diff`: a run against itself is exactly 0, runs over different tokens are refused
# naming the position, and stories260K's F32 GGUF against its Q6_K, Q4_K_M and TQ2_0 forms
# differs more the coarser the quantization.
source "$(dirname "$0")/cli_lib.sh"

expect_one_line_error "$LOUPE" diff
expect_one_line_error "$LOUPE" diff "$TMP/none.db" "$TMP/none.db"

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

finish
