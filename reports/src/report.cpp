#include "driftcheck/reports/report.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/reports/json_text.hpp"
#include "markdown.hpp"

namespace driftcheck::reports {
namespace {

nlohmann::json backend_json(const BackendReport& b) {
  nlohmann::json reasons = nlohmann::json::array();
  for (const auto& rc : b.top_unsupported) reasons.push_back({{"reason", rc.reason}, {"count", rc.count}});
  nlohmann::json j = {{"name", b.name},
                      {"op", b.op},
                      {"kind", b.kind},
                      {"cases_run", b.cases_run},
                      {"unsupported", b.unsupported},
                      {"top_unsupported_reasons", reasons},
                      {"passed", b.passed},
                      {"failures_by_verdict", b.failures_by_verdict},
                      {"distinct_findings", b.distinct_findings},
                      {"worst_ratio", number_json(b.worst_ratio)},
                      {"worst_case", b.worst_case},
                      {"check_seconds", number_json(b.check_seconds)},
                      {"error", b.error}};
  j["first_finding_s"] = b.first_finding_s ? number_json(*b.first_finding_s) : nlohmann::json(nullptr);
  nlohmann::json drift = nlohmann::json::object();
  for (const auto& [format, d] : b.drift) drift[format] = to_json(d);
  j["drift"] = drift;
  return j;
}

nlohmann::json finding_json(const FindingReport& f) {
  return {{"id", f.id},
          {"op", f.op},
          {"backend", f.backend},
          {"verdict", f.verdict},
          {"shape_class", f.shape_class},
          {"detail", f.detail},
          {"worst_ratio", number_json(f.worst_ratio)},
          {"seed", f.seed},
          {"case_index", f.case_index},
          {"found_after_s", number_json(f.found_after_s)},
          {"shrink_steps", f.shrink_steps},
          {"shrink_tries", f.shrink_tries},
          {"shrink_minimal", f.shrink_minimal},
          {"shape", f.shape},
          {"bundle", f.bundle},
          {"replay", f.replay},
          {"shrunk", f.shrunk}};
}

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

void markdown_backends(const Report& r, std::string& md) {
  md +=
      "## Backends\n\n| backend | kind | op | cases run | passed | unsupported | failures | worst ratio | "
      "first finding | top unsupported reason |\n|---|---|---|---:|---:|---:|---|---:|---:|---|\n";
  for (const auto& b : r.backends) {
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.3g} | {} | {} |\n", b.name, b.kind, b.op,
                      b.cases_run, b.passed, b.unsupported, verdict_counts(b.failures_by_verdict),
                      b.worst_ratio, b.first_finding_s ? fmt::format("{:.2f} s", *b.first_finding_s) : "-",
                      cell(top_reasons(b)));
  }
  md += "\n";
}

void markdown_findings(const Report& r, std::string& md) {
  md += fmt::format("## Findings ({})\n\n", r.findings.size());
  if (r.findings.empty()) {
    md += "None.\n\n";
    return;
  }
  md +=
      "| id | backend | verdict | shape class | worst ratio | case | detail | replay |\n"
      "|---|---|---|---|---:|---|---|---|\n";
  for (const auto& f : r.findings) {
    md +=
        fmt::format("| {} | {} | {} | {} | {:.3g} | seed {} case {}{} | {} | `{}` |\n", f.id, f.backend,
                    f.verdict, f.shape_class, f.worst_ratio, f.seed, f.case_index,
                    f.shape.empty() ? "" : cell(" (repro: " + f.shape + ")"), cell(f.detail), cell(f.replay));
  }
  md += "\n";
}

void markdown_known_findings(const Report& r, std::string& md) {
  if (r.known_findings.empty()) return;
  md += fmt::format(
      "## Known findings ({})\n\nUpstream defects that faithful twins reproduce (docs/FINDINGS.md); not "
      "counted "
      "as findings. A case counts here only when the backend with the defect repaired passes it.\n\n"
      "| id | backends | failing cases | of cases run | upstream | replay |\n|---|---|---:|---:|---|---|\n",
      r.known_findings.size());
  for (const auto& k : r.known_findings) {
    std::string backends;
    for (const auto& b : k.backends) backends += (backends.empty() ? "" : ", ") + b;
    md += fmt::format("| {} | {} | {} | {} | {} | `{}` |\n", k.id, cell(backends),
                      k.cases > 0 ? fmt::format("{}", k.cases) : "NOT REPRODUCED", k.backend_cases,
                      cell(k.upstream), cell(k.replay));
  }
  md += "\n";
}

// One square matrix per op: rows and columns are the backends that shared at least one case.
void markdown_divergence(const Report& r, std::string& md) {
  md += "## Divergence between backends (max ulps of the output format, shared cases)\n\n";
  if (r.divergence.empty()) {
    md += "No pair of backends ran a common case.\n\n";
    return;
  }
  std::set<std::string> ops;
  for (const auto& d : r.divergence) ops.insert(d.op);
  for (const auto& op : ops) {
    std::vector<std::string> names;
    for (const auto& d : r.divergence) {
      if (d.op != op) continue;
      for (const auto* n : {&d.a, &d.b})
        if (std::find(names.begin(), names.end(), *n) == names.end()) names.push_back(*n);
    }
    // Rows in the report's backend order (correct backends before mutants), not in pair-key order.
    const auto rank = [&r](const std::string& n) {
      return std::find_if(r.backends.begin(), r.backends.end(), [&n](const auto& b) { return b.name == n; }) -
             r.backends.begin();
    };
    std::stable_sort(names.begin(), names.end(),
                     [&rank](const auto& x, const auto& y) { return rank(x) < rank(y); });
    md += fmt::format("### {}\n\n|  |", op);
    for (const auto& n : names) md += fmt::format(" {} |", n);
    md += "\n|---|";
    for (std::size_t i = 0; i < names.size(); ++i) md += "---:|";
    md += "\n";
    for (const auto& row : names) {
      md += fmt::format("| {} |", row);
      for (const auto& col : names) {
        std::string v = row == col ? "-" : "";
        for (const auto& d : r.divergence) {
          if (d.op == op && ((d.a == row && d.b == col) || (d.a == col && d.b == row)))
            v = fmt::format("{:.3g} ({})", d.max_ulps, d.shared_cases);
        }
        md += fmt::format(" {} |", v);
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

nlohmann::json to_json(const Report& r) {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& o : r.ops)
    ops.push_back(
        {{"op", o.op}, {"cases", o.cases}, {"reference_seconds", number_json(o.reference_seconds)}});
  nlohmann::json backends = nlohmann::json::array();
  for (const auto& b : r.backends) backends.push_back(backend_json(b));
  nlohmann::json findings = nlohmann::json::array();
  for (const auto& f : r.findings) findings.push_back(finding_json(f));
  nlohmann::json known = nlohmann::json::array();
  for (const auto& k : r.known_findings)
    known.push_back({{"id", k.id},
                     {"summary", k.summary},
                     {"upstream", k.upstream},
                     {"replay", k.replay},
                     {"backends", k.backends},
                     {"cases", k.cases},
                     {"backend_cases", k.backend_cases},
                     {"reproduced", k.cases > 0}});
  nlohmann::json divergence = nlohmann::json::array();
  for (const auto& d : r.divergence)
    divergence.push_back({{"op", d.op},
                          {"a", d.a},
                          {"b", d.b},
                          {"max_ulps", number_json(d.max_ulps)},
                          {"shared_cases", d.shared_cases}});
  return {{"format", kReportFormatName},
          {"format_version", kReportFormatVersion},
          {"tool_version", r.tool_version},
          {"command", r.command},
          {"seed", r.seed},
          {"cases", r.cases},
          {"checks", r.checks},
          {"seconds", number_json(r.seconds)},
          {"ops", ops},
          {"backends", backends},
          {"findings", findings},
          {"known_findings", known},
          {"divergence_ulps", divergence},
          {"unavailable", r.unavailable},
          {"errors", r.errors},
          {"exit_code", r.exit_code}};
}

std::string to_markdown(const Report& r) {
  std::string md = fmt::format(
      "# driftcheck campaign report\n\n"
      "Format {} v{}, driftcheck {}. Command: `{}`\n\n"
      "Seed {}: {} cases, {} backend checks in {:.1f} s ({:.0f} checks/s). {} distinct findings. Exit code "
      "{}.\n\n",
      kReportFormatName, kReportFormatVersion, r.tool_version, cell(r.command), r.seed, r.cases, r.checks,
      r.seconds, r.seconds > 0 ? static_cast<double>(r.checks) / r.seconds : 0.0, r.findings.size(),
      r.exit_code);
  markdown_list("Errors", r.errors, md);
  markdown_backends(r, md);
  markdown_findings(r, md);
  markdown_known_findings(r, md);
  markdown_divergence(r, md);
  markdown_list("Unavailable backends", r.unavailable, md);
  return md;
}

void write_reports(const Report& r, const std::filesystem::path& dir) {
  write_file_atomic(dir / "report.json", json_text(to_json(r), 2) + "\n");
  write_file_atomic(dir / "report.md", to_markdown(r));
}

}  // namespace driftcheck::reports
