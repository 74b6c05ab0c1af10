// The report writers: versioned JSON with every field the campaign fills, Markdown that shows the same
// numbers (tables intact even when details contain '|'), and atomic file replacement.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "driftcheck/files/json_text.hpp"
#include "driftcheck/reports/gate_report.hpp"
#include "driftcheck/reports/html.hpp"
#include "driftcheck/reports/numbers.hpp"
#include "driftcheck/reports/report.hpp"
#include "driftcheck/reports/report_set.hpp"
#include "expect_error.hpp"
#include "scratch_dir.hpp"

namespace driftcheck::reports {
namespace {

using files::json_text;
using files::number_from_json;
using files::number_json;
using files::read_number_json;
using files::write_file_atomic;

BackendReport backend(const std::string& name, const std::string& kind, std::int64_t run,
                      std::int64_t unsupported, std::int64_t passed, double worst) {
  BackendReport b;
  b.name = name, b.op = "rmsnorm", b.kind = kind;
  b.cases_run = run, b.unsupported = unsupported, b.passed = passed, b.worst_ratio = worst;
  return b;
}

Report sample() {
  Report r;
  r.tool_version = "0.1.0";
  r.command = "driftcheck fuzz --mutants";
  r.seed = 7, r.cases = 120, r.checks = 480, r.seconds = 2.0;
  r.ops = {{"rmsnorm", 120, 0.5}};
  BackendReport good = backend("cpu.rmsnorm.a", "cpu", 100, 20, 100, 0.4);
  good.upstream = "vllm-project/vllm@0013943 csrc/layernorm_kernels.cu";
  good.top_unsupported = {{"H % 8 != 0", 20}};
  good.worst_case = 3, good.check_seconds = 0.2;
  good.by_shape = {{"hidden", "257-512", 9, 40, 0, 0.4, -3.5}};
  BackendReport bad = backend("mutant.rmsnorm.b", "mutant", 120, 0, 10, 37.5);
  bad.failures_by_verdict = {{"beyond_tolerance", 110}};
  bad.distinct_findings = 1, bad.worst_case = 9, bad.check_seconds = 0.3, bad.first_finding_s = 0.25;
  BackendReport idle = backend("cpu.rmsnorm.c", "cpu", 0, 120, 0, 0);
  idle.top_unsupported = {{"never", 120}};
  idle.error = "backend cpu.rmsnorm.c ran zero cases: all 120 of its cases unsupported, mostly: never";
  good.drift["bf16"].add(3, "", 0.4, -0.01, 0.0);
  r.backends = {good, bad, idle};
  FindingReport f;
  f.id = "mutant.rmsnorm.b-beyond_tolerance-0badf00d", f.op = "rmsnorm", f.backend = "mutant.rmsnorm.b";
  f.verdict = "beyond_tolerance", f.shape_class = "rms/h96/bf16", f.detail = "y[0, 3]: 1 | 2",
  f.worst_ratio = 37.5;
  f.seed = 7, f.case_index = 9, f.found_after_s = 0.25, f.shrink_steps = 12, f.bundle = "findings/x";
  f.replay = "driftcheck replay out/findings/x", f.features = {"row stride != width"}, f.cases = 110;
  r.findings = {f};
  FindingGroup g;
  g.id = "mutant.rmsnorm.b-beyond_tolerance-g1", g.op = "rmsnorm", g.backend = "mutant.rmsnorm.b";
  g.verdict = "beyond_tolerance", g.features = {"row stride != width"}, g.shrunk = g.confirmed = true;
  g.cases = 110, g.shape_classes = {"rms/h96/bf16"}, g.worst_ratio = 37.5, g.representative_ratio = 37.5;
  g.worst_value = 0.5, g.worst_reference = 0.4, g.worst_tolerance = 0.00267;
  g.representative = "findings/x", g.replay = "driftcheck replay out/findings/x";
  g.members = {{"mutant.rmsnorm.b-beyond_tolerance-0badf00d", "rms/h96/bf16", 7, 9, 110, "findings/x",
                "driftcheck replay out/findings/x"}};
  r.groups = {g};
  DivergenceCell d{"rmsnorm", "cpu.rmsnorm.a", "mutant.rmsnorm.b", 812.0, 100};
  d.max_ratio = 18.5, d.beyond_cases = 90;
  r.divergence = {d};
  Heatmap h;
  h.backend = "mutant.rmsnorm.b", h.op = "rmsnorm", h.output = "y", h.row_label = "token";
  h.col_label = "channel", h.full_rows = 4, h.full_cols = 96, h.rows = 2, h.cols = 3;
  h.cells = {0.0, 0.5, 37.5, std::numeric_limits<double>::infinity(), 1.0, 0.25};
  r.heatmaps = {h};
  r.unavailable = {"gpu.rmsnorm: no GPU"};
  r.errors = {idle.error};
  r.exit_code = 1;
  return r;
}

TEST(ReportJson, CarriesFormatVersionAndEveryCount) {
  const nlohmann::json j = to_json(sample());
  EXPECT_EQ(j.at("format"), kReportFormatName);
  EXPECT_EQ(j.at("format_version"), kReportFormatVersion);
  EXPECT_EQ(j.at("cases"), 120);
  EXPECT_EQ(j.at("exit_code"), 1);
  const auto& b = j.at("backends");
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].at("unsupported"), 20);
  EXPECT_EQ(b[0].at("top_unsupported_reasons")[0].at("reason"), "H % 8 != 0");
  EXPECT_TRUE(b[0].at("first_finding_s").is_null());
  EXPECT_EQ(b[1].at("failures_by_verdict").at("beyond_tolerance"), 110);
  EXPECT_DOUBLE_EQ(b[1].at("first_finding_s").get<double>(), 0.25);
  EXPECT_EQ(j.at("findings")[0].at("case_index"), 9);
  EXPECT_DOUBLE_EQ(j.at("divergence_ulps")[0].at("max_ulps").get<double>(), 812.0);
  EXPECT_DOUBLE_EQ(j.at("divergence_ulps")[0].at("max_ratio").get<double>(), 18.5);
  EXPECT_EQ(j.at("errors").size(), 1u);
  EXPECT_EQ(j.at("groups")[0].at("features")[0], "row stride != width");
  // An infinite cell (NaN output) is a string: JSON has no infinity.
  EXPECT_EQ(j.at("heatmaps")[0].at("cells")[3], "inf");
}

TEST(ReportJson, ReadsBackWhatItWrote) {
  const Report r = sample();
  EXPECT_EQ(to_json(report_from_json(to_json(r))), to_json(r));
  EXPECT_EQ(report_from_json(to_json(r)).backends.front().upstream, r.backends.front().upstream);
  nlohmann::json older = to_json(r);  // written before backends carried their upstream code
  older["backends"][0].erase("upstream");
  EXPECT_TRUE(report_from_json(older).backends.front().upstream.empty());
  // A compile-set campaign's stream flags survive the round trip; without them the field is absent.
  Report streamed = sample();
  streamed.stream = "--compile-set 8";
  EXPECT_EQ(report_from_json(to_json(streamed)).stream, "--compile-set 8");
  EXPECT_FALSE(to_json(r).contains("stream"));
  EXPECT_NE(to_markdown(streamed).find("Seed "), std::string::npos);
  EXPECT_NE(to_markdown(streamed).find("(`--compile-set 8`)"), std::string::npos);
  nlohmann::json foreign = to_json(r);
  foreign["format"] = "something.else";
  EXPECT_THROW(report_from_json(foreign), std::runtime_error);
  nlohmann::json future = to_json(r);
  future["format_version"] = kReportFormatVersion + 1;
  EXPECT_THROW(report_from_json(future), std::runtime_error);
  nlohmann::json broken = to_json(r);
  broken["heatmaps"][0]["cells"].erase(0);
  EXPECT_THROW(report_from_json(broken), std::runtime_error);
}

// report.json as `driftcheck report` reads it: a float where an integer goes was converted without a range
// check (undefined behaviour), and a heatmap's rows x cols could overflow into matching its cells.
TEST(ReportJson, FieldsOfTheWrongKindAreOneErrorNamingTheField) {
  const nlohmann::json good = to_json(sample());
  const auto expect_error = [&](const std::function<void(nlohmann::json&)>& edit,
                                const std::string& message) {
    nlohmann::json j = good;
    edit(j);
    testing::expect_error_message<std::runtime_error>([&] { report_from_json(j); }, message);
  };
  using J = nlohmann::json;
  expect_error([](J& j) { j["cases"] = 4.44e68; },
               "malformed driftcheck.report: field 'cases': expected an integer, got number");
  expect_error([](J& j) { j["backends"][1]["cases_run"] = 2.5; },
               "malformed driftcheck.report: field 'backends[1].cases_run': expected an integer, got number");
  expect_error(
      [](J& j) { j["findings"][0]["seed"] = -1; },
      "malformed driftcheck.report: field 'findings[0].seed': expected a non-negative integer, got number");
  expect_error([](J& j) { j["groups"][0]["members"][0]["id"] = 5; },
               "malformed driftcheck.report: field 'groups[0].members[0].id': expected a string, got number");
  expect_error([](J& j) { j["exit_code"] = 1e300; },
               "malformed driftcheck.report: field 'exit_code': expected an integer, got number");
  expect_error(
      [](J& j) {
        auto& h = j["heatmaps"][0];
        h["rows"] = std::int64_t{1} << 62, h["cols"] = 4, h["cells"] = J::array();  // 2^64 wraps to 0 cells
      },
      "heatmap of mutant.rmsnorm.b has 0 cells for 4611686018427387904 x 4");
}

TEST(ReportJson, ReadsVersion1WhereNonFiniteRatiosWereNull) {
  nlohmann::json v1 = to_json(sample());
  v1["format_version"] = 1;
  v1.erase("groups"), v1.erase("heatmaps");
  v1["backends"][1]["worst_ratio"] = nullptr;
  for (auto& d : v1["divergence_ulps"])
    d.erase("max_ratio"), d.erase("beyond_cases"), d.erase("nonfinite_cases");
  const Report r = report_from_json(v1);
  EXPECT_TRUE(std::isinf(r.backends[1].worst_ratio));
  EXPECT_TRUE(std::isnan(r.divergence[0].max_ratio)) << "not measured in version 1";
  EXPECT_NE(to_markdown(r).find("812 ulps (100)"), std::string::npos);
}

// One encoding of non-finite numbers in every JSON file driftcheck writes (json_text.hpp): the strings "inf",
// "-inf" and "nan", never null (which nlohmann's dump writes for them) and never a bare token JSON lacks.
TEST(ReportJson, NonFiniteNumbersAreTheStringsEveryFileUses) {
  Report r = sample();
  r.backends[1].worst_ratio = std::numeric_limits<double>::infinity();
  r.findings[0].worst_ratio = std::numeric_limits<double>::infinity();
  r.divergence[0].max_ulps = -std::numeric_limits<double>::quiet_NaN();
  const nlohmann::json j = nlohmann::json::parse(json_text(to_json(r)));
  EXPECT_EQ(j.at("backends")[1].at("worst_ratio"), "inf");
  EXPECT_EQ(j.at("findings")[0].at("worst_ratio"), "inf");
  EXPECT_EQ(j.at("divergence_ulps")[0].at("max_ulps"), "nan");
  EXPECT_EQ(number_json(-std::numeric_limits<double>::infinity()), "-inf");
  for (const double v :
       {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(), 2.5})
    EXPECT_EQ(read_number_json(number_json(v)), v);
  EXPECT_TRUE(std::isnan(*read_number_json(number_json(std::nan("")))));
  EXPECT_FALSE(read_number_json("infinity").has_value());
  EXPECT_FALSE(read_number_json(nlohmann::json::array()).has_value());
  // Older files wrote null for a non-finite number; the gate's project corpus still holds one.
  EXPECT_TRUE(std::isnan(*read_number_json(nlohmann::json(nullptr))));
  EXPECT_THROW(number_from_json("many"), std::invalid_argument);
}

TEST(Numbers, RatiosPrintTheDigitsThatDecidePassOrFail) {
  // Three digits would print both "1": one passes, the other fails.
  EXPECT_EQ(ratio_text(0.99998), "0.99998");
  EXPECT_EQ(ratio_text(1.003), "1.003");
  EXPECT_EQ(ratio_text(1.0), "1");
  EXPECT_EQ(ratio_text(1 + 1e-12), "1.000000000001");
  EXPECT_EQ(ratio_text(0.999), "0.999");
  EXPECT_EQ(ratio_text(std::numeric_limits<double>::quiet_NaN()), "no output");
}

TEST(Numbers, EveryFailureReadsAsOneAndTheGravestIsTheWorst) {
  const double inf = std::numeric_limits<double>::infinity();
  // A NaN output's small finite-pair ratio reads as inf, a case without output as NaN.
  EXPECT_EQ(case_ratio("nan_mismatch", 0.5), inf);
  EXPECT_EQ(case_ratio("inf_mismatch", 0.5), inf);
  for (const char* v : {"error", "crash", "timeout"}) EXPECT_TRUE(std::isnan(case_ratio(v, 0))) << v;
  EXPECT_EQ(case_ratio("beyond_tolerance", 3.5), 3.5);
  EXPECT_EQ(case_ratio("", 0.25), 0.25);
  // Graver verdicts are worse whatever the ratios; within one, the larger ratio, then the lower case.
  EXPECT_TRUE(worse_case("beyond_statistical_bound", 0.9, 8, "", 0.99, 1));
  EXPECT_TRUE(worse_case("beyond_tolerance", 1.5, 8, "batch_variant", 0.3, 1));
  EXPECT_TRUE(worse_case("nan_mismatch", inf, 8, "beyond_tolerance", 1e30, 1));
  EXPECT_TRUE(worse_case("crash", std::nan(""), 8, "nan_mismatch", inf, 1));
  EXPECT_FALSE(worse_case("beyond_tolerance", 1.5, 8, "beyond_tolerance", 1.5, 1));
  EXPECT_TRUE(worse_case("beyond_tolerance", 1.5, 1, "beyond_tolerance", 1.5, 8));
  EXPECT_TRUE(worse_case("", std::nan(""), 8, "", 7.0, 1));
  // The worst cell never reads as passing for a failure.
  EXPECT_EQ(worst_cell("nan_mismatch", inf), "NaN/Inf");
  EXPECT_EQ(worst_cell("crash", std::nan("")), "no output: worker crash");
  EXPECT_EQ(worst_cell("timeout", std::nan("")), "no output: timeout");
  EXPECT_EQ(worst_cell("error", std::nan("")), "no output: backend error");
  EXPECT_EQ(worst_cell("beyond_statistical_bound", 0.93), "statistically improbable (0.93)");
  EXPECT_EQ(worst_cell("batch_variant", 0.2), "batch-dependent bits");
  EXPECT_EQ(worst_cell("", 0.2), "0.2");
  EXPECT_EQ(worst_style("", 0.2), "pass");
  EXPECT_EQ(worst_style("beyond_statistical_bound", 0.2), "fail");
  EXPECT_EQ(worst_style("nan_mismatch", inf), "nf");
  EXPECT_EQ(worst_style("error", std::nan("")), "nf");
}

TEST(Numbers, SayWhatAstronomicalRatiosAre) {
  EXPECT_EQ(ratio_text(0.42), "0.42");
  EXPECT_EQ(ratio_text(37.5), "37.5");
  EXPECT_EQ(ratio_text(std::numeric_limits<double>::infinity()), "NaN/Inf");
  EXPECT_EQ(ratio_text(2.97e37), "> 10^4 (structural)");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(worst_text(std::numeric_limits<double>::infinity(), nan, 0.213, 0.001).rfind("NaN/Inf output", 0),
            0u);
  EXPECT_EQ(worst_text(2.97e37, 3.39e38, 0.213, 0.001).rfind("garbage: 3.39e+38", 0), 0u);
  EXPECT_EQ(
      worst_text(1.88e7, 4e-6, -2.1e-9, 2.1e-13),
      "error larger than the reference: 4e-06 vs reference -2.1e-09 (|error| 4e-06, tolerance 2.1e-13)");
  // Not only near zero: the H200 campaign's softcap-dropped case, 2501 where the reference is 50.7.
  EXPECT_EQ(worst_text(3.98e4, 2501.19336, 50.6931472, 0.0615)
                .rfind("error larger than the reference: 2501.19 vs "
                       "reference 50.7",
                       0),
            0u);
  EXPECT_EQ(worst_text(2.3, 1.2421875, 1.22477427, 0.0075).rfind("2.3x tolerance", 0), 0u);
  // A NaN verdict whose metrics' worst element is finite says where the NaN is, from the oracle's detail.
  EXPECT_EQ(verdict_detail("nan_mismatch", std::numeric_limits<double>::infinity(), -0.29, -0.2967, 1e-5,
                           "y[1, 3]: nan where the reference is 0.21"),
            "NaN/Inf: y[1, 3]: nan where the reference is 0.21");
  EXPECT_EQ(verdict_detail("guard_violation", 0, 0, 0, 0, "y guard band [5] written"),
            "out-of-bounds write: y guard band [5] written");
  EXPECT_EQ(bias_text(-0.0041), "-0.004");
  EXPECT_EQ(bias_text(8.6e37), "> 10^4 (structural)") << "a garbage mean is not a bias";
  EXPECT_EQ(divergence_text(0.8, 0), "0.8");
  EXPECT_EQ(divergence_text(std::numeric_limits<double>::infinity(), 3), "NaN/Inf in 3 cases");
}

TEST(ReportMarkdown, OpensWithOneLinePerGroupThenBackendsAndTheDivergenceMatrix) {
  const std::string md = to_markdown(sample());
  const auto groups = md.find("## Findings by cause");
  ASSERT_NE(groups, std::string::npos);
  EXPECT_LT(groups, md.find("## Backends")) << "the report opens with the groups";
  EXPECT_NE(md.find("1. **mutant.rmsnorm.b** beyond_tolerance — row stride != width — 110 failing cases"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("ran zero cases"), std::string::npos);
  EXPECT_NE(md.find("| mutant.rmsnorm.b | mutant | rmsnorm | 120 | 10 | 0 | beyond_tolerance 110 | 37.5 |"),
            std::string::npos);
  EXPECT_NE(md.find("*worst error / tolerance*:"), std::string::npos) << "columns are explained";
  EXPECT_NE(md.find("| cpu.rmsnorm.a | - | 18.5 (100) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| mutant.rmsnorm.b | 18.5 (100) | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("gpu.rmsnorm: no GPU"), std::string::npos);
  EXPECT_NE(md.find("- cpu.rmsnorm.a: vllm-project/vllm@0013943 csrc/layernorm_kernels.cu\n"),
            std::string::npos)
      << "the upstream code a twin models is shown";
  EXPECT_EQ(md.find("- mutant.rmsnorm.b:"), std::string::npos) << "backends that name none are not listed";
}

TEST(ReportMarkdown, ListsSignaturesWhenNothingIsGroupedAndSaysSoWhenNothingWasFound) {
  Report r = sample();
  r.groups.clear();
  const std::string md = to_markdown(r);
  EXPECT_NE(md.find("y[0, 3]: 1 \\| 2"), std::string::npos) << "a '|' in a detail must not split the table";
  const std::string none = to_markdown(Report{});
  EXPECT_NE(none.find("0 groups from 0 failing signatures, worst first)\n\nNone."), std::string::npos)
      << none;
  EXPECT_NE(none.find("No pair of backends ran a common case."), std::string::npos);
}

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(WriteFileAtomic, ReplacesWholeFilesAndLeavesNoTemp) {
  const auto dir = testing::fresh_scratch_dir("reports_test", "atomic");
  std::filesystem::create_directories(dir);
  write_file_atomic(dir / "a.txt", "first version, longer");
  write_file_atomic(dir / "a.txt", "second");
  EXPECT_EQ(read(dir / "a.txt"), "second");
  EXPECT_FALSE(std::filesystem::exists(dir / "a.txt.tmp"));
  write_reports(sample(), dir);
  EXPECT_EQ(nlohmann::json::parse(read(dir / "report.json")).at("seed"), 7);
  EXPECT_NE(read(dir / "report.md").find("# driftcheck campaign report"), std::string::npos);
  EXPECT_THROW(write_file_atomic(dir / "missing" / "b.txt", "x"), std::system_error);
  std::filesystem::remove_all(dir);
}

// Per-case worst ratios of a backend, as the campaign folds them (drift.hpp).
DriftStats drift_of(const std::vector<double>& ratios) {
  DriftStats d;
  std::uint64_t k = 0;
  for (double r : ratios) d.add(k++, r > 1 ? "beyond_tolerance" : "", r, 0.0, 0.0);
  return d;
}

ReportSet one_run(const Report& r) {
  ReportSet s;
  s.tool_version = "0.1.0", s.command = "driftcheck report out";
  RunReport run;
  run.label = "out", run.dir = "out", run.kind = "campaign", run.campaign = r;
  s.runs = {run};
  return s;
}

// The Vega specs the page embeds (one <script type="application/json"> each), parsed back.
std::vector<nlohmann::json> embedded_specs(const std::string& html) {
  std::vector<nlohmann::json> specs;
  const std::string open = "<script type=\"application/json\" id=\"spec";
  for (auto at = html.find(open); at != std::string::npos; at = html.find(open, at)) {
    const auto begin = html.find('>', at) + 1, end = html.find("</script>", begin);
    specs.push_back(nlohmann::json::parse(html.substr(begin, end - begin)));
    at = end;
  }
  return specs;
}

const nlohmann::json& spec_titled(const std::vector<nlohmann::json>& specs, const std::string& title) {
  for (const auto& s : specs)
    if (s.at("title").at("text") == title) return s;
  throw std::runtime_error("no plot titled " + title);
}

Report sample_with_drift() {
  Report r = sample();
  r.backends[0].drift["bf16"] = drift_of({0.01, 0.3, 0.3, 0.9});
  r.backends[1].drift["bf16"] = drift_of({0.5, 40.0, 40.0, std::numeric_limits<double>::infinity(), 0.0});
  return r;
}

TEST(ReportMarkdown, AnUnshrunkGroupsWorstIsItsFirstFindingsDetail) {
  // An unshrunk group has a ratio but no worst element: the report must not print "0 vs reference 0,
  // tolerance 0" (seen on the H200 campaign of ext.vllm_upstream.prefix_prefill) but the oracle's detail.
  Report r = sample();
  FindingGroup& g = r.groups.front();
  g.shrunk = g.confirmed = false, g.representative.clear(), g.worst_ratio = 204.2;
  g.worst_value = g.worst_reference = g.worst_tolerance = 0;
  g.detail = "o[8, 3, 44]: -107 vs reference 78.3864815, tolerance 0.908, 204x tolerance";
  g.worst_case = 17;
  const std::string md = to_markdown(r);
  const std::string worst = "204 at case 17; first failing case: " + g.detail;
  EXPECT_NE(md.find("- worst: " + worst + "\n"), std::string::npos) << md;
  EXPECT_EQ(md.find("vs reference 0,"), std::string::npos) << md;
  const std::string html = to_html(one_run(r), nullptr, "no library here");
  EXPECT_NE(html.find("<li>worst: " + worst + "</li>"), std::string::npos);
  // A shrunk group keeps its representative's worst element beside its worst over every member.
  EXPECT_NE(to_markdown(sample()).find("- worst: 37.5 at case 0; representative: 37.5x tolerance (0.5 vs "
                                       "reference 0.4, tolerance 0.00267)"),
            std::string::npos)
      << to_markdown(sample());
}

TEST(ReportHtml, EmbedsEveryPlotWithTheModelsNumbers) {
  std::string why;
  const auto lib = load_plot_library(default_vega_dir(), &why);
  ASSERT_TRUE(lib.has_value()) << why << " (.ci/setup installs libjs-vega)";
  const std::string html = to_html(one_run(sample_with_drift()), &*lib);
  const auto specs = embedded_specs(html);
  // Two histograms, one error-by-shape plot, one heatmap, one divergence matrix.
  ASSERT_EQ(specs.size(), 5u) << html.substr(0, 2000);
  // The histogram holds every finite non-zero case, each bin's count from the model; 0 and NaN/Inf apart.
  const auto& hist = spec_titled(specs, "mutant.rmsnorm.b");
  std::int64_t plotted = 0, above_tolerance = 0;
  for (const auto& bin : hist.at("data")[0].at("values")) {
    plotted += bin.at("n").get<std::int64_t>();
    if (bin.at("lo").get<double>() >= 1) above_tolerance += bin.at("n").get<std::int64_t>();
    EXPECT_LT(bin.at("lo").get<double>(), bin.at("hi").get<double>());
  }
  EXPECT_EQ(plotted, 3);
  EXPECT_EQ(above_tolerance, 2) << "the two cases at 40x tolerance";
  // The exact case and the NaN/Inf one are bars of their own beside the ratio axis, not left out.
  const auto& special = hist.at("data")[1].at("values");
  ASSERT_EQ(special.size(), 2u) << special.dump();
  EXPECT_EQ(special[0].at("label"), "exact");
  EXPECT_EQ(special[0].at("n"), 1);
  EXPECT_EQ(special[1].at("label"), "NaN/Inf");
  EXPECT_EQ(special[1].at("n"), 1);
  // The heatmap: one datum per cell, the NaN/Inf cell marked as such.
  const auto& heat = spec_titled(specs, "mutant.rmsnorm.b: y");
  const auto& cells = heat.at("data")[0].at("values");
  ASSERT_EQ(cells.size(), 6u);
  EXPECT_EQ(cells[3].at("kind"), "nonfinite");
  EXPECT_EQ(cells[0].at("kind"), "exact");
  EXPECT_DOUBLE_EQ(cells[2].at("v").get<double>(), std::log10(37.5));
  // The divergence matrix relative to the pair's tolerance, both orders of the pair.
  const auto& div = spec_titled(specs, "rmsnorm");
  ASSERT_EQ(div.at("data")[0].at("values").size(), 2u);
  for (const auto& c : div.at("data")[0].at("values")) {
    EXPECT_EQ(c.at("text"), "18.5");
    EXPECT_EQ(c.at("shared"), 100);
  }
  const auto& shape = spec_titled(specs, "rmsnorm: hidden");
  EXPECT_EQ(shape.at("data")[0].at("values")[0].at("bucket"), "257-512");
  // Self-contained: nothing is fetched (no src/href to anything, no stylesheet link), the library is inlined.
  EXPECT_EQ(html.find(" src="), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("href=\"http"), std::string::npos);
  EXPECT_NE(html.find("__dcModules['vega-view']"), std::string::npos);
  EXPECT_NE(html.find("data-plots-rendered"), std::string::npos) << "the render script is present";
}

TEST(ReportHtml, OpensWithOneLinePerGroupAndExplainsItsColumns) {
  const std::string html = to_html(one_run(sample()), nullptr, "no library here");
  const auto causes = html.find("Findings by cause, worst first (1)");
  ASSERT_NE(causes, std::string::npos);
  EXPECT_LT(causes, html.find("Backends in detail"));
  EXPECT_NE(html.find("<b>row stride != width</b>"), std::string::npos);
  EXPECT_NE(html.find("driftcheck replay out/findings/x"), std::string::npos);
  EXPECT_NE(html.find("<dt>worst error / tol</dt>"), std::string::npos) << "columns are explained";
  EXPECT_NE(html.find("How to read this report"), std::string::npos);
  EXPECT_NE(html.find("<li><b>cpu.rmsnorm.a</b>: vllm-project/vllm@0013943 csrc/layernorm_kernels.cu</li>"),
            std::string::npos);
}

TEST(ReportHtml, WithoutThePlotLibraryItSaysWhyAndKeepsTheTables) {
  std::string why;
  EXPECT_FALSE(load_plot_library("/nonexistent/vega", &why).has_value());
  EXPECT_NE(why.find("libjs-vega"), std::string::npos) << why;
  const std::string html = to_html(one_run(sample_with_drift()), nullptr, why);
  const auto note = html.find("No plots: ");
  ASSERT_NE(note, std::string::npos);
  EXPECT_NE(html.find("apt-get install libjs-vega", note), std::string::npos)
      << "the note says how to get them";
  EXPECT_EQ(html.find("<script"), std::string::npos) << "no plot scripts without the library";
  EXPECT_TRUE(embedded_specs(html).empty());
  // The divergence matrix falls back to a table of the same numbers.
  EXPECT_NE(html.find("<td class=n>18.5</td>"), std::string::npos);
}

TEST(ReportHtml, EscapesWhatRunsWrote) {
  Report r = sample();
  r.command = "driftcheck fuzz --backend '<script>alert(1)</script>'";
  r.groups[0].detail = "</script><b>";
  r.backends[1].name = "mutant<x>";
  std::string why;
  const auto lib = load_plot_library(default_vega_dir(), &why);
  ASSERT_TRUE(lib.has_value()) << why;
  const std::string html = to_html(one_run(r), &*lib);
  EXPECT_EQ(html.find("<script>alert(1)"), std::string::npos);
  EXPECT_EQ(html.find("mutant<x>"), std::string::npos);
  EXPECT_NE(html.find("mutant&lt;x&gt;"), std::string::npos);
  for (const auto& spec : embedded_specs(html)) EXPECT_TRUE(spec.is_object()) << "every spec still parses";
}

std::filesystem::path fresh(const std::string& name) {
  const auto dir = testing::fresh_scratch_dir("reports_test", name);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(ReportSet, ReadsCampaignCheckAndAcceptOutputs) {
  const auto dir = fresh("runs");
  std::filesystem::create_directories(dir / "campaign");
  write_reports(sample(), dir / "campaign");
  EXPECT_TRUE(std::filesystem::exists(dir / "campaign" / "report.html")) << "every campaign ends with one";
  AcceptReport a;
  a.seed = 3, a.rows = {AcceptRow{}};
  a.rows[0].backend = "cpu.rmsnorm.a", a.rows[0].greedy_k3 = 0.97, a.rows[0].top1_agreement = 0.99;
  write_file_atomic(dir / "campaign" / "accept.json", to_json(a).dump());
  const RunReport run = read_run(dir / "campaign");
  EXPECT_EQ(run.kind, "campaign");
  ASSERT_TRUE(run.campaign && run.accept);
  EXPECT_EQ(to_json(*run.campaign), to_json(sample()));
  EXPECT_EQ(run.accept->rows[0].backend, "cpu.rmsnorm.a");
  // The acceptance proxy's table joins the glance table and gets its section.
  ReportSet s;
  s.runs = {run};
  const std::string html = to_html(s, nullptr, "none");
  EXPECT_NE(html.find("Acceptance proxy"), std::string::npos);
  EXPECT_NE(html.find("97.0%"), std::string::npos);
  EXPECT_NE(to_markdown(s).find("## driftcheck campaign report"), std::string::npos)
      << "the campaign's Markdown one heading level down";
  EXPECT_EQ(to_json(s).at("runs")[0].at("accept").at("rows")[0].at("backend"), "cpu.rmsnorm.a");
}

// A gate's output: gate.json (the gate's model) and its campaign in campaign/report.json, shown together.
TEST(ReportSet, ReadsAGateWithItsCampaign) {
  const auto dir = fresh("gate");
  GateReport g;
  g.command = "driftcheck gate --config gate.toml", g.stream = "seed 1, 120 cases", g.exit_code = 1;
  GateCheck failed;
  failed.backend = "mutant.rmsnorm.b", failed.op = "rmsnorm", failed.check = "budget";
  failed.status = CheckStatus::kFailed, failed.message = "worst ratio 37.5 above the budget 1";
  GateCheck passed = failed;
  passed.backend = "cpu.rmsnorm.a", passed.status = CheckStatus::kPassed, passed.message.clear();
  g.checks = {failed, passed};
  g.changes = {{"mutant.rmsnorm.b", "rmsnorm", "bf16", "p99_ratio", 0.5, 37.5, 12.0}};
  write_file_atomic(dir / "gate.json", to_json(g).dump());
  std::filesystem::create_directories(dir / "campaign");
  write_reports(sample(), dir / "campaign");
  const RunReport run = read_run(dir);
  EXPECT_EQ(run.kind, "gate");
  ASSERT_TRUE(run.gate && run.campaign);
  EXPECT_EQ(exit_code_of(run), 1);
  RunReport mutants_gate = run;  // --mutants: the campaign finds drift (exit 1), the gate passes
  mutants_gate.gate->exit_code = 0;
  EXPECT_EQ(exit_code_of(mutants_gate), 0);
  ReportSet s;
  s.runs = {run};
  const std::string html = to_html(s, nullptr, "none");
  EXPECT_NE(html.find("gate failed</span> 2 checks, 1 failed"), std::string::npos);
  EXPECT_NE(html.find("worst ratio 37.5 above the budget 1"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"n fail\">+12.00</td>"), std::string::npos);
  EXPECT_NE(html.find("Findings by cause, worst first (1)"), std::string::npos) << "the gate's campaign";
  EXPECT_NE(to_markdown(s).find("## driftcheck gate: FAILED"), std::string::npos);
  EXPECT_EQ(to_json(s).at("runs")[0].at("gate").at("format"), "driftcheck.gate");
  std::filesystem::remove_all(dir / "campaign");
  EXPECT_EQ(read_run(dir).notes.size(), 1u) << "a gate without its campaign report says so";
}

// A known finding is a real upstream defect a faithful twin reproduces (docs/FINDINGS.md): every view lists
// it apart, with its count or "not reproduced", and it never fails the verdict (a clean run stays clean).
Report clean_with_known_findings() {
  Report r = sample();
  r.backends = {r.backends[0]};
  r.findings.clear(), r.groups.clear(), r.divergence.clear(), r.heatmaps.clear(), r.errors.clear();
  r.exit_code = 0;
  r.known_findings = {{"vllm-rmsnorm-misaligned-vector",
                       "vectorised loads assume 16-byte rows",
                       "vllm-project/vllm@0123abc csrc/layernorm_kernels.cu",
                       "driftcheck replay known/x",
                       {"cpu.rmsnorm.a"},
                       3,
                       100},
                      {"aiter-unmasked-page-tail",
                       "the last page's tail is read unmasked",
                       "ROCm/aiter@4567def",
                       "driftcheck replay known/y",
                       {"cpu.rmsnorm.a"},
                       0,
                       100}};
  return r;
}

TEST(ReportKnownFindings, AreListedApartInEveryViewAndNeverFailTheVerdict) {
  const Report r = clean_with_known_findings();
  const nlohmann::json j = to_json(r);
  ASSERT_EQ(j.at("known_findings").size(), 2u);
  EXPECT_EQ(j.at("known_findings")[0].at("cases"), 3);
  EXPECT_TRUE(j.at("known_findings")[0].at("reproduced").get<bool>());
  EXPECT_FALSE(j.at("known_findings")[1].at("reproduced").get<bool>());
  EXPECT_EQ(to_json(report_from_json(j)), j) << "read back whole";

  const std::string md = to_markdown(r);
  const auto known = md.find("## Known findings (2)");
  ASSERT_NE(known, std::string::npos) << md;
  EXPECT_NE(md.find("never change this report's verdict", known), std::string::npos);
  EXPECT_NE(
      md.find("| vllm-rmsnorm-misaligned-vector | vectorised loads assume 16-byte rows | cpu.rmsnorm.a | 3 "
              "| 100 |",
              known),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("| aiter-unmasked-page-tail |", known), std::string::npos);
  EXPECT_NE(md.find("| not reproduced | 100 |", known), std::string::npos);
  EXPECT_NE(md.find("## Findings by cause (0 groups from 0 failing signatures"), std::string::npos);
  EXPECT_NE(md.find("Exit code 0."), std::string::npos);

  ReportSet set;
  set.runs = {campaign_run(r, "out")};
  const std::string html = to_html(set, nullptr, "none");
  EXPECT_NE(html.find("No findings in any run."), std::string::npos) << "known findings are not findings";
  EXPECT_NE(html.find("Known findings met, listed apart in their run (upstream defects, never a failure): "
                      "vllm-rmsnorm-misaligned-vector (3 cases)."),
            std::string::npos);
  const auto section = html.find("Known findings (upstream defects, not failures)</h3>");
  ASSERT_NE(section, std::string::npos);
  EXPECT_LT(html.find("Finding groups</h3>"), section);
  EXPECT_NE(html.find("<td class=n>not reproduced</td><td class=n>100</td>", section), std::string::npos);
  // The backend whose only failures are the upstream defect is within tolerance, with the finding named.
  EXPECT_NE(html.find("b-pass\">within tolerance</span>"), std::string::npos);
  EXPECT_EQ(html.find("b-fail\">drifts</span>"), std::string::npos);
  EXPECT_NE(html.find("<span class=\"badge b-known\">known</span> vllm-rmsnorm-misaligned-vector</td></tr>"),
            std::string::npos)
      << "named among the backend's causes";
  EXPECT_EQ(exit_code_of(set.runs[0]), 0);

  // A gate lists its known findings apart too, and passes.
  GateReport g;
  g.command = "driftcheck gate --config gate.toml", g.stream = "seed 1, 120 cases", g.exit_code = 0;
  g.known = {{"vllm-rmsnorm-misaligned-vector",
              "vectorised loads assume 16-byte rows",
              "driftcheck replay x",
              {"cpu.rmsnorm.a"},
              3,
              1,
              0}};
  RunReport gate_run;
  gate_run.label = "gate", gate_run.kind = "gate", gate_run.gate = g;
  ReportSet gs;
  gs.runs = {gate_run};
  const std::string gate_html = to_html(gs, nullptr, "none");
  EXPECT_NE(gate_html.find("gate passed</span>"), std::string::npos);
  const auto gate_known = gate_html.find("never a failure of the gate");
  ASSERT_NE(gate_known, std::string::npos);
  EXPECT_NE(gate_html.find("vllm-rmsnorm-misaligned-vector</td><td>vectorised loads assume 16-byte rows</td>"
                           "<td>cpu.rmsnorm.a</td><td class=n>3 / 1 / 0</td>",
                           gate_known),
            std::string::npos)
      << gate_html;
  EXPECT_EQ(exit_code_of(gate_run), 0);
}

// Two platforms' runs of the same seed side by side: each backend's worst error / tolerance per run, and the
// causes table names the run each group comes from.
TEST(ReportSet, ComparesRunsSideBySide) {
  ReportSet s = one_run(sample());
  Report amd = sample();
  amd.backends[1].worst_ratio = 0.7, amd.backends[1].failures_by_verdict.clear(), amd.groups.clear();
  RunReport second = s.runs[0];
  second.label = "amd/out", second.campaign = amd;
  s.runs[0].label = "nvidia/out";
  s.runs.push_back(second);
  const std::string html = to_html(s, nullptr, "none");
  const auto side = html.find("Runs side by side");
  ASSERT_NE(side, std::string::npos);
  const auto row = html.find("<tr><td>mutant.rmsnorm.b</td>", side);
  ASSERT_NE(row, std::string::npos);
  const std::string cells = html.substr(row, html.find("</tr>", row) - row);
  EXPECT_NE(cells.find("37.5 (110)"), std::string::npos) << cells;
  EXPECT_NE(cells.find("0.7 (0)"), std::string::npos) << cells;
  EXPECT_LT(cells.find("37.5 (110)"), cells.find("0.7 (0)")) << "runs in command-line order";
  EXPECT_NE(html.find("<th>run</th>"), std::string::npos);
  EXPECT_NE(html.find("<td>nvidia/out</td>"), std::string::npos);
}

TEST(ReportSet, BadDirectoriesAreOneLineErrorsNamingTheFile) {
  const auto dir = fresh("bad");
  const auto one_line = [](const std::filesystem::path& p, const std::string& mentions) {
    try {
      read_run(p);
      ADD_FAILURE() << p << " was accepted";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      EXPECT_NE(what.find(mentions), std::string::npos) << what;
    }
  };
  one_line(dir / "missing", "not a directory");
  std::filesystem::create_directories(dir / "empty");
  one_line(dir / "empty", "no report.json, gate.json or accept.json");
  std::filesystem::create_directories(dir / "torn");
  write_file_atomic(dir / "torn" / "report.json", "{\"format\": \"driftcheck.rep");
  one_line(dir / "torn", "report.json: not JSON");
  std::filesystem::create_directories(dir / "foreign");
  write_file_atomic(dir / "foreign" / "report.json",
                    "{\"format\": \"something.else\", \"format_version\": 1}");
  one_line(dir / "foreign", "report.json");
  std::filesystem::create_directories(dir / "gate");
  write_file_atomic(dir / "gate" / "gate.json", "{\"format\": \"other\"}");
  one_line(dir / "gate", "gate.json: not a driftcheck.gate file");
}

}  // namespace
}  // namespace driftcheck::reports
