#!/usr/bin/env bash
# The HTML report in a real browser (docs/REPORT.md "Testing the page in a browser"): a small campaign over two
# correct twins and two mutants plus an acceptance run, reported with `driftcheck report`, opened in headless
# Chromium with every network request refused. Passes only when every plot rendered to an SVG, none failed, and
# the console stayed silent (the page logs nothing unless a plot fails).
#   report_browser_test.sh DRIFTCHECK WORK_DIR        (DRIFTCHECK_SCREENSHOT=FILE also saves a screenshot)
set -euo pipefail
bin=$1
work=$2
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "FAIL: no chromium on PATH (the test command installs Debian's chromium)" >&2
  exit 1
fi
rm -rf "$work"
mkdir -p "$work"
run=$work/run
# Exit 1: the mutants drift, as they must.
status=0
"$bin" fuzz --backend 'cpu.rmsnorm.cuda,cpu.attn.triton_unified,mutant.rmsnorm.stride_ignored,mutant.attn.gqa_modulo' \
  --cases 60 --jobs 2 --out "$run" -q || status=$?
[ "$status" -eq 1 ] || { echo "FAIL: campaign exit $status, expected 1" >&2; exit 1; }
status=0
"$bin" accept --backend 'cpu.rmsnorm.cuda,cpu.attn.triton_unified,mutant.attn.gqa_modulo' --positions 32 \
  --vocab 2048 --out "$run" -q >/dev/null || status=$?
[ "$status" -eq 1 ] || { echo "FAIL: accept exit $status, expected 1 (the mutant collapses)" >&2; exit 1; }
status=0
"$bin" report "$run" --html "$work/report.html" -q || status=$?
[ "$status" -eq 1 ] || { echo "FAIL: report exit $status, expected 1" >&2; exit 1; }

# No network: every host resolves to nothing and every request goes to a closed proxy port.
flags=(--headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$work/profile"
       --host-resolver-rules='MAP * ~NOTFOUND' --proxy-server=127.0.0.1:9 --enable-logging=stderr --v=0
       --virtual-time-budget=30000)
timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$work/report.html" >"$work/dom.html" 2>"$work/browser.log"
plots=$(grep -o 'class="plot"' "$work/dom.html" | wc -l)
rendered=$(grep -o 'data-plots-rendered="[0-9]*"' "$work/dom.html" | grep -o '[0-9]*' || true)
svgs=$(grep -o '<svg' "$work/dom.html" | wc -l)
fail=0
if [ "$plots" -lt 5 ]; then echo "FAIL: only $plots plots in the page" >&2; fail=1; fi
if [ "$rendered" != "$plots" ]; then echo "FAIL: $plots plots, rendered '$rendered'" >&2; fail=1; fi
if [ "$svgs" -lt "$plots" ]; then echo "FAIL: $svgs SVGs for $plots plots" >&2; fail=1; fi
if grep -qE 'data-spec="spec[0-9]+">plot failed' "$work/dom.html"; then echo "FAIL: a plot failed" >&2; fail=1; fi
if grep -q 'INFO:CONSOLE' "$work/browser.log"; then
  echo "FAIL: console output:" >&2
  grep 'INFO:CONSOLE' "$work/browser.log" >&2
  fail=1
fi
if [ -n "${DRIFTCHECK_SCREENSHOT:-}" ]; then
  timeout 120 "$browser" "${flags[@]}" --hide-scrollbars --window-size=1400,2000 \
    --screenshot="$DRIFTCHECK_SCREENSHOT" "file://$work/report.html" 2>>"$work/browser.log"
fi
[ "$fail" -eq 0 ] || exit 1
echo "report_browser: $plots plots rendered to SVG, console silent"
