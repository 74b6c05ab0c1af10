#!/usr/bin/env bash
# Summaries of campaigns that fail in every way (docs/REPORT.md "Failures that are not a ratio"): four external
# backends made from a correct twin by tests/fault_worker.cpp, one failing every case with NaN outputs, one with
# an error reply, one crashing and one hanging past its timeout. Each campaign's report.json, report.md and
# report.html, and `driftcheck report` over all four, must say how each backend fails: no worst or p99 cell, no
# status and no group may read as passing, and the error histogram must show the cases a ratio cannot place.
# The HTML is checked in headless Chromium after Vega rendered it (as tests/report_browser_test.sh).
#   report_failures_test.sh DRIFTCHECK FAULT_WORKER WORK_DIR
set -euo pipefail
bin=$1
worker=$2
work=$3
here=$(cd "$(dirname "$0")" && pwd)
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "FAIL: no chromium on PATH (the test command installs Debian's chromium)" >&2
  exit 1
fi
rm -rf "$work"
mkdir -p "$work"
cat >"$work/faulty.toml" <<EOF
format = "driftcheck.backends"
version = 1
EOF
for fault in nan error crash hang; do
  cat >>"$work/faulty.toml" <<EOF

[[backend]]
name = "faulty.$fault"
op = "rmsnorm"
command = ["$worker", "--backend", "cpu.rmsnorm.native", "--fault", "$fault"]
numerics = "like:cpu.rmsnorm.native"
timeout_s = 0.5
EOF
done

runs=()
for fault in nan error crash hang; do
  status=0
  # Few cases: each crash restarts the worker, each hang waits out its timeout.
  "$bin" fuzz --backends "$work/faulty.toml" --backend "ext.faulty.$fault" --cases 6 --jobs 1 --seed 2 \
    --shrink-seconds 5 --out "$work/$fault" -q >/dev/null 2>"$work/$fault.log" || status=$?
  [ "$status" -eq 1 ] || { echo "FAIL: $fault campaign exit $status, expected 1" >&2; cat "$work/$fault.log" >&2; exit 1; }
  runs+=("$work/$fault")
done
status=0
"$bin" report "${runs[@]}" --html "$work/all.html" --markdown "$work/all.md" --json "$work/all.json" -q ||
  status=$?
[ "$status" -eq 1 ] || { echo "FAIL: report exit $status, expected 1" >&2; exit 1; }

flags=(--headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking
       --disable-component-update --disable-sync --host-resolver-rules='MAP * ~NOTFOUND'
       --proxy-server=127.0.0.1:9 --enable-logging=stderr --v=0 --virtual-time-budget=30000)
for page in "${runs[@]/%//report.html}" "$work/all.html"; do
  name=$(echo "$page" | tr '/' '_')
  timeout 120 "$browser" "${flags[@]}" --user-data-dir="$work/profile$name" --dump-dom "file://$page" \
    >"$page.dom" 2>"$work/browser$name.log"
done
python3 "$here/python/report_failures_check.py" "$work" nan error crash hang
