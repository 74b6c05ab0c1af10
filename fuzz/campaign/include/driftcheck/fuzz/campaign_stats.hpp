// Campaign statistics: what a set of completed cases adds up to (per backend, per op, per pair of backends),
// mergeable in any grouping, and their form in the journal's "progress" records (docs/CAMPAIGN.md). Internal
// to the campaign runner.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/spec.hpp"
#include "driftcheck/reports/drift.hpp"

namespace driftcheck::fuzz {

// Non-finite numbers (a NaN output has an infinite error ratio) survive the journal as strings.
using files::number_from_json;
using files::number_json;

// Unsupported reasons may embed case parameters ("block_size 544: ..."); keeping only the most frequent ones
// keeps checkpoints and memory flat over long campaigns.
inline constexpr std::size_t kMaxReasons = 16;

// The cases of one backend in one bucket of a shape parameter (features.hpp shape_buckets).
struct ShapeStats {
  std::string param;
  std::string bucket;
  double order = 0;
  std::int64_t cases = 0, failed = 0;
  double max_ratio = 0;
  double sum_log2 = 0;  // of the finite, non-zero ratios
  std::int64_t log2_cases = 0;

  void add(double ratio, bool failing);
  void merge(const ShapeStats& o);
};

struct BackendStats {
  std::int64_t run = 0, unsupported = 0, passed = 0;
  std::map<std::string, StatisticalClass> stat_classes;  // the statistical tier's counts by shape class
  std::map<std::string, std::int64_t> reasons, failures;
  std::map<std::string, std::int64_t> known;  // known finding id -> failing cases it explained
  // The worst case (reports::worse_case): its verdict ("" passed), case_ratio and index.
  std::string worst_verdict;
  double worst_ratio = 0;
  std::uint64_t worst_case = 0;
  double seconds = 0;
  std::map<std::string, reports::DriftStats> drift;  // by drift_format() of the case
  std::map<std::string, ShapeStats> shapes;          // by "param|bucket"
  // Worker faults (docs/CAMPAIGN.md "Worker faults"): restarts of its workers and the seconds they took
  // (attributed to the case that noticed them), cases it was not judged on while its worker was restarted
  // or after its quarantine, and the quarantine itself (why, and the case that decided it; empty: none).
  std::int64_t worker_restarts = 0;
  double restart_seconds = 0;
  std::int64_t skipped_restarting = 0, skipped_quarantined = 0;
  std::string quarantined;
  std::uint64_t quarantined_case = 0;

  // Folds in one judged (supported) evaluation of case `index` of shape class `shape`: run, passed or
  // failures by verdict, the worst case, the statistical tier's class counts.
  void record(const Evaluation& e, std::uint64_t index, const std::string& shape);
  // Folds the same evaluation into the buckets of the case's shape parameters (features.hpp shape_buckets),
  // by its case_ratio (a NaN/Inf output infinite, no output NaN).
  void record_shape(const CaseSpec& spec, const Evaluation& e);
  void merge(const BackendStats& o);
  // Whether case `index` would be the new worst case (reports::worse_case: independent of the order cases
  // are folded in).
  bool worse(std::string_view verdict, double ratio, std::uint64_t index) const;
  nlohmann::json to_json() const;
  nlohmann::json fields_json() const;  // to_json() without "workers"
  nlohmann::json shapes_json() const;
  static BackendStats from_json(const nlohmann::json& j);  // throws FieldError (json_fields.hpp)
};

// Two backends of one op over the cases both ran: the largest divergence in ulps and relative to the pair's
// tolerance (oracle.hpp pair_divergence), and how many shared cases were beyond it or NaN/Inf on one side.
struct PairStats {
  double max_ulps = 0;
  std::int64_t shared = 0;
  double max_ratio = 0;
  std::int64_t beyond = 0;
  std::int64_t nonfinite = 0;

  void merge(const PairStats& o);
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
  std::map<std::string, std::int64_t> failing;  // failing cases by finding id (signature)
  // The worst failing case of each finding id: its case_ratio and index (the verdict is the finding's).
  std::map<std::string, std::pair<double, std::uint64_t>> failing_worst;

  // Folds one failing case of finding `id` into failing and failing_worst.
  void add_failing(const std::string& id, std::string_view verdict, double ratio, std::uint64_t index);
  // Folds a case_ratio into failing_worst.
  void fold_worst(const std::string& id, double ratio, std::uint64_t index);

  void merge(const Stats& o);
  nlohmann::json to_json() const;
  static Stats from_json(const nlohmann::json& j);  // throws FieldError naming the field ("backends.x.run")
};

}  // namespace driftcheck::fuzz
