// The statistical tier (docs/ORACLE.md section 9): on top of the worst-case tolerance, how improbable is a
// backend's output for a correct kernel with the numerics it declares?
//
// Per output element the kernel's value before its final rounding is the reference plus an error e = s + r:
// s within a systematic bound S (worst case, but over the structure the backend declares: its reduction
// shape, its rounding points) and r = sum_k c_k xi_k, the rounding errors that hypothesis H takes as
// independent, mean zero, |xi_k| <= 1. Hoeffding: P(|r| >= x) <= 2 exp(-x^2 / (2 V)), V = sum_k c_k^2. An
// output o = round(v) says v lies in o's rounding interval, so |e| >= D, the distance from the reference to
// that interval; the element's p-value is p = P(|e| >= D) <= [D <= S] + [D > S] 2 exp(-(D - S)^2 / (2 V)), a
// valid p-value (P(p <= a) <= a under H). Elements of a case share rounding errors (one row scale, one P per
// key), so they are combined by Bonferroni, valid under any dependence: the case p-value is N min_i p_i.
#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>

#include "driftcheck/fuzz/oracle.hpp"
#include "rounding_terms.hpp"

namespace driftcheck::fuzz {
namespace {

constexpr double kU32 = 0x1p-24;

double gamma(std::int64_t n) {
  const double nu = static_cast<double>(n) * kU32;
  return nu / (1.0 - nu);
}

// The values that round to `out` in format t (round to nearest; the ends are ties, counted in).
std::pair<double, double> rounding_interval(DType t, double out) {
  const double up = next_up(t, out), down = next_down(t, out);
  const double hi = std::isinf(up) || up == out ? out + 0.5 * (out - down) : 0.5 * (out + up);
  const double lo = std::isinf(down) || down == out ? out - 0.5 * (up - out) : 0.5 * (out + down);
  return {lo, hi};
}

struct Interval {
  double lo, hi;
  bool meets(const std::pair<double, double>& o) const { return lo <= o.second && o.first <= hi; }
};

// x (1 +- rel) +- abs as an interval, whatever the sign of x.
Interval around(double x, double rel, double abs) {
  const double a = std::fabs(x) * rel + abs;
  return {x - a, x + a};
}

struct Element {
  double p = 1;  // p-value bound of the observation
  double bound;  // what the output had to stay within (for the detail line)
  double sigma;  // random part's scale (0: none)
};

// rmsnorm family: the declared rounding skeleton. A kernel with one rounding writes round(y (1 + theta));
// with two, round(round(z s (1 + theta')) w'); residual kernels normalise z or z rounded to the activation
// dtype. theta is the relative error of the kernel's s over its declared reduction (gamma of the reduction
// depth, not of H) plus the mean, eps, rsqrt (2 ulp) and the products; every other value is exact. The
// output is explained if its rounding interval meets one of these sets: p = 1; else no correct kernel with
// these numerics can produce it: p = 0.
Element norm_element(const ErrorModel& m, const Numerics& n, std::size_t i, double out) {
  const double theta = 0.5 * gamma(reduction_depth(m.row_length, n.reduction)) + 7 * kU32;
  const DType act = m.dtype;
  const auto seen = rounding_interval(act, out);
  const double w = m.weight[i], tiny = 0x1p-150;
  for (const auto& [zs, y] :
       {std::pair{m.scaled[i], m.scaled[i] * w}, std::pair{m.scaled_rounded_z[i], m.ref_rounded_z[i]}}) {
    // Per element on top of theta: x + residual in fp32, z s, (1 + w) in fp32, the weight product.
    if (around(y, theta + 4 * kU32, (std::fabs(w) + 1) * tiny).meets(seen)) return {1, 0, 0};
    if (n.output_roundings < 2) continue;
    const Interval pre = around(zs, theta + 2 * kU32, tiny);
    const double a = round_to(act, pre.lo) * w, b = round_to(act, pre.hi) * w;
    const Interval r = around(0.5 * (a + b), 0, 0.5 * std::fabs(a - b));
    if (Interval{r.lo - std::fabs(r.lo) * 2 * kU32 - tiny, r.hi + std::fabs(r.hi) * 2 * kU32 + tiny}.meets(
            seen))
      return {1, 0, 0};
  }
  return {0, theta * std::fabs(m.ref_rounded_z[i]), 0};
}

// Attention o: the worst-case terms that stay systematic plus the random P and V roundings.
Element attention_element(const ErrorModel& m, const Numerics& n, std::size_t i, double ref, double out) {
  const auto term = [i](const std::vector<double>& v) { return v.empty() ? 0.0 : v[i]; };
  double s = term(m.base), v = 0;
  for (const RoundingTerm& t : kRoundingTerms) {
    if (!t.attention || t.count(m, n, i) == 0) continue;
    s += term(m.*(t.typical != nullptr ? t.typical : t.worst));
    if (t.variance != nullptr) v += term(m.*t.variance);
  }
  const auto [lo, hi] = rounding_interval(m.dtype, out);
  const double d = std::max({0.0, lo - ref, ref - hi});
  if (d <= s) return {1, s, std::sqrt(v)};
  const double p = v > 0 ? std::min(1.0, 2 * std::exp(-(d - s) * (d - s) / (2 * v))) : 0.0;
  return {p, s, std::sqrt(v)};
}

// The rounding points a backend declares for an output, in words (for a statistical verdict's detail).
std::string rounding_points(const ErrorModel& m, const Numerics& n, bool norm) {
  const std::string_view act = dtype_name(m.dtype);
  if (norm)
    return fmt::format(
        "fp32 math over a sum of squares of depth {}, then {}", reduction_depth(m.row_length, n.reduction),
        n.output_roundings < 2 ? fmt::format("one rounding to {}", act)
                               : fmt::format("x * s rounded to {}, times w rounded again", act));
  std::string s = "fp32 logits, softmax and P.V";
  for (const RoundingTerm& t : kRoundingTerms)
    if (t.attention) s += t.words(n, act);
  return s + fmt::format(", o rounded to {}", act);
}

}  // namespace

std::int64_t reduction_depth(std::int64_t h, const ReductionShape& r) {
  if (h <= 1) return 1;
  const std::int64_t threads = std::clamp<std::int64_t>(r.threads, 1, h), vec = std::max(r.vec, 1);
  // The square, the thread's own chunks (the first add onto 0 is exact but counted), then the tree.
  std::int64_t depth = 1 + ((h + vec - 1) / vec + threads - 1) / threads * vec;
  if (threads > 1) {
    const auto warp = static_cast<std::int64_t>(std::bit_ceil(static_cast<unsigned>(std::max(r.warp, 1))));
    depth += std::countr_zero(static_cast<unsigned>(warp)) + (threads + warp - 1) / warp;
  }
  return std::min(depth, h);  // no order of h additions makes a longer chain than the sequential one
}

double binomial_tail_bound(std::int64_t n, std::int64_t x, double level) {
  if (n <= 0 || x <= 0) return 1.0;
  const double a = static_cast<double>(x) / static_cast<double>(n);
  if (a <= level) return 1.0;
  const double kl = a * std::log(a / level) + (a < 1 ? (1 - a) * std::log((1 - a) / (1 - level)) : 0.0);
  return std::exp(-static_cast<double>(n) * kl);
}

void StatisticalClass::add(double p_value, std::uint64_t index) {
  merge({1, p_value <= kStatisticalCaseLevel ? 1 : 0, p_value, index});
}

void StatisticalClass::merge(const StatisticalClass& o) {
  cases += o.cases, low += o.low;
  if (o.min_p < min_p) min_p = o.min_p, min_case = o.min_case;
}

std::optional<ClassJudgement> judge_class(const StatisticalClass& c, std::string_view shape) {
  const double tail = binomial_tail_bound(c.cases, c.low, kStatisticalCaseLevel);
  if (tail > kStatisticalAlpha) return std::nullopt;
  return ClassJudgement{
      tail, c.min_case,
      fmt::format(
          "{} of {} cases of {} ({:.2g}%) have a statistical p-value <= {:g}, where a correct kernel gives "
          "at "
          "most {:g}% (binomial tail p <= {:.3g}); the class, not one case, is beyond the bound; most "
          "improbable: case {} (p {:.3g})",
          c.low, c.cases, shape,
          100.0 * static_cast<double>(c.low) / static_cast<double>(std::max<std::int64_t>(c.cases, 1)),
          kStatisticalCaseLevel, 100 * kStatisticalCaseLevel, tail, c.min_case, c.min_p)};
}

StatisticalResult judge_statistical(const PreparedCase& prepared, const Numerics& n, const Outputs& outputs) {
  const PreparedCase& pc = prepared.judged_as(n);
  StatisticalResult r;
  double worst_p = 2;
  for (const auto& [name, ref_t] : pc.reference) {
    const ErrorModel& m = pc.model.at(name);
    const bool norm = !m.scaled.empty(), attention = !m.variance_p.empty();
    if (!norm && !attention) continue;
    const auto ref = ref_t.to_f64(), got = outputs.at(name).to_f64();
    for (std::size_t i = 0; i < ref.size(); ++i) {
      if (!std::isfinite(ref[i]) || !std::isfinite(got[i])) continue;
      ++r.elements;
      const Element e = norm ? norm_element(m, n, i, got[i]) : attention_element(m, n, i, ref[i], got[i]);
      if (norm ? e.p == 0 : e.p <= kStatisticalCaseLevel) ++r.beyond;
      if (r.rounding_points.empty())
        r.rounding_points = rounding_points(m, n, norm), r.expected_share = norm ? 0 : kStatisticalCaseLevel;
      if (e.p >= worst_p) continue;
      worst_p = e.p;
      r.output = name;
      r.index = static_cast<std::int64_t>(i);
      r.value = got[i];
      r.reference = ref[i];
      r.why = norm ? fmt::format("matches none of the declared rounding points (relative band {:.3g})",
                                 e.bound / std::max(std::fabs(ref[i]), 1e-300))
                   : fmt::format(
                         "beyond its systematic bound {:.3g} by {:.3g} random sigmas (p <= {:.3g})", e.bound,
                         e.sigma > 0 ? (std::fabs(got[i] - ref[i]) - e.bound) / e.sigma : INFINITY, e.p);
    }
  }
  r.p_value = worst_p > 1 ? 1.0 : std::min(1.0, static_cast<double>(r.elements) * worst_p);
  return r;
}

}  // namespace driftcheck::fuzz
