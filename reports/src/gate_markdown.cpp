// The Markdown summary of a gate run, fit for a CI job summary: the verdict first, the backend table kernel
// pull requests use, every failed check with its replay commands, then what moved since the baseline, worst
// first.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "driftcheck/reports/gate_report.hpp"
#include "driftcheck/reports/numbers.hpp"
#include "markdown.hpp"

namespace driftcheck::reports {
namespace {

// Changes listed beyond the failing ones: enough to see a trend, short enough for a job summary.
constexpr std::size_t kMaxQuietChanges = 20;

std::string number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.3g}", v);
}

std::string verdicts(const DriftStats& s) {
  std::string out = s.passed > 0 ? fmt::format("pass {}", s.passed) : "";
  for (const auto& [v, c] : s.failures) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", v, c.cases);
  return out.empty() ? "-" : out;
}

void backend_table(const GateReport& r, std::string& md) {
  md +=
      "| backend | op | cases | pass rate | worst error / tolerance | p99 error / tolerance | mean signed "
      "ulps | "
      "verdicts | gate |\n|---|---|---:|---:|---:|---:|---:|---|---|\n";
  for (const auto& row : r.rows) {
    const DriftStats& s = row.total;
    const std::string rate =
        s.cases > 0
            ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(s.passed) / static_cast<double>(s.cases))
            : "-";
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", row.backend, row.op, s.cases, rate,
                      number(s.worst_ratio), number(s.p99_ratio()), bias_text(s.mean_signed_ulps()),
                      verdicts(s), row.failed ? "FAIL" : "pass");
  }
  md += "\n";
}

// Continuation lines of a list item's code block.
std::string indented(std::string_view text) {
  std::string out;
  for (char ch : text) out += ch == '\n' ? std::string("\n  ") : std::string(1, ch);
  return out;
}

void failed_checks(const GateReport& r, std::string& md) {
  std::size_t n = 0;
  for (const auto& c : r.checks) n += c.status == CheckStatus::kFailed;
  if (n == 0 && r.errors.empty()) return;
  md += fmt::format("### Failed checks ({})\n\n", n + r.errors.size());
  for (const auto& e : r.errors) md += fmt::format("- **gate**: {}\n", cell(e));
  for (const auto& c : r.checks) {
    if (c.status != CheckStatus::kFailed) continue;
    md += fmt::format("- **{}** {} {}: {}\n", c.backend, c.op, c.check, cell(c.message));
    if (!c.details.empty()) md += fmt::format("\n  ```\n  {}\n  ```\n\n", indented(c.details));
  }
  md += "\n";
}

void changes(const GateReport& r, std::string& md) {
  md += "### Changes since the baseline (worst first)\n\n";
  const bool compared = std::any_of(r.checks.begin(), r.checks.end(), [](const auto& c) {
    return c.check == "baseline" && c.status != CheckStatus::kSkipped;
  });
  if (!compared) {
    md += "Not compared: no usable baseline (see above).\n\n";
    return;
  }
  if (r.changes.empty()) {
    md += "None: every statistic equals its baseline.\n\n";
    return;
  }
  md +=
      "| backend | op | format | statistic | baseline | now | change (margins) |\n"
      "|---|---|---|---|---:|---:|---:|\n";
  std::size_t quiet = 0;
  for (const auto& c : r.changes) {
    const bool fails = c.severity > 1;
    if (!fails && ++quiet > kMaxQuietChanges) continue;
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {}{} |\n", c.backend, c.op, c.format, c.metric,
                      number(c.baseline), number(c.now), number(c.severity), fails ? " **worse**" : "");
  }
  if (quiet > kMaxQuietChanges)
    md += fmt::format("\n{} smaller changes not shown (gate.json lists all).\n", quiet - kMaxQuietChanges);
  md += "\n";
}

void detection(const GateReport& r, std::string& md) {
  if (r.detection.empty()) return;
  std::size_t caught = 0;
  for (const auto& d : r.detection) caught += !d.caught_by.empty();
  md +=
      fmt::format("### Mutant detection: {} of {} caught\n\n| mutant | breaks | caught by |\n|---|---|---|\n",
                  caught, r.detection.size());
  for (const auto& d : r.detection) {
    std::string by;
    for (const auto& c : d.caught_by) by += (by.empty() ? "" : ", ") + c;
    md += fmt::format("| {} | {} | {} |\n", d.mutant, d.mutates, by.empty() ? "**MISSED**" : by);
  }
  md += "\n";
}

void known_findings(const GateReport& r, std::string& md) {
  if (r.known.empty()) return;
  md +=
      "### Known findings (upstream defects the twins reproduce; not failures)\n\n"
      "| known finding | backends | cases (campaign / corpus / golden) | what | replay |\n"
      "|---|---|---:|---|---|\n";
  for (const auto& k : r.known) {
    std::string backends;
    for (const auto& b : k.backends) backends += (backends.empty() ? "" : ", ") + b;
    md += fmt::format("| {} | {} | {} / {} / {} | {} | `{}` |\n", cell(k.id), cell(backends),
                      k.campaign_cases, k.corpus_cases, k.golden_cases, cell(k.summary), cell(k.replay));
  }
  md += "\n";
}

}  // namespace

std::string to_markdown(const GateReport& r) {
  std::size_t failed = 0;
  for (const auto& c : r.checks) failed += c.status == CheckStatus::kFailed;
  std::string md =
      fmt::format("## driftcheck gate: {}\n\n",
                  r.exit_code == 0   ? "passed"
                  : r.exit_code == 1 ? fmt::format("FAILED ({} of {} checks)", failed + r.errors.size(),
                                                   r.checks.size() + r.errors.size())
                                     : "INTERNAL ERROR");
  md += fmt::format(
      "`{}`: {}; {} golden cases, {} corpus cases; {:.1f} s (golden {:.1f} s, corpus {:.1f} s, campaign "
      "{:.1f} "
      "s). Baseline `{}`.\n\n",
      cell(r.command), r.stream, r.golden_cases, r.corpus_cases, r.seconds, r.golden_seconds,
      r.corpus_seconds, r.campaign_seconds, r.baseline_path);
  backend_table(r, md);
  failed_checks(r, md);
  changes(r, md);
  detection(r, md);
  known_findings(r, md);
  if (!r.notes.empty()) {
    md += "### Notes\n\n";
    for (const auto& n : r.notes) md += fmt::format("- {}\n", cell(n));
    md += "\n";
  }
  return md;
}

}  // namespace driftcheck::reports
