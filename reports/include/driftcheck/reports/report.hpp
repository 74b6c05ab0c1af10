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

#include "driftcheck/files/file_io.hpp"  // write_file_atomic
#include "driftcheck/reports/drift.hpp"

namespace driftcheck::reports {

// Bumped on any change a reader of report.json would notice (renamed or removed field, changed meaning).
// Version 3: a backend's and a drift statistic's worst case is the gravest verdict first (worst_verdict) and
// its ratio a case_ratio (inf for a NaN/Inf output, NaN for no output); a group's worst is over its members.
inline constexpr int kReportFormatVersion = 3;
inline constexpr std::string_view kReportFormatName = "driftcheck.report";

struct ReasonCount {
  std::string reason;
  std::int64_t count = 0;
};

// One value (or range) of a shape parameter that drives error ("seq_len" "65-128"), for one backend: how the
// cases with it went. `order` sorts the buckets along the parameter's axis.
struct ShapeBucket {
  std::string param;
  std::string bucket;
  double order = 0;
  std::int64_t cases = 0;
  std::int64_t failed = 0;
  double max_ratio =
      0;  // largest case_ratio (numbers.hpp; inf: a NaN/Inf output, NaN: a case with no output)
  double mean_log2_ratio =
      0;  // mean log2 of the finite, non-zero ratios (geometric mean of the typical case)
};

struct BackendReport {
  std::string name;
  std::string op;
  std::string kind;  // cpu, gpu, mutant
  std::string
      upstream;  // the upstream code it models (Backend::provenance: repository@commit files); may be empty
  std::int64_t cases_run = 0;                // cases it supported and was judged on
  std::int64_t unsupported = 0;              // cases it declined (never counted as passed)
  std::vector<ReasonCount> top_unsupported;  // most frequent reasons first
  std::int64_t passed = 0;
  std::map<std::string, std::int64_t> failures_by_verdict;  // verdict name -> failing cases
  std::int64_t distinct_findings = 0;
  // Its worst case (numbers.hpp worse_case: the gravest verdict, then the largest ratio): the verdict (""
  // when it passed), its case_ratio (> 1 beyond tolerance, inf a NaN/Inf output, NaN no output) and index.
  std::string worst_verdict;
  double worst_ratio = 0;
  std::uint64_t worst_case = 0;
  double check_seconds = 0;                 // time spent running and judging it
  std::optional<double> first_finding_s;    // campaign seconds until its first failing case
  std::string error;                        // non-empty when it was asked for and ran zero cases
  std::vector<ShapeBucket> by_shape;        // error against the shape parameters that drive it
  std::map<std::string, DriftStats> drift;  // by storage format of the cases ("bf16", "bf16+fp8_e4m3fn")
  // Worker faults of an out-of-process backend (docs/CAMPAIGN.md "Worker faults"; absent in older reports:
  // zero): its workers restarted after a fault and the seconds those starts took, the cases of its op it was
  // not judged on while a restart was under way or after its quarantine, and why it was quarantined (empty:
  // it was not; `error` then says so too).
  std::int64_t worker_restarts = 0;
  double restart_seconds = 0;
  std::int64_t skipped_restarting = 0;
  std::int64_t skipped_quarantined = 0;
  std::string quarantined;
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
  std::string verdict = {};
  std::string shape_class;
  std::string detail;
  double worst_ratio = 0;
  std::uint64_t seed = 0;
  std::uint64_t case_index = 0;
  double found_after_s = 0;
  std::int64_t shrink_steps = 0;  // 0: finding bundles hold the drawn case (groups hold shrunk ones)
  std::string bundle;  // directory of the repro bundle, relative to the campaign directory (empty: none kept)
  std::string replay;  // command that reproduces it alone
  std::vector<std::string> features;  // of the drawn case (features.hpp)
  std::int64_t cases = 0;             // failing cases with this signature
  std::string shape{};                // the bundled case's shape in one line (fuzz::shape_line)
};

// How far two backends of one op are apart over the cases both ran. `max_ratio` is the largest elementwise
// |a - b| / (tol_a + tol_b), each backend's own tolerance against the reference: two backends that both pass
// are within tol_a + tol_b of each other (triangle inequality through the reference), so <= 1 reads "as close
// as two correct kernels may be" and > 1 says at least one of them is wrong there. `max_ulps` is kept for
// readers of version 1.
struct DivergenceCell {
  std::string op;
  std::string a;
  std::string b;
  double max_ulps = 0;
  std::int64_t shared_cases = 0;
  double max_ratio = 0;
  std::int64_t beyond_cases = 0;     // shared cases with max_ratio > 1
  std::int64_t nonfinite_cases = 0;  // shared cases where one side had NaN/Inf and the other did not
};

// Where the error sits in one case: a grid of error / tolerance over the output (rows: tokens; columns:
// channels, or heads x head dims for attention), each cell the largest ratio of the elements it covers.
struct Heatmap {
  std::string backend;
  std::string op;
  std::string output;     // "y", "o", "out"
  std::string row_label;  // "token"
  std::string col_label;  // "channel", "head x dim"
  std::uint64_t seed = 0;
  std::uint64_t case_index = 0;
  std::string shape_class;
  std::string replay;
  std::int64_t full_rows = 0, full_cols = 0;  // the output's logical size
  std::int64_t rows = 0, cols = 0;            // the grid's size (cells pool rows and columns)
  std::int64_t col_group = 0;                 // columns per head (attention), 0 otherwise
  std::vector<double> cells;  // row-major; 0 exact, +inf NaN/Inf mismatch; empty: the case produced no output
  std::string verdict;        // the case's verdict ("" passed): why there are no cells
  std::string detail;         // the oracle's one line on the case, where it has no cells
};

// Findings that share a cause: one backend, one verdict and the smallest feature set of the case that still
// fails after shrinking (features.hpp). One representative bundle (shrunk), a few more bundles at most, and
// every other failing signature as a stream case (seed + index), replayable alone.
struct GroupMember {
  std::string id;
  std::string shape_class;
  std::uint64_t seed = 0;
  std::uint64_t case_index = 0;
  std::int64_t cases = 0;  // failing cases with this signature
  std::string bundle;      // empty: not kept (replay from the stream)
  std::string replay;
  double worst_ratio = 0;  // case_ratio of its worst failing case
  std::uint64_t worst_case = 0;
  // Its own verdict: the group's, but for rounding-level (beyond_statistical_bound) findings of a cause whose
  // group is a beyond_tolerance one (docs/CAMPAIGN.md "One cause, one group"). Absent in JSON: the group's.
  std::string verdict = {};
};

struct FindingGroup {
  std::string id;
  std::string op;
  std::string backend;
  std::string verdict = {};
  std::vector<std::string> features;    // the cause, e.g. {"GQA", "seq_len % block_size != 0"}
  bool shrunk = false;                  // features come from a shrunk case (else: the drawn case's)
  bool confirmed = false;               // every feature was checked necessary by ablation
  std::vector<std::string> not_needed;  // features the ablation found the failure does not need
  std::int64_t cases = 0;               // failing cases over every member signature
  std::vector<std::string> shape_classes;
  double worst_ratio = 0;        // case_ratio of the worst failing case over every member
  std::uint64_t worst_case = 0;  // that case's index in the stream
  // The representative's worst element (its ratio, value, reference value and tolerance).
  double representative_ratio = 0;
  double worst_value = 0, worst_reference = 0, worst_tolerance = 0;
  std::string worst_output;
  std::string detail;
  std::string representative;     // bundle directory (relative to the campaign directory)
  std::string replay;             // replays the representative alone
  std::string shape;              // the representative's shape in one line (fuzz::shape_line)
  std::int64_t shrink_steps = 0;  // shrinks accepted from the drawn case to the representative
  std::int64_t shrink_tries = 0;  // shrink candidates evaluated
  bool shrink_minimal = false;    // the shrink ended at a minimum (no candidate step still failed)
  std::vector<GroupMember> members;
  // A worker fault (crash, timeout) is grouped by the fault itself, never by case features (docs/CAMPAIGN.md
  // "Worker faults"): what the worker did ("worker killed by signal 6 (SIGABRT: Aborted) during run
  // request"), and whether the fault came back when its case ran again alone (absent: not run again).
  std::string fault;
  std::optional<bool> fault_reproduced;
};

// How long one phase of a campaign took (docs/CAMPAIGN.md "Time budget"): discovery, statistical tier,
// bundles, grouping, heatmaps.
struct PhaseTime {
  std::string name;
  double seconds = 0;
};

struct Report {
  std::string tool_version;
  std::string command;
  std::uint64_t seed = 0;
  // The flags that select the stream besides the seed, as `driftcheck replay` takes them ("--model NAME
  // --compile-set K"); empty for the default stream. A compile set the backends declared is not in `command`.
  std::string stream;
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
  std::vector<FindingGroup> groups;  // worst first
  std::vector<Heatmap> heatmaps;
  // The time budget (--seconds; none with --cases alone), the phases' times in order, this run's cases
  // started but not counted (still running at the discovery deadline, or ended past it) and not started
  // (predicted to end past it), the campaign's deferred cases (below its stream position, not run: --resume
  // runs them first), and the backends whose worst case's heatmap did not fit in the budget.
  std::optional<double> budget_seconds;
  std::vector<PhaseTime> phases;
  std::int64_t cases_abandoned = 0;
  std::int64_t cases_not_started = 0;
  std::int64_t cases_deferred = 0;
  std::int64_t heatmaps_left_out = 0;
};

// "Worst first" for groups: the graver verdict (numbers.hpp verdict_rank), then the larger worst ratio (NaN,
// no output, above every number), then more failing cases, then the id.
bool worse_group(const FindingGroup& a, const FindingGroup& b);

// Where the campaign's time went, in one line: "Time budget 10 s: discovery 9.4 s, statistical tier 0.0 s,
// bundles 0.0 s, grouping 0.0 s, heatmaps 0.3 s; 3 cases started but not counted (...; --resume runs them)".
// Empty for a report without phase times (written before they were recorded).
std::string time_line(const Report& r);

nlohmann::json to_json(const Report& r);
// Reads what to_json wrote (version 1 to 3). Throws std::runtime_error with a one-line reason.
Report report_from_json(const nlohmann::json& j);
std::string to_markdown(const Report& r);

// DIR/report.json, report.md and report.html (this run alone, html.hpp).
void write_reports(const Report& r, const std::filesystem::path& dir);

}  // namespace driftcheck::reports
