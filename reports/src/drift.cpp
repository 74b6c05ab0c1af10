#include "driftcheck/reports/drift.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/files/json_fields.hpp"

namespace driftcheck::reports {

using files::array_field;
using files::FieldError;
using files::int_field;
using files::int_value;
using files::number_field;
using files::number_json;
using files::object_field;
using files::string_field;
using files::u64_field;
using files::within_field;

int RatioHistogram::bin_of(double r) {
  int e = 0;
  const double m = std::frexp(r, &e);  // r = m * 2^e, m in [0.5, 1): both exact
  // (m - 0.5) * 64 is exact and lies in [0, 32): the sub-bin is its integer part.
  const int sub = static_cast<int>((m - 0.5) * 2 * kSubBins);
  return e * kSubBins + sub;
}

double RatioHistogram::upper_edge(int key) {
  // Floor division: keys of ratios below 1 are negative.
  const int e = key >= 0 ? key / kSubBins : -((-key + kSubBins - 1) / kSubBins);
  const int sub = key - e * kSubBins;
  return std::ldexp(0.5 + (sub + 1) / (2.0 * kSubBins), e);
}

void RatioHistogram::add(double ratio) {
  if (std::isnan(ratio))
    ++no_output;
  else if (!std::isfinite(ratio))
    ++nonfinite;
  else if (ratio <= 0)
    ++zeros;
  else
    ++bins[bin_of(ratio)];
}

void RatioHistogram::merge(const RatioHistogram& o) {
  zeros += o.zeros, nonfinite += o.nonfinite, no_output += o.no_output;
  for (const auto& [k, n] : o.bins) bins[k] += n;
}

std::int64_t RatioHistogram::count() const {
  std::int64_t n = zeros + nonfinite + no_output;
  for (const auto& [k, c] : bins) n += c;
  return n;
}

double RatioHistogram::quantile(double q) const {
  const std::int64_t n = count();
  if (n == 0) return 0;
  const auto rank = static_cast<std::int64_t>(std::ceil(q * static_cast<double>(n)));
  std::int64_t seen = zeros;
  if (seen >= rank) return 0;
  for (const auto& [k, c] : bins) {
    seen += c;
    if (seen >= rank) return upper_edge(k);
  }
  if (seen + nonfinite >= rank) return std::numeric_limits<double>::infinity();
  return std::numeric_limits<double>::quiet_NaN();
}

void DriftStats::add(std::uint64_t case_index, const std::string& failing_verdict, double ratio,
                     double mean_signed_ulps, double share_beyond) {
  DriftStats one;
  one.cases = 1;
  if (failing_verdict.empty())
    one.passed = 1;
  else
    one.failures[failing_verdict] = {1, case_index};
  one.worst_verdict = failing_verdict, one.worst_ratio = ratio, one.worst_case = case_index;
  if (std::isfinite(ratio)) one.max_finite_ratio = ratio;
  one.ratios.add(ratio);
  if (std::isfinite(mean_signed_ulps)) one.signed_ulps_sum = mean_signed_ulps, one.signed_ulps_cases = 1;
  one.max_share_beyond = std::isnan(share_beyond) ? 1.0 : share_beyond;
  merge(one);
}

void DriftStats::merge(const DriftStats& o) {
  if (o.cases == 0) return;
  const bool first = cases == 0;
  cases += o.cases, passed += o.passed;
  for (const auto& [v, c] : o.failures) {
    auto [it, fresh] = failures.emplace(v, c);
    if (!fresh)
      it->second.cases += c.cases, it->second.first_case = std::min(it->second.first_case, c.first_case);
  }
  if (first ||
      worse_case(o.worst_verdict, o.worst_ratio, o.worst_case, worst_verdict, worst_ratio, worst_case))
    worst_verdict = o.worst_verdict, worst_ratio = o.worst_ratio, worst_case = o.worst_case;
  max_finite_ratio = std::max(max_finite_ratio, o.max_finite_ratio);
  ratios.merge(o.ratios);
  signed_ulps_sum += o.signed_ulps_sum, signed_ulps_cases += o.signed_ulps_cases;
  max_share_beyond = std::max(max_share_beyond, o.max_share_beyond);
}

double DriftStats::p99_ratio() const {
  const double q = ratios.quantile(0.99);
  return std::isfinite(q) ? std::min(q, max_finite_ratio) : q;
}

std::int64_t DriftStats::failed() const {
  std::int64_t n = 0;
  for (const auto& [v, c] : failures) n += c.cases;
  return n;
}

nlohmann::json to_json(const DriftStats& s) {
  nlohmann::json failures = nlohmann::json::object();
  for (const auto& [v, c] : s.failures) failures[v] = {{"cases", c.cases}, {"first_case", c.first_case}};
  nlohmann::json bins = nlohmann::json::array();
  for (const auto& [k, n] : s.ratios.bins) bins.push_back({k, n});
  return {{"cases", s.cases},
          {"passed", s.passed},
          {"failures", failures},
          {"worst_verdict", s.worst_verdict},
          {"worst_ratio", number_json(s.worst_ratio)},
          {"worst_case", s.worst_case},
          {"max_finite_ratio", number_json(s.max_finite_ratio)},
          {"p99_ratio", number_json(s.p99_ratio())},
          {"mean_signed_ulps", s.mean_signed_ulps()},
          {"signed_ulps_sum", number_json(s.signed_ulps_sum)},
          {"signed_ulps_cases", s.signed_ulps_cases},
          {"max_share_beyond", s.max_share_beyond},
          {"ratio_histogram",
           {{"zeros", s.ratios.zeros},
            {"nonfinite", s.ratios.nonfinite},
            {"no_output", s.ratios.no_output},
            {"bins", bins}}}};
}

DriftStats drift_stats_from_json(const nlohmann::json& j) {
  DriftStats s;
  s.cases = int_field(j, "cases", 0), s.passed = int_field(j, "passed", 0);
  for (const auto& item : object_field(j, "failures").items()) {
    const nlohmann::json& c = item.value();
    s.failures[item.key()] = within_field("failures." + item.key(), [&] {
      return VerdictCount{int_field(c, "cases", 0), u64_field(c, "first_case")};
    });
  }
  s.worst_ratio = number_field(j, "worst_ratio"), s.worst_case = u64_field(j, "worst_case");
  // Statistics written before the worst case carried its verdict: the worst by ratio, and its ratio the
  // largest finite one.
  if (j.contains("worst_verdict")) s.worst_verdict = string_field(j, "worst_verdict");
  s.max_finite_ratio = j.contains("max_finite_ratio") ? number_field(j, "max_finite_ratio")
                       : std::isfinite(s.worst_ratio) ? s.worst_ratio
                                                      : 0.0;
  s.signed_ulps_sum = number_field(j, "signed_ulps_sum");
  s.signed_ulps_cases = int_field(j, "signed_ulps_cases", 0);
  s.max_share_beyond = number_field(j, "max_share_beyond");
  within_field("ratio_histogram", [&] {
    const auto& h = object_field(j, "ratio_histogram");
    s.ratios.zeros = int_field(h, "zeros", 0), s.ratios.nonfinite = int_field(h, "nonfinite", 0);
    if (h.contains("no_output")) s.ratios.no_output = int_field(h, "no_output", 0);
    for (const auto& b : array_field(h, "bins")) {
      if (!b.is_array() || b.size() != 2) throw FieldError("bins", "expected [bin, count] pairs");
      const auto bin = int_value(b[0], "bins", std::numeric_limits<int>::min());
      if (bin > std::numeric_limits<int>::max())
        throw FieldError("bins", fmt::format("bin {} is too large", bin));
      s.ratios.bins[static_cast<int>(bin)] = int_value(b[1], "bins", 0);
    }
  });
  return s;
}

}  // namespace driftcheck::reports
