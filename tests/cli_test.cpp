// The driftcheck binary as users run it: exit codes (0 clean, 1 drift, 2 bad usage or bad input, 3 internal)
// and one-line errors on stderr for every kind of bad input, then an end-to-end mutant campaign whose bundle
// replays.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_harness.hpp"
#include "driftcheck/device/backend.hpp"

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
  expect_usage_error("replay", "needs a BUNDLE");
  expect_usage_error("replay --seed 1 --case 2 --op rmsnorm --backend nosuch", "unknown backend");
  expect_usage_error("replay --seed 1 --case 2 --op nosuch --backend x", "unknown op");
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
  ASSERT_FALSE(report.at("findings").empty());
  const auto& f = report.at("findings")[0];
  const std::string bundle = (out / f.at("bundle").get<std::string>()).string();
  EXPECT_EQ(driftcheck("replay " + bundle).code, 1);
  EXPECT_EQ(driftcheck("replay " + bundle + " --backend " + std::string(mutant->mutates())).code, 0);
  const Outcome stream =
      driftcheck("replay --seed 1 --case " + std::to_string(f.at("case_index").get<std::uint64_t>()) +
                 " --op concat --backend " + std::string(mutant->name()));
  EXPECT_EQ(stream.code, 1) << stream.out;
}

}  // namespace
