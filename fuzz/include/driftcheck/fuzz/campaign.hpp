// Fuzz campaigns: a deterministic stream of cases checked against a set of backends.
//
// Case k of seed s is draw_case(ops[k % ops.size()], s, k): replayable alone with the op, seed and index.
// Worker threads take case indices from an atomic counter; each case is prepared once (reference + baseline)
// and judged for every selected backend of its op. A failing case is deduplicated by (op, backend, verdict,
// shape class of the drawn case) and journaled at once; the first two of each (backend, verdict) are also
// saved at once as repro bundles of the drawn case. After the discovery budget, a grouping phase (its own
// budget) groups findings by cause: per (backend, verdict), a finding no group explains is shrunk to a
// minimum and its unneeded features ablated, and the result is the group's representative bundle.
// Everything is journaled (journal.hpp) so a killed campaign resumes where its last checkpoint says, and ends
// with report.json / report.md / report.html (reports/report.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/fuzz/errors.hpp"
#include "driftcheck/fuzz/known_findings.hpp"
#include "driftcheck/fuzz/oracle.hpp"
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

// "unknown backend 'NAME' (...)": says how to list backends, and for an ext.* name that its backends file
// must be given (a resumed campaign or a replayed bundle of an external backend needs --backends again).
std::string unknown_backend(std::string_view name);

// "rmsnorm,attention" -> ops; throws UsageError naming an unknown op.
std::vector<OpKind> parse_op_list(std::string_view list);

struct Selection {
  std::vector<OpKind> ops;
  std::vector<const Backend*> backends;
  std::vector<std::string> unavailable;  // backends a glob matched but that cannot run here, with why
  std::vector<std::string> errors;       // asked-for things that can run nothing (ops without backends)
};
// Resolves ops and backends. Throws UsageError when a glob matches no backend at all.
Selection select_backends(const Registry& reg, const std::vector<OpKind>& ops, const std::string& globs,
                          bool include_mutants);

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

// Runs (or resumes) a campaign into options.out_dir. Throws UsageError for bad options; internal errors
// inside the run end it early with exit code 3 and are listed in the report. See CampaignResult::abandoned
// for an interrupted run with work in flight.
CampaignResult run_campaign(const CampaignOptions& options);

// The one-off checks behind `driftcheck replay`.
struct CheckResult {
  Support support;
  Evaluation evaluation;  // meaningful only when support.ok
  // A failure that known findings explain (an upstream defect the twin reproduces): their ids.
  std::vector<std::string> known_findings;
};
CheckResult check_case(const Backend& backend, Case pristine);

// What a command needs to find a backend that is not built in: " --backends /abs/file.toml" or " --plugin
// /abs/x.so" (shell-quoted where the path needs it), "" for a built-in.
std::string definition_args(const BackendDefinition& d);
// The same for a backend known by name in `reg` ("" when it is not there, or built in).
std::string definition_args(std::string_view backend, const Registry& reg);

// The command that replays case `index` of seed `seed` alone on `backend`, with what it needs to find the
// backend (definition_args) and the campaign's model profile.
std::string stream_replay_command(OpKind op, std::uint64_t seed, std::uint64_t index, const Backend& backend,
                                  std::string_view model = {});
// The same for a backend named only ("<backend>", for a kernel that runs elsewhere), or whose definition
// arguments the caller has (`definition`, as definition_args writes them).
std::string stream_replay_command(OpKind op, std::uint64_t seed, std::uint64_t index,
                                  std::string_view backend, std::string_view model = {},
                                  std::string_view definition = {});

// The storage formats of a case, the key of its drift statistics: the activation format ("bf16"), and for
// attention with a KV cache in another format both ("bf16+fp8_e4m3fn").
std::string drift_format(const CaseSpec& spec);
// Whether every storage format of the case is in `formats` (empty: every format).
bool formats_selected(const CaseSpec& spec, const std::vector<DType>& formats);

// The campaign's op for case k: ops interleaved so every op gets every n-th index.
inline OpKind stream_op(const std::vector<OpKind>& ops, std::uint64_t k) {
  return ops[k % ops.size()];
}

}  // namespace driftcheck::fuzz
