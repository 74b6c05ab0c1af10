// The rmsnorm-family and concat twins: against the fp64 reference within a tolerance derived from the
// roundings they declare, the reduction and rounding details of the kernels they model, and what each
// declines. The full oracle (docs/ORACLE.md) is tested elsewhere.
#include <gtest/gtest.h>

#include "twin_checks.hpp"

namespace driftcheck {
namespace {

using namespace twin_checks;

TEST(NormTwins, RmsNormTwinsMatchTheReferenceWithinTheirDeclaredRoundings) {
  for (std::string_view name : {"cpu.rmsnorm.native", "cpu.rmsnorm.cuda", "cpu.rmsnorm.cuda_onecast",
                                "cpu.rmsnorm.fused_add", "cpu.rmsnorm.fused_add_onecast"}) {
    const Backend& b = numerics_of(get(name));
    int ran = 0;
    for (const NormCase& nc : rmsnorm_cases()) {
      if (!b.supports(nc.c).ok) continue;
      ++ran;
      std::string where;
      EXPECT_LE(norm_ratio(b, b.numerics(), nc.c, &where), 1.0) << name << " " << nc.label << ": " << where;
    }
    // The csrc kernels accept plain weights and contiguous outputs (rms_norm) or residuals (fused_add) only.
    EXPECT_GE(ran, 4) << name;
  }
}

TEST(NormTwins, DualTwinsMatchTheReferenceAndTheUnfusedChainStaysWithinTwoRoundings) {
  // Neither chain has a (1 + w) mode; the fused kernel takes contiguous inputs only.
  for (std::string_view name : {"cpu.dual.fused", "cpu.dual.unfused"}) {
    const Backend& b = numerics_of(get(name));
    for (DType t : {DType::kBF16, DType::kF16}) {
      for (const Layout& l : {Layout{0, 0, 4}, Layout{5, 1, 4}}) {
        const Case c = builders::dual_case(3, 200, t, {}, 21, l);
        if (l.row_pad > 0 && name == "cpu.dual.fused") {
          EXPECT_TRUE(reason_has(b.supports(c), "contiguous")) << name;
          continue;
        }
        ASSERT_TRUE(b.supports(c).ok) << b.supports(c).reason;
        std::string where;
        EXPECT_LE(norm_ratio(b, b.numerics(), c, &where), 1.0) << name << ": " << where;
      }
      DualRmsNormCatParams gemma;
      gemma.weight_mode = WeightMode::kOnePlus;
      EXPECT_TRUE(reason_has(b.supports(builders::dual_case(3, 200, t, gemma, 21)), "(1 + w)")) << name;
    }
  }
}

TEST(NormTwins, ConcatIsABitExactCopyForEveryDtype) {
  const Backend& b = get("cpu.concat.copy");
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3FNUZ}) {
    Case c = builders::concat_case(3, 5, 9, t, 31, Layout{2, 3, 4});
    c.tensor("a").set({1, 2}, NAN);
    const Case out = run_clone(b, c);
    for (std::int64_t r = 0; r < 3; ++r) {
      for (std::int64_t i = 0; i < 14; ++i) {
        const Tensor& src = i < 5 ? c.tensor("a") : c.tensor("b");
        const std::int64_t j = i < 5 ? i : i - 5;
        EXPECT_EQ(out.tensor("out").storage()->load_bits(out.tensor("out").index({r, i})),
                  src.storage()->load_bits(src.index({r, j})));
      }
    }
  }
}

// fused_add_rms_norm's vector path sums each 8-element chunk with _f16Vec::sum_squares, `result += z.x * z.x
// + z.y * z.y` over element pairs (csrc/type_convert.cuh at vllm 0c0c819b). Squares 1, 2^-24, 2^-24, 2^-24:
// pair by pair, 1 + 2^-24 ties to 1 and 2^-24 + 2^-24 = 2^-23 is exact, so the chunk is 1 + 2^-23; element by
// element every 2^-24 ties away to 1. The fused_add twin's order must give the pairs' value.
TEST(NormTwins, FusedAddChunkSquaresAreSummedInPairs) {
  const float t = std::ldexp(1.0f, -12);
  const std::array<float, 8> x{1.0f, t, t, t, 0.0f, 0.0f, 0.0f, 0.0f};
  const twin::ReduceOrder chunked{1, 8, 32, true, false, true};
  EXPECT_EQ(twin::sum_squares(x.data(), 8, chunked), 1.0f + std::ldexp(1.0f, -23));
  const twin::ReduceOrder plain{1, 8, 32, true, false, false};
  EXPECT_EQ(twin::sum_squares(x.data(), 8, plain), 1.0f);
  // The twin's kernel order is the chunked one on its 16-byte path.
  const Case c =
      builders::rmsnorm_case(1, 64, DType::kBF16, RmsNormParams{1e-6, WeightMode::kPlain, true}, 1);
  EXPECT_TRUE(twin::norm_order(twin::rmsnorm_fused_add_kernel(), twin::NormBug::kNone, c).chunk_sum_first);
  EXPECT_EQ(twin::norm_order(twin::rmsnorm_fused_add_kernel(), twin::NormBug::kNone, c).vec, 8);
}

// fused_add_rms_norm writes into its input; its 16-byte path condition (layernorm_kernels.cu:333-349 at
// vllm 0b9c5412, 270-284 at 34d59e7f) reads the input, residual and weight pointers, H and the input stride.
// A separate y the case carries (the caller's copy of the result) does not enter it: aligned x, w and
// residual with a y three elements off still take the vector path.
TEST(NormTwins, FusedAddVectorPathIgnoresTheCasesSeparateOutput) {
  Case c = builders::rmsnorm_case(2, 64, DType::kBF16, RmsNormParams{1e-6, WeightMode::kPlain, true}, 1);
  c.tensors["y"] = builders::matrix(DType::kBF16, 2, 64, builders::Layout{0, 3, 8});
  EXPECT_EQ(twin::norm_order(twin::rmsnorm_fused_add_kernel(), twin::NormBug::kNone, c).vec, 8);
  c.tensors["x"] = builders::matrix(DType::kBF16, 2, 64, builders::Layout{0, 3, 8});
  EXPECT_EQ(twin::norm_order(twin::rmsnorm_fused_add_kernel(), twin::NormBug::kNone, c).vec, 1);
}

// GemmaRMSNorm.forward_static (vllm@00cba797 model_executor/layers/layernorm.py) adds the residual as
// `x.float() + residual.float() if orig_dtype == torch.float16 else x + residual`: fp16 rows keep the sum in
// fp32 through the variance. Row (x0, 1) + (0.5, 0) with x0 odd in [1025, 2047]: x0 + 0.5 is a tie in fp16
// (ulp 1), so the two sums differ; the first x0 where the outputs differ too tells the paths apart. Weight
// 0 (1 + w = 1), eps 0; the twin's fp32 arithmetic: sequential sum of squares, 1 / sqrt, one rounding of
// z * s * (1 + w).
TEST(NormTwins, NativeGemmaAddsAnFp16ResidualInFp32) {
  const auto outputs = [](float z0, float z1) {
    const float s = 1.0f / std::sqrt((z0 * z0 + z1 * z1) / 2.0f);
    return std::array<float, 2>{twin::round_act(DType::kF16, z0 * s), twin::round_act(DType::kF16, z1 * s)};
  };
  float x0 = 0.0f;
  std::array<float, 2> fp32_sum{}, f16_sum{};
  for (int v = 1025; v < 2048 && x0 == 0.0f; v += 2) {
    const float x = static_cast<float>(v);
    fp32_sum = outputs(x + 0.5f, 1.0f);
    f16_sum = outputs(twin::round_act(DType::kF16, x + 0.5f), 1.0f);
    if (fp32_sum != f16_sum) x0 = x;
  }
  ASSERT_NE(x0, 0.0f);
  Case c = builders::rmsnorm_case(1, 2, DType::kF16, RmsNormParams{0.0, WeightMode::kOnePlus, true}, 1);
  c.tensor("x").copy_from(std::vector<double>{static_cast<double>(x0), 1.0});
  c.tensor("residual").copy_from(std::vector<double>{0.5, 0.0});
  c.tensor("w").copy_from(std::vector<double>{0.0, 0.0});
  const Case out = run_clone(get("cpu.rmsnorm.native"), c);
  EXPECT_EQ(out.tensor("y").at({0, 0}), fp32_sum[0]) << x0;
  EXPECT_EQ(out.tensor("y").at({0, 1}), fp32_sum[1]) << x0;
  EXPECT_EQ(out.tensor("residual").at({0, 0}), static_cast<double>(twin::round_act(DType::kF16, x0 + 0.5f)));
}

// fused_add_rms_norm's one-cast windows (vllm@0b9c5412 layernorm_kernels.cu: `Converter::convert(x *
// s_variance * wf)`) round z * s * w once where the two-cast text (vllm@34d59e7f: `temp *= s_variance; temp
// *= weight_v[idx]`) rounds z * s first: the two twins differ in some element of a random case.
TEST(NormTwins, FusedAddOneCastWindowRoundsOnce) {
  const Case c =
      builders::rmsnorm_case(4, 256, DType::kBF16, RmsNormParams{1e-6, WeightMode::kPlain, true}, 17);
  const Case two = run_clone(get("cpu.rmsnorm.fused_add"), c);
  const Case one = run_clone(get("cpu.rmsnorm.fused_add_onecast"), c);
  EXPECT_NE(two.tensor("y").to_f64(), one.tensor("y").to_f64());
  EXPECT_EQ(two.tensor("residual").to_f64(), one.tensor("residual").to_f64());
  EXPECT_EQ(get("cpu.rmsnorm.fused_add_onecast").numerics().output_roundings, 2);
}

TEST(NormTwins, TheFusedAddTwinUpdatesTheResidualInPlaceWhenYAliasesX) {
  RmsNormParams p;
  p.residual = true;
  Case c = builders::rmsnorm_case(2, 64, DType::kBF16, p, 41);
  const Case separate = run_clone(get("cpu.rmsnorm.fused_add"), c);
  c.tensors["y"] = c.tensor("x");  // in place, as the real kernel writes
  const Case inplace = run_clone(get("cpu.rmsnorm.fused_add"), c);
  EXPECT_EQ(inplace.tensor("y").to_f64(), separate.tensor("y").to_f64());
  EXPECT_EQ(inplace.tensor("residual").to_f64(), separate.tensor("residual").to_f64());
}

TEST(NormSupport, KernelsDeclineResidualModesAndDtypesTheyDoNotHave) {
  RmsNormParams with;
  with.residual = true;
  const Case res = builders::rmsnorm_case(2, 64, DType::kBF16, with, 1);
  const Case plain = builders::rmsnorm_case(2, 64, DType::kBF16, {}, 1);
  EXPECT_TRUE(reason_has(get("cpu.rmsnorm.cuda").supports(res), "fused_add"));
  EXPECT_TRUE(reason_has(get("cpu.rmsnorm.fused_add").supports(plain), "no residual"));
  EXPECT_TRUE(get("cpu.rmsnorm.native").supports(res).ok);
  EXPECT_TRUE(reason_has(get("cpu.rmsnorm.cuda").supports(builders::rmsnorm_case(2, 64, DType::kF32, {}, 1)),
                         "bf16 and fp16"));
  Case mixed = builders::concat_case(2, 3, 4, DType::kBF16, 1);
  mixed.tensors["b"] = builders::matrix(DType::kF16, 2, 4);
  EXPECT_TRUE(reason_has(get("cpu.concat.copy").supports(mixed), "one dtype"));
}

}  // namespace
}  // namespace driftcheck
