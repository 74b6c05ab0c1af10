// report.md: the campaign report for people. It opens with one line per finding group, worst first, then the
// backend table (each column explained under it), the groups with their replay commands, the known findings
// apart (upstream defects, never part of the verdict), and the divergence matrices relative to each pair's
// tolerance.
#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "driftcheck/reports/numbers.hpp"
#include "driftcheck/reports/report.hpp"
#include "markdown.hpp"
#include "report_views.hpp"

namespace driftcheck::reports {
namespace {

std::string verdict_counts(const std::map<std::string, std::int64_t>& m) {
  std::string out;
  for (const auto& [verdict, n] : m) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", verdict, n);
  return out.empty() ? "-" : out;
}

std::string top_reasons(const BackendReport& b) {
  if (b.top_unsupported.empty()) return "-";
  const auto& top = b.top_unsupported.front();
  return fmt::format(
      "{} ({}x){}", top.reason, top.count,
      b.top_unsupported.size() > 1 ? fmt::format(" +{} more", b.top_unsupported.size() - 1) : "");
}

std::string joined(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : std::string(sep)) + s;
  return out;
}

void markdown_backends(const Report& r, std::string& md) {
  md +=
      "## Backends\n\n| backend | kind | op | cases run | passed | unsupported | failures | worst error / "
      "tolerance | first finding | top unsupported reason "
      "|\n|---|---|---|---:|---:|---:|---|---:|---:|---|\n";
  for (const auto& b : r.backends) {
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", b.name, b.kind, b.op,
                      b.cases_run, b.passed, b.unsupported, verdict_counts(b.failures_by_verdict),
                      b.cases_run > 0 ? worst_cell(b.worst_verdict, b.worst_ratio) : "-",
                      b.first_finding_s ? fmt::format("{:.2f} s", *b.first_finding_s) : "-",
                      cell(top_reasons(b)));
  }
  md += fmt::format(
      "\n*cases run*: cases the backend supported and was judged on; *unsupported*: cases it declined (never "
      "counted as passed); *failures*: failing cases by verdict (docs/ORACLE.md); *worst error / tolerance*: "
      "its worst case, the gravest verdict first: a ratio is the largest error of any element in units of "
      "that "
      "element's derived tolerance (<= 1 passes; above 10^4 the number only measures the garbage, so it is "
      "not "
      "printed); NaN/Inf: a NaN or infinite output where the reference is finite; no output: the backend "
      "raised an error, its worker crashed or timed out; other verdicts say what happened (out-of-bounds "
      "write, batch-dependent bits, statistically improbable); *first finding*: campaign seconds to the "
      "first "
      "failing case.\n\n");
  std::string upstream;
  for (const auto& b : r.backends)
    if (!b.upstream.empty()) upstream += fmt::format("- {}: {}\n", b.name, b.upstream);
  if (!upstream.empty()) md += "Upstream code each backend models (docs/BACKENDS.md):\n\n" + upstream + "\n";
}

// Only when a backend's workers faulted: what that cost (docs/CAMPAIGN.md "Worker faults").
void markdown_worker_faults(const Report& r, std::string& md) {
  std::string rows;
  for (const auto& b : r.backends)
    if (has_worker_faults(b))
      rows += fmt::format("| {} | {} | {:.1f} | {} | {} |\n", b.name, b.worker_restarts, b.restart_seconds,
                          b.skipped_restarting, b.quarantined.empty() ? "-" : cell(quarantine_text(b)));
  if (rows.empty()) return;
  md +=
      "## Worker faults\n\n| backend | worker restarts | seconds starting them | cases skipped while "
      "restarting | quarantined |\n|---|---:|---:|---:|---|\n" +
      rows +
      "\n*worker restarts*: workers started in place of one that crashed, timed out or broke the protocol "
      "(in the background: the other backends do not wait); *cases skipped while restarting*: cases of "
      "its op it was not judged on because no worker of it was ready; *quarantined*: it faulted too often "
      "and was not run any more (its findings are kept; docs/CAMPAIGN.md \"Worker faults\").\n\n";
}

void markdown_group_lines(const Report& r, std::string& md) {
  md += fmt::format("## Findings by cause ({} groups from {} failing signatures, worst first)\n\n",
                    r.groups.size(), r.findings.size());
  if (r.groups.empty() && r.findings.empty()) {
    md += "None.\n\n";
    return;
  }
  if (r.groups.empty()) {  // a run that did not group its findings (version 1, or cut short): its signatures
    md +=
        "| backend | verdict | shape class | worst | case | detail | replay "
        "|\n|---|---|---|---:|---|---|---|\n";
    for (const auto& f : r.findings)
      md += fmt::format("| {} | {} | {} | {} | seed {} case {} | {} | `{}` |\n", f.backend, f.verdict,
                        f.shape_class, worst_cell(f.verdict, f.worst_ratio), f.seed, f.case_index,
                        cell(f.detail), cell(f.replay));
    md += "\n";
    return;
  }
  for (const auto& g : r.groups) {
    md += fmt::format("1. **{}** {} — {} — {} failing cases, {} shape classes — worst {} — `{}`\n", g.backend,
                      g.verdict, group_cause(g), g.cases, g.shape_classes.size(),
                      worst_cell(g.verdict, g.worst_ratio), cell(g.replay));
  }
  md += "\n";
}

void markdown_groups(const Report& r, std::string& md) {
  if (r.groups.empty()) return;
  md +=
      "## Finding groups\n\nA group is one backend, one verdict and the smallest set of case features that "
      "still "
      "fails after shrinking (ablation: each feature removed in turn, the failure must go away). The "
      "representative bundle is the shrunk case; other failing signatures are kept as stream cases (seed + "
      "index), each replayable alone.\n\n";
  for (const auto& g : r.groups) {
    md += fmt::format("### {} {} — {}\n\n", g.backend, g.verdict, group_cause(g));
    md += fmt::format("- worst: {}\n", cell(group_worst(g)));
    md += fmt::format("- {} failing cases over {} signatures; shape classes: {}\n", g.cases, g.members.size(),
                      cell(joined(g.shape_classes, ", ")));
    if (!g.not_needed.empty())
      md += fmt::format("- not needed (the failure stays without them): {}\n", joined(g.not_needed, ", "));
    md += fmt::format("- representative: `{}` — replay: `{}`\n",
                      g.representative.empty() ? "(none)" : g.representative, cell(g.replay));
    if (!g.shape.empty())
      md += fmt::format("- repro: {} ({} shrinks accepted of {} tried{})\n", cell(g.shape), g.shrink_steps,
                        g.shrink_tries, g.shrink_minimal ? ", minimal" : "");
    std::size_t shown = 0;
    for (const auto& m : g.members) {
      if (shown++ == 5) {
        md += fmt::format("- ... {} more members in report.json\n", g.members.size() - 5);
        break;
      }
      md += fmt::format("- member {} ({} cases{}): `{}`\n", m.shape_class, m.cases,
                        m.verdict == g.verdict ? "" : ", " + m.verdict, cell(m.replay));
    }
    md += "\n";
  }
}

void markdown_known_findings(const Report& r, std::string& md) {
  if (r.known_findings.empty()) return;
  md += fmt::format(
      "## Known findings ({})\n\nUpstream defects that faithful twins reproduce (docs/FINDINGS.md), listed "
      "apart: they are not findings, not in any group, and never change this report's verdict or exit code. "
      "A case counts here only when the backend with the defect repaired passes it.\n\n"
      "| id | summary | backends | failing cases | of cases run | upstream | replay |\n"
      "|---|---|---|---:|---:|---|---|\n",
      r.known_findings.size());
  for (const auto& k : r.known_findings) {
    auto c = known_cells(k);
    for (auto& text : c) text = cell(text);
    md += fmt::format("| {} | {} | {} | {} | {} | {} | `{}` |\n", c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
  }
  md += "\n";
}

// One square matrix per op: rows and columns are the backends that shared at least one case.
void markdown_divergence(const Report& r, std::string& md) {
  md +=
      "## Divergence between backends\n\nEach cell is the largest |a - b| / (tol_a + tol_b) over the cases "
      "both "
      "ran (count in parentheses), with each backend's own tolerance against the fp64 reference: two correct "
      "backends are within tol_a + tol_b of each other, so <= 1 reads \"as close as two correct kernels may "
      "be\" and > 1 means at least one of the two is wrong there.\n\n";
  if (r.divergence.empty()) {
    md += "No pair of backends ran a common case.\n\n";
    return;
  }
  std::set<std::string> ops;
  for (const auto& d : r.divergence) ops.insert(d.op);
  for (const auto& op : ops) {
    const auto names = divergence_names(r, op);
    md += fmt::format("### {}\n\n|  |", op);
    for (const auto& n : names) md += fmt::format(" {} |", n);
    md += "\n|---|";
    for (std::size_t i = 0; i < names.size(); ++i) md += "---:|";
    md += "\n";
    for (const auto& row : names) {
      md += fmt::format("| {} |", row);
      for (const auto& col : names) {
        const DivergenceCell* d = find_divergence(r, op, row, col);
        md += fmt::format(" {} |", row == col ? "-"
                                   : d == nullptr
                                       ? ""
                                       : fmt::format("{} ({})",
                                                     std::isnan(d->max_ratio) && d->nonfinite_cases == 0
                                                         ? fmt::format("{:.3g} ulps", d->max_ulps)
                                                         : divergence_text(d->max_ratio, d->nonfinite_cases),
                                                     d->shared_cases));
      }
      md += "\n";
    }
    md += "\n";
  }
}

void markdown_list(std::string_view title, const std::vector<std::string>& items, std::string& md) {
  if (items.empty()) return;
  md += fmt::format("## {}\n\n", title);
  for (const auto& s : items) md += fmt::format("- {}\n", cell(s));
  md += "\n";
}

}  // namespace

std::array<std::string, kKnownColumns> known_cells(const KnownFindingReport& k) {
  return {k.id,
          k.summary,
          joined(k.backends, ", "),
          k.cases > 0           ? fmt::format("{}", k.cases)
          : k.backend_cases > 0 ? "not reproduced"
                                : "not run",
          fmt::format("{}", k.backend_cases),
          k.upstream,
          k.replay};
}

std::string group_cause(const FindingGroup& g) {
  if (!g.fault.empty())
    return g.fault + (!g.fault_reproduced   ? " (not run again)"
                      : *g.fault_reproduced ? " (reproduced when its case ran again alone)"
                                            : " (did not reproduce when its case ran again alone)");
  if (g.features.empty()) return g.shrunk ? "any case (no feature needed)" : "not shrunk yet";
  return joined(g.features, " + ") + (!g.shrunk      ? " (not shrunk)"
                                      : !g.confirmed ? " (ablation incomplete)"
                                                     : "");
}

bool has_worker_faults(const BackendReport& b) {
  return b.worker_restarts > 0 || b.skipped_restarting > 0 || !b.quarantined.empty();
}

std::string quarantine_text(const BackendReport& b) {
  return fmt::format("{}; {} later cases of its op not judged", b.quarantined, b.skipped_quarantined);
}

std::string group_worst(const FindingGroup& g) {
  const std::string worst = fmt::format("{} at case {}", worst_cell(g.verdict, g.worst_ratio), g.worst_case);
  // An unshrunk group keeps no worst element (value, reference and tolerance stay 0), only its first
  // finding's oracle detail, which names them; verdicts that are not about error size show their detail
  // anyway.
  const bool about_error_size = worst_cell(g.verdict, 1.0) == ratio_text(1.0);
  if (!g.shrunk && about_error_size && !g.detail.empty())
    return fmt::format("{}; first failing case: {}", worst, g.detail);
  return fmt::format("{}; representative: {}", worst,
                     verdict_detail(g.verdict, g.representative_ratio, g.worst_value, g.worst_reference,
                                    g.worst_tolerance, g.detail));
}

std::vector<std::string> divergence_names(const Report& r, const std::string& op) {
  std::vector<std::string> names;
  for (const auto& d : r.divergence) {
    if (d.op != op) continue;
    for (const auto* n : {&d.a, &d.b})
      if (std::find(names.begin(), names.end(), *n) == names.end()) names.push_back(*n);
  }
  // The report's backend order (correct backends before mutants), not pair-key order.
  const auto rank = [&r](const std::string& n) {
    return std::find_if(r.backends.begin(), r.backends.end(), [&n](const auto& b) { return b.name == n; }) -
           r.backends.begin();
  };
  std::stable_sort(names.begin(), names.end(),
                   [&rank](const auto& x, const auto& y) { return rank(x) < rank(y); });
  return names;
}

const DivergenceCell* find_divergence(const Report& r, const std::string& op, const std::string& a,
                                      const std::string& b) {
  for (const auto& d : r.divergence)
    if (d.op == op && ((d.a == a && d.b == b) || (d.a == b && d.b == a))) return &d;
  return nullptr;
}

std::string to_markdown(const Report& r) {
  std::string md = fmt::format(
      "# driftcheck campaign report\n\n"
      "Format {} v{}, driftcheck {}. Command: `{}`\n\n"
      "Seed {}{}: {} cases, {} backend checks in {:.1f} s ({:.0f} checks/s). {} finding groups. Exit code "
      "{}.\n\n",
      kReportFormatName, kReportFormatVersion, r.tool_version, cell(r.command), r.seed,
      r.stream.empty() ? "" : fmt::format(" (`{}`)", cell(r.stream)), r.cases, r.checks, r.seconds,
      r.seconds > 0 ? static_cast<double>(r.checks) / r.seconds : 0.0, r.groups.size(), r.exit_code);
  if (const std::string t = time_line(r); !t.empty()) md += t + ".\n\n";
  markdown_group_lines(r, md);
  markdown_list("Errors", r.errors, md);
  markdown_backends(r, md);
  markdown_worker_faults(r, md);
  markdown_groups(r, md);
  markdown_known_findings(r, md);
  markdown_divergence(r, md);
  markdown_list("Unavailable backends", r.unavailable, md);
  return md;
}

}  // namespace driftcheck::reports
