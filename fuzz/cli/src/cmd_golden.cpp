// `driftcheck golden verify` and `driftcheck golden update` (docs/GATE.md "Golden cases").
#include <memory>
#include <ostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/golden.hpp"
#include "driftcheck/fuzz/known_findings.hpp"

namespace driftcheck::fuzz {
namespace {

struct GoldenArgs {
  std::string dir = "golden";
  std::vector<std::string> cases;
  std::string backends;  // globs; empty: every available non-mutant backend
};

bool has_wildcard(const std::string& s) {
  return s.find_first_of("*?,") != std::string::npos;
}

// One backend on the golden cases of its op: a line per case, and whether it failed (or, named exactly,
// ran none).
bool verify_backend(const Backend& b, const std::vector<GoldenCase>& golden, bool named, std::ostream& out) {
  int run = 0;
  bool failed = false;
  for (const auto& g : golden) {
    if (g.spec.op != b.op()) continue;
    if (const Support s = b.supports(g.pristine); !s.ok) {
      out << fmt::format("  {} on {}: unsupported: {}\n", g.name, b.name(), s.reason);
      continue;
    }
    const PreparedCase p = prepare_golden(g);
    const Evaluation e = evaluate(b, p);
    if (e.verdict == Verdict::kUnsupported) continue;
    ++run;
    // A failure a known finding explains is the upstream defect the twin reproduces: named, not failed.
    const std::string known = is_failure(e.verdict) ? explained_ids(builtin_known_findings(), b, p) : "";
    failed = failed || (is_failure(e.verdict) && known.empty());
    out << fmt::format("  {} on {}: {} {} worst_ratio {:.4g}{}{}\n", g.name, b.name(),
                       !is_failure(e.verdict) ? "PASS"
                       : known.empty()        ? "FAIL"
                                              : "KNOWN FINDING " + known,
                       verdict_name(e.verdict), e.worst_ratio, e.detail.empty() ? "" : ": ", e.detail);
  }
  if (run == 0 && named)
    out << fmt::format("  {} ran none of the golden cases: counts as a failure\n", b.name());
  return failed || (run == 0 && named);
}

int verify(const GoldenArgs& a, std::ostream& out) {
  const std::vector<GoldenCase> golden = load_golden(a.dir, a.cases);
  bool failed = false;
  for (const auto& g : golden) {
    const auto changes = reference_changes(g);
    out << fmt::format("reference {}: {}\n", g.name, changes.empty() ? "bit-identical" : "MOVED");
    for (const auto& line : changes) out << "  " << line << "\n";
    failed = failed || !changes.empty();
  }
  const Selection sel = select_backends(registry(), {}, a.backends, false);
  for (const Backend* b : sel.backends)
    failed = verify_backend(*b, golden, !a.backends.empty() && !has_wildcard(a.backends), out) || failed;
  for (const auto& u : sel.unavailable) out << "not run here: " << u << "\n";
  return failed ? 1 : 0;
}

}  // namespace

Command add_golden_command(CLI::App& app, const CliContext& ctx, BackendArgs& backends) {
  auto* cmd = app.add_subcommand("golden", "golden cases: stored inputs and fp64 reference outputs");
  cmd->require_subcommand(1);
  auto a = std::make_shared<GoldenArgs>();
  auto* verify_cmd =
      cmd->add_subcommand("verify",
                          "check every stored SHA-256, recompute each reference (bit-identical), and "
                          "judge the backends on the golden cases");
  auto* update_cmd =
      cmd->add_subcommand("update", "regenerate the golden files from their definitions, on purpose");
  for (auto* sub : {verify_cmd, update_cmd}) {
    sub->add_option("--dir", a->dir, "golden directory (default ./golden)");
    sub->add_option("--case", a->cases, "only these cases (repeatable)");
  }
  verify_cmd->add_option("--backend", a->backends, "backend globs, comma-separated (default: all available)");
  add_backend_options(*verify_cmd, backends, true);
  return {cmd, [a, verify_cmd, &ctx] {
            if (verify_cmd->parsed()) return verify(*a, ctx.out);
            for (const auto& line : update_golden(a->dir, a->cases)) ctx.out << line << "\n";
            return 0;
          }};
}

}  // namespace driftcheck::fuzz
