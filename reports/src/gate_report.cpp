// gate.json: the whole gate report model, versioned, read back by `driftcheck baseline update`.
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/reports/gate_report.hpp"

namespace driftcheck::reports {
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
  GateCheck c{j.at("backend"), j.at("op"), j.at("check"),  CheckStatus::kPassed, j.at("message"),
              j.at("details"), {},         j.at("seconds")};
  const std::string status = j.at("status");
  if (status == "failed")
    c.status = CheckStatus::kFailed;
  else if (status == "skipped")
    c.status = CheckStatus::kSkipped;
  else if (status != "passed")
    throw std::runtime_error(fmt::format("unknown check status '{}'", status));
  for (const auto& p : j.at("properties")) c.properties.emplace_back(p.at(0), p.at(1));
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
  return {j.at("backend"),
          j.at("op"),
          j.at("format"),
          j.at("metric"),
          number_from_json(j.at("baseline")),
          number_from_json(j.at("now")),
          number_from_json(j.at("severity"))};
}

json entry_json(const GateStatsEntry& e) {
  json j = to_json(e.stats);
  j["backend"] = e.backend, j["op"] = e.op, j["format"] = e.format;
  return j;
}

GateStatsEntry entry_from(const json& j) {
  return {j.at("backend"), j.at("op"), j.at("format"), drift_stats_from_json(j)};
}

json row_json(const GateRow& r) {
  json j = to_json(r.total);
  j["backend"] = r.backend, j["op"] = r.op, j["kind"] = r.kind, j["failed"] = r.failed;
  return j;
}

GateRow row_from(const json& j) {
  return {j.at("backend"), j.at("op"), j.at("kind"), drift_stats_from_json(j), j.at("failed")};
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
  const json& n = j.at("cases");
  return {j.at("id"),       j.at("summary"), j.at("replay"), j.at("backends"),
          n.at("campaign"), n.at("corpus"),  n.at("golden")};
}

template <class T, class F>
std::vector<T> list_from(const json& j, F&& each) {
  std::vector<T> out;
  for (const auto& x : j) out.push_back(each(x));
  return out;
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
  if (!j.is_object() || j.value("format", "") != kGateFormatName)
    throw std::runtime_error(fmt::format("not a {} file", kGateFormatName));
  if (j.value("format_version", 0) != kGateFormatVersion)
    throw std::runtime_error(fmt::format("format version {} (this driftcheck reads {})",
                                         j.value("format_version", 0), kGateFormatVersion));
  try {
    GateReport r;
    r.tool_version = j.at("tool_version"), r.command = j.at("command");
    r.config_path = j.at("config"), r.config_sha256 = j.at("config_sha256");
    r.baseline_path = j.at("baseline"), r.stream = j.at("stream");
    r.seed = j.at("seed"), r.cases = j.at("cases"), r.mutants = j.at("mutants"), r.seconds = j.at("seconds");
    const auto& ph = j.at("phase_seconds");
    r.golden_seconds = ph.at("golden"), r.corpus_seconds = ph.at("corpus"),
    r.campaign_seconds = ph.at("campaign");
    r.golden_cases = j.at("golden_cases"), r.corpus_cases = j.at("corpus_cases");
    r.rows = list_from<GateRow>(j.at("rows"), row_from);
    r.checks = list_from<GateCheck>(j.at("checks"), check_from);
    r.changes = list_from<BaselineChange>(j.at("changes"), change_from);
    r.stats = list_from<GateStatsEntry>(j.at("stats"), entry_from);
    r.detection = list_from<MutantDetection>(j.at("mutant_detection"), [](const json& d) {
      return MutantDetection{d.at("mutant"), d.at("mutates"), d.at("caught_by")};
    });
    // Gate runs written before known findings were reported have none.
    if (j.contains("known_findings"))
      r.known = list_from<GateKnownFinding>(j.at("known_findings"), known_from);
    r.notes = j.at("notes"), r.errors = j.at("errors"), r.exit_code = j.at("exit_code");
    return r;
  } catch (const json::exception& e) {
    throw std::runtime_error(e.what());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
}

}  // namespace driftcheck::reports
