#!/bin/bash
# Throughput of campaigns on the GPU machine (docs/results/campaign-throughput.md), run from the repository root
# there with the binaries of .ci/gpu-build in .device-bin (the machine's python has torch and pytest); $OUT
# receives the campaigns. In one run:
#   - scaling from 1 to 16 jobs against 16 one-job processes (the machine's own ceiling), attention and rmsnorm;
#   - where the GPU fp64 reference pays in a campaign of CPU twins and of GPU backends at 16 jobs (the auto
#     rule's threshold, DRIFTCHECK_REFERENCE_GPU_WORK, against the CPU reference);
#   - a plain GPU attention campaign against the pytest anchor (bench/attention_anchor.py);
#   - the Triton dual-norm example with its compile set and without one, after a warm-up
#     (bench/compile_set_bench.py).
export LD_LIBRARY_PATH=$PWD/.device-bin/lib
B=.device-bin/driftcheck; S=bench/campaign_scaling.py
cat .device-bin/COMMIT; nproc; lscpu | grep -E "Model name|Thread|Core|Socket|MHz"; nvidia-smi -L; uptime
python3 $S $B $OUT/a --jobs 1,16 --processes --op attention --seconds 10 --label "attention, CPU twins"
python3 $S $B $OUT/r --jobs 1,16 --processes --op rmsnorm --seconds 8 --label "rmsnorm, CPU twins"
python3 $S $B $OUT/c --jobs 16 --op attention --seconds 10 --env DRIFTCHECK_REFERENCE=cpu \
  --label "attention, CPU twins, CPU reference"
python3 $S $B $OUT/t24 --jobs 16 --op attention --seconds 10 --env DRIFTCHECK_REFERENCE_GPU_WORK=16777216 \
  --label "attention, CPU twins, GPU reference from 2^24 multiply-adds"
python3 $S $B $OUT/gc --jobs 16 --backend 'gpu.*' --op attention --seconds 10 --env DRIFTCHECK_REFERENCE=cpu \
  --label "attention, GPU backends, CPU reference"
python3 bench/attention_anchor.py $B $OUT/anchor --seconds 20 --jobs 16
python3 bench/compile_set_bench.py $B $OUT/cs --backends examples/python/triton_dual_rmsnorm_cat.toml \
  --backend ext.triton.dual --seconds 15
rm -rf $OUT/cs/*/*/findings $OUT/*/jobs*/findings $OUT/*/procs*/*/findings $OUT/anchor/campaign/findings
