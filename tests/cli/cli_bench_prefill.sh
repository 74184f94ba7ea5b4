#!/usr/bin/env bash
# CLI (slow: writes a ~0.45 GB one-layer TinyLlama-shaped model): loupe bench's prefill part runs
# the forward pass with and without probes, reports both, and removes its temporary model.
source "$(dirname "$0")/cli_lib.sh"

expect_one_line_error "$LOUPE" bench --prefill-only --layers 23
expect_one_line_error "$LOUPE" bench --prefill-only --dir "$TMP/does-not-exist"
expect_one_line_error "$LOUPE" bench --gemm-only --prefill-only

expect_status 0 "$LOUPE" bench --prefill-only --layers 1 --tokens 16 --reps 1 --threads 2 --dir "$TMP"
if grep -qE "probes off .* tokens/s" "$TMP/out"; then ok; else bad "no bare-pass tokens/s: $(cat "$TMP/out")"; fi
if grep -qE "all probes .* tokens/s.*x the bare pass" "$TMP/out"; then ok; else bad "no probed-pass line: $(cat "$TMP/out")"; fi
if ls "$TMP" | grep -q loupe-bench; then bad "temporary model folder left behind"; else ok; fi
finish
