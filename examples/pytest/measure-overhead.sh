#!/usr/bin/env bash
# The cost of running a campaign from pytest rather than from the command line (docs/PYTHON.md): the wall time of
# `pytest examples/pytest/tests/test_rmsnorm.py --driftcheck-seconds S` (pytest's start, the test module's imports,
# the backends file, the campaign, reading its report) against `driftcheck fuzz --seconds S` on the backends file
# that run wrote (the same worker, kernel, numerics and seed), alternately, REPEATS times each. From the repository
# root, with a built driftcheck:
#   [PYTHON=python3] examples/pytest/measure-overhead.sh BIN [SECONDS] [REPEATS]    (default 30 s, 3 repeats)
# Prints one Markdown row per run and the medians.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "$1")
seconds=${2:-30}
repeats=${3:-3}
work=$(mktemp -d)
python=${PYTHON:-/usr/bin/python3}  # with pytest and torch (Debian: python3-pytest, python3-torch)
export DRIFTCHECK_BIN=$bin PYTHONPATH=$PWD/python PYTHONDONTWRITEBYTECODE=1
now() { date +%s.%N; }
echo "| run | pytest (s) | driftcheck fuzz (s) | overhead (s) | cases (pytest / fuzz) |"
echo "|---|---:|---:|---:|---:|"
for i in $(seq 1 "$repeats"); do
  t0=$(now)
  "$python" -m pytest -p driftcheck.pytest_plugin -p no:cacheprovider -q examples/pytest/tests/test_rmsnorm.py \
    --driftcheck-seconds "$seconds" --driftcheck-out "$work/pytest-$i" >"$work/pytest-$i.log" 2>&1
  t1=$(now)
  folder=$(dirname "$(ls "$work/pytest-$i"/*/backends.toml)")
  backend=ext.$(sed -n 's/^name = "\(.*\)"/\1/p' "$folder/backends.toml")
  t2=$(now)
  "$bin" fuzz --backends "$folder/backends.toml" --backend "$backend" --seconds "$seconds" --seed 1 \
    --out "$work/fuzz-$i" --quiet
  t3=$(now)
  cases_pytest=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['cases'])" "$folder/report.json")
  cases_fuzz=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['cases'])" "$work/fuzz-$i/report.json")
  awk -v i="$i" -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" -v cp="$cases_pytest" -v cf="$cases_fuzz" \
    'BEGIN { printf "| %d | %.2f | %.2f | %.2f | %s / %s |\n", i, b - a, d - c, (b - a) - (d - c), cp, cf }' |
    tee -a "$work/rows.md"
done
"$python" - "$work/rows.md" <<'PY'
import statistics, sys
rows = [line.split("|")[2:5] for line in open(sys.argv[1])]
p, f, o = ([float(r[i]) for r in rows] for i in range(3))
print(f"\nmedians over {len(rows)} runs: pytest {statistics.median(p):.2f} s, driftcheck fuzz "
      f"{statistics.median(f):.2f} s, overhead {statistics.median(o):.2f} s")
PY
echo "(load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); logs in $work)"
