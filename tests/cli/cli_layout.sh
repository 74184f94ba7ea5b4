#!/usr/bin/env bash
# The layout rules (../shared/layout.md, README "Developers") as a test over the source tree
# ($LOUPE_SOURCE) and the build that holds $LOUPE_BIN. Each violation is one line on stderr:
#   a  no include circles: no header includes itself back, and no two .c files need each other
#      through the headers they include (weights.c calling a reader that calls back into
#      weights.c through weights_internal.h)
#   b  <sqlite3.h> is included only under trace/store/
#   c  no cmd_*.c is compiled into a library (liblp_*.a)
#   d  every symbol a library exports starts with lp_
#   e  every command's --help exits 0 and starts with "usage: loupe NAME"
#   f  no command still uses the hand-written legacy_usage
# LOUPE_LAYOUT_ONLY=a,c,e runs only those checks (the others are listed as skipped), so the test
# can be registered with the rules that hold while the rest of the layout move lands.
source "$(dirname "$0")/cli_lib.sh"
src="${LOUPE_SOURCE:?LOUPE_SOURCE must point at the source tree}"
build="$(cd "$(dirname "$LOUPE")" && pwd)"
only="${LOUPE_LAYOUT_ONLY:-a,b,c,d,e,f}"

enabled() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# check LETTER NAME FUNCTION: run FUNCTION, whose stdout is one violation per line.
check() {
  local letter=$1 name=$2 fn=$3
  if ! enabled "$letter"; then echo "$letter $name: skipped (LOUPE_LAYOUT_ONLY=$only)"; return; fi
  "$fn" >"$TMP/violations" 2>"$TMP/check.err" || echo "could not run the check: $(head -c 300 "$TMP/check.err")" >>"$TMP/violations"
  local n
  n=$(grep -c . "$TMP/violations")
  if [ "$n" -eq 0 ]; then
    ok; echo "$letter $name: ok"
  else
    while IFS= read -r line; do bad "$letter $name: $line"; done <"$TMP/violations"
    echo "$letter $name: $n violation(s)"
  fi
}

# The project's C files outside tests/ and the build folders, relative to $src.
sources() {
  (cd "$src" && find . \( -path ./tests -o -path './build*' -o -path ./.git \) -prune -o \
     -type f \( -name '*.c' -o -name '*.h' \) -print | sed 's|^\./||' | sort)
}

# cycles: stdin holds edges "FROM TO WHY"; prints the shortest circle through every file that
# is on one, each circle once, as "A -> B (WHY) -> A (WHY)" (WHY "-" is left out).
cycles() {
  awk '
    { if (!(($1, $2) in why)) { adj[$1] = adj[$1] " " $2; why[$1, $2] = $3 } nodes[$1] = 1 }
    function bfs(s,    q, head, tail, v, n, i, nb, w, path, c, seen, par) {
      head = 0; tail = 0; split("", seen); split("", par)
      n = split(adj[s], nb, " "); for (i = 1; i <= n; i++) if (!(nb[i] in seen)) { seen[nb[i]] = 1; par[nb[i]] = s; q[tail++] = nb[i] }
      while (head < tail) {
        v = q[head++]
        if (v == s) break
        n = split(adj[v], nb, " ")
        for (i = 1; i <= n; i++) { w = nb[i]; if (!(w in seen)) { seen[w] = 1; par[w] = v; q[tail++] = w } }
      }
      if (!(s in seen)) return ""
      # walk back from s to s along the parents, then print from the smallest file name
      c = 0; w = s
      do { v = par[w]; hop[++c] = v; w = v } while (w != s)
      return canon(c)
    }
    function canon(c,    i, k, best, out, j, a, b) {
      best = 1; for (i = 2; i <= c; i++) if (hop[i] < hop[best]) best = i
      # hop[] runs backwards (hop[i+1] -> hop[i]); print forwards from hop[best]
      out = hop[best]; j = best
      for (k = 1; k <= c; k++) {
        a = hop[j]; j = (j == 1) ? c : j - 1; b = hop[j]
        out = out " -> " b (why[a, b] == "-" ? "" : " (" why[a, b] ")")
      }
      return out
    }
    END { for (s in nodes) { r = bfs(s); if (r != "" && !(r in done)) { done[r] = 1; print r } } }
  ' | sort
}

# a: header include circles (from the #include "..." lines), then file circles through headers.
# "FILE HEADER -" for every #include "..." that names a file of the tree (beside the
# including file first, then from the top, as the compiler's -I looks).
include_edges() {
  (cd "$src" && sources | xargs awk '
    function norm(p,    n, i, parts, out, k) {
      n = split(p, parts, "/"); k = 0
      for (i = 1; i <= n; i++) {
        if (parts[i] == "." || parts[i] == "") continue
        if (parts[i] == ".." && k > 0) { k--; continue }
        out[++k] = parts[i]
      }
      p = out[1]; for (i = 2; i <= k; i++) p = p "/" out[i]
      return p
    }
    function exists(p,    line, r) { r = (getline line < p) >= 0; close(p); return r }
    /^[ \t]*#[ \t]*include[ \t]*"/ {
      inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*$/, "", inc)
      dir = FILENAME; if (dir ~ /\//) sub(/\/[^\/]*$/, "", dir); else dir = "."
      t = ""
      if (exists(dir "/" inc)) t = norm(dir "/" inc); else if (exists(inc)) t = norm(inc)
      if (t != "") print FILENAME, t, "-"
    }')
}

# The library objects as "SOURCE OBJECT": build/inspect/CMakeFiles/lp_inspect.dir/weights/x.c.o
# was compiled from inspect/weights/x.c.
library_objects() {
  find "$build" -path '*/CMakeFiles/lp_*.dir/*' -name '*.c.o' | sort | while IFS= read -r o; do
    local rel=${o#"$build"/}
    local module=${rel%%/CMakeFiles/*}
    local inner=${rel#*/CMakeFiles/*.dir/}
    # a stale object whose source was moved or split away is not part of the library any more
    [ -f "$src/$module/${inner%.o}" ] && echo "$module/${inner%.o} $o"
  done
}

# "A B SYMBOL@HEADER": A's object uses SYMBOL, which B's object defines; HEADER is the header A
# includes that declares it (a pure #include graph has no circle when two .c files share one
# header, so what each .c needs from the other is read off the built objects).
use_edges() {
  local f o
  library_objects >"$TMP/objects"
  [ -s "$TMP/objects" ] || { echo "no library objects under $build (CMakeFiles/lp_*.dir)" >&2; return 1; }
  while read -r f o; do
    nm "$o" | awk -v f="$f" '$1 == "U" { print "U", f, $2 } NF == 3 && $2 ~ /^[TDBRC]$/ { print "D", f, $3 }'
  done <"$TMP/objects" >"$TMP/symbols"
  (cd "$src" && awk '
    FILENAME == ARGV[1] { incs[$1] = incs[$1] " " $2; next }
    $1 == "D" { def[$3] = $2; next }
    { use[++n] = $2 " " $3 }
    function declares(h, sym,    line, found) {
      if (!((h, sym) in cache)) {
        found = 0
        while (!found && (getline line < h) > 0)
          if (line ~ ("(^|[^A-Za-z0-9_])" sym "([^A-Za-z0-9_]|$)")) found = 1
        close(h); cache[h, sym] = found
      }
      return cache[h, sym]
    }
    END {
      for (i = 1; i <= n; i++) {
        split(use[i], u, " "); from = u[1]; sym = u[2]
        if (!(sym in def) || def[sym] == from || ((from, def[sym]) in seen)) continue
        seen[from, def[sym]] = 1
        hdr = "no-included-header"; k = split(incs[from], hs, " ")
        for (j = 1; j <= k; j++) if (declares(hs[j], sym)) { hdr = hs[j]; break }
        print from, def[sym], sym "@" hdr
      }
    }' "$TMP/includes" "$TMP/symbols")
}

check_a() {
  include_edges >"$TMP/includes"
  awk '$1 ~ /\.h$/' "$TMP/includes" | cycles | sed 's/^/header circle: /'
  use_edges >"$TMP/uses" || return 1
  cycles <"$TMP/uses" | sed -e 's/^/file circle: /' -e 's/@/, declared in /g'
}

# b: SQL stays in the store.
check_b() {
  local f
  while IFS= read -r f; do
    case $f in trace/store/*) continue ;; esac
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]sqlite3\.h[>"]' "$src/$f" |
      sed "s|^\([0-9]*\):.*|$f:\1: includes <sqlite3.h> outside trace/store/|"
  done < <(sources)
}

libraries() { find "$build" -name 'liblp_*.a' | sort; }

# c: commands belong to the binary only.
check_c() {
  local lib
  [ -n "$(libraries)" ] || { echo "no liblp_*.a under $build"; return; }
  for lib in $(libraries); do
    ar t "$lib" | grep -E '(^|/)cmd_[^/]*\.o$' | sed "s|^|${lib#"$build"/} holds |"
  done
}

# d: exported names.
check_d() {
  local lib
  [ -n "$(libraries)" ] || { echo "no liblp_*.a under $build"; return; }
  for lib in $(libraries); do
    nm -g --defined-only "$lib" | awk -v lib="${lib#"$build"/}" '
      /:$/ { member = substr($0, 1, length($0) - 1); next }
      # names that begin with "__" are the compiler own (ASan: __odr_asan.*), not ours
      NF == 3 && $3 !~ /^lp_/ && $3 !~ /^__/ { print lib "(" member "): exports " $3 " (" $2 "), not lp_" }'
  done
}

# The commands, from loupe --help's table.
commands() { "$LOUPE" --help | awk '/^commands:/ { f = 1; next } f && /^  [a-z]/ { print $1 } f && !NF { f = 0 }'; }

# e: generated help.
check_e() {
  local cmd status first
  [ -n "$(commands)" ] || { echo "loupe --help lists no commands"; return; }
  for cmd in $(commands); do
    "$LOUPE" "$cmd" --help >"$TMP/help" 2>"$TMP/help.err"
    status=$?
    first=$(head -n 1 "$TMP/help")
    [ "$status" -eq 0 ] || echo "loupe $cmd --help exits $status"
    case $first in "usage: loupe $cmd"|"usage: loupe $cmd "*) ;; *) echo "loupe $cmd --help starts with '${first:0:60}', not 'usage: loupe $cmd'" ;; esac
  done
}

# f: every command on an option table.
check_f() {
  local f
  while IFS= read -r f; do
    case $(basename "$f") in cmd_*.c) ;; *) continue ;; esac
    grep -n 'legacy_usage' "$src/$f" | sed "s|^\([0-9]*\):.*|$f:\1: still sets legacy_usage (hand-written usage, not the option table)|"
  done < <(sources)
}

check a "include circles" check_a
check b "sqlite3.h only in trace/store" check_b
check c "no cmd_*.c in a library" check_c
check d "exported symbols start with lp_" check_d
check e "--help is generated" check_e
check f "no legacy_usage" check_f
finish
