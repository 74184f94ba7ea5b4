#!/usr/bin/env bash
# Fuzzing in rounds that add up: each target runs under libFuzzer + ASan + UBSan starting from its
# kept corpus (tests/fuzz/<target>/corpus/, merged and minimized after each round so it stays
# small), its seeds and regressions and ../shared's real files; every round appends one line to
# tests/fuzz/rounds.tsv (UTC time, target, seconds spent, inputs executed, corpus files, findings,
# CPU seconds the fuzzer got), so the hours spent on a target are the sum of its lines. Under nice on
# a busy machine the CPU seconds are what counts; rounds before that column was added leave it empty. A finding stops that target's round and
# is kept as build-fuzz/fuzz-artifacts/<target>-crash-*; fix it, copy the input into
# tests/fuzz/<target>/regress/ and run again.
#
#   SECONDS_PER_TARGET (default 300)  libFuzzer's -max_total_time for each target this round
#   TARGETS (default: all)            e.g. TARGETS="prompts cli trace_db"
#   BUILD_DIR (default build-fuzz)
#   NO_BUILD=1                        use the fuzz_*_libfuzzer binaries already in BUILD_DIR
#   fuzz_rounds.sh --summary          hours, inputs and findings per target from rounds.tsv
#
# The machine is shared: one fuzzer at a time, under nice -n 19 (take what others leave).
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
log="$root/tests/fuzz/rounds.tsv"
all="gguf weights tokenizer arch llama2c encode leak_mask st_index prompts cli trace_db"

if [ "${1:-}" = "--summary" ]; then
  [ -f "$log" ] || { echo "no rounds yet ($log)"; exit 0; }
  printf "%-10s %6s %8s %9s %14s %7s %8s\n" target rounds hours cpu_hours inputs corpus findings
  # a round without a CPU figure (older rounds) counts its wall-clock seconds as CPU
  awk -F'\t' 'NR > 1 { s[$2] += $3; u[$2] += ($7 == "" ? $3 : $7); n[$2] += $4; f[$2] += $6; c[$2] = $5; r[$2]++ }
    END { for (t in s) printf "%-10s %6d %8.2f %9.2f %14d %7d %8d\n", t, r[t], s[t] / 3600, u[t] / 3600, n[t], c[t], f[t] }' "$log" | sort
  exit 0
fi

build="${BUILD_DIR:-build-fuzz}"
seconds="${SECONDS_PER_TARGET:-300}"
targets="${TARGETS:-$all}"
shared="${LOUPE_SHARED:-$root/../shared}"
artifacts="$build/fuzz-artifacts"
command -v clang >/dev/null || { echo "fuzz_rounds: clang not found (sh .ci/setup fuzz)" >&2; exit 2; }
if [ -z "${NO_BUILD:-}" ]; then
  CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOUPE_FUZZ=ON \
    -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" >/dev/null
  bins=""
  for t in $targets; do bins="$bins fuzz_${t}_libfuzzer"; done
  nice -n 19 cmake --build "$build" -j1 --target $bins
fi
mkdir -p "$artifacts"
[ -f "$log" ] || printf 'utc\ttarget\tseconds\tinputs\tcorpus_files\tfindings\tcpu_seconds\n' >"$log"
work="$(mktemp -d "${TMPDIR:-/tmp}/loupe-rounds.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# real files that seed a target (by path; never copied into the repository)
real_seeds() {
  case $1 in
    gguf) ls "$shared"/models/stories260K/*.gguf "$shared"/models/stories260K/quant/*.gguf ;;
    weights) ls "$shared/models/stories260K/hf/model.safetensors" "$shared"/models/stories260K/reference/*/tokens.npy ;;
    arch) ls "$root"/configs/*.yaml "$shared"/configs/*/config.json ;;
    llama2c) ls "$shared/models/stories260K/stories260K.bin" "$shared/models/stories260K/tok512.bin" ;;
  esac 2>/dev/null || true
}
max_len() {
  case $1 in
    gguf|weights|trace_db) echo 65536 ;;
    llama2c|arch) echo 16384 ;;
    leak_mask) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

status=0
for t in $targets; do
  bin="$build/tests/fuzz/fuzz_${t}_libfuzzer"
  corpus="$root/tests/fuzz/$t/corpus"
  seeds="$work/$t-seeds"
  mkdir -p "$corpus" "$seeds"
  for f in "$root/tests/fuzz/$t"/* "$root/tests/fuzz/$t"/regress/* $(real_seeds "$t"); do
    [ -f "$f" ] && ln -sf "$f" "$seeds/$(echo "$f" | md5sum | cut -c1-8)-$(basename "$f")"
  done
  echo "== fuzz_$t: ${seconds}s from $(ls "$corpus" | wc -l) corpus files and $(ls "$seeds" | wc -l) seeds"
  findings=0
  started=$(date +%s)
  TIMEFORMAT='%3U %3S' # the fuzzer's user and system CPU seconds, written by `time` below
  if ! { time LOUPE_SHARED="$shared" LOUPE_TEST_TMP="$work" nice -n 19 "$bin" "$corpus" "$seeds" \
        -max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 \
        -malloc_limit_mb=1024 -close_fd_mask=3 -print_final_stats=1 \
        -artifact_prefix="$artifacts/${t}-" >"$work/$t.log" 2>&1; } 2>"$work/$t.cpu"; then
    findings=1
    status=1
    echo "fuzz_$t: FINDING; last lines of its log:" >&2
    tail -n 30 "$work/$t.log" >&2
  fi
  spent=$(( $(date +%s) - started )) # a finding ends the round early
  cpu=$(awk '{ printf "%d", $1 + $2 }' "$work/$t.cpu")
  inputs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log" | tail -n 1)
  # keep the corpus minimal: only inputs that add coverage survive the merge
  mkdir -p "$work/$t-min"
  LOUPE_SHARED="$shared" LOUPE_TEST_TMP="$work" nice -n 19 "$bin" -merge=1 -max_len="$(max_len "$t")" \
    -timeout=10 -close_fd_mask=3 "$work/$t-min" "$corpus" >"$work/$t-merge.log" 2>&1 || true
  if [ -n "$(ls "$work/$t-min")" ]; then
    rm -f "$corpus"/*
    cp "$work/$t-min"/* "$corpus"/
  fi
  n_corpus=$(ls "$corpus" | wc -l)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$t" "$spent" "${inputs:-0}" \
    "$n_corpus" "$findings" "$cpu" >>"$log"
  echo "fuzz_$t: ${inputs:-0} inputs, corpus $n_corpus files, findings $findings, ${cpu}s CPU of ${spent}s"
done
exit "$status"
