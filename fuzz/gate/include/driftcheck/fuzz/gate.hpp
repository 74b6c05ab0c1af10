// `driftcheck gate`: the CI gate on kernel changes (docs/GATE.md). In order: the golden checks, every case of
// the regression corpus on every selected backend of its op, and a fixed-seed campaign (cases, not seconds:
// the same verdict on a fast and a slow machine); then each backend's drift statistics per op and format are
// held to its budget and compared with the baseline. Exit 0 when every check passes, 1 when a backend exceeds
// its budget, gets measurably worse than its baseline, fails a corpus or golden case, or ran nothing; 2 for a
// bad config, baseline, corpus or golden file; 3 for an internal error.
#pragma once

#include <atomic>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

#include "driftcheck/fuzz/campaign_options.hpp"
#include "driftcheck/fuzz/gate_config.hpp"
#include "driftcheck/fuzz/progress.hpp"
#include "driftcheck/reports/gate_report.hpp"

namespace driftcheck::fuzz {

struct GateOptions {
  std::filesystem::path config;
  std::filesystem::path out_dir = "driftcheck-gate";  // gate.json, summary.md, junit.xml, campaign/
  std::optional<std::filesystem::path> junit;         // also written here
  std::optional<std::filesystem::path> summary;       // also written here
  // Substitute the mutants of every selected backend, each held to the budget and baseline of the backend it
  // breaks: measures the gate's detection power. Exit 0 when every mutant is caught and every correct backend
  // passes.
  bool mutants = false;
  int jobs = 0;  // campaign threads; 0: one per hardware thread (never changes a verdict)
  std::string command_line;
  std::ostream* log = nullptr;  // phase lines and progress (nullptr: silent)
  ProgressStyle progress;
  // Ctrl-C / SIGTERM (counted): the golden and corpus checks stop after the case in flight, the campaign as
  // `fuzz` does (grace_seconds, CampaignOptions). An interrupted gate has no verdict: exit 1, with the error
  // "interrupted ..." in its outputs, which `baseline update` refuses.
  const std::atomic<int>* interrupt = nullptr;
  double grace_seconds = kDefaultGraceSeconds;
};

// How the error of an interrupted gate run begins (GateOptions::interrupt).
inline constexpr std::string_view kGateInterrupted = "interrupted";

struct GateResult {
  reports::GateReport report;
  int exit_code = 0;
  int abandoned = 0;  // the campaign's (CampaignResult::abandoned)
};

// Throws InputError for a bad config, baseline, corpus or golden file (exit 2); UsageError for bad options.
GateResult run_gate(const GateOptions& options);

struct BaselineUpdateOptions {
  std::filesystem::path config;
  std::filesystem::path out_dir = "driftcheck-gate";  // the gate run whose statistics are taken
  bool allow_loosen = false;
  std::string reason;  // required with allow_loosen; kept in the file with the date
  std::ostream* log = nullptr;
};

// `driftcheck baseline update`: ratchets the config's baseline to the statistics of the last gate run in
// out_dir. Returns 0 when written with nothing refused, 1 when some statistic got measurably worse and
// loosening was not allowed (tightenings are still written). Throws InputError / UsageError for bad input.
int update_baseline(const BaselineUpdateOptions& options);

}  // namespace driftcheck::fuzz
