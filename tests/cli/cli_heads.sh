#!/usr/bin/env bash
# CLI: `loupe eval` and `loupe ablate` on the planted-head model (written by loupe synth) and on
# stories260K: JSON shapes, what lands in the database, one-line errors with exit 2.
source "$(dirname "$0")/cli_lib.sh"

DB="$TMP/h.db"
expect_one_line_error "$LOUPE" eval
expect_one_line_error "$LOUPE" ablate
expect_one_line_error "$LOUPE" eval "$TMP/no-such-model" --tokens 1,2
expect_one_line_error "$LOUPE" ablate "$TMP/x" --tokens 1,2 --method half
expect_one_line_error "$LOUPE" ablate "$TMP/x" --tokens 1,2 --prune 0

M="$TMP/synth"
expect_status 0 "$LOUPE" synth "$M"
P="the cat sat on the mat and the dog ran to the park . the cat sat on the mat and the dog ran to the park ."
expect_one_line_error "$LOUPE" eval "$M" --tokens 1 --db "$DB"
expect_one_line_error "$LOUPE" eval "$M" --tokens 1,2,99999 --db "$DB"
expect_one_line_error "$LOUPE" eval "$M" --prompt "$P" --prompts "$TMP/p.jsonl" --db "$DB"
expect_one_line_error "$LOUPE" eval "$M" --prompt "$P" --context 8 --stride 9 --db "$DB"
expect_one_line_error "$LOUPE" ablate "$M" --prompt "$P" --prune 17 --db "$DB"
expect_one_line_error "$LOUPE" ablate "$M" --prompt "$P" --iterative --db "$DB"
expect_one_line_error "$LOUPE" ablate "$M" --prompt "$P" --patch-from-tokens 1,2 --db "$DB"

# eval: text gives bits per byte, ids do not; --json carries n_tokens, nll, ppl = exp(nll)
out=$("$LOUPE" eval "$M" --prompt "$P" --db "$DB" --json)
if python3 -c 'import json,math,sys; d=json.loads(sys.argv[1]); assert d["n_tokens"]==29 and d["n_scored"]==28; assert abs(math.exp(d["nll"])-d["ppl"])<1e-9*d["ppl"]; assert d["bits_per_byte"]>0' "$out"; then ok; else bad "eval --json: $out"; fi
expect_stdout_contains "29 tokens, 28 scored in 1 window" "$LOUPE" eval "$M" --prompt "$P" --db "$DB"
expect_stdout_contains "28 scored in 7 windows (context 8, stride 4)" "$LOUPE" eval "$M" --prompt "$P" --context 8 --stride 4 --db "$DB"
printf '{"id": "twice", "text": "%s"}\n{"tokens": [1, 5, 6, 7]}\n' "$P" > "$TMP/p.jsonl"
out=$("$LOUPE" eval "$M" --prompts "$TMP/p.jsonl" --db "$DB" --json)
if python3 -c 'import json,sys; d=json.loads(sys.argv[1]); p=d["prompts"]; assert len(p)==2 and p[0]["id"]=="twice" and p[1]["bits_per_byte"] is None; assert d["n_tokens"]==33; s=sum(x["nll"]*x["n_scored"] for x in p)/sum(x["n_scored"] for x in p); assert abs(s-d["nll"])<1e-9' "$out"; then ok; else bad "eval --prompts --json: $out"; fi
printf '{"text": ""}\n' > "$TMP/bad.jsonl"
expect_stderr_contains "bad.jsonl:1" "$LOUPE" eval "$M" --prompts "$TMP/bad.jsonl" --db "$DB"

# ablate: the planted heads top the importance list; the JSON has every head and the plan
out=$("$LOUPE" ablate "$M" --prompt "$P" --db "$DB" --prune 3 --json)
if python3 -c '
import json,sys
d=json.loads(sys.argv[1]); h=d["heads"]
assert d["method"]=="zero" and len(h)==16
for x in h: assert abs(x["nll"]-d["clean_nll"]-x["delta"])<1e-12
top=sorted(h,key=lambda x:-x["delta"])[:2]
assert {(x["layer"],x["head"]) for x in top}=={(1,5),(0,1)}, top
pr=d["pruned"]; low=sorted(h,key=lambda x:(x["delta"],x["layer"],x["head"]))[:3]
assert pr["heads"]==[[x["layer"],x["head"]] for x in low]
assert pr["nll"]==pr["curve"][-1] and pr["params"]==3*4*64*512 and pr["kv_groups"]==3  # MHA: each head its own KV group
' "$out"; then ok; else bad "ablate --json: $out"; fi
expect_stdout_contains "x the naive 16 full passes" "$LOUPE" ablate "$M" --prompt "$P" --db "$DB" --method mean
expect_stdout_contains "restored" "$LOUPE" ablate "$M" --tokens 1,5,6,7,5,6 --patch-from-tokens 1,8,9,7,8,9 --db "$DB"
if command -v sqlite3 >/dev/null; then
  expect_sql 16 "$DB" "SELECT count(*) FROM head_importance h JOIN runs r ON r.id = h.run_id WHERE r.kind = 'ablate' AND r.status = 'complete' AND h.method = 'zero'" "head_importance rows"
  expect_sql 3 "$DB" "SELECT count(*) FROM pruning_plan" "pruning_plan rows"
  expect_sql 28 "$DB" "SELECT count(*) FROM token_nll WHERE run_id = (SELECT min(id) FROM runs WHERE kind = 'eval')" "token_nll rows"
fi

# trace --logit-lens: per layer and position the top-k readout; the last layer is the real logits
expect_one_line_error "$LOUPE" trace "$M" --prompt "$P" --logit-lens --generate 2 --db "$DB"
expect_status 0 "$LOUPE" trace "$M" --prompt "$P" --logit-lens --maps none --db "$TMP/lens.db"
if command -v sqlite3 >/dev/null; then
  expect_sql 29 "$TMP/lens.db" "SELECT count(*) FROM logit_lens WHERE layer = 1 AND rank = 0" "logit_lens rows of the last layer"
  expect_sql 0 "$TMP/lens.db" "SELECT count(*) FROM logit_lens l JOIN predictions p ON p.run_id = l.run_id AND p.pos = l.pos AND p.rank = l.rank WHERE l.layer = 1 AND (l.token_id != p.token_id OR l.prob != p.prob)" "rows where the last layer's lens differs from the predictions"
  lens=$(sqlite3 "$TMP/lens.db" "SELECT printf('%.9f', nll) FROM logit_lens_layers WHERE layer = 1")
  ev=$("$LOUPE" eval "$M" --prompt "$P" --db "$DB" --json | python3 -c 'import json,sys; print("%.9f" % json.load(sys.stdin)["nll"])')
  [ "$lens" = "$ev" ] && ok || bad "last layer's lens nll $lens != eval's $ev"
fi

# render: the importance matrix (latest ablate run by default), the logit lens, --all has both
expect_status 0 "$LOUPE" render "$DB" --importance -o "$TMP/imp.png"
expect_status 0 "$LOUPE" render "$TMP/lens.db" --logit-lens -o "$TMP/lens.png"
expect_one_line_error "$LOUPE" render "$TMP/lens.db" --importance -o "$TMP/none.png"
expect_one_line_error "$LOUPE" render "$DB" --logit-lens --run 1 -o "$TMP/none.png"
"$LOUPE" ablate "$M" --prompt "$P" --db "$TMP/lens.db" >/dev/null
expect_status 0 "$LOUPE" render "$TMP/lens.db" --all "$TMP/gallery"
for f in importance.png logit_lens.png; do
  if [ -s "$TMP/gallery/$f" ] && grep -q "$f" "$TMP/gallery/index.html"; then ok; else bad "--all lacks $f"; fi
done

# loupe demo shows the importance matrix of the planted model
"$LOUPE" demo "$TMP/demo" --threads 1 >"$TMP/demo.out" 2>&1
if [ -s "$TMP/demo/pictures/importance.png" ] && grep -q importance.png "$TMP/demo/pictures/index.html" &&
   grep -q '^    1    5 ' "$TMP/demo.out"; then ok; else bad "the demo lacks the importance matrix"; fi

finish
