// The reduction plan of a norm kernel's GPU port, on the host: its CPU twin's order for the case
// (device/include/driftcheck/device/twin_norm.hpp, norm_order: threads from H and the token count, vector
// width from H and the layout, chunk ownership, lane tree, warp totals) on the device's warp, as the
// ReducePlan the kernels take. One definition for gpu_backends.cpp and for tests/gpu_reduce_test.cpp, which
// proves on a CPU, for a grid of H, token counts and layouts, that the kernels' reduction code with this plan
// gives the twin's bits on warps of 32 and of 64.
#pragma once

#include "block_reduce.hpp"
#include "driftcheck/device/twin_norm.hpp"

namespace driftcheck::gpu {

inline ReducePlan reduce_plan(const twin::ReduceOrder& o, DType accumulate = DType::kF32) {
  return {o.threads, o.vec, o.ascending, o.totals_tree, accumulate, o.chunk_sum_first};
}

// The twin's order for case c on warps of `warp` lanes. The twins are written for CUDA's warp of 32; a wave64
// device runs the same rules on 64-lane warps: the csrc kernels keep their thread count (it follows H and the
// token count only) with 64-lane trees, and Triton's num_warps become num_warps wavefronts of 64 lanes.
inline twin::ReduceOrder port_order(twin::NormKernel k, twin::NormBug bug, const Case& c, int warp) {
  k.order.warp = warp;
  return twin::norm_order(k, bug, c);
}

}  // namespace driftcheck::gpu
