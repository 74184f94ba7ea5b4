# Shared helpers for the CLI tests: run loupe, check exit status and output, keep going, and end
# with a "N passed, N failed" line.
set -u
LOUPE="${LOUPE_BIN:?LOUPE_BIN must point at the loupe binary}"
SHARED="${LOUPE_SHARED:-}"
TMP="$(mktemp -d "${LOUPE_TEST_TMP:-/tmp}/cli.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0

ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*" >&2; }

# expect_status CODE CMD...
expect_status() {
  local want=$1; shift
  "$@" >"$TMP/out" 2>"$TMP/err"
  local got=$?
  if [ "$got" -eq "$want" ]; then ok; else bad "exit $got, want $want: $* (stderr: $(head -c 300 "$TMP/err"))"; fi
}

# expect_stdout_contains TEXT CMD...
expect_stdout_contains() {
  local text=$1; shift
  "$@" >"$TMP/out" 2>"$TMP/err"
  if grep -qF -- "$text" "$TMP/out"; then ok; else bad "stdout lacks '$text': $*"; fi
}

# expect_stderr_contains TEXT CMD...
expect_stderr_contains() {
  local text=$1; shift
  "$@" >"$TMP/out" 2>"$TMP/err"
  if grep -qF -- "$text" "$TMP/err"; then ok; else bad "stderr lacks '$text': $* (stderr: $(head -c 300 "$TMP/err"))"; fi
}

# expect_one_line_error CMD...: exit 2 and exactly one line on stderr
expect_one_line_error() {
  "$@" >"$TMP/out" 2>"$TMP/err"
  local got=$?
  local lines
  lines=$(wc -l <"$TMP/err")
  if [ "$got" -eq 2 ] && [ "$lines" -eq 1 ]; then ok; else bad "want one-line error and exit 2, got exit $got with $lines lines: $*"; fi
}

# synth_or_stop DIR [OPTION...]: write loupe synth's model to DIR; a script that cannot go on
# without it ends here with the failure counted and synth's stderr in the log.
synth_or_stop() {
  if ! "$LOUPE" synth "$@" >/dev/null 2>"$TMP/synth.err"; then
    bad "loupe synth failed: $(head -c 300 "$TMP/synth.err")"
    finish
    exit 1
  fi
}

# expect_sql WANT DB QUERY WHAT: the sqlite3 shell's answer to QUERY on DB is exactly WANT.
expect_sql() {
  local got
  got=$(sqlite3 "$2" "$3")
  if [ "$got" = "$1" ]; then ok; else bad "$4: $got, want $1"; fi
}

# A script whose later checks need ../shared comes in two parts: the checks that need nothing
# inside `if local_part; then ... fi`, then `require_shared` and the rest. tests/cli/CMakeLists.txt
# registers it twice (PART local and PART shared), so the first part runs, and can fail, on a
# fresh clone: LOUPE_PART=local runs the first part and ends at require_shared with its verdict;
# LOUPE_PART=shared runs only the rest and skips (77) without ../shared; unset, both.
LOUPE_PART="${LOUPE_PART:-all}"
local_part() { [ "$LOUPE_PART" != shared ]; }

require_shared() {
  if [ "$LOUPE_PART" = local ]; then
    finish
    exit
  fi
  if [ -z "$SHARED" ] || [ ! -d "$SHARED" ]; then
    echo "SKIP: ../shared not found (set LOUPE_SHARED)"
    exit 77
  fi
}

finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
