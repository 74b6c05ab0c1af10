// The report model of a campaign: one plain struct the campaign fills in, and writers that render it. Writers
// never compute anything the model does not hold, so the JSON (for machines) and the Markdown (for people)
// always agree. Both files carry a format version and are written atomically (temp file + rename); non-finite
// numbers are written as in every driftcheck JSON file (json_text.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "driftcheck/reports/drift.hpp"
#include "driftcheck/reports/file_io.hpp"  // write_file_atomic

namespace driftcheck::reports {

// Bumped on any change a reader of report.json would notice (renamed or removed field, changed meaning).
inline constexpr int kReportFormatVersion = 1;
inline constexpr std::string_view kReportFormatName = "driftcheck.report";

struct ReasonCount {
  std::string reason;
  std::int64_t count = 0;
};

struct BackendReport {
  std::string name;
  std::string op;
  std::string kind;                          // cpu, gpu, mutant
  std::int64_t cases_run = 0;                // cases it supported and was judged on
  std::int64_t unsupported = 0;              // cases it declined (never counted as passed)
  std::vector<ReasonCount> top_unsupported;  // most frequent reasons first
  std::int64_t passed = 0;
  std::map<std::string, std::int64_t> failures_by_verdict;  // verdict name -> failing cases
  std::int64_t distinct_findings = 0;
  double worst_ratio = 0;                   // largest error / tolerance seen (> 1 is beyond tolerance)
  std::uint64_t worst_case = 0;             // case index of worst_ratio
  double check_seconds = 0;                 // time spent running and judging it
  std::optional<double> first_finding_s;    // campaign seconds until its first failing case
  std::string error;                        // non-empty when it was asked for and ran zero cases
  std::map<std::string, DriftStats> drift;  // by storage format of the cases ("bf16", "bf16+fp8_e4m3fn")
};

// A known finding (golden/known-findings.toml, docs/FINDINGS.md) as a campaign met it: an upstream defect
// that a faithful twin reproduces. Reported apart from findings and never counted in the exit code; one whose
// backends ran cases but which explained none is listed as not reproduced.
struct KnownFindingReport {
  std::string id;
  std::string summary;
  std::string upstream;
  std::string replay;
  std::vector<std::string> backends;  // the selected backends it applies to
  std::int64_t cases = 0;             // failing cases it explained
  std::int64_t backend_cases = 0;     // cases those backends were judged on
};

struct OpReport {
  std::string op;
  std::int64_t cases = 0;
  double reference_seconds = 0;  // time spent preparing (reference + baseline), once per case
};

struct FindingReport {
  std::string id;
  std::string op;
  std::string backend;
  std::string verdict;
  std::string shape_class;
  std::string detail;
  double worst_ratio = 0;
  std::uint64_t seed = 0;
  std::uint64_t case_index = 0;
  double found_after_s = 0;
  std::int64_t shrink_steps = 0;  // shrinks accepted on the way to the bundled case
  std::string bundle;             // directory of the repro bundle, relative to the campaign directory
  std::string replay;             // command that reproduces it alone
  bool shrunk = false;            // the bundle holds the shrunk case (the shrink phase handled it)
  std::int64_t shrink_tries = 0;  // shrink candidates evaluated
  bool shrink_minimal = false;    // the shrink ended at a minimum (no candidate step still failed)
  std::string shape{};            // the bundled case's shape in one line (fuzz::shape_line)
};

// Largest divergence in ulps of the output format between two backends of one op, over the cases both ran.
struct DivergenceCell {
  std::string op;
  std::string a;
  std::string b;
  double max_ulps = 0;
  std::int64_t shared_cases = 0;
};

struct Report {
  std::string tool_version;
  std::string command;
  std::uint64_t seed = 0;
  std::int64_t cases = 0;
  std::int64_t checks = 0;  // backend-case evaluations (supported ones)
  double seconds = 0;
  std::vector<OpReport> ops;
  std::vector<BackendReport> backends;
  std::vector<FindingReport> findings;
  std::vector<KnownFindingReport> known_findings;
  std::vector<DivergenceCell> divergence;
  std::vector<std::string> unavailable;  // "gpu.attn.unified: no GPU found"
  std::vector<std::string> errors;  // campaign-level failures: zero-case backends or ops, internal errors
  int exit_code = 0;
};

nlohmann::json to_json(const Report& r);
std::string to_markdown(const Report& r);

// DIR/report.json and DIR/report.md.
void write_reports(const Report& r, const std::filesystem::path& dir);

}  // namespace driftcheck::reports
