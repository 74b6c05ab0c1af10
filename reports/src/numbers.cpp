#include "driftcheck/reports/numbers.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace driftcheck::reports {

namespace {

// `v` with `digits` significant digits, more where fewer would print a value on the other side of 1 than `v`
// is, or exactly 1 for a `v` that is not.
std::string deciding_digits(double v, int digits) {
  for (int d = digits;; ++d) {
    std::string s = fmt::format("{:.{}g}", v, d);
    const double shown = std::stod(s);
    if (d >= 17 || v == 1 || ((shown > 1) == (v > 1) && shown != 1)) return s;
  }
}

}  // namespace

std::string ratio_text(double ratio) {
  if (std::isnan(ratio)) return "no output";
  if (!std::isfinite(ratio)) return "NaN/Inf";
  if (ratio > kAstronomicalRatio) return "> 10^4 (structural)";
  return deciding_digits(ratio, 3);
}

std::string worst_text(double ratio, double value, double reference, double tolerance) {
  if (!std::isfinite(value)) return fmt::format("NaN/Inf output where the reference is {:.6g}", reference);
  if (!std::isfinite(reference))
    return fmt::format("finite output {:.6g} where the reference is {}", value, reference);
  const double error = std::abs(value - reference);
  if (std::isfinite(ratio) && ratio <= kAstronomicalRatio)
    return fmt::format("{}x tolerance ({:.6g} vs reference {:.6g}, tolerance {:.3g})",
                       deciding_digits(ratio, 3), value, reference, tolerance);
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
  if (verdict == "error") return "no output: backend error";
  if (verdict == "crash") return "no output: worker crash";
  if (verdict == "timeout") return "no output: timeout";
  if (verdict == "nondeterministic") return "bits change between runs";
  if (verdict == "batch_variant") return "batch-dependent bits";
  if (verdict == "block_permutation_variant") return "page-placement-dependent bits";
  if (verdict == "fused_unfused_drift") return "fused and unfused chains drift apart";
  return {};
}

bool passing(std::string_view verdict) {
  return verdict.empty() || verdict == "pass" || verdict == "unsupported";
}

}  // namespace

double case_ratio(std::string_view verdict, double worst_ratio) {
  const int rank = verdict_rank(verdict);
  if (rank == 5) return std::numeric_limits<double>::quiet_NaN();
  if (rank == 4 || std::isnan(worst_ratio)) return INFINITY;
  return worst_ratio;
}

int verdict_rank(std::string_view verdict) {
  if (passing(verdict)) return 0;
  if (verdict == "error" || verdict == "crash" || verdict == "timeout") return 5;
  if (verdict == "nan_mismatch" || verdict == "inf_mismatch") return 4;
  if (verdict == "not_exact" || verdict == "guard_violation" || verdict == "input_modified") return 3;
  if (verdict == "beyond_tolerance") return 2;
  return 1;  // beyond_statistical_bound, the metamorphic verdicts
}

bool worse_case(std::string_view verdict, double ratio, std::uint64_t index, std::string_view worst_verdict,
                double worst_ratio, std::uint64_t worst_case) {
  const int rank = verdict_rank(verdict), worst_rank = verdict_rank(worst_verdict);
  if (rank != worst_rank) return rank > worst_rank;
  if (std::isnan(ratio) != std::isnan(worst_ratio)) return std::isnan(ratio);
  if (std::isnan(ratio) || ratio == worst_ratio) return index < worst_case;
  return ratio > worst_ratio;
}

std::string worst_cell(std::string_view verdict, double ratio) {
  if (verdict == "beyond_statistical_bound")
    return fmt::format("statistically improbable ({})", ratio_text(ratio));
  const auto what = what_happened(verdict);
  return what.empty() ? ratio_text(ratio) : std::string(what);
}

std::string_view worst_style(std::string_view verdict, double ratio) {
  const int rank = verdict_rank(verdict);
  if (rank >= 4 || (rank == 0 && !std::isfinite(ratio))) return "nf";
  return rank > 0 || ratio > 1 ? "fail" : "pass";
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
