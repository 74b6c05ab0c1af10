#!/bin/bash
# The time-budget and scaling measurements of docs/results/campaign-budget.md, run from the repository root on
# the GPU machine with the binaries of .ci/gpu-build in .device-bin (and, for the "before" rows, an older
# driftcheck in .device-bin/base); $OUT receives the campaigns.
export LD_LIBRARY_PATH=$PWD/.device-bin/lib
B=.device-bin/driftcheck; BASE=.device-bin/base/driftcheck; S=bench/campaign_scaling.py
cat .device-bin/COMMIT; nproc; lscpu | grep -E "Model name|Thread|Core|Socket|NUMA node|MHz|L3"; nvidia-smi -L; uptime
python3 $S $B $OUT/w1 --jobs 1,4,8,16 --op attention --seconds 10 --label "attention, CPU twins (new)"
python3 $S $BASE $OUT/w2 --jobs 1,16 --op attention --seconds 10 --label "attention, CPU twins (before, 29dddb2)"
python3 $S $B $OUT/w3 --jobs 1,4,16 --op rmsnorm --seconds 10 --label "rmsnorm, CPU twins (new)"
python3 $S $B $OUT/w4 --jobs 16 --op attention --seconds 10 --env DRIFTCHECK_REFERENCE=cpu --label "attention, CPU reference forced"
python3 $S $B $OUT/w5 --jobs 16 --op attention --seconds 10 --env GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296:glibc.malloc.top_pad=67108864 --label "attention, malloc keeps its memory"
python3 $S $B $OUT/w6 --jobs 1,4,16 --op rmsnorm,concat,dual_rmsnorm_cat,attention --seconds 20 --label "every op, CPU twins (new)"
python3 $S $BASE $OUT/w7 --jobs 16 --op rmsnorm,concat,dual_rmsnorm_cat,attention --seconds 20 --label "every op, CPU twins (before, 29dddb2)"
python3 $S $B $OUT/w8 --jobs 1,16 --backend 'gpu.*' --op attention --seconds 30 --label "GPU attention backends (new)"
rm -rf $OUT/w*/jobs*/findings
