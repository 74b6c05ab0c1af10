// Storage, tensor views (strides, offsets, aliasing, bounds), and Case bookkeeping (clone keeps aliasing,
// signatures, op names).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "case_builders.hpp"
#include "driftcheck/reference/case.hpp"

namespace driftcheck {
namespace {

const DType kSmallFloats[] = {DType::kF16, DType::kBF16, DType::kF8E4M3FN, DType::kF8E4M3FNUZ,
                              DType::kF8E5M2};

TEST(Storage, EveryEncodingSurvivesStoreAndLoad) {
  for (const DType t : kSmallFloats) {
    const FloatFormat& f = *float_format(t);
    Storage s(t, 1);
    for (std::uint32_t code = 0; code < (1u << f.bits); ++code) {
      const double v = decode(f, code);
      s.store(0, v);
      ASSERT_EQ(s.load_bits(0), std::isnan(v) ? f.canonical_nan() : code) << dtype_name(t) << " " << code;
      s.store_bits(0, code);
      const double back = s.load(0);
      ASSERT_TRUE(back == v || (std::isnan(back) && std::isnan(v))) << dtype_name(t) << " " << code;
    }
  }
}

// Stores of doubles in a small format's normal range take a bit-trick path; every store must equal encode()'s
// single rounding from the double: random doubles in [-4, 4] (and floats), doubles of every binade around the
// format's range (subnormals, the normal range's ends, overflow), and exact ties between neighbours (which
// must round to even), in both overflow modes.
TEST(Storage, SmallFloatStoresRoundOnceFromDoubles) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> dist(-4.0, 4.0);
  for (const DType t : kSmallFloats) {
    const FloatFormat& f = *float_format(t);
    Storage s(t, 1);
    const auto check = [&](double x) {
      for (const Overflow ov : {Overflow::kIeee, Overflow::kSaturate}) {
        s.store(0, x, ov);
        ASSERT_EQ(s.load_bits(0), encode(f, x, ov)) << dtype_name(t) << " " << x;
      }
    };
    for (int i = 0; i < 20000; ++i) {
      check(i % 2 ? dist(rng) : static_cast<double>(static_cast<float>(dist(rng))));
      const int binade = static_cast<int>(rng() % 300) - 170;  // 2^-170 .. 2^129: past both ends of bf16
      const double mantissa = 1.0 + static_cast<double>(rng() >> 11) * 0x1p-53;
      check((rng() & 1 ? -1.0 : 1.0) * std::ldexp(mantissa, binade));
    }
    for (std::uint32_t code = 0; code + 1 < f.max_finite_code(); code += f.bits == 8 ? 1 : 97) {
      const double lo = decode(f, code), hi = decode(f, code + 1);
      check(lo + (hi - lo) / 2);  // a tie: to the even code
      check(-(lo + (hi - lo) / 2));
    }
    const double top = max_finite(f), top_ulp = top - decode(f, f.max_finite_code() - 1);
    for (const double x :
         {top, top + top_ulp / 2, std::nextafter(top + top_ulp / 2, 0.0), std::ldexp(1.0, 1 - f.bias),
          std::nextafter(std::ldexp(1.0, 1 - f.bias), 0.0), 0.0, -0.0})
      check(x);
  }
  Storage s(DType::kBF16, 1);
  s.store(0, 1.0 + 0x1p-8 + 0x1p-40);  // above the tie: up, although the float nearest to it is the tie
  EXPECT_EQ(s.load(0), 1.0 + 0x1p-7);
  s.store(0, 1e39, Overflow::kSaturate);
  EXPECT_EQ(s.load(0), 0x1.fep127);
}

TEST(Storage, Fp32Int32AndFp64) {
  Storage s(DType::kF32, 2);
  s.store(0, 0.1);
  EXPECT_EQ(s.load(0), static_cast<double>(0.1f));
  s.store(1, 1e300, Overflow::kSaturate);
  EXPECT_EQ(s.load(1), static_cast<double>(std::numeric_limits<float>::max()));
  Storage i(DType::kI32, 1);
  i.store(0, -7.0);
  EXPECT_EQ(i.load(0), -7.0);
  EXPECT_THROW(i.store(0, 1.5), InvalidArgument);
  EXPECT_THROW(i.store(0, 3e9), InvalidArgument);
  Storage d(DType::kF64, 1);
  d.store(0, 0.1);
  EXPECT_EQ(d.load(0), 0.1);
}

TEST(Storage, BatchAccessMatchesSingleAndChecksBounds) {
  Storage s(DType::kF16, 10);
  const std::vector<double> in{1.0, -2.5, 0.1};
  s.store_f64(1, 3, 3, in.data());  // elements 1, 4, 7
  std::vector<double> out(3);
  s.load_f64(1, 3, 3, out.data());
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(out[static_cast<std::size_t>(i)], round_to(DType::kF16, in[static_cast<std::size_t>(i)]));
  EXPECT_EQ(s.load(2), 0.0);
  EXPECT_THROW(s.load_f64(4, 3, 3, out.data()), InvalidArgument);  // 4, 7, 10: the last is outside
  EXPECT_THROW(s.store(-1, 0.0), InvalidArgument);
  EXPECT_THROW(s.load_bits(10), InvalidArgument);
}

// A run's last element is computed without int64 overflow: 4 * (2^62 + 1) is 4 modulo 2^64, and a run that
// wraps around like that must be refused, not read as if its stride were 1. A run of one element never takes
// its stride, whatever it is (found by fuzz_tensors: a view's dimension of extent 1 with stride ~6e18).
TEST(Storage, BatchAccessRefusesRunsThatOverflow) {
  Storage s(DType::kF64, 8);
  std::vector<double> v(5, 1.0);
  const std::int64_t wraps = (std::int64_t{1} << 62) + 1;
  EXPECT_THROW(s.load_f64(0, wraps, 5, v.data()), InvalidArgument);
  EXPECT_THROW(s.store_f64(0, wraps, 5, v.data()), InvalidArgument);
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  const double x = 2.5;
  s.store_f64(3, huge, 1, &x);
  s.load_f64(3, huge, 1, v.data());
  EXPECT_EQ(v[0], 2.5);
  EXPECT_EQ(s.load(3), 2.5);
}

TEST(Tensor, ZerosIsContiguous) {
  const Tensor t = Tensor::zeros(DType::kBF16, {2, 3, 4});
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.storage()->numel(), 24);
  EXPECT_EQ(t.describe(), "bf16[2, 3, 4] strides [12, 4, 1] offset 0");
  EXPECT_THROW(Tensor::zeros(DType::kF32, {2, -1}), InvalidArgument);
  EXPECT_EQ(Tensor::zeros(DType::kF32, {0, 5}).numel(), 0);
}

// A dimension of extent 1 may carry any stride (views read from tensors.bin files and worker frames may), and
// every access to such a view works; a view whose extent overflows int64 is refused, not wrapped into range.
TEST(Tensor, ViewExtentsNeverOverflow) {
  auto storage = std::make_shared<Storage>(DType::kBF16, 19);
  const std::int64_t huge =
      std::int64_t{5956778776759042372};  // fuzz_tensors' input: times 2 bytes overflows
  Tensor t = Tensor::view(storage, {1, 1}, {1, huge}, 9);
  t.copy_from(std::vector<double>{0.5});
  EXPECT_EQ(t.to_f64(), std::vector<double>{0.5});
  EXPECT_EQ(t.clone_contiguous().to_f64(), std::vector<double>{0.5});
  EXPECT_EQ(storage->load(9), 0.5);
  const std::int64_t wraps = (std::int64_t{1} << 62) + 1;  // 2 * wraps is negative in int64
  EXPECT_THROW(Tensor::view(storage, {3}, {wraps}, 0), InvalidArgument);
  EXPECT_THROW(Tensor::view(storage, {2, 3}, {huge, wraps}, 0), InvalidArgument);
}

TEST(Tensor, StridedViewWithOffset) {
  auto storage = std::make_shared<Storage>(DType::kF32, 40);
  // A transposed 3 x 4 view at offset 5: element (i, j) at 5 + i + 3 j.
  const Tensor t = Tensor::view(storage, {3, 4}, {1, 3}, 5);
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.index({2, 3}), 5 + 2 + 9);
  for (std::int64_t i = 0; i < 12; ++i) EXPECT_EQ(t.index_of_linear(i), 5 + i / 4 + 3 * (i % 4));
  std::vector<double> values(12);
  for (std::size_t i = 0; i < 12; ++i) values[i] = static_cast<double>(i);
  Tensor w = t;
  w.copy_from(values);
  EXPECT_EQ(t.to_f64(), values);
  EXPECT_EQ(storage->load(5 + 1 + 3 * 2), 6.0);  // (1, 2) is linear 6
  EXPECT_THROW((void)t.at({3, 0}), InvalidArgument);
  EXPECT_THROW((void)t.at({0}), InvalidArgument);
  EXPECT_THROW(w.copy_from(std::vector<double>(11)), InvalidArgument);
}

TEST(Tensor, ViewBoundsAreChecked) {
  auto storage = std::make_shared<Storage>(DType::kF16, 20);
  EXPECT_NO_THROW(Tensor::view(storage, {4, 5}, {5, 1}, 0));
  EXPECT_THROW(Tensor::view(storage, {4, 5}, {5, 1}, 1), InvalidArgument);  // last element at 20
  EXPECT_THROW(Tensor::view(storage, {4, 5}, {6, 1}, 0), InvalidArgument);
  EXPECT_THROW(Tensor::view(storage, {2}, {-1}, 5), InvalidArgument);
  EXPECT_THROW(Tensor::view(storage, {2}, {1}, -1), InvalidArgument);
  EXPECT_THROW(Tensor::view(storage, {2, 2}, {1}, 0), InvalidArgument);
  EXPECT_THROW(Tensor::view(nullptr, {1}, {1}, 0), InvalidArgument);
  EXPECT_NO_THROW(Tensor::view(storage, {0, 7}, {7, 1}, 20));  // empty views may sit at the end
  EXPECT_NO_THROW(Tensor::view(storage, {5}, {0}, 19));        // broadcast: stride 0
}

TEST(Tensor, TwoViewsAliasOneStorage) {
  auto storage = std::make_shared<Storage>(DType::kBF16, 16);
  Tensor a = Tensor::view(storage, {2, 4}, {8, 1}, 0);
  const Tensor b = Tensor::view(storage, {2, 4}, {8, 1}, 2);  // overlaps a's columns 2 and 3
  a.set({1, 3}, 5.0);
  EXPECT_EQ(b.at({1, 1}), 5.0);
  EXPECT_EQ(a.storage(), b.storage());
}

TEST(Tensor, PaddedHasRowStrideOffsetAndGuards) {
  const Tensor t = Tensor::padded(DType::kF16, {2, 3, 5}, 8, 3, 4);
  EXPECT_EQ(t.strides(), (Shape{24, 8, 1}));
  EXPECT_EQ(t.offset(), 7);
  // guard + offset + (1 * 24 + 2 * 8 + 4 + 1) + guard
  EXPECT_EQ(t.storage()->numel(), 4 + 3 + 45 + 4);
  EXPECT_EQ(Tensor::padded(DType::kF32, {6}, 6, 1, 2).storage()->numel(), 11);
  EXPECT_THROW(Tensor::padded(DType::kF32, {2, 5}, 4, 0, 0), InvalidArgument);
  EXPECT_THROW(Tensor::padded(DType::kF32, {}, 1, 0, 0), InvalidArgument);
}

TEST(Tensor, CloneContiguousCopiesBits) {
  Tensor t = Tensor::padded(DType::kF8E4M3FN, {3, 4}, 6, 1, 2);
  for (std::int64_t i = 0; i < 12; ++i)
    t.storage()->store_bits(t.index_of_linear(i), static_cast<std::uint64_t>(0x70 + i));
  const Tensor c = t.clone_contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.offset(), 0);
  EXPECT_NE(c.storage(), t.storage());
  for (std::int64_t i = 0; i < 12; ++i)
    EXPECT_EQ(c.storage()->load_bits(i), static_cast<std::uint64_t>(0x70 + i));
  t.set({0, 0}, 1.0);
  EXPECT_NE(c.at({0, 0}), 1.0);
}

TEST(Case, TensorLookupNamesTheMissingTensor) {
  Case c;
  c.op = OpKind::kConcat;
  try {
    (void)c.tensor("a");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "concat: case has no tensor 'a'");
  }
}

// rmsnorm in place: y aliases x, and a spare tensor aliases nothing. The clone must keep y on x's storage
// copy.
TEST(Case, CloneKeepsAliasingAndCopiesStorages) {
  Case c = builders::rmsnorm_case(2, 4, DType::kF32, RmsNormParams{}, 9, {1, 2, 3});
  c.tensors["y"] = c.tensor("x");
  c.tensors["unused"] = Tensor();
  c.seed = 5;
  c.index = 6;
  Case d = c.clone();
  EXPECT_EQ(d.seed, 5u);
  EXPECT_EQ(d.index, 6u);
  EXPECT_FALSE(d.tensor("unused").defined());
  EXPECT_EQ(d.tensor("x").storage(), d.tensor("y").storage());
  EXPECT_NE(d.tensor("x").storage(), c.tensor("x").storage());
  EXPECT_EQ(d.tensor("x").describe(), c.tensor("x").describe());
  EXPECT_EQ(d.tensor("x").storage()->bytes, c.tensor("x").storage()->bytes);  // guard bands included
  d.tensor("y").set({1, 1}, 42.0);
  EXPECT_EQ(d.tensor("x").at({1, 1}), 42.0);
  EXPECT_NE(c.tensor("x").at({1, 1}), 42.0);
}

TEST(Case, SignaturesListOptionalTensorsWhenPresent) {
  const Case plain = builders::rmsnorm_case(1, 4, DType::kF32, RmsNormParams{}, 1);
  EXPECT_EQ(op_signature(plain).inputs, (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(op_signature(plain).outputs, (std::vector<std::string>{"y"}));
  const Case fused =
      builders::rmsnorm_case(1, 4, DType::kF32, RmsNormParams{1e-6, WeightMode::kPlain, true}, 1);
  EXPECT_EQ(op_signature(fused).outputs, (std::vector<std::string>{"y", "residual"}));
  builders::AttentionSpec s;
  s.params.has_sinks = true;
  s.query_lens = {1};
  s.seq_lens = {3};
  const OpSignature a = op_signature(builders::attention_case(s, 1));
  EXPECT_EQ(a.inputs.back(), "sinks");
  EXPECT_EQ(a.outputs, (std::vector<std::string>{"o", "lse"}));
}

TEST(Case, OpNamesRoundTrip) {
  for (const OpKind op : kAllOps) {
    OpKind parsed = OpKind::kConcat;
    ASSERT_TRUE(parse_op(op_name(op), &parsed));
    EXPECT_EQ(parsed, op);
  }
  OpKind unused = OpKind::kConcat;
  EXPECT_FALSE(parse_op("rms_norm", &unused));
  EXPECT_EQ(op_name(OpKind::kDualRmsNormCat), "dual_rmsnorm_cat");
}

}  // namespace
}  // namespace driftcheck
