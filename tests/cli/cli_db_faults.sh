#!/usr/bin/env bash
# The trace database under faults (issue 16). Each fault gives one line on stderr naming it, exit
# 2, every complete run intact (its rows' fingerprint unchanged), the faulted run never shown as
# complete, and PRAGMA integrity_check ok: the disk filling during a run (a file-size limit, and a
# 400 KiB tmpfs when the test may mount one), a read-only database file and a read-only folder
# (readers still read there), a write lock held past the busy timeout (and one released before
# it), two traces writing at once (both complete), a file that is not SQLite, a truncated one,
# and export reading while a trace writes. As root the permission cases drop the capabilities
# that bypass file modes (setpriv), so they test what a user meets.
source "$(dirname "$0")/cli_lib.sh"

if ! command -v sqlite3 >/dev/null || ! command -v python3 >/dev/null; then
  echo "SKIP: the sqlite3 shell and python3 are needed"
  exit 77
fi
model="$TMP/model"
synth_or_stop "$model"
short="1,20,21,22,23,24,25,26"
long=$(awk 'BEGIN { srand(3); for (i = 0; i < 400; i++) printf "%s%d", (i ? "," : ""), 5 + int(rand() * 400) }')
qd() { sqlite3 -batch -noheader -cmd ".timeout 10000" "$1" "$2"; }
# fingerprint DB RUN: the run's status and a digest of every row it owns
fingerprint() {
  qd "$1" "SELECT (SELECT status FROM runs WHERE id = $2),
     (SELECT count(*) || ':' || total(length(probs)) || ':' || group_concat(hex(substr(probs, 1, 8)), '') FROM (SELECT probs FROM attention WHERE run_id = $2 ORDER BY layer, head)),
     (SELECT count(*) || ':' || printf('%.12g', total(entropy)) FROM head_stats WHERE run_id = $2),
     (SELECT count(*) || ':' || total(token_id) FROM tokens WHERE run_id = $2)"
}
# no_half_runs DB WHAT: every run not complete owns no rows; integrity ok
no_half_runs() {
  local half
  half=$(qd "$1" "SELECT group_concat(id || ' ' || status) FROM runs r WHERE status != 'complete' AND
           ((SELECT count(*) FROM tokens WHERE run_id = r.id) + (SELECT count(*) FROM attention WHERE run_id = r.id) +
            (SELECT count(*) FROM head_stats WHERE run_id = r.id)) > 0")
  [ -z "$half" ] && ok || bad "$2: runs half written: $half"
  [ "$(qd "$1" "PRAGMA integrity_check")" = ok ] && ok || bad "$2: integrity_check failed"
  [ "$(qd "$1" "SELECT count(*) FROM runs WHERE status = 'complete' AND n_tokens != (SELECT count(*) FROM tokens WHERE run_id = runs.id)")" = 0 ] && ok || bad "$2: a complete run lacks tokens"
}
# one_line_fault TEXT CMD...: exit 2, one line on stderr, naming TEXT
one_line_fault() {
  local text=$1; shift
  expect_one_line_error "$@"
  grep -qF -- "$text" "$TMP/err" && ok || bad "stderr lacks '$text': $(cat "$TMP/err")"
}
# unprivileged CMD...: run without the capabilities that ignore file modes (as root)
if [ "$(id -u)" -eq 0 ]; then
  if command -v setpriv >/dev/null; then
    unprivileged() { setpriv --bounding-set=-dac_override,-dac_read_search,-fowner -- "$@"; }
  else
    unprivileged() { return 99; }
  fi
else
  unprivileged() { "$@"; }
fi

base="$TMP/base.db"
expect_status 0 "$LOUPE" trace "$model" --tokens "$short" --db "$base" --maps f32 --threads 1
fp1=$(fingerprint "$base" 1)
case "$fp1" in complete\|16:*) ok ;; *) bad "base run: $fp1" ;; esac

# ---- the disk fills during a run: a file-size limit (loupe ignores SIGXFSZ itself, so writes
# fail EFBIG and the run is marked failed; the shell here does not ignore it for loupe)
db="$TMP/fsize.db"; cp "$base" "$db"
(trap - XFSZ; ulimit -f 1000; exec "$LOUPE" trace "$model" --tokens "$long" --db "$db" --maps f32 --threads 1) >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && ok || bad "file-size limit: exit $rc: $(cat "$TMP/err")"
grep -qF "fsize.db: insert: disk I/O error (File too large)" "$TMP/err" && ok || bad "file-size limit: $(cat "$TMP/err")"
[ "$(fingerprint "$db" 1)" = "$fp1" ] && ok || bad "file-size limit: run 1 changed"
[ "$(qd "$db" "SELECT status FROM runs WHERE id = 2")" = failed ] && ok || bad "file-size limit: run 2 not marked failed"
no_half_runs "$db" "file-size limit"
expect_status 0 "$LOUPE" trace "$model" --tokens "$short" --db "$db" --threads 1 # room again: runs go on
[ "$(qd "$db" "SELECT status FROM runs WHERE id = 3")" = complete ] && ok || bad "after the limit: run 3 not complete"

# ---- ... and a small filesystem (ENOSPC), when this test may mount one
mkdir "$TMP/small"
if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=400k tmpfs "$TMP/small" 2>/dev/null; then
  db="$TMP/small/full.db"; cp "$base" "$db"
  one_line_fault "full.db: insert: database or disk is full" "$LOUPE" trace "$model" --tokens "$long" --db "$db" --maps f32 --threads 1
  [ "$(fingerprint "$db" 1)" = "$fp1" ] && ok || bad "disk full: run 1 changed"
  [ "$(qd "$db" "SELECT status FROM runs WHERE id = 2")" = failed ] && ok || bad "disk full: run 2 not marked failed"
  no_half_runs "$db" "disk full"
  expect_status 0 "$LOUPE" render "$db" --run 1 --layer 0 --head 1 -o "$TMP/full.png"
  umount "$TMP/small"
else
  echo "note: no tmpfs mount here (not root or not permitted): the full-disk case ran with the file-size limit only"
fi

# ---- a read-only file, a read-only folder
mkdir "$TMP/ro"; cp "$base" "$TMP/ro/runs.db"; chmod 444 "$TMP/ro/runs.db"
if unprivileged true; then
  one_line_fault "runs.db: the database file is not writable (Permission denied)" unprivileged "$LOUPE" trace "$model" --tokens "$short" --db "$TMP/ro/runs.db"
  [ "$(fingerprint "$TMP/ro/runs.db" 1)" = "$fp1" ] && [ "$(qd "$TMP/ro/runs.db" "SELECT count(*) FROM runs")" = 1 ] && ok || bad "read-only file: changed"
  expect_status 0 unprivileged "$LOUPE" render "$TMP/ro/runs.db" --run 1 --layer 0 --head 1 -o "$TMP/ro_file.png"
  # a WAL reader of a file it cannot write leaves SQLite's (empty) -wal and -shm behind
  rm -f "$TMP/ro/runs.db-wal" "$TMP/ro/runs.db-shm"
  chmod 644 "$TMP/ro/runs.db"; chmod 555 "$TMP/ro"
  one_line_fault "its folder $TMP/ro is not writable (Permission denied)" unprivileged "$LOUPE" trace "$model" --tokens "$short" --db "$TMP/ro/runs.db"
  one_line_fault "its folder $TMP/ro is not writable" unprivileged "$LOUPE" trace "$model" --tokens "$short" --db "$TMP/ro/new.db"
  [ ! -e "$TMP/ro/new.db" ] && ok || bad "read-only folder: a database was created"
  # readers need no -shm when there is no -wal: render and export read the folder as it is
  expect_status 0 unprivileged "$LOUPE" render "$TMP/ro/runs.db" --run 1 --layer 0 --head 1 -o "$TMP/ro_dir.png"
  expect_status 0 unprivileged "$LOUPE" export "$TMP/ro/runs.db" --run 1 -o "$TMP/ro_dir.safetensors"
  [ "$(ls "$TMP/ro")" = runs.db ] && ok || bad "read-only folder: files appeared: $(ls "$TMP/ro")"
  chmod 755 "$TMP/ro"
  [ "$(fingerprint "$TMP/ro/runs.db" 1)" = "$fp1" ] && ok || bad "read-only folder: run 1 changed"
else
  echo "note: running as root without setpriv: the read-only cases are skipped"
fi

# ---- a write lock held past the busy timeout (10 s), and one released within it
db="$TMP/lock.db"; cp "$base" "$db"
hold_lock() { # hold_lock SECONDS: BEGIN IMMEDIATE in another process, returns once it is held
  rm -f "$TMP/locked"
  python3 -c "
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute('BEGIN IMMEDIATE'); open(sys.argv[2], 'w').close(); time.sleep(float(sys.argv[3])); c.execute('ROLLBACK')" "$db" "$TMP/locked" "$1" &
  locker=$!
  for _ in $(seq 200); do [ -e "$TMP/locked" ] && break; sleep 0.05; done
}
hold_lock 12.5
one_line_fault "lock.db: database is locked (another connection held the write lock past the 10 s busy timeout)" "$LOUPE" trace "$model" --tokens "$short" --db "$db" --threads 1
wait "$locker"
[ "$(qd "$db" "SELECT count(*) FROM runs")" = 1 ] && [ "$(fingerprint "$db" 1)" = "$fp1" ] && ok || bad "lock: the database changed"
no_half_runs "$db" "lock"
hold_lock 1.5
expect_status 0 "$LOUPE" trace "$model" --tokens "$short" --db "$db" --threads 1
wait "$locker"
[ "$(qd "$db" "SELECT status FROM runs WHERE id = 2")" = complete ] && ok || bad "a lock released in time: run 2 not complete"

# ---- two traces writing at once, into a new database and into one with runs
for start in new existing; do
  db="$TMP/two_$start.db"; [ "$start" = existing ] && cp "$base" "$db"
  "$LOUPE" trace "$model" --tokens "$long" --db "$db" --maps f32 --threads 1 >/dev/null 2>"$TMP/a.err" & a=$!
  "$LOUPE" trace "$model" --tokens "$long" --db "$db" --maps f32 --threads 1 >/dev/null 2>"$TMP/b.err" & b=$!
  wait "$a"; ra=$?; wait "$b"; rb=$?
  [ "$ra" -eq 0 ] && [ "$rb" -eq 0 ] && ok || bad "two writers ($start): exit $ra/$rb: $(cat "$TMP/a.err" "$TMP/b.err")"
  want=2; [ "$start" = existing ] && want=3
  [ "$(qd "$db" "SELECT count(*) FROM runs WHERE status = 'complete'")" = "$want" ] && ok || bad "two writers ($start): $(qd "$db" "SELECT group_concat(id || ' ' || status) FROM runs")"
  no_half_runs "$db" "two writers ($start)"
  last=$(qd "$db" "SELECT max(id) FROM runs")
  [ "$(fingerprint "$db" $((last - 1)) | cut -d'|' -f2-)" = "$(fingerprint "$db" "$last" | cut -d'|' -f2-)" ] && ok || bad "two writers ($start): the two runs differ"
done

# ---- export reads while a trace writes (render's case is in cli_db_safety.sh)
db="$TMP/busy.db"; cp "$base" "$db"
"$LOUPE" trace "$model" --tokens "$long$(printf ',%s' $(seq 5 400))" --db "$db" --maps f32 --threads 1 >/dev/null 2>"$TMP/w.err" & writer=$!
reads=0; fails=0
while kill -0 "$writer" 2>/dev/null; do
  if "$LOUPE" export "$db" --run 1 -o "$TMP/during.safetensors" >/dev/null 2>"$TMP/e.err"; then
    reads=$((reads + 1))
  else
    fails=$((fails + 1)); echo "export failed during the write: $(cat "$TMP/e.err")" >&2
  fi
done
wait "$writer" && ok || bad "the writer failed: $(cat "$TMP/w.err")"
[ "$reads" -ge 1 ] && [ "$fails" -eq 0 ] && ok || bad "export during the write: $reads read, $fails failed"
echo "$reads exports while trace wrote"
"$LOUPE" export "$db" --run 1 -o "$TMP/after.safetensors" >/dev/null
cmp -s "$TMP/during.safetensors" "$TMP/after.safetensors" && ok || bad "run 1 exported during the write differs from after it"

# ---- not SQLite, truncated: refused in one line, never written to
printf 'name,age\nsoup,3\n%.0s' $(seq 40) >"$TMP/text.db"
head -c 3000 "$base" >"$TMP/trunc.db"
for f in text trunc; do
  sum=$(md5sum <"$TMP/$f.db")
  case $f in text) why="file is not a database" ;; trunc) why="database disk image is malformed" ;; esac
  one_line_fault "$f.db: reading the schema: $why" "$LOUPE" trace "$model" --tokens "$short" --db "$TMP/$f.db"
  one_line_fault "$f.db: not a trace database: $why" "$LOUPE" render "$TMP/$f.db" --run 1 --layer 0 --head 0 -o "$TMP/$f.png"
  one_line_fault "$f.db" "$LOUPE" export "$TMP/$f.db" --run 1 -o "$TMP/$f.safetensors"
  [ "$(md5sum <"$TMP/$f.db")" = "$sum" ] && [ ! -e "$TMP/$f.png" ] && ok || bad "$f.db was written to"
done
# a table name with a newline in a damaged schema (found by fuzz_trace_db) stays one line
bad_schema="$(dirname "$0")/../fuzz/trace_db/regress/newline_in_schema_name.sqlite"
cp "$bad_schema" "$TMP/schema.db"
one_line_fault "malformed database schema (router_s" "$LOUPE" render "$TMP/schema.db" --run 1 --layer 0 --head 0 -o "$TMP/schema.png"
grep -qF '\x0A)' "$TMP/err" && ok || bad "the newline is not escaped: $(cat "$TMP/err")"
one_line_fault "malformed database schema" "$LOUPE" trace "$model" --tokens "$short" --db "$TMP/schema.db"
finish
