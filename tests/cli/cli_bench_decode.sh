#!/usr/bin/env bash
# CLI: loupe bench --decode: its flags, and a one-layer run (one repetition) that names the
# bound (each step against a read of its own weights right after it) and a tokens/s line per
# weight dtype with its share of that bound.
source "$(dirname "$0")/cli_lib.sh"

expect_stdout_contains "--decode" "$LOUPE" bench --help
expect_one_line_error "$LOUPE" bench --decode --attention
expect_stderr_contains "--attention and --decode exclude each other" "$LOUPE" bench --decode --attention
expect_one_line_error "$LOUPE" bench --decode --prefill-only

expect_status 0 "$LOUPE" bench --decode --layers 1 --reps 1 --threads 2
for want in "bound: each step against a streaming read of the same weights by 2 threads" \
            "1 of 22 layers" "f32 " "f16 " "q8_0 " "q4_k " "mxfp4 " "tokens/s"; do
  if grep -qF -- "$want" "$TMP/out"; then ok; else bad "bench --decode output lacks '$want'"; fi
done
# the bytes a step reads: 7 matrices of one layer plus the 32000 x 2048 classifier, in Q8_0
# (34 bytes per 32 values) and the f16 cache of 512 positions
if grep -qE "q8_0 +116\.9 MB a step \(weights 116\.4 \+ KV 0\.5\)" "$TMP/out"; then ok; else bad "q8_0 step bytes wrong: $(grep q8_0 "$TMP/out")"; fi
# every dtype line: its share of the bound and the range of its reads
n=$(grep -cE "GB/s; [0-9]+% of the bound \(its reads [0-9.]+-[0-9.]+ GB/s\)" "$TMP/out")
if [ "$n" = 8 ]; then ok; else bad "want 8 lines with a share and reads, got $n"; fi
finish
