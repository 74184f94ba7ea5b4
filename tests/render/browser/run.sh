#!/usr/bin/env bash
# The HTML viewer in a real browser: Debian's chromium driven over the DevTools protocol by
# puppeteer-core (which never downloads a browser), or with --firefox Debian's firefox-esr over
# WebDriver BiDi. Skips (77) with the reason when the browser, node, the npm driver or the
# sqlite3 shell is missing; `sh .ci/setup` installs them.
#   bash run.sh [--firefox] OUT_DIR  the test (ctest runs it; the screenshot goes into OUT_DIR)
#   bash run.sh --measure PAGE.html [SHOT.png]  open time and browser memory of one page (and a
#                                               screenshot of its head view), no checks
set -u
dir="$(cd "$(dirname "$0")" && pwd)"
skip() { echo "SKIP: $*"; exit 77; }
if [ "${1:-}" = "--firefox" ]; then
  shift
  export LOUPE_BROWSER=firefox
  browser="${LOUPE_FIREFOX:-/usr/bin/firefox-esr}"
  [ -x "$browser" ] || skip "$browser not found (sh .ci/setup installs Debian's firefox-esr)"
else
  browser="${LOUPE_CHROMIUM:-/usr/bin/chromium}"
  [ -x "$browser" ] || skip "$browser not found (sh .ci/setup installs Debian's chromium)"
  export LOUPE_CHROMIUM="$browser"
fi
command -v node >/dev/null 2>&1 || skip "node not found (sh .ci/setup installs it)"
[ -f "$dir/node_modules/puppeteer-core/package.json" ] ||
  skip "puppeteer-core not installed: (cd tests/render/browser && PUPPETEER_SKIP_DOWNLOAD=1 npm ci)"
if [ "${1:-}" = "--measure" ]; then
  exec node "$dir/viewer.test.js" --measure "${2:?usage: run.sh --measure PAGE.html [SHOT.png]}" ${3:+"$3"}
fi
command -v sqlite3 >/dev/null 2>&1 || skip "the sqlite3 shell is needed to build the test database"
out="${1:?usage: run.sh OUT_DIR}"
mkdir -p "$out"
exec node "$dir/viewer.test.js" "$out"
