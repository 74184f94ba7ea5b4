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
# the batch of 4 prompts of 16 / 4 tokens against the one 16-token prompt timed in turn, per token
if grep -qE "batch of 4 x 4 tokens, probes off, in turn with one prompt of 16 \(best of 1 each\): 1-layer pass [0-9.]+ s vs [0-9.]+ s = [0-9.]+x per token; layer [0-9.]+ s vs [0-9.]+ s, tail [0-9.]+ s vs [0-9.]+ s -> 22 layers [0-9.]+ s vs [0-9.]+ s = [0-9.]+x per token; CPU time [0-9.]+ s vs [0-9.]+ s = [0-9.]+x" "$TMP/out"; then ok; else bad "no batch line: $(cat "$TMP/out")"; fi
# the roofline prediction for the same model on this machine, measured now, with the ratio
if grep -qE "predicted \(loupe estimate on [0-9.]+ GFLOP/s FMA peak, [0-9.]+ GB/s read, 2 threads\): 22 layers [0-9.]+ s, (compute|memory)-bound; measured [0-9.]+ s = [0-9.]+x" "$TMP/out"; then ok; else bad "no predicted-vs-measured line: $(cat "$TMP/out")"; fi
if ls "$TMP" | grep -q loupe-bench; then bad "temporary model folder left behind"; else ok; fi

# --dtype: the linear layers beside f32 from the same reps, and a bf16 model's prefill beside f32's
expect_one_line_error "$LOUPE" bench --prefill-only --dtype q9
expect_stderr_contains "expected f32, f16, bf16, q8_0, q4_k or mxfp4" "$LOUPE" bench --prefill-only --dtype q9
expect_one_line_error "$LOUPE" bench --attention --dtype bf16
expect_status 0 "$LOUPE" bench --prefill-only --dtype bf16 --layers 1 --tokens 16 --reps 1 --threads 2 --dir "$TMP"
if grep -qE "bf16 weights, linear layers alone .*: [0-9.]+ GFLOP/s = [0-9]+% of f32's [0-9.]+ GFLOP/s" "$TMP/out"; then ok; else bad "no bf16 linear line: $(cat "$TMP/out")"; fi
if grep -qE "bf16 weights, probes off: 22 layers [0-9.]+ s = [0-9.]+ tokens/s = [0-9]+% of f32's speed" "$TMP/out"; then ok; else bad "no bf16 prefill line: $(cat "$TMP/out")"; fi
expect_status 0 "$LOUPE" bench --prefill-only --dtype q8_0 --layers 1 --tokens 16 --reps 1 --threads 2 --dir "$TMP"
if grep -qE "q8_0 weights, linear layers alone .*% of f32's" "$TMP/out"; then ok; else bad "no q8_0 linear line: $(cat "$TMP/out")"; fi
if ls "$TMP" | grep -q loupe-bench; then bad "temporary model folder left behind"; else ok; fi
finish
