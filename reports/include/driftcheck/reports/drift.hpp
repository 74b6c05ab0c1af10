// Drift statistics of one backend on one op and storage format, over a set of cases: what a gate compares
// with its baseline and what a report plots. Every field folds deterministically (cases are merged in case
// index order by the campaign), so a fixed-seed run gives the same statistics on a fast and a slow machine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "driftcheck/files/json_text.hpp"  // number_json, number_from_json
#include "driftcheck/reports/numbers.hpp"  // worse_case

namespace driftcheck::reports {

// Histogram of per-case error / tolerance ratios with 32 linear sub-bins per binary octave (relative bin
// width 1.6% to 3.1%), computed with frexp and exact arithmetic only, so a ratio lands in the same bin on
// every platform. Zeros, infinite ratios (a NaN/Inf output against a finite reference) and NaN ratios (no
// output: an error, crash or timeout; numbers.hpp case_ratio) are counted apart.
class RatioHistogram {
 public:
  static constexpr int kSubBins = 32;

  void add(double ratio);
  void merge(const RatioHistogram& other);
  std::int64_t count() const;
  // The q-quantile (0 < q <= 1) as the upper edge of the bin holding the ceil(q * count)-th smallest ratio:
  // at most 3.1% above the true quantile, never below it. 0 when empty; +inf when it falls among the
  // infinite ratios, NaN among the cases without output (ordered above them).
  double quantile(double q) const;

  std::int64_t zeros = 0;
  std::int64_t nonfinite = 0;
  std::int64_t no_output = 0;
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
  // The worst case (numbers.hpp worse_case): its verdict ("" passed), case_ratio (inf: NaN/Inf output, NaN:
  // no output) and index.
  std::string worst_verdict;
  double worst_ratio = 0;
  std::uint64_t worst_case = 0;
  double max_finite_ratio = 0;         // largest finite case_ratio (caps the p99)
  RatioHistogram ratios;               // per-case worst ratio
  double signed_ulps_sum = 0;          // sum over cases of the primary output's mean signed ulps
  std::int64_t signed_ulps_cases = 0;  // cases where that mean was finite
  double max_share_beyond = 0;         // largest share of elements beyond tolerance in one case

  // One judged case: its index, failing verdict name (empty when it passed), case_ratio, the primary
  // output's mean signed ulps (bias) and share of elements beyond tolerance.
  void add(std::uint64_t case_index, const std::string& failing_verdict, double worst_ratio,
           double mean_signed_ulps, double share_beyond);
  // Folds `o` in, in any order: the worst case is chosen by worse_case(), a function of the set of cases.
  void merge(const DriftStats& o);
  // The histogram's quantile is a bin edge, up to 3.1% above the true one: never more than the largest finite
  // ratio when it falls among the finite ones.
  double p99_ratio() const;
  double mean_signed_ulps() const {
    return signed_ulps_cases > 0 ? signed_ulps_sum / static_cast<double>(signed_ulps_cases) : 0.0;
  }
  std::int64_t failed() const;
};

// JSON with non-finite numbers as strings ("inf"), as everywhere in driftcheck's files.
nlohmann::json to_json(const DriftStats& s);
// Throws nlohmann::json::exception (or std::invalid_argument for a bad number string) on a malformed object.
DriftStats drift_stats_from_json(const nlohmann::json& j);

}  // namespace driftcheck::reports
