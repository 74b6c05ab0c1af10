// `driftcheck gate`, `baseline update` and `corpus add` as a CI job runs them: exit codes, one-line errors
// for bad input, the JUnit file read back by an independent reader (Debian's python3-junitparser), the
// Markdown summary appended to $GITHUB_STEP_SUMMARY, the ratchet end to end, the replay command in a failure,
// determinism across thread counts, and the project's own corpus (a correct backend passes every entry, a
// mutant fails its own).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "cli_harness.hpp"
#include "driftcheck/device/backend.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/corpus.hpp"
#include "driftcheck/fuzz/golden.hpp"
#include "driftcheck/fuzz/input_error.hpp"
#include "driftcheck/fuzz/known_findings.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/sha256.hpp"
#include "driftcheck_process.hpp"

namespace driftcheck::fuzz {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using harness::Outcome;
using harness::slurp;
using harness::spit;

fs::path scratch() {
  static const harness::Scratch s("gate_cli_test");
  return s.dir;
}

Outcome run(const std::string& cmd) {
  return harness::run_command(cmd, scratch());
}

Outcome driftcheck(const std::string& args) {
  return run(std::string(DRIFTCHECK_BIN) + " " + args + " --quiet");
}

Outcome driftcheck_plain(const std::string& args) {  // commands without progress options
  return run(std::string(DRIFTCHECK_BIN) + " " + args);
}

json junit(const fs::path& file) {
  const Outcome r = run(std::string(DRIFTCHECK_PYTHON) + " " + DRIFTCHECK_TESTS_DIR +
                        "/python/junit_summary.py " + file.string());
  EXPECT_EQ(r.code, 0) << r.err;
  return json::parse(r.out);
}

// A small gate: two cheap ops, a few hundred cases.
std::string config(const std::string& extra_gate = "", const std::string& rest = "") {
  return "format_version = 1\n[gate]\nops = [\"rmsnorm\", \"concat\"]\nbackends = [\"cpu.rmsnorm.cuda\", "
         "\"cpu.concat.copy\"]\nseed = 5\ncases = 120\nbaseline = \"baseline.json\"\n" +
         extra_gate + "\n" + rest;
}

void expect_bad(const std::string& args, const std::string& kind, const std::string& mentions) {
  const Outcome r = driftcheck_plain(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  EXPECT_NE(r.err.find("driftcheck: " + kind), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(mentions), std::string::npos) << args << ": " << r.err;
}

TEST(GateCli, BadInputIsExitTwoWithOneLineNamingTheFile) {
  const fs::path d = scratch() / "bad";
  const std::string out = " --quiet --out " + (d / "out").string();
  spit(d / "syntax.toml", "format_version = 1\n[gate\n");
  expect_bad("gate --config " + (d / "syntax.toml").string() + out, "bad config", "syntax.toml:2:");
  expect_bad("gate --config " + (d / "missing.toml").string() + out, "bad config",
             "missing.toml: cannot read");
  spit(d / "unknown.toml", config("", "[budgets.\"cpu.nosuch*\"]\nmax_ratio = 0.5\n"));
  expect_bad("gate --config " + (d / "unknown.toml").string() + out, "bad config",
             "budgets.\"cpu.nosuch*\" matches no backend");
  spit(d / "glob.toml", config().replace(config().find("cpu.concat.copy"), 15, "gpu.nosuch"));
  expect_bad("gate --config " + (d / "glob.toml").string() + out, "bad config",
             "unknown backend 'gpu.nosuch'");
  spit(d / "budget.toml", config("", "[budgets.default]\nmax_share_beyond = 0.5\n"));
  expect_bad("gate --config " + (d / "budget.toml").string() + out, "bad config", "beyond_tolerance");
  spit(d / "baseline.json", R"({"format": "driftcheck.baseline", "format_version": 7})");
  spit(d / "good.toml", config());
  expect_bad("gate --config " + (d / "good.toml").string() + out, "bad baseline", "format version 7");
  fs::remove(d / "baseline.json");
  spit(d / "corpus/CORPUS.json", R"({"format": "driftcheck.corpus", "format_version": 0})");
  spit(d / "corpus.toml", config("corpus = \"corpus\""));
  expect_bad("gate --config " + (d / "corpus.toml").string() + out, "bad corpus", "format version 0");
  spit(d / "corpus/CORPUS.json",
       R"({"format": 5, "format_version": 1})");  // was nlohmann's type_error, exit 3
  expect_bad("gate --config " + (d / "corpus.toml").string() + out, "bad corpus",
             "format is not driftcheck.corpus");
  const std::string run_dir = " --out " + (d / "out").string();
  expect_bad("baseline update --config " + (d / "good.toml").string() + run_dir + " --allow-loosen", "error",
             "--allow-loosen needs --reason");
  expect_bad("baseline update --config " + (d / "good.toml").string() + run_dir, "error", "no gate run in");
  expect_bad("corpus add " + (d / "nobundle").string() + " --corpus " + (d / "c2").string(), "bad bundle",
             "not a bundle directory");
}

// A new gate's corpus: the gate's error offers `driftcheck corpus init DIR`, which creates it empty; the gate
// then runs on it (a first run fails on its missing baseline alone), and init on it again leaves it as it is.
TEST(GateCli, MissingCorpusOffersCorpusInit) {
  const fs::path d = scratch() / "new_corpus";
  spit(d / "gate.toml", config("corpus = \"ci/corpus\""));
  const std::string gate =
      "gate --config " + (d / "gate.toml").string() + " --quiet --out " + (d / "out").string();
  const std::string dir = (d / "ci/corpus").string();
  expect_bad(gate, "bad corpus", "no such directory (create one with `driftcheck corpus init " + dir + "`)");
  fs::create_directories(d / "ci/corpus");
  expect_bad(
      gate, "bad corpus",
      "has no CORPUS.json: not a driftcheck corpus (create one with `driftcheck corpus init " + dir + "`)");
  Outcome r = driftcheck_plain("corpus init --config " + (d / "gate.toml").string());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("created " + dir), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(d / "ci/corpus/CORPUS.json"));
  r = driftcheck_plain(gate);  // the corpus is read (empty); a first run fails on its missing baseline only
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("0 corpus cases"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAILED (1 of"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no baseline at"), std::string::npos) << r.out;
  r = driftcheck_plain("corpus init " + dir);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("present " + dir), std::string::npos) << r.out;
  spit(d / "full/x", "not a corpus");
  expect_bad("corpus init " + (d / "full").string(), "bad corpus", "not empty and has no CORPUS.json");
  expect_bad("corpus init " + (d / "full/x").string(), "bad corpus", "not a directory");
  expect_bad("corpus init", "error", "corpus init needs a DIR or --config FILE");
}

TEST(GateCli, RatchetEndToEndWithJUnitAndSummaries) {
  const fs::path d = scratch() / "ratchet";
  spit(d / "gate.toml", config());
  const std::string gate = "gate --config " + (d / "gate.toml").string() + " --out " + (d / "out").string() +
                           " --junit " + (d / "junit.xml").string() + " --summary " +
                           (d / "summary.md").string();
  // No baseline yet: the gate runs everything, says how to create one, and fails.
  Outcome r = driftcheck(gate);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("baseline update --config"), std::string::npos) << r.out;
  r = driftcheck_plain("baseline update --config " + (d / "gate.toml").string() + " --out " +
                       (d / "out").string());
  ASSERT_EQ(r.code, 0) << r.err;
  const json created = json::parse(slurp(d / "baseline.json"));
  EXPECT_EQ(created["history"][0]["action"], "create");

  const fs::path step_summary = d / "step_summary.md";
  spit(step_summary, "earlier step\n");
  r = run("GITHUB_STEP_SUMMARY=" + step_summary.string() + " " + DRIFTCHECK_BIN + " " + gate + " --quiet");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(slurp(step_summary).starts_with("earlier step\n## driftcheck gate: passed"))
      << slurp(step_summary);
  EXPECT_EQ(slurp(d / "summary.md"), slurp(d / "out/summary.md"));
  EXPECT_NE(slurp(d / "summary.md").find("| cpu.rmsnorm.cuda | rmsnorm |"), std::string::npos);

  // One testcase per backend x op x check, metrics as properties, read by junitparser (known findings the
  // stream meets are testcases of their own: KnownFindingsAreListedApartAndNeverFailTheGate).
  json j = junit(d / "junit.xml");
  EXPECT_EQ(j["failures"], 0);
  std::set<std::string> names;
  for (const auto& c : j["cases"]) {
    if (c["classname"] == "known finding") continue;
    names.insert(c["classname"].get<std::string>() + " " + c["name"].get<std::string>());
    EXPECT_EQ(c["result"], "passed") << c.dump();
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"cpu.rmsnorm.cuda rmsnorm budget", "cpu.rmsnorm.cuda rmsnorm baseline",
                                   "cpu.concat.copy concat budget", "cpu.concat.copy concat baseline"}));
  const auto budget = std::find_if(j["cases"].begin(), j["cases"].end(),
                                   [](const auto& c) { return c["name"] == "rmsnorm budget"; });
  ASSERT_NE(budget, j["cases"].end());
  EXPECT_GT(std::stoi((*budget)["properties"]["cases"].get<std::string>()), 0);
  EXPECT_TRUE((*budget)["properties"].contains("p99_ratio"));
  EXPECT_TRUE((*budget)["properties"].contains("mean_signed_ulps"));

  // A baseline tighter than what the kernel does: the run is measurably worse, with the case to replay.
  json tight = json::parse(slurp(d / "baseline.json"));
  for (auto& e : tight["entries"])
    if (e["backend"] == "cpu.rmsnorm.cuda") e["p99_ratio"] = e["p99_ratio"].get<double>() / 2;
  spit(d / "baseline.json", tight.dump(2));
  r = driftcheck(gate);
  EXPECT_EQ(r.code, 1) << r.err;
  j = junit(d / "junit.xml");
  EXPECT_EQ(j["failures"], 1);
  std::string replay;
  for (const auto& c : j["cases"]) {
    if (c["result"] != "failure") continue;
    EXPECT_EQ(c["name"], "rmsnorm baseline");
    EXPECT_NE(c["message"].get<std::string>().find("measurably worse"), std::string::npos) << c.dump();
    const std::string text = c["text"];
    const auto at = text.find("driftcheck replay --seed 5 --case ");
    ASSERT_NE(at, std::string::npos) << text;
    replay = text.substr(at + 11, text.find('\n', at) - at - 11);
  }
  EXPECT_NE(slurp(d / "summary.md").find("**worse**"), std::string::npos);
  EXPECT_EQ(driftcheck_plain(replay).code, 0) << replay;  // the case itself passes the oracle

  // Loosening back needs a reason, which stays in the file with the date.
  r = driftcheck_plain("baseline update --config " + (d / "gate.toml").string() + " --out " +
                       (d / "out").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("refused"), std::string::npos) << r.err;
  r = run("SOURCE_DATE_EPOCH=1767225600 " + std::string(DRIFTCHECK_BIN) + " baseline update --config " +
          (d / "gate.toml").string() + " --out " + (d / "out").string() +
          " --allow-loosen --reason 'test: loosen'");
  EXPECT_EQ(r.code, 0) << r.err;
  const json loosened = json::parse(slurp(d / "baseline.json"));
  const auto& h = loosened["history"];
  const auto event = std::find_if(h.begin(), h.end(), [](const auto& e) { return e["action"] == "loosen"; });
  ASSERT_NE(event, h.end()) << loosened.dump(2);
  EXPECT_EQ((*event)["reason"], "test: loosen");
  EXPECT_EQ((*event)["date"], "2026-01-01T00:00:00Z");
  EXPECT_EQ(driftcheck(gate).code, 0);

  // The run's config must be the config the baseline belongs to.
  spit(d / "gate.toml", config() + "# edited\n");
  r = driftcheck_plain("baseline update --config " + (d / "gate.toml").string() + " --out " +
                       (d / "out").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("SHA-256 differs"), std::string::npos) << r.err;
}

TEST(GateCli, BudgetFailureNamesTheCaseToReplayAndStatisticsDoNotDependOnThreads) {
  const fs::path d = scratch() / "budget";
  spit(d / "gate.toml", config("", "[budgets.\"cpu.rmsnorm.cuda\"]\nmax_ratio = 0.25\n"));
  const std::string gate = "gate --config " + (d / "gate.toml").string();
  Outcome r = driftcheck(gate + " --jobs 1 --out " + (d / "one").string());
  EXPECT_EQ(r.code, 1) << r.err;
  const json j = junit(d / "one/junit.xml");
  bool seen = false;
  for (const auto& c : j["cases"]) {
    if (c["name"] != "rmsnorm budget") continue;
    seen = true;
    EXPECT_EQ(c["result"], "failure");
    EXPECT_NE(c["message"].get<std::string>().find("> max_ratio 0.25"), std::string::npos) << c.dump();
    EXPECT_NE(c["text"].get<std::string>().find("driftcheck replay --seed 5 --case "), std::string::npos);
  }
  EXPECT_TRUE(seen);
  r = driftcheck(gate + " --jobs 2 --out " + (d / "two").string());
  EXPECT_EQ(r.code, 1);
  const json one = json::parse(slurp(d / "one/gate.json")), two = json::parse(slurp(d / "two/gate.json"));
  EXPECT_EQ(one["stats"], two["stats"]);
  EXPECT_FALSE(one["stats"].empty());
}

// A failure that a known finding explains (golden/known-findings.toml: case 3 of seed 20261130 is the csrc
// rms_norm's misaligned vector fault, which its faithful twin reproduces) is listed apart: the gate passes,
// the JUnit file has a skipped testcase for the finding, the summary a section of its own.
TEST(GateCli, KnownFindingsAreListedApartAndNeverFailTheGate) {
  const fs::path d = scratch() / "known";
  spit(d / "gate.toml",
       "format_version = 1\n[gate]\nops = [\"rmsnorm\"]\nbackends = [\"cpu.rmsnorm.cuda\"]\nseed = 20261130\n"
       "cases = 4\nbaseline = \"baseline.json\"\n");
  const std::string gate = "gate --config " + (d / "gate.toml").string() + " --out " + (d / "out").string();
  ASSERT_EQ(driftcheck(gate).code, 1);  // no baseline yet
  ASSERT_EQ(driftcheck_plain("baseline update --config " + (d / "gate.toml").string() + " --out " +
                             (d / "out").string())
                .code,
            0);
  const Outcome r = driftcheck(gate);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("### Known findings"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("### Failed checks"), std::string::npos) << r.out;
  const json j = junit(d / "out/junit.xml");
  EXPECT_EQ(j["failures"], 0);
  bool seen = false;
  for (const auto& c : j["cases"]) {
    if (c["classname"] != "known finding") continue;
    seen = true;
    EXPECT_EQ(c["name"], "vllm-rms-norm-misaligned-vector");
    EXPECT_EQ(c["result"], "skipped");
    EXPECT_GE(std::stoi(c["properties"]["campaign_cases"].get<std::string>()), 1) << c.dump();
    EXPECT_NE(c["properties"]["replay"].get<std::string>().find("--seed 20261130 --case 3"),
              std::string::npos);
  }
  EXPECT_TRUE(seen) << j.dump();
}

TEST(GateCli, CorpusIsContentAddressedAndTheGateReRunsIt) {
  const fs::path d = scratch() / "corpus";
  // A mutant campaign's shrunk findings seed a corpus.
  Outcome r =
      driftcheck("fuzz --backend mutant.concat.halves_swapped --cases 8 --shrink-seconds 20 --jobs 1 --out " +
                 (d / "campaign").string() + " --corpus " + (d / "corpus").string());
  EXPECT_EQ(r.code, 1) << r.err;
  ASSERT_TRUE(fs::exists(d / "corpus/CORPUS.json")) << r.err;
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(d / "corpus"))
    if (e.is_directory()) entries.push_back(e.path());
  ASSERT_FALSE(entries.empty());
  // Adding an entry again keeps one copy.
  r = driftcheck_plain("corpus add " + entries[0].string() + " --corpus " + (d / "corpus").string());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with("present ")) << r.out;
  // The correct backend passes every entry; the mutant fails its own.
  spit(d / "gate.toml",
       config("corpus = \"corpus\"").replace(config().find("cases = 120"), 11, "cases = 40"));
  const std::string gate = "gate --config " + (d / "gate.toml").string() + " --out " + (d / "out").string();
  r = driftcheck(gate);
  EXPECT_EQ(r.code, 1);  // no baseline yet
  const json j = junit(d / "out/junit.xml");
  for (const auto& c : j["cases"]) {
    if (c["name"] == "concat corpus") {
      EXPECT_EQ(c["result"], "passed") << c.dump();
    }
  }
  EXPECT_EQ(driftcheck_plain("baseline update --config " + (d / "gate.toml").string() + " --out " +
                             (d / "out").string())
                .code,
            0);
  r = driftcheck(gate + " --mutants");
  const json mutants = json::parse(slurp(d / "out/gate.json"));
  for (const auto& m : mutants["mutant_detection"]) {
    if (m["mutant"] != "mutant.concat.halves_swapped") continue;
    const auto& by = m["caught_by"];
    EXPECT_NE(std::find(by.begin(), by.end(), "corpus"), by.end()) << m.dump();
  }
  // An edited entry no longer matches its address: exit 2, naming it.
  {
    std::fstream f(entries[0] / "tensors.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');
  }
  r = driftcheck(gate);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("does not match its address"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(entries[0].filename().string()), std::string::npos) << r.err;
}

// Golden files: a tensor whose bytes no longer match its SHA-256 is bad input (exit 2, naming file and
// tensor); a reference that moved (stored bytes and checksum both changed) is a failure that says where and
// by how much.
TEST(GoldenCli, ShaMismatchIsBadInputAndAMovedReferenceSaysExactlyHowItMoved) {
  const fs::path d = scratch() / "golden";
  fs::create_directories(d);
  const fs::path src = fs::path(DRIFTCHECK_SOURCE_DIR) / "golden";
  for (const char* f : {"dual_h4096_bf16.json", "dual_h4096_bf16.safetensors"}) fs::copy_file(src / f, d / f);
  Outcome r = driftcheck_plain("golden verify --dir " + d.string() + " --backend cpu.dual.fused");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("reference dual_h4096_bf16: bit-identical"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dual_h4096_bf16 on cpu.dual.fused: PASS"), std::string::npos) << r.out;

  // Rewrite the last reference element (the file lays fp64 tensors out first, ref.out among them) with a
  // neighbouring double, then make the metadata agree with the new bytes: only the reference check can
  // notice.
  std::string bytes = slurp(d / "dual_h4096_bf16.safetensors");
  std::uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const json h = json::parse(bytes.substr(8, header));
  const auto offsets = h["ref.out"]["data_offsets"];
  const std::size_t last = 8 + header + offsets[1].get<std::size_t>() - 8;
  double v = 0;
  std::memcpy(&v, bytes.data() + last, 8);
  v = std::nextafter(v, INFINITY);
  std::memcpy(bytes.data() + last, &v, 8);
  spit(d / "dual_h4096_bf16.safetensors", bytes);
  r = driftcheck_plain("golden verify --dir " + d.string() + " --backend cpu.dual.fused");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("driftcheck: bad golden: " + (d / "dual_h4096_bf16.safetensors").string() +
                       ": tensor ref.out: SHA-256"),
            std::string::npos)
      << r.err;
  json meta = json::parse(slurp(d / "dual_h4096_bf16.json"));
  const std::string data(bytes.data() + 8 + header + offsets[0].get<std::size_t>(),
                         offsets[1].get<std::size_t>() - offsets[0].get<std::size_t>());
  meta["tensors"]["ref.out"]["sha256"] = sha256_hex(data);
  spit(d / "dual_h4096_bf16.json", meta.dump(2));
  r = driftcheck_plain("golden verify --dir " + d.string() + " --backend cpu.dual.fused");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("reference dual_h4096_bf16: MOVED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("out: 1 of 32768 elements differ; first at [3, 8191]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(1 ulps of fp64)"), std::string::npos) << r.out;
  meta["format_version"] = 2;
  spit(d / "dual_h4096_bf16.json", meta.dump(2));
  r = driftcheck_plain("golden verify --dir " + d.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("format version 2 (this driftcheck reads 1)"), std::string::npos) << r.err;
  // A field of the wrong type let nlohmann's type_error out of the reader (exit 3), a float where an integer
  // goes was converted without a range check (undefined behaviour): exit 2 naming the field.
  meta["format_version"] = "1";
  spit(d / "dual_h4096_bf16.json", meta.dump(2));
  r = driftcheck_plain("golden verify --dir " + d.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("format version \"1\" (this driftcheck reads 1)"), std::string::npos) << r.err;
  meta["format_version"] = 1;
  meta["tensors"]["ref.out"]["shape"] = json::array({1e300});
  spit(d / "dual_h4096_bf16.json", meta.dump(2));
  r = driftcheck_plain("golden verify --dir " + d.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("field 'tensors.ref.out.shape': expected an integer, got number"), std::string::npos)
      << r.err;
}

// Ctrl-C / SIGTERM while the gate's campaign is inside a case that takes minutes (the slow test plugin sleeps
// 600 s in its third run call): the gate ends a grace after the signal with exit 1, no verdict ("interrupted"
// in gate.json), and `baseline update` refuses the run.
TEST(GateCli, ASignalWhileACaseTakesMinutesEndsTheGateWithoutAVerdict) {
  const fs::path d = scratch() / "interrupted";
  fs::create_directories(d);
  spit(d / "gate.toml",
       "format_version = 1\n[gate]\nops = [\"concat\"]\nbackends = [\"plugin.test_concat\"]\nseed = 5\n"
       "cases = 40\nbaseline = \"baseline.json\"\n");
  driftcheck::testing::ChildOptions o;
  o.env.push_back("DC_TEST_PLUGIN_SLOW_CALL=3");
  driftcheck::testing::Child c(
      {"gate", "--plugin", DRIFTCHECK_SLOW_PLUGIN, "--config", (d / "gate.toml").string(), "--out",
       (d / "out").string(), "--grace-seconds", "1"},
      o);
  ASSERT_TRUE(c.wait_for_err("sleeps", 600)) << c.err_so_far();
  const auto t0 = std::chrono::steady_clock::now();
  c.signal(SIGTERM);
  const auto r = c.wait(900);
  // 1 s of grace, then the outputs: well under the 600 s the call takes (the margin is for a loaded machine).
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1 + 20) << r.err;
  EXPECT_EQ(r.code, 1) << r.err;
  const json g = json::parse(slurp(d / "out/gate.json"));
  const auto& errors = g.at("errors");
  EXPECT_TRUE(std::any_of(errors.begin(), errors.end(), [](const json& e) {
    return e.get<std::string>().starts_with("interrupted");
  })) << errors;
  const Outcome u = driftcheck_plain("baseline update --config " + (d / "gate.toml").string() + " --out " +
                                     (d / "out").string());
  EXPECT_EQ(u.code, 2) << u.err;
  EXPECT_NE(u.err.find("interrupted run"), std::string::npos) << u.err;
}

// The metadata reader (NAME.json) takes every committed file, and rejects each malformed field with one line
// that names the file and the field, before any tensors file is opened: a tensors_file outside the golden
// directory included.
TEST(GoldenMetadata, EveryMalformedFieldIsOneLineNamingFileAndField) {
  const fs::path dir = fs::path(DRIFTCHECK_SOURCE_DIR) / "golden";
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    ++files;
    const GoldenMetadata m = parse_golden_metadata(slurp(e.path()), e.path());
    EXPECT_EQ(m.name + ".json", e.path().filename().string());
    EXPECT_EQ(m.tensors_file, m.name + ".safetensors");
    EXPECT_FALSE(m.tensors.empty());
  }
  EXPECT_GE(files, 10);
  const json valid = json::parse(slurp(dir / "dual_h4096_bf16.json"));
  const std::string tensor = valid["tensors"].begin().key();
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["name"] = 7; }, "field 'name': expected a string"},
      {[](json& j) { j.erase("description"); }, "field 'description'"},
      {[](json& j) { j["format_version"] = "1"; }, "format version \"1\" (this driftcheck reads 1)"},
      {[](json& j) { j["spec"]["hidden"] = "wide"; }, "hidden"},
      {[](json& j) { j["tensors_file"] = "../../etc/passwd"; }, "field 'tensors_file'"},
      {[](json& j) { j["tensors"] = json::array(); }, "field 'tensors'"},
      {[&](json& j) { j["tensors"][tensor] = 1; }, "field 'tensors." + tensor + "'"},
      {[&](json& j) { j["tensors"][tensor]["dtype"] = "bf17"; }, "field 'tensors." + tensor + ".dtype'"},
      {[&](json& j) { j["tensors"][tensor]["shape"][0] = -4; }, "field 'tensors." + tensor + ".shape'"},
      {[&](json& j) { j["tensors"][tensor]["sha256"] = "ABC"; }, "field 'tensors." + tensor + ".sha256'"},
      {[](json& j) { j = json::array(); }, "not a JSON object"},
  };
  for (const auto& [edit, expected] : cases) {
    json j = valid;
    edit(j);
    try {
      (void)parse_golden_metadata(j.dump(), "golden/x.json");
      ADD_FAILURE() << "accepted: " << j.dump();
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.kind(), "golden");
      EXPECT_TRUE(what.starts_with("golden/x.json: ")) << what;
      EXPECT_NE(what.find(expected), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

// examples/gate: a gate on a kernel outside driftcheck (the NumPy RMSNorm worker) passes with its committed
// baseline and corpus, and the same gate on the kernel's planted bug fails on its budget and on its corpus
// case.
TEST(GateCli, ExampleGateOnAnExternalKernelPassesAndItsPlantedBugFails) {
  const fs::path ex = fs::path(DRIFTCHECK_SOURCE_DIR) / "examples/gate";
  // The backends file runs `python3`: Debian's, which has NumPy, must be the one found.
  const std::string env = "PATH=" + fs::path(DRIFTCHECK_PYTHON).parent_path().string() + ":\"$PATH\" ";
  Outcome r = run(env + DRIFTCHECK_BIN + " gate --quiet --config " + (ex / "gate.toml").string() + " --out " +
                  (scratch() / "example").string());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  std::string planted = slurp(ex / "gate.toml");
  planted.replace(planted.find("backends = [\"ext.numpy.rmsnorm\"]"), 32,
                  "backends = [\"ext.numpy.rmsnorm.planted_stride_ignored\"]");
  for (const char* key : {"backends_file = \"", "corpus = \""})
    planted.insert(planted.find(key) + std::string(key).size(), ex.string() + "/");
  spit(scratch() / "planted/gate.toml", planted);
  r = run(env + DRIFTCHECK_BIN + " gate --quiet --config " + (scratch() / "planted/gate.toml").string() +
          " --out " + (scratch() / "planted/out").string());
  EXPECT_EQ(r.code, 1) << r.err;
  const json j = junit(scratch() / "planted/out/junit.xml");
  std::set<std::string> failed;
  for (const auto& c : j["cases"])
    if (c["result"] == "failure") failed.insert(c["name"].get<std::string>());
  EXPECT_TRUE(failed.count("rmsnorm budget")) << j.dump();
  EXPECT_TRUE(failed.count("rmsnorm corpus")) << j.dump();

  // The same kernel declaring a compile set: the gate still runs the config's whole stream (the one its
  // baseline was measured on), so it passes as before and its campaign names no compile set.
  const fs::path py = fs::path(DRIFTCHECK_SOURCE_DIR) / "examples/python";
  std::string jit = slurp(py / "rmsnorm_numpy.toml");
  const std::string entry = "name = \"numpy.rmsnorm\"\n";
  jit.insert(jit.find(entry) + entry.size(), "compile_set = 3\ncwd = \"" + py.string() + "\"\n");
  jit.replace(jit.find("\"../../python\""), 14, "\"" + (py / "../../python").string() + "\"");
  spit(scratch() / "jit/rmsnorm_numpy.toml", jit);
  std::string config_jit = slurp(ex / "gate.toml");
  config_jit.replace(config_jit.find("../python/rmsnorm_numpy.toml"), 28,
                     (scratch() / "jit/rmsnorm_numpy.toml").string());
  for (const char* key : {"baseline = \"", "corpus = \""})
    config_jit.insert(config_jit.find(key) + std::string(key).size(), ex.string() + "/");
  spit(scratch() / "jit/gate.toml", config_jit);
  r = run(env + DRIFTCHECK_BIN + " gate --quiet --config " + (scratch() / "jit/gate.toml").string() +
          " --out " + (scratch() / "jit/out").string());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  const json campaign = json::parse(slurp(scratch() / "jit/out/campaign/report.json"));
  EXPECT_FALSE(campaign.contains("stream")) << campaign.value("stream", "");
  EXPECT_EQ(campaign.at("cases"), 300);
}

// The project's own corpus (.ci/gate/corpus): every correct backend of an entry's op passes it (or does not
// support it, or fails it as a known finding: an upstream defect its twin reproduces), and the mutant an
// entry came from, with its twin's known defects repaired as in every mutant proof, fails it as recorded.
TEST(ProjectCorpus, CorrectBackendsPassEveryEntryAndEachMutantFailsItsOwn) {
  const auto corpus = load_corpus(fs::path(DRIFTCHECK_SOURCE_DIR) / ".ci/gate/corpus");
  ASSERT_GE(corpus.size(), 19u);
  std::set<std::string> mutants_with_entries;
  for (const auto& e : corpus) {
    const PreparedCase prepared = prepare(e.bundle.pristine.clone());
    for (const auto& b : registry().all()) {
      std::string why;
      if (b->op() != e.bundle.spec.op || !b->available(&why) || !b->supports(e.bundle.pristine).ok) continue;
      const bool own = b->name() == e.origin_backend;
      if (b->kind() == BackendKind::kMutant && !own) continue;
      const auto repaired = own ? repaired_backend(builtin_known_findings(), *b) : nullptr;
      const Evaluation ev = evaluate(repaired ? *repaired : *b, prepared);
      if (own) {
        EXPECT_EQ(verdict_name(ev.verdict), e.origin_verdict) << e.id << " on " << b->name();
        mutants_with_entries.insert(e.origin_backend);
      } else if (ev.verdict != Verdict::kUnsupported &&
                 (!is_failure(ev.verdict) ||
                  explain_failure(builtin_known_findings(), *b, prepared).empty())) {
        EXPECT_EQ(ev.verdict, Verdict::kPass) << e.id << " on " << b->name() << ": " << ev.detail;
      }
    }
  }
  // Every mutant of a CPU twin has at least one entry of its own. The project gate selects CPU backends only;
  // the GPU kernels' mutants (registered in a CUDA/HIP build, mutant.gpu.*) face gpu_test's
  // GpuMutants.EveryOneIsCaught on a GPU instead.
  for (const auto& b : registry().all()) {
    if (b->kind() != BackendKind::kMutant || b->name().starts_with("mutant.gpu.")) continue;
    EXPECT_TRUE(mutants_with_entries.count(std::string(b->name()))) << b->name();
  }
}

}  // namespace
}  // namespace driftcheck::fuzz
