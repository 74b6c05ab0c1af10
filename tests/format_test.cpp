// Numeric formats: every 8- and 16-bit encoding of each small format, and fp32 -> format rounding checked
// against an independent nearest-value search over a table of the format's values built from the formats'
// published rules (not from decode()).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "driftcheck/reference/format.hpp"

namespace driftcheck {
namespace {

struct FormatCase {
  DType dtype;
  int bits;
  int exp_bits;
  int man_bits;
  int bias;
  double max;  // largest finite value, from the format's specification
  double min_subnormal;
  int nan_codes;  // how many encodings are NaN
  bool has_inf;
};

const FormatCase kFormats[] = {
    {DType::kF16, 16, 5, 10, 15, 65504.0, 0x1p-24, 2 * 1023, true},
    {DType::kBF16, 16, 8, 7, 127, 0x1.fep127, 0x1p-133, 2 * 127, true},
    {DType::kF8E4M3FN, 8, 4, 3, 7, 448.0, 0x1p-9, 2, false},
    {DType::kF8E4M3FNUZ, 8, 4, 3, 8, 240.0, 0x1p-10, 1, false},
    {DType::kF8E5M2, 8, 5, 2, 15, 57344.0, 0x1p-16, 6, true},
};

std::string name_of(const testing::TestParamInfo<FormatCase>& info) {
  return std::string(dtype_name(info.param.dtype));
}

// Whether a code is NaN, by each format's rule (written here independently of FloatFormat).
bool is_nan_code(const FormatCase& fc, std::uint32_t code) {
  const std::uint32_t mag = code & ((1u << (fc.bits - 1)) - 1u);
  const std::uint32_t top = ((1u << fc.exp_bits) - 1u) << fc.man_bits;
  switch (fc.dtype) {
    case DType::kF8E4M3FN:
      return mag == 0x7fu;
    case DType::kF8E4M3FNUZ:
      return code == 0x80u;
    default:
      return mag > top;
  }
}

// A positive finite value of the format with its code; `code` of the virtual value one ulp above the max is
// max_code + 1 (its parity decides the tie at the overflow threshold).
struct Entry {
  double value;
  std::uint32_t code;
};

// All non-negative finite values in increasing order, then the virtual value max + top ulp.
std::vector<Entry> value_table(const FormatCase& fc) {
  std::vector<Entry> t;
  for (std::uint32_t code = 0; code < (1u << (fc.bits - 1)); ++code) {
    const int e = static_cast<int>(code >> fc.man_bits);
    const double m = static_cast<double>(code & ((1u << fc.man_bits) - 1u));
    if (is_nan_code(fc, code) || (fc.has_inf && e == (1 << fc.exp_bits) - 1)) continue;
    const double scale = std::pow(2.0, (e == 0 ? 1 : e) - fc.bias - fc.man_bits);
    t.push_back({(e == 0 ? m : m + std::pow(2.0, fc.man_bits)) * scale, code});
  }
  const Entry top = t.back();
  t.push_back({top.value + (top.value - t[t.size() - 2].value), top.code + 1});
  return t;
}

// Round-to-nearest-even by search: the encoding `encode` must produce for x.
std::uint32_t nearest_code(const FormatCase& fc, const std::vector<Entry>& table, double x, Overflow ov) {
  const std::uint32_t sign = std::signbit(x) ? 1u << (fc.bits - 1) : 0u;
  const std::uint32_t max_code = table[table.size() - 2].code;
  const std::uint32_t inf_code = ((1u << fc.exp_bits) - 1u) << fc.man_bits;
  const std::uint32_t overflow = ov == Overflow::kSaturate      ? sign | max_code
                                 : fc.has_inf                   ? sign | inf_code
                                 : fc.dtype == DType::kF8E4M3FN ? sign | 0x7fu
                                                                : 0x80u;
  const double a = std::fabs(x);
  if (a > table.back().value) return overflow;
  const auto hi =
      std::lower_bound(table.begin(), table.end(), a, [](const Entry& e, double v) { return e.value < v; });
  Entry pick = *hi;
  if (hi->value != a) {
    const Entry lo = *(hi - 1);
    const double mid = 0.5 * (lo.value + hi->value);  // exact: one bit more than the format's
    if (a < mid || (a == mid && (lo.code & 1u) == 0)) pick = lo;
  }
  if (pick.code == table.back().code) return overflow;
  if (pick.code == 0 && fc.dtype == DType::kF8E4M3FNUZ) return 0;
  return sign | pick.code;
}

class FormatTest : public testing::TestWithParam<FormatCase> {
 protected:
  const FloatFormat& format() const { return *float_format(GetParam().dtype); }
  std::uint32_t num_codes() const { return 1u << GetParam().bits; }
};

TEST_P(FormatTest, LayoutMatchesSpecification) {
  const FormatCase& fc = GetParam();
  EXPECT_EQ(format().bits, fc.bits);
  EXPECT_EQ(format().exp_bits, fc.exp_bits);
  EXPECT_EQ(format().man_bits, fc.man_bits);
  EXPECT_EQ(format().bias, fc.bias);
  EXPECT_EQ(dtype_size(fc.dtype) * 8, fc.bits);
  EXPECT_EQ(max_finite(format()), fc.max);
  EXPECT_EQ(decode(format(), 1), fc.min_subnormal);
  EXPECT_EQ(unit_roundoff(fc.dtype), 0.5 * ulp(fc.dtype, 1.0));
}

TEST_P(FormatTest, EveryEncodingRoundTrips) {
  const FormatCase& fc = GetParam();
  int nans = 0;
  int infs = 0;
  for (std::uint32_t code = 0; code < num_codes(); ++code) {
    const double v = decode(format(), code);
    ASSERT_EQ(std::isnan(v), is_nan_code(fc, code)) << code;
    if (std::isnan(v)) {
      ++nans;
      EXPECT_EQ(encode(format(), v), format().canonical_nan()) << code;
      continue;
    }
    infs += std::isinf(v);
    EXPECT_EQ(encode(format(), v), code) << "code " << code << " value " << v;
    EXPECT_EQ(encode(format(), v, Overflow::kSaturate),
              std::isinf(v) ? encode(format(), std::copysign(fc.max, v)) : code);
    EXPECT_EQ(round_to(fc.dtype, v), v);
  }
  EXPECT_EQ(nans, fc.nan_codes);
  EXPECT_EQ(infs, fc.has_inf ? 2 : 0);
  EXPECT_TRUE(is_nan_code(fc, format().canonical_nan()));
}

TEST_P(FormatTest, EncodingsAreOrderedByValue) {
  const std::uint32_t half = num_codes() / 2;
  for (const std::uint32_t sign : {0u, half}) {
    double prev = 0.0;  // magnitude 0 is +-0, or fnuz's NaN on the negative side
    for (std::uint32_t mag = 1; mag < half; ++mag) {
      const double v = decode(format(), sign | mag);
      if (std::isnan(v)) continue;
      EXPECT_TRUE(sign == 0 ? v > prev : v < prev) << "code " << (sign | mag);
      prev = v;
    }
  }
}

TEST_P(FormatTest, NoNegativeZeroOnlyInFnuz) {
  const FormatCase& fc = GetParam();
  const std::uint32_t neg_zero = encode(format(), -0.0);
  if (fc.dtype == DType::kF8E4M3FNUZ) {
    EXPECT_EQ(neg_zero, 0u);
    EXPECT_EQ(encode(format(), -0x1p-30), 0u);  // underflow of a negative value
  } else {
    EXPECT_EQ(neg_zero, 1u << (fc.bits - 1));
    EXPECT_TRUE(std::signbit(round_to(fc.dtype, -0x1p-200)));
  }
}

TEST_P(FormatTest, UlpAndNeighboursAgreeWithTheValueTable) {
  const FormatCase& fc = GetParam();
  const std::vector<Entry> table = value_table(fc);
  for (std::size_t i = 0; i + 2 < table.size(); ++i) {
    const double v = table[i].value;
    const double w = table[i + 1].value;
    EXPECT_EQ(next_up(fc.dtype, v), w);
    EXPECT_EQ(next_down(fc.dtype, w), v);
    EXPECT_EQ(next_down(fc.dtype, -v), -w);
    EXPECT_EQ(ulp(fc.dtype, v), w - v) << v;
    EXPECT_EQ(ulp(fc.dtype, -v), w - v);
    const double mid = 0.5 * (v + w);  // not a format value: the neighbours are v below and w above
    EXPECT_EQ(next_up(fc.dtype, mid), w);
    EXPECT_EQ(next_down(fc.dtype, mid), v);
    EXPECT_EQ(ulp(fc.dtype, mid), w - v);
  }
  EXPECT_EQ(next_down(fc.dtype, 0.0), -fc.min_subnormal);
  EXPECT_EQ(next_up(fc.dtype, -0.0), fc.min_subnormal);
  const double beyond = fc.has_inf ? INFINITY : fc.max;
  EXPECT_EQ(next_up(fc.dtype, fc.max), beyond);
  EXPECT_EQ(next_down(fc.dtype, -fc.max), -beyond);
  EXPECT_EQ(next_down(fc.dtype, 2.0 * fc.max), fc.max);
  EXPECT_EQ(ulp(fc.dtype, 4.0 * fc.max), ulp(fc.dtype, fc.max));
  EXPECT_TRUE(std::isnan(next_up(fc.dtype, NAN)));
  EXPECT_TRUE(std::isnan(ulp(fc.dtype, NAN)));
  // Below the format's smallest subnormal, subnormal doubles included (ulp reads the exponent from the bits
  // of a normal double and asks frexp for a subnormal one): the subnormal quantum.
  for (const double tiny : {0x1p-1070, 0x1p-1074, 0x1.8p-1023, 0x1p-1022, 1e-200})
    EXPECT_EQ(ulp(fc.dtype, tiny), fc.min_subnormal) << tiny;
}

TEST(Ulp, Fp64AndFp32AcrossTheirRanges) {
  EXPECT_EQ(ulp(DType::kF64, 1.0), 0x1p-52);
  EXPECT_EQ(ulp(DType::kF64, -1.5), 0x1p-52);
  EXPECT_EQ(ulp(DType::kF64, 0x1p-1022), 0x1p-1074);
  EXPECT_EQ(ulp(DType::kF64, 0x1p-1070), 0x1p-1074) << "a subnormal double";
  EXPECT_EQ(ulp(DType::kF64, 0.0), 0x1p-1074);
  EXPECT_EQ(ulp(DType::kF64, DBL_MAX), 0x1p971);
  EXPECT_EQ(ulp(DType::kF64, INFINITY), 0x1p971);
  EXPECT_EQ(ulp(DType::kF32, 1.0), 0x1p-23);
  EXPECT_EQ(ulp(DType::kF32, 0x1p-140), 0x1p-149);
  EXPECT_EQ(ulp(DType::kF32, 0x1p-1070), 0x1p-149);
  EXPECT_EQ(ulp(DType::kF32, 0x1p200), 0x1p104) << "beyond fp32's range: its top binade's quantum";
  for (const double x : {3.0, 1e-30, 1e30, 0x1.fffffep126})
    EXPECT_EQ(ulp(DType::kF32, x), std::nextafter(static_cast<float>(x), INFINITY) - static_cast<float>(x))
        << x;
}

// Inputs that decide a rounding: each format value, every midpoint (tie) between neighbours, and the floats
// one ulp either side of both; the virtual value above the max gives the overflow threshold.
std::vector<float> decisive_floats(const std::vector<Entry>& table) {
  std::vector<float> out;
  for (std::size_t i = 0; i + 1 < table.size(); ++i) {
    const double mid = 0.5 * (table[i].value + table[i + 1].value);
    const auto fm = static_cast<float>(mid);
    EXPECT_EQ(static_cast<double>(fm), mid) << "midpoints of <= 16-bit formats are floats";
    for (const float f : {static_cast<float>(table[i].value), fm}) {
      out.insert(out.end(), {f, std::nextafter(f, -INFINITY), std::nextafter(f, INFINITY)});
    }
  }
  const auto top = static_cast<float>(table.back().value);
  out.insert(out.end(),
             {top, std::nextafter(top, INFINITY), 2.0f * top, FLT_MAX, FLT_MIN, 0x1p-149f, INFINITY});
  return out;
}

TEST_P(FormatTest, Fp32RoundsToNearestEvenLikeATableSearch) {
  const FormatCase& fc = GetParam();
  const std::vector<Entry> table = value_table(fc);
  std::size_t checked = 0;
  for (const float f : decisive_floats(table)) {
    for (const double x : {static_cast<double>(f), -static_cast<double>(f)}) {
      for (const Overflow ov : {Overflow::kIeee, Overflow::kSaturate}) {
        const std::uint32_t want = nearest_code(fc, table, x, ov);
        ASSERT_EQ(encode(format(), x, ov), want)
            << "x = " << x << " saturate " << (ov == Overflow::kSaturate);
        const double got = round_to(fc.dtype, x, ov);
        ASSERT_TRUE(got == decode(format(), want) || (std::isnan(got) && is_nan_code(fc, want))) << x;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 4 * table.size());
  EXPECT_EQ(encode(format(), NAN), format().canonical_nan());
  EXPECT_EQ(encode(format(), -NAN, Overflow::kSaturate), format().canonical_nan());
}

// Doubles that are not floats round once from the double: x just above a tie must round up even where
// rounding through float would land exactly on the tie and go to even (down).
TEST_P(FormatTest, DoublesRoundOnceNotThroughFloat) {
  const FormatCase& fc = GetParam();
  const std::vector<Entry> table = value_table(fc);
  for (std::size_t i = 1; i + 2 < table.size(); i += 3) {
    const double mid = 0.5 * (table[i].value + table[i + 1].value);
    const double above = mid + std::ldexp(mid, -40);  // below float resolution of the tie
    const double below = mid - std::ldexp(mid, -40);
    EXPECT_EQ(round_to(fc.dtype, above), table[i + 1].value);
    EXPECT_EQ(round_to(fc.dtype, below), table[i].value);
  }
}

INSTANTIATE_TEST_SUITE_P(SmallFormats, FormatTest, testing::ValuesIn(kFormats), name_of);

TEST(Format, SpecialValues) {
  EXPECT_EQ(encode(kFormatE4M3FN, 448.0), 0x7eu);
  EXPECT_EQ(encode(kFormatE4M3FN, 464.0), 0x7eu);  // the tie above the max goes to the even 448
  EXPECT_EQ(encode(kFormatE4M3FN, 465.0), 0x7fu);  // overflow: NaN, no infinity
  EXPECT_EQ(encode(kFormatE4M3FN, -1e9), 0xffu);
  EXPECT_EQ(encode(kFormatE4M3FN, INFINITY, Overflow::kSaturate), 0x7eu);
  EXPECT_EQ(encode(kFormatE4M3FNUZ, 240.0), 0x7fu);
  EXPECT_EQ(encode(kFormatE4M3FNUZ, 248.0), 0x80u);  // tie above the odd max overflows to the one NaN
  EXPECT_EQ(encode(kFormatE4M3FNUZ, -248.0, Overflow::kSaturate), 0xffu);
  EXPECT_EQ(encode(kFormatE5M2, 57344.0), 0x7bu);
  EXPECT_EQ(encode(kFormatE5M2, 61440.0), 0x7cu);  // tie above the odd max: +inf
  EXPECT_EQ(encode(kFormatE5M2, -61440.0, Overflow::kSaturate), 0xfbu);
  EXPECT_EQ(encode(kFormatF16, 65519.99), 0x7bffu);
  EXPECT_EQ(encode(kFormatF16, 65520.0), 0x7c00u);
  EXPECT_EQ(encode(kFormatBF16, 1.0 + 0x1p-8), 0x3f80u);  // tie to even
  EXPECT_EQ(encode(kFormatBF16, 1.0 + 3 * 0x1p-8), 0x3f82u);
  EXPECT_EQ(round_to(DType::kF32, 1e39), INFINITY);
  EXPECT_EQ(round_to(DType::kF32, -1e39, Overflow::kSaturate), -FLT_MAX);
  EXPECT_EQ(round_to(DType::kF32, -INFINITY, Overflow::kSaturate), -FLT_MAX);
  EXPECT_EQ(round_to(DType::kF64, 0.1), 0.1);
}

TEST(Format, Fp32AndFp64Neighbours) {
  EXPECT_EQ(next_up(DType::kF32, 1.0), 1.0 + 0x1p-23);
  EXPECT_EQ(next_down(DType::kF32, 1.0), 1.0 - 0x1p-24);
  EXPECT_EQ(ulp(DType::kF32, 1.5), 0x1p-23);
  EXPECT_EQ(ulp(DType::kF32, 0.0), 0x1p-149);
  EXPECT_EQ(next_up(DType::kF32, FLT_MAX), INFINITY);
  EXPECT_EQ(next_up(DType::kF32, 1.0 + 0x1p-30), 1.0 + 0x1p-23);  // x need not be a float
  EXPECT_EQ(next_down(DType::kF32, 1.0 + 0x1p-30), 1.0);
  EXPECT_EQ(next_up(DType::kF64, 1.0), 1.0 + 0x1p-52);
  EXPECT_EQ(ulp(DType::kF64, 1.0), 0x1p-52);
  EXPECT_EQ(ulp(DType::kF64, DBL_MAX), 0x1p971);
  EXPECT_EQ(next_up(DType::kI32, 2.5), 3.0);
  EXPECT_EQ(next_down(DType::kI32, 3.0), 2.0);
}

TEST(Format, DTypeNamesRoundTrip) {
  for (const DType t : {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3FN,
                        DType::kF8E4M3FNUZ, DType::kF8E5M2, DType::kI32}) {
    DType parsed = DType::kF64;
    ASSERT_TRUE(parse_dtype(dtype_name(t), &parsed)) << dtype_name(t);
    EXPECT_EQ(parsed, t);
  }
  DType unused = DType::kF64;
  EXPECT_FALSE(parse_dtype("float8", &unused));
  EXPECT_EQ(dtype_name(DType::kF8E4M3FNUZ), "fp8_e4m3fnuz");
}

bool same_bits(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

TEST(Format, RoundBf16EqualsRoundToOnDecisiveFloats) {
  const std::vector<Entry> table = value_table(kFormats[1]);
  for (const float f : decisive_floats(table)) {
    for (const float x : {f, -f}) {
      ASSERT_TRUE(same_bits(round_bf16(x), static_cast<float>(round_to(DType::kBF16, x)))) << x;
    }
  }
  EXPECT_TRUE(same_bits(round_bf16(-NAN), static_cast<float>(round_to(DType::kBF16, NAN))));
}

// A stride prime to 2^32 walks every exponent, mantissa pattern and sign, NaN payloads included.
TEST(Format, RoundBf16EqualsRoundToOnAStrideThroughAllFloats) {
  constexpr std::uint64_t kStride = 257;  // ~17M floats: under a second at -O2, a few under sanitizers
  std::uint64_t checked = 0;
  for (std::uint64_t bits = 0; bits < (1ull << 32); bits += kStride, ++checked) {
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    const float want = static_cast<float>(round_to(DType::kBF16, x));
    if (!same_bits(round_bf16(x), want)) FAIL() << "bits " << bits;
  }
  EXPECT_EQ(checked, (1ull << 32) / kStride + 1);
}

}  // namespace
}  // namespace driftcheck
