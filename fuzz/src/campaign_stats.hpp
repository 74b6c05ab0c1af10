// Campaign statistics: what a set of completed cases adds up to (per backend, per op, per pair of backends),
// mergeable in any grouping, and their form in the journal's "progress" records (docs/CAMPAIGN.md). Internal
// to the campaign runner.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/reports/drift.hpp"

namespace driftcheck::fuzz {

// Non-finite numbers (a NaN output has an infinite error ratio) survive the journal as strings.
using reports::number_from_json;
using reports::number_json;

// Unsupported reasons may embed case parameters ("block_size 544: ..."); keeping only the most frequent ones
// keeps checkpoints and memory flat over long campaigns.
inline constexpr std::size_t kMaxReasons = 16;

struct BackendStats {
  std::int64_t run = 0, unsupported = 0, passed = 0;
  std::map<std::string, StatisticalClass> stat_classes;  // the statistical tier's counts by shape class
  std::map<std::string, std::int64_t> reasons, failures;
  std::map<std::string, std::int64_t> known;  // known finding id -> failing cases it explained
  double worst_ratio = 0;
  std::uint64_t worst_case = 0;
  double seconds = 0;
  std::map<std::string, reports::DriftStats> drift;  // by drift_format() of the case

  // Folds in one judged (supported) evaluation of case `index` of shape class `shape`: run, passed or
  // failures by verdict, worst ratio, the statistical tier's class counts.
  void record(const Evaluation& e, std::uint64_t index, const std::string& shape);
  void merge(const BackendStats& o);
  // Whether case `index` with `ratio` would be the new worst case (reports::worse_case: independent of the
  // order cases are folded in).
  bool worse(double ratio, std::uint64_t index) const;
  nlohmann::json to_json() const;
  static BackendStats from_json(const nlohmann::json& j);  // throws FieldError (json_fields.hpp)
};

struct PairStats {
  double max_ulps = 0;
  std::int64_t shared = 0;
};

struct OpStats {
  std::int64_t cases = 0;
  double reference_seconds = 0;
};

// Statistics of a set of completed cases; the campaign folds cases into its committed total in index order.
struct Stats {
  std::map<std::string, BackendStats> backends;
  std::map<std::pair<std::string, std::string>, PairStats> pairs;
  std::map<std::string, OpStats> ops;
  std::int64_t checks = 0;

  void merge(const Stats& o);
  nlohmann::json to_json() const;
  static Stats from_json(const nlohmann::json& j);  // throws FieldError naming the field ("backends.x.run")
};

}  // namespace driftcheck::fuzz
