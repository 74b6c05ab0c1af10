// The GPU kernels' block reduction order against the CPU twins' ReduceOrder, on the CPU: the kernels' own
// reduction code (device/gpu/block_reduce.hpp: thread ownership, shuffle-tree offsets, warp totals) runs here
// with the one thing a CPU lacks, the warp shuffle, done over an array of lanes as the hardware does it. For
// warps of 32 (NVIDIA) and 64 (AMD wavefronts) the result must be the twin's sum_squares with the same warp,
// bit for bit: a twin with ReduceOrder::warp = 64 predicts what the kernels compute on a wave64 GPU, which
// this machine (and the H200) cannot run. On the H200, gpu_test checks the warp-32 kernels against the twins.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "../device/gpu/block_reduce.hpp"
#include "../device/src/twin_common.hpp"

namespace driftcheck {
namespace {

using gpu::ReducePlan;

// __shfl_down(v, offset) over `lanes`: lane i gets lane i + offset, or keeps its own value when that lane is
// past the warp (CUDA's and HIP's rule).
void shuffle_down_add(std::vector<float>& lanes, int offset, DType accumulate) {
  const std::vector<float> before = lanes;
  const int warp = static_cast<int>(lanes.size());
  for (int i = 0; i < warp; ++i)
    lanes[i] =
        gpu::accumulate_in(accumulate, before[i] + (i + offset < warp ? before[i + offset] : before[i]));
}

// What block_total computes for a block of whole 64-lane wavefronts whose threads summed the squares of x.
float kernel_block_sum(const ReducePlan& p, int warp, const std::vector<float>& x) {
  const int block = (p.threads + 63) / 64 * 64;
  std::vector<float> thread(static_cast<std::size_t>(block), 0.0f);
  for (int t = 0; t < block; ++t)
    gpu::for_owned(p, t, static_cast<std::int64_t>(x.size()), [&](std::int64_t i) {
      const float v = x[static_cast<std::size_t>(i)];
      thread[static_cast<std::size_t>(t)] =
          gpu::accumulate_in(p.accumulate, thread[static_cast<std::size_t>(t)] + v * v);
    });
  std::vector<float> totals;
  for (int w0 = 0; w0 < block; w0 += warp) {
    std::vector<float> lanes(thread.begin() + w0, thread.begin() + w0 + warp);
    for (int s = 0; s < gpu::tree_steps(warp); ++s)
      shuffle_down_add(lanes, gpu::tree_offset(p.ascending, warp, s), p.accumulate);
    totals.push_back(lanes[0]);  // lane 0 writes the warp's slot
  }
  return gpu::combine_totals(p, totals.data(), gpu::owning_warps(p, warp));
}

// The twin order with the plan's lane tree and warp-total order.
twin::ReduceOrder twin_order(const ReducePlan& p, int warp) {
  return {p.threads, p.vec, warp, p.ascending, p.totals_tree};
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> draw(std::mt19937_64& rng, std::size_t n) {
  std::lognormal_distribution<float> magnitude(0.0f, 2.0f);  // squares spanning many binades: order matters
  std::vector<float> x(n);
  for (float& v : x) v = (rng() & 1 ? -1.0f : 1.0f) * magnitude(rng);
  return x;
}

TEST(GpuReduce, KernelOrderIsTheTwinOrderForWarpsOf32And64) {
  std::mt19937_64 rng(20261130);
  int compared = 0, differ_by_warp = 0;
  for (const int threads : {1, 7, 32, 33, 64, 100, 128, 256, 1000, 1024}) {
    for (const int vec : {1, 2, 8}) {
      for (const DType acc : {DType::kF32, DType::kBF16, DType::kF16}) {
        for (int trial = 0; trial < 4; ++trial) {
          const std::size_t n = 1 + rng() % 6000;
          const std::vector<float> x = draw(rng, n);
          const ReducePlan plan{threads, vec, false, false, acc};
          float by_warp[2];
          for (const int warp : {32, 64}) {
            const float kernel = kernel_block_sum(plan, warp, x);
            const float twin =
                twin::sum_squares(x.data(), static_cast<std::int64_t>(n), twin_order(plan, warp), acc);
            EXPECT_EQ(bits(kernel), bits(twin)) << "threads " << threads << ", vec " << vec << ", warp "
                                                << warp << ", n " << n << ", accumulate " << dtype_name(acc);
            by_warp[warp / 64] = kernel;
            ++compared;
          }
          differ_by_warp += bits(by_warp[0]) != bits(by_warp[1]);
        }
      }
    }
  }
  EXPECT_EQ(compared, 10 * 3 * 3 * 4 * 2);
  // The warp size is part of the order: wave64 gives other bits in a good share of cases (all threads in
  // one warp of 64 vs two of 32), so predicting AMD results needs the twin's warp parameter.
  EXPECT_GT(differ_by_warp, 30);
}

// The orders block_reduce.hpp offers besides the twins' present one, as the kernel runs them: cub's ascending
// tree and Triton's tree over warp totals give the exact sum where every partial sum is exact, so the
// ladders cover every lane and warp once.
TEST(GpuReduce, EveryTreeCoversEveryLaneAndWarpOnce) {
  for (const bool ascending : {false, true}) {
    for (const bool totals_tree : {false, true}) {
      for (const int warp : {32, 64}) {
        for (const int threads : {1, 5, 64, 96, 333, 1024}) {
          const std::size_t n = 4096;
          std::vector<float> x(n);
          for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 7);  // small integers: exact sums
          double exact = 0;
          for (float v : x) exact += static_cast<double>(v) * v;
          const ReducePlan plan{threads, 1, ascending, totals_tree, DType::kF32};
          EXPECT_EQ(kernel_block_sum(plan, warp, x), static_cast<float>(exact))
              << "ascending " << ascending << ", totals_tree " << totals_tree << ", warp " << warp
              << ", threads " << threads;
        }
      }
    }
  }
}

}  // namespace
}  // namespace driftcheck
