// `driftcheck report DIR... [--html FILE] [--markdown FILE] [--json FILE]`: the divergence report over
// campaign, check, gate and accept outputs (docs/REPORT.md). Without an output flag it writes
// driftcheck-report.html.
#include <filesystem>
#include <memory>
#include <ostream>
#include <stdexcept>

#include <fmt/format.h>

#include "commands.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/reports/html.hpp"
#include "driftcheck/reports/report_set.hpp"

namespace driftcheck::fuzz {
namespace {

namespace fs = std::filesystem;

struct ReportArgs {
  std::vector<std::string> dirs;
  std::string html, markdown, json;
  ProgressArgs progress;
};

// Two directories with the same name (runs/nvidia/out, runs/amd/out) get their parent's name too.
void unique_labels(std::vector<reports::RunReport>& runs) {
  for (auto& a : runs) {
    int same = 0;
    for (const auto& b : runs) same += b.label == a.label;
    if (same > 1) a.label = (fs::path(a.dir).parent_path().filename() / a.label).string();
  }
}

int report_command(const ReportArgs& a, const CliContext& ctx) {
  std::ostream* log = a.progress.quiet ? nullptr : &ctx.err;
  reports::ReportSet set;
  set.tool_version = std::string(kToolVersion), set.command = ctx.command_line;
  Progress progress(log, a.progress.style(ctx.err_is_tty), "report", "directories",
                    {static_cast<double>(a.dirs.size()), std::nullopt});
  for (const auto& dir : a.dirs) {
    try {
      set.runs.push_back(reports::read_run(dir));
    } catch (const std::runtime_error& e) {
      throw UsageError(e.what());  // bad input file: exit 2
    }
    progress.update(static_cast<double>(set.runs.size()), dir);
  }
  progress.finish(static_cast<double>(set.runs.size()));
  unique_labels(set.runs);
  const bool any_output = !a.html.empty() || !a.markdown.empty() || !a.json.empty();
  const std::string html = any_output ? a.html : "driftcheck-report.html";
  if (!html.empty()) {
    std::string why;
    const auto lib = reports::load_plot_library(reports::default_vega_dir(), &why);
    // Without the plotting library the report is still worth having: tables, with a note that says why.
    if (!lib) ctx.err << "driftcheck: report without plots: " << why << "\n";
    files::write_file_atomic(html, reports::to_html(set, lib ? &*lib : nullptr, why));
  }
  if (!a.markdown.empty()) files::write_file_atomic(a.markdown, reports::to_markdown(set));
  if (!a.json.empty()) files::write_file_atomic(a.json, reports::to_json(set).dump(2) + "\n");
  int code = 0;
  for (const auto& run : set.runs)
    if (reports::exit_code_of(run) != 0) code = 1;
  if (log != nullptr)
    *log << fmt::format("report: {} run{}{}{}{}\n", set.runs.size(), set.runs.size() == 1 ? "" : "s",
                        html.empty() ? "" : ", " + html, a.markdown.empty() ? "" : ", " + a.markdown,
                        a.json.empty() ? "" : ", " + a.json);
  return code;
}

}  // namespace

Command add_report_command(CLI::App& app, const CliContext& ctx) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "divergence report over fuzz, check, gate and accept outputs (HTML with plots, Markdown, JSON)");
  cmd->add_option("dirs", args->dirs, "output directories of driftcheck fuzz/check/gate/accept")->required();
  cmd->add_option("--html", args->html,
                  "write the HTML report (default driftcheck-report.html without flags)");
  cmd->add_option("--markdown", args->markdown, "write the Markdown report");
  cmd->add_option("--json", args->json, "write the JSON report (driftcheck.report_set)");
  add_progress_options(*cmd, args->progress);
  return {cmd, [args, &ctx] { return report_command(*args, ctx); }};
}

}  // namespace driftcheck::fuzz
