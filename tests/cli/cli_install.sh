#!/usr/bin/env bash
# CLI: `cmake --install` into a temporary prefix, then move the prefix (so nothing compiled in can
# point back at the build or the source tree) and use it as a user would: the moved loupe finds
# its cards, runs the demo, its man pages render without warnings and list the options --help
# lists, the bash completion completes, every public header compiles on its own, and the example
# program (tests/example) builds through pkg-config and records a trace. With a shared libloupe
# (-DBUILD_SHARED_LIBS=ON) also: it exports lp_ symbols only, and the example runs against it.
#   cli_install.sh BUILD_DIR CMAKE CC
source "$(dirname "$0")/cli_lib.sh"
build=${1:?build folder}
cmake_bin=${2:?cmake}
cc_bin=${3:?C compiler}
source_dir=${LOUPE_SOURCE:?LOUPE_SOURCE must name the source tree}

if ! "$cmake_bin" --install "$build" --prefix "$TMP/staged" >"$TMP/install.log" 2>&1; then
  echo "FAIL: cmake --install: $(tail -n 5 "$TMP/install.log")" >&2
  exit 1
fi
mv "$TMP/staged" "$TMP/moved"
prefix="$TMP/moved"
loupe="$prefix/bin/loupe"
unset LOUPE_CONFIGS # the moved binary must find its cards by itself

# What is installed where.
for f in bin/loupe share/loupe/configs/llama-3-8b.yaml share/loupe/configs/README.md \
         share/man/man1/loupe.1.gz share/man/man1/loupe-estimate.1.gz \
         share/bash-completion/completions/loupe share/fish/vendor_completions.d/loupe.fish \
         share/zsh/site-functions/_loupe share/doc/loupe/copyright \
         include/loupe/core/version.h include/loupe/inspect/inspect.h include/loupe/trace/trace.h; do
  if [ -e "$prefix/$f" ]; then ok; else bad "not installed: $f"; fi
done
if find "$prefix/include" -name '*_internal.h' | grep -q .; then bad "an _internal.h header is installed"; else ok; fi
pc=$(find "$prefix" -name loupe.pc | head -n 1)
libdir=$(dirname "$(dirname "$pc")")
if [ -n "$pc" ] && { [ -f "$libdir/libloupe.a" ] || [ -f "$libdir/libloupe.so" ]; }; then ok
else bad "no loupe.pc with libloupe.a or libloupe.so beside its folder"; fi

# Nothing the binary runs with names the source or build tree. Debug info may (it is stripped
# first, as the Debian package is), and so may a sanitizer build, whose UBSan/ASan reports carry
# source locations by design and which is never shipped.
if [ "${LOUPE_SANITIZED:-0}" = 1 ]; then
  echo "NOTE: sanitizer build: the check for source paths inside the binary is skipped"
else
  strip -o "$TMP/loupe.stripped" "$loupe"
  for tree in "$source_dir" "$(cd "$build" && pwd)"; do
    if grep -qF -- "$tree" "$TMP/loupe.stripped"; then bad "the installed loupe contains the path $tree"; else ok; fi
  done
fi

expect_stdout_contains "loupe 0." "$loupe" --version
expect_stdout_contains "(git " "$loupe" --version
expect_stdout_contains "from $prefix/share/loupe/configs/llama-3-8b.yaml" "$loupe" estimate llama-3-8b
expect_stdout_contains "8,030,261,248" "$loupe" estimate llama-3-8b

# The moved loupe runs the demo and draws the same pictures as the build tree's.
(cd "$TMP" && "$loupe" demo moved-demo --threads 1 >demo.log 2>&1) || bad "moved loupe demo failed: $(tail -n 3 "$TMP/demo.log")"
(cd "$TMP" && "$LOUPE" demo build-demo --threads 1 >build-demo.log 2>&1) || bad "build-tree loupe demo failed"
if [ -f "$TMP/moved-demo/pictures/index.html" ] &&
   diff -r "$TMP/moved-demo/pictures" "$TMP/build-demo/pictures" >/dev/null; then ok
else bad "the moved loupe's demo pictures differ from the build tree's (or are missing)"; fi

# Man pages: render without a warning, and name every option the command's --help names.
if command -v man >/dev/null; then
  for page in "$prefix"/share/man/man1/*.1.gz; do
    LC_ALL=C MANWIDTH=100 man --warnings -l "$page" >"$TMP/page.txt" 2>"$TMP/page.err"
    if [ -s "$TMP/page.err" ]; then bad "man -l $(basename "$page"): $(head -c 300 "$TMP/page.err")"; else ok; fi
    cmd=$(basename "$page" .1.gz); cmd=${cmd#loupe}; cmd=${cmd#-}
    [ -n "$cmd" ] || continue
    for opt in $("$loupe" help "$cmd" | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u); do
      grep -qF -- "$opt" "$TMP/page.txt" || bad "loupe-$cmd(1) lacks $opt"
    done
    ok
  done
else
  echo "NOTE: man not installed (apt-get install man-db): the pages were not rendered"
fi

# bash completion: commands, a command's options, an option's values.
complete_words() { # complete_words WORD... -> what _loupe offers for the last word
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _loupe; echo "${COMPREPLY[*]}"' \
    _ "$prefix/share/bash-completion/completions/loupe" "$@"
}
[[ " $(complete_words loupe es) " == *" estimate "* ]] && ok || bad "bash: 'loupe es' does not complete to estimate"
[[ " $(complete_words loupe inspect --) " == *" --stats "* ]] && ok || bad "bash: 'loupe inspect --' lacks --stats"
[[ "$(complete_words loupe trace --maps '')" == "f16 f32 none" ]] && ok || bad "bash: 'loupe trace --maps' does not offer f16 f32 none"
for shell in zsh fish; do # syntax only, when installed
  f=$(find "$prefix/share" -path "*$shell*" -type f | head -n 1)
  if command -v "$shell" >/dev/null; then "$shell" -n "$f" && ok || bad "$shell -n $f"; fi
done

# Every public header compiles on its own, and the example builds and runs through pkg-config.
export PKG_CONFIG_PATH="$(dirname "$pc")"
cflags=$(pkg-config --cflags loupe) || bad "pkg-config --cflags loupe"
libs=$(pkg-config --libs loupe) || bad "pkg-config --libs loupe"
san=""
[ "${LOUPE_SANITIZED:-0}" = 1 ] && san="-fsanitize=address,undefined"
for h in $(cd "$prefix/include/loupe" && find . -name '*.h' | sed 's|^\./||'); do
  echo "#include \"$h\"" | "$cc_bin" -std=c11 -Wall -Wextra -Werror -fsyntax-only $cflags -x c - \
    2>"$TMP/header.err" && ok || bad "header $h does not compile alone: $(head -c 300 "$TMP/header.err")"
done
if "$cc_bin" -std=c11 -Wall -Wextra -Werror $san "$source_dir/tests/example/loupe_example.c" $cflags $libs \
     -o "$TMP/loupe_example" 2>"$TMP/example.err"; then ok
else bad "the example does not build through pkg-config: $(head -c 400 "$TMP/example.err")"; fi
if [ -f "$libdir/libloupe.so" ]; then
  # The version script keeps everything but the lp_ API inside the shared library.
  others=$(nm -D --defined-only "$libdir/libloupe.so" | awk '$3 !~ /^lp_/ {print $3}' | head -n 5)
  [ -z "$others" ] && ok || bad "libloupe.so exports non-lp_ symbols: $others"
  export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  ldd "$TMP/loupe_example" | grep -qF "$libdir/libloupe.so" && ok || bad "the example does not load $libdir/libloupe.so"
fi
expect_status 0 "$loupe" synth "$TMP/model"
expect_stdout_contains "recorded run 1: 8 tokens, 2 layers x 8 heads" "$TMP/loupe_example" "$TMP/model" "$TMP/example.db"
expect_stdout_contains "2,516,480" "$TMP/loupe_example" "$TMP/model" "$TMP/example2.db"
if command -v sqlite3 >/dev/null; then
  got=$(sqlite3 "$TMP/example.db" "SELECT status, n_tokens, (SELECT count(*) FROM head_stats) FROM runs")
  [ "$got" = "complete|8|16" ] && ok || bad "example.db runs/head_stats: '$got', want complete|8|16"
fi
expect_one_line_error "$TMP/loupe_example" "$TMP/no-such-model" "$TMP/x.db"
finish
