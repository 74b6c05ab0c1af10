// The report model of a gate run (`driftcheck gate`, docs/GATE.md) and its writers: gate.json (versioned,
// what `driftcheck baseline update` and `driftcheck report` read), JUnit XML (one testcase per backend x op x
// check, for CI systems) and a Markdown summary (for a CI job summary). Writers render the model only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "driftcheck/reports/drift.hpp"

namespace driftcheck::reports {

inline constexpr std::string_view kGateFormatName = "driftcheck.gate";
inline constexpr int kGateFormatVersion = 1;

enum class CheckStatus : std::uint8_t { kPassed, kFailed, kSkipped };
std::string_view check_status_name(CheckStatus s);

// One check of one backend on its op: golden, corpus, budget, baseline. A JUnit testcase.
struct GateCheck {
  std::string backend;
  std::string op;
  std::string check;
  CheckStatus status = CheckStatus::kPassed;
  std::string message;  // one line: what failed (or why it was skipped)
  std::string details;  // what failed where, each with the command that replays it
  std::vector<std::pair<std::string, std::string>> properties;  // metrics, as JUnit properties
  double seconds = 0;
};

// A statistic that moved against the baseline. `severity` is the change in units of the configured margin:
// > 1 is measurably worse (the gate fails), (0, 1] worse within the margin, < 0 better.
struct BaselineChange {
  std::string backend;
  std::string op;
  std::string format;
  std::string metric;  // worst_ratio, p99_ratio, mean_signed_ulps, max_share_beyond, cases, verdict:<name>
  double baseline = 0;
  double now = 0;
  double severity = 0;
};

// Drift statistics of one backend on one op and format: the unit the baseline ratchets.
struct GateStatsEntry {
  std::string backend;
  std::string op;
  std::string format;
  DriftStats stats;
};

// One row of the summary table: a backend over all formats of the campaign.
struct GateRow {
  std::string backend;
  std::string op;
  std::string kind;  // cpu, gpu, ext, mutant
  DriftStats total;  // every format merged
  bool failed = false;
};

// --mutants: whether the gate caught each mutant, and by which checks.
struct MutantDetection {
  std::string mutant;
  std::string mutates;
  std::vector<std::string> caught_by;  // check names that failed; empty: missed
};

// A known finding (golden/known-findings.toml, docs/FINDINGS.md) the gate met: a failure of a faithful twin
// that the upstream kernel's named defect explains (the twin with that defect repaired passes the same case).
// Reported apart from the checks: never a failure, never in the exit code, one JUnit <skipped> testcase each.
struct GateKnownFinding {
  std::string id;
  std::string summary;
  std::string replay;  // reproduces it (from the known-findings file)
  std::vector<std::string>
      backends;  // the gate's backends it explained failures of (campaign: it applies to)
  std::int64_t campaign_cases = 0, corpus_cases = 0, golden_cases = 0;  // failing cases it explained
};

struct GateReport {
  std::string tool_version;
  std::string command;
  std::string config_path;
  std::string config_sha256;  // of the config file's bytes: baseline update refuses another config's run
  std::string baseline_path;
  std::string stream;  // "seed 1, 2000 cases, ops ..., formats ...": what the statistics were measured on
  std::uint64_t seed = 0;
  std::int64_t cases = 0;
  bool mutants = false;
  double seconds = 0;
  double golden_seconds = 0, corpus_seconds = 0, campaign_seconds = 0;
  std::int64_t golden_cases = 0, corpus_cases = 0;
  std::vector<GateRow> rows;
  std::vector<GateCheck> checks;
  std::vector<BaselineChange> changes;  // worst first
  std::vector<GateStatsEntry> stats;
  std::vector<MutantDetection> detection;
  std::vector<GateKnownFinding> known;  // by id
  std::vector<std::string> notes;       // things a reader should know that do not fail the gate
  std::vector<std::string> errors;      // what made the gate fail outside any one check
  int exit_code = 0;
};

nlohmann::json to_json(const GateReport& r);
// Reads what to_json wrote. Throws std::runtime_error with a one-line reason on a malformed or foreign file.
GateReport gate_report_from_json(const nlohmann::json& j);
std::string to_junit(const GateReport& r);
std::string to_markdown(const GateReport& r);

}  // namespace driftcheck::reports
