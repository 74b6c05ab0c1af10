#!/usr/bin/env bash
# The cost of running a campaign from pytest rather than from the command line (docs/PYTHON.md): the wall time of
# `pytest examples/pytest/tests/test_rmsnorm.py --driftcheck-seconds S` (pytest's start, the test module's imports,
# the backends file, the campaign, reading its report) against `driftcheck fuzz --seconds S` on the backends file
# that run wrote (the same worker, kernel, numerics and seed), alternately, REPEATS times each. From the repository
# root, with a built driftcheck:
#   [PYTHON=python3] examples/pytest/measure-overhead.sh BIN [SECONDS] [REPEATS]    (default 30 s, 3 repeats)
# Prints one Markdown row per run (wall time, and CPU time of the command and its children: user + system, which
# the machine's load moves less) and the medians.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "$1")
seconds=${2:-30}
repeats=${3:-3}
work=$(mktemp -d)
python=${PYTHON:-/usr/bin/python3}  # with pytest and torch (Debian: python3-pytest, python3-torch)
export DRIFTCHECK_BIN=$bin PYTHONPATH=$PWD/python PYTHONDONTWRITEBYTECODE=1
echo "| run | pytest wall (s) | fuzz wall (s) | overhead wall (s) | pytest CPU (s) | fuzz CPU (s) | overhead CPU (s) | cases (pytest / fuzz) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
TIMEFORMAT='%R %U %S'  # wall, user and system seconds of the command and its children
for i in $(seq 1 "$repeats"); do
  { time "$python" -m pytest -p driftcheck.pytest_plugin -p no:cacheprovider -q examples/pytest/tests/test_rmsnorm.py \
    --driftcheck-seconds "$seconds" --driftcheck-out "$work/pytest-$i" >"$work/pytest-$i.log" 2>&1; } 2>"$work/t-pytest-$i"
  folder=$(dirname "$(ls "$work/pytest-$i"/*/backends.toml)")
  backend=ext.$(sed -n 's/^name = "\(.*\)"/\1/p' "$folder/backends.toml")
  { time "$bin" fuzz --backends "$folder/backends.toml" --backend "$backend" --seconds "$seconds" --seed 1 \
    --out "$work/fuzz-$i" --quiet; } 2>"$work/t-fuzz-$i"
  cases_pytest=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['cases'])" "$folder/report.json")
  cases_fuzz=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['cases'])" "$work/fuzz-$i/report.json")
  read -r pw pu ps <"$work/t-pytest-$i"
  read -r fw fu fs <"$work/t-fuzz-$i"
  awk -v i="$i" -v pw="$pw" -v pu="$pu" -v ps="$ps" -v fw="$fw" -v fu="$fu" -v fs="$fs" -v cp="$cases_pytest" \
    -v cf="$cases_fuzz" 'BEGIN { printf "| %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s / %s |\n",
    i, pw, fw, pw - fw, pu + ps, fu + fs, (pu + ps) - (fu + fs), cp, cf }' | tee -a "$work/rows.md"
done
"$python" - "$work/rows.md" <<'PY'
import statistics, sys
rows = [[float(x) for x in line.split("|")[2:8]] for line in open(sys.argv[1])]
med = [statistics.median(r[i] for r in rows) for i in range(6)]
print(f"\nmedians over {len(rows)} runs: wall: pytest {med[0]:.2f} s, driftcheck fuzz {med[1]:.2f} s, overhead "
      f"{med[2]:.2f} s; CPU: pytest {med[3]:.2f} s, driftcheck fuzz {med[4]:.2f} s, overhead {med[5]:.2f} s")
PY
echo "(load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); logs in $work)"
