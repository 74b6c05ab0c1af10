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
#include "driftcheck/fuzz/json_fields.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {
namespace {

using files::number_json;
using nlohmann::json;
using reports::BaselineChange;

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

// The reader is fuzzed: every value is read through json_fields (type and range checked), never trusted.
// A ratio is >= 0, inf (a NaN/Inf output) or nan (a case without output: an error, crash or timeout).
double ratio_field(const json& j, std::string_view key) {
  const double v = number_field(j, key);
  if (!(v >= 0) && !std::isnan(v)) throw FieldError(std::string(key), fmt::format("{} is not >= 0", v));
  return v;
}

BaselineEntry entry_from(const json& j) {
  BaselineEntry e;
  e.backend = string_field(j, "backend"), e.op = string_field(j, "op"), e.format = string_field(j, "format");
  e.cases = int_field(j, "cases", 0);
  for (const auto& item : object_field(j, "failures").items())
    e.failures[item.key()] = within_field("failures", [&] { return int_value(item.value(), item.key(), 0); });
  e.worst_ratio = ratio_field(j, "worst_ratio"), e.p99_ratio = ratio_field(j, "p99_ratio");
  e.mean_signed_ulps = number_field(j, "mean_signed_ulps");
  if (std::isnan(e.mean_signed_ulps)) throw FieldError("mean_signed_ulps", "nan");
  e.max_share_beyond = number_field(j, "max_share_beyond");
  if (!(e.max_share_beyond >= 0 && e.max_share_beyond <= 1))
    throw FieldError("max_share_beyond", fmt::format("{} is not in [0, 1]", e.max_share_beyond));
  return e;
}

BaselineEvent event_from(const json& h) {
  BaselineEvent ev{string_field(h, "date"), string_field(h, "action"), string_field(h, "reason"), {}};
  for (const auto& line : array_field(h, "changes")) ev.changes.push_back(string_value(line, "changes"));
  return ev;
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
// infinitely many margins when the margin is 0. NaN (a case without output, reports::case_ratio) is worse
// than any number, inf included.
double ratio_severity(double base, double now, double margin) {
  if (std::isnan(now) || std::isnan(base))
    return std::isnan(now) == std::isnan(base) ? 0 : std::isnan(now) ? kInf : -kInf;
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
  if (const std::string problem = format_problem(j, kBaselineFormatName, kBaselineFormatVersion);
      !problem.empty())
    fail(problem);
  Baseline b;
  try {
    b.stream = string_field(j, "stream");
    const json& entries = array_field(j, "entries");
    for (std::size_t i = 0; i < entries.size(); ++i) {
      b.entries.push_back(
          within_field(fmt::format("entries[{}]", i), [&] { return entry_from(entries[i]); }));
      if (std::count_if(b.entries.begin(), b.entries.end(),
                        [&](const auto& x) { return key_of(x) == key_of(b.entries.back()); }) > 1)
        fail(fmt::format("two entries for {} {} {}", b.entries.back().backend, b.entries.back().op,
                         b.entries.back().format));
    }
    const json& history = array_field(j, "history");
    for (std::size_t i = 0; i < history.size(); ++i)
      b.history.push_back(
          within_field(fmt::format("history[{}]", i), [&] { return event_from(history[i]); }));
  } catch (const FieldError& e) {
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
  files::write_file_atomic(path, j.dump(2) + "\n");
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
