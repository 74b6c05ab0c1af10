#include "campaign_stats.hpp"

#include <algorithm>
#include <cmath>

namespace driftcheck::fuzz {

using nlohmann::json;

namespace {

json class_json(const StatisticalClass& c) {
  return {{"cases", c.cases}, {"low", c.low}, {"min_p", number_json(c.min_p)}, {"min_case", c.min_case}};
}

StatisticalClass class_from_json(const json& j) {
  return {j.at("cases"), j.at("low"), number_from_json(j.at("min_p")), j.at("min_case")};
}

}  // namespace

void BackendStats::record(const Evaluation& e, std::uint64_t index, const std::string& shape) {
  ++run;
  if (e.verdict == Verdict::kPass)
    ++passed;
  else
    ++failures[std::string(verdict_name(e.verdict))];
  if (e.worst_ratio > worst_ratio || std::isnan(e.worst_ratio))
    worst_ratio = e.worst_ratio, worst_case = index;
  // Only cases within the worst-case bound carry statistical results (a failing case already is a finding).
  if (e.verdict == Verdict::kPass || e.verdict == Verdict::kBeyondStatisticalBound)
    stat_classes[shape].add(e.stat_p_value, index);
}

void BackendStats::merge(const BackendStats& o) {
  run += o.run, unsupported += o.unsupported, passed += o.passed, seconds += o.seconds;
  for (const auto& [c, t] : o.stat_classes) stat_classes[c].merge(t);
  for (const auto& [r, n] : o.reasons) reasons[r] += n;
  for (const auto& [v, n] : o.failures) failures[v] += n;
  for (const auto& [f, d] : o.drift) drift[f].merge(d);
  if (o.worst_ratio > worst_ratio || std::isnan(o.worst_ratio))
    worst_ratio = o.worst_ratio, worst_case = o.worst_case;
  while (reasons.size() > kMaxReasons)
    reasons.erase(std::min_element(reasons.begin(), reasons.end(),
                                   [](const auto& a, const auto& b) { return a.second < b.second; }));
}

json BackendStats::to_json() const {
  json d = json::object();
  for (const auto& [f, s] : drift) d[f] = reports::to_json(s);
  json classes = json::object();
  for (const auto& [c, t] : stat_classes) classes[c] = class_json(t);
  return {{"run", run},
          {"unsupported", unsupported},
          {"passed", passed},
          {"reasons", reasons},
          {"failures", failures},
          {"worst_ratio", number_json(worst_ratio)},
          {"worst_case", worst_case},
          {"seconds", seconds},
          {"drift", d},
          {"stat_classes", classes}};
}

BackendStats BackendStats::from_json(const json& j) {
  BackendStats s;
  s.run = j.at("run"), s.unsupported = j.at("unsupported"), s.passed = j.at("passed");
  s.reasons = j.at("reasons").get<std::map<std::string, std::int64_t>>();
  s.failures = j.at("failures").get<std::map<std::string, std::int64_t>>();
  s.worst_ratio = number_from_json(j.at("worst_ratio")), s.worst_case = j.at("worst_case");
  s.seconds = j.at("seconds");
  // Journals written before drift statistics existed resume with none for their cases.
  if (j.contains("drift"))
    for (const auto& [f, d] : j.at("drift").items()) s.drift[f] = reports::drift_stats_from_json(d);
  if (j.contains("stat_classes"))  // journals written before the statistical tier have none
    for (const auto& [c, t] : j.at("stat_classes").items()) s.stat_classes[c] = class_from_json(t);
  return s;
}

void Stats::merge(const Stats& o) {
  for (const auto& [n, b] : o.backends) backends[n].merge(b);
  for (const auto& [k, p] : o.pairs) {
    auto& mine = pairs[k];
    if (p.max_ulps > mine.max_ulps || std::isnan(p.max_ulps)) mine.max_ulps = p.max_ulps;
    mine.shared += p.shared;
  }
  for (const auto& [n, op] : o.ops)
    ops[n].cases += op.cases, ops[n].reference_seconds += op.reference_seconds;
  checks += o.checks;
}

json Stats::to_json() const {
  json b = json::object(), p = json::array(), o = json::object();
  for (const auto& [n, s] : backends) b[n] = s.to_json();
  for (const auto& [k, s] : pairs) p.push_back({k.first, k.second, number_json(s.max_ulps), s.shared});
  for (const auto& [n, s] : ops) o[n] = {s.cases, s.reference_seconds};
  return {{"backends", b}, {"pairs", p}, {"ops", o}, {"checks", checks}};
}

Stats Stats::from_json(const json& j) {
  Stats s;
  for (const auto& [n, b] : j.at("backends").items()) s.backends[n] = BackendStats::from_json(b);
  for (const auto& p : j.at("pairs")) s.pairs[{p.at(0), p.at(1)}] = {number_from_json(p.at(2)), p.at(3)};
  for (const auto& [n, o] : j.at("ops").items()) s.ops[n] = {o.at(0), o.at(1)};
  s.checks = j.at("checks");
  return s;
}

}  // namespace driftcheck::fuzz
