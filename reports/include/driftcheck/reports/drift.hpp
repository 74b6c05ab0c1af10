// Drift statistics of one backend on one op and storage format, over a set of cases: what a gate compares
// with its baseline and what a report plots. Every field folds deterministically (cases are merged in case
// index order by the campaign), so a fixed-seed run gives the same statistics on a fast and a slow machine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "driftcheck/reports/json_text.hpp"  // number_json, number_from_json

namespace driftcheck::reports {

// Histogram of per-case error / tolerance ratios with 32 linear sub-bins per binary octave (relative bin
// width 1.6% to 3.1%), computed with frexp and exact arithmetic only, so a ratio lands in the same bin on
// every platform. Zeros and non-finite ratios (a NaN output against a finite reference) are counted apart.
class RatioHistogram {
 public:
  static constexpr int kSubBins = 32;

  void add(double ratio);
  void merge(const RatioHistogram& other);
  std::int64_t count() const;
  // The q-quantile (0 < q <= 1) as the upper edge of the bin holding the ceil(q * count)-th smallest ratio:
  // at most 3.1% above the true quantile, never below it. 0 when empty; +inf when it falls among the
  // non-finite ratios.
  double quantile(double q) const;

  std::int64_t zeros = 0;
  std::int64_t nonfinite = 0;
  std::map<int, std::int64_t> bins;  // key: 32 * binary exponent + sub-bin

  // Upper edge of bin `key`.
  static double upper_edge(int key);
  static int bin_of(double positive_finite_ratio);
};

struct VerdictCount {
  std::int64_t cases = 0;
  std::uint64_t first_case = 0;  // lowest case index with this verdict (replay it)
};

struct DriftStats {
  std::int64_t cases = 0;  // cases the backend ran and was judged on
  std::int64_t passed = 0;
  std::map<std::string, VerdictCount> failures;  // failing verdict name -> cases
  double worst_ratio = 0;              // largest error / tolerance of any case (inf: NaN/inf output)
  std::uint64_t worst_case = 0;        // its case index
  RatioHistogram ratios;               // per-case worst ratio
  double signed_ulps_sum = 0;          // sum over cases of the primary output's mean signed ulps
  std::int64_t signed_ulps_cases = 0;  // cases where that mean was finite
  double max_share_beyond = 0;         // largest share of elements beyond tolerance in one case

  // One judged case: its index, failing verdict name (empty when it passed), worst ratio, the primary
  // output's mean signed ulps (bias) and share of elements beyond tolerance.
  void add(std::uint64_t case_index, const std::string& failing_verdict, double worst_ratio,
           double mean_signed_ulps, double share_beyond);
  // Folds `o` in, in any order: the worst case is the lowest index among the worst ratios (worse_case()).
  void merge(const DriftStats& o);
  // The histogram's quantile is a bin edge, up to 3.1% above the true one: never more than the largest ratio.
  double p99_ratio() const { return std::min(ratios.quantile(0.99), worst_ratio); }
  double mean_signed_ulps() const {
    return signed_ulps_cases > 0 ? signed_ulps_sum / static_cast<double>(signed_ulps_cases) : 0.0;
  }
  std::int64_t failed() const;
};

// Whether case `index` with `ratio` is worse than the worst case held (`worst_ratio` at `worst_case`): a
// larger ratio, NaN above every number, or the same ratio at a lower case index. The worst case is then a
// function of the set of cases, not of the order they are folded in, so a sharded campaign's statistics merge
// into exactly those of the unsharded one (docs/CAMPAIGN.md).
bool worse_case(double ratio, std::uint64_t index, double worst_ratio, std::uint64_t worst_case);

// JSON with non-finite numbers as strings ("inf"), as everywhere in driftcheck's files.
nlohmann::json to_json(const DriftStats& s);
// Throws nlohmann::json::exception (or std::invalid_argument for a bad number string) on a malformed object.
DriftStats drift_stats_from_json(const nlohmann::json& j);

}  // namespace driftcheck::reports
