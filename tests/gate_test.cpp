// The gate's parts, each both ways: drift statistics (histogram quantiles bracket the true ones), the TOML
// config (every kind of bad input is one InputError naming file and line), the baseline file and its ratchet
// (tightening automatic, loosening only with a reason that stays in the file), and the report writers.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "driftcheck/files/json_fields.hpp"
#include "driftcheck/fuzz/gate_baseline.hpp"
#include "driftcheck/fuzz/gate_config.hpp"
#include "driftcheck/fuzz/input_error.hpp"
#include "driftcheck/reports/drift.hpp"
#include "driftcheck/reports/gate_report.hpp"
#include "expect_error.hpp"

namespace driftcheck::fuzz {
namespace {

using reports::DriftStats;
using reports::RatioHistogram;

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(RatioHistogram, QuantileIsTheUpperEdgeOfTheTrueQuantilesBin) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(-2.0, 3.0);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> v(1 + rng() % 500);
    RatioHistogram h;
    for (auto& x : v) h.add(x = dist(rng));
    std::sort(v.begin(), v.end());
    for (double q : {0.5, 0.9, 0.99, 1.0}) {
      const double truth = v[static_cast<std::size_t>(std::ceil(q * v.size())) - 1];
      const double got = h.quantile(q);
      EXPECT_GE(got, truth) << q;
      EXPECT_LE(got, truth * (1 + 1.0 / 16)) << q;  // bin width at most 1/16 of the octave's lower edge
    }
  }
}

TEST(RatioHistogram, BinsAreExactAtTheirEdgesAndCountZerosAndNonFiniteApart) {
  for (int key : {-100, -33, -32, -1, 0, 1, 31, 32, 200}) {
    const double edge = RatioHistogram::upper_edge(key);
    EXPECT_EQ(RatioHistogram::bin_of(std::nextafter(edge, 0.0)), key) << key;
    EXPECT_EQ(RatioHistogram::bin_of(edge), key + 1) << key;
  }
  RatioHistogram h;
  // inf: a NaN/Inf output; NaN: a case without output (reports::case_ratio), ranked above it.
  h.add(0), h.add(0), h.add(kInf), h.add(std::nan("")), h.add(1.0);
  EXPECT_EQ(h.zeros, 2);
  EXPECT_EQ(h.nonfinite, 1);
  EXPECT_EQ(h.no_output, 1);
  EXPECT_EQ(h.count(), 5);
  EXPECT_EQ(h.quantile(0.4), 0.0);
  EXPECT_EQ(h.quantile(0.8), kInf);
  EXPECT_TRUE(std::isnan(h.quantile(1.0)));
}

TEST(DriftStats, MergeInIndexOrderEqualsAddingEveryCaseAndSurvivesJson) {
  DriftStats all, first, second;
  for (std::uint64_t k = 0; k < 40; ++k) {
    const double ratio = k == 31 ? kInf : 0.01 * static_cast<double>(k % 17);
    const std::string verdict = k % 13 == 5 ? "beyond_tolerance" : "";
    all.add(k, verdict, ratio, 0.25 * static_cast<double>(k % 3) - 0.25, k % 13 == 5 ? 0.1 : 0.0);
    (k < 20 ? first : second)
        .add(k, verdict, ratio, 0.25 * static_cast<double>(k % 3) - 0.25, k % 13 == 5 ? 0.1 : 0.0);
  }
  first.merge(second);
  const auto a = reports::to_json(all), b = reports::to_json(first);
  EXPECT_EQ(a, b);
  EXPECT_EQ(all.cases, 40);
  EXPECT_EQ(all.failed(), 3);
  EXPECT_EQ(all.failures.at("beyond_tolerance").first_case, 5u);
  EXPECT_EQ(all.worst_case, 31u);
  EXPECT_EQ(reports::to_json(reports::drift_stats_from_json(a)), a);
  EXPECT_LE(all.p99_ratio(), all.worst_ratio);
}

// The drift statistics of a journal's checkpoint, a gate run or a report: a count that is a float beyond
// int64 was undefined behaviour (a float converted to an integer type out of range), 2.5 was read as 2.
TEST(DriftStats, CountsOfTheWrongKindAreFieldErrors) {
  DriftStats s;
  s.add(0, "beyond_tolerance", 2.0, 0.5, 0.25);
  const nlohmann::json good = reports::to_json(s);
  const auto expect_error = [&](const std::function<void(nlohmann::json&)>& edit,
                                const std::string& message) {
    nlohmann::json j = good;
    edit(j);
    testing::expect_error_message<files::FieldError>([&] { reports::drift_stats_from_json(j); }, message);
  };
  using J = nlohmann::json;
  expect_error([](J& j) { j["cases"] = 4.44e68; }, "field 'cases': expected an integer, got number");
  expect_error([](J& j) { j["passed"] = 2.5; }, "field 'passed': expected an integer, got number");
  expect_error([](J& j) { j["worst_case"] = -1; },
               "field 'worst_case': expected a non-negative integer, got number");
  expect_error([](J& j) { j["failures"]["beyond_tolerance"]["cases"] = "1"; },
               "field 'failures.beyond_tolerance.cases': expected an integer, got string");
  expect_error(
      [](J& j) {
        j["ratio_histogram"]["bins"] = {{1e30, 1}};
      },
      "field 'ratio_histogram.bins': expected an integer, got number");
  expect_error(
      [](J& j) {
        j["ratio_histogram"]["bins"] = {{4294967296, 1}};
      },
      "field 'ratio_histogram.bins': bin 4294967296 is too large");
  expect_error([](J& j) { j["ratio_histogram"]["bins"] = {7}; },
               "field 'ratio_histogram.bins': expected [bin, count] pairs");
  expect_error([](J& j) { j.erase("max_share_beyond"); }, "field 'max_share_beyond': missing");
}

// --- config
// ---------------------------------------------------------------------------------------------------

constexpr const char* kGoodConfig = R"(format_version = 1
[gate]
ops = ["rmsnorm", "attention"]
backends = ["cpu.rmsnorm.*", "cpu.attn.*"]
formats = ["bf16", "fp8_e4m3fn"]
seed = 3
cases = 500
baseline = "base/baseline.json"
corpus = "corpus"

[margin]
ratio = 0.1
mean_signed_ulps = 0.2

[budgets.default]
max_ratio = 0.9

[budgets."cpu.attn.*"]
allowed_verdicts = ["pass", "beyond_tolerance"]
max_ratio = 2

[budgets."cpu.attn.rocm_custom"]
allowed_verdicts = ["pass", "beyond_tolerance"]
max_ratio = 1.5
)";

TEST(GateConfig, ReadsEveryKeyAndResolvesPathsAgainstTheFile) {
  const GateConfig c = parse_gate_config(kGoodConfig, "/repo/ci/gate.toml");
  ASSERT_EQ(c.ops.size(), 2u);
  EXPECT_EQ(c.backends.size(), 2u);
  EXPECT_EQ(c.formats, (std::vector<DType>{DType::kBF16, DType::kF8E4M3FN}));
  EXPECT_EQ(c.seed, 3u);
  EXPECT_EQ(c.cases, 500u);
  EXPECT_EQ(c.baseline, "/repo/ci/base/baseline.json");
  EXPECT_EQ(*c.corpus, "/repo/ci/corpus");
  EXPECT_FALSE(c.golden);
  EXPECT_DOUBLE_EQ(c.margin.ratio, 0.1);
  EXPECT_EQ(c.sha256.size(), 64u);
  // The most specific budget wins; a glob budget inherits what it does not set from the default.
  EXPECT_DOUBLE_EQ(c.budget_for("cpu.rmsnorm.cuda").max_ratio, 0.9);
  EXPECT_DOUBLE_EQ(c.budget_for("cpu.attn.triton_unified").max_ratio, 2.0);
  EXPECT_DOUBLE_EQ(c.budget_for("cpu.attn.rocm_custom").max_ratio, 1.5);
  EXPECT_EQ(c.stream(), "seed 3, 500 cases, ops rmsnorm,attention, formats bf16,fp8_e4m3fn");
}

void expect_bad(const std::string& text, const std::string& mentions) {
  try {
    parse_gate_config(text, "dir/gate.toml");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), "config");
    EXPECT_TRUE(what.starts_with("dir/gate.toml:")) << what;
    EXPECT_NE(what.find(mentions), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

std::string with(const std::string& gate_extra, const std::string& rest = "") {
  return "format_version = 1\n[gate]\nbackends = [\"cpu.*\"]\ncases = 10\nbaseline = \"b.json\"\n" +
         gate_extra + "\n" + rest;
}

TEST(GateConfig, BadInputIsOneLineNamingFileLineAndProblem) {
  parse_gate_config(with(""), "dir/gate.toml");  // the minimal config is good
  expect_bad("format_version = 1\n[gate\n", "dir/gate.toml:2:");
  // toml++ quotes the bytes it stopped at, line break included (found by fuzz_gate_config): escaped.
  expect_bad(with("large_shapes = f\n"), "saw 'f\\n'");
  expect_bad("[gate]\ncases = 1\n", "format_version is required");
  expect_bad(with("", "").replace(0, 18, "format_version = 2"), "format_version 2 (this driftcheck reads 1)");
  expect_bad(with("sed = 4"), "unknown key 'gate.sed'");
  expect_bad(with("", "[margins]\nratio = 1"), "unknown key 'margins'");
  expect_bad(with("ops = [\"layernorm\"]"), "unknown op 'layernorm'");
  expect_bad(with("formats = [\"fp4\"]"), "unknown format 'fp4'");
  expect_bad(with("formats = \"bf16\""), "gate.formats must be an array of strings");
  expect_bad(with("seed = -1"), "gate.seed must be >= 0");
  expect_bad(with("seed = 1.5"), "gate.seed must be an integer");
  expect_bad("format_version = 1\n[gate]\nbackends = [\"cpu.*\"]\ncases = 0\nbaseline = \"b\"\n",
             "gate.cases must be > 0");
  expect_bad("format_version = 1\n[gate]\nbackends = [\"cpu.*\"]\nbaseline = \"b\"\n",
             "gate.cases is required");
  expect_bad("format_version = 1\n[gate]\nbackends = [\"cpu.*\"]\ncases = 3\n", "gate.baseline is required");
  expect_bad("format_version = 1\n[gate]\ncases = 3\nbaseline = \"b\"\n", "gate.backends is required");
  expect_bad(with("cases2 = 3"), "unknown key 'gate.cases2'");
  expect_bad(with("", "[margin]\nratio = -0.1"), "margin values must be finite and >= 0");
  expect_bad(with("", "[budgets.default]\nallowed_verdicts = [\"pass\", \"wrong\"]"),
             "unknown verdict 'wrong'");
  expect_bad(with("", "[budgets.default]\nallowed_verdicts = [\"beyond_tolerance\"]"), "must include 'pass'");
  expect_bad(with("", "[budgets.default]\nallowed_verdicts = [\"pass\", \"unsupported\"]"),
             "'unsupported' is not");
  expect_bad(with("", "[budgets.default]\nmax_ratio = 0"), "max_ratio must be > 0");
  expect_bad(with("", "[budgets.default]\nmax_ratio = nan"), "max_ratio must be > 0");
  expect_bad(with("", "[budgets.\"cpu.x\"]\nmax_share_beyond = 1.5"), "max_share_beyond must be in [0, 1]");
  expect_bad(with("", "[budgets.default]\nmax_ratio = 3"), "must include 'beyond_tolerance'");
  expect_bad(with("", "[budgets.default]\nmax_rato = 3"), "unknown key 'budgets.default.max_rato'");
  expect_bad(with("", "[budgets]\nmax_ratio = 3"), "budgets.max_ratio must be a table");
}

TEST(GateConfig, TwoGlobsTyingForABackendAreAnError) {
  const GateConfig c =
      parse_gate_config(with("", "[budgets.\"cpu.*.a\"]\n[budgets.\"cpu.x.*\"]\n"), "g.toml");
  EXPECT_THROW(c.budget_for("cpu.x.a"), InputError);
  EXPECT_EQ(c.budget_for("cpu.y.a").pattern, "cpu.*.a");
  EXPECT_EQ(c.budget_for("gpu.z").pattern, "default");
}

// --- baseline
// -------------------------------------------------------------------------------------------------

BaselineEntry entry(std::string backend, std::string format, std::int64_t cases, double worst, double p99,
                    double mean, std::map<std::string, std::int64_t> failures = {}) {
  BaselineEntry e;
  e.backend = std::move(backend), e.op = "rmsnorm", e.format = std::move(format);
  e.cases = cases, e.failures = std::move(failures);
  e.worst_ratio = worst, e.p99_ratio = p99, e.mean_signed_ulps = mean;
  return e;
}

Baseline sample_baseline() {
  Baseline b;
  b.stream = "seed 1, 10 cases, ops all, formats all";
  b.entries = {entry("cpu.a", "bf16", 100, 0.8, 0.5, 0.1), entry("cpu.a", "fp16", 50, 0.6, 0.4, -0.2),
               entry("cpu.b", "bf16", 80, kInf, 0.7, 0.0, {{"nan_mismatch", 2}})};
  b.history = {{"2026-01-01T00:00:00Z", "create", "", {"3 entries"}}};
  return b;
}

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
}

TEST(Baseline, RoundTripsThroughItsFile) {
  const auto path = temp_file("baseline.json");
  write_baseline(path, sample_baseline());
  const Baseline b = read_baseline(path);
  std::filesystem::remove(path);
  ASSERT_EQ(b.entries.size(), 3u);
  EXPECT_EQ(b.entries[2].worst_ratio, kInf);
  EXPECT_EQ(b.entries[2].failures.at("nan_mismatch"), 2);
  EXPECT_EQ(b.history.front().action, "create");
  EXPECT_EQ(b.stream, sample_baseline().stream);
}

// parse_baseline of `text` as b.json is one InputError naming that file and mentioning `mentions`.
void expect_bad_baseline(const std::string& text, const std::string& mentions) {
  try {
    parse_baseline(text, "b.json");
    ADD_FAILURE() << text;
  } catch (const InputError& e) {
    EXPECT_EQ(e.kind(), "baseline");
    EXPECT_TRUE(std::string(e.what()).starts_with("b.json: ")) << e.what();
    EXPECT_NE(std::string(e.what()).find(mentions), std::string::npos) << e.what();
  }
}

TEST(Baseline, BadFilesAreOneLineErrorsNamingTheFile) {
  expect_bad_baseline("{", "not a JSON object");
  expect_bad_baseline("[]", "not a JSON object");
  expect_bad_baseline(R"({"format": "driftcheck.report", "format_version": 1})",
                      "format is not driftcheck.baseline");
  expect_bad_baseline(R"({"format": "driftcheck.baseline", "format_version": 2})",
                      "format version 2 (this driftcheck reads 1)");
  expect_bad_baseline(R"({"format": "driftcheck.baseline", "format_version": 1})", "stream");
  const std::string head =
      R"({"format": "driftcheck.baseline", "format_version": 1, "stream": "s", "history": [], )";
  const std::string e = R"({"backend": "a", "op": "rmsnorm", "format": "bf16", "cases": 1, "failures": {}, )";
  expect_bad_baseline(
      head + R"("entries": [)" + e +
          R"("worst_ratio": -1, "p99_ratio": 0, "mean_signed_ulps": 0, "max_share_beyond": 0}]})",
      "field 'entries[0].worst_ratio': -1 is not >= 0");
  expect_bad_baseline(
      head + R"("entries": [)" + e +
          R"("worst_ratio": "many", "p99_ratio": 0, "mean_signed_ulps": 0, "max_share_beyond": 0}]})",
      "field 'entries[0].worst_ratio': expected a number");
  expect_bad_baseline(
      head + R"("entries": [)" + e +
          R"("worst_ratio": 0, "p99_ratio": 0, "mean_signed_ulps": 0, "max_share_beyond": 2}]})",
      "field 'entries[0].max_share_beyond': 2 is not in [0, 1]");
  const std::string ok =
      e + R"("worst_ratio": 0, "p99_ratio": 0, "mean_signed_ulps": 0, "max_share_beyond": 0})";
  expect_bad_baseline(head + R"("entries": [)" + ok + "," + ok + "]}", "two entries for a rmsnorm bf16");
}

// A count that is a float (libFuzzer run 2: "cases": 4.44e68, beyond int64, parsed as a double) was converted
// to an integer without a range check: undefined behaviour (UBSan), and 2.5 was read as 2. Every field is
// read with its type and range checked, the error naming it.
TEST(Baseline, ValuesOfTheWrongKindAreRejectedNamingTheField) {
  const std::string head =
      R"({"format": "driftcheck.baseline", "format_version": 1, "stream": "s", "history": [], "entries": [{)"
      R"("backend": "a", "op": "rmsnorm", "format": "bf16", "worst_ratio": 0, "p99_ratio": 0, )"
      R"("mean_signed_ulps": 0, "max_share_beyond": 0, )";
  expect_bad_baseline(
      head +
          R"("failures": {}, "cases": 444444444444444444444444444444444444444444444444444444444444444444444}]})",
      "field 'entries[0].cases': expected an integer, got number");
  expect_bad_baseline(head + R"("failures": {}, "cases": 2.5}]})",
                      "field 'entries[0].cases': expected an integer, got number");
  expect_bad_baseline(head + R"("failures": {}, "cases": -1}]})",
                      "field 'entries[0].cases': -1 is below the minimum 0");
  expect_bad_baseline(head + R"("failures": {"nan_output": 1e30}, "cases": 1}]})",
                      "field 'entries[0].failures.nan_output': expected an integer, got number");
  expect_bad_baseline(head + R"("failures": [], "cases": 1}]})",
                      "field 'entries[0].failures': expected an object, got array");
  expect_bad_baseline(head + R"("failures": {}, "cases": 1, "backend": 7}]})",
                      "field 'entries[0].backend': expected a string, got number");
  const std::string ok =
      R"({"format": "driftcheck.baseline", "format_version": 1, "stream": "s", "entries": [], )";
  expect_bad_baseline(ok + R"("history": [{"date": "d", "action": "create", "reason": "", "changes": [1]}]})",
                      "field 'history[0].changes': expected a string, got number");
  expect_bad_baseline(ok + R"("history": [{"date": "d", "action": 2, "reason": "", "changes": []}]})",
                      "field 'history[0].action': expected a string, got number");
  // A duplicate key keeps its last value, which is checked like any other.
  expect_bad_baseline(ok + R"("history": [], "format": 2})", "format is not driftcheck.baseline");
  expect_bad_baseline(R"({"format": "driftcheck.baseline", "format_version": "1"})", "format version \"1\"");
}

double severity_of(const std::vector<reports::BaselineChange>& v, const std::string& backend,
                   const std::string& format, const std::string& metric) {
  for (const auto& c : v)
    if (c.backend == backend && c.format == format && c.metric == metric) return c.severity;
  return 0;
}

TEST(Baseline, ComparisonMeasuresEachStatisticInMargins) {
  const Baseline base = sample_baseline();
  const Margin m{0.05, 0.1};
  auto now = base.entries;
  EXPECT_TRUE(compare_with_baseline(base, now, m).empty());
  now[0].worst_ratio = 0.8 * 1.04;  // within 5%
  now[0].p99_ratio = 0.5 * 1.2;     // 4 margins worse
  now[0].mean_signed_ulps = -0.25;  // |bias| up by 0.15: 1.5 margins
  now[1].worst_ratio = 0.3;         // better
  now[2].failures["nan_mismatch"] = 3;
  now[2].failures["guard_violation"] = 1;
  const auto changes = compare_with_baseline(base, now, m);
  EXPECT_NEAR(severity_of(changes, "cpu.a", "bf16", "worst_ratio"), 0.8, 1e-9);
  EXPECT_NEAR(severity_of(changes, "cpu.a", "bf16", "p99_ratio"), 4.0, 1e-9);
  EXPECT_NEAR(severity_of(changes, "cpu.a", "bf16", "mean_signed_ulps"), 1.5, 1e-9);
  EXPECT_LT(severity_of(changes, "cpu.a", "fp16", "worst_ratio"), 0);
  EXPECT_EQ(severity_of(changes, "cpu.b", "bf16", "verdict:nan_mismatch"), 2);  // one more: past the line
  EXPECT_EQ(severity_of(changes, "cpu.b", "bf16", "verdict:guard_violation"), 2);
  EXPECT_TRUE(std::is_sorted(changes.begin(), changes.end(),
                             [](const auto& a, const auto& b) { return a.severity > b.severity; }));
  // A format that ran no case any more lost coverage; a tiny ratio moving within the floor is no drift.
  now = base.entries;
  now.erase(now.begin() + 1);
  now[0].worst_ratio = 0.8 + 0.5 * 0.05 * kRatioFloor;
  const auto lost = compare_with_baseline(base, now, m);
  EXPECT_EQ(severity_of(lost, "cpu.a", "fp16", "cases"), 51);
  EXPECT_GT(severity_of(lost, "cpu.a", "bf16", "worst_ratio"), 0);
  EXPECT_LE(severity_of(lost, "cpu.a", "bf16", "worst_ratio"), 1);
}

TEST(Ratchet, TightensOnItsOwnAndLoosensOnlyWithAReasonKeptWithTheDate) {
  ::setenv("SOURCE_DATE_EPOCH", "1767225600", 1);  // 2026-01-01
  const Baseline base = sample_baseline();
  const Margin m{0.05, 0.1};
  auto now = base.entries;
  now[0].worst_ratio = 0.5;  // better
  now[1].p99_ratio = 0.6;    // 10 margins worse
  now[2].p99_ratio = 0.71;   // worse within the margin
  RatchetResult r = ratchet(&base, base.stream, now, m, false, "");
  EXPECT_EQ(r.baseline.entries[0].worst_ratio, 0.5);
  EXPECT_EQ(r.baseline.entries[1].p99_ratio, 0.4);  // kept
  EXPECT_EQ(r.baseline.entries[2].p99_ratio, 0.7);  // kept, not refused
  ASSERT_EQ(r.refused.size(), 1u);
  EXPECT_NE(r.refused[0].find("cpu.a rmsnorm fp16 p99_ratio 0.4 -> 0.6"), std::string::npos);
  EXPECT_TRUE(r.loosened.empty());
  EXPECT_EQ(r.baseline.history.back().action, "tighten");

  r = ratchet(&base, base.stream, now, m, true, "new rounding mode, see PR 123");
  EXPECT_EQ(r.baseline.entries[1].p99_ratio, 0.6);
  EXPECT_EQ(r.baseline.entries[2].p99_ratio, 0.71);
  EXPECT_TRUE(r.refused.empty());
  const auto loosen = std::find_if(r.baseline.history.begin(), r.baseline.history.end(),
                                   [](const auto& h) { return h.action == "loosen"; });
  ASSERT_NE(loosen, r.baseline.history.end());
  EXPECT_EQ(loosen->reason, "new rounding mode, see PR 123");
  EXPECT_EQ(loosen->date, "2026-01-01T00:00:00Z");
  EXPECT_EQ(loosen->changes.size(), 2u);
  EXPECT_EQ(r.baseline.history.front().action, "create");  // the old history stays

  // Dropping an entry and changing the stream are loosenings too.
  now = base.entries;
  now.pop_back();
  r = ratchet(&base, base.stream, now, m, false, "");
  EXPECT_EQ(r.baseline.entries.size(), 3u);
  EXPECT_FALSE(r.refused.empty());
  r = ratchet(&base, "seed 2, 10 cases, ops all, formats all", base.entries, m, false, "");
  EXPECT_EQ(r.baseline.entries[0].worst_ratio, base.entries[0].worst_ratio);
  EXPECT_EQ(r.refused.size(), 1u);
  r = ratchet(&base, "seed 2, 10 cases, ops all, formats all", now, m, true, "reseeded");
  EXPECT_EQ(r.baseline.entries.size(), 2u);
  EXPECT_EQ(r.baseline.history.back().action, "restream");
  EXPECT_EQ(r.baseline.history.back().reason, "reseeded");
  // No baseline yet: the run becomes one.
  r = ratchet(nullptr, base.stream, now, m, false, "");
  EXPECT_EQ(r.baseline.entries.size(), 2u);
  EXPECT_EQ(r.baseline.history.back().action, "create");
  ::unsetenv("SOURCE_DATE_EPOCH");
}

// --- report writers
// ---------------------------------------------------------------------------------------------

reports::GateReport sample_report() {
  reports::GateReport r;
  r.command = "driftcheck gate --config g.toml", r.config_path = "g.toml", r.stream = "seed 1, 10 cases";
  r.exit_code = 1;
  reports::GateCheck ok, bad;
  ok.backend = bad.backend = "cpu.a", ok.op = bad.op = "rmsnorm";
  ok.check = "budget", ok.properties = {{"cases", "10"}};
  bad.check = "baseline", bad.status = reports::CheckStatus::kFailed;
  bad.message = "1 statistic <worse> & \"odd\"",
  bad.details = "bf16 p99_ratio: 0.5 -> 0.6\n    driftcheck replay x";
  r.checks = {ok, bad};
  reports::GateRow row{"cpu.a", "rmsnorm", "cpu", {}, true};
  row.total.add(0, "", 0.5, 0.1, 0);
  r.rows = {row};
  r.changes = {{"cpu.a", "rmsnorm", "bf16", "p99_ratio", 0.5, 0.6, 4.0}};
  r.stats = {{"cpu.a", "rmsnorm", "bf16", row.total}};
  r.known = {{"softcap-nan",
              "softcap of an infinite score is NaN",
              "driftcheck replay --seed 3 --case 9",
              {"cpu.a", "cpu.b"},
              2,
              1,
              0}};
  return r;
}

// gate.json as `baseline update` and `report` read it: a float where an integer goes was converted without a
// range check (undefined behaviour), a "format" of the wrong type let nlohmann's type_error out (exit 3).
TEST(GateReport, FieldsOfTheWrongKindAreOneErrorNamingTheField) {
  const nlohmann::json good = reports::to_json(sample_report());
  const auto expect_error = [&](const std::function<void(nlohmann::json&)>& edit,
                                const std::string& message) {
    nlohmann::json j = good;
    edit(j);
    testing::expect_error_message<std::runtime_error>([&] { reports::gate_report_from_json(j); }, message);
  };
  using J = nlohmann::json;
  expect_error([](J& j) { j["format"] = 3; }, "not a driftcheck.gate file");
  expect_error([](J& j) { j["cases"] = 4.44e68; }, "field 'cases': expected an integer, got number");
  expect_error([](J& j) { j["rows"][0]["cases"] = 2.5; },
               "field 'rows[0].cases': expected an integer, got number");
  expect_error([](J& j) { j["known_findings"][0]["cases"]["golden"] = 1e300; },
               "field 'known_findings[0].cases.golden': expected an integer, got number");
  expect_error(
      [](J& j) {
        j["checks"][0]["properties"] = {{1, 2}};
      },
      "field 'checks[0].properties': expected a string, got number");
  expect_error([](J& j) { j["exit_code"] = 7; }, "field 'exit_code': 7 is not an exit code (0-3)");
}

TEST(GateReport, JsonRoundTripsAndMarkdownShowsTableFailuresAndChanges) {
  const reports::GateReport r = sample_report();
  const auto j = reports::to_json(r);
  EXPECT_EQ(j["format"], "driftcheck.gate");
  EXPECT_EQ(reports::to_json(reports::gate_report_from_json(j)), j);
  const std::string md = reports::to_markdown(r);
  EXPECT_NE(md.find("FAILED (1 of 2 checks)"), std::string::npos) << md;
  EXPECT_NE(md.find("| cpu.a | rmsnorm | 1 | 100.0% | 0.5 |"), std::string::npos) << md;
  EXPECT_NE(md.find("driftcheck replay x"), std::string::npos) << md;
  EXPECT_NE(md.find("| cpu.a | rmsnorm | bf16 | p99_ratio | 0.5 | 0.6 | 4 **worse** |"), std::string::npos)
      << md;
  // A known finding is listed apart, and is not one of the failed checks.
  EXPECT_NE(md.find("| softcap-nan | cpu.a, cpu.b | 2 / 1 / 0 | softcap of an infinite score is NaN |"),
            std::string::npos)
      << md;
  // A garbage kernel's mean signed ulps is astronomical: the summary says so instead of printing the number.
  reports::GateReport garbage = r;
  garbage.rows.front().total = {};
  garbage.rows.front().total.add(0, "beyond_tolerance", 1e30, 8.6e37, 1);
  const std::string gmd = reports::to_markdown(garbage);
  EXPECT_NE(gmd.find("| > 10^4 (structural) |"), std::string::npos) << gmd;
  EXPECT_EQ(gmd.find("e+37"), std::string::npos) << gmd;
  EXPECT_THROW(
      reports::gate_report_from_json(nlohmann::json{{"format", "driftcheck.gate"}, {"format_version", 9}}),
      std::runtime_error);
}

TEST(GateReport, JUnitEscapesEverythingItQuotes) {
  const std::string xml = reports::to_junit(sample_report());
  EXPECT_NE(xml.find("tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<testcase classname=\"known finding\" name=\"softcap-nan\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("message=\"1 statistic &lt;worse&gt; &amp; &quot;odd&quot;\""), std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<property name=\"cases\" value=\"10\"/>"), std::string::npos) << xml;
  EXPECT_EQ(xml.find("<worse>"), std::string::npos);
}

}  // namespace
}  // namespace driftcheck::fuzz
