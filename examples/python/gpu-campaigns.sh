#!/usr/bin/env bash
# Every example runner of examples/python on a GPU machine, in one call, from a prebuilt driftcheck:
#   bash examples/python/gpu-campaigns.sh BIN_DIR OUT_DIR [CASES (300)] [PLANTED_CASES (150)] [SEED (3)]
# A fixed seed and number of cases, so that a run is the same campaign every time and .ci/gpu-check can hold the
# examples to their expectation: exit 1 when a correct example has a finding (known findings apart), a planted bug
# is not caught, or a campaign could not run (summarize_campaigns.py).
# BIN_DIR holds driftcheck (and lib/ for its shared libraries, as .ci/gpu-check). Run from the repository root.
#   1. the Python runner's tests (on a GPU they also run SDPA, Triton and torch on the device), alongside 2.;
#   2. concurrently, one campaign per correct example backend (CASES) and one per planted-bug variant
#      (PLANTED_CASES), each with its own --out; backends unavailable here (no vllm, no Triton) are skipped with
#      their reason;
#   3. then one after another (about 80 s), pairs of an external and a built-in backend on the same cases: the
#      protocol's overhead per run request (concat: a copy, NumPy on the CPU and torch on the GPU) and the
#      external/built-in rate;
#   4. summary.md (what was found, what was clean, cases/s, overhead), and everything else in campaigns.tgz.
# Without a GPU (or Triton, or torch >= 2.5) the GPU examples say unavailable and only the CPU ones run.
set -uo pipefail
bin=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
cases=${3:-300}
planted_cases=${4:-150}
seed=${5:-3}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONDONTWRITEBYTECODE=1
dc="$bin/driftcheck"
work=$(mktemp -d)
backends=()
# Every backends file of the examples (expected-findings.toml, say, is another format).
mapfile -t backend_files < <(grep -l '^format = "driftcheck.backends"' "$here"/*.toml)
for f in "${backend_files[@]}"; do backends+=(--backends "$f"); done

{
  echo "commit: ${DRIFTCHECK_COMMIT:-unknown}"
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  python3 -c 'import sys, numpy; print("python", sys.version.split()[0], "numpy", numpy.__version__)'
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1
  python3 -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -1
  python3 -c 'import vllm; print("vllm", vllm.__version__)' 2>&1 | tail -1
} >"$out/machine.txt"
cat "$out/machine.txt"

echo "== 1. Python runner tests (in the background, alongside the campaigns)"
(cd "$repo/python/tests" && PYTHONPATH="$repo/python:$repo/python/tests" timeout 300 python3 -m unittest -v \
  test_dtypes test_layout test_worker test_examples >"$out/python-tests.txt" 2>&1
  echo "python tests exit: $?" >>"$out/python-tests.txt") &
tests_pid=$!

# `list` starts every worker once for its hello (seconds each with torch): in the background too.
("$dc" list "${backends[@]}" >"$out/list.txt" 2>&1; echo "list exit: $?" >>"$out/list.txt") &
list_pid=$!

# Every external backend declared in the examples; one unavailable here (no vllm, no Triton) stops at once and the
# summary lists it with its reason.
mapfile -t names < <(grep -h '^name = ' "${backend_files[@]}" | sed 's/name = "\(.*\)"/ext.\1/')
echo "== 2. campaigns (seed ${seed}, ${cases} cases each, planted bugs ${planted_cases}), $(date -u +%T)"
pids=()
for name in "${names[@]}"; do
  case "$name" in
    ext.copy.concat.numpy | ext.copy.concat.torch.cuda) continue ;;  # measured in the pairs below
    *.planted_*) n=$planted_cases ;;
    *) n=$cases ;;
  esac
  DRIFTCHECK_RUNNER_STATS="$work/$name.stats" "$dc" fuzz "${backends[@]}" --backend "$name" --cases "$n" \
    --seed "$seed" --shrink-seconds 20 --jobs 2 --out "$work/$name" >"$work/$name.log" 2>&1 &
  pids+=($!)
  sleep 1  # staggered: dozens of workers importing torch and creating CUDA contexts at once slow every hello
done
for p in "${pids[@]}"; do wait "$p"; done
wait "$tests_pid" "$list_pid"
echo "campaigns done $(date -u +%T)"
tail -n 4 "$out/python-tests.txt"

echo "== 3. external vs built-in on the same cases"
pair() {  # NAME JOBS BUDGET... -- BACKENDS
  local name=$1 jobs=$2
  shift 2
  DRIFTCHECK_RUNNER_STATS="$work/pair-$name.stats" "$dc" fuzz "${backends[@]}" "$@" --jobs "$jobs" \
    --shrink-seconds 0 --out "$work/pair-$name" >"$work/pair-$name.log" 2>&1
  echo "pair-$name exit: $?"
}
pair concat-numpy 1 --op concat --backend cpu.concat.copy,ext.copy.concat.numpy --cases 2000
if grep -q "gpu.concat.copy.*available" "$out/list.txt" && ! grep -q "gpu.concat.copy.*unavailable" "$out/list.txt"; then
  pair concat-cuda 1 --op concat --backend gpu.concat.copy,ext.copy.concat.torch.cuda --cases 2000
  pair dual-triton 4 --op dual_rmsnorm_cat --backend gpu.dual.fused,ext.triton.dual --seconds 25
  pair attn-sdpa-flash 4 --op attention --backend gpu.attn.paged_online,ext.sdpa.flash --seconds 25
else
  echo "no available GPU backends in this driftcheck: the GPU pairs are skipped" | tee -a "$out/skipped.txt"
fi

echo "== 4. summary"
python3 "$here/summarize_campaigns.py" "$work" >/dev/null
status=$?
cp "$work/summary.md" "$out/summary.md"
if [ -s "$out/skipped.txt" ]; then
  { echo; echo "## Skipped"; echo; sed 's/^/- /' "$out/skipped.txt"; } >>"$out/summary.md"
fi
{ echo; echo "## Python runner tests"; echo; tail -n 4 "$out/python-tests.txt"; } >>"$out/summary.md"
cat "$out/summary.md"
tar czf "$out/campaigns.tgz" -C "$work" . # reports, journals, findings, logs: at most 8 files come back
rm -rf "$work"
exit "$status"
