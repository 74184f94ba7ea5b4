#!/usr/bin/env bash
# CLI: loupe bench --attention: its flags, and a tiny run (T=70, one head dim, one repetition)
# whose output names the FMA peak, the kernel figures (MHA and GQA, 2 threads beside 1) and
# both whole passes.
source "$(dirname "$0")/cli_lib.sh"

expect_stdout_contains "--head-dim D" "$LOUPE" bench --help
expect_one_line_error "$LOUPE" bench --head-dim 64
expect_stderr_contains "--head-dim needs --attention" "$LOUPE" bench --head-dim 64
expect_one_line_error "$LOUPE" bench --attention --gemm-only
expect_one_line_error "$LOUPE" bench --tokens 4096
expect_stderr_contains "at most 2048" "$LOUPE" bench --tokens 4096
expect_one_line_error "$LOUPE" bench --attention --head-dim 0
expect_one_line_error "$LOUPE" bench --attention --tokens 40000

expect_status 0 "$LOUPE" bench --attention --tokens 70 --head-dim 80 --reps 1 --threads 2 --dir "$TMP"
for want in "FMA peak" "causal    70 x 70    head_dim  80, 8 heads" "% of the FMA peak" \
            "8 heads / 2 KV" "x 1 thread by the wall clock" "by the CPU clocks" \
            "CPU clock of the busiest thread" "T    70 maps none" "T    70 all probes" "x the bare pass" "peak RSS" \
            "T    70 interleaved, best of 1 each: probes off" "without the sparsity statistics"; do
  if grep -qF "$want" "$TMP/out"; then ok; else bad "bench --attention output lacks '$want'"; fi
done
if ls "$TMP"/loupe-bench-* >/dev/null 2>&1; then bad "bench left its model folder behind"; else ok; fi
finish
