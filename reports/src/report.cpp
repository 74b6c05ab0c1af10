#include "driftcheck/reports/report.hpp"

#include <nlohmann/json.hpp>

#include "driftcheck/reports/html.hpp"
#include "driftcheck/reports/json_text.hpp"
#include "driftcheck/reports/report_set.hpp"

namespace driftcheck::reports {

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
