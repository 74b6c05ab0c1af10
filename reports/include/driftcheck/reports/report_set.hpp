// The divergence report over one or more runs (`driftcheck report DIR...`, docs/REPORT.md): campaign, check
// and gate outputs, each with the acceptance proxy's table when the directory holds one, side by side so that
// runs or platforms (an NVIDIA run next to an AMD run of the same seed) compare at a glance. Writers: JSON
// (driftcheck.report_set), Markdown, and one self-contained HTML file with plots (html.hpp).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "driftcheck/reports/accept_report.hpp"
#include "driftcheck/reports/gate_report.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::reports {

inline constexpr std::string_view kReportSetFormatName = "driftcheck.report_set";
inline constexpr int kReportSetFormatVersion = 1;

// One directory's run.
struct RunReport {
  std::string label;  // the directory's name, made unique within the set
  std::string dir;
  std::string kind;                    // campaign, check, gate, accept (a directory with accept.json only)
  std::optional<Report> campaign;      // report.json (a gate's: DIR/campaign/report.json)
  std::optional<AcceptReport> accept;  // accept.json
  std::optional<GateReport> gate;      // gate.json (docs/GATE.md)
  std::vector<std::string> notes;      // what the directory lacked, in one line each
};

struct ReportSet {
  std::string tool_version;
  std::string command;
  std::vector<RunReport> runs;
};

// A campaign's or a check's report as one run of a set: labelled by its directory's name.
RunReport campaign_run(Report r, const std::filesystem::path& dir);

// Reads a directory written by `fuzz`, `check`, `gate` or `accept`. Throws std::runtime_error with a one-line
// reason ("DIR: no report.json, gate.json or accept.json") when it holds none, or one is malformed.
RunReport read_run(const std::filesystem::path& dir);

// The run's own exit code: a gate's verdict is the gate's (a --mutants gate passes when its campaign finds
// every mutant); any other run's is the worse of its campaign's and its acceptance run's.
int exit_code_of(const RunReport& run);

nlohmann::json to_json(const ReportSet& s);
std::string to_markdown(const ReportSet& s);

}  // namespace driftcheck::reports
