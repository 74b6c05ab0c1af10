// Numeric storage formats and exact conversions between them and double/float.
//
// Every conversion rounds to nearest, ties to even, once, from the double it is given (no double rounding
// through float). Each format keeps its own special-value rules:
//   fp16, bf16, e5m2 : IEEE-style, +-inf and NaN in the top exponent.
//   e4m3fn           : no infinities; only S.1111.111 is NaN, so the top exponent holds finite values; max
//   448. e4m3fnuz         : no infinities, no negative zero; the single NaN is 0x80 (the "-0" encoding); bias
//   8, max 240.
// Overflow (a value whose rounded magnitude exceeds the format's max finite, rounding as if the exponent were
// unbounded, so e4m3fn's 464 = 448 + half an ulp still rounds to the even 448) follows `Overflow`:
//   kIeee     : +-inf where the format has infinities, else NaN (what torch's `.to(float8_*)` does);
//   kSaturate : +-max finite, infinities included (what hardware `cvt.satfinite` and vLLM's clamped fp8
//               quantisation do).
// A NaN input always gives the format's canonical NaN (quiet, positive; fnuz 0x80): payloads are not kept.
// The functions are header-only, allocation- and exception-free, and marked DC_HD so device kernels and host
// twins share one definition of each rounding.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define DC_HD __host__ __device__
#else
#define DC_HD
#endif

namespace driftcheck {

enum class DType : std::uint8_t { kF64, kF32, kF16, kBF16, kF8E4M3FN, kF8E4M3FNUZ, kF8E5M2, kI32 };
enum class Overflow : std::uint8_t { kIeee, kSaturate };

// A binary floating-point format of at most 16 bits: 1 sign bit, exp_bits, man_bits.
struct FloatFormat {
  int bits;
  int exp_bits;
  int man_bits;
  int bias;
  bool has_inf;       // top exponent with zero mantissa is +-inf, non-zero mantissa NaN (IEEE style)
  bool nan_all_ones;  // e4m3fn: only exponent and mantissa all ones is NaN; no infinities
  bool fnuz;          // the negative-zero encoding is the one NaN; no infinities, no -0

  DC_HD constexpr std::uint32_t sign_mask() const { return 1u << (bits - 1); }
  DC_HD constexpr std::uint32_t exp_mask() const { return (1u << exp_bits) - 1u; }
  DC_HD constexpr std::uint32_t man_mask() const { return (1u << man_bits) - 1u; }
  DC_HD constexpr int max_exp_field() const {  // largest exponent field that holds finite values
    return has_inf ? static_cast<int>(exp_mask()) - 1 : static_cast<int>(exp_mask());
  }
  DC_HD constexpr std::uint32_t max_man_at_top() const {  // largest mantissa field at max_exp_field()
    return nan_all_ones ? man_mask() - 1u : man_mask();
  }
  DC_HD constexpr std::uint32_t canonical_nan() const {
    if (fnuz) return sign_mask();
    if (nan_all_ones) return (exp_mask() << man_bits) | man_mask();
    return (exp_mask() << man_bits) | (1u << (man_bits - 1));  // quiet NaN
  }
  DC_HD constexpr std::uint32_t max_finite_code() const {
    return (static_cast<std::uint32_t>(max_exp_field()) << man_bits) | max_man_at_top();
  }
};

// Format of a small float dtype by value, usable in device code (which cannot take the address of the host
// constants above); {} (bits == 0) for fp64, fp32 and int32.
DC_HD constexpr FloatFormat float_format_of(DType t) {
  switch (t) {
    case DType::kF16:
      return {16, 5, 10, 15, true, false, false};
    case DType::kBF16:
      return {16, 8, 7, 127, true, false, false};
    case DType::kF8E4M3FN:
      return {8, 4, 3, 7, false, true, false};
    case DType::kF8E4M3FNUZ:
      return {8, 4, 3, 8, false, false, true};
    case DType::kF8E5M2:
      return {8, 5, 2, 15, true, false, false};
    default:
      return {};
  }
}

inline constexpr FloatFormat kFormatF16 = float_format_of(DType::kF16);
inline constexpr FloatFormat kFormatBF16 = float_format_of(DType::kBF16);
inline constexpr FloatFormat kFormatE4M3FN = float_format_of(DType::kF8E4M3FN);
inline constexpr FloatFormat kFormatE4M3FNUZ = float_format_of(DType::kF8E4M3FNUZ);
inline constexpr FloatFormat kFormatE5M2 = float_format_of(DType::kF8E5M2);

// Format of a small float dtype; nullptr for fp64, fp32 and int32 (host code).
constexpr const FloatFormat* float_format(DType t) {
  switch (t) {
    case DType::kF16:
      return &kFormatF16;
    case DType::kBF16:
      return &kFormatBF16;
    case DType::kF8E4M3FN:
      return &kFormatE4M3FN;
    case DType::kF8E4M3FNUZ:
      return &kFormatE4M3FNUZ;
    case DType::kF8E5M2:
      return &kFormatE5M2;
    default:
      return nullptr;
  }
}

DC_HD constexpr int dtype_size(DType t) {
  switch (t) {
    case DType::kF64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    default:
      return 1;
  }
}

DC_HD constexpr bool is_float(DType t) {
  return t != DType::kI32;
}
DC_HD constexpr bool is_fp8(DType t) {
  return t == DType::kF8E4M3FN || t == DType::kF8E4M3FNUZ || t == DType::kF8E5M2;
}

// Exact value of an encoding (every small-format value is a double). Bits above f.bits must be zero.
DC_HD inline double decode(FloatFormat f, std::uint32_t code) {
  const bool neg = (code & f.sign_mask()) != 0;
  const std::uint32_t e = (code >> f.man_bits) & f.exp_mask();
  const std::uint32_t m = code & f.man_mask();
  if (f.fnuz && code == f.sign_mask()) return std::numeric_limits<double>::quiet_NaN();
  if (f.has_inf && e == f.exp_mask()) {
    if (m != 0) return std::numeric_limits<double>::quiet_NaN();
    return neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  if (f.nan_all_ones && e == f.exp_mask() && m == f.man_mask())
    return std::numeric_limits<double>::quiet_NaN();
  const double v = e == 0 ? std::ldexp(static_cast<double>(m), 1 - f.bias - f.man_bits)
                          : std::ldexp(static_cast<double>(m | (1u << f.man_bits)),
                                       static_cast<int>(e) - f.bias - f.man_bits);
  return neg ? -v : v;
}

DC_HD inline double max_finite(FloatFormat f) {
  return decode(f, f.max_finite_code());
}

// Round-to-nearest-even encoding of x, rounded once.
DC_HD inline std::uint32_t encode(FloatFormat f, double x, Overflow ov = Overflow::kIeee) {
  if (std::isnan(x)) return f.canonical_nan();
  const std::uint32_t sign = std::signbit(x) ? f.sign_mask() : 0u;
  // Without infinities an overflow is NaN; e4m3fn keeps the sign on it (S.1111.111, as torch does), fnuz has
  // one NaN only.
  const std::uint32_t overflow_code = ov == Overflow::kSaturate ? (sign | f.max_finite_code())
                                      : f.has_inf               ? (sign | (f.exp_mask() << f.man_bits))
                                      : f.nan_all_ones          ? (sign | f.canonical_nan())
                                                                : f.canonical_nan();
  const double a = std::fabs(x);
  if (std::isinf(a)) return overflow_code;
  if (a == 0.0) return f.fnuz ? 0u : sign;
  int e = 0;
  (void)std::frexp(a, &e);
  e -= 1;  // a in [2^e, 2^(e+1))
  const int emin = 1 - f.bias;
  if (e < emin) e = emin;                               // subnormal range: fixed quantum
  double r = std::rint(std::ldexp(a, f.man_bits - e));  // rint rounds half to even in the default mode
  const double implicit = std::ldexp(1.0, f.man_bits);
  if (r >= 2.0 * implicit) {  // rounding carried into the next binade
    r *= 0.5;
    e += 1;
  }
  if (r == 0.0) return f.fnuz ? 0u : sign;  // underflow to zero keeps the sign where -0 exists
  const bool normal = r >= implicit;
  const int exp_field = normal ? e + f.bias : 0;
  const std::uint32_t man = static_cast<std::uint32_t>(normal ? r - implicit : r);
  if (exp_field > f.max_exp_field() || (exp_field == f.max_exp_field() && man > f.max_man_at_top()))
    return overflow_code;
  return sign | (static_cast<std::uint32_t>(exp_field) << f.man_bits) | man;
}

// Round x to the format and return the value (x rounded once). fp32/fp64 round natively; int32 is rejected by
// the caller (see Tensor).
DC_HD inline double round_to(DType t, double x, Overflow ov = Overflow::kIeee) {
  if (t == DType::kF64) return x;
  if (t == DType::kF32) {
    const double r = static_cast<double>(static_cast<float>(x));  // IEEE binary32: RNE, overflow to +-inf
    if (ov == Overflow::kSaturate && std::isinf(r)) {
      return std::copysign(static_cast<double>(std::numeric_limits<float>::max()), x);
    }
    return r;
  }
  const FloatFormat f = float_format_of(t);
  return decode(f, encode(f, x, ov));
}

// std::bit_cast for host and device code alike (nvcc compiles the kernels as C++17, where it is missing).
template <class To, class From>
DC_HD inline To bits_as(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  __builtin_memcpy(&to, &from, sizeof(To));
  return to;
}

// Fast fp32 -> bf16 -> fp32 rounding (RNE, overflow to +-inf, every NaN to the canonical quiet NaN 0x7fc0).
// Bit-identical to round_to(kBF16, x) for every float, which the format tests check; twins use it in hot
// loops.
DC_HD inline float round_bf16(float x) {
  std::uint32_t u = bits_as<std::uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u = 0x7fc00000u;
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
  }
  return bits_as<float>(u);
}

// Unit roundoff u = 2^-(man_bits+1) of a float dtype: the largest relative error of one rounding to nearest.
DC_HD constexpr double unit_roundoff(DType t) {
  switch (t) {
    case DType::kF64:
      return 0x1p-53;
    case DType::kF32:
      return 0x1p-24;
    case DType::kF16:
      return 0x1p-11;
    case DType::kBF16:
      return 0x1p-8;
    case DType::kF8E4M3FN:
    case DType::kF8E4M3FNUZ:
      return 0x1p-4;
    case DType::kF8E5M2:
      return 0x1p-3;
    default:
      return 0.0;
  }
}

// Spacing of the format's values at x: the distance from |x| rounded down to a format value to the next value
// up (for |x| beyond max finite, the spacing at the top binade). Used to express errors in ulps of the output
// format.
double ulp(DType t, double x);
// Next representable value above x (toward +inf), and below it; x need not be representable. NaN stays NaN;
// at or beyond the max finite, next_up gives +inf where the format has infinities, else the max finite (and
// next_down mirrors it). int32: the next integer.
double next_up(DType t, double x);
double next_down(DType t, double x);

std::string_view dtype_name(DType t);
// Parses "bf16", "fp16", "fp32", "fp64", "fp8_e4m3fn", "fp8_e4m3fnuz", "fp8_e5m2", "i32"; false if unknown.
bool parse_dtype(std::string_view name, DType* out);

}  // namespace driftcheck
