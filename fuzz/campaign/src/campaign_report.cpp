#include "driftcheck/fuzz/campaign_report.hpp"

#include "campaign_groups.hpp"

#include <algorithm>
#include <ostream>
#include <tuple>

#include <fmt/format.h>

#include "driftcheck/reports/numbers.hpp"

namespace driftcheck::fuzz {
namespace {

std::vector<reports::ReasonCount> top_reasons(const std::map<std::string, std::int64_t>& reasons) {
  std::vector<reports::ReasonCount> out;
  for (const auto& [r, n] : reasons) out.push_back({r, n});
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.count > b.count; });
  if (out.size() > 5) out.resize(5);
  return out;
}

// Why a backend that was asked for ran nothing, in one line. A compile set narrows what is drawn, so it may
// leave a backend's whole supported space out: the line says so.
std::string zero_case_reason(const Backend& b, const BackendStats& s, int compile_set) {
  std::string why;
  if (!b.available(&why)) return fmt::format("unavailable: {}", why);
  if (s.unsupported > 0) {
    const auto top = top_reasons(s.reasons);
    return fmt::format("all {} of its cases unsupported, mostly: {}{}", s.unsupported,
                       top.empty() ? "?" : top.front().reason,
                       compile_set > 0
                           ? fmt::format(" (the cases come from a compile set of {}: --compile-set "
                                         "with a larger set, or 0, widens them)",
                                         compile_set)
                           : "");
  }
  return "no case of its op was drawn within the budget";
}

reports::BackendReport backend_report(const Backend& b, const BackendStats& s,
                                      const std::map<std::string, FindingState>& findings, int compile_set) {
  reports::BackendReport br;
  br.name = std::string(b.name()), br.op = std::string(op_name(b.op()));
  br.upstream = std::string(b.provenance());
  br.kind = std::string(backend_kind_name(b.kind()));
  br.cases_run = s.run, br.unsupported = s.unsupported, br.top_unsupported = top_reasons(s.reasons);
  br.passed = s.passed, br.failures_by_verdict = s.failures;
  br.worst_verdict = s.worst_verdict, br.worst_ratio = s.worst_ratio, br.worst_case = s.worst_case;
  br.check_seconds = s.seconds;
  br.drift = s.drift;
  for (const auto& [sig, f] : findings) {
    if (f.report.backend != br.name) continue;
    ++br.distinct_findings;
    if (!br.first_finding_s || f.report.found_after_s < *br.first_finding_s)
      br.first_finding_s = f.report.found_after_s;
  }
  br.worker_restarts = s.worker_restarts, br.restart_seconds = s.restart_seconds;
  br.skipped_restarting = s.skipped_restarting, br.skipped_quarantined = s.skipped_quarantined;
  br.quarantined = s.quarantined;
  if (s.run == 0)
    br.error = fmt::format("backend {} ran zero cases: {}", br.name, zero_case_reason(b, s, compile_set));
  // Quarantined: it was not tested on the rest of the campaign, which the campaign's errors say too.
  if (!s.quarantined.empty())
    br.error = fmt::format("backend {} {}; its findings are kept, {} later cases of its op were not judged",
                           br.name, s.quarantined, s.skipped_quarantined);
  for (const auto& [key, sh] : s.shapes)
    br.by_shape.push_back({sh.param, sh.bucket, sh.order, sh.cases, sh.failed, sh.max_ratio,
                           sh.log2_cases > 0 ? sh.sum_log2 / static_cast<double>(sh.log2_cases) : 0.0});
  return br;
}

// Every known finding that applies to a selected backend: how many failing cases it explained and how many
// cases its backends ran (one that explained none while they ran cases did not reproduce).
std::vector<reports::KnownFindingReport> known_report(const ReportInputs& in) {
  std::vector<reports::KnownFindingReport> out;
  for (const KnownFinding& f : in.known.findings) {
    reports::KnownFindingReport k{f.id, f.summary, f.upstream, f.replay, {}, 0, 0};
    for (const Backend* b : in.selection.backends) {
      const auto applies = applicable_findings(in.known, *b);
      if (std::find(applies.begin(), applies.end(), &f) == applies.end()) continue;
      k.backends.emplace_back(b->name());
      const auto it = in.stats.backends.find(std::string(b->name()));
      if (it == in.stats.backends.end()) continue;
      k.backend_cases += it->second.run;
      const auto n = it->second.known.find(f.id);
      if (n != it->second.known.end()) k.cases += n->second;
    }
    if (!k.backends.empty()) out.push_back(std::move(k));
  }
  return out;
}

}  // namespace

reports::Report build_report(const ReportInputs& in) {
  reports::Report r;
  r.tool_version = std::string(kToolVersion), r.command = in.opts.command_line, r.seed = in.opts.seed;
  if (const std::string s = stream_args(in.opts.gen); !s.empty()) r.stream = s.substr(1);  // no leading space
  r.cases = static_cast<std::int64_t>(in.cases), r.checks = in.stats.checks, r.seconds = in.seconds;
  r.unavailable = in.selection.unavailable, r.errors = in.selection.errors;
  for (OpKind op : in.selection.ops) {
    const auto it = in.stats.ops.find(std::string(op_name(op)));
    const OpStats s = it == in.stats.ops.end() ? OpStats{} : it->second;
    r.ops.push_back({std::string(op_name(op)), s.cases, s.reference_seconds});
    if (s.cases == 0) r.errors.push_back(fmt::format("op {} ran zero cases", op_name(op)));
  }
  for (const Backend* b : in.selection.backends) {
    const auto it = in.stats.backends.find(std::string(b->name()));
    r.backends.push_back(backend_report(*b, it == in.stats.backends.end() ? BackendStats{} : it->second,
                                        in.findings, in.opts.gen.compile_set));
    if (!r.backends.back().error.empty()) r.errors.push_back(r.backends.back().error);
  }
  const FailingCases failing{in.stats.failing, in.stats.failing_worst};
  r.groups = report_groups(in.findings, in.groups, failing);
  for (const auto& [sig, f] : in.findings) {
    const FailingOf n = failing_of(f.report, failing);
    r.findings.push_back(f.report);
    r.findings.back().cases = n.cases, r.findings.back().worst_ratio = n.worst_ratio;
  }
  r.heatmaps = in.heatmaps;
  // Stream order, not discovery order: the report does not depend on which worker met a case first.
  std::sort(r.findings.begin(), r.findings.end(), [](const auto& a, const auto& b) {
    return std::tie(a.case_index, a.id) < std::tie(b.case_index, b.id);
  });
  for (const auto& [key, p] : in.stats.pairs) {
    const Backend* a = in.opts.backends->find(key.first);
    r.divergence.push_back({a ? std::string(op_name(a->op())) : "?", key.first, key.second, p.max_ulps,
                            p.shared, p.max_ratio, p.beyond, p.nonfinite});
  }
  r.known_findings = known_report(in);
  r.errors.insert(r.errors.end(), in.internal_errors.begin(), in.internal_errors.end());
  r.exit_code = !in.internal_errors.empty() ? 3 : (!r.errors.empty() || !r.findings.empty()) ? 1 : 0;
  return r;
}

void print_summary(const CampaignOptions& opts, const reports::Report& r, bool written,
                   std::optional<double> report_seconds) {
  // JSON progress is for machines, which read report.json rather than a table on stderr.
  if (opts.log == nullptr || !opts.summary || opts.progress.mode == ProgressMode::kJson) return;
  std::ostream& o = *opts.log;
  o << fmt::format("\n{:<44} {:>8} {:>8} {:>8} {:>8} {:>10}\n", "backend", "run", "passed", "unsupp",
                   "failed", "worst");
  for (const auto& b : r.backends) {
    std::int64_t failed = 0;
    for (const auto& [v, n] : b.failures_by_verdict) failed += n;
    o << fmt::format("{:<44} {:>8} {:>8} {:>8} {:>8} {}\n", b.name, b.cases_run, b.passed, b.unsupported,
                     failed, b.cases_run > 0 ? reports::worst_cell(b.worst_verdict, b.worst_ratio) : "-");
  }
  o << fmt::format(
      "\n{} cases, {} checks in {:.1f} s ({:.0f} checks/s); {} failing signatures in {} groups\n", r.cases,
      r.checks, r.seconds, r.seconds > 0 ? static_cast<double>(r.checks) / r.seconds : 0.0, r.findings.size(),
      r.groups.size());
  if (const std::string t = reports::time_line(r); !t.empty())
    o << t << (report_seconds ? fmt::format("; report {:.1f} s", *report_seconds) : "") << "\n";
  for (const auto& b : r.backends)
    if (b.worker_restarts > 0 || b.skipped_restarting > 0)
      o << fmt::format("{}: {} worker restarts ({:.1f} s starting them), {} cases skipped while restarting\n",
                       b.name, b.worker_restarts, b.restart_seconds, b.skipped_restarting);
  for (const auto& g : r.groups) {
    std::string cause;
    for (const auto& f : g.features) cause += (cause.empty() ? "" : " + ") + f;
    // A worker fault's group: the fault, and whether it came back alone (it is never shrunk).
    const std::string how = !g.fault.empty() ? (!g.fault_reproduced   ? ", not run again"
                                                : *g.fault_reproduced ? ", reproduced alone"
                                                                      : ", did not reproduce alone")
                            : g.shrunk       ? ""
                                             : ", not shrunk";
    if (!g.fault.empty()) cause = g.fault;
    o << fmt::format("  {} {} [{}{}] {} cases -> {}\n", g.backend, g.verdict,
                     cause.empty() ? "any case" : cause, how, g.cases, g.replay);
    if (g.shrunk)
      o << fmt::format("    repro: {} ({} shrinks accepted of {} tried{})\n", g.shape, g.shrink_steps,
                       g.shrink_tries, g.shrink_minimal ? ", minimal" : "");
  }
  for (const auto& k : r.known_findings) {
    if (k.cases > 0)
      o << fmt::format("known finding {}: {} failing cases (upstream defect, docs/FINDINGS.md)\n", k.id,
                       k.cases);
    else if (k.backend_cases > 0)
      o << fmt::format("known finding {}: not reproduced in {} cases of its backends\n", k.id,
                       k.backend_cases);
  }
  if (opts.include_mutants) {
    o << "time to first finding per mutant:\n";
    for (const auto& b : r.backends) {
      if (b.kind != backend_kind_name(BackendKind::kMutant)) continue;
      o << fmt::format("  {:<44} {}\n", b.name,
                       b.first_finding_s ? fmt::format("{:.2f} s", *b.first_finding_s) : "NEVER FOUND");
    }
  }
  for (const auto& e : r.errors) o << "error: " << e << "\n";
  o << (written ? fmt::format("report: {}\n", (opts.out_dir / "report.md").string())
                : "report: not written\n");
}

}  // namespace driftcheck::fuzz
