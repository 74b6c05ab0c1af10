// The fp64 reference of rmsnorm, concat and dual_rmsnorm_cat, checked independently (loops, exact
// invariances), and the validation of every op's case (one-line InvalidArgument messages).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <Eigen/Core>

#include <bit>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "case_builders.hpp"
#include "driftcheck/reference/reference.hpp"

namespace driftcheck {
namespace {

using builders::Layout;

constexpr double kU = 0x1p-53;  // unit roundoff of fp64

struct NormDraw {
  std::int64_t rows = 1;
  std::int64_t hidden = 1;
  DType dtype = DType::kF32;
  RmsNormParams params;
  Layout layout;
  std::uint64_t seed = 0;
};

std::ostream& operator<<(std::ostream& os, const NormDraw& d) {
  return os << d.rows << " x " << d.hidden << " " << dtype_name(d.dtype) << " eps " << d.params.eps
            << " one_plus " << (d.params.weight_mode == WeightMode::kOnePlus) << " residual "
            << d.params.residual << " row_pad " << d.layout.row_pad << " offset " << d.layout.offset
            << " guard " << d.layout.guard << " seed " << d.seed;
}

rc::Gen<NormDraw> gen_norm() {
  return rc::gen::exec([] {
    NormDraw d;
    d.rows = *rc::gen::inRange<std::int64_t>(1, 6);
    d.hidden = *rc::gen::element<std::int64_t>(1, 2, 7, 8, 33, 96, 130);
    d.dtype = *rc::gen::element(DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3FN, DType::kF64);
    d.params.eps = *rc::gen::element(0.0, 1e-6, 1e-5);
    d.params.weight_mode = *rc::gen::element(WeightMode::kPlain, WeightMode::kOnePlus);
    d.params.residual = *rc::gen::arbitrary<bool>();
    d.layout = {*rc::gen::inRange<std::int64_t>(0, 5), *rc::gen::inRange<std::int64_t>(0, 8),
                *rc::gen::inRange<std::int64_t>(0, 3)};
    d.seed = *rc::gen::arbitrary<std::uint64_t>();
    return d;
  });
}

Case norm_case(const NormDraw& d) {
  return builders::rmsnorm_case(d.rows, d.hidden, d.dtype, d.params, d.seed, d.layout);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_f64();
  const std::vector<double> y = b.to_f64();
  if (a.shape() != b.shape()) return false;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::bit_cast<std::uint64_t>(x[i]) != std::bit_cast<std::uint64_t>(y[i])) return false;
  }
  return true;
}

// A copy of tensor t in fp64 with every value replaced by f(value).
template <class F>
Tensor map_f64(const Tensor& t, F&& f) {
  std::vector<double> v = t.to_f64();
  for (double& x : v) x = f(x);
  Tensor out = Tensor::zeros(DType::kF64, t.shape());
  out.copy_from(v);
  return out;
}

// Loops with a different formula (multiply by the reciprocal). Each evaluation of y_i = z_i / rms * w_i is
// within (H/2 + 5) u relative of the exact value (H-term sum of squares: H u; sqrt halves it;
// division/reciprocal, the weight product, the mean and eps: a few u), so two differ by at most (H + 10) u
// |y_i|.
RC_GTEST_PROP(ReferenceRmsNorm, MatchesStraightforwardLoops, ()) {
  const NormDraw d = *gen_norm();
  const Case c = norm_case(d);
  const Outputs out = reference(c);
  const Tensor& x = c.tensor("x");
  for (std::int64_t n = 0; n < d.rows; ++n) {
    std::vector<double> z(static_cast<std::size_t>(d.hidden));
    double sum_sq = 0;
    for (std::int64_t i = 0; i < d.hidden; ++i) {
      z[static_cast<std::size_t>(i)] =
          x.at({n, i}) + (d.params.residual ? c.tensor("residual").at({n, i}) : 0.0);
      sum_sq += z[static_cast<std::size_t>(i)] * z[static_cast<std::size_t>(i)];
    }
    const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(d.hidden) + d.params.eps);
    for (std::int64_t i = 0; i < d.hidden; ++i) {
      const double w = c.tensor("w").at({i}) + (d.params.weight_mode == WeightMode::kOnePlus ? 1.0 : 0.0);
      const double want = z[static_cast<std::size_t>(i)] * inv_rms * w;
      if (std::isnan(want)) {  // an all-zero row with eps = 0: 0/0 in both
        RC_ASSERT(std::isnan(out.at("y").at({n, i})));
        continue;
      }
      RC_ASSERT(std::fabs(out.at("y").at({n, i}) - want) <=
                (static_cast<double>(d.hidden) + 10) * kU * std::fabs(want));
      if (d.params.residual) RC_ASSERT(out.at("residual").at({n, i}) == z[static_cast<std::size_t>(i)]);
    }
  }
}

// With w = 1 and eps = 0, mean(y^2) = 1: each y_i^2 is within (H + 10) u relative of exact, the test's H-term
// sum adds H u: |mean(y^2) - 1| <= (2H + 10) u.
RC_GTEST_PROP(ReferenceRmsNorm, RmsOfOutputIsOne, ()) {
  NormDraw d = *gen_norm();
  d.params = RmsNormParams{0.0, WeightMode::kPlain, false};
  Case c = norm_case(d);
  Tensor& w = c.tensor("w");
  w.copy_from(std::vector<double>(static_cast<std::size_t>(d.hidden), 1.0));
  const Outputs out = reference(c);
  for (std::int64_t n = 0; n < d.rows; ++n) {
    double sum_sq = 0;
    double x_sq = 0;
    for (std::int64_t i = 0; i < d.hidden; ++i) {
      sum_sq += out.at("y").at({n, i}) * out.at("y").at({n, i});
      x_sq += c.tensor("x").at({n, i}) * c.tensor("x").at({n, i});
    }
    if (x_sq == 0) continue;  // fp8 can round a short row to all zeros: 0/0
    RC_ASSERT(std::fabs(sum_sq / static_cast<double>(d.hidden) - 1.0) <= (2.0 * d.hidden + 10) * kU);
  }
}

// rmsnorm(c x) = rmsnorm(x) for eps = 0. With c a power of two every operation scales exactly, so the bits
// are equal; for a general c, c x is rounded (u relative per element), which moves the exact result by at
// most 2u relative, on top of the two evaluations' (H + 10) u.
RC_GTEST_PROP(ReferenceRmsNorm, ScaleInvariance, ()) {
  NormDraw d = *gen_norm();
  d.params.eps = 0.0;
  const bool power_of_two = *rc::gen::arbitrary<bool>();
  // Rounding c x and c r separately is not a relative perturbation of z = x + r when they cancel.
  d.params.residual = d.params.residual && power_of_two;
  const Case c = norm_case(d);
  const double scale =
      power_of_two ? std::ldexp(1.0, *rc::gen::inRange(-30, 31)) : *rc::gen::element(0.3, 1.7, 9.1);
  Case scaled = c.clone();
  scaled.tensors["x"] = map_f64(c.tensor("x"), [&](double v) { return scale * v; });
  if (d.params.residual)
    scaled.tensors["residual"] = map_f64(c.tensor("residual"), [&](double v) { return scale * v; });
  const Outputs a = reference(c);
  const Outputs b = reference(scaled);
  if (power_of_two) {
    RC_ASSERT(same_bits(a.at("y"), b.at("y")));
    return;
  }
  const std::vector<double> ya = a.at("y").to_f64();
  const std::vector<double> yb = b.at("y").to_f64();
  for (std::size_t i = 0; i < ya.size(); ++i) {
    if (std::isnan(ya[i])) continue;  // all-zero fp8 row
    RC_ASSERT(std::fabs(ya[i] - yb[i]) <= (static_cast<double>(d.hidden) + 12) * kU * std::fabs(ya[i]));
  }
}

// Layout (row stride, misaligned base, guard bands) changes which elements are read, never the values.
RC_GTEST_PROP(ReferenceRmsNorm, LayoutDoesNotChangeAnyBit, ()) {
  NormDraw d = *gen_norm();
  const Outputs strided = reference(norm_case(d));
  d.layout = {};
  const Outputs contiguous = reference(norm_case(d));
  RC_ASSERT(same_bits(strided.at("y"), contiguous.at("y")));
}

// Weight mode (1 + w) is the plain mode with weights 1 + w (added in fp64); the residual variant is the plain
// norm of z = x + r (added in fp64), and writes z. Both bit for bit, since the reference computes them so.
RC_GTEST_PROP(ReferenceRmsNorm, OnePlusAndResidualReduceToThePlainNorm, ()) {
  const NormDraw d = *gen_norm();
  const Case c = norm_case(d);
  Case plain = c.clone();
  plain.params = RmsNormParams{d.params.eps, WeightMode::kPlain, false};
  if (d.params.weight_mode == WeightMode::kOnePlus) {
    plain.tensors["w"] = map_f64(c.tensor("w"), [](double v) { return 1.0 + v; });
  }
  const Outputs out = reference(c);
  if (d.params.residual) {
    std::vector<double> z = c.tensor("x").to_f64();
    const std::vector<double> r = c.tensor("residual").to_f64();
    for (std::size_t i = 0; i < z.size(); ++i) z[i] += r[i];
    plain.tensors.erase("residual");
    plain.tensors["x"] = Tensor::zeros(DType::kF64, c.tensor("x").shape());
    plain.tensor("x").copy_from(z);
    RC_ASSERT(same_bits(out.at("residual"), plain.tensor("x")));
  }
  RC_ASSERT(same_bits(out.at("y"), reference(plain).at("y")));
}

RC_GTEST_PROP(ReferenceDualRmsNormCat, EqualsConcatOfTwoRmsNormsBitForBit, ()) {
  const NormDraw d = *gen_norm();
  const DualRmsNormCatParams p{d.params.eps, d.params.weight_mode};
  const Case c = builders::dual_case(d.rows, d.hidden, d.dtype, p, d.seed, d.layout);
  const Outputs out = reference(c);
  for (const auto& [half, x, w] : {std::tuple{0, "e", "w_e"}, std::tuple{1, "h", "w_h"}}) {
    Case norm;
    norm.op = OpKind::kRmsNorm;
    norm.params = RmsNormParams{p.eps, p.weight_mode, false};
    norm.tensors["x"] = c.tensor(x);
    norm.tensors["w"] = c.tensor(w);
    norm.tensors["y"] = Tensor::zeros(d.dtype, c.tensor(x).shape());
    const Outputs y = reference(norm);
    for (std::int64_t n = 0; n < d.rows; ++n) {
      for (std::int64_t i = 0; i < d.hidden; ++i) {
        const double want = y.at("y").at({n, i});
        const double got = out.at("out").at({n, half * d.hidden + i});
        RC_ASSERT(std::bit_cast<std::uint64_t>(got) == std::bit_cast<std::uint64_t>(want));
      }
    }
  }
}

RC_GTEST_PROP(ReferenceConcat, IsExact, ()) {
  const NormDraw d = *gen_norm();
  const std::int64_t width_b = *rc::gen::inRange<std::int64_t>(1, 40);
  const Case c = builders::concat_case(d.rows, d.hidden, width_b, d.dtype, d.seed, d.layout);
  const Outputs out = reference(c);
  for (std::int64_t n = 0; n < d.rows; ++n) {
    for (std::int64_t i = 0; i < d.hidden + width_b; ++i) {
      const double want = i < d.hidden ? c.tensor("a").at({n, i}) : c.tensor("b").at({n, i - d.hidden});
      RC_ASSERT(std::bit_cast<std::uint64_t>(out.at("out").at({n, i})) == std::bit_cast<std::uint64_t>(want));
    }
  }
}

// Eigen's product blocking follows the CPU's caches and changes the order of the reference's sums (a 32 KiB
// L1 moved golden references by up to 2^-35 relative against the 48 KiB machines they were recorded on). The
// reference pins it at start-up: Eigen uses the pinned sizes whatever this CPU has (on the 32 KiB machine
// this failed before the pin), and the golden files' check in the gate confirms the bits (golden/README.md).
TEST(Reference, MatrixBlockingIsPinnedSoBitsDoNotDependOnTheCpu) {
  EXPECT_EQ(Eigen::l1CacheSize(), kReferenceL1Bytes);
  EXPECT_EQ(Eigen::l2CacheSize(), kReferenceL2Bytes);
  EXPECT_EQ(Eigen::l3CacheSize(), kReferenceL3Bytes);
}

TEST(ReferenceRmsNorm, AllZeroRowWithEpsIsZero) {
  Case c = builders::rmsnorm_case(1, 8, DType::kBF16, RmsNormParams{1e-6, WeightMode::kPlain, false}, 1);
  c.tensor("x").copy_from(std::vector<double>(8, 0.0));
  const Outputs out = reference(c);
  for (std::int64_t i = 0; i < 8; ++i) EXPECT_EQ(out.at("y").at({0, i}), 0.0);
}

// ---- validation ----

void expect_invalid(const Case& c, const std::string& fragment) {
  try {
    validate(c);
    ADD_FAILURE() << "accepted, expected an error containing '" << fragment << "'";
  } catch (const InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_THROW(reference(c), InvalidArgument);
}

Case valid_rmsnorm() {
  return builders::rmsnorm_case(3, 16, DType::kBF16, RmsNormParams{1e-6, WeightMode::kPlain, true}, 1);
}

TEST(Validate, RmsNorm) {
  EXPECT_NO_THROW(validate(valid_rmsnorm()));
  Case c = valid_rmsnorm();
  c.params = RmsNormParams{-1e-6, WeightMode::kPlain, true};
  expect_invalid(c, "eps");
  c = valid_rmsnorm();
  c.tensors["w"] = Tensor::zeros(DType::kBF16, {15});
  expect_invalid(c, "tensor 'w' has shape [15], expected [16]");
  c = valid_rmsnorm();
  c.tensors["y"] = Tensor::zeros(DType::kBF16, {3, 17});
  expect_invalid(c, "'y'");
  c = valid_rmsnorm();
  c.tensors.erase("residual");
  expect_invalid(c, "'residual' is missing");
  c = valid_rmsnorm();
  c.params = RmsNormParams{};
  expect_invalid(c, "params.residual is false");
  c = valid_rmsnorm();
  c.tensors["x"] = Tensor::zeros(DType::kI32, {3, 16});
  expect_invalid(c, "float dtype");
  c = valid_rmsnorm();
  c.tensors["x"] = Tensor::zeros(DType::kBF16, {48});
  expect_invalid(c, "2-D");
  c = valid_rmsnorm();
  c.params = ConcatParams{};
  expect_invalid(c, "parameters of another op");
  c = valid_rmsnorm();
  c.tensors.erase("x");
  expect_invalid(c, "missing tensor 'x'");
}

TEST(Validate, ConcatAndDual) {
  const Case concat = builders::concat_case(2, 4, 5, DType::kF16, 1);
  EXPECT_NO_THROW(validate(concat));
  Case c = concat;
  c.tensors["b"] = Tensor::zeros(DType::kF16, {3, 5});
  expect_invalid(c, "a has 2 rows, b 3");
  c = concat;
  c.tensors["out"] = Tensor::zeros(DType::kF16, {2, 8});
  expect_invalid(c, "expected [2, 9]");
  c = concat;
  c.tensors["b"] = Tensor::zeros(DType::kBF16, {2, 5});
  expect_invalid(c, "one dtype");

  const Case dual = builders::dual_case(2, 8, DType::kBF16, DualRmsNormCatParams{}, 1);
  EXPECT_NO_THROW(validate(dual));
  c = dual;
  c.tensors["h"] = Tensor::zeros(DType::kBF16, {2, 9});
  expect_invalid(c, "'h'");
  c = dual;
  c.params = DualRmsNormCatParams{-1.0, WeightMode::kPlain};
  expect_invalid(c, "eps");
  c = dual;
  c.tensors["out"] = Tensor::zeros(DType::kBF16, {2, 8});
  expect_invalid(c, "expected [2, 16]");
}

builders::AttentionSpec valid_attention_spec() {
  builders::AttentionSpec s;
  s.params.num_q_heads = 4;
  s.params.num_kv_heads = 2;
  s.params.head_dim = 8;
  s.params.block_size = 4;
  s.params.has_sinks = true;
  s.query_lens = {3, 1};
  s.seq_lens = {9, 5};
  return s;
}

Case valid_attention() {
  return builders::attention_case(valid_attention_spec(), 1);
}

template <class F>
Case with_params(F&& f) {
  Case c = valid_attention();
  auto p = c.get<AttentionParams>();
  f(p);
  c.params = p;
  return c;
}

TEST(Validate, AttentionParameters) {
  EXPECT_NO_THROW(validate(valid_attention()));
  expect_invalid(with_params([](AttentionParams& p) { p.num_kv_heads = 3; }),
                 "not a multiple of num_kv_heads 3");
  expect_invalid(with_params([](AttentionParams& p) { p.head_dim = 0; }), ">= 1");
  expect_invalid(with_params([](AttentionParams& p) { p.window = -1; }), "window -1");
  expect_invalid(with_params([](AttentionParams& p) { p.softcap = NAN; }), "softcap");
  expect_invalid(with_params([](AttentionParams& p) { p.scale = INFINITY; }), "scale");
  expect_invalid(with_params([](AttentionParams& p) { p.has_sinks = false; }), "has_sinks is false");
  expect_invalid(with_params([](AttentionParams& p) { p.block_size = 8; }), "'k_cache' has shape");
  expect_invalid(with_params([](AttentionParams& p) { p.head_dim = 16; }), "'q' has shape");
}

TEST(Validate, AttentionBatch) {
  Case c = valid_attention();
  c.tensor("block_table").set({1, 0}, 7.0);  // the cache has 3 + 2 blocks
  expect_invalid(c, "block_table[1][0] = 7 outside the cache's 5 blocks");
  c = valid_attention();
  c.tensor("block_table").set({0, 2}, -1.0);
  expect_invalid(c, "block_table[0][2] = -1");
  c = valid_attention();
  c.tensor("seq_lens").set({1}, 13.0);  // 4 blocks of 4, the table row has 3
  expect_invalid(c, "seq_len 13 needs 4 blocks, block_table has 3");
  c = with_params([](AttentionParams& p) { p.causal = false; });
  c.tensor("seq_lens").set({1}, 0.0);
  expect_invalid(c, "query length 1 > seq_len 0 in a non-causal case");
  c = valid_attention();
  c.tensor("seq_lens").set({1}, 0.0);  // causal: the query sees nothing, which is defined
  EXPECT_NO_THROW(validate(c));
  c = valid_attention();
  c.tensor("query_start_loc").set({1}, 5.0);
  expect_invalid(c, "not monotonic");
  c = valid_attention();
  c.tensor("query_start_loc").set({2}, 3.0);
  expect_invalid(c, "query_start_loc ends at 3, q has 4 tokens");
  c = valid_attention();
  c.tensors["block_table"] = Tensor::zeros(DType::kF32, c.tensor("block_table").shape());
  expect_invalid(c, "must be i32");
  c = valid_attention();
  c.tensors["v_cache"] = Tensor::zeros(DType::kBF16, c.tensor("k_cache").shape());
  expect_invalid(c, "one dtype");
  c = valid_attention();
  c.tensors["lse"] = Tensor::zeros(DType::kF32, {4, 5});
  expect_invalid(c, "'lse'");
  c = valid_attention();
  c.tensors.erase("sinks");
  expect_invalid(c, "'sinks' is missing");
}

}  // namespace
}  // namespace driftcheck
