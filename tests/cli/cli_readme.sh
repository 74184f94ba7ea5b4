#!/usr/bin/env bash
# The README's quick start and CI agree: .ci/run runs the README's test command verbatim, every
# command the README's table names exists, and every picture the README embeds is in the tree.
# The README stays a front door (at most 300 lines), and every relative link in it and in the
# module READMEs points at a file that exists (and, with #anchor, at a heading of that file).
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

lines=$(wc -l <"$src/README.md")
if [ "$lines" -le 300 ]; then ok; else bad "README.md has $lines lines (at most 300: reference goes to the module READMEs)"; fi

# links FILE: "LINE TARGET" for every markdown link ](TARGET) outside code blocks and code spans.
links() {
  awk '/^```/ { fence = !fence; next }
       !fence {
         line = $0; gsub(/`[^`]*`/, "", line)
         while (match(line, /\]\([^) ]+\)/)) {
           print FNR, substr(line, RSTART + 2, RLENGTH - 3)
           line = substr(line, RSTART + RLENGTH)
         }
       }' "$1"
}

# anchors FILE: the GitHub anchor of every heading (lower case, punctuation dropped, spaces to
# hyphens, -1, -2 ... for repeats) and every explicit <a id="..."> anchor.
anchors() {
  awk '/^```/ { fence = !fence; next }
       !fence && /^#+ / {
         h = $0; sub(/^#+ +/, "", h); h = tolower(h)
         gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h)
         if (h in seen) { n = seen[h]++; print h "-" n } else { seen[h] = 1; print h }
       }
       !fence { line = $0
         while (match(line, /<a id="[^"]+">/)) {
           print substr(line, RSTART + 7, RLENGTH - 9); line = substr(line, RSTART + RLENGTH)
         }
       }' "$1"
}

readmes=$(cd "$src" && find . \( -path './build*' -o -path ./.git -o -name node_modules \) -prune -o -name README.md -print | sed 's|^\./||' | sort)
for md in $readmes; do
  dir=$(dirname "$md")
  while read -r line target; do
    case $target in http://*|https://*|mailto:*) continue ;; esac
    path=${target%%#*}
    anchor=""
    case $target in *'#'*) anchor=${target#*#} ;; esac
    if [ -z "$path" ]; then file="$src/$md"; else file="$src/$dir/$path"; fi
    if [ ! -e "$file" ]; then bad "$md:$line: link to missing $target"; continue; fi
    if [ -n "$anchor" ] && [ -f "$file" ] && ! anchors "$file" | grep -qxF -- "$anchor"; then
      bad "$md:$line: link to missing heading #$anchor in ${path:-$md}"; continue
    fi
    ok
  done < <(links "$src/$md")
done
finish
