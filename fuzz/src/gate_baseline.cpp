#include "driftcheck/fuzz/gate_baseline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/input_error.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {
namespace {

using nlohmann::json;
using reports::BaselineChange;
using reports::number_from_json;
using reports::number_json;

constexpr double kInf = std::numeric_limits<double>::infinity();

auto key_of(const BaselineEntry& e) {
  return std::tie(e.backend, e.op, e.format);
}

nlohmann::ordered_json entry_json(const BaselineEntry& e) {
  return {{"backend", e.backend},
          {"op", e.op},
          {"format", e.format},
          {"cases", e.cases},
          {"failures", e.failures},
          {"worst_ratio", number_json(e.worst_ratio)},
          {"p99_ratio", number_json(e.p99_ratio)},
          {"mean_signed_ulps", number_json(e.mean_signed_ulps)},
          {"max_share_beyond", e.max_share_beyond}};
}

// The reader is fuzzed: every value is checked for type and range, never trusted.
std::int64_t count_from(const json& j) {
  const auto n = j.get<std::int64_t>();
  if (n < 0) throw std::invalid_argument(fmt::format("negative count {}", n));
  return n;
}

double ratio_from(const json& j) {
  const double v = number_from_json(j);
  if (!(v >= 0)) throw std::invalid_argument(fmt::format("ratio {} is not >= 0", v));
  return v;
}

BaselineEntry entry_from(const json& j) {
  BaselineEntry e;
  e.backend = j.at("backend").get<std::string>(), e.op = j.at("op").get<std::string>();
  e.format = j.at("format").get<std::string>();
  e.cases = count_from(j.at("cases"));
  for (const auto& [v, n] : j.at("failures").items()) e.failures[v] = count_from(n);
  e.worst_ratio = ratio_from(j.at("worst_ratio")), e.p99_ratio = ratio_from(j.at("p99_ratio"));
  e.mean_signed_ulps = number_from_json(j.at("mean_signed_ulps"));
  if (std::isnan(e.mean_signed_ulps)) throw std::invalid_argument("mean_signed_ulps is nan");
  e.max_share_beyond = j.at("max_share_beyond").get<double>();
  if (!(e.max_share_beyond >= 0 && e.max_share_beyond <= 1))
    throw std::invalid_argument(fmt::format("max_share_beyond {} is not in [0, 1]", e.max_share_beyond));
  return e;
}

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("baseline", fmt::format("{}: cannot read the file", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One statistic of an entry, with how it compares: `worse(base, now)` in margins (> 0 worse, < 0 better).
struct Metric {
  std::string name;
  std::function<double(const BaselineEntry&)> get;
  std::function<void(BaselineEntry&, double)> set;
  std::function<double(double base, double now)> severity;
};

// Ratios: relative margin on max(value, floor). From 0 (exact data movement) any measurable rise is
// infinitely many margins when the margin is 0.
double ratio_severity(double base, double now, double margin) {
  if (now == base || (std::isinf(now) && std::isinf(base))) return 0;
  if (std::isinf(now)) return kInf;
  if (std::isinf(base)) return -kInf;
  const double unit = margin * std::max(base, kRatioFloor);
  if (unit == 0) return now > base ? kInf : -kInf;
  return (now - base) / unit;
}

// Counts have no margin: one more failing case (or one fewer case run) is severity 2, past the fail line
// at 1.
double count_severity(double more_is_worse_delta) {
  return more_is_worse_delta == 0  ? 0
         : more_is_worse_delta > 0 ? 1 + more_is_worse_delta
                                   : more_is_worse_delta;
}

std::vector<Metric> metrics_of(const BaselineEntry& base, const BaselineEntry& now, const Margin& m) {
  std::vector<Metric> out = {
      {"cases", [](const BaselineEntry& e) { return static_cast<double>(e.cases); },
       [](BaselineEntry& e, double v) { e.cases = static_cast<std::int64_t>(v); },
       [](double b, double n) { return count_severity(b - n); }},
      {"worst_ratio", [](const BaselineEntry& e) { return e.worst_ratio; },
       [](BaselineEntry& e, double v) { e.worst_ratio = v; },
       [r = m.ratio](double b, double n) { return ratio_severity(b, n, r); }},
      {"p99_ratio", [](const BaselineEntry& e) { return e.p99_ratio; },
       [](BaselineEntry& e, double v) { e.p99_ratio = v; },
       [r = m.ratio](double b, double n) { return ratio_severity(b, n, r); }},
      {"max_share_beyond", [](const BaselineEntry& e) { return e.max_share_beyond; },
       [](BaselineEntry& e, double v) { e.max_share_beyond = v; },
       [r = m.ratio](double b, double n) { return ratio_severity(b, n, r); }},
      {"mean_signed_ulps", [](const BaselineEntry& e) { return e.mean_signed_ulps; },
       [](BaselineEntry& e, double v) { e.mean_signed_ulps = v; },
       [u = m.mean_signed_ulps](double b, double n) {
         const double d = std::abs(n) - std::abs(b);
         if (d == 0) return 0.0;
         return u == 0 ? (d > 0 ? kInf : -kInf) : d / u;
       }},
  };
  std::set<std::string> verdicts;
  for (const auto* e : {&base, &now})
    for (const auto& [v, n] : e->failures) verdicts.insert(v);
  for (const auto& v : verdicts) {
    out.push_back({"verdict:" + v,
                   [v](const BaselineEntry& e) {
                     const auto it = e.failures.find(v);
                     return it == e.failures.end() ? 0.0 : static_cast<double>(it->second);
                   },
                   [v](BaselineEntry& e, double x) {
                     if (x == 0)
                       e.failures.erase(v);
                     else
                       e.failures[v] = static_cast<std::int64_t>(x);
                   },
                   [](double b, double n) { return count_severity(n - b); }});
  }
  return out;
}

std::string describe(const BaselineEntry& e, std::string_view metric, double before, double after) {
  return fmt::format("{} {} {} {} {:.6g} -> {:.6g}", e.backend, e.op, e.format, metric, before, after);
}

const BaselineEntry* find_entry(const std::vector<BaselineEntry>& v, const BaselineEntry& key) {
  const auto it = std::find_if(v.begin(), v.end(), [&](const auto& e) { return key_of(e) == key_of(key); });
  return it == v.end() ? nullptr : &*it;
}

void sort_entries(std::vector<BaselineEntry>& v) {
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return key_of(a) < key_of(b); });
}

}  // namespace

Baseline parse_baseline(std::string_view text, const std::filesystem::path& name) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto fail = [&](const std::string& why) {
    throw InputError("baseline", fmt::format("{}: {}", name.string(), why));
  };
  if (j.is_discarded() || !j.is_object()) fail("not a JSON object");
  if (!j.contains("format") || j["format"] != kBaselineFormatName)
    fail(fmt::format("format is not {}", kBaselineFormatName));
  if (!j.contains("format_version") || j["format_version"] != kBaselineFormatVersion)
    fail(fmt::format("format version {} (this driftcheck reads {})",
                     j.value("format_version", json(nullptr)).dump(), kBaselineFormatVersion));
  Baseline b;
  try {
    b.stream = j.at("stream").get<std::string>();
    for (const auto& e : j.at("entries")) {
      b.entries.push_back(entry_from(e));
      if (std::count_if(b.entries.begin(), b.entries.end(),
                        [&](const auto& x) { return key_of(x) == key_of(b.entries.back()); }) > 1)
        fail(fmt::format("two entries for {} {} {}", b.entries.back().backend, b.entries.back().op,
                         b.entries.back().format));
    }
    for (const auto& h : j.at("history"))
      b.history.push_back({h.at("date").get<std::string>(), h.at("action").get<std::string>(),
                           h.at("reason").get<std::string>(),
                           h.at("changes").get<std::vector<std::string>>()});
  } catch (const json::exception& e) {
    fail(e.what());
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  sort_entries(b.entries);
  return b;
}

Baseline read_baseline(const std::filesystem::path& path) {
  return parse_baseline(slurp(path), path);
}

void write_baseline(const std::filesystem::path& path, const Baseline& b) {
  // Key order as documented (format first, the history before the numbers), so the file reads top-down.
  using ordered = nlohmann::ordered_json;
  ordered entries = ordered::array(), history = ordered::array();
  for (const auto& e : b.entries) entries.push_back(entry_json(e));
  for (const auto& h : b.history)
    history.push_back({{"date", h.date}, {"action", h.action}, {"reason", h.reason}, {"changes", h.changes}});
  const ordered j = {{"format", kBaselineFormatName},
                     {"format_version", kBaselineFormatVersion},
                     {"stream", b.stream},
                     {"history", history},
                     {"entries", entries}};
  reports::write_file_atomic(path, j.dump(2) + "\n");
}

BaselineEntry baseline_entry(const reports::GateStatsEntry& g) {
  BaselineEntry e;
  e.backend = g.backend, e.op = g.op, e.format = g.format;
  e.cases = g.stats.cases;
  for (const auto& [v, c] : g.stats.failures) e.failures[v] = c.cases;
  e.worst_ratio = g.stats.worst_ratio, e.p99_ratio = g.stats.p99_ratio();
  e.mean_signed_ulps = g.stats.mean_signed_ulps(), e.max_share_beyond = g.stats.max_share_beyond;
  return e;
}

std::vector<BaselineChange> compare_with_baseline(const Baseline& base, const std::vector<BaselineEntry>& now,
                                                  const Margin& margin) {
  std::vector<BaselineChange> out;
  for (const auto& b : base.entries) {
    const BaselineEntry* n = find_entry(now, b);
    if (n == nullptr) {  // every case lost: that is the change, not the statistics of no cases
      out.push_back(
          {b.backend, b.op, b.format, "cases", static_cast<double>(b.cases), 0, count_severity(b.cases)});
      continue;
    }
    const BaselineEntry& run = *n;
    for (const auto& m : metrics_of(b, run, margin)) {
      const double before = m.get(b), after = m.get(run), severity = m.severity(before, after);
      if (severity != 0) out.push_back({b.backend, b.op, b.format, m.name, before, after, severity});
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.severity > b.severity; });
  return out;
}

RatchetResult ratchet(const Baseline* base, const std::string& stream, const std::vector<BaselineEntry>& now,
                      const Margin& margin, bool allow_loosen, const std::string& reason) {
  RatchetResult r;
  const std::string date = utc_now_iso8601();
  if (base == nullptr || (base->stream != stream && allow_loosen)) {
    r.baseline.stream = stream, r.baseline.entries = now;
    sort_entries(r.baseline.entries);
    if (base != nullptr) r.baseline.history = base->history;
    const bool create = base == nullptr;
    r.baseline.history.push_back(
        {date,
         create ? "create" : "restream",
         reason,
         {create
              ? fmt::format("{} entries measured on {}", now.size(), stream)
              : fmt::format("every statistic replaced: measured on '{}', was '{}'", stream, base->stream)}});
    (create ? r.tightened : r.loosened).push_back(r.baseline.history.back().changes.front());
    return r;
  }
  r.baseline = *base;
  if (base->stream != stream) {
    r.refused.push_back(
        fmt::format("the run was measured on '{}', the baseline on '{}': a new stream replaces every "
                    "statistic",
                    stream, base->stream));
    return r;
  }
  std::vector<BaselineEntry> entries;
  for (const auto& b : base->entries) {
    const BaselineEntry* n = find_entry(now, b);
    if (n == nullptr) {
      const std::string line =
          fmt::format("{} {} {} ran no case ({} in the baseline)", b.backend, b.op, b.format, b.cases);
      (allow_loosen ? r.loosened : r.refused).push_back(line);
      if (!allow_loosen) entries.push_back(b);
      continue;
    }
    const BaselineEntry& run = *n;
    BaselineEntry kept = b;
    for (const auto& m : metrics_of(b, run, margin)) {
      const double before = m.get(b), after = m.get(run), severity = m.severity(before, after);
      if (severity == 0) continue;
      const std::string line = describe(b, m.name, before, after);
      if (severity < 0 || allow_loosen) {
        m.set(kept, after);
        (severity < 0 ? r.tightened : r.loosened).push_back(line);
      } else if (severity > 1) {
        r.refused.push_back(line);
      }
    }
    entries.push_back(kept);
  }
  for (const auto& n : now) {
    if (find_entry(base->entries, n) != nullptr) continue;
    entries.push_back(n);
    r.tightened.push_back(fmt::format("{} {} {} added ({} cases)", n.backend, n.op, n.format, n.cases));
  }
  sort_entries(entries);
  r.baseline.entries = std::move(entries);
  if (!r.loosened.empty()) r.baseline.history.push_back({date, "loosen", reason, r.loosened});
  if (!r.tightened.empty())
    r.baseline.history.push_back(
        {date, "tighten", "", {fmt::format("{} statistics tightened or added", r.tightened.size())}});
  return r;
}

std::string utc_now_iso8601() {
  std::time_t t = std::time(nullptr);
  if (const char* epoch = std::getenv("SOURCE_DATE_EPOCH"); epoch != nullptr && *epoch != '\0') {
    char* end = nullptr;
    const long long v = std::strtoll(epoch, &end, 10);
    if (end != nullptr && *end == '\0' && v >= 0) t = static_cast<std::time_t>(v);
  }
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace driftcheck::fuzz
