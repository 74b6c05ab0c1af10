#include "commands.hpp"

namespace driftcheck::fuzz {

CLI::Validator at_least(double min, bool strict) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not a number";
        if (strict ? v > min : v >= min) return {};
        return "must be " + std::string(strict ? "> " : ">= ") + CLI::detail::to_string(min) + ", got " +
               text;
      },
      strict ? "POSITIVE" : "NONNEGATIVE");
}

ProgressStyle ProgressArgs::style(bool is_tty) const {
  ProgressMode m = ProgressMode::kAuto;
  parse_progress_mode(mode, &m);  // the option's validator admits known names only
  return ProgressStyle::from_environment(m, quiet, is_tty);
}

void add_progress_options(CLI::App& cmd, ProgressArgs& a) {
  cmd.add_option("--progress", a.mode,
                 "progress on stderr: auto (bar on a terminal, else a line every 10 s), bar, lines, json "
                 "(one JSON object per line), none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "json", "none"}));
  cmd.add_flag("-q,--quiet", a.quiet, "no progress and no summary on stderr (errors still print)");
}

}  // namespace driftcheck::fuzz
