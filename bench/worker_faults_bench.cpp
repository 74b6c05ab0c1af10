// What a crashing backend costs a healthy one (docs/CAMPAIGN.md "Worker faults"; issue 22's goal: a healthy
// backend next to one that crashes on 20% of cases keeps at least 80% of its cases/s alone). Both are Python
// workers through the Python runner (bench/workers/slow_start_rmsnorm.py: a NumPy RMSNorm whose start-up
// sleeps --startup seconds, as importing torch takes about 3 s, and which aborts on the share --crash of the
// cases). One run measures, each variant a fresh campaign of --seconds over rmsnorm with --jobs threads:
//   alone        the healthy backend alone
//   twin         next to a second healthy backend (what judging a second backend costs on this machine)
//   crasher      next to the crashing one, with the default quarantine
//   crasher/noq  next to the crashing one, --quarantine-after 0 (background restarts alone)
// and prints each variant's healthy cases/s (cases it was judged on or declined, over the campaign's
// seconds), the crashing backend's faults, restarts, skipped cases and quarantine, and the ratios against the
// goal.
//
//   worker_faults_bench [--seconds 30] [--jobs 2] [--startup 3] [--crash 0.2] [--repeat 1]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "driftcheck/device/registry.hpp"
#include "driftcheck/external/backends_file.hpp"
#include "driftcheck/fuzz/campaign.hpp"

namespace {

namespace fs = std::filesystem;
using namespace driftcheck;

struct Args {
  double seconds = 30;
  int jobs = 2;
  double startup = 3;
  double crash = 0.2;
  int repeat = 1;
};

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app{"worker_faults_bench: a healthy backend's cases/s alone and next to a crashing one"};
  app.add_option("--seconds", a.seconds, "seconds per campaign")->check(CLI::Range(1.0, 3600.0));
  app.add_option("--jobs", a.jobs, "campaign jobs")->check(CLI::Range(1, 256));
  app.add_option("--startup", a.startup, "seconds each worker takes to start")->check(CLI::Range(0.0, 60.0));
  app.add_option("--crash", a.crash, "share of cases the crashing worker aborts on")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--repeat", a.repeat, "runs of every variant (interleaved)")->check(CLI::Range(1, 100));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  return a;
}

std::string backend_toml(const std::string& name, const Args& a, double crash) {
  return fmt::format(R"([[backend]]
name = "{}"
op = "rmsnorm"
command = ["{}", "{}/bench/workers/slow_start_rmsnorm.py"]
env = {{ PYTHONPATH = "{}/python", STARTUP = "{}", CRASH = "{}" }}
startup_timeout_s = {}
numerics = {{ output_roundings = 1 }}
)",
                     name, DRIFTCHECK_PYTHON, DRIFTCHECK_SOURCE_DIR, DRIFTCHECK_SOURCE_DIR, a.startup, crash,
                     std::max(120.0, 4 * a.startup));
}

struct Variant {
  std::string name;
  std::string other;  // "": none; else its backend name
  double other_crash = 0;
  int quarantine_faults = fuzz::kDefaultQuarantineFaults;
};

struct Result {
  double healthy_rate = 0;
  reports::BackendReport other;
};

Result run(const Variant& v, const Args& a, const fs::path& dir) {
  fs::create_directories(dir);
  std::string text = "format = \"driftcheck.backends\"\nversion = 1\n\n" + backend_toml("healthy", a, 0);
  if (!v.other.empty()) text += "\n" + backend_toml(v.other, a, v.other_crash);
  Registry r;
  for (auto& d : external::load_backends_text(text, dir / "bench.toml", registry()))
    r.add(external::make_external_backend(std::move(d)));
  fuzz::CampaignOptions o;
  o.backends = &r;
  o.seconds = a.seconds;
  o.jobs = a.jobs;
  o.shrink_seconds = 0;  // discovery's throughput; the grouping phase has its own budget
  o.quarantine_faults = v.quarantine_faults;
  o.out_dir = dir / v.name;
  fs::remove_all(o.out_dir);
  const reports::Report rep = fuzz::run_campaign(o).report;
  Result out;
  for (const auto& b : rep.backends) {
    if (b.name == "ext.healthy")
      out.healthy_rate = static_cast<double>(b.cases_run + b.unsupported) / rep.seconds;
    if (!v.other.empty() && b.name == "ext." + v.other) out.other = b;
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const fs::path dir = fs::temp_directory_path() / "driftcheck_worker_faults_bench";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const Variant variants[] = {{"alone", "", 0},
                              {"twin", "twin", 0},
                              {"crasher", "crasher", a.crash},
                              {"crasher/noq", "crasher", a.crash, 0}};
  std::printf("%d jobs, %.0f s per campaign, worker start-up %.1f s, crasher aborts on %.0f%% of cases\n\n",
              a.jobs, a.seconds, a.startup, 100 * a.crash);
  std::printf("%-12s %12s %8s %8s %9s %9s %9s  %s\n", "variant", "healthy c/s", "judged", "crashes",
              "restarts", "restart s", "skipped", "quarantine");
  std::map<std::string, std::vector<double>> rates;
  for (int rep = 0; rep < a.repeat; ++rep) {
    for (const Variant& v : variants) {
      const Result r = run(v, a, dir / fmt::format("r{}", rep));
      rates[v.name].push_back(r.healthy_rate);
      const auto crashes =
          r.other.failures_by_verdict.count("crash") ? r.other.failures_by_verdict.at("crash") : 0;
      std::printf("%-12s %12.1f %8lld %8lld %9lld %9.1f %9lld  %s\n", v.name.c_str(), r.healthy_rate,
                  static_cast<long long>(r.other.cases_run), static_cast<long long>(crashes),
                  static_cast<long long>(r.other.worker_restarts), r.other.restart_seconds,
                  static_cast<long long>(r.other.skipped_restarting + r.other.skipped_quarantined),
                  r.other.quarantined.empty() ? "-" : r.other.quarantined.c_str());
      std::fflush(stdout);
    }
  }
  const double alone = median(rates["alone"]), twin = median(rates["twin"]);
  const double crasher = median(rates["crasher"]), noq = median(rates["crasher/noq"]);
  std::printf(
      "\nhealthy cases/s (median of %d): alone %.1f, next to a healthy twin %.1f, next to the crasher %.1f "
      "(quarantine off: %.1f)\n",
      a.repeat, alone, twin, crasher, noq);
  std::printf("next to the crasher / alone = %.2f (goal >= 0.80: %s)\n", crasher / alone,
              crasher / alone >= 0.8 ? "met" : "NOT MET");
  std::printf(
      "quarantine off: next to the crasher / next to a healthy twin = %.2f (what the faults cost beyond "
      "judging a second backend)\n",
      noq / twin);
  fs::remove_all(dir);
  return crasher / alone >= 0.8 ? 0 : 1;
}
