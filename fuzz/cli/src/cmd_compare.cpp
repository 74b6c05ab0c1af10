// `driftcheck compare A B`: two backends on the same generated cases, output bit for bit (compare.hpp). The
// Markdown summary goes to stdout; --json writes one line per case.
#include <cmath>
#include <memory>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/compare.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {
namespace {

struct CompareArgs {
  CompareOptions opts;
  std::string json_file;
};

std::string case_lines(const CompareResult& r) {
  std::string out;
  for (const auto& c : r.cases)
    out += nlohmann::json{{"case", c.index},
                          {"shape_class", c.shape_class},
                          {"features", c.features},
                          {"agreement", agreement_name(c.agreement)},
                          {"elements", c.elements},
                          {"identical", c.identical},
                          {"nonfinite_a_only", c.nonfinite_a_only},
                          {"nonfinite_b_only", c.nonfinite_b_only},
                          {"max_ulps", std::isfinite(c.max_ulps) ? nlohmann::json(c.max_ulps) : "inf"},
                          {"worst", c.worst}}
               .dump() +
           "\n";
  return out;
}

int compare_command(const CompareArgs& a, const CliContext& ctx) {
  const CompareResult r = compare_backends(a.opts);
  if (!a.json_file.empty()) files::write_file_atomic(a.json_file, case_lines(r));
  ctx.out << compare_markdown(a.opts, r);
  return 0;  // a measurement: the summary says what differs
}

}  // namespace

Command add_compare_command(CLI::App& app, const CliContext& ctx) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "two backends on the same generated cases, bit for bit (a twin against its real kernel)");
  cmd->add_option("a", args->opts.a, "first backend (e.g. the real kernel, ext.<name>)")->required();
  cmd->add_option("b", args->opts.b, "second backend (e.g. its twin, cpu.attn.triton_unified)")->required();
  cmd->add_option("--seed", args->opts.seed, "case stream seed (default 1)")->check(uint64_text());
  cmd->add_option("--cases", args->opts.cases, "cases to draw (default 200)")->check(at_least(1, false));
  cmd->add_option(
         "--first", args->opts.first,
         "index of the first case drawn (default 0): with --cases 1, one campaign case on both backends")
      ->check(uint64_text());
  cmd->add_option(
         "--outputs", args->opts.outputs,
         "outputs to compare, comma-separated (default: every output; o alone for kernels without lse)")
      ->delimiter(',');
  cmd->add_option("--json", args->json_file, "write one JSON line per case to FILE");
  return {cmd, [args, &ctx] { return compare_command(*args, ctx); }};
}

}  // namespace driftcheck::fuzz
