#include "driftcheck/reports/report.hpp"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/files/json_text.hpp"
#include "driftcheck/reports/html.hpp"
#include "driftcheck/reports/numbers.hpp"
#include "driftcheck/reports/report_set.hpp"

namespace driftcheck::reports {

using files::json_text;
using files::write_file_atomic;

std::string time_line(const Report& r) {
  if (r.phases.empty()) return {};
  std::string line = r.budget_seconds ? fmt::format("Time budget {:g} s:", *r.budget_seconds) : "Time:";
  for (std::size_t i = 0; i < r.phases.size(); ++i)
    line += fmt::format("{} {} {:.1f} s", i == 0 ? "" : ",", r.phases[i].name, r.phases[i].seconds);
  const auto cases = [](std::int64_t n) { return fmt::format("{} case{}", n, n == 1 ? "" : "s"); };
  if (r.cases_not_started > 0 && r.cases_abandoned > 0)
    line += fmt::format(
        "; {} not started (predicted to end past the discovery deadline) and {} not finished by it",
        cases(r.cases_not_started), r.cases_abandoned);
  else if (r.cases_not_started > 0)
    line += fmt::format("; {} not started (predicted to end past the discovery deadline)",
                        cases(r.cases_not_started));
  else if (r.cases_abandoned > 0)
    line += fmt::format("; {} started but not finished when discovery ended", cases(r.cases_abandoned));
  if (r.cases_not_started + r.cases_abandoned > 0)
    line += r.cases_not_started + r.cases_abandoned == 1 ? ": --resume runs it" : ": --resume runs them";
  if (r.heatmaps_left_out > 0)
    line += fmt::format("; {} worst-case heatmap{} left out (no time left to run {} again)",
                        r.heatmaps_left_out, r.heatmaps_left_out == 1 ? "" : "s",
                        r.heatmaps_left_out == 1 ? "its case" : "their cases");
  return line;
}

bool worse_group(const FindingGroup& a, const FindingGroup& b) {
  const int ra = verdict_rank(a.verdict), rb = verdict_rank(b.verdict);
  if (ra != rb) return ra > rb;
  if (std::isnan(a.worst_ratio) != std::isnan(b.worst_ratio)) return std::isnan(a.worst_ratio);
  if (a.worst_ratio != b.worst_ratio && !std::isnan(a.worst_ratio)) return a.worst_ratio > b.worst_ratio;
  if (a.cases != b.cases) return a.cases > b.cases;
  return a.id < b.id;  // a total order: the report does not depend on the order groups were found in
}

void write_reports(const Report& r, const std::filesystem::path& dir) {
  write_file_atomic(dir / "report.json", json_text(to_json(r), 2) + "\n");
  write_file_atomic(dir / "report.md", to_markdown(r));
  ReportSet set;
  set.tool_version = r.tool_version, set.command = r.command;
  set.runs = {campaign_run(r, dir)};
  std::string why;
  const auto lib = load_plot_library(default_vega_dir(), &why);
  write_file_atomic(dir / "report.html", to_html(set, lib ? &*lib : nullptr, why));
}

}  // namespace driftcheck::reports
