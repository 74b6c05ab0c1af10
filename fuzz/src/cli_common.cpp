#include <filesystem>

#include <fmt/format.h>

#include "commands.hpp"
#include "driftcheck/device/plugin_backend.hpp"
#include "driftcheck/external/backends_file.hpp"
#include "driftcheck/external/isolate.hpp"
#include "driftcheck/fuzz/campaign.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>

namespace driftcheck::fuzz {

CLI::Validator at_least(double min, bool strict) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not a number";
        if (!std::isfinite(v)) return "must be a finite number, got " + text;
        if (strict ? v > min : v >= min) return {};
        return "must be " + std::string(strict ? "> " : ">= ") + CLI::detail::to_string(min) + ", got " +
               text;
      },
      strict ? "POSITIVE" : "NONNEGATIVE");
}

CLI::Validator uint64_text() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::uint64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc::result_out_of_range)
          return "'" + text + "' does not fit in 64 bits (max 18446744073709551615)";
        if (text.empty() || ec != std::errc() || end != text.data() + text.size())
          return "'" + text + "' is not a non-negative integer";
        return {};
      },
      "UINT64");
}

CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "must not be empty" : ""; }, "TEXT");
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

void add_backend_options(CLI::App& cmd, BackendArgs& a, bool isolate) {
  cmd.add_option("--backends", a.files,
                 "backends file declaring external backends (TOML, docs/PROTOCOL.md); repeatable, after the "
                 "files in DRIFTCHECK_BACKENDS");
  cmd.add_option("--plugin", a.plugins,
                 "C plugin to load, registered as plugin.<name> (docs/PLUGIN.md); repeatable");
  if (!isolate) return;
  cmd.add_option(
      "--isolate", a.isolate,
      "run the built-in backends matching GLOB out of process, a crash costing a verdict (e.g. 'gpu.*')");
  cmd.add_option("--isolate-timeout", a.isolate_timeout, "seconds an isolated backend may take per case (60)")
      ->check(at_least(0, true));
}

void extend_backends(const BackendArgs& a) {
  external::register_backends_files(extend_registry(), external::backends_files_with_environment(a.files));
  for (const auto& path : a.plugins) extend_registry().add(load_plugin(path));
  if (a.isolate.empty()) return;
  // The child `driftcheck worker` registers the same files and plugins, so it can serve a plugin in process.
  std::vector<std::string> worker_args;
  for (const auto& f : a.files)
    worker_args.insert(worker_args.end(), {"--backends", std::filesystem::absolute(f).string()});
  for (const auto& p : a.plugins)
    worker_args.insert(worker_args.end(), {"--plugin", std::filesystem::absolute(p).string()});
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw UsageError(fmt::format("--isolate: cannot find this program's path: {}", ec.message()));
  try {
    external::isolate_backends(extend_registry(), a.isolate, self, a.isolate_timeout, worker_args);
  } catch (const InvalidArgument& e) {
    throw UsageError(e.what());
  }
}

}  // namespace driftcheck::fuzz
