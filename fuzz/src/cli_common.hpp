// Pieces every subcommand of the command line shares: numeric validators that say the rule, and the progress
// options (--progress, --quiet) of long-running commands. Internal to the command line.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "driftcheck/fuzz/progress.hpp"

namespace driftcheck::fuzz {

// CLI11's PositiveNumber/NonNegativeNumber name their range with DBL_MAX spelled out in full: this says the
// rule ("must be > 0, got -1").
CLI::Validator at_least(double min, bool strict);

struct ProgressArgs {
  std::string mode = "auto";
  bool quiet = false;
  // The style for a stream that is (or is not) a terminal, with NO_COLOR and TERM from the environment.
  ProgressStyle style(bool is_tty) const;
};
void add_progress_options(CLI::App& cmd, ProgressArgs& a);

}  // namespace driftcheck::fuzz
