#!/usr/bin/env bash
# The README's quick start and CI agree: .ci/run runs the README's test command verbatim, every
# command the README's table names exists, and every picture the README embeds is in the tree.
source "$(dirname "$0")/cli_lib.sh"
src="${LOUPE_SOURCE:?LOUPE_SOURCE must point at the source tree}"

test_cmd=$(grep -m1 -E '^sh \.ci/setup .*ctest ' "$src/README.md")
if [ -n "$test_cmd" ] && grep -qxF -- "$test_cmd" "$src/.ci/run"; then ok; else bad "README test command not run verbatim by .ci/run: '$test_cmd'"; fi
demo_cmd=$(grep -m1 -E '^sh \.ci/setup .*loupe demo' "$src/README.md")
if [ -n "$demo_cmd" ]; then ok; else bad "README has no quick-start demo command"; fi

for cmd in $(grep -oE '^\| `loupe [a-z]+' "$src/README.md" | awk '{print $3}' | sort -u); do
  expect_status 0 "$LOUPE" help "$cmd"
done
for img in $(grep -oE '\(render/examples/[^)]+\)' "$src/README.md" | tr -d '()' | sort -u); do
  if [ -s "$src/$img" ]; then ok; else bad "README embeds missing picture $img"; fi
done
finish
