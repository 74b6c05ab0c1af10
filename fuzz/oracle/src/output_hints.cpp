#include "driftcheck/fuzz/output_hints.hpp"

#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace driftcheck::fuzz {
namespace {

// The storage index of every element of t, row-major over its logical shape.
std::vector<std::int64_t> element_indices(const Tensor& t) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) out[static_cast<std::size_t>(i)] = t.index_of_linear(i);
  return out;
}

// Every element holds the bits it was handed over with, and one of them at least is finite: a failing kernel
// may well write NaN or an infinity itself where the poison was one (a one-element lse that is NaN either
// way).
bool unchanged(const Tensor& handed, const Tensor& run, const std::vector<std::int64_t>& at) {
  bool finite = false;
  for (const std::int64_t k : at) {
    if (handed.storage()->load_bits(k) != run.storage()->load_bits(k)) return false;
    finite = finite || std::isfinite(handed.storage()->load(k));
  }
  return finite;
}

// Nine elements of ten: a pattern, not a coincidence of a few elements.
bool most(std::size_t matched, std::size_t total) {
  return total > 0 && 10 * matched >= 9 * total;
}

// The storage read as float32 at 4 * k bytes for each element index k, within 1% of the reference (NaN for
// NaN, an infinity for the same infinity). Elements whose float32 would lie past the storage's end are left
// out (a kernel that wrote them overran the buffer), as long as a quarter are inside.
bool float32_pattern(const Tensor& run, const std::vector<std::int64_t>& at, const std::vector<double>& ref) {
  const std::vector<std::byte>& bytes = run.storage()->bytes;
  std::size_t close = 0, inside = 0, nonzero = 0;
  for (std::size_t i = 0; i < at.size(); ++i) {
    const auto byte = static_cast<std::size_t>(at[i]) * 4;
    if (byte + 4 > bytes.size()) continue;
    ++inside;
    float f = 0;
    std::memcpy(&f, bytes.data() + byte, 4);
    const double v = f, r = ref[i];
    nonzero += std::isfinite(r) && r != 0 ? 1 : 0;
    if (std::isnan(r)   ? std::isnan(v)
        : std::isinf(r) ? v == r
                        : std::fabs(v - r) <= 0.01 * std::fabs(r) + 1e-30)
      ++close;
  }
  return nonzero > 0 && 4 * inside >= at.size() && most(close, inside);
}

// Raw codes equal to the reference truncated to an integer, modulo 2^bits (NumPy's float -> uint16 / uint8
// cast), give or take one (the kernel's value may sit on the other side of an integer).
bool integer_pattern(const Tensor& run, const std::vector<std::int64_t>& at, const std::vector<double>& ref) {
  const int bits = 8 * dtype_size(run.dtype());
  const std::int64_t range = std::int64_t{1} << bits;
  std::size_t matched = 0, nonzero = 0, large = 0;
  for (std::size_t i = 0; i < at.size(); ++i) {
    const double r = ref[i];
    if (!std::isfinite(r) || std::fabs(r) > 1e15) continue;
    const auto expected = ((static_cast<std::int64_t>(std::trunc(r)) % range) + range) % range;
    const auto code = static_cast<std::int64_t>(run.storage()->load_bits(at[i]));
    const std::int64_t distance =
        std::min((code - expected + range) % range, (expected - code + range) % range);
    large += std::fabs(r) >= 1 ? 1 : 0;
    if (distance > 1) continue;
    ++matched;
    nonzero += code != 0 ? 1 : 0;
  }
  // Where every |reference| < 1 the cast writes zeros, which any kernel writing zeros would match too.
  return large > 0 && nonzero > 0 && most(matched, at.size());
}

}  // namespace

std::string output_hints(const Case& handed, const Case& run, const Outputs& reference) {
  std::vector<std::string> hints;
  for (const std::string& name : op_signature(run).outputs) {
    const Tensor& t = run.tensor(name);
    if (t.numel() == 0 || !handed.tensors.count(name)) continue;
    const std::vector<std::int64_t> at = element_indices(t);
    if (unchanged(handed.tensor(name), t, at)) {
      hints.push_back(fmt::format(
          "output {} was never written (the kernel returned its result instead of writing into {}?)", name,
          name));
      continue;
    }
    const auto ref_it = reference.find(name);
    if (ref_it == reference.end() || dtype_size(t.dtype()) >= 4) continue;
    const std::vector<double> ref = ref_it->second.to_f64();
    const std::string dtype(dtype_name(t.dtype()));
    if (float32_pattern(t, at, ref)) {
      hints.push_back(
          fmt::format("{} looks like float32 values written into a {} view (its storage used as a "
                      "float buffer?): convert to {} before writing",
                      name, dtype, dtype));
    } else if (t.dtype() != DType::kF16 && integer_pattern(t, at, ref)) {
      hints.push_back(
          fmt::format("{} looks like float values cast to integers in the raw {} view ({} is held as "
                      "uint{} bit patterns: write case.store(\"{}\", values) or "
                      "dc.dtypes.encode(values, \"{}\"))",
                      name, dtype, dtype, 8 * dtype_size(t.dtype()), name, dtype));
    }
  }
  std::string out;
  for (const auto& h : hints) out += (out.empty() ? "" : "; ") + h;
  return out;
}

}  // namespace driftcheck::fuzz
