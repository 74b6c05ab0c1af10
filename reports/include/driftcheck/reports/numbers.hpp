// Numbers a reader can trust. An error / tolerance ratio is a useful number while the error is of the size
// rounding makes (fractions to hundreds of tolerances); a NaN or Inf output has no finite ratio at all, and
// beyond kAstronomicalRatio the digits only say how large the garbage or poison value was, or how close to
// zero the reference is. There the report says which of these it is instead of printing the number.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace driftcheck::reports {

// 10^4 tolerances: two orders of magnitude above the largest ratio a rounding-level bug produces in the
// proof runs (an extra rounding or fp16 accumulation: 1.2x to 40x, docs/ORACLE.md section 8).
inline constexpr double kAstronomicalRatio = 1e4;

// A ratio for a table cell: "0.42", "37.5", "NaN/Inf" (+inf), "no output" (NaN: case_ratio of an error,
// crash or timeout), "> 10^4 (structural)". Three significant digits, more where three would hide on which
// side of the tolerance the ratio lies: 1.003 prints "1.003" and 0.99998 "0.99998", never "1".
std::string ratio_text(double ratio);

// ---------------------------------------------------------------------------------------------------------------
// How a judged case reads in every summary (backend rows, drift statistics, groups, plots, the gate).
// Verdicts are named as fuzz::verdict_name writes them; "" and "pass" are a passing case.
//
// The oracle's worst ratio covers the finite pairs of reference and output only, so a case with a NaN output
// can carry a small one. A summary folds case_ratio instead: +inf where an output is NaN/Inf against the
// reference (nan_mismatch, inf_mismatch: NaN reads as inf, docs/GATE.md), NaN where the backend produced no
// output at all (error, crash, timeout), the oracle's ratio otherwise.
double case_ratio(std::string_view verdict, double worst_ratio);

// How grave a verdict is, whatever its ratio: 0 pass; 1 statistically improbable or metamorphic (bits that
// change with the batch, the run or the page placement; fused against unfused); 2 beyond tolerance; 3 not
// bit-exact, out-of-bounds write, overwritten input; 4 NaN/Inf output; 5 no output (error, crash, timeout).
int verdict_rank(std::string_view verdict);

// Whether case `index` (verdict, case_ratio) is worse than the worst held: a graver verdict first, then a
// larger ratio (NaN above every number), then the lower case index. The worst of a set of cases is then a
// function of the set, not of the order they are folded in, so shards, jobs and resumes agree.
bool worse_case(std::string_view verdict, double ratio, std::uint64_t index, std::string_view worst_verdict,
                double worst_ratio, std::uint64_t worst_case);

// The worst cell of a summary: a ratio where the verdict is about error size ("0.42", "37.5", "> 10^4
// (structural)"), what happened otherwise ("NaN/Inf", "no output: worker crash", "out-of-bounds write",
// "batch-dependent bits", "statistically improbable (0.93)").
std::string worst_cell(std::string_view verdict, double ratio);
// Its style: "pass" only for a passing case within tolerance; "nf" for NaN/Inf and no output; "fail" else.
std::string_view worst_style(std::string_view verdict, double ratio);

// The worst element of a finding, in words when the ratio is not a number to read: "NaN/Inf output where the
// reference is 0.213", "garbage: 3.39e+38 where the reference is 0.213 (|error| 1e+34 tolerances)", "error
// larger than the reference: 4e-06 vs reference -2.1e-09 (|error| 4e-06, tolerance 3e-12)", else "37.5x
// tolerance (0.5 vs 0.4, tolerance 0.0039)".
std::string worst_text(double ratio, double value, double reference, double tolerance);

// The worst cell with the worst element (worst_text) or, for verdicts that are not about error size, the
// oracle's one-line detail.
std::string verdict_detail(std::string_view verdict, double ratio, double value, double reference,
                           double tolerance, const std::string& detail);

// A mean signed error in ulps (a bias): "+0.012", "NaN/Inf", "> 10^4 (structural)".
std::string bias_text(double mean_signed_ulps);

// Two significant digits, for labels inside plots: "0.31", "18", "2.4e+03".
std::string short_number(double v);

// A pair's divergence relative to the pair's tolerance (report.hpp DivergenceCell).
std::string divergence_text(double max_ratio, long long nonfinite_cases);

}  // namespace driftcheck::reports
