#!/usr/bin/env bash
# CLI: loupe bench flags (parsed from its option table) and a tiny run (M=6, one repetition) whose
# output names every shape.
source "$(dirname "$0")/cli_lib.sh"

expect_status 0 "$LOUPE" bench --help
expect_stdout_contains "--threads N" "$LOUPE" bench --help
expect_stdout_contains "--dir DIR" "$LOUPE" help bench
expect_one_line_error "$LOUPE" bench --threads 0
expect_stderr_contains "loupe bench: --threads: '0' is not a whole number in 1..1024" "$LOUPE" bench --threads 0
expect_one_line_error "$LOUPE" bench --threads abc
expect_one_line_error "$LOUPE" bench --reps -1
expect_one_line_error "$LOUPE" bench --frobnicate
expect_one_line_error "$LOUPE" bench --threads
expect_one_line_error "$LOUPE" bench --threads=3 extra
expect_one_line_error "$LOUPE" bench --gemm-only=yes

expect_status 0 "$LOUPE" bench --m 6 --reps 1 --threads 2 --gemm-only
for shape in "6 x 2048 x 2048" "6 x 5632 x 2048" "6 x 2048 x 5632" "6 x 5632 x 5632"; do
  if grep -qF "$shape" "$TMP/out"; then ok; else bad "bench output lacks shape '$shape'"; fi
done
if grep -qF "command: loupe bench --m 6 --reps 1 --threads 2 --gemm-only" "$TMP/out"; then ok; else bad "bench does not echo its command line"; fi
# Either OpenBLAS was found (and a ratio is printed) or it says so.
if grep -qE "OpenBLAS not found|OpenBLAS: libopenblas" "$TMP/out"; then ok; else bad "bench says nothing about OpenBLAS"; fi
# LP_ISA=ref forces the reference kernels, and the bench reports it.
LP_ISA=ref "$LOUPE" bench --m 6 --reps 1 --threads 1 --gemm-only >"$TMP/out" 2>"$TMP/err"
if grep -qF "kernels: ref" "$TMP/out"; then ok; else bad "LP_ISA=ref not honoured: $(head -3 "$TMP/out")"; fi
finish
