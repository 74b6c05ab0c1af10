// Numbers a reader can trust. An error / tolerance ratio is a useful number while the error is of the size
// rounding makes (fractions to hundreds of tolerances); a NaN or Inf output has no finite ratio at all, and
// beyond kAstronomicalRatio the digits only say how large the garbage or poison value was, or how close to
// zero the reference is. There the report says which of these it is instead of printing the number.
#pragma once

#include <string>
#include <string_view>

namespace driftcheck::reports {

// 10^4 tolerances: two orders of magnitude above the largest ratio a rounding-level bug produces in the
// proof runs (an extra rounding or fp16 accumulation: 1.2x to 40x, docs/ORACLE.md section 8).
inline constexpr double kAstronomicalRatio = 1e4;

// A ratio for a table cell: "0.42", "37.5", "NaN/Inf", "> 10^4 (structural)".
std::string ratio_text(double ratio);

// The worst element of a finding, in words when the ratio is not a number to read: "NaN/Inf output where the
// reference is 0.213", "garbage: 3.39e+38 where the reference is 0.213 (|error| 1e+34 tolerances)", "error
// larger than the reference: 4e-06 vs reference -2.1e-09 (|error| 4e-06, tolerance 3e-12)", else "37.5x
// tolerance (0.5 vs 0.4, tolerance 0.0039)".
std::string worst_text(double ratio, double value, double reference, double tolerance);

// How bad a finding is, in the words its verdict calls for: a ratio only where the verdict is about error
// size ("37.5", "> 10^4 (structural)"), else what happened ("NaN/Inf", "out-of-bounds write", "not
// bit-exact", "batch-dependent bits").
std::string verdict_summary(std::string_view verdict, double ratio);
// The same with the worst element (worst_text) or, for verdicts that are not about error size, the oracle's
// one-line detail.
std::string verdict_detail(std::string_view verdict, double ratio, double value, double reference,
                           double tolerance, const std::string& detail);

// The key "worst first" sorts by: infinite for verdicts that are structural whatever the ratio (NaN/Inf,
// out-of-bounds writes, overwritten inputs, inexact copies, errors), else the ratio.
double verdict_severity(std::string_view verdict, double ratio);

// A mean signed error in ulps (a bias): "+0.012", "NaN/Inf", "> 10^4 (structural)".
std::string bias_text(double mean_signed_ulps);

// Two significant digits, for labels inside plots: "0.31", "18", "2.4e+03".
std::string short_number(double v);

// A pair's divergence relative to the pair's tolerance (report.hpp DivergenceCell).
std::string divergence_text(double max_ratio, long long nonfinite_cases);

}  // namespace driftcheck::reports
