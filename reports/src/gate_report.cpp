// gate.json: the whole gate report model, versioned, read back by `driftcheck baseline update`.
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/files/json_fields.hpp"
#include "driftcheck/reports/gate_report.hpp"

namespace driftcheck::reports {

using files::array_field;
using files::bool_field;
using files::exit_code_field;
using files::FieldError;
using files::format_problem;
using files::int_field;
using files::list_field;
using files::number_field;
using files::number_json;
using files::object_field;
using files::string_field;
using files::string_value;
using files::strings_field;
using files::u64_field;
using files::within_field;
namespace {

using nlohmann::json;

json check_json(const GateCheck& c) {
  json props = json::array();
  for (const auto& [k, v] : c.properties) props.push_back({k, v});
  return {{"backend", c.backend}, {"op", c.op},
          {"check", c.check},     {"status", check_status_name(c.status)},
          {"message", c.message}, {"details", c.details},
          {"properties", props},  {"seconds", c.seconds}};
}

GateCheck check_from(const json& j) {
  GateCheck c{string_field(j, "backend"),
              string_field(j, "op"),
              string_field(j, "check"),
              CheckStatus::kPassed,
              string_field(j, "message"),
              string_field(j, "details"),
              {},
              number_field(j, "seconds")};
  const std::string status = string_field(j, "status");
  if (status == "failed")
    c.status = CheckStatus::kFailed;
  else if (status == "skipped")
    c.status = CheckStatus::kSkipped;
  else if (status != "passed")
    throw FieldError("status", fmt::format("unknown check status '{}'", status));
  for (const auto& p : array_field(j, "properties")) {
    if (!p.is_array() || p.size() != 2) throw FieldError("properties", "expected [name, value] pairs");
    c.properties.emplace_back(string_value(p[0], "properties"), string_value(p[1], "properties"));
  }
  return c;
}

json change_json(const BaselineChange& c) {
  return {{"backend", c.backend},
          {"op", c.op},
          {"format", c.format},
          {"metric", c.metric},
          {"baseline", number_json(c.baseline)},
          {"now", number_json(c.now)},
          {"severity", number_json(c.severity)}};
}

BaselineChange change_from(const json& j) {
  return {string_field(j, "backend"), string_field(j, "op"),       string_field(j, "format"),
          string_field(j, "metric"),  number_field(j, "baseline"), number_field(j, "now"),
          number_field(j, "severity")};
}

json entry_json(const GateStatsEntry& e) {
  json j = to_json(e.stats);
  j["backend"] = e.backend, j["op"] = e.op, j["format"] = e.format;
  return j;
}

GateStatsEntry entry_from(const json& j) {
  return {string_field(j, "backend"), string_field(j, "op"), string_field(j, "format"),
          drift_stats_from_json(j)};
}

json row_json(const GateRow& r) {
  json j = to_json(r.total);
  j["backend"] = r.backend, j["op"] = r.op, j["kind"] = r.kind, j["failed"] = r.failed;
  return j;
}

GateRow row_from(const json& j) {
  return {string_field(j, "backend"), string_field(j, "op"), string_field(j, "kind"),
          drift_stats_from_json(j), bool_field(j, "failed")};
}

json known_json(const GateKnownFinding& k) {
  return {
      {"id", k.id},
      {"summary", k.summary},
      {"replay", k.replay},
      {"backends", k.backends},
      {"cases", {{"campaign", k.campaign_cases}, {"corpus", k.corpus_cases}, {"golden", k.golden_cases}}}};
}

GateKnownFinding known_from(const json& j) {
  const json& n = object_field(j, "cases");
  return within_field("cases", [&] {
    return GateKnownFinding{string_field(j, "id"),       string_field(j, "summary"),
                            string_field(j, "replay"),   strings_field(j, "backends"),
                            int_field(n, "campaign", 0), int_field(n, "corpus", 0),
                            int_field(n, "golden", 0)};
  });
}

}  // namespace

std::string_view check_status_name(CheckStatus s) {
  switch (s) {
    case CheckStatus::kPassed:
      return "passed";
    case CheckStatus::kFailed:
      return "failed";
    case CheckStatus::kSkipped:
      return "skipped";
  }
  return "unknown";
}

json to_json(const GateReport& r) {
  json rows = json::array(), checks = json::array(), changes = json::array(), stats = json::array(),
       detection = json::array(), known = json::array();
  for (const auto& x : r.rows) rows.push_back(row_json(x));
  for (const auto& c : r.checks) checks.push_back(check_json(c));
  for (const auto& c : r.changes) changes.push_back(change_json(c));
  for (const auto& e : r.stats) stats.push_back(entry_json(e));
  for (const auto& k : r.known) known.push_back(known_json(k));
  for (const auto& d : r.detection)
    detection.push_back({{"mutant", d.mutant}, {"mutates", d.mutates}, {"caught_by", d.caught_by}});
  return {{"format", kGateFormatName},
          {"format_version", kGateFormatVersion},
          {"tool_version", r.tool_version},
          {"command", r.command},
          {"config", r.config_path},
          {"config_sha256", r.config_sha256},
          {"baseline", r.baseline_path},
          {"stream", r.stream},
          {"seed", r.seed},
          {"cases", r.cases},
          {"mutants", r.mutants},
          {"seconds", r.seconds},
          {"phase_seconds",
           {{"golden", r.golden_seconds}, {"corpus", r.corpus_seconds}, {"campaign", r.campaign_seconds}}},
          {"golden_cases", r.golden_cases},
          {"corpus_cases", r.corpus_cases},
          {"rows", rows},
          {"checks", checks},
          {"changes", changes},
          {"stats", stats},
          {"mutant_detection", detection},
          {"known_findings", known},
          {"notes", r.notes},
          {"errors", r.errors},
          {"exit_code", r.exit_code}};
}

GateReport gate_report_from_json(const json& j) {
  if (!j.is_object() || !j.contains("format") || j["format"] != kGateFormatName)
    throw std::runtime_error(fmt::format("not a {} file", kGateFormatName));
  if (const std::string problem = format_problem(j, kGateFormatName, kGateFormatVersion); !problem.empty())
    throw std::runtime_error(problem);
  try {
    GateReport r;
    r.tool_version = string_field(j, "tool_version"), r.command = string_field(j, "command");
    r.config_path = string_field(j, "config"), r.config_sha256 = string_field(j, "config_sha256");
    r.baseline_path = string_field(j, "baseline"), r.stream = string_field(j, "stream");
    r.seed = u64_field(j, "seed"), r.cases = int_field(j, "cases", 0), r.mutants = bool_field(j, "mutants");
    r.seconds = number_field(j, "seconds");
    within_field("phase_seconds", [&] {
      const json& ph = object_field(j, "phase_seconds");
      r.golden_seconds = number_field(ph, "golden"), r.corpus_seconds = number_field(ph, "corpus");
      r.campaign_seconds = number_field(ph, "campaign");
    });
    r.golden_cases = int_field(j, "golden_cases", 0), r.corpus_cases = int_field(j, "corpus_cases", 0);
    r.rows = list_field(j, "rows", row_from);
    r.checks = list_field(j, "checks", check_from);
    r.changes = list_field(j, "changes", change_from);
    r.stats = list_field(j, "stats", entry_from);
    r.detection = list_field(j, "mutant_detection", [](const json& d) {
      return MutantDetection{string_field(d, "mutant"), string_field(d, "mutates"),
                             strings_field(d, "caught_by")};
    });
    // Gate runs written before known findings were reported have none.
    if (j.contains("known_findings")) r.known = list_field(j, "known_findings", known_from);
    r.notes = strings_field(j, "notes"), r.errors = strings_field(j, "errors");
    r.exit_code = exit_code_field(j, "exit_code");
    return r;
  } catch (const FieldError& e) {
    throw std::runtime_error(e.what());
  }
}

}  // namespace driftcheck::reports
