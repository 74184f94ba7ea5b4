#!/usr/bin/env bash
# Replay the mask-checker fuzz target over masks written here: good ones of every dtype, and
# truncated, mis-shaped and byte-flipped copies of them. Under LOUPE_SANITIZE=ON this is the
# corrupt-file check under ASan/UBSan. $1 = fuzz_leak_mask (the replayer).
set -eu
FUZZ=${1:?usage: fuzz_leak_mask_replay.sh FUZZ_LEAK_MASK}
dir="$(mktemp -d "${LOUPE_TEST_TMP:-/tmp}/fuzz_leak.XXXXXX")"
trap 'rm -rf "$dir"' EXIT
source "$(dirname "$0")/../support/npy.sh"
# npy FILE DESCR SHAPE BYTES_PER_CELL N_CELLS: a header and N_CELLS cells of a causal pattern
npy() {
  { npy_header "$2" "$3"
    local i
    for ((i = 0; i < $5; i++)); do
      if [ $((i % 7)) -lt 4 ]; then head -c "$4" /dev/zero; else printf '\xff%.0s' $(seq "$4"); fi
    done; } >"$1"
}
npy "$dir/b.npy" '|b1' '6, 6' 1 36
npy "$dir/u8.npy" '|u1' '2, 1, 4, 4' 1 32
npy "$dir/i64.npy" '<i8' '3, 3' 8 9
npy "$dir/f32.npy" '<f4' '2, 2, 5, 5' 4 100
npy "$dir/f16.npy" '<f2' '7, 7' 2 49
npy "$dir/f64.npy" '<f8' '4, 4' 8 16
npy "$dir/r3.npy" '<f4' '2, 3, 3' 4 18
npy "$dir/r1.npy" '|b1' '9,' 1 9
npy "$dir/ns.npy" '|b1' '3, 4' 1 12
npy "$dir/zero.npy" '|b1' '0, 0' 1 0
npy "$dir/one.npy" '<f4' '1, 1' 4 1
# safetensors: a [4, 4] causal bool mask, with a header padded to 8 bytes
st() { # st FILE JSON DATA_PRINTF
  local json=$2 n
  n=${#json}
  while [ $(( (8 + n) % 8 )) -ne 0 ]; do json="$json "; n=$((n + 1)); done
  { printf "\\x$(printf %02x $((n & 255)))\\x$(printf %02x $((n >> 8)))\\x00\\x00\\x00\\x00\\x00\\x00"
    printf '%s' "$json"; printf "$3"; } >"$1"
}
cells='\x01\x00\x00\x00\x01\x01\x00\x00\x01\x01\x01\x00\x01\x01\x01\x01'
st "$dir/m.safetensors" '{"mask":{"dtype":"BOOL","shape":[4,4],"data_offsets":[0,16]}}' "$cells"
st "$dir/meta.safetensors" '{"__metadata__":{"a":"b"},"m":{"dtype":"U8","shape":[1,1,4,4],"data_offsets":[0,16]}}' "$cells"
st "$dir/off.safetensors" '{"mask":{"dtype":"BOOL","shape":[4,4],"data_offsets":[8,24]}}' "$cells"
st "$dir/neg.safetensors" '{"mask":{"dtype":"BOOL","shape":[-4,4],"data_offsets":[0,16]}}' "$cells"
st "$dir/big.safetensors" '{"mask":{"dtype":"F32","shape":[99999999999,99999999999],"data_offsets":[0,16]}}' "$cells"
st "$dir/two.safetensors" '{"a":{"dtype":"BOOL","shape":[4,4],"data_offsets":[0,16]},"b":{"dtype":"BOOL","shape":[4,4],"data_offsets":[0,16]}}' "$cells"
st "$dir/q.safetensors" '{"mask":{"dtype":"Q4_K","shape":[4,4],"data_offsets":[0,16]}}' "$cells"
for f in "$dir"/*.npy "$dir"/m.safetensors; do
  size=$(wc -c <"$f")
  head -c $((size - 1)) "$f" >"$f.trunc.npy"
  head -c 40 "$f" >"$f.head.npy"
  # flip one header byte and one data byte
  { head -c 20 "$f"; printf 'X'; tail -c +22 "$f"; } >"$f.flip.npy"
  { head -c $((size - 2)) "$f"; printf '\x7f'; tail -c 1 "$f"; } >"$f.flipdata.npy"
done
out=$("$FUZZ" "$dir"/*.npy "$dir"/*.safetensors)
echo "$out"
# the well-formed square masks (b, u8, i64, f32, f16, f64, one) and the copies whose flipped data
# byte still parses must reach the checker, or this replays nothing but parse errors
checked=$(echo "$out" | sed -n 's/.* \([0-9]*\) checked as masks/\1/p')
[ "${checked:-0}" -ge 9 ] || { echo "only ${checked:-0} inputs reached the checker"; exit 1; }
