#!/usr/bin/env bash
# Replay the GGUF fuzz target over every corrupt file test_gguf writes and over ../shared's GGUFs
# (when present). Under LOUPE_SANITIZE=ON this is the corrupt-file check under ASan/UBSan.
# $1 = test_gguf (the generator), $2 = fuzz_gguf (the replayer).
set -eu
GEN=${1:?usage: fuzz_gguf_replay.sh TEST_GGUF FUZZ_GGUF}
FUZZ=${2:?usage: fuzz_gguf_replay.sh TEST_GGUF FUZZ_GGUF}
dir="$(mktemp -d "${LOUPE_TEST_TMP:-/tmp}/fuzz_gguf.XXXXXX")"
trap 'rm -rf "$dir"' EXIT
"$GEN" write-corrupt "$dir"
"$GEN" write-seeds "$dir"
inputs=("$dir"/*.gguf)
shared="${LOUPE_SHARED:-}"
if [ -n "$shared" ] && [ -d "$shared/models/stories260K" ]; then
  inputs+=("$shared"/models/stories260K/*.gguf "$shared"/models/stories260K/quant/*.gguf)
fi
"$FUZZ" "${inputs[@]}"
