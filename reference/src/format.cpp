#include "driftcheck/reference/format.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <utility>

namespace driftcheck {
namespace {

// The binade structure of a float dtype: normal values m * 2^(e - man_bits) with e in [emin, emax],
// subnormals at the fixed quantum 2^(emin - man_bits).
struct Binades {
  int man_bits;
  int emin;
  int emax;
  double max_finite;
  bool has_inf;
};

Binades make_binades(DType t) {
  switch (t) {
    case DType::kF64:
      return {52, -1022, 1023, DBL_MAX, true};
    case DType::kF32:
      return {23, -126, 127, static_cast<double>(FLT_MAX), true};
    case DType::kI32:
      return {0, 0, 0, 0, false};  // not a float format: never asked for its binades
    default: {
      const FloatFormat& f = *float_format(t);
      return {f.man_bits, 1 - f.bias, f.max_exp_field() - f.bias, max_finite(f), f.has_inf};
    }
  }
}

// Computed once per dtype: ulp() runs for every element of every tolerance.
const Binades& binades(DType t) {
  static const std::array<Binades, 8> table = [] {
    std::array<Binades, 8> b{};
    for (DType d : {DType::kF64, DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3FN, DType::kF8E4M3FNUZ,
                    DType::kF8E5M2, DType::kI32})
      b.at(static_cast<std::size_t>(d)) = make_binades(d);
    return b;
  }();
  return table.at(static_cast<std::size_t>(t));
}

// 2^k for an exponent k of a normal double: its bits, as std::ldexp(1.0, k) gives them.
double pow2(int k) {
  if (k < -1022 || k > 1023) return std::ldexp(1.0, k);
  return std::bit_cast<double>(static_cast<std::uint64_t>(k + 1023) << 52);
}

// Exponent of the binade holding |x| (finite, non-zero), clamped to the format's exponent range: the exponent
// field of a normal double, frexp's for a subnormal one.
int binade_exponent(const Binades& b, double a) {
  const auto field = static_cast<int>((std::bit_cast<std::uint64_t>(a) >> 52) & 0x7ff);
  int e = field - 1023;
  if (field == 0) {
    (void)std::frexp(a, &e);
    --e;
  }
  return std::clamp(e, b.emin, b.emax);
}

double quantum(const Binades& b, double a) {
  const int e = a == 0.0 || std::isinf(a) ? (a == 0.0 ? b.emin : b.emax) : binade_exponent(b, a);
  return pow2(e - b.man_bits);
}

// Smallest format value > a, for 0 <= a < max finite. Values of a binade are k * q, so the next one up is
// (floor(a / q) + 1) * q, which is 2^(e+1) at the binade's end (a format value too).
double next_up_nonneg(const Binades& b, double a) {
  const double q = quantum(b, a);
  return (std::floor(a / q) + 1.0) * q;
}

// Largest format value < a, for 0 < a <= max finite. Only at a = 2^e (e > emin) does it fall into the binade
// below, whose quantum is half as large.
double next_down_pos(const Binades& b, double a) {
  const double q = quantum(b, a);
  const int e = binade_exponent(b, a);
  if (e > b.emin && a == pow2(e)) return a - 0.5 * q;
  return (std::ceil(a / q) - 1.0) * q;
}

double next_up_impl(DType t, double x) {
  const Binades& b = binades(t);
  if (x >= b.max_finite) return b.has_inf ? INFINITY : b.max_finite;
  if (x < -b.max_finite) return -b.max_finite;
  if (x >= 0.0) return next_up_nonneg(b, x);
  return -next_down_pos(b, -x);
}

}  // namespace

double ulp(DType t, double x) {
  if (std::isnan(x)) return x;
  if (t == DType::kI32) return 1.0;
  return quantum(binades(t), std::fabs(x));
}

double next_up(DType t, double x) {
  if (std::isnan(x)) return x;
  if (t == DType::kI32) return std::floor(x) + 1.0;
  if (t == DType::kF64) return std::nextafter(x, INFINITY);
  return next_up_impl(t, x);
}

double next_down(DType t, double x) {
  if (std::isnan(x)) return x;
  if (t == DType::kI32) return std::ceil(x) - 1.0;
  if (t == DType::kF64) return std::nextafter(x, -INFINITY);
  return -next_up_impl(t, -x);
}

namespace {
constexpr std::array<std::pair<DType, std::string_view>, 8> kDTypeNames{{
    {DType::kF64, "fp64"},
    {DType::kF32, "fp32"},
    {DType::kF16, "fp16"},
    {DType::kBF16, "bf16"},
    {DType::kF8E4M3FN, "fp8_e4m3fn"},
    {DType::kF8E4M3FNUZ, "fp8_e4m3fnuz"},
    {DType::kF8E5M2, "fp8_e5m2"},
    {DType::kI32, "i32"},
}};
}  // namespace

std::string_view dtype_name(DType t) {
  for (const auto& [dt, name] : kDTypeNames) {
    if (dt == t) return name;
  }
  return "unknown";
}

bool parse_dtype(std::string_view name, DType* out) {
  for (const auto& [dt, n] : kDTypeNames) {
    if (n == name) {
      *out = dt;
      return true;
    }
  }
  return false;
}

}  // namespace driftcheck
