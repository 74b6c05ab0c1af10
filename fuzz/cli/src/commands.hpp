// Subcommands of the `driftcheck` command line that live in their own files (cmd_<name>.cpp): each adds its
// options to the CLI11 app and returns what to run once the command line is parsed. cli.cpp maps the parsed
// command to it and turns exceptions into the exit codes of cli.hpp. Shared pieces (validators, progress
// options) are defined in cli_common.cpp.
#pragma once

#include <atomic>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "driftcheck/fuzz/known_findings.hpp"
#include "driftcheck/fuzz/progress.hpp"
#include "driftcheck/fuzz/shard.hpp"

namespace driftcheck::fuzz {

struct CliContext {
  std::ostream& out;
  std::ostream& err;
  bool err_is_tty = false;
  std::string command_line;  // as typed, recorded in reports
  // Ctrl-C / SIGTERM: long commands call catch_interrupts() and pass `interrupt` to the library.
  const std::atomic<int>* interrupt = nullptr;
  std::function<void()> catch_interrupts;
};

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  // called when `app` was parsed; returns the exit code
};

// A number validator that says the rule ("must be >= 0, got -1"); CLI11's spells out DBL_MAX and admits inf.
// Numbers must be finite.
CLI::Validator at_least(double min, bool strict);
// Counts, seeds and indices are unsigned 64-bit: CLI11's strtoull would wrap "-1" to 2^64-1 and saturate what
// does not fit (an unlimited --cases); this admits plain digits that fit.
CLI::Validator uint64_text();
// Paths and names that must not be empty (--out '' would write into the current directory).
CLI::Validator non_empty();

// --grace-seconds S of the commands that run a campaign (fuzz, gate): after Ctrl-C or SIGTERM, how long the
// cases in flight may take before they are abandoned (CampaignOptions::grace_seconds).
void add_grace_option(CLI::App& cmd, double& grace_seconds);
// Ends the process with `code` once a campaign abandoned threads stuck in a case (CampaignResult::abandoned):
// flushes the output, then std::_Exit, so that no destructor (of the registry and its backends, of what
// main() owns) runs under them. The campaign's journal and reports are complete by then.
[[noreturn]] void exit_leaving_threads(int code, std::ostream& err);

// --progress MODE and -q/--quiet, which every long-running command takes (progress.hpp).
struct ProgressArgs {
  std::string mode = "auto";
  bool quiet = false;
  // The style for a stream that is (or is not) a terminal, with NO_COLOR and TERM from the environment.
  ProgressStyle style(bool is_tty) const;
};
void add_progress_options(CLI::App& cmd, ProgressArgs& a);

// --backends FILE (repeatable, after the files in DRIFTCHECK_BACKENDS) and, for commands that run backends,
// --isolate GLOB: external backends (docs/PROTOCOL.md) and isolated built-ins join the process registry.
struct BackendArgs {
  std::vector<std::string> files;
  std::vector<std::string> plugins;  // --plugin PATH: C plugins registered as plugin.<name> (docs/PLUGIN.md)
  std::string isolate;
  double isolate_timeout = 60;
};
void add_backend_options(CLI::App& cmd, BackendArgs& a, bool isolate);
// Start-up, before anything reads the registry. Returns the names of the backends the command line's own
// --backends files and --plugin libraries declared (not DRIFTCHECK_BACKENDS'), in order: what `fuzz` judges
// when no --backend is given. Throws BackendFileError / UsageError.
std::vector<std::string> extend_backends(const BackendArgs& a);

// --shard I/N|auto|auto/N and --device N|auto of `fuzz` (shard.hpp).
struct ShardArgs {
  std::string shard;
  std::string device;
};
void add_shard_options(CLI::App& cmd, ShardArgs& a);
// The shard the flags and the launcher's environment name (unsharded without --shard); selects the GPU of
// --device for every GPU run of this process and notes both on `log`. Throws UsageError.
Shard apply_shard_options(const ShardArgs& a, std::ostream* log);

// --known-findings FILE of fuzz and merge (docs/FINDINGS.md). Throws UsageError for a malformed list.
KnownFindings known_findings_option(const std::string& path);

Command add_accept_command(CLI::App& app, const CliContext& ctx);  // accept (cmd_accept.cpp)
Command add_worker_command(CLI::App& app, const CliContext& ctx);  // worker (cmd_worker.cpp)
Command add_export_command(CLI::App& app, const CliContext& ctx);  // export (cmd_export.cpp)
Command add_check_command(CLI::App& app, const CliContext& ctx);   // check (cmd_check.cpp)
// gate (cmd_gate.cpp): takes --backends / --isolate into `backends`, which start-up applies.
Command add_gate_command(CLI::App& app, const CliContext& ctx, BackendArgs& backends);
Command add_baseline_command(CLI::App& app, const CliContext& ctx);  // baseline update (cmd_gate.cpp)
Command add_corpus_command(CLI::App& app, const CliContext& ctx);    // corpus add (cmd_corpus.cpp)
// golden verify / update (cmd_golden.cpp): verify takes --backends / --isolate into `backends`.
Command add_golden_command(CLI::App& app, const CliContext& ctx, BackendArgs& backends);
Command add_compare_command(CLI::App& app, const CliContext& ctx);  // compare (cmd_compare.cpp)
// merge (cmd_merge.cpp): takes --backends / --plugin into `backends` (the shards' external backends, by
// name).
Command add_merge_command(CLI::App& app, const CliContext& ctx, BackendArgs& backends);
Command add_report_command(CLI::App& app, const CliContext& ctx);  // report (cmd_report.cpp)

}  // namespace driftcheck::fuzz
