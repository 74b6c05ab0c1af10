#include <filesystem>
#include <ostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "driftcheck/device/gpu.hpp"
#include "driftcheck/device/plugin_backend.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/external/backends_file.hpp"
#include "driftcheck/external/isolate.hpp"
#include "driftcheck/fuzz/campaign.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>

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

void add_grace_option(CLI::App& cmd, double& grace_seconds) {
  cmd.add_option(
         "--grace-seconds", grace_seconds,
         fmt::format("after Ctrl-C or SIGTERM, how long cases in flight may take to finish before they "
                     "are abandoned and the report is written (default {:g} s; a second signal: at once)",
                     kDefaultGraceSeconds))
      ->check(at_least(0, false));
}

void exit_leaving_threads(int code, std::ostream& err) {
  err.flush();
  std::cout.flush();
  std::fflush(nullptr);
  std::_Exit(code);
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

std::vector<std::string> extend_backends(const BackendArgs& a) {
  Registry& reg = extend_registry();
  external::register_backends_files(reg, external::backends_files_with_environment({}));
  const std::size_t first = reg.all().size();
  external::register_backends_files(reg, a.files);
  for (const auto& path : a.plugins) reg.add(load_plugin(path));
  std::vector<std::string> named;
  for (std::size_t i = first; i < reg.all().size(); ++i) named.emplace_back(reg.all()[i]->name());
  if (a.isolate.empty()) return named;
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
  return named;
}

void add_shard_options(CLI::App& cmd, ShardArgs& a) {
  cmd.add_option("--shard", a.shard,
                 "run shard I of N of the case stream (I/N), or take it from the launcher: auto (mpirun, "
                 "srun, Slurm job arrays), auto/N (Kubernetes indexed Jobs); writes into OUT/shard-I-of-N");
  cmd.add_option("--device", a.device, "GPU to run on: an ordinal, or auto (the launcher's local rank)");
}

namespace {

// The GPUs this process sees; 0, with the reason, in a build without GPU support.
int visible_gpus(std::string* why) {
#if DRIFTCHECK_HAVE_GPU
  return gpu_device_count(why);
#else
  *why = "this driftcheck was built without GPU support";
  return 0;
#endif
}

}  // namespace

Shard apply_shard_options(const ShardArgs& a, std::ostream* log) {
  const Environment env = process_environment();
  const Shard shard = a.shard.empty() ? Shard{} : parse_shard(a.shard, env);
  if (a.device.empty()) return shard;
  std::string why, note;
  const int count = visible_gpus(&why);
  if (count == 0 && a.device != "auto")
    throw UsageError(fmt::format("--device {}: no GPU to select ({})", a.device, why));
  const int device = resolve_device(a.device, env, count, &note);
#if DRIFTCHECK_HAVE_GPU
  if (count > 0) gpu_use_device(device);
#endif
  if (log && !note.empty()) *log << "driftcheck: warning: " << note << "\n";
  if (log && count > 0 && shard.sharded())
    *log << fmt::format("driftcheck: shard {} on GPU {} of {}\n", shard.name(), device, count);
  return shard;
}

}  // namespace driftcheck::fuzz
