// The GPU kernels' block reduction order against the CPU twins' ReduceOrder, on the CPU: the kernels' own
// reduction code (device/gpu/block_reduce.hpp: thread ownership, shuffle-tree offsets, warp totals) runs here
// with the one thing a CPU lacks, the warp shuffle, done over an array of lanes as the hardware does it. For
// warps of 32 (NVIDIA) and 64 (AMD wavefronts) the result must be the twin's sum_squares with the same warp,
// bit for bit: a twin with ReduceOrder::warp = 64 predicts what the kernels compute on a wave64 GPU, which
// this machine (and the H200) cannot run. The norm ports' plans are their twins' orders for each case
// (device/gpu/norm_plan.hpp), proven here over a grid of H, token counts, dtypes and layouts. On the H200,
// gpu_test checks the warp-32 kernels against the twins.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "../device/gpu/norm_plan.hpp"

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
    thread[static_cast<std::size_t>(t)] =
        gpu::thread_sum_squares(p, t, static_cast<std::int64_t>(x.size()),
                                [&](std::int64_t i) { return x[static_cast<std::size_t>(i)]; });
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
  return {p.threads, p.vec, warp, p.ascending, p.totals_tree, p.chunk_sum_first};
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
          // Odd trials sum each chunk on its own first (fused_add_rms_norm's order).
          const ReducePlan plan{threads, vec, false, false, acc, trial % 2 == 1};
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

// A case's shapes only (norm_supports and norm_order read dtypes, sizes, strides and offsets, never values):
// every tensor is a view into one shared storage, rows `pad` elements longer than H, starting at `offset`.
Case norm_shapes(OpKind op, bool residual, const std::shared_ptr<Storage>& s, std::int64_t tokens,
                 std::int64_t h, std::int64_t pad, std::int64_t offset) {
  const auto rows = [&](std::int64_t width) {
    return Tensor::view(s, {tokens, width}, {width + pad, 1}, offset);
  };
  Case c;
  c.op = op;
  if (op == OpKind::kRmsNorm) {
    RmsNormParams p;
    p.residual = residual;
    c.params = p;
    for (const char* name : {"x", "y", "residual"}) c.tensors[name] = rows(h);
    c.tensors["w"] = Tensor::view(s, {h}, {1}, offset);
  } else {
    c.params = DualRmsNormCatParams{};
    for (const char* name : {"e", "h"}) c.tensors[name] = rows(h);
    for (const char* name : {"w_e", "w_h"}) c.tensors[name] = Tensor::view(s, {h}, {1}, offset);
    c.tensors["out"] = rows(2 * h);
  }
  return c;
}

bool same_order(const twin::ReduceOrder& a, const twin::ReduceOrder& b) {
  return a.threads == b.threads && a.vec == b.vec && a.warp == b.warp && a.ascending == b.ascending &&
         a.totals_tree == b.totals_tree && a.chunk_sum_first == b.chunk_sum_first;
}

// The plan each norm port launches (norm_plan.hpp: its twin's order for the case on the device's warp) sums a
// row as the twin does, bit for bit, for every H, token count, dtype and layout of the grid, on warps of 32
// (the twin as registered: the H200's claim) and 64 (a wave64 GPU, docs/gpu/README.md). The grid straddles
// every switch of the plans: H / vec and H against 256 and 1024 threads, 255 vs 256 tokens, next_pow2(H) at
// 1024 and 4096 (Triton's warps), 16-byte vectors against H, misaligned bases and padded rows (fused_add's
// scalar path).
TEST(GpuReduce, NormPortsSumInTheirTwinsOrderForEveryHAndTokenCount) {
  struct Port {
    const char* name;
    OpKind op;
    bool residual;
    twin::NormKernel kernel;
    twin::NormBug bug;
  };
  const Port ports[] = {
      {"rms_norm", OpKind::kRmsNorm, false, twin::rmsnorm_cuda_kernel(), twin::NormBug::kNone},
      {"fused_add_rms_norm", OpKind::kRmsNorm, true, twin::rmsnorm_fused_add_kernel(), twin::NormBug::kNone},
      {"fused_dual_rmsnorm_cat", OpKind::kDualRmsNormCat, false, twin::dual_fused_kernel(),
       twin::NormBug::kNone},
      // mutant.gpu.dual.batch_variant_block's plan is its CPU bug class's order.
      {"fused_dual_rmsnorm_cat (batch-variant block)", OpKind::kDualRmsNormCat, false,
       twin::dual_fused_kernel(), twin::NormBug::kBatchVariantBlock},
  };
  constexpr std::int64_t kH[] = {1,   3,    8,    12,   60,   64,   100,  127, 128,
                                 520, 1000, 1024, 1028, 2048, 2056, 4096, 8192};
  constexpr std::int64_t kTokens[] = {1, 2, 255, 256, 257};
  constexpr std::int64_t kLayouts[][2] = {{0, 0}, {0, 3}, {5, 0}, {8, 8}};  // {row pad, offset}
  std::mt19937_64 rng(20261201);
  int compared = 0, declined = 0, token_switches = 0;
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    const auto storage = std::make_shared<Storage>(dtype, 257 * (2 * 8192 + 8) + 8);
    for (const Port& port : ports) {
      for (const std::int64_t h : kH) {
        const std::vector<float> x = draw(rng, static_cast<std::size_t>(h));
        for (const auto& [pad, offset] : kLayouts) {
          twin::ReduceOrder before{};
          for (const std::int64_t tokens : kTokens) {
            const Case c = norm_shapes(port.op, port.residual, storage, tokens, h, pad, offset);
            if (!twin::norm_supports(port.kernel, c).ok) {
              ++declined;
              continue;
            }
            const twin::ReduceOrder registered = twin::norm_order(port.kernel, port.bug, c);
            EXPECT_TRUE(same_order(gpu::port_order(port.kernel, port.bug, c, 32), registered)) << port.name;
            if (tokens == 256) token_switches += registered.threads != before.threads;
            before = registered;
            for (const int warp : {32, 64}) {
              const twin::ReduceOrder order = gpu::port_order(port.kernel, port.bug, c, warp);
              const ReducePlan plan = gpu::reduce_plan(order);
              ASSERT_LE(plan.threads, gpu::kMaxNormThreads) << port.name << " H " << h;
              EXPECT_EQ(bits(kernel_block_sum(plan, warp, x)), bits(twin::sum_squares(x.data(), h, order)))
                  << port.name << ", " << dtype_name(dtype) << ", H " << h << ", " << tokens
                  << " tokens, row pad " << pad << ", offset " << offset << ", warp " << warp << ": "
                  << order.threads << " threads, vec " << order.vec;
              ++compared;
            }
          }
        }
      }
    }
  }
  // Every port supports most of the grid (rms_norm declines padded output rows), and the token count reaches
  // the csrc plans: 256 tokens take fewer threads than 255 wherever H / vec (H for fused_add) exceeds 256.
  EXPECT_GT(compared, 2 * 1000);
  EXPECT_GT(declined, 0);
  EXPECT_GE(token_switches, 2 * 2 * 4);
}

}  // namespace
}  // namespace driftcheck
