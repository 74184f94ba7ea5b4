#!/usr/bin/env bash
# Database safety (issue 7): a `loupe trace` killed with SIGKILL at several moments leaves the
# database readable (PRAGMA integrity_check), earlier complete runs intact and still complete, and
# the killed run not complete; a later trace still works. `loupe render` and a sqlite3 reader read
# while a trace writes (WAL). A database from a newer schema is refused with one line; an older
# one (no meta row, no tokens.label) is migrated. The model is written by `loupe synth` (2 layers x
# 8 heads, 10 MB); the long runs use 900 random token ids with f32 maps (~52 MB written), which
# takes about 1-2 s, so a kill lands before, during and after the bulk of the writing.
#
# There is no test-only hook in trace: the kill moments are found by polling (the 'running' row
# appearing; the -wal file growing past a size) and by fractions of a measured full run.
source "$(dirname "$0")/cli_lib.sh"

if ! command -v sqlite3 >/dev/null; then
  echo "SKIP: the sqlite3 shell is not installed (apt-get install sqlite3)"
  exit 77
fi

model="$TMP/model"
synth_or_stop "$model"
db="$TMP/runs.db"
q() { sqlite3 -batch -noheader -cmd ".timeout 10000" "$db" "$1"; }
long_ids=$(awk 'BEGIN { srand(7); for (i = 0; i < 900; i++) printf "%s%d", (i ? "," : ""), 5 + int(rand() * 400) }')
short_ids="1,20,21,22,23,24,25,26"

# A fingerprint of one run's stored data: changes if any row of it is lost or altered.
fingerprint() {
  q "SELECT (SELECT status FROM runs WHERE id = $1),
            (SELECT count(*) || ':' || total(length(probs)) || ':' || group_concat(hex(substr(probs, length(probs) / 2, 8)), '')
               FROM (SELECT probs FROM attention WHERE run_id = $1 ORDER BY layer, head)),
            (SELECT count(*) || ':' || printf('%.12g', total(entropy) + total(output_norm)) FROM head_stats WHERE run_id = $1),
            (SELECT count(*) || ':' || total(token_id) FROM tokens WHERE run_id = $1),
            (SELECT count(*) || ':' || printf('%.12g', total(prob)) FROM predictions WHERE run_id = $1)"
}

# Two complete runs to protect: a short one and a long one (which also measures the duration).
expect_status 0 "$LOUPE" trace "$model" --tokens "$short_ids" --db "$db" --threads 1
start=$(date +%s%N)
expect_status 0 "$LOUPE" trace "$model" --tokens "$long_ids" --db "$db" --maps f32 --threads 1
full_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "a full long run takes ${full_ms} ms"
fp1=$(fingerprint 1)
fp2=$(fingerprint 2)
case "$fp1" in complete\|*) ok ;; *) bad "run 1 is not complete: $fp1" ;; esac
case "$fp2" in complete\|*) ok ;; *) bad "run 2 is not complete: $fp2" ;; esac

wal_bytes() { stat -c %s "$db-wal" 2>/dev/null || echo 0; }
max_run() { q "SELECT coalesce(max(id), 0) FROM runs"; }
n_killed=0
# check_after_kill WHAT: the database is sound, runs 1 and 2 are unchanged, and every run is either
# complete and whole (a kill that landed after the commit) or not complete with no data rows.
check_after_kill() {
  local what=$1
  local integrity
  integrity=$(q "PRAGMA integrity_check")
  if [ "$integrity" = "ok" ]; then ok; else bad "$what: integrity_check says: $integrity"; fi
  if [ "$(fingerprint 1)" = "$fp1" ] && [ "$(fingerprint 2)" = "$fp2" ]; then ok; else
    bad "$what: earlier runs changed: $(fingerprint 1) / $(fingerprint 2)"; fi
  local broken
  broken=$(q "SELECT group_concat(id || ' ' || status, ', ') FROM (
                SELECT r.id, r.status, r.n_tokens,
                       (SELECT count(*) FROM tokens t WHERE t.run_id = r.id) AS n_tok,
                       (SELECT count(*) FROM head_stats h WHERE h.run_id = r.id) AS n_stats,
                       (SELECT count(*) FROM attention a WHERE a.run_id = r.id) AS n_maps,
                       (SELECT count(*) FROM predictions p WHERE p.run_id = r.id) AS n_pred
                FROM runs r)
              WHERE (status = 'complete' AND (n_tok != n_tokens OR n_stats != 16 OR n_maps != 16 OR n_pred = 0))
                 OR (status != 'complete' AND n_tok + n_stats + n_maps + n_pred > 0)")
  if [ -z "$broken" ]; then ok; else bad "$what: runs half written: $broken"; fi
}

# kill_trace WHAT WAIT_CMD: start a long trace, run WAIT_CMD (returns when it is time), SIGKILL.
kill_trace() {
  local what=$1 wait_cmd=$2
  local last
  last=$(max_run)
  "$LOUPE" trace "$model" --tokens "$long_ids" --db "$db" --maps f32 --threads 1 >"$TMP/kill.out" 2>&1 &
  local pid=$!
  eval "$wait_cmd"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  local status="not recorded"
  [ "$(max_run)" -gt "$last" ] && status=$(q "SELECT status FROM runs WHERE id = $(max_run)")
  echo "$what: the run is '$status'"
  [ "$status" != complete ] && n_killed=$((n_killed + 1))
  check_after_kill "$what"
}

# wait_for SECONDS CONDITION: poll CONDITION every 5 ms
wait_for() {
  local deadline=$(( $(date +%s%N) + $1 * 1000000000 ))
  until eval "$2"; do
    [ "$(date +%s%N)" -gt "$deadline" ] && return 1
    sleep 0.005
  done
}

kill_trace "killed at once" "true"
kill_trace "killed 20 ms in" "sleep 0.02"
before=$(max_run)
kill_trace "killed once its 'running' row is visible" \
  "wait_for 20 '[ \"\$(max_run)\" -gt $before ]'"
# The first run's writes were checkpointed; the WAL grows again as the long run spills its pages.
kill_trace "killed with 8 MB in the WAL" "wait_for 20 '[ \$(wal_bytes) -gt 8000000 ]'"
kill_trace "killed with 30 MB in the WAL" "wait_for 20 '[ \$(wal_bytes) -gt 30000000 ]'"
for pct in 50 90 97; do
  ms=$((full_ms * pct / 100))
  kill_trace "killed at ${pct}% of a full run (${ms} ms)" "sleep $(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
done

# The database still takes new runs, and they are complete.
expect_status 0 "$LOUPE" trace "$model" --tokens "$short_ids" --db "$db" --threads 1
check_after_kill "after the kills, a new run"
if [ "$(q "SELECT status FROM runs WHERE id = (SELECT max(id) FROM runs)")" = complete ]; then ok; else
  bad "the run after the kills is not complete"; fi
# Most kills must land before the commit, or this test proves nothing.
if [ "$n_killed" -ge 5 ]; then ok; else bad "only $n_killed of 8 kills landed before the commit"; fi

# Readers while a trace writes (WAL): render run 1 and count rows until the writer is done.
"$LOUPE" trace "$model" --tokens "$long_ids" --db "$db" --maps f32 --threads 1 >"$TMP/w.out" 2>&1 &
writer=$!
wait_for 20 "[ \$(wal_bytes) -gt 4000000 ]" || true
reads=0
read_fail=0
while kill -0 "$writer" 2>/dev/null; do
  if "$LOUPE" render "$db" --run 1 --layer 0 --head 1 -o "$TMP/during.png" >/dev/null 2>"$TMP/r.err" &&
     [ "$(q "SELECT count(*) FROM head_stats WHERE run_id = 2")" -eq 16 ]; then
    kill -0 "$writer" 2>/dev/null && reads=$((reads + 1))
  else
    read_fail=$((read_fail + 1))
    echo "read failed during the write: $(head -c 300 "$TMP/r.err")" >&2
  fi
done
wait "$writer"
writer_status=$?
if [ "$writer_status" -eq 0 ]; then ok; else bad "the writer failed (exit $writer_status): $(head -c 300 "$TMP/w.out")"; fi
if [ "$reads" -ge 1 ] && [ "$read_fail" -eq 0 ]; then ok; else
  bad "reads during the write: $reads succeeded while it ran, $read_fail failed"; fi
echo "$reads render + sqlite3 reads while trace wrote"
check_after_kill "after a concurrent read"

# A database from a newer loupe is refused by trace with one line that says so, untouched.
cp "$db" "$TMP/newer.db"
sqlite3 "$TMP/newer.db" "UPDATE meta SET value = '99' WHERE key = 'schema_version'"
expect_one_line_error "$LOUPE" trace "$model" --tokens "$short_ids" --db "$TMP/newer.db"
expect_stderr_contains "schema_version 99 is newer" "$LOUPE" trace "$model" --tokens "$short_ids" --db "$TMP/newer.db"
# ... and by render, which cannot know what a newer schema's columns mean
expect_one_line_error "$LOUPE" render "$TMP/newer.db" --run 1 --layer 0 --head 1 -o "$TMP/newer.png"
expect_stderr_contains "schema_version 99 is newer" "$LOUPE" render "$TMP/newer.db" --run 1 --layer 0 --head 1 -o "$TMP/newer.png"
if [ ! -e "$TMP/newer.png" ]; then ok; else bad "render wrote a picture from a newer database"; fi
if [ "$(sqlite3 "$TMP/newer.db" "SELECT count(*) FROM runs")" = "$(q "SELECT count(*) FROM runs")" ]; then ok; else
  bad "the refused newer database was written to"; fi

# Someone else's database is refused before loupe writes a table into it: one with a table of its
# own, and one whose 'runs' table is not loupe's.
for kind in recipes runs; do
  foreign="$TMP/foreign_$kind.db"
  sqlite3 "$foreign" "CREATE TABLE $kind (name TEXT); INSERT INTO $kind VALUES ('soup')"
  before=$(sqlite3 "$foreign" "SELECT group_concat(name) FROM sqlite_master")
  expect_one_line_error "$LOUPE" trace "$model" --tokens "$short_ids" --db "$foreign"
  expect_stderr_contains "not a loupe trace database" "$LOUPE" trace "$model" --tokens "$short_ids" --db "$foreign"
  after=$(sqlite3 "$foreign" "SELECT group_concat(name) FROM sqlite_master")
  if [ "$before" = "$after" ] && [ "$(sqlite3 "$foreign" "PRAGMA journal_mode")" = delete ]; then ok; else
    bad "$kind: a refused foreign database was changed: tables '$before' -> '$after'"; fi
done

# An older database: no schema_version row (pre-versioning) and no tokens.label column. trace
# migrates it and keeps its runs; render draws the old run.
old="$TMP/old.db"
"$LOUPE" trace "$model" --tokens "$short_ids" --db "$old" --threads 1 >/dev/null 2>&1
sqlite3 "$old" "DELETE FROM meta WHERE key = 'schema_version'; ALTER TABLE tokens DROP COLUMN label;" 2>"$TMP/alter.err"
if sqlite3 "$old" "SELECT label FROM tokens" >/dev/null 2>&1; then
  bad "could not make an old database (tokens.label still there): $(cat "$TMP/alter.err")"
else
  old_fp=$(db="$old" fingerprint 1)
  expect_status 0 "$LOUPE" trace "$model" --tokens "$short_ids" --db "$old" --threads 1
  got=$(sqlite3 "$old" "SELECT value FROM meta WHERE key = 'schema_version'")
  if [ "$got" = "2" ]; then ok; else bad "migrated database has schema_version '$got', want 2"; fi
  if sqlite3 "$old" "SELECT count(label) FROM tokens WHERE run_id = 2" | grep -qx 8; then ok; else
    bad "migrated database: the new run has no token labels"; fi
  if [ "$(db="$old" fingerprint 1)" = "$old_fp" ]; then ok; else bad "migration changed the old run"; fi
  expect_status 0 "$LOUPE" render "$old" --run 1 --layer 0 --head 1 -o "$TMP/old.png"
fi
finish
