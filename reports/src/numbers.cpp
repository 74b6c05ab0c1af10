#include "driftcheck/reports/numbers.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace driftcheck::reports {

std::string ratio_text(double ratio) {
  if (!std::isfinite(ratio)) return "NaN/Inf";
  if (ratio > kAstronomicalRatio) return "> 10^4 (structural)";
  return fmt::format("{:.3g}", ratio);
}

std::string worst_text(double ratio, double value, double reference, double tolerance) {
  if (!std::isfinite(value)) return fmt::format("NaN/Inf output where the reference is {:.6g}", reference);
  if (!std::isfinite(reference))
    return fmt::format("finite output {:.6g} where the reference is {}", value, reference);
  const double error = std::abs(value - reference);
  if (std::isfinite(ratio) && ratio <= kAstronomicalRatio)
    return fmt::format("{:.3g}x tolerance ({:.6g} vs reference {:.6g}, tolerance {:.3g})", ratio, value,
                       reference, tolerance);
  // A value far outside the reference's scale is read garbage or poison (a format's max, a stale slot): its
  // size says nothing about how wrong the kernel is.
  if (std::abs(value) > kAstronomicalRatio * std::max(std::abs(reference), 1.0))
    return fmt::format("garbage: {:.3g} where the reference is {:.6g}", value, reference);
  // Tolerances scale with the reference, so next to a reference much smaller than the error any error is a
  // huge number of tolerances: the absolute error is what to read.
  if (std::abs(reference) < error)
    return fmt::format(
        "error larger than the reference: {:.6g} vs reference {:.3g} (|error| {:.3g}, tolerance "
        "{:.3g})",
        value, reference, error, tolerance);
  return fmt::format("> 10^4 tolerances: {:.6g} vs reference {:.6g} (|error| {:.3g})", value, reference,
                     error);
}

namespace {

// Verdicts (fuzz/oracle.hpp) whose meaning is not an error size, with what to say instead of a ratio.
std::string_view what_happened(std::string_view verdict) {
  if (verdict == "nan_mismatch" || verdict == "inf_mismatch") return "NaN/Inf";
  if (verdict == "guard_violation") return "out-of-bounds write";
  if (verdict == "input_modified") return "input overwritten";
  if (verdict == "not_exact") return "not bit-exact";
  if (verdict == "error") return "backend error";
  if (verdict == "nondeterministic") return "bits change between runs";
  if (verdict == "batch_variant") return "batch-dependent bits";
  if (verdict == "block_permutation_variant") return "page-placement-dependent bits";
  return {};
}

}  // namespace

std::string verdict_summary(std::string_view verdict, double ratio) {
  const auto what = what_happened(verdict);
  return what.empty() ? ratio_text(ratio) : std::string(what);
}

std::string verdict_detail(std::string_view verdict, double ratio, double value, double reference,
                           double tolerance, const std::string& detail) {
  const auto what = what_happened(verdict);
  if (what.empty()) return worst_text(ratio, value, reference, tolerance);
  // The worst element of the metrics is among the finite pairs; the NaN/Inf element is in the oracle's
  // detail.
  if (what == "NaN/Inf" && !std::isfinite(value)) return worst_text(ratio, value, reference, tolerance);
  return detail.empty() ? std::string(what) : fmt::format("{}: {}", what, detail);
}

double verdict_severity(std::string_view verdict, double ratio) {
  const auto what = what_happened(verdict);
  const bool structural = !what.empty() && what.find("bits") == std::string_view::npos;
  return structural || std::isnan(ratio) ? INFINITY : ratio;
}

std::string bias_text(double mean_signed_ulps) {
  if (!std::isfinite(mean_signed_ulps)) return "NaN/Inf";
  // A rounding bias is a fraction of an ulp (truncation: half an ulp); beyond 10^4 ulps the mean only
  // measures garbage values.
  if (std::abs(mean_signed_ulps) > kAstronomicalRatio) return "> 10^4 (structural)";
  return fmt::format("{:+.3f}", mean_signed_ulps);
}

std::string short_number(double v) {
  return fmt::format("{:.2g}", v);
}

std::string divergence_text(double max_ratio, long long nonfinite_cases) {
  if (nonfinite_cases > 0) return fmt::format("NaN/Inf in {} cases", nonfinite_cases);
  // Only bit-exact outputs (tolerance 0) make an infinite ratio from finite values.
  if (std::isinf(max_ratio)) return "not bit-exact";
  return ratio_text(max_ratio);
}

}  // namespace driftcheck::reports
