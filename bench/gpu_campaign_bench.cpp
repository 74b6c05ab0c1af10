// Whether the GPU backends slow a campaign down, measured in one run on a machine with a GPU (issue #10's two
// goals). After a warm-up campaign (kernels loaded, device slots grown), it runs:
//   A: a campaign over the CPU twins alone ("cpu.*") for --seconds, which draws K cases;
//   B: the same K cases of the same seed (the same case stream) over every backend, GPU ones included;
//   C: a campaign over gpu.attn.paged_online alone for --attn-seconds;
// all with --jobs worker threads, no shrinking. It prints
//   goal 1: checks/s of B / checks/s of A (goal >= 0.9). B judges more backends per case, and the fp64
//           reference and the baseline of a case are computed once for all of them, so this ratio credits
//           B with checks whose reference it did not pay for again. The honest companion is printed beside
//           it: cases/s of B / cases/s of A on the same stream, i.e. how much adding the GPU backends slows
//           the campaign down per case (1.0: not at all);
//   goal 2: cases/s of C / 1400 (goal >= 1: the GPU attention backend at >= 1,400 cases/s);
// and B's per-backend time per check (ms of a worker thread, running and judging it), GPU backends beside the
// CPU twins of their op.
//
//   gpu_campaign_bench [--seconds N] [--attn-seconds N] [--jobs J] [--seed S]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/campaign.hpp"

namespace {

using driftcheck::fuzz::CampaignOptions;
using driftcheck::reports::Report;

struct Args {
  double seconds = 30;
  double attn_seconds = 20;
  int jobs = 16;
  std::uint64_t seed = 1;
};

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app{
      "gpu_campaign_bench: campaign checks/s with and without the GPU backends, GPU attention cases/s"};
  app.add_option("--seconds", a.seconds, "seconds per campaign");
  app.add_option("--attn-seconds", a.attn_seconds, "seconds of the GPU attention run");
  app.add_option("--jobs", a.jobs, "worker threads")->check(CLI::Range(1, 4096));
  app.add_option("--seed", a.seed, "campaign seed");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);  // --help is 0; bad usage is 2, as for every driftcheck program
  }
  return a;
}

Report campaign(const Args& a, const std::string& globs, std::optional<double> seconds,
                std::optional<std::uint64_t> cases) {
  const auto dir = std::filesystem::temp_directory_path() / "driftcheck_gpu_campaign_bench";
  std::filesystem::remove_all(dir);
  CampaignOptions o;
  o.backend_globs = globs;
  o.seconds = seconds;
  o.cases = cases;
  o.seed = a.seed;
  o.jobs = a.jobs;
  o.out_dir = dir;
  o.shrink_seconds = 0;  // throughput of checking, not of shrinking
  o.checkpoint_seconds = 5;
  Report r = driftcheck::fuzz::run_campaign(o).report;
  std::filesystem::remove_all(dir);
  if (!r.findings.empty() || !r.errors.empty())
    std::printf("  note: %zu findings, %zu errors in this run (see a campaign over %s)\n", r.findings.size(),
                r.errors.size(), globs.c_str());
  return r;
}

double per_s(std::int64_t n, double s) {
  return s > 0 ? static_cast<double>(n) / s : 0.0;
}

void print_run(const char* label, const Report& r) {
  std::printf("%-34s %9lld cases %7.1f s %9.1f cases/s %10lld checks %10.1f checks/s\n", label,
              static_cast<long long>(r.cases), r.seconds, per_s(r.cases, r.seconds),
              static_cast<long long>(r.checks), per_s(r.checks, r.seconds));
  std::fflush(stdout);
}

void print_backends(const Report& r) {
  std::printf(
      "\nrun B, time per check (worker ms: the run and its judgement, metamorphic re-runs included)\n");
  std::printf("%-12s %-28s %10s %10s\n", "op", "backend", "checks", "ms/check");
  for (const auto& o : r.ops)
    for (const auto& b : r.backends)
      if (b.op == o.op)
        std::printf("%-12s %-28s %10lld %10.3f\n", b.op.c_str(), b.name.c_str(),
                    static_cast<long long>(b.cases_run),
                    b.cases_run ? 1e3 * b.check_seconds / static_cast<double>(b.cases_run) : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::string why;
  const auto gpu = driftcheck::registry().match("gpu.attn.paged_online", false);
  if (gpu.empty() || !gpu.front()->available(&why)) {
    std::printf("gpu_campaign_bench: no GPU backend can run here (%s): nothing to measure\n",
                gpu.empty() ? "built without a GPU toolchain" : why.c_str());
    return 1;
  }
  std::printf("gpu_campaign_bench: %d jobs, seed %llu\n", a.jobs, static_cast<unsigned long long>(a.seed));
  print_run("warm-up, every backend", campaign(a, "*", 3.0, std::nullopt));
  const Report cpu = campaign(a, "cpu.*", a.seconds, std::nullopt);
  print_run("A  CPU twins (cpu.*)", cpu);
  const Report all = campaign(a, "*", std::nullopt, static_cast<std::uint64_t>(cpu.cases));
  print_run("B  every backend, same cases", all);
  const Report attn = campaign(a, "gpu.attn.paged_online", a.attn_seconds, std::nullopt);
  print_run("C  gpu.attn.paged_online alone", attn);
  print_backends(all);

  const double checks_ratio = per_s(all.checks, all.seconds) / per_s(cpu.checks, cpu.seconds);
  const double cases_ratio = per_s(all.cases, all.seconds) / per_s(cpu.cases, cpu.seconds);
  const double attn_ratio = per_s(attn.cases, attn.seconds) / 1400.0;
  std::printf("\ngoal 1: checks/s, every backend / CPU twins alone = %.2f (goal >= 0.90: %s)\n", checks_ratio,
              checks_ratio >= 0.9 ? "met" : "NOT met");
  std::printf(
      "        cases/s on the same case stream, every backend / CPU twins alone = %.2f (1.00: the GPU "
      "backends cost the campaign nothing per case)\n",
      cases_ratio);
  std::printf("goal 2: gpu.attn.paged_online cases/s / 1400 = %.2f (goal >= 1.00: %s)\n", attn_ratio,
              attn_ratio >= 1.0 ? "met" : "NOT met");
  return 0;
}
