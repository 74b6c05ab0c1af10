// report.json: the campaign report model in JSON and back (format driftcheck.report, docs/CAMPAIGN.md).
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/files/json_fields.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::reports {

using files::array_field;
using files::bool_field;
using files::exit_code_field;
using files::FieldError;
using files::int_field;
using files::int_value;
using files::json_field;
using files::list_field;
using files::number_field;
using files::number_json;
using files::number_value;
using files::object_field;
using files::string_field;
using files::strings_field;
using files::u64_field;
using files::within_field;
namespace {

using nlohmann::json;

// Ratios are infinite for NaN/Inf outputs: JSON has no infinity, so such numbers are strings (number_json).
double ratio_value(const json& v, std::string_view name) {
  // Version 1 wrote non-finite numbers as JSON null (nlohmann's default): only NaN/Inf outputs make them.
  return v.is_null() ? std::numeric_limits<double>::infinity() : number_value(v, name);
}

double ratio_field(const json& j, std::string_view key) {
  return ratio_value(json_field(j, key), key);
}

// Fields added after version 1: absent in older reports.
std::int64_t count_or_zero(const json& j, std::string_view key) {
  return j.contains(key) ? int_field(j, key, 0) : 0;
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
            {"upstream", b.upstream},
            {"cases_run", b.cases_run},
            {"unsupported", b.unsupported},
            {"top_unsupported_reasons", reasons},
            {"passed", b.passed},
            {"failures_by_verdict", b.failures_by_verdict},
            {"distinct_findings", b.distinct_findings},
            {"worst_verdict", b.worst_verdict},
            {"worst_ratio", number_json(b.worst_ratio)},
            {"worst_case", b.worst_case},
            {"check_seconds", number_json(b.check_seconds)},
            {"error", b.error},
            {"by_shape", shapes}};
  json drift = json::object();
  for (const auto& [format, d] : b.drift) drift[format] = to_json(d);
  j["drift"] = drift;
  j["first_finding_s"] = b.first_finding_s ? number_json(*b.first_finding_s) : json(nullptr);
  j["worker_restarts"] = b.worker_restarts;
  j["restart_seconds"] = number_json(b.restart_seconds);
  j["skipped_restarting"] = b.skipped_restarting;
  j["skipped_quarantined"] = b.skipped_quarantined;
  j["quarantined"] = b.quarantined;
  return j;
}

BackendReport backend_from(const json& j) {
  BackendReport b;
  b.name = string_field(j, "name"), b.op = string_field(j, "op"), b.kind = string_field(j, "kind");
  if (j.contains("upstream")) b.upstream = string_field(j, "upstream");  // not written before 2e50a59
  b.cases_run = int_field(j, "cases_run", 0), b.unsupported = int_field(j, "unsupported", 0);
  b.top_unsupported = list_field(j, "top_unsupported_reasons", [](const json& rc) {
    return ReasonCount{string_field(rc, "reason"), int_field(rc, "count", 0)};
  });
  b.passed = int_field(j, "passed", 0);
  for (const auto& item : object_field(j, "failures_by_verdict").items())
    b.failures_by_verdict[item.key()] =
        within_field("failures_by_verdict", [&] { return int_value(item.value(), item.key(), 0); });
  b.distinct_findings = int_field(j, "distinct_findings", 0);
  b.worst_ratio = ratio_field(j, "worst_ratio"), b.worst_case = u64_field(j, "worst_case");
  if (j.contains("worst_verdict")) b.worst_verdict = string_field(j, "worst_verdict");  // version 3
  b.check_seconds = number_field(j, "check_seconds"), b.error = string_field(j, "error");
  if (!json_field(j, "first_finding_s").is_null()) b.first_finding_s = number_field(j, "first_finding_s");
  // Version 1 has no drift statistics and no error by shape.
  if (j.contains("drift"))
    for (const auto& item : object_field(j, "drift").items())
      b.drift[item.key()] =
          within_field("drift." + item.key(), [&] { return drift_stats_from_json(item.value()); });
  // Written since worker faults are reported; older reports had none to report.
  b.worker_restarts = count_or_zero(j, "worker_restarts");
  if (j.contains("restart_seconds")) b.restart_seconds = number_field(j, "restart_seconds");
  b.skipped_restarting = count_or_zero(j, "skipped_restarting");
  b.skipped_quarantined = count_or_zero(j, "skipped_quarantined");
  if (j.contains("quarantined")) b.quarantined = string_field(j, "quarantined");
  if (j.contains("by_shape"))
    b.by_shape = list_field(j, "by_shape", [](const json& s) {
      return ShapeBucket{string_field(s, "param"),          string_field(s, "bucket"),
                         number_field(s, "order"),          int_field(s, "cases", 0),
                         int_field(s, "failed", 0),         ratio_field(s, "max_ratio"),
                         number_field(s, "mean_log2_ratio")};
    });
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
  f.id = string_field(j, "id"), f.op = string_field(j, "op"), f.backend = string_field(j, "backend");
  f.verdict = string_field(j, "verdict"), f.shape_class = string_field(j, "shape_class");
  f.detail = string_field(j, "detail"), f.worst_ratio = ratio_field(j, "worst_ratio");
  f.seed = u64_field(j, "seed"), f.case_index = u64_field(j, "case_index");
  f.found_after_s = number_field(j, "found_after_s");
  f.shrink_steps = int_field(j, "shrink_steps", 0), f.bundle = string_field(j, "bundle");
  f.replay = string_field(j, "replay");
  if (j.contains("features")) f.features = strings_field(j, "features");
  f.cases = count_or_zero(j, "cases");
  if (j.contains("shape")) f.shape = string_field(j, "shape");
  return f;
}

json group_fields_json(const FindingGroup& g) {
  json members = json::array();
  for (const auto& m : g.members)
    members.push_back({{"id", m.id},
                       {"shape_class", m.shape_class},
                       {"seed", m.seed},
                       {"case_index", m.case_index},
                       {"cases", m.cases},
                       {"bundle", m.bundle},
                       {"replay", m.replay},
                       {"worst_ratio", number_json(m.worst_ratio)},
                       {"worst_case", m.worst_case},
                       {"verdict", m.verdict}});
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
          {"worst_case", g.worst_case},
          {"representative_ratio", number_json(g.representative_ratio)},
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

json group_json(const FindingGroup& g) {
  json j = group_fields_json(g);
  // Only a worker fault's group has these: the others stay as they were.
  if (!g.fault.empty()) {
    j["fault"] = g.fault;
    j["fault_reproduced"] = g.fault_reproduced ? json(*g.fault_reproduced) : json(nullptr);
  }
  return j;
}

FindingGroup group_from(const json& j) {
  FindingGroup g;
  g.id = string_field(j, "id"), g.op = string_field(j, "op"), g.backend = string_field(j, "backend");
  g.verdict = string_field(j, "verdict"), g.features = strings_field(j, "features");
  g.shrunk = bool_field(j, "shrunk"), g.confirmed = bool_field(j, "confirmed");
  g.not_needed = strings_field(j, "not_needed"), g.cases = int_field(j, "cases", 0);
  g.shape_classes = strings_field(j, "shape_classes");
  g.worst_ratio = ratio_field(j, "worst_ratio"), g.worst_value = ratio_field(j, "worst_value");
  // Version 3: the worst over every member and the representative's own; before, the representative's.
  g.worst_case = j.contains("worst_case") ? u64_field(j, "worst_case") : 0;
  g.representative_ratio =
      j.contains("representative_ratio") ? ratio_field(j, "representative_ratio") : g.worst_ratio;
  g.worst_reference = ratio_field(j, "worst_reference"),
  g.worst_tolerance = ratio_field(j, "worst_tolerance");
  g.worst_output = string_field(j, "worst_output"), g.detail = string_field(j, "detail");
  g.representative = string_field(j, "representative"), g.replay = string_field(j, "replay");
  if (j.contains("shape")) g.shape = string_field(j, "shape");
  g.shrink_steps = count_or_zero(j, "shrink_steps"), g.shrink_tries = count_or_zero(j, "shrink_tries");
  g.shrink_minimal = j.contains("shrink_minimal") && bool_field(j, "shrink_minimal");
  if (j.contains("fault")) g.fault = string_field(j, "fault");
  if (j.contains("fault_reproduced") && !json_field(j, "fault_reproduced").is_null())
    g.fault_reproduced = bool_field(j, "fault_reproduced");
  g.members = list_field(j, "members", [&g](const json& m) {
    GroupMember member{string_field(m, "id"),      string_field(m, "shape_class"), u64_field(m, "seed"),
                       u64_field(m, "case_index"), int_field(m, "cases", 0),       string_field(m, "bundle"),
                       string_field(m, "replay")};
    if (m.contains("worst_ratio"))  // version 3
      member.worst_ratio = ratio_field(m, "worst_ratio"), member.worst_case = u64_field(m, "worst_case");
    member.verdict = m.contains("verdict") ? string_field(m, "verdict") : g.verdict;
    return member;
  });
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
          {"cells", cells},
          {"verdict", h.verdict},
          {"detail", h.detail}};
}

Heatmap heatmap_from(const json& j) {
  Heatmap h;
  h.backend = string_field(j, "backend"), h.op = string_field(j, "op"), h.output = string_field(j, "output");
  h.row_label = string_field(j, "row_label"), h.col_label = string_field(j, "col_label");
  h.seed = u64_field(j, "seed"), h.case_index = u64_field(j, "case_index");
  h.shape_class = string_field(j, "shape_class"), h.replay = string_field(j, "replay");
  h.full_rows = int_field(j, "full_rows", 0), h.full_cols = int_field(j, "full_cols", 0);
  h.rows = int_field(j, "rows", 0), h.cols = int_field(j, "cols", 0),
  h.col_group = int_field(j, "col_group", 0);
  for (const auto& c : array_field(j, "cells")) h.cells.push_back(ratio_value(c, "cells"));
  if (j.contains("verdict")) h.verdict = string_field(j, "verdict"), h.detail = string_field(j, "detail");
  // cells == rows x cols, by division: the product of two int64 from the file can overflow.
  const auto n = static_cast<std::uint64_t>(h.cells.size()), rows = static_cast<std::uint64_t>(h.rows);
  if (rows == 0 ? n != 0 : n % rows != 0 || n / rows != static_cast<std::uint64_t>(h.cols))
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
  return {string_field(j, "id"),           string_field(j, "summary"),   string_field(j, "upstream"),
          string_field(j, "replay"),       strings_field(j, "backends"), int_field(j, "cases", 0),
          int_field(j, "backend_cases", 0)};
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
  json out = {{"format", kReportFormatName},
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
  if (!r.stream.empty()) out["stream"] = r.stream;
  if (r.budget_seconds) out["budget_seconds"] = number_json(*r.budget_seconds);
  if (!r.phases.empty()) {
    json phases = json::array();
    for (const auto& p : r.phases) phases.push_back({{"name", p.name}, {"seconds", number_json(p.seconds)}});
    out["phases"] = phases;
  }
  if (r.cases_abandoned > 0) out["cases_abandoned"] = r.cases_abandoned;
  if (r.cases_not_started > 0) out["cases_not_started"] = r.cases_not_started;
  if (r.cases_deferred > 0) out["cases_deferred"] = r.cases_deferred;
  if (r.heatmaps_left_out > 0) out["heatmaps_left_out"] = r.heatmaps_left_out;
  return out;
}

Report report_from_json(const json& j) {
  try {
    if (!j.is_object() || !j.contains("format") || j["format"] != kReportFormatName)
      throw std::runtime_error(fmt::format("not a {} file", kReportFormatName));
    const auto version = int_field(j, "format_version");
    if (version < 1 || version > kReportFormatVersion)
      throw std::runtime_error(fmt::format("{} version {} (this driftcheck reads 1 to {})", kReportFormatName,
                                           version, kReportFormatVersion));
    Report r;
    r.tool_version = string_field(j, "tool_version"), r.command = string_field(j, "command");
    r.seed = u64_field(j, "seed"), r.cases = int_field(j, "cases", 0), r.checks = int_field(j, "checks", 0);
    r.seconds = number_field(j, "seconds");
    if (j.contains("stream")) r.stream = string_field(j, "stream");
    r.ops = list_field(j, "ops", [](const json& o) {
      return OpReport{string_field(o, "op"), int_field(o, "cases", 0), number_field(o, "reference_seconds")};
    });
    r.backends = list_field(j, "backends", backend_from);
    r.findings = list_field(j, "findings", finding_from);
    r.divergence = list_field(j, "divergence_ulps", [](const json& d) {
      DivergenceCell c{string_field(d, "op"), string_field(d, "a"), string_field(d, "b"),
                       ratio_field(d, "max_ulps"), int_field(d, "shared_cases", 0)};
      // Version 1 has no tolerance-relative divergence: NaN says "not measured".
      c.max_ratio =
          d.contains("max_ratio") ? ratio_field(d, "max_ratio") : std::numeric_limits<double>::quiet_NaN();
      c.beyond_cases = count_or_zero(d, "beyond_cases"),
      c.nonfinite_cases = count_or_zero(d, "nonfinite_cases");
      return c;
    });
    // Version 1 has no groups, heatmaps or known findings.
    if (j.contains("groups")) r.groups = list_field(j, "groups", group_from);
    if (j.contains("heatmaps")) r.heatmaps = list_field(j, "heatmaps", heatmap_from);
    if (j.contains("known_findings")) r.known_findings = list_field(j, "known_findings", known_from);
    // Reports written before the time budget have none of these.
    if (j.contains("budget_seconds")) r.budget_seconds = number_field(j, "budget_seconds");
    if (j.contains("phases"))
      r.phases = list_field(j, "phases", [](const json& p) {
        return PhaseTime{string_field(p, "name"), number_field(p, "seconds")};
      });
    r.cases_abandoned = count_or_zero(j, "cases_abandoned");
    r.cases_not_started = count_or_zero(j, "cases_not_started");
    r.cases_deferred = count_or_zero(j, "cases_deferred");
    r.heatmaps_left_out = count_or_zero(j, "heatmaps_left_out");
    r.unavailable = strings_field(j, "unavailable"), r.errors = strings_field(j, "errors");
    r.exit_code = exit_code_field(j, "exit_code");
    return r;
  } catch (const FieldError& e) {
    throw std::runtime_error(fmt::format("malformed {}: {}", kReportFormatName, e.what()));
  }
}

}  // namespace driftcheck::reports
