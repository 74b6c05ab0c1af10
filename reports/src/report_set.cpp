#include "driftcheck/reports/report_set.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "driftcheck/reports/numbers.hpp"
#include "markdown.hpp"
#include "report_views.hpp"

namespace driftcheck::reports {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot read", p.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("{}: not JSON ({})", p.string(), e.what()));
  }
}

template <class F>
auto read_model(const fs::path& p, F from_json) {
  try {
    return from_json(read_json(p));
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    // read_json names the file already; the model readers do not.
    throw std::runtime_error(what.rfind(p.string(), 0) == 0 ? what : fmt::format("{}: {}", p.string(), what));
  }
}

}  // namespace

namespace {

std::string label_of(const fs::path& dir) {
  return dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
}

}  // namespace

RunReport campaign_run(Report r, const fs::path& dir) {
  RunReport run;
  run.dir = dir.string(), run.label = label_of(dir);
  // `driftcheck check` writes the campaign's report model for outputs produced elsewhere.
  run.kind = r.command.find(" check") != std::string::npos ? "check" : "campaign";
  run.campaign = std::move(r);
  return run;
}

RunReport read_run(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw std::runtime_error(fmt::format("{}: not a directory", dir.string()));
  RunReport run;
  run.dir = dir.string();
  run.label = label_of(dir);
  // A gate keeps its campaign in DIR/campaign (docs/GATE.md).
  if (fs::exists(dir / "gate.json")) {
    run.kind = "gate";
    run.gate = read_model(dir / "gate.json", gate_report_from_json);
    if (fs::exists(dir / "campaign" / "report.json"))
      run.campaign = read_model(dir / "campaign" / "report.json", report_from_json);
    else
      run.notes.push_back("the gate's campaign report (campaign/report.json) is missing: statistics only");
  } else if (fs::exists(dir / "report.json")) {
    run = campaign_run(read_model(dir / "report.json", report_from_json), dir);
  }
  if (fs::exists(dir / "accept.json")) {
    run.accept = read_model(dir / "accept.json", accept_report_from_json);
    if (run.kind.empty()) run.kind = "accept";
  }
  if (run.kind.empty())
    throw std::runtime_error(
        fmt::format("{}: no report.json, gate.json or accept.json (not a fuzz, check, gate or accept output)",
                    dir.string()));
  return run;
}

int exit_code_of(const RunReport& run) {
  if (run.gate) return run.gate->exit_code;
  return std::max(run.campaign ? run.campaign->exit_code : 0, run.accept ? run.accept->exit_code : 0);
}

nlohmann::json to_json(const ReportSet& s) {
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& run : s.runs) {
    nlohmann::json j = {{"label", run.label}, {"dir", run.dir}, {"kind", run.kind}, {"notes", run.notes}};
    j["report"] = run.campaign ? to_json(*run.campaign) : nlohmann::json(nullptr);
    j["accept"] = run.accept ? to_json(*run.accept) : nlohmann::json(nullptr);
    j["gate"] = run.gate ? to_json(*run.gate) : nlohmann::json(nullptr);
    runs.push_back(j);
  }
  return {{"format", kReportSetFormatName},
          {"format_version", kReportSetFormatVersion},
          {"tool_version", s.tool_version},
          {"command", s.command},
          {"runs", runs}};
}

std::string to_markdown(const ReportSet& s) {
  std::string md = fmt::format("# driftcheck divergence report\n\n{} run{}, driftcheck {}. Command: `{}`\n\n",
                               s.runs.size(), s.runs.size() == 1 ? "" : "s", s.tool_version, cell(s.command));
  for (const auto& run : s.runs) {
    md += fmt::format("# {} ({}: {})\n\n", run.label, run.kind, run.dir);
    for (const auto& n : run.notes) md += fmt::format("> {}\n\n", n);
    if (run.gate) md += to_markdown(*run.gate);  // its headings start at level 2 already
    if (run.campaign) {
      // The campaign's own Markdown, its headings one level down.
      const std::string part = to_markdown(*run.campaign);
      std::size_t at = 0;
      for (std::size_t hit = part.find('#'); hit != std::string::npos; hit = part.find("\n#", at)) {
        if (hit > 0) ++hit;  // past the newline
        md.append(part, at, hit - at).append("#");
        at = hit;
      }
      md.append(part, at);
    }
    if (run.accept) md += to_markdown(*run.accept) + "\n";
  }
  return md;
}

}  // namespace driftcheck::reports
