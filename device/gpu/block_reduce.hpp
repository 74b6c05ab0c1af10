// How a kernel's block sums what its threads hold, written once (DC_HD) for the HIP kernels and for the host
// simulation that tests/gpu_reduce_test.cpp holds against the CPU twins' ReduceOrder. The order is a function
// of the warp size (32 lanes on NVIDIA, 64 on AMD wavefronts), read from the hardware, never assumed: the
// same plan gives other bits on wave64, and a twin with ReduceOrder::warp = 64 predicts them.
#pragma once

#include <cstdint>

#include "driftcheck/reference/format.hpp"
#if defined(__CUDACC__) || defined(__HIP__)
#include "platform.hpp"  // kernel sources only: the host simulation needs no GPU runtime
#endif

namespace driftcheck::gpu {

// Threads [0, threads) own the elements: chunk c of `vec` consecutive elements belongs to thread
// c % threads, which sums its chunks' squares in order into its partial, element by element or, with
// `chunk_sum_first`, each chunk's squares on their own first, pair by pair (x0^2 + x1^2, then the next pair),
// and then the chunk sum (vLLM's _f16Vec::sum_squares in fused_add_rms_norm). Threads of the block past
// `threads` hold 0 (the block is a whole number of 64-lane wavefronts; adding +0 to a sum of squares changes
// no bit). Each warp then combines its lanes by a shuffle-down tree, lane i += lane i + offset: offsets
// warp/2, ..., 1 (lane 0 ends with ((x0 + x16) + (x8 + x24)) + ..., the same value as an xor butterfly) or,
// `ascending`, 1, 2, ..., warp/2 (cub's order: neighbours first). The totals of the warps that own threads
// are added in warp order or, `totals_tree`, by a descending tree over them (Triton's tl.sum across warps).
// The CPU twins' ReduceOrder has the same fields (device/gpu/norm_plan.hpp maps one to the other) plus the
// warp, which the kernels read from the hardware.
struct ReducePlan {
  int threads = 1;
  int vec = 1;
  bool ascending = false;
  bool totals_tree = false;
  DType accumulate = DType::kF32;  // every partial sum rounded to this; kF32 except in a mutant
  bool chunk_sum_first = false;
};

inline constexpr int kMaxNormThreads =
    1024;  // the largest block a norm kernel launches (CUDA's and HIP's limit)

DC_HD inline float accumulate_in(DType t, float x) {
  if (t == DType::kF32) return x;
  return t == DType::kBF16 ? round_bf16(x) : static_cast<float>(round_to(t, x));
}

// The partial sum of squares of thread `tid` over a row of n elements, value(i) giving element i (called
// once per owned element, in the order the thread visits them).
template <class Value>
DC_HD float thread_sum_squares(const ReducePlan& p, int tid, std::int64_t n, Value&& value) {
  float partial = 0.f;
  if (tid >= p.threads) return partial;
  const std::int64_t step = static_cast<std::int64_t>(p.threads) * p.vec;
  for (std::int64_t c0 = static_cast<std::int64_t>(tid) * p.vec; c0 < n; c0 += step) {
    const std::int64_t end = c0 + p.vec < n ? c0 + p.vec : n;
    if (!p.chunk_sum_first) {
      for (std::int64_t i = c0; i < end; ++i) {
        const float v = value(i);
        partial = accumulate_in(p.accumulate, partial + v * v);
      }
      continue;
    }
    float chunk = 0.f;
    for (std::int64_t i = c0; i < end; i += 2) {
      const float a = value(i);
      float pair = a * a;
      if (i + 1 < end) {
        const float b = value(i + 1);
        pair = accumulate_in(p.accumulate, pair + b * b);
      }
      chunk = accumulate_in(p.accumulate, chunk + pair);
    }
    partial = accumulate_in(p.accumulate, partial + chunk);
  }
  return partial;
}

// The shuffle tree of a warp of `warp` lanes: its number of steps and the offset of step s.
DC_HD constexpr int tree_steps(int warp) {
  int s = 0;
  while ((1 << s) < warp) ++s;
  return s;
}
DC_HD constexpr int tree_offset(bool ascending, int warp, int step) {
  return ascending ? 1 << step : (warp >> 1) >> step;
}

DC_HD constexpr int owning_warps(const ReducePlan& p, int warp) {
  return (p.threads + warp - 1) / warp;
}

// The block total from the warp totals t[0, n), n = owning_warps (t is overwritten by the tree).
DC_HD inline float combine_totals(const ReducePlan& p, float* t, int n) {
  if (!p.totals_tree) {
    float total = t[0];
    for (int i = 1; i < n; ++i) total = accumulate_in(p.accumulate, total + t[i]);
    return total;
  }
  int width = 1;
  while (width < n) width *= 2;
  for (int offset = width / 2; offset >= 1; offset /= 2)
    for (int i = 0; i < offset && i + offset < n; ++i)
      t[i] = accumulate_in(p.accumulate, t[i] + t[i + offset]);
  return t[0];
}

#if defined(__CUDACC__) || defined(__HIP__)
inline constexpr int kMaxBlockWarps = kMaxNormThreads / 32;  // shared slots: the largest block, smallest warp

// Lane 0 of the calling warp ends with the warp's total. Every lane of the block must call it (full-warp
// shuffles: the block is a whole number of warps).
__device__ inline float warp_tree(const ReducePlan& p, float v) {
  for (int s = 0; s < tree_steps(warpSize); ++s)
    v = accumulate_in(p.accumulate, v + DC_SHFL_DOWN(v, tree_offset(p.ascending, warpSize, s)));
  return v;
}

// The block's total of v, returned to every thread; `slots` is shared memory for kMaxBlockWarps floats.
__device__ inline float block_total(const ReducePlan& p, float v, float* slots) {
  v = warp_tree(p, v);
  __syncthreads();  // slots may still be read from the previous call
  if (threadIdx.x % warpSize == 0) slots[threadIdx.x / warpSize] = v;
  __syncthreads();
  float t[kMaxBlockWarps];
  const int n = owning_warps(p, warpSize);
  for (int i = 0; i < n; ++i) t[i] = slots[i];
  return combine_totals(p, t, n);
}
#endif

}  // namespace driftcheck::gpu
