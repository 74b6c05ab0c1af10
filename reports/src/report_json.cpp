// report.json: the campaign report model in JSON and back (format driftcheck.report, docs/CAMPAIGN.md).
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/reports/report.hpp"

namespace driftcheck::reports {
namespace {

using nlohmann::json;

// Ratios are infinite for NaN/Inf outputs: JSON has no infinity, so such numbers are strings (number_json).
double num_from(const json& j) {
  // Version 1 wrote non-finite numbers as JSON null (nlohmann's default): only NaN/Inf outputs make them.
  return j.is_null() ? std::numeric_limits<double>::infinity() : number_from_json(j);
}

json backend_json(const BackendReport& b) {
  json reasons = json::array();
  for (const auto& rc : b.top_unsupported) reasons.push_back({{"reason", rc.reason}, {"count", rc.count}});
  json shapes = json::array();
  for (const auto& s : b.by_shape)
    shapes.push_back({{"param", s.param},
                      {"bucket", s.bucket},
                      {"order", s.order},
                      {"cases", s.cases},
                      {"failed", s.failed},
                      {"max_ratio", number_json(s.max_ratio)},
                      {"mean_log2_ratio", s.mean_log2_ratio}});
  json j = {{"name", b.name},
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
            {"error", b.error},
            {"by_shape", shapes}};
  json drift = json::object();
  for (const auto& [format, d] : b.drift) drift[format] = to_json(d);
  j["drift"] = drift;
  j["first_finding_s"] = b.first_finding_s ? number_json(*b.first_finding_s) : json(nullptr);
  return j;
}

BackendReport backend_from(const json& j) {
  BackendReport b;
  b.name = j.at("name"), b.op = j.at("op"), b.kind = j.at("kind");
  b.cases_run = j.at("cases_run"), b.unsupported = j.at("unsupported");
  for (const auto& rc : j.at("top_unsupported_reasons"))
    b.top_unsupported.push_back({rc.at("reason"), rc.at("count")});
  b.passed = j.at("passed");
  b.failures_by_verdict = j.at("failures_by_verdict").get<std::map<std::string, std::int64_t>>();
  b.distinct_findings = j.at("distinct_findings");
  b.worst_ratio = num_from(j.at("worst_ratio")), b.worst_case = j.at("worst_case");
  b.check_seconds = number_from_json(j.at("check_seconds")), b.error = j.at("error");
  if (!j.at("first_finding_s").is_null()) b.first_finding_s = number_from_json(j.at("first_finding_s"));
  // Named: items() of a temporary would outlive it. Version 1 has no drift statistics.
  const json drift = j.value("drift", json::object());
  for (const auto& [format, d] : drift.items()) b.drift[format] = drift_stats_from_json(d);
  for (const auto& s : j.value("by_shape", json::array()))
    b.by_shape.push_back({s.at("param"), s.at("bucket"), s.at("order"), s.at("cases"), s.at("failed"),
                          num_from(s.at("max_ratio")), s.at("mean_log2_ratio")});
  return b;
}

json finding_json(const FindingReport& f) {
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
          {"shape", f.shape},
          {"bundle", f.bundle},
          {"replay", f.replay},
          {"features", f.features},
          {"cases", f.cases}};
}

FindingReport finding_from(const json& j) {
  FindingReport f;
  f.id = j.at("id"), f.op = j.at("op"), f.backend = j.at("backend"), f.verdict = j.at("verdict");
  f.shape_class = j.at("shape_class"), f.detail = j.at("detail"),
  f.worst_ratio = num_from(j.at("worst_ratio"));
  f.seed = j.at("seed"), f.case_index = j.at("case_index");
  f.found_after_s = number_from_json(j.at("found_after_s"));
  f.shrink_steps = j.at("shrink_steps"), f.bundle = j.at("bundle"), f.replay = j.at("replay");
  f.features = j.value("features", std::vector<std::string>{});
  f.cases = j.value("cases", std::int64_t{0});
  f.shape = j.value("shape", std::string());
  return f;
}

json group_json(const FindingGroup& g) {
  json members = json::array();
  for (const auto& m : g.members)
    members.push_back({{"id", m.id},
                       {"shape_class", m.shape_class},
                       {"seed", m.seed},
                       {"case_index", m.case_index},
                       {"cases", m.cases},
                       {"bundle", m.bundle},
                       {"replay", m.replay}});
  return {{"id", g.id},
          {"op", g.op},
          {"backend", g.backend},
          {"verdict", g.verdict},
          {"features", g.features},
          {"shrunk", g.shrunk},
          {"confirmed", g.confirmed},
          {"not_needed", g.not_needed},
          {"cases", g.cases},
          {"shape_classes", g.shape_classes},
          {"worst_ratio", number_json(g.worst_ratio)},
          {"worst_value", number_json(g.worst_value)},
          {"worst_reference", number_json(g.worst_reference)},
          {"worst_tolerance", number_json(g.worst_tolerance)},
          {"worst_output", g.worst_output},
          {"detail", g.detail},
          {"representative", g.representative},
          {"replay", g.replay},
          {"shape", g.shape},
          {"shrink_steps", g.shrink_steps},
          {"shrink_tries", g.shrink_tries},
          {"shrink_minimal", g.shrink_minimal},
          {"members", members}};
}

FindingGroup group_from(const json& j) {
  FindingGroup g;
  g.id = j.at("id"), g.op = j.at("op"), g.backend = j.at("backend"), g.verdict = j.at("verdict");
  g.features = j.at("features").get<std::vector<std::string>>();
  g.shrunk = j.at("shrunk"), g.confirmed = j.at("confirmed");
  g.not_needed = j.at("not_needed").get<std::vector<std::string>>();
  g.cases = j.at("cases");
  g.shape_classes = j.at("shape_classes").get<std::vector<std::string>>();
  g.worst_ratio = num_from(j.at("worst_ratio")), g.worst_value = num_from(j.at("worst_value"));
  g.worst_reference = num_from(j.at("worst_reference")),
  g.worst_tolerance = num_from(j.at("worst_tolerance"));
  g.worst_output = j.at("worst_output"), g.detail = j.at("detail");
  g.representative = j.at("representative"), g.replay = j.at("replay");
  g.shape = j.value("shape", std::string());
  g.shrink_steps = j.value("shrink_steps", std::int64_t{0}),
  g.shrink_tries = j.value("shrink_tries", std::int64_t{0});
  g.shrink_minimal = j.value("shrink_minimal", false);
  for (const auto& m : j.at("members"))
    g.members.push_back({m.at("id"), m.at("shape_class"), m.at("seed"), m.at("case_index"), m.at("cases"),
                         m.at("bundle"), m.at("replay")});
  return g;
}

json heatmap_json(const Heatmap& h) {
  json cells = json::array();
  for (double v : h.cells) cells.push_back(number_json(v));
  return {{"backend", h.backend},
          {"op", h.op},
          {"output", h.output},
          {"row_label", h.row_label},
          {"col_label", h.col_label},
          {"seed", h.seed},
          {"case_index", h.case_index},
          {"shape_class", h.shape_class},
          {"replay", h.replay},
          {"full_rows", h.full_rows},
          {"full_cols", h.full_cols},
          {"rows", h.rows},
          {"cols", h.cols},
          {"col_group", h.col_group},
          {"cells", cells}};
}

Heatmap heatmap_from(const json& j) {
  Heatmap h;
  h.backend = j.at("backend"), h.op = j.at("op"), h.output = j.at("output");
  h.row_label = j.at("row_label"), h.col_label = j.at("col_label");
  h.seed = j.at("seed"), h.case_index = j.at("case_index"), h.shape_class = j.at("shape_class");
  h.replay = j.at("replay"), h.full_rows = j.at("full_rows"), h.full_cols = j.at("full_cols");
  h.rows = j.at("rows"), h.cols = j.at("cols"), h.col_group = j.at("col_group");
  for (const auto& c : j.at("cells")) h.cells.push_back(num_from(c));
  if (static_cast<std::int64_t>(h.cells.size()) != h.rows * h.cols)
    throw std::runtime_error(
        fmt::format("heatmap of {} has {} cells for {} x {}", h.backend, h.cells.size(), h.rows, h.cols));
  return h;
}

// A known finding is an upstream defect a faithful twin reproduces (docs/FINDINGS.md): listed apart.
json known_json(const KnownFindingReport& k) {
  return {{"id", k.id},
          {"summary", k.summary},
          {"upstream", k.upstream},
          {"replay", k.replay},
          {"backends", k.backends},
          {"cases", k.cases},
          {"backend_cases", k.backend_cases},
          {"reproduced", k.cases > 0}};
}

KnownFindingReport known_from(const json& j) {
  return {j.at("id"),
          j.at("summary"),
          j.at("upstream"),
          j.at("replay"),
          j.at("backends").get<std::vector<std::string>>(),
          j.at("cases"),
          j.at("backend_cases")};
}

}  // namespace

json to_json(const Report& r) {
  json ops = json::array();
  for (const auto& o : r.ops)
    ops.push_back(
        {{"op", o.op}, {"cases", o.cases}, {"reference_seconds", number_json(o.reference_seconds)}});
  json backends = json::array(), findings = json::array(), divergence = json::array(), groups = json::array(),
       heatmaps = json::array();
  for (const auto& b : r.backends) backends.push_back(backend_json(b));
  for (const auto& f : r.findings) findings.push_back(finding_json(f));
  for (const auto& d : r.divergence)
    divergence.push_back({{"op", d.op},
                          {"a", d.a},
                          {"b", d.b},
                          {"max_ulps", number_json(d.max_ulps)},
                          {"shared_cases", d.shared_cases},
                          {"max_ratio", number_json(d.max_ratio)},
                          {"beyond_cases", d.beyond_cases},
                          {"nonfinite_cases", d.nonfinite_cases}});
  for (const auto& g : r.groups) groups.push_back(group_json(g));
  for (const auto& h : r.heatmaps) heatmaps.push_back(heatmap_json(h));
  json known = json::array();
  for (const auto& k : r.known_findings) known.push_back(known_json(k));
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
          {"groups", groups},
          {"known_findings", known},
          {"divergence_ulps", divergence},
          {"heatmaps", heatmaps},
          {"unavailable", r.unavailable},
          {"errors", r.errors},
          {"exit_code", r.exit_code}};
}

Report report_from_json(const json& j) {
  try {
    if (j.at("format") != kReportFormatName)
      throw std::runtime_error(fmt::format("not a {} file", kReportFormatName));
    const int version = j.at("format_version");
    if (version < 1 || version > kReportFormatVersion)
      throw std::runtime_error(fmt::format("{} version {} (this driftcheck reads 1 to {})", kReportFormatName,
                                           version, kReportFormatVersion));
    Report r;
    r.tool_version = j.at("tool_version"), r.command = j.at("command"), r.seed = j.at("seed");
    r.cases = j.at("cases"), r.checks = j.at("checks"), r.seconds = number_from_json(j.at("seconds"));
    for (const auto& o : j.at("ops"))
      r.ops.push_back({o.at("op"), o.at("cases"), number_from_json(o.at("reference_seconds"))});
    for (const auto& b : j.at("backends")) r.backends.push_back(backend_from(b));
    for (const auto& f : j.at("findings")) r.findings.push_back(finding_from(f));
    for (const auto& d : j.at("divergence_ulps")) {
      DivergenceCell c{d.at("op"), d.at("a"), d.at("b"), num_from(d.at("max_ulps")), d.at("shared_cases")};
      // Version 1 has no tolerance-relative divergence: NaN says "not measured".
      c.max_ratio =
          d.contains("max_ratio") ? num_from(d.at("max_ratio")) : std::numeric_limits<double>::quiet_NaN();
      c.beyond_cases = d.value("beyond_cases", 0), c.nonfinite_cases = d.value("nonfinite_cases", 0);
      r.divergence.push_back(c);
    }
    for (const auto& g : j.value("groups", json::array())) r.groups.push_back(group_from(g));
    for (const auto& h : j.value("heatmaps", json::array())) r.heatmaps.push_back(heatmap_from(h));
    for (const auto& k : j.value("known_findings", json::array())) r.known_findings.push_back(known_from(k));
    r.unavailable = j.at("unavailable").get<std::vector<std::string>>();
    r.errors = j.at("errors").get<std::vector<std::string>>();
    r.exit_code = j.at("exit_code");
    return r;
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("malformed {}: {}", kReportFormatName, e.what()));
  } catch (const std::invalid_argument& e) {  // a number string that is not inf/nan (json_text.hpp)
    throw std::runtime_error(fmt::format("malformed {}: {}", kReportFormatName, e.what()));
  }
}

}  // namespace driftcheck::reports
