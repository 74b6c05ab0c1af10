// What a campaign is asked to do and what it gives back: the types that the campaign, the gate, the
// acceptance proxy, shards and the command line share (docs/CAMPAIGN.md), apart from the runner
// (campaign.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/fuzz/known_findings.hpp"
#include "driftcheck/fuzz/progress.hpp"
#include "driftcheck/fuzz/shard.hpp"
#include "driftcheck/fuzz/spec.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {

inline constexpr double kDefaultSeconds = 20.0;
// After Ctrl-C or SIGTERM, how long cases in flight may take to finish before the campaign abandons them:
// longer than any ordinary case (milliseconds), shorter than the 10 s a container runtime waits between
// SIGTERM and SIGKILL, so the report is written first.
inline constexpr double kDefaultGraceSeconds = 5.0;
inline constexpr std::string_view kToolVersion = "0.1.0";
// Quarantine (docs/CAMPAIGN.md "Worker faults"): a backend is not run any more once at least
// CampaignOptions::quarantine_faults of its judged cases ended in a worker crash or timeout and those are at
// least this share of its judged cases so far, or once that many in a row did.
inline constexpr double kQuarantineShare = 0.1;
inline constexpr int kDefaultQuarantineFaults = 5;

struct CampaignOptions {
  std::vector<OpKind> ops;       // empty: every op (or, with backend_globs, the ops of the selected backends)
  std::string backend_globs;     // empty: every available non-mutant backend
  bool include_mutants = false;  // add mutant.* backends (also implied by a glob starting with "mutant")
  std::optional<double> seconds;       // budget; with neither seconds nor cases, kDefaultSeconds
  std::optional<std::uint64_t> cases;  // total case indices, resumed ones included
  std::uint64_t seed = 1;
  // This process runs the case indices k with k % shard.count == shard.index; `cases` stays the total over
  // all shards, so the shards of `--cases N` together run exactly the unsharded campaign's cases.
  Shard shard;
  int jobs = 0;  // 0: one per hardware thread
  std::filesystem::path out_dir = "driftcheck-out";
  bool resume = false;
  int shrink_steps = 1000;  // candidates the shrink of one finding may evaluate
  // A shrink spends at most this long on one finding, so one huge attention case cannot eat the whole phase.
  double shrink_seconds_per_finding = 10.0;
  std::optional<double> shrink_seconds;  // grouping phase after discovery; default 25% of seconds (>= 5 s)
  double checkpoint_seconds = 2.0;       // progress records in the journal
  std::string command_line;              // recorded in the report
  std::ostream* log = nullptr;           // progress and summary (nullptr: silent)
  ProgressStyle progress;                // how progress is shown on `log` (progress.hpp)
  bool summary = true;  // print the summary table on `log` at the end (the gate prints its own)
  GenOptions gen;
  // --compile-set K: gen.compile_set for a new campaign. Unset: the smallest `compile_set` the selected
  // backends declare (Backend::compile_set(), a backends file's key), or none. A resumed campaign keeps its
  // journal's.
  std::optional<int> compile_set;
  // Only cases whose storage formats are all listed are judged (empty: every case); the others are drawn and
  // skipped, so case k stays case k of the stream and replays alone.
  std::vector<DType> formats;
  const Registry* backends = nullptr;  // nullptr: the built-in registry()
  // Upstream defects faithful twins reproduce (known_findings.hpp): failures they explain are reported apart
  // and do not make the exit code 1. nullptr: the list built into the binary.
  const KnownFindings* known_findings = nullptr;
  // Signals received (Ctrl-C, SIGTERM), counted by a signal handler. After the first, no new case, shrink
  // candidate or bundle is started; the work in flight gets grace_seconds to finish, then the campaign
  // abandons it (at once after a second signal), and the report is written from what was recorded;
  // --resume continues the campaign later (docs/CAMPAIGN.md "Interrupting").
  const std::atomic<int>* interrupt = nullptr;
  double grace_seconds = kDefaultGraceSeconds;
  // Worker crashes and timeouts after which a backend is quarantined (with kQuarantineShare); 0: never.
  int quarantine_faults = kDefaultQuarantineFaults;
};

struct CampaignResult {
  reports::Report report;
  int exit_code = 0;  // 0 clean, 1 findings or zero-case errors, 3 internal error
  // Threads still inside a case (a backend, the reference or a shrink candidate) when an interrupt's grace
  // ran out. They cannot be cancelled: they run on, sealed off from the journal, the findings and the report,
  // and hold a share of the campaign's own state. What they use that the caller owns (options.backends and
  // known_findings, the built-in registry, options.log) must outlive them: the caller ends the process
  // without running destructors (std::_Exit, as the CLI does) instead of returning normally.
  int abandoned = 0;
};

}  // namespace driftcheck::fuzz
