#!/bin/bash
# CPU per campaign case, phase by phase, of two builds of bench/case_phase_bench measured in one run (alternating,
# ROUNDS rounds), with the bit fingerprints that must agree (docs/results/case-cost.md):
#   bench/case_cost_compare.sh BASE_BENCH NEW_BENCH [ROUNDS (2)]
base=${1:?usage: case_cost_compare.sh BASE_BENCH NEW_BENCH [ROUNDS]} new=${2:?} rounds=${3:-2}
for round in $(seq "$rounds"); do
  for op in attention rmsnorm dual_rmsnorm_cat; do
    n=$([ $op = attention ] && echo 400 || echo 3000)
    for which in base new; do
      b=$([ $which = base ] && echo "$base" || echo "$new")
      echo "== round $round, $which: --op $op --cases $n --seed 5 --backend 'cpu.*'"
      "$b" --op $op --cases $n --seed 5 --backend 'cpu.*' | grep -v '^$'
    done
  done
done
