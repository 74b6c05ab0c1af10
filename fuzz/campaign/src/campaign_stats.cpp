#include "driftcheck/fuzz/campaign_stats.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "driftcheck/files/json_text.hpp"
#include "driftcheck/fuzz/features.hpp"
#include "driftcheck/fuzz/json_fields.hpp"
#include "driftcheck/reports/numbers.hpp"

namespace driftcheck::fuzz {

using files::number_json;
using nlohmann::json;

namespace {

json class_json(const StatisticalClass& c) {
  return {{"cases", c.cases}, {"low", c.low}, {"min_p", number_json(c.min_p)}, {"min_case", c.min_case}};
}

StatisticalClass class_from_json(const json& j) {  // j is an object
  return {int_field(j, "cases", 0), int_field(j, "low", 0), number_field(j, "min_p"),
          u64_field(j, "min_case")};
}

}  // namespace

bool BackendStats::worse(std::string_view verdict, double ratio, std::uint64_t index) const {
  return run == 0 || reports::worse_case(verdict, ratio, index, worst_verdict, worst_ratio, worst_case);
}

void BackendStats::record(const Evaluation& e, std::uint64_t index, const std::string& shape) {
  const std::string_view verdict = is_failure(e.verdict) ? verdict_name(e.verdict) : std::string_view();
  const double ratio = reports::case_ratio(verdict, e.worst_ratio);
  if (worse(verdict, ratio, index)) worst_verdict = verdict, worst_ratio = ratio, worst_case = index;
  ++run;
  if (e.verdict == Verdict::kPass)
    ++passed;
  else
    ++failures[std::string(verdict_name(e.verdict))];
  // Only cases within the worst-case bound carry statistical results (a failing case already is a finding).
  if (e.verdict == Verdict::kPass || e.verdict == Verdict::kBeyondStatisticalBound)
    stat_classes[shape].add(e.stat_p_value, index);
}

void BackendStats::record_shape(const CaseSpec& spec, const Evaluation& e) {
  const double ratio = reports::case_ratio(verdict_name(e.verdict), e.worst_ratio);
  for (const ShapeKey& key : shape_buckets(spec)) {
    ShapeStats& sh = shapes[key.param + "|" + key.bucket];
    sh.param = key.param, sh.bucket = key.bucket, sh.order = key.order;
    sh.add(ratio, is_failure(e.verdict));
  }
}

void ShapeStats::add(double ratio, bool failing) {
  ++cases, failed += failing;
  if (ratio > max_ratio || std::isnan(ratio)) max_ratio = ratio;
  if (std::isfinite(ratio) && ratio > 0) sum_log2 += std::log2(ratio), ++log2_cases;
}

void ShapeStats::merge(const ShapeStats& o) {
  if (param.empty()) param = o.param, bucket = o.bucket, order = o.order;
  cases += o.cases, failed += o.failed, sum_log2 += o.sum_log2, log2_cases += o.log2_cases;
  if (o.max_ratio > max_ratio || std::isnan(o.max_ratio)) max_ratio = o.max_ratio;
}

void BackendStats::merge(const BackendStats& o) {
  if (o.run > 0 && worse(o.worst_verdict, o.worst_ratio, o.worst_case))
    worst_verdict = o.worst_verdict, worst_ratio = o.worst_ratio, worst_case = o.worst_case;
  for (const auto& [k, sh] : o.shapes) shapes[k].merge(sh);
  run += o.run, unsupported += o.unsupported, passed += o.passed, seconds += o.seconds;
  for (const auto& [c, t] : o.stat_classes) stat_classes[c].merge(t);
  for (const auto& [r, n] : o.reasons) reasons[r] += n;
  for (const auto& [v, n] : o.failures) failures[v] += n;
  for (const auto& [f, d] : o.drift) drift[f].merge(d);
  for (const auto& [id, n] : o.known) known[id] += n;
  worker_restarts += o.worker_restarts, restart_seconds += o.restart_seconds;
  skipped_restarting += o.skipped_restarting, skipped_quarantined += o.skipped_quarantined;
  // The earliest case's quarantine: independent of the order cases are folded in.
  if (!o.quarantined.empty() && (quarantined.empty() || o.quarantined_case < quarantined_case))
    quarantined = o.quarantined, quarantined_case = o.quarantined_case;
  while (reasons.size() > kMaxReasons)
    reasons.erase(std::min_element(reasons.begin(), reasons.end(),
                                   [](const auto& a, const auto& b) { return a.second < b.second; }));
}

json BackendStats::to_json() const {
  json j = fields_json();
  // Only a backend whose workers faulted has these: other journals stay as they were.
  if (worker_restarts != 0 || restart_seconds != 0 || skipped_restarting != 0 || skipped_quarantined != 0 ||
      !quarantined.empty())
    j["workers"] = {{"restarts", worker_restarts},
                    {"restart_seconds", restart_seconds},
                    {"skipped_restarting", skipped_restarting},
                    {"skipped_quarantined", skipped_quarantined},
                    {"quarantined", quarantined},
                    {"quarantined_case", quarantined_case}};
  return j;
}

json BackendStats::fields_json() const {
  json d = json::object();
  for (const auto& [f, s] : drift) d[f] = reports::to_json(s);
  json classes = json::object();
  for (const auto& [c, t] : stat_classes) classes[c] = class_json(t);
  return {{"run", run},
          {"unsupported", unsupported},
          {"passed", passed},
          {"reasons", reasons},
          {"failures", failures},
          {"known", known},
          {"worst_verdict", worst_verdict},
          {"worst_ratio", number_json(worst_ratio)},
          {"worst_case", worst_case},
          {"seconds", seconds},
          {"drift", d},
          {"stat_classes", classes},
          {"shapes", shapes_json()}};
}

json BackendStats::shapes_json() const {
  json out = json::array();
  for (const auto& [k, sh] : shapes)
    out.push_back({sh.param, sh.bucket, sh.order, sh.cases, sh.failed, number_json(sh.max_ratio), sh.sum_log2,
                   sh.log2_cases});
  return out;
}

namespace {

// Reason and verdict counts: {"text": count, ...}.
std::map<std::string, std::int64_t> counts_from(const json& j, std::string_view key) {
  std::map<std::string, std::int64_t> out;
  for (const auto& item : object_field(j, key).items())
    out[item.key()] = within_field(key, [&] { return int_value(item.value(), item.key(), 0); });
  return out;
}

}  // namespace

BackendStats BackendStats::from_json(const json& j) {
  BackendStats s;
  s.run = int_field(j, "run", 0), s.unsupported = int_field(j, "unsupported", 0);
  s.passed = int_field(j, "passed", 0);
  s.reasons = counts_from(j, "reasons"), s.failures = counts_from(j, "failures");
  // Journals written before known findings existed have no "known".
  if (j.contains("known")) s.known = counts_from(j, "known");
  s.worst_ratio = number_field(j, "worst_ratio"), s.worst_case = u64_field(j, "worst_case");
  if (j.contains("worst_verdict")) s.worst_verdict = string_field(j, "worst_verdict");
  s.seconds = number_field(j, "seconds");
  // Journals written before drift statistics existed resume with none for their cases.
  if (j.contains("drift"))
    for (const auto& item : object_field(j, "drift").items())
      s.drift[item.key()] =
          within_field("drift." + item.key(), [&] { return reports::drift_stats_from_json(item.value()); });
  if (j.contains("stat_classes"))  // journals written before the statistical tier have none
    for (const auto& item : object_field(j, "stat_classes").items()) {
      const std::string name = "stat_classes." + item.key();
      if (!item.value().is_object()) throw FieldError(name, "expected an object");
      s.stat_classes[item.key()] = within_field(name, [&] { return class_from_json(item.value()); });
    }
  if (j.contains("shapes")) {  // journals written before error by shape have none
    const json& shapes = array_field(j, "shapes");
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const json& a = shapes[i];
      const std::string name = fmt::format("shapes[{}]", i);
      if (!a.is_array() || a.size() != 8)
        throw FieldError(name,
                         "expected [param, bucket, order, cases, failed, max_ratio, sum_log2, log2_cases]");
      const ShapeStats sh{string_value(a[0], name), string_value(a[1], name), number_value(a[2], name),
                          int_value(a[3], name, 0), int_value(a[4], name, 0), number_value(a[5], name),
                          number_value(a[6], name), int_value(a[7], name, 0)};
      s.shapes[sh.param + "|" + sh.bucket] = sh;
    }
  }
  if (j.contains("workers")) {  // only backends whose workers faulted, and not before worker faults were kept
    const json& w = object_field(j, "workers");
    within_field("workers", [&] {
      s.worker_restarts = int_field(w, "restarts", 0), s.restart_seconds = number_field(w, "restart_seconds");
      s.skipped_restarting = int_field(w, "skipped_restarting", 0);
      s.skipped_quarantined = int_field(w, "skipped_quarantined", 0);
      s.quarantined = string_field(w, "quarantined"), s.quarantined_case = u64_field(w, "quarantined_case");
      return 0;
    });
  }
  return s;
}

void PairStats::merge(const PairStats& o) {
  if (o.max_ulps > max_ulps || std::isnan(o.max_ulps)) max_ulps = o.max_ulps;
  if (o.max_ratio > max_ratio || std::isnan(o.max_ratio)) max_ratio = o.max_ratio;
  shared += o.shared, beyond += o.beyond, nonfinite += o.nonfinite;
}

void Stats::merge(const Stats& o) {
  for (const auto& [n, b] : o.backends) backends[n].merge(b);
  for (const auto& [k, p] : o.pairs) pairs[k].merge(p);
  for (const auto& [n, op] : o.ops)
    ops[n].cases += op.cases, ops[n].reference_seconds += op.reference_seconds;
  checks += o.checks;
  for (const auto& [id, n] : o.failing) failing[id] += n;
  for (const auto& [id, w] : o.failing_worst) fold_worst(id, w.first, w.second);
}

void Stats::fold_worst(const std::string& id, double ratio, std::uint64_t index) {
  // One finding id has one verdict, so the ratio and the index decide (reports::worse_case).
  const auto [it, fresh] = failing_worst.try_emplace(id, ratio, index);
  if (!fresh && reports::worse_case("", ratio, index, "", it->second.first, it->second.second))
    it->second = {ratio, index};
}

void Stats::add_failing(const std::string& id, std::string_view verdict, double ratio, std::uint64_t index) {
  ++failing[id];
  fold_worst(id, reports::case_ratio(verdict, ratio), index);
}

json Stats::to_json() const {
  json b = json::object(), p = json::array(), o = json::object();
  for (const auto& [n, s] : backends) b[n] = s.to_json();
  for (const auto& [k, s] : pairs)
    p.push_back({k.first, k.second, number_json(s.max_ulps), s.shared, number_json(s.max_ratio), s.beyond,
                 s.nonfinite});
  for (const auto& [n, s] : ops) o[n] = {s.cases, s.reference_seconds};
  json worst = json::object();
  for (const auto& [id, w] : failing_worst) worst[id] = {number_json(w.first), w.second};
  return {{"backends", b},    {"pairs", p},         {"ops", o},
          {"checks", checks}, {"failing", failing}, {"failing_worst", worst}};
}

// pairs: [[a, b, max_ulps, shared, max_ratio, beyond, nonfinite], ...]; ops: {"op": [cases,
// reference_seconds], ...}; failing: {"finding id": cases, ...}.
Stats Stats::from_json(const json& j) {
  Stats s;
  for (const auto& item : object_field(j, "backends").items())
    s.backends[item.key()] =
        within_field("backends." + item.key(), [&] { return BackendStats::from_json(item.value()); });
  const json& pairs = array_field(j, "pairs");
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const json& p = pairs[i];
    const std::string name = fmt::format("pairs[{}]", i);
    // Journals written before the tolerance-relative divergence have the first four only.
    if (!p.is_array() || (p.size() != 4 && p.size() != 7))
      throw FieldError(name, "expected [a, b, max_ulps, shared, max_ratio, beyond, nonfinite]");
    PairStats ps{number_value(p[2], name), int_value(p[3], name, 0)};
    if (p.size() == 7)
      ps.max_ratio = number_value(p[4], name), ps.beyond = int_value(p[5], name, 0),
      ps.nonfinite = int_value(p[6], name, 0);
    s.pairs[{string_value(p[0], name), string_value(p[1], name)}] = ps;
  }
  for (const auto& [n, o] : object_field(j, "ops").items()) {
    const std::string name = "ops." + n;
    if (!o.is_array() || o.size() != 2) throw FieldError(name, "expected [cases, reference_seconds]");
    s.ops[n] = {int_value(o[0], name, 0), number_value(o[1], name)};
  }
  s.checks = int_field(j, "checks", 0);
  if (j.contains("failing")) s.failing = counts_from(j, "failing");  // journals before groups have none
  if (j.contains("failing_worst"))  // journals before a group's worst was over its members have none
    for (const auto& item : object_field(j, "failing_worst").items()) {
      const std::string name = "failing_worst." + item.key();
      const json& w = item.value();
      if (!w.is_array() || w.size() != 2) throw FieldError(name, "expected [ratio, case]");
      s.failing_worst[item.key()] = {number_value(w[0], name),
                                     static_cast<std::uint64_t>(int_value(w[1], name, 0))};
    }
  return s;
}

}  // namespace driftcheck::fuzz
