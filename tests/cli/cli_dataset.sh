#!/usr/bin/env bash
# CLI: `loupe trace --prompts FILE` as a named dataset (one run per prompt, datasets and
# dataset_stats rows), `--shard I/N`, `loupe merge` of two shards equal to one unsharded run
# row for row apart from run ids, mismatched schema versions refused, `loupe render --dataset`.
source "$(dirname "$0")/cli_lib.sh"

expect_one_line_error "$LOUPE" trace "$TMP/x.gguf" --prompts "$TMP/p.jsonl" --tokens 1,2
expect_one_line_error "$LOUPE" trace "$TMP/x.gguf" --tokens 1,2 --shard 0/2
expect_one_line_error "$LOUPE" merge "$TMP/only.db"
expect_one_line_error "$LOUPE" render "$TMP/x.db" --dataset d -o "$TMP/x.png"

require_shared
command -v sqlite3 >/dev/null || { echo "note: sqlite3 CLI not found; dataset checks skipped"; finish; }
M="$SHARED/models/stories260K/stories260K.gguf"
expect_eq() { if [ "$1" = "$2" ]; then ok; else bad "$3: got '$2', want '$1'"; fi; }
P="$TMP/prompts.jsonl"
cat > "$P" <<'JSON'
{"id": "a", "text": "Once upon a time"}
{"id": "b", "text": "The cat sat on the mat."}
{"tokens": [1, 403, 407, 261]}
{"id": "d", "text": "Lily and Tom went to the park to play."}
{"text": "One day, a little dog"}
JSON
printf '{"text": "ok"}\n{"text": 3}\n' > "$TMP/bad.jsonl"
expect_stderr_contains "bad.jsonl:2:" "$LOUPE" trace "$M" --prompts "$TMP/bad.jsonl" --db "$TMP/bad.db"
expect_one_line_error "$LOUPE" trace "$M" --prompts "$P" --shard 2/2 --db "$TMP/bad.db"

ALL="$TMP/all.db"
expect_stdout_contains "dataset stories in " "$LOUPE" trace "$M" --prompts "$P" --dataset stories --db "$ALL" --threads 1
expect_eq "5|0,1,2,3,4|a,b,d" "$(sqlite3 "$ALL" "SELECT count(*), group_concat(prompt_index), (SELECT group_concat(prompt_id) FROM runs WHERE prompt_id IS NOT NULL) FROM runs WHERE dataset = 'stories'")" "one run per prompt"
expect_eq "stories|5" "$(sqlite3 "$ALL" "SELECT name, n_prompts FROM datasets")" "datasets row"
# the aggregate is the mean and population std over the runs
expect_eq "0" "$(sqlite3 "$ALL" "SELECT count(*) FROM dataset_stats d JOIN (SELECT layer, head, avg(prev_token) AS mu, avg(prev_token * prev_token) - avg(prev_token) * avg(prev_token) AS var, count(*) AS n FROM head_stats GROUP BY layer, head) h USING (layer, head) WHERE d.stat = 'prev_token' AND (abs(d.mean - h.mu) > 1e-12 OR abs(d.std * d.std - h.var) > 1e-9 OR d.n_runs != h.n)")" "mean and std over runs"
expect_eq "480" "$(sqlite3 "$ALL" "SELECT count(*) FROM dataset_stats")" "5 layers x 8 heads x 12 statistics"

# Two shards, merged, equal the unsharded run row for row (run ids aside).
expect_stdout_contains "3 of 5 prompts (shard 0/2)" "$LOUPE" trace "$M" --prompts "$P" --dataset stories --shard 0/2 --db "$TMP/s0.db" --threads 1
expect_stdout_contains "2 of 5 prompts (shard 1/2)" "$LOUPE" trace "$M" --prompts "$P" --dataset stories --shard 1/2 --db "$TMP/s1.db" --threads 1
expect_stdout_contains "merged 5 runs from 2 databases" "$LOUPE" merge "$TMP/merged.db" "$TMP/s0.db" "$TMP/s1.db"
same() { # same TABLE COLUMNS: rows keyed by prompt_index instead of run_id, both ways
  local q="SELECT r.prompt_index, $2 FROM $1 t JOIN runs r ON r.id = t.run_id"
  sqlite3 "$TMP/merged.db" "ATTACH '$ALL' AS a; SELECT count(*) FROM ($q EXCEPT SELECT r.prompt_index, $2 FROM a.$1 t JOIN a.runs r ON r.id = t.run_id); SELECT count(*) FROM (SELECT r.prompt_index, $2 FROM a.$1 t JOIN a.runs r ON r.id = t.run_id EXCEPT $q)" | tr '\n' ' '
}
expect_eq "0 0 " "$(same head_stats "layer, head, entropy, max_prob, sink, prev_token, self, distance, local_frac, output_norm")" "head_stats"
expect_eq "0 0 " "$(same tokens "pos, token_id, piece, label, generated")" "tokens"
expect_eq "0 0 " "$(same predictions "pos, rank, token_id, prob, logit")" "predictions"
expect_eq "0 0 " "$(same attention "layer, head, n_q, n_k, probs")" "attention maps"
expect_eq "0 0 " "$(sqlite3 "$TMP/merged.db" "ATTACH '$ALL' AS a; SELECT count(*) FROM (SELECT * FROM dataset_stats EXCEPT SELECT * FROM a.dataset_stats); SELECT count(*) FROM (SELECT * FROM a.dataset_stats EXCEPT SELECT * FROM dataset_stats)" | tr '\n' ' ')" "dataset_stats recomputed"
expect_eq "1,2,3,4,5|stories" "$(sqlite3 "$TMP/merged.db" "SELECT group_concat(id), (SELECT group_concat(name) FROM datasets) FROM (SELECT id FROM runs ORDER BY id)")" "runs renumbered, datasets merged"

# Refusals: a non-empty output, a database of another schema version (nothing written).
expect_one_line_error "$LOUPE" merge "$TMP/merged.db" "$TMP/s0.db"
cp "$TMP/s1.db" "$TMP/old.db"
sqlite3 "$TMP/old.db" "UPDATE meta SET value = '1' WHERE key = 'schema_version'"
expect_one_line_error "$LOUPE" merge "$TMP/m2.db" "$TMP/s0.db" "$TMP/old.db"
expect_stderr_contains "schema_version 1" "$LOUPE" merge "$TMP/m3.db" "$TMP/s0.db" "$TMP/old.db"
expect_eq "0" "$(sqlite3 "$TMP/m3.db" "SELECT count(*) FROM runs")" "nothing merged"

# Padded batches: each sequence its own run (batch id, index, padding recorded) computing what
# it computes alone, the batch stacked: right padding bit for bit, left padding within 1e-4
# (observed: bit for bit too, since activations run row by row; 7e-6 logits before).
B="$TMP/batch.db"
expect_status 0 "$LOUPE" trace "$M" --prompts "$P" --dataset alone --db "$B" --logits full --maps f32 --threads 1
expect_status 0 "$LOUPE" trace "$M" --prompts "$P" --dataset right --batch-size 3 --db "$B" --logits full --maps f32 --threads 1
expect_status 0 "$LOUPE" trace "$M" --prompts "$P" --dataset left --batch-size 3 --padding left --db "$B" --logits full --maps f32 --threads 1
expect_eq "0|0|0|6|0|5 2|0|2|7|0|4 4|1|1|7|0|8" "$(sqlite3 "$B" "SELECT group_concat(prompt_index || '|' || batch_id || '|' || batch_index || '|' || pad_left || '|' || pad_right || '|' || n_tokens, ' ') FROM runs WHERE dataset = 'left' AND pad_left > 0")" "batch columns (left padding)"
cmp_out=$(python3 "$(dirname "$0")/batch_compare.py" "$B" alone right left)
echo "$cmp_out"
expect_eq "right tokens True logits 0.00e+00 maps 0.00e+00" "$(echo "$cmp_out" | sed -n 1p | sed 's/ stats.*//')" "right padding = alone"
expect_eq "True" "$(echo "$cmp_out" | sed -n 2p | python3 -c "import sys; f = sys.stdin.read().split(); print(f[2] == 'True' and float(f[4]) < 1e-4 and float(f[6]) < 1e-4 and float(f[8]) < 1e-4)")" "left padding = alone within 1e-4"
expect_one_line_error "$LOUPE" trace "$M" --prompts "$P" --batch-size 2 --generate 3 --db "$B"

# The aggregate drawn; an unknown dataset is one line, exit 2.
# A run traced before a statistic's column existed has NULL there: the aggregate leaves it out
cp "$TMP/s1.db" "$TMP/old.db"
sqlite3 "$TMP/old.db" "UPDATE head_stats SET keys90 = NULL WHERE run_id = 1"
expect_stdout_contains "merged 2 runs" "$LOUPE" merge "$TMP/oldm.db" "$TMP/old.db"
expect_eq "1|0" "$(sqlite3 "$TMP/oldm.db" "SELECT min(n_runs), count(*) FILTER (WHERE abs(mean - (SELECT h.keys90 FROM head_stats h WHERE h.run_id = 2 AND h.layer = d.layer AND h.head = d.head)) > 1e-12) FROM dataset_stats d WHERE stat = 'keys90'")" "NULL statistics left out of the mean"
expect_eq "2" "$(sqlite3 "$TMP/oldm.db" "SELECT min(n_runs) FROM dataset_stats WHERE stat = 'keys50'")" "other statistics keep both runs"
expect_stdout_contains "wrote" "$LOUPE" render "$ALL" --dataset stories --stats prev_token -o "$TMP/ds.svg"
expect_eq "2" "$(grep -c 'dataset stories, mean over 5 runs' "$TMP/ds.svg")" "dataset picture title"
expect_one_line_error "$LOUPE" render "$ALL" --dataset nope --stats entropy -o "$TMP/nope.png"

finish
