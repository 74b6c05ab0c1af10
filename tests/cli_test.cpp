// The driftcheck binary as users run it: exit codes (0 clean, 1 drift, 2 bad usage or bad input, 3 internal)
// and one-line errors on stderr for every kind of bad input, then an end-to-end mutant campaign whose bundle
// replays.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_harness.hpp"
#include "driftcheck/device/backend.hpp"
#include "driftcheck/device/registry.hpp"

namespace {

namespace fs = std::filesystem;

using driftcheck::harness::Outcome;
using driftcheck::harness::slurp;

fs::path scratch() {
  static const driftcheck::harness::Scratch s("cli_test");
  return s.dir;
}

Outcome driftcheck(const std::string& args) {
  return driftcheck::harness::run_command(std::string(DRIFTCHECK_BIN) + " " + args, scratch());
}

void expect_usage_error(const std::string& args, const std::string& mentions) {
  const Outcome r = driftcheck(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  EXPECT_NE(r.err.find(mentions), std::string::npos) << args << ": " << r.err;
}

TEST(Cli, BadUsageIsExitTwoWithOneLine) {
  expect_usage_error("", "command is required");
  expect_usage_error("frobnicate", "frobnicate");
  expect_usage_error("fuzz --seconds -1", "--seconds");
  expect_usage_error("fuzz --seconds 1 --cases 2", "excludes");
  expect_usage_error("fuzz --jobs many", "--jobs");
  expect_usage_error("fuzz --op nosuch", "unknown op 'nosuch'");
  expect_usage_error("fuzz --backend 'nosuch.*'", "unknown backend 'nosuch.*'");
  expect_usage_error("fuzz --resume --seed 3", "excludes");
  expect_usage_error("fuzz --compile-set 65", "--compile-set");
  expect_usage_error("fuzz --compile-set -1", "--compile-set");
  expect_usage_error("fuzz --compile-set many", "--compile-set");
  expect_usage_error("fuzz --resume --compile-set 2", "excludes");
  expect_usage_error("replay --seed 1 --case 2 --op rmsnorm --backend cpu.rmsnorm.native --compile-set 65",
                     "--compile-set");
  expect_usage_error("replay", "needs a BUNDLE");
  expect_usage_error("replay --seed 1 --case 2 --op rmsnorm --backend nosuch", "unknown backend");
  expect_usage_error("replay --seed 1 --case 2 --op nosuch --backend x", "unknown op");
  expect_usage_error("export --out " + (scratch() / "export_new_kv").string() + " --new-kv decode",
                     "--new-kv: decode not in {cache,inputs,both}");
  EXPECT_FALSE(fs::exists(scratch() / "export_new_kv" / "manifest.json"));
  expect_usage_error("corpus", "corpus needs a subcommand: init, add");
  // A repeatable option takes one value per occurrence: the word after it is a positional, not a second
  // value.
  expect_usage_error("list --backends a.toml b.toml", "not expected: b.toml");
}

// Static supports for query shapes in a backends file: a bad value is one line naming the file, line and key.
TEST(Cli, BadQueryShapeSupportsAreExitTwo) {
  const auto file = scratch() / "shapes.toml";
  const std::string entry =
      "format = \"driftcheck.backends\"\nversion = 1\n[[backend]]\nname = \"decode\"\nop = \"attention\"\n"
      "command = [\"true\"]\nnumerics = \"like:cpu.attn.triton_unified\"\n[backend.supports]\n";
  for (const auto& [line, mentions] : std::vector<std::pair<std::string, std::string>>{
           {"decode_only = \"yes\"", ":9: \"decode_only\" must be true or false"},
           {"max_query_len = -4", ":9: \"max_query_len\" must be an integer >= 1"},
           {"max_head_dim = 0", ":9: \"max_head_dim\" must be an integer >= 1"},
           {"decode_onl = true", ":9: unknown key \"decode_onl\" in supports"}}) {
    std::ofstream(file) << entry << line << "\n";
    expect_usage_error("list --backends " + file.string(), mentions);
  }
  std::ofstream(file) << entry
                      << "decode_only = true\nmax_query_len = 4\nhead_dims = [64, 128]\nmax_head_dim = 128\n";
  const Outcome ok = driftcheck("list --backends " + file.string());
  EXPECT_NE(ok.out.find("decode only; query_len <= 4; head_dim 64/128; head_dim <= 128"), std::string::npos)
      << ok.out << ok.err;
}

TEST(Cli, BadBundlesAreExitTwo) {
  expect_usage_error((scratch() / "no_such_bundle").string(), "no_such_bundle");
  expect_usage_error("replay " + (scratch() / "no_such_bundle").string(), "not a bundle directory");
  const auto bad = scratch() / "bad_bundle";
  fs::create_directories(bad);
  std::ofstream(bad / "case.json") << "{ not json";
  expect_usage_error("replay " + bad.string(), "case.json");
  std::ofstream(bad / "case.json", std::ios::trunc) << R"({"format":"driftcheck.case","format_version":999})";
  expect_usage_error("replay " + bad.string(), "format version 999");
}

TEST(Cli, HelpIsExitZero) {
  const Outcome r = driftcheck("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("fuzz"), std::string::npos);
}

TEST(Cli, ListShowsOpsBackendsAndMutants) {
  const Outcome r = driftcheck("list");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ops: rmsnorm concat dual_rmsnorm_cat attention"), std::string::npos);
  for (const auto& b : driftcheck::registry().all()) {
    EXPECT_NE(r.out.find(std::string(b->name())), std::string::npos) << b->name();
    if (b->kind() == driftcheck::BackendKind::kMutant) {
      EXPECT_NE(r.out.find(std::string(b->bug_class())), std::string::npos) << b->name();
    }
  }
}

const driftcheck::Backend* first_mutant_of(driftcheck::OpKind op) {
  for (const auto& b : driftcheck::registry().all())
    if (b->kind() == driftcheck::BackendKind::kMutant && b->op() == op) return b.get();
  return nullptr;
}

// SIGTERM (or Ctrl-C) ends discovery early and still writes the report, well before the 120 s budget.
TEST(Cli, TerminatedCampaignStillWritesItsReport) {
  const auto out = scratch() / "terminated";
  const Outcome r = driftcheck("fuzz --op concat --seconds 120 --out " + out.string() +
                               " & pid=$!; sleep 1; kill -TERM $pid; wait $pid");
  EXPECT_EQ(r.code, 0) << r.err;
  const auto report = nlohmann::json::parse(slurp(out / "report.json"));
  EXPECT_GT(report.at("cases").get<int>(), 0);
  EXPECT_LT(report.at("seconds").get<double>(), 60.0);
}

// A mutant campaign finds drift (exit 1); its bundle replays alone and fails on the mutant (exit 1) but
// passes on the correct backend it mutates (exit 0); the stream replay of the same case fails too.
TEST(Cli, MutantFindingReplaysFromItsBundleAndFromTheStream) {
  const driftcheck::Backend* mutant = first_mutant_of(driftcheck::OpKind::kConcat);
  ASSERT_NE(mutant, nullptr) << "no concat mutant registered";
  const auto out = scratch() / "mutant_campaign";
  const Outcome fuzz = driftcheck("fuzz --backend " + std::string(mutant->name()) +
                                  " --cases 8 --jobs 2 --out " + out.string());
  ASSERT_EQ(fuzz.code, 1) << fuzz.err;
  const auto report = nlohmann::json::parse(slurp(out / "report.json"));
  ASSERT_FALSE(report.at("groups").empty());
  // The worst group's representative: the shrunk case.
  const auto& g = report.at("groups")[0];
  const std::string bundle = (out / g.at("representative").get<std::string>()).string();
  EXPECT_EQ(driftcheck("replay " + bundle).code, 1);
  EXPECT_EQ(driftcheck("replay " + bundle + " --backend " + std::string(mutant->mutates())).code, 0);
  const auto& f = report.at("findings")[0];
  const Outcome stream =
      driftcheck("replay --seed 1 --case " + std::to_string(f.at("case_index").get<std::uint64_t>()) +
                 " --op concat --backend " + std::string(mutant->name()));
  EXPECT_EQ(stream.code, 1) << stream.out;
}

// A campaign drawn from a compile set names it in its report, and the stream replay of a finding, run with
// the report's stream flags, is the campaign's case: it fails on the mutant as the campaign found. Without
// the flags the same index is another case.
TEST(Cli, ACompileSetCampaignsFindingsReplayWithItsStreamFlags) {
  const driftcheck::Backend* mutant = first_mutant_of(driftcheck::OpKind::kConcat);
  ASSERT_NE(mutant, nullptr);
  const auto out = scratch() / "compile_set_campaign";
  const Outcome fuzz =
      driftcheck("fuzz --backend " + std::string(mutant->name()) +
                 " --cases 12 --jobs 2 --compile-set 2 --shrink-seconds 0 --out " + out.string());
  ASSERT_EQ(fuzz.code, 1) << fuzz.err;
  const auto report = nlohmann::json::parse(slurp(out / "report.json"));
  const std::string stream = report.at("stream").get<std::string>();
  ASSERT_EQ(stream, "--compile-set 2");
  EXPECT_NE(slurp(out / "report.md").find("(`--compile-set 2`)"), std::string::npos);
  ASSERT_FALSE(report.at("findings").empty());
  for (const auto& f : report.at("findings")) {
    const std::string index = std::to_string(f.at("case_index").get<std::uint64_t>());
    const std::string replay =
        fmt::format("replay --seed 1 --case {} --op concat --backend {} {}", index, mutant->name(), stream);
    const Outcome r = driftcheck(replay);
    EXPECT_EQ(r.code, 1) << replay << "\n" << r.out << r.err;
    // The replay drew the finding's case: its shape class is the finding's.
    EXPECT_NE(r.out.find(fmt::format("({})", f.at("shape_class").get<std::string>())), std::string::npos)
        << r.out;
    // The command the report prints runs as printed (a bundle's, or a stream replay with the flags).
    const std::string printed = f.at("replay").get<std::string>();
    ASSERT_EQ(printed.rfind("driftcheck ", 0), 0u) << printed;
    if (printed.find("--seed") != std::string::npos) {
      EXPECT_NE(printed.find("--compile-set 2"), std::string::npos) << printed;
    }
    EXPECT_EQ(driftcheck(printed.substr(printed.find(' ') + 1)).code, 1) << printed;
  }
}

// A mutant is judged with its twin's known upstream defects repaired, in a campaign and in a replay alike:
// every finding's replay, run as printed, reproduces the verdict the campaign recorded, also where the twin's
// own defects (masked rows, a page tail) would have failed the case first.
TEST(Cli, MutantReplaysReproduceTheCampaignsVerdicts) {
  const auto out = scratch() / "mutant_verdicts";
  const Outcome fuzz = driftcheck(
      "fuzz --op attention --backend mutant.attn.page_conversion,mutant.attn.window_off_by_one --cases 200 "
      "--seed 1 --compile-set 4 --jobs 2 --shrink-seconds 0 --out " +
      out.string());
  ASSERT_EQ(fuzz.code, 1) << fuzz.err;
  const auto report = nlohmann::json::parse(slurp(out / "report.json"));
  ASSERT_FALSE(report.at("findings").empty());
  for (const auto& f : report.at("findings")) {
    const std::string printed = f.at("replay").get<std::string>();
    const Outcome r = driftcheck(printed.substr(printed.find(' ') + 1));
    EXPECT_EQ(r.code, 1) << printed;
    EXPECT_NE(r.out.find(fmt::format("FAIL {} {}:", f.at("backend").get<std::string>(),
                                     f.at("verdict").get<std::string>())),
              std::string::npos)
        << printed << "\n"
        << r.out;
  }
}

// `driftcheck report` over a campaign: every campaign writes report.html itself; the command writes the HTML,
// Markdown and JSON of one or several runs, exits 1 when a run found drift, and 2 with one line for a
// directory that holds no run.
TEST(Cli, ReportOverCampaignOutputs) {
  const driftcheck::Backend* mutant = first_mutant_of(driftcheck::OpKind::kConcat);
  ASSERT_NE(mutant, nullptr);
  const auto out = scratch() / "report_campaign";
  ASSERT_EQ(driftcheck("fuzz --backend " + std::string(mutant->name()) + " --cases 8 --jobs 2 --out " +
                       out.string())
                .code,
            1);
  EXPECT_NE(slurp(out / "report.html").find("driftcheck divergence report"), std::string::npos);
  const auto html = scratch() / "r.html", md = scratch() / "r.md", json = scratch() / "r.json";
  const Outcome r = driftcheck("report " + out.string() + " --html " + html.string() + " --markdown " +
                               md.string() + " --json " + json.string() + " --quiet");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(slurp(html).find(std::string(mutant->name())), std::string::npos);
  EXPECT_NE(slurp(md).find("## driftcheck campaign report"), std::string::npos);
  const auto set = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(set.at("format"), "driftcheck.report_set");
  ASSERT_EQ(set.at("runs").size(), 1u);
  EXPECT_EQ(set.at("runs")[0].at("kind"), "campaign");
  EXPECT_FALSE(set.at("runs")[0].at("report").at("groups").empty());
  expect_usage_error("report " + (scratch() / "nowhere").string(), "not a directory");
  fs::create_directories(scratch() / "empty_run");
  expect_usage_error("report " + (scratch() / "empty_run").string(), "no report.json");
}

// Machines read progress as JSON lines on stderr; --quiet silences it (the summary too).
TEST(Cli, ProgressIsJsonForMachinesAndQuietIsSilent) {
  const Outcome json = driftcheck("fuzz --op concat --cases 40 --jobs 2 --progress json --out " +
                                  (scratch() / "progress_json").string());
  EXPECT_EQ(json.code, 0) << json.err;
  std::istringstream lines(json.err);
  std::string line, last;
  int records = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    ++records, last = line;
  }
  ASSERT_GT(records, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(last).at("type"), "progress_end");
  EXPECT_EQ(nlohmann::json::parse(last).at("done"), 40);
  const Outcome quiet =
      driftcheck("fuzz --op concat --cases 8 --jobs 2 -q --out " + (scratch() / "progress_quiet").string());
  EXPECT_EQ(quiet.code, 0);
  EXPECT_TRUE(quiet.err.empty()) << quiet.err;
}

}  // namespace
