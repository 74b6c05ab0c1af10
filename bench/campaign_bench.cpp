// Campaign throughput and memory: runs the default campaign (all ops, every available non-mutant backend,
// each case's reference prepared once and shared by all backends of its op) through the campaign API and
// prints backend-case checks per second overall, per op (reference time per case) and per backend (time per
// check), plus peak RSS (VmHWM) at the start and after every segment. A long run is split into segments
// resumed from the journal, so the VmHWM column shows whether memory stays flat while cases, findings and
// statistics accumulate.
//
//   campaign_bench [--seconds N] [--segments K] [--jobs J] [--small] [--mutants] [--backend GLOBS]
//   campaign_bench --long        # 10 segments of 60 s: the 10-minute memory check
//   campaign_bench --backend cpu.attn.triton_unified   # one op's case stream (as gpu_campaign_bench's C) on
//                                                      # a CPU backend: the CPU side of an attention case
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>

#include "driftcheck/fuzz/allocator.hpp"
#include "driftcheck/fuzz/campaign.hpp"

namespace {

using driftcheck::fuzz::CampaignOptions;

// Peak resident set size in kB, from the kernel's own accounting.
long vm_hwm_kb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  return -1;
}

struct Args {
  double seconds = 10;
  int segments = 1;
  int jobs = 0;
  bool small = false;
  bool mutants = false;
  std::string backends;
};

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app{"campaign_bench: campaign throughput and memory over the CPU twins"};
  app.add_option("--seconds", a.seconds, "seconds per segment");
  app.add_option("--segments", a.segments, "segments (resumed campaigns)")->check(CLI::Range(1, 1000));
  app.add_option("--jobs", a.jobs, "worker threads (0: one per core)")->check(CLI::Range(0, 4096));
  app.add_flag("--small", a.small, "small cases only");
  app.add_flag("--mutants", a.mutants, "the mutants instead of the twins");
  app.add_option("--backend", a.backends, "backend globs, comma-separated (default: every available one)");
  app.add_flag_callback(
      "--long", [&a] { a.seconds = 60, a.segments = 10; }, "60 s x 10 segments");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);  // --help is 0; bad usage is 2, as for every driftcheck program
  }
  return a;
}

void print_breakdown(const driftcheck::reports::Report& r) {
  std::printf("\n%-28s %8s %14s\n", "op", "cases", "reference ms");
  for (const auto& o : r.ops)
    std::printf("%-28s %8lld %14.3f\n", o.op.c_str(), static_cast<long long>(o.cases),
                o.cases ? 1e3 * o.reference_seconds / static_cast<double>(o.cases) : 0.0);
  std::printf("\n%-32s %8s %10s %12s\n", "backend", "checks", "unsupp", "ms/check");
  for (const auto& b : r.backends)
    std::printf("%-32s %8lld %10lld %12.3f\n", b.name.c_str(), static_cast<long long>(b.cases_run),
                static_cast<long long>(b.unsupported),
                b.cases_run ? 1e3 * b.check_seconds / static_cast<double>(b.cases_run) : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  driftcheck::fuzz::tune_allocator();  // as the driftcheck binary does
  const Args a = parse(argc, argv);
  const auto dir = std::filesystem::temp_directory_path() / "driftcheck_campaign_bench";
  std::filesystem::remove_all(dir);
  std::printf("VmHWM at start: %ld kB\n", vm_hwm_kb());
  std::printf("%8s %10s %10s %12s %10s %12s\n", "segment", "cases", "checks", "checks/s", "findings",
              "VmHWM kB");
  driftcheck::reports::Report last;
  for (int s = 0; s < a.segments; ++s) {
    CampaignOptions o;
    o.seconds = a.seconds * (s + 1);  // the budget is the campaign's total: each segment adds a.seconds
    o.jobs = a.jobs;
    o.include_mutants = a.mutants;
    o.backend_globs = a.backends;
    o.gen.large_shapes = !a.small;
    o.out_dir = dir;
    o.resume = s > 0;
    o.shrink_seconds = 0;  // throughput of checking, not of shrinking
    o.checkpoint_seconds = 5;
    const auto before_checks = last.checks;
    const double before_seconds = last.seconds;
    last = driftcheck::fuzz::run_campaign(o).report;
    const double secs = last.seconds - before_seconds;
    std::printf("%8d %10lld %10lld %12.1f %10zu %12ld\n", s + 1, static_cast<long long>(last.cases),
                static_cast<long long>(last.checks), static_cast<double>(last.checks - before_checks) / secs,
                last.findings.size(), vm_hwm_kb());
    std::fflush(stdout);  // one line per segment even when stdout is a file
  }
  print_breakdown(last);
  std::printf("\ntotal: %lld checks in %.1f s = %.1f backend-case checks/s (%s shapes, %d jobs)\n",
              static_cast<long long>(last.checks), last.seconds,
              static_cast<double>(last.checks) / last.seconds, a.small ? "small" : "default", a.jobs);
  std::printf("VmHWM at end: %ld kB\n", vm_hwm_kb());
  std::filesystem::remove_all(dir);
  return 0;
}
