// The report writers: versioned JSON with every field the campaign fills, Markdown that shows the same
// numbers (tables intact even when details contain '|'), and atomic file replacement.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "driftcheck/reports/json_text.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::reports {
namespace {

Report sample() {
  Report r;
  r.tool_version = "0.1.0";
  r.command = "driftcheck fuzz --mutants";
  r.seed = 7, r.cases = 120, r.checks = 480, r.seconds = 2.0;
  r.ops = {{"rmsnorm", 120, 0.5}};
  BackendReport good{
      "cpu.rmsnorm.a", "rmsnorm", "cpu", 100, 20, {{"H % 8 != 0", 20}}, 100, {}, 0, 0.4, 3, 0.2,
      std::nullopt,    "",        {}};
  BackendReport bad{"mutant.rmsnorm.b",
                    "rmsnorm",
                    "mutant",
                    120,
                    0,
                    {},
                    10,
                    {{"beyond_tolerance", 110}},
                    1,
                    37.5,
                    9,
                    0.3,
                    0.25,
                    "",
                    {}};
  BackendReport idle{"cpu.rmsnorm.c",
                     "rmsnorm",
                     "cpu",
                     0,
                     120,
                     {{"never", 120}},
                     0,
                     {},
                     0,
                     0,
                     0,
                     0,
                     std::nullopt,
                     "backend cpu.rmsnorm.c ran zero cases: all 120 of its cases unsupported, mostly: never",
                     {}};
  good.drift["bf16"].add(3, "", 0.4, -0.01, 0.0);
  r.backends = {good, bad, idle};
  r.findings = {{"mutant.rmsnorm.b-beyond_tolerance-0badf00d", "rmsnorm", "mutant.rmsnorm.b",
                 "beyond_tolerance", "rms/h96/bf16", "y[0, 3]: 1 | 2", 37.5, 7, 9, 0.25, 12, "findings/x",
                 "driftcheck replay out/findings/x", true}};
  r.divergence = {{"rmsnorm", "cpu.rmsnorm.a", "mutant.rmsnorm.b", 812.0, 100}};
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
  EXPECT_EQ(j.at("errors").size(), 1u);
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

TEST(ReportMarkdown, ShowsErrorsFindingsAndTheDivergenceMatrix) {
  const std::string md = to_markdown(sample());
  EXPECT_NE(md.find("ran zero cases"), std::string::npos);
  EXPECT_NE(md.find("| mutant.rmsnorm.b | mutant | rmsnorm | 120 | 10 | 0 | beyond_tolerance 110 |"),
            std::string::npos);
  EXPECT_NE(md.find("y[0, 3]: 1 \\| 2"), std::string::npos) << "a '|' in a detail must not split the table";
  EXPECT_NE(md.find("| cpu.rmsnorm.a | - | 812 (100) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| mutant.rmsnorm.b | 812 (100) | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("gpu.rmsnorm: no GPU"), std::string::npos);
}

TEST(ReportMarkdown, SaysSoWhenNothingWasFound) {
  Report r;
  const std::string md = to_markdown(r);
  EXPECT_NE(md.find("## Findings (0)\n\nNone."), std::string::npos);
  EXPECT_NE(md.find("No pair of backends ran a common case."), std::string::npos);
}

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(WriteFileAtomic, ReplacesWholeFilesAndLeavesNoTemp) {
  const auto dir = std::filesystem::temp_directory_path() / "driftcheck_reports_test";
  std::filesystem::remove_all(dir);
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

}  // namespace
}  // namespace driftcheck::reports
